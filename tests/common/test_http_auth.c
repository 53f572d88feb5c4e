/* HTTP challenge-response (src/common/http_auth.h): header parsing, request targets, a full
 * challenge -> authorize -> check round trip, every refusal (missing, malformed, foreign or
 * stale nonce, wrong key, other method/target/body, replay), the bounded replay cache and the
 * client's nonce cache. Time is passed explicitly (mc_http_auth_check_at). */
#include "common/http_auth.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define SECRET_A "alpha-secret-0123456789"
#define SECRET_B "bravo-secret-0123456789"
#define T0 1000000u /* a CLOCK_MONOTONIC ms value */

static void test_parse(void **state)
{
    (void)state;
    mc_http_auth_params_t p;
    assert_int_equal(mc_http_auth_parse("Mooncake nonce=\"ab\", cnonce=cd,mac=\"ef\"", &p), MC_OK);
    assert_string_equal(p.nonce, "ab");
    assert_string_equal(p.cnonce, "cd");
    assert_string_equal(p.mac, "ef");
    assert_null(p.stale);
    assert_int_equal(mc_http_auth_parse("  mooncake\tnonce = \"x\" , stale=true, other=\"y\"", &p),
                     MC_OK);
    assert_string_equal(p.nonce, "x");
    assert_string_equal(p.stale, "true");
    assert_int_equal(mc_http_auth_parse("Mooncake", &p), MC_OK);
    assert_null(p.nonce);
    const char *bad[] = {
        "",
        "Basic dXNlcjpwYXNz",
        "Mooncakes nonce=\"a\"",
        "Mooncake nonce=\"a\", nonce=\"b\"", /* twice */
        "Mooncake nonce",                    /* no '=' */
        "Mooncake nonce=\"abc",              /* unterminated */
        "Mooncake nonce=\"a\\\"b\"",         /* escapes are not part of the scheme */
        "Mooncake nonce=\"a\nb\"",           /* control character */
        "Mooncake nonce=\"a\" x",            /* junk after a value */
        "Mooncake =\"a\"",                   /* empty name */
        "Mooncake nonce=a\"b",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (mc_http_auth_parse(bad[i], &p) != MC_ERR_INVALID_PARAMS)
            fail_msg("accepted: %s", bad[i]);
    assert_int_equal(mc_http_auth_parse(NULL, &p), MC_ERR_INVALID_PARAMS);
    char big[MC_HTTP_AUTH_HEADER_MAX + 16];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    memcpy(big, "Mooncake x=", 11);
    assert_int_equal(mc_http_auth_parse(big, &p), MC_ERR_INVALID_PARAMS);
}

static void test_target(void **state)
{
    (void)state;
    char t[64];
    assert_int_equal(mc_http_auth_target("http://h:1/metadata?key=a%2Fb#frag", t, sizeof(t)),
                     MC_OK);
    assert_string_equal(t, "/metadata?key=a%2Fb");
    assert_int_equal(mc_http_auth_target("http://h:1", t, sizeof(t)), MC_OK);
    assert_string_equal(t, "/");
    assert_int_equal(mc_http_auth_target("http://h:1?x=1", t, sizeof(t)), MC_OK);
    assert_string_equal(t, "/?x=1");
    assert_int_equal(mc_http_auth_target("https://u@h/a/b", t, sizeof(t)), MC_OK);
    assert_string_equal(t, "/a/b");
    assert_int_equal(mc_http_auth_target("h:1/a", t, sizeof(t)), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_http_auth_target("http://h/abcdef", t, 4), MC_ERR_INVALID_PARAMS);
}

typedef struct fx {
    mc_auth_t *a, *b;
    mc_http_auth_server_t *srv;
    char challenge[MC_HTTP_AUTH_CHALLENGE_MAX];
    char nonce[2 * MC_HTTP_AUTH_NONCE_SIZE + 1];
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));
    if (mc_auth_from_secret(SECRET_A, NULL, &f->a) != MC_OK ||
        mc_auth_from_secret(SECRET_B, NULL, &f->b) != MC_OK ||
        mc_http_auth_server_create(f->a, &f->srv) != MC_OK)
        return -1;
    /* first contact: no credentials -> a challenge */
    if (mc_http_auth_check_at(f->srv, T0, NULL, "GET", "/x", NULL, NULL, f->challenge) !=
        MC_HTTP_AUTH_MISSING)
        return -1;
    mc_http_auth_client_t c = MC_HTTP_AUTH_CLIENT_INIT;
    if (mc_http_auth_client_learn(&c, f->challenge) != 0 ||
        !mc_http_auth_client_nonce(&c, f->nonce))
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    mc_http_auth_server_free(f->srv);
    mc_auth_free(f->a);
    mc_auth_free(f->b);
    free(f);
    return 0;
}

/* Signs (method, target, body) with key k over f's nonce and checks it at now: the verdict. */
static mc_http_auth_verdict_t roundtrip(fx_t *f, const mc_auth_t *k, const char *sm,
                                        const char *st, const char *sb, const char *cm,
                                        const char *ct, const char *cb, uint64_t now,
                                        char *authz_out)
{
    char authz[MC_HTTP_AUTH_HEADER_MAX], ch[MC_HTTP_AUTH_CHALLENGE_MAX];
    assert_int_equal(mc_http_auth_authorize(k, f->nonce, sm, st, sb, strlen(sb), authz), MC_OK);
    if (authz_out)
        strcpy(authz_out, authz);
    uint8_t bh[MC_HTTP_AUTH_BODY_HASH_SIZE];
    mc_http_auth_body_hash(cb, strlen(cb), bh);
    mc_auth_peer_t peer = {0};
    mc_http_auth_verdict_t v = mc_http_auth_check_at(f->srv, now, authz, cm, ct, bh, &peer, ch);
    if (v == MC_HTTP_AUTH_OK)
        assert_true(peer.authenticated && peer.admin);
    else
        assert_memory_equal(ch, "Mooncake nonce=\"", 16); /* every refusal carries a challenge */
    return v;
}

static void test_roundtrip(void **state)
{
    fx_t *f = *state;
    assert_memory_equal(f->challenge, "Mooncake nonce=\"", 16);
    assert_null(strstr(f->challenge, "stale"));
    assert_int_equal(strlen(f->nonce), 2 * MC_HTTP_AUTH_NONCE_SIZE);
    /* the same nonce serves many requests (fresh cnonces) */
    for (int i = 0; i < 3; i++)
        assert_int_equal(roundtrip(f, f->a, "PUT", "/m?key=k", "body", "PUT", "/m?key=k", "body",
                                   T0 + 10, NULL),
                         MC_HTTP_AUTH_OK);
    /* a headers-only pre-check passes for a valid nonce and records nothing */
    char authz[MC_HTTP_AUTH_HEADER_MAX];
    assert_int_equal(mc_http_auth_authorize(f->a, f->nonce, "GET", "/", "", 0, authz), MC_OK);
    assert_int_equal(mc_http_auth_check_at(f->srv, T0, authz, "GET", "/", NULL, NULL, NULL),
                     MC_HTTP_AUTH_OK);
    uint8_t bh[MC_HTTP_AUTH_BODY_HASH_SIZE];
    mc_http_auth_body_hash("", 0, bh);
    assert_int_equal(mc_http_auth_check_at(f->srv, T0, authz, "GET", "/", bh, NULL, NULL),
                     MC_HTTP_AUTH_OK);
}

static void test_refusals(void **state)
{
    fx_t *f = *state;
    const char *m = "PUT", *t = "/metadata?key=k", *b = "{\"v\":1}";
    /* a wrong key, another method, target or body */
    assert_int_equal(roundtrip(f, f->b, m, t, b, m, t, b, T0, NULL), MC_HTTP_AUTH_BAD_MAC);
    assert_int_equal(roundtrip(f, f->a, m, t, b, "DELETE", t, b, T0, NULL), MC_HTTP_AUTH_BAD_MAC);
    assert_int_equal(roundtrip(f, f->a, m, t, b, m, "/metadata?key=j", b, T0, NULL),
                     MC_HTTP_AUTH_BAD_MAC);
    assert_int_equal(roundtrip(f, f->a, m, t, b, m, t, "{\"v\":2}", T0, NULL),
                     MC_HTTP_AUTH_BAD_MAC);
    /* replay of an accepted header, also after a little while */
    char authz[MC_HTTP_AUTH_HEADER_MAX], ch[MC_HTTP_AUTH_CHALLENGE_MAX];
    assert_int_equal(roundtrip(f, f->a, m, t, b, m, t, b, T0, authz), MC_HTTP_AUTH_OK);
    uint8_t bh[MC_HTTP_AUTH_BODY_HASH_SIZE];
    mc_http_auth_body_hash(b, strlen(b), bh);
    assert_int_equal(mc_http_auth_check_at(f->srv, T0 + 30000, authz, m, t, bh, NULL, ch),
                     MC_HTTP_AUTH_REPLAY);
    /* once the nonce expired the same header is stale, and the challenge says so */
    assert_int_equal(
        mc_http_auth_check_at(f->srv, T0 + MC_HTTP_AUTH_NONCE_TTL_MS, authz, m, t, bh, NULL, ch),
        MC_HTTP_AUTH_STALE);
    assert_non_null(strstr(ch, ", stale=true"));
    assert_int_equal(roundtrip(f, f->a, m, t, b, m, t, b, T0 + MC_HTTP_AUTH_NONCE_TTL_MS, NULL),
                     MC_HTTP_AUTH_STALE);
    /* a nonce from the future (or from another clock) is not accepted either */
    assert_int_equal(roundtrip(f, f->a, m, t, b, m, t, b, T0 - 1, NULL), MC_HTTP_AUTH_STALE);
    /* a nonce of another server process */
    mc_http_auth_server_t *other;
    assert_int_equal(mc_http_auth_server_create(f->a, &other), MC_OK);
    assert_int_equal(mc_http_auth_check_at(other, T0, authz, m, t, bh, NULL, ch),
                     MC_HTTP_AUTH_BAD_NONCE);
    mc_http_auth_server_free(other);
    /* a forged nonce (flipped bit) */
    char forged[MC_HTTP_AUTH_HEADER_MAX];
    strcpy(forged, authz);
    char *n = strstr(forged, "nonce=\"") + 7;
    n[3] = n[3] == '0' ? '1' : '0';
    assert_int_equal(mc_http_auth_check_at(f->srv, T0, forged, m, t, bh, NULL, ch),
                     MC_HTTP_AUTH_BAD_NONCE);
    /* missing and malformed */
    assert_int_equal(mc_http_auth_check_at(f->srv, T0, "", m, t, bh, NULL, ch),
                     MC_HTTP_AUTH_MISSING);
    assert_int_equal(mc_http_auth_check_at(f->srv, T0, "Basic abc", m, t, bh, NULL, ch),
                     MC_HTTP_AUTH_MALFORMED);
    assert_int_equal(mc_http_auth_check_at(f->srv, T0, "Mooncake nonce=\"00\", cnonce=\"00\", "
                                                       "mac=\"00\"",
                                           m, t, bh, NULL, ch),
                     MC_HTTP_AUTH_MALFORMED);
    /* the client refuses to sign without a keyring or with a bad nonce */
    assert_int_equal(mc_http_auth_authorize(NULL, f->nonce, m, t, b, 1, authz),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_http_auth_authorize(f->a, "abc", m, t, b, 1, authz), MC_ERR_INVALID_PARAMS);
}

/* The replay cache is bounded: full of live entries it refuses (503) rather than forget one;
 * once they expire there is room again. */
static void test_replay_cache_bound(void **state)
{
    fx_t *f = *state;
    for (unsigned i = 0; i < MC_HTTP_AUTH_REPLAY_MAX; i++)
        if (roundtrip(f, f->a, "GET", "/", "", "GET", "/", "", T0, NULL) != MC_HTTP_AUTH_OK)
            fail_msg("request %u refused", i);
    assert_int_equal(roundtrip(f, f->a, "GET", "/", "", "GET", "/", "", T0 + 1, NULL),
                     MC_HTTP_AUTH_BUSY);
    /* a new nonce after the old one expired: the old entries are dropped */
    uint64_t later = T0 + MC_HTTP_AUTH_NONCE_TTL_MS;
    mc_http_auth_challenge_at(f->srv, later, 0, f->challenge);
    mc_http_auth_client_t c = MC_HTTP_AUTH_CLIENT_INIT;
    assert_int_equal(mc_http_auth_client_learn(&c, f->challenge), 0);
    assert_true(mc_http_auth_client_nonce(&c, f->nonce));
    assert_int_equal(roundtrip(f, f->a, "GET", "/", "", "GET", "/", "", later, NULL),
                     MC_HTTP_AUTH_OK);
}

static void test_open_server_and_client_cache(void **state)
{
    (void)state;
    mc_http_auth_server_t *open;
    assert_int_equal(mc_http_auth_server_create(NULL, &open), MC_OK);
    assert_false(mc_http_auth_server_enabled(open));
    assert_int_equal(mc_http_auth_check(open, NULL, "DELETE", "/x", NULL, NULL, NULL),
                     MC_HTTP_AUTH_OK);
    mc_http_auth_server_free(open);
    mc_http_auth_client_t c = MC_HTTP_AUTH_CLIENT_INIT;
    char n[2 * MC_HTTP_AUTH_NONCE_SIZE + 1];
    assert_false(mc_http_auth_client_nonce(&c, n));
    assert_int_equal(mc_http_auth_client_learn(&c, "Basic realm=\"x\""), -1);
    assert_int_equal(mc_http_auth_client_learn(&c, "Mooncake nonce=\"abcd\""), -1);
    assert_false(mc_http_auth_client_nonce(&c, n));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_target),
        cmocka_unit_test_setup_teardown(test_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replay_cache_bound, setup, teardown),
        cmocka_unit_test(test_open_server_and_client_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
