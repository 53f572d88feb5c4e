/* Cache admission and eviction policies (contract in evict.h). Entries are nodes in one array
 * (freed nodes chained through `next` for reuse), found through an open-addressing hash table
 * (linear probing, backward-shift deletion, at most half full) from key to node index; the two
 * segments are doubly linked lists threaded through the nodes by index. The ghost is a ring of
 * the last ghost.cap evicted keys plus a table from key to the sequence number of its
 * newest ring slot, so that an overwritten ring slot forgets its key only if the key was not
 * evicted again since. */
#include "common/evict.h"

#include "common/alloc.h"
#include "common/buf.h"

#include <string.h>

#define NIL UINT32_MAX
#define N_MINI 9
#define MINI_MAX_SHIFT 6      /* sample at least 1/64 of the keys */
#define MINI_TARGET 2048      /* a miniature remembers about this many entries */
#define ADAPTIVE_INITIAL 1000
#define SWITCH_MARGIN 1.01    /* a share must beat LRU's miniature by 1 % to be used */
#define SLRU_DEFAULT 20
#define GHOST_FACTOR 5
#define S3FIFO_SMALL_PERMILLE 100

/* adaptive's candidates: probation share and frequency filter; the first is LRU */
static const struct {
    uint16_t permille;
    uint8_t filter;
} cand[N_MINI] = {{1000, 0}, {500, 1}, {250, 1}, {100, 1}, {20, 1},
                  {500, 0},  {250, 0}, {100, 0}, {20, 0}};
static const char *policy_names[MC_EVICT_N_POLICIES] = {"lru",    "fifo",     "slru",
                                                        "s3fifo", "adaptive", "slru_tinylfu"};

enum { SEG_PROB = 0, SEG_PROT = 1 };

typedef struct node {
    uint64_t key, size;
    uint32_t prev, next; /* list links; next also chains free nodes */
    uint32_t owner;
    uint8_t seg, freq;   /* freq: s3fifo's 2-bit access count */
} node_t;

typedef struct slot {
    uint64_t key, val;
    uint64_t used;
} slot_t;

typedef struct map {
    slot_t *s;
    uint64_t mask, count; /* mask + 1 slots, a power of two */
} map_t;

typedef struct seglist {
    uint32_t head, tail;
    uint64_t units, n;
} seglist_t;

/* Count-min sketch of access frequency (TinyLFU, Einziger et al., ACM ToS 2017): 4 rows of
 * 4-bit counters (one byte each here) over `width` columns; every counter is halved after
 * 10 * width increments, so estimates follow the recent past. */
typedef struct sketch {
    uint8_t *cnt;        /* 4 * width */
    uint64_t mask;       /* width - 1 */
    uint64_t adds, reset_at;
} sketch_t;

typedef struct ghost {
    uint64_t *ring;
    uint64_t cap, seq; /* next insertion's sequence number; its slot is seq % cap */
    map_t map;         /* key -> sequence number of its newest insertion */
} ghost_t;

struct mc_evict_cache {
    mc_evict_config_t cfg;
    node_t *nodes;
    size_t cap_nodes;
    uint32_t n_nodes, free_head; /* nodes ever used; free chain */
    map_t idx;                   /* key -> node index */
    seglist_t seg[2];
    ghost_t ghost;
    int has_ghost;
    sketch_t freq;       /* slru_tinylfu, adaptive */
    int filter;          /* the sketch filters promotions (slru_tinylfu; adaptive's choice) */
    uint64_t used;
    uint32_t permille;
    mc_evict_stats_t st;
    /* adaptive */
    mc_evict_cache_t *mini[N_MINI];
    unsigned shift;
    uint64_t window, window_n, win_hits[N_MINI];
    double score[N_MINI];
};

const char *mc_evict_policy_name(mc_evict_policy_t p)
{
    return (unsigned)p < MC_EVICT_N_POLICIES ? policy_names[p] : "?";
}

mc_status_t mc_evict_policy_parse(const char *s, mc_evict_policy_t *p_p)
{
    for (int i = 0; i < MC_EVICT_N_POLICIES; i++) {
        if (strcmp(s, policy_names[i]) == 0) {
            *p_p = (mc_evict_policy_t)i;
            return MC_OK;
        }
    }
    return MC_ERR_INVALID_PARAMS;
}

void mc_evict_config_default(mc_evict_config_t *cfg, uint64_t capacity, mc_evict_policy_t p)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->capacity = capacity;
    cfg->policy = p;
}

/* ---- hash table ---- */

static uint64_t mix64(uint64_t x) /* splitmix64's finaliser */
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static mc_status_t map_init(map_t *m, uint64_t slots)
{
    uint64_t n = 16;
    while (n < slots)
        n <<= 1;
    m->s = mc_calloc(n, sizeof(slot_t));
    m->mask = n - 1;
    m->count = 0;
    return m->s ? MC_OK : MC_ERR_NO_MEMORY;
}

static void map_fini(map_t *m)
{
    mc_free(m->s);
    memset(m, 0, sizeof(*m));
}

/* The slot holding key, or the empty slot where it would go. */
static slot_t *map_slot(const map_t *m, uint64_t key, uint64_t *work)
{
    uint64_t i = mix64(key) & m->mask;
    for (;;) {
        (*work)++;
        slot_t *s = &m->s[i];
        if (!s->used || s->key == key)
            return s;
        i = (i + 1) & m->mask;
    }
}

static uint64_t *map_get(const map_t *m, uint64_t key, uint64_t *work)
{
    slot_t *s = map_slot(m, key, work);
    return s->used ? &s->val : NULL;
}

static mc_status_t map_put(map_t *m, uint64_t key, uint64_t val, uint64_t *work)
{
    if ((m->count + 1) * 2 > m->mask + 1) { /* keep at most half full: rehash into twice */
        map_t g;
        if (map_init(&g, (m->mask + 1) * 2) != MC_OK)
            return MC_ERR_NO_MEMORY;
        for (uint64_t i = 0; i <= m->mask; i++) {
            if (m->s[i].used) {
                *map_slot(&g, m->s[i].key, work) = m->s[i];
                g.count++;
            }
        }
        map_fini(m);
        *m = g;
    }
    slot_t *s = map_slot(m, key, work);
    if (!s->used)
        m->count++;
    *s = (slot_t){key, val, 1};
    return MC_OK;
}

static void map_del(map_t *m, uint64_t key, uint64_t *work)
{
    slot_t *s = map_slot(m, key, work);
    if (!s->used)
        return;
    uint64_t i = (uint64_t)(s - m->s), j = i;
    m->count--;
    for (;;) { /* backward shift: pull later members of the probe run into the hole */
        m->s[i].used = 0;
        for (;;) {
            j = (j + 1) & m->mask;
            (*work)++;
            if (!m->s[j].used)
                return;
            uint64_t home = mix64(m->s[j].key) & m->mask;
            /* j's entry may move to i unless its home lies cyclically in (i, j] */
            if (i <= j ? (home <= i || home > j) : (home <= i && home > j))
                break;
        }
        m->s[i] = m->s[j];
        i = j;
    }
}

/* ---- ghost ---- */

static void ghost_add(mc_evict_cache_t *c, uint64_t key)
{
    ghost_t *g = &c->ghost;
    uint64_t slot = g->seq % g->cap;
    if (g->seq >= g->cap) {
        uint64_t old = g->ring[slot];
        uint64_t *v = map_get(&g->map, old, &c->st.work);
        if (v && *v == g->seq - g->cap)
            map_del(&g->map, old, &c->st.work);
    }
    g->ring[slot] = key;
    if (map_put(&g->map, key, g->seq, &c->st.work) == MC_OK)
        g->seq++; /* out of memory: the key is just not remembered */
}

/* Was key evicted recently? Forgets it (a key re-enters once per eviction). */
static int ghost_take(mc_evict_cache_t *c, uint64_t key)
{
    if (!c->has_ghost || !map_get(&c->ghost.map, key, &c->st.work))
        return 0;
    map_del(&c->ghost.map, key, &c->st.work);
    c->st.ghost_hits++;
    return 1;
}

/* ---- frequency sketch ---- */

static mc_status_t sketch_init(sketch_t *k, uint64_t entries)
{
    uint64_t w = 64;
    while (w < entries)
        w <<= 1;
    k->cnt = mc_calloc(4 * w, 1);
    k->mask = w - 1;
    k->reset_at = 10 * w;
    return k->cnt ? MC_OK : MC_ERR_NO_MEMORY;
}

static void sketch_add(mc_evict_cache_t *c, uint64_t key)
{
    sketch_t *k = &c->freq;
    if (!k->cnt)
        return;
    uint64_t h = mix64(key ^ 0x5bd1e9955bd1e995ULL), w = k->mask + 1;
    for (int r = 0; r < 4; r++) {
        uint8_t *x = &k->cnt[r * w + ((h >> (16 * r)) & k->mask)];
        if (*x < 15)
            (*x)++;
    }
    if (++k->adds < k->reset_at)
        return;
    for (uint64_t i = 0; i < 4 * w; i++) /* 4 * width steps every 10 * width adds */
        k->cnt[i] >>= 1;
    c->st.work += 4 * w;
    k->adds /= 2;
}

static unsigned sketch_est(const sketch_t *k, uint64_t key)
{
    uint64_t h = mix64(key ^ 0x5bd1e9955bd1e995ULL), w = k->mask + 1;
    unsigned m = 15;
    for (int r = 0; r < 4; r++) {
        unsigned x = k->cnt[r * w + ((h >> (16 * r)) & k->mask)];
        m = x < m ? x : m;
    }
    return m;
}

/* ---- segments ---- */

static void seg_unlink(mc_evict_cache_t *c, uint32_t i)
{
    node_t *n = &c->nodes[i];
    seglist_t *l = &c->seg[n->seg];
    if (n->prev != NIL)
        c->nodes[n->prev].next = n->next;
    else
        l->head = n->next;
    if (n->next != NIL)
        c->nodes[n->next].prev = n->prev;
    else
        l->tail = n->prev;
    l->units -= n->size;
    l->n--;
    c->st.work++;
}

static void seg_push_tail(mc_evict_cache_t *c, uint32_t i, int seg)
{
    node_t *n = &c->nodes[i];
    seglist_t *l = &c->seg[seg];
    n->seg = (uint8_t)seg;
    n->next = NIL;
    n->prev = l->tail;
    if (l->tail != NIL)
        c->nodes[l->tail].next = i;
    else
        l->head = i;
    l->tail = i;
    l->units += n->size;
    l->n++;
    c->st.work++;
}

static void seg_move_tail(mc_evict_cache_t *c, uint32_t i, int seg)
{
    seg_unlink(c, i);
    seg_push_tail(c, i, seg);
}

static int is_slru(const mc_evict_cache_t *c)
{
    return c->cfg.policy == MC_EVICT_SLRU || c->cfg.policy == MC_EVICT_SLRU_TINYLFU ||
           c->cfg.policy == MC_EVICT_ADAPTIVE;
}

static uint64_t prot_max(const mc_evict_cache_t *c)
{
    return c->cfg.capacity - c->cfg.capacity * c->permille / 1000;
}

/* slru: hold the protected segment to its share, moving at most two entries per call (a
 * change of share drains over the following operations). */
static void slru_rebalance(mc_evict_cache_t *c)
{
    uint64_t pmax = prot_max(c);
    for (int k = 0; k < 2 && c->seg[SEG_PROT].n && c->seg[SEG_PROT].units > pmax; k++)
        seg_move_tail(c, c->seg[SEG_PROT].head, SEG_PROB);
}

/* slru: may key (of size units) enter the protected segment? Yes while it has room; when full,
 * only if the sketch counts key as more frequent than the protected head it would push out. */
static int prot_admit(const mc_evict_cache_t *c, uint64_t key, uint64_t size)
{
    uint32_t v = c->seg[SEG_PROT].head;
    if (!c->filter || v == NIL || c->seg[SEG_PROT].units + size <= prot_max(c))
        return 1;
    return sketch_est(&c->freq, key) > sketch_est(&c->freq, c->nodes[v].key);
}

static void on_hit(mc_evict_cache_t *c, uint32_t i)
{
    node_t *n = &c->nodes[i];
    switch (c->cfg.policy) {
    case MC_EVICT_LRU:
        seg_move_tail(c, i, n->seg);
        break;
    case MC_EVICT_FIFO:
        break;
    case MC_EVICT_S3FIFO:
        if (n->freq < 3)
            n->freq++;
        break;
    default: /* slru, adaptive: freq marks an entry that was hit since it entered */
        n->freq = 1;
        if (n->seg == SEG_PROB && !prot_admit(c, n->key, n->size)) {
            seg_move_tail(c, i, SEG_PROB);
            break;
        }
        seg_move_tail(c, i, SEG_PROT);
        slru_rebalance(c);
        break;
    }
}

/* The next victim; s3fifo first moves or reinserts the entries its queues' heads deserve to
 * keep (each such step spends an access count or a promotion, so the loop is amortised O(1)). */
static uint32_t pick_victim(mc_evict_cache_t *c)
{
    if (is_slru(c)) {
        /* A probation entry that was hit (demoted while the protected share was smaller, e.g.
         * under the LRU share) moves back while the protected segment has room. */
        uint64_t pmax = prot_max(c);
        for (;;) {
            uint32_t i = c->seg[SEG_PROB].head;
            c->st.work++;
            if (i == NIL)
                return c->seg[SEG_PROT].head;
            if (!c->nodes[i].freq || c->seg[SEG_PROT].units + c->nodes[i].size > pmax)
                return i;
            c->nodes[i].freq = 0;
            seg_move_tail(c, i, SEG_PROT);
        }
    }
    if (c->cfg.policy != MC_EVICT_S3FIFO)
        return c->seg[SEG_PROB].head;
    uint64_t small_max = c->cfg.capacity * S3FIFO_SMALL_PERMILLE / 1000;
    for (;;) {
        c->st.work++;
        if (c->seg[SEG_PROB].n && (c->seg[SEG_PROB].units >= small_max || !c->seg[SEG_PROT].n)) {
            uint32_t i = c->seg[SEG_PROB].head;
            if (!c->nodes[i].freq)
                return i;
            c->nodes[i].freq = 0;
            seg_move_tail(c, i, SEG_PROT);
        } else {
            uint32_t i = c->seg[SEG_PROT].head;
            if (!c->nodes[i].freq)
                return i;
            c->nodes[i].freq--;
            seg_move_tail(c, i, SEG_PROT);
        }
    }
}

static void free_node(mc_evict_cache_t *c, uint32_t i)
{
    seg_unlink(c, i);
    map_del(&c->idx, c->nodes[i].key, &c->st.work);
    c->used -= c->nodes[i].size;
    c->nodes[i].next = c->free_head;
    c->free_head = i;
}

static void evict_one(mc_evict_cache_t *c)
{
    uint32_t i = pick_victim(c);
    node_t victim = c->nodes[i];
    /* s3fifo remembers only keys that left the small queue unused (main's victims had their
     * chance); slru remembers every victim */
    if (c->has_ghost && (c->cfg.policy != MC_EVICT_S3FIFO || victim.seg == SEG_PROB))
        ghost_add(c, victim.key);
    free_node(c, i);
    c->st.evictions++;
    if (c->cfg.on_evict)
        c->cfg.on_evict(c->cfg.evict_arg, victim.key, victim.owner);
}

/* ---- adaptive ---- */

/* Feed one access to the miniatures if key is in the sample; at the end of a window, adopt the
 * share whose miniature hit most (LRU unless another beat it by SWITCH_MARGIN). */
static void adaptive_feed(mc_evict_cache_t *c, uint64_t key, uint64_t size)
{
    if (c->cfg.policy != MC_EVICT_ADAPTIVE || !c->mini[0])
        return;
    if (c->shift && (mix64(key) >> (64 - c->shift)) != 0)
        return;
    for (int k = 0; k < N_MINI; k++) {
        if (mc_evict_lookup(c->mini[k], key, 1, NULL))
            c->win_hits[k]++;
        else
            mc_evict_insert(c->mini[k], key, size, 0);
    }
    if (++c->window_n < c->window)
        return;
    c->window_n = 0;
    /* ties go to the later candidate (smaller share, no filter); keep the current one unless
     * another beat it by SWITCH_MARGIN */
    int best = N_MINI - 1, cur = N_MINI - 1;
    for (int k = N_MINI - 1; k >= 0; k--) {
        c->score[k] = c->score[k] / 2 + (double)c->win_hits[k];
        c->win_hits[k] = 0;
        if (c->score[k] > c->score[best])
            best = k;
    }
    while (cur > 0 && !(cand[cur].permille == c->permille && cand[cur].filter == c->filter))
        cur--;
    if (c->score[best] <= c->score[cur] * SWITCH_MARGIN)
        best = cur;
    if (best != cur) {
        c->permille = cand[best].permille;
        c->filter = cand[best].filter;
        c->st.switches++;
    }
}

static mc_status_t adaptive_init(mc_evict_cache_t *c)
{
    uint64_t entries = c->cfg.entries;
    while (c->shift < MINI_MAX_SHIFT && (entries >> c->shift) > MINI_TARGET)
        c->shift++;
    uint64_t mini_entries = entries >> c->shift ? entries >> c->shift : 1;
    c->window = mini_entries * 2 > 1024 ? mini_entries * 2 : 1024;
    for (int k = 0; k < N_MINI; k++) {
        mc_evict_config_t mc;
        mc_evict_config_default(&mc, c->cfg.capacity >> c->shift ? c->cfg.capacity >> c->shift : 1,
                                cand[k].filter ? MC_EVICT_SLRU_TINYLFU : MC_EVICT_SLRU);
        mc.probation_permille = cand[k].permille;
        mc.entries = mini_entries;
        mc.ghost_factor = c->cfg.ghost_factor;
        if (mc_evict_create(&mc, &c->mini[k]) != MC_OK)
            return MC_ERR_NO_MEMORY;
    }
    return MC_OK;
}

/* ---- public ---- */

mc_status_t mc_evict_create(const mc_evict_config_t *cfg, mc_evict_cache_t **c_p)
{
    *c_p = NULL;
    if ((unsigned)cfg->policy >= MC_EVICT_N_POLICIES || cfg->probation_permille > 1000)
        return MC_ERR_INVALID_PARAMS;
    mc_evict_cache_t *c = MC_NEW(mc_evict_cache_t);
    if (!c)
        return MC_ERR_NO_MEMORY;
    c->cfg = *cfg;
    if (!c->cfg.entries)
        c->cfg.entries = c->cfg.capacity ? c->cfg.capacity : 1;
    if (!c->cfg.ghost_factor)
        c->cfg.ghost_factor = GHOST_FACTOR;
    c->permille = cfg->probation_permille
                      ? cfg->probation_permille
                      : (cfg->policy == MC_EVICT_ADAPTIVE ? ADAPTIVE_INITIAL : SLRU_DEFAULT);
    c->free_head = NIL;
    for (int s = 0; s < 2; s++)
        c->seg[s].head = c->seg[s].tail = NIL;
    c->has_ghost = cfg->policy != MC_EVICT_LRU && cfg->policy != MC_EVICT_FIFO;
    mc_status_t st = map_init(&c->idx, 64);
    if (st == MC_OK && c->has_ghost) {
        c->ghost.cap = cfg->policy == MC_EVICT_S3FIFO ? c->cfg.entries
                                                      : c->cfg.entries * c->cfg.ghost_factor;
        c->ghost.ring = mc_malloc(c->ghost.cap * sizeof(uint64_t));
        st = c->ghost.ring ? map_init(&c->ghost.map, 64) : MC_ERR_NO_MEMORY;
    }
    c->filter = cfg->policy == MC_EVICT_SLRU_TINYLFU;
    if (st == MC_OK && (c->filter || cfg->policy == MC_EVICT_ADAPTIVE))
        st = sketch_init(&c->freq, c->cfg.entries);
    if (st == MC_OK && cfg->policy == MC_EVICT_ADAPTIVE && c->cfg.capacity)
        st = adaptive_init(c);
    if (st != MC_OK) {
        mc_evict_destroy(c);
        return st;
    }
    *c_p = c;
    return MC_OK;
}

void mc_evict_destroy(mc_evict_cache_t *c)
{
    if (!c)
        return;
    for (int k = 0; k < N_MINI; k++)
        mc_evict_destroy(c->mini[k]);
    map_fini(&c->idx);
    map_fini(&c->ghost.map);
    mc_free(c->ghost.ring);
    mc_free(c->freq.cnt);
    mc_free(c->nodes);
    mc_free(c);
}

int mc_evict_lookup(mc_evict_cache_t *c, uint64_t key, int touch, uint32_t *owner_p)
{
    uint64_t *v = map_get(&c->idx, key, &c->st.work);
    if (!v)
        return 0;
    uint32_t i = (uint32_t)*v;
    if (owner_p)
        *owner_p = c->nodes[i].owner;
    if (touch) {
        c->st.hits++;
        sketch_add(c, key);
        on_hit(c, i);
        adaptive_feed(c, key, c->nodes[i].size);
    }
    return 1;
}

int mc_evict_insert(mc_evict_cache_t *c, uint64_t key, uint64_t size, uint32_t owner)
{
    if (mc_evict_lookup(c, key, 1, NULL))
        return 0;
    if (size == 0)
        size = 1;
    c->st.misses++;
    sketch_add(c, key);
    adaptive_feed(c, key, size);
    if (size > c->cfg.capacity) {
        c->st.bypassed++;
        return 0;
    }
    int seg = c->has_ghost && ghost_take(c, key) ? SEG_PROT : SEG_PROB;
    if (seg == SEG_PROT && is_slru(c) && !prot_admit(c, key, size))
        seg = SEG_PROB;
    while (c->used + size > c->cfg.capacity)
        evict_one(c);
    uint32_t i = c->free_head;
    if (i == NIL) {
        if (c->n_nodes == NIL - 1 ||
            mc_array_reserve(&c->nodes, &c->cap_nodes, (size_t)c->n_nodes + 1, 64) != MC_OK) {
            c->st.bypassed++;
            return 0;
        }
        i = c->n_nodes++;
    } else {
        c->free_head = c->nodes[i].next;
    }
    if (map_put(&c->idx, key, i, &c->st.work) != MC_OK) {
        c->nodes[i].next = c->free_head;
        c->free_head = i;
        c->st.bypassed++;
        return 0;
    }
    c->nodes[i] = (node_t){.key = key, .size = size, .owner = owner};
    seg_push_tail(c, i, seg);
    c->used += size;
    c->st.inserted++;
    if (is_slru(c))
        slru_rebalance(c);
    return 1;
}

int mc_evict_remove(mc_evict_cache_t *c, uint64_t key)
{
    uint64_t *v = map_get(&c->idx, key, &c->st.work);
    if (!v)
        return 0;
    free_node(c, (uint32_t)*v);
    return 1;
}

void mc_evict_foreach(const mc_evict_cache_t *c, mc_evict_fn fn, void *arg)
{
    for (int s = 0; s < 2; s++)
        for (uint32_t i = c->seg[s].head; i != NIL; i = c->nodes[i].next)
            fn(arg, c->nodes[i].key, c->nodes[i].owner);
}

void mc_evict_get_stats(const mc_evict_cache_t *c, mc_evict_stats_t *s)
{
    *s = c->st;
    s->used = c->used;
    s->entries = c->idx.count;
    s->ghost = c->ghost.map.count;
    s->ghost_cap = c->ghost.cap;
    s->probation_permille = c->permille;
    s->mini_work = 0;
    for (int k = 0; k < N_MINI; k++) {
        if (c->mini[k]) {
            mc_evict_stats_t ms;
            mc_evict_get_stats(c->mini[k], &ms);
            s->mini_work += ms.work;
        }
    }
}

int mc_evict_segment(const mc_evict_cache_t *c, uint64_t key)
{
    uint64_t w = 0;
    uint64_t *v = map_get(&c->idx, key, &w);
    return v ? c->nodes[*v].seg : -1;
}
