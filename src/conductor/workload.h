/* Synthetic traces with known reuse shapes, for eviction-policy sweeps and tests
 * (docs/internals/eviction.md lists each shape and its parameters). A generated trace has the
 * same form as a loaded one (trace.h): requests sorted by timestamp, each a list of block ids;
 * chained ids model prefix reuse. Deterministic for (name, seed, scale).
 *
 *   zipf        independent single-block requests, Zipf(0.9) over 200 000 keys
 *   zipf_shift  Zipf(0.9) over 50 000 keys whose ranking moves to new keys every 50 000 accesses
 *   recency     re-reference of a recently used key (geometric stack distance, mean 3 000) 70 %
 *               of the time, a new key otherwise: the shape LRU is built for
 *   scan_hot    a hot set of 4 000 keys (Zipf 0.7) with one-time scans of 2 000 keys mixed in
 *               (scans are 40 % of the accesses)
 *   loop        a cyclic loop over 30 000 keys, 10 % of accesses to random one-time keys
 *   conv_short  conversations: 1 shared system block, 8 + 3 per turn own blocks, continues with
 *               p = 0.6, turn gaps exponential with mean 20 s
 *   conv_long   the same with 16 + 4 blocks, p = 0.5, log-normal turn gaps (median 150 s,
 *               sigma 1) — the shape of the FAST'25 conversation trace
 *   conv_shared 8 applications, each with its own 4-block system prompt, 6 + 2 blocks per turn,
 *               p = 0.7, gaps exponential with mean 60 s
 *   docs        retrieval: a Zipf(0.8)-popular document of 4..32 blocks from 3 000, followed by
 *               one or two blocks unique to the request
 *   conv_bursty conversations in bursts: 12 + 3 blocks, p = 0.8, turn gaps exponential with mean
 *               15 s, but a quarter of them log-normal pauses (median 900 s, sigma 1)
 *   phases      recency and scan_hot in turn, 50 000 accesses each (the best policy changes with
 *               every phase)
 * scale multiplies the number of requests (1.0 gives roughly 250 000 block accesses). */
#ifndef MC_CONDUCTOR_WORKLOAD_H
#define MC_CONDUCTOR_WORKLOAD_H

#include "conductor/trace.h"
#include "mooncake/status.h"

#include <stddef.h>
#include <stdint.h>

/* The names above, in that order; *n_p receives their count. */
const char *const *mc_conductor_workload_names(size_t *n_p);

/* MC_ERR_INVALID_PARAMS for an unknown name or scale outside (0, 100]. On success *trace_p is
 * owned by the caller (mc_conductor_trace_free). */
mc_status_t mc_conductor_workload_generate(const char *name, uint64_t seed, double scale,
                                           mc_conductor_trace_t **trace_p);

#endif
