/* The embeddable HTTP metadata server, in process, driven through the HTTP metadata client and
 * through raw requests: routes, caps, bad requests, persistence (replay, torn and corrupt
 * tails, refusal of foreign files, compaction) and concurrent clients. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/log.h"
#include "common/net.h"
#include "support/test_util.h"
#include "te/metadata.h"
#include "te/metadata_server.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct fixture {
    char dir[256];
    char log[300];
    mc_meta_server_t *srv;
    mc_meta_t *meta;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    if (mt_tmpdir(f->dir, sizeof(f->dir)) != 0)
        return -1;
    snprintf(f->log, sizeof(f->log), "%s/meta.log", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    mc_meta_close(f->meta);
    mc_meta_server_stop(f->srv);
    mt_rmdir(f->dir);
    free(f);
    return 0;
}

static void start(fixture_t *f, const char *persist)
{
    assert_int_equal(mc_meta_server_start("127.0.0.1", 0, persist, &f->srv), MC_OK);
    char uri[128];
    snprintf(uri, sizeof(uri), "http://127.0.0.1:%u/metadata", mc_meta_server_port(f->srv));
    if (!f->meta)
        assert_int_equal(mc_meta_open(uri, &f->meta), MC_OK);
}

static void restart(fixture_t *f, const char *persist)
{
    mc_meta_close(f->meta);
    f->meta = NULL;
    mc_meta_server_stop(f->srv);
    f->srv = NULL;
    start(f, persist);
}

static void check_value(mc_meta_t *m, const char *key, const char *want)
{
    char *v = NULL;
    mc_status_t st = mc_meta_get(m, key, &v);
    if (!want) {
        if (st != MC_ERR_OBJECT_NOT_FOUND)
            fail_msg("key '%s': want NOT_FOUND, got %s", key, mc_status_name(st));
        assert_null(v);
        return;
    }
    if (st != MC_OK)
        fail_msg("key '%s': got %s", key, mc_status_name(st));
    assert_string_equal(v, want);
    free(v);
}

static void test_basic(void **state)
{
    fixture_t *f = *state;
    start(f, NULL);
    mc_meta_t *m = f->meta;
    check_value(m, "mooncake/ram/a", NULL);
    assert_int_equal(mc_meta_put(m, "mooncake/ram/a", "{\"x\":1}"), MC_OK);
    check_value(m, "mooncake/ram/a", "{\"x\":1}");
    assert_int_equal(mc_meta_put(m, "mooncake/ram/a", "second"), MC_OK);
    check_value(m, "mooncake/ram/a", "second");
    assert_int_equal(mc_meta_put(m, "empty", ""), MC_OK);
    check_value(m, "empty", "");
    /* keys needing escaping travel intact and stay distinct */
    const char *odd[] = {"a b", "a+b", "a&key=b", "a%20b", "ключ/ü", "a?b#c", "/"};
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++)
        assert_int_equal(mc_meta_put(m, odd[i], odd[i]), MC_OK);
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++)
        check_value(m, odd[i], odd[i]);
    assert_int_equal(mc_meta_server_count(f->srv), 2 + 7);
    assert_int_equal(mc_meta_del(m, "mooncake/ram/a"), MC_OK);
    check_value(m, "mooncake/ram/a", NULL);
    assert_int_equal(mc_meta_del(m, "mooncake/ram/a"), MC_OK); /* absent: still OK */
    /* longest key accepted end to end */
    char key[MC_META_KEY_MAX + 1];
    memset(key, 'k', MC_META_KEY_MAX);
    key[MC_META_KEY_MAX] = '\0';
    assert_int_equal(mc_meta_put(m, key, "long"), MC_OK);
    check_value(m, key, "long");
}

static void test_large_values(void **state)
{
    fixture_t *f = *state;
    start(f, f->log);
    char *big = malloc(MC_META_VALUE_MAX + 1);
    for (size_t i = 0; i < MC_META_VALUE_MAX; i++)
        big[i] = (char)('a' + i % 26);
    big[MC_META_VALUE_MAX] = '\0';
    assert_int_equal(mc_meta_put(f->meta, "big", big), MC_OK); /* exactly the cap */
    check_value(f->meta, "big", big);
    free(big);

    /* over the cap, straight to the server: 413 by Content-Length, and for chunked bodies */
    uint16_t port = mc_meta_server_port(f->srv);
    char hdr[256];
    int hl = snprintf(hdr, sizeof(hdr),
                      "PUT /metadata?key=huge HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      "Content-Length: %u\r\n\r\n",
                      MC_META_VALUE_MAX + 1);
    char *resp;
    assert_int_equal(mt_http_raw(port, hdr, (size_t)hl, &resp), 413);
    free(resp);
    size_t chunk = 1 << 20, nchunks = 5;
    size_t cap = 256 + nchunks * (chunk + 32);
    char *req = malloc(cap);
    size_t off = (size_t)snprintf(req, cap,
                                  "PUT /metadata?key=huge HTTP/1.1\r\nHost: x\r\nConnection: "
                                  "close\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (size_t i = 0; i < nchunks; i++) {
        off += (size_t)snprintf(req + off, cap - off, "%zx\r\n", chunk);
        memset(req + off, 'z', chunk);
        off += chunk;
        off += (size_t)snprintf(req + off, cap - off, "\r\n");
    }
    off += (size_t)snprintf(req + off, cap - off, "0\r\n\r\n");
    assert_int_equal(mt_http_raw(port, req, off, &resp), 413);
    free(resp);
    free(req);
    check_value(f->meta, "huge", NULL);
    assert_int_equal(mt_wait_http_ok(port, "/health", 2000), 0); /* still serving */
}

static void test_bad_requests(void **state)
{
    fixture_t *f = *state;
    start(f, NULL);
    uint16_t port = mc_meta_server_port(f->srv);
    struct {
        const char *req;
        int code;
        const char *body;
    } cases[] = {
        {"GET /health HTTP/1.0\r\n\r\n", 200, "OK"},
        {"GET /metadata HTTP/1.0\r\n\r\n", 400, "missing key"},
        {"GET /metadata?key= HTTP/1.0\r\n\r\n", 400, "missing key"},
        {"GET /metadata?other=1 HTTP/1.0\r\n\r\n", 400, "missing key"},
        {"GET /metadata?key=a%00b HTTP/1.0\r\n\r\n", 400, "bad key"},
        {"DELETE /metadata HTTP/1.0\r\n\r\n", 400, "missing key"},
        {"PUT /metadata HTTP/1.0\r\nContent-Length: 1\r\n\r\nx", 400, "missing key"},
        {"GET /metadata?key=nope HTTP/1.0\r\n\r\n", 404, "metadata not found"},
        {"DELETE /metadata?key=nope HTTP/1.0\r\n\r\n", 404, "metadata not found"},
        {"GET /other HTTP/1.0\r\n\r\n", 404, NULL},
        {"POST /metadata?key=a HTTP/1.0\r\nContent-Length: 1\r\n\r\nx", 405, NULL},
        {"PUT /metadata?key=raw HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello", 200, NULL},
        {"GET /metadata?key=raw HTTP/1.0\r\n\r\n", 200, "hello"},
        {"GARBAGE\r\n\r\n", 0, NULL}, /* 0: any refusal (400 or a closed connection) */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *resp;
        int code = mt_http_raw(port, cases[i].req, strlen(cases[i].req), &resp);
        if (cases[i].code == 0 && (code < 200 || code >= 300))
            code = 0;
        if (code != cases[i].code)
            fail_msg("request %zu '%s': got %d, want %d\n%s", i, cases[i].req, code,
                     cases[i].code, resp ? resp : "");
        if (cases[i].body) {
            const char *b = strstr(resp, "\r\n\r\n");
            assert_non_null(b);
            assert_string_equal(b + 4, cases[i].body);
        }
        free(resp);
    }
    /* too long a key */
    size_t n = MC_META_KEY_MAX + 64;
    char *req = malloc(n + 64);
    int l = snprintf(req, n + 64, "GET /metadata?key=%0*d HTTP/1.0\r\n\r\n", MC_META_KEY_MAX + 1, 0);
    char *resp;
    assert_int_equal(mt_http_raw(port, req, (size_t)l, &resp), 400);
    free(resp);
    free(req);
    /* a peer that connects and vanishes does not hurt */
    int fd;
    assert_int_equal(mc_net_connect("127.0.0.1", port, 1000, &fd), MC_OK);
    close(fd);
    assert_int_equal(mt_wait_http_ok(port, "/health", 2000), 0);
}

static void test_persist_replay(void **state)
{
    fixture_t *f = *state;
    start(f, f->log);
    char key[64], val[64];
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "mooncake/ram/seg%d", i);
        snprintf(val, sizeof(val), "{\"v\":%d}", i);
        assert_int_equal(mc_meta_put(f->meta, key, val), MC_OK);
    }
    for (int i = 0; i < 100; i += 3) {
        snprintf(key, sizeof(key), "mooncake/ram/seg%d", i);
        assert_int_equal(mc_meta_del(f->meta, key), MC_OK);
    }
    assert_int_equal(mc_meta_put(f->meta, "mooncake/ram/seg1", "updated"), MC_OK);
    restart(f, f->log);
    assert_int_equal(mc_meta_server_count(f->srv), 100 - 34);
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "mooncake/ram/seg%d", i);
        snprintf(val, sizeof(val), "{\"v\":%d}", i);
        check_value(f->meta, key, i % 3 == 0 ? NULL : i == 1 ? "updated" : val);
    }
    /* memory-only restart forgets, the log is untouched by it */
    restart(f, NULL);
    assert_int_equal(mc_meta_server_count(f->srv), 0);
    restart(f, f->log);
    assert_int_equal(mc_meta_server_count(f->srv), 66);
}

static off_t file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? st.st_size : -1;
}

static void append_bytes(const char *path, const void *b, size_t n)
{
    int fd = open(path, O_WRONLY | O_APPEND);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, b, n), (ssize_t)n);
    close(fd);
}

static void test_persist_corrupt_tail(void **state)
{
    fixture_t *f = *state;
    start(f, f->log);
    assert_int_equal(mc_meta_put(f->meta, "k1", "v1"), MC_OK);
    assert_int_equal(mc_meta_put(f->meta, "k2", "v2"), MC_OK);
    restart(f, NULL); /* stop the persistent server, keep a client */
    off_t good = file_size(f->log);
    /* torn tail: a partial record header */
    append_bytes(f->log, "\x01\x00\x00\x00\x05", 5);
    restart(f, f->log);
    check_value(f->meta, "k1", "v1");
    check_value(f->meta, "k2", "v2");
    assert_int_equal(file_size(f->log), good); /* truncated back */
    /* appends continue after the cut and survive */
    assert_int_equal(mc_meta_put(f->meta, "k3", "v3"), MC_OK);
    restart(f, NULL);
    good = file_size(f->log);
    /* flip a byte inside the last record's value: checksum mismatch -> that record dropped */
    int fd = open(f->log, O_RDWR);
    char c;
    assert_int_equal(pread(fd, &c, 1, good - 1), 1);
    c ^= 0x40;
    assert_int_equal(pwrite(fd, &c, 1, good - 1), 1);
    close(fd);
    restart(f, f->log);
    check_value(f->meta, "k1", "v1");
    check_value(f->meta, "k3", NULL);
    assert_true(file_size(f->log) < good);
    /* garbage with a huge length field */
    append_bytes(f->log, "\x01\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff", 12);
    restart(f, f->log);
    check_value(f->meta, "k2", "v2");

    /* a file that is not ours is refused, not overwritten */
    restart(f, NULL);
    char other[320];
    snprintf(other, sizeof(other), "%s/other.txt", f->dir);
    FILE *o = fopen(other, "w");
    fputs("precious data, not a log\n", o);
    fclose(o);
    mc_meta_server_t *s2 = NULL;
    assert_int_equal(mc_meta_server_start("127.0.0.1", 0, other, &s2), MC_ERR_FILE_READ_FAIL);
    assert_null(s2);
    assert_int_equal(file_size(other), 25);
    /* a second server on the same log is refused while the first holds it */
    restart(f, f->log);
    assert_int_equal(mc_meta_server_start("127.0.0.1", 0, f->log, &s2), MC_ERR_FILE_OPEN_FAIL);
    /* an unwritable path is a clear error */
    assert_int_equal(mc_meta_server_start("127.0.0.1", 0, "/nonexistent-dir/x.log", &s2),
                     MC_ERR_FILE_OPEN_FAIL);
}

static void test_persist_compaction(void **state)
{
    fixture_t *f = *state;
    start(f, f->log);
    char *val = malloc(4097);
    memset(val, 'q', 4096);
    val[4096] = '\0';
    /* 2000 overwrites of 4 keys (~8 MB of log writes) stay bounded by compaction */
    for (int i = 0; i < 2000; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", i % 4);
        val[0] = (char)('a' + i % 26);
        assert_int_equal(mc_meta_put(f->meta, key, val), MC_OK);
    }
    off_t sz = file_size(f->log);
    assert_true(sz > 0);
    assert_true(sz < 256 * 1024); /* live data ~16 KiB; compaction at 2x or 64 KiB */
    restart(f, f->log);
    assert_int_equal(mc_meta_server_count(f->srv), 4);
    val[0] = (char)('a' + 1999 % 26);
    check_value(f->meta, "k3", val);
    free(val);
}

#define NTHREADS 4
#define NOPS 100

static void *worker(void *arg)
{
    mc_meta_t *m = ((void **)arg)[0];
    int id = (int)(intptr_t)((void **)arg)[1];
    for (int i = 0; i < NOPS; i++) {
        char key[64], val[64];
        snprintf(key, sizeof(key), "t%d/k%d", id, i);
        snprintf(val, sizeof(val), "v%d.%d", id, i);
        if (mc_meta_put(m, key, val) != MC_OK)
            return (void *)1;
        char *got = NULL;
        if (mc_meta_get(m, key, &got) != MC_OK || strcmp(got, val) != 0) {
            free(got);
            return (void *)1;
        }
        free(got);
        if (i % 2 && mc_meta_del(m, key) != MC_OK)
            return (void *)1;
    }
    return NULL;
}

static void test_concurrent(void **state)
{
    fixture_t *f = *state;
    start(f, f->log);
    pthread_t th[NTHREADS];
    void *args[NTHREADS][2];
    for (int i = 0; i < NTHREADS; i++) {
        args[i][0] = f->meta; /* one handle shared by all threads */
        args[i][1] = (void *)(intptr_t)i;
        assert_int_equal(pthread_create(&th[i], NULL, worker, args[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) {
        void *rc;
        pthread_join(th[i], &rc);
        assert_null(rc);
    }
    assert_int_equal(mc_meta_server_count(f->srv), NTHREADS * NOPS / 2);
    restart(f, f->log);
    assert_int_equal(mc_meta_server_count(f->srv), NTHREADS * NOPS / 2);
}

int main(void)
{
    mc_log_set_level(getenv("MC_TEST_LOG") ? MC_LOG_LEVEL_DEBUG : MC_LOG_LEVEL_OFF);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_basic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_persist_replay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_persist_corrupt_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_persist_compaction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
