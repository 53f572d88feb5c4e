/* The mooncake_master service: master core + RPC server loop + HTTP (metrics, admin, optional
 * HTTP metadata server). The core is owned by the RPC loop thread; the HTTP threads read the
 * metrics snapshot and post queries to the loop (docs/internals/threads.md). */
#ifndef MC_MASTER_SERVICE_H
#define MC_MASTER_SERVICE_H

#include "common/auth.h"
#include "master/master.h"
#include "rpc/rpc_server.h"

#include <stdbool.h>
#include <stdint.h>

struct mc_prom;

typedef struct mc_master_service_opts {
    const char *rpc_address;      /* "0.0.0.0" */
    uint16_t port;                /* 50051; 0 = ephemeral */
    /* NULL, or the RPC address's socket, bound and not listening (an HA standby reserved it
     * at start, mc_net_reserve): the RPC server listens on it (mc_rpc_server_opts_t.bound_fd:
     * *rpc_bound_fd becomes -1 once the server took it; until then it stays the caller's) */
    int *rpc_bound_fd;
    int metrics_port;             /* 9003; 0 = ephemeral; -1 = no HTTP server */
    const char *metrics_address;  /* NULL = all interfaces */
    uint32_t cron_period_ms;      /* 0 = 10 */
    uint32_t rpc_busy_poll_us;    /* the RPC loop's spin before it sleeps (rpc_server.h) */
    /* Keyring that RPC connections and HTTP requests must prove (RPC handshake, HTTP
     * challenge-response, common/http_auth.h); borrowed, must outlive the service. NULL = open. */
    const mc_auth_t *auth;
    /* With auth: still serve /metrics, /metrics/summary and /health to anyone (they carry
     * counts and states only, never keys or addresses; Prometheus cannot sign). */
    bool metrics_public;
    mc_rpc_limits_t rpc_limits;   /* RPC caps and timeouts (0 = defaults, rpc_server.h) */
    /* Strict multi-tenant mode (cfg.multi_tenants): where the tenant quota policy is kept
     * (master/tenant_store.h: the policy file, or etcd), loaded at create (an unreadable or
     * invalid policy fails it with the reason logged), rewritten by PUT / DELETE
     * /api/v1/tenant_quotas, and (etcd) applied again when another writer changes it; borrowed,
     * must outlive the service. NULL = quotas only in memory, starting empty. */
    struct mc_tenant_store *tenant_store;
    /* High availability (master/ha.h): called on the loop thread after each local group commit
     * and before the replies of that batch are written; it hands the batch's WAL records
     * (mc_master_ha_log) to the replicated log and returns the RPC server's before_reply
     * ticket (0, or the batch whose append must be durable first; the HA module releases it
     * with mc_rpc_server_release on srv) and the light answers' ticket in *light_p (the last
     * batch that changed free or mounted space: mc_master_ha_log); it may end the process
     * (fenced). NULL = no HA. */
    uint64_t (*ha_before_reply)(void *ha_ctx, mc_master_t *m, mc_rpc_server_t *srv,
                                uint64_t *light_p);
    /* HA admin pages: /leader's JSON (heap) and the master_ha_* series of /metrics. */
    char *(*ha_leader_json)(void *ha_ctx);
    void (*ha_metrics)(void *ha_ctx, struct mc_prom *b);
    /* --ha_commit=standbys: the MC_OP_HA_FETCH handler (ctx ha_ctx); NULL = not served */
    mc_rpc_handler_fn ha_fetch;
    /* HA: a cron hook that hands the cron's records to the replicated log and, in standbys
     * mode, answers the held fetches whose wait ended (master/ha.h mc_ha_tick); NULL = none */
    void (*ha_tick)(void *ha_ctx, mc_master_t *m, mc_rpc_server_t *srv);
    void *ha_ctx;
    /* HA promotion: the admin port's listening socket comes from the standby's HTTP server
     * (master/ha.h mc_ha_http_take / mc_ha_http_handed, ctx metrics_handover_ctx), so that the
     * port never stops accepting. metrics_take is called right before the HTTP server starts
     * and returns the socket (lent: the service's server serves a duplicate of it and never
     * closes it), or -1: then metrics_port is bound. After a socket, metrics_handed is called
     * once: served = the HTTP server accepts on it now; false = it could not (logged), and the
     * callee has closed the socket when it returns, so that the service binds metrics_port.
     * NULL = bind metrics_port. */
    int (*metrics_take)(void *ctx);
    void (*metrics_handed)(void *ctx, bool served);
    void *metrics_handover_ctx;
    /* A core already built (an HA standby's promoted table, mc_master_follow_promote): served
     * instead of one created from cfg, and owned by the service from create on (also when
     * create fails). NULL = create one from cfg (recovering from cfg.wal_dir). */
    mc_master_t *core;
    mc_master_config_t cfg;
} mc_master_service_opts_t;

typedef struct mc_master_service mc_master_service_t;

/* Recovers from the WAL (if configured), binds the RPC and HTTP ports. opts is copied. */
mc_status_t mc_master_service_create(const mc_master_service_opts_t *opts,
                                     mc_master_service_t **svc_p);
/* Serves on the calling thread until mc_master_service_stop(). */
mc_status_t mc_master_service_run(mc_master_service_t *svc);
/* Any thread, async-signal-safe. */
void mc_master_service_stop(mc_master_service_t *svc);
/* Flushes the WAL, stops HTTP, frees everything (after run returned). */
void mc_master_service_destroy(mc_master_service_t *svc);

uint16_t mc_master_service_port(const mc_master_service_t *svc);
uint16_t mc_master_service_metrics_port(const mc_master_service_t *svc);
/* Any thread: the RPC server's counters (also on /metrics as mc_rpc_*). */
void mc_master_service_rpc_stats(const mc_master_service_t *svc, mc_rpc_server_stats_t *out);

/* Fills a handler table for the master RPCs (used by the service and by in-process tests
 * and benchmarks that drive a private mc_rpc_server). ctx must be the mc_master_t. */
void mc_master_rpc_handlers(mc_rpc_handler_fn table[MC_OP_MAX]);

#endif
