/* The local-disk (SSD) tier end to end: a real mooncake_master with --enable_offload, a
 * storage server with a disk (a store in this process with ssd_offload_path, temp directory)
 * and a reader store. Eager offload after PutEnd; objects evicted from memory read back exact
 * from the disk (eager offload, and --offload_on_evict); promotion on hit; a restarted
 * storage server re-registers its disk objects; a byte corrupted on
 * disk gives an error, never data; a master without --enable_offload refuses the disk; a
 * tenant-token reader pulls disk-only objects through the owner's read grant; a full disk
 * fails offloads cleanly while memory keeps serving; a storage server process killed with
 * SIGKILL in the middle of its offload writes comes back with exact values only; a reader's
 * deferred release leaves the owner holding at most its last get's range. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "client/store_int.h"
#include "common/net.h"
#include "common/time.h"
#include "rpc/rpc_client.h"
#include "mooncake/store.h"
#include "support/test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define VAL (512u << 10)
#define NKEYS 10

typedef struct env {
    char dir[256], disk[300], addr[64];
    char bin[512], port[32], wal[300], log[300], flags[640];
    char *margv[9];
    pid_t master;
} env_t;

/* flag: up to four master flags separated by spaces */
static void start(env_t *e, const char *flag)
{
    uint16_t p;
    assert_int_equal(mt_tmpdir(e->dir, sizeof(e->dir)), 0);
    snprintf(e->disk, sizeof(e->disk), "%s/disk", e->dir);
    assert_int_equal(mc_net_free_port(&p), MC_OK);
    mt_bin_path("mooncake_master", e->bin, sizeof(e->bin));
    snprintf(e->port, sizeof(e->port), "--port=%u", p);
    snprintf(e->wal, sizeof(e->wal), "--wal_dir=%s/wal", e->dir);
    snprintf(e->log, sizeof(e->log), "%s/master.log", e->dir);
    snprintf(e->flags, sizeof(e->flags), "%s", flag);
    char *argv[] = {e->bin, e->port, "--metrics_port=0", e->wal, NULL, NULL, NULL, NULL, NULL};
    int n = 4;
    for (char *f = e->flags; f && n < 8; n++) { /* the flags, split at spaces */
        argv[n] = f;
        if ((f = strchr(f, ' ')))
            *f++ = 0;
    }
    memcpy(e->margv, argv, sizeof(argv));
    e->master = mt_spawn(e->margv, e->log);
    assert_int_equal(mt_wait_log(e->log, "listening", 10000), 0);
    snprintf(e->addr, sizeof(e->addr), "127.0.0.1:%u", p);
}

/* kill -9 and start again on the same port and WAL */
static void restart_master(env_t *e)
{
    mt_stop(e->master, SIGKILL, 5000);
    unlink(e->log);
    e->master = mt_spawn(e->margv, e->log);
    assert_int_equal(mt_wait_log(e->log, "listening", 10000), 0);
}

static void stop(env_t *e)
{
    mt_stop(e->master, SIGTERM, 5000);
    mt_rmdir(e->dir);
}

/* The storage server: a 4 MiB segment and the disk; token: its token file (NULL: none). */
static mc_status_t server_tok(env_t *e, const char *token, mc_store_t **s)
{
    static mc_te_config_t tuning;
    tuning = (mc_te_config_t){.auth_token_file = token};
    mc_store_config_t cfg = {.local_hostname = "127.0.0.1", .metadata_server = "P2PHANDSHAKE",
                             .protocol = "tcp", .master_server_addr = e->addr,
                             .global_segment_size = 4u << 20, .ssd_offload_path = e->disk,
                             .te_tuning = token ? &tuning : NULL};
    return mc_store_create(&cfg, s);
}

static mc_status_t server(env_t *e, mc_store_t **s)
{
    return server_tok(e, NULL, s);
}

/* A client without memory of its own; token and tenant: NULL for none. */
static mc_store_t *reader_tok(env_t *e, const char *token, const char *tenant)
{
    static mc_te_config_t tunings[4]; /* the store keeps the pointer */
    static int n;
    mc_te_config_t *tuning = &tunings[n++ % 4];
    *tuning = (mc_te_config_t){.auth_token_file = token};
    mc_store_config_t cfg = {.local_hostname = "127.0.0.1", .metadata_server = "P2PHANDSHAKE",
                             .protocol = "tcp", .master_server_addr = e->addr,
                             .replica_hint_slots = MC_STORE_REPLICA_HINTS_OFF,
                             .tenant_id = tenant, .te_tuning = token ? tuning : NULL};
    mc_store_t *s;
    assert_int_equal(mc_store_create(&cfg, &s), MC_OK);
    return s;
}

static mc_store_t *reader(env_t *e)
{
    return reader_tok(e, NULL, NULL);
}

static void fill(char *v, int k)
{
    for (size_t i = 0; i < VAL; i++)
        v[i] = (char)(k * 131 + i * 7 + (i >> 9));
}

/* Waits until the server's disk holds n objects, offloaded or recovered (deadline 10 s). */
static void wait_disk(mc_store_t *s, uint64_t n)
{
    uint64_t deadline = mc_now_ms() + 10000, objs, bytes, off, served;
    for (;;) {
        store_disk_stats(s, &objs, &bytes, &off, &served);
        if (objs >= n)
            return;
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(20);
    }
}

/* Puts k<from>..k<to - 1> with fill's values through w. */
static void put_all(mc_store_t *w, int from, int to)
{
    char *v = malloc(VAL);
    char key[16];
    for (int k = from; k < to; k++) {
        snprintf(key, sizeof(key), "k%d", k);
        fill(v, k);
        struct iovec iv = {v, VAL};
        assert_int_equal(mc_store_put(w, key, &iv, 1, NULL), MC_OK);
    }
    free(v);
}

static void check_all(mc_store_t *r, int from, int to)
{
    char *v = malloc(VAL), *out = malloc(VAL);
    char key[16];
    for (int k = from; k < to; k++) {
        snprintf(key, sizeof(key), "k%d", k);
        fill(v, k);
        memset(out, 0, VAL);
        struct iovec io = {out, VAL};
        assert_int_equal(mc_store_get_into(r, key, &io, 1), VAL);
        assert_memory_equal(out, v, VAL);
    }
    free(v);
    free(out);
}

/* Flips the byte at offset `at` of the value whose first 64 bytes are head, in the bucket
 * files of dir. */
static void corrupt_at(const char *dir, const char *head, off_t at)
{
    DIR *dp = opendir(dir);
    assert_non_null(dp);
    struct dirent *de;
    bool done = false;
    while (!done && (de = readdir(dp))) {
        if (!strstr(de->d_name, ".bucket"))
            continue;
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        int fd = open(path, O_RDWR);
        assert_true(fd >= 0);
        struct stat st;
        fstat(fd, &st);
        char *buf = malloc((size_t)st.st_size);
        assert_int_equal(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
        for (off_t o = 0; o + 64 <= st.st_size; o += 4096) {
            if (memcmp(buf + o, head, 64) == 0) {
                assert_true(o + at < st.st_size);
                char b = (char)(buf[o + at] ^ 0x5a);
                assert_int_equal(pwrite(fd, &b, 1, o + at), 1);
                done = true;
                break;
            }
        }
        free(buf);
        close(fd);
    }
    closedir(dp);
    assert_true(done);
}

/* Flips one byte of key k's value in the bucket files. */
static void corrupt(const char *dir, int k)
{
    char *v = malloc(VAL);
    fill(v, k);
    corrupt_at(dir, v, 1000);
    free(v);
}

static void test_offload_evict_restart_corrupt(void **state)
{
    (void)state;
    env_t e;
    start(&e, "--enable_offload=true");
    mc_store_t *srv, *r;
    assert_int_equal(server(&e, &srv), MC_OK);
    r = reader(&e);
    /* eager offload: six puts, six disk objects */
    put_all(r, 0, 6);
    wait_disk(srv, 6);
    /* four more do not fit in the 4 MiB segment: the oldest leave memory, not the store */
    put_all(r, 6, NKEYS);
    wait_disk(srv, NKEYS);
    check_all(r, 0, NKEYS);
    uint64_t objs, bytes, off, served;
    store_disk_stats(srv, &objs, &bytes, &off, &served);
    assert_true(served >= 1); /* some gets went to the disk */
    assert_int_equal(off, NKEYS);
    /* the storage server's client metrics carry the SSD tier's series */
    char *text = NULL;
    assert_int_equal(mc_store_metrics_text(srv, &text), MC_OK);
    char want[64];
    snprintf(want, sizeof(want), "\nmooncake_ssd_reads_served_total %llu\n",
             (unsigned long long)served);
    assert_non_null(strstr(text, want));
    snprintf(want, sizeof(want), "\nmooncake_ssd_offloaded_total %d\n", NKEYS);
    assert_non_null(strstr(text, want));
    assert_non_null(strstr(text, "\nmooncake_ssd_read_latency_us_count "));
    assert_non_null(strstr(text, "\nmooncake_ssd_objects 10\n"));
    free(text);
    /* the storage server restarts (its memory is gone): every key comes back from its disk */
    mc_store_destroy(srv);
    assert_int_equal(server(&e, &srv), MC_OK);
    check_all(r, 0, NKEYS);
    /* a byte flipped on disk: an error, never the bytes */
    mc_store_destroy(srv);
    corrupt(e.disk, 3);
    assert_int_equal(server(&e, &srv), MC_OK);
    char *out = malloc(VAL);
    struct iovec io = {out, VAL};
    assert_true(mc_store_get_into(r, "k3", &io, 1) < 0);
    /* the server tells the master, which stops sending readers there */
    uint64_t deadline = mc_now_ms() + 5000;
    while (mc_store_get_into(r, "k3", &io, 1) != MC_ERR_OBJECT_NOT_FOUND) {
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(20);
    }
    check_all(r, 4, NKEYS);
    free(out);
    mc_store_destroy(r);
    mc_store_destroy(srv);
    stop(&e);
}

/* several disk pieces (device-sized, at most 1 MiB; the last 256 KiB apart), several pulls */
#define BIG ((2u << 20) + 12345)

static void fill_big(char *v)
{
    for (size_t i = 0; i < BIG; i++)
        v[i] = (char)(i * 13 + (i >> 12) + 1);
}

static uint64_t served_count(mc_store_t *srv)
{
    uint64_t objs, bytes, off, served;
    store_disk_stats(srv, &objs, &bytes, &off, &served);
    return served;
}

/* Disk reads are streamed: the owner reads a value in 1 MiB pieces and the reader pulls them
 * as they land (a value of several pieces, into parts split off the piece boundaries); the
 * keys of a batch get on one owner go in one request. A byte flipped in the last piece (after
 * the first pieces were pulled) still fails the get, alone and in a batch, never data. */
static void test_disk_streamed_reads(void **state)
{
    (void)state;
    env_t e;
    start(&e, "--enable_offload=true");
    mc_store_t *srv, *r;
    assert_int_equal(server(&e, &srv), MC_OK);
    r = reader(&e);
    char *big = malloc(BIG), *out = malloc(BIG), *v = malloc(VAL);
    fill_big(big);
    struct iovec iv = {big, BIG};
    assert_int_equal(mc_store_put(r, "big", &iv, 1, NULL), MC_OK);
    put_all(r, 0, 2);
    wait_disk(srv, 3);
    mc_store_destroy(srv); /* its memory is gone: disk-only from now on */
    assert_int_equal(server(&e, &srv), MC_OK);
    /* one get, into two parts that split a pull */
    memset(out, 0, BIG);
    struct iovec two[2] = {{out, 700001}, {out + 700001, BIG - 700001}};
    uint64_t deadline = mc_now_ms() + 10000; /* the old memory replica is dropped first */
    int64_t got;
    while ((got = mc_store_get_into(r, "big", two, 2)) != (int64_t)BIG) {
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(20);
    }
    assert_memory_equal(out, big, BIG);
    /* a batch get: the three keys in one request to the owner */
    char *o0 = malloc(VAL), *o1 = malloc(VAL);
    const char *keys[3] = {"k0", "big", "k1"};
    struct iovec io0 = {o0, VAL}, iob = {out, BIG}, io1 = {o1, VAL};
    const struct iovec *pp[3] = {&io0, &iob, &io1};
    size_t np[3] = {1, 1, 1};
    int64_t res[3];
    uint64_t before = served_count(srv);
    memset(out, 0, BIG);
    assert_int_equal(mc_store_batch_get_into(r, 3, keys, pp, np, res), MC_OK);
    assert_int_equal(res[0], VAL);
    assert_int_equal(res[1], BIG);
    assert_int_equal(res[2], VAL);
    assert_int_equal(served_count(srv) - before, 1);
    assert_memory_equal(out, big, BIG);
    fill(v, 0);
    assert_memory_equal(o0, v, VAL);
    fill(v, 1);
    assert_memory_equal(o1, v, VAL);
    /* a byte of the last piece flipped: an error, never the bytes */
    mc_store_destroy(srv);
    corrupt_at(e.disk, big, (2 << 20) + 100);
    assert_int_equal(server(&e, &srv), MC_OK);
    assert_int_equal(mc_store_batch_get_into(r, 3, keys, pp, np, res), MC_OK);
    assert_int_equal(res[0], VAL);
    assert_true(res[1] < 0);
    assert_int_equal(res[2], VAL);
    assert_true(mc_store_get_into(r, "big", &iob, 1) < 0);
    free(o0);
    free(o1);
    free(big);
    free(out);
    free(v);
    mc_store_destroy(r);
    mc_store_destroy(srv);
    stop(&e);
}

/* A reader with replica hints asks the owner of a disk replica it read before at once, while
 * the master's lookup is on its way (a speculative hit, the master still asked every time);
 * the master's answer decides: after another client removed the key (the owner, whose next
 * heartbeat is far off, still holds it on disk) the get fails OBJECT_NOT_FOUND; after another
 * client upserted it (the new value in memory) the get returns the new bytes; either way the
 * disk hint goes. */
static void test_disk_hint_overlaps_lookup(void **state)
{
    (void)state;
    env_t e;
    start(&e, "--enable_offload=true");
    mc_store_t *srv, *w = reader(&e), *r;
    mc_store_config_t rc = {.local_hostname = "127.0.0.1", .metadata_server = "P2PHANDSHAKE",
                            .protocol = "tcp", .master_server_addr = e.addr};
    assert_int_equal(mc_store_create(&rc, &r), MC_OK); /* hints on (the default) */
    assert_int_equal(server(&e, &srv), MC_OK);
    char *v = malloc(VAL), *out = malloc(VAL);
    struct iovec io = {out, VAL};
    put_all(w, 0, 2);
    wait_disk(srv, 2);
    mc_store_destroy(srv); /* disk-only from now on; removals reach it only at a heartbeat */
    setenv("MC_OFFLOAD_HEARTBEAT_MS", "3600000", 1);
    assert_int_equal(server(&e, &srv), MC_OK);
    setenv("MC_OFFLOAD_HEARTBEAT_MS", "50", 1);
    uint64_t deadline = mc_now_ms() + 10000; /* the old memory replicas are dropped first */
    while (mc_store_get_into(r, "k0", &io, 1) != (int64_t)VAL) {
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(20);
    }
    assert_int_equal(mc_store_get_into(r, "k1", &io, 1), VAL);
    mc_replica_hint_t h;
    assert_true(mc_hint_get(r->disk_hints, "k0", &h));
    assert_int_equal(h.size, VAL);
    /* repeat gets: each one request to the owner, sent before the lookup answered */
    mc_store_read_stats_t a, b;
    mc_store_read_stats(r, &a);
    uint64_t served = served_count(srv);
    for (int i = 0; i < 3; i++) {
        memset(out, 0, VAL);
        assert_int_equal(mc_store_get_into(r, "k0", &io, 1), VAL);
        fill(v, 0);
        assert_memory_equal(out, v, VAL);
    }
    mc_store_read_stats(r, &b);
    assert_int_equal(b.speculative_hits - a.speculative_hits, 3);
    assert_int_equal(b.master_lookups - a.master_lookups, 3);
    assert_int_equal(served_count(srv) - served, 3);
    /* removed by another client: the owner's disk still has it, the get fails */
    assert_int_equal(mc_store_remove(w, "k0", false), MC_OK);
    assert_int_equal(mc_store_get_into(r, "k0", &io, 1), MC_ERR_OBJECT_NOT_FOUND);
    uint64_t objs, bytes, off;
    store_disk_stats(srv, &objs, &bytes, &off, &served);
    assert_int_equal(objs, 2);
    assert_false(mc_hint_get(r->disk_hints, "k0", &h));
    /* upserted by another client (memory now): the new bytes */
    fill(v, 7);
    struct iovec nv = {v, VAL};
    assert_int_equal(mc_store_upsert(w, "k1", &nv, 1, NULL), MC_OK);
    memset(out, 0, VAL);
    assert_int_equal(mc_store_get_into(r, "k1", &io, 1), VAL);
    assert_memory_equal(out, v, VAL);
    assert_false(mc_hint_get(r->disk_hints, "k1", &h));
    free(v);
    free(out);
    mc_store_destroy(r);
    mc_store_destroy(w);
    mc_store_destroy(srv);
    stop(&e);
}

/* The offload RPC server's two forms of BatchGetOffloadObject and WaitOffloadRead, spoken
 * directly: a plain request is answered after its read with the final statuses; a streamed
 * one at once with the lookup's, then WaitOffloadRead reports the landed prefix and the
 * verdict (a wait for the whole value, or more, is answered with the verdict only, though the
 * value may have landed before its checksum is checked); unknown batches and indexes answer
 * OBJECT_NOT_FOUND. */
static void test_offload_rpc_forms(void **state)
{
    (void)state;
    env_t e;
    start(&e, "--enable_offload=true");
    mc_store_t *srv, *r;
    assert_int_equal(server(&e, &srv), MC_OK);
    r = reader(&e);
    char *v = malloc(VAL);
    fill(v, 0);
    struct iovec iv = {v, VAL};
    assert_int_equal(mc_store_put(r, "k0", &iv, 1, NULL), MC_OK);
    wait_disk(srv, 1);
    mc_rpc_client_t *c;
    mc_rpc_client_opts_t o = {0};
    assert_int_equal(mc_rpc_client_create(store_disk_endpoint(srv), &o, &c), MC_OK);
    ProtobufCBinaryData keys[2] = {{2, (uint8_t *)"k0"}, {4, (uint8_t *)"nope"}};
    uint64_t sizes[2] = {VAL, 100};
    for (int stream = 0; stream < 2; stream++) {
        McRpc__BatchGetOffloadObjectRequest q = MC_RPC__BATCH_GET_OFFLOAD_OBJECT_REQUEST__INIT;
        q.keys = keys;
        q.n_keys = q.n_sizes = 2;
        q.sizes = sizes;
        q.tenant_id = "";
        q.timeout_ms = 5000;
        q.stream = stream;
        ProtobufCMessage *m = NULL;
        assert_int_equal(mc_rpc_client_call(c, MC_OP_BATCH_GET_OFFLOAD_OBJECT, &q.base, &m, 10000),
                         MC_OK);
        McRpc__BatchGetOffloadObjectResponse *b = (void *)m;
        assert_int_equal(b->status, MC_OK);
        assert_int_equal(b->n_statuses, 2);
        assert_int_equal(b->statuses[0], MC_OK);
        assert_int_equal(b->statuses[1], MC_ERR_OBJECT_NOT_FOUND);
        assert_true(b->batch_id != 0);
        /* key 0's whole value (streamed: waited for; plain: not a streamed batch) */
        McRpc__WaitOffloadReadRequest w = MC_RPC__WAIT_OFFLOAD_READ_REQUEST__INIT;
        w.batch_id = b->batch_id;
        w.ready = VAL;
        ProtobufCMessage *wm = NULL;
        assert_int_equal(mc_rpc_client_call(c, MC_OP_WAIT_OFFLOAD_READ, &w.base, &wm, 10000),
                         MC_OK);
        McRpc__WaitOffloadReadResponse *wr = (void *)wm;
        if (stream) {
            assert_int_equal(wr->status, MC_OK);
            assert_true(wr->done);
            assert_int_equal(wr->ready, VAL);
            assert_int_equal(wr->key_status, MC_OK);
            /* more than the value (a hostile want): the verdict too, never a hang */
            ProtobufCMessage *wm2 = NULL;
            w.ready = 4 * VAL;
            assert_int_equal(
                mc_rpc_client_call(c, MC_OP_WAIT_OFFLOAD_READ, &w.base, &wm2, 10000), MC_OK);
            McRpc__WaitOffloadReadResponse *wr2 = (void *)wm2;
            assert_int_equal(wr2->status, MC_OK);
            assert_true(wr2->done);
            assert_int_equal(wr2->key_status, MC_OK);
            mc_rpc_response_free(wm2);
            w.ready = VAL;
        } else {
            assert_int_equal(wr->status, MC_ERR_OBJECT_NOT_FOUND);
        }
        mc_rpc_response_free(wm);
        w.index = 2; /* past the batch */
        assert_int_equal(mc_rpc_client_call(c, MC_OP_WAIT_OFFLOAD_READ, &w.base, &wm, 10000),
                         MC_OK);
        assert_int_equal(((McRpc__WaitOffloadReadResponse *)wm)->status, MC_ERR_OBJECT_NOT_FOUND);
        mc_rpc_response_free(wm);
        McRpc__ReleaseOffloadBufferRequest rel = MC_RPC__RELEASE_OFFLOAD_BUFFER_REQUEST__INIT;
        rel.batch_id = b->batch_id;
        assert_int_equal(mc_rpc_client_call(c, MC_OP_RELEASE_OFFLOAD_BUFFER, &rel.base, &wm, 10000),
                         MC_OK);
        mc_rpc_response_free(wm);
        w.index = 0; /* released: gone once its read is over (the worker's last step) */
        uint64_t deadline = mc_now_ms() + 5000;
        for (;;) {
            assert_int_equal(mc_rpc_client_call(c, MC_OP_WAIT_OFFLOAD_READ, &w.base, &wm, 10000),
                             MC_OK);
            int32_t st = ((McRpc__WaitOffloadReadResponse *)wm)->status;
            mc_rpc_response_free(wm);
            if (st == MC_ERR_OBJECT_NOT_FOUND)
                break;
            assert_int_equal(st, MC_OK);
            assert_true(mc_now_ms() < deadline);
            mc_sleep_ms(10);
        }
        mc_rpc_response_free(m);
    }
    mc_rpc_client_destroy(c);
    free(v);
    mc_store_destroy(r);
    mc_store_destroy(srv);
    stop(&e);
}

/* Puts key k, retrying NO_AVAILABLE_HANDLE (-200: eviction is waiting for offloads) for 10 s. */
static void put_retry(mc_store_t *r, int k)
{
    char key[16], *v = malloc(VAL);
    snprintf(key, sizeof(key), "k%d", k);
    fill(v, k);
    struct iovec iv = {v, VAL};
    uint64_t deadline = mc_now_ms() + 10000;
    mc_status_t st;
    while ((st = mc_store_put(r, key, &iv, 1, NULL)) == MC_ERR_NO_AVAILABLE_HANDLE) {
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(20);
    }
    assert_int_equal(st, MC_OK);
    free(v);
}

/* --offload_on_evict: nothing goes to disk until memory runs short; then the victims are
 * written to disk before they leave memory, and read back exact from there. With
 * --offload_force_evict=false (the default, said explicitly here) no victim leaves memory
 * without its disk copy; true may evict one uncopied when the offload queue falls behind. */
static void test_offload_on_evict(void **state)
{
    (void)state;
    env_t e;
    start(&e, "--enable_offload=true --offload_on_evict=true --offload_force_evict=false");
    mc_store_t *srv, *r;
    assert_int_equal(server(&e, &srv), MC_OK);
    r = reader(&e);
    for (int k = 0; k < 7; k++) /* 3.5 of 4 MiB: under the 90 % watermark */
        put_retry(r, k);
    mc_sleep_ms(300); /* several heartbeats: nothing is offloaded */
    uint64_t objs, bytes, off, served;
    store_disk_stats(srv, &objs, &bytes, &off, &served);
    assert_int_equal(objs, 0);
    for (int k = 7; k < NKEYS; k++)
        put_retry(r, k);
    store_disk_stats(srv, &objs, &bytes, &off, &served);
    assert_true(objs >= 1 && objs < NKEYS);
    check_all(r, 0, NKEYS);
    store_disk_stats(srv, &objs, &bytes, &off, &served);
    assert_true(served >= 1);
    mc_store_destroy(r);
    mc_store_destroy(srv);
    stop(&e);
}

/* --promotion_on_hit: a key read from disk twice regains a memory copy; then its gets no
 * longer go through the owner's disk (the served counter stays). */
static void test_promotion_on_hit(void **state)
{
    (void)state;
    env_t e;
    start(&e, "--enable_offload=true --promotion_on_hit=true");
    mc_store_t *srv, *r;
    assert_int_equal(server(&e, &srv), MC_OK);
    r = reader(&e);
    for (int k = 0; k < NKEYS; k++) /* the first ones leave memory: disk only */
        put_retry(r, k);
    wait_disk(srv, NKEYS);
    char *v = malloc(VAL), *out = malloc(VAL);
    fill(v, 0);
    struct iovec io = {out, VAL};
    uint64_t objs, bytes, off, served0, served1;
    store_disk_stats(srv, &objs, &bytes, &off, &served0);
    assert_int_equal(mc_store_get_into(r, "k0", &io, 1), VAL);
    assert_memory_equal(out, v, VAL);
    store_disk_stats(srv, &objs, &bytes, &off, &served1);
    assert_int_equal(served1, served0 + 1); /* k0 was on disk only */
    uint64_t deadline = mc_now_ms() + 10000;
    for (;;) {
        store_disk_stats(srv, &objs, &bytes, &off, &served0);
        memset(out, 0, VAL);
        assert_int_equal(mc_store_get_into(r, "k0", &io, 1), VAL);
        assert_memory_equal(out, v, VAL);
        store_disk_stats(srv, &objs, &bytes, &off, &served1);
        if (served1 == served0)
            break; /* read from memory */
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(20);
    }
    free(v);
    free(out);
    mc_store_destroy(r);
    mc_store_destroy(srv);
    stop(&e);
}

/* A master restarted (kill -9) knows no disk replica from its WAL: the storage server learns
 * it from its next offload heartbeat (UNABLE_OFFLOADING), mounts again and re-registers, and
 * the disk-only objects read back exact. */
static void test_master_restart_reregisters(void **state)
{
    (void)state;
    env_t e;
    start(&e, "--enable_offload=true");
    mc_store_t *srv, *r;
    assert_int_equal(server(&e, &srv), MC_OK);
    r = reader(&e);
    for (int k = 0; k < NKEYS; k++)
        put_retry(r, k);
    wait_disk(srv, NKEYS);
    check_all(r, 0, NKEYS);
    restart_master(&e);
    uint64_t deadline = mc_now_ms() + 15000;
    char *out = malloc(VAL);
    struct iovec io = {out, VAL};
    while (mc_store_get_into(r, "k0", &io, 1) != VAL) { /* k0 was on disk only */
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(50);
    }
    free(out);
    check_all(r, 0, NKEYS);
    mc_store_destroy(r);
    mc_store_destroy(srv);
    stop(&e);
}

static void write_token(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

/* A tenant-bound reader (tenant token only) of disk-only objects: the storage server signs a
 * read grant for the staged range with its cluster key, the reader presents it, and the TE
 * (which serves a tenant only granted ranges) lets the pull through: exact bytes. */
static void test_tenant_reader_disk_grant(void **state)
{
    (void)state;
    char tokdir[256], srv_tok[300], ten_tok[300], cl_tok[300], flags[640];
    assert_int_equal(mt_tmpdir(tokdir, sizeof(tokdir)), 0);
    snprintf(srv_tok, sizeof(srv_tok), "%s/srv.token", tokdir);
    snprintf(ten_tok, sizeof(ten_tok), "%s/tenant.token", tokdir);
    snprintf(cl_tok, sizeof(cl_tok), "%s/cluster.token", tokdir);
    write_token(srv_tok, "offload-grant-cluster-secret-0123\n"
                         "offload-grant-tenant-secret-01234 tenant=acme\n");
    write_token(ten_tok, "offload-grant-tenant-secret-01234 tenant=acme\n");
    write_token(cl_tok, "offload-grant-cluster-secret-0123\n");
    snprintf(flags, sizeof(flags), "--enable_offload=true --auth_token_file=%s", srv_tok);
    env_t e;
    start(&e, flags);
    mc_store_t *srv, *r;
    assert_int_equal(server_tok(&e, srv_tok, &srv), MC_OK);
    /* a cluster-token client acting for the tenant writes (a tenant-bound writer's evicted
     * space waits out its write grants), the tenant-bound client reads */
    mc_store_t *w = reader_tok(&e, cl_tok, "acme");
    r = reader_tok(&e, ten_tok, "acme");
    for (int k = 0; k < NKEYS; k++) /* the first ones leave memory: disk only */
        put_retry(w, k);
    wait_disk(srv, NKEYS);
    mc_store_destroy(w);
    uint64_t objs, bytes, off, served;
    check_all(r, 0, NKEYS);
    store_disk_stats(srv, &objs, &bytes, &off, &served);
    assert_true(served >= 1); /* some of those gets were served from the disk */
    mc_store_destroy(r);
    mc_store_destroy(srv);
    stop(&e);
    mt_rmdir(tokdir);
}

/* The value of counter name in the server's client metrics. */
static uint64_t metric(mc_store_t *s, const char *name)
{
    char *text = NULL, want[128];
    assert_int_equal(mc_store_metrics_text(s, &text), MC_OK);
    snprintf(want, sizeof(want), "\n%s ", name);
    const char *p = strstr(text, want);
    assert_non_null(p);
    uint64_t v = strtoull(p + strlen(want), NULL, 10);
    free(text);
    return v;
}

/* The metric in the server's client metrics once it satisfies ok (deadline 5 s). */
static uint64_t metric_wait(mc_store_t *s, const char *name, bool (*ok)(uint64_t))
{
    uint64_t deadline = mc_now_ms() + 5000, v;
    while (!ok(v = metric(s, name)) && mc_now_ms() < deadline)
        mc_sleep_ms(10);
    return v;
}

static bool is_zero(uint64_t v) { return v == 0; }
static bool is_one_val(uint64_t v) { return v == VAL; }

/* A reader's release of a small streamed batch is not waited for: it rides in front of its
 * next request on the connection. So the owner holds at most that one batch for the reader,
 * however many gets it served (a reader that never released would leave every get's range
 * held until the owner's TTL); the reader's destroy sends it, and without a next request the
 * owner's TTL frees it. */
static void test_disk_release_deferred(void **state)
{
    (void)state;
    env_t e;
    start(&e, "--enable_offload=true");
    mc_store_t *srv, *r;
    assert_int_equal(server(&e, &srv), MC_OK);
    r = reader(&e);
    char *v = malloc(VAL), *out = malloc(VAL);
    fill(v, 3);
    struct iovec iv = {v, VAL}, io = {out, VAL};
    assert_int_equal(mc_store_put(r, "k3", &iv, 1, NULL), MC_OK);
    wait_disk(srv, 1);
    mc_store_destroy(srv); /* disk-only from now on; a TTL longer than the test */
    setenv("MOONCAKE_OFFLOAD_CLIENT_BUFFER_GC_TTL_MS", "600000", 1);
    assert_int_equal(server(&e, &srv), MC_OK);
    uint64_t deadline = mc_now_ms() + 10000; /* the old memory replica is dropped first */
    while (mc_store_get_into(r, "k3", &io, 1) != (int64_t)VAL) {
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(20);
    }
    for (int i = 0; i < 6; i++) {
        memset(out, 0, VAL);
        assert_int_equal(mc_store_get_into(r, "k3", &io, 1), VAL);
        assert_memory_equal(out, v, VAL);
        /* the last get's range only (the release before the next request frees the previous
         * one once its read thread is done with it) */
        assert_int_equal(metric_wait(srv, "mooncake_ssd_staging_held_bytes", is_one_val), VAL);
    }
    mc_store_destroy(r); /* sends the held release */
    assert_int_equal(metric_wait(srv, "mooncake_ssd_staging_held_bytes", is_zero), 0);
    mc_store_destroy(srv);
    /* without a next request, the owner's TTL frees it */
    setenv("MOONCAKE_OFFLOAD_CLIENT_BUFFER_GC_TTL_MS", "200", 1);
    assert_int_equal(server(&e, &srv), MC_OK);
    unsetenv("MOONCAKE_OFFLOAD_CLIENT_BUFFER_GC_TTL_MS");
    r = reader(&e);
    assert_int_equal(mc_store_get_into(r, "k3", &io, 1), VAL);
    assert_memory_equal(out, v, VAL);
    assert_int_equal(metric_wait(srv, "mooncake_ssd_staging_held_bytes", is_zero), 0);
    assert_int_equal(mc_store_get_into(r, "k3", &io, 1), VAL); /* the release sent late: ignored */
    free(v);
    free(out);
    mc_store_destroy(r);
    mc_store_destroy(srv);
    stop(&e);
}

/* The storage server's disk fills up (an 8 MiB tmpfs under a 64 MiB engine limit: the writes
 * get ENOSPC): offloads fail cleanly and are counted, the master stops holding their values in
 * memory for them, puts keep succeeding, the newest values read back from memory and those
 * that reached the disk from there; every get answers exact bytes or OBJECT_NOT_FOUND. Where
 * mounting is refused the engine's own limit (policy none) refuses the writes instead. */
static void test_disk_full(void **state)
{
    (void)state;
    env_t e;
    start(&e, "--enable_offload=true");
    assert_int_equal(mkdir(e.disk, 0700), 0);
    bool mounted = mount("tmpfs", e.disk, "tmpfs", 0, "size=8m,mode=0700") == 0;
    if (!mounted) {
        print_message("disk full: tmpfs mount refused; the engine's 8 MiB limit (policy none)\n");
        setenv("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES", "8MB", 1);
        setenv("MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY", "none", 1);
    }
    mc_store_t *srv, *r;
    assert_int_equal(server(&e, &srv), MC_OK);
    setenv("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES", "64MB", 1);
    unsetenv("MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY");
    r = reader(&e);
    enum { N = 24 }; /* 12 MiB of values: more than the disk and the 4 MiB segment hold */
    uint64_t t0 = mc_now_ms();
    for (int k = 0; k < N; k++)
        put_retry(r, k);
    /* a failed offload no longer holds its value in memory: the puts do not wait out the
     * master's 10 s hold of victims whose offload is queued */
    assert_true(mc_now_ms() - t0 < 8000);
    uint64_t deadline = mc_now_ms() + 10000;
    while (metric(srv, "mooncake_ssd_offload_failed_total") == 0) {
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(20);
    }
    assert_true(metric(srv, "mooncake_ssd_disk_full_total") >= 1);
    check_all(r, N - 6, N); /* the newest: memory */
    uint64_t objs, bytes, off, served;
    store_disk_stats(srv, &objs, &bytes, &off, &served);
    assert_true(objs >= 1 && objs < N);
    char *v = malloc(VAL), *out = malloc(VAL);
    char key[16];
    int exact = 0;
    for (int k = 0; k < N; k++) {
        snprintf(key, sizeof(key), "k%d", k);
        fill(v, k);
        struct iovec io = {out, VAL};
        int64_t got = mc_store_get_into(r, key, &io, 1);
        if (got == MC_ERR_OBJECT_NOT_FOUND)
            continue;
        assert_int_equal(got, VAL);
        assert_memory_equal(out, v, VAL);
        exact++;
    }
    assert_true(exact >= 6 + 1); /* memory's and at least one from the disk */
    free(v);
    free(out);
    mc_store_destroy(r);
    mc_store_destroy(srv);
    if (mounted)
        assert_int_equal(umount2(e.disk, MNT_DETACH), 0);
    stop(&e);
}

/* Bytes of the bucket files in dir. */
static uint64_t bucket_bytes(const char *dir)
{
    uint64_t total = 0;
    DIR *dp = opendir(dir);
    if (!dp)
        return 0;
    struct dirent *de;
    while ((de = readdir(dp))) {
        char path[600];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        if (strstr(de->d_name, ".bucket") && stat(path, &st) == 0)
            total += (uint64_t)st.st_size;
    }
    closedir(dp);
    return total;
}

/* A storage server process (mooncake_client --enable_offload) killed with SIGKILL while its
 * offload thread writes the values it holds: restarted on the same directory, it re-registers
 * what its disk holds, and every key then reads back exact or answers OBJECT_NOT_FOUND; the
 * keys read back exact are at least those it re-registered. */
static void test_server_kill9_mid_offload(void **state)
{
    (void)state;
    env_t e;
    start(&e, "--enable_offload=true --client_ttl=1 --segment_hold_sec=1");
    char bin[512], m[128], dirf[340], log[300], log2[300];
    mt_bin_path("mooncake_client", bin, sizeof(bin));
    snprintf(m, sizeof(m), "--master_server_address=%s", e.addr);
    snprintf(dirf, sizeof(dirf), "--offload_path=%s", e.disk);
    snprintf(log, sizeof(log), "%s/server.log", e.dir);
    snprintf(log2, sizeof(log2), "%s/server2.log", e.dir);
    char *sargv[] = {bin, m, "--global_segment_size=64MB", "--local_hostname=127.0.0.1",
                     "--protocol=tcp", "--enable_offload=true", dirf, NULL};
    pid_t sp = mt_spawn(sargv, log);
    assert_true(sp > 0);
    assert_int_equal(mt_wait_log(log, "mooncake_client ready", 10000), 0);
    mc_store_t *r = reader(&e);
    enum { N = 48 }; /* 24 MiB: all in the 64 MiB segment, all queued for offload */
    for (int k = 0; k < N; k++)
        put_retry(r, k);
    /* SIGKILL as soon as a quarter of the values has reached the bucket files: the offload
     * thread is writing the rest (the print says where it landed) */
    uint64_t deadline = mc_now_ms() + 10000;
    while (bucket_bytes(e.disk) < N / 4 * VAL) {
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(1);
    }
    mt_stop(sp, SIGKILL, 5000);
    uint64_t at_kill = bucket_bytes(e.disk);
    sp = mt_spawn(sargv, log2);
    assert_true(sp > 0);
    assert_int_equal(mt_wait_log(log2, "re-registered", 10000), 0);
    FILE *f = fopen(log2, "r");
    assert_non_null(f);
    char line[512];
    unsigned long rereg = 0;
    while (fgets(line, sizeof(line), f)) {
        const char *p = strstr(line, "re-registered ");
        if (p)
            rereg = strtoul(p + strlen("re-registered "), NULL, 10);
    }
    fclose(f);
    print_message("kill -9 with %llu bytes of bucket files; %lu objects re-registered\n",
                  (unsigned long long)at_kill, rereg);
    assert_true(rereg >= 1 && rereg <= N);
    /* the killed process's memory replicas go with its client (client_ttl, segment hold):
     * then gets reach the disk; every answer is the exact value or OBJECT_NOT_FOUND */
    char *v = malloc(VAL), *out = malloc(VAL);
    bool ok[N] = {0}, gone[N] = {0};
    unsigned long exact = 0, settled = 0;
    deadline = mc_now_ms() + 20000;
    while (settled < N) {
        assert_true(mc_now_ms() < deadline);
        for (int k = 0; k < N; k++) {
            if (ok[k] || gone[k])
                continue;
            char key[16];
            snprintf(key, sizeof(key), "k%d", k);
            fill(v, k);
            memset(out, 0, VAL);
            struct iovec io = {out, VAL};
            int64_t got = mc_store_get_into(r, key, &io, 1);
            if (got == VAL) {
                assert_memory_equal(out, v, VAL); /* never wrong bytes */
                ok[k] = true;
                exact++;
                settled++;
            } else if (got == MC_ERR_OBJECT_NOT_FOUND) {
                gone[k] = true;
                settled++;
            }
        }
        if (settled < N)
            mc_sleep_ms(50);
    }
    assert_true(exact >= rereg);
    free(v);
    free(out);
    mc_store_destroy(r);
    mt_stop(sp, SIGTERM, 5000);
    stop(&e);
}

static void test_master_without_offload_refuses(void **state)
{
    (void)state;
    env_t e;
    start(&e, "--enable_offload=false");
    mc_store_t *s = NULL;
    assert_int_equal(server(&e, &s), MC_ERR_UNABLE_OFFLOAD);
    assert_null(s);
    stop(&e);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    /* small and fast: heartbeat 50 ms, 8 MiB staging, 64 MiB disk in 1 MiB buckets */
    setenv("MC_OFFLOAD_HEARTBEAT_MS", "50", 1);
    setenv("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES", "8MB", 1);
    setenv("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES", "64MB", 1);
    setenv("MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES", "1MB", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_master_without_offload_refuses),
        cmocka_unit_test(test_offload_evict_restart_corrupt),
        cmocka_unit_test(test_disk_streamed_reads),
        cmocka_unit_test(test_offload_rpc_forms),
        cmocka_unit_test(test_disk_release_deferred),
        cmocka_unit_test(test_disk_hint_overlaps_lookup),
        cmocka_unit_test(test_offload_on_evict),
        cmocka_unit_test(test_promotion_on_hit),
        cmocka_unit_test(test_master_restart_reregisters),
        cmocka_unit_test(test_tenant_reader_disk_grant),
        cmocka_unit_test(test_disk_full),
        cmocka_unit_test(test_server_kill9_mid_offload),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
