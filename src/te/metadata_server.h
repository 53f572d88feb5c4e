/* Embeddable HTTP metadata server (upstream REST protocol) on libmicrohttpd, used by the
 * standalone tool mooncake_http_metadata_server and by the master's
 * --enable_http_metadata_server.
 *
 * Routes:
 *   GET    /metadata?key=K   200 value | 404 "metadata not found"
 *   PUT    /metadata?key=K   body = value (<= MC_META_VALUE_MAX, else 413) -> 200
 *   DELETE /metadata?key=K   200 (404 if absent, as upstream)
 *   GET    /health           200 "OK"
 * Missing/empty key or key over MC_META_KEY_MAX -> 400; other paths 404; other methods 405;
 * PUT while more than 64 MiB of request bodies are buffered server-wide -> 503.
 *
 * Authentication (when the server has a keyring): every request except GET /health must carry
 * valid credentials of the HTTP challenge-response scheme (common/http_auth.h), reads
 * included (descriptors reveal addresses); otherwise 401 with a WWW-Authenticate challenge and
 * nothing is read or changed. An anonymous PUT is refused before its body is buffered.
 *
 * Connections: at most 1024 at once, 64 from one IP address, closed after 10 s idle, served by
 * 4 threads (epoll), so one address holding many idle connections cannot lock others out.
 *
 * Persistence (optional): every PUT/DELETE is appended to a log file and fdatasync'ed before
 * the reply (a 200 means durable). Records are length-prefixed with an XXH3 checksum; the log is
 * replayed at start, a torn or corrupt tail is truncated with a warning; the log is compacted
 * (snapshot to a temp file + rename) when it grows past 2x the live data. See
 * docs/internals/metadata.md.
 */
#ifndef MC_TE_METADATA_SERVER_H
#define MC_TE_METADATA_SERVER_H

#include "common/auth.h"
#include "mooncake/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct mc_meta_server mc_meta_server_t;

/* Start serving on host:port (port 0 = ephemeral, see mc_meta_server_port). persist_path NULL
 * or "" = memory only; otherwise the log is created or replayed (MC_ERR_FILE_OPEN_FAIL /
 * MC_ERR_FILE_READ_FAIL if it cannot be opened or is not a metadata log). Strings are
 * borrowed for the call. The server runs on its own threads until mc_meta_server_stop(). */
mc_status_t mc_meta_server_start(const char *host, uint16_t port, const char *persist_path,
                                 mc_meta_server_t **srv_p);

typedef struct mc_meta_server_opts {
    const char *host;          /* NULL or "" = 0.0.0.0 */
    uint16_t port;             /* 0 = ephemeral */
    const char *persist_path;  /* NULL or "" = memory only */
    /* Keyring that requests must prove (borrowed, must outlive the server). When NULL, a
     * non-empty auth_token_file is loaded (errors fail the start); neither = open server
     * (a warning when bound to a non-loopback address). */
    const mc_auth_t *auth;
    const char *auth_token_file;
} mc_meta_server_opts_t;
/* mc_meta_server_start with options (strings borrowed for the call). */
mc_status_t mc_meta_server_start_opts(const mc_meta_server_opts_t *opts, mc_meta_server_t **srv_p);
uint16_t mc_meta_server_port(const mc_meta_server_t *srv);
size_t mc_meta_server_count(mc_meta_server_t *srv); /* live keys */
/* Stops the threads, closes the log, frees everything. NULL is a no-op. */
void mc_meta_server_stop(mc_meta_server_t *srv);

#endif
