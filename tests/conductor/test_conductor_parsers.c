/* Mutation test of the conductor's input parsers (event JSON lines, trace lines): valid seed
 * lines are mutated (byte flips, truncation, duplication, insertion of JSON punctuation, huge
 * numbers) and fed to the parsers; they must return a status and never crash, read out of
 * bounds (run under ASan in the sanitizer build) or accept an event without a segment. A
 * deterministic stand-in for a libFuzzer target that needs no corpus directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "common/log.h"
#include "conductor/index.h"
#include "conductor/router.h"
#include "conductor/trace.h"

#include <stdlib.h>
#include <string.h>

static const char *seeds[] = {
    "{\"seq\":7,\"kind\":\"committed\",\"hash\":42,\"size\":65536,\"segment\":\"n1/s0\",\"host\":\"n1\",\"tier\":\"ssd\"}",
    "{\"seq\":8,\"kind\":\"evicted\",\"hash\":\"0xffffffffffffffff\",\"segment\":\"s\"}",
    "{\"seq\":9,\"kind\":\"removed\",\"key\":\"tenant/llama/rank3/00000000000000ff\",\"segment\":\"s\"}",
    "{\"seq\":10,\"kind\":\"segment_lost\",\"segment\":\"s\"}",
    "{\"timestamp\": 5, \"input_length\": 1000, \"output_length\": 7, \"hash_ids\": [0, 1, 2]}",
    "{\"timestamp\": 0, \"input_length\": 6758, \"output_length\": 500, \"hash_ids\": [0, 1, 2, 3, 4, 5, 6, 7]}",
};
static const char *inserts[] = {"{", "}", "[", "]", ",", ":", "\"", "\\u0000", "-", "1e999",
                                "18446744073709551616", "null", "true", "\xff\xfe", " "};

static void test_parsers_mutations(void **state)
{
    mc_log_set_level(MC_LOG_LEVEL_OFF);
    uint64_t rng = 2024;
    char buf[4096];
    char seg[MC_CONDUCTOR_NAME_MAX + 1], host[MC_CONDUCTOR_NAME_MAX + 1];
    uint64_t *blocks = NULL;
    size_t nb = 0, cap = 0;
    mc_conductor_index_t *idx;
    assert_int_equal(mc_conductor_index_create(NULL, &idx), MC_OK);
    size_t accepted_ev = 0, accepted_tr = 0;
    for (int it = 0; it < 60000; it++) {
        const char *s = seeds[mc_conductor_rand(&rng) % (sizeof(seeds) / sizeof(seeds[0]))];
        size_t len = strlen(s);
        memcpy(buf, s, len);
        int muts = 1 + (int)(mc_conductor_rand(&rng) % 4);
        for (int m = 0; m < muts; m++) {
            size_t pos = len ? (size_t)(mc_conductor_rand(&rng) % len) : 0;
            switch (mc_conductor_rand(&rng) % 5) {
            case 0: /* flip a byte */
                if (len)
                    buf[pos] = (char)(mc_conductor_rand(&rng) & 0xff);
                break;
            case 1: /* truncate */
                len = pos;
                break;
            case 2: { /* insert a token */
                const char *ins = inserts[mc_conductor_rand(&rng) % (sizeof(inserts) / sizeof(inserts[0]))];
                size_t il = strlen(ins);
                if (len + il < sizeof(buf)) {
                    memmove(buf + pos + il, buf + pos, len - pos);
                    memcpy(buf + pos, ins, il);
                    len += il;
                }
                break;
            }
            case 3: /* duplicate a span */
                if (len && len * 2 < sizeof(buf)) {
                    memcpy(buf + len, buf, len);
                    len *= 2;
                }
                break;
            default: /* delete a byte */
                if (len) {
                    memmove(buf + pos, buf + pos + 1, len - pos - 1);
                    len--;
                }
            }
        }
        mc_conductor_event_t ev;
        if (mc_conductor_event_parse_json(buf, len, &ev, seg, host) == MC_OK) {
            accepted_ev++;
            assert_non_null(ev.segment);
            assert_true(strlen(ev.segment) <= MC_CONDUCTOR_NAME_MAX);
            mc_conductor_index_stats_t st;
            mc_conductor_index_get_stats(idx, &st);
            ev.seq = st.next_seq;
            mc_status_t rc = mc_conductor_index_apply(idx, &ev);
            assert_true(rc == MC_OK || rc == MC_ERR_INVALID_PARAMS);
        }
        mc_conductor_request_t r;
        size_t before = nb;
        mc_status_t rc = mc_conductor_trace_parse_line(buf, len, NULL, &r, &blocks, &nb, &cap);
        if (rc == MC_OK) {
            accepted_tr++;
            assert_int_equal(nb - before, r.n_blocks);
        } else {
            assert_int_equal(nb, before);
        }
    }
    /* the index is still consistent and queryable */
    uint64_t q[] = {42, 0, 1};
    uint32_t h = 0;
    mc_conductor_prefix_t out;
    assert_int_equal(mc_conductor_index_query(idx, q, 3, &h, 1, 0, &out), MC_OK);
    assert_true(accepted_ev > 100 && accepted_tr > 100); /* the mutations are not all fatal */
    mc_conductor_index_destroy(idx);
    mc_free(blocks);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parsers_mutations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
