/* The grant window of a tcp server (src/te/grant_window.h): against a brute-force scan of
 * every range added, for requests at range starts, inside ranges (as later slices), straddling
 * two ranges, of the other access and anywhere; then its caps (ranges, index entries, scaled),
 * expiry, the hint, and ranges it ignores. Then the tenant windows built on it
 * (src/te/tenant_windows.h): shared by a tenant's holders, apart between tenants, a grant
 * presented twice kept once, caps that follow the holders. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/bytes.h"
#include "common/grant.h"
#include "te/grant_window.h"
#include "te/tenant_windows.h"

#include <string.h>

#include <stdlib.h>

#define KIB 1024ull
#define MIB (1024ull * KIB)
#define GIB (1024ull * MIB)
#define NOW 1000000ull

typedef struct model_range {
    uint64_t addr, len, expiry;
    uint8_t access;
} model_range_t;

static uint64_t rnd(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static bool model_allows(const model_range_t *m, size_t n, uint64_t addr, uint64_t len,
                         uint8_t access, uint64_t now)
{
    for (size_t i = 0; i < n; i++)
        if (m[i].access == access && m[i].addr <= addr && addr + len <= m[i].addr + m[i].len &&
            m[i].expiry > now)
            return true;
    return false;
}

/* 3,000 ranges of mixed sizes (4 KiB to 3 GiB) laid out without overlap, read or write, some
 * expiring: every answer matches the brute-force scan; requests at starts, inside ranges and
 * anywhere are seen both allowed and refused. */
static void test_matches_brute_force(void **state)
{
    (void)state;
    static const uint64_t sizes[] = {4 * KIB, 8 * KIB, 64 * KIB, 1536 * KIB, 5 * MIB, 3 * GIB};
    enum { N = 3000 };
    model_range_t *m = calloc(N, sizeof(*m));
    assert_non_null(m);
    mc_grant_window_t w = MC_GRANT_WINDOW_INIT;
    uint64_t hint = 0; /* the caller's last match */
    uint64_t seed = 7, addr = 0x7f0000000000ull;
    for (size_t i = 0; i < N; i++) {
        addr += (rnd(&seed) % 4) * 4 * KIB; /* gaps of 0..12 KiB */
        uint64_t len = sizes[rnd(&seed) % 6];
        if (len == 3 * GIB && rnd(&seed) % 8)
            len = 4 * KIB; /* few of those */
        m[i] = (model_range_t){addr, len, NOW + 1 + rnd(&seed) % 200,
                               (uint8_t)(rnd(&seed) % 4 ? MC_GRANT_READ : MC_GRANT_WRITE)};
        assert_true(mc_grant_window_add(&w, m[i].addr, m[i].len, m[i].access, m[i].expiry, NOW));
        addr += len;
    }
    assert_int_equal(mc_grant_window_size(&w), N);
    uint32_t seen[5][2] = {{0}};
    for (int q = 0; q < 60000; q++) {
        const model_range_t *r = &m[rnd(&seed) % N];
        uint64_t a, len;
        int kind = (int)(rnd(&seed) % 5);
        switch (kind) {
        case 0: /* a whole range or its first slice */
            a = r->addr;
            len = r->len > MIB ? MIB : r->len;
            break;
        case 1: /* a later slice, or a part of a small range */
            a = r->addr + (rnd(&seed) % r->len & ~(4 * KIB - 1));
            len = r->addr + r->len - a < MIB ? r->addr + r->len - a : MIB;
            break;
        case 2: /* straddling its end */
            a = r->addr + r->len - 4 * KIB;
            len = 8 * KIB;
            break;
        case 3: /* anywhere around */
            a = 0x7f0000000000ull + rnd(&seed) % (addr - 0x7f0000000000ull);
            len = 1 + rnd(&seed) % (64 * KIB);
            break;
        default: /* the other access */
            a = r->addr;
            len = 4 * KIB;
            break;
        }
        uint8_t access = kind == 4 ? (uint8_t)(3 - r->access) : r->access;
        uint64_t now = NOW + rnd(&seed) % 220;
        bool want = model_allows(m, N, a, len, access, now);
        bool got = mc_grant_window_allows(&w, &hint, a, len, access, now);
        if (got != want)
            fail_msg("query %d kind %d [%#llx, +%llu) access %u now %llu: got %d want %d", q, kind,
                     (unsigned long long)a, (unsigned long long)len, access,
                     (unsigned long long)now, got, want);
        seen[kind][got]++;
    }
    for (int k = 0; k < 5; k++) /* straddling and the other access: never (no overlaps) */
        assert_true(seen[k][0] > 0 && (k == 2 || k == 4 || seen[k][1] > 0));
    mc_grant_window_clear(&w);
    assert_int_equal(mc_grant_window_size(&w), 0);
    assert_false(mc_grant_window_allows(&w, &hint, m[0].addr, 4 * KIB, m[0].access, NOW));
    free(m);
}

/* Adds and lookups taking turns while the clock moves on (ranges expire and are dropped, the
 * indexes catch up and are rebuilt as they go): every answer matches the brute-force scan. */
static void test_interleaved(void **state)
{
    (void)state;
    enum { N = 6000 };
    model_range_t *m = calloc(N, sizeof(*m));
    assert_non_null(m);
    mc_grant_window_t w = MC_GRANT_WINDOW_INIT;
    uint64_t hint = 0; /* the caller's last match */
    uint64_t seed = 11, addr = 0x7e0000000000ull, now = NOW;
    uint32_t allowed = 0, refused = 0;
    for (size_t i = 0; i < N; i++) {
        now += rnd(&seed) % 3;
        uint64_t len = rnd(&seed) % 3 ? 4 * KIB : (1 + rnd(&seed) % 16) * 512 * KIB;
        m[i] = (model_range_t){addr, len, now + 1 + rnd(&seed) % 400, MC_GRANT_READ};
        assert_true(mc_grant_window_add(&w, m[i].addr, m[i].len, m[i].access, m[i].expiry, now));
        addr += len + (rnd(&seed) % 2) * 4 * KIB;
        for (int q = 0; q < 4; q++) {
            const model_range_t *r = &m[i - rnd(&seed) % (i + 1 < 700 ? i + 1 : 700)];
            uint64_t a = q & 1 ? r->addr : r->addr + (rnd(&seed) % r->len & ~(4 * KIB - 1));
            uint64_t len_q = q & 2 ? 4 * KIB : 8 * KIB;
            bool want = model_allows(m, i + 1, a, len_q, MC_GRANT_READ, now);
            bool got = mc_grant_window_allows(&w, &hint, a, len_q, MC_GRANT_READ, now);
            if (got != want)
                fail_msg("add %zu query %d [%#llx, +%llu) now %llu: got %d want %d", i, q,
                         (unsigned long long)a, (unsigned long long)len_q,
                         (unsigned long long)now, got, want);
            got ? allowed++ : refused++;
        }
    }
    assert_true(allowed > 1000 && refused > 1000);
    assert_true(mc_grant_window_size(&w) < N); /* expired ones were dropped */
    mc_grant_window_clear(&w);
    free(m);
}

/* More ranges than MC_GRANT_WINDOW_RANGES: the oldest are dropped, the newest kept. */
static void test_range_cap(void **state)
{
    (void)state;
    mc_grant_window_t w = MC_GRANT_WINDOW_INIT;
    uint64_t hint = 0; /* the caller's last match */
    const uint64_t base = 1ull << 40, n = MC_GRANT_WINDOW_RANGES + 100;
    for (uint64_t i = 0; i < n; i++)
        assert_true(mc_grant_window_add(&w, base + i * 8 * KIB, 4 * KIB, MC_GRANT_READ,
                                        NOW + 100, NOW));
    assert_int_equal(mc_grant_window_size(&w), MC_GRANT_WINDOW_RANGES);
    for (uint64_t i = 0; i < n; i++)
        assert_int_equal(mc_grant_window_allows(&w, &hint, base + i * 8 * KIB, 4 * KIB, MC_GRANT_READ,
                                                NOW),
                         i >= 100);
    assert_int_equal(mc_grant_window_next_seq(&w), n);
    assert_false(mc_grant_window_keeps_since(&w, 99));
    assert_true(mc_grant_window_keeps_since(&w, 100));
    /* scaled by 3: three times as many kept; back to 1: the next add drops down to the cap */
    mc_grant_window_set_scale(&w, 3);
    for (uint64_t i = n; i < 3 * n; i++)
        assert_true(mc_grant_window_add(&w, base + i * 8 * KIB, 4 * KIB, MC_GRANT_READ,
                                        NOW + 100, NOW));
    assert_int_equal(mc_grant_window_size(&w), 3 * MC_GRANT_WINDOW_RANGES);
    assert_true(mc_grant_window_keeps_since(&w, 3 * n - 3 * MC_GRANT_WINDOW_RANGES));
    assert_false(mc_grant_window_keeps_since(&w, 3 * n - 3 * MC_GRANT_WINDOW_RANGES - 1));
    mc_grant_window_set_scale(&w, 1);
    assert_true(mc_grant_window_add(&w, base + 3 * n * 8 * KIB, 4 * KIB, MC_GRANT_READ,
                                    NOW + 100, NOW));
    assert_int_equal(mc_grant_window_size(&w), MC_GRANT_WINDOW_RANGES);
    assert_false(mc_grant_window_allows(&w, &hint, base + (3 * n - MC_GRANT_WINDOW_RANGES) * 8 * KIB,
                                        4 * KIB, MC_GRANT_READ, NOW));
    assert_true(mc_grant_window_allows(&w, &hint, base + (3 * n - MC_GRANT_WINDOW_RANGES + 1) * 8 * KIB,
                                       4 * KIB, MC_GRANT_READ, NOW));
    mc_grant_window_clear(&w);
}

/* Past several generations (1,024 ranges doubling up to 65,536, the oldest freed as the
 * window drops their ranges): with the caps doubled, 300,000 ranges added; each of 20,000
 * random ones, asked for with no hint (so through the indexes: the newest 256 are left out),
 * at its start and inside it, is allowed exactly when it is among the newest 131,072. Then a
 * window whose sequence numbers cross 2^32. */
static void test_generations(void **state)
{
    (void)state;
    mc_grant_window_t w = MC_GRANT_WINDOW_INIT;
    mc_grant_window_set_scale(&w, 2);
    const uint64_t base = 1ull << 40, n = 300000, keep = 2 * MC_GRANT_WINDOW_RANGES;
    for (uint64_t i = 0; i < n; i++)
        assert_true(mc_grant_window_add(&w, base + i * 16 * KIB, 8 * KIB, MC_GRANT_READ,
                                        NOW + 100, NOW));
    assert_int_equal(mc_grant_window_size(&w), keep);
    uint64_t seed = 7;
    for (int k = 0; k < 20000; k++) {
        uint64_t i = rnd(&seed) % (n - 256), hint = 0;
        bool want = i >= n - keep;
        assert_int_equal(mc_grant_window_allows(&w, &hint, base + i * 16 * KIB, 8 * KIB,
                                                MC_GRANT_READ, NOW), want);
        hint = 0;
        assert_int_equal(mc_grant_window_allows(&w, &hint, base + i * 16 * KIB + 4 * KIB, 4 * KIB,
                                                MC_GRANT_READ, NOW), want);
        hint = 0;
        assert_false(mc_grant_window_allows(&w, &hint, base + i * 16 * KIB + 8 * KIB, 4 * KIB,
                                            MC_GRANT_READ, NOW));
    }
    mc_grant_window_clear(&w);

    /* sequence numbers crossing 2^32 (a long-lived window): the indexes keep them modulo 2^32 */
    mc_grant_window_t v = MC_GRANT_WINDOW_INIT;
    v.head = v.tail = (1ull << 32) - 5000;
    for (uint64_t i = 0; i < 20000; i++)
        assert_true(mc_grant_window_add(&v, base + i * 16 * KIB, 8 * KIB, MC_GRANT_READ,
                                        NOW + 100, NOW));
    for (uint64_t i = 0; i < 20000 - 256; i += 7) {
        uint64_t hint = 0;
        assert_true(mc_grant_window_allows(&v, &hint, base + i * 16 * KIB + 4 * KIB, 4 * KIB,
                                           MC_GRANT_READ, NOW));
    }
    mc_grant_window_clear(&v);
}

/* Ranges of 1 GiB take 513 index entries each (start + 512 regions of 2 MiB): the entry cap
 * drops the oldest before the range cap; a slice deep inside a kept one is allowed. */
static void test_entry_cap(void **state)
{
    (void)state;
    mc_grant_window_t w = MC_GRANT_WINDOW_INIT;
    uint64_t hint = 0; /* the caller's last match */
    const uint64_t base = 1ull << 44, n = 400, keep = MC_GRANT_WINDOW_ENTRIES / 513;
    for (uint64_t i = 0; i < n; i++)
        assert_true(mc_grant_window_add(&w, base + i * GIB, GIB, MC_GRANT_WRITE, NOW + 100, NOW));
    assert_int_equal(mc_grant_window_size(&w), keep);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t slice = base + i * GIB + 777 * MIB; /* no hint: the previous query was elsewhere */
        assert_int_equal(mc_grant_window_allows(&w, &hint, slice, MIB, MC_GRANT_WRITE, NOW), i >= n - keep);
        assert_false(mc_grant_window_allows(&w, &hint, slice, MIB, MC_GRANT_READ, NOW));
    }
    mc_grant_window_clear(&w);
}

/* Expired ranges are refused, and dropped by the next add. */
static void test_expiry(void **state)
{
    (void)state;
    mc_grant_window_t w = MC_GRANT_WINDOW_INIT;
    uint64_t hint = 0; /* the caller's last match */
    for (uint64_t i = 0; i < 10; i++)
        assert_true(mc_grant_window_add(&w, 4096 * (i + 1), 4096, MC_GRANT_READ, NOW + 10 + i, NOW));
    assert_true(mc_grant_window_allows(&w, &hint, 4096, 4096, MC_GRANT_READ, NOW + 9));
    assert_false(mc_grant_window_allows(&w, &hint, 4096, 4096, MC_GRANT_READ, NOW + 10));
    assert_true(mc_grant_window_allows(&w, &hint, 4096 * 10, 4096, MC_GRANT_READ, NOW + 18));
    assert_true(mc_grant_window_add(&w, 1 << 20, 4096, MC_GRANT_READ, NOW + 100, NOW + 15));
    assert_int_equal(mc_grant_window_size(&w), 5); /* expiring at NOW+16..19, and the new one */
    mc_grant_window_clear(&w);
}

/* Zero-length and wrapping ranges and unknown access kinds are ignored; a range of more than
 * 512 GiB is found from its start and, slice after slice, from the previous match; a request
 * of it elsewhere, after a match in another range and 1,000 ranges later, is refused (the
 * documented limit). */
static void test_odd_ranges(void **state)
{
    (void)state;
    mc_grant_window_t w = MC_GRANT_WINDOW_INIT;
    uint64_t hint = 0; /* the caller's last match */
    assert_true(mc_grant_window_add(&w, 4096, 0, MC_GRANT_READ, NOW + 100, NOW));
    assert_true(mc_grant_window_add(&w, UINT64_MAX - 10, 4096, MC_GRANT_READ, NOW + 100, NOW));
    assert_true(mc_grant_window_add(&w, 4096, 4096, 7, NOW + 100, NOW));
    assert_int_equal(mc_grant_window_size(&w), 0);
    assert_false(mc_grant_window_allows(&w, &hint, UINT64_MAX - 10, 4096, MC_GRANT_READ, NOW));

    const uint64_t huge = 1ull << 46, small = 1ull << 50;
    assert_true(mc_grant_window_add(&w, huge, 1024 * GIB, MC_GRANT_READ, NOW + 100, NOW));
    for (uint64_t i = 0; i < 1000; i++) /* past the newest ranges a lookup scans one by one */
        assert_true(mc_grant_window_add(&w, small + 8192 * i, 4096, MC_GRANT_READ, NOW + 100, NOW));
    for (uint64_t off = 0; off < 8 * MIB; off += MIB)
        assert_true(mc_grant_window_allows(&w, &hint, huge + off, MIB, MC_GRANT_READ, NOW));
    assert_true(mc_grant_window_allows(&w, &hint, small, 4096, MC_GRANT_READ, NOW));
    assert_false(mc_grant_window_allows(&w, &hint, huge + 600 * GIB, MIB, MC_GRANT_READ, NOW));
    assert_false(mc_grant_window_allows(&w, &hint, huge + 1024 * GIB - 4096, 8192, MC_GRANT_READ, NOW));
    mc_grant_window_clear(&w);
}

/* A grant's wire bytes (common/grant.h) for n ranges of 4 KiB at addr, 8 KiB apart, with a mac
 * of `tag` bytes (the tenant windows check no mac: the server verified it before), parsed. */
static void fake_grant(uint8_t *buf, uint32_t n, uint64_t addr, uint8_t tag, mc_grant_view_t *g)
{
    memset(buf, 0, MC_GRANT_SIZE(n));
    mc_put_le32(buf, MC_GRANT_MAGIC);
    mc_put_le16(buf + 4, MC_GRANT_VERSION);
    buf[6] = MC_GRANT_READ;
    mc_put_le64(buf + 8, NOW + 1000);
    mc_put_le32(buf + 16, n);
    for (uint32_t i = 0; i < n; i++) {
        mc_put_le64(buf + MC_GRANT_HDR_SIZE + 16 * i, addr + i * 8 * KIB);
        mc_put_le64(buf + MC_GRANT_HDR_SIZE + 16 * i + 8, 4 * KIB);
    }
    memset(buf + MC_GRANT_SIZE(n) - MC_AUTH_MAC_SIZE, tag, MC_AUTH_MAC_SIZE);
    assert_int_equal(mc_grant_parse(buf, MC_GRANT_SIZE(n), g), MC_OK);
}

static const uint8_t *mac_of(const uint8_t *buf, const mc_grant_view_t *g)
{
    return buf + g->size - MC_AUTH_MAC_SIZE;
}

/* Two holders of tenant t1 share one window: what one presented the other may read; the same
 * grant presented again is kept once; t2's window is its own; the last release frees it (a
 * new acquire starts empty). */
static void test_tenant_shared(void **state)
{
    (void)state;
    mc_tenant_windows_t t;
    mc_tenant_windows_init(&t);
    mc_tenant_window_t *a = mc_tenant_window_acquire(&t, "t1");
    mc_tenant_window_t *b = mc_tenant_window_acquire(&t, "t1");
    mc_tenant_window_t *o = mc_tenant_window_acquire(&t, "t2");
    assert_non_null(a);
    assert_ptr_equal(a, b);
    assert_ptr_not_equal(a, o);
    uint8_t buf[MC_GRANT_SIZE(8)], buf2[MC_GRANT_SIZE(8)];
    mc_grant_view_t g, g2;
    const uint64_t base = 1ull << 40;
    uint64_t ha = 0, hb = 0, ho = 0;
    fake_grant(buf, 8, base, 0x11, &g);
    assert_int_equal(mc_tenant_window_add(a, &g, mac_of(buf, &g), NOW), MC_TW_ADDED);
    assert_int_equal(mc_tenant_window_add(b, &g, mac_of(buf, &g), NOW), MC_TW_KEPT);
    assert_true(mc_tenant_window_allows(b, &hb, base + 7 * 8 * KIB, 4 * KIB, MC_GRANT_READ, NOW));
    assert_true(mc_tenant_window_allows(a, &ha, base, 4 * KIB, MC_GRANT_READ, NOW));
    assert_false(mc_tenant_window_allows(a, &ha, base + 4 * KIB, 4 * KIB, MC_GRANT_READ, NOW));
    assert_false(mc_tenant_window_allows(o, &ho, base, 4 * KIB, MC_GRANT_READ, NOW));
    /* another grant (other mac) over the same ranges is kept again; t2 presenting t1's bytes
     * (verified for t2 by the server, so really t2's) keeps them in t2's window only */
    fake_grant(buf2, 8, base, 0x22, &g2);
    assert_int_equal(mc_tenant_window_add(a, &g2, mac_of(buf2, &g2), NOW), MC_TW_ADDED);
    assert_int_equal(mc_tenant_window_add(o, &g, mac_of(buf, &g), NOW), MC_TW_ADDED);
    assert_true(mc_tenant_window_allows(o, &ho, base, 4 * KIB, MC_GRANT_READ, NOW));
    mc_tenant_window_release(&t, a);
    mc_tenant_window_release(&t, b);
    a = mc_tenant_window_acquire(&t, "t1");
    ha = 0;
    assert_false(mc_tenant_window_allows(a, &ha, base, 4 * KIB, MC_GRANT_READ, NOW));
    assert_int_equal(mc_tenant_window_add(a, &g, mac_of(buf, &g), NOW), MC_TW_ADDED);
    mc_tenant_window_release(&t, a);
    mc_tenant_window_release(&t, o);
    mc_tenant_windows_fini(&t);
}

/* The caps follow the holders: with two, twice one connection's ranges are kept; once one is
 * released the next add drops back to one connection's; a grant whose first ranges were
 * dropped is kept again when presented again. */
static void test_tenant_caps(void **state)
{
    (void)state;
    mc_tenant_windows_t t;
    mc_tenant_windows_init(&t);
    mc_tenant_window_t *a = mc_tenant_window_acquire(&t, "t1");
    mc_tenant_window_t *b = mc_tenant_window_acquire(&t, "t1");
    const uint32_t per = MC_GRANT_MAX_RANGES, n = 2 * MC_GRANT_WINDOW_RANGES / per;
    uint8_t *buf = malloc(MC_GRANT_MAX_SIZE), *first = malloc(MC_GRANT_MAX_SIZE);
    mc_grant_view_t g, g0;
    const uint64_t base = 1ull << 40, span = (uint64_t)per * 8 * KIB;
    uint64_t h = 0;
    fake_grant(first, per, base, 0x01, &g0);
    assert_int_equal(mc_tenant_window_add(a, &g0, mac_of(first, &g0), NOW), MC_TW_ADDED);
    for (uint32_t k = 1; k < n; k++) {
        fake_grant(buf, per, base + k * span, (uint8_t)(0x40 + k), &g); /* distinct macs */
        assert_int_equal(mc_tenant_window_add(k % 2 ? a : b, &g, mac_of(buf, &g), NOW),
                         MC_TW_ADDED);
    }
    /* 2 x 65,536 ranges: the first grant's are all still kept */
    assert_true(mc_tenant_window_allows(b, &h, base, 4 * KIB, MC_GRANT_READ, NOW));
    assert_int_equal(mc_tenant_window_add(b, &g0, mac_of(first, &g0), NOW), MC_TW_KEPT);
    mc_tenant_window_release(&t, b);
    fake_grant(buf, 1, base + n * span, 0xEE, &g); /* a mac none of the above has */
    assert_int_equal(mc_tenant_window_add(a, &g, mac_of(buf, &g), NOW), MC_TW_ADDED);
    h = 0;
    assert_false(mc_tenant_window_allows(a, &h, base, 4 * KIB, MC_GRANT_READ, NOW));
    assert_true(mc_tenant_window_allows(a, &h, base + n * span, 4 * KIB, MC_GRANT_READ, NOW));
    assert_int_equal(mc_tenant_window_add(a, &g0, mac_of(first, &g0), NOW), MC_TW_ADDED);
    assert_true(mc_tenant_window_allows(a, &h, base, 4 * KIB, MC_GRANT_READ, NOW));
    mc_tenant_window_release(&t, a);
    mc_tenant_windows_fini(&t);
    free(buf);
    free(first);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_brute_force),
        cmocka_unit_test(test_interleaved),
        cmocka_unit_test(test_range_cap),
        cmocka_unit_test(test_generations),
        cmocka_unit_test(test_entry_cap),
        cmocka_unit_test(test_expiry),
        cmocka_unit_test(test_odd_ranges),
        cmocka_unit_test(test_tenant_shared),
        cmocka_unit_test(test_tenant_caps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
