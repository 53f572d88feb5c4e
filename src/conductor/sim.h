/* Serving simulator: replays a trace by timestamp through prefill and decode instances
 * (disaggregated P/D, or colocated as a baseline) with the cost model of cost.h, per-tier block
 * caches (per-instance local, shared DRAM pool, optional SSD), the router of router.h and the
 * prefix index of index.h fed by the caches' commit/evict events (with optional event loss to
 * exercise gap detection and resync). Deterministic for a given config and seed.
 * Model and formulas: docs/internals/simulator.md. */
#ifndef MC_CONDUCTOR_SIM_H
#define MC_CONDUCTOR_SIM_H

#include "conductor/cache.h"
#include "conductor/cost.h"
#include "conductor/router.h"
#include "conductor/store_profile.h"
#include "conductor/trace.h"
#include "mooncake/status.h"

#include <stdint.h>
#include <stdio.h>

typedef struct mc_conductor_sim_config {
    mc_conductor_model_t model;
    mc_conductor_router_config_t router;
    mc_conductor_bandwidth_t bw;  /* local_bw (own host DRAM->GPU), pool_bw (network), ssd_bw */
    double handoff_bw;            /* P->D KV hand-off bytes/s */
    int64_t prefill, decode;      /* instances */
    int colocated;                /* 1: prefill+decode instances, each doing both */
    double time_scale;            /* arrival times are divided by this (2 = twice the rate) */
    uint64_t seed;
    int64_t local_blocks;         /* per prefill instance private cache, blocks */
    int64_t pool_blocks;          /* shared DRAM pool (spread over the prefill hosts), blocks */
    int64_t ssd_blocks;           /* shared SSD tier, blocks (pool evictions demote to it) */
    mc_conductor_evict_t evict;
    mc_conductor_evict_tuning_t evict_tuning; /* slru/adaptive parameters, 0 = defaults */
    double itl_slo_s;
    int64_t max_batch;            /* decode batch cap */
    int64_t degrade_output_tokens;/* output cap for DEGRADE decisions */
    double event_loss;            /* probability that an index event is lost in transit */
    double resync_s;              /* time from gap detection to a completed resync */
    int ignore_gaps;              /* failure mode: a subscriber without gap detection */
    int stale_hints;              /* while stale (gap seen, resync pending) still route on the
                                     flagged stale answers instead of going cache-blind */
    size_t max_requests;          /* 0 = whole trace */
    mc_conductor_store_cost_t store; /* enabled: live mode, pool fetch / write-back / exist
                                        costs from a measured store profile (store_profile.h)
                                        instead of bw.pool_bw + bw.latency_s and free writes */
} mc_conductor_sim_config_t;

typedef struct mc_conductor_sim_result {
    uint64_t requests, completed, rejected, queued, degraded, good;
    double span_s;                /* scaled arrival span */
    double makespan_s;            /* last completion */
    double ttft_p50, ttft_p90, ttft_p99, ttft_mean;
    double itl_p50, itl_p90, itl_p99;     /* per generated token */
    double tpot_p50, tpot_p90, tpot_p99;  /* per request mean inter-token time */
    double goodput_rps, goodput_share;
    /* cache and compute accounting covers served (not rejected) requests */
    uint64_t blocks_requested, reuse_blocks, local_reuse_blocks, remote_reuse_blocks,
        ssd_reuse_blocks;
    double input_tokens, reused_tokens;
    double block_hit_ratio, token_hit_ratio;
    double prefill_flops, prefill_flops_nocache, compute_saved;
    double fetch_net_bytes, handoff_net_bytes, ssd_read_bytes, ssd_write_bytes;
    double prefill_busy_s, decode_busy_s, prefill_util;
    double store_exist_s, writeback_s, writeback_bytes; /* measured store only */
    uint64_t index_events, index_events_lost, index_gaps, index_resyncs;
    uint64_t routes_while_stale, hint_overestimates, hint_overestimate_blocks;
} mc_conductor_sim_result_t;

void mc_conductor_sim_config_default(mc_conductor_sim_config_t *cfg_p);

/* Run. csv (optional, borrowed) receives one row per request with a header line. */
mc_status_t mc_conductor_sim_run(const mc_conductor_trace_t *trace,
                                 const mc_conductor_sim_config_t *cfg,
                                 mc_conductor_sim_result_t *res_p, FILE *csv);

/* Cache-only replay in trace order (no timing): every block of every request is accessed in
 * order; hits = accesses that find the block cached (prefix_hits: of those, the ones in the
 * request's leading run of hits). Belady: policy ignored, MIN with bypass (hits only).
 * tune may be NULL (defaults). */
typedef struct mc_conductor_replay_result {
    uint64_t accesses, hits, prefix_hits;
    double hit_ratio, prefix_hit_ratio;
} mc_conductor_replay_result_t;
mc_status_t mc_conductor_cache_replay(const mc_conductor_trace_t *trace, size_t max_requests,
                                      size_t capacity, mc_conductor_evict_t policy, int belady,
                                      const mc_conductor_evict_tuning_t *tune,
                                      mc_conductor_replay_result_t *res_p);

#endif
