/* RPC handlers: decode protobuf requests into core calls, build responses in the call arena.
 * Replica strings point into the segment table; the server packs the response right after the
 * handler returns, before anything can unmount a segment. */
#include "master/master_int.h"
#include "master/service.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/grant.h"
#include "common/log.h"
#include "common/time.h"
#include "rpc/frame.h"
#include "rpc/replica_lists.h"
#include "rpc/wire_key.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define ALLOC(call, type) ((type *)mc_rpc_arena_calloc((call)->arena, 1, sizeof(type)))
#define ALLOC_N(call, type, n) ((type *)mc_rpc_arena_calloc((call)->arena, (n) ? (n) : 1, sizeof(type)))

static bool cid_ok(ProtobufCBinaryData d) { return d.len == 16; }

static bool batch_ok(size_t n) { return n <= MC_RPC_MAX_BATCH; }

/* A key field (bytes) of the call's tenant as the core's internal key (pointer, length): the
 * user key itself for "default", MARK tenant MARK key (arena memory) for the others
 * (common/tenant.h). NULL with length 0, which every core call refuses with INVALID_KEY, when
 * the key is empty, too long, holds a NUL byte (mc_wire_key_check) or starts with the byte
 * MC_TENANT_MARK (reserved, so that no "default" key looks like another tenant's); also when
 * out of arena memory. */
static const char *wkey(mc_rpc_call_t *call, ProtobufCBinaryData k, size_t *len_p)
{
    *len_p = 0;
    if (mc_wire_key_check(k) != MC_OK)
        return NULL;
    const mc_tenant_scope_t *sc = call->scope;
    if (!sc || sc->plen == 0) { /* "default": the user key itself, unless it is reserved */
        *len_p = k.data[0] == (uint8_t)MC_TENANT_MARK ? 0 : k.len;
        return *len_p ? (const char *)k.data : NULL;
    }
    char *ik = mc_rpc_arena_alloc(call->arena, sc->plen + k.len);
    if (ik)
        *len_p = mc_tenant_key(sc, (const char *)k.data, k.len, ik, sc->plen + k.len);
    return *len_p ? ik : NULL;
}

static mc_status_t status_resp(mc_rpc_call_t *call, int32_t st, ProtobufCMessage **resp_p)
{
    McRpc__StatusResponse *r = ALLOC(call, McRpc__StatusResponse);
    if (!r)
        return MC_ERR_NO_MEMORY;
    mc_rpc__status_response__init(r);
    r->status = st;
    *resp_p = &r->base;
    return MC_OK;
}

static McRpc__ReplicaDesc **reps_out(mc_rpc_arena_t *a, const mc_master_replica_t *reps,
                                     uint32_t n)
{
    McRpc__ReplicaDesc **arr = mc_rpc_arena_calloc(a, n ? n : 1, sizeof(*arr));
    McRpc__ReplicaDesc *d = mc_rpc_arena_calloc(a, n ? n : 1, sizeof(*d));
    if (!arr || !d)
        return NULL;
    for (uint32_t i = 0; i < n; i++) {
        mc_rpc__replica_desc__init(&d[i]);
        d[i].segment_name = (char *)reps[i].segment_name;
        d[i].transport_endpoint = (char *)reps[i].endpoint;
        d[i].buffer_address = reps[i].addr;
        d[i].size = reps[i].size;
        d[i].status = (McRpc__ReplicaStatus)reps[i].status;
        if (reps[i].type == MC_MASTER_REPLICA_LOCAL_DISK) {
            d[i].replica_type = MC_RPC__REPLICA_TYPE__LOCAL_DISK;
            d[i].client_id.data = (uint8_t *)reps[i].client_id;
            d[i].client_id.len = 16;
        }
        arr[i] = &d[i];
    }
    return arr;
}

/* What an upsert or a forced remove retired, for the answer (NULL in *out when nothing was;
 * its stamp grants come with grants_attach); frees retired's list. */
static mc_status_t retired_out(mc_rpc_call_t *call, mc_master_retired_t *retired,
                               McRpc__RetiredReplicas **out)
{
    *out = NULL;
    mc_status_t st = MC_OK;
    if (retired->n || retired->unlisted) {
        McRpc__RetiredReplicas *r = ALLOC(call, McRpc__RetiredReplicas);
        McRpc__ReplicaDesc **reps = reps_out(call->arena, retired->reps, retired->n);
        if (r && reps) {
            mc_rpc__retired_replicas__init(r);
            r->replicas = reps;
            r->n_replicas = retired->n;
            r->lease_ms = retired->lease_left_ms;
            r->token = retired->token;
            r->unlisted = retired->unlisted;
            *out = r;
        } else {
            st = MC_ERR_NO_MEMORY;
        }
    }
    mc_master_retired_free(retired);
    return st;
}

static void put_opts(const McRpc__ReplicateConfig *c, mc_master_put_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    if (!c)
        return;
    o->replica_num = c->replica_num;
    o->soft_pin = c->with_soft_pin;
    o->soft_pin_ttl_ms = c->soft_pin_ttl_ms;
    o->soft_pin_disable = c->soft_pin_disable;
    o->hard_pin = c->with_hard_pin;
    o->preferred_segment = c->preferred_segment;
    o->preferred_segments = (const char *const *)c->preferred_segments;
    o->n_preferred_segments = c->n_preferred_segments;
}

/* Hashes and prefetches a batch of keys (arena memory); *now_p: the batch's clock reading
 * for the _h calls (mc_master_lookup_prepare). NULL on allocation failure. */
static uint32_t *prepare_batch(mc_master_t *m, mc_rpc_call_t *call,
                               const ProtobufCBinaryData *keys, size_t n, const char ***keys_p,
                               size_t **klens_p, uint64_t *now_p)
{
    const char **k = ALLOC_N(call, const char *, n);
    size_t *kl = ALLOC_N(call, size_t, n);
    uint32_t *h = ALLOC_N(call, uint32_t, n);
    if (!k || !kl || !h)
        return NULL;
    for (size_t i = 0; i < n; i++)
        k[i] = wkey(call, keys[i], &kl[i]);
    *now_p = mc_master_lookup_prepare(m, k, kl, n, h);
    *keys_p = k;
    *klens_p = kl;
    return h;
}

/* ---------------------------------------------------------------- put / upsert */

/* A PutStart / BatchPutStart that placed every key and replaced no value (create-once, or
 * an upsert of a key that had none) answers light (mc_rpc_call_t.light): it acknowledges
 * nothing, so with HA it waits only for the changes of free or mounted space in flight
 * (master/ha.h), not for every change in flight, unless its allocation is logged (PUT_START:
 * --ha_commit=standbys with --ha_log_put_starts, the default) outside the put pools (a key
 * placed in a block that was not a ready pool block; an upsert takes no pool block), when it
 * waits like any acknowledging reply. An upsert that retired a value and answers with a
 * failed key are not light. */

static mc_status_t do_put_start(mc_master_t *m, mc_rpc_call_t *call, ProtobufCBinaryData cid,
                                ProtobufCBinaryData wire_key, uint64_t size, const McRpc__ReplicateConfig *cfg,
                                bool upsert, McRpc__PutStartResponse *r, bool *light_p)
{
    mc_rpc__put_start_response__init(r);
    if (!cid_ok(cid)) {
        r->status = MC_ERR_INVALID_PARAMS;
        return MC_OK;
    }
    mc_master_put_opts_t o;
    put_opts(cfg, &o);
    mc_master_replica_t reps[MC_MASTER_MAX_REPLICAS];
    mc_master_retired_t retired = {.max = MC_MASTER_MAX_REPLICAS};
    uint32_t n = 0;
    size_t klen;
    const char *key = wkey(call, wire_key, &klen);
    r->status = mc_master_put_start_ex(m, cid.data, key, klen, size, &o, upsert, reps, &n,
                                       &retired, light_p);
    /* also on failure: an upsert retires the old value before placing */
    mc_status_t st = retired_out(call, &retired, &r->retired);
    if (st == MC_OK && r->status == MC_OK) {
        r->replicas = reps_out(call->arena, reps, n);
        if (!r->replicas)
            return MC_ERR_NO_MEMORY;
        r->n_replicas = n;
    }
    return st;
}

static mc_status_t h_put_start(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                               ProtobufCMessage **resp_p)
{
    const McRpc__PutStartRequest *q = (const void *)req;
    McRpc__PutStartResponse *r = ALLOC(call, McRpc__PutStartResponse);
    if (!r)
        return MC_ERR_NO_MEMORY;
    bool light = false;
    mc_status_t st = do_put_start(ctx, call, q->client_id, q->key, q->value_size, q->config,
                                  call->opcode == MC_OP_UPSERT_START, r, &light);
    *resp_p = &r->base;
    call->light = r->status == MC_OK && light;
    return st;
}

static mc_status_t h_batch_put_start(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                     ProtobufCMessage **resp_p)
{
    const McRpc__BatchPutStartRequest *q = (const void *)req;
    McRpc__BatchPutStartResponse *r = ALLOC(call, McRpc__BatchPutStartResponse);
    if (!r)
        return MC_ERR_NO_MEMORY;
    mc_rpc__batch_put_start_response__init(r);
    *resp_p = &r->base;
    if (!batch_ok(q->n_keys)) {
        r->status = MC_ERR_TOO_LARGE;
        return MC_OK;
    }
    if (q->n_value_sizes != q->n_keys) {
        r->status = MC_ERR_INVALID_PARAMS;
        return MC_OK;
    }
    r->results = ALLOC_N(call, McRpc__PutStartResponse *, q->n_keys);
    McRpc__PutStartResponse *items = ALLOC_N(call, McRpc__PutStartResponse, q->n_keys);
    if (!r->results || !items)
        return MC_ERR_NO_MEMORY;
    bool upsert = call->opcode == MC_OP_BATCH_UPSERT_START, light_all = true;
    for (size_t i = 0; i < q->n_keys; i++) {
        bool light = false;
        mc_status_t st = do_put_start(ctx, call, q->client_id, q->keys[i], q->value_sizes[i],
                                      q->config, upsert, &items[i], &light);
        if (st != MC_OK)
            return st;
        r->results[i] = &items[i];
        light_all &= items[i].status == MC_OK && light;
    }
    r->n_results = q->n_keys;
    call->light = light_all;
    return MC_OK;
}

static mc_status_t h_put_end(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                             ProtobufCMessage **resp_p)
{
    const McRpc__PutEndRequest *q = (const void *)req;
    size_t kl;
    const char *k = wkey(call, q->key, &kl);
    int32_t st = cid_ok(q->client_id) ? mc_master_put_end(ctx, q->client_id.data, k, kl, q->checksum)
                                      : MC_ERR_INVALID_PARAMS;
    return status_resp(call, st, resp_p);
}

static mc_status_t batch_status(mc_rpc_call_t *call, size_t n, McRpc__BatchStatusResponse **r_p,
                                ProtobufCMessage **resp_p)
{
    McRpc__BatchStatusResponse *r = ALLOC(call, McRpc__BatchStatusResponse);
    if (!r)
        return MC_ERR_NO_MEMORY;
    mc_rpc__batch_status_response__init(r);
    *resp_p = &r->base;
    *r_p = r;
    if (!batch_ok(n)) {
        r->status = MC_ERR_TOO_LARGE;
        return MC_OK;
    }
    r->statuses = ALLOC_N(call, int32_t, n);
    if (!r->statuses)
        return MC_ERR_NO_MEMORY;
    r->n_statuses = n;
    return MC_OK;
}

static mc_status_t h_batch_put_end(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                   ProtobufCMessage **resp_p)
{
    const McRpc__BatchPutEndRequest *q = (const void *)req;
    McRpc__BatchStatusResponse *r;
    mc_status_t st = batch_status(call, q->n_keys, &r, resp_p);
    if (st != MC_OK || r->status)
        return st;
    if (q->n_checksums != q->n_keys || !cid_ok(q->client_id)) {
        r->status = MC_ERR_INVALID_PARAMS;
        r->n_statuses = 0;
        return MC_OK;
    }
    for (size_t i = 0; i < q->n_keys; i++) {
        size_t kl;
        const char *k = wkey(call, q->keys[i], &kl);
        r->statuses[i] = mc_master_put_end(ctx, q->client_id.data, k, kl, q->checksums[i]);
    }
    return MC_OK;
}

static mc_status_t h_put_revoke(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                ProtobufCMessage **resp_p)
{
    const McRpc__KeyRequest *q = (const void *)req;
    size_t kl;
    const char *k = wkey(call, q->key, &kl);
    int32_t st = cid_ok(q->client_id) ? mc_master_put_revoke(ctx, q->client_id.data, k, kl)
                                      : MC_ERR_INVALID_PARAMS;
    return status_resp(call, st, resp_p);
}

static mc_status_t h_batch_key(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                               ProtobufCMessage **resp_p)
{
    const McRpc__BatchKeyRequest *q = (const void *)req;
    McRpc__BatchStatusResponse *r;
    mc_status_t st = batch_status(call, q->n_keys, &r, resp_p);
    if (st != MC_OK || r->status)
        return st;
    mc_master_t *m = ctx;
    const char **ks = NULL;
    size_t *kls = NULL;
    uint32_t *hs = NULL;
    uint64_t now = 0;
    mc_master_retired_t retired = {.max = MC_RPC_MAX_RETIRED};
    if (call->opcode == MC_OP_BATCH_EXIST_KEY &&
        !(hs = prepare_batch(m, call, q->keys, q->n_keys, &ks, &kls, &now)))
        return MC_ERR_NO_MEMORY;
    for (size_t i = 0; i < q->n_keys; i++) {
        size_t kl = kls ? kls[i] : 0;
        const char *k = ks ? ks[i] : wkey(call, q->keys[i], &kl);
        switch (call->opcode) {
        case MC_OP_BATCH_PUT_REVOKE:
        case MC_OP_BATCH_UPSERT_REVOKE:
            r->statuses[i] = cid_ok(q->client_id)
                                 ? mc_master_put_revoke(m, q->client_id.data, k, kl)
                                 : MC_ERR_INVALID_PARAMS;
            break;
        case MC_OP_BATCH_EXIST_KEY:
            r->statuses[i] = mc_master_exist_h(m, k, kl, hs[i], now);
            break;
        case MC_OP_BATCH_REMOVE:
            r->statuses[i] = mc_master_remove(m, k, kl, q->force, &retired);
            break;
        default:
            return MC_ERR_NOT_SUPPORTED;
        }
    }
    if (hs)
        call->unheld = mc_master_reads_settled(m, hs, q->n_keys);
    return retired_out(call, &retired, &r->retired);
}

/* BatchReplicaClear: one status per key (0 = cleared), mc_master_replica_clear. */
static mc_status_t h_batch_replica_clear(void *ctx, mc_rpc_call_t *call,
                                         const ProtobufCMessage *req, ProtobufCMessage **resp_p)
{
    const McRpc__BatchReplicaClearRequest *q = (const void *)req;
    McRpc__BatchStatusResponse *r;
    mc_status_t st = batch_status(call, q->n_keys, &r, resp_p);
    if (st != MC_OK || r->status)
        return st;
    if (!cid_ok(q->client_id)) {
        r->status = MC_ERR_INVALID_PARAMS;
        for (size_t i = 0; i < q->n_keys; i++)
            r->statuses[i] = MC_ERR_INVALID_PARAMS;
        return MC_OK;
    }
    for (size_t i = 0; i < q->n_keys; i++) {
        size_t kl;
        const char *k = wkey(call, q->keys[i], &kl);
        r->statuses[i] = mc_master_replica_clear(ctx, q->client_id.data, k, kl, q->segment_name);
    }
    return MC_OK;
}

/* ---------------------------------------------------------------- local-disk tier */

/* The storage-server calls name internal keys and hand out addresses in any tenant's values:
 * not for tenant-bound connections. */
static mc_status_t disk_peer(const mc_rpc_call_t *call, ProtobufCBinaryData cid)
{
    if (call->peer && call->peer->tenant[0])
        return MC_ERR_PERMISSION;
    return cid_ok(cid) ? MC_OK : MC_ERR_INVALID_PARAMS;
}

/* A raw internal key (bytes) checked for length: NULL (refused as INVALID_KEY) when empty or
 * too long. */
static const char *raw_key(ProtobufCBinaryData k, size_t *len_p)
{
    *len_p = k.len;
    return k.len && k.len <= MASTER_KEY_MAX ? (const char *)k.data : NULL;
}

static mc_status_t h_mount_local_disk(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                      ProtobufCMessage **resp_p)
{
    const McRpc__MountLocalDiskRequest *q = (const void *)req;
    mc_status_t st = disk_peer(call, q->client_id);
    if (st == MC_OK)
        st = call->opcode == MC_OP_MOUNT_LOCAL_DISK
                 ? mc_master_mount_local_disk(ctx, q->client_id.data, q->enable_offloading,
                                              q->transport_endpoint)
                 : mc_master_unmount_local_disk(ctx, q->client_id.data);
    return status_resp(call, st, resp_p);
}

static mc_status_t h_report_ssd_capacity(void *ctx, mc_rpc_call_t *call,
                                         const ProtobufCMessage *req, ProtobufCMessage **resp_p)
{
    const McRpc__ReportSsdCapacityRequest *q = (const void *)req;
    mc_status_t st = disk_peer(call, q->client_id);
    if (st == MC_OK)
        st = mc_master_report_ssd_capacity(ctx, q->client_id.data, q->capacity_bytes);
    return status_resp(call, st, resp_p);
}

static mc_status_t h_offload_heartbeat(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                       ProtobufCMessage **resp_p)
{
    const McRpc__OffloadHeartbeatRequest *q = (const void *)req;
    McRpc__OffloadHeartbeatResponse *r = ALLOC(call, McRpc__OffloadHeartbeatResponse);
    if (!r)
        return MC_ERR_NO_MEMORY;
    mc_rpc__offload_heartbeat_response__init(r);
    *resp_p = &r->base;
    mc_master_offload_tasks_t t = {0};
    mc_status_t st = disk_peer(call, q->client_id);
    if (st == MC_OK)
        st = mc_master_offload_heartbeat(ctx, q->client_id.data, q->enable_offloading, q->max, &t);
    r->status = st;
    if (st != MC_OK || t.n == 0)
        return MC_OK;
    McRpc__OffloadTaskItem **arr = ALLOC_N(call, McRpc__OffloadTaskItem *, t.n);
    McRpc__OffloadTaskItem *it = ALLOC_N(call, McRpc__OffloadTaskItem, t.n);
    size_t kbytes = 0;
    for (uint32_t i = 0; i < t.n; i++)
        kbytes += t.items[i].klen;
    char *keys = ALLOC_N(call, char, kbytes);
    if (!arr || !it || !keys) {
        mc_master_offload_tasks_free(&t); /* the tasks are lost: the keys stay in memory only */
        return MC_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < t.n; i++) {
        const mc_master_offload_task_t *x = &t.items[i];
        mc_rpc__offload_task_item__init(&it[i]);
        memcpy(keys, x->key, x->klen);
        it[i].key.data = (uint8_t *)keys;
        it[i].key.len = x->klen;
        keys += x->klen;
        it[i].size = x->size;
        it[i].checksum = x->checksum;
        it[i].segment_name = (char *)(x->segment_name ? x->segment_name : "");
        it[i].buffer_address = x->addr;
        it[i].remove = x->remove;
        it[i].promote = x->promote;
        arr[i] = &it[i];
    }
    r->tasks = arr;
    r->n_tasks = t.n;
    mc_master_offload_tasks_free(&t);
    return MC_OK;
}

static mc_status_t h_notify_offload_success(void *ctx, mc_rpc_call_t *call,
                                            const ProtobufCMessage *req, ProtobufCMessage **resp_p)
{
    const McRpc__NotifyOffloadSuccessRequest *q = (const void *)req;
    McRpc__BatchStatusResponse *r;
    mc_status_t st = batch_status(call, q->n_objects, &r, resp_p);
    if (st != MC_OK || r->status)
        return st;
    st = disk_peer(call, q->client_id);
    for (size_t i = 0; i < q->n_objects; i++) {
        const McRpc__StorageObjectMetadata *o = q->objects[i];
        size_t kl;
        const char *k = raw_key(o->key, &kl);
        r->statuses[i] = st != MC_OK ? st
                         : !k        ? MC_ERR_INVALID_KEY
                                     : mc_master_notify_offload_success(ctx, q->client_id.data, k,
                                                                        kl, o->data_size,
                                                                        o->checksum, q->recovered);
    }
    /* the end of a re-registration: the copies it did not name are gone from the disk */
    if (st == MC_OK && q->recovered && q->recovery_done)
        st = mc_master_disk_reregistered(ctx, q->client_id.data, NULL);
    r->status = st;
    return MC_OK;
}

static mc_status_t h_batch_evict_disk_replica(void *ctx, mc_rpc_call_t *call,
                                              const ProtobufCMessage *req,
                                              ProtobufCMessage **resp_p)
{
    const McRpc__BatchEvictDiskReplicaRequest *q = (const void *)req;
    McRpc__BatchStatusResponse *r;
    mc_status_t st = batch_status(call, q->n_keys, &r, resp_p);
    if (st != MC_OK || r->status)
        return st;
    st = disk_peer(call, q->client_id);
    if (st == MC_OK && q->replica_type != MC_RPC__REPLICA_TYPE__LOCAL_DISK)
        st = MC_ERR_INVALID_PARAMS;
    for (size_t i = 0; i < q->n_keys; i++) {
        size_t kl;
        const char *k = raw_key(q->keys[i], &kl);
        r->statuses[i] = st != MC_OK ? st
                         : !k        ? MC_ERR_INVALID_KEY
                                     : mc_master_evict_disk_replica(ctx, q->client_id.data, k, kl);
    }
    r->status = st;
    return MC_OK;
}

static mc_status_t h_promotion(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                               ProtobufCMessage **resp_p)
{
    const McRpc__PromotionRequest *q = (const void *)req;
    mc_status_t st = disk_peer(call, q->client_id);
    size_t kl;
    const char *k = raw_key(q->key, &kl);
    if (st == MC_OK && !k)
        st = MC_ERR_INVALID_KEY;
    if (call->opcode != MC_OP_PROMOTION_ALLOC_START) {
        if (st == MC_OK)
            st = mc_master_promotion_end(ctx, q->client_id.data, k, kl,
                                         call->opcode == MC_OP_NOTIFY_PROMOTION_SUCCESS);
        return status_resp(call, st, resp_p);
    }
    McRpc__PutStartResponse *r = ALLOC(call, McRpc__PutStartResponse);
    if (!r)
        return MC_ERR_NO_MEMORY;
    mc_rpc__put_start_response__init(r);
    *resp_p = &r->base;
    mc_master_replica_t reps[MC_MASTER_MAX_REPLICAS];
    uint32_t n = 0;
    if (st == MC_OK)
        st = mc_master_promotion_start(ctx, q->client_id.data, k, kl, reps, &n);
    r->status = st;
    if (st == MC_OK) {
        if (!(r->replicas = reps_out(call->arena, reps, n)))
            return MC_ERR_NO_MEMORY;
        r->n_replicas = n;
    }
    return MC_OK;
}

/* ---------------------------------------------------------------- replica tasks */

/* CreateCopyTask / CreateMoveTask: the key is the caller's tenant's (wkey). */
static mc_status_t h_create_task(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                 ProtobufCMessage **resp_p)
{
    McRpc__TaskIdResponse *r = ALLOC(call, McRpc__TaskIdResponse);
    if (!r)
        return MC_ERR_NO_MEMORY;
    mc_rpc__task_id_response__init(r);
    *resp_p = &r->base;
    uint64_t id[2] = {0, 0};
    size_t kl;
    const char *k;
    if (call->opcode == MC_OP_CREATE_COPY_TASK) {
        const McRpc__CreateCopyTaskRequest *q = (const void *)req;
        k = wkey(call, q->key, &kl);
        r->status = !k                                        ? MC_ERR_INVALID_KEY
                    : q->n_targets > MC_MASTER_MAX_REPLICAS ? MC_ERR_INVALID_PARAMS
                    : mc_master_create_copy_task(ctx, k, kl, (const char *const *)q->targets,
                                                 q->n_targets, id);
    } else {
        const McRpc__CreateMoveTaskRequest *q = (const void *)req;
        k = wkey(call, q->key, &kl);
        r->status = !k ? MC_ERR_INVALID_KEY
                       : mc_master_create_move_task(ctx, k, kl, q->source, q->target, id);
    }
    r->id_high = id[0];
    r->id_low = id[1];
    return MC_OK;
}

/* QueryTask: another tenant's task reads as unknown. */
static mc_status_t h_query_task(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                ProtobufCMessage **resp_p)
{
    const McRpc__QueryTaskRequest *q = (const void *)req;
    McRpc__QueryTaskResponse *r = ALLOC(call, McRpc__QueryTaskResponse);
    uint8_t *cid = mc_rpc_arena_alloc(call->arena, 16);
    if (!r || !cid)
        return MC_ERR_NO_MEMORY;
    mc_rpc__query_task_response__init(r);
    *resp_p = &r->base;
    uint64_t id[2] = {q->id_high, q->id_low};
    mc_master_task_info_t ti;
    r->status = mc_master_query_task(ctx, id, &ti);
    if (r->status == MC_OK && !mc_tenant_scope_key(call->scope, ti.key, ti.klen, NULL, NULL))
        r->status = MC_ERR_TASK_NOT_FOUND;
    if (r->status != MC_OK)
        return MC_OK;
    r->id_high = ti.id[0];
    r->id_low = ti.id[1];
    r->type = (McRpc__TaskType)ti.type;
    r->task_status = (McRpc__TaskStatus)ti.status;
    r->created_at_ms_epoch = ti.created_ms;
    r->last_updated_at_ms_epoch = ti.updated_ms;
    memcpy(cid, ti.client, 16);
    r->assigned_client = (ProtobufCBinaryData){.len = 16, .data = cid};
    r->message = (char *)ti.message; /* borrowed until the next core call: packed before */
    return MC_OK;
}

/* FetchTasks: the calling storage server's tasks (strings borrowed from the task table). */
static mc_status_t h_fetch_tasks(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                 ProtobufCMessage **resp_p)
{
    const McRpc__FetchTasksRequest *q = (const void *)req;
    McRpc__FetchTasksResponse *r = ALLOC(call, McRpc__FetchTasksResponse);
    mc_master_task_info_t *ti = ALLOC_N(call, mc_master_task_info_t, MC_MASTER_TASK_FETCH_MAX);
    if (!r || !ti)
        return MC_ERR_NO_MEMORY;
    mc_rpc__fetch_tasks_response__init(r);
    *resp_p = &r->base;
    uint32_t n = 0;
    r->status = disk_peer(call, q->client_id);
    if (r->status == MC_OK)
        r->status = mc_master_fetch_tasks(ctx, q->client_id.data, q->max, ti, &n);
    if (r->status != MC_OK || n == 0)
        return MC_OK;
    McRpc__TaskAssignment **arr = ALLOC_N(call, McRpc__TaskAssignment *, n);
    McRpc__TaskAssignment *a = ALLOC_N(call, McRpc__TaskAssignment, n);
    if (!arr || !a)
        return MC_ERR_NO_MEMORY;
    for (uint32_t i = 0; i < n; i++) {
        mc_rpc__task_assignment__init(&a[i]);
        a[i].id_high = ti[i].id[0];
        a[i].id_low = ti[i].id[1];
        a[i].type = (McRpc__TaskType)ti[i].type;
        a[i].key = (ProtobufCBinaryData){.len = ti[i].klen, .data = (uint8_t *)ti[i].key};
        a[i].source = (char *)ti[i].source;
        a[i].targets = (char **)ti[i].targets;
        a[i].n_targets = ti[i].n_targets;
        arr[i] = &a[i];
    }
    r->tasks = arr;
    r->n_tasks = n;
    return MC_OK;
}

/* CopyStart / MoveStart and their End / Revoke. */
static mc_status_t h_task_step(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                               ProtobufCMessage **resp_p)
{
    const McRpc__TaskStepRequest *q = (const void *)req;
    uint16_t op = call->opcode;
    uint64_t id[2] = {q->id_high, q->id_low};
    bool move = op == MC_OP_MOVE_START || op == MC_OP_MOVE_END || op == MC_OP_MOVE_REVOKE;
    int type = move ? MC_MASTER_TASK_MOVE : MC_MASTER_TASK_COPY;
    mc_status_t st = disk_peer(call, q->client_id);
    if (op != MC_OP_COPY_START && op != MC_OP_MOVE_START) {
        if (st == MC_OK)
            st = mc_master_task_end(ctx, q->client_id.data, id, type,
                                    op == MC_OP_COPY_END || op == MC_OP_MOVE_END);
        return status_resp(call, st, resp_p);
    }
    McRpc__TaskStartResponse *r = ALLOC(call, McRpc__TaskStartResponse);
    if (!r)
        return MC_ERR_NO_MEMORY;
    mc_rpc__task_start_response__init(r);
    *resp_p = &r->base;
    mc_master_replica_t src, reps[MC_MASTER_MAX_REPLICAS];
    uint32_t n = 0;
    if (st == MC_OK)
        st = mc_master_task_start(ctx, q->client_id.data, id, type, &src, reps, &n, &r->size,
                                  &r->checksum);
    r->status = st;
    if (st == MC_OK) {
        McRpc__ReplicaDesc **s1 = reps_out(call->arena, &src, 1);
        if (!s1 || !(r->targets = reps_out(call->arena, reps, n)))
            return MC_ERR_NO_MEMORY;
        r->source = s1[0];
        r->n_targets = n;
    }
    return MC_OK;
}

static mc_status_t h_mark_task(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                               ProtobufCMessage **resp_p)
{
    const McRpc__MarkTaskRequest *q = (const void *)req;
    uint64_t id[2] = {q->id_high, q->id_low};
    mc_status_t st = disk_peer(call, q->client_id);
    if (st == MC_OK)
        st = mc_master_task_complete(ctx, q->client_id.data, id, (int)q->task_status, q->message);
    return status_resp(call, st, resp_p);
}

/* ---------------------------------------------------------------- get */

/* GetReplicaList's answer for one key (grants the read lease; hash and now from
 * mc_master_lookup_prepare), built in arena a. Also used for the placements of the placement
 * feed (poll_resp). */
static mc_status_t fill_replica_list(mc_master_t *m, mc_rpc_arena_t *a, const char *key,
                                     size_t klen, uint32_t hash, uint64_t now,
                                     McRpc__ReplicaListResponse *r)
{
    mc_rpc__replica_list_response__init(r);
    mc_master_replica_t reps[MC_MASTER_MAX_REPLICAS];
    uint32_t n = 0;
    r->status = mc_master_get_replicas_h(m, key, klen, hash, now, reps, &n, &r->size, &r->checksum);
    if (r->status == MC_OK) {
        r->replicas = reps_out(a, reps, n);
        if (!r->replicas)
            return MC_ERR_NO_MEMORY;
        r->n_replicas = n;
        r->lease_ttl_ms = mc_master_lease_ttl_ms(m);
    }
    return MC_OK;
}

static mc_status_t h_get_replica_list(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                      ProtobufCMessage **resp_p)
{
    const McRpc__KeyRequest *q = (const void *)req;
    McRpc__ReplicaListResponse *r = ALLOC(call, McRpc__ReplicaListResponse);
    if (!r)
        return MC_ERR_NO_MEMORY;
    *resp_p = &r->base;
    size_t kl;
    const char *k = wkey(call, q->key, &kl);
    uint32_t h = 0;
    uint64_t now = mc_master_lookup_prepare(ctx, &k, &kl, 1, &h);
    call->unheld = mc_master_reads_settled(ctx, &h, 1);
    return fill_replica_list(ctx, call->arena, k, kl, h, now, r);
}

static mc_status_t h_batch_get_replica_list(void *ctx, mc_rpc_call_t *call,
                                            const ProtobufCMessage *req, ProtobufCMessage **resp_p)
{
    const McRpc__BatchKeyRequest *q = (const void *)req;
    McRpc__BatchReplicaListResponse *r = ALLOC(call, McRpc__BatchReplicaListResponse);
    if (!r)
        return MC_ERR_NO_MEMORY;
    mc_rpc__batch_replica_list_response__init(r);
    *resp_p = &r->base;
    if (!batch_ok(q->n_keys)) {
        r->status = MC_ERR_TOO_LARGE;
        return MC_OK;
    }
    r->results = ALLOC_N(call, McRpc__ReplicaListResponse *, q->n_keys);
    McRpc__ReplicaListResponse *items = ALLOC_N(call, McRpc__ReplicaListResponse, q->n_keys);
    const char **k;
    size_t *kl;
    uint64_t now;
    uint32_t *h = prepare_batch(ctx, call, q->keys, q->n_keys, &k, &kl, &now);
    if (!r->results || !items || !h)
        return MC_ERR_NO_MEMORY;
    for (size_t i = 0; i < q->n_keys; i++) {
        mc_status_t st = fill_replica_list(ctx, call->arena, k[i], kl[i], h[i], now, &items[i]);
        if (st != MC_OK)
            return st;
        r->results[i] = &items[i];
    }
    r->n_results = q->n_keys;
    call->unheld = mc_master_reads_settled(ctx, h, q->n_keys);
    return MC_OK;
}

static mc_status_t h_exist_key(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                               ProtobufCMessage **resp_p)
{
    const McRpc__KeyRequest *q = (const void *)req;
    size_t kl;
    const char *k = wkey(call, q->key, &kl);
    uint32_t h = 0;
    uint64_t now = mc_master_lookup_prepare(ctx, &k, &kl, 1, &h);
    call->unheld = mc_master_reads_settled(ctx, &h, 1);
    return status_resp(call, mc_master_exist_h(ctx, k, kl, h, now), resp_p);
}

static mc_status_t h_get_size(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                              ProtobufCMessage **resp_p)
{
    const McRpc__KeyRequest *q = (const void *)req;
    McRpc__GetSizeResponse *r = ALLOC(call, McRpc__GetSizeResponse);
    if (!r)
        return MC_ERR_NO_MEMORY;
    mc_rpc__get_size_response__init(r);
    size_t kl;
    const char *k = wkey(call, q->key, &kl);
    uint32_t h = 0;
    (void)mc_master_lookup_prepare(ctx, &k, &kl, 1, &h);
    call->unheld = mc_master_reads_settled(ctx, &h, 1);
    r->status = mc_master_get_size(ctx, k, kl, &r->size);
    *resp_p = &r->base;
    return MC_OK;
}

/* ---------------------------------------------------------------- remove */

static mc_status_t h_remove(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                            ProtobufCMessage **resp_p)
{
    const McRpc__KeyRequest *q = (const void *)req;
    mc_master_retired_t retired = {.max = MC_MASTER_MAX_REPLICAS};
    size_t kl;
    const char *k = wkey(call, q->key, &kl);
    int32_t removed = mc_master_remove(ctx, k, kl, q->force, &retired);
    mc_status_t st = status_resp(call, removed, resp_p);
    if (st != MC_OK) {
        mc_master_retired_free(&retired);
        return st;
    }
    return retired_out(call, &retired, &((McRpc__StatusResponse *)*resp_p)->retired);
}

/* The answer to RemoveByRegex / RemoveAll (frees retired's list). */
static mc_status_t count_resp(mc_rpc_call_t *call, int32_t st, uint64_t n,
                              mc_master_retired_t *retired, ProtobufCMessage **resp_p)
{
    McRpc__CountResponse *r = ALLOC(call, McRpc__CountResponse);
    if (!r) {
        mc_master_retired_free(retired);
        return MC_ERR_NO_MEMORY;
    }
    mc_rpc__count_response__init(r);
    r->status = st;
    r->count = n;
    *resp_p = &r->base;
    return retired_out(call, retired, &r->retired);
}

static mc_status_t h_remove_by_regex(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                     ProtobufCMessage **resp_p)
{
    const McRpc__RemoveByRegexRequest *q = (const void *)req;
    uint64_t n = 0;
    mc_master_retired_t retired = {.max = MC_RPC_MAX_RETIRED};
    int32_t st = mc_master_remove_scoped(ctx, call->scope, q->pattern, q->force, &n, &retired);
    return count_resp(call, st, n, &retired, resp_p);
}

static mc_status_t h_release_retired(void *ctx, mc_rpc_call_t *call,
                                     const ProtobufCMessage *req, ProtobufCMessage **resp_p)
{
    const McRpc__ReleaseRetiredRequest *q = (const void *)req;
    if (!batch_ok(q->n_tokens))
        return status_resp(call, MC_ERR_TOO_LARGE, resp_p);
    mc_master_release_retired(ctx, q->tokens, q->n_tokens);
    return status_resp(call, MC_OK, resp_p);
}

static mc_status_t h_remove_all(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                ProtobufCMessage **resp_p)
{
    const McRpc__RemoveAllRequest *q = (const void *)req;
    uint64_t n = 0;
    mc_master_retired_t retired = {.max = MC_RPC_MAX_RETIRED};
    int32_t st = mc_master_remove_scoped(ctx, call->scope, NULL, q->force, &n, &retired);
    return count_resp(call, st, n, &retired, resp_p);
}

/* ---------------------------------------------------------------- segments, clients */

static int seg_info(const McRpc__SegmentInfo *s, mc_master_segment_info_t *o)
{
    if (!s || s->segment_uuid.len != 16)
        return -1;
    memset(o, 0, sizeof(*o));
    o->name = s->name;
    o->base = s->base_addr;
    o->size = s->size;
    o->host_label = s->host_label;
    o->te_endpoint = s->te_endpoint;
    o->page_size = s->page_size;
    memcpy(o->uuid, s->segment_uuid.data, 16);
    return 0;
}

static mc_status_t h_mount(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                           ProtobufCMessage **resp_p)
{
    const McRpc__MountSegmentRequest *q = (const void *)req;
    mc_master_segment_info_t si;
    int32_t st = MC_ERR_INVALID_PARAMS;
    if (cid_ok(q->client_id) && seg_info(q->segment, &si) == 0)
        st = mc_master_mount(ctx, q->client_id.data, &si, false);
    return status_resp(call, st, resp_p);
}

static mc_status_t h_remount(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                             ProtobufCMessage **resp_p)
{
    const McRpc__ReMountSegmentRequest *q = (const void *)req;
    McRpc__BatchStatusResponse *r;
    mc_status_t st = batch_status(call, q->n_segments, &r, resp_p);
    if (st != MC_OK || r->status)
        return st;
    for (size_t i = 0; i < q->n_segments; i++) {
        mc_master_segment_info_t si;
        r->statuses[i] = MC_ERR_INVALID_PARAMS;
        if (cid_ok(q->client_id) && seg_info(q->segments[i], &si) == 0)
            r->statuses[i] = mc_master_mount(ctx, q->client_id.data, &si, true);
        if (r->statuses[i] != MC_OK)
            r->status = r->statuses[i];
    }
    return MC_OK;
}

static mc_status_t h_unmount(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                             ProtobufCMessage **resp_p)
{
    const McRpc__UnmountSegmentRequest *q = (const void *)req;
    int32_t st = cid_ok(q->client_id)
                     ? mc_master_unmount(ctx, q->client_id.data, q->segment_name,
                                         call->opcode == MC_OP_GRACEFUL_UNMOUNT_SEGMENT)
                     : MC_ERR_INVALID_PARAMS;
    return status_resp(call, st, resp_p);
}

static mc_status_t h_ping(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                          ProtobufCMessage **resp_p)
{
    const McRpc__PingRequest *q = (const void *)req;
    McRpc__PingResponse *r = ALLOC(call, McRpc__PingResponse);
    if (!r)
        return MC_ERR_NO_MEMORY;
    mc_rpc__ping_response__init(r);
    *resp_p = &r->base;
    if (!cid_ok(q->client_id)) {
        r->status = MC_ERR_INVALID_PARAMS;
        return MC_OK;
    }
    bool need = false;
    r->status = mc_master_ping(ctx, q->client_id.data, &need);
    r->client_status = need ? MC_RPC__CLIENT_STATUS__CLIENT_NEED_REMOUNT
                            : MC_RPC__CLIENT_STATUS__CLIENT_OK;
    mc_master_view(ctx, &r->view_version, &r->master_epoch);
    mc_master_t *m = ctx;
    r->client_ttl_ms = m->cfg.client_ttl_ms;
    r->lease_ttl_ms = m->cfg.default_kv_lease_ttl_ms;
    r->ha_view_version = m->cfg.ha_view_version;
    r->tasks_pending = r->status == MC_OK && mc_master_tasks_pending(m, q->client_id.data);
    return MC_OK;
}

static mc_status_t h_service_ready(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                   ProtobufCMessage **resp_p)
{
    (void)ctx;
    (void)req;
    return status_resp(call, MC_OK, resp_p);
}

static mc_status_t h_query_segment(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                   ProtobufCMessage **resp_p)
{
    const McRpc__QuerySegmentStatusRequest *q = (const void *)req;
    McRpc__QuerySegmentStatusResponse *r = ALLOC(call, McRpc__QuerySegmentStatusResponse);
    if (!r)
        return MC_ERR_NO_MEMORY;
    mc_rpc__query_segment_status_response__init(r);
    mc_master_segment_status_t s;
    r->status = mc_master_query_segment(ctx, q->segment_name, &s);
    r->segment_status = (McRpc__SegmentStatus)s.state;
    r->capacity = s.capacity;
    r->used = s.used;
    r->objects = s.replicas;
    *resp_p = &r->base;
    return MC_OK;
}


/* ---------------------------------------------------------------- object events */

#define EV_MAX_BATCH 4096u     /* events per PollEvents answer, objects per ListObjects page */
#define EV_MAX_WAIT_MS 1000u   /* long-poll cap */
#define EV_MAX_WAITERS 1024u   /* parked polls; beyond, polls are answered at once */
#define LIST_MAX_BYTES (16u << 20) /* soft cap on a ListObjects page */

/* A parked PollEvents call (the request is copied: the call arena does not survive). */
typedef struct ev_waiter {
    mc_rpc_server_t *srv;
    uint64_t conn_id, req_id;
    uint64_t from_seq, epoch, deadline_ms;
    uint32_t max;
    uint16_t opcode;
    char *prefix;          /* placement feed's placement_prefix (owned); NULL = not a feed */
    size_t prefix_len;
    mc_tenant_scope_t scope; /* the poller's tenant */
    const mc_auth_t *ring;   /* a tenant-bound poller's grant keyring (srv's); NULL = none */
    char tenant[MC_AUTH_TENANT_MAX + 1]; /* its tenant, the one its grants name */
} ev_waiter_t;

typedef struct ev_waiters {
    ev_waiter_t *w;
    size_t n, cap;
    mc_rpc_arena_t arena; /* answers built by the cron */
} ev_waiters_t;

/* What a poll asks for (from the request, or from a parked waiter). */
typedef struct poll_args {
    uint64_t from, epoch;
    uint32_t max;
    const char *prefix; /* placements for COMMITTED events under it; NULL = none asked */
    size_t prefix_len;
    const mc_tenant_scope_t *scope; /* the poller's tenant: other tenants' events are blanked */
    /* A tenant-bound poller (grant_ring): the placements go out with read grants for `tenant`
     * signed with ring (feed_grants); NULL = none needed or none can be made. */
    const mc_auth_t *ring;
    const char *tenant;
} poll_args_t;

static const mc_auth_t *grant_ring(const mc_rpc_call_t *call);
static mc_status_t feed_grants(mc_master_t *m, mc_rpc_arena_t *a, const poll_args_t *pa,
                               uint64_t wall0, McRpc__PollEventsResponse *r);

/* The placement of a COMMITTED event for the feed: the object's replicas now and a read lease
 * (fill_replica_list, as GetReplicaList); NULL when it is not readable any more. */
static McRpc__ReplicaListResponse *ev_placement(mc_master_t *m, mc_rpc_arena_t *a,
                                                const mc_master_event_t *ev, mc_status_t *st_p)
{
    McRpc__ReplicaListResponse *pl = mc_rpc_arena_calloc(a, 1, sizeof(*pl));
    if (!pl) {
        *st_p = MC_ERR_NO_MEMORY;
        return NULL;
    }
    uint32_t h = 0;
    size_t kl = ev->klen;
    uint64_t now = mc_master_lookup_prepare(m, &ev->key, &kl, 1, &h);
    *st_p = fill_replica_list(m, a, ev->key, kl, h, now, pl);
    return *st_p == MC_OK && pl->status == MC_OK ? pl : NULL;
}

/* ukey / ulen: ev's key as its tenant's user sees it. */
static bool ev_wants_placement(const poll_args_t *pa, const mc_master_event_t *ev,
                               const char *ukey, size_t ulen, const mc_master_event_t *prev)
{
    if (!pa->prefix || ev->kind != MC_MASTER_EV_COMMITTED || ulen < pa->prefix_len ||
        memcmp(ukey, pa->prefix, pa->prefix_len) != 0)
        return false;
    /* one placement per key for the replicas committed together (an event per replica) */
    return !(prev && prev->kind == ev->kind && prev->klen == ev->klen &&
             memcmp(prev->key, ev->key, ev->klen) == 0);
}

/* The answer to a poll, now (from the handler or, for a parked one, the cron). A tenant-bound
 * poller's placements are recorded as granted (mc_master_grants_begin) and their grants
 * expire from a wall time read before any lease of this answer was granted. */
static mc_status_t poll_resp(mc_master_t *m, mc_rpc_arena_t *a, const poll_args_t *pa,
                             McRpc__PollEventsResponse **r_p)
{
    uint64_t wall0 = pa->ring ? mc_wall_ms() : 0;
    McRpc__PollEventsResponse *r = mc_rpc_arena_calloc(a, 1, sizeof(*r));
    mc_master_event_t *ev = mc_rpc_arena_calloc(a, pa->max, sizeof(*ev));
    if (!r || !ev)
        return MC_ERR_NO_MEMORY;
    mc_rpc__poll_events_response__init(r);
    size_t n = 0;
    mc_master_events_info_t info;
    r->status = mc_master_events_read(m, pa->from, pa->epoch, pa->max, ev, &n, &info);
    r->epoch = info.epoch;
    r->first_available_seq = info.first_seq;
    r->next_seq = info.next_seq;
    r->gap = info.gap;
    if (n) {
        McRpc__KvEvent **arr = mc_rpc_arena_calloc(a, n, sizeof(*arr));
        McRpc__KvEvent *items = mc_rpc_arena_calloc(a, n, sizeof(*items));
        if (!arr || !items)
            return MC_ERR_NO_MEMORY;
        for (size_t i = 0; i < n; i++) {
            mc_rpc__kv_event__init(&items[i]);
            items[i].seq = ev[i].seq;
            arr[i] = &items[i];
            const char *ukey = "";
            size_t ulen = 0;
            if (ev[i].klen && !mc_tenant_scope_key(pa->scope, ev[i].key, ev[i].klen, &ukey, &ulen)) {
                /* another tenant's event: its seq only (KV_EVENT_UNDEFINED), so that the seqs
                 * stay consecutive */
                items[i].segment = items[i].host = "";
                continue;
            }
            items[i].kind = (McRpc__KvEventKind)ev[i].kind;
            items[i].key = mc_wire_key(ukey, ulen); /* points into the log */
            items[i].size = ev[i].size;
            items[i].segment = (char *)ev[i].segment;
            items[i].host = (char *)ev[i].host;
            if (ev_wants_placement(pa, &ev[i], ukey, ulen, i ? &ev[i - 1] : NULL)) {
                mc_status_t st = MC_OK;
                if (pa->ring)
                    mc_master_grants_begin(m);
                items[i].placement = ev_placement(m, a, &ev[i], &st);
                if (pa->ring)
                    mc_master_grants_end(m);
                if (st != MC_OK)
                    return st;
            }
        }
        r->events = arr;
        r->n_events = n;
        if (pa->ring) {
            mc_status_t st = feed_grants(m, a, pa, wall0, r);
            if (st != MC_OK)
                return st;
        }
    }
    *r_p = r;
    return MC_OK;
}

/* Cron hook: answers the parked polls that have something (events or a gap) or timed out.
 * Placement feeds too: answering them as soon as a put commits (after each loop iteration)
 * made single 4 KiB puts over tcp 1.7x slower here (p50 95 -> 170 us: two more wake-ups per
 * put on 2 vCPUs), at the tick they get their events in batches, at most a tick late.
 * shutdown: the server may be gone; just free. */
static void ev_waiters_run(mc_master_t *m, bool shutdown)
{
    ev_waiters_t *ws = m->ev_waiters;
    if (!ws)
        return;
    if (shutdown) {
        for (size_t i = 0; i < ws->n; i++)
            mc_free(ws->w[i].prefix);
        mc_rpc_arena_destroy(&ws->arena);
        mc_free(ws->w);
        mc_free(ws);
        m->ev_waiters = NULL;
        m->ev_waiters_fn = NULL;
        return;
    }
    uint64_t now = mc_now_ms();
    for (size_t i = 0; i < ws->n;) {
        ev_waiter_t *w = &ws->w[i];
        if (now < w->deadline_ms && !mc_master_events_pending(m, w->from_seq, w->epoch)) {
            i++;
            continue;
        }
        McRpc__PollEventsResponse *r = NULL;
        poll_args_t pa = {.from = w->from_seq, .epoch = w->epoch, .max = w->max,
                          .prefix = w->prefix, .prefix_len = w->prefix_len,
                          .scope = &w->scope, .ring = w->ring, .tenant = w->tenant};
        mc_status_t st = poll_resp(m, &ws->arena, &pa, &r);
        mc_rpc_server_reply(w->srv, w->conn_id, w->opcode, w->req_id, st,
                            st == MC_OK ? &r->base : NULL); /* a closed conn: forget it */
        mc_rpc_arena_reset(&ws->arena);
        mc_free(w->prefix);
        ws->w[i] = ws->w[--ws->n];
    }
}

/* Parks a poll; MC_OK when parked (the handler returns MC_RPC_DEFERRED). */
static mc_status_t ev_park(mc_master_t *m, mc_rpc_call_t *call, const poll_args_t *pa,
                           uint32_t wait_ms)
{
    ev_waiters_t *ws = m->ev_waiters;
    if (!ws) {
        ws = MC_NEW(ev_waiters_t);
        if (!ws)
            return MC_ERR_NO_MEMORY;
        mc_rpc_arena_init(&ws->arena, 64u << 10);
        m->ev_waiters = ws;
        m->ev_waiters_fn = ev_waiters_run;
    }
    if (ws->n >= EV_MAX_WAITERS)
        return MC_ERR_TOO_LARGE;
    if (mc_array_reserve(&ws->w, &ws->cap, ws->n + 1, 16) != MC_OK)
        return MC_ERR_NO_MEMORY;
    char *prefix = NULL;
    if (pa->prefix) {
        if (!(prefix = mc_malloc(pa->prefix_len + 1)))
            return MC_ERR_NO_MEMORY;
        memcpy(prefix, pa->prefix, pa->prefix_len);
        prefix[pa->prefix_len] = 0;
    }
    ws->w[ws->n++] = (ev_waiter_t){.srv = call->srv, .conn_id = call->conn_id,
                                   .req_id = call->req_id, .from_seq = pa->from,
                                   .epoch = pa->epoch, .deadline_ms = mc_now_ms() + wait_ms,
                                   .max = pa->max, .opcode = call->opcode, .prefix = prefix,
                                   .prefix_len = pa->prefix_len, .scope = *pa->scope,
                                   .ring = pa->ring};
    if (pa->ring) { /* a peer's tenant: at most MC_AUTH_TENANT_MAX bytes */
        char *t = ws->w[ws->n - 1].tenant;
        size_t tl = strnlen(pa->tenant, MC_AUTH_TENANT_MAX);
        memcpy(t, pa->tenant, tl);
        t[tl] = 0;
    }
    return MC_OK;
}

static mc_status_t h_poll_events(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                 ProtobufCMessage **resp_p)
{
    mc_master_t *m = ctx;
    const McRpc__PollEventsRequest *q = (const void *)req;
    poll_args_t pa = {
        .from = q->from_seq, .epoch = q->epoch,
        .max = q->max_events && q->max_events <= EV_MAX_BATCH ? q->max_events : EV_MAX_BATCH,
        .scope = call->scope};
    if (q->with_placements) {
        pa.prefix = q->placement_prefix.len ? (const char *)q->placement_prefix.data : "";
        pa.prefix_len = q->placement_prefix.len;
        if ((pa.ring = grant_ring(call)) != NULL)
            pa.tenant = call->peer->tenant;
    }
    /* a prefix is a key's first bytes: at most MC_RPC_MAX_KEY of them, no NUL ("" = all) */
    if (pa.prefix_len > MC_RPC_MAX_KEY || (pa.prefix_len && memchr(pa.prefix, 0, pa.prefix_len))) {
        McRpc__PollEventsResponse *r = ALLOC(call, McRpc__PollEventsResponse);
        if (!r)
            return MC_ERR_NO_MEMORY;
        mc_rpc__poll_events_response__init(r);
        r->status = MC_ERR_INVALID_KEY;
        *resp_p = &r->base;
        return MC_OK;
    }
    uint32_t wait = q->wait_ms < EV_MAX_WAIT_MS ? q->wait_ms : EV_MAX_WAIT_MS;
    /* call->srv is NULL when a handler is called directly (tests): no parking then */
    if (wait && call->srv && !mc_master_events_pending(m, pa.from, pa.epoch) &&
        ev_park(m, call, &pa, wait) == MC_OK)
        return MC_RPC_DEFERRED;
    McRpc__PollEventsResponse *r = NULL;
    mc_status_t st = poll_resp(m, call->arena, &pa, &r);
    if (st == MC_OK)
        *resp_p = &r->base;
    return st;
}

typedef struct list_ctx {
    mc_rpc_call_t *call;
    const mc_tenant_scope_t *scope; /* only its objects are listed, by their user keys */
    McRpc__ListedObject **objs;
    size_t n, cap, bytes;
} list_ctx_t;

static mc_status_t list_one(void *ctx, const char *key, size_t klen, uint64_t size,
                            const char *const *segs, const char *const *hosts, uint32_t n)
{
    list_ctx_t *lc = ctx;
    if (!mc_tenant_scope_key(lc->scope, key, klen, &key, &klen))
        return MC_OK;
    if (lc->n == lc->cap || lc->bytes > LIST_MAX_BYTES)
        return MC_ERR_TOO_LARGE; /* page full (the cursor still points before this bucket) */
    McRpc__ListedObject *o = ALLOC(lc->call, McRpc__ListedObject);
    char *k = mc_rpc_arena_alloc(lc->call->arena, klen ? klen : 1);
    char **sv = ALLOC_N(lc->call, char *, n);
    char **hv = ALLOC_N(lc->call, char *, n);
    if (!o || !k || !sv || !hv)
        return MC_ERR_NO_MEMORY;
    mc_rpc__listed_object__init(o);
    memcpy(k, key, klen); /* borrowed for the call only */
    o->key = mc_wire_key(k, klen);
    o->size = size;
    for (uint32_t i = 0; i < n; i++) {
        sv[i] = (char *)segs[i];
        hv[i] = (char *)hosts[i];
        lc->bytes += strlen(segs[i]) + strlen(hosts[i]) + 8;
    }
    o->segments = sv;
    o->n_segments = n;
    o->hosts = hv;
    o->n_hosts = n;
    lc->bytes += klen + 32;
    lc->objs[lc->n++] = o;
    return MC_OK;
}

static mc_status_t h_list_objects(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                  ProtobufCMessage **resp_p)
{
    mc_master_t *m = ctx;
    const McRpc__ListObjectsRequest *q = (const void *)req;
    uint32_t max = q->max && q->max <= EV_MAX_BATCH ? q->max : EV_MAX_BATCH;
    McRpc__ListObjectsResponse *r = ALLOC(call, McRpc__ListObjectsResponse);
    if (!r)
        return MC_ERR_NO_MEMORY;
    mc_rpc__list_objects_response__init(r);
    /* A bucket may hold a few objects: room for max plus a chain's worth beyond the soft cap;
     * when even that overflows, the page ends before the bucket that did not fit. */
    list_ctx_t lc = {.call = call, .scope = call->scope, .cap = (size_t)max + 64};
    lc.objs = ALLOC_N(call, McRpc__ListedObject *, lc.cap);
    if (!lc.objs)
        return MC_ERR_NO_MEMORY;
    uint64_t next = 0, seq = 0, epoch = 0;
    bool done = false;
    uint64_t cursor = q->cursor;
    mc_status_t st;
    for (;;) {
        st = mc_master_list_objects(m, cursor, max, list_one, &lc, &next, &done, &seq, &epoch);
        if (st != MC_ERR_TOO_LARGE)
            break;
        /* overflow inside a bucket: retry with a page that stops one bucket earlier */
        lc.bytes = 0;
        lc.n = 0;
        if (max <= 1) {
            st = MC_ERR_TOO_LARGE; /* one bucket over the byte cap: cannot page */
            break;
        }
        max /= 2;
    }
    r->status = st;
    r->epoch = epoch;
    r->seq = seq;
    r->next_cursor = next;
    r->done = done;
    if (st == MC_OK) {
        r->objects = lc.objs;
        r->n_objects = lc.n;
    }
    *resp_p = &r->base;
    return MC_OK;
}

static void impl_table(mc_rpc_handler_fn t[MC_OP_MAX])
{
    memset(t, 0, sizeof(mc_rpc_handler_fn) * MC_OP_MAX);
    t[MC_OP_PING] = h_ping;
    t[MC_OP_SERVICE_READY] = h_service_ready;
    t[MC_OP_MOUNT_SEGMENT] = h_mount;
    t[MC_OP_REMOUNT_SEGMENT] = h_remount;
    t[MC_OP_UNMOUNT_SEGMENT] = h_unmount;
    t[MC_OP_GRACEFUL_UNMOUNT_SEGMENT] = h_unmount;
    t[MC_OP_QUERY_SEGMENT_STATUS] = h_query_segment;
    t[MC_OP_PUT_START] = h_put_start;
    t[MC_OP_UPSERT_START] = h_put_start;
    t[MC_OP_PUT_END] = h_put_end;
    t[MC_OP_UPSERT_END] = h_put_end;
    t[MC_OP_PUT_REVOKE] = h_put_revoke;
    t[MC_OP_UPSERT_REVOKE] = h_put_revoke;
    t[MC_OP_BATCH_PUT_START] = h_batch_put_start;
    t[MC_OP_BATCH_UPSERT_START] = h_batch_put_start;
    t[MC_OP_BATCH_PUT_END] = h_batch_put_end;
    t[MC_OP_BATCH_UPSERT_END] = h_batch_put_end;
    t[MC_OP_BATCH_PUT_REVOKE] = h_batch_key;
    t[MC_OP_BATCH_UPSERT_REVOKE] = h_batch_key;
    t[MC_OP_GET_REPLICA_LIST] = h_get_replica_list;
    t[MC_OP_BATCH_GET_REPLICA_LIST] = h_batch_get_replica_list;
    t[MC_OP_EXIST_KEY] = h_exist_key;
    t[MC_OP_BATCH_EXIST_KEY] = h_batch_key;
    t[MC_OP_GET_SIZE] = h_get_size;
    t[MC_OP_REMOVE] = h_remove;
    t[MC_OP_BATCH_REMOVE] = h_batch_key;
    t[MC_OP_REMOVE_BY_REGEX] = h_remove_by_regex;
    t[MC_OP_REMOVE_ALL] = h_remove_all;
    t[MC_OP_POLL_EVENTS] = h_poll_events;
    t[MC_OP_LIST_OBJECTS] = h_list_objects;
    t[MC_OP_RELEASE_RETIRED] = h_release_retired;
    t[MC_OP_BATCH_REPLICA_CLEAR] = h_batch_replica_clear;
    t[MC_OP_MOUNT_LOCAL_DISK] = h_mount_local_disk;
    t[MC_OP_UNMOUNT_LOCAL_DISK] = h_mount_local_disk;
    t[MC_OP_REPORT_SSD_CAPACITY] = h_report_ssd_capacity;
    t[MC_OP_OFFLOAD_HEARTBEAT] = h_offload_heartbeat;
    t[MC_OP_NOTIFY_OFFLOAD_SUCCESS] = h_notify_offload_success;
    t[MC_OP_BATCH_EVICT_DISK_REPLICA] = h_batch_evict_disk_replica;
    t[MC_OP_PROMOTION_ALLOC_START] = h_promotion;
    t[MC_OP_NOTIFY_PROMOTION_SUCCESS] = h_promotion;
    t[MC_OP_NOTIFY_PROMOTION_FAILURE] = h_promotion;
    t[MC_OP_CREATE_COPY_TASK] = h_create_task;
    t[MC_OP_CREATE_MOVE_TASK] = h_create_task;
    t[MC_OP_QUERY_TASK] = h_query_task;
    t[MC_OP_FETCH_TASKS] = h_fetch_tasks;
    t[MC_OP_MARK_TASK_TO_COMPLETE] = h_mark_task;
    t[MC_OP_COPY_START] = h_task_step;
    t[MC_OP_COPY_END] = h_task_step;
    t[MC_OP_COPY_REVOKE] = h_task_step;
    t[MC_OP_MOVE_START] = h_task_step;
    t[MC_OP_MOVE_END] = h_task_step;
    t[MC_OP_MOVE_REVOKE] = h_task_step;
}

/* ---------------------------------------------------------------- data grants */

#define ARENA_N(a, type, n) ((type *)mc_rpc_arena_calloc((a), (n) ? (n) : 1, sizeof(type)))

/* Replica lists of one answer (one per result) that grants are made for. */
typedef struct grant_src {
    McRpc__ReplicaDesc **const *lists;
    const size_t *counts;
    size_t n;
} grant_src_t;

/* Signs the grants covering every replica of src (common/grant.h): one per endpoint and up to
 * MC_GRANT_MAX_RANGES ranges, with `access`, for `tenant`, expiring at expiry_ms (wall
 * clock); memory of arena a into *out / *n_out. */
static mc_status_t grants_make(mc_rpc_arena_t *a, const mc_auth_t *ring, const char *tenant,
                               uint8_t access, uint64_t expiry_ms, const grant_src_t *src,
                               McRpc__TeGrant ***out, size_t *n_out)
{
    size_t total = 0;
    for (size_t l = 0; l < src->n; l++)
        total += src->counts[l];
    if (!total)
        return MC_OK;
    /* group the ranges by endpoint: endpoint strings mostly share the segment table's
     * pointer, so the distinct list stays short and cheap to search */
    const char **eps = ARENA_N(a, const char *, total);
    uint32_t *grp = ARENA_N(a, uint32_t, total), *cnt = ARENA_N(a, uint32_t, total);
    const McRpc__ReplicaDesc **all = ARENA_N(a, const McRpc__ReplicaDesc *, total);
    mc_grant_range_t *r = ARENA_N(a, mc_grant_range_t, total);
    if (!eps || !grp || !cnt || !all || !r)
        return MC_ERR_NO_MEMORY;
    size_t n = 0, n_eps = 0;
    for (size_t l = 0; l < src->n; l++) {
        for (size_t i = 0; i < src->counts[l]; i++) {
            const McRpc__ReplicaDesc *d = src->lists[l][i];
            /* LOCAL_DISK replicas are not TE memory: their owner's offload server decides */
            if (!d->size || !d->transport_endpoint ||
                d->replica_type == MC_RPC__REPLICA_TYPE__LOCAL_DISK)
                continue;
            size_t e = 0;
            while (e < n_eps && eps[e] != d->transport_endpoint &&
                   strcmp(eps[e], d->transport_endpoint) != 0)
                e++;
            if (e == n_eps)
                eps[n_eps++] = d->transport_endpoint;
            grp[n] = (uint32_t)e;
            cnt[e]++;
            all[n++] = d;
        }
    }
    size_t n_grants = 0;
    for (size_t e = 0; e < n_eps; e++)
        n_grants += (cnt[e] + MC_GRANT_MAX_RANGES - 1) / MC_GRANT_MAX_RANGES;
    McRpc__TeGrant **arr = ARENA_N(a, McRpc__TeGrant *, n_grants);
    McRpc__TeGrant *gs = ARENA_N(a, McRpc__TeGrant, n_grants);
    if (!arr || !gs)
        return MC_ERR_NO_MEMORY;
    size_t k = 0;
    for (size_t e = 0; e < n_eps; e++) {
        uint32_t m = 0;
        for (size_t i = 0; i <= n; i++) {
            if (i < n && grp[i] == e)
                r[m++] = (mc_grant_range_t){.addr = all[i]->buffer_address, .len = all[i]->size};
            if (m == MC_GRANT_MAX_RANGES || (i == n && m)) {
                uint8_t *blob = mc_rpc_arena_alloc(a, MC_GRANT_SIZE(m));
                size_t len = 0;
                if (!blob)
                    return MC_ERR_NO_MEMORY;
                mc_status_t st = mc_grant_sign(ring, eps[e], tenant, access, expiry_ms, r, m,
                                               blob, &len);
                if (st != MC_OK)
                    return st;
                mc_rpc__te_grant__init(&gs[k]);
                gs[k].transport_endpoint = (char *)eps[e];
                gs[k].grant = (ProtobufCBinaryData){.len = len, .data = blob};
                arr[k] = &gs[k];
                k++;
                m = 0;
            }
        }
    }
    *out = arr;
    *n_out = k;
    return MC_OK;
}

/* The keyring grants are signed with, for a tenant-bound peer's answer; NULL when none is
 * needed (not tenant-bound) or none can be made (no cluster key: logged once; the storage
 * servers then refuse that tenant's reads and writes). */
static const mc_auth_t *grant_ring(const mc_rpc_call_t *call)
{
    if (!call->peer || !call->peer->tenant[0])
        return NULL;
    const mc_auth_t *ring = mc_rpc_server_keyring(call->srv);
    if (mc_auth_has_cluster_key(ring))
        return ring;
    static atomic_flag warned = ATOMIC_FLAG_INIT;
    if (!atomic_flag_test_and_set(&warned))
        MC_LOG_WARN("master: no cluster token in the token file: tenant-bound clients get "
                    "no data grants, storage servers will refuse their reads and writes");
    return NULL;
}

/* Write grants for stamping retired replicas (store_stamp_add), as long as their leases. */
static mc_status_t retired_grants(mc_rpc_call_t *call, const mc_auth_t *ring, uint64_t wall0,
                                  McRpc__RetiredReplicas *r)
{
    if (!r)
        return MC_OK;
    grant_src_t src = {(McRpc__ReplicaDesc **const *)&r->replicas, &r->n_replicas, 1};
    return grants_make(call->arena, ring, call->peer->tenant, MC_GRANT_WRITE,
                       wall0 + r->lease_ms + MC_GRANT_SKEW_MS, &src, &r->grants, &r->n_grants);
}

/* The opcodes whose answers carry replicas (and grants for a tenant-bound peer). */
static bool op_grants(uint16_t op)
{
    switch (op) {
    case MC_OP_GET_REPLICA_LIST: case MC_OP_BATCH_GET_REPLICA_LIST:
    case MC_OP_PUT_START: case MC_OP_UPSERT_START:
    case MC_OP_BATCH_PUT_START: case MC_OP_BATCH_UPSERT_START:
    case MC_OP_REMOVE: case MC_OP_BATCH_REMOVE: case MC_OP_REMOVE_BY_REGEX: case MC_OP_REMOVE_ALL:
        return true;
    default:
        return false;
    }
}

/* Adds data grants to the answers that hand out replicas (GetReplicaList and PutStart
 * families, and the retired replicas of upserts and forced removes), for a tenant-bound peer
 * (docs/security.md, "Data ports and tenants"), expiring mc_master_grant_life_ms (stamps: the
 * lease left + MC_GRANT_SKEW_MS) after wall0, read before the core handled the request, so
 * that the core's record of them (mc_master_grants_begin) ends no earlier than they do. */
static mc_status_t grants_attach(mc_master_t *m, mc_rpc_call_t *call, const mc_auth_t *ring,
                                 uint64_t wall0, ProtobufCMessage *resp)
{
    uint16_t op = call->opcode;
    const char *tenant = call->peer->tenant;
    uint64_t rd = wall0 + mc_master_grant_life_ms(m, false);
    uint64_t wr = wall0 + mc_master_grant_life_ms(m, true);
    switch (op) { /* the retired old values stamped by their retirer */
    case MC_OP_REMOVE:
        return retired_grants(call, ring, wall0, ((McRpc__StatusResponse *)resp)->retired);
    case MC_OP_BATCH_REMOVE:
        return retired_grants(call, ring, wall0, ((McRpc__BatchStatusResponse *)resp)->retired);
    case MC_OP_REMOVE_BY_REGEX:
    case MC_OP_REMOVE_ALL:
        return retired_grants(call, ring, wall0, ((McRpc__CountResponse *)resp)->retired);
    default:
        break;
    }
    if (op == MC_OP_GET_REPLICA_LIST) {
        McRpc__ReplicaListResponse *r = (void *)resp;
        grant_src_t src = {(McRpc__ReplicaDesc **const *)&r->replicas, &r->n_replicas, 1};
        return r->status ? MC_OK
                         : grants_make(call->arena, ring, tenant, MC_GRANT_READ, rd, &src,
                                       &r->grants, &r->n_grants);
    }
    if (op == MC_OP_BATCH_GET_REPLICA_LIST) {
        McRpc__BatchReplicaListResponse *r = (void *)resp;
        McRpc__ReplicaDesc ***lists = ALLOC_N(call, McRpc__ReplicaDesc **, r->n_results);
        size_t *counts = ALLOC_N(call, size_t, r->n_results);
        if (!lists || !counts)
            return MC_ERR_NO_MEMORY;
        for (size_t i = 0; i < r->n_results; i++) {
            lists[i] = r->results[i]->replicas;
            counts[i] = r->results[i]->status ? 0 : r->results[i]->n_replicas;
        }
        grant_src_t src = {(McRpc__ReplicaDesc **const *)lists, counts, r->n_results};
        return grants_make(call->arena, ring, tenant, MC_GRANT_READ, rd, &src, &r->grants,
                           &r->n_grants);
    }
    /* the put family (the retired old values an upsert stamps carry their own grants) */
    bool batch = op == MC_OP_BATCH_PUT_START || op == MC_OP_BATCH_UPSERT_START;
    McRpc__BatchPutStartResponse *br = (void *)resp;
    McRpc__PutStartResponse *one = (void *)resp;
    size_t n = batch ? br->n_results : 1;
    McRpc__ReplicaDesc ***lists = ALLOC_N(call, McRpc__ReplicaDesc **, n);
    size_t *counts = ALLOC_N(call, size_t, n);
    if (!lists || !counts)
        return MC_ERR_NO_MEMORY;
    for (size_t i = 0; i < n; i++) {
        McRpc__PutStartResponse *ps = batch ? br->results[i] : one;
        lists[i] = ps->replicas;
        counts[i] = ps->status ? 0 : ps->n_replicas;
        mc_status_t st = retired_grants(call, ring, wall0, ps->retired);
        if (st != MC_OK)
            return st;
    }
    grant_src_t src = {(McRpc__ReplicaDesc **const *)lists, counts, n};
    return batch ? grants_make(call->arena, ring, tenant, MC_GRANT_WRITE, wr, &src,
                               &br->grants, &br->n_grants)
                 : grants_make(call->arena, ring, tenant, MC_GRANT_WRITE, wr, &src,
                               &one->grants, &one->n_grants);
}

/* Read grants for the placements of a tenant-bound poller's answer (poll_resp), as for a
 * BatchGetReplicaList of the same keys: one per endpoint and up to MC_GRANT_MAX_RANGES ranges,
 * in r->grants (the placements carry none), expiring mc_master_grant_life_ms after wall0, read
 * before the placements' leases were granted. An answer holds at most EV_MAX_BATCH placements
 * of MC_MASTER_MAX_REPLICAS replicas: no more ranges than a batch lookup's answer. */
_Static_assert(EV_MAX_BATCH <= MC_RPC_MAX_BATCH, "feed grants are bounded as a batch lookup's");
static mc_status_t feed_grants(mc_master_t *m, mc_rpc_arena_t *a, const poll_args_t *pa,
                               uint64_t wall0, McRpc__PollEventsResponse *r)
{
    McRpc__ReplicaDesc ***lists = ARENA_N(a, McRpc__ReplicaDesc **, r->n_events);
    size_t *counts = ARENA_N(a, size_t, r->n_events);
    if (!lists || !counts)
        return MC_ERR_NO_MEMORY;
    for (size_t i = 0; i < r->n_events; i++) {
        const McRpc__ReplicaListResponse *pl = r->events[i]->placement;
        lists[i] = pl ? pl->replicas : NULL;
        counts[i] = pl ? pl->n_replicas : 0;
    }
    grant_src_t src = {(McRpc__ReplicaDesc **const *)lists, counts, r->n_events};
    return grants_make(a, pa->ring, pa->tenant, MC_GRANT_READ,
                       wall0 + mc_master_grant_life_ms(m, false), &src, &r->grants, &r->n_grants);
}

/* ---------------------------------------------------------------- authorization */

/* Per opcode, the request message's `string tenant_id` field; NULL when it has none (not a key
 * operation). Filled once with the handler table. */
static const ProtobufCFieldDescriptor *g_tenant_field[MC_OP_MAX];

/* The request's tenant_id ("" when not set); NULL when its message has no such field. */
static const char *req_tenant(uint16_t opcode, const ProtobufCMessage *req)
{
    const ProtobufCFieldDescriptor *f = g_tenant_field[opcode];
    return f ? *(const char *const *)((const char *)req + f->offset) : NULL;
}

/* The one place that decides whether the connection's peer may run a request, and for which
 * tenant (into *scope). A tenant-bound peer (its token names a tenant) acts as its tenant; a
 * request naming another one is refused (PERMISSION_DENIED). Any other peer (a cluster token,
 * every peer of a master without a keyring, call->peer NULL for in-process callers) acts as
 * the tenant the request names ("" = "default"). A tenant name that breaks the rules of
 * common/tenant.h is refused (INVALID_PARAMS). Every operation that touches keys is confined
 * to the tenant's keys by the handlers (wkey, mc_master_remove_scoped, the listings), so none
 * needs an admin token any more. *why_p: what to log on a refusal. */
static mc_status_t authorize(const mc_rpc_call_t *call, const ProtobufCMessage *req,
                             mc_tenant_scope_t *scope, const char **why_p)
{
    const char *asked = req_tenant(call->opcode, req);
    const char *tenant = asked;
    if (call->peer && call->peer->tenant[0]) {
        tenant = call->peer->tenant;
        if (asked && asked[0] && strcmp(asked, tenant) != 0) {
            *why_p = "the request names another tenant than the token's";
            return MC_ERR_PERMISSION;
        }
    }
    if ((*why_p = mc_tenant_invalid(tenant)) != NULL)
        return MC_ERR_INVALID_PARAMS;
    mc_tenant_scope_init(scope, tenant);
    return MC_OK;
}

/* The form of the answer, once it is complete (its grants are made from `results`): a
 * BatchGetReplicaList that asks for it (BatchKeyRequest.compact_replicas) gets the compact
 * form (rpc/replica_lists.h); one whose results do not fit it gets the usual form. */
_Static_assert(MC_MASTER_MAX_REPLICAS <= MC_RPC_MAX_KEY_REPLICAS,
               "every lookup answer must fit the compact form");
static mc_status_t answer_form(mc_rpc_call_t *call, const ProtobufCMessage *req,
                               ProtobufCMessage *resp)
{
    if (call->opcode != MC_OP_BATCH_GET_REPLICA_LIST ||
        !((const McRpc__BatchKeyRequest *)req)->compact_replicas)
        return MC_OK;
    McRpc__BatchReplicaListResponse *r = (void *)resp;
    if (r->status)
        return MC_OK;
    mc_status_t st = mc_rpc_replicas_compact(call->arena, r);
    return st == MC_ERR_INVALID_PARAMS ? MC_OK : st;
}

static mc_rpc_handler_fn g_impl[MC_OP_MAX];
static pthread_once_t g_impl_once = PTHREAD_ONCE_INIT;
static void impl_init(void)
{
    impl_table(g_impl);
    for (int op = 0; op < MC_OP_MAX; op++) {
        const mc_rpc_op_info_t *info = mc_rpc_op_info((uint16_t)op);
        const ProtobufCFieldDescriptor *f =
            info ? protobuf_c_message_descriptor_get_field_by_name(info->req, "tenant_id") : NULL;
        g_tenant_field[op] = f && f->type == PROTOBUF_C_TYPE_STRING ? f : NULL;
    }
}

/* Every master handler goes through here: authorize, then the operation's handler. A refusal
 * is a header-level error (no body), so it reads the same for every opcode. */
static mc_status_t h_authorized(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                ProtobufCMessage **resp_p)
{
    mc_tenant_scope_t scope;
    const char *why = NULL;
    mc_status_t st = authorize(call, req, &scope, &why);
    if (st != MC_OK) {
        MC_LOG_WARN("master: conn %llu: %s refused (%s): %s%s", (unsigned long long)call->conn_id,
                    mc_rpc_op_info(call->opcode)->name, mc_status_name(st),
                    st == MC_ERR_INVALID_PARAMS ? "tenant_id " : "", why);
        return st;
    }
    /* a tenant-bound peer's replicas go out with grants: the core records them for the
     * session, from a wall time read first (grants_attach) */
    const mc_auth_t *ring =
        call->peer && call->peer->tenant[0] && op_grants(call->opcode) ? grant_ring(call) : NULL;
    uint64_t wall0 = ring ? mc_wall_ms() : 0;
    if (ring)
        mc_master_grants_begin(ctx);
    call->scope = &scope; /* for the handler only: a parked poll copies it */
    st = g_impl[call->opcode](ctx, call, req, resp_p);
    call->scope = NULL;
    if (ring)
        mc_master_grants_end(ctx);
    if (st == MC_OK && ring && *resp_p)
        st = grants_attach(ctx, call, ring, wall0, *resp_p);
    if (st == MC_OK && *resp_p)
        st = answer_form(call, req, *resp_p);
    return st;
}

void mc_master_rpc_handlers(mc_rpc_handler_fn t[MC_OP_MAX])
{
    pthread_once(&g_impl_once, impl_init);
    for (int op = 0; op < MC_OP_MAX; op++)
        t[op] = g_impl[op] ? h_authorized : NULL;
}
