/* mc_ha_bench: master HA figures on loopback, one JSON line each (stdout).
 *
 *   failover    for each lease TTL (--ttls, default 2,5) and --trials (default 20) kill -9s of
 *               the leader: from the kill to (a) the first get answered with bytes of an object
 *               put before the kill (the new leader serves and the storage server re-mounted)
 *               and (b) the first successful put through the new leader; p50 and max against
 *               the targets p50 <= TTL + 1 s, max <= 2 x TTL + 1 s. A store client on
 *               etcd:// retries by itself; the bench only calls again after a failed call.
 *   throughput  --threads clients doing BatchPut (--batch keys of --value bytes per call) for
 *               --seconds against a single master with its local WAL, then against an HA
 *               leader with one standby (same machine, same run): objects/s and the ratio
 *               (target >= 0.5); the same for batch lookups (BatchExistKey); the standby's
 *               master_ha_log_lag_batches / _seconds sampled every 100 ms during the HA puts.
 *               Beside the puts a reader (its own store client) calls BatchExistKey of 16
 *               keys put before them, one call at a time: reader_mean_us, _p50_us, _p90_us,
 *               _p99_us (HA: its answers are held only when an append in flight changed one
 *               of its keys).
 *               The threads share --clients store clients (round-robin; default 1): a store
 *               client has 4 pooled master connections, so at most 4 x --clients master calls
 *               are in flight, which bounds what an HA leader can put per etcd append.
 *   bound       in the same run, right before the HA puts: the disk's fsync latency where
 *               etcd keeps its data (fio, 4 KiB writes with an fsync each: ha_disk_fsync),
 *               etcd's latency for a txn of the append's shape (compare + 2 puts, 2 KiB) at 1
 *               and 4 in flight for --probe_ms each (ha_etcd_commit); during the HA puts the
 *               leader's master_ha_append_* counters and etcd's fsync / backend-commit
 *               histograms (ha_append: txns, groups / records / objects per txn, log bytes
 *               per object, mean appends in flight, and two bounds on puts/s: calls in flight
 *               x batch / etcd's commit latency at 1 in flight, and etcd's txns/s x objects
 *               per txn). --etcd_dir puts
 *               etcd's data dirs under that directory (default $TMPDIR or /tmp); every line
 *               says "etcd_fs":"disk" or "tmpfs" (tmpfs: not durable against power loss, an
 *               extra figure, never the claim).
 *
 * Daemons: a 3-member etcd (tests/support/etcd_cluster.h), mooncake_master processes and one
 * mooncake_client storage server, all on free loopback ports, stopped by PID.
 * etcd runs with its default raft timing (heartbeat 100 ms, election 1000 ms; --etcd_election_ms)
 * so that a 2 s lease TTL is honoured (etcd raises TTLs below 1.5 x the election timeout).
 *   --ha_commit=etcd|standbys|both: the members' --ha_commit (both: the HA puts run once per
 *               mode, each against the single master of the same run; the failover phase
 *               then runs in etcd mode). In standbys mode the puts start once the standby is
 *               in the leader's in-sync set.
 * Flags (--help lists them): --phase=all|failover|throughput --ttls=2,5 --trials=20 --threads=4
 *        --clients=1 --seconds=3 --batch=16 --value=1024 --etcd_election_ms=1000
 *        --etcd_dir=DIR --probe_ms=2000 --ha_commit=etcd */
#include "common/alloc.h"
#include "common/config.h"
#include "common/etcd.h"
#include "common/http_client.h"
#include "common/log.h"
#include "common/net.h"
#include "common/time.h"
#include "mooncake/store.h"
#include "support/etcd_cluster.h"
#include "support/ha_master.h"
#include "support/test_util.h"
#include "bench_stats.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>

static mt_etcd_t g_etcd;
static char g_dir[256];
static int g_trials = 20, g_threads = 4, g_seconds = 3, g_batch = 16, g_value = 1024;
static int g_clients = 1; /* store clients (each its own pool of master connections) */
static int g_probe_ms = 2000; /* each etcd txn probe (concurrency 1 and 4) */
static const char *g_commit = "etcd"; /* --ha_commit: etcd | standbys | both (throughput) */
static const char *g_etcd_dir = NULL; /* parent dir of etcd's data (NULL: $TMPDIR or /tmp) */
static char g_etcd_fs[16] = "?";      /* "tmpfs" or "disk" */
#define HA_APPENDERS 4 /* HA_APPEND_INFLIGHT in src/master/ha.c: etcd appends in flight */

#define WAIT_MS 60000

static pid_t start_server(const char *addr, const char *cluster, const char *logname)
{
    char bin[512], m[1300], log[400];
    mt_bin_path("mooncake_client", bin, sizeof(bin));
    snprintf(m, sizeof(m), "--master_server_address=%s", addr);
    snprintf(log, sizeof(log), "%s/%s", g_dir, logname);
    setenv("MC_STORE_CLUSTER_ID", cluster, 1);
    char *argv[] = {bin, m, "--global_segment_size=1GB", "--host_label=srv",
                    "--local_hostname=127.0.0.1", NULL};
    pid_t pid = mt_spawn(argv, log);
    if (pid <= 0 || mt_wait_log(log, "mooncake_client ready", WAIT_MS) != 0) {
        fprintf(stderr, "storage server did not start (%s)\n", log);
        exit(1);
    }
    return pid;
}

static mc_store_t *open_store(const char *addr, uint32_t rpc_timeout_ms)
{
    mc_store_config_t cfg = {.local_hostname = "127.0.0.1", .metadata_server = "P2PHANDSHAKE",
                             .protocol = "tcp", .master_server_addr = addr,
                             .rpc_timeout_ms = rpc_timeout_ms, .transfer_timeout_ms = 3000};
    mc_store_t *s = NULL;
    if (mc_store_create(&cfg, &s) != MC_OK) {
        fprintf(stderr, "store client setup failed (%s)\n", addr);
        exit(1);
    }
    return s;
}

/* The /metrics text of a port (mooncake admin port or etcd client port; free()), or NULL. */
static char *scrape(uint16_t port)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/metrics", port);
    mc_http_resp_t r;
    if (mc_http_request("GET", url, NULL, 0, NULL, (size_t)16 << 20, 5000, &r) != MC_OK)
        return NULL;
    if (r.code != 200) {
        mc_free(r.body);
        return NULL;
    }
    return r.body;
}

/* An unlabelled sample `name value` of a /metrics text, or -1. */
static double metric_of(const char *text, const char *name)
{
    char pat[160];
    snprintf(pat, sizeof(pat), "\n%s ", name);
    const char *p = text ? strstr(text, pat) : NULL;
    return p ? strtod(p + strlen(pat), NULL) : -1;
}

/* A gauge from an admin port's /metrics, or -1. */
static double metric(uint16_t port, const char *name)
{
    char *t = scrape(port);
    double v = metric_of(t, name);
    mc_free(t);
    return v;
}

/* ---------------------------------------------------------------- failover */

static void failover(int ttl)
{
    char cluster[32], addr[300];
    snprintf(cluster, sizeof(cluster), "bench_fo_%d", ttl);
    snprintf(addr, sizeof(addr), "etcd://%s", g_etcd.endpoints);
    mt_ha_master_t m[2] = {0};
    if (mt_ha_start(&m[0], g_etcd.endpoints, cluster, ttl, NULL) != 0 ||
        !mt_ha_is_leader(&m[0], WAIT_MS) ||
        mt_ha_start(&m[1], g_etcd.endpoints, cluster, ttl, NULL) != 0) {
        fprintf(stderr, "masters did not start\n");
        exit(1);
    }
    char logname[64];
    snprintf(logname, sizeof(logname), "server_%s.log", cluster); /* one per daemon */
    pid_t srv = start_server(addr, cluster, logname);
    mc_store_t *s = open_store(addr, 2000);
    uint64_t *serve = calloc((size_t)g_trials, 8), *put = calloc((size_t)g_trials, 8);
    char *val = malloc((size_t)g_value), key[64];
    memset(val, 'v', (size_t)g_value);
    struct iovec iov = {val, (size_t)g_value};
    int done = 0;
    for (int t = 0; t < g_trials; t++) {
        int leader = mt_ha_is_leader(&m[0], 1) ? 0 : mt_ha_is_leader(&m[1], 1) ? 1 : -1;
        /* the other member must be a caught-up standby before the kill */
        uint64_t w = mc_now_ms() + WAIT_MS;
        while (leader >= 0 && mc_now_ms() < w &&
               metric(m[1 - leader].mport, "master_ha_role") != 0)
            mc_sleep_ms(100);
        snprintf(key, sizeof(key), "fo-%d-before", t);
        if (leader < 0 || mc_store_put(s, key, &iov, 1, NULL) != MC_OK) {
            fprintf(stderr, "trial %d: no leader or put failed before the kill\n", t);
            break;
        }
        mc_sleep_ms(200); /* the standby applies the last batch */
        /* on stderr with the clients' log lines: the time line of a failover (the members'
         * logs say when the standby was elected and promoted, the storage server's when it
         * re-mounted) */
        MC_LOG_INFO("bench: trial %d: kill -9 of the leader %s", t, m[leader].addr);
        uint64_t t0 = mc_now_ms();
        mt_stop(m[leader].pid, SIGKILL, 5000);
        m[leader].pid = 0;
        uint64_t deadline = t0 + WAIT_MS;
        void *v = NULL;
        size_t n;
        while (mc_store_get(s, key, &v, &n) != MC_OK && mc_now_ms() < deadline)
            mc_sleep_ms(10);
        free(v);
        serve[t] = mc_now_ms() - t0;
        snprintf(key, sizeof(key), "fo-%d-after", t);
        while (mc_store_put(s, key, &iov, 1, NULL) != MC_OK && mc_now_ms() < deadline)
            mc_sleep_ms(10);
        put[t] = mc_now_ms() - t0;
        MC_LOG_INFO("bench: trial %d: first get served %llu ms, first put %llu ms after the "
                    "kill", t, (unsigned long long)serve[t], (unsigned long long)put[t]);
        printf("{\"bench\":\"ha_failover_trial\",\"ttl_s\":%d,\"trial\":%d,\"serve_ms\":%llu,"
               "\"first_put_ms\":%llu}\n", ttl, t, (unsigned long long)serve[t],
               (unsigned long long)put[t]);
        fflush(stdout);
        done++;
        mt_ha_stop(&m[leader]); /* the killed member comes back as a standby */
        if (mt_ha_start(&m[leader], g_etcd.endpoints, cluster, ttl, NULL) != 0)
            break;
    }
    if (done > 0) {
        qsort(serve, (size_t)done, 8, mc_bench_cmp_u64);
        qsort(put, (size_t)done, 8, mc_bench_cmp_u64);
        uint64_t p50 = put[(done - 1) / 2], max = put[done - 1];
        uint64_t tp50 = (uint64_t)ttl * 1000 + 1000, tmax = 2 * (uint64_t)ttl * 1000 + 1000;
        printf("{\"bench\":\"ha_failover\",\"ttl_s\":%d,\"trials\":%d,\"serve_p50_ms\":%llu,"
               "\"serve_max_ms\":%llu,\"first_put_p50_ms\":%llu,\"first_put_max_ms\":%llu,"
               "\"target_p50_ms\":%llu,\"target_max_ms\":%llu,\"default_kv_lease_ttl_ms\":2000,"
               "\"etcd_election_ms\":%s,"
               "\"meets_targets\":%s}\n",
               ttl, done, (unsigned long long)serve[(done - 1) / 2],
               (unsigned long long)serve[done - 1], (unsigned long long)p50,
               (unsigned long long)max, (unsigned long long)tp50, (unsigned long long)tmax,
               getenv("MT_ETCD_ELECTION_MS"),
               p50 <= tp50 && max <= tmax ? "true" : "false");
        fflush(stdout);
    }
    mc_store_destroy(s);
    mt_stop(srv, SIGKILL, 5000);
    mt_ha_stop(&m[0]);
    mt_ha_stop(&m[1]);
    free(serve);
    free(put);
    free(val);
}

/* ---------------------------------------------------------------- throughput */

typedef struct worker {
    mc_store_t *s;
    int id, lookup;
    uint64_t until_ms, objects, errors;
    int32_t first_error; /* the first failed key's status (or the call's) */
    uint32_t next;
} worker_t;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    int b = g_batch;
    char (*names)[48] = malloc((size_t)b * 48);
    const char **keys = malloc((size_t)b * sizeof(char *));
    struct iovec *iov = malloc((size_t)b * sizeof(*iov));
    const struct iovec **piov = malloc((size_t)b * sizeof(*piov));
    size_t *np = malloc((size_t)b * sizeof(size_t));
    int32_t *res = malloc((size_t)b * sizeof(int32_t));
    char *val = malloc((size_t)g_value);
    memset(val, 'x', (size_t)g_value);
    uint32_t lookup_i = 0;
    while (mc_now_ms() < w->until_ms) {
        for (int i = 0; i < b; i++) {
            uint32_t k = w->lookup ? (lookup_i++ % (w->next ? w->next : 1)) : w->next + (uint32_t)i;
            snprintf(names[i], 48, "tp-%d-%u", w->id, k);
            keys[i] = names[i];
            iov[i] = (struct iovec){val, (size_t)g_value};
            piov[i] = &iov[i];
            np[i] = 1;
        }
        mc_status_t st = w->lookup ? mc_store_batch_exists(w->s, (size_t)b, keys, res)
                                   : mc_store_batch_put(w->s, (size_t)b, keys, piov, np, NULL,
                                                        false, res);
        for (int i = 0; i < b; i++) {
            int ok = st == MC_OK && (w->lookup ? res[i] == 1 : res[i] == MC_OK);
            w->objects += (uint64_t)ok;
            w->errors += (uint64_t)!ok;
            if (!ok && !w->first_error)
                w->first_error = st != MC_OK ? st : res[i] ? res[i] : MC_ERR_OBJECT_NOT_FOUND;
        }
        if (!w->lookup)
            w->next += (uint32_t)b;
    }
    free(names);
    free(keys);
    free(iov);
    free(piov);
    free(np);
    free(res);
    free(val);
    return NULL;
}

/* A reader beside the puts, as a decode instance beside prefill writers: its own store
 * client, BatchExistKey of READER_KEYS keys put before the phase, one call at a time until
 * until_ms; the wall time of each call (ns, at most READER_MAX_CALLS). */
#define READER_KEYS 16
#define READER_MAX_CALLS 200000
typedef struct reader {
    mc_store_t *s;
    uint64_t until_ms;
    uint64_t *ns;
    size_t n, errors;
} reader_t;

static void *reader_main(void *arg)
{
    reader_t *r = arg;
    char names[READER_KEYS][32];
    const char *keys[READER_KEYS];
    int32_t res[READER_KEYS];
    for (int i = 0; i < READER_KEYS; i++) {
        snprintf(names[i], sizeof(names[i]), "rd-%d", i);
        keys[i] = names[i];
    }
    while (mc_now_ms() < r->until_ms && r->n < READER_MAX_CALLS) {
        uint64_t t0 = mc_now_ns();
        mc_status_t st = mc_store_batch_exists(r->s, READER_KEYS, keys, res);
        r->ns[r->n++] = mc_now_ns() - t0;
        for (int i = 0; i < READER_KEYS; i++)
            r->errors += st != MC_OK || res[i] != 1;
    }
    return NULL;
}

/* Runs the workers' puts (lookup 0) or lookups (1) for --seconds; objects per second. While
 * running, samples the standby's log lag when standby_mport != 0, and runs rd (not NULL)
 * beside the puts. */
static double run_phase(worker_t *w, int lookup, uint16_t standby_mport, double *lag_b,
                        double *lag_s, reader_t *rd)
{
    pthread_t th[64], rth;
    uint64_t t0 = mc_now_ms();
    if (rd) {
        rd->until_ms = t0 + (uint64_t)g_seconds * 1000;
        pthread_create(&rth, NULL, reader_main, rd);
    }
    for (int i = 0; i < g_threads; i++) {
        w[i].lookup = lookup;
        w[i].objects = w[i].errors = 0;
        w[i].first_error = 0;
        w[i].until_ms = t0 + (uint64_t)g_seconds * 1000;
        pthread_create(&th[i], NULL, worker_main, &w[i]);
    }
    while (standby_mport && mc_now_ms() < t0 + (uint64_t)g_seconds * 1000) {
        double b = metric(standby_mport, "master_ha_log_lag_batches");
        double s = metric(standby_mport, "master_ha_log_lag_seconds");
        if (b > *lag_b)
            *lag_b = b;
        if (s > *lag_s)
            *lag_s = s;
        mc_sleep_ms(100);
    }
    uint64_t objects = 0, errors = 0;
    int32_t first = 0;
    if (rd)
        pthread_join(rth, NULL);
    for (int i = 0; i < g_threads; i++) {
        pthread_join(th[i], NULL);
        objects += w[i].objects;
        errors += w[i].errors;
        if (w[i].first_error && !first)
            first = w[i].first_error;
    }
    double secs = (double)(mc_now_ms() - t0) / 1000.0;
    if (errors)
        fprintf(stderr, "%s: %llu errors (first: %s)\n", lookup ? "lookup" : "put",
                (unsigned long long)errors, mc_status_str(first));
    return (double)objects / secs;
}

/* ---------------------------------------------------------------- what bounds HA puts */

/* The disk's fsync latency where etcd keeps its data: fio writing 4 KiB blocks with an fsync
 * after each (1 MiB, in a scratch dir next to the members' data dirs). One JSON line. */
static void disk_probe(void)
{
    char dir[400], cmd[1400], buf[4096];
    snprintf(dir, sizeof(dir), "%s/fio", g_etcd.dir);
    snprintf(cmd, sizeof(cmd),
             "mkdir -p '%s' && fio --name=fsync --rw=write --bs=4k --size=1m --fsync=1 "
             "--ioengine=sync --directory='%s' --output-format=json 2>/dev/null; rm -rf '%s'",
             dir, dir, dir);
    FILE *f = popen(cmd, "r");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    char *all = NULL;
    size_t len = 0;
    while (n > 0) { /* fio's JSON is a few KiB: keep it all */
        char *t = realloc(all, len + n + 1);
        if (!t)
            break;
        all = t;
        memcpy(all + len, buf, n);
        len += n;
        all[len] = '\0';
        n = fread(buf, 1, sizeof(buf) - 1, f);
    }
    if (f)
        pclose(f);
    /* jobs[0].sync.lat_ns: mean and the 50th / 99th percentiles */
    const char *sy = all ? strstr(all, "\"sync\" : {") : NULL; /* not "ioengine" : "sync" */
    const char *mean = sy ? strstr(sy, "\"mean\"") : NULL;
    const char *p50 = sy ? strstr(sy, "\"50.000000\"") : NULL;
    const char *p99 = sy ? strstr(sy, "\"99.000000\"") : NULL;
    if (mean && p50 && p99)
        printf("{\"bench\":\"ha_disk_fsync\",\"etcd_fs\":\"%s\",\"tool\":\"fio --rw=write "
               "--bs=4k --size=1m --fsync=1 --ioengine=sync\",\"fsync_mean_ms\":%.3f,"
               "\"fsync_p50_ms\":%.3f,\"fsync_p99_ms\":%.3f}\n",
               g_etcd_fs, strtod(strchr(mean, ':') + 1, NULL) / 1e6,
               strtod(strchr(p50, ':') + 1, NULL) / 1e6, strtod(strchr(p99, ':') + 1, NULL) / 1e6);
    else
        printf("{\"bench\":\"ha_disk_fsync\",\"etcd_fs\":\"%s\",\"error\":\"fio missing or "
               "failed\"}\n", g_etcd_fs);
    fflush(stdout);
    free(all);
}

typedef struct probe {
    mc_etcd_t *e;
    int id;
    uint64_t until_ms;
    uint64_t *lat_us; /* one per txn, up to cap */
    size_t n, cap;
    int errors;
} probe_t;

/* Txns of the leader's append shape: compare a view key, put a 2 KiB batch and a prefix. */
static void *probe_main(void *arg)
{
    probe_t *p = arg;
    char key[64], val[2048];
    memset(val, 'b', sizeof(val));
    mc_etcd_cmp_t cmp = {.key = "/bench/probe/pv", .target = MC_ETCD_VALUE,
                         .result = MC_ETCD_EQUAL, .value = "1", .value_len = 1};
    while (mc_now_ms() < p->until_ms && p->n < p->cap) {
        snprintf(key, sizeof(key), "/bench/probe/b/%d/%zu", p->id, p->n);
        mc_etcd_op_t ops[2] = {
            {.type = MC_ETCD_OP_PUT, .key = key, .value = val, .value_len = sizeof(val)},
            {.type = MC_ETCD_OP_PUT, .key = "/bench/probe/prefix", .value = key,
             .value_len = strlen(key)}};
        int ok = 0;
        uint64_t t0 = mc_now_ns();
        if (mc_etcd_txn(p->e, &cmp, 1, ops, 2, NULL, 0, &ok, NULL) != MC_OK || !ok) {
            p->errors++;
            continue;
        }
        p->lat_us[p->n++] = (mc_now_ns() - t0) / 1000;
    }
    return NULL;
}

/* etcd's own commit latency for the leader's append txn, `conc` at once for g_probe_ms, through
 * the same client and endpoint list as the masters. Returns the mean latency in ms (0 on
 * failure) and prints one JSON line. */
static double etcd_probe(int conc, double *txns_per_s)
{
    mc_etcd_t *e = NULL;
    if (mc_etcd_open(g_etcd.endpoints, 5000, &e) != MC_OK ||
        mc_etcd_put(e, "/bench/probe/pv", "1", 1, 0, NULL) != MC_OK) {
        fprintf(stderr, "etcd probe: cannot reach etcd\n");
        mc_etcd_close(e);
        return 0;
    }
    probe_t p[HA_APPENDERS];
    pthread_t th[HA_APPENDERS];
    uint64_t t0 = mc_now_ms();
    for (int i = 0; i < conc; i++) {
        p[i] = (probe_t){.e = e, .id = i, .until_ms = t0 + (uint64_t)g_probe_ms, .cap = 100000};
        p[i].lat_us = malloc(p[i].cap * sizeof(uint64_t));
        pthread_create(&th[i], NULL, probe_main, &p[i]);
    }
    size_t n = 0;
    int errors = 0;
    for (int i = 0; i < conc; i++) {
        pthread_join(th[i], NULL);
        n += p[i].n;
        errors += p[i].errors;
    }
    double secs = (double)(mc_now_ms() - t0) / 1000.0;
    uint64_t *all = malloc((n ? n : 1) * sizeof(uint64_t)), sum = 0;
    for (int i = 0, k = 0; i < conc; i++) {
        for (size_t j = 0; j < p[i].n; j++, k++)
            sum += all[k] = p[i].lat_us[j];
        free(p[i].lat_us);
    }
    double mean = 0;
    if (n && (double)n / secs > *txns_per_s)
        *txns_per_s = (double)n / secs;
    if (n) {
        qsort(all, n, 8, mc_bench_cmp_u64);
        mean = (double)sum / (double)n / 1000.0;
        printf("{\"bench\":\"ha_etcd_commit\",\"etcd_fs\":\"%s\",\"in_flight\":%d,"
               "\"txn\":\"compare + 2 puts (2 KiB), as an append\",\"txns\":%zu,"
               "\"errors\":%d,\"txns_per_s\":%.0f,\"mean_ms\":%.3f,\"p50_ms\":%.3f,"
               "\"p99_ms\":%.3f}\n",
               g_etcd_fs, conc, n, errors, (double)n / secs, mean,
               (double)all[(n - 1) / 2] / 1000.0, (double)all[(n - 1) * 99 / 100] / 1000.0);
        fflush(stdout);
    }
    free(all);
    mc_etcd_delete(e, "/bench/probe/", mc_etcd_prefix_end("/bench/probe/"), NULL);
    mc_etcd_close(e);
    return mean;
}

/* etcd's fsync and backend commit histograms (_sum, _count), summed over the members. */
typedef struct etcd_disk {
    double fsync_s, fsync_n, commit_s, commit_n;
} etcd_disk_t;

static etcd_disk_t etcd_disk(void)
{
    etcd_disk_t d = {0};
    for (int i = 0; i < g_etcd.n; i++) {
        char *t = scrape(g_etcd.client_port[i]);
        d.fsync_s += metric_of(t, "etcd_disk_wal_fsync_duration_seconds_sum");
        d.fsync_n += metric_of(t, "etcd_disk_wal_fsync_duration_seconds_count");
        d.commit_s += metric_of(t, "etcd_disk_backend_commit_duration_seconds_sum");
        d.commit_n += metric_of(t, "etcd_disk_backend_commit_duration_seconds_count");
        mc_free(t);
    }
    return d;
}

/* The HA leader's append counters (master_ha_append_*). */
typedef struct appends {
    double txns, runs, groups, records, txn_s;
    double pool_hits; /* master_put_pool_hits_total (standbys mode: replicas from put pools) */
    double bytes;     /* master_ha_append_bytes_total */
} appends_t;

static appends_t appends(uint16_t mport)
{
    char *t = scrape(mport);
    appends_t a = {metric_of(t, "master_ha_append_txns_total"),
                   metric_of(t, "master_ha_append_runs_total"),
                   metric_of(t, "master_ha_append_groups_total"),
                   metric_of(t, "master_ha_append_records_total"),
                   metric_of(t, "master_ha_append_txn_seconds_total"),
                   metric_of(t, "master_put_pool_hits_total"),
                   metric_of(t, "master_ha_append_bytes_total")};
    mc_free(t);
    return a;
}

/* this run's etcd probes (mean latency at 1 in flight, the best txns/s at 1 or 4 in flight)
 * and single-master put rate, for the bounds of the ha_append line */
static double g_probe1_ms, g_probe_tps, g_single_puts;

static void throughput_one(const char *addr, const char *cluster, const char *label,
                           uint16_t standby_mport, uint16_t leader_mport, double out[3])
{
    char logname[64];
    snprintf(logname, sizeof(logname), "server_%s.log", label); /* one per daemon */
    pid_t srv = start_server(addr, cluster, logname);
    mc_store_t *s[64];
    for (int i = 0; i < g_clients; i++)
        s[i] = open_store(addr, 5000);
    worker_t w[64];
    for (int i = 0; i < g_threads; i++)
        w[i] = (worker_t){.s = s[i % g_clients], .id = i};
    /* the reader's keys, written (and acknowledged) before the puts start */
    reader_t rd = {.s = open_store(addr, 5000)};
    rd.ns = malloc(READER_MAX_CALLS * sizeof(uint64_t));
    char rnames[READER_KEYS][32], rval[1024];
    const char *rkeys[READER_KEYS];
    struct iovec riov[READER_KEYS];
    const struct iovec *rpiov[READER_KEYS];
    size_t rnp[READER_KEYS];
    int32_t rres[READER_KEYS];
    memset(rval, 'r', sizeof(rval));
    for (int i = 0; i < READER_KEYS; i++) {
        snprintf(rnames[i], sizeof(rnames[i]), "rd-%d", i);
        rkeys[i] = rnames[i];
        riov[i] = (struct iovec){rval, sizeof(rval)};
        rpiov[i] = &riov[i];
        rnp[i] = 1;
    }
    if (!rd.ns || mc_store_batch_put(rd.s, READER_KEYS, rkeys, rpiov, rnp, NULL, false, rres) !=
                      MC_OK) {
        fprintf(stderr, "the reader's keys could not be put\n");
        exit(1);
    }
    double lag_b = 0, lag_s = 0;
    appends_t a0 = {0}, a1 = {0};
    etcd_disk_t d0 = {0}, d1 = {0};
    if (leader_mport) {
        a0 = appends(leader_mport);
        d0 = etcd_disk();
    }
    uint64_t t0 = mc_now_ms();
    out[0] = run_phase(w, 0, standby_mport, &lag_b, &lag_s, &rd);
    double secs = (double)(mc_now_ms() - t0) / 1000.0;
    if (leader_mport) {
        a1 = appends(leader_mport);
        d1 = etcd_disk();
    }
    out[1] = run_phase(w, 1, 0, NULL, NULL, NULL);
    printf("{\"bench\":\"ha_throughput\",\"mode\":\"%s\",\"threads\":%d,\"clients\":%d,"
           "\"batch\":%d,\"value_bytes\":%d,\"put_objects_per_s\":%.0f,"
           "\"lookup_keys_per_s\":%.0f", label, g_threads, g_clients, g_batch, g_value, out[0],
           out[1]);
    if (standby_mport)
        printf(",\"standby_log_lag_batches_max\":%.0f,\"standby_log_lag_seconds_max\":%.3f",
               lag_b, lag_s);
    uint64_t sum_ns = 0;
    for (size_t i = 0; i < rd.n; i++)
        sum_ns += rd.ns[i];
    double p50 = mc_bench_pct_us(rd.ns, rd.n, 0.50);
    printf(",\"reader_keys\":%d,\"reader_calls\":%zu,\"reader_errors\":%zu,"
           "\"reader_mean_us\":%.0f,\"reader_p50_us\":%.0f,\"reader_p90_us\":%.0f,"
           "\"reader_p99_us\":%.0f",
           READER_KEYS, rd.n, rd.errors, rd.n ? (double)sum_ns / (double)rd.n / 1000.0 : 0, p50,
           mc_bench_pct_us(rd.ns, rd.n, 0.90), mc_bench_pct_us(rd.ns, rd.n, 0.99));
    out[2] = p50;
    printf(",\"etcd_fs\":\"%s\"}\n", g_etcd_fs);
    if (leader_mport && a1.txns > a0.txns) {
        /* what the leader's appends did during the HA puts, and the two bounds on puts/s:
         * - calls: a BatchPut is acknowledged after at least one etcd commit, and at most
         *   min(threads, 4 x clients) are in flight: calls x batch / commit latency (etcd's
         *   own, at 1 in flight, measured just before);
         * - etcd: etcd's txn rate (the better of 1 and 4 in flight) x objects per txn.
         * needs_commit_ms: the commit latency at which the calls bound would reach 0.5 x the
         * single master of this run. */
        double txns = a1.txns - a0.txns, objects = out[0] * secs;
        double txn_ms = (a1.txn_s - a0.txn_s) * 1000.0 / txns;
        double per_txn = objects / txns, in_flight = (a1.txn_s - a0.txn_s) / secs;
        double fn = d1.fsync_n - d0.fsync_n, cn = d1.commit_n - d0.commit_n;
        int calls = g_threads < 4 * g_clients ? g_threads : 4 * g_clients;
        printf("{\"bench\":\"ha_append\",\"etcd_fs\":\"%s\",\"seconds\":%.2f,\"txns\":%.0f,"
               "\"txns_per_s\":%.0f,\"runs\":%.0f,\"groups_per_txn\":%.2f,"
               "\"records_per_txn\":%.1f,\"objects_per_txn\":%.1f,"
               "\"log_bytes_per_object\":%.1f,\"txn_mean_ms\":%.3f,"
               "\"appends_in_flight_mean\":%.2f,\"appenders\":%d,"
               "\"etcd_wal_fsync_mean_ms\":%.3f,\"etcd_backend_commit_mean_ms\":%.3f,"
               "\"calls_in_flight\":%d,\"etcd_probe_mean_ms_at_1\":%.3f,"
               "\"etcd_probe_txns_per_s\":%.0f,\"bound_calls_puts_per_s\":%.0f,"
               "\"bound_etcd_puts_per_s\":%.0f,\"half_single_needs_commit_ms\":%.3f,"
               "\"put_pool_hits_per_object\":%.3f,\"put_objects_per_s\":%.0f}\n",
               g_etcd_fs, secs, txns, txns / secs, a1.runs - a0.runs,
               (a1.groups - a0.groups) / txns, (a1.records - a0.records) / txns, per_txn,
               objects > 0 ? (a1.bytes - a0.bytes) / objects : 0,
               txn_ms, in_flight, HA_APPENDERS,
               fn > 0 ? (d1.fsync_s - d0.fsync_s) * 1000.0 / fn : 0,
               cn > 0 ? (d1.commit_s - d0.commit_s) * 1000.0 / cn : 0, calls, g_probe1_ms,
               g_probe_tps,
               g_probe1_ms > 0 ? calls * g_batch / (g_probe1_ms / 1000.0) : 0,
               g_probe_tps * per_txn,
               g_single_puts > 0 ? calls * g_batch * 1000.0 / (0.5 * g_single_puts) : 0,
               objects > 0 ? (a1.pool_hits - a0.pool_hits) / objects : 0, out[0]);
    }
    fflush(stdout);
    for (int i = 0; i < g_clients; i++)
        mc_store_destroy(s[i]);
    mc_store_destroy(rd.s);
    free(rd.ns);
    mt_stop(srv, SIGKILL, 5000);
}

static void throughput(void)
{
    double single[3], ha[3]; /* puts/s, lookups/s, the reader's p50 µs beside the puts */
    /* a single master with its local WAL */
    char bin[512], port[32], wal[300], addr[64];
    uint16_t p;
    mc_net_free_port(&p);
    mt_bin_path("mooncake_master", bin, sizeof(bin));
    snprintf(port, sizeof(port), "--port=%u", p);
    snprintf(wal, sizeof(wal), "--wal_dir=%s/single_wal", g_dir);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", p);
    char log[300];
    snprintf(log, sizeof(log), "%s/single_master.log", g_dir);
    char *argv[] = {bin, port, "--metrics_port=0", wal, "--wal_fsync=false", NULL};
    pid_t single_pid = mt_spawn(argv, log);
    if (single_pid <= 0 || mt_wait_log(log, "mooncake_master listening", WAIT_MS) != 0) {
        fprintf(stderr, "single master did not start\n");
        exit(1);
    }
    throughput_one(addr, "unused", "single_wal", 0, 0, single);
    mt_stop(single_pid, SIGKILL, 5000);

    g_single_puts = single[0];
    disk_probe();
    g_probe_tps = 0;
    g_probe1_ms = etcd_probe(1, &g_probe_tps);
    etcd_probe(HA_APPENDERS, &g_probe_tps);
    /* each --ha_commit mode asked for: its own cluster, one leader and one standby (in S) */
    static const char *const modes[2] = {"etcd", "standbys"};
    for (int k = 0; k < 2; k++) {
        if (strcmp(g_commit, "both") != 0 && strcmp(g_commit, modes[k]) != 0)
            continue;
        setenv("MC_TEST_HA_COMMIT", modes[k], 1); /* mt_ha_start: --ha_commit */
        mt_ha_master_t m[2] = {0};
        char haddr[300], cluster[32], label[32];
        snprintf(haddr, sizeof(haddr), "etcd://%s", g_etcd.endpoints);
        snprintf(cluster, sizeof(cluster), "bench_tp_%s", modes[k]);
        snprintf(label, sizeof(label), "ha_%s", modes[k]);
        if (mt_ha_start(&m[0], g_etcd.endpoints, cluster, 5, NULL) != 0 ||
            !mt_ha_is_leader(&m[0], WAIT_MS) ||
            mt_ha_start(&m[1], g_etcd.endpoints, cluster, 5, NULL) != 0) {
            fprintf(stderr, "masters did not start\n");
            exit(1);
        }
        uint64_t w = mc_now_ms() + WAIT_MS;
        while (metric(m[1].mport, "master_ha_role") != 0 && mc_now_ms() < w)
            mc_sleep_ms(100);
        while (k == 1 && metric(m[0].mport, "master_ha_in_sync_members") != 1 &&
               mc_now_ms() < w)
            mc_sleep_ms(100);
        throughput_one(haddr, cluster, label, m[1].mport, m[0].mport, ha);
        printf("{\"bench\":\"ha_throughput_ratio\",\"ha_commit\":\"%s\","
               "\"put_ha_over_single\":%.3f,\"lookup_ha_over_single\":%.3f,"
               "\"reader_p50_single_over_ha\":%.3f,"
               "\"target_put_ratio\":0.5,\"etcd_fs\":\"%s\"}\n",
               modes[k], mc_bench_ratio(ha[0], single[0]), mc_bench_ratio(ha[1], single[1]),
               mc_bench_ratio(single[2], ha[2]), g_etcd_fs);
        fflush(stdout);
        mt_ha_stop(&m[0]);
        mt_ha_stop(&m[1]);
    }
    if (strcmp(g_commit, "both") != 0)
        setenv("MC_TEST_HA_COMMIT", g_commit, 1); /* the failover phase's members */
    else
        unsetenv("MC_TEST_HA_COMMIT");
}

/* "2,5" -> {2, 5}: 1..cap lease TTLs in seconds, each 1..60. Returns 0, or -1 if malformed. */
static int parse_ttls(const char *list, int *out, size_t cap, size_t *n_p)
{
    *n_p = 0;
    const char *p = list;
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 1 || v > 60 || *n_p == cap || (*end && *end != ','))
            return -1;
        out[(*n_p)++] = (int)v;
        if (!*end)
            return 0;
        p = end + 1;
    }
}

int main(int argc, char **argv)
{
    const char *phase = "all", *ttls = "2,5", *etcd_dir = "";
    int64_t trials = g_trials, threads = g_threads, clients = g_clients, seconds = g_seconds;
    int64_t batch = g_batch, value = g_value, probe_ms = g_probe_ms, election_ms = 1000;
    mc_option_t opts[] = {
        {"phase", MC_OPT_STRING, &phase, NULL, "all, failover or throughput", 0, 0},
        {"ttls", MC_OPT_STRING, &ttls, NULL,
         "failover: the lease TTLs to measure, seconds, comma-separated (1..60 each)", 0, 0},
        {"trials", MC_OPT_INT, &trials, NULL, "failover: kill -9s of the leader per TTL", 1, 1000},
        {"threads", MC_OPT_INT, &threads, NULL, "throughput: writer threads", 1, 64},
        {"clients", MC_OPT_INT, &clients, NULL,
         "throughput: store clients the writers share (at most --threads)", 1, 64},
        {"seconds", MC_OPT_INT, &seconds, NULL, "throughput: length of each timed phase", 1, 3600},
        {"batch", MC_OPT_INT, &batch, NULL, "throughput: keys per BatchPut", 1, 1024},
        {"value", MC_OPT_INT, &value, NULL, "throughput: bytes per value", 1, 1 << 30},
        {"probe_ms", MC_OPT_INT, &probe_ms, NULL,
         "bound: length of each etcd txn probe (1 and 4 in flight)", 100, 600000},
        {"etcd_election_ms", MC_OPT_INT, &election_ms, NULL,
         "etcd's election timeout (its heartbeat is a tenth of it)", 100, 60000},
        {"etcd_dir", MC_OPT_STRING, &etcd_dir, NULL,
         "parent directory of etcd's data dirs (empty: $TMPDIR or /tmp)", 0, 0},
        {"ha_commit", MC_OPT_STRING, &g_commit, NULL,
         "the members' --ha_commit: etcd, standbys or both (throughput runs once per mode)", 0,
         0},
    };
    mc_config_spec_t spec = {"mc_ha_bench",
                             "Master HA on loopback (a 3-member etcd, masters, one storage "
                             "server): failover time per lease TTL, put and lookup throughput "
                             "with HA against a single master, standby lag (JSON lines; the "
                             "comment at the top of bench/mc_ha_bench.c describes each phase).",
                             opts, MC_ARRAY_LEN(opts)};
    int rc = mc_config_main(&spec, argc, argv);
    if (rc >= 0)
        return rc;
    int ttl_s[16];
    size_t n_ttls = 0;
    if (parse_ttls(ttls, ttl_s, MC_ARRAY_LEN(ttl_s), &n_ttls) != 0) {
        fprintf(stderr, "mc_ha_bench: --ttls must be 1 to 16 comma-separated seconds, each 1..60 "
                        "(got '%s')\n", ttls);
        return 2;
    }
    if (strcmp(phase, "all") && strcmp(phase, "failover") && strcmp(phase, "throughput")) {
        fprintf(stderr, "mc_ha_bench: --phase must be all, failover or throughput\n");
        return 2;
    }
    if (strcmp(g_commit, "etcd") && strcmp(g_commit, "standbys") && strcmp(g_commit, "both")) {
        fprintf(stderr, "mc_ha_bench: --ha_commit must be etcd, standbys or both\n");
        return 2;
    }
    if (clients > threads) {
        fprintf(stderr, "mc_ha_bench: --clients (%lld) above --threads (%lld)\n",
                (long long)clients, (long long)threads);
        return 2;
    }
    g_trials = (int)trials;
    g_threads = (int)threads;
    g_clients = (int)clients;
    g_seconds = (int)seconds;
    g_batch = (int)batch;
    g_value = (int)value;
    g_probe_ms = (int)probe_ms;
    g_etcd_dir = *etcd_dir ? etcd_dir : NULL;
    if (strcmp(g_commit, "both") != 0)
        setenv("MC_TEST_HA_COMMIT", g_commit, 1); /* every member mt_ha_start starts */
    char election[24];
    snprintf(election, sizeof(election), "%lld", (long long)election_ms);
    if (!mt_etcd_available()) {
        fprintf(stderr, "etcd not installed (scripts/install-deps.sh: etcd-server)\n");
        return 1;
    }
    setenv("MT_ETCD_ELECTION_MS", election, 1);
    if (mt_tmpdir(g_dir, sizeof(g_dir)) != 0)
        return 1;
    /* etcd's data under --etcd_dir (the fixture makes its dir under $TMPDIR); the masters'
     * WALs and the rest stay in g_dir */
    const char *tmp = getenv("TMPDIR");
    char *saved = tmp ? strdup(tmp) : NULL;
    if (g_etcd_dir)
        setenv("TMPDIR", g_etcd_dir, 1);
    int started = mt_etcd_start(&g_etcd, 3);
    if (saved)
        setenv("TMPDIR", saved, 1);
    else
        unsetenv("TMPDIR");
    free(saved);
    if (started != 0) {
        fprintf(stderr, "cannot start etcd\n");
        return 1;
    }
    struct statfs sf;
    if (statfs(g_etcd.dir, &sf) == 0)
        snprintf(g_etcd_fs, sizeof(g_etcd_fs), "%s", sf.f_type == 0x01021994 /* TMPFS_MAGIC */
                                                         ? "tmpfs" : "disk");
    if (!strcmp(phase, "all") || !strcmp(phase, "throughput"))
        throughput();
    if (!strcmp(phase, "all") || !strcmp(phase, "failover")) {
        for (size_t i = 0; i < n_ttls; i++)
            failover(ttl_s[i]);
    }
    mt_etcd_stop(&g_etcd);
    if (!getenv("MC_KEEP_TEST_DIRS"))
        mt_rmdir(g_dir);
    return 0;
}
