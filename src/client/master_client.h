/* The store client's connection to the master: a small pool of RPC clients (the RPC client
 * serializes calls per connection, so several connections let application threads proceed in
 * parallel) plus typed helpers for the calls the store makes.
 *
 * Addressing: "host:port" is one master. "etcd://h1:2379;h2:2379" (',' also separates) is an
 * HA cluster: the leader's address is read from etcd's mooncake-store/<cluster_id>/master_view
 * (cluster_id from env MC_STORE_CLUSTER_ID, default "mooncake_cluster", 1..128 of
 * [A-Za-z0-9_.-]), re-read by a watcher thread as soon as etcd's watch reports a change of the
 * key (and at least every MC_MASTER_HA_WATCH_MS) and after a call fails, and every pooled connection moves to a new leader before its next call. The retry
 * rules of that mode are in master_client.c.
 *
 * Ownership: responses returned through *_p are owned by the caller and released with
 * mc_rpc_response_free(). Strings and arrays passed in are borrowed for the call.
 */
#ifndef MC_CLIENT_MASTER_CLIENT_H
#define MC_CLIENT_MASTER_CLIENT_H

#include "common/tenant.h"
#include "mooncake/status.h"
#include "rpc/master.pb-c.h"
#include "rpc/rpc_client.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MC_MASTER_POOL_SIZE 4
#define MC_MASTER_HA_WATCH_MS 1000  /* etcd:// : the watcher re-reads the view after a change
                                       etcd's watch reports, and at least this often */
#define MC_MASTER_HA_POLL_MS 500    /* etcd:// : ... this often when etcd cannot watch */
#define MC_MASTER_HA_RETRY_MS 100   /* etcd:// : pause between tries of a call with no leader */
#define MC_MASTER_CLUSTER_ID_DEFAULT "mooncake_cluster"

typedef struct mc_master_ha mc_master_ha_t; /* etcd:// state (master_client.c) */

typedef struct mc_master_client {
    mc_rpc_client_t *conns[MC_MASTER_POOL_SIZE];
    atomic_uint next;          /* the connection used last (mc_master_client_send) */
    uint32_t timeout_ms;
    uint8_t client_id[16];
    /* tenant_id of every key request: the store's tenant, "" for "default" (set at setup,
     * before the first call; mc_store_config_t.tenant_id) */
    char tenant[MC_TENANT_MAX + 1];
    struct store_metrics *metrics; /* NULL, or counts every call (store_metrics.h); set once
                                      before the first call */
    mc_master_ha_t *ha;            /* NULL: a fixed host:port; else etcd:// (owned) */
    atomic_uint_fast64_t view_max; /* highest view seen (answers' frame header view, a Ping's
                                      ha_view_version, etcd's create revision of the view key);
                                      an answer with a lower nonzero view is a stale leader's */
    atomic_uint_fast64_t view_refused; /* answers dropped for an older view */
} mc_master_client_t;

/* addr: "host:port" or "etcd://endpoints" (see above; with etcd:// init waits up to timeout_ms
 * for a leader in the view and fails with MC_ERR_RPC_FAIL when there is none).
 * auth: the keyring proved to the master (borrowed: must outlive mc); NULL = none. */
mc_status_t mc_master_client_init(mc_master_client_t *mc, const char *addr, uint32_t timeout_ms,
                                  const uint8_t client_id[16], const mc_auth_t *auth);
void mc_master_client_fini(mc_master_client_t *mc);

/* One call on a pooled connection (the first free one from the last one used on, else the
 * one after the last used, waited for). Transport errors are retried once on a fresh
 * connection only when `idempotent` is set. With etcd:// the rules of master_client.c apply:
 * a call that could not be sent is retried on the (new) leader until timeout_ms; one that was
 * sent and lost its answer is retried only when `idempotent` and not a remove, else it fails
 * with MC_ERR_RPC_FAIL (outcome unknown; retryable by the caller). */
mc_status_t mc_master_client_call(mc_master_client_t *mc, uint16_t opcode,
                                  const ProtobufCMessage *req, ProtobufCMessage **resp_p,
                                  int idempotent);
/* The same, the response unpacked with `alloc` (e.g. an mc_rpc_arena_t's .pb: one allocation
 * for a whole batch answer instead of several per key); the caller then releases it with its
 * allocator (arena reset/destroy), not with mc_rpc_response_free. With an allocator a
 * BatchGetReplicaList asks the master for the compact answer (rpc/replica_lists.h) and hands
 * the caller `results` rebuilt from it (one per key asked, strings shared between results),
 * or the usual answer of a master that does not know the compact form; an inconsistent
 * compact answer fails the call with MC_ERR_PROTOCOL. */
mc_status_t mc_master_client_call_with(mc_master_client_t *mc, uint16_t opcode,
                                       const ProtobufCMessage *req, ProtobufCMessage **resp_p,
                                       int idempotent, ProtobufCAllocator *alloc);

/* 1 with etcd:// addressing. */
int mc_master_client_is_ha(const mc_master_client_t *mc);
/* A call in two halves (mc_rpc_client_call_send / _recv): send starts it on a pooled
 * connection and returns at once (its status is also what recv returns when it failed: no
 * need to check it); recv waits for the answer, with call_with's retry and results. The
 * connection stays held between the two: exactly one recv per send, on the same thread, and
 * no other master call from that thread in between. `in` is the caller's (must stay in place
 * until recv); req and alloc stay borrowed until then. */
typedef struct mc_master_inflight {
    /* private */
    mc_master_client_t *mc;
    mc_rpc_client_t *conn;
    mc_rpc_pending_t call;
    McRpc__BatchKeyRequest bkr; /* a BatchGetReplicaList's request, asking the compact form */
    mc_rpc_inflight_t f;
    struct store_metrics *metrics;
    uint64_t t0;
    mc_status_t st;
    int idempotent;
    bool sent;
    bool ha_done; /* etcd://: send made the whole call; recv returns its result */
} mc_master_inflight_t;
mc_status_t mc_master_client_send(mc_master_client_t *mc, uint16_t opcode,
                                  const ProtobufCMessage *req, int idempotent,
                                  ProtobufCAllocator *alloc, mc_master_inflight_t *in);
mc_status_t mc_master_client_recv(mc_master_inflight_t *in, ProtobufCMessage **resp_p);

/* The view and server ("host:port") of the last master answer the calling thread accepted
 * (any mc_master_client_t; view 0 = a master without HA). For tests and diagnostics: after a
 * put, the answer of its PutEnd. */
typedef struct mc_master_answer {
    uint64_t view;
    char addr[64];
} mc_master_answer_t;
void mc_master_client_last_answer(mc_master_answer_t *out);

/* The client_id as protobuf bytes (points into mc; valid while mc lives). */
ProtobufCBinaryData mc_master_client_id(mc_master_client_t *mc);

#endif
