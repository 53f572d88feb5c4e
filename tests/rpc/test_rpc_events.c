/* PollEvents / ListObjects over the wire against an in-process master service: immediate
 * answers, a long poll parked by the loop and answered by the next event (well before its
 * deadline) or by its deadline, other calls on the same connection served meanwhile, gap after
 * the ring wrapped, epoch mismatch, caps, and ListObjects paging. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/time.h"
#include "master/service.h"
#include "rpc/frame.h"
#include "rpc/rpc_client.h"
#include "rpc/wire_key.h"
#include "master_fixture.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A key field of an answer equals the string s (bytes, not NUL-terminated). */
static void assert_wire_key(ProtobufCBinaryData k, const char *s)
{
    assert_int_equal(k.len, strlen(s));
    assert_memory_equal(k.data, s, k.len);
}

static int setup(void **state)
{
    return fixture_start(state, 64);
}

static void mount_seg(mc_rpc_client_t *c)
{
    mount_seg_labelled(c, "hostX");
}

static void put(mc_rpc_client_t *c, const char *key)
{
    McRpc__PutStartRequest ps = MC_RPC__PUT_START_REQUEST__INIT;
    ps.client_id = (ProtobufCBinaryData){16, CID};
    ps.key = mc_wire_key_str(key);
    ps.value_size = 4096;
    ProtobufCMessage *resp;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_PUT_START, &ps.base, &resp, 2000), MC_OK);
    assert_int_equal(((McRpc__PutStartResponse *)resp)->status, MC_OK);
    mc_rpc_response_free(resp);
    McRpc__PutEndRequest pe = MC_RPC__PUT_END_REQUEST__INIT;
    pe.client_id = (ProtobufCBinaryData){16, CID};
    pe.key = mc_wire_key_str(key);
    assert_int_equal(mc_rpc_client_call(c, MC_OP_PUT_END, &pe.base, &resp, 2000), MC_OK);
    assert_int_equal(((McRpc__StatusResponse *)resp)->status, MC_OK);
    mc_rpc_response_free(resp);
}

static McRpc__PollEventsResponse *poll_ev(mc_rpc_client_t *c, uint64_t from, uint32_t max,
                                          uint32_t wait_ms, uint64_t epoch)
{
    McRpc__PollEventsRequest q = MC_RPC__POLL_EVENTS_REQUEST__INIT;
    q.from_seq = from;
    q.max_events = max;
    q.wait_ms = wait_ms;
    q.epoch = epoch;
    ProtobufCMessage *resp = NULL;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_POLL_EVENTS, &q.base, &resp, 5000), MC_OK);
    return (McRpc__PollEventsResponse *)resp;
}

typedef struct bg_poll {
    const char *addr;
    uint64_t from;
    const char *placement_prefix; /* non-NULL: with_placements */
    uint64_t elapsed_ms;
    McRpc__PollEventsResponse *r;
} bg_poll_t;

static void *bg_poll(void *arg)
{
    bg_poll_t *b = arg;
    mc_rpc_client_t *c;
    if (mc_rpc_client_create(b->addr, NULL, &c) != MC_OK)
        return NULL;
    uint64_t t0 = mc_now_ms();
    McRpc__PollEventsRequest q = MC_RPC__POLL_EVENTS_REQUEST__INIT;
    q.from_seq = b->from;
    q.wait_ms = 1000;
    q.with_placements = b->placement_prefix != NULL;
    q.placement_prefix = mc_wire_key_str(b->placement_prefix);
    ProtobufCMessage *resp = NULL;
    if (mc_rpc_client_call(c, MC_OP_POLL_EVENTS, &q.base, &resp, 5000) == MC_OK)
        b->r = (McRpc__PollEventsResponse *)resp;
    b->elapsed_ms = mc_now_ms() - t0;
    mc_rpc_client_destroy(c);
    return NULL;
}

static void test_poll_events(void **state)
{
    fixture_t *f = *state;
    mc_rpc_client_t *c;
    assert_int_equal(mc_rpc_client_create(f->addr, NULL, &c), MC_OK);
    mount_seg(c);
    put(c, "ns/0000000000000001");
    put(c, "ns/0000000000000002");
    McRpc__PollEventsResponse *r = poll_ev(c, 1, 0, 0, 0);
    assert_int_equal(r->status, MC_OK);
    assert_false(r->gap);
    assert_int_equal(r->first_available_seq, 1);
    assert_int_equal(r->next_seq, 3);
    assert_int_equal(r->n_events, 2);
    assert_int_equal(r->events[0]->seq, 1);
    assert_int_equal(r->events[0]->kind, MC_RPC__KV_EVENT_KIND__KV_EVENT_COMMITTED);
    assert_wire_key(r->events[0]->key, "ns/0000000000000001");
    assert_string_equal(r->events[0]->segment, "seg0");
    assert_string_equal(r->events[0]->host, "hostX");
    assert_int_equal(r->events[0]->size, 4096);
    uint64_t epoch = r->epoch;
    assert_true(epoch != 0);
    mc_rpc_response_free(&r->base);
    /* max_events */
    r = poll_ev(c, 1, 1, 0, epoch);
    assert_int_equal(r->n_events, 1);
    mc_rpc_response_free(&r->base);
    /* epoch mismatch -> gap */
    r = poll_ev(c, 1, 0, 0, epoch + 1);
    assert_true(r->gap);
    assert_int_equal(r->n_events, 0);
    mc_rpc_response_free(&r->base);

    /* long poll with nothing happening: answered at its deadline, empty */
    uint64_t t0 = mc_now_ms();
    r = poll_ev(c, 3, 0, 300, epoch);
    uint64_t dt = mc_now_ms() - t0;
    assert_int_equal(r->n_events, 0);
    assert_false(r->gap);
    assert_true(dt >= 250 && dt < 3000);
    mc_rpc_response_free(&r->base);
    /* wait_ms is capped at 1000 */
    t0 = mc_now_ms();
    r = poll_ev(c, 3, 0, 60000, epoch);
    dt = mc_now_ms() - t0;
    assert_true(dt < 3000);
    mc_rpc_response_free(&r->base);

    /* long poll parked in the background; the loop keeps serving this connection; the next
     * event answers the parked call long before its 1 s deadline */
    bg_poll_t b = {.addr = f->addr, .from = 3};
    pthread_t th;
    pthread_create(&th, NULL, bg_poll, &b);
    /* let it park: a second long poll by us on our own connection would also park, so use a
     * plain call to prove the loop is not blocked */
    t0 = mc_now_ms();
    r = poll_ev(c, 1, 0, 0, epoch);
    assert_true(mc_now_ms() - t0 < 500);
    mc_rpc_response_free(&r->base);
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL); /* only shortens the wait below; correctness does not depend on it */
    put(c, "ns/0000000000000003");
    pthread_join(th, NULL);
    assert_non_null(b.r);
    assert_int_equal(b.r->n_events, 1);
    assert_wire_key(b.r->events[0]->key, "ns/0000000000000003");
    assert_true(b.elapsed_ms < 900);
    mc_rpc_response_free(&b.r->base);

    /* wrap: ring of 64; 100 more events -> reading from 1 is a gap */
    char key[32];
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "w/%d", i);
        put(c, key);
    }
    r = poll_ev(c, 1, 0, 500, epoch); /* a gap answers at once */
    assert_true(r->gap);
    assert_int_equal(r->n_events, 0);
    assert_int_equal(r->next_seq, 104);
    assert_int_equal(r->first_available_seq, 104 - 64);
    mc_rpc_response_free(&r->base);
    mc_rpc_client_destroy(c);
}

static int32_t remove_key(mc_rpc_client_t *c, const char *key)
{
    McRpc__KeyRequest q = MC_RPC__KEY_REQUEST__INIT;
    q.key = mc_wire_key_str(key);
    ProtobufCMessage *resp;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_REMOVE, &q.base, &resp, 2000), MC_OK);
    int32_t st = ((McRpc__StatusResponse *)resp)->status;
    mc_rpc_response_free(resp);
    return st;
}

/* The placement feed (with_placements): a COMMITTED event under the prefix carries the object's
 * replicas, checksum and a read lease (a plain remove is then refused); other keys, objects no
 * longer readable and other kinds carry none; a parked poll gets them too; an over-long prefix
 * is refused. */
static void test_poll_events_placements(void **state)
{
    fixture_t *f = *state;
    mc_rpc_client_t *c;
    assert_int_equal(mc_rpc_client_create(f->addr, NULL, &c), MC_OK);
    mount_seg(c);
    put(c, "a/1");
    put(c, "b/1");
    put(c, "a/2");
    assert_int_equal(remove_key(c, "a/2"), MC_OK); /* not leased yet: removed */
    McRpc__PollEventsRequest q = MC_RPC__POLL_EVENTS_REQUEST__INIT;
    q.from_seq = 1;
    q.with_placements = 1;
    q.placement_prefix = mc_wire_key_str("a/");
    ProtobufCMessage *resp = NULL;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_POLL_EVENTS, &q.base, &resp, 5000), MC_OK);
    McRpc__PollEventsResponse *r = (void *)resp;
    assert_int_equal(r->status, MC_OK);
    assert_int_equal(r->n_events, 4); /* a/1, b/1, a/2 committed; a/2 removed */
    McRpc__ReplicaListResponse *pl = r->events[0]->placement;
    assert_non_null(pl);
    assert_int_equal(pl->status, MC_OK);
    assert_int_equal(pl->n_replicas, 1);
    assert_string_equal(pl->replicas[0]->segment_name, "seg0");
    assert_int_equal(pl->size, 4096);
    assert_true(pl->lease_ttl_ms > 0);
    assert_null(r->events[1]->placement); /* outside the prefix */
    assert_null(r->events[2]->placement); /* removed since */
    assert_null(r->events[3]->placement); /* not a commit */
    uint64_t next = r->next_seq;
    mc_rpc_response_free(resp);
    assert_int_equal(remove_key(c, "a/1"), MC_ERR_OBJECT_HAS_LEASE); /* the poll's lease */

    /* parked: answered with the placement of what is committed meanwhile */
    bg_poll_t b = {.addr = f->addr, .from = next, .placement_prefix = "a/"};
    pthread_t th;
    pthread_create(&th, NULL, bg_poll, &b);
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL); /* only shortens the wait; a poll answered at once sees a/3 too */
    put(c, "a/3");
    pthread_join(th, NULL);
    assert_non_null(b.r);
    assert_int_equal(b.r->n_events, 1);
    assert_wire_key(b.r->events[0]->key, "a/3");
    assert_non_null(b.r->events[0]->placement);
    assert_int_equal(b.r->events[0]->placement->n_replicas, 1);
    mc_rpc_response_free(&b.r->base);

    static char long_prefix[MC_RPC_MAX_KEY + 2];
    memset(long_prefix, 'a', MC_RPC_MAX_KEY + 1);
    q.placement_prefix = mc_wire_key_str(long_prefix);
    assert_int_equal(mc_rpc_client_call(c, MC_OP_POLL_EVENTS, &q.base, &resp, 5000), MC_OK);
    assert_int_equal(((McRpc__PollEventsResponse *)resp)->status, MC_ERR_INVALID_KEY);
    mc_rpc_response_free(resp);
    mc_rpc_client_destroy(c);
}

static void test_list_objects(void **state)
{
    fixture_t *f = *state;
    mc_rpc_client_t *c;
    assert_int_equal(mc_rpc_client_create(f->addr, NULL, &c), MC_OK);
    mount_seg(c);
    char key[32];
    for (int i = 0; i < 50; i++) {
        snprintf(key, sizeof(key), "l/%d", i);
        put(c, key);
    }
    size_t total = 0;
    uint64_t cursor = 0, seq0 = 0;
    int pages = 0;
    for (;;) {
        McRpc__ListObjectsRequest q = MC_RPC__LIST_OBJECTS_REQUEST__INIT;
        q.cursor = cursor;
        q.max = 7;
        ProtobufCMessage *resp;
        assert_int_equal(mc_rpc_client_call(c, MC_OP_LIST_OBJECTS, &q.base, &resp, 2000), MC_OK);
        McRpc__ListObjectsResponse *r = (void *)resp;
        assert_int_equal(r->status, MC_OK);
        if (!pages)
            seq0 = r->seq;
        for (size_t i = 0; i < r->n_objects; i++) {
            assert_int_equal(r->objects[i]->n_segments, 1);
            assert_int_equal(r->objects[i]->n_hosts, 1);
            assert_string_equal(r->objects[i]->segments[0], "seg0");
            assert_string_equal(r->objects[i]->hosts[0], "hostX");
            if (r->objects[i]->key.len >= 2 && !memcmp(r->objects[i]->key.data, "l/", 2))
                total++;
        }
        pages++;
        bool done = r->done;
        cursor = r->next_cursor;
        mc_rpc_response_free(resp);
        if (done)
            break;
        assert_true(pages < 10000);
    }
    assert_int_equal(total, 50);
    assert_true(pages >= 2);
    assert_true(seq0 > 50);
    mc_rpc_client_destroy(c);
}

/* One key request (op) on a key given as bytes; returns the answer's status. */
static int32_t key_status(mc_rpc_client_t *c, uint16_t op, ProtobufCBinaryData key)
{
    McRpc__KeyRequest q = MC_RPC__KEY_REQUEST__INIT;
    q.client_id = (ProtobufCBinaryData){16, CID};
    q.key = key;
    ProtobufCMessage *resp;
    assert_int_equal(mc_rpc_client_call(c, op, &q.base, &resp, 2000), MC_OK);
    int32_t st = op == MC_OP_GET_REPLICA_LIST ? ((McRpc__ReplicaListResponse *)resp)->status
                                              : ((McRpc__StatusResponse *)resp)->status;
    mc_rpc_response_free(resp);
    return st;
}

/* Field `name` of message descriptor d is proto bytes (a strict parser accepts any byte). */
static void assert_bytes_field(const ProtobufCMessageDescriptor *d, const char *name)
{
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(d, name);
    assert_non_null(f);
    if (f->type != PROTOBUF_C_TYPE_BYTES)
        fail_msg("%s.%s is not bytes", d->name, name);
}

/* Keys are bytes on the wire: a key that is not UTF-8 round-trips through put, get, PollEvents
 * and ListObjects with its exact bytes, and every key field is `bytes` in the schema (a strict
 * protobuf parser refuses non-UTF-8 in a `string`). A key with a NUL byte is refused, since the
 * C API's keys are NUL-terminated. */
static void test_binary_keys(void **state)
{
    assert_bytes_field(&mc_rpc__key_request__descriptor, "key");
    assert_bytes_field(&mc_rpc__batch_key_request__descriptor, "keys");
    assert_bytes_field(&mc_rpc__put_start_request__descriptor, "key");
    assert_bytes_field(&mc_rpc__put_end_request__descriptor, "key");
    assert_bytes_field(&mc_rpc__batch_put_start_request__descriptor, "keys");
    assert_bytes_field(&mc_rpc__batch_put_end_request__descriptor, "keys");
    assert_bytes_field(&mc_rpc__batch_replica_clear_request__descriptor, "keys");
    assert_bytes_field(&mc_rpc__kv_event__descriptor, "key");
    assert_bytes_field(&mc_rpc__poll_events_request__descriptor, "placement_prefix");
    assert_bytes_field(&mc_rpc__listed_object__descriptor, "key");

    fixture_t *f = *state;
    mc_rpc_client_t *c;
    assert_int_equal(mc_rpc_client_create(f->addr, NULL, &c), MC_OK);
    mount_seg(c);
    static const char bin[] = "bin/\xff\xfe\xc3\x28\x80"; /* invalid UTF-8 */
    put(c, bin);
    ProtobufCBinaryData bk = mc_wire_key(bin, sizeof(bin) - 1);
    assert_int_equal(key_status(c, MC_OP_GET_REPLICA_LIST, bk), MC_OK);
    assert_int_equal(key_status(c, MC_OP_EXIST_KEY, bk), MC_OK);
    McRpc__PollEventsResponse *r = poll_ev(c, 1, 0, 0, 0);
    assert_int_equal(r->status, MC_OK);
    assert_int_equal(r->n_events, 1);
    assert_wire_key(r->events[0]->key, bin);
    mc_rpc_response_free(&r->base);
    McRpc__ListObjectsRequest lq = MC_RPC__LIST_OBJECTS_REQUEST__INIT;
    ProtobufCMessage *resp;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_LIST_OBJECTS, &lq.base, &resp, 2000), MC_OK);
    McRpc__ListObjectsResponse *lr = (void *)resp;
    assert_int_equal(lr->status, MC_OK);
    assert_int_equal(lr->n_objects, 1);
    assert_wire_key(lr->objects[0]->key, bin);
    mc_rpc_response_free(resp);

    /* a NUL byte inside a key, or a placement prefix, is refused */
    ProtobufCBinaryData nul = mc_wire_key("a\0b", 3);
    McRpc__PutStartRequest ps = MC_RPC__PUT_START_REQUEST__INIT;
    ps.client_id = (ProtobufCBinaryData){16, CID};
    ps.key = nul;
    ps.value_size = 4096;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_PUT_START, &ps.base, &resp, 2000), MC_OK);
    assert_int_equal(((McRpc__PutStartResponse *)resp)->status, MC_ERR_INVALID_KEY);
    mc_rpc_response_free(resp);
    assert_int_equal(key_status(c, MC_OP_GET_REPLICA_LIST, nul), MC_ERR_INVALID_KEY);
    assert_int_equal(key_status(c, MC_OP_EXIST_KEY, nul), MC_ERR_INVALID_KEY);
    assert_int_equal(key_status(c, MC_OP_REMOVE, nul), MC_ERR_INVALID_KEY);
    McRpc__BatchKeyRequest bq = MC_RPC__BATCH_KEY_REQUEST__INIT;
    ProtobufCBinaryData two[2] = {bk, nul};
    bq.keys = two;
    bq.n_keys = 2;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_BATCH_EXIST_KEY, &bq.base, &resp, 2000), MC_OK);
    McRpc__BatchStatusResponse *bs = (void *)resp;
    assert_int_equal(bs->n_statuses, 2);
    assert_int_equal(bs->statuses[0], MC_OK);
    assert_int_equal(bs->statuses[1], MC_ERR_INVALID_KEY);
    mc_rpc_response_free(resp);
    McRpc__PollEventsRequest pq = MC_RPC__POLL_EVENTS_REQUEST__INIT;
    pq.from_seq = 1;
    pq.with_placements = 1;
    pq.placement_prefix = nul;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_POLL_EVENTS, &pq.base, &resp, 2000), MC_OK);
    assert_int_equal(((McRpc__PollEventsResponse *)resp)->status, MC_ERR_INVALID_KEY);
    mc_rpc_response_free(resp);
    mc_rpc_client_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_poll_events, setup, teardown),
        cmocka_unit_test_setup_teardown(test_poll_events_placements, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_objects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_binary_keys, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
