/* The etcd metadata backend against a REAL etcd (Debian etcd-server) started here on free
 * loopback ports with a temporary data dir, stopped by PID. Fails (does not skip) when etcd is
 * not installed: scripts/install-deps.sh installs it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/log.h"
#include "common/net.h"
#include "common/time.h"
#include "support/test_util.h"
#include "te/metadata.h"
#include "meta_check.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_dir[256];
static pid_t g_etcd = -1;
static uint16_t g_port;

static const char *find_etcd(void)
{
    static const char *paths[] = {"/usr/bin/etcd", "/usr/local/bin/etcd", "/usr/sbin/etcd"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        if (access(paths[i], X_OK) == 0)
            return paths[i];
    return NULL;
}

static int start_etcd(void **state)
{
    const char *bin = find_etcd();
    if (!bin) {
        fprintf(stderr, "FAIL: etcd not installed (run scripts/install-deps.sh: etcd-server)\n");
        return -1;
    }
    if (mt_tmpdir(g_dir, sizeof(g_dir)) != 0)
        return -1;
    uint16_t peer;
    if (mc_net_free_port(&g_port) != MC_OK || mc_net_free_port(&peer) != MC_OK)
        return -1;
    char data[320], client[64], peer_url[64], cluster[80], log[320];
    snprintf(data, sizeof(data), "%s/data", g_dir);
    snprintf(log, sizeof(log), "%s/etcd.log", g_dir);
    snprintf(client, sizeof(client), "http://127.0.0.1:%u", g_port);
    snprintf(peer_url, sizeof(peer_url), "http://127.0.0.1:%u", peer);
    snprintf(cluster, sizeof(cluster), "t=http://127.0.0.1:%u", peer);
    char *argv[] = {(char *)bin, "--name", "t", "--data-dir", data,
                    "--listen-client-urls", client, "--advertise-client-urls", client,
                    "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                    "--initial-cluster", cluster, NULL};
    g_etcd = mt_spawn(argv, log);
    if (g_etcd < 0)
        return -1;
    /* ready when a range through the gateway answers */
    char uri[64];
    snprintf(uri, sizeof(uri), "etcd://127.0.0.1:%u", g_port);
    mc_meta_t *m;
    if (mc_meta_open(uri, &m) != MC_OK)
        return -1;
    uint64_t deadline = mc_now_ms() + 20000;
    mc_status_t st = MC_ERR_CONNECTION;
    while (mc_now_ms() < deadline) {
        char *v = NULL;
        st = mc_meta_get(m, "probe", &v);
        free(v);
        if (st == MC_ERR_OBJECT_NOT_FOUND)
            break;
        mc_sleep_ms(50);
    }
    mc_meta_close(m);
    if (st != MC_ERR_OBJECT_NOT_FOUND) {
        fprintf(stderr, "FAIL: etcd did not become ready; its log:\n");
        FILE *f = fopen(log, "r");
        char line[512];
        while (f && fgets(line, sizeof(line), f))
            fputs(line, stderr);
        if (f)
            fclose(f);
        mt_stop(g_etcd, SIGKILL, 2000);
        g_etcd = -1;
        mt_rmdir(g_dir);
        return -1;
    }
    return 0;
}

static int stop_etcd(void **state)
{
    if (g_etcd > 0)
        mt_stop(g_etcd, SIGTERM, 5000);
    g_etcd = -1;
    mt_rmdir(g_dir);
    return 0;
}

static mc_meta_t *open_meta(const char *extra_front)
{
    char uri[256];
    snprintf(uri, sizeof(uri), "etcd://%s127.0.0.1:%u", extra_front ? extra_front : "", g_port);
    mc_meta_t *m;
    assert_int_equal(mc_meta_open(uri, &m), MC_OK);
    return m;
}

static void test_crud(void **state)
{
    mc_meta_t *m = open_meta(NULL);
    check_value(m, "mooncake/ram/a", NULL);
    const char *desc = "{\"name\":\"127.0.0.1:1\",\"buffers\":[{\"name\":\"cpu:0\",\"addr\":1,"
                       "\"length\":2}]}";
    assert_int_equal(mc_meta_put(m, "mooncake/ram/a", desc), MC_OK);
    check_value(m, "mooncake/ram/a", desc);
    assert_int_equal(mc_meta_put(m, "mooncake/ram/a", "v2"), MC_OK);
    check_value(m, "mooncake/ram/a", "v2");
    /* empty value: the gateway omits the field */
    assert_int_equal(mc_meta_put(m, "empty", ""), MC_OK);
    check_value(m, "empty", "");
    /* binary-ish and unicode keys/values round-trip through base64 */
    assert_int_equal(mc_meta_put(m, "ключ/ü\x01", "значение\x7f"), MC_OK);
    check_value(m, "ключ/ü\x01", "значение\x7f");
    /* prefix is not a match: range on "mooncake/ram/" alone finds nothing */
    check_value(m, "mooncake/ram/", NULL);
    assert_int_equal(mc_meta_del(m, "mooncake/ram/a"), MC_OK);
    check_value(m, "mooncake/ram/a", NULL);
    assert_int_equal(mc_meta_del(m, "mooncake/ram/a"), MC_OK); /* absent: OK */
    /* a value of 1 MiB fits etcd's default request limit */
    size_t n = 1 << 20;
    char *big = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        big[i] = (char)('A' + i % 50);
    big[n] = '\0';
    assert_int_equal(mc_meta_put(m, "big", big), MC_OK);
    check_value(m, "big", big);
    /* over etcd's 1.5 MiB request limit: a clear error, not a hang */
    char *huge = malloc(3u << 20 | 1);
    memset(huge, 'h', 3u << 20);
    huge[3u << 20] = '\0';
    mc_status_t st = mc_meta_put(m, "huge", huge);
    assert_int_equal(st, MC_ERR_TOO_LARGE);
    check_value(m, "huge", NULL);
    free(huge);
    free(big);
    mc_meta_close(m);
}

static void test_failover(void **state)
{
    uint16_t dead1, dead2;
    assert_int_equal(mc_net_free_port(&dead1), MC_OK);
    assert_int_equal(mc_net_free_port(&dead2), MC_OK);
    char front[96];
    snprintf(front, sizeof(front), "127.0.0.1:%u;127.0.0.1:%u;", dead1, dead2);
    mc_meta_t *m = open_meta(front); /* two dead endpoints, then the live one */
    uint64_t t0 = mc_now_ms();
    assert_int_equal(mc_meta_put(m, "fo/k", "v"), MC_OK);
    check_value(m, "fo/k", "v");
    assert_int_equal(mc_meta_del(m, "fo/k"), MC_OK);
    check_value(m, "fo/k", NULL);
    assert_true(mc_now_ms() - t0 < 5000);
    mc_meta_close(m);

    /* live endpoint first, dead after: never touches the dead one */
    char uri[128];
    snprintf(uri, sizeof(uri), "etcd://127.0.0.1:%u,127.0.0.1:%u", g_port, dead1);
    assert_int_equal(mc_meta_open(uri, &m), MC_OK);
    assert_int_equal(mc_meta_put(m, "fo/k2", "v2"), MC_OK);
    check_value(m, "fo/k2", "v2");
    mc_meta_close(m);
}

static void test_all_dead_after_stop(void **state)
{
    mc_meta_t *m = open_meta(NULL);
    assert_int_equal(mc_meta_put(m, "k", "v"), MC_OK);
    int st = mt_stop(g_etcd, SIGTERM, 10000);
    g_etcd = -1;
    assert_true(st != -1);
    char *v = NULL;
    assert_int_equal(mc_meta_get(m, "k", &v), MC_ERR_CONNECTION);
    assert_null(v);
    assert_int_equal(mc_meta_put(m, "k", "v"), MC_ERR_CONNECTION);
    mc_meta_close(m);
}

int main(void)
{
    mc_log_set_level(getenv("MC_TEST_LOG") ? MC_LOG_LEVEL_DEBUG : MC_LOG_LEVEL_OFF);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crud),
        cmocka_unit_test(test_failover),
        cmocka_unit_test(test_all_dead_after_stop), /* last: stops etcd */
    };
    return cmocka_run_group_tests(tests, start_etcd, stop_etcd);
}
