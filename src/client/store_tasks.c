/* Replica copy/move tasks (docs/internals/store-client.md, "Replica tasks"): the calls that
 * create and query them (any client), and their execution by the client that owns a task's
 * source segment: its heartbeat thread fetches its tasks when a Ping says some are waiting
 * (store_tasks_run) and runs each one: CopyStart / MoveStart (the master allocates the new
 * replicas), a copy of the source bytes out of our own segment verified against the committed
 * XXH3-64, the writes to the new replicas through the transfer plan (as a put's), CopyEnd /
 * MoveEnd, or CopyRevoke / MoveRevoke on any failure; then MarkTaskToComplete. */
#include "client/store_int.h"

#include "common/alloc.h"
#include "common/hash.h"
#include "common/log.h"

#include <stdio.h>
#include <string.h>

#define TASKS_PER_BEAT 4 /* tasks one heartbeat fetches and runs at most */

static mc_status_t task_id_reply(mc_status_t st, ProtobufCMessage *resp, uint64_t id[2])
{
    const McRpc__TaskIdResponse *r = (const void *)resp;
    if (st == MC_OK)
        st = r->status;
    id[0] = st == MC_OK ? r->id_high : 0;
    id[1] = st == MC_OK ? r->id_low : 0;
    mc_rpc_response_free(resp);
    return st;
}

static mc_status_t task_client_check(mc_store_t *s, const char *key)
{
    if (!s)
        return MC_ERR_INVALID_PARAMS;
    if (s->dummy) {
        MC_LOG_ERROR("replica tasks: not available on a dummy client");
        return MC_ERR_NOT_SUPPORTED;
    }
    return key ? store_key_check(key) : MC_OK;
}

static bool seg_name_ok(const char *n)
{
    return n && n[0] && strnlen(n, MC_STORE_SEGMENT_NAME_MAX + 1) <= MC_STORE_SEGMENT_NAME_MAX;
}

mc_status_t mc_store_create_copy_task(mc_store_t *s, const char *key,
                                      const char *const *targets, size_t n, uint64_t id[2])
{
    mc_status_t st = task_client_check(s, key);
    if (st != MC_OK || !id)
        return st != MC_OK ? st : MC_ERR_INVALID_PARAMS;
    id[0] = id[1] = 0;
    if (n == 0 || n > MC_STORE_TASK_TARGETS_MAX || !targets)
        return MC_ERR_INVALID_PARAMS;
    for (size_t i = 0; i < n; i++)
        if (!seg_name_ok(targets[i]))
            return MC_ERR_INVALID_PARAMS;
    McRpc__CreateCopyTaskRequest req = MC_RPC__CREATE_COPY_TASK_REQUEST__INIT;
    req.key = mc_wire_key_str(key);
    req.targets = (char **)targets;
    req.n_targets = n;
    req.tenant_id = s->master.tenant;
    ProtobufCMessage *resp = NULL;
    st = mc_master_client_call(&s->master, MC_OP_CREATE_COPY_TASK, &req.base, &resp, 0);
    return task_id_reply(st, resp, id);
}

mc_status_t mc_store_create_move_task(mc_store_t *s, const char *key, const char *source,
                                      const char *target, uint64_t id[2])
{
    mc_status_t st = task_client_check(s, key);
    if (st != MC_OK || !id)
        return st != MC_OK ? st : MC_ERR_INVALID_PARAMS;
    id[0] = id[1] = 0;
    if (!seg_name_ok(source) || !seg_name_ok(target))
        return MC_ERR_INVALID_PARAMS;
    McRpc__CreateMoveTaskRequest req = MC_RPC__CREATE_MOVE_TASK_REQUEST__INIT;
    req.key = mc_wire_key_str(key);
    req.source = (char *)source;
    req.target = (char *)target;
    req.tenant_id = s->master.tenant;
    ProtobufCMessage *resp = NULL;
    st = mc_master_client_call(&s->master, MC_OP_CREATE_MOVE_TASK, &req.base, &resp, 0);
    return task_id_reply(st, resp, id);
}

mc_status_t mc_store_query_task(mc_store_t *s, const uint64_t id[2], mc_store_task_info_t *out)
{
    mc_status_t st = task_client_check(s, NULL);
    if (st != MC_OK || !id || !out)
        return st != MC_OK ? st : MC_ERR_INVALID_PARAMS;
    memset(out, 0, sizeof(*out));
    McRpc__QueryTaskRequest req = MC_RPC__QUERY_TASK_REQUEST__INIT;
    req.id_high = id[0];
    req.id_low = id[1];
    req.tenant_id = s->master.tenant;
    ProtobufCMessage *resp = NULL;
    st = mc_master_client_call(&s->master, MC_OP_QUERY_TASK, &req.base, &resp, 0);
    const McRpc__QueryTaskResponse *r = (const void *)resp;
    if (st == MC_OK)
        st = r->status;
    if (st == MC_OK) {
        out->id[0] = r->id_high;
        out->id[1] = r->id_low;
        out->type = r->type;
        out->status = r->task_status;
        out->created_at_ms = r->created_at_ms_epoch;
        out->last_updated_at_ms = r->last_updated_at_ms_epoch;
        if (r->assigned_client.len == 16)
            memcpy(out->assigned_client, r->assigned_client.data, 16);
        snprintf(out->message, sizeof(out->message), "%s", r->message ? r->message : "");
    }
    mc_rpc_response_free(resp);
    return st;
}

/* ------------------------------------------------------------------ execution */

static mc_status_t step_call(mc_store_t *s, uint16_t op, const McRpc__TaskAssignment *t,
                             ProtobufCMessage **resp_p)
{
    McRpc__TaskStepRequest q = MC_RPC__TASK_STEP_REQUEST__INIT;
    q.client_id = mc_master_client_id(&s->master);
    q.id_high = t->id_high;
    q.id_low = t->id_low;
    return mc_master_client_call(&s->master, op, &q.base, resp_p, 0);
}

/* An End or Revoke call: its status. */
static mc_status_t step_status(mc_store_t *s, uint16_t op, const McRpc__TaskAssignment *t)
{
    ProtobufCMessage *resp = NULL;
    mc_status_t st = step_call(s, op, t, &resp);
    if (st == MC_OK)
        st = ((McRpc__StatusResponse *)resp)->status;
    mc_rpc_response_free(resp);
    return st;
}

/* Start, verified copy, writes, End (Revoke on failure) of one task; what failed in *why. */
static mc_status_t task_execute(mc_store_t *s, const McRpc__TaskAssignment *t, const char **why)
{
    bool move = t->type == MC_RPC__TASK_TYPE__REPLICA_MOVE;
    ProtobufCMessage *resp = NULL;
    mc_status_t st = step_call(s, move ? MC_OP_MOVE_START : MC_OP_COPY_START, t, &resp);
    const McRpc__TaskStartResponse *r = (const void *)resp;
    if (st == MC_OK)
        st = r->status;
    if (st != MC_OK) {
        *why = "start";
        mc_rpc_response_free(resp);
        return st;
    }
    const McRpc__ReplicaDesc *src = r->source;
    void *buf = src && src->size == r->size ? mc_malloc(r->size ? r->size : 1) : NULL;
    uint64_t hash = 0;
    if (!buf) {
        *why = src && src->size == r->size ? "staging buffer" : "no source replica";
        st = src && src->size == r->size ? MC_ERR_NO_MEMORY : MC_ERR_INVALID_REPLICA;
    } else if (strcmp(src->segment_name, s->te_name) == 0 &&
               store_is_local(s, src->transport_endpoint, src->buffer_address, r->size)) {
        hash = mc_hash64_copy(buf, (const void *)(uintptr_t)src->buffer_address, r->size, NULL);
    } else if (store_xsegs_copy_out(s, src->segment_name, src->buffer_address, r->size, buf,
                                    &hash) != MC_OK) {
        *why = "the source replica is not in this client's segments";
        st = MC_ERR_INVALID_REPLICA;
    }
    if (st == MC_OK && hash != r->checksum) { /* never copy bytes that are not the value */
        *why = "the source bytes do not match the committed checksum";
        st = MC_ERR_CHECKSUM;
    }
    if (st == MC_OK) {
        xfer_plan_t plan = {0};
        struct iovec iov = {buf, r->size};
        for (size_t i = 0; st == MC_OK && i < r->n_targets; i++)
            st = store_plan_add(s, &plan, MC_TE_WRITE, r->targets[i]->transport_endpoint,
                                r->targets[i]->buffer_address, r->size, &iov, 1, 0);
        if (st == MC_OK)
            st = store_plan_run(s, &plan, NULL);
        store_plan_free(&plan);
        if (st != MC_OK)
            *why = "write to a target";
    }
    mc_free(buf);
    mc_rpc_response_free(resp);
    if (st == MC_OK) {
        st = step_status(s, move ? MC_OP_MOVE_END : MC_OP_COPY_END, t);
        if (st != MC_OK)
            *why = "end";
    } else {
        step_status(s, move ? MC_OP_MOVE_REVOKE : MC_OP_COPY_REVOKE, t);
    }
    return st;
}

static void task_run(mc_store_t *s, const McRpc__TaskAssignment *t)
{
    const char *why = "";
    mc_status_t st = task_execute(s, t, &why);
    char msg[256];
    if (st != MC_OK) {
        snprintf(msg, sizeof(msg), "%s: %s", why, mc_status_str(st));
        MC_LOG_WARN("replica task %016llx%016llx failed: %s", (unsigned long long)t->id_high,
                    (unsigned long long)t->id_low, msg);
    }
    McRpc__MarkTaskRequest q = MC_RPC__MARK_TASK_REQUEST__INIT;
    q.client_id = mc_master_client_id(&s->master);
    q.id_high = t->id_high;
    q.id_low = t->id_low;
    q.task_status = st == MC_OK ? MC_RPC__TASK_STATUS__TASK_SUCCESS
                                : MC_RPC__TASK_STATUS__TASK_FAILED;
    q.message = st == MC_OK ? "" : msg;
    ProtobufCMessage *resp = NULL;
    mc_status_t mst = mc_master_client_call(&s->master, MC_OP_MARK_TASK_TO_COMPLETE, &q.base,
                                            &resp, 0);
    if (mst == MC_OK)
        mst = ((McRpc__StatusResponse *)resp)->status;
    mc_rpc_response_free(resp);
    if (mst != MC_OK)
        MC_LOG_WARN("replica task %016llx%016llx: MarkTaskToComplete failed: %s",
                    (unsigned long long)t->id_high, (unsigned long long)t->id_low,
                    mc_status_str(mst));
}

void store_tasks_run(mc_store_t *s)
{
    McRpc__FetchTasksRequest q = MC_RPC__FETCH_TASKS_REQUEST__INIT;
    q.client_id = mc_master_client_id(&s->master);
    q.max = TASKS_PER_BEAT;
    ProtobufCMessage *resp = NULL;
    mc_status_t st = mc_master_client_call(&s->master, MC_OP_FETCH_TASKS, &q.base, &resp, 0);
    const McRpc__FetchTasksResponse *r = (const void *)resp;
    if (st == MC_OK)
        st = r->status;
    if (st != MC_OK)
        MC_LOG_WARN("FetchTasks failed: %s", mc_status_str(st));
    for (size_t i = 0; st == MC_OK && i < r->n_tasks && i < TASKS_PER_BEAT; i++)
        task_run(s, r->tasks[i]);
    mc_rpc_response_free(resp);
}
