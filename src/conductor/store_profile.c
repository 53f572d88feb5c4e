/* Loads a measured store profile (store_profile.h): a JSON object of at most 1 MiB tagged
 * "profile":"mc_store", every field range-checked, per-block times converted to bandwidths at
 * the measured block size. Any missing or out-of-range field refuses the whole profile (logged). */
#include "conductor/store_profile.h"

#include "common/alloc.h"
#include "common/log.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define PROFILE_MAX_BYTES (1 << 20)

/* obj.op.field as a finite number in [lo, hi]; 0 on success. */
static int num(json_t *root, const char *op, const char *field, double lo, double hi, double *v_p)
{
    json_t *o = op ? json_object_get(root, op) : root;
    json_t *v = o && json_is_object(o) ? json_object_get(o, field) : NULL;
    if (!v || !json_is_number(v)) {
        MC_LOG_ERROR("store profile: %s%s%s missing or not a number", op ? op : "", op ? "." : "",
                     field);
        return -1;
    }
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi) {
        MC_LOG_ERROR("store profile: %s%s%s = %g out of range [%g, %g]", op ? op : "",
                     op ? "." : "", field, x, lo, hi);
        return -1;
    }
    *v_p = x;
    return 0;
}

mc_status_t mc_conductor_store_profile_load(const char *path, mc_conductor_store_cost_t *cost_p)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        MC_LOG_ERROR("store profile: cannot open %s", path);
        return MC_ERR_FILE_OPEN_FAIL;
    }
    char *buf = mc_malloc(PROFILE_MAX_BYTES + 1);
    if (!buf) {
        fclose(f);
        return MC_ERR_NO_MEMORY;
    }
    size_t n = fread(buf, 1, PROFILE_MAX_BYTES + 1, f);
    fclose(f);
    if (n > PROFILE_MAX_BYTES) {
        MC_LOG_ERROR("store profile: %s is larger than %d bytes", path, PROFILE_MAX_BYTES);
        mc_free(buf);
        return MC_ERR_INVALID_PARAMS;
    }
    json_error_t err;
    json_t *root = json_loadb(buf, n, 0, &err);
    mc_free(buf);
    if (!root || !json_is_object(root)) {
        MC_LOG_ERROR("store profile: %s is not a JSON object (%s, line %d)", path,
                     root ? "not an object" : err.text, root ? 0 : err.line);
        json_decref(root);
        return MC_ERR_INVALID_PARAMS;
    }
    mc_conductor_store_cost_t c;
    memset(&c, 0, sizeof(c));
    double exist_us, exist_blk_us, get_us, put_us, get_blk_us, put_blk_us, calls;
    json_t *kind = json_object_get(root, "profile");
    int ok = kind && json_is_string(kind) && strcmp(json_string_value(kind), "mc_store") == 0;
    if (!ok)
        MC_LOG_ERROR("store profile: %s lacks \"profile\":\"mc_store\"", path);
    /* latencies in microseconds, capped at an hour; block sizes 8 B .. 1 GiB */
    ok = ok && num(root, NULL, "block_bytes", 8, 1 << 30, &c.measured_block_bytes) == 0 &&
         num(root, "exist", "fixed_us", 0, 3.6e9, &exist_us) == 0 &&
         num(root, "exist", "per_block_us", 0, 3.6e9, &exist_blk_us) == 0 &&
         num(root, "get", "calls", 1, 1e12, &calls) == 0 &&
         num(root, "get", "fixed_us", 0, 3.6e9, &get_us) == 0 &&
         num(root, "get", "per_block_us", 1e-6, 3.6e9, &get_blk_us) == 0 &&
         num(root, "put", "calls", 1, 1e12, &calls) == 0 &&
         num(root, "put", "fixed_us", 0, 3.6e9, &put_us) == 0 &&
         num(root, "put", "per_block_us", 1e-6, 3.6e9, &put_blk_us) == 0;
    json_decref(root);
    if (!ok)
        return MC_ERR_INVALID_PARAMS;
    c.enabled = 1;
    c.exist_s = exist_us * 1e-6;
    c.exist_block_s = exist_blk_us * 1e-6;
    c.get_call_s = get_us * 1e-6;
    c.put_call_s = put_us * 1e-6;
    c.get_bw = c.measured_block_bytes / (get_blk_us * 1e-6);
    c.put_bw = c.measured_block_bytes / (put_blk_us * 1e-6);
    *cost_p = c;
    return MC_OK;
}
