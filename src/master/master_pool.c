/* Put pools: blocks allocated ahead for create-once PutStarts on an HA leader in standbys mode
 * with logged PutStarts (docs/internals/ha.md, "Put pools").
 *
 * A PutStart whose allocation is a PUT_START record must not be answered before every member
 * of the in-sync set applied that record: a new leader that did not know the allocation could
 * lend the same bytes to another writer. A pool moves that wait off the put: its blocks were
 * allocated earlier and named in one RESERVE record, and become usable once the group commit
 * carrying that record is released (every member of S applied it, or, S empty, it is durable
 * in etcd). A PutStart served only from usable blocks is answered without waiting for its own
 * PUT_START record (a light reply): any later leader holds the block as reserved, claimed by
 * the PUT_START if that arrived (the pending put, as today), otherwise quarantined for
 * put_start_release_timeout after the takeover (master_wal.c, replay_finish).
 *
 * Caps: MASTER_POOLS_PER_SEG sizes per segment, each at most MASTER_POOL_MAX_BLOCKS blocks and
 * 1/MASTER_POOL_SEG_SHARE of the segment's capacity (sizes that allow fewer than
 * MASTER_POOL_MIN_BLOCKS blocks are not pooled); a pool is refilled (one RESERVE record) when
 * fewer than half its blocks are left, and only while the segment stays below the eviction high
 * watermark; it is given back (a RESERVE release record) when unused for MASTER_POOL_IDLE_MS,
 * when its segment stops being mounted, and before a PutStart that found no space evicts. Pool
 * blocks count as allocated space. Owner thread only. */
#include "master/master_int.h"

#include "common/alloc.h"

#include <string.h>

#define MASTER_POOL_SEG_SHARE 256  /* a pool holds at most capacity / 256 bytes */
#define MASTER_POOL_MIN_BLOCKS 8
#define MASTER_POOL_IDLE_MS 5000
#define MASTER_POOL_SWAP_IDLE_MS 1000 /* a full segment's least used pool makes room after */

bool master_pools_on(const mc_master_t *m)
{
    return m->ha_released && m->ha_log_on && m->wal_on && !m->recovering &&
           m->cfg.ha_log_put_starts;
}

static uint64_t round64(uint64_t size)
{
    return (size + MC_ALLOC_ALIGN - 1) & ~(uint64_t)(MC_ALLOC_ALIGN - 1);
}

static put_pool_t *pool_find(segment_t *s, uint64_t bsize)
{
    for (int i = 0; i < MASTER_POOLS_PER_SEG; i++)
        if (s->pools[i].size == bsize)
            return &s->pools[i];
    return NULL;
}

bool master_pool_take(mc_master_t *m, uint32_t seg, uint64_t size, uint32_t *blk_p)
{
    segment_t *s = m->segs[seg];
    put_pool_t *p = pool_find(s, round64(size));
    if (!p || p->head == p->n ||
        p->grp[p->head] > atomic_load_explicit(m->ha_released, memory_order_acquire))
        return false;
    *blk_p = p->blk[p->head++];
    if (p->head == p->n)
        p->head = p->n = 0;
    p->last_use_ms = master_now(m);
    m->pool_bytes -= p->size;
    m->cnt.put_pool_hits++;
    return true;
}

void master_pool_give_back(mc_master_t *m, uint32_t seg, uint32_t blk)
{
    master_wal_log_reserve(m, seg, mc_master_allocator_size(m->segs[seg]->alloc, blk), &blk, 1,
                           true);
}

/* Gives p's blocks back to seg's allocator (one RESERVE release record). */
static bool pool_release(mc_master_t *m, uint32_t seg, put_pool_t *p)
{
    uint32_t n = p->n - p->head;
    if (n) {
        master_wal_log_reserve(m, seg, p->size, p->blk + p->head, n, true);
        for (uint32_t i = p->head; i < p->n; i++)
            mc_master_allocator_free(m->segs[seg]->alloc, p->blk[i]);
        m->pool_bytes -= (uint64_t)n * p->size;
    }
    p->head = p->n = 0;
    return n > 0;
}

static void pool_clear(put_pool_t *p)
{
    mc_free(p->blk);
    mc_free(p->grp);
    memset(p, 0, sizeof(*p));
}

void master_pool_refill(mc_master_t *m, uint32_t seg, uint64_t size)
{
    segment_t *s = m->segs[seg];
    uint64_t bsize = round64(size), cap = mc_master_allocator_capacity(s->alloc);
    uint64_t want = cap / MASTER_POOL_SEG_SHARE / bsize;
    if (want > MASTER_POOL_MAX_BLOCKS)
        want = MASTER_POOL_MAX_BLOCKS;
    if (want < MASTER_POOL_MIN_BLOCKS || s->state != SEG_MOUNTED)
        return;
    uint64_t now = master_now(m);
    put_pool_t *p = pool_find(s, bsize);
    if (!p) { /* a free slot, else the least used one when idle for a while */
        put_pool_t *lru = NULL;
        for (int i = 0; i < MASTER_POOLS_PER_SEG && !p; i++) {
            put_pool_t *q = &s->pools[i];
            if (!q->size)
                p = q;
            else if (!lru || q->last_use_ms < lru->last_use_ms)
                lru = q;
        }
        if (!p) {
            if (now - lru->last_use_ms < MASTER_POOL_SWAP_IDLE_MS)
                return;
            pool_release(m, seg, lru);
            pool_clear(lru);
            p = lru;
        }
        p->size = bsize;
        p->last_use_ms = now;
    }
    uint32_t avail = p->n - p->head;
    if (avail >= want / 2)
        return;
    uint64_t add = want - avail;
    if ((double)(mc_master_allocator_used(s->alloc) + add * bsize) >
        m->cfg.eviction_high_watermark_ratio * (double)cap)
        return;
    if (p->cap < want) {
        uint32_t *b = mc_realloc(p->blk, want * sizeof(*b));
        if (b)
            p->blk = b;
        uint64_t *g = b ? mc_realloc(p->grp, want * sizeof(*g)) : NULL;
        if (!g)
            return; /* no memory: the puts go on without the pool */
        p->grp = g;
        p->cap = (uint32_t)want;
    }
    if (p->head) {
        memmove(p->blk, p->blk + p->head, avail * sizeof(*p->blk));
        memmove(p->grp, p->grp + p->head, avail * sizeof(*p->grp));
        p->head = 0;
        p->n = avail;
    }
    uint32_t from = p->n;
    uint64_t grp = m->ha_handed + 1; /* the group commit this record goes out with */
    while (p->n < want) {
        uint32_t b;
        if (mc_master_allocator_alloc(s->alloc, bsize, &b) != MC_OK)
            break;
        p->blk[p->n] = b;
        p->grp[p->n++] = grp;
    }
    if (p->n > from) {
        master_wal_log_reserve(m, seg, bsize, p->blk + from, p->n - from, false);
        m->pool_bytes += (uint64_t)(p->n - from) * bsize;
    }
}

bool master_pool_drain(mc_master_t *m, uint32_t seg)
{
    bool any = false;
    for (uint32_t id = seg == SEG_NONE ? 0 : seg; id < m->n_segs; id++) {
        segment_t *s = m->segs[id];
        for (int i = 0; s && s->alloc && i < MASTER_POOLS_PER_SEG; i++)
            any |= pool_release(m, id, &s->pools[i]);
        if (seg != SEG_NONE)
            break;
    }
    return any;
}

void master_pool_cron(mc_master_t *m, uint64_t now)
{
    if (!m->pool_bytes)
        return;
    for (uint32_t id = 0; id < m->n_segs; id++) {
        segment_t *s = m->segs[id];
        for (int i = 0; s && s->alloc && i < MASTER_POOLS_PER_SEG; i++) {
            put_pool_t *p = &s->pools[i];
            if (p->size &&
                (s->state != SEG_MOUNTED || now - p->last_use_ms >= MASTER_POOL_IDLE_MS)) {
                pool_release(m, id, p);
                pool_clear(p);
            }
        }
    }
}

void master_pool_forget(mc_master_t *m, segment_t *s)
{
    for (int i = 0; i < MASTER_POOLS_PER_SEG; i++) {
        put_pool_t *p = &s->pools[i];
        m->pool_bytes -= (uint64_t)(p->n - p->head) * p->size;
        pool_clear(p);
    }
}
