/* The master's object table and what it owns (contract in master.h, structures in
 * master_int.h): objects in a chained hash table keyed by a hash of the key (doubled when it
 * holds as many objects as buckets); READABLE objects on the LRU list, WRITING ones on the
 * writing list in put-start order; segments by id, each with its own offset allocator;
 * clients; and the discard list of blocks held until a release time.
 *
 * Owner thread: everything runs on the one thread that owns the mc_master_t (the RPC loop in
 * mooncake_master) and nothing locks, except the metrics snapshot the cron publishes.
 * Invariants relied on throughout: an object is on exactly the list of its state and is freed
 * with its last replica; a replica's block belongs to the allocator of its segment, and
 * dropping a segment drops its replicas and its discarded blocks with it; the space of a value
 * readers may hold a lease on is not reused before the lease ends (obj_retire parks it on the
 * discard list), nor the space of a value handed out with data grants before they expire
 * (obj_grant_floor); and every change that is acknowledged is logged to the WAL first
 * (master_wal.c), the service syncing it before any reply goes out. */
#include "master/master_int.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/grant.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/time.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MAX MASTER_KEY_MAX
#define VALUE_MAX (1ull << 40)

/* ------------------------------------------------------------------ basics */

static uint64_t default_clock(void *ctx)
{
    (void)ctx;
    return mc_now_ms();
}

uint64_t master_now(mc_master_t *m) { return m->clock(m->clock_ctx); }

static uint64_t rnd(mc_master_t *m)
{
    /* xorshift64* */
    uint64_t x = m->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    m->rng = x;
    return x * 0x2545F4914F6CDD1Dull;
}

void mc_master_config_default(mc_master_config_t *c)
{
    memset(c, 0, sizeof(*c));
    c->default_kv_lease_ttl_ms = 10000;
    c->default_kv_soft_pin_ttl_ms = 1800000;
    c->allow_evict_soft_pinned_objects = true;
    c->eviction_ratio = 0.05;
    c->eviction_high_watermark_ratio = 0.90;
    c->client_ttl_ms = 10000;
    c->segment_hold_ms = 60000;
    c->put_start_discard_timeout_ms = 30000;
    c->put_start_release_timeout_ms = 600000;
    c->exist_key_extends_lease = false;
    c->strategy = MC_STRATEGY_RANDOM;
    c->wal_fsync = false; /* written per commit, fdatasync'ed within 1 s (recovery.md) */
    c->event_buffer_size = 65536;
    c->offloading_queue_limit = 50000;
    c->offload_cap_ratio = 0.5;
    c->offload_force_evict = false; /* as upstream: wait for the offloads rather than lose victims */
    c->promotion_admission_threshold = 2;
    c->promotion_queue_limit = 50000;
    c->promotion_max_per_heartbeat = 1;
    c->max_total_finished_tasks = 10000;
    c->max_total_pending_tasks = 10000;
    c->max_total_processing_tasks = 10000;
    c->pending_task_timeout_ms = 300000;
    c->processing_task_timeout_ms = 300000;
}

uint32_t master_key_hash(const char *key, size_t klen) { return (uint32_t)mc_hash64(key, klen); }

static bool key_ok(const char *key, size_t klen) { return key && klen > 0 && klen <= KEY_MAX; }

/* ------------------------------------------------------------------ lists */

/* The writing list links through the node's two words, as plain obj_t pointers. */
static obj_t *w_prev(const obj_t *o) { return (obj_t *)o->node.prev_tag; }
static obj_t *w_next(const obj_t *o) { return (obj_t *)o->node.next_tag; }
static void w_set_prev(obj_t *o, obj_t *p) { o->node.prev_tag = (uintptr_t)p; }
static void w_set_next(obj_t *o, obj_t *p) { o->node.next_tag = (uintptr_t)p; }

void master_list_push(olist_t *l, obj_t *o)
{
    w_set_next(o, NULL);
    w_set_prev(o, l->tail);
    if (l->tail)
        w_set_next(l->tail, o);
    else
        l->head = o;
    l->tail = o;
    l->n++;
}

void master_list_remove(olist_t *l, obj_t *o)
{
    if (w_prev(o))
        w_set_next(w_prev(o), w_next(o));
    else
        l->head = w_next(o);
    if (w_next(o))
        w_set_prev(w_next(o), w_prev(o));
    else
        l->tail = w_prev(o);
    w_set_prev(o, NULL);
    w_set_next(o, NULL);
    l->n--;
}

/* ------------------------------------------------------------------ eviction policy glue */

#define EVICT_MIN_ENTRIES 1024 /* the policy's ghost and sketch are sized for at least this */

static obj_t *node_obj(const mc_evict_node_t *n)
{
    return n ? (obj_t *)((char *)n - offsetof(obj_t, node)) : NULL;
}

/* The policy's view of an object: the key hash (it feeds only the ghost, the sketch and
 * adaptive's sampling) and the bytes of all its replicas (rep_cap never changes). */
static uint64_t policy_key(const mc_evict_node_t *n, void *arg)
{
    (void)arg;
    return node_obj(n)->hash;
}

static uint64_t policy_size(const mc_evict_node_t *n, void *arg)
{
    (void)arg;
    const obj_t *o = node_obj(n);
    return o->size * o->rep_cap;
}

/* Keeps the policy's capacity (capacity = high watermark x mounted bytes) and its expected
 * entry count in step with the store: entries = READABLE count + 1/8 (at least
 * EVICT_MIN_ENTRIES), renewed when the count passes it or falls below a quarter of it, so the
 * ghost and sketch stay under 12 + 2 bytes per object and are rebuilt O(log n) times. */
static void evict_sync(mc_master_t *m, uint64_t capacity)
{
    uint64_t e = m->evict_entries, n = m->n_readable;
    if (n > e || (e > EVICT_MIN_ENTRIES && n < e / 4))
        e = n + n / 8 > EVICT_MIN_ENTRIES ? n + n / 8 : EVICT_MIN_ENTRIES;
    if ((capacity != m->evict_capacity || e != m->evict_entries) &&
        mc_evict_core_resize(m->evict, capacity, e) == MC_OK) {
        m->evict_capacity = capacity;
        m->evict_entries = e;
    }
}

void master_readable_link(mc_master_t *m, obj_t *o)
{
    m->n_readable++;
    m->n_soft += (o->flags & OF_SOFT_PIN) != 0;
    m->n_hard += (o->flags & OF_HARD_PIN) != 0;
    if (m->n_readable > m->evict_entries)
        evict_sync(m, m->evict_capacity);
    mc_evict_core_link(m->evict, &o->node);
}

/* o leaves the policy: evicted = a victim (its key is remembered by the ghost). */
static void readable_unlink(mc_master_t *m, obj_t *o, int evicted)
{
    mc_evict_core_unlink(m->evict, &o->node, evicted);
    m->n_readable--;
    m->n_soft -= (o->flags & OF_SOFT_PIN) != 0;
    m->n_hard -= (o->flags & OF_HARD_PIN) != 0;
}

/* Drops the seconds that ended by now from the lease ring. */
static void lease_advance(mc_master_t *m, uint64_t now)
{
    uint64_t sec = now / 1000;
    if (sec <= m->lease_sec)
        return;
    if (sec - m->lease_sec >= m->lease_ring_n) {
        memset(m->lease_ring, 0, m->lease_ring_n * sizeof(*m->lease_ring));
        m->n_leased = 0;
    } else {
        for (uint64_t s = m->lease_sec + 1; s <= sec; s++) {
            m->n_leased -= m->lease_ring[s % m->lease_ring_n];
            m->lease_ring[s % m->lease_ring_n] = 0;
        }
    }
    m->lease_sec = sec;
}

void master_lease_note_at(mc_master_t *m, uint64_t now, uint64_t old_end, uint64_t end)
{
    if (!m->lease_ring)
        return;
    lease_advance(m, now);
    uint64_t o = (old_end + 999) / 1000, e = (end + 999) / 1000;
    if (o > m->lease_sec && o - m->lease_sec < m->lease_ring_n && m->lease_ring[o % m->lease_ring_n]) {
        m->lease_ring[o % m->lease_ring_n]--;
        m->n_leased--;
    }
    if (e > m->lease_sec && e - m->lease_sec < m->lease_ring_n) {
        m->lease_ring[e % m->lease_ring_n]++;
        m->n_leased++;
    }
}

void master_lease_note(mc_master_t *m, uint64_t old_end, uint64_t end)
{
    master_lease_note_at(m, master_now(m), old_end, end);
}

uint64_t master_leased_count(mc_master_t *m)
{
    if (m->lease_ring)
        lease_advance(m, master_now(m));
    return m->n_leased;
}


obj_t *master_readable_next(mc_master_t *m, obj_t *o)
{
    return node_obj(mc_evict_core_next(m->evict, o ? &o->node : NULL));
}

void mc_master_policy_stats(const mc_master_t *m, mc_evict_stats_t *s)
{
    mc_evict_core_get_stats(m->evict, s);
}

/* ------------------------------------------------------------------ hash table */

static int table_grow(mc_master_t *m)
{
    uint64_t nb = m->n_buckets ? m->n_buckets * 2 : 1024;
    obj_t **b = mc_calloc(nb, sizeof(*b));
    if (!b)
        return -1;
    for (uint64_t i = 0; i < m->n_buckets; i++) {
        obj_t *o = m->buckets[i];
        while (o) {
            obj_t *n = o->hnext;
            uint64_t j = o->hash & (nb - 1);
            o->hnext = b[j];
            b[j] = o;
            o = n;
        }
    }
    mc_free(m->buckets);
    m->buckets = b;
    m->n_buckets = nb;
    return 0;
}

obj_t *master_obj_find(mc_master_t *m, const char *key, size_t klen, uint32_t h)
{
    for (obj_t *o = m->buckets[h & (m->n_buckets - 1)]; o; o = o->hnext) {
        if (o->hash == h && o->klen == klen && memcmp(obj_key(o), key, klen) == 0)
            return o;
    }
    return NULL;
}

obj_t *master_obj_new(mc_master_t *m, const char *key, size_t klen, uint32_t h, uint32_t nrep)
{
    if (m->n_objs >= m->n_buckets && table_grow(m) != 0)
        return NULL;
    obj_t *o = mc_malloc(sizeof(obj_t) + nrep * sizeof(obj_rep_t) + klen);
    if (!o)
        return NULL;
    memset(o, 0, sizeof(*o));
    o->hash = h;
    o->klen = (uint16_t)klen;
    o->rep_cap = (uint8_t)nrep;
    memcpy(obj_key(o), key, klen);
    uint64_t j = h & (m->n_buckets - 1);
    o->hnext = m->buckets[j];
    m->buckets[j] = o;
    m->n_objs++;
    master_tenant_charge(m, o, 0, 1);
    return o;
}

/* Removes o from the hash table and its list and frees the record (not its replicas). */
void master_obj_unlink_free(mc_master_t *m, obj_t *o)
{
    obj_t **pp = &m->buckets[o->hash & (m->n_buckets - 1)];
    while (*pp && *pp != o)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = o->hnext;
    master_tenant_charge(m, o, -(int64_t)o->n_rep, -1);
    if (o->state == OBJ_READABLE) {
        readable_unlink(m, o, 0);
    } else if (o->state == OBJ_WRITING) {
        master_list_remove(&m->writing, o);
        master_writer_done(m, o->owner);
    }
    m->n_objs--;
    mc_free(o);
}

uint64_t mc_master_object_count(const mc_master_t *m) { return m->n_objs; }

/* A put started by client serial `serial` left the WRITING state. */
void master_writer_done(mc_master_t *m, uint32_t serial)
{
    for (size_t i = 0; i < m->n_clients; i++) {
        if (m->clients[i].serial == serial) {
            if (m->clients[i].n_writing)
                m->clients[i].n_writing--;
            return;
        }
    }
}

/* ------------------------------------------------------------------ segments, clients */

segment_t *master_seg_slot(mc_master_t *m, uint32_t id)
{
    if (id >= m->n_segs || !m->segs[id] || m->segs[id]->state == SEG_FREE)
        return NULL;
    return m->segs[id];
}

static segment_t *seg_by_name(mc_master_t *m, const char *name, uint32_t *id_p)
{
    for (uint32_t i = 0; i < m->n_segs; i++) {
        segment_t *s = m->segs[i];
        if (s && s->state != SEG_FREE && strcmp(s->name, name) == 0) {
            if (id_p)
                *id_p = i;
            return s;
        }
    }
    return NULL;
}

void master_seg_free(mc_master_t *m, uint32_t id)
{
    segment_t *s = m->segs[id];
    if (!s)
        return;
    master_pool_forget(m, s);
    master_tasks_seg_gone(m, id);
    mc_master_allocator_destroy(s->alloc);
    mc_free(s->name);
    mc_free(s->endpoint);
    mc_free(s->host_label);
    mc_free(s->ext);
    mc_free(s->resv);
    mc_free(s->freed);
    mc_free(s);
    m->segs[id] = NULL;
}

static client_t *client_find(mc_master_t *m, const uint8_t id[16])
{
    for (size_t i = 0; i < m->n_clients; i++) {
        if (memcmp(m->clients[i].id, id, 16) == 0)
            return &m->clients[i];
    }
    return NULL;
}

/* Finds or registers a client; refreshes its liveness. NULL only on allocation failure. */
client_t *master_client_touch(mc_master_t *m, const uint8_t id[16], bool *was_new_p)
{
    client_t *c = client_find(m, id);
    if (was_new_p) /* unknown, or forgotten for silence: its segments must be re-mounted */
        *was_new_p = c == NULL || c->expired;
    if (c && c->expired) {
        c->expired = false;
        MC_LOG_INFO("master: client serial %u is back", c->serial);
    }
    if (!c) {
        if (mc_array_reserve(&m->clients, &m->cap_clients, m->n_clients + 1, 16) != MC_OK)
            return NULL;
        c = &m->clients[m->n_clients++];
        memset(c, 0, sizeof(*c));
        memcpy(c->id, id, 16);
        c->serial = ++m->next_serial;
        MC_LOG_INFO("master: client %02x%02x%02x%02x... registered (serial %u)", id[0], id[1],
                    id[2], id[3], c->serial);
    }
    c->last_ping_ms = master_now(m);
    return c;
}

/* ------------------------------------------------------------------ replicas */

static void rep_free_block(mc_master_t *m, obj_rep_t *r)
{
    segment_t *s = master_seg_slot(m, r->seg);
    if (s && s->alloc && r->blk != MC_ALLOC_NONE) {
        mc_master_allocator_free(s->alloc, r->blk);
        s->n_replicas--;
    }
    r->seg = SEG_NONE;
}

/* ------------------------------------------------------------------ data grants */

/* grant_u's unit: with 16 bits it reaches 36 h, past the longest put discard timeout the
 * master's flag allows (24 h) plus the skew. */
#define MASTER_GRANT_UNIT_MS ((uint64_t)MC_GRANT_SKEW_MS)

uint64_t mc_master_grant_life_ms(const mc_master_t *m, bool write)
{
    return (write ? m->cfg.put_start_discard_timeout_ms : m->cfg.default_kv_lease_ttl_ms) +
           MC_GRANT_SKEW_MS;
}

void mc_master_grants_begin(mc_master_t *m) { m->granting = true; }
void mc_master_grants_end(mc_master_t *m) { m->granting = false; }

/* t rounded up to the grant unit's grid: write grant ends are kept on it, so that moving
 * t_lease never moves them (obj_set_lease). */
static uint64_t grant_grid(uint64_t t)
{
    return (t + MASTER_GRANT_UNIT_MS - 1) / MASTER_GRANT_UNIT_MS * MASTER_GRANT_UNIT_MS;
}

/* When o's space may be reused (0 for an object never granted): every grant covering it has
 * expired on the master's clock -- reads (and stamps) by t_lease + MC_GRANT_SKEW_MS, the write
 * grant of its put by grant_grid(t_lease) + grant_u units -- and MC_GRANT_SKEW_MS more has
 * passed, the most a storage server's clock may run behind. */
static uint64_t obj_grant_floor(const obj_t *o)
{
    if (!(o->flags & OF_GRANTED))
        return 0;
    uint64_t end = o->t_lease + MC_GRANT_SKEW_MS;
    uint64_t wr = grant_grid(o->t_lease) + o->grant_u * MASTER_GRANT_UNIT_MS;
    return (wr > end ? wr : end) + MC_GRANT_SKEW_MS;
}

static uint16_t grant_units(uint64_t ms)
{
    uint64_t u = (ms + MASTER_GRANT_UNIT_MS - 1) / MASTER_GRANT_UNIT_MS;
    return (uint16_t)(u > UINT16_MAX ? UINT16_MAX : u);
}

/* Sets o's lease (READABLE) or put start (WRITING) to t, not earlier than it was (or 0 for an
 * object never granted), keeping the end of its write grant. */
static void obj_set_lease(obj_t *o, uint64_t t)
{
    if (o->flags & OF_GRANTED) {
        uint64_t end = grant_grid(o->t_lease) + o->grant_u * MASTER_GRANT_UNIT_MS;
        o->grant_u = end > grant_grid(t) ? grant_units(end - grant_grid(t)) : 0;
    }
    o->t_lease = t;
}

/* A read lease for o: one lease period from now, the caller's clock reading (never
 * shortened), counted in the gauge. */
static void obj_lease_read(mc_master_t *m, obj_t *o, uint64_t now)
{
    uint64_t end = now + m->cfg.default_kv_lease_ttl_ms;
    if (o->t_lease >= end)
        return;
    master_lease_note_at(m, now, o->t_lease > now ? o->t_lease : 0, end);
    obj_set_lease(o, end);
}

/* Inside a grant session: o's replicas go out with grants of `write` access, signed from a
 * wall time no later than now (its lease or put start was just set to now + TTL or now). */
static void obj_granted(mc_master_t *m, obj_t *o, bool write)
{
    if (!m->granting)
        return;
    if (write) /* a new put, t_lease = put start: its grant ends mc_master_grant_life_ms later */
        o->grant_u = grant_units(o->t_lease + mc_master_grant_life_ms(m, true) -
                                 grant_grid(o->t_lease));
    /* a read: t_lease = now + TTL covers it; grant_u keeps any earlier write grant */
    o->flags |= OF_GRANTED;
}

static void discard_push(mc_master_t *m, uint32_t seg, uint32_t blk, uint64_t release_ms,
                         uint64_t floor_ms, uint64_t token, bool stuck_put);

/* Frees replica r's block, or parks it until floor_ms (its grants' end) when that is later
 * than now. */
static void rep_release(mc_master_t *m, obj_rep_t *r, uint64_t floor_ms, uint64_t now)
{
    if (floor_ms > now && r->blk != MC_ALLOC_NONE && master_seg_slot(m, r->seg)) {
        discard_push(m, r->seg, r->blk, floor_ms, floor_ms, 0, false);
        r->seg = SEG_NONE;
        return;
    }
    rep_free_block(m, r);
}

/* Frees an object's space (parked while grants may cover it) and record. Logs a WAL REMOVE if
 * it was committed. */
static void obj_destroy(mc_master_t *m, obj_t *o, bool log)
{
    uint64_t floor = obj_grant_floor(o), now = floor ? master_now(m) : 0;
    for (uint32_t i = 0; i < o->n_rep; i++)
        rep_release(m, &o->rep[i], floor, now);
    /* a pending put's PUT_START (HA standbys mode) is superseded by a REMOVE of its key */
    if ((log && o->state == OBJ_READABLE) ||
        (o->state == OBJ_WRITING && m->cfg.ha_log_put_starts))
        master_wal_log_remove(m, obj_key(o), o->klen);
    master_obj_unlink_free(m, o);
}

/* A READABLE object is evicted: WAL REMOVE, its key to the policy's ghost, space and record
 * freed. */
static void obj_evict(mc_master_t *m, obj_t *o)
{
    master_wal_log_remove(m, obj_key(o), o->klen);
    readable_unlink(m, o, 1);
    o->state = 0; /* out of the policy already */
    obj_destroy(m, o, false);
}

static void fill_rep(mc_master_t *m, const obj_t *o, const obj_rep_t *r, mc_master_replica_t *out,
                     int status)
{
    segment_t *s = m->segs[r->seg];
    out->segment_name = s->name;
    out->endpoint = s->endpoint;
    out->addr = mc_master_allocator_addr(s->alloc, r->blk);
    out->size = o->size;
    out->status = status;
    out->type = MC_MASTER_REPLICA_MEMORY;
    out->client_id = NULL;
}

/* Fills out (may be NULL) with the replicas readers may use: those on mounted or draining
 * segments (not RECOVERING ones, recovered from the WAL or held). Returns how many. */
static uint32_t readable_reps(mc_master_t *m, const obj_t *o, mc_master_replica_t *out)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < o->n_rep; i++) {
        segment_t *s = master_seg_slot(m, o->rep[i].seg);
        if (!s || (s->state != SEG_MOUNTED && s->state != SEG_DRAINING))
            continue;
        if (out)
            fill_rep(m, o, &o->rep[i], &out[n], 2);
        n++;
    }
    return n;
}

/* Every replica of o is on a segment held for its silent owner (seg_hold). */
static bool obj_held(mc_master_t *m, const obj_t *o)
{
    for (uint32_t i = 0; i < o->n_rep; i++) {
        segment_t *s = master_seg_slot(m, o->rep[i].seg);
        if (!s || !s->held)
            return false;
    }
    return o->n_rep > 0;
}

/* Committed object o (may be NULL) has no readable replica but waits for its owners' re-mount:
 * some replica is on a segment recovered from the log (a restart or a takeover), whose owner
 * re-mounts it at its next ping. Not one whose replicas are all held for a silent owner:
 * readers see no such key, and a put replaces it (mc_master_put_start). */
static bool obj_awaits_remount(mc_master_t *m, const obj_t *o)
{
    return o && o->state == OBJ_READABLE && readable_reps(m, o, NULL) == 0 && !obj_held(m, o);
}

/* What a read of key's object o (may be NULL) answers when it finds no replica, memory or
 * disk: REPLICA_IS_NOT_READY while o is being written or awaits a re-mount (a reader may try
 * again shortly), OBJECT_NOT_FOUND otherwise. */
static mc_status_t unreadable_status(mc_master_t *m, const obj_t *o)
{
    return o && (o->state != OBJ_READABLE || obj_awaits_remount(m, o))
               ? MC_ERR_REPLICA_IS_NOT_READY
               : MC_ERR_OBJECT_NOT_FOUND;
}

static bool obj_leased(mc_master_t *m, const obj_t *o, uint64_t now)
{
    (void)m;
    return o->state == OBJ_READABLE && o->t_lease > now;
}

static bool obj_soft_pinned(const obj_t *o, uint64_t now)
{
    return (o->flags & OF_SOFT_PIN) && o->t_pin > now;
}

/* ------------------------------------------------------------------ eviction */

static uint64_t total_capacity(mc_master_t *m, uint64_t *used_p)
{
    uint64_t cap = 0, used = 0;
    for (uint32_t i = 0; i < m->n_segs; i++) {
        segment_t *s = m->segs[i];
        if (s && s->alloc && (s->state == SEG_MOUNTED || s->state == SEG_DRAINING)) {
            cap += mc_master_allocator_capacity(s->alloc);
            used += mc_master_allocator_used(s->alloc);
        }
    }
    if (used_p)
        *used_p = used;
    return cap;
}

/* On-evict offload (disk-tier.md, "Master"): after an eviction pass, the next victims in the
 * policy's order are queued for their offload ahead of their eviction, up to the per-pass cap
 * (held ones count), looking at most MASTER_OFFLOAD_AHEAD_SCAN of them; so later passes find
 * them on disk and evict them at once instead of waiting an offload round trip. */
#define MASTER_OFFLOAD_AHEAD_SCAN 1024
static void offload_ahead(mc_master_t *m, uint64_t now)
{
    if (!m->cfg.enable_offload || !m->cfg.offload_on_evict)
        return;
    uint64_t held = 0;
    mc_evict_node_t *v = mc_evict_core_victim(m->evict);
    for (int k = 0; v && k < MASTER_OFFLOAD_AHEAD_SCAN; k++, v = mc_evict_core_next(m->evict, v)) {
        obj_t *o = node_obj(v);
        if ((o->flags & OF_HARD_PIN) || obj_soft_pinned(o, now))
            continue; /* not a victim soon */
        if (!master_disk_offload_ahead(m, o, now, &held))
            break;
    }
}

/* How many segments may lend space now (mounted, past their reuse delay): at most that many
 * replicas can be placed; *largest_p: the largest one's capacity. When none may
 * (every segment RECOVERING after a restart or takeover, or waiting out its reuse delay), or
 * the value is larger than any of them, evicting frees nothing a put could use: a failed
 * PutStart then evicts nothing, now or later (evict_pending), so objects committed once the
 * owners re-mount are not evicted for the puts that failed before, nor a cache emptied for a
 * value that cannot fit. */
static uint32_t lendable_segments(mc_master_t *m, uint64_t now, uint64_t *largest_p)
{
    uint32_t n = 0;
    uint64_t largest = 0;
    for (uint32_t i = 0; i < m->n_segs; i++) {
        segment_t *s = m->segs[i];
        if (s && s->alloc && s->state == SEG_MOUNTED && now >= s->reuse_after_ms) {
            n++;
            uint64_t cap = mc_master_allocator_capacity(s->alloc);
            largest = cap > largest ? cap : largest;
        }
    }
    *largest_p = largest;
    return n;
}

/* Evicts committed objects of scope (NULL = every tenant) that are not leased, not under data
 * grants (obj_grant_floor) and not pinned,
 * in the policy's victim order, until at least target bytes were freed. Soft-pinned objects go
 * in a second pass when allowed. Objects it cannot evict are walked past, not reordered (so
 * another tenant's objects keep their place). Returns the bytes freed. */
static uint64_t evict_scoped(mc_master_t *m, const mc_tenant_scope_t *scope, uint64_t target,
                             uint64_t max_scan)
{
    uint64_t now = master_now(m), freed = 0, n = 0, scanned = 0, deferred = 0;
    bool stop = false; /* the disk tier holds as many victims as it may: wait for it */
    for (int pass = 0; pass < 2 && freed < target && !stop; pass++) {
        if (pass == 1 && !m->cfg.allow_evict_soft_pinned_objects)
            break;
        /* while nothing was passed over, the policy's own victim() gives the next one (it may
         * reorder its segments first); after that, walk on from the last object looked at */
        bool walked = false;
        mc_evict_node_t *v = mc_evict_core_victim(m->evict);
        while (v && freed < target && scanned++ < max_scan) {
            obj_t *o = node_obj(v);
            mc_evict_node_t *next = mc_evict_core_next(m->evict, v);
            /* an object under data grants would only be parked: nothing freed before then */
            bool skip = obj_leased(m, o, now) || obj_grant_floor(o) > now ||
                        (o->flags & OF_HARD_PIN) ||
                        (pass == 0 && obj_soft_pinned(o, now)) ||
                        (scope && !mc_tenant_scope_key(scope, obj_key(o), o->klen, NULL, NULL));
            int disk = skip ? DISK_EVICT : master_disk_defer_evict(m, o, now, &deferred);
            if (disk == DISK_STOP) {
                stop = true;
                break;
            }
            skip |= disk == DISK_HOLD;
            /* only space on mounted (or draining) segments counts: an object kept on a
             * RECOVERING (held) segment alone frees nothing a put could use, and waits for its
             * owner instead */
            uint64_t bytes = 0;
            for (uint32_t i = 0; !skip && i < o->n_rep; i++) {
                segment_t *s = master_seg_slot(m, o->rep[i].seg);
                if (s && s->alloc && s->state != SEG_RECOVERING)
                    bytes += mc_master_allocator_size(s->alloc, o->rep[i].blk);
            }
            if (skip || !bytes) {
                walked = true;
                v = next;
                continue;
            }
            freed += bytes;
            n++;
            m->cnt.evicted_bytes += bytes;
            master_events_obj(m, MC_MASTER_EV_EVICTED, o);
            obj_evict(m, o);
            v = walked ? next : mc_evict_core_victim(m->evict);
        }
    }
    if (!scope)
        offload_ahead(m, now);
    m->cnt.evicted_objects += n;
    if (n)
        m->cnt.successful_evictions++;
    else if (target)
        m->cnt.failed_evictions++;
    if (n)
        MC_LOG_DEBUG("master: evicted %llu objects, %llu bytes", (unsigned long long)n,
                     (unsigned long long)freed);
    return freed;
}

static uint64_t evict_bytes(mc_master_t *m, uint64_t target, uint64_t max_scan)
{
    return evict_scoped(m, NULL, target, max_scan);
}

/* A tenant's quota eviction (master_tenant_admit): looks at the MC_MASTER_TENANT_EVICT_SCAN
 * first objects in victim order at most (of every tenant: one list), so that a tenant putting
 * over its quota cannot make each of its puts walk a large table on the loop thread. */
static uint64_t evict_tenant(mc_master_t *m, const mc_tenant_scope_t *scope, uint64_t target)
{
    return evict_scoped(m, scope, target, MC_MASTER_TENANT_EVICT_SCAN);
}

/* ------------------------------------------------------------------ placement */

static bool label_used(mc_master_t *m, const obj_rep_t *reps, uint32_t n, const segment_t *s)
{
    for (uint32_t i = 0; i < n; i++) {
        const segment_t *o = m->segs[reps[i].seg];
        if (o == s)
            return true;
        if (s->host_label[0] && strcmp(o->host_label, s->host_label) == 0)
            return true;
    }
    return false;
}

static bool seg_chosen(const obj_rep_t *reps, uint32_t n, uint32_t id)
{
    for (uint32_t i = 0; i < n; i++)
        if (reps[i].seg == id)
            return true;
    return false;
}

/* How place() allocates: from the put pools (a create-once put while they serve), and how
 * many replicas came from them. */
typedef struct place_how {
    bool pool;
    const obj_rep_t *reps;      /* the replicas place() fills */
    uint32_t pooled;
    uint8_t pooled_mask;        /* bit i: replica i came from a pool */
} place_how_t;
_Static_assert(MC_MASTER_MAX_REPLICAS <= 8, "pooled_mask has a bit per replica");

static bool try_alloc(mc_master_t *m, uint32_t id, uint64_t size, obj_rep_t *r, place_how_t *how)
{
    segment_t *s = m->segs[id];
    uint32_t blk;
    if (master_now(m) < s->reuse_after_ms)
        return false;
    if (how->pool && master_pool_take(m, id, size, &blk)) {
        how->pooled_mask |= (uint8_t)(1u << (r - how->reps));
        how->pooled++;
    } else if (mc_master_allocator_alloc(s->alloc, size, &blk) != MC_OK)
        return false;
    r->seg = id;
    r->blk = blk;
    s->n_replicas++;
    return true;
}

/* Allocates up to want replicas of size bytes on distinct segments, preferring distinct host
 * labels. Returns how many were allocated. */
static uint32_t place(mc_master_t *m, uint64_t size, const mc_master_put_opts_t *opts,
                      uint32_t want, obj_rep_t *reps, place_how_t *how)
{
    uint32_t n = 0;
    how->reps = reps;
    how->pooled = 0;
    how->pooled_mask = 0;
    if (opts && opts->n_preferred_segments) {
        for (size_t i = 0; i < opts->n_preferred_segments && n < want; i++) {
            uint32_t id;
            const char *name = opts->preferred_segments[i];
            segment_t *s = name && name[0] ? seg_by_name(m, name, &id) : NULL;
            if (s && s->state == SEG_MOUNTED && !seg_chosen(reps, n, id) &&
                try_alloc(m, id, size, &reps[n], how))
                n++;
        }
    } else if (opts && opts->preferred_segment && opts->preferred_segment[0]) {
        uint32_t id;
        segment_t *s = seg_by_name(m, opts->preferred_segment, &id);
        if (s && s->state == SEG_MOUNTED && try_alloc(m, id, size, &reps[n], how))
            n++;
    }
    if (m->n_segs == 0)
        return n;
    for (int strict = 1; strict >= 0 && n < want; strict--) {
        while (n < want) {
            uint32_t pick = SEG_NONE;
            if (m->cfg.strategy == MC_STRATEGY_FREE_RATIO_FIRST) {
                double best = -1;
                for (uint32_t i = 0; i < m->n_segs; i++) {
                    segment_t *s = m->segs[i];
                    if (!s || s->state != SEG_MOUNTED || seg_chosen(reps, n, i) ||
                        (strict && label_used(m, reps, n, s)))
                        continue;
                    uint64_t cap = mc_master_allocator_capacity(s->alloc);
                    double fr = 1.0 - (double)mc_master_allocator_used(s->alloc) / (double)cap;
                    if (cap - mc_master_allocator_used(s->alloc) >= size && fr > best) {
                        best = fr;
                        pick = i;
                    }
                }
                if (pick != SEG_NONE && try_alloc(m, pick, size, &reps[n], how)) {
                    n++;
                    continue;
                }
                /* fall through to a full scan below when the best one is fragmented */
            }
            bool got = false;
            uint32_t start = (uint32_t)(rnd(m) % m->n_segs);
            for (uint32_t k = 0; k < m->n_segs; k++) {
                uint32_t i = (start + k) % m->n_segs;
                segment_t *s = m->segs[i];
                if (!s || s->state != SEG_MOUNTED || seg_chosen(reps, n, i) ||
                    (strict && label_used(m, reps, n, s)))
                    continue;
                if (try_alloc(m, i, size, &reps[n], how)) {
                    n++;
                    got = true;
                    break;
                }
            }
            if (!got)
                break;
        }
    }
    return n;
}

/* ------------------------------------------------------------------ lifecycle */

mc_status_t mc_master_create(const mc_master_config_t *cfg, mc_master_t **m_p)
{
    *m_p = NULL;
    mc_master_t *m = MC_NEW(mc_master_t);
    if (!m)
        return MC_ERR_NO_MEMORY;
    m->cfg = *cfg;
    if (m->cfg.eviction_ratio <= 0 || m->cfg.eviction_ratio > 1)
        m->cfg.eviction_ratio = 0.05;
    if (m->cfg.eviction_high_watermark_ratio <= 0 || m->cfg.eviction_high_watermark_ratio > 1)
        m->cfg.eviction_high_watermark_ratio = 0.90;
    if (!m->cfg.wal_snapshot_bytes)
        m->cfg.wal_snapshot_bytes = 64ull << 20;
    m->cfg.wal_dir = NULL;
    m->clock = m->cfg.clock ? m->cfg.clock : default_clock;
    m->clock_ctx = m->cfg.clock_ctx;
    m->rng = mc_now_ns() | 1;
    m->epoch = mc_wall_ms();
    m->view_version = 1;
    pthread_mutex_init(&m->snap_mu, NULL);
    if (m->cfg.event_buffer_size > (1u << 24))
        m->cfg.event_buffer_size = 1u << 24;
    if ((m->cfg.eviction_policy != MC_EVICT_LRU && m->cfg.eviction_policy != MC_EVICT_ADAPTIVE) ||
        m->cfg.offloading_queue_limit < 1 || m->cfg.offloading_queue_limit > 100000000 ||
        !(m->cfg.offload_cap_ratio >= 0 && m->cfg.offload_cap_ratio <= 1) ||
        m->cfg.offload_admission > MC_MASTER_ADMIT_REUSED ||
        m->cfg.promotion_admission_threshold < 1 || m->cfg.promotion_admission_threshold > 255 ||
        m->cfg.promotion_queue_limit < 1 || m->cfg.promotion_max_per_heartbeat < 1 ||
        m->cfg.max_total_finished_tasks < 1 || m->cfg.max_total_pending_tasks < 1 ||
        m->cfg.max_total_processing_tasks < 1) {
        mc_master_destroy(m);
        return MC_ERR_INVALID_PARAMS;
    }
    /* the lease gauge's ring spans one lease period (whole seconds, rounded up) and two
     * seconds more; TTLs above a day (not accepted by the CLI) are not counted */
    uint64_t ring = (m->cfg.default_kv_lease_ttl_ms + 999) / 1000 + 2;
    if (ring <= 86400 + 2) {
        m->lease_ring = mc_calloc(ring, sizeof(*m->lease_ring));
        m->lease_ring_n = m->lease_ring ? (uint32_t)ring : 0;
        m->lease_sec = master_now(m) / 1000;
    }
    mc_evict_config_t ec;
    mc_evict_config_default(&ec, 0, m->cfg.eviction_policy);
    ec.entries = m->evict_entries = EVICT_MIN_ENTRIES;
    mc_evict_host_t host = {.key = policy_key, .size = policy_size};
    if (mc_evict_core_create(&ec, &host, &m->evict) != MC_OK || table_grow(m) != 0 ||
        master_events_init(m, m->cfg.event_buffer_size) != MC_OK) {
        mc_master_destroy(m);
        return MC_ERR_NO_MEMORY;
    }
    if (cfg->wal_dir && cfg->wal_dir[0]) {
        m->wal_dir = mc_strdup(cfg->wal_dir);
        if (!m->wal_dir) {
            mc_master_destroy(m);
            return MC_ERR_NO_MEMORY;
        }
        m->cfg.wal_dir = m->wal_dir;
        mc_status_t st = master_wal_open_and_recover(m);
        if (st != MC_OK) {
            mc_master_destroy(m);
            return st;
        }
    }
    *m_p = m;
    return MC_OK;
}

void mc_master_destroy(mc_master_t *m)
{
    if (!m)
        return;
    master_wal_close(m);
    master_tasks_free(m);
    mc_free(m->ha_dirty);
    if (m->ev_waiters_fn)
        m->ev_waiters_fn(m, true);
    master_events_free(m);
    for (uint64_t i = 0; i < m->n_buckets; i++) {
        obj_t *o = m->buckets[i];
        while (o) {
            obj_t *n = o->hnext;
            mc_free(o);
            o = n;
        }
    }
    mc_free(m->buckets);
    mc_free(m->lease_ring);
    mc_evict_core_destroy(m->evict);
    for (uint32_t i = 0; i < m->n_segs; i++)
        master_seg_free(m, i);
    mc_free(m->segs);
    master_disk_free(m);
    mc_free(m->clients);
    mc_free(m->disc);
    mc_free(m->wal_dir);
    mc_free(m->pub_segs);
    master_tenants_free(m);
    pthread_mutex_destroy(&m->snap_mu);
    mc_free(m);
}

void mc_master_set_seed(mc_master_t *m, uint64_t seed) { m->rng = seed | 1; }

/* ------------------------------------------------------------------ puts */

static void discard_push(mc_master_t *m, uint32_t seg, uint32_t blk, uint64_t release_ms,
                         uint64_t floor_ms, uint64_t token, bool stuck_put)
{
    if (mc_array_reserve(&m->disc, &m->cap_disc, m->n_disc + 1, 16) != MC_OK) {
        /* cannot defer: keep the space forever rather than risk reuse while written */
        MC_LOG_ERROR("master: discard list full; leaking a block until unmount");
        return;
    }
    if (floor_ms > release_ms)
        release_ms = floor_ms;
    m->disc[m->n_disc++] = (discarded_t){seg, blk, release_ms, floor_ms, token, stuck_put};
}

void master_park_block(mc_master_t *m, uint32_t seg, uint32_t blk, uint64_t release_ms)
{
    discard_push(m, seg, blk, release_ms, 0, 0, false);
}

/* Frees discarded block i now (the last one takes its place). */
static void discard_free(mc_master_t *m, size_t i)
{
    segment_t *s = master_seg_slot(m, m->disc[i].seg);
    if (s && s->alloc) {
        mc_master_allocator_free(s->alloc, m->disc[i].blk);
        s->n_replicas--;
    }
    if (m->disc[i].stuck_put)
        m->cnt.put_start_releases++;
    m->disc[i] = m->disc[--m->n_disc];
}

static int cmp_token(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

size_t mc_master_release_retired(mc_master_t *m, const uint64_t *tokens, size_t n)
{
    if (n == 0 || m->n_disc == 0)
        return 0;
    /* one pass over the discard list, each entry looked up in the sorted tokens: a batch of
     * 16 k tokens against as many held blocks must not stall the master */
    uint64_t *sorted = mc_malloc(n * sizeof(*sorted));
    if (!sorted)
        return 0; /* the blocks are freed when their leases end */
    memcpy(sorted, tokens, n * sizeof(*sorted));
    qsort(sorted, n, sizeof(*sorted), cmp_token);
    size_t freed = 0;
    uint64_t now = master_now(m);
    for (size_t i = 0; i < m->n_disc;) {
        discarded_t *d = &m->disc[i];
        if (d->token && bsearch(&d->token, sorted, n, sizeof(*sorted), cmp_token)) {
            if (d->floor_ms > now) { /* data grants may still cover it: until their end */
                d->release_ms = d->floor_ms;
                d->token = 0;
                i++;
                continue;
            }
            discard_free(m, i);
            freed++;
        } else {
            i++;
        }
    }
    mc_free(sorted);
    return freed;
}

void mc_master_retired_free(mc_master_retired_t *retired)
{
    mc_free(retired->reps);
    retired->reps = NULL;
    retired->n = retired->cap = 0;
}

/* Lists one retired replica in retired; false when it cannot (over max, no memory). */
static bool retired_list(mc_master_t *m, const obj_t *o, const obj_rep_t *r,
                         mc_master_retired_t *retired)
{
    if (retired->n >= retired->max)
        return false;
    if (retired->n == retired->cap) {
        uint32_t nc = retired->cap ? retired->cap * 2 : MC_MASTER_MAX_REPLICAS;
        if (nc > retired->max)
            nc = retired->max;
        mc_master_replica_t *n = mc_realloc(retired->reps, nc * sizeof(*n));
        if (!n)
            return false;
        retired->reps = n;
        retired->cap = nc;
    }
    fill_rep(m, o, r, &retired->reps[retired->n++], 2);
    return true;
}

/* A committed object leaves while readers hold a lease on it (an upsert replaced it, or a
 * forced remove): they may still be copying its bytes, or read them under a cached lease, so
 * its space is held until the lease ends and never reused under them. Its replicas are listed
 * in `retired` (may be NULL) for the caller to stamp and release with retired->token; those
 * that cannot be listed carry no token and stay held for the whole lease. Logs a WAL REMOVE. */
static void obj_retire(mc_master_t *m, obj_t *o, uint64_t now, mc_master_retired_t *retired)
{
    master_events_obj(m, MC_MASTER_EV_REMOVED, o);
    uint64_t floor = obj_grant_floor(o);
    for (uint32_t i = 0; i < o->n_rep; i++) {
        if (!master_seg_slot(m, o->rep[i].seg))
            continue;
        uint64_t token = 0, rep_floor = floor;
        if (retired) {
            if (o->t_lease - now > retired->lease_left_ms)
                retired->lease_left_ms = o->t_lease - now;
            if (retired_list(m, o, &o->rep[i], retired)) {
                while (retired->token == 0)
                    retired->token = rnd(m);
                token = retired->token;
                /* listed for a tenant-bound caller: its stamp grant lives the lease left (at
                 * most the TTL) + MC_GRANT_SKEW_MS */
                uint64_t stamp = now + m->cfg.default_kv_lease_ttl_ms + 2 * MC_GRANT_SKEW_MS;
                if (m->granting && stamp > rep_floor)
                    rep_floor = stamp;
            } else {
                retired->unlisted++;
            }
        }
        discard_push(m, o->rep[i].seg, o->rep[i].blk, o->t_lease, rep_floor, token, false);
    }
    master_wal_log_remove(m, obj_key(o), o->klen);
    master_obj_unlink_free(m, o);
}

/* A committed object leaves (removed, or replaced by an upsert): retired if readers hold a
 * lease on it (obj_retire), else freed at once. */
static void obj_take_away(mc_master_t *m, obj_t *o, uint64_t now, mc_master_retired_t *retired)
{
    master_disk_key_gone(m, obj_key(o), o->klen, o->hash);
    if (obj_leased(m, o, now)) {
        /* Held replicas are not listed for stamping (their server is silent, a stamp would
         * fail and the caller wait out the lease): nobody reads them under a lease, since
         * their owner serves the segment again only a lease period after it heard it was
         * given up (store-client.md, "Lease cache"); their space waits out the leases. */
        obj_retire(m, o, now, obj_held(m, o) ? NULL : retired);
        return;
    }
    master_events_obj(m, MC_MASTER_EV_REMOVED, o);
    obj_destroy(m, o, true);
}

mc_status_t mc_master_put_start(mc_master_t *m, const uint8_t cid[16], const char *key,
                                size_t klen, uint64_t size, const mc_master_put_opts_t *opts,
                                bool upsert, mc_master_replica_t *reps, uint32_t *n_p)
{
    mc_master_retired_t retired = {.max = MC_MASTER_MAX_REPLICAS};
    mc_status_t st = mc_master_put_start_ex(m, cid, key, klen, size, opts, upsert, reps, n_p,
                                            &retired, NULL);
    mc_master_retired_free(&retired);
    return st;
}

mc_status_t mc_master_put_start_ex(mc_master_t *m, const uint8_t cid[16], const char *key,
                                   size_t klen, uint64_t size, const mc_master_put_opts_t *opts,
                                   bool upsert, mc_master_replica_t *reps, uint32_t *n_p,
                                   mc_master_retired_t *retired, bool *light_p)
{
    return master_put_start(m, cid, key, klen, size, opts, upsert, false, reps, n_p, retired,
                            light_p);
}

mc_status_t master_put_start(mc_master_t *m, const uint8_t cid[16], const char *key, size_t klen,
                             uint64_t size, const mc_master_put_opts_t *opts, bool upsert,
                             bool promote, mc_master_replica_t *reps, uint32_t *n_p,
                             mc_master_retired_t *retired, bool *light_p)
{
    *n_p = 0;
    if (light_p)
        *light_p = false;
    if (!key_ok(key, klen))
        return MC_ERR_INVALID_KEY;
    if (size == 0 || size > VALUE_MAX)
        return MC_ERR_INVALID_PARAMS;
    if (opts && opts->n_preferred_segments > MC_MASTER_MAX_PREFERRED)
        return MC_ERR_INVALID_PARAMS;
    uint32_t want = opts && opts->replica_num ? opts->replica_num : 1;
    if (want > MC_MASTER_MAX_REPLICAS)
        want = MC_MASTER_MAX_REPLICAS;
    client_t *c = master_client_touch(m, cid, NULL);
    if (!c)
        return MC_ERR_NO_MEMORY;
    uint32_t serial = c->serial;
    uint64_t now = master_now(m);
    uint32_t h = master_key_hash(key, klen);
    obj_t *o = master_obj_find(m, key, klen, h);
    uint64_t kept_pin = 0; /* an upsert keeps the old value's soft pin (upstream's PRESERVE) */
    bool replaced = false; /* an upsert took a value away (its answer acknowledges that) */
    if (o) {
        if (upsert && o->state == OBJ_READABLE && obj_soft_pinned(o, now) &&
            !(opts && (opts->soft_pin || opts->soft_pin_disable)))
            kept_pin = o->t_pin;
        if (o->state == OBJ_WRITING) {
            if (now - o->t_lease < m->cfg.put_start_discard_timeout_ms)
                return MC_ERR_REPLICA_IS_NOT_READY;
            /* Pre-empt the stuck put; its space is kept until the release timeout because
             * its writer may still be writing there. */
            MC_LOG_WARN("master: pre-empting a put of '%.*s' stuck for %llu ms", (int)klen, key,
                        (unsigned long long)(now - o->t_lease));
            for (uint32_t i = 0; i < o->n_rep; i++) {
                if (master_seg_slot(m, o->rep[i].seg))
                    discard_push(m, o->rep[i].seg, o->rep[i].blk,
                                 o->t_lease + m->cfg.put_start_release_timeout_ms,
                                 obj_grant_floor(o), 0, true);
            }
            m->cnt.put_start_discards++;
            master_obj_unlink_free(m, o);
        } else if (!upsert && !obj_held(m, o)) {
            return MC_ERR_OBJECT_ALREADY_EXISTS;
        } else {
            /* an upsert, or a put of a key held for a silent owner (readers see no such key,
             * so a writer may put it again): the new value gets fresh space */
            obj_take_away(m, o, now, retired);
            replaced = upsert;
        }
    } else if (!promote && master_disk_has(m, key, klen, h)) {
        if (!upsert)
            return MC_ERR_OBJECT_ALREADY_EXISTS;
        master_disk_key_gone(m, key, klen, h); /* the upsert replaces the disk-only value */
        replaced = true;
    }
    /* a miss for the policy (before any eviction: its victims must not decide this key's
     * admission); the object it links at PutEnd weighs size x replicas placed */
    mc_evict_core_miss(m->evict, h, size * want);
    mc_status_t qst = master_tenant_admit(m, key, klen, size * want, evict_tenant);
    if (qst != MC_OK)
        return qst;
    obj_rep_t r[MC_MASTER_MAX_REPLICAS];
    /* a create-once put may take pool blocks (master_pool.c) where pools serve; an upsert
     * allocates afresh */
    place_how_t how = {.pool = !upsert && master_pools_on(m)};
    uint32_t n = place(m, size, opts, want, r, &how);
    uint64_t largest = 0; /* the largest lendable segment: a larger value fits in none */
    uint32_t lendable = n < want ? lendable_segments(m, now, &largest) : 0; /* want >= 1 */
    if (n < want && how.pool && n < lendable && master_pool_drain(m, SEG_NONE)) {
        /* pool blocks never make a put fail (or lose a replica) that would fit without them;
         * the pool blocks it took go back as given back (logged) */
        for (uint32_t i = 0; i < n; i++) {
            if (how.pooled_mask & (1u << i))
                master_pool_give_back(m, r[i].seg, r[i].blk);
            rep_free_block(m, &r[i]);
        }
        how.pool = false;
        n = place(m, size, opts, want, r, &how);
    }
    if (n == 0 && lendable > 0 && size <= largest) {
        /* Synchronous eviction: free space now, then retry, while anything is evictable. */
        uint64_t cap = total_capacity(m, NULL);
        for (int round = 0; round < 64 && n == 0; round++) {
            uint64_t target = (uint64_t)(m->cfg.eviction_ratio * (double)cap);
            if (target < size)
                target = size;
            if (evict_bytes(m, target, UINT64_MAX) == 0)
                break;
            n = place(m, size, opts, want, r, &how);
        }
        if (n == 0)
            m->evict_pending = true;
    }
    if (n == 0) {
        m->cnt.put_start_alloc_failures++;
        return MC_ERR_NO_AVAILABLE_HANDLE;
    }
    o = master_obj_new(m, key, klen, h, n);
    if (!o) {
        for (uint32_t i = 0; i < n; i++)
            rep_free_block(m, &r[i]);
        return MC_ERR_NO_MEMORY;
    }
    if (n < want)
        m->cnt.put_start_partial_allocations++;
    o->state = OBJ_WRITING;
    o->size = size;
    o->t_lease = now;
    o->owner = serial;
    obj_granted(m, o, true);
    c = client_find(m, cid); /* re-lookup: do not keep table pointers across evictions */
    if (c)
        c->n_writing++;
    master_obj_set_nrep(m, o, n);
    if (opts && opts->hard_pin)
        o->flags |= OF_HARD_PIN;
    if (opts && opts->soft_pin) {
        o->flags |= OF_SOFT_PIN;
        uint64_t ttl = opts->soft_pin_ttl_ms ? opts->soft_pin_ttl_ms
                                             : m->cfg.default_kv_soft_pin_ttl_ms;
        o->t_pin = ttl > UINT64_MAX - now ? UINT64_MAX : now + ttl; /* a per-put ttl: any u64 */
    } else if (kept_pin) {
        o->flags |= OF_SOFT_PIN;
        o->t_pin = kept_pin;
    }
    memcpy(o->rep, r, n * sizeof(r[0]));
    master_list_push(&m->writing, o);
    /* its allocation in the replicated log (HA standbys mode), an upsert's too: a new leader
     * keeps that space for the writer, whose bytes may still be on their way */
    master_wal_log_put_start(m, o, cid);
    /* light: its answer need not wait for its own record: it replaced no value, and the
     * allocation is not logged or every replica is a pool block that every later leader
     * knows as reserved */
    if (light_p)
        *light_p = !replaced && (!(m->ha_log_on && m->cfg.ha_log_put_starts) || how.pooled == n);
    if (how.pool)
        for (uint32_t i = 0; i < n; i++)
            master_pool_refill(m, o->rep[i].seg, size);
    for (uint32_t i = 0; i < n; i++)
        fill_rep(m, o, &o->rep[i], &reps[i], 1);
    *n_p = n;
    return MC_OK;
}

const uint64_t mc_master_value_size_le[MC_MASTER_VALUE_SIZE_BUCKETS] = {
    4096, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
};

/* master_value_size_bytes: one observation per committed put (PutEnd / UpsertEnd). */
static void observe_value_size(mc_master_t *m, uint64_t size)
{
    size_t i = 0;
    while (i < MC_MASTER_VALUE_SIZE_BUCKETS && size > mc_master_value_size_le[i])
        i++;
    m->cnt.value_size_bucket[i]++; /* i == MC_MASTER_VALUE_SIZE_BUCKETS: above the last bound */
    m->cnt.value_size_count++;
    m->cnt.value_size_sum += size;
}

static mc_status_t writer_check(mc_master_t *m, const uint8_t cid[16], obj_t *o)
{
    if (o->state != OBJ_WRITING)
        return MC_ERR_INVALID_WRITE;
    client_t *c = client_find(m, cid);
    if (!c || c->serial != o->owner)
        return MC_ERR_ILLEGAL_CLIENT;
    c->last_ping_ms = master_now(m);
    return MC_OK;
}

mc_status_t mc_master_put_end(mc_master_t *m, const uint8_t cid[16], const char *key, size_t klen,
                              uint64_t checksum)
{
    if (!key_ok(key, klen))
        return MC_ERR_INVALID_KEY;
    obj_t *o = master_obj_find(m, key, klen, master_key_hash(key, klen));
    if (!o)
        return MC_ERR_OBJECT_NOT_FOUND;
    mc_status_t st = writer_check(m, cid, o);
    if (st != MC_OK)
        return st;
    master_list_remove(&m->writing, o);
    master_writer_done(m, o->owner);
    o->state = OBJ_READABLE;
    o->checksum = checksum;
    /* not leased; a granted object keeps its write grant's end (o->owner stays: the writer, for
     * BatchReplicaClear's ownership check) */
    obj_set_lease(o, o->flags & OF_GRANTED ? master_now(m) : 0);
    master_readable_link(m, o);
    master_wal_log_put_end(m, o);
    master_events_obj(m, MC_MASTER_EV_COMMITTED, o);
    observe_value_size(m, o->size);
    master_disk_put_end(m, o);
    return MC_OK;
}

mc_status_t mc_master_put_revoke(mc_master_t *m, const uint8_t cid[16], const char *key,
                                 size_t klen)
{
    if (!key_ok(key, klen))
        return MC_ERR_INVALID_KEY;
    obj_t *o = master_obj_find(m, key, klen, master_key_hash(key, klen));
    if (!o)
        return MC_ERR_OBJECT_NOT_FOUND;
    mc_status_t st = writer_check(m, cid, o);
    if (st != MC_OK)
        return st;
    obj_destroy(m, o, false);
    return MC_OK;
}

/* ------------------------------------------------------------------ reads */

mc_status_t mc_master_get_replicas(mc_master_t *m, const char *key, size_t klen,
                                   mc_master_replica_t *reps, uint32_t *n_p, uint64_t *size_p,
                                   uint64_t *checksum_p)
{
    return mc_master_get_replicas_h(m, key, klen, key_ok(key, klen) ? master_key_hash(key, klen) : 0,
                                    master_now(m), reps, n_p, size_p, checksum_p);
}

/* Starts loading the lines of o's record that a lookup of a klen-byte key reads: the header,
 * the first replica and the key (a record with more replica slots has its key further on:
 * its last line may be missed). */
static inline void obj_prefetch(const obj_t *o, size_t klen)
{
    uintptr_t p = (uintptr_t)o & ~(uintptr_t)63,
              last = (uintptr_t)o + sizeof(obj_t) + sizeof(obj_rep_t) + klen - 1;
    for (; p <= last; p += 64)
        __builtin_prefetch((const void *)p);
}

/* Up to this many keys of a batch go through the prefetch passes together: enough misses in
 * flight to fill the memory pipeline, few enough that the first lines are still cached when
 * the last pass reads them. */
#define LOOKUP_WAVE 128

/* The passes after the bucket slots for n keys (klens[i] = 0: nothing to fetch). */
static void lookup_prefetch(mc_master_t *m, const size_t *klens, size_t n, const uint32_t *hashes)
{
    uint64_t mask = m->n_buckets - 1;
    for (size_t i = 0; i < n; i++) /* the chain heads' records */
        if (klens[i]) {
            const obj_t *o = m->buckets[hashes[i] & mask];
            if (o)
                obj_prefetch(o, klens[i]);
        }
    for (size_t i = 0; i < n; i++) { /* the second record of a chain whose head is not it */
        const obj_t *o = klens[i] ? m->buckets[hashes[i] & mask] : NULL;
        if (o && o->hash != hashes[i] && o->hnext)
            obj_prefetch(o->hnext, klens[i]);
    }
    for (size_t i = 0; i < n; i++) { /* what a hit reads next */
        const obj_t *o = klens[i] ? m->buckets[hashes[i] & mask] : NULL;
        if (o && o->hash != hashes[i])
            o = o->hnext;
        if (!o || o->hash != hashes[i] || o->klen != klens[i] || o->state != OBJ_READABLE)
            continue;
        for (uint32_t r = 0; r < o->n_rep; r++) { /* the allocator records of the addresses */
            const segment_t *s = master_seg_slot(m, o->rep[r].seg);
            if (s && s->alloc)
                mc_master_allocator_prefetch(s->alloc, o->rep[r].blk);
        }
        mc_evict_core_prefetch_node(&o->node); /* the neighbours a hit relinks */
    }
}

uint64_t mc_master_lookup_prepare(mc_master_t *m, const char *const *keys, const size_t *klens,
                                  size_t n, uint32_t *hashes)
{
    /* Hash every key once and prefetch its bucket slot; then, a wave of keys at a time, the
     * records of the chains' first two entries (header, replica, key), and for a hit the
     * allocator records its addresses come from and its neighbours in the eviction policy.
     * By the time the caller looks key i up, its cache lines are (mostly) there. */
    uint64_t mask = m->n_buckets - 1;
    for (size_t i = 0; i < n; i++) {
        hashes[i] = key_ok(keys[i], klens[i]) ? master_key_hash(keys[i], klens[i]) : 0;
        __builtin_prefetch(&m->buckets[hashes[i] & mask]);
    }
    size_t kl[LOOKUP_WAVE];
    for (size_t w = 0; w < n; w += LOOKUP_WAVE) {
        size_t c = n - w < LOOKUP_WAVE ? n - w : LOOKUP_WAVE;
        for (size_t i = 0; i < c; i++) /* 0 = an invalid key: nothing to prefetch */
            kl[i] = key_ok(keys[w + i], klens[w + i]) ? klens[w + i] : 0;
        lookup_prefetch(m, kl, c, hashes + w);
    }
    return master_now(m);
}

mc_status_t mc_master_get_replicas_h(mc_master_t *m, const char *key, size_t klen, uint32_t hash,
                                     uint64_t now, mc_master_replica_t *reps, uint32_t *n_p,
                                     uint64_t *size_p, uint64_t *checksum_p)
{
    *n_p = 0;
    if (!key_ok(key, klen))
        return MC_ERR_INVALID_KEY;
    obj_t *o = master_obj_find(m, key, klen, hash);
    uint32_t n = o && o->state == OBJ_READABLE ? readable_reps(m, o, reps) : 0;
    if (n == 0) { /* memory first; else the LOCAL_DISK replica (no lease: its owner serves it;
                     also while a promotion writes the memory copy) */
        if (!master_disk_replica(m, key, klen, hash, reps, size_p, checksum_p))
            return unreadable_status(m, o);
        master_disk_hit(m, key, klen, hash);
        *n_p = 1;
        return MC_OK;
    }
    obj_lease_read(m, o, now);
    obj_granted(m, o, false);
    mc_evict_core_hit(m->evict, &o->node);
    o->flags |= OF_REUSED;
    *n_p = n;
    if (size_p)
        *size_p = o->size;
    if (checksum_p)
        *checksum_p = o->checksum;
    return MC_OK;
}

mc_status_t mc_master_peek_replicas(mc_master_t *m, const char *key, size_t klen,
                                    mc_master_replica_t *reps, uint32_t *n_p, uint64_t *size_p)
{
    *n_p = 0;
    if (!key_ok(key, klen))
        return MC_ERR_INVALID_KEY;
    uint32_t h = master_key_hash(key, klen);
    obj_t *o = master_obj_find(m, key, klen, h);
    uint32_t n = o && o->state == OBJ_READABLE ? readable_reps(m, o, reps) : 0;
    if (n == 0) {
        if (!master_disk_replica(m, key, klen, h, reps, size_p, NULL))
            return unreadable_status(m, o);
        *n_p = 1;
        return MC_OK;
    }
    *n_p = n;
    if (size_p)
        *size_p = o->size;
    return MC_OK;
}

mc_status_t mc_master_exist(mc_master_t *m, const char *key, size_t klen)
{
    return mc_master_exist_h(m, key, klen, key_ok(key, klen) ? master_key_hash(key, klen) : 0,
                             master_now(m));
}

mc_status_t mc_master_exist_h(mc_master_t *m, const char *key, size_t klen, uint32_t hash,
                              uint64_t now)
{
    if (!key_ok(key, klen))
        return MC_ERR_INVALID_KEY;
    obj_t *o = master_obj_find(m, key, klen, hash);
    if (!o || o->state != OBJ_READABLE || readable_reps(m, o, NULL) == 0)
        return master_disk_has(m, key, klen, hash) || obj_awaits_remount(m, o)
                   ? MC_OK
                   : MC_ERR_OBJECT_NOT_FOUND;
    if (m->cfg.exist_key_extends_lease)
        obj_lease_read(m, o, now);
    return MC_OK;
}

mc_status_t mc_master_get_size(mc_master_t *m, const char *key, size_t klen, uint64_t *size_p)
{
    *size_p = 0;
    if (!key_ok(key, klen))
        return MC_ERR_INVALID_KEY;
    uint32_t h = master_key_hash(key, klen);
    obj_t *o = master_obj_find(m, key, klen, h);
    if ((!o || o->state != OBJ_READABLE || readable_reps(m, o, NULL) == 0) &&
        !obj_awaits_remount(m, o))
        return master_disk_replica(m, key, klen, h, NULL, size_p, NULL) ? MC_OK
                                                                        : MC_ERR_OBJECT_NOT_FOUND;
    *size_p = o->size;
    return MC_OK;
}

/* ------------------------------------------------------------------ removes */

static mc_status_t remove_obj(mc_master_t *m, obj_t *o, bool force, uint64_t now,
                              mc_master_retired_t *retired)
{
    if (o->state != OBJ_READABLE)
        return MC_ERR_REPLICA_IS_NOT_READY;
    if (!force && obj_leased(m, o, now)) {
        m->cnt.lease_blocked_removes++;
        return MC_ERR_OBJECT_HAS_LEASE;
    }
    obj_take_away(m, o, now, retired);
    return MC_OK;
}

mc_status_t mc_master_remove(mc_master_t *m, const char *key, size_t klen, bool force,
                             mc_master_retired_t *retired)
{
    if (!key_ok(key, klen))
        return MC_ERR_INVALID_KEY;
    uint32_t h = master_key_hash(key, klen);
    obj_t *o = master_obj_find(m, key, klen, h);
    if (!o) { /* a disk-only value: its owner is told to remove it */
        if (!master_disk_has(m, key, klen, h))
            return MC_ERR_OBJECT_NOT_FOUND;
        master_disk_key_gone(m, key, klen, h);
        return MC_OK;
    }
    return remove_obj(m, o, force, master_now(m), retired);
}

mc_status_t mc_master_remove_regex(mc_master_t *m, const char *pattern, bool force,
                                   uint64_t *count_p, mc_master_retired_t *retired)
{
    if (!pattern) {
        *count_p = 0;
        return MC_ERR_INVALID_PARAMS;
    }
    return mc_master_remove_scoped(m, NULL, pattern, force, count_p, retired);
}

/* RemoveByRegex/RemoveAll's filter: the key is in scope and its user part matches re (NULL:
 * every key). */
typedef struct {
    const mc_tenant_scope_t *scope;
    const regex_t *re;
} remove_match_t;

static bool remove_match(void *arg, const char *key, size_t klen)
{
    const remove_match_t *rm = arg;
    const char *ukey;
    size_t ulen;
    if (!mc_tenant_scope_key(rm->scope, key, klen, &ukey, &ulen))
        return false;
    if (!rm->re)
        return true;
    char kbuf[KEY_MAX + 1];
    memcpy(kbuf, ukey, ulen);
    kbuf[ulen] = 0;
    return regexec(rm->re, kbuf, 0, NULL, 0) == 0;
}

mc_status_t mc_master_remove_scoped(mc_master_t *m, const mc_tenant_scope_t *scope,
                                    const char *pattern, bool force, uint64_t *count_p,
                                    mc_master_retired_t *retired)
{
    *count_p = 0;
    if (pattern && strlen(pattern) > MC_MASTER_REGEX_MAX)
        return MC_ERR_INVALID_PARAMS;
    regex_t re;
    if (pattern && regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0) {
        MC_LOG_WARN("master: bad regex '%s'", pattern);
        return MC_ERR_INVALID_PARAMS;
    }
    uint64_t now = master_now(m), n = 0;
    remove_match_t rm = {scope, pattern ? &re : NULL};
    for (obj_t *o = master_readable_next(m, NULL); o;) {
        obj_t *next = master_readable_next(m, o);
        if (remove_match(&rm, obj_key(o), o->klen) &&
            remove_obj(m, o, force, now, retired) == MC_OK)
            n++;
        o = next;
    }
    /* disk-only keys (their memory copy evicted): their owners are told to remove them */
    n += master_disk_remove_where(m, remove_match, &rm);
    if (pattern)
        regfree(&re);
    *count_p = n;
    return MC_OK;
}

/* Upstream's BatchReplicaClear for one key (see master.h). */
mc_status_t mc_master_replica_clear(mc_master_t *m, const uint8_t cid[16], const char *key,
                                    size_t klen, const char *segment)
{
    if (!key_ok(key, klen))
        return MC_ERR_INVALID_KEY;
    if (!segment || strlen(segment) >= MC_MASTER_NAME_MAX)
        return MC_ERR_INVALID_PARAMS;
    obj_t *o = master_obj_find(m, key, klen, master_key_hash(key, klen));
    if (!o)
        return MC_ERR_OBJECT_NOT_FOUND;
    client_t *c = client_find(m, cid);
    if (!c || o->owner != c->serial)
        return MC_ERR_ILLEGAL_CLIENT;      /* another client's (or a recovered) object */
    uint64_t now = master_now(m);
    if (obj_leased(m, o, now))
        return MC_ERR_OBJECT_HAS_LEASE;
    if (o->state != OBJ_READABLE)
        return MC_ERR_REPLICA_IS_NOT_READY; /* a put in flight */
    if (!segment[0]) {
        master_events_obj(m, MC_MASTER_EV_REMOVED, o);
        obj_destroy(m, o, true);
        return MC_OK;
    }
    uint32_t kept = 0, cleared = 0;
    uint64_t floor = obj_grant_floor(o);
    for (uint32_t i = 0; i < o->n_rep; i++) {
        segment_t *s = master_seg_slot(m, o->rep[i].seg);
        if (s && strcmp(s->name, segment) == 0) {
            master_events_obj_seg(m, MC_MASTER_EV_REMOVED, o, o->rep[i].seg);
            rep_release(m, &o->rep[i], floor, now);
            cleared++;
        } else {
            o->rep[kept++] = o->rep[i];
        }
    }
    if (!cleared)
        return MC_ERR_SEGMENT_NOT_FOUND;    /* no replica there */
    master_obj_set_nrep(m, o, kept);
    if (kept == 0) {
        obj_destroy(m, o, true);
        return MC_OK;
    }
    master_wal_log_commit(m, o, true);      /* the object with its remaining replicas */
    return MC_OK;
}

mc_status_t mc_master_remove_all(mc_master_t *m, bool force, uint64_t *count_p,
                                 mc_master_retired_t *retired)
{
    return mc_master_remove_scoped(m, NULL, NULL, force, count_p, retired);
}

/* ------------------------------------------------------------------ mount / unmount */

/* Drops every replica on segment id (objects left without replicas are removed), frees the
 * segment. Logs UNMOUNT when log. */
static void seg_drop(mc_master_t *m, uint32_t id, bool log)
{
    segment_t *s = m->segs[id];
    MC_LOG_INFO("master: dropping segment '%s' (%llu replicas)", s->name,
                (unsigned long long)s->n_replicas);
    if (s->n_replicas || s->state == SEG_RECOVERING) {
        for (uint64_t b = 0; b < m->n_buckets; b++) {
            obj_t *o = m->buckets[b];
            while (o) {
                obj_t *next = o->hnext;
                uint32_t k = 0;
                for (uint32_t i = 0; i < o->n_rep; i++) {
                    if (o->rep[i].seg == id)
                        continue; /* space goes with the allocator */
                    o->rep[k++] = o->rep[i];
                }
                if (k != o->n_rep) {
                    master_obj_set_nrep(m, o, k);
                    if (k == 0)
                        master_obj_unlink_free(m, o); /* the UNMOUNT record implies it */
                }
                o = next;
            }
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < m->n_disc; i++)
        if (m->disc[i].seg != id)
            m->disc[k++] = m->disc[i];
    m->n_disc = k;
    if (log)
        master_wal_log_unmount(m, id);
    master_events_segment_lost(m, id);
    master_seg_free(m, id);
    m->view_version++;
}

/* The owner of segment id went silent: its objects are kept but unreadable (RECOVERING,
 * held) until it re-mounts the same instance or segment_hold_ms pass (the cron then drops
 * it). Nothing is allocated there meanwhile. Not logged: the WAL still has it mounted, and a
 * restarted master recovers it as RECOVERING anyway. */
static void seg_hold(mc_master_t *m, uint32_t id, uint64_t now)
{
    segment_t *s = m->segs[id];
    master_pool_drain(m, id);
    s->state = SEG_RECOVERING;
    s->held = true;
    s->deadline_ms = now + m->cfg.segment_hold_ms;
    m->view_version++;
    MC_LOG_WARN("master: holding segment '%s' (%llu replicas) unreadable for %llu ms until its "
                "owner re-mounts it", s->name, (unsigned long long)s->n_replicas,
                (unsigned long long)m->cfg.segment_hold_ms);
}

/* Whether client serial owns a held segment (its record must stay until it is restored or
 * dropped: the re-mount keeps the serial that its objects' writer checks use). */
static bool client_holds_segment(mc_master_t *m, uint32_t serial)
{
    for (uint32_t id = 0; id < m->n_segs; id++) {
        segment_t *s = m->segs[id];
        if (s && s->held && s->owner_serial == serial)
            return true;
    }
    return false;
}

static bool client_find_alive_owner(mc_master_t *m, const segment_t *s)
{
    for (size_t i = 0; i < m->n_clients; i++)
        if (m->clients[i].serial == s->owner_serial && !m->clients[i].expired)
            return true;
    return false;
}

static bool name_ok(const char *s, bool required)
{
    if (!s || !s[0])
        return !required;
    return strlen(s) < MC_MASTER_NAME_MAX;
}

mc_status_t mc_master_mount(mc_master_t *m, const uint8_t cid[16],
                            const mc_master_segment_info_t *si, bool remount)
{
    (void)remount;
    if (!si || !name_ok(si->name, true) || !name_ok(si->host_label, false) ||
        !name_ok(si->te_endpoint, false) || si->size < MC_ALLOC_ALIGN * 2 ||
        si->base + si->size < si->base ||
        (si->page_size && (si->page_size < 4096 || si->page_size > (1ull << 30) ||
                           (si->page_size & (si->page_size - 1)))))
        return MC_ERR_INVALID_PARAMS;
    client_t *c = master_client_touch(m, cid, NULL);
    if (!c)
        return MC_ERR_NO_MEMORY;
    c->greeted = true;
    uint32_t id;
    segment_t *s = seg_by_name(m, si->name, &id);
    if (s) {
        bool same = s->base == si->base && s->size == si->size &&
                    memcmp(s->uuid, si->uuid, 16) == 0;
        if (same && si->page_size) /* the same memory: a segment restored from the WAL
                                      learns its page size again */
            s->page_size = si->page_size;
        if (s->state == SEG_RECOVERING) {
            bool held = s->held;
            if (held) /* the same instance: same memory and the same client that held it */
                same = same && memcmp(s->owner_id, cid, 16) == 0;
            if (same) {
                s->state = SEG_MOUNTED;
                s->held = false;
                s->owner_serial = c->serial;
                memcpy(s->owner_id, cid, 16);
                if (si->te_endpoint && si->te_endpoint[0] && strcmp(si->te_endpoint, s->endpoint)) {
                    char *e = mc_strdup(si->te_endpoint);
                    if (e) {
                        mc_free(s->endpoint);
                        s->endpoint = e;
                    }
                }
                m->view_version++;
                /* its objects are readable again (also a held segment's: a subscriber that
                 * resynchronised meanwhile did not list them) */
                if (m->ev_cap && s->n_replicas) {
                    for (uint64_t b = 0; b < m->n_buckets; b++)
                        for (obj_t *o = m->buckets[b]; o; o = o->hnext)
                            for (uint32_t i = 0; o->state == OBJ_READABLE && i < o->n_rep; i++)
                                if (o->rep[i].seg == id)
                                    master_events_obj_seg(m, MC_MASTER_EV_COMMITTED, o, id);
                }
                MC_LOG_INFO("master: segment '%s' re-mounted%s; %llu replicas readable again",
                            s->name, held ? " by its owner within the hold" : "",
                            (unsigned long long)s->n_replicas);
                return MC_OK;
            }
            /* Same name, different memory (or another client): the old contents are gone. */
            MC_LOG_WARN("master: segment '%s' mounted again as another instance; its %llu "
                        "unreadable replicas are dropped", s->name,
                        (unsigned long long)s->n_replicas);
            seg_drop(m, id, true);
        } else if (same && s->owner_serial == c->serial) {
            return MC_OK; /* idempotent */
        } else if (same && !client_find_alive_owner(m, s)) {
            /* owner unknown (restarted client with the same memory) : adopt */
            s->owner_serial = c->serial;
            memcpy(s->owner_id, cid, 16);
            return MC_OK;
        } else {
            return MC_ERR_SEGMENT_ALREADY_EXISTS;
        }
    }
    /* new segment id: reuse a free slot */
    for (id = 0; id < m->n_segs; id++)
        if (!m->segs[id])
            break;
    if (id == m->n_segs) {
        if (mc_array_reserve(&m->segs, &m->cap_segs, (size_t)m->n_segs + 1, 16) != MC_OK)
            return MC_ERR_NO_MEMORY;
        m->segs[m->n_segs++] = NULL;
    }
    s = MC_NEW(segment_t);
    if (!s)
        return MC_ERR_NO_MEMORY;
    s->name = mc_strdup(si->name);
    s->endpoint = mc_strdup(si->te_endpoint && si->te_endpoint[0] ? si->te_endpoint : si->name);
    s->host_label = mc_strdup(si->host_label ? si->host_label : "");
    if (!s->name || !s->endpoint || !s->host_label ||
        mc_master_allocator_create(si->base, si->size, &s->alloc) != MC_OK) {
        m->segs[id] = s;
        master_seg_free(m, id);
        return MC_ERR_NO_MEMORY;
    }
    s->base = si->base;
    s->size = si->size;
    s->page_size = si->page_size;
    memcpy(s->uuid, si->uuid, 16);
    memcpy(s->owner_id, cid, 16);
    s->owner_serial = c->serial;
    s->state = SEG_MOUNTED;
    m->segs[id] = s;
    m->view_version++;
    master_wal_log_mount(m, id);
    MC_LOG_INFO("master: segment '%s' mounted (%llu bytes at 0x%llx, host '%s')", s->name,
                (unsigned long long)s->size, (unsigned long long)s->base, s->host_label);
    return MC_OK;
}

static bool seg_has_leases(mc_master_t *m, uint32_t id, uint64_t now)
{
    for (obj_t *o = master_readable_next(m, NULL); o; o = master_readable_next(m, o)) {
        if (!obj_leased(m, o, now))
            continue;
        for (uint32_t i = 0; i < o->n_rep; i++)
            if (o->rep[i].seg == id)
                return true;
    }
    return false;
}

mc_status_t mc_master_unmount(mc_master_t *m, const uint8_t cid[16], const char *name,
                              bool graceful)
{
    if (!name_ok(name, true))
        return MC_ERR_INVALID_PARAMS;
    uint32_t id;
    segment_t *s = seg_by_name(m, name, &id);
    if (!s)
        return MC_ERR_SEGMENT_NOT_FOUND;
    client_t *c = client_find(m, cid);
    if (!c || c->serial != s->owner_serial)
        return MC_ERR_ILLEGAL_CLIENT;
    c->last_ping_ms = master_now(m);
    if (graceful && seg_has_leases(m, id, master_now(m))) {
        master_pool_drain(m, id);
        s->state = SEG_DRAINING; /* the cron finishes it once the leases are gone */
        m->view_version++;
        return MC_OK;
    }
    seg_drop(m, id, true);
    return MC_OK;
}

mc_status_t mc_master_ping(mc_master_t *m, const uint8_t cid[16], bool *need_remount_p)
{
    bool was_new = false;
    client_t *c = master_client_touch(m, cid, &was_new);
    if (!c)
        return MC_ERR_NO_MEMORY;
    /* Another call (a PutStart after a restart or a drop) may have registered it first: the
     * first ping still asks for the re-mount, unless it mounted since. */
    *need_remount_p = was_new || !c->greeted;
    c->greeted = true;
    return MC_OK;
}

mc_status_t mc_master_query_segment(mc_master_t *m, const char *name,
                                    mc_master_segment_status_t *out)
{
    memset(out, 0, sizeof(*out));
    if (!name_ok(name, true))
        return MC_ERR_INVALID_PARAMS;
    segment_t *s = seg_by_name(m, name, NULL);
    if (!s)
        return MC_ERR_SEGMENT_NOT_FOUND;
    out->state = s->state;
    out->capacity = s->alloc ? mc_master_allocator_capacity(s->alloc) : s->size;
    out->used = s->alloc ? mc_master_allocator_used(s->alloc) : 0;
    out->replicas = s->n_replicas;
    return MC_OK;
}

/* ------------------------------------------------------------------ cron */

void mc_master_metrics_now(mc_master_t *m, mc_master_metrics_t *out)
{
    *out = m->cnt;
    uint64_t used = 0;
    out->total_capacity_bytes = total_capacity(m, &used);
    out->allocated_bytes = used;
    out->key_count = m->n_readable;
    out->soft_pin_key_count = m->n_soft;
    out->hard_pin_key_count = m->n_hard;
    out->leased_key_count = master_leased_count(m);
    out->writing_count = m->writing.n;
    out->active_clients = 0;
    for (size_t i = 0; i < m->n_clients; i++)
        out->active_clients += !m->clients[i].expired;
    double wsum = 0;
    for (uint32_t i = 0; i < m->n_segs; i++) {
        segment_t *s = m->segs[i];
        if (!s || s->state == SEG_FREE)
            continue;
        if (s->state == SEG_RECOVERING) {
            out->recovering_segments++;
            continue;
        }
        out->mounted_segments++;
        mc_master_allocator_stats_t st;
        mc_master_allocator_stats(s->alloc, &st);
        wsum += st.fragmentation * (double)st.capacity;
    }
    out->fragmentation = out->total_capacity_bytes ? wsum / (double)out->total_capacity_bytes : 0;
    out->view_version = m->view_version;
    out->epoch = m->epoch;
    out->put_pool_bytes = m->pool_bytes;
    out->tasks_pending = m->n_task_pending;
    out->tasks_processing = m->n_task_processing;
    out->wal_records = m->wal.records;
    out->wal_bytes = m->wal.bytes;
    master_disk_metrics(m, out);
}

void mc_master_metrics_snapshot(mc_master_t *m, mc_master_metrics_t *out)
{
    pthread_mutex_lock(&m->snap_mu);
    *out = m->snap;
    pthread_mutex_unlock(&m->snap_mu);
}

/* Publishes the per-segment numbers (the segments counted in total_capacity()). On a failed
 * growth the previous list stays published. Caller holds snap_mu. */
static void publish_segments(mc_master_t *m)
{
    if (mc_array_reserve(&m->pub_segs, &m->cap_pub_segs, m->n_segs, 16) != MC_OK)
        return;
    size_t n = 0;
    for (uint32_t i = 0; i < m->n_segs; i++) {
        segment_t *s = m->segs[i];
        if (!s || !s->alloc || (s->state != SEG_MOUNTED && s->state != SEG_DRAINING))
            continue;
        mc_master_segment_metrics_t *p = &m->pub_segs[n++];
        snprintf(p->name, sizeof(p->name), "%s", s->name);
        p->capacity_bytes = mc_master_allocator_capacity(s->alloc);
        p->allocated_bytes = mc_master_allocator_used(s->alloc);
    }
    m->n_pub_segs = n;
}

mc_status_t mc_master_segment_metrics_snapshot(mc_master_t *m, mc_master_segment_metrics_t **out_p,
                                               size_t *n_p)
{
    *out_p = NULL;
    *n_p = 0;
    pthread_mutex_lock(&m->snap_mu);
    size_t n = m->n_pub_segs;
    mc_master_segment_metrics_t *out = NULL;
    if (n) {
        out = mc_malloc(n * sizeof(*out));
        if (out)
            memcpy(out, m->pub_segs, n * sizeof(*out));
    }
    pthread_mutex_unlock(&m->snap_mu);
    if (n && !out)
        return MC_ERR_NO_MEMORY;
    *out_p = out;
    *n_p = n;
    return MC_OK;
}

void mc_master_cron(mc_master_t *m)
{
    uint64_t now = master_now(m);
    /* O(objects) checks run at most every 100 ms */
    bool slow_tick = now - m->last_slow_tick_ms >= 100;
    if (slow_tick)
        m->last_slow_tick_ms = now;
    /* Client liveness: a client silent for client_ttl has its segments held (segment_hold_ms;
     * dropped at once without a hold, or when draining). */
    for (size_t i = 0; i < m->n_clients;) {
        client_t *c = &m->clients[i];
        if (now - c->last_ping_ms <= m->cfg.client_ttl_ms) {
            i++;
            continue;
        }
        if (!c->expired) {
            MC_LOG_WARN("master: client serial %u silent for %llu ms; %s its segments", c->serial,
                        (unsigned long long)(now - c->last_ping_ms),
                        m->cfg.segment_hold_ms ? "holding" : "unmounting");
            c->expired = true;
            c->greeted = false;
            master_disk_client_gone(m, c); /* its LOCAL_DISK replicas and tasks */
            uint32_t serial = c->serial;
            for (uint32_t id = 0; id < m->n_segs; id++) {
                segment_t *s = m->segs[id];
                if (!s || s->state == SEG_RECOVERING || s->owner_serial != serial)
                    continue;
                if (s->state == SEG_MOUNTED && m->cfg.segment_hold_ms)
                    seg_hold(m, id, now);
                else
                    seg_drop(m, id, true);
            }
            c = &m->clients[i]; /* seg_drop may have finished puts of this client */
        }
        /* Forget it once none of its puts is in flight (a PutEnd must still find it) and none
         * of its segments is held. */
        if (c->n_writing == 0 && !client_holds_segment(m, c->serial))
            m->clients[i] = m->clients[--m->n_clients];
        else
            i++;
    }
    /* Recovering segments whose owner did not come back in time, finished graceful unmounts. */
    for (uint32_t id = 0; id < m->n_segs; id++) {
        segment_t *s = m->segs[id];
        if (!s)
            continue;
        if (s->state == SEG_RECOVERING && now >= s->deadline_ms) {
            MC_LOG_WARN("master: segment '%s' was not re-mounted in time (%s); its objects are "
                        "lost", s->name, s->held ? "held for a silent owner" : "recovered");
            seg_drop(m, id, true);
        } else if (s->state == SEG_DRAINING && slow_tick && !seg_has_leases(m, id, now)) {
            seg_drop(m, id, true);
        }
    }
    /* Stuck puts: released (space freed) after put_start_release_timeout. */
    while (m->writing.head &&
           now - m->writing.head->t_lease >= m->cfg.put_start_release_timeout_ms) {
        obj_t *o = m->writing.head;
        MC_LOG_WARN("master: releasing put of '%.*s' stuck for %llu ms", (int)o->klen,
                    obj_key(o), (unsigned long long)(now - o->t_lease));
        m->cnt.put_start_releases++;
        obj_destroy(m, o, false);
    }
    for (size_t i = 0; i < m->n_disc;) {
        if (now >= m->disc[i].release_ms)
            discard_free(m, i);
        else
            i++;
    }
    master_pool_cron(m, now);
    master_tasks_cron(m, now);
    /* Watermark eviction. */
    uint64_t used = 0, cap = total_capacity(m, &used);
    evict_sync(m, (uint64_t)(m->cfg.eviction_high_watermark_ratio * (double)cap));
    if (cap && (m->evict_pending ||
                (double)used > m->cfg.eviction_high_watermark_ratio * (double)cap)) {
        /* bounded scan per tick: a cron must not stall the loop when the first victims are all
         * leased; the next tick continues (a failing PutStart scans without bound) */
        evict_bytes(m, (uint64_t)(m->cfg.eviction_ratio * (double)cap), 1u << 16);
        m->evict_pending = false;
    }
    master_wal_cron(m);
    if (m->ev_waiters_fn)
        m->ev_waiters_fn(m, false);
    mc_master_metrics_t snap;
    mc_master_metrics_now(m, &snap);
    pthread_mutex_lock(&m->snap_mu);
    m->snap = snap;
    publish_segments(m);
    master_tenants_publish(m);
    pthread_mutex_unlock(&m->snap_mu);
}

uint64_t mc_master_lease_ttl_ms(const mc_master_t *m) { return m->cfg.default_kv_lease_ttl_ms; }

void mc_master_view(const mc_master_t *m, uint64_t *view_version_p, uint64_t *epoch_p)
{
    *view_version_p = m->view_version;
    *epoch_p = m->epoch;
}

/* ------------------------------------------------------------------ for master_tasks.c */

uint64_t master_rand(mc_master_t *m) { return rnd(m); }

segment_t *master_seg_named(mc_master_t *m, const char *name, uint32_t *id_p)
{
    return seg_by_name(m, name, id_p);
}

client_t *master_client_find(mc_master_t *m, const uint8_t id[16]) { return client_find(m, id); }

void master_obj_lease_read(mc_master_t *m, obj_t *o, uint64_t now) { obj_lease_read(m, o, now); }

void master_rep_free_block(mc_master_t *m, obj_rep_t *r) { rep_free_block(m, r); }

void master_rep_release_after_leases(mc_master_t *m, const obj_t *o, obj_rep_t *r)
{
    uint64_t now = master_now(m), floor = obj_grant_floor(o);
    if (o->t_lease > floor)
        floor = o->t_lease;
    rep_release(m, r, floor, now);
}

void master_fill_rep(mc_master_t *m, const obj_t *o, const obj_rep_t *r, mc_master_replica_t *out,
                     int status)
{
    fill_rep(m, o, r, out, status);
}

obj_t *master_obj_grow(mc_master_t *m, obj_t *o, uint32_t cap)
{
    obj_t *n = mc_malloc(sizeof(obj_t) + cap * sizeof(obj_rep_t) + o->klen);
    if (!n)
        return NULL;
    memcpy(n, o, sizeof(obj_t));
    memcpy(n->rep, o->rep, o->n_rep * sizeof(obj_rep_t));
    n->rep_cap = (uint8_t)cap;
    memcpy(obj_key(n), obj_key(o), o->klen);
    for (obj_t **pp = &m->buckets[o->hash & (m->n_buckets - 1)]; *pp; pp = &(*pp)->hnext) {
        if (*pp == o) {
            *pp = n;
            break;
        }
    }
    /* the policy weighs an object by size x rep_cap: it leaves with the old weight and comes
     * back with the new one (as a fresh entry) */
    readable_unlink(m, o, 0);
    memset(&n->node, 0, sizeof(n->node));
    master_readable_link(m, n);
    mc_free(o);
    return n;
}

mc_status_t master_tenant_admit_bytes(mc_master_t *m, const char *key, size_t klen,
                                      uint64_t bytes)
{
    return m->cfg.multi_tenants ? master_tenant_admit(m, key, klen, bytes, evict_tenant) : MC_OK;
}
