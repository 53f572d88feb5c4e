/* Metadata store client: where segment descriptors are published and found.
 *
 * Backends, chosen by the connection string given to mc_meta_open():
 *   "http://host:port/metadata"  REST key-value (GET|PUT|DELETE <url>?key=K), upstream protocol
 *   "etcd://host:port[;host:port...]"  etcd v3 through its JSON gateway (libcurl)
 *   "redis://[[user]:password@]host[:port][/db]"  Redis strings (hiredis), upstream layout
 *   "P2PHANDSHAKE"  no store: descriptors are fetched from the peer itself by the engine;
 *                   put/del succeed locally, get returns MC_ERR_NOT_SUPPORTED.
 * Keys are plain strings ("mooncake/ram/<segment>"); values are opaque strings (JSON).
 * Thread-safe: one handle may be used from several threads.
 */
#ifndef MC_TE_METADATA_H
#define MC_TE_METADATA_H

#include "common/auth.h"
#include "mooncake/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mc_meta mc_meta_t;

#define MC_META_KEY_MAX 1024            /* keys longer than this are refused */
#define MC_META_VALUE_MAX (4u << 20)    /* values (and responses) capped at 4 MiB */
#define MC_META_SEGMENT_PREFIX "mooncake/ram/"

/* Total time of one http/etcd/redis request (connect: at most 2000 ms of it). */
#define MC_META_DEFAULT_TIMEOUT_MS 5000u
#define MC_META_MIN_TIMEOUT_MS 100u
#define MC_META_MAX_TIMEOUT_MS 600000u

/* Parse the connection string and prepare the client (no network I/O yet), with requests
 * bounded by MC_META_DEFAULT_TIMEOUT_MS. MC_ERR_INVALID_PARAMS for an unknown scheme or a
 * malformed string. */
mc_status_t mc_meta_open(const char *uri, mc_meta_t **meta_p);
/* The same with requests bounded by timeout_ms (0 = MC_META_DEFAULT_TIMEOUT_MS; otherwise
 * MC_META_MIN_TIMEOUT_MS..MC_META_MAX_TIMEOUT_MS, else MC_ERR_INVALID_PARAMS). */
mc_status_t mc_meta_open_timeout(const char *uri, uint32_t timeout_ms, mc_meta_t **meta_p);
/* Options of mc_meta_open_opts; all zero = the defaults. */
#define MC_META_REDIS_DB_MAX 255
typedef struct mc_meta_opts {
    uint32_t timeout_ms;          /* as mc_meta_open_timeout */
    /* redis:// only (ignored by the other backends); borrowed for the call. A password
     * makes every connection start with AUTH [username] password; NULL or "" = no AUTH (a
     * username alone is ignored, as upstream). redis_db_index: SELECT it, 0..255. Values
     * also given in the connection string are refused (MC_ERR_INVALID_PARAMS). */
    const char *redis_username;
    const char *redis_password;
    uint32_t redis_db_index;
    /* http:// only (ignored by the other backends): sign every request with the cluster
     * keyring (HTTP challenge-response, common/http_auth.h). `auth` (borrowed, must outlive the
     * client) is used when set; else a non-empty auth_token_file is loaded at open (the client
     * owns that keyring; load errors fail the open); neither = unsigned requests. */
    const mc_auth_t *auth;
    const char *auth_token_file;
} mc_meta_opts_t;
/* mc_meta_open_timeout with options (opts NULL = all defaults). */
mc_status_t mc_meta_open_opts(const char *uri, const mc_meta_opts_t *opts, mc_meta_t **meta_p);
/* uri for a log line: whatever lies between "://" and the last '@' (the credentials of
 * redis://user:password@host) replaced by "***". Returns buf. */
const char *mc_meta_uri_for_log(const char *uri, char *buf, size_t len);
/* The request timeout of meta, ms. */
uint32_t mc_meta_timeout_ms(const mc_meta_t *meta);
void mc_meta_close(mc_meta_t *meta);

bool mc_meta_is_p2p(const mc_meta_t *meta);

/* *value_p is a NUL-terminated heap string the caller releases with mc_free.
 * MC_ERR_OBJECT_NOT_FOUND if the key is absent; MC_ERR_CONNECTION if the store is unreachable;
 * MC_ERR_TOO_LARGE if the value exceeds MC_META_VALUE_MAX. */
mc_status_t mc_meta_get(mc_meta_t *meta, const char *key, char **value_p);
mc_status_t mc_meta_put(mc_meta_t *meta, const char *key, const char *value);
/* Deleting an absent key is MC_OK. */
mc_status_t mc_meta_del(mc_meta_t *meta, const char *key);

#endif
