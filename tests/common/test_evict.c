/* Unit tests of the shared admission/eviction module (common/evict.h): LRU is exact (against a
 * reference list) and slru with a 100 % probation share is the same LRU; capacity is never
 * exceeded under any policy with mixed sizes; a scan does not flush slru's / s3fifo's /
 * adaptive's hot set (it does flush LRU's); one-time keys stay in the probation share; the
 * TinyLFU filter keeps part of a loop larger than the cache; adaptive leaves LRU on a scan
 * workload and takes LRU on a recency workload, leaves its warm-up share, and does not follow
 * a lead that alternates window by window; the ghost stays bounded; work per
 * operation is bounded and does not grow with capacity (counted, not timed); the core driven
 * by a host's own objects (byte sizes, objects it cannot evict skipped) keeps its accounting
 * exact and never evicts a skipped object. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/evict.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state;

static uint64_t rnd(void) /* splitmix64: deterministic */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static mc_evict_cache_t *make(uint64_t capacity, mc_evict_policy_t p, uint32_t permille)
{
    mc_evict_config_t cfg;
    mc_evict_config_default(&cfg, capacity, p);
    cfg.probation_permille = permille;
    mc_evict_cache_t *c = NULL;
    assert_int_equal(mc_evict_create(&cfg, NULL, NULL, &c), MC_OK);
    return c;
}

/* One access as a block cache does it: a touching lookup, an insert on a miss. 1 = hit. */
static int access_key(mc_evict_cache_t *c, uint64_t key)
{
    if (mc_evict_lookup(c, key, 1, NULL))
        return 1;
    mc_evict_insert(c, key, 1, 0);
    return 0;
}

static void test_names(void **state)
{
    (void)state;
    for (int p = 0; p < MC_EVICT_N_POLICIES; p++) {
        mc_evict_policy_t q;
        assert_int_equal(mc_evict_policy_parse(mc_evict_policy_name((mc_evict_policy_t)p), &q),
                         MC_OK);
        assert_int_equal(q, p);
    }
    mc_evict_policy_t q = MC_EVICT_FIFO;
    assert_int_equal(mc_evict_policy_parse("belady", &q), MC_ERR_INVALID_PARAMS);
    assert_int_equal(q, MC_EVICT_FIFO);
    mc_evict_config_t cfg;
    mc_evict_config_default(&cfg, 10, MC_EVICT_SLRU);
    cfg.probation_permille = 1001;
    mc_evict_cache_t *c = (mc_evict_cache_t *)&cfg;
    assert_int_equal(mc_evict_create(&cfg, NULL, NULL, &c), MC_ERR_INVALID_PARAMS);
    assert_null(c);
}

/* Reference LRU: an array, most recent last. */
static int ref_access(uint64_t *ref, size_t *n, size_t cap, uint64_t key, uint64_t *victim)
{
    *victim = UINT64_MAX;
    for (size_t i = 0; i < *n; i++) {
        if (ref[i] == key) {
            memmove(ref + i, ref + i + 1, (*n - i - 1) * sizeof(uint64_t));
            ref[*n - 1] = key;
            return 1;
        }
    }
    if (*n == cap) {
        *victim = ref[0];
        memmove(ref, ref + 1, (*n - 1) * sizeof(uint64_t));
        (*n)--;
    }
    ref[(*n)++] = key;
    return 0;
}

static uint64_t last_victim;
static uint64_t n_victims;
static void on_victim(void *arg, uint64_t key, uint32_t owner)
{
    (void)arg;
    (void)owner;
    last_victim = key;
    n_victims++;
}

static void check_exact_lru(mc_evict_policy_t p, uint32_t permille)
{
    enum { CAP = 64, N = 20000 };
    mc_evict_config_t cfg;
    mc_evict_config_default(&cfg, CAP, p);
    cfg.probation_permille = permille;
    mc_evict_cache_t *c;
    assert_int_equal(mc_evict_create(&cfg, on_victim, NULL, &c), MC_OK);
    uint64_t ref[CAP];
    size_t n = 0;
    rng_state = 7;
    n_victims = 0;
    for (int i = 0; i < N; i++) {
        uint64_t key = rnd() % 200, victim;
        last_victim = UINT64_MAX;
        int want = ref_access(ref, &n, CAP, key, &victim);
        assert_int_equal(access_key(c, key), want);
        assert_true(last_victim == victim); /* the same victim, or none */
    }
    mc_evict_stats_t st;
    mc_evict_get_stats(c, &st);
    assert_int_equal(st.entries, CAP);
    assert_int_equal(st.evictions, n_victims);
    mc_evict_destroy(c);
}

static void test_lru_exact(void **state)
{
    (void)state;
    check_exact_lru(MC_EVICT_LRU, 0);
    check_exact_lru(MC_EVICT_SLRU, 1000); /* a 100 % probation share is LRU */
    check_exact_lru(MC_EVICT_SLRU_TINYLFU, 1000);
}

static void test_capacity_and_sizes(void **state)
{
    (void)state;
    for (int p = 0; p < MC_EVICT_N_POLICIES; p++) {
        mc_evict_config_t cfg;
        mc_evict_config_default(&cfg, 10000, (mc_evict_policy_t)p);
        cfg.entries = 100; /* sizes below average 100 units */
        mc_evict_cache_t *c;
        assert_int_equal(mc_evict_create(&cfg, NULL, NULL, &c), MC_OK);
        rng_state = 11;
        for (int i = 0; i < 50000; i++) {
            uint64_t key = rnd() % 3000;
            if (i % 97 == 0) {
                mc_evict_remove(c, key);
            } else if (!mc_evict_lookup(c, key, 1, NULL)) {
                uint64_t size = 1 + (key * 7919) % 199; /* a key keeps its size */
                mc_evict_insert(c, key, size, (uint32_t)key);
            }
            mc_evict_stats_t st;
            mc_evict_get_stats(c, &st);
            assert_true(st.used <= 10000);
        }
        /* larger than the capacity: refused as a bypass */
        assert_int_equal(mc_evict_insert(c, 1u << 30, 10001, 0), 0);
        assert_false(mc_evict_lookup(c, 1u << 30, 0, NULL));
        /* owners survive; a resident key is only touched by insert */
        uint32_t owner = 0;
        for (uint64_t k = 0; k < 3000; k++) {
            if (mc_evict_lookup(c, k, 0, &owner)) {
                assert_int_equal(owner, (uint32_t)k);
                assert_int_equal(mc_evict_insert(c, k, 1, 99), 0);
                assert_true(mc_evict_lookup(c, k, 0, &owner));
                assert_int_equal(owner, (uint32_t)k);
                break;
            }
        }
        mc_evict_destroy(c);
    }
    /* capacity 0: always empty */
    mc_evict_cache_t *c = make(0, MC_EVICT_ADAPTIVE, 0);
    assert_int_equal(mc_evict_insert(c, 1, 1, 0), 0);
    assert_false(mc_evict_lookup(c, 1, 1, NULL));
    mc_evict_destroy(c);
}

/* Warm a hot set of 60 keys (several hits each) in a cache of 100, scan 5 000 one-time keys,
 * return how many hot keys are still resident. */
static int hot_after_scan(mc_evict_policy_t p)
{
    mc_evict_cache_t *c = make(100, p, 0);
    for (int round = 0; round < 4; round++)
        for (uint64_t k = 0; k < 60; k++)
            access_key(c, k);
    for (uint64_t k = 0; k < 5000; k++)
        access_key(c, 1000000 + k);
    int left = 0;
    for (uint64_t k = 0; k < 60; k++)
        left += mc_evict_lookup(c, k, 0, NULL);
    mc_evict_destroy(c);
    return left;
}

static void test_scan_keeps_hot_set(void **state)
{
    (void)state;
    assert_int_equal(hot_after_scan(MC_EVICT_LRU), 0);
    assert_int_equal(hot_after_scan(MC_EVICT_FIFO), 0);
    assert_int_equal(hot_after_scan(MC_EVICT_SLRU), 60);
    assert_int_equal(hot_after_scan(MC_EVICT_SLRU_TINYLFU), 60);
    assert_int_equal(hot_after_scan(MC_EVICT_S3FIFO), 60);
}

static void test_one_hit_wonders_stay_in_probation(void **state)
{
    (void)state;
    mc_evict_cache_t *c = make(1000, MC_EVICT_SLRU, 0); /* probation 2 % = 20 entries */
    for (uint64_t k = 0; k < 100000; k++)
        access_key(c, k);
    mc_evict_stats_t st;
    mc_evict_get_stats(c, &st);
    /* a stream of unique keys is admitted only to probation: nothing was promoted but the
     * ghost's false positives (its Bloom filters are sized for < 0.5 %), and the cache still
     * holds the most recent keys (probation takes the free space) */
    assert_int_equal(st.hits, 0);
    assert_true(st.ghost_hits * 200 <= st.misses);
    assert_int_equal(mc_evict_segment(c, 99999), 0);
    /* a key back within the ghost's memory enters protected; one forgotten does not */
    assert_false(mc_evict_lookup(c, 97000, 0, NULL)); /* evicted 2 000 victims ago */
    access_key(c, 97000);
    assert_int_equal(mc_evict_segment(c, 97000), 1);
    access_key(c, 5);
    assert_int_equal(mc_evict_segment(c, 5), 0);
    /* keys with a second access fill protected; new one-time keys then get only probation */
    for (int r = 0; r < 2; r++)
        for (uint64_t k = 200000; k < 200900; k++)
            access_key(c, k);
    for (uint64_t k = 300000; k < 310000; k++)
        access_key(c, k);
    int unique_resident = 0, hot_resident = 0;
    for (uint64_t k = 300000; k < 310000; k++)
        unique_resident += mc_evict_lookup(c, k, 0, NULL);
    for (uint64_t k = 200000; k < 200900; k++)
        hot_resident += mc_evict_lookup(c, k, 0, NULL);
    assert_int_equal(hot_resident, 900);
    assert_true(unique_resident <= 1000 - 900);
    mc_evict_get_stats(c, &st);
    assert_true(st.ghost <= st.ghost_cap);
    assert_int_equal(st.ghost_cap, 5 * 1000);
    mc_evict_destroy(c);
}

/* Hit ratio of a policy on a loop over `loop` keys, `rounds` times. */
static double loop_hits(mc_evict_policy_t p, uint64_t cap, uint64_t loop, int rounds)
{
    mc_evict_cache_t *c = make(cap, p, 0);
    uint64_t hits = 0, n = 0;
    for (int r = 0; r < rounds; r++)
        for (uint64_t k = 0; k < loop; k++, n++)
            hits += (uint64_t)access_key(c, k);
    mc_evict_destroy(c);
    return (double)hits / (double)n;
}

static void test_loop_larger_than_cache(void **state)
{
    (void)state;
    assert_true(loop_hits(MC_EVICT_LRU, 1000, 1500, 20) == 0.0);
    assert_true(loop_hits(MC_EVICT_SLRU, 1000, 1500, 20) == 0.0);
    /* the frequency filter refuses to swap equals: part of the loop stays */
    assert_true(loop_hits(MC_EVICT_SLRU_TINYLFU, 1000, 1500, 20) > 0.3);
    assert_true(loop_hits(MC_EVICT_ADAPTIVE, 1000, 1500, 20) > 0.2);
}

/* scan_hot-like stream: a Zipf-ish hot set of 400 keys, with scans of 200 one-time keys. */
static uint64_t next_scan_hot(uint64_t *scan_left, uint64_t *fresh)
{
    if (!*scan_left && rnd() % 300 == 0)
        *scan_left = 200;
    if (*scan_left) {
        (*scan_left)--;
        return ++*fresh;
    }
    uint64_t r = rnd() % 400;
    return (r * r) / 400; /* skewed toward small keys */
}

/* Recency stream: 70 % re-references of one of the last 350 keys, else a new key. */
static uint64_t next_recency(uint64_t *hist, uint64_t *n)
{
    uint64_t back = 1 + rnd() % 350, k;
    k = (rnd() % 10 < 7 && back <= *n) ? hist[(*n - back) % 4096] : (1u << 30) + *n;
    hist[(*n)++ % 4096] = k;
    return k;
}

static void test_adaptive_switches(void **state)
{
    (void)state;
    /* scans: adaptive leaves LRU and beats it */
    mc_evict_cache_t *lru = make(300, MC_EVICT_LRU, 0), *ad = make(300, MC_EVICT_ADAPTIVE, 0);
    rng_state = 3;
    uint64_t scan_left = 0, fresh = 1u << 20;
    for (int i = 0; i < 200000; i++) {
        uint64_t k = next_scan_hot(&scan_left, &fresh);
        access_key(lru, k);
        access_key(ad, k);
    }
    mc_evict_stats_t sl, sa;
    mc_evict_get_stats(lru, &sl);
    mc_evict_get_stats(ad, &sa);
    assert_true(sa.switches >= 1);
    assert_true(sa.probation_permille < 1000);
    assert_true(sa.hits > sl.hits * 11 / 10);
    mc_evict_destroy(lru);
    mc_evict_destroy(ad);
    /* pure recency (re-reference of the last few hundred keys): LRU is right; adaptive stays
     * within 2 % of it */
    lru = make(300, MC_EVICT_LRU, 0);
    ad = make(300, MC_EVICT_ADAPTIVE, 0);
    rng_state = 5;
    uint64_t hist[4096], n = 0;
    for (int i = 0; i < 200000; i++) {
        uint64_t k = next_recency(hist, &n);
        access_key(lru, k);
        access_key(ad, k);
    }
    mc_evict_get_stats(lru, &sl);
    mc_evict_get_stats(ad, &sa);
    assert_true(sa.hits * 100 >= sl.hits * 98);
    assert_int_equal(sa.probation_permille, 1000); /* left the warm-up share for LRU */
    mc_evict_destroy(lru);
    mc_evict_destroy(ad);
}

/* adaptive starts at its warm-up share (97.5 %) and leaves it; leads that alternate window by
 * window (recency phases and scan phases of one window each: cache 300, windows of 2 048
 * accesses) do not make it switch back and forth. */
static void test_adaptive_warmup_and_streak(void **state)
{
    (void)state;
    mc_evict_cache_t *lru = make(300, MC_EVICT_LRU, 0), *ad = make(300, MC_EVICT_ADAPTIVE, 0);
    mc_evict_stats_t sl, sa;
    mc_evict_get_stats(ad, &sa);
    assert_int_equal(sa.probation_permille, 975);
    assert_int_equal(sa.switches, 0);
    rng_state = 11;
    uint64_t hist[4096], n = 0, scan_left = 0, fresh = 1u << 20;
    for (int i = 0; i < 100 * 2048; i++) {
        uint64_t k = (i / 2048) % 2 ? next_scan_hot(&scan_left, &fresh) : next_recency(hist, &n);
        access_key(lru, k);
        access_key(ad, k);
    }
    mc_evict_get_stats(lru, &sl);
    mc_evict_get_stats(ad, &sa);
    /* 26 switches (and 1.2 % fewer hits) when any single window's lead is adopted */
    assert_true(sa.switches <= 4);
    assert_true(sa.probation_permille < 1000);
    assert_true(sa.hits > sl.hits);
    mc_evict_destroy(lru);
    mc_evict_destroy(ad);
}

/* Work per operation under a mixed stream, for a cache of `cap`. */
static double work_per_op(mc_evict_policy_t p, uint64_t cap)
{
    mc_evict_cache_t *c = make(cap, p, 0);
    rng_state = 9;
    uint64_t scan_left = 0, fresh = 1u << 30, ops = 400000;
    for (uint64_t i = 0; i < ops; i++) {
        uint64_t k = next_scan_hot(&scan_left, &fresh) * (cap / 100 + 1) + rnd() % (cap / 100 + 1);
        access_key(c, k);
    }
    mc_evict_stats_t st;
    mc_evict_get_stats(c, &st);
    mc_evict_destroy(c);
    return (double)(st.work + st.mini_work) / (double)ops;
}

static void test_work_per_op_bounded(void **state)
{
    (void)state;
    for (int p = 0; p < MC_EVICT_N_POLICIES; p++) {
        double small = work_per_op((mc_evict_policy_t)p, 1000);
        double large = work_per_op((mc_evict_policy_t)p, 100000);
        print_message("%s: work/op %.1f at 1000, %.1f at 100000\n",
                      mc_evict_policy_name((mc_evict_policy_t)p), small, large);
        /* constant per operation: list moves, expected O(1) hash probes, sketch halving
         * amortised; independent of the capacity. adaptive adds its 10 miniatures on the
         * sampled keys (every key below 2 048 entries, 1/64 of them from 131 072 on). */
        double bound = p == MC_EVICT_ADAPTIVE ? 11 * 25 : 25;
        assert_true(small < bound);
        assert_true(large < bound);
        assert_true(large < small * 2 + 4);
    }
}

/* ---- the core on a host's own objects, as a byte-capacity store would use it ---- */

typedef struct host_obj {
    char name[16];
    uint64_t bytes;
    int leased, present;
    mc_evict_node_t ev; /* the only per-object state the policy needs */
} host_obj_t;

#define HOST_OBJ(n) ((host_obj_t *)((char *)(n) - offsetof(host_obj_t, ev)))

static uint64_t host_key(const mc_evict_node_t *n, void *arg)
{
    (void)arg;
    const host_obj_t *o = HOST_OBJ(n);
    uint64_t h = 1469598103934665603ULL; /* FNV-1a of the name: the host's own key hash */
    for (const char *p = o->name; *p; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ULL;
    return h;
}

static uint64_t host_size(const mc_evict_node_t *n, void *arg)
{
    (void)arg;
    return HOST_OBJ(n)->bytes;
}

typedef struct walk {
    mc_evict_node_t *nodes[512];
    uint64_t n;
} walk_t;

static void walk_collect(void *arg, mc_evict_node_t *n)
{
    walk_t *w = arg;
    if (w->n < 512)
        w->nodes[w->n] = n;
    w->n++;
}

static void test_core_host_objects(void **state)
{
    (void)state;
    assert_true(sizeof(mc_evict_node_t) <= 24);
    enum { N = 400, CAP = 100000 };
    static host_obj_t objs[N];
    for (int p = 0; p < MC_EVICT_N_POLICIES; p++) {
        memset(objs, 0, sizeof(objs));
        for (int i = 0; i < N; i++) {
            snprintf(objs[i].name, sizeof(objs[i].name), "key-%d", i);
            objs[i].bytes = 500 + (uint64_t)(i * 37) % 1500;
            objs[i].leased = i % 10 == 0; /* never evictable */
        }
        mc_evict_config_t cfg;
        mc_evict_config_default(&cfg, CAP, (mc_evict_policy_t)p);
        cfg.entries = CAP / 1000;
        mc_evict_host_t host = {host_key, host_size, NULL};
        mc_evict_core_t *core;
        assert_int_equal(mc_evict_core_create(&cfg, &host, &core), MC_OK);
        rng_state = 21;
        uint64_t skipped = 0;
        for (int op = 0; op < 50000; op++) {
            host_obj_t *o = &objs[rnd() % 7 ? rnd() % 80 : rnd() % N];
            if (o->present) {
                if (op % 13 == 0 && !o->leased) { /* a delete */
                    mc_evict_core_unlink(core, &o->ev, 0);
                    o->present = 0;
                } else {
                    mc_evict_core_hit(core, &o->ev);
                }
                continue;
            }
            mc_evict_core_miss(core, host_key(&o->ev, NULL), o->bytes);
            /* make room, skipping what cannot go now; give up after a full pass */
            int tries = 0;
            while (mc_evict_core_used(core) + o->bytes > CAP && tries < N) {
                mc_evict_node_t *v = mc_evict_core_victim(core);
                assert_non_null(v);
                host_obj_t *vo = HOST_OBJ(v);
                assert_true(vo->present);
                if (vo->leased) {
                    mc_evict_core_skip(core, v);
                    skipped++;
                    tries++;
                    continue;
                }
                mc_evict_core_unlink(core, v, 1);
                vo->present = 0;
            }
            if (mc_evict_core_used(core) + o->bytes > CAP)
                continue; /* everything left is leased: refuse the put */
            mc_evict_core_link(core, &o->ev);
            o->present = 1;
            assert_true(mc_evict_core_used(core) <= CAP);
        }
        /* leased objects that got in were never evicted; accounting matches the objects */
        uint64_t used = 0, n = 0;
        for (int i = 0; i < N; i++) {
            if (objs[i].present) {
                used += objs[i].bytes;
                n++;
            }
        }
        mc_evict_stats_t st;
        mc_evict_core_get_stats(core, &st);
        assert_int_equal(st.used, used);
        assert_int_equal(st.entries, n);
        assert_true(skipped > 0);
        /* mc_evict_core_next walks every linked object once, in foreach's order */
        walk_t w = {0};
        mc_evict_core_foreach(core, walk_collect, &w);
        assert_int_equal(w.n, n);
        uint64_t k = 0;
        for (mc_evict_node_t *v = mc_evict_core_next(core, NULL); v; v = mc_evict_core_next(core, v))
            assert_ptr_equal(v, w.nodes[k++]);
        assert_int_equal(k, n);
        for (int i = 0; i < N; i += 10)
            if (objs[i].present)
                mc_evict_core_unlink(core, &objs[i].ev, 0);
        mc_evict_core_destroy(core);
    }
}

/* A store's capacity and object count change: resize keeps the linked objects, applies the new
 * capacity, and sizes the ghost (10 bytes per expected entry) and sketch from the new entries. */
static void test_core_resize(void **state)
{
    (void)state;
    enum { N = 300 };
    static host_obj_t objs[N];
    for (int p = 0; p < MC_EVICT_N_POLICIES; p++) {
        memset(objs, 0, sizeof(objs));
        mc_evict_config_t cfg;
        mc_evict_config_default(&cfg, 0, (mc_evict_policy_t)p); /* nothing mounted yet */
        cfg.entries = 64;
        mc_evict_host_t host = {host_key, host_size, NULL};
        mc_evict_core_t *core;
        assert_int_equal(mc_evict_core_create(&cfg, &host, &core), MC_OK);
        for (int i = 0; i < N; i++) {
            snprintf(objs[i].name, sizeof(objs[i].name), "r-%d", i);
            objs[i].bytes = 100;
            if (i == 100)
                assert_int_equal(mc_evict_core_resize(core, 20000, 4096), MC_OK);
            mc_evict_core_miss(core, host_key(&objs[i].ev, NULL), 100);
            while (mc_evict_core_used(core) + 100 > mc_evict_core_capacity(core) &&
                   mc_evict_core_capacity(core) >= 100) {
                mc_evict_node_t *v = mc_evict_core_victim(core);
                mc_evict_core_unlink(core, v, 1);
                HOST_OBJ(v)->present = 0;
            }
            mc_evict_core_link(core, &objs[i].ev);
            objs[i].present = 1;
            if (i % 3 == 0)
                mc_evict_core_hit(core, &objs[i].ev);
        }
        mc_evict_stats_t st;
        mc_evict_core_get_stats(core, &st);
        assert_int_equal(mc_evict_core_capacity(core), 20000);
        assert_true(st.used <= 20000 && st.entries == st.used / 100);
        if (p != MC_EVICT_LRU && p != MC_EVICT_FIFO) {
            uint64_t ghost_keys = p == MC_EVICT_S3FIFO ? 4096 : 5 * 4096;
            assert_int_equal(st.ghost_cap, ghost_keys);
            assert_true(st.ghost_bytes >= 2 * ghost_keys && st.ghost_bytes <= 2 * ghost_keys + 64);
        } else {
            assert_int_equal(st.ghost_bytes, 0);
        }
        assert_true(st.sketch_bytes <= 2 * 4096);
        assert_int_equal(st.mini_bytes > 0, p == MC_EVICT_ADAPTIVE);
        /* shrink the capacity: the next victims bring it back under */
        assert_int_equal(mc_evict_core_resize(core, 5000, 4096), MC_OK);
        while (mc_evict_core_used(core) > 5000) {
            mc_evict_node_t *v = mc_evict_core_victim(core);
            mc_evict_core_unlink(core, v, 1);
            HOST_OBJ(v)->present = 0;
        }
        uint64_t n = 0;
        for (int i = 0; i < N; i++)
            n += (uint64_t)objs[i].present;
        mc_evict_core_get_stats(core, &st);
        assert_int_equal(st.entries, n);
        assert_true(n <= 50);
        for (int i = 0; i < N; i++)
            if (objs[i].present)
                mc_evict_core_unlink(core, &objs[i].ev, 0);
        mc_evict_core_destroy(core);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_lru_exact),
        cmocka_unit_test(test_capacity_and_sizes),
        cmocka_unit_test(test_scan_keeps_hot_set),
        cmocka_unit_test(test_one_hit_wonders_stay_in_probation),
        cmocka_unit_test(test_loop_larger_than_cache),
        cmocka_unit_test(test_adaptive_switches),
        cmocka_unit_test(test_adaptive_warmup_and_streak),
        cmocka_unit_test(test_work_per_op_bounded),
        cmocka_unit_test(test_core_host_objects),
        cmocka_unit_test(test_core_resize),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
