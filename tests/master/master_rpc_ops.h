/* Typed wrappers around the master RPCs for process-level tests (header-only; include after
 * cmocka and rpc/rpc_client.h): mount, put start/end, key ops, batch key ops, get, ping. Each call waits
 * MC_TEST_RPC_TIMEOUT_MS for its answer (define it before the include to change it). */
#ifndef MC_TESTS_MASTER_RPC_OPS_H
#define MC_TESTS_MASTER_RPC_OPS_H

#include "common/alloc.h"
#include "rpc/rpc_client.h"
#include "rpc/wire_key.h"

#include <stdbool.h>
#include <string.h>

#ifndef MC_TEST_RPC_TIMEOUT_MS
#define MC_TEST_RPC_TIMEOUT_MS 3000
#endif

__attribute__((unused)) static uint8_t CA[16] = {0xa, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
__attribute__((unused)) static uint8_t CB[16] = {0xb, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

static inline int32_t call_status(mc_rpc_client_t *c, uint16_t op, ProtobufCMessage *q)
{
    ProtobufCMessage *r;
    mc_status_t st = mc_rpc_client_call(c, op, q, &r, MC_TEST_RPC_TIMEOUT_MS);
    if (st != MC_OK)
        return st;
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(r->descriptor, 1);
    int32_t s = *(int32_t *)((char *)r + f->offset);
    mc_rpc_response_free(r);
    return s;
}

static inline int32_t mount(mc_rpc_client_t *c, uint8_t *cid, const char *name, uint64_t base,
                     uint64_t size, uint8_t uuid_b, bool remount)
{
    McRpc__SegmentInfo si = MC_RPC__SEGMENT_INFO__INIT;
    si.name = (char *)name;
    si.base_addr = base;
    si.size = size;
    si.host_label = (char *)name;
    si.te_endpoint = (char *)name;
    uint8_t uuid[16];
    memset(uuid, uuid_b, 16);
    si.segment_uuid = (ProtobufCBinaryData){16, uuid};
    if (remount) {
        McRpc__SegmentInfo *arr[1] = {&si};
        McRpc__ReMountSegmentRequest q = MC_RPC__RE_MOUNT_SEGMENT_REQUEST__INIT;
        q.client_id = (ProtobufCBinaryData){16, cid};
        q.segments = arr;
        q.n_segments = 1;
        return call_status(c, MC_OP_REMOUNT_SEGMENT, &q.base);
    }
    McRpc__MountSegmentRequest q = MC_RPC__MOUNT_SEGMENT_REQUEST__INIT;
    q.client_id = (ProtobufCBinaryData){16, cid};
    q.segment = &si;
    return call_status(c, MC_OP_MOUNT_SEGMENT, &q.base);
}

/* A PutStart (op MC_OP_PUT_START) or UpsertStart (MC_OP_UPSERT_START) of key. */
static inline int32_t put_start_op(mc_rpc_client_t *c, uint16_t op, uint8_t *cid, const char *key,
                                   uint64_t size, uint32_t nrep, uint64_t *addr_p)
{
    McRpc__ReplicateConfig cfg = MC_RPC__REPLICATE_CONFIG__INIT;
    cfg.replica_num = nrep;
    McRpc__PutStartRequest q = MC_RPC__PUT_START_REQUEST__INIT;
    q.client_id = (ProtobufCBinaryData){16, cid};
    q.key = mc_wire_key_str(key);
    q.value_size = size;
    q.config = &cfg;
    ProtobufCMessage *r;
    mc_status_t st = mc_rpc_client_call(c, op, &q.base, &r, MC_TEST_RPC_TIMEOUT_MS);
    if (st != MC_OK)
        return st;
    McRpc__PutStartResponse *p = (void *)r;
    int32_t s = p->status;
    if (s == MC_OK && addr_p)
        *addr_p = p->replicas[0]->buffer_address;
    mc_rpc_response_free(r);
    return s;
}

static inline int32_t put_start(mc_rpc_client_t *c, uint8_t *cid, const char *key, uint64_t size,
                         uint32_t nrep, uint64_t *addr_p)
{
    return put_start_op(c, MC_OP_PUT_START, cid, key, size, nrep, addr_p);
}

static inline int32_t put_end(mc_rpc_client_t *c, uint8_t *cid, const char *key, uint64_t sum)
{
    McRpc__PutEndRequest q = MC_RPC__PUT_END_REQUEST__INIT;
    q.client_id = (ProtobufCBinaryData){16, cid};
    q.key = mc_wire_key_str(key);
    q.checksum = sum;
    return call_status(c, MC_OP_PUT_END, &q.base);
}

static inline int32_t key_op(mc_rpc_client_t *c, uint16_t op, uint8_t *cid, const char *key, bool force)
{
    McRpc__KeyRequest q = MC_RPC__KEY_REQUEST__INIT;
    if (cid)
        q.client_id = (ProtobufCBinaryData){16, cid};
    q.key = mc_wire_key_str(key);
    q.force = force;
    return call_status(c, op, &q.base);
}

static inline int32_t get(mc_rpc_client_t *c, const char *key, uint64_t *addr_p, uint64_t *sum_p,
                   uint32_t *n_p)
{
    McRpc__KeyRequest q = MC_RPC__KEY_REQUEST__INIT;
    q.key = mc_wire_key_str(key);
    ProtobufCMessage *r;
    mc_status_t st = mc_rpc_client_call(c, MC_OP_GET_REPLICA_LIST, &q.base, &r, MC_TEST_RPC_TIMEOUT_MS);
    if (st != MC_OK)
        return st;
    McRpc__ReplicaListResponse *p = (void *)r;
    int32_t s = p->status;
    if (s == MC_OK) {
        if (addr_p)
            *addr_p = p->replicas[0]->buffer_address;
        if (sum_p)
            *sum_p = p->checksum;
        if (n_p)
            *n_p = (uint32_t)p->n_replicas;
        for (size_t i = 0; i < p->n_replicas; i++)
            assert_int_equal(p->replicas[i]->status, MC_RPC__REPLICA_STATUS__REPLICA_COMPLETE);
    }
    mc_rpc_response_free(r);
    return s;
}

/* A batch RPC over keys: the call's status; *failed_p = keys whose status is not MC_OK, and
 * statuses[i] (when not NULL) key i's status. */
static inline int32_t batch_key_op(mc_rpc_client_t *c, uint16_t op, const char **keys, size_t n,
                                   size_t *failed_p, int32_t *statuses)
{
    McRpc__BatchKeyRequest q = MC_RPC__BATCH_KEY_REQUEST__INIT;
    q.keys = mc_wire_keys(keys, n);
    q.n_keys = n;
    ProtobufCMessage *r;
    mc_status_t st = mc_rpc_client_call(c, op, &q.base, &r, MC_TEST_RPC_TIMEOUT_MS);
    mc_free(q.keys);
    if (st != MC_OK)
        return st;
    *failed_p = 0;
    int32_t s;
    if (op == MC_OP_BATCH_GET_REPLICA_LIST) {
        McRpc__BatchReplicaListResponse *p = (void *)r;
        s = p->status;
        for (size_t i = 0; i < p->n_results; i++) {
            *failed_p += p->results[i]->status != MC_OK;
            if (statuses && i < n)
                statuses[i] = p->results[i]->status;
        }
    } else {
        McRpc__BatchStatusResponse *p = (void *)r;
        s = p->status;
        for (size_t i = 0; i < p->n_statuses; i++) {
            *failed_p += p->statuses[i] != MC_OK;
            if (statuses && i < n)
                statuses[i] = p->statuses[i];
        }
    }
    mc_rpc_response_free(r);
    return s;
}

static inline int ping(mc_rpc_client_t *c, uint8_t *cid)
{
    McRpc__PingRequest q = MC_RPC__PING_REQUEST__INIT;
    q.client_id = (ProtobufCBinaryData){16, cid};
    ProtobufCMessage *r;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_PING, &q.base, &r, MC_TEST_RPC_TIMEOUT_MS), MC_OK);
    int cs = ((McRpc__PingResponse *)r)->client_status;
    mc_rpc_response_free(r);
    return cs;
}

#endif
