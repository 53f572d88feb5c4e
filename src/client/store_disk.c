/* The storage server's side of the local-disk (SSD) tier (docs/internals/disk-tier.md,
 * "Storage server"), and the reader's disk-read path.
 *
 * A store set up with an offload path owns one mc_disk store and two things around it:
 *
 *  - the offload thread: mounts the disk with the master (MountLocalDiskSegment,
 *    ReportSsdCapacity), re-registers every object found on disk (NotifyOffloadSuccess,
 *    recovered), then every heartbeat interval pulls its tasks (OffloadObjectHeartbeat):
 *    offloads are read from its own segment, written with the checksum the master recorded
 *    (the engine refuses bytes that do not match it) and confirmed; removals are removed. A
 *    master that no longer knows the disk (UNABLE_OFFLOADING: restarted, or it expired us)
 *    gets the mount and the re-registration again. Disk evictions (the engine's on_evict, on
 *    this thread: only it writes) become BatchEvictDiskReplica.
 *  - the offload RPC server (its own loop thread, the same framing and handshake as the
 *    master's port; rpc/rpc_server.h) and its read threads: BatchGetOffloadObject
 *    reads keys from the disk, with the reader's deadline, into a staging buffer registered
 *    with the TE, and answers where they are (a streamed request at once, its bytes then
 *    followed with WaitOffloadRead as they land); ReleaseOffloadBuffer frees the range, and a
 *    range not released is freed gc_ttl after its read ended ("offload RPC server" below).
 *
 * The reader (store_disk_read, store_disk_read_many): asks the owner (one cached connection
 * per endpoint) for all its keys at once, pulls each value with the TE once the owner has
 * verified it (the last key piece by piece as the owner reports them landed), hashes every
 * byte it pulled, releases the batch. A single get of a key whose disk replica it read before
 * sends its request before the master's lookup answers (store_disk_spec_start). */
#include "client/store_int.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/config.h"
#include "common/grant.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/tenant.h"
#include "common/time.h"
#include "disk/disk_store.h"
#include "rpc/frame.h"
#include "rpc/rpc_server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STAGING_DEFAULT (256ull << 20)  /* MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES */
#define GC_TTL_DEFAULT_MS 5000          /* MOONCAKE_OFFLOAD_CLIENT_BUFFER_GC_TTL_MS */
#define HEARTBEAT_DEFAULT_MS 10000      /* MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS */
#define READ_BATCH_MAX 64               /* keys per BatchGetOffloadObject */
#define READ_GROUP_BYTES (64ull << 20)  /* a reader's request: at most this much staging */
#define READ_TIMEOUT_MAX_MS 60000
#define READ_TIMEOUT_DEFAULT_MS 5000
#define STAGED_MAX 256                  /* batches held in the staging buffer at once */
#define NOTIFY_BATCH 512                /* objects per NotifyOffloadSuccess */
#define READER_CONNS 8                  /* cached connections to owners */
#define READ_WORKERS_MAX 8              /* threads reading jobs from the disk: one per ring
                                           (MC_DISK_RINGS), at most this many */
#define WAITERS_MAX 1024                /* WaitOffloadRead calls deferred at once */
#define QUARANTINE_MS 60000             /* a slot a read abandoned at its deadline is held */
/* The last key of a read follows its pieces as they land: the reader asks to hear when half
 * of what it has not seen land has landed (at most PULL_MAX more, at least one byte:
 * pull_want) and pulls what has landed, at most PULL_MAX bytes per transfer (the whole value
 * at once when it has all landed by then). Few answers early, one per piece at the end: each
 * answer is a wake-up on both sides, and the disk keeps reading meanwhile. The keys before it
 * wait for their verdict and are pulled whole (stream_pull). */
#define PULL_MAX (4ull << 20)
/* A reader's release of a batch of at most this much staging is not waited for: it rides in
 * front of the next request on the same connection (one held per connection; the reader's
 * destroy sends it; the owner's gc_ttl_ms frees it if no request follows or the cached
 * connection is replaced). Larger batches are released at once. */
#define RELEASE_DEFER_MAX (8ull << 20)

/* One BatchGetOffloadObject being served ("offload RPC server" below). The loop thread owns
 * it, except while a worker runs it (from the queue until `finished`); the per-key progress
 * (ready, done, status) is written by the worker and read by the loop. */
typedef struct job {
    mc_store_t *s;
    struct job *qnext;          /* worker queue */
    size_t n;
    bool stream;                /* answered at once; else when finished (conn_id, req_id) */
    bool answered;
    bool timed_out;             /* a read abandoned at the deadline: set by the worker before
                                   finished; the range is then quarantined */
    uint64_t conn_id, req_id, deadline_ns;
    uint64_t finished_ms;       /* set by the worker before finished */
    char tenant[MC_TENANT_MAX + 1];      /* the keys' */
    char peer_tenant[MC_TENANT_MAX + 1]; /* a tenant-bound reader's; "" otherwise */
    atomic_bool finished;
    atomic_ullong ready[READ_BATCH_MAX]; /* landed prefix of each value */
    atomic_bool done[READ_BATCH_MAX];
    atomic_int status[READ_BATCH_MAX];   /* final, once done */
    mc_status_t lookup[READ_BATCH_MAX];  /* at the request: MC_OK = being read */
    uint64_t sizes[READ_BATCH_MAX], ptrs[READ_BATCH_MAX];
    int32_t sts[READ_BATCH_MAX];         /* the statuses answered */
    mc_disk_read_t rq[READ_BATCH_MAX];
    mc_disk_batch_t *batch;              /* its reads, started by the loop (the worker
                                            finishes them), or NULL: the worker reads */
    McRpc__TeGrant grant;
    uint8_t grant_blob[MC_GRANT_SIZE(1)];
    char keys[];                         /* the key bytes (rq[i].key point here) */
} job_t;

typedef struct staged {
    uint64_t id, off, len, t_ms;
    uint64_t grant_until_ms; /* a read grant reaches it until then (mc_now_ms): held */
    bool released; /* the reader is done with it */
    job_t *job;    /* owned */
} staged_t;

/* A deferred WaitOffloadRead. */
typedef struct waiter {
    uint64_t conn_id, req_id, batch_id, want;
    uint32_t index;
} waiter_t;

struct reader_conn {
    char endpoint[MC_HOST_MAX + 8];
    mc_rpc_client_t *rpc;
    pthread_mutex_t mu;   /* one call at a time on it */
    uint64_t release_id;  /* a batch whose release waits for the next request (0: none) */
};

struct store_disk {
    mc_disk_store_t *disk;
    uint64_t capacity;
    uint64_t hb_ms, gc_ttl_ms;
    char endpoint[MC_HOST_MAX + 8]; /* host:port of the offload RPC server */
    /* offload thread */
    pthread_t worker;
    bool worker_started, mounted;
    /* offload RPC server and its staging buffer (loop thread only) */
    mc_rpc_server_t *srv;
    pthread_t srv_thread;
    bool srv_started;
    char *staging;
    uint64_t staging_len;
    staged_t staged[STAGED_MAX]; /* sorted by off */
    size_t n_staged;
    atomic_ullong staged_bytes; /* held by the entries (metrics; written by the loop) */
    uint64_t next_batch;
    waiter_t waiters[WAITERS_MAX];
    size_t n_waiters;
    atomic_bool wake_posted;
    /* jobs for the read workers (under q_mu) */
    pthread_mutex_t q_mu;
    pthread_cond_t q_cv;
    job_t *q_head;
    bool q_stop;
    pthread_t workers[READ_WORKERS_MAX];
    size_t n_workers;
    /* keys (internal form) the master must forget, sent with BatchEvictDiskReplica by the
     * offload thread: evicted by a put (on_evict) or found damaged by a read (the RPC loop);
     * under ev_mu */
    pthread_mutex_t ev_mu;
    char **ev_keys;
    size_t *ev_lens;
    size_t n_ev, cap_ev, cap_ev_lens;
    atomic_ullong offloaded, offload_failed, disk_reads_served, promoted;
    mc_status_t last_offload_err; /* offload thread: the last offload's failure (OK: none) */
};

/* ------------------------------------------------------------------ keys */

/* The disk names an object (tenant, user key); the master, by its internal key. */
static void split_key(const char *ikey, size_t ilen, char *tenant, const char **ukey,
                      size_t *ulen)
{
    const char *t;
    size_t tl;
    mc_tenant_of_key(ikey, ilen, &t, &tl);
    memcpy(tenant, t, tl);
    tenant[tl] = 0;
    mc_tenant_scope_t sc;
    mc_tenant_scope_init(&sc, tenant);
    mc_tenant_scope_key(&sc, ikey, ilen, ukey, ulen);
}

/* ------------------------------------------------------------------ master calls */

static mc_status_t call_status(mc_store_t *s, uint16_t op, ProtobufCMessage *q)
{
    ProtobufCMessage *r = NULL;
    mc_status_t st = mc_master_client_call(&s->master, op, q, &r, 1);
    if (st == MC_OK)
        st = ((McRpc__StatusResponse *)r)->status;
    mc_rpc_response_free(r);
    return st;
}

/* NotifyOffloadSuccess of n objects (internal keys, n may be 0); statuses[i] per object.
 * done (with recovered): the last batch of a re-registration (recovery_done). */
static mc_status_t notify(mc_store_t *s, char **keys, const size_t *lens, const uint64_t *sizes,
                          const uint64_t *sums, size_t n, bool recovered, bool done,
                          int32_t *statuses)
{
    McRpc__StorageObjectMetadata *objs = mc_calloc(n ? n : 1, sizeof(*objs));
    McRpc__StorageObjectMetadata **arr = mc_calloc(n ? n : 1, sizeof(*arr));
    if (!objs || !arr) {
        mc_free(objs);
        mc_free(arr);
        return MC_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n; i++) {
        mc_rpc__storage_object_metadata__init(&objs[i]);
        objs[i].key = (ProtobufCBinaryData){lens[i], (uint8_t *)keys[i]};
        objs[i].data_size = sizes[i];
        objs[i].checksum = sums[i];
        arr[i] = &objs[i];
    }
    McRpc__NotifyOffloadSuccessRequest q = MC_RPC__NOTIFY_OFFLOAD_SUCCESS_REQUEST__INIT;
    q.client_id = mc_master_client_id(&s->master);
    q.objects = arr;
    q.n_objects = n;
    q.recovered = recovered;
    q.recovery_done = done;
    ProtobufCMessage *r = NULL;
    mc_status_t st = mc_master_client_call(&s->master, MC_OP_NOTIFY_OFFLOAD_SUCCESS, &q.base, &r, 1);
    if (st == MC_OK) {
        McRpc__BatchStatusResponse *b = (void *)r;
        st = store_batch_reply_status(st, b->status, b->n_statuses, n);
        for (size_t i = 0; st == MC_OK && i < n; i++)
            statuses[i] = b->statuses[i];
    }
    mc_rpc_response_free(r);
    mc_free(objs);
    mc_free(arr);
    return st;
}

static void disk_remove_ikey(store_disk_t *d, const char *ikey, size_t ilen)
{
    char tenant[MC_TENANT_MAX + 1];
    const char *uk;
    size_t ul;
    split_key(ikey, ilen, tenant, &uk, &ul);
    mc_disk_store_remove(d->disk, tenant, uk, ul);
}

/* ------------------------------------------------------------------ disk evictions */

/* Queues (tenant, key) for BatchEvictDiskReplica (dropped when out of memory: the master then
 * keeps pointing readers here until they get OBJECT_NOT_FOUND from us). */
static void forget(store_disk_t *d, const char *tenant, size_t tlen, const char *key,
                   size_t klen)
{
    char t[MC_TENANT_MAX + 1], ik[MC_STORE_KEY_MAX + MC_TENANT_KEY_EXTRA];
    size_t tl = tlen < MC_TENANT_MAX ? tlen : MC_TENANT_MAX;
    memcpy(t, tenant, tl);
    t[tl] = 0;
    mc_tenant_scope_t sc;
    mc_tenant_scope_init(&sc, t);
    size_t il = mc_tenant_key(&sc, key, klen, ik, sizeof(ik));
    char *k = il ? mc_malloc(il) : NULL;
    if (!k)
        return;
    memcpy(k, ik, il);
    pthread_mutex_lock(&d->ev_mu);
    if (mc_array_reserve(&d->ev_keys, &d->cap_ev, d->n_ev + 1, 64) == MC_OK &&
        mc_array_reserve(&d->ev_lens, &d->cap_ev_lens, d->n_ev + 1, 64) == MC_OK) {
        d->ev_keys[d->n_ev] = k;
        d->ev_lens[d->n_ev++] = il;
        k = NULL;
    }
    pthread_mutex_unlock(&d->ev_mu);
    mc_free(k);
}

static void on_evict(uint64_t bucket_id, const mc_disk_obj_t *objs, size_t n, void *arg)
{
    (void)bucket_id;
    mc_store_t *s = arg;
    for (size_t i = 0; i < n; i++)
        forget(s->disk, objs[i].tenant, objs[i].tenant_len, objs[i].key, objs[i].key_len);
}

/* Tells the master what the last puts evicted (BatchEvictDiskReplica). */
static void evictions_flush(mc_store_t *s)
{
    store_disk_t *d = s->disk;
    pthread_mutex_lock(&d->ev_mu);
    char **ek = d->ev_keys;
    size_t *el = d->ev_lens, n = d->n_ev;
    d->ev_keys = NULL;
    d->ev_lens = NULL;
    d->n_ev = d->cap_ev = d->cap_ev_lens = 0;
    pthread_mutex_unlock(&d->ev_mu);
    if (!n)
        return;
    ProtobufCBinaryData *keys = mc_calloc(n, sizeof(*keys));
    for (size_t off = 0; keys && off < n; off += MC_RPC_MAX_BATCH) {
        size_t m = n - off < MC_RPC_MAX_BATCH ? n - off : MC_RPC_MAX_BATCH;
        for (size_t i = 0; i < m; i++)
            keys[i] = (ProtobufCBinaryData){el[off + i], (uint8_t *)ek[off + i]};
        McRpc__BatchEvictDiskReplicaRequest q = MC_RPC__BATCH_EVICT_DISK_REPLICA_REQUEST__INIT;
        q.client_id = mc_master_client_id(&s->master);
        q.keys = keys;
        q.n_keys = m;
        q.replica_type = MC_RPC__REPLICA_TYPE__LOCAL_DISK;
        ProtobufCMessage *r = NULL;
        mc_status_t st =
            mc_master_client_call(&s->master, MC_OP_BATCH_EVICT_DISK_REPLICA, &q.base, &r, 1);
        if (st != MC_OK) /* the master drops them with this client's disk if it never hears */
            MC_LOG_WARN("offload: BatchEvictDiskReplica of %zu keys failed: %s", m,
                        mc_status_str(st));
        mc_rpc_response_free(r);
    }
    mc_free(keys);
    for (size_t i = 0; i < n; i++)
        mc_free(ek[i]);
    mc_free(ek);
    mc_free(el);
}

/* ------------------------------------------------------------------ mount and re-register */

typedef struct objlist {
    char **keys;
    size_t *lens;
    uint64_t *sizes, *sums;
    size_t n, cap;
    bool oom;
} objlist_t;

static void collect(const mc_disk_obj_t *o, void *arg)
{
    objlist_t *l = arg;
    if (l->oom)
        return;
    if (l->n == l->cap) {
        size_t c = l->cap ? l->cap * 2 : 256;
        char **k = mc_realloc(l->keys, c * sizeof(*k));
        if (k)
            l->keys = k;
        size_t *ln = mc_realloc(l->lens, c * sizeof(*ln));
        if (ln)
            l->lens = ln;
        uint64_t *sz = mc_realloc(l->sizes, c * sizeof(*sz));
        if (sz)
            l->sizes = sz;
        uint64_t *cs = mc_realloc(l->sums, c * sizeof(*cs));
        if (cs)
            l->sums = cs;
        if (!k || !ln || !sz || !cs) {
            l->oom = true;
            return;
        }
        l->cap = c;
    }
    char t[MC_TENANT_MAX + 1], ik[MC_STORE_KEY_MAX + MC_TENANT_KEY_EXTRA];
    size_t tl = o->tenant_len < MC_TENANT_MAX ? o->tenant_len : MC_TENANT_MAX;
    memcpy(t, o->tenant, tl);
    t[tl] = 0;
    mc_tenant_scope_t sc;
    mc_tenant_scope_init(&sc, t);
    size_t il = mc_tenant_key(&sc, o->key, o->key_len, ik, sizeof(ik));
    char *k = il ? mc_malloc(il) : NULL;
    if (!k)
        return;
    memcpy(k, ik, il);
    l->keys[l->n] = k;
    l->lens[l->n] = il;
    l->sizes[l->n] = o->loc.data_size;
    l->sums[l->n++] = o->loc.checksum;
}

static void objlist_free(objlist_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        mc_free(l->keys[i]);
    mc_free(l->keys);
    mc_free(l->lens);
    mc_free(l->sizes);
    mc_free(l->sums);
}

/* Every object on disk, to the master (recovered). A copy of a value the master holds
 * differently, that another server holds, or that was removed while we were away, is stale:
 * removed from the disk. */
static mc_status_t reregister(mc_store_t *s)
{
    store_disk_t *d = s->disk;
    objlist_t l = {0};
    mc_disk_store_foreach(d->disk, collect, &l);
    mc_status_t st = MC_OK;
    int32_t *sts = mc_calloc(NOTIFY_BATCH, sizeof(*sts));
    if (!sts)
        st = MC_ERR_NO_MEMORY;
    size_t stale = 0;
    /* the last batch carries the end marker (recovery_done): the master then drops the copies
     * it lists for us that we did not name */
    for (size_t i = 0; st == MC_OK && i < l.n; i += NOTIFY_BATCH) {
        size_t n = l.n - i < NOTIFY_BATCH ? l.n - i : NOTIFY_BATCH;
        st = notify(s, l.keys + i, l.lens + i, l.sizes + i, l.sums + i, n, true, i + n >= l.n,
                    sts);
        for (size_t j = 0; st == MC_OK && j < n; j++) {
            /* OBJECT_NOT_FOUND: removed while we were away (the master's tombstone) */
            if (sts[j] == MC_ERR_INVALID_PARAMS || sts[j] == MC_ERR_OBJECT_ALREADY_EXISTS ||
                sts[j] == MC_ERR_OBJECT_NOT_FOUND) {
                disk_remove_ikey(d, l.keys[i + j], l.lens[i + j]);
                stale++;
            }
        }
    }
    if (st == MC_OK && l.n == 0) /* an empty disk: the marker alone */
        st = notify(s, NULL, NULL, NULL, NULL, 0, true, true, sts);
    if (st == MC_OK)
        MC_LOG_INFO("offload: re-registered %zu disk objects with the master (%zu stale ones "
                    "removed)", l.n - stale, stale);
    mc_free(sts);
    objlist_free(&l);
    return st;
}

static mc_status_t disk_mount(mc_store_t *s)
{
    store_disk_t *d = s->disk;
    McRpc__MountLocalDiskRequest q = MC_RPC__MOUNT_LOCAL_DISK_REQUEST__INIT;
    q.client_id = mc_master_client_id(&s->master);
    q.enable_offloading = true;
    q.transport_endpoint = d->endpoint;
    mc_status_t st = call_status(s, MC_OP_MOUNT_LOCAL_DISK, &q.base);
    if (st == MC_OK) {
        McRpc__ReportSsdCapacityRequest c = MC_RPC__REPORT_SSD_CAPACITY_REQUEST__INIT;
        c.client_id = mc_master_client_id(&s->master);
        c.capacity_bytes = d->capacity;
        st = call_status(s, MC_OP_REPORT_SSD_CAPACITY, &c.base);
    }
    if (st == MC_OK)
        st = reregister(s);
    return st;
}

/* ------------------------------------------------------------------ offload tasks */

#define PROMOTE_READ_MS 30000 /* a promotion's disk read */

/* A promotion task: the value from our disk into the memory replicas the master allocates,
 * then NotifyPromotionSuccess (NotifyPromotionFailure on any error). */
static void promote(mc_store_t *s, const McRpc__OffloadTaskItem *t, const char *tenant,
                    const char *uk, size_t ul)
{
    store_disk_t *d = s->disk;
    McRpc__PromotionRequest q = MC_RPC__PROMOTION_REQUEST__INIT;
    q.client_id = mc_master_client_id(&s->master);
    q.key = t->key;
    void *buf = t->size <= d->staging_len ? mc_malloc(t->size ? t->size : 1) : NULL;
    mc_status_t st = buf ? MC_OK : MC_ERR_NO_MEMORY;
    if (st == MC_OK) {
        mc_disk_read_t rq = {.tenant = tenant, .key = uk, .key_len = ul, .buf = buf,
                             .cap = t->size};
        mc_disk_store_read_batch(d->disk, &rq, 1, mc_now_ns() + PROMOTE_READ_MS * 1000000ull);
        st = rq.status == MC_OK && rq.len != t->size ? MC_ERR_INVALID_REPLICA : rq.status;
        if (st == MC_ERR_CHECKSUM || st == MC_ERR_OBJECT_NOT_FOUND)
            forget(d, tenant, strlen(tenant), uk, ul);
    }
    ProtobufCMessage *r = NULL;
    if (st == MC_OK)
        st = mc_master_client_call(&s->master, MC_OP_PROMOTION_ALLOC_START, &q.base, &r, 0);
    McRpc__PutStartResponse *ps = (void *)r;
    if (st == MC_OK)
        st = ps->status;
    if (st == MC_OK) {
        xfer_plan_t plan = {0};
        struct iovec iov = {buf, t->size};
        for (size_t i = 0; st == MC_OK && i < ps->n_replicas; i++)
            st = store_plan_add(s, &plan, MC_TE_WRITE, ps->replicas[i]->transport_endpoint,
                                ps->replicas[i]->buffer_address, t->size, &iov, 1, 0);
        if (st == MC_OK)
            st = store_plan_run(s, &plan, NULL);
        store_plan_free(&plan);
        mc_status_t end = call_status(s, st == MC_OK ? MC_OP_NOTIFY_PROMOTION_SUCCESS
                                                     : MC_OP_NOTIFY_PROMOTION_FAILURE, &q.base);
        if (st == MC_OK)
            st = end;
    } else if (st != MC_ERR_OBJECT_ALREADY_EXISTS) {
        call_status(s, MC_OP_NOTIFY_PROMOTION_FAILURE, &q.base); /* the master may retry */
    }
    mc_rpc_response_free(r);
    mc_free(buf);
    if (st == MC_OK)
        atomic_fetch_add(&d->promoted, 1);
    else
        MC_LOG_DEBUG("offload: promotion of a %llu-byte value failed: %s",
                     (unsigned long long)t->size, mc_status_str(st));
}

static void run_tasks(mc_store_t *s, McRpc__OffloadTaskItem **tasks, size_t n)
{
    store_disk_t *d = s->disk;
    char **keys = mc_calloc(n, sizeof(*keys));
    size_t *lens = mc_calloc(n, sizeof(*lens));
    uint64_t *sizes = mc_calloc(n, sizeof(*sizes)), *sums = mc_calloc(n, sizeof(*sums));
    int32_t *sts = mc_calloc(n, sizeof(*sts));
    size_t k = 0;
    for (size_t i = 0; keys && lens && sizes && sums && sts && i < n; i++) {
        const McRpc__OffloadTaskItem *t = tasks[i];
        if (t->key.len == 0 || t->key.len > MC_STORE_KEY_MAX + MC_TENANT_KEY_EXTRA)
            continue;
        char tenant[MC_TENANT_MAX + 1];
        const char *uk;
        size_t ul;
        split_key((const char *)t->key.data, t->key.len, tenant, &uk, &ul);
        if (t->remove) {
            mc_disk_store_remove(d->disk, tenant, uk, ul);
            continue;
        }
        if (t->promote) {
            promote(s, t, tenant, uk, ul);
            continue;
        }
        /* the bytes are ours: the master named a range of our own segment */
        if (!store_is_local(s, t->segment_name, t->buffer_address, t->size)) {
            MC_LOG_WARN("offload: task for a range outside this client's segment; skipped");
            continue;
        }
        mc_status_t st = mc_disk_store_put(d->disk, tenant, uk, ul,
                                           (const void *)(uintptr_t)t->buffer_address, t->size,
                                           t->checksum);
        if (st == MC_ERR_OBJECT_ALREADY_EXISTS) { /* an older value's copy, or this one's */
            mc_disk_loc_t loc;
            if (mc_disk_store_lookup(d->disk, tenant, uk, ul, &loc) == MC_OK &&
                loc.checksum == t->checksum && loc.data_size == t->size)
                st = MC_OK;
            else if (mc_disk_store_remove(d->disk, tenant, uk, ul) == MC_OK)
                st = mc_disk_store_put(d->disk, tenant, uk, ul,
                                       (const void *)(uintptr_t)t->buffer_address, t->size,
                                       t->checksum);
        }
        evictions_flush(s);
        if (st != MC_OK) {
            /* CHECKSUM: the memory was freed and reused since the task was queued (debug);
             * a full or failing disk is logged at WARN when the reason changes */
            atomic_fetch_add(&d->offload_failed, 1);
            if (st != MC_ERR_CHECKSUM && st != d->last_offload_err)
                MC_LOG_WARN("offload: writing a %llu-byte value to the disk failed: %s (memory "
                            "keeps the value; mooncake_ssd_offload_failed_total counts these)",
                            (unsigned long long)t->size, mc_status_str(st));
            else
                MC_LOG_DEBUG("offload of a %llu-byte value failed: %s",
                             (unsigned long long)t->size, mc_status_str(st));
            d->last_offload_err = st;
            /* the master drops the task (BatchEvictDiskReplica), so that eviction stops
             * holding the value in memory for an offload that will not come */
            forget(d, tenant, strlen(tenant), uk, ul);
            continue;
        }
        d->last_offload_err = MC_OK;
        keys[k] = (char *)t->key.data;
        lens[k] = t->key.len;
        sizes[k] = t->size;
        sums[k++] = t->checksum;
    }
    if (k && notify(s, keys, lens, sizes, sums, k, false, false, sts) == MC_OK) {
        for (size_t i = 0; i < k; i++) {
            if (sts[i] == MC_OK)
                atomic_fetch_add(&d->offloaded, 1);
            else if (sts[i] == MC_ERR_OBJECT_NOT_FOUND || sts[i] == MC_ERR_INVALID_PARAMS)
                disk_remove_ikey(d, keys[i], lens[i]); /* removed or replaced meanwhile */
        }
    }
    mc_free(keys);
    mc_free(lens);
    mc_free(sizes);
    mc_free(sums);
    mc_free(sts);
}

/* One heartbeat: MC_OK, or UNABLE_OFFLOADING (mount again) or a transport error. */
static mc_status_t heartbeat(mc_store_t *s)
{
    McRpc__OffloadHeartbeatRequest q = MC_RPC__OFFLOAD_HEARTBEAT_REQUEST__INIT;
    q.client_id = mc_master_client_id(&s->master);
    q.enable_offloading = true;
    ProtobufCMessage *r = NULL;
    mc_status_t st = mc_master_client_call(&s->master, MC_OP_OFFLOAD_HEARTBEAT, &q.base, &r, 1);
    if (st == MC_OK) {
        McRpc__OffloadHeartbeatResponse *h = (void *)r;
        st = h->status;
        if (st == MC_OK && h->n_tasks)
            run_tasks(s, h->tasks, h->n_tasks);
    }
    mc_rpc_response_free(r);
    return st;
}

static bool worker_wait(mc_store_t *s, uint64_t ms)
{
    pthread_mutex_lock(&s->hb_lock);
    if (!s->hb_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts); /* hb_cond's clock (store.c) */
        uint64_t ns = (uint64_t)ts.tv_nsec + (ms % 1000) * 1000000ull;
        ts.tv_sec += (time_t)(ms / 1000 + ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        pthread_cond_timedwait(&s->hb_cond, &s->hb_lock, &ts);
    }
    bool stop = s->hb_stop;
    pthread_mutex_unlock(&s->hb_lock);
    return !stop;
}

static void *worker_main(void *arg)
{
    mc_store_t *s = arg;
    store_disk_t *d = s->disk;
    do {
        if (!d->mounted) {
            mc_status_t st = disk_mount(s);
            d->mounted = st == MC_OK;
            if (!d->mounted) {
                MC_LOG_WARN("offload: mounting the local disk with the master failed: %s",
                            mc_status_str(st));
                continue;
            }
            MC_LOG_INFO("offload: local disk mounted (endpoint %s)", d->endpoint);
        }
        evictions_flush(s); /* damaged keys the reads found */
        mc_status_t st = heartbeat(s);
        if (st != MC_OK)
            MC_LOG_DEBUG("offload: heartbeat: %s", mc_status_str(st));
        if (st == MC_ERR_UNABLE_OFFLOADING || st == MC_ERR_UNABLE_OFFLOAD)
            d->mounted = false; /* the master forgot us: mount and re-register */
    } while (worker_wait(s, d->hb_ms));
    return NULL;
}

/* ------------------------------------------------------------------ offload RPC server
 *
 * Every BatchGetOffloadObject becomes a job: its keys are looked up, a range of the staging
 * buffer is reserved (one 4 KiB-aligned slot per key), the loop starts the reads itself
 * (mc_disk_store_read_start: the first pieces go to the disk before the request is answered)
 * and one of the read threads finishes them (mc_disk_store_read_finish; or reads the whole job
 * with mc_disk_store_read_batch when every engine ring was busy), straight into the slots
 * (O_DIRECT; the staging buffer is registered with the engine), with the reader's deadline,
 * every key's pieces in flight at once (up to the engine's io_depth per ring). The engine
 * reports each key's landed
 * prefix as it lands, before hashing it (mc_disk_read_t.progress); the worker publishes it
 * (atomics) and wakes the loop, which answers
 *  - a streamed request at once (pointers, lookup statuses); its WaitOffloadRead calls are
 *    deferred until their prefix has landed (a wait for the whole value: until the key has
 *    settled, its checksum checked) or the key has settled;
 *  - a plain request when the whole job is done (deferred too: the loop never waits for the
 *    disk).
 * The loop owns the jobs (staged_t.job); a worker owns the job it runs until it sets
 * `finished`. A job's range stays held while it runs, and QUARANTINE_MS longer after a read
 * abandoned at its deadline (the device may still write the slot). */

static void staged_free_at(store_disk_t *d, size_t i)
{
    atomic_fetch_sub(&d->staged_bytes, d->staged[i].len);
    mc_free(d->staged[i].job);
    memmove(&d->staged[i], &d->staged[i + 1], (d->n_staged - i - 1) * sizeof(staged_t));
    d->n_staged--;
}

/* Whether entry b may be freed now: no read runs into it, a plain request's answer is out,
 * no quarantine, no grant reaching it, and released or gc_ttl_ms past the later of its
 * allocation and the end of its read. */
static bool staged_expired(const store_disk_t *d, const staged_t *b, uint64_t now)
{
    const job_t *j = b->job;
    uint64_t since = b->t_ms;
    if (j) {
        if (!atomic_load(&j->finished) || (!j->stream && !j->answered))
            return false;
        if (j->timed_out && now < j->finished_ms + QUARANTINE_MS)
            return false;
        since = j->finished_ms > since ? j->finished_ms : since; /* the bytes are all there */
    }
    if (now < b->grant_until_ms)
        return false;
    return b->released || now - since >= d->gc_ttl_ms;
}

static void staged_gc(store_disk_t *d, uint64_t now)
{
    for (size_t i = d->n_staged; i-- > 0;)
        if (staged_expired(d, &d->staged[i], now))
            staged_free_at(d, i);
}

/* A free range of len bytes (first fit); its batch entry, or NULL. */
static staged_t *staged_alloc(store_disk_t *d, uint64_t len)
{
    staged_gc(d, mc_now_ms());
    if (d->n_staged == STAGED_MAX || len > d->staging_len)
        return NULL;
    uint64_t at = 0;
    size_t i = 0;
    for (; i < d->n_staged; i++) {
        if (d->staged[i].off - at >= len)
            break;
        at = d->staged[i].off + d->staged[i].len;
    }
    if (i == d->n_staged && d->staging_len - at < len)
        return NULL;
    memmove(&d->staged[i + 1], &d->staged[i], (d->n_staged - i) * sizeof(staged_t));
    d->n_staged++;
    staged_t *b = &d->staged[i];
    *b = (staged_t){.id = ++d->next_batch, .off = at, .len = len, .t_ms = mc_now_ms()};
    atomic_fetch_add(&d->staged_bytes, len);
    return b;
}

static staged_t *staged_find(store_disk_t *d, uint64_t id)
{
    for (size_t i = 0; i < d->n_staged; i++)
        if (d->staged[i].id == id)
            return &d->staged[i];
    return NULL;
}

/* The reader is done with batch id: freed now, unless a read still runs into it, it is
 * quarantined, or a read grant reaches it (then staged_gc frees it later). */
static void staged_release(store_disk_t *d, uint64_t id)
{
    staged_t *b = staged_find(d, id);
    if (!b)
        return;
    b->released = true;
    if (staged_expired(d, b, mc_now_ms()))
        staged_free_at(d, (size_t)(b - d->staged));
}

static uint64_t round4k(uint64_t n) { return (n + 4095) & ~4095ull; }

/* A tenant-bound reader pulls the staged bytes through the TE, which serves a tenant only the
 * ranges a grant names: one read grant for b's range, for this TE segment and the reader's
 * tenant, signed with our cluster key (common/grant.h), valid gc_ttl_ms from now (a streamed
 * batch is granted when it is answered, before its bytes are read), in g (its blob in blob,
 * MC_GRANT_SIZE(1) bytes). The range is held at least that long, so that no other reader's
 * bytes land where the grant still reaches. Verifier and signer are this process, so one
 * clock decides expiry. Without a cluster key no grant is attached (logged): the pull fails
 * PERMISSION_DENIED where the TE enforces grants. */
static void grant_staged(mc_store_t *s, McRpc__BatchGetOffloadObjectResponse *r, staged_t *b,
                         const char *tenant, McRpc__TeGrant *g, uint8_t *blob)
{
    store_disk_t *d = s->disk;
    uint64_t hold = mc_now_ms() + d->gc_ttl_ms; /* read before the expiry is set: held past it */
    mc_grant_range_t rg = {.addr = (uint64_t)(uintptr_t)(d->staging + b->off), .len = b->len};
    size_t len = 0;
    mc_status_t st = mc_grant_sign(s->auth, s->te_name, tenant, MC_GRANT_READ,
                                   mc_wall_ms() + d->gc_ttl_ms, &rg, 1, blob, &len);
    if (st != MC_OK) {
        MC_LOG_WARN("offload: no read grant for a tenant-bound reader: %s", mc_status_str(st));
        return;
    }
    b->grant_until_ms = hold;
    mc_rpc__te_grant__init(g);
    g->transport_endpoint = (char *)s->te_name;
    g->grant = (ProtobufCBinaryData){.len = len, .data = blob};
    r->grant = g;
}

/* Fills r for job j of entry b (statuses: j->sts; the pointers are the slots). With a key
 * served the batch is handed out (batch_id, grant for a tenant-bound reader); otherwise the
 * range is released. The arrays and the grant live in j (borrowed by r). */
static void job_answer(mc_store_t *s, staged_t *b, McRpc__BatchGetOffloadObjectResponse *r)
{
    store_disk_t *d = s->disk;
    job_t *j = b->job;
    mc_rpc__batch_get_offload_object_response__init(r);
    r->transfer_engine_addr = (char *)s->te_name;
    r->gc_ttl_ms = d->gc_ttl_ms;
    r->pointers = j->ptrs;
    r->statuses = j->sts;
    r->n_pointers = r->n_statuses = j->n;
    bool any = false;
    for (size_t i = 0; i < j->n; i++)
        any |= j->sts[i] == MC_OK;
    if (any && j->peer_tenant[0])
        grant_staged(s, r, b, j->peer_tenant, &j->grant, j->grant_blob);
    if (any) {
        r->batch_id = b->id;
        atomic_fetch_add(&d->disk_reads_served, 1);
    } else {
        staged_release(d, b->id); /* b is gone when nothing reads into it */
    }
}

static void srv_wake(void *ctx);

/* Any thread: the loop runs serve_ready soon (coalesced: at most one wake-up queued). */
static void loop_wake(mc_store_t *s)
{
    store_disk_t *d = s->disk;
    if (!atomic_exchange(&d->wake_posted, true) &&
        mc_rpc_server_post(d->srv, srv_wake, s) != MC_OK)
        atomic_store(&d->wake_posted, false); /* the cron serves the waiters */
}

/* Worker thread, from the engine (the ring's lock held): key q's landed prefix. */
static void job_progress(mc_disk_read_t *q, size_t ready, bool done)
{
    job_t *j = q->arg;
    size_t i = (size_t)(q - j->rq);
    if (ready > atomic_load(&j->ready[i]))
        atomic_store(&j->ready[i], ready);
    if (done) {
        atomic_store(&j->status[i], (int)q->status);
        atomic_store(&j->done[i], true);
    }
    loop_wake(j->s);
}

/* The final status of key i of job j (the worker, after the read). */
static mc_status_t job_key_status(const job_t *j, size_t i)
{
    const mc_disk_read_t *q = &j->rq[i];
    if (j->lookup[i] != MC_OK)
        return j->lookup[i];
    return q->status == MC_OK && q->len != j->sizes[i] ? MC_ERR_INVALID_REPLICA : q->status;
}

static void job_run(job_t *j)
{
    mc_store_t *s = j->s;
    store_disk_t *d = s->disk;
    if (j->batch)
        mc_disk_store_read_finish(j->batch);
    else
        mc_disk_store_read_batch(d->disk, j->rq, j->n, j->deadline_ns);
    bool timed_out = false;
    for (size_t i = 0; i < j->n; i++) {
        mc_status_t st = job_key_status(j, i);
        atomic_store(&j->status[i], (int)st);
        atomic_store(&j->done[i], true);
        timed_out |= st == MC_ERR_TIMEOUT;
        /* damaged (the engine dropped it) or gone: the master must stop sending readers */
        if (j->lookup[i] == MC_OK &&
            (st == MC_ERR_CHECKSUM || st == MC_ERR_OBJECT_NOT_FOUND))
            forget(d, j->tenant, strlen(j->tenant), j->rq[i].key, j->rq[i].key_len);
    }
    j->timed_out = timed_out;
    j->finished_ms = mc_now_ms();
    atomic_store(&j->finished, true); /* the loop owns j from here */
    loop_wake(s);
}

static void *read_worker(void *arg)
{
    mc_store_t *s = arg;
    store_disk_t *d = s->disk;
    pthread_mutex_lock(&d->q_mu);
    for (;;) {
        while (!d->q_head && !d->q_stop)
            pthread_cond_wait(&d->q_cv, &d->q_mu);
        if (!d->q_head)
            break;
        job_t *j = d->q_head;
        d->q_head = j->qnext;
        if (d->q_stop && !j->batch) { /* shutting down: not read (the loop is gone); a
                                         started read is finished (it holds its ring) */
            atomic_store(&j->finished, true);
            continue;
        }
        pthread_mutex_unlock(&d->q_mu);
        job_run(j);
        pthread_mutex_lock(&d->q_mu);
    }
    pthread_mutex_unlock(&d->q_mu);
    return NULL;
}

static void job_queue(store_disk_t *d, job_t *j)
{
    pthread_mutex_lock(&d->q_mu);
    job_t **p = &d->q_head;
    while (*p)
        p = &(*p)->qnext;
    *p = j;
    pthread_cond_signal(&d->q_cv);
    pthread_mutex_unlock(&d->q_mu);
}

/* Whether waiter w can be answered now; fills r. */
static bool waiter_ready(store_disk_t *d, const waiter_t *w, McRpc__WaitOffloadReadResponse *r)
{
    mc_rpc__wait_offload_read_response__init(r);
    staged_t *b = staged_find(d, w->batch_id);
    job_t *j = b ? b->job : NULL;
    if (!j || !j->stream || w->index >= j->n) {
        r->status = MC_ERR_OBJECT_NOT_FOUND;
        return true;
    }
    r->ready = atomic_load(&j->ready[w->index]);
    r->done = atomic_load(&j->done[w->index]);
    if (r->done)
        r->key_status = atomic_load(&j->status[w->index]);
    /* want 0 or the whole value (or more): the verdict; the whole value may have landed
     * (ready = size, done false) while the engine still hashes its last piece */
    return r->done || (w->want > 0 && w->want < j->sizes[w->index] && r->ready >= w->want);
}

/* Loop thread: answers every waiter whose bytes have landed, and every plain request whose
 * job is done, and frees the ranges that may go (a released batch whose read just ended). */
static void serve_ready(mc_store_t *s)
{
    store_disk_t *d = s->disk;
    atomic_store(&d->wake_posted, false); /* progress after this point wakes us again */
    for (size_t i = d->n_waiters; i-- > 0;) {
        McRpc__WaitOffloadReadResponse r;
        waiter_t *w = &d->waiters[i];
        if (!waiter_ready(d, w, &r))
            continue;
        mc_rpc_server_reply(d->srv, w->conn_id, MC_OP_WAIT_OFFLOAD_READ, w->req_id, MC_OK,
                            &r.base); /* a closed connection: nothing to do */
        d->waiters[i] = d->waiters[--d->n_waiters];
    }
    for (size_t i = d->n_staged; i-- > 0;) {
        staged_t *b = &d->staged[i];
        job_t *j = b->job;
        if (!j || !atomic_load(&j->finished) || j->stream || j->answered)
            continue;
        j->answered = true;
        for (size_t k = 0; k < j->n; k++)
            j->sts[k] = atomic_load(&j->status[k]);
        McRpc__BatchGetOffloadObjectResponse r;
        uint64_t conn = j->conn_id, req = j->req_id;
        job_answer(s, b, &r); /* may free b (nothing served) */
        mc_rpc_server_reply(d->srv, conn, MC_OP_BATCH_GET_OFFLOAD_OBJECT, req, MC_OK, &r.base);
    }
    staged_gc(d, mc_now_ms());
}

static void srv_cron(void *ctx) { serve_ready(ctx); }

/* The posted wake-up (mc_rpc_server_post runs it on the loop). */
static void srv_wake(void *ctx) { serve_ready(ctx); }

static mc_status_t h_get_offload(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                                 ProtobufCMessage **resp_p)
{
    mc_store_t *s = ctx;
    store_disk_t *d = s->disk;
    const McRpc__BatchGetOffloadObjectRequest *q = (const void *)req;
    McRpc__BatchGetOffloadObjectResponse *r =
        mc_rpc_arena_calloc(call->arena, 1, sizeof(*r));
    if (!r)
        return MC_ERR_NO_MEMORY;
    mc_rpc__batch_get_offload_object_response__init(r);
    *resp_p = &r->base;
    r->transfer_engine_addr = (char *)s->te_name;
    r->gc_ttl_ms = d->gc_ttl_ms;
    size_t n = q->n_keys;
    /* the tenant: a tenant-bound reader reads its own tenant's keys only */
    const char *tenant = q->tenant_id;
    const char *peer_tenant = call->peer && call->peer->tenant[0] ? call->peer->tenant : "";
    if (peer_tenant[0]) {
        if (tenant[0] && strcmp(tenant, peer_tenant) != 0) {
            r->status = MC_ERR_PERMISSION;
            return MC_OK;
        }
        tenant = peer_tenant;
    }
    if (mc_tenant_invalid(tenant) || n == 0 || n != q->n_sizes || q->timeout_ms > READ_TIMEOUT_MAX_MS) {
        r->status = MC_ERR_INVALID_PARAMS;
        return MC_OK;
    }
    if (n > READ_BATCH_MAX) {
        r->status = MC_ERR_TOO_LARGE;
        return MC_OK;
    }
    uint64_t total = 0, key_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        if (q->sizes[i] > d->staging_len || q->keys[i].len == 0 ||
            q->keys[i].len > MC_STORE_KEY_MAX) {
            r->status = q->keys[i].len ? MC_ERR_TOO_LARGE : MC_ERR_INVALID_KEY;
            return MC_OK;
        }
        total += round4k(q->sizes[i]);
        key_bytes += q->keys[i].len;
    }
    job_t *j = mc_calloc(1, sizeof(*j) + key_bytes);
    staged_t *b = j ? staged_alloc(d, total) : NULL;
    if (!b) {
        mc_free(j);
        r->status = j ? MC_ERR_NO_AVAILABLE_HANDLE : MC_ERR_NO_MEMORY; /* staging full */
        return MC_OK;
    }
    /* the job (the request and the arena are not kept) */
    b->job = j;
    j->s = s;
    j->n = n;
    j->stream = q->stream;
    j->conn_id = call->conn_id;
    j->req_id = call->req_id;
    snprintf(j->tenant, sizeof(j->tenant), "%s", tenant);
    snprintf(j->peer_tenant, sizeof(j->peer_tenant), "%s", peer_tenant);
    uint32_t tmo = q->timeout_ms ? q->timeout_ms : READ_TIMEOUT_DEFAULT_MS;
    j->deadline_ns = mc_now_ns() + (uint64_t)tmo * 1000000ull;
    uint64_t off = b->off;
    char *kp = j->keys;
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        memcpy(kp, q->keys[i].data, q->keys[i].len);
        mc_disk_loc_t loc;
        mc_status_t st = mc_disk_store_lookup(d->disk, j->tenant, kp, q->keys[i].len, &loc);
        if (st == MC_OK && loc.data_size != q->sizes[i])
            st = MC_ERR_INVALID_REPLICA;
        if (st == MC_ERR_OBJECT_NOT_FOUND)
            forget(d, j->tenant, strlen(j->tenant), kp, q->keys[i].len);
        j->lookup[i] = j->sts[i] = st;
        any |= st == MC_OK;
        j->sizes[i] = q->sizes[i];
        j->ptrs[i] = (uint64_t)(uintptr_t)(d->staging + off);
        /* a key not to read gets no room and no progress: the engine answers it without
         * reading, and its status stays the lookup's */
        bool rd = st == MC_OK;
        j->rq[i] = (mc_disk_read_t){.tenant = j->tenant, .key = kp, .key_len = q->keys[i].len,
                                    .buf = rd ? d->staging + off : NULL,
                                    .cap = rd ? round4k(q->sizes[i]) : 0, .late_ok = true,
                                    .progress = rd ? job_progress : NULL, .arg = j};
        kp += q->keys[i].len;
        off += round4k(q->sizes[i]);
    }
    if (!any) { /* nothing to read: answered now, the range freed */
        r->statuses = mc_rpc_arena_calloc(call->arena, n, sizeof(int32_t));
        r->pointers = mc_rpc_arena_calloc(call->arena, n, sizeof(uint64_t));
        if (r->statuses && r->pointers) {
            memcpy(r->statuses, j->sts, n * sizeof(int32_t));
            r->n_statuses = r->n_pointers = n;
        }
        atomic_store(&j->finished, true);
        j->answered = true;
        staged_release(d, b->id); /* frees j */
        return r->statuses && r->pointers ? MC_OK : MC_ERR_NO_MEMORY;
    }
    /* the reads go to the disk now, while a worker wakes up to follow them; with every ring
     * busy the worker reads them itself */
    if (mc_disk_store_read_start(d->disk, j->rq, n, j->deadline_ns, &j->batch) != MC_OK)
        j->batch = NULL;
    job_queue(d, j);
    if (!j->stream)
        return MC_RPC_DEFERRED; /* answered by serve_ready when the job is done */
    job_answer(s, b, r);
    return MC_OK;
}

/* Whether the caller may wait on or release batch id: a tenant-bound reader only its own
 * tenant's batches (an unknown id passes: nothing to see). */
static bool batch_mine(store_disk_t *d, const mc_rpc_call_t *call, uint64_t id)
{
    const char *peer_tenant = call->peer && call->peer->tenant[0] ? call->peer->tenant : "";
    staged_t *b = staged_find(d, id);
    return !peer_tenant[0] || !b || !b->job || strcmp(b->job->peer_tenant, peer_tenant) == 0;
}

static mc_status_t h_release(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                             ProtobufCMessage **resp_p)
{
    mc_store_t *s = ctx;
    const McRpc__ReleaseOffloadBufferRequest *q = (const void *)req;
    if (batch_mine(s->disk, call, q->batch_id))
        staged_release(s->disk, q->batch_id);
    McRpc__StatusResponse *r = mc_rpc_arena_calloc(call->arena, 1, sizeof(*r));
    if (!r)
        return MC_ERR_NO_MEMORY;
    mc_rpc__status_response__init(r);
    *resp_p = &r->base;
    return MC_OK;
}

/* WaitOffloadRead: answered at once when the prefix is there (or the key settled, or the
 * batch is unknown), else deferred until it is (serve_ready). A tenant-bound reader waits on
 * its own tenant's batches only. */
static mc_status_t h_wait(void *ctx, mc_rpc_call_t *call, const ProtobufCMessage *req,
                          ProtobufCMessage **resp_p)
{
    mc_store_t *s = ctx;
    store_disk_t *d = s->disk;
    const McRpc__WaitOffloadReadRequest *q = (const void *)req;
    McRpc__WaitOffloadReadResponse *r = mc_rpc_arena_calloc(call->arena, 1, sizeof(*r));
    if (!r)
        return MC_ERR_NO_MEMORY;
    *resp_p = &r->base;
    mc_rpc__wait_offload_read_response__init(r);
    if (!batch_mine(s->disk, call, q->batch_id)) {
        r->status = MC_ERR_PERMISSION;
        return MC_OK;
    }
    waiter_t w = {.conn_id = call->conn_id, .req_id = call->req_id, .batch_id = q->batch_id,
                  .want = q->ready, .index = q->index};
    if (waiter_ready(d, &w, r))
        return MC_OK;
    if (d->n_waiters == WAITERS_MAX) {
        r->status = MC_ERR_BUSY;
        return MC_OK;
    }
    d->waiters[d->n_waiters++] = w;
    return MC_RPC_DEFERRED;
}

static void *srv_main(void *arg)
{
    mc_rpc_server_run(arg);
    return NULL;
}

/* ------------------------------------------------------------------ setup */

static const char *env_lookup(const char *name, void *arg)
{
    (void)arg;
    return getenv(name);
}

/* An environment number in [lo, hi], else def; *bad set when it is set but not one. */
static uint64_t env_u64(const char *name, uint64_t def, uint64_t lo, uint64_t hi, bool *bad)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    uint64_t x = def;
    if (mc_parse_size(v, &x) != MC_OK || x < lo || x > hi) {
        MC_LOG_ERROR("offload: %s=%s is not a number in %llu..%llu", name, v,
                     (unsigned long long)lo, (unsigned long long)hi);
        *bad = true;
    }
    return x;
}

mc_status_t store_disk_start(mc_store_t *s, const char *path)
{
    mc_disk_config_t cfg;
    mc_disk_config_default(&cfg);
    char err[256] = "";
    const char *env_dir = NULL;
    mc_status_t st = mc_disk_config_from_env(&cfg, env_lookup, NULL, &env_dir, err, sizeof(err));
    if (st != MC_OK) {
        MC_LOG_ERROR("offload: %s", err);
        return st;
    }
    if (!path || !*path)
        path = env_dir;
    if (!path || !*path) {
        MC_LOG_ERROR("offload: no directory (ssd_offload_path or "
                     "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH)");
        return MC_ERR_INVALID_PARAMS;
    }
    bool bad = false;
    uint64_t staging = env_u64("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES", STAGING_DEFAULT,
                               1ull << 20, 1ull << 40, &bad);
    uint64_t gc = env_u64("MOONCAKE_OFFLOAD_CLIENT_BUFFER_GC_TTL_MS", GC_TTL_DEFAULT_MS, 100,
                          3600000, &bad);
    uint64_t hb = env_u64("MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS", HEARTBEAT_DEFAULT_MS / 1000,
                          1, 3600, &bad) * 1000;
    hb = env_u64("MC_OFFLOAD_HEARTBEAT_MS", hb, 10, 3600000, &bad);
    if (bad)
        return MC_ERR_INVALID_PARAMS;
    store_disk_t *d = mc_calloc(1, sizeof(*d));
    if (!d)
        return MC_ERR_NO_MEMORY;
    s->disk = d;
    pthread_mutex_init(&d->ev_mu, NULL);
    pthread_mutex_init(&d->q_mu, NULL);
    pthread_cond_init(&d->q_cv, NULL);
    d->capacity = cfg.total_size_limit;
    d->gc_ttl_ms = gc;
    d->hb_ms = hb;
    d->staging_len = round4k(staging);
    cfg.on_evict = on_evict;
    cfg.on_evict_arg = s;
    if ((st = mc_disk_store_open(path, &cfg, &d->disk)) != MC_OK) {
        MC_LOG_ERROR("offload: cannot open the disk store in %s: %s", path, mc_status_str(st));
        return st;
    }
    d->staging = mc_te_alloc_shareable(s->te, d->staging_len);
    if (!d->staging)
        return MC_ERR_NO_MEMORY;
    if ((st = mc_te_register(s->te, d->staging, d->staging_len, "cpu:0")) != MC_OK)
        return st;
    if (d->staging_len <= (1ull << 30))
        mc_disk_store_register_buffer(d->disk, d->staging, d->staging_len); /* optional */
    /* the offload RPC server, on the TE's host */
    char host[MC_HOST_MAX];
    uint16_t port;
    if (mc_net_split_hostport(s->te_name, host, &port) != MC_OK)
        snprintf(host, sizeof(host), "127.0.0.1");
    mc_rpc_server_opts_t so = {.host = host, .port = 0, .ctx = s, .auth = s->auth,
                               .cron_period_ms = 500, .cron = srv_cron};
    so.handlers[MC_OP_BATCH_GET_OFFLOAD_OBJECT] = h_get_offload;
    so.handlers[MC_OP_RELEASE_OFFLOAD_BUFFER] = h_release;
    so.handlers[MC_OP_WAIT_OFFLOAD_READ] = h_wait;
    if ((st = mc_rpc_server_create(&so, &d->srv)) != MC_OK)
        return st;
    snprintf(d->endpoint, sizeof(d->endpoint), "%s:%u", host, mc_rpc_server_port(d->srv));
    size_t workers = cfg.rings < READ_WORKERS_MAX ? cfg.rings : READ_WORKERS_MAX;
    for (; d->n_workers < workers; d->n_workers++)
        if (pthread_create(&d->workers[d->n_workers], NULL, read_worker, s) != 0)
            return MC_ERR_INTERNAL;
    if (pthread_create(&d->srv_thread, NULL, srv_main, d->srv) != 0)
        return MC_ERR_INTERNAL;
    d->srv_started = true;
    mc_disk_stats_t ds;
    mc_disk_store_stats(d->disk, &ds);
    MC_LOG_INFO("offload: disk store %s open (%llu objects recovered), reads served on %s",
                path, (unsigned long long)ds.objects, d->endpoint);
    /* the first mount now: a master that does not serve the disk tier fails setup */
    st = disk_mount(s);
    if (st == MC_ERR_UNABLE_OFFLOAD) {
        MC_LOG_ERROR("offload: the master refuses the local disk (UNABLE_OFFLOAD: it runs "
                     "without --enable_offload)");
        return st;
    }
    d->mounted = st == MC_OK; /* otherwise the offload thread tries again */
    if (pthread_create(&d->worker, NULL, worker_main, s) != 0)
        return MC_ERR_INTERNAL;
    d->worker_started = true;
    return MC_OK;
}

/* Stops both threads (the heartbeat stop flag is already set) and closes the disk. */
void store_disk_stop(mc_store_t *s)
{
    store_disk_t *d = s->disk;
    if (!d)
        return;
    if (d->worker_started) {
        pthread_mutex_lock(&s->hb_lock);
        s->hb_stop = 1;
        pthread_cond_broadcast(&s->hb_cond);
        pthread_mutex_unlock(&s->hb_lock);
        pthread_join(d->worker, NULL);
    }
    if (d->mounted) { /* nobody serves these disk replicas any more */
        McRpc__MountLocalDiskRequest q = MC_RPC__MOUNT_LOCAL_DISK_REQUEST__INIT;
        q.client_id = mc_master_client_id(&s->master);
        mc_status_t st = call_status(s, MC_OP_UNMOUNT_LOCAL_DISK, &q.base);
        if (st != MC_OK)
            MC_LOG_WARN("offload: UnmountLocalDiskSegment failed: %s", mc_status_str(st));
    }
    if (d->srv_started) {
        mc_rpc_server_stop(d->srv);
        pthread_join(d->srv_thread, NULL);
    }
    pthread_mutex_lock(&d->q_mu); /* the workers finish the reads they run (deadlines) */
    d->q_stop = true;
    pthread_cond_broadcast(&d->q_cv);
    pthread_mutex_unlock(&d->q_mu);
    for (size_t i = 0; i < d->n_workers; i++)
        pthread_join(d->workers[i], NULL);
    mc_rpc_server_destroy(d->srv);
    while (d->n_staged)
        staged_free_at(d, d->n_staged - 1);
    mc_disk_store_close(d->disk);
    if (d->staging) {
        mc_te_unregister(s->te, d->staging);
        mc_te_free_shareable(s->te, d->staging);
    }
    for (size_t i = 0; i < d->n_ev; i++)
        mc_free(d->ev_keys[i]);
    mc_free(d->ev_keys);
    mc_free(d->ev_lens);
    pthread_mutex_destroy(&d->ev_mu);
    pthread_mutex_destroy(&d->q_mu);
    pthread_cond_destroy(&d->q_cv);
    mc_free(d);
    s->disk = NULL;
}

void store_disk_stats(mc_store_t *s, uint64_t *objects, uint64_t *bytes, uint64_t *offloaded,
                      uint64_t *served)
{
    store_disk_t *d = s->disk;
    *objects = *bytes = *offloaded = *served = 0;
    if (!d)
        return;
    mc_disk_stats_t ds;
    mc_disk_store_stats(d->disk, &ds);
    *objects = ds.objects;
    *bytes = ds.live_bytes;
    *offloaded = atomic_load(&d->offloaded);
    *served = atomic_load(&d->disk_reads_served);
}

const char *store_disk_endpoint(const mc_store_t *s)
{
    return s->disk ? s->disk->endpoint : "";
}

/* Appends the disk tier's series (upstream's mooncake_ssd_* names, and ours) to *text_p (a
 * client metrics page; replaced by a new string). Nothing without a disk. */
mc_status_t store_disk_metrics_append(mc_store_t *s, char **text_p)
{
    store_disk_t *d = s->disk;
    if (!d)
        return MC_OK;
    mc_disk_stats_t ds;
    mc_disk_store_stats(d->disk, &ds);
    mc_prom_t p = {0};
    MC_PROM_PRINTF(&p, "%s", *text_p ? *text_p : "");
    mc_prom_help_type(&p, "mooncake_ssd_read_bytes_total", "counter",
                      "Bytes read from the SSD tier (checksum verified)");
    MC_PROM_PRINTF(&p, "mooncake_ssd_read_bytes_total %llu\n", (unsigned long long)ds.read_bytes);
    mc_prom_help_type(&p, "mooncake_ssd_write_bytes_total", "counter",
                      "Bytes written to the SSD tier (offloads and second-chance copies)");
    MC_PROM_PRINTF(&p, "mooncake_ssd_write_bytes_total %llu\n",
                   (unsigned long long)(ds.put_bytes + ds.readmitted_bytes));
    uint64_t le[MC_DISK_LAT_BUCKETS - 1];
    for (size_t i = 0; i < MC_DISK_LAT_BUCKETS - 1; i++)
        le[i] = mc_disk_lat_bounds_us[i];
    mc_prom_help_type(&p, "mooncake_ssd_read_latency_us", "histogram",
                      "SSD tier reads, lookup to verified bytes (us)");
    uint64_t n_lat = 0;
    for (size_t i = 0; i < MC_DISK_LAT_BUCKETS; i++)
        n_lat += ds.read_lat_us[i];
    mc_prom_histogram(&p, "mooncake_ssd_read_latency_us", "", le, ds.read_lat_us,
                      MC_DISK_LAT_BUCKETS - 1, ds.read_lat_sum_us, n_lat);
    static const char *const gauges[][2] = {
        {"mooncake_ssd_objects", "Objects on this storage server's disk"},
        {"mooncake_ssd_bytes", "Bytes of its bucket files (what the capacity counts)"},
        {"mooncake_ssd_staging_held_bytes",
         "Staging bytes held for readers (reads in flight, not yet released or expired)"},
    };
    const uint64_t gv[] = {ds.objects, ds.bytes_on_disk, atomic_load(&d->staged_bytes)};
    for (size_t i = 0; i < sizeof(gv) / sizeof(gv[0]); i++) {
        mc_prom_help_type(&p, gauges[i][0], "gauge", gauges[i][1]);
        MC_PROM_PRINTF(&p, "%s %llu\n", gauges[i][0], (unsigned long long)gv[i]);
    }
    static const char *const counters[][2] = {
        {"mooncake_ssd_checksum_failures_total", "Disk reads whose bytes failed the checksum"},
        {"mooncake_ssd_evicted_objects_total", "Objects evicted from the disk (watermarks)"},
        {"mooncake_ssd_offloaded_total", "Offload tasks written and confirmed"},
        {"mooncake_ssd_reads_served_total", "Disk reads served to readers"},
        {"mooncake_ssd_offload_failed_total",
         "Offload tasks not written (disk full or failing, or the memory reused meanwhile)"},
        {"mooncake_ssd_disk_full_total", "Disk writes refused for space (ENOSPC, limits)"},
        {"mooncake_ssd_readmitted_objects_total",
         "Objects read since written, re-appended when their bucket was evicted (second chance)"},
    };
    const uint64_t cv[] = {ds.checksum_failures, ds.evicted_objects, atomic_load(&d->offloaded),
                           atomic_load(&d->disk_reads_served), atomic_load(&d->offload_failed),
                           ds.disk_full, ds.readmitted_objects};
    for (size_t i = 0; i < sizeof(cv) / sizeof(cv[0]); i++) {
        mc_prom_help_type(&p, counters[i][0], "counter", counters[i][1]);
        MC_PROM_PRINTF(&p, "%s %llu\n", counters[i][0], (unsigned long long)cv[i]);
    }
    char *out = NULL;
    if (p.st == MC_OK && !(out = mc_buf_take_str(&p.b)))
        p.st = MC_ERR_NO_MEMORY;
    mc_buf_free(&p.b);
    if (p.st == MC_OK) {
        mc_free(*text_p);
        *text_p = out;
    }
    return p.st;
}

/* ------------------------------------------------------------------ reader */

/* Releases batch id on c now (c locked); an unanswered release is freed by the owner's TTL. */
static void release_now(reader_conn_t *c, uint64_t id)
{
    McRpc__ReleaseOffloadBufferRequest rel = MC_RPC__RELEASE_OFFLOAD_BUFFER_REQUEST__INIT;
    rel.batch_id = id;
    ProtobufCMessage *rr = NULL;
    mc_rpc_client_call(c->rpc, MC_OP_RELEASE_OFFLOAD_BUFFER, &rel.base, &rr, 1000);
    mc_rpc_response_free(rr);
}

/* Sends c's deferred release now, if it holds one (c locked). */
static void release_flush(reader_conn_t *c)
{
    if (c->rpc && c->release_id)
        release_now(c, c->release_id);
    c->release_id = 0;
}

/* The reader is done with batch id of bytes staged bytes on c (c locked): a small batch's
 * release waits for the next request on c (group_request sends it first, in the same
 * write); a larger one, or one while another waits, is sent now. */
static void release_batch(reader_conn_t *c, uint64_t id, uint64_t bytes)
{
    if (bytes > RELEASE_DEFER_MAX) {
        release_now(c, id);
        return;
    }
    release_flush(c);
    c->release_id = id;
}

/* The cached connection to endpoint, locked (unlock with pthread_mutex_unlock(&c->mu)); NULL
 * when none can be made. */
static reader_conn_t *conn_get(mc_store_t *s, const char *endpoint)
{
    pthread_mutex_lock(&s->dconn_mu);
    if (!s->dconns && (s->dconns = mc_calloc(READER_CONNS, sizeof(reader_conn_t))))
        for (size_t i = 0; i < READER_CONNS; i++)
            pthread_mutex_init(&s->dconns[i].mu, NULL);
    if (!s->dconns) {
        pthread_mutex_unlock(&s->dconn_mu);
        return NULL;
    }
    reader_conn_t *c = NULL;
    for (size_t i = 0; i < READER_CONNS && !c; i++)
        if (s->dconns[i].rpc && strcmp(s->dconns[i].endpoint, endpoint) == 0)
            c = &s->dconns[i];
    if (!c) {
        c = &s->dconns[s->dconn_next++ % READER_CONNS];
        pthread_mutex_lock(&c->mu); /* no call in flight on the one replaced */
        c->release_id = 0; /* not sent under dconn_mu: the owner's TTL frees that range */
        mc_rpc_client_destroy(c->rpc);
        c->rpc = NULL;
        mc_rpc_client_opts_t o = {.auth = s->auth};
        if (strlen(endpoint) < sizeof(c->endpoint) &&
            mc_rpc_client_create(endpoint, &o, &c->rpc) == MC_OK)
            snprintf(c->endpoint, sizeof(c->endpoint), "%s", endpoint);
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_lock(&c->mu);
    pthread_mutex_unlock(&s->dconn_mu);
    if (!c->rpc) {
        pthread_mutex_unlock(&c->mu);
        return NULL;
    }
    return c;
}

void store_disk_readers_free(mc_store_t *s)
{
    if (!s->dconns)
        return;
    for (size_t i = 0; i < READER_CONNS; i++) {
        release_flush(&s->dconns[i]); /* no call runs: the store is going */
        mc_rpc_client_destroy(s->dconns[i].rpc);
        pthread_mutex_destroy(&s->dconns[i].mu);
    }
    mc_free(s->dconns);
    s->dconns = NULL;
}

/* The landed prefix to wait for when ready of size bytes are known to have landed (size when
 * all have: then the verdict). */
static uint64_t pull_want(uint64_t ready, uint64_t size)
{
    uint64_t step = (size - ready) / 2 < PULL_MAX ? (size - ready) / 2 : PULL_MAX;
    return ready < size ? ready + (step ? step : 1) : size;
}

/* Pulls bytes [from, to) of key i (size bytes) of batch b into parts with one transfer. The
 * whole value in one request comes back hashed by the engine as it was received (te_hashed.h:
 * tcp on one connection per transfer, or the same host's copy): then *whole_p is set and
 * *whole_hash is that hash; otherwise the bytes are added to hs: a range by the engine as it
 * receives them where it can (xfer_plan_t.hash_cont), else here after the pull. sub: n_parts
 * entries of scratch. */
static mc_status_t pull_range(mc_store_t *s, const McRpc__BatchGetOffloadObjectResponse *b,
                              uint32_t i, const struct iovec *parts, size_t n_parts,
                              uint64_t from, uint64_t to, uint64_t size, struct iovec *sub,
                              mc_hash_stream_t *hs, bool *whole_p, uint64_t *whole_hash)
{
    xfer_plan_t plan = {0};
    bool whole = from == 0 && to == size;
    size_t k = store_iov_sub(parts, n_parts, from, to - from, sub);
    mc_status_t st = store_plan_add(s, &plan, MC_TE_READ, b->transfer_engine_addr,
                                    b->pointers[i] + from, to - from, sub, k, 0);
    if (!whole) /* a range: the engine continues the value's hash as the bytes arrive */
        plan.hash_cont = hs;
    if (st == MC_OK)
        st = store_plan_run(s, &plan, NULL);
    const uint64_t *eh = st == MC_OK && whole && plan.n
                             ? store_plan_engine_hash(&plan, 0, plan.n - 1, size)
                             : NULL;
    if (eh) {
        *whole_p = true;
        *whole_hash = *eh;
    } else if (st == MC_OK && !store_plan_engine_continued(&plan)) {
        for (size_t j = 0; j < k; j++)
            mc_hash_stream_update(hs, sub[j].iov_base, sub[j].iov_len);
    }
    store_plan_free(&plan);
    return st;
}

/* Follows key i of streamed batch b on c until all size bytes are in parts and the owner's
 * read has settled with the whole value's checksum verified, or the deadline (deadline_ms,
 * mc_now_ms) passes; *hash_p = the reader's hash of every byte pulled. With follow, the landed
 * prefix is pulled with the TE (at most PULL_MAX per transfer) and hashed while the
 * WaitOffloadRead for more (pull_want) is already on its way, so the owner's answer travels
 * during the pull; without, the first answer is the verdict and the value comes in one pull
 * (hashed by the engine as it arrives where it can: pull_range). */
static mc_status_t stream_pull(mc_store_t *s, reader_conn_t *c,
                               const McRpc__BatchGetOffloadObjectResponse *b, uint32_t i,
                               uint64_t size, const struct iovec *parts, size_t n_parts,
                               bool follow, uint64_t deadline_ms, uint64_t *hash_p)
{
    mc_hash_stream_t hs;
    struct iovec *sub = mc_calloc(n_parts ? n_parts : 1, sizeof(*sub));
    if (!sub || mc_hash_stream_init(&hs) != 0) {
        mc_free(sub);
        return MC_ERR_NO_MEMORY;
    }
    McRpc__WaitOffloadReadRequest w = MC_RPC__WAIT_OFFLOAD_READ_REQUEST__INIT;
    w.batch_id = b->batch_id;
    w.index = i;
    mc_rpc_pending_t call = {.opcode = MC_OP_WAIT_OFFLOAD_READ, .req = &w.base};
    mc_rpc_inflight_t f;
    bool asking = false, done = false, whole = false;
    uint64_t pulled = 0, ready = 0; /* ready: the landed prefix the owner last reported */
    uint64_t whole_hash = 0;        /* the engine's hash of a whole-value pull (whole) */
    mc_status_t st = MC_OK;
    for (;;) {
        if (!done) { /* ask for the next piece (for a 0-byte value: the verdict) */
            uint64_t now = mc_now_ms();
            if (now >= deadline_ms) {
                st = MC_ERR_TIMEOUT;
                break;
            }
            w.ready = follow ? pull_want(ready, size) : size;
            call.resp = NULL;
            /* the owner answers by its deadline (the same as ours) at the latest */
            st = mc_rpc_client_call_send(c->rpc, &call, 1, (uint32_t)(deadline_ms - now) + 1000,
                                         false, &f);
            if (st != MC_OK)
                break;
            asking = true;
        }
        while (pulled < ready && st == MC_OK) { /* meanwhile pull what has landed */
            uint64_t to = pulled == 0 && ready == size ? size /* the whole value: one pull */
                          : ready - pulled < PULL_MAX  ? ready
                                                       : pulled + PULL_MAX;
            st = pull_range(s, b, i, parts, n_parts, pulled, to, size, sub, &hs, &whole,
                            &whole_hash);
            pulled = to;
        }
        if (st != MC_OK || done)
            break;
        st = mc_rpc_client_call_recv(&f);
        asking = false;
        McRpc__WaitOffloadReadResponse *wr = (void *)call.resp;
        if (st == MC_OK)
            st = call.status;
        if (st == MC_OK)
            st = wr->status;
        if (st == MC_OK && wr->ready > ready)
            ready = wr->ready < size ? wr->ready : size;
        done = st == MC_OK && wr->done;
        if (done && wr->key_status != MC_OK)
            st = wr->key_status;
        mc_rpc_response_free(call.resp);
        if (st != MC_OK)
            break;
    }
    if (asking) { /* a pull failed with a wait out: collect it (the connection is held) */
        mc_rpc_client_call_recv(&f);
        mc_rpc_response_free(call.resp);
    }
    if (st == MC_OK && pulled != size) /* settled OK without all of it: nothing to trust */
        st = MC_ERR_RPC_FAIL;
    uint64_t h = mc_hash_stream_final(&hs);
    *hash_p = whole ? whole_hash : h;
    mc_free(sub);
    return st;
}

/* One streamed BatchGetOffloadObject of a read_many call: keys [at, at+m) of it. From
 * group_send to group_recv its request is in flight (the calls borrow q, kb and rel: a group
 * is not copied then). */
typedef struct group {
    size_t at, m;
    mc_status_t st; /* the request's */
    ProtobufCMessage *r;
    McRpc__BatchGetOffloadObjectResponse *b;
    bool sent; /* in flight: group_recv collects it */
    ProtobufCBinaryData kb[READ_BATCH_MAX];
    McRpc__BatchGetOffloadObjectRequest q;
    McRpc__ReleaseOffloadBufferRequest rel;
    mc_rpc_pending_t calls[2];
    mc_rpc_inflight_t f;
} group_t;

/* How many of the n keys (sizes) from the first go in one request: at most READ_BATCH_MAX
 * keys and READ_GROUP_BYTES of staging (a larger value goes alone). */
static size_t group_len(const uint64_t *sizes, size_t n)
{
    uint64_t bytes = 0;
    size_t m = 0;
    while (m < n && m < READ_BATCH_MAX &&
           (m == 0 || bytes + round4k(sizes[m]) <= READ_GROUP_BYTES))
        bytes += round4k(sizes[m++]);
    return m;
}

/* Sends the owner on c the request for g's keys (streamed: answered once the reads are
 * started); group_recv takes the answer. keys and sizes stay the caller's until then. */
static void group_send(mc_store_t *s, reader_conn_t *c, group_t *g, const char *const *keys,
                       const uint64_t *sizes, uint64_t deadline_ms)
{
    g->r = NULL;
    g->b = NULL;
    g->sent = false;
    uint64_t now = mc_now_ms();
    if (now >= deadline_ms) {
        g->st = MC_ERR_TIMEOUT;
        return;
    }
    uint32_t tmo = (uint32_t)(deadline_ms - now);
    for (size_t i = 0; i < g->m; i++)
        g->kb[i] = mc_wire_key_str(keys[g->at + i]);
    g->q = (McRpc__BatchGetOffloadObjectRequest)MC_RPC__BATCH_GET_OFFLOAD_OBJECT_REQUEST__INIT;
    g->q.keys = g->kb;
    g->q.n_keys = g->m;
    g->q.sizes = (uint64_t *)sizes + g->at;
    g->q.n_sizes = g->m;
    g->q.tenant_id = s->master.tenant;
    g->q.timeout_ms = tmo;
    g->q.stream = true;
    /* a deferred release goes first, in the same write: the owner handles it before it
     * allocates this request's range; its answer is not looked at (unanswered: the owner's
     * TTL frees it) */
    g->rel = (McRpc__ReleaseOffloadBufferRequest)MC_RPC__RELEASE_OFFLOAD_BUFFER_REQUEST__INIT;
    g->rel.batch_id = c->release_id;
    g->calls[0] = (mc_rpc_pending_t){.opcode = MC_OP_RELEASE_OFFLOAD_BUFFER, .req = &g->rel.base};
    g->calls[1] = (mc_rpc_pending_t){.opcode = MC_OP_BATCH_GET_OFFLOAD_OBJECT, .req = &g->q.base};
    size_t first = c->release_id ? 0 : 1;
    c->release_id = 0;
    g->st = mc_rpc_client_call_send(c->rpc, g->calls + first, 2 - first, tmo + 1000, false,
                                    &g->f);
    g->sent = g->st == MC_OK;
}

/* Takes the answer to g's request (group_send) into g->st, g->r and g->b. */
static void group_recv(mc_store_t *s, group_t *g)
{
    if (!g->sent)
        return; /* g->st says why (nothing in flight, no answers held) */
    g->sent = false;
    g->st = mc_rpc_client_call_recv(&g->f);
    mc_rpc_response_free(g->calls[0].resp);
    g->r = g->calls[1].resp;
    if (g->st == MC_OK)
        g->st = g->calls[1].status;
    g->b = (void *)g->r;
    if (g->st == MC_OK)
        g->st = g->b->status;
    if (g->st == MC_OK && (g->b->n_statuses != g->m || g->b->n_pointers != g->m))
        g->st = MC_ERR_RPC_FAIL;
    if (g->st == MC_OK && g->b->grant)
        store_grants_present(s, &g->b->grant, 1); /* we are tenant-bound: the owner granted it */
}

/* Asks the owner on c for g's keys and takes the answer. */
static void group_request(mc_store_t *s, reader_conn_t *c, group_t *g, const char *const *keys,
                          const uint64_t *sizes, uint64_t deadline_ms)
{
    group_send(s, c, g, keys, sizes, deadline_ms);
    group_recv(s, g);
}

/* Pulls g's keys in order, each once its verdict is in (the call's last key as its pieces
 * land), then releases the batch (also after a failure: the owner frees it once its read is
 * over). The next group (if any) is asked for before g's last key is pulled: the owner's disk,
 * done or nearly done with g, goes on with it while that key travels. */
static void group_pull(mc_store_t *s, reader_conn_t *c, group_t *g, group_t *next,
                       const char *const *keys, const uint64_t *sizes,
                       const struct iovec *const *parts, const size_t *n_parts,
                       uint64_t deadline_ms, uint64_t *hashes, mc_status_t *sts)
{
    McRpc__BatchGetOffloadObjectResponse *b = g->b;
    for (size_t i = 0; i < g->m; i++) {
        size_t k = g->at + i;
        if (i + 1 == g->m && next->m)
            group_request(s, c, next, keys, sizes, deadline_ms);
        sts[k] = g->st == MC_OK ? b->statuses[i] : g->st;
        if (sts[k] == MC_OK && !b->batch_id)
            sts[k] = MC_ERR_RPC_FAIL;
        /* only the call's last key follows its pieces as they land (a wake-up of both sides
         * per answer); an earlier one is pulled whole after its verdict while the owner's
         * disk reads the keys after it */
        bool follow = (i + 1 == g->m && !next->m);
        if (sts[k] == MC_OK)
            sts[k] = stream_pull(s, c, b, (uint32_t)i, sizes[k], parts[k], n_parts[k], follow,
                                 deadline_ms, &hashes[k]);
    }
    if (g->r && b->batch_id) {
        uint64_t staged = 0;
        for (size_t i = 0; i < g->m; i++)
            staged += round4k(sizes[g->at + i]);
        release_batch(c, b->batch_id, staged);
    }
    mc_rpc_response_free(g->r);
    g->r = NULL;
}

/* A reader's deadline for a call starting now: the store's RPC timeout, at most 60 s. */
static uint64_t read_deadline(const mc_store_t *s)
{
    uint32_t tmo = s->master.timeout_ms ? s->master.timeout_ms : READ_TIMEOUT_DEFAULT_MS;
    return mc_now_ms() + (tmo < READ_TIMEOUT_MAX_MS ? tmo : READ_TIMEOUT_MAX_MS);
}

void store_disk_read_many(mc_store_t *s, const char *endpoint, size_t n,
                          const char *const *keys, const uint64_t *sizes,
                          const struct iovec *const *parts, const size_t *n_parts,
                          uint64_t *hashes, mc_status_t *sts)
{
    uint64_t deadline_ms = read_deadline(s);
    reader_conn_t *c = conn_get(s, endpoint);
    if (!c) {
        for (size_t i = 0; i < n; i++)
            sts[i] = MC_ERR_CONNECTION;
        return;
    }
    group_t cur = {.at = 0, .m = group_len(sizes, n)};
    if (cur.m)
        group_request(s, c, &cur, keys, sizes, deadline_ms);
    while (cur.m) {
        group_t next = {.at = cur.at + cur.m};
        next.m = group_len(sizes + next.at, n - next.at);
        group_pull(s, c, &cur, &next, keys, sizes, parts, n_parts, deadline_ms, hashes, sts);
        cur = next;
    }
    pthread_mutex_unlock(&c->mu);
}

/* A single get's request sent to the owner its disk hint names before the master answered
 * (store_disk_spec_start); the connection to that owner is held until store_disk_spec_end. */
struct store_disk_spec {
    reader_conn_t *c;
    group_t g;
    const char *key; /* the caller's */
    uint64_t size, deadline_ms;
    char endpoint[MC_HINT_ENDPOINT_MAX];
};

store_disk_spec_t *store_disk_spec_start(mc_store_t *s, const char *key, uint64_t cap)
{
    mc_replica_hint_t h;
    if (!s->disk_hints || !mc_hint_get(s->disk_hints, key, &h) || h.size == 0 || h.size > cap)
        return NULL;
    store_disk_spec_t *sp = mc_malloc(sizeof(*sp));
    if (!sp)
        return NULL;
    sp->deadline_ms = read_deadline(s);
    if (!(sp->c = conn_get(s, h.endpoint))) {
        mc_free(sp);
        return NULL;
    }
    sp->key = key;
    sp->size = h.size;
    memcpy(sp->endpoint, h.endpoint, sizeof(sp->endpoint));
    sp->g.at = 0;
    sp->g.m = 1;
    group_send(s, sp->c, &sp->g, &sp->key, &sp->size, sp->deadline_ms);
    return sp;
}

/* Ends sp: with parts (rd is the replica sp asked), follows the read into them as
 * store_disk_read does and returns its status; without, gives it up (the batch released).
 * Unlocks the connection, frees sp. */
static mc_status_t store_disk_spec_end(mc_store_t *s, store_disk_spec_t *sp,
                                       const struct iovec *parts, size_t n_parts,
                                       uint64_t *hash_p)
{
    mc_status_t st = MC_OK;
    group_recv(s, &sp->g);
    if (parts) {
        group_t none = {.m = 0};
        group_pull(s, sp->c, &sp->g, &none, &sp->key, &sp->size, &parts, &n_parts,
                   sp->deadline_ms, hash_p, &st);
    } else {
        if (sp->g.r && sp->g.b->batch_id)
            release_batch(sp->c, sp->g.b->batch_id, round4k(sp->size));
        mc_rpc_response_free(sp->g.r);
    }
    pthread_mutex_unlock(&sp->c->mu);
    mc_free(sp);
    return st;
}

void store_disk_spec_drop(mc_store_t *s, store_disk_spec_t *sp, const char *key)
{
    if (!sp)
        return;
    store_disk_spec_end(s, sp, NULL, 0, NULL);
    mc_hint_drop(s->disk_hints, key); /* the master named another replica, or none */
}

mc_status_t store_disk_read(mc_store_t *s, const char *key, const McRpc__ReplicaDesc *rd,
                            uint64_t size, const struct iovec *parts, size_t n_parts,
                            store_disk_spec_t **spec, uint64_t *hash_p)
{
    store_disk_spec_t *sp = spec ? *spec : NULL;
    if (spec)
        *spec = NULL;
    if (sp && sp->size == size && strcmp(sp->endpoint, rd->transport_endpoint) == 0) {
        atomic_fetch_add(&s->n_spec_hits, 1); /* the master named the replica asked */
        return store_disk_spec_end(s, sp, parts, n_parts, hash_p);
    }
    store_disk_spec_drop(s, sp, key); /* before another connection is taken */
    mc_status_t st;
    store_disk_read_many(s, rd->transport_endpoint, 1, &key, &size, &parts, &n_parts, hash_p,
                         &st);
    return st; /* the caller logs a failure */
}

void store_disk_learn(mc_store_t *s, const char *key, const McRpc__ReplicaDesc *rd,
                      uint64_t size)
{
    if (!s->disk_hints)
        return;
    mc_replica_hint_t h;
    if (rd && store_hint_make(s, rd, NULL, 0, &h)) { /* a guess only: no lease */
        h.size = size;
        mc_hint_set(s->disk_hints, key, &h);
    } else {
        mc_hint_drop(s->disk_hints, key);
    }
}
