/* Store clients on etcd:// addressing against a REAL 3-member etcd on loopback
 * (tests/support/etcd_cluster.h) and two mooncake_master --enable_ha members:
 *   - test_failover_transparent: a storage server (mooncake_client) and this process's client
 *     both address "etcd://..." with MC_STORE_CLUSTER_ID; objects put, the leader kill -9ed;
 *     with nothing done by the application, the storage server re-mounts on the new leader,
 *     every object reads back with its bytes and new puts succeed.
 *   - test_feed_follows_failover: a reader on the placement feed is pushed the placements of
 *     what a writer commits, before and after a kill -9 of the leader (its feed follows the
 *     new leader), and reads each pushed key without a master lookup.
 *   - test_history_through_kill9: three threads put, get and remove distinct keys through a
 *     kill -9 of the leader; every call and answer is recorded, and afterwards: every
 *     acknowledged put reads back with its exact bytes unless a later remove was acknowledged
 *     (or sent without an answer), no acknowledged remove comes back, no get returned other
 *     bytes, and a key reported missing had no acknowledged put after its last remove (also
 *     between the kill and the storage server's re-mount on the new leader, when a committed
 *     object's replicas are on a RECOVERING segment: a get waits for the re-mount or answers
 *     REPLICA_IS_NOT_READY, never OBJECT_NOT_FOUND); and
 *     every acknowledged put and remove carries the view of its answer and the master that
 *     answered: no view was answered by two masters (test_view_checker_catches_two_masters
 *     checks the checker on crafted histories).
 * Fails when etcd is not installed (scripts/install-deps.sh installs etcd-server). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "client/master_client.h"
#include "client/store_int.h"
#include "common/time.h"
#include "mooncake/store.h"
#include "support/etcd_cluster.h"
#include "support/ha_master.h"
#include "support/test_util.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TTL_S 5           /* as test_master_ha: a loaded machine must not fence the leader */
#define CLUSTER "storeha" /* reaches the clients through MC_STORE_CLUSTER_ID */
#define TAKEOVER_MS 30000
#define VAL_LEN 4096

static mt_etcd_t g_etcd;
static mt_ha_master_t g_m[2];
static pid_t g_server;
static char g_dir[256], g_server_log[300], g_addr[1200];

/* The member that is leader now (index), waiting up to timeout_ms; -1 if none. */
static int leader_of(int timeout_ms)
{
    uint64_t deadline = mc_now_ms() + (uint64_t)timeout_ms;
    do {
        for (int i = 0; i < 2; i++)
            if (g_m[i].pid > 0 && mt_ha_is_leader(&g_m[i], 1))
                return i;
        mc_sleep_ms(100);
    } while (mc_now_ms() < deadline);
    return -1;
}

static void start_server(void)
{
    char bin[512], m[1300];
    mt_bin_path("mooncake_client", bin, sizeof(bin));
    snprintf(m, sizeof(m), "--master_server_address=%s", g_addr);
    char *argv[] = {bin, m, "--global_segment_size=64MB", "--host_label=srv",
                    "--local_hostname=127.0.0.1", NULL};
    snprintf(g_server_log, sizeof(g_server_log), "%s/server.log", g_dir);
    g_server = mt_spawn(argv, g_server_log);
    assert_true(g_server > 0);
    assert_int_equal(mt_wait_log(g_server_log, "mooncake_client ready", 20000), 0);
}

/* feed: placement_feed_prefix (NULL = no placement feed). */
static mc_store_t *open_store_fed(const char *feed)
{
    mc_store_config_t cfg = {
        .local_hostname = "127.0.0.1",
        .metadata_server = "P2PHANDSHAKE",
        .protocol = "tcp",
        .master_server_addr = g_addr,
        .transfer_timeout_ms = 3000,
        .rpc_timeout_ms = 5000,
        .placement_feed_prefix = feed,
    };
    mc_store_t *s = NULL;
    assert_int_equal(mc_store_create(&cfg, &s), MC_OK);
    return s;
}

static mc_store_t *open_store(void)
{
    return open_store_fed(NULL);
}

/* Starts etcd, two members (the first becomes leader), the storage server. */
static int setup(void **state)
{
    (void)state;
    if (!mt_etcd_available()) {
        fprintf(stderr, "FAIL: etcd not installed (scripts/install-deps.sh: etcd-server)\n");
        return -1;
    }
    if (mt_etcd_start(&g_etcd, 3) != 0 || mt_tmpdir(g_dir, sizeof(g_dir)) != 0)
        return -1;
    /* upstream's form uses ';', ',' is accepted too: mix them */
    snprintf(g_addr, sizeof(g_addr), "etcd://%s", g_etcd.endpoints);
    char *semi = strchr(g_addr, ';');
    if (semi)
        *semi = ',';
    setenv("MC_STORE_CLUSTER_ID", CLUSTER, 1); /* the clients' (and the server's) cluster */
    memset(g_m, 0, sizeof(g_m));
    if (mt_ha_start(&g_m[0], g_etcd.endpoints, CLUSTER, TTL_S, NULL) != 0 ||
        !mt_ha_is_leader(&g_m[0], TAKEOVER_MS) ||
        mt_ha_start(&g_m[1], g_etcd.endpoints, CLUSTER, TTL_S, NULL) != 0)
        return -1;
    start_server();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (g_server > 0)
        mt_stop(g_server, SIGKILL, 5000);
    mt_ha_stop(&g_m[0]);
    mt_ha_stop(&g_m[1]);
    mt_etcd_stop(&g_etcd);
    if (g_dir[0] && !getenv("MC_KEEP_TEST_DIRS"))
        mt_rmdir(g_dir);
    return 0;
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

static uint64_t key_seed(const char *key)
{
    uint64_t h = 1469598103934665603ull;
    for (; *key; key++)
        h = (h ^ (uint8_t)*key) * 1099511628211ull;
    return h;
}

static mc_status_t put_key(mc_store_t *s, const char *key)
{
    char buf[VAL_LEN];
    fill(buf, sizeof(buf), key_seed(key));
    struct iovec iov = {buf, sizeof(buf)};
    return mc_store_put(s, key, &iov, 1, NULL);
}

/* MC_OK when key reads back with exactly its bytes; MC_ERR_CHECKSUM for other bytes. */
static mc_status_t get_key(mc_store_t *s, const char *key)
{
    void *v = NULL;
    size_t n = 0;
    mc_status_t st = mc_store_get(s, key, &v, &n);
    if (st == MC_OK) {
        char want[VAL_LEN];
        fill(want, sizeof(want), key_seed(key));
        if (n != VAL_LEN || memcmp(v, want, VAL_LEN) != 0)
            st = MC_ERR_CHECKSUM;
    }
    free(v);
    return st;
}

/* kill -9 of the leader; returns the new leader's index once it serves. */
static int kill_leader(void)
{
    int old = leader_of(TAKEOVER_MS);
    assert_true(old >= 0);
    mt_stop(g_m[old].pid, SIGKILL, 5000);
    g_m[old].pid = 0;
    int now = leader_of(TAKEOVER_MS);
    assert_int_equal(now, 1 - old);
    return now;
}

/* Restarts the killed member as a standby for the next test. */
static void restart_standby(void)
{
    for (int i = 0; i < 2; i++)
        if (g_m[i].pid == 0) {
            mt_ha_stop(&g_m[i]);
            assert_int_equal(mt_ha_start(&g_m[i], g_etcd.endpoints, CLUSTER, TTL_S, NULL), 0);
        }
}

static void test_failover_transparent(void **state)
{
    (void)state;
    mc_store_t *s = open_store();
    char key[64];
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "ha-t-%d", i);
        assert_int_equal(put_key(s, key), MC_OK);
    }
    kill_leader();
    /* the application only retries its own call; the storage server re-mounts by itself */
    uint64_t deadline = mc_now_ms() + TAKEOVER_MS;
    mc_status_t st;
    while ((st = get_key(s, "ha-t-0")) != MC_OK && mc_now_ms() < deadline)
        mc_sleep_ms(100);
    assert_int_equal(st, MC_OK);
    assert_int_equal(mt_wait_log(g_server_log, "re-mount", 1000), 0);
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "ha-t-%d", i);
        assert_int_equal(get_key(s, key), MC_OK);
    }
    /* new puts: nothing was freed in the recovered segment within default_kv_lease_ttl (2 s)
     * before the takeover, so it lends space at once (the loop covers the re-mount) */
    while ((st = put_key(s, "ha-t-new")) != MC_OK && mc_now_ms() < deadline)
        mc_sleep_ms(100);
    assert_int_equal(st, MC_OK);
    assert_int_equal(get_key(s, "ha-t-new"), MC_OK);
    assert_int_equal(mc_store_remove(s, "ha-t-new", true), MC_OK); /* read-leased: force */
    assert_int_equal(get_key(s, "ha-t-new"), MC_ERR_OBJECT_NOT_FOUND);
    mc_store_destroy(s);
    restart_standby();
}

static mc_store_read_stats_t read_stats(mc_store_t *s)
{
    mc_store_read_stats_t st;
    mc_store_read_stats(s, &st);
    return st;
}

/* Waits (bounded) until s holds a leased hint for each of the n keys "<prefix><i>" (what the
 * feed records for a pushed placement: store_feed.c); asserts it does. */
static void wait_fed(mc_store_t *s, const char *prefix, int n)
{
    char key[64];
    uint64_t deadline = mc_now_ms() + TAKEOVER_MS;
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "%s%d", prefix, i);
        mc_replica_hint_t h;
        bool fed;
        while (!(fed = mc_hint_get(s->hints, key, &h) && h.lease_until_ms > mc_now_ms()) &&
               mc_now_ms() < deadline)
            mc_sleep_ms(10);
        assert_true(fed);
    }
}

/* Gets of the n keys "<prefix><i>" read their exact bytes, every one under a pushed lease:
 * no master lookup. */
static void get_fed(mc_store_t *r, const char *prefix, int n)
{
    char key[64];
    mc_store_read_stats_t s0 = read_stats(r);
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "%s%d", prefix, i);
        assert_int_equal(get_key(r, key), MC_OK);
    }
    mc_store_read_stats_t s1 = read_stats(r);
    assert_int_equal(s1.master_lookups, s0.master_lookups);
    assert_int_equal(s1.lease_hits, s0.lease_hits + (uint64_t)n);
}

/* The placement feed on etcd:// addressing: a reader subscribed to "ha-f/" is pushed what a
 * writer commits there and reads it without a master lookup; after a kill -9 of the leader its
 * feed follows the new leader, whose commits are pushed and read the same way. */
static void test_feed_follows_failover(void **state)
{
    (void)state;
    enum { N = 5 };
    mc_store_t *r = open_store_fed("ha-f/");
    mc_store_t *w = open_store();
    char key[64];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "ha-f/a%d", i);
        assert_int_equal(put_key(w, key), MC_OK);
    }
    wait_fed(r, "ha-f/a", N);
    /* the feed thread counts a placement right after recording its hint: wait for the count */
    uint64_t counted = mc_now_ms() + TAKEOVER_MS;
    while (read_stats(r).feed_placements < N && mc_now_ms() < counted)
        mc_sleep_ms(10);
    assert_int_equal(read_stats(r).feed_placements, N);
    get_fed(r, "ha-f/a", N);
    kill_leader();
    uint64_t deadline = mc_now_ms() + TAKEOVER_MS;
    mc_status_t st;
    while ((st = put_key(w, "ha-f/b0")) != MC_OK && mc_now_ms() < deadline)
        mc_sleep_ms(100); /* until the storage server has re-mounted on the new leader */
    assert_int_equal(st, MC_OK);
    for (int i = 1; i < N; i++) {
        snprintf(key, sizeof(key), "ha-f/b%d", i);
        assert_int_equal(put_key(w, key), MC_OK);
    }
    wait_fed(r, "ha-f/b", N);
    get_fed(r, "ha-f/b", N);
    mc_store_destroy(w);
    mc_store_destroy(r);
    restart_standby();
}

/* ---- history checker ---- */

#define THREADS 3
#define MAX_KEYS 4000
#define MAX_OPS 20000

enum { OP_PUT, OP_GET, OP_REMOVE };

typedef struct op_rec {
    uint8_t op;
    uint16_t key; /* index in the thread's key space */
    int32_t st;   /* the answer */
    uint64_t t0, t1; /* sent, answered (ms) */
    uint64_t view;   /* acknowledged put/remove: the view of the answer (frame header) */
    char addr[64];   /* and the master that answered (its RPC address) */
} op_rec_t;

typedef struct hist {
    mc_store_t *s;
    int t;
    op_rec_t ops[MAX_OPS];
    int n_ops, n_keys;
    uint64_t ok_after; /* calls answered MC_OK once the new leader served */
} hist_t;

static atomic_int g_stop, g_switched;
/* The kill, and when the new leader had no RECOVERING segment left (the storage server had
 * re-mounted). */
static uint64_t g_kill_ms, g_remounted_ms;

static void hkey(int t, int k, char *out, size_t len)
{
    snprintf(out, len, "ha-h%d-%d", t, k);
}

static void *history_main(void *arg)
{
    hist_t *h = arg;
    uint64_t x = 88172645463325252ull + (uint64_t)h->t;
    char key[64];
    while (!atomic_load(&g_stop) && h->n_ops < MAX_OPS) {
        /* half the keys and three quarters of the calls are kept for the kill and the new
         * leader, however fast the old leader answers: until the kill, a thread that used the
         * rest waits for it */
        if (!atomic_load(&g_switched) && (h->n_keys >= MAX_KEYS / 2 || h->n_ops >= MAX_OPS / 4)) {
            mc_sleep_ms(5);
            continue;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int r = (int)(x % 100);
        op_rec_t *o = &h->ops[h->n_ops];
        if (r < 50 || h->n_keys == 0) {
            if (h->n_keys >= MAX_KEYS)
                break;
            o->op = OP_PUT;
            o->key = (uint16_t)h->n_keys++;
        } else {
            o->op = r < 85 ? OP_GET : OP_REMOVE;
            o->key = (uint16_t)((x >> 20) % (uint64_t)h->n_keys);
        }
        hkey(h->t, o->key, key, sizeof(key));
        o->t0 = mc_now_ms();
        o->st = o->op == OP_PUT   ? put_key(h->s, key)
                : o->op == OP_GET ? get_key(h->s, key)
                                  : mc_store_remove(h->s, key, false);
        o->t1 = mc_now_ms();
        if (o->st == MC_OK && o->op != OP_GET) { /* the answer that acknowledged it */
            mc_master_answer_t a;
            mc_master_client_last_answer(&a);
            o->view = a.view;
            snprintf(o->addr, sizeof(o->addr), "%s", a.addr);
        }
        h->n_ops++;
        if (o->st == MC_OK && atomic_load(&g_switched))
            h->ok_after++;
    }
    return NULL;
}

/* What may be true of a key after a prefix of its history. */
typedef struct kstate {
    int maybe_present, maybe_absent;
    /* the last put or remove of the key was a put of unknown outcome: with
     * --ha_commit=standbys its PutStart may be logged and its PutEnd lost at the kill, so the
     * new leader keeps it pending for its writer (gets answer REPLICA_IS_NOT_READY) */
    int put_unknown;
} kstate_t;

/* Replays one thread's history, asserting every get answer, then checks the final state. */
static int check_history(hist_t *h)
{
    static kstate_t ks[MAX_KEYS];
    int bad = 0;
    char key[64];
    for (int k = 0; k < h->n_keys; k++)
        ks[k] = (kstate_t){0, 1, 0};
    for (int i = 0; i < h->n_ops; i++) {
        const op_rec_t *o = &h->ops[i];
        kstate_t *k = &ks[o->key];
        hkey(h->t, o->key, key, sizeof(key));
        if (o->op == OP_PUT) { /* create-once: OK also when it already existed */
            if (o->st == MC_OK)
                *k = (kstate_t){1, 0, 0};
            else /* unknown outcome (e.g. PutEnd's answer lost) */
                k->maybe_present = k->put_unknown = 1;
        } else if (o->op == OP_REMOVE) {
            if (o->st == MC_OK || o->st == MC_ERR_OBJECT_NOT_FOUND)
                *k = (kstate_t){0, 1, 0};
            else if (o->st != MC_ERR_OBJECT_HAS_LEASE) /* read-leased: refused, no change */
                k->maybe_absent = 1;
        } else if (o->st == MC_OK && !k->maybe_present) {
            fprintf(stderr, "VIOLATION: get %s returned bytes of a removed/never-put key\n", key);
            bad++;
        } else if (o->st == MC_ERR_OBJECT_NOT_FOUND && !k->maybe_absent) {
            fprintf(stderr, "VIOLATION: get %s: not found after an acknowledged put\n", key);
            bad++;
        } else if (o->st == MC_ERR_CHECKSUM) {
            fprintf(stderr, "VIOLATION: get %s returned other bytes\n", key);
            bad++;
        }
    }
    for (int i = 0; i < h->n_keys; i++) {
        hkey(h->t, i, key, sizeof(key));
        mc_status_t st = get_key(h->s, key);
        int ok = st == MC_OK ? ks[i].maybe_present
                 : st == MC_ERR_OBJECT_NOT_FOUND ? ks[i].maybe_absent
                 : st == MC_ERR_REPLICA_IS_NOT_READY ? ks[i].put_unknown
                                                     : 0;
        if (!ok) {
            fprintf(stderr, "VIOLATION: final get %s: %s (may be present %d, absent %d); its "
                    "calls (ms from the kill):\n", key, mc_status_str(st), ks[i].maybe_present,
                    ks[i].maybe_absent);
            for (int j = 0; j < h->n_ops; j++)
                if (h->ops[j].key == i)
                    fprintf(stderr, "  op %d %lld..%lld: %s (view %llu, %s)\n", h->ops[j].op,
                            (long long)(h->ops[j].t0 - g_kill_ms),
                            (long long)(h->ops[j].t1 - g_kill_ms), mc_status_str(h->ops[j].st),
                            (unsigned long long)h->ops[j].view, h->ops[j].addr);
            bad++;
        }
    }
    return bad;
}

/* "No two masters acknowledged writes in the same view": every acknowledged put and remove
 * (n of them, from any thread) carries a nonzero view and the address of the master that
 * answered; one view answered by two masters, an acknowledgement without a view (an answer
 * that escaped fencing by view), or a thread that saw its views go back is a violation.
 * Returns the number of violations. */
static int check_views(const op_rec_t *const *acks, const int *thread, size_t n)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (acks[i]->view == 0) {
            fprintf(stderr, "VIOLATION: a write acknowledged by %s without a view\n",
                    acks[i]->addr);
            bad++;
            continue;
        }
        for (size_t j = 0; j < i; j++) {
            if (acks[j]->view == acks[i]->view && strcmp(acks[j]->addr, acks[i]->addr) != 0) {
                fprintf(stderr, "VIOLATION: view %llu: writes acknowledged by %s and by %s\n",
                        (unsigned long long)acks[i]->view, acks[j]->addr, acks[i]->addr);
                bad++;
                break;
            }
            if (thread[j] == thread[i] && acks[j]->view > acks[i]->view) {
                fprintf(stderr, "VIOLATION: thread %d: view %llu acknowledged after %llu\n",
                        thread[i], (unsigned long long)acks[i]->view,
                        (unsigned long long)acks[j]->view);
                bad++;
                break;
            }
        }
    }
    return bad;
}

/* Every acknowledged write of the histories, in each thread's order, through check_views.
 * (Quadratic in the writes: a few thousand here.) */
static int check_history_views(const hist_t *h, int nh)
{
    size_t n = 0;
    for (int t = 0; t < nh; t++)
        n += (size_t)h[t].n_ops;
    const op_rec_t **acks = calloc(n ? n : 1, sizeof(*acks));
    int *thread = calloc(n ? n : 1, sizeof(int));
    assert_true(acks && thread);
    size_t k = 0;
    for (int t = 0; t < nh; t++)
        for (int i = 0; i < h[t].n_ops; i++)
            if (h[t].ops[i].st == MC_OK && h[t].ops[i].op != OP_GET) {
                thread[k] = t;
                acks[k++] = &h[t].ops[i];
            }
    int bad = check_views(acks, thread, k);
    fprintf(stderr, "history: %zu acknowledged writes checked for one master per view\n", k);
    free(acks);
    free(thread);
    return bad;
}

/* The view checker itself, on crafted histories: it must be able to fail. */
static void test_view_checker_catches_two_masters(void **state)
{
    (void)state;
    op_rec_t a = {.view = 5, .addr = "127.0.0.1:1000"}, b = {.view = 5, .addr = "127.0.0.1:2000"},
             c = {.view = 9, .addr = "127.0.0.1:2000"}, z = {.view = 0, .addr = "127.0.0.1:3000"};
    const op_rec_t *two_in_one[] = {&a, &c, &b};
    const op_rec_t *fine[] = {&a, &a, &c, &c};
    const op_rec_t *backwards[] = {&c, &a};
    const op_rec_t *no_view[] = {&a, &z};
    int t0[] = {0, 1, 2, 0}, same[] = {0, 0};
    assert_int_equal(check_views(two_in_one, t0, 3), 1);
    assert_int_equal(check_views(fine, t0, 4), 0);
    assert_int_equal(check_views(backwards, same, 2), 1);
    assert_int_equal(check_views(backwards, t0, 2), 0); /* two threads: no order between them */
    assert_int_equal(check_views(no_view, t0, 2), 1);
}

static void test_history_through_kill9(void **state)
{
    (void)state;
    static hist_t h[THREADS];
    pthread_t th[THREADS];
    mc_store_t *s = open_store();
    atomic_store(&g_stop, 0);
    atomic_store(&g_switched, 0);
    for (int t = 0; t < THREADS; t++) {
        h[t] = (hist_t){.s = s, .t = t};
        assert_int_equal(pthread_create(&th[t], NULL, history_main, &h[t]), 0);
    }
    mc_sleep_ms(1500);
    g_kill_ms = mc_now_ms();
    int now = kill_leader();
    atomic_store(&g_switched, 1);
    g_remounted_ms = UINT64_MAX;
    while (g_remounted_ms == UINT64_MAX && mc_now_ms() < g_kill_ms + TAKEOVER_MS) {
        static const char q[] = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
        char *resp = NULL;
        if (mt_http_raw(g_m[now].mport, q, sizeof(q) - 1, &resp) == 200 &&
            strstr(resp, "\nmaster_recovering_segments 0\n"))
            g_remounted_ms = mc_now_ms();
        free(resp);
        mc_sleep_ms(20);
    }
    assert_true(g_remounted_ms != UINT64_MAX);
    /* run until every thread had 30 answered calls through the new leader (bounded) */
    uint64_t deadline = mc_now_ms() + TAKEOVER_MS;
    for (;;) {
        int done = 1;
        for (int t = 0; t < THREADS; t++)
            done &= h[t].ok_after >= 30;
        if (done || mc_now_ms() > deadline)
            break;
        mc_sleep_ms(100);
    }
    atomic_store(&g_stop, 1);
    int bad = 0, ops = 0, errs = 0;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        if (h[t].ok_after < 30) {
            fprintf(stderr, "thread %d: %d calls, %llu answered through the new leader; last:\n",
                    t, h[t].n_ops, (unsigned long long)h[t].ok_after);
            for (int i = h[t].n_ops > 8 ? h[t].n_ops - 8 : 0; i < h[t].n_ops; i++)
                fprintf(stderr, "  op %d key %d: %s\n", h[t].ops[i].op, h[t].ops[i].key,
                        mc_status_str(h[t].ops[i].st));
        }
        assert_true(h[t].ok_after >= 30);
        ops += h[t].n_ops;
        for (int i = 0; i < h[t].n_ops; i++)
            errs += h[t].ops[i].st != MC_OK && h[t].ops[i].st != MC_ERR_OBJECT_NOT_FOUND;
    }
    fprintf(stderr, "history: re-mounted on the new leader %llu ms after the kill\n",
            (unsigned long long)(g_remounted_ms - g_kill_ms));
    for (int t = 0; t < THREADS; t++)
        bad += check_history(&h[t]);
    bad += check_history_views(h, THREADS);
    fprintf(stderr, "history: %d calls, %d failed with an error during the switch\n", ops, errs);
    assert_int_equal(bad, 0);
    mc_store_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_view_checker_catches_two_masters),
        cmocka_unit_test(test_failover_transparent),
        cmocka_unit_test(test_feed_follows_failover),
        cmocka_unit_test(test_history_through_kill9),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
