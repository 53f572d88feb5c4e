/* What authentication costs a store client, counted: a master and a storage server share a
 * token file; a client of this process puts the keys and goes away, then brand-new reader
 * clients (same token) read them. Handshakes run once per connection and are counted by
 * common/auth.h (mc_auth_counters): this process's client side counts every connection a
 * reader opens (master and storage server), the storage server's own counters
 * (mc_auth_server_handshakes_total on its /metrics) the ones opened to it. What a reader pays
 * is a fixed set of connections: its master connections (a pool of MC_MASTER_POOL_SIZE,
 * opened as calls overlap: its own calls and its heartbeat) and, per storage server, one
 * descriptor fetch and at most tcp_connections data connections, whatever the number of keys,
 * the size of the object or the number of gets. A client that opened a connection per
 * request, per key or per get fails these counts. docs/benchmarks.md ("Authentication")
 * turns them into the bound on every figure. Data over tcp (force_tcp) but in
 * test_same_host, where the shm path opens no data connection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "client/master_client.h"
#include "common/auth.h"
#include "common/net.h"
#include "mooncake/store.h"
#include "support/test_util.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SECRET "store-handshakes-cluster-secret-0123"
#define NKEYS 128
#define SMALL 4096
#define BIG (32u << 20)

static char dir[256], tok[300], master_addr[64];
static pid_t master_pid, server_pid;
static uint16_t server_http; /* the storage server's /metrics */
static char g_names[NKEYS][32];
static const char *g_keys[NKEYS];
static char *g_small, *g_big, *g_out; /* the values put, and where readers get them */

static int put_keys(void);

static int setup(void **state)
{
    (void)state;
    assert_int_equal(mt_tmpdir(dir, sizeof(dir)), 0);
    snprintf(tok, sizeof(tok), "%s/cluster.token", dir);
    int fd = open(tok, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, SECRET "\n", sizeof(SECRET)), (ssize_t)sizeof(SECRET));
    close(fd);
    uint16_t port;
    assert_int_equal(mc_net_free_port(&port), MC_OK);
    snprintf(master_addr, sizeof(master_addr), "127.0.0.1:%u", port);

    char bin[512], portf[32], tokf[340], log[300], m[128];
    mt_bin_path("mooncake_master", bin, sizeof(bin));
    snprintf(portf, sizeof(portf), "--port=%u", port);
    snprintf(tokf, sizeof(tokf), "--auth_token_file=%s", tok);
    char *margv[] = {bin, portf, "--metrics_port=0", "--wal_dir=", tokf, NULL};
    snprintf(log, sizeof(log), "%s/master.log", dir);
    master_pid = mt_spawn(margv, log);
    assert_true(master_pid > 0);
    assert_int_equal(mt_wait_log(log, "mooncake_master listening", 10000), 0);

    mt_bin_path("mooncake_client", bin, sizeof(bin));
    snprintf(m, sizeof(m), "--master_server_address=%s", master_addr);
    char *sargv[] = {bin, m, "--global_segment_size=256MB", "--local_hostname=127.0.0.1",
                     "--protocol=tcp", "--enable_http_server", "--http_port=0",
                     "--http_metrics_public", NULL};
    snprintf(log, sizeof(log), "%s/server.log", dir);
    setenv("MC_AUTH_TOKEN_FILE", tok, 1); /* the storage server's token (te_env) */
    server_pid = mt_spawn(sargv, log);
    unsetenv("MC_AUTH_TOKEN_FILE");
    assert_true(server_pid > 0);
    assert_int_equal(mt_wait_log(log, "mooncake_client ready", 10000), 0);
    FILE *f = fopen(log, "r"); /* "mooncake_client http_port=<port>" precedes the ready line */
    assert_non_null(f);
    char line[512];
    unsigned hp = 0;
    while (!hp && fgets(line, sizeof(line), f))
        if (sscanf(line, "mooncake_client http_port=%u", &hp) != 1)
            hp = 0;
    fclose(f);
    assert_true(hp > 0 && hp < 65536);
    server_http = (uint16_t)hp;
    return put_keys();
}

static int teardown(void **state)
{
    (void)state;
    mt_stop(server_pid, SIGTERM, 5000);
    mt_stop(master_pid, SIGTERM, 5000);
    mt_rmdir(dir);
    free(g_small);
    free(g_big);
    free(g_out);
    return 0;
}

/* A client holding the cluster token that contributes no memory, data over tcp with
 * conns pooled connections per storage server and one get spread over at most stripe of
 * them (fixed here: the default stripe depends on the CPU count). */
static mc_store_t *client_on(uint32_t conns, uint32_t stripe, int force_tcp)
{
    static mc_te_config_t tuning[8];
    static int n;
    mc_te_config_t *t = &tuning[n++ % 8];
    *t = (mc_te_config_t){.auth_token_file = tok, .force_tcp = force_tcp,
                          .tcp_connections = conns, .tcp_stripe = stripe};
    mc_store_config_t cfg = {.local_hostname = "127.0.0.1", .metadata_server = "P2PHANDSHAKE",
                             .protocol = "tcp", .master_server_addr = master_addr,
                             .transfer_timeout_ms = 5000, .te_tuning = t};
    mc_store_t *s = NULL;
    assert_int_equal(mc_store_create(&cfg, &s), MC_OK);
    return s;
}

static mc_store_t *client(uint32_t conns, uint32_t stripe)
{
    return client_on(conns, stripe, 1);
}

static void fill(char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (char)(seed * 131 + i * 7 + (i >> 8));
}

/* The writer: NKEYS values of SMALL bytes and one of BIG, put by a client that is gone by
 * the time the readers count. */
static int put_keys(void)
{
    g_small = malloc((size_t)NKEYS * SMALL);
    g_big = malloc(BIG);
    g_out = malloc(BIG);
    assert_non_null(g_small);
    assert_non_null(g_big);
    assert_non_null(g_out);
    fill(g_big, BIG, 77);
    struct iovec iov[NKEYS];
    const struct iovec *iov_p[NKEYS];
    size_t np[NKEYS];
    int32_t res[NKEYS];
    for (int i = 0; i < NKEYS; i++) {
        snprintf(g_names[i], sizeof(g_names[i]), "hs/small/%d", i);
        g_keys[i] = g_names[i];
        fill(g_small + (size_t)i * SMALL, SMALL, (unsigned)i + 1);
        iov[i] = (struct iovec){g_small + (size_t)i * SMALL, SMALL};
        iov_p[i] = &iov[i];
        np[i] = 1;
    }
    mc_store_t *w = client(0, 0);
    assert_int_equal(mc_store_batch_put(w, NKEYS, g_keys, iov_p, np, NULL, false, res), MC_OK);
    for (int i = 0; i < NKEYS; i++)
        assert_int_equal(res[i], MC_OK);
    struct iovec big = {g_big, BIG};
    assert_int_equal(mc_store_put(w, "hs/big", &big, 1, NULL), MC_OK);
    mc_store_destroy(w);
    return 0;
}

/* ---- counting ---- */

/* Handshakes the storage server verified so far (its /metrics). */
static uint64_t server_verified(void)
{
    static const char rq[] = "GET /metrics HTTP/1.0\r\n\r\n";
    char *resp = NULL;
    assert_int_equal(mt_http_raw(server_http, rq, sizeof(rq) - 1, &resp), 200);
    const char *name = "\nmc_auth_server_handshakes_total ";
    const char *at = strstr(resp, name);
    assert_non_null(at);
    unsigned long long v = strtoull(at + strlen(name), NULL, 10);
    free(resp);
    return v;
}

/* A point to count from: this process's counters and the storage server's. */
typedef struct mark {
    mc_auth_counters_t local;
    uint64_t server;
} mark_t;

static void mark_now(mark_t *m)
{
    mc_auth_counters(&m->local);
    m->server = server_verified();
}

/* What the reader paid since *m, and moves the mark: *data_p the connections to the storage
 * server (exact: nobody else talks to it meanwhile), *master_p the rest of this process's
 * client handshakes (its master connections). Every one keyed and none failed; nothing
 * connected to this process. */
static void paid(mark_t *m, uint64_t *data_p, uint64_t *master_p)
{
    mark_t now;
    mark_now(&now);
    uint64_t mine = now.local.client_ok - m->local.client_ok;
    assert_int_equal(mine, now.local.client_ok_keyed - m->local.client_ok_keyed);
    assert_int_equal(now.local.client_failed, m->local.client_failed);
    assert_int_equal(now.local.server_ok, m->local.server_ok);
    assert_int_equal(now.local.server_refused, m->local.server_refused);
    *data_p = now.server - m->server;
    assert_true(*data_p <= mine);
    *master_p = mine - *data_p;
    *m = now;
}

/* A batch get of the first n small keys, checked. */
static void get_small(mc_store_t *r, size_t n)
{
    struct iovec out[NKEYS];
    const struct iovec *out_p[NKEYS];
    size_t np[NKEYS];
    int64_t got[NKEYS];
    memset(g_out, 0, n * SMALL);
    for (size_t i = 0; i < n; i++) {
        out[i] = (struct iovec){g_out + i * SMALL, SMALL};
        out_p[i] = &out[i];
        np[i] = 1;
    }
    assert_int_equal(mc_store_batch_get_into(r, n, g_keys, out_p, np, got), MC_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(got[i], SMALL);
    assert_memory_equal(g_out, g_small, n * SMALL);
}

static void get_big(mc_store_t *r)
{
    struct iovec out = {g_out, BIG};
    memset(g_out, 0, BIG);
    assert_int_equal(mc_store_get_into(r, "hs/big", &out, 1), BIG);
    assert_memory_equal(g_out, g_big, BIG);
}

/* tcp_connections = 1: the first get pays the descriptor fetch and the one data connection,
 * for 1 key as for 128, for 4 KiB as for 32 MiB; later gets pay nothing there. */
static void test_one_connection(void **state)
{
    (void)state;
    static const char *what[] = {"1 x 4 KiB", "128 x 4 KiB", "32 MiB"};
    for (size_t c = 0; c < 3; c++) {
        mark_t m;
        uint64_t data, master, master_total = 0;
        mark_now(&m);
        mc_store_t *r = client(1, 1);
        paid(&m, &data, &master);
        assert_int_equal(data, 0); /* setting up talks to the master only */
        master_total += master;
        if (c < 2)
            get_small(r, c ? NKEYS : 1);
        else
            get_big(r);
        paid(&m, &data, &master);
        print_message("%s: data %llu, master %llu\n", what[c], (unsigned long long)data,
                      (unsigned long long)(master_total + master));
        assert_int_equal(data, 2); /* descriptor fetch + the data connection */
        master_total += master;
        for (int i = 0; i < 5; i++) {
            get_small(r, NKEYS);
            get_big(r);
        }
        paid(&m, &data, &master);
        assert_int_equal(data, 0);
        master_total += master;
        /* the master side: one connection, a second one when the heartbeat overlaps a call;
         * never more than the pool */
        assert_true(master_total >= 1 && master_total <= MC_MASTER_POOL_SIZE);
        mc_store_destroy(r);
    }
}

/* The default pool (4 data connections per storage server), a get on one of them (stripe 1,
 * as on 2 CPUs): transfers take the connections round robin, so the first gets open them one
 * or two at a time (a batch's pipelined sub-batches are transfers of their own), the first
 * also fetching the descriptor; once all four are open no get pays anything. With stripe 4 a
 * 32 MiB get spreads over all four at once: its first get pays all five. */
static void test_default_pool(void **state)
{
    (void)state;
    mark_t m;
    uint64_t data, master, master_total = 0;
    mark_now(&m);
    mc_store_t *r = client(0, 1);
    get_big(r);
    paid(&m, &data, &master);
    master_total += master;
    assert_int_equal(data, 2); /* descriptor fetch + the first data connection */
    uint64_t opened = data;
    for (int i = 0; i < 10; i++) {
        get_small(r, NKEYS);
        get_big(r);
    }
    paid(&m, &data, &master);
    master_total += master;
    opened += data;
    print_message("stripe 1: data connections after 21 gets: %llu\n", (unsigned long long)opened);
    assert_int_equal(opened, 1 + 4);
    for (int i = 0; i < 10; i++) {
        get_small(r, NKEYS);
        get_big(r);
    }
    paid(&m, &data, &master);
    assert_int_equal(data, 0);
    master_total += master;
    assert_true(master_total >= 1 && master_total <= MC_MASTER_POOL_SIZE);
    mc_store_destroy(r);

    mark_now(&m);
    r = client(0, 4);
    get_big(r);
    paid(&m, &data, &master);
    print_message("stripe 4, first 32 MiB get: data %llu\n", (unsigned long long)data);
    assert_int_equal(data, 5);
    for (int i = 0; i < 10; i++) {
        get_small(r, NKEYS);
        get_big(r);
    }
    paid(&m, &data, &master);
    assert_int_equal(data, 0);
    mc_store_destroy(r);
}

/* Same host, the default transport: data moves through the storage server's shared memory,
 * so the first get pays the descriptor fetch alone and later gets nothing. */
static void test_same_host(void **state)
{
    (void)state;
    mark_t m;
    uint64_t data, master, master_total = 0;
    mark_now(&m);
    mc_store_t *r = client_on(0, 0, 0);
    get_small(r, NKEYS);
    paid(&m, &data, &master);
    master_total += master;
    assert_int_equal(data, 1);
    for (int i = 0; i < 10; i++) {
        get_small(r, NKEYS);
        get_big(r);
    }
    paid(&m, &data, &master);
    master_total += master;
    assert_int_equal(data, 0);
    assert_true(master_total >= 1 && master_total <= MC_MASTER_POOL_SIZE);
    mc_store_destroy(r);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_connection),
        cmocka_unit_test(test_default_pool),
        cmocka_unit_test(test_same_host),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
