/* Global prefix index: chained block hash -> the segments (and so hosts and tiers) that hold it,
 * fed by object events, queried by the router.
 *
 * Model. A *segment* is a named piece of memory on one *host* in one *tier*:
 *   LOCAL - an engine instance's own cache (GPU/host memory of that engine; only that host can
 *           use it without a transfer, other hosts cannot fetch from it),
 *   POOL  - a store DRAM segment (fetchable by every host over the transfer engine),
 *   SSD   - a store SSD tier (fetchable, slower).
 * A query gives, for each candidate host h and a list of chained block hashes, three
 * contiguous-prefix lengths (in blocks), each >= the previous:
 *   local - every block is held on h itself (LOCAL or POOL tier): no network needed,
 *   pool  - every block is on h or in a POOL segment anywhere (DRAM reachable),
 *   any   - as pool, SSD segments included.
 * Because hashes are chained, only a contiguous prefix is usable; a hole ends the prefix.
 *
 * Events carry a sequence number. The index expects seq == last + 1. A lower seq is a duplicate
 * and is ignored; a higher one is a *gap*: the index turns STALE, counts and logs the gap, and
 * refuses further events and (unless MC_CONDUCTOR_QUERY_ALLOW_STALE) queries until a resync
 * (resync_begin, snapshot_add..., resync_end) replaces its content. So a lost event never
 * silently produces a wrong answer; the index is in any case only a hint: the engine's real
 * lookup decides, and a stale entry only costs a re-query or a recompute.
 *
 * Evicting or removing any object of a block from a segment drops the block from that segment
 * (conservative when several rank objects map to one block: a partial block is not usable).
 *
 * Thread-safety: none; one owner thread (the conductor's event loop) calls everything.
 * Strings passed in are borrowed for the call; the index copies what it keeps.
 */
#ifndef MC_CONDUCTOR_INDEX_H
#define MC_CONDUCTOR_INDEX_H

#include "mooncake/status.h"

#include <stddef.h>
#include <stdint.h>

typedef enum mc_conductor_tier {
    MC_CONDUCTOR_TIER_LOCAL = 0,
    MC_CONDUCTOR_TIER_POOL = 1,
    MC_CONDUCTOR_TIER_SSD = 2,
} mc_conductor_tier_t;

typedef enum mc_conductor_event_kind {
    MC_CONDUCTOR_EV_COMMITTED = 1, /* object became readable in `segment` */
    MC_CONDUCTOR_EV_EVICTED = 2,   /* evicted from `segment` by the store's policy */
    MC_CONDUCTOR_EV_REMOVED = 3,   /* removed explicitly (remove / remove_all / lease end) */
    MC_CONDUCTOR_EV_SEGMENT_LOST = 4, /* `segment` unmounted or its client died: drop all */
} mc_conductor_event_kind_t;

typedef struct mc_conductor_event {
    uint64_t seq;                  /* publisher sequence, strictly +1 per event */
    mc_conductor_event_kind_t kind;
    uint64_t block_hash;           /* chained block hash (see mc_conductor_key_hash) */
    uint64_t size;                 /* object bytes, informational */
    const char *segment;           /* borrowed; required, <= MC_CONDUCTOR_NAME_MAX bytes */
    const char *host;              /* borrowed; required when the segment is first seen */
    mc_conductor_tier_t tier;      /* used when the segment is first seen */
} mc_conductor_event_t;

#define MC_CONDUCTOR_NAME_MAX 255

typedef enum mc_conductor_index_state {
    MC_CONDUCTOR_INDEX_OK = 0,
    MC_CONDUCTOR_INDEX_STALE = 1,     /* a gap was seen; resync required */
    MC_CONDUCTOR_INDEX_RESYNCING = 2, /* between resync_begin and resync_end */
} mc_conductor_index_state_t;

typedef struct mc_conductor_index_config {
    uint64_t first_seq;        /* seq expected first (default 1) */
    size_t max_blocks;         /* cap on indexed blocks (default 64 M); beyond: commits refused */
    size_t max_segments;       /* default 65536 */
    size_t max_hosts;          /* default 65536 */
    size_t size_hint;          /* expected blocks, to pre-size the table */
} mc_conductor_index_config_t;

typedef struct mc_conductor_index_stats {
    uint64_t blocks;           /* distinct hashes indexed */
    uint64_t holders;          /* (hash, segment) pairs */
    uint64_t segments, hosts;
    uint64_t events_applied, events_duplicate, events_refused, events_unknown;
    uint64_t gaps;             /* gaps detected */
    uint64_t gap_expected, gap_got; /* the last gap: expected seq vs received */
    uint64_t resyncs;
    uint64_t next_seq;         /* seq expected next */
    mc_conductor_index_state_t state;
} mc_conductor_index_stats_t;

typedef struct mc_conductor_prefix {
    uint32_t local;
    uint32_t pool;
    uint32_t any;
} mc_conductor_prefix_t;

#define MC_CONDUCTOR_QUERY_ALLOW_STALE 1u

typedef struct mc_conductor_index mc_conductor_index_t;

void mc_conductor_index_config_default(mc_conductor_index_config_t *cfg_p);
/* cfg may be NULL. The caller owns *idx_p (mc_conductor_index_destroy). */
mc_status_t mc_conductor_index_create(const mc_conductor_index_config_t *cfg,
                                      mc_conductor_index_t **idx_p);
void mc_conductor_index_destroy(mc_conductor_index_t *idx);

/* Apply one event. MC_OK when applied, ignored as a duplicate, or of kind 0 (the master's
 * stand-in for another tenant's event: only the sequence advances);
 * MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS when the index is (or just became) stale or resyncing;
 * MC_ERR_INVALID_PARAMS for a malformed event (missing segment/host, bad kind: counted,
 * sequence still advances so that one bad event does not force a resync);
 * MC_ERR_TOO_LARGE when a cap is hit (the index turns stale: it can no longer be complete). */
mc_status_t mc_conductor_index_apply(mc_conductor_index_t *idx, const mc_conductor_event_t *ev);

/* Resync: begin clears the content and enters RESYNCING; snapshot_add records one holder
 * (as a COMMITTED event without a sequence check); end sets the next expected seq and returns
 * to OK. The publisher's snapshot must be consistent with next_seq. */
mc_status_t mc_conductor_index_resync_begin(mc_conductor_index_t *idx);
mc_status_t mc_conductor_index_snapshot_add(mc_conductor_index_t *idx, uint64_t block_hash,
                                            const char *segment, const char *host,
                                            mc_conductor_tier_t tier);
mc_status_t mc_conductor_index_resync_end(mc_conductor_index_t *idx, uint64_t next_seq);

/* Host id for a name (interned on first use; MC_ERR_TOO_LARGE beyond max_hosts). */
mc_status_t mc_conductor_index_host_id(mc_conductor_index_t *idx, const char *host,
                                       uint32_t *id_p);

/* For each of n_hosts candidate host ids, the prefix lengths of hashes[0..n) (see above) into
 * out[0..n_hosts). MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS when not OK and the flag is absent
 * (out is then zeroed: no cache assumed). Unknown host ids simply hold nothing locally. */
mc_status_t mc_conductor_index_query(const mc_conductor_index_t *idx, const uint64_t *hashes,
                                     size_t n, const uint32_t *hosts, size_t n_hosts,
                                     unsigned flags, mc_conductor_prefix_t *out);

/* Is block_hash held in `segment`? (tests, diagnostics) */
int mc_conductor_index_holds(const mc_conductor_index_t *idx, uint64_t block_hash,
                             const char *segment);

void mc_conductor_index_get_stats(const mc_conductor_index_t *idx,
                                  mc_conductor_index_stats_t *stats_p);
const char *mc_conductor_index_state_name(mc_conductor_index_state_t s);

/* Derive a block hash from an opaque store key by the engines' convention
 * "<namespace>/.../<hash>": the text after the last '/' parsed as a hex (0x optional, 1-16
 * digits) or decimal number; any other key is hashed whole with XXH3-64. */
uint64_t mc_conductor_key_hash(const char *key);

/* Parse one JSON event line (see docs/internals/conductor.md for the format). Strings are
 * copied into the caller's buffers (each MC_CONDUCTOR_NAME_MAX + 1 bytes) and ev_p points at
 * them. MC_ERR_PROTOCOL on malformed input, MC_ERR_TOO_LARGE on over-long fields. */
mc_status_t mc_conductor_event_parse_json(const char *line, size_t len,
                                          mc_conductor_event_t *ev_p, char *segment_buf,
                                          char *host_buf);
const char *mc_conductor_event_kind_name(mc_conductor_event_kind_t kind);
mc_status_t mc_conductor_tier_parse(const char *s, mc_conductor_tier_t *tier_p);

#endif
