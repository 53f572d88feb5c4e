#include "support/ha_master.h"

#include "common/net.h"
#include "common/time.h"
#include "support/test_util.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

int mt_ha_start(mt_ha_master_t *m, const char *endpoints, const char *cluster, int ttl_s,
                const char *extra)
{
    char bin[512];
    mt_bin_path("mooncake_master", bin, sizeof(bin));
    if (m->endpoints != endpoints) /* a restart passes m's own copies */
        snprintf(m->endpoints, sizeof(m->endpoints), "%s", endpoints);
    if (m->cluster != cluster)
        snprintf(m->cluster, sizeof(m->cluster), "%s", cluster);
    if (m->extra != extra)
        snprintf(m->extra, sizeof(m->extra), "%s", extra ? extra : "");
    m->ttl_s = ttl_s;
    m->port_picked = !m->port;
    size_t used = 0;
    m->test_env[0] = '\0';
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "MC_HA_TEST_", 11) == 0 && used + strlen(*e) + 2 < sizeof(m->test_env))
            used += (size_t)snprintf(m->test_env + used, sizeof(m->test_env) - used, "%s\n", *e);
    if ((!m->port && mc_net_free_port(&m->port) != MC_OK) || mc_net_free_port(&m->mport) != MC_OK ||
        mt_tmpdir(m->wal, sizeof(m->wal)) != 0)
        return -1;
    snprintf(m->addr, sizeof(m->addr), "127.0.0.1:%u", m->port);
    snprintf(m->log, sizeof(m->log), "%s/master.log", m->wal);
    char port[32], mport[32], wal[300], eps[1100], cid[160], ttl[40];
    snprintf(port, sizeof(port), "--port=%u", m->port);
    snprintf(mport, sizeof(mport), "--metrics_port=%u", m->mport);
    snprintf(wal, sizeof(wal), "--wal_dir=%s/wal", m->wal);
    snprintf(eps, sizeof(eps), "--etcd_endpoints=%s", endpoints);
    snprintf(cid, sizeof(cid), "--cluster_id=%s", cluster);
    snprintf(ttl, sizeof(ttl), "--ha_lease_ttl_sec=%d", ttl_s);
    /* MC_TEST_HA_COMMIT (etcd | standbys): the same tests in another --ha_commit mode */
    char commit[64] = "", more[512] = "";
    const char *mode = getenv("MC_TEST_HA_COMMIT");
    if (mode && *mode)
        snprintf(commit, sizeof(commit), "--ha_commit=%s", mode);
    char *argv[24] = {bin, "--enable_ha=true", "--rpc_address=127.0.0.1", port, mport, wal, eps,
                      cid, ttl, "--client_ttl=10", "--wal_fsync=false",
                      "--default_kv_lease_ttl=2000"};
    int n = 12;
    if (commit[0])
        argv[n++] = commit;
    /* extra, then MC_TEST_HA_FLAGS (benches: e.g. --ha_log_put_starts=false on every member) */
    const char *env_flags = getenv("MC_TEST_HA_FLAGS");
    snprintf(more, sizeof(more), "%s %s", extra ? extra : "", env_flags ? env_flags : "");
    for (char *save = NULL, *f = strtok_r(more, " ", &save); f && n < 23;
         f = strtok_r(NULL, " ", &save))
        argv[n++] = f; /* extra: flags separated by spaces */
    argv[n] = NULL;
    m->pid = mt_spawn(argv, m->log);
    return m->pid > 0 ? 0 : -1;
}

int mt_ha_restart_if_port_taken(mt_ha_master_t *m)
{
    if (m->pid <= 0 || !m->port_picked)
        return 0;
    char buf[8192];
    FILE *f = fopen(m->log, "r");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    if ((!strstr(buf, "cannot listen on") && !strstr(buf, "cannot bind")) ||
        !strstr(buf, "Address already in use"))
        return 0;
    fprintf(stderr, "mt_ha_restart_if_port_taken: %s lost its port to another process; "
                    "starting it again on fresh ports\n",
            m->addr);
    mt_stop(m->pid, SIGKILL, 5000);
    if (!getenv("MC_KEEP_TEST_DIRS"))
        mt_rmdir(m->wal);
    m->pid = 0;
    m->port = m->mport = 0;
    /* the same MC_HA_TEST_* environment as its first start (tests set them around a start) */
    char env[sizeof(m->test_env)], *save = NULL;
    snprintf(env, sizeof(env), "%s", m->test_env);
    char *names[16];
    int k = 0;
    for (char *v = strtok_r(env, "\n", &save); v && k < 16; v = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(v, '=');
        if (!eq || getenv((*eq = '\0', v)))
            continue; /* set now: the test wants it now too */
        setenv(v, eq + 1, 1);
        names[k++] = v;
    }
    int rc = mt_ha_start(m, m->endpoints, m->cluster, m->ttl_s, m->extra);
    while (k > 0)
        unsetenv(names[--k]);
    return rc == 0;
}

int mt_ha_is_leader(const mt_ha_master_t *m, int timeout_ms)
{
    static const char req[] = "GET /role HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    uint64_t deadline = mc_now_ms() + (uint64_t)timeout_ms;
    do {
        char *resp = NULL;
        int code = mt_http_raw(m->mport, req, sizeof(req) - 1, &resp);
        int leader = code == 200 && resp && strstr(resp, "\r\n\r\nleader");
        free(resp);
        if (leader)
            return 1;
        mc_sleep_ms(50);
    } while (mc_now_ms() < deadline);
    return 0;
}

void mt_ha_stop(mt_ha_master_t *m)
{
    if (m->pid > 0)
        mt_stop(m->pid, SIGKILL, 5000);
    if (m->wal[0] && !getenv("MC_KEEP_TEST_DIRS"))
        mt_rmdir(m->wal);
    memset(m, 0, sizeof(*m));
}
