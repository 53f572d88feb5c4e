/* The HTTP metadata server with a keyring, in process: anonymous GET/PUT/DELETE are answered
 * 401 with a challenge and change nothing, a client with the wrong token is refused, the right
 * token works (through the metadata client, which signs), a captured Authorization header
 * cannot be replayed, and a flood of idle connections from one address does not keep a signed
 * GET from another address waiting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "common/http_auth.h"
#include "common/net.h"
#include "common/time.h"
#include "mooncake/te.h"
#include "support/test_util.h"
#include "te/metadata.h"
#include "te/metadata_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define SECRET "metadata-cluster-secret-0123"
#define OTHER "some-other-secret-0123456789"

typedef struct fixture {
    mc_auth_t *ring, *wrong;
    mc_meta_server_t *srv;
    uint16_t port;
    mc_meta_t *good; /* signs with SECRET */
    char uri[128];
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    if (mc_auth_from_secret(SECRET, NULL, &f->ring) != MC_OK ||
        mc_auth_from_secret(OTHER, NULL, &f->wrong) != MC_OK)
        return -1;
    mc_meta_server_opts_t o = {.host = "127.0.0.1", .auth = f->ring};
    if (mc_meta_server_start_opts(&o, &f->srv) != MC_OK)
        return -1;
    f->port = mc_meta_server_port(f->srv);
    snprintf(f->uri, sizeof(f->uri), "http://127.0.0.1:%u/metadata", f->port);
    mc_meta_opts_t mo = {.auth = f->ring};
    if (mc_meta_open_opts(f->uri, &mo, &f->good) != MC_OK)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    mc_meta_close(f->good);
    mc_meta_server_stop(f->srv);
    mc_auth_free(f->ring);
    mc_auth_free(f->wrong);
    free(f);
    return 0;
}

static void check_value(mc_meta_t *m, const char *key, const char *want)
{
    char *v = NULL;
    mc_status_t st = mc_meta_get(m, key, &v);
    if (!want) {
        assert_int_equal(st, MC_ERR_OBJECT_NOT_FOUND);
        return;
    }
    if (st != MC_OK)
        fail_msg("key '%s': got %s", key, mc_status_name(st));
    assert_string_equal(v, want);
    mc_free(v);
}

/* Anonymous requests: 401 with a Mooncake challenge, and nothing read or changed. */
static void test_anonymous_refused(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(mc_meta_put(f->good, "seg", "{\"real\":1}"), MC_OK);
    const char *reqs[] = {
        "GET /metadata?key=seg HTTP/1.0\r\n\r\n",
        "PUT /metadata?key=seg HTTP/1.0\r\nContent-Length: 11\r\n\r\n{\"forged\":1}",
        "PUT /metadata?key=new HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}",
        "DELETE /metadata?key=seg HTTP/1.0\r\n\r\n",
        "GET /metadata?key=seg HTTP/1.0\r\nAuthorization: Mooncake nonce=\"00\"\r\n\r\n",
        "GET /metadata?key=seg HTTP/1.0\r\nAuthorization: Basic dTpw\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++) {
        char *resp = NULL;
        int code = mt_http_raw(f->port, reqs[i], strlen(reqs[i]), &resp);
        if (code != 401)
            fail_msg("request %zu: want 401, got %d:\n%s", i, code, resp ? resp : "");
        assert_non_null(strstr(resp, "WWW-Authenticate: Mooncake nonce=\""));
        assert_null(strstr(resp, "real")); /* the value was not revealed */
        free(resp);
    }
    assert_int_equal(mc_meta_server_count(f->srv), 1);
    check_value(f->good, "seg", "{\"real\":1}");
    check_value(f->good, "new", NULL);
    /* /health stays open (liveness probes) */
    assert_int_equal(mt_wait_http_ok(f->port, "/health", 2000), 0);
    /* a client without a keyring gets MC_ERR_AUTH */
    mc_meta_t *anon;
    assert_int_equal(mc_meta_open(f->uri, &anon), MC_OK);
    char *v = NULL;
    assert_int_equal(mc_meta_get(anon, "seg", &v), MC_ERR_AUTH);
    assert_int_equal(mc_meta_put(anon, "seg", "{\"forged\":1}"), MC_ERR_AUTH);
    assert_int_equal(mc_meta_del(anon, "seg"), MC_ERR_AUTH);
    mc_meta_close(anon);
    check_value(f->good, "seg", "{\"real\":1}");
}

/* A client proving another token is refused for reads and writes; the right one works. */
static void test_wrong_and_right_token(void **state)
{
    fixture_t *f = *state;
    mc_meta_t *bad;
    mc_meta_opts_t mo = {.auth = f->wrong};
    assert_int_equal(mc_meta_open_opts(f->uri, &mo, &bad), MC_OK);
    char *v = NULL;
    assert_int_equal(mc_meta_put(bad, "k", "{\"forged\":1}"), MC_ERR_AUTH);
    assert_int_equal(mc_meta_get(bad, "k", &v), MC_ERR_AUTH);
    assert_int_equal(mc_meta_server_count(f->srv), 0);
    for (int i = 0; i < 20; i++) { /* many requests share one nonce */
        char val[32];
        snprintf(val, sizeof(val), "{\"v\":%d}", i);
        assert_int_equal(mc_meta_put(f->good, "k", val), MC_OK);
        check_value(f->good, "k", val);
    }
    assert_int_equal(mc_meta_del(bad, "k"), MC_ERR_AUTH);
    check_value(f->good, "k", "{\"v\":19}");
    assert_int_equal(mc_meta_del(f->good, "k"), MC_OK);
    check_value(f->good, "k", NULL);
    mc_meta_close(bad);
}

/* A fresh client's first request is a 4 MiB PUT (the value cap): the server would refuse it
 * unsigned right after its headers and may cut the upload off before the 401 is read, so the
 * client learns the nonce from a bodiless request first, signs, and gets its value stored. */
static void test_first_request_large_put(void **state)
{
    fixture_t *f = *state;
    size_t n = 4u << 20;
    char *val = malloc(n + 1);
    memset(val, 'x', n);
    val[n] = '\0';
    mc_meta_t *fresh;
    mc_meta_opts_t mo = {.auth = f->ring};
    assert_int_equal(mc_meta_open_opts(f->uri, &mo, &fresh), MC_OK);
    assert_int_equal(mc_meta_put(fresh, "big", val), MC_OK);
    check_value(f->good, "big", val);
    mc_meta_close(fresh);
    free(val);
}

/* The transfer engine signs its metadata requests with mc_te_config_t.auth_token_file: it
 * publishes its descriptor and removes it at destroy; without the token it cannot start. */
static void test_engine_signs(void **state)
{
    fixture_t *f = *state;
    char path[] = "/tmp/mc_meta_auth_tokXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, SECRET "\n", strlen(SECRET) + 1), (ssize_t)strlen(SECRET) + 1);
    assert_int_equal(fchmod(fd, 0600), 0);
    close(fd);
    mc_te_config_t cfg = {.metadata_uri = f->uri, .local_server_name = "127.0.0.1",
                          .protocol = "tcp"};
    mc_te_t *te = NULL;
    assert_int_equal(mc_te_create(&cfg, &te), MC_ERR_AUTH); /* no token: refused */
    assert_null(te);
    assert_int_equal(mc_meta_server_count(f->srv), 0);
    cfg.auth_token_file = path;
    assert_int_equal(mc_te_create(&cfg, &te), MC_OK);
    assert_int_equal(mc_meta_server_count(f->srv), 1);
    char key[MC_TE_NAME_MAX + 32], *v = NULL;
    snprintf(key, sizeof(key), "mooncake/ram/%s", mc_te_local_name(te));
    assert_int_equal(mc_meta_get(f->good, key, &v), MC_OK);
    mc_free(v);
    mc_te_destroy(te);
    assert_int_equal(mc_meta_server_count(f->srv), 0);
    unlink(path);
}

/* Fetches a challenge and signs one raw request with it. */
static void signed_request(fixture_t *f, const char *method, const char *target, const char *body,
                           char *out, size_t n)
{
    char *resp = NULL;
    const char *probe = "GET /metadata?key=x HTTP/1.0\r\n\r\n";
    assert_int_equal(mt_http_raw(f->port, probe, strlen(probe), &resp), 401);
    char *w = strstr(resp, "WWW-Authenticate: ");
    assert_non_null(w);
    w += strlen("WWW-Authenticate: ");
    w[strcspn(w, "\r\n")] = '\0';
    mc_http_auth_client_t c = MC_HTTP_AUTH_CLIENT_INIT;
    assert_int_equal(mc_http_auth_client_learn(&c, w), 0);
    free(resp);
    char nonce[2 * MC_HTTP_AUTH_NONCE_SIZE + 1], authz[MC_HTTP_AUTH_HEADER_MAX];
    assert_true(mc_http_auth_client_nonce(&c, nonce));
    assert_int_equal(
        mc_http_auth_authorize(f->ring, nonce, method, target, body, strlen(body), authz), MC_OK);
    snprintf(out, n, "%s %s HTTP/1.0\r\nAuthorization: %s\r\nContent-Length: %zu\r\n\r\n%s",
             method, target, authz, strlen(body), body);
}

/* A captured request is accepted once; replayed as is, or with another body, it is refused. */
static void test_replay_refused(void **state)
{
    fixture_t *f = *state;
    char req[2048], *resp = NULL;
    signed_request(f, "PUT", "/metadata?key=r", "{\"v\":1}", req, sizeof(req));
    assert_int_equal(mt_http_raw(f->port, req, strlen(req), &resp), 200);
    free(resp);
    check_value(f->good, "r", "{\"v\":1}");
    assert_int_equal(mc_meta_put(f->good, "r", "{\"v\":2}"), MC_OK);
    assert_int_equal(mt_http_raw(f->port, req, strlen(req), &resp), 401); /* replay */
    assert_non_null(strstr(resp, "replayed"));
    free(resp);
    check_value(f->good, "r", "{\"v\":2}");
    /* the same header over another body or key */
    signed_request(f, "PUT", "/metadata?key=r", "{\"v\":3}", req, sizeof(req));
    char *body = strstr(req, "\r\n\r\n") + 4;
    body[5] = '9';
    assert_int_equal(mt_http_raw(f->port, req, strlen(req), &resp), 401);
    free(resp);
    signed_request(f, "DELETE", "/metadata?key=r", "", req, sizeof(req));
    memcpy(strstr(req, "key=r"), "key=s", 5);
    assert_int_equal(mt_http_raw(f->port, req, strlen(req), &resp), 401);
    free(resp);
    check_value(f->good, "r", "{\"v\":2}");
}

/* 1,100 idle connections from 127.0.0.2 (more than the server's connection limit) must not
 * keep a signed GET from 127.0.0.1 waiting: it answers within 1 s. */
#define FLOOD 1100
static void test_idle_flood(void **state)
{
    fixture_t *f = *state;
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < FLOOD + 256) {
        rl.rlim_cur = rl.rlim_max < FLOOD + 256 ? rl.rlim_max : FLOOD + 256;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < FLOOD + 256)
        skip(); /* cannot open the flood here */
    assert_int_equal(mc_meta_put(f->good, "flood", "{\"ok\":1}"), MC_OK);
    int *fds = calloc(FLOOD, sizeof(int));
    struct sockaddr_in src = {.sin_family = AF_INET}, dst = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.2", &src.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
    dst.sin_port = htons(f->port);
    int opened = 0;
    for (int i = 0; i < FLOOD; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        assert_true(fds[i] >= 0);
        assert_int_equal(bind(fds[i], (struct sockaddr *)&src, sizeof(src)), 0);
        int rc = connect(fds[i], (struct sockaddr *)&dst, sizeof(dst));
        opened += rc == 0 || errno == EINPROGRESS;
    }
    assert_int_equal(opened, FLOOD);
    /* wait until every flood connection is established (queued before the GET) */
    uint64_t deadline = mc_now_ms() + 10000;
    for (int i = 0; i < FLOOD; i++) {
        struct pollfd p = {.fd = fds[i], .events = POLLOUT};
        while (poll(&p, 1, 100) == 0 && mc_now_ms() < deadline) {
        }
        assert_true(p.revents & (POLLOUT | POLLHUP | POLLERR));
    }
    mc_meta_t *fresh; /* no cached nonce: the GET takes its full two round trips */
    mc_meta_opts_t mo = {.auth = f->ring, .timeout_ms = 5000};
    assert_int_equal(mc_meta_open_opts(f->uri, &mo, &fresh), MC_OK);
    uint64_t t0 = mc_now_ms();
    char *v = NULL;
    mc_status_t st = mc_meta_get(fresh, "flood", &v);
    uint64_t took = mc_now_ms() - t0;
    if (st != MC_OK || took > 1000)
        fail_msg("signed GET under an idle flood: %s after %llu ms", mc_status_name(st),
                 (unsigned long long)took);
    assert_string_equal(v, "{\"ok\":1}");
    mc_free(v);
    mc_meta_close(fresh);
    for (int i = 0; i < FLOOD; i++)
        close(fds[i]);
    free(fds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_anonymous_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_and_right_token, setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_request_large_put, setup, teardown),
        cmocka_unit_test_setup_teardown(test_engine_signs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replay_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idle_flood, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
