/* Router (policies in router.h): per candidate, the reuse depth is picked by the fetch policy
 * from {0, local, pool, any} prefix lengths (ties go to the shallower depth, so a fetch must
 * strictly beat recompute), the estimate adds queue and hand-off; then the policy picks a
 * candidate and, for CACHE_AWARE_SLO, decides ACCEPT / QUEUE / REJECT / DEGRADE. A full prefix
 * hit still recomputes one token. Pure functions; the random policy advances the caller's
 * seed. */
#include "conductor/router.h"

#include <math.h>
#include <string.h>

void mc_conductor_router_config_default(mc_conductor_router_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->policy = MC_CONDUCTOR_POLICY_CACHE_AWARE_SLO;
    cfg->fetch = MC_CONDUCTOR_FETCH_COST;
    cfg->ttft_slo_s = 10.0;
    cfg->queue_budget_s = 5.0;
    cfg->allow_degrade = 0;
}

static const char *policy_names[] = {"random", "least_loaded", "cache_aware", "cache_aware_slo"};
static const char *fetch_names[] = {"cost", "always", "never"};
static const char *decision_names[] = {"accept", "queue", "degrade", "reject"};

const char *mc_conductor_policy_name(mc_conductor_policy_t p)
{
    return (unsigned)p < 4 ? policy_names[p] : "?";
}
mc_status_t mc_conductor_policy_parse(const char *s, mc_conductor_policy_t *p_p)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, policy_names[i]) == 0) {
            *p_p = (mc_conductor_policy_t)i;
            return MC_OK;
        }
    }
    return MC_ERR_INVALID_PARAMS;
}
const char *mc_conductor_fetch_name(mc_conductor_fetch_t f)
{
    return (unsigned)f < 3 ? fetch_names[f] : "?";
}
mc_status_t mc_conductor_fetch_parse(const char *s, mc_conductor_fetch_t *f_p)
{
    for (int i = 0; i < 3; i++) {
        if (strcmp(s, fetch_names[i]) == 0) {
            *f_p = (mc_conductor_fetch_t)i;
            return MC_OK;
        }
    }
    return MC_ERR_INVALID_PARAMS;
}
const char *mc_conductor_decision_name(mc_conductor_decision_t d)
{
    return (unsigned)d < 4 ? decision_names[d] : "?";
}

static void eval_depth(const mc_conductor_model_t *m, const mc_conductor_bandwidth_t *bw,
                       uint32_t input_tokens, const mc_conductor_prefix_t *px, uint32_t k,
                       mc_conductor_estimate_t *e)
{
    double bb = mc_conductor_block_bytes(m);
    uint32_t loc = px->local < k ? px->local : k;
    uint32_t pool = px->pool < k ? px->pool : k;
    memset(e, 0, sizeof(*e));
    e->reuse_blocks = k;
    e->remote_blocks = pool - loc;
    e->ssd_blocks = k - pool;
    double reuse = fmin((double)k * (double)m->block_tokens, (double)input_tokens);
    double fresh = (double)input_tokens - reuse;
    if (fresh < 1 && input_tokens > 0) { /* full hit: recompute the last token for logits */
        fresh = 1;
        reuse = (double)input_tokens - 1;
    }
    e->reuse_tokens = reuse;
    e->new_tokens = fresh;
    e->fetch_s = mc_conductor_transfer_s(loc * bb, bw->local_bw, 0) +
                 mc_conductor_transfer_s(e->remote_blocks * bb, bw->pool_bw,
                                         bw->pool_call_s > 0 ? bw->pool_call_s : bw->latency_s) +
                 mc_conductor_transfer_s(e->ssd_blocks * bb, bw->ssd_bw, bw->latency_s);
    e->prefill_s = mc_conductor_prefill_s(m, fresh, reuse);
}

void mc_conductor_estimate(const mc_conductor_model_t *m, const mc_conductor_bandwidth_t *bw,
                           mc_conductor_fetch_t fetch, uint32_t input_tokens,
                           const mc_conductor_candidate_t *c, mc_conductor_estimate_t *est_p)
{
    uint32_t depths[4] = {0, c->prefix.local, c->prefix.pool, c->prefix.any};
    int nd;
    switch (fetch) {
    case MC_CONDUCTOR_FETCH_NEVER:
        nd = 2; /* no remote fetch: recompute, or use what is on this host */
        break;
    case MC_CONDUCTOR_FETCH_ALWAYS:
        depths[0] = c->prefix.any;
        nd = 1;
        break;
    default:
        nd = 4;
    }
    mc_conductor_estimate_t best, e;
    for (int i = 0; i < nd; i++) {
        eval_depth(m, bw, input_tokens, &c->prefix, depths[i], &e);
        /* strictly better only: on ties prefer the shallower (no fetch) option */
        if (i == 0 || e.fetch_s + e.prefill_s < best.fetch_s + best.prefill_s - 1e-12)
            best = e;
    }
    best.ttft_s = c->queue_s + best.fetch_s + best.prefill_s + c->handoff_s;
    *est_p = best;
}

mc_status_t mc_conductor_route(const mc_conductor_router_config_t *cfg,
                               const mc_conductor_model_t *m, const mc_conductor_bandwidth_t *bw,
                               uint32_t input_tokens, const mc_conductor_candidate_t *cands,
                               size_t n, int decode_ok, uint64_t *rng_state,
                               mc_conductor_route_t *out)
{
    if (n == 0)
        return MC_ERR_INVALID_PARAMS;
    memset(out, 0, sizeof(*out));
    out->decision = MC_CONDUCTOR_ACCEPT;
    mc_conductor_estimate_t e;
    mc_conductor_candidate_t blind;
    switch (cfg->policy) {
    case MC_CONDUCTOR_POLICY_RANDOM:
    case MC_CONDUCTOR_POLICY_LEAST_LOADED: {
        size_t pick = 0;
        if (cfg->policy == MC_CONDUCTOR_POLICY_RANDOM) {
            pick = (size_t)(mc_conductor_rand(rng_state) % n);
        } else {
            for (size_t i = 1; i < n; i++)
                if (cands[i].queue_s < cands[pick].queue_s)
                    pick = i;
        }
        /* cache-blind routing; the engine still uses whatever the chosen host has */
        blind = cands[pick];
        mc_conductor_estimate(m, bw, cfg->fetch, input_tokens, &blind, &out->est);
        out->chosen = pick;
        return MC_OK;
    }
    case MC_CONDUCTOR_POLICY_CACHE_AWARE: {
        for (size_t i = 0; i < n; i++) {
            mc_conductor_estimate(m, bw, cfg->fetch, input_tokens, &cands[i], &e);
            if (i == 0 || e.ttft_s < out->est.ttft_s) {
                out->est = e;
                out->chosen = i;
            }
        }
        return MC_OK;
    }
    case MC_CONDUCTOR_POLICY_CACHE_AWARE_SLO: {
        /* the cheapest by the predicted-time score; admission decides what to do with it */
        for (size_t i = 0; i < n; i++) {
            mc_conductor_estimate(m, bw, cfg->fetch, input_tokens, &cands[i], &e);
            if (i == 0 || e.ttft_s < out->est.ttft_s) {
                out->est = e;
                out->chosen = i;
            }
        }
        if (out->est.ttft_s > cfg->ttft_slo_s)
            out->decision = out->est.ttft_s <= cfg->ttft_slo_s + cfg->queue_budget_s
                                ? MC_CONDUCTOR_QUEUE
                                : MC_CONDUCTOR_REJECT;
        if (!decode_ok && out->decision != MC_CONDUCTOR_REJECT)
            out->decision = cfg->allow_degrade ? MC_CONDUCTOR_DEGRADE : MC_CONDUCTOR_QUEUE;
        return MC_OK;
    }
    }
    return MC_ERR_INVALID_PARAMS;
}
