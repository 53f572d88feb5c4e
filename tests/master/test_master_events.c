/* Master object event log (ring) and the paged object listing, driven directly (no network)
 * with a fake clock: ordering and seq, every kind (commit with replicas, evict, remove, regex,
 * remove-all, upsert replacement, segment loss once per segment), wrap -> gap, epoch check,
 * disabled log, listing pages + consistency with the events after the listing's seq. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "policy_env.h"
#include "master/master.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_now = 1000000;
static uint64_t fake_clock(void *ctx)
{
    (void)ctx;
    return g_now;
}

static const uint8_t CA[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
static const uint8_t CB[16] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2};

#define K(s) s, strlen(s)

static mc_master_t *mk(uint32_t ring)
{
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    assert_int_equal(cfg.event_buffer_size, 65536);
    cfg.event_buffer_size = ring;
    cfg.clock = fake_clock;
    mc_master_t *m;
    test_policy_from_env(&cfg);
    assert_int_equal(mc_master_create(&cfg, &m), MC_OK);
    mc_master_set_seed(m, 7);
    return m;
}

static void mount(mc_master_t *m, const uint8_t *cid, const char *name, uint64_t base,
                  uint64_t size, const char *label)
{
    mc_master_segment_info_t si = {.name = name, .base = base, .size = size, .host_label = label,
                                   .te_endpoint = name};
    memset(si.uuid, name[strlen(name) - 1], 16);
    assert_int_equal(mc_master_mount(m, cid, &si, false), MC_OK);
}

static mc_status_t put_n(mc_master_t *m, const uint8_t *cid, const char *key, uint64_t size,
                         uint32_t replicas, bool upsert)
{
    mc_master_replica_t r[8];
    uint32_t n;
    mc_master_put_opts_t o = {.replica_num = replicas};
    mc_status_t st = mc_master_put_start(m, cid, key, strlen(key), size, &o, upsert, r, &n);
    if (st != MC_OK)
        return st;
    return mc_master_put_end(m, cid, key, strlen(key), 1);
}

static mc_master_event_t g_ev[4096];

/* Reads everything from `from`; returns the count, asserts no gap and consecutive seqs. */
static size_t read_all(mc_master_t *m, uint64_t from)
{
    size_t n = 0;
    mc_master_events_info_t info;
    assert_int_equal(mc_master_events_read(m, from, 0, 4096, g_ev, &n, &info), MC_OK);
    assert_false(info.gap);
    for (size_t i = 0; i < n; i++)
        assert_true(g_ev[i].seq == from + i);
    assert_true(info.next_seq == from + n);
    return n;
}

static void expect(size_t i, int kind, const char *key, const char *seg, const char *host)
{
    assert_int_equal(g_ev[i].kind, kind);
    assert_string_equal(g_ev[i].key, key);
    assert_int_equal(g_ev[i].klen, strlen(key));
    assert_string_equal(g_ev[i].segment, seg);
    assert_string_equal(g_ev[i].host, host);
}

static void test_kinds_and_order(void **state)
{
    (void)state;
    mc_master_t *m = mk(1024);
    mount(m, CA, "segA", 0x100000, 1 << 20, "hA");
    mount(m, CB, "segB", 0x900000, 1 << 20, "hB");
    assert_int_equal(read_all(m, 1), 0);
    /* in-flight puts and revokes publish nothing */
    mc_master_replica_t r[8];
    uint32_t n;
    assert_int_equal(mc_master_put_start(m, CA, K("w"), 100, NULL, false, r, &n), MC_OK);
    assert_int_equal(mc_master_put_revoke(m, CA, K("w")), MC_OK);
    assert_int_equal(read_all(m, 1), 0);
    /* commit with 2 replicas: one event per replica, consecutive */
    assert_int_equal(put_n(m, CA, "k1", 1000, 2, false), MC_OK);
    assert_int_equal(read_all(m, 1), 2);
    assert_int_equal(g_ev[0].kind, MC_MASTER_EV_COMMITTED);
    assert_int_equal(g_ev[1].kind, MC_MASTER_EV_COMMITTED);
    assert_int_equal(g_ev[0].size, 1000);
    assert_string_not_equal(g_ev[0].segment, g_ev[1].segment);
    assert_string_equal(g_ev[0].host, !strcmp(g_ev[0].segment, "segA") ? "hA" : "hB");
    /* remove: one per replica */
    assert_int_equal(mc_master_remove(m, K("k1"), false, NULL), MC_OK);
    assert_int_equal(read_all(m, 3), 2);
    assert_int_equal(g_ev[0].kind, MC_MASTER_EV_REMOVED);
    assert_string_equal(g_ev[0].key, "k1");
    /* a refused remove publishes nothing */
    assert_int_equal(put_n(m, CA, "k2", 10, 1, false), MC_OK);            /* seq 5 */
    assert_int_equal(mc_master_get_replicas(m, K("k2"), r, &n, NULL, NULL), MC_OK); /* lease */
    assert_int_equal(mc_master_remove(m, K("k2"), false, NULL), MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(read_all(m, 5), 1);
    const char *seg2 = r[0].segment_name;
    expect(0, MC_MASTER_EV_COMMITTED, "k2", seg2, !strcmp(seg2, "segA") ? "hA" : "hB");
    /* upsert of a committed object: removed (old) then committed (new) */
    g_now += 20000; /* lease over */
    assert_int_equal(put_n(m, CA, "k2", 20, 1, true), MC_OK);
    assert_int_equal(read_all(m, 6), 2);
    assert_int_equal(g_ev[0].kind, MC_MASTER_EV_REMOVED);
    assert_int_equal(g_ev[0].size, 10);
    assert_int_equal(g_ev[1].kind, MC_MASTER_EV_COMMITTED);
    assert_int_equal(g_ev[1].size, 20);
    /* regex and remove-all */
    assert_int_equal(put_n(m, CA, "x/1", 10, 1, false), MC_OK); /* 8 */
    assert_int_equal(put_n(m, CA, "x/2", 10, 1, false), MC_OK); /* 9 */
    uint64_t cnt;
    assert_int_equal(mc_master_remove_regex(m, "^x/", false, &cnt, NULL), MC_OK);
    assert_int_equal(cnt, 2);
    assert_int_equal(read_all(m, 10), 2);
    assert_int_equal(g_ev[0].kind, MC_MASTER_EV_REMOVED);
    assert_int_equal(g_ev[1].kind, MC_MASTER_EV_REMOVED);
    assert_int_equal(mc_master_remove_all(m, false, &cnt, NULL), MC_OK);
    assert_int_equal(cnt, 1);
    assert_int_equal(read_all(m, 12), 1);
    expect(0, MC_MASTER_EV_REMOVED, "k2", g_ev[0].segment, g_ev[0].host);
    /* segment loss: ONE event per segment, whatever its object count */
    for (int i = 0; i < 5; i++) {
        char key[16];
        snprintf(key, sizeof(key), "s%d", i);
        assert_int_equal(put_n(m, CA, key, 10, 2, false), MC_OK);
    }
    assert_int_equal(read_all(m, 13), 10);
    assert_int_equal(mc_master_unmount(m, CB, "segB", false), MC_OK);
    assert_int_equal(read_all(m, 23), 1);
    expect(0, MC_MASTER_EV_SEGMENT_LOST, "", "segB", "hB");
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.events, 23);
    mc_master_destroy(m);
}

static void test_eviction_events(void **state)
{
    (void)state;
    mc_master_t *m = mk(1024);
    mount(m, CA, "segA", 0, 1 << 20, "hA");
    char key[32];
    for (int i = 0; i < 16; i++) {
        snprintf(key, sizeof(key), "obj%d", i);
        assert_int_equal(put_n(m, CA, key, 64 << 10, 1, false), MC_OK);
        g_now += 1;
    }
    assert_int_equal(put_n(m, CA, "new", 64 << 10, 1, false), MC_OK); /* evicts obj0.. */
    size_t n = read_all(m, 17);
    assert_true(n >= 2);
    assert_int_equal(g_ev[0].kind, MC_MASTER_EV_EVICTED);
    assert_string_equal(g_ev[0].key, "obj0"); /* LRU order */
    assert_int_equal(g_ev[n - 1].kind, MC_MASTER_EV_COMMITTED);
    assert_string_equal(g_ev[n - 1].key, "new");
    for (size_t i = 0; i + 1 < n; i++)
        assert_int_equal(g_ev[i].kind, MC_MASTER_EV_EVICTED);
    mc_master_destroy(m);
}

static void test_wrap_gap_epoch(void **state)
{
    (void)state;
    mc_master_t *m = mk(8);
    mount(m, CA, "segA", 0, 1 << 20, "hA");
    char key[32];
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "k%02d", i);
        assert_int_equal(put_n(m, CA, key, 10, 1, false), MC_OK);
    }
    mc_master_events_info_t info;
    size_t n = 99;
    /* 20 events, 8 kept: 13..20 */
    assert_int_equal(mc_master_events_read(m, 1, 0, 100, g_ev, &n, &info), MC_OK);
    assert_true(info.gap);
    assert_int_equal(n, 0);
    assert_int_equal(info.first_seq, 13);
    assert_int_equal(info.next_seq, 21);
    assert_int_equal(mc_master_events_read(m, 12, 0, 100, g_ev, &n, &info), MC_OK);
    assert_true(info.gap);
    assert_int_equal(mc_master_events_read(m, 13, info.epoch, 100, g_ev, &n, &info), MC_OK);
    assert_false(info.gap);
    assert_int_equal(n, 8);
    assert_string_equal(g_ev[0].key, "k12");
    assert_string_equal(g_ev[7].key, "k19");
    /* max respected, reading at the head is empty, not a gap; the future is a gap */
    assert_int_equal(mc_master_events_read(m, 15, 0, 3, g_ev, &n, &info), MC_OK);
    assert_int_equal(n, 3);
    assert_int_equal(g_ev[2].seq, 17);
    assert_int_equal(mc_master_events_read(m, 21, 0, 3, g_ev, &n, &info), MC_OK);
    assert_false(info.gap);
    assert_int_equal(n, 0);
    assert_false(mc_master_events_pending(m, 21, 0));
    assert_true(mc_master_events_pending(m, 20, 0));
    assert_int_equal(mc_master_events_read(m, 22, 0, 3, g_ev, &n, &info), MC_OK);
    assert_true(info.gap);
    /* another epoch (a restarted master) is a gap even at a valid seq */
    uint64_t epoch = info.epoch;
    assert_int_equal(mc_master_events_read(m, 15, epoch + 1, 3, g_ev, &n, &info), MC_OK);
    assert_true(info.gap);
    assert_int_equal(n, 0);
    assert_true(mc_master_events_pending(m, 21, epoch + 1));
    mc_master_destroy(m);
    /* a new master starts again at seq 1 in a new epoch */
    g_now += 5;
    m = mk(8);
    mount(m, CA, "segA", 0, 1 << 20, "hA");
    assert_int_equal(put_n(m, CA, "z", 10, 1, false), MC_OK);
    assert_int_equal(mc_master_events_read(m, 1, 0, 3, g_ev, &n, &info), MC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(g_ev[0].seq, 1);
    mc_master_destroy(m);
}

static void test_disabled(void **state)
{
    (void)state;
    mc_master_t *m = mk(0);
    mount(m, CA, "segA", 0, 1 << 20, "hA");
    assert_int_equal(put_n(m, CA, "k", 10, 1, false), MC_OK);
    mc_master_events_info_t info;
    size_t n;
    assert_int_equal(mc_master_events_read(m, 1, 0, 3, g_ev, &n, &info), MC_ERR_NOT_SUPPORTED);
    assert_int_equal(n, 0);
    mc_master_destroy(m);
}

/* ---- listing */

typedef struct listed {
    char key[64];
    char seg[2][32];
    uint32_t n;
} listed_t;
static listed_t g_list[4096];
static size_t g_nlist;

static mc_status_t on_obj(void *ctx, const char *key, size_t klen, uint64_t size,
                          const char *const *segs, const char *const *hosts, uint32_t n)
{
    (void)ctx;
    (void)size;
    (void)hosts;
    listed_t *l = &g_list[g_nlist++];
    snprintf(l->key, sizeof(l->key), "%.*s", (int)klen, key);
    l->n = n;
    for (uint32_t i = 0; i < n && i < 2; i++)
        snprintf(l->seg[i], sizeof(l->seg[i]), "%s", segs[i]);
    return MC_OK;
}

static bool listed(const char *key)
{
    for (size_t i = 0; i < g_nlist; i++)
        if (!strcmp(g_list[i].key, key))
            return true;
    return false;
}

static void test_list_objects(void **state)
{
    (void)state;
    mc_master_t *m = mk(4096);
    mount(m, CA, "segA", 0, 8 << 20, "hA");
    mount(m, CB, "segB", 0x10000000, 8 << 20, "hB");
    char key[32];
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "obj%03d", i);
        assert_int_equal(put_n(m, CA, key, 100, i % 2 ? 2 : 1, false), MC_OK);
    }
    mc_master_replica_t r[8];
    uint32_t n;
    assert_int_equal(mc_master_put_start(m, CA, K("writing"), 100, NULL, false, r, &n), MC_OK);
    /* page through with small pages while removing and adding objects between pages */
    g_nlist = 0;
    uint64_t cursor = 0, next, seq, epoch, seq0 = 0;
    bool done = false;
    int pages = 0;
    while (!done) {
        assert_int_equal(mc_master_list_objects(m, cursor, 16, on_obj, NULL, &next, &done, &seq,
                                                &epoch),
                         MC_OK);
        if (pages == 0)
            seq0 = seq;
        if (pages == 2) {
            assert_int_equal(mc_master_remove(m, K("obj000"), false, NULL), MC_OK);
            assert_int_equal(mc_master_remove(m, K("obj299"), false, NULL), MC_OK);
            assert_int_equal(put_n(m, CA, "late", 100, 1, false), MC_OK);
        }
        cursor = next;
        pages++;
        assert_true(pages < 1000);
    }
    assert_true(pages > 5);
    assert_int_equal(seq0, 451); /* 150 one-replica + 150 two-replica commits */
    assert_false(listed("writing"));
    /* every object that existed throughout is listed, with all its replicas */
    for (int i = 1; i < 299; i++) {
        snprintf(key, sizeof(key), "obj%03d", i);
        assert_true(listed(key));
    }
    for (size_t i = 0; i < g_nlist; i++)
        if (!strncmp(g_list[i].key, "obj", 3))
            assert_int_equal(g_list[i].n, atoi(g_list[i].key + 3) % 2 ? 2 : 1);
    /* objects changed during the listing are covered by the events from seq0 on */
    size_t ne = read_all(m, seq0);
    assert_int_equal(ne, 2 + 1 + 1); /* obj000 removed (1 replica), obj299 (2), late committed */
    /* segment B lost: listing no longer shows its replicas */
    assert_int_equal(mc_master_unmount(m, CB, "segB", false), MC_OK);
    g_nlist = 0;
    cursor = 0;
    done = false;
    while (!done) {
        assert_int_equal(mc_master_list_objects(m, cursor, 1000, on_obj, NULL, &next, &done, &seq,
                                                &epoch),
                         MC_OK);
        cursor = next;
    }
    for (size_t i = 0; i < g_nlist; i++) {
        assert_int_equal(g_list[i].n, 1);
        assert_string_equal(g_list[i].seg[0], "segA");
    }
    mc_master_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kinds_and_order),
        cmocka_unit_test(test_eviction_events),
        cmocka_unit_test(test_wrap_gap_epoch),
        cmocka_unit_test(test_disabled),
        cmocka_unit_test(test_list_objects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
