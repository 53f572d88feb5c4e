/* The opcode table: for each wire opcode, its name (metrics, logs) and its protobuf request and
 * response descriptors. The server decodes requests and the client checks requests and decodes
 * answers from it; mc_rpc_op_info returns NULL for an unknown opcode. */
#include "rpc/opcodes.h"

#include <stddef.h>

#define OP(code, nm, rq, rs) [code] = {code, nm, &mc_rpc__##rq##__descriptor, &mc_rpc__##rs##__descriptor}

static const mc_rpc_op_info_t op_table[MC_OP_MAX] = {
    OP(MC_OP_PING, "ping", ping_request, ping_response),
    OP(MC_OP_SERVICE_READY, "service_ready", service_ready_request, status_response),
    OP(MC_OP_MOUNT_SEGMENT, "mount_segment", mount_segment_request, status_response),
    OP(MC_OP_REMOUNT_SEGMENT, "remount_segment", re_mount_segment_request, batch_status_response),
    OP(MC_OP_UNMOUNT_SEGMENT, "unmount_segment", unmount_segment_request, status_response),
    OP(MC_OP_GRACEFUL_UNMOUNT_SEGMENT, "graceful_unmount_segment", unmount_segment_request,
       status_response),
    OP(MC_OP_QUERY_SEGMENT_STATUS, "query_segment_status", query_segment_status_request,
       query_segment_status_response),
    OP(MC_OP_PUT_START, "put_start", put_start_request, put_start_response),
    OP(MC_OP_PUT_END, "put_end", put_end_request, status_response),
    OP(MC_OP_PUT_REVOKE, "put_revoke", key_request, status_response),
    OP(MC_OP_BATCH_PUT_START, "batch_put_start", batch_put_start_request, batch_put_start_response),
    OP(MC_OP_BATCH_PUT_END, "batch_put_end", batch_put_end_request, batch_status_response),
    OP(MC_OP_BATCH_PUT_REVOKE, "batch_put_revoke", batch_key_request, batch_status_response),
    OP(MC_OP_UPSERT_START, "upsert_start", put_start_request, put_start_response),
    OP(MC_OP_UPSERT_END, "upsert_end", put_end_request, status_response),
    OP(MC_OP_UPSERT_REVOKE, "upsert_revoke", key_request, status_response),
    OP(MC_OP_BATCH_UPSERT_START, "batch_upsert_start", batch_put_start_request,
       batch_put_start_response),
    OP(MC_OP_BATCH_UPSERT_END, "batch_upsert_end", batch_put_end_request, batch_status_response),
    OP(MC_OP_BATCH_UPSERT_REVOKE, "batch_upsert_revoke", batch_key_request, batch_status_response),
    OP(MC_OP_GET_REPLICA_LIST, "get_replica_list", key_request, replica_list_response),
    OP(MC_OP_BATCH_GET_REPLICA_LIST, "batch_get_replica_list", batch_key_request,
       batch_replica_list_response),
    OP(MC_OP_EXIST_KEY, "exist_key", key_request, status_response),
    OP(MC_OP_BATCH_EXIST_KEY, "batch_exist_key", batch_key_request, batch_status_response),
    OP(MC_OP_GET_SIZE, "get_size", key_request, get_size_response),
    OP(MC_OP_REMOVE, "remove", key_request, status_response),
    OP(MC_OP_BATCH_REMOVE, "batch_remove", batch_key_request, batch_status_response),
    OP(MC_OP_REMOVE_BY_REGEX, "remove_by_regex", remove_by_regex_request, count_response),
    OP(MC_OP_REMOVE_ALL, "remove_all", remove_all_request, count_response),
    OP(MC_OP_POLL_EVENTS, "poll_events", poll_events_request, poll_events_response),
    OP(MC_OP_LIST_OBJECTS, "list_objects", list_objects_request, list_objects_response),
    OP(MC_OP_RELEASE_RETIRED, "release_retired", release_retired_request, status_response),
    OP(MC_OP_BATCH_REPLICA_CLEAR, "batch_replica_clear", batch_replica_clear_request,
       batch_status_response),
    OP(MC_OP_MOUNT_LOCAL_DISK, "mount_local_disk_segment", mount_local_disk_request,
       status_response),
    OP(MC_OP_UNMOUNT_LOCAL_DISK, "unmount_local_disk_segment", mount_local_disk_request,
       status_response),
    OP(MC_OP_REPORT_SSD_CAPACITY, "report_ssd_capacity", report_ssd_capacity_request,
       status_response),
    OP(MC_OP_OFFLOAD_HEARTBEAT, "offload_object_heartbeat", offload_heartbeat_request,
       offload_heartbeat_response),
    OP(MC_OP_NOTIFY_OFFLOAD_SUCCESS, "notify_offload_success", notify_offload_success_request,
       batch_status_response),
    OP(MC_OP_BATCH_EVICT_DISK_REPLICA, "batch_evict_disk_replica", batch_evict_disk_replica_request,
       batch_status_response),
    OP(MC_OP_PROMOTION_ALLOC_START, "promotion_alloc_start", promotion_request,
       put_start_response),
    OP(MC_OP_NOTIFY_PROMOTION_SUCCESS, "notify_promotion_success", promotion_request,
       status_response),
    OP(MC_OP_NOTIFY_PROMOTION_FAILURE, "notify_promotion_failure", promotion_request,
       status_response),
    OP(MC_OP_BATCH_GET_OFFLOAD_OBJECT, "batch_get_offload_object",
       batch_get_offload_object_request, batch_get_offload_object_response),
    OP(MC_OP_RELEASE_OFFLOAD_BUFFER, "release_offload_buffer", release_offload_buffer_request,
       status_response),
    OP(MC_OP_WAIT_OFFLOAD_READ, "wait_offload_read", wait_offload_read_request,
       wait_offload_read_response),
    OP(MC_OP_HA_FETCH, "ha_fetch", ha_fetch_request, ha_fetch_response),
    OP(MC_OP_CREATE_COPY_TASK, "create_copy_task", create_copy_task_request, task_id_response),
    OP(MC_OP_CREATE_MOVE_TASK, "create_move_task", create_move_task_request, task_id_response),
    OP(MC_OP_QUERY_TASK, "query_task", query_task_request, query_task_response),
    OP(MC_OP_FETCH_TASKS, "fetch_tasks", fetch_tasks_request, fetch_tasks_response),
    OP(MC_OP_MARK_TASK_TO_COMPLETE, "mark_task_to_complete", mark_task_request, status_response),
    OP(MC_OP_COPY_START, "copy_start", task_step_request, task_start_response),
    OP(MC_OP_COPY_END, "copy_end", task_step_request, status_response),
    OP(MC_OP_COPY_REVOKE, "copy_revoke", task_step_request, status_response),
    OP(MC_OP_MOVE_START, "move_start", task_step_request, task_start_response),
    OP(MC_OP_MOVE_END, "move_end", task_step_request, status_response),
    OP(MC_OP_MOVE_REVOKE, "move_revoke", task_step_request, status_response),
};

const mc_rpc_op_info_t *mc_rpc_op_info(uint16_t opcode)
{
    if (opcode >= MC_OP_MAX || op_table[opcode].name == NULL)
        return NULL;
    return &op_table[opcode];
}
