/* mc_store_bench: store put/get throughput and latency, with peers measured in the same run.
 *
 * Starts its own mooncake_master and one mooncake_client storage server (binaries next to this
 * program), then for each value size runs single and batched put/get from --threads client
 * threads of one store handle, with data either
 * served same-host (shm, the default between local processes) or forced over TCP
 * (MC_FORCE_TCP=1 for every process). One JSON line per measurement:
 *   {"bench":"store","op":"get","value":4096,"batch":128,"threads":1,
 *    "transport":"tcp","req_s":...,"gib_s":...,"p50_us":...,"p99_us":...}
 * --peers adds redis-benchmark (4 KiB, -P 1 and -P 16; -c 1 for latency) and memcached
 * 32 MiB GET (with --transport=shm also Redis -P 16 over its unix socket, the same-host peer
 * of the 4 KiB batches: store_ratios_unix line, and a second store_paired line for 4k128),
 * and prints the ratios the store issue asks for: once against peers measured after
 * the whole run (store_ratios), and once bracketed: each target's peer measured right before
 * its case's puts and right after its last get round (store_paired lines,
 * store_ratios_paired). After a case's get rounds, a second client handle that never saw the
 * keys reads them once ("get_other": no replica hint, no lease, so lookup then read, as a
 * decode instance reading a prefill instance's blocks; other_* ratios), and a third handle
 * subscribed to the master's placement feed (placement_feed_prefix, docs/internals/
 * store-client.md) reads them once too ("get_fed": the placements and read leases were pushed
 * to it as the keys were put; fed_* ratios). The 32 MiB case then
 * also alternates store gets with memcached GETs one by one (store_interleaved line,
 * interleaved_vs_memcached).
 * The store's 32 MiB gets read --ops_big distinct objects (more than the
 * CPU caches hold), so memcached is measured the same way (8 distinct keys, 256 MiB) and, for
 * reference, on one key read over and over.
 * --getpath runs the get-path shapes instead (store_getpath.h: 4k128, 4m64, 32m1, 4m32x8, the
 * store next to the raw Transfer Engine in the same run; "bench":"getpath" lines).
 * --tenant_token: the store clients hold a tenant token, so every read and write goes through
 * the data grants the master signs (docs/security.md, "Data ports and tenants"); the master and
 * the storage server hold a file with a cluster line and that tenant's line, the raw engine of
 * --getpath the cluster token. */
#include "common/alloc.h"
#include "common/config.h"
#include "common/log.h"
#include "common/net.h"
#include "common/time.h"
#include "mooncake/store.h"
#include "peers.h"
#include "store_getpath.h"
#include "store_knobs.h"
#include "support/test_util.h"
#include "bench_stats.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct bench_cfg {
    const char *master;
    uint64_t value;
    uint32_t batch;
    uint32_t threads;
    uint64_t ops;          /* values per thread per phase */
    const char *transport;
    uint32_t run_id;
    uint32_t get_rounds;   /* get phases over the same keys (bench_case: cold and warm) */
    /* measured before and after the case, NULL = none; [1]: the same-host peer of shm runs */
    const struct paired_peer *peer[2];
} bench_cfg_t;

/* A peer measured right before a case (before its puts) and right after its last get round,
 * compared with the mean of the two: both sides of a ratio then see the machine within seconds
 * of each other (this VM's speed drifts by 1.5x between minutes). Not between rounds: a round
 * that follows an idle gap or another process's pass over hundreds of MB runs up to 1.6x
 * slower here (32 MiB gets: 3.8 -> 2.4 GiB/s after a memcached run, 3.0 after a 3 s sleep),
 * so pairing per round would measure that; the case's put phase absorbs it instead.
 * metric: what is compared, from the store's round and from the peer. */
typedef enum { M_P50_US, M_REQ_S, M_GIB_S } metric_t;
typedef struct paired_peer {
    const char *name;     /* peer label in the JSON lines */
    metric_t metric;
    double (*measure)(void); /* the peer's figure for metric; 0 = failed */
} paired_peer_t;

static double peer_redis_c1_p50(void)
{
    mc_peer_result_t set, get;
    mc_peer_redis_benchmark(4096, 1, 5000, 1, &set, &get);
    return get.ok ? get.p50_us : 0;
}

static double peer_redis_p16_req_s(void)
{
    mc_peer_result_t set, get;
    mc_peer_redis_benchmark(4096, 50, 200000, 16, &set, &get);
    return get.ok ? get.req_s : 0;
}

/* Redis at its own best same-host transport, the peer of the shm path. */
static double peer_redis_unix_p16_req_s(void)
{
    mc_peer_result_t set, get;
    mc_peer_redis_benchmark_via(MC_PEER_REDIS_UNIX, 4096, 50, 200000, 16, &set, &get);
    return get.ok ? get.req_s : 0;
}

static double peer_memcached_8keys_gib_s(void)
{
    mc_peer_result_t get;
    mc_peer_memcached(32u << 20, 8, 24, &get, NULL);
    return get.ok ? get.gib_s : 0;
}

static const paired_peer_t PEER_REDIS_C1 = {"redis_get_c1_p50_us", M_P50_US, peer_redis_c1_p50};
static const paired_peer_t PEER_REDIS_P16 = {"redis_get_p16_req_s", M_REQ_S, peer_redis_p16_req_s};
static const paired_peer_t PEER_REDIS_UNIX_P16 = {"redis_unix_get_p16_req_s", M_REQ_S,
                                                  peer_redis_unix_p16_req_s};
static const paired_peer_t PEER_MEMCACHED = {"memcached_get_8keys_gib_s", M_GIB_S,
                                             peer_memcached_8keys_gib_s};

/* A round's figure for metric m (req_s and p50 of the round, value size in bytes). */
static double metric_figure(metric_t m, double req_s, double p50_us, uint64_t value)
{
    if (m == M_P50_US)
        return p50_us;
    return m == M_REQ_S ? req_s : req_s * (double)value / (1024.0 * 1024 * 1024);
}

/* How many times better the store's figure is than the peer's (latency: peer / store). */
static double paired_ratio(metric_t m, double store, double peer)
{
    if (store <= 0 || peer <= 0)
        return 0;
    return m == M_P50_US ? peer / store : store / peer;
}

typedef struct thread_res {
    uint64_t *lat_us;      /* one per call */
    size_t n_lat;
    uint64_t done, errors;
} thread_res_t;

typedef struct thread_arg {
    mc_store_t *store;
    char *buf;             /* batch * value bytes, this thread's for the whole case */
    const bench_cfg_t *cfg;
    uint32_t tid;
    int get;               /* 0 put, 1 get */
    thread_res_t res;
    pthread_barrier_t *barrier;
} thread_arg_t;

/* The key of value i of call k of thread tid in case c (out: 64 bytes). */
static void bench_key(char out[64], const bench_cfg_t *c, uint32_t tid, size_t k, uint32_t i)
{
    snprintf(out, 64, "bench-%u-%llu-%u-%zu-%u", c->run_id, (unsigned long long)c->value, tid,
             k, i);
}

static void *bench_thread(void *p)
{
    thread_arg_t *a = p;
    const bench_cfg_t *c = a->cfg;
    uint32_t b = c->batch;
    size_t calls = (size_t)((c->ops + b - 1) / b);
    char *buf = a->buf;
    char (*names)[64] = mc_calloc(b, sizeof(*names));
    const char **keys = mc_calloc(b, sizeof(*keys));
    struct iovec *iov = mc_calloc(b, sizeof(*iov));
    const struct iovec **piov = mc_calloc(b, sizeof(*piov));
    size_t *np = mc_calloc(b, sizeof(*np));
    int32_t *res = mc_calloc(b, sizeof(*res));
    int64_t *got = mc_calloc(b, sizeof(*got));
    a->res.lat_us = mc_calloc(calls, sizeof(uint64_t));
    for (uint32_t i = 0; i < b; i++) {
        iov[i] = (struct iovec){buf + (size_t)i * c->value, c->value};
        piov[i] = &iov[i];
        np[i] = 1;
        memset(iov[i].iov_base, (int)(i + 1), c->value);
    }
    pthread_barrier_wait(a->barrier);
    for (size_t k = 0; k < calls; k++) {
        for (uint32_t i = 0; i < b; i++) {
            bench_key(names[i], c, a->tid, k, i);
            keys[i] = names[i];
        }
        uint64_t t = mc_now_ns();
        if (b == 1 && !a->get) {
            a->res.errors += mc_store_put(a->store, keys[0], iov, 1, NULL) != MC_OK;
        } else if (b == 1) {
            a->res.errors += mc_store_get_into(a->store, keys[0], iov, 1) != (int64_t)c->value;
        } else if (!a->get) {
            mc_store_batch_put(a->store, b, keys, piov, np, NULL, false, res);
            for (uint32_t i = 0; i < b; i++)
                a->res.errors += res[i] != MC_OK;
        } else {
            mc_store_batch_get_into(a->store, b, keys, piov, np, got);
            for (uint32_t i = 0; i < b; i++)
                a->res.errors += got[i] != (int64_t)c->value;
        }
        a->res.lat_us[a->res.n_lat++] = (mc_now_ns() - t) / 1000;
        a->res.done += b;
    }
    mc_free(names);
    mc_free(keys);
    mc_free(iov);
    mc_free(piov);
    mc_free(np);
    mc_free(res);
    mc_free(got);
    return NULL;
}

/* Runs one put phase then one get phase over the same keys; prints two JSON lines. Returns
 * the get req/s (for ratios). */
/* A case's gets: round 1 (cold: the client holds no read lease yet, every get asks the
 * master) and the median of the later rounds (warm: gets read under the leases round 1 took,
 * docs/internals/store-client.md "Lease cache"); warm = cold with one round. other: the one
 * round of another client that never saw the keys (no hints, no leases). fed: the one round of
 * a client that never read them either but follows the placement feed. */
typedef struct get_figure {
    double req_s, p50_us;
    uint64_t errors;
    double store[2]; /* in the metric of the case's peer[p] (metric_figure) */
    double pair[2];  /* vs the mean of peer[p] before and after (paired_ratio; 0 = none) */
} get_figure_t;

typedef struct get_result {
    get_figure_t cold, warm, other, fed;
} get_result_t;

static uint64_t feed_placements(mc_store_t *s)
{
    mc_store_read_stats_t st;
    mc_store_read_stats(s, &st);
    return st.feed_placements;
}

/* Puts the case's keys through store, reads them c->get_rounds times through store, then once
 * through other and once through fed (each NULL: not). */
static void bench_case(mc_store_t *store, mc_store_t *other, mc_store_t *fed,
                       const bench_cfg_t *c, get_result_t *out)
{
    uint32_t rounds = c->get_rounds ? c->get_rounds : 1;
    double *rs = mc_calloc(rounds, sizeof(double)), *p50s = mc_calloc(rounds, sizeof(double));
    /* Buffers live for the whole case, as an engine's registered buffers do: a fresh mapping
     * per phase made the first 32 MiB get of every phase several times slower (first use of
     * fresh pages on this VM), which is not what a long-running client sees. */
    size_t buf_len = (size_t)c->batch * c->value;
    char **bufs = mc_calloc(c->threads, sizeof(*bufs));
    for (uint32_t t = 0; t < c->threads; t++)
        bufs[t] = mc_pages_alloc(buf_len, 1);
    *out = (get_result_t){0};
    double peer_before[2] = {0, 0};
    /* before: in the reverse order of after (ABBA), so that neither peer is always the one
     * measured next to the other's server shutdown or the warm-up (Redis over its unix socket
     * measured right after the tcp one, before the first case, read 415-551 k req/s in three
     * runs of four against 680-770 k everywhere else) */
    for (int p = 1; p >= 0; p--)
        peer_before[p] = c->peer[p] ? c->peer[p]->measure() : 0;
    uint64_t fed_before = fed ? feed_placements(fed) : 0;
    uint64_t writer_errors = 0; /* over the writer's get rounds: any error voids cold and warm */
    uint64_t keys = (uint64_t)c->threads * ((c->ops + c->batch - 1) / c->batch) * c->batch;
    for (uint32_t phase = 0; phase <= rounds + (other != NULL) + (fed != NULL); phase++) {
        int get = phase > 0;
        /* after the rounds: other's round (if any), then fed's (if any) */
        bool by_other = other && phase == rounds + 1;
        bool by_fed = fed && phase == rounds + 1 + (other != NULL);
        mc_store_t *client = by_other ? other : by_fed ? fed : store;
        if (by_fed) { /* the feed answers within ms of a put; bounded wait, counted below */
            uint64_t end = mc_now_ms() + 5000;
            while (feed_placements(fed) - fed_before < keys && mc_now_ms() < end)
                mc_sleep_ms(1);
        }
        thread_arg_t *args = mc_calloc(c->threads, sizeof(*args));
        pthread_t *tids = mc_calloc(c->threads, sizeof(*tids));
        pthread_barrier_t barrier;
        pthread_barrier_init(&barrier, NULL, c->threads + 1);
        for (uint32_t t = 0; t < c->threads; t++) {
            args[t] = (thread_arg_t){.store = client, .buf = bufs[t], .cfg = c, .tid = t,
                                     .get = get, .barrier = &barrier};
            pthread_create(&tids[t], NULL, bench_thread, &args[t]);
        }
        mc_store_read_stats_t rs0, rs1;
        mc_store_read_stats(client, &rs0);
        pthread_barrier_wait(&barrier);
        uint64_t t0 = mc_now_ns();
        for (uint32_t t = 0; t < c->threads; t++)
            pthread_join(tids[t], NULL);
        double secs = (double)(mc_now_ns() - t0) / 1e9;
        mc_store_read_stats(client, &rs1);
        size_t n_lat = 0;
        uint64_t done = 0, errors = 0;
        for (uint32_t t = 0; t < c->threads; t++) {
            n_lat += args[t].res.n_lat;
            done += args[t].res.done;
            errors += args[t].res.errors;
        }
        uint64_t *lat = mc_calloc(n_lat ? n_lat : 1, sizeof(uint64_t));
        size_t k = 0;
        for (uint32_t t = 0; t < c->threads; t++) {
            memcpy(lat + k, args[t].res.lat_us, args[t].res.n_lat * sizeof(uint64_t));
            k += args[t].res.n_lat;
            mc_free(args[t].res.lat_us);
        }
        qsort(lat, n_lat, sizeof(uint64_t), mc_bench_cmp_u64);
        double p50 = n_lat ? (double)lat[n_lat / 2] : 0;
        double p99 = n_lat ? (double)lat[(size_t)((double)(n_lat - 1) * 0.99)] : 0;
        /* only what succeeded counts; a round with errors is not compared with a peer */
        double req_s = (double)(done - errors) / secs;
        double gib_s = req_s * (double)c->value / (1024.0 * 1024 * 1024);
        char date[32];
        mc_peer_date(date, sizeof(date));
        const char *op = by_other ? "get_other" : by_fed ? "get_fed" : get ? "get" : "put";
        printf("{\"bench\":\"store\",\"op\":\"%s\",\"round\":%u,\"value\":%llu,\"batch\":%u,"
               "\"threads\":%u,\"transport\":\"%s\",\"ops\":%llu,\"errors\":%llu,\"req_s\":%.0f,"
               "\"gib_s\":%.3f,\"p50_us\":%.0f,\"p99_us\":%.0f,\"master_lookups\":%llu,"
               "\"lease_hits\":%llu,\"speculative_hits\":%llu,\"feed_placements\":%llu,"
               "\"date\":\"%s\"}\n",
               op, phase, (unsigned long long)c->value, c->batch, c->threads,
               c->transport, (unsigned long long)done, (unsigned long long)errors, req_s, gib_s,
               p50, p99, (unsigned long long)(rs1.master_lookups - rs0.master_lookups),
               (unsigned long long)(rs1.lease_hits - rs0.lease_hits),
               (unsigned long long)(rs1.speculative_hits - rs0.speculative_hits),
               (unsigned long long)(by_fed ? rs1.feed_placements - fed_before : 0), date);
        fflush(stdout);
        if (by_other || by_fed) {
            get_figure_t *f = by_other ? &out->other : &out->fed;
            f->req_s = req_s;
            f->p50_us = p50;
            f->errors = errors;
        } else if (get) {
            writer_errors += errors;
            rs[phase - 1] = req_s;
            p50s[phase - 1] = p50;
        }
        mc_free(lat);
        mc_free(args);
        mc_free(tids);
        pthread_barrier_destroy(&barrier);
    }
    out->cold.req_s = rs[0];
    out->cold.p50_us = p50s[0];
    out->cold.errors = out->warm.errors = writer_errors;
    uint32_t later = rounds > 1 ? rounds - 1 : 1, first = rounds > 1 ? 1 : 0;
    qsort(rs + first, later, sizeof(double), mc_bench_cmp_double);
    qsort(p50s + first, later, sizeof(double), mc_bench_cmp_double);
    out->warm.req_s = rs[first + later / 2];
    out->warm.p50_us = p50s[first + later / 2];
    for (int p = 0; p < 2; p++) {
        const paired_peer_t *pp = c->peer[p];
        if (!pp)
            continue;
        double peer_after = pp->measure();
        double peer = mc_bench_mean2(peer_before[p], peer_after);
        get_figure_t *figs[] = {&out->cold, &out->warm, &out->other, &out->fed}; /* 0 if none */
        for (size_t f = 0; f < MC_ARRAY_LEN(figs); f++) {
            figs[f]->store[p] = metric_figure(pp->metric, figs[f]->req_s, figs[f]->p50_us,
                                              c->value);
            figs[f]->pair[p] =
                figs[f]->errors ? 0 : paired_ratio(pp->metric, figs[f]->store[p], peer);
        }
        char date[32];
        mc_peer_date(date, sizeof(date));
        printf("{\"bench\":\"store_paired\",\"value\":%llu,\"batch\":%u,\"threads\":%u,"
               "\"transport\":\"%s\",\"peer\":\"%s\",\"peer_before\":%.3f,"
               "\"peer_after\":%.3f,\"cold_store\":%.3f,\"warm_store\":%.3f,"
               "\"other_store\":%.3f,\"fed_store\":%.3f,\"cold_ratio\":%.2f,"
               "\"warm_ratio\":%.2f,\"other_ratio\":%.2f,\"fed_ratio\":%.2f,\"date\":\"%s\"}\n",
               (unsigned long long)c->value, c->batch, c->threads, c->transport, pp->name,
               peer_before[p], peer_after, out->cold.store[p], out->warm.store[p],
               out->other.store[p], out->fed.store[p], out->cold.pair[p], out->warm.pair[p],
               out->other.pair[p], out->fed.pair[p], date);
        fflush(stdout);
    }
    mc_free(rs);
    mc_free(p50s);
    for (uint32_t t = 0; t < c->threads; t++)
        mc_pages_free(bufs[t], buf_len);
    mc_free(bufs);
}

/* The 32 MiB target measured a second way: `pairs` store gets (keys of the case just run, in
 * turn, through `store`) interleaved one by one with memcached GETs (8 keys, as
 * PEER_MEMCACHED), the order flipped every pair, so that both sides of every ratio see the
 * same seconds of this VM, whose speed drifts and dips between and within rounds. Prints one
 * JSON line: each side's median GiB/s and the quartiles of the per-pair ratio (memcached
 * time / store time; above 1: the store is faster). Returns the median ratio (0 on failure). */
static double interleaved_vs_memcached(mc_store_t *store, const bench_cfg_t *c, uint32_t pairs)
{
    mc_peer_memcached_t *m = NULL;
    char err[160];
    if (mc_peer_memcached_start(c->value, 8, &m, err, sizeof(err)) != MC_OK) {
        fprintf(stderr, "mc_store_bench: interleaved round skipped: %s\n", err);
        return 0;
    }
    char *buf = mc_pages_alloc(c->value, 1);
    double *ts = mc_calloc(pairs, sizeof(double)), *tm = mc_calloc(pairs, sizeof(double));
    double *ratio = mc_calloc(pairs, sizeof(double));
    uint64_t errors = 0;
    uint32_t n = 0;
    for (uint32_t i = 0; buf && ts && tm && ratio && i < pairs; i++) {
        char key[64];
        bench_key(key, c, 0, (size_t)(i % c->ops), 0); /* thread 0's keys, one per call */
        struct iovec iov = {buf, c->value};
        bool ok = true;
        for (int side = 0; side < 2; side++) {
            if ((side + i) % 2 == 0) { /* store first on even pairs */
                uint64_t t0 = mc_now_ns();
                ok &= mc_store_get_into(store, key, &iov, 1) == (int64_t)c->value;
                ts[n] = (double)(mc_now_ns() - t0) / 1e9;
            } else {
                ok &= mc_peer_memcached_get(m, i, &tm[n]) == MC_OK;
            }
        }
        if (!ok) {
            errors++;
            continue;
        }
        ratio[n] = tm[n] / ts[n];
        n++;
    }
    double med = 0;
    if (n > 0) {
        qsort(ts, n, sizeof(double), mc_bench_cmp_double);
        qsort(tm, n, sizeof(double), mc_bench_cmp_double);
        qsort(ratio, n, sizeof(double), mc_bench_cmp_double);
        double gib = (double)c->value / (1024.0 * 1024 * 1024);
        char date[32];
        mc_peer_date(date, sizeof(date));
        med = ratio[n / 2];
        printf("{\"bench\":\"store_interleaved\",\"value\":%llu,\"transport\":\"%s\","
               "\"peer\":\"memcached_get_8keys\",\"pairs\":%u,\"errors\":%llu,"
               "\"store_gib_s\":%.3f,\"peer_gib_s\":%.3f,\"ratio_p25\":%.2f,"
               "\"ratio_median\":%.2f,\"ratio_p75\":%.2f,\"date\":\"%s\"}\n",
               (unsigned long long)c->value, c->transport, n, (unsigned long long)errors,
               gib / ts[n / 2], gib / tm[n / 2], ratio[n / 4], med, ratio[(3 * n) / 4], date);
        fflush(stdout);
    }
    mc_free(ratio);
    mc_free(tm);
    mc_free(ts);
    if (buf)
        mc_pages_free(buf, c->value);
    mc_peer_memcached_stop(m);
    return errors ? 0 : med;
}

static char work_dir[256];
static pid_t master_pid = -1, server_pid = -1;

/* --tenant_token: the token files, in work_dir (mode 0600, as mc_auth_load requires) */
#define BENCH_CLUSTER_SECRET "mc-store-bench-cluster-secret-0123456789"
#define BENCH_TENANT_SECRET "mc-store-bench-tenant-secret-0123456789"
static char srv_token[300], tenant_token[300], cluster_token[300];

static int write_token(char *path, size_t len, const char *name, const char *text)
{
    snprintf(path, len, "%s/%s", work_dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int rc = chmod(path, 0600) == 0 && fputs(text, f) >= 0 ? 0 : -1;
    return fclose(f) == 0 ? rc : -1;
}

static void stop_cluster(void)
{
    mt_stop(server_pid, SIGTERM, 5000);
    mt_stop(master_pid, SIGTERM, 5000);
    server_pid = master_pid = -1;
    if (work_dir[0])
        mt_rmdir(work_dir);
    work_dir[0] = '\0';
}

/* Master + one storage server on loopback; returns the master address in addr.
 * master_flag: one extra master flag ("" for none). tenant: with token files (--tenant_token). */
static int start_cluster(uint64_t segment, const char *master_flag, bool tenant, char *addr,
                         size_t len)
{
    uint16_t port;
    if (mt_tmpdir(work_dir, sizeof(work_dir)) != 0 || mc_net_free_port(&port) != MC_OK)
        return -1;
    char bin[512], p[32], wal[300], log[300], m[96], seg[64], tok[340];
    if (tenant &&
        (write_token(srv_token, sizeof(srv_token), "server.token",
                     BENCH_CLUSTER_SECRET "\n" BENCH_TENANT_SECRET " tenant=bench\n") != 0 ||
         write_token(tenant_token, sizeof(tenant_token), "tenant.token",
                     BENCH_TENANT_SECRET " tenant=bench\n") != 0 ||
         write_token(cluster_token, sizeof(cluster_token), "cluster.token",
                     BENCH_CLUSTER_SECRET "\n") != 0))
        return -1;
    snprintf(tok, sizeof(tok), "--auth_token_file=%s", srv_token);
    mt_bin_path("mooncake_master", bin, sizeof(bin));
    snprintf(p, sizeof(p), "--port=%u", port);
    snprintf(wal, sizeof(wal), "--wal_dir=%s/wal", work_dir);
    snprintf(log, sizeof(log), "%s/master.log", work_dir);
    char *margv[] = {bin, p, "--metrics_port=0", wal, "--log_level=warn",
                     tenant ? tok : NULL, *master_flag ? (char *)master_flag : NULL, NULL};
    if (!tenant) { /* no hole in argv */
        margv[5] = margv[6];
        margv[6] = NULL;
    }
    master_pid = mt_spawn(margv, log);
    if (master_pid < 0 || mt_wait_log(log, "listening", 10000) != 0)
        return -1;
    snprintf(addr, len, "127.0.0.1:%u", port);
    mt_bin_path("mooncake_client", bin, sizeof(bin));
    snprintf(m, sizeof(m), "--master_server_address=%s", addr);
    snprintf(seg, sizeof(seg), "--global_segment_size=%llu", (unsigned long long)segment);
    snprintf(log, sizeof(log), "%s/server.log", work_dir);
    char *sargv[] = {bin, m, seg, "--log_level=warn", NULL};
    if (tenant) /* the storage server's token (te_env); ours were read already */
        setenv("MC_AUTH_TOKEN_FILE", srv_token, 1);
    server_pid = mt_spawn(sargv, log);
    if (tenant)
        unsetenv("MC_AUTH_TOKEN_FILE");
    if (server_pid < 0 || mt_wait_log(log, "mooncake_client ready", 30000) != 0)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    const char *transport = "shm", *master_flag = "";
    int64_t threads = 1, ops_small = 20000, ops_mid = 2000, ops_big = 30, get_rounds = 1;
    const char *only = "";
    uint64_t segment = 1280ull << 20;
    bool peers = false, feed = true, getpath = false, tenant = false;
    int64_t getpath_reps = 3;
    mc_tool_store_knobs_t knobs; /* --replica_hints, --lease_cache, --placement_feed, MC_TE_* */
    mc_tool_store_knobs_init(&knobs);
    mc_option_t opts[] = {
        {"transport", MC_OPT_STRING, &transport, NULL, "shm (same-host path) or tcp (MC_FORCE_TCP=1)", 0, 0},
        {"threads", MC_OPT_INT, &threads, NULL, "client threads", 1, 64},
        {"ops_small", MC_OPT_INT, &ops_small, NULL, "4 KiB values per thread per phase", 1, 100000000},
        {"ops_mid", MC_OPT_INT, &ops_mid, NULL, "512 KiB values per thread per phase", 1, 10000000},
        {"ops_big", MC_OPT_INT, &ops_big, NULL, "32 MiB values per thread per phase", 1, 100000},
        {"segment", MC_OPT_SIZE, &segment, NULL, "storage server segment size", 1 << 20, 1ull << 40},
        {"master_flag", MC_OPT_STRING, &master_flag, NULL, "one extra mooncake_master flag, e.g. --wal_fsync=false", 0, 0},
        {"get_rounds", MC_OPT_INT, &get_rounds, NULL, "get phases per case: round 1 is cold (no read leases yet), ratios use the median of the others (warm) and round 1 (cold_*)", 1, 1000},
        {"cases", MC_OPT_STRING, &only, NULL, "comma list of cases to run (4k1,4k128,512k1,512k16,32m1); empty = all", 0, 0},
        {"peers", MC_OPT_BOOL, &peers, NULL, "also measure Redis and memcached, print ratios", 0, 0},
        {"getpath", MC_OPT_BOOL, &getpath, NULL, "run the get-path shapes (" MC_GETPATH_SHAPES ") next to the raw Transfer Engine instead of the cases; --cases picks shapes, --get_rounds = 1 cold + warm rounds; default segment 1.5 GiB", 0, 0},
        {"getpath_reps", MC_OPT_INT, &getpath_reps, NULL, "--getpath: repetitions per shape on fresh keys (medians reported)", 1, 64},
        {"feed", MC_OPT_BOOL, &feed, NULL, "also read each case's keys once through a client on the placement feed (get_fed; --getpath: first_fed)", 0, 0},
        {"tenant_token", MC_OPT_BOOL, &tenant, NULL, "store clients hold a tenant token: every transfer goes through data grants (the master and storage server get a cluster + tenant token file, --getpath's raw engine the cluster token; ignores MC_AUTH_TOKEN_FILE)", 0, 0},
        MC_TOOL_STORE_KNOB_OPTIONS(&knobs),
    };
    mc_config_spec_t spec = {"mc_store_bench", "Store put/get benchmark with peers (JSON lines).",
                             opts, MC_ARRAY_LEN(opts)};
    int rc = mc_config_main(&spec, argc, argv);
    if (rc >= 0)
        return rc;
    bool same_host = strcmp(transport, "shm") == 0;
    if (strcmp(transport, "tcp") == 0)
        setenv("MC_FORCE_TCP", "1", 1); /* inherited by the storage server too */
    else if (strcmp(transport, "shm") != 0) {
        fprintf(stderr, "mc_store_bench: --transport must be shm or tcp\n");
        return 2;
    }
    char te_err[256];
    if (mc_tool_store_knobs_load(&knobs, te_err, sizeof(te_err)) != MC_OK) {
        fprintf(stderr, "%s: %s\n", spec.program, te_err);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    mc_log_set_level(MC_LOG_LEVEL_WARN);
    if (getpath && segment == 1280ull << 20) /* 8 threads x 128 MiB under the watermark */
        segment = 1536ull << 20;
    char addr[64];
    if (start_cluster(segment, master_flag, tenant, addr, sizeof(addr)) != 0) {
        fprintf(stderr, "mc_store_bench: cannot start master/storage server (see %s)\n", work_dir);
        stop_cluster();
        return 1;
    }
    { /* the page size the storage server's segment got (docs/operations.md, "Huge pages") */
        char date[32];
        mc_peer_date(date, sizeof(date));
        printf("{\"bench\":\"store_setup\",\"transport\":\"%s\",\"segment\":%llu,"
               "\"segment_page_kb\":%ld,\"tenant_token\":%s,\"date\":\"%s\"}\n",
               transport, (unsigned long long)segment,
               mt_mapping_page_kb(server_pid, 0, "mc-te-shareable"), tenant ? "true" : "false",
               date);
        fflush(stdout);
    }
    mc_store_config_t scfg = {.local_hostname = "127.0.0.1", .metadata_server = "P2PHANDSHAKE",
                              .protocol = "tcp", .master_server_addr = addr};
    mc_tool_store_knobs_fill(&knobs, &scfg);
    mc_te_config_t raw_te = knobs.te_tuning; /* --getpath's raw engine */
    if (tenant) {
        knobs.te_tuning.auth_token_file = tenant_token;
        raw_te.auth_token_file = cluster_token;
    }
    /* other: reads each case's keys once (get_other); fed: the same, following the
     * placement feed for every bench key (get_fed; --getpath: its first_fed round) */
    mc_store_t *store = NULL, *other = NULL, *fed = NULL;
    bool made = mc_store_create(&scfg, &store) == MC_OK &&
                mc_store_create(&scfg, &other) == MC_OK;
    if (made && feed) {
        mc_store_config_t fcfg = scfg;
        fcfg.placement_feed_prefix = getpath ? "gp-" : "bench-"; /* store_getpath.c's keys */
        made = mc_store_create(&fcfg, &fed) == MC_OK;
    }
    if (!made) {
        mc_store_destroy(other);
        mc_store_destroy(store);
        stop_cluster();
        return 1;
    }
    /* Warm-up: write the whole segment once through each client handle, then clear it. On
     * this VM the first touch of each page of a peer's mapping costs ~5 us (shadow paging:
     * 0.8 GB/s first write vs 20+ GB/s after), a one-time cost per mapping and page that a
     * long-running client pays once, and each handle has its own engine and mappings; the
     * figures below are steady state. The other handle's first put also allocates its hint
     * table (a few ms) here, not in a measured round. With --tenant_token, what a tenant-bound
     * handle puts stays allocated until its write grant has expired (about 34 s after the put;
     * security.md, "Space under grants"), so a cluster-token handle writes the segment (over
     * tcp: a tenant-bound client has no mapping of its own to warm) and each tenant-bound
     * handle puts one small value. */
    {
        size_t wl = 32u << 20;
        char *w = mc_pages_alloc(wl, 1);
        struct iovec wiov = {w, wl};
        mc_store_t *handles[3] = {store, other, fed}, *filler = NULL;
        if (tenant) {
            mc_te_config_t cte = knobs.te_tuning;
            cte.auth_token_file = cluster_token;
            mc_store_config_t ccfg = scfg;
            ccfg.te_tuning = &cte;
            ccfg.tenant_id = NULL;
            if (mc_store_create(&ccfg, &filler) != MC_OK)
                filler = NULL; /* no warm-up */
            for (int hnd = 0; hnd < 3 && handles[hnd]; hnd++) {
                char key[64];
                struct iovec small = {w, w ? 4096 : 0};
                snprintf(key, sizeof(key), "warmup-hints-%d", hnd);
                if (w)
                    mc_store_put(handles[hnd], key, &small, 1, NULL);
            }
            mc_store_remove_all(store, true);
            handles[0] = filler;
            handles[1] = handles[2] = NULL;
        }
        for (int hnd = 0; hnd < 3 && handles[hnd]; hnd++) {
            for (uint64_t k = 0; w && k + 1 < segment / wl; k++) {
                char key[64];
                snprintf(key, sizeof(key), "warmup-%d-%llu", hnd, (unsigned long long)k);
                mc_store_put(handles[hnd], key, &wiov, 1, NULL);
            }
            mc_store_remove_all(filler ? filler : store, true);
        }
        mc_store_destroy(filler);
        mc_pages_free(w, wl);
    }
    if (getpath) {
        mc_getpath_cfg_t gcfg = {.writer = store, .other = other, .fed = fed,
                                 .te_tuning = &raw_te,
                                 .transport = transport,
                                 .warm_rounds = get_rounds > 1 ? (uint32_t)get_rounds - 1 : 2,
                                 .cases = only, .reps = (uint32_t)getpath_reps,
                                 .master_addr = addr};
        int grc = mc_getpath_run(&gcfg);
        mc_store_destroy(fed);
        mc_store_destroy(other);
        mc_store_destroy(store);
        stop_cluster();
        return grc;
    }
    struct {
        const char *name;
        uint64_t value;
        uint32_t batch;
        int64_t ops;
        const paired_peer_t *peer; /* the target compares this case with this peer */
        const paired_peer_t *peer_shm; /* and on the same host also with this one */
    } cases[] = {
        {"4k1", 4096, 1, ops_small / 4, &PEER_REDIS_C1, NULL},
        {"4k128", 4096, 128, ops_small, &PEER_REDIS_P16, &PEER_REDIS_UNIX_P16},
        {"512k1", 512 * 1024, 1, ops_mid, NULL, NULL},
        {"512k16", 512 * 1024, 16, ops_mid, NULL, NULL},
        {"32m1", 32ull << 20, 1, ops_big, &PEER_MEMCACHED, NULL},
    };
    get_result_t small_single = {0}, small_batch = {0}, big = {0};
    double big_interleaved = 0; /* median per-pair ratio, interleaved_vs_memcached */
    for (size_t i = 0; i < MC_ARRAY_LEN(cases); i++) {
        if (*only && !mc_bench_list_has(only, cases[i].name))
            continue;
        /* the case's keys must fit under the master's eviction watermark (0.90): evicted keys
         * would turn gets into misses (and, before this cap, 2 threads x 30 x 32 MiB in the
         * default 1.25 GiB segment did) */
        uint64_t ops = (uint64_t)cases[i].ops;
        uint64_t fit = segment * 8 / 10 / ((uint64_t)threads * cases[i].value);
        fit -= fit % cases[i].batch;
        if (ops > fit) {
            fprintf(stderr, "mc_store_bench: case %s: %llu values per thread instead of %llu, "
                    "so that %lld threads' values fit in 80%% of the %llu-byte segment "
                    "(--segment)\n", cases[i].name, (unsigned long long)fit,
                    (unsigned long long)ops, (long long)threads, (unsigned long long)segment);
            ops = fit;
        }
        if (ops == 0)
            continue;
        bench_cfg_t c = {.master = addr, .value = cases[i].value, .batch = cases[i].batch,
                         .threads = (uint32_t)threads, .ops = ops,
                         .transport = transport, .run_id = (uint32_t)i,
                         .get_rounds = (uint32_t)get_rounds,
                         .peer = {peers ? cases[i].peer : NULL,
                                  peers && same_host ? cases[i].peer_shm : NULL}};
        get_result_t r = {0};
        bench_case(store, other, fed, &c, &r);
        if (c.value == 4096 && c.batch == 1)
            small_single = r;
        if (c.value == 4096 && c.batch > 1)
            small_batch = r;
        if (c.value == 32ull << 20) {
            big = r;
            if (peers)
                big_interleaved = interleaved_vs_memcached(store, &c, 2 * (uint32_t)c.ops);
        }
        mc_store_remove_all(store, true); /* keep the pool from filling between cases */
    }
    mc_store_destroy(fed);
    mc_store_destroy(other);
    mc_store_destroy(store);
    stop_cluster();

    if (peers) {
        mc_peer_result_t rset, rget, rset16, rget16, rset1, rget1, mget, mget1;
        mc_peer_redis_benchmark(4096, 50, 200000, 1, &rset, &rget);
        mc_peer_print_json(&rset);
        mc_peer_print_json(&rget);
        mc_peer_redis_benchmark(4096, 50, 400000, 16, &rset16, &rget16);
        mc_peer_print_json(&rset16);
        mc_peer_print_json(&rget16);
        mc_peer_redis_benchmark(4096, 1, 20000, 1, &rset1, &rget1);
        mc_peer_print_json(&rset1);
        mc_peer_print_json(&rget1);
        mc_peer_memcached(32u << 20, 8, 24, &mget, NULL);
        mc_peer_print_json(&mget);
        mc_peer_memcached(32u << 20, 1, 20, &mget1, NULL);
        mc_peer_print_json(&mget1);
        double redis_lat_us = mc_bench_ratio(1e6, rget1.req_s);
        double gib = 1024.0 * 1024 * 1024 / (32u << 20); /* 32 MiB gets per GiB */
        /* ratios of the warm rounds, then of the cold round (bench_case) */
        printf("{\"bench\":\"store_ratios\",\"transport\":\"%s\",\"threads\":%lld,"
               "\"get4k_batch_vs_redis_p16\":%.2f,\"get4k_single_p50_us\":%.0f,"
               "\"redis_single_client_us\":%.0f,\"redis_single_client_p50_us\":%.0f,"
               "\"get32m_vs_memcached\":%.2f,\"get32m_vs_memcached_1key\":%.2f,"
               "\"cold_get4k_batch_vs_redis_p16\":%.2f,\"cold_get4k_single_p50_us\":%.0f,"
               "\"cold_get32m_vs_memcached\":%.2f}\n",
               transport, (long long)threads,
               mc_bench_ratio(small_batch.warm.req_s, rget16.req_s), small_single.warm.p50_us,
               redis_lat_us, rget1.p50_us, mc_bench_ratio(big.warm.req_s / gib, mget.gib_s),
               mc_bench_ratio(big.warm.req_s / gib, mget1.gib_s),
               mc_bench_ratio(small_batch.cold.req_s, rget16.req_s), small_single.cold.p50_us,
               mc_bench_ratio(big.cold.req_s / gib, mget.gib_s));
        /* the same targets against each case's bracketing peer (store_paired lines): latency
         * as Redis p50 / store p50, throughput as store / peer */
        printf("{\"bench\":\"store_ratios_paired\",\"transport\":\"%s\",\"threads\":%lld,"
               "\"get4k_single_vs_redis_c1_p50\":%.2f,\"get4k_batch_vs_redis_p16\":%.2f,"
               "\"get32m_vs_memcached\":%.2f,\"cold_get4k_single_vs_redis_c1_p50\":%.2f,"
               "\"cold_get4k_batch_vs_redis_p16\":%.2f,\"cold_get32m_vs_memcached\":%.2f,"
               "\"other_get4k_single_vs_redis_c1_p50\":%.2f,"
               "\"other_get4k_batch_vs_redis_p16\":%.2f,\"other_get32m_vs_memcached\":%.2f,"
               "\"fed_get4k_single_vs_redis_c1_p50\":%.2f,"
               "\"fed_get4k_batch_vs_redis_p16\":%.2f,\"fed_get32m_vs_memcached\":%.2f,"
               "\"interleaved_get32m_vs_memcached\":%.2f}\n",
               transport, (long long)threads, small_single.warm.pair[0],
               small_batch.warm.pair[0],
               big.warm.pair[0], small_single.cold.pair[0], small_batch.cold.pair[0],
               big.cold.pair[0], small_single.other.pair[0], small_batch.other.pair[0],
               big.other.pair[0], small_single.fed.pair[0], small_batch.fed.pair[0],
               big.fed.pair[0], big_interleaved);
    }
    if (peers && same_host) {
        /* the same-host batch against Redis at its best same-host transport (unix socket):
         * after the run, then bracketed (the 4k128 case's store_paired line of that peer) */
        mc_peer_result_t uset, uget;
        mc_peer_redis_benchmark_via(MC_PEER_REDIS_UNIX, 4096, 50, 400000, 16, &uset, &uget);
        mc_peer_print_json(&uset);
        mc_peer_print_json(&uget);
        printf("{\"bench\":\"store_ratios_unix\",\"transport\":\"%s\",\"threads\":%lld,"
               "\"get4k_batch_vs_redis_unix_p16\":%.2f,"
               "\"cold_get4k_batch_vs_redis_unix_p16\":%.2f,"
               "\"paired_get4k_batch_vs_redis_unix_p16\":%.2f,"
               "\"paired_cold_get4k_batch_vs_redis_unix_p16\":%.2f,"
               "\"paired_other_get4k_batch_vs_redis_unix_p16\":%.2f,"
               "\"paired_fed_get4k_batch_vs_redis_unix_p16\":%.2f}\n",
               transport, (long long)threads,
               mc_bench_ratio(small_batch.warm.req_s, uget.req_s),
               mc_bench_ratio(small_batch.cold.req_s, uget.req_s),
               small_batch.warm.pair[1], small_batch.cold.pair[1], small_batch.other.pair[1],
               small_batch.fed.pair[1]);
    }
    return 0;
}
