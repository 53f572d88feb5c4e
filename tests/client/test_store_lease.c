/* A get whose read lease expires before its transfer finishes must fail with LEASE_EXPIRED
 * and never report bytes: the master is started with a 1 ms lease, so any transfer of a
 * 32 MiB value outlives it. With the default lease the same get succeeds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/net.h"
#include "mooncake/store.h"
#include "support/test_util.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void run_case(const char *lease_flag, int64_t expect_rc)
{
    char dir[256], bin[512], port[32], wal[300], log[300], m[96];
    uint16_t p;
    assert_int_equal(mt_tmpdir(dir, sizeof(dir)), 0);
    assert_int_equal(mc_net_free_port(&p), MC_OK);
    mt_bin_path("mooncake_master", bin, sizeof(bin));
    snprintf(port, sizeof(port), "--port=%u", p);
    snprintf(wal, sizeof(wal), "--wal_dir=%s/wal", dir);
    snprintf(log, sizeof(log), "%s/master.log", dir);
    char *margv[] = {bin, port, "--metrics_port=0", wal, (char *)lease_flag, NULL};
    pid_t master = mt_spawn(margv, log);
    assert_int_equal(mt_wait_log(log, "listening", 10000), 0);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", p);
    mt_bin_path("mooncake_client", bin, sizeof(bin));
    snprintf(m, sizeof(m), "--master_server_address=%s", addr);
    snprintf(log, sizeof(log), "%s/server.log", dir);
    char *sargv[] = {bin, m, "--global_segment_size=96MB", NULL};
    pid_t server = mt_spawn(sargv, log);
    assert_int_equal(mt_wait_log(log, "mooncake_client ready", 15000), 0);

    mc_store_config_t cfg = {.local_hostname = "127.0.0.1", .metadata_server = "P2PHANDSHAKE",
                             .protocol = "tcp", .master_server_addr = addr};
    mc_store_t *s;
    assert_int_equal(mc_store_create(&cfg, &s), MC_OK);
    size_t len = 32u << 20;
    char *val = malloc(len), *out = malloc(len);
    memset(val, 0x42, len);
    struct iovec iv = {val, len}, io = {out, len};
    assert_int_equal(mc_store_put(s, "leased", &iv, 1, NULL), MC_OK);
    memset(out, 0, len);
    assert_int_equal(mc_store_get_into(s, "leased", &io, 1), expect_rc);
    if (expect_rc == (int64_t)len)
        assert_memory_equal(out, val, len);
    mc_store_destroy(s);
    free(val);
    free(out);
    mt_stop(server, SIGTERM, 5000);
    mt_stop(master, SIGTERM, 5000);
    mt_rmdir(dir);
}

static void test_expired_lease_fails(void **state)
{
    run_case("--default_kv_lease_ttl=1", MC_ERR_LEASE_EXPIRED);
}

static void test_default_lease_succeeds(void **state)
{
    run_case("--default_kv_lease_ttl=10000", 32 << 20);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expired_lease_fails),
        cmocka_unit_test(test_default_lease_succeeds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
