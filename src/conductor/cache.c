/* Block caches and Belady's bound (contract in cache.h). Every policy but LFU delegates to
 * common/evict.h. LFU is an indexed binary min-heap of its entries by (uses, last tick) plus a
 * u64map from block hash to heap position, so lookup, insert, touch and evict are O(log n).
 * Under every policy, inserting a cached block only touches it, and the eviction callback sees
 * the victim after it left the cache, before the newcomer enters.
 * The Belady replay computes every access's next use in one backward pass, then keeps a
 * max-heap by next use (stale entries skipped lazily) and bypasses a block used never again or
 * no sooner than every cached one. */
#include "conductor/cache.h"

#include "common/alloc.h"

#include <string.h>

static const char *evict_names[MC_CONDUCTOR_EVICT_N] = {
    "lru", "lfu", "fifo", "slru", "s3fifo", "adaptive", "slru_tinylfu"};
/* The shared module's policy for each conductor policy (LFU has none). */
static const mc_evict_policy_t module_policy[MC_CONDUCTOR_EVICT_N] = {
    MC_EVICT_LRU,    MC_EVICT_LRU,      MC_EVICT_FIFO,        MC_EVICT_SLRU,
    MC_EVICT_S3FIFO, MC_EVICT_ADAPTIVE, MC_EVICT_SLRU_TINYLFU};

const char *mc_conductor_evict_name(mc_conductor_evict_t p)
{
    return (unsigned)p < MC_CONDUCTOR_EVICT_N ? evict_names[p] : "?";
}

mc_status_t mc_conductor_evict_parse(const char *s, mc_conductor_evict_t *p_p)
{
    for (int i = 0; i < MC_CONDUCTOR_EVICT_N; i++) {
        if (strcmp(s, evict_names[i]) == 0) {
            *p_p = (mc_conductor_evict_t)i;
            return MC_OK;
        }
    }
    return MC_ERR_INVALID_PARAMS;
}

/* The module's eviction callback: count, then pass on (c must not move after init). */
static void module_evicted(void *arg, uint64_t hash, uint32_t owner)
{
    mc_conductor_cache_t *c = arg;
    c->evictions++;
    if (c->on_evict)
        c->on_evict(c->evict_arg, hash, owner);
}

mc_status_t mc_conductor_cache_init(mc_conductor_cache_t *c, size_t capacity,
                                    mc_conductor_evict_t policy, mc_conductor_evict_fn on_evict,
                                    void *arg)
{
    return mc_conductor_cache_init_tuned(c, capacity, policy, NULL, on_evict, arg);
}

mc_status_t mc_conductor_cache_init_tuned(mc_conductor_cache_t *c, size_t capacity,
                                          mc_conductor_evict_t policy,
                                          const mc_conductor_evict_tuning_t *tune,
                                          mc_conductor_evict_fn on_evict, void *arg)
{
    memset(c, 0, sizeof(*c));
    if ((unsigned)policy >= MC_CONDUCTOR_EVICT_N)
        return MC_ERR_INVALID_PARAMS;
    c->capacity = capacity;
    c->policy = policy;
    c->on_evict = on_evict;
    c->evict_arg = arg;
    if (policy != MC_CONDUCTOR_EVICT_LFU) {
        mc_evict_config_t ec;
        mc_evict_config_default(&ec, capacity, module_policy[policy]);
        if (tune) {
            ec.probation_permille = tune->probation_permille;
            ec.ghost_factor = tune->ghost_factor;
        }
        return mc_evict_create(&ec, module_evicted, c, &c->ev);
    }
    if (mc_conductor_u64map_init(&c->pos, capacity + 16) != MC_OK)
        return MC_ERR_NO_MEMORY;
    if (capacity) {
        c->heap = mc_calloc(capacity, sizeof(*c->heap));
        if (!c->heap) {
            mc_conductor_u64map_fini(&c->pos);
            return MC_ERR_NO_MEMORY;
        }
    }
    return MC_OK;
}

void mc_conductor_cache_fini(mc_conductor_cache_t *c)
{
    mc_evict_destroy(c->ev);
    if (c->policy == MC_CONDUCTOR_EVICT_LFU)
        mc_conductor_u64map_fini(&c->pos);
    mc_free(c->heap);
    memset(c, 0, sizeof(*c));
}

static void heap_set(mc_conductor_cache_t *c, size_t i, const mc_conductor_cache_node_t *nd)
{
    c->heap[i] = *nd;
    *mc_conductor_u64map_get(&c->pos, nd->hash) = i;
}

static void sift_up(mc_conductor_cache_t *c, size_t i)
{
    mc_conductor_cache_node_t nd = c->heap[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (c->heap[p].prio <= nd.prio)
            break;
        heap_set(c, i, &c->heap[p]);
        i = p;
    }
    heap_set(c, i, &nd);
}

static void sift_down(mc_conductor_cache_t *c, size_t i)
{
    mc_conductor_cache_node_t nd = c->heap[i];
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        uint64_t mp = nd.prio;
        if (l < c->n && c->heap[l].prio < mp) {
            m = l;
            mp = c->heap[l].prio;
        }
        if (r < c->n && c->heap[r].prio < mp)
            m = r;
        if (m == i)
            break;
        heap_set(c, i, &c->heap[m]);
        i = m;
    }
    heap_set(c, i, &nd);
}

/* LFU priority: (use count, last access tick). */
static uint64_t prio_for(const mc_conductor_cache_t *c, const mc_conductor_cache_node_t *nd)
{
    uint64_t u = nd->uses > 0xFFFFF ? 0xFFFFF : nd->uses;
    return (u << 44) | (c->tick & ((1ULL << 44) - 1));
}

int mc_conductor_cache_lookup(mc_conductor_cache_t *c, uint64_t hash, int touch,
                              uint32_t *owner_p)
{
    if (c->ev)
        return mc_evict_lookup(c->ev, hash, touch, owner_p);
    uint64_t *p = mc_conductor_u64map_get(&c->pos, hash);
    if (!p)
        return 0;
    size_t i = (size_t)*p;
    if (owner_p)
        *owner_p = c->heap[i].owner;
    if (touch) {
        c->tick++;
        c->heap[i].uses++;
        c->heap[i].prio = prio_for(c, &c->heap[i]);
        sift_down(c, i); /* priority only grows */
    }
    return 1;
}

static void heap_remove_at(mc_conductor_cache_t *c, size_t i)
{
    uint64_t hash = c->heap[i].hash;
    c->n--;
    if (i != c->n) {
        mc_conductor_cache_node_t last = c->heap[c->n];
        heap_set(c, i, &last);
        sift_down(c, i);
        sift_up(c, *mc_conductor_u64map_get(&c->pos, last.hash));
    }
    mc_conductor_u64map_remove(&c->pos, hash, NULL);
}

int mc_conductor_cache_insert(mc_conductor_cache_t *c, uint64_t hash, uint32_t owner)
{
    if (c->ev)
        return mc_evict_insert(c->ev, hash, 1, owner);
    if (c->capacity == 0)
        return 0;
    if (mc_conductor_cache_lookup(c, hash, 1, NULL))
        return 0;
    if (c->n == c->capacity) {
        mc_conductor_cache_node_t victim = c->heap[0];
        heap_remove_at(c, 0);
        c->evictions++;
        if (c->on_evict)
            c->on_evict(c->evict_arg, victim.hash, victim.owner);
    }
    c->tick++;
    mc_conductor_cache_node_t nd = {hash, 0, owner, 1};
    nd.prio = prio_for(c, &nd);
    if (mc_conductor_u64map_put(&c->pos, hash, c->n, NULL) != MC_OK)
        return 0; /* out of memory: behave as a bypass */
    c->heap[c->n] = nd;
    c->n++;
    sift_up(c, c->n - 1);
    return 1;
}

int mc_conductor_cache_remove(mc_conductor_cache_t *c, uint64_t hash)
{
    if (c->ev)
        return mc_evict_remove(c->ev, hash);
    uint64_t *p = mc_conductor_u64map_get(&c->pos, hash);
    if (!p)
        return 0;
    heap_remove_at(c, (size_t)*p);
    return 1;
}

void mc_conductor_cache_foreach(const mc_conductor_cache_t *c, mc_conductor_evict_fn fn,
                                void *arg)
{
    if (c->ev) {
        mc_evict_foreach(c->ev, fn, arg);
        return;
    }
    for (size_t k = 0; k < c->n; k++)
        fn(arg, c->heap[k].hash, c->heap[k].owner);
}

/* ---- Belady ---- */

typedef struct bel_item {
    uint64_t next; /* index of next use; UINT64_MAX = never */
    uint64_t hash;
} bel_item_t;

static void bel_push(bel_item_t *h, size_t *n, bel_item_t it)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p].next >= it.next)
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = it;
}

static bel_item_t bel_pop(bel_item_t *h, size_t *n)
{
    bel_item_t top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        uint64_t mv = last.next;
        if (l < *n && h[l].next > mv) {
            m = l;
            mv = h[l].next;
        }
        if (r < *n && h[r].next > mv)
            m = r;
        if (m == i)
            break;
        h[i] = h[m];
        i = m;
    }
    if (*n)
        h[i] = last;
    return top;
}

mc_status_t mc_conductor_belady_hits(const uint64_t *seq, size_t n, size_t capacity,
                                     uint64_t *hits_p)
{
    *hits_p = 0;
    if (n == 0)
        return MC_OK;
    uint64_t *next = mc_malloc(n * sizeof(uint64_t));
    bel_item_t *heap = mc_malloc(n * sizeof(bel_item_t));
    mc_conductor_u64map_t last, cached;
    int ok = next && heap && mc_conductor_u64map_init(&last, n / 2 + 16) == MC_OK;
    if (ok && mc_conductor_u64map_init(&cached, capacity + 16) != MC_OK) {
        mc_conductor_u64map_fini(&last);
        ok = 0;
    }
    if (!ok) {
        mc_free(next);
        mc_free(heap);
        return MC_ERR_NO_MEMORY;
    }
    mc_status_t st = MC_OK;
    for (size_t i = n; i-- > 0;) {
        uint64_t *p = mc_conductor_u64map_get(&last, seq[i]);
        next[i] = p ? *p : UINT64_MAX;
        if (mc_conductor_u64map_put(&last, seq[i], i, NULL) != MC_OK) {
            st = MC_ERR_NO_MEMORY;
            goto out;
        }
    }
    size_t hn = 0;
    uint64_t hits = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t *cur = mc_conductor_u64map_get(&cached, seq[i]);
        if (cur) {
            hits++;
            if (next[i] == UINT64_MAX) {
                mc_conductor_u64map_remove(&cached, seq[i], NULL); /* dead: free the slot */
            } else {
                *cur = next[i];
                bel_push(heap, &hn, (bel_item_t){next[i], seq[i]});
            }
            continue;
        }
        if (next[i] == UINT64_MAX || capacity == 0)
            continue; /* never used again: bypass */
        if (cached.count >= capacity) {
            /* furthest next use among cached (skip stale heap entries) */
            bel_item_t top;
            for (;;) {
                top = bel_pop(heap, &hn);
                uint64_t *v = mc_conductor_u64map_get(&cached, top.hash);
                if (v && *v == top.next)
                    break;
            }
            if (top.next <= next[i]) {
                bel_push(heap, &hn, top); /* the newcomer is the furthest: bypass it */
                continue;
            }
            mc_conductor_u64map_remove(&cached, top.hash, NULL);
        }
        if (mc_conductor_u64map_put(&cached, seq[i], next[i], NULL) != MC_OK) {
            st = MC_ERR_NO_MEMORY;
            goto out;
        }
        bel_push(heap, &hn, (bel_item_t){next[i], seq[i]});
    }
    *hits_p = hits;
out:
    mc_conductor_u64map_fini(&last);
    mc_conductor_u64map_fini(&cached);
    mc_free(next);
    mc_free(heap);
    return st;
}
