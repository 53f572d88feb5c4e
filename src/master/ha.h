/* Master high availability on etcd (docs/internals/ha.md): election on a leased key, fencing
 * by the lease clock, and a replicated log of the WAL records in etcd that standbys follow.
 *
 * A process runs mc_ha_wait_leadership first (standby: applies the log to an in-memory master
 * core as it arrives and competes for the view key); once it returns MC_OK this process leads:
 * it applied the rest of the log and promoted the core to the state a restart ends in (every
 * segment RECOVERING until its owner re-mounts), the master service serves that core, and
 * mc_ha_before_reply is installed as the service's group-commit hook.
 *
 * Fencing: a leader whose lease may have expired, whose log append was refused, or that lost
 * its lease exits at once with status MC_HA_EXIT_FENCED (a supervisor restarts it as a
 * standby); it never writes a reply after that point.
 */
#ifndef MC_MASTER_HA_H
#define MC_MASTER_HA_H

#include "common/auth.h"
#include "master/master.h"
#include "rpc/rpc_server.h"

#include <signal.h>
#include <stdint.h>

#define MC_HA_EXIT_FENCED 3
#define MC_HA_CLUSTER_ID_MAX 128

typedef struct mc_ha_opts {
    const char *endpoints;  /* etcd "h:p;h:p" (borrowed) */
    const char *cluster_id; /* [A-Za-z0-9_.-]{1,128} */
    const char *advertise;  /* "ip:port" published as the leader's RPC address */
    uint32_t lease_ttl_s;   /* 1..60 */
    const char *wal_dir;    /* local WAL directory (locked by the caller); emptied at start, the
                               leader's local log once promoted */
    /* the configuration of the master core the log is applied to (copied; its wal_dir is
     * ignored: the core gets wal_dir at promotion) */
    const mc_master_config_t *core_cfg;
    /* the leader snapshots its state into etcd once this many bytes were appended to the log
     * since the last one, then trims the batches that the snapshot and every registered
     * standby no longer need; 0 = never (the log grows without bound) */
    uint64_t snapshot_bytes;
    /* --ha_commit=standbys (docs/internals/ha.md "Commit through in-sync standbys"): a group
     * is released once every member of the in-sync set S acknowledged it (or, S empty, once
     * it is durable in etcd); false = once it is durable in etcd */
    bool commit_standbys;
    /* a member of S that has not caught up with the groups handed over for this long is
     * removed from S (in etcd, before anything is released without it); 1..TTL-1 ms */
    uint32_t isr_timeout_ms;
    /* --ha_log_put_starts=false (standbys mode only): create-once PutStarts are not logged and
     * answer as light replies, as in etcd mode (faster puts; a new leader does not know their
     * allocations: docs/internals/ha.md "Not yet") */
    bool unlogged_put_starts;
    /* --ha_commit=standbys with S non-empty: etcd appends start at most once per this many ms,
     * each taking every group queued meanwhile (etcd's CPU is the standbys' and the leader's
     * on a small host); 0 = as soon as the previous one is done. 0..1000 */
    uint32_t etcd_append_interval_ms;
    /* keyring a standby proves to the leader's RPC port when it fetches (borrowed) */
    const mc_auth_t *auth;
} mc_ha_opts_t;

typedef struct mc_ha mc_ha_t;

/* Validates the options and connects the etcd client (no request yet). */
mc_status_t mc_ha_create(const mc_ha_opts_t *opts, mc_ha_t **ha_p);
/* Standby until this process leads: MC_OK and *core_p (leader: view claimed, log applied to
 * its end, the core promoted (mc_master_follow_promote) and now the caller's, to be served;
 * lease kept alive by a thread), MC_ERR_CANCELED when *stop became non-zero, or an error
 * (logged) that this process cannot recover from (a malformed batch, no memory). */
mc_status_t mc_ha_wait_leadership(mc_ha_t *ha, volatile sig_atomic_t *stop, mc_master_t **core_p);
/* The leader's view version (the create revision of the view key); 0 before leading. */
uint64_t mc_ha_view(const mc_ha_t *ha);
/* The service's before_reply hook (ctx = the mc_ha_t; loop thread): hands the group commit's
 * records to the appender threads, which append them to the replicated log (several appends
 * in flight) and release the held replies of each group once it and every earlier group are
 * durable (mc_rpc_server_release(srv, group)); checks the lease clock.
 * Returns the RPC server's ticket: the last group handed over while it is not yet durable
 * (every reply of this iteration may expose its changes), else 0; *light_p: the last group
 * that freed or mounted space while it is not yet durable, else 0 (the light answers, PutStarts
 * that placed every key, depend on nothing else; in standbys mode with logged PutStarts
 * (--ha_log_put_starts) only those served from ready put pools are light, the others wait for
 * their own PUT_START record). In that mode it also tells the core the group commits handed
 * over and released (mc_master_ha_groups: the put pools). Exits the process when fenced (here
 * or on an appender thread, without releasing anything). */
uint64_t mc_ha_before_reply(void *ctx, mc_master_t *m, mc_rpc_server_t *srv, uint64_t *light_p);
/* --ha_commit=standbys, the leader's MC_OP_HA_FETCH handler (ctx = the mc_ha_t; loop thread):
 * a standby's fetch acknowledges every record up to its after_seq and is answered with the
 * records after it (at most 1 MiB, at least one record), at once or, when there are none yet,
 * held until a group is handed over or its wait ends (mc_ha_tick). Refused: not in that mode
 * NOT_SUPPORTED, a peer without the cluster key AUTH, another view INVALID_VERSION, a bad
 * member or incarnation INVALID_PARAMS, more than 16 standbys BUSY; a position the leader
 * does not keep (before its kept groups or after its last record) answers OUT_OF_RANGE in the
 * body. Its answers are never held (mc_rpc_call_t.unheld). */
mc_status_t mc_ha_fetch(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                        ProtobufCMessage **resp_p);
/* The service's cron (loop thread), after the cron's changes (evictions, expiries, dropped
 * segments) are in the local WAL: hands their records over as a group commit of their own, so
 * that they reach etcd and the standbys without waiting for a call that changes something (no
 * reply waits for that group); in standbys mode then answers the held fetches whose wait ended. */
void mc_ha_tick(void *ctx, mc_master_t *m, mc_rpc_server_t *srv);
/* Admin pages, any thread (ctx = the mc_ha_t): /leader's JSON {"present":true,"address":
 * "ip:port","view_version":N,"self":bool} or {"present":false} (heap, mc_free); the
 * master_ha_* / master_view_version series for /metrics. */
char *mc_ha_leader_json(void *ctx);
struct mc_prom;
void mc_ha_render_metrics(void *ctx, struct mc_prom *b);
/* The standby's admin HTTP port (the leader's is the service's): GET /health, /role,
 * /leader, /metrics; with a keyring every request must be signed, except /health and /metrics
 * with metrics_public. NULL on failure (logged). */
typedef struct mc_ha_http mc_ha_http_t;
mc_ha_http_t *mc_ha_http_start(mc_ha_t *ha, const char *address, uint16_t port,
                               const mc_auth_t *auth, bool metrics_public);
/* The hand-over of the port to the promoted service's HTTP server (ctx = the mc_ha_http_t or
 * NULL; the service's metrics_take / metrics_handed, master/service.h): take quiesces the
 * server (it accepts no more, answers the connections it has, each answer closing its
 * connection) and returns its listening socket, which stays h's (the service serves a
 * duplicate); -1 when it cannot (logged; the server is then stopped and the port free).
 * handed: served = the service's server accepts on it now: the server ends in the background
 * once its connections ended (at most 2 s), then closes the socket; false = the server stops
 * and the socket is closed before it returns. */
int mc_ha_http_take(void *ctx);
void mc_ha_http_handed(void *ctx, bool served);
/* Stops the server (waits for the end of a hand-over's drain), frees h; NULL is a no-op. */
void mc_ha_http_stop(mc_ha_http_t *h);
/* After the service's loop returned and before the service is destroyed: the appender
 * threads append what was handed over and stop; nothing is released any more. */
void mc_ha_quiesce(mc_ha_t *ha);
/* (Quiesces, then) stops the keepalive thread and revokes the lease (a clean step-down lets a standby take
 * over at once). */
void mc_ha_destroy(mc_ha_t *ha);

#endif
