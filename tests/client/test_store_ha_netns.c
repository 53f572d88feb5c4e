/* The HA leader cut off from etcd but not from its clients, with network namespaces and veth
 * links that the test creates and deletes (needs root and `ip`; exits 77 = skipped otherwise):
 *
 *     ns E: etcd (one member) on 10.213.1.2 (towards the root ns) and 10.213.2.2 (towards L)
 *     ns L: the first master, reaching etcd through veth l_e (10.213.2.1) and serving clients
 *           through veth l_r (10.213.3.2)
 *     root: the second master (standby, etcd through 10.213.1.2) and the test's store client
 *           on etcd://10.213.1.2:2379, which also contributes the storage segment
 *
 * After objects are put through the leader, l_e is set down inside L: the leader must fence
 * itself (exit status 3, "ha: fenced") within the lease TTL plus slack, the standby takes
 * over, and the client, with nothing done by the application, re-mounts and reads every
 * object back with its bytes and puts again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/etcd.h"
#include "common/net.h"
#include "common/time.h"
#include "mooncake/store.h"
#include "support/ha_master.h"
#include "support/test_util.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TTL_S 3
#define CLUSTER "netns"
#define IP "/usr/sbin/ip"

static char ns_e[32], ns_l[32], v_re[16], v_rl[16], v_le[16], v_lr[16], g_dir[256];
static pid_t g_etcd, g_leader;
static uint16_t g_lport, g_lmport;
static mt_ha_master_t g_standby;
static char g_leader_log[300];

/* Runs `ip` with the given arguments (NULL-terminated), 0 on success. */
static int ip_run(const char *a0, ...)
{
    char *argv[24] = {IP};
    int n = 1;
    va_list ap;
    va_start(ap, a0);
    for (const char *a = a0; a && n < 23; a = va_arg(ap, const char *))
        argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        execv(IP, argv);
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0)
        return -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* veth pair a (in ns_a, or root when NULL) <-> b (in ns_b), addresses a_ip/b_ip (/24), up. */
static int veth(const char *a, const char *ns_a, const char *a_ip, const char *b,
                const char *ns_b, const char *b_ip)
{
    if (ip_run("link", "add", a, "type", "veth", "peer", "name", b, NULL) != 0 ||
        (ns_a && ip_run("link", "set", a, "netns", ns_a, NULL) != 0) ||
        ip_run("link", "set", b, "netns", ns_b, NULL) != 0)
        return -1;
    if (ns_a ? ip_run("-n", ns_a, "addr", "add", a_ip, "dev", a, NULL)
             : ip_run("addr", "add", a_ip, "dev", a, NULL))
        return -1;
    if (ns_a ? ip_run("-n", ns_a, "link", "set", a, "up", NULL)
             : ip_run("link", "set", a, "up", NULL))
        return -1;
    return ip_run("-n", ns_b, "addr", "add", b_ip, "dev", b, NULL) ||
           ip_run("-n", ns_b, "link", "set", b, "up", NULL);
}

static void net_down(void)
{
    if (v_re[0]) /* deleting one end of a veth deletes both */
        ip_run("link", "del", v_re, NULL);
    if (v_rl[0])
        ip_run("link", "del", v_rl, NULL);
    v_re[0] = v_rl[0] = '\0';
    if (ns_l[0])
        ip_run("netns", "del", ns_l, NULL); /* its ends of the veths go with it */
    if (ns_e[0])
        ip_run("netns", "del", ns_e, NULL);
    ns_l[0] = ns_e[0] = '\0';
}

static int net_up(void)
{
    int id = (int)getpid() % 100000;
    snprintf(ns_e, sizeof(ns_e), "mcE%d", id);
    snprintf(ns_l, sizeof(ns_l), "mcL%d", id);
    snprintf(v_re, sizeof(v_re), "mre%d", id);
    snprintf(v_rl, sizeof(v_rl), "mrl%d", id);
    snprintf(v_le, sizeof(v_le), "mle%d", id);
    snprintf(v_lr, sizeof(v_lr), "mlr%d", id);
    char e_r[16], e_l[16], l_r[16];
    snprintf(e_r, sizeof(e_r), "mer%d", id);
    snprintf(e_l, sizeof(e_l), "mel%d", id);
    snprintf(l_r, sizeof(l_r), "mlq%d", id);
    if (ip_run("netns", "add", ns_e, NULL) != 0) {
        ns_e[0] = '\0';
        return -1;
    }
    if (ip_run("netns", "add", ns_l, NULL) != 0) {
        ns_l[0] = '\0';
        return -1;
    }
    return ip_run("-n", ns_e, "link", "set", "lo", "up", NULL) ||
           ip_run("-n", ns_l, "link", "set", "lo", "up", NULL) ||
           veth(v_re, NULL, "10.213.1.1/24", e_r, ns_e, "10.213.1.2/24") ||
           veth(v_le, ns_l, "10.213.2.1/24", e_l, ns_e, "10.213.2.2/24") ||
           veth(v_rl, NULL, "10.213.3.1/24", v_lr, ns_l, "10.213.3.2/24");
}

static int etcd_ready(const char *ep, int timeout_ms)
{
    uint64_t deadline = mc_now_ms() + (uint64_t)timeout_ms;
    do {
        mc_etcd_t *e;
        if (mc_etcd_open(ep, 500, &e) == MC_OK) {
            int64_t rev = 0;
            mc_status_t st = mc_etcd_put(e, "netns-probe", "1", 1, 0, &rev);
            mc_etcd_close(e);
            if (st == MC_OK)
                return 1;
        }
        mc_sleep_ms(100);
    } while (mc_now_ms() < deadline);
    return 0;
}

/* The view's value in etcd (as seen from the root ns), or "" (out). */
static void view(char *out, size_t len)
{
    out[0] = '\0';
    mc_etcd_t *e;
    if (mc_etcd_open("10.213.1.2:2379", 1000, &e) != MC_OK)
        return;
    char *v = NULL;
    size_t n;
    if (mc_etcd_get(e, "mooncake-store/" CLUSTER "/master_view", &v, &n) == MC_OK)
        snprintf(out, len, "%s", v);
    free(v);
    mc_etcd_close(e);
}

static int setup(void **state)
{
    (void)state;
    if (geteuid() != 0 || access(IP, X_OK) != 0 || access("/usr/bin/etcd", X_OK) != 0) {
        fprintf(stderr, "SKIP: needs root, %s and /usr/bin/etcd\n", IP);
        exit(77);
    }
    if (mt_tmpdir(g_dir, sizeof(g_dir)) != 0)
        return -1;
    if (net_up() != 0) {
        net_down();
        fprintf(stderr, "SKIP: cannot create network namespaces / veth links here\n");
        exit(77);
    }
    char data[300], log[300];
    snprintf(data, sizeof(data), "%s/etcd", g_dir);
    snprintf(log, sizeof(log), "%s/etcd.log", g_dir);
    char *eargv[] = {IP, "netns", "exec", ns_e, "/usr/bin/etcd", "--name", "e0", "--data-dir",
                     data, "--listen-client-urls",
                     "http://10.213.1.2:2379,http://10.213.2.2:2379",
                     "--advertise-client-urls", "http://10.213.1.2:2379",
                     "--listen-peer-urls", "http://127.0.0.1:2380",
                     "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
                     "--initial-cluster", "e0=http://127.0.0.1:2380", NULL};
    g_etcd = mt_spawn(eargv, log);
    if (g_etcd <= 0 || !etcd_ready("10.213.1.2:2379", 20000))
        return -1;
    /* the first master, in L */
    char bin[512], port[32], mport[32], wal[300], ttl[40];
    mt_bin_path("mooncake_master", bin, sizeof(bin));
    if (mc_net_free_port(&g_lport) != MC_OK || mc_net_free_port(&g_lmport) != MC_OK)
        return -1;
    snprintf(port, sizeof(port), "--port=%u", g_lport);
    snprintf(mport, sizeof(mport), "--metrics_port=%u", g_lmport);
    snprintf(wal, sizeof(wal), "--wal_dir=%s/lwal", g_dir);
    snprintf(ttl, sizeof(ttl), "--ha_lease_ttl_sec=%d", TTL_S);
    snprintf(g_leader_log, sizeof(g_leader_log), "%s/leader.log", g_dir);
    char *largv[] = {IP, "netns", "exec", ns_l, bin, "--enable_ha=true",
                     "--rpc_address=10.213.3.2", port, mport, wal,
                     "--etcd_endpoints=10.213.2.2:2379", "--cluster_id=" CLUSTER, ttl,
                     "--client_ttl=10", "--wal_fsync=false", "--default_kv_lease_ttl=1000", NULL};
    g_leader = mt_spawn(largv, g_leader_log);
    if (g_leader <= 0 || mt_wait_log(g_leader_log, "mooncake_master listening", 20000) != 0)
        return -1;
    if (mt_ha_start(&g_standby, "10.213.1.2:2379", CLUSTER, TTL_S, NULL) != 0)
        return -1;
    setenv("MC_STORE_CLUSTER_ID", CLUSTER, 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (g_leader > 0)
        mt_stop(g_leader, SIGKILL, 5000);
    mt_ha_stop(&g_standby);
    if (g_etcd > 0)
        mt_stop(g_etcd, SIGKILL, 5000);
    net_down();
    if (g_dir[0] && !getenv("MC_KEEP_TEST_DIRS"))
        mt_rmdir(g_dir);
    return 0;
}

static void fill(char *buf, size_t len, int seed)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (char)(seed * 131 + (int)i * 7);
}

static void test_leader_cut_from_etcd_fences(void **state)
{
    (void)state;
    char v[128], want[64];
    snprintf(want, sizeof(want), "10.213.3.2:%u", g_lport);
    view(v, sizeof(v));
    assert_string_equal(v, want);
    mc_store_config_t cfg = {.local_hostname = "127.0.0.1", .metadata_server = "P2PHANDSHAKE",
                             .protocol = "tcp", .master_server_addr = "etcd://10.213.1.2:2379",
                             .global_segment_size = 64 << 20, .rpc_timeout_ms = 5000};
    mc_store_t *s = NULL;
    assert_int_equal(mc_store_create(&cfg, &s), MC_OK);
    char buf[4096], key[32];
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof(key), "cut-%d", i);
        fill(buf, sizeof(buf), i);
        struct iovec iov = {buf, sizeof(buf)};
        assert_int_equal(mc_store_put(s, key, &iov, 1, NULL), MC_OK);
    }
    /* cut L from etcd only: the clients still reach it through l_r */
    uint64_t t_cut = mc_now_ms();
    assert_int_equal(ip_run("-n", ns_l, "link", "set", v_le, "down", NULL), 0);
    int st = 0;
    uint64_t deadline = t_cut + (TTL_S + 10) * 1000;
    pid_t r = 0;
    while ((r = waitpid(g_leader, &st, WNOHANG)) == 0 && mc_now_ms() < deadline)
        mc_sleep_ms(50);
    assert_int_equal(r, g_leader);
    uint64_t fenced_ms = mc_now_ms() - t_cut;
    g_leader = 0;
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 3);
    assert_int_equal(mt_wait_log(g_leader_log, "ha: fenced", 1000), 0);
    fprintf(stderr, "leader fenced %llu ms after the cut (TTL %d s)\n",
            (unsigned long long)fenced_ms, TTL_S);
    assert_true(fenced_ms <= (uint64_t)TTL_S * 1000 + 1000); /* the fencing rule: within TTL */
    assert_true(mt_ha_is_leader(&g_standby, 30000));
    /* the application only repeats its calls */
    deadline = mc_now_ms() + 30000;
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof(key), "cut-%d", i);
        void *val = NULL;
        size_t n = 0;
        mc_status_t g;
        while ((g = mc_store_get(s, key, &val, &n)) != MC_OK && mc_now_ms() < deadline)
            mc_sleep_ms(100);
        assert_int_equal(g, MC_OK);
        fill(buf, sizeof(buf), i);
        assert_int_equal(n, sizeof(buf));
        assert_memory_equal(val, buf, sizeof(buf));
        free(val);
    }
    struct iovec iov = {buf, sizeof(buf)};
    mc_status_t p;
    while ((p = mc_store_put(s, "cut-after", &iov, 1, NULL)) != MC_OK && mc_now_ms() < deadline)
        mc_sleep_ms(100);
    assert_int_equal(p, MC_OK);
    view(v, sizeof(v));
    assert_string_equal(v, g_standby.addr);
    mc_store_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_leader_cut_from_etcd_fences),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
