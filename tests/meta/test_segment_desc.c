/* Unit tests for the segment descriptor JSON codec and mc_segment_desc_find. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/auth.h"
#include "common/log.h"
#include "te/segment_desc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mc_status_t parse(const char *s, mc_segment_desc_t *d)
{
    return mc_segment_desc_from_json(s, strlen(s), d);
}

static void test_roundtrip(void **state)
{
    mc_buffer_desc_t bufs[3] = {
        {.location = "cpu:1", .addr = 0x9000, .length = 0x1000, .shm_fd = 7, .shm_offset = 4096},
        {.location = "cpu:0", .addr = 0x1000, .length = 0x1000, .shm_fd = -1},
        {.location = "cuda:0", .addr = UINT64_MAX - 100, .length = 100, .shm_fd = -1,
         .shm_offset = (1ull << 63) + 5},
    };
    mc_segment_desc_t d = {.name = "127.0.0.1:12345", .protocol = "tcp", .host_id = "boot-1",
                           .pid = 1234, .tcp_data_port = 12345,
                           .timestamp = 1700000000000ull, .n_buffers = 3, .buffers = bufs,
                           .transport_info = "{\"ucx\":{\"rkey\":\"abc\"},\"n\":[1,2.5]}"};
    char *json = NULL;
    assert_int_equal(mc_segment_desc_to_json(&d, &json), MC_OK);
    assert_non_null(json);
    /* Large values travel as decimal strings, small ones as integers. */
    assert_non_null(strstr(json, "\"addr\":\"18446744073709551515\""));
    assert_non_null(strstr(json, "\"addr\":4096"));
    assert_non_null(strstr(json, "\"shm_offset\":\"9223372036854775813\""));

    mc_segment_desc_t p;
    assert_int_equal(parse(json, &p), MC_OK);
    assert_string_equal(p.name, "127.0.0.1:12345");
    assert_string_equal(p.protocol, "tcp");
    assert_string_equal(p.host_id, "boot-1");
    assert_int_equal(p.pid, 1234);
    assert_int_equal(p.tcp_data_port, 12345);
    assert_true(p.timestamp == 1700000000000ull);
    assert_int_equal(p.n_buffers, 3);
    /* sorted by addr */
    assert_string_equal(p.buffers[0].location, "cpu:0");
    assert_string_equal(p.buffers[1].location, "cpu:1");
    assert_string_equal(p.buffers[2].location, "cuda:0");
    assert_true(p.buffers[2].addr == UINT64_MAX - 100);
    assert_true(p.buffers[2].shm_offset == (1ull << 63) + 5);
    assert_int_equal(p.buffers[1].shm_fd, 7);
    assert_int_equal(p.buffers[1].shm_offset, 4096);
    assert_int_equal(p.buffers[0].shm_fd, -1);
    assert_string_equal(p.transport_info, "{\"ucx\":{\"rkey\":\"abc\"},\"n\":[1,2.5]}");

    /* Re-serialize and compare text: the codec is a fixed point after one pass. */
    char *json2 = NULL;
    assert_int_equal(mc_segment_desc_to_json(&p, &json2), MC_OK);
    mc_segment_desc_t p2;
    assert_int_equal(parse(json2, &p2), MC_OK);
    char *json3 = NULL;
    assert_int_equal(mc_segment_desc_to_json(&p2, &json3), MC_OK);
    assert_string_equal(json2, json3);
    free(json);
    free(json2);
    free(json3);
    mc_segment_desc_free(&p);
    mc_segment_desc_free(&p2);
    assert_int_equal(p.n_buffers, 0);
    assert_null(p.buffers);
}

static void test_minimal_and_defaults(void **state)
{
    mc_segment_desc_t d;
    /* upstream-shaped descriptor: no shm fields, no host_id/pid */
    assert_int_equal(parse("{\"name\":\"h:1\",\"protocol\":\"rdma\",\"buffers\":[{\"name\":"
                           "\"cpu:0\",\"addr\":1,\"length\":2}],\"unknown\":[1]}",
                           &d),
                     MC_OK);
    assert_int_equal(d.n_buffers, 1);
    assert_int_equal(d.buffers[0].shm_fd, -1);
    assert_int_equal(d.buffers[0].shm_offset, 0);
    assert_null(d.transport_info);
    assert_int_equal(d.pid, 0);
    mc_segment_desc_free(&d);

    assert_int_equal(parse("{\"name\":\"h:1\",\"buffers\":[]}", &d), MC_OK);
    assert_int_equal(d.n_buffers, 0);
    assert_int_equal(mc_segment_desc_find(&d, 0, 1), -1);
    mc_segment_desc_free(&d);

    /* decimal strings accepted for 64-bit fields */
    assert_int_equal(parse("{\"name\":\"h:1\",\"timestamp\":\"18446744073709551615\",\"buffers\":"
                           "[{\"name\":\"c\",\"addr\":\"0\",\"length\":\"18446744073709551615\"}]}",
                           &d),
                     MC_OK);
    assert_true(d.timestamp == UINT64_MAX);
    assert_true(d.buffers[0].length == UINT64_MAX);
    mc_segment_desc_free(&d);
}

static void expect_bad(const char *s, mc_status_t want)
{
    mc_segment_desc_t d;
    memset(&d, 0x5a, sizeof(d));
    mc_status_t st = parse(s, &d);
    if (st != want)
        fail_msg("input %s: got %s, want %s", s, mc_status_name(st), mc_status_name(want));
    assert_int_equal(d.n_buffers, 0);
    assert_null(d.buffers);
    assert_null(d.transport_info);
}

static void test_rejects(void **state)
{
    const mc_status_t P = MC_ERR_PROTOCOL;
    expect_bad("", P);
    expect_bad("[]", P);
    expect_bad("{\"name\":\"h\"", P);
    expect_bad("{\"buffers\":[]}", P);                         /* no name */
    expect_bad("{\"name\":\"\",\"buffers\":[]}", P);           /* empty name */
    expect_bad("{\"name\":1,\"buffers\":[]}", P);
    expect_bad("{\"name\":\"h\"}", P);                         /* no buffers */
    expect_bad("{\"name\":\"h\",\"buffers\":{}}", P);
    expect_bad("{\"name\":\"h\",\"name\":\"g\",\"buffers\":[]}", P); /* duplicate key */
    expect_bad("{\"name\":\"h\\u0000x\",\"buffers\":[]}", P);  /* embedded NUL */
    expect_bad("{\"name\":\"h\",\"protocol\":\"0123456789abcdef\",\"buffers\":[]}", P);
    expect_bad("{\"name\":\"h\",\"tcp_data_port\":65536,\"buffers\":[]}", P);
    expect_bad("{\"name\":\"h\",\"tcp_data_port\":-1,\"buffers\":[]}", P);
    expect_bad("{\"name\":\"h\",\"tcp_data_port\":\"80\",\"buffers\":[]}", P);
    expect_bad("{\"name\":\"h\",\"pid\":4294967296,\"buffers\":[]}", P);
    expect_bad("{\"name\":\"h\",\"timestamp\":-1,\"buffers\":[]}", P);
    expect_bad("{\"name\":\"h\",\"timestamp\":1.5,\"buffers\":[]}", P);
    expect_bad("{\"name\":\"h\",\"buffers\":[1]}", P);
    expect_bad("{\"name\":\"h\",\"buffers\":[{\"addr\":1,\"length\":1}]}", P);
    expect_bad("{\"name\":\"h\",\"buffers\":[{\"name\":\"c\",\"length\":1}]}", P);
    expect_bad("{\"name\":\"h\",\"buffers\":[{\"name\":\"c\",\"addr\":1,\"length\":0}]}", P);
    expect_bad("{\"name\":\"h\",\"buffers\":[{\"name\":\"c\",\"addr\":-1,\"length\":1}]}", P);
    expect_bad("{\"name\":\"h\",\"buffers\":[{\"name\":\"c\",\"addr\":\"-1\",\"length\":1}]}", P);
    expect_bad("{\"name\":\"h\",\"buffers\":[{\"name\":\"c\",\"addr\":\" 1\",\"length\":1}]}", P);
    expect_bad("{\"name\":\"h\",\"buffers\":[{\"name\":\"c\",\"addr\":\"\",\"length\":1}]}", P);
    expect_bad("{\"name\":\"h\",\"buffers\":[{\"name\":\"c\",\"addr\":\"18446744073709551616\","
               "\"length\":1}]}", P);                          /* 2^64 */
    expect_bad("{\"name\":\"h\",\"buffers\":[{\"name\":\"c\",\"addr\":\"18446744073709551615\","
               "\"length\":1}]}", P);                          /* addr + length overflows */
    expect_bad("{\"name\":\"h\",\"buffers\":[{\"name\":\"c\",\"addr\":9223372036854775808,"
               "\"length\":1}]}", P);                          /* integer beyond int64 */
    expect_bad("{\"name\":\"h\",\"buffers\":[{\"name\":\"c\",\"addr\":1,\"length\":1,"
               "\"shm_fd\":-2}]}", P);
    expect_bad("{\"name\":\"h\",\"buffers\":[{\"name\":\"c\",\"addr\":1,\"length\":1,"
               "\"shm_offset\":\"18446744073709551615\"}]}", P);
    /* overlap: [100,200) and [150,160) */
    expect_bad("{\"name\":\"h\",\"buffers\":[{\"name\":\"a\",\"addr\":100,\"length\":100},"
               "{\"name\":\"b\",\"addr\":150,\"length\":10}]}", P);
    /* duplicate start */
    expect_bad("{\"name\":\"h\",\"buffers\":[{\"name\":\"a\",\"addr\":100,\"length\":1},"
               "{\"name\":\"b\",\"addr\":100,\"length\":1}]}", P);
    /* location too long (64 chars incl. NUL max) */
    char big[256];
    snprintf(big, sizeof(big), "{\"name\":\"h\",\"buffers\":[{\"name\":\"%064d\",\"addr\":1,"
             "\"length\":1}]}", 0);
    expect_bad(big, P);
    /* segment name too long */
    char *nm = malloc(1024);
    memset(nm, 'x', 1023);
    nm[1023] = 0;
    char *doc = malloc(2048);
    snprintf(doc, 2048, "{\"name\":\"%.*s\",\"buffers\":[]}", MC_TE_NAME_MAX, nm);
    expect_bad(doc, P);
    snprintf(doc, 2048, "{\"name\":\"%.*s\",\"buffers\":[]}", MC_TE_NAME_MAX - 1, nm);
    mc_segment_desc_t d;
    assert_int_equal(parse(doc, &d), MC_OK);
    mc_segment_desc_free(&d);
    free(nm);
    free(doc);
    /* size cap: not even parsed */
    assert_int_equal(mc_segment_desc_from_json("{}", MC_SEGMENT_DESC_MAX_JSON + 1, &d),
                     MC_ERR_TOO_LARGE);
    /* non-NUL-terminated input: length respected */
    const char *s = "{\"name\":\"h\",\"buffers\":[]}GARBAGE";
    assert_int_equal(mc_segment_desc_from_json(s, strlen(s) - 7, &d), MC_OK);
    mc_segment_desc_free(&d);
}

static void test_buffer_cap(void **state)
{
    size_t n = MC_SEGMENT_MAX_BUFFERS + 1;
    size_t cap = n * 64 + 64;
    char *doc = malloc(cap);
    size_t off = (size_t)snprintf(doc, cap, "{\"name\":\"h\",\"buffers\":[");
    for (size_t i = 0; i < n; i++)
        off += (size_t)snprintf(doc + off, cap - off, "%s{\"name\":\"c\",\"addr\":%zu,\"length\":1}",
                                i ? "," : "", i * 2);
    snprintf(doc + off, cap - off, "]}");
    mc_segment_desc_t d;
    assert_int_equal(parse(doc, &d), MC_ERR_TOO_LARGE);
    assert_null(d.buffers);
    /* exactly at the cap is fine */
    char *last = strrchr(doc, '{');
    strcpy(last - 1, "]}");
    assert_int_equal(parse(doc, &d), MC_OK);
    assert_int_equal(d.n_buffers, MC_SEGMENT_MAX_BUFFERS);
    assert_int_equal(mc_segment_desc_find(&d, 2 * 1000, 1), 1000);
    assert_int_equal(mc_segment_desc_find(&d, 2 * 1000 + 1, 1), -1);
    mc_segment_desc_free(&d);
    free(doc);

    mc_segment_desc_t big = {.name = "h", .n_buffers = MC_SEGMENT_MAX_BUFFERS + 1};
    big.buffers = calloc(big.n_buffers, sizeof(mc_buffer_desc_t));
    char *json = NULL;
    assert_int_equal(mc_segment_desc_to_json(&big, &json), MC_ERR_TOO_LARGE);
    assert_null(json);
    free(big.buffers);
}

static void test_find(void **state)
{
    mc_buffer_desc_t bufs[] = {
        {.location = "a", .addr = 1000, .length = 100},
        {.location = "b", .addr = 2000, .length = 1},
        {.location = "c", .addr = UINT64_MAX - 10, .length = 10},
    };
    mc_segment_desc_t d = {.name = "h", .n_buffers = 3, .buffers = bufs};
    assert_int_equal(mc_segment_desc_normalize(&d), MC_OK);
    assert_int_equal(mc_segment_desc_find(&d, 1000, 100), 0);
    assert_int_equal(mc_segment_desc_find(&d, 1050, 50), 0);
    assert_int_equal(mc_segment_desc_find(&d, 1050, 51), -1);
    assert_int_equal(mc_segment_desc_find(&d, 999, 1), -1);
    assert_int_equal(mc_segment_desc_find(&d, 0, 1), -1);
    assert_int_equal(mc_segment_desc_find(&d, 1000, 0), -1);
    assert_int_equal(mc_segment_desc_find(&d, 1100, 1), -1);
    assert_int_equal(mc_segment_desc_find(&d, 2000, 1), 1);
    assert_int_equal(mc_segment_desc_find(&d, 2000, 2), -1);
    assert_int_equal(mc_segment_desc_find(&d, UINT64_MAX - 10, 10), 2);
    assert_int_equal(mc_segment_desc_find(&d, UINT64_MAX - 1, 1), 2);
    /* would overflow if computed as addr + len */
    assert_int_equal(mc_segment_desc_find(&d, UINT64_MAX - 1, UINT64_MAX), -1);
    assert_int_equal(mc_segment_desc_find(&d, 1050, UINT64_MAX), -1);
    assert_int_equal(mc_segment_desc_find(&d, UINT64_MAX, 1), -1);
    assert_int_equal(mc_segment_desc_find(NULL, 1000, 1), -1);

    /* normalize sorts and refuses overlaps and overflow */
    mc_buffer_desc_t un[] = {{.location = "b", .addr = 50, .length = 10},
                             {.location = "a", .addr = 10, .length = 40}};
    mc_segment_desc_t u = {.name = "h", .n_buffers = 2, .buffers = un};
    assert_int_equal(mc_segment_desc_normalize(&u), MC_OK);
    assert_string_equal(un[0].location, "a");
    assert_int_equal(mc_segment_desc_find(&u, 49, 1), 0);
    assert_int_equal(mc_segment_desc_find(&u, 49, 2), -1); /* spans two buffers */
    un[0].length = 41;
    assert_int_equal(mc_segment_desc_normalize(&u), MC_ERR_INVALID_PARAMS);
    un[0].length = 0;
    assert_int_equal(mc_segment_desc_normalize(&u), MC_ERR_INVALID_PARAMS);
    un[0].length = 1;
    un[1].addr = UINT64_MAX;
    assert_int_equal(mc_segment_desc_normalize(&u), MC_ERR_INVALID_PARAMS);
}

static void test_encode_bad_input(void **state)
{
    mc_segment_desc_t d = {.name = "h", .transport_info = "{not json"};
    char *json = (char *)1;
    assert_int_equal(mc_segment_desc_to_json(&d, &json), MC_ERR_INVALID_PARAMS);
    assert_null(json);
    d.transport_info = "\"a string is fine\"";
    assert_int_equal(mc_segment_desc_to_json(&d, &json), MC_OK);
    mc_segment_desc_t p;
    assert_int_equal(parse(json, &p), MC_OK);
    assert_string_equal(p.transport_info, "\"a string is fine\"");
    mc_segment_desc_free(&p);
    free(json);
    d.transport_info = NULL;
    memset(d.name, 'x', sizeof(d.name)); /* not NUL-terminated */
    assert_int_equal(mc_segment_desc_to_json(&d, &json), MC_ERR_INVALID_PARAMS);
}

/* The signed form: sealed bytes verify with the same key and give back the exact descriptor
 * bytes; another key, an unsigned value (with a keyring), any changed byte and malformed
 * envelopes are refused; without a keyring the descriptor inside is returned unchecked. */
static void test_signed_form(void **state)
{
    (void)state;
    mc_auth_t *a = NULL, *b = NULL;
    assert_int_equal(mc_auth_from_secret("segment-desc-secret-A", NULL, &a), MC_OK);
    assert_int_equal(mc_auth_from_secret("segment-desc-secret-B", NULL, &b), MC_OK);
    const char *desc = "{\"name\":\"127.0.0.1:1\",\"buffers\":[]}";
    size_t dl = strlen(desc);
    char *sealed = NULL;
    size_t sl = 0;
    /* no cluster key to sign with */
    assert_int_equal(mc_segment_desc_seal(NULL, desc, dl, &sealed, &sl), MC_ERR_PERMISSION);
    assert_int_equal(mc_segment_desc_seal(a, desc, dl, &sealed, &sl), MC_OK);
    assert_int_equal(sl, strlen(sealed));
    assert_int_equal(strncmp(sealed, "{\"mac\":\"", 8), 0);
    const char *inner;
    size_t il;
    int sig = 0;
    assert_int_equal(mc_segment_desc_unseal(a, sealed, sl, &inner, &il, &sig), MC_OK);
    assert_int_equal(sig, 1);
    assert_int_equal(il, dl);
    assert_memory_equal(inner, desc, dl);
    mc_segment_desc_t d;
    assert_int_equal(mc_segment_desc_from_json(inner, il, &d), MC_OK);
    assert_string_equal(d.name, "127.0.0.1:1");
    mc_segment_desc_free(&d);
    /* the sealed value as a whole is JSON, and not a descriptor (no "name"): strict */
    assert_int_equal(mc_segment_desc_from_json(sealed, sl, &d), MC_ERR_PROTOCOL);
    /* another cluster's key */
    assert_int_equal(mc_segment_desc_unseal(b, sealed, sl, &inner, &il, &sig), MC_ERR_AUTH);
    /* unsigned, with a keyring: refused; without: passed through */
    assert_int_equal(mc_segment_desc_unseal(a, desc, dl, &inner, &il, &sig), MC_ERR_AUTH);
    assert_int_equal(mc_segment_desc_unseal(NULL, desc, dl, &inner, &il, &sig), MC_OK);
    assert_int_equal(sig, 0);
    assert_ptr_equal(inner, desc);
    assert_int_equal(mc_segment_desc_unseal(NULL, sealed, sl, &inner, &il, &sig), MC_OK);
    assert_int_equal(il, dl);
    /* every single changed byte is refused (AUTH for the mac or the body, PROTOCOL for the
     * envelope's fixed bytes) */
    for (size_t i = 0; i < sl; i++) {
        char *t = strdup(sealed);
        t[i] = t[i] == 'a' ? 'b' : 'a';
        mc_status_t st = mc_segment_desc_unseal(a, t, sl, &inner, &il, &sig);
        assert_true(st == MC_ERR_AUTH || st == MC_ERR_PROTOCOL);
        free(t);
    }
    /* truncated, extended, blanks added */
    assert_int_not_equal(mc_segment_desc_unseal(a, sealed, sl - 1, &inner, &il, &sig), MC_OK);
    assert_int_not_equal(mc_segment_desc_unseal(a, sealed, 20, &inner, &il, &sig), MC_OK);
    char longer[512];
    snprintf(longer, sizeof(longer), "%s ", sealed);
    assert_int_not_equal(mc_segment_desc_unseal(a, longer, strlen(longer), &inner, &il, &sig),
                         MC_OK);
    const char *spaced = "{\"mac\": \"00\",\"desc\":{}}";
    assert_int_not_equal(mc_segment_desc_unseal(a, spaced, strlen(spaced), &inner, &il, &sig),
                         MC_OK);
    free(sealed);
    mc_auth_free(a);
    mc_auth_free(b);
}

int main(void)
{
    mc_log_set_level(getenv("MC_TEST_LOG") ? MC_LOG_LEVEL_DEBUG : MC_LOG_LEVEL_OFF);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),   cmocka_unit_test(test_minimal_and_defaults),
        cmocka_unit_test(test_rejects),     cmocka_unit_test(test_buffer_cap),
        cmocka_unit_test(test_find),        cmocka_unit_test(test_encode_bad_input),
        cmocka_unit_test(test_signed_form),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
