/* Master core state machine, driven directly (no network) with a fake clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "policy_env.h"
#include "common/alloc.h"
#include "common/grant.h"
#include "common/log.h"
#include "master/master.h"
#include "master/wal.h"
#include "rpc/frame.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t g_now = 1000000;
static uint64_t fake_clock(void *ctx)
{
    (void)ctx;
    return g_now;
}

static const uint8_t CA[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
static const uint8_t CB[16] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2};

/* policy_env: take the eviction policy from MC_TEST_EVICTION_POLICY (tests of a given policy
 * pass false) */
static mc_master_t *mk_ex(mc_master_config_t *cfg_opt, bool policy_env)
{
    mc_master_config_t cfg;
    if (cfg_opt)
        cfg = *cfg_opt;
    else
        mc_master_config_default(&cfg);
    cfg.clock = fake_clock; /* from the start: WAL recovery stamps deadlines with it */
    mc_master_t *m;
    if (policy_env)
        test_policy_from_env(&cfg);
    assert_int_equal(mc_master_create(&cfg, &m), MC_OK);
    mc_master_set_seed(m, 7);
    return m;
}

static mc_master_t *mk(mc_master_config_t *cfg_opt) { return mk_ex(cfg_opt, true); }

static void mount(mc_master_t *m, const uint8_t *cid, const char *name, uint64_t base,
                  uint64_t size, const char *label, uint8_t uuid_byte)
{
    mc_master_segment_info_t si = {.name = name, .base = base, .size = size, .host_label = label,
                                   .te_endpoint = name};
    memset(si.uuid, uuid_byte, 16);
    assert_int_equal(mc_master_mount(m, cid, &si, false), MC_OK);
}

static mc_status_t put(mc_master_t *m, const uint8_t *cid, const char *key, uint64_t size,
                       uint64_t sum)
{
    mc_master_replica_t r[8];
    uint32_t n;
    mc_status_t st = mc_master_put_start(m, cid, key, strlen(key), size, NULL, false, r, &n);
    if (st != MC_OK)
        return st;
    return mc_master_put_end(m, cid, key, strlen(key), sum);
}

#define K(s) s, strlen(s)

static void test_put_get_states(void **state)
{
    (void)state;
    mc_master_t *m = mk(NULL);
    mount(m, CA, "segA", 0x10000, 1 << 20, "h1", 0xaa);
    mc_master_replica_t r[8];
    uint32_t n = 0;
    uint64_t size, sum;
    /* validation */
    assert_int_equal(mc_master_put_start(m, CA, "", 0, 10, NULL, false, r, &n), MC_ERR_INVALID_KEY);
    /* the core's cap is a user key plus the longest tenant prefix (common/tenant.h) */
    enum { KMAX = MC_RPC_MAX_KEY + MC_TENANT_KEY_EXTRA };
    char big[KMAX + 2];
    memset(big, 'k', sizeof(big));
    assert_int_equal(mc_master_put_start(m, CA, big, KMAX + 1, 10, NULL, false, r, &n),
                     MC_ERR_INVALID_KEY);
    assert_int_equal(mc_master_put_start(m, CA, big, KMAX, 10, NULL, false, r, &n), MC_OK);
    assert_int_equal(mc_master_put_revoke(m, CA, big, KMAX), MC_OK);
    assert_int_equal(mc_master_put_start(m, CA, K("k"), 0, NULL, false, r, &n),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_put_start(m, CA, K("k"), (1ull << 40) + 1, NULL, false, r, &n),
                     MC_ERR_INVALID_PARAMS);
    /* writing: invisible to readers */
    assert_int_equal(mc_master_put_start(m, CA, K("k1"), 1000, NULL, false, r, &n), MC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(r[0].status, 1);
    assert_string_equal(r[0].segment_name, "segA");
    assert_true(r[0].addr >= 0x10000 && r[0].addr + 1000 <= 0x10000 + (1 << 20));
    uint64_t addr = r[0].addr;
    assert_int_equal(mc_master_get_replicas(m, K("k1"), r, &n, &size, &sum),
                     MC_ERR_REPLICA_IS_NOT_READY);
    assert_int_equal(mc_master_exist(m, K("k1")), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_put_start(m, CB, K("k1"), 1000, NULL, false, r, &n),
                     MC_ERR_REPLICA_IS_NOT_READY);
    /* PutEnd from another client */
    assert_int_equal(mc_master_put_end(m, CB, K("k1"), 5), MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_put_revoke(m, CB, K("k1")), MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_put_end(m, CA, K("k1"), 0xabcdef), MC_OK);
    /* double PutEnd, revoke after end */
    assert_int_equal(mc_master_put_end(m, CA, K("k1"), 0xabcdef), MC_ERR_INVALID_WRITE);
    assert_int_equal(mc_master_put_revoke(m, CA, K("k1")), MC_ERR_INVALID_WRITE);
    assert_int_equal(mc_master_put_end(m, CA, K("nope"), 1), MC_ERR_OBJECT_NOT_FOUND);
    /* readable */
    assert_int_equal(mc_master_get_replicas(m, K("k1"), r, &n, &size, &sum), MC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(r[0].status, 2);
    assert_int_equal(r[0].addr, addr);
    assert_int_equal(size, 1000);
    assert_int_equal(sum, 0xabcdef);
    assert_int_equal(mc_master_exist(m, K("k1")), MC_OK);
    assert_int_equal(mc_master_get_size(m, K("k1"), &size), MC_OK);
    assert_int_equal(size, 1000);
    assert_int_equal(put(m, CB, "k1", 10, 1), MC_ERR_OBJECT_ALREADY_EXISTS);
    /* revoke of a writing object frees it */
    assert_int_equal(mc_master_put_start(m, CA, K("k2"), 1000, NULL, false, r, &n), MC_OK);
    assert_int_equal(mc_master_put_revoke(m, CA, K("k2")), MC_OK);
    assert_int_equal(mc_master_exist(m, K("k2")), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_object_count(m), 1);
    mc_master_destroy(m);
}

static void test_remove_lease(void **state)
{
    (void)state;
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.default_kv_lease_ttl_ms = 500;
    mc_master_t *m = mk(&cfg);
    mount(m, CA, "segA", 0, 1 << 20, "h1", 1);
    assert_int_equal(put(m, CA, "a", 100, 1), MC_OK);
    mc_master_replica_t r[8];
    uint32_t n;
    assert_int_equal(mc_master_get_replicas(m, K("a"), r, &n, NULL, NULL), MC_OK);
    assert_int_equal(mc_master_remove(m, K("a"), false, NULL), MC_ERR_OBJECT_HAS_LEASE);
    g_now += 501; /* lease expired */
    assert_int_equal(mc_master_remove(m, K("a"), false, NULL), MC_OK);
    assert_int_equal(mc_master_remove(m, K("a"), false, NULL), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(put(m, CA, "b", 100, 1), MC_OK);
    assert_int_equal(mc_master_get_replicas(m, K("b"), r, &n, NULL, NULL), MC_OK);
    assert_int_equal(mc_master_remove(m, K("b"), true, NULL), MC_OK); /* force */
    /* remove of an in-flight put is refused */
    assert_int_equal(mc_master_put_start(m, CA, K("w"), 10, NULL, false, r, &n), MC_OK);
    assert_int_equal(mc_master_remove(m, K("w"), true, NULL), MC_ERR_REPLICA_IS_NOT_READY);
    /* regex and all */
    assert_int_equal(put(m, CA, "model@1@x", 100, 1), MC_OK);
    assert_int_equal(put(m, CA, "model@2@x", 100, 1), MC_OK);
    assert_int_equal(put(m, CA, "other", 100, 1), MC_OK);
    uint64_t cnt;
    assert_int_equal(mc_master_remove_regex(m, "^model@[0-9]+@", false, &cnt, NULL), MC_OK);
    assert_int_equal(cnt, 2);
    assert_int_equal(mc_master_remove_regex(m, "([", false, &cnt, NULL), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_remove_all(m, false, &cnt, NULL), MC_OK);
    assert_int_equal(cnt, 1);
    assert_int_equal(mc_master_object_count(m), 1); /* the in-flight put */
    mc_master_destroy(m);
}

/* The lease gauge: a get leases its object (counted once however often it is read), the
 * count drops when the lease ends (to the second, rounded up); pins are counted; a segment's
 * page size is validated and kept. */
static uint64_t leased(mc_master_t *m)
{
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    return mt.leased_key_count;
}

static void test_lease_gauge(void **state)
{
    (void)state;
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.default_kv_lease_ttl_ms = 2500;
    mc_master_t *m = mk(&cfg);
    mc_master_segment_info_t si = {.name = "segA", .size = 1 << 20, .te_endpoint = "segA",
                                   .page_size = 3000};
    assert_int_equal(mc_master_mount(m, CA, &si, false), MC_ERR_INVALID_PARAMS);
    si.page_size = 2u << 20;
    assert_int_equal(mc_master_mount(m, CA, &si, false), MC_OK);
    char *j = mc_master_segments_detail_json(m);
    assert_non_null(strstr(j, "\"page_size\":2097152"));
    assert_non_null(strstr(j, "\"huge_pages\":true"));
    assert_non_null(strstr(j, "\"disk_tiers\":[]"));
    mc_free(j);
    mc_master_replica_t r[8];
    uint32_t n;
    mc_master_put_opts_t hard = {.hard_pin = true};
    assert_int_equal(put(m, CA, "a", 100, 1), MC_OK);
    assert_int_equal(put(m, CA, "b", 100, 1), MC_OK);
    assert_int_equal(mc_master_put_start(m, CA, K("h"), 100, &hard, false, r, &n), MC_OK);
    assert_int_equal(mc_master_put_end(m, CA, K("h"), 1), MC_OK);
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.hard_pin_key_count, 1);
    assert_int_equal(leased(m), 0); /* puts lease nothing */
    assert_int_equal(mc_master_get_replicas(m, K("a"), r, &n, NULL, NULL), MC_OK);
    assert_int_equal(leased(m), 1);
    g_now += 1000;
    assert_int_equal(mc_master_get_replicas(m, K("a"), r, &n, NULL, NULL), MC_OK); /* extends */
    assert_int_equal(mc_master_get_replicas(m, K("b"), r, &n, NULL, NULL), MC_OK);
    assert_int_equal(leased(m), 2);
    g_now += 2500; /* both leases end now: gone once the second is over */
    uint64_t left = leased(m);
    assert_true(left <= 2);
    g_now += 1000;
    assert_int_equal(leased(m), 0);
    assert_int_equal(mc_master_get_replicas(m, K("b"), r, &n, NULL, NULL), MC_OK);
    g_now += 3600000; /* a long idle gap clears the ring */
    assert_int_equal(leased(m), 0);
    mc_master_destroy(m);
}

/* A batch lookup (mc_master_lookup_prepare + the _h calls) answers as key-by-key lookups do,
 * for keys deep in hash chains (thousands of keys in a table at load ~0.7), absent and invalid
 * keys; every lease it grants ends at the prepare's clock reading + the TTL, however much the
 * clock moves during the batch; the lease gauge counts each key once. */
static void test_batch_lookup(void **state)
{
    (void)state;
    enum { N = 3000, NB = N + 2 };
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.default_kv_lease_ttl_ms = 2000;
    mc_master_t *m = mk(&cfg);
    mount(m, CA, "segA", 0, 64 << 20, "h1", 1);
    static char names[N][16];
    const char *keys[NB];
    size_t klens[NB];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "k%05d", i);
        assert_int_equal(put(m, CA, names[i], 64 + (uint64_t)i, (uint64_t)i), MC_OK);
        keys[i] = names[i];
        klens[i] = strlen(names[i]);
    }
    keys[N] = "absent";
    klens[N] = 6;
    keys[N + 1] = "";
    klens[N + 1] = 0;
    uint32_t h[NB];
    uint64_t t0 = g_now;
    uint64_t now = mc_master_lookup_prepare(m, keys, klens, NB, h);
    assert_int_equal(now, t0);
    g_now += 700; /* the clock moves while the batch is answered */
    for (int i = 0; i < NB; i++) {
        mc_master_replica_t r[8], p[8];
        uint32_t n = 0, np = 0;
        uint64_t size = 0, sum = 0, psize = 0;
        mc_status_t st = mc_master_get_replicas_h(m, keys[i], klens[i], h[i], now, r, &n, &size,
                                                  &sum);
        mc_status_t pst = mc_master_peek_replicas(m, keys[i], klens[i], p, &np, &psize);
        assert_int_equal(st, pst);
        if (i < N) {
            assert_int_equal(st, MC_OK);
            assert_int_equal(n, 1);
            assert_int_equal(np, 1);
            assert_int_equal(r[0].addr, p[0].addr);
            assert_int_equal(size, 64 + (uint64_t)i);
            assert_int_equal(sum, (uint64_t)i);
        } else {
            assert_int_equal(st, i == N ? MC_ERR_OBJECT_NOT_FOUND : MC_ERR_INVALID_KEY);
        }
    }
    assert_int_equal(leased(m), N);
    g_now = t0 + 2000 - 1; /* still leased: the lease ends at the prepare's reading + TTL */
    assert_int_equal(mc_master_remove(m, K("k00000"), false, NULL), MC_ERR_OBJECT_HAS_LEASE);
    g_now = t0 + 2000;
    assert_int_equal(mc_master_remove(m, K("k00000"), false, NULL), MC_OK);
    assert_int_equal(mc_master_remove(m, K("k02999"), false, NULL), MC_OK);
    g_now += 1000;
    assert_int_equal(leased(m), 0);
    mc_master_destroy(m);
}

/* 1 MiB segment, 64 KiB objects: the 17th put must succeed by evicting. Leased objects survive;
 * repeated ExistKey (#2187) does not protect anything. */
static void test_eviction_under_pressure(void **state)
{
    (void)state;
    mc_master_t *m = mk(NULL);
    mount(m, CA, "segA", 0, 1 << 20, "h1", 1);
    char key[32];
    for (int i = 0; i < 16; i++) {
        snprintf(key, sizeof(key), "obj%d", i);
        assert_int_equal(put(m, CA, key, 64 << 10, i), MC_OK);
        g_now += 1;
    }
    mc_master_replica_t r[8];
    uint32_t n;
    /* lease obj0 (oldest); existence-check everything many times */
    assert_int_equal(mc_master_get_replicas(m, K("obj0"), r, &n, NULL, NULL), MC_OK);
    for (int rep = 0; rep < 100; rep++)
        for (int i = 1; i < 16; i++) {
            snprintf(key, sizeof(key), "obj%d", i);
            assert_int_equal(mc_master_exist(m, key, strlen(key)), MC_OK);
        }
    assert_int_equal(put(m, CA, "new", 64 << 10, 99), MC_OK);
    assert_int_equal(mc_master_exist(m, K("obj0")), MC_OK);   /* leased: kept */
    assert_int_equal(mc_master_exist(m, K("obj1")), MC_ERR_OBJECT_NOT_FOUND); /* LRU victim */
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_true(mt.successful_evictions >= 1);
    assert_true(mt.evicted_bytes >= 64 << 10);
    /* Keep putting: never NO_AVAILABLE_HANDLE while something is evictable. */
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "more%d", i);
        assert_int_equal(put(m, CA, key, 64 << 10, i), MC_OK);
    }
    mc_master_destroy(m);
}

/* A value larger than every segment fails NO_AVAILABLE_HANDLE without evicting anything, then
 * or at the next cron: emptying the cache could not make it fit. One that would fit but finds
 * everything leased runs an eviction round that frees nothing (failed_evictions), and leaves
 * one pending for the cron; once the leases end, it evicts and fits. */
static void test_no_eviction_for_a_value_that_cannot_fit(void **state)
{
    (void)state;
    mc_master_t *m = mk(NULL);
    mount(m, CA, "segA", 0, 1 << 20, "h1", 1);
    char key[32];
    enum { N = 12 }; /* 768 KiB of 1 MiB: under the cron's watermark */
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "obj%d", i);
        assert_int_equal(put(m, CA, key, 64 << 10, i), MC_OK);
        g_now += 1;
    }
    assert_int_equal(put(m, CA, "huge", 2 << 20, 99), MC_ERR_NO_AVAILABLE_HANDLE);
    g_now += 20;
    mc_master_cron(m);
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.successful_evictions, 0);
    assert_int_equal(mt.failed_evictions, 0);
    assert_int_equal(mt.put_start_alloc_failures, 1);
    mc_master_replica_t r[8];
    uint32_t n;
    for (int i = 0; i < N; i++) { /* all there; now leased */
        snprintf(key, sizeof(key), "obj%d", i);
        assert_int_equal(mc_master_get_replicas(m, key, strlen(key), r, &n, NULL, NULL), MC_OK);
    }
    assert_int_equal(put(m, CA, "half", 512 << 10, 98), MC_ERR_NO_AVAILABLE_HANDLE);
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.failed_evictions, 1);
    mc_master_cron(m); /* the pending round, which finds everything still leased */
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.failed_evictions, 2);
    assert_int_equal(mt.successful_evictions, 0);
    g_now += 60000; /* the leases are over */
    assert_int_equal(put(m, CA, "half", 512 << 10, 98), MC_OK);
    mc_master_metrics_now(m, &mt);
    assert_true(mt.successful_evictions >= 1);
    mc_master_destroy(m);
}

/* Rounds of: read each of 300 hot keys (put it again if missing), then put 1 000 one-time scan
 * keys; the segment holds about 900 objects. The hot keys come back after 1 300 other
 * accesses, so LRU has always evicted them; adaptive's miniatures find that a segmented LRU
 * with a ghost keeps them and switch to it. Returns the hot hits of the last 5 rounds. */
static uint32_t scan_scenario(mc_evict_policy_t policy, mc_evict_stats_t *st)
{
    enum { HOT = 300, SCAN = 1000, ROUNDS = 30, OBJ = 4096 };
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.eviction_policy = policy;
    cfg.default_kv_lease_ttl_ms = 1; /* the clock moves 2 ms per read: nothing stays leased */
    mc_master_t *m = mk_ex(&cfg, false);
    mount(m, CA, "segA", 0, 1000 * OBJ, "h1", 1);
    mc_master_cron(m); /* the policy learns the mounted capacity */
    char key[32];
    uint32_t hits = 0, scan_id = 0;
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < HOT; i++) {
            mc_master_replica_t r[8];
            uint32_t n;
            snprintf(key, sizeof(key), "hot%d", i);
            if (mc_master_get_replicas(m, key, strlen(key), r, &n, NULL, NULL) == MC_OK)
                hits += round >= ROUNDS - 5;
            else
                assert_int_equal(put(m, CA, key, OBJ, i), MC_OK);
            g_now += 2;
        }
        for (int i = 0; i < SCAN; i++) {
            snprintf(key, sizeof(key), "scan%u", scan_id++);
            assert_int_equal(put(m, CA, key, OBJ, i), MC_OK);
        }
        mc_master_cron(m);
    }
    mc_master_policy_stats(m, st);
    mc_master_destroy(m);
    return hits;
}

static void test_policy_keeps_working_set_under_scan(void **state)
{
    (void)state;
    mc_evict_stats_t lru, ad;
    uint32_t lru_hits = scan_scenario(MC_EVICT_LRU, &lru);
    uint32_t ad_hits = scan_scenario(MC_EVICT_ADAPTIVE, &ad);
    fprintf(stderr, "hot hits in the last 5 rounds of 300 reads: lru %u, adaptive %u (share %u "
            "permille, %u switches, %llu ghost hits)\n", lru_hits, ad_hits,
            ad.probation_permille, ad.switches, (unsigned long long)ad.ghost_hits);
    assert_int_equal(lru_hits, 0);
    assert_true(ad_hits >= 5 * 300 * 9 / 10);
    assert_true(ad.switches >= 1 && ad.probation_permille < 1000);
    assert_int_equal(lru.ghost_bytes, 0); /* LRU keeps no ghost */
}

/* The adaptive policy's ghost and sketch follow the object count: at most 12 and 16 bytes per
 * object once past the floor of 1 024 expected objects, and the ghost still remembers 5 victims
 * per object. */
static void test_policy_memory_per_object(void **state)
{
    (void)state;
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.eviction_policy = MC_EVICT_ADAPTIVE;
    mc_master_t *m = mk_ex(&cfg, false);
    mount(m, CA, "segA", 0, 1ull << 30, "h1", 1);
    mc_master_cron(m);
    char key[32];
    for (uint32_t i = 1; i <= 50000; i++) {
        snprintf(key, sizeof(key), "k%u", i);
        assert_int_equal(put(m, CA, key, 4096, i), MC_OK);
        if (i % 5000 == 0) {
            mc_evict_stats_t st;
            mc_master_policy_stats(m, &st);
            assert_int_equal(st.entries, i);
            assert_true(st.ghost_bytes <= 12ull * i);
            assert_true(st.ghost_bytes + st.sketch_bytes <= 16ull * i);
            assert_true(st.ghost_cap >= 5ull * i);
            assert_true(st.mini_bytes > 0 && st.mini_bytes < (8u << 20));
        }
    }
    mc_master_destroy(m);
}

/* Evictions are logged (WAL REMOVE): after a restart and re-mount, exactly the objects that were
 * evicted are gone and the others readable, whichever policy chose them. */
static void test_eviction_logged(void **state)
{
    (void)state;
    char dir[] = "/tmp/mc_master_wal_XXXXXX";
    assert_non_null(mkdtemp(dir));
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.wal_dir = dir;
    mc_master_t *m = mk(&cfg);
    mount(m, CA, "segA", 0x100000, 1 << 20, "hA", 0x11);
    mc_master_cron(m);
    char key[32];
    for (int i = 0; i < 40; i++) { /* 64 KiB objects in 1 MiB: 24+ evictions */
        snprintf(key, sizeof(key), "obj%d", i);
        assert_int_equal(put(m, CA, key, 64 << 10, (uint64_t)i), MC_OK);
        g_now += 1;
    }
    bool present[40];
    int n_present = 0;
    for (int i = 0; i < 40; i++) {
        snprintf(key, sizeof(key), "obj%d", i);
        present[i] = mc_master_exist(m, key, strlen(key)) == MC_OK;
        n_present += present[i];
    }
    assert_true(n_present > 0 && n_present <= 16);
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.evicted_objects, 40 - n_present);
    assert_int_equal(mc_master_wal_sync(m), MC_OK);
    mc_master_destroy(m);

    m = mk(&cfg);
    mc_master_segment_info_t a = {.name = "segA", .base = 0x100000, .size = 1 << 20,
                                  .host_label = "hA"};
    memset(a.uuid, 0x11, 16);
    assert_int_equal(mc_master_mount(m, CA, &a, true), MC_OK);
    for (int i = 0; i < 40; i++) {
        snprintf(key, sizeof(key), "obj%d", i);
        assert_int_equal(mc_master_exist(m, key, strlen(key)) == MC_OK, present[i]);
    }
    mc_master_destroy(m);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* Only lru and adaptive are master policies. */
static void test_policy_config_checked(void **state)
{
    (void)state;
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    assert_int_equal(cfg.eviction_policy, MC_EVICT_LRU);
    cfg.eviction_policy = MC_EVICT_S3FIFO;
    mc_master_t *m = NULL;
    assert_int_equal(mc_master_create(&cfg, &m), MC_ERR_INVALID_PARAMS);
    assert_null(m);
}

static void test_exist_extends_lease_flag(void **state)
{
    (void)state;
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.exist_key_extends_lease = true; /* upstream behaviour, for contrast */
    mc_master_t *m = mk(&cfg);
    mount(m, CA, "segA", 0, 1 << 20, "h1", 1);
    assert_int_equal(put(m, CA, "a", 100, 1), MC_OK);
    assert_int_equal(mc_master_exist(m, K("a")), MC_OK);
    assert_int_equal(mc_master_remove(m, K("a"), false, NULL), MC_ERR_OBJECT_HAS_LEASE);
    mc_master_destroy(m);
    m = mk(NULL); /* default: no lease from ExistKey */
    mount(m, CA, "segA", 0, 1 << 20, "h1", 1);
    assert_int_equal(put(m, CA, "a", 100, 1), MC_OK);
    assert_int_equal(mc_master_exist(m, K("a")), MC_OK);
    assert_int_equal(mc_master_remove(m, K("a"), false, NULL), MC_OK);
    mc_master_destroy(m);
}

static void test_pins(void **state)
{
    (void)state;
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.allow_evict_soft_pinned_objects = false;
    mc_master_t *m = mk(&cfg);
    mount(m, CA, "segA", 0, 1 << 20, "h1", 1);
    mc_master_replica_t r[8];
    uint32_t n;
    mc_master_put_opts_t hard = {.hard_pin = true}, soft = {.soft_pin = true};
    char key[32];
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "hard%d", i);
        assert_int_equal(mc_master_put_start(m, CA, key, strlen(key), 64 << 10, &hard, false, r, &n),
                         MC_OK);
        assert_int_equal(mc_master_put_end(m, CA, key, strlen(key), 1), MC_OK);
        snprintf(key, sizeof(key), "soft%d", i);
        assert_int_equal(mc_master_put_start(m, CA, key, strlen(key), 64 << 10, &soft, false, r, &n),
                         MC_OK);
        assert_int_equal(mc_master_put_end(m, CA, key, strlen(key), 1), MC_OK);
    }
    /* full of pinned objects: nothing is evictable */
    assert_int_equal(put(m, CA, "x", 64 << 10, 1), MC_ERR_NO_AVAILABLE_HANDLE);
    mc_master_cron(m);
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "hard%d", i);
        assert_int_equal(mc_master_exist(m, key, strlen(key)), MC_OK);
        snprintf(key, sizeof(key), "soft%d", i);
        assert_int_equal(mc_master_exist(m, key, strlen(key)), MC_OK);
    }
    /* soft pins expire: then they are ordinary objects */
    g_now += 1800001;
    mc_master_ping(m, CA, &(bool){0});
    assert_int_equal(put(m, CA, "x", 64 << 10, 1), MC_OK);
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "hard%d", i);
        assert_int_equal(mc_master_exist(m, key, strlen(key)), MC_OK);
    }
    mc_master_destroy(m);

    /* allow_evict_soft_pinned_objects=true: soft pins go in the second pass */
    mc_master_config_default(&cfg);
    m = mk(&cfg);
    mount(m, CA, "segA", 0, 1 << 20, "h1", 1);
    for (int i = 0; i < 16; i++) {
        snprintf(key, sizeof(key), "soft%d", i);
        assert_int_equal(mc_master_put_start(m, CA, key, strlen(key), 64 << 10, &soft, false, r, &n),
                         MC_OK);
        assert_int_equal(mc_master_put_end(m, CA, key, strlen(key), 1), MC_OK);
    }
    assert_int_equal(put(m, CA, "y", 64 << 10, 1), MC_OK);
    mc_master_destroy(m);
}

static void test_stuck_put(void **state)
{
    (void)state;
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.put_start_discard_timeout_ms = 30000;
    cfg.put_start_release_timeout_ms = 600000;
    cfg.client_ttl_ms = 10000000;
    mc_master_t *m = mk(&cfg);
    mount(m, CA, "segA", 0, 1 << 20, "h1", 1);
    mc_master_replica_t r[8];
    uint32_t n;
    assert_int_equal(mc_master_put_start(m, CA, K("s"), 512 << 10, NULL, false, r, &n), MC_OK);
    uint64_t old_addr = r[0].addr;
    g_now += 29999;
    assert_int_equal(mc_master_put_start(m, CB, K("s"), 512 << 10, NULL, false, r, &n),
                     MC_ERR_REPLICA_IS_NOT_READY);
    g_now += 2;
    assert_int_equal(mc_master_put_start(m, CB, K("s"), 100 << 10, NULL, false, r, &n), MC_OK);
    assert_true(r[0].addr != old_addr); /* the pre-empted space is not reused yet */
    assert_int_equal(mc_master_put_end(m, CA, K("s"), 1), MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_put_end(m, CB, K("s"), 1), MC_OK);
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.put_start_discards, 1);
    mc_master_segment_status_t ss;
    assert_int_equal(mc_master_query_segment(m, "segA", &ss), MC_OK);
    assert_int_equal(ss.used, (512 + 100) << 10);
    g_now += 600000;
    mc_master_cron(m);
    assert_int_equal(mc_master_query_segment(m, "segA", &ss), MC_OK);
    assert_int_equal(ss.used, 100 << 10);
    /* a put nobody finishes is released entirely */
    assert_int_equal(mc_master_put_start(m, CA, K("t"), 1000, NULL, false, r, &n), MC_OK);
    g_now += 600001;
    mc_master_cron(m);
    assert_int_equal(mc_master_exist(m, K("t")), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_object_count(m), 1);
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.put_start_releases, 2);
    mc_master_destroy(m);
}

static void test_client_death_and_placement(void **state)
{
    (void)state;
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.client_ttl_ms = 10000;
    cfg.segment_hold_ms = 0; /* dropped at once (test_stalled_client_hold: the hold) */
    mc_master_t *m = mk(&cfg);
    mount(m, CA, "segA1", 0x100000, 1 << 20, "hostA", 1);
    mount(m, CA, "segA2", 0x300000, 1 << 20, "hostA", 2);
    mount(m, CB, "segB", 0x500000, 1 << 20, "hostB", 3);
    mc_master_replica_t r[8];
    uint32_t n;
    mc_master_put_opts_t two = {.replica_num = 2};
    for (int i = 0; i < 20; i++) {
        char key[16];
        snprintf(key, sizeof(key), "two%d", i);
        assert_int_equal(mc_master_put_start(m, CB, key, strlen(key), 1000, &two, false, r, &n),
                         MC_OK);
        assert_int_equal(n, 2);
        assert_string_not_equal(r[0].segment_name, r[1].segment_name);
        /* distinct host labels: exactly one replica on segB */
        assert_true((strcmp(r[0].segment_name, "segB") == 0) !=
                    (strcmp(r[1].segment_name, "segB") == 0));
        assert_int_equal(mc_master_put_end(m, CB, key, strlen(key), 7), MC_OK);
    }
    /* preferred segment (local-first) */
    mc_master_put_opts_t pref = {.preferred_segment = "segA2"};
    assert_int_equal(mc_master_put_start(m, CB, K("onA"), 1000, &pref, false, r, &n), MC_OK);
    assert_string_equal(r[0].segment_name, "segA2");
    assert_int_equal(mc_master_put_end(m, CB, K("onA"), 7), MC_OK);
    /* duplicate mount by another client */
    mc_master_segment_info_t si = {.name = "segB", .base = 1, .size = 1 << 20};
    assert_int_equal(mc_master_mount(m, CA, &si, false), MC_ERR_SEGMENT_ALREADY_EXISTS);
    /* A stops pinging; B keeps pinging */
    for (int t = 0; t < 12; t++) {
        g_now += 1000;
        bool need;
        assert_int_equal(mc_master_ping(m, CB, &need), MC_OK);
        assert_false(need);
        mc_master_cron(m);
    }
    mc_master_segment_status_t ss;
    assert_int_equal(mc_master_query_segment(m, "segA1", &ss), MC_ERR_SEGMENT_NOT_FOUND);
    assert_int_equal(mc_master_exist(m, K("onA")), MC_ERR_OBJECT_NOT_FOUND);
    for (int i = 0; i < 20; i++) {
        char key[16];
        snprintf(key, sizeof(key), "two%d", i);
        assert_int_equal(mc_master_get_replicas(m, key, strlen(key), r, &n, NULL, NULL), MC_OK);
        assert_int_equal(n, 1);
        assert_string_equal(r[0].segment_name, "segB");
    }
    /* A comes back: unknown -> NEED_REMOUNT */
    bool need = false;
    assert_int_equal(mc_master_ping(m, CA, &need), MC_OK);
    assert_true(need);
    mc_master_destroy(m);
}

/* A client that goes silent while its put is in flight loses its segments but can still
 * finish that put (its identity is kept while it has puts in flight). */
static void test_silent_writer(void **state)
{
    (void)state;
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.client_ttl_ms = 1000;
    mc_master_t *m = mk(&cfg);
    mount(m, CA, "segA", 0, 1 << 20, "h1", 1);
    mc_master_replica_t r[8];
    uint32_t n;
    assert_int_equal(mc_master_put_start(m, CB, K("slow"), 1000, NULL, false, r, &n), MC_OK);
    for (int i = 0; i < 3; i++) {
        g_now += 600;
        bool need;
        assert_int_equal(mc_master_ping(m, CA, &need), MC_OK);
        mc_master_cron(m);
    }
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.active_clients, 1);
    assert_int_equal(mc_master_put_end(m, CB, K("slow"), 5), MC_OK);
    assert_int_equal(mc_master_exist(m, K("slow")), MC_OK);
    mc_master_cron(m); /* now forgotten */
    bool need = false;
    assert_int_equal(mc_master_ping(m, CB, &need), MC_OK);
    assert_true(need);
    mc_master_destroy(m);
}

static void test_graceful_unmount(void **state)
{
    (void)state;
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.default_kv_lease_ttl_ms = 1000;
    mc_master_t *m = mk(&cfg);
    mount(m, CA, "segA", 0, 1 << 20, "h1", 1);
    mount(m, CB, "segB", 1 << 30, 1 << 20, "h2", 2);
    mc_master_replica_t r[8];
    uint32_t n;
    mc_master_put_opts_t pa = {.preferred_segment = "segA"};
    assert_int_equal(mc_master_put_start(m, CA, K("a"), 100, &pa, false, r, &n), MC_OK);
    assert_int_equal(mc_master_put_end(m, CA, K("a"), 1), MC_OK);
    assert_int_equal(mc_master_get_replicas(m, K("a"), r, &n, NULL, NULL), MC_OK); /* lease */
    assert_int_equal(mc_master_unmount(m, CB, "segA", true), MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_unmount(m, CA, "nope", true), MC_ERR_SEGMENT_NOT_FOUND);
    assert_int_equal(mc_master_unmount(m, CA, "segA", true), MC_OK);
    mc_master_segment_status_t ss;
    assert_int_equal(mc_master_query_segment(m, "segA", &ss), MC_OK);
    assert_int_equal(ss.state, 3); /* DRAINING */
    assert_int_equal(mc_master_exist(m, K("a")), MC_OK); /* still readable */
    for (int i = 0; i < 20; i++) { /* no new allocations there */
        char key[16];
        snprintf(key, sizeof(key), "n%d", i);
        assert_int_equal(mc_master_put_start(m, CA, key, strlen(key), 100, &pa, false, r, &n), MC_OK);
        assert_string_equal(r[0].segment_name, "segB");
    }
    g_now += 200;
    mc_master_cron(m);
    assert_int_equal(mc_master_query_segment(m, "segA", &ss), MC_OK); /* lease still held */
    g_now += 1000;
    bool need;
    mc_master_ping(m, CA, &need);
    mc_master_ping(m, CB, &need);
    mc_master_cron(m);
    assert_int_equal(mc_master_query_segment(m, "segA", &ss), MC_ERR_SEGMENT_NOT_FOUND);
    assert_int_equal(mc_master_exist(m, K("a")), MC_ERR_OBJECT_NOT_FOUND);
    mc_master_destroy(m);
}

static void test_free_ratio_first(void **state)
{
    (void)state;
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.strategy = MC_STRATEGY_FREE_RATIO_FIRST;
    mc_master_t *m = mk(&cfg);
    mount(m, CA, "small", 0, 1 << 20, "h1", 1);
    mount(m, CA, "big", 1 << 30, 8 << 20, "h2", 2);
    mc_master_replica_t r[8];
    uint32_t n;
    int on_big = 0;
    for (int i = 0; i < 64; i++) {
        char key[16];
        snprintf(key, sizeof(key), "f%d", i);
        assert_int_equal(mc_master_put_start(m, CA, key, strlen(key), 64 << 10, NULL, false, r, &n),
                         MC_OK);
        on_big += strcmp(r[0].segment_name, "big") == 0;
    }
    /* 64 x 64 KiB = 4 MiB spread to equalise the free ratio: ~8/9 lands on the big one */
    assert_true(on_big >= 54 && on_big <= 60);
    mc_master_segment_status_t a, b;
    assert_int_equal(mc_master_query_segment(m, "small", &a), MC_OK);
    assert_int_equal(mc_master_query_segment(m, "big", &b), MC_OK);
    double ra = (double)a.used / (double)a.capacity, rb = (double)b.used / (double)b.capacity;
    assert_true(ra - rb < 0.1 && rb - ra < 0.1);
    mc_master_destroy(m);
}

static void test_upsert(void **state)
{
    (void)state;
    mc_master_t *m = mk(NULL);
    mount(m, CA, "segA", 0, 1 << 20, "h1", 1);
    mc_master_replica_t r[8];
    uint32_t n;
    uint64_t size, sum;
    mc_master_retired_t retired = {.max = 8};
    assert_int_equal(mc_master_put_start(m, CA, K("u"), 100, NULL, true, r, &n), MC_OK);
    assert_int_equal(mc_master_put_end(m, CA, K("u"), 1), MC_OK);
    /* nobody holds a lease: the old value's space is simply freed, nothing to stamp */
    assert_int_equal(mc_master_put_start_ex(m, CA, K("u"), 200, NULL, true, r, &n, &retired, NULL),
                     MC_OK);
    assert_int_equal(retired.n, 0);
    assert_int_equal(mc_master_put_end(m, CA, K("u"), 2), MC_OK);
    assert_int_equal(mc_master_get_replicas(m, K("u"), r, &n, &size, &sum), MC_OK);
    assert_int_equal(size, 200);
    assert_int_equal(sum, 2);
    /* Upsert while a reader holds the lease: allowed, but the leased bytes stay where they
     * are until the lease ends, so the new value must get different space. */
    uint64_t leased_addr = r[0].addr;
    assert_int_equal(mc_master_put_start_ex(m, CA, K("u"), 300, NULL, true, r, &n, &retired, NULL),
                     MC_OK);
    assert_int_equal(n, 1);
    assert_int_not_equal(r[0].addr, leased_addr);
    /* the leased old value is listed for the writer to stamp (master.proto, retired) */
    assert_int_equal(retired.n, 1);
    assert_int_equal(retired.reps[0].addr, leased_addr);
    assert_int_equal(retired.reps[0].size, 200);
    assert_string_equal(retired.reps[0].endpoint, "segA");
    assert_true(retired.lease_left_ms > 0 && retired.lease_left_ms <= 10000);
    assert_int_not_equal(retired.token, 0);
    assert_int_equal(mc_master_put_end(m, CA, K("u"), 3), MC_OK);
    assert_int_equal(mc_master_get_replicas(m, K("u"), r, &n, &size, &sum), MC_OK);
    assert_int_equal(size, 300);
    assert_int_equal(sum, 3);
    /* The retired space stays allocated until the writer releases it with its token (it
     * stamped the old bytes) or the lease ends; another token releases nothing. */
    mc_master_segment_status_t st0, st1, st2;
    assert_int_equal(mc_master_query_segment(m, "segA", &st0), MC_OK);
    uint64_t other = retired.token + 1;
    assert_int_equal(mc_master_release_retired(m, &other, 1), 0);
    uint64_t several[3] = {other, retired.token, other + 1}; /* looked up among others */
    assert_int_equal(mc_master_release_retired(m, several, 3), 1);
    assert_int_equal(mc_master_query_segment(m, "segA", &st1), MC_OK);
    assert_true(st1.used < st0.used && st0.used - st1.used >= 200); /* allocator granules */
    assert_int_equal(mc_master_release_retired(m, &retired.token, 1), 0); /* once only */
    assert_int_equal(mc_master_query_segment(m, "segA", &st2), MC_OK);
    assert_int_equal(st2.used, st1.used);
    mc_master_retired_free(&retired);
    mc_master_destroy(m);
}

static uint64_t seg_used(mc_master_t *m, const char *name)
{
    mc_master_segment_status_t ss;
    assert_int_equal(mc_master_query_segment(m, name, &ss), MC_OK);
    return ss.used;
}

/* A forced remove of a leased value retires it like an upsert does: its space is held (never
 * reused under a reader), listed with a token for the remover to stamp, and freed when the
 * remover releases the token or the lease ends. Unleased values are freed at once. Answers
 * list at most `max` replicas; the rest are held for the whole lease, with no token. */
static void test_forced_remove_retires(void **state)
{
    (void)state;
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.default_kv_lease_ttl_ms = 500;
    mc_master_t *m = mk(&cfg);
    mount(m, CA, "segA", 0, 1 << 20, "h1", 1);
    mc_master_replica_t r[8];
    uint32_t n;
    const char *keys[] = {"a", "b", "c", "d"};
    for (int i = 0; i < 4; i++)
        assert_int_equal(put(m, CA, keys[i], 4096, 1), MC_OK);
    for (int i = 0; i < 3; i++) /* a, b and c are leased, d is not */
        assert_int_equal(mc_master_get_replicas(m, K(keys[i]), r, &n, NULL, NULL), MC_OK);
    assert_int_equal(mc_master_get_replicas(m, K("a"), r, &n, NULL, NULL), MC_OK);
    uint64_t addr_a = r[0].addr;

    uint64_t u0 = seg_used(m, "segA");
    mc_master_retired_t ret = {.max = 8};
    assert_int_equal(mc_master_remove(m, K("a"), true, &ret), MC_OK);
    assert_int_equal(mc_master_exist(m, K("a")), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(ret.n, 1);
    assert_int_equal(ret.unlisted, 0);
    assert_int_equal(ret.reps[0].addr, addr_a);
    assert_int_equal(ret.reps[0].size, 4096);
    assert_true(ret.lease_left_ms > 0 && ret.lease_left_ms <= 500);
    assert_int_not_equal(ret.token, 0);
    assert_int_equal(seg_used(m, "segA"), u0); /* held */
    assert_int_equal(mc_master_release_retired(m, &ret.token, 1), 1);
    uint64_t u1 = seg_used(m, "segA");
    assert_true(u1 < u0 && u0 - u1 >= 4096);
    mc_master_retired_free(&ret);

    /* unleased: freed at once, nothing listed */
    mc_master_retired_t none = {.max = 8};
    assert_int_equal(mc_master_remove(m, K("d"), true, &none), MC_OK);
    assert_int_equal(none.n + none.unlisted, 0);
    assert_int_equal(none.token, 0);
    assert_true(seg_used(m, "segA") < u1);
    uint64_t u2 = seg_used(m, "segA");

    /* b and c leased, a list of one: one listed with the token, one held without */
    mc_master_retired_t one = {.max = 1};
    uint64_t cnt = 0;
    assert_int_equal(mc_master_remove_all(m, true, &cnt, &one), MC_OK);
    assert_int_equal(cnt, 2);
    assert_int_equal(one.n, 1);
    assert_int_equal(one.unlisted, 1);
    assert_int_equal(seg_used(m, "segA"), u2);
    assert_int_equal(mc_master_release_retired(m, &one.token, 1), 1); /* the listed one only */
    uint64_t u3 = seg_used(m, "segA");
    assert_true(u3 < u2 && u3 > 0);
    g_now += 501; /* the leases end: the unlisted one is freed too */
    mc_master_cron(m);
    assert_int_equal(seg_used(m, "segA"), 0);
    mc_master_retired_free(&one);
    mc_master_destroy(m);
}

/* Data grants (mc_master_grants_begin): the space of an object whose replicas went out with
 * grants is not reused before the grants expire + MC_GRANT_SKEW_MS (their expiry is checked by
 * storage servers whose clocks may lag), whatever frees it. A one-object segment shows where
 * the next put lands. */
static mc_status_t put_at(mc_master_t *m, const char *key, uint64_t size, uint64_t *addr_p)
{
    mc_master_replica_t r[8];
    uint32_t n = 0;
    mc_status_t st = mc_master_put_start(m, CB, key, strlen(key), size, NULL, false, r, &n);
    if (st == MC_OK) {
        *addr_p = r[0].addr;
        assert_int_equal(mc_master_put_end(m, CB, key, strlen(key), 1), MC_OK);
    }
    return st;
}

/* Puts of `key` fail (no space) until `until`, then land at addr. */
static void reused_at(mc_master_t *m, const char *key, uint64_t until, uint64_t addr)
{
    uint64_t got = 0;
    mc_master_cron(m);
    assert_int_equal(put_at(m, key, 65536, &got), MC_ERR_NO_AVAILABLE_HANDLE);
    g_now = until - 1;
    mc_master_cron(m);
    assert_int_equal(put_at(m, key, 65536, &got), MC_ERR_NO_AVAILABLE_HANDLE);
    g_now = until;
    mc_master_cron(m);
    assert_int_equal(put_at(m, key, 65536, &got), MC_OK);
    assert_int_equal(got, addr);
    assert_int_equal(mc_master_remove(m, key, strlen(key), true, NULL), MC_OK);
}

static void test_grants_park_space(void **state)
{
    (void)state;
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.default_kv_lease_ttl_ms = 500;
    cfg.put_start_discard_timeout_ms = 30000;
    cfg.client_ttl_ms = 1ull << 40; /* the clock jumps; nobody pings */
    mc_master_t *m = mk(&cfg);
    mount(m, CA, "segA", 0x100000, 65536, "h1", 1);
    const uint64_t skew = MC_GRANT_SKEW_MS;
    assert_int_equal(mc_master_grant_life_ms(m, false), 500 + skew);
    assert_int_equal(mc_master_grant_life_ms(m, true), 30000 + skew);
    mc_master_replica_t r[8];
    uint32_t n;
    uint64_t addr = 0, t0;

    /* without grants: freed at once */
    assert_int_equal(put_at(m, "plain", 65536, &addr), MC_OK);
    assert_int_equal(mc_master_get_replicas(m, K("plain"), r, &n, NULL, NULL), MC_OK);
    g_now += 501;
    assert_int_equal(mc_master_remove(m, K("plain"), false, NULL), MC_OK);
    assert_int_equal(put_at(m, "x", 65536, &addr), MC_OK);
    assert_int_equal(mc_master_remove(m, K("x"), true, NULL), MC_OK);

    /* a read grant: removed once the lease ended, parked until lease + 2 x skew */
    assert_int_equal(put_at(m, "a", 65536, &addr), MC_OK);
    t0 = g_now;
    mc_master_grants_begin(m);
    assert_int_equal(mc_master_get_replicas(m, K("a"), r, &n, NULL, NULL), MC_OK);
    mc_master_grants_end(m);
    g_now += 501;
    assert_int_equal(mc_master_remove(m, K("a"), false, NULL), MC_OK);
    reused_at(m, "b", t0 + 500 + 2 * skew, addr);

    /* a write grant of a revoked put: parked until put start + discard timeout + 2 x skew (the
     * master keeps that end on a 2 s grid: start on it) */
    g_now = (g_now / 2000 + 1) * 2000;
    t0 = g_now;
    mc_master_grants_begin(m);
    assert_int_equal(mc_master_put_start(m, CA, K("w"), 65536, NULL, false, r, &n), MC_OK);
    mc_master_grants_end(m);
    assert_int_equal(r[0].addr, addr);
    g_now += 10;
    assert_int_equal(mc_master_put_revoke(m, CA, K("w")), MC_OK);
    reused_at(m, "b", t0 + 30000 + 2 * skew, addr);

    /* the write grant outlives the commit and a later (ungranted) read lease; eviction does not
     * take an object under grants either (it would free nothing) */
    g_now = (g_now / 2000 + 1) * 2000;
    t0 = g_now;
    mc_master_grants_begin(m);
    assert_int_equal(mc_master_put_start(m, CA, K("c"), 65536, NULL, false, r, &n), MC_OK);
    mc_master_grants_end(m);
    g_now += 1000;
    assert_int_equal(mc_master_put_end(m, CA, K("c"), 1), MC_OK);
    assert_int_equal(mc_master_get_replicas(m, K("c"), r, &n, NULL, NULL), MC_OK);
    g_now += 1000;
    uint64_t got = 0;
    assert_int_equal(put_at(m, "b", 65536, &got), MC_ERR_NO_AVAILABLE_HANDLE); /* not evicted */
    assert_int_equal(mc_master_exist(m, K("c")), MC_OK);
    assert_int_equal(mc_master_remove(m, K("c"), false, NULL), MC_OK);
    reused_at(m, "b", t0 + 30000 + 2 * skew, addr);

    /* retired under a lease by a forced remove: ReleaseRetired frees it no earlier */
    assert_int_equal(put_at(m, "d", 65536, &addr), MC_OK);
    t0 = g_now;
    mc_master_grants_begin(m);
    assert_int_equal(mc_master_get_replicas(m, K("d"), r, &n, NULL, NULL), MC_OK);
    mc_master_grants_end(m);
    mc_master_retired_t ret = {.max = 8};
    assert_int_equal(mc_master_remove(m, K("d"), true, &ret), MC_OK);
    assert_int_equal(ret.n, 1);
    assert_int_equal(mc_master_release_retired(m, &ret.token, 1), 0);
    mc_master_retired_free(&ret);
    reused_at(m, "b", t0 + 500 + 2 * skew, addr);

    /* retired replicas listed inside a session (stamp grants): at least now + TTL + 2 x skew */
    assert_int_equal(put_at(m, "e", 65536, &addr), MC_OK);
    assert_int_equal(mc_master_get_replicas(m, K("e"), r, &n, NULL, NULL), MC_OK);
    g_now += 400; /* 100 ms of lease left */
    t0 = g_now;
    mc_master_retired_t ret2 = {.max = 8};
    mc_master_grants_begin(m);
    assert_int_equal(mc_master_remove(m, K("e"), true, &ret2), MC_OK);
    mc_master_grants_end(m);
    assert_int_equal(ret2.lease_left_ms, 100);
    assert_int_equal(mc_master_release_retired(m, &ret2.token, 1), 0);
    mc_master_retired_free(&ret2);
    reused_at(m, "b", t0 + 500 + 2 * skew, addr);
    mc_master_destroy(m);
}

static void rm_rf(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* Threads that allocate, free and log without pause: at any instant one of them may hold the
 * allocator's or the log's lock, which a fork()ed child then finds taken forever. */
static atomic_bool churn_stop;
static atomic_uint_fast64_t churn_logged;

static void churn_sink(mc_log_level_t level, const char *file, int line, const char *msg,
                       void *arg)
{
    (void)level, (void)file, (void)line, (void)msg, (void)arg;
    atomic_fetch_add(&churn_logged, 1);
}

static void *churn_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&churn_stop)) {
        void *p[12];
        for (int i = 0; i < 12; i++)
            p[i] = mc_malloc((size_t)16 << i);
        MC_LOG_ERROR("churn");
        for (int i = 0; i < 12; i++)
            mc_free(p[i]);
    }
    return NULL;
}

/* The child's exit status (128 + signal if killed), or -1 when it did not exit within 20 s
 * (a hang: it is killed). */
static int reap_within(pid_t pid)
{
    for (int i = 0; i < 20000; i++) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        usleep(1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static uint8_t *read_all(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    assert_true(len > 0);
    rewind(f);
    uint8_t *p = mc_malloc((size_t)len);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *len_p = (size_t)len;
    return p;
}

/* Snapshot children fork()ed while two other threads allocate, free and log without pause
 * (the master's RPC, HA and HTTP threads do): every child exits (none waits on a lock a parent
 * thread held at the fork), a good one with 0 and the bytes a snapshot written in-process has,
 * one that cannot open its file with 1, logging nothing. */
static void test_snapshot_fork_while_threads_allocate(void **state)
{
    (void)state;
    char dir[] = "/tmp/mc_master_snapfork_XXXXXX";
    assert_non_null(mkdtemp(dir));
    mc_master_t *m = mk(NULL);
    mount(m, CA, "segF", 0x100000, 64 << 20, "hF", 0x31);
    enum { KEYS = 20000 }; /* a snapshot over 1 MiB: the child's writer flushes as it goes */
    for (int i = 0; i < KEYS; i++) {
        char key[64];
        snprintf(key, sizeof(key), "snapshot-fork-key-%06d", i);
        assert_int_equal(put(m, CA, key, 1024, (uint64_t)i + 1), MC_OK);
    }
    char want[300], tmp[300], snap[300], bad_tmp[300], bad_snap[300];
    snprintf(want, sizeof(want), "%s/want", dir);
    snprintf(tmp, sizeof(tmp), "%s/want.tmp", dir);
    assert_int_equal(mc_master_snapshot_write(m, tmp, want), 0);
    size_t want_len;
    uint8_t *want_bytes = read_all(want, &want_len);
    assert_true(want_len > (1u << 20));
    snprintf(tmp, sizeof(tmp), "%s/snap.tmp", dir);
    snprintf(snap, sizeof(snap), "%s/snap", dir);
    snprintf(bad_tmp, sizeof(bad_tmp), "%s/missing/snap.tmp", dir);
    snprintf(bad_snap, sizeof(bad_snap), "%s/missing/snap", dir);

    mc_log_set_sink(churn_sink, NULL);
    atomic_store(&churn_stop, false);
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, churn_main, NULL), 0);
    int hung = 0, failed = 0, wrong = 0, bad_ok = 0;
    for (int round = 0; round < 100; round++) {
        while (atomic_load(&churn_logged) < 100 * (uint64_t)(round + 1))
            sched_yield(); /* the threads run between forks */
        bool good = round % 2 == 0;
        unlink(snap);
        pid_t pid = mc_master_snapshot_fork(m, good ? tmp : bad_tmp, good ? snap : bad_snap);
        assert_true(pid > 0);
        int st = reap_within(pid);
        if (st < 0) {
            hung++;
        } else if (!good) {
            bad_ok += st == 0;
        } else if (st != 0) {
            failed++;
        } else {
            size_t len;
            uint8_t *got = read_all(snap, &len);
            wrong += len != want_len || memcmp(got, want_bytes, len) != 0;
            mc_free(got);
        }
    }
    atomic_store(&churn_stop, true);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    mc_log_set_sink(NULL, NULL);
    mc_free(want_bytes);
    mc_master_destroy(m);
    rm_rf(dir);
    assert_int_equal(hung, 0);
    assert_int_equal(failed, 0);
    assert_int_equal(wrong, 0);
    assert_int_equal(bad_ok, 0);
}

static void test_wal_recovery(void **state)
{
    (void)state;
    char dir[] = "/tmp/mc_master_wal_XXXXXX";
    assert_non_null(mkdtemp(dir));
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.wal_dir = dir;
    cfg.wal_fsync = false;
    cfg.client_ttl_ms = 10000;
    mc_master_t *m = mk(&cfg);
    mount(m, CA, "segA", 0x100000, 1 << 20, "hA", 0x11);
    mount(m, CB, "segB", 0x900000, 1 << 20, "hB", 0x22);
    mc_master_replica_t r[8];
    uint32_t n;
    uint64_t addr_k1 = 0;
    assert_int_equal(put(m, CA, "k1", 1000, 0x1111), MC_OK);
    assert_int_equal(mc_master_get_replicas(m, K("k1"), r, &n, NULL, NULL), MC_OK);
    addr_k1 = r[0].addr;
    const char *seg_k1 = strcmp(r[0].segment_name, "segA") == 0 ? "segA" : "segB";
    assert_int_equal(put(m, CA, "k2", 2000, 0x2222), MC_OK);
    assert_int_equal(put(m, CA, "gone", 2000, 0x3333), MC_OK);
    assert_int_equal(mc_master_remove(m, K("gone"), true, NULL), MC_OK);
    assert_int_equal(mc_master_put_start(m, CA, K("inflight"), 100, NULL, false, r, &n), MC_OK);
    assert_int_equal(mc_master_wal_sync(m), MC_OK);
    mc_master_destroy(m);

    m = mk(&cfg);
    /* nothing readable until the owners re-mount, but the recovered objects exist: gets
     * answer REPLICA_IS_NOT_READY (retryable), not OBJECT_NOT_FOUND, and a put of the key
     * finds it there; a key that never existed (or was removed) is still not found */
    uint64_t size, sum;
    assert_int_equal(mc_master_exist(m, K("k1")), MC_OK);
    assert_int_equal(mc_master_get_size(m, K("k2"), &size), MC_OK);
    assert_int_equal(size, 2000);
    assert_int_equal(mc_master_get_replicas(m, K("k1"), r, &n, NULL, NULL),
                     MC_ERR_REPLICA_IS_NOT_READY);
    assert_int_equal(n, 0);
    assert_int_equal(mc_master_peek_replicas(m, K("k2"), r, &n, NULL),
                     MC_ERR_REPLICA_IS_NOT_READY);
    assert_int_equal(put(m, CB, "k1", 1000, 1), MC_ERR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(mc_master_get_replicas(m, K("never"), r, &n, NULL, NULL),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_get_replicas(m, K("gone"), r, &n, NULL, NULL),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_exist(m, K("never")), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_get_size(m, K("never"), &size), MC_ERR_OBJECT_NOT_FOUND);
    mc_master_segment_status_t ss;
    assert_int_equal(mc_master_query_segment(m, "segA", &ss), MC_OK);
    assert_int_equal(ss.state, 2);
    bool need = false;
    assert_int_equal(mc_master_ping(m, CA, &need), MC_OK);
    assert_true(need);
    /* segA re-mounted with the same memory; segB with different memory (uuid) */
    mc_master_segment_info_t a = {.name = "segA", .base = 0x100000, .size = 1 << 20,
                                  .host_label = "hA"};
    memset(a.uuid, 0x11, 16);
    assert_int_equal(mc_master_mount(m, CA, &a, true), MC_OK);
    mc_master_segment_info_t b = {.name = "segB", .base = 0x900000, .size = 1 << 20,
                                  .host_label = "hB"};
    memset(b.uuid, 0x99, 16);
    assert_int_equal(mc_master_mount(m, CB, &b, true), MC_OK);
    if (strcmp(seg_k1, "segA") == 0) {
        assert_int_equal(mc_master_get_replicas(m, K("k1"), r, &n, &size, &sum), MC_OK);
        assert_int_equal(r[0].addr, addr_k1);
        assert_int_equal(size, 1000);
        assert_int_equal(sum, 0x1111);
    } else {
        assert_int_equal(mc_master_exist(m, K("k1")), MC_ERR_OBJECT_NOT_FOUND);
    }
    assert_int_equal(mc_master_exist(m, K("gone")), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_exist(m, K("inflight")), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_put_start(m, CA, K("inflight"), 100, NULL, false, r, &n), MC_OK);
    /* new allocations never overlap recovered ones */
    for (int i = 0; i < 50; i++) {
        char key[16];
        snprintf(key, sizeof(key), "n%d", i);
        if (put(m, CA, key, 1000, 1) != MC_OK)
            break;
        assert_int_equal(mc_master_get_replicas(m, key, strlen(key), r, &n, NULL, NULL), MC_OK);
        assert_true(r[0].addr + 1000 <= addr_k1 || r[0].addr >= addr_k1 + 1000 ||
                    strcmp(r[0].segment_name, seg_k1) != 0);
    }
    mc_master_cron(m); /* starts a snapshot */
    for (int i = 0; i < 200; i++) {
        mc_master_cron(m);
        usleep(5000);
    }
    mc_master_destroy(m);

    /* third start from the snapshot; segments not re-mounted are dropped after the grace */
    m = mk(&cfg);
    assert_int_equal(mc_master_query_segment(m, "segA", &ss), MC_OK);
    assert_int_equal(ss.state, 2);
    assert_true(ss.replicas > 0);
    g_now += 10001;
    mc_master_cron(m);
    assert_int_equal(mc_master_query_segment(m, "segA", &ss), MC_ERR_SEGMENT_NOT_FOUND);
    assert_int_equal(mc_master_object_count(m), 0);
    mc_master_destroy(m);
    rm_rf(dir);
}

/* A leader's configuration with its WAL in dir and its PutStarts logged (--ha_commit=standbys,
 * --ha_log_put_starts): callers change what their test needs, then start it with
 * mk_ha_logging. */
static void ha_logging_config(mc_master_config_t *cfg, char *dir)
{
    assert_non_null(mkdtemp(dir));
    mc_master_config_default(cfg);
    cfg->wal_dir = dir;
    cfg->ha_log_put_starts = true;
}

/* A master of cfg whose records are kept as HA groups (mc_master_ha_log_enable). */
static mc_master_t *mk_ha_logging(mc_master_config_t *cfg)
{
    mc_master_t *m = mk(cfg);
    mc_master_ha_log_enable(m);
    return m;
}

/* HA standbys mode (cfg.ha_log_put_starts): a PutStart is logged as PUT_START, a revoked put's REMOVE supersedes it; a standby applies them as pending
 * puts, not as frees (a segment with only pending puts lends at once at the promotion); the
 * promoted table keeps a pending put's space (another put of its size finds none, a PutStart
 * of its key is refused for put_start_discard_timeout counted from the promotion), its
 * writer's PutEnd commits it once at the same address, and a snapshot carries a pending put. */
static void test_follow_pending_puts(void **state)
{
    (void)state;
    char dir[] = "/tmp/mc_master_lpend_XXXXXX";
    mc_master_config_t cfg;
    ha_logging_config(&cfg, dir);
    cfg.recovered_reuse_delay_ms = 5000;
    mc_master_t *m = mk_ha_logging(&cfg);
    mount(m, CA, "segP", 0x100000, 1 << 20, "hP", 0x21);
    mc_master_replica_t r[8];
    uint32_t n;
    assert_int_equal(mc_master_put_start(m, CA, K("pend"), 600000, NULL, false, r, &n), MC_OK);
    uint64_t addr = r[0].addr;
    assert_int_equal(mc_master_put_start(m, CB, K("gone"), 1000, NULL, false, r, &n), MC_OK);
    assert_int_equal(mc_master_put_revoke(m, CB, K("gone")), MC_OK);
    assert_int_equal(mc_master_wal_sync(m), MC_OK);
    bool lost = true, space = false;
    mc_buf_t *log = mc_master_ha_log(m, &lost, &space);
    assert_false(lost);
    size_t len = mc_buf_unread(log);
    uint8_t *recs = mc_malloc(len);
    assert_non_null(recs);
    memcpy(recs, mc_buf_head(log), len);
    /* the leader's own snapshot of that state holds the pending put too */
    char snap[300], tmp[300];
    snprintf(snap, sizeof(snap), "%s/pend.snap", dir);
    snprintf(tmp, sizeof(tmp), "%s/pend.tmp", dir);
    assert_int_equal(mc_master_snapshot_write(m, tmp, snap), 0);
    mc_master_destroy(m);

    mc_master_config_t fcfg = cfg;
    fcfg.wal_dir = NULL;
    fcfg.put_start_discard_timeout_ms = 3000;
    mc_master_t *f = mk(&fcfg);
    assert_int_equal(mc_master_follow_begin(f), MC_OK);
    size_t used;
    uint64_t k;
    assert_int_equal(mc_master_follow_apply(f, recs, len, &used, &k, NULL), MC_OK);
    assert_int_equal(used, len);
    assert_int_equal(k, 1 + 2 + 1); /* MOUNT, 2 PUT_STARTs, the revoke's REMOVE */
    mc_free(recs);
    g_now += 60000; /* the pending put counts from the promotion, not from its record */
    assert_int_equal(mc_master_follow_promote(f, NULL, 3), MC_OK);
    assert_int_equal(mc_master_object_count(f), 1);
    mc_master_segment_info_t a = {.name = "segP", .base = 0x100000, .size = 1 << 20,
                                  .host_label = "hP"};
    memset(a.uuid, 0x21, 16);
    assert_int_equal(mc_master_mount(f, CA, &a, true), MC_OK);
    assert_int_equal(put(f, CB, "other", 600000, 1), MC_ERR_NO_AVAILABLE_HANDLE);
    assert_int_equal(put(f, CB, "small", 1000, 1), MC_OK); /* no free applied: lends at once */
    assert_int_equal(mc_master_put_start(f, CB, K("pend"), 1000, NULL, false, r, &n),
                     MC_ERR_REPLICA_IS_NOT_READY);
    assert_int_equal(mc_master_get_replicas(f, K("pend"), r, &n, NULL, NULL),
                     MC_ERR_REPLICA_IS_NOT_READY);
    assert_int_equal(mc_master_put_end(f, CB, K("pend"), 0x99), MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_put_end(f, CA, K("pend"), 0x99), MC_OK);
    assert_int_equal(mc_master_put_end(f, CA, K("pend"), 0x99), MC_ERR_INVALID_WRITE);
    uint64_t size = 0, sum = 0;
    assert_int_equal(mc_master_get_replicas(f, K("pend"), r, &n, &size, &sum), MC_OK);
    assert_true(r[0].addr == addr && size == 600000 && sum == 0x99);
    mc_master_destroy(f);

    /* a standby starting from the snapshot has it pending as well */
    mc_master_t *g = mk(&fcfg);
    assert_int_equal(mc_master_follow_begin(g), MC_OK);
    FILE *fp = fopen(snap, "rb");
    assert_non_null(fp);
    uint8_t buf[4096];
    size_t sl = fread(buf, 1, sizeof(buf), fp);
    fclose(fp);
    assert_int_equal(mc_master_follow_apply(g, buf, sl, &used, &k, NULL), MC_OK);
    assert_int_equal(k, 1 + 1 + 1); /* MOUNT, PUT_START, SNAP_END */
    assert_int_equal(mc_master_follow_promote(g, NULL, 4), MC_OK);
    assert_int_equal(mc_master_mount(g, CA, &a, true), MC_OK);
    assert_int_equal(mc_master_put_end(g, CA, K("pend"), 0x98), MC_OK);
    mc_master_destroy(g);
    rm_rf(dir);
}

/* The log of a leader, taken as one group commit: a copy of its records (mc_free). */
static uint8_t *take_group(mc_master_t *m, size_t *len_p)
{
    bool lost = true, space = false;
    assert_int_equal(mc_master_wal_sync(m), MC_OK);
    mc_buf_t *log = mc_master_ha_log(m, &lost, &space);
    assert_false(lost);
    *len_p = mc_buf_unread(log);
    uint8_t *recs = mc_malloc(*len_p ? *len_p : 1);
    assert_non_null(recs);
    memcpy(recs, mc_buf_head(log), *len_p);
    mc_buf_reset(log);
    return recs;
}

/* A standby that applied groups[0..n) and was promoted, its segment re-mounted by CA. */
static mc_master_t *promoted(const mc_master_config_t *cfg, uint8_t *const *groups,
                             const size_t *lens, int n, uint64_t view)
{
    mc_master_config_t fcfg = *cfg;
    fcfg.wal_dir = NULL;
    mc_master_t *f = mk(&fcfg);
    assert_int_equal(mc_master_follow_begin(f), MC_OK);
    for (int i = 0; i < n; i++) {
        size_t used;
        uint64_t k;
        assert_int_equal(mc_master_follow_apply(f, groups[i], lens[i], &used, &k, NULL), MC_OK);
        assert_int_equal(used, lens[i]);
        if (i == 1)
            assert_int_equal(k, 2); /* PUT_STARTS_V of 3 keys, PUT_ENDS of b */
    }
    assert_int_equal(mc_master_follow_promote(f, NULL, view), MC_OK);
    mc_master_segment_info_t a = {.name = "segQ", .base = 0x1000000, .size = 16 << 20,
                                  .host_label = "hQ"};
    memset(a.uuid, 0x31, 16);
    assert_int_equal(mc_master_mount(f, CA, &a, true), MC_OK);
    return f;
}

/* Puts of size by CB until no space is left; whether one of them lies over [addr, addr+size). */
static bool fill_hits(mc_master_t *f, const char *prefix, uint64_t size, uint64_t addr)
{
    bool hit = false;
    for (int i = 0;; i++) {
        char key[32];
        mc_master_replica_t r[8];
        uint32_t n;
        snprintf(key, sizeof(key), "%s%d", prefix, i);
        mc_status_t st = mc_master_put_start(f, CB, K(key), size, NULL, false, r, &n);
        if (st == MC_ERR_NO_AVAILABLE_HANDLE)
            return hit;
        assert_int_equal(st, MC_OK);
        hit |= r[0].addr < addr + size && addr < r[0].addr + size;
    }
}

/* Put pools (HA standbys mode with logged PutStarts, master_pool.c): a PutStart that finds no
 * ready pool block is not light and refills the pool (one RESERVE record); blocks become ready
 * only once the group carrying their RESERVE is released; a PutStart served from them is light
 * (its answer does not wait for its PUT_START). A standby that got the RESERVE and not the
 * PUT_START (the old leader died first) lends none of the pool's blocks after its promotion
 * until put_start_release_timeout, then does; one that got the PUT_START too keeps the pending
 * put, and the writer's PutEnd commits it once at its address. A snapshot carries the pool's
 * blocks; a put that fits only without the pool's blocks takes them back (a logged release), and
 * a pool unused for 5 s is given back by the cron. */
static void test_follow_put_pools(void **state)
{
    (void)state;
    char dir[] = "/tmp/mc_master_pool_XXXXXX", dir2[] = "/tmp/mc_master_pool2_XXXXXX";
    mc_master_config_t cfg;
    ha_logging_config(&cfg, dir);
    mc_master_t *m = mk_ha_logging(&cfg);
    atomic_uint_fast64_t released = 0;
    mc_master_ha_groups(m, 0, &released);
    mount(m, CA, "segQ", 0x1000000, 16 << 20, "hQ", 0x31);
    mc_master_replica_t r[8];
    uint32_t n;
    mc_master_retired_t ret = {.max = 8};
    bool light = true;
    const uint64_t SZ = 4000;
    assert_int_equal(mc_master_put_start_ex(m, CA, K("a"), SZ, NULL, false, r, &n, &ret, &light),
                     MC_OK);
    assert_false(light); /* no pool yet: it made one */
    mc_master_metrics_t mm;
    mc_master_metrics_now(m, &mm);
    assert_true(mm.put_pool_bytes >= 8 * 4032 && mm.put_pool_hits == 0);
    light = true;
    assert_int_equal(mc_master_put_start_ex(m, CA, K("b"), SZ, NULL, false, r, &n, &ret, &light),
                     MC_OK);
    assert_false(light); /* its RESERVE's group is not released yet */
    uint64_t addr_b = r[0].addr;
    size_t lens[2];
    uint8_t *groups[2];
    groups[0] = take_group(m, &lens[0]); /* group 1: MOUNT, 2 PUT_STARTs, RESERVE */
    mc_master_ha_groups(m, 1, &released);
    atomic_store(&released, 1);
    assert_int_equal(mc_master_put_start_ex(m, CA, K("c"), SZ, NULL, false, r, &n, &ret, &light),
                     MC_OK);
    assert_true(light);
    uint64_t addr_c = r[0].addr;
    mc_master_metrics_now(m, &mm);
    assert_int_equal(mm.put_pool_hits, 1);
    /* more keys of the same writer in a row (a BatchPutStart): one PUT_STARTS_V record */
    assert_int_equal(mc_master_put_start(m, CA, K("d"), SZ, NULL, false, r, &n), MC_OK);
    assert_int_equal(mc_master_put_start(m, CA, K("e"), SZ, NULL, false, r, &n), MC_OK);
    assert_int_equal(mc_master_put_end(m, CA, K("b"), 0xb), MC_OK);
    groups[1] = take_group(m, &lens[1]); /* group 2: PUT_STARTS_V of c, d, e; PUT_ENDS of b */
    char snap[300], tmp[300];
    snprintf(snap, sizeof(snap), "%s/pool.snap", dir);
    snprintf(tmp, sizeof(tmp), "%s/pool.tmp", dir);
    assert_int_equal(mc_master_snapshot_write(m, tmp, snap), 0);

    mc_master_destroy(m);

    /* the old leader died before c's PUT_START reached the standby */
    mc_master_t *f = promoted(&cfg, groups, lens, 1, 3);
    assert_false(fill_hits(f, "x", SZ, addr_c)); /* c's block (and the pool's) quarantined */
    assert_int_equal(mc_master_put_end(f, CA, K("c"), 0x77), MC_ERR_OBJECT_NOT_FOUND);
    g_now += cfg.put_start_release_timeout_ms;
    bool need;
    assert_int_equal(mc_master_ping(f, CA, &need), MC_OK);
    assert_int_equal(mc_master_ping(f, CB, &need), MC_OK);
    mc_master_cron(f);
    assert_true(fill_hits(f, "y", SZ, addr_c)); /* the quarantine is over */
    mc_master_destroy(f);

    /* the standby got c's PUT_START: the pending put, committed once by its writer */
    f = promoted(&cfg, groups, lens, 2, 4);
    assert_false(fill_hits(f, "x", SZ, addr_c));
    assert_int_equal(mc_master_put_end(f, CA, K("c"), 0x77), MC_OK);
    assert_int_equal(mc_master_put_end(f, CA, K("c"), 0x77), MC_ERR_INVALID_WRITE);
    uint64_t size = 0, sum = 0;
    assert_int_equal(mc_master_get_replicas(f, K("c"), r, &n, &size, &sum), MC_OK);
    assert_true(r[0].addr == addr_c && size == SZ && sum == 0x77);
    /* b's PUT_ENDS entry after its PUT_START: committed where it was placed */
    assert_int_equal(mc_master_get_replicas(f, K("b"), r, &n, &size, &sum), MC_OK);
    assert_true(r[0].addr == addr_b && size == SZ && sum == 0xb);
    assert_int_equal(mc_master_put_end(f, CA, K("d"), 0xd), MC_OK); /* from the PUT_STARTS */
    assert_int_equal(mc_master_put_end(f, CA, K("e"), 0xe), MC_OK);
    mc_master_destroy(f);

    /* a standby starting from the snapshot holds the pool's blocks too */
    FILE *fp = fopen(snap, "rb");
    assert_non_null(fp);
    size_t cap = 1 << 16;
    uint8_t *buf = mc_malloc(cap);
    assert_non_null(buf);
    size_t sl = fread(buf, 1, cap, fp);
    fclose(fp);
    f = promoted(&cfg, &buf, &sl, 1, 5);
    assert_false(fill_hits(f, "x", SZ, addr_c + 4032)); /* the pool's next block */
    mc_free(buf);
    mc_master_destroy(f);
    mc_free(groups[0]);
    mc_free(groups[1]);

    /* a put that fits only in a pool's space takes it back (the release is logged) */
    rm_rf(dir);
    assert_non_null(mkdtemp(dir2));
    cfg.wal_dir = dir2;
    m = mk(&cfg);
    mc_master_ha_log_enable(m);
    mc_master_ha_groups(m, 0, &released);
    mount(m, CA, "segQ", 0x1000000, 16 << 20, "hQ", 0x31);
    assert_int_equal(mc_master_put_start(m, CA, K("a"), SZ, NULL, false, r, &n), MC_OK);
    mc_free(take_group(m, &lens[0]));
    mc_master_metrics_now(m, &mm);
    assert_true(mm.put_pool_bytes > 0);
    uint64_t big = mm.total_capacity_bytes - mm.allocated_bytes + mm.put_pool_bytes / 2;
    assert_int_equal(mc_master_put_start(m, CB, K("big"), big, NULL, false, r, &n), MC_OK);
    mc_master_metrics_now(m, &mm);
    assert_int_equal(mm.put_pool_bytes, 0);
    size_t rl;
    uint8_t *rel = take_group(m, &rl);
    assert_true(rl > 0); /* the RESERVE release and big's PUT_START */
    mc_free(rel);
    /* a pool unused for 5 s is given back by the cron (logged) */
    assert_int_equal(mc_master_put_revoke(m, CB, K("big")), MC_OK);
    assert_int_equal(mc_master_put_start(m, CA, K("a2"), SZ, NULL, false, r, &n), MC_OK);
    mc_master_metrics_now(m, &mm);
    assert_true(mm.put_pool_bytes > 0);
    mc_free(take_group(m, &rl));
    g_now += 4999;
    assert_int_equal(mc_master_ping(m, CA, &need), MC_OK);
    assert_int_equal(mc_master_ping(m, CB, &need), MC_OK);
    mc_master_cron(m);
    mc_master_metrics_now(m, &mm);
    assert_true(mm.put_pool_bytes > 0);
    g_now += 1;
    mc_master_cron(m);
    mc_master_metrics_now(m, &mm);
    assert_int_equal(mm.put_pool_bytes, 0);
    rel = take_group(m, &rl);
    assert_true(rl > 0); /* the RESERVE release */
    mc_free(rel);
    mc_master_destroy(m);
    rm_rf(dir2);
}

/* A follower that applied recs[0..n) (or a master recovering cfg's WAL directory: recs NULL)
 * with segQ re-mounted by CA. */
static mc_master_t *replayed(const mc_master_config_t *cfg, uint8_t *const *recs,
                             const size_t *lens, int n)
{
    mc_master_config_t fcfg = *cfg;
    if (recs)
        fcfg.wal_dir = NULL;
    mc_master_t *f = mk(&fcfg);
    if (recs) {
        assert_int_equal(mc_master_follow_begin(f), MC_OK);
        for (int i = 0; i < n; i++) {
            size_t used;
            assert_int_equal(mc_master_follow_apply(f, recs[i], lens[i], &used, NULL, NULL),
                             MC_OK);
            assert_int_equal(used, lens[i]);
        }
        assert_int_equal(mc_master_follow_promote(f, NULL, 7), MC_OK);
    }
    mc_master_segment_info_t a = {.name = "segQ", .base = 0x1000000, .size = 64 << 20,
                                  .host_label = "hQ"};
    memset(a.uuid, 0x31, 16);
    assert_int_equal(mc_master_mount(f, CA, &a, true), MC_OK);
    return f;
}

/* key committed in f at addr with size and checksum sum */
static void committed_at(mc_master_t *f, const char *key, uint64_t addr, uint64_t size,
                         uint64_t sum)
{
    mc_master_replica_t r[8];
    uint32_t n = 0;
    uint64_t sz = 0, s = 0;
    assert_int_equal(mc_master_get_replicas(f, K(key), r, &n, &sz, &s), MC_OK);
    assert_int_equal(n, 1);
    assert_true(r[0].addr == addr && sz == size && s == sum);
}

/* The log a leader kept since the last call, applied by standby f at g_now. */
static void apply_group(mc_master_t *leader, mc_master_t *f)
{
    size_t len, used;
    uint8_t *recs = take_group(leader, &len);
    assert_int_equal(mc_master_follow_apply(f, recs, len, &used, NULL, NULL), MC_OK);
    assert_int_equal(used, len);
    mc_free(recs);
}

/* A PutStart of size by CB on f: its address, or 0 when no space is lent (NO_AVAILABLE_HANDLE). */
static uint64_t put_start_at(mc_master_t *f, const char *key, uint64_t size)
{
    mc_master_replica_t r[8];
    uint32_t n;
    mc_status_t st = mc_master_put_start(f, CB, K(key), size, NULL, false, r, &n);
    if (st == MC_ERR_NO_AVAILABLE_HANDLE)
        return 0;
    assert_int_equal(st, MC_OK);
    return r[0].addr;
}

/* A leader logging HA groups with its WAL in dir (made by mkdtemp), read leases of `delay`
 * ms, and (*f_p) a standby following it whose recovered space waits that long after a free. */
static mc_master_t *leader_and_standby(char *dir, uint64_t delay, mc_master_t **f_p)
{
    assert_non_null(mkdtemp(dir));
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.wal_dir = dir;
    cfg.default_kv_lease_ttl_ms = delay;
    mc_master_t *m = mk_ha_logging(&cfg);
    cfg.wal_dir = NULL;
    cfg.recovered_reuse_delay_ms = delay;
    *f_p = mk(&cfg);
    assert_int_equal(mc_master_follow_begin(*f_p), MC_OK);
    return m;
}

/* Reuse of recovered space by freed range (a promoted standby): each range the standby applied
 * a free of within the reuse delay is lent only from its own free + the delay; the rest of the
 * segment (never used, or freed earlier) lends at once. A freed range that a later object
 * re-used is that object's; only the rest of it waits. Layout on the leader: a, b, c, d (twice
 * the size), g; at t1 d is removed and e placed at d's start; at t1 + 2 s b is removed; the
 * standby is promoted at t1 + 3 s. */
static void test_follow_reuse_by_range(void **state)
{
    (void)state;
    const uint64_t SZ = 64 << 10, DELAY = 5000;
    char dir[] = "/tmp/mc_master_rrange_XXXXXX";
    mc_master_t *f, *m = leader_and_standby(dir, DELAY, &f);

    mount(m, CA, "segR", 0x100000, 1 << 20, "hR", 0x41);
    mc_master_replica_t r[8];
    uint32_t n;
    const char *keys[] = {"a", "b", "c", "d", "g"};
    uint64_t at[5];
    for (int i = 0; i < 5; i++) {
        assert_int_equal(put(m, CA, keys[i], i == 3 ? 2 * SZ : SZ, 1), MC_OK);
        assert_int_equal(mc_master_get_replicas(m, K(keys[i]), r, &n, NULL, NULL), MC_OK);
        at[i] = r[0].addr;
    }
    const uint64_t B = at[1], D = at[3];
    assert_true(at[2] == B + SZ && D == at[2] + SZ && at[4] == D + 2 * SZ); /* one after another */
    apply_group(m, f);

    g_now += 10 * DELAY; /* frees applied from here on are within the delay at the promotion */
    const uint64_t t1 = g_now;
    assert_int_equal(mc_master_remove(m, K("d"), true, NULL), MC_OK);
    assert_int_equal(put(m, CA, "e", SZ, 1), MC_OK);
    assert_int_equal(mc_master_get_replicas(m, K("e"), r, &n, NULL, NULL), MC_OK);
    assert_int_equal(r[0].addr, D); /* the smallest free block that fits: d's */
    apply_group(m, f);
    g_now = t1 + 2000;
    assert_int_equal(mc_master_remove(m, K("b"), true, NULL), MC_OK);
    apply_group(m, f);
    mc_master_destroy(m);

    g_now = t1 + 3000;
    assert_int_equal(mc_master_follow_promote(f, NULL, 5), MC_OK);
    mc_master_segment_info_t a = {.name = "segR", .base = 0x100000, .size = 1 << 20,
                                  .host_label = "hR"};
    memset(a.uuid, 0x41, 16);
    assert_int_equal(mc_master_mount(f, CA, &a, true), MC_OK);
    /* lent at once, outside both freed ranges: b's and the half of d's that e does not hold
     * (a PutStart only: a committed object could be evicted for the puts that fail below) */
    bool hits_b = false, hits_d = false;
    int placed = 0;
    for (;; placed++) {
        char key[32];
        snprintf(key, sizeof(key), "x%d", placed);
        uint64_t addr = put_start_at(f, key, SZ);
        if (!addr)
            break;
        hits_b |= addr < B + SZ && B < addr + SZ;
        hits_d |= addr < D + 2 * SZ && D + SZ < addr + SZ;
    }
    assert_true(placed >= 10); /* the never-used rest of the segment */
    assert_false(hits_b);
    assert_false(hits_d);
    committed_at(f, "e", D, SZ, 1); /* the re-used part stays e's */
    /* d's free half is lent from its free + the delay, not a millisecond earlier; b's later */
    g_now = t1 + DELAY - 1;
    mc_master_cron(f);
    assert_int_equal(put_start_at(f, "early", SZ), 0);
    g_now = t1 + DELAY;
    mc_master_cron(f);
    assert_int_equal(put_start_at(f, "d_half", SZ), D + SZ);
    assert_int_equal(put_start_at(f, "not_b_yet", SZ), 0);
    g_now = t1 + 2000 + DELAY;
    mc_master_cron(f);
    assert_int_equal(put_start_at(f, "b_space", SZ), B);
    mc_master_destroy(f);
    rm_rf(dir);
}

/* A standby that applied n_frees removals of 64-byte objects in one segment, each between two
 * live ones (ranges that touch no other), all at g_now, promoted 1 s later with the segment
 * re-mounted. */
static mc_master_t *promoted_after_frees(int n_frees, uint64_t delay)
{
    char dir[] = "/tmp/mc_master_rcap_XXXXXX";
    mc_master_t *f, *m = leader_and_standby(dir, delay, &f);
    mount(m, CA, "segC", 0x100000, 4 << 20, "hC", 0x51);
    char key[32];
    for (int i = 0; i < 2 * n_frees + 1; i++) {
        snprintf(key, sizeof(key), "o%d", i);
        assert_int_equal(put(m, CA, key, 64, 1), MC_OK);
    }
    for (int i = 1; i < 2 * n_frees + 1; i += 2) {
        snprintf(key, sizeof(key), "o%d", i);
        assert_int_equal(mc_master_remove(m, K(key), true, NULL), MC_OK);
    }
    apply_group(m, f);
    mc_master_destroy(m);
    rm_rf(dir);
    g_now += 1000;
    assert_int_equal(mc_master_follow_promote(f, NULL, 6), MC_OK);
    mc_master_segment_info_t a = {.name = "segC", .base = 0x100000, .size = 4 << 20,
                                  .host_label = "hC"};
    memset(a.uuid, 0x51, 16);
    assert_int_equal(mc_master_mount(f, CA, &a, true), MC_OK);
    return f;
}

/* A standby keeps at most 4096 freed ranges per segment (MASTER_FREED_MAX): with that many the
 * never-used rest of the segment lends at once after the promotion; with one more it keeps
 * none and the whole segment waits until the delay after the free that passed the cap, as for
 * frees whose ranges it never saw. */
static void test_follow_reuse_cap(void **state)
{
    (void)state;
    const uint64_t DELAY = 5000;
    mc_master_t *f = promoted_after_frees(4096, DELAY);
    assert_true(put_start_at(f, "at_once", 64) != 0);
    mc_master_destroy(f);

    uint64_t freed_at = g_now;
    f = promoted_after_frees(4097, DELAY);
    assert_int_equal(put_start_at(f, "whole_waits", 64), 0);
    g_now = freed_at + DELAY - 1;
    assert_int_equal(put_start_at(f, "whole_waits", 64), 0);
    g_now = freed_at + DELAY;
    assert_true(put_start_at(f, "lent", 64) != 0);
    mc_master_destroy(f);
}

/* Bytes of the replicated log per pooled put (HA standbys mode, logged PutStarts): per group
 * a BatchPutStart of 16 keys "tp-1-<n>" of 1 KiB (pools warm) and its BatchPutEnd with
 * XXH3-like checksums, as mc_ha_bench's puts. The PutEnds name their PUT_STARTs (one PUT_ENDS
 * record), the PUT_STARTs are packed (PUT_STARTS_V), the pool refills too (RESERVE_V): at most
 * 40 bytes per put (COMMIT records repeating the allocation and the unpacked records took
 * ~100). A standby applying the groups and a master restarted from the WAL directory both hold
 * every object, committed with its checksum where it was placed. */
static void test_log_bytes_per_put(void **state)
{
    (void)state;
    char dir[] = "/tmp/mc_master_lbytes_XXXXXX";
    mc_master_config_t cfg;
    ha_logging_config(&cfg, dir);
    mc_master_t *m = mk_ha_logging(&cfg);
    atomic_uint_fast64_t released = 0;
    mc_master_ha_groups(m, 0, &released);
    mount(m, CA, "segQ", 0x1000000, 64 << 20, "hQ", 0x31);
    enum { BATCH = 16, ROUNDS = 17, SZ = 1024 };
    uint8_t *groups[ROUNDS];
    size_t lens[ROUNDS], total = 0;
    static uint64_t addr[ROUNDS * BATCH];
    for (int g = 0; g < ROUNDS; g++) { /* group 0 warms the pools: not counted */
        char key[32];
        for (int i = 0; i < BATCH; i++) {
            mc_master_replica_t r[8];
            uint32_t n;
            snprintf(key, sizeof(key), "tp-1-%d", g * BATCH + i);
            assert_int_equal(mc_master_put_start(m, CA, K(key), SZ, NULL, false, r, &n), MC_OK);
            addr[g * BATCH + i] = r[0].addr;
        }
        for (int i = 0; i < BATCH; i++) {
            snprintf(key, sizeof(key), "tp-1-%d", g * BATCH + i);
            uint64_t sum = 0x9e3779b97f4a7c15ull * (uint64_t)(g * BATCH + i + 1);
            assert_int_equal(mc_master_put_end(m, CA, K(key), sum), MC_OK);
        }
        groups[g] = take_group(m, &lens[g]);
        mc_master_ha_groups(m, (uint64_t)g + 1, &released);
        atomic_store(&released, (uint64_t)g + 1);
        if (g)
            total += lens[g];
    }
    mc_master_metrics_t mm;
    mc_master_metrics_now(m, &mm);
    assert_true(mm.put_pool_hits >= (ROUNDS - 2) * BATCH);
    double per_put = (double)total / ((ROUNDS - 1) * BATCH);
    print_message("replicated log bytes per pooled put: %.1f\n", per_put);
    assert_true(per_put <= 40);
    mc_master_destroy(m);

    for (int k = 0; k < 2; k++) { /* a promoted standby, a restart from the WAL directory */
        mc_master_t *f = replayed(&cfg, k ? NULL : groups, lens, ROUNDS);
        for (int i = 0; i < ROUNDS * BATCH; i++) {
            char key[32];
            snprintf(key, sizeof(key), "tp-1-%d", i);
            committed_at(f, key, addr[i], SZ, 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1));
        }
        mc_master_destroy(f);
    }
    for (int g = 0; g < ROUNDS; g++)
        mc_free(groups[g]);
    rm_rf(dir);
}

/* Records as older builds wrote them still replay: RESERVE (13), PUT_STARTS (14), and a
 * COMMIT after its PUT_START (the PutEnd before PUT_ENDS), encoded here field by field as
 * recovery.md gives them. */
static void test_old_records_replay(void **state)
{
    (void)state;
    const uint64_t base = 0x1000000, a0 = base + 0x10000;
    mc_buf_t recs = {0};
    mc_wal_buf_t b = {0};
    uint8_t uuid[16];
    memset(uuid, 0x31, 16);
    mc_wal_put_u32(&b, 0); /* MOUNT */
    mc_wal_put_u64(&b, base);
    mc_wal_put_u64(&b, 64 << 20);
    mc_wal_put_bytes(&b, uuid, 16);
    mc_wal_put_str(&b, K("segQ"));
    mc_wal_put_str(&b, K("segQ"));
    mc_wal_put_str(&b, K("hQ"));
    assert_int_equal(mc_wal_frame(&recs, 1, b.b.data, b.b.len), MC_OK);
    mc_buf_reset(&b.b);
    mc_wal_put_u8(&b, 0); /* RESERVE of 4 blocks of 1024 */
    mc_wal_put_u32(&b, 0);
    mc_wal_put_u64(&b, 1024);
    mc_wal_put_u32(&b, 4);
    for (int i = 0; i < 4; i++)
        mc_wal_put_u64(&b, a0 + 1024 * (uint64_t)i);
    assert_int_equal(mc_wal_frame(&recs, 13, b.b.data, b.b.len), MC_OK);
    mc_buf_reset(&b.b);
    mc_wal_put_bytes(&b, CA, 16); /* PUT_STARTS of old-a, old-b in the first two blocks */
    mc_wal_put_u32(&b, 2);
    for (int i = 0; i < 2; i++) {
        mc_wal_put_u64(&b, 1000);
        mc_wal_put_u64(&b, 0);
        mc_wal_put_u8(&b, 0);
        mc_wal_put_u8(&b, 1);
        mc_wal_put_u32(&b, 0);
        mc_wal_put_u64(&b, a0 + 1024 * (uint64_t)i);
        mc_wal_put_str(&b, i ? "old-b" : "old-a", 5);
    }
    assert_int_equal(mc_wal_frame(&recs, 14, b.b.data, b.b.len), MC_OK);
    mc_buf_reset(&b.b);
    mc_wal_put_u64(&b, 1000); /* old-a's COMMIT */
    mc_wal_put_u64(&b, 0xaa);
    mc_wal_put_u8(&b, 0);
    mc_wal_put_u8(&b, 1);
    mc_wal_put_u32(&b, 0);
    mc_wal_put_u64(&b, a0);
    mc_wal_put_str(&b, K("old-a"));
    assert_int_equal(mc_wal_frame(&recs, 3, b.b.data, b.b.len), MC_OK);
    mc_buf_free(&b.b);

    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    uint8_t *rp = recs.data;
    size_t rl = recs.len;
    mc_master_t *f = replayed(&cfg, &rp, &rl, 1);
    committed_at(f, "old-a", a0, 1000, 0xaa);
    assert_int_equal(mc_master_put_end(f, CA, K("old-b"), 0xbb), MC_OK); /* pending */
    committed_at(f, "old-b", a0 + 1024, 1000, 0xbb);
    mc_master_destroy(f);
    mc_buf_free(&recs);
}

/* A PutEnd whose PUT_START is folded into a snapshot (the replicated log's, and the WAL
 * directory's after a rotation) replays from it: the PUT_ENDS record names the pending put the
 * snapshot holds (an upsert's too). A PUT_ENDS entry for a key without a pending put (a corrupt
 * log) is skipped. */
static void test_put_end_after_snapshot(void **state)
{
    (void)state;
    char dir[] = "/tmp/mc_master_pesnap_XXXXXX";
    mc_master_config_t cfg;
    ha_logging_config(&cfg, dir);
    cfg.wal_snapshot_bytes = 1; /* the next cron rotates the log and snapshots */
    mc_master_t *m = mk_ha_logging(&cfg);
    mount(m, CA, "segQ", 0x1000000, 64 << 20, "hQ", 0x31);
    size_t len0;
    uint8_t *g0 = take_group(m, &len0); /* the MOUNT */
    mc_master_replica_t r[8];
    uint32_t n;
    assert_int_equal(mc_master_put_start(m, CA, K("s1"), 5000, NULL, false, r, &n), MC_OK);
    uint64_t a1 = r[0].addr;
    assert_int_equal(mc_master_put_start(m, CB, K("s2"), 7000, NULL, false, r, &n), MC_OK);
    uint64_t a2 = r[0].addr;
    assert_int_equal(mc_master_put_start(m, CA, K("up"), 3000, NULL, true, r, &n), MC_OK);
    uint64_t a3 = r[0].addr;
    size_t len1;
    uint8_t *g1 = take_group(m, &len1);
    mc_free(g1);
    char snap[300], tmp[300];
    snprintf(snap, sizeof(snap), "%s/ha.snap", dir);
    snprintf(tmp, sizeof(tmp), "%s/ha.tmp", dir);
    assert_int_equal(mc_master_snapshot_write(m, tmp, snap), 0); /* the state after g1 */
    mc_master_cron(m); /* log.1 -> snap.2 (forked), log.2 from now */
    assert_int_equal(mc_master_put_end(m, CA, K("s1"), 0x5151), MC_OK);
    assert_int_equal(mc_master_put_end(m, CB, K("s2"), 0), MC_OK);
    assert_int_equal(mc_master_put_end(m, CA, K("up"), 0x3333), MC_OK);
    size_t len2;
    uint8_t *g2 = take_group(m, &len2);
    /* one PUT_ENDS (type 15) of s1, s2 and the upsert: u32 len | type | varint 3 | ... | hash */
    assert_true(len2 > 5 && g2[4] == 15 && g2[5] == 3);
    uint32_t l0 = (uint32_t)g2[0] | (uint32_t)g2[1] << 8 | (uint32_t)g2[2] << 16;
    assert_int_equal(len2, 13 + l0);
    mc_master_destroy(m); /* waits for snap.2; log.1 goes */
    char log1[300];
    snprintf(log1, sizeof(log1), "%s/log.1", dir);
    assert_int_not_equal(access(log1, F_OK), 0);

    /* a standby starting from the snapshot, then g2 */
    FILE *fp = fopen(snap, "rb");
    assert_non_null(fp);
    static uint8_t buf[1 << 16];
    size_t sl = fread(buf, 1, sizeof(buf), fp);
    fclose(fp);
    uint8_t *recs[2] = {buf, g2};
    size_t lens[2] = {sl, len2};
    for (int k = 0; k < 2; k++) { /* k = 1: restart from snap.2 + log.2 */
        mc_master_t *f = replayed(&cfg, k ? NULL : recs, lens, 2);
        committed_at(f, "s1", a1, 5000, 0x5151);
        committed_at(f, "s2", a2, 7000, 0);
        committed_at(f, "up", a3, 3000, 0x3333);
        mc_master_destroy(f);
    }

    /* the MOUNT, then g2 without the PUT_STARTs: the PUT_ENDS names no pending put (a corrupt
     * log); each entry is skipped, the table stays usable */
    recs[0] = g0;
    lens[0] = len0;
    mc_master_t *f = replayed(&cfg, recs, lens, 2);
    uint64_t size, sum;
    const char *const skipped[] = {"s1", "s2", "up"};
    for (int i = 0; i < 3; i++)
        assert_int_equal(mc_master_get_replicas(f, K(skipped[i]), r, &n, &size, &sum),
                         MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(put(f, CA, "s1", 5000, 0x5151), MC_OK);
    committed_at(f, "s1", a1, 5000, 0x5151);
    mc_master_destroy(f);
    mc_free(g0);
    mc_free(g2);
    rm_rf(dir);
}

/* An upsert in flight across a takeover (HA standbys mode): its PutStart is logged like any
 * other (the old value leaves at once, on the leader as in the log), so the new leader holds the
 * upsert's space for its writer, answers REPLICA_IS_NOT_READY for the key meanwhile, and the
 * writer's PutEnd commits the new value once, where its bytes were written. Without the record
 * the standby would still serve the old value and refuse the PutEnd, and the new value's space
 * would be free for any other put while the writer may still be writing there. */
static void test_follow_pending_upsert(void **state)
{
    (void)state;
    char dir[] = "/tmp/mc_master_pups_XXXXXX";
    mc_master_config_t cfg;
    ha_logging_config(&cfg, dir);
    mc_master_t *m = mk_ha_logging(&cfg);
    mount(m, CA, "segQ", 0x1000000, 64 << 20, "hQ", 0x31);
    assert_int_equal(put(m, CA, "u", 4000, 0x11), MC_OK);
    mc_master_replica_t r[8];
    uint32_t n;
    assert_int_equal(mc_master_put_start(m, CB, K("u"), 6000, NULL, true, r, &n), MC_OK);
    uint64_t a1 = r[0].addr;
    size_t len;
    uint8_t *g = take_group(m, &len);
    mc_master_destroy(m);

    mc_master_t *f = replayed(&cfg, &g, &len, 1);
    assert_int_equal(mc_master_get_replicas(f, K("u"), r, &n, NULL, NULL),
                     MC_ERR_REPLICA_IS_NOT_READY);
    assert_int_equal(mc_master_put_end(f, CA, K("u"), 0x22), MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_put_end(f, CB, K("u"), 0x22), MC_OK);
    committed_at(f, "u", a1, 6000, 0x22);
    mc_master_destroy(f);
    mc_free(g);
    rm_rf(dir);
}

/* A standby's table (mc_master_follow_*, master/ha.c): the records a leader logged, applied
 * in pieces cut anywhere (a record split across pieces waits for the rest), then promoted: the
 * state a restart recovers (RECOVERING until re-mounted, same addresses and checksums, removed
 * objects absent), with the lease counted from the promotion and the reuse delay from the
 * frees the standby applied (per freed range: test_follow_reuse_by_range); and a corrupt
 * record is refused. */
static void test_follow_and_promote(void **state)
{
    (void)state;
    char dir[] = "/tmp/mc_master_lead_XXXXXX", dir2[] = "/tmp/mc_master_stby_XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_non_null(mkdtemp(dir2));
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.wal_dir = dir;
    cfg.client_ttl_ms = 10000;
    cfg.default_kv_lease_ttl_ms = 5000;
    mc_master_t *m = mk(&cfg);
    mc_master_ha_log_enable(m);
    mount(m, CA, "segA", 0x100000, 1 << 20, "hA", 0x11);
    mc_master_replica_t r[8];
    uint32_t n;
    uint64_t addrs[20];
    char key[16];
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(put(m, CA, key, 1000, 0x500 + (uint64_t)i), MC_OK);
        assert_int_equal(mc_master_get_replicas(m, K(key), r, &n, NULL, NULL), MC_OK);
        addrs[i] = r[0].addr;
    }
    assert_int_equal(mc_master_remove(m, K("k5"), true, NULL), MC_OK);
    for (int i = 0; i < 3000; i++) { /* churn: 3000 dead extents, compacted while applied */
        assert_int_equal(put(m, CA, "churn", 64, 1), MC_OK);
        assert_int_equal(mc_master_remove(m, K("churn"), true, NULL), MC_OK);
    }
    assert_int_equal(mc_master_wal_sync(m), MC_OK);
    bool lost = true, space = false;
    mc_buf_t *log = mc_master_ha_log(m, &lost, &space);
    assert_false(lost);
    assert_true(space); /* a MOUNT and REMOVEs */
    size_t len = mc_buf_unread(log);
    uint8_t *recs = mc_malloc(len);
    assert_non_null(recs);
    memcpy(recs, mc_buf_head(log), len);

    mc_master_config_t fcfg = cfg;
    fcfg.wal_dir = NULL;
    fcfg.recovered_reuse_delay_ms = 5000;
    mc_master_t *f = mk(&fcfg);
    assert_int_equal(mc_master_follow_begin(f), MC_OK);
    size_t done = 0, avail = 0;
    uint64_t total = 0;
    while (done < len) { /* 7 more bytes at a time */
        avail = avail + 7 < len - done ? avail + 7 : len - done;
        size_t used;
        uint64_t k;
        assert_int_equal(mc_master_follow_apply(f, recs + done, avail, &used, &k, NULL), MC_OK);
        done += used;
        avail -= used;
        total += k;
    }
    assert_int_equal(total, 1 + 20 + 1 + 2 * 3000); /* MOUNT, COMMITs, REMOVEs */

    /* A standby promoted 1 s after it applied the frees (k5, churn): once re-mounted the
     * recovered segment lends at once, outside the freed ranges (test_follow_reuse_by_range);
     * a PutStart that finds nothing to lend (segment RECOVERING) evicts nothing later either:
     * the objects committed once space is lent stay. */
    mc_master_t *f2 = mk(&fcfg);
    assert_int_equal(mc_master_follow_begin(f2), MC_OK);
    size_t used2;
    assert_int_equal(mc_master_follow_apply(f2, recs, len, &used2, NULL, NULL), MC_OK);
    assert_int_equal(used2, len);
    uint64_t applied_at = g_now;
    g_now += 1000;
    assert_int_equal(mc_master_follow_promote(f2, NULL, 8), MC_OK);
    assert_int_not_equal(put(f2, CA, "early", 1000, 1), MC_OK); /* RECOVERING */
    mc_master_segment_info_t a2 = {.name = "segA", .base = 0x100000, .size = 1 << 20,
                                   .host_label = "hA"};
    memset(a2.uuid, 0x11, 16);
    assert_int_equal(mc_master_mount(f2, CA, &a2, true), MC_OK);
    assert_int_equal(put(f2, CA, "early", 1000, 1), MC_OK); /* never-used space */
    assert_int_equal(mc_master_get_replicas(f2, K("early"), r, &n, NULL, NULL), MC_OK);
    assert_true(r[0].addr + 1000 <= addrs[5] || r[0].addr >= addrs[5] + 1000); /* not k5's */
    /* the delay after the frees passed; the recovered objects are still leased (from the
     * promotion), x1 is not: an eviction owed to the failed puts would take it */
    g_now = applied_at + fcfg.recovered_reuse_delay_ms + 1;
    assert_int_equal(put(f2, CA, "x1", 1000, 1), MC_OK);
    mc_master_cron(f2);
    assert_int_equal(mc_master_exist(f2, K("x1")), MC_OK); /* not evicted */
    mc_master_destroy(f2);

    /* a corrupt record (a flipped payload byte: its checksum fails) is refused unapplied */
    recs[5] ^= 0x40;
    size_t used;
    assert_int_equal(mc_master_follow_apply(f, recs, len, &used, NULL, NULL),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(used, 0);
    mc_free(recs);

    g_now += 60000; /* long after the records: deadlines and leases count from the promotion */
    assert_int_equal(mc_master_follow_promote(f, dir2, 9), MC_OK);
    assert_int_equal(mc_master_object_count(f), 19);
    mc_master_segment_status_t ss;
    assert_int_equal(mc_master_query_segment(f, "segA", &ss), MC_OK);
    assert_int_equal(ss.state, 2);
    /* before the owner re-mounts: there, but not readable yet (retryable) */
    assert_int_equal(mc_master_exist(f, K("k1")), MC_OK);
    assert_int_equal(mc_master_get_replicas(f, K("k1"), r, &n, NULL, NULL),
                     MC_ERR_REPLICA_IS_NOT_READY);
    assert_int_equal(mc_master_get_replicas(f, K("k5"), r, &n, NULL, NULL),
                     MC_ERR_OBJECT_NOT_FOUND); /* removed before the promotion */
    bool need = false;
    assert_int_equal(mc_master_ping(f, CA, &need), MC_OK);
    assert_true(need);
    g_now += 4000; /* within client_ttl and the reuse delay of the promotion */
    mc_master_cron(f);
    mc_master_segment_info_t a = {.name = "segA", .base = 0x100000, .size = 1 << 20,
                                  .host_label = "hA"};
    memset(a.uuid, 0x11, 16);
    assert_int_equal(mc_master_mount(f, CA, &a, true), MC_OK);
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        uint64_t size, sum;
        if (i == 5) {
            assert_int_equal(mc_master_exist(f, K(key)), MC_ERR_OBJECT_NOT_FOUND);
            continue;
        }
        assert_int_equal(mc_master_get_replicas(f, K(key), r, &n, &size, &sum), MC_OK);
        assert_int_equal(r[0].addr, addrs[i]);
        assert_int_equal(sum, 0x500 + (uint64_t)i);
    }
    assert_int_equal(mc_master_exist(f, K("churn")), MC_ERR_OBJECT_NOT_FOUND);
    /* the last free was applied a minute before the promotion, longer than the reuse delay:
     * space is lent at once, never over a recovered object */
    for (int i = 0; i < 50; i++) {
        snprintf(key, sizeof(key), "n%d", i);
        assert_int_equal(put(f, CA, key, 1000, 1), MC_OK);
        assert_int_equal(mc_master_get_replicas(f, K(key), r, &n, NULL, NULL), MC_OK);
        for (int j = 0; j < 20; j++) /* (k5's space was freed by its removal) */
            assert_true(j == 5 || r[0].addr + 1000 <= addrs[j] || r[0].addr >= addrs[j] + 1000);
    }
    /* the promoted core logs to its own directory: a restart from it alone finds the state */
    for (int i = 0; i < 200; i++) { /* the first starts the snapshot of the promoted table */
        mc_master_cron(f);
        usleep(5000);
    }
    mc_master_destroy(f);
    fcfg.wal_dir = dir2;
    f = mk(&fcfg);
    assert_int_equal(mc_master_object_count(f), 19 + 50);
    mc_master_destroy(f);
    /* the space flag (what an HA PutStart answer may depend on): PutEnd COMMITs alone do
     * not free or mount space; a REMOVE does */
    mc_buf_reset(log);
    assert_int_equal(put(m, CA, "commit_only", 1000, 1), MC_OK);
    log = mc_master_ha_log(m, &lost, &space);
    assert_true(mc_buf_unread(log) > 0);
    assert_false(space);
    assert_int_equal(mc_master_remove(m, K("commit_only"), true, NULL), MC_OK);
    log = mc_master_ha_log(m, &lost, &space);
    assert_true(space);
    log = mc_master_ha_log(m, &lost, &space);
    assert_false(space); /* cleared by the call */
    mc_master_destroy(m);
    rm_rf(dir);
    rm_rf(dir2);
}

/* The counters behind upstream's metric names: soft-pinned keys, PutStart allocation failures,
 * the value-size histogram, eviction rounds, and the per-segment numbers the cron publishes. */
static void test_upstream_metrics(void **state)
{
    (void)state;
    mc_master_t *m = mk(NULL);
    mc_master_metrics_t mm;
    mc_master_segment_metrics_t *segs;
    size_t n_segs;
    mc_master_cron(m);
    assert_int_equal(mc_master_segment_metrics_snapshot(m, &segs, &n_segs), MC_OK);
    assert_int_equal(n_segs, 0);
    assert_null(segs);
    mount(m, CA, "segA", 0x10000, 1 << 20, "h1", 0xaa);
    mc_master_replica_t r[8];
    uint32_t n;
    /* larger than the segment: an allocation failure and no eviction round, then or at the
     * cron (eviction rounds that free nothing: test_no_eviction_for_a_value_that_cannot_fit) */
    assert_int_equal(mc_master_put_start(m, CA, K("huge"), 4 << 20, NULL, false, r, &n),
                     MC_ERR_NO_AVAILABLE_HANDLE);
    mc_master_metrics_now(m, &mm);
    assert_int_equal(mm.put_start_alloc_failures, 1);
    assert_int_equal(mm.failed_evictions, 0);
    assert_int_equal(mm.successful_evictions, 0);
    mc_master_cron(m);
    mc_master_metrics_now(m, &mm);
    assert_int_equal(mm.failed_evictions, 0);
    /* sizes: 1000 (<= 4 KiB), 4096 (<= 4 KiB: bounds are inclusive), 70000 (<= 256 KiB),
     * 900000 only after evicting the others */
    assert_int_equal(put(m, CA, "a", 1000, 1), MC_OK);
    assert_int_equal(put(m, CA, "b", 4096, 1), MC_OK);
    mc_master_put_opts_t soft = {.soft_pin = true};
    assert_int_equal(mc_master_put_start(m, CA, K("s"), 70000, &soft, false, r, &n), MC_OK);
    mc_master_metrics_now(m, &mm);
    assert_int_equal(mm.soft_pin_key_count, 0); /* not committed yet */
    assert_int_equal(mc_master_put_end(m, CA, K("s"), 1), MC_OK);
    mc_master_metrics_now(m, &mm);
    assert_int_equal(mm.soft_pin_key_count, 1);
    assert_int_equal(mm.key_count, 3);
    assert_int_equal(mm.value_size_count, 3);
    assert_int_equal(mm.value_size_sum, 1000 + 4096 + 70000);
    assert_int_equal(mm.value_size_bucket[0], 2);
    assert_int_equal(mm.value_size_bucket[1], 0);
    assert_int_equal(mm.value_size_bucket[2], 1);
    mc_master_cron(m);
    assert_int_equal(mc_master_segment_metrics_snapshot(m, &segs, &n_segs), MC_OK);
    assert_int_equal(n_segs, 1);
    assert_string_equal(segs[0].name, "segA");
    assert_int_equal(segs[0].capacity_bytes, 1 << 20);
    mc_master_metrics_snapshot(m, &mm);
    assert_int_equal(segs[0].allocated_bytes, mm.allocated_bytes);
    assert_true(segs[0].allocated_bytes >= 1000 + 4096 + 70000);
    mc_free(segs);
    /* a put that fits only by evicting: a successful round, soft pin gone with its object */
    assert_int_equal(put(m, CA, "big", 1000000, 1), MC_OK);
    mc_master_metrics_now(m, &mm);
    assert_int_equal(mm.successful_evictions, 1);
    assert_true(mm.evicted_objects >= 1);
    assert_int_equal(mm.value_size_count, 4);
    assert_int_equal(mm.value_size_bucket[MC_MASTER_VALUE_SIZE_BUCKETS - 4], 1); /* <= 1 MiB */
    assert_int_equal(mm.soft_pin_key_count, mc_master_exist(m, K("s")) == MC_OK ? 1 : 0);
    /* removal of a soft-pinned object drops the gauge; a value above the last bound lands in
     * the overflow bucket (a bigger segment for it) */
    mount(m, CA, "segB", 0x10000000, 128 << 20, "h2", 0xbb);
    mc_master_put_opts_t to_b = {.soft_pin = true, .preferred_segment = "segB"};
    assert_int_equal(mc_master_put_start(m, CA, K("s2"), 100 << 20, &to_b, false, r, &n), MC_OK);
    assert_int_equal(mc_master_put_end(m, CA, K("s2"), 1), MC_OK);
    mc_master_metrics_now(m, &mm);
    assert_int_equal(mm.value_size_bucket[MC_MASTER_VALUE_SIZE_BUCKETS], 1);
    uint64_t pinned = mm.soft_pin_key_count;
    /* two replicas asked, two segments, but only segB has room left: one replica placed */
    assert_int_equal(mm.put_start_partial_allocations, 0);
    mc_master_put_opts_t two = {.replica_num = 2};
    assert_int_equal(mc_master_put_start(m, CA, K("two"), 1 << 20, &two, false, r, &n), MC_OK);
    assert_int_equal(n, 1);
    mc_master_metrics_now(m, &mm);
    assert_int_equal(mm.put_start_partial_allocations, 1);
    assert_int_equal(mc_master_remove(m, K("s2"), false, NULL), MC_OK);
    mc_master_metrics_now(m, &mm);
    assert_int_equal(mm.soft_pin_key_count, pinned - 1);
    mc_master_cron(m);
    assert_int_equal(mc_master_segment_metrics_snapshot(m, &segs, &n_segs), MC_OK);
    assert_int_equal(n_segs, 2);
    mc_free(segs);
    mc_master_destroy(m);
}

/* /get_all_keys' listing: readable keys only, one per line, cut at whole lines at the cap. */
static void test_key_list_cap(void **state)
{
    (void)state;
    mc_master_t *m = mk(NULL);
    mount(m, CA, "segA", 0x10000, 1 << 20, "h1", 0xaa);
    assert_int_equal(put(m, CA, "k1", 100, 1), MC_OK);
    assert_int_equal(put(m, CA, "k2", 100, 1), MC_OK);
    assert_int_equal(put(m, CA, "k3", 100, 1), MC_OK);
    mc_master_replica_t r[8];
    uint32_t n;
    assert_int_equal(mc_master_put_start(m, CA, K("w"), 100, NULL, false, r, &n), MC_OK);
    size_t listed = 0;
    bool truncated = true;
    char *s = mc_master_key_list(m, NULL, 1 << 20, &listed, &truncated);
    assert_non_null(s);
    assert_int_equal(listed, 3);
    assert_false(truncated);
    assert_int_equal(strlen(s), 9); /* "kN\n" x 3, not the key being written */
    assert_null(strstr(s, "w\n"));
    mc_free(s);
    s = mc_master_key_list(m, NULL, 7, &listed, &truncated); /* room for two lines of 3 bytes */
    assert_non_null(s);
    assert_int_equal(listed, 2);
    assert_true(truncated);
    assert_int_equal(strlen(s), 6);
    assert_int_equal(s[5], '\n');
    mc_free(s);
    mc_master_destroy(m);
}

/* BatchReplicaClear, one key at a time: only the writer's unleased committed objects; all
 * replicas or one segment's; the space comes back; logged so a restart agrees. */
static void test_replica_clear(void **state)
{
    (void)state;
    char dir[] = "/tmp/mc_master_rc_XXXXXX";
    assert_non_null(mkdtemp(dir));
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.default_kv_lease_ttl_ms = 500;
    cfg.client_ttl_ms = 100000;
    cfg.wal_dir = dir;
    mc_master_t *m = mk(&cfg);
    mount(m, CA, "segA", 0x100000, 1 << 20, "hA", 0x11);
    mount(m, CB, "segB", 0x900000, 1 << 20, "hB", 0x22);
    mc_master_replica_t r[8];
    uint32_t n;
    mc_master_put_opts_t two = {.replica_num = 2};
    /* a: two replicas, written by A */
    assert_int_equal(mc_master_put_start(m, CA, K("a"), 4096, &two, false, r, &n), MC_OK);
    assert_int_equal(n, 2);
    assert_int_equal(mc_master_put_end(m, CA, K("a"), 9), MC_OK);
    assert_int_equal(put(m, CA, "b", 4096, 1), MC_OK);
    assert_int_equal(put(m, CB, "byB", 4096, 1), MC_OK);
    assert_int_equal(mc_master_put_start(m, CA, K("w"), 4096, NULL, false, r, &n), MC_OK);
    mc_master_segment_status_t sa, sb;
    assert_int_equal(mc_master_query_segment(m, "segA", &sa), MC_OK);
    uint64_t used_a = sa.used;

    /* refusals */
    assert_int_equal(mc_master_replica_clear(m, CA, K("nope"), ""), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_replica_clear(m, CA, K("byB"), ""), MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_replica_clear(m, CA, K("w"), ""), MC_ERR_REPLICA_IS_NOT_READY);
    assert_int_equal(mc_master_replica_clear(m, CA, "", 0, ""), MC_ERR_INVALID_KEY);
    assert_int_equal(mc_master_get_replicas(m, K("a"), r, &n, NULL, NULL), MC_OK); /* lease */
    assert_int_equal(mc_master_replica_clear(m, CA, K("a"), "segA"), MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(mc_master_replica_clear(m, CA, K("a"), ""), MC_ERR_OBJECT_HAS_LEASE);
    g_now += 501;
    assert_int_equal(mc_master_replica_clear(m, CA, K("a"), "segC"), MC_ERR_SEGMENT_NOT_FOUND);

    /* one segment: the other replica stays, readable */
    assert_int_equal(mc_master_replica_clear(m, CA, K("a"), "segA"), MC_OK);
    assert_int_equal(mc_master_get_replicas(m, K("a"), r, &n, NULL, NULL), MC_OK);
    assert_int_equal(n, 1);
    assert_string_equal(r[0].segment_name, "segB");
    g_now += 501; /* that read leased it again */
    assert_int_equal(mc_master_replica_clear(m, CA, K("a"), "segA"), MC_ERR_SEGMENT_NOT_FOUND);
    /* its last replica: the object goes */
    assert_int_equal(mc_master_replica_clear(m, CA, K("a"), "segB"), MC_OK);
    assert_int_equal(mc_master_exist(m, K("a")), MC_ERR_OBJECT_NOT_FOUND);
    /* all replicas */
    assert_int_equal(mc_master_replica_clear(m, CA, K("b"), ""), MC_OK);
    assert_int_equal(mc_master_exist(m, K("b")), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_replica_clear(m, CA, K("b"), ""), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_query_segment(m, "segA", &sa), MC_OK);
    assert_true(sa.used < used_a); /* freed at once */
    /* an upsert by B makes it B's */
    assert_int_equal(put(m, CA, "c", 4096, 1), MC_OK);
    assert_int_equal(mc_master_put_start(m, CB, K("c"), 4096, NULL, true, r, &n), MC_OK);
    assert_int_equal(mc_master_put_end(m, CB, K("c"), 2), MC_OK);
    assert_int_equal(mc_master_replica_clear(m, CA, K("c"), ""), MC_ERR_ILLEGAL_CLIENT);
    /* a partial clear is logged: after a restart "d" has one replica, "a" and "b" none */
    assert_int_equal(mc_master_put_start(m, CA, K("d"), 4096, &two, false, r, &n), MC_OK);
    assert_int_equal(mc_master_put_end(m, CA, K("d"), 3), MC_OK);
    assert_int_equal(mc_master_replica_clear(m, CA, K("d"), "segB"), MC_OK);
    assert_int_equal(mc_master_wal_sync(m), MC_OK);
    mc_master_destroy(m);
    m = mk(&cfg);
    mc_master_segment_info_t a = {.name = "segA", .base = 0x100000, .size = 1 << 20,
                                  .host_label = "hA"};
    memset(a.uuid, 0x11, 16);
    assert_int_equal(mc_master_mount(m, CA, &a, true), MC_OK);
    mc_master_segment_info_t b = {.name = "segB", .base = 0x900000, .size = 1 << 20,
                                  .host_label = "hB"};
    memset(b.uuid, 0x22, 16);
    assert_int_equal(mc_master_mount(m, CB, &b, true), MC_OK);
    assert_int_equal(mc_master_get_replicas(m, K("d"), r, &n, NULL, NULL), MC_OK);
    assert_int_equal(n, 1);
    assert_string_equal(r[0].segment_name, "segA");
    assert_int_equal(mc_master_exist(m, K("a")), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_exist(m, K("b")), MC_ERR_OBJECT_NOT_FOUND);
    /* recovered objects have no writer */
    g_now += 100000;
    assert_int_equal(mc_master_replica_clear(m, CA, K("d"), ""), MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_query_segment(m, "segB", &sb), MC_OK);
    mc_master_destroy(m);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* A client first seen through another call (a put after a restart) is still asked to re-mount
 * by its first ping; one that mounted is not. */
static void test_ping_asks_remount_after_other_calls(void **state)
{
    (void)state;
    mc_master_t *m = mk(NULL);
    mount(m, CA, "segA", 0x100000, 1 << 20, "hA", 0x11);
    bool need = true;
    assert_int_equal(mc_master_ping(m, CA, &need), MC_OK);
    assert_false(need);
    mc_master_replica_t r[8];
    uint32_t n;
    assert_int_equal(mc_master_put_start(m, CB, K("x"), 100, NULL, false, r, &n), MC_OK);
    assert_int_equal(mc_master_ping(m, CB, &need), MC_OK);
    assert_true(need);
    assert_int_equal(mc_master_ping(m, CB, &need), MC_OK);
    assert_false(need);
    mc_master_destroy(m);
}

/* Ticks the fake clock by `ms` in 1 s steps with CB pinging (CA silent) and the cron running. */
static void only_b_alive(mc_master_t *m, uint64_t ms)
{
    for (uint64_t t = 0; t < ms; t += 1000) {
        g_now += 1000;
        bool need;
        assert_int_equal(mc_master_ping(m, CB, &need), MC_OK);
        mc_master_cron(m);
    }
}

/* Counts the events of `kind` from seq *from_p on (advances *from_p). */
static size_t events_of(mc_master_t *m, uint64_t *from_p, int kind)
{
    static mc_master_event_t ev[4096];
    size_t n = 0, hits = 0;
    mc_master_events_info_t info;
    assert_int_equal(mc_master_events_read(m, *from_p, 0, 4096, ev, &n, &info), MC_OK);
    assert_false(info.gap);
    for (size_t i = 0; i < n; i++)
        hits += ev[i].kind == kind;
    *from_p = info.next_seq;
    return hits;
}

/* A client silent for client_ttl (a stopped process) has its segment HELD, not dropped: its
 * objects are unreadable (lookups, exists) and nothing is allocated there; a put of a key held
 * there replaces it; when the same client re-mounts the same segment instance within
 * segment_hold_ms, everything else is readable again at the same addresses. A hold that runs
 * out drops the segment as before; a new instance (another uuid) gets nothing back. */
static void test_stalled_client_hold(void **state)
{
    (void)state;
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.client_ttl_ms = 10000;
    cfg.segment_hold_ms = 30000;
    mc_master_t *m = mk(&cfg);
    mount(m, CA, "segA", 0x100000, 1 << 20, "hA", 0xa1);
    mount(m, CB, "segB", 0x900000, 1 << 20, "hB", 0xb1);
    mc_master_replica_t r[8];
    uint32_t n;
    uint64_t addr[10], size, sum;
    mc_master_put_opts_t on_a = {.preferred_segment = "segA"};
    for (int i = 0; i < 10; i++) {
        char key[16];
        snprintf(key, sizeof(key), "a%d", i);
        assert_int_equal(mc_master_put_start(m, CB, key, strlen(key), 1000, &on_a, false, r, &n),
                         MC_OK);
        assert_string_equal(r[0].segment_name, "segA");
        addr[i] = r[0].addr;
        assert_int_equal(mc_master_put_end(m, CB, key, strlen(key), 100 + (uint64_t)i), MC_OK);
    }
    mc_master_put_opts_t two = {.replica_num = 2};
    assert_int_equal(mc_master_put_start(m, CB, K("both"), 1000, &two, false, r, &n), MC_OK);
    assert_int_equal(n, 2);
    assert_int_equal(mc_master_put_end(m, CB, K("both"), 7), MC_OK);
    uint64_t seq = 1;
    events_of(m, &seq, MC_MASTER_EV_COMMITTED);
    assert_int_equal(mc_master_get_replicas(m, K("a8"), r, &n, NULL, NULL), MC_OK); /* leased */

    /* CA stalls past client_ttl: segA is held */
    only_b_alive(m, 12000);
    mc_master_segment_status_t ss;
    assert_int_equal(mc_master_query_segment(m, "segA", &ss), MC_OK);
    assert_int_equal(ss.state, 2);
    assert_int_equal(ss.replicas, 11);
    assert_int_equal(mc_master_exist(m, K("a0")), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_get_replicas(m, K("a0"), r, &n, NULL, NULL),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_get_replicas(m, K("both"), r, &n, NULL, NULL), MC_OK);
    assert_int_equal(n, 1);
    assert_string_equal(r[0].segment_name, "segB");
    for (int i = 0; i < 20; i++) { /* nothing is allocated in a held segment */
        char key[16];
        snprintf(key, sizeof(key), "new%d", i);
        assert_int_equal(mc_master_put_start(m, CB, key, strlen(key), 1000, &on_a, false, r, &n),
                         MC_OK);
        assert_string_equal(r[0].segment_name, "segB");
        assert_int_equal(mc_master_put_revoke(m, CB, key, strlen(key)), MC_OK);
    }
    /* a put of a held key replaces it (readers see no such key) */
    assert_int_equal(put(m, CB, "a9", 500, 999), MC_OK);
    assert_int_equal(events_of(m, &seq, MC_MASTER_EV_REMOVED), 1);
    /* ... a leased one too, without listing the held replica for a stamp */
    mc_master_retired_t ret = {.max = 8};
    assert_int_equal(mc_master_put_start_ex(m, CB, K("a8"), 500, NULL, false, r, &n, &ret, NULL),
                     MC_OK);
    assert_int_equal(ret.n + ret.unlisted, 0);
    mc_master_retired_free(&ret);
    assert_int_equal(mc_master_put_end(m, CB, K("a8"), 888), MC_OK);
    assert_int_equal(events_of(m, &seq, MC_MASTER_EV_REMOVED), 1);
    assert_int_equal(put(m, CB, "both", 10, 1), MC_ERR_OBJECT_ALREADY_EXISTS); /* readable */
    assert_int_equal(events_of(m, &seq, MC_MASTER_EV_SEGMENT_LOST), 0);
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.recovering_segments, 1);

    bool need = false;
    mc_master_segment_info_t a = {.name = "segA", .base = 0x100000, .size = 1 << 20,
                                  .host_label = "hA", .te_endpoint = "segA"};
    memset(a.uuid, 0xa1, 16);
    /* CA comes back: NEED_REMOUNT, then the same instance re-mounts within the hold */
    assert_int_equal(mc_master_ping(m, CA, &need), MC_OK);
    assert_true(need);
    assert_int_equal(mc_master_mount(m, CA, &a, true), MC_OK);
    for (int i = 0; i < 8; i++) {
        char key[16];
        snprintf(key, sizeof(key), "a%d", i);
        assert_int_equal(mc_master_get_replicas(m, key, strlen(key), r, &n, &size, &sum), MC_OK);
        assert_int_equal(n, 1);
        assert_string_equal(r[0].segment_name, "segA");
        assert_int_equal(r[0].addr, addr[i]);
        assert_int_equal(size, 1000);
        assert_int_equal(sum, 100 + (uint64_t)i);
    }
    assert_int_equal(mc_master_get_replicas(m, K("a9"), r, &n, &size, &sum), MC_OK);
    assert_int_equal(sum, 999); /* the value put during the hold */
    assert_int_equal(mc_master_get_replicas(m, K("both"), r, &n, NULL, NULL), MC_OK);
    assert_int_equal(n, 2);
    /* readable again: a COMMITTED per replica on segA (a0..a7, both); nothing lost */
    uint64_t seq0 = seq;
    assert_int_equal(events_of(m, &seq, MC_MASTER_EV_COMMITTED), 9);
    seq = seq0;
    assert_int_equal(events_of(m, &seq, MC_MASTER_EV_SEGMENT_LOST), 0);

    /* a stall longer than the hold loses them as before */
    only_b_alive(m, 12000);
    assert_int_equal(mc_master_query_segment(m, "segA", &ss), MC_OK);
    assert_int_equal(ss.state, 2);
    only_b_alive(m, 30000);
    assert_int_equal(mc_master_query_segment(m, "segA", &ss), MC_ERR_SEGMENT_NOT_FOUND);
    assert_int_equal(mc_master_exist(m, K("a0")), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(put(m, CB, "a0", 100, 1), MC_OK); /* the object itself is gone */
    assert_int_equal(events_of(m, &seq, MC_MASTER_EV_SEGMENT_LOST), 1);
    assert_int_equal(mc_master_ping(m, CA, &need), MC_OK);
    assert_true(need);
    assert_int_equal(mc_master_mount(m, CA, &a, true), MC_OK); /* mounted fresh: empty */
    assert_int_equal(mc_master_exist(m, K("a1")), MC_ERR_OBJECT_NOT_FOUND);

    /* a new instance (restarted process: another client id and uuid) gets nothing back */
    assert_int_equal(mc_master_put_start(m, CB, K("x"), 1000, &on_a, false, r, &n), MC_OK);
    assert_string_equal(r[0].segment_name, "segA");
    assert_int_equal(mc_master_put_end(m, CB, K("x"), 5), MC_OK);
    only_b_alive(m, 12000);
    assert_int_equal(mc_master_query_segment(m, "segA", &ss), MC_OK);
    assert_int_equal(ss.state, 2);
    static const uint8_t CC[16] = {3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3};
    mc_master_segment_info_t a2 = a;
    assert_int_equal(mc_master_mount(m, CC, &a2, false), MC_OK); /* same uuid, other client */
    assert_int_equal(mc_master_exist(m, K("x")), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(events_of(m, &seq, MC_MASTER_EV_SEGMENT_LOST), 1);
    assert_int_equal(mc_master_put_start(m, CB, K("x"), 1000, &on_a, false, r, &n), MC_OK);
    assert_int_equal(mc_master_put_end(m, CB, K("x"), 6), MC_OK);
    mc_master_destroy(m);
}

int main(int argc, char **argv)
{
    if (argc > 1) /* a test name or glob: run only those */
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_states),
        cmocka_unit_test(test_remove_lease),
        cmocka_unit_test(test_replica_clear),
        cmocka_unit_test(test_ping_asks_remount_after_other_calls),
        cmocka_unit_test(test_eviction_under_pressure),
        cmocka_unit_test(test_no_eviction_for_a_value_that_cannot_fit),
        cmocka_unit_test(test_exist_extends_lease_flag),
        cmocka_unit_test(test_policy_keeps_working_set_under_scan),
        cmocka_unit_test(test_policy_memory_per_object),
        cmocka_unit_test(test_policy_config_checked),
        cmocka_unit_test(test_eviction_logged),
        cmocka_unit_test(test_pins),
        cmocka_unit_test(test_lease_gauge),
        cmocka_unit_test(test_stuck_put),
        cmocka_unit_test(test_client_death_and_placement),
        cmocka_unit_test(test_stalled_client_hold),
        cmocka_unit_test(test_silent_writer),
        cmocka_unit_test(test_graceful_unmount),
        cmocka_unit_test(test_free_ratio_first),
        cmocka_unit_test(test_upsert),
        cmocka_unit_test(test_forced_remove_retires),
        cmocka_unit_test(test_grants_park_space),
        cmocka_unit_test(test_wal_recovery),
        cmocka_unit_test(test_snapshot_fork_while_threads_allocate),
        cmocka_unit_test(test_follow_and_promote),
        cmocka_unit_test(test_follow_pending_puts),
        cmocka_unit_test(test_follow_put_pools),
        cmocka_unit_test(test_follow_reuse_by_range),
        cmocka_unit_test(test_follow_reuse_cap),
        cmocka_unit_test(test_log_bytes_per_put),
        cmocka_unit_test(test_put_end_after_snapshot),
        cmocka_unit_test(test_follow_pending_upsert),
        cmocka_unit_test(test_old_records_replay),
        cmocka_unit_test(test_upstream_metrics),
        cmocka_unit_test(test_key_list_cap),
        cmocka_unit_test(test_batch_lookup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
