/* The shared etcd client (common/etcd.h) against a REAL single-member etcd started on free
 * loopback ports (tests/support/etcd_cluster.h), stopped by PID. Fails when etcd is missing
 * (scripts/install-deps.sh installs etcd-server). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "common/etcd.h"
#include "common/net.h"
#include "common/time.h"
#include "support/etcd_cluster.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static mt_etcd_t g_cluster;
static mc_etcd_t *g_e;

static int setup(void **state)
{
    (void)state;
    if (!mt_etcd_available()) {
        fprintf(stderr, "FAIL: etcd not installed (scripts/install-deps.sh: etcd-server)\n");
        return -1;
    }
    if (mt_etcd_start(&g_cluster, 1) != 0)
        return -1;
    /* a dead endpoint first: every call fails over to the live one */
    uint16_t dead;
    char eps[256];
    if (mc_net_free_port(&dead) != MC_OK)
        return -1;
    snprintf(eps, sizeof(eps), "127.0.0.1:%u;%s", dead, g_cluster.endpoints);
    return mc_etcd_open(eps, 3000, &g_e) == MC_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    mc_etcd_close(g_e);
    mt_etcd_stop(&g_cluster);
    return 0;
}

static void test_open_refuses_bad_lists(void **state)
{
    (void)state;
    const char *bad[] = {"", "h", "h:0", "h:1;;h:2", "h:1/x", "a b:1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mc_etcd_t *e = (mc_etcd_t *)1;
        assert_int_equal(mc_etcd_open(bad[i], 1000, &e), MC_ERR_INVALID_PARAMS);
        assert_null(e);
    }
}

static void test_put_get_range(void **state)
{
    (void)state;
    int64_t rev1, rev2;
    assert_int_equal(mc_etcd_put(g_e, "t/a", "1", 1, 0, &rev1), MC_OK);
    assert_int_equal(mc_etcd_put(g_e, "t/b", "\0x\0", 3, 0, &rev2), MC_OK); /* binary value */
    assert_int_equal(mc_etcd_put(g_e, "t/c", "", 0, 0, NULL), MC_OK);       /* empty value */
    assert_int_equal(mc_etcd_put(g_e, "u/a", "9", 1, 0, NULL), MC_OK);
    assert_true(rev2 > rev1);
    char *v;
    size_t n;
    assert_int_equal(mc_etcd_get(g_e, "t/b", &v, &n), MC_OK);
    assert_int_equal(n, 3);
    assert_memory_equal(v, "\0x\0", 3);
    mc_free(v);
    assert_int_equal(mc_etcd_get(g_e, "t/none", &v, &n), MC_ERR_OBJECT_NOT_FOUND);

    mc_etcd_range_t r;
    assert_int_equal(mc_etcd_range(g_e, "t/", MC_ETCD_PREFIX, 0, &r), MC_OK);
    assert_int_equal(r.n, 3);
    assert_string_equal(r.kvs[0].key, "t/a");
    assert_int_equal(r.kvs[0].create_revision, rev1);
    assert_int_equal(r.kvs[0].mod_revision, rev1);
    assert_int_equal(r.kvs[2].value_len, 0);
    assert_true(r.revision >= rev2);
    assert_false(r.more);
    mc_etcd_range_free(&r);
    /* limit: the first two, and `more` says there is another */
    assert_int_equal(mc_etcd_range(g_e, "t/", MC_ETCD_PREFIX, 2, &r), MC_OK);
    assert_int_equal(r.n, 2);
    assert_true(r.more);
    assert_string_equal(r.kvs[1].key, "t/b");
    mc_etcd_range_free(&r);
    /* [t/b, prefix end): from a key on */
    char *end = mc_etcd_prefix_end("t/");
    assert_string_equal(end, "t0");
    assert_int_equal(mc_etcd_range(g_e, "t/b", end, 0, &r), MC_OK);
    assert_int_equal(r.n, 2);
    mc_etcd_range_free(&r);
    int64_t deleted;
    assert_int_equal(mc_etcd_delete(g_e, "t/", MC_ETCD_PREFIX, &deleted), MC_OK);
    assert_int_equal(deleted, 3);
    assert_int_equal(mc_etcd_range(g_e, "t/", MC_ETCD_PREFIX, 0, &r), MC_OK);
    assert_int_equal(r.n, 0);
    mc_etcd_range_free(&r);
    mc_free(end);
}

static void test_txn_create_if_absent(void **state)
{
    (void)state;
    mc_etcd_cmp_t absent = {.key = "x/view", .target = MC_ETCD_CREATE, .result = MC_ETCD_EQUAL};
    mc_etcd_op_t put = {.type = MC_ETCD_OP_PUT, .key = "x/view", .value = "A", .value_len = 1};
    mc_etcd_op_t get = {.type = MC_ETCD_OP_RANGE, .key = "x/view"};
    mc_etcd_txn_resp_t tr;
    int ok;
    assert_int_equal(mc_etcd_txn(g_e, &absent, 1, &put, 1, &get, 1, &ok, &tr), MC_OK);
    assert_true(ok);
    int64_t created = tr.revision;
    mc_etcd_txn_resp_free(&tr);
    /* a second creator loses and reads the winner */
    put.value = "B";
    assert_int_equal(mc_etcd_txn(g_e, &absent, 1, &put, 1, &get, 1, &ok, &tr), MC_OK);
    assert_false(ok);
    assert_int_equal(tr.n, 1);
    assert_int_equal(tr.ranges[0].n, 1);
    assert_string_equal(tr.ranges[0].kvs[0].value, "A");
    assert_int_equal(tr.ranges[0].kvs[0].create_revision, created);
    mc_etcd_txn_resp_free(&tr);
    /* value and mod_revision compares */
    mc_etcd_cmp_t cmps[2] = {
        {.key = "x/view", .target = MC_ETCD_VALUE, .result = MC_ETCD_EQUAL, .value = "A",
         .value_len = 1},
        {.key = "x/view", .target = MC_ETCD_MOD, .result = MC_ETCD_EQUAL, .rev = created}};
    assert_int_equal(mc_etcd_txn(g_e, cmps, 2, &put, 1, NULL, 0, &ok, NULL), MC_OK);
    assert_true(ok);
    assert_int_equal(mc_etcd_txn(g_e, cmps, 2, &put, 1, NULL, 0, &ok, NULL), MC_OK);
    assert_false(ok); /* value is B now */
    mc_etcd_op_t del = {.type = MC_ETCD_OP_DELETE, .key = "x/view"};
    assert_int_equal(mc_etcd_txn(g_e, NULL, 0, &del, 1, NULL, 0, &ok, NULL), MC_OK);
    assert_true(ok);
    char *v;
    size_t n;
    assert_int_equal(mc_etcd_get(g_e, "x/view", &v, &n), MC_ERR_OBJECT_NOT_FOUND);
}

typedef struct watcher {
    int64_t start, rev;
    mc_status_t st;
    atomic_int cancel;
} watcher_t;

static void *watch_main(void *arg)
{
    watcher_t *w = arg;
    w->st = mc_etcd_watch(g_e, "w/key", w->start, 10000, &w->cancel, &w->rev);
    return NULL;
}

/* A watch reports the first change of its key at or after its start revision (a put, a
 * delete, also one made before the watch began), times out when there is none, ignores other
 * keys, and ends at once when canceled. */
static void test_watch(void **state)
{
    (void)state;
    int64_t r1, r2, rev;
    assert_int_equal(mc_etcd_put(g_e, "w/key", "a", 1, 0, &r1), MC_OK);
    /* nothing after r1: the window passes */
    uint64_t t0 = mc_now_ms();
    assert_int_equal(mc_etcd_watch(g_e, "w/key", r1 + 1, 300, NULL, &rev), MC_ERR_TIMEOUT);
    assert_true(mc_now_ms() - t0 >= 300);
    /* a change already made at the start revision is reported at once */
    assert_int_equal(mc_etcd_watch(g_e, "w/key", r1, 5000, NULL, &rev), MC_OK);
    assert_true(rev == r1);
    /* a change made while watching (after one to another key) */
    watcher_t w = {.start = r1 + 1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, watch_main, &w), 0);
    mc_sleep_ms(200);
    assert_int_equal(mc_etcd_put(g_e, "w/other", "x", 1, 0, NULL), MC_OK);
    assert_int_equal(mc_etcd_delete(g_e, "w/key", NULL, NULL), MC_OK);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(w.st, MC_OK);
    assert_true(w.rev > r1 + 1); /* the delete, not the other key's put */
    /* canceled */
    assert_int_equal(mc_etcd_put(g_e, "w/key", "b", 1, 0, &r2), MC_OK);
    w = (watcher_t){.start = r2 + 1};
    assert_int_equal(pthread_create(&th, NULL, watch_main, &w), 0);
    mc_sleep_ms(200);
    t0 = mc_now_ms();
    atomic_store(&w.cancel, 1);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(w.st, MC_ERR_CANCELED);
    assert_true(mc_now_ms() - t0 < 5000); /* not the 10 s window */
    assert_int_equal(mc_etcd_delete(g_e, "w/", MC_ETCD_PREFIX, NULL), MC_OK);
}

static void test_leases(void **state)
{
    (void)state;
    int64_t id, ttl;
    assert_int_equal(mc_etcd_lease_grant(g_e, 0, &id), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_etcd_lease_grant(g_e, 30, &id), MC_OK);
    assert_int_equal(mc_etcd_put(g_e, "l/k", "v", 1, id, NULL), MC_OK);
    mc_etcd_range_t r;
    assert_int_equal(mc_etcd_range(g_e, "l/k", NULL, 0, &r), MC_OK);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.kvs[0].lease, id);
    mc_etcd_range_free(&r);
    assert_int_equal(mc_etcd_lease_keepalive(g_e, id, &ttl), MC_OK);
    assert_int_equal(ttl, 30);
    assert_int_equal(mc_etcd_lease_revoke(g_e, id), MC_OK);
    char *v;
    size_t n;
    assert_int_equal(mc_etcd_get(g_e, "l/k", &v, &n), MC_ERR_OBJECT_NOT_FOUND); /* went with it */
    assert_int_equal(mc_etcd_lease_keepalive(g_e, id, &ttl), MC_ERR_LEASE_EXPIRED);
    assert_int_equal(mc_etcd_lease_revoke(g_e, id), MC_OK); /* already gone: fine */
    /* a put under a dead lease is refused */
    assert_int_equal(mc_etcd_put(g_e, "l/k", "v", 1, id, NULL), MC_ERR_LEASE_EXPIRED);
    /* a lease that is not kept alive expires on its own */
    assert_int_equal(mc_etcd_lease_grant(g_e, 1, &id), MC_OK); /* etcd may raise a short TTL */
    assert_int_equal(mc_etcd_put(g_e, "l/exp", "v", 1, id, NULL), MC_OK);
    uint64_t deadline = mc_now_ms() + 15000;
    while (mc_etcd_get(g_e, "l/exp", &v, &n) == MC_OK) {
        mc_free(v);
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(100);
    }
    assert_int_equal(mc_etcd_lease_keepalive(g_e, id, &ttl), MC_ERR_LEASE_EXPIRED);
}

static void test_caps(void **state)
{
    (void)state;
    char key[MC_ETCD_KEY_MAX + 2];
    memset(key, 'k', sizeof(key) - 1);
    key[sizeof(key) - 1] = '\0';
    assert_int_equal(mc_etcd_put(g_e, key, "v", 1, 0, NULL), MC_ERR_INVALID_PARAMS);
    mc_etcd_range_t r;
    assert_int_equal(mc_etcd_range(g_e, key, NULL, 0, &r), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_etcd_range(g_e, "", NULL, 0, &r), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_etcd_delete(g_e, key, NULL, NULL), MC_ERR_INVALID_PARAMS);
    /* a value over etcd's 1.5 MiB request limit: etcd refuses, we report TOO_LARGE */
    size_t big = 2u << 20;
    char *v = mc_calloc(1, big);
    assert_int_equal(mc_etcd_put(g_e, "big", v, big, 0, NULL), MC_ERR_TOO_LARGE);
    /* over our own request cap: refused before sending */
    mc_free(v);
    big = 7u << 20;
    v = mc_calloc(1, big);
    assert_int_equal(mc_etcd_put(g_e, "big", v, big, 0, NULL), MC_ERR_TOO_LARGE);
    mc_free(v);
}

/* ---- a fake gateway: answers every request on its port with one canned response ---- */

typedef struct fake {
    int lfd;
    uint16_t port;
    const char *status; /* "200 OK" */
    const char *body;   /* NULL: body_len bytes of 'x' */
    size_t body_len;
    pthread_t th;
} fake_t;

static void *fake_main(void *arg)
{
    fake_t *f = arg;
    for (;;) {
        int c = accept(f->lfd, NULL, NULL);
        if (c < 0)
            return NULL;
        char req[8192];
        ssize_t got = 0, n;
        /* read the headers and the (small) body: until a pause */
        while ((n = recv(c, req + got, sizeof(req) - (size_t)got - 1, 0)) > 0) {
            got += n;
            req[got] = '\0';
            char *h = strstr(req, "\r\n\r\n");
            char *cl = strstr(req, "Content-Length: ");
            if (h && cl && (size_t)(req + got - (h + 4)) >= (size_t)atol(cl + 16))
                break;
        }
        size_t blen = f->body ? strlen(f->body) : f->body_len;
        char head[256];
        int hl = snprintf(head, sizeof(head),
                          "HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: "
                          "%zu\r\nConnection: close\r\n\r\n", f->status, blen);
        (void)mc_net_send_all(c, head, (size_t)hl, 0);
        if (f->body) {
            (void)mc_net_send_all(c, f->body, blen, 0);
        } else {
            char *x = malloc(1 << 20);
            memset(x, 'x', 1 << 20);
            for (size_t off = 0; off < blen; off += 1 << 20)
                if (mc_net_send_all(c, x, blen - off < (1 << 20) ? blen - off : 1 << 20, 0))
                    break;
            free(x);
        }
        close(c);
    }
}

static void fake_start(fake_t *f, const char *status, const char *body, size_t body_len)
{
    f->status = status;
    f->body = body;
    f->body_len = body_len;
    assert_int_equal(mc_net_listen("127.0.0.1", 0, 0, &f->lfd, &f->port), MC_OK);
    assert_int_equal(pthread_create(&f->th, NULL, fake_main, f), 0);
}

static void fake_stop(fake_t *f)
{
    shutdown(f->lfd, SHUT_RDWR);
    close(f->lfd);
    pthread_join(f->th, NULL);
}

/* Answers of a broken or hostile gateway are refused with a clear status, never trusted. */
static void test_bad_answers(void **state)
{
    (void)state;
    static const struct {
        const char *status, *body;
        mc_status_t want;
    } cases[] = {
        {"200 OK", "not json", MC_ERR_PROTOCOL},
        {"200 OK", "[1,2]", MC_ERR_PROTOCOL},
        {"200 OK", "{\"kvs\":{}}", MC_ERR_PROTOCOL},
        {"200 OK", "{\"kvs\":[{\"key\":\"YQ==\",\"value\":\"!!!!\"}]}", MC_ERR_PROTOCOL},
        {"200 OK", "{\"kvs\":[{\"key\":\"YQ==\",\"mod_revision\":\"x1\"}]}", MC_ERR_PROTOCOL},
        {"200 OK", "{\"kvs\":[{\"key\":\"YQBi\"}]}", MC_ERR_PROTOCOL}, /* NUL in a key */
        {"200 OK", "{\"header\":{\"revision\":[]}}", MC_ERR_PROTOCOL},
        {"400 Bad Request", "{\"error\":\"bad\",\"message\":\"bad\",\"code\":3}",
         MC_ERR_ETCD_OPERATION_ERROR},
        {"413 Too Large", "{\"message\":\"etcdserver: request is too large\"}",
         MC_ERR_TOO_LARGE},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fake_t f;
        fake_start(&f, cases[i].status, cases[i].body, 0);
        char eps[64];
        snprintf(eps, sizeof(eps), "127.0.0.1:%u", f.port);
        mc_etcd_t *e;
        assert_int_equal(mc_etcd_open(eps, 2000, &e), MC_OK);
        mc_etcd_range_t r;
        mc_status_t st = mc_etcd_range(e, "a", NULL, 0, &r);
        if (st != cases[i].want)
            fprintf(stderr, "case %zu: %s, want %s\n", i, mc_status_name(st),
                    mc_status_name(cases[i].want));
        assert_int_equal(st, cases[i].want);
        mc_etcd_close(e);
        fake_stop(&f);
    }
    /* an answer over MC_ETCD_MAX_RESP is cut off */
    fake_t f;
    fake_start(&f, "200 OK", NULL, MC_ETCD_MAX_RESP + 1);
    char eps[200];
    snprintf(eps, sizeof(eps), "127.0.0.1:%u", f.port);
    mc_etcd_t *e;
    assert_int_equal(mc_etcd_open(eps, 5000, &e), MC_OK);
    mc_etcd_range_t r;
    assert_int_equal(mc_etcd_range(e, "a", NULL, 0, &r), MC_ERR_TOO_LARGE);
    mc_etcd_close(e);
    fake_stop(&f);
    /* 503 from the first endpoint: the next one (real etcd) answers */
    fake_start(&f, "503 Service Unavailable", "{}", 0);
    snprintf(eps, sizeof(eps), "127.0.0.1:%u;%s", f.port, g_cluster.endpoints);
    assert_int_equal(mc_etcd_open(eps, 5000, &e), MC_OK);
    assert_int_equal(mc_etcd_range(e, "a", NULL, 0, &r), MC_OK);
    mc_etcd_range_free(&r);
    mc_etcd_close(e);
    fake_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_refuses_bad_lists),
        cmocka_unit_test(test_put_get_range),
        cmocka_unit_test(test_txn_create_if_absent),
        cmocka_unit_test(test_watch),
        cmocka_unit_test(test_leases),
        cmocka_unit_test(test_caps),
        cmocka_unit_test(test_bad_answers),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
