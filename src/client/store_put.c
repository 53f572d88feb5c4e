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

/* Per key of a batch put (bput_t.k[i]). */
typedef struct bput_key {
    uint64_t size;
    uint64_t checksum;
    bool started; /* PutStart succeeded: must end with PutEnd or PutRevoke */
    uint32_t n_replicas; /* written by the plan (mooncake_transfer_write_bytes) */
} bput_key_t;

/* One batch put, from bput_init to bput_free. */
typedef struct bput {
    mc_store_t *s;
    size_t n;
    const char *const *keys;
    const struct iovec *const *parts;
    const size_t *n_parts;
    const mc_replicate_config_t *cfg;
    bool upsert;
    int32_t *results;
    bput_key_t *k;
    unsigned char *failed;      /* per key, set by the plan; [n]: stamps (need not succeed) */
    ProtobufCBinaryData *req_keys; /* BatchPutStart: m keys, req_keys[j] is key idx[j] */
    uint64_t *req_sizes;
    size_t *idx, m;
    size_t *commit, *revoke;    /* bput_finish: the started keys to commit, to revoke */
    uint64_t *tokens;           /* store_stamp_add, for store_stamp_release */
    size_t n_tok;
    uint64_t stamp_wait_ms;     /* the longest lease on the values the batch retires */
    xfer_plan_t plan;
    ProtobufCMessage *resp;     /* BatchPutStart's answer (bs) */
    McRpc__BatchPutStartResponse *bs;
} bput_t;

static mc_status_t put_write(mc_store_t *s, const char *key, const struct iovec *parts,
                             size_t n_parts, uint64_t size, const McRpc__PutStartResponse *ps,
                             mc_status_t st, uint64_t *stamp_wait_ms);
static mc_status_t put_end(mc_store_t *s, const char *key, int upsert, mc_status_t write_st,
                           uint64_t checksum);
static mc_status_t store_put_attempt(mc_store_t *s, const char *key, const struct iovec *parts,
                                     size_t n_parts, const mc_replicate_config_t *cfg, int upsert);
static mc_status_t store_put_one(mc_store_t *s, const char *key, const struct iovec *parts,
                                 size_t n_parts, const mc_replicate_config_t *cfg, int upsert);
static mc_status_t bput_init(bput_t *b);
static void bput_free(bput_t *b);
static bool bput_start(bput_t *b);
static void bput_plan_key(bput_t *b, size_t i, const McRpc__PutStartResponse *ps,
                          uint8_t stamp[STAMP_BYTES]);
static void bput_write(bput_t *b);
static void bput_end(bput_t *b, const size_t *which, size_t n, bool commit);
static void bput_finish(bput_t *b);

/* ------------------------------------------------------------------ put / upsert */

/* Phase 2 of one put: a TE batch writes the value to every replica PutStart gave (ps, when
 * st is MC_OK) and stamps the old value the call retired (whatever st). It runs even if the
 * value's write could not be set up: the old value is gone from the master already, and its
 * stamps must land. Returns st, or the write's failure; *stamp_wait_ms: how long to wait out
 * the old value's leases (0 when every stamp landed). */
static mc_status_t put_write(mc_store_t *s, const char *key, const struct iovec *parts,
                             size_t n_parts, uint64_t size, const McRpc__PutStartResponse *ps,
                             mc_status_t st, uint64_t *stamp_wait_ms)
{
    xfer_plan_t plan = {0};
    uint8_t stamp[16];
    unsigned char failed[2] = {0, 0}; /* [0] the value, [1] stamps */
    store_uuid_random(stamp);
    uint64_t token;
    uint64_t retired_lease_ms = store_stamp_add(s, &plan, ps->retired, STAMP_MAX, stamp, 1,
                                                failed, &token);
    for (size_t r = 0; r < ps->n_replicas && st == MC_OK; r++) {
        const McRpc__ReplicaDesc *rd = ps->replicas[r];
        if (rd->size != size) {
            MC_LOG_ERROR("master returned a %llu-byte replica for a %llu-byte put of %s",
                         (unsigned long long)rd->size, (unsigned long long)size, key);
            st = MC_ERR_INVALID_REPLICA;
            break;
        }
        st = store_plan_add(s, &plan, MC_TE_WRITE, rd->transport_endpoint, rd->buffer_address,
                            size, parts, n_parts, 0);
        if (st == MC_OK && r == 0) /* a hint only: a failed put makes it miss, never misread */
            store_hint_remember(s, key, rd, NULL, 0);
    }
    mc_status_t ts = store_plan_run(s, &plan, failed);
    if (st == MC_OK && failed[0])
        st = ts != MC_OK ? ts : MC_ERR_TRANSFER_FAIL;
    *stamp_wait_ms = failed[1] ? retired_lease_ms : 0;
    if (!failed[1])
        store_stamp_release(s, &token, token != 0);
    store_plan_free(&plan);
    return st;
}

/* Phase 3 of one started put: PutEnd with the value's checksum when write_st is MC_OK, else
 * PutRevoke (the space goes back, so the key can be written again). Returns the put's status. */
static mc_status_t put_end(mc_store_t *s, const char *key, int upsert, mc_status_t write_st,
                           uint64_t checksum)
{
    ProtobufCMessage *resp = NULL;
    if (write_st == MC_OK) {
        McRpc__PutEndRequest end = MC_RPC__PUT_END_REQUEST__INIT;
        end.client_id = mc_master_client_id(&s->master);
        end.tenant_id = s->master.tenant;
        end.key = mc_wire_key_str(key);
        end.checksum = checksum;
        mc_status_t st = mc_master_client_call(
            &s->master, upsert ? MC_OP_UPSERT_END : MC_OP_PUT_END, &end.base, &resp, 0);
        if (st == MC_OK)
            st = ((McRpc__StatusResponse *)resp)->status;
        mc_rpc_response_free(resp);
        return st;
    }
    mc_status_t write_err = write_st == MC_ERR_TIMEOUT ? MC_ERR_TRANSFER_FAIL : write_st;
    McRpc__KeyRequest rv = MC_RPC__KEY_REQUEST__INIT;
    rv.client_id = mc_master_client_id(&s->master);
    rv.tenant_id = s->master.tenant;
    rv.key = mc_wire_key_str(key);
    if (mc_master_client_call(&s->master, upsert ? MC_OP_UPSERT_REVOKE : MC_OP_PUT_REVOKE,
                              &rv.base, &resp, 1) == MC_OK)
        mc_rpc_response_free(resp);
    MC_LOG_WARN("put %s failed and was revoked: %s", key, mc_status_str(write_err));
    return write_err;
}

/* One put: PutStart (phase 1), put_write, put_end. */
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
    req.tenant_id = s->master.tenant;
    req.key = mc_wire_key_str(key);
    req.value_size = size;
    req.config = store_rpc_config(cfg, &rc);
    ProtobufCMessage *resp = NULL;
    st = mc_master_client_call(&s->master, upsert ? MC_OP_UPSERT_START : MC_OP_PUT_START,
                               &req.base, &resp, 0);
    if (st != MC_OK)
        return st;
    McRpc__PutStartResponse *ps = (McRpc__PutStartResponse *)resp;
    store_grants_present(s, ps->grants, ps->n_grants);
    st = ps->status;
    if (st == MC_ERR_OBJECT_ALREADY_EXISTS && !upsert) {
        mc_rpc_response_free(resp);
        return MC_OK; /* put is create-once, like upstream */
    }
    if (st == MC_OK && ps->n_replicas == 0)
        st = MC_ERR_NO_AVAILABLE_HANDLE;
    bool started = st == MC_OK; /* ends with PutEnd or PutRevoke */
    uint64_t checksum = started ? store_iov_hash(parts, n_parts, size) : 0;
    uint64_t stamp_wait_ms, n_replicas = ps->n_replicas;
    st = put_write(s, key, parts, n_parts, size, ps, st, &stamp_wait_ms);
    mc_rpc_response_free(resp);
    if (started)
        st = put_end(s, key, upsert, st, checksum);
    if (started && st == MC_OK && s->metrics)
        atomic_fetch_add_explicit(&s->metrics->write_bytes, size * n_replicas,
                                  memory_order_relaxed);
    store_stamp_wait("upsert", key, stamp_wait_ms);
    return st;
}

/* A put whose data transfer failed was revoked; the next PutStart may place it elsewhere
 * (a dead storage server stays mounted until client_ttl passes), so retry a few times. */
#define STORE_PUT_ATTEMPTS 3

static mc_status_t store_put_one(mc_store_t *s, const char *key, const struct iovec *parts,
                                 size_t n_parts, const mc_replicate_config_t *cfg, int upsert)
{
    uint64_t t0 = store_metrics_t0(s->metrics); /* one observation per put/upsert call */
    mc_status_t st = MC_ERR_TRANSFER_FAIL;
    for (int attempt = 0; attempt < STORE_PUT_ATTEMPTS; attempt++) {
        st = store_put_attempt(s, key, parts, n_parts, cfg, upsert);
        if (st != MC_ERR_TRANSFER_FAIL && st != MC_ERR_CONNECTION && st != MC_ERR_SEGMENT_NOT_FOUND)
            break;
    }
    store_metrics_op(s->metrics, STORE_OP_PUT, t0, 0, 0);
    return st;
}

mc_status_t mc_store_put(mc_store_t *s, const char *key, const struct iovec *parts,
                         size_t n_parts, const mc_replicate_config_t *cfg)
{
    if (!s || store_cfg_check(cfg) != MC_OK)
        return MC_ERR_INVALID_PARAMS;
    if (s->dummy)
        return mc_dummy_put(s->dummy, key, parts, n_parts, cfg, false);
    return store_put_one(s, key, parts, n_parts, cfg, 0);
}

mc_status_t mc_store_upsert(mc_store_t *s, const char *key, const struct iovec *parts,
                            size_t n_parts, const mc_replicate_config_t *cfg)
{
    if (!s || store_cfg_check(cfg) != MC_OK)
        return MC_ERR_INVALID_PARAMS;
    if (s->dummy)
        return mc_dummy_put(s->dummy, key, parts, n_parts, cfg, true);
    return store_put_one(s, key, parts, n_parts, cfg, 1);
}

/* ------------------------------------------------------------------ batch put */

static mc_status_t bput_init(bput_t *b)
{
    size_t n = b->n;
    b->k = mc_calloc(n, sizeof(*b->k));
    b->failed = mc_calloc(n + 1, 1);
    b->req_keys = mc_calloc(n, sizeof(*b->req_keys));
    b->req_sizes = mc_calloc(n, sizeof(*b->req_sizes));
    b->idx = mc_calloc(n, sizeof(*b->idx));
    b->commit = mc_calloc(n, sizeof(*b->commit));
    b->revoke = mc_calloc(n, sizeof(*b->revoke));
    b->tokens = mc_calloc(n, sizeof(*b->tokens));
    if (!b->k || !b->failed || !b->req_keys || !b->req_sizes || !b->idx || !b->commit ||
        !b->revoke || !b->tokens)
        return MC_ERR_NO_MEMORY;
    return MC_OK;
}

static void bput_free(bput_t *b)
{
    mc_rpc_response_free(b->resp);
    store_plan_free(&b->plan);
    mc_free(b->k);
    mc_free(b->failed);
    mc_free(b->req_keys);
    mc_free(b->req_sizes);
    mc_free(b->idx);
    mc_free(b->commit);
    mc_free(b->revoke);
    mc_free(b->tokens);
}

/* Phase 1: validates every key locally; the valid ones go to the master in one BatchPutStart.
 * Returns false when nothing was started (no valid key, or the call failed: every listed key's
 * result says why). */
static bool bput_start(bput_t *b)
{
    for (size_t i = 0; i < b->n; i++) {
        int32_t *r = &b->results[i];
        *r = store_key_check(b->keys[i]);
        if (*r == MC_OK)
            *r = store_iov_total(b->parts[i], b->n_parts[i], &b->k[i].size);
        if (*r == MC_OK && b->k[i].size == 0)
            *r = MC_ERR_INVALID_PARAMS;
        if (*r == MC_OK) {
            b->req_keys[b->m] = mc_wire_key_str(b->keys[i]);
            b->req_sizes[b->m] = b->k[i].size;
            b->idx[b->m++] = i;
        }
    }
    if (b->m == 0)
        return false;
    mc_store_t *s = b->s;
    McRpc__ReplicateConfig rc;
    McRpc__BatchPutStartRequest req = MC_RPC__BATCH_PUT_START_REQUEST__INIT;
    req.client_id = mc_master_client_id(&s->master);
    req.tenant_id = s->master.tenant;
    req.n_keys = b->m;
    req.keys = b->req_keys;
    req.n_value_sizes = b->m;
    req.value_sizes = b->req_sizes;
    req.config = store_rpc_config(b->cfg, &rc);
    mc_status_t bst = mc_master_client_call(
        &s->master, b->upsert ? MC_OP_BATCH_UPSERT_START : MC_OP_BATCH_PUT_START, &req.base,
        &b->resp, 0);
    b->bs = (McRpc__BatchPutStartResponse *)b->resp;
    bst = store_batch_reply_status(bst, b->bs ? b->bs->status : 0, b->bs ? b->bs->n_results : 0,
                                   b->m);
    if (bst == MC_OK)
        store_grants_present(s, b->bs->grants, b->bs->n_grants);
    if (bst != MC_OK) {
        for (size_t j = 0; j < b->m; j++)
            b->results[b->idx[j]] = bst;
        return false;
    }
    return true;
}

/* Phase 2, listed key i with its PutStart answer ps: adds the stamps of the value it retires
 * (whatever the status, as in store_put_attempt) and the writes of every replica to the plan. */
static void bput_plan_key(bput_t *b, size_t i, const McRpc__PutStartResponse *ps,
                          uint8_t stamp[STAMP_BYTES])
{
    if (ps->status == MC_ERR_OBJECT_ALREADY_EXISTS && !b->upsert) {
        b->results[i] = MC_OK; /* create-once */
        return;
    }
    uint64_t lease_ms = store_stamp_add(b->s, &b->plan, ps->retired, STAMP_MAX, stamp, b->n,
                                        b->failed, &b->tokens[b->n_tok]);
    b->n_tok += b->tokens[b->n_tok] != 0;
    if (lease_ms > b->stamp_wait_ms)
        b->stamp_wait_ms = lease_ms;
    b->results[i] = ps->status;
    if (ps->status != MC_OK)
        return;
    bput_key_t *k = &b->k[i];
    k->started = true;
    k->n_replicas = (uint32_t)ps->n_replicas;
    k->checksum = store_iov_hash(b->parts[i], b->n_parts[i], k->size);
    if (ps->n_replicas == 0)
        b->failed[i] = 1;
    for (size_t r = 0; r < ps->n_replicas && !b->failed[i]; r++) {
        const McRpc__ReplicaDesc *rd = ps->replicas[r];
        if (rd->size != k->size ||
            store_plan_add(b->s, &b->plan, MC_TE_WRITE, rd->transport_endpoint,
                           rd->buffer_address, k->size, b->parts[i], b->n_parts[i], i) != MC_OK)
            b->failed[i] = 1;
        else if (r == 0) /* a hint only: a failed put makes it miss, never misread */
            store_hint_remember(b->s, b->keys[i], rd, NULL, 0);
    }
}

/* Phase 2: one TE batch writes every replica of every started key and stamps the old values;
 * when every stamp landed the master may free the old values' space at once. */
static void bput_write(bput_t *b)
{
    uint8_t stamp[16];
    store_uuid_random(stamp);
    for (size_t j = 0; j < b->m; j++)
        bput_plan_key(b, b->idx[j], b->bs->results[j], stamp);
    store_plan_run(b->s, &b->plan, b->failed);
    if (!b->failed[b->n])
        store_stamp_release(b->s, b->tokens, b->n_tok);
}

/* Phase 3 (one call): commits (BatchPutEnd) or revokes the started keys in which[0..n);
 * a commit sets their results. */
static void bput_end(bput_t *b, const size_t *which, size_t n, bool commit)
{
    if (n == 0)
        return;
    mc_store_t *s = b->s;
    ProtobufCBinaryData *names = mc_calloc(n, sizeof(*names));
    uint64_t *sums = mc_calloc(n, sizeof(*sums));
    if (!names || !sums) {
        for (size_t j = 0; j < n; j++)
            b->results[which[j]] = MC_ERR_NO_MEMORY;
        goto out;
    }
    for (size_t j = 0; j < n; j++) {
        names[j] = mc_wire_key_str(b->keys[which[j]]);
        sums[j] = b->k[which[j]].checksum;
    }
    ProtobufCMessage *resp = NULL;
    mc_status_t st;
    if (commit) {
        McRpc__BatchPutEndRequest req = MC_RPC__BATCH_PUT_END_REQUEST__INIT;
        req.client_id = mc_master_client_id(&s->master);
        req.tenant_id = s->master.tenant;
        req.n_keys = n;
        req.keys = names;
        req.n_checksums = n;
        req.checksums = sums;
        st = mc_master_client_call(&s->master,
                                   b->upsert ? MC_OP_BATCH_UPSERT_END : MC_OP_BATCH_PUT_END,
                                   &req.base, &resp, 0);
    } else {
        McRpc__BatchKeyRequest req = MC_RPC__BATCH_KEY_REQUEST__INIT;
        req.client_id = mc_master_client_id(&s->master);
        req.tenant_id = s->master.tenant;
        req.n_keys = n;
        req.keys = names;
        st = mc_master_client_call(&s->master,
                                   b->upsert ? MC_OP_BATCH_UPSERT_REVOKE : MC_OP_BATCH_PUT_REVOKE,
                                   &req.base, &resp, 1);
    }
    McRpc__BatchStatusResponse *br = (McRpc__BatchStatusResponse *)resp;
    st = store_batch_reply_status(st, br ? br->status : 0, br ? br->n_statuses : 0, n);
    if (commit) {
        for (size_t j = 0; j < n; j++)
            b->results[which[j]] = st == MC_OK ? br->statuses[j] : st;
    }
    mc_rpc_response_free(resp);
out:
    mc_free(names);
    mc_free(sums);
}

/* Phase 3: commits what was written, revokes what was not (its result: TRANSFER_FAIL); if a
 * stamp did not land, waits out the retired values' leases. */
static void bput_finish(bput_t *b)
{
    size_t n_commit = 0, n_revoke = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (!b->k[i].started)
            continue;
        if (b->failed[i]) {
            b->revoke[n_revoke++] = i;
            b->results[i] = MC_ERR_TRANSFER_FAIL;
        } else {
            b->commit[n_commit++] = i;
        }
    }
    bput_end(b, b->commit, n_commit, true);
    bput_end(b, b->revoke, n_revoke, false);
    if (b->failed[b->n])
        store_stamp_wait("batch upsert", "", b->stamp_wait_ms);
}

mc_status_t mc_store_batch_put(mc_store_t *s, size_t n, const char *const *keys,
                               const struct iovec *const *parts, const size_t *n_parts,
                               const mc_replicate_config_t *cfg, bool upsert, int32_t *results)
{
    mc_status_t st = store_batch_args_check(s, n, keys);
    if (st != MC_OK || n == 0)
        return st;
    if (s->dummy)
        return store_cfg_check(cfg) != MC_OK || !parts || !n_parts || !results
                   ? MC_ERR_INVALID_PARAMS
                   : mc_dummy_batch_put(s->dummy, n, keys, parts, n_parts, cfg, upsert, results);
    if (!parts || !n_parts || !results || store_cfg_check(cfg) != MC_OK)
        return MC_ERR_INVALID_PARAMS;
    uint64_t t0 = store_metrics_t0(s->metrics);
    bput_t b = {.s = s, .n = n, .keys = keys, .parts = parts, .n_parts = n_parts, .cfg = cfg,
                .upsert = upsert, .results = results};
    st = bput_init(&b);
    if (st == MC_OK && bput_start(&b)) {
        bput_write(&b);
        bput_finish(&b);
    }
    uint64_t bytes = 0;
    for (size_t i = 0; s->metrics && st == MC_OK && i < n; i++)
        if (b.k[i].started && results[i] == MC_OK)
            bytes += b.k[i].size * b.k[i].n_replicas;
    store_metrics_op(s->metrics, STORE_OP_BATCH_PUT, t0, 0, bytes);
    bput_free(&b);
    return st;
}
