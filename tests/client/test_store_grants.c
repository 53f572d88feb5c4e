/* Tenants on the data path, end to end (docs/security.md, "Data ports and tenants"): a master
 * and a storage server share a token file with a cluster secret and a tenant line; a client
 * holding only the tenant token puts, gets, batch-puts, batch-gets, upserts a value it holds a
 * lease on (the stamp over the old value needs a write grant: without one the upsert waits
 * out the 30 s lease) and force-removes, all through grants the master signs and the storage
 * server checks. A cluster-token client acting for the tenant reads the same bytes without
 * grants. A tenant-bound client's placement feed pushes it its own tenant's keys only, with
 * read grants the storage server accepts (its first reads need no lookup); it guesses nothing
 * from its own puts (it holds no read grant for them). */
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
#define OTHER "store-grants-other-tenant-secret"

static char dir[256], srv_tok[300], ten_tok[300], oth_tok[300], cl_tok[300], master_addr[64];
static pid_t master_pid, server_pid;
static uint16_t server_http; /* the storage server's /metrics */

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
    snprintf(oth_tok, sizeof(oth_tok), "%s/other.token", dir);
    write_token(srv_tok, CLUSTER "\n" TENANT " tenant=acme\n" OTHER " tenant=zeta\n");
    write_token(ten_tok, TENANT " tenant=acme\n");
    write_token(oth_tok, OTHER " tenant=zeta\n");
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
                     "--protocol=tcp", "--enable_http_server", "--http_port=0",
                     "--http_metrics_public", NULL};
    snprintf(log, sizeof(log), "%s/server.log", dir);
    setenv("MC_AUTH_TOKEN_FILE", srv_tok, 1);
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

/* A batch of N values of SZ bytes under the keys "<prefix><i>", and room to read them back. */
enum { N = 128, SZ = 4096 };
typedef struct batch {
    char v[N][SZ], out[N][SZ];
    struct iovec in_iov[N], out_iov[N];
    const struct iovec *in_p[N], *out_p[N];
    size_t np[N];
    char names[N][32];
    const char *keys[N];
} batch_t;

static void batch_init(batch_t *b, const char *prefix, unsigned seed)
{
    for (int i = 0; i < N; i++) {
        fill(b->v[i], SZ, seed + (unsigned)i);
        snprintf(b->names[i], sizeof(b->names[i]), "%s%d", prefix, i);
        b->keys[i] = b->names[i];
        b->in_iov[i] = (struct iovec){b->v[i], SZ};
        b->out_iov[i] = (struct iovec){b->out[i], SZ};
        b->in_p[i] = &b->in_iov[i];
        b->out_p[i] = &b->out_iov[i];
        b->np[i] = 1;
    }
}

static void test_tenant_data_path(void **state)
{
    (void)state;
    mc_store_t *t = client(ten_tok, NULL);
    static batch_t b;
    batch_init(&b, "grants/", 1);
    /* single put (by another client of the tenant: t holds no write grant on it) and get */
    mc_store_t *w = client(ten_tok, NULL);
    assert_int_equal(mc_store_put(w, "grants/one", &b.in_iov[0], 1, NULL), MC_OK);
    mc_store_destroy(w);
    assert_int_equal(mc_store_get_into(t, "grants/one", &b.out_iov[0], 1), SZ);
    assert_memory_equal(b.out[0], b.v[0], SZ);
    /* a batch of 128: one grant per answer */
    int32_t pr[N];
    int64_t gr[N];
    assert_int_equal(mc_store_batch_put(t, N, b.keys, b.in_p, b.np, NULL, false, pr), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(pr[i], MC_OK);
    memset(b.out, 0, sizeof(b.out));
    assert_int_equal(mc_store_batch_get_into(t, N, b.keys, b.out_p, b.np, gr), MC_OK);
    for (int i = 0; i < N; i++) {
        assert_int_equal(gr[i], SZ);
        assert_memory_equal(b.out[i], b.v[i], SZ);
    }
    /* the get above holds a 30 s lease: the upsert stamps the old value (with the write grant
     * of the answer's retired list) instead of waiting the lease out */
    uint64_t t0 = mc_now_ms();
    assert_int_equal(mc_store_upsert(t, "grants/one", &b.in_iov[1], 1, NULL), MC_OK);
    assert_true(mc_now_ms() - t0 < 15000);
    assert_int_equal(mc_store_get_into(t, "grants/one", &b.out_iov[0], 1), SZ);
    assert_memory_equal(b.out[0], b.v[1], SZ);

    /* a cluster-token client acting for the tenant reads the same bytes, no grant needed */
    mc_store_t *c = client(cl_tok, "acme");
    assert_int_equal(mc_store_get_into(c, "grants/7", &b.out_iov[0], 1), SZ);
    assert_memory_equal(b.out[0], b.v[7], SZ);
    mc_store_destroy(c);

    t0 = mc_now_ms();
    assert_int_equal(mc_store_remove_all(t, true), N + 1);
    assert_true(mc_now_ms() - t0 < 15000);
    mc_store_destroy(t);
}

/* Data requests of tenant-bound peers the storage server refused so far (its /metrics). */
static uint64_t server_denied(void)
{
    static const char rq[] = "GET /metrics HTTP/1.0\r\n\r\n";
    char *resp = NULL;
    assert_int_equal(mt_http_raw(server_http, rq, sizeof(rq) - 1, &resp), 200);
    const char *name = "\nmooncake_transfer_denied_requests ";
    const char *at = strstr(resp, name);
    assert_non_null(at);
    unsigned long long v = strtoull(at + strlen(name), NULL, 10);
    free(resp);
    return v;
}

/* The placement feed of a tenant-bound client (store-client.md, "Placement feed"): it pushes
 * the keys another client of the same tenant puts, with read grants, so that the first reads
 * need no lookup and the storage server refuses none of them; keys of other tenants under the
 * same prefix (another tenant's, "default"'s) are never pushed. The writer guesses nothing
 * from its own puts (it would be refused). */
static void test_tenant_feed(void **state)
{
    (void)state;
    static batch_t b;
    static char ov[SZ];
    batch_init(&b, "feed/", 1000);
    mc_store_t *r = client_feed(ten_tok, NULL, "feed/");
    mc_store_t *w = client(ten_tok, NULL);
    /* other tenants' b.keys under the prefix, one named as one of ours, committed first */
    fill(ov, SZ, 7);
    struct iovec oiv = {ov, SZ}, io = {b.out[0], SZ};
    mc_store_t *o = client(oth_tok, NULL);
    assert_int_equal(mc_store_put(o, "feed/0", &oiv, 1, NULL), MC_OK);
    assert_int_equal(mc_store_put(o, "feed/zeta", &oiv, 1, NULL), MC_OK);
    mc_store_t *d = client(cl_tok, NULL);
    assert_int_equal(mc_store_put(d, "feed/default", &oiv, 1, NULL), MC_OK);

    int32_t pr[N];
    int64_t gr[N];
    assert_int_equal(mc_store_batch_put(w, N, b.keys, b.in_p, b.np, NULL, false, pr), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(pr[i], MC_OK);
    /* events are pushed in order: once ours are all in, the others' were passed over */
    mc_store_read_stats_t st;
    uint64_t deadline = mc_now_ms() + 10000;
    do {
        mc_store_read_stats(r, &st);
        if (st.feed_placements >= N)
            break;
        mc_sleep_ms(10);
    } while (mc_now_ms() < deadline);
    assert_int_equal(st.feed_placements, N);

    /* the first reads: exact bytes, no lookup, nothing refused by the storage server */
    uint64_t lookups = st.master_lookups, hits = st.lease_hits, denied = server_denied();
    assert_int_equal(mc_store_batch_get_into(r, N, b.keys, b.out_p, b.np, gr), MC_OK);
    for (int i = 0; i < N; i++) {
        assert_int_equal(gr[i], SZ);
        assert_memory_equal(b.out[i], b.v[i], SZ);
    }
    mc_store_read_stats(r, &st);
    assert_int_equal(st.master_lookups, lookups);
    assert_int_equal(st.lease_hits, hits + N);
    assert_int_equal(server_denied(), denied);

    /* the other tenants' b.keys: not r's, as without the feed */
    assert_int_equal(mc_store_get_into(r, "feed/zeta", &io, 1), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_store_get_into(r, "feed/default", &io, 1), MC_ERR_OBJECT_NOT_FOUND);
    mc_store_read_stats(r, &st);
    assert_int_equal(st.feed_placements, N);
    memset(b.out[0], 0, SZ);
    assert_int_equal(mc_store_get_into(o, "feed/0", &io, 1), SZ);
    assert_memory_equal(b.out[0], ov, SZ);

    /* the writer's own first get (no guess from its put: it would be refused) */
    memset(b.out[0], 0, SZ);
    assert_int_equal(mc_store_get_into(w, "feed/0", &io, 1), SZ);
    assert_memory_equal(b.out[0], b.v[0], SZ);
    assert_int_equal(server_denied(), denied);
    assert_int_equal(mc_store_remove_all(o, true), 2);
    assert_int_equal(mc_store_remove(d, "feed/default", true), MC_OK);
    mc_store_destroy(d);
    mc_store_destroy(o);
    mc_store_destroy(w);
    mc_store_destroy(r);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tenant_data_path),
        cmocka_unit_test(test_tenant_feed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
