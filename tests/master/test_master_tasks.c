/* Replica copy/move tasks in the master core (master_tasks.c), driven directly with a fake
 * clock: the copy and move state machine and who may drive it, new replicas invisible until
 * the End, the move's source freed only after its read lease, an End after the object or a
 * target changed, the caps and timeouts, retention of finished tasks, and a copy that survives
 * a restart (WAL COMMIT) while the task itself is forgotten. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "master/master.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_now = 1000000;
static uint64_t fake_clock(void *ctx)
{
    (void)ctx;
    return g_now;
}

static const uint8_t CA[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
static const uint8_t CB[16] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2};

#define K(s) s, strlen(s)
enum { COPY = MC_MASTER_TASK_COPY, MOVE = MC_MASTER_TASK_MOVE };

static mc_master_t *mk(mc_master_config_t *cfg_opt)
{
    mc_master_config_t cfg;
    if (cfg_opt)
        cfg = *cfg_opt;
    else
        mc_master_config_default(&cfg);
    cfg.clock = fake_clock;
    mc_master_t *m;
    assert_int_equal(mc_master_create(&cfg, &m), MC_OK);
    mc_master_set_seed(m, 7);
    return m;
}

static void mount(mc_master_t *m, const uint8_t *cid, const char *name, uint64_t base,
                  bool remount)
{
    mc_master_segment_info_t si = {.name = name, .base = base, .size = 1 << 20,
                                   .host_label = name, .te_endpoint = name};
    memset(si.uuid, name[3], 16);
    assert_int_equal(mc_master_mount(m, cid, &si, remount), MC_OK);
}

/* Three segments: segA (CA), segB and segC (CB); key k (1000 bytes, checksum 77) on segA. */
static mc_master_t *cluster(mc_master_config_t *cfg)
{
    mc_master_t *m = mk(cfg);
    mount(m, CA, "segA", 0x100000, false);
    mount(m, CB, "segB", 0x200000, false);
    mount(m, CB, "segC", 0x300000, false);
    mc_master_replica_t r[8];
    uint32_t n;
    mc_master_put_opts_t o = {.preferred_segment = "segA"};
    assert_int_equal(mc_master_put_start(m, CA, K("k"), 1000, &o, false, r, &n), MC_OK);
    assert_int_equal(mc_master_put_end(m, CA, K("k"), 77), MC_OK);
    return m;
}

static uint32_t replicas(mc_master_t *m, const char *key, const char **segs)
{
    mc_master_replica_t r[8];
    uint32_t n = 0;
    uint64_t size, sum;
    if (mc_master_get_replicas(m, key, strlen(key), r, &n, &size, &sum) != MC_OK)
        return 0;
    for (uint32_t i = 0; segs && i < n; i++)
        segs[i] = r[i].segment_name;
    return n;
}

static uint64_t used(mc_master_t *m, const char *seg)
{
    mc_master_segment_status_t st;
    assert_int_equal(mc_master_query_segment(m, seg, &st), MC_OK);
    return st.used;
}

static int query_status(mc_master_t *m, const uint64_t id[2])
{
    mc_master_task_info_t ti;
    mc_status_t st = mc_master_query_task(m, id, &ti);
    return st == MC_OK ? ti.status : st;
}

/* Fetches CA's tasks and checks that the one fetched is id. */
static void fetch_one(mc_master_t *m, const uint64_t id[2])
{
    mc_master_task_info_t ti[MC_MASTER_TASK_FETCH_MAX];
    uint32_t n = 0;
    assert_int_equal(mc_master_fetch_tasks(m, CA, 0, ti, &n), MC_OK);
    assert_int_equal(n, 1);
    assert_true(ti[0].id[0] == id[0] && ti[0].id[1] == id[1]);
}

static void test_create_validation(void **state)
{
    (void)state;
    mc_master_t *m = cluster(NULL);
    uint64_t id[2];
    const char *b[] = {"segB"}, *dup[] = {"segB", "segB"}, *none[] = {"segX"};
    const char *nine[9] = {"segB", "segC", "s2", "s3", "s4", "s5", "s6", "s7", "s8"};
    char longname[300];
    memset(longname, 'n', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = 0;
    const char *lng[] = {longname};
    assert_int_equal(mc_master_create_copy_task(m, K("nope"), b, 1, id), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_create_copy_task(m, "", 0, b, 1, id), MC_ERR_INVALID_KEY);
    assert_int_equal(mc_master_create_copy_task(m, K("k"), b, 0, id), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_create_copy_task(m, K("k"), nine, 9, id), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_create_copy_task(m, K("k"), dup, 2, id), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_create_copy_task(m, K("k"), none, 1, id), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_create_copy_task(m, K("k"), lng, 1, id), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_create_move_task(m, K("k"), "segA", "segA", id),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_create_move_task(m, K("k"), "segB", "segC", id),
                     MC_ERR_INVALID_PARAMS); /* segB holds no replica */
    assert_int_equal(mc_master_create_move_task(m, K("k"), "segA", "segX", id),
                     MC_ERR_INVALID_PARAMS);
    /* a key being written */
    mc_master_replica_t r[8];
    uint32_t n;
    assert_int_equal(mc_master_put_start(m, CA, K("w"), 10, NULL, false, r, &n), MC_OK);
    assert_int_equal(mc_master_create_copy_task(m, K("w"), b, 1, id),
                     MC_ERR_REPLICA_IS_NOT_READY);
    /* a draining target */
    assert_int_equal(mc_master_put_start(m, CB, K("onC"), 10,
                                         &(mc_master_put_opts_t){.preferred_segment = "segC"},
                                         false, r, &n), MC_OK);
    assert_int_equal(mc_master_put_end(m, CB, K("onC"), 1), MC_OK);
    assert_int_equal(replicas(m, "onC", NULL), 1); /* leased: segC drains */
    assert_int_equal(mc_master_unmount(m, CB, "segC", true), MC_OK);
    const char *c[] = {"segC"};
    assert_int_equal(mc_master_create_copy_task(m, K("k"), c, 1, id),
                     MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS);
    uint64_t unknown[2] = {1, 2};
    assert_int_equal(query_status(m, unknown), MC_ERR_TASK_NOT_FOUND);
    mc_master_destroy(m);
}

/* A copy: PENDING for CA only, PROCESSING once fetched, only CA may start it, the new replica
 * is invisible until the End; SUCCESS; then a restart keeps the copy and forgets the task. */
static void test_copy_lifecycle_and_restart(void **state)
{
    (void)state;
    char dir[] = "/tmp/mc_tasks_wal_XXXXXX";
    assert_non_null(mkdtemp(dir));
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.wal_dir = dir;
    mc_master_t *m = cluster(&cfg);
    uint64_t id[2];
    const char *b[] = {"segB"};
    assert_int_equal(mc_master_create_copy_task(m, K("k"), b, 1, id), MC_OK);
    mc_master_task_info_t ti;
    assert_int_equal(mc_master_query_task(m, id, &ti), MC_OK);
    assert_int_equal(ti.status, MC_MASTER_TASK_PENDING);
    assert_int_equal(ti.type, MC_MASTER_TASK_COPY);
    assert_memory_equal(ti.client, CA, 16);
    assert_string_equal(ti.source, "segA");
    assert_true(mc_master_tasks_pending(m, CA) && !mc_master_tasks_pending(m, CB));
    mc_master_task_info_t got[MC_MASTER_TASK_FETCH_MAX];
    uint32_t n = 9;
    assert_int_equal(mc_master_fetch_tasks(m, CB, 0, got, &n), MC_OK);
    assert_int_equal(n, 0);
    mc_master_replica_t src, reps[8];
    uint64_t size, sum;
    /* not started before it is fetched */
    assert_int_equal(mc_master_task_start(m, CA, id, COPY, &src, reps, &n, &size, &sum),
                     MC_ERR_INVALID_PARAMS);
    fetch_one(m, id);
    assert_int_equal(query_status(m, id), MC_MASTER_TASK_PROCESSING);
    assert_false(mc_master_tasks_pending(m, CA));
    assert_int_equal(mc_master_task_start(m, CB, id, COPY, &src, reps, &n, &size, &sum),
                     MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_task_start(m, CA, id, MOVE, &src, reps, &n, &size, &sum),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_task_end(m, CA, id, COPY, true), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_task_start(m, CA, id, COPY, &src, reps, &n, &size, &sum), MC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(size, 1000);
    assert_int_equal(sum, 77);
    assert_string_equal(src.segment_name, "segA");
    assert_string_equal(reps[0].segment_name, "segB");
    assert_int_equal(reps[0].status, 1);
    assert_int_equal(used(m, "segB"), 1024);                /* allocated... */
    assert_int_equal(replicas(m, "k", NULL), 1);           /* ...not readable */
    assert_int_equal(mc_master_task_start(m, CA, id, COPY, &src, reps, &n, &size, &sum),
                     MC_ERR_INVALID_PARAMS);               /* once */
    assert_int_equal(mc_master_task_end(m, CA, id, COPY, true), MC_OK);
    const char *segs[8];
    assert_int_equal(replicas(m, "k", segs), 2);
    /* one Start and one End per task */
    assert_int_equal(mc_master_task_end(m, CA, id, COPY, true), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_task_start(m, CA, id, COPY, &src, reps, &n, &size, &sum),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_task_complete(m, CB, id, MC_MASTER_TASK_SUCCESS, ""),
                     MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_task_complete(m, CA, id, MC_MASTER_TASK_PENDING, ""),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_task_complete(m, CA, id, MC_MASTER_TASK_SUCCESS, ""), MC_OK);
    assert_int_equal(query_status(m, id), MC_MASTER_TASK_SUCCESS);
    assert_int_equal(mc_master_task_complete(m, CA, id, MC_MASTER_TASK_SUCCESS, ""),
                     MC_ERR_INVALID_PARAMS);
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.tasks_succeeded, 1);
    assert_int_equal(mt.tasks_pending + mt.tasks_processing, 0);
    assert_int_equal(mc_master_wal_sync(m), MC_OK);
    mc_master_destroy(m);

    m = mk(&cfg);
    mount(m, CA, "segA", 0x100000, true);
    mount(m, CB, "segB", 0x200000, true);
    assert_int_equal(replicas(m, "k", segs), 2);
    assert_true((!strcmp(segs[0], "segA") && !strcmp(segs[1], "segB")) ||
                (!strcmp(segs[0], "segB") && !strcmp(segs[1], "segA")));
    assert_int_equal(query_status(m, id), MC_ERR_TASK_NOT_FOUND);
    mc_master_destroy(m);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* Runs task id (of CA) up to its Start. */
static void started(mc_master_t *m, const uint64_t id[2], int type)
{
    fetch_one(m, id);
    mc_master_replica_t src, reps[8];
    uint32_t n;
    uint64_t size, sum;
    assert_int_equal(mc_master_task_start(m, CA, id, type, &src, reps, &n, &size, &sum), MC_OK);
}

/* A move: the target's replica replaces the source's, whose space is freed only once the read
 * lease (granted at the Start) has ended. */
static void test_move_frees_source_after_lease(void **state)
{
    (void)state;
    mc_master_t *m = cluster(NULL);
    uint64_t id[2];
    assert_int_equal(mc_master_create_move_task(m, K("k"), "segA", "segB", id), MC_OK);
    started(m, id, MOVE);
    assert_int_equal(mc_master_task_end(m, CA, id, MOVE, true), MC_OK);
    assert_int_equal(mc_master_task_complete(m, CA, id, MC_MASTER_TASK_SUCCESS, NULL), MC_OK);
    const char *segs[8];
    assert_int_equal(replicas(m, "k", segs), 1);
    assert_string_equal(segs[0], "segB");
    assert_int_equal(used(m, "segA"), 1024); /* leased readers may still read it */
    g_now += 10001;
    mc_master_cron(m);
    assert_int_equal(used(m, "segA"), 0);
    mc_master_destroy(m);
}

/* Ends that find the world changed free the new replicas; a Revoke too. */
static void test_end_after_changes(void **state)
{
    (void)state;
    mc_master_t *m = cluster(NULL);
    uint64_t id[2];
    const char *b[] = {"segB"};
    /* revoke */
    assert_int_equal(mc_master_create_copy_task(m, K("k"), b, 1, id), MC_OK);
    started(m, id, COPY);
    assert_int_equal(used(m, "segB"), 1024);
    assert_int_equal(mc_master_task_end(m, CA, id, COPY, false), MC_OK);
    assert_int_equal(used(m, "segB"), 0);
    assert_int_equal(mc_master_task_complete(m, CA, id, MC_MASTER_TASK_FAILED, "write failed"),
                     MC_OK);
    mc_master_task_info_t ti;
    assert_int_equal(mc_master_query_task(m, id, &ti), MC_OK);
    assert_string_equal(ti.message, "write failed");
    /* the key replaced between Start and End */
    assert_int_equal(mc_master_create_copy_task(m, K("k"), b, 1, id), MC_OK);
    started(m, id, COPY);
    mc_master_replica_t r[8];
    uint32_t n;
    g_now += 10001; /* the Start's read lease ends */
    mc_master_put_opts_t on_a = {.preferred_segment = "segA"};
    assert_int_equal(mc_master_put_start(m, CA, K("k"), 1000, &on_a, true, r, &n), MC_OK);
    assert_int_equal(mc_master_put_end(m, CA, K("k"), 78), MC_OK);
    assert_int_equal(mc_master_task_end(m, CA, id, COPY, true), MC_ERR_INVALID_WRITE);
    assert_int_equal(replicas(m, "k", NULL), 1);
    assert_int_equal(mc_master_task_complete(m, CA, id, MC_MASTER_TASK_FAILED, "x"), MC_OK);
    /* the target unmounted between Start and End */
    assert_int_equal(mc_master_create_copy_task(m, K("k"), b, 1, id), MC_OK);
    started(m, id, COPY);
    assert_int_equal(mc_master_unmount(m, CB, "segB", false), MC_OK);
    assert_int_equal(mc_master_task_end(m, CA, id, COPY, true), MC_ERR_SEGMENT_NOT_FOUND);
    assert_int_equal(replicas(m, "k", NULL), 1);
    /* a copy to a segment that already holds a replica adds nothing, and succeeds */
    const char *a[] = {"segA"};
    assert_int_equal(mc_master_create_copy_task(m, K("k"), a, 1, id), MC_OK);
    fetch_one(m, id);
    mc_master_replica_t src, reps[8];
    uint64_t size, sum;
    assert_int_equal(mc_master_task_start(m, CA, id, COPY, &src, reps, &n, &size, &sum), MC_OK);
    assert_int_equal(n, 0);
    assert_int_equal(mc_master_task_end(m, CA, id, COPY, true), MC_OK);
    assert_int_equal(replicas(m, "k", NULL), 1);
    mc_master_destroy(m);
}

/* Copies to several segments grow the object's replica list (its record is reallocated). */
static void test_copy_grows_replicas(void **state)
{
    (void)state;
    mc_master_t *m = cluster(NULL);
    mount(m, CB, "segD", 0x400000, false);
    uint64_t id[2];
    const char *bc[] = {"segB", "segC"}, *d[] = {"segD"};
    assert_int_equal(mc_master_create_copy_task(m, K("k"), bc, 2, id), MC_OK);
    started(m, id, COPY);
    assert_int_equal(mc_master_task_end(m, CA, id, COPY, true), MC_OK);
    assert_int_equal(replicas(m, "k", NULL), 3);
    assert_int_equal(mc_master_create_copy_task(m, K("k"), d, 1, id), MC_OK);
    started(m, id, COPY);
    assert_int_equal(mc_master_task_end(m, CA, id, COPY, true), MC_OK);
    assert_int_equal(replicas(m, "k", NULL), 4);
    assert_int_equal(mc_master_object_count(m), 1);
    /* the object is still removable and its space all freed */
    g_now += 10001;
    assert_int_equal(mc_master_remove(m, K("k"), false, NULL), MC_OK);
    assert_int_equal(used(m, "segA") + used(m, "segB") + used(m, "segC") + used(m, "segD"), 0);
    mc_master_destroy(m);
}

/* Caps and timeouts: the pending cap refuses, the processing cap holds tasks back, a task not
 * fetched (or not completed) in time FAILS, its held blocks parked, finished tasks beyond
 * their cap forgotten oldest first. */
static void test_caps_and_timeouts(void **state)
{
    (void)state;
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.max_total_pending_tasks = 2;
    cfg.max_total_processing_tasks = 1;
    cfg.max_total_finished_tasks = 2;
    cfg.pending_task_timeout_ms = 1000;
    cfg.processing_task_timeout_ms = 2000;
    cfg.client_ttl_ms = 1ull << 40; /* the clock jumps past the put release timeout below */
    mc_master_t *m = cluster(&cfg);
    uint64_t t1[2], t2[2], t3[2];
    const char *b[] = {"segB"};
    assert_int_equal(mc_master_create_copy_task(m, K("k"), b, 1, t1), MC_OK);
    assert_int_equal(mc_master_create_copy_task(m, K("k"), b, 1, t2), MC_OK);
    assert_int_equal(mc_master_create_copy_task(m, K("k"), b, 1, t3),
                     MC_ERR_TASK_PENDING_LIMIT_EXCEEDED);
    started(m, t1, COPY); /* the processing cap: only t1 is handed out */
    assert_int_equal(used(m, "segB"), 1024);
    g_now += 1001;
    mc_master_cron(m);
    mc_master_task_info_t ti;
    assert_int_equal(mc_master_query_task(m, t2, &ti), MC_OK);
    assert_int_equal(ti.status, MC_MASTER_TASK_FAILED);
    assert_non_null(strstr(ti.message, "pending timeout"));
    assert_int_equal(query_status(m, t1), MC_MASTER_TASK_PROCESSING);
    g_now += 1000;
    mc_master_cron(m);
    assert_int_equal(mc_master_query_task(m, t1, &ti), MC_OK);
    assert_int_equal(ti.status, MC_MASTER_TASK_FAILED);
    assert_non_null(strstr(ti.message, "processing timeout"));
    assert_int_equal(mc_master_task_end(m, CA, t1, COPY, true), MC_ERR_INVALID_PARAMS);
    assert_int_equal(replicas(m, "k", NULL), 1);
    assert_int_equal(used(m, "segB"), 1024); /* parked: its owner may still write it */
    g_now += cfg.put_start_release_timeout_ms;
    mc_master_cron(m);
    assert_int_equal(used(m, "segB"), 0);
    /* a third finished task pushes the oldest (t1) out */
    assert_int_equal(mc_master_create_copy_task(m, K("k"), b, 1, t3), MC_OK);
    started(m, t3, COPY);
    assert_int_equal(mc_master_task_complete(m, CA, t3, MC_MASTER_TASK_FAILED, "no"), MC_OK);
    assert_int_equal(query_status(m, t1), MC_ERR_TASK_NOT_FOUND);
    assert_int_equal(query_status(m, t2), MC_MASTER_TASK_FAILED);
    assert_int_equal(query_status(m, t3), MC_MASTER_TASK_FAILED);
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    assert_int_equal(mt.tasks_failed, 3);
    mc_master_destroy(m);
}

/* An HA standby that follows the leader's replicated log holds the copy and the move once
 * promoted (the End's COMMIT records are in the log the standbys fetch); the tasks are not. */
static void test_standby_follows_copy_and_move(void **state)
{
    (void)state;
    char dir[] = "/tmp/mc_tasks_ha_XXXXXX";
    assert_non_null(mkdtemp(dir));
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.wal_dir = dir;
    mc_master_t *m = mk(&cfg);
    mc_master_ha_log_enable(m); /* every record from the first MOUNT on */
    mount(m, CA, "segA", 0x100000, false);
    mount(m, CB, "segB", 0x200000, false);
    mount(m, CB, "segC", 0x300000, false);
    mc_master_replica_t r[8];
    uint32_t n;
    mc_master_put_opts_t on_a = {.preferred_segment = "segA"};
    assert_int_equal(mc_master_put_start(m, CA, K("k"), 1000, &on_a, false, r, &n), MC_OK);
    assert_int_equal(mc_master_put_end(m, CA, K("k"), 77), MC_OK);
    assert_int_equal(mc_master_put_start(m, CA, K("mv"), 500, &on_a, false, r, &n), MC_OK);
    assert_int_equal(mc_master_put_end(m, CA, K("mv"), 5), MC_OK);
    uint64_t cid[2], mid[2];
    const char *b[] = {"segB"};
    assert_int_equal(mc_master_create_copy_task(m, K("k"), b, 1, cid), MC_OK);
    assert_int_equal(mc_master_create_move_task(m, K("mv"), "segA", "segC", mid), MC_OK);
    mc_master_task_info_t ti[MC_MASTER_TASK_FETCH_MAX];
    assert_int_equal(mc_master_fetch_tasks(m, CA, 0, ti, &n), MC_OK);
    assert_int_equal(n, 2);
    mc_master_replica_t src, reps[8];
    uint64_t size, sum;
    assert_int_equal(mc_master_task_start(m, CA, cid, COPY, &src, reps, &n, &size, &sum), MC_OK);
    assert_int_equal(mc_master_task_start(m, CA, mid, MOVE, &src, reps, &n, &size, &sum), MC_OK);
    assert_int_equal(mc_master_task_end(m, CA, cid, COPY, true), MC_OK);
    assert_int_equal(mc_master_task_end(m, CA, mid, MOVE, true), MC_OK);
    assert_int_equal(mc_master_wal_sync(m), MC_OK);
    bool lost = true, space = false;
    mc_buf_t *log = mc_master_ha_log(m, &lost, &space);
    assert_false(lost);
    size_t len = mc_buf_unread(log);
    uint8_t *recs = mc_malloc(len);
    assert_non_null(recs);
    memcpy(recs, mc_buf_head(log), len);
    mc_master_destroy(m);

    mc_master_config_t fcfg;
    mc_master_config_default(&fcfg);
    mc_master_t *f = mk(&fcfg);
    assert_int_equal(mc_master_follow_begin(f), MC_OK);
    size_t used;
    assert_int_equal(mc_master_follow_apply(f, recs, len, &used, NULL, NULL), MC_OK);
    assert_int_equal(used, len);
    mc_free(recs);
    assert_int_equal(mc_master_follow_promote(f, NULL, 2), MC_OK);
    mount(f, CA, "segA", 0x100000, true);
    mount(f, CB, "segB", 0x200000, true);
    mount(f, CB, "segC", 0x300000, true);
    const char *segs[8];
    assert_int_equal(replicas(f, "k", segs), 2);
    assert_int_equal(replicas(f, "mv", segs), 1);
    assert_string_equal(segs[0], "segC");
    assert_int_equal(query_status(f, cid), MC_ERR_TASK_NOT_FOUND);
    mc_master_destroy(f);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_validation),
        cmocka_unit_test(test_copy_lifecycle_and_restart),
        cmocka_unit_test(test_move_frees_source_after_lease),
        cmocka_unit_test(test_end_after_changes),
        cmocka_unit_test(test_copy_grows_replicas),
        cmocka_unit_test(test_caps_and_timeouts),
        cmocka_unit_test(test_standby_follows_copy_and_move),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
