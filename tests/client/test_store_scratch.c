/* The batch-get scratch pool (src/client/store_int.h, store_scratch_t; store_xfer.c): a
 * scratch handed back is taken again with its memory and plan arrays but empty plans (also
 * after a call that failed with requests still planned), its block grows past what it held,
 * the pool keeps at most STORE_SCRATCH_POOL idle scratches and none over
 * STORE_SCRATCH_KEEP_MAX, and threads taking and giving at once never share one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "client/store_int.h"
#include "common/buf.h"

#include <pthread.h>
#include <string.h>

/* Leaves plan p as a batch that failed midway leaves it: requests planned, a segment
 * remembered, hash and status arrays allocated. */
static void dirty_plan(xfer_plan_t *p, size_t n)
{
    assert_int_equal(mc_array_reserve(&p->reqs, &p->cap_reqs, n, 16), MC_OK);
    assert_int_equal(mc_array_reserve(&p->owner, &p->cap_owner, n, 16), MC_OK);
    assert_int_equal(mc_array_reserve(&p->hashes, &p->cap_hashes, n, 16), MC_OK);
    assert_int_equal(mc_array_reserve(&p->sts, &p->cap_sts, n, 16), MC_OK);
    memset(p->reqs, 0x5a, n * sizeof(*p->reqs));
    p->n = n;
    strcpy(p->seg_endpoint, "127.0.0.1:1");
}

static void test_reuse_after_failed_batch(void **state)
{
    (void)state;
    store_scratch_pool_t pool = {{NULL}};
    store_scratch_t *w = store_scratch_take(&pool);
    assert_non_null(w);
    assert_int_equal(w->cap, 0);
    char *mem = store_scratch_arrays(w, 1000);
    assert_non_null(mem);
    assert_true(w->cap >= 1000);
    memset(mem, 0xff, 1000);
    for (size_t i = 0; i < STORE_SCRATCH_PLANS; i++)
        dirty_plan(&w->plans[i], 100 + i);
    mc_te_request_t *reqs = w->plans[3].reqs;
    store_scratch_give(&pool, w);

    store_scratch_t *again = store_scratch_take(&pool);
    assert_ptr_equal(again, w); /* reused, not a new one */
    for (size_t i = 0; i < STORE_SCRATCH_PLANS; i++) {
        assert_int_equal(again->plans[i].n, 0);           /* nothing left planned */
        assert_string_equal(again->plans[i].seg_endpoint, ""); /* no segment remembered */
        assert_true(again->plans[i].cap_reqs >= 100 + i); /* arrays kept */
    }
    assert_ptr_equal(again->plans[3].reqs, reqs);
    assert_ptr_equal(store_scratch_arrays(again, 1000), mem); /* no allocation */
    assert_ptr_equal(store_scratch_arrays(again, 10), mem);
    store_scratch_give(&pool, again);
    store_scratch_pool_fini(&pool);
    for (size_t i = 0; i < STORE_SCRATCH_POOL; i++)
        assert_null(atomic_load(&pool.slot[i]));
    store_scratch_give(&pool, NULL); /* nothing to give: nothing happens */
    store_scratch_pool_fini(&pool);
}

static void test_growth_past_capacity(void **state)
{
    (void)state;
    store_scratch_pool_t pool = {{NULL}};
    store_scratch_t *w = store_scratch_take(&pool);
    assert_non_null(w);
    char *small = store_scratch_arrays(w, 4096);
    assert_non_null(small);
    size_t cap = w->cap;
    size_t want = cap * 3 + 17; /* more than twice: one step of doubling is not enough */
    char *big = store_scratch_arrays(w, want);
    assert_non_null(big);
    assert_true(w->cap >= want);
    memset(big, 0x11, want); /* every byte asked for is there (ASan/valgrind check it) */
    store_scratch_give(&pool, w);
    store_scratch_t *again = store_scratch_take(&pool);
    assert_ptr_equal(again, w);
    assert_ptr_equal(store_scratch_arrays(again, want), big); /* the grown block is kept */
    store_scratch_give(&pool, again);
    store_scratch_pool_fini(&pool);
}

static void test_pool_bounds(void **state)
{
    (void)state;
    store_scratch_pool_t pool = {{NULL}};
    store_scratch_t *w[STORE_SCRATCH_POOL + 1];
    for (size_t i = 0; i <= STORE_SCRATCH_POOL; i++) {
        w[i] = store_scratch_take(&pool);
        assert_non_null(w[i]);
        for (size_t j = 0; j < i; j++)
            assert_ptr_not_equal(w[i], w[j]); /* none handed out twice */
    }
    for (size_t i = 0; i <= STORE_SCRATCH_POOL; i++)
        store_scratch_give(&pool, w[i]); /* the last one finds no free slot: freed */
    for (size_t i = 0; i < STORE_SCRATCH_POOL; i++) {
        store_scratch_t *t = store_scratch_take(&pool);
        bool kept = false;
        for (size_t j = 0; j < STORE_SCRATCH_POOL; j++)
            kept |= t == w[j];
        assert_true(kept);
        w[i] = t;
    }
    for (size_t i = 0; i < STORE_SCRATCH_POOL; i++)
        store_scratch_give(&pool, w[i]);

    /* one that grew past the keep limit is freed when given back */
    store_scratch_pool_fini(&pool);
    store_scratch_t *huge = store_scratch_take(&pool);
    assert_non_null(store_scratch_arrays(huge, STORE_SCRATCH_KEEP_MAX + 1));
    store_scratch_give(&pool, huge);
    for (size_t i = 0; i < STORE_SCRATCH_POOL; i++)
        assert_null(atomic_load(&pool.slot[i]));
    store_scratch_pool_fini(&pool);
}

/* Threads take a scratch, mark it as theirs, check nobody else marked it meanwhile, give it
 * back. */
typedef struct {
    store_scratch_pool_t *pool;
    int id, bad;
} racer_t;

static void *racer(void *p)
{
    racer_t *r = p;
    for (int k = 0; k < 20000; k++) {
        store_scratch_t *w = store_scratch_take(r->pool);
        int *mine = w ? store_scratch_arrays(w, 64) : NULL;
        if (!mine) {
            r->bad++;
            continue;
        }
        *mine = r->id;
        for (int spin = 0; spin < 16; spin++)
            r->bad += *(volatile int *)mine != r->id;
        store_scratch_give(r->pool, w);
    }
    return NULL;
}

static void test_concurrent_take_give(void **state)
{
    (void)state;
    store_scratch_pool_t pool = {{NULL}};
    enum { T = 6 };
    pthread_t tid[T];
    racer_t rs[T];
    for (int i = 0; i < T; i++) {
        rs[i] = (racer_t){.pool = &pool, .id = i + 1};
        assert_int_equal(pthread_create(&tid[i], NULL, racer, &rs[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(tid[i], NULL);
        assert_int_equal(rs[i].bad, 0);
    }
    store_scratch_pool_fini(&pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reuse_after_failed_batch),
        cmocka_unit_test(test_growth_past_capacity),
        cmocka_unit_test(test_pool_bounds),
        cmocka_unit_test(test_concurrent_take_give),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
