/* Cache admission and eviction policies shared by every cache in the tree that chooses victims
 * (the conductor's simulator caches now; the master's object LRU can adopt the same decisions).
 * Reference and measurements: docs/internals/eviction.md, "Admission and eviction policies".
 *
 * A cache holds entries keyed by a 64-bit key, each with a size in capacity units (1 for a
 * block cache, bytes for a byte-capacity store), and never holds more than `capacity` units.
 * Entries live in two segments, each an intrusive doubly linked list in queue order (head =
 * next victim):
 *
 *   lru       one segment; a hit moves the entry to the tail.
 *   fifo      one segment; hits change nothing.
 *   slru      probation + protected, and a ghost FIFO of the last 4 * entries evicted keys. A new key
 *             enters the probation tail (a ghost hit enters the protected tail); a hit moves the
 *             entry to the protected tail; the protected segment is held to
 *             capacity * (1 - probation_permille / 1000) by moving its head to the probation
 *             tail; victims come from the probation head. probation_permille = 1000 is exactly
 *             LRU; smaller values give keys without a second access less time in the cache.
 *   s3fifo    S3-FIFO (Yang et al., SOSP'23): a small FIFO (10 % of capacity) and a main FIFO
 *             with 2-bit access counts and reinsertion; keys leaving the small FIFO without a
 *             hit go to the ghost, ghost hits enter main.
 *   adaptive  slru whose probation share is chosen online among {100, 50, 25, 10, 2} % by
 *             miniature simulations (Waldspurger et al., ATC'17): one scaled-down slru per
 *             share sees the accesses of a hash-sampled subset of keys with capacity scaled by
 *             the sampling rate; after every window the main cache takes the share whose
 *             miniature hit most, and stays at 100 % (LRU) unless another beat it by 1 %.
 *
 * Cost: every operation is O(1) amortised: a bounded number of list moves (slru moves at most
 * two protected entries per operation; s3fifo reinserts an entry at most 3 times per hit it
 * had), expected O(1) hash probes, and for adaptive at most 5 miniature operations on a
 * sampled access (sampling rate 2^-s, so 5 * 2^-s per access on average). `work` counts list
 * moves, hash probes and evictions so that tests can check the bound without timing.
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

/* Called with each victim after it left the cache (not for mc_evict_remove). */
typedef void (*mc_evict_fn)(void *arg, uint64_t key, uint32_t owner);

typedef struct mc_evict_config {
    uint64_t capacity;           /* units; 0 = a valid, always-empty cache */
    mc_evict_policy_t policy;
    uint32_t probation_permille; /* slru: probation share (0 = 20); adaptive: initial (1000) */
    uint64_t entries;            /* expected resident entries; 0 = capacity (unit-size entries) */
    uint32_t ghost_factor;       /* slru, adaptive: the ghost remembers ghost_factor * entries
                                  * keys (0 = 4); s3fifo always remembers `entries` keys */
    mc_evict_fn on_evict;        /* optional */
    void *evict_arg;             /* borrowed */
} mc_evict_config_t;

void mc_evict_config_default(mc_evict_config_t *cfg, uint64_t capacity, mc_evict_policy_t p);

typedef struct mc_evict_stats {
    uint64_t hits, misses;  /* touching lookups and inserts: hit = found */
    uint64_t inserted, bypassed, evictions, ghost_hits;
    uint64_t used, entries; /* units and entries resident now */
    uint64_t ghost, ghost_cap; /* keys the ghost remembers now, and at most */
    uint64_t work;          /* list moves + hash probes + victims examined (this cache only) */
    uint64_t mini_work;     /* the same, summed over adaptive's miniature caches */
    uint32_t probation_permille; /* current share (slru, adaptive) */
    uint32_t switches;      /* adaptive: times the share changed */
} mc_evict_stats_t;

typedef struct mc_evict_cache mc_evict_cache_t;

/* Allocates the cache (entries and tables grow as needed). */
mc_status_t mc_evict_create(const mc_evict_config_t *cfg, mc_evict_cache_t **c_p);
void mc_evict_destroy(mc_evict_cache_t *c); /* NULL ok */

/* Is key resident? With touch, this is an access: a hit updates the entry's recency or count
 * (and feeds adaptive's miniatures); without touch it is a pure query. *owner_p optional. */
int mc_evict_lookup(mc_evict_cache_t *c, uint64_t key, int touch, uint32_t *owner_p);

/* Access key and insert it if absent, evicting as needed. A resident key is touched (its
 * owner kept). Returns 1 if inserted; 0 if it was resident, larger than the capacity, or the
 * memory for its entry could not be had (then it is not cached, as a bypass). */
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
