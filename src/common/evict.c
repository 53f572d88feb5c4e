/* Cache admission and eviction policies (contract in evict.h).
 *
 * The core keeps two segments as doubly linked lists through the host's nodes, a ghost,
 * optionally a count-min sketch, and for adaptive its miniature caches. The ghost is
 * GHOST_GENS Bloom filters of GHOST_BITS bits per key, written one at a time: when the current
 * one holds cap / GHOST_GENS keys, the oldest is cleared and becomes the current one, so the
 * ghost remembers the last 3/4 cap to cap victims in 2 bytes per key (under 0.3 % false
 * positives; a key is not forgotten when it comes back, it ages out). The sketch packs its
 * 4-bit counters two to a byte.
 *
 * The keyed cache stores slots (node, key, size, owner) in fixed-size chunks so that nodes
 * never move, found through an open-addressing table (linear probing, backward-shift deletion,
 * at most half full) from key to slot index; freed slots are chained for reuse. */
#include "common/evict.h"

#include "common/alloc.h"

#include <stddef.h>
#include <string.h>

#define N_MINI 10
#define MINI_MAX_SHIFT 10   /* sample at least 1/1024 of the keys */
#define MINI_TARGET 2048    /* a miniature remembers about this many entries */
#define SWITCH_MARGIN 1.02  /* a candidate must beat the current one by 2 % */
#define SWITCH_STREAK 2     /* window ends in a row for a switch to a smaller share */
#define SLRU_DEFAULT 20
#define ADAPTIVE_WARMUP 975 /* the share adaptive starts with (not a candidate) */
#define GHOST_FACTOR 5
#define S3FIFO_SMALL_PERMILLE 100
#define CHUNK_SHIFT 12    /* keyed cache: 4 096 slots per chunk */
#define GHOST_GENS 4
#define GHOST_BITS 16      /* per remembered key */
#define GHOST_PROBES 7

/* adaptive's candidates: probation share and frequency filter; the first is LRU. Ties go to
 * the later one (smaller share, no filter). */
static const struct {
    uint16_t permille;
    uint8_t filter;
} cand[N_MINI] = {{1000, 0}, {500, 1}, {250, 1}, {100, 1}, {20, 1},
                  {500, 0},  {250, 0}, {100, 0}, {20, 0},  {5, 0}};

static const char *policy_names[MC_EVICT_N_POLICIES] = {"lru",    "fifo",     "slru",
                                                        "s3fifo", "adaptive", "slru_tinylfu"};

enum { SEG_PROB = 0, SEG_PROT = 1 };

/* A node's links carry its state in their low bits (nodes are 8-byte aligned): prev's two
 * low bits are the access count (s3fifo: 0..3; slru: 1 = hit since it entered), next's low
 * bit the segment. */
#define TAG_BITS ((uintptr_t)7)

static mc_evict_node_t *n_prev(const mc_evict_node_t *n)
{
    return (mc_evict_node_t *)(n->prev_tag & ~TAG_BITS);
}

static mc_evict_node_t *n_next(const mc_evict_node_t *n)
{
    return (mc_evict_node_t *)(n->next_tag & ~TAG_BITS);
}

static void set_prev(mc_evict_node_t *n, mc_evict_node_t *p)
{
    n->prev_tag = (uintptr_t)p | (n->prev_tag & TAG_BITS);
}

static void set_next(mc_evict_node_t *n, mc_evict_node_t *p)
{
    n->next_tag = (uintptr_t)p | (n->next_tag & TAG_BITS);
}

static unsigned n_freq(const mc_evict_node_t *n)
{
    return (unsigned)(n->prev_tag & 3);
}

static void set_freq(mc_evict_node_t *n, unsigned f)
{
    n->prev_tag = (n->prev_tag & ~(uintptr_t)3) | f;
}

static int n_seg(const mc_evict_node_t *n)
{
    return (int)(n->next_tag & 1);
}

static void set_seg(mc_evict_node_t *n, int seg)
{
    n->next_tag = (n->next_tag & ~(uintptr_t)1) | (uintptr_t)seg;
}

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

typedef struct mslot {
    uint64_t key, val;
    uint64_t used;
} mslot_t;

typedef struct map {
    mslot_t *s;
    uint64_t mask, count; /* mask + 1 slots, a power of two */
} map_t;

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
    m->s = mc_calloc(n, sizeof(mslot_t));
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
static mslot_t *map_slot(const map_t *m, uint64_t key, uint64_t *work)
{
    uint64_t i = mix64(key) & m->mask;
    for (;;) {
        (*work)++;
        mslot_t *s = &m->s[i];
        if (!s->used || s->key == key)
            return s;
        i = (i + 1) & m->mask;
    }
}

static uint64_t *map_get(const map_t *m, uint64_t key, uint64_t *work)
{
    mslot_t *s = map_slot(m, key, work);
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
    mslot_t *s = map_slot(m, key, work);
    if (!s->used)
        m->count++;
    *s = (mslot_t){key, val, 1};
    return MC_OK;
}

static void map_del(map_t *m, uint64_t key, uint64_t *work)
{
    mslot_t *s = map_slot(m, key, work);
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


/* ---- core state ---- */

typedef struct seglist {
    mc_evict_node_t *head, *tail;
    uint64_t units, n;
} seglist_t;

typedef struct ghost {
    uint64_t *bits;           /* GHOST_GENS filters of `words` words each */
    uint64_t words, nbits;    /* per filter: nbits = 64 * words */
    uint64_t cap, per_gen;    /* keys remembered at most; keys per filter */
    uint64_t n[GHOST_GENS];   /* keys written into each filter since it was cleared */
    unsigned cur;             /* the filter being written */
} ghost_t;

/* Count-min sketch of access frequency (TinyLFU, Einziger et al., ACM ToS 2017): 4 rows of
 * 4-bit counters over `width` columns (a power of two <= the expected entries); every counter
 * is halved after 10 * width increments, so estimates follow the recent past. */
typedef struct sketch {
    uint8_t *cnt; /* 4 * width nibbles */
    uint64_t mask; /* width - 1 */
    uint64_t adds, reset_at;
} sketch_t;

struct mc_evict_core {
    mc_evict_config_t cfg;
    mc_evict_host_t host;
    seglist_t seg[2];
    ghost_t ghost;
    int has_ghost;
    sketch_t freq;  /* slru_tinylfu, adaptive */
    int filter;     /* the sketch filters admissions to protected */
    uint64_t used;
    uint32_t permille;
    mc_evict_stats_t st;
    uint64_t pending_key; /* the last miss, and the segment it was admitted to then */
    int pending_seg;      /* -1: none */
    /* adaptive */
    mc_evict_cache_t *mini[N_MINI];
    unsigned shift;
    uint64_t window, window_n, win_hits[N_MINI];
    uint64_t mini_entries; /* cfg.entries when the miniatures were built */
    double score[N_MINI];
    int warmup;            /* still at ADAPTIVE_WARMUP: no window has told the candidates apart */
    int lead, lead_n;      /* the candidate that beat the current one at the last lead_n window
                            * ends in a row (-1: none) */
};

static uint64_t node_key(const mc_evict_core_t *c, const mc_evict_node_t *n)
{
    return c->host.key(n, c->host.arg);
}

static uint64_t node_size(const mc_evict_core_t *c, const mc_evict_node_t *n)
{
    return c->host.size(n, c->host.arg);
}

static int is_slru(const mc_evict_core_t *c)
{
    return c->cfg.policy == MC_EVICT_SLRU || c->cfg.policy == MC_EVICT_SLRU_TINYLFU ||
           c->cfg.policy == MC_EVICT_ADAPTIVE;
}

/* ---- ghost ---- */

static mc_status_t ghost_init(ghost_t *g, uint64_t cap)
{
    g->cap = cap ? cap : 1;
    g->per_gen = (g->cap + GHOST_GENS - 1) / GHOST_GENS;
    g->words = (g->per_gen * GHOST_BITS + 63) / 64;
    g->nbits = g->words * 64;
    g->bits = mc_calloc(GHOST_GENS * g->words, sizeof(uint64_t));
    return g->bits ? MC_OK : MC_ERR_NO_MEMORY;
}

/* Bit i of key's probe sequence (double hashing). */
static uint64_t ghost_bit(const ghost_t *g, uint64_t key, int i)
{
    uint64_t h1 = mix64(key ^ 0x6a09e667f3bcc909ULL), h2 = mix64(key ^ 0xbb67ae8584caa73bULL) | 1;
    return (h1 + (uint64_t)i * h2) % g->nbits;
}

static void ghost_add(mc_evict_core_t *c, uint64_t key)
{
    ghost_t *g = &c->ghost;
    if (g->n[g->cur] >= g->per_gen) { /* rotate: clear the oldest filter and write into it */
        g->cur = (g->cur + 1) % GHOST_GENS;
        memset(g->bits + g->cur * g->words, 0, g->words * sizeof(uint64_t));
        g->n[g->cur] = 0;
        c->st.work += g->words; /* words per per_gen insertions: O(GHOST_BITS / 64) each */
    }
    uint64_t *f = g->bits + g->cur * g->words;
    for (int i = 0; i < GHOST_PROBES; i++) {
        uint64_t b = ghost_bit(g, key, i);
        f[b / 64] |= 1ULL << (b % 64);
    }
    g->n[g->cur]++;
    c->st.work++;
}

/* Was key a recent victim (or a false positive)? */
static int ghost_take(mc_evict_core_t *c, uint64_t key)
{
    if (!c->has_ghost)
        return 0;
    const ghost_t *g = &c->ghost;
    c->st.work++;
    for (unsigned k = 0; k < GHOST_GENS; k++) {
        const uint64_t *f = g->bits + k * g->words;
        int all = 1;
        for (int i = 0; i < GHOST_PROBES && all; i++) {
            uint64_t b = ghost_bit(g, key, i);
            all = (f[b / 64] >> (b % 64)) & 1;
        }
        if (all) {
            c->st.ghost_hits++;
            return 1;
        }
    }
    return 0;
}

/* ---- frequency sketch ---- */

static mc_status_t sketch_init(sketch_t *k, uint64_t entries)
{
    uint64_t w = 64;
    while (w * 2 <= entries) /* at most `entries` columns: 4 rows of nibbles = 2 bytes each */
        w <<= 1;
    k->cnt = mc_calloc(2 * w, 1);
    k->mask = w - 1;
    k->reset_at = 10 * w;
    return k->cnt ? MC_OK : MC_ERR_NO_MEMORY;
}

/* Counter i of row r: a nibble. */
static unsigned sketch_get(const sketch_t *k, int r, uint64_t i)
{
    uint64_t idx = (uint64_t)r * (k->mask + 1) + i;
    return (k->cnt[idx / 2] >> (4 * (idx % 2))) & 15;
}

static void sketch_add(mc_evict_core_t *c, uint64_t key)
{
    sketch_t *k = &c->freq;
    if (!k->cnt)
        return;
    uint64_t h = mix64(key ^ 0x5bd1e9955bd1e995ULL), w = k->mask + 1;
    for (int r = 0; r < 4; r++) {
        uint64_t i = (h >> (16 * r)) & k->mask, idx = (uint64_t)r * w + i;
        if (sketch_get(k, r, i) < 15)
            k->cnt[idx / 2] += (uint8_t)(1u << (4 * (idx % 2)));
    }
    if (++k->adds < k->reset_at)
        return;
    for (uint64_t b = 0; b < 2 * w; b++) /* halve both nibbles: 2 * width bytes every 10 * width adds */
        k->cnt[b] = (uint8_t)((k->cnt[b] >> 1) & 0x77);
    c->st.work += 2 * w;
    k->adds /= 2;
}

static unsigned sketch_est(const sketch_t *k, uint64_t key)
{
    uint64_t h = mix64(key ^ 0x5bd1e9955bd1e995ULL);
    unsigned m = 15;
    for (int r = 0; r < 4; r++) {
        unsigned x = sketch_get(k, r, (h >> (16 * r)) & k->mask);
        m = x < m ? x : m;
    }
    return m;
}

/* ---- segments ---- */

static void seg_unlink(mc_evict_core_t *c, mc_evict_node_t *n)
{
    seglist_t *l = &c->seg[n_seg(n)];
    mc_evict_node_t *p = n_prev(n), *x = n_next(n);
    if (p)
        set_next(p, x);
    else
        l->head = x;
    if (x)
        set_prev(x, p);
    else
        l->tail = p;
    l->units -= node_size(c, n);
    l->n--;
    c->st.work++;
}

static void seg_push_tail(mc_evict_core_t *c, mc_evict_node_t *n, int seg)
{
    seglist_t *l = &c->seg[seg];
    set_seg(n, seg);
    set_next(n, NULL);
    set_prev(n, l->tail);
    if (l->tail)
        set_next(l->tail, n);
    else
        l->head = n;
    l->tail = n;
    l->units += node_size(c, n);
    l->n++;
    c->st.work++;
}

static void seg_move_tail(mc_evict_core_t *c, mc_evict_node_t *n, int seg)
{
    seglist_t *l = &c->seg[seg];
    if (n_seg(n) == seg) { /* within a segment: relink only (no size callbacks; the hit path) */
        c->st.work++;
        if (l->tail == n)
            return;
        mc_evict_node_t *p = n_prev(n), *x = n_next(n);
        if (p)
            set_next(p, x);
        else
            l->head = x;
        set_prev(x, p); /* x != NULL: n is not the tail */
        set_next(n, NULL);
        set_prev(n, l->tail);
        set_next(l->tail, n);
        l->tail = n;
        return;
    }
    seg_unlink(c, n);
    seg_push_tail(c, n, seg);
}

static uint64_t prot_max(const mc_evict_core_t *c)
{
    return c->cfg.capacity - c->cfg.capacity * c->permille / 1000;
}

/* slru: hold the protected segment to its share, moving at most two entries per call (a
 * change of share drains over the following operations). */
static void slru_rebalance(mc_evict_core_t *c)
{
    uint64_t pmax = prot_max(c);
    for (int k = 0; k < 2 && c->seg[SEG_PROT].n && c->seg[SEG_PROT].units > pmax; k++)
        seg_move_tail(c, c->seg[SEG_PROT].head, SEG_PROB);
}

/* slru: may key (of size units) enter the protected segment? Yes while it has room; when full
 * and the filter is on, only if the sketch counts key as more frequent than the protected head
 * it would push out. */
static int prot_admit(const mc_evict_core_t *c, uint64_t key, uint64_t size)
{
    const mc_evict_node_t *v = c->seg[SEG_PROT].head;
    if (!c->filter || !v || c->seg[SEG_PROT].units + size <= prot_max(c))
        return 1;
    return sketch_est(&c->freq, key) > sketch_est(&c->freq, node_key(c, v));
}

/* ---- adaptive ---- */

static int access_mini(mc_evict_cache_t *m, uint64_t key, uint64_t size);
static void mini_set_capacity(mc_evict_cache_t *m, uint64_t capacity);
static uint64_t cache_bytes(const mc_evict_cache_t *m);

/* Feed one access to the miniatures if key is in the sample; at the end of a window, adopt the
 * candidate whose miniature hit most if it beat the current one by SWITCH_MARGIN: at once for a
 * larger probation share (toward LRU: the safe direction), else only once the same candidate
 * did so at SWITCH_STREAK window ends in a row (a lead that comes and goes costs hits at every
 * switch). The warm-up share is left at the first window in which the candidates' hits differ:
 * for the best candidate if it beat LRU by SWITCH_MARGIN, else for LRU. */
static void adaptive_feed(mc_evict_core_t *c, uint64_t key, uint64_t size)
{
    if (!c->mini[0] || (c->shift && (mix64(key) >> (64 - c->shift)) != 0))
        return;
    for (int k = 0; k < N_MINI; k++)
        c->win_hits[k] += (uint64_t)access_mini(c->mini[k], key, size);
    if (++c->window_n < c->window)
        return;
    c->window_n = 0;
    int best = N_MINI - 1, cur = N_MINI - 1, differ = 0;
    for (int k = N_MINI - 1; k >= 0; k--) {
        c->score[k] = c->score[k] / 2 + (double)c->win_hits[k];
        c->win_hits[k] = 0;
        if (c->score[k] > c->score[best])
            best = k;
    }
    for (int k = 1; k < N_MINI; k++)
        differ |= c->score[k] != c->score[0];
    if (c->warmup && !differ)
        return;
    while (cur > 0 && !(cand[cur].permille == c->permille && cand[cur].filter == c->filter))
        cur--; /* 0 (LRU) while warming up */
    if (c->score[best] <= c->score[cur] * SWITCH_MARGIN)
        best = cur;
    if (best == cur || best != c->lead) {
        c->lead = best == cur ? -1 : best;
        c->lead_n = 0;
    }
    if (best != cur && ++c->lead_n < SWITCH_STREAK && cand[best].permille <= cand[cur].permille &&
        !c->warmup)
        best = cur;
    if (best != cur || c->warmup) {
        c->st.switches += c->permille != cand[best].permille || c->filter != cand[best].filter;
        c->permille = cand[best].permille;
        c->filter = cand[best].filter;
        c->warmup = 0;
        c->lead = -1;
        c->lead_n = 0;
    }
}

/* Builds adaptive's miniatures for the core's capacity and entries into mini[] (all or none). */
static mc_status_t mini_build(const mc_evict_core_t *c, mc_evict_cache_t **mini, unsigned *shift_p,
                              uint64_t *window_p)
{
    uint64_t entries = c->cfg.entries;
    unsigned shift = 0;
    while (shift < MINI_MAX_SHIFT && (entries >> shift) > MINI_TARGET)
        shift++;
    uint64_t mini_entries = entries >> shift ? entries >> shift : 1;
    for (int k = 0; k < N_MINI; k++) {
        mc_evict_config_t mc;
        uint64_t cap = c->cfg.capacity >> shift;
        mc_evict_config_default(&mc, cap ? cap : 1,
                                cand[k].filter ? MC_EVICT_SLRU_TINYLFU : MC_EVICT_SLRU);
        mc.probation_permille = cand[k].permille;
        mc.entries = mini_entries;
        mc.ghost_factor = c->cfg.ghost_factor;
        if (mc_evict_create(&mc, NULL, NULL, &mini[k]) != MC_OK) {
            for (int j = 0; j <= k; j++)
                mc_evict_destroy(mini[j]);
            return MC_ERR_NO_MEMORY;
        }
    }
    *shift_p = shift;
    *window_p = mini_entries * 2 > 2048 ? mini_entries * 2 : 2048;
    return MC_OK;
}

/* (Re)builds the miniatures; their scores start over, the current candidate stays. On failure
 * the old ones stay. */
static mc_status_t adaptive_init(mc_evict_core_t *c)
{
    mc_evict_cache_t *mini[N_MINI] = {0};
    unsigned shift;
    uint64_t window;
    if (mini_build(c, mini, &shift, &window) != MC_OK)
        return MC_ERR_NO_MEMORY;
    for (int k = 0; k < N_MINI; k++) {
        mc_evict_destroy(c->mini[k]);
        c->mini[k] = mini[k];
        c->win_hits[k] = 0;
        c->score[k] = 0;
    }
    c->shift = shift;
    c->window = window;
    c->window_n = 0;
    c->lead = -1;
    c->lead_n = 0;
    c->mini_entries = c->cfg.entries;
    return MC_OK;
}

/* ---- core API ---- */

mc_status_t mc_evict_core_create(const mc_evict_config_t *cfg, const mc_evict_host_t *host,
                                 mc_evict_core_t **core_p)
{
    *core_p = NULL;
    if ((unsigned)cfg->policy >= MC_EVICT_N_POLICIES || cfg->probation_permille > 1000 ||
        !host->key || !host->size)
        return MC_ERR_INVALID_PARAMS;
    mc_evict_core_t *c = MC_NEW(mc_evict_core_t);
    if (!c)
        return MC_ERR_NO_MEMORY;
    c->cfg = *cfg;
    c->host = *host;
    if (!c->cfg.entries)
        c->cfg.entries = c->cfg.capacity ? c->cfg.capacity : 1;
    if (!c->cfg.ghost_factor)
        c->cfg.ghost_factor = GHOST_FACTOR;
    c->permille = cfg->probation_permille
                      ? cfg->probation_permille
                      : (cfg->policy == MC_EVICT_ADAPTIVE ? ADAPTIVE_WARMUP : SLRU_DEFAULT);
    c->warmup = cfg->policy == MC_EVICT_ADAPTIVE && !cfg->probation_permille;
    c->lead = -1;
    c->has_ghost = cfg->policy != MC_EVICT_LRU && cfg->policy != MC_EVICT_FIFO;
    c->filter = cfg->policy == MC_EVICT_SLRU_TINYLFU;
    c->pending_seg = -1;
    mc_status_t st = MC_OK;
    if (c->has_ghost) {
        c->ghost.cap = cfg->policy == MC_EVICT_S3FIFO ? c->cfg.entries
                                                      : c->cfg.entries * c->cfg.ghost_factor;
        st = ghost_init(&c->ghost, c->ghost.cap);
    }
    if (st == MC_OK && (c->filter || cfg->policy == MC_EVICT_ADAPTIVE))
        st = sketch_init(&c->freq, c->cfg.entries);
    if (st == MC_OK && cfg->policy == MC_EVICT_ADAPTIVE && c->cfg.capacity)
        st = adaptive_init(c);
    if (st != MC_OK) {
        mc_evict_core_destroy(c);
        return st;
    }
    *core_p = c;
    return MC_OK;
}

void mc_evict_core_destroy(mc_evict_core_t *c)
{
    if (!c)
        return;
    for (int k = 0; k < N_MINI; k++)
        mc_evict_destroy(c->mini[k]);
    mc_free(c->ghost.bits);
    mc_free(c->freq.cnt);
    mc_free(c);
}

void mc_evict_core_hit(mc_evict_core_t *c, mc_evict_node_t *n)
{
    c->st.hits++;
    if (c->cfg.policy == MC_EVICT_LRU) { /* the common case: no key, no size, one relink */
        seg_move_tail(c, n, n_seg(n));
        return;
    }
    uint64_t key = node_key(c, n);
    sketch_add(c, key);
    switch (c->cfg.policy) {
    case MC_EVICT_LRU: /* handled above */
    case MC_EVICT_FIFO:
        break;
    case MC_EVICT_S3FIFO:
        if (n_freq(n) < 3)
            set_freq(n, n_freq(n) + 1);
        break;
    default: /* slru family: freq marks an entry that was hit since it entered */
        set_freq(n, 1);
        if (n_seg(n) == SEG_PROB && c->permille == 1000 && !c->seg[SEG_PROT].n) {
            /* the LRU share: promoting n and demoting it at once (protected may hold 0
             * units) ends with n at the probation tail; do that in one relink */
            seg_move_tail(c, n, SEG_PROB);
            break;
        }
        if (n_seg(n) == SEG_PROB && !prot_admit(c, key, node_size(c, n))) {
            seg_move_tail(c, n, SEG_PROB);
            break;
        }
        seg_move_tail(c, n, SEG_PROT);
        slru_rebalance(c);
        break;
    }
    if (c->cfg.policy == MC_EVICT_ADAPTIVE)
        adaptive_feed(c, key, node_size(c, n));
}

/* The segment a missed key enters: protected for a ghost hit (if the filter lets it in). */
static int admit_segment(mc_evict_core_t *c, uint64_t key, uint64_t size)
{
    int seg = c->has_ghost && ghost_take(c, key) ? SEG_PROT : SEG_PROB;
    if (seg == SEG_PROT && is_slru(c) && !prot_admit(c, key, size))
        seg = SEG_PROB;
    return seg;
}

void mc_evict_core_miss(mc_evict_core_t *c, uint64_t key, uint64_t size)
{
    c->st.misses++;
    sketch_add(c, key);
    if (c->cfg.policy == MC_EVICT_ADAPTIVE)
        adaptive_feed(c, key, size);
    /* decided now, before the host makes room (its victims must not push key out of the
     * ghost); mc_evict_core_link uses it */
    c->pending_seg = size <= c->cfg.capacity ? admit_segment(c, key, size) : -1;
    c->pending_key = key;
}

uint64_t mc_evict_core_used(const mc_evict_core_t *c)
{
    return c->used;
}

uint64_t mc_evict_core_capacity(const mc_evict_core_t *c)
{
    return c->cfg.capacity;
}

mc_evict_node_t *mc_evict_core_next(const mc_evict_core_t *c, const mc_evict_node_t *n)
{
    if (!n)
        return c->seg[SEG_PROB].head ? c->seg[SEG_PROB].head : c->seg[SEG_PROT].head;
    mc_evict_node_t *x = n_next(n);
    return !x && n_seg(n) == SEG_PROB ? c->seg[SEG_PROT].head : x;
}

mc_status_t mc_evict_core_resize(mc_evict_core_t *c, uint64_t capacity, uint64_t entries)
{
    if (!entries)
        entries = capacity ? capacity : 1;
    if (entries != c->cfg.entries) { /* new ghost and sketch first: on failure nothing changes */
        ghost_t g = {0};
        sketch_t k = {0};
        uint64_t gcap = c->cfg.policy == MC_EVICT_S3FIFO ? entries : entries * c->cfg.ghost_factor;
        if (c->has_ghost && ghost_init(&g, gcap) != MC_OK)
            return MC_ERR_NO_MEMORY;
        if (c->freq.cnt && sketch_init(&k, entries) != MC_OK) {
            mc_free(g.bits);
            return MC_ERR_NO_MEMORY;
        }
        if (c->has_ghost) {
            mc_free(c->ghost.bits);
            c->ghost = g;
        }
        if (c->freq.cnt) {
            mc_free(c->freq.cnt);
            c->freq = k;
        }
        c->cfg.entries = entries;
    }
    c->cfg.capacity = capacity;
    if (c->cfg.policy != MC_EVICT_ADAPTIVE || !capacity)
        return MC_OK;
    if (!c->mini[0] || entries >= 2 * c->mini_entries || 2 * entries <= c->mini_entries)
        return adaptive_init(c);
    for (int k = 0; k < N_MINI; k++) { /* a miniature shrinks at its next insertion */
        uint64_t cap = capacity >> c->shift;
        mini_set_capacity(c->mini[k], cap ? cap : 1);
    }
    return MC_OK;
}

mc_evict_node_t *mc_evict_core_victim(mc_evict_core_t *c)
{
    if (is_slru(c)) {
        /* A probation entry that was hit (demoted while the protected share was smaller, e.g.
         * under the LRU share) moves back while the protected segment has room. */
        uint64_t pmax = prot_max(c);
        for (;;) {
            mc_evict_node_t *n = c->seg[SEG_PROB].head;
            c->st.work++;
            if (!n)
                return c->seg[SEG_PROT].head;
            if (!n_freq(n) || c->seg[SEG_PROT].units + node_size(c, n) > pmax)
                return n;
            set_freq(n, 0);
            seg_move_tail(c, n, SEG_PROT);
        }
    }
    if (c->cfg.policy != MC_EVICT_S3FIFO)
        return c->seg[SEG_PROB].head;
    /* s3fifo: move or reinsert the heads that earned it (each step spends a count or a
     * promotion, so the loop is amortised O(1)) */
    uint64_t small_max = c->cfg.capacity * S3FIFO_SMALL_PERMILLE / 1000;
    for (;;) {
        c->st.work++;
        if (c->seg[SEG_PROB].n && (c->seg[SEG_PROB].units >= small_max || !c->seg[SEG_PROT].n)) {
            mc_evict_node_t *n = c->seg[SEG_PROB].head;
            if (!n_freq(n))
                return n;
            set_freq(n, 0);
            seg_move_tail(c, n, SEG_PROT);
        } else {
            mc_evict_node_t *n = c->seg[SEG_PROT].head;
            if (!n)
                return NULL;
            if (!n_freq(n))
                return n;
            set_freq(n, n_freq(n) - 1);
            seg_move_tail(c, n, SEG_PROT);
        }
    }
}

void mc_evict_core_skip(mc_evict_core_t *c, mc_evict_node_t *n)
{
    seg_move_tail(c, n, n_seg(n));
}

void mc_evict_core_prefetch_node(const mc_evict_node_t *n)
{
    if (n_prev(n))
        __builtin_prefetch(n_prev(n), 1);
    if (n_next(n))
        __builtin_prefetch(n_next(n), 1);
}

void mc_evict_core_link(mc_evict_core_t *c, mc_evict_node_t *n)
{
    uint64_t key = node_key(c, n), size = node_size(c, n);
    int seg = c->pending_seg >= 0 && c->pending_key == key ? c->pending_seg
                                                           : admit_segment(c, key, size);
    c->pending_seg = -1;
    n->prev_tag = n->next_tag = 0;
    seg_push_tail(c, n, seg);
    c->used += size;
    c->st.inserted++;
    if (is_slru(c))
        slru_rebalance(c);
}

void mc_evict_core_unlink(mc_evict_core_t *c, mc_evict_node_t *n, int evicted)
{
    /* s3fifo remembers only keys that left the small queue unused (main's victims had their
     * chance); the slru family remembers every victim */
    if (evicted && c->has_ghost && (c->cfg.policy != MC_EVICT_S3FIFO || n_seg(n) == SEG_PROB))
        ghost_add(c, node_key(c, n));
    seg_unlink(c, n);
    c->used -= node_size(c, n);
    n->prev_tag = n->next_tag = 0;
    if (evicted)
        c->st.evictions++;
}

void mc_evict_core_foreach(const mc_evict_core_t *c,
                           void (*fn)(void *arg, mc_evict_node_t *n), void *arg)
{
    for (int s = 0; s < 2; s++)
        for (mc_evict_node_t *n = c->seg[s].head, *next; n; n = next) {
            next = n_next(n);
            fn(arg, n);
        }
}

void mc_evict_core_get_stats(const mc_evict_core_t *c, mc_evict_stats_t *s)
{
    *s = c->st;
    s->used = c->used;
    s->entries = c->seg[0].n + c->seg[1].n;
    s->ghost = 0;
    for (unsigned k = 0; k < GHOST_GENS; k++)
        s->ghost += c->ghost.n[k];
    s->ghost_cap = c->ghost.cap;
    s->probation_permille = c->permille;
    s->filter = c->filter;
    s->ghost_bytes = c->has_ghost ? GHOST_GENS * c->ghost.words * sizeof(uint64_t) : 0;
    s->sketch_bytes = c->freq.cnt ? 2 * (c->freq.mask + 1) : 0;
    s->mini_work = s->mini_bytes = 0;
    for (int k = 0; k < N_MINI; k++) {
        if (c->mini[k]) {
            mc_evict_stats_t ms;
            mc_evict_get_stats(c->mini[k], &ms);
            s->mini_work += ms.work;
            s->mini_bytes += cache_bytes(c->mini[k]);
        }
    }
}

/* ---- keyed cache ---- */

typedef struct slot {
    mc_evict_node_t node; /* first: a node pointer is its slot's */
    uint64_t key, size;
    uint32_t owner;
    uint32_t index;       /* in use: its own index; free: the next free slot */
} slot_t;

struct mc_evict_cache {
    mc_evict_core_t *core;
    slot_t **chunks;
    size_t n_chunks;
    uint32_t n_slots, free_head; /* slots ever used; free chain (UINT32_MAX = none) */
    map_t idx;                   /* key -> slot index */
    uint64_t work, bypassed;     /* table probes; refused inserts */
    mc_evict_fn on_evict;
    void *evict_arg;
};

static void mini_set_capacity(mc_evict_cache_t *m, uint64_t capacity)
{
    m->core->cfg.capacity = capacity;
}

/* Everything a keyed cache allocated: its core's ghost and sketch, its slots and its table. */
static uint64_t cache_bytes(const mc_evict_cache_t *m)
{
    mc_evict_stats_t s;
    mc_evict_core_get_stats(m->core, &s);
    return sizeof(*m) + sizeof(*m->core) + s.ghost_bytes + s.sketch_bytes + s.mini_bytes +
           m->n_chunks * (sizeof(slot_t *) + ((size_t)1 << CHUNK_SHIFT) * sizeof(slot_t)) +
           (m->idx.mask + 1) * sizeof(mslot_t);
}

static slot_t *slot_at(const mc_evict_cache_t *c, uint64_t i)
{
    return &c->chunks[i >> CHUNK_SHIFT][i & ((1u << CHUNK_SHIFT) - 1)];
}

static uint64_t slot_key(const mc_evict_node_t *n, void *arg)
{
    (void)arg;
    return ((const slot_t *)n)->key;
}

static uint64_t slot_size(const mc_evict_node_t *n, void *arg)
{
    (void)arg;
    return ((const slot_t *)n)->size;
}

mc_status_t mc_evict_create(const mc_evict_config_t *cfg, mc_evict_fn on_evict, void *arg,
                            mc_evict_cache_t **c_p)
{
    *c_p = NULL;
    mc_evict_cache_t *c = MC_NEW(mc_evict_cache_t);
    if (!c)
        return MC_ERR_NO_MEMORY;
    c->free_head = UINT32_MAX;
    c->on_evict = on_evict;
    c->evict_arg = arg;
    mc_evict_host_t host = {slot_key, slot_size, c};
    mc_status_t st = map_init(&c->idx, 64);
    if (st == MC_OK)
        st = mc_evict_core_create(cfg, &host, &c->core);
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
    mc_evict_core_destroy(c->core);
    for (size_t i = 0; i < c->n_chunks; i++)
        mc_free(c->chunks[i]);
    mc_free(c->chunks);
    map_fini(&c->idx);
    mc_free(c);
}

static slot_t *find(const mc_evict_cache_t *c, uint64_t key, uint64_t *work)
{
    uint64_t *v = map_get(&c->idx, key, work);
    return v ? slot_at(c, *v) : NULL;
}

int mc_evict_lookup(mc_evict_cache_t *c, uint64_t key, int touch, uint32_t *owner_p)
{
    slot_t *s = find(c, key, &c->work);
    if (!s)
        return 0;
    if (owner_p)
        *owner_p = s->owner;
    if (touch)
        mc_evict_core_hit(c->core, &s->node);
    return 1;
}

static void free_slot(mc_evict_cache_t *c, slot_t *s)
{
    map_del(&c->idx, s->key, &c->work);
    uint32_t i = s->index;
    s->index = c->free_head;
    c->free_head = i;
}

int mc_evict_insert(mc_evict_cache_t *c, uint64_t key, uint64_t size, uint32_t owner)
{
    if (mc_evict_lookup(c, key, 1, NULL))
        return 0;
    if (size == 0)
        size = 1;
    mc_evict_core_miss(c->core, key, size);
    if (size > mc_evict_core_capacity(c->core)) {
        c->bypassed++;
        return 0;
    }
    while (mc_evict_core_used(c->core) + size > mc_evict_core_capacity(c->core)) {
        slot_t *v = (slot_t *)mc_evict_core_victim(c->core);
        uint64_t vkey = v->key;
        uint32_t vowner = v->owner;
        mc_evict_core_unlink(c->core, &v->node, 1);
        free_slot(c, v);
        if (c->on_evict)
            c->on_evict(c->evict_arg, vkey, vowner);
    }
    uint32_t i = c->free_head;
    if (i == UINT32_MAX) {
        if (c->n_slots == UINT32_MAX - 1) {
            c->bypassed++;
            return 0;
        }
        i = c->n_slots;
        if ((i >> CHUNK_SHIFT) >= c->n_chunks) {
            slot_t **ch = mc_realloc(c->chunks, (c->n_chunks + 1) * sizeof(*ch));
            slot_t *chunk = ch ? mc_malloc(sizeof(slot_t) << CHUNK_SHIFT) : NULL;
            if (ch)
                c->chunks = ch;
            if (!chunk) {
                c->bypassed++;
                return 0;
            }
            c->chunks[c->n_chunks++] = chunk;
        }
        c->n_slots++;
    } else {
        c->free_head = slot_at(c, i)->index;
    }
    slot_t *s = slot_at(c, i);
    if (map_put(&c->idx, key, i, &c->work) != MC_OK) {
        s->index = c->free_head;
        c->free_head = i;
        c->bypassed++;
        return 0;
    }
    memset(&s->node, 0, sizeof(s->node));
    s->key = key;
    s->size = size;
    s->owner = owner;
    s->index = i;
    mc_evict_core_link(c->core, &s->node);
    return 1;
}

int mc_evict_remove(mc_evict_cache_t *c, uint64_t key)
{
    uint64_t *v = map_get(&c->idx, key, &c->work);
    if (!v)
        return 0;
    slot_t *s = slot_at(c, *v);
    mc_evict_core_unlink(c->core, &s->node, 0);
    free_slot(c, s);
    return 1;
}

typedef struct foreach_arg {
    mc_evict_fn fn;
    void *arg;
} foreach_arg_t;

static void foreach_slot(void *arg, mc_evict_node_t *n)
{
    foreach_arg_t *a = arg;
    const slot_t *s = (const slot_t *)n;
    a->fn(a->arg, s->key, s->owner);
}

void mc_evict_foreach(const mc_evict_cache_t *c, mc_evict_fn fn, void *arg)
{
    foreach_arg_t a = {fn, arg};
    mc_evict_core_foreach(c->core, foreach_slot, &a);
}

void mc_evict_get_stats(const mc_evict_cache_t *c, mc_evict_stats_t *s)
{
    mc_evict_core_get_stats(c->core, s);
    s->work += c->work;
    s->bypassed += c->bypassed;
}

int mc_evict_segment(const mc_evict_cache_t *c, uint64_t key)
{
    uint64_t w = 0;
    const slot_t *s = find(c, key, &w);
    return s ? n_seg(&s->node) : -1;
}

/* One access to a miniature: 1 if it hit. */
static int access_mini(mc_evict_cache_t *m, uint64_t key, uint64_t size)
{
    if (mc_evict_lookup(m, key, 1, NULL))
        return 1;
    mc_evict_insert(m, key, size, 0);
    return 0;
}
