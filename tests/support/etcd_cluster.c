/* See etcd_cluster.h. */
#include "support/etcd_cluster.h"

#include "common/net.h"
#include "common/time.h"
#include "support/test_util.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *etcd_bin(void)
{
    const char *b = getenv("MC_ETCD_BIN");
    return b && *b ? b : "/usr/bin/etcd";
}

int mt_etcd_available(void)
{
    return access(etcd_bin(), X_OK) == 0;
}

static int start_once(mt_etcd_t *c, int n);

/* A member that never gets healthy is most often one whose freshly picked port another test
 * running beside took between the pick and etcd's bind: its log is shown, the cluster stopped,
 * and started again on new ports (at most three tries). */
int mt_etcd_start(mt_etcd_t *c, int n)
{
    for (int attempt = 0; attempt < 3; attempt++) {
        if (start_once(c, n) == 0)
            return 0;
        mt_etcd_stop(c);
    }
    return -1;
}

static int start_once(mt_etcd_t *c, int n)
{
    memset(c, 0, sizeof(*c));
    if (n < 1 || n > MT_ETCD_MAX || mt_tmpdir(c->dir, sizeof(c->dir)) != 0)
        return -1;
    c->n = n;
    for (int i = 0; i < n; i++)
        if (mc_net_free_port(&c->client_port[i]) != MC_OK ||
            mc_net_free_port(&c->peer_port[i]) != MC_OK)
            return -1;
    char cluster[512] = "";
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        off += (size_t)snprintf(cluster + off, sizeof(cluster) - off, "%sm%d=http://127.0.0.1:%u",
                                i ? "," : "", i, c->peer_port[i]);
        size_t eo = strlen(c->endpoints);
        snprintf(c->endpoints + eo, sizeof(c->endpoints) - eo, "%s127.0.0.1:%u", i ? ";" : "",
                 c->client_port[i]);
    }
    /* slower raft timing than etcd's defaults (100/1000 ms) unless MT_ETCD_ELECTION_MS says
     * otherwise (heartbeat = election / 10): a loaded test machine must not make members lose
     * their leader. etcd raises a lease TTL below 1.5 x the election timeout to that. */
    const char *ev = getenv("MT_ETCD_ELECTION_MS");
    long election = ev && atol(ev) >= 100 ? atol(ev) : 2000;
    char hb_s[24], el_s[24];
    snprintf(hb_s, sizeof(hb_s), "%ld", election / 10);
    snprintf(el_s, sizeof(el_s), "%ld", election);
    for (int i = 0; i < n; i++) {
        char name[16], data[300], curls[64], purls[64], log[300];
        snprintf(name, sizeof(name), "m%d", i);
        snprintf(data, sizeof(data), "%s/m%d.etcd", c->dir, i);
        snprintf(curls, sizeof(curls), "http://127.0.0.1:%u", c->client_port[i]);
        snprintf(purls, sizeof(purls), "http://127.0.0.1:%u", c->peer_port[i]);
        snprintf(log, sizeof(log), "%s/m%d.log", c->dir, i);
        char *argv[] = {(char *)etcd_bin(), "--name", name, "--data-dir", data,
                        "--listen-client-urls", curls, "--advertise-client-urls", curls,
                        "--listen-peer-urls", purls, "--initial-advertise-peer-urls", purls,
                        "--initial-cluster", cluster, "--initial-cluster-state", "new",
                        "--initial-cluster-token", c->dir, "--heartbeat-interval", hb_s,
                        "--election-timeout", el_s, NULL};
        c->pid[i] = mt_spawn(argv, log);
        if (c->pid[i] <= 0)
            return -1;
    }
    for (int i = 0; i < n; i++)
        if (mt_wait_http_ok(c->client_port[i], "/health", 30000) != 0) {
            fprintf(stderr, "etcd member %d not healthy (log %s/m%d.log)\n", i, c->dir, i);
            char log[300];
            snprintf(log, sizeof(log), "%s/m%d.log", c->dir, i);
            mt_print_log_tail(log);
            return -1;
        }
    return 0;
}

void mt_etcd_kill_member(mt_etcd_t *c, int i)
{
    if (i >= 0 && i < c->n && c->pid[i] > 0) {
        mt_stop(c->pid[i], SIGKILL, 5000);
        c->pid[i] = 0;
    }
}

void mt_etcd_stop(mt_etcd_t *c)
{
    for (int i = 0; i < c->n; i++)
        if (c->pid[i] > 0) {
            mt_stop(c->pid[i], SIGTERM, 5000);
            c->pid[i] = 0;
        }
    if (c->dir[0] && !getenv("MC_KEEP_TEST_DIRS"))
        mt_rmdir(c->dir);
}

int mt_etcd_leader(const mt_etcd_t *c)
{
    char leader[32] = "";
    char member[MT_ETCD_MAX][32];
    for (int i = 0; i < c->n; i++) {
        member[i][0] = '\0';
        if (c->pid[i] <= 0)
            continue;
        static const char req[] = "POST /v3/maintenance/status HTTP/1.0\r\nHost: 127.0.0.1\r\n"
                                  "Content-Length: 2\r\n\r\n{}";
        char *resp = NULL;
        if (mt_http_raw(c->client_port[i], req, sizeof(req) - 1, &resp) == 200) {
            const char *m = strstr(resp, "\"member_id\":\"");
            const char *l = strstr(resp, "\"leader\":\"");
            if (m)
                sscanf(m + 13, "%31[0-9]", member[i]);
            if (l)
                sscanf(l + 10, "%31[0-9]", leader);
        }
        free(resp);
    }
    for (int i = 0; i < c->n; i++)
        if (leader[0] && !strcmp(member[i], leader))
            return i;
    return -1;
}
