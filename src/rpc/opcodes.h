/* Opcode table: the single mapping opcode -> (name, request message, response message).
 * Numbers are wire values: append-only, never reuse. */
#ifndef MC_RPC_OPCODES_H
#define MC_RPC_OPCODES_H

#include "rpc/master.pb-c.h"

#include <stdint.h>

typedef enum mc_rpc_opcode {
    MC_OP_PING = 1,
    MC_OP_SERVICE_READY = 2,
    MC_OP_MOUNT_SEGMENT = 3,
    MC_OP_REMOUNT_SEGMENT = 4,
    MC_OP_UNMOUNT_SEGMENT = 5,
    MC_OP_GRACEFUL_UNMOUNT_SEGMENT = 6,
    MC_OP_QUERY_SEGMENT_STATUS = 7,

    MC_OP_PUT_START = 20,
    MC_OP_PUT_END = 21,
    MC_OP_PUT_REVOKE = 22,
    MC_OP_BATCH_PUT_START = 23,
    MC_OP_BATCH_PUT_END = 24,
    MC_OP_BATCH_PUT_REVOKE = 25,
    MC_OP_UPSERT_START = 26,
    MC_OP_UPSERT_END = 27,
    MC_OP_UPSERT_REVOKE = 28,
    MC_OP_BATCH_UPSERT_START = 29,
    MC_OP_BATCH_UPSERT_END = 30,
    MC_OP_BATCH_UPSERT_REVOKE = 31,

    MC_OP_GET_REPLICA_LIST = 40,
    MC_OP_BATCH_GET_REPLICA_LIST = 41,
    MC_OP_EXIST_KEY = 42,
    MC_OP_BATCH_EXIST_KEY = 43,
    MC_OP_GET_SIZE = 44,

    MC_OP_REMOVE = 50,
    MC_OP_BATCH_REMOVE = 51,
    MC_OP_REMOVE_BY_REGEX = 52,
    MC_OP_REMOVE_ALL = 53,

    MC_OP_POLL_EVENTS = 54,   /* object event stream (subscribers) */
    MC_OP_LIST_OBJECTS = 55,  /* paged snapshot of committed objects (resync) */
    MC_OP_RELEASE_RETIRED = 56, /* stamped retired replicas: free their space now */
    MC_OP_BATCH_REPLICA_CLEAR = 57, /* drop own unleased objects' replicas (all, or one segment) */

    /* local-disk (SSD) tier */
    MC_OP_MOUNT_LOCAL_DISK = 70,
    MC_OP_UNMOUNT_LOCAL_DISK = 71,
    MC_OP_REPORT_SSD_CAPACITY = 72,
    MC_OP_OFFLOAD_HEARTBEAT = 73,
    MC_OP_NOTIFY_OFFLOAD_SUCCESS = 74,
    MC_OP_BATCH_EVICT_DISK_REPLICA = 75,
    MC_OP_PROMOTION_ALLOC_START = 78,
    MC_OP_NOTIFY_PROMOTION_SUCCESS = 79,
    MC_OP_NOTIFY_PROMOTION_FAILURE = 80,
    /* a storage server's offload RPC server (client side, store_disk.c) */
    MC_OP_BATCH_GET_OFFLOAD_OBJECT = 76,
    MC_OP_RELEASE_OFFLOAD_BUFFER = 77,
    MC_OP_WAIT_OFFLOAD_READ = 81, /* a streamed BatchGetOffloadObject's progress */

    /* HA with --ha_commit=standbys: a standby fetches the leader's WAL records (master/ha.h) */
    MC_OP_HA_FETCH = 90,

    /* replica copy/move tasks (master/master_tasks.c) */
    MC_OP_CREATE_COPY_TASK = 100,
    MC_OP_CREATE_MOVE_TASK = 101,
    MC_OP_QUERY_TASK = 102,
    MC_OP_FETCH_TASKS = 103,
    MC_OP_MARK_TASK_TO_COMPLETE = 104,
    MC_OP_COPY_START = 105,
    MC_OP_COPY_END = 106,
    MC_OP_COPY_REVOKE = 107,
    MC_OP_MOVE_START = 108,
    MC_OP_MOVE_END = 109,
    MC_OP_MOVE_REVOKE = 110,

    MC_OP_MAX = 128, /* opcodes are < MC_OP_MAX (handler tables are arrays of this size) */
} mc_rpc_opcode_t;

typedef struct mc_rpc_op_info {
    uint16_t opcode;
    const char *name;  /* snake_case, used in metric names: master_<name>_requests_total */
    const ProtobufCMessageDescriptor *req;
    const ProtobufCMessageDescriptor *resp;
} mc_rpc_op_info_t;

/* Static info for an opcode, or NULL if the opcode is unknown. */
const mc_rpc_op_info_t *mc_rpc_op_info(uint16_t opcode);

#endif
