/* The store client's metrics and its HTTP server, against a real master and storage server:
 * after known puts and gets the byte counters and histogram counts are exact, every master
 * RPC is counted, metrics_off keeps none, counts stay exact with several threads; the client
 * HTTP server answers /metrics, /health, /metrics/summary, 404/405 for anything else, refuses
 * oversized requests and keeps serving, and a taken port leaves the client working without
 * it (upstream's behaviour). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "client/store_metrics.h"
#include "common/alloc.h"
#include "common/net.h"
#include "mooncake/log.h"
#include "mooncake/store.h"
#include "support/test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char tmp_dir[256];
static uint16_t master_port;
static char master_addr[64];
static pid_t master_pid, server_pid;

static int setup(void **state)
{
    (void)state;
    assert_int_equal(mt_tmpdir(tmp_dir, sizeof(tmp_dir)), 0);
    assert_int_equal(mc_net_free_port(&master_port), MC_OK);
    snprintf(master_addr, sizeof(master_addr), "127.0.0.1:%u", master_port);
    char bin[512], port[32], wal[300], log[400];
    mt_bin_path("mooncake_master", bin, sizeof(bin));
    snprintf(port, sizeof(port), "--port=%u", master_port);
    snprintf(wal, sizeof(wal), "--wal_dir=%s", tmp_dir);
    snprintf(log, sizeof(log), "%s/master.log", tmp_dir);
    char *margv[] = {bin, port, "--metrics_port=0", wal, NULL};
    master_pid = mt_spawn(margv, log);
    assert_true(master_pid > 0);
    assert_int_equal(mt_wait_log(log, "mooncake_master listening", 10000), 0);

    char m[128];
    mt_bin_path("mooncake_client", bin, sizeof(bin));
    snprintf(m, sizeof(m), "--master_server_address=%s", master_addr);
    snprintf(log, sizeof(log), "%s/server.log", tmp_dir);
    char *sargv[] = {bin, m, "--global_segment_size=64MB", "--local_hostname=127.0.0.1", NULL};
    server_pid = mt_spawn(sargv, log);
    assert_true(server_pid > 0);
    assert_int_equal(mt_wait_log(log, "mooncake_client ready", 10000), 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    mt_stop(server_pid, SIGTERM, 5000);
    mt_stop(master_pid, SIGTERM, 5000);
    mt_rmdir(tmp_dir);
    return 0;
}

/* A client without a segment of its own (every byte crosses to the storage server), lease
 * cache off (every get asks the master: GetReplicaList counts are exact). */
static mc_store_t *open_store(bool metrics_off, bool http, int http_port, mc_status_t *st_p)
{
    mc_store_config_t cfg = {
        .local_hostname = "127.0.0.1",
        .metadata_server = "P2PHANDSHAKE",
        .protocol = "tcp",
        .master_server_addr = master_addr,
        .lease_cache_off = true,
        .metrics_off = metrics_off,
        .client_http_enable = http,
        .client_http_port = http_port,
        .client_http_host = http ? "127.0.0.1" : NULL,
    };
    mc_store_t *s = NULL;
    mc_status_t st = mc_store_create(&cfg, &s);
    if (st_p)
        *st_p = st;
    else
        assert_int_equal(st, MC_OK);
    return s;
}

/* The value of the sample `series` (name plus labels, exactly) in Prometheus text, or -1. */
static long long sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return atoll(p + n + 1);
    }
    return -1;
}

static char *metrics_text(mc_store_t *s)
{
    char *t = NULL;
    assert_int_equal(mc_store_metrics_text(s, &t), MC_OK);
    assert_non_null(t);
    return t;
}

static void put_bytes(mc_store_t *s, const char *key, size_t len)
{
    char *v = malloc(len);
    memset(v, (int)len, len);
    struct iovec iov = {v, len};
    assert_int_equal(mc_store_put(s, key, &iov, 1, NULL), MC_OK);
    free(v);
}

static void test_counts_are_exact(void **state)
{
    (void)state;
    mc_store_t *s = open_store(false, false, 0, NULL);
    char *t = metrics_text(s);
    assert_int_equal(sample(t, "mooncake_transfer_read_bytes"), 0);
    assert_int_equal(sample(t, "mooncake_transfer_write_bytes"), 0);
    assert_int_equal(sample(t, "mooncake_transfer_get_latency_count"), 0);
    assert_int_equal(sample(t, "mooncake_client_rpc_count{rpc_name=\"MountSegment\"}"), -1);
    assert_int_equal(sample(t, "mooncake_client_rpc_count{rpc_name=\"PutStart\"}"), -1);
    assert_non_null(strstr(t, "# TYPE mooncake_transfer_get_latency histogram\n"));
    assert_non_null(strstr(t, "# TYPE mooncake_client_rpc_count counter\n"));
    assert_null(strstr(t, "mooncake_ssd_")); /* no SSD tier: no series, not zeros */
    /* the data port's refusals (mc_te_conn_stats): none here */
    assert_int_equal(sample(t, "mooncake_transfer_denied_requests"), 0);
    assert_int_equal(sample(t, "mooncake_transfer_grants_refused"), 0);
    assert_int_equal(sample(t, "mooncake_transfer_grants_shared"), 0);
    assert_non_null(strstr(t, "# TYPE mooncake_transfer_denied_requests counter\n"));
    assert_non_null(strstr(t, "# TYPE mooncake_transfer_grants_refused counter\n"));
    free(t);

    /* 5 puts of 1000..5000 bytes, 7 gets (one a miss), a put of an existing key */
    uint64_t wrote = 0, read = 0;
    char key[32];
    for (int i = 1; i <= 5; i++) {
        snprintf(key, sizeof(key), "m-%d", i);
        put_bytes(s, key, 1000u * i);
        wrote += 1000u * i;
    }
    put_bytes(s, "m-1", 1000); /* create-once: nothing written */
    for (int i = 1; i <= 5; i++) {
        snprintf(key, sizeof(key), "m-%d", i);
        void *v;
        size_t len;
        assert_int_equal(mc_store_get(s, key, &v, &len), MC_OK);
        free(v);
        read += len;
    }
    char buf[4096];
    struct iovec iov = {buf, sizeof(buf)};
    assert_int_equal(mc_store_get_into(s, "m-3", &iov, 1), 3000);
    read += 3000;
    assert_int_equal(mc_store_get_into(s, "m-absent", &iov, 1), MC_ERR_OBJECT_NOT_FOUND);

    mc_store_metrics_t m;
    assert_int_equal(mc_store_metrics(s, &m), MC_OK);
    assert_int_equal(m.write_bytes, wrote);
    assert_int_equal(m.read_bytes, read);
    assert_int_equal(m.put.count, 6);
    assert_int_equal(m.get.count, 7);
    assert_int_equal(m.batch_get.count, 0);
    assert_true(m.rpc_count >= 6 + 5 + 7 && m.rpc_answered <= m.rpc_count);

    t = metrics_text(s);
    assert_int_equal(sample(t, "mooncake_transfer_write_bytes"), (long long)wrote);
    assert_int_equal(sample(t, "mooncake_transfer_read_bytes"), (long long)read);
    assert_int_equal(sample(t, "mooncake_transfer_put_latency_count"), 6);
    assert_int_equal(sample(t, "mooncake_transfer_put_latency_bucket{le=\"+Inf\"}"), 6);
    assert_int_equal(sample(t, "mooncake_transfer_get_latency_count"), 7);
    assert_true(sample(t, "mooncake_transfer_get_latency_bucket{le=\"20000000\"}") <= 7);
    assert_true(sample(t, "mooncake_transfer_get_latency_bucket{le=\"50\"}") >= 0);
    assert_int_equal(sample(t, "mooncake_client_rpc_count{rpc_name=\"MountSegment\"}"), -1);
    assert_int_equal(sample(t, "mooncake_client_rpc_count{rpc_name=\"PutStart\"}"), 6);
    assert_int_equal(sample(t, "mooncake_client_rpc_count{rpc_name=\"PutEnd\"}"), 5);
    assert_int_equal(sample(t, "mooncake_client_rpc_count{rpc_name=\"GetReplicaList\"}"), 7);
    assert_int_equal(sample(t, "mooncake_client_rpc_latency_count{rpc_name=\"GetReplicaList\"}"),
                     7);
    assert_int_equal(
        sample(t, "mooncake_client_rpc_latency_bucket{rpc_name=\"PutStart\",le=\"+Inf\"}"), 6);
    free(t);

    /* batches: 3 keys put (one existing), 4 got (one missing) */
    const char *bk[4] = {"mb-1", "mb-2", "m-5", "mb-absent"};
    char v1[100], v2[200], v3[5000];
    memset(v1, 1, sizeof(v1));
    memset(v2, 2, sizeof(v2));
    memset(v3, 3, sizeof(v3));
    struct iovec p1 = {v1, sizeof(v1)}, p2 = {v2, sizeof(v2)}, p3 = {v3, sizeof(v3)};
    const struct iovec *bp[3] = {&p1, &p2, &p3};
    size_t bn[3] = {1, 1, 1};
    int32_t pr[3];
    assert_int_equal(mc_store_batch_put(s, 3, bk, bp, bn, NULL, false, pr), MC_OK);
    assert_int_equal(pr[0], MC_OK);
    assert_int_equal(pr[2], MC_OK);
    wrote += 300; /* m-5 exists: nothing written for it */
    void *vals[4];
    int64_t gr[4];
    assert_int_equal(mc_store_batch_get(s, 4, bk, vals, gr), MC_OK);
    assert_int_equal(gr[0], 100);
    assert_int_equal(gr[2], 5000);
    assert_true(gr[3] < 0);
    for (int i = 0; i < 4; i++)
        free(vals[i]);
    read += 100 + 200 + 5000;
    assert_int_equal(mc_store_metrics(s, &m), MC_OK);
    assert_int_equal(m.write_bytes, wrote);
    assert_int_equal(m.read_bytes, read);
    assert_int_equal(m.batch_put.count, 1);
    assert_int_equal(m.batch_get.count, 1);
    assert_int_equal(m.put.count, 6);
    assert_int_equal(m.get.count, 7);
    t = metrics_text(s);
    assert_int_equal(sample(t, "mooncake_transfer_batch_get_latency_count"), 1);
    assert_int_equal(sample(t, "mooncake_client_rpc_count{rpc_name=\"BatchPutStart\"}"), 1);
    assert_int_equal(sample(t, "mooncake_client_rpc_count{rpc_name=\"BatchGetReplicaList\"}"), 1);
    free(t);

    /* the summary: upstream's shape */
    assert_int_equal(mc_store_metrics_summary(s, &t), MC_OK);
    assert_non_null(strstr(t, "Client Metrics Summary\n=== Transfer Metrics Summary ===\n"));
    assert_non_null(strstr(t, "Get: count=7"));
    assert_non_null(strstr(t, "PutStart: count=6"));
    free(t);
    mc_store_destroy(s);
}

/* The engine's counters and the stale-view count go out as they are (store_metrics_render). */
static void test_te_refusals_rendered(void **state)
{
    (void)state;
    store_metrics_t *m = store_metrics_new();
    assert_non_null(m);
    mc_te_conn_stats_t cs = {.denied = 7, .grants_refused = 3, .grants_shared = 11};
    char *t = NULL;
    assert_int_equal(store_metrics_render(m, &cs, 5, &t), MC_OK);
    assert_int_equal(sample(t, "mooncake_transfer_denied_requests"), 7);
    assert_int_equal(sample(t, "mooncake_client_stale_view_answers"), 5);
    assert_int_equal(sample(t, "mooncake_transfer_grants_refused"), 3);
    assert_int_equal(sample(t, "mooncake_transfer_grants_shared"), 11);
    free(t);
    assert_int_equal(store_metrics_render(m, NULL, 0, &t), MC_OK); /* no engine: no series */
    assert_null(strstr(t, "mooncake_transfer_denied_requests"));
    free(t);
    mc_free(m);
}

static void test_metrics_off(void **state)
{
    (void)state;
    mc_status_t st;
    mc_store_t *s = open_store(true, true, 0, &st);
    assert_int_equal(st, MC_OK);
    put_bytes(s, "off-1", 64);
    char buf[64];
    struct iovec iov = {buf, sizeof(buf)};
    assert_int_equal(mc_store_get_into(s, "off-1", &iov, 1), 64);
    char *t = (char *)1;
    assert_int_equal(mc_store_metrics_text(s, &t), MC_ERR_NOT_SUPPORTED);
    assert_null(t);
    assert_int_equal(mc_store_metrics_summary(s, &t), MC_ERR_NOT_SUPPORTED);
    mc_store_metrics_t m;
    assert_int_equal(mc_store_metrics(s, &m), MC_ERR_NOT_SUPPORTED);
    assert_int_equal(m.rpc_count, 0);
    uint16_t port = mc_store_client_http_port(s);
    assert_true(port > 0);
    char *resp;
    const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
    assert_int_equal(mt_http_raw(port, req, sizeof(req) - 1, &resp), 503); /* upstream's */
    assert_null(strstr(resp, "mooncake_"));
    free(resp);
    mc_store_destroy(s);
    assert_int_equal(mc_store_metrics_text(NULL, &t), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_store_client_http_port(NULL), 0);
}

/* Log lines at WARN and above since the sink was installed (capture_sink). */
static pthread_mutex_t warn_mu = PTHREAD_MUTEX_INITIALIZER;
static char warned[4096];

static void capture_sink(mc_log_level_t level, const char *file, int line, const char *msg,
                         void *arg)
{
    (void)file;
    (void)line;
    (void)arg;
    if (level < MC_LOG_LEVEL_WARN)
        return;
    pthread_mutex_lock(&warn_mu);
    size_t n = strlen(warned);
    snprintf(warned + n, sizeof(warned) - n, "%s\n", msg);
    pthread_mutex_unlock(&warn_mu);
}

static int get(uint16_t port, const char *path, char **resp_p)
{
    char req[512];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    return mt_http_raw(port, req, (size_t)n, resp_p);
}

static void test_http_server(void **state)
{
    (void)state;
    mc_store_t *s = open_store(false, true, 0, NULL);
    uint16_t port = mc_store_client_http_port(s);
    assert_true(port > 0);
    put_bytes(s, "h-1", 4096);
    char buf[4096];
    struct iovec iov = {buf, sizeof(buf)};
    assert_int_equal(mc_store_get_into(s, "h-1", &iov, 1), 4096);

    char *r;
    assert_int_equal(get(port, "/metrics", &r), 200);
    assert_non_null(strstr(r, "Content-Type: text/plain; version=0.0.4"));
    const char *body = strstr(r, "\r\n\r\n");
    assert_non_null(body);
    assert_int_equal(sample(body + 4, "mooncake_transfer_write_bytes"), 4096);
    assert_int_equal(sample(body + 4, "mooncake_transfer_read_bytes"), 4096);
    assert_int_equal(sample(body + 4, "mooncake_transfer_get_latency_count"), 1);
    assert_int_equal(sample(body + 4, "mooncake_client_rpc_count{rpc_name=\"PutStart\"}"), 1);
    free(r);
    assert_int_equal(get(port, "/health", &r), 200);
    assert_non_null(strstr(r, "{\"status\":\"healthy\",\"code\":0}"));
    free(r);
    assert_int_equal(get(port, "/metrics/summary", &r), 200);
    assert_non_null(strstr(r, "Client Metrics Summary"));
    assert_non_null(strstr(r, "Get: count=1"));
    free(r);
    assert_int_equal(get(port, "/nope", &r), 404);
    free(r);
    assert_int_equal(get(port, "/metrics/", &r), 404);
    free(r);
    const char post[] = "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n";
    assert_int_equal(mt_http_raw(port, post, sizeof(post) - 1, &r), 405);
    free(r);
    /* a request over the 16 KiB cap is refused, and the server goes on */
    size_t big = 40000;
    char *req = malloc(big + 64);
    int n = snprintf(req, 64, "GET /metrics HTTP/1.0\r\nX-Pad: ");
    memset(req + n, 'a', big);
    memcpy(req + n + big, "\r\n\r\n", 5);
    int code = mt_http_raw(port, req, (size_t)n + big + 4, &r);
    assert_true(code == -1 || (code >= 400 && code < 500));
    free(r);
    free(req);
    assert_int_equal(get(port, "/metrics", &r), 200);
    free(r);

    /* the port is taken now: a second client on it sets up without the server, and a warning
     * names the port (upstream's behaviour) */
    mc_status_t st;
    warned[0] = '\0';
    mc_log_set_sink(capture_sink, NULL);
    mc_store_t *s2 = open_store(false, true, port, &st);
    mc_log_set_sink(NULL, NULL);
    char expect[128];
    snprintf(expect, sizeof(expect),
             "client HTTP server not started: cannot listen on 127.0.0.1:%u: Address already in use",
             (unsigned)port);
    assert_non_null(strstr(warned, expect));
    assert_int_equal(st, MC_OK);
    assert_int_equal(mc_store_client_http_port(s2), 0);
    put_bytes(s2, "h-2", 10);
    assert_int_equal(mc_store_get_into(s2, "h-2", &iov, 1), 10);
    mc_store_destroy(s2);
    assert_int_equal(get(port, "/health", &r), 200); /* the first one still serves */
    free(r);
    mc_store_destroy(s);
    assert_int_equal(get(port, "/health", &r), -1); /* stopped with the client */
    free(r);

    /* bad port or host: setup fails */
    assert_null(open_store(false, true, 70000, &st));
    assert_int_equal(st, MC_ERR_INVALID_PARAMS);
    assert_null(open_store(false, true, -1, &st));
    assert_int_equal(st, MC_ERR_INVALID_PARAMS);
    mc_store_config_t cfg = {.metadata_server = "P2PHANDSHAKE", .master_server_addr = master_addr,
                             .client_http_enable = true, .client_http_host = "not-an-ip"};
    mc_store_t *bad = NULL;
    assert_int_equal(mc_store_create(&cfg, &bad), MC_ERR_INVALID_PARAMS);
    assert_null(bad);
}

#define THREADS 4
#define PER_THREAD 50

static void *worker(void *arg)
{
    mc_store_t *s = ((void **)arg)[0];
    int id = (int)(intptr_t)((void **)arg)[1];
    char key[32], buf[512];
    struct iovec iov = {buf, sizeof(buf)};
    for (int i = 0; i < PER_THREAD; i++) {
        snprintf(key, sizeof(key), "t%d-%d", id, i);
        memset(buf, id, sizeof(buf));
        if (mc_store_put(s, key, &iov, 1, NULL) != MC_OK)
            return (void *)1;
        if (mc_store_get_into(s, key, &iov, 1) != (int64_t)sizeof(buf))
            return (void *)1;
    }
    return NULL;
}

/* Many threads at once, with scrapes while they run: the counts add up exactly. */
static void test_counts_under_threads(void **state)
{
    (void)state;
    mc_store_t *s = open_store(false, true, 0, NULL);
    pthread_t th[THREADS];
    void *args[THREADS][2];
    for (int i = 0; i < THREADS; i++) {
        args[i][0] = s;
        args[i][1] = (void *)(intptr_t)i;
        assert_int_equal(pthread_create(&th[i], NULL, worker, args[i]), 0);
    }
    for (int i = 0; i < 5; i++) {
        char *r;
        assert_int_equal(get(mc_store_client_http_port(s), "/metrics", &r), 200);
        free(r);
    }
    for (int i = 0; i < THREADS; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        assert_null(ret);
    }
    mc_store_metrics_t m;
    assert_int_equal(mc_store_metrics(s, &m), MC_OK);
    assert_int_equal(m.put.count, THREADS * PER_THREAD);
    assert_int_equal(m.get.count, THREADS * PER_THREAD);
    assert_int_equal(m.write_bytes, THREADS * PER_THREAD * 512);
    assert_int_equal(m.read_bytes, THREADS * PER_THREAD * 512);
    char *t = metrics_text(s);
    assert_int_equal(sample(t, "mooncake_client_rpc_count{rpc_name=\"GetReplicaList\"}"),
                     THREADS * PER_THREAD);
    free(t);
    mc_store_destroy(s);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_are_exact),
        cmocka_unit_test(test_te_refusals_rendered),
        cmocka_unit_test(test_metrics_off),
        cmocka_unit_test(test_http_server),
        cmocka_unit_test(test_counts_under_threads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
