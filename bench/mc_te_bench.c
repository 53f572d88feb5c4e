/* mc_te_bench: Transfer Engine benchmark (targets in docs/benchmarks.md), written against include/mooncake/te.h.
 *
 * Roles (separate processes):
 *   --role target      create an engine (metadata P2PHANDSHAKE by default), allocate
 *                      --buffer_size of shareable (memfd) or plain malloc memory
 *                      (--target_mem), fill it with a known pattern, register it, print
 *                      "SEGMENT <name> <addr> <size>" on stdout and serve until SIGTERM/SIGINT.
 *   --role initiator   open --target NAME and run the matrix
 *                      (--protocol x --op x --block_sizes x --batch_size x --threads), one JSON
 *                      line per case on stdout; the moved bytes are verified (XXH3 of the
 *                      whole moved region against the pattern that was sent).
 *   --role all         start the target itself (fork + exec of this binary), then initiator.
 * Extras: --peers measures memcpy, memcached GET and iperf3 in the same run and prints the
 * issue's ratios; --soak SECONDS runs continuous mixed transfers and reports RSS/fds of both
 * processes at start and end.
 *
 * Target memory layout: [0, usable) is used by the benchmark; the last VERIFY_TAIL bytes keep
 * the target's own pattern forever and are read back once per engine as an independent check
 * of READ (data produced by the other process, not echoed by us).
 */
#include "mooncake/log.h"
#include "mooncake/te.h"

#include "common/alloc.h"
#include "common/config.h"
#include "common/hash.h"
#include "common/time.h"
#include "te/te_hashed.h" /* --wait hashed */

#include "peers.h"
#include "pattern.h" /* deterministic content, offsets multiples of 8 */
#include "te_env.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define GIB (1024.0 * 1024.0 * 1024.0)
#define VERIFY_TAIL (1u << 20)
#define TARGET_SEED 0x7461726765745f31ull /* "target_1" */
#define MAX_LIST 32
#define MAX_THREADS 64
#define LAT_CAP (1u << 20) /* latency samples kept per thread */

/* ------------------------------------------------------------------------------ options -- */

static struct {
    const char *role;
    const char *target;
    int64_t target_pid;
    const char *metadata_server;
    const char *local_server_name;
    const char *protocol;    /* list: tcp,shm,auto */
    const char *op;          /* list: read,write */
    const char *block_sizes; /* list of sizes */
    const char *batch_size;  /* list of ints */
    const char *threads;     /* list of ints */
    double duration;
    int64_t iterations;
    uint64_t buffer_size;
    const char *target_mem;
    const char *wait;
    bool verify;
    bool matrix;
    bool peers;
    uint64_t peer_block;
    int64_t peer_runs;
    int64_t iperf_seconds;
    bool redis;
    int64_t soak;
    int64_t soak_threads;
    int64_t timeout_ms;
    int64_t tcp_connections;
    int64_t worker_threads;
    uint64_t max_case_bytes;
    const char *log_level;
} g = {
    .role = "all",
    .target = "",
    .target_pid = 0,
    .metadata_server = "P2PHANDSHAKE",
    .local_server_name = "127.0.0.1:0",
    .protocol = "tcp,shm",
    .op = "read,write",
    .block_sizes = "4K,64K,1M,4M,32M,64M",
    .batch_size = "1,128",
    .threads = "1",
    .duration = 2.0,
    .iterations = 0,
    .buffer_size = 256ull << 20,
    .target_mem = "shareable",
    .wait = "sync",
    .verify = true,
    .matrix = true,
    .peers = false,
    .peer_block = 32ull << 20,
    .peer_runs = 20,
    .iperf_seconds = 3,
    .redis = false,
    .soak = 0,
    .soak_threads = 2,
    .timeout_ms = 0,
    .tcp_connections = 0,
    .worker_threads = 0,
    .max_case_bytes = 0,
    .log_level = "warn",
};

static mc_option_t g_options[] = {
    {"role", MC_OPT_STRING, &g.role, NULL, "target | initiator | all (all = fork a target, then run)", 0, 0},
    {"target", MC_OPT_STRING, &g.target, NULL, "segment name of the target (initiator role)", 0, 0},
    {"target_pid", MC_OPT_INT, &g.target_pid, NULL, "PID of the target, for its RSS in --soak (initiator role)", 0, 4194304},
    {"metadata_server", MC_OPT_STRING, &g.metadata_server, "MC_METADATA_SERVER", "metadata connection string", 0, 0},
    {"local_server_name", MC_OPT_STRING, &g.local_server_name, NULL, "host:port this engine serves on (port 0 = free)", 0, 0},
    {"protocol", MC_OPT_STRING, &g.protocol, NULL, "comma list of tcp, shm, auto", 0, 0},
    {"op", MC_OPT_STRING, &g.op, NULL, "comma list of read, write", 0, 0},
    {"block_sizes", MC_OPT_STRING, &g.block_sizes, NULL, "comma list of request sizes (4K..64M)", 0, 0},
    {"batch_size", MC_OPT_STRING, &g.batch_size, NULL, "comma list of requests per batch", 0, 0},
    {"threads", MC_OPT_STRING, &g.threads, NULL, "comma list of submitting thread counts", 0, 0},
    {"duration", MC_OPT_DOUBLE, &g.duration, NULL, "seconds per case (ignored when --iterations > 0)", 0.01, 3600},
    {"iterations", MC_OPT_INT, &g.iterations, NULL, "batches per thread per case (0 = use --duration)", 0, 1e9},
    {"buffer_size", MC_OPT_SIZE, &g.buffer_size, NULL, "registered buffer on each side (same value for both roles)", 2.0 * (1 << 20), 64.0 * (1ull << 30)},
    {"target_mem", MC_OPT_STRING, &g.target_mem, NULL, "target memory: shareable (memfd) | malloc", 0, 0},
    {"wait", MC_OPT_STRING, &g.wait, NULL, "sync (mc_te_transfer_sync) | poll (batch API + status polling) | checked (sync, then XXH3 of every request's bytes, as a store get checks them) | hashed (the same checksums, from mc_te_transfer_start_hashed where the engine hashed while receiving, by this thread otherwise)", 0, 0},
    {"verify", MC_OPT_BOOL, &g.verify, NULL, "verify the moved bytes of every case", 0, 0},
    {"matrix", MC_OPT_BOOL, &g.matrix, NULL, "run the benchmark matrix (false: only peers/soak)", 0, 0},
    {"peers", MC_OPT_BOOL, &g.peers, NULL, "also measure memcpy, memcached GET, iperf3 and print ratios", 0, 0},
    {"peer_block", MC_OPT_SIZE, &g.peer_block, NULL, "object size for the memcpy/memcached peers", 4096, 1024.0 * (1 << 20)},
    {"peer_runs", MC_OPT_INT, &g.peer_runs, NULL, "timed repetitions for memcached/memcpy peers", 1, 10000},
    {"iperf_seconds", MC_OPT_INT, &g.iperf_seconds, NULL, "iperf3 duration (0 = skip iperf3)", 0, 600},
    {"redis", MC_OPT_BOOL, &g.redis, NULL,
     "with --peers: also redis-benchmark 4 KiB SET/GET (-c 50 -P 16: the 4 KiB x 128 target's peer; over loopback tcp, and with shm in --protocol over a unix socket too)", 0, 0},
    {"soak", MC_OPT_INT, &g.soak, NULL, "seconds of continuous mixed transfers with RSS report (0 = off)", 0, 86400},
    {"soak_threads", MC_OPT_INT, &g.soak_threads, NULL, "submitting threads during --soak", 1, MAX_THREADS},
    {"timeout_ms", MC_OPT_INT, &g.timeout_ms, NULL, "engine transfer timeout (0 = engine default)", 0, 600000},
    {"tcp_connections", MC_OPT_INT, &g.tcp_connections, NULL, "engine pooled tcp connections per peer (0 = default)", 0, 256},
    {"worker_threads", MC_OPT_INT, &g.worker_threads, NULL, "engine worker threads (0 = default)", 0, 256},
    {"max_case_bytes", MC_OPT_SIZE, &g.max_case_bytes, NULL, "skip cases moving more than this per iteration (0 = buffer limit)", 0, 0},
    {"log_level", MC_OPT_STRING, &g.log_level, "MC_LOG_LEVEL", "debug | info | warn | error | off", 0, 0},
};

static char g_date[32], g_host[256];

/* ------------------------------------------------------------------------------ helpers -- */

typedef struct list {
    size_t n;
    uint64_t v[MAX_LIST];
    const char *s[MAX_LIST];
} list_t;

static char *g_list_storage[8];

/* Split a comma list; numeric lists are parsed as sizes. Returns 0 or -1 with a message. */
static int list_parse(const char *name, const char *text, int numeric, list_t *l)
{
    static int slot;
    char *copy = mc_strdup(text);
    if (!copy || slot >= 8)
        return -1;
    g_list_storage[slot++] = copy;
    memset(l, 0, sizeof(*l));
    char *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ')
            t++;
        if (!*t)
            continue;
        if (l->n == MAX_LIST) {
            fprintf(stderr, "mc_te_bench: --%s has more than %d entries\n", name, MAX_LIST);
            return -1;
        }
        if (numeric && (mc_parse_size(t, &l->v[l->n]) != MC_OK || l->v[l->n] == 0)) {
            fprintf(stderr, "mc_te_bench: --%s: bad value '%s'\n", name, t);
            return -1;
        }
        l->s[l->n++] = t;
    }
    if (!l->n) {
        fprintf(stderr, "mc_te_bench: --%s is empty\n", name);
        return -1;
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int count_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory handle itself */
}

static void json_emit(json_t *o)
{
    json_object_set_new(o, "date", json_string(g_date));
    json_object_set_new(o, "host", json_string(g_host));
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    if (s) {
        printf("%s\n", s);
        fflush(stdout);
        free(s);
    }
    json_decref(o);
}

static mc_status_t engine_create(const char *protocol, mc_te_t **te_p)
{
    mc_te_config_t cfg = {
        .metadata_uri = g.metadata_server,
        .local_server_name = g.local_server_name,
        .protocol = protocol,
    };
    /* the environment (MC_TE_*, te_env.h), then the flags that are set */
    char err[256];
    if (mc_tool_te_config_from_env(&cfg, err, sizeof(err)) != MC_OK) {
        fprintf(stderr, "mc_te_bench: %s\n", err);
        return MC_ERR_INVALID_PARAMS;
    }
    if (g.timeout_ms)
        cfg.transfer_timeout_ms = (uint32_t)g.timeout_ms;
    if (g.tcp_connections)
        cfg.tcp_connections = (uint32_t)g.tcp_connections;
    if (g.worker_threads)
        cfg.worker_threads = (uint32_t)g.worker_threads;
    mc_status_t st = mc_te_create(&cfg, te_p);
    if (st != MC_OK)
        fprintf(stderr, "mc_te_bench: mc_te_create(protocol=%s) failed: %s\n", protocol,
                mc_status_str(st));
    return st;
}

/* ------------------------------------------------------------------------------- target -- */

static int run_target(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* engine threads inherit the mask */

    int shareable = strcmp(g.target_mem, "malloc") != 0;
    if (shareable && strcmp(g.target_mem, "shareable") != 0) {
        fprintf(stderr, "mc_te_bench: --target_mem must be shareable or malloc\n");
        return 2;
    }
    mc_te_t *te = NULL;
    if (engine_create("auto", &te) != MC_OK)
        return 1;
    size_t size = g.buffer_size;
    void *buf = shareable ? mc_te_alloc_shareable(te, size) : NULL;
    if (!shareable && posix_memalign(&buf, 4096, size) != 0)
        buf = NULL;
    if (!buf) {
        fprintf(stderr, "mc_te_bench: cannot allocate %zu bytes of %s memory\n", size,
                g.target_mem);
        mc_te_destroy(te);
        return 1;
    }
    mc_tool_pattern_fill(buf, size, TARGET_SEED, 0);
    mc_status_t st = mc_te_register(te, buf, size, "cpu:0");
    if (st != MC_OK) {
        fprintf(stderr, "mc_te_bench: mc_te_register failed: %s\n", mc_status_str(st));
        return 1;
    }
    printf("SEGMENT %s 0x%" PRIxPTR " %zu %d\n", mc_te_local_name(te), (uintptr_t)buf, size,
           (int)getpid());
    fflush(stdout);
    fprintf(stderr, "mc_te_bench target: segment %s, %zu bytes of %s memory at %p, pid %d\n",
            mc_te_local_name(te), size, g.target_mem, buf, (int)getpid());

    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "mc_te_bench target: signal %d, rss %ld KiB, shutting down\n", sig,
            mc_peer_rss_kb(getpid()));
    st = mc_te_unregister(te, buf);
    if (st != MC_OK)
        fprintf(stderr, "mc_te_bench target: unregister: %s\n", mc_status_str(st));
    if (shareable)
        mc_te_free_shareable(te, buf);
    mc_te_destroy(te);
    if (!shareable)
        free(buf);
    return 0;
}

/* ---------------------------------------------------------------------------- initiator -- */

typedef struct bench_ctx {
    mc_te_t *te;
    mc_te_segment_t seg;
    uint64_t remote_base;
    uint8_t *local; /* g.buffer_size, registered with te */
    size_t usable;  /* bytes of either buffer the cases may use */
    const char *protocol;
} bench_ctx_t;

typedef struct case_spec {
    mc_te_opcode_t op;
    size_t block, batch;
    unsigned threads;
} case_spec_t;

typedef struct thread_arg {
    bench_ctx_t *ctx;
    const case_spec_t *cs;
    unsigned index;
    pthread_barrier_t *barrier;
    uint64_t start_ns, end_ns; /* end_ns: stop after this time (duration mode) */
    uint64_t iterations;       /* 0 = duration mode */
    /* results */
    uint64_t done;       /* completed batches */
    uint64_t finish_ns;  /* when this thread finished */
    uint64_t *lat_ns;    /* per-batch latency samples (first LAT_CAP) */
    size_t n_lat;
    mc_status_t error;
    /* --wait checked / hashed: the checksums of the last batch (batch entries), and how many
     * of all the requests' checksums the engine delivered */
    uint64_t *sums;
    uint64_t engine_hashed;
} thread_arg_t;

static void build_requests(bench_ctx_t *ctx, const case_spec_t *cs, unsigned t,
                           mc_te_request_t *reqs)
{
    size_t region = cs->block * cs->batch;
    for (size_t i = 0; i < cs->batch; i++) {
        size_t off = (size_t)t * region + i * cs->block;
        reqs[i].opcode = cs->op;
        reqs[i].local = ctx->local + off;
        reqs[i].target = ctx->seg;
        reqs[i].target_addr = ctx->remote_base + off;
        reqs[i].length = cs->block;
    }
}

/* How a batch is waited for (--wait). */
enum { W_SYNC, W_POLL, W_CHECKED, W_HASHED };

static int wait_mode(const char *w)
{
    return !strcmp(w, "sync") ? W_SYNC : !strcmp(w, "poll") ? W_POLL
         : !strcmp(w, "checked") ? W_CHECKED : !strcmp(w, "hashed") ? W_HASHED : -1;
}

/* W_CHECKED / W_HASHED: one batch, then sums[i] = XXH3 of request i's bytes, the engine's
 * where it hashed them while receiving (W_HASHED), computed here otherwise (what a store get
 * does to check a value). *engine_p += the engine's count. hashes: n scratch entries. */
static mc_status_t do_batch_summed(mc_te_t *te, const mc_te_request_t *reqs, size_t n,
                                   int mode, mc_te_read_hash_t *hashes, uint64_t *sums,
                                   uint64_t *engine_p)
{
    mc_status_t st;
    if (mode == W_HASHED) {
        mc_te_transfer_t *x = NULL;
        st = mc_te_transfer_start_hashed(te, reqs, n, true, hashes, &x);
        if (st == MC_OK)
            st = mc_te_transfer_wait(te, x, NULL);
    } else {
        st = mc_te_transfer_sync(te, reqs, n, NULL);
    }
    for (size_t i = 0; i < n && st == MC_OK; i++) {
        if (mode == W_HASHED && hashes[i].hashed) {
            sums[i] = hashes[i].hash;
            (*engine_p)++;
        } else {
            sums[i] = mc_hash64(reqs[i].local, reqs[i].length);
        }
    }
    return st;
}

/* One batch: submit n requests and wait until every one is final. */
static mc_status_t do_batch(mc_te_t *te, const mc_te_request_t *reqs, size_t n, int poll)
{
    if (!poll)
        return mc_te_transfer_sync(te, reqs, n, NULL);
    mc_te_batch_t b;
    mc_status_t st = mc_te_batch_alloc(te, n, &b);
    if (st != MC_OK)
        return st;
    st = mc_te_batch_submit(te, b, reqs, n);
    if (st != MC_OK) {
        mc_te_batch_free(te, b);
        return st;
    }
    mc_te_xfer_status_t stack_status[128];
    mc_te_xfer_status_t *sts = n <= 128 ? stack_status : mc_calloc(n, sizeof(*sts));
    if (!sts) {
        /* cannot look at the statuses: wait via batch_free's BUSY answer */
        while (mc_te_batch_free(te, b) == MC_ERR_BUSY)
            sched_yield();
        return MC_ERR_NO_MEMORY;
    }
    uint64_t deadline = mc_now_ns() + 60ull * 1000000000ull;
    for (;;) {
        mc_status_t all = mc_te_batch_status_all(te, b, sts, n);
        int pending = 0;
        for (size_t i = 0; i < n; i++)
            pending += sts[i].state == MC_TE_WAITING || sts[i].state == MC_TE_PENDING;
        if (all == MC_OK || !pending) {
            st = MC_OK;
            for (size_t i = 0; i < n && st == MC_OK; i++)
                if (sts[i].state != MC_TE_COMPLETED)
                    st = sts[i].error != MC_OK ? sts[i].error : MC_ERR_TRANSFER_FAIL;
            if (st == MC_OK && all != MC_OK)
                st = all;
            break;
        }
        if (mc_now_ns() > deadline) {
            st = MC_ERR_TIMEOUT;
            break;
        }
        sched_yield();
    }
    while (mc_te_batch_free(te, b) == MC_ERR_BUSY)
        sched_yield();
    if (sts != stack_status)
        mc_free(sts);
    return st;
}

static void *bench_thread(void *p)
{
    thread_arg_t *a = p;
    const case_spec_t *cs = a->cs;
    int mode = wait_mode(g.wait);
    mc_te_request_t *reqs = mc_calloc(cs->batch, sizeof(*reqs));
    mc_te_read_hash_t *hashes = NULL;
    if (reqs && (mode == W_CHECKED || mode == W_HASHED)) {
        hashes = mc_calloc(cs->batch, sizeof(*hashes));
        a->sums = mc_calloc(cs->batch, sizeof(*a->sums));
        if (!hashes || !a->sums) {
            mc_free(reqs);
            reqs = NULL;
        }
    }
    if (!reqs) {
        mc_free(hashes);
        a->error = MC_ERR_NO_MEMORY;
        pthread_barrier_wait(a->barrier);
        return NULL;
    }
    build_requests(a->ctx, cs, a->index, reqs);
    pthread_barrier_wait(a->barrier);
    for (;;) {
        uint64_t t0 = mc_now_ns();
        if (a->iterations ? a->done >= a->iterations : t0 >= a->end_ns)
            break;
        mc_status_t st = hashes ? do_batch_summed(a->ctx->te, reqs, cs->batch, mode, hashes,
                                                  a->sums, &a->engine_hashed)
                                : do_batch(a->ctx->te, reqs, cs->batch, mode == W_POLL);
        uint64_t t1 = mc_now_ns();
        if (st != MC_OK) {
            a->error = st;
            break;
        }
        if (a->n_lat < LAT_CAP)
            a->lat_ns[a->n_lat++] = t1 - t0;
        a->done++;
    }
    a->finish_ns = mc_now_ns();
    mc_free(reqs);
    mc_free(hashes);
    return NULL;
}

/* Results of one case, kept for the ratio lines. */
typedef struct case_result {
    const char *protocol;
    case_spec_t cs;
    double gib_s, req_s, p50_us, p99_us;
    int ok;
} case_result_t;

static case_result_t g_results[4096];
static size_t g_n_results;

/* Moves the case's whole region once in direction op, all threads' requests in one call. */
static mc_status_t move_region(bench_ctx_t *ctx, const case_spec_t *cs, mc_te_opcode_t op)
{
    case_spec_t c = *cs;
    c.op = op;
    mc_status_t st = MC_OK;
    mc_te_request_t *reqs = mc_calloc(c.batch, sizeof(*reqs));
    if (!reqs)
        return MC_ERR_NO_MEMORY;
    for (unsigned t = 0; t < c.threads && st == MC_OK; t++) {
        build_requests(ctx, &c, t, reqs);
        st = mc_te_transfer_sync(ctx->te, reqs, c.batch, NULL);
    }
    mc_free(reqs);
    return st;
}

static int run_case(bench_ctx_t *ctx, const case_spec_t *cs)
{
    size_t total = cs->block * cs->batch * cs->threads;
    uint64_t seed = mc_now_ns() ^ ((uint64_t)cs->block << 20) ^ cs->batch ^ ((uint64_t)cs->op << 60);
    const char *opname = cs->op == MC_TE_READ ? "read" : "write";
    /* Prepare: local region = pattern; for READ put the pattern into the target and clear the
     * local copy, so that only bytes that really came back can match. */
    mc_tool_pattern_fill(ctx->local, total, seed, 0);
    uint64_t want = mc_hash64(ctx->local, total);
    mc_status_t st = MC_OK;
    if (cs->op == MC_TE_READ) {
        st = move_region(ctx, cs, MC_TE_WRITE);
        memset(ctx->local, 0, total);
    }
    thread_arg_t args[MAX_THREADS];
    pthread_t tids[MAX_THREADS];
    pthread_barrier_t barrier;
    memset(args, 0, sizeof(args));
    int verified = 0;
    uint64_t batches = 0, start = 0, finish = 0, engine_hashed = 0;
    double gib_s = 0, req_s = 0, p50 = 0, p99 = 0;
    if (st != MC_OK)
        goto report;

    pthread_barrier_init(&barrier, NULL, cs->threads + 1);
    for (unsigned t = 0; t < cs->threads; t++) {
        args[t].ctx = ctx;
        args[t].cs = cs;
        args[t].index = t;
        args[t].barrier = &barrier;
        args[t].iterations = (uint64_t)g.iterations;
        args[t].lat_ns = mc_calloc(LAT_CAP, sizeof(uint64_t));
    }
    unsigned started = 0;
    for (unsigned t = 0; t < cs->threads; t++) {
        if (!args[t].lat_ns || pthread_create(&tids[t], NULL, bench_thread, &args[t]) != 0)
            break;
        started++;
    }
    if (started != cs->threads) {
        fprintf(stderr, "mc_te_bench: cannot start %u threads\n", cs->threads);
        exit(1);
    }
    start = mc_now_ns();
    for (unsigned t = 0; t < cs->threads; t++) {
        args[t].start_ns = start;
        args[t].end_ns = start + (uint64_t)(g.duration * 1e9);
    }
    pthread_barrier_wait(&barrier);
    size_t n_lat = 0;
    for (unsigned t = 0; t < cs->threads; t++) {
        pthread_join(tids[t], NULL);
        if (args[t].error != MC_OK && st == MC_OK)
            st = args[t].error;
        batches += args[t].done;
        engine_hashed += args[t].engine_hashed;
        if (args[t].finish_ns > finish)
            finish = args[t].finish_ns;
        n_lat += args[t].n_lat;
    }
    pthread_barrier_destroy(&barrier);
    uint64_t *lat = mc_calloc(n_lat ? n_lat : 1, sizeof(uint64_t));
    size_t k = 0;
    for (unsigned t = 0; t < cs->threads; t++) {
        if (lat)
            memcpy(lat + k, args[t].lat_ns, args[t].n_lat * sizeof(uint64_t));
        k += args[t].n_lat;
        mc_free(args[t].lat_ns);
    }
    double secs = (double)(finish - start) / 1e9;
    if (secs > 0 && batches) {
        gib_s = (double)batches * (double)(cs->block * cs->batch) / secs / GIB;
        req_s = (double)batches * (double)cs->batch / secs;
    }
    if (lat && n_lat) {
        qsort(lat, n_lat, sizeof(uint64_t), cmp_u64);
        p50 = (double)lat[n_lat / 2] / 1e3;
        p99 = (double)lat[(size_t)((double)(n_lat - 1) * 0.99)] / 1e3;
    }
    mc_free(lat);

    /* Verify the moved bytes: READ -> local region holds the pattern again; WRITE -> the
     * target holds it (read back into the cleared local region). */
    if (st == MC_OK && g.verify && batches) {
        if (cs->op == MC_TE_WRITE) {
            memset(ctx->local, 0, total);
            st = move_region(ctx, cs, MC_TE_READ);
        }
        if (st == MC_OK)
            verified = mc_hash64(ctx->local, total) == want ? 1 : -1;
        /* --wait checked / hashed: each thread's checksums of its last batch are those of
         * the bytes now in its requests' memory */
        for (unsigned t = 0; t < cs->threads && verified == 1 && args[t].sums; t++) {
            for (size_t i = 0; i < cs->batch && verified == 1; i++) {
                /* build_requests' layout */
                const uint8_t *p = ctx->local + (size_t)t * cs->block * cs->batch + i * cs->block;
                if (args[t].sums[i] != mc_hash64(p, cs->block))
                    verified = -1;
            }
        }
    }
    for (unsigned t = 0; t < cs->threads; t++)
        mc_free(args[t].sums);

report:;
    json_t *o = json_object();
    json_object_set_new(o, "bench", json_string("te"));
    json_object_set_new(o, "op", json_string(opname));
    json_object_set_new(o, "block", json_integer((json_int_t)cs->block));
    json_object_set_new(o, "batch", json_integer((json_int_t)cs->batch));
    json_object_set_new(o, "threads", json_integer(cs->threads));
    json_object_set_new(o, "protocol", json_string(ctx->protocol));
    json_object_set_new(o, "gib_s", json_real(gib_s));
    json_object_set_new(o, "req_s", json_real(req_s));
    json_object_set_new(o, "p50_us", json_real(p50));
    json_object_set_new(o, "p99_us", json_real(p99));
    json_object_set_new(o, "batches", json_integer((json_int_t)batches));
    json_object_set_new(o, "bytes",
                        json_integer((json_int_t)(batches * cs->block * cs->batch)));
    json_object_set_new(o, "seconds", json_real((double)(finish - start) / 1e9));
    json_object_set_new(o, "wait", json_string(g.wait));
    if (wait_mode(g.wait) == W_CHECKED || wait_mode(g.wait) == W_HASHED)
        json_object_set_new(o, "engine_hashed",
                            json_real(batches ? (double)engine_hashed / (double)(batches * cs->batch)
                                              : 0.0));
    json_object_set_new(o, "target_mem", json_string(g.target_mem));
    json_object_set_new(o, "verified", verified == 1 ? json_true() : json_false());
    if (st != MC_OK)
        json_object_set_new(o, "error", json_string(mc_status_name(st)));
    else if (verified == -1)
        json_object_set_new(o, "error", json_string("DATA_MISMATCH"));
    json_emit(o);
    if (g_n_results < MC_ARRAY_LEN(g_results)) {
        case_result_t *r = &g_results[g_n_results++];
        r->protocol = ctx->protocol;
        r->cs = *cs;
        r->gib_s = gib_s;
        r->req_s = req_s;
        r->p50_us = p50;
        r->p99_us = p99;
        r->ok = st == MC_OK && verified != -1 && batches > 0;
    }
    if (st != MC_OK)
        fprintf(stderr, "mc_te_bench: %s %s block %zu batch %zu threads %u failed: %s\n",
                ctx->protocol, opname, cs->block, cs->batch, cs->threads, mc_status_str(st));
    if (verified == -1)
        fprintf(stderr, "mc_te_bench: %s %s block %zu: DATA MISMATCH\n", ctx->protocol, opname,
                cs->block);
    return st == MC_OK && verified != -1 ? 0 : 1;
}

/* READ the never-written tail of the target and compare it with the target's own pattern. */
static int check_target_pattern(bench_ctx_t *ctx)
{
    size_t len = 64 * 1024;
    uint8_t *want = mc_malloc(len);
    if (!want)
        return 1;
    mc_tool_pattern_fill(want, len, TARGET_SEED, ctx->usable);
    memset(ctx->local + ctx->usable, 0, len);
    mc_te_request_t r = {.opcode = MC_TE_READ,
                         .local = ctx->local + ctx->usable,
                         .target = ctx->seg,
                         .target_addr = ctx->remote_base + ctx->usable,
                         .length = len};
    mc_status_t st = mc_te_transfer_sync(ctx->te, &r, 1, NULL);
    int bad = st != MC_OK || memcmp(want, ctx->local + ctx->usable, len) != 0;
    if (bad)
        fprintf(stderr, "mc_te_bench: %s: READ of the target's own pattern %s\n", ctx->protocol,
                st != MC_OK ? mc_status_str(st) : "returned wrong bytes");
    mc_free(want);
    return bad;
}

/* Engine for one protocol with the local buffer registered and the target segment open. */
static int ctx_open(bench_ctx_t *ctx, const char *protocol, uint8_t *local)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->protocol = protocol;
    ctx->local = local;
    ctx->usable = g.buffer_size - VERIFY_TAIL;
    if (engine_create(protocol, &ctx->te) != MC_OK)
        return 1;
    mc_status_t st = mc_te_register(ctx->te, local, g.buffer_size, "cpu:0");
    if (st == MC_OK)
        st = mc_te_segment_open(ctx->te, g.target, &ctx->seg);
    if (st == MC_OK)
        st = mc_te_segment_first_buffer(ctx->te, ctx->seg, &ctx->remote_base);
    if (st != MC_OK) {
        fprintf(stderr, "mc_te_bench: %s: cannot set up (register/open %s): %s\n", protocol,
                g.target, mc_status_str(st));
        mc_te_destroy(ctx->te);
        ctx->te = NULL;
        return 1;
    }
    return check_target_pattern(ctx);
}

static void ctx_close(bench_ctx_t *ctx)
{
    if (!ctx->te)
        return;
    mc_te_segment_close(ctx->te, ctx->seg);
    mc_status_t st = mc_te_unregister(ctx->te, ctx->local);
    if (st != MC_OK)
        fprintf(stderr, "mc_te_bench: %s: unregister: %s\n", ctx->protocol, mc_status_str(st));
    mc_te_destroy(ctx->te);
    ctx->te = NULL;
}

/* ---------------------------------------------------------------------------------- soak -- */

typedef struct soak_arg {
    bench_ctx_t *ctxs;
    size_t n_ctx;
    unsigned index, n_threads;
    volatile int *stop;
    uint64_t transfers, requests, bytes, errors, verify_fail, verified;
} soak_arg_t;

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static void *soak_thread(void *p)
{
    soak_arg_t *a = p;
    static const size_t sizes[] = {4096, 65536, 1u << 20, 4u << 20, 32u << 20};
    size_t region = a->ctxs[0].usable / a->n_threads / 4096 * 4096;
    size_t base = (size_t)a->index * region;
    uint64_t rng = 0x9E3779B97F4A7C15ull * (a->index + 1) ^ mc_now_ns();
    mc_te_request_t *reqs = mc_calloc(256, sizeof(*reqs));
    if (!reqs)
        return NULL;
    for (uint64_t it = 0; !*a->stop; it++) {
        bench_ctx_t *ctx = &a->ctxs[xorshift(&rng) % a->n_ctx];
        size_t block = sizes[xorshift(&rng) % MC_ARRAY_LEN(sizes)];
        while (block > region)
            block /= 2;
        size_t max_batch = region / block < 256 ? region / block : 256;
        size_t batch = 1 + xorshift(&rng) % max_batch;
        if (block >= (4u << 20) && batch > 4)
            batch = 1 + batch % 4;
        int verify = it % 16 == 0;
        mc_te_opcode_t op = verify ? MC_TE_WRITE : (xorshift(&rng) & 1 ? MC_TE_READ : MC_TE_WRITE);
        for (size_t i = 0; i < batch; i++) {
            reqs[i].opcode = op;
            reqs[i].local = ctx->local + base + i * block;
            reqs[i].target = ctx->seg;
            reqs[i].target_addr = ctx->remote_base + base + i * block;
            reqs[i].length = block;
        }
        size_t total = block * batch;
        uint64_t want = 0;
        if (verify) {
            mc_tool_pattern_fill(ctx->local + base, total, rng, base);
            want = mc_hash64(ctx->local + base, total);
        }
        int poll = it % 2;
        mc_status_t st = do_batch(ctx->te, reqs, batch, poll);
        if (st == MC_OK && verify) {
            memset(ctx->local + base, 0, total);
            for (size_t i = 0; i < batch; i++)
                reqs[i].opcode = MC_TE_READ;
            st = do_batch(ctx->te, reqs, batch, !poll);
            if (st == MC_OK) {
                a->verified++;
                if (mc_hash64(ctx->local + base, total) != want)
                    a->verify_fail++;
            }
        }
        if (st != MC_OK) {
            a->errors++;
            if (a->errors < 5)
                fprintf(stderr, "mc_te_bench soak: %s transfer failed: %s\n", ctx->protocol,
                        mc_status_str(st));
            mc_sleep_ms(10);
            continue;
        }
        a->transfers++;
        a->requests += batch;
        a->bytes += total;
    }
    mc_free(reqs);
    return NULL;
}

/* Touch the whole usable region once in both directions on every engine, so that mappings
 * and pages the soak will use are resident before the start RSS is taken. */
static void soak_warm(bench_ctx_t *ctxs, size_t n_ctx)
{
    size_t chunk = 32u << 20;
    for (size_t c = 0; c < n_ctx; c++) {
        for (size_t off = 0; off < ctxs[c].usable; off += chunk) {
            size_t len = ctxs[c].usable - off < chunk ? ctxs[c].usable - off : chunk;
            mc_te_request_t r = {.opcode = MC_TE_WRITE, .local = ctxs[c].local + off,
                                 .target = ctxs[c].seg,
                                 .target_addr = ctxs[c].remote_base + off, .length = len};
            mc_te_transfer_sync(ctxs[c].te, &r, 1, NULL);
            r.opcode = MC_TE_READ;
            mc_te_transfer_sync(ctxs[c].te, &r, 1, NULL);
        }
    }
}

typedef struct rss_sample {
    long rss, anon;
    int fds;
} rss_sample_t;

static rss_sample_t rss_take(pid_t pid)
{
    rss_sample_t r = {-1, -1, -1};
    if (pid > 0) {
        r.rss = mc_peer_rss_kb(pid);
        r.anon = mc_peer_status_kb(pid, "RssAnon");
        r.fds = count_fds(pid);
    }
    return r;
}

static int run_soak(bench_ctx_t *ctxs, size_t n_ctx, pid_t target_pid)
{
    soak_warm(ctxs, n_ctx);
    unsigned nt = (unsigned)g.soak_threads;
    soak_arg_t args[MAX_THREADS];
    pthread_t tids[MAX_THREADS];
    volatile int stop = 0;
    memset(args, 0, sizeof(args));
    for (unsigned t = 0; t < nt; t++) {
        args[t] = (soak_arg_t){.ctxs = ctxs, .n_ctx = n_ctx, .index = t, .n_threads = nt,
                               .stop = &stop};
        if (pthread_create(&tids[t], NULL, soak_thread, &args[t]) != 0) {
            fprintf(stderr, "mc_te_bench: cannot start soak threads\n");
            exit(1);
        }
    }
    /* Start figures after the first few seconds: pools, mappings and caches are warm then. */
    uint64_t t0 = mc_now_ms();
    uint64_t warm = g.soak >= 60 ? 5000 : 1000;
    mc_sleep_ms((uint32_t)warm);
    rss_sample_t i0 = rss_take(getpid()), t0s = rss_take(target_pid);
    long irss0 = i0.rss, trss0 = t0s.rss;
    long irss_max = irss0, trss_max = trss0;
    uint64_t end = t0 + (uint64_t)g.soak * 1000;
    uint64_t next_report = mc_now_ms() + 60000;
    while (mc_now_ms() < end) {
        mc_sleep_ms(200);
        long ir = mc_peer_rss_kb(getpid()), tr = target_pid ? mc_peer_rss_kb(target_pid) : -1;
        if (ir > irss_max)
            irss_max = ir;
        if (tr > trss_max)
            trss_max = tr;
        if (mc_now_ms() >= next_report) {
            uint64_t bytes = 0;
            for (unsigned t = 0; t < nt; t++)
                bytes += args[t].bytes;
            fprintf(stderr, "mc_te_bench soak: %3" PRIu64 " s, %.1f GiB moved, rss initiator %ld KiB "
                    "target %ld KiB\n", (mc_now_ms() - t0) / 1000, (double)bytes / GIB, ir, tr);
            next_report += 60000;
        }
    }
    rss_sample_t i1 = rss_take(getpid()), t1s = rss_take(target_pid);
    long irss1 = i1.rss, trss1 = t1s.rss;
    stop = 1;
    uint64_t transfers = 0, requests = 0, bytes = 0, errors = 0, vfail = 0, verified = 0;
    for (unsigned t = 0; t < nt; t++) {
        pthread_join(tids[t], NULL);
        transfers += args[t].transfers;
        requests += args[t].requests;
        bytes += args[t].bytes;
        errors += args[t].errors;
        vfail += args[t].verify_fail;
        verified += args[t].verified;
    }
    double secs = (double)(mc_now_ms() - t0) / 1e3;
    json_t *o = json_object();
    json_object_set_new(o, "bench", json_string("te_soak"));
    json_object_set_new(o, "seconds", json_real(secs));
    json_object_set_new(o, "threads", json_integer(nt));
    json_object_set_new(o, "protocol", json_string(g.protocol));
    json_object_set_new(o, "transfers", json_integer((json_int_t)transfers));
    json_object_set_new(o, "requests", json_integer((json_int_t)requests));
    json_object_set_new(o, "bytes", json_integer((json_int_t)bytes));
    json_object_set_new(o, "gib_s", json_real((double)bytes / secs / GIB));
    json_object_set_new(o, "errors", json_integer((json_int_t)errors));
    json_object_set_new(o, "verified_batches", json_integer((json_int_t)verified));
    json_object_set_new(o, "verify_failures", json_integer((json_int_t)vfail));
    json_object_set_new(o, "initiator_rss_kb_start", json_integer(irss0));
    json_object_set_new(o, "initiator_rss_kb_end", json_integer(irss1));
    json_object_set_new(o, "initiator_rss_kb_max", json_integer(irss_max));
    json_object_set_new(o, "target_rss_kb_start", json_integer(trss0));
    json_object_set_new(o, "target_rss_kb_end", json_integer(trss1));
    json_object_set_new(o, "target_rss_kb_max", json_integer(trss_max));
    json_object_set_new(o, "initiator_rss_anon_kb_start", json_integer(i0.anon));
    json_object_set_new(o, "initiator_rss_anon_kb_end", json_integer(i1.anon));
    json_object_set_new(o, "target_rss_anon_kb_start", json_integer(t0s.anon));
    json_object_set_new(o, "target_rss_anon_kb_end", json_integer(t1s.anon));
    json_object_set_new(o, "initiator_fds_start", json_integer(i0.fds));
    json_object_set_new(o, "initiator_fds_end", json_integer(i1.fds));
    json_object_set_new(o, "target_fds_start", json_integer(t0s.fds));
    json_object_set_new(o, "target_fds_end", json_integer(t1s.fds));
    json_emit(o);
    fprintf(stderr, "soak: %.0f s, %.1f GiB in %" PRIu64 " batches, %" PRIu64 " errors, %" PRIu64
            " verify failures; RSS initiator %ld -> %ld KiB, target %ld -> %ld KiB; fds %d -> %d, "
            "%d -> %d\n", secs, (double)bytes / GIB, transfers, errors, vfail, irss0, irss1,
            trss0, trss1, i0.fds, i1.fds, t0s.fds, t1s.fds);
    return errors || vfail || transfers == 0;
}

/* ---------------------------------------------------------------------- peers + ratios -- */

static mc_peer_result_t g_memcpy, g_mcd_get, g_mcd_set, g_iperf, g_redis_get, g_redis_unix_get;
static int g_have_peers;
static int g_redis_unix; /* --redis and shm in --protocol: Redis over its unix socket too */

/* Keep the better of two measurements of one peer (the machine is shared: the ratios compare
 * against the peer's best showing in this run, which is the conservative choice for us). */
static void keep_best(mc_peer_result_t *best, const mc_peer_result_t *r)
{
    if (r->ok && (!best->ok || r->gib_s > best->gib_s))
        *best = *r;
}

/* Peers before the matrix (all of them) and after it (memcpy and memcached again). */
static void run_peers(int after)
{
    fprintf(stderr, "mc_te_bench: measuring peers %s the matrix...\n", after ? "after" : "before");
    mc_peer_result_t r, set;
    mc_peer_memcpy(g.peer_block, 0, (unsigned)(g.peer_runs < 9 ? 9 : g.peer_runs), &r);
    mc_peer_print_json(&r);
    keep_best(&g_memcpy, &r);
    mc_peer_memcached(g.peer_block, 1, (unsigned)g.peer_runs, &r, &set);
    mc_peer_print_json(&r);
    keep_best(&g_mcd_get, &r);
    if (set.ok)
        mc_peer_print_json(&set);
    keep_best(&g_mcd_set, &set);
    if (!after && g.iperf_seconds) {
        mc_peer_iperf3((unsigned)g.iperf_seconds, &g_iperf);
        mc_peer_print_json(&g_iperf);
    }
    if (!after && g.redis) {
        mc_peer_result_t rs, rg;
        /* Pipelined as the target states it: a batch of 128 reads is one pipeline too. */
        mc_peer_redis_benchmark(4096, 50, 400000, 16, &rs, &rg);
        mc_peer_print_json(&rs);
        mc_peer_print_json(&rg);
        keep_best(&g_redis_get, &rg);
        if (g_redis_unix) { /* the same host's peer: Redis at its own best same-host transport */
            mc_peer_redis_benchmark_via(MC_PEER_REDIS_UNIX, 4096, 50, 400000, 16, &rs, &rg);
            mc_peer_print_json(&rs);
            mc_peer_print_json(&rg);
            keep_best(&g_redis_unix_get, &rg);
        }
    }
    g_have_peers = 1;
}

/* Result for protocol/op/block/batch with the fewest threads (1 when it ran: the peers are
 * single clients too); best gib_s among equal thread counts. NULL if none ran. */
static const case_result_t *find_result(const char *protocol, mc_te_opcode_t op, size_t block,
                                        size_t batch)
{
    const case_result_t *best = NULL;
    for (size_t i = 0; i < g_n_results; i++) {
        const case_result_t *r = &g_results[i];
        if (!r->ok || strcmp(r->protocol, protocol) != 0 || r->cs.op != op ||
            r->cs.block != block || r->cs.batch != batch)
            continue;
        if (!best || r->cs.threads < best->cs.threads ||
            (r->cs.threads == best->cs.threads && r->gib_s > best->gib_s))
            best = r;
    }
    return best;
}

static int emit_ratio(const char *name, const case_result_t *r, double value, double target,
                      const char *unit_note)
{
    json_t *o = json_object();
    int pass = value >= target;
    json_object_set_new(o, "bench", json_string("te_ratio"));
    json_object_set_new(o, "name", json_string(name));
    json_object_set_new(o, "value", json_real(value));
    json_object_set_new(o, "target", json_real(target));
    json_object_set_new(o, "pass", json_boolean(pass));
    json_object_set_new(o, "threads", json_integer(r->cs.threads));
    json_object_set_new(o, "note", json_string(unit_note));
    json_emit(o);
    fprintf(stderr, "  %-40s %8.3f  (target >= %.2f)  %s\n", name, value, target,
            pass ? "PASS" : "MISS");
    return pass;
}

static void print_ratios(void)
{
    fprintf(stderr, "\nmc_te_bench: targets (same run)\n");
    char name[128], note[160];
    size_t pb = g.peer_block;
    static const mc_te_opcode_t ops[] = {MC_TE_READ, MC_TE_WRITE};
    for (int k = 0; k < 2; k++) {
        const char *opn = ops[k] == MC_TE_READ ? "read" : "write";
        const case_result_t *r = find_result("tcp", ops[k], pb, 1);
        if (r && g_mcd_get.ok) {
            snprintf(name, sizeof(name), "tcp_%s_%zuMiB_vs_memcached_get", opn, pb >> 20);
            snprintf(note, sizeof(note), "te %.3f GiB/s / memcached GET %.3f GiB/s (better of before/after)", r->gib_s,
                     g_mcd_get.gib_s);
            emit_ratio(name, r, r->gib_s / g_mcd_get.gib_s, 1.0, note);
        }
    }
    for (int k = 0; k < 2; k++) {
        const char *opn = ops[k] == MC_TE_READ ? "read" : "write";
        const case_result_t *r = find_result("shm", ops[k], pb, 1);
        if (r && g_memcpy.ok) {
            snprintf(name, sizeof(name), "shm_%s_%zuMiB_vs_memcpy", opn, pb >> 20);
            snprintf(note, sizeof(note), "te %.3f GiB/s / memcpy %.3f GiB/s (better of before/after)", r->gib_s,
                     g_memcpy.gib_s);
            emit_ratio(name, r, r->gib_s / g_memcpy.gib_s, 0.7, note);
        }
    }
    for (int k = 0; k < 2; k++) {
        const char *opn = ops[k] == MC_TE_READ ? "read" : "write";
        const case_result_t *best = find_result("tcp", ops[k], 4096, 128);
        if (best) {
            snprintf(name, sizeof(name), "tcp_%s_4KiB_batch128_req_s_vs_200k", opn);
            snprintf(note, sizeof(note), "te %.0f req/s / 200000", best->req_s);
            emit_ratio(name, best, best->req_s / 200000.0, 1.0, note);
        }
    }
    const case_result_t *r4k = find_result("tcp", MC_TE_READ, 4096, 128);
    if (r4k && g_redis_get.ok && g_redis_get.req_s > 0) {
        snprintf(note, sizeof(note), "te %.0f req/s / redis GET -c 50 -P 16 %.0f req/s", r4k->req_s,
                 g_redis_get.req_s);
        emit_ratio("tcp_read_4KiB_batch128_vs_redis_get_p16", r4k, r4k->req_s / g_redis_get.req_s,
                   1.5, note);
    }
    const case_result_t *s4k = find_result("shm", MC_TE_READ, 4096, 128);
    if (s4k && g_redis_unix_get.ok && g_redis_unix_get.req_s > 0) {
        snprintf(note, sizeof(note), "te %.0f req/s / redis unix-socket GET -c 50 -P 16 %.0f req/s",
                 s4k->req_s, g_redis_unix_get.req_s);
        emit_ratio("shm_read_4KiB_batch128_vs_redis_unix_get_p16", s4k,
                   s4k->req_s / g_redis_unix_get.req_s, 1.5, note);
    }
    if (g_iperf.ok) {
        const case_result_t *r = find_result("tcp", MC_TE_READ, pb, 1);
        if (r)
            fprintf(stderr, "  (for reference: tcp read %zu MiB = %.2fx one iperf3 stream %.2f GiB/s)\n",
                    pb >> 20, r->gib_s / g_iperf.gib_s, g_iperf.gib_s);
    }
}

/* ----------------------------------------------------------------------------- drivers -- */

static int run_initiator(pid_t target_pid)
{
    list_t protos, ops, blocks, batches, threads;
    if (list_parse("protocol", g.protocol, 0, &protos) || list_parse("op", g.op, 0, &ops) ||
        list_parse("block_sizes", g.block_sizes, 1, &blocks) ||
        list_parse("batch_size", g.batch_size, 1, &batches) ||
        list_parse("threads", g.threads, 1, &threads))
        return 2;
    for (size_t i = 0; i < protos.n; i++)
        if (strcmp(protos.s[i], "tcp") && strcmp(protos.s[i], "shm") && strcmp(protos.s[i], "auto")) {
            fprintf(stderr, "mc_te_bench: unknown protocol '%s' (tcp, shm, auto)\n", protos.s[i]);
            return 2;
        }
    for (size_t i = 0; i < ops.n; i++)
        if (strcmp(ops.s[i], "read") && strcmp(ops.s[i], "write")) {
            fprintf(stderr, "mc_te_bench: unknown op '%s' (read, write)\n", ops.s[i]);
            return 2;
        }
    for (size_t i = 0; i < threads.n; i++)
        if (threads.v[i] > MAX_THREADS) {
            fprintf(stderr, "mc_te_bench: at most %d threads\n", MAX_THREADS);
            return 2;
        }
    for (size_t i = 0; i < batches.n; i++)
        if (batches.v[i] > MC_TE_MAX_BATCH) {
            fprintf(stderr, "mc_te_bench: batch size at most %d\n", MC_TE_MAX_BATCH);
            return 2;
        }
    if (wait_mode(g.wait) < 0) {
        fprintf(stderr, "mc_te_bench: --wait must be sync, poll, checked or hashed\n");
        return 2;
    }
    if (!g.target[0]) {
        fprintf(stderr, "mc_te_bench: --target NAME is required for the initiator role\n");
        return 2;
    }
    for (size_t i = 0; i < protos.n; i++)
        g_redis_unix |= g.redis && strcmp(protos.s[i], "shm") == 0;
    if (g.peers)
        run_peers(0);

    uint8_t *local = mc_pages_alloc(g.buffer_size, 1);
    if (!local) {
        fprintf(stderr, "mc_te_bench: cannot allocate %" PRIu64 " bytes\n", g.buffer_size);
        return 1;
    }
    int failures = 0;
    size_t usable = g.buffer_size - VERIFY_TAIL;
    uint64_t cap = g.max_case_bytes ? g.max_case_bytes : usable;
    if (cap > usable)
        cap = usable;
    if (g.matrix) {
        for (size_t p = 0; p < protos.n; p++) {
            bench_ctx_t ctx;
            if (ctx_open(&ctx, protos.s[p], local) != 0) {
                failures++;
                ctx_close(&ctx);
                continue;
            }
            for (size_t o = 0; o < ops.n; o++)
                for (size_t b = 0; b < blocks.n; b++)
                    for (size_t n = 0; n < batches.n; n++)
                        for (size_t t = 0; t < threads.n; t++) {
                            case_spec_t cs = {
                                .op = strcmp(ops.s[o], "read") == 0 ? MC_TE_READ : MC_TE_WRITE,
                                .block = blocks.v[b],
                                .batch = batches.v[n],
                                .threads = (unsigned)threads.v[t],
                            };
                            if ((double)cs.block * cs.batch * cs.threads > (double)cap) {
                                fprintf(stderr, "mc_te_bench: skip %s %s block %zu batch %zu "
                                        "threads %u: more than %" PRIu64 " bytes per round\n",
                                        protos.s[p], ops.s[o], cs.block, cs.batch, cs.threads, cap);
                                continue;
                            }
                            failures += run_case(&ctx, &cs);
                        }
            ctx_close(&ctx);
        }
    }
    if (g.peers && g.matrix)
        run_peers(1);
    if (g.peers && g_have_peers)
        print_ratios();
    if (g.soak > 0) {
        bench_ctx_t ctxs[MAX_LIST];
        size_t n = 0;
        for (size_t p = 0; p < protos.n; p++) {
            if (ctx_open(&ctxs[n], protos.s[p], local) != 0) {
                ctx_close(&ctxs[n]);
                failures++;
                continue;
            }
            n++;
        }
        fprintf(stderr, "mc_te_bench: soak for %" PRId64 " s over %zu engine(s), %" PRId64
                " threads\n", g.soak, n, g.soak_threads);
        if (n)
            failures += run_soak(ctxs, n, target_pid);
        for (size_t i = 0; i < n; i++)
            ctx_close(&ctxs[i]);
    }
    mc_pages_free(local, g.buffer_size);
    return failures ? 1 : 0;
}

/* Start "<self> --role target ..." and read its SEGMENT line (deadline 20 s). */
static pid_t spawn_target(char *name_out, size_t name_cap)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return -1;
    self[n] = '\0';
    char size_s[32], timeout_s[32], tc_s[32], wt_s[32];
    snprintf(size_s, sizeof(size_s), "%" PRIu64, g.buffer_size);
    snprintf(timeout_s, sizeof(timeout_s), "%" PRId64, g.timeout_ms);
    snprintf(tc_s, sizeof(tc_s), "%" PRId64, g.tcp_connections);
    snprintf(wt_s, sizeof(wt_s), "%" PRId64, g.worker_threads);
    char *argv[] = {self, "--role", "target", "--buffer_size", size_s, "--target_mem",
                    (char *)g.target_mem, "--metadata_server", (char *)g.metadata_server,
                    "--local_server_name", (char *)g.local_server_name, "--timeout_ms",
                    timeout_s, "--tcp_connections", tc_s, "--worker_threads", wt_s,
                    "--log_level", (char *)g.log_level, NULL};
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0)
        return -1;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(127);
        dup2(pfd[1], 1);
        execv(self, argv);
        _exit(127);
    }
    close(pfd[1]);
    /* The target prints the line right after registering; a dead target closes the pipe. */
    char line[1024];
    size_t len = 0;
    int got = 0;
    uint64_t deadline = mc_now_ms() + 30000;
    while (len + 1 < sizeof(line) && mc_now_ms() < deadline) {
        struct pollfd pf = {.fd = pfd[0], .events = POLLIN};
        int pr = poll(&pf, 1, 100);
        if (pr < 0 && errno != EINTR)
            break;
        if (pr <= 0)
            continue;
        ssize_t r = read(pfd[0], line + len, 1);
        if (r <= 0)
            break;
        if (line[len] == '\n')
            break;
        len++;
    }
    line[len] = '\0';
    close(pfd[0]);
    char nm[MC_TE_NAME_MAX];
    if (sscanf(line, "SEGMENT %255s", nm) == 1) {
        snprintf(name_out, name_cap, "%s", nm);
        got = 1;
    }
    if (!got) {
        fprintf(stderr, "mc_te_bench: the target did not report its segment\n");
        mc_peer_stop_child(pid, 3000);
        return -1;
    }
    return pid;
}

int main(int argc, char **argv)
{
    mc_config_spec_t spec = {
        .program = "mc_te_bench",
        .summary = "Transfer Engine benchmark: target and initiator roles in separate processes; "
                   "one JSON line per (op, block, batch, threads, protocol) on stdout.",
        .options = g_options,
        .n_options = MC_ARRAY_LEN(g_options),
    };
    int help = 0;
    if (mc_config_parse(&spec, argc, argv, &help) != MC_OK)
        return 2;
    if (help)
        return 0;
    mc_log_level_t lvl;
    if (mc_log_level_parse(g.log_level, &lvl) != MC_OK) {
        fprintf(stderr, "mc_te_bench: bad --log_level %s\n", g.log_level);
        return 2;
    }
    mc_log_set_level(lvl);
    signal(SIGPIPE, SIG_IGN);
    mc_peer_date(g_date, sizeof(g_date));
    mc_peer_host(g_host, sizeof(g_host));

    if (strcmp(g.role, "target") == 0)
        return run_target();
    if (strcmp(g.role, "initiator") == 0)
        return run_initiator((pid_t)g.target_pid);
    if (strcmp(g.role, "all") != 0) {
        fprintf(stderr, "mc_te_bench: --role must be target, initiator or all\n");
        return 2;
    }
    char name[MC_TE_NAME_MAX];
    pid_t tpid = spawn_target(name, sizeof(name));
    if (tpid < 0)
        return 1;
    g.target = name;
    int rc = run_initiator(tpid);
    /* Stop the target by PID and check that it shut down cleanly. */
    kill(tpid, SIGTERM);
    int wst = 0;
    uint64_t deadline = mc_now_ms() + 10000;
    pid_t w;
    while ((w = waitpid(tpid, &wst, WNOHANG)) == 0 && mc_now_ms() < deadline)
        mc_sleep_ms(10);
    if (w != tpid) {
        fprintf(stderr, "mc_te_bench: target did not exit within 10 s of SIGTERM; killing it\n");
        kill(tpid, SIGKILL);
        waitpid(tpid, &wst, 0);
        rc = rc ? rc : 1;
    } else if (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0) {
        fprintf(stderr, "mc_te_bench: target exited badly (status 0x%x)\n", wst);
        rc = rc ? rc : 1;
    }
    for (int i = 0; i < 8; i++)
        mc_free(g_list_storage[i]);
    return rc;
}
