/* Store client plumbing shared by the data paths: argument checks, value checksums, the
 * transfer plan (a list of TE requests tagged with the batch index they serve; local replicas
 * are copied at once instead), replica hints, and the stamps an upsert or forced remove writes
 * over the old values that readers may hold cached leases on.
 *
 * Contracts: a plan is owned by the caller that declared it ({0} is empty) and released with
 * store_plan_free; the buffers added to it are borrowed until it has run. store_plan_finish and
 * store_plan_run mark failed[owner] for every request that did not complete and never clear an
 * entry. Nothing here holds a lock of its own: the hint table and the TE lock internally.
 */
#include "client/store_int.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/payload.h"
#include "common/time.h"
#include "rpc/frame.h"
#include "te/te_auth.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

static mc_status_t plan_push(xfer_plan_t *p, const mc_te_request_t *r, size_t owner);

/* ------------------------------------------------------------------ small helpers */

mc_status_t store_key_check(const char *key)
{
    if (!key)
        return MC_ERR_INVALID_PARAMS;
    size_t len = strnlen(key, MC_STORE_KEY_MAX + 1);
    if (len == 0 || len > MC_STORE_KEY_MAX)
        return MC_ERR_INVALID_KEY;
    return MC_OK;
}

mc_status_t store_iov_total(const struct iovec *parts, size_t n, uint64_t *total_p)
{
    uint64_t total = 0;
    if (n && !parts)
        return MC_ERR_INVALID_PARAMS;
    for (size_t i = 0; i < n; i++) {
        if (parts[i].iov_len && !parts[i].iov_base)
            return MC_ERR_INVALID_PARAMS;
        if (total + parts[i].iov_len < total)
            return MC_ERR_INVALID_PARAMS;
        total += parts[i].iov_len;
    }
    *total_p = total;
    return MC_OK;
}

/* XXH3-64 of the first `limit` bytes of the concatenated parts. */
uint64_t store_iov_hash(const struct iovec *parts, size_t n, uint64_t limit)
{
    if (n == 1 || (n > 0 && parts[0].iov_len >= limit))
        return mc_hash64(parts[0].iov_base, limit);
    mc_hash_stream_t hs;
    if (mc_hash_stream_init(&hs) != 0)
        return 0; /* cannot happen in practice; a 0 checksum simply fails verification */
    for (size_t i = 0; i < n && limit; i++) {
        size_t len = parts[i].iov_len < limit ? parts[i].iov_len : (size_t)limit;
        mc_hash_stream_update(&hs, parts[i].iov_base, len);
        limit -= len;
    }
    return mc_hash_stream_final(&hs);
}

mc_status_t store_cfg_check(const mc_replicate_config_t *cfg)
{
    if (!cfg || cfg->n_preferred_segments == 0)
        return MC_OK;
    if (!cfg->preferred_segments || cfg->n_preferred_segments > MC_STORE_PREFERRED_MAX) {
        MC_LOG_WARN("store: %zu preferred segments (at most %d, and a list)",
                    cfg->n_preferred_segments, MC_STORE_PREFERRED_MAX);
        return MC_ERR_INVALID_PARAMS;
    }
    for (size_t i = 0; i < cfg->n_preferred_segments; i++) {
        const char *name = cfg->preferred_segments[i];
        if (!name || strnlen(name, MC_STORE_KEY_MAX + 1) > MC_STORE_KEY_MAX) {
            MC_LOG_WARN("store: preferred segment %zu is NULL or over %d bytes", i,
                        MC_STORE_KEY_MAX);
            return MC_ERR_INVALID_PARAMS;
        }
    }
    return MC_OK;
}

McRpc__ReplicateConfig *store_rpc_config(const mc_replicate_config_t *cfg,
                                         McRpc__ReplicateConfig *out)
{
    mc_rpc__replicate_config__init(out);
    if (cfg) {
        out->replica_num = cfg->replica_num;
        out->with_soft_pin = cfg->with_soft_pin;
        out->soft_pin_ttl_ms = cfg->with_soft_pin ? cfg->soft_pin_ttl_ms : 0;
        out->soft_pin_disable = cfg->soft_pin_disable;
        out->n_preferred_segments = cfg->n_preferred_segments; /* store_cfg_check'ed */
        out->preferred_segments = (char **)cfg->preferred_segments;
        out->with_hard_pin = cfg->with_hard_pin;
        out->preferred_segment = (char *)(cfg->preferred_segment ? cfg->preferred_segment : "");
    }
    return out;
}

/* Status of a batch reply: the call's, else the reply's whole-batch status, else RPC_FAIL if
 * the reply does not have one result per key. */
mc_status_t store_batch_reply_status(mc_status_t call_st, int32_t reply_st, size_t n_results,
                                     size_t n_keys)
{
    if (call_st != MC_OK)
        return call_st;
    if (reply_st != MC_OK)
        return reply_st;
    return n_results == n_keys ? MC_OK : MC_ERR_RPC_FAIL;
}

mc_status_t store_batch_args_check(mc_store_t *s, size_t n, const char *const *keys)
{
    if (!s || (n && !keys))
        return MC_ERR_INVALID_PARAMS;
    if (n > STORE_MAX_BATCH)
        return MC_ERR_TOO_LARGE;
    return MC_OK;
}


/* ------------------------------------------------------------------ data movement plan */

void store_plan_free(xfer_plan_t *p)
{
    mc_free(p->reqs);
    mc_free(p->owner);
    mc_free(p->hashes);
    mc_free(p->sts);
    memset(p, 0, sizeof(*p));
}

void store_plan_reset(xfer_plan_t *p)
{
    p->n = 0;
    p->seg_endpoint[0] = '\0';
    p->unhashed_seg = false;
    p->hash_cont = NULL;
}

/* Bytes of arrays p holds. */
static size_t plan_bytes(const xfer_plan_t *p)
{
    return p->cap_reqs * sizeof(*p->reqs) + p->cap_owner * sizeof(*p->owner) +
           p->cap_hashes * sizeof(*p->hashes) + p->cap_sts * sizeof(*p->sts);
}

/* ------------------------------------------------------------------ batch-get scratch */

store_scratch_t *store_scratch_take(store_scratch_pool_t *pool)
{
    for (size_t i = 0; i < STORE_SCRATCH_POOL; i++) {
        store_scratch_t *w = atomic_exchange(&pool->slot[i], NULL);
        if (w)
            return w;
    }
    return MC_NEW(store_scratch_t); /* zeroed: empty plans, no arrays */
}

void *store_scratch_arrays(store_scratch_t *w, size_t bytes)
{
    if (bytes <= w->cap)
        return w->mem;
    size_t cap = w->cap ? w->cap : 4096;
    while (cap < bytes)
        cap = cap > SIZE_MAX / 2 ? bytes : cap * 2;
    void *mem = mc_malloc(cap);
    if (!mem)
        return NULL;
    mc_free(w->mem);
    w->mem = mem;
    w->cap = cap;
    return mem;
}

static void scratch_free(store_scratch_t *w)
{
    for (size_t i = 0; i < STORE_SCRATCH_PLANS; i++)
        store_plan_free(&w->plans[i]);
    mc_free(w->mem);
    mc_free(w);
}

void store_scratch_give(store_scratch_pool_t *pool, store_scratch_t *w)
{
    if (!w)
        return;
    size_t bytes = w->cap;
    for (size_t i = 0; i < STORE_SCRATCH_PLANS; i++) {
        store_plan_reset(&w->plans[i]);
        bytes += plan_bytes(&w->plans[i]);
    }
    for (size_t i = 0; bytes <= STORE_SCRATCH_KEEP_MAX && i < STORE_SCRATCH_POOL; i++) {
        store_scratch_t *empty = NULL;
        if (atomic_compare_exchange_strong(&pool->slot[i], &empty, w))
            return;
    }
    scratch_free(w);
}

void store_scratch_pool_fini(store_scratch_pool_t *pool)
{
    for (size_t i = 0; i < STORE_SCRATCH_POOL; i++) {
        store_scratch_t *w = atomic_exchange(&pool->slot[i], NULL);
        if (w)
            scratch_free(w);
    }
}

static mc_status_t plan_push(xfer_plan_t *p, const mc_te_request_t *r, size_t owner)
{
    if (mc_array_reserve(&p->reqs, &p->cap_reqs, p->n + 1, 16) != MC_OK ||
        mc_array_reserve(&p->owner, &p->cap_owner, p->n + 1, 16) != MC_OK)
        return MC_ERR_NO_MEMORY;
    p->reqs[p->n] = *r;
    p->owner[p->n] = owner;
    p->n++;
    return MC_OK;
}

int store_is_local(const mc_store_t *s, const char *endpoint, uint64_t addr, uint64_t size)
{
    if (!s->segment || strcmp(endpoint, s->te_name) != 0)
        return 0;
    uint64_t base = (uint64_t)(uintptr_t)s->segment;
    return addr >= base && size <= s->segment_size && addr - base <= s->segment_size - size;
}

/* The hint for a key read from (or written to) rd; false when rd's endpoint does not fit a
 * hint. rl: the master's answer that granted this client a read lease at t0_ms (the get
 * verified rd's bytes against it), or NULL for a guess only (a put: the key's lease, if any,
 * ends). */
bool store_hint_make(const mc_store_t *s, const McRpc__ReplicaDesc *rd,
                     const McRpc__ReplicaListResponse *rl, uint64_t t0_ms, mc_replica_hint_t *h)
{
    *h = (mc_replica_hint_t){.addr = rd->buffer_address, .size = rd->size};
    if (strlen(rd->transport_endpoint) >= sizeof(h->endpoint))
        return false;
    strcpy(h->endpoint, rd->transport_endpoint);
    if (rl && s->lease_cache && rd->size >= STAMP_BYTES) { /* tiny values: see store_stamp_add */
        h->checksum = rl->checksum;
        h->lease_until_ms = t0_ms + rl->lease_ttl_ms;
    }
    return true;
}

/* Remember where key's bytes are (replica_hint.h); rl and t0_ms as for store_hint_make. */
void store_hint_remember(mc_store_t *s, const char *key, const McRpc__ReplicaDesc *rd,
                         const McRpc__ReplicaListResponse *rl, uint64_t t0_ms)
{
    mc_replica_hint_t h;
    /* a tenant-bound client holds only a write grant for what it put: a guess read there
     * would be refused (docs/security.md, "Data ports and tenants") */
    if (!rl && mc_te_tenant_bound(s->te)) {
        mc_hint_drop(s->hints, key);
        return;
    }
    if (store_hint_make(s, rd, rl, t0_ms, &h))
        mc_hint_set(s->hints, key, &h);
    else
        mc_hint_drop(s->hints, key);
}

/* Move `size` bytes between the parts (in order) and [addr, addr+size) on `endpoint`. */
mc_status_t store_plan_add(mc_store_t *s, xfer_plan_t *p, mc_te_opcode_t op,
                           const char *endpoint, uint64_t addr, uint64_t size,
                           const struct iovec *parts, size_t n_parts, size_t owner)
{
    if (store_is_local(s, endpoint, addr, size)) { /* same process: plain copy */
        uint64_t off = 0;
        for (size_t i = 0; i < n_parts && off < size; i++) {
            size_t len = parts[i].iov_len < size - off ? parts[i].iov_len : (size_t)(size - off);
            char *remote = (char *)(uintptr_t)(addr + off);
            if (op == MC_TE_WRITE)
                mc_payload_copy(remote, parts[i].iov_base, len);
            else
                mc_payload_copy(parts[i].iov_base, remote, len);
            off += len;
        }
        return MC_OK;
    }
    mc_status_t st = MC_OK;
    if (strcmp(p->seg_endpoint, endpoint) != 0) {
        p->seg_endpoint[0] = '\0';
        st = mc_te_segment_open(s->te, endpoint, &p->seg); /* refuses names that do not fit */
        if (st != MC_OK) {
            MC_LOG_WARN("cannot open segment %s: %s", endpoint, mc_status_str(st));
            return st;
        }
        snprintf(p->seg_endpoint, sizeof(p->seg_endpoint), "%s", endpoint);
        if (op == MC_TE_READ && !mc_te_segment_hashes_reads(s->te, p->seg))
            p->unhashed_seg = true;
    }
    mc_te_segment_t seg = p->seg;
    uint64_t off = 0;
    for (size_t i = 0; i < n_parts && off < size; i++) {
        size_t len = parts[i].iov_len < size - off ? parts[i].iov_len : (size_t)(size - off);
        if (len == 0)
            continue;
        mc_te_request_t r = {.opcode = op, .local = parts[i].iov_base, .target = seg,
                             .target_addr = addr + off, .length = len};
        st = plan_push(p, &r, owner);
        if (st != MC_OK)
            return st;
        off += len;
    }
    return MC_OK;
}

void store_grants_present(mc_store_t *s, McRpc__TeGrant *const *grants, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const McRpc__TeGrant *g = grants[i];
        mc_te_segment_t seg;
        mc_status_t st = mc_te_segment_open(s->te, g->transport_endpoint, &seg);
        if (st == MC_OK)
            st = mc_te_grant_present(s->te, seg, g->grant.data, g->grant.len);
        if (st != MC_OK)
            MC_LOG_WARN("store: data grant for %s not presented: %s", g->transport_endpoint,
                        mc_status_str(st));
    }
}

void store_uuid_random(uint8_t out[16])
{
    if (getrandom(out, 16, 0) != 16) {
        uint64_t a = mc_now_ns() ^ ((uint64_t)getpid() << 32), b = mc_wall_ms();
        memcpy(out, &a, 8);
        memcpy(out + 8, &b, 8);
    }
}

/* Values that readers hold leases on, taken away by an upsert or a forced remove
 * (master.proto, RetiredReplicas; NULL: nothing retired): adds to p, as `owner`, a write of
 * STAMP_BYTES random bytes over the start of each listed replica (at most `max`). Readers under
 * a cached lease then find a checksum mismatch and ask the master, so once the upsert or remove
 * returns nobody reads the old value without asking. An old value differs from its stamped
 * self except with probability 2^-64, the bound a 64-bit checksum gives anyway; values shorter
 * than the stamp are never read under a cached lease (store_hint_remember). stamp: random bytes
 * (store_uuid_random) that live until the plan has run. A replica that cannot be stamped (not
 * listed, over max, or its write fails) does not fail the call: failed[owner] is set (here or
 * by the plan) and the caller then waits out the leases (store_stamp_wait). Returns that wait (ms;
 * 0 when nothing is retired). *token: what store_stamp_release hands back once every stamp landed
 * (0: nothing to hand back). */
uint64_t store_stamp_add(mc_store_t *s, xfer_plan_t *p, const McRpc__RetiredReplicas *rr,
                         size_t max, uint8_t stamp[STAMP_BYTES], size_t owner,
                         unsigned char *failed, uint64_t *token)
{
    *token = 0;
    if (!rr || (rr->n_replicas == 0 && rr->unlisted == 0))
        return 0;
    store_grants_present(s, rr->grants, rr->n_grants);
    if (rr->unlisted || rr->n_replicas > max)
        failed[owner] = 1;
    else
        *token = rr->token;
    for (size_t r = 0; r < rr->n_replicas && r < max; r++) {
        const McRpc__ReplicaDesc *rd = rr->replicas[r];
        struct iovec iov = {stamp, STAMP_BYTES};
        if (rd->size >= STAMP_BYTES &&
            store_plan_add(s, p, MC_TE_WRITE, rd->transport_endpoint, rd->buffer_address,
                           STAMP_BYTES, &iov, 1, owner) != MC_OK)
            failed[owner] = 1;
    }
    return rr->lease_ms;
}

/* After stamps that all landed: the master may free the old values' space now instead of at
 * the end of their leases (ReleaseRetired). Best effort: if this fails, it frees it then. */
void store_stamp_release(mc_store_t *s, const uint64_t *tokens, size_t n)
{
    if (n == 0)
        return;
    McRpc__ReleaseRetiredRequest req = MC_RPC__RELEASE_RETIRED_REQUEST__INIT;
    req.client_id = mc_master_client_id(&s->master);
    req.n_tokens = n;
    req.tokens = (uint64_t *)tokens;
    ProtobufCMessage *resp = NULL;
    mc_status_t st = mc_master_client_call(&s->master, MC_OP_RELEASE_RETIRED, &req.base, &resp, 1);
    if (st != MC_OK)
        MC_LOG_DEBUG("release of %zu retired values failed: %s (the master frees them when "
                     "their leases end)", n, mc_status_str(st));
    mc_rpc_response_free(resp);
}

/* After an upsert or remove whose stamps did not all land: wait until the old values' leases
 * have ended (lease_ms, from the master; capped), so that no reader holding one can read the
 * old bytes once the call has returned. A bounded wait, in a failure case only. */
void store_stamp_wait(const char *op, const char *key, uint64_t lease_ms)
{
    if (lease_ms == 0)
        return;
    if (lease_ms > STAMP_WAIT_MAX_MS)
        lease_ms = STAMP_WAIT_MAX_MS;
    MC_LOG_WARN("%s %s: a replica of the old value could not be stamped; waiting %llu ms for "
                "its read lease to end", op, key, (unsigned long long)lease_ms);
    mc_sleep_ms((uint32_t)lease_ms);
}

/* Starts the plan's transfer (*x = NULL when nothing remains to move); `reserved` for a short
 * overlap with one RPC (te.h, mc_te_transfer_start_reserved). Same-host reads are hashed by
 * the engine as it copies them (p->hashes, te_hashed.h): the check then costs no second pass
 * over the value. */
mc_status_t store_plan_start(mc_store_t *s, xfer_plan_t *p, bool reserved, mc_te_transfer_t **x)
{
    *x = NULL;
    if (p->n == 0)
        return MC_OK;
    bool reads = false;
    for (size_t i = 0; i < p->n && !reads; i++)
        reads = p->reqs[i].opcode == MC_TE_READ;
    /* cleared here too: a reused plan's array holds the last run's hashes, and a start that
     * fails early must not leave them to be taken for this run's */
    if (reads && mc_array_reserve(&p->hashes, &p->cap_hashes, p->n, 16) == MC_OK) {
        memset(p->hashes, 0, p->n * sizeof(*p->hashes));
        if (p->hash_cont && p->n == 1 && p->reqs[0].opcode == MC_TE_READ)
            p->hashes[0].cont = p->hash_cont;
        return mc_te_transfer_start_hashed(s->te, p->reqs, p->n, reserved, p->hashes, x);
    }
    mc_free(p->hashes);
    p->hashes = NULL;
    p->cap_hashes = 0;
    return reserved ? mc_te_transfer_start_reserved(s->te, p->reqs, p->n, x)
                    : mc_te_transfer_start(s->te, p->reqs, p->n, x);
}

const uint64_t *store_plan_engine_hash(const xfer_plan_t *p, size_t first, size_t last,
                                       uint64_t size)
{
    if (!p->hashes || first != last || first >= p->n || !p->hashes[first].hashed ||
        p->reqs[first].opcode != MC_TE_READ || p->reqs[first].length != size)
        return NULL;
    return &p->hashes[first].hash;
}

bool store_plan_engine_continued(const xfer_plan_t *p)
{
    return p->hashes && p->n == 1 && p->hashes[0].cont && p->hashes[0].hashed;
}

/* Finishes what store_plan_start returned (start_st, x); failed[owner] is set for every object with
 * a request that did not complete. Returns the first error seen (MC_OK if all completed). */
mc_status_t store_plan_finish(mc_store_t *s, xfer_plan_t *p, mc_status_t start_st,
                              mc_te_transfer_t *x, unsigned char *failed)
{
    mc_te_xfer_status_t *sts = NULL; /* NULL (no memory): every object of a failure fails */
    if (x && mc_array_reserve(&p->sts, &p->cap_sts, p->n, 16) == MC_OK)
        sts = p->sts;
    mc_status_t st = start_st;
    if (x)
        st = mc_te_transfer_wait(s->te, x, sts);
    if (st != MC_OK) {
        for (size_t i = 0; i < p->n && failed; i++) {
            if (!sts || sts[i].state != MC_TE_COMPLETED)
                failed[p->owner[i]] = 1;
        }
        MC_LOG_WARN("transfer of %zu requests failed: %s", p->n, mc_status_str(st));
    }
    return st;
}

/* Whether every object of p is one READ from a segment whose reads the engine hashes
 * (te_hashed.h): the engine then hands back each object's XXH3 (unless the read fails or a
 * tcp answer arrived in a way it could not chain, which the caller then hashes after), so
 * there is nothing to hash while the rest arrives. */
static bool plan_engine_hashed(const xfer_plan_t *p)
{
    if (!p->hashes || p->unhashed_seg)
        return false;
    for (size_t i = 0; i < p->n; i++)
        if (p->reqs[i].opcode != MC_TE_READ || (i > 0 && p->owner[i] == p->owner[i - 1]))
            return false;
    return true;
}

/* store_plan_finish in order: the requests are waited for in steps of about FINISH_STEP bytes
 * of whole objects (a plan adds each object's requests together), and done(arg, owner) runs for
 * each object of a step once the step is final, failed[owner] set if one of its requests did
 * not complete, while the later steps keep arriving: the caller hashes an object while it is
 * still in the CPU caches, next to the transfer rather than after it. The last step's wait is
 * the transfer's final one (a batch of small objects is one step: one wait, as
 * store_plan_finish). A plan whose objects the engine hashes (plan_engine_hashed) is one step
 * whatever its size, as the engine's own synchronous transfer: steps would only add waits.
 * Objects not passed to done (the transfer stopped early, or none was started) are the
 * caller's to check after. */
#define FINISH_STEP (1u << 20)
mc_status_t store_plan_finish_each(mc_store_t *s, xfer_plan_t *p, mc_status_t start_st,
                                   mc_te_transfer_t *x, unsigned char *failed,
                                   void (*done)(void *arg, size_t owner, size_t first,
                                                size_t last, uint64_t now_ms),
                                   void *arg)
{
    if (!x || mc_array_reserve(&p->sts, &p->cap_sts, p->n, 16) != MC_OK)
        return store_plan_finish(s, p, start_st, x, failed);
    mc_te_xfer_status_t *sts = p->sts;
    mc_status_t st = MC_OK;
    uint64_t step = plan_engine_hashed(p) ? UINT64_MAX : FINISH_STEP;
    for (size_t r = 0, e = 0; r < p->n; r = e) {
        uint64_t bytes = 0;
        while (e < p->n && (bytes < step || p->owner[e] == p->owner[e - 1]))
            bytes += p->reqs[e++].length;
        if (e == p->n) { /* the last step (often the only one): the final wait itself */
            st = mc_te_transfer_wait(s->te, x, sts);
            x = NULL;
        } else if (mc_te_transfer_wait_some(s->te, x, e, sts) != MC_OK) {
            break; /* the final wait below reports it */
        }
        uint64_t now_ms = mc_now_ms(); /* one clock read per step: after all its bytes landed */
        for (size_t q = r, first = r; q < e; q++) {
            if (sts[q].state != MC_TE_COMPLETED && failed)
                failed[p->owner[q]] = 1;
            if (q + 1 == e || p->owner[q + 1] != p->owner[q]) {
                done(arg, p->owner[q], first, q, now_ms);
                first = q + 1;
            }
        }
    }
    if (x) /* a step failed: the rest is waited for here */
        st = mc_te_transfer_wait(s->te, x, sts);
    if (st != MC_OK) {
        for (size_t i = 0; i < p->n && failed; i++)
            if (sts[i].state != MC_TE_COMPLETED)
                failed[p->owner[i]] = 1;
        MC_LOG_WARN("transfer of %zu requests failed: %s", p->n, mc_status_str(st));
    }
    return st;
}

/* Start and wait at once: reserved (the answers wait in the sockets for this thread, and an
 * idle connection left parked by the previous synchronous transfer is used without any epoll
 * change). */
mc_status_t store_plan_run(mc_store_t *s, xfer_plan_t *p, unsigned char *failed)
{
    mc_te_transfer_t *x;
    mc_status_t st = store_plan_start(s, p, true, &x);
    return store_plan_finish(s, p, st, x, failed);
}
