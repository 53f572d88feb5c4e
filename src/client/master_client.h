/* The store client's connection to the master: a small pool of RPC clients (the RPC client
 * serializes calls per connection, so several connections let application threads proceed in
 * parallel) plus typed helpers for the calls the store makes.
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
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MC_MASTER_POOL_SIZE 4

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
} mc_master_client_t;

/* auth: the keyring proved to the master (borrowed: must outlive mc); NULL = none. */
mc_status_t mc_master_client_init(mc_master_client_t *mc, const char *addr, uint32_t timeout_ms,
                                  const uint8_t client_id[16], const mc_auth_t *auth);
void mc_master_client_fini(mc_master_client_t *mc);

/* One call on a pooled connection (the first free one from the last one used on, else the
 * one after the last used, waited for). Transport errors are retried once on a fresh
 * connection only when `idempotent` is set. */
mc_status_t mc_master_client_call(mc_master_client_t *mc, uint16_t opcode,
                                  const ProtobufCMessage *req, ProtobufCMessage **resp_p,
                                  int idempotent);
/* The same, the response unpacked with `alloc` (e.g. an mc_rpc_arena_t's .pb: one allocation
 * for a whole batch answer instead of several per key); the caller then releases it with its
 * allocator (arena reset/destroy), not with mc_rpc_response_free. */
mc_status_t mc_master_client_call_with(mc_master_client_t *mc, uint16_t opcode,
                                       const ProtobufCMessage *req, ProtobufCMessage **resp_p,
                                       int idempotent, ProtobufCAllocator *alloc);

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
    mc_rpc_inflight_t f;
    struct store_metrics *metrics;
    uint64_t t0;
    mc_status_t st;
    int idempotent;
    bool sent;
} mc_master_inflight_t;
mc_status_t mc_master_client_send(mc_master_client_t *mc, uint16_t opcode,
                                  const ProtobufCMessage *req, int idempotent,
                                  ProtobufCAllocator *alloc, mc_master_inflight_t *in);
mc_status_t mc_master_client_recv(mc_master_inflight_t *in, ProtobufCMessage **resp_p);

/* The client_id as protobuf bytes (points into mc; valid while mc lives). */
ProtobufCBinaryData mc_master_client_id(mc_master_client_t *mc);

#endif
