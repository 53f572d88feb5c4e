/* Tenants on the data path, end to end (docs/security.md, "Data ports and tenants"): a master
 * and a storage server share a token file with a cluster secret and a tenant line; a client
 * holding only the tenant token puts, gets, batch-puts, batch-gets, upserts a value it holds a
 * lease on (the stamp over the old value needs a write grant: without one the upsert waits
 * out the 30 s lease) and force-removes, all through grants the master signs and the storage
 * server checks. A cluster-token client acting for the tenant reads the same bytes without
 * grants. A tenant-bound client runs without the placement feed and guesses nothing from its
 * own puts (no read grant for either). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/net.h"
#include "common/time.h"
#include "mooncake/store.h"
#include "support/test_util.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CLUSTER "store-grants-cluster-secret-0123"
#define TENANT "store-grants-tenant-secret-0123"

static char dir[256], srv_tok[300], ten_tok[300], cl_tok[300], master_addr[64];
static pid_t master_pid, server_pid;

static void write_token(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static int setup(void **state)
{
    (void)state;
    assert_int_equal(mt_tmpdir(dir, sizeof(dir)), 0);
    snprintf(srv_tok, sizeof(srv_tok), "%s/srv.token", dir);
    snprintf(ten_tok, sizeof(ten_tok), "%s/tenant.token", dir);
    snprintf(cl_tok, sizeof(cl_tok), "%s/cluster.token", dir);
    write_token(srv_tok, CLUSTER "\n" TENANT " tenant=acme\n");
    write_token(ten_tok, TENANT " tenant=acme\n");
    write_token(cl_tok, CLUSTER "\n");
    uint16_t port;
    assert_int_equal(mc_net_free_port(&port), MC_OK);
    snprintf(master_addr, sizeof(master_addr), "127.0.0.1:%u", port);

    char bin[512], portf[32], tok[340], log[300], m[128];
    mt_bin_path("mooncake_master", bin, sizeof(bin));
    snprintf(portf, sizeof(portf), "--port=%u", port);
    snprintf(tok, sizeof(tok), "--auth_token_file=%s", srv_tok);
    char *margv[] = {bin, portf, "--metrics_port=0", "--wal_dir=", tok,
                     "--default_kv_lease_ttl=30000", NULL};
    snprintf(log, sizeof(log), "%s/master.log", dir);
    master_pid = mt_spawn(margv, log);
    assert_true(master_pid > 0);
    assert_int_equal(mt_wait_log(log, "mooncake_master listening", 10000), 0);

    /* the storage server takes the token from the environment (te_env) */
    mt_bin_path("mooncake_client", bin, sizeof(bin));
    snprintf(m, sizeof(m), "--master_server_address=%s", master_addr);
    char *sargv[] = {bin, m, "--global_segment_size=64MB", "--local_hostname=127.0.0.1",
                     "--protocol=tcp", NULL};
    snprintf(log, sizeof(log), "%s/server.log", dir);
    setenv("MC_AUTH_TOKEN_FILE", srv_tok, 1);
    server_pid = mt_spawn(sargv, log);
    unsetenv("MC_AUTH_TOKEN_FILE");
    assert_true(server_pid > 0);
    assert_int_equal(mt_wait_log(log, "mooncake_client ready", 10000), 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    mt_stop(server_pid, SIGTERM, 5000);
    mt_stop(master_pid, SIGTERM, 5000);
    mt_rmdir(dir);
    return 0;
}

/* A client that contributes no memory (everything goes to the storage server). */
static mc_store_t *client_feed(const char *token, const char *tenant, const char *feed)
{
    static mc_te_config_t tuning[4];
    static int n;
    mc_te_config_t *t = &tuning[n++ % 4];
    *t = (mc_te_config_t){.auth_token_file = token};
    mc_store_config_t cfg = {.local_hostname = "127.0.0.1", .metadata_server = "P2PHANDSHAKE",
                             .protocol = "tcp", .master_server_addr = master_addr,
                             .transfer_timeout_ms = 2000, .tenant_id = tenant, .te_tuning = t,
                             .placement_feed_prefix = feed};
    mc_store_t *s = NULL;
    assert_int_equal(mc_store_create(&cfg, &s), MC_OK);
    return s;
}

static mc_store_t *client(const char *token, const char *tenant)
{
    return client_feed(token, tenant, NULL);
}

static void fill(char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (char)(seed * 131 + i * 7 + (i >> 8));
}

static void test_tenant_data_path(void **state)
{
    (void)state;
    enum { N = 128, SZ = 4096 };
    mc_store_t *t = client(ten_tok, NULL);
    static char v[N][SZ], out[N][SZ];
    struct iovec in_iov[N], out_iov[N];
    const struct iovec *in_p[N], *out_p[N];
    size_t np[N];
    char names[N][32];
    const char *keys[N];
    for (int i = 0; i < N; i++) {
        fill(v[i], SZ, (unsigned)i + 1);
        snprintf(names[i], sizeof(names[i]), "grants/%d", i);
        keys[i] = names[i];
        in_iov[i] = (struct iovec){v[i], SZ};
        out_iov[i] = (struct iovec){out[i], SZ};
        in_p[i] = &in_iov[i];
        out_p[i] = &out_iov[i];
        np[i] = 1;
    }
    /* single put (by another client of the tenant: t holds no write grant on it) and get */
    mc_store_t *w = client(ten_tok, NULL);
    assert_int_equal(mc_store_put(w, "grants/one", &in_iov[0], 1, NULL), MC_OK);
    mc_store_destroy(w);
    assert_int_equal(mc_store_get_into(t, "grants/one", &out_iov[0], 1), SZ);
    assert_memory_equal(out[0], v[0], SZ);
    /* a batch of 128: one grant per answer */
    int32_t pr[N];
    int64_t gr[N];
    assert_int_equal(mc_store_batch_put(t, N, keys, in_p, np, NULL, false, pr), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(pr[i], MC_OK);
    memset(out, 0, sizeof(out));
    assert_int_equal(mc_store_batch_get_into(t, N, keys, out_p, np, gr), MC_OK);
    for (int i = 0; i < N; i++) {
        assert_int_equal(gr[i], SZ);
        assert_memory_equal(out[i], v[i], SZ);
    }
    /* the get above holds a 30 s lease: the upsert stamps the old value (with the write grant
     * of the answer's retired list) instead of waiting the lease out */
    uint64_t t0 = mc_now_ms();
    assert_int_equal(mc_store_upsert(t, "grants/one", &in_iov[1], 1, NULL), MC_OK);
    assert_true(mc_now_ms() - t0 < 15000);
    assert_int_equal(mc_store_get_into(t, "grants/one", &out_iov[0], 1), SZ);
    assert_memory_equal(out[0], v[1], SZ);

    /* a cluster-token client acting for the tenant reads the same bytes, no grant needed */
    mc_store_t *c = client(cl_tok, "acme");
    assert_int_equal(mc_store_get_into(c, "grants/7", &out_iov[0], 1), SZ);
    assert_memory_equal(out[0], v[7], SZ);
    mc_store_destroy(c);

    t0 = mc_now_ms();
    assert_int_equal(mc_store_remove_all(t, true), N + 1);
    assert_true(mc_now_ms() - t0 < 15000);
    mc_store_destroy(t);
}

/* Placements pushed by the feed carry no grants: a tenant-bound client runs without the feed
 * (its first read of what another client put is a lookup and a read); nor does it guess from
 * its own puts (it holds no read grant for them). */
static void test_tenant_no_feed_no_put_hints(void **state)
{
    (void)state;
    enum { SZ = 8192 };
    static char v[SZ], out[SZ];
    fill(v, SZ, 99);
    struct iovec iv = {v, SZ}, io = {out, SZ};
    mc_store_t *r = client_feed(ten_tok, NULL, "feed/");
    mc_store_t *w = client(ten_tok, NULL);
    assert_int_equal(mc_store_put(w, "feed/a", &iv, 1, NULL), MC_OK);
    mc_store_read_stats_t st;
    mc_store_read_stats(r, &st);
    assert_int_equal(st.feed_placements, 0);
    uint64_t lookups = st.master_lookups;
    assert_int_equal(mc_store_get_into(r, "feed/a", &io, 1), SZ);
    assert_memory_equal(out, v, SZ);
    mc_store_read_stats(r, &st);
    assert_int_equal(st.master_lookups, lookups + 1);
    /* the writer's own first get (no guess from its put: it would be refused) */
    memset(out, 0, SZ);
    assert_int_equal(mc_store_get_into(w, "feed/a", &io, 1), SZ);
    assert_memory_equal(out, v, SZ);
    mc_store_destroy(w);
    mc_store_destroy(r);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tenant_data_path),
        cmocka_unit_test(test_tenant_no_feed_no_put_hints),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
