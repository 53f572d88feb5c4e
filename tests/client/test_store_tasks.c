/* Replica copy/move tasks end to end (docs/internals/master.md, "Replica tasks"): a real
 * mooncake_master and two mooncake_client storage servers, the client library in the test
 * process. A copy to the second segment is run by the first segment's owner and makes a
 * replica that serves the exact bytes once the owner is killed (-9) and survives a master
 * restart (kill -9, WAL replay); a move leaves one replica, on the target; the create errors
 * (unknown key, unmounted target, source == target, a source without the key, the pending
 * cap); a source replica whose bytes were corrupted is never copied; a task whose owner is stopped (SIGSTOP) before it fetches it, or while it runs it,
 * fails after the pending / processing timeout. Every wait polls a condition with a deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/net.h"
#include "common/time.h"
#include "mooncake/store.h"
#include "support/test_util.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PENDING_CAP 2   /* --max_total_pending_tasks */
#define TASK_TIMEOUT_S 2 /* --pending_task_timeout_sec, --processing_task_timeout_sec */

typedef struct daemon_proc {
    pid_t pid;
    char log[512];
    char segment[256]; /* its segment's name, from its ready line */
} daemon_proc_t;

static char dir[256];
static uint16_t master_port;
static char master_addr[64];
static daemon_proc_t master;
static daemon_proc_t servers[2];

static void start_master(void)
{
    char bin[512], port[32], wal[300], cap[64], pend[64], proc[64];
    mt_bin_path("mooncake_master", bin, sizeof(bin));
    snprintf(port, sizeof(port), "--port=%u", master_port);
    snprintf(wal, sizeof(wal), "--wal_dir=%s", dir);
    snprintf(cap, sizeof(cap), "--max_total_pending_tasks=%d", PENDING_CAP);
    snprintf(pend, sizeof(pend), "--pending_task_timeout_sec=%d", TASK_TIMEOUT_S);
    snprintf(proc, sizeof(proc), "--processing_task_timeout_sec=%d", TASK_TIMEOUT_S);
    char *argv[] = {bin, port, "--metrics_port=0", wal, "--client_ttl=3", cap, pend, proc, NULL};
    snprintf(master.log, sizeof(master.log), "%s/master.log", dir);
    unlink(master.log);
    master.pid = mt_spawn(argv, master.log);
    assert_true(master.pid > 0);
    assert_int_equal(mt_wait_log(master.log, "mooncake_master listening", 10000), 0);
}

/* The segment name a storage server printed ("mooncake_client ready segment=<name>"). */
static void read_segment_name(daemon_proc_t *d)
{
    FILE *f = fopen(d->log, "r");
    assert_non_null(f);
    char line[1024];
    d->segment[0] = 0;
    while (fgets(line, sizeof(line), f)) {
        const char *p = strstr(line, "mooncake_client ready segment=");
        if (p) {
            snprintf(d->segment, sizeof(d->segment), "%s", p + strlen("mooncake_client ready segment="));
            d->segment[strcspn(d->segment, "\r\n")] = 0;
        }
    }
    fclose(f);
    assert_true(d->segment[0] != 0);
}

static void start_server(int i)
{
    char bin[512], m[128], label[64];
    mt_bin_path("mooncake_client", bin, sizeof(bin));
    snprintf(m, sizeof(m), "--master_server_address=%s", master_addr);
    snprintf(label, sizeof(label), "--host_label=host%d", i);
    char *argv[] = {bin, m, "--global_segment_size=64MB", label, "--local_hostname=127.0.0.1",
                    NULL};
    snprintf(servers[i].log, sizeof(servers[i].log), "%s/server%d.log", dir, i);
    unlink(servers[i].log);
    servers[i].pid = mt_spawn(argv, servers[i].log);
    assert_true(servers[i].pid > 0);
    assert_int_equal(mt_wait_log(servers[i].log, "mooncake_client ready", 10000), 0);
    read_segment_name(&servers[i]);
}

/* segment: bytes this client contributes (0 = none) */
static mc_store_t *open_store_seg(uint64_t segment)
{
    mc_store_config_t cfg = {
        .global_segment_size = segment,
        .local_hostname = "127.0.0.1",
        .metadata_server = "P2PHANDSHAKE",
        .protocol = "tcp",
        .master_server_addr = master_addr,
        .transfer_timeout_ms = 1500,
    };
    mc_store_t *s = NULL;
    assert_int_equal(mc_store_create(&cfg, &s), MC_OK);
    return s;
}

static mc_store_t *open_store(void) { return open_store_seg(0); }

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
    (void)state;
    assert_int_equal(mt_tmpdir(dir, sizeof(dir)), 0);
    assert_int_equal(mc_net_free_port(&master_port), MC_OK);
    snprintf(master_addr, sizeof(master_addr), "127.0.0.1:%u", master_port);
    start_master();
    start_server(0);
    start_server(1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < 2; i++) {
        if (servers[i].pid > 0) {
            kill(servers[i].pid, SIGCONT);
            mt_stop(servers[i].pid, SIGTERM, 5000);
        }
    }
    mt_stop(master.pid, SIGTERM, 5000);
    mt_rmdir(dir);
    return 0;
}

/* Puts key (len bytes of seed) with its one replica on server `on`'s segment. A put placed
 * before a (re-)mount lands elsewhere, and one on a server that has just found it lost the
 * master (after a SIGSTOP) is refused SEGMENT_FENCED until it re-mounts: retried until it is
 * there (deadline). */
static char *put_on(mc_store_t *s, const char *key, size_t len, uint64_t seed, int on)
{
    char *val = malloc(len);
    fill(val, len, seed);
    struct iovec iv = {val, len};
    mc_replicate_config_t cfg = {.replica_num = 1, .preferred_segment = servers[on].segment};
    uint64_t deadline = mc_now_ms() + 15000;
    for (;;) {
        mc_store_remove(s, key, true);
        mc_status_t st = mc_store_put(s, key, &iv, 1, &cfg);
        if (st == MC_ERR_SEGMENT_FENCED && mc_now_ms() < deadline) {
            mc_sleep_ms(100);
            continue;
        }
        assert_int_equal(st, MC_OK);
        mc_replica_desc_t *d;
        size_t n = 0;
        assert_int_equal(mc_store_replica_desc(s, key, &d, &n), MC_OK);
        bool there = n == 1 && strcmp(d[0].segment, servers[on].segment) == 0;
        free(d);
        if (there)
            return val;
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(100);
    }
}

/* Polls the task until it is finished (deadline 15 s); its final info in *out. */
static void wait_task(mc_store_t *s, const uint64_t id[2], mc_store_task_info_t *out)
{
    uint64_t deadline = mc_now_ms() + 15000;
    for (;;) {
        assert_int_equal(mc_store_query_task(s, id, out), MC_OK);
        if (out->status == MC_TASK_SUCCESS || out->status == MC_TASK_FAILED)
            return;
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(50);
    }
}

/* The segments key's replicas are on, sorted into segs (at most 4); returns how many. */
static size_t replica_segments(mc_store_t *s, const char *key, char segs[][256])
{
    mc_replica_desc_t *d;
    size_t n = 0;
    if (mc_store_replica_desc(s, key, &d, &n) != MC_OK)
        return 0;
    for (size_t i = 0; i < n && i < 4; i++)
        snprintf(segs[i], 256, "%s", d[i].segment);
    free(d);
    return n;
}

static bool holds(char segs[][256], size_t n, const char *seg)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(segs[i], seg) == 0)
            return true;
    return false;
}

static void get_exact(mc_store_t *s, const char *key, const char *val, size_t len)
{
    char *out = calloc(1, len);
    struct iovec io = {out, len};
    assert_int_equal(mc_store_get_into(s, key, &io, 1), (int64_t)len);
    assert_memory_equal(out, val, len);
    free(out);
}

static void test_create_errors(void **state)
{
    (void)state;
    mc_store_t *s = open_store();
    size_t len = 4096;
    char *val = put_on(s, "err-key", len, 1, 0);
    uint64_t id[2];
    const char *seg0 = servers[0].segment, *seg1 = servers[1].segment;
    const char *nowhere[] = {"127.0.0.1:1"};
    assert_int_equal(mc_store_create_copy_task(s, "no-such-key", &seg1, 1, id),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_store_create_move_task(s, "no-such-key", seg0, seg1, id),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_store_create_copy_task(s, "err-key", nowhere, 1, id),
                     MC_ERR_INVALID_PARAMS);
    const char *twice[] = {seg1, seg1};
    assert_int_equal(mc_store_create_copy_task(s, "err-key", twice, 2, id), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_store_create_copy_task(s, "err-key", twice, 0, id), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_store_create_move_task(s, "err-key", seg0, seg0, id),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_store_create_move_task(s, "err-key", seg0, nowhere[0], id),
                     MC_ERR_INVALID_PARAMS);
    /* seg1 holds no replica of the key */
    assert_int_equal(mc_store_create_move_task(s, "err-key", seg1, seg0, id),
                     MC_ERR_INVALID_PARAMS);
    uint64_t unknown[2] = {1, 2};
    mc_store_task_info_t ti;
    assert_int_equal(mc_store_query_task(s, unknown, &ti), MC_ERR_TASK_NOT_FOUND);
    free(val);
    mc_store_destroy(s);
}

/* A copy to the second segment: SUCCESS, two replicas, and the copy serves the exact bytes
 * after the master's restart (the COMMIT is in its WAL; the task itself is forgotten) and
 * after the source's owner is killed -9. */
static void test_copy_survives_restart_and_owner_kill(void **state)
{
    (void)state;
    mc_store_t *s = open_store();
    size_t len = 1u << 20;
    char *val = put_on(s, "copy-me", len, 2, 0);
    const char *seg1 = servers[1].segment;
    uint64_t id[2];
    assert_int_equal(mc_store_create_copy_task(s, "copy-me", &seg1, 1, id), MC_OK);
    assert_true(id[0] || id[1]);
    mc_store_task_info_t ti;
    wait_task(s, id, &ti);
    assert_int_equal(ti.status, MC_TASK_SUCCESS);
    assert_int_equal(ti.type, MC_TASK_REPLICA_COPY);
    assert_true(ti.created_at_ms > 0 && ti.last_updated_at_ms >= ti.created_at_ms);
    char segs[4][256];
    size_t n = replica_segments(s, "copy-me", segs);
    assert_int_equal(n, 2);
    assert_true(holds(segs, n, servers[0].segment) && holds(segs, n, seg1));
    get_exact(s, "copy-me", val, len);

    /* master kill -9 + restart: the copy is in the WAL, the task is not */
    mt_stop(master.pid, SIGKILL, 5000);
    start_master();
    assert_int_equal(mc_store_query_task(s, id, &ti), MC_ERR_TASK_NOT_FOUND);
    uint64_t deadline = mc_now_ms() + 15000; /* both servers re-mount at their next ping */
    while ((n = replica_segments(s, "copy-me", segs)) < 2 && mc_now_ms() < deadline)
        mc_sleep_ms(100);
    assert_int_equal(n, 2);
    assert_true(holds(segs, n, servers[0].segment) && holds(segs, n, seg1));

    /* the source's owner dies: the copy alone serves the bytes */
    mt_stop(servers[0].pid, SIGKILL, 5000);
    servers[0].pid = -1;
    get_exact(s, "copy-me", val, len);
    start_server(0);
    free(val);
    mc_store_destroy(s);
}

/* A move from the first segment to the second: the source replica is gone, the bytes intact. */
static void test_move(void **state)
{
    (void)state;
    mc_store_t *s = open_store();
    size_t len = 300000;
    char *val = put_on(s, "move-me", len, 3, 0);
    uint64_t id[2];
    assert_int_equal(mc_store_create_move_task(s, "move-me", servers[0].segment,
                                               servers[1].segment, id), MC_OK);
    mc_store_task_info_t ti;
    wait_task(s, id, &ti);
    assert_int_equal(ti.status, MC_TASK_SUCCESS);
    assert_int_equal(ti.type, MC_TASK_REPLICA_MOVE);
    char segs[4][256];
    size_t n = replica_segments(s, "move-me", segs);
    assert_int_equal(n, 1);
    assert_string_equal(segs[0], servers[1].segment);
    get_exact(s, "move-me", val, len);
    free(val);
    mc_store_destroy(s);
}

/* The owner stopped before it fetches: tasks pile up to the pending cap (one more is refused)
 * and fail after the pending timeout. */
static void test_pending_cap_and_timeout(void **state)
{
    (void)state;
    mc_store_t *s = open_store();
    size_t len = 4096;
    char *val = put_on(s, "stuck", len, 4, 0);
    const char *seg1 = servers[1].segment;
    assert_int_equal(mt_freeze(servers[0].pid, 5000), 0);
    uint64_t ids[PENDING_CAP][2], extra[2];
    for (int i = 0; i < PENDING_CAP; i++)
        assert_int_equal(mc_store_create_copy_task(s, "stuck", &seg1, 1, ids[i]), MC_OK);
    assert_int_equal(mc_store_create_copy_task(s, "stuck", &seg1, 1, extra),
                     MC_ERR_TASK_PENDING_LIMIT_EXCEEDED);
    mc_store_task_info_t ti;
    assert_int_equal(mc_store_query_task(s, ids[0], &ti), MC_OK);
    assert_int_equal(ti.status, MC_TASK_PENDING);
    for (int i = 0; i < PENDING_CAP; i++) {
        wait_task(s, ids[i], &ti);
        assert_int_equal(ti.status, MC_TASK_FAILED);
        assert_non_null(strstr(ti.message, "pending timeout"));
    }
    kill(servers[0].pid, SIGCONT);
    /* back under the cap (the source is readable again once its owner answers pings) */
    uint64_t id[2];
    mc_status_t st;
    uint64_t deadline = mc_now_ms() + 15000;
    while ((st = mc_store_create_copy_task(s, "stuck", &seg1, 1, id)) ==
               MC_ERR_REPLICA_IS_NOT_READY && mc_now_ms() < deadline)
        mc_sleep_ms(100);
    assert_int_equal(st, MC_OK);
    wait_task(s, id, &ti);
    assert_int_equal(ti.status, MC_TASK_SUCCESS);
    free(val);
    mc_store_destroy(s);
}

/* The owner stopped while it runs the task (its write to the stopped target holds it in
 * PROCESSING): FAILED after the processing timeout, and the key keeps its one replica. */
static void test_processing_timeout(void **state)
{
    (void)state;
    mc_store_t *s = open_store();
    size_t len = 1u << 20;
    char *val = put_on(s, "slow", len, 5, 0);
    const char *seg1 = servers[1].segment;
    assert_int_equal(mt_freeze(servers[1].pid, 5000), 0); /* the target stops answering */
    uint64_t id[2];
    assert_int_equal(mc_store_create_copy_task(s, "slow", &seg1, 1, id), MC_OK);
    mc_store_task_info_t ti;
    uint64_t deadline = mc_now_ms() + 10000;
    do {
        assert_int_equal(mc_store_query_task(s, id, &ti), MC_OK);
        if (ti.status == MC_TASK_PENDING)
            mc_sleep_ms(20);
    } while (ti.status == MC_TASK_PENDING && mc_now_ms() < deadline);
    assert_int_equal(ti.status, MC_TASK_PROCESSING);
    assert_int_equal(mt_freeze(servers[0].pid, 5000), 0); /* and the owner stops */
    wait_task(s, id, &ti);
    assert_int_equal(ti.status, MC_TASK_FAILED);
    assert_non_null(strstr(ti.message, "processing timeout"));
    kill(servers[0].pid, SIGCONT);
    kill(servers[1].pid, SIGCONT);
    /* the half-done copy never became a replica */
    char segs[4][256];
    deadline = mc_now_ms() + 15000;
    size_t n;
    while ((n = replica_segments(s, "slow", segs)) != 1 && mc_now_ms() < deadline)
        mc_sleep_ms(100);
    assert_int_equal(n, 1);
    assert_string_equal(segs[0], servers[0].segment);
    get_exact(s, "slow", val, len);
    free(val);
    /* both, stopped longer than the client TTL, are back once a put can land on each */
    free(put_on(s, "slow-target-back", 4096, 6, 1));
    free(put_on(s, "slow-owner-back", 4096, 7, 0));
    mc_store_destroy(s);
}

/* The owner (this process, with a segment) finds its source replica's bytes do not match the
 * committed checksum: the copy FAILS naming it and no replica is added. */
static void test_corrupt_source_never_copied(void **state)
{
    (void)state;
    mc_store_t *s = open_store_seg(16u << 20);
    char val[8192];
    fill(val, sizeof(val), 8);
    struct iovec iv = {val, sizeof(val)};
    mc_replicate_config_t cfg = {.replica_num = 1, .preferred_segment = mc_store_hostname(s)};
    assert_int_equal(mc_store_put(s, "rotten", &iv, 1, &cfg), MC_OK);
    mc_replica_desc_t *d;
    size_t n;
    assert_int_equal(mc_store_replica_desc(s, "rotten", &d, &n), MC_OK);
    assert_int_equal(n, 1);
    assert_string_equal(d[0].segment, mc_store_hostname(s));
    ((char *)(uintptr_t)d[0].addr)[100] ^= 0x5a; /* flip bits in our own segment */
    free(d);
    const char *seg1 = servers[1].segment;
    uint64_t id[2];
    assert_int_equal(mc_store_create_copy_task(s, "rotten", &seg1, 1, id), MC_OK);
    mc_store_task_info_t ti;
    wait_task(s, id, &ti);
    assert_int_equal(ti.status, MC_TASK_FAILED);
    assert_non_null(strstr(ti.message, "CHECKSUM"));
    char segs[4][256];
    assert_int_equal(replica_segments(s, "rotten", segs), 1);
    assert_string_equal(segs[0], mc_store_hostname(s));
    mc_store_remove(s, "rotten", true);
    mc_store_destroy(s);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    /* the storage servers move bytes over tcp, not shared memory: a stopped target then
     * holds its writer's transfer (test_processing_timeout) */
    setenv("MC_FORCE_TCP", "1", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_move),
        cmocka_unit_test(test_corrupt_source_never_copied),
        cmocka_unit_test(test_pending_cap_and_timeout),
        cmocka_unit_test(test_processing_timeout),
        cmocka_unit_test(test_copy_survives_restart_and_owner_kill),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
