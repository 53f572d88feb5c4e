/* The store client's master connection pool (master_client.h): MC_MASTER_POOL_SIZE RPC
 * clients; a call takes the first one nobody holds, starting from the last one used (and
 * waits for the one after it when all are held), so that application threads calling at once
 * do not queue behind one connection, nor behind a batch get holding one while its objects
 * arrive (mc_master_client_send), while a single caller keeps one warm connection.
 *
 * Contracts: an idempotent call that fails with MC_ERR_RPC_FAIL (a pooled connection the
 * master closed meanwhile) is sent once more on a fresh connection; other calls are sent once.
 * Responses belong to the caller (mc_rpc_response_free). Locking: the round-robin counter is an
 * atomic and each RPC client serialises its own calls, so no lock is taken here; init and fini
 * must not run concurrently with calls. With metrics (mc->metrics), every call counts in
 * mooncake_client_rpc_count when sent and in mooncake_client_rpc_latency when answered.
 *
 * etcd:// (HA) mode. State: the leader's address and view (create revision of the view key)
 * under ha->mu, with a generation bumped whenever they change or a call suspects the leader
 * (a transport failure or timeout, an answer from an older view); slot i holds
 * slot_lock[i] for reading across its call and is rebuilt on the current leader, under the
 * write lock, when its generation is old. The view is read by the watcher thread whenever
 * etcd's watch of the key reports a change (and at least every MC_MASTER_HA_WATCH_MS; every
 * MC_MASTER_HA_POLL_MS when etcd cannot watch) and by a failing call (at most once per
 * MC_MASTER_HA_RETRY_MS across threads: resolve_mu). Retry rules, all within the caller's
 * timeout_ms from the first try:
 *   - not sent (the connection to the leader could not be made): always retried, every
 *     MC_MASTER_HA_RETRY_MS, on whatever leader the view names then;
 *   - sent, no answer (MC_ERR_RPC_FAIL / MC_ERR_RPC_TIMEOUT): retried when the caller marked
 *     the call idempotent and it is not a remove (Remove, BatchRemove, RemoveByRegex,
 *     RemoveAll: a repeat could remove a later put of the same key); else returned as is,
 *     MC_ERR_RPC_FAIL meaning "outcome unknown, the caller may retry" (PutStart/PutEnd and
 *     their batch and upsert forms are sent once: PutEnd's answer lost means the object may or
 *     may not be committed);
 *   - an answer whose view (frame header, docs/internals/wire-protocol.md; a Ping's
 *     ha_view_version from a master that sets only that) is below the highest view seen: the
 *     answer is dropped (counted in view_refused), the connection closed, and the call treated
 *     as sent and not answered (retried if that is safe, else MC_ERR_RPC_FAIL). This also
 *     applies to a fixed host:port (view 0, a master without HA, is always accepted).
 */
#include "client/master_client.h"

#include "client/store_metrics.h"
#include "common/etcd.h"
#include "common/log.h"
#include "common/time.h"
#include "rpc/replica_lists.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HA_PREFIX "etcd://"
#define HA_ADDR_MAX 256
#define HA_ETCD_TIMEOUT_MS 1000 /* per etcd request and endpoint */
#define HA_CLUSTER_ID_MAX 128

struct mc_master_ha {
    mc_etcd_t *etcd;
    char key[HA_CLUSTER_ID_MAX + 64]; /* mooncake-store/<cid>/master_view */
    mc_rpc_client_opts_t opts;
    pthread_mutex_t mu;               /* leader, view */
    char leader[HA_ADDR_MAX];         /* "" until the first read finds one */
    int64_t view;
    atomic_uint gen;                  /* bumped on a change of leader or a suspected one */
    pthread_mutex_t resolve_mu;       /* one etcd read at a time; last_read_ms */
    uint64_t last_read_ms;
    pthread_rwlock_t slot_lock[MC_MASTER_POOL_SIZE];
    unsigned slot_gen[MC_MASTER_POOL_SIZE]; /* under slot_lock[i] (write) */
    atomic_uint slot_calls[MC_MASTER_POOL_SIZE]; /* calls on slot i now (sent or waiting) */
    pthread_mutex_t stop_mu;
    pthread_cond_t stop_cv;
    int stop, watcher_started;
    atomic_int cancel;                /* set with stop: ends the watcher's etcd watch */
    pthread_t watcher;
};

/* The cluster id of etcd:// addressing (env MC_STORE_CLUSTER_ID), checked; NULL if invalid. */
static const char *ha_cluster_id(void)
{
    const char *cid = getenv("MC_STORE_CLUSTER_ID");
    if (!cid || !*cid)
        return MC_MASTER_CLUSTER_ID_DEFAULT;
    size_t n = strlen(cid);
    for (size_t i = 0; i < n; i++) {
        char c = cid[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            n = 0;
    }
    if (n == 0 || n > HA_CLUSTER_ID_MAX) {
        MC_LOG_ERROR("MC_STORE_CLUSTER_ID '%s' is invalid (1..%d of [A-Za-z0-9_.-])", cid,
                     HA_CLUSTER_ID_MAX);
        return NULL;
    }
    return cid;
}

static void view_seen(mc_master_client_t *mc, uint64_t v)
{
    uint64_t cur = atomic_load(&mc->view_max);
    while (v > cur && !atomic_compare_exchange_weak(&mc->view_max, &cur, v)) {
    }
}

/* Reads the view from etcd (unless another thread did within MC_MASTER_HA_RETRY_MS and force
 * is 0) and moves to the leader it names. MC_OK when a leader is known afterwards; *rev_p
 * (optional) = etcd's revision at that read (0 when nothing was read). */
static mc_status_t ha_resolve(mc_master_client_t *mc, int force, int64_t *rev_p)
{
    mc_master_ha_t *ha = mc->ha;
    if (rev_p)
        *rev_p = 0;
    pthread_mutex_lock(&ha->resolve_mu);
    uint64_t now = mc_now_ms();
    mc_status_t st = MC_OK;
    if (force || now - ha->last_read_ms >= MC_MASTER_HA_RETRY_MS || !ha->last_read_ms) {
        mc_etcd_range_t r = {0};
        st = mc_etcd_range(ha->etcd, ha->key, NULL, 1, &r);
        ha->last_read_ms = mc_now_ms();
        if (rev_p)
            *rev_p = st == MC_OK ? r.revision : 0;
        if (st == MC_OK && r.n == 1 && r.kvs[0].value_len > 0 &&
            r.kvs[0].value_len < HA_ADDR_MAX && !memchr(r.kvs[0].value, '\0', r.kvs[0].value_len) &&
            r.kvs[0].create_revision > 0 &&
            (uint64_t)r.kvs[0].create_revision >= atomic_load(&mc->view_max)) {
            int64_t view = r.kvs[0].create_revision;
            pthread_mutex_lock(&ha->mu);
            if (view != ha->view || strcmp(ha->leader, r.kvs[0].value) != 0) {
                MC_LOG_INFO("master leader: %s (view %lld, was %s view %lld)", r.kvs[0].value,
                            (long long)view, ha->leader[0] ? ha->leader : "none",
                            (long long)ha->view);
                snprintf(ha->leader, sizeof(ha->leader), "%s", r.kvs[0].value);
                ha->view = view;
                atomic_fetch_add(&ha->gen, 1);
            }
            pthread_mutex_unlock(&ha->mu);
            view_seen(mc, (uint64_t)view);
        } else if (st == MC_OK) {
            st = MC_ERR_RPC_FAIL; /* no leader now (between two leases), or a value we refuse */
        }
        mc_etcd_range_free(&r);
    }
    pthread_mutex_lock(&ha->mu);
    if (st == MC_OK && !ha->leader[0])
        st = MC_ERR_RPC_FAIL;
    pthread_mutex_unlock(&ha->mu);
    pthread_mutex_unlock(&ha->resolve_mu);
    return st;
}

/* The watcher: reads the view, then watches its key in etcd from the next revision for up to
 * MC_MASTER_HA_WATCH_MS; a change (the old leader's key deleted, a new one put) or the end of
 * the window reads it again at once. Without a watch (etcd refused it, unreachable) it reads
 * every MC_MASTER_HA_POLL_MS. */
static void *ha_watch_main(void *arg)
{
    mc_master_client_t *mc = arg;
    mc_master_ha_t *ha = mc->ha;
    pthread_mutex_lock(&ha->stop_mu);
    while (!ha->stop) {
        pthread_mutex_unlock(&ha->stop_mu);
        int64_t rev = 0, changed;
        ha_resolve(mc, 1, &rev);
        mc_status_t st = rev > 0 ? mc_etcd_watch(ha->etcd, ha->key, rev + 1,
                                                 MC_MASTER_HA_WATCH_MS, &ha->cancel, &changed)
                                 : MC_ERR_CONNECTION;
        pthread_mutex_lock(&ha->stop_mu);
        if (st == MC_OK || st == MC_ERR_TIMEOUT || st == MC_ERR_CANCELED)
            continue;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + MC_MASTER_HA_POLL_MS * 1000000ull;
        ts.tv_sec += (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        while (!ha->stop && pthread_cond_timedwait(&ha->stop_cv, &ha->stop_mu, &ts) == 0) {
        }
    }
    pthread_mutex_unlock(&ha->stop_mu);
    return NULL;
}

/* etcd:// setup: opens etcd, waits up to mc->timeout_ms for a leader, starts the watcher. */
static mc_status_t ha_init(mc_master_client_t *mc, const char *endpoints)
{
    const char *cid = ha_cluster_id();
    if (!cid)
        return MC_ERR_INVALID_PARAMS;
    mc_master_ha_t *ha = calloc(1, sizeof(*ha));
    if (!ha)
        return MC_ERR_NO_MEMORY;
    mc->ha = ha;
    snprintf(ha->key, sizeof(ha->key), "mooncake-store/%s/master_view", cid);
    pthread_mutex_init(&ha->mu, NULL);
    pthread_mutex_init(&ha->resolve_mu, NULL);
    pthread_mutex_init(&ha->stop_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ha->stop_cv, &ca);
    pthread_condattr_destroy(&ca);
    for (int i = 0; i < MC_MASTER_POOL_SIZE; i++)
        pthread_rwlock_init(&ha->slot_lock[i], NULL);
    mc_status_t st = mc_etcd_open(endpoints, HA_ETCD_TIMEOUT_MS, &ha->etcd);
    if (st != MC_OK) {
        MC_LOG_ERROR("invalid etcd endpoints '%s': %s", endpoints, mc_status_str(st));
        return st;
    }
    uint64_t deadline = mc_now_ms() + mc->timeout_ms;
    while ((st = ha_resolve(mc, 1, NULL)) != MC_OK && mc_now_ms() < deadline)
        mc_sleep_ms(MC_MASTER_HA_RETRY_MS);
    if (st != MC_OK) {
        MC_LOG_ERROR("no master leader in etcd (%s at %s) within %u ms", ha->key, endpoints,
                     mc->timeout_ms);
        return MC_ERR_RPC_FAIL;
    }
    if (pthread_create(&ha->watcher, NULL, ha_watch_main, mc) != 0)
        return MC_ERR_INTERNAL;
    ha->watcher_started = 1;
    return MC_OK;
}

static void ha_fini(mc_master_ha_t *ha)
{
    if (ha->watcher_started) {
        pthread_mutex_lock(&ha->stop_mu);
        ha->stop = 1;
        atomic_store(&ha->cancel, 1);
        pthread_cond_signal(&ha->stop_cv);
        pthread_mutex_unlock(&ha->stop_mu);
        pthread_join(ha->watcher, NULL);
    }
    mc_etcd_close(ha->etcd);
    for (int i = 0; i < MC_MASTER_POOL_SIZE; i++)
        pthread_rwlock_destroy(&ha->slot_lock[i]);
    pthread_cond_destroy(&ha->stop_cv);
    pthread_mutex_destroy(&ha->stop_mu);
    pthread_mutex_destroy(&ha->resolve_mu);
    pthread_mutex_destroy(&ha->mu);
    free(ha);
}

mc_status_t mc_master_client_init(mc_master_client_t *mc, const char *addr, uint32_t timeout_ms,
                                  const uint8_t client_id[16], const mc_auth_t *auth)
{
    memset(mc, 0, sizeof(*mc));
    mc->timeout_ms = timeout_ms ? timeout_ms : 5000;
    memcpy(mc->client_id, client_id, 16);
    mc_rpc_client_opts_t opts = {.connect_timeout_ms = mc->timeout_ms < 3000 ? mc->timeout_ms : 3000,
                                 .auth = auth};
    char leader[HA_ADDR_MAX];
    if (strncmp(addr, HA_PREFIX, strlen(HA_PREFIX)) == 0) {
        mc_status_t st = ha_init(mc, addr + strlen(HA_PREFIX));
        if (st != MC_OK) {
            mc_master_client_fini(mc);
            return st;
        }
        mc->ha->opts = opts;
        /* connections give up early so that a dead leader costs a retry, not the timeout */
        mc->ha->opts.connect_timeout_ms = opts.connect_timeout_ms < 1000 ? opts.connect_timeout_ms
                                                                         : 1000;
        opts = mc->ha->opts;
        pthread_mutex_lock(&mc->ha->mu);
        snprintf(leader, sizeof(leader), "%s", mc->ha->leader);
        unsigned gen = atomic_load(&mc->ha->gen);
        for (int i = 0; i < MC_MASTER_POOL_SIZE; i++)
            mc->ha->slot_gen[i] = gen;
        pthread_mutex_unlock(&mc->ha->mu);
        addr = leader;
    }
    for (int i = 0; i < MC_MASTER_POOL_SIZE; i++) {
        mc_status_t st = mc_rpc_client_create(addr, &opts, &mc->conns[i]);
        if (st != MC_OK) {
            MC_LOG_ERROR("invalid master address '%s': %s", addr, mc_status_str(st));
            mc_master_client_fini(mc);
            return st;
        }
    }
    return MC_OK;
}

void mc_master_client_fini(mc_master_client_t *mc)
{
    if (mc->ha)
        ha_fini(mc->ha); /* the watcher stops before the connections go */
    mc->ha = NULL;
    for (int i = 0; i < MC_MASTER_POOL_SIZE; i++) {
        if (mc->conns[i])
            mc_rpc_client_destroy(mc->conns[i]);
        mc->conns[i] = NULL;
    }
}

int mc_master_client_is_ha(const mc_master_client_t *mc)
{
    return mc->ha != NULL;
}

/* Slot i's connection, moved to the current leader first if its generation is old; returns
 * with slot_lock[i] held for reading (the caller unlocks). */
static mc_rpc_client_t *ha_slot(mc_master_client_t *mc, unsigned i)
{
    mc_master_ha_t *ha = mc->ha;
    pthread_rwlock_rdlock(&ha->slot_lock[i]);
    if (ha->slot_gen[i] == atomic_load(&ha->gen))
        return mc->conns[i];
    pthread_rwlock_unlock(&ha->slot_lock[i]);
    pthread_rwlock_wrlock(&ha->slot_lock[i]);
    char leader[HA_ADDR_MAX];
    pthread_mutex_lock(&ha->mu);
    unsigned gen = atomic_load(&ha->gen);
    snprintf(leader, sizeof(leader), "%s", ha->leader);
    pthread_mutex_unlock(&ha->mu);
    if (ha->slot_gen[i] != gen) {
        mc_rpc_client_t *c;
        if (mc_rpc_client_create(leader, &ha->opts, &c) == MC_OK) {
            mc_rpc_client_destroy(mc->conns[i]);
            mc->conns[i] = c;
        } else { /* a view naming no host:port (refused and logged); the next read may */
            MC_LOG_WARN("etcd names master '%s', which is no host:port", leader);
            mc_rpc_client_disconnect(mc->conns[i]);
        }
        ha->slot_gen[i] = gen;
    }
    pthread_rwlock_unlock(&ha->slot_lock[i]);
    pthread_rwlock_rdlock(&ha->slot_lock[i]);
    return mc->conns[i];
}

/* Whether a call whose request went out and whose answer did not come back may be sent
 * again to the (new) leader. */
static int ha_resend_safe(uint16_t opcode, int idempotent)
{
    return idempotent && opcode != MC_OP_REMOVE && opcode != MC_OP_BATCH_REMOVE &&
           opcode != MC_OP_REMOVE_BY_REGEX && opcode != MC_OP_REMOVE_ALL;
}

/* The view and server of the last answer this thread accepted (mc_master_client_last_answer). */
static _Thread_local mc_master_answer_t tl_last;

void mc_master_client_last_answer(mc_master_answer_t *out)
{
    *out = tl_last;
}

/* Fencing by view: an answer whose view (the frame header's, else PingResponse.ha_view_version
 * of a master that puts it only there; 0 = a master without HA) is below the highest view seen
 * comes from a stale leader: it is dropped (the connection too), counted, and reported as
 * MC_ERR_RPC_FAIL (outcome unknown). An accepted view raises the highest. */
static mc_status_t view_check(mc_master_client_t *mc, mc_rpc_client_t *c, uint16_t opcode,
                              uint64_t hdr_view, ProtobufCMessage **resp_p,
                              ProtobufCAllocator *alloc)
{
    uint64_t v = hdr_view;
    if (!v && opcode == MC_OP_PING)
        v = ((const McRpc__PingResponse *)*resp_p)->ha_view_version;
    uint64_t max = atomic_load(&mc->view_max);
    if (v == 0 || v >= max) {
        view_seen(mc, v);
        tl_last.view = v;
        mc_rpc_client_peer(c, tl_last.addr, sizeof(tl_last.addr));
        return MC_OK;
    }
    atomic_fetch_add(&mc->view_refused, 1);
    MC_LOG_WARN("master answered opcode %u with view %llu, older than %llu: a stale leader, "
                "dropped", opcode, (unsigned long long)v, (unsigned long long)max);
    if (!alloc)
        mc_rpc_response_free(*resp_p);
    *resp_p = NULL;
    mc_rpc_client_disconnect(c);
    return MC_ERR_RPC_FAIL;
}

/* etcd:// : one call under the rules at the top of this file. */
static mc_status_t ha_call(mc_master_client_t *mc, unsigned i, uint16_t opcode,
                           const ProtobufCMessage *req, ProtobufCMessage **resp_p,
                           int idempotent, ProtobufCAllocator *alloc)
{
    mc_master_ha_t *ha = mc->ha;
    uint64_t deadline = mc_now_ms() + mc->timeout_ms;
    mc_status_t st;
    for (;;) {
        mc_rpc_client_t *c = ha_slot(mc, i);
        int sent = 0;
        uint64_t view = 0;
        st = mc_rpc_client_connect(c);
        if (st == MC_OK) {
            sent = 1;
            uint64_t now = mc_now_ms();
            st = mc_rpc_client_call_view(c, opcode, req, resp_p,
                                         now < deadline ? (uint32_t)(deadline - now) : 1, alloc,
                                         &view);
        }
        if (st == MC_OK)
            st = view_check(mc, c, opcode, view, resp_p, alloc);
        pthread_rwlock_unlock(&ha->slot_lock[i]);
        if (st != MC_ERR_RPC_FAIL && st != MC_ERR_RPC_TIMEOUT)
            return st;
        /* the leader is suspect: every slot reconnects before its next call, so that calls
         * not yet sent do not go down the same dead connections */
        atomic_fetch_add(&ha->gen, 1);
        if (sent && !ha_resend_safe(opcode, idempotent))
            return MC_ERR_RPC_FAIL;
        uint64_t now = mc_now_ms();
        if (now + MC_MASTER_HA_RETRY_MS >= deadline)
            return st;
        if (ha_resolve(mc, 0, NULL) != MC_OK || !sent)
            mc_sleep_ms(MC_MASTER_HA_RETRY_MS);
    }
}

mc_status_t mc_master_client_send(mc_master_client_t *mc, uint16_t opcode,
                                  const ProtobufCMessage *req, int idempotent,
                                  ProtobufCAllocator *alloc, mc_master_inflight_t *in)
{
    unsigned i = atomic_load_explicit(&mc->next, memory_order_relaxed);
    *in = (mc_master_inflight_t){.mc = mc, .idempotent = idempotent,
                                 .call = {.opcode = opcode, .req = req, .allocator = alloc}};
    if (opcode == MC_OP_BATCH_GET_REPLICA_LIST && alloc && req &&
        req->descriptor == &mc_rpc__batch_key_request__descriptor) {
        /* the compact answer; recv rebuilds the results (master_client.h, call_with) */
        in->bkr = *(const McRpc__BatchKeyRequest *)req;
        in->bkr.compact_replicas = true;
        req = in->call.req = &in->bkr.base;
    }
    in->metrics = opcode < MC_OP_MAX ? mc->metrics : NULL;
    if (in->metrics) /* upstream's rule: counted when sent, timed when answered */
        atomic_fetch_add_explicit(&in->metrics->rpc_count[opcode], 1, memory_order_relaxed);
    in->t0 = store_metrics_t0(in->metrics);
    if (mc->ha) { /* etcd://: the whole call now, under the retry rules above; recv returns it */
        /* the first slot from the next one that no call holds (a connection carries one call
         * at a time: behind a call the leader holds until its log append is durable, a call
         * would wait for that append too), else the next one */
        mc_master_ha_t *ha = mc->ha;
        unsigned slot = atomic_fetch_add_explicit(&mc->next, 1, memory_order_relaxed) %
                        MC_MASTER_POOL_SIZE;
        for (unsigned k = 0; k < MC_MASTER_POOL_SIZE; k++) {
            unsigned j = (slot + k) % MC_MASTER_POOL_SIZE, idle = 0;
            if (atomic_compare_exchange_strong(&ha->slot_calls[j], &idle, 1)) {
                slot = j;
                break;
            }
            if (k == MC_MASTER_POOL_SIZE - 1)
                atomic_fetch_add(&ha->slot_calls[slot], 1);
        }
        in->st = ha_call(mc, slot, opcode, req, &in->call.resp, idempotent, alloc);
        atomic_fetch_sub(&ha->slot_calls[slot], 1);
        in->ha_done = true;
        return in->st;
    }
    /* the first connection from the last one used on that nobody holds (a lone caller keeps
     * using one warm connection: no stale-connection probe, rpc_client.c), else wait for
     * the next one after the last used */
    in->st = MC_ERR_BUSY;
    unsigned k = 0;
    for (; k < MC_MASTER_POOL_SIZE && in->st == MC_ERR_BUSY; k++) {
        in->conn = mc->conns[(i + k) % MC_MASTER_POOL_SIZE];
        in->st = mc_rpc_client_call_send(in->conn, &in->call, 1, mc->timeout_ms, true, &in->f);
    }
    if (in->st == MC_ERR_BUSY) {
        k = 2; /* (i + 1): spread the waiters */
        in->conn = mc->conns[(i + 1) % MC_MASTER_POOL_SIZE];
        in->st = mc_rpc_client_call_send(in->conn, &in->call, 1, mc->timeout_ms, false, &in->f);
    }
    atomic_store_explicit(&mc->next, (i + k - 1) % MC_MASTER_POOL_SIZE, memory_order_relaxed);
    in->sent = in->st == MC_OK;
    return in->st;
}

mc_status_t mc_master_client_recv(mc_master_inflight_t *in, ProtobufCMessage **resp_p)
{
    mc_status_t st;
    ProtobufCMessage *resp = NULL;
    if (in->ha_done) {
        st = in->st;
        resp = st == MC_OK ? in->call.resp : NULL;
    } else {
        st = in->sent ? mc_rpc_client_call_recv(&in->f) : in->st;
        if (st == MC_OK)
            st = in->call.status;
        resp = st == MC_OK ? in->call.resp : NULL;
        uint64_t view = in->call.view;
        if (st == MC_ERR_RPC_FAIL && in->idempotent) /* stale pooled connection: one fresh try */
            st = mc_rpc_client_call_view(in->conn, in->call.opcode, in->call.req, &resp,
                                         in->mc->timeout_ms, in->call.allocator, &view);
        if (st == MC_OK)
            st = view_check(in->mc, in->conn, in->call.opcode, view, &resp, in->call.allocator);
    }
    if (st == MC_OK && in->call.req == &in->bkr.base &&
        (st = mc_rpc_replicas_expand(in->call.allocator, in->bkr.n_keys, (void *)resp)) != MC_OK)
        resp = NULL; /* in the caller's allocator: released with it */
    if (in->metrics && st == MC_OK)
        store_hist_observe(&in->metrics->rpc_lat[in->call.opcode],
                           (mc_now_ns() - in->t0) / 1000);
    in->sent = false;
    in->ha_done = false;
    *resp_p = resp;
    return st;
}

mc_status_t mc_master_client_call_with(mc_master_client_t *mc, uint16_t opcode,
                                       const ProtobufCMessage *req, ProtobufCMessage **resp_p,
                                       int idempotent, ProtobufCAllocator *alloc)
{
    mc_master_inflight_t in;
    mc_master_client_send(mc, opcode, req, idempotent, alloc, &in);
    return mc_master_client_recv(&in, resp_p);
}

mc_status_t mc_master_client_call(mc_master_client_t *mc, uint16_t opcode,
                                  const ProtobufCMessage *req, ProtobufCMessage **resp_p,
                                  int idempotent)
{
    return mc_master_client_call_with(mc, opcode, req, resp_p, idempotent, NULL);
}

ProtobufCBinaryData mc_master_client_id(mc_master_client_t *mc)
{
    ProtobufCBinaryData b = {.len = 16, .data = mc->client_id};
    return b;
}
