/* Trace reader: hostile lines are refused or skipped, and the FAST'25 conversation trace gives
 * the known facts (12,031 requests, 288,500 blocks requested, 182,790 distinct, 36.6 % prefix
 * hits with an unbounded cache). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "conductor/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static mc_status_t parse(const char *s, mc_conductor_request_t *r, uint64_t **b, size_t *n,
                         size_t *cap)
{
    return mc_conductor_trace_parse_line(s, strlen(s), NULL, r, b, n, cap);
}

static void test_trace_parse_lines(void **state)
{
    mc_conductor_request_t r;
    uint64_t *b = NULL;
    size_t n = 0, cap = 0;
    assert_int_equal(parse("{\"timestamp\": 5, \"input_length\": 1000, \"output_length\": 7, "
                           "\"hash_ids\": [0, 1]}", &r, &b, &n, &cap), MC_OK);
    assert_int_equal(r.timestamp_ms, 5);
    assert_int_equal(r.input_tokens, 1000);
    assert_int_equal(r.n_blocks, 2);
    assert_int_equal(n, 2);
    assert_int_equal(b[1], 1);
    static const char *bad[] = {
        "",
        "{",
        "[]",
        "{\"timestamp\": -1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": []}",
        "{\"timestamp\": 1.5, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": []}",
        "{\"timestamp\": 1, \"input_length\": \"1\", \"output_length\": 1, \"hash_ids\": []}",
        "{\"timestamp\": 1, \"input_length\": 99999999999, \"output_length\": 1, \"hash_ids\": []}",
        "{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1, -2]}",
        "{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1, \"x\"]}",
        "{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": {}}",
        "{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1}",
        "{\"timestamp\": 1, \"timestamp\": 2, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": []}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_not_equal(parse(bad[i], &r, &b, &n, &cap), MC_OK);
        assert_int_equal(n, 2); /* nothing appended on error */
    }
    mc_conductor_trace_limits_t lim;
    mc_conductor_trace_limits_default(&lim);
    lim.max_blocks_per_request = 2;
    const char *three = "{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1,2,3]}";
    assert_int_equal(mc_conductor_trace_parse_line(three, strlen(three), &lim, &r, &b, &n, &cap),
                     MC_ERR_TOO_LARGE);
    lim.max_line_bytes = 10;
    assert_int_equal(mc_conductor_trace_parse_line(three, strlen(three), &lim, &r, &b, &n, &cap),
                     MC_ERR_TOO_LARGE);
    mc_free(b);
}

static void test_trace_load_sort_skip(void **state)
{
    char path[] = "/tmp/mc_trace_testXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "{\"timestamp\": 20, \"input_length\": 600, \"output_length\": 2, \"hash_ids\": [0, 1]}\n");
    fprintf(f, "\n");
    fprintf(f, "garbage\n");
    fprintf(f, "{\"timestamp\": 10, \"input_length\": 600, \"output_length\": 2, \"hash_ids\": [0, 2]}\n");
    fprintf(f, "{\"timestamp\": 20, \"input_length\": 600, \"output_length\": 2, \"hash_ids\": [0, 1, 3]}\n");
    fclose(f);
    mc_conductor_trace_t *t = NULL;
    assert_int_equal(mc_conductor_trace_load(path, NULL, &t), MC_ERR_PROTOCOL); /* strict */
    mc_conductor_trace_limits_t lim;
    mc_conductor_trace_limits_default(&lim);
    lim.skip_bad = 1;
    assert_int_equal(mc_conductor_trace_load(path, &lim, &t), MC_OK);
    assert_int_equal(t->n_reqs, 3);
    assert_int_equal(t->skipped_lines, 1);
    assert_int_equal(t->reqs[0].timestamp_ms, 10); /* sorted, stable */
    assert_int_equal(t->reqs[1].line, 1);
    assert_int_equal(t->reqs[2].line, 5);
    mc_conductor_trace_stats_t s;
    assert_int_equal(mc_conductor_trace_stats(t, &s), MC_OK);
    assert_int_equal(s.blocks_requested, 7);
    assert_int_equal(s.blocks_distinct, 4);
    assert_int_equal(s.prefix_hit_blocks, 3); /* [0,2] -> 0; [0,1] -> 1; [0,1,3] -> 2 */
    mc_conductor_trace_free(t);
    lim.max_requests = 1;
    assert_int_equal(mc_conductor_trace_load(path, &lim, &t), MC_OK);
    assert_int_equal(t->n_reqs, 1);
    mc_conductor_trace_free(t);
    unlink(path);
    assert_int_equal(mc_conductor_trace_load("/nonexistent/trace", NULL, &t), MC_ERR_FILE_OPEN_FAIL);
}

static void test_trace_fast25_facts(void **state)
{
    const char *path = getenv("MC_TRACE");
    char buf[4096];
    if (!path) {
        const char *src = getenv("MC_SOURCE_DIR");
        assert_non_null(src); /* ctest sets it; the trace is part of the repository */
        snprintf(buf, sizeof(buf), "%s/data/traces/conversation_trace.jsonl", src);
        path = buf;
    }
    mc_conductor_trace_t *t;
    assert_int_equal(mc_conductor_trace_load(path, NULL, &t), MC_OK);
    mc_conductor_trace_stats_t s;
    assert_int_equal(mc_conductor_trace_stats(t, &s), MC_OK);
    assert_int_equal(s.requests, 12031);
    assert_int_equal(s.blocks_requested, 288500);
    assert_int_equal(s.blocks_distinct, 182790);
    assert_int_equal(s.blocks_requested - s.blocks_distinct, s.prefix_hit_blocks);
    assert_true(s.prefix_hit_ratio > 0.3655 && s.prefix_hit_ratio < 0.3665); /* 36.6 % */
    /* mean input ~12,035 tokens, mean output ~343 (reference §7) */
    double mean_in = (double)s.input_tokens / (double)s.requests;
    double mean_out = (double)s.output_tokens / (double)s.requests;
    assert_true(mean_in > 12000 && mean_in < 12070);
    assert_true(mean_out > 335 && mean_out < 350);
    mc_conductor_trace_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trace_parse_lines),
        cmocka_unit_test(test_trace_load_sort_skip),
        cmocka_unit_test(test_trace_fast25_facts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
