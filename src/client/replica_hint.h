/* Replica hints and cached read leases: where this client last saw each key's bytes.
 *
 * A hint (endpoint, address, size) is only ever a guess. The store uses it to start reading a
 * small object at the same time as it asks the master for the replica list; the read counts
 * only if the master's answer names the same replica and the bytes hash to the checksum the
 * master recorded at PutEnd. A wrong or stale hint costs one wasted read, never wrong bytes.
 *
 * A hint recorded from a verified get also carries that get's read lease: the checksum and the
 * time (this process's monotonic clock, counted from before the request was sent, so never
 * later than the master's own expiry) until which the master keeps those bytes in place. While
 * it lasts the store reads the replica without asking the master (store-client.md, "Lease
 * cache"). Puts, upserts and removes through this client drop the key's lease.
 *
 * Exact: each entry keeps a copy of its key, so a lookup never answers for another key. Fixed
 * number of entries in sets of MC_HINT_WAYS picked by the key's XXH3; a full set gives up its
 * least recently used entry. A set's tags share one cache line, and batch lookups
 * (mc_hint_get_many) fetch every set before comparing any, so their cache misses overlap.
 * Thread-safe (one mutex, short sections).
 */
#ifndef MC_CLIENT_REPLICA_HINT_H
#define MC_CLIENT_REPLICA_HINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MC_HINT_ENDPOINT_MAX 64 /* longer endpoints are not hinted */
#define MC_HINT_WAYS 8          /* entries per set */

typedef struct mc_replica_hint {
    char endpoint[MC_HINT_ENDPOINT_MAX];
    uint64_t addr;
    uint64_t size;
    uint64_t checksum;       /* with a lease: the object's XXH3 */
    uint64_t lease_until_ms; /* 0 = no lease (a guess only) */
} mc_replica_hint_t;

typedef struct mc_hint_table mc_hint_table_t;

/* Room for `entries` (rounded up to whole sets). NULL when out of memory (the store then runs
 * without hints). */
mc_hint_table_t *mc_hint_table_new(size_t entries);
void mc_hint_table_free(mc_hint_table_t *t);

/* Records h for key (replacing any lease it had with h's). Hints whose endpoint does not fit
 * (no NUL within MC_HINT_ENDPOINT_MAX) are not recorded. */
void mc_hint_set(mc_hint_table_t *t, const char *key, const mc_replica_hint_t *h);
/* mc_hint_set for n keys at once (hints[i] for keys[i]; sets fetched before use). */
void mc_hint_set_many(mc_hint_table_t *t, size_t n, const char *const *keys,
                      const mc_replica_hint_t *hints);
/* Copies the entry for key into *out; false if there is none. */
bool mc_hint_get(mc_hint_table_t *t, const char *key, mc_replica_hint_t *out);
/* mc_hint_get for n keys at once (NULL keys miss): hit[i] says whether out[i] was filled. */
void mc_hint_get_many(mc_hint_table_t *t, size_t n, const char *const *keys,
                      mc_replica_hint_t *out, bool *hit);
void mc_hint_drop(mc_hint_table_t *t, const char *key);
/* Drops every entry (after a remove by pattern or of everything). */
void mc_hint_clear(mc_hint_table_t *t);

#endif
