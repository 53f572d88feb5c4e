/* Store client queries and removes: exists, get_size, remove (one, batch, by regex, all) and
 * replica descriptors.
 *
 * Contract: a remove through this client drops its own hints and cached leases on the keys,
 * whatever the outcome, so its next get asks the master. What a forced remove took away from
 * readers holding leases is stamped before the call returns, or the call waits out those
 * leases (retired_settle). Master answers are freed before return; descriptors handed out are
 * malloc'd for the caller.
 */
#include "client/store_int.h"

#include "common/alloc.h"
#include "rpc/frame.h"

#include <stdio.h>
#include <string.h>

static mc_status_t store_key_call(mc_store_t *s, uint16_t op, const char *key, bool force,
                                  ProtobufCMessage **resp_p);
static void retired_settle(mc_store_t *s, const McRpc__RetiredReplicas *rr, const char *op,
                           const char *key);
static mc_status_t store_batch_key_call(mc_store_t *s, uint16_t op, size_t n,
                                        const char *const *keys, bool force, int32_t *results);
static int64_t count_result(mc_store_t *s, mc_status_t st, ProtobufCMessage *resp,
                            const char *op, const char *what);

/* ------------------------------------------------------------------ queries and removes */

static mc_status_t store_key_call(mc_store_t *s, uint16_t op, const char *key, bool force,
                                  ProtobufCMessage **resp_p)
{
    mc_status_t st = s ? store_key_check(key) : MC_ERR_INVALID_PARAMS;
    if (st != MC_OK)
        return st;
    McRpc__KeyRequest req = MC_RPC__KEY_REQUEST__INIT;
    req.client_id = mc_master_client_id(&s->master);
    req.tenant_id = s->master.tenant;
    req.key = mc_wire_key_str(key);
    req.force = force;
    return mc_master_client_call(&s->master, op, &req.base, resp_p, 1);
}

int mc_store_exists(mc_store_t *s, const char *key)
{
    if (s && s->dummy)
        return store_key_check(key) != MC_OK ? MC_ERR_INVALID_PARAMS
                                             : mc_dummy_exists(s->dummy, key);
    ProtobufCMessage *resp = NULL;
    mc_status_t st = store_key_call(s, MC_OP_EXIST_KEY, key, false, &resp);
    if (st == MC_OK)
        st = ((McRpc__StatusResponse *)resp)->status;
    mc_rpc_response_free(resp);
    return st == MC_OK ? 1 : st == MC_ERR_OBJECT_NOT_FOUND ? 0 : st;
}

/* A forced remove took leased values away (rr, from its answer; may be NULL): stamp them and
 * hand their space back, or, if some could not be stamped, wait out their leases, so that once
 * the remove has returned no reader under a cached lease gets the removed bytes. */
static void retired_settle(mc_store_t *s, const McRpc__RetiredReplicas *rr, const char *op,
                           const char *key)
{
    xfer_plan_t plan = {0};
    uint8_t stamp[16];
    unsigned char failed[1] = {0};
    uint64_t token;
    store_uuid_random(stamp);
    uint64_t lease_ms = store_stamp_add(s, &plan, rr, MC_RPC_MAX_RETIRED, stamp, 0, failed, &token);
    if (plan.n)
        store_plan_run(s, &plan, failed);
    store_plan_free(&plan);
    if (!failed[0])
        store_stamp_release(s, &token, token != 0);
    else
        store_stamp_wait(op, key, lease_ms);
}

/* A BatchKeyRequest-shaped call whose per-key statuses land in results (BatchRemove: what it
 * retired is stamped before this returns). */
static mc_status_t store_batch_key_call(mc_store_t *s, uint16_t op, size_t n,
                                        const char *const *keys, bool force, int32_t *results)
{
    mc_status_t st = store_batch_args_check(s, n, keys);
    if (st != MC_OK || n == 0)
        return st;
    if (!results)
        return MC_ERR_INVALID_PARAMS;
    for (size_t i = 0; i < n; i++) {
        st = store_key_check(keys[i]);
        if (st != MC_OK)
            return st;
    }
    McRpc__BatchKeyRequest req = MC_RPC__BATCH_KEY_REQUEST__INIT;
    req.client_id = mc_master_client_id(&s->master);
    req.tenant_id = s->master.tenant;
    req.n_keys = n;
    req.keys = mc_wire_keys(keys, n);
    req.force = force;
    ProtobufCMessage *resp = NULL;
    st = req.keys ? mc_master_client_call(&s->master, op, &req.base, &resp, 1) : MC_ERR_NO_MEMORY;
    mc_free(req.keys);
    McRpc__BatchStatusResponse *br = (McRpc__BatchStatusResponse *)resp;
    st = store_batch_reply_status(st, br ? br->status : 0, br ? br->n_statuses : 0, n);
    for (size_t i = 0; i < n; i++)
        results[i] = st == MC_OK ? br->statuses[i] : st;
    if (st == MC_OK)
        retired_settle(s, br->retired, "batch remove", "");
    mc_rpc_response_free(resp);
    return st;
}

mc_status_t mc_store_batch_exists(mc_store_t *s, size_t n, const char *const *keys,
                                  int32_t *results)
{
    if (s && s->dummy)
        return store_batch_args_check(s, n, keys) != MC_OK || !results
                   ? MC_ERR_INVALID_PARAMS
                   : mc_dummy_batch_exists(s->dummy, n, keys, results);
    mc_status_t st = store_batch_key_call(s, MC_OP_BATCH_EXIST_KEY, n, keys, false, results);
    if (st != MC_OK)
        return st;
    for (size_t i = 0; i < n; i++)
        results[i] = results[i] == MC_OK ? 1 : results[i] == MC_ERR_OBJECT_NOT_FOUND ? 0 : results[i];
    return MC_OK;
}

int64_t mc_store_get_size(mc_store_t *s, const char *key)
{
    if (s && s->dummy)
        return store_key_check(key) != MC_OK ? MC_ERR_INVALID_PARAMS
                                             : mc_dummy_get_size(s->dummy, key);
    ProtobufCMessage *resp = NULL;
    mc_status_t st = store_key_call(s, MC_OP_GET_SIZE, key, false, &resp);
    int64_t rc = st;
    if (st == MC_OK) {
        McRpc__GetSizeResponse *gs = (McRpc__GetSizeResponse *)resp;
        rc = gs->status == MC_OK ? (int64_t)gs->size : gs->status;
    }
    mc_rpc_response_free(resp);
    return rc;
}

/* Removes through this client end its own leases on those keys (whatever the outcome), so
 * its next get asks the master. */
mc_status_t mc_store_remove(mc_store_t *s, const char *key, bool force)
{
    if (s && s->dummy)
        return store_key_check(key) != MC_OK ? MC_ERR_INVALID_PARAMS
                                             : mc_dummy_remove(s->dummy, key, force);
    ProtobufCMessage *resp = NULL;
    mc_status_t st = store_key_call(s, MC_OP_REMOVE, key, force, &resp);
    if (s && store_key_check(key) == MC_OK)
        mc_hint_drop(s->hints, key);
    if (st == MC_OK) {
        McRpc__StatusResponse *sr = (McRpc__StatusResponse *)resp;
        retired_settle(s, sr->retired, "remove", key);
        st = sr->status;
    }
    mc_rpc_response_free(resp);
    return st;
}

mc_status_t mc_store_batch_remove(mc_store_t *s, size_t n, const char *const *keys, bool force,
                                  int32_t *results)
{
    if (s && s->dummy)
        return store_batch_args_check(s, n, keys) != MC_OK || !results
                   ? MC_ERR_INVALID_PARAMS
                   : mc_dummy_batch_remove(s->dummy, n, keys, force, results);
    mc_status_t st = store_batch_key_call(s, MC_OP_BATCH_REMOVE, n, keys, force, results);
    if (store_batch_args_check(s, n, keys) == MC_OK)
        for (size_t i = 0; i < n; i++)
            if (store_key_check(keys[i]) == MC_OK)
                mc_hint_drop(s->hints, keys[i]);
    return st;
}

/* The answer to RemoveByRegex / RemoveAll (what they retired is stamped first). */
static int64_t count_result(mc_store_t *s, mc_status_t st, ProtobufCMessage *resp,
                            const char *op, const char *what)
{
    int64_t rc = st;
    if (st == MC_OK) {
        McRpc__CountResponse *cr = (McRpc__CountResponse *)resp;
        retired_settle(s, cr->retired, op, what);
        rc = cr->status == MC_OK ? (int64_t)cr->count : cr->status;
    }
    mc_rpc_response_free(resp);
    return rc;
}

int64_t mc_store_remove_by_regex(mc_store_t *s, const char *regex, bool force)
{
    if (!s || !regex)
        return MC_ERR_INVALID_PARAMS;
    if (s->dummy)
        return mc_dummy_remove_by_regex(s->dummy, regex, force);
    McRpc__RemoveByRegexRequest req = MC_RPC__REMOVE_BY_REGEX_REQUEST__INIT;
    req.client_id = mc_master_client_id(&s->master);
    req.tenant_id = s->master.tenant;
    req.pattern = (char *)regex;
    req.force = force;
    ProtobufCMessage *resp = NULL;
    mc_status_t st = mc_master_client_call(&s->master, MC_OP_REMOVE_BY_REGEX, &req.base, &resp, 1);
    mc_hint_clear(s->hints);
    return count_result(s, st, resp, "remove by regex", regex);
}

int64_t mc_store_remove_all(mc_store_t *s, bool force)
{
    if (!s)
        return MC_ERR_INVALID_PARAMS;
    if (s->dummy)
        return mc_dummy_remove_all(s->dummy, force);
    McRpc__RemoveAllRequest req = MC_RPC__REMOVE_ALL_REQUEST__INIT;
    req.client_id = mc_master_client_id(&s->master);
    req.tenant_id = s->master.tenant;
    req.force = force;
    ProtobufCMessage *resp = NULL;
    mc_status_t st = mc_master_client_call(&s->master, MC_OP_REMOVE_ALL, &req.base, &resp, 1);
    mc_hint_clear(s->hints);
    return count_result(s, st, resp, "remove all", "");
}

mc_status_t mc_store_replica_desc(mc_store_t *s, const char *key, mc_replica_desc_t **descs_p,
                                  size_t *n_p)
{
    if (!descs_p || !n_p)
        return MC_ERR_INVALID_PARAMS;
    *descs_p = NULL;
    *n_p = 0;
    if (s && s->dummy)
        return MC_ERR_UNAVAILABLE_IN_CURRENT_MODE; /* not served to dummies */
    mc_status_t st = s ? store_key_check(key) : MC_ERR_INVALID_PARAMS;
    if (st != MC_OK)
        return st;
    McRpc__ReplicaListResponse *rl = NULL;
    st = store_replica_list(s, key, &rl);
    if (st != MC_OK)
        return st;
    mc_replica_desc_t *d = mc_calloc(rl->n_replicas, sizeof(*d));
    if (!d) {
        mc_rpc_response_free(&rl->base);
        return MC_ERR_NO_MEMORY;
    }
    for (size_t r = 0; r < rl->n_replicas; r++) {
        snprintf(d[r].segment, sizeof(d[r].segment), "%s", rl->replicas[r]->segment_name);
        snprintf(d[r].endpoint, sizeof(d[r].endpoint), "%s", rl->replicas[r]->transport_endpoint);
        d[r].addr = rl->replicas[r]->buffer_address;
        d[r].size = rl->replicas[r]->size;
        d[r].status = rl->replicas[r]->status == MC_RPC__REPLICA_STATUS__REPLICA_COMPLETE;
        d[r].replica_type = rl->replicas[r]->replica_type == MC_RPC__REPLICA_TYPE__LOCAL_DISK
                                ? MC_REPLICA_LOCAL_DISK
                                : MC_REPLICA_MEMORY;
    }
    *descs_p = d;
    *n_p = rl->n_replicas;
    mc_rpc_response_free(&rl->base);
    return MC_OK;
}
