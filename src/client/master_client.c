/* The store client's master connection pool (master_client.h): MC_MASTER_POOL_SIZE RPC
 * clients; a call takes the first one nobody holds, starting from the last one used (and
 * waits for the one after it when all are held), so that application threads calling at once
 * do not queue behind one connection, nor behind a batch get holding one while its objects
 * arrive (mc_master_client_send), while a single caller keeps one warm connection.
 *
 * Contracts: an idempotent call that fails with MC_ERR_RPC_FAIL (a pooled connection the
 * master closed meanwhile) is sent once more on a fresh connection; other calls are sent once.
 * Responses belong to the caller (mc_rpc_response_free). Locking: the round-robin counter is an
 * atomic and each RPC client serialises its own calls, so no lock is taken here; init and fini
 * must not run concurrently with calls. With metrics (mc->metrics), every call counts in
 * mooncake_client_rpc_count when sent and in mooncake_client_rpc_latency when answered.
 */
#include "client/master_client.h"

#include "client/store_metrics.h"
#include "common/log.h"

#include <string.h>

mc_status_t mc_master_client_init(mc_master_client_t *mc, const char *addr, uint32_t timeout_ms,
                                  const uint8_t client_id[16], const mc_auth_t *auth)
{
    memset(mc, 0, sizeof(*mc));
    mc->timeout_ms = timeout_ms ? timeout_ms : 5000;
    memcpy(mc->client_id, client_id, 16);
    mc_rpc_client_opts_t opts = {.connect_timeout_ms = mc->timeout_ms < 3000 ? mc->timeout_ms : 3000,
                                 .auth = auth};
    for (int i = 0; i < MC_MASTER_POOL_SIZE; i++) {
        mc_status_t st = mc_rpc_client_create(addr, &opts, &mc->conns[i]);
        if (st != MC_OK) {
            MC_LOG_ERROR("invalid master address '%s': %s", addr, mc_status_str(st));
            mc_master_client_fini(mc);
            return st;
        }
    }
    return MC_OK;
}

void mc_master_client_fini(mc_master_client_t *mc)
{
    for (int i = 0; i < MC_MASTER_POOL_SIZE; i++) {
        if (mc->conns[i])
            mc_rpc_client_destroy(mc->conns[i]);
        mc->conns[i] = NULL;
    }
}

mc_status_t mc_master_client_send(mc_master_client_t *mc, uint16_t opcode,
                                  const ProtobufCMessage *req, int idempotent,
                                  ProtobufCAllocator *alloc, mc_master_inflight_t *in)
{
    unsigned i = atomic_load_explicit(&mc->next, memory_order_relaxed);
    *in = (mc_master_inflight_t){.mc = mc, .idempotent = idempotent,
                                 .call = {.opcode = opcode, .req = req, .allocator = alloc}};
    in->metrics = opcode < MC_OP_MAX ? mc->metrics : NULL;
    if (in->metrics) /* upstream's rule: counted when sent, timed when answered */
        atomic_fetch_add_explicit(&in->metrics->rpc_count[opcode], 1, memory_order_relaxed);
    in->t0 = store_metrics_t0(in->metrics);
    /* the first connection from the last one used on that nobody holds (a lone caller keeps
     * using one warm connection: no stale-connection probe, rpc_client.c), else wait for
     * the next one after the last used */
    in->st = MC_ERR_BUSY;
    unsigned k = 0;
    for (; k < MC_MASTER_POOL_SIZE && in->st == MC_ERR_BUSY; k++) {
        in->conn = mc->conns[(i + k) % MC_MASTER_POOL_SIZE];
        in->st = mc_rpc_client_call_send(in->conn, &in->call, 1, mc->timeout_ms, true, &in->f);
    }
    if (in->st == MC_ERR_BUSY) {
        k = 2; /* (i + 1): spread the waiters */
        in->conn = mc->conns[(i + 1) % MC_MASTER_POOL_SIZE];
        in->st = mc_rpc_client_call_send(in->conn, &in->call, 1, mc->timeout_ms, false, &in->f);
    }
    atomic_store_explicit(&mc->next, (i + k - 1) % MC_MASTER_POOL_SIZE, memory_order_relaxed);
    in->sent = in->st == MC_OK;
    return in->st;
}

mc_status_t mc_master_client_recv(mc_master_inflight_t *in, ProtobufCMessage **resp_p)
{
    mc_status_t st = in->sent ? mc_rpc_client_call_recv(&in->f) : in->st;
    if (st == MC_OK)
        st = in->call.status;
    ProtobufCMessage *resp = st == MC_OK ? in->call.resp : NULL;
    if (st == MC_ERR_RPC_FAIL && in->idempotent) /* stale pooled connection: one fresh try */
        st = mc_rpc_client_call_with(in->conn, in->call.opcode, in->call.req, &resp,
                                     in->mc->timeout_ms, in->call.allocator);
    if (in->metrics && st == MC_OK)
        store_hist_observe(&in->metrics->rpc_lat[in->call.opcode],
                           (mc_now_ns() - in->t0) / 1000);
    in->sent = false;
    *resp_p = resp;
    return st;
}

mc_status_t mc_master_client_call_with(mc_master_client_t *mc, uint16_t opcode,
                                       const ProtobufCMessage *req, ProtobufCMessage **resp_p,
                                       int idempotent, ProtobufCAllocator *alloc)
{
    mc_master_inflight_t in;
    mc_master_client_send(mc, opcode, req, idempotent, alloc, &in);
    return mc_master_client_recv(&in, resp_p);
}

mc_status_t mc_master_client_call(mc_master_client_t *mc, uint16_t opcode,
                                  const ProtobufCMessage *req, ProtobufCMessage **resp_p,
                                  int idempotent)
{
    return mc_master_client_call_with(mc, opcode, req, resp_p, idempotent, NULL);
}

ProtobufCBinaryData mc_master_client_id(mc_master_client_t *mc)
{
    ProtobufCBinaryData b = {.len = 16, .data = mc->client_id};
    return b;
}
