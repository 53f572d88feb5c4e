/* The store client's connection to the master: a small pool of RPC clients (the RPC client
 * serializes calls per connection, so several connections let application threads proceed in
 * parallel) plus typed helpers for the calls the store makes.
 *
 * Addressing: "host:port" is one master. "etcd://h1:2379;h2:2379" (',' also separates) is an
 * HA cluster: the leader's address is read from etcd's mooncake-store/<cluster_id>/master_view
 * (cluster_id from env MC_STORE_CLUSTER_ID, default "mooncake_cluster", 1..128 of
 * [A-Za-z0-9_.-]), re-read every MC_MASTER_HA_POLL_MS by a watcher thread and after a call
 * fails, and every pooled connection moves to a new leader before its next call. The retry
 * rules of that mode are in master_client.c.
 *
 * Ownership: responses returned through *_p are owned by the caller and released with
 * mc_rpc_response_free(). Strings and arrays passed in are borrowed for the call.
 */
#ifndef MC_CLIENT_MASTER_CLIENT_H
#define MC_CLIENT_MASTER_CLIENT_H

#include "common/tenant.h"
#include "mooncake/status.h"
#include "rpc/rpc_client.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define MC_MASTER_POOL_SIZE 4
#define MC_MASTER_HA_POLL_MS 500    /* etcd:// : the watcher re-reads the view this often */
#define MC_MASTER_HA_RETRY_MS 100   /* etcd:// : pause between tries of a call with no leader */
#define MC_MASTER_CLUSTER_ID_DEFAULT "mooncake_cluster"

typedef struct mc_master_ha mc_master_ha_t; /* etcd:// state (master_client.c) */

typedef struct mc_master_client {
    mc_rpc_client_t *conns[MC_MASTER_POOL_SIZE];
    atomic_uint next;          /* round-robin cursor */
    uint32_t timeout_ms;
    uint8_t client_id[16];
    /* tenant_id of every key request: the store's tenant, "" for "default" (set at setup,
     * before the first call; mc_store_config_t.tenant_id) */
    char tenant[MC_TENANT_MAX + 1];
    struct store_metrics *metrics; /* NULL, or counts every call (store_metrics.h); set once
                                      before the first call */
    mc_master_ha_t *ha;            /* NULL: a fixed host:port; else etcd:// (owned) */
    atomic_uint_fast64_t view_max; /* highest view seen (PingResponse.ha_view_version, etcd's
                                      create revision of the view key); a Ping answered with a
                                      lower nonzero view is a stale leader's */
} mc_master_client_t;

/* addr: "host:port" or "etcd://endpoints" (see above; with etcd:// init waits up to timeout_ms
 * for a leader in the view and fails with MC_ERR_RPC_FAIL when there is none).
 * auth: the keyring proved to the master (borrowed: must outlive mc); NULL = none. */
mc_status_t mc_master_client_init(mc_master_client_t *mc, const char *addr, uint32_t timeout_ms,
                                  const uint8_t client_id[16], const mc_auth_t *auth);
void mc_master_client_fini(mc_master_client_t *mc);

/* One call on the next pooled connection. Transport errors are retried once on a fresh
 * connection only when `idempotent` is set. With etcd:// the rules of master_client.c apply:
 * a call that could not be sent is retried on the (new) leader until timeout_ms; one that was
 * sent and lost its answer is retried only when `idempotent` and not a remove, else it fails
 * with MC_ERR_RPC_FAIL (outcome unknown; retryable by the caller). */
mc_status_t mc_master_client_call(mc_master_client_t *mc, uint16_t opcode,
                                  const ProtobufCMessage *req, ProtobufCMessage **resp_p,
                                  int idempotent);
/* The same, the response unpacked with `alloc` (e.g. an mc_rpc_arena_t's .pb: one allocation
 * for a whole batch answer instead of several per key); the caller then releases it with its
 * allocator (arena reset/destroy), not with mc_rpc_response_free. */
mc_status_t mc_master_client_call_with(mc_master_client_t *mc, uint16_t opcode,
                                       const ProtobufCMessage *req, ProtobufCMessage **resp_p,
                                       int idempotent, ProtobufCAllocator *alloc);

/* 1 with etcd:// addressing. */
int mc_master_client_is_ha(const mc_master_client_t *mc);

/* The client_id as protobuf bytes (points into mc; valid while mc lives). */
ProtobufCBinaryData mc_master_client_id(mc_master_client_t *mc);

#endif
