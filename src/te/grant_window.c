/* A tcp server's granted ranges (grant_window.h). */
#include "te/grant_window.h"

#include "common/alloc.h"
#include "common/grant.h"

#include <string.h>

#define GW_R1_SHIFT 21  /* 2 MiB regions */
#define GW_R2_SHIFT 30  /* 1 GiB regions */
#define GW_REGIONS_MAX 512u /* a range touching more 2 MiB regions is indexed at 1 GiB ones;
                             * touching more 1 GiB ones (512 GiB), by its start only */
#define GW_RING_MIN 64u
#define GW_INDEX_MIN 256u
#define GW_SCAN 256u /* newest ranges looked at one by one before the indexes */

enum { K_START = 1, K_R1 = 2, K_R2 = 3 }; /* index key kinds */

struct mc_gw_range {
    uint64_t addr, end; /* [addr, end) */
    uint64_t expiry_ms; /* wall clock */
    uint8_t access;     /* MC_GRANT_READ / MC_GRANT_WRITE */
};

struct mc_gw_slot {
    uint64_t key;  /* the start address, or a region number */
    uint32_t head; /* first node of its chain + 1; 0 = empty slot */
    uint32_t kind;
};

/* A range's sequence number modulo 2^32: the kept ones span less than 2^32, and a dropped
 * one's node is gone (rebuilt away) long before its number could come round again. */
struct mc_gw_node {
    uint32_t seq;
    uint32_t next; /* next node + 1; 0 = end of chain */
};

/* The region entries of r: how many, and their kind (0: none). */
static uint32_t range_regions(const mc_gw_range_t *r, int *kind)
{
    *kind = 0;
    uint64_t n = ((r->end - 1) >> GW_R1_SHIFT) - (r->addr >> GW_R1_SHIFT) + 1;
    if (n <= GW_REGIONS_MAX) {
        *kind = K_R1;
        return (uint32_t)n;
    }
    n = ((r->end - 1) >> GW_R2_SHIFT) - (r->addr >> GW_R2_SHIFT) + 1;
    if (n <= GW_REGIONS_MAX) {
        *kind = K_R2;
        return (uint32_t)n;
    }
    return 0;
}

static uint32_t range_entries(const mc_gw_range_t *r)
{
    int kind;
    return 1 + range_regions(r, &kind);
}

/* The slot of (key, kind): its own, or the empty one where it would go. */
static mc_gw_slot_t *index_slot(const mc_gw_index_t *x, uint64_t key, int kind)
{
    uint64_t h = (key ^ ((uint64_t)kind << 60)) * 0x9E3779B97F4A7C15ull;
    uint32_t i = (uint32_t)(h >> 32) & (x->cap - 1);
    while (x->slot[i].head && (x->slot[i].key != key || x->slot[i].kind != (uint32_t)kind))
        i = (i + 1) & (x->cap - 1);
    return &x->slot[i];
}

/* Adds one entry; the index has room (a free slot and a free node). */
static void index_put(mc_gw_index_t *x, uint64_t key, int kind, uint64_t seq)
{
    mc_gw_slot_t *sl = index_slot(x, key, kind);
    if (!sl->head) {
        *sl = (mc_gw_slot_t){.key = key, .kind = (uint32_t)kind};
        x->used++;
    }
    x->node[x->node_used] = (mc_gw_node_t){.seq = (uint32_t)seq, .next = sl->head};
    sl->head = ++x->node_used;
}

static mc_gw_range_t *ring_at(const mc_grant_window_t *w, uint64_t seq)
{
    return &w->ring[seq & (w->ring_cap - 1)];
}

static void index_range(mc_grant_window_t *w, uint64_t seq)
{
    const mc_gw_range_t *r = ring_at(w, seq);
    index_put(&w->by_start, r->addr, K_START, seq);
    int kind;
    if (range_regions(r, &kind)) {
        int shift = kind == K_R1 ? GW_R1_SHIFT : GW_R2_SHIFT;
        for (uint64_t g = r->addr >> shift; g <= (r->end - 1) >> shift; g++)
            index_put(&w->by_region, g, kind, seq);
    }
}

/* Whether adding `more` entries (each possibly a new key) needs a rebuild first: past three
 * quarters of the slots, or out of nodes. */
static bool index_full(const mc_gw_index_t *x, uint64_t more)
{
    return 4 * ((uint64_t)x->used + more) > 3 * (uint64_t)x->cap ||
           (uint64_t)x->node_used + more > x->node_cap;
}

static void index_free(mc_gw_index_t *x)
{
    mc_free(x->slot);
    mc_free(x->node);
    *x = (mc_gw_index_t){0};
}

/* Empties x and makes room for n entries, at most half full (reusing its memory when the size
 * is the same). On failure x is left empty and unusable (cap 0). */
static bool index_reset(mc_gw_index_t *x, uint64_t n)
{
    uint32_t cap = GW_INDEX_MIN;
    while ((uint64_t)cap < 2 * n)
        cap *= 2;
    if (cap == x->cap) {
        memset(x->slot, 0, (size_t)cap * sizeof(*x->slot));
        x->used = x->node_used = 0;
        return true;
    }
    index_free(x);
    mc_gw_index_t y = {.cap = cap, .node_cap = cap};
    y.slot = mc_calloc(cap, sizeof(*y.slot));
    y.node = mc_malloc((size_t)cap * sizeof(*y.node));
    if (!y.slot || !y.node) {
        mc_free(y.slot);
        mc_free(y.node);
        return false;
    }
    *x = y;
    return true;
}

static uint64_t regions_of(const mc_grant_window_t *w, uint64_t from)
{
    uint64_t n = 0;
    for (uint64_t s = from; s < w->tail; s++) {
        int kind;
        n += range_regions(ring_at(w, s), &kind);
    }
    return n;
}

/* Indexes the ranges added since the last call: one by one while the indexes have room, else
 * by rebuilding them from every kept range (which also forgets the dropped ones' entries). On
 * failure (out of memory) the indexes are left empty and every lookup through them fails. */
static void index_pending(mc_grant_window_t *w)
{
    uint64_t from = w->indexed > w->head ? w->indexed : w->head;
    if (from == w->head || index_full(&w->by_start, w->tail - from) ||
        index_full(&w->by_region, regions_of(w, from))) {
        /* nothing indexed is kept any more, or no room: rebuild */
        from = w->head;
        bool ok_start = index_reset(&w->by_start, w->tail - w->head);
        if (!index_reset(&w->by_region, regions_of(w, w->head)) || !ok_start) {
            index_free(&w->by_start);
            index_free(&w->by_region);
            return;
        }
    }
    for (uint64_t s = from; s < w->tail; s++)
        index_range(w, s);
    w->indexed = w->tail;
}

/* Doubles the ring in place where the allocator can (a large block is remapped, not copied:
 * fresh pages cost a fault each), then moves the kept ranges whose slot changed: slot p of the
 * old ring becomes p or p + old cap, never a slot still to be moved. */
static bool ring_grow(mc_grant_window_t *w)
{
    uint32_t old = w->ring_cap, cap = old ? old * 2 : GW_RING_MIN;
    mc_gw_range_t *ring = mc_realloc(w->ring, (size_t)cap * sizeof(*ring));
    if (!ring)
        return false;
    for (uint64_t s = w->head; old && s < w->tail; s++)
        if ((s & (old - 1)) != (s & (cap - 1)))
            ring[s & (cap - 1)] = ring[s & (old - 1)];
    w->ring = ring;
    w->ring_cap = cap;
    return true;
}

bool mc_grant_window_add(mc_grant_window_t *w, uint64_t addr, uint64_t len, uint8_t access,
                         uint64_t expiry_ms, uint64_t now_ms)
{
    if (len == 0 || addr + len < addr || (access != MC_GRANT_READ && access != MC_GRANT_WRITE))
        return true; /* never a verified grant's range: nothing to keep */
    mc_gw_range_t r = {.addr = addr, .end = addr + len, .expiry_ms = expiry_ms, .access = access};
    uint32_t e = range_entries(&r);
    /* drop the oldest: past a cap, or expired (ranges come roughly in expiry order) */
    uint64_t scale = w->scale ? w->scale : 1;
    while (w->head < w->tail) {
        const mc_gw_range_t *old = ring_at(w, w->head);
        if (w->tail - w->head < scale * MC_GRANT_WINDOW_RANGES &&
            w->entries + e <= scale * MC_GRANT_WINDOW_ENTRIES && old->expiry_ms > now_ms)
            break;
        w->entries -= range_entries(old);
        w->head++;
    }
    if (w->tail - w->head == w->ring_cap && !ring_grow(w))
        return false;
    *ring_at(w, w->tail) = r;
    w->tail++;
    w->entries += e;
    return true;
}

/* A query: [addr, end) for access at now_ms; a match is remembered in *hint. */
typedef struct gw_query {
    uint64_t addr, end, now_ms;
    uint8_t access;
    uint64_t *hint;
} gw_query_t;

/* Whether kept range seq grants q; remembered as the hint. */
static bool range_allows(const mc_grant_window_t *w, uint64_t seq, const gw_query_t *q)
{
    if (seq < w->head || seq >= w->tail)
        return false;
    const mc_gw_range_t *r = ring_at(w, seq);
    if (r->access != q->access || q->addr < r->addr || q->end > r->end ||
        r->expiry_ms <= q->now_ms)
        return false;
    *q->hint = seq + 1;
    return true;
}

static bool index_allows(const mc_grant_window_t *w, const mc_gw_index_t *x, uint64_t key,
                         int kind, const gw_query_t *q)
{
    if (!x->cap)
        return false;
    for (uint32_t n = index_slot(x, key, kind)->head; n; n = x->node[n - 1].next) {
        uint64_t seq = w->head + (uint32_t)(x->node[n - 1].seq - (uint32_t)w->head);
        if (range_allows(w, seq, q))
            return true;
    }
    return false;
}

bool mc_grant_window_allows(mc_grant_window_t *w, uint64_t *hint, uint64_t addr, uint64_t len,
                            uint8_t access, uint64_t now_ms)
{
    gw_query_t q = {.addr = addr, .end = addr + len, .now_ms = now_ms, .access = access,
                    .hint = hint};
    if (q.end < addr)
        return false;
    /* the previous match, the range after it (a batch's requests follow its grant's ranges),
     * the newest ranges (a batch read right after its grant came), then the indexes */
    uint64_t h = *hint;
    if (h && (range_allows(w, h - 1, &q) || range_allows(w, h, &q)))
        return true;
    uint64_t stop = w->tail - w->head > GW_SCAN ? w->tail - GW_SCAN : w->head;
    for (uint64_t s = w->tail; s-- > stop;)
        if (range_allows(w, s, &q))
            return true;
    if (w->indexed < w->tail)
        index_pending(w);
    return index_allows(w, &w->by_start, addr, K_START, &q) ||
           index_allows(w, &w->by_region, addr >> GW_R1_SHIFT, K_R1, &q) ||
           index_allows(w, &w->by_region, addr >> GW_R2_SHIFT, K_R2, &q);
}

void mc_grant_window_set_scale(mc_grant_window_t *w, uint32_t scale)
{
    w->scale = scale ? scale : 1;
}

uint64_t mc_grant_window_next_seq(const mc_grant_window_t *w)
{
    return w->tail;
}

bool mc_grant_window_keeps_since(const mc_grant_window_t *w, uint64_t seq)
{
    return seq >= w->head;
}

uint32_t mc_grant_window_size(const mc_grant_window_t *w)
{
    return (uint32_t)(w->tail - w->head);
}

void mc_grant_window_clear(mc_grant_window_t *w)
{
    mc_free(w->ring);
    index_free(&w->by_start);
    index_free(&w->by_region);
    *w = (mc_grant_window_t)MC_GRANT_WINDOW_INIT;
}
