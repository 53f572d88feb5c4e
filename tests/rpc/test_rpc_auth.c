/* The master RPC port's authentication and budgets, against an in-process master service:
 * without a token (or with a wrong one) nothing is read, written, listed or removed; tokens
 * of a two-line file (rotation) both work; a tenant-bound token lists and removes its own
 * tenant's keys only; the handshake, idle and slow-sender timeouts; eviction of unproven connections
 * at the connection cap; a frame over the remaining budget refused without being buffered;
 * the per-connection cap on deferred requests; backpressure on a connection that does not
 * read its answers, then the blocked timeout. Raw sockets follow
 * docs/internals/wire-protocol.md. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/auth.h"
#include "common/net.h"
#include "common/time.h"
#include "master/service.h"
#include "rpc/frame.h"
#include "rpc/rpc_client.h"
#include "rpc/wire_key.h"
#include "master_fixture.h"
#include "master_calls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define SECRET_A "cluster-secret-A-0123456789"
#define SECRET_B "cluster-secret-B-9876543210"
#define SECRET_T "tenant-secret-T-0123456789"

static mc_auth_t *ring(const char *secret)
{
    mc_auth_t *a = NULL;
    assert_int_equal(mc_auth_from_secret(secret, NULL, &a), MC_OK);
    return a;
}

static mc_auth_t *ring_file(const char *text) { return fixture_ring_file(text); }

static mc_rpc_client_t *client(fixture_t *f, const mc_auth_t *auth)
{
    return fixture_client(f, auth);
}

static mc_rpc_server_stats_t stats(fixture_t *f)
{
    mc_rpc_server_stats_t st;
    mc_master_service_rpc_stats(f->svc, &st);
    return st;
}

static uint16_t fport(fixture_t *f) { return (uint16_t)atoi(strchr(f->addr, ':') + 1); }

static mc_status_t put_key(mc_rpc_client_t *c, const char *key)
{
    return mc_test_put_key(c, CID, key, 2000);
}

static mc_status_t get_key(mc_rpc_client_t *c, const char *key)
{
    return mc_test_get_key(c, key, 2000);
}

/* Header-level status of RemoveAll (the default tenant for a cluster token). */
static mc_status_t remove_all(mc_rpc_client_t *c)
{
    McRpc__RemoveAllRequest q = MC_RPC__REMOVE_ALL_REQUEST__INIT;
    q.client_id = (ProtobufCBinaryData){16, CID};
    q.force = true;
    ProtobufCMessage *resp;
    mc_status_t st = mc_rpc_client_call(c, MC_OP_REMOVE_ALL, &q.base, &resp, 2000);
    mc_rpc_response_free(resp);
    return st;
}

static mc_status_t list_objects(mc_rpc_client_t *c, size_t *n_p)
{
    McRpc__ListObjectsRequest q = MC_RPC__LIST_OBJECTS_REQUEST__INIT;
    ProtobufCMessage *resp;
    mc_status_t st = mc_rpc_client_call(c, MC_OP_LIST_OBJECTS, &q.base, &resp, 2000);
    if (st == MC_OK && n_p) {
        McRpc__ListObjectsResponse *r = (void *)resp;
        assert_true(r->done);
        *n_p = r->n_objects;
    }
    mc_rpc_response_free(resp);
    return st;
}

static size_t key_count(mc_rpc_client_t *admin)
{
    size_t n = 0;
    assert_int_equal(list_objects(admin, &n), MC_OK);
    return n;
}

/* ---------------------------------------------------------------- raw sockets */

static uint64_t dl_ms(uint32_t ms) { return mc_now_ns() + (uint64_t)ms * 1000000ull; }

static int raw_connect(fixture_t *f)
{
    int fd;
    assert_int_equal(mc_net_connect("127.0.0.1", fport(f), 2000, &fd), MC_OK);
    return fd;
}

/* A connection that proved `auth` (NULL: no proof). */
static int raw_connect_auth(fixture_t *f, const mc_auth_t *auth)
{
    int fd;
    assert_int_equal(mc_auth_connect("127.0.0.1", fport(f), 2000, auth, &fd), MC_OK);
    return fd;
}

/* Appends a request frame with msg's packed body to out (at least 32 + body bytes). */
static size_t frame(uint8_t *out, uint16_t opcode, uint64_t req_id, const ProtobufCMessage *msg)
{
    size_t blen = msg ? protobuf_c_message_get_packed_size(msg) : 0;
    mc_rpc_hdr_t h = {.opcode = opcode, .body_len = (uint32_t)blen, .req_id = req_id};
    mc_rpc_hdr_encode(&h, out);
    if (msg)
        protobuf_c_message_pack(msg, out + MC_RPC_HDR_SIZE);
    return MC_RPC_HDR_SIZE + blen;
}

/* Waits until the server closes fd (EOF or reset), reading and dropping whatever comes. */
static bool closed_within(int fd, uint32_t ms)
{
    uint64_t dl = dl_ms(ms);
    uint8_t b[4096];
    while (mc_now_ns() < dl) {
        struct timeval tv = {.tv_sec = 0, .tv_usec = 50000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        ssize_t n = recv(fd, b, sizeof(b), 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return true;
    }
    return false;
}

/* Reads one response header (and drops its body); its status, or 1 on EOF/timeout. */
static int32_t recv_status(int fd, mc_rpc_hdr_t *h)
{
    uint8_t b[MC_RPC_HDR_SIZE];
    if (mc_net_recv_all(fd, b, sizeof(b), dl_ms(3000)) != MC_OK)
        return 1;
    assert_int_equal(mc_rpc_hdr_decode(b, MC_RPC_MAX_BODY, h), MC_OK);
    for (uint32_t left = h->body_len; left;) {
        uint8_t skip[4096];
        uint32_t n = left < sizeof(skip) ? left : (uint32_t)sizeof(skip);
        assert_int_equal(mc_net_recv_all(fd, skip, n, dl_ms(3000)), MC_OK);
        left -= n;
    }
    return h->status;
}

/* ---------------------------------------------------------------- authentication */

/* A master with a keyring and three keys put by a client with the token. */
static void start_authed(void **state, const mc_auth_t *srv_auth, const mc_auth_t *good,
                         mc_rpc_client_t **admin_p)
{
    assert_int_equal(fixture_start_with(state, 0, srv_auth, NULL), 0);
    fixture_t *f = *state;
    *admin_p = client(f, good);
    mount_seg_labelled(*admin_p, "h");
    assert_int_equal(put_key(*admin_p, "k1"), MC_OK);
    assert_int_equal(put_key(*admin_p, "k2"), MC_OK);
    assert_int_equal(put_key(*admin_p, "k3"), MC_OK);
    assert_int_equal(key_count(*admin_p), 3);
}

static void test_no_token_refused(void **state)
{
    mc_auth_t *a = ring(SECRET_A);
    mc_rpc_client_t *admin;
    start_authed(state, a, a, &admin);
    fixture_t *f = *state;
    /* the RPC client without a token: every call fails at the handshake */
    mc_rpc_client_t *anon = client(f, NULL);
    assert_int_equal(remove_all(anon), MC_ERR_AUTH);
    assert_int_equal(list_objects(anon, NULL), MC_ERR_AUTH);
    assert_int_equal(put_key(anon, "evil"), MC_ERR_AUTH);
    assert_int_equal(get_key(anon, "k1"), MC_ERR_AUTH);
    mc_rpc_client_destroy(anon);
    /* raw: a RemoveAll frame where the PROOF belongs -> a refusing RESULT, then closed */
    int fd = raw_connect(f);
    uint8_t hello[MC_AUTH_HELLO_SIZE];
    assert_int_equal(mc_net_recv_all(fd, hello, sizeof(hello), dl_ms(2000)), MC_OK);
    assert_int_equal(hello[6] & 1, 1); /* flags: auth required */
    McRpc__RemoveAllRequest ra = MC_RPC__REMOVE_ALL_REQUEST__INIT;
    ra.client_id = (ProtobufCBinaryData){16, CID};
    ra.force = true;
    uint8_t buf[512];
    size_t n = frame(buf, MC_OP_REMOVE_ALL, 1, &ra.base);
    McRpc__ListObjectsRequest lo = MC_RPC__LIST_OBJECTS_REQUEST__INIT;
    n += frame(buf + n, MC_OP_LIST_OBJECTS, 2, &lo.base);
    n += frame(buf + n, MC_OP_REMOVE_ALL, 3, &ra.base);
    assert_true(n >= MC_AUTH_PROOF_SIZE);
    assert_int_equal(mc_net_send_all(fd, buf, n, dl_ms(2000)), MC_OK);
    uint8_t result[MC_AUTH_RESULT_SIZE];
    assert_int_equal(mc_net_recv_all(fd, result, sizeof(result), dl_ms(2000)), MC_OK);
    int32_t rst;
    memcpy(&rst, result + 8, 4);
    assert_int_not_equal(rst, MC_OK);
    assert_true(closed_within(fd, 2000));
    close(fd);
    /* raw: the handshake without a proof, then frames anyway -> closed, nothing answered */
    fd = raw_connect(f);
    assert_int_equal(mc_auth_client_handshake(fd, NULL, dl_ms(2000)), MC_ERR_AUTH);
    ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);
    (void)w;
    assert_true(closed_within(fd, 2000));
    close(fd);
    assert_int_equal(key_count(admin), 3);
    assert_int_equal(get_key(admin, "k1"), MC_OK);
    assert_true(stats(f).auth_failed >= 2);
    mc_rpc_client_destroy(admin);
    teardown(state);
    mc_auth_free(a);
}

static void test_wrong_token_refused(void **state)
{
    mc_auth_t *a = ring(SECRET_A), *b = ring(SECRET_B);
    mc_rpc_client_t *admin;
    start_authed(state, a, a, &admin);
    fixture_t *f = *state;
    mc_rpc_client_t *wrong = client(f, b);
    assert_int_equal(remove_all(wrong), MC_ERR_AUTH);
    assert_int_equal(put_key(wrong, "evil"), MC_ERR_AUTH);
    assert_int_equal(get_key(wrong, "k1"), MC_ERR_AUTH);
    mc_rpc_client_destroy(wrong);
    /* a client with a token refuses a server without one (it cannot prove the secret) */
    fixture_t *f2;
    void *st2;
    assert_int_equal(fixture_start_with(&st2, 0, NULL, NULL), 0);
    f2 = st2;
    mc_rpc_client_t *c2 = client(f2, a);
    assert_int_equal(get_key(c2, "k1"), MC_ERR_AUTH);
    mc_rpc_client_destroy(c2);
    teardown(&st2);
    assert_int_equal(key_count(admin), 3);
    mc_rpc_client_destroy(admin);
    teardown(state);
    mc_auth_free(a);
    mc_auth_free(b);
}

static void test_rotation(void **state)
{
    mc_auth_t *srv = ring_file("# old and new token during a rotation\n" SECRET_A "\n" SECRET_B
                               "\n");
    mc_auth_t *a = ring(SECRET_A), *b = ring(SECRET_B), *t = ring(SECRET_T);
    mc_rpc_client_t *admin;
    start_authed(state, srv, a, &admin);
    fixture_t *f = *state;
    mc_rpc_client_t *cb = client(f, b), *ct = client(f, t);
    assert_int_equal(put_key(cb, "from-b"), MC_OK);
    assert_int_equal(get_key(admin, "from-b"), MC_OK);
    assert_int_equal(get_key(cb, "k1"), MC_OK);
    assert_int_equal(key_count(cb), 4); /* both are cluster tokens: the default tenant */
    assert_int_equal(get_key(ct, "k1"), MC_ERR_AUTH);
    mc_rpc_client_destroy(cb);
    mc_rpc_client_destroy(ct);
    mc_rpc_client_destroy(admin);
    teardown(state);
    mc_auth_free(srv);
    mc_auth_free(a);
    mc_auth_free(b);
    mc_auth_free(t);
}

/* The operations that were admin-only (RemoveAll, RemoveByRegex, ListObjects, PollEvents) are
 * allowed to a tenant token, on its own tenant's keys only (test_rpc_tenants has the rest). */
static void test_tenant_token_scoped(void **state)
{
    mc_auth_t *srv = ring_file(SECRET_A "\n" SECRET_T " tenant=t1\n");
    mc_auth_t *a = ring(SECRET_A), *t = NULL;
    assert_int_equal(mc_auth_from_secret(SECRET_T, "t1", &t), MC_OK);
    mc_rpc_client_t *admin;
    start_authed(state, srv, a, &admin);
    fixture_t *f = *state;
    mc_rpc_client_t *ct = client(f, t);
    assert_int_equal(put_key(ct, "t1/x"), MC_OK);
    assert_int_equal(get_key(ct, "t1/x"), MC_OK);
    assert_int_equal(get_key(ct, "k1"), MC_ERR_OBJECT_NOT_FOUND); /* the default tenant's */
    assert_int_equal(key_count(ct), 1);
    McRpc__RemoveByRegexRequest rr = MC_RPC__REMOVE_BY_REGEX_REQUEST__INIT;
    rr.client_id = (ProtobufCBinaryData){16, CID};
    rr.pattern = "^k";
    ProtobufCMessage *resp;
    assert_int_equal(mc_rpc_client_call(ct, MC_OP_REMOVE_BY_REGEX, &rr.base, &resp, 2000), MC_OK);
    assert_int_equal(((McRpc__CountResponse *)resp)->count, 0);
    mc_rpc_response_free(resp);
    McRpc__PollEventsRequest pq = MC_RPC__POLL_EVENTS_REQUEST__INIT;
    assert_int_equal(mc_rpc_client_call(ct, MC_OP_POLL_EVENTS, &pq.base, &resp, 2000), MC_OK);
    mc_rpc_response_free(resp);
    assert_int_equal(remove_all(ct), MC_OK);
    assert_int_equal(key_count(ct), 0);
    assert_int_equal(key_count(admin), 3); /* the cluster's keys are untouched */
    assert_int_equal(remove_all(admin), MC_OK);
    assert_int_equal(key_count(admin), 0);
    mc_rpc_client_destroy(ct);
    mc_rpc_client_destroy(admin);
    teardown(state);
    mc_auth_free(srv);
    mc_auth_free(a);
    mc_auth_free(t);
}

/* ---------------------------------------------------------------- timeouts, caps, budgets */

static void test_handshake_timeout(void **state)
{
    mc_auth_t *a = ring(SECRET_A);
    mc_rpc_limits_t lim = {.handshake_timeout_ms = 300};
    assert_int_equal(fixture_start_with(state, 0, a, &lim), 0);
    fixture_t *f = *state;
    int fd = raw_connect(f);
    uint64_t t0 = mc_now_ms();
    assert_true(closed_within(fd, 3000)); /* HELLO read and dropped, then EOF */
    assert_true(mc_now_ms() - t0 >= 250);
    close(fd);
    assert_int_equal(stats(f).closed_unauth, 1);
    teardown(state);
    mc_auth_free(a);
}

static void test_cap_evicts_unproven(void **state)
{
    mc_auth_t *a = ring(SECRET_A);
    mc_rpc_limits_t lim = {.max_conns = 8};
    assert_int_equal(fixture_start_with(state, 0, a, &lim), 0);
    fixture_t *f = *state;
    int fds[16];
    uint8_t hello[MC_AUTH_HELLO_SIZE];
    for (int i = 0; i < 12; i++) { /* more unproven connections than the cap */
        fds[i] = raw_connect(f);
        if (i < 8)
            assert_int_equal(mc_net_recv_all(fds[i], hello, sizeof(hello), dl_ms(2000)), MC_OK);
    }
    mc_rpc_client_t *c = client(f, a);
    assert_int_equal(get_key(c, "nothing"), MC_ERR_OBJECT_NOT_FOUND);
    assert_true(closed_within(fds[0], 2000)); /* the oldest went first */
    mc_rpc_server_stats_t st = stats(f);
    assert_true(st.closed_unauth >= 5);
    assert_int_equal(st.refused, 0);
    for (int i = 0; i < 12; i++)
        close(fds[i]);
    /* every slot held by authenticated connections: a new one is refused, the rest served */
    int held[8];
    for (int i = 0; i < 7; i++)
        held[i] = raw_connect_auth(f, a);
    int extra = raw_connect(f);
    assert_true(closed_within(extra, 2000));
    close(extra);
    assert_true(stats(f).refused >= 1);
    assert_int_equal(get_key(c, "nothing"), MC_ERR_OBJECT_NOT_FOUND);
    for (int i = 0; i < 7; i++)
        close(held[i]);
    mc_rpc_client_destroy(c);
    teardown(state);
    mc_auth_free(a);
}

static void test_idle_and_slow(void **state)
{
    mc_auth_t *a = ring(SECRET_A);
    mc_rpc_limits_t lim = {.idle_timeout_ms = 400, .slow_timeout_ms = 400};
    assert_int_equal(fixture_start_with(state, 0, a, &lim), 0);
    fixture_t *f = *state;
    /* idle: closed after the timeout */
    int idle = raw_connect_auth(f, a);
    uint64_t t0 = mc_now_ms();
    assert_true(closed_within(idle, 3000));
    assert_true(mc_now_ms() - t0 >= 350);
    close(idle);
    assert_int_equal(stats(f).closed_idle, 1);
    /* a long poll longer than the idle timeout is not idle: answered at its deadline */
    mc_rpc_client_t *c = client(f, a);
    McRpc__PollEventsRequest pq = MC_RPC__POLL_EVENTS_REQUEST__INIT;
    ProtobufCMessage *resp;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_POLL_EVENTS, &pq.base, &resp, 2000), MC_OK);
    pq.from_seq = ((McRpc__PollEventsResponse *)resp)->next_seq;
    pq.epoch = ((McRpc__PollEventsResponse *)resp)->epoch;
    mc_rpc_response_free(resp);
    pq.wait_ms = 1000;
    t0 = mc_now_ms();
    assert_int_equal(mc_rpc_client_call(c, MC_OP_POLL_EVENTS, &pq.base, &resp, 3000), MC_OK);
    assert_true(mc_now_ms() - t0 >= 900);
    assert_int_equal(((McRpc__PollEventsResponse *)resp)->n_events, 0);
    mc_rpc_response_free(resp);
    /* and its idle time starts at the answer: 1.5 sweeps later, well within the timeout, the
     * connection still serves (a sweep measuring from the request would have closed it) */
    mc_sleep_ms(150);
    pq.wait_ms = 0;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_POLL_EVENTS, &pq.base, &resp, 2000), MC_OK);
    mc_rpc_response_free(resp);
    assert_int_equal(stats(f).closed_idle, 1);
    mc_rpc_client_destroy(c);
    /* slow sender: a frame started and never finished */
    int slow = raw_connect_auth(f, a);
    mc_rpc_hdr_t h = {.opcode = MC_OP_EXIST_KEY, .body_len = 100, .req_id = 5};
    uint8_t b[MC_RPC_HDR_SIZE + 10] = {0};
    mc_rpc_hdr_encode(&h, b);
    assert_int_equal(mc_net_send_all(slow, b, sizeof(b), dl_ms(2000)), MC_OK);
    t0 = mc_now_ms();
    assert_true(closed_within(slow, 3000));
    assert_true(mc_now_ms() - t0 >= 350);
    close(slow);
    assert_int_equal(stats(f).closed_slow, 1);
    teardown(state);
    mc_auth_free(a);
}

static void test_budget_refuses_large_frame(void **state)
{
    mc_auth_t *a = ring(SECRET_A);
    mc_rpc_limits_t lim = {.mem_budget = 1u << 20};
    assert_int_equal(fixture_start_with(state, 0, a, &lim), 0);
    fixture_t *f = *state;
    int fd = raw_connect_auth(f, a);
    mc_rpc_hdr_t h = {.opcode = MC_OP_EXIST_KEY, .body_len = 8u << 20, .req_id = 9};
    uint8_t b[MC_RPC_HDR_SIZE + 1000] = {0};
    mc_rpc_hdr_encode(&h, b);
    assert_int_equal(mc_net_send_all(fd, b, sizeof(b), dl_ms(2000)), MC_OK);
    mc_rpc_hdr_t r;
    assert_int_equal(recv_status(fd, &r), MC_ERR_BUSY);
    assert_int_equal(r.req_id, 9);
    assert_true(closed_within(fd, 2000));
    close(fd);
    mc_rpc_server_stats_t st = stats(f);
    assert_int_equal(st.closed_budget, 1);
    assert_true(st.buffered_bytes < (64u << 10));
    /* a frame that fits is served */
    mc_rpc_client_t *c = client(f, a);
    assert_int_equal(get_key(c, "nothing"), MC_ERR_OBJECT_NOT_FOUND);
    mc_rpc_client_destroy(c);
    teardown(state);
    mc_auth_free(a);
}

static void test_inflight_cap(void **state)
{
    mc_auth_t *a = ring(SECRET_A);
    mc_rpc_limits_t lim = {.max_inflight = 2};
    assert_int_equal(fixture_start_with(state, 0, a, &lim), 0);
    fixture_t *f = *state;
    mc_rpc_client_t *c = client(f, a);
    McRpc__PollEventsRequest pq = MC_RPC__POLL_EVENTS_REQUEST__INIT;
    ProtobufCMessage *resp;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_POLL_EVENTS, &pq.base, &resp, 2000), MC_OK);
    pq.from_seq = ((McRpc__PollEventsResponse *)resp)->next_seq;
    pq.epoch = ((McRpc__PollEventsResponse *)resp)->epoch;
    mc_rpc_response_free(resp);
    pq.wait_ms = 1000;
    McRpc__KeyRequest kr = MC_RPC__KEY_REQUEST__INIT;
    kr.key = mc_wire_key_str("nothing");
    mc_rpc_pending_t p[4] = {
        {.opcode = MC_OP_POLL_EVENTS, .req = &pq.base},
        {.opcode = MC_OP_POLL_EVENTS, .req = &pq.base},
        {.opcode = MC_OP_POLL_EVENTS, .req = &pq.base}, /* third parked one: over the cap */
        {.opcode = MC_OP_EXIST_KEY, .req = &kr.base},   /* also while two are parked */
    };
    assert_int_equal(mc_rpc_client_call_many(c, p, 4, 3000), MC_OK);
    assert_int_equal(p[0].status, MC_OK);
    assert_int_equal(p[1].status, MC_OK);
    assert_int_equal(p[2].status, MC_ERR_BUSY);
    assert_int_equal(p[3].status, MC_ERR_BUSY);
    for (int i = 0; i < 4; i++)
        mc_rpc_response_free(p[i].resp);
    assert_int_equal(stats(f).busy, 2);
    /* answered: the connection takes requests again */
    assert_int_equal(get_key(c, "nothing"), MC_ERR_OBJECT_NOT_FOUND);
    mc_rpc_client_destroy(c);
    teardown(state);
    mc_auth_free(a);
}

/* A connection pipelines ListObjects and never reads the answers: it is paused (backpressure
 * counted), the server's buffered bytes stay under `bound`, another client is served
 * meanwhile, and the blocked timeout closes the connection. */
static void backpressure_case(void **state, const mc_rpc_limits_t *lim, size_t bound)
{
    mc_auth_t *a = ring(SECRET_A);
    assert_int_equal(fixture_start_with(state, 0, a, lim), 0);
    fixture_t *f = *state;
    mc_rpc_client_t *c = client(f, a);
    mount_seg_labelled(c, "h");
    char key[32];
    for (int i = 0; i < 200; i++) { /* ListObjects answers of a few KiB */
        snprintf(key, sizeof(key), "key-%04d", i);
        assert_int_equal(put_key(c, key), MC_OK);
    }
    int fd = raw_connect_auth(f, a);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    mc_net_set_nonblock(fd, 1);
    McRpc__ListObjectsRequest lo = MC_RPC__LIST_OBJECTS_REQUEST__INIT;
    uint8_t one[64];
    size_t n1 = frame(one, MC_OP_LIST_OBJECTS, 1, &lo.base);
    size_t total = 0;
    uint64_t end = mc_now_ms() + 400;
    while (mc_now_ms() < end) { /* until the kernel buffers are full too */
        ssize_t w = send(fd, one, n1, MSG_NOSIGNAL);
        if (w > 0)
            total += (size_t)w;
        else
            mc_sleep_ms(5);
    }
    assert_true(total > (64u << 10));
    uint64_t dl = mc_now_ms() + 5000;
    while (stats(f).backpressure == 0 && mc_now_ms() < dl)
        mc_sleep_ms(10);
    mc_rpc_server_stats_t st = stats(f);
    assert_true(st.backpressure >= 1);
    assert_true(st.buffered_bytes < bound);
    for (int i = 0; i < 20; i++) /* others are served meanwhile */
        assert_int_equal(get_key(c, "key-0001"), MC_OK);
    /* the counter and the released bytes are published separately: wait for both */
    dl = mc_now_ms() + 5000;
    while ((stats(f).closed_blocked == 0 || stats(f).buffered_bytes != 0) && mc_now_ms() < dl)
        mc_sleep_ms(20);
    assert_int_equal(stats(f).closed_blocked, 1);
    assert_int_equal(stats(f).buffered_bytes, 0);
    close(fd);
    mc_rpc_client_destroy(c);
    teardown(state);
    mc_auth_free(a);
}

/* Paused by the per-connection cap on queued answers: at most the cap plus one answer plus
 * one read's worth of requests stay buffered. */
static void test_backpressure_conn_cap(void **state)
{
    mc_rpc_limits_t lim = {.conn_out_cap = 64u << 10, .blocked_timeout_ms = 600};
    backpressure_case(state, &lim, (64u << 10) + (64u << 10) + (256u << 10) + 4096);
}

/* Paused by the server-wide budget (the connection's cap is far above it): over the budget a
 * connection with undelivered answers is not read, so the budget is overshot by at most one
 * answer plus one read. */
static void test_backpressure_budget(void **state)
{
    mc_rpc_limits_t lim = {.mem_budget = 128u << 10, .conn_out_cap = 64u << 20,
                           .blocked_timeout_ms = 600};
    backpressure_case(state, &lim, (128u << 10) + (64u << 10) + (256u << 10) + 4096);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_token_refused),
        cmocka_unit_test(test_wrong_token_refused),
        cmocka_unit_test(test_rotation),
        cmocka_unit_test(test_tenant_token_scoped),
        cmocka_unit_test(test_handshake_timeout),
        cmocka_unit_test(test_cap_evicts_unproven),
        cmocka_unit_test(test_idle_and_slow),
        cmocka_unit_test(test_budget_refuses_large_frame),
        cmocka_unit_test(test_inflight_cap),
        cmocka_unit_test(test_backpressure_conn_cap),
        cmocka_unit_test(test_backpressure_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
