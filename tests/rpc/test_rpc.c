/* RPC layer: frame codec, server loop + client against the master handlers in-process, bad
 * frames, unknown opcodes, pipelining, deadlines and reconnects, the client's busy-poll skipped
 * for slow answers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/net.h"
#include "common/time.h"
#include "master/service.h"
#include "rpc/frame.h"
#include "rpc/rpc_client.h"
#include "rpc/wire_key.h"
#include "master_fixture.h"

#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void test_frame_codec(void **state)
{
    (void)state;
    uint8_t b[32];
    mc_rpc_hdr_t h = {.opcode = 41, .flags = 1, .status = -704, .body_len = 1234,
                      .req_id = 0x1122334455667788ull};
    mc_rpc_hdr_encode(&h, b);
    assert_memory_equal(b, "MCRP", 4);
    mc_rpc_hdr_t d;
    assert_int_equal(mc_rpc_hdr_decode(b, MC_RPC_MAX_BODY, &d), MC_OK);
    assert_int_equal(d.opcode, 41);
    assert_int_equal(d.flags, 1);
    assert_int_equal(d.status, -704);
    assert_int_equal(d.body_len, 1234);
    assert_true(d.req_id == 0x1122334455667788ull);
    assert_true(d.view == 0); /* no view: the once reserved bytes stay 0 */
    for (int i = 10; i < 12; i++)
        assert_int_equal(b[i], 0);
    for (int i = 28; i < 32; i++)
        assert_int_equal(b[i], 0);
    /* an HA view: 48 bits, bits 32..47 at offset 10, bits 0..31 at offset 28 */
    h.view = 0xABCD12345678ull;
    mc_rpc_hdr_encode(&h, b);
    assert_int_equal(b[10], 0xCD);
    assert_int_equal(b[11], 0xAB);
    assert_int_equal(b[28], 0x78);
    assert_int_equal(b[31], 0x12);
    assert_int_equal(mc_rpc_hdr_decode(b, MC_RPC_MAX_BODY, &d), MC_OK);
    assert_true(d.view == 0xABCD12345678ull);
    assert_true(d.req_id == 0x1122334455667788ull && d.status == -704);
    assert_int_equal(mc_rpc_hdr_decode(b, 1000, &d), MC_ERR_TOO_LARGE);
    b[4] = 9; /* version */
    assert_int_equal(mc_rpc_hdr_decode(b, MC_RPC_MAX_BODY, &d), MC_ERR_PROTOCOL);
    b[0] = 'X';
    assert_int_equal(mc_rpc_hdr_decode(b, MC_RPC_MAX_BODY, &d), MC_ERR_PROTOCOL);
}

static int setup(void **state)
{
    return fixture_start(state, 0);
}

static void mount_seg(mc_rpc_client_t *c)
{
    mount_seg_labelled(c, "h");
}

static void test_put_get_over_rpc(void **state)
{
    fixture_t *f = *state;
    mc_rpc_client_t *c;
    assert_int_equal(mc_rpc_client_create(f->addr, NULL, &c), MC_OK);
    mount_seg(c);
    McRpc__PutStartRequest ps = MC_RPC__PUT_START_REQUEST__INIT;
    ps.client_id = (ProtobufCBinaryData){16, CID};
    ps.key = mc_wire_key_str("hello");
    ps.value_size = 4096;
    ProtobufCMessage *resp;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_PUT_START, &ps.base, &resp, 2000), MC_OK);
    McRpc__PutStartResponse *psr = (void *)resp;
    assert_int_equal(psr->status, MC_OK);
    assert_int_equal(psr->n_replicas, 1);
    assert_string_equal(psr->replicas[0]->segment_name, "seg0");
    assert_string_equal(psr->replicas[0]->transport_endpoint, "127.0.0.1:1234");
    assert_int_equal(psr->replicas[0]->status, MC_RPC__REPLICA_STATUS__REPLICA_PROCESSING);
    uint64_t addr = psr->replicas[0]->buffer_address;
    mc_rpc_response_free(resp);
    McRpc__PutEndRequest pe = MC_RPC__PUT_END_REQUEST__INIT;
    pe.client_id = (ProtobufCBinaryData){16, CID};
    pe.key = mc_wire_key_str("hello");
    pe.checksum = 0x1234567890abcdefull;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_PUT_END, &pe.base, &resp, 2000), MC_OK);
    assert_int_equal(((McRpc__StatusResponse *)resp)->status, MC_OK);
    mc_rpc_response_free(resp);
    McRpc__KeyRequest kr = MC_RPC__KEY_REQUEST__INIT;
    kr.key = mc_wire_key_str("hello");
    assert_int_equal(mc_rpc_client_call(c, MC_OP_GET_REPLICA_LIST, &kr.base, &resp, 2000), MC_OK);
    McRpc__ReplicaListResponse *rl = (void *)resp;
    assert_int_equal(rl->status, MC_OK);
    assert_int_equal(rl->n_replicas, 1);
    assert_true(rl->replicas[0]->buffer_address == addr);
    assert_int_equal(rl->replicas[0]->status, MC_RPC__REPLICA_STATUS__REPLICA_COMPLETE);
    assert_true(rl->checksum == 0x1234567890abcdefull);
    assert_int_equal(rl->size, 4096);
    assert_int_equal(rl->lease_ttl_ms, 10000);
    mc_rpc_response_free(resp);
    /* empty key */
    kr.key = mc_wire_key_str("");
    assert_int_equal(mc_rpc_client_call(c, MC_OP_EXIST_KEY, &kr.base, &resp, 2000), MC_OK);
    assert_int_equal(((McRpc__StatusResponse *)resp)->status, MC_ERR_INVALID_KEY);
    mc_rpc_response_free(resp);
    /* batch exist, pipelined singles */
    ProtobufCBinaryData keys[200];
    char kbuf[200][16];
    for (int i = 0; i < 200; i++) {
        snprintf(kbuf[i], 16, i % 2 ? "hello" : "k%d", i);
        keys[i] = mc_wire_key_str(kbuf[i]);
    }
    McRpc__BatchKeyRequest bk = MC_RPC__BATCH_KEY_REQUEST__INIT;
    bk.keys = keys;
    bk.n_keys = 200;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_BATCH_EXIST_KEY, &bk.base, &resp, 2000), MC_OK);
    McRpc__BatchStatusResponse *bs = (void *)resp;
    assert_int_equal(bs->n_statuses, 200);
    for (int i = 0; i < 200; i++)
        assert_int_equal(bs->statuses[i], i % 2 ? MC_OK : MC_ERR_OBJECT_NOT_FOUND);
    mc_rpc_response_free(resp);
    McRpc__KeyRequest krs[64];
    mc_rpc_pending_t pend[64];
    for (int i = 0; i < 64; i++) {
        mc_rpc__key_request__init(&krs[i]);
        krs[i].key = mc_wire_key_str(kbuf[i]);
        pend[i] = (mc_rpc_pending_t){.opcode = MC_OP_EXIST_KEY, .req = &krs[i].base};
    }
    assert_int_equal(mc_rpc_client_call_many(c, pend, 64, 2000), MC_OK);
    for (int i = 0; i < 64; i++) {
        assert_int_equal(pend[i].status, MC_OK);
        assert_int_equal(((McRpc__StatusResponse *)pend[i].resp)->status,
                         i % 2 ? MC_OK : MC_ERR_OBJECT_NOT_FOUND);
        mc_rpc_response_free(pend[i].resp);
    }
    /* BatchReplicaClear: "hello" is leased (read above), the others cannot be cleared */
    ProtobufCBinaryData ck[3] = {mc_wire_key_str("hello"), mc_wire_key_str("k0"),
                                 mc_wire_key_str("")};
    McRpc__BatchReplicaClearRequest rc = MC_RPC__BATCH_REPLICA_CLEAR_REQUEST__INIT;
    rc.client_id = (ProtobufCBinaryData){16, CID};
    rc.keys = ck;
    rc.n_keys = 3;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_BATCH_REPLICA_CLEAR, &rc.base, &resp, 2000),
                     MC_OK);
    bs = (void *)resp;
    assert_int_equal(bs->status, MC_OK);
    assert_int_equal(bs->n_statuses, 3);
    assert_int_equal(bs->statuses[0], MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(bs->statuses[1], MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(bs->statuses[2], MC_ERR_INVALID_KEY);
    mc_rpc_response_free(resp);
    rc.segment_name = "seg0";
    rc.client_id = (ProtobufCBinaryData){3, CID}; /* not a client id */
    assert_int_equal(mc_rpc_client_call(c, MC_OP_BATCH_REPLICA_CLEAR, &rc.base, &resp, 2000),
                     MC_OK);
    bs = (void *)resp;
    assert_int_equal(bs->status, MC_ERR_INVALID_PARAMS);
    assert_int_equal(bs->statuses[0], MC_ERR_INVALID_PARAMS);
    mc_rpc_response_free(resp);
    /* wrong message type for the opcode is refused locally */
    assert_int_equal(mc_rpc_client_call(c, MC_OP_PUT_END, &kr.base, &resp, 2000),
                     MC_ERR_INVALID_PARAMS);
    mc_rpc_client_destroy(c);
}

/* Raw socket helpers: a connection that has passed the auth handshake (no keyring). */
static int raw_connect(const char *addr)
{
    char host[256];
    uint16_t port;
    assert_int_equal(mc_net_split_hostport(addr, host, &port), MC_OK);
    int fd;
    assert_int_equal(mc_auth_connect(host, port, 2000, NULL, &fd), MC_OK);
    return fd;
}

static void raw_send(int fd, uint32_t magic_ok, uint16_t version, uint16_t opcode,
                     uint32_t body_len, const void *body, size_t send_body)
{
    uint8_t h[32];
    mc_rpc_hdr_t hdr = {.opcode = opcode, .body_len = body_len, .req_id = 77};
    mc_rpc_hdr_encode(&hdr, h);
    if (!magic_ok)
        h[0] = 'Z';
    h[4] = (uint8_t)version;
    assert_int_equal(mc_net_send_all(fd, h, 32, mc_now_ns() + 2000000000ull), MC_OK);
    if (send_body)
        assert_int_equal(mc_net_send_all(fd, body, send_body, mc_now_ns() + 2000000000ull), MC_OK);
}

static int32_t raw_recv_status(int fd, mc_rpc_hdr_t *h)
{
    uint8_t b[32];
    if (mc_net_recv_all(fd, b, 32, mc_now_ns() + 2000000000ull) != MC_OK)
        return 1;
    assert_int_equal(mc_rpc_hdr_decode(b, MC_RPC_MAX_BODY, h), MC_OK);
    assert_true(h->flags & MC_RPC_FLAG_RESPONSE);
    uint8_t skip[4096];
    if (h->body_len)
        assert_int_equal(mc_net_recv_all(fd, skip, h->body_len, mc_now_ns() + 2000000000ull), MC_OK);
    return h->status;
}

static int peer_closed(int fd)
{
    uint8_t b;
    uint64_t dl = mc_now_ns() + 2000000000ull;
    return mc_net_recv_all(fd, &b, 1, dl) == MC_ERR_CONNECTION;
}

/* mc_rpc_client_call_send / call_recv: the answer waits while the caller works; the
 * connection stays held in between (nowait gets MC_ERR_BUSY, nothing sent), and is usable
 * again after recv; a recv long after the send still takes the waiting answer (its deadline
 * counts from the recv). */
static void test_call_halves(void **state)
{
    fixture_t *f = *state;
    mc_rpc_client_t *c;
    assert_int_equal(mc_rpc_client_create(f->addr, NULL, &c), MC_OK);
    McRpc__KeyRequest kr = MC_RPC__KEY_REQUEST__INIT;
    kr.key = mc_wire_key_str("absent");
    mc_rpc_pending_t p = {.opcode = MC_OP_EXIST_KEY, .req = &kr.base};
    mc_rpc_inflight_t fl;
    assert_int_equal(mc_rpc_client_call_send(c, &p, 1, 100, false, &fl), MC_OK);
    /* held: another send with nowait is refused at once */
    mc_rpc_pending_t p2 = {.opcode = MC_OP_EXIST_KEY, .req = &kr.base};
    mc_rpc_inflight_t fl2;
    assert_int_equal(mc_rpc_client_call_send(c, &p2, 1, 100, true, &fl2), MC_ERR_BUSY);
    usleep(300 * 1000); /* longer than the 100 ms timeout: the recv's deadline starts now */
    assert_int_equal(mc_rpc_client_call_recv(&fl), MC_OK);
    assert_int_equal(p.status, MC_OK);
    assert_int_equal(((McRpc__StatusResponse *)p.resp)->status, MC_ERR_OBJECT_NOT_FOUND);
    mc_rpc_response_free(p.resp);
    /* released: nowait now succeeds, and a plain call follows on the same connection */
    assert_int_equal(mc_rpc_client_call_send(c, &p2, 1, 2000, true, &fl2), MC_OK);
    assert_int_equal(mc_rpc_client_call_recv(&fl2), MC_OK);
    mc_rpc_response_free(p2.resp);
    ProtobufCMessage *resp = NULL;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_EXIST_KEY, &kr.base, &resp, 2000), MC_OK);
    mc_rpc_response_free(resp);
    mc_rpc_client_destroy(c);
}

static void test_bad_frames(void **state)
{
    fixture_t *f = *state;
    mc_rpc_client_t *good;
    assert_int_equal(mc_rpc_client_create(f->addr, NULL, &good), MC_OK);
    McRpc__ServiceReadyRequest sr = MC_RPC__SERVICE_READY_REQUEST__INIT;
    ProtobufCMessage *resp;
    mc_rpc_hdr_t h;
    /* unknown opcode: error, connection stays */
    int fd = raw_connect(f->addr);
    raw_send(fd, 1, 1, 63, 3, "abc", 3);
    assert_int_equal(raw_recv_status(fd, &h), MC_ERR_NOT_SUPPORTED);
    assert_int_equal(h.req_id, 77);
    raw_send(fd, 1, 1, 999, 0, NULL, 0);
    assert_int_equal(raw_recv_status(fd, &h), MC_ERR_NOT_SUPPORTED);
    /* undecodable body: error, connection stays */
    raw_send(fd, 1, 1, MC_OP_EXIST_KEY, 4, "\xff\xff\xff\xff", 4);
    assert_int_equal(raw_recv_status(fd, &h), MC_ERR_PROTOCOL);
    raw_send(fd, 1, 1, MC_OP_SERVICE_READY, 0, NULL, 0);
    assert_int_equal(raw_recv_status(fd, &h), MC_OK);
    close(fd);
    /* bad magic: error then close */
    fd = raw_connect(f->addr);
    raw_send(fd, 0, 1, MC_OP_PING, 0, NULL, 0);
    assert_int_equal(raw_recv_status(fd, &h), MC_ERR_PROTOCOL);
    assert_true(peer_closed(fd));
    close(fd);
    /* bad version */
    fd = raw_connect(f->addr);
    raw_send(fd, 1, 7, MC_OP_PING, 0, NULL, 0);
    assert_int_equal(raw_recv_status(fd, &h), MC_ERR_PROTOCOL);
    assert_true(peer_closed(fd));
    close(fd);
    /* oversized body_len */
    fd = raw_connect(f->addr);
    raw_send(fd, 1, 1, MC_OP_PING, MC_RPC_MAX_BODY + 1, NULL, 0);
    assert_int_equal(raw_recv_status(fd, &h), MC_ERR_TOO_LARGE);
    assert_true(peer_closed(fd));
    close(fd);
    /* truncated frame, then the peer goes away */
    fd = raw_connect(f->addr);
    raw_send(fd, 1, 1, MC_OP_EXIST_KEY, 100, "abcdef", 6);
    close(fd);
    fd = raw_connect(f->addr);
    assert_int_equal(send(fd, "MCR", 3, 0), 3);
    close(fd);
    /* another connection is served throughout */
    assert_int_equal(mc_rpc_client_call(good, MC_OP_SERVICE_READY, &sr.base, &resp, 2000), MC_OK);
    assert_int_equal(((McRpc__StatusResponse *)resp)->status, MC_OK);
    mc_rpc_response_free(resp);
    /* a batch over the cap is refused with a clear status */
    McRpc__BatchKeyRequest bk = MC_RPC__BATCH_KEY_REQUEST__INIT;
    static ProtobufCBinaryData keys[MC_RPC_MAX_BATCH + 1];
    for (size_t i = 0; i <= MC_RPC_MAX_BATCH; i++)
        keys[i] = mc_wire_key_str("k");
    bk.keys = keys;
    bk.n_keys = MC_RPC_MAX_BATCH + 1;
    assert_int_equal(mc_rpc_client_call(good, MC_OP_BATCH_EXIST_KEY, &bk.base, &resp, 5000), MC_OK);
    assert_int_equal(((McRpc__BatchStatusResponse *)resp)->status, MC_ERR_TOO_LARGE);
    mc_rpc_response_free(resp);
    mc_rpc_client_destroy(good);
}

/* Accepts one connection, passes its handshake (no keyring), then never answers. */
static void *silent_server(void *arg)
{
    int lfd = *(int *)arg;
    int fd = accept(lfd, NULL, NULL);
    char buf[4096];
    mc_auth_server_hs_t hs;
    uint8_t hello[MC_AUTH_HELLO_SIZE], proof[MC_AUTH_PROOF_SIZE], result[MC_AUTH_RESULT_SIZE];
    mc_auth_server_hello(NULL, &hs, hello);
    uint64_t dl = mc_now_ns() + 2000000000ull;
    if (fd >= 0 && (mc_net_send_all(fd, hello, sizeof(hello), dl) != MC_OK ||
                    mc_net_recv_all(fd, proof, sizeof(proof), dl) != MC_OK ||
                    mc_auth_server_check(NULL, &hs, proof, result, NULL) != MC_OK ||
                    mc_net_send_all(fd, result, sizeof(result), dl) != MC_OK)) {
        close(fd);
        return NULL;
    }
    while (fd >= 0 && recv(fd, buf, sizeof(buf), 0) > 0) {
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

static void test_timeout_and_reconnect(void **state)
{
    (void)state;
    int lfd;
    uint16_t port;
    assert_int_equal(mc_net_listen("127.0.0.1", 0, 0, &lfd, &port), MC_OK);
    pthread_t th;
    pthread_create(&th, NULL, silent_server, &lfd);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
    mc_rpc_client_t *c;
    assert_int_equal(mc_rpc_client_create(addr, NULL, &c), MC_OK);
    McRpc__ServiceReadyRequest sr = MC_RPC__SERVICE_READY_REQUEST__INIT;
    ProtobufCMessage *resp;
    uint64_t t0 = mc_now_ms();
    assert_int_equal(mc_rpc_client_call(c, MC_OP_SERVICE_READY, &sr.base, &resp, 200),
                     MC_ERR_RPC_TIMEOUT);
    assert_null(resp);
    assert_true(mc_now_ms() - t0 < 2000);
    pthread_join(th, NULL); /* our timeout closed the connection */
    close(lfd);
    /* nobody listening now */
    assert_int_equal(mc_rpc_client_call(c, MC_OP_SERVICE_READY, &sr.base, &resp, 500),
                     MC_ERR_RPC_FAIL);
    mc_rpc_client_destroy(c);
    assert_int_equal(mc_rpc_client_create("nonsense", NULL, &c), MC_ERR_INVALID_PARAMS);
}

/* HTTP threads (metrics snapshot, queries posted to the loop) while RPCs mutate the table:
 * run under TSan through the `threads` label. */
typedef struct load_arg {
    const char *addr;
    int stop;
    int ops;
} load_arg_t;

static void *rpc_load(void *p)
{
    load_arg_t *la = p;
    mc_rpc_client_t *c;
    if (mc_rpc_client_create(la->addr, NULL, &c) != MC_OK)
        return NULL;
    mount_seg(c);
    for (int i = 0; !__atomic_load_n(&la->stop, __ATOMIC_RELAXED) && i < 100000; i++) {
        char key[32];
        snprintf(key, sizeof(key), "load%d", i % 500);
        McRpc__PutStartRequest ps = MC_RPC__PUT_START_REQUEST__INIT;
        ps.client_id = (ProtobufCBinaryData){16, CID};
        ps.key = mc_wire_key_str(key);
        ps.value_size = 4096;
        McRpc__PutEndRequest pe = MC_RPC__PUT_END_REQUEST__INIT;
        pe.client_id = ps.client_id;
        pe.key = mc_wire_key_str(key);
        McRpc__KeyRequest rm = MC_RPC__KEY_REQUEST__INIT;
        rm.key = mc_wire_key_str(key);
        rm.force = true;
        mc_rpc_pending_t p3[3] = {{.opcode = MC_OP_PUT_START, .req = &ps.base},
                                  {.opcode = MC_OP_PUT_END, .req = &pe.base},
                                  {.opcode = i % 3 ? MC_OP_GET_REPLICA_LIST : MC_OP_REMOVE,
                                   .req = &rm.base}};
        if (mc_rpc_client_call_many(c, p3, 3, 5000) != MC_OK)
            break;
        for (int k = 0; k < 3; k++)
            mc_rpc_response_free(p3[k].resp);
        __atomic_add_fetch(&la->ops, 1, __ATOMIC_RELAXED);
    }
    mc_rpc_client_destroy(c);
    return NULL;
}

static void test_http_concurrent(void **state)
{
    (void)state;
    fixture_t *f = calloc(1, sizeof(*f));
    mc_master_service_opts_t o = {.rpc_address = "127.0.0.1", .port = 0, .metrics_port = 0,
                                  .metrics_address = "127.0.0.1"};
    mc_master_config_default(&o.cfg);
    assert_int_equal(mc_master_service_create(&o, &f->svc), MC_OK);
    snprintf(f->addr, sizeof(f->addr), "127.0.0.1:%u", mc_master_service_port(f->svc));
    pthread_create(&f->th, NULL, run_svc, f);
    load_arg_t la = {.addr = f->addr};
    pthread_t lt;
    pthread_create(&lt, NULL, rpc_load, &la);
    uint16_t mport = mc_master_service_metrics_port(f->svc);
    const char *paths[6] = {"/metrics", "/query_key?key=load1", "/get_all_segments",
                            "/metrics/summary", "/get_all_keys",
                            "/batch_query_keys?keys=load1,load2"};
    int ok = 0;
    for (int i = 0; i < 18; i++) {
        char cmd[256], buf[256];
        snprintf(cmd, sizeof(cmd), "curl -s -o /dev/null -w '%%{http_code}' -m 5 'http://127.0.0.1:%u%s'",
                 mport, paths[i % 6]);
        FILE *pp = popen(cmd, "r");
        assert_non_null(pp);
        size_t n = fread(buf, 1, sizeof(buf) - 1, pp);
        buf[n] = 0;
        pclose(pp);
        ok += strcmp(buf, "200") == 0 || strcmp(buf, "404") == 0;
    }
    assert_int_equal(ok, 18);
    __atomic_store_n(&la.stop, 1, __ATOMIC_RELAXED);
    pthread_join(lt, NULL);
    assert_true(__atomic_load_n(&la.ops, __ATOMIC_RELAXED) > 0);
    mc_master_service_stop(f->svc);
    pthread_join(f->th, NULL);
    mc_master_service_destroy(f->svc);
    free(f);
}

static void test_reconnect_after_restart(void **state)
{
    (void)state;
    fixture_t *f;
    assert_int_equal(setup((void **)&f), 0);
    mc_rpc_client_t *c;
    assert_int_equal(mc_rpc_client_create(f->addr, NULL, &c), MC_OK);
    McRpc__ServiceReadyRequest sr = MC_RPC__SERVICE_READY_REQUEST__INIT;
    ProtobufCMessage *resp;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_SERVICE_READY, &sr.base, &resp, 1000), MC_OK);
    mc_rpc_response_free(resp);
    char addr[64];
    strcpy(addr, f->addr);
    teardown((void **)&f);
    assert_int_not_equal(mc_rpc_client_call(c, MC_OP_SERVICE_READY, &sr.base, &resp, 500), MC_OK);
    mc_rpc_client_destroy(c);
}

/* ---- held replies (before_reply tickets): a bare server whose before_reply holds every
 * iteration's answers with a new ticket; ServiceReady handler notes the ticket of each call */
static _Atomic uint64_t g_ticket;          /* the last ticket handed out (loop thread) */
static _Atomic uint64_t g_req_ticket[8];   /* req_id -> the ticket its answer waits for */
static _Atomic int g_handled;

static mc_status_t held_handler(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                ProtobufCMessage **resp_p)
{
    (void)ctx;
    (void)req;
    static McRpc__StatusResponse r = MC_RPC__STATUS_RESPONSE__INIT;
    call->light = call->req_id >= 100; /* the light ones of test_light_replies */
    if (call->req_id < 8)
        g_req_ticket[call->req_id] = g_ticket + 1; /* this iteration's */
    g_handled++;
    *resp_p = &r.base;
    return MC_OK;
}

static _Atomic uint64_t g_light_ticket; /* set by the test: light answers wait for it */

static uint64_t held_before_reply(void *ctx, uint64_t *light_p)
{
    (void)ctx;
    *light_p = g_light_ticket;
    return ++g_ticket;
}

static void *held_run(void *arg)
{
    mc_rpc_server_run(arg);
    return NULL;
}

static void held_send(int fd, uint64_t req_id)
{
    uint8_t h[32];
    mc_rpc_hdr_t hdr = {.opcode = MC_OP_SERVICE_READY, .req_id = req_id};
    mc_rpc_hdr_encode(&hdr, h);
    assert_int_equal(mc_net_send_all(fd, h, 32, mc_now_ns() + 2000000000ull), MC_OK);
}

/* The next answer's req_id, 0 when none comes within ms. */
static uint64_t held_recv(int fd, uint32_t ms)
{
    uint8_t b[32];
    if (mc_net_recv_all(fd, b, 32, mc_now_ns() + (uint64_t)ms * 1000000ull) != MC_OK)
        return 0;
    mc_rpc_hdr_t h;
    assert_int_equal(mc_rpc_hdr_decode(b, MC_RPC_MAX_BODY, &h), MC_OK);
    assert_int_equal(h.status, MC_OK);
    uint8_t body[64];
    assert_true(h.body_len <= sizeof(body));
    if (h.body_len)
        assert_int_equal(mc_net_recv_all(fd, body, h.body_len, mc_now_ns() + 2000000000ull),
                         MC_OK);
    return h.req_id;
}

/* A running held-replies server whose ServiceReady handler is h (the counters reset), and the
 * test's connection to it. */
typedef struct held_srv {
    mc_rpc_server_t *srv;
    pthread_t th;
    char addr[64];
} held_srv_t;

static void held_start(held_srv_t *hs, mc_rpc_handler_fn h)
{
    g_ticket = 0;
    g_handled = 0;
    g_light_ticket = 0;
    mc_rpc_server_opts_t so = {.host = "127.0.0.1", .before_reply = held_before_reply};
    so.handlers[MC_OP_SERVICE_READY] = h;
    assert_int_equal(mc_rpc_server_create(&so, &hs->srv), MC_OK);
    assert_int_equal(pthread_create(&hs->th, NULL, held_run, hs->srv), 0);
    snprintf(hs->addr, sizeof(hs->addr), "127.0.0.1:%u", mc_rpc_server_port(hs->srv));
}

static void held_stop(held_srv_t *hs)
{
    mc_rpc_server_stop(hs->srv);
    pthread_join(hs->th, NULL);
    mc_rpc_server_destroy(hs->srv);
}

/* Waits (at most 5 s) until the handler has run n times. */
static void held_wait_handled(int n)
{
    for (uint64_t dl = mc_now_ms() + 5000; g_handled < n && mc_now_ms() < dl;)
        mc_sleep_ms(1);
}

/* Answers held for a ticket leave only once it is released, in the order they were queued,
 * and only those of released tickets. */
static void test_held_replies(void **state)
{
    (void)state;
    held_srv_t hs;
    held_start(&hs, held_handler);
    int fd = raw_connect(hs.addr);
    for (uint64_t id = 1; id <= 3; id++) { /* one request per loop iteration: three tickets */
        held_send(fd, id);
        held_wait_handled((int)id);
        assert_int_equal(g_handled, (int)id);
    }
    assert_int_equal(held_recv(fd, 300), 0); /* all held */
    assert_true(g_req_ticket[1] < g_req_ticket[2] && g_req_ticket[2] < g_req_ticket[3]);
    mc_rpc_server_release(hs.srv, g_req_ticket[2]);
    assert_int_equal(held_recv(fd, 2000), 1);
    assert_int_equal(held_recv(fd, 2000), 2);
    assert_int_equal(held_recv(fd, 300), 0); /* the third waits for its own ticket */
    mc_rpc_server_release(hs.srv, g_req_ticket[3]);
    assert_int_equal(held_recv(fd, 2000), 3);
    close(fd);
    held_stop(&hs);
}

/* A light answer (mc_rpc_call_t.light) waits only for before_reply's light ticket; one
 * queued behind a held answer of its connection waits for that one (order). */
static void test_light_replies(void **state)
{
    (void)state;
    held_srv_t hs;
    held_start(&hs, held_handler);
    int fd = raw_connect(hs.addr), fd2 = raw_connect(hs.addr);
    held_send(fd, 100); /* light, nothing to wait for: leaves at once */
    assert_int_equal(held_recv(fd, 2000), 100);
    held_send(fd, 1); /* held for its ticket */
    held_wait_handled(2);
    held_send(fd, 101); /* light, but behind 1 on its connection */
    held_send(fd2, 102); /* light, on another connection: not held */
    assert_int_equal(held_recv(fd2, 2000), 102);
    assert_int_equal(held_recv(fd, 300), 0);
    g_light_ticket = g_ticket + 1; /* from now on light answers wait for the next ticket */
    held_send(fd2, 103);
    held_wait_handled(5);
    assert_int_equal(g_handled, 5);
    assert_int_equal(held_recv(fd2, 300), 0);
    mc_rpc_server_release(hs.srv, g_req_ticket[1]);
    assert_int_equal(held_recv(fd, 2000), 1);
    assert_int_equal(held_recv(fd, 2000), 101);
    assert_int_equal(held_recv(fd2, 300), 0); /* its own (light) ticket is later */
    mc_rpc_server_release(hs.srv, g_light_ticket);
    assert_int_equal(held_recv(fd2, 2000), 103);
    close(fd);
    close(fd2);
    held_stop(&hs);
}

/* The loop thread's write() calls so far (/proc/thread-self/io syscw; sends on sockets are
 * not counted there, an eventfd wake-up is). */
static uint64_t thread_syscw(void)
{
    FILE *f = fopen("/proc/thread-self/io", "r");
    char line[128];
    uint64_t v = UINT64_MAX;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "syscw: %" SCNu64, &v) == 1)
            break;
    if (f)
        fclose(f);
    return v;
}

static _Atomic uint64_t g_syscw[8]; /* req_id -> the loop thread's syscw in its handler */

/* As held_handler, and releases the ticket of the request before it from the loop thread (as
 * an HaFetch acknowledging records does). */
static mc_status_t releasing_handler(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                     ProtobufCMessage **resp_p)
{
    if (call->req_id > 1 && call->req_id < 8)
        mc_rpc_server_release(call->srv, g_req_ticket[call->req_id - 1]);
    if (call->req_id < 8)
        g_syscw[call->req_id] = thread_syscw();
    return held_handler(ctx, call, req, resp_p);
}

/* A release made on the loop thread (from a handler) sends the held answers in that same
 * iteration and writes no eventfd wake-up (which would cost a write, a read and an extra
 * loop iteration). */
static void test_release_on_loop_thread(void **state)
{
    (void)state;
    held_srv_t hs;
    held_start(&hs, releasing_handler);
    int fd = raw_connect(hs.addr);
    held_send(fd, 1);
    held_wait_handled(1);
    assert_int_equal(held_recv(fd, 300), 0); /* held for its ticket */
    for (uint64_t id = 2; id <= 6; id++) {
        held_send(fd, id); /* its handler releases id - 1 */
        assert_int_equal(held_recv(fd, 2000), id - 1);
    }
    assert_int_not_equal(g_syscw[2], UINT64_MAX);
    assert_int_equal(g_syscw[6] - g_syscw[2], 0); /* no wake-up written in between */
    mc_rpc_server_release(hs.srv, g_req_ticket[6]); /* from another thread: wakes the loop */
    assert_int_equal(held_recv(fd, 2000), 6);
    close(fd);
    held_stop(&hs);
}

/* Answers Ping after SLOW_US (the loop thread sleeps: a slow master). */
#define SLOW_US 5000
static mc_status_t slow_ping(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                             ProtobufCMessage **resp_p)
{
    (void)ctx;
    (void)req;
    usleep(SLOW_US);
    McRpc__PingResponse *r = mc_rpc_arena_calloc(call->arena, 1, sizeof(*r));
    mc_rpc__ping_response__init(r);
    *resp_p = &r->base;
    return MC_OK;
}

static void *slow_run(void *srv)
{
    mc_rpc_server_run(srv);
    return NULL;
}

static double thread_cpu_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* A server on 127.0.0.1 whose Ping handler is h, its loop on *th; its address in addr. */
static mc_rpc_server_t *ping_server(mc_rpc_handler_fn h, pthread_t *th, char *addr, size_t n)
{
    mc_rpc_server_opts_t so = {.host = "127.0.0.1"};
    so.handlers[MC_OP_PING] = h;
    mc_rpc_server_t *srv;
    assert_int_equal(mc_rpc_server_create(&so, &srv), MC_OK);
    assert_int_equal(pthread_create(th, NULL, slow_run, srv), 0);
    snprintf(addr, n, "127.0.0.1:%u", mc_rpc_server_port(srv));
    return srv;
}

static void ping_server_stop(mc_rpc_server_t *srv, pthread_t th)
{
    mc_rpc_server_stop(srv);
    pthread_join(th, NULL);
    mc_rpc_server_destroy(srv);
}

/* A lone call whose answers have been taking longer than the busy-poll budget and than
 * MC_RPC_SPIN_AHEAD_NS sleeps at once instead of spinning the budget away (mc_rpc_spin_for):
 * with a 2 ms budget and answers 5 ms after the send, ten calls after the first (which spins:
 * nothing learnt yet) use far less CPU than the 20 ms that spinning would. */
static void test_slow_answers_not_spun_for(void **state)
{
    (void)state;
    uint32_t saved = (uint32_t)(mc_net_busy_poll_ns() / 1000);
    mc_net_set_busy_poll_us(2000);
    pthread_t th;
    char addr[64];
    mc_rpc_server_t *srv = ping_server(slow_ping, &th, addr, sizeof(addr));
    mc_rpc_client_t *c;
    assert_int_equal(mc_rpc_client_create(addr, NULL, &c), MC_OK);
    McRpc__PingRequest q = MC_RPC__PING_REQUEST__INIT;
    ProtobufCMessage *resp;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_PING, &q.base, &resp, 5000), MC_OK);
    mc_rpc_response_free(resp);
    double cpu0 = thread_cpu_us();
    uint64_t t0 = mc_now_ns();
    for (int i = 0; i < 10; i++) {
        assert_int_equal(mc_rpc_client_call(c, MC_OP_PING, &q.base, &resp, 5000), MC_OK);
        mc_rpc_response_free(resp);
    }
    double cpu = thread_cpu_us() - cpu0;
    assert_true(mc_now_ns() - t0 >= 10ull * SLOW_US * 1000); /* they were slow */
    assert_true(cpu < 10 * 500);                             /* and not spun for */
    mc_rpc_client_destroy(c);
    ping_server_stop(srv, th);
    mc_net_set_busy_poll_us(saved);
}

/* Answers Ping at once. */
static mc_status_t quick_ping(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                              ProtobufCMessage **resp_p)
{
    (void)ctx;
    (void)req;
    McRpc__PingResponse *r = mc_rpc_arena_calloc(call->arena, 1, sizeof(*r));
    mc_rpc__ping_response__init(r);
    *resp_p = &r->base;
    return MC_OK;
}

static double clock_cpu_us(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* A server with busy_poll_us answers as any other, and once its last request is further back
 * than the spin it sleeps: over 300 ms without requests its loop thread uses a small part of
 * the CPU that spinning through them would (300 ms; at least a tenth of that even on a loaded
 * machine). busy_poll_us above the cap is taken as the cap. */
static void test_busy_poll_serves_then_sleeps(void **state)
{
    (void)state;
    mc_rpc_server_opts_t so = {.host = "127.0.0.1", .busy_poll_us = MC_RPC_BUSY_POLL_MAX_US * 10};
    so.handlers[MC_OP_PING] = quick_ping;
    mc_rpc_server_t *srv;
    assert_int_equal(mc_rpc_server_create(&so, &srv), MC_OK);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, slow_run, srv), 0);
    clockid_t loop_clock;
    assert_int_equal(pthread_getcpuclockid(th, &loop_clock), 0);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", mc_rpc_server_port(srv));
    mc_rpc_client_t *c;
    assert_int_equal(mc_rpc_client_create(addr, NULL, &c), MC_OK);
    McRpc__PingRequest q = MC_RPC__PING_REQUEST__INIT;
    for (int i = 0; i < 50; i++) {
        ProtobufCMessage *resp = NULL;
        assert_int_equal(mc_rpc_client_call(c, MC_OP_PING, &q.base, &resp, 5000), MC_OK);
        assert_non_null(resp);
        mc_rpc_response_free(resp);
    }
    double cpu0 = clock_cpu_us(loop_clock);
    usleep(300 * 1000); /* the idle period measured, not a wait for an event */
    double idle_cpu = clock_cpu_us(loop_clock) - cpu0;
    assert_true(idle_cpu < 30 * 1000); /* 10 ms of spin at most, then cron wake-ups */
    mc_rpc_client_destroy(c);
    mc_rpc_server_stop(srv);
    pthread_join(th, NULL);
    mc_rpc_server_destroy(srv);
}

/* ---- fairness: a connection's turn in a loop iteration is bounded in handler time too */
#define FAIR_PIPELINED 500
#define FAIR_COST_US 100 /* what each pipelined request costs the loop */
static _Atomic int g_fair_log[FAIR_PIPELINED + 1]; /* the order the handler saw requests in */
static _Atomic int g_fair_n;
static _Atomic bool g_fair_entered, g_fair_gate;

/* Ping: notes its req_id in arrival order; the first request waits for the test's gate, so
 * that everything the test sends meanwhile is buffered when the loop goes on; the pipelined
 * ones (req_id < 100000) each keep the loop busy for FAIR_COST_US. */
static mc_status_t fair_ping(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                             ProtobufCMessage **resp_p)
{
    if (call->req_id == 1) {
        atomic_store(&g_fair_entered, true);
        for (uint64_t dl = mc_now_ms() + 5000; !atomic_load(&g_fair_gate) && mc_now_ms() < dl;)
            mc_sleep_ms(1);
    }
    int i = atomic_fetch_add(&g_fair_n, 1);
    if (i <= FAIR_PIPELINED)
        g_fair_log[i] = (int)call->req_id;
    if (call->req_id < 100000)
        for (uint64_t until = mc_now_ns() + FAIR_COST_US * 1000ull; mc_now_ns() < until;)
            ; /* a costly request with a small answer (as a ListObjects of a large table) */
    return quick_ping(ctx, call, req, resp_p);
}

/* One connection pipelines FAIR_PIPELINED requests with small answers (far under the byte
 * quota) that cost the loop FAIR_COST_US each; a request on another connection that arrives
 * while the loop works through them is served after a few iterations' worth of them
 * (SRV_ITER_NS of handler time each), not after all of them (50 ms). */
static void test_pipelined_connection_bounded_per_iteration(void **state)
{
    (void)state;
    g_fair_n = 0;
    g_fair_entered = g_fair_gate = false;
    pthread_t th;
    char addr[64];
    mc_rpc_server_t *srv = ping_server(fair_ping, &th, addr, sizeof(addr));
    int greedy = raw_connect(addr), other = raw_connect(addr);
    McRpc__PingRequest q = MC_RPC__PING_REQUEST__INIT;
    size_t blen = protobuf_c_message_get_packed_size(&q.base), flen = MC_RPC_HDR_SIZE + blen;
    uint8_t *frames = calloc(FAIR_PIPELINED, flen);
    assert_non_null(frames);
    for (int i = 0; i < FAIR_PIPELINED; i++) {
        mc_rpc_hdr_t h = {.opcode = MC_OP_PING, .body_len = (uint32_t)blen,
                          .req_id = (uint64_t)i + 1};
        mc_rpc_hdr_encode(&h, frames + (size_t)i * flen);
        protobuf_c_message_pack(&q.base, frames + (size_t)i * flen + MC_RPC_HDR_SIZE);
    }
    uint64_t dl = mc_now_ns() + 2000000000ull;
    assert_int_equal(mc_net_send_all(greedy, frames, flen, dl), MC_OK); /* request 1 */
    for (uint64_t t = mc_now_ms() + 5000; !atomic_load(&g_fair_entered) && mc_now_ms() < t;)
        mc_sleep_ms(1);
    assert_true(atomic_load(&g_fair_entered));
    /* the rest of the pipeline and then the other connection's request, both while the loop
     * is held in request 1 */
    assert_int_equal(mc_net_send_all(greedy, frames + flen, (FAIR_PIPELINED - 1) * flen, dl),
                     MC_OK);
    mc_rpc_hdr_t h = {.opcode = MC_OP_PING, .body_len = (uint32_t)blen, .req_id = 100000};
    uint8_t f[64];
    mc_rpc_hdr_encode(&h, f);
    protobuf_c_message_pack(&q.base, f + MC_RPC_HDR_SIZE);
    assert_int_equal(mc_net_send_all(other, f, flen, dl), MC_OK);
    mc_sleep_ms(50); /* both in the server's socket buffers before the loop goes on */
    atomic_store(&g_fair_gate, true);
    for (uint64_t t = mc_now_ms() + 5000; g_fair_n < FAIR_PIPELINED + 1 && mc_now_ms() < t;)
        mc_sleep_ms(1);
    assert_int_equal(g_fair_n, FAIR_PIPELINED + 1);
    int pos = -1;
    for (int i = 0; i <= FAIR_PIPELINED; i++)
        if (g_fair_log[i] == 100000)
            pos = i;
    fprintf(stderr, "the other connection's request ran after %d of the pipelined ones\n", pos);
    assert_true(pos >= 0 && pos <= 50);
    free(frames);
    close(greedy);
    close(other);
    ping_server_stop(srv, th);
}

/* A reserved socket (mc_net_reserve) refuses connections; a server created on it
 * (opts.bound_fd) serves on its port and takes it: the caller's variable becomes -1, and the
 * port is free once the server is destroyed. A socket the server cannot listen on (UDP) fails
 * the create and stays the caller's, open. */
static void test_bound_fd(void **state)
{
    (void)state;
    int fd = -1, cfd;
    uint16_t port = 0;
    assert_int_equal(mc_net_reserve("127.0.0.1", 0, &fd, &port), MC_OK);
    assert_int_not_equal(mc_net_connect("127.0.0.1", port, 1000, &cfd), MC_OK);
    mc_rpc_server_opts_t so = {.host = "127.0.0.1", .bound_fd = &fd};
    so.handlers[MC_OP_PING] = quick_ping;
    mc_rpc_server_t *srv;
    assert_int_equal(mc_rpc_server_create(&so, &srv), MC_OK);
    assert_int_equal(fd, -1);
    assert_int_equal(mc_rpc_server_port(srv), port);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, slow_run, srv), 0);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
    mc_rpc_client_t *c;
    assert_int_equal(mc_rpc_client_create(addr, NULL, &c), MC_OK);
    McRpc__PingRequest q = MC_RPC__PING_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_PING, &q.base, &resp, 5000), MC_OK);
    mc_rpc_response_free(resp);
    mc_rpc_client_destroy(c);
    mc_rpc_server_stop(srv);
    pthread_join(th, NULL);
    mc_rpc_server_destroy(srv);
    assert_int_equal(mc_net_reserve("127.0.0.1", port, &fd, NULL), MC_OK); /* closed */
    close(fd);

    int ufd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(ufd >= 0);
    so.bound_fd = &ufd;
    assert_int_not_equal(mc_rpc_server_create(&so, &srv), MC_OK);
    assert_true(ufd >= 0 && fcntl(ufd, F_GETFD) >= 0);
    close(ufd);
}

/* The spin rule itself: the budget for an answer due within it, up to one budget past an
 * answer due within MC_RPC_SPIN_AHEAD_NS, nothing for a later one or a zero budget. */
static void test_spin_for_rule(void **state)
{
    (void)state;
    const uint64_t us = 1000, ahead = MC_RPC_SPIN_AHEAD_NS;
    assert_int_equal(mc_rpc_spin_for(50 * us, 0), 50 * us);           /* due or unknown */
    assert_int_equal(mc_rpc_spin_for(50 * us, 30 * us), 50 * us);     /* due within the budget */
    assert_int_equal(mc_rpc_spin_for(50 * us, 90 * us), 140 * us);    /* a batch lookup */
    assert_int_equal(mc_rpc_spin_for(50 * us, ahead), ahead + 50 * us);
    assert_int_equal(mc_rpc_spin_for(50 * us, ahead + 1), 0);         /* sleep at once */
    assert_int_equal(mc_rpc_spin_for(2000 * us, 1500 * us), 2000 * us);
    assert_int_equal(mc_rpc_spin_for(2000 * us, 5000 * us), 0);
    assert_int_equal(mc_rpc_spin_for(0, 0), 0);                       /* spinning off */
    assert_int_equal(mc_rpc_spin_for(0, 90 * us), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frame_codec),
        cmocka_unit_test(test_held_replies),
        cmocka_unit_test(test_light_replies),
        cmocka_unit_test(test_release_on_loop_thread),
        cmocka_unit_test_setup_teardown(test_put_get_over_rpc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_call_halves, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_frames, setup, teardown),
        cmocka_unit_test(test_timeout_and_reconnect),
        cmocka_unit_test(test_reconnect_after_restart),
        cmocka_unit_test(test_http_concurrent),
        cmocka_unit_test(test_slow_answers_not_spun_for),
        cmocka_unit_test(test_spin_for_rule),
        cmocka_unit_test(test_busy_poll_serves_then_sleeps),
        cmocka_unit_test(test_bound_fd),
        cmocka_unit_test(test_pipelined_connection_bounded_per_iteration),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
