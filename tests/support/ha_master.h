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
} mt_ha_master_t;

/* Starts one member of `cluster` against etcd `endpoints` with lease TTL ttl_s; extra: more
 * flags separated by spaces, or NULL; the environment variable MC_TEST_HA_COMMIT adds
 * --ha_commit=<it>. m->port preset (nonzero) reuses that port. Returns 0 or -1. */
int mt_ha_start(mt_ha_master_t *m, const char *endpoints, const char *cluster, int ttl_s,
                const char *extra);
/* 1 when m's admin port says it is the leader within timeout_ms. */
int mt_ha_is_leader(const mt_ha_master_t *m, int timeout_ms);
/* kill -9 (if running), removes its directory (unless MC_KEEP_TEST_DIRS), clears m. */
void mt_ha_stop(mt_ha_master_t *m);

#endif
