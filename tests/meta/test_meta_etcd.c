/* The etcd metadata backend against a REAL etcd (Debian etcd-server) started on free loopback
 * ports with a temporary data dir (tests/support/etcd_cluster.h), stopped by PID. Fails (does
 * not skip) when etcd is not installed: scripts/install-deps.sh installs it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/log.h"
#include "common/net.h"
#include "common/time.h"
#include "support/etcd_cluster.h"
#include "support/test_util.h"
#include "te/metadata.h"
#include "meta_check.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static mt_etcd_t g_cluster;
static uint16_t g_port;

static int start_etcd(void **state)
{
    (void)state;
    if (!mt_etcd_available()) {
        fprintf(stderr, "FAIL: etcd not installed (run scripts/install-deps.sh: etcd-server)\n");
        return -1;
    }
    if (mt_etcd_start(&g_cluster, 1) != 0) {
        mt_etcd_stop(&g_cluster);
        return -1;
    }
    g_port = g_cluster.client_port[0];
    return 0;
}

static int stop_etcd(void **state)
{
    (void)state;
    mt_etcd_stop(&g_cluster);
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
    mt_etcd_kill_member(&g_cluster, 0);
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
