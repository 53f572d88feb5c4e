/* Disk tier configuration: upstream's defaults, the checks, and the environment variables
 * (MOONCAKE_OFFLOAD_* as upstream names them, MC_DISK_* for Mooncake-C's own knobs). */
#include "common/config.h"
#include "disk/disk_store.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#define MiB (1ull << 20)
#define TiB (1ull << 40)
#define PiB (1ull << 50)

void mc_disk_config_default(mc_disk_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->total_size_limit = 2 * TiB;
    cfg->total_keys_limit = 10000000;
    cfg->bucket_keys_limit = 500;
    cfg->bucket_size_limit = 256 * MiB;
    cfg->watermark_eviction = true;
    cfg->high_watermark = 0.90;
    cfg->low_watermark = 0.80;
    cfg->policy = MC_DISK_EVICT_FIFO;
    cfg->readmit_pct = 50;
    cfg->sync_each_put = false;
    cfg->io_depth = 64;
    cfg->rings = 4;
}

#define REFUSE(...)                                                                                \
    do {                                                                                           \
        if (err && errlen)                                                                         \
            snprintf(err, errlen, __VA_ARGS__);                                                    \
        return MC_ERR_INVALID_PARAMS;                                                              \
    } while (0)

mc_status_t mc_disk_config_check(const mc_disk_config_t *c, char *err, size_t errlen)
{
    if (!c)
        REFUSE("no config");
    if (c->total_size_limit < MiB || c->total_size_limit > PiB)
        REFUSE("total_size_limit (MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES) %llu out of range "
               "[1 MiB, 1 PiB]",
               (unsigned long long)c->total_size_limit);
    if (c->total_keys_limit < 1 || c->total_keys_limit > 1000000000ull)
        REFUSE("total_keys_limit (MOONCAKE_OFFLOAD_TOTAL_KEYS_LIMIT) %llu out of range [1, 1e9]", (unsigned long long)c->total_keys_limit);
    if (c->bucket_keys_limit < 1 || c->bucket_keys_limit > 1000000)
        REFUSE("bucket_keys_limit (MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT) %u out of range [1, 1000000]", c->bucket_keys_limit);
    if (c->bucket_size_limit < 64 * 1024 || c->bucket_size_limit > c->total_size_limit)
        REFUSE("bucket_size_limit (MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES) %llu out of range [64 KiB, total_size_limit]",
               (unsigned long long)c->bucket_size_limit);
    if (!(c->low_watermark > 0 && c->low_watermark < c->high_watermark && c->high_watermark <= 1))
        REFUSE("watermarks need 0 < low (MOONCAKE_OFFLOAD_DISK_EVICTION_LOW_WATERMARK_RATIO, %g) < high (MOONCAKE_OFFLOAD_DISK_EVICTION_HIGH_WATERMARK_RATIO, %g) <= 1", c->low_watermark, c->high_watermark);
    if ((unsigned)c->policy > MC_DISK_EVICT_NONE)
        REFUSE("eviction policy %d unknown", (int)c->policy);
    if (c->readmit_pct > 90)
        REFUSE("readmit_pct (MC_DISK_READMIT_PCT) %u out of range [0, 90]", c->readmit_pct);
    if (c->io_depth < 1 || c->io_depth > 4096)
        REFUSE("io_depth (MC_DISK_IO_DEPTH) %u out of range [1, 4096]", c->io_depth);
    if (c->rings < 1 || c->rings > 64)
        REFUSE("rings (MC_DISK_RINGS) %u out of range [1, 64]", c->rings);
    return MC_OK;
}

/* One environment variable: its parser applied to the value, refused with its name. */
static mc_status_t env_u64(mc_disk_env_fn lookup, void *arg, const char *name, bool size,
                           uint64_t *out, char *err, size_t errlen)
{
    const char *v = lookup(name, arg);
    if (!v)
        return MC_OK;
    if (size) {
        if (mc_parse_size(v, out) != MC_OK)
            REFUSE("%s=%s: not a size (bytes, or a number with KiB/MiB/GiB/TiB)", name, v);
        return MC_OK;
    }
    int64_t i;
    if (mc_parse_int(v, &i) != MC_OK || i < 0)
        REFUSE("%s=%s: not a non-negative integer", name, v);
    *out = (uint64_t)i;
    return MC_OK;
}

static mc_status_t env_bool(mc_disk_env_fn lookup, void *arg, const char *name, bool *out,
                            char *err, size_t errlen)
{
    const char *v = lookup(name, arg);
    if (v && mc_parse_bool(v, out) != MC_OK)
        REFUSE("%s=%s: not a boolean (true/false/1/0/yes/no)", name, v);
    return MC_OK;
}

static mc_status_t env_ratio(mc_disk_env_fn lookup, void *arg, const char *name, double *out,
                             char *err, size_t errlen)
{
    const char *v = lookup(name, arg);
    if (!v)
        return MC_OK;
    if (mc_parse_double(v, out) != MC_OK || !(*out > 0 && *out <= 1))
        REFUSE("%s=%s: not a ratio in (0, 1]", name, v);
    return MC_OK;
}

#define ENV(call)                                                                                  \
    do {                                                                                           \
        mc_status_t st_ = (call);                                                                  \
        if (st_ != MC_OK)                                                                          \
            return st_;                                                                            \
    } while (0)

mc_status_t mc_disk_config_from_env(mc_disk_config_t *cfg, mc_disk_env_fn lookup, void *arg,
                                    const char **dir_p, char *err, size_t errlen)
{
    const char *backend = lookup("MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR", arg);
    if (backend && strcmp(backend, "bucket_storage_backend") != 0) {
        if (err && errlen)
            snprintf(err, errlen,
                     "MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR=%s: only bucket_storage_backend "
                     "is supported",
                     backend);
        return MC_ERR_NOT_SUPPORTED;
    }
    if (dir_p) {
        const char *d = lookup("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", arg);
        if (d && !d[0])
            REFUSE("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH is empty");
        *dir_p = d;
    }
    uint64_t u;
    ENV(env_u64(lookup, arg, "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES", true,
                &cfg->total_size_limit, err, errlen));
    ENV(env_u64(lookup, arg, "MOONCAKE_OFFLOAD_TOTAL_KEYS_LIMIT", false, &cfg->total_keys_limit,
                err, errlen));
    u = cfg->bucket_keys_limit;
    ENV(env_u64(lookup, arg, "MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT", false, &u, err, errlen));
    if (u > UINT32_MAX)
        REFUSE("MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT=%llu: out of range", (unsigned long long)u);
    cfg->bucket_keys_limit = (uint32_t)u;
    ENV(env_u64(lookup, arg, "MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES", true,
                &cfg->bucket_size_limit, err, errlen));
    ENV(env_bool(lookup, arg, "MOONCAKE_OFFLOAD_ENABLE_DISK_WATERMARK_EVICTION",
                 &cfg->watermark_eviction, err, errlen));
    ENV(env_ratio(lookup, arg, "MOONCAKE_OFFLOAD_DISK_EVICTION_HIGH_WATERMARK_RATIO",
                  &cfg->high_watermark, err, errlen));
    ENV(env_ratio(lookup, arg, "MOONCAKE_OFFLOAD_DISK_EVICTION_LOW_WATERMARK_RATIO",
                  &cfg->low_watermark, err, errlen));
    const char *pol = lookup("MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY", arg);
    if (pol) {
        if (strcasecmp(pol, "fifo") == 0)
            cfg->policy = MC_DISK_EVICT_FIFO;
        else if (strcasecmp(pol, "lru") == 0)
            cfg->policy = MC_DISK_EVICT_LRU;
        else if (strcasecmp(pol, "none") == 0)
            cfg->policy = MC_DISK_EVICT_NONE;
        else
            REFUSE("MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY=%s: not fifo, lru or none", pol);
    }
    u = cfg->readmit_pct;
    ENV(env_u64(lookup, arg, "MC_DISK_READMIT_PCT", false, &u, err, errlen));
    cfg->readmit_pct = u > UINT32_MAX ? UINT32_MAX : (uint32_t)u;
    bool uring = true;
    ENV(env_bool(lookup, arg, "MOONCAKE_OFFLOAD_USE_URING", &uring, err, errlen)); /* always on */
    ENV(env_bool(lookup, arg, "MC_DISK_SYNC_EACH_PUT", &cfg->sync_each_put, err, errlen));
    u = cfg->io_depth;
    ENV(env_u64(lookup, arg, "MC_DISK_IO_DEPTH", false, &u, err, errlen));
    cfg->io_depth = u > UINT32_MAX ? UINT32_MAX : (uint32_t)u;
    u = cfg->rings;
    ENV(env_u64(lookup, arg, "MC_DISK_RINGS", false, &u, err, errlen));
    cfg->rings = u > UINT32_MAX ? UINT32_MAX : (uint32_t)u;
    return mc_disk_config_check(cfg, err, errlen);
}
