/* mooncake_http_metadata_server as a child process: the HTTP metadata backend end to end,
 * every acknowledged key surviving kill -9 (--persist_path), a corrupt tail tolerated, clean
 * stop on SIGTERM/SIGINT, flag handling. Children are stopped by PID. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/log.h"
#include "common/net.h"
#include "support/test_util.h"
#include "te/metadata.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_bin[1024];
static char g_dir[256];

typedef struct srv {
    pid_t pid;
    uint16_t port;
    char port_s[16];
} srv_t;

static void srv_start(srv_t *s, const char *persist)
{
    if (!s->port) {
        assert_int_equal(mc_net_free_port(&s->port), MC_OK);
        snprintf(s->port_s, sizeof(s->port_s), "%u", s->port);
    }
    char log[512], pp[512];
    snprintf(log, sizeof(log), "%s/server.log", g_dir);
    snprintf(pp, sizeof(pp), "--persist_path=%s", persist ? persist : "");
    char *argv[] = {g_bin, "--host=127.0.0.1", "--port", s->port_s, pp, "--log_level=info", NULL};
    s->pid = mt_spawn(argv, log);
    assert_true(s->pid > 0);
    if (mt_wait_http_ok(s->port, "/health", 10000) != 0) {
        mt_stop(s->pid, SIGKILL, 1000);
        fail_msg("server did not come up on port %u (see %s)", s->port, log);
    }
}

static mc_meta_t *client(const srv_t *s)
{
    char uri[128];
    snprintf(uri, sizeof(uri), "http://127.0.0.1:%u/metadata", s->port);
    mc_meta_t *m;
    assert_int_equal(mc_meta_open(uri, &m), MC_OK);
    return m;
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
        fail_msg("key '%s': %s", key, mc_status_name(st));
    assert_string_equal(v, want);
    free(v);
}

static void test_help_and_flags(void **state)
{
    char out[512];
    snprintf(out, sizeof(out), "%s/help.txt", g_dir);
    char *argv[] = {g_bin, "--help", NULL};
    pid_t pid = mt_spawn(argv, out);
    int st = mt_stop(pid, 0, 5000); /* signal 0: just wait */
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    FILE *f = fopen(out, "r");
    char buf[4096] = {0};
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    assert_true(n > 0);
    assert_non_null(strstr(buf, "persist_path"));
    assert_non_null(strstr(buf, "port"));

    char *bad[] = {g_bin, "--no_such_flag=1", NULL};
    pid = mt_spawn(bad, NULL);
    st = mt_stop(pid, 0, 5000);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    char *badport[] = {g_bin, "--port=70000", NULL};
    pid = mt_spawn(badport, NULL);
    st = mt_stop(pid, 0, 5000);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 2);
}

static void test_http_backend(void **state)
{
    srv_t s = {0};
    srv_start(&s, NULL);
    mc_meta_t *m = client(&s);
    check_value(m, "mooncake/ram/x", NULL);
    assert_int_equal(mc_meta_put(m, "mooncake/ram/x", "{\"name\":\"x\"}"), MC_OK);
    check_value(m, "mooncake/ram/x", "{\"name\":\"x\"}");
    assert_int_equal(mc_meta_del(m, "mooncake/ram/x"), MC_OK);
    check_value(m, "mooncake/ram/x", NULL);
    /* over the cap: refused by the client before sending */
    char *big = malloc(MC_META_VALUE_MAX + 2);
    memset(big, 'b', MC_META_VALUE_MAX + 1);
    big[MC_META_VALUE_MAX + 1] = '\0';
    assert_int_equal(mc_meta_put(m, "big", big), MC_ERR_TOO_LARGE);
    free(big);
    /* and by the server when a raw client sends it */
    char req[256];
    int n = snprintf(req, sizeof(req),
                     "PUT /metadata?key=big HTTP/1.1\r\nHost: x\r\nContent-Length: %u\r\n\r\n",
                     MC_META_VALUE_MAX + 1);
    char *resp;
    assert_int_equal(mt_http_raw(s.port, req, (size_t)n, &resp), 413);
    free(resp);
    const char *missing = "GET /metadata HTTP/1.0\r\n\r\n";
    assert_int_equal(mt_http_raw(s.port, missing, strlen(missing), &resp), 400);
    free(resp);

    /* SIGINT stops it cleanly; then the client sees a connection error, not a hang */
    int st = mt_stop(s.pid, SIGINT, 5000);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(mc_meta_put(m, "k", "v"), MC_ERR_CONNECTION);
    mc_meta_close(m);

    /* the port is free again: a second instance on it works; the same port while taken fails */
    srv_start(&s, NULL);
    char *again[] = {g_bin, "--host=127.0.0.1", "--port", s.port_s, NULL};
    pid_t p2 = mt_spawn(again, NULL);
    int st2 = mt_stop(p2, 0, 5000);
    assert_true(WIFEXITED(st2) && WEXITSTATUS(st2) == 1);
    st = mt_stop(s.pid, SIGTERM, 5000);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_survives_kill9(void **state)
{
    char log[512];
    snprintf(log, sizeof(log), "%s/meta.log", g_dir);
    srv_t s = {0};
    srv_start(&s, log);
    mc_meta_t *m = client(&s);
    char key[64], val[128];
    for (int i = 0; i < 200; i++) {
        snprintf(key, sizeof(key), "mooncake/ram/node%d", i);
        snprintf(val, sizeof(val), "{\"name\":\"node%d\",\"buffers\":[]}", i);
        assert_int_equal(mc_meta_put(m, key, val), MC_OK);
    }
    for (int i = 0; i < 200; i += 5) {
        snprintf(key, sizeof(key), "mooncake/ram/node%d", i);
        assert_int_equal(mc_meta_del(m, key), MC_OK);
    }
    /* no clean shutdown: every acknowledged write must already be on disk */
    int st = mt_stop(s.pid, SIGKILL, 5000);
    assert_true(WIFSIGNALED(st));
    /* and a torn record at the tail, as a crash mid-write would leave */
    int fd = open(log, O_WRONLY | O_APPEND);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "\x01\x00\x00\x00\x10\x00\x00\x00\x20\x00", 10), 10);
    close(fd);

    srv_start(&s, log);
    for (int i = 0; i < 200; i++) {
        snprintf(key, sizeof(key), "mooncake/ram/node%d", i);
        snprintf(val, sizeof(val), "{\"name\":\"node%d\",\"buffers\":[]}", i);
        check_value(m, key, i % 5 == 0 ? NULL : val);
    }
    assert_int_equal(mc_meta_put(m, "after", "restart"), MC_OK);
    st = mt_stop(s.pid, SIGKILL, 5000);
    srv_start(&s, log);
    check_value(m, "after", "restart");
    check_value(m, "mooncake/ram/node1", "{\"name\":\"node1\",\"buffers\":[]}");
    st = mt_stop(s.pid, SIGTERM, 5000);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    mc_meta_close(m);
}

int main(void)
{
    mc_log_set_level(getenv("MC_TEST_LOG") ? MC_LOG_LEVEL_DEBUG : MC_LOG_LEVEL_OFF);
    mt_bin_path("mooncake_http_metadata_server", g_bin, sizeof(g_bin));
    if (access(g_bin, X_OK) != 0) {
        fprintf(stderr, "FAIL: %s not built\n", g_bin);
        return 1;
    }
    if (mt_tmpdir(g_dir, sizeof(g_dir)) != 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_and_flags),
        cmocka_unit_test(test_http_backend),
        cmocka_unit_test(test_survives_kill9),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (rc == 0)
        mt_rmdir(g_dir);
    else
        fprintf(stderr, "kept %s for inspection\n", g_dir);
    return rc;
}
