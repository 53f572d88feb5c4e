/* Randomized white-box test of the master core: random operations with a fake clock, checking
 * the structural invariants after every step (no range handed out twice, every replica block
 * allocated and owned once, list/table counts agree), and WAL recovery at random points
 * against a model of the committed objects. Replica copy/move tasks run among the other
 * operations: their blocks count as owned, their commits keep every value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "policy_env.h"
#include "master/master_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_now = 5000000;
static uint64_t fake_clock(void *ctx)
{
    (void)ctx;
    return g_now;
}

#define NKEYS 300
#define NSEG 4
static uint8_t CIDS[2][16] = {{1}, {2}};

typedef struct range {
    uint32_t seg;
    uint64_t addr, size;
} range_t;

static int cmp_range(const void *a, const void *b)
{
    const range_t *x = a, *y = b;
    if (x->seg != y->seg)
        return x->seg < y->seg ? -1 : 1;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static void check_invariants(mc_master_t *m)
{
    uint64_t n = 0, readable = 0, writing = 0;
    static range_t ranges[NKEYS * 16 + 64];
    size_t nr = 0;
    uint64_t per_seg[64] = {0};
    for (uint64_t b = 0; b < m->n_buckets; b++) {
        for (obj_t *o = m->buckets[b]; o; o = o->hnext) {
            n++;
            assert_true(o->state == OBJ_READABLE || o->state == OBJ_WRITING);
            readable += o->state == OBJ_READABLE;
            writing += o->state == OBJ_WRITING;
            assert_true(o->n_rep >= 1 && o->n_rep <= o->rep_cap);
            assert_int_equal(o->hash & (m->n_buckets - 1), b);
            for (uint32_t i = 0; i < o->n_rep; i++) {
                segment_t *s = master_seg_slot(m, o->rep[i].seg);
                assert_non_null(s);
                assert_non_null(s->alloc);
                for (uint32_t j = 0; j < i; j++)
                    assert_int_not_equal(o->rep[j].seg, o->rep[i].seg);
                ranges[nr++] = (range_t){o->rep[i].seg,
                                         mc_master_allocator_addr(s->alloc, o->rep[i].blk),
                                         mc_master_allocator_size(s->alloc, o->rep[i].blk)};
                assert_true(ranges[nr - 1].size >= o->size);
                per_seg[o->rep[i].seg]++;
            }
        }
    }
    static obj_rep_t held[NKEYS * 8];
    size_t nh = master_tasks_blocks(m, held, NKEYS * 8);
    assert_true(nh <= NKEYS * 8);
    for (size_t i = 0; i < nh; i++) {
        segment_t *s = master_seg_slot(m, held[i].seg);
        assert_non_null(s);
        ranges[nr++] = (range_t){held[i].seg, mc_master_allocator_addr(s->alloc, held[i].blk),
                                 mc_master_allocator_size(s->alloc, held[i].blk)};
        per_seg[held[i].seg]++;
    }
    for (size_t i = 0; i < m->n_disc; i++) {
        segment_t *s = master_seg_slot(m, m->disc[i].seg);
        assert_non_null(s);
        ranges[nr++] = (range_t){m->disc[i].seg, mc_master_allocator_addr(s->alloc, m->disc[i].blk),
                                 mc_master_allocator_size(s->alloc, m->disc[i].blk)};
        per_seg[m->disc[i].seg]++;
    }
    assert_int_equal(n, m->n_objs);
    assert_int_equal(readable, m->n_readable);
    assert_int_equal(writing, m->writing.n);
    qsort(ranges, nr, sizeof(range_t), cmp_range);
    for (size_t i = 1; i < nr; i++)
        if (ranges[i].seg == ranges[i - 1].seg)
            assert_true(ranges[i - 1].addr + ranges[i - 1].size <= ranges[i].addr);
    for (uint32_t id = 0; id < m->n_segs; id++) {
        segment_t *s = master_seg_slot(m, id);
        if (!s)
            continue;
        assert_int_equal(mc_master_allocator_check(s->alloc), 0);
        assert_int_equal(s->n_replicas, per_seg[id]);
        uint64_t used = 0;
        for (size_t i = 0; i < nr; i++)
            if (ranges[i].seg == id)
                used += ranges[i].size;
        assert_int_equal(mc_master_allocator_used(s->alloc), used);
    }
}

static void mount_seg(mc_master_t *m, int s)
{
    char name[16];
    snprintf(name, sizeof(name), "seg%d", s);
    mc_master_segment_info_t si = {.name = name, .base = (uint64_t)(s + 1) << 32,
                                   .size = 1 << 19, .host_label = s < 2 ? "hA" : "hB"};
    memset(si.uuid, s + 1, 16);
    mc_status_t st = mc_master_mount(m, CIDS[s / 2], &si, true);
    assert_true(st == MC_OK || st == MC_ERR_SEGMENT_ALREADY_EXISTS);
}

typedef struct model {
    int committed[NKEYS];  /* 1 if committed (readable once its segments are mounted) */
    uint64_t sum[NKEYS];
} model_t;

static void key_of(int i, char *k, size_t n) { snprintf(k, n, "key-%d-%s", i, i % 3 ? "x" : "yy"); }

/* Copy the WAL directory as it is right now (a crash image after the last sync). */
static void snapshot_dir(const char *from, const char *to)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' && cp -a '%s' '%s'", to, from, to);
    assert_int_equal(system(cmd), 0);
}

static void verify_recovery(const char *dir, const model_t *md, mc_master_config_t cfg)
{
    cfg.wal_dir = dir;
    cfg.clock = fake_clock;
    mc_master_t *m;
    test_policy_from_env(&cfg);
    assert_int_equal(mc_master_create(&cfg, &m), MC_OK);
    check_invariants(m);
    for (int s = 0; s < NSEG; s++)
        mount_seg(m, s);
    check_invariants(m);
    for (int i = 0; i < NKEYS; i++) {
        char k[32];
        key_of(i, k, sizeof(k));
        mc_master_replica_t r[8];
        uint32_t n;
        uint64_t size, sum;
        mc_status_t st = mc_master_get_replicas(m, k, strlen(k), r, &n, &size, &sum);
        if (md->committed[i]) {
            assert_int_equal(st, MC_OK);
            assert_true(sum == md->sum[i]);
        } else {
            assert_int_not_equal(st, MC_OK);
        }
    }
    mc_master_destroy(m);
}

/* coverage: the runs must exercise eviction, commits and task Ends that commit */
static uint64_t g_evicted, g_live, g_task_commits;

static void run(uint64_t seed, bool with_wal)
{
    srand((unsigned)seed);
    char dir[] = "/tmp/mc_master_rand_XXXXXX";
    char crash[64];
    assert_non_null(mkdtemp(dir));
    snprintf(crash, sizeof(crash), "%s.crash", dir);
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.default_kv_lease_ttl_ms = 50;
    cfg.put_start_discard_timeout_ms = 300;
    cfg.put_start_release_timeout_ms = 1000;
    cfg.client_ttl_ms = 1u << 30; /* liveness is exercised elsewhere */
    cfg.wal_fsync = false;
    cfg.wal_snapshot_bytes = 20000; /* many snapshots */
    if (with_wal)
        cfg.wal_dir = dir;
    cfg.clock = fake_clock;
    mc_master_t *m;
    test_policy_from_env(&cfg);
    assert_int_equal(mc_master_create(&cfg, &m), MC_OK);
    mc_master_set_seed(m, seed);
    for (int s = 0; s < NSEG; s++)
        mount_seg(m, s);
    model_t md;
    memset(&md, 0, sizeof(md));
    int owner[NKEYS];
    memset(owner, -1, sizeof(owner));
    int recoveries = 0;
    uint64_t tids[64][2]; /* tasks fetched (PROCESSING), and by which client */
    int tcli[64], ttype[64], tstage[64], ntid = 0;
    for (int step = 0; step < 6000; step++) {
        int i = rand() % NKEYS, c = rand() % 2;
        char k[32];
        key_of(i, k, sizeof(k));
        size_t kl = strlen(k);
        mc_master_replica_t r[8];
        uint32_t n;
        int op = rand() % 110;
        if (op < 25) {
            mc_master_put_opts_t o = {.replica_num = 1 + (uint32_t)(rand() % 3),
                                      .soft_pin = rand() % 10 == 0, .hard_pin = rand() % 50 == 0};
            bool upsert = rand() % 5 == 0;
            mc_status_t st = mc_master_put_start(m, CIDS[c], k, kl, 1 + (uint64_t)(rand() % 16000),
                                                 &o, upsert, r, &n);
            if (st == MC_OK) {
                owner[i] = c;
                md.committed[i] = 0; /* replaced (upsert) or new */
            }
        } else if (op < 55) {
            /* mostly finish a put that is in flight, mostly from its writer */
            for (int t = 0; t < 20; t++) {
                int j = rand() % NKEYS;
                if (owner[j] >= 0 && !md.committed[j]) {
                    i = j;
                    c = rand() % 10 ? owner[j] : 1 - owner[j];
                    key_of(i, k, sizeof(k));
                    kl = strlen(k);
                    break;
                }
            }
            uint64_t sum = (uint64_t)rand() << 16 | (uint64_t)step;
            if (mc_master_put_end(m, CIDS[c], k, kl, sum) == MC_OK) {
                assert_int_equal(owner[i], c);
                md.committed[i] = 1;
                md.sum[i] = sum;
            }
        } else if (op < 62) {
            mc_master_put_revoke(m, CIDS[c], k, kl);
        } else if (op < 80) {
            uint64_t size, sum;
            if (mc_master_get_replicas(m, k, kl, r, &n, &size, &sum) == MC_OK) {
                assert_int_equal(md.committed[i], 1);
                assert_true(sum == md.sum[i]);
                for (uint32_t j = 0; j < n; j++)
                    assert_int_equal(r[j].status, 2);
            }
        } else if (op < 88) {
            if (mc_master_remove(m, k, kl, rand() % 2, NULL) == MC_OK)
                md.committed[i] = 0;
        } else if (op < 95) {
            g_now += (uint64_t)(rand() % 40);
            mc_master_cron(m);
        } else if (op < 96) {
            uint64_t cnt;
            mc_master_remove_regex(m, "^key-1[0-9]-", false, &cnt, NULL);
        } else if (op < 97 && !with_wal) {
            int s = rand() % NSEG;
            char name[16];
            snprintf(name, sizeof(name), "seg%d", s);
            mc_master_unmount(m, CIDS[s / 2], name, false);
            mount_seg(m, s);
        } else if (op >= 100 && op < 103) { /* a copy or a move task, mostly of a live key */
            for (int t = 0; t < 20 && !md.committed[i]; t++)
                i = rand() % NKEYS;
            key_of(i, k, sizeof(k));
            kl = strlen(k);
            uint64_t id[2];
            char a[16], b[16];
            snprintf(a, sizeof(a), "seg%d", rand() % NSEG);
            snprintf(b, sizeof(b), "seg%d", rand() % NSEG);
            const char *t[] = {b};
            if (op == 100)
                mc_master_create_move_task(m, k, kl, a, b, id);
            else
                mc_master_create_copy_task(m, k, kl, t, 1, id);
        } else if (op >= 103 && op < 105) {
            mc_master_task_info_t ti[MC_MASTER_TASK_FETCH_MAX];
            uint32_t nt = 0;
            assert_int_equal(mc_master_fetch_tasks(m, CIDS[c], 4, ti, &nt), MC_OK);
            for (uint32_t j = 0; j < nt && ntid < 64; j++) {
                tids[ntid][0] = ti[j].id[0];
                tids[ntid][1] = ti[j].id[1];
                ttype[ntid] = ti[j].type;
                tstage[ntid] = 0;
                tcli[ntid++] = c;
            }
        } else if (op >= 105 && ntid > 0) {
            /* the next step of a fetched task (Start, End or Revoke, Complete), now and then
             * out of order or from the other client */
            int j = rand() % ntid, who = rand() % 10 ? tcli[j] : 1 - tcli[j];
            int stage = rand() % 8 ? tstage[j] : rand() % 3;
            mc_master_replica_t src;
            uint64_t size, sum;
            if (stage == 0) {
                if (mc_master_task_start(m, CIDS[who], tids[j], ttype[j], &src, r, &n, &size,
                                         &sum) == MC_OK)
                    tstage[j] = 1;
                else if (rand() % 3 == 0)
                    tstage[j] = 2; /* give up: complete it */
            } else if (stage == 1) {
                bool commit = rand() % 4 != 0;
                if (mc_master_task_end(m, CIDS[who], tids[j], ttype[j], commit) == MC_OK &&
                    commit)
                    g_task_commits++;
                tstage[j] = 2;
            } else {
                mc_master_task_complete(m, CIDS[who], tids[j], MC_MASTER_TASK_SUCCESS, "");
                ntid--; /* done with it (a refused call: the cron fails it later) */
                memmove(&tids[j], &tids[j + 1], (size_t)(ntid - j) * sizeof(tids[0]));
                memmove(&tcli[j], &tcli[j + 1], (size_t)(ntid - j) * sizeof(tcli[0]));
                memmove(&ttype[j], &ttype[j + 1], (size_t)(ntid - j) * sizeof(ttype[0]));
                memmove(&tstage[j], &tstage[j + 1], (size_t)(ntid - j) * sizeof(tstage[0]));
            }
        } else {
            bool need;
            mc_master_ping(m, CIDS[c], &need);
        }
        /* Evictions and segment loss silently drop committed objects: resync the model. */
        for (int j = 0; j < NKEYS; j++) {
            if (!md.committed[j])
                continue;
            char kk[32];
            key_of(j, kk, sizeof(kk));
            if (mc_master_exist(m, kk, strlen(kk)) != MC_OK)
                md.committed[j] = 0;
        }
        if (step % 50 == 0)
            check_invariants(m);
        if (with_wal && step % 700 == 350) {
            assert_int_equal(mc_master_wal_sync(m), MC_OK);
            snapshot_dir(dir, crash);
            verify_recovery(crash, &md, cfg);
            recoveries++;
        }
    }
    check_invariants(m);
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    int live = 0;
    for (int j = 0; j < NKEYS; j++)
        live += md.committed[j];
    fprintf(stderr, "seed %llu wal %d: %llu objects (%d committed), %llu evicted, %llu discards, "
                    "%llu releases, %d recoveries, %llu snapshots\n",
            (unsigned long long)seed, with_wal, (unsigned long long)m->n_objs, live,
            (unsigned long long)mt.evicted_objects, (unsigned long long)mt.put_start_discards,
            (unsigned long long)mt.put_start_releases, recoveries, (unsigned long long)mt.snapshots);
    fprintf(stderr, "  tasks: %llu succeeded, %llu failed, %llu commits so far\n",
            (unsigned long long)mt.tasks_succeeded, (unsigned long long)mt.tasks_failed,
            (unsigned long long)g_task_commits);
    g_evicted += mt.evicted_objects;
    g_live += (uint64_t)live;
    mc_master_destroy(m);
    if (with_wal) {
        /* clean shutdown image */
        verify_recovery(dir, &md, cfg);
        assert_true(recoveries >= 5);
    }
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", dir, crash);
    assert_int_equal(system(cmd), 0);
}

static void test_random_no_wal(void **state)
{
    (void)state;
    g_evicted = g_live = g_task_commits = 0;
    for (uint64_t seed = 1; seed <= 4; seed++)
        run(seed, false);
    assert_true(g_evicted > 0);
    assert_true(g_live > 20);
    assert_true(g_task_commits > 10);
}

static void test_random_wal_recovery(void **state)
{
    (void)state;
    g_evicted = g_live = g_task_commits = 0;
    for (uint64_t seed = 11; seed <= 12; seed++)
        run(seed, true);
    assert_true(g_evicted > 0);
    assert_true(g_live > 20);
    assert_true(g_task_commits > 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_no_wal),
        cmocka_unit_test(test_random_wal_recovery),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
