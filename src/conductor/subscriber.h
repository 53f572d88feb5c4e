/* Live subscriber: keeps a prefix index (index.h) in step with a mooncake_master's object
 * event stream (PollEvents / ListObjects, docs/internals/conductor.md §2 and
 * docs/internals/wire-protocol.md).
 *
 * Loop: on start, and after every gap (events the master no longer holds, a master restart =
 * new epoch, or the index itself turning stale), resync: resync_begin, ListObjects pages ->
 * snapshot_add per (block, segment), resync_end(seq of the first page); then long-poll events
 * from that seq and apply them in order. Keys become block hashes with mc_conductor_key_hash;
 * the host is the segment's host label (the segment name when it has none); every segment is
 * in the configured tier (POOL: store DRAM).
 *
 * Threading: the index is not thread-safe; every index call made here holds `mu` (the caller's
 * mutex, which the caller also holds around its own queries). mc_conductor_sub_start runs the
 * loop on its own thread; mc_conductor_sub_step runs one iteration on the caller's thread
 * (tests). get_stats may be called from any thread.
 */
#ifndef MC_CONDUCTOR_SUBSCRIBER_H
#define MC_CONDUCTOR_SUBSCRIBER_H

#include "conductor/index.h"
#include "mooncake/status.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct mc_conductor_sub_config {
    const char *master_addr;   /* "host:port" (copied) */
    uint32_t wait_ms;          /* long-poll wait, <= 1000 (default 500) */
    uint32_t max_events;       /* events per poll, <= 4096 (default 4096) */
    uint32_t page;             /* objects per ListObjects page, <= 4096 (default 4096) */
    uint32_t rpc_timeout_ms;   /* on top of wait_ms (default 3000) */
    mc_conductor_tier_t tier;  /* tier of the master's segments (default POOL) */
    const struct mc_auth *auth; /* keyring for the master (borrowed; outlives the
                                   subscriber); NULL = none. PollEvents and ListObjects need
                                   a cluster (admin) token on a master with a keyring */
} mc_conductor_sub_config_t;

typedef struct mc_conductor_sub_stats {
    uint64_t polls, events, gaps, resyncs, resync_objects, rpc_errors;
    uint64_t epoch;            /* master epoch followed */
    uint64_t next_seq;         /* next master seq wanted */
    uint64_t master_next_seq;  /* the master's next seq at the last answer */
    bool synced;               /* a resync completed and no gap is pending */
} mc_conductor_sub_stats_t;

typedef struct mc_conductor_sub mc_conductor_sub_t;

void mc_conductor_sub_config_default(mc_conductor_sub_config_t *cfg_p);
/* idx and mu are borrowed until destroy. The caller owns *sub_p. */
mc_status_t mc_conductor_sub_create(const mc_conductor_sub_config_t *cfg,
                                    mc_conductor_index_t *idx, pthread_mutex_t *mu,
                                    mc_conductor_sub_t **sub_p);
/* One iteration: resync if needed, then one poll (waiting up to wait_ms) and apply.
 * MC_OK, or the RPC/master error of this iteration (the next one retries). */
mc_status_t mc_conductor_sub_step(mc_conductor_sub_t *sub);
/* Runs step in a thread until stop (errors back off 100 ms .. 1 s). */
mc_status_t mc_conductor_sub_start(mc_conductor_sub_t *sub);
/* Stops and joins the thread (returns within about wait_ms + rpc time). */
void mc_conductor_sub_stop(mc_conductor_sub_t *sub);
void mc_conductor_sub_destroy(mc_conductor_sub_t *sub);
void mc_conductor_sub_get_stats(mc_conductor_sub_t *sub, mc_conductor_sub_stats_t *stats_p);

#endif
