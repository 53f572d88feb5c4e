/* mc_disk_e2e_bench: gets served from the disk tier through a real cluster (docs/benchmarks.md,
 * "Disk tier"). It starts a mooncake_master (--enable_offload=true) and a storage server
 * (mooncake_client --enable_offload=true, its disk under --dir) on free loopback ports, puts
 * --count values of each size (--sizes) and one batch of --batch values of the first size
 * through a client without memory of its own, waits until the server's bucket files hold them
 * all (eager offload), then stops the storage server (SIGTERM: its segment is unmounted) and
 * starts it again on the same directory: it re-registers what its disk holds, and every object
 * is now disk-only. Then, --rounds times, each case alternates fio on the same shape
 * (disk_fio.h: O_DIRECT, io_uring, a file in --dir) with the readers, fio first and last (fio,
 * tcp reader, fio, shm reader, fio), and sets each reader against the mean of the fio runs
 * right before and right after it; the readers read:
 *   get    each object of a size --reps times with mc_store_get_into (queue depth 1) into a
 *          registered buffer: the master names the LOCAL_DISK replica, the owner reads its
 *          disk (O_DIRECT, io_uring, checksum) into its staging buffer while the reader pulls
 *          each piece with the TE as it lands (docs/internals/disk-tier.md, "Reads from
 *          disk"); fio reads the same block size at depth 1;
 *   batch  the --batch values with one mc_store_batch_get_into (best of --reps), against fio
 *          at depth --batch.
 * Each case is read by the reader whose TE speaks tcp (the figure the target is about) and,
 * with --same_host (default true), right after it by a second reader (its own store, protocol
 * "auto") that reaches the owner's staging buffer through the TE's same-host transport (shm:
 * the buffer is mc_te_alloc_shareable memory), against the same fio figure.
 * One untimed get per size and one batch per reader come first (connections). Every value
 * read is compared with what was put. The readers keep the store's default replica hints
 * (--hints): a repeat get asks the owner while the master's lookup travels.
 *
 * Output, one JSON line each: {"bench":"disk_e2e_setup",...}, per round and reader
 * {"bench":"disk_e2e_get","transport":"tcp"|"shm","value":...,"gbps":...,"p50_us":...,
 * "p99_us":...,"round":...,"fio_depth":...,"fio_before_gbps":...,"fio_after_gbps":...,
 * "fio_gbps" (their mean),"ratio":...} and {"bench":"disk_e2e_batch",...}, then per reader and
 * case {"bench":"disk_e2e_ratio","transport":...,"case":...,"ratio_median":...,
 * "ratio_min":...,"ratio_max":...} (store GB/s / fio GB/s over the rounds; without fio the
 * ratios are 0 and no ratio lines are printed). */
#include "common/config.h"
#include "common/hash.h"
#include "common/net.h"
#include "common/time.h"
#include "disk_fio.h"
#include "mooncake/store.h"
#include "support/test_util.h"
#include "bench_stats.h"

#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_SIZES 8

static struct {
    const char *dir, *sizes;
    const char *fio;
    int64_t count, reps, batch, rounds;
    bool same_host, hints;
} o = {NULL, "4MiB,32MiB", "fio", 8, 2, 64, 3, true, true};

static void fill(char *v, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i + 8 <= len; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(v + i, &x, 8);
    }
}

static uint64_t bucket_bytes(const char *dir)
{
    uint64_t total = 0;
    DIR *dp = opendir(dir);
    struct dirent *de;
    while (dp && (de = readdir(dp))) {
        char path[PATH_MAX];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        if (strstr(de->d_name, ".bucket") && stat(path, &st) == 0)
            total += (uint64_t)st.st_size;
    }
    if (dp)
        closedir(dp);
    return total;
}

/* fio's GB/s reading `total` bytes in blocks of bs at depth `depth`, --reps times (the shape
 * of a case: its values, as many times as the store reads them); <= 0 when it fails. */
static double fio_gbps(uint64_t bs, uint64_t total, int64_t depth)
{
    return disk_fio_read_bps(o.fio, o.dir, bs, total, depth, o.reps) / 1e9;
}

static void die(const char *what)
{
    fprintf(stderr, "mc_disk_e2e_bench: %s\n", what);
    exit(1);
}

/* A reader: its own store (TE) with the shared registered buffer. "tcp" is the figure the
 * target is about; "shm" (--same_host) reads the owner's staging buffer through the TE's
 * same-host mapping, an extra figure. */
typedef struct reader {
    const char *transport;
    mc_store_t *s;
} reader_t;

/* The batch's keys and destinations. */
static struct {
    const char **keys;
    struct iovec *ios;
    const struct iovec **pp;
    size_t *np;
    int64_t *res;
} bt;

/* Warm-up, not timed: one get per size (connections; until the first server's memory
 * replicas are dropped a get fails) and one batch. */
static void warm_up(const reader_t *rd, const uint64_t *sizes, size_t n_sizes, char *buf)
{
    char key[64];
    for (size_t z = 0; z < n_sizes; z++) {
        snprintf(key, sizeof(key), "v%llu_0", (unsigned long long)sizes[z]);
        struct iovec io = {buf, sizes[z]};
        uint64_t dl = mc_now_ms() + 30000;
        while (mc_store_get_into(rd->s, key, &io, 1) != (int64_t)sizes[z]) {
            if (mc_now_ms() > dl)
                die("get failed");
            mc_sleep_ms(100);
        }
    }
    if (mc_store_batch_get_into(rd->s, (size_t)o.batch, bt.keys, bt.pp, bt.np, bt.res) != MC_OK)
        die("batch get failed");
}

/* The get case of size sz: every object --reps times at depth 1, each compared with what was
 * put; prints its line up to the fio fields (the caller ends it), returns GB/s. */
static double get_case(const reader_t *rd, uint64_t sz, char *buf, char *want, uint64_t *lat)
{
    char key[64];
    uint64_t n = 0, bytes = 0, t_all = 0;
    for (int64_t r = 0; r < o.reps; r++) {
        for (int64_t i = 0; i < o.count; i++) {
            snprintf(key, sizeof(key), "v%llu_%lld", (unsigned long long)sz, (long long)i);
            struct iovec io = {buf, sz};
            uint64_t a = mc_now_ns();
            int64_t got = mc_store_get_into(rd->s, key, &io, 1);
            uint64_t b = mc_now_ns();
            if (got != (int64_t)sz)
                die("get failed");
            fill(want, sz, mc_hash_str(key));
            if (memcmp(want, buf, sz) != 0)
                die("wrong bytes");
            lat[n++] = b - a;
            bytes += sz;
            t_all += b - a;
        }
    }
    double g = (double)bytes / (double)t_all;
    printf("{\"bench\":\"disk_e2e_get\",\"transport\":\"%s\",\"value\":%llu,\"gets\":%llu,"
           "\"gbps\":%.3f,\"p50_us\":%.0f,\"p99_us\":%.0f",
           rd->transport, (unsigned long long)sz, (unsigned long long)n, g,
           mc_bench_pct_us(lat, n, 0.5), mc_bench_pct_us(lat, n, 0.99));
    return g;
}

/* The batch case: one batch get of the --batch values, best of --reps, every value compared;
 * prints its line up to the fio fields (the caller ends it), returns GB/s. */
static double batch_case(const reader_t *rd, uint64_t sz, char *buf, char *want)
{
    uint64_t bbytes = sz * (uint64_t)o.batch;
    double best = 0;
    for (int64_t r = 0; r < o.reps; r++) {
        memset(buf, 0, bbytes);
        uint64_t a = mc_now_ns();
        if (mc_store_batch_get_into(rd->s, (size_t)o.batch, bt.keys, bt.pp, bt.np, bt.res) !=
            MC_OK)
            die("batch get failed");
        uint64_t b = mc_now_ns();
        for (int64_t i = 0; i < o.batch; i++) {
            if (bt.res[i] != (int64_t)sz)
                die("batch get of a key failed");
            fill(want, sz, mc_hash_str(bt.keys[i]));
            if (memcmp(want, bt.ios[i].iov_base, sz) != 0)
                die("wrong bytes in the batch");
        }
        double g = (double)bbytes / (double)(b - a);
        best = g > best ? g : best;
    }
    printf("{\"bench\":\"disk_e2e_batch\",\"transport\":\"%s\",\"value\":%llu,\"n\":%lld,"
           "\"gbps\":%.3f",
           rd->transport, (unsigned long long)sz, (long long)o.batch, best);
    return best;
}

int main(int argc, char **argv)
{
    mc_option_t opts[] = {
        {"dir", MC_OPT_STRING, &o.dir, NULL, "directory on the disk to measure (required)", 0, 0},
        {"sizes", MC_OPT_STRING, &o.sizes, NULL, "value sizes, comma-separated", 0, 0},
        {"count", MC_OPT_INT, &o.count, NULL, "objects per size", 1, 4096},
        {"reps", MC_OPT_INT, &o.reps, NULL, "reads of each object", 1, 1000},
        {"batch", MC_OPT_INT, &o.batch, NULL, "objects of the first size in the batch", 1, 1024},
        {"rounds", MC_OPT_INT, &o.rounds, NULL, "rounds of every case, each next to fio", 1, 100},
        {"fio", MC_OPT_STRING, &o.fio, NULL, "fio program", 0, 0},
        {"same_host", MC_OPT_BOOL, &o.same_host, NULL,
         "also read through a second reader on the TE's same-host transport (shm)", 0, 0},
        {"hints", MC_OPT_BOOL, &o.hints, NULL,
         "readers keep the store's default replica hints (false: none, every get cold)", 0, 0},
    };
    mc_config_spec_t spec = {"mc_disk_e2e_bench",
                             "Gets served from the disk tier through a real cluster (master, "
                             "storage server, reader).",
                             opts, sizeof(opts) / sizeof(opts[0])};
    int rc = mc_config_main(&spec, argc, argv);
    if (rc >= 0)
        return rc;
    if (!o.dir)
        die("--dir is required");
    uint64_t sizes[MAX_SIZES];
    size_t n_sizes = 0;
    char sbuf[256];
    snprintf(sbuf, sizeof(sbuf), "%s", o.sizes);
    for (char *t = strtok(sbuf, ","); t && n_sizes < MAX_SIZES; t = strtok(NULL, ","))
        if (mc_parse_size(t, &sizes[n_sizes++]) != MC_OK)
            die("bad --sizes");
    uint64_t maxv = 0, total = 0;
    for (size_t i = 0; i < n_sizes; i++) {
        maxv = sizes[i] > maxv ? sizes[i] : maxv;
        total += sizes[i] * (uint64_t)o.count;
    }
    total += sizes[0] * (uint64_t)o.batch;

    char disk[1024], mlog[1100], slog[1100], slog2[1100], bin[1024], cbin[1024];
    snprintf(disk, sizeof(disk), "%s/e2e_disk", o.dir);
    snprintf(mlog, sizeof(mlog), "%s/master.log", o.dir);
    snprintf(slog, sizeof(slog), "%s/server.log", o.dir);
    snprintf(slog2, sizeof(slog2), "%s/server2.log", o.dir);
    uint16_t port;
    if (mc_net_free_port(&port) != MC_OK)
        die("no free port");
    mt_bin_path("mooncake_master", bin, sizeof(bin));
    mt_bin_path("mooncake_client", cbin, sizeof(cbin));
    char portf[32], addr[64], masterf[96], segf[64], diskf[1100], walf[1100];
    snprintf(portf, sizeof(portf), "--port=%u", port);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
    snprintf(walf, sizeof(walf), "--wal_dir=%s/wal", o.dir);
    char *margv[] = {bin, portf, "--metrics_port=0", walf, "--enable_offload=true",
                     "--log_level=warn", NULL};
    pid_t master = mt_spawn(margv, mlog);
    if (master <= 0 || mt_wait_log(mlog, "listening", 10000) != 0)
        die("master did not start");
    /* the segment holds two of the largest values; the staging buffer the batch */
    snprintf(masterf, sizeof(masterf), "--master_server_address=%s", addr);
    snprintf(segf, sizeof(segf), "--global_segment_size=%llu", (unsigned long long)(2 * maxv));
    snprintf(diskf, sizeof(diskf), "--offload_path=%s", disk);
    char stg[32];
    snprintf(stg, sizeof(stg), "%llu",
             (unsigned long long)(sizes[0] * (uint64_t)o.batch + maxv + (64u << 20)));
    setenv("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES", stg, 1);
    setenv("MC_OFFLOAD_HEARTBEAT_MS", "20", 1);
    /* (its TE serves same-host readers over shm whatever its own protocol) */
    char *sargv[] = {cbin, masterf, segf, "--local_hostname=127.0.0.1", "--protocol=tcp",
                     "--enable_offload=true", diskf, NULL};
    pid_t server = mt_spawn(sargv, slog);
    if (server <= 0 || mt_wait_log(slog, "mooncake_client ready", 20000) != 0)
        die("storage server did not start");

    mc_store_config_t cfg = {.local_hostname = "127.0.0.1", .metadata_server = "P2PHANDSHAKE",
                             .protocol = "tcp", .master_server_addr = addr,
                             .replica_hint_slots = o.hints ? 0 : MC_STORE_REPLICA_HINTS_OFF};
    mc_store_t *s;
    if (mc_store_create(&cfg, &s) != MC_OK)
        die("client setup failed");
    size_t bsz = (size_t)(sizes[0] * (uint64_t)o.batch > maxv ? sizes[0] * (uint64_t)o.batch : maxv);
    char *buf = aligned_alloc(4096, (bsz + 4095) & ~(size_t)4095), *want = malloc(maxv);
    if (!buf || !want || mc_store_register_buffer(s, buf, bsz) != MC_OK)
        die("buffer");
    /* puts: key "v<size>_<i>" and "b_<i>" */
    char key[64];
    uint64_t t0 = mc_now_ns();
    for (size_t z = 0; z <= n_sizes; z++) {
        bool bat = z == n_sizes;
        uint64_t sz = bat ? sizes[0] : sizes[z];
        for (int64_t i = 0; i < (bat ? o.batch : o.count); i++) {
            if (bat)
                snprintf(key, sizeof(key), "b_%lld", (long long)i);
            else
                snprintf(key, sizeof(key), "v%llu_%lld", (unsigned long long)sz, (long long)i);
            fill(buf, sz, mc_hash_str(key));
            struct iovec iv = {buf, sz};
            uint64_t dl = mc_now_ms() + 60000;
            mc_status_t st;
            while ((st = mc_store_put(s, key, &iv, 1, NULL)) == MC_ERR_NO_AVAILABLE_HANDLE &&
                   mc_now_ms() < dl)
                mc_sleep_ms(5);
            if (st != MC_OK)
                die("put failed");
        }
    }
    uint64_t want_bytes = total; /* the values at least (headers come on top) */
    uint64_t dl = mc_now_ms() + 120000;
    while (bucket_bytes(disk) < want_bytes) {
        if (mc_now_ms() > dl)
            die("offloads did not finish");
        mc_sleep_ms(20);
    }
    mc_sleep_ms(500); /* the last confirmations */
    double put_s = (double)(mc_now_ns() - t0) / 1e9;
    /* restart: its segment is unmounted (memory replicas gone), the disk re-registered at the
     * next start: every object disk-only */
    mt_stop(server, SIGTERM, 10000);
    server = mt_spawn(sargv, slog2);
    /* its setup mounts the disk and re-registers every object before it is ready */
    if (server <= 0 || mt_wait_log(slog2, "mooncake_client ready", 20000) != 0)
        die("storage server did not come back");
    printf("{\"bench\":\"disk_e2e_setup\",\"bytes\":%llu,\"put_and_offload_s\":%.2f}\n",
           (unsigned long long)total, put_s);

    /* the readers: the first store (tcp) and, with --same_host, one on the same-host
     * transport ("auto": shm to a peer on this host) with the same buffer */
    reader_t rds[2] = {{"tcp", s}, {"shm", NULL}};
    size_t n_rd = 1;
    if (o.same_host) {
        mc_store_config_t c2 = cfg;
        c2.protocol = "auto";
        if (mc_store_create(&c2, &rds[1].s) != MC_OK ||
            mc_store_register_buffer(rds[1].s, buf, bsz) != MC_OK)
            die("same-host reader setup failed");
        n_rd = 2;
    }
    bt.keys = calloc((size_t)o.batch, sizeof(char *));
    bt.ios = calloc((size_t)o.batch, sizeof(struct iovec));
    bt.pp = calloc((size_t)o.batch, sizeof(*bt.pp));
    bt.np = calloc((size_t)o.batch, sizeof(size_t));
    bt.res = calloc((size_t)o.batch, sizeof(int64_t));
    if (!bt.keys || !bt.ios || !bt.pp || !bt.np || !bt.res)
        die("no memory");
    for (int64_t i = 0; i < o.batch; i++) {
        char *k = malloc(32);
        if (!k)
            die("no memory");
        snprintf(k, 32, "b_%lld", (long long)i);
        bt.keys[i] = k;
        bt.ios[i] = (struct iovec){buf + (size_t)i * sizes[0], sizes[0]};
        bt.pp[i] = &bt.ios[i];
        bt.np[i] = 1;
    }
    for (size_t x = 0; x < n_rd; x++)
        warm_up(&rds[x], sizes, n_sizes, buf);
    /* rounds: in each case fio and the readers alternate, fio first and last (fio, tcp
     * reader, fio, shm reader, fio), and each reader's figure is set against the mean of the
     * fio runs right before and right after it: the virtual disk's drift over the case moves
     * both sides alike */
    bool fio = disk_fio_available(o.fio);
    uint64_t *lat = malloc(sizeof(uint64_t) * (size_t)(o.count * o.reps));
    size_t n_cases = n_sizes + 1;
    double *ratios = calloc(n_rd * n_cases * (size_t)o.rounds, sizeof(double));
    if (!lat || !ratios)
        die("no memory");
#define RATIO(x, z, r) ratios[((x) * n_cases + (z)) * (size_t)o.rounds + (size_t)(r)]
    for (int64_t round = 0; round < o.rounds; round++) {
        for (size_t z = 0; z < n_cases; z++) {
            bool bat = z == n_sizes;
            uint64_t sz = bat ? sizes[0] : sizes[z];
            int64_t depth = bat ? o.batch : 1;
            uint64_t fbytes = sz * (uint64_t)(bat ? o.batch : o.count);
            double before = fio ? fio_gbps(sz, fbytes, depth) : -1;
            for (size_t x = 0; x < n_rd; x++) {
                double g = bat ? batch_case(&rds[x], sz, buf, want)
                               : get_case(&rds[x], sz, buf, want, lat);
                double after = fio ? fio_gbps(sz, fbytes, depth) : -1;
                double fm = mc_bench_mean2(before, after);
                RATIO(x, z, round) = mc_bench_ratio(g, fm);
                printf(",\"round\":%lld,\"fio_depth\":%lld,\"fio_before_gbps\":%.3f,"
                       "\"fio_after_gbps\":%.3f,\"fio_gbps\":%.3f,\"ratio\":%.3f}\n",
                       (long long)round, (long long)depth, before, after, fm,
                       RATIO(x, z, round));
                before = after;
            }
        }
        fflush(stdout);
    }
    /* each case's ratio over the rounds: median, min, max */
    double *sorted = malloc(sizeof(double) * (size_t)o.rounds);
    if (!sorted)
        die("no memory");
    for (size_t x = 0; fio && x < n_rd; x++) {
        for (size_t z = 0; z < n_cases; z++) {
            for (int64_t r = 0; r < o.rounds; r++)
                sorted[r] = RATIO(x, z, r);
            qsort(sorted, (size_t)o.rounds, sizeof(double), mc_bench_cmp_double);
            size_t m = (size_t)o.rounds / 2;
            double med = o.rounds % 2 ? sorted[m] : (sorted[m - 1] + sorted[m]) / 2;
            printf("{\"bench\":\"disk_e2e_ratio\",\"transport\":\"%s\",\"case\":\"%s\","
                   "\"value\":%llu,\"rounds\":%lld,\"ratio_median\":%.3f,\"ratio_min\":%.3f,"
                   "\"ratio_max\":%.3f}\n",
                   rds[x].transport, z < n_sizes ? "get" : "batch",
                   (unsigned long long)(z < n_sizes ? sizes[z] : sizes[0]), (long long)o.rounds,
                   med, sorted[0], sorted[o.rounds - 1]);
        }
    }
    free(sorted);
#undef RATIO
    if (rds[1].s)
        mc_store_destroy(rds[1].s);
    mc_store_destroy(s);
    mt_stop(server, SIGTERM, 5000);
    mt_stop(master, SIGTERM, 5000);
    return 0;
}
