/* mooncake_master --enable_ha processes for tests and benchmarks: started on free loopback
 * ports with their own temporary WAL directory, stopped by PID. */
#ifndef MT_HA_MASTER_H
#define MT_HA_MASTER_H

#include <stdint.h>
#include <sys/types.h>

typedef struct mt_ha_master {
    pid_t pid;
    uint16_t port, mport; /* RPC, admin */
    char addr[64], wal[256], log[300];
    /* what mt_ha_start was given, for mt_ha_restart_if_port_taken */
    char endpoints[1100], cluster[160], extra[512];
    char test_env[512]; /* the MC_HA_TEST_* variables it started with, "NAME=VALUE\n" each */
    int ttl_s;
    int port_picked; /* 1: mt_ha_start picked the RPC port (it was not preset) */
} mt_ha_master_t;

/* Starts one member of `cluster` against etcd `endpoints` with lease TTL ttl_s; extra: more
 * flags separated by spaces, or NULL; the environment variable MC_TEST_HA_COMMIT adds
 * --ha_commit=<it>. m->port preset (nonzero) reuses that port. Returns 0 or -1. */
int mt_ha_start(mt_ha_master_t *m, const char *endpoints, const char *cluster, int ttl_s,
                const char *extra);
/* The ports of a member are probed free when it starts and bound a moment later (its RPC port
 * reserved at start, its admin port at start too), so another process may take one in between. When m has logged that its RPC or
 * admin port was taken ("Address already in use") and mt_ha_start had picked both, stops it
 * and starts it again with the same arguments on fresh ports: returns 1 (m->addr changed);
 * otherwise 0, m untouched. */
int mt_ha_restart_if_port_taken(mt_ha_master_t *m);
/* 1 when m's admin port says it is the leader within timeout_ms. */
int mt_ha_is_leader(const mt_ha_master_t *m, int timeout_ms);
/* kill -9 (if running), removes its directory (unless MC_KEEP_TEST_DIRS), clears m. */
void mt_ha_stop(mt_ha_master_t *m);

#endif
