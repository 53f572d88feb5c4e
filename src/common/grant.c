/* Transfer Engine data grants (grant.h): layout, signing and checking. */
#include "common/grant.h"

#include "common/alloc.h"
#include "common/bytes.h"

#include <string.h>

#define MAC_STACK 4096 /* mac input built on the stack up to this size, else on the heap */

mc_status_t mc_grant_parse(const uint8_t *buf, size_t len, mc_grant_view_t *g)
{
    if (!buf || len < MC_GRANT_HDR_SIZE || mc_get_le32(buf) != MC_GRANT_MAGIC ||
        mc_get_le16(buf + 4) != MC_GRANT_VERSION || buf[7] != 0 || mc_get_le32(buf + 20) != 0)
        return MC_ERR_INVALID_PARAMS;
    uint8_t access = buf[6];
    uint32_t n = mc_get_le32(buf + 16);
    if ((access != MC_GRANT_READ && access != MC_GRANT_WRITE) || n == 0 ||
        n > MC_GRANT_MAX_RANGES || len < MC_GRANT_SIZE(n))
        return MC_ERR_INVALID_PARAMS;
    g->access = access;
    g->expiry_ms = mc_get_le64(buf + 8);
    g->n = n;
    g->ranges = buf + MC_GRANT_HDR_SIZE;
    g->size = MC_GRANT_SIZE(n);
    for (uint32_t i = 0; i < n; i++) {
        mc_grant_range_t r = mc_grant_range(g, i);
        if (r.len == 0 || r.addr + r.len < r.addr)
            return MC_ERR_INVALID_PARAMS;
    }
    return MC_OK;
}

mc_grant_range_t mc_grant_range(const mc_grant_view_t *g, uint32_t i)
{
    const uint8_t *p = g->ranges + (size_t)i * MC_GRANT_RANGE_SIZE;
    return (mc_grant_range_t){.addr = mc_get_le64(p), .len = mc_get_le64(p + 8)};
}

/* What the mac covers: body | u16 seg_len | segment | u16 tenant_len | tenant. Runs fn on it
 * (sign or verify) with a stack or heap buffer. */
typedef mc_status_t (*mac_fn)(const mc_auth_t *auth, const uint8_t *msg, size_t len,
                              uint8_t *mac);

static mc_status_t mac_over(const mc_auth_t *auth, const uint8_t *body, size_t blen,
                            const char *segment, const char *tenant, mac_fn fn, uint8_t *mac)
{
    size_t sl = strlen(segment), tl = strlen(tenant);
    if (sl > MC_GRANT_NAME_MAX || tl > MC_GRANT_NAME_MAX)
        return MC_ERR_INVALID_PARAMS;
    size_t total = blen + 2 + sl + 2 + tl;
    uint8_t stack[MAC_STACK];
    uint8_t *m = total <= sizeof(stack) ? stack : mc_malloc(total);
    if (!m)
        return MC_ERR_NO_MEMORY;
    memcpy(m, body, blen);
    mc_put_le16(m + blen, (uint16_t)sl);
    memcpy(m + blen + 2, segment, sl);
    mc_put_le16(m + blen + 2 + sl, (uint16_t)tl);
    memcpy(m + blen + 4 + sl, tenant, tl);
    mc_status_t st = fn(auth, m, total, mac);
    if (m != stack)
        mc_free(m);
    return st;
}

static mc_status_t do_sign(const mc_auth_t *auth, const uint8_t *msg, size_t len, uint8_t *mac)
{
    return mc_auth_sign_cluster(auth, MC_GRANT_LABEL, msg, len, mac);
}

static mc_status_t do_verify(const mc_auth_t *auth, const uint8_t *msg, size_t len, uint8_t *mac)
{
    return mc_auth_verify_cluster(auth, MC_GRANT_LABEL, msg, len, mac);
}

mc_status_t mc_grant_sign(const mc_auth_t *auth, const char *segment, const char *tenant,
                          uint8_t access, uint64_t expiry_ms, const mc_grant_range_t *ranges,
                          uint32_t n, uint8_t *out, size_t *len_p)
{
    if ((access != MC_GRANT_READ && access != MC_GRANT_WRITE) || n == 0 ||
        n > MC_GRANT_MAX_RANGES || !segment || !tenant)
        return MC_ERR_INVALID_PARAMS;
    mc_put_le32(out, MC_GRANT_MAGIC);
    mc_put_le16(out + 4, MC_GRANT_VERSION);
    out[6] = access;
    out[7] = 0;
    mc_put_le64(out + 8, expiry_ms);
    mc_put_le32(out + 16, n);
    mc_put_le32(out + 20, 0);
    for (uint32_t i = 0; i < n; i++) {
        if (ranges[i].len == 0 || ranges[i].addr + ranges[i].len < ranges[i].addr)
            return MC_ERR_INVALID_PARAMS;
        uint8_t *p = out + MC_GRANT_HDR_SIZE + (size_t)i * MC_GRANT_RANGE_SIZE;
        mc_put_le64(p, ranges[i].addr);
        mc_put_le64(p + 8, ranges[i].len);
    }
    size_t body = MC_GRANT_SIZE(n) - MC_AUTH_MAC_SIZE;
    mc_status_t st = mac_over(auth, out, body, segment, tenant, do_sign, out + body);
    if (st == MC_OK)
        *len_p = MC_GRANT_SIZE(n);
    return st;
}

mc_status_t mc_grant_verify(const mc_auth_t *auth, const char *segment, const char *tenant,
                            const uint8_t *buf, size_t len, mc_grant_view_t *g)
{
    mc_status_t st = mc_grant_parse(buf, len, g);
    if (st != MC_OK)
        return st;
    size_t body = g->size - MC_AUTH_MAC_SIZE;
    uint8_t mac[MC_AUTH_MAC_SIZE];
    memcpy(mac, buf + body, sizeof(mac));
    st = mac_over(auth, buf, body, segment, tenant, do_verify, mac);
    return st == MC_OK ? MC_OK : (st == MC_ERR_INVALID_PARAMS ? st : MC_ERR_AUTH);
}
