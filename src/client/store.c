/* Store client: put/get through master RPC (metadata) + Transfer Engine (bytes).
 *
 * Threads: application threads call in concurrently; the master connection pool and the TE
 * are thread-safe. One heartbeat thread pings the master every second (client_ttl / 4 when
 * that is shorter), extends how long the contributed segment may be served after each answer
 * (serve_extend), and re-mounts it when the master answers NEED_REMOUNT (remount_schedule:
 * at once after a restart that recovered it, a lease period later after a drop).
 *
 * Integrity: writers send the XXH3-64 of the value with PutEnd; readers verify it after every
 * transfer, and check that the read lease (granted by GetReplicaList) had not expired when the
 * transfer finished. Only then are bytes reported as read.
 */
#include "mooncake/store.h"

#include "client/master_client.h"
#include "client/replica_hint.h"
#include "common/alloc.h"
#include "common/hash.h"
#include "common/payload.h"
#include "common/log.h"
#include "common/net.h"
#include "common/time.h"
#include "mooncake/te.h"
#include "rpc/arena.h"
#include "rpc/frame.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#define STORE_MAX_BATCH 16384
#define STORE_HEARTBEAT_MS 1000        /* or client_ttl / 4 if that is shorter */
/* A storage server serves its segment until client_ttl * 7/8 after the send time of its last
 * answered ping: the master drops it no earlier than client_ttl after receiving that ping. */
#define SERVE_TTL_NUM 7
#define SERVE_TTL_DEN 8
/* Replica hints and cached leases (replica_hint.h), in entries of 120 bytes plus the key: the
 * default, 262144 (32 MB + keys), keeps ~200 k hot keys without set overflows;
 * MC_STORE_REPLICA_HINTS overrides, 0 = off. */
#define STORE_HINT_SLOTS 262144
#define STORE_HINT_SLOTS_MAX (1u << 22)  /* 500 MB + keys */
#define SPEC_MAX_OBJECT (1u << 20)       /* larger objects: the lookup is small next to the read */
#define LEASE_MARGIN_MS 100              /* a cached lease is used while this much of it is left */
#define STAMP_BYTES 8                    /* random bytes an upsert writes over each old replica */
#define STAMP_MAX 16                     /* old replicas stamped per key (the master keeps fewer) */
#define STAMP_WAIT_MAX_MS 600000         /* cap on stamp_wait (a lease TTL from the network) */

struct mc_store {
    mc_te_t *te;
    const char *te_name;            /* owned by te */
    mc_master_client_t master;
    uint8_t client_id[16];

    void *segment;                  /* contributed memory (TE shareable), or NULL */
    size_t segment_size;
    uint8_t segment_uuid[16];
    char host_label[MC_HOST_MAX];

    mc_hint_table_t *hints;         /* replica_hint.h; NULL = no speculative reads */
    bool lease_cache;               /* gets read under read leases still held (MC_STORE_LEASE_CACHE) */
    atomic_ullong n_lookups, n_lease_hits, n_lease_misses, n_spec_hits; /* mc_store_read_stats */
    atomic_ullong n_feed_placements;

    /* Placement feed (MC_STORE_PLACEMENT_FEED; "placement feed" below). */
    char *feed_prefix;              /* NULL = no feed */
    mc_rpc_client_t *feed_rpc;      /* its own master connection (long polls) */
    uint64_t feed_from, feed_epoch; /* where the feed thread starts (feed_start) */
    pthread_t feed;
    int feed_started;
    atomic_int feed_stop;

    pthread_t heartbeat;
    int heartbeat_started;
    pthread_mutex_t hb_lock;
    pthread_cond_t hb_cond;
    int hb_stop;                    /* guarded by hb_lock */
    atomic_int master_reachable;
    atomic_uint heartbeat_ms;       /* STORE_HEARTBEAT_MS, or less for a short client_ttl */

    /* Segment fencing (store_ping; all guarded by ping_mu). */
    pthread_mutex_t ping_mu;
    uint64_t master_epoch;          /* of the last answered ping; 0 = none yet */
    uint64_t lease_ttl_ms;          /* the master's read lease, from the last answered ping */
    uint64_t remount_after_ms;      /* a re-mount is due from then on (store_ping); 0 = none */
    bool remount_undecided;         /* a new master; whether it recovered the segment: unknown */
};

static mc_status_t feed_start(mc_store_t *s, const char *master_addr);
static void feed_stop(mc_store_t *s);

/* ------------------------------------------------------------------ small helpers */

static mc_status_t key_check(const char *key)
{
    if (!key)
        return MC_ERR_INVALID_PARAMS;
    size_t len = strnlen(key, MC_STORE_KEY_MAX + 1);
    if (len == 0 || len > MC_STORE_KEY_MAX)
        return MC_ERR_INVALID_KEY;
    return MC_OK;
}

static mc_status_t iov_total(const struct iovec *parts, size_t n, uint64_t *total_p)
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
static uint64_t iov_hash(const struct iovec *parts, size_t n, uint64_t limit)
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

static McRpc__ReplicateConfig *rpc_config(const mc_replicate_config_t *cfg,
                                          McRpc__ReplicateConfig *out)
{
    mc_rpc__replicate_config__init(out);
    if (cfg) {
        out->replica_num = cfg->replica_num;
        out->with_soft_pin = cfg->with_soft_pin;
        out->with_hard_pin = cfg->with_hard_pin;
        out->preferred_segment = (char *)(cfg->preferred_segment ? cfg->preferred_segment : "");
    }
    return out;
}

/* ------------------------------------------------------------------ data movement plan */

/* A list of TE requests built for one operation; owner[i] says which object (batch index)
 * request i belongs to. Local replicas (in our own segment) are copied directly when added. */
typedef struct xfer_plan {
    mc_te_request_t *reqs;
    size_t *owner;
    size_t n, cap;
} xfer_plan_t;

static void plan_free(xfer_plan_t *p)
{
    mc_free(p->reqs);
    mc_free(p->owner);
    memset(p, 0, sizeof(*p));
}

static mc_status_t plan_push(xfer_plan_t *p, const mc_te_request_t *r, size_t owner)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        mc_te_request_t *reqs = mc_realloc(p->reqs, cap * sizeof(*reqs));
        if (!reqs)
            return MC_ERR_NO_MEMORY;
        p->reqs = reqs;
        size_t *owner_arr = mc_realloc(p->owner, cap * sizeof(*owner_arr));
        if (!owner_arr)
            return MC_ERR_NO_MEMORY;
        p->owner = owner_arr;
        p->cap = cap;
    }
    p->reqs[p->n] = *r;
    p->owner[p->n] = owner;
    p->n++;
    return MC_OK;
}

static int store_is_local(const mc_store_t *s, const char *endpoint, uint64_t addr, uint64_t size)
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
static bool hint_make(const mc_store_t *s, const McRpc__ReplicaDesc *rd,
                      const McRpc__ReplicaListResponse *rl, uint64_t t0_ms, mc_replica_hint_t *h)
{
    *h = (mc_replica_hint_t){.addr = rd->buffer_address, .size = rd->size};
    if (strlen(rd->transport_endpoint) >= sizeof(h->endpoint))
        return false;
    strcpy(h->endpoint, rd->transport_endpoint);
    if (rl && s->lease_cache && rd->size >= STAMP_BYTES) { /* tiny values: see stamp_add */
        h->checksum = rl->checksum;
        h->lease_until_ms = t0_ms + rl->lease_ttl_ms;
    }
    return true;
}

/* Remember where key's bytes are (replica_hint.h); rl and t0_ms as for hint_make. */
static void hint_remember(mc_store_t *s, const char *key, const McRpc__ReplicaDesc *rd,
                          const McRpc__ReplicaListResponse *rl, uint64_t t0_ms)
{
    mc_replica_hint_t h;
    if (hint_make(s, rd, rl, t0_ms, &h))
        mc_hint_set(s->hints, key, &h);
    else
        mc_hint_drop(s->hints, key);
}

/* Move `size` bytes between the parts (in order) and [addr, addr+size) on `endpoint`. */
static mc_status_t plan_add(mc_store_t *s, xfer_plan_t *p, mc_te_opcode_t op,
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
    mc_te_segment_t seg;
    mc_status_t st = mc_te_segment_open(s->te, endpoint, &seg);
    if (st != MC_OK) {
        MC_LOG_WARN("cannot open segment %s: %s", endpoint, mc_status_str(st));
        return st;
    }
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

static void uuid_random(uint8_t out[16])
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
 * than the stamp are never read under a cached lease (hint_remember). stamp: random bytes
 * (uuid_random) that live until the plan has run. A replica that cannot be stamped (not
 * listed, over max, or its write fails) does not fail the call: failed[owner] is set (here or
 * by the plan) and the caller then waits out the leases (stamp_wait). Returns that wait (ms;
 * 0 when nothing is retired). *token: what stamp_release hands back once every stamp landed
 * (0: nothing to hand back). */
static uint64_t stamp_add(mc_store_t *s, xfer_plan_t *p, const McRpc__RetiredReplicas *rr,
                          size_t max, uint8_t stamp[STAMP_BYTES], size_t owner,
                          unsigned char *failed, uint64_t *token)
{
    *token = 0;
    if (!rr || (rr->n_replicas == 0 && rr->unlisted == 0))
        return 0;
    if (rr->unlisted || rr->n_replicas > max)
        failed[owner] = 1;
    else
        *token = rr->token;
    for (size_t r = 0; r < rr->n_replicas && r < max; r++) {
        const McRpc__ReplicaDesc *rd = rr->replicas[r];
        struct iovec iov = {stamp, STAMP_BYTES};
        if (rd->size >= STAMP_BYTES &&
            plan_add(s, p, MC_TE_WRITE, rd->transport_endpoint, rd->buffer_address, STAMP_BYTES,
                     &iov, 1, owner) != MC_OK)
            failed[owner] = 1;
    }
    return rr->lease_ms;
}

/* After stamps that all landed: the master may free the old values' space now instead of at
 * the end of their leases (ReleaseRetired). Best effort: if this fails, it frees it then. */
static void stamp_release(mc_store_t *s, const uint64_t *tokens, size_t n)
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
static void stamp_wait(const char *op, const char *key, uint64_t lease_ms)
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
 * overlap with one RPC (te.h, mc_te_transfer_start_reserved). */
static mc_status_t plan_start(mc_store_t *s, xfer_plan_t *p, bool reserved, mc_te_transfer_t **x)
{
    *x = NULL;
    if (p->n == 0)
        return MC_OK;
    return reserved ? mc_te_transfer_start_reserved(s->te, p->reqs, p->n, x)
                    : mc_te_transfer_start(s->te, p->reqs, p->n, x);
}

/* Finishes what plan_start returned (start_st, x); failed[owner] is set for every object with
 * a request that did not complete. Returns the first error seen (MC_OK if all completed). */
static mc_status_t plan_finish(mc_store_t *s, xfer_plan_t *p, mc_status_t start_st,
                               mc_te_transfer_t *x, unsigned char *failed)
{
    mc_te_xfer_status_t *sts = x ? mc_calloc(p->n, sizeof(*sts)) : NULL;
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
    mc_free(sts);
    return st;
}

/* Start and wait at once: reserved (the answers wait in the sockets for this thread, and an
 * idle connection left parked by the previous synchronous transfer is used without any epoll
 * change). */
static mc_status_t plan_run(mc_store_t *s, xfer_plan_t *p, unsigned char *failed)
{
    mc_te_transfer_t *x;
    mc_status_t st = plan_start(s, p, true, &x);
    return plan_finish(s, p, st, x, failed);
}

/* ------------------------------------------------------------------ segment and heartbeat */

static McRpc__SegmentInfo *segment_info(mc_store_t *s, McRpc__SegmentInfo *info)
{
    mc_rpc__segment_info__init(info);
    info->name = (char *)s->te_name;
    info->base_addr = (uint64_t)(uintptr_t)s->segment;
    info->size = s->segment_size;
    info->host_label = s->host_label;
    info->te_endpoint = (char *)s->te_name;
    info->segment_uuid.len = 16;
    info->segment_uuid.data = s->segment_uuid;
    return info;
}

static mc_status_t store_mount(mc_store_t *s, int remount)
{
    McRpc__SegmentInfo info;
    segment_info(s, &info);
    ProtobufCMessage *resp = NULL;
    mc_status_t st;
    if (remount) {
        McRpc__SegmentInfo *segs[1] = {&info};
        McRpc__ReMountSegmentRequest req = MC_RPC__RE_MOUNT_SEGMENT_REQUEST__INIT;
        req.client_id = mc_master_client_id(&s->master);
        req.n_segments = 1;
        req.segments = segs;
        st = mc_master_client_call(&s->master, MC_OP_REMOUNT_SEGMENT, &req.base, &resp, 1);
        if (st == MC_OK)
            st = ((McRpc__BatchStatusResponse *)resp)->status;
    } else {
        McRpc__MountSegmentRequest req = MC_RPC__MOUNT_SEGMENT_REQUEST__INIT;
        req.client_id = mc_master_client_id(&s->master);
        req.segment = &info;
        st = mc_master_client_call(&s->master, MC_OP_MOUNT_SEGMENT, &req.base, &resp, 1);
        if (st == MC_OK)
            st = ((McRpc__StatusResponse *)resp)->status;
    }
    mc_rpc_response_free(resp);
    if (st != MC_OK)
        MC_LOG_ERROR("%s of segment %s (%zu bytes) failed: %s", remount ? "re-mount" : "mount",
                     s->te_name, s->segment_size, mc_status_str(st));
    else
        MC_LOG_INFO("%s segment %s (%zu bytes)", remount ? "re-mounted" : "mounted", s->te_name,
                    s->segment_size);
    return st;
}

/* The master answered a ping sent at t_send (ns): serve the segment until a bit less than
 * client_ttl from then, since the master cannot have dropped it before client_ttl from when it
 * received the ping, and ping at least four times per client_ttl. Same-host readers check the
 * limit themselves (te.h). */
static void serve_extend(mc_store_t *s, uint64_t t_send, uint64_t client_ttl_ms)
{
    if (!s->segment || client_ttl_ms == 0)
        return;
    uint64_t ttl_ns = client_ttl_ms * 1000000ull / SERVE_TTL_DEN * SERVE_TTL_NUM;
    mc_te_set_serve_until(s->te, s->segment, t_send + ttl_ns);
    uint64_t hb = client_ttl_ms / 4;
    atomic_store(&s->heartbeat_ms, (unsigned)(hb && hb < STORE_HEARTBEAT_MS ? hb
                                                                         : STORE_HEARTBEAT_MS));
}

/* Whether a (restarted) master recovered this client's segment from its log and waits for
 * its owner to re-mount it: 1 yes, 0 no, -1 unknown (the question failed). */
static int segment_recovering(mc_store_t *s)
{
    McRpc__QuerySegmentStatusRequest req = MC_RPC__QUERY_SEGMENT_STATUS_REQUEST__INIT;
    req.segment_name = (char *)s->te_name;
    ProtobufCMessage *resp = NULL;
    int r = -1;
    if (mc_master_client_call(&s->master, MC_OP_QUERY_SEGMENT_STATUS, &req.base, &resp, 1) ==
        MC_OK) {
        const McRpc__QuerySegmentStatusResponse *q = (const void *)resp;
        r = q->status == MC_OK && q->segment_status == MC_RPC__SEGMENT_STATUS__SEGMENT_RECOVERING;
    }
    mc_rpc_response_free(resp);
    return r;
}

/* The master asked for a re-mount, or a decision on one is pending: sets when the
 * re-mount is due (s->remount_after_ms). A master that restarted (new epoch) and recovered
 * the segment's objects from its log waits for the re-mount: at once. A master that is still
 * the same one asks because it dropped this client after client_ttl of silence (the process
 * was stopped, or cut off) and gave up its objects, which may have been put again elsewhere
 * since; so does a restarted master that did not recover the segment (no log). Then the
 * segment, fenced since it lost the master, stays unserved and unmounted for one more lease
 * period, until no reader holds a lease on what it held (store-client.md, "Lease cache").
 * Under ping_mu. */
static void remount_schedule(mc_store_t *s, const McRpc__PingResponse *pr, uint64_t now_ms)
{
    bool same_master = s->master_epoch && pr->master_epoch == s->master_epoch;
    if (!s->remount_undecided && same_master) {
        s->remount_after_ms = now_ms + pr->lease_ttl_ms;
        MC_LOG_WARN("the master dropped this client (silent for its client_ttl of %llu ms); "
                    "segment %s stays unserved and re-mounts in %llu ms, when no read lease on "
                    "its old contents is left",
                    (unsigned long long)pr->client_ttl_ms, s->te_name,
                    (unsigned long long)pr->lease_ttl_ms);
        return;
    }
    int recovered = segment_recovering(s);
    /* unknown: ask again at the next ping (a recovered segment must not wait: the master drops
     * one not re-mounted within client_ttl) */
    s->remount_undecided = recovered < 0;
    if (recovered > 0) {
        s->remount_after_ms = now_ms; /* at once */
        MC_LOG_WARN("master asked to re-mount (new master epoch %llu)",
                    (unsigned long long)pr->master_epoch);
    } else if (recovered == 0) {
        uint64_t lease = pr->lease_ttl_ms > s->lease_ttl_ms ? pr->lease_ttl_ms : s->lease_ttl_ms;
        s->remount_after_ms = now_ms + lease;
        MC_LOG_WARN("the new master (epoch %llu) did not recover segment %s (no write-ahead "
                    "log?); it stays unserved and re-mounts in %llu ms, when no read lease on "
                    "its old contents is left",
                    (unsigned long long)pr->master_epoch, s->te_name, (unsigned long long)lease);
    }
}

/* Pings the master. An answered ping extends how long the segment is served (serve_extend);
 * a re-mount the master asks for is scheduled (remount_schedule) and stays due until it
 * succeeds (the master answers NEED_REMOUNT only once). */
static mc_status_t store_ping(mc_store_t *s)
{
    McRpc__PingRequest req = MC_RPC__PING_REQUEST__INIT;
    req.client_id = mc_master_client_id(&s->master);
    ProtobufCMessage *resp = NULL;
    pthread_mutex_lock(&s->ping_mu);
    uint64_t t_send = mc_now_ns();
    mc_status_t st = mc_master_client_call(&s->master, MC_OP_PING, &req.base, &resp, 1);
    if (st == MC_OK)
        st = ((McRpc__PingResponse *)resp)->status;
    if (st == MC_OK) {
        const McRpc__PingResponse *pr = (const McRpc__PingResponse *)resp;
        bool need = pr->client_status == MC_RPC__CLIENT_STATUS__CLIENT_NEED_REMOUNT;
        uint64_t now_ms = mc_now_ms();
        if (s->segment && !s->remount_after_ms && (need || s->remount_undecided))
            remount_schedule(s, pr, now_ms);
        if (s->segment && !s->remount_undecided) {
            if (!s->remount_after_ms) {
                serve_extend(s, t_send, pr->client_ttl_ms);
            } else if (now_ms >= s->remount_after_ms && store_mount(s, 1) == MC_OK) {
                s->remount_after_ms = 0;
                serve_extend(s, t_send, pr->client_ttl_ms);
            }
        }
        s->master_epoch = pr->master_epoch;
        if (!s->remount_undecided) /* else the old master's lease still counts */
            s->lease_ttl_ms = pr->lease_ttl_ms;
    }
    pthread_mutex_unlock(&s->ping_mu);
    mc_rpc_response_free(resp);
    atomic_store(&s->master_reachable, st == MC_OK);
    return st;
}

static void *heartbeat_main(void *arg)
{
    mc_store_t *s = arg;
    pthread_mutex_lock(&s->hb_lock);
    while (!s->hb_stop) {
        pthread_mutex_unlock(&s->hb_lock);
        mc_status_t st = store_ping(s);
        if (st != MC_OK)
            MC_LOG_WARN("ping to master failed: %s", mc_status_str(st));
        pthread_mutex_lock(&s->hb_lock);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + atomic_load(&s->heartbeat_ms) * 1000000ull;
        ts.tv_sec += (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        while (!s->hb_stop && pthread_cond_timedwait(&s->hb_cond, &s->hb_lock, &ts) == 0) {
        }
    }
    pthread_mutex_unlock(&s->hb_lock);
    return NULL;
}

/* ------------------------------------------------------------------ lifecycle */

mc_status_t mc_store_create(const mc_store_config_t *cfg, mc_store_t **store_p)
{
    *store_p = NULL;
    if (!cfg || !cfg->master_server_addr || !*cfg->master_server_addr) {
        MC_LOG_ERROR("store setup: master_server_addr is required");
        return MC_ERR_INVALID_PARAMS;
    }
    mc_store_t *s = MC_NEW(mc_store_t);
    if (!s)
        return MC_ERR_NO_MEMORY;
    pthread_mutex_init(&s->hb_lock, NULL);
    pthread_mutex_init(&s->ping_mu, NULL);
    atomic_store(&s->heartbeat_ms, STORE_HEARTBEAT_MS);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->hb_cond, &ca);
    pthread_condattr_destroy(&ca);
    uuid_random(s->client_id);
    uuid_random(s->segment_uuid);
    const char *hs = getenv("MC_STORE_REPLICA_HINTS");
    unsigned long long slots = hs && *hs ? strtoull(hs, NULL, 10) : STORE_HINT_SLOTS;
    if (slots > STORE_HINT_SLOTS_MAX) {
        MC_LOG_WARN("MC_STORE_REPLICA_HINTS=%s: using the maximum, %u slots", hs,
                    STORE_HINT_SLOTS_MAX);
        slots = STORE_HINT_SLOTS_MAX;
    }
    s->hints = mc_hint_table_new((size_t)slots);

    /* Upstream's "tcp" means "no RDMA": same-host peers still take the shm path (the TE
     * decides per peer; MC_FORCE_TCP=1 forces tcp everywhere). */
    const char *proto = cfg->protocol;
    if (!proto || !*proto || strcmp(proto, "tcp") == 0 || strcmp(proto, "rdma") == 0)
        proto = "auto";
    /* Cached leases need the storage server's serving limit (mc_te_set_serve_until), which
     * one-sided ucx RMA reads do not pass through: a ucx client asks the master every time. */
    const char *lc = getenv("MC_STORE_LEASE_CACHE");
    s->lease_cache = s->hints && !(lc && strcmp(lc, "0") == 0) && strcmp(proto, "ucx") != 0;
    mc_te_config_t tcfg = {
        .metadata_uri = cfg->metadata_server && *cfg->metadata_server ? cfg->metadata_server
                                                                       : "P2PHANDSHAKE",
        .local_server_name = cfg->local_hostname && *cfg->local_hostname ? cfg->local_hostname
                                                                         : "127.0.0.1",
        .protocol = proto,
        .transfer_timeout_ms = cfg->transfer_timeout_ms,
    };
    mc_status_t st = mc_te_create(&tcfg, &s->te);
    if (st != MC_OK) {
        MC_LOG_ERROR("store setup: transfer engine failed: %s", mc_status_str(st));
        goto fail;
    }
    s->te_name = mc_te_local_name(s->te);
    if (cfg->host_label && *cfg->host_label) {
        snprintf(s->host_label, sizeof(s->host_label), "%s", cfg->host_label);
    } else {
        uint16_t port;
        if (mc_net_split_hostport(s->te_name, s->host_label, &port) != MC_OK)
            snprintf(s->host_label, sizeof(s->host_label), "%s", s->te_name);
    }

    st = mc_master_client_init(&s->master, cfg->master_server_addr, cfg->rpc_timeout_ms,
                               s->client_id);
    if (st != MC_OK)
        goto fail;

    if (cfg->global_segment_size > 0) {
        s->segment_size = cfg->global_segment_size;
        s->segment = mc_te_alloc_shareable(s->te, s->segment_size);
        if (!s->segment) {
            MC_LOG_ERROR("store setup: cannot allocate a %zu-byte segment", s->segment_size);
            st = MC_ERR_NO_MEMORY;
            goto fail;
        }
        st = mc_te_register(s->te, s->segment, s->segment_size, "cpu:0");
        if (st != MC_OK)
            goto fail;
        st = store_mount(s, 0);
        if (st == MC_ERR_RPC_FAIL || st == MC_ERR_TIMEOUT)
            MC_LOG_ERROR("store setup: master %s unreachable (is mooncake_master running "
                         "there?)", cfg->master_server_addr);
        if (st != MC_OK)
            goto fail;
    } else if ((st = store_ping(s)) != MC_OK) {
        MC_LOG_ERROR("store setup: master %s unreachable: %s", cfg->master_server_addr,
                     mc_status_str(st));
        goto fail;
    }
    atomic_store(&s->master_reachable, 1);
    if (pthread_create(&s->heartbeat, NULL, heartbeat_main, s) != 0) {
        st = MC_ERR_INTERNAL;
        goto fail;
    }
    s->heartbeat_started = 1;
    if ((st = feed_start(s, cfg->master_server_addr)) != MC_OK)
        goto fail;
    *store_p = s;
    return MC_OK;
fail:
    mc_store_destroy(s);
    return st;
}

void mc_store_destroy(mc_store_t *s)
{
    if (!s)
        return;
    feed_stop(s);
    if (s->heartbeat_started) {
        pthread_mutex_lock(&s->hb_lock);
        s->hb_stop = 1;
        pthread_cond_signal(&s->hb_cond);
        pthread_mutex_unlock(&s->hb_lock);
        pthread_join(s->heartbeat, NULL);
    }
    if (s->segment && s->te) /* nothing served after the unmount (readers under cached leases) */
        mc_te_set_serve_until(s->te, s->segment, 1);
    if (s->segment && s->master.conns[0] && atomic_load(&s->master_reachable)) {
        McRpc__UnmountSegmentRequest req = MC_RPC__UNMOUNT_SEGMENT_REQUEST__INIT;
        req.client_id = mc_master_client_id(&s->master);
        req.segment_name = (char *)s->te_name;
        ProtobufCMessage *resp = NULL;
        if (mc_master_client_call(&s->master, MC_OP_UNMOUNT_SEGMENT, &req.base, &resp, 1) == MC_OK)
            MC_LOG_INFO("unmounted segment %s", s->te_name);
        mc_rpc_response_free(resp);
    }
    mc_master_client_fini(&s->master);
    if (s->te) {
        if (s->segment) {
            mc_te_unregister(s->te, s->segment);
            mc_te_free_shareable(s->te, s->segment);
        }
        mc_te_destroy(s->te);
    }
    mc_hint_table_free(s->hints);
    pthread_cond_destroy(&s->hb_cond);
    pthread_mutex_destroy(&s->hb_lock);
    pthread_mutex_destroy(&s->ping_mu);
    mc_free(s);
}

void mc_store_read_stats(mc_store_t *s, mc_store_read_stats_t *out)
{
    *out = (mc_store_read_stats_t){0};
    if (!s)
        return;
    out->master_lookups = atomic_load(&s->n_lookups);
    out->lease_hits = atomic_load(&s->n_lease_hits);
    out->lease_misses = atomic_load(&s->n_lease_misses);
    out->speculative_hits = atomic_load(&s->n_spec_hits);
    out->feed_placements = atomic_load(&s->n_feed_placements);
}

int mc_store_health(mc_store_t *s)
{
    if (!s)
        return 1;
    return store_ping(s) == MC_OK ? 0 : 2;
}

const char *mc_store_hostname(const mc_store_t *s)
{
    return s ? s->te_name : "";
}

mc_status_t mc_store_register_buffer(mc_store_t *s, void *addr, size_t len)
{
    if (!s || !addr || !len)
        return MC_ERR_INVALID_PARAMS;
    return mc_te_register(s->te, addr, len, "cpu:0");
}

mc_status_t mc_store_unregister_buffer(mc_store_t *s, void *addr)
{
    if (!s || !addr)
        return MC_ERR_INVALID_PARAMS;
    return mc_te_unregister(s->te, addr);
}

/* ------------------------------------------------------------------ put / upsert */

static mc_status_t store_put_attempt(mc_store_t *s, const char *key, const struct iovec *parts,
                                     size_t n_parts, const mc_replicate_config_t *cfg, int upsert)
{
    uint64_t size;
    mc_status_t st = key_check(key);
    if (st == MC_OK)
        st = iov_total(parts, n_parts, &size);
    if (st != MC_OK)
        return st;
    if (size == 0)
        return MC_ERR_INVALID_PARAMS;

    McRpc__ReplicateConfig rc;
    McRpc__PutStartRequest req = MC_RPC__PUT_START_REQUEST__INIT;
    req.client_id = mc_master_client_id(&s->master);
    req.key = (char *)key;
    req.value_size = size;
    req.config = rpc_config(cfg, &rc);
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
    uuid_random(stamp);
    uint64_t token;
    uint64_t retired_lease_ms = stamp_add(s, &plan, ps->retired, STAMP_MAX, stamp, 1, failed,
                                          &token);
    uint64_t checksum = started ? iov_hash(parts, n_parts, size) : 0;
    for (size_t r = 0; r < ps->n_replicas && st == MC_OK; r++) {
        McRpc__ReplicaDesc *rd = ps->replicas[r];
        if (rd->size != size) {
            MC_LOG_ERROR("master returned a %llu-byte replica for a %llu-byte put of %s",
                         (unsigned long long)rd->size, (unsigned long long)size, key);
            st = MC_ERR_INVALID_REPLICA;
            break;
        }
        st = plan_add(s, &plan, MC_TE_WRITE, rd->transport_endpoint, rd->buffer_address, size,
                      parts, n_parts, 0);
        if (st == MC_OK && r == 0) /* a hint only: a failed put makes it miss, never misread */
            hint_remember(s, key, rd, NULL, 0);
    }
    /* Run even if the value's write could not be set up: the old value is gone from the
     * master already, and its stamps must land. */
    mc_status_t ts = plan_run(s, &plan, failed);
    if (st == MC_OK && failed[0])
        st = ts != MC_OK ? ts : MC_ERR_TRANSFER_FAIL;
    uint64_t stamp_wait_ms = failed[1] ? retired_lease_ms : 0;
    if (!failed[1])
        stamp_release(s, &token, token != 0);
    plan_free(&plan);
    mc_rpc_response_free(resp);
    resp = NULL;
    if (!started) {
        stamp_wait("upsert", key, stamp_wait_ms);
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
        stamp_wait("upsert", key, stamp_wait_ms);
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
    stamp_wait("upsert", key, stamp_wait_ms);
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

/* Status of a batch reply: the call's, else the reply's whole-batch status, else RPC_FAIL if
 * the reply does not have one result per key. */
static mc_status_t batch_reply_status(mc_status_t call_st, int32_t reply_st, size_t n_results,
                                      size_t n_keys)
{
    if (call_st != MC_OK)
        return call_st;
    if (reply_st != MC_OK)
        return reply_st;
    return n_results == n_keys ? MC_OK : MC_ERR_RPC_FAIL;
}

static mc_status_t batch_args_check(mc_store_t *s, size_t n, const char *const *keys)
{
    if (!s || (n && !keys))
        return MC_ERR_INVALID_PARAMS;
    if (n > STORE_MAX_BATCH)
        return MC_ERR_TOO_LARGE;
    return MC_OK;
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
    st = batch_reply_status(st, br ? br->status : 0, br ? br->n_statuses : 0, n);
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
    mc_status_t st = batch_args_check(s, n, keys);
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
    uint64_t *tokens = mc_calloc(n, sizeof(*tokens)); /* stamp_add, for stamp_release */
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
        results[i] = key_check(keys[i]);
        if (results[i] == MC_OK)
            results[i] = iov_total(parts[i], n_parts[i], &bk[i].size);
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
    req.config = rpc_config(cfg, &rc);
    mc_status_t bst = mc_master_client_call(
        &s->master, upsert ? MC_OP_BATCH_UPSERT_START : MC_OP_BATCH_PUT_START, &req.base, &resp, 0);
    McRpc__BatchPutStartResponse *bs = (McRpc__BatchPutStartResponse *)resp;
    bst = batch_reply_status(bst, bs ? bs->status : 0, bs ? bs->n_results : 0, m);
    if (bst != MC_OK) {
        for (size_t j = 0; j < m; j++)
            results[idx[j]] = bst;
        goto out;
    }

    /* 2. One TE batch writes every replica of every started key (and stamps old values). */
    uint8_t stamp[16];
    uuid_random(stamp);
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
            stamp_add(s, &plan, ps->retired, STAMP_MAX, stamp, n, failed, &tokens[n_tok]);
        n_tok += tokens[n_tok] != 0;
        if (lease_ms > stamp_wait_ms)
            stamp_wait_ms = lease_ms;
        results[i] = ps->status;
        if (ps->status != MC_OK)
            continue;
        bk[i].started = 1;
        bk[i].checksum = iov_hash(parts[i], n_parts[i], bk[i].size);
        if (ps->n_replicas == 0)
            failed[i] = 1;
        for (size_t r = 0; r < ps->n_replicas && !failed[i]; r++) {
            McRpc__ReplicaDesc *rd = ps->replicas[r];
            if (rd->size != bk[i].size ||
                plan_add(s, &plan, MC_TE_WRITE, rd->transport_endpoint, rd->buffer_address,
                         bk[i].size, parts[i], n_parts[i], i) != MC_OK)
                failed[i] = 1;
            else if (r == 0) /* a hint only: a failed put makes it miss, never misread */
                hint_remember(s, keys[i], rd, NULL, 0);
        }
    }
    plan_run(s, &plan, failed);
    if (!failed[n]) /* every stamp landed: hand the old values' space back now */
        stamp_release(s, tokens, n_tok);

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
        stamp_wait("batch upsert", "", stamp_wait_ms);
out:
    mc_rpc_response_free(resp);
    plan_free(&plan);
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

/* ------------------------------------------------------------------ get */

/* Replica order for reads: our own segment first, then the others in the master's order, then
 * those on `avoid` (an endpoint that just failed us; may be NULL). Writes at most `cap`
 * indexes into order[] and returns how many. */
static size_t replica_order(const mc_store_t *s, McRpc__ReplicaDesc **reps, size_t n, size_t *order,
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

static void spec_start(mc_store_t *s, spec_read_t *sp, const char *key,
                       const struct iovec *parts, size_t n_parts, uint64_t cap)
{
    memset(sp, 0, sizeof(*sp));
    mc_replica_hint_t h;
    if (!mc_hint_get(s->hints, key, &h) || h.size == 0 || h.size > SPEC_MAX_OBJECT ||
        h.size > cap)
        return;
    if (plan_add(s, &sp->plan, MC_TE_READ, h.endpoint, h.addr, h.size, parts, n_parts, 0) !=
            MC_OK ||
        plan_start(s, &sp->plan, true, &sp->xfer) != MC_OK) {
        plan_free(&sp->plan);
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
    plan_free(&sp->plan);
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

/* The pieces of parts covering bytes [off, off+len) into out (capacity n); returns the count. */
static size_t iov_sub(const struct iovec *parts, size_t n, uint64_t off, uint64_t len,
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

static void hash_range(mc_hash_stream_t *hs, const struct iovec *parts, size_t n_parts,
                       struct iovec *scratch, uint64_t off, uint64_t len)
{
    size_t k = iov_sub(parts, n_parts, off, len, scratch);
    for (size_t i = 0; i < k; i++)
        mc_hash_stream_update(hs, scratch[i].iov_base, scratch[i].iov_len);
}

/* Reads [addr, addr+size) of `endpoint` into parts and sets *hash_p to the XXH3 of the bytes.
 * Large remote objects travel as one transfer of PIPELINE_CHUNK requests, consumed in order
 * with mc_te_transfer_wait_some: this thread hashes chunk k while the TE loops receive the
 * chunks after it, instead of hashing everything after the last byte arrived. */
static mc_status_t read_hashed(mc_store_t *s, const char *endpoint, uint64_t addr, uint64_t size,
                               const struct iovec *parts, size_t n_parts, uint64_t *hash_p)
{
    mc_status_t st;
    uint64_t chunks = (size + PIPELINE_CHUNK - 1) / PIPELINE_CHUNK;
    xfer_plan_t plan = {0};
    if (size < PIPELINE_MIN || chunks + n_parts > MC_TE_MAX_BATCH ||
        store_is_local(s, endpoint, addr, size)) {
        st = plan_add(s, &plan, MC_TE_READ, endpoint, addr, size, parts, n_parts, 0);
        if (st == MC_OK)
            st = plan_run(s, &plan, NULL);
        plan_free(&plan);
        if (st == MC_OK)
            *hash_p = iov_hash(parts, n_parts, size);
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
        size_t k = iov_sub(parts, n_parts, off, len, scratch);
        st = plan_add(s, &plan, MC_TE_READ, endpoint, addr + off, len, scratch, k, 0);
        ends[c] = plan.n;
    }
    mc_te_transfer_t *x = NULL;
    if (st == MC_OK)
        st = plan_start(s, &plan, false, &x);
    for (uint64_t c = 0; c < chunks && st == MC_OK; c++) {
        st = mc_te_transfer_wait_some(s->te, x, ends[c], NULL);
        if (st == MC_OK)
            hash_range(&hs, parts, n_parts, scratch, c * PIPELINE_CHUNK, chunk_len(size, c));
    }
    if (x) {
        mc_status_t w = mc_te_transfer_wait(s->te, x, NULL);
        if (st == MC_OK)
            st = w;
    }
    uint64_t h = mc_hash_stream_final(&hs);
    plan_free(&plan);
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

/* ------------------------------------------------------------------ placement feed */

/* With MC_STORE_PLACEMENT_FEED=<prefix> in the environment at setup, a thread long-polls the
 * master's object events asking for placements (PollEvents with_placements): every object
 * committed under the prefix arrives with its replicas, checksum and a read lease granted to
 * this client, and is recorded like the answer of a get's lookup (hint_remember). This
 * client's first get of such a key then reads the replica without asking the master (one round
 * trip, like a repeated read), verified by checksum as every cached-lease read is. For readers
 * of what others write: a decode instance reading the blocks a prefill instance put. Nothing
 * depends on it: a missed event (a gap, a new master, a key pushed out of the hint table) only
 * means that get asks the master. The master holds each pushed object under a read lease, as
 * if this client had read it (store-client.md, "Placement feed"). */
#define FEED_WAIT_MS 200         /* long-poll wait: also how long close may wait for the thread */
#define FEED_MAX_EVENTS 1024     /* events per answer */
#define FEED_RETRY_MS 100        /* after a failed poll */

/* The placement of key from the feed, answered to a poll sent at t0_ms: recorded as a get's
 * lookup would be, on the replica this client would read first. */
static void feed_remember(mc_store_t *s, const char *key, const McRpc__ReplicaListResponse *rl,
                          uint64_t t0_ms)
{
    size_t order[16];
    if (key_check(key) != MC_OK || rl->status != MC_OK ||
        replica_order(s, rl->replicas, rl->n_replicas, order, 16, NULL) == 0)
        return;
    const McRpc__ReplicaDesc *rd = rl->replicas[order[0]];
    if (rd->size != rl->size)
        return;
    hint_remember(s, key, rd, rl, t0_ms);
    atomic_fetch_add(&s->n_feed_placements, 1);
}

static void feed_pause(mc_store_t *s, uint32_t ms)
{
    for (uint32_t t = 0; t < ms && !atomic_load(&s->feed_stop); t += 10)
        mc_sleep_ms(10);
}

/* One PollEvents call of the feed from (from, epoch), waiting up to wait_ms. On MC_OK, *r_p
 * is the answer (the caller frees it) and *t0_p when it was sent. */
static mc_status_t feed_poll(mc_store_t *s, uint64_t from, uint64_t epoch, uint32_t wait_ms,
                             McRpc__PollEventsResponse **r_p, uint64_t *t0_p)
{
    McRpc__PollEventsRequest q = MC_RPC__POLL_EVENTS_REQUEST__INIT;
    q.from_seq = from;
    q.epoch = epoch;
    q.wait_ms = wait_ms;
    q.max_events = FEED_MAX_EVENTS;
    q.with_placements = 1;
    q.placement_prefix = s->feed_prefix;
    *t0_p = mc_now_ms(); /* never later than the master's grant of the leases */
    ProtobufCMessage *resp = NULL;
    mc_status_t st = mc_rpc_client_call(s->feed_rpc, MC_OP_POLL_EVENTS, &q.base, &resp,
                                        wait_ms + s->master.timeout_ms);
    *r_p = (McRpc__PollEventsResponse *)resp;
    if (st == MC_OK && (*r_p)->status != MC_OK) {
        st = (*r_p)->status;
        mc_rpc_response_free(resp);
        *r_p = NULL;
    }
    return st;
}

static void *feed_main(void *arg)
{
    mc_store_t *s = arg;
    uint64_t from = s->feed_from, epoch = s->feed_epoch;
    while (!atomic_load(&s->feed_stop)) {
        McRpc__PollEventsResponse *r = NULL;
        uint64_t t0;
        mc_status_t st = feed_poll(s, from, epoch, FEED_WAIT_MS, &r, &t0);
        if (st == MC_ERR_NOT_SUPPORTED) {
            MC_LOG_WARN("placement feed: the master keeps no event log (event_buffer_size 0); "
                        "feed stopped");
            break;
        }
        if (st != MC_OK) {
            MC_LOG_DEBUG("placement feed: poll failed: %s", mc_status_str(st));
            feed_pause(s, FEED_RETRY_MS);
            continue;
        }
        if (r->gap || r->epoch != epoch) { /* start, a new master, or events dropped: go on
                                              from now (the feed is only a shortcut) */
            from = r->next_seq;
            epoch = r->epoch;
        } else {
            for (size_t i = 0; i < r->n_events; i++)
                if (r->events[i]->placement)
                    feed_remember(s, r->events[i]->key, r->events[i]->placement, t0);
            from += r->n_events;
        }
        mc_rpc_response_free(&r->base);
    }
    return NULL;
}

static mc_status_t feed_start(mc_store_t *s, const char *master_addr)
{
    const char *prefix = getenv("MC_STORE_PLACEMENT_FEED");
    if (!prefix)
        return MC_OK;
    if (strlen(prefix) > MC_STORE_KEY_MAX) {
        MC_LOG_ERROR("store setup: MC_STORE_PLACEMENT_FEED is longer than a key (%d bytes)",
                     MC_STORE_KEY_MAX);
        return MC_ERR_INVALID_PARAMS;
    }
    if (!s->hints) {
        MC_LOG_WARN("MC_STORE_PLACEMENT_FEED is set but replica hints are off "
                    "(MC_STORE_REPLICA_HINTS=0): no placement feed");
        return MC_OK;
    }
    if (!s->lease_cache)
        MC_LOG_INFO("placement feed without the lease cache: placements are used as hints only");
    if (!(s->feed_prefix = mc_strdup(prefix)))
        return MC_ERR_NO_MEMORY;
    mc_status_t st = mc_rpc_client_create(master_addr, NULL, &s->feed_rpc);
    if (st != MC_OK)
        return st;
    /* Where the stream is now, before setup returns: everything committed after that is pushed
     * (a thread that asked later would miss what was put meanwhile). */
    McRpc__PollEventsResponse *r = NULL;
    uint64_t t0;
    st = feed_poll(s, 0, 0, 0, &r, &t0); /* from 0: answered at once with a gap */
    if (st == MC_ERR_NOT_SUPPORTED) {
        MC_LOG_WARN("MC_STORE_PLACEMENT_FEED is set but the master keeps no event log "
                    "(event_buffer_size 0): no placement feed");
        feed_stop(s); /* no feed: nothing of it kept */
        return MC_OK;
    }
    if (st != MC_OK) {
        MC_LOG_ERROR("store setup: placement feed: PollEvents failed: %s", mc_status_str(st));
        return st;
    }
    s->feed_from = r->next_seq;
    s->feed_epoch = r->epoch;
    mc_rpc_response_free(&r->base);
    if (pthread_create(&s->feed, NULL, feed_main, s) != 0)
        return MC_ERR_INTERNAL;
    s->feed_started = 1;
    MC_LOG_INFO("placement feed on for keys starting with \"%s\"", prefix);
    return MC_OK;
}

static void feed_stop(mc_store_t *s)
{
    if (s->feed_started) {
        atomic_store(&s->feed_stop, 1);
        pthread_join(s->feed, NULL);
        s->feed_started = 0;
    }
    mc_rpc_client_destroy(s->feed_rpc);
    s->feed_rpc = NULL;
    mc_free(s->feed_prefix);
    s->feed_prefix = NULL;
}

/* Reads the object described by rl into parts (capacity already checked), trying replicas in
 * order; verifies lease and checksum. Returns bytes read or a negative status. */
static int64_t store_read_verified(mc_store_t *s, const char *key, const McRpc__ReplicaListResponse *rl,
                                   const struct iovec *parts, size_t n_parts, uint64_t t0_ms,
                                   const char *avoid, bool last_try)
{
    size_t order[16];
    size_t n = replica_order(s, rl->replicas, rl->n_replicas, order, 16, avoid);
    mc_status_t st = MC_ERR_OBJECT_NOT_FOUND;
    for (size_t k = 0; k < n; k++) {
        McRpc__ReplicaDesc *rd = rl->replicas[order[k]];
        if (rd->size != rl->size) {
            st = MC_ERR_INVALID_REPLICA;
            continue;
        }
        uint64_t hash = 0;
        st = read_hashed(s, rd->transport_endpoint, rd->buffer_address, rl->size, parts, n_parts,
                         &hash);
        if (st != MC_OK) {
            MC_LOG_WARN("get %s: replica on %s failed: %s", key, rd->segment_name,
                        mc_status_str(st));
            st = MC_ERR_TRANSFER_FAIL;
            continue;
        }
        if (mc_now_ms() > t0_ms + rl->lease_ttl_ms) {
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
        hint_remember(s, key, rd, rl, t0_ms);
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

static mc_status_t store_replica_list(mc_store_t *s, const char *key, McRpc__ReplicaListResponse **rl_p)
{
    McRpc__KeyRequest req = MC_RPC__KEY_REQUEST__INIT;
    req.client_id = mc_master_client_id(&s->master);
    req.key = (char *)key;
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
             iov_hash(parts, n_parts, rl->size) == rl->checksum) {
        hint_remember(s, key, spec_rd, rl, t0);
        atomic_fetch_add(&s->n_spec_hits, 1);
        rc = (int64_t)rl->size;
    } else
        rc = store_read_verified(s, key, rl, parts, n_parts, t0,
                                 cache_failed ? cache_failed : spec_failed_endpoint(&sp), last_try);
    if (rl)
        mc_rpc_response_free(&rl->base);
    return rc;
}

/* A checksum mismatch right after a lookup may be a replica that a concurrent upsert stamped
 * (the value changed after the lookup): the get asks the master again, twice at most, before
 * it reports CHECKSUM_MISMATCH (logged as corruption only then). */
#define GET_TRIES 3

int64_t mc_store_get_into(mc_store_t *s, const char *key, const struct iovec *parts,
                          size_t n_parts)
{
    uint64_t cap;
    mc_status_t st = s ? key_check(key) : MC_ERR_INVALID_PARAMS;
    if (st == MC_OK)
        st = iov_total(parts, n_parts, &cap);
    if (st != MC_OK)
        return st;
    int64_t rc = MC_ERR_CHECKSUM;
    for (int t = 0; t < GET_TRIES && rc == MC_ERR_CHECKSUM; t++)
        rc = get_into_once(s, key, parts, n_parts, cap, t == GET_TRIES - 1);
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
        rc = store_read_verified(s, key, rl, &iov, 1, t0, cache_failed, last_try);
    }
    mc_rpc_response_free(&rl->base);
    if (rc < 0)
        mc_free(buf);
    else
        *buf_p = buf;
    return rc;
}

mc_status_t mc_store_get(mc_store_t *s, const char *key, void **value_p, size_t *len_p)
{
    if (!value_p || !len_p)
        return MC_ERR_INVALID_PARAMS;
    *value_p = NULL;
    *len_p = 0;
    mc_status_t st = s ? key_check(key) : MC_ERR_INVALID_PARAMS;
    if (st != MC_OK)
        return st;
    int64_t rc = MC_ERR_CHECKSUM;
    for (int t = 0; t < GET_TRIES && rc == MC_ERR_CHECKSUM; t++)
        rc = get_heap_once(s, key, value_p, t == GET_TRIES - 1);
    if (rc < 0)
        return (mc_status_t)rc;
    *len_p = (size_t)rc;
    return MC_OK;
}

/* A key of a batch get that the batch could not finish (its read failed or did not verify):
 * fetched alone, with a fresh lease and every replica tried. In heap mode its buffer is
 * replaced (the object may have changed size meanwhile). */
static int64_t batch_get_alone(mc_store_t *s, const char *key, void **heap_slot,
                               struct iovec *heap_iov, const struct iovec *kp, size_t kn)
{
    if (!heap_slot)
        return mc_store_get_into(s, key, kp, kn);
    mc_free(*heap_slot);
    *heap_slot = NULL;
    size_t len = 0;
    mc_status_t st = mc_store_get(s, key, heap_slot, &len);
    *heap_iov = (struct iovec){*heap_slot, len};
    return st == MC_OK ? (int64_t)len : st;
}

/* Batch get core. With heap == NULL, key i is read into parts[i]; otherwise each found key gets
 * a fresh heap buffer of its exact size (heap[i], freed here on failure, else the caller's)
 * and parts/n_parts are ignored. results[i] = bytes read or a negative status.
 *
 * Keys under a read lease this client still holds (lease cache) are read at once without
 * asking the master; the others are looked up in one BatchGetReplicaList meanwhile and read
 * in one TE batch after it. In caller memory, keys of at most SPEC_MAX_OBJECT with a hint but
 * no usable lease are also read at once, speculatively: their bytes count if the lookup names
 * the hinted replica (as for single gets). Every key's bytes are verified against its
 * checksum. */
static mc_status_t batch_get_common(mc_store_t *s, size_t n, const char *const *keys,
                                    const struct iovec *const *parts, const size_t *n_parts,
                                    void **heap, int64_t *results)
{
    mc_status_t st = batch_args_check(s, n, keys);
    if (st != MC_OK || n == 0)
        return st;
    if ((!heap && (!parts || !n_parts)) || !results)
        return MC_ERR_INVALID_PARAMS;
    for (size_t i = 0; heap && i < n; i++)
        heap[i] = NULL;
    char **req_keys = mc_calloc(n, sizeof(*req_keys));
    size_t *idx = mc_calloc(n, sizeof(*idx));
    unsigned char *failed = mc_calloc(n, 1);
    McRpc__ReplicaListResponse **lists = mc_calloc(n, sizeof(*lists));
    const McRpc__ReplicaDesc **read_from = mc_calloc(n, sizeof(*read_from));
    /* early[i]: where key i was read before the lookup answered (early_read[i]); under a
     * cached lease if early[i].lease_until_ms != 0 (no lookup), else a guess */
    mc_replica_hint_t *early = mc_calloc(n, sizeof(*early));
    bool *hinted = mc_calloc(n, sizeof(*hinted));
    unsigned char *early_read = mc_calloc(n, 1);
    struct iovec *heap_iov = heap ? mc_calloc(n, sizeof(*heap_iov)) : NULL;
    /* what the verified lookups taught, recorded together at the end (mc_hint_set_many) */
    const char **learn_keys = mc_calloc(n, sizeof(*learn_keys));
    mc_replica_hint_t *learn = mc_calloc(n, sizeof(*learn));
    size_t n_learn = 0;
    mc_rpc_arena_t resp_arena; /* the lookup's answer: one allocation, not several per key */
    mc_rpc_arena_init(&resp_arena, 256 * n + 1024);
    xfer_plan_t plan = {0}, early_plan = {0};
    ProtobufCMessage *resp = NULL;
    if (!req_keys || !idx || !failed || !lists || !read_from || !early || !hinted ||
        !early_read || (heap && !heap_iov) || !learn_keys || !learn) {
        st = MC_ERR_NO_MEMORY;
        goto out;
    }
    /* 1. Validate; keys under a cached lease (and hinted guesses) join early_plan, all but
     * the leased ones the lookup. */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) { /* req_keys: the valid keys for now (NULL: invalid) */
        results[i] = key_check(keys[i]);
        req_keys[i] = results[i] == MC_OK ? (char *)keys[i] : NULL;
    }
    mc_hint_get_many(s->hints, n, (const char *const *)req_keys, early, hinted);
    uint64_t now = mc_now_ms();
    for (size_t i = 0; i < n; i++) {
        uint64_t cap = 0;
        if (results[i] == MC_OK && !heap)
            results[i] = iov_total(parts[i], n_parts[i], &cap);
        if (results[i] != MC_OK)
            continue;
        bool leased = hinted[i] && lease_usable(&early[i], now);
        bool guess = hinted[i] && !leased && !heap && early[i].size <= SPEC_MAX_OBJECT;
        const mc_replica_hint_t *h = &early[i];
        bool read_now = (leased || guess) && (heap || h->size <= cap) &&
                        (!heap || (heap[i] = mc_malloc(h->size)));
        if (!read_now || !leased)
            early[i].lease_until_ms = 0; /* the key goes to the lookup */
        if (read_now) {
            if (heap) {
                prefault_heap(heap[i], h->size);
                heap_iov[i] = (struct iovec){heap[i], h->size};
            }
            early_read[i] = 1;
            if (plan_add(s, &early_plan, MC_TE_READ, h->endpoint, h->addr, h->size,
                         heap ? &heap_iov[i] : parts[i], heap ? 1 : n_parts[i], i) != MC_OK)
                failed[i] = 1;
            if (leased)
                continue;
        }
        req_keys[m] = (char *)keys[i];
        idx[m++] = i;
    }
    mc_te_transfer_t *early_x = NULL;
    mc_status_t early_st = plan_start(s, &early_plan, m > 0, &early_x);

    /* 2. Look the others up (while the early reads are in flight), then finish those. */
    uint64_t t0 = mc_now_ms();
    mc_status_t bst = MC_OK;
    McRpc__BatchReplicaListResponse *br = NULL;
    if (m > 0) {
        McRpc__BatchKeyRequest req = MC_RPC__BATCH_KEY_REQUEST__INIT;
        req.client_id = mc_master_client_id(&s->master);
        req.n_keys = m;
        req.keys = req_keys;
        atomic_fetch_add(&s->n_lookups, m);
        bst = mc_master_client_call_with(&s->master, MC_OP_BATCH_GET_REPLICA_LIST, &req.base,
                                         &resp, 1, &resp_arena.pb);
        br = (McRpc__BatchReplicaListResponse *)resp;
        bst = batch_reply_status(bst, br ? br->status : 0, br ? br->n_results : 0, m);
    }
    plan_finish(s, &early_plan, early_st, early_x, failed);
    for (size_t j = 0; j < m && bst != MC_OK; j++)
        results[idx[j]] = bst;

    /* 3. One TE batch reads the preferred replica of every key the master found, unless a
     * guess already read one of its replicas. */
    for (size_t j = 0; j < m && bst == MC_OK; j++) {
        size_t i = idx[j];
        McRpc__ReplicaListResponse *rl = br->results[j];
        if (rl->status != MC_OK || rl->n_replicas == 0) {
            results[i] = rl->status != MC_OK ? rl->status : MC_ERR_OBJECT_NOT_FOUND;
            continue;
        }
        if (early_read[i] && !failed[i] && (read_from[i] = hint_replica(&early[i], rl))) {
            lists[i] = rl;
            continue;
        }
        failed[i] = 0; /* a failed or wrong guess: read what the master names */
        early_read[i] = 0;
        const struct iovec *kp;
        size_t kn;
        if (heap) {
            heap[i] = mc_malloc(rl->size);
            if (!heap[i]) {
                results[i] = MC_ERR_NO_MEMORY;
                continue;
            }
            prefault_heap(heap[i], rl->size);
            heap_iov[i] = (struct iovec){heap[i], rl->size};
            kp = &heap_iov[i];
            kn = 1;
        } else {
            uint64_t cap = 0;
            iov_total(parts[i], n_parts[i], &cap);
            if (rl->size > cap) {
                results[i] = MC_ERR_BUFFER_OVERFLOW;
                continue;
            }
            kp = parts[i];
            kn = n_parts[i];
        }
        lists[i] = rl;
        size_t first = 0;
        replica_order(s, rl->replicas, rl->n_replicas, &first, 1, NULL);
        read_from[i] = rl->replicas[first];
        if (read_from[i]->size != rl->size ||
            plan_add(s, &plan, MC_TE_READ, read_from[i]->transport_endpoint,
                     read_from[i]->buffer_address, rl->size, kp, kn, i) != MC_OK)
            failed[i] = 1;
    }
    plan_run(s, &plan, failed);

    /* 4. Verify every key; a key that fails is fetched alone (fresh lease, every replica). */
    for (size_t i = 0; i < n; i++) {
        McRpc__ReplicaListResponse *rl = lists[i];
        const mc_replica_hint_t *h = &early[i];
        if (!rl && !h->lease_until_ms)
            continue;
        const struct iovec *kp = heap ? &heap_iov[i] : parts[i];
        size_t kn = heap ? 1 : n_parts[i];
        uint64_t size = rl ? rl->size : h->size, sum = rl ? rl->checksum : h->checksum;
        uint64_t until = rl ? t0 + rl->lease_ttl_ms : h->lease_until_ms;
        bool lease_ok = mc_now_ms() <= until;
        if (!failed[i] && lease_ok && iov_hash(kp, kn, size) == sum) {
            results[i] = (int64_t)size;
            if (!rl) {
                atomic_fetch_add(&s->n_lease_hits, 1);
            } else {
                if (hint_make(s, read_from[i], rl, t0, &learn[n_learn]))
                    learn_keys[n_learn++] = keys[i];
                else
                    mc_hint_drop(s->hints, keys[i]);
                if (early_read[i])
                    atomic_fetch_add(&s->n_spec_hits, 1);
            }
        } else if (rl && !lease_ok) {
            results[i] = MC_ERR_LEASE_EXPIRED;
        } else {
            if (!rl) {
                atomic_fetch_add(&s->n_lease_misses, 1);
                mc_hint_drop(s->hints, keys[i]); /* the alone get asks the master */
            }
            results[i] = batch_get_alone(s, keys[i], heap ? &heap[i] : NULL,
                                         heap ? &heap_iov[i] : NULL, kp, kn);
        }
    }
    mc_hint_set_many(s->hints, n_learn, learn_keys, learn);
out:
    for (size_t i = 0; heap && i < n; i++) {
        if (heap[i] && (st != MC_OK || results[i] < 0)) {
            mc_free(heap[i]);
            heap[i] = NULL;
        }
    }
    plan_free(&plan); /* resp lives in resp_arena */
    plan_free(&early_plan);
    mc_free(req_keys);
    mc_free(idx);
    mc_free(failed);
    mc_free(lists);
    mc_free(read_from);
    mc_free(early);
    mc_free(hinted);
    mc_free(early_read);
    mc_free(heap_iov);
    mc_free(learn_keys);
    mc_free(learn);
    mc_rpc_arena_destroy(&resp_arena);
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

/* ------------------------------------------------------------------ queries and removes */

static mc_status_t store_key_call(mc_store_t *s, uint16_t op, const char *key, bool force,
                                  ProtobufCMessage **resp_p)
{
    mc_status_t st = s ? key_check(key) : MC_ERR_INVALID_PARAMS;
    if (st != MC_OK)
        return st;
    McRpc__KeyRequest req = MC_RPC__KEY_REQUEST__INIT;
    req.client_id = mc_master_client_id(&s->master);
    req.key = (char *)key;
    req.force = force;
    return mc_master_client_call(&s->master, op, &req.base, resp_p, 1);
}

int mc_store_exists(mc_store_t *s, const char *key)
{
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
    uuid_random(stamp);
    uint64_t lease_ms = stamp_add(s, &plan, rr, MC_RPC_MAX_RETIRED, stamp, 0, failed, &token);
    if (plan.n)
        plan_run(s, &plan, failed);
    plan_free(&plan);
    if (!failed[0])
        stamp_release(s, &token, token != 0);
    else
        stamp_wait(op, key, lease_ms);
}

/* A BatchKeyRequest-shaped call whose per-key statuses land in results (BatchRemove: what it
 * retired is stamped before this returns). */
static mc_status_t store_batch_key_call(mc_store_t *s, uint16_t op, size_t n,
                                        const char *const *keys, bool force, int32_t *results)
{
    mc_status_t st = batch_args_check(s, n, keys);
    if (st != MC_OK || n == 0)
        return st;
    if (!results)
        return MC_ERR_INVALID_PARAMS;
    for (size_t i = 0; i < n; i++) {
        st = key_check(keys[i]);
        if (st != MC_OK)
            return st;
    }
    McRpc__BatchKeyRequest req = MC_RPC__BATCH_KEY_REQUEST__INIT;
    req.client_id = mc_master_client_id(&s->master);
    req.n_keys = n;
    req.keys = (char **)keys;
    req.force = force;
    ProtobufCMessage *resp = NULL;
    st = mc_master_client_call(&s->master, op, &req.base, &resp, 1);
    McRpc__BatchStatusResponse *br = (McRpc__BatchStatusResponse *)resp;
    st = batch_reply_status(st, br ? br->status : 0, br ? br->n_statuses : 0, n);
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
    mc_status_t st = store_batch_key_call(s, MC_OP_BATCH_EXIST_KEY, n, keys, false, results);
    if (st != MC_OK)
        return st;
    for (size_t i = 0; i < n; i++)
        results[i] = results[i] == MC_OK ? 1 : results[i] == MC_ERR_OBJECT_NOT_FOUND ? 0 : results[i];
    return MC_OK;
}

int64_t mc_store_get_size(mc_store_t *s, const char *key)
{
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
    ProtobufCMessage *resp = NULL;
    mc_status_t st = store_key_call(s, MC_OP_REMOVE, key, force, &resp);
    if (s && key_check(key) == MC_OK)
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
    mc_status_t st = store_batch_key_call(s, MC_OP_BATCH_REMOVE, n, keys, force, results);
    if (batch_args_check(s, n, keys) == MC_OK)
        for (size_t i = 0; i < n; i++)
            if (key_check(keys[i]) == MC_OK)
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
    McRpc__RemoveByRegexRequest req = MC_RPC__REMOVE_BY_REGEX_REQUEST__INIT;
    req.client_id = mc_master_client_id(&s->master);
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
    McRpc__RemoveAllRequest req = MC_RPC__REMOVE_ALL_REQUEST__INIT;
    req.client_id = mc_master_client_id(&s->master);
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
    mc_status_t st = s ? key_check(key) : MC_ERR_INVALID_PARAMS;
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
    }
    *descs_p = d;
    *n_p = rl->n_replicas;
    mc_rpc_response_free(&rl->base);
    return MC_OK;
}
