/* Unit tests for the common layer: status table, config parsing, sizes, hashing, net. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "common/prom.h"
#include "common/config.h"
#include "common/hash.h"
#include "common/hash_impl.h"

#include <xxhash.h>
#include "common/log.h"
#include "common/net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_status_names(void **state)
{
    assert_string_equal(mc_status_name(MC_ERR_OBJECT_NOT_FOUND), "OBJECT_NOT_FOUND");
    assert_int_equal(MC_ERR_OBJECT_NOT_FOUND, -704);
    assert_int_equal(MC_ERR_NO_AVAILABLE_HANDLE, -200);
    assert_int_equal(MC_ERR_LEASE_EXPIRED, -707);
    assert_string_equal(mc_status_name(12345), "UNKNOWN");
    assert_non_null(strstr(mc_status_str(MC_ERR_RPC_TIMEOUT), "timed out"));
}

static void test_parse_size(void **state)
{
    uint64_t v;
    assert_int_equal(mc_parse_size("4096", &v), MC_OK);
    assert_int_equal(v, 4096);
    assert_int_equal(mc_parse_size("512MB", &v), MC_OK);
    assert_int_equal(v, 512ull << 20);
    assert_int_equal(mc_parse_size("1 GiB", &v), MC_OK);
    assert_int_equal(v, 1ull << 30);
    assert_int_equal(mc_parse_size("16mb", &v), MC_OK);
    assert_int_equal(v, 16ull << 20);
    assert_int_equal(mc_parse_size("1.5K", &v), MC_OK);
    assert_int_equal(v, 1536);
    assert_int_equal(mc_parse_size("-1", &v), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_parse_size("12XB", &v), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_parse_size("", &v), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_parse_size("99999999999T", &v), MC_ERR_INVALID_PARAMS);
}

static void test_config_precedence(void **state)
{
    int64_t port = 50051;
    double ratio = 0.05;
    bool flag = false;
    const char *name = "default";
    uint64_t size = 0;
    mc_option_t opts[] = {
        {"port", MC_OPT_INT, &port, NULL, "port", 1, 65535},
        {"eviction_ratio", MC_OPT_DOUBLE, &ratio, "MC_TEST_RATIO", "ratio", 0, 1},
        {"enable", MC_OPT_BOOL, &flag, NULL, "flag", 0, 0},
        {"name", MC_OPT_STRING, &name, NULL, "name", 0, 0},
        {"size", MC_OPT_SIZE, &size, NULL, "size", 0, 0},
    };
    mc_config_spec_t spec = {"test", "test", opts, MC_ARRAY_LEN(opts)};

    char path[] = "/tmp/mc_cfg_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *json = "{\"port\": 1234, \"eviction_ratio\": 0.2, \"name\": \"fromfile\"}";
    assert_int_equal(write(fd, json, strlen(json)), (ssize_t)strlen(json));
    close(fd);

    setenv("MC_TEST_RATIO", "0.3", 1);
    char cfgarg[64];
    snprintf(cfgarg, sizeof(cfgarg), "--config_path=%s", path);
    char *argv[] = {"test", cfgarg, "--port", "4321", "--enable", "--size=2MB", NULL};
    int help = 0;
    assert_int_equal(mc_config_parse(&spec, 6, argv, &help), MC_OK);
    assert_int_equal(help, 0);
    assert_int_equal(port, 4321);          /* flag beats file */
    assert_true(ratio > 0.29 && ratio < 0.31); /* env beats file */
    assert_true(flag);
    assert_string_equal(name, "fromfile");
    assert_int_equal(size, 2u << 20);

    char *bad1[] = {"test", "--port=70000", NULL};
    assert_int_equal(mc_config_parse(&spec, 2, bad1, &help), MC_ERR_INVALID_PARAMS);
    char *bad2[] = {"test", "--nope=1", NULL};
    assert_int_equal(mc_config_parse(&spec, 2, bad2, &help), MC_ERR_INVALID_PARAMS);
    char *bad3[] = {"test", "--eviction_ratio=abc", NULL};
    assert_int_equal(mc_config_parse(&spec, 2, bad3, &help), MC_ERR_INVALID_PARAMS);
    unsetenv("MC_TEST_RATIO");
    unlink(path);
}

/* The library starts at info whatever the environment says; a program's mc_config_main takes
 * MC_LOG_LEVEL, a bad value is refused, and --log_level wins over the variable. */
static void test_log_level_from_program_env(void **state)
{
    (void)state;
    const char *level = "warn";
    mc_option_t opts[] = {{"log_level", MC_OPT_STRING, &level, NULL, "level", 0, 0}};
    mc_config_spec_t spec = {"test", "test", opts, MC_ARRAY_LEN(opts)};
    mc_option_t none[] = {{"port", MC_OPT_INT, &(int64_t){1}, NULL, "port", 0, 65535}};
    mc_config_spec_t bare = {"test", "test", none, MC_ARRAY_LEN(none)};
    char *argv[] = {"test", NULL};
    mc_log_set_level(MC_LOG_LEVEL_INFO);
    setenv("MC_LOG_LEVEL", "error", 1);
    assert_int_equal(mc_log_get_level(), MC_LOG_LEVEL_INFO); /* the library alone ignores it */
    assert_int_equal(mc_config_main(&bare, 1, argv), -1);
    assert_int_equal(mc_log_get_level(), MC_LOG_LEVEL_ERROR);
    assert_int_equal(mc_config_main(&spec, 1, argv), -1);
    assert_int_equal(mc_log_get_level(), MC_LOG_LEVEL_WARN); /* the option wins */
    setenv("MC_LOG_LEVEL", "loud", 1);
    assert_int_equal(mc_config_main(&bare, 1, argv), 2);
    unsetenv("MC_LOG_LEVEL");
    mc_log_set_level(MC_LOG_LEVEL_INFO);
}

static void test_hash_stream(void **state)
{
    char buf[1000];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (char)(i * 7);
    mc_hash_stream_t hs;
    assert_int_equal(mc_hash_stream_init(&hs), 0);
    mc_hash_stream_update(&hs, buf, 300);
    mc_hash_stream_update(&hs, buf + 300, 700);
    assert_int_equal(mc_hash_stream_final(&hs), mc_hash64(buf, sizeof(buf)));
    assert_int_not_equal(mc_hash64(buf, 999), mc_hash64(buf, 1000));
}

/* The AVX2 build of XXH3 (hash_avx2.c) gives the library's results: every size class of the
 * algorithm, seeds, and streaming with odd splits. */
static void test_hash_builds_agree(void **state)
{
    static const size_t sizes[] = {0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1000, 1024,
                                   4096, 100003, (1u << 20) + 7};
    size_t max = (1u << 20) + 7;
    unsigned char *buf = malloc(max);
    assert_non_null(buf);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < max; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        assert_int_equal(mc_hash64(buf, n), XXH3_64bits(buf, n));
        assert_int_equal(mc_hash64_seed(buf, n, 12345), XXH3_64bits_withSeed(buf, n, 12345));
#if defined(__x86_64__)
        if (__builtin_cpu_supports("avx2"))
            assert_int_equal(mc_hash64_avx2(buf, n, 7), XXH3_64bits_withSeed(buf, n, 7));
#endif
        mc_hash_stream_t hs;
        assert_int_equal(mc_hash_stream_init(&hs), 0);
        for (size_t off = 0, step = 1; off < n; off += step, step = step * 3 + 1)
            mc_hash_stream_update(&hs, buf + off, off + step <= n ? step : n - off);
        assert_int_equal(mc_hash_stream_final(&hs), XXH3_64bits(buf, n));
    }
    free(buf);
}

/* mc_hash64_copy copies exactly and returns mc_hash64 of what it wrote: every size class of
 * XXH3 and block boundaries, unaligned ends, either side of the size where the copy goes by
 * chunks and of a chunk's end, values of many chunks; with and without a next source to
 * prefetch. */
static void test_hash_copy(void **state)
{
    (void)state;
    static const size_t sizes[] = {0, 1, 16, 17, 128, 129, 240, 241, 1023, 1024, 1025, 1088,
                                   2048, 2049, 4096, 65535, 65536, 65536 + 63, 81919, 81920, 81921,
                                   (1u << 20) - 1, 1u << 20,
                                   (4u << 20) + 5};
    size_t max = (4u << 20) + 5 + 64;
    unsigned char *src = malloc(max);
    unsigned char *dst = aligned_alloc(64, (max + 64 + 63) / 64 * 64); /* size: a multiple of 64 */
    assert_non_null(src);
    assert_non_null(dst);
    for (size_t i = 0; i < max; i++)
        src[i] = (unsigned char)(i * 2654435761u >> 11);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        for (size_t off = 0; off < 64; off += 31) { /* dst 32-byte aligned, then not */
            size_t n = sizes[k];
            memset(dst, 0xa5, max + 64);
            uint64_t h = mc_hash64_copy(dst + off, src + 3, n, off ? src + n / 2 : NULL);
            assert_int_equal(h, XXH3_64bits(src + 3, n));
            assert_memory_equal(dst + off, src + 3, n);
            assert_int_equal(dst[off + n], 0xa5); /* nothing written past the end */
            if (off)
                assert_int_equal(dst[off - 1], 0xa5);
        }
    }
    free(src);
    free(dst);
}

/* mc_hash64 and the streams run the AVX2 build wherever the CPU has AVX2 (2x the baseline's
 * speed on large values; every get and put hashes its whole value). */
static void test_hash_build_choice(void **state)
{
    (void)state;
#if defined(__x86_64__)
    __builtin_cpu_init();
    assert_string_equal(mc_hash_build(), __builtin_cpu_supports("avx2") ? "avx2" : "baseline");
#else
    assert_string_equal(mc_hash_build(), "baseline");
#endif
}

static void test_hostport(void **state)
{
    char host[MC_HOST_MAX];
    uint16_t port;
    assert_int_equal(mc_net_split_hostport("127.0.0.1:50051", host, &port), MC_OK);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 50051);
    assert_int_equal(mc_net_split_hostport("[::1]:80", host, &port), MC_OK);
    assert_string_equal(host, "::1");
    assert_int_equal(mc_net_split_hostport("localhost", host, &port), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_net_split_hostport("h:0", host, &port), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_net_split_hostport("h:65536", host, &port), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_net_split_hostport(":80", host, &port), MC_ERR_INVALID_PARAMS);
}

static int sink_calls;
static void counting_sink(mc_log_level_t level, const char *file, int line, const char *msg,
                          void *arg)
{
    sink_calls++;
    assert_string_equal(msg, "hello 42");
}

static void test_log_sink(void **state)
{
    mc_log_set_sink(counting_sink, NULL);
    mc_log_set_level(MC_LOG_LEVEL_INFO);
    MC_LOG_DEBUG("hidden %d", 1);
    MC_LOG_INFO("hello %d", 42);
    mc_log_set_sink(NULL, NULL);
    assert_int_equal(sink_calls, 1);
}

static void test_buf_grows_consumes_and_formats(void **state)
{
    (void)state;
    mc_buf_t b = {0};
    assert_int_equal(mc_buf_append(&b, "abc", 3), MC_OK);
    assert_int_equal(mc_buf_printf(&b, "-%d-", 42), MC_OK);
    assert_int_equal(mc_buf_unread(&b), 7);
    assert_memory_equal(mc_buf_head(&b), "abc-42-", 7);
    assert_int_equal(b.data[b.len], '\0'); /* printf keeps a terminator */
    mc_buf_consume(&b, 4);
    assert_memory_equal(mc_buf_head(&b), "42-", 3);
    /* Growing past the first capacity keeps the unread bytes and drops the consumed ones. */
    size_t cap0 = b.cap;
    char big[1000];
    memset(big, 'x', sizeof(big));
    assert_int_equal(mc_buf_append(&b, big, sizeof(big)), MC_OK);
    assert_true(b.cap > cap0);
    assert_int_equal(b.off, 0);
    assert_memory_equal(mc_buf_head(&b), "42-x", 4);
    mc_buf_consume(&b, mc_buf_unread(&b));
    assert_int_equal(b.len, 0);
    mc_buf_trim(&b, 64); /* drained and above 64 bytes: memory given back */
    assert_null(b.data);
    assert_int_equal(mc_buf_printf(&b, "%s", "str"), MC_OK);
    char *s = mc_buf_take_str(&b);
    assert_string_equal(s, "str");
    assert_null(b.data);
    mc_free(s);
    mc_buf_free(&b);
}

/* One Prometheus histogram as the master and the client render it: cumulated buckets, +Inf =
 * count, the label on every series (without its comma on _sum/_count); and upstream's sizes. */
static void test_prom_histogram_and_bytes(void **state)
{
    (void)state;
    mc_prom_t p = {0};
    const uint64_t le[] = {10, 100};
    const uint64_t b[] = {2, 3};
    mc_prom_help_type(&p, "x_lat", "histogram", "Latency");
    mc_prom_histogram(&p, "x_lat", "op=\"get\",", le, b, 2, 777, 6);
    mc_prom_bytes(&p, 512);
    MC_PROM_PRINTF(&p, "|");
    mc_prom_bytes(&p, 3 << 20);
    MC_PROM_PRINTF(&p, "|");
    mc_prom_human_bytes(&p, 1536, "B/s");
    assert_int_equal(p.st, MC_OK);
    char *s = mc_buf_take_str(&p.b);
    assert_string_equal(s, "# HELP x_lat Latency\n# TYPE x_lat histogram\n"
                           "x_lat_bucket{op=\"get\",le=\"10\"} 2\n"
                           "x_lat_bucket{op=\"get\",le=\"100\"} 5\n"
                           "x_lat_bucket{op=\"get\",le=\"+Inf\"} 6\n"
                           "x_lat_sum{op=\"get\"} 777\nx_lat_count{op=\"get\"} 6\n"
                           "512 B|3.00 MB|1.50 KB/s");
    mc_free(s);
}

static void test_array_reserve(void **state)
{
    (void)state;
    uint64_t *a = NULL;
    size_t cap = 0;
    assert_int_equal(mc_array_reserve(&a, &cap, 3, 4), MC_OK);
    assert_int_equal(cap, 4);
    for (int i = 0; i < 3; i++)
        a[i] = (uint64_t)i;
    assert_int_equal(mc_array_reserve(&a, &cap, 9, 4), MC_OK);
    assert_int_equal(cap, 16);
    assert_int_equal(a[2], 2);
    /* A size that would overflow is refused and leaves the array as it was. */
    assert_int_equal(mc_array_reserve(&a, &cap, SIZE_MAX / 4, 4), MC_ERR_TOO_LARGE);
    assert_int_equal(cap, 16);
    assert_int_equal(a[1], 1);
    mc_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_names), cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_config_precedence), cmocka_unit_test(test_hash_stream),
        cmocka_unit_test(test_hash_builds_agree), cmocka_unit_test(test_hash_build_choice),
        cmocka_unit_test(test_hash_copy),
        cmocka_unit_test(test_hostport), cmocka_unit_test(test_log_sink),
        cmocka_unit_test(test_buf_grows_consumes_and_formats),
        cmocka_unit_test(test_array_reserve), cmocka_unit_test(test_log_level_from_program_env),
        cmocka_unit_test(test_prom_histogram_and_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
