/* transfer_engine_bench: upstream Mooncake's Transfer Engine bandwidth benchmark, with its
 * flags, written against include/mooncake/te.h (our own benchmark with a matrix, latencies
 * and JSON output is bench/mc_te_bench.c).
 *
 *   --mode=target      create an engine, allocate and register --buffer_size bytes, print
 *                      "transfer_engine_bench ready segment=<name> buffer_size=<bytes>" on
 *                      stdout and serve until SIGINT/SIGTERM (exit 0).
 *   --mode=initiator   open the target's segment (--segment_id = the name the target printed)
 *                      and, with --threads threads, move batches of --batch_size requests of
 *                      --block_size bytes (--operation read or write) for --duration seconds,
 *                      then print upstream's result line on stdout:
 *                        Test completed: duration 10.00, batch count 1234, throughput 1.23 GB/s
 *                      Thread t's request i covers [block * (i * threads + t), + block) of
 *                      both buffers, as upstream lays them out. --verify (ours) then writes a
 *                      pattern over that whole range, reads it back and checks it.
 *
 * Upstream flags that name hardware we do not have are accepted and ignored (--device_name,
 * --nic_priority_matrix, --auto_discovery); protocols we do not have (rdma, efa, nvlink, ...)
 * and --backend=tent are refused with a message. Like upstream, a --buffer_size smaller than
 * block_size * batch_size * threads is raised to that with a warning. A bare --metadata_server
 * host:port means etcd, as upstream reads it. Exit status: 0, 1 on a failed run, 2 on a bad
 * flag. */
#include "mooncake/log.h"
#include "mooncake/te.h"

#include "common/alloc.h"
#include "common/config.h"
#include "common/log.h"

#include "pattern.h"
#include "te_env.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define PROG "transfer_engine_bench"
#define MAX_THREADS 1024

/* Option targets at file scope: parsed strings are kept for the process lifetime and must stay
 * reachable after main returns (LeakSanitizer). */
static struct {
    const char *mode;
    const char *operation;
    const char *metadata_server;
    const char *local_server_name;
    const char *segment_id;
    const char *protocol;
    const char *device_name;
    const char *nic_priority_matrix;
    uint64_t buffer_size;
    int64_t batch_size;
    uint64_t block_size;
    double duration;
    int64_t threads;
    bool auto_discovery;
    const char *report_unit;
    int64_t report_precision;
    const char *backend;
    bool verify;
    const char *log_level;
} g = {
    .mode = "initiator",
    .operation = "read",
    .metadata_server = "P2PHANDSHAKE",
    .local_server_name = NULL, /* set to the host name in main, as upstream */
    .segment_id = "",
    .protocol = "tcp",
    .device_name = "",
    .nic_priority_matrix = "",
    .buffer_size = 1ull << 30,
    .batch_size = 128,
    .block_size = 65536,
    .duration = 10,
    .threads = 12,
    .auto_discovery = false,
    .report_unit = "GB",
    .report_precision = 2,
    .backend = "classic",
    .verify = false,
    .log_level = "warn",
};

/* Report units, upstream's set: decimal bytes, binary bytes, decimal bits. */
static const struct {
    const char *name;
    double bytes;
} g_units[] = {
    {"GB", 1e9}, {"GiB", 1073741824.0}, {"Gb", 1e9 / 8}, {"MB", 1e6}, {"MiB", 1048576.0},
    {"Mb", 1e6 / 8}, {"KB", 1e3}, {"KiB", 1024.0}, {"Kb", 1e3 / 8},
};

/* Protocols of our engine (te.h) and upstream's that we do not have. */
static const char *const g_our_protocols[] = {"tcp", "shm", "auto", "ucx"};
static const char *const g_upstream_only[] = {"rdma", "barex", "efa", "nvlink", "hip",
                                               "nvmeof", "cxl", "ascend", "hccl", "mnnvl",
                                               "ubshmem", "intra_node_nvlink"};

static double unit_bytes(const char *name)
{
    for (size_t i = 0; i < MC_ARRAY_LEN(g_units); i++)
        if (strcmp(g_units[i].name, name) == 0)
            return g_units[i].bytes;
    return 0;
}

static bool in_list(const char *s, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(s, list[i]) == 0)
            return true;
    return false;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Checks the flags together (each one's range is checked by the parser). 0, or 2 after a
 * message on stderr. Raises buffer_size as upstream does. */
static int validate(void)
{
    if (strcmp(g.mode, "initiator") != 0 && strcmp(g.mode, "target") != 0) {
        fprintf(stderr, PROG ": --mode must be initiator or target, got '%s'\n", g.mode);
        return 2;
    }
    if (strcmp(g.operation, "read") != 0 && strcmp(g.operation, "write") != 0) {
        fprintf(stderr, PROG ": --operation must be read or write, got '%s'\n", g.operation);
        return 2;
    }
    if (strcmp(g.backend, "classic") != 0) {
        fprintf(stderr, PROG ": --backend must be classic, got '%s' (Mooncake-C has one transfer "
                "engine; upstream's tent backend does not exist here)\n", g.backend);
        return 2;
    }
    if (in_list(g.protocol, g_upstream_only, MC_ARRAY_LEN(g_upstream_only))) {
        fprintf(stderr, PROG ": --protocol=%s is not available in Mooncake-C (no RDMA or GPU "
                "transports); use --protocol=tcp (or shm, auto, ucx)\n", g.protocol);
        return 2;
    }
    if (!in_list(g.protocol, g_our_protocols, MC_ARRAY_LEN(g_our_protocols))) {
        fprintf(stderr, PROG ": --protocol must be tcp, shm, auto or ucx, got '%s'\n",
                g.protocol);
        return 2;
    }
    if (unit_bytes(g.report_unit) == 0) {
        fprintf(stderr, PROG ": --report_unit must be one of GB|GiB|Gb|MB|MiB|Mb|KB|KiB|Kb, got "
                "'%s'\n", g.report_unit);
        return 2;
    }
    if (!*g.metadata_server) {
        fprintf(stderr, PROG ": --metadata_server must not be empty (P2PHANDSHAKE, "
                "http://host:port/metadata, etcd://host:port or host:port)\n");
        return 2;
    }
    if (!*g.local_server_name || strlen(g.local_server_name) >= MC_TE_NAME_MAX - 8) {
        fprintf(stderr, PROG ": --local_server_name must be a host or host:port of at most %d "
                "characters\n", MC_TE_NAME_MAX - 9);
        return 2;
    }
    if (strcmp(g.mode, "initiator") == 0 && !*g.segment_id) {
        fprintf(stderr, PROG ": --segment_id is required with --mode=initiator: the target's "
                "server name, which the target prints as 'segment=<name>'\n");
        return 2;
    }
    if (strlen(g.segment_id) >= MC_TE_NAME_MAX) {
        fprintf(stderr, PROG ": --segment_id is longer than %d characters\n", MC_TE_NAME_MAX - 1);
        return 2;
    }
    /* Sizes: at most 1 TiB per request and per buffer, so their product cannot overflow. */
    uint64_t need = g.block_size * (uint64_t)g.batch_size * (uint64_t)g.threads;
    if (need / g.block_size / (uint64_t)g.threads != (uint64_t)g.batch_size ||
        need > (1ull << 40)) {
        fprintf(stderr, PROG ": block_size * batch_size * threads is over 1 TiB\n");
        return 2;
    }
    if (g.buffer_size < need) {
        MC_LOG_WARN(PROG ": --buffer_size %" PRIu64 " is smaller than block_size * batch_size * "
                    "threads; raised to %" PRIu64, g.buffer_size, need);
        g.buffer_size = need;
    }
    return 0;
}

/* Bare host:port means etcd (upstream's reading); other spellings go to the engine as they
 * are. Returns a static buffer or the flag itself. */
static const char *metadata_uri(void)
{
    static char uri[1024];
    const char *m = g.metadata_server;
    if (strcasecmp(m, "P2PHANDSHAKE") == 0 || strstr(m, "://"))
        return m;
    snprintf(uri, sizeof(uri), "etcd://%s", m);
    return uri;
}

static mc_te_t *engine_create(void)
{
    mc_te_config_t cfg = {.metadata_uri = metadata_uri(),
                          .local_server_name = g.local_server_name,
                          .protocol = g.protocol};
    char err[256];
    if (mc_tool_te_config_from_env(&cfg, err, sizeof(err)) != MC_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        return NULL;
    }
    mc_te_t *te = NULL;
    mc_status_t st = mc_te_create(&cfg, &te);
    if (st != MC_OK) {
        char shown[1024];
        fprintf(stderr, PROG ": cannot start the transfer engine (metadata %s, local server name "
                "%s, protocol %s): %s\n",
                mc_te_metadata_uri_for_log(cfg.metadata_uri, shown, sizeof(shown)),
                g.local_server_name, g.protocol, mc_status_str(st));
        return NULL;
    }
    return te;
}

/* Engine-allocated memory (same-host peers can map it), registered. NULL after a message. */
static void *buffer_create(mc_te_t *te)
{
    void *buf = mc_te_alloc_shareable(te, g.buffer_size);
    if (!buf) {
        fprintf(stderr, PROG ": cannot allocate --buffer_size=%" PRIu64 " bytes\n",
                g.buffer_size);
        return NULL;
    }
    mc_status_t st = mc_te_register(te, buf, g.buffer_size, "cpu:0");
    if (st != MC_OK) {
        fprintf(stderr, PROG ": cannot register the buffer: %s\n", mc_status_str(st));
        mc_te_free_shareable(te, buf);
        return NULL;
    }
    return buf;
}

static void buffer_destroy(mc_te_t *te, void *buf)
{
    mc_status_t st = mc_te_unregister(te, buf);
    if (st != MC_OK) { /* transfers still touch it: leave the memory to the process exit */
        MC_LOG_WARN(PROG ": unregister: %s", mc_status_str(st));
        return;
    }
    mc_te_free_shareable(te, buf);
}

/* ------------------------------------------------------------------------------- target -- */

static int run_target(void)
{
    /* Stop signals are taken by sigwait only: block them before the engine starts threads. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    mc_te_t *te = engine_create();
    if (!te)
        return 1;
    void *buf = buffer_create(te);
    if (!buf) {
        mc_te_destroy(te);
        return 1;
    }
    printf(PROG " ready segment=%s buffer_size=%" PRIu64 "\n", mc_te_local_name(te),
           g.buffer_size);
    fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    MC_LOG_INFO(PROG ": signal %d, stopping", sig);
    buffer_destroy(te, buf);
    mc_te_destroy(te);
    return 0;
}

/* ---------------------------------------------------------------------------- initiator -- */

typedef struct run {
    mc_te_t *te;
    mc_te_segment_t seg;
    uint8_t *local;
    uint64_t remote;
    mc_te_opcode_t op;
    atomic_bool stop;
    atomic_int failed; /* first failure's status, 0 = none */
} run_t;

typedef struct worker {
    run_t *run;
    pthread_t tid;
    int index;
    uint64_t batches;
} worker_t;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    run_t *r = w->run;
    size_t n = (size_t)g.batch_size;
    mc_te_request_t *reqs = mc_calloc(n, sizeof(*reqs));
    if (!reqs) {
        int zero = 0;
        atomic_compare_exchange_strong(&r->failed, &zero, MC_ERR_NO_MEMORY);
        atomic_store(&r->stop, true);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t off = g.block_size * (i * (uint64_t)g.threads + (uint64_t)w->index);
        reqs[i] = (mc_te_request_t){.opcode = r->op, .local = r->local + off, .target = r->seg,
                                    .target_addr = r->remote + off, .length = g.block_size};
    }
    while (!atomic_load_explicit(&r->stop, memory_order_relaxed)) {
        mc_status_t st = mc_te_transfer_sync(r->te, reqs, n, NULL);
        if (st != MC_OK) {
            int zero = 0;
            atomic_compare_exchange_strong(&r->failed, &zero, st);
            atomic_store(&r->stop, true);
            break;
        }
        w->batches++;
    }
    mc_free(reqs);
    return NULL;
}

/* Sleeps for --duration seconds, or less if SIGINT/SIGTERM (blocked by the caller) arrives or
 * a worker fails. */
static void wait_duration(run_t *r, const sigset_t *set)
{
    double end = now_s() + g.duration;
    while (!atomic_load(&r->stop)) {
        double left = end - now_s();
        if (left <= 0)
            break;
        if (left > 0.05)
            left = 0.05; /* wake up now and then to see a failed worker */
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(left * 1e9)};
        int sig = sigtimedwait(set, NULL, &ts);
        if (sig > 0) {
            MC_LOG_WARN(PROG ": signal %d, stopping early", sig);
            break;
        }
    }
    atomic_store(&r->stop, true);
}

/* Moves [0, len) of the local buffer to the same offsets of the target in requests of at most
 * block_size bytes, batch_size per call. */
static mc_status_t move_range(run_t *r, mc_te_opcode_t op, uint64_t len)
{
    size_t n = (size_t)g.batch_size;
    mc_te_request_t *reqs = mc_calloc(n, sizeof(*reqs));
    if (!reqs)
        return MC_ERR_NO_MEMORY;
    mc_status_t st = MC_OK;
    for (uint64_t off = 0; off < len && st == MC_OK;) {
        size_t k = 0;
        for (; k < n && off < len; k++) {
            uint64_t piece = len - off < g.block_size ? len - off : g.block_size;
            reqs[k] = (mc_te_request_t){.opcode = op, .local = r->local + off, .target = r->seg,
                                        .target_addr = r->remote + off, .length = piece};
            off += piece;
        }
        st = mc_te_transfer_sync(r->te, reqs, k, NULL);
    }
    mc_free(reqs);
    return st;
}

/* --verify: the range the run used goes out with a fresh pattern and comes back. 0 or 1. */
static int verify(run_t *r)
{
    uint64_t len = g.block_size * (uint64_t)g.batch_size * (uint64_t)g.threads;
    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    mc_tool_pattern_fill(r->local, len, seed, 0);
    mc_status_t st = move_range(r, MC_TE_WRITE, len);
    if (st == MC_OK) {
        memset(r->local, 0, len);
        st = move_range(r, MC_TE_READ, len);
    }
    if (st != MC_OK) {
        fprintf(stderr, PROG ": verify: transfer failed: %s\n", mc_status_str(st));
        return 1;
    }
    int64_t bad = mc_tool_pattern_check(r->local, len, seed, 0);
    if (bad >= 0) {
        fprintf(stderr, PROG ": verify: MISMATCH at byte %" PRId64 " of %" PRIu64 " written to "
                "and read back from %s\n", bad, len, g.segment_id);
        return 1;
    }
    printf("Verify: %" PRIu64 " bytes written to and read back from %s: ok\n", len,
           g.segment_id);
    return 0;
}

static int run_initiator(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    int rc = 1;
    run_t r = {.op = strcmp(g.operation, "write") == 0 ? MC_TE_WRITE : MC_TE_READ};
    worker_t *workers = mc_calloc((size_t)g.threads, sizeof(*workers));
    r.te = workers ? engine_create() : NULL;
    if (!r.te)
        goto out_workers;
    r.local = buffer_create(r.te);
    if (!r.local)
        goto out_engine;
    mc_status_t st = mc_te_segment_open(r.te, g.segment_id, &r.seg);
    if (st == MC_OK)
        st = mc_te_segment_first_buffer(r.te, r.seg, &r.remote);
    if (st != MC_OK) {
        char shown[1024];
        fprintf(stderr, PROG ": cannot open segment '%s' (--segment_id: the target's server name) "
                "through %s: %s\n", g.segment_id,
                mc_te_metadata_uri_for_log(metadata_uri(), shown, sizeof(shown)),
                mc_status_str(st));
        goto out_buffer;
    }

    int started = 0;
    double t0 = now_s();
    for (; started < g.threads; started++) {
        workers[started] = (worker_t){.run = &r, .index = started};
        if (pthread_create(&workers[started].tid, NULL, worker_main, &workers[started]) != 0) {
            fprintf(stderr, PROG ": cannot start thread %d of %" PRId64 "\n", started + 1,
                    g.threads);
            atomic_store(&r.stop, true);
            break;
        }
    }
    if (started == g.threads)
        wait_duration(&r, &set);
    uint64_t batches = 0;
    for (int i = 0; i < started; i++) {
        pthread_join(workers[i].tid, NULL);
        batches += workers[i].batches;
    }
    double secs = now_s() - t0;
    int failed = atomic_load(&r.failed);
    if (started != g.threads) {
        goto out_segment;
    } else if (failed) {
        fprintf(stderr, PROG ": transfer to %s failed: %s (is the target's --buffer_size at "
                "least %" PRIu64 "?)\n", g.segment_id, mc_status_str((mc_status_t)failed),
                g.block_size * (uint64_t)g.batch_size * (uint64_t)g.threads);
        goto out_segment;
    }
    double bytes = (double)batches * (double)g.batch_size * (double)g.block_size;
    printf("Test completed: duration %.2f, batch count %" PRIu64 ", throughput %.*f %s/s\n",
           secs, batches, (int)g.report_precision, bytes / secs / unit_bytes(g.report_unit),
           g.report_unit);
    fflush(stdout);
    rc = g.verify ? verify(&r) : 0;
    fflush(stdout);
out_segment:
    mc_te_segment_close(r.te, r.seg);
out_buffer:
    buffer_destroy(r.te, r.local);
out_engine:
    mc_te_destroy(r.te);
out_workers:
    if (!workers)
        fprintf(stderr, PROG ": out of memory\n");
    mc_free(workers);
    return rc;
}

int main(int argc, char **argv)
{
    static char host[256];
    if (gethostname(host, sizeof(host) - 1) != 0 || !host[0])
        snprintf(host, sizeof(host), "127.0.0.1");
    g.local_server_name = host;
    mc_log_set_level(MC_LOG_LEVEL_WARN);
    mc_option_t opts[] = {
        {"mode", MC_OPT_STRING, &g.mode, NULL,
         "initiator (moves blocks to or from the target) | target (serves a buffer)", 0, 0},
        {"operation", MC_OPT_STRING, &g.operation, NULL,
         "read (target -> initiator) | write (initiator -> target)", 0, 0},
        {"metadata_server", MC_OPT_STRING, &g.metadata_server, NULL,
         "P2PHANDSHAKE, http://host:port/metadata, etcd://host:port, or host:port (= etcd)", 0,
         0},
        {"local_server_name", MC_OPT_STRING, &g.local_server_name, NULL,
         "host or host:port this engine serves on (no port = a free one in 12300-14300; "
         "default: this host's name)", 0, 0},
        {"segment_id", MC_OPT_STRING, &g.segment_id, NULL,
         "initiator: the target's server name host:port (the target prints it)", 0, 0},
        {"protocol", MC_OPT_STRING, &g.protocol, NULL,
         "tcp | shm | auto | ucx (rdma and upstream's other transports are not available)", 0,
         0},
        {"device_name", MC_OPT_STRING, &g.device_name, NULL, "RDMA devices (accepted, unused)", 0,
         0},
        {"nic_priority_matrix", MC_OPT_STRING, &g.nic_priority_matrix, NULL,
         "RDMA NIC priority matrix file (accepted, unused)", 0, 0},
        {"buffer_size", MC_OPT_SIZE, &g.buffer_size, NULL,
         "bytes registered on each side (e.g. 1GiB); raised to block_size * batch_size * "
         "threads if smaller", 4096, 1099511627776.0},
        {"batch_size", MC_OPT_INT, &g.batch_size, NULL, "requests per batch", 1, MC_TE_MAX_BATCH},
        {"block_size", MC_OPT_SIZE, &g.block_size, NULL, "bytes per request", 1,
         1099511627776.0},
        {"duration", MC_OPT_DOUBLE, &g.duration, NULL, "seconds the initiator runs", 0.1, 86400},
        {"threads", MC_OPT_INT, &g.threads, NULL, "initiator's submitting threads", 1,
         MAX_THREADS},
        {"auto_discovery", MC_OPT_BOOL, &g.auto_discovery, NULL,
         "topology auto discovery (accepted, unused: no RDMA topology here)", 0, 0},
        {"report_unit", MC_OPT_STRING, &g.report_unit, NULL,
         "throughput unit: GB|GiB|Gb|MB|MiB|Mb|KB|KiB|Kb (Gb, Mb, Kb are bits)", 0, 0},
        {"report_precision", MC_OPT_INT, &g.report_precision, NULL,
         "digits after the point in the throughput", 0, 9},
        {"backend", MC_OPT_STRING, &g.backend, NULL, "classic (the only one)", 0, 0},
        {"verify", MC_OPT_BOOL, &g.verify, NULL,
         "initiator: after the run, write a pattern over the range it used, read it back and "
         "check it (not in upstream)", 0, 0},
        {"log_level", MC_OPT_STRING, &g.log_level, "MC_LOG_LEVEL", "debug|info|warn|error|off", 0,
         0},
    };
    mc_config_spec_t spec = {
        PROG,
        "Transfer Engine bandwidth benchmark with upstream Mooncake's flags. Start a target\n"
        "(--mode=target), then an initiator (--mode=initiator --segment_id=<the target's\n"
        "segment=...>) that reads or writes blocks of the target's buffer for --duration\n"
        "seconds and prints 'Test completed: duration D, batch count N, throughput X <unit>/s'.\n"
        "Engine tuning from the environment: MC_TE_* (tools/common/te_env.h).",
        opts, MC_ARRAY_LEN(opts)};
    int rc = mc_config_main(&spec, argc, argv);
    if (rc >= 0)
        return rc;
    rc = validate();
    if (rc)
        return rc;
    if (*g.device_name || *g.nic_priority_matrix || g.auto_discovery)
        MC_LOG_INFO(PROG ": --device_name, --nic_priority_matrix and --auto_discovery are "
                    "ignored (no RDMA)");
    return strcmp(g.mode, "target") == 0 ? run_target() : run_initiator();
}
