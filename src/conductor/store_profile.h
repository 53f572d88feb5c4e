/* Measured store profile: what `mc_store_replay --profile_out=FILE` measured against a running
 * store (master + storage servers), reduced to the cost terms the simulator uses instead of its
 * bandwidth model (live mode, docs/internals/simulator.md §7):
 *
 *   batch exist on a request's n blocks               exist_s + n * exist_block_s
 *   fetch of k blocks of B bytes from the pool         get_call_s + k * B / get_bw
 *   write-back of w new blocks of B bytes to the pool  put_call_s + w * B / put_bw
 *
 * call_s and bw come from a least-squares fit of each measured batch call's latency against
 * its byte count (fixed per-call latency + bytes / marginal bandwidth), so a profile measured
 * with small scaled blocks extrapolates to the simulated block size B. */
#ifndef MC_CONDUCTOR_STORE_PROFILE_H
#define MC_CONDUCTOR_STORE_PROFILE_H

#include "mooncake/status.h"

typedef struct mc_conductor_store_cost {
    int enabled;          /* 0: bandwidth model (pool fetch = latency + bytes / pool_bw,
                             write-back free) */
    double exist_s;       /* fixed part of the one batch exist per request (pool in use) */
    double exist_block_s; /* per block asked (no data moves: scales with count, not bytes) */
    double get_call_s;    /* fixed part of one batch get */
    double get_bw;        /* bytes/s, marginal */
    double put_call_s;    /* fixed part of one batch put */
    double put_bw;        /* bytes/s, marginal */
    double measured_block_bytes; /* block size the profile was measured with (information) */
} mc_conductor_store_cost_t;

/* Reads a profile written by mc_store_replay --profile_out (JSON, at most 1 MiB). Validates
 * every field used (finite, positive, capped); MC_ERR_INVALID_PARAMS with a log line on a
 * malformed profile, MC_ERR_FILE_OPEN_FAIL if the file cannot be read. Fills *cost_p (enabled = 1). */
mc_status_t mc_conductor_store_profile_load(const char *path, mc_conductor_store_cost_t *cost_p);

/* Fixed + per-byte cost of one call moving `bytes` (0 bytes: 0 s). */
static inline double mc_conductor_store_call_s(double call_s, double bw, double bytes)
{
    return bytes > 0 ? call_s + bytes / bw : 0;
}

#endif
