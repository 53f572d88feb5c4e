/* The compact form of BatchGetReplicaList answers (src/rpc/replica_lists.h) at both ends:
 *   - the in-process master answers a request with compact_replicas in the compact form, and
 *     the results rebuilt from it equal, field by field, the usual answer it gives a request
 *     without the field (an older client);
 *   - mc_master_client asks for it when given an arena and hands back rebuilt results; without
 *     an allocator it asks for the usual answer;
 *   - against a master that ignores the field (a fake answering the usual form, as a master
 *     that predates it does) the client hands back that usual answer;
 *   - the master counts the failed keys of both forms on /metrics;
 *   - an inconsistent compact answer fails the call with PROTOCOL_ERROR, and every rule of
 *     mc_rpc_replicas_expand refuses its broken input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "client/master_client.h"
#include "common/alloc.h"
#include "common/http_client.h"
#include "../rpc/master_calls.h"
#include "../rpc/master_fixture.h"
#include "rpc/replica_lists.h"
#include "rpc/rpc_server.h"
#include "rpc/wire_key.h"

#include <stdatomic.h>

#define NKEYS 40
#define MISSING 17 /* this key is never put */

static void key_name(char *out, size_t n, int i) { snprintf(out, n, "compact-key-%03d", i); }

/* Two segments, so that the answer names more than one: the fixture's "seg0" and "seg1". */
static void mount_two(mc_rpc_client_t *c)
{
    mount_seg_labelled(c, "host0");
    for (int s = 1; s < 2; s++) {
        char name[16], ep[32];
        snprintf(name, sizeof(name), "seg%d", s);
        snprintf(ep, sizeof(ep), "127.0.0.1:%d", 1234 + s);
        McRpc__SegmentInfo si = MC_RPC__SEGMENT_INFO__INIT;
        si.name = name;
        si.base_addr = (uint64_t)(s + 1) << 30;
        si.size = 64 << 20;
        si.host_label = name;
        si.te_endpoint = ep;
        uint8_t uuid[16] = {(uint8_t)(s + 1)};
        si.segment_uuid = (ProtobufCBinaryData){16, uuid};
        McRpc__MountSegmentRequest q = MC_RPC__MOUNT_SEGMENT_REQUEST__INIT;
        q.client_id = (ProtobufCBinaryData){16, CID};
        q.segment = &si;
        ProtobufCMessage *resp;
        assert_int_equal(mc_rpc_client_call(c, MC_OP_MOUNT_SEGMENT, &q.base, &resp, 2000),
                         MC_OK);
        assert_int_equal(((McRpc__StatusResponse *)resp)->status, MC_OK);
        mc_rpc_response_free(resp);
    }
}

static char g_keys[NKEYS][32];
static ProtobufCBinaryData g_wire[NKEYS];

/* The fixture's master, with its /metrics on an ephemeral loopback port. */
static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    mc_master_service_opts_t o = {.rpc_address = "127.0.0.1", .port = 0, .metrics_port = 0,
                                  .metrics_address = "127.0.0.1"};
    mc_master_config_default(&o.cfg);
    if (!f || mc_master_service_create(&o, &f->svc) != MC_OK)
        return -1;
    snprintf(f->addr, sizeof(f->addr), "127.0.0.1:%u", mc_master_service_port(f->svc));
    pthread_create(&f->th, NULL, run_svc, f);
    *state = f;
    mc_rpc_client_t *c = fixture_client(f, NULL);
    mount_two(c);
    for (int i = 0; i < NKEYS; i++) {
        key_name(g_keys[i], sizeof(g_keys[i]), i);
        g_wire[i] = mc_wire_key_str(g_keys[i]);
        if (i != MISSING && mc_test_put_key(c, CID, g_keys[i], 2000) != MC_OK)
            return -1;
    }
    mc_rpc_client_destroy(c);
    return 0;
}

static void batch_req(McRpc__BatchKeyRequest *q, bool compact)
{
    mc_rpc__batch_key_request__init(q);
    q->client_id = (ProtobufCBinaryData){16, CID};
    q->keys = g_wire;
    q->n_keys = NKEYS;
    q->compact_replicas = compact;
}

/* a and b hold the same results (the usual form's fields). */
static void assert_same_results(const McRpc__BatchReplicaListResponse *a,
                                const McRpc__BatchReplicaListResponse *b)
{
    assert_int_equal(a->status, b->status);
    assert_int_equal(a->n_results, b->n_results);
    for (size_t i = 0; i < a->n_results; i++) {
        const McRpc__ReplicaListResponse *x = a->results[i], *y = b->results[i];
        assert_int_equal(x->status, y->status);
        assert_int_equal(x->n_replicas, y->n_replicas);
        if (x->status)
            continue;
        assert_int_equal(x->size, y->size);
        assert_int_equal(x->checksum, y->checksum);
        assert_int_equal(x->lease_ttl_ms, y->lease_ttl_ms);
        for (size_t j = 0; j < x->n_replicas; j++) {
            const McRpc__ReplicaDesc *d = x->replicas[j], *e = y->replicas[j];
            assert_string_equal(d->segment_name, e->segment_name);
            assert_string_equal(d->transport_endpoint, e->transport_endpoint);
            assert_int_equal(d->buffer_address, e->buffer_address);
            assert_int_equal(d->size, e->size);
            assert_int_equal(d->status, e->status);
            assert_int_equal(d->replica_type, e->replica_type);
            assert_int_equal(d->client_id.len, e->client_id.len);
        }
    }
}

static void test_master_answers_compact(void **state)
{
    fixture_t *f = *state;
    mc_rpc_client_t *c = fixture_client(f, NULL);
    McRpc__BatchKeyRequest q;
    batch_req(&q, false);
    ProtobufCMessage *usual_m, *compact_m;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_BATCH_GET_REPLICA_LIST, &q.base, &usual_m, 2000),
                     MC_OK);
    McRpc__BatchReplicaListResponse *usual = (void *)usual_m;
    /* an older client's request: the usual form, no compact field */
    assert_int_equal(usual->n_results, NKEYS);
    assert_int_equal(usual->n_statuses, 0);
    assert_int_equal(usual->n_names, 0);
    assert_int_equal(usual->results[MISSING]->status, MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(usual->results[0]->status, MC_OK);

    batch_req(&q, true);
    mc_rpc_arena_t a;
    mc_rpc_arena_init(&a, 4096);
    assert_int_equal(mc_rpc_client_call_with(c, MC_OP_BATCH_GET_REPLICA_LIST, &q.base,
                                             &compact_m, 2000, &a.pb),
                     MC_OK);
    McRpc__BatchReplicaListResponse *compact = (void *)compact_m;
    assert_int_equal(compact->n_results, 0);
    assert_int_equal(compact->n_statuses, NKEYS);
    assert_int_equal(compact->statuses[MISSING], MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(compact->replica_counts[MISSING], 0);
    assert_int_equal(compact->n_replica_addrs, NKEYS - 1); /* one replica each */
    /* every distinct string once: at most two segment names and two endpoints */
    assert_true(compact->n_names >= 2 && compact->n_names <= 4);
    assert_int_equal(mc_rpc_replicas_expand(&a.pb, NKEYS, compact), MC_OK);
    assert_same_results(usual, compact);
    mc_rpc_response_free(usual_m);
    mc_rpc_arena_destroy(&a);
    mc_rpc_client_destroy(c);
}

/* The master's counter `name` on its /metrics. */
static uint64_t metric(fixture_t *f, const char *name)
{
    char url[96];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/metrics",
             mc_master_service_metrics_port(f->svc));
    mc_http_resp_t r;
    assert_int_equal(mc_http_request("GET", url, NULL, 0, NULL, 4u << 20, 5000, &r), MC_OK);
    assert_int_equal(r.code, 200);
    char line[160];
    snprintf(line, sizeof(line), "\n%s ", name);
    const char *p = strstr(r.body, line);
    assert_non_null(p);
    uint64_t v = strtoull(p + strlen(line), NULL, 10);
    mc_free(r.body);
    return v;
}

/* The master counts the failed keys of both forms of answer (the usual one's in `results`,
 * the compact one's in `statuses`). */
static void test_failures_counted(void **state)
{
    fixture_t *f = *state;
    const char *items = "master_batch_get_replica_list_items_total",
               *failed = "master_batch_get_replica_list_failed_items_total",
               *partial = "master_batch_get_replica_list_partial_successes_total";
    mc_rpc_client_t *c = fixture_client(f, NULL);
    mc_rpc_arena_t a;
    mc_rpc_arena_init(&a, 4096);
    for (int compact = 0; compact < 2; compact++) {
        uint64_t i0 = metric(f, items), f0 = metric(f, failed), p0 = metric(f, partial);
        McRpc__BatchKeyRequest q;
        batch_req(&q, compact);
        ProtobufCMessage *m;
        assert_int_equal(
            mc_rpc_client_call_with(c, MC_OP_BATCH_GET_REPLICA_LIST, &q.base, &m, 2000, &a.pb),
            MC_OK);
        assert_int_equal(((McRpc__BatchReplicaListResponse *)m)->n_statuses,
                         compact ? NKEYS : 0);
        assert_int_equal(metric(f, items), i0 + NKEYS);
        assert_int_equal(metric(f, failed), f0 + 1); /* MISSING */
        assert_int_equal(metric(f, partial), p0 + 1);
        mc_rpc_arena_reset(&a);
    }
    mc_rpc_arena_destroy(&a);
    mc_rpc_client_destroy(c);
}

static void test_master_client_asks_compact(void **state)
{
    fixture_t *f = *state;
    mc_master_client_t mc;
    assert_int_equal(mc_master_client_init(&mc, f->addr, 2000, CID, NULL), MC_OK);
    McRpc__BatchKeyRequest q;
    batch_req(&q, false);
    ProtobufCMessage *usual_m, *m;
    assert_int_equal(mc_master_client_call(&mc, MC_OP_BATCH_GET_REPLICA_LIST, &q.base, &usual_m,
                                           1),
                     MC_OK);
    assert_int_equal(((McRpc__BatchReplicaListResponse *)usual_m)->n_statuses, 0);
    mc_rpc_arena_t a;
    mc_rpc_arena_init(&a, 4096);
    assert_int_equal(mc_master_client_call_with(&mc, MC_OP_BATCH_GET_REPLICA_LIST, &q.base, &m,
                                                1, &a.pb),
                     MC_OK);
    McRpc__BatchReplicaListResponse *r = (void *)m;
    assert_int_equal(r->n_statuses, NKEYS);  /* it came compact ... */
    assert_same_results((void *)usual_m, r); /* ... and reads as the usual answer */
    assert_false(q.compact_replicas);        /* the caller's request is left as it was */
    mc_rpc_response_free(usual_m);
    mc_rpc_arena_destroy(&a);
    mc_master_client_fini(&mc);
}

/* ---------------------------------------------------------------- a fake master */

typedef enum { FAKE_USUAL, FAKE_BROKEN } fake_mode_t;

typedef struct fake {
    mc_rpc_server_t *srv;
    pthread_t th;
    char addr[64];
    fake_mode_t mode;
    atomic_int asked_compact; /* the last request's compact_replicas */
} fake_t;

/* One replica per key on "segA"; FAKE_USUAL: the usual form whatever was asked (a master that
 * predates compact_replicas); FAKE_BROKEN: a compact answer whose name index is out of range. */
static mc_status_t h_fake_batch(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                ProtobufCMessage **resp_p)
{
    fake_t *f = ctx;
    const McRpc__BatchKeyRequest *q = (const void *)req;
    atomic_store(&f->asked_compact, q->compact_replicas);
    size_t n = q->n_keys;
    McRpc__BatchReplicaListResponse *r = mc_rpc_arena_calloc(call->arena, 1, sizeof(*r));
    McRpc__ReplicaListResponse **res = mc_rpc_arena_calloc(call->arena, n, sizeof(*res));
    McRpc__ReplicaListResponse *items = mc_rpc_arena_calloc(call->arena, n, sizeof(*items));
    McRpc__ReplicaDesc **ptrs = mc_rpc_arena_calloc(call->arena, n, sizeof(*ptrs));
    McRpc__ReplicaDesc *d = mc_rpc_arena_calloc(call->arena, n, sizeof(*d));
    mc_rpc__batch_replica_list_response__init(r);
    for (size_t i = 0; i < n; i++) {
        mc_rpc__replica_list_response__init(&items[i]);
        mc_rpc__replica_desc__init(&d[i]);
        d[i].segment_name = "segA";
        d[i].transport_endpoint = "127.0.0.1:9";
        d[i].buffer_address = 4096 * (i + 1);
        d[i].size = 4096;
        d[i].status = MC_RPC__REPLICA_STATUS__REPLICA_COMPLETE;
        ptrs[i] = &d[i];
        items[i].replicas = &ptrs[i];
        items[i].n_replicas = 1;
        items[i].size = 4096;
        items[i].checksum = i;
        res[i] = &items[i];
    }
    r->results = res;
    r->n_results = n;
    if (f->mode == FAKE_BROKEN) {
        assert_int_equal(mc_rpc_replicas_compact(call->arena, r), MC_OK);
        r->replica_endpoints[0] = (uint32_t)r->n_names;
    }
    *resp_p = &r->base;
    return MC_OK;
}

static void *fake_main(void *arg)
{
    mc_rpc_server_run(((fake_t *)arg)->srv);
    return NULL;
}

static void fake_start(fake_t *f, fake_mode_t mode)
{
    f->mode = mode;
    mc_rpc_server_opts_t o = {.host = "127.0.0.1", .ctx = f};
    o.handlers[MC_OP_BATCH_GET_REPLICA_LIST] = h_fake_batch;
    assert_int_equal(mc_rpc_server_create(&o, &f->srv), MC_OK);
    snprintf(f->addr, sizeof(f->addr), "127.0.0.1:%u", mc_rpc_server_port(f->srv));
    assert_int_equal(pthread_create(&f->th, NULL, fake_main, f), 0);
}

static void fake_stop(fake_t *f)
{
    mc_rpc_server_stop(f->srv);
    pthread_join(f->th, NULL);
    mc_rpc_server_destroy(f->srv);
}

/* A call through mc_master_client with an arena against fake f. */
static mc_status_t fake_call(fake_t *f, mc_rpc_arena_t *a, ProtobufCMessage **m)
{
    mc_master_client_t mc;
    assert_int_equal(mc_master_client_init(&mc, f->addr, 2000, CID, NULL), MC_OK);
    McRpc__BatchKeyRequest q;
    batch_req(&q, false);
    mc_status_t st = mc_master_client_call_with(&mc, MC_OP_BATCH_GET_REPLICA_LIST, &q.base, m, 1,
                                                &a->pb);
    mc_master_client_fini(&mc);
    return st;
}

static void test_master_without_compact(void **state)
{
    (void)state;
    fake_t f = {0};
    fake_start(&f, FAKE_USUAL);
    mc_rpc_arena_t a;
    mc_rpc_arena_init(&a, 4096);
    ProtobufCMessage *m = NULL;
    assert_int_equal(fake_call(&f, &a, &m), MC_OK);
    assert_int_equal(atomic_load(&f.asked_compact), 1);
    McRpc__BatchReplicaListResponse *r = (void *)m;
    assert_int_equal(r->n_results, NKEYS);
    assert_int_equal(r->n_statuses, 0);
    assert_int_equal(r->results[5]->replicas[0]->buffer_address, 4096 * 6);
    assert_string_equal(r->results[5]->replicas[0]->segment_name, "segA");
    mc_rpc_arena_destroy(&a);
    fake_stop(&f);
}

static void test_broken_compact_answer(void **state)
{
    (void)state;
    fake_t f = {0};
    fake_start(&f, FAKE_BROKEN);
    mc_rpc_arena_t a;
    mc_rpc_arena_init(&a, 4096);
    ProtobufCMessage *m = (void *)&a;
    assert_int_equal(fake_call(&f, &a, &m), MC_ERR_PROTOCOL);
    assert_null(m);
    mc_rpc_arena_destroy(&a);
    fake_stop(&f);
}

/* ---------------------------------------------------------------- expand's rules */

/* A valid compact answer of 3 keys (key 1 missing; key 2 a LOCAL_DISK replica), built in a. */
static McRpc__BatchReplicaListResponse *valid3(mc_rpc_arena_t *a)
{
    static int32_t st[3];
    static uint64_t sizes[3], sums[3], addrs[2], rsizes[2];
    static uint32_t counts[3], segs[2], eps[2], kinds[2];
    static char *names[3];
    static uint8_t cid[16] = {1, 2, 3};
    int32_t st0[3] = {0, MC_ERR_OBJECT_NOT_FOUND, 0};
    uint32_t c0[3] = {1, 0, 1}, s0[2] = {0, 2}, e0[2] = {1, 2},
             k0[2] = {MC_RPC__REPLICA_STATUS__REPLICA_COMPLETE,
                      MC_RPC__REPLICA_STATUS__REPLICA_COMPLETE |
                          MC_RPC__REPLICA_TYPE__LOCAL_DISK << 8};
    memcpy(st, st0, sizeof(st));
    memcpy(counts, c0, sizeof(counts));
    memcpy(segs, s0, sizeof(segs));
    memcpy(eps, e0, sizeof(eps));
    memcpy(kinds, k0, sizeof(kinds));
    names[0] = "seg0";
    names[1] = "127.0.0.1:1";
    names[2] = "";
    McRpc__BatchReplicaListResponse *r = mc_rpc_arena_calloc(a, 1, sizeof(*r));
    mc_rpc__batch_replica_list_response__init(r);
    r->statuses = st;
    r->sizes = sizes;
    r->checksums = sums;
    r->replica_counts = counts;
    r->n_statuses = r->n_sizes = r->n_checksums = r->n_replica_counts = 3;
    r->names = names;
    r->n_names = 3;
    r->replica_segments = segs;
    r->replica_endpoints = eps;
    r->replica_addrs = addrs;
    r->replica_sizes = rsizes;
    r->replica_kinds = kinds;
    r->n_replica_segments = r->n_replica_endpoints = r->n_replica_addrs = r->n_replica_sizes =
        r->n_replica_kinds = 2;
    r->replica_client_ids = (ProtobufCBinaryData){16, cid};
    r->lease_ttl_ms = 5000;
    return r;
}

static void test_expand_rules(void **state)
{
    (void)state;
    mc_rpc_arena_t a;
    mc_rpc_arena_init(&a, 4096);
    McRpc__BatchReplicaListResponse *r = valid3(&a);
    assert_int_equal(mc_rpc_replicas_expand(&a.pb, 3, r), MC_OK);
    assert_int_equal(r->n_results, 3);
    assert_int_equal(r->results[0]->lease_ttl_ms, 5000);
    assert_int_equal(r->results[1]->lease_ttl_ms, 0);
    assert_int_equal(r->results[2]->replicas[0]->replica_type, MC_RPC__REPLICA_TYPE__LOCAL_DISK);
    assert_int_equal(r->results[2]->replicas[0]->client_id.len, 16);
    assert_int_equal(r->results[2]->replicas[0]->client_id.data[1], 2);
    assert_string_equal(r->results[0]->replicas[0]->transport_endpoint, "127.0.0.1:1");
    /* results and compact fields at once */
    assert_int_equal(mc_rpc_replicas_expand(&a.pb, 3, r), MC_ERR_PROTOCOL);
    /* a whole-batch status: nothing to expand */
    r = valid3(&a);
    r->status = MC_ERR_TOO_LARGE;
    assert_int_equal(mc_rpc_replicas_expand(&a.pb, 3, r), MC_OK);
    assert_int_equal(r->n_results, 0);
mc_rpc_arena_destroy(&a);
}

static void test_expand_refuses(void **state)
{
    (void)state;
    mc_rpc_arena_t a;
    mc_rpc_arena_init(&a, 4096);
    McRpc__BatchReplicaListResponse *r;
#define REFUSED(n_keys, stmt)                                                          \
    do {                                                                               \
        r = valid3(&a);                                                                \
        stmt;                                                                          \
        assert_int_equal(mc_rpc_replicas_expand(&a.pb, n_keys, r), MC_ERR_PROTOCOL);   \
        assert_int_equal(r->n_results, 0);                                             \
    } while (0)
    REFUSED(4, (void)0);                           /* fewer statuses than keys asked */
    REFUSED(3, r->n_sizes = 2);                    /* a per-key array too short */
    REFUSED(3, r->n_checksums = 4);                /* ... too long */
    REFUSED(3, r->replica_counts[1] = 1);          /* replicas on a failed key */
    REFUSED(3, r->replica_counts[0] = 9);          /* over MC_RPC_MAX_KEY_REPLICAS */
    REFUSED(3, r->replica_counts[0] = 2);          /* counts beyond the replica arrays */
    REFUSED(3, r->n_replica_addrs = 1);            /* a per-replica array too short */
    REFUSED(3, r->replica_segments[1] = 3);        /* name index out of range */
    REFUSED(3, r->replica_endpoints[0] = 100);
    REFUSED(3, r->replica_kinds[0] = 3);           /* unknown replica status */
    REFUSED(3, r->replica_kinds[0] = 3u << 8 | 2); /* unknown replica type */
    REFUSED(3, r->replica_client_ids.len = 15);    /* not 16 bytes per LOCAL_DISK replica */
    REFUSED(3, r->replica_kinds[1] = 2);           /* client id without a LOCAL_DISK replica */
#undef REFUSED
    r = valid3(&a);
    assert_int_equal(mc_rpc_replicas_expand(&a.pb, 3, r), MC_OK); /* and the valid one passes */
    mc_rpc_arena_destroy(&a);
}

int main(void)
{
    const struct CMUnitTest with_master[] = {
        cmocka_unit_test(test_master_answers_compact),
        cmocka_unit_test(test_master_client_asks_compact),
        cmocka_unit_test(test_failures_counted),
    };
    const struct CMUnitTest alone[] = {
        cmocka_unit_test(test_master_without_compact),
        cmocka_unit_test(test_broken_compact_answer),
        cmocka_unit_test(test_expand_rules),
        cmocka_unit_test(test_expand_refuses),
    };
    int failed = cmocka_run_group_tests(with_master, setup, teardown);
    return failed + cmocka_run_group_tests(alone, NULL, NULL);
}
