/* The master client's etcd:// mode against a real 1-member etcd and fake masters (RPC servers
 * in this process that answer Ping with a chosen ha_view_version and never answer Remove or
 * ExistKey), with the view key written by the test:
 *   - no leader in the view: init fails with MC_ERR_RPC_FAIL after its timeout; an invalid
 *     MC_STORE_CLUSTER_ID fails with MC_ERR_INVALID_PARAMS;
 *   - a Ping answered with a view below the key's create revision is refused (RPC_FAIL), one
 *     at or above it accepted;
 *   - a new view naming another master: the watcher learns it (etcd's watch) without a call
 *     failing, and calls go there;
 *   - a sent Remove whose answer never comes is sent once (RPC_FAIL); a sent ExistKey is sent
 *     again until the timeout. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "client/master_client.h"
#include "common/etcd.h"
#include "common/time.h"
#include "rpc/rpc_server.h"
#include "support/etcd_cluster.h"
#include "support/test_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY "mooncake-store/mcha/master_view"

typedef struct fake {
    mc_rpc_server_t *srv;
    pthread_t th;
    char addr[64];
    atomic_uint_fast64_t view; /* what Ping answers */
    atomic_int pings, removes, exists;
    int answer; /* Remove and ExistKey are answered at once (else never) */
} fake_t;

static mt_etcd_t g_etcd;
static mc_etcd_t *g_e;
static fake_t g_f[3]; /* [2]: a zombie: answers everything, with header view 1 */
static const uint8_t CID[16] = {7};

static mc_status_t h_ping(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                          ProtobufCMessage **resp_p)
{
    (void)call;
    (void)req;
    fake_t *f = ctx;
    static McRpc__PingResponse r[2]; /* per fake: the loop thread owns it */
    McRpc__PingResponse *p = &r[f == &g_f[1]];
    mc_rpc__ping_response__init(p);
    p->ha_view_version = atomic_load(&f->view);
    p->client_ttl_ms = 10000;
    atomic_fetch_add(&f->pings, 1);
    *resp_p = &p->base;
    return MC_OK;
}

/* Never answered (the client's deadline passes with the request sent), or at once with OK. */
static mc_status_t answer_ok(fake_t *f, ProtobufCMessage **resp_p)
{
    static McRpc__StatusResponse r; /* the zombie's loop thread only */
    if (!f->answer)
        return MC_RPC_DEFERRED;
    mc_rpc__status_response__init(&r);
    *resp_p = &r.base;
    return MC_OK;
}

static mc_status_t h_remove(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                            ProtobufCMessage **resp_p)
{
    (void)call;
    (void)req;
    atomic_fetch_add(&((fake_t *)ctx)->removes, 1);
    return answer_ok((fake_t *)ctx, resp_p);
}

static mc_status_t h_exist(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                           ProtobufCMessage **resp_p)
{
    (void)call;
    (void)req;
    atomic_fetch_add(&((fake_t *)ctx)->exists, 1);
    return answer_ok((fake_t *)ctx, resp_p);
}

static void *fake_main(void *arg)
{
    mc_rpc_server_run(((fake_t *)arg)->srv);
    return NULL;
}

static int fake_start(fake_t *f, uint64_t header_view)
{
    mc_rpc_server_opts_t o = {.host = "127.0.0.1", .ctx = f, .view = header_view};
    o.handlers[MC_OP_PING] = h_ping;
    o.handlers[MC_OP_REMOVE] = h_remove;
    o.handlers[MC_OP_EXIST_KEY] = h_exist;
    if (mc_rpc_server_create(&o, &f->srv) != MC_OK)
        return -1;
    snprintf(f->addr, sizeof(f->addr), "127.0.0.1:%u", mc_rpc_server_port(f->srv));
    return pthread_create(&f->th, NULL, fake_main, f);
}

static void fake_stop(fake_t *f)
{
    if (!f->srv)
        return;
    mc_rpc_server_stop(f->srv);
    pthread_join(f->th, NULL);
    mc_rpc_server_destroy(f->srv);
    f->srv = NULL;
}

/* Points the view at addr (a fresh key: a new create revision), returned. */
static int64_t set_view(const char *addr)
{
    assert_int_equal(mc_etcd_delete(g_e, KEY, NULL, NULL), MC_OK);
    int64_t rev = 0;
    assert_int_equal(mc_etcd_put(g_e, KEY, addr, strlen(addr), 0, &rev), MC_OK);
    return rev;
}

static int setup(void **state)
{
    (void)state;
    if (!mt_etcd_available()) {
        fprintf(stderr, "FAIL: etcd not installed (scripts/install-deps.sh: etcd-server)\n");
        return -1;
    }
    if (mt_etcd_start(&g_etcd, 1) != 0 || mc_etcd_open(g_etcd.endpoints, 2000, &g_e) != MC_OK ||
        fake_start(&g_f[0], 0) != 0 || fake_start(&g_f[1], 0) != 0)
        return -1;
    g_f[2].answer = 1;
    if (fake_start(&g_f[2], 1) != 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fake_stop(&g_f[0]);
    fake_stop(&g_f[1]);
    fake_stop(&g_f[2]);
    mc_etcd_close(g_e);
    mt_etcd_stop(&g_etcd);
    return 0;
}

static mc_status_t ping(mc_master_client_t *mc)
{
    McRpc__PingRequest q = MC_RPC__PING_REQUEST__INIT;
    q.client_id = mc_master_client_id(mc);
    ProtobufCMessage *r = NULL;
    mc_status_t st = mc_master_client_call(mc, MC_OP_PING, &q.base, &r, 1);
    mc_rpc_response_free(r);
    return st;
}

static void test_no_leader_and_bad_cluster_id(void **state)
{
    (void)state;
    char addr[200];
    snprintf(addr, sizeof(addr), "etcd://%s", g_etcd.endpoints);
    mc_master_client_t mc;
    setenv("MC_STORE_CLUSTER_ID", "nobody", 1);
    uint64_t t0 = mc_now_ms();
    assert_int_equal(mc_master_client_init(&mc, addr, 300, CID, NULL), MC_ERR_RPC_FAIL);
    assert_true(mc_now_ms() - t0 >= 300);
    setenv("MC_STORE_CLUSTER_ID", "bad id", 1);
    assert_int_equal(mc_master_client_init(&mc, addr, 300, CID, NULL), MC_ERR_INVALID_PARAMS);
    unsetenv("MC_STORE_CLUSTER_ID");
}

static void test_views_and_retries(void **state)
{
    (void)state;
    char addr[200];
    snprintf(addr, sizeof(addr), "etcd://%s", g_etcd.endpoints);
    setenv("MC_STORE_CLUSTER_ID", "mcha", 1);
    int64_t v1 = set_view(g_f[0].addr);
    atomic_store(&g_f[0].view, (uint64_t)v1);
    mc_master_client_t mc;
    assert_int_equal(mc_master_client_init(&mc, addr, 600, CID, NULL), MC_OK);
    assert_true(mc_master_client_is_ha(&mc));
    assert_int_equal(ping(&mc), MC_OK);

    /* an answer from an older view is refused */
    atomic_store(&g_f[0].view, (uint64_t)v1 - 1);
    assert_int_equal(ping(&mc), MC_ERR_RPC_FAIL);
    atomic_store(&g_f[0].view, (uint64_t)v1);
    assert_int_equal(ping(&mc), MC_OK);

    /* sent, never answered: Remove once, ExistKey again until the timeout */
    McRpc__KeyRequest k = MC_RPC__KEY_REQUEST__INIT;
    k.client_id = mc_master_client_id(&mc);
    k.key = (ProtobufCBinaryData){.len = 1, .data = (uint8_t *)"k"};
    ProtobufCMessage *r = NULL;
    assert_int_equal(mc_master_client_call(&mc, MC_OP_REMOVE, &k.base, &r, 1), MC_ERR_RPC_FAIL);
    assert_int_equal(atomic_load(&g_f[0].removes), 1);
    mc_status_t st = mc_master_client_call(&mc, MC_OP_EXIST_KEY, &k.base, &r, 1);
    assert_true(st == MC_ERR_RPC_FAIL || st == MC_ERR_RPC_TIMEOUT);
    assert_true(atomic_load(&g_f[0].exists) >= 1);

    /* a new view naming the other master: calls follow within the watch interval */
    int64_t v2 = set_view(g_f[1].addr);
    assert_true(v2 > v1);
    atomic_store(&g_f[1].view, (uint64_t)v2);
    /* no call fails meanwhile: the watcher learns it (etcd's watch reports the change) */
    uint64_t deadline = mc_now_ms() + 5000;
    while (atomic_load(&mc.view_max) < (uint64_t)v2 && mc_now_ms() < deadline)
        mc_sleep_ms(10);
    assert_true(atomic_load(&mc.view_max) >= (uint64_t)v2);
    fprintf(stderr, "new view learnt by the watcher %llu ms after it was written\n",
            (unsigned long long)(mc_now_ms() - (deadline - 5000)));
    int before = atomic_load(&g_f[1].pings), old = atomic_load(&g_f[0].pings);
    for (int i = 0; i < 8; i++)
        assert_int_equal(ping(&mc), MC_OK);
    assert_int_equal(atomic_load(&g_f[1].pings) - before, 8);
    assert_int_equal(atomic_load(&g_f[0].pings), old);
    mc_master_client_fini(&mc);
    unsetenv("MC_STORE_CLUSTER_ID");
}

/* A zombie: a master whose answers carry view 1 in their frame header, below the view the
 * client has seen (here etcd names it with a newer view; in a failover the old leader's answers
 * still on the wire): every answer is refused, counted, and a Remove is not sent again. */
static void test_answer_from_older_view_refused(void **state)
{
    (void)state;
    char addr[200];
    snprintf(addr, sizeof(addr), "etcd://%s", g_etcd.endpoints);
    setenv("MC_STORE_CLUSTER_ID", "mcha", 1);
    int64_t v = set_view(g_f[0].addr);
    atomic_store(&g_f[0].view, (uint64_t)v);
    mc_master_client_t mc;
    assert_int_equal(mc_master_client_init(&mc, addr, 600, CID, NULL), MC_OK);
    assert_int_equal(ping(&mc), MC_OK);
    assert_true(atomic_load(&mc.view_max) >= (uint64_t)v && v > 1);
    /* etcd names the zombie with a newer view than its answers carry (1) */
    int64_t vz = set_view(g_f[2].addr);
    assert_true(vz > v);
    uint64_t deadline = mc_now_ms() + 5000;
    while (atomic_load(&g_f[2].pings) == 0 && mc_now_ms() < deadline) /* the watcher moved */
        (void)ping(&mc);
    uint64_t refused0 = atomic_load(&mc.view_refused);
    McRpc__KeyRequest k = MC_RPC__KEY_REQUEST__INIT;
    k.client_id = mc_master_client_id(&mc);
    k.key = (ProtobufCBinaryData){.len = 1, .data = (uint8_t *)"k"};
    ProtobufCMessage *r = NULL;
    int removes0 = atomic_load(&g_f[2].removes);
    assert_int_equal(mc_master_client_call(&mc, MC_OP_REMOVE, &k.base, &r, 1), MC_ERR_RPC_FAIL);
    assert_null(r);
    assert_int_equal(atomic_load(&g_f[2].removes) - removes0, 1); /* answered, refused, once */
    assert_int_equal(atomic_load(&mc.view_refused) - refused0, 1);
    mc_status_t st = mc_master_client_call(&mc, MC_OP_EXIST_KEY, &k.base, &r, 1);
    assert_true(st == MC_ERR_RPC_FAIL || st == MC_ERR_RPC_TIMEOUT);
    assert_null(r);
    assert_true(atomic_load(&mc.view_refused) - refused0 >= 2);
    /* the same answers from a master without a view (header 0) are accepted */
    set_view(g_f[1].addr);
    g_f[1].answer = 1;
    deadline = mc_now_ms() + 5000;
    while ((st = mc_master_client_call(&mc, MC_OP_EXIST_KEY, &k.base, &r, 1)) != MC_OK &&
           mc_now_ms() < deadline)
        mc_sleep_ms(50);
    assert_int_equal(st, MC_OK);
    mc_rpc_response_free(r);
    mc_master_answer_t last;
    mc_master_client_last_answer(&last);
    assert_int_equal(last.view, 0);
    assert_string_equal(last.addr, g_f[1].addr);
    g_f[1].answer = 0;
    mc_master_client_fini(&mc);
    unsetenv("MC_STORE_CLUSTER_ID");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_leader_and_bad_cluster_id),
        cmocka_unit_test(test_views_and_retries),
        cmocka_unit_test(test_answer_from_older_view_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
