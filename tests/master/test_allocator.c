/* Offset allocator: alloc/free/coalesce/fragmentation, alloc_at, random stress vs a model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "master/allocator.h"

#include <stdlib.h>
#include <string.h>

static void test_basic(void **state)
{
    (void)state;
    mc_master_allocator_t *a;
    assert_int_equal(mc_master_allocator_create(0x1000, 1 << 20, &a), MC_OK);
    assert_int_equal(mc_master_allocator_capacity(a), 1 << 20);
    uint32_t b1, b2, b3;
    assert_int_equal(mc_master_allocator_alloc(a, 100, &b1), MC_OK);
    assert_int_equal(mc_master_allocator_size(a, b1), 128);
    assert_int_equal(mc_master_allocator_addr(a, b1) % 64, 0);
    assert_int_equal(mc_master_allocator_alloc(a, 4096, &b2), MC_OK);
    assert_int_equal(mc_master_allocator_alloc(a, 64, &b3), MC_OK);
    assert_int_equal(mc_master_allocator_used(a), 128 + 4096 + 64);
    assert_int_equal(mc_master_allocator_check(a), 0);
    mc_master_allocator_free(a, b2);
    mc_master_allocator_stats_t st;
    mc_master_allocator_stats(a, &st);
    assert_true(st.fragmentation > 0.0);
    assert_int_equal(st.n_free, 2);
    mc_master_allocator_free(a, b1);
    mc_master_allocator_free(a, b3);
    assert_int_equal(mc_master_allocator_check(a), 0);
    mc_master_allocator_stats(a, &st);
    assert_int_equal(st.n_free, 1); /* all coalesced */
    assert_int_equal(st.largest_free, 1 << 20);
    assert_true(st.fragmentation == 0.0);
    /* exact fit of the whole segment, then nothing more */
    uint32_t all, none;
    assert_int_equal(mc_master_allocator_alloc(a, 1 << 20, &all), MC_OK);
    assert_int_equal(mc_master_allocator_alloc(a, 1, &none), MC_ERR_NO_AVAILABLE_HANDLE);
    mc_master_allocator_free(a, all);
    assert_int_equal(mc_master_allocator_alloc(a, 0, &none), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_allocator_alloc(a, (1 << 20) + 1, &none),
                     MC_ERR_NO_AVAILABLE_HANDLE);
    mc_master_allocator_destroy(a);
    /* unaligned base */
    assert_int_equal(mc_master_allocator_create(0x1001, 4096, &a), MC_OK);
    assert_int_equal(mc_master_allocator_alloc(a, 64, &b1), MC_OK);
    assert_int_equal(mc_master_allocator_addr(a, b1), 0x1040);
    mc_master_allocator_destroy(a);
    assert_int_equal(mc_master_allocator_create(0, 32, &a), MC_ERR_INVALID_PARAMS);
}

static void test_alloc_at(void **state)
{
    (void)state;
    mc_master_allocator_t *a;
    assert_int_equal(mc_master_allocator_create(0, 1 << 16, &a), MC_OK);
    uint32_t b[3];
    assert_int_equal(mc_master_allocator_alloc_at(a, 128, 64, &b[0]), MC_OK);
    assert_int_equal(mc_master_allocator_alloc_at(a, 1024, 1000, &b[1]), MC_OK);
    assert_int_equal(mc_master_allocator_alloc_at(a, 512, 64, &b[2]), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_allocator_alloc_at(a, 1030, 64, &b[2]), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_allocator_addr(a, b[0]), 128);
    assert_int_equal(mc_master_allocator_addr(a, b[1]), 1024);
    assert_int_equal(mc_master_allocator_check(a), 0);
    /* the hole at [0,128) and [192,1024) are usable */
    uint32_t x;
    assert_int_equal(mc_master_allocator_alloc(a, 800, &x), MC_OK);
    assert_int_equal(mc_master_allocator_addr(a, x), 192);
    assert_int_equal(mc_master_allocator_check(a), 0);
    mc_master_allocator_destroy(a);
}

#define N 4000
static void test_stress(void **state)
{
    (void)state;
    srand(42);
    const uint64_t cap = 64ull << 20;
    mc_master_allocator_t *a;
    assert_int_equal(mc_master_allocator_create(1 << 30, cap, &a), MC_OK);
    static uint32_t blk[N];
    static uint64_t addr[N], size[N];
    memset(blk, 0xff, sizeof(blk));
    uint64_t used = 0;
    for (int it = 0; it < 200000; it++) {
        int i = rand() % N;
        if (blk[i] == MC_ALLOC_NONE) {
            uint64_t s = (rand() % 4 == 0) ? 1 + (uint64_t)rand() % (1 << 20) : 1 + (uint64_t)(rand() % 8192);
            mc_status_t st = mc_master_allocator_alloc(a, s, &blk[i]);
            if (st == MC_OK) {
                addr[i] = mc_master_allocator_addr(a, blk[i]);
                size[i] = (s + 63) / 64 * 64;
                assert_int_equal(mc_master_allocator_size(a, blk[i]), size[i]);
                assert_true(addr[i] >= (1ull << 30) && addr[i] + size[i] <= (1ull << 30) + cap);
                used += size[i];
            } else {
                assert_int_equal(st, MC_ERR_NO_AVAILABLE_HANDLE);
                blk[i] = MC_ALLOC_NONE;
            }
        } else {
            mc_master_allocator_free(a, blk[i]);
            used -= size[i];
            blk[i] = MC_ALLOC_NONE;
        }
        assert_int_equal(mc_master_allocator_used(a), used);
        if (it % 20000 == 0) {
            assert_int_equal(mc_master_allocator_check(a), 0);
            /* reference model: live ranges never overlap */
            for (int p = 0; p < N; p++) {
                if (blk[p] == MC_ALLOC_NONE)
                    continue;
                for (int q = p + 1; q < N; q++) {
                    if (blk[q] == MC_ALLOC_NONE)
                        continue;
                    assert_true(addr[p] + size[p] <= addr[q] || addr[q] + size[q] <= addr[p]);
                }
            }
        }
    }
    for (int i = 0; i < N; i++)
        if (blk[i] != MC_ALLOC_NONE)
            mc_master_allocator_free(a, blk[i]);
    mc_master_allocator_stats_t st;
    mc_master_allocator_stats(a, &st);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.n_free, 1);
    assert_int_equal(mc_master_allocator_check(a), 0);
    mc_master_allocator_destroy(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_alloc_at),
        cmocka_unit_test(test_stress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
