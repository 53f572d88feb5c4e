/* Prefix index and event ingestion on hand-made cases: tiers and hosts, eviction, segment loss,
 * duplicates, sequence gaps (stale + resync), JSON event parsing, key hashing, and a randomised
 * comparison against a brute-force model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "conductor/index.h"
#include "conductor/u64map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t seq;

static mc_status_t ev(mc_conductor_index_t *idx, mc_conductor_event_kind_t kind, uint64_t hash,
                      const char *seg, const char *host, mc_conductor_tier_t tier)
{
    mc_conductor_event_t e = {++seq, kind, hash, 64, seg, host, tier};
    return mc_conductor_index_apply(idx, &e);
}

static void query3(mc_conductor_index_t *idx, const uint64_t *h, size_t n, uint32_t *hosts,
                   mc_conductor_prefix_t *out, mc_status_t expect)
{
    assert_int_equal(mc_conductor_index_query(idx, h, n, hosts, 3, 0, out), expect);
}

static void test_index_tiers_and_hosts(void **state)
{
    mc_conductor_index_t *idx;
    seq = 0;
    assert_int_equal(mc_conductor_index_create(NULL, &idx), MC_OK);
    const uint64_t A = 0, B = 11, C = 22, D = 33; /* 0 is a valid hash (the trace uses it) */
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_COMMITTED, A, "h0/gpu", "h0", MC_CONDUCTOR_TIER_LOCAL), MC_OK);
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_COMMITTED, B, "h0/gpu", "h0", MC_CONDUCTOR_TIER_LOCAL), MC_OK);
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_COMMITTED, C, "h0/gpu", "h0", MC_CONDUCTOR_TIER_LOCAL), MC_OK);
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_COMMITTED, A, "h1/seg", "h1", MC_CONDUCTOR_TIER_POOL), MC_OK);
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_COMMITTED, B, "h1/seg", "h1", MC_CONDUCTOR_TIER_POOL), MC_OK);
    /* idempotent re-commit */
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_COMMITTED, B, "h1/seg", "h1", MC_CONDUCTOR_TIER_POOL), MC_OK);
    uint32_t hosts[3];
    assert_int_equal(mc_conductor_index_host_id(idx, "h0", &hosts[0]), MC_OK);
    assert_int_equal(mc_conductor_index_host_id(idx, "h1", &hosts[1]), MC_OK);
    assert_int_equal(mc_conductor_index_host_id(idx, "h2", &hosts[2]), MC_OK);
    uint64_t q[] = {A, B, C, D};
    mc_conductor_prefix_t out[3];
    query3(idx, q, 4, hosts, out, MC_OK);
    assert_int_equal(out[0].local, 3); /* own GPU cache */
    assert_int_equal(out[0].pool, 3);
    assert_int_equal(out[1].local, 2); /* C is only in h0's private cache: not fetchable */
    assert_int_equal(out[1].pool, 2);
    assert_int_equal(out[1].any, 2);
    assert_int_equal(out[2].local, 0);
    assert_int_equal(out[2].pool, 2);
    /* an SSD copy of C extends "any" for the others, not "pool" */
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_COMMITTED, C, "s/ssd", "s", MC_CONDUCTOR_TIER_SSD), MC_OK);
    query3(idx, q, 4, hosts, out, MC_OK);
    assert_int_equal(out[2].pool, 2);
    assert_int_equal(out[2].any, 3);
    assert_int_equal(out[1].any, 3);
    /* hole in the middle ends the prefix even though later blocks are held */
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_EVICTED, B, "h1/seg", NULL, 0), MC_OK);
    query3(idx, q, 4, hosts, out, MC_OK);
    assert_int_equal(out[1].local, 1);
    assert_int_equal(out[1].any, 1);
    assert_int_equal(out[2].pool, 1);
    assert_int_equal(out[0].local, 3);
    assert_true(mc_conductor_index_holds(idx, C, "s/ssd"));
    assert_false(mc_conductor_index_holds(idx, B, "h1/seg"));
    /* evicting what is not there is counted, not an error */
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_REMOVED, 999, "h1/seg", NULL, 0), MC_OK);
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_REMOVED, A, "nope", NULL, 0), MC_OK);
    /* segment lost drops everything there */
    mc_conductor_event_t lost = {++seq, MC_CONDUCTOR_EV_SEGMENT_LOST, 0, 0, "h0/gpu", NULL, 0};
    assert_int_equal(mc_conductor_index_apply(idx, &lost), MC_OK);
    query3(idx, q, 4, hosts, out, MC_OK);
    assert_int_equal(out[0].local, 0);
    assert_int_equal(out[0].pool, 1); /* A still in h1's pool segment */
    mc_conductor_index_stats_t st;
    mc_conductor_index_get_stats(idx, &st);
    assert_int_equal(st.blocks, 2); /* A (h1), C (ssd) */
    assert_int_equal(st.holders, 2);
    assert_int_equal(st.events_unknown, 2);
    assert_int_equal(st.gaps, 0);
    assert_int_equal(st.next_seq, seq + 1);
    /* malformed event: refused but the sequence advances (no forced resync) */
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_COMMITTED, D, "", "h9", MC_CONDUCTOR_TIER_POOL),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_COMMITTED, D, "x", NULL, MC_CONDUCTOR_TIER_POOL),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_COMMITTED, D, "h2/seg", "h2", MC_CONDUCTOR_TIER_POOL), MC_OK);
    mc_conductor_index_destroy(idx);
}

static void test_index_gap_stale_resync(void **state)
{
    mc_conductor_index_t *idx;
    mc_conductor_index_config_t cfg;
    mc_conductor_index_config_default(&cfg);
    cfg.first_seq = 100;
    assert_int_equal(mc_conductor_index_create(&cfg, &idx), MC_OK);
    seq = 99;
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_COMMITTED, 1, "a", "ha", MC_CONDUCTOR_TIER_POOL), MC_OK);
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_COMMITTED, 2, "a", "ha", MC_CONDUCTOR_TIER_POOL), MC_OK);
    /* duplicate (replayed) event: ignored */
    mc_conductor_event_t dup = {100, MC_CONDUCTOR_EV_EVICTED, 1, 0, "a", NULL, 0};
    assert_int_equal(mc_conductor_index_apply(idx, &dup), MC_OK);
    assert_true(mc_conductor_index_holds(idx, 1, "a"));
    uint64_t q[] = {1, 2};
    uint32_t hosts[3] = {0, 1, 2};
    mc_conductor_prefix_t out[3];
    query3(idx, q, 2, hosts, out, MC_OK);
    assert_int_equal(out[1].pool, 2);
    /* seq 102 (the eviction of block 1) is lost; 103 arrives: a gap */
    seq++;
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_COMMITTED, 3, "a", "ha", MC_CONDUCTOR_TIER_POOL),
                     MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS);
    mc_conductor_index_stats_t st;
    mc_conductor_index_get_stats(idx, &st);
    assert_int_equal(st.state, MC_CONDUCTOR_INDEX_STALE);
    assert_int_equal(st.gaps, 1);
    assert_int_equal(st.gap_expected, 102);
    assert_int_equal(st.gap_got, 103);
    /* never silently wrong: a plain query refuses and reports no cache */
    out[1].pool = 77;
    query3(idx, q, 2, hosts, out, MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS);
    assert_int_equal(out[1].pool, 0);
    /* a caller that accepts hints may still look, flagged */
    assert_int_equal(mc_conductor_index_query(idx, q, 2, hosts, 3, MC_CONDUCTOR_QUERY_ALLOW_STALE, out), MC_OK);
    assert_int_equal(out[1].pool, 2); /* the stale answer: block 1 was really evicted */
    /* further events are refused until resync */
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_COMMITTED, 4, "a", "ha", MC_CONDUCTOR_TIER_POOL),
                     MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS);
    assert_int_equal(mc_conductor_index_snapshot_add(idx, 2, "a", "ha", MC_CONDUCTOR_TIER_POOL),
                     MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS);
    /* resync: snapshot replaces the content */
    assert_int_equal(mc_conductor_index_resync_begin(idx), MC_OK);
    query3(idx, q, 2, hosts, out, MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS);
    assert_int_equal(mc_conductor_index_snapshot_add(idx, 2, "a", "ha", MC_CONDUCTOR_TIER_POOL), MC_OK);
    assert_int_equal(mc_conductor_index_snapshot_add(idx, 3, "a", "ha", MC_CONDUCTOR_TIER_POOL), MC_OK);
    assert_int_equal(mc_conductor_index_resync_end(idx, 105), MC_OK);
    query3(idx, q, 2, hosts, out, MC_OK);
    assert_int_equal(out[1].pool, 0); /* block 1 is gone, so no prefix at all */
    uint64_t q2[] = {2, 3};
    query3(idx, q2, 2, hosts, out, MC_OK);
    assert_int_equal(out[0].pool, 2);
    seq = 104;
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_COMMITTED, 1, "a", "ha", MC_CONDUCTOR_TIER_POOL), MC_OK);
    mc_conductor_index_get_stats(idx, &st);
    assert_int_equal(st.state, MC_CONDUCTOR_INDEX_OK);
    assert_int_equal(st.resyncs, 1);
    assert_int_equal(st.next_seq, 106);
    assert_int_equal(st.blocks, 3);
    mc_conductor_index_destroy(idx);
}

/* The master stands in for another tenant's event with kind 0 and only its seq: the index
 * advances past it, refusing and applying nothing. */
static void test_index_other_tenant_events(void **state)
{
    (void)state;
    mc_conductor_index_t *idx;
    mc_conductor_index_config_t cfg;
    mc_conductor_index_config_default(&cfg);
    cfg.first_seq = 1;
    assert_int_equal(mc_conductor_index_create(&cfg, &idx), MC_OK);
    seq = 0;
    assert_int_equal(ev(idx, (mc_conductor_event_kind_t)0, 0, "", "", 0), MC_OK);
    assert_int_equal(ev(idx, (mc_conductor_event_kind_t)0, 0, "", "", 0), MC_OK);
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_COMMITTED, 7, "a", "ha", MC_CONDUCTOR_TIER_POOL), MC_OK);
    mc_conductor_index_stats_t st;
    mc_conductor_index_get_stats(idx, &st);
    assert_int_equal(st.state, MC_CONDUCTOR_INDEX_OK);
    assert_int_equal(st.next_seq, 4);
    assert_int_equal(st.events_applied, 1);
    assert_int_equal(st.events_refused, 0);
    assert_true(mc_conductor_index_holds(idx, 7, "a"));
    mc_conductor_index_destroy(idx);
}

static void test_index_caps(void **state)
{
    mc_conductor_index_t *idx;
    mc_conductor_index_config_t cfg;
    mc_conductor_index_config_default(&cfg);
    cfg.max_blocks = 2;
    cfg.max_segments = 1;
    assert_int_equal(mc_conductor_index_create(&cfg, &idx), MC_OK);
    seq = 0;
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_COMMITTED, 1, "a", "h", MC_CONDUCTOR_TIER_POOL), MC_OK);
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_COMMITTED, 2, "b", "h", MC_CONDUCTOR_TIER_POOL), MC_ERR_TOO_LARGE);
    mc_conductor_index_stats_t st;
    mc_conductor_index_get_stats(idx, &st);
    assert_int_equal(st.state, MC_CONDUCTOR_INDEX_STALE); /* can no longer be complete */
    mc_conductor_index_destroy(idx);
    char name[300];
    memset(name, 'x', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    assert_int_equal(mc_conductor_index_create(NULL, &idx), MC_OK);
    seq = 0;
    assert_int_equal(ev(idx, MC_CONDUCTOR_EV_COMMITTED, 1, name, "h", MC_CONDUCTOR_TIER_POOL), MC_ERR_INVALID_PARAMS);
    uint32_t id;
    assert_int_equal(mc_conductor_index_host_id(idx, name, &id), MC_ERR_INVALID_PARAMS);
    mc_conductor_index_destroy(idx);
}

static void test_event_json_and_keys(void **state)
{
    mc_conductor_event_t e;
    char seg[MC_CONDUCTOR_NAME_MAX + 1], host[MC_CONDUCTOR_NAME_MAX + 1];
#define P(s) mc_conductor_event_parse_json(s, strlen(s), &e, seg, host)
    assert_int_equal(P("{\"seq\":7,\"kind\":\"committed\",\"hash\":42,\"size\":65536,"
                       "\"segment\":\"n1/s0\",\"host\":\"n1\",\"tier\":\"ssd\"}"), MC_OK);
    assert_int_equal(e.seq, 7);
    assert_int_equal(e.kind, MC_CONDUCTOR_EV_COMMITTED);
    assert_int_equal(e.block_hash, 42);
    assert_int_equal(e.size, 65536);
    assert_string_equal(e.segment, "n1/s0");
    assert_string_equal(e.host, "n1");
    assert_int_equal(e.tier, MC_CONDUCTOR_TIER_SSD);
    assert_int_equal(P("{\"seq\":8,\"kind\":\"evicted\",\"hash\":\"0xffffffffffffffff\",\"segment\":\"s\"}"), MC_OK);
    assert_true(e.block_hash == UINT64_MAX);
    assert_null(e.host);
    assert_int_equal(P("{\"seq\":9,\"kind\":\"removed\",\"key\":\"tenant/llama/rank3/00000000000000ff\",\"segment\":\"s\"}"), MC_OK);
    assert_int_equal(e.block_hash, 255);
    assert_int_equal(P("{\"seq\":9,\"kind\":\"segment_lost\",\"segment\":\"s\"}"), MC_OK);
    assert_int_equal(e.kind, MC_CONDUCTOR_EV_SEGMENT_LOST);
    /* hostile / malformed */
    assert_int_equal(P("{\"seq\":-1,\"kind\":\"committed\",\"hash\":1,\"segment\":\"s\"}"), MC_ERR_PROTOCOL);
    assert_int_equal(P("{\"seq\":1,\"kind\":\"exploded\",\"hash\":1,\"segment\":\"s\"}"), MC_ERR_PROTOCOL);
    assert_int_equal(P("{\"seq\":1,\"kind\":\"committed\",\"segment\":\"s\"}"), MC_ERR_PROTOCOL);
    assert_int_equal(P("{\"seq\":1,\"kind\":\"committed\",\"hash\":1}"), MC_ERR_PROTOCOL);
    assert_int_equal(P("{\"seq\":1,\"kind\":\"committed\",\"hash\":1,\"segment\":7}"), MC_ERR_PROTOCOL);
    assert_int_equal(P("{\"seq\":1,\"kind\":\"committed\",\"hash\":1,\"segment\":\"s\",\"tier\":\"tape\"}"), MC_ERR_PROTOCOL);
    assert_int_equal(P("{\"seq\":1,\"seq\":2,\"kind\":\"committed\",\"hash\":1,\"segment\":\"s\"}"), MC_ERR_PROTOCOL);
    assert_int_equal(P("{\"seq\":1,\"kind\":\"committed\",\"hash\":\"12zz\",\"segment\":\"s\"}"), MC_ERR_PROTOCOL);
    assert_int_equal(P("[1,2,3]"), MC_ERR_PROTOCOL);
    assert_int_equal(P("{\"seq\":1,"), MC_ERR_PROTOCOL);
    assert_int_equal(P(""), MC_ERR_PROTOCOL);
    char big[400];
    snprintf(big, sizeof(big), "{\"seq\":1,\"kind\":\"committed\",\"hash\":1,\"segment\":\"%0300d\"}", 0);
    assert_int_equal(P(big), MC_ERR_TOO_LARGE);
#undef P
    assert_int_equal(mc_conductor_key_hash("a/b/0x10"), 16);
    assert_int_equal(mc_conductor_key_hash("a/b/123"), 123);
    assert_int_equal(mc_conductor_key_hash("00000000000000aa"), 170);
    assert_true(mc_conductor_key_hash("a/b/model-x") == mc_conductor_key_hash("a/b/model-x"));
    assert_true(mc_conductor_key_hash("a/b/model-x") != mc_conductor_key_hash("a/b/model-y"));
}

/* Randomised: index answers == brute force over a small model, across commits, evictions and
 * segment loss. */
static void test_index_random_vs_model(void **state)
{
    enum { NSEG = 6, NBLK = 40, NH = 3 };
    static const char *segs[NSEG] = {"h0/l", "h0/p", "h1/l", "h1/p", "h2/p", "x/ssd"};
    static const char *shost[NSEG] = {"h0", "h0", "h1", "h1", "h2", "x"};
    static const mc_conductor_tier_t stier[NSEG] = {0, 1, 0, 1, 1, 2};
    uint8_t model[NBLK][NSEG];
    memset(model, 0, sizeof(model));
    mc_conductor_index_t *idx;
    assert_int_equal(mc_conductor_index_create(NULL, &idx), MC_OK);
    seq = 0;
    srand(12345);
    uint32_t hosts[NH];
    assert_int_equal(mc_conductor_index_host_id(idx, "h0", &hosts[0]), MC_OK);
    assert_int_equal(mc_conductor_index_host_id(idx, "h1", &hosts[1]), MC_OK);
    assert_int_equal(mc_conductor_index_host_id(idx, "h2", &hosts[2]), MC_OK);
    for (int step = 0; step < 20000; step++) {
        int r = rand() % 100, s = rand() % NSEG, b = rand() % NBLK;
        if (r < 60) {
            assert_int_equal(ev(idx, MC_CONDUCTOR_EV_COMMITTED, (uint64_t)b * 7919, segs[s], shost[s], stier[s]), MC_OK);
            model[b][s] = 1;
        } else if (r < 98) {
            assert_int_equal(ev(idx, MC_CONDUCTOR_EV_EVICTED, (uint64_t)b * 7919, segs[s], NULL, 0), MC_OK);
            model[b][s] = 0;
        } else {
            mc_conductor_event_t e = {++seq, MC_CONDUCTOR_EV_SEGMENT_LOST, 0, 0, segs[s], NULL, 0};
            assert_int_equal(mc_conductor_index_apply(idx, &e), MC_OK);
            for (int k = 0; k < NBLK; k++)
                model[k][s] = 0;
        }
        if (step % 50)
            continue;
        uint64_t q[8];
        int order[8];
        for (int i = 0; i < 8; i++) {
            order[i] = rand() % NBLK;
            q[i] = (uint64_t)order[i] * 7919;
        }
        mc_conductor_prefix_t out[NH];
        assert_int_equal(mc_conductor_index_query(idx, q, 8, hosts, NH, 0, out), MC_OK);
        for (int c = 0; c < NH; c++) {
            uint32_t el = 0, ep = 0, ea = 0;
            int al = 1, ap = 1, aa = 1;
            for (int i = 0; i < 8; i++) {
                int on = 0, pool = 0, ssd = 0;
                for (int s2 = 0; s2 < NSEG; s2++) {
                    if (!model[order[i]][s2])
                        continue;
                    if (s2 / 2 == c && s2 < 5)
                        on = 1;
                    if (stier[s2] == 1)
                        pool = 1;
                    if (stier[s2] == 2)
                        ssd = 1;
                }
                al = al && on;
                ap = ap && (on || pool);
                aa = aa && (on || pool || ssd);
                el += al;
                ep += ap;
                ea += aa;
            }
            assert_int_equal(out[c].local, el);
            assert_int_equal(out[c].pool, ep);
            assert_int_equal(out[c].any, ea);
        }
    }
    mc_conductor_index_destroy(idx);
}

static void test_u64map(void **state)
{
    mc_conductor_u64map_t m;
    assert_int_equal(mc_conductor_u64map_init(&m, 4), MC_OK);
    for (uint64_t i = 0; i < 5000; i++)
        assert_int_equal(mc_conductor_u64map_put(&m, i * 0x9e3779b97f4a7c15ULL, i, NULL), MC_OK);
    for (uint64_t i = 0; i < 5000; i += 2)
        assert_int_equal(mc_conductor_u64map_remove(&m, i * 0x9e3779b97f4a7c15ULL, NULL), 1);
    for (uint64_t i = 0; i < 5000; i++) {
        uint64_t *v = mc_conductor_u64map_get(&m, i * 0x9e3779b97f4a7c15ULL);
        if (i % 2)
            assert_true(v && *v == i);
        else
            assert_null(v);
    }
    assert_int_equal(m.count, 2500);
    mc_conductor_u64map_fini(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_u64map),
        cmocka_unit_test(test_index_tiers_and_hosts),
        cmocka_unit_test(test_index_gap_stale_resync),
        cmocka_unit_test(test_index_other_tenant_events),
        cmocka_unit_test(test_index_caps),
        cmocka_unit_test(test_event_json_and_keys),
        cmocka_unit_test(test_index_random_vs_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
