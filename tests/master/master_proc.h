/* The real mooncake_master as a child process for tests: started on free loopback ports with
 * a fresh WAL directory, polled until it answers ServiceReady, stopped by PID (a teardown
 * kills one a failed test left running). Header-only; include after cmocka. */
#ifndef MC_TESTS_MASTER_PROC_H
#define MC_TESTS_MASTER_PROC_H

#include "common/net.h"
#include "common/time.h"
#include "rpc/rpc_client.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

typedef struct master_proc {
    pid_t pid;
    uint16_t port, mport;
    char addr[64];
    char wal[128];
    const mc_auth_t *auth; /* keyring of the readiness probe (borrowed); NULL = none */
} master_proc_t;

static master_proc_t *g_live; /* killed by the teardown if a test fails midway */

/* Starts the master; returns false only when may_refuse and it exited with status 2 (a flag
 * this build does not support). */
static bool start_master_ex(master_proc_t *mp, const char *extra, bool may_refuse)
{
    g_live = mp;
    const char *bindir = getenv("MC_BIN_DIR");
    assert_non_null(bindir);
    /* ports probed free here may be taken by another process before the master binds them:
     * a master on picked ports that exits at start with status 1 ("cannot start") is started
     * again on fresh ones, at most twice */
    const bool picked = !mp->port;
    for (int tries = 0;; tries++) {
        if (!mp->port) {
            assert_int_equal(mc_net_free_port(&mp->port), MC_OK);
            assert_int_equal(mc_net_free_port(&mp->mport), MC_OK);
        }
        /* MC_TEST_EVICTION_POLICY: ctest runs the suites once per policy */
        const char *policy = getenv("MC_TEST_EVICTION_POLICY");
        char cmd[1024];
        snprintf(cmd, sizeof(cmd),
                 "exec %s/mooncake_master --rpc_address=127.0.0.1 --port=%u --metrics_port=%u "
                 "--wal_dir=%s --wal_fsync=false --log_level=warn %s%s %s",
                 bindir, mp->port, mp->mport, mp->wal, policy ? "--eviction_policy=" : "",
                 policy ? policy : "", extra ? extra : "");
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            int devnull = open("/dev/null", 1);
            dup2(devnull, 1);
            execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
            _exit(127);
        }
        mp->pid = pid;
        snprintf(mp->addr, sizeof(mp->addr), "127.0.0.1:%u", mp->port);
        /* poll until it answers ServiceReady */
        mc_rpc_client_t *c;
        mc_rpc_client_opts_t co = {.auth = mp->auth};
        assert_int_equal(mc_rpc_client_create(mp->addr, &co, &c), MC_OK);
        uint64_t deadline = mc_now_ms() + 10000;
        for (;;) {
            McRpc__ServiceReadyRequest q = MC_RPC__SERVICE_READY_REQUEST__INIT;
            ProtobufCMessage *r;
            if (mc_rpc_client_call(c, MC_OP_SERVICE_READY, &q.base, &r, 500) == MC_OK) {
                mc_rpc_response_free(r);
                break;
            }
            assert_true(mc_now_ms() < deadline);
            int st;
            if (waitpid(pid, &st, WNOHANG) == pid) {
                mc_rpc_client_destroy(c);
                mp->pid = 0;
                if (may_refuse && WIFEXITED(st) && WEXITSTATUS(st) == 2)
                    return false;
                if (picked && tries < 2 && WIFEXITED(st) && WEXITSTATUS(st) == 1)
                    break; /* to the next try, on fresh ports */
                fail_msg("mooncake_master exited at start (status 0x%x)", (unsigned)st);
            }
            mc_sleep_ms(20);
        }
        if (mp->pid > 0) {
            mc_rpc_client_destroy(c);
            return true;
        }
        fprintf(stderr, "start_master: the master exited at start; a port taken meanwhile? "
                        "starting it again on fresh ports\n");
        mp->port = mp->mport = 0;
    }
}

static void start_master(master_proc_t *mp, const char *extra)
{
    start_master_ex(mp, extra, false);
}

static void stop_master(master_proc_t *mp, int sig)
{
    if (mp->pid <= 0)
        return;
    kill(mp->pid, sig);
    int st;
    waitpid(mp->pid, &st, 0);
    if (sig == SIGTERM) /* clean stop */
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    mp->pid = 0;
}

static void new_wal_dir(master_proc_t *mp)
{
    snprintf(mp->wal, sizeof(mp->wal), "/tmp/mc_master_test_XXXXXX");
    assert_non_null(mkdtemp(mp->wal));
}

static void rm_wal(master_proc_t *mp)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", mp->wal);
    assert_int_equal(system(cmd), 0);
}

/* Kills the master a failed test left running and removes its WAL; 0 or -1. */
static int master_proc_teardown(void)
{
    if (g_live && g_live->pid > 0) {
        kill(g_live->pid, SIGKILL);
        waitpid(g_live->pid, NULL, 0);
        g_live->pid = 0;
    }
    if (g_live && g_live->wal[0]) {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_live->wal);
        if (system(cmd) != 0)
            return -1;
    }
    g_live = NULL;
    return 0;
}

/* GET http://127.0.0.1:port/path with curl into out (NUL-terminated): the HTTP status. */
static int curl_get(uint16_t port, const char *path, char *out, size_t n)
{
    size_t len = strlen(path) + 128;
    char *cmd = malloc(len);
    assert_non_null(cmd);
    snprintf(cmd, len, "curl -s -m 5 -o - -w '\\n%%{http_code}' 'http://127.0.0.1:%u%s'", port,
             path);
    FILE *p = popen(cmd, "r");
    free(cmd);
    assert_non_null(p);
    size_t got = fread(out, 1, n - 1, p);
    out[got] = 0;
    pclose(p);
    char *nl = strrchr(out, '\n');
    if (!nl)
        return -1;
    int code = atoi(nl + 1);
    *nl = 0;
    return code;
}

/* The value of an unlabelled sample in a Prometheus page; -1 if absent. */
static double metric_value(const char *text, const char *name)
{
    char pat[128];
    snprintf(pat, sizeof(pat), "\n%s ", name);
    const char *p = strstr(text, pat);
    return p ? atof(p + strlen(pat)) : -1;
}

#endif
