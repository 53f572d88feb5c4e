/* Unit tests for the metadata client front end: base64, connection-string parsing, caps,
 * P2PHANDSHAKE behaviour and error mapping against closed ports (no servers needed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/log.h"
#include "common/net.h"
#include "common/time.h"
#include "te/metadata.h"
#include "te/metadata_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Every client below that talks to a server is opened with this request timeout. */
#define TEST_TIMEOUT_MS 300

static void test_b64_vectors(void **state)
{
    /* RFC 4648 section 10 */
    const char *in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    const char *out[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (size_t i = 0; i < 7; i++) {
        char *e = mc_b64_encode(in[i], strlen(in[i]));
        assert_non_null(e);
        assert_string_equal(e, out[i]);
        assert_int_equal(strlen(e), mc_b64_encoded_len(strlen(in[i])));
        char *d;
        size_t n;
        assert_int_equal(mc_b64_decode(e, strlen(e), &d, &n), MC_OK);
        assert_int_equal(n, strlen(in[i]));
        assert_memory_equal(d, in[i], n);
        assert_int_equal(d[n], '\0');
        free(d);
        free(e);
    }
    /* every byte value, every length 0..300 */
    unsigned char buf[300];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (unsigned char)(i * 7 + 3);
    for (size_t len = 0; len <= sizeof(buf); len++) {
        char *e = mc_b64_encode(buf, len);
        char *d;
        size_t n;
        assert_int_equal(mc_b64_decode(e, strlen(e), &d, &n), MC_OK);
        assert_int_equal(n, len);
        assert_memory_equal(d, buf, len);
        free(d);
        free(e);
    }
}

static void test_b64_rejects(void **state)
{
    const char *bad[] = {"Zg=",  "Zg", "Z===", "====", "Zm9v!A==", "Zg==Zg==", "Zm=v",
                         "Zh==", /* non-zero pad bits */
                         "Zm9=", /* non-zero pad bits */
                         "Zm 9", "Zm9v\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *d = (char *)1;
        size_t n = 99;
        mc_status_t st = mc_b64_decode(bad[i], strlen(bad[i]), &d, &n);
        if (st != MC_ERR_PROTOCOL)
            fail_msg("'%s' decoded (%s)", bad[i], mc_status_name(st));
        assert_null(d);
        assert_int_equal(n, 0);
    }
    /* binary with NUL inside survives */
    char *d;
    size_t n;
    assert_int_equal(mc_b64_decode("AAEA", 4, &d, &n), MC_OK);
    assert_int_equal(n, 3);
    assert_int_equal(d[0], 0);
    assert_int_equal(d[1], 1);
    assert_int_equal(d[2], 0);
    free(d);
}

static void test_open_parse(void **state)
{
    mc_meta_t *m = (mc_meta_t *)1;
    const char *bad[] = {"",
                         "rediss://h:1", /* Redis over TLS: not supported */
                         "redis://",
                         "http://",
                         "http:///metadata",
                         "http://h:1/meta data",
                         "http://h:1/metadata?x=1",
                         "etcd://",
                         "etcd://h",
                         "etcd://h:0",
                         "etcd://h:70000",
                         "etcd://h:1;;h:2",
                         "etcd://h:1/x",
                         /* 17 endpoints: one over the cap */
                         "etcd://a:1;a:2;a:3;a:4;a:5;a:6;a:7;a:8;a:9;a:10;a:11;a:12;a:13;a:14;a:15;a:16;a:17",
                         "P2P"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mc_status_t st = mc_meta_open(bad[i], &m);
        if (st != MC_ERR_INVALID_PARAMS)
            fail_msg("'%s' accepted (%s)", bad[i], mc_status_name(st));
        assert_null(m);
    }
    assert_int_equal(mc_meta_open(NULL, &m), MC_ERR_INVALID_PARAMS);
    /* request timeouts: 0 = the default, else 100..600000 ms */
    assert_int_equal(mc_meta_open_timeout("P2PHANDSHAKE", 99, &m), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_meta_open_timeout("P2PHANDSHAKE", 600001, &m), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_meta_open_timeout("P2PHANDSHAKE", 0, &m), MC_OK);
    assert_int_equal(mc_meta_timeout_ms(m), MC_META_DEFAULT_TIMEOUT_MS);
    mc_meta_close(m);
    const char *good[] = {"http://127.0.0.1:8080/metadata", "HTTP://localhost:1/m",
                          "etcd://127.0.0.1:2379", "etcd://a:1;b:2,c:3;", "etcd://[::1]:2379",
                          "redis://h:1", "P2PHANDSHAKE", "p2phandshake"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        mc_status_t st = mc_meta_open(good[i], &m);
        if (st != MC_OK)
            fail_msg("'%s' refused (%s)", good[i], mc_status_name(st));
        assert_int_equal(mc_meta_is_p2p(m), strncasecmp(good[i], "p2p", 3) == 0);
        mc_meta_close(m);
    }
    mc_meta_close(NULL);
}

static void test_p2p(void **state)
{
    mc_meta_t *m;
    assert_int_equal(mc_meta_open("P2PHANDSHAKE", &m), MC_OK);
    assert_true(mc_meta_is_p2p(m));
    assert_int_equal(mc_meta_put(m, "mooncake/ram/a", "{}"), MC_OK);
    char *v = (char *)1;
    assert_int_equal(mc_meta_get(m, "mooncake/ram/a", &v), MC_ERR_NOT_SUPPORTED);
    assert_null(v);
    assert_int_equal(mc_meta_del(m, "mooncake/ram/a"), MC_OK);
    mc_meta_close(m);
}

static void test_caps(void **state)
{
    mc_meta_t *m;
    assert_int_equal(mc_meta_open("P2PHANDSHAKE", &m), MC_OK);
    char *key = malloc(MC_META_KEY_MAX + 2);
    memset(key, 'k', MC_META_KEY_MAX + 1);
    key[MC_META_KEY_MAX + 1] = '\0';
    char *v;
    assert_int_equal(mc_meta_get(m, key, &v), MC_ERR_TOO_LARGE);
    assert_int_equal(mc_meta_put(m, key, "x"), MC_ERR_TOO_LARGE);
    assert_int_equal(mc_meta_del(m, key), MC_ERR_TOO_LARGE);
    key[MC_META_KEY_MAX] = '\0';
    assert_int_equal(mc_meta_put(m, key, "x"), MC_OK);
    assert_int_equal(mc_meta_put(m, "", "x"), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_meta_put(m, NULL, "x"), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_meta_put(m, "k", NULL), MC_ERR_INVALID_PARAMS);
    char *big = malloc(MC_META_VALUE_MAX + 2);
    memset(big, 'v', MC_META_VALUE_MAX + 1);
    big[MC_META_VALUE_MAX + 1] = '\0';
    assert_int_equal(mc_meta_put(m, "k", big), MC_ERR_TOO_LARGE);
    big[MC_META_VALUE_MAX] = '\0';
    assert_int_equal(mc_meta_put(m, "k", big), MC_OK);
    free(big);
    free(key);
    mc_meta_close(m);
}

static void test_unreachable(void **state)
{
    uint16_t port;
    assert_int_equal(mc_net_free_port(&port), MC_OK);
    char uri[128];
    mc_meta_t *m;
    char *v = NULL;
    snprintf(uri, sizeof(uri), "http://127.0.0.1:%u/metadata", port);
    assert_int_equal(mc_meta_open_timeout(uri, TEST_TIMEOUT_MS, &m), MC_OK);
    uint64_t t0 = mc_now_ms();
    assert_int_equal(mc_meta_get(m, "k", &v), MC_ERR_CONNECTION);
    assert_null(v);
    assert_int_equal(mc_meta_put(m, "k", "v"), MC_ERR_CONNECTION);
    assert_int_equal(mc_meta_del(m, "k"), MC_ERR_CONNECTION);
    assert_true(mc_now_ms() - t0 < 3000); /* refused is immediate, not a timeout */
    mc_meta_close(m);

    snprintf(uri, sizeof(uri), "etcd://127.0.0.1:%u;127.0.0.1:%u", port, port);
    assert_int_equal(mc_meta_open_timeout(uri, TEST_TIMEOUT_MS, &m), MC_OK);
    assert_int_equal(mc_meta_get(m, "k", &v), MC_ERR_CONNECTION);
    assert_int_equal(mc_meta_put(m, "k", "v"), MC_ERR_CONNECTION);
    assert_int_equal(mc_meta_del(m, "k"), MC_ERR_CONNECTION);
    mc_meta_close(m);
}

/* A listener that completes TCP handshakes (kernel backlog) but never answers. */
static void test_timeout(void **state)
{
    int lfd;
    uint16_t port;
    assert_int_equal(mc_net_listen("127.0.0.1", 0, 0, &lfd, &port), MC_OK);
    char uri[128];
    snprintf(uri, sizeof(uri), "http://127.0.0.1:%u/metadata", port);
    mc_meta_t *m;
    assert_int_equal(mc_meta_open_timeout(uri, TEST_TIMEOUT_MS, &m), MC_OK);
    assert_int_equal(mc_meta_timeout_ms(m), 300); /* the timeout it was opened with */
    char *v = NULL;
    uint64_t t0 = mc_now_ms();
    assert_int_equal(mc_meta_get(m, "k", &v), MC_ERR_TIMEOUT);
    uint64_t dt = mc_now_ms() - t0;
    assert_true(dt >= 250 && dt < 2000);
    mc_meta_close(m);
    /* etcd: a silent endpoint first, then a dead one: both tried, the call returns */
    uint16_t dead;
    assert_int_equal(mc_net_free_port(&dead), MC_OK);
    snprintf(uri, sizeof(uri), "etcd://127.0.0.1:%u;127.0.0.1:%u", port, dead);
    assert_int_equal(mc_meta_open_timeout(uri, TEST_TIMEOUT_MS, &m), MC_OK);
    t0 = mc_now_ms();
    mc_status_t st = mc_meta_put(m, "k", "v");
    assert_true(st == MC_ERR_CONNECTION || st == MC_ERR_TIMEOUT);
    assert_true(mc_now_ms() - t0 < 2000);
    mc_meta_close(m);
    close(lfd);
}

/* A server that answers 200 with an endless body: the client stops at the cap. */
static void *flood_server(void *arg)
{
    int lfd = *(int *)arg;
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    char req[4096];
    (void)!recv(fd, req, sizeof(req), 0);
    const char *hdr = "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n";
    (void)!send(fd, hdr, strlen(hdr), MSG_NOSIGNAL);
    static char chunk[65536];
    memset(chunk, 'x', sizeof(chunk));
    for (int i = 0; i < 200; i++) /* 12.5 MiB, well over the 4 MiB cap */
        if (send(fd, chunk, sizeof(chunk), MSG_NOSIGNAL) <= 0)
            break;
    close(fd);
    return NULL;
}

static void test_response_cap(void **state)
{
    int lfd;
    uint16_t port;
    assert_int_equal(mc_net_listen("127.0.0.1", 0, 0, &lfd, &port), MC_OK);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, flood_server, &lfd), 0);
    char uri[128];
    snprintf(uri, sizeof(uri), "http://127.0.0.1:%u/metadata", port);
    mc_meta_t *m;
    assert_int_equal(mc_meta_open_timeout(uri, TEST_TIMEOUT_MS, &m), MC_OK);
    char *v = NULL;
    assert_int_equal(mc_meta_get(m, "k", &v), MC_ERR_TOO_LARGE);
    assert_null(v);
    mc_meta_close(m);
    pthread_join(th, NULL);
    close(lfd);
}

int main(void)
{
    mc_log_set_level(getenv("MC_TEST_LOG") ? MC_LOG_LEVEL_DEBUG : MC_LOG_LEVEL_OFF);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_b64_vectors), cmocka_unit_test(test_b64_rejects),
        cmocka_unit_test(test_open_parse),  cmocka_unit_test(test_p2p),
        cmocka_unit_test(test_caps),        cmocka_unit_test(test_unreachable),
        cmocka_unit_test(test_timeout),     cmocka_unit_test(test_response_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
