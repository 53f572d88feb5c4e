/* Live subscriber to the master's object events (see subscriber.h). */
#include "conductor/subscriber.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/time.h"
#include "rpc/frame.h"
#include "rpc/rpc_client.h"

#include <stdatomic.h>
#include <string.h>
#include <time.h>

struct mc_conductor_sub {
    mc_conductor_sub_config_t cfg;
    char *addr;
    mc_conductor_index_t *idx;
    pthread_mutex_t *mu;        /* the index's lock (caller's) */
    mc_rpc_client_t *cli;
    bool need_resync;
    uint64_t epoch, next_seq, last_resync_ms;
    pthread_mutex_t st_mu;      /* stats */
    mc_conductor_sub_stats_t st;
    pthread_t th;
    bool running;
    atomic_int stop;
};

void mc_conductor_sub_config_default(mc_conductor_sub_config_t *c)
{
    memset(c, 0, sizeof(*c));
    c->wait_ms = 500;
    c->max_events = 4096;
    c->page = 4096;
    c->rpc_timeout_ms = 3000;
    c->tier = MC_CONDUCTOR_TIER_POOL;
}

mc_status_t mc_conductor_sub_create(const mc_conductor_sub_config_t *cfg,
                                    mc_conductor_index_t *idx, pthread_mutex_t *mu,
                                    mc_conductor_sub_t **sub_p)
{
    *sub_p = NULL;
    if (!cfg || !cfg->master_addr || !idx || !mu)
        return MC_ERR_INVALID_PARAMS;
    mc_conductor_sub_t *s = MC_NEW(mc_conductor_sub_t);
    if (!s)
        return MC_ERR_NO_MEMORY;
    s->cfg = *cfg;
    if (!s->cfg.wait_ms || s->cfg.wait_ms > 1000)
        s->cfg.wait_ms = s->cfg.wait_ms ? 1000 : 500;
    if (!s->cfg.max_events || s->cfg.max_events > 4096)
        s->cfg.max_events = 4096;
    if (!s->cfg.page || s->cfg.page > 4096)
        s->cfg.page = 4096;
    if (!s->cfg.rpc_timeout_ms)
        s->cfg.rpc_timeout_ms = 3000;
    s->addr = mc_strdup(cfg->master_addr);
    s->idx = idx;
    s->mu = mu;
    s->need_resync = true;
    pthread_mutex_init(&s->st_mu, NULL);
    mc_rpc_client_opts_t ro = {.auth = cfg->auth};
    mc_status_t st = s->addr ? mc_rpc_client_create(s->addr, &ro, &s->cli) : MC_ERR_NO_MEMORY;
    if (st != MC_OK) {
        mc_conductor_sub_destroy(s);
        return st;
    }
    s->cfg.master_addr = s->addr;
    *sub_p = s;
    return MC_OK;
}

/* mc_conductor_key_hash of a key from the wire (bytes, not NUL-terminated; the master sends
 * at most MC_RPC_MAX_KEY bytes without NUL, and a longer one is cut there). */
static uint64_t wire_key_hash(ProtobufCBinaryData k)
{
    char buf[MC_RPC_MAX_KEY + 1];
    size_t n = k.len < MC_RPC_MAX_KEY ? k.len : MC_RPC_MAX_KEY;
    if (n)
        memcpy(buf, k.data, n);
    buf[n] = 0;
    return mc_conductor_key_hash(buf);
}

static void stat_add(mc_conductor_sub_t *s, uint64_t *field, uint64_t v)
{
    pthread_mutex_lock(&s->st_mu);
    *field += v;
    pthread_mutex_unlock(&s->st_mu);
}

static const char *host_of(const char *host, const char *segment)
{
    return host && host[0] ? host : segment;
}

/* Full resync from ListObjects. The index is RESYNCING (queries refused unless allow_stale)
 * until it completes; an RPC failure leaves it so and need_resync set. */
static mc_status_t resync(mc_conductor_sub_t *s)
{
    uint64_t now = mc_now_ms();
    if (s->last_resync_ms && now - s->last_resync_ms < 200)
        return MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS; /* back off (e.g. a cap that keeps failing) */
    s->last_resync_ms = now;
    pthread_mutex_lock(s->mu);
    mc_conductor_index_resync_begin(s->idx);
    pthread_mutex_unlock(s->mu);
    uint64_t cursor = 0, seq0 = 0, epoch0 = 0, objects = 0;
    bool first = true;
    for (;;) {
        if (atomic_load(&s->stop))
            return MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS;
        McRpc__ListObjectsRequest q = MC_RPC__LIST_OBJECTS_REQUEST__INIT;
        q.cursor = cursor;
        q.max = s->cfg.page;
        ProtobufCMessage *resp = NULL;
        mc_status_t st =
            mc_rpc_client_call(s->cli, MC_OP_LIST_OBJECTS, &q.base, &resp, s->cfg.rpc_timeout_ms);
        if (st != MC_OK) {
            stat_add(s, &s->st.rpc_errors, 1);
            return st;
        }
        McRpc__ListObjectsResponse *r = (void *)resp;
        if (r->status != MC_OK) {
            MC_LOG_WARN("conductor: ListObjects: %s", mc_status_name(r->status));
            st = r->status;
            mc_rpc_response_free(resp);
            return st;
        }
        if (first) {
            seq0 = r->seq;
            epoch0 = r->epoch;
            first = false;
        } else if (r->epoch != epoch0) { /* the master restarted under us: start over */
            mc_rpc_response_free(resp);
            MC_LOG_WARN("conductor: master epoch changed during a resync; restarting it");
            s->last_resync_ms = 0;
            return resync(s);
        }
        pthread_mutex_lock(s->mu);
        for (size_t i = 0; i < r->n_objects; i++) {
            const McRpc__ListedObject *o = r->objects[i];
            uint64_t h = wire_key_hash(o->key);
            for (size_t k = 0; k < o->n_segments; k++) {
                const char *host = k < o->n_hosts ? o->hosts[k] : "";
                mc_status_t a = mc_conductor_index_snapshot_add(
                    s->idx, h, o->segments[k], host_of(host, o->segments[k]), s->cfg.tier);
                if (a != MC_OK)
                    MC_LOG_WARN("conductor: snapshot entry refused: %s", mc_status_name(a));
            }
        }
        pthread_mutex_unlock(s->mu);
        objects += r->n_objects;
        bool done = r->done;
        cursor = r->next_cursor;
        mc_rpc_response_free(resp);
        if (done)
            break;
    }
    pthread_mutex_lock(s->mu);
    mc_status_t st = mc_conductor_index_resync_end(s->idx, seq0);
    pthread_mutex_unlock(s->mu);
    if (st != MC_OK)
        return st;
    s->epoch = epoch0;
    s->next_seq = seq0;
    s->need_resync = false;
    pthread_mutex_lock(&s->st_mu);
    s->st.resyncs++;
    s->st.resync_objects += objects;
    s->st.epoch = epoch0;
    s->st.next_seq = seq0;
    s->st.synced = true;
    pthread_mutex_unlock(&s->st_mu);
    MC_LOG_INFO("conductor: resynced from master epoch %llu: %llu objects, events from seq %llu",
                (unsigned long long)epoch0, (unsigned long long)objects,
                (unsigned long long)seq0);
    return MC_OK;
}

static void mark_gap(mc_conductor_sub_t *s, const char *why)
{
    MC_LOG_WARN("conductor: event gap (%s) at seq %llu; resyncing", why,
                (unsigned long long)s->next_seq);
    s->need_resync = true;
    pthread_mutex_lock(s->mu); /* from now on queries see RESYNCING, never the stale content */
    mc_conductor_index_resync_begin(s->idx);
    pthread_mutex_unlock(s->mu);
    pthread_mutex_lock(&s->st_mu);
    s->st.gaps++;
    s->st.synced = false;
    pthread_mutex_unlock(&s->st_mu);
}

mc_status_t mc_conductor_sub_step(mc_conductor_sub_t *s)
{
    if (s->need_resync) {
        mc_status_t st = resync(s);
        if (st != MC_OK)
            return st;
    }
    McRpc__PollEventsRequest q = MC_RPC__POLL_EVENTS_REQUEST__INIT;
    q.from_seq = s->next_seq;
    q.max_events = s->cfg.max_events;
    q.wait_ms = s->cfg.wait_ms;
    q.epoch = s->epoch;
    ProtobufCMessage *resp = NULL;
    mc_status_t st = mc_rpc_client_call(s->cli, MC_OP_POLL_EVENTS, &q.base, &resp,
                                        s->cfg.wait_ms + s->cfg.rpc_timeout_ms);
    stat_add(s, &s->st.polls, 1);
    if (st != MC_OK) {
        stat_add(s, &s->st.rpc_errors, 1);
        return st;
    }
    McRpc__PollEventsResponse *r = (void *)resp;
    if (r->status != MC_OK) {
        st = r->status;
        MC_LOG_WARN("conductor: PollEvents: %s", mc_status_name(st));
        mc_rpc_response_free(resp);
        return st;
    }
    if (r->gap || r->epoch != s->epoch) {
        mark_gap(s, r->epoch != s->epoch ? "master epoch changed" : "events no longer held");
        mc_rpc_response_free(resp);
        return MC_OK;
    }
    size_t applied = 0;
    pthread_mutex_lock(s->mu);
    for (size_t i = 0; i < r->n_events; i++) {
        const McRpc__KvEvent *e = r->events[i];
        if (e->seq != s->next_seq) { /* the master sends consecutive seqs; never trust blindly */
            pthread_mutex_unlock(s->mu);
            mark_gap(s, "non-consecutive answer");
            pthread_mutex_lock(s->mu);
            break;
        }
        mc_conductor_event_t ev = {.seq = e->seq, .kind = (mc_conductor_event_kind_t)e->kind,
                                   .block_hash = wire_key_hash(e->key),
                                   .size = e->size, .segment = e->segment,
                                   .host = host_of(e->host, e->segment), .tier = s->cfg.tier};
        mc_status_t a = mc_conductor_index_apply(s->idx, &ev);
        s->next_seq = e->seq + 1;
        applied++;
        if (a == MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS || a == MC_ERR_TOO_LARGE) {
            pthread_mutex_unlock(s->mu);
            mark_gap(s, "index turned stale");
            pthread_mutex_lock(s->mu);
            break;
        }
    }
    pthread_mutex_unlock(s->mu);
    pthread_mutex_lock(&s->st_mu);
    s->st.events += applied;
    s->st.next_seq = s->next_seq;
    s->st.master_next_seq = r->next_seq;
    pthread_mutex_unlock(&s->st_mu);
    mc_rpc_response_free(resp);
    return MC_OK;
}

static void *sub_main(void *arg)
{
    mc_conductor_sub_t *s = arg;
    uint32_t backoff = 100;
    while (!atomic_load(&s->stop)) {
        mc_status_t st = mc_conductor_sub_step(s);
        if (st == MC_OK) {
            backoff = 100;
            continue;
        }
        for (uint32_t t = 0; t < backoff && !atomic_load(&s->stop); t += 20) {
            struct timespec ts = {0, 20 * 1000000L};
            nanosleep(&ts, NULL);
        }
        if (backoff < 1000)
            backoff *= 2;
    }
    return NULL;
}

mc_status_t mc_conductor_sub_start(mc_conductor_sub_t *s)
{
    if (s->running)
        return MC_OK;
    atomic_store(&s->stop, 0);
    if (pthread_create(&s->th, NULL, sub_main, s) != 0)
        return MC_ERR_INTERNAL;
    s->running = true;
    return MC_OK;
}

void mc_conductor_sub_stop(mc_conductor_sub_t *s)
{
    if (!s || !s->running)
        return;
    atomic_store(&s->stop, 1);
    pthread_join(s->th, NULL);
    s->running = false;
}

void mc_conductor_sub_destroy(mc_conductor_sub_t *s)
{
    if (!s)
        return;
    mc_conductor_sub_stop(s);
    mc_rpc_client_destroy(s->cli);
    pthread_mutex_destroy(&s->st_mu);
    mc_free(s->addr);
    mc_free(s);
}

void mc_conductor_sub_get_stats(mc_conductor_sub_t *s, mc_conductor_sub_stats_t *out)
{
    pthread_mutex_lock(&s->st_mu);
    *out = s->st;
    pthread_mutex_unlock(&s->st_mu);
}
