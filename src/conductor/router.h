/* Router: scores candidate prefill instances by predicted
 *     TTFT = queue + fetch(reused prefix, from bandwidth) + prefill(suffix) + hand-off
 * and decides, per policy:
 *   RANDOM          uniform choice (seeded), no cache, no admission;
 *   LEAST_LOADED    smallest predicted queue, no admission;
 *   CACHE_AWARE     smallest predicted TTFT (uses the prefix index), no admission;
 *   CACHE_AWARE_SLO the candidate with the smallest predicted TTFT (the cheapest by the score)
 *                   if it meets the TTFT SLO: ACCEPT; if not: QUEUE there when its TTFT is
 *                   within slo + queue_budget, else REJECT (it would only burn GPU time that
 *                   others need); and when the decode side cannot take the request within its
 *                   ITL SLO: DEGRADE (serve with max output capped) if allowed, else QUEUE.
 * For each candidate the reuse depth is chosen by the fetch policy: NEVER (only blocks already
 * on the candidate's host), ALWAYS (the longest reachable prefix), COST (the depth among
 * {0, local, pool, any} minimising fetch + prefill: remote fetch only when it beats recompute).
 * Index answers are hints: the engine re-checks at execution time, so a stale entry only costs
 * a recompute. Pure functions; the caller owns all arrays. */
#ifndef MC_CONDUCTOR_ROUTER_H
#define MC_CONDUCTOR_ROUTER_H

#include "conductor/cost.h"
#include "conductor/index.h"
#include "mooncake/status.h"

#include <stddef.h>
#include <stdint.h>

typedef enum mc_conductor_policy {
    MC_CONDUCTOR_POLICY_RANDOM = 0,
    MC_CONDUCTOR_POLICY_LEAST_LOADED = 1,
    MC_CONDUCTOR_POLICY_CACHE_AWARE = 2,
    MC_CONDUCTOR_POLICY_CACHE_AWARE_SLO = 3,
} mc_conductor_policy_t;

typedef enum mc_conductor_fetch {
    MC_CONDUCTOR_FETCH_COST = 0,
    MC_CONDUCTOR_FETCH_ALWAYS = 1,
    MC_CONDUCTOR_FETCH_NEVER = 2,
} mc_conductor_fetch_t;

typedef enum mc_conductor_decision {
    MC_CONDUCTOR_ACCEPT = 0,
    MC_CONDUCTOR_QUEUE = 1,   /* admitted beyond the SLO, within the queue budget */
    MC_CONDUCTOR_DEGRADE = 2, /* admitted with a degraded service (capped output) */
    MC_CONDUCTOR_REJECT = 3,
} mc_conductor_decision_t;

typedef struct mc_conductor_router_config {
    mc_conductor_policy_t policy;
    mc_conductor_fetch_t fetch;
    double ttft_slo_s;
    double queue_budget_s;   /* extra wait beyond the SLO tolerated before rejecting */
    int allow_degrade;
} mc_conductor_router_config_t;

typedef struct mc_conductor_bandwidth {
    double local_bw, pool_bw, ssd_bw; /* bytes/s: own host memory, remote DRAM, SSD tier */
    double latency_s;                 /* per fetch (remote) */
    double pool_call_s;               /* > 0: fixed cost of one remote pool fetch instead of
                                         latency_s (measured store profile); 0: latency_s */
} mc_conductor_bandwidth_t;

typedef struct mc_conductor_candidate {
    uint32_t id;                 /* caller's instance id, returned as is */
    double queue_s;              /* predicted wait before the request starts */
    double handoff_s;            /* predicted P->D hand-off (0 when colocated) */
    mc_conductor_prefix_t prefix;
} mc_conductor_candidate_t;

typedef struct mc_conductor_estimate {
    uint32_t reuse_blocks;       /* blocks reused (fetched or local) */
    uint32_t remote_blocks;      /* of which fetched from other hosts' DRAM */
    uint32_t ssd_blocks;         /* of which read from the SSD tier */
    double reuse_tokens, new_tokens;
    double fetch_s, prefill_s, ttft_s;
} mc_conductor_estimate_t;

typedef struct mc_conductor_route {
    mc_conductor_decision_t decision;
    size_t chosen;               /* index into the candidate array (valid unless REJECT) */
    mc_conductor_estimate_t est;
} mc_conductor_route_t;

void mc_conductor_router_config_default(mc_conductor_router_config_t *cfg_p);
const char *mc_conductor_policy_name(mc_conductor_policy_t p);
mc_status_t mc_conductor_policy_parse(const char *s, mc_conductor_policy_t *p_p);
const char *mc_conductor_fetch_name(mc_conductor_fetch_t f);
mc_status_t mc_conductor_fetch_parse(const char *s, mc_conductor_fetch_t *f_p);
const char *mc_conductor_decision_name(mc_conductor_decision_t d);

/* Estimate one candidate for a prompt of input_tokens tokens in n_blocks blocks. */
void mc_conductor_estimate(const mc_conductor_model_t *m, const mc_conductor_bandwidth_t *bw,
                           mc_conductor_fetch_t fetch, uint32_t input_tokens,
                           const mc_conductor_candidate_t *c, mc_conductor_estimate_t *est_p);

/* Route. rng_state is advanced (RANDOM only). decode_ok = 0 when no decode instance can take
 * the request within its ITL SLO now. MC_ERR_INVALID_PARAMS when n == 0. */
mc_status_t mc_conductor_route(const mc_conductor_router_config_t *cfg,
                               const mc_conductor_model_t *m, const mc_conductor_bandwidth_t *bw,
                               uint32_t input_tokens, const mc_conductor_candidate_t *cands,
                               size_t n, int decode_ok, uint64_t *rng_state,
                               mc_conductor_route_t *out_p);

/* splitmix64: the project's reproducible RNG for the router and the simulator. */
static inline uint64_t mc_conductor_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static inline double mc_conductor_rand01(uint64_t *s)
{
    return (double)(mc_conductor_rand(s) >> 11) * (1.0 / 9007199254740992.0);
}

#endif
