/* mc_disk_bench: the disk tier's storage engine (src/disk) against fio on the same file system
 * in the same run (docs/benchmarks.md, "Disk tier").
 *
 * For each value size (--sizes, default 4 MiB and 32 MiB) it puts --count objects into a store
 * in a fresh directory under --dir, reopens the store (everything sealed and synced), then
 * reads every object --reps times, one at a time (queue depth 1), in two modes:
 *   direct    no deadline: O_DIRECT straight into a registered, 4 KiB-aligned buffer;
 *   deadline  a deadline (never reached): through the store's own buffers plus a copy.
 * and runs fio reading the same size with O_DIRECT (--ioengine=io_uring, --iodepth=1,
 * sequential) on a file in the same directory. Then one batch: --batch objects of the first
 * size read with one mc_disk_store_read_batch (all submitted, then all reaped), against fio
 * with --iodepth=batch. Every read is verified (the store checks each checksum).
 *
 * Output, one JSON line each: {"bench":"disk_put"...}, {"bench":"disk_get"...} per size and
 * mode, {"bench":"disk_fio"...} per size and depth, {"bench":"disk_ratio"...} (store GB/s /
 * fio GB/s) per size and mode, {"bench":"disk_batch"...}. Without fio, the fio lines say
 * "skipped" and the ratios are null. */
#include "mooncake/log.h"

#include "common/config.h"
#include "common/hash.h"
#include "common/time.h"
#include "disk/disk_store.h"
#include "disk_fio.h"
#include "bench_stats.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GB 1e9
#define MAX_SIZES 8

static struct {
    const char *dir;
    const char *sizes;
    int64_t count, reps, batch;
    const char *fio;
    bool keep;
} o = {NULL, "4MiB,32MiB", 16, 3, 64, "fio", false};

static void key_of(char *k, size_t cap, uint64_t size, int64_t i)
{
    snprintf(k, cap, "bench-%llu-%lld", (unsigned long long)size, (long long)i);
}

/* Puts count objects of size bytes; prints the put line. 0 or -1. */
static int put_all(mc_disk_store_t *s, uint64_t size, int64_t count)
{
    uint8_t *v = aligned_alloc(4096, (size + 4095) / 4096 * 4096);
    if (!v)
        return -1;
    uint64_t t0 = mc_now_ns();
    for (int64_t i = 0; i < count; i++) {
        for (uint64_t k = 0; k < size; k += 8) {
            uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ull + k;
            memcpy(v + k, &x, 8);
        }
        char key[64];
        key_of(key, sizeof(key), size, i);
        mc_status_t st = mc_disk_store_put(s, NULL, key, strlen(key), v, size, mc_hash64(v, size));
        if (st != MC_OK) {
            fprintf(stderr, "mc_disk_bench: put failed: %s\n", mc_status_str(st));
            free(v);
            return -1;
        }
    }
    double sec = (double)(mc_now_ns() - t0) / 1e9;
    printf("{\"bench\":\"disk_put\",\"value\":%llu,\"count\":%lld,\"gbps\":%.3f}\n",
           (unsigned long long)size, (long long)count, (double)size * (double)count / sec / GB);
    free(v);
    return 0;
}

/* Reads every object reps times at queue depth 1; returns GB/s (or -1) and prints the line. */
static double get_all(mc_disk_store_t *s, uint64_t size, int64_t count, bool deadline, void *buf)
{
    size_t n = (size_t)(count * o.reps);
    uint64_t *lat = calloc(n, sizeof(*lat));
    uint64_t t0 = mc_now_ns();
    size_t k = 0;
    for (int64_t r = 0; r < o.reps; r++)
        for (int64_t i = 0; i < count; i++) {
            char key[64];
            key_of(key, sizeof(key), size, i);
            mc_disk_read_t rq = {.key = key, .key_len = strlen(key), .buf = buf, .cap = size};
            uint64_t t = mc_now_ns();
            mc_disk_store_read_batch(s, &rq, 1, deadline ? t + 60000000000ull : 0);
            lat[k++] = mc_now_ns() - t;
            if (rq.status != MC_OK) {
                fprintf(stderr, "mc_disk_bench: get failed: %s\n", mc_status_str(rq.status));
                free(lat);
                return -1;
            }
        }
    double sec = (double)(mc_now_ns() - t0) / 1e9;
    double gbps = (double)size * (double)n / sec / GB;
    printf("{\"bench\":\"disk_get\",\"value\":%llu,\"count\":%lld,\"reps\":%lld,\"mode\":\"%s\","
           "\"gbps\":%.3f,\"p50_us\":%.1f,\"p99_us\":%.1f}\n",
           (unsigned long long)size, (long long)count, (long long)o.reps,
           deadline ? "deadline" : "direct", gbps, mc_bench_pct_us(lat, n, 0.5),
           mc_bench_pct_us(lat, n, 0.99));
    free(lat);
    return gbps;
}

static void print_fio(uint64_t size, int64_t depth, double bw)
{
    if (bw < 0)
        printf("{\"bench\":\"disk_fio\",\"value\":%llu,\"iodepth\":%lld,\"skipped\":\"fio missing "
               "or failed\"}\n",
               (unsigned long long)size, (long long)depth);
    else
        printf("{\"bench\":\"disk_fio\",\"value\":%llu,\"iodepth\":%lld,\"gbps\":%.3f}\n",
               (unsigned long long)size, (long long)depth, bw / GB);
}

static void print_ratio(const char *what, uint64_t size, const char *mode, double store, double fio)
{
    if (fio > 0 && store > 0)
        printf("{\"bench\":\"disk_ratio\",\"case\":\"%s\",\"value\":%llu,\"mode\":\"%s\","
               "\"store_gbps\":%.3f,\"fio_gbps\":%.3f,\"ratio\":%.3f}\n",
               what, (unsigned long long)size, mode, store, fio / GB, store / (fio / GB));
    else
        printf("{\"bench\":\"disk_ratio\",\"case\":\"%s\",\"value\":%llu,\"mode\":\"%s\","
               "\"ratio\":null}\n",
               what, (unsigned long long)size, mode);
}

int main(int argc, char **argv)
{
    mc_option_t opts[] = {
        {"dir", MC_OPT_STRING, &o.dir, NULL,
         "parent directory on the file system to measure (default $TMPDIR or /var/tmp)", 0, 0},
        {"sizes", MC_OPT_STRING, &o.sizes, NULL, "value sizes, comma-separated", 0, 0},
        {"count", MC_OPT_INT, &o.count, NULL, "objects per size", 1, 100000},
        {"reps", MC_OPT_INT, &o.reps, NULL, "passes over the objects per mode", 1, 1000},
        {"batch", MC_OPT_INT, &o.batch, NULL, "objects of the first size in the batch read (0 = none)", 0, 4096},
        {"fio", MC_OPT_STRING, &o.fio, NULL, "fio program", 0, 0},
        {"keep", MC_OPT_BOOL, &o.keep, NULL, "keep the directory afterwards", 0, 0},
    };
    mc_config_spec_t spec = {"mc_disk_bench",
                             "Disk tier storage engine: gets of 4 MiB / 32 MiB values (O_DIRECT, "
                             "io_uring) and a batch, against fio on the same file system.",
                             opts, sizeof(opts) / sizeof(opts[0])};
    int rc = mc_config_main(&spec, argc, argv);
    if (rc >= 0)
        return rc;
    uint64_t sizes[MAX_SIZES];
    size_t nsizes = 0;
    char *list = strdup(o.sizes), *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t && nsizes < MAX_SIZES; t = strtok_r(NULL, ",", &save))
        if (mc_parse_size(t, &sizes[nsizes]) != MC_OK || sizes[nsizes] == 0 ||
            sizes[nsizes] > (1ull << 30)) {
            fprintf(stderr, "mc_disk_bench: --sizes: bad size '%s'\n", t);
            return 2;
        } else {
            nsizes++;
        }
    free(list);
    const char *parent = o.dir ? o.dir : getenv("TMPDIR") ? getenv("TMPDIR") : "/var/tmp";
    char dir[512], sdir[600];
    snprintf(dir, sizeof(dir), "%s/mc_disk_bench.XXXXXX", parent);
    if (!mkdtemp(dir)) {
        fprintf(stderr, "mc_disk_bench: mkdtemp %s: %s\n", dir, strerror(errno));
        return 1;
    }
    snprintf(sdir, sizeof(sdir), "%s/store", dir);
    bool fio = disk_fio_available(o.fio);
    int64_t bcount = nsizes && o.batch > o.count ? o.batch : o.count; /* first size */
    mc_disk_config_t cfg;
    mc_disk_config_default(&cfg);
    mc_disk_store_t *s = NULL;
    mc_status_t st = mc_disk_store_open(sdir, &cfg, &s);
    for (size_t i = 0; st == MC_OK && i < nsizes; i++)
        if (put_all(s, sizes[i], i == 0 ? bcount : o.count) != 0)
            st = MC_ERR_INTERNAL;
    mc_disk_store_close(s);
    s = NULL;
    if (st == MC_OK)
        st = mc_disk_store_open(sdir, &cfg, &s); /* sealed, synced, recovered */
    if (st != MC_OK) {
        fprintf(stderr, "mc_disk_bench: store in %s: %s\n", sdir, mc_status_str(st));
        return 1;
    }
    mc_disk_stats_t stats;
    mc_disk_store_stats(s, &stats);
    printf("{\"bench\":\"disk_setup\",\"dir\":\"%s\",\"direct_io\":%s,\"fio\":%s,"
           "\"bytes_on_disk\":%llu}\n",
           dir, stats.direct_io ? "true" : "false", fio ? "true" : "false",
           (unsigned long long)stats.bytes_on_disk);
    int ret = 0;
    uint64_t maxsz = 0;
    for (size_t i = 0; i < nsizes; i++)
        if (sizes[i] > maxsz)
            maxsz = sizes[i];
    uint64_t bbytes = nsizes && o.batch ? (uint64_t)o.batch * sizes[0] : 0;
    uint64_t bufsz = bbytes > maxsz ? bbytes : maxsz;
    uint8_t *buf = aligned_alloc(4096, (bufsz + 4095) / 4096 * 4096);
    memset(buf, 0, bufsz);
    bool reg = bufsz <= (1ull << 30) && mc_disk_store_register_buffer(s, buf, bufsz) == MC_OK;
    for (size_t i = 0; i < nsizes && ret == 0; i++) {
        double direct = get_all(s, sizes[i], o.count, false, buf);
        double dl = get_all(s, sizes[i], o.count, true, buf);
        if (direct < 0 || dl < 0) {
            ret = 1;
            break;
        }
        double f = fio ? disk_fio_read_bps(o.fio, dir, sizes[i], sizes[i] * (uint64_t)o.count, 1,
                                           o.reps)
                       : -1;
        print_fio(sizes[i], 1, f);
        print_ratio("get", sizes[i], "direct", direct, f);
        print_ratio("get", sizes[i], "deadline", dl, f);
    }
    if (ret == 0 && bbytes) {
        mc_disk_read_t *rq = calloc((size_t)o.batch, sizeof(*rq));
        char (*keys)[64] = calloc((size_t)o.batch, 64);
        double f = fio ? disk_fio_read_bps(o.fio, dir, sizes[0], bbytes, o.batch, o.reps) : -1;
        print_fio(sizes[0], o.batch, f);
        for (int mode = 0; mode < 2 && ret == 0; mode++) {
            uint64_t best = UINT64_MAX;
            for (int64_t r = 0; r < o.reps; r++) {
                for (int64_t i = 0; i < o.batch; i++) {
                    key_of(keys[i], 64, sizes[0], i);
                    rq[i] = (mc_disk_read_t){.key = keys[i], .key_len = strlen(keys[i]),
                                             .buf = buf + (uint64_t)i * sizes[0], .cap = sizes[0]};
                }
                uint64_t t = mc_now_ns();
                mc_disk_store_read_batch(s, rq, (size_t)o.batch, mode ? t + 60000000000ull : 0);
                t = mc_now_ns() - t;
                for (int64_t i = 0; i < o.batch; i++)
                    if (rq[i].status != MC_OK) {
                        fprintf(stderr, "mc_disk_bench: batch get failed: %s\n",
                                mc_status_str(rq[i].status));
                        ret = 1;
                    }
                if (t < best)
                    best = t;
            }
            double gbps = (double)bbytes / ((double)best / 1e9) / GB;
            printf("{\"bench\":\"disk_batch\",\"value\":%llu,\"batch\":%lld,\"mode\":\"%s\","
                   "\"best_ms\":%.2f,\"gbps\":%.3f}\n",
                   (unsigned long long)sizes[0], (long long)o.batch, mode ? "deadline" : "direct",
                   (double)best / 1e6, gbps);
            print_ratio("batch", sizes[0], mode ? "deadline" : "direct", gbps, f);
        }
        free(rq);
        free(keys);
    }
    mc_disk_store_stats(s, &stats);
    if (stats.checksum_failures || stats.read_errors)
        ret = 1;
    if (reg)
        mc_disk_store_unregister_buffer(s, buf);
    mc_disk_store_close(s);
    free(buf);
    if (!o.keep) {
        char cmd[700];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "mc_disk_bench: could not remove %s\n", dir);
    }
    return ret;
}
