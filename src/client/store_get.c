/* Store client reads: mc_store_get, mc_store_get_into and the batch gets.
 *
 * A get finds the object's bytes in one of three ways, cheapest first: under a read lease this
 * client still holds (the lease cache: no master round trip), from a replica hint read while
 * the master lookup is in flight (speculative, objects up to SPEC_MAX_OBJECT in caller
 * memory; a disk replica's owner is asked at that time too, store_disk_spec_start), or after
 * the lookup. Whatever the way, the bytes count only once they hash to the
 * checksum recorded at PutEnd and the lease was still running when they had all arrived; a key
 * that fails is asked again (GET_TRIES, then alone in a batch) and otherwise fails: never
 * unverified bytes. A key the master answers REPLICA_IS_NOT_READY for is asked again for a
 * bounded time ("Keys not ready" below).
 *
 * Ownership: heap results are malloc'd here and handed to the caller (free()); on failure they
 * are freed here. Master answers are freed before return (batch: they live in one arena).
 * No locks of its own: counters are atomics, the hint table locks internally.
 */
#include "client/store_int.h"

#include "common/alloc.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/payload.h"
#include "common/time.h"
#include "rpc/arena.h"
#include "rpc/frame.h"

#include <string.h>

/* A single-key get started from the key's replica hint (replica_hint.h) before the master's
 * answer arrives, so the lookup and the read overlap. spec_wait() finishes it after the
 * lookup; spec_usable() says whether its bytes can stand for the object the master described
 * (the caller still checks lease and checksum, as for any read). Batch gets speculate in
 * batch_get_common with the same rule (hint_replica). */
typedef struct spec_read {
    xfer_plan_t plan;
    mc_te_transfer_t *xfer;
    mc_replica_hint_t hint; /* size 0 = nothing started */
    bool failed;            /* the read did not complete */
} spec_read_t;

/* Per key of a batch get (bget_t.k[i]). */
typedef struct bget_key {
    const McRpc__ReplicaListResponse *rl; /* the lookup's answer (lives in bget_t.resp_arena);
                                             NULL: not looked up, or not found */
    const McRpc__ReplicaDesc *read_from;  /* the replica of rl its bytes came from */
    struct iovec heap_iov;                /* heap mode: its buffer (heap[i]) and size */
    uint64_t t0;                          /* when its lookup was sent (its lease starts then) */
    bool early_read;                      /* read before the lookup answered (bget_t.early[i]) */
    bool engine_hashed;                   /* engine_hash: the XXH3 of the engine_len bytes its */
    uint64_t engine_hash, engine_len;     /* read delivered, computed by the engine (same host) */
    bool checked, ok, lease_ok;           /* bget_check_key ran; its verdict */
    bool disk;                            /* read_from is LOCAL_DISK: bget_read_disk */
    bool learned;                         /* its hint went into the table while its read ran
                                             (bget_learn_planned): dropped if the read fails */
} bget_key_t;

/* Pipelined lookups (bget_lookup_and_read): a batch whose lookup lists more than
 * BGET_PIPE_MIN keys that were not read early is looked up in sub-batches of BGET_PIPE_FIRST
 * keys, then twice as many each time, the last one taking the rest once fewer than twice its
 * size are left (512 keys: 32, 64, 128, 288). Sub-batch k+1's lookup is sent before sub-batch
 * k's reads are waited for, so the master answers while the objects arrive. One thread does it
 * all (no engine thread wakes up for the reads: they are started reserved, and the lookup's
 * answer waits in its socket until the reads are in).
 *
 * The threshold is where the overlap pays: every sub-batch is one more engine transfer, and
 * over tcp a transfer costs a round trip to the storage server before its first byte (on a
 * 2-vCPU VM: 32 x 4 KiB in ~95 us, 128 x 4 KiB in ~210 us), while a lookup costs ~30 us plus
 * ~0.2 us a key. A first read of 128 x 4 KiB over tcp took a median 318-367 us as one lookup
 * and one transfer against 396-560 us as 32 + 96 (the raw engine 185-245 us; same host about
 * 180-240 us either way); at 512 keys the pipeline and one lookup were level over tcp and the
 * pipeline ahead on the same host (mc_store_bench --getpath --cases=4k128,4k512). */
#define BGET_PIPE_MIN 256
#define BGET_PIPE_FIRST 32
#define BGET_MAX_SUBS 16 /* 16 * 2^k keys per sub-batch reach STORE_MAX_BATCH well before */
_Static_assert(BGET_MAX_SUBS + 1 == STORE_SCRATCH_PLANS, "a plan per sub-batch and the early one");

/* One sub-batch of the lookup: listed keys [lo, hi) (bget_t.idx), their lookup, their reads. */
typedef struct bget_sub {
    size_t lo, hi;
    uint64_t t0;                /* when its lookup was sent (its leases count from then) */
    McRpc__BatchKeyRequest req; /* req.keys: allocated by bget_lookup_send, freed by _recv */
    mc_master_inflight_t in;    /* the lookup in flight */
    xfer_plan_t *plan;          /* in the batch's scratch */
} bget_sub_t;

/* One batch get, from bget_init to bget_free. The arrays that the hint table and the transfer
 * plans take whole (early, hinted, failed, learn*) stay arrays; the rest is per key in k. All
 * of them and the plans live in a scratch taken from the handle's pool (store_scratch_t) and
 * handed back by bget_free, so a warm batch makes no allocation of its own. */
typedef struct bget {
    mc_store_t *s;
    size_t n;
    const char *const *keys;
    const struct iovec *const *parts; /* caller memory mode (heap == NULL) */
    const size_t *n_parts;
    void **heap;                      /* heap mode: heap[i], freed by bget_free on failure */
    int64_t *results;
    bget_key_t *k;
    /* early[i]: where key i was read before the lookup answered (k[i].early_read); under a
     * cached lease if early[i].lease_until_ms != 0 (no lookup), else a guess */
    mc_replica_hint_t *early;
    bool *hinted;
    unsigned char *failed;            /* per key, set by the plans (store_plan_finish) */
    char **req_keys;                  /* the lookup: m keys, req_keys[j] is key idx[j] */
    size_t *idx, m;
    /* what the lookups taught: learn[0, n_learned) went into the hint table while their reads
     * ran (bget_learn_planned), the rest is recorded together at the end (mc_hint_set_many) */
    const char **learn_keys;
    mc_replica_hint_t *learn;
    size_t n_learn, n_learned;
    uint64_t lease_hits, spec_hits;   /* added to the handle's counters once, at the end */
    store_scratch_t *scratch;
    xfer_plan_t *early_plan;          /* scratch->plans[0]; sub-batch j has plans[1 + j] */
    mc_te_transfer_t *early_x;        /* early_plan in flight (bget_read_early) */
    mc_status_t early_st;
    bool early_done;                  /* early_plan finished (after the first lookup) */
    const xfer_plan_t *done_plan;     /* the plan bget_check_done reports on */
    bget_sub_t sub[BGET_MAX_SUBS];    /* the lookup's sub-batches, in order */
    size_t n_sub;
    mc_rpc_arena_t resp_arena;        /* the lookups' answers: one arena, not allocations per key */
} bget_t;

static void spec_start(mc_store_t *s, spec_read_t *sp, const char *key,
                       const struct iovec *parts, size_t n_parts, uint64_t cap);
static void spec_wait(mc_store_t *s, spec_read_t *sp, const char *key);
static const McRpc__ReplicaDesc *hint_replica(const mc_replica_hint_t *h,
                                              const McRpc__ReplicaListResponse *rl);
static const McRpc__ReplicaDesc *spec_usable(const spec_read_t *sp,
                                             const McRpc__ReplicaListResponse *rl);
static const char *spec_failed_endpoint(const spec_read_t *sp);
static uint64_t chunk_len(uint64_t size, uint64_t c);
static mc_status_t read_hashed(mc_store_t *s, const char *endpoint, uint64_t addr, uint64_t size,
                               const struct iovec *parts, size_t n_parts, uint64_t *hash_p);
static bool lease_usable(const mc_replica_hint_t *h, uint64_t now_ms);
static bool lease_cached(mc_store_t *s, const char *key, mc_replica_hint_t *h);
static bool lease_cache_read(mc_store_t *s, const char *key, const mc_replica_hint_t *h,
                             const struct iovec *parts, size_t n_parts);
static int64_t store_read_verified(mc_store_t *s, const char *key,
                                   const McRpc__ReplicaListResponse *rl,
                                   const struct iovec *parts, size_t n_parts, uint64_t t0_ms,
                                   const char *avoid, bool last_try, store_disk_spec_t **spec);
static void prefault_heap(void *buf, size_t len);
static int64_t get_into_once(mc_store_t *s, const char *key, const struct iovec *parts,
                             size_t n_parts, uint64_t cap, bool last_try);
static int64_t get_heap_once(mc_store_t *s, const char *key, void **buf_p, bool last_try);
static int64_t batch_get_alone(mc_store_t *s, const char *key, void **heap_slot,
                               struct iovec *heap_iov, const struct iovec *kp, size_t kn);
static mc_status_t bget_init(bget_t *b);
static void bget_free(bget_t *b, mc_status_t st);
static const struct iovec *bget_dest(const bget_t *b, size_t i, size_t *kn);
static bool bget_early_key(bget_t *b, size_t i, uint64_t now, uint64_t cap);
static void bget_read_early(bget_t *b);
static void bget_finish_early(bget_t *b);
static bget_sub_t *bget_sub_next(bget_t *b, size_t lo, size_t *size);
static void bget_lookup_send(bget_t *b, bget_sub_t *sb);
static mc_status_t bget_lookup_recv(bget_t *b, bget_sub_t *sb);
static void bget_lookup_and_read(bget_t *b);
static void bget_plan_read(bget_t *b, size_t i, const McRpc__ReplicaListResponse *rl,
                           xfer_plan_t *plan);
static void bget_check_key(bget_t *b, size_t i, uint64_t now_ms);
static void bget_check_done(void *arg, size_t i, size_t first, size_t last, uint64_t now_ms);
static void bget_verify_key(bget_t *b, size_t i, uint64_t now_ms);
static mc_status_t batch_get_run(mc_store_t *s, size_t n, const char *const *keys,
                                 const struct iovec *const *parts, const size_t *n_parts,
                                 void **heap, int64_t *results);
static mc_status_t batch_get_common(mc_store_t *s, size_t n, const char *const *keys,
                                    const struct iovec *const *parts, const size_t *n_parts,
                                    void **heap, int64_t *results);

/* ------------------------------------------------------------------ get */

/* Replica order for reads: our own segment first, then the others in the master's order, then
 * those on `avoid` (an endpoint that just failed us; may be NULL). Writes at most `cap`
 * indexes into order[] and returns how many. */
size_t store_replica_order(const mc_store_t *s, McRpc__ReplicaDesc **reps, size_t n, size_t *order,
                           size_t cap, const char *avoid)
{
    size_t k = 0;
    for (int pass = 0; pass < 3; pass++) {
        for (size_t r = 0; r < n && k < cap; r++) {
            const char *ep = reps[r]->transport_endpoint;
            int rank = strcmp(ep, s->te_name) == 0 ? 0 : avoid && strcmp(ep, avoid) == 0 ? 2 : 1;
            if (rank == pass)
                order[k++] = r;
        }
    }
    return k;
}

/* ------------------------------------------------------------------ speculative reads */

static void spec_start(mc_store_t *s, spec_read_t *sp, const char *key,
                       const struct iovec *parts, size_t n_parts, uint64_t cap)
{
    memset(sp, 0, sizeof(*sp));
    mc_replica_hint_t h;
    if (!mc_hint_get(s->hints, key, &h) || h.size == 0 || h.size > SPEC_MAX_OBJECT ||
        h.size > cap)
        return;
    if (store_plan_add(s, &sp->plan, MC_TE_READ, h.endpoint, h.addr, h.size, parts, n_parts, 0) !=
            MC_OK ||
        store_plan_start(s, &sp->plan, true, &sp->xfer) != MC_OK) {
        store_plan_free(&sp->plan);
        return;
    }
    sp->hint = h;
}

/* Finishes the read; a key whose read failed loses its hint. */
static void spec_wait(mc_store_t *s, spec_read_t *sp, const char *key)
{
    if (!sp->xfer)
        return;
    if (mc_te_transfer_wait(s->te, sp->xfer, NULL) != MC_OK) {
        sp->failed = true;
        mc_hint_drop(s->hints, key);
    }
    sp->xfer = NULL;
    store_plan_free(&sp->plan);
}

/* The replica in the master's answer rl (at rl's size) that hint h names, or NULL. */
static const McRpc__ReplicaDesc *hint_replica(const mc_replica_hint_t *h,
                                              const McRpc__ReplicaListResponse *rl)
{
    if (h->size == 0 || h->size != rl->size)
        return NULL;
    for (size_t r = 0; r < rl->n_replicas; r++) {
        const McRpc__ReplicaDesc *rd = rl->replicas[r];
        if (rd->size == rl->size && rd->buffer_address == h->addr &&
            strcmp(rd->transport_endpoint, h->endpoint) == 0)
            return rd;
    }
    return NULL;
}

/* The replica in rl that the speculative read came from, or NULL. */
static const McRpc__ReplicaDesc *spec_usable(const spec_read_t *sp,
                                             const McRpc__ReplicaListResponse *rl)
{
    return sp->failed ? NULL : hint_replica(&sp->hint, rl);
}

/* The endpoint the speculative read failed on (to be tried last), or NULL. */
static const char *spec_failed_endpoint(const spec_read_t *sp)
{
    return sp->failed ? sp->hint.endpoint : NULL;
}

/* ------------------------------------------------------------------ reading with the checksum */

#define PIPELINE_MIN (8ull << 20)   /* objects from this size are hashed in chunks ... */
#define PIPELINE_CHUNK (2ull << 20) /* ... of this size while the next ones arrive */

size_t store_iov_sub(const struct iovec *parts, size_t n, uint64_t off, uint64_t len,
                     struct iovec *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n && len > 0; i++) {
        if (off >= parts[i].iov_len) {
            off -= parts[i].iov_len;
            continue;
        }
        size_t take = parts[i].iov_len - off < len ? parts[i].iov_len - off : (size_t)len;
        out[k++] = (struct iovec){(char *)parts[i].iov_base + off, take};
        len -= take;
        off = 0;
    }
    return k;
}

/* Bytes of chunk c of a size-byte object. */
static uint64_t chunk_len(uint64_t size, uint64_t c)
{
    uint64_t off = c * PIPELINE_CHUNK;
    return size - off < PIPELINE_CHUNK ? size - off : PIPELINE_CHUNK;
}

void store_hash_range(mc_hash_stream_t *hs, const struct iovec *parts, size_t n_parts,
                      struct iovec *scratch, uint64_t off, uint64_t len)
{
    size_t k = store_iov_sub(parts, n_parts, off, len, scratch);
    for (size_t i = 0; i < k; i++)
        mc_hash_stream_update(hs, scratch[i].iov_base, scratch[i].iov_len);
}

/* Whether reads from endpoint are copies that the engine hashes as it makes them (same host:
 * te_hashed.h); then one request per object is what lets it hash the whole value. */
static bool engine_hashes_reads(mc_store_t *s, const char *endpoint)
{
    mc_te_segment_t seg;
    return mc_te_segment_open(s->te, endpoint, &seg) == MC_OK &&
           mc_te_segment_hashes_reads(s->te, seg);
}

/* Reads [addr, addr+size) of `endpoint` into parts and sets *hash_p to the XXH3 of the bytes.
 * Large objects from another host travel as one transfer of PIPELINE_CHUNK requests,
 * consumed in order with mc_te_transfer_wait_some: this thread hashes chunk k while the TE
 * loops receive the chunks after it, instead of hashing everything after the last byte
 * arrived. Same-host objects are one request that the engine hashes while copying. */
static mc_status_t read_hashed(mc_store_t *s, const char *endpoint, uint64_t addr, uint64_t size,
                               const struct iovec *parts, size_t n_parts, uint64_t *hash_p)
{
    mc_status_t st;
    uint64_t chunks = (size + PIPELINE_CHUNK - 1) / PIPELINE_CHUNK;
    xfer_plan_t plan = {0};
    if (size < PIPELINE_MIN || chunks + n_parts > MC_TE_MAX_BATCH ||
        store_is_local(s, endpoint, addr, size) ||
        (n_parts == 1 && engine_hashes_reads(s, endpoint))) {
        st = store_plan_add(s, &plan, MC_TE_READ, endpoint, addr, size, parts, n_parts, 0);
        if (st == MC_OK)
            st = store_plan_run(s, &plan, NULL);
        if (st == MC_OK) {
            const uint64_t *eh = store_plan_engine_hash(&plan, 0, plan.n - 1, size);
            *hash_p = eh ? *eh : store_iov_hash(parts, n_parts, size);
        }
        store_plan_free(&plan);
        return st;
    }
    /* one request list, chunk by chunk; ends[c] = requests up to and including chunk c */
    size_t *ends = mc_calloc((size_t)chunks, sizeof(*ends));
    struct iovec *scratch = mc_calloc(n_parts + 1, sizeof(*scratch));
    mc_hash_stream_t hs = {0};
    if (!ends || !scratch || mc_hash_stream_init(&hs) != 0) {
        mc_free(ends);
        mc_free(scratch);
        return MC_ERR_NO_MEMORY;
    }
    st = MC_OK;
    for (uint64_t c = 0; c < chunks && st == MC_OK; c++) {
        uint64_t off = c * PIPELINE_CHUNK, len = chunk_len(size, c);
        size_t k = store_iov_sub(parts, n_parts, off, len, scratch);
        st = store_plan_add(s, &plan, MC_TE_READ, endpoint, addr + off, len, scratch, k, 0);
        ends[c] = plan.n;
    }
    mc_te_transfer_t *x = NULL;
    if (st == MC_OK)
        st = store_plan_start(s, &plan, false, &x);
    for (uint64_t c = 0; c < chunks && st == MC_OK; c++) {
        st = mc_te_transfer_wait_some(s->te, x, ends[c], NULL);
        if (st == MC_OK)
            store_hash_range(&hs, parts, n_parts, scratch, c * PIPELINE_CHUNK, chunk_len(size, c));
    }
    if (x) {
        mc_status_t w = mc_te_transfer_wait(s->te, x, NULL);
        if (st == MC_OK)
            st = w;
    }
    uint64_t h = mc_hash_stream_final(&hs);
    store_plan_free(&plan);
    mc_free(ends);
    mc_free(scratch);
    if (st == MC_OK)
        *hash_p = h;
    return st;
}

/* ------------------------------------------------------------------ lease cache */

/* Whether this client holds a read lease on key with LEASE_MARGIN_MS of it left; *h = the
 * replica it covers. While the lease lasts the master keeps those bytes in place: it neither
 * evicts the object nor removes it (unless forced), and an upsert frees the old space only
 * when the lease ends (store-client.md, "Lease cache"). */
static bool lease_usable(const mc_replica_hint_t *h, uint64_t now_ms)
{
    return h->lease_until_ms && now_ms + LEASE_MARGIN_MS < h->lease_until_ms;
}

static bool lease_cached(mc_store_t *s, const char *key, mc_replica_hint_t *h)
{
    return s->lease_cache && mc_hint_get(s->hints, key, h) && lease_usable(h, mc_now_ms());
}

/* Reads the object from the replica in h (from lease_cached; the parts hold h->size bytes)
 * without asking the master. True when the bytes hash to the leased checksum and the lease
 * was still running when they had all arrived; otherwise the lease is dropped and the caller
 * asks the master (a dead or replaced replica, a forced remove, a lease run out). */
static bool lease_cache_read(mc_store_t *s, const char *key, const mc_replica_hint_t *h,
                             const struct iovec *parts, size_t n_parts)
{
    uint64_t hash = 0;
    if (read_hashed(s, h->endpoint, h->addr, h->size, parts, n_parts, &hash) == MC_OK &&
        mc_now_ms() <= h->lease_until_ms && hash == h->checksum) {
        atomic_fetch_add(&s->n_lease_hits, 1);
        return true;
    }
    atomic_fetch_add(&s->n_lease_misses, 1);
    mc_hint_drop(s->hints, key);
    return false;
}

/* Reads the object described by rl into parts (capacity already checked), trying replicas in
 * order; verifies lease and checksum. spec: a disk request already sent for key (may be NULL;
 * store_disk_read takes it). Returns bytes read or a negative status. */
static int64_t store_read_verified(mc_store_t *s, const char *key,
                                   const McRpc__ReplicaListResponse *rl,
                                   const struct iovec *parts, size_t n_parts, uint64_t t0_ms,
                                   const char *avoid, bool last_try, store_disk_spec_t **spec)
{
    size_t order[16];
    size_t n = store_replica_order(s, rl->replicas, rl->n_replicas, order, 16, avoid);
    mc_status_t st = MC_ERR_OBJECT_NOT_FOUND;
    for (size_t k = 0; k < n; k++) {
        McRpc__ReplicaDesc *rd = rl->replicas[order[k]];
        if (rd->size != rl->size) {
            st = MC_ERR_INVALID_REPLICA;
            continue;
        }
        uint64_t hash = 0;
        bool disk = rd->replica_type == MC_RPC__REPLICA_TYPE__LOCAL_DISK;
        if (disk) /* through its owner's disk; no lease: the checksum decides */
            st = store_disk_read(s, key, rd, rl->size, parts, n_parts, spec, &hash);
        else
            st = read_hashed(s, rd->transport_endpoint, rd->buffer_address, rl->size, parts,
                             n_parts, &hash);
        if (disk && (st != MC_OK || hash != rl->checksum))
            store_disk_learn(s, key, NULL, 0);
        if (st != MC_OK) {
            MC_LOG_WARN("get %s: replica on %s%s failed: %s", key,
                        disk ? "the disk of " : "",
                        disk ? rd->transport_endpoint : rd->segment_name, mc_status_str(st));
            st = MC_ERR_TRANSFER_FAIL;
            continue;
        }
        if (!disk && mc_now_ms() > t0_ms + rl->lease_ttl_ms) {
            MC_LOG_WARN("get %s: read lease (%llu ms) expired before the transfer finished", key,
                        (unsigned long long)rl->lease_ttl_ms);
            return MC_ERR_LEASE_EXPIRED;
        }
        if (hash != rl->checksum) {
            if (last_try)
                MC_LOG_ERROR("get %s: checksum mismatch on replica in %s; data discarded", key,
                             rd->segment_name);
            else
                MC_LOG_DEBUG("get %s: checksum mismatch on replica in %s (an upsert may have "
                             "stamped it since the lookup); data discarded", key,
                             rd->segment_name);
            st = MC_ERR_CHECKSUM;
            continue;
        }
        if (disk) /* the owner to ask at once next time; never read without the master */
            store_disk_learn(s, key, rd, rl->size);
        else
            store_hint_remember(s, key, rd, rl, t0_ms);
        return (int64_t)rl->size;
    }
    return st;
}

/* Fresh heap pages of a large allocation are faulted in one by one by the copy that fills
 * them, which costs far more than the copy itself on our VMs. Populate them in bulk first. */
static void prefault_heap(void *buf, size_t len)
{
    if (len >= (1u << 20))
        mc_pages_prefault_huge(buf, len);
}

mc_status_t store_replica_list(mc_store_t *s, const char *key, McRpc__ReplicaListResponse **rl_p)
{
    McRpc__KeyRequest req = MC_RPC__KEY_REQUEST__INIT;
    req.client_id = mc_master_client_id(&s->master);
    req.tenant_id = s->master.tenant;
    req.key = mc_wire_key_str(key);
    ProtobufCMessage *resp = NULL;
    atomic_fetch_add(&s->n_lookups, 1);
    mc_status_t st = mc_master_client_call(&s->master, MC_OP_GET_REPLICA_LIST, &req.base, &resp, 1);
    if (st != MC_OK)
        return st;
    McRpc__ReplicaListResponse *rl = (McRpc__ReplicaListResponse *)resp;
    if (rl->status != MC_OK || rl->n_replicas == 0) {
        st = rl->status != MC_OK ? rl->status : MC_ERR_OBJECT_NOT_FOUND;
        mc_rpc_response_free(resp);
        return st;
    }
    store_grants_present(s, rl->grants, rl->n_grants);
    *rl_p = rl;
    return MC_OK;
}

/* One get_into (arguments checked, cap = the parts' size); see mc_store_get_into. */
static int64_t get_into_once(mc_store_t *s, const char *key, const struct iovec *parts,
                             size_t n_parts, uint64_t cap, bool last_try)
{
    mc_status_t st;
    mc_replica_hint_t h;
    const char *cache_failed = NULL; /* an endpoint that just failed a cached read: try it last */
    if (lease_cached(s, key, &h) && h.size <= cap) {
        if (lease_cache_read(s, key, &h, parts, n_parts))
            return (int64_t)h.size;
        cache_failed = h.endpoint;
    }
    uint64_t t0 = mc_now_ms();
    spec_read_t sp;
    spec_start(s, &sp, key, parts, n_parts, cap);
    store_disk_spec_t *ds = store_disk_spec_start(s, key, cap);
    McRpc__ReplicaListResponse *rl = NULL;
    st = store_replica_list(s, key, &rl);
    spec_wait(s, &sp, key);
    int64_t rc;
    const McRpc__ReplicaDesc *spec_rd = NULL;
    if (st != MC_OK)
        rc = st;
    else if (rl->size > cap)
        rc = MC_ERR_BUFFER_OVERFLOW;
    else if ((spec_rd = spec_usable(&sp, rl)) && mc_now_ms() <= t0 + rl->lease_ttl_ms &&
             store_iov_hash(parts, n_parts, rl->size) == rl->checksum) {
        store_hint_remember(s, key, spec_rd, rl, t0);
        atomic_fetch_add(&s->n_spec_hits, 1);
        rc = (int64_t)rl->size;
    } else
        rc = store_read_verified(s, key, rl, parts, n_parts, t0,
                                 cache_failed ? cache_failed : spec_failed_endpoint(&sp), last_try,
                                 &ds);
    store_disk_spec_drop(s, ds, key); /* not taken: no disk replica was read */
    if (rl)
        mc_rpc_response_free(&rl->base);
    return rc;
}

/* ------------------------------------------------------------------ keys not ready */

/* The master answers REPLICA_IS_NOT_READY for a key it knows but cannot serve yet: its put is
 * in flight, or its replicas are on a segment that a master restart or takeover recovered
 * from the log and whose storage server has not re-mounted it (it does at its next
 * heartbeat). To an inference engine a miss means recomputing the prefill, so a get waits
 * for such keys a little: it asks again after NOT_READY_FIRST_MS, then twice as long each
 * time up to NOT_READY_STEP_MAX_MS, until not_ready_wait_ms have passed since the first such
 * answer (mc_store_config_t), and then returns REPLICA_IS_NOT_READY. Never longer: a writer
 * or a storage server that died leaves the key unreadable until the master gives up on it. */
#define NOT_READY_FIRST_MS 10u
#define NOT_READY_STEP_MAX_MS 100u

/* One get's wait (zeroed before its first lookup). */
typedef struct not_ready_wait {
    uint64_t t0_ms;    /* the first REPLICA_IS_NOT_READY answer; 0 = none yet */
    uint32_t step_ms;  /* the next pause */
    uint32_t tries;    /* lookups asked again */
} not_ready_wait_t;

/* After an attempt that left n keys (key: the first) REPLICA_IS_NOT_READY: pauses and returns
 * true when the get may ask again, false when the client does not wait or its wait is over
 * (then the caller returns the status). */
static bool not_ready_again(mc_store_t *s, not_ready_wait_t *w, const char *key, size_t n)
{
    uint64_t now = mc_now_ms();
    if (!w->t0_ms) {
        w->t0_ms = now;
        w->step_ms = NOT_READY_FIRST_MS;
    }
    uint64_t end = w->t0_ms + s->not_ready_wait_ms;
    if (now >= end) {
        if (s->not_ready_wait_ms)
            MC_LOG_INFO("get %s%s: not ready after waiting %llu ms (%u lookups); returning "
                        "REPLICA_IS_NOT_READY", key, n > 1 ? " and others" : "",
                        (unsigned long long)(now - w->t0_ms), w->tries + 1);
        return false;
    }
    uint64_t pause = end - now < w->step_ms ? end - now : w->step_ms;
    MC_LOG_DEBUG("get %s%s: not ready (a put in flight, or its segment waits for its storage "
                 "server's re-mount); asking again in %llu ms", key,
                 n > 1 ? " and others" : "", (unsigned long long)pause);
    mc_sleep_ms((uint32_t)pause);
    w->step_ms = w->step_ms * 2 < NOT_READY_STEP_MAX_MS ? w->step_ms * 2 : NOT_READY_STEP_MAX_MS;
    w->tries++;
    return true;
}

/* After a get that waited: logs how it ended (rc: bytes read or a negative status). */
static void not_ready_done(const not_ready_wait_t *w, const char *key, int64_t rc)
{
    if (w->tries && rc >= 0)
        MC_LOG_DEBUG("get %s: readable after waiting %llu ms", key,
                     (unsigned long long)(mc_now_ms() - w->t0_ms));
}

/* A batch get's keys that remain REPLICA_IS_NOT_READY after batch_get_run: asked again
 * together (one batch a round, only those keys) while not_ready_again allows; their results
 * (and heap buffers) are replaced by each round's. */
static void batch_wait_not_ready(mc_store_t *s, size_t n, const char *const *keys,
                                 const struct iovec *const *parts, const size_t *n_parts,
                                 void **heap, int64_t *results)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m += results[i] == MC_ERR_REPLICA_IS_NOT_READY;
    if (m == 0 || !s->not_ready_wait_ms)
        return;
    size_t *idx = mc_calloc(m, sizeof(*idx));
    const char **sk = mc_calloc(m, sizeof(*sk));
    const struct iovec **sp = heap ? NULL : mc_calloc(m, sizeof(*sp));
    size_t *sn = heap ? NULL : mc_calloc(m, sizeof(*sn));
    void **sh = heap ? mc_calloc(m, sizeof(*sh)) : NULL;
    int64_t *sr = mc_calloc(m, sizeof(*sr));
    not_ready_wait_t w = {0};
    bool have_memory = idx && sk && sr && (heap ? sh != NULL : sp && sn); /* else no wait */
    while (have_memory) {
        m = 0;
        for (size_t i = 0; i < n; i++) {
            if (results[i] != MC_ERR_REPLICA_IS_NOT_READY)
                continue;
            idx[m] = i;
            sk[m] = keys[i];
            if (heap) {
                sh[m] = NULL; /* as batch_get_common hands heap[] to the run */
            } else {
                sp[m] = parts[i];
                sn[m] = n_parts[i];
            }
            m++;
        }
        if (m == 0 || !not_ready_again(s, &w, sk[0], m) ||
            batch_get_run(s, m, sk, sp, sn, sh, sr) != MC_OK)
            break;
        for (size_t j = 0; j < m; j++) {
            results[idx[j]] = sr[j];
            if (heap)
                heap[idx[j]] = sh[j];
            if (sr[j] >= 0)
                not_ready_done(&w, sk[j], sr[j]);
        }
    }
    mc_free(idx);
    mc_free(sk);
    mc_free(sp);
    mc_free(sn);
    mc_free(sh);
    mc_free(sr);
}

/* A checksum mismatch right after a lookup may be a replica that a concurrent upsert stamped
 * (the value changed after the lookup): the get asks the master again, twice at most, before
 * it reports CHECKSUM_MISMATCH (logged as corruption only then). */
#define GET_TRIES 3

static int64_t get_into_impl(mc_store_t *s, const char *key, const struct iovec *parts,
                             size_t n_parts)
{
    uint64_t cap;
    mc_status_t st = s ? store_key_check(key) : MC_ERR_INVALID_PARAMS;
    if (st == MC_OK)
        st = store_iov_total(parts, n_parts, &cap);
    if (st != MC_OK)
        return st;
    if (s->dummy)
        return mc_dummy_get_into(s->dummy, key, parts, n_parts);
    int64_t rc;
    not_ready_wait_t w = {0};
    do {
        rc = MC_ERR_CHECKSUM;
        for (int t = 0; t < GET_TRIES && rc == MC_ERR_CHECKSUM; t++)
            rc = get_into_once(s, key, parts, n_parts, cap, t == GET_TRIES - 1);
    } while (rc == MC_ERR_REPLICA_IS_NOT_READY && not_ready_again(s, &w, key, 1));
    not_ready_done(&w, key, rc);
    return rc;
}

/* One get into a fresh heap buffer (*buf_p, NULL on failure); see mc_store_get. Returns bytes
 * read or a negative status. */
static int64_t get_heap_once(mc_store_t *s, const char *key, void **buf_p, bool last_try)
{
    *buf_p = NULL;
    mc_replica_hint_t h;
    const char *cache_failed = NULL; /* as in get_into_once */
    if (lease_cached(s, key, &h)) {
        void *buf = mc_malloc(h.size);
        if (buf) {
            prefault_heap(buf, h.size);
            struct iovec iov = {.iov_base = buf, .iov_len = h.size};
            if (lease_cache_read(s, key, &h, &iov, 1)) {
                *buf_p = buf;
                return (int64_t)h.size;
            }
            cache_failed = h.endpoint;
            mc_free(buf);
        }
    }
    uint64_t t0 = mc_now_ms();
    McRpc__ReplicaListResponse *rl = NULL;
    mc_status_t st = store_replica_list(s, key, &rl);
    if (st != MC_OK)
        return st;
    void *buf = mc_malloc(rl->size);
    int64_t rc = MC_ERR_NO_MEMORY;
    if (buf) {
        prefault_heap(buf, rl->size);
        struct iovec iov = {.iov_base = buf, .iov_len = rl->size};
        rc = store_read_verified(s, key, rl, &iov, 1, t0, cache_failed, last_try, NULL);
    }
    mc_rpc_response_free(&rl->base);
    if (rc < 0)
        mc_free(buf);
    else
        *buf_p = buf;
    return rc;
}

int64_t mc_store_get_into(mc_store_t *s, const char *key, const struct iovec *parts,
                          size_t n_parts)
{
    store_metrics_t *m = s ? s->metrics : NULL;
    uint64_t t0 = store_metrics_t0(m);
    int64_t rc = get_into_impl(s, key, parts, n_parts);
    store_metrics_op(m, STORE_OP_GET, t0, rc > 0 ? (uint64_t)rc : 0, 0);
    return rc;
}

static mc_status_t get_heap_impl(mc_store_t *s, const char *key, void **value_p, size_t *len_p)
{
    if (!value_p || !len_p)
        return MC_ERR_INVALID_PARAMS;
    *value_p = NULL;
    *len_p = 0;
    mc_status_t st = s ? store_key_check(key) : MC_ERR_INVALID_PARAMS;
    if (st != MC_OK)
        return st;
    if (s->dummy)
        return mc_dummy_get(s->dummy, key, value_p, len_p);
    int64_t rc;
    not_ready_wait_t w = {0};
    do {
        rc = MC_ERR_CHECKSUM;
        for (int t = 0; t < GET_TRIES && rc == MC_ERR_CHECKSUM; t++)
            rc = get_heap_once(s, key, value_p, t == GET_TRIES - 1);
    } while (rc == MC_ERR_REPLICA_IS_NOT_READY && not_ready_again(s, &w, key, 1));
    not_ready_done(&w, key, rc);
    if (rc < 0)
        return (mc_status_t)rc;
    *len_p = (size_t)rc;
    return MC_OK;
}

mc_status_t mc_store_get(mc_store_t *s, const char *key, void **value_p, size_t *len_p)
{
    store_metrics_t *m = s ? s->metrics : NULL;
    uint64_t t0 = store_metrics_t0(m);
    mc_status_t st = get_heap_impl(s, key, value_p, len_p);
    store_metrics_op(m, STORE_OP_GET, t0, st == MC_OK ? *len_p : 0, 0);
    return st;
}

/* ------------------------------------------------------------------ batch get */

/* A key of a batch get that the batch could not finish (its read failed or did not verify):
 * fetched alone, with a fresh lease and every replica tried. In heap mode its buffer is
 * replaced (the object may have changed size meanwhile). */
static int64_t batch_get_alone(mc_store_t *s, const char *key, void **heap_slot,
                               struct iovec *heap_iov, const struct iovec *kp, size_t kn)
{
    if (!heap_slot)
        return get_into_impl(s, key, kp, kn);
    mc_free(*heap_slot);
    *heap_slot = NULL;
    size_t len = 0;
    mc_status_t st = get_heap_impl(s, key, heap_slot, &len);
    *heap_iov = (struct iovec){*heap_slot, len};
    return st == MC_OK ? (int64_t)len : st;
}

/* Room for `count` elements of `size` bytes at *off of the scratch block (16-byte aligned
 * starts); returns where they start. */
static size_t bget_carve(size_t *off, size_t count, size_t size)
{
    size_t at = (*off + 15) & ~(size_t)15;
    *off = at + count * size;
    return at;
}

/* Takes a scratch and lays the arrays out in it: k, early, hinted and failed are zeroed (read
 * before every key is written); the others are written before they are read. */
static mc_status_t bget_init(bget_t *b)
{
    size_t n = b->n, off = 0;
    mc_rpc_arena_init(&b->resp_arena, 256 * n + 1024); /* allocates at its first answer */
    size_t o_k = bget_carve(&off, n, sizeof(*b->k));
    size_t o_early = bget_carve(&off, n, sizeof(*b->early));
    size_t o_hinted = bget_carve(&off, n, sizeof(*b->hinted));
    size_t o_failed = bget_carve(&off, n, sizeof(*b->failed));
    size_t zeroed = off;
    size_t o_req = bget_carve(&off, n, sizeof(*b->req_keys));
    size_t o_idx = bget_carve(&off, n, sizeof(*b->idx));
    size_t o_lk = bget_carve(&off, n, sizeof(*b->learn_keys));
    size_t o_learn = bget_carve(&off, n, sizeof(*b->learn));
    b->scratch = store_scratch_take(&b->s->scratch);
    char *mem = b->scratch ? store_scratch_arrays(b->scratch, off) : NULL;
    if (!mem)
        return MC_ERR_NO_MEMORY;
    memset(mem, 0, zeroed);
    b->k = (bget_key_t *)(mem + o_k);
    b->early = (mc_replica_hint_t *)(mem + o_early);
    b->hinted = (bool *)(mem + o_hinted);
    b->failed = (unsigned char *)(mem + o_failed);
    b->req_keys = (char **)(mem + o_req);
    b->idx = (size_t *)(mem + o_idx);
    b->learn_keys = (const char **)(mem + o_lk);
    b->learn = (mc_replica_hint_t *)(mem + o_learn);
    b->early_plan = &b->scratch->plans[0];
    return MC_OK;
}

/* Frees the batch; in heap mode also the buffers of the keys that failed (all of them when the
 * whole batch failed: st != MC_OK). */
static void bget_free(bget_t *b, mc_status_t st)
{
    for (size_t i = 0; b->heap && i < b->n; i++) {
        if (b->heap[i] && (st != MC_OK || b->results[i] < 0)) {
            mc_free(b->heap[i]);
            b->heap[i] = NULL;
        }
    }
    store_scratch_give(&b->s->scratch, b->scratch); /* its plans emptied, whatever happened */
    mc_rpc_arena_destroy(&b->resp_arena);            /* the answers */
}

/* Where key i's bytes go: its heap buffer, or the caller's parts. */
static const struct iovec *bget_dest(const bget_t *b, size_t i, size_t *kn)
{
    *kn = b->heap ? 1 : b->n_parts[i];
    return b->heap ? &b->k[i].heap_iov : b->parts[i];
}

/* Phase 1, one valid key with room for cap bytes (caller memory): reads it at once if this
 * client holds a usable lease on it, or (caller memory, small objects) from its hint as a
 * guess. Returns true when the key must also be looked up (all but the leased ones). */
static bool bget_early_key(bget_t *b, size_t i, uint64_t now, uint64_t cap)
{
    mc_replica_hint_t *h = &b->early[i];
    bool leased = b->hinted[i] && lease_usable(h, now);
    bool guess = b->hinted[i] && !leased && !b->heap && h->size <= SPEC_MAX_OBJECT;
    bool read_now = (leased || guess) && (b->heap || h->size <= cap) &&
                    (!b->heap || (b->heap[i] = mc_malloc(h->size)));
    if (!read_now || !leased)
        h->lease_until_ms = 0; /* the key goes to the lookup */
    if (!read_now)
        return true;
    if (b->heap) {
        prefault_heap(b->heap[i], h->size);
        b->k[i].heap_iov = (struct iovec){b->heap[i], h->size};
    }
    b->k[i].early_read = true;
    size_t kn;
    const struct iovec *kp = bget_dest(b, i, &kn);
    if (store_plan_add(b->s, b->early_plan, MC_TE_READ, h->endpoint, h->addr, h->size, kp, kn,
                       i) != MC_OK)
        b->failed[i] = 1;
    return !leased;
}

/* Phase 1: validate every key; keys under a cached lease (and hinted guesses) join early_plan,
 * which starts at once; all but the leased ones are listed for the lookup (req_keys, idx, m). */
static void bget_read_early(bget_t *b)
{
    for (size_t i = 0; i < b->n; i++) { /* req_keys: the valid keys for now (NULL: invalid) */
        b->results[i] = store_key_check(b->keys[i]);
        b->req_keys[i] = b->results[i] == MC_OK ? (char *)b->keys[i] : NULL;
    }
    mc_hint_get_many(b->s->hints, b->n, (const char *const *)b->req_keys, b->early, b->hinted);
    uint64_t now = mc_now_ms();
    b->m = 0;
    for (size_t i = 0; i < b->n; i++) {
        uint64_t cap = 0;
        if (b->results[i] == MC_OK && !b->heap)
            b->results[i] = store_iov_total(b->parts[i], b->n_parts[i], &cap);
        if (b->results[i] != MC_OK || !bget_early_key(b, i, now, cap))
            continue;
        b->req_keys[b->m] = (char *)b->keys[i];
        b->idx[b->m++] = i;
    }
    b->early_st = store_plan_start(b->s, b->early_plan, true, &b->early_x);
}

/* Finishes the early reads (once): right after the first lookup, before any other transfer is
 * waited for (early_plan may hold its connections reserved). */
static void bget_finish_early(bget_t *b)
{
    if (b->early_done)
        return;
    b->early_done = true; /* leased keys are checked as they land; guesses need the answer */
    b->done_plan = b->early_plan;
    store_plan_finish_each(b->s, b->early_plan, b->early_st, b->early_x, b->failed,
                           bget_check_done, b);
}

/* The next sub-batch, from listed key lo; *size: its nominal size (doubled for the next). */
static bget_sub_t *bget_sub_next(bget_t *b, size_t lo, size_t *size)
{
    bget_sub_t *sb = &b->sub[b->n_sub++];
    bool last = b->m - lo < 2 * *size || b->n_sub == BGET_MAX_SUBS;
    *sb = (bget_sub_t){.lo = lo, .hi = last ? b->m : lo + *size,
                       .plan = &b->scratch->plans[b->n_sub]}; /* plans[0]: early reads */
    *size *= 2;
    return sb;
}

/* Phase 2, one sub-batch: sends one BatchGetReplicaList for listed keys [sb->lo, sb->hi);
 * bget_lookup_recv takes the answer (a failed send included). */
static void bget_lookup_send(bget_t *b, bget_sub_t *sb)
{
    mc_store_t *s = b->s;
    size_t m = sb->hi - sb->lo;
    sb->t0 = mc_now_ms();
    sb->req = (McRpc__BatchKeyRequest)MC_RPC__BATCH_KEY_REQUEST__INIT;
    sb->req.client_id = mc_master_client_id(&s->master);
    sb->req.tenant_id = s->master.tenant;
    sb->req.n_keys = m;
    sb->req.keys = mc_wire_keys((const char *const *)b->req_keys + sb->lo, m);
    atomic_fetch_add(&s->n_lookups, m);
    if (sb->req.keys)
        mc_master_client_send(&s->master, MC_OP_BATCH_GET_REPLICA_LIST, &sb->req.base, 1,
                              &b->resp_arena.pb, &sb->in);
}

/* Phase 2, one sub-batch: its answer; the reads of its keys that need one are added to
 * sb->plan (bget_plan_read). The first answer also finishes the early reads. Returns the
 * lookup's status for the whole sub-batch (the caller sets it as the keys' results when not
 * MC_OK). */
static mc_status_t bget_lookup_recv(bget_t *b, bget_sub_t *sb)
{
    mc_store_t *s = b->s;
    size_t m = sb->hi - sb->lo;
    ProtobufCMessage *resp = NULL;
    mc_status_t bst = sb->req.keys ? mc_master_client_recv(&sb->in, &resp) : MC_ERR_NO_MEMORY;
    mc_free(sb->req.keys);
    sb->req.keys = NULL;
    McRpc__BatchReplicaListResponse *br = (McRpc__BatchReplicaListResponse *)resp;
    bst = store_batch_reply_status(bst, br ? br->status : 0, br ? br->n_results : 0, m);
    bget_finish_early(b);
    if (bst != MC_OK)
        return bst;
    store_grants_present(s, br->grants, br->n_grants);
    for (size_t j = 0; j < m; j++) {
        b->k[b->idx[sb->lo + j]].t0 = sb->t0;
        bget_plan_read(b, b->idx[sb->lo + j], br->results[j], sb->plan);
    }
    return MC_OK;
}

/* Phase 3c, one sub-batch whose reads were just started: records the hints its lookup taught
 * (each planned read's replica and lease, as bget_verify_key would once the bytes are
 * verified) while the objects are on their way, so that the hint table's cache misses (~0.2 us
 * a key) overlap the transfer instead of following it. A key whose read then fails
 * verification loses the hint again (bget_verify_key); meanwhile a read of it by another
 * thread under that lease is verified against the same checksum, as any leased read is. */
static void bget_learn_planned(bget_t *b, const bget_sub_t *sb)
{
    mc_store_t *s = b->s;
    size_t n0 = b->n_learn;
    for (size_t q = sb->lo; q < sb->hi; q++) {
        size_t i = b->idx[q];
        bget_key_t *k = &b->k[i];
        if (!k->rl || !k->read_from || k->disk || b->failed[i] || b->results[i] != MC_OK ||
            (k->checked && !k->ok))
            continue;
        if (!store_hint_make(s, k->read_from, k->rl, k->t0, &b->learn[b->n_learn]))
            continue; /* bget_verify_key drops its old hint if its read succeeds */
        b->learn_keys[b->n_learn++] = b->keys[i];
        k->learned = true;
    }
    mc_hint_set_many(s->hints, b->n_learn - n0, b->learn_keys + n0, b->learn + n0);
    b->n_learned = b->n_learn;
}

/* Phases 2 to 4a: the listed keys are looked up, in sub-batches when many of them still need a
 * read (BGET_PIPE_MIN). When a sub-batch's answer is in, the next sub-batch's lookup is sent, then
 * the sub-batch's reads run and are checked, then the next answer is taken (same-host reads are
 * copies by this thread: the lookup has to be on its way before they start). A lookup that fails
 * ends the batch's lookups: its keys and every later listed key get its status; the sub-batches
 * before it are read and verified as usual. */
static void bget_lookup_and_read(bget_t *b)
{
    size_t fresh = 0; /* listed keys that nothing was read for yet */
    for (size_t j = 0; j < b->m; j++)
        fresh += !b->k[b->idx[j]].early_read;
    size_t size = fresh > BGET_PIPE_MIN ? BGET_PIPE_FIRST : b->m;
    bget_sub_t *cur = b->m > 0 ? bget_sub_next(b, 0, &size) : NULL;
    if (cur)
        bget_lookup_send(b, cur);
    while (cur) {
        mc_status_t bst = bget_lookup_recv(b, cur);
        if (bst != MC_OK) {
            for (size_t j = cur->lo; j < b->m; j++)
                b->results[b->idx[j]] = bst;
            break;
        }
        bget_sub_t *next = cur->hi < b->m ? bget_sub_next(b, cur->hi, &size) : NULL;
        if (next) /* first: the master answers while cur's objects arrive (or are copied) */
            bget_lookup_send(b, next);
        mc_te_transfer_t *x;
        mc_status_t st = store_plan_start(b->s, cur->plan, true, &x);
        if (st == MC_OK) /* hints of reads that did not start would only be dropped again */
            bget_learn_planned(b, cur);
        b->done_plan = cur->plan;
        store_plan_finish_each(b->s, cur->plan, st, x, b->failed, bget_check_done, b);
        uint64_t now = mc_now_ms();
        for (size_t q = cur->lo; q < cur->hi; q++) /* those without a read of their own */
            bget_check_key(b, b->idx[q], now);
        cur = next;
    }
    bget_finish_early(b); /* no lookup at all */
}

/* Phase 3, listed key i with the master's answer rl: adds the read of its preferred replica to
 * the plan, unless a guess already read one of rl's replicas. */
static void bget_plan_read(bget_t *b, size_t i, const McRpc__ReplicaListResponse *rl,
                           xfer_plan_t *plan)
{
    bget_key_t *k = &b->k[i];
    if (rl->status != MC_OK || rl->n_replicas == 0) {
        b->results[i] = rl->status != MC_OK ? rl->status : MC_ERR_OBJECT_NOT_FOUND;
        return;
    }
    if (k->early_read && !b->failed[i] && (k->read_from = hint_replica(&b->early[i], rl))) {
        k->rl = rl;
        return;
    }
    b->failed[i] = 0; /* a failed or wrong guess: read what the master names */
    k->early_read = false;
    k->engine_hashed = false;
    if (b->heap) {
        b->heap[i] = mc_malloc(rl->size);
        if (!b->heap[i]) {
            b->results[i] = MC_ERR_NO_MEMORY;
            return;
        }
        prefault_heap(b->heap[i], rl->size);
        k->heap_iov = (struct iovec){b->heap[i], rl->size};
    } else {
        uint64_t cap = 0;
        store_iov_total(b->parts[i], b->n_parts[i], &cap);
        if (rl->size > cap) {
            b->results[i] = MC_ERR_BUFFER_OVERFLOW;
            return;
        }
    }
    k->rl = rl;
    size_t first = 0, kn;
    store_replica_order(b->s, rl->replicas, rl->n_replicas, &first, 1, NULL);
    k->read_from = rl->replicas[first];
    const struct iovec *kp = bget_dest(b, i, &kn);
    /* a LOCAL_DISK replica is read through its owner (bget_read_disk) */
    k->disk = k->read_from->replica_type == MC_RPC__REPLICA_TYPE__LOCAL_DISK;
    if (k->read_from->size != rl->size || k->disk ||
        store_plan_add(b->s, plan, MC_TE_READ, k->read_from->transport_endpoint,
                       k->read_from->buffer_address, rl->size, kp, kn, i) != MC_OK)
        b->failed[i] = 1;
}

/* Phase 3b: the keys whose replica is on a disk (not in the plans) are read through their
 * owners, all of one owner's keys together (store_disk_read_many: up to 64 per request, their
 * disk reads in flight at once, each key pulled as its bytes land). A key that fails is left
 * failed: bget_verify_key gets it alone. */
static void bget_read_disk(bget_t *b)
{
    size_t n = b->n, n_disk = 0;
    for (size_t i = 0; i < n; i++)
        n_disk += b->k[i].disk && b->k[i].rl;
    if (n_disk == 0)
        return;
    size_t *idx = mc_calloc(n, sizeof(*idx)), *kns = mc_calloc(n, sizeof(*kns));
    const char **keys = mc_calloc(n, sizeof(*keys));
    uint64_t *sizes = mc_calloc(n, sizeof(*sizes)), *hashes = mc_calloc(n, sizeof(*hashes));
    const struct iovec **kps = mc_calloc(n, sizeof(*kps));
    mc_status_t *sts = mc_calloc(n, sizeof(*sts));
    bool *taken = mc_calloc(n, sizeof(*taken));
    for (size_t i = 0; idx && kns && keys && sizes && hashes && kps && sts && taken && i < n;
         i++) {
        if (!b->k[i].disk || !b->k[i].rl || taken[i])
            continue;
        const char *ep = b->k[i].read_from->transport_endpoint;
        size_t m = 0;
        for (size_t j = i; j < n; j++) {
            bget_key_t *k = &b->k[j];
            if (!k->disk || !k->rl || taken[j] || strcmp(k->read_from->transport_endpoint, ep))
                continue;
            taken[j] = true;
            idx[m] = j;
            keys[m] = b->keys[j];
            sizes[m] = k->rl->size;
            kps[m] = bget_dest(b, j, &kns[m]);
            m++;
        }
        store_disk_read_many(b->s, ep, m, keys, sizes, kps, kns, hashes, sts);
        for (size_t x = 0; x < m; x++) {
            bget_key_t *k = &b->k[idx[x]];
            k->checked = k->lease_ok = true; /* no lease: the checksum decides */
            k->ok = sts[x] == MC_OK && hashes[x] == k->rl->checksum;
            b->failed[idx[x]] = !k->ok;
            if (sts[x] != MC_OK)
                MC_LOG_WARN("batch get %s: the disk of %s failed: %s", keys[x], ep,
                            mc_status_str(sts[x]));
        }
    }
    mc_free(idx);
    mc_free(kns);
    mc_free(keys);
    mc_free(sizes);
    mc_free(hashes);
    mc_free(kps);
    mc_free(sts);
    mc_free(taken);
}

/* Phase 4a, key i once its bytes have landed (or its read failed): whether they count (read
 * completed, lease still running at now_ms, a clock read after they landed; checksum). Runs
 * once per key. */
static void bget_check_key(bget_t *b, size_t i, uint64_t now_ms)
{
    bget_key_t *k = &b->k[i];
    const McRpc__ReplicaListResponse *rl = k->rl;
    const mc_replica_hint_t *h = &b->early[i];
    if (k->checked || (!rl && !h->lease_until_ms))
        return; /* done, or not read: its result is already set */
    size_t kn;
    const struct iovec *kp = bget_dest(b, i, &kn);
    uint64_t size = rl ? rl->size : h->size, sum = rl ? rl->checksum : h->checksum;
    uint64_t until = rl ? k->t0 + rl->lease_ttl_ms : h->lease_until_ms;
    k->checked = true;
    k->lease_ok = now_ms <= until;
    if (b->failed[i] || !k->lease_ok)
        return;
    uint64_t got = k->engine_hashed && k->engine_len == size ? k->engine_hash
                                                             : store_iov_hash(kp, kn, size);
    k->ok = got == sum;
}

/* store_plan_finish_each's callback: key i's read (requests [first, last] of b->done_plan) is
 * final; keeps the engine's checksum of its bytes if it computed one. */
static void bget_check_done(void *arg, size_t i, size_t first, size_t last, uint64_t now_ms)
{
    bget_t *b = arg;
    bget_key_t *k = &b->k[i];
    const xfer_plan_t *p = b->done_plan;
    uint64_t len = first < p->n ? p->reqs[first].length : 0;
    const uint64_t *eh = store_plan_engine_hash(p, first, last, len);
    k->engine_hashed = eh != NULL;
    k->engine_hash = eh ? *eh : 0;
    k->engine_len = len;
    bget_check_key(b, i, now_ms);
}

/* Phase 4b, key i: settles its result from bget_check_key's verdict (now_ms: read after every
 * transfer of the batch ended) and records what the lookup taught; a key that failed is
 * fetched alone (fresh lease, every replica). */
static void bget_verify_key(bget_t *b, size_t i, uint64_t now_ms)
{
    mc_store_t *s = b->s;
    const bget_key_t *k = &b->k[i];
    const McRpc__ReplicaListResponse *rl = k->rl;
    const mc_replica_hint_t *h = &b->early[i];
    if (!rl && !h->lease_until_ms)
        return; /* not read: its result is already set */
    bget_check_key(b, i, now_ms); /* keys read early under a lease only */
    size_t kn;
    const struct iovec *kp = bget_dest(b, i, &kn);
    uint64_t size = rl ? rl->size : h->size;
    bool lease_ok = k->lease_ok;
    if (k->ok) {
        b->results[i] = (int64_t)size;
        if (!rl) {
            b->lease_hits++;
            return;
        }
        if (k->early_read)
            b->spec_hits++;
        if (k->disk || k->learned) /* a disk replica is no place to read again without the */
            return;                /* owner; a learned key's hint is in the table already */
        if (store_hint_make(s, k->read_from, rl, k->t0, &b->learn[b->n_learn]))
            b->learn_keys[b->n_learn++] = b->keys[i];
        else
            mc_hint_drop(s->hints, b->keys[i]);
        return;
    }
    if (k->learned)
        mc_hint_drop(s->hints, b->keys[i]); /* the hint bget_learn_planned recorded did not hold */
    if (rl && !lease_ok) {
        b->results[i] = MC_ERR_LEASE_EXPIRED;
    } else {
        if (!rl) {
            atomic_fetch_add(&s->n_lease_misses, 1);
            mc_hint_drop(s->hints, b->keys[i]); /* the alone get asks the master */
        }
        b->results[i] = batch_get_alone(s, b->keys[i], b->heap ? &b->heap[i] : NULL,
                                        b->heap ? &b->k[i].heap_iov : NULL, kp, kn);
    }
}

/* Batch get core. With heap == NULL, key i is read into parts[i]; otherwise each found key gets a
 * fresh heap buffer of its exact size (heap[i], freed here on failure, else the caller's) and
 * parts/n_parts are ignored. results[i] = bytes read or a negative status.
 *
 * Keys under a read lease this client still holds (lease cache) are read at once without
 * asking the master; the others are looked up meanwhile (BatchGetReplicaList, in pipelined
 * sub-batches when many need a read: bget_lookup_and_read) and read as each answer arrives. In
 * caller memory, keys of at most SPEC_MAX_OBJECT with a hint but no usable lease are also read
 * at once, speculatively: their bytes count if the lookup names the hinted replica (as for
 * single gets). Every key's bytes are verified against its checksum. */
static mc_status_t batch_get_common(mc_store_t *s, size_t n, const char *const *keys,
                                    const struct iovec *const *parts, const size_t *n_parts,
                                    void **heap, int64_t *results)
{
    mc_status_t st = store_batch_args_check(s, n, keys);
    if (st != MC_OK || n == 0)
        return st;
    if ((!heap && (!parts || !n_parts)) || !results)
        return MC_ERR_INVALID_PARAMS;
    for (size_t i = 0; heap && i < n; i++)
        heap[i] = NULL;
    if (s->dummy)
        return heap ? mc_dummy_batch_get(s->dummy, n, keys, heap, results)
                    : mc_dummy_batch_get_into(s->dummy, n, keys, parts, n_parts, results);
    uint64_t t0 = store_metrics_t0(s->metrics);
    st = batch_get_run(s, n, keys, parts, n_parts, heap, results);
    if (st == MC_OK)
        batch_wait_not_ready(s, n, keys, parts, n_parts, heap, results);
    if (s->metrics) {
        uint64_t bytes = 0;
        for (size_t i = 0; st == MC_OK && i < n; i++)
            bytes += results[i] > 0 ? (uint64_t)results[i] : 0;
        store_metrics_op(s->metrics, STORE_OP_BATCH_GET, t0, bytes, 0);
    }
    return st;
}

/* One pass of a batch get over valid arguments (batch_get_common): the phases of bget_t. */
static mc_status_t batch_get_run(mc_store_t *s, size_t n, const char *const *keys,
                                 const struct iovec *const *parts, const size_t *n_parts,
                                 void **heap, int64_t *results)
{
    bget_t b = {.s = s, .n = n, .keys = keys, .parts = parts, .n_parts = n_parts, .heap = heap,
                .results = results};
    mc_status_t st = bget_init(&b);
    if (st == MC_OK) {
        bget_read_early(&b);
        bget_lookup_and_read(&b);
        bget_read_disk(&b);
        uint64_t now = mc_now_ms();
        for (size_t i = 0; i < n; i++)
            bget_verify_key(&b, i, now);
        mc_hint_set_many(s->hints, b.n_learn - b.n_learned, b.learn_keys + b.n_learned,
                         b.learn + b.n_learned);
        atomic_fetch_add(&s->n_lease_hits, b.lease_hits);
        atomic_fetch_add(&s->n_spec_hits, b.spec_hits);
    }
    bget_free(&b, st);
    return st;
}

mc_status_t mc_store_batch_get_into(mc_store_t *s, size_t n, const char *const *keys,
                                    const struct iovec *const *parts, const size_t *n_parts,
                                    int64_t *results)
{
    return batch_get_common(s, n, keys, parts, n_parts, NULL, results);
}

mc_status_t mc_store_batch_get(mc_store_t *s, size_t n, const char *const *keys, void **values,
                               int64_t *results)
{
    if (!values)
        return MC_ERR_INVALID_PARAMS;
    for (size_t i = 0; i < n; i++)
        values[i] = NULL;
    return batch_get_common(s, n, keys, NULL, NULL, values, results);
}
