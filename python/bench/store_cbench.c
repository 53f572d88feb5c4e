/* C side of the Python-vs-C store benchmark (python/bench/store_bench.py runs both against the
 * same master and storage server).
 *
 * Measures zero-copy batch put and batch get_into of `batch` objects of `size` bytes from one
 * registered buffer, `iters` times, and prints one JSON line with the median and mean
 * microseconds per batch call. Keys are removed (untimed, force) after each iteration so every
 * put really writes.
 *
 * Usage (--help): mc_store_cbench --master=HOST:PORT [--size=4096] [--batch=128] [--iters=50]
 *                        [--protocol=tcp]
 */
#include "mooncake/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double mean(const double *v, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += v[i];
    return s / n;
}

static const char USAGE[] =
    "usage: mc_store_cbench --master=HOST:PORT [--size=BYTES] [--batch=N] [--iters=N] "
    "[--protocol=tcp|shm|auto]\n"
    "  --size 1..1073741824 (4096), --batch 1..65536 (128), --iters 1..1000000 (50);\n"
    "  size x batch at most 8 GiB (one registered buffer)\n";

/* "--name=value" options: *vals[i] set from argv for names[i]. Returns 0, 1 after --help, or
 * -1 for an argument that is not one of them. */
static int parse_args(int argc, char **argv, const char *const *names, const char **vals, int n)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return 1;
        int k = 0;
        for (; k < n; k++) {
            size_t l = strlen(names[k]);
            if (!strncmp(argv[i], names[k], l) && argv[i][l] == '=') {
                vals[k] = argv[i] + l + 1;
                break;
            }
        }
        if (k == n) {
            fprintf(stderr, "mc_store_cbench: unknown argument '%s'\n", argv[i]);
            return -1;
        }
    }
    return 0;
}

/* A whole number in [lo, hi] into *out; 0, or -1 naming the option on stderr. */
static int number(const char *name, const char *v, long long lo, long long hi, long long *out)
{
    char *end;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "mc_store_cbench: %s=%s: a whole number in %lld..%lld expected\n", name,
                v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const names[] = {"--master", "--protocol", "--size", "--batch", "--iters"};
    const char *vals[] = {NULL, "tcp", "4096", "128", "50"};
    int parsed = parse_args(argc, argv, names, vals, 5);
    if (parsed == 1) {
        fputs(USAGE, stdout);
        return 0;
    }
    const char *master = vals[0], *protocol = vals[1];
    long long size, batch_ll, iters_ll;
    if (parsed < 0 || number("--size", vals[2], 1, 1ll << 30, &size) ||
        number("--batch", vals[3], 1, 65536, &batch_ll) ||
        number("--iters", vals[4], 1, 1000000, &iters_ll)) {
        fputs(USAGE, stderr);
        return 2;
    }
    if (!master || !*master || size * batch_ll > (8ll << 30)) {
        fprintf(stderr, "mc_store_cbench: %s\n%s",
                !master || !*master ? "--master=HOST:PORT is required" : "size x batch above 8 GiB",
                USAGE);
        return 2;
    }
    int batch = (int)batch_ll, iters = (int)iters_ll;
    mc_store_config_t cfg = {
        .local_hostname = "127.0.0.1",
        .metadata_server = "P2PHANDSHAKE",
        .global_segment_size = 0,
        .local_buffer_size = 16 << 20,
        .protocol = protocol,
        .master_server_addr = master,
    };
    mc_store_t *st;
    mc_status_t rc = mc_store_create(&cfg, &st);
    if (rc != MC_OK) {
        fprintf(stderr, "setup: %s\n", mc_status_str(rc));
        return 1;
    }
    size_t total = (size_t)size * (size_t)batch;
    char *src = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *dst = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (src == MAP_FAILED || dst == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    for (size_t i = 0; i < total; i++)
        src[i] = (char)(i * 131 + 7);
    memset(dst, 0, total);
    if (mc_store_register_buffer(st, src, total) != MC_OK ||
        mc_store_register_buffer(st, dst, total) != MC_OK) {
        fprintf(stderr, "register_buffer failed\n");
        return 1;
    }
    char **keys = calloc((size_t)batch, sizeof(*keys));
    struct iovec *sv = calloc((size_t)batch, sizeof(*sv)), *dv = calloc((size_t)batch, sizeof(*dv));
    const struct iovec **sp = calloc((size_t)batch, sizeof(*sp)),
                       **dp = calloc((size_t)batch, sizeof(*dp));
    size_t *np = calloc((size_t)batch, sizeof(*np));
    int32_t *pr = calloc((size_t)batch, sizeof(*pr));
    int64_t *gr = calloc((size_t)batch, sizeof(*gr));
    double *put_us = calloc((size_t)iters, sizeof(double)),
           *get_us = calloc((size_t)iters, sizeof(double));
    for (int i = 0; i < batch; i++) {
        keys[i] = malloc(64);
        sv[i] = (struct iovec){src + (size_t)i * (size_t)size, (size_t)size};
        dv[i] = (struct iovec){dst + (size_t)i * (size_t)size, (size_t)size};
        sp[i] = &sv[i];
        dp[i] = &dv[i];
        np[i] = 1;
    }
    int errors = 0;
    for (int it = 0; it < iters; it++) {
        for (int i = 0; i < batch; i++)
            snprintf(keys[i], 64, "cbench-%d-%d-%d", (int)getpid(), it, i);
        double t0 = now_us();
        rc = mc_store_batch_put(st, (size_t)batch, (const char *const *)keys, sp, np, NULL, false,
                                pr);
        double t1 = now_us();
        mc_status_t rg = mc_store_batch_get_into(st, (size_t)batch, (const char *const *)keys, dp,
                                                 np, gr);
        double t2 = now_us();
        for (int i = 0; i < batch; i++)
            if (rc != MC_OK || rg != MC_OK || pr[i] != 0 || gr[i] != size)
                errors++;
        put_us[it] = t1 - t0;
        get_us[it] = t2 - t1;
        mc_store_batch_remove(st, (size_t)batch, (const char *const *)keys, true, pr);
    }
    if (memcmp(src, dst, total) != 0)
        errors++;
    printf("{\"impl\": \"c\", \"size\": %lld, \"batch\": %d, \"iters\": %d, "
           "\"put_us_median\": %.1f, \"get_us_median\": %.1f, \"put_us_mean\": %.1f, "
           "\"get_us_mean\": %.1f, \"errors\": %d}\n",
           size, batch, iters, median(put_us, iters), median(get_us, iters),
           mean(put_us, iters), mean(get_us, iters), errors);
    mc_store_unregister_buffer(st, src);
    mc_store_unregister_buffer(st, dst);
    mc_store_destroy(st);
    return errors ? 1 : 0;
}
