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
#define GW_SCAN 256u /* newest ranges looked at one by one before the indexes */
#define GW_GEN_MIN 1024u  /* ranges of the first generation; each next one doubles, up to */
#define GW_GEN_MAX MC_GRANT_WINDOW_RANGES

enum { K_START = 1, K_R1 = 2, K_R2 = 3 }; /* index key kinds */

struct mc_gw_range {
    uint64_t addr, end; /* [addr, end) */
    uint64_t expiry_ms; /* wall clock */
    uint8_t access;     /* MC_GRANT_READ / MC_GRANT_WRITE */
};

/* A key (start address or region number, with its kind) and the chain of its entries. */
typedef struct gw_slot {
    uint64_t key;
    uint32_t head; /* first node of its chain + 1; 0 = empty slot */
    uint32_t kind;
} gw_slot_t;

/* An entry: a range's sequence number modulo 2^32 (a generation's ranges span less than 2^32,
 * and it is freed before its numbers could come round again), newest first in its chain. */
typedef struct gw_node {
    uint32_t seq;
    uint32_t next; /* next node + 1; 0 = end of chain */
} gw_node_t;

/* A generation: the index of the ranges [first, first + n) (open addressing, linear probing,
 * at most half full: never rehashed). */
struct mc_gw_gen {
    uint64_t first;
    uint32_t n, max_ranges;       /* ranges indexed, and at most */
    uint32_t used, max_entries;   /* nodes used, and at most */
    uint32_t cap;                 /* slots: a power of 2, >= 2 max_entries */
    gw_slot_t *slot;
    gw_node_t *node;
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

static mc_gw_range_t *ring_at(const mc_grant_window_t *w, uint64_t seq)
{
    return &w->ring[seq & (w->ring_cap - 1)];
}

/* Where (key, kind) starts probing in g. */
static uint32_t gen_home(const mc_gw_gen_t *g, uint64_t key, int kind)
{
    uint64_t h = (key ^ ((uint64_t)kind << 60)) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32) & (g->cap - 1);
}

/* The slot of (key, kind) in g: its own, or the empty one where it would go. */
static gw_slot_t *gen_slot(const mc_gw_gen_t *g, uint64_t key, int kind)
{
    uint32_t i = gen_home(g, key, kind);
    while (g->slot[i].head && (g->slot[i].key != key || g->slot[i].kind != (uint32_t)kind))
        i = (i + 1) & (g->cap - 1);
    return &g->slot[i];
}

/* Adds one entry (g has room: see gen_has_room). */
static void gen_put(mc_gw_gen_t *g, uint64_t key, int kind, uint64_t seq)
{
    gw_slot_t *sl = gen_slot(g, key, kind);
    if (!sl->head)
        *sl = (gw_slot_t){.key = key, .kind = (uint32_t)kind};
    g->node[g->used] = (gw_node_t){.seq = (uint32_t)seq, .next = sl->head};
    sl->head = ++g->used;
}

static bool gen_has_room(const mc_gw_gen_t *g, uint32_t entries)
{
    return g->n < g->max_ranges && g->used + entries <= g->max_entries;
}

static size_t gen_slot_bytes(const mc_gw_gen_t *g)
{
    return (size_t)g->cap * sizeof(gw_slot_t);
}

static size_t gen_node_bytes(const mc_gw_gen_t *g)
{
    return (size_t)g->max_entries * sizeof(gw_node_t);
}

/* Frees g's tables (g itself is the caller's). */
static void gen_free_tables(mc_gw_gen_t *g)
{
    mc_pages_free(g->slot, gen_slot_bytes(g));
    mc_pages_free(g->node, gen_node_bytes(g));
}

static void gen_free(mc_gw_gen_t *g)
{
    if (g) {
        gen_free_tables(g);
        mc_free(g);
    }
}

/* Zeroed pages of their own for a table about to be written all over, faulted in with one call
 * (one fault per 4 KiB page, taken while a request waits, cost ~10 us each on our VMs against
 * ~0.5 us in bulk; a heap block could also come from reused memory that calloc would clear
 * page by page). */
static void *gen_table(size_t bytes)
{
    void *p = mc_pages_alloc(bytes, 0);
    if (p)
        (void)mc_pages_populate_write(p, bytes); /* best effort: else faulted one by one */
    return p;
}

/* Makes *g a generation for up to max_ranges ranges from first: with the spare's tables when
 * they have that size (emptied), else new ones. False when memory ran out. */
static bool gen_init(mc_grant_window_t *w, mc_gw_gen_t *g, uint64_t first, uint32_t max_ranges)
{
    mc_gw_gen_t *sp = w->spare;
    if (sp && sp->slot && sp->max_ranges == max_ranges) {
        *g = *sp;
        sp->slot = NULL; /* the tables are g's now */
        sp->node = NULL;
        memset(g->slot, 0, gen_slot_bytes(g));
    } else {
        uint32_t max_entries = 2 * max_ranges; /* MC_GRANT_WINDOW_ENTRIES per window's ranges */
        *g = (mc_gw_gen_t){.max_ranges = max_ranges, .max_entries = max_entries,
                           .cap = 2 * max_entries};
        g->slot = gen_table(gen_slot_bytes(g));
        g->node = gen_table(gen_node_bytes(g));
        if (!g->slot || !g->node) {
            gen_free_tables(g);
            return false;
        }
    }
    g->first = first;
    g->n = g->used = 0;
    return true;
}

/* Drops the oldest generations none of whose ranges is kept any more (the last one freed
 * becomes the spare: its tables are kept for the next generation of its size). */
static void gens_drop(mc_grant_window_t *w)
{
    uint32_t k = 0;
    while (k < w->n_gen && w->gen[k].first + w->gen[k].n <= w->head &&
           (k + 1 < w->n_gen || w->gen[k].n == w->gen[k].max_ranges))
        k++;
    if (!k)
        return;
    if (!w->spare)
        w->spare = mc_calloc(1, sizeof(*w->spare)); /* none kept if this fails */
    for (uint32_t i = 0; i < k; i++) {
        if (w->spare) {
            gen_free_tables(w->spare);
            *w->spare = w->gen[i];
        } else {
            gen_free_tables(&w->gen[i]);
        }
    }
    memmove(w->gen, w->gen + k, (size_t)(w->n_gen - k) * sizeof(*w->gen));
    w->n_gen -= k;
}

/* The generation range seq (about to be added, with `entries` index entries) goes into. */
static mc_gw_gen_t *gen_for(mc_grant_window_t *w, uint64_t seq, uint32_t entries)
{
    if (w->n_gen && gen_has_room(&w->gen[w->n_gen - 1], entries))
        return &w->gen[w->n_gen - 1];
    uint32_t size = w->n_gen ? w->gen[w->n_gen - 1].max_ranges * 2 : GW_GEN_MIN;
    if (size > GW_GEN_MAX)
        size = GW_GEN_MAX;
    if (w->n_gen == w->gen_cap) {
        uint32_t cap = w->gen_cap ? w->gen_cap * 2 : 8;
        mc_gw_gen_t *a = mc_realloc(w->gen, (size_t)cap * sizeof(*a));
        if (!a)
            return NULL;
        w->gen = a;
        w->gen_cap = cap;
    }
    if (!gen_init(w, &w->gen[w->n_gen], seq, size))
        return NULL;
    return &w->gen[w->n_gen++];
}

/* Indexes range seq (just put in the ring) into g. */
static void gen_index(mc_gw_gen_t *g, const mc_gw_range_t *r, uint64_t seq)
{
    gen_put(g, r->addr, K_START, seq);
    int kind;
    if (range_regions(r, &kind)) {
        int shift = kind == K_R1 ? GW_R1_SHIFT : GW_R2_SHIFT;
        for (uint64_t k = r->addr >> shift; k <= (r->end - 1) >> shift; k++)
            gen_put(g, k, kind, seq);
    }
    g->n++;
}

static bool ring_grow(mc_grant_window_t *w)
{
    uint32_t old = w->ring_cap, cap = old ? old * 2 : GW_RING_MIN;
    /* in place where the allocator can (a large block is remapped, not copied into fresh
     * pages); then the kept ranges whose slot changed move: slot p of the old ring becomes p or
     * p + old, never a slot still to be moved */
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
    gens_drop(w);
    if (w->tail - w->head == w->ring_cap && !ring_grow(w))
        return false;
    mc_gw_gen_t *g = gen_for(w, w->tail, e);
    if (!g)
        return false;
    *ring_at(w, w->tail) = r;
    gen_index(g, &r, w->tail);
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

void mc_grant_window_prefetch(const mc_grant_window_t *w, uint64_t addr)
{
    if (w->n_gen) {
        const mc_gw_gen_t *g = &w->gen[w->n_gen - 1];
        __builtin_prefetch(&g->slot[gen_home(g, addr, K_START)], 1);
    }
}

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

/* Whether a range of g indexed under (key, kind) grants q. */
static bool gen_allows(const mc_grant_window_t *w, const mc_gw_gen_t *g, uint64_t key, int kind,
                       const gw_query_t *q)
{
    for (uint32_t n = gen_slot(g, key, kind)->head; n; n = g->node[n - 1].next) {
        uint64_t seq = g->first + (uint32_t)(g->node[n - 1].seq - (uint32_t)g->first);
        if (range_allows(w, seq, q))
            return true;
    }
    return false;
}

/* Whether a range indexed under (key, kind) in any generation, newest first, grants q. */
static bool gens_allow(const mc_grant_window_t *w, uint64_t key, int kind, const gw_query_t *q)
{
    for (uint32_t i = w->n_gen; i-- > 0;)
        if (gen_allows(w, &w->gen[i], key, kind, q))
            return true;
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
    return gens_allow(w, addr, K_START, &q) || gens_allow(w, addr >> GW_R1_SHIFT, K_R1, &q) ||
           gens_allow(w, addr >> GW_R2_SHIFT, K_R2, &q);
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
    for (uint32_t i = 0; i < w->n_gen; i++)
        gen_free_tables(&w->gen[i]);
    mc_free(w->gen);
    gen_free(w->spare);
    *w = (mc_grant_window_t)MC_GRANT_WINDOW_INIT;
}
