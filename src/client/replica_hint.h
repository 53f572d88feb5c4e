/* Replica hints: where this client last saw each key's bytes (endpoint, address, size).
 *
 * A hint is only ever a guess. The store uses it to start reading a small object at the same
 * time as it asks the master for the replica list (one round trip instead of two); the read
 * counts only if the master's answer names the same replica and the bytes hash to the
 * checksum the master recorded at PutEnd. A wrong or stale hint costs one wasted read, never
 * wrong bytes.
 *
 * Fixed memory: a direct-mapped table of `slots` entries indexed by the key's XXH3; a newer
 * hint replaces whatever shared its slot. Thread-safe (one mutex, short sections).
 */
#ifndef MC_CLIENT_REPLICA_HINT_H
#define MC_CLIENT_REPLICA_HINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MC_HINT_ENDPOINT_MAX 64 /* longer endpoints are not hinted */

typedef struct mc_replica_hint {
    char endpoint[MC_HINT_ENDPOINT_MAX];
    uint64_t addr;
    uint64_t size;
} mc_replica_hint_t;

typedef struct mc_hint_table mc_hint_table_t;

/* NULL when out of memory (the store then runs without hints). */
mc_hint_table_t *mc_hint_table_new(size_t slots);
void mc_hint_table_free(mc_hint_table_t *t);

void mc_hint_set(mc_hint_table_t *t, const char *key, const char *endpoint, uint64_t addr,
                 uint64_t size);
/* Copies the hint for key into *out; false if there is none. */
bool mc_hint_get(mc_hint_table_t *t, const char *key, mc_replica_hint_t *out);
void mc_hint_drop(mc_hint_table_t *t, const char *key);

#endif
