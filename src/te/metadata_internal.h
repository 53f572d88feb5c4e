/* Private to the metadata client (metadata.c, metadata_http.c, metadata_etcd.c,
 * metadata_redis.c), its tests and tools/mooncake_auth_curl.c (the signed request helper):
 * the backend ops table. The libcurl helper and base64 live in common/http_client.h. */
#ifndef MC_TE_METADATA_INTERNAL_H
#define MC_TE_METADATA_INTERNAL_H

#include "common/http_auth.h"
#include "common/http_client.h"
#include "te/metadata.h"

#include <stddef.h>
#include <stdint.h>

/* One backend. `impl` is the backend's private state, owned by it and released by close(). */
typedef struct mc_meta_ops {
    const char *name;
    mc_status_t (*get)(void *impl, const char *key, char **value_p);
    mc_status_t (*put)(void *impl, const char *key, const char *value, size_t value_len);
    mc_status_t (*del)(void *impl, const char *key);
    void (*close)(void *impl);
} mc_meta_ops_t;

/* Backend constructors. `rest` is the connection string after the scheme check (borrowed);
 * timeout_ms (checked by mc_meta_open_timeout) bounds each request of the backend. */
/* url: the whole http:// string; opts: checked timeout plus the keyring or token file. */
mc_status_t mc_meta_http_open(const char *url, const mc_meta_opts_t *opts, void **impl_p);
mc_status_t mc_meta_etcd_open(const char *endpoints, uint32_t timeout_ms, void **impl_p);
/* rest: after "redis://"; opts: checked timeout plus the redis credentials (borrowed). */
mc_status_t mc_meta_redis_open(const char *rest, const mc_meta_opts_t *opts, void **impl_p);
extern const mc_meta_ops_t mc_meta_http_ops;
extern const mc_meta_ops_t mc_meta_redis_ops;
extern const mc_meta_ops_t mc_meta_etcd_ops;

#endif
