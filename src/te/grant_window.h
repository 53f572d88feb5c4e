/* The ranges tenant-bound peers of a tcp server may touch: the verified ranges of the grants
 * they presented (docs/security.md, "Data ports and tenants"; the grants themselves:
 * common/grant.h; one window per tenant: tenant_windows.h).
 *
 * A window keeps the newest ranges, in the order they were added, up to MC_GRANT_WINDOW_RANGES
 * ranges and MC_GRANT_WINDOW_ENTRIES index entries (a range takes one for its start and one per
 * 2 MiB region it touches, or, touching more than 512 of those, one per 1 GiB region); adding
 * past either cap, or past the oldest range's expiry, drops the oldest ranges. A request is
 * allowed when one kept range of its access, not yet expired, contains all of it (a range
 * touching more than 512 1 GiB regions is found only from its start or the previous match).
 * A request that starts where a range starts (a whole replica, a request's first slice) or lies
 * in the previous match's range (the next slice) is found with a hash probe or a comparison;
 * any other is looked for among the ranges kept at its 2 MiB region, then at its 1 GiB region.
 * Ranges are not merged: a request that straddles two adjacent granted ranges is refused.
 *
 * Ranges are indexed as they are added, into generations: hash tables of fixed size, each for
 * a run of consecutive ranges (1,024 for the first, doubling up to 65,536), freed once the
 * window has dropped all of theirs. No add or check ever re-indexes what is kept, so none costs
 * more than indexing one range (plus, once per generation, allocating and faulting in its
 * table, reused from the last freed one of its size); a check the previous match and the
 * newest 256 ranges do not answer probes each generation kept, newest first (at most n + 8
 * with the caps scaled n-fold).
 *
 * The caps can be raised n-fold (mc_grant_window_set_scale: a window shared by n connections).
 * Memory grows with what is kept (a full generation's table is 5 MiB; at the caps about 17 MiB,
 * 66 MiB scaled 8-fold) and is freed by mc_grant_window_clear. Not thread-safe: its owner
 * serialises every call. */
#ifndef MC_TE_GRANT_WINDOW_H
#define MC_TE_GRANT_WINDOW_H

#include <stdbool.h>
#include <stdint.h>

#define MC_GRANT_WINDOW_RANGES 65536u
#define MC_GRANT_WINDOW_ENTRIES 131072u

typedef struct mc_gw_range mc_gw_range_t;
typedef struct mc_gw_gen mc_gw_gen_t;

typedef struct mc_grant_window {
    mc_gw_range_t *ring;     /* ranges by sequence number: ring[seq & (ring_cap - 1)] */
    uint32_t ring_cap;       /* power of 2, 0 before the first add */
    uint64_t head, tail;     /* kept: sequence numbers [head, tail) */
    uint64_t entries;        /* index entries of the kept ranges */
    mc_gw_gen_t *gen;        /* generations holding kept ranges, oldest first */
    uint32_t n_gen, gen_cap;
    mc_gw_gen_t *spare;      /* the last generation freed, its tables kept for reuse (NULL, or
                              * no tables once reused) */
    uint32_t scale;          /* the caps' multiplier (0 = 1) */
} mc_grant_window_t;

#define MC_GRANT_WINDOW_INIT {0}

/* Keeps [addr, addr + len) for `access` (MC_GRANT_READ / MC_GRANT_WRITE) until expiry_ms (wall
 * clock), dropping the oldest kept ranges as the caps and now_ms require. len > 0 and addr + len
 * must not wrap (a verified grant's ranges never do); anything else is ignored. Returns false
 * when memory ran out (the range is not kept: requests under it will be refused). */
bool mc_grant_window_add(mc_grant_window_t *w, uint64_t addr, uint64_t len, uint8_t access,
                         uint64_t expiry_ms, uint64_t now_ms);

/* Asks the CPU to fetch the index slot where a range starting at addr would go if added next:
 * called a few ranges ahead while adding many, so that their index entries' cache misses
 * overlap. No effect on what is kept. */
void mc_grant_window_prefetch(const mc_grant_window_t *w, uint64_t addr);

/* Whether one kept range of `access`, with expiry_ms > now_ms, contains [addr, addr + len).
 * *hint is the caller's: 0 at first, then where its previous match was (a connection's
 * requests tend to follow the ranges of one grant). */
bool mc_grant_window_allows(mc_grant_window_t *w, uint64_t *hint, uint64_t addr, uint64_t len,
                            uint8_t access, uint64_t now_ms);

/* Keeps scale (>= 1) times MC_GRANT_WINDOW_RANGES ranges and MC_GRANT_WINDOW_ENTRIES entries
 * from the next add on (a lower scale drops the oldest then). */
void mc_grant_window_set_scale(mc_grant_window_t *w, uint32_t scale);

/* The sequence number the next added range gets (ranges are numbered from 0 in the order they
 * were added), and whether every range numbered seq or later is still kept. */
uint64_t mc_grant_window_next_seq(const mc_grant_window_t *w);
bool mc_grant_window_keeps_since(const mc_grant_window_t *w, uint64_t seq);

/* Ranges kept now. */
uint32_t mc_grant_window_size(const mc_grant_window_t *w);

/* Frees everything; the window is empty (and reusable) afterwards. */
void mc_grant_window_clear(mc_grant_window_t *w);

#endif
