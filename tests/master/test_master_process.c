/* The real mooncake_master process over RPC: state machine, leases, eviction under pressure,
 * client death, bad input, kill -9 + restart with the WAL, upstream's metric names and admin
 * endpoints over HTTP, --max_threads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/net.h"
#include "common/time.h"
#include "rpc/frame.h"
#include "rpc/rpc_client.h"
#include "rpc/wire_key.h"
#include "master_proc.h"

#include <jansson.h>

#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "master_rpc_ops.h"

/* ---------------------------------------------------------------- tests */

static void test_state_machine(void **state)
{
    (void)state;
    static master_proc_t mp;
    memset(&mp, 0, sizeof(mp));
    new_wal_dir(&mp);
    start_master(&mp, "--default_kv_lease_ttl=300");
    mc_rpc_client_t *a, *b;
    assert_int_equal(mc_rpc_client_create(mp.addr, NULL, &a), MC_OK);
    assert_int_equal(mc_rpc_client_create(mp.addr, NULL, &b), MC_OK);
    assert_int_equal(mount(a, CA, "segA", 1 << 30, 1 << 20, 1, false), MC_OK);
    assert_int_equal(put_start(a, CA, "k", 1000, 1, NULL), MC_OK);
    assert_int_equal(get(b, "k", NULL, NULL, NULL), MC_ERR_REPLICA_IS_NOT_READY);
    assert_int_equal(put_end(b, CB, "k", 1), MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(put_end(a, CA, "k", 42), MC_OK);
    assert_int_equal(put_end(a, CA, "k", 42), MC_ERR_INVALID_WRITE);
    assert_int_equal(key_op(a, MC_OP_PUT_REVOKE, CA, "k", false), MC_ERR_INVALID_WRITE);
    uint64_t sum = 0;
    assert_int_equal(get(b, "k", NULL, &sum, NULL), MC_OK);
    assert_true(sum == 42);
    assert_int_equal(key_op(b, MC_OP_REMOVE, CB, "k", false), MC_ERR_OBJECT_HAS_LEASE);
    /* lease expiry: poll (bounded) until remove succeeds */
    uint64_t deadline = mc_now_ms() + 5000;
    int32_t st;
    while ((st = key_op(b, MC_OP_REMOVE, CB, "k", false)) == MC_ERR_OBJECT_HAS_LEASE &&
           mc_now_ms() < deadline)
        mc_sleep_ms(50);
    assert_int_equal(st, MC_OK);
    assert_int_equal(put_start(a, CA, "k2", 10, 1, NULL), MC_OK);
    assert_int_equal(put_end(a, CA, "k2", 1), MC_OK);
    assert_int_equal(get(b, "k2", NULL, NULL, NULL), MC_OK);
    assert_int_equal(key_op(b, MC_OP_REMOVE, CB, "k2", true), MC_OK); /* force */
    assert_int_equal(put_start(a, CA, "", 10, 1, NULL), MC_ERR_INVALID_KEY);
    assert_int_equal(put_start(a, CA, "z", 0, 1, NULL), MC_ERR_INVALID_PARAMS);
    assert_int_equal(put_start(a, CA, "z", (1ull << 40) + 1, 1, NULL), MC_ERR_INVALID_PARAMS);

    /* eviction under pressure: 1 MiB segment, 64 KiB objects (14 = 87.5%, below the 90%
     * watermark), ExistKey storm (#2187), then puts that only fit by evicting. */
    char key[32];
    for (int i = 0; i < 14; i++) {
        snprintf(key, sizeof(key), "e%d", i);
        assert_int_equal(put_start(a, CA, key, 64 << 10, 1, NULL), MC_OK);
        assert_int_equal(put_end(a, CA, key, (uint64_t)i), MC_OK);
    }
    for (int r = 0; r < 20; r++)
        for (int i = 0; i < 14; i++) {
            snprintf(key, sizeof(key), "e%d", i);
            assert_int_equal(key_op(b, MC_OP_EXIST_KEY, NULL, key, false), MC_OK);
        }
    for (int i = 0; i < 40; i++) {
        snprintf(key, sizeof(key), "p%d", i);
        assert_int_equal(put_start(a, CA, key, 64 << 10, 1, NULL), MC_OK);
        assert_int_equal(put_end(a, CA, key, (uint64_t)i), MC_OK);
    }
    /* the existence-checked objects were evictable: the oldest is gone */
    assert_int_equal(key_op(b, MC_OP_EXIST_KEY, NULL, "e0", false), MC_ERR_OBJECT_NOT_FOUND);
    mc_rpc_client_destroy(a);
    mc_rpc_client_destroy(b);
    stop_master(&mp, SIGTERM);
    rm_wal(&mp);
}

static void test_client_death(void **state)
{
    (void)state;
    static master_proc_t mp;
    memset(&mp, 0, sizeof(mp));
    new_wal_dir(&mp);
    start_master(&mp, "--client_ttl=1");
    mc_rpc_client_t *a, *b;
    assert_int_equal(mc_rpc_client_create(mp.addr, NULL, &a), MC_OK);
    assert_int_equal(mc_rpc_client_create(mp.addr, NULL, &b), MC_OK);
    assert_int_equal(mount(a, CA, "segA", 1 << 30, 1 << 20, 1, false), MC_OK);
    assert_int_equal(mount(b, CB, "segB", 2ull << 30, 1 << 20, 2, false), MC_OK);
    assert_int_equal(put_start(b, CB, "two", 1000, 2, NULL), MC_OK);
    assert_int_equal(put_end(b, CB, "two", 7), MC_OK);
    uint32_t n = 0;
    assert_int_equal(get(b, "two", NULL, NULL, &n), MC_OK);
    assert_int_equal(n, 2);
    McRpc__ReplicateConfig cfg = MC_RPC__REPLICATE_CONFIG__INIT;
    cfg.preferred_segment = "segA";
    McRpc__PutStartRequest q = MC_RPC__PUT_START_REQUEST__INIT;
    q.client_id = (ProtobufCBinaryData){16, CB};
    q.key = mc_wire_key_str("onlyA");
    q.value_size = 100;
    q.config = &cfg;
    assert_int_equal(call_status(b, MC_OP_PUT_START, &q.base), MC_OK);
    assert_int_equal(put_end(b, CB, "onlyA", 8), MC_OK);
    /* A goes silent; B pings; poll until A's segment is gone */
    uint64_t deadline = mc_now_ms() + 8000;
    while (key_op(b, MC_OP_EXIST_KEY, NULL, "onlyA", false) == MC_OK) {
        assert_true(mc_now_ms() < deadline);
        assert_int_equal(ping(b, CB), MC_RPC__CLIENT_STATUS__CLIENT_OK);
        mc_sleep_ms(100);
    }
    assert_int_equal(get(b, "two", NULL, NULL, &n), MC_OK);
    assert_int_equal(n, 1);
    /* A comes back: NEED_REMOUNT */
    assert_int_equal(ping(a, CA), MC_RPC__CLIENT_STATUS__CLIENT_NEED_REMOUNT);
    assert_int_equal(mount(a, CA, "segA", 1 << 30, 1 << 20, 1, true), MC_OK);
    assert_int_equal(ping(a, CA), MC_RPC__CLIENT_STATUS__CLIENT_OK);
    mc_rpc_client_destroy(a);
    mc_rpc_client_destroy(b);
    stop_master(&mp, SIGTERM);
    rm_wal(&mp);
}

static void test_bad_input_keeps_serving(void **state)
{
    (void)state;
    static master_proc_t mp;
    memset(&mp, 0, sizeof(mp));
    new_wal_dir(&mp);
    start_master(&mp, NULL);
    mc_rpc_client_t *c;
    assert_int_equal(mc_rpc_client_create(mp.addr, NULL, &c), MC_OK);
    for (int round = 0; round < 20; round++) {
        /* odd rounds: junk where the handshake PROOF belongs; even: junk frames after it */
        int fd;
        if (round % 2)
            assert_int_equal(mc_net_connect("127.0.0.1", mp.port, 2000, &fd), MC_OK);
        else
            assert_int_equal(mc_auth_connect("127.0.0.1", mp.port, 2000, NULL, &fd), MC_OK);
        uint8_t junk[256];
        for (size_t i = 0; i < sizeof(junk); i++)
            junk[i] = (uint8_t)(i * 31 + round);
        if (round % 4 == 0)
            memcpy(junk, "MCRP\x01\x00", 6); /* valid magic, garbage rest */
        ssize_t w = send(fd, junk, sizeof(junk), MSG_NOSIGNAL);
        (void)w;
        close(fd);
        assert_int_equal(key_op(c, MC_OP_EXIST_KEY, NULL, "x", false), MC_ERR_OBJECT_NOT_FOUND);
    }
    /* unknown opcode through the client API: header-level NOT_SUPPORTED */
    McRpc__ServiceReadyRequest q = MC_RPC__SERVICE_READY_REQUEST__INIT;
    ProtobufCMessage *r;
    assert_int_equal(mc_rpc_client_call(c, 60, &q.base, &r, 2000), MC_ERR_NOT_SUPPORTED);
    assert_int_equal(key_op(c, MC_OP_EXIST_KEY, NULL, "x", false), MC_ERR_OBJECT_NOT_FOUND);
    mc_rpc_client_destroy(c);
    stop_master(&mp, SIGTERM);
    rm_wal(&mp);
}

static void test_kill9_restart(void **state)
{
    (void)state;
    static master_proc_t mp;
    memset(&mp, 0, sizeof(mp));
    new_wal_dir(&mp);
    start_master(&mp, "--client_ttl=5");
    mc_rpc_client_t *a;
    assert_int_equal(mc_rpc_client_create(mp.addr, NULL, &a), MC_OK);
    assert_int_equal(mount(a, CA, "segA", 1 << 30, 64 << 20, 0x5a, false), MC_OK);
    uint64_t addrs[100];
    char key[32];
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "obj%d", i);
        assert_int_equal(put_start(a, CA, key, 4096 + (uint64_t)i, 1, &addrs[i]), MC_OK);
        assert_int_equal(put_end(a, CA, key, 0x1000 + (uint64_t)i), MC_OK);
    }
    assert_int_equal(key_op(a, MC_OP_REMOVE, CA, "obj7", true), MC_OK);
    assert_int_equal(put_start(a, CA, "inflight", 4096, 1, NULL), MC_OK);
    stop_master(&mp, SIGKILL);
    start_master(&mp, "--client_ttl=5");
    /* before re-mount: nothing readable, but the recovered objects exist; a get of one answers
     * REPLICA_IS_NOT_READY (retryable), single or batched, a key that never existed (or was
     * removed, or was being written) OBJECT_NOT_FOUND */
    assert_int_equal(key_op(a, MC_OP_EXIST_KEY, NULL, "obj1", false), MC_OK);
    assert_int_equal(get(a, "obj1", NULL, NULL, NULL), MC_ERR_REPLICA_IS_NOT_READY);
    assert_int_equal(get(a, "never", NULL, NULL, NULL), MC_ERR_OBJECT_NOT_FOUND);
    const char *bkeys[] = {"obj2", "never", "obj7", "inflight", "obj99"};
    int32_t bst[5] = {0};
    size_t nf = 0;
    assert_int_equal(batch_key_op(a, MC_OP_BATCH_GET_REPLICA_LIST, bkeys, 5, &nf, bst), MC_OK);
    assert_int_equal(nf, 5);
    assert_int_equal(bst[0], MC_ERR_REPLICA_IS_NOT_READY);
    assert_int_equal(bst[1], MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(bst[2], MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(bst[3], MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(bst[4], MC_ERR_REPLICA_IS_NOT_READY);
    assert_int_equal(batch_key_op(a, MC_OP_BATCH_EXIST_KEY, bkeys, 5, &nf, bst), MC_OK);
    assert_int_equal(bst[0], MC_OK);
    assert_int_equal(bst[1], MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(bst[4], MC_OK);
    /* the client learns it must re-mount */
    assert_int_equal(ping(a, CA), MC_RPC__CLIENT_STATUS__CLIENT_NEED_REMOUNT);
    assert_int_equal(mount(a, CA, "segA", 1 << 30, 64 << 20, 0x5a, true), MC_OK);
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "obj%d", i);
        uint64_t addr = 0, sum = 0;
        if (i == 7) {
            assert_int_equal(get(a, key, NULL, NULL, NULL), MC_ERR_OBJECT_NOT_FOUND);
            continue;
        }
        assert_int_equal(get(a, key, &addr, &sum, NULL), MC_OK);
        assert_true(addr == addrs[i]);
        assert_true(sum == 0x1000 + (uint64_t)i);
    }
    assert_int_equal(get(a, "inflight", NULL, NULL, NULL), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(put_start(a, CA, "inflight", 4096, 1, NULL), MC_OK);
    assert_int_equal(put_end(a, CA, "inflight", 1), MC_OK);
    /* and once more, after a clean stop (snapshot + log) */
    stop_master(&mp, SIGTERM);
    start_master(&mp, "--client_ttl=5");
    assert_int_equal(ping(a, CA), MC_RPC__CLIENT_STATUS__CLIENT_NEED_REMOUNT);
    assert_int_equal(mount(a, CA, "segA", 1 << 30, 64 << 20, 0x5a, true), MC_OK);
    assert_int_equal(get(a, "inflight", NULL, NULL, NULL), MC_OK);
    assert_int_equal(get(a, "obj99", NULL, NULL, NULL), MC_OK);
    mc_rpc_client_destroy(a);
    stop_master(&mp, SIGTERM);
    rm_wal(&mp);
}

/* Waits (bounded) until metric `name` reads v: gauges and the core's counters come from the
 * snapshot the cron publishes every 10 ms. Leaves the page in buf. */
static void wait_metric(uint16_t port, char *buf, size_t n, const char *name, double v)
{
    uint64_t deadline = mc_now_ms() + 5000;
    for (;;) {
        assert_int_equal(curl_get(port, "/metrics", buf, n), 200);
        if (metric_value(buf, name) == v)
            return;
        if (mc_now_ms() >= deadline) {
            fprintf(stderr, "%s = %g, expected %g\n", name, metric_value(buf, name), v);
            fail();
        }
        mc_sleep_ms(20);
    }
}

static void assert_metric(const char *page, const char *name, double v)
{
    double got = metric_value(page, name);
    if (got != v) {
        fprintf(stderr, "%s = %g, expected %g\n", name, got, v);
        fail();
    }
}

static json_t *curl_json(uint16_t port, const char *path, int want_code, char *buf, size_t n)
{
    assert_int_equal(curl_get(port, path, buf, n), want_code);
    json_error_t err;
    json_t *j = json_loads(buf, 0, &err);
    if (!j)
        fprintf(stderr, "%s: not JSON (%s): %s\n", path, err.text, buf);
    assert_non_null(j);
    return j;
}

/* Upstream's metric names, driven by the RPCs that move them: capacity (total and per segment,
 * label values escaped), objects, the value-size histogram, per-RPC requests and failures,
 * batch items, PutStart allocation failures, eviction. */
static void test_http_metrics(void **state)
{
    (void)state;
    static master_proc_t mp;
    memset(&mp, 0, sizeof(mp));
    new_wal_dir(&mp);
    start_master(&mp, "--max_threads=4"); /* upstream's flag, accepted */
    static char buf[1 << 20];
    assert_int_equal(curl_get(mp.mport, "/metrics", buf, sizeof(buf)), 200);
    assert_metric(buf, "master_key_count", 0);
    assert_metric(buf, "master_soft_pin_key_count", 0);
    assert_metric(buf, "master_value_size_bytes_count", 0);
    assert_metric(buf, "master_attempted_evictions_total", 0);
    assert_metric(buf, "master_put_start_alloc_failures_total", 0);
    assert_metric(buf, "master_put_start_partial_allocations_total", 0);
    assert_metric(buf, "master_batch_get_replica_list_items_total", 0);
    assert_non_null(strstr(buf, "# TYPE master_value_size_bytes histogram\n"));
    assert_non_null(strstr(buf, "# TYPE segment_allocated_bytes gauge\n"));
    mc_rpc_client_t *a, *b;
    assert_int_equal(mc_rpc_client_create(mp.addr, NULL, &a), MC_OK);
    assert_int_equal(mc_rpc_client_create(mp.addr, NULL, &b), MC_OK);
    assert_int_equal(mount(a, CA, "segA", 1 << 30, 1 << 20, 1, false), MC_OK);
    assert_int_equal(mount(b, CB, "segA", 2ull << 30, 1 << 20, 2, false),
                     MC_ERR_SEGMENT_ALREADY_EXISTS);
    assert_int_equal(mount(a, CA, "segA", 1 << 30, 1 << 20, 1, true), MC_OK); /* idempotent */
    /* a value larger than every segment: allocation failure, and no eviction round (emptying
     * the cache could not make it fit) */
    assert_int_equal(put_start(a, CA, "huge", 4 << 20, 1, NULL), MC_ERR_NO_AVAILABLE_HANDLE);
    wait_metric(mp.mport, buf, sizeof(buf), "master_put_start_alloc_failures_total", 1);
    assert_metric(buf, "master_put_start_requests_total", 1);
    assert_metric(buf, "master_put_start_failures_total", 1);
    assert_metric(buf, "master_mount_segment_requests_total", 2);
    assert_metric(buf, "master_mount_segment_failures_total", 1);
    assert_metric(buf, "master_remount_segment_requests_total", 1);
    assert_metric(buf, "master_remount_segment_failures_total", 0);
    assert_metric(buf, "master_successful_evictions_total", 0);
    assert_metric(buf, "master_attempted_evictions_total", 0);
    /* committed puts: 1000 and 2000 (<= 4 KiB), 100000 (<= 256 KiB), one soft-pinned; a revoke
     * of a put in flight, then of nothing (a failure) */
    assert_int_equal(put_start(a, CA, "hk1", 1000, 1, NULL), MC_OK);
    assert_int_equal(put_end(a, CA, "hk1", 1), MC_OK);
    assert_int_equal(put_start(a, CA, "hk2", 100000, 1, NULL), MC_OK);
    assert_int_equal(put_end(a, CA, "hk2", 2), MC_OK);
    McRpc__ReplicateConfig cfg = MC_RPC__REPLICATE_CONFIG__INIT;
    cfg.with_soft_pin = true;
    McRpc__PutStartRequest q = MC_RPC__PUT_START_REQUEST__INIT;
    q.client_id = (ProtobufCBinaryData){16, CA};
    q.key = mc_wire_key_str("hks");
    q.value_size = 2000;
    q.config = &cfg;
    assert_int_equal(call_status(a, MC_OP_PUT_START, &q.base), MC_OK);
    assert_int_equal(put_end(a, CA, "hks", 3), MC_OK);
    assert_int_equal(put_end(a, CA, "hks", 3), MC_ERR_INVALID_WRITE); /* a failed PutEnd */
    assert_int_equal(put_start(a, CA, "rv", 10, 1, NULL), MC_OK);
    assert_int_equal(key_op(a, MC_OP_PUT_REVOKE, CA, "rv", false), MC_OK);
    assert_int_equal(key_op(a, MC_OP_PUT_REVOKE, CA, "rv", false), MC_ERR_OBJECT_NOT_FOUND);
    /* reads: a hit and a miss each; ExistKey's "not found" is an answer, not a failure */
    assert_int_equal(get(b, "hk1", NULL, NULL, NULL), MC_OK);
    assert_int_equal(get(b, "nope", NULL, NULL, NULL), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(key_op(b, MC_OP_EXIST_KEY, NULL, "hk2", false), MC_OK);
    assert_int_equal(key_op(b, MC_OP_EXIST_KEY, NULL, "nope", false), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(key_op(b, MC_OP_REMOVE, CB, "nope", false), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(ping(a, CA), MC_RPC__CLIENT_STATUS__CLIENT_OK);
    /* batches: 2 items with 1 miss (partial), 2 misses (a failure), exist: no failure */
    size_t nf = 0;
    const char *hit_miss[2] = {"hk1", "nope"}, *misses[2] = {"nope", "nope2"};
    assert_int_equal(batch_key_op(b, MC_OP_BATCH_GET_REPLICA_LIST, hit_miss, 2, &nf, NULL), MC_OK);
    assert_int_equal(nf, 1);
    assert_int_equal(batch_key_op(b, MC_OP_BATCH_GET_REPLICA_LIST, misses, 2, &nf, NULL), MC_OK);
    assert_int_equal(nf, 2);
    assert_int_equal(batch_key_op(b, MC_OP_BATCH_EXIST_KEY, hit_miss, 2, &nf, NULL), MC_OK);
    assert_int_equal(nf, 1);
    wait_metric(mp.mport, buf, sizeof(buf), "master_key_count", 3);
    assert_metric(buf, "master_soft_pin_key_count", 1);
    assert_metric(buf, "master_put_start_requests_total", 5);
    assert_metric(buf, "master_put_start_failures_total", 1);
    assert_metric(buf, "master_put_start_alloc_failures_total", 1);
    assert_metric(buf, "master_put_start_partial_allocations_total", 0);
    assert_metric(buf, "master_put_end_requests_total", 4);
    assert_metric(buf, "master_put_end_failures_total", 1);
    assert_metric(buf, "master_put_revoke_requests_total", 2);
    assert_metric(buf, "master_put_revoke_failures_total", 1);
    assert_metric(buf, "master_get_replica_list_requests_total", 2);
    assert_metric(buf, "master_get_replica_list_failures_total", 1);
    assert_metric(buf, "master_exist_key_requests_total", 2);
    assert_metric(buf, "master_exist_key_failures_total", 0);
    assert_metric(buf, "master_remove_requests_total", 1);
    assert_metric(buf, "master_remove_failures_total", 1);
    assert_metric(buf, "master_ping_requests_total", 1);
    assert_metric(buf, "master_ping_failures_total", 0);
    assert_metric(buf, "master_batch_get_replica_list_requests_total", 2);
    assert_metric(buf, "master_batch_get_replica_list_failures_total", 1);
    assert_metric(buf, "master_batch_get_replica_list_partial_successes_total", 1);
    assert_metric(buf, "master_batch_get_replica_list_items_total", 4);
    assert_metric(buf, "master_batch_get_replica_list_failed_items_total", 3);
    assert_metric(buf, "master_batch_exist_key_requests_total", 1);
    assert_metric(buf, "master_batch_exist_key_failures_total", 0);
    assert_metric(buf, "master_batch_exist_key_items_total", 2);
    assert_metric(buf, "master_batch_exist_key_failed_items_total", 0);
    /* the histogram: one observation per committed put */
    assert_metric(buf, "master_value_size_bytes_bucket{le=\"4096\"}", 2);
    assert_metric(buf, "master_value_size_bytes_bucket{le=\"65536\"}", 2);
    assert_metric(buf, "master_value_size_bytes_bucket{le=\"262144\"}", 3);
    assert_metric(buf, "master_value_size_bytes_bucket{le=\"67108864\"}", 3);
    assert_metric(buf, "master_value_size_bytes_bucket{le=\"+Inf\"}", 3);
    assert_metric(buf, "master_value_size_bytes_sum", 103000);
    assert_metric(buf, "master_value_size_bytes_count",
                  metric_value(buf, "master_put_end_requests_total") -
                      metric_value(buf, "master_put_end_failures_total"));
    /* capacity, per segment */
    assert_metric(buf, "master_total_capacity_bytes", 1 << 20);
    assert_metric(buf, "segment_total_capacity_bytes{segment=\"segA\"}", 1 << 20);
    double used = metric_value(buf, "master_allocated_bytes");
    assert_true(used >= 103000);
    assert_metric(buf, "segment_allocated_bytes{segment=\"segA\"}", used);
    assert_true(metric_value(buf, "master_active_clients") >= 1);
    /* a segment name that needs escaping in a label value */
    assert_int_equal(mount(a, CA, "q\"b\\s\nx", 3ull << 30, 1 << 20, 3, false), MC_OK);
    wait_metric(mp.mport, buf, sizeof(buf), "master_total_capacity_bytes", 2 << 20);
    assert_metric(buf, "segment_total_capacity_bytes{segment=\"q\\\"b\\\\s\\nx\"}", 1 << 20);
    /* and one that is not UTF-8: the invalid byte becomes U+FFFD (Prometheus needs UTF-8) */
    assert_int_equal(mount(a, CA, "bad\xff", 4ull << 30, 1 << 20, 4, false), MC_OK);
    wait_metric(mp.mport, buf, sizeof(buf), "master_total_capacity_bytes", 3 << 20);
    assert_metric(buf, "segment_total_capacity_bytes{segment=\"bad\xef\xbf\xbd\"}", 1 << 20);
    McRpc__UnmountSegmentRequest uq = MC_RPC__UNMOUNT_SEGMENT_REQUEST__INIT;
    uq.client_id = (ProtobufCBinaryData){16, CA};
    uq.segment_name = "q\"b\\s\nx";
    assert_int_equal(call_status(a, MC_OP_UNMOUNT_SEGMENT, &uq.base), MC_OK);
    uq.segment_name = "bad\xff";
    assert_int_equal(call_status(a, MC_OP_UNMOUNT_SEGMENT, &uq.base), MC_OK);
    wait_metric(mp.mport, buf, sizeof(buf), "master_total_capacity_bytes", 1 << 20);
    assert_null(strstr(buf, "segment=\"q"));
    /* a put that fits only by evicting the unleased objects (hk1 is leased by the get) */
    assert_int_equal(put_start(a, CA, "big", 1000000, 1, NULL), MC_OK);
    uint64_t deadline = mc_now_ms() + 5000;
    while (curl_get(mp.mport, "/metrics", buf, sizeof(buf)) == 200 &&
           metric_value(buf, "master_successful_evictions_total") < 1)
        assert_true(mc_now_ms() < deadline);
    assert_true(metric_value(buf, "master_evicted_key_count") >= 2);
    assert_true(metric_value(buf, "master_evicted_size_bytes") >= 102000);
    assert_metric(buf, "master_attempted_evictions_total",
                  metric_value(buf, "master_successful_evictions_total") +
                      metric_value(buf, "master_attempted_evictions_failed_total"));
    assert_int_equal(key_op(a, MC_OP_PUT_REVOKE, CA, "big", false), MC_OK);
    mc_rpc_client_destroy(a);
    mc_rpc_client_destroy(b);
    stop_master(&mp, SIGTERM);
    rm_wal(&mp);
}

/* Upstream's admin endpoints: /health JSON, /role, /metrics/summary, /query_key (replicas of a
 * put key, 404 on a missing or unfinished one), /get_all_keys, /batch_query_keys,
 * /get_all_segments, /get_segments_detail, /query_segment; bad input gets 400 and the master
 * keeps serving. */
static void test_http(void **state)
{
    (void)state;
    static master_proc_t mp;
    memset(&mp, 0, sizeof(mp));
    new_wal_dir(&mp);
    start_master(&mp, NULL);
    static char buf[1 << 20];
    json_t *j = curl_json(mp.mport, "/health", 200, buf, sizeof(buf));
    assert_string_equal(json_string_value(json_object_get(j, "status")), "ok");
    assert_string_equal(json_string_value(json_object_get(j, "role")), "leader");
    assert_string_equal(json_string_value(json_object_get(j, "ha_state")), "serving");
    assert_true(json_is_true(json_object_get(j, "service_ready")));
    assert_null(json_object_get(j, "leader_address")); /* no HA */
    assert_null(json_object_get(j, "view_version"));
    json_decref(j);
    assert_int_equal(curl_get(mp.mport, "/role", buf, sizeof(buf)), 200);
    assert_string_equal(buf, "leader");
    assert_int_equal(curl_get(mp.mport, "/ha_status", buf, sizeof(buf)), 200);
    assert_string_equal(buf, "serving");
    j = curl_json(mp.mport, "/leader", 200, buf, sizeof(buf));
    assert_true(json_is_false(json_object_get(j, "present")));
    json_decref(j);
    assert_int_equal(curl_get(mp.mport, "/metrics", buf, sizeof(buf)), 200);
    assert_true(metric_value(buf, "master_key_count") == 0);

    mc_rpc_client_t *a;
    assert_int_equal(mc_rpc_client_create(mp.addr, NULL, &a), MC_OK);
    assert_int_equal(mount(a, CA, "segA", 1 << 30, 1 << 20, 1, false), MC_OK);
    uint64_t addr1 = 0;
    assert_int_equal(put_start(a, CA, "hk", 1000, 1, &addr1), MC_OK);
    assert_int_equal(put_end(a, CA, "hk", 1), MC_OK);
    assert_int_equal(put_start(a, CA, "hk2", 3000, 1, NULL), MC_OK);
    assert_int_equal(put_end(a, CA, "hk2", 2), MC_OK);
    assert_int_equal(put_start(a, CA, "writing", 10, 1, NULL), MC_OK); /* never finished */
    wait_metric(mp.mport, buf, sizeof(buf), "master_key_count", 2);
    assert_true(metric_value(buf, "master_allocated_bytes") >= 1024 + 3000);

    /* /query_key: upstream's descriptors of the readable replicas */
    j = curl_json(mp.mport, "/query_key?key=hk", 200, buf, sizeof(buf));
    assert_true(json_is_true(json_object_get(j, "success")));
    json_t *data = json_object_get(j, "data");
    assert_int_equal(json_array_size(data), 1);
    json_t *d = json_array_get(data, 0);
    assert_int_equal(json_integer_value(json_object_get(d, "size_")), 1000);
    assert_true((uint64_t)json_integer_value(json_object_get(d, "buffer_address_")) == addr1);
    assert_string_equal(json_string_value(json_object_get(d, "transport_endpoint_")), "segA");
    assert_string_equal(json_string_value(json_object_get(d, "protocol_")), "tcp");
    json_decref(j);
    j = curl_json(mp.mport, "/query_key?key=nope", 404, buf, sizeof(buf));
    assert_true(json_is_false(json_object_get(j, "success")));
    assert_string_equal(json_string_value(json_object_get(j, "error_message")), "OBJECT_NOT_FOUND");
    json_decref(j);
    j = curl_json(mp.mport, "/query_key?key=writing", 404, buf, sizeof(buf));
    assert_string_equal(json_string_value(json_object_get(j, "error_message")),
                        "REPLICA_IS_NOT_READY");
    json_decref(j);
    /* the query took no lease: a plain remove of hk2 after querying it succeeds */
    assert_int_equal(curl_get(mp.mport, "/query_key?key=hk2", buf, sizeof(buf)), 200);

    /* /batch_query_keys?keys=k1,k2 */
    j = curl_json(mp.mport, "/batch_query_keys?keys=hk,nope,hk2", 200, buf, sizeof(buf));
    assert_true(json_is_true(json_object_get(j, "success")));
    data = json_object_get(j, "data");
    assert_int_equal(json_object_size(data), 3);
    json_t *hk = json_object_get(data, "hk");
    assert_true(json_is_true(json_object_get(hk, "ok")));
    d = json_array_get(json_object_get(hk, "values"), 0);
    assert_int_equal(json_integer_value(json_object_get(d, "size_")), 1000);
    json_t *nope = json_object_get(data, "nope");
    assert_true(json_is_false(json_object_get(nope, "ok")));
    assert_string_equal(json_string_value(json_object_get(nope, "error")), "OBJECT_NOT_FOUND");
    assert_true(json_is_true(json_object_get(json_object_get(data, "hk2"), "ok")));
    json_decref(j);

    /* /get_all_keys: the readable keys, one per line */
    assert_int_equal(curl_get(mp.mport, "/get_all_keys", buf, sizeof(buf)), 200);
    assert_true(strcmp(buf, "hk\nhk2\n") == 0 || strcmp(buf, "hk2\nhk\n") == 0);
    /* segments: names; details; one segment's use */
    assert_int_equal(curl_get(mp.mport, "/get_all_segments", buf, sizeof(buf)), 200);
    assert_string_equal(buf, "segA\n");
    j = curl_json(mp.mport, "/get_segments_detail", 200, buf, sizeof(buf));
    assert_int_equal(json_integer_value(json_object_get(j, "total_segments")), 1);
    d = json_array_get(json_object_get(j, "segments"), 0);
    assert_string_equal(json_string_value(json_object_get(d, "segment_name")), "segA");
    assert_string_equal(json_string_value(json_object_get(d, "status")), "OK");
    assert_int_equal(json_integer_value(json_object_get(d, "allocator_capacity_bytes")), 1 << 20);
    json_decref(j);
    assert_int_equal(curl_get(mp.mport, "/query_segment?segment=segA", buf, sizeof(buf)), 200);
    assert_non_null(strstr(buf, "segA\nUsed(bytes): "));
    assert_non_null(strstr(buf, "\nCapacity(bytes) : 1048576\n"));
    assert_int_equal(curl_get(mp.mport, "/query_segment?segment=zz", buf, sizeof(buf)), 404);

    /* /metrics/summary: one line */
    assert_int_equal(curl_get(mp.mport, "/metrics/summary", buf, sizeof(buf)), 200);
    assert_null(strchr(buf, '\n'));
    const char *head = "role=leader, state=serving, service_ready=true, master={Mem Storage: ";
    assert_true(strncmp(buf, head, strlen(head)) == 0);
    assert_non_null(strstr(buf, " | Keys: 2 (soft-pinned: 0) | Clients: 1 | "));
    assert_non_null(strstr(buf, "PutStart="));
    assert_true(strlen(buf) > 7 && strcmp(buf + strlen(buf) - 7, ", ha={}") == 0);

    /* bad input: 400 with a message, 404/405 for unknown paths and methods; still serving */
    static char key[6000], path[6100];
    memset(key, 'k', 4097);
    key[4097] = 0;
    static const struct { const char *path; int code; } bad[] = {
        {"/query_key", 400},
        {"/query_key?key=", 400},
        {"/batch_query_keys", 400},
        {"/batch_query_keys?keys=", 400},
        {"/batch_query_keys?keys=a,,b", 400},
        {"/batch_query_keys?keys=a,", 400},
        {"/batch_query_keys?keys=%ff%fe", 400},
        {"/query_segment", 400},
        {"/no_such_endpoint", 404},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int code = curl_get(mp.mport, bad[i].path, buf, sizeof(buf));
        if (code != bad[i].code)
            fprintf(stderr, "%s: %d %s\n", bad[i].path, code, buf);
        assert_int_equal(code, bad[i].code);
        if (code == 400) {
            json_t *e = json_loads(buf, 0, NULL);
            assert_non_null(e);
            assert_true(json_is_false(json_object_get(e, "success")));
            assert_non_null(json_string_value(json_object_get(e, "error")));
            json_decref(e);
        }
    }
    snprintf(path, sizeof(path), "/query_key?key=%s", key); /* 4097 bytes: over the key cap */
    assert_int_equal(curl_get(mp.mport, path, buf, sizeof(buf)), 400);
    key[4096] = 0; /* 4096 bytes: a valid, absent key */
    snprintf(path, sizeof(path), "/query_key?key=%s", key);
    assert_int_equal(curl_get(mp.mport, path, buf, sizeof(buf)), 404);
    /* 1025 keys: over the batch cap; 1024 are answered */
    static char keys[16 * 1100];
    size_t off = 0;
    for (int i = 0; i < 1025; i++)
        off += (size_t)snprintf(keys + off, sizeof(keys) - off, "%s%d", i ? "," : "", i);
    static char bpath[sizeof(keys) + 64];
    snprintf(bpath, sizeof(bpath), "/batch_query_keys?keys=%s", keys);
    assert_int_equal(curl_get(mp.mport, bpath, buf, sizeof(buf)), 400);
    *strrchr(bpath, ',') = 0;
    j = curl_json(mp.mport, bpath, 200, buf, sizeof(buf));
    assert_int_equal(json_object_size(json_object_get(j, "data")), 1024);
    json_decref(j);
    char cmd[256];
    snprintf(cmd, sizeof(cmd),
             "curl -s -o /dev/null -w '%%{http_code}' -X POST 'http://127.0.0.1:%u/health'",
             mp.mport);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    assert_non_null(fgets(buf, 16, p));
    pclose(p);
    assert_string_equal(buf, "405");
    assert_int_equal(curl_get(mp.mport, "/health", buf, sizeof(buf)), 200);
    assert_int_equal(key_op(a, MC_OP_REMOVE, CA, "hk2", false), MC_OK); /* no lease was taken */
    assert_int_equal(get(a, "hk", NULL, NULL, NULL), MC_OK);
    mc_rpc_client_destroy(a);
    stop_master(&mp, SIGTERM);
    rm_wal(&mp);
}

/* --max_threads is validated like upstream's other numeric flags: out of range exits 2. */
static void test_max_threads_flag(void **state)
{
    (void)state;
    static master_proc_t mp;
    memset(&mp, 0, sizeof(mp));
    new_wal_dir(&mp);
    assert_false(start_master_ex(&mp, "--max_threads=0", true));
    assert_false(start_master_ex(&mp, "--max_threads=100000", true));
    start_master(&mp, "--max_threads=1 --rpc_thread_num=8");
    stop_master(&mp, SIGTERM);
    rm_wal(&mp);
}

/* --eviction_policy: lru and adaptive start; anything else exits 2 naming the flag. */
/* Runs mooncake_master with args (no WAL, no ports), expecting it to exit 2 with msg in its
 * output. */
static void expect_refused(const char *args, const char *msg)
{
    const char *bindir = getenv("MC_BIN_DIR");
    assert_non_null(bindir);
    char cmd[1024], out[1024] = "";
    snprintf(cmd, sizeof(cmd),
             "exec %s/mooncake_master %s --wal_dir= --port=0 --metrics_port=-1 2>&1", bindir,
             args);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t got = fread(out, 1, sizeof(out) - 1, f);
    out[got] = 0;
    int wst = pclose(f);
    assert_true(WIFEXITED(wst));
    if (WEXITSTATUS(wst) != 2 || !strstr(out, msg))
        fail_msg("%s: status %d, output '%s'", args, WEXITSTATUS(wst), out);
}

static void test_eviction_policy_flag(void **state)
{
    (void)state;
    expect_refused("--eviction_policy=s3fifo",
                   "--eviction_policy must be lru or adaptive, got 's3fifo'");
    static master_proc_t mp;
    memset(&mp, 0, sizeof(mp));
    new_wal_dir(&mp);
    start_master(&mp, "--eviction_policy=adaptive");
    stop_master(&mp, SIGTERM);
    start_master(&mp, "--eviction_policy=lru");
    stop_master(&mp, SIGTERM);
    rm_wal(&mp);
}

/* Upstream's flags kept for its command lines: --enable_oplog (needs --enable_ha, as
 * upstream; otherwise no effect), the shared-filesystem tier's flags (only their defaults),
 * the promotion limits (ranges). */
static void test_upstream_tier_flags(void **state)
{
    (void)state;
    expect_refused("--enable_oplog", "enable_oplog requires enable_ha=true");
    expect_refused("--root_fs_dir=/mnt/3fs", "--root_fs_dir");
    expect_refused("--root_fs_dir=/mnt/3fs", "--enable_offload");
    expect_refused("--global_file_segment_size=1024", "not supported");
    expect_refused("--enable_disk_eviction=false", "not supported");
    expect_refused("--quota_bytes=1GB", "not supported");
    expect_refused("--promotion_queue_limit=0", "promotion_queue_limit");
    expect_refused("--promotion_max_per_heartbeat=0", "promotion_max_per_heartbeat");
    static master_proc_t mp;
    memset(&mp, 0, sizeof(mp));
    new_wal_dir(&mp);
    start_master(&mp, "--enable_oplog=false --oplog_poll_interval_ms=500 "
                      "--oplog_batch_max_entries=64 --batch_oplog_retry_timeout_sec=10 "
                      "--root_fs_dir= --enable_disk_eviction=true --quota_bytes=0 "
                      "--offload_force_evict=true --enable_offload=true "
                      "--promotion_queue_limit=10 --promotion_max_per_heartbeat=4");
    stop_master(&mp, SIGTERM);
    rm_wal(&mp);
}

/* --ha_commit: etcd or standbys; --ha_isr_timeout_ms below the lease TTL (exit 2 otherwise). */
static void test_ha_commit_flags(void **state)
{
    (void)state;
    expect_refused("--ha_commit=raft", "--ha_commit=raft: etcd or standbys");
    expect_refused("--ha_commit=standbys --ha_lease_ttl_sec=2 --ha_isr_timeout_ms=2000",
                   "--ha_isr_timeout_ms=2000 must be below the lease TTL (2000 ms)");
    expect_refused("--ha_isr_timeout_ms=0", "ha_isr_timeout_ms");
}

/* --enable_http_metadata_server: the TE metadata store served by the master, persisted next to
 * the WAL so that it survives kill -9 (upstream #2246). Skipped when this build lacks it. */
static void test_http_metadata_server(void **state)
{
    (void)state;
    static master_proc_t mp;
    memset(&mp, 0, sizeof(mp));
    new_wal_dir(&mp);
    uint16_t hp;
    assert_int_equal(mc_net_free_port(&hp), MC_OK);
    char extra[128];
    snprintf(extra, sizeof(extra), "--enable_http_metadata_server --http_metadata_server_port=%u",
             hp);
    if (!start_master_ex(&mp, extra, true)) {
        fprintf(stderr, "built without the HTTP metadata server; skipping\n");
        skip();
    }
    char cmd[256], out[4096];
    snprintf(cmd, sizeof(cmd),
             "curl -s -o /dev/null -m 5 -X PUT -d '{\"name\":\"seg\"}' "
             "'http://127.0.0.1:%u/metadata?key=mooncake/ram/seg'", hp);
    assert_int_equal(system(cmd), 0);
    /* the metadata server is on its own port: read through curl_get's helper */
    uint64_t deadline = mc_now_ms() + 5000;
    while (curl_get(hp, "/metadata?key=mooncake/ram/seg", out, sizeof(out)) != 200)
        assert_true(mc_now_ms() < deadline);
    assert_non_null(strstr(out, "\"seg\""));
    stop_master(&mp, SIGKILL);
    start_master(&mp, extra);
    deadline = mc_now_ms() + 5000;
    while (curl_get(hp, "/metadata?key=mooncake/ram/seg", out, sizeof(out)) != 200)
        assert_true(mc_now_ms() < deadline);
    assert_non_null(strstr(out, "\"seg\""));
    stop_master(&mp, SIGTERM);
    rm_wal(&mp);
}

/* A real Prometheus server scrapes the master; master_key_count must change in its TSDB. */
static pid_t g_prom;
static char g_prom_dir[128];

static double prom_query(uint16_t port, const char *q)
{
    static char buf[65536];
    char path[256];
    snprintf(path, sizeof(path), "/api/v1/query?query=%s", q);
    if (curl_get(port, path, buf, sizeof(buf)) != 200)
        return -1;
    /* ..."value":[1690000000.123,"1"]... */
    const char *v = strstr(buf, "\"value\":[");
    if (!v)
        return -1;
    v = strchr(v, ',');
    if (!v || v[1] != '"')
        return -1;
    return atof(v + 2);
}

static void test_prometheus(void **state)
{
    (void)state;
    if (access("/usr/bin/prometheus", X_OK) != 0) {
        fprintf(stderr, "prometheus not installed; skipping\n");
        skip();
    }
    static master_proc_t mp;
    memset(&mp, 0, sizeof(mp));
    new_wal_dir(&mp);
    start_master(&mp, NULL);
    snprintf(g_prom_dir, sizeof(g_prom_dir), "/tmp/mc_prom_XXXXXX");
    assert_non_null(mkdtemp(g_prom_dir));
    char cfg[256];
    snprintf(cfg, sizeof(cfg), "%s/prometheus.yml", g_prom_dir);
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fprintf(f, "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
               "scrape_configs:\n  - job_name: mooncake_master\n    static_configs:\n"
               "      - targets: ['127.0.0.1:%u']\n", mp.mport);
    fclose(f);
    uint16_t pport;
    assert_int_equal(mc_net_free_port(&pport), MC_OK);
    g_prom = fork();
    assert_true(g_prom >= 0);
    if (g_prom == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        char a1[300], a2[300], a3[64];
        snprintf(a1, sizeof(a1), "--config.file=%s", cfg);
        snprintf(a2, sizeof(a2), "--storage.tsdb.path=%s/data", g_prom_dir);
        snprintf(a3, sizeof(a3), "--web.listen-address=127.0.0.1:%u", pport);
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(devnull, 2);
        execl("/usr/bin/prometheus", "prometheus", a1, a2, a3, (char *)NULL);
        _exit(127);
    }
    uint64_t deadline = mc_now_ms() + 30000;
    while (prom_query(pport, "master_key_count") != 0) {
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(200);
    }
    mc_rpc_client_t *a;
    assert_int_equal(mc_rpc_client_create(mp.addr, NULL, &a), MC_OK);
    assert_int_equal(mount(a, CA, "segA", 1 << 30, 1 << 20, 1, false), MC_OK);
    for (int i = 0; i < 3; i++) {
        char key[16];
        snprintf(key, sizeof(key), "pk%d", i);
        assert_int_equal(put_start(a, CA, key, 1000, 1, NULL), MC_OK);
        assert_int_equal(put_end(a, CA, key, 1), MC_OK);
    }
    while (prom_query(pport, "master_key_count") != 3) {
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(200);
    }
    assert_true(prom_query(pport, "master_put_end_requests_total") == 3);
    mc_rpc_client_destroy(a);
    stop_master(&mp, SIGTERM);
    rm_wal(&mp);
}


static int teardown(void **state)
{
    (void)state;
    if (master_proc_teardown() != 0)
        return -1;
    if (g_prom > 0) {
        kill(g_prom, SIGTERM);
        waitpid(g_prom, NULL, 0);
        g_prom = 0;
    }
    if (g_prom_dir[0]) {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_prom_dir);
        if (system(cmd) != 0)
            return -1;
        g_prom_dir[0] = 0;
    }
    return 0;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_state_machine, teardown),
        cmocka_unit_test_teardown(test_client_death, teardown),
        cmocka_unit_test_teardown(test_bad_input_keeps_serving, teardown),
        cmocka_unit_test_teardown(test_kill9_restart, teardown),
        cmocka_unit_test_teardown(test_http, teardown),
        cmocka_unit_test_teardown(test_http_metrics, teardown),
        cmocka_unit_test_teardown(test_max_threads_flag, teardown),
        cmocka_unit_test_teardown(test_eviction_policy_flag, teardown),
        cmocka_unit_test_teardown(test_upstream_tier_flags, teardown),
        cmocka_unit_test(test_ha_commit_flags),
        cmocka_unit_test_teardown(test_prometheus, teardown),
        cmocka_unit_test_teardown(test_http_metadata_server, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
