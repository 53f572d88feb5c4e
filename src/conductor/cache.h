/* Block cache with a capacity in blocks and an eviction policy, used by the simulator for
 * every tier, plus Belady's offline optimum (MIN with bypass) for a sequence.
 *
 * LRU, FIFO, SLRU, SLRU+TinyLFU, S3-FIFO and the adaptive policy are the shared module common/evict.h (one
 * implementation for the simulator and the store); LFU = (use count, last access tick) is an
 * indexed binary min-heap kept here for comparison. Each entry remembers an `owner` (the host
 * whose memory holds it). Evictions are reported to an optional callback (the simulator turns
 * them into index events). Not thread-safe. */
#ifndef MC_CONDUCTOR_CACHE_H
#define MC_CONDUCTOR_CACHE_H

#include "common/evict.h"
#include "conductor/u64map.h"
#include "mooncake/status.h"

#include <stddef.h>
#include <stdint.h>

typedef enum mc_conductor_evict {
    MC_CONDUCTOR_EVICT_LRU = 0,
    MC_CONDUCTOR_EVICT_LFU = 1,
    MC_CONDUCTOR_EVICT_FIFO = 2,
    MC_CONDUCTOR_EVICT_SLRU = 3,
    MC_CONDUCTOR_EVICT_S3FIFO = 4,
    MC_CONDUCTOR_EVICT_ADAPTIVE = 5,
    MC_CONDUCTOR_EVICT_SLRU_TINYLFU = 6,
} mc_conductor_evict_t;
#define MC_CONDUCTOR_EVICT_N 7

typedef void (*mc_conductor_evict_fn)(void *arg, uint64_t hash, uint32_t owner);

typedef struct mc_conductor_cache_node {
    uint64_t hash;
    uint64_t prio;
    uint32_t owner;
    uint32_t uses;
} mc_conductor_cache_node_t;

typedef struct mc_conductor_cache {
    size_t capacity;
    mc_conductor_evict_t policy;
    mc_evict_cache_t *ev;           /* every policy but LFU; owned */
    mc_conductor_u64map_t pos;      /* LFU: hash -> heap position */
    mc_conductor_cache_node_t *heap; /* LFU: capacity entries */
    size_t n;
    uint64_t tick;
    mc_conductor_evict_fn on_evict;
    void *evict_arg;
    uint64_t evictions;
} mc_conductor_cache_t;

const char *mc_conductor_evict_name(mc_conductor_evict_t p);
mc_status_t mc_conductor_evict_parse(const char *s, mc_conductor_evict_t *p_p);

/* Parameters of the shared module's slru and adaptive policies; 0 = the module's default
 * (mc_evict_config_t: probation_permille, ghost_factor). */
typedef struct mc_conductor_evict_tuning {
    uint32_t probation_permille, ghost_factor;
} mc_conductor_evict_tuning_t;

/* capacity 0 is a valid, always-empty cache. on_evict may be NULL; arg is borrowed. tune may
 * be NULL (defaults). */
mc_status_t mc_conductor_cache_init_tuned(mc_conductor_cache_t *c, size_t capacity,
                                          mc_conductor_evict_t policy,
                                          const mc_conductor_evict_tuning_t *tune,
                                          mc_conductor_evict_fn on_evict, void *arg);
mc_status_t mc_conductor_cache_init(mc_conductor_cache_t *c, size_t capacity,
                                    mc_conductor_evict_t policy, mc_conductor_evict_fn on_evict,
                                    void *arg);
void mc_conductor_cache_fini(mc_conductor_cache_t *c);
/* Present? With touch, counts as a use (updates recency/frequency). *owner_p optional. */
int mc_conductor_cache_lookup(mc_conductor_cache_t *c, uint64_t hash, int touch,
                              uint32_t *owner_p);
/* Insert (or touch if present, keeping the owner). Evicts as needed. Returns 1 if inserted. */
int mc_conductor_cache_insert(mc_conductor_cache_t *c, uint64_t hash, uint32_t owner);
int mc_conductor_cache_remove(mc_conductor_cache_t *c, uint64_t hash);
/* Calls fn for every cached block; fn must not modify c. */
void mc_conductor_cache_foreach(const mc_conductor_cache_t *c, mc_conductor_evict_fn fn,
                                void *arg);

/* Belady's MIN with bypass for the access sequence seq[0..n) and a cache of `capacity` items:
 * the maximum achievable number of hits (accesses that find the item cached). */
mc_status_t mc_conductor_belady_hits(const uint64_t *seq, size_t n, size_t capacity,
                                     uint64_t *hits_p);

#endif
