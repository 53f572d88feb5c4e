/* End-to-end tests of the store client against real daemons:
 * put/get of several sizes, create-once put vs upsert, misses and small buffers, batches,
 * existence/size/remove, checksum verification (a corrupted replica is never returned),
 * replication surviving a storage server kill -9, and a master kill -9 + restart after which
 * committed objects are readable again with the same bytes; stale replica hints never yield
 * another key's bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/hash.h"
#include "common/net.h"
#include "common/time.h"
#include "mooncake/store.h"
#include "support/test_util.h"
#include "te_env.h" /* tools/common */

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct daemon_proc {
    pid_t pid;
    char log[512];
} daemon_proc_t;

static char wal_dir[256];
static uint16_t master_port;
static char master_addr[64];
static daemon_proc_t master;
static daemon_proc_t servers[2];

static void start_master(void)
{
    char bin[512], port[32], wal[300];
    mt_bin_path("mooncake_master", bin, sizeof(bin));
    snprintf(port, sizeof(port), "--port=%u", master_port);
    snprintf(wal, sizeof(wal), "--wal_dir=%s", wal_dir);
    char *argv[] = {bin, port, "--metrics_port=0", wal, "--client_ttl=3", NULL};
    snprintf(master.log, sizeof(master.log), "%s/master.log", wal_dir);
    unlink(master.log);
    master.pid = mt_spawn(argv, master.log);
    assert_true(master.pid > 0);
    assert_int_equal(mt_wait_log(master.log, "mooncake_master listening", 10000), 0);
}

static void start_server(int i, const char *size)
{
    char bin[512], m[128], seg[64], label[64];
    mt_bin_path("mooncake_client", bin, sizeof(bin));
    snprintf(m, sizeof(m), "--master_server_address=%s", master_addr);
    snprintf(seg, sizeof(seg), "--global_segment_size=%s", size);
    snprintf(label, sizeof(label), "--host_label=host%d", i);
    char *argv[] = {bin, m, seg, label, "--local_hostname=127.0.0.1", NULL};
    snprintf(servers[i].log, sizeof(servers[i].log), "%s/server%d.log", wal_dir, i);
    unlink(servers[i].log);
    servers[i].pid = mt_spawn(argv, servers[i].log);
    assert_true(servers[i].pid > 0);
    assert_int_equal(mt_wait_log(servers[i].log, "mooncake_client ready", 10000), 0);
}

/* Transfer-engine tuning of the test's own clients, from the environment the way the store
 * programs take it (test_store_tcp runs this program with MC_FORCE_TCP=1). */
static mc_te_config_t g_tuning;

/* feed_prefix: mc_store_config_t.placement_feed_prefix (NULL = no placement feed);
 * not_ready_wait_ms: its not_ready_wait_ms (0 = the library's default). */
static mc_store_t *open_store_with(uint64_t segment, const char *protocol,
                                   const char *feed_prefix, uint32_t not_ready_wait_ms)
{
    mc_store_config_t cfg = {
        .local_hostname = "127.0.0.1",
        .metadata_server = "P2PHANDSHAKE",
        .global_segment_size = segment,
        .protocol = protocol,
        .master_server_addr = master_addr,
        .host_label = "tester",
        .transfer_timeout_ms = 1500,
        .placement_feed_prefix = feed_prefix,
        .te_tuning = &g_tuning,
        .not_ready_wait_ms = not_ready_wait_ms,
    };
    mc_store_t *s = NULL;
    assert_int_equal(mc_store_create(&cfg, &s), MC_OK);
    return s;
}

static mc_store_t *open_store_over(uint64_t segment, const char *protocol)
{
    return open_store_with(segment, protocol, NULL, 0);
}

static mc_store_t *open_store(uint64_t segment)
{
    return open_store_over(segment, "tcp");
}

static void fill(char *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (char)x;
    }
}

static int setup(void **state)
{
    assert_int_equal(mt_tmpdir(wal_dir, sizeof(wal_dir)), 0);
    assert_int_equal(mc_net_free_port(&master_port), MC_OK);
    snprintf(master_addr, sizeof(master_addr), "127.0.0.1:%u", master_port);
    start_master();
    start_server(0, "128MB");
    start_server(1, "128MB");
    return 0;
}

static int teardown(void **state)
{
    for (int i = 0; i < 2; i++)
        mt_stop(servers[i].pid, SIGTERM, 5000);
    mt_stop(master.pid, SIGTERM, 5000);
    mt_rmdir(wal_dir);
    return 0;
}

static void test_roundtrip_sizes(void **state)
{
    mc_store_t *s = open_store(0);
    static const size_t sizes[] = {1, 4096, 512 * 1024, 33u << 20};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        char key[64];
        snprintf(key, sizeof(key), "roundtrip-%zu", sizes[k]);
        char *val = malloc(sizes[k]);
        fill(val, sizes[k], k);
        struct iovec iov = {val, sizes[k]};
        assert_int_equal(mc_store_put(s, key, &iov, 1, NULL), MC_OK);
        void *out;
        size_t len;
        assert_int_equal(mc_store_get(s, key, &out, &len), MC_OK);
        assert_int_equal(len, sizes[k]);
        assert_memory_equal(out, val, len);
        free(out);
        assert_int_equal(mc_store_get_size(s, key), (int64_t)sizes[k]);
        assert_int_equal(mc_store_exists(s, key), 1);
        free(val);
    }
    mc_store_destroy(s);
}

static void test_put_semantics(void **state)
{
    mc_store_t *s = open_store(0);
    char a[1000], b[1000], out[2000];
    fill(a, sizeof(a), 1);
    fill(b, sizeof(b), 2);
    struct iovec ia = {a, sizeof(a)}, ib = {b, sizeof(b)}, io = {out, sizeof(out)};
    assert_int_equal(mc_store_put(s, "sem", &ia, 1, NULL), MC_OK);
    /* put is create-once: the second put succeeds without writing */
    assert_int_equal(mc_store_put(s, "sem", &ib, 1, NULL), MC_OK);
    assert_int_equal(mc_store_get_into(s, "sem", &io, 1), (int64_t)sizeof(a));
    assert_memory_equal(out, a, sizeof(a));
    /* upsert overwrites */
    assert_int_equal(mc_store_upsert(s, "sem", &ib, 1, NULL), MC_OK);
    assert_int_equal(mc_store_get_into(s, "sem", &io, 1), (int64_t)sizeof(b));
    assert_memory_equal(out, b, sizeof(b));
    /* scattered put and get */
    struct iovec parts[2] = {{a, 300}, {b, 700}};
    assert_int_equal(mc_store_put(s, "parts", parts, 2, NULL), MC_OK);
    char p1[100], p2[1000];
    struct iovec outs[2] = {{p1, sizeof(p1)}, {p2, sizeof(p2)}};
    assert_int_equal(mc_store_get_into(s, "parts", outs, 2), 1000);
    assert_memory_equal(p1, a, 100);
    assert_memory_equal(p2, a + 100, 200);
    assert_memory_equal(p2 + 200, b, 700);
    /* misses, small buffers, bad keys */
    void *v;
    size_t len;
    assert_int_equal(mc_store_get(s, "absent", &v, &len), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_store_exists(s, "absent"), 0);
    struct iovec small = {out, 10};
    assert_int_equal(mc_store_get_into(s, "sem", &small, 1), MC_ERR_BUFFER_OVERFLOW);
    assert_int_equal(mc_store_put(s, "", &ia, 1, NULL), MC_ERR_INVALID_KEY);
    struct iovec empty = {a, 0};
    assert_int_equal(mc_store_put(s, "zero", &empty, 1, NULL), MC_ERR_INVALID_PARAMS);
    /* keys are bytes: one that is not UTF-8 round-trips (master RPCs carry keys as bytes) */
    static const char bin[] = "bin/\xff\xfe\xc3\x28";
    assert_int_equal(mc_store_put(s, bin, &ia, 1, NULL), MC_OK);
    memset(out, 0, sizeof(out));
    assert_int_equal(mc_store_get_into(s, bin, &io, 1), (int64_t)sizeof(a));
    assert_memory_equal(out, a, sizeof(a));
    const char *bk[] = {bin, "absent"};
    int32_t br[2];
    assert_int_equal(mc_store_batch_exists(s, 2, bk, br), MC_OK);
    assert_int_equal(br[0], 1);
    assert_int_equal(br[1], 0);
    assert_int_equal(mc_store_remove(s, bin, true), MC_OK);
    assert_int_equal(mc_store_exists(s, bin), 0);
    /* remove */
    assert_int_equal(mc_store_remove(s, "parts", true), MC_OK);
    assert_int_equal(mc_store_exists(s, "parts"), 0);
    assert_int_equal(mc_store_remove(s, "parts", true), MC_ERR_OBJECT_NOT_FOUND);
    mc_store_destroy(s);
}

static void test_batches(void **state)
{
    mc_store_t *s = open_store(0);
    enum { N = 64, SZ = 8192 };
    char *vals = malloc(N * SZ), *outs = malloc(N * SZ);
    char names[N][32];
    const char *keys[N];
    struct iovec iov[N], oiov[N];
    const struct iovec *piov[N], *poiov[N];
    size_t nparts[N];
    int32_t res[N];
    int64_t got[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "batch-%d", i);
        keys[i] = names[i];
        fill(vals + i * SZ, SZ, 100 + i);
        iov[i] = (struct iovec){vals + i * SZ, SZ};
        oiov[i] = (struct iovec){outs + i * SZ, SZ};
        piov[i] = &iov[i];
        poiov[i] = &oiov[i];
        nparts[i] = 1;
    }
    assert_int_equal(mc_store_batch_put(s, N, keys, piov, nparts, NULL, false, res), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(res[i], MC_OK);
    memset(outs, 0, N * SZ);
    assert_int_equal(mc_store_batch_get_into(s, N, keys, poiov, nparts, got), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(got[i], SZ);
    assert_memory_equal(outs, vals, N * SZ);
    void *heap[N];
    assert_int_equal(mc_store_batch_get(s, N, keys, heap, got), MC_OK);
    for (int i = 0; i < N; i++) {
        assert_int_equal(got[i], SZ);
        assert_memory_equal(heap[i], vals + i * SZ, SZ);
        free(heap[i]);
    }
    const char *probe[3] = {"batch-0", "nope", "batch-63"};
    assert_int_equal(mc_store_batch_exists(s, 3, probe, res), MC_OK);
    assert_int_equal(res[0], 1);
    assert_int_equal(res[1], 0);
    assert_int_equal(res[2], 1);
    assert_int_equal(mc_store_remove_by_regex(s, "^batch-1[0-9]$", true), 10);
    assert_int_equal(mc_store_exists(s, "batch-15"), 0);
    assert_int_equal(mc_store_exists(s, "batch-20"), 1);
    free(vals);
    free(outs);
    mc_store_destroy(s);
}

/* The test process contributes a segment; an object placed there is corrupted in place and
 * the get must fail with CHECKSUM rather than return the bytes. */
static void test_checksum_detects_corruption(void **state)
{
    mc_store_t *s = open_store(16u << 20);
    char val[4096], out[4096];
    fill(val, sizeof(val), 7);
    struct iovec iv = {val, sizeof(val)}, io = {out, sizeof(out)};
    mc_replicate_config_t cfg = {.replica_num = 1, .preferred_segment = mc_store_hostname(s)};
    assert_int_equal(mc_store_put(s, "corrupt-me", &iv, 1, &cfg), MC_OK);
    mc_replica_desc_t *d;
    size_t n;
    assert_int_equal(mc_store_replica_desc(s, "corrupt-me", &d, &n), MC_OK);
    assert_int_equal(n, 1);
    assert_string_equal(d[0].endpoint, mc_store_hostname(s));
    ((char *)(uintptr_t)d[0].addr)[100] ^= 0x5a; /* flip bits in our own segment */
    free(d);
    assert_int_equal(mc_store_get_into(s, "corrupt-me", &io, 1), MC_ERR_CHECKSUM);
    mc_store_remove(s, "corrupt-me", true);
    mc_store_destroy(s);
}

/* A batch get records each key's hint (and read lease) while its read runs, and takes it back
 * when the bytes fail verification: a corrupted replica leaves the reader no lease, so its
 * next batch get asks the master again instead of reading under a lease (no lease miss);
 * once the replica is restored, a read records the lease and the next get is a lease hit. */
static void test_batch_get_failed_read_keeps_no_lease(void **state)
{
    mc_store_t *owner = open_store(16u << 20), *r = open_store(0);
    enum { LEN = 4096 };
    static char val[LEN], out[LEN];
    fill(val, LEN, 41);
    struct iovec iv = {val, LEN}, io = {out, LEN};
    mc_replicate_config_t cfg = {.replica_num = 1, .preferred_segment = mc_store_hostname(owner)};
    assert_int_equal(mc_store_put(owner, "learn-k", &iv, 1, &cfg), MC_OK);
    mc_replica_desc_t *d;
    size_t n;
    assert_int_equal(mc_store_replica_desc(owner, "learn-k", &d, &n), MC_OK);
    assert_int_equal(n, 1);
    char *at = (char *)(uintptr_t)d[0].addr + 100;
    free(d);
    const char *keys[1] = {"learn-k"};
    const struct iovec *piov[1] = {&io};
    size_t np[1] = {1};
    int64_t res[1] = {0};
    mc_store_read_stats_t s0, s1;
    *at ^= 0x5a;
    for (int round = 0; round < 2; round++) {
        mc_store_read_stats(r, &s0);
        assert_int_equal(mc_store_batch_get_into(r, 1, keys, piov, np, res), MC_OK);
        assert_int_equal(res[0], MC_ERR_CHECKSUM);
        mc_store_read_stats(r, &s1);
        assert_int_equal(s1.lease_misses - s0.lease_misses, 0);
        assert_int_equal(s1.lease_hits - s0.lease_hits, 0);
        assert_true(s1.master_lookups - s0.master_lookups >= 1);
    }
    *at ^= 0x5a;
    assert_int_equal(mc_store_batch_get_into(r, 1, keys, piov, np, res), MC_OK);
    assert_int_equal(res[0], LEN);
    assert_memory_equal(out, val, LEN);
    memset(out, 0, LEN);
    mc_store_read_stats(r, &s0);
    assert_int_equal(mc_store_batch_get_into(r, 1, keys, piov, np, res), MC_OK);
    mc_store_read_stats(r, &s1);
    assert_int_equal(res[0], LEN);
    assert_memory_equal(out, val, LEN);
    assert_int_equal(s1.lease_hits - s0.lease_hits, 1);
    assert_int_equal(s1.master_lookups - s0.master_lookups, 0);
    mc_store_remove(owner, "learn-k", true);
    mc_store_destroy(r);
    mc_store_destroy(owner);
}

/* A replica in another client's segment on this host is read by copies that the engine
 * checksums while copying (te/te_hashed.h; over tcp under test_store_tcp, received and hashed
 * in 64 KiB pieces): a byte corrupted in place anywhere (middle, ends, piece and slice edges)
 * fails single and batch gets with CHECKSUM, for a small value and one large enough for
 * streaming stores; restored, it reads back exactly. */
static void test_checksum_detects_corruption_other_segment(void **state)
{
    mc_store_t *owner = open_store(16u << 20), *s = open_store(0);
    static const size_t sizes[] = {4096, (2u << 20) + 64};
    char *val = malloc(sizes[1]), *out = malloc(sizes[1]);
    assert_non_null(val);
    assert_non_null(out);
    for (size_t k = 0; k < 2; k++) {
        size_t len = sizes[k];
        char key[32];
        snprintf(key, sizeof(key), "corrupt-there-%zu", k);
        fill(val, len, 11 + (int)k);
        struct iovec iv = {val, len}, io = {out, len};
        mc_replicate_config_t cfg = {.replica_num = 1,
                                     .preferred_segment = mc_store_hostname(owner)};
        assert_int_equal(mc_store_put(owner, key, &iv, 1, &cfg), MC_OK);
        mc_replica_desc_t *d;
        size_t n;
        assert_int_equal(mc_store_replica_desc(s, key, &d, &n), MC_OK);
        assert_int_equal(n, 1);
        assert_string_equal(d[0].endpoint, mc_store_hostname(owner));
        char *base = (char *)(uintptr_t)d[0].addr;
        free(d);
        const char *keys[1] = {key};
        const struct iovec *piov[1] = {&io};
        size_t np[1] = {1};
        int64_t res[1] = {0};
        /* mid-block and mid-stripe, both ends, and either side of the 64 KiB pieces a hashed
         * tcp read is received in and of the 1 MiB slices */
        const size_t offs[] = {len / 2 + 1, 0, len - 1, 65535, 65536, (1u << 20) - 1, 1u << 20};
        for (size_t o = 0; o < sizeof(offs) / sizeof(offs[0]) && offs[o] < len; o++) {
            char *at = base + offs[o];
            *at ^= 0x5a;
            assert_int_equal(mc_store_get_into(s, key, &io, 1), MC_ERR_CHECKSUM);
            assert_int_equal(mc_store_batch_get_into(s, 1, keys, piov, np, res), MC_OK);
            assert_int_equal(res[0], MC_ERR_CHECKSUM);
            *at ^= 0x5a;
        }
        memset(out, 0, len);
        assert_int_equal(mc_store_get_into(s, key, &io, 1), (int64_t)len);
        assert_memory_equal(out, val, len);
        memset(out, 0, len);
        assert_int_equal(mc_store_batch_get_into(s, 1, keys, piov, np, res), MC_OK);
        assert_int_equal(res[0], (int64_t)len);
        assert_memory_equal(out, val, len);
        mc_store_remove(owner, key, true);
    }
    free(val);
    free(out);
    mc_store_destroy(s);
    mc_store_destroy(owner);
}

/* A batch of small values from another client's segment, each copied and checksummed by the
 * engine right after the one before it (the shm transport prefetches the next value's start
 * while it hashes the current one; over tcp under test_store_tcp, answers back to back): a
 * byte flipped in one value fails that key alone with CHECKSUM, under the lease of an earlier
 * get as well as on its retry through the master, and every other key reads back exactly. */
static void test_checksum_batch_one_corrupt(void **state)
{
    mc_store_t *owner = open_store(16u << 20), *s = open_store(0);
    enum { N = 8, LEN = 4096, BAD = 3 };
    static char val[N][LEN], out[N][LEN];
    const char *keys[N];
    char names[N][32];
    struct iovec io[N];
    const struct iovec *piov[N];
    size_t np[N];
    int64_t res[N];
    mc_replicate_config_t cfg = {.replica_num = 1, .preferred_segment = mc_store_hostname(owner)};
    for (size_t i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "corrupt-batch-%zu", i);
        keys[i] = names[i];
        fill(val[i], LEN, 100 + i);
        struct iovec iv = {val[i], LEN};
        assert_int_equal(mc_store_put(owner, keys[i], &iv, 1, &cfg), MC_OK);
        io[i] = (struct iovec){out[i], LEN};
        piov[i] = &io[i];
        np[i] = 1;
    }
    assert_int_equal(mc_store_batch_get_into(s, N, keys, piov, np, res), MC_OK); /* leases */
    for (size_t i = 0; i < N; i++)
        assert_int_equal(res[i], LEN);
    mc_replica_desc_t *d;
    size_t n;
    assert_int_equal(mc_store_replica_desc(s, keys[BAD], &d, &n), MC_OK);
    assert_int_equal(n, 1);
    char *base = (char *)(uintptr_t)d[0].addr;
    free(d);
    const size_t offs[] = {LEN / 2 + 5, 0, LEN - 1}; /* mid-stripe, both ends */
    for (size_t o = 0; o < sizeof(offs) / sizeof(offs[0]); o++) {
        char *at = base + offs[o];
        *at ^= 0x5a;
        memset(out, 0, sizeof(out));
        mc_store_read_stats_t s0, s1;
        mc_store_read_stats(s, &s0);
        assert_int_equal(mc_store_batch_get_into(s, N, keys, piov, np, res), MC_OK);
        mc_store_read_stats(s, &s1);
        if (o == 0) /* the good keys under the first get's leases */
            assert_int_equal(s1.lease_hits - s0.lease_hits, N - 1);
        for (size_t i = 0; i < N; i++) {
            if (i == BAD) {
                assert_int_equal(res[i], MC_ERR_CHECKSUM);
                continue;
            }
            assert_int_equal(res[i], LEN);
            assert_memory_equal(out[i], val[i], LEN);
        }
        *at ^= 0x5a;
    }
    memset(out, 0, sizeof(out));
    assert_int_equal(mc_store_batch_get_into(s, N, keys, piov, np, res), MC_OK);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(res[i], LEN);
        assert_memory_equal(out[i], val[i], LEN);
        mc_store_remove(owner, keys[i], true);
    }
    mc_store_destroy(s);
    mc_store_destroy(owner);
}

static void test_replica_survives_server_kill(void **state)
{
    mc_store_t *s = open_store(0);
    size_t len = 1u << 20;
    char *val = malloc(len), *out = malloc(len);
    fill(val, len, 9);
    struct iovec iv = {val, len}, io = {out, len};
    mc_replicate_config_t cfg = {.replica_num = 2};
    mc_replica_desc_t *d;
    size_t n = 0;
    /* After the previous test's master restart both servers re-mount on their next ping; a
     * put placed before that gets one replica (best effort), so wait for two. */
    uint64_t deadline = mc_now_ms() + 10000;
    while (n < 2 && mc_now_ms() < deadline) {
        mc_store_remove(s, "two-copies", true);
        assert_int_equal(mc_store_put(s, "two-copies", &iv, 1, &cfg), MC_OK);
        assert_int_equal(mc_store_replica_desc(s, "two-copies", &d, &n), MC_OK);
        if (n < 2) {
            free(d);
            mc_sleep_ms(100);
        }
    }
    assert_int_equal(n, 2);
    assert_string_not_equal(d[0].segment, d[1].segment);
    free(d);
    mt_stop(servers[0].pid, SIGKILL, 5000);
    servers[0].pid = -1;
    memset(out, 0, len);
    assert_int_equal(mc_store_get_into(s, "two-copies", &io, 1), (int64_t)len);
    assert_memory_equal(out, val, len);
    start_server(0, "128MB");
    free(val);
    free(out);
    mc_store_destroy(s);
}

/* A get of one or two keys by its own thread (waiting_get_main), for
 * test_get_waits_for_remount. */
typedef struct waiting_get {
    mc_store_t *s;
    bool batch;          /* mc_store_batch_get_into of keys[0..1], else mc_store_get of keys[0] */
    const char *keys[2];
    char *out[2];        /* len bytes each */
    size_t len;
    int64_t rc[2];       /* bytes read or a negative status, per key */
    atomic_bool done;
} waiting_get_t;

static void *waiting_get_main(void *arg)
{
    waiting_get_t *g = arg;
    if (g->batch) {
        struct iovec io[2] = {{g->out[0], g->len}, {g->out[1], g->len}};
        const struct iovec *parts[2] = {&io[0], &io[1]};
        size_t np[2] = {1, 1};
        mc_status_t st = mc_store_batch_get_into(g->s, 2, g->keys, parts, np, g->rc);
        if (st != MC_OK)
            g->rc[0] = g->rc[1] = st;
    } else {
        void *v = NULL;
        size_t n = 0;
        mc_status_t st = mc_store_get(g->s, g->keys[0], &v, &n);
        g->rc[0] = st == MC_OK ? (int64_t)n : st;
        if (st == MC_OK)
            memcpy(g->out[0], v, n < g->len ? n : g->len);
        free(v);
    }
    atomic_store(&g->done, true);
    return NULL;
}

/* Waits (bounded) until g's get has asked the master again (its client made more than
 * `first` lookups, what the first attempt takes) or has returned. */
static void wait_asked_again(waiting_get_t *g, uint64_t first)
{
    uint64_t deadline = mc_now_ms() + 10000;
    mc_store_read_stats_t st;
    do {
        mc_store_read_stats(g->s, &st);
        if (st.master_lookups > first || atomic_load(&g->done))
            return;
        mc_sleep_ms(2);
    } while (mc_now_ms() < deadline);
}

/* A get of an object whose storage server has not re-mounted its segment since a master
 * restart waits for the re-mount instead of answering a miss (store-client.md, "Keys not
 * ready"). Both storage servers are frozen (SIGSTOP) across a master kill -9 and restart, so
 * their segments stay RECOVERING until they are resumed: a client with a short wait gets
 * REPLICA_IS_NOT_READY (single and batch; a key never put stays OBJECT_NOT_FOUND, and the
 * recovered key exists), while the gets of clients with a long wait, issued before the
 * servers resume, return the exact bytes once they re-mount. */
static void test_get_waits_for_remount(void **state)
{
    mc_store_t *w = open_store(0);
    mc_store_t *quick = open_store_with(0, "tcp", NULL, 100);
    /* a wait no run reaches: the servers are resumed (and re-mount) first */
    mc_store_t *patient[2] = {open_store_with(0, "tcp", NULL, 60000),
                              open_store_with(0, "tcp", NULL, 60000)};
    size_t len = 64 * 1024;
    const char *keys[2] = {"remount-a", "remount-b"};
    char *val[2], *out[3];
    for (int i = 0; i < 3; i++)
        out[i] = calloc(1, len);
    for (int i = 0; i < 2; i++) {
        val[i] = malloc(len);
        fill(val[i], len, 40 + (uint64_t)i);
        struct iovec iv = {val[i], len};
        assert_int_equal(mc_store_put(w, keys[i], &iv, 1, NULL), MC_OK);
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(mt_freeze(servers[i].pid, 5000), 0);
    mt_stop(master.pid, SIGKILL, 5000);
    start_master();

    struct iovec io = {out[0], len};
    assert_int_equal(mc_store_get_into(quick, keys[0], &io, 1), MC_ERR_REPLICA_IS_NOT_READY);
    assert_int_equal(mc_store_exists(quick, keys[0]), 1);
    const char *bk[2] = {keys[1], "remount-never"};
    void *bv[2];
    int64_t br[2];
    assert_int_equal(mc_store_batch_get(quick, 2, bk, bv, br), MC_OK);
    assert_int_equal(br[0], MC_ERR_REPLICA_IS_NOT_READY);
    assert_int_equal(br[1], MC_ERR_OBJECT_NOT_FOUND);
    assert_null(bv[0]);
    assert_null(bv[1]);

    waiting_get_t single = {.s = patient[0], .keys = {keys[0]}, .out = {out[0]}, .len = len};
    waiting_get_t batch = {.s = patient[1], .batch = true, .keys = {keys[1], "remount-never"},
                           .out = {out[1], out[2]}, .len = len};
    pthread_t t[2];
    assert_int_equal(pthread_create(&t[0], NULL, waiting_get_main, &single), 0);
    assert_int_equal(pthread_create(&t[1], NULL, waiting_get_main, &batch), 0);
    wait_asked_again(&single, 1);
    wait_asked_again(&batch, 2);
    /* both are waiting, not answered, when the servers resume */
    bool single_done = atomic_load(&single.done), batch_done = atomic_load(&batch.done);
    for (int i = 0; i < 2; i++)
        kill(servers[i].pid, SIGCONT);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    assert_false(single_done);
    assert_false(batch_done);
    assert_int_equal(single.rc[0], (int64_t)len);
    assert_memory_equal(out[0], val[0], len);
    assert_int_equal(batch.rc[0], (int64_t)len);
    assert_memory_equal(out[1], val[1], len);
    assert_int_equal(batch.rc[1], MC_ERR_OBJECT_NOT_FOUND);
    for (int i = 0; i < 2; i++) {
        free(val[i]);
        mc_store_destroy(patient[i]);
    }
    for (int i = 0; i < 3; i++)
        free(out[i]);
    mc_store_destroy(quick);
    mc_store_destroy(w);
}

static void test_master_restart_keeps_objects(void **state)
{
    mc_store_t *s = open_store(0);
    size_t len = 256 * 1024;
    char *val = malloc(len), *out = malloc(len);
    fill(val, len, 11);
    struct iovec iv = {val, len}, io = {out, len};
    assert_int_equal(mc_store_put(s, "durable", &iv, 1, NULL), MC_OK);
    assert_int_equal(mc_store_put(s, "durable-unread", &iv, 1, NULL), MC_OK);
    mt_stop(master.pid, SIGKILL, 5000);
    start_master();
    /* Leases are not logged: a recovered object is leased for one period after the restart,
     * so readers that held a lease from the old master keep their bytes in place. */
    assert_int_equal(mc_store_remove(s, "durable-unread", false), MC_ERR_OBJECT_HAS_LEASE);
    /* The storage servers re-mount on their next ping (NEED_REMOUNT); poll with a deadline. */
    int64_t rc = MC_ERR_OBJECT_NOT_FOUND;
    uint64_t deadline = mc_now_ms() + 15000;
    while (mc_now_ms() < deadline) {
        memset(out, 0, len);
        rc = mc_store_get_into(s, "durable", &io, 1);
        if (rc == (int64_t)len)
            break;
        mc_sleep_ms(100);
    }
    assert_int_equal(rc, (int64_t)len);
    assert_memory_equal(out, val, len);
    free(val);
    free(out);
    mc_store_destroy(s);
}

/* A storage server frozen with SIGSTOP holds one of two replicas: the get fails over to the
 * other replica within the transfer deadline and returns the right bytes. */
static void test_frozen_server_fails_over(void **state)
{
    mc_store_t *s = open_store(0);
    size_t len = 1u << 20;
    char *val = malloc(len), *out = malloc(len);
    fill(val, len, 13);
    struct iovec iv = {val, len}, io = {out, len};
    mc_replicate_config_t cfg = {.replica_num = 2};
    assert_int_equal(mc_store_put(s, "frozen", &iv, 1, &cfg), MC_OK);
    for (int victim = 0; victim < 2; victim++) {
        assert_int_equal(mt_freeze(servers[victim].pid, 5000), 0);
        memset(out, 0, len);
        uint64_t t0 = mc_now_ms();
        int64_t rc = mc_store_get_into(s, "frozen", &io, 1);
        uint64_t took = mc_now_ms() - t0;
        kill(servers[victim].pid, SIGCONT);
        assert_int_equal(rc, (int64_t)len);
        assert_memory_equal(out, val, len);
        assert_true(took < 5000); /* bounded by the 1.5 s transfer deadline, not a hang */
    }
    mc_store_remove(s, "frozen", true);
    free(val);
    free(out);
    mc_store_destroy(s);
}


/* Lease cache (docs/internals/store-client.md): a client that holds a read lease on a key reads
 * it without asking the master (checked with the master frozen), single and batched; another
 * client's upsert stamps the old replica so the next get asks the master and returns the new
 * bytes; the client's own forced remove ends its lease, and another client's forced removes
 * stamp the removed replicas. */
static void test_lease_cache(void **state)
{
    mc_store_t *a = open_store(0), *b = open_store(0);
    enum { LEN = 8192 };
    static char v1[LEN], v2[LEN], out[LEN];
    fill(v1, LEN, 31);
    fill(v2, LEN, 32);
    struct iovec i1 = {v1, LEN}, i2 = {v2, LEN}, io = {out, LEN};
    mc_replicate_config_t two = {.replica_num = 2};
    assert_int_equal(mc_store_put(a, "lc-k", &i1, 1, &two), MC_OK);
    assert_int_equal(mc_store_get_into(a, "lc-k", &io, 1), LEN); /* takes the lease */

    assert_int_equal(mt_freeze(master.pid, 5000), 0);
    memset(out, 0, LEN);
    int64_t rc = mc_store_get_into(a, "lc-k", &io, 1);
    const char *keys[1] = {"lc-k"};
    const struct iovec *parts[1] = {&io};
    size_t np[1] = {1};
    int64_t res[1] = {0};
    char out_batch[LEN];
    memcpy(out_batch, out, LEN);
    memset(out, 0, LEN);
    mc_status_t bst = mc_store_batch_get_into(a, 1, keys, parts, np, res);
    kill(master.pid, SIGCONT);
    assert_int_equal(rc, LEN);
    assert_memory_equal(out_batch, v1, LEN);
    assert_int_equal(bst, MC_OK);
    assert_int_equal(res[0], LEN);
    assert_memory_equal(out, v1, LEN);

    /* b upserts while a's lease runs: a must see b's bytes, single and batched */
    assert_int_equal(mc_store_upsert(b, "lc-k", &i2, 1, &two), MC_OK);
    memset(out, 0, LEN);
    assert_int_equal(mc_store_get_into(a, "lc-k", &io, 1), LEN);
    assert_memory_equal(out, v2, LEN);
    const struct iovec *in1[1] = {&i1};
    int32_t put_res[1];
    assert_int_equal(mc_store_batch_put(b, 1, keys, in1, np, &two, true, put_res), MC_OK);
    assert_int_equal(put_res[0], MC_OK);
    memset(out, 0, LEN);
    assert_int_equal(mc_store_batch_get_into(a, 1, keys, parts, np, res), MC_OK);
    assert_int_equal(res[0], LEN);
    assert_memory_equal(out, v1, LEN);

    /* a's own forced remove ends its lease: the bytes are still in place, a must not see them */
    assert_int_equal(mc_store_remove(a, "lc-k", true), MC_OK);
    assert_int_equal(mc_store_get_into(a, "lc-k", &io, 1), MC_ERR_OBJECT_NOT_FOUND);

    /* b's forced removes (single, batch, regex) while a's lease runs: b stamps the removed
     * replicas before its remove returns, so a's next get, which would read under its cached
     * lease, asks the master and finds the key gone */
    for (int how = 0; how < 3; how++) {
        assert_int_equal(mc_store_put(a, "lc-r", &i1, 1, &two), MC_OK);
        assert_int_equal(mc_store_get_into(a, "lc-r", &io, 1), LEN); /* takes the lease */
        const char *rk[1] = {"lc-r"};
        int32_t rres[1] = {-1};
        if (how == 0) {
            assert_int_equal(mc_store_remove(b, "lc-r", true), MC_OK);
        } else if (how == 1) {
            assert_int_equal(mc_store_batch_remove(b, 1, rk, true, rres), MC_OK);
            assert_int_equal(rres[0], MC_OK);
        } else {
            assert_int_equal(mc_store_remove_by_regex(b, "^lc-r$", true), 1);
        }
        assert_int_equal(mc_store_get_into(a, "lc-r", &io, 1), MC_ERR_OBJECT_NOT_FOUND);
        assert_int_equal(mc_store_batch_get_into(a, 1, rk, parts, np, res), MC_OK);
        assert_int_equal(res[0], MC_ERR_OBJECT_NOT_FOUND);
    }

    /* An upsert that finds no space (larger than any segment) has retired the old value all
     * the same; its stamp must still land, so a's lease does not keep serving the old bytes. */
    mc_replicate_config_t one = {.replica_num = 1};
    assert_int_equal(mc_store_put(a, "lc-big", &i1, 1, &one), MC_OK);
    assert_int_equal(mc_store_get_into(a, "lc-big", &io, 1), LEN); /* takes the lease */
    size_t huge = 200u << 20;
    char *hv = calloc(1, huge); /* never touched: the put fails before reading it */
    struct iovec ih = {hv, huge};
    assert_int_equal(mc_store_upsert(b, "lc-big", &ih, 1, &one), MC_ERR_NO_AVAILABLE_HANDLE);
    free(hv);
    assert_int_equal(mc_store_get_into(a, "lc-big", &io, 1), MC_ERR_OBJECT_NOT_FOUND);
    mc_store_destroy(a);
    mc_store_destroy(b);
}

/* The knobs of mc_store_config_t: lease_cache_off makes every get ask the master;
 * MC_STORE_REPLICA_HINTS_OFF keeps no hints (so no cached leases either); te_tuning is copied
 * with the store's own metadata URI, server name and protocol in place of its values (a bogus
 * URI or ucx there would change what the reads below count). */
static mc_store_t *open_knobs(uint32_t hint_slots, bool lease_cache_off,
                              const mc_te_config_t *te_tuning)
{
    mc_store_config_t cfg = {
        .local_hostname = "127.0.0.1",
        .metadata_server = "P2PHANDSHAKE",
        .protocol = "tcp",
        .master_server_addr = master_addr,
        .host_label = "tester",
        .transfer_timeout_ms = 1500,
        .replica_hint_slots = hint_slots,
        .lease_cache_off = lease_cache_off,
        .te_tuning = te_tuning ? te_tuning : &g_tuning,
    };
    mc_store_t *s = NULL;
    assert_int_equal(mc_store_create(&cfg, &s), MC_OK);
    return s;
}

/* Three gets of key through r; returns r's stats after them. */
static mc_store_read_stats_t three_gets(mc_store_t *r, const char *key, const char *v,
                                        size_t len)
{
    static char out[8192];
    struct iovec io = {out, len};
    for (int i = 0; i < 3; i++) {
        memset(out, 0, len);
        assert_int_equal(mc_store_get_into(r, key, &io, 1), (int64_t)len);
        assert_memory_equal(out, v, len);
    }
    mc_store_read_stats_t st;
    mc_store_read_stats(r, &st);
    return st;
}

static void test_config_knobs(void **state)
{
    (void)state;
    enum { LEN = 8192 };
    static char v[LEN];
    fill(v, LEN, 44);
    struct iovec iv = {v, LEN};
    mc_store_t *w = open_store(0);
    assert_int_equal(mc_store_put(w, "knob-k", &iv, 1, NULL), MC_OK);

    mc_store_t *r = open_knobs(0, true, NULL); /* lease cache off */
    mc_store_read_stats_t st = three_gets(r, "knob-k", v, LEN);
    assert_int_equal(st.lease_hits, 0);
    assert_int_equal(st.master_lookups, 3);
    mc_store_destroy(r);

    r = open_knobs(MC_STORE_REPLICA_HINTS_OFF, false, NULL); /* no hints at all */
    st = three_gets(r, "knob-k", v, LEN);
    assert_int_equal(st.lease_hits, 0);
    assert_int_equal(st.speculative_hits, 0);
    assert_int_equal(st.master_lookups, 3);
    mc_store_destroy(r);

    mc_te_config_t tuning = {.metadata_uri = "bogus://nowhere", .local_server_name = "bogus",
                             .protocol = "ucx", .tcp_connections = 2};
    r = open_knobs(1024, false, &tuning); /* the default lease cache: one lookup */
    st = three_gets(r, "knob-k", v, LEN);
    assert_int_equal(st.master_lookups, 1);
    assert_int_equal(st.lease_hits, 2);
    mc_store_destroy(r);

    mc_store_remove(w, "knob-k", true);
    mc_store_destroy(w);
}

/* Placement feed (placement_feed_prefix): a reader subscribed to a prefix receives what a
 * writer commits under it, with a read lease, and its first get of such a key reads the replica
 * without asking the master; keys outside the prefix are not pushed; an upsert or a forced
 * remove by the writer is seen at once; a pushed lease holds like a read one (a plain remove
 * is refused while it runs). */
static uint64_t feed_placements(mc_store_t *s)
{
    mc_store_read_stats_t st;
    mc_store_read_stats(s, &st);
    return st.feed_placements;
}

static void wait_feed_placements(mc_store_t *s, uint64_t n)
{
    uint64_t end = mc_now_ms() + 10000;
    while (feed_placements(s) < n && mc_now_ms() < end)
        mc_sleep_ms(2);
    assert_int_equal(feed_placements(s), n);
}

static void test_placement_feed(void **state)
{
    enum { LEN = 8192 };
    static char v1[LEN], v2[LEN], out[LEN];
    fill(v1, LEN, 41);
    fill(v2, LEN, 42);
    struct iovec i1 = {v1, LEN}, i2 = {v2, LEN}, io = {out, LEN};
    static char long_prefix[MC_STORE_KEY_MAX + 2];
    memset(long_prefix, 'p', MC_STORE_KEY_MAX + 1);
    mc_store_config_t bad = {.master_server_addr = master_addr,
                             .placement_feed_prefix = long_prefix};
    mc_store_t *none = NULL;
    assert_int_equal(mc_store_create(&bad, &none), MC_ERR_INVALID_PARAMS);
    mc_store_config_t bad_hints = {.master_server_addr = master_addr,
                                   .replica_hint_slots = MC_STORE_REPLICA_HINTS_MAX + 1};
    assert_int_equal(mc_store_create(&bad_hints, &none), MC_ERR_INVALID_PARAMS);
    mc_store_t *r = open_store_with(0, "tcp", "feed/", 0);
    mc_store_t *w = open_store(0);

    /* in commit order: the feed has seen "other/a" once it has pushed "feed/a" */
    assert_int_equal(mc_store_put(w, "other/a", &i1, 1, NULL), MC_OK);
    assert_int_equal(mc_store_put(w, "feed/a", &i1, 1, NULL), MC_OK);
    wait_feed_placements(r, 1);
    mc_store_read_stats_t s0, s1;
    mc_store_read_stats(r, &s0);
    assert_int_equal(mc_store_get_into(r, "feed/a", &io, 1), LEN);
    assert_memory_equal(out, v1, LEN);
    mc_store_read_stats(r, &s1);
    assert_int_equal(s1.master_lookups, s0.master_lookups); /* one round trip: no lookup */
    assert_int_equal(s1.lease_hits, s0.lease_hits + 1);
    memset(out, 0, LEN);
    assert_int_equal(mc_store_get_into(r, "other/a", &io, 1), LEN);
    assert_memory_equal(out, v1, LEN);
    mc_store_read_stats(r, &s0);
    assert_int_equal(s0.master_lookups, s1.master_lookups + 1); /* not pushed: looked up */

    /* the writer rewrites the key: the reader sees the new bytes whether or not the feed has
     * delivered the new placement yet (the old value was stamped) */
    assert_int_equal(mc_store_upsert(w, "feed/a", &i2, 1, NULL), MC_OK);
    memset(out, 0, LEN);
    assert_int_equal(mc_store_get_into(r, "feed/a", &io, 1), LEN);
    assert_memory_equal(out, v2, LEN);
    wait_feed_placements(r, 2); /* the upsert's placement */

    /* a pushed lease holds the object like a read one */
    assert_int_equal(mc_store_put(w, "feed/b", &i1, 1, NULL), MC_OK);
    wait_feed_placements(r, 3);
    assert_int_equal(mc_store_remove(w, "feed/b", false), MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(mc_store_remove(w, "feed/b", true), MC_OK);
    assert_int_equal(mc_store_get_into(r, "feed/b", &io, 1), MC_ERR_OBJECT_NOT_FOUND);

    /* a key that is not UTF-8 is pushed too (KvEvent.key is bytes) */
    static const char bin[] = "feed/\xff\x80";
    assert_int_equal(mc_store_put(w, bin, &i1, 1, NULL), MC_OK);
    wait_feed_placements(r, 4);
    mc_store_read_stats(r, &s0);
    memset(out, 0, LEN);
    assert_int_equal(mc_store_get_into(r, bin, &io, 1), LEN);
    assert_memory_equal(out, v1, LEN);
    mc_store_read_stats(r, &s1);
    assert_int_equal(s1.master_lookups, s0.master_lookups);

    mc_store_remove(w, bin, true);
    mc_store_remove(w, "feed/a", true);
    mc_store_remove(w, "other/a", true);
    mc_store_destroy(r);
    mc_store_destroy(w);
}

/* A batch get of keys whose placements the feed delivered makes no lookup at all: a reader
 * subscribed to "feedb/" reads 128 x 4 KiB keys another client just batch-put, all under the
 * pushed leases (0 master lookups, 128 lease hits). A pushed placement is a hint that the
 * read's checksum and lease rules judge: after the writer upserts one key and force-removes
 * another, the same batch returns the new bytes and OBJECT_NOT_FOUND (the stamped old
 * values fail the leased checksum, so those two keys ask the master). */
static void test_placement_feed_batch_get_skips_the_master(void **state)
{
    (void)state;
    enum { N = 128, LEN = 4096 };
    static char vals[N][LEN], outs[N][LEN], names[N][32], fresh[LEN];
    const char *keys[N];
    struct iovec iov[N];
    const struct iovec *piov[N];
    size_t nparts[N];
    int32_t res[N];
    int64_t got[N];
    mc_store_t *r = open_store_with(0, "tcp", "feedb/", 0);
    mc_store_t *w = open_store(0);
    uint64_t pushed = feed_placements(r);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "feedb/%d", i);
        keys[i] = names[i];
        fill(vals[i], LEN, 9000 + i);
        iov[i] = (struct iovec){vals[i], LEN};
        piov[i] = &iov[i];
        nparts[i] = 1;
    }
    assert_int_equal(mc_store_batch_put(w, N, keys, piov, nparts, NULL, false, res), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(res[i], MC_OK);
    wait_feed_placements(r, pushed + N);

    for (int i = 0; i < N; i++)
        iov[i] = (struct iovec){outs[i], LEN};
    mc_store_read_stats_t s0, s1;
    mc_store_read_stats(r, &s0);
    assert_int_equal(mc_store_batch_get_into(r, N, keys, piov, nparts, got), MC_OK);
    mc_store_read_stats(r, &s1);
    for (int i = 0; i < N; i++) {
        assert_int_equal(got[i], LEN);
        assert_memory_equal(outs[i], vals[i], LEN);
    }
    assert_int_equal(s1.master_lookups, s0.master_lookups); /* no lookup for any key */
    assert_int_equal(s1.lease_hits, s0.lease_hits + N);

    /* stale placements: the reader still holds the leases of key 0's and key 1's old values */
    fill(fresh, LEN, 9999);
    struct iovec fi = {fresh, LEN};
    assert_int_equal(mc_store_upsert(w, keys[0], &fi, 1, NULL), MC_OK);
    assert_int_equal(mc_store_remove(w, keys[1], true), MC_OK);
    memset(outs, 0, sizeof(outs));
    assert_int_equal(mc_store_batch_get_into(r, N, keys, piov, nparts, got), MC_OK);
    assert_int_equal(got[0], LEN);
    assert_memory_equal(outs[0], fresh, LEN);
    assert_int_equal(got[1], MC_ERR_OBJECT_NOT_FOUND);
    for (int i = 2; i < N; i++) {
        assert_int_equal(got[i], LEN);
        assert_memory_equal(outs[i], vals[i], LEN);
    }

    for (int i = 0; i < N; i++)
        mc_store_remove(w, keys[i], true);
    mc_store_destroy(r);
    mc_store_destroy(w);
}

/* The placement feed across a master kill -9 and restart: the reader's feed notices the new
 * epoch and follows it, so keys committed after it re-attached are pushed again. Events in
 * between may be missed (the feed is a shortcut), hence new keys until one arrives. */
static void test_placement_feed_survives_master_restart(void **state)
{
    enum { LEN = 8192 };
    static char v[LEN], out[LEN];
    fill(v, LEN, 43);
    struct iovec iv = {v, LEN}, io = {out, LEN};
    mc_store_t *r = open_store_with(0, "tcp", "fr/", 0);
    mc_store_t *w = open_store(0);
    mt_stop(master.pid, SIGKILL, 5000);
    start_master();
    char key[32] = "";
    uint64_t deadline = mc_now_ms() + 15000;
    for (int i = 0; feed_placements(r) == 0 && mc_now_ms() < deadline; i++) {
        snprintf(key, sizeof(key), "fr/%d", i);
        mc_store_put(w, key, &iv, 1, NULL); /* fails until the servers have re-mounted */
        mc_sleep_ms(50);
    }
    assert_true(feed_placements(r) > 0);
    assert_int_equal(mc_store_get_into(r, key, &io, 1), LEN);
    assert_memory_equal(out, v, LEN);
    mc_store_destroy(r);
    mc_store_destroy(w);
}

/* Lease cache under concurrency: one client upserts a key again and again (each value carries
 * its version), two other clients read it in a loop, mostly under cached leases. A read that
 * starts after an upsert has returned must see that version or a later one (the floor is
 * published only once the upsert returned, and read before the get starts). */
enum { MONO_LEN = 16384, MONO_MS = 2500 };
static atomic_ullong mono_floor, mono_reads, mono_stale, mono_bad;
static atomic_int mono_stop;

static void mono_value(char *buf, uint64_t version)
{
    fill(buf, MONO_LEN, version);
    memcpy(buf, &version, sizeof(version));
}

static void *mono_reader(void *arg)
{
    (void)arg;
    mc_store_t *r = open_store(0);
    static _Thread_local char buf[MONO_LEN], want[MONO_LEN];
    struct iovec io = {buf, MONO_LEN};
    while (!atomic_load(&mono_stop)) {
        uint64_t floor = atomic_load(&mono_floor);
        if (mc_store_get_into(r, "mono", &io, 1) != MONO_LEN)
            continue; /* in the middle of an upsert the key is not readable */
        uint64_t v;
        memcpy(&v, buf, sizeof(v));
        mono_value(want, v);
        if (memcmp(buf, want, MONO_LEN) != 0)
            atomic_fetch_add(&mono_bad, 1);
        else if (v < floor)
            atomic_fetch_add(&mono_stale, 1);
        atomic_fetch_add(&mono_reads, 1);
    }
    mc_store_destroy(r);
    return NULL;
}

#ifdef MC_TEST_UCX
/* A client on protocol ucx keeps no cached leases: its one-sided reads would not pass
 * through the storage server's serving limit (store-client.md). Every get asks the master. */
static void test_lease_cache_off_over_ucx(void **state)
{
    (void)state;
    mc_store_t *w = open_store(0), *r = open_store_over(0, "ucx");
    enum { LEN = 8192 };
    static char v[LEN], out[LEN];
    fill(v, LEN, 41);
    struct iovec iv = {v, LEN}, io = {out, LEN};
    assert_int_equal(mc_store_put(w, "ucx-k", &iv, 1, NULL), MC_OK);
    for (int i = 0; i < 3; i++) {
        memset(out, 0, LEN);
        assert_int_equal(mc_store_get_into(r, "ucx-k", &io, 1), LEN);
        assert_memory_equal(out, v, LEN);
    }
    mc_store_read_stats_t st;
    mc_store_read_stats(r, &st);
    assert_int_equal(st.lease_hits, 0);
    assert_int_equal(st.master_lookups, 3);
    mc_store_remove(w, "ucx-k", true);
    mc_store_destroy(r);
    mc_store_destroy(w);
}
#endif

static void test_lease_cache_reads_follow_upserts(void **state)
{
    mc_store_t *w = open_store(0);
    static char val[MONO_LEN];
    struct iovec iv = {val, MONO_LEN};
    mono_value(val, 1);
    assert_int_equal(mc_store_upsert(w, "mono", &iv, 1, NULL), MC_OK);
    atomic_store(&mono_floor, 1);
    pthread_t rd[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&rd[i], NULL, mono_reader, NULL), 0);
    uint64_t end = mc_now_ms() + MONO_MS, version = 1, upserts = 0;
    while (mc_now_ms() < end) {
        mc_sleep_ms(5); /* let readers take and use leases between upserts */
        mono_value(val, ++version);
        if (mc_store_upsert(w, "mono", &iv, 1, NULL) == MC_OK) {
            atomic_store(&mono_floor, version);
            upserts++;
        }
    }
    atomic_store(&mono_stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(rd[i], NULL);
    print_message("lease cache: %llu upserts, %llu reads, %llu stale, %llu wrong\n",
                  (unsigned long long)upserts, (unsigned long long)atomic_load(&mono_reads),
                  (unsigned long long)atomic_load(&mono_stale),
                  (unsigned long long)atomic_load(&mono_bad));
    assert_true(upserts > 50);
    assert_true(atomic_load(&mono_reads) > 100);
    assert_int_equal(atomic_load(&mono_bad), 0);
    assert_int_equal(atomic_load(&mono_stale), 0);
    mc_store_remove(w, "mono", true);
    mc_store_destroy(w);
}

/* Replica hints (src/client/replica_hint.h): a single-key get reads a small object from where
 * the client last saw it while asking the master. Make every hint of client `a` stale in the
 * nastiest ways and check that only committed bytes of the asked key come back: the key
 * removed and its space reused by another key of the same size (same address: asserted), and
 * the key upserted by another client. Batched gets (which do not speculate) over the same
 * keys as well. */
static void test_stale_hints_never_return_other_bytes(void **state)
{
    mc_store_t *a = open_store(0), *b = open_store(0);
    enum { LEN = 4096 };
    static char va[LEN], vb[LEN], v1[LEN], v2[LEN], out[3][LEN];
    fill(va, LEN, 21);
    fill(vb, LEN, 22);
    fill(v1, LEN, 23);
    fill(v2, LEN, 24);
    struct iovec ia = {va, LEN}, ib = {vb, LEN}, i1 = {v1, LEN}, i2 = {v2, LEN};
    struct iovec io[3] = {{out[0], LEN}, {out[1], LEN}, {out[2], LEN}};
    mc_replicate_config_t one = {.replica_num = 1};

    /* a puts and reads hint-A: a now hints its replica */
    assert_int_equal(mc_store_put(a, "hint-A", &ia, 1, &one), MC_OK);
    assert_int_equal(mc_store_get_into(a, "hint-A", &io[0], 1), LEN);
    mc_replica_desc_t *da, *db;
    size_t n;
    assert_int_equal(mc_store_replica_desc(a, "hint-A", &da, &n), MC_OK);
    assert_int_equal(n, 1);
    /* b removes it and puts hint-B of the same size on the same segment: same block */
    assert_int_equal(mc_store_remove(b, "hint-A", true), MC_OK);
    mc_replicate_config_t there = {.replica_num = 1, .preferred_segment = da[0].segment};
    assert_int_equal(mc_store_put(b, "hint-B", &ib, 1, &there), MC_OK);
    assert_int_equal(mc_store_replica_desc(b, "hint-B", &db, &n), MC_OK);
    assert_string_equal(db[0].endpoint, da[0].endpoint);
    assert_int_equal(db[0].addr, da[0].addr); /* a's hint for hint-A now points at hint-B */
    free(da);
    free(db);
    assert_int_equal(mc_store_get_into(a, "hint-A", &io[0], 1), MC_ERR_OBJECT_NOT_FOUND);

    /* a puts hint-U, b upserts it with other bytes: a must see b's bytes */
    assert_int_equal(mc_store_put(a, "hint-U", &i1, 1, &one), MC_OK);
    assert_int_equal(mc_store_get_into(a, "hint-U", &io[0], 1), LEN);
    assert_memory_equal(out[0], v1, LEN);
    assert_int_equal(mc_store_upsert(b, "hint-U", &i2, 1, &one), MC_OK);
    memset(out[0], 0, LEN);
    assert_int_equal(mc_store_get_into(a, "hint-U", &io[0], 1), LEN);
    assert_memory_equal(out[0], v2, LEN);

    /* batched: the same stale hints together */
    assert_int_equal(mc_store_put(a, "hint-A", &ia, 1, &one), MC_OK); /* hint a -> new block */
    assert_int_equal(mc_store_remove(b, "hint-A", true), MC_OK);
    assert_int_equal(mc_store_upsert(b, "hint-U", &i1, 1, &one), MC_OK);
    const char *keys[3] = {"hint-A", "hint-U", "hint-B"};
    const struct iovec *parts[3] = {&io[0], &io[1], &io[2]};
    size_t np[3] = {1, 1, 1};
    int64_t res[3];
    memset(out, 0, sizeof(out));
    assert_int_equal(mc_store_batch_get_into(a, 3, keys, parts, np, res), MC_OK);
    assert_int_equal(res[0], MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(res[1], LEN);
    assert_memory_equal(out[1], v1, LEN);
    assert_int_equal(res[2], LEN);
    assert_memory_equal(out[2], vb, LEN);
    /* and once more, now that a's hints are fresh */
    memset(out, 0, sizeof(out));
    assert_int_equal(mc_store_batch_get_into(a, 3, keys, parts, np, res), MC_OK);
    assert_int_equal(res[1], LEN);
    assert_memory_equal(out[1], v1, LEN);
    assert_int_equal(res[2], LEN);
    assert_memory_equal(out[2], vb, LEN);

    mc_store_remove(b, "hint-U", true);
    mc_store_remove(b, "hint-B", true);
    mc_store_destroy(a);
    mc_store_destroy(b);
}

/* Extra segments next to the heartbeat: mounted, read by another client, served across pings,
 * cleared, unmounted gracefully (freed by the heartbeat once the master dropped them), and
 * unmounted at destroy. The TSan build runs this with the heartbeat's own locking. */
static void test_extra_segments(void **state)
{
    (void)state;
    mc_store_t *s = open_store(0), *r = open_store(0);
    uint8_t id[16], id2[16];
    size_t got = 0;
    assert_int_equal(mc_store_segment_alloc_mount(s, 1 << 20, NULL, id, &got), MC_OK);
    assert_int_equal(got, 4u << 20);
    assert_int_equal(mc_store_segment_alloc_mount(s, 4u << 20, "", id2, &got), MC_OK);
    char seg1[300], seg2[300];
    snprintf(seg1, sizeof(seg1), "%s#1", mc_store_hostname(s));
    snprintf(seg2, sizeof(seg2), "%s#2", mc_store_hostname(s));
    const char *prefs[] = {seg1};
    mc_replicate_config_t cfg = {.replica_num = 1, .preferred_segments = prefs,
                                 .n_preferred_segments = 1};
    char val[100000], out[100000];
    fill(val, sizeof(val), 77);
    struct iovec iov = {val, sizeof(val)};
    assert_int_equal(mc_store_put(s, "xseg-a", &iov, 1, &cfg), MC_OK);
    prefs[0] = seg2;
    assert_int_equal(mc_store_put(s, "xseg-b", &iov, 1, &cfg), MC_OK);
    mc_replica_desc_t *d = NULL;
    size_t n = 0;
    assert_int_equal(mc_store_replica_desc(s, "xseg-a", &d, &n), MC_OK);
    assert_int_equal(n, 1);
    assert_string_equal(d[0].segment, seg1);
    free(d);
    usleep(1500 * 1000); /* heartbeats extend the serving limit of both */
    for (int i = 0; i < 3; i++) {
        struct iovec o = {out, sizeof(out)};
        assert_int_equal(mc_store_get_into(r, "xseg-a", &o, 1), (int64_t)sizeof(val));
        assert_memory_equal(out, val, sizeof(val));
        assert_int_equal(mc_store_get_into(s, "xseg-b", &o, 1), (int64_t)sizeof(val));
    }
    /* wrong kind, unknown id */
    assert_int_equal(mc_store_segment_unmount(s, id, MC_STORE_SEG_FILE, 0),
                     MC_ERR_SEGMENT_NOT_FOUND);
    /* graceful: "xseg-a" is leased (read above) so the segment drains, then goes */
    assert_int_equal(mc_store_segment_unmount(s, id, MC_STORE_SEG_ALLOC, 1000), MC_OK);
    assert_int_equal(mc_store_segment_unmount(s, id, MC_STORE_SEG_ALLOC, 0),
                     MC_ERR_SEGMENT_NOT_FOUND);
    int gone = 0; /* the test master leases for its default 10 s */
    for (int i = 0; i < 250 && !gone; i++) {
        gone = mc_store_exists(r, "xseg-a") == 0;
        if (!gone)
            usleep(100 * 1000);
    }
    assert_true(gone);
    /* replica clear on the other one, by its writer */
    const char *keys[] = {"xseg-b", "xseg-missing"};
    int32_t res[2];
    for (int i = 0; i < 50; i++) { /* its lease, from the same gets, ends about now */
        assert_int_equal(mc_store_batch_replica_clear(s, 2, keys, seg2, res), MC_OK);
        if (res[0] != MC_ERR_OBJECT_HAS_LEASE)
            break;
        usleep(100 * 1000);
    }
    assert_int_equal(res[0], MC_OK);
    assert_int_equal(res[1], MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_store_exists(r, "xseg-b"), 0);
    assert_int_equal(mc_store_put(s, "xseg-c", &iov, 1, &cfg), MC_OK);
    mc_store_destroy(s); /* unmounts seg2 */
    assert_int_equal(mc_store_exists(r, "xseg-c"), 0);
    mc_store_destroy(r);
}

/* mooncake_client_rpc_count of BatchGetReplicaList (client metrics): lookups sent by s. */
static unsigned long long batch_lookups_sent(mc_store_t *s)
{
    char *text = NULL;
    assert_int_equal(mc_store_metrics_text(s, &text), MC_OK);
    const char *needle = "mooncake_client_rpc_count{rpc_name=\"BatchGetReplicaList\"} ";
    const char *p = strstr(text, needle);
    unsigned long long n = p ? strtoull(p + strlen(needle), NULL, 10) : 0;
    free(text);
    return n;
}

/* A batch get with more than 256 keys that need a lookup is looked up in pipelined
 * sub-batches (32, 64, then the rest; store_get.c): leased keys, misses, a too-small buffer and
 * an invalid key spread over the sub-batches each get their own result, and every other key
 * its bytes. One with at most 256 such keys (128 here) is looked up in one request. */
static void test_batch_get_pipelined(void **state)
{
    mc_store_t *w = open_store(0), *r = open_store(0), *h = open_store(0);
    enum { N = 400, M = N + 4, MAXSZ = 1200 };
    static char vals[N][MAXSZ], outs[M][MAXSZ];
    static char names[M][32];
    const char *keys[M];
    size_t size[M], nparts[M];
    struct iovec iov[M];
    const struct iovec *piov[M];
    int32_t res[N];
    int64_t got[M];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "pipe-%d", i);
        keys[i] = names[i];
        size[i] = 500 + (size_t)(i % 7) * 100;
        fill(vals[i], size[i], 7000 + i);
        iov[i] = (struct iovec){vals[i], size[i]};
        piov[i] = &iov[i];
        nparts[i] = 1;
    }
    assert_int_equal(mc_store_batch_put(w, N, keys, piov, nparts, NULL, false, res), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(res[i], MC_OK);
    /* r reads keys 0..39 and 150..169 first: it then holds their leases (no lookup later) */
    for (int i = 0; i < M; i++) {
        iov[i] = (struct iovec){outs[i], MAXSZ};
        piov[i] = &iov[i];
        nparts[i] = 1;
    }
    assert_int_equal(mc_store_batch_get_into(r, 40, keys, piov, nparts, got), MC_OK);
    assert_int_equal(mc_store_batch_get_into(r, 20, keys + 150, piov + 150, nparts, got), MC_OK);
    /* the big batch: every key, plus misses in the first and a later sub-batch, an invalid
     * key, and key 280 with a buffer one byte short */
    snprintf(names[N], sizeof(names[N]), "pipe-missing-a");
    snprintf(names[N + 1], sizeof(names[N + 1]), "pipe-missing-b");
    names[N + 2][0] = '\0';
    snprintf(names[N + 3], sizeof(names[N + 3]), "pipe-missing-c");
    const char *order[M];
    int src[M]; /* order[j] is names[src[j]] */
    for (int j = 0, i = 0; j < M; j++) {
        src[j] = j == 45 ? N : j == 200 ? N + 1 : j == 230 ? N + 2 : j == 290 ? N + 3 : i++;
        order[j] = names[src[j]];
        iov[j] = (struct iovec){outs[j], src[j] == 280 ? size[280] - 1 : MAXSZ};
    }
    memset(outs, 0, sizeof(outs));
    mc_store_read_stats_t st0, st1;
    mc_store_read_stats(r, &st0);
    unsigned long long sent0 = batch_lookups_sent(r);
    assert_int_equal(mc_store_batch_get_into(r, M, order, piov, nparts, got), MC_OK);
    mc_store_read_stats(r, &st1);
    /* 60 leased keys read without a lookup; 343 listed (one invalid): 32 + 64 + 247 */
    assert_int_equal(st1.lease_hits - st0.lease_hits, 60);
    assert_int_equal(st1.master_lookups - st0.master_lookups, 343);
    assert_int_equal(batch_lookups_sent(r) - sent0, 3);
    for (int j = 0; j < M; j++) {
        int i = src[j];
        if (i == N || i == N + 1 || i == N + 3)
            assert_int_equal(got[j], MC_ERR_OBJECT_NOT_FOUND);
        else if (i == N + 2)
            assert_int_equal(got[j], MC_ERR_INVALID_KEY);
        else if (i == 280)
            assert_int_equal(got[j], MC_ERR_BUFFER_OVERFLOW);
        else {
            assert_int_equal(got[j], (int64_t)size[i]);
            assert_memory_equal(outs[j], vals[i], size[i]);
        }
    }
    /* the same client again, every valid key now under its lease: its batch scratch, grown
     * for the 304 keys and handed back by a batch with failed keys, serves a clean batch */
    for (int i = 0; i < N; i++)
        iov[i] = (struct iovec){outs[i], MAXSZ};
    memset(outs, 0, sizeof(outs));
    mc_store_read_stats(r, &st0);
    assert_int_equal(mc_store_batch_get_into(r, N, keys, piov, nparts, got), MC_OK);
    mc_store_read_stats(r, &st1);
    /* key 280 failed (short buffer): no lease, the only lookup */
    assert_int_equal(st1.master_lookups - st0.master_lookups, 1);
    assert_int_equal(st1.lease_hits - st0.lease_hits, N - 1);
    for (int i = 0; i < N; i++) {
        assert_int_equal(got[i], (int64_t)size[i]);
        assert_memory_equal(outs[i], vals[i], size[i]);
    }
    /* heap mode, a client that never saw the keys: every key needs a lookup and a read */
    void *heap[M];
    sent0 = batch_lookups_sent(h);
    assert_int_equal(mc_store_batch_get(h, M, order, heap, got), MC_OK);
    assert_int_equal(batch_lookups_sent(h) - sent0, 4); /* 403 listed: 32, 64, 128, 179 */
    for (int j = 0; j < M; j++) {
        int i = src[j];
        if (i >= N) {
            assert_true(got[j] < 0);
            assert_null(heap[j]);
            continue;
        }
        assert_int_equal(got[j], (int64_t)size[i]);
        assert_memory_equal(heap[j], vals[i], size[i]);
        free(heap[j]);
    }
    /* a fresh client, 128 keys that all need a lookup: one request (at most 256: no pipeline) */
    mc_store_t *f = open_store(0);
    for (int i = 0; i < 128; i++)
        iov[i] = (struct iovec){outs[i], MAXSZ};
    memset(outs, 0, sizeof(outs));
    sent0 = batch_lookups_sent(f);
    assert_int_equal(mc_store_batch_get_into(f, 128, keys, piov, nparts, got), MC_OK);
    assert_int_equal(batch_lookups_sent(f) - sent0, 1);
    for (int i = 0; i < 128; i++) {
        assert_int_equal(got[i], (int64_t)size[i]);
        assert_memory_equal(outs[i], vals[i], size[i]);
    }
    mc_store_destroy(f);
    assert_int_equal(mc_store_remove_by_regex(w, "^pipe-", true), N);
    mc_store_destroy(h);
    mc_store_destroy(r);
    mc_store_destroy(w);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    char err[256];
    if (mc_tool_te_config_from_env(&g_tuning, err, sizeof(err)) != MC_OK) {
        fprintf(stderr, "test_store: %s\n", err);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_sizes),
        cmocka_unit_test(test_put_semantics),
        cmocka_unit_test(test_batches),
        cmocka_unit_test(test_batch_get_pipelined),
        cmocka_unit_test(test_batch_get_failed_read_keeps_no_lease),
        cmocka_unit_test(test_checksum_detects_corruption),
        cmocka_unit_test(test_checksum_detects_corruption_other_segment),
        cmocka_unit_test(test_checksum_batch_one_corrupt),
        cmocka_unit_test(test_stale_hints_never_return_other_bytes),
        cmocka_unit_test(test_lease_cache),
        cmocka_unit_test(test_placement_feed),
        cmocka_unit_test(test_placement_feed_batch_get_skips_the_master),
        cmocka_unit_test(test_config_knobs),
        cmocka_unit_test(test_extra_segments),
#ifdef MC_TEST_UCX
        cmocka_unit_test(test_lease_cache_off_over_ucx),
#endif
        cmocka_unit_test(test_lease_cache_reads_follow_upserts),
        cmocka_unit_test(test_frozen_server_fails_over),
        cmocka_unit_test(test_get_waits_for_remount),
        cmocka_unit_test(test_master_restart_keeps_objects),
        cmocka_unit_test(test_placement_feed_survives_master_restart),
        cmocka_unit_test(test_replica_survives_server_kill), /* last: leaves a dead segment */
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
