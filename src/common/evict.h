/* Cache admission and eviction policies shared by every cache in the tree that chooses victims:
 * the conductor's simulator caches use them now, and the master's object store is meant to.
 * Reference and measurements: docs/internals/eviction.md, "Admission and eviction policies".
 *
 * Two layers, one implementation:
 *   mc_evict_core_t   the policy on the host's own objects. Each object embeds an
 *                     mc_evict_node_t (two tagged links: 16 bytes on LP64);
 *                     the host reports hits, misses, insertions and removals, and asks for
 *                     victims. The core reads an object's key and size through the host's
 *                     callbacks, so it stores nothing else per object.
 *   mc_evict_cache_t  a complete cache keyed by uint64_t (the simulator's block caches and the
 *                     adaptive policy's miniatures): a hash table of slots, each embedding a node.
 *
 * A cache never holds more than `capacity` units; an entry's size is in units (1 for a block
 * cache, bytes for a byte-capacity store). Entries live in two segments, each a doubly linked
 * list in queue order (head = next victim):
 *
 *   lru          one segment; a hit moves the entry to the tail.
 *   fifo         one segment; hits change nothing.
 *   slru         probation + protected, and a ghost remembering the keys of the last 3/4 to 1
 *                times ghost_factor * entries victims (5 * the expected entry count by default:
 *                4 rotating Bloom filters of 16 bits per key, 10 bytes per expected entry,
 *                < 0.3 % false positives). A new
 *                key enters the probation tail, a ghost hit the protected tail; a hit in
 *                probation moves the entry to the protected tail; the protected segment is held
 *                to capacity * (1 - probation_permille / 1000) by moving its head to the
 *                probation tail, 2 entries per operation at most; victims come from the
 *                probation head. probation_permille = 1000 is exactly LRU.
 *   slru_tinylfu slru whose protected segment, when full, admits a key only if a count-min
 *                sketch of recent accesses (TinyLFU; 4-bit counters, 1..2 bytes per expected
 *                entry) counts it as more frequent than the protected head it would push out.
 *   s3fifo       S3-FIFO (Yang et al., SOSP'23): a small FIFO (10 % of capacity), a main FIFO
 *                with 2-bit access counts and reinsertion; keys leaving the small FIFO unused
 *                go to the ghost (`entries` keys), ghost hits enter main.
 *   adaptive     slru or slru_tinylfu with a probation share in {100, 50, 25, 10, 2, 0.5} %,
 *                chosen online by miniature simulations (Waldspurger et al., ATC'17): one
 *                mc_evict_cache_t per candidate (10: LRU, 4 shares with and without the filter,
 *                0.5 % without) sees the accesses of the keys whose hash falls in a 2^-s sample,
 *                with capacity scaled by 2^-s (s = 0..10 so that a miniature holds about 2 048
 *                entries). After each window of max(2 * (entries >> s), 2 048) sampled accesses
 *                the candidates' hits are folded into an exponentially decaying score (halved
 *                every window); the cache takes the best candidate if it beat the current one by
 *                more than 2 % (ties go to the smaller share, then to no filter): at once for a
 *                larger share, at the second window end in a row with the same leader for a
 *                smaller one (or the filter toggled). It starts at a 97.5 % share (a warm-up, not
 *                a candidate: entries that were hit outlive the never-hit ones while the cache
 *                fills) and leaves it at the first window whose hits tell the candidates apart:
 *                for the best if it beat LRU by 2 %, else for LRU.
 *
 * Cost per operation, O(1) amortised and independent of the capacity: a bounded number of
 * list moves (slru: one promotion and at most two demotions; s3fifo: each reinsertion spends
 * an access count or a promotion earned by an earlier operation), expected O(1) probes of
 * tables at most half full, the sketch's halving (4 * width byte shifts every 10 * width
 * accesses), and for adaptive 10 miniature operations on a sampled access (10 * 2^-s on
 * average). Stats count this work (`work`) so that tests check the bound without timing.
 * Not thread-safe. */
#ifndef MC_COMMON_EVICT_H
#define MC_COMMON_EVICT_H

#include "mooncake/status.h"

#include <stddef.h>
#include <stdint.h>

typedef enum mc_evict_policy {
    MC_EVICT_LRU = 0,
    MC_EVICT_FIFO = 1,
    MC_EVICT_SLRU = 2,
    MC_EVICT_S3FIFO = 3,
    MC_EVICT_ADAPTIVE = 4,
    MC_EVICT_SLRU_TINYLFU = 5,
} mc_evict_policy_t;
#define MC_EVICT_N_POLICIES 6

/* "lru", "fifo", "slru", "s3fifo", "adaptive", "slru_tinylfu"; "?" for anything else. */
const char *mc_evict_policy_name(mc_evict_policy_t p);
/* MC_ERR_INVALID_PARAMS for an unknown name (*p_p untouched). */
mc_status_t mc_evict_policy_parse(const char *s, mc_evict_policy_t *p_p);

typedef struct mc_evict_config {
    uint64_t capacity;           /* units; 0 = a valid, always-empty cache */
    mc_evict_policy_t policy;
    uint32_t probation_permille; /* slru, slru_tinylfu: probation share (0 = 20); adaptive:
                                  * the share it starts with (0 = the warm-up share, 975) */
    uint64_t entries;            /* expected resident entries; 0 = capacity (unit sizes). Sizes
                                  * the ghost, the sketch and adaptive's sampling */
    uint32_t ghost_factor;       /* slru family: the ghost remembers ghost_factor * entries
                                  * keys (0 = 5); s3fifo's remembers `entries` keys */
} mc_evict_config_t;

void mc_evict_config_default(mc_evict_config_t *cfg, uint64_t capacity, mc_evict_policy_t p);

typedef struct mc_evict_stats {
    uint64_t hits, misses;       /* accesses that found the key resident, or not */
    uint64_t inserted, bypassed, evictions, ghost_hits;
    uint64_t used, entries;      /* units and entries resident now */
    uint64_t ghost, ghost_cap;   /* keys the ghost remembers now, and at most */
    uint64_t work;               /* list moves + hash probes + victims examined */
    uint64_t mini_work;          /* the same, summed over adaptive's miniatures */
    uint32_t probation_permille; /* current share (slru family, adaptive) */
    int filter;                  /* the frequency filter is on (slru_tinylfu; adaptive's pick) */
    uint32_t switches;           /* adaptive: times its candidate changed */
    uint64_t ghost_bytes, sketch_bytes; /* memory of the ghost and the sketch (sized from entries) */
    uint64_t mini_bytes;         /* adaptive: memory of its miniatures (about 2.8 MB, fixed) */
} mc_evict_stats_t;

/* ---- core: the policy over the host's objects ---- */

/* Embedded in each host object (16 bytes on LP64: two links whose low bits carry the node's
 * segment and access count); private to the core while linked. */
typedef struct mc_evict_node {
    uintptr_t prev_tag, next_tag;
} mc_evict_node_t;

/* How the core reads a linked object's key (a 64-bit hash of the host's key is enough: it
 * feeds only the ghost, the sketch and the sampling) and size (units; constant while linked). */
typedef struct mc_evict_host {
    uint64_t (*key)(const mc_evict_node_t *n, void *arg);
    uint64_t (*size)(const mc_evict_node_t *n, void *arg);
    void *arg;
} mc_evict_host_t;

typedef struct mc_evict_core mc_evict_core_t;

mc_status_t mc_evict_core_create(const mc_evict_config_t *cfg, const mc_evict_host_t *host,
                                 mc_evict_core_t **core_p);
void mc_evict_core_destroy(mc_evict_core_t *core); /* NULL ok; host objects stay the host's */

/* An access that found n resident. */
void mc_evict_core_hit(mc_evict_core_t *core, mc_evict_node_t *n);
/* A hint ahead of a hit on a linked node (a batch's lookups): prefetches its neighbours, which
 * the hit relinks. */
void mc_evict_core_prefetch_node(const mc_evict_node_t *n);
/* An access that did not find key: call before making room and linking it (or bypassing it). */
void mc_evict_core_miss(mc_evict_core_t *core, uint64_t key, uint64_t size);
/* Units the core holds now, and its capacity. */
uint64_t mc_evict_core_used(const mc_evict_core_t *core);
uint64_t mc_evict_core_capacity(const mc_evict_core_t *core);
/* The next victim (NULL when empty). The host then either evicts it
 * (mc_evict_core_unlink(..., 1)) or, if it cannot now (a lease, a pin), calls
 * mc_evict_core_skip, which moves it to its segment's tail, and asks again. */
mc_evict_node_t *mc_evict_core_victim(mc_evict_core_t *core);
void mc_evict_core_skip(mc_evict_core_t *core, mc_evict_node_t *n);
/* Walks the linked nodes in eviction order without changing anything: n = NULL gives the
 * first, else the node after n (probation head to tail, then protected head to tail; for lru
 * and fifo the one list). For a host that passes over objects it cannot evict now without
 * reordering them, e.g. another tenant's (mc_evict_core_victim first, so that its head is the
 * policy's next victim). NULL at the end. */
mc_evict_node_t *mc_evict_core_next(const mc_evict_core_t *core, const mc_evict_node_t *n);
/* A host whose capacity or expected entry count changes (a store whose pool grows): the new
 * capacity applies at once (segment shares; the miniatures shrink at their next insertion). A
 * new `entries` replaces the ghost and the sketch with empty ones of the new size (O(entries):
 * change it geometrically), and adaptive's miniatures are rebuilt (scores start over, the
 * current candidate stays) when entries moved by 2x since they were built. entries 0 =
 * capacity. MC_ERR_NO_MEMORY leaves everything as it was. */
mc_status_t mc_evict_core_resize(mc_evict_core_t *core, uint64_t capacity, uint64_t entries);
/* Admit a new object (the host made room first: used + size <= capacity). Its segment is the
 * one chosen at its miss if that was the last miss; otherwise it is chosen now. */
void mc_evict_core_link(mc_evict_core_t *core, mc_evict_node_t *n);
/* Take n out: evicted = 1 records its key in the ghost (a victim), 0 does not (a delete). */
void mc_evict_core_unlink(mc_evict_core_t *core, mc_evict_node_t *n, int evicted);
/* Calls fn for every linked node (segment by segment, head first); fn must not modify core. */
void mc_evict_core_foreach(const mc_evict_core_t *core,
                           void (*fn)(void *arg, mc_evict_node_t *n), void *arg);
void mc_evict_core_get_stats(const mc_evict_core_t *core, mc_evict_stats_t *s);

/* ---- cache: a complete cache keyed by uint64_t ---- */

/* Called with each victim after it left the cache (not for mc_evict_remove). */
typedef void (*mc_evict_fn)(void *arg, uint64_t key, uint32_t owner);

typedef struct mc_evict_cache mc_evict_cache_t;

/* on_evict may be NULL; arg is borrowed. */
mc_status_t mc_evict_create(const mc_evict_config_t *cfg, mc_evict_fn on_evict, void *arg,
                            mc_evict_cache_t **c_p);
void mc_evict_destroy(mc_evict_cache_t *c); /* NULL ok */

/* Is key resident? With touch, this is an access: a hit updates the entry's recency or count
 * (a touching lookup that misses counts nothing: the insert that follows is the access).
 * *owner_p optional. */
int mc_evict_lookup(mc_evict_cache_t *c, uint64_t key, int touch, uint32_t *owner_p);

/* Access key and insert it if absent, evicting as needed. A resident key is touched (its
 * owner kept). Returns 1 if inserted; 0 if it was resident, larger than the capacity, or the
 * memory for its entry could not be had (then it is not cached, as a bypass). size 0 = 1. */
int mc_evict_insert(mc_evict_cache_t *c, uint64_t key, uint64_t size, uint32_t owner);

/* Drop key without an eviction callback or ghost record. Returns 1 if it was resident. */
int mc_evict_remove(mc_evict_cache_t *c, uint64_t key);

/* Calls fn for every resident entry (segment by segment, head first); fn must not modify c. */
void mc_evict_foreach(const mc_evict_cache_t *c, mc_evict_fn fn, void *arg);

void mc_evict_get_stats(const mc_evict_cache_t *c, mc_evict_stats_t *s);

/* Segment of a resident key: 0 probation (the only segment of lru and fifo; small for
 * s3fifo), 1 protected (main for s3fifo); -1 if absent. For tests and diagnostics. */
int mc_evict_segment(const mc_evict_cache_t *c, uint64_t key);

#endif
