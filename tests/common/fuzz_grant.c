/* libFuzzer target: the grant parser and checker (common/grant.h). Invariants: whatever parses
 * stays within the input and has well-formed ranges; a grant that verifies re-signs to the
 * same bytes; flipping its last byte makes it fail. */
#include "common/grant.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static mc_auth_t *ring;
    if (!ring && mc_auth_from_secret("fuzz-grant-secret-0123456789", NULL, &ring) != MC_OK)
        return 0;
    mc_grant_view_t g;
    if (mc_grant_parse(data, size, &g) == MC_OK) {
        if (g.size > size || g.n == 0 || g.n > MC_GRANT_MAX_RANGES)
            abort();
        for (uint32_t i = 0; i < g.n; i++) {
            mc_grant_range_t r = mc_grant_range(&g, i);
            if (r.len == 0 || r.addr + r.len < r.addr)
                abort();
        }
    }
    (void)mc_grant_verify(ring, "127.0.0.1:12345", "acme", data, size, &g);
    /* sign the parsed ranges (if any) and check the round trip */
    if (mc_grant_parse(data, size, &g) == MC_OK) {
        mc_grant_range_t *r = malloc(g.n * sizeof(*r));
        uint8_t *out = malloc(MC_GRANT_SIZE(g.n));
        size_t len = 0;
        if (!r || !out)
            abort();
        for (uint32_t i = 0; i < g.n; i++)
            r[i] = mc_grant_range(&g, i);
        if (mc_grant_sign(ring, "seg", "t", g.access, g.expiry_ms, r, g.n, out, &len) != MC_OK ||
            len != g.size || memcmp(out, data, len - MC_AUTH_MAC_SIZE) != 0 ||
            mc_grant_verify(ring, "seg", "t", out, len, &g) != MC_OK)
            abort();
        out[len - 1] ^= 1;
        if (mc_grant_verify(ring, "seg", "t", out, len, &g) != MC_ERR_AUTH)
            abort();
        free(r);
        free(out);
    }
    return 0;
}
