/* Store client writes: mc_store_put, mc_store_upsert (one key, retried on transfer failures)
 * and mc_store_batch_put (many keys, one master round trip per phase and one TE batch).
 *
 * Contract (mooncake/store.h): put is create-once (an existing key is MC_OK without a write);
 * upsert overwrites. Every key that PutStart started ends with PutEnd (its bytes all written)
 * or PutRevoke (space given back), so a failed put never leaves a half-written object. An
 * upsert's retired old value is stamped (store_stamp_add) before the call returns, or the call
 * waits out its leases, so no reader under a cached lease sees the old bytes afterwards.
 * No locks of its own: the caller's parts are borrowed for the call.
 */
#include "client/store_int.h"

#include "common/alloc.h"
#include "common/log.h"
#include "rpc/frame.h"

#include <string.h>

static mc_status_t store_put_attempt(mc_store_t *s, const char *key, const struct iovec *parts,
                                     size_t n_parts, const mc_replicate_config_t *cfg, int upsert);
static mc_status_t store_put_one(mc_store_t *s, const char *key, const struct iovec *parts,
                                 size_t n_parts, const mc_replicate_config_t *cfg, int upsert);

/* ------------------------------------------------------------------ put / upsert */

static mc_status_t store_put_attempt(mc_store_t *s, const char *key, const struct iovec *parts,
                                     size_t n_parts, const mc_replicate_config_t *cfg, int upsert)
{
    uint64_t size;
    mc_status_t st = store_key_check(key);
    if (st == MC_OK)
        st = store_iov_total(parts, n_parts, &size);
    if (st != MC_OK)
        return st;
    if (size == 0)
        return MC_ERR_INVALID_PARAMS;

    McRpc__ReplicateConfig rc;
    McRpc__PutStartRequest req = MC_RPC__PUT_START_REQUEST__INIT;
    req.client_id = mc_master_client_id(&s->master);
    req.key = (char *)key;
    req.value_size = size;
    req.config = store_rpc_config(cfg, &rc);
    ProtobufCMessage *resp = NULL;
    st = mc_master_client_call(&s->master, upsert ? MC_OP_UPSERT_START : MC_OP_PUT_START,
                               &req.base, &resp, 0);
    if (st != MC_OK)
        return st;
    McRpc__PutStartResponse *ps = (McRpc__PutStartResponse *)resp;
    st = ps->status;
    if (st == MC_ERR_OBJECT_ALREADY_EXISTS && !upsert) {
        mc_rpc_response_free(resp);
        return MC_OK; /* put is create-once, like upstream */
    }
    if (st == MC_OK && ps->n_replicas == 0)
        st = MC_ERR_NO_AVAILABLE_HANDLE;
    bool started = st == MC_OK; /* ends with PutEnd or PutRevoke */

    /* Stamps whatever the status: an upsert that then found no space has retired the old
     * value all the same. */
    xfer_plan_t plan = {0};
    uint8_t stamp[16];
    unsigned char failed[2] = {0, 0}; /* [0] the value, [1] stamps */
    store_uuid_random(stamp);
    uint64_t token;
    uint64_t retired_lease_ms = store_stamp_add(s, &plan, ps->retired, STAMP_MAX, stamp, 1, failed,
                                                &token);
    uint64_t checksum = started ? store_iov_hash(parts, n_parts, size) : 0;
    for (size_t r = 0; r < ps->n_replicas && st == MC_OK; r++) {
        McRpc__ReplicaDesc *rd = ps->replicas[r];
        if (rd->size != size) {
            MC_LOG_ERROR("master returned a %llu-byte replica for a %llu-byte put of %s",
                         (unsigned long long)rd->size, (unsigned long long)size, key);
            st = MC_ERR_INVALID_REPLICA;
            break;
        }
        st = store_plan_add(s, &plan, MC_TE_WRITE, rd->transport_endpoint, rd->buffer_address, size,
                            parts, n_parts, 0);
        if (st == MC_OK && r == 0) /* a hint only: a failed put makes it miss, never misread */
            store_hint_remember(s, key, rd, NULL, 0);
    }
    /* Run even if the value's write could not be set up: the old value is gone from the
     * master already, and its stamps must land. */
    mc_status_t ts = store_plan_run(s, &plan, failed);
    if (st == MC_OK && failed[0])
        st = ts != MC_OK ? ts : MC_ERR_TRANSFER_FAIL;
    uint64_t stamp_wait_ms = failed[1] ? retired_lease_ms : 0;
    if (!failed[1])
        store_stamp_release(s, &token, token != 0);
    store_plan_free(&plan);
    mc_rpc_response_free(resp);
    resp = NULL;
    if (!started) {
        store_stamp_wait("upsert", key, stamp_wait_ms);
        return st;
    }

    if (st == MC_OK) {
        McRpc__PutEndRequest end = MC_RPC__PUT_END_REQUEST__INIT;
        end.client_id = mc_master_client_id(&s->master);
        end.key = (char *)key;
        end.checksum = checksum;
        st = mc_master_client_call(&s->master, upsert ? MC_OP_UPSERT_END : MC_OP_PUT_END,
                                   &end.base, &resp, 0);
        if (st == MC_OK)
            st = ((McRpc__StatusResponse *)resp)->status;
        mc_rpc_response_free(resp);
        store_stamp_wait("upsert", key, stamp_wait_ms);
        return st;
    }
    /* The write failed: give the space back so the key can be written again. */
    mc_status_t write_err = st == MC_ERR_TIMEOUT ? MC_ERR_TRANSFER_FAIL : st;
    McRpc__KeyRequest rv = MC_RPC__KEY_REQUEST__INIT;
    rv.client_id = mc_master_client_id(&s->master);
    rv.key = (char *)key;
    if (mc_master_client_call(&s->master, upsert ? MC_OP_UPSERT_REVOKE : MC_OP_PUT_REVOKE,
                              &rv.base, &resp, 1) == MC_OK)
        mc_rpc_response_free(resp);
    MC_LOG_WARN("put %s failed and was revoked: %s", key, mc_status_str(write_err));
    store_stamp_wait("upsert", key, stamp_wait_ms);
    return write_err;
}

/* A put whose data transfer failed was revoked; the next PutStart may place it elsewhere
 * (a dead storage server stays mounted until client_ttl passes), so retry a few times. */
#define STORE_PUT_ATTEMPTS 3

static mc_status_t store_put_one(mc_store_t *s, const char *key, const struct iovec *parts,
                                 size_t n_parts, const mc_replicate_config_t *cfg, int upsert)
{
    mc_status_t st = MC_ERR_TRANSFER_FAIL;
    for (int attempt = 0; attempt < STORE_PUT_ATTEMPTS; attempt++) {
        st = store_put_attempt(s, key, parts, n_parts, cfg, upsert);
        if (st != MC_ERR_TRANSFER_FAIL && st != MC_ERR_CONNECTION && st != MC_ERR_SEGMENT_NOT_FOUND)
            break;
    }
    return st;
}

mc_status_t mc_store_put(mc_store_t *s, const char *key, const struct iovec *parts,
                         size_t n_parts, const mc_replicate_config_t *cfg)
{
    if (!s)
        return MC_ERR_INVALID_PARAMS;
    return store_put_one(s, key, parts, n_parts, cfg, 0);
}

mc_status_t mc_store_upsert(mc_store_t *s, const char *key, const struct iovec *parts,
                            size_t n_parts, const mc_replicate_config_t *cfg)
{
    if (!s)
        return MC_ERR_INVALID_PARAMS;
    return store_put_one(s, key, parts, n_parts, cfg, 1);
}

/* Per-key bookkeeping of a batch put. */
typedef struct batch_put_key {
    uint64_t size;
    uint64_t checksum;
    int started; /* PutStart succeeded: must end with PutEnd or PutRevoke */
} batch_put_key_t;

/* Commits (end) or revokes the started keys listed in which[0..n). */
static void batch_put_finish(mc_store_t *s, const char *const *keys, const size_t *which, size_t n,
                             const batch_put_key_t *bk, int commit, int upsert, int32_t *results)
{
    if (n == 0)
        return;
    char **names = mc_calloc(n, sizeof(*names));
    uint64_t *sums = mc_calloc(n, sizeof(*sums));
    if (!names || !sums) {
        for (size_t j = 0; j < n; j++)
            results[which[j]] = MC_ERR_NO_MEMORY;
        goto out;
    }
    for (size_t j = 0; j < n; j++) {
        names[j] = (char *)keys[which[j]];
        sums[j] = bk[which[j]].checksum;
    }
    ProtobufCMessage *resp = NULL;
    mc_status_t st;
    if (commit) {
        McRpc__BatchPutEndRequest req = MC_RPC__BATCH_PUT_END_REQUEST__INIT;
        req.client_id = mc_master_client_id(&s->master);
        req.n_keys = n;
        req.keys = names;
        req.n_checksums = n;
        req.checksums = sums;
        st = mc_master_client_call(&s->master, upsert ? MC_OP_BATCH_UPSERT_END : MC_OP_BATCH_PUT_END,
                                   &req.base, &resp, 0);
    } else {
        McRpc__BatchKeyRequest req = MC_RPC__BATCH_KEY_REQUEST__INIT;
        req.client_id = mc_master_client_id(&s->master);
        req.n_keys = n;
        req.keys = names;
        st = mc_master_client_call(&s->master,
                                   upsert ? MC_OP_BATCH_UPSERT_REVOKE : MC_OP_BATCH_PUT_REVOKE,
                                   &req.base, &resp, 1);
    }
    McRpc__BatchStatusResponse *br = (McRpc__BatchStatusResponse *)resp;
    st = store_batch_reply_status(st, br ? br->status : 0, br ? br->n_statuses : 0, n);
    if (commit) {
        for (size_t j = 0; j < n; j++)
            results[which[j]] = st == MC_OK ? br->statuses[j] : st;
    }
    mc_rpc_response_free(resp);
out:
    mc_free(names);
    mc_free(sums);
}

mc_status_t mc_store_batch_put(mc_store_t *s, size_t n, const char *const *keys,
                               const struct iovec *const *parts, const size_t *n_parts,
                               const mc_replicate_config_t *cfg, bool upsert, int32_t *results)
{
    mc_status_t st = store_batch_args_check(s, n, keys);
    if (st != MC_OK || n == 0)
        return st;
    if (!parts || !n_parts || !results)
        return MC_ERR_INVALID_PARAMS;

    batch_put_key_t *bk = mc_calloc(n, sizeof(*bk));
    unsigned char *failed = mc_calloc(n + 1, 1); /* [n]: stamps (need not succeed) */
    char **req_keys = mc_calloc(n, sizeof(*req_keys));
    uint64_t *req_sizes = mc_calloc(n, sizeof(*req_sizes));
    size_t *idx = mc_calloc(n, sizeof(*idx));     /* request slot -> batch index */
    size_t *commit = mc_calloc(n, sizeof(*commit));
    size_t *revoke = mc_calloc(n, sizeof(*revoke));
    uint64_t *tokens = mc_calloc(n, sizeof(*tokens)); /* store_stamp_add, for store_stamp_release */
    size_t n_tok = 0;
    xfer_plan_t plan = {0};
    ProtobufCMessage *resp = NULL;
    if (!bk || !failed || !req_keys || !req_sizes || !idx || !commit || !revoke || !tokens) {
        st = MC_ERR_NO_MEMORY;
        goto out;
    }

    /* 1. Local validation; valid keys go to the master in one BatchPutStart. */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        results[i] = store_key_check(keys[i]);
        if (results[i] == MC_OK)
            results[i] = store_iov_total(parts[i], n_parts[i], &bk[i].size);
        if (results[i] == MC_OK && bk[i].size == 0)
            results[i] = MC_ERR_INVALID_PARAMS;
        if (results[i] == MC_OK) {
            req_keys[m] = (char *)keys[i];
            req_sizes[m] = bk[i].size;
            idx[m++] = i;
        }
    }
    if (m == 0)
        goto out;

    McRpc__ReplicateConfig rc;
    McRpc__BatchPutStartRequest req = MC_RPC__BATCH_PUT_START_REQUEST__INIT;
    req.client_id = mc_master_client_id(&s->master);
    req.n_keys = m;
    req.keys = req_keys;
    req.n_value_sizes = m;
    req.value_sizes = req_sizes;
    req.config = store_rpc_config(cfg, &rc);
    mc_status_t bst = mc_master_client_call(
        &s->master, upsert ? MC_OP_BATCH_UPSERT_START : MC_OP_BATCH_PUT_START, &req.base, &resp, 0);
    McRpc__BatchPutStartResponse *bs = (McRpc__BatchPutStartResponse *)resp;
    bst = store_batch_reply_status(bst, bs ? bs->status : 0, bs ? bs->n_results : 0, m);
    if (bst != MC_OK) {
        for (size_t j = 0; j < m; j++)
            results[idx[j]] = bst;
        goto out;
    }

    /* 2. One TE batch writes every replica of every started key (and stamps old values). */
    uint8_t stamp[16];
    store_uuid_random(stamp);
    uint64_t stamp_wait_ms = 0; /* the longest lease on the values the batch retires */
    for (size_t j = 0; j < m; j++) {
        size_t i = idx[j];
        McRpc__PutStartResponse *ps = bs->results[j];
        if (ps->status == MC_ERR_OBJECT_ALREADY_EXISTS && !upsert) {
            results[i] = MC_OK; /* create-once */
            continue;
        }
        /* stamps whatever the status (put_attempt) */
        uint64_t lease_ms =
            store_stamp_add(s, &plan, ps->retired, STAMP_MAX, stamp, n, failed, &tokens[n_tok]);
        n_tok += tokens[n_tok] != 0;
        if (lease_ms > stamp_wait_ms)
            stamp_wait_ms = lease_ms;
        results[i] = ps->status;
        if (ps->status != MC_OK)
            continue;
        bk[i].started = 1;
        bk[i].checksum = store_iov_hash(parts[i], n_parts[i], bk[i].size);
        if (ps->n_replicas == 0)
            failed[i] = 1;
        for (size_t r = 0; r < ps->n_replicas && !failed[i]; r++) {
            McRpc__ReplicaDesc *rd = ps->replicas[r];
            if (rd->size != bk[i].size ||
                store_plan_add(s, &plan, MC_TE_WRITE, rd->transport_endpoint, rd->buffer_address,
                               bk[i].size, parts[i], n_parts[i], i) != MC_OK)
                failed[i] = 1;
            else if (r == 0) /* a hint only: a failed put makes it miss, never misread */
                store_hint_remember(s, keys[i], rd, NULL, 0);
        }
    }
    store_plan_run(s, &plan, failed);
    if (!failed[n]) /* every stamp landed: hand the old values' space back now */
        store_stamp_release(s, tokens, n_tok);

    /* 3. Commit what was written, revoke what was not. */
    size_t n_commit = 0, n_revoke = 0;
    for (size_t i = 0; i < n; i++) {
        if (!bk[i].started)
            continue;
        if (failed[i]) {
            revoke[n_revoke++] = i;
            results[i] = MC_ERR_TRANSFER_FAIL;
        } else {
            commit[n_commit++] = i;
        }
    }
    batch_put_finish(s, keys, commit, n_commit, bk, 1, upsert, results);
    batch_put_finish(s, keys, revoke, n_revoke, bk, 0, upsert, results);
    if (failed[n])
        store_stamp_wait("batch upsert", "", stamp_wait_ms);
out:
    mc_rpc_response_free(resp);
    store_plan_free(&plan);
    mc_free(bk);
    mc_free(failed);
    mc_free(req_keys);
    mc_free(req_sizes);
    mc_free(idx);
    mc_free(commit);
    mc_free(revoke);
    mc_free(tokens);
    return st;
}
