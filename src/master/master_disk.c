/* The master's record of LOCAL_DISK replicas (the SSD tier; docs/internals/disk-tier.md,
 * "Master").
 *
 * A LOCAL_DISK replica lives on a storage server's own disk (mc_disk) and is served by that
 * server. The master keeps them in a table of their own, beside the memory objects, so that the
 * memory tier's rules (placement, leases, eviction, WAL) stay as they are:
 *
 *   - a disk entry (dobj_t) per key: QUEUED (an offload task the owner has not confirmed yet)
 *     or STORED (confirmed by NotifyOffloadSuccess: readable);
 *   - gets prefer memory: the disk entry is answered only when the key has no readable memory
 *     replica (absent, evicted, or on unreachable segments);
 *   - a memory eviction keeps the disk entry (the object lives on, disk only); a remove or an
 *     upsert drops it and queues a removal for the owner (its copy is stale);
 *   - a client that goes silent (client_ttl) or unmounts its disk loses its entries;
 *   - promotion on hit: disk hits feed a count-min sketch; at the threshold a STORED entry is
 *     queued (again in its owner's task queue) for a promotion, whose memory copy the owner
 *     writes through an ordinary WRITING object (master_put_start with promote);
 *   - each owner's task queue holds QUEUED entries (offloads), DROP entries (removals: no
 *     longer in the table) and STORED ones (promotions), handed out oldest first.
 *
 * Tombstones (dtomb_t): a removal of a stored copy is remembered by (key, size, checksum) until
 * the owner acknowledges it (its next OffloadObjectHeartbeat after the one that handed the
 * removal out: the storage server runs a batch's tasks before it beats again), a later value of
 * the key is committed or placed on a disk, or MC_MASTER_DISK_TOMBSTONES_MAX newer ones push it
 * out. A re-registration of a copy that matches one answers OBJECT_NOT_FOUND (the server
 * removes it): a removal issued while the owner was down, killed or restarting under a new
 * client id does not come back.
 *
 * In the WAL (docs/internals/recovery.md): disk mounts and unmounts, STORED entries (confirmed
 * and dropped) and tombstones (added and gone), each logged where it changes, so that a
 * restarted master or a standby taking over serves disk hits at once and still refuses the
 * removed copies. QUEUED entries, task queues, promotion state and the heartbeat counts are
 * not logged. A recovered client (disk_recovered) is served but must mount its disk again
 * within client_ttl; it then re-registers what its disk holds (the reconciliation): each mount
 * starts a round (client_t.disk_round), every entry the owner re-registers or confirms is
 * stamped with it, and the end marker of its re-registration (mc_master_disk_reregistered)
 * drops the owner's stored entries left unstamped (its disk lost them while the master was
 * down or since: file deleted, bucket evicted, disk replaced).
 *
 * Per-client state (mounted, offload endpoint, capacity, task queue) lives in client_t. */
#include "master/master_int.h"

#include "common/log.h"
#include "common/alloc.h"

#include <string.h>

enum { D_QUEUED = 1, D_STORED = 2, D_DROP = 3 };

/* An entry QUEUED for eviction's sake holds its memory object back from eviction this long;
 * after that eviction goes ahead (the owner was too slow). */
#define OFFLOAD_DEFER_MS 10000

struct dobj {
    struct dobj *hnext;      /* table chain (QUEUED, STORED) */
    struct dobj *qnext;      /* owner's task queue (QUEUED, DROP, STORED to promote) */
    uint64_t size, checksum;
    uint64_t t_queued;       /* QUEUED: when */
    uint32_t hash, owner;    /* owner: client serial */
    uint32_t round;          /* STORED: the owner's disk_round when it last confirmed or
                                re-registered it (0: recovered from the WAL) */
    uint64_t t_promote;      /* PROMO_HANDED: when */
    uint16_t klen;
    uint8_t state;
    uint8_t promote;         /* STORED: PROMO_* */
    bool in_queue;
    char key[];
};

enum { PROMO_NONE = 0, PROMO_QUEUED = 1, PROMO_HANDED = 2 };
/* A promotion handed out and neither finished nor failed may be queued again after this. */
#define PROMOTE_RETRY_MS 60000
/* Count-min sketch of disk hits: SK_ROWS rows of 2^SK_BITS 8-bit counters; every
 * SK_AGE_ADDS additions halve them all (recent hits count). */
#define SK_ROWS 4
#define SK_BITS 14
#define SK_AGE_ADDS (10u << SK_BITS)

typedef struct dtomb {
    struct dtomb *hnext;         /* m->dtbuckets chain */
    struct dtomb *prev, *next;   /* m->dt_head..dt_tail, oldest first */
    uint64_t size, checksum;     /* the removed copy */
    uint64_t beat;               /* handed: to owner, when its heartbeat count was beat */
    uint32_t hash, owner;
    uint16_t klen;
    bool handed;
    char key[];
} dtomb_t;

#define DT_BUCKETS 4096u /* chains average MC_MASTER_DISK_TOMBSTONES_MAX / 4096 = 16 at most */

static client_t *client_by_serial(mc_master_t *m, uint32_t serial)
{
    for (size_t i = 0; i < m->n_clients; i++)
        if (m->clients[i].serial == serial)
            return &m->clients[i];
    return NULL;
}

static client_t *client_by_id(mc_master_t *m, const uint8_t id[16])
{
    for (size_t i = 0; i < m->n_clients; i++)
        if (memcmp(m->clients[i].id, id, 16) == 0)
            return &m->clients[i];
    return NULL;
}

static int dtable_grow(mc_master_t *m)
{
    uint64_t nb = m->n_dbuckets ? m->n_dbuckets * 2 : 1024;
    dobj_t **b = mc_calloc(nb, sizeof(*b));
    if (!b)
        return -1;
    for (uint64_t i = 0; i < m->n_dbuckets; i++) {
        dobj_t *d = m->dbuckets[i];
        while (d) {
            dobj_t *n = d->hnext;
            d->hnext = b[d->hash & (nb - 1)];
            b[d->hash & (nb - 1)] = d;
            d = n;
        }
    }
    mc_free(m->dbuckets);
    m->dbuckets = b;
    m->n_dbuckets = nb;
    return 0;
}

static dobj_t *dfind(mc_master_t *m, const char *key, size_t klen, uint32_t h)
{
    if (!m->n_dbuckets)
        return NULL;
    for (dobj_t *d = m->dbuckets[h & (m->n_dbuckets - 1)]; d; d = d->hnext)
        if (d->hash == h && d->klen == klen && memcmp(d->key, key, klen) == 0)
            return d;
    return NULL;
}

static dtomb_t *tfind(mc_master_t *m, const char *key, size_t klen, uint32_t h)
{
    if (!m->dtbuckets)
        return NULL;
    for (dtomb_t *t = m->dtbuckets[h % DT_BUCKETS]; t; t = t->hnext)
        if (t->hash == h && t->klen == klen && memcmp(t->key, key, klen) == 0)
            return t;
    return NULL;
}

/* True when records are being logged now (not while replaying, not without a WAL). */
static bool wal_live(const mc_master_t *m)
{
    return m->wal_on && !m->recovering;
}

static void dlog_key(mc_master_t *m, uint8_t type, const char *key, size_t klen)
{
    if (!wal_live(m))
        return;
    mc_wal_buf_t b = {0};
    mc_wal_put_str(&b, key, klen);
    master_wal_append(m, type, &b);
}

/* Payloads: DISK_MOUNT = client id[16] | u8 offloading | str endpoint; DISK_UNMOUNT = client
 * id[16]; DISK_PUT = owner id[16] | u64 size | u64 checksum | str key; DISK_TOMB = u64 size |
 * u64 checksum | str key; DISK_DROP, DISK_UNTOMB = str key. */
static void enc_disk_mount(mc_wal_buf_t *b, const client_t *c)
{
    mc_wal_put_bytes(b, c->id, 16);
    mc_wal_put_u8(b, c->disk_offloading);
    mc_wal_put_str(b, c->disk_endpoint, strlen(c->disk_endpoint));
}

static void enc_disk_put(mc_wal_buf_t *b, const client_t *owner, const dobj_t *d)
{
    mc_wal_put_bytes(b, owner->id, 16);
    mc_wal_put_u64(b, d->size);
    mc_wal_put_u64(b, d->checksum);
    mc_wal_put_str(b, d->key, d->klen);
}

static void enc_disk_tomb(mc_wal_buf_t *b, const dtomb_t *t)
{
    mc_wal_put_u64(b, t->size);
    mc_wal_put_u64(b, t->checksum);
    mc_wal_put_str(b, t->key, t->klen);
}

static void tfree(mc_master_t *m, dtomb_t *t)
{
    dlog_key(m, MC_WAL_DISK_UNTOMB, t->key, t->klen);
    dtomb_t **pp = &m->dtbuckets[t->hash % DT_BUCKETS];
    while (*pp != t)
        pp = &(*pp)->hnext;
    *pp = t->hnext;
    if (t->prev)
        t->prev->next = t->next;
    else
        m->dt_head = t->next;
    if (t->next)
        t->next->prev = t->prev;
    else
        m->dt_tail = t->prev;
    if (t->handed) {
        client_t *c = client_by_serial(m, t->owner);
        if (c && c->tombs_handed)
            c->tombs_handed--;
    }
    m->n_dtombs--;
    mc_free(t);
}

/* The key is live again (a value committed, or placed on a disk): its tombstone goes. */
static void tforget(mc_master_t *m, const char *key, size_t klen, uint32_t h)
{
    dtomb_t *t = tfind(m, key, klen, h);
    if (t)
        tfree(m, t);
}

/* Remembers the removal of a stored copy (key, size, checksum) owned by client serial owner
 * (replacing an older tombstone of the key); the oldest tombstone goes when the set is full.
 * Out of memory: not remembered (logged). */
static void tadd(mc_master_t *m, const char *key, size_t klen, uint32_t h, uint32_t owner,
                 uint64_t size, uint64_t checksum)
{
    tforget(m, key, klen, h);
    if (!m->dtbuckets && !(m->dtbuckets = mc_calloc(DT_BUCKETS, sizeof(*m->dtbuckets))))
        goto nomem;
    if (m->n_dtombs >= MC_MASTER_DISK_TOMBSTONES_MAX) {
        MC_LOG_WARN("master: %u disk removals not yet acknowledged; the oldest is forgotten "
                    "(a restarted storage server may re-register it)",
                    MC_MASTER_DISK_TOMBSTONES_MAX);
        tfree(m, m->dt_head);
    }
    dtomb_t *t = mc_calloc(1, sizeof(*t) + klen);
    if (!t)
        goto nomem;
    memcpy(t->key, key, klen);
    t->klen = (uint16_t)klen;
    t->hash = h;
    t->owner = owner;
    t->size = size;
    t->checksum = checksum;
    t->hnext = m->dtbuckets[t->hash % DT_BUCKETS];
    m->dtbuckets[t->hash % DT_BUCKETS] = t;
    t->prev = m->dt_tail;
    if (m->dt_tail)
        m->dt_tail->next = t;
    else
        m->dt_head = t;
    m->dt_tail = t;
    m->n_dtombs++;
    if (wal_live(m)) {
        mc_wal_buf_t b = {0};
        enc_disk_tomb(&b, t);
        master_wal_append(m, MC_WAL_DISK_TOMB, &b);
    }
    return;
nomem:
    MC_LOG_WARN("master: no memory for a disk removal's tombstone");
}

/* Tombstone t is (again) waiting for c's next heartbeat. */
static void thand(mc_master_t *m, dtomb_t *t, client_t *c)
{
    if (t->handed) {
        client_t *o = client_by_serial(m, t->owner);
        if (o && o->tombs_handed)
            o->tombs_handed--;
    }
    t->owner = c->serial;
    t->handed = true;
    t->beat = c->disk_beats;
    c->tombs_handed++;
}

/* c beat again: the removals handed to it before are done. */
static void tack(mc_master_t *m, client_t *c)
{
    for (dtomb_t *t = m->dt_head; t && c->tombs_handed;) {
        dtomb_t *n = t->next;
        if (t->handed && t->owner == c->serial && t->beat < c->disk_beats)
            tfree(m, t);
        t = n;
    }
}

/* Every change of d->promote goes through here (m->n_promoting counts those in flight). */
static void set_promote(mc_master_t *m, dobj_t *d, uint8_t v)
{
    m->n_promoting += (v != PROMO_NONE) - (d->promote != PROMO_NONE);
    d->promote = v;
}

static void dunlink(mc_master_t *m, dobj_t *d)
{
    set_promote(m, d, PROMO_NONE); /* out of the table: no promotion any more */
    dobj_t **pp = &m->dbuckets[d->hash & (m->n_dbuckets - 1)];
    while (*pp != d)
        pp = &(*pp)->hnext;
    *pp = d->hnext;
    m->n_dobjs--;
}

static void queue_push(client_t *c, dobj_t *d)
{
    d->qnext = NULL;
    d->in_queue = true;
    if (c->dq_tail)
        c->dq_tail->qnext = d;
    else
        c->dq_head = d;
    c->dq_tail = d;
    c->dq_n++;
}

/* Stored bytes and objects of a client's disk (its STORED entries). */
static void charge(client_t *c, const dobj_t *d, int sign)
{
    if (!c || d->state != D_STORED)
        return;
    c->disk_bytes += sign > 0 ? d->size : -d->size;
    c->disk_objects += sign > 0 ? 1 : -1;
}

/* Takes d out of the table; a STORED copy becomes a removal task for its owner (its bytes are
 * stale), a QUEUED one is dropped (the task finds nothing when handed out). */
static void ddrop(mc_master_t *m, dobj_t *d, bool tell_owner)
{
    client_t *c = client_by_serial(m, d->owner);
    dunlink(m, d);
    charge(c, d, -1);
    bool stored = d->state == D_STORED;
    if (stored)
        dlog_key(m, MC_WAL_DISK_DROP, d->key, d->klen);
    if (stored && tell_owner)
        tadd(m, d->key, d->klen, d->hash, d->owner, d->size, d->checksum);
    d->state = D_DROP;
    if (d->in_queue)
        return; /* freed when the queue hands it out */
    if (stored && tell_owner && c && c->disk_mounted && c->dq_n < m->cfg.offloading_queue_limit) {
        queue_push(c, d);
        return;
    }
    mc_free(d);
}

static dobj_t *dnew(mc_master_t *m, const char *key, size_t klen, uint32_t h, uint32_t owner)
{
    if (m->n_dobjs >= m->n_dbuckets && dtable_grow(m) != 0)
        return NULL;
    tforget(m, key, klen, h);
    dobj_t *d = mc_calloc(1, sizeof(*d) + klen);
    if (!d)
        return NULL;
    memcpy(d->key, key, klen);
    d->klen = (uint16_t)klen;
    d->hash = h;
    d->owner = owner;
    d->hnext = m->dbuckets[h & (m->n_dbuckets - 1)];
    m->dbuckets[h & (m->n_dbuckets - 1)] = d;
    m->n_dobjs++;
    return d;
}

/* The client that owns the memory segment of o's first replica, if its disk takes offloads. */
static client_t *offload_target(mc_master_t *m, const obj_t *o)
{
    for (uint32_t i = 0; i < o->n_rep; i++) {
        segment_t *s = master_seg_slot(m, o->rep[i].seg);
        if (!s || s->state == SEG_RECOVERING)
            continue;
        client_t *c = client_by_serial(m, s->owner_serial);
        if (c && !c->expired && c->disk_mounted && c->disk_offloading && !c->disk_recovered)
            return c;
    }
    return NULL;
}

/* Whether QUEUED entry d is still waited for at now. now may be older than t_queued: an
 * eviction pass reads the clock once and queues offloads (stamped with a later reading) as it
 * goes, so `now - t_queued` would wrap and call an entry queued a moment ago overdue (and its
 * victim would leave memory without its copy). */
static bool queued_recently(const dobj_t *d, uint64_t now)
{
    return now < d->t_queued + OFFLOAD_DEFER_MS;
}

/* Queues an offload of o to the owner of its memory segment; true if queued now. */
static bool queue_offload(mc_master_t *m, obj_t *o)
{
    client_t *c = offload_target(m, o);
    if (!c || c->dq_n >= m->cfg.offloading_queue_limit)
        return false;
    dobj_t *d = dnew(m, obj_key(o), o->klen, o->hash, c->serial);
    if (!d)
        return false;
    d->state = D_QUEUED;
    d->size = o->size;
    d->checksum = o->checksum;
    d->t_queued = master_now(m);
    queue_push(c, d);
    m->cnt.offload_queued++;
    return true;
}

void master_disk_put_end(mc_master_t *m, obj_t *o)
{
    if (!m->cfg.enable_offload)
        return;
    tforget(m, obj_key(o), o->klen, o->hash);
    dobj_t *d = dfind(m, obj_key(o), o->klen, o->hash);
    if (d && d->state == D_STORED && d->size == o->size && d->checksum == o->checksum) {
        if (d->promote) { /* a promotion's memory copy: both tiers hold the value now */
            set_promote(m, d, PROMO_NONE);
            m->cnt.promotions++;
        }
        return;
    }
    if (d)
        ddrop(m, d, true); /* an older value's copy */
    if (!m->cfg.offload_on_evict)
        queue_offload(m, o);
}

static uint32_t sk_index(uint32_t h, int row)
{
    static const uint64_t mul[SK_ROWS] = {0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full,
                                          0x165667b19e3779f9ull, 0xd6e8feb86659fd93ull};
    return (uint32_t)((((uint64_t)h + 1) * mul[row]) >> (64 - SK_BITS));
}

/* Adds one hit of hash h; returns the sketch's estimate after it. */
static uint32_t sk_add(mc_master_t *m, uint32_t h)
{
    if (!m->dsketch && !(m->dsketch = mc_calloc(SK_ROWS, 1u << SK_BITS)))
        return 0;
    if (++m->dsketch_adds >= SK_AGE_ADDS) {
        for (size_t i = 0; i < (size_t)SK_ROWS << SK_BITS; i++)
            m->dsketch[i] >>= 1;
        m->dsketch_adds = 0;
    }
    uint32_t est = UINT32_MAX;
    for (int r = 0; r < SK_ROWS; r++) {
        uint8_t *c = &m->dsketch[((size_t)r << SK_BITS) + sk_index(h, r)];
        if (*c < UINT8_MAX)
            (*c)++;
        if (*c < est)
            est = *c;
    }
    return est;
}

void master_disk_hit(mc_master_t *m, const char *key, size_t klen, uint32_t h)
{
    if (!m->cfg.promotion_on_hit)
        return;
    uint32_t est = sk_add(m, h);
    dobj_t *d = dfind(m, key, klen, h);
    if (!d || d->state != D_STORED || est < m->cfg.promotion_admission_threshold)
        return;
    if (d->promote == PROMO_NONE && m->n_promoting >= m->cfg.promotion_queue_limit)
        return;
    uint64_t now = master_now(m);
    if (d->promote == PROMO_QUEUED ||
        (d->promote == PROMO_HANDED && now < d->t_promote + PROMOTE_RETRY_MS))
        return;
    client_t *c = client_by_serial(m, d->owner);
    if (!c || d->in_queue || c->dq_n >= m->cfg.offloading_queue_limit)
        return;
    set_promote(m, d, PROMO_QUEUED);
    queue_push(c, d);
    m->cnt.promotions_queued++;
}

/* Victims one eviction pass may hold for their offload (--offload_cap_ratio). */
static uint64_t offload_cap(const mc_master_t *m)
{
    return (uint64_t)(m->cfg.offload_cap_ratio * (double)m->cfg.offloading_queue_limit);
}

bool master_disk_offload_ahead(mc_master_t *m, obj_t *o, uint64_t now, uint64_t *held)
{
    if (*held >= offload_cap(m))
        return false;
    dobj_t *d = dfind(m, obj_key(o), o->klen, o->hash);
    if (d) {
        *held += d->state == D_QUEUED && queued_recently(d, now);
        return true;
    }
    client_t *c = offload_target(m, o);
    if (!c || (m->cfg.offload_admission == MC_MASTER_ADMIT_REUSED && !(o->flags & OF_REUSED)))
        return true;
    if (c->dq_n >= m->cfg.offloading_queue_limit || !queue_offload(m, o))
        return false;
    (*held)++;
    return true;
}

int master_disk_defer_evict(mc_master_t *m, obj_t *o, uint64_t now, uint64_t *deferred)
{
    if (!m->cfg.enable_offload)
        return DISK_EVICT;
    dobj_t *d = dfind(m, obj_key(o), o->klen, o->hash);
    if (d && d->state == D_QUEUED && queued_recently(d, now)) {
        /* held until written; on-evict: part of the pass's cap, so that the victims written
         * ahead of their eviction (in memory and on disk at once) stay within it */
        *deferred += m->cfg.offload_on_evict;
        return DISK_HOLD;
    }
    if (d || !m->cfg.offload_on_evict)
        return DISK_EVICT; /* on disk already (or its offload is overdue) */
    client_t *c = offload_target(m, o);
    if (!c)
        return DISK_EVICT; /* its owner has no disk taking offloads */
    if (m->cfg.offload_admission == MC_MASTER_ADMIT_REUSED && !(o->flags & OF_REUSED))
        return DISK_EVICT; /* not admitted: never read since its put */
    if (*deferred >= offload_cap(m) || c->dq_n >= m->cfg.offloading_queue_limit) {
        if (!m->cfg.offload_force_evict)
            return DISK_STOP; /* wait for the queued offloads rather than lose this one */
        m->cnt.offload_skipped++; /* evicted from memory only: the tier lost it */
        return DISK_EVICT;
    }
    if (!queue_offload(m, o)) {
        m->cnt.offload_skipped++; /* no memory for the entry */
        return DISK_EVICT;
    }
    (*deferred)++;
    return DISK_HOLD;
}

void master_disk_key_gone(mc_master_t *m, const char *key, size_t klen, uint32_t h)
{
    dobj_t *d = dfind(m, key, klen, h);
    if (d)
        ddrop(m, d, true);
}

bool master_disk_has(mc_master_t *m, const char *key, size_t klen, uint32_t h)
{
    dobj_t *d = dfind(m, key, klen, h);
    if (!d || d->state != D_STORED)
        return false;
    client_t *c = client_by_serial(m, d->owner);
    return c && !c->expired && c->disk_mounted;
}

bool master_disk_replica(mc_master_t *m, const char *key, size_t klen, uint32_t h,
                         mc_master_replica_t *out, uint64_t *size_p, uint64_t *checksum_p)
{
    if (!master_disk_has(m, key, klen, h))
        return false;
    dobj_t *d = dfind(m, key, klen, h);
    client_t *c = client_by_serial(m, d->owner);
    if (out) {
        memset(out, 0, sizeof(*out));
        out->type = MC_MASTER_REPLICA_LOCAL_DISK;
        out->segment_name = "";
        out->endpoint = c->disk_endpoint;
        out->client_id = c->id;
        out->size = d->size;
        out->status = 2;
    }
    if (size_p)
        *size_p = d->size;
    if (checksum_p)
        *checksum_p = d->checksum;
    return true;
}

/* Every entry of client serial goes (silence, disk unmount); its queue is freed. */
void master_disk_client_gone(mc_master_t *m, client_t *c)
{
    if (!c->disk_mounted && !c->dq_head)
        return;
    if (c->disk_mounted && wal_live(m)) {
        mc_wal_buf_t b = {0};
        mc_wal_put_bytes(&b, c->id, 16);
        master_wal_append(m, MC_WAL_DISK_UNMOUNT, &b);
    }
    for (uint64_t b = 0; b < m->n_dbuckets; b++) {
        for (dobj_t *d = m->dbuckets[b]; d;) {
            dobj_t *n = d->hnext;
            if (d->owner == c->serial) {
                dunlink(m, d);
                d->state = D_DROP;
                if (!d->in_queue)
                    mc_free(d);
            }
            d = n;
        }
    }
    for (dobj_t *d = c->dq_head; d;) {
        dobj_t *n = d->qnext;
        if (d->state == D_DROP)
            mc_free(d);
        else
            d->in_queue = false; /* cannot happen: every entry of c was dropped above */
        d = n;
    }
    c->dq_head = c->dq_tail = NULL;
    c->dq_n = 0;
    c->disk_mounted = c->disk_offloading = c->disk_recovered = false;
    c->disk_bytes = c->disk_objects = 0;
    /* its unacknowledged tombstones stay (it may come back under another id) */
    for (dtomb_t *t = m->dt_head; t && c->tombs_handed; t = t->next)
        if (t->handed && t->owner == c->serial) {
            t->handed = false;
            c->tombs_handed--;
        }
    mc_free(c->disk_endpoint);
    c->disk_endpoint = NULL;
    m->view_version++;
}

uint64_t master_disk_remove_where(mc_master_t *m,
                                  bool (*match)(void *arg, const char *key, size_t klen),
                                  void *arg)
{
    uint64_t n = 0;
    for (uint64_t b = 0; b < m->n_dbuckets; b++) {
        for (dobj_t *d = m->dbuckets[b]; d;) {
            dobj_t *next = d->hnext;
            if (d->state == D_STORED && !master_obj_find(m, d->key, d->klen, d->hash) &&
                match(arg, d->key, d->klen)) {
                ddrop(m, d, true);
                n++;
            }
            d = next;
        }
    }
    return n;
}

void master_disk_free(mc_master_t *m)
{
    for (size_t i = 0; i < m->n_clients; i++)
        master_disk_client_gone(m, &m->clients[i]);
    while (m->dt_head)
        tfree(m, m->dt_head);
    mc_free(m->dtbuckets);
    m->dtbuckets = NULL;
    mc_free(m->dbuckets);
    m->dbuckets = NULL;
    m->n_dbuckets = 0;
    mc_free(m->dsketch);
    m->dsketch = NULL;
}

/* ------------------------------------------------------------------ WAL */

int master_disk_replay(mc_master_t *m, uint8_t type, mc_wal_rd_t *r)
{
    if (!m->cfg.enable_offload)
        return 0; /* a master without the tier ignores its records */
    const uint8_t *id = NULL;
    uint64_t size = 0, sum = 0;
    uint8_t offloading = 0;
    if (type == MC_WAL_DISK_MOUNT || type == MC_WAL_DISK_UNMOUNT || type == MC_WAL_DISK_PUT)
        id = mc_wal_get_bytes(r, 16);
    if (type == MC_WAL_DISK_MOUNT)
        offloading = mc_wal_get_u8(r);
    if (type == MC_WAL_DISK_PUT || type == MC_WAL_DISK_TOMB) {
        size = mc_wal_get_u64(r);
        sum = mc_wal_get_u64(r);
    }
    size_t kl = 0;
    const char *str = type == MC_WAL_DISK_UNMOUNT ? "" : mc_wal_get_str(r, &kl);
    if (r->err)
        return 0; /* malformed: skipped */
    if (type == MC_WAL_DISK_MOUNT) {
        if (kl == 0 || kl >= MC_MASTER_NAME_MAX)
            return 0;
        client_t *c = master_client_touch(m, id, NULL);
        char *ep = c ? mc_strndup(str, kl) : NULL;
        if (!ep)
            return 1;
        mc_free(c->disk_endpoint);
        c->disk_endpoint = ep;
        c->disk_mounted = c->disk_recovered = true;
        c->disk_offloading = offloading != 0;
        return 0;
    }
    if (type == MC_WAL_DISK_UNMOUNT) {
        client_t *c = client_by_id(m, id);
        if (c)
            master_disk_client_gone(m, c);
        return 0;
    }
    if (kl == 0 || kl > MASTER_KEY_MAX)
        return 0;
    uint32_t h = master_key_hash(str, kl);
    dobj_t *d = dfind(m, str, kl, h);
    switch (type) {
    case MC_WAL_DISK_PUT: {
        client_t *c = client_by_id(m, id);
        if (!c || !c->disk_mounted)
            return 0;
        if (d)
            ddrop(m, d, false); /* replaced (its tombstone, if any, has its own record) */
        if (!(d = dnew(m, str, kl, h, c->serial)))
            return 1;
        d->size = size;
        d->checksum = sum;
        d->state = D_STORED;
        charge(c, d, +1);
        return 0;
    }
    case MC_WAL_DISK_DROP:
        if (d)
            ddrop(m, d, false);
        return 0;
    case MC_WAL_DISK_TOMB:
        tadd(m, str, kl, h, 0, size, sum); /* handed to nobody: waits for a re-registration */
        return 0;
    default: /* MC_WAL_DISK_UNTOMB */
        tforget(m, str, kl, h);
        return 0;
    }
}

void master_disk_replay_finish(mc_master_t *m, uint64_t now)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n_clients; i++)
        if (m->clients[i].disk_recovered) {
            m->clients[i].last_ping_ms = now;
            n++;
        }
    if (n || m->n_dtombs)
        MC_LOG_INFO("master: recovered %zu local disks with %llu entries and %llu tombstones; "
                    "their owners mount them again within client_ttl",
                    n, (unsigned long long)m->n_dobjs, (unsigned long long)m->n_dtombs);
}

/* The disk state as records (fork child of a snapshot, read only): mounted disks, stored
 * entries, tombstones oldest first. */
int master_disk_snapshot(mc_master_t *m, master_snap_t *s)
{
    int bad = 0;
    for (size_t i = 0; i < m->n_clients && !bad; i++) {
        const client_t *c = &m->clients[i];
        if (!c->disk_mounted)
            continue;
        enc_disk_mount(master_snap_rec(s), c);
        bad |= master_snap_append(s, MC_WAL_DISK_MOUNT);
    }
    for (uint64_t k = 0; k < m->n_dbuckets && !bad; k++)
        for (const dobj_t *d = m->dbuckets[k]; d && !bad; d = d->hnext) {
            const client_t *c = client_by_serial(m, d->owner);
            if (d->state != D_STORED || !c || !c->disk_mounted)
                continue;
            enc_disk_put(master_snap_rec(s), c, d);
            bad |= master_snap_append(s, MC_WAL_DISK_PUT);
        }
    for (const dtomb_t *t = m->dt_head; t && !bad; t = t->next) {
        enc_disk_tomb(master_snap_rec(s), t);
        bad |= master_snap_append(s, MC_WAL_DISK_TOMB);
    }
    return bad;
}

/* ------------------------------------------------------------------ the RPCs */

static bool endpoint_ok(const char *s)
{
    return s && s[0] && strlen(s) < MC_MASTER_NAME_MAX;
}

mc_status_t mc_master_mount_local_disk(mc_master_t *m, const uint8_t cid[16],
                                       bool enable_offloading, const char *endpoint)
{
    if (!m->cfg.enable_offload)
        return MC_ERR_UNABLE_OFFLOAD;
    if (!endpoint_ok(endpoint))
        return MC_ERR_INVALID_PARAMS;
    bool was_new = false;
    client_t *c = master_client_touch(m, cid, &was_new);
    if (!c)
        return MC_ERR_NO_MEMORY;
    char *ep = mc_strdup(endpoint);
    if (!ep)
        return MC_ERR_NO_MEMORY;
    mc_free(c->disk_endpoint);
    c->disk_endpoint = ep;
    c->disk_mounted = true;
    c->disk_offloading = enable_offloading;
    c->disk_recovered = false; /* its entries from the WAL are its own again */
    c->disk_round++;           /* a new re-registration: its entries must be named again */
    c->greeted = true;
    if (wal_live(m)) {
        mc_wal_buf_t b = {0};
        enc_disk_mount(&b, c);
        master_wal_append(m, MC_WAL_DISK_MOUNT, &b);
    }
    MC_LOG_INFO("master: client serial %u mounted its local disk (endpoint %s, offloading %s)",
                c->serial, endpoint, enable_offloading ? "on" : "off");
    return MC_OK;
}

mc_status_t mc_master_unmount_local_disk(mc_master_t *m, const uint8_t cid[16])
{
    client_t *c = client_by_id(m, cid);
    if (!c || !c->disk_mounted)
        return MC_ERR_UNABLE_OFFLOADING;
    master_disk_client_gone(m, c);
    return MC_OK;
}

static client_t *disk_client(mc_master_t *m, const uint8_t cid[16])
{
    client_t *c = client_by_id(m, cid);
    if (!c || c->expired || !c->disk_mounted || c->disk_recovered)
        return NULL;
    c->last_ping_ms = master_now(m);
    return c;
}

mc_status_t mc_master_report_ssd_capacity(mc_master_t *m, const uint8_t cid[16], uint64_t bytes)
{
    if (!m->cfg.enable_offload)
        return MC_ERR_UNABLE_OFFLOAD;
    client_t *c = disk_client(m, cid);
    if (!c)
        return MC_ERR_UNABLE_OFFLOADING;
    c->disk_capacity = bytes;
    return MC_OK;
}

void mc_master_offload_tasks_free(mc_master_offload_tasks_t *t)
{
    if (!t)
        return;
    mc_free(t->items);
    mc_free(t->keys);
    memset(t, 0, sizeof(*t));
}

mc_status_t mc_master_offload_heartbeat(mc_master_t *m, const uint8_t cid[16],
                                        bool enable_offloading, uint32_t max,
                                        mc_master_offload_tasks_t *out)
{
    memset(out, 0, sizeof(*out));
    if (!m->cfg.enable_offload)
        return MC_ERR_UNABLE_OFFLOAD;
    client_t *c = disk_client(m, cid);
    if (!c)
        return MC_ERR_UNABLE_OFFLOADING;
    c->disk_offloading = enable_offloading;
    c->disk_beats++;
    if (c->tombs_handed)
        tack(m, c);
    if (max == 0 || max > MC_MASTER_OFFLOAD_BATCH_MAX)
        max = MC_MASTER_OFFLOAD_BATCH_MAX;
    uint32_t n = c->dq_n < max ? (uint32_t)c->dq_n : max;
    if (n == 0)
        return MC_OK;
    size_t kbytes = 0, i = 0;
    for (dobj_t *d = c->dq_head; d && i < n; d = d->qnext, i++)
        kbytes += d->klen;
    out->items = mc_calloc(n, sizeof(*out->items));
    out->keys = mc_malloc(kbytes ? kbytes : 1);
    if (!out->items || !out->keys) {
        mc_master_offload_tasks_free(out);
        return MC_ERR_NO_MEMORY;
    }
    size_t koff = 0;
    uint32_t promos = 0;
    for (i = 0; i < n; i++) {
        dobj_t *d = c->dq_head;
        /* promotions past the per-heartbeat cap, and all behind them, wait for the next one */
        if (d->state == D_STORED && promos++ >= m->cfg.promotion_max_per_heartbeat)
            break;
        c->dq_head = d->qnext;
        if (!c->dq_head)
            c->dq_tail = NULL;
        c->dq_n--;
        d->in_queue = false;
        mc_master_offload_task_t *t = &out->items[out->n];
        if (d->state == D_DROP) {
            t->remove = true;
            dtomb_t *tb = tfind(m, d->key, d->klen, d->hash);
            if (tb)
                thand(m, tb, c);
        } else if (d->state == D_STORED) { /* a promotion: the owner reads its disk */
            t->promote = true;
            t->size = d->size;
            t->checksum = d->checksum;
            set_promote(m, d, PROMO_HANDED);
            d->t_promote = master_now(m);
        } else {
            /* the bytes come from the owner's own memory replica; gone = nothing to do */
            obj_t *o = master_obj_find(m, d->key, d->klen, d->hash);
            const segment_t *s = NULL;
            uint32_t r = 0;
            for (; o && o->state == OBJ_READABLE && r < o->n_rep; r++) {
                s = master_seg_slot(m, o->rep[r].seg);
                if (s && s->owner_serial == c->serial && s->state != SEG_RECOVERING)
                    break;
                s = NULL;
            }
            if (!s || o->checksum != d->checksum) {
                dunlink(m, d);
                mc_free(d);
                m->cnt.offload_dropped++;
                continue;
            }
            t->segment_name = s->name;
            t->addr = mc_master_allocator_addr(s->alloc, o->rep[r].blk);
            t->size = d->size;
            t->checksum = d->checksum;
        }
        memcpy(out->keys + koff, d->key, d->klen);
        t->key = out->keys + koff;
        t->klen = d->klen;
        koff += d->klen;
        out->n++;
        if (d->state == D_DROP)
            mc_free(d);
    }
    return MC_OK;
}

mc_status_t mc_master_notify_offload_success(mc_master_t *m, const uint8_t cid[16],
                                             const char *key, size_t klen, uint64_t size,
                                             uint64_t checksum, bool recovered)
{
    if (!m->cfg.enable_offload)
        return MC_ERR_UNABLE_OFFLOAD;
    if (!key || klen == 0 || klen > MASTER_KEY_MAX)
        return MC_ERR_INVALID_KEY;
    if (size == 0)
        return MC_ERR_INVALID_PARAMS;
    client_t *c = disk_client(m, cid);
    if (!c)
        return MC_ERR_UNABLE_OFFLOADING;
    uint32_t h = master_key_hash(key, klen);
    obj_t *o = master_obj_find(m, key, klen, h);
    dobj_t *d = dfind(m, key, klen, h);
    bool same = d && d->state == D_STORED && d->owner == c->serial && d->size == size &&
                d->checksum == checksum;
    if (o && o->state != OBJ_READABLE) {
        if (same)
            d->round = c->disk_round; /* the caller keeps its copy (a promotion's source) */
        return MC_ERR_REPLICA_IS_NOT_READY;
    }
    /* a copy of another value than the committed one is stale: the caller removes it */
    if (o && (o->size != size || o->checksum != checksum))
        return MC_ERR_INVALID_PARAMS;
    if (same) {
        d->round = c->disk_round; /* repeated, or recovered from the WAL and still there */
        return MC_OK;
    }
    if (!recovered) {
        /* a finished task: only the task the master handed out counts (a key removed or
         * replaced meanwhile answers OBJECT_NOT_FOUND: the caller removes its copy) */
        if (!d || d->state != D_QUEUED || d->owner != c->serial || d->size != size ||
            d->checksum != checksum)
            return MC_ERR_OBJECT_NOT_FOUND;
    } else {
        /* re-registration of a copy found on disk: another server's confirmed copy of another
         * value is kept; otherwise the newest copy wins */
        if (d && !o && d->state == D_STORED && (d->size != size || d->checksum != checksum))
            return MC_ERR_OBJECT_ALREADY_EXISTS;
        /* a copy removed while its owner was away: removed again (acknowledged at c's next
         * heartbeat, which follows the removal) */
        dtomb_t *tb = !o && !d ? tfind(m, key, klen, h) : NULL;
        if (tb && tb->size == size && tb->checksum == checksum) {
            thand(m, tb, c);
            return MC_ERR_OBJECT_NOT_FOUND;
        }
        if (d) {
            ddrop(m, d, d->owner != c->serial);
            d = NULL;
        }
        d = dnew(m, key, klen, h, c->serial);
        if (!d)
            return MC_ERR_NO_MEMORY;
        d->size = size;
        d->checksum = checksum;
    }
    d->state = D_STORED;
    d->round = c->disk_round;
    charge(c, d, +1);
    if (wal_live(m)) {
        mc_wal_buf_t b = {0};
        enc_disk_put(&b, c, d);
        master_wal_append(m, MC_WAL_DISK_PUT, &b);
    }
    m->cnt.offload_succeeded++;
    return MC_OK;
}

mc_status_t mc_master_disk_reregistered(mc_master_t *m, const uint8_t cid[16],
                                        uint64_t *dropped_p)
{
    if (dropped_p)
        *dropped_p = 0;
    if (!m->cfg.enable_offload)
        return MC_ERR_UNABLE_OFFLOAD;
    client_t *c = disk_client(m, cid);
    if (!c)
        return MC_ERR_UNABLE_OFFLOADING;
    uint64_t n = 0;
    for (uint64_t b = 0; b < m->n_dbuckets; b++) {
        for (dobj_t *d = m->dbuckets[b]; d;) {
            dobj_t *next = d->hnext;
            if (d->owner == c->serial && d->state == D_STORED && d->round != c->disk_round) {
                /* a reader holding this replica gets OBJECT_NOT_FOUND from the owner, or bytes
                 * it hashes against this entry's checksum: never another value's bytes */
                ddrop(m, d, false);
                n++;
            }
            d = next;
        }
    }
    if (n) {
        m->cnt.disk_reconciled += n;
        MC_LOG_INFO("master: client serial %u re-registered its disk; %llu disk replicas it no "
                    "longer holds dropped", c->serial, (unsigned long long)n);
    }
    if (dropped_p)
        *dropped_p = n;
    return MC_OK;
}

mc_status_t mc_master_evict_disk_replica(mc_master_t *m, const uint8_t cid[16], const char *key,
                                         size_t klen)
{
    if (!m->cfg.enable_offload)
        return MC_ERR_UNABLE_OFFLOAD;
    if (!key || klen == 0 || klen > MASTER_KEY_MAX)
        return MC_ERR_INVALID_KEY;
    client_t *c = disk_client(m, cid);
    if (!c)
        return MC_ERR_UNABLE_OFFLOADING;
    dobj_t *d = dfind(m, key, klen, master_key_hash(key, klen));
    if (!d || d->owner != c->serial)
        return MC_ERR_OBJECT_NOT_FOUND;
    ddrop(m, d, false); /* the owner evicted it itself */
    m->cnt.disk_evicted++;
    return MC_OK;
}

/* The disk entry of a promotion cid was handed, or NULL. */
static dobj_t *promotion_of(mc_master_t *m, const uint8_t cid[16], const char *key, size_t klen)
{
    client_t *c = disk_client(m, cid);
    dobj_t *d = c && key && klen && klen <= MASTER_KEY_MAX
                    ? dfind(m, key, klen, master_key_hash(key, klen))
                    : NULL;
    return d && d->state == D_STORED && d->owner == c->serial && d->promote == PROMO_HANDED
               ? d
               : NULL;
}

mc_status_t mc_master_promotion_start(mc_master_t *m, const uint8_t cid[16], const char *key,
                                      size_t klen, mc_master_replica_t *reps, uint32_t *n_p)
{
    *n_p = 0;
    if (!m->cfg.enable_offload)
        return MC_ERR_UNABLE_OFFLOAD;
    if (!disk_client(m, cid))
        return MC_ERR_UNABLE_OFFLOADING;
    dobj_t *d = promotion_of(m, cid, key, klen);
    if (!d)
        return MC_ERR_OBJECT_NOT_FOUND;
    if (master_obj_find(m, key, klen, d->hash)) {
        set_promote(m, d, PROMO_NONE); /* memory holds it (again) already */
        return MC_ERR_OBJECT_ALREADY_EXISTS;
    }
    mc_master_retired_t none = {0};
    mc_status_t st = master_put_start(m, cid, key, klen, d->size, NULL, false, true, reps, n_p,
                                      &none, NULL);
    if (st != MC_OK)
        set_promote(m, d, PROMO_NONE);
    return st;
}

mc_status_t mc_master_promotion_end(mc_master_t *m, const uint8_t cid[16], const char *key,
                                    size_t klen, bool success)
{
    if (!m->cfg.enable_offload)
        return MC_ERR_UNABLE_OFFLOAD;
    if (!disk_client(m, cid))
        return MC_ERR_UNABLE_OFFLOADING;
    dobj_t *d = promotion_of(m, cid, key, klen);
    if (!d)
        return MC_ERR_OBJECT_NOT_FOUND;
    if (!success) {
        set_promote(m, d, PROMO_NONE);
        return mc_master_put_revoke(m, cid, key, klen);
    }
    mc_status_t st = mc_master_put_end(m, cid, key, klen, d->checksum); /* clears promote */
    if (st != MC_OK)
        set_promote(m, d, PROMO_NONE);
    return st;
}

void master_disk_metrics(mc_master_t *m, mc_master_metrics_t *out)
{
    out->disk_objects = 0;
    out->disk_bytes = out->disk_capacity_bytes = out->offload_queue_depth = 0;
    out->disk_clients = 0;
    out->promotion_in_flight = m->n_promoting;
    for (size_t i = 0; i < m->n_clients; i++) {
        const client_t *c = &m->clients[i];
        if (!c->disk_mounted)
            continue;
        out->disk_clients++;
        out->disk_objects += c->disk_objects;
        out->disk_bytes += c->disk_bytes;
        out->disk_capacity_bytes += c->disk_capacity;
        out->offload_queue_depth += c->dq_n;
    }
}
