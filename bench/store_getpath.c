/* mc_store_bench --getpath (store_getpath.h): the store's gets on KV shapes next to the raw
 * Transfer Engine moving the same bytes between the same processes, in the same run.
 *
 * Per shape: the writer puts threads x calls batches of `batch` values; the bench asks the
 * master where each key's replica is (mc_store_replica_desc) and builds, per thread and call,
 * the engine requests that read exactly those replicas into the same buffers. Rounds, each
 * reading every key once with `threads` threads: engine (warm-up: not in its figure, reported
 * apart as te_first_pass, its first read of the fresh keys' pages), engine (before), fed
 * client (if any: first read with the placement feed, under the leases the master pushed at
 * the puts; it waits, bounded, until the feed has delivered every key, and comes first so
 * those leases are seconds old), writer (cold: hints from its puts, no lease), writer x
 * warm_rounds (under the leases of the cold round), other client (first read: no hint, no
 * lease: lookup then read), engine (after). The engine's figure is the mean of before and
 * after, so both sides of a ratio see the machine within seconds of each other. That sequence is repeated `reps` times
 * on fresh keys; the line gives the medians of the figures and of the per-repetition ratios.
 * The raw engine is a second engine in this process with the store's tuning (same transport:
 * MC_FORCE_TCP reaches both). */
#include "store_getpath.h"
#include "bench_stats.h"

#include "common/alloc.h"
#include "common/net.h"
#include "common/time.h"
#include "peers.h"
#include "rpc/frame.h"
#include "rpc/opcodes.h"
#include "rpc/rpc_client.h"
#include "rpc/wire_key.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pthread.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct gp_shape {
    const char *name;
    uint64_t value;
    uint32_t batch, threads, calls; /* calls: batches per thread per round */
} gp_shape_t;

static const gp_shape_t SHAPES[] = {
    {"4k128", 4096, 128, 1, 160},        /* 20,480 small KV blocks */
    {"4m64", 4ull << 20, 64, 1, 3},      /* a 256 MiB prefix per call */
    {"32m1", 32ull << 20, 1, 1, 16},     /* one large object per call */
    {"4m32x8", 4ull << 20, 32, 8, 1},    /* 8 threads x 128 MiB */
};

/* Run only when named in --cases: larger batches of small blocks (a first read of them is
 * looked up in pipelined sub-batches, store-client.md); 4k128w: 3,072 blocks, within what a
 * tenant-bound client's grants cover at once (a storage server connection keeps 4,096 granted
 * ranges, security.md "Limits"; --tenant_token); 256k64: mid-sized KV blocks (one layer's
 * K and V of a 16-token block is 64 KiB to 1 MiB for common models), the sizes a same-host
 * read copies and hashes by chunks (transfer-engine.md, "Hashed reads"). */
static const gp_shape_t EXTRA_SHAPES[] = {
    {"4k512", 4096, 512, 1, 40},         /* 20,480 small KV blocks, 4x the batch */
    {"4k128w", 4096, 128, 1, 24},        /* 3,072 small KV blocks */
    {"256k64", 256u << 10, 64, 1, 20},   /* 1,280 mid-sized KV blocks, 16 MiB a call */
};

typedef enum { GP_TE, GP_STORE } gp_kind_t;

/* One thread's keys, buffer and engine requests for a shape. */
typedef struct gp_thread {
    const gp_shape_t *sh;
    char *buf;                 /* batch * value bytes, every call reads into it */
    char (*names)[64];         /* calls * batch */
    const char **keys;         /* calls * batch, into names */
    struct iovec *iov;         /* batch */
    const struct iovec **piov; /* batch */
    size_t *np;                /* batch */
    int64_t *got;              /* batch */
    mc_te_request_t *reqs;     /* calls * batch */
    /* per round */
    gp_kind_t kind;
    mc_store_t *store;
    mc_te_t *te;
    uint64_t errors;
    uint64_t cpu_ns; /* this thread's CPU time for its calls (CLOCK_THREAD_CPUTIME_ID) */
    uint64_t *call_ns; /* calls: each call's wall time in the last round */
    pthread_barrier_t *barrier;
} gp_thread_t;

bool mc_bench_list_has(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        p += len + (e != NULL);
    }
    return false;
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *gp_thread_main(void *p)
{
    gp_thread_t *t = p;
    const gp_shape_t *sh = t->sh;
    pthread_barrier_wait(t->barrier);
    uint64_t cpu0 = thread_cpu_ns();
    for (uint32_t k = 0; k < sh->calls; k++) {
        const char **keys = t->keys + (size_t)k * sh->batch;
        uint64_t t0 = mc_now_ns();
        if (t->kind == GP_TE) {
            t->errors += mc_te_transfer_sync(t->te, t->reqs + (size_t)k * sh->batch, sh->batch,
                                             NULL) != MC_OK;
            t->call_ns[k] = mc_now_ns() - t0;
            continue;
        }
        mc_store_batch_get_into(t->store, sh->batch, keys, t->piov, t->np, t->got);
        t->call_ns[k] = mc_now_ns() - t0;
        for (uint32_t i = 0; i < sh->batch; i++)
            t->errors += t->got[i] != (int64_t)sh->value;
    }
    t->cpu_ns = thread_cpu_ns() - cpu0;
    return NULL;
}

/* CPU microseconds per key of the last round's reading threads (their own CPU time only:
 * unlike req/s, it leaves out time the threads spent descheduled on a shared machine, though
 * not cache contention or steal time). */
static double gp_cpu_us_per_key(const gp_thread_t *ts, const gp_shape_t *sh)
{
    uint64_t ns = 0;
    for (uint32_t i = 0; i < sh->threads; i++)
        ns += ts[i].cpu_ns;
    return (double)ns / 1e3 / ((double)sh->threads * sh->calls * sh->batch);
}

/* The median wall time of one call (us) in the last round, over every thread's calls (on a
 * shared machine steadier than req/s, which a few descheduled calls drag down). */
static double gp_call_p50_us(const gp_thread_t *ts, const gp_shape_t *sh)
{
    size_t n = (size_t)sh->threads * sh->calls, j = 0;
    uint64_t *v = mc_calloc(n, sizeof(*v));
    if (!v)
        return 0;
    for (uint32_t i = 0; i < sh->threads; i++)
        for (uint32_t k = 0; k < sh->calls; k++)
            v[j++] = ts[i].call_ns[k];
    double p50 = mc_bench_pct_us(v, n, 0.5);
    mc_free(v);
    return p50;
}

/* One round over every key of the shape; returns req/s (0 if any read failed), *errors. */
static double gp_round(gp_thread_t *ts, const gp_shape_t *sh, gp_kind_t kind, mc_store_t *store,
                       mc_te_t *te, uint64_t *errors)
{
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, sh->threads + 1);
    pthread_t *tids = mc_calloc(sh->threads, sizeof(*tids));
    for (uint32_t i = 0; i < sh->threads; i++) {
        ts[i].kind = kind;
        ts[i].store = store;
        ts[i].te = te;
        ts[i].errors = 0;
        ts[i].barrier = &barrier;
        pthread_create(&tids[i], NULL, gp_thread_main, &ts[i]);
    }
    pthread_barrier_wait(&barrier);
    uint64_t t0 = mc_now_ns();
    for (uint32_t i = 0; i < sh->threads; i++)
        pthread_join(tids[i], NULL);
    double secs = (double)(mc_now_ns() - t0) / 1e9;
    pthread_barrier_destroy(&barrier);
    mc_free(tids);
    *errors = 0;
    for (uint32_t i = 0; i < sh->threads; i++)
        *errors += ts[i].errors;
    double keys = (double)sh->threads * sh->calls * sh->batch;
    return *errors ? 0 : keys / secs;
}

static void gp_thread_free(gp_thread_t *t)
{
    if (t->buf)
        mc_pages_free(t->buf, (size_t)t->sh->batch * t->sh->value);
    mc_free(t->names);
    mc_free(t->keys);
    mc_free(t->iov);
    mc_free(t->piov);
    mc_free(t->np);
    mc_free(t->got);
    mc_free(t->reqs);
    mc_free(t->call_ns);
}

/* Allocates thread tid's state and puts its keys (of repetition rep) through the writer. */
static int gp_thread_init(gp_thread_t *t, const gp_shape_t *sh, uint32_t rep, uint32_t tid,
                          mc_store_t *writer)
{
    size_t nk = (size_t)sh->calls * sh->batch;
    *t = (gp_thread_t){.sh = sh};
    t->buf = mc_pages_alloc((size_t)sh->batch * sh->value, 1);
    t->names = mc_calloc(nk, sizeof(*t->names));
    t->keys = mc_calloc(nk, sizeof(*t->keys));
    t->iov = mc_calloc(sh->batch, sizeof(*t->iov));
    t->piov = mc_calloc(sh->batch, sizeof(*t->piov));
    t->np = mc_calloc(sh->batch, sizeof(*t->np));
    t->got = mc_calloc(sh->batch, sizeof(*t->got));
    t->reqs = mc_calloc(nk, sizeof(*t->reqs));
    t->call_ns = mc_calloc(sh->calls, sizeof(*t->call_ns));
    if (!t->buf || !t->names || !t->keys || !t->iov || !t->piov || !t->np || !t->got || !t->reqs ||
        !t->call_ns)
        return 1;
    for (uint32_t i = 0; i < sh->batch; i++) {
        t->iov[i] = (struct iovec){t->buf + (size_t)i * sh->value, sh->value};
        t->piov[i] = &t->iov[i];
        t->np[i] = 1;
        memset(t->iov[i].iov_base, (int)(i + tid + 1), sh->value);
    }
    int32_t *res = mc_calloc(sh->batch, sizeof(*res));
    int rc = res ? 0 : 1;
    for (uint32_t k = 0; k < sh->calls && rc == 0; k++) {
        for (uint32_t i = 0; i < sh->batch; i++) {
            size_t j = (size_t)k * sh->batch + i;
            snprintf(t->names[j], sizeof(t->names[j]), "gp-%s-%u-%u-%u-%u", sh->name, rep, tid, k,
                     i);
            t->keys[j] = t->names[j];
        }
        mc_store_batch_put(writer, sh->batch, t->keys + (size_t)k * sh->batch, t->piov, t->np,
                           NULL, false, res);
        for (uint32_t i = 0; i < sh->batch; i++)
            rc |= res[i] != MC_OK;
    }
    mc_free(res);
    return rc;
}

/* The engine requests reading each key's first replica into its buffer slot. */
static int gp_thread_plan(gp_thread_t *t, mc_store_t *writer, mc_te_t *te)
{
    const gp_shape_t *sh = t->sh;
    for (size_t j = 0; j < (size_t)sh->calls * sh->batch; j++) {
        mc_replica_desc_t *d = NULL;
        size_t n = 0;
        mc_te_segment_t seg;
        if (mc_store_replica_desc(writer, t->keys[j], &d, &n) != MC_OK || n == 0 ||
            d[0].size != sh->value || mc_te_segment_open(te, d[0].endpoint, &seg) != MC_OK) {
            free(d);
            return 1;
        }
        t->reqs[j] = (mc_te_request_t){.opcode = MC_TE_READ,
                                       .local = t->iov[j % sh->batch].iov_base,
                                       .target = seg, .target_addr = d[0].addr,
                                       .length = sh->value};
        free(d);
    }
    return 0;
}


/* One repetition's figures (req/s; 0 = a round with errors; *_cpu: CPU us per key of the
 * reading threads). */
typedef struct gp_rep {
    double te, te_before, te_after, cold, warm, first, first_fed;
    double te_first_pass; /* the engine's warm-up: its first read of the fresh keys' pages */
    double te_cpu, warm_cpu, cpu_ratio; /* cpu_ratio: te_cpu / warm_cpu */
    double te_call_us, first_call_us, first_call_ratio; /* median call (us); te / first */
    uint64_t errors;
    uint64_t fed_lookups, fed_unpushed; /* the fed round's master lookups; keys not pushed */
    uint64_t cold_lookups;              /* the writer's cold round's master lookups */
} gp_rep_t;

static mc_store_read_stats_t gp_stats(mc_store_t *s)
{
    mc_store_read_stats_t st;
    mc_store_read_stats(s, &st);
    return st;
}

/* The fed client's round (cfg->fed): waits up to 5 s for the feed to deliver the placements of
 * the keys just put (fed_pushed0: feed_placements before the puts), then reads them once. */
static double gp_fed_round(const mc_getpath_cfg_t *cfg, gp_thread_t *ts, const gp_shape_t *sh,
                           uint64_t fed_pushed0, gp_rep_t *out)
{
    uint64_t nk = (uint64_t)sh->threads * sh->calls * sh->batch;
    uint64_t end = mc_now_ms() + 5000;
    while (gp_stats(cfg->fed).feed_placements - fed_pushed0 < nk && mc_now_ms() < end)
        mc_sleep_ms(1);
    mc_store_read_stats_t s0 = gp_stats(cfg->fed);
    uint64_t pushed = s0.feed_placements - fed_pushed0;
    out->fed_unpushed = pushed < nk ? nk - pushed : 0;
    uint64_t e;
    double rate = gp_round(ts, sh, GP_STORE, cfg->fed, NULL, &e);
    out->errors += e;
    out->fed_lookups = gp_stats(cfg->fed).master_lookups - s0.master_lookups;
    return rate;
}

/* One repetition of a shape on fresh keys (the other client never saw them). */
static int gp_rep_run(const mc_getpath_cfg_t *cfg, const gp_shape_t *sh, uint32_t rep,
                      mc_te_t *te, gp_rep_t *out)
{
    gp_thread_t *ts = mc_calloc(sh->threads, sizeof(*ts));
    uint32_t warm_n = cfg->warm_rounds ? cfg->warm_rounds : 1;
    double *warm = mc_calloc(warm_n, sizeof(double));
    double *warm_cpu = mc_calloc(warm_n, sizeof(double));
    int rc = ts && warm && warm_cpu ? 0 : 1;
    uint64_t fed_pushed0 = cfg->fed ? gp_stats(cfg->fed).feed_placements : 0;
    for (uint32_t i = 0; i < sh->threads && rc == 0; i++)
        rc = gp_thread_init(&ts[i], sh, rep, i, cfg->writer) ||
             gp_thread_plan(&ts[i], cfg->writer, te);
    *out = (gp_rep_t){0};
    if (rc == 0) {
        uint64_t e;
        /* warm-up: this engine's first touch */
        out->te_first_pass = gp_round(ts, sh, GP_TE, NULL, te, &e);
        out->errors += e;
        out->te_before = gp_round(ts, sh, GP_TE, NULL, te, &e);
        out->errors += e;
        double te_call_before = gp_call_p50_us(ts, sh);
        double te_cpu_before = gp_cpu_us_per_key(ts, sh);
        if (cfg->fed)
            out->first_fed = gp_fed_round(cfg, ts, sh, fed_pushed0, out);
        uint64_t lookups0 = gp_stats(cfg->writer).master_lookups;
        out->cold = gp_round(ts, sh, GP_STORE, cfg->writer, NULL, &e);
        out->errors += e;
        out->cold_lookups = gp_stats(cfg->writer).master_lookups - lookups0;
        for (uint32_t r = 0; r < warm_n; r++) {
            warm[r] = gp_round(ts, sh, GP_STORE, cfg->writer, NULL, &e);
            warm_cpu[r] = gp_cpu_us_per_key(ts, sh);
            out->errors += e;
        }
        out->first = gp_round(ts, sh, GP_STORE, cfg->other, NULL, &e);
        out->errors += e;
        out->first_call_us = gp_call_p50_us(ts, sh);
        out->te_after = gp_round(ts, sh, GP_TE, NULL, te, &e);
        out->errors += e;
        out->te_cpu = (te_cpu_before + gp_cpu_us_per_key(ts, sh)) / 2;
        out->te_call_us = (te_call_before + gp_call_p50_us(ts, sh)) / 2;
        out->first_call_ratio = mc_bench_ratio(out->te_call_us, out->first_call_us);
        qsort(warm, warm_n, sizeof(double), mc_bench_cmp_double);
        out->warm = warm[warm_n / 2];
        qsort(warm_cpu, warm_n, sizeof(double), mc_bench_cmp_double);
        out->warm_cpu = warm_cpu[warm_n / 2];
        out->cpu_ratio = mc_bench_ratio(out->te_cpu, out->warm_cpu);
        out->te = mc_bench_mean2(out->te_before, out->te_after);
    }
    for (uint32_t i = 0; ts && i < sh->threads; i++)
        gp_thread_free(&ts[i]);
    mc_free(ts);
    mc_free(warm);
    mc_free(warm_cpu);
    mc_store_remove_all(cfg->writer, true);
    return rc;
}

/* The median over n repetitions of the figure at byte offset off of gp_rep_t (a double), or of
 * the ratio of that figure to the engine's (ratio_to_te). */
static double gp_median(const gp_rep_t *reps, uint32_t n, size_t off, bool ratio_to_te)
{
    double v[64];
    for (uint32_t i = 0; i < n; i++) {
        double x = *(const double *)((const char *)&reps[i] + off);
        v[i] = ratio_to_te ? mc_bench_ratio(x, reps[i].te) : x;
    }
    qsort(v, n, sizeof(double), mc_bench_cmp_double);
    return v[n / 2];
}

static int gp_shape_run(const mc_getpath_cfg_t *cfg, const gp_shape_t *sh, mc_te_t *te)
{
    uint32_t n = cfg->reps ? cfg->reps : 1;
    gp_rep_t reps[64];
    uint64_t errors = 0, fed_lookups = 0, fed_unpushed = 0, cold_lookups = 0;
    for (uint32_t r = 0; r < n; r++) {
        if (gp_rep_run(cfg, sh, r, te, &reps[r]) != 0) {
            fprintf(stderr, "mc_store_bench --getpath: shape %s: setup failed\n", sh->name);
            return 1;
        }
        errors += reps[r].errors;
        fed_lookups += reps[r].fed_lookups;
        fed_unpushed += reps[r].fed_unpushed;
        cold_lookups += reps[r].cold_lookups;
    }
#define MED(f) gp_median(reps, n, offsetof(gp_rep_t, f), false)
#define MED_RATIO(f) gp_median(reps, n, offsetof(gp_rep_t, f), true)
    double gib = (double)sh->value / (1024.0 * 1024 * 1024);
    char date[32];
    mc_peer_date(date, sizeof(date));
    printf("{\"bench\":\"getpath\",\"shape\":\"%s\",\"transport\":\"%s\",\"value\":%llu,"
           "\"batch\":%u,\"threads\":%u,\"keys\":%llu,\"reps\":%u,\"errors\":%llu,"
           "\"te_req_s\":%.0f,\"cold_req_s\":%.0f,\"warm_req_s\":%.0f,\"first_req_s\":%.0f,"
           "\"te_gib_s\":%.3f,\"warm_gib_s\":%.3f,\"first_gib_s\":%.3f,"
           "\"store_over_te_warm\":%.2f,\"store_over_te_first\":%.2f,"
           "\"store_over_te_cold\":%.2f,\"first_fed_req_s\":%.0f,"
           "\"store_over_te_first_fed\":%.2f,\"fed_lookups\":%llu,\"fed_unpushed\":%llu,"
           "\"cold_lookups\":%llu,\"te_cpu_us_per_key\":%.3f,\"warm_cpu_us_per_key\":%.3f,"
           "\"store_over_te_warm_cpu\":%.2f,\"te_call_p50_us\":%.1f,"
           "\"first_call_p50_us\":%.1f,\"store_over_te_first_p50\":%.2f,"
           "\"te_first_pass_req_s\":%.0f,\"te_first_pass_over_te\":%.2f,\"date\":\"%s\"}\n",
           sh->name, cfg->transport, (unsigned long long)sh->value, sh->batch, sh->threads,
           (unsigned long long)sh->threads * sh->calls * sh->batch, n,
           (unsigned long long)errors, MED(te), MED(cold), MED(warm), MED(first),
           MED(te) * gib, MED(warm) * gib, MED(first) * gib, MED_RATIO(warm), MED_RATIO(first),
           MED_RATIO(cold), MED(first_fed), MED_RATIO(first_fed),
           (unsigned long long)fed_lookups, (unsigned long long)fed_unpushed,
           (unsigned long long)cold_lookups, MED(te_cpu), MED(warm_cpu), MED(cpu_ratio),
           MED(te_call_us), MED(first_call_us), MED(first_call_ratio), MED(te_first_pass),
           MED_RATIO(te_first_pass), date);
#undef MED
#undef MED_RATIO
    fflush(stdout);
    return 0;
}

/* ------------------------------------------------------------------ --cases=rtt
 * The round trips a first read is made of, measured in one run, interleaved (each round takes
 * one sample of every figure; the busy-poll settings take turns going first): a BatchGetReplicaList of 1, 32 and 128 keys through the RPC
 * client (its busy poll as configured: default, off, and 300 us), a raw engine read of one
 * 4 KiB replica and of 32 and 128, and a plain loopback TCP ping-pong of the lookups' request
 * and answer sizes against a forked echo process (blocking reads, and a spinning reader). One
 * "getpath_rtt" line of p50/p90 microseconds. */

#define RTT_SIZES 3
#define RTT_SPINS 3
static const uint32_t RTT_KEYS[RTT_SIZES] = {1, 32, 128};
static const uint32_t RTT_SPIN_US[RTT_SPINS] = {50, 0, 300}; /* 50: mc_net's default */

/* The echo process: each message starts with its own length and the answer's (two u32), the
 * answer is that many bytes in one send. Runs until EOF. */
static void rtt_echo(int lfd)
{
    int fd = accept(lfd, NULL, NULL);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    static uint8_t buf[1 << 20];
    for (;;) {
        size_t have = 0;
        uint32_t len[2] = {8, 0};
        while (have < len[0]) {
            ssize_t r = recv(fd, buf + have, sizeof(buf) - have, 0);
            if (r <= 0)
                _exit(0);
            have += (size_t)r;
            if (have >= 8)
                memcpy(len, buf, 8);
        }
        if (send(fd, buf, len[1], MSG_NOSIGNAL) != (ssize_t)len[1])
            _exit(1);
    }
}

/* One ping-pong: req bytes out, resp bytes back; spin: non-blocking reads in a loop. */
static uint64_t rtt_ping(int fd, uint32_t req, uint32_t resp, bool spin)
{
    static uint8_t buf[1 << 20];
    uint32_t len[2] = {req, resp};
    memcpy(buf, len, 8);
    uint64_t t0 = mc_now_ns();
    if (send(fd, buf, req, MSG_NOSIGNAL) != (ssize_t)req)
        return 0;
    size_t have = 0;
    while (have < resp) {
        ssize_t r = recv(fd, buf + have, resp - have, spin ? MSG_DONTWAIT : 0);
        if (r == 0 || (r < 0 && errno != EAGAIN))
            return 0;
        if (r > 0)
            have += (size_t)r;
    }
    return mc_now_ns() - t0;
}

/* p50 and p90 of n samples in us, appended to the JSON line in *o as "name_p50":..,"name_p90":.. */
static void rtt_put(char **o, char *end, const char *name, uint64_t *v, size_t n)
{
    double p50 = mc_bench_pct_us(v, n, 0.5), p90 = mc_bench_pct_us(v, n, 0.9);
    *o += snprintf(*o, (size_t)(end - *o), ",\"%s_p50\":%.1f,\"%s_p90\":%.1f", name, p50, name,
                   p90);
}

static int gp_rtt_run(const mc_getpath_cfg_t *cfg, mc_te_t *te)
{
    enum { ROUNDS = 400 };
    static const gp_shape_t sh = {"rtt", 4096, 128, 1, 1};
    gp_thread_t t;
    int rc = gp_thread_init(&t, &sh, 0, 0, cfg->writer) || gp_thread_plan(&t, cfg->writer, te);
    mc_rpc_client_t *cli[RTT_SIZES][RTT_SPINS] = {{NULL}};
    McRpc__BatchKeyRequest req[RTT_SIZES] = {0};
    uint32_t req_len[RTT_SIZES] = {0}, resp_len[RTT_SIZES] = {0};
    for (int s = 0; s < RTT_SIZES && rc == 0; s++) {
        req[s] = (McRpc__BatchKeyRequest)MC_RPC__BATCH_KEY_REQUEST__INIT;
        req[s].n_keys = RTT_KEYS[s];
        req[s].keys = mc_wire_keys(t.keys, RTT_KEYS[s]);
        req[s].compact_replicas = true;
        req_len[s] = MC_RPC_HDR_SIZE + (uint32_t)protobuf_c_message_get_packed_size(&req[s].base);
        for (int p = 0; p < RTT_SPINS && rc == 0; p++)
            rc = mc_rpc_client_create(cfg->master_addr, NULL, &cli[s][p]) != MC_OK;
    }
    /* the echo process, on a free loopback port */
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    int lfd = socket(AF_INET, SOCK_STREAM, 0), fd = -1;
    pid_t echo = -1;
    if (rc == 0 && (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sl) != 0 || listen(lfd, 1) != 0 ||
                    getsockname(lfd, (struct sockaddr *)&sa, &sl) != 0))
        rc = 1;
    if (rc == 0 && (echo = fork()) == 0)
        rtt_echo(lfd);
    if (rc == 0) {
        int one = 1;
        fd = socket(AF_INET, SOCK_STREAM, 0);
        rc = echo < 0 || connect(fd, (struct sockaddr *)&sa, sl) != 0;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    /* samples: lookups [size][spin], engine reads [size], ping-pong [size][sleep/spin] */
    uint64_t *lk = mc_calloc((size_t)RTT_SIZES * RTT_SPINS * ROUNDS, sizeof(uint64_t));
    uint64_t *rd = mc_calloc((size_t)RTT_SIZES * ROUNDS, sizeof(uint64_t));
    uint64_t *pp = mc_calloc((size_t)RTT_SIZES * 2 * ROUNDS, sizeof(uint64_t));
    rc |= !lk || !rd || !pp;
    uint64_t spin0 = mc_net_busy_poll_ns();
    for (int r = -20; r < ROUNDS && rc == 0; r++) { /* 20 rounds of warm-up */
        for (int s = 0; s < RTT_SIZES && rc == 0; s++) {
            for (int q = 0; q < RTT_SPINS && rc == 0; q++) {
                int p = (q + r + RTT_SPINS * 20) % RTT_SPINS; /* each setting first in turn */
                mc_net_set_busy_poll_us(RTT_SPIN_US[p]);
                ProtobufCMessage *resp = NULL;
                uint64_t t0 = mc_now_ns();
                rc = mc_rpc_client_call(cli[s][p], MC_OP_BATCH_GET_REPLICA_LIST, &req[s].base,
                                        &resp, 5000) != MC_OK;
                uint64_t dt = mc_now_ns() - t0;
                if (resp && !resp_len[s])
                    resp_len[s] = MC_RPC_HDR_SIZE +
                                  (uint32_t)protobuf_c_message_get_packed_size(resp);
                mc_rpc_response_free(resp);
                if (r >= 0)
                    lk[((size_t)s * RTT_SPINS + p) * ROUNDS + r] = dt;
            }
            mc_net_set_busy_poll_us((uint32_t)(spin0 / 1000));
            uint64_t t0 = mc_now_ns();
            rc |= mc_te_transfer_sync(te, t.reqs, RTT_KEYS[s], NULL) != MC_OK;
            if (r >= 0)
                rd[(size_t)s * ROUNDS + r] = mc_now_ns() - t0;
            for (int spin = 0; spin < 2 && rc == 0; spin++) {
                uint64_t dt = rtt_ping(fd, req_len[s], resp_len[s], spin);
                rc = dt == 0;
                if (r >= 0)
                    pp[((size_t)s * 2 + spin) * ROUNDS + r] = dt;
            }
        }
    }
    mc_net_set_busy_poll_us((uint32_t)(spin0 / 1000));
    if (rc == 0) {
        char line[4096], *o = line, *end = line + sizeof(line), name[64];
        o += snprintf(o, (size_t)(end - o), "{\"bench\":\"getpath_rtt\",\"transport\":\"%s\","
                      "\"rounds\":%d", cfg->transport, ROUNDS);
        for (int s = 0; s < RTT_SIZES; s++) {
            o += snprintf(o, (size_t)(end - o), ",\"req_bytes_%u\":%u,\"resp_bytes_%u\":%u",
                          RTT_KEYS[s], req_len[s], RTT_KEYS[s], resp_len[s]);
            for (int p = 0; p < RTT_SPINS; p++) {
                snprintf(name, sizeof(name), "lookup%u_spin%u", RTT_KEYS[s], RTT_SPIN_US[p]);
                rtt_put(&o, end, name, lk + ((size_t)s * RTT_SPINS + p) * ROUNDS, ROUNDS);
            }
            snprintf(name, sizeof(name), "te_read%u", RTT_KEYS[s]);
            rtt_put(&o, end, name, rd + (size_t)s * ROUNDS, ROUNDS);
            snprintf(name, sizeof(name), "tcp_pingpong%u_sleep", RTT_KEYS[s]);
            rtt_put(&o, end, name, pp + (size_t)s * 2 * ROUNDS, ROUNDS);
            snprintf(name, sizeof(name), "tcp_pingpong%u_spin", RTT_KEYS[s]);
            rtt_put(&o, end, name, pp + ((size_t)s * 2 + 1) * ROUNDS, ROUNDS);
        }
        char date[32];
        mc_peer_date(date, sizeof(date));
        printf("%s,\"date\":\"%s\"}\n", line, date);
        fflush(stdout);
    }
    if (fd >= 0)
        close(fd);
    if (lfd >= 0)
        close(lfd);
    if (echo > 0)
        waitpid(echo, NULL, 0);
    for (int s = 0; s < RTT_SIZES; s++) {
        for (int p = 0; p < RTT_SPINS; p++)
            mc_rpc_client_destroy(cli[s][p]);
        if (rc == 0 || req[s].keys)
            mc_free(req[s].keys);
    }
    mc_free(lk);
    mc_free(rd);
    mc_free(pp);
    gp_thread_free(&t);
    mc_store_remove_all(cfg->writer, true);
    return rc;
}

int mc_getpath_run(const mc_getpath_cfg_t *cfg)
{
    mc_te_config_t tcfg = {0};
    if (cfg->te_tuning)
        tcfg = *cfg->te_tuning;
    tcfg.metadata_uri = "P2PHANDSHAKE"; /* as the store's engines (mc_store_bench) */
    tcfg.local_server_name = "127.0.0.1";
    tcfg.protocol = "auto";
    mc_te_t *te = NULL;
    if (mc_te_create(&tcfg, &te) != MC_OK) {
        fprintf(stderr, "mc_store_bench --getpath: cannot create the raw engine\n");
        return 1;
    }
    int rc = 0;
    if (cfg->cases && mc_bench_list_has(cfg->cases, "rtt"))
        rc |= cfg->master_addr ? gp_rtt_run(cfg, te) : 1;
    for (size_t i = 0; i < sizeof(SHAPES) / sizeof(SHAPES[0]); i++) {
        if (cfg->cases && *cfg->cases && !mc_bench_list_has(cfg->cases, SHAPES[i].name))
            continue;
        rc |= gp_shape_run(cfg, &SHAPES[i], te);
    }
    for (size_t i = 0; i < sizeof(EXTRA_SHAPES) / sizeof(EXTRA_SHAPES[0]); i++) {
        if (cfg->cases && mc_bench_list_has(cfg->cases, EXTRA_SHAPES[i].name))
            rc |= gp_shape_run(cfg, &EXTRA_SHAPES[i], te);
    }
    mc_te_destroy(te);
    return rc;
}
