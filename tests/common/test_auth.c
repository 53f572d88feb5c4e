/* Authentication core (src/common/auth.h): token files, the connection handshake between a
 * real client half and the server's pure functions over a socketpair, key rotation, tenant
 * binding, mutual proof (a client with a key refuses a server without it) and signatures. */
#include "common/auth.h"
#include "common/grant.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#define SECRET_A "alpha-secret-0123456789"
#define SECRET_B "bravo-secret-0123456789"

static char *write_token_file(const char *text, mode_t mode)
{
    static char path[64];
    strcpy(path, "/tmp/mc_auth_test_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
    return path;
}

static mc_auth_t *load_text(const char *text, mc_status_t want)
{
    char *path = write_token_file(text, 0600);
    mc_auth_t *a = NULL;
    assert_int_equal(mc_auth_load(path, &a), want);
    unlink(path);
    return a;
}

static void test_token_file(void **state)
{
    (void)state;
    mc_auth_t *a = NULL;
    assert_int_equal(mc_auth_load(NULL, &a), MC_OK);
    assert_null(a);
    assert_int_equal(mc_auth_load("", &a), MC_OK);
    assert_null(a);
    assert_int_equal(mc_auth_load("/nonexistent/mc_token", &a), MC_ERR_FILE_OPEN_FAIL);

    a = load_text("# rotation\n" SECRET_A "\n\n" SECRET_B " tenant=team-b # new\n", MC_OK);
    assert_int_equal(mc_auth_key_count(a), 2);
    assert_string_equal(mc_auth_client_tenant(a), "");
    mc_auth_free(a);

    assert_null(load_text("short\n", MC_ERR_INVALID_PARAMS));
    assert_null(load_text("# nothing\n\n", MC_ERR_INVALID_PARAMS));
    assert_null(load_text(SECRET_A " extra\n", MC_ERR_INVALID_PARAMS));
    assert_null(load_text(SECRET_A " tenant=\n", MC_ERR_INVALID_PARAMS));

    char *path = write_token_file(SECRET_A "\n", 0644);
    assert_int_equal(mc_auth_load(path, &a), MC_ERR_PERMISSION);
    assert_null(a);
    unlink(path);
}

typedef struct server_arg {
    int fd;
    const mc_auth_t *auth;
    mc_status_t st;
    mc_auth_peer_t peer;
} server_arg_t;

static void *server_half(void *p)
{
    server_arg_t *s = p;
    mc_auth_server_hs_t hs;
    uint8_t hello[MC_AUTH_HELLO_SIZE], proof[MC_AUTH_PROOF_SIZE], result[MC_AUTH_RESULT_SIZE];
    mc_auth_server_hello(s->auth, &hs, hello);
    assert_int_equal(write(s->fd, hello, sizeof(hello)), (ssize_t)sizeof(hello));
    size_t got = 0;
    while (got < sizeof(proof)) {
        ssize_t r = read(s->fd, proof + got, sizeof(proof) - got);
        if (r <= 0) {
            s->st = MC_ERR_CONNECTION;
            return NULL;
        }
        got += (size_t)r;
    }
    s->st = mc_auth_server_check(s->auth, &hs, proof, result, &s->peer);
    assert_int_equal(write(s->fd, result, sizeof(result)), (ssize_t)sizeof(result));
    return NULL;
}

/* Runs one handshake; returns the client's status, *server_st the server's. */
static mc_status_t handshake(const mc_auth_t *client, const mc_auth_t *server,
                             mc_status_t *server_st, mc_auth_peer_t *peer)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    server_arg_t s = {.fd = sv[1], .auth = server};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, server_half, &s), 0);
    mc_status_t st = mc_auth_client_handshake(sv[0], client, 0);
    pthread_join(t, NULL);
    close(sv[0]);
    close(sv[1]);
    *server_st = s.st;
    if (peer)
        *peer = s.peer;
    return st;
}

static void test_handshake(void **state)
{
    (void)state;
    mc_auth_t *a, *b, *ring, *tenant;
    assert_int_equal(mc_auth_from_secret(SECRET_A, NULL, &a), MC_OK);
    assert_int_equal(mc_auth_from_secret(SECRET_B, NULL, &b), MC_OK);
    assert_int_equal(mc_auth_from_secret(SECRET_A, "team-a", &tenant), MC_OK);
    ring = load_text(SECRET_B "\n" SECRET_A " tenant=team-a\n", MC_OK);

    mc_status_t sst;
    mc_auth_peer_t peer;
    /* no keys anywhere: open */
    assert_int_equal(handshake(NULL, NULL, &sst, &peer), MC_OK);
    assert_int_equal(sst, MC_OK);
    assert_int_equal(peer.authenticated, 0);
    /* same key: both sides prove, admin */
    assert_int_equal(handshake(a, a, &sst, &peer), MC_OK);
    assert_int_equal(sst, MC_OK);
    assert_int_equal(peer.authenticated, 1);
    assert_int_equal(peer.admin, 1);
    /* no key against a keyed server: refused on both sides */
    assert_int_equal(handshake(NULL, a, &sst, NULL), MC_ERR_AUTH);
    assert_int_equal(sst, MC_ERR_AUTH);
    /* wrong key */
    assert_int_equal(handshake(b, a, &sst, NULL), MC_ERR_AUTH);
    assert_int_equal(sst, MC_ERR_AUTH);
    /* keyed client refuses a server that cannot prove the key (a forged address) */
    assert_int_equal(handshake(a, NULL, &sst, NULL), MC_ERR_AUTH);
    /* rotation: a server ring with two keys accepts either; the tenant binding follows the key */
    assert_int_equal(handshake(b, ring, &sst, &peer), MC_OK);
    assert_int_equal(peer.admin, 1);
    assert_int_equal(handshake(tenant, ring, &sst, &peer), MC_OK);
    assert_int_equal(peer.admin, 0);
    assert_string_equal(peer.tenant, "team-a");

    mc_auth_free(a);
    mc_auth_free(b);
    mc_auth_free(tenant);
    mc_auth_free(ring);
}

/* mc_auth_counters: one count per half-handshake, keyed only where a keyring ran the HMAC,
 * failures on the side that saw them (counters are process-wide: deltas). */
static void test_counters(void **state)
{
    (void)state;
    mc_auth_t *a, *b;
    assert_int_equal(mc_auth_from_secret(SECRET_A, NULL, &a), MC_OK);
    assert_int_equal(mc_auth_from_secret(SECRET_B, NULL, &b), MC_OK);
    mc_auth_counters_t c0, c1;
    mc_status_t sst;
    mc_auth_counters(&c0);
    assert_int_equal(handshake(a, a, &sst, NULL), MC_OK);       /* keyed, both sides */
    assert_int_equal(handshake(NULL, NULL, &sst, NULL), MC_OK); /* open, both sides */
    assert_int_equal(handshake(b, a, &sst, NULL), MC_ERR_AUTH); /* refused by the server */
    assert_int_equal(handshake(a, NULL, &sst, NULL), MC_ERR_AUTH); /* server cannot prove */
    mc_auth_counters(&c1);
    assert_int_equal(c1.client_ok - c0.client_ok, 2);
    assert_int_equal(c1.client_ok_keyed - c0.client_ok_keyed, 1);
    assert_int_equal(c1.client_failed - c0.client_failed, 2);
    assert_int_equal(c1.server_ok - c0.server_ok, 3); /* the last one passed the server */
    assert_int_equal(c1.server_ok_keyed - c0.server_ok_keyed, 1);
    assert_int_equal(c1.server_refused - c0.server_refused, 1);
    mc_auth_free(a);
    mc_auth_free(b);
}

/* A replayed PROOF does not pass against a fresh HELLO (new server nonce). */
static void test_replay(void **state)
{
    (void)state;
    mc_auth_t *a;
    assert_int_equal(mc_auth_from_secret(SECRET_A, NULL, &a), MC_OK);
    mc_auth_server_hs_t hs1, hs2;
    uint8_t h1[MC_AUTH_HELLO_SIZE], h2[MC_AUTH_HELLO_SIZE], proof[MC_AUTH_PROOF_SIZE];
    uint8_t res[MC_AUTH_RESULT_SIZE], cn[MC_AUTH_NONCE_SIZE];
    mc_auth_server_hello(a, &hs1, h1);
    mc_auth_server_hello(a, &hs2, h2);
    assert_memory_not_equal(hs1.server_nonce, hs2.server_nonce, MC_AUTH_NONCE_SIZE);
    assert_int_equal(mc_auth_client_proof(a, h1, cn, proof), MC_OK);
    assert_int_equal(mc_auth_server_check(a, &hs1, proof, res, NULL), MC_OK);
    assert_int_equal(mc_auth_server_check(a, &hs2, proof, res, NULL), MC_ERR_AUTH);
    /* a flipped bit in the proof fails */
    proof[50] ^= 1;
    assert_int_equal(mc_auth_server_check(a, &hs1, proof, res, NULL), MC_ERR_AUTH);
    /* garbage is a protocol error */
    memset(proof, 0x41, sizeof(proof));
    assert_int_equal(mc_auth_server_check(a, &hs1, proof, res, NULL), MC_ERR_PROTOCOL);
    mc_auth_free(a);
}

static void test_sign(void **state)
{
    (void)state;
    mc_auth_t *a, *b;
    assert_int_equal(mc_auth_from_secret(SECRET_A, NULL, &a), MC_OK);
    assert_int_equal(mc_auth_from_secret(SECRET_B, NULL, &b), MC_OK);
    uint8_t mac[MC_AUTH_MAC_SIZE];
    const char msg[] = "{\"name\":\"seg\"}";
    assert_int_equal(mc_auth_sign(a, "desc", msg, sizeof(msg), mac), MC_OK);
    /* HMAC-SHA256(SECRET_A, "desc" 0 msg), computed apart (Python's hmac module) */
    char kat[2 * MC_AUTH_MAC_SIZE + 1];
    mc_auth_hex(mac, sizeof(mac), kat);
    assert_string_equal(kat, "69a469cf019ae049bf79f8aa1d7f877b32e867fef81eced0c385d64d108697af");
    assert_int_equal(mc_auth_verify(a, "desc", msg, sizeof(msg), mac, NULL), MC_OK);
    assert_int_equal(mc_auth_verify(b, "desc", msg, sizeof(msg), mac, NULL), MC_ERR_AUTH);
    assert_int_equal(mc_auth_verify(a, "other", msg, sizeof(msg), mac, NULL), MC_ERR_AUTH);
    assert_int_equal(mc_auth_verify(a, "desc", msg, sizeof(msg) - 1, mac, NULL), MC_ERR_AUTH);
    assert_int_equal(mc_auth_sign(NULL, "desc", msg, sizeof(msg), mac), MC_ERR_INVALID_PARAMS);
    /* cluster-only signatures: a tenant key neither signs nor is accepted */
    mc_auth_t *ring = load_text(SECRET_B " tenant=t\n" SECRET_A "\n", MC_OK);
    mc_auth_t *tenant_only = load_text(SECRET_B " tenant=t\n", MC_OK);
    assert_int_equal(mc_auth_has_cluster_key(ring), 1);
    assert_int_equal(mc_auth_has_cluster_key(tenant_only), 0);
    assert_int_equal(mc_auth_sign_cluster(tenant_only, "desc", msg, sizeof(msg), mac),
                     MC_ERR_PERMISSION);
    assert_int_equal(mc_auth_sign(tenant_only, "desc", msg, sizeof(msg), mac), MC_OK);
    assert_int_equal(mc_auth_verify(ring, "desc", msg, sizeof(msg), mac, NULL), MC_OK);
    assert_int_equal(mc_auth_verify_cluster(ring, "desc", msg, sizeof(msg), mac), MC_ERR_AUTH);
    assert_int_equal(mc_auth_sign_cluster(ring, "desc", msg, sizeof(msg), mac), MC_OK);
    assert_int_equal(mc_auth_verify_cluster(ring, "desc", msg, sizeof(msg), mac), MC_OK);
    assert_int_equal(mc_auth_verify_cluster(a, "desc", msg, sizeof(msg), mac), MC_OK);
    mc_auth_free(ring);
    mc_auth_free(tenant_only);
    char hex[2 * MC_AUTH_MAC_SIZE + 1];
    uint8_t back[MC_AUTH_MAC_SIZE];
    mc_auth_hex(mac, sizeof(mac), hex);
    assert_int_equal(mc_auth_unhex(hex, back, sizeof(back)), MC_OK);
    assert_memory_equal(mac, back, sizeof(mac));
    hex[3] = 'z';
    assert_int_equal(mc_auth_unhex(hex, back, sizeof(back)), MC_ERR_INVALID_PARAMS);
    hex[3] = 'A'; /* one spelling per value: upper case is refused */
    assert_int_equal(mc_auth_unhex(hex, back, sizeof(back)), MC_ERR_INVALID_PARAMS);
    mc_auth_free(a);
    mc_auth_free(b);
}

/* Threads share a key's HMAC context (each MAC works on its own copy): many threads signing
 * and verifying at once each get the value one thread alone computes. */
typedef struct sign_arg {
    const mc_auth_t *auth;
    const uint8_t *want;
    int bad;
} sign_arg_t;

static void *sign_many(void *p)
{
    sign_arg_t *a = p;
    const char msg[] = "{\"name\":\"seg\"}";
    for (int i = 0; i < 20000; i++) {
        uint8_t mac[MC_AUTH_MAC_SIZE];
        if (mc_auth_sign(a->auth, "desc", msg, sizeof(msg), mac) != MC_OK ||
            memcmp(mac, a->want, sizeof(mac)) != 0 ||
            mc_auth_verify(a->auth, "desc", msg, sizeof(msg), mac, NULL) != MC_OK)
            a->bad++;
    }
    return NULL;
}

static void test_sign_threads(void **state)
{
    (void)state;
    mc_auth_t *a;
    assert_int_equal(mc_auth_from_secret(SECRET_A, NULL, &a), MC_OK);
    const char msg[] = "{\"name\":\"seg\"}";
    uint8_t want[MC_AUTH_MAC_SIZE];
    assert_int_equal(mc_auth_sign(a, "desc", msg, sizeof(msg), want), MC_OK);
    enum { T = 4 };
    pthread_t t[T];
    sign_arg_t args[T];
    for (int i = 0; i < T; i++) {
        args[i] = (sign_arg_t){.auth = a, .want = want};
        assert_int_equal(pthread_create(&t[i], NULL, sign_many, &args[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(args[i].bad, 0);
    }
    mc_auth_free(a);
}

/* Grants (common/grant.h): round trip, and every way a grant must fail. */
static void test_grant(void **state)
{
    (void)state;
    mc_auth_t *ring, *other, *tenant_only;
    assert_int_equal(mc_auth_from_secret("grant-cluster-secret-0123", NULL, &ring), MC_OK);
    assert_int_equal(mc_auth_from_secret("grant-other-secret-012345", NULL, &other), MC_OK);
    assert_int_equal(mc_auth_from_secret("grant-tenant-secret-01234", "acme", &tenant_only), MC_OK);
    mc_grant_range_t r[2] = {{0x1000, 4096}, {0x9000, 1}};
    uint8_t g[MC_GRANT_SIZE(2)];
    size_t len = 0;
    assert_int_equal(mc_grant_sign(ring, "h:1", "acme", MC_GRANT_READ, 77, r, 2, g, &len), MC_OK);
    assert_int_equal(len, sizeof(g));
    mc_grant_view_t v;
    assert_int_equal(mc_grant_verify(ring, "h:1", "acme", g, len, &v), MC_OK);
    assert_int_equal(v.access, MC_GRANT_READ);
    assert_int_equal(v.expiry_ms, 77);
    assert_int_equal(v.n, 2);
    assert_int_equal(v.size, len);
    assert_int_equal(mc_grant_range(&v, 1).addr, 0x9000);
    assert_int_equal(mc_grant_range(&v, 1).len, 1);
    /* another segment, another tenant, another cluster key, a tenant key: the mac fails */
    assert_int_equal(mc_grant_verify(ring, "h:2", "acme", g, len, &v), MC_ERR_AUTH);
    assert_int_equal(mc_grant_verify(ring, "h:1", "acmf", g, len, &v), MC_ERR_AUTH);
    assert_int_equal(mc_grant_verify(other, "h:1", "acme", g, len, &v), MC_ERR_AUTH);
    assert_int_equal(mc_grant_verify(tenant_only, "h:1", "acme", g, len, &v), MC_ERR_AUTH);
    assert_int_equal(mc_grant_verify(NULL, "h:1", "acme", g, len, &v), MC_ERR_AUTH);
    assert_int_equal(mc_grant_sign(tenant_only, "h:1", "acme", MC_GRANT_READ, 77, r, 2, g, &len),
                     MC_ERR_PERMISSION);
    assert_int_equal(mc_grant_sign(ring, "h:1", "acme", MC_GRANT_READ, 77, r, 2, g, &len), MC_OK);
    /* every bit of the grant is covered: flipping any byte fails (mac) or is malformed */
    for (size_t i = 0; i < len; i++) {
        g[i] ^= 0x01;
        mc_status_t st = mc_grant_verify(ring, "h:1", "acme", g, len, &v);
        assert_true(st == MC_ERR_AUTH || st == MC_ERR_INVALID_PARAMS);
        g[i] ^= 0x01;
    }
    assert_int_equal(mc_grant_verify(ring, "h:1", "acme", g, len - 1, &v), MC_ERR_INVALID_PARAMS);
    /* malformed input and parameters */
    mc_grant_range_t bad[2] = {{0x1000, 0}, {UINT64_MAX, 2}};
    assert_int_equal(mc_grant_sign(ring, "h:1", "acme", MC_GRANT_READ, 1, bad, 1, g, &len),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_grant_sign(ring, "h:1", "acme", MC_GRANT_READ, 1, bad + 1, 1, g, &len),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_grant_sign(ring, "h:1", "acme", 3, 1, r, 1, g, &len), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_grant_sign(ring, "h:1", "acme", MC_GRANT_WRITE, 1, r, 0, g, &len),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_grant_parse(g, 3, &v), MC_ERR_INVALID_PARAMS);
    mc_auth_free(ring);
    mc_auth_free(other);
    mc_auth_free(tenant_only);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_file),
        cmocka_unit_test(test_handshake),
        cmocka_unit_test(test_counters),
        cmocka_unit_test(test_replay),
        cmocka_unit_test(test_sign),
        cmocka_unit_test(test_sign_threads),
        cmocka_unit_test(test_grant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
