/* Transfer Engine data grants: what the master signs so that a storage server's data port
 * serves a tenant-bound peer exactly the ranges it handed that tenant (docs/security.md,
 * "Data ports and tenants").
 *
 * One grant covers up to MC_GRANT_MAX_RANGES ranges of ONE segment, one access kind, one
 * tenant and one expiry: the master makes one per (answer, segment, access), so a batch of
 * 128 gets costs one HMAC at the master and one at the storage server, not 128.
 *
 * Wire layout (little-endian, 24 + 16 n + 32 bytes):
 *   off  0  u32 magic    0x5247434D ("MCGR" on the wire)
 *   off  4  u16 version  1
 *   off  6  u8  access   1 READ, 2 WRITE
 *   off  7  u8  0
 *   off  8  u64 expiry   wall clock (CLOCK_REALTIME), ms since the Unix epoch
 *   off 16  u32 n        ranges, 1..MC_GRANT_MAX_RANGES
 *   off 20  u32 0
 *   off 24  n x {u64 addr, u64 len}   absolute addresses in the serving process; len > 0,
 *                                     addr + len does not wrap
 *   then    mac[32] = HMAC-SHA256(the signer's first CLUSTER secret, "mc-te-grant-v1" | 0 |
 *                     bytes [0, 24 + 16 n) | u16 seg_len | segment | u16 tenant_len | tenant)
 * The segment (the serving engine's TE local name, "host:port") and the tenant are not on the
 * wire: the verifier supplies its own name and the tenant its peer proved, so a grant made for
 * another segment or another tenant fails the mac like a forged one. Only cluster keys sign
 * and verify (common/auth.h, mc_auth_sign_cluster), so a tenant token cannot make one.
 *
 * Pure functions; thread-safe.
 */
#ifndef MC_COMMON_GRANT_H
#define MC_COMMON_GRANT_H

#include "common/auth.h"

#include <stddef.h>
#include <stdint.h>

#define MC_GRANT_MAGIC 0x5247434Du /* "MCGR" */
#define MC_GRANT_VERSION 1u
#define MC_GRANT_HDR_SIZE 24u
#define MC_GRANT_RANGE_SIZE 16u
#define MC_GRANT_MAX_RANGES 1024u
#define MC_GRANT_SIZE(n) (MC_GRANT_HDR_SIZE + MC_GRANT_RANGE_SIZE * (size_t)(n) + MC_AUTH_MAC_SIZE)
#define MC_GRANT_MAX_SIZE MC_GRANT_SIZE(MC_GRANT_MAX_RANGES)
#define MC_GRANT_LABEL "mc-te-grant-v1"
#define MC_GRANT_NAME_MAX 1024u /* segment and tenant names the mac can cover */
/* What the master adds to a grant's lifetime (read lease TTL for reads, put discard timeout for
 * writes) for clocks of different hosts that disagree: hosts must agree within this. */
#define MC_GRANT_SKEW_MS 2000u

enum { MC_GRANT_READ = 1, MC_GRANT_WRITE = 2 };

typedef struct mc_grant_range {
    uint64_t addr;
    uint64_t len;
} mc_grant_range_t;

/* A parsed grant; `ranges` points into the buffer it was parsed from (n entries of
 * MC_GRANT_RANGE_SIZE bytes, read them with mc_grant_range). */
typedef struct mc_grant_view {
    uint8_t access;
    uint64_t expiry_ms;
    uint32_t n;
    const uint8_t *ranges;
    size_t size; /* bytes of this grant, mac included */
} mc_grant_view_t;

/* Parses the grant at the start of buf (len bytes available; more may follow). MC_OK with *g;
 * MC_ERR_INVALID_PARAMS when it is not a well-formed grant (magic, version, access, reserved
 * bytes, n, a range that is empty or wraps, or fewer than its size bytes). Checks no mac. */
mc_status_t mc_grant_parse(const uint8_t *buf, size_t len, mc_grant_view_t *g);
/* Range i (< g->n) of a parsed grant. */
mc_grant_range_t mc_grant_range(const mc_grant_view_t *g, uint32_t i);

/* Signs a grant into out (room for MC_GRANT_SIZE(n) bytes; *len_p its size). MC_OK;
 * MC_ERR_INVALID_PARAMS (bad access, n, range, or names longer than MC_GRANT_NAME_MAX);
 * MC_ERR_PERMISSION (the ring holds no cluster key); MC_ERR_NO_MEMORY. */
mc_status_t mc_grant_sign(const mc_auth_t *auth, const char *segment, const char *tenant,
                          uint8_t access, uint64_t expiry_ms, const mc_grant_range_t *ranges,
                          uint32_t n, uint8_t *out, size_t *len_p);
/* Parses the grant at the start of buf and checks its mac for this segment and tenant against
 * the ring's cluster keys. MC_OK with *g; MC_ERR_INVALID_PARAMS (malformed, as
 * mc_grant_parse); MC_ERR_AUTH (forged, altered, or made for another segment or tenant: the
 * mac does not match). Expiry is the caller's check (it knows the clock). */
mc_status_t mc_grant_verify(const mc_auth_t *auth, const char *segment, const char *tenant,
                            const uint8_t *buf, size_t len, mc_grant_view_t *g);

#endif
