/* mc_te_demo: the Transfer Engine between two processes, using only the public API
 * (include/mooncake/te.h, linked against libmooncake.so). scripts/demo.sh drives it:
 *
 *   mc_te_demo target [SIZE_MIB]     create an engine (P2PHANDSHAKE), allocate shareable
 *                                    memory, fill it with the target's pattern, register it,
 *                                    print "SEGMENT <name>" and serve until SIGTERM; then print
 *                                    "TARGET_HASH <xxh3 of the whole buffer>" and exit 0.
 *   mc_te_demo initiator NAME [SIZE_MIB]
 *                                    for tcp and shm: READ the target's pattern and check it
 *                                    (bytes produced by the other process), WRITE our own
 *                                    pattern and READ it back, for a few request sizes; print a
 *                                    table; finally WRITE a last pattern over the whole target
 *                                    buffer and print "EXPECT_TARGET_HASH <xxh3>" so that the
 *                                    script can compare it with what the target saw.
 */
#include "mooncake/log.h"
#include "mooncake/te.h"
#include "pattern.h"
#include "te_env.h"

#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define TARGET_SEED 0x64656d6f5f746775ull

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static mc_te_t *engine(const char *protocol)
{
    mc_te_config_t cfg = {.metadata_uri = "P2PHANDSHAKE",
                          .local_server_name = "127.0.0.1:0",
                          .protocol = protocol};
    char err[256];
    if (mc_tool_te_config_from_env(&cfg, err, sizeof(err)) != MC_OK) {
        fprintf(stderr, "mc_te_demo: %s\n", err);
        return NULL;
    }
    mc_te_t *te = NULL;
    mc_status_t st = mc_te_create(&cfg, &te);
    if (st != MC_OK) {
        fprintf(stderr, "mc_te_demo: mc_te_create(%s): %s\n", protocol, mc_status_str(st));
        return NULL;
    }
    return te;
}

static int run_target(size_t size)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    mc_te_t *te = engine("auto");
    if (!te)
        return 1;
    void *buf = mc_te_alloc_shareable(te, size);
    if (!buf) {
        fprintf(stderr, "mc_te_demo: cannot allocate %zu bytes of shareable memory\n", size);
        mc_te_destroy(te);
        return 1;
    }
    mc_tool_pattern_fill(buf, size, TARGET_SEED, 0);
    mc_status_t st = mc_te_register(te, buf, size, "cpu:0");
    if (st != MC_OK) {
        fprintf(stderr, "mc_te_demo: register: %s\n", mc_status_str(st));
        return 1;
    }
    printf("SEGMENT %s\n", mc_te_local_name(te));
    fflush(stdout);
    int sig;
    sigwait(&set, &sig);
    /* Unregister first: after it returns no transfer touches the buffer any more. */
    st = mc_te_unregister(te, buf);
    printf("TARGET_HASH %016" PRIx64 "\n", (uint64_t)XXH3_64bits(buf, size));
    fflush(stdout);
    mc_te_free_shareable(te, buf);
    mc_te_destroy(te);
    return st == MC_OK ? 0 : 1;
}

typedef struct row {
    const char *protocol, *op;
    size_t block, count;
    double secs;
    int ok;
} row_t;

/* Move `count` requests of `block` bytes (one batch) `rounds` times; returns seconds. */
static int move(mc_te_t *te, mc_te_segment_t seg, mc_te_opcode_t op, uint8_t *local,
                uint64_t remote, size_t block, size_t count, int rounds, double *secs_p)
{
    mc_te_request_t *reqs = calloc(count, sizeof(*reqs));
    if (!reqs)
        return -1;
    for (size_t i = 0; i < count; i++)
        reqs[i] = (mc_te_request_t){.opcode = op, .local = local + i * block, .target = seg,
                                    .target_addr = remote + i * block, .length = block};
    double t0 = now_s();
    mc_status_t st = MC_OK;
    for (int r = 0; r < rounds && st == MC_OK; r++)
        st = mc_te_transfer_sync(te, reqs, count, NULL);
    *secs_p = now_s() - t0;
    free(reqs);
    if (st != MC_OK)
        fprintf(stderr, "mc_te_demo: transfer failed: %s\n", mc_status_str(st));
    return st == MC_OK ? 0 : -1;
}

static int run_initiator(const char *target, size_t size)
{
    static const char *protocols[] = {"tcp", "shm"};
    static const struct { size_t block, count; int rounds; } shapes[] = {
        {4096, 128, 200},
        {1u << 20, 8, 50},
        {32u << 20, 1, 20},
    };
    uint8_t *local = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS |
                          MAP_POPULATE, -1, 0);
    uint8_t *want = malloc(size);
    if (local == MAP_FAILED || !want) {
        fprintf(stderr, "mc_te_demo: out of memory\n");
        return 1;
    }
    row_t rows[32];
    size_t n_rows = 0;
    int failures = 0;
    for (size_t p = 0; p < 2; p++) {
        mc_te_t *te = engine(protocols[p]);
        if (!te)
            return 1;
        mc_te_segment_t seg;
        uint64_t remote;
        mc_status_t st = mc_te_register(te, local, size, "cpu:0");
        if (st == MC_OK)
            st = mc_te_segment_open(te, target, &seg);
        if (st == MC_OK)
            st = mc_te_segment_first_buffer(te, seg, &remote);
        if (st != MC_OK) {
            fprintf(stderr, "mc_te_demo: %s: open %s: %s\n", protocols[p], target,
                    mc_status_str(st));
            mc_te_destroy(te);
            return 1;
        }
        if (p == 0) {
            /* Bytes written by the other process: READ the whole target buffer once. */
            double secs;
            memset(local, 0, size);
            mc_tool_pattern_fill(want, size, TARGET_SEED, 0);
            int ok = move(te, seg, MC_TE_READ, local, remote, size, 1, 1, &secs) == 0 &&
                     memcmp(local, want, size) == 0;
            rows[n_rows++] = (row_t){protocols[p], "read*", size, 1, secs, ok};
            failures += !ok;
        }
        for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
            size_t block = shapes[s].block, count = shapes[s].count, total = block * count;
            if (total > size)
                continue;
            uint64_t seed = ((uint64_t)p << 32) ^ (s + 1) ^ (uint64_t)time(NULL);
            double wsecs = 0, rsecs = 0;
            mc_tool_pattern_fill(local, total, seed, 0);
            memcpy(want, local, total);
            int wok = move(te, seg, MC_TE_WRITE, local, remote, block, count, shapes[s].rounds,
                           &wsecs) == 0;
            memset(local, 0, total);
            int rok = wok && move(te, seg, MC_TE_READ, local, remote, block, count,
                                  shapes[s].rounds, &rsecs) == 0 &&
                      memcmp(local, want, total) == 0;
            rows[n_rows++] = (row_t){protocols[p], "write", block, count * shapes[s].rounds,
                                     wsecs, wok && rok};
            rows[n_rows++] = (row_t){protocols[p], "read", block, count * shapes[s].rounds,
                                     rsecs, rok};
            failures += !(wok && rok);
        }
        if (p == 1) {
            /* Last word: our pattern over the whole target buffer; the target hashes it. */
            double secs;
            mc_tool_pattern_fill(local, size, 0x6c617374ull, 0);
            if (move(te, seg, MC_TE_WRITE, local, remote, size, 1, 1, &secs) == 0)
                printf("EXPECT_TARGET_HASH %016" PRIx64 "\n", (uint64_t)XXH3_64bits(local, size));
            else
                failures++;
        }
        mc_te_segment_close(te, seg);
        mc_te_unregister(te, local);
        mc_te_destroy(te);
    }
    printf("\n%-8s %-6s %10s %8s %10s %12s  %s\n", "protocol", "op", "request", "count", "GiB/s",
           "requests/s", "data");
    for (size_t i = 0; i < n_rows; i++) {
        const row_t *r = &rows[i];
        char sz[32];
        if (r->block >= (1u << 20))
            snprintf(sz, sizeof(sz), "%zu MiB", r->block >> 20);
        else
            snprintf(sz, sizeof(sz), "%zu KiB", r->block >> 10);
        double gib = (double)r->block * (double)r->count / r->secs / (1024.0 * 1024 * 1024);
        printf("%-8s %-6s %10s %8zu %10.2f %12.0f  %s\n", r->protocol, r->op, sz, r->count, gib,
               (double)r->count / r->secs, r->ok ? "verified" : "MISMATCH");
    }
    printf("(read* = the target's own pattern, checked byte for byte)\n");
    fflush(stdout);
    munmap(local, size);
    free(want);
    return failures ? 1 : 0;
}

static const char USAGE[] =
    "usage: mc_te_demo target [SIZE_MIB] | initiator SEGMENT [SIZE_MIB]\n"
    "  SIZE_MIB: the shared buffer, 1..65536 MiB (default 64)\n"
    "(scripts/demo.sh runs both on loopback)\n";

/* argv[i] as SIZE_MIB in bytes (absent: 64 MiB); 0 if it is not a whole number in 1..65536. */
static size_t size_arg(int argc, char **argv, int i)
{
    if (i >= argc)
        return (size_t)64 << 20;
    char *end;
    unsigned long mib = strtoul(argv[i], &end, 10);
    if (end == argv[i] || *end || argv[i][0] == '-' || mib < 1 || mib > 65536)
        return 0;
    return (size_t)mib << 20;
}

int main(int argc, char **argv)
{
    mc_log_set_level(MC_LOG_LEVEL_WARN);
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(USAGE, stdout);
        return 0;
    }
    bool target = argc >= 2 && argc <= 3 && !strcmp(argv[1], "target");
    bool initiator = argc >= 3 && argc <= 4 && !strcmp(argv[1], "initiator");
    size_t size = target ? size_arg(argc, argv, 2) : initiator ? size_arg(argc, argv, 3) : 0;
    if (size && target)
        return run_target(size);
    if (size && initiator)
        return run_initiator(argv[2], size);
    fputs(USAGE, stderr);
    return 2;
}
