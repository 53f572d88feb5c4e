/* Transfer-engine tuning from the environment, for programs (tools/, bench/): the one place
 * that reads the variables the transfer engine's tuning fields are documented with
 * (include/mooncake/te.h, mc_te_config_t). The library itself reads no environment.
 *
 *   MC_TE_TIMEOUT_MS       transfer_timeout_ms   ms, 1..4294967295
 *   MC_TE_TCP_CONNECTIONS  tcp_connections       1..64
 *   MC_TE_WORKERS          worker_threads        1..32
 *   MC_TE_SLICE_SIZE       slice_size            bytes, 4096..67108864
 *   MC_FORCE_TCP           force_tcp             0 or 1
 *   MC_TE_HUGEPAGES        hugepages             0 (gives -1: never) or 1
 *   MC_TE_TCP_STRIPE       tcp_stripe            1..64
 *   MC_TE_TCP_BUF          tcp_socket_buf        bytes, 4096..1073741824
 *   MC_BUSY_POLL_US        busy_poll_us          µs, 0..10000 (0 gives -1: never spin)
 *   MC_META_TIMEOUT_MS     metadata_timeout_ms   ms, 100..600000
 *   MC_REDIS_USERNAME      redis_username        1..1024 bytes, no blanks or control chars
 *   MC_REDIS_PASSWORD      redis_password        1..1024 bytes, no control chars (never shown)
 *   MC_REDIS_DB_INDEX      redis_db_index        0..255
 *   MC_AUTH_TOKEN_FILE     auth_token_file       a path, 1..4096 bytes (docs/security.md)
 *   MC_TE_IDLE_TIMEOUT_S   tcp_idle_timeout_s    s, 1..86400
 *   MC_TE_MAX_SERVER_CONNS tcp_max_server_conns  16..65536
 *
 * Uses only the public headers, so programs linked against libmooncake.so alone can use it.
 */
#ifndef MC_TOOLS_TE_ENV_H
#define MC_TOOLS_TE_ENV_H

#include "mooncake/te.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fills the tuning fields of cfg from the variables above (the redis ones point into the
 * environment, so they stay valid while it is not changed). A variable that is unset or empty
 * leaves its field as it was, so a caller may set defaults first and command-line values
 * after. metadata_uri, local_server_name and protocol are never touched. Returns MC_OK, or
 * MC_ERR_INVALID_PARAMS with a message in err (NUL-terminated, errlen may be 0) naming the
 * variable, what it accepts and what it got; cfg is then unchanged. */
mc_status_t mc_tool_te_config_from_env(mc_te_config_t *cfg, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
