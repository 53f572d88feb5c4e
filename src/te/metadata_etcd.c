/* etcd v3 metadata backend: get/put/del of one key through the shared etcd client
 * (common/etcd.h: JSON gateway, base64, endpoint failover "h:p;h:p", caps and timeouts). */
#include "common/alloc.h"
#include "common/etcd.h"
#include "common/log.h"
#include "te/metadata_internal.h"

#include <string.h>

static void etcd_close(void *impl)
{
    mc_etcd_close(impl);
}

mc_status_t mc_meta_etcd_open(const char *endpoints, uint32_t timeout_ms, void **impl_p)
{
    return mc_etcd_open(endpoints, timeout_ms, (mc_etcd_t **)impl_p);
}

static mc_status_t etcd_get(void *impl, const char *key, char **value_p)
{
    size_t vlen;
    mc_status_t st = mc_etcd_get(impl, key, value_p, &vlen);
    if (st == MC_OK && vlen > MC_META_VALUE_MAX) {
        mc_free(*value_p);
        *value_p = NULL;
        MC_LOG_ERROR("metadata: etcd value for '%s' exceeds %u bytes", key, MC_META_VALUE_MAX);
        st = MC_ERR_TOO_LARGE;
    }
    return st;
}

static mc_status_t etcd_put(void *impl, const char *key, const char *value, size_t len)
{
    return mc_etcd_put(impl, key, value, len, 0, NULL);
}

static mc_status_t etcd_del(void *impl, const char *key)
{
    return mc_etcd_delete(impl, key, NULL, NULL);
}

const mc_meta_ops_t mc_meta_etcd_ops = {
    .name = "etcd", .get = etcd_get, .put = etcd_put, .del = etcd_del, .close = etcd_close};
