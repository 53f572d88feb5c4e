/* A real etcd cluster (Debian's /usr/bin/etcd, or $MC_ETCD_BIN) for tests: 1 or 3 members on
 * free loopback ports, data in a fresh temp dir, each member's log in <dir>/mN.log, stopped by
 * PID. Raft timing: heartbeat 200 ms, election 2000 ms (env MT_ETCD_ELECTION_MS overrides the
 * election timeout, heartbeat a tenth of it). Tests that need it skip (return 77 / cmocka skip) when etcd is not installed. */
#ifndef MC_TESTS_SUPPORT_ETCD_CLUSTER_H
#define MC_TESTS_SUPPORT_ETCD_CLUSTER_H

#include <stdint.h>
#include <sys/types.h>

#define MT_ETCD_MAX 3

typedef struct mt_etcd {
    int n;
    char dir[256];
    pid_t pid[MT_ETCD_MAX];
    uint16_t client_port[MT_ETCD_MAX], peer_port[MT_ETCD_MAX];
    char endpoints[128]; /* "127.0.0.1:p1;127.0.0.1:p2;..." */
} mt_etcd_t;

/* 1 if an etcd binary is available. */
int mt_etcd_available(void);
/* Start n (1..3) members and wait (up to 30 s) until every member reports healthy. 0 ok. */
int mt_etcd_start(mt_etcd_t *c, int n);
/* The index of the raft leader among the running members, -1 if none is known. */
int mt_etcd_leader(const mt_etcd_t *c);
/* SIGKILL member i (its data stays). */
void mt_etcd_kill_member(mt_etcd_t *c, int i);
/* Stop every member still running, remove the temp dir. */
void mt_etcd_stop(mt_etcd_t *c);

#endif
