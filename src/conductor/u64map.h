/* Open-addressing hash map from uint64_t keys (any value, 0 included) to uint64_t values.
 * Linear probing with backward-shift deletion (no tombstones), grows at 50% load. Used by the
 * prefix index, the block caches and the trace statistics. Not thread-safe: the owner
 * serialises access. The map owns its arrays; keys and values are plain integers. */
#ifndef MC_CONDUCTOR_U64MAP_H
#define MC_CONDUCTOR_U64MAP_H

#include "mooncake/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct mc_conductor_u64map {
    uint64_t *keys;
    uint64_t *vals;
    uint8_t *used;
    size_t cap;   /* power of two */
    size_t count;
} mc_conductor_u64map_t;

/* Initialise with room for about `hint` keys. MC_ERR_NO_MEMORY on failure. */
mc_status_t mc_conductor_u64map_init(mc_conductor_u64map_t *m, size_t hint);
void mc_conductor_u64map_fini(mc_conductor_u64map_t *m);
void mc_conductor_u64map_clear(mc_conductor_u64map_t *m);
/* Returns a pointer to the value slot (valid until the next insert/remove), or NULL. */
uint64_t *mc_conductor_u64map_get(const mc_conductor_u64map_t *m, uint64_t key);
/* Insert or overwrite. *inserted_p (optional) = 1 if the key was new. */
mc_status_t mc_conductor_u64map_put(mc_conductor_u64map_t *m, uint64_t key, uint64_t val,
                                    int *inserted_p);
/* Remove; returns 1 if it was present (old value in *val_p when val_p != NULL). */
int mc_conductor_u64map_remove(mc_conductor_u64map_t *m, uint64_t key, uint64_t *val_p);

static inline uint64_t mc_conductor_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

#endif
