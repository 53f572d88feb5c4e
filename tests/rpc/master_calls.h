/* Raw master calls shared by the RPC-level tests (in-process fixture or a mooncake_master
 * child): a whole put (PutStart + PutEnd of a 4 KiB value) and a lookup, each returning the
 * header-level status of the first refused step, else the answer's body status. Header-only;
 * the caller's client may be authenticated or not. */
#ifndef MC_TESTS_RPC_MASTER_CALLS_H
#define MC_TESTS_RPC_MASTER_CALLS_H

#include "rpc/opcodes.h"
#include "rpc/rpc_client.h"
#include "rpc/wire_key.h"

static inline mc_status_t mc_test_put_key(mc_rpc_client_t *c, const uint8_t cid[16],
                                          const char *key, uint32_t timeout_ms)
{
    McRpc__PutStartRequest ps = MC_RPC__PUT_START_REQUEST__INIT;
    ps.client_id = (ProtobufCBinaryData){16, (uint8_t *)cid};
    ps.key = mc_wire_key_str(key);
    ps.value_size = 4096;
    ProtobufCMessage *r;
    mc_status_t st = mc_rpc_client_call(c, MC_OP_PUT_START, &ps.base, &r, timeout_ms);
    if (st != MC_OK)
        return st;
    st = ((McRpc__PutStartResponse *)r)->status;
    mc_rpc_response_free(r);
    if (st != MC_OK)
        return st;
    McRpc__PutEndRequest pe = MC_RPC__PUT_END_REQUEST__INIT;
    pe.client_id = (ProtobufCBinaryData){16, (uint8_t *)cid};
    pe.key = mc_wire_key_str(key);
    if ((st = mc_rpc_client_call(c, MC_OP_PUT_END, &pe.base, &r, timeout_ms)) != MC_OK)
        return st;
    st = ((McRpc__StatusResponse *)r)->status;
    mc_rpc_response_free(r);
    return st;
}

static inline mc_status_t mc_test_get_key(mc_rpc_client_t *c, const char *key,
                                          uint32_t timeout_ms)
{
    McRpc__KeyRequest q = MC_RPC__KEY_REQUEST__INIT;
    q.key = mc_wire_key_str(key);
    ProtobufCMessage *r;
    mc_status_t st = mc_rpc_client_call(c, MC_OP_GET_REPLICA_LIST, &q.base, &r, timeout_ms);
    if (st != MC_OK)
        return st;
    st = ((McRpc__ReplicaListResponse *)r)->status;
    mc_rpc_response_free(r);
    return st;
}

#endif
