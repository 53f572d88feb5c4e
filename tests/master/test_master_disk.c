/* The master's LOCAL_DISK tier (master_disk.c), driven directly with a fake clock: mount
 * refused without enable_offload, eager offload at PutEnd, offload on eviction, gets preferring
 * memory, disk-only reads, removal tasks, re-registration and its reconciliation, disk
 * eviction, client expiry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "master/master.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_now = 1000000;
static bool g_ticking; /* every reading of the clock is 1 ms after the one before */
static uint64_t fake_clock(void *ctx)
{
    (void)ctx;
    return g_ticking ? g_now++ : g_now;
}

static const uint8_t CA[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
static const uint8_t CB[16] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2};
#define K(s) s, strlen(s)

static uint64_t g_queue_limit; /* --offloading_queue_limit of the next mkw (0: default) */
static uint8_t g_admission;    /* offload_admission of the next mkw */
static bool g_no_force;        /* offload_force_evict = false for the next mkw */
static bool g_no_mount;        /* the next mkw mounts nothing (a standby starts empty) */

/* A master (with a WAL in wal_dir, or none) with CA's segment segA mounted (unless
 * g_no_mount). */
static mc_master_t *mkw(bool offload, bool on_evict, const char *wal_dir)
{
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.clock = fake_clock;
    cfg.enable_offload = offload;
    cfg.offload_on_evict = on_evict;
    cfg.wal_dir = wal_dir;
    if (g_queue_limit)
        cfg.offloading_queue_limit = g_queue_limit;
    cfg.offload_admission = g_admission;
    cfg.offload_force_evict = !g_no_force;
    mc_master_t *m;
    assert_int_equal(mc_master_create(&cfg, &m), MC_OK);
    if (g_no_mount)
        return m;
    mc_master_segment_info_t si = {.name = "segA", .base = 0x10000, .size = 1 << 20,
                                   .te_endpoint = "segA"};
    memset(si.uuid, 0xaa, 16);
    assert_int_equal(mc_master_mount(m, CA, &si, false), MC_OK);
    return m;
}

static mc_master_t *mk(bool offload, bool on_evict)
{
    return mkw(offload, on_evict, NULL);
}

static void put(mc_master_t *m, const char *key, uint64_t size, uint64_t sum)
{
    mc_master_replica_t r[8];
    uint32_t n;
    assert_int_equal(mc_master_put_start(m, CA, key, strlen(key), size, NULL, false, r, &n), MC_OK);
    assert_int_equal(mc_master_put_end(m, CA, key, strlen(key), sum), MC_OK);
}

/* One heartbeat of cid: expects exactly n tasks; returns them (caller frees). */
static mc_master_offload_tasks_t beat_of(mc_master_t *m, const uint8_t cid[16], uint32_t n)
{
    mc_master_offload_tasks_t t;
    assert_int_equal(mc_master_offload_heartbeat(m, cid, true, 0, &t), MC_OK);
    assert_int_equal(t.n, n);
    return t;
}

static mc_master_offload_tasks_t beat(mc_master_t *m, uint32_t n)
{
    return beat_of(m, CA, n);
}

static void test_refused_without_enable_offload(void **state)
{
    (void)state;
    mc_master_t *m = mk(false, false);
    assert_int_equal(mc_master_mount_local_disk(m, CA, true, "127.0.0.1:1"), MC_ERR_UNABLE_OFFLOAD);
    mc_master_offload_tasks_t t;
    assert_int_equal(mc_master_offload_heartbeat(m, CA, true, 0, &t), MC_ERR_UNABLE_OFFLOAD);
    assert_int_equal(mc_master_notify_offload_success(m, CA, K("k"), 10, 1, true),
                     MC_ERR_UNABLE_OFFLOAD);
    assert_int_equal(mc_master_report_ssd_capacity(m, CA, 1 << 30), MC_ERR_UNABLE_OFFLOAD);
    put(m, "k", 100, 7); /* the memory tier is unchanged */
    mc_master_destroy(m);
}

static void test_eager_offload_and_disk_only_get(void **state)
{
    (void)state;
    mc_master_t *m = mk(true, false);
    /* a client without a disk: nothing queued, UNABLE_OFFLOADING */
    mc_master_offload_tasks_t t;
    assert_int_equal(mc_master_offload_heartbeat(m, CA, true, 0, &t), MC_ERR_UNABLE_OFFLOADING);
    assert_int_equal(mc_master_mount_local_disk(m, CA, true, ""), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_mount_local_disk(m, CA, true, "127.0.0.1:4000"), MC_OK);
    assert_int_equal(mc_master_report_ssd_capacity(m, CA, 1 << 30), MC_OK);
    put(m, "k1", 1000, 0x1111);
    t = beat(m, 1);
    assert_false(t.items[0].remove);
    assert_int_equal(t.items[0].klen, 2);
    assert_memory_equal(t.items[0].key, "k1", 2);
    assert_string_equal(t.items[0].segment_name, "segA");
    assert_int_equal(t.items[0].size, 1000);
    assert_int_equal(t.items[0].checksum, 0x1111);
    mc_master_replica_t r[8];
    uint32_t n;
    uint64_t size, sum;
    assert_int_equal(mc_master_get_replicas(m, K("k1"), r, &n, &size, &sum), MC_OK);
    uint64_t addr = r[0].addr;
    assert_int_equal(t.items[0].addr, addr);
    mc_master_offload_tasks_free(&t);
    beat(m, 0);
    /* a wrong checksum or an unknown key is not a finished task */
    assert_int_equal(mc_master_notify_offload_success(m, CA, K("k1"), 1000, 0x2222, false),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_notify_offload_success(m, CA, K("zz"), 1000, 0x1111, false),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_notify_offload_success(m, CA, K("k1"), 1000, 0x1111, false), MC_OK);
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.disk_objects, 1);
    assert_int_equal(mt.disk_bytes, 1000);
    assert_int_equal(mt.disk_capacity_bytes, 1 << 30);
    /* memory is preferred while it is there */
    assert_int_equal(mc_master_get_replicas(m, K("k1"), r, &n, &size, &sum), MC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(r[0].type, MC_MASTER_REPLICA_MEMORY);
    /* the memory replica goes (its segment is unmounted): the disk copy answers */
    assert_int_equal(mc_master_unmount(m, CA, "segA", false), MC_OK);
    assert_int_equal(mc_master_get_replicas(m, K("k1"), r, &n, &size, &sum), MC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(r[0].type, MC_MASTER_REPLICA_LOCAL_DISK);
    assert_string_equal(r[0].endpoint, "127.0.0.1:4000");
    assert_memory_equal(r[0].client_id, CA, 16);
    assert_int_equal(size, 1000);
    assert_int_equal(sum, 0x1111);
    assert_int_equal(mc_master_exist(m, K("k1")), MC_OK);
    assert_int_equal(mc_master_get_size(m, K("k1"), &size), MC_OK);
    assert_int_equal(size, 1000);
    /* a put of the key is refused (it exists); remove drops it and tells the owner */
    assert_int_equal(mc_master_put_start(m, CA, K("k1"), 10, NULL, false, r, &n),
                     MC_ERR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(mc_master_remove(m, K("k1"), false, NULL), MC_OK);
    assert_int_equal(mc_master_get_replicas(m, K("k1"), r, &n, &size, &sum),
                     MC_ERR_OBJECT_NOT_FOUND);
    t = beat(m, 1);
    assert_true(t.items[0].remove);
    assert_memory_equal(t.items[0].key, "k1", 2);
    mc_master_offload_tasks_free(&t);
    mc_master_destroy(m);
}

/* offload_on_evict: nothing is queued at PutEnd; eviction queues the victims and keeps them in
 * memory until the owner confirms; then they leave memory and stay readable from disk. */
static void test_offload_on_evict(void **state)
{
    (void)state;
    mc_master_t *m = mk(true, true);
    assert_int_equal(mc_master_mount_local_disk(m, CA, true, "127.0.0.1:4000"), MC_OK);
    char key[16];
    for (int i = 0; i < 15; i++) { /* 64 KiB values: 15 of 16 slots, over the 90 % watermark */
        snprintf(key, sizeof(key), "e%02d", i);
        put(m, key, 64 << 10, 100 + (uint64_t)i);
    }
    beat(m, 0);
    mc_master_cron(m);
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.evicted_objects, 0); /* deferred: queued instead */
    assert_int_equal(mt.offload_skipped, 0);
    assert_true(mt.offload_queue_depth >= 1);
    mc_master_offload_tasks_t t;
    assert_int_equal(mc_master_offload_heartbeat(m, CA, true, 0, &t), MC_OK);
    assert_true(t.n >= 1);
    uint32_t queued = t.n;
    for (uint32_t i = 0; i < t.n; i++)
        assert_int_equal(mc_master_notify_offload_success(m, CA, t.items[i].key, t.items[i].klen,
                                                          t.items[i].size, t.items[i].checksum,
                                                          false),
                         MC_OK);
    char first[16];
    snprintf(first, sizeof(first), "%.*s", (int)t.items[0].klen, t.items[0].key);
    mc_master_offload_tasks_free(&t);
    mc_master_cron(m);
    mc_master_metrics_now(m, &mt);
    assert_true(mt.evicted_objects >= 1);
    assert_int_equal(mt.disk_objects, queued);
    /* the evicted object lives on, disk only */
    mc_master_replica_t r[8];
    uint32_t n;
    uint64_t size, sum;
    assert_int_equal(mc_master_get_replicas(m, K(first), r, &n, &size, &sum), MC_OK);
    assert_int_equal(r[0].type, MC_MASTER_REPLICA_LOCAL_DISK);
    assert_int_equal(size, 64 << 10);
    /* the owner evicts it from its disk: gone */
    assert_int_equal(mc_master_evict_disk_replica(m, CB, K(first)), MC_ERR_UNABLE_OFFLOADING);
    assert_int_equal(mc_master_evict_disk_replica(m, CA, K(first)), MC_OK);
    assert_int_equal(mc_master_evict_disk_replica(m, CA, K(first)), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_get_replicas(m, K(first), r, &n, &size, &sum),
                     MC_ERR_OBJECT_NOT_FOUND);
    mc_master_destroy(m);
}

/* offload_on_evict past its limits: victims beyond the per-pass cap (offload_cap_ratio x
 * offloading_queue_limit) leave memory without a disk copy and are counted as skipped. */
static void test_offload_on_evict_skipped(void **state)
{
    (void)state;
    g_queue_limit = 4; /* cap: 2 victims held per eviction pass */
    mc_master_t *m = mk(true, true);
    g_queue_limit = 0;
    assert_int_equal(mc_master_mount_local_disk(m, CA, true, "127.0.0.1:4000"), MC_OK);
    char key[16];
    for (int i = 0; i < 15; i++) {
        snprintf(key, sizeof(key), "s%02d", i);
        put(m, key, 64 << 10, 100 + (uint64_t)i);
    }
    mc_master_cron(m);
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.offload_queue_depth, 2);
    assert_true(mt.evicted_objects >= 1);
    assert_int_equal(mt.offload_skipped, mt.evicted_objects);
    mc_master_destroy(m);
}

/* A restarted master (or one that expired the client) learns the disk objects again from the
 * owner's re-registration; the owner's silence drops its disk replicas. */
static void test_reregister_and_expiry(void **state)
{
    (void)state;
    mc_master_t *m = mk(true, false);
    assert_int_equal(mc_master_notify_offload_success(m, CB, K("r1"), 10, 1, true),
                     MC_ERR_UNABLE_OFFLOADING);
    assert_int_equal(mc_master_mount_local_disk(m, CB, true, "127.0.0.1:5000"), MC_OK);
    assert_int_equal(mc_master_notify_offload_success(m, CB, K("r1"), 4096, 0x77, true), MC_OK);
    assert_int_equal(mc_master_notify_offload_success(m, CB, K("r1"), 4096, 0x77, true), MC_OK);
    mc_master_replica_t r[8];
    uint32_t n;
    uint64_t size, sum;
    assert_int_equal(mc_master_get_replicas(m, K("r1"), r, &n, &size, &sum), MC_OK);
    assert_int_equal(r[0].type, MC_MASTER_REPLICA_LOCAL_DISK);
    assert_int_equal(sum, 0x77);
    /* a copy of another value than the committed one is stale */
    put(m, "r2", 100, 5);
    assert_int_equal(mc_master_notify_offload_success(m, CB, K("r2"), 100, 6, true),
                     MC_ERR_INVALID_PARAMS);
    /* an upsert replaces a disk-only value and tells its owner to remove it */
    assert_int_equal(mc_master_put_start(m, CA, K("r1"), 10, NULL, true, r, &n), MC_OK);
    mc_master_offload_tasks_t t;
    assert_int_equal(mc_master_offload_heartbeat(m, CB, true, 0, &t), MC_OK);
    assert_int_equal(t.n, 1);
    assert_true(t.items[0].remove);
    mc_master_offload_tasks_free(&t);
    assert_int_equal(mc_master_put_end(m, CA, K("r1"), 9), MC_OK);
    assert_int_equal(mc_master_notify_offload_success(m, CB, K("r3"), 4096, 0x78, true), MC_OK);
    /* CB goes silent: its disk replicas go */
    g_now += 11000;
    assert_int_equal(mc_master_ping(m, CA, &(bool){false}), MC_OK);
    mc_master_cron(m);
    assert_int_equal(mc_master_get_replicas(m, K("r3"), r, &n, &size, &sum),
                     MC_ERR_OBJECT_NOT_FOUND);
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.disk_objects, 0);
    assert_int_equal(mc_master_offload_heartbeat(m, CB, true, 0, &t), MC_ERR_UNABLE_OFFLOADING);
    mc_master_destroy(m);
}

/* promotion_on_hit: the second disk hit queues a promotion for the owner; while it writes
 * the memory copy gets still read the disk; after it they read memory. */
static void test_promotion_on_hit(void **state)
{
    (void)state;
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.clock = fake_clock;
    cfg.enable_offload = true;
    cfg.offload_on_evict = true; /* no eager offload: the test places the disk copy */
    cfg.promotion_on_hit = true;
    mc_master_t *m;
    assert_int_equal(mc_master_create(&cfg, &m), MC_OK);
    mc_master_segment_info_t si = {.name = "segA", .base = 0x10000, .size = 1 << 20,
                                   .te_endpoint = "segA"};
    memset(si.uuid, 0xaa, 16);
    assert_int_equal(mc_master_mount(m, CA, &si, false), MC_OK);
    assert_int_equal(mc_master_mount_local_disk(m, CA, true, "127.0.0.1:4000"), MC_OK);
    assert_int_equal(mc_master_notify_offload_success(m, CA, K("p"), 4096, 0x99, true), MC_OK);
    mc_master_replica_t r[8];
    uint32_t n;
    uint64_t size, sum;
    assert_int_equal(mc_master_promotion_start(m, CA, K("p"), r, &n), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_get_replicas(m, K("p"), r, &n, &size, &sum), MC_OK);
    beat(m, 0); /* one hit: under the threshold */
    assert_int_equal(mc_master_get_replicas(m, K("p"), r, &n, &size, &sum), MC_OK);
    assert_int_equal(mc_master_get_replicas(m, K("p"), r, &n, &size, &sum), MC_OK);
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.promotion_in_flight, 1);
    mc_master_offload_tasks_t t = beat(m, 1); /* queued once, whatever the hits */
    assert_true(t.items[0].promote);
    assert_int_equal(t.items[0].size, 4096);
    assert_int_equal(t.items[0].checksum, 0x99);
    mc_master_offload_tasks_free(&t);
    assert_int_equal(mc_master_promotion_start(m, CA, K("p"), r, &n), MC_OK);
    assert_int_equal(n, 1);
    assert_string_equal(r[0].segment_name, "segA");
    /* being written: gets still read the disk */
    assert_int_equal(mc_master_get_replicas(m, K("p"), r, &n, &size, &sum), MC_OK);
    assert_int_equal(r[0].type, MC_MASTER_REPLICA_LOCAL_DISK);
    assert_int_equal(mc_master_promotion_end(m, CB, K("p"), true), MC_ERR_UNABLE_OFFLOADING);
    assert_int_equal(mc_master_promotion_end(m, CA, K("p"), true), MC_OK);
    assert_int_equal(mc_master_get_replicas(m, K("p"), r, &n, &size, &sum), MC_OK);
    assert_int_equal(r[0].type, MC_MASTER_REPLICA_MEMORY);
    assert_int_equal(sum, 0x99);
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.promotion_in_flight, 0);
    assert_int_equal(mt.promotions, 1);
    assert_int_equal(mt.disk_objects, 1); /* the disk copy stays */
    mc_master_destroy(m);
}

/* promotion_queue_limit caps the promotions queued or in flight over all clients;
 * promotion_max_per_heartbeat the promotion tasks one heartbeat hands out (the rest wait). */
static void test_promotion_limits(void **state)
{
    (void)state;
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    assert_int_equal(cfg.promotion_queue_limit, 50000);
    assert_int_equal(cfg.promotion_max_per_heartbeat, 1);
    cfg.clock = fake_clock;
    cfg.enable_offload = true;
    cfg.offload_on_evict = true;
    cfg.promotion_on_hit = true;
    cfg.promotion_admission_threshold = 1;
    cfg.promotion_queue_limit = 3;
    cfg.promotion_max_per_heartbeat = 2;
    mc_master_t *m;
    assert_int_equal(mc_master_create(&cfg, &m), MC_OK);
    assert_int_equal(mc_master_mount_local_disk(m, CA, true, "127.0.0.1:4000"), MC_OK);
    const char *keys[] = {"k0", "k1", "k2", "k3", "k4"};
    mc_master_replica_t r[8];
    uint32_t n;
    uint64_t size, sum;
    for (int i = 0; i < 5; i++) {
        assert_int_equal(mc_master_notify_offload_success(m, CA, K(keys[i]), 64, 7, true), MC_OK);
        assert_int_equal(mc_master_get_replicas(m, K(keys[i]), r, &n, &size, &sum), MC_OK);
    }
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.promotion_in_flight, 3); /* k3, k4: over the queue limit */
    mc_master_offload_tasks_t t = beat(m, 2); /* the per-heartbeat cap */
    assert_true(t.items[0].promote && t.items[1].promote);
    mc_master_offload_tasks_free(&t);
    t = beat(m, 1);
    mc_master_offload_tasks_free(&t);
    mc_master_destroy(m);
    cfg.promotion_max_per_heartbeat = 0;
    assert_int_equal(mc_master_create(&cfg, &m), MC_ERR_INVALID_PARAMS);
}

static const uint8_t CC[16] = {3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3};

/* RemoveByRegex and RemoveAll reach keys that live on disk only: the master forgets them and
 * hands their owner removal tasks. */
static void test_remove_regex_all_disk_only(void **state)
{
    (void)state;
    mc_master_t *m = mk(true, true); /* no eager offload: the test places the disk copies */
    assert_int_equal(mc_master_mount_local_disk(m, CA, true, "127.0.0.1:4000"), MC_OK);
    assert_int_equal(mc_master_notify_offload_success(m, CA, K("a1"), 4096, 1, true), MC_OK);
    assert_int_equal(mc_master_notify_offload_success(m, CA, K("a2"), 4096, 2, true), MC_OK);
    assert_int_equal(mc_master_notify_offload_success(m, CA, K("b1"), 4096, 3, true), MC_OK);
    put(m, "a3", 100, 4);
    uint64_t count = 0;
    assert_int_equal(mc_master_remove_regex(m, "^a", false, &count, NULL), MC_OK);
    assert_int_equal(count, 3);
    mc_master_replica_t r[8];
    uint32_t n;
    uint64_t size, sum;
    assert_int_equal(mc_master_get_replicas(m, K("a1"), r, &n, &size, &sum),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_exist(m, K("a2")), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_exist(m, K("b1")), MC_OK);
    mc_master_offload_tasks_t t = beat(m, 2);
    assert_true(t.items[0].remove && t.items[1].remove);
    mc_master_offload_tasks_free(&t);
    assert_int_equal(mc_master_remove_all(m, false, &count, NULL), MC_OK);
    assert_int_equal(count, 1);
    assert_int_equal(mc_master_exist(m, K("b1")), MC_ERR_OBJECT_NOT_FOUND);
    t = beat(m, 1);
    assert_true(t.items[0].remove);
    assert_memory_equal(t.items[0].key, "b1", 2);
    mc_master_offload_tasks_free(&t);
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.disk_objects, 0);
    mc_master_destroy(m);
}

/* A removal issued while the owner is down (its task handed out and never carried out, or never
 * handed out) does not come back when the owner restarts under a new client id and re-registers
 * what its disk holds; the tombstone goes at the owner's next heartbeat (its acknowledgement)
 * or when the key gets a new value. */
static void test_removal_while_owner_down(void **state)
{
    (void)state;
    mc_master_t *m = mk(true, true);
    assert_int_equal(mc_master_mount_local_disk(m, CB, true, "127.0.0.1:5000"), MC_OK);
    assert_int_equal(mc_master_notify_offload_success(m, CB, K("t1"), 4096, 0x71, true), MC_OK);
    assert_int_equal(mc_master_notify_offload_success(m, CB, K("t2"), 4096, 0x72, true), MC_OK);
    assert_int_equal(mc_master_notify_offload_success(m, CB, K("t3"), 4096, 0x73, true), MC_OK);
    /* t1's removal is handed out, then CB dies before carrying it out; t2's is never handed */
    assert_int_equal(mc_master_remove(m, K("t1"), false, NULL), MC_OK);
    mc_master_offload_tasks_t t;
    assert_int_equal(mc_master_offload_heartbeat(m, CB, true, 0, &t), MC_OK);
    assert_int_equal(t.n, 1);
    mc_master_offload_tasks_free(&t);
    assert_int_equal(mc_master_remove(m, K("t2"), false, NULL), MC_OK);
    g_now += 11000; /* CB expires */
    assert_int_equal(mc_master_ping(m, CA, &(bool){false}), MC_OK);
    mc_master_cron(m);
    /* restarted as CC: the removed copies are refused (removed again), t3 comes back */
    assert_int_equal(mc_master_mount_local_disk(m, CC, true, "127.0.0.1:5001"), MC_OK);
    assert_int_equal(mc_master_notify_offload_success(m, CC, K("t1"), 4096, 0x71, true),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_notify_offload_success(m, CC, K("t2"), 4096, 0x72, true),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_notify_offload_success(m, CC, K("t3"), 4096, 0x73, true), MC_OK);
    assert_int_equal(mc_master_exist(m, K("t1")), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_exist(m, K("t2")), MC_ERR_OBJECT_NOT_FOUND);
    /* another value of t2 than the removed one is not the removed copy */
    assert_int_equal(mc_master_notify_offload_success(m, CC, K("t2"), 4096, 0x99, true), MC_OK);
    assert_int_equal(mc_master_exist(m, K("t2")), MC_OK);
    /* a new value of t1 committed after the removal: the tombstone goes */
    put(m, "t1", 4096, 0x71);
    assert_int_equal(mc_master_remove(m, K("t1"), false, NULL), MC_OK); /* memory only */
    assert_int_equal(mc_master_notify_offload_success(m, CC, K("t1"), 4096, 0x71, true), MC_OK);
    /* CC removes t3; its heartbeat after the one that handed the task out acknowledges it */
    assert_int_equal(mc_master_remove(m, K("t3"), false, NULL), MC_OK);
    assert_int_equal(mc_master_offload_heartbeat(m, CC, true, 0, &t), MC_OK);
    assert_int_equal(t.n, 1);
    assert_true(t.items[0].remove);
    mc_master_offload_tasks_free(&t);
    assert_int_equal(mc_master_notify_offload_success(m, CC, K("t3"), 4096, 0x73, true),
                     MC_ERR_OBJECT_NOT_FOUND); /* not acknowledged yet */
    assert_int_equal(mc_master_offload_heartbeat(m, CC, true, 0, &t), MC_OK);
    mc_master_offload_tasks_free(&t);
    assert_int_equal(mc_master_notify_offload_success(m, CC, K("t3"), 4096, 0x73, true), MC_OK);
    mc_master_destroy(m);
}

/* k's only replica is CB's LOCAL_DISK copy with checksum sum. */
static void assert_on_disk(mc_master_t *m, const char *k, uint64_t sum)
{
    mc_master_replica_t r[8];
    uint32_t n;
    uint64_t size, got;
    assert_int_equal(mc_master_get_replicas(m, K(k), r, &n, &size, &got), MC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(r[0].type, MC_MASTER_REPLICA_LOCAL_DISK);
    assert_string_equal(r[0].endpoint, "127.0.0.1:5000");
    assert_memory_equal(r[0].client_id, CB, 16);
    assert_int_equal(size, 4096);
    assert_int_equal(got, sum);
}

/* The disk tier's state is in the WAL: after a restart (from the log, then from a snapshot) and
 * on a standby that applied the same records, the disk replicas are served before their owner
 * re-registers, and a removal issued while the owner was down stays removed when it comes back
 * and re-registers what its disk holds. */
static void test_disk_state_survives_restart(void **state)
{
    (void)state;
    char dir[] = "/tmp/mc_master_disk_wal_XXXXXX";
    assert_non_null(mkdtemp(dir));
    mc_master_t *m = mkw(true, true, dir);
    mc_master_ha_log_enable(m);
    assert_int_equal(mc_master_mount_local_disk(m, CB, true, "127.0.0.1:5000"), MC_OK);
    const char *keys[4] = {"t1", "t2", "t3", "t4"};
    for (int i = 0; i < 4; i++)
        assert_int_equal(mc_master_notify_offload_success(m, CB, K(keys[i]), 4096,
                                                          0x71 + (uint64_t)i, true), MC_OK);
    /* the owner is down (no heartbeat): t1 removed (a tombstone), t4 evicted by its owner
     * earlier (no tombstone); a tombstone of t3 goes with its new value committed */
    assert_int_equal(mc_master_evict_disk_replica(m, CB, K("t4")), MC_OK);
    assert_int_equal(mc_master_remove(m, K("t1"), false, NULL), MC_OK);
    assert_int_equal(mc_master_remove(m, K("t3"), false, NULL), MC_OK);
    put(m, "t3", 4096, 0x73);
    assert_int_equal(mc_master_remove(m, K("t3"), false, NULL), MC_OK); /* memory only */
    assert_int_equal(mc_master_wal_sync(m), MC_OK);
    bool lost = true, space = false;
    mc_buf_t *log = mc_master_ha_log(m, &lost, &space);
    assert_false(lost);
    size_t len = mc_buf_unread(log);
    uint8_t *recs = malloc(len);
    assert_non_null(recs);
    memcpy(recs, mc_buf_head(log), len);
    mc_master_destroy(m);

    /* a standby (empty, as mc_master_follow_begin expects) that applied the records, then
     * takes over */
    g_no_mount = true;
    mc_master_t *f = mk(true, true);
    g_no_mount = false;
    assert_int_equal(mc_master_follow_begin(f), MC_OK);
    size_t used = 0;
    assert_int_equal(mc_master_follow_apply(f, recs, len, &used, NULL, NULL), MC_OK);
    assert_int_equal(used, len);
    free(recs);
    assert_int_equal(mc_master_follow_promote(f, NULL, 2), MC_OK);
    assert_on_disk(f, "t2", 0x72);
    assert_int_equal(mc_master_exist(f, K("t1")), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_exist(f, K("t4")), MC_ERR_OBJECT_NOT_FOUND);
    mc_master_destroy(f);

    for (int round = 0; round < 2; round++) {
        /* round 0: restart from the log; round 1: from the snapshot written below */
        m = mkw(true, true, dir);
        assert_on_disk(m, "t2", 0x72); /* known before the owner re-registers */
        assert_int_equal(mc_master_exist(m, K("t1")), MC_ERR_OBJECT_NOT_FOUND);
        assert_int_equal(mc_master_exist(m, K("t3")), MC_ERR_OBJECT_NOT_FOUND);
        assert_int_equal(mc_master_exist(m, K("t4")), MC_ERR_OBJECT_NOT_FOUND);
        mc_master_metrics_t mt;
        mc_master_metrics_now(m, &mt);
        assert_int_equal(mt.disk_objects, 1);
        /* the owner's disk RPCs ask it to mount again; it does and re-registers its disk */
        mc_master_offload_tasks_t t;
        assert_int_equal(mc_master_offload_heartbeat(m, CB, true, 0, &t),
                         MC_ERR_UNABLE_OFFLOADING);
        assert_int_equal(mc_master_mount_local_disk(m, CB, true, "127.0.0.1:5000"), MC_OK);
        assert_int_equal(mc_master_notify_offload_success(m, CB, K("t1"), 4096, 0x71, true),
                         MC_ERR_OBJECT_NOT_FOUND); /* removed while it was down */
        assert_int_equal(mc_master_exist(m, K("t1")), MC_ERR_OBJECT_NOT_FOUND);
        assert_int_equal(mc_master_notify_offload_success(m, CB, K("t2"), 4096, 0x72, true),
                         MC_OK);
        /* round 0: a later value than the removed one (no tombstone); round 1: removed
         * again before the snapshot (its tombstone is in it) */
        assert_int_equal(mc_master_notify_offload_success(m, CB, K("t3"), 4096, 0x73, true),
                         round == 0 ? MC_OK : MC_ERR_OBJECT_NOT_FOUND);
        if (round == 0) {
            assert_on_disk(m, "t3", 0x73);
            /* the snapshot of this state (t1's tombstone not yet acknowledged, t3 removed
             * again) is the next start's only input */
            assert_int_equal(mc_master_remove(m, K("t3"), false, NULL), MC_OK);
            char tmp[128], fin[128];
            snprintf(tmp, sizeof(tmp), "%s/snap.1000.tmp", dir);
            snprintf(fin, sizeof(fin), "%s/snap.1000", dir);
            assert_int_equal(mc_master_snapshot_write(m, tmp, fin), 0);
        } else {
            /* the owner silent past client_ttl after the restart: its entries go */
            g_now += 11000;
            assert_int_equal(mc_master_ping(m, CA, &(bool){false}), MC_OK);
            mc_master_cron(m);
            assert_int_equal(mc_master_exist(m, K("t2")), MC_ERR_OBJECT_NOT_FOUND);
        }
        mc_master_destroy(m);
    }
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* n re-registrations (recovered) by cid of keys[i] (size 4096, checksum 0x70 + i), each OK. */
static void reregister_keys(mc_master_t *m, const uint8_t cid[16], const char *const *keys,
                            const int *idx, int n)
{
    for (int i = 0; i < n; i++)
        assert_int_equal(mc_master_notify_offload_success(m, cid, K(keys[idx[i]]), 4096,
                                                          0x70 + (uint64_t)idx[i], true),
                         MC_OK);
}

static uint64_t reconciled(mc_master_t *m)
{
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    return mt.disk_reconciled;
}

/* The end of a re-registration drops the owner's disk replicas it did not name since its
 * mount (its disk lost them), and nothing when it named them all; no removal task follows
 * (its disk does not hold them). */
static void test_reconcile_drops_unnamed(void **state)
{
    (void)state;
    mc_master_t *m = mk(true, false);
    const char *keys[4] = {"k0", "k1", "k2", "k3"};
    const int all[4] = {0, 1, 2, 3}, some[2] = {1, 3};
    uint64_t dropped = 99;
    assert_int_equal(mc_master_disk_reregistered(m, CB, &dropped), MC_ERR_UNABLE_OFFLOADING);
    assert_int_equal(dropped, 0);
    assert_int_equal(mc_master_mount_local_disk(m, CB, true, "127.0.0.1:5000"), MC_OK);
    reregister_keys(m, CB, keys, all, 4);
    assert_int_equal(mc_master_disk_reregistered(m, CB, &dropped), MC_OK);
    assert_int_equal(dropped, 0);
    /* mounted again (its disk lost k0 and k2 meanwhile): a full re-registration drops nothing */
    assert_int_equal(mc_master_mount_local_disk(m, CB, true, "127.0.0.1:5000"), MC_OK);
    reregister_keys(m, CB, keys, all, 4);
    assert_int_equal(mc_master_disk_reregistered(m, CB, &dropped), MC_OK);
    assert_int_equal(dropped, 0);
    assert_int_equal(reconciled(m), 0);
    /* a subset: the rest goes */
    assert_int_equal(mc_master_mount_local_disk(m, CB, true, "127.0.0.1:5000"), MC_OK);
    reregister_keys(m, CB, keys, some, 2);
    for (int i = 0; i < 4; i++) /* listed until the re-registration ends */
        assert_on_disk(m, keys[i], 0x70 + (uint64_t)i);
    assert_int_equal(mc_master_disk_reregistered(m, CB, &dropped), MC_OK);
    assert_int_equal(dropped, 2);
    assert_int_equal(mc_master_exist(m, K("k0")), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_exist(m, K("k2")), MC_ERR_OBJECT_NOT_FOUND);
    assert_on_disk(m, "k1", 0x71);
    assert_on_disk(m, "k3", 0x73);
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.disk_reconciled, 2);
    assert_int_equal(mt.disk_objects, 2);
    assert_int_equal(mt.disk_bytes, 2 * 4096);
    beat_of(m, CB, 0); /* no removal task: the copies are not on its disk */
    /* a repeated marker drops nothing more */
    assert_int_equal(mc_master_disk_reregistered(m, CB, &dropped), MC_OK);
    assert_int_equal(dropped, 0);
    /* an empty disk: the marker alone drops everything it listed */
    assert_int_equal(mc_master_mount_local_disk(m, CB, true, "127.0.0.1:5000"), MC_OK);
    assert_int_equal(mc_master_disk_reregistered(m, CB, &dropped), MC_OK);
    assert_int_equal(dropped, 2);
    assert_int_equal(reconciled(m), 4);
    assert_int_equal(mc_master_exist(m, K("k1")), MC_ERR_OBJECT_NOT_FOUND);
    mc_master_destroy(m);
}

/* One owner's reconciliation leaves another owner's replicas alone, also those the other has
 * not named again since its own mount; a copy confirmed through a task since the mount counts
 * as named. */
static void test_reconcile_per_owner(void **state)
{
    (void)state;
    mc_master_t *m = mk(true, false);
    const char *keys[4] = {"a0", "a1", "b2", "b3"};
    const int a[2] = {0, 1}, b[2] = {2, 3}, b_some[1] = {2}, a_some[1] = {0};
    uint64_t dropped;
    assert_int_equal(mc_master_mount_local_disk(m, CA, true, "127.0.0.1:4000"), MC_OK);
    reregister_keys(m, CA, keys, a, 2);
    assert_int_equal(mc_master_mount_local_disk(m, CB, true, "127.0.0.1:5000"), MC_OK);
    reregister_keys(m, CB, keys, b, 2);
    /* both mount again; only CB finishes its re-registration */
    assert_int_equal(mc_master_mount_local_disk(m, CB, true, "127.0.0.1:5000"), MC_OK);
    assert_int_equal(mc_master_mount_local_disk(m, CA, true, "127.0.0.1:4000"), MC_OK);
    reregister_keys(m, CB, keys, b_some, 1);
    assert_int_equal(mc_master_disk_reregistered(m, CB, &dropped), MC_OK);
    assert_int_equal(dropped, 1);
    assert_int_equal(mc_master_exist(m, K("b3")), MC_ERR_OBJECT_NOT_FOUND);
    assert_on_disk(m, "b2", 0x72);
    assert_int_equal(mc_master_exist(m, K("a0")), MC_OK);
    assert_int_equal(mc_master_exist(m, K("a1")), MC_OK);
    /* CA confirms an offload task (a3, also in memory), names a0 only, and ends */
    put(m, "a3", 4096, 0x99);
    mc_master_offload_tasks_t t = beat(m, 1);
    mc_master_offload_tasks_free(&t);
    assert_int_equal(mc_master_notify_offload_success(m, CA, K("a3"), 4096, 0x99, false), MC_OK);
    reregister_keys(m, CA, keys, a_some, 1);
    assert_int_equal(mc_master_disk_reregistered(m, CA, &dropped), MC_OK);
    assert_int_equal(dropped, 1); /* a1 */
    assert_int_equal(mc_master_exist(m, K("a1")), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_exist(m, K("a0")), MC_OK);
    assert_on_disk(m, "b2", 0x72);
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.disk_objects, 3); /* a0, a3 (CA), b2 (CB) */
    assert_int_equal(mt.disk_reconciled, 2);
    mc_master_destroy(m);
}

/* Across a restart: the replicas recovered from the WAL are served until the owner, mounted
 * again, ends its re-registration; those it did not name are dropped, and the drop is in the
 * WAL (the next start does not list them again). */
static void test_reconcile_after_restart(void **state)
{
    (void)state;
    char dir[] = "/tmp/mc_master_disk_rec_XXXXXX";
    assert_non_null(mkdtemp(dir));
    const char *keys[4] = {"t0", "t1", "t2", "t3"};
    const int all[4] = {0, 1, 2, 3}, some[2] = {0, 2};
    uint64_t dropped;
    mc_master_t *m = mkw(true, false, dir);
    assert_int_equal(mc_master_mount_local_disk(m, CB, true, "127.0.0.1:5000"), MC_OK);
    reregister_keys(m, CB, keys, all, 4);
    assert_int_equal(mc_master_wal_sync(m), MC_OK);
    mc_master_destroy(m);

    m = mkw(true, false, dir);
    for (int i = 0; i < 4; i++)
        assert_on_disk(m, keys[i], 0x70 + (uint64_t)i); /* recovered */
    /* not mounted again yet: the marker is refused and drops nothing */
    assert_int_equal(mc_master_disk_reregistered(m, CB, &dropped), MC_ERR_UNABLE_OFFLOADING);
    assert_on_disk(m, "t1", 0x71);
    assert_int_equal(mc_master_mount_local_disk(m, CB, true, "127.0.0.1:5000"), MC_OK);
    reregister_keys(m, CB, keys, some, 2);
    assert_int_equal(mc_master_disk_reregistered(m, CB, &dropped), MC_OK);
    assert_int_equal(dropped, 2);
    assert_int_equal(reconciled(m), 2);
    assert_int_equal(mc_master_exist(m, K("t1")), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_exist(m, K("t3")), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_wal_sync(m), MC_OK);
    mc_master_destroy(m);

    m = mkw(true, false, dir);
    assert_on_disk(m, "t0", 0x70);
    assert_on_disk(m, "t2", 0x72);
    assert_int_equal(mc_master_exist(m, K("t1")), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_exist(m, K("t3")), MC_ERR_OBJECT_NOT_FOUND);
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.disk_objects, 2);
    mc_master_destroy(m);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* offload_force_evict = false: the pass stops at the cap (held victims count) instead of
 * evicting victims without a copy; once the held ones are written they go, and the pass
 * queues the next ones ahead of their eviction. */
static void test_offload_on_evict_no_force(void **state)
{
    (void)state;
    g_queue_limit = 4; /* cap: 2 victims held per eviction pass */
    g_no_force = true;
    mc_master_t *m = mk(true, true);
    g_queue_limit = 0;
    g_no_force = false;
    assert_int_equal(mc_master_mount_local_disk(m, CA, true, "127.0.0.1:4000"), MC_OK);
    char key[16];
    for (int i = 0; i < 16; i++) { /* the segment full */
        snprintf(key, sizeof(key), "f%02d", i);
        put(m, key, 64 << 10, 100 + (uint64_t)i);
    }
    mc_master_replica_t r[8];
    uint32_t n;
    assert_int_equal(mc_master_put_start(m, CA, K("more"), 64 << 10, NULL, false, r, &n),
                     MC_ERR_NO_AVAILABLE_HANDLE);
    mc_master_cron(m); /* a second pass holds no more than the cap */
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.evicted_objects, 0);
    assert_int_equal(mt.offload_skipped, 0);
    assert_int_equal(mt.offload_queue_depth, 2);
    mc_master_offload_tasks_t t = beat(m, 2);
    for (uint32_t i = 0; i < t.n; i++)
        assert_int_equal(mc_master_notify_offload_success(m, CA, t.items[i].key, t.items[i].klen,
                                                          t.items[i].size, t.items[i].checksum,
                                                          false),
                         MC_OK);
    mc_master_offload_tasks_free(&t);
    assert_int_equal(mc_master_put_start(m, CA, K("more"), 64 << 10, NULL, false, r, &n), MC_OK);
    mc_master_metrics_now(m, &mt);
    assert_true(mt.evicted_objects >= 1);
    assert_int_equal(mt.offload_skipped, 0);
    /* the pass queued the next victims ahead of their eviction, up to the cap again */
    assert_int_equal(mt.offload_queue_depth, 2);
    mc_master_destroy(m);
}

/* A slow master: every clock reading 1 ms after the last, so an eviction pass (one reading at
 * its start) queues offloads stamped later than its own now. Queued a moment ago is not
 * overdue: with --offload_force_evict=false no victim leaves memory before its copy is
 * confirmed, in either pass. */
static void test_offload_on_evict_clock_moves(void **state)
{
    (void)state;
    g_no_force = true;
    mc_master_t *m = mk(true, true);
    g_no_force = false;
    assert_int_equal(mc_master_mount_local_disk(m, CA, true, "127.0.0.1:4000"), MC_OK);
    char key[16];
    for (int i = 0; i < 16; i++) {
        snprintf(key, sizeof(key), "g%02d", i);
        put(m, key, 64 << 10, 300 + (uint64_t)i);
    }
    g_ticking = true;
    mc_master_replica_t r[8];
    uint32_t n;
    mc_status_t st = mc_master_put_start(m, CA, K("more"), 64 << 10, NULL, false, r, &n);
    mc_master_cron(m);
    g_ticking = false;
    assert_int_equal(st, MC_ERR_NO_AVAILABLE_HANDLE); /* nothing confirmed yet: nothing freed */
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.evicted_objects, 0);
    assert_int_equal(mt.offload_skipped, 0);
    assert_true(mt.offload_queue_depth >= 1);
    mc_master_destroy(m);
}

/* offload_admission = reused: a victim never read from memory since its put leaves memory
 * without a disk copy (and is not counted as skipped); read ones are offloaded. */
static void test_offload_admission_reused(void **state)
{
    (void)state;
    g_admission = MC_MASTER_ADMIT_REUSED;
    mc_master_t *m = mk(true, true);
    g_admission = 0;
    assert_int_equal(mc_master_mount_local_disk(m, CA, true, "127.0.0.1:4000"), MC_OK);
    char key[16];
    mc_master_replica_t r[8];
    uint32_t n;
    for (int i = 0; i < 15; i++) { /* over the 90 % watermark; all but a03 read once */
        snprintf(key, sizeof(key), "a%02d", i);
        put(m, key, 64 << 10, 100 + (uint64_t)i);
        if (i != 3)
            assert_int_equal(mc_master_get_replicas(m, K(key), r, &n, NULL, NULL), MC_OK);
    }
    g_now += 10001; /* past the read leases */
    assert_int_equal(mc_master_ping(m, CA, &(bool){false}), MC_OK);
    mc_master_cron(m);
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_true(mt.evicted_objects >= 1);
    assert_int_equal(mt.offload_skipped, 0);
    assert_int_equal(mc_master_exist(m, K("a03")), MC_ERR_OBJECT_NOT_FOUND); /* not admitted */
    /* more puts: the read victims are queued for the disk, a03 never */
    for (int i = 15; i < 20; i++) {
        snprintf(key, sizeof(key), "a%02d", i);
        mc_master_replica_t w[8];
        if (mc_master_put_start(m, CA, K(key), 64 << 10, NULL, false, w, &n) == MC_OK)
            assert_int_equal(mc_master_put_end(m, CA, K(key), 1), MC_OK);
        mc_master_cron(m);
    }
    mc_master_offload_tasks_t t;
    assert_int_equal(mc_master_offload_heartbeat(m, CA, true, 0, &t), MC_OK);
    assert_true(t.n >= 1);
    for (uint32_t i = 0; i < t.n; i++) { /* only read ones: a00..a14 except a03 */
        assert_int_equal(t.items[i].klen, 3);
        int num = (t.items[i].key[1] - '0') * 10 + (t.items[i].key[2] - '0');
        assert_true(t.items[i].key[0] == 'a' && num < 15 && num != 3);
    }
    mc_master_offload_tasks_free(&t);
    mc_master_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused_without_enable_offload),
        cmocka_unit_test(test_eager_offload_and_disk_only_get),
        cmocka_unit_test(test_offload_on_evict),
        cmocka_unit_test(test_offload_on_evict_skipped),
        cmocka_unit_test(test_offload_admission_reused),
        cmocka_unit_test(test_offload_on_evict_no_force),
        cmocka_unit_test(test_offload_on_evict_clock_moves),
        cmocka_unit_test(test_reregister_and_expiry),
        cmocka_unit_test(test_promotion_on_hit),
        cmocka_unit_test(test_promotion_limits),
        cmocka_unit_test(test_remove_regex_all_disk_only),
        cmocka_unit_test(test_removal_while_owner_down),
        cmocka_unit_test(test_disk_state_survives_restart),
        cmocka_unit_test(test_reconcile_drops_unnamed),
        cmocka_unit_test(test_reconcile_per_owner),
        cmocka_unit_test(test_reconcile_after_restart),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
