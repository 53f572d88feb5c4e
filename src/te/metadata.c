/* Metadata client front end: connection-string parsing, caps, dispatch to a backend through
 * its ops table, and the P2PHANDSHAKE stub (no store; the engine fetches descriptors from the
 * peer itself). */
#include "te/metadata.h"

#include "common/alloc.h"
#include "common/log.h"
#include "te/metadata_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct mc_meta {
    const mc_meta_ops_t *ops; /* NULL for P2PHANDSHAKE */
    void *impl;
    uint32_t timeout_ms;
};

mc_status_t mc_meta_open(const char *uri, mc_meta_t **meta_p)
{
    return mc_meta_open_timeout(uri, 0, meta_p);
}

uint32_t mc_meta_timeout_ms(const mc_meta_t *meta)
{
    return meta ? meta->timeout_ms : MC_META_DEFAULT_TIMEOUT_MS;
}

const char *mc_meta_uri_for_log(const char *uri, char *buf, size_t len)
{
    if (!len)
        return buf;
    if (!uri) {
        snprintf(buf, len, "(null)");
        return buf;
    }
    /* userinfo: after "scheme://", up to the last '@' anywhere (not only before the first
     * '/': a password with an unescaped '/' must not show either; a path with '@' is
     * over-redacted, harmlessly) */
    const char *sep = strstr(uri, "://");
    const char *host = sep ? sep + 3 : uri;
    const char *at = strrchr(host, '@');
    if (!sep || !at)
        snprintf(buf, len, "%s", uri);
    else
        snprintf(buf, len, "%.*s***%s", (int)(host - uri), uri, at);
    return buf;
}

mc_status_t mc_meta_open_timeout(const char *uri, uint32_t timeout_ms, mc_meta_t **meta_p)
{
    mc_meta_opts_t opts = {.timeout_ms = timeout_ms};
    return mc_meta_open_opts(uri, &opts, meta_p);
}

mc_status_t mc_meta_open_opts(const char *uri, const mc_meta_opts_t *opts_in, mc_meta_t **meta_p)
{
    if (!meta_p)
        return MC_ERR_INVALID_PARAMS;
    *meta_p = NULL;
    mc_meta_opts_t opts = {0};
    if (opts_in)
        opts = *opts_in;
    uint32_t timeout_ms = opts.timeout_ms;
    if (timeout_ms == 0)
        timeout_ms = MC_META_DEFAULT_TIMEOUT_MS;
    if (timeout_ms < MC_META_MIN_TIMEOUT_MS || timeout_ms > MC_META_MAX_TIMEOUT_MS) {
        MC_LOG_ERROR("metadata: timeout %u ms out of range (%u..%u)", timeout_ms,
                     MC_META_MIN_TIMEOUT_MS, MC_META_MAX_TIMEOUT_MS);
        return MC_ERR_INVALID_PARAMS;
    }
    if (!uri || !*uri) {
        MC_LOG_ERROR("metadata: empty connection string");
        return MC_ERR_INVALID_PARAMS;
    }
    mc_meta_t *m = MC_NEW(mc_meta_t);
    if (!m)
        return MC_ERR_NO_MEMORY;
    m->timeout_ms = timeout_ms;
    opts.timeout_ms = timeout_ms;
    mc_status_t st;
    if (strcasecmp(uri, "P2PHANDSHAKE") == 0) {
        st = MC_OK;
    } else if (strncasecmp(uri, "http://", 7) == 0) {
        m->ops = &mc_meta_http_ops;
        st = mc_meta_http_open(uri, &opts, &m->impl);
    } else if (strncasecmp(uri, "etcd://", 7) == 0) {
        m->ops = &mc_meta_etcd_ops;
        st = mc_meta_etcd_open(uri + 7, timeout_ms, &m->impl);
    } else if (strncasecmp(uri, "redis://", 8) == 0) {
        m->ops = &mc_meta_redis_ops;
        st = mc_meta_redis_open(uri + 8, &opts, &m->impl);
    } else {
        char shown[256];
        MC_LOG_ERROR("metadata: unsupported connection string '%s' (want http://host:port/path, "
                     "etcd://host:port[;host:port...], redis://host:port or P2PHANDSHAKE)",
                     mc_meta_uri_for_log(uri, shown, sizeof(shown)));
        st = MC_ERR_INVALID_PARAMS;
    }
    if (st != MC_OK) {
        mc_free(m);
        return st;
    }
    *meta_p = m;
    return MC_OK;
}

void mc_meta_close(mc_meta_t *meta)
{
    if (!meta)
        return;
    if (meta->ops)
        meta->ops->close(meta->impl);
    mc_free(meta);
}

bool mc_meta_is_p2p(const mc_meta_t *meta)
{
    return meta && !meta->ops;
}

static mc_status_t check_key(const char *key)
{
    if (!key || !*key) {
        MC_LOG_ERROR("metadata: empty key");
        return MC_ERR_INVALID_PARAMS;
    }
    if (strnlen(key, MC_META_KEY_MAX + 1) > MC_META_KEY_MAX) {
        MC_LOG_ERROR("metadata: key longer than %d bytes refused", MC_META_KEY_MAX);
        return MC_ERR_TOO_LARGE;
    }
    return MC_OK;
}

mc_status_t mc_meta_get(mc_meta_t *meta, const char *key, char **value_p)
{
    if (!meta || !value_p)
        return MC_ERR_INVALID_PARAMS;
    *value_p = NULL;
    mc_status_t st = check_key(key);
    if (st != MC_OK)
        return st;
    if (!meta->ops)
        return MC_ERR_NOT_SUPPORTED;
    return meta->ops->get(meta->impl, key, value_p);
}

mc_status_t mc_meta_put(mc_meta_t *meta, const char *key, const char *value)
{
    if (!meta || !value)
        return MC_ERR_INVALID_PARAMS;
    mc_status_t st = check_key(key);
    if (st != MC_OK)
        return st;
    size_t len = strnlen(value, (size_t)MC_META_VALUE_MAX + 1);
    if (len > MC_META_VALUE_MAX) {
        MC_LOG_ERROR("metadata: value for '%s' exceeds %u bytes", key, MC_META_VALUE_MAX);
        return MC_ERR_TOO_LARGE;
    }
    if (!meta->ops)
        return MC_OK;
    return meta->ops->put(meta->impl, key, value, len);
}

mc_status_t mc_meta_del(mc_meta_t *meta, const char *key)
{
    if (!meta)
        return MC_ERR_INVALID_PARAMS;
    mc_status_t st = check_key(key);
    if (st != MC_OK)
        return st;
    if (!meta->ops)
        return MC_OK;
    return meta->ops->del(meta->impl, key);
}
