/* mc_sim: trace-driven serving simulator and cache experiments (see --help and
 * docs/internals/simulator.md). Every run is deterministic for its flags and --seed.
 *
 * --experiment=run              one simulation; JSON result on stdout, --csv per-request rows
 * --experiment=local_vs_global  no cache / per-instance local caches / global pool / pool+SSD
 *                               with the same total DRAM (--pool_blocks)
 * --experiment=routing          policies x rate multipliers (--rates): goodput, TTFT
 * --experiment=pd_vs_colocated disaggregated P+D vs the same GPUs colocated, x rates
 * --experiment=cache_sweep      cache-only replay: capacities (--capacities) x every
 *                               eviction policy (--evict's list) vs Belady's optimum
 * --experiment=bandwidth_sweep  network bandwidths (--bandwidths) x fetch policy
 *                               (cost/always/never): where remote fetch stops paying off
 * --experiment=failure          index event loss with gap detection + resync vs without
 * --experiment=trace_stats      the trace facts (requests, blocks, distinct, prefix hits)
 * Experiments print one JSON line per run and write <out_dir>/<experiment>.csv.
 * --workload=NAME replaces the trace by a synthetic one (src/conductor/workload.h). */
#include "common/config.h"
#include "common/log.h"
#include "conductor/plan.h"
#include "conductor/sim.h"
#include "conductor/workload.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

typedef struct opts {
    const char *trace, *experiment, *out_dir, *csv, *dtype, *policy, *fetch, *evict;
    const char *rates, *capacities, *bandwidths, *policies, *log_level, *measured_store;
    const char *workload;
    int64_t max_requests, prefill, decode, local_blocks, pool_blocks, ssd_blocks, max_batch,
        degrade_output_tokens, seed, layers, kv_heads, q_heads, head_dim, block_tokens,
        probation_permille, ghost_factor;
    double time_scale, params_b, gpu_tflops, mfu, hbm_gb_s, hbm_gb, local_gib_s, net_gib_s,
        ssd_gib_s, handoff_gib_s, latency_us, ttft_slo_s, itl_slo_ms, queue_budget_s, event_loss,
        resync_s, cdf_rate, workload_scale;
    bool colocated, allow_degrade, ignore_gaps, stale_hints;
} opts_t;

static int build_cfg(const opts_t *o, mc_conductor_sim_config_t *c)
{
    mc_conductor_sim_config_default(c);
    c->model.layers = o->layers;
    c->model.kv_heads = o->kv_heads;
    c->model.q_heads = o->q_heads;
    c->model.head_dim = o->head_dim;
    c->model.block_tokens = o->block_tokens;
    if (mc_conductor_dtype_bytes(o->dtype, &c->model.dtype_bytes) != MC_OK) {
        fprintf(stderr, "mc_sim: unknown dtype '%s'\n", o->dtype);
        return -1;
    }
    c->model.params = o->params_b * 1e9;
    c->model.gpu_tflops = o->gpu_tflops;
    c->model.mfu = o->mfu;
    c->model.hbm_bw = o->hbm_gb_s * 1e9;
    c->model.hbm_bytes = o->hbm_gb * 1e9;
    if (mc_conductor_policy_parse(o->policy, &c->router.policy) != MC_OK ||
        mc_conductor_fetch_parse(o->fetch, &c->router.fetch) != MC_OK ||
        mc_conductor_evict_parse(o->evict, &c->evict) != MC_OK) {
        fprintf(stderr, "mc_sim: bad --policy, --fetch or --evict (see --help)\n");
        return -1;
    }
    c->router.ttft_slo_s = o->ttft_slo_s;
    c->router.queue_budget_s = o->queue_budget_s;
    c->router.allow_degrade = o->allow_degrade;
    c->bw.local_bw = o->local_gib_s * GIB;
    c->bw.pool_bw = o->net_gib_s * GIB;
    c->bw.ssd_bw = o->ssd_gib_s * GIB;
    c->bw.latency_s = o->latency_us * 1e-6;
    c->handoff_bw = o->handoff_gib_s * GIB;
    c->prefill = o->prefill;
    c->decode = o->decode;
    c->colocated = o->colocated;
    c->time_scale = o->time_scale;
    c->seed = (uint64_t)o->seed;
    c->local_blocks = o->local_blocks;
    c->pool_blocks = o->pool_blocks;
    c->ssd_blocks = o->ssd_blocks;
    c->itl_slo_s = o->itl_slo_ms / 1000.0;
    c->max_batch = o->max_batch;
    c->degrade_output_tokens = o->degrade_output_tokens;
    c->event_loss = o->event_loss;
    c->resync_s = o->resync_s;
    c->ignore_gaps = o->ignore_gaps;
    c->stale_hints = o->stale_hints;
    c->evict_tuning.probation_permille = (uint32_t)o->probation_permille;
    c->evict_tuning.ghost_factor = (uint32_t)o->ghost_factor;
    c->max_requests = (size_t)o->max_requests;
    if (o->measured_store && *o->measured_store &&
        mc_conductor_store_profile_load(o->measured_store, &c->store) != MC_OK) {
        fprintf(stderr, "mc_sim: cannot use store profile %s (see the log line above)\n",
                o->measured_store);
        return -1;
    }
    return 0;
}

static void print_result(FILE *f, const char *label, const mc_conductor_sim_config_t *c,
                         const mc_conductor_sim_result_t *r)
{
    fprintf(f,
            "{\"label\":\"%s\",\"policy\":\"%s\",\"fetch\":\"%s\",\"evict\":\"%s\","
            "\"colocated\":%d,\"prefill\":%lld,\"decode\":%lld,\"time_scale\":%g,"
            "\"local_blocks\":%lld,\"pool_blocks\":%lld,\"ssd_blocks\":%lld,\"net_gib_s\":%g,"
            "\"seed\":%llu,\"event_loss\":%g,\"ignore_gaps\":%d,"
            "\"requests\":%llu,\"completed\":%llu,\"rejected\":%llu,\"queued\":%llu,"
            "\"degraded\":%llu,\"good\":%llu,\"span_s\":%.3f,\"makespan_s\":%.3f,"
            "\"ttft_p50\":%.4f,\"ttft_p90\":%.4f,\"ttft_p99\":%.4f,\"ttft_mean\":%.4f,"
            "\"itl_p50\":%.5f,\"itl_p90\":%.5f,\"itl_p99\":%.5f,\"tpot_p50\":%.5f,"
            "\"tpot_p90\":%.5f,\"tpot_p99\":%.5f,\"goodput_rps\":%.4f,\"goodput_share\":%.4f,"
            "\"blocks_requested\":%llu,\"reuse_blocks\":%llu,\"local_reuse_blocks\":%llu,"
            "\"remote_reuse_blocks\":%llu,\"ssd_reuse_blocks\":%llu,\"block_hit_ratio\":%.4f,"
            "\"token_hit_ratio\":%.4f,\"compute_saved\":%.4f,\"fetch_net_gib\":%.1f,"
            "\"handoff_net_gib\":%.1f,\"ssd_read_gib\":%.1f,\"ssd_write_gib\":%.1f,"
            "\"prefill_util\":%.4f,\"index_events\":%llu,\"index_events_lost\":%llu,"
            "\"index_gaps\":%llu,\"index_resyncs\":%llu,\"routes_while_stale\":%llu,"
            "\"hint_overestimates\":%llu,\"hint_overestimate_blocks\":%llu,"
            "\"store\":\"%s\",\"pool_fetch_gib_s\":%.4f,\"pool_call_us\":%.1f,"
            "\"store_exist_us\":%.1f,\"store_exist_block_us\":%.2f,\"put_gib_s\":%.4f,\"put_call_us\":%.1f,"
            "\"store_exist_s\":%.4f,\"writeback_s\":%.4f,\"writeback_gib\":%.1f}\n",
            label, mc_conductor_policy_name(c->router.policy),
            mc_conductor_fetch_name(c->router.fetch), mc_conductor_evict_name(c->evict),
            c->colocated, (long long)c->prefill, (long long)c->decode, c->time_scale,
            (long long)c->local_blocks, (long long)c->pool_blocks, (long long)c->ssd_blocks,
            c->bw.pool_bw / GIB, (unsigned long long)c->seed, c->event_loss, c->ignore_gaps,
            (unsigned long long)r->requests, (unsigned long long)r->completed,
            (unsigned long long)r->rejected, (unsigned long long)r->queued,
            (unsigned long long)r->degraded, (unsigned long long)r->good, r->span_s,
            r->makespan_s, r->ttft_p50, r->ttft_p90, r->ttft_p99, r->ttft_mean, r->itl_p50,
            r->itl_p90, r->itl_p99, r->tpot_p50, r->tpot_p90, r->tpot_p99, r->goodput_rps,
            r->goodput_share, (unsigned long long)r->blocks_requested,
            (unsigned long long)r->reuse_blocks, (unsigned long long)r->local_reuse_blocks,
            (unsigned long long)r->remote_reuse_blocks, (unsigned long long)r->ssd_reuse_blocks,
            r->block_hit_ratio, r->token_hit_ratio, r->compute_saved, r->fetch_net_bytes / GIB,
            r->handoff_net_bytes / GIB, r->ssd_read_bytes / GIB, r->ssd_write_bytes / GIB,
            r->prefill_util, (unsigned long long)r->index_events,
            (unsigned long long)r->index_events_lost, (unsigned long long)r->index_gaps,
            (unsigned long long)r->index_resyncs, (unsigned long long)r->routes_while_stale,
            (unsigned long long)r->hint_overestimates,
            (unsigned long long)r->hint_overestimate_blocks,
            c->store.enabled ? "measured" : "model",
            (c->store.enabled ? c->store.get_bw : c->bw.pool_bw) / GIB,
            (c->store.enabled ? c->store.get_call_s : c->bw.latency_s) * 1e6,
            c->store.enabled ? c->store.exist_s * 1e6 : 0.0,
            c->store.enabled ? c->store.exist_block_s * 1e6 : 0.0,
            c->store.enabled ? c->store.put_bw / GIB : 0.0,
            c->store.enabled ? c->store.put_call_s * 1e6 : 0.0, r->store_exist_s, r->writeback_s,
            r->writeback_bytes / GIB);
}

static const char *CSV_HEADER =
    "label,policy,fetch,evict,colocated,prefill,decode,time_scale,rate_rps,local_blocks,"
    "pool_blocks,ssd_blocks,net_gib_s,event_loss,ignore_gaps,requests,completed,rejected,good,"
    "ttft_p50,ttft_p90,ttft_p99,ttft_mean,itl_p50,itl_p90,itl_p99,tpot_p99,goodput_rps,"
    "goodput_share,block_hit_ratio,token_hit_ratio,compute_saved,remote_reuse_blocks,"
    "fetch_net_gib,prefill_util,index_gaps,index_resyncs,routes_while_stale,hint_overestimates,"
    "hint_overestimate_blocks\n";

static void csv_row(FILE *f, const char *label, const mc_conductor_sim_config_t *c,
                    const mc_conductor_sim_result_t *r)
{
    if (!f)
        return;
    fprintf(f,
            "%s,%s,%s,%s,%d,%lld,%lld,%g,%.4f,%lld,%lld,%lld,%g,%g,%d,%llu,%llu,%llu,%llu,%.4f,"
            "%.4f,%.4f,%.4f,%.5f,%.5f,%.5f,%.5f,%.4f,%.4f,%.4f,%.4f,%.4f,%llu,%.1f,%.4f,%llu,%llu,"
            "%llu,%llu,%llu\n",
            label, mc_conductor_policy_name(c->router.policy),
            mc_conductor_fetch_name(c->router.fetch), mc_conductor_evict_name(c->evict),
            c->colocated, (long long)c->prefill, (long long)c->decode, c->time_scale,
            r->span_s > 0 ? (double)r->requests / r->span_s : 0, (long long)c->local_blocks,
            (long long)c->pool_blocks, (long long)c->ssd_blocks, c->bw.pool_bw / GIB,
            c->event_loss, c->ignore_gaps, (unsigned long long)r->requests,
            (unsigned long long)r->completed, (unsigned long long)r->rejected,
            (unsigned long long)r->good, r->ttft_p50, r->ttft_p90, r->ttft_p99, r->ttft_mean,
            r->itl_p50, r->itl_p90, r->itl_p99, r->tpot_p99, r->goodput_rps, r->goodput_share,
            r->block_hit_ratio, r->token_hit_ratio, r->compute_saved,
            (unsigned long long)r->remote_reuse_blocks, r->fetch_net_bytes / GIB, r->prefill_util,
            (unsigned long long)r->index_gaps, (unsigned long long)r->index_resyncs,
            (unsigned long long)r->routes_while_stale, (unsigned long long)r->hint_overestimates,
            (unsigned long long)r->hint_overestimate_blocks);
}

static FILE *open_out(const opts_t *o, const char *name)
{
    if (!o->out_dir || !*o->out_dir)
        return NULL;
    if (mkdir(o->out_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "mc_sim: cannot create %s: %s\n", o->out_dir, strerror(errno));
        return NULL;
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", o->out_dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        fprintf(stderr, "mc_sim: cannot write %s: %s\n", path, strerror(errno));
    return f;
}

/* A results CSV with its header line written, or NULL without --out_dir. */
static FILE *open_csv(const opts_t *o, const char *name)
{
    FILE *f = open_out(o, name);
    if (f)
        fputs(CSV_HEADER, f);
    return f;
}

/* The end of an experiment: over a list flag, a list that did not parse (n_values <= 0) is an
 * error naming the flag (experiments without one pass n_values 1, flag NULL); closes the CSV.
 * Returns the experiment's status. */
static int exp_finish(FILE *f, int n_values, const char *flag, int rc)
{
    if (n_values <= 0) {
        fprintf(stderr, "mc_sim: bad --%s\n", flag);
        rc = 2;
    }
    if (f)
        fclose(f);
    return rc;
}

/* Parse "a,b,c" into doubles (at most cap). */
static int parse_list(const char *s, double *v, int cap)
{
    int n = 0;
    const char *p = s;
    while (*p && n < cap) {
        char *end;
        errno = 0;
        double x = strtod(p, &end);
        if (end == p || errno)
            return -1;
        v[n++] = x;
        p = end;
        while (*p == ',' || *p == ' ')
            p++;
    }
    return n;
}

static int run_one(const mc_conductor_trace_t *t, const char *label,
                   const mc_conductor_sim_config_t *c, FILE *csv, FILE *per_request)
{
    mc_conductor_sim_result_t r;
    mc_status_t st = mc_conductor_sim_run(t, c, &r, per_request);
    if (st != MC_OK) {
        fprintf(stderr, "mc_sim: run %s failed: %s\n", label, mc_status_str(st));
        return -1;
    }
    print_result(stdout, label, c, &r);
    csv_row(csv, label, c, &r);
    fflush(stdout);
    return 0;
}

/* run_one, with the per-request rows in out_dir/name when name is not NULL (open_out; none
 * when there is no out_dir or it cannot be written). */
static int run_one_out(const opts_t *o, const mc_conductor_trace_t *t, const char *label,
                       const mc_conductor_sim_config_t *c, FILE *csv, const char *name)
{
    FILE *pr = name ? open_out(o, name) : NULL;
    int rc = run_one(t, label, c, csv, pr);
    if (pr)
        fclose(pr);
    return rc;
}

/* --experiment=trace_stats: the trace facts (requests, blocks, distinct, prefix hits). */
static int exp_trace_stats(const opts_t *o, const mc_conductor_sim_config_t *cfg,
                           const mc_conductor_trace_t *t)
{
    int rc = 0;
    mc_conductor_trace_stats_t s;
    if (mc_conductor_trace_stats(t, &s) != MC_OK)
        rc = 1;
    else
        printf("{\"requests\":%llu,\"blocks_requested\":%llu,\"blocks_distinct\":%llu,"
               "\"prefix_hit_blocks\":%llu,\"prefix_hit_ratio\":%.4f,\"mean_input_tokens\":%.1f,"
               "\"mean_output_tokens\":%.1f,\"duration_s\":%.1f,\"rate_rps\":%.3f}\n",
               (unsigned long long)s.requests, (unsigned long long)s.blocks_requested,
               (unsigned long long)s.blocks_distinct, (unsigned long long)s.prefix_hit_blocks,
               s.prefix_hit_ratio, (double)s.input_tokens / (double)(s.requests ? s.requests : 1),
               (double)s.output_tokens / (double)(s.requests ? s.requests : 1), s.duration_s,
               s.duration_s > 0 ? (double)s.requests / s.duration_s : 0);
    return rc;
}

/* --experiment=run: one simulation; JSON result on stdout, --csv per-request rows. */
static int exp_run(const opts_t *o, const mc_conductor_sim_config_t *cfg,
                   const mc_conductor_trace_t *t)
{
    int rc = 0;
    FILE *pr = NULL;
    if (o->csv && *o->csv && !(pr = fopen(o->csv, "w"))) {
        fprintf(stderr, "mc_sim: cannot write %s: %s\n", o->csv, strerror(errno));
        rc = 1;
    } else {
        rc = run_one(t, "run", cfg, NULL, pr) ? 1 : 0;
        if (pr)
            fclose(pr);
    }
    return rc;
}

/* --experiment=local_vs_global: no cache / per-instance local caches / global pool / pool+SSD,
 * with the same total DRAM. */
static int exp_local_vs_global(const opts_t *o, const mc_conductor_sim_config_t *cfg,
                               const mc_conductor_trace_t *t)
{
    int rc = 0;
    FILE *f = open_csv(o, "local_vs_global.csv");
    int64_t total = o->pool_blocks;
    struct { const char *label; int64_t local, pool, ssd; int least_loaded; } v[] = {
        {"no_cache", 0, 0, 0, 0},
        {"local_only_least_loaded", total / cfg->prefill, 0, 0, 1},
        {"local_only", total / cfg->prefill, 0, 0, 0},
        {"global_pool", 0, total, 0, 0},
        {"global_pool_ssd", 0, total, total * 4, 0},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]) && rc == 0; i++) {
        mc_conductor_sim_config_t c = *cfg;
        if (v[i].least_loaded)
            c.router.policy = MC_CONDUCTOR_POLICY_LEAST_LOADED;
        c.local_blocks = v[i].local;
        c.pool_blocks = v[i].pool;
        c.ssd_blocks = v[i].ssd;
        char name[128];
        snprintf(name, sizeof(name), "ttft_%s.csv", v[i].label);
        rc = run_one_out(o, t, v[i].label, &c, f, name);
    }
    return exp_finish(f, 1, NULL, rc);
}

/* --experiment=routing: policies x rate multipliers; per-request rows for --cdf_rate. */
static int exp_routing(const opts_t *o, const mc_conductor_sim_config_t *cfg,
                       const mc_conductor_trace_t *t)
{
    int rc = 0;
    double rates[32];
    int nr = parse_list(o->rates, rates, 32);
    FILE *f = open_csv(o, "routing.csv");
    char pol[256];
    snprintf(pol, sizeof(pol), "%s", o->policies);
    for (char *save = NULL, *p = strtok_r(pol, ",", &save); p && rc == 0;
         p = strtok_r(NULL, ",", &save)) {
        mc_conductor_sim_config_t c = *cfg;
        if (mc_conductor_policy_parse(p, &c.router.policy) != MC_OK) {
            fprintf(stderr, "mc_sim: unknown policy %s\n", p);
            rc = 2;
            break;
        }
        for (int i = 0; i < nr && rc == 0; i++) {
            c.time_scale = rates[i];
            char name[128];
            snprintf(name, sizeof(name), "ttft_%s_x%g.csv", p, rates[i]);
            rc = run_one_out(o, t, p, &c, f, rates[i] == o->cdf_rate ? name : NULL);
        }
    }
    return exp_finish(f, nr, "rates", rc);
}

/* --experiment=pd_vs_colocated: disaggregated P+D vs the same GPUs colocated, x rates. */
static int exp_pd_vs_colocated(const opts_t *o, const mc_conductor_sim_config_t *cfg,
                               const mc_conductor_trace_t *t)
{
    int rc = 0;
    double rates[32];
    int nr = parse_list(o->rates, rates, 32);
    FILE *f = open_csv(o, "pd_vs_colocated.csv");
    for (int k = 0; k < 2 && rc == 0; k++) {
        for (int i = 0; i < nr && rc == 0; i++) {
            mc_conductor_sim_config_t c = *cfg;
            c.colocated = k;
            c.time_scale = rates[i];
            rc = run_one(t, k ? "colocated" : "disaggregated", &c, f, NULL);
        }
    }
    return exp_finish(f, nr, "rates", rc);
}

/* --experiment=cache_sweep: cache-only replay: capacities x every eviction policy vs Belady.
 * The CSV keeps its first columns (lru, lfu, fifo, belady, their prefix ratios) and appends the
 * newer policies after them. */
static int exp_cache_sweep(const opts_t *o, const mc_conductor_sim_config_t *cfg,
                           const mc_conductor_trace_t *t)
{
    int rc = 0;
    double caps[64];
    int nc = parse_list(o->capacities, caps, 64);
    FILE *f = open_out(o, "cache_sweep.csv");
    enum { NP = MC_CONDUCTOR_EVICT_N };
    if (f) {
        fprintf(f, "capacity_blocks,capacity_gib,lru,lfu,fifo,belady,lru_prefix,lfu_prefix,"
                   "fifo_prefix");
        for (int p = 3; p < NP; p++)
            fprintf(f, ",%s,%s_prefix", mc_conductor_evict_name((mc_conductor_evict_t)p),
                    mc_conductor_evict_name((mc_conductor_evict_t)p));
        fputc('\n', f);
    }
    double bb = mc_conductor_block_bytes(&cfg->model);
    for (int i = 0; i < nc && rc == 0; i++) {
        mc_conductor_replay_result_t r[NP], bel;
        for (int p = 0; p < NP && rc == 0; p++)
            if (mc_conductor_cache_replay(t, 0, (size_t)caps[i], (mc_conductor_evict_t)p, 0,
                                          &cfg->evict_tuning, &r[p]) != MC_OK)
                rc = 1;
        if (rc || mc_conductor_cache_replay(t, 0, (size_t)caps[i], 0, 1, NULL, &bel) != MC_OK) {
            rc = 1;
            break;
        }
        const char *src = o->workload && *o->workload ? o->workload : o->trace;
        const char *base = strrchr(src, '/');
        printf("{\"experiment\":\"cache_sweep\",\"trace\":\"%s\",\"capacity_blocks\":%.0f,"
               "\"capacity_gib\":%.0f,\"accesses\":%llu,\"belady\":%.4f",
               base ? base + 1 : src, caps[i], caps[i] * bb / GIB,
               (unsigned long long)r[0].accesses, bel.hit_ratio);
        for (int p = 0; p < NP; p++)
            printf(",\"%s\":%.4f", mc_conductor_evict_name((mc_conductor_evict_t)p),
                   r[p].hit_ratio);
        for (int p = 0; p < NP; p++)
            printf(",\"%s_prefix\":%.4f", mc_conductor_evict_name((mc_conductor_evict_t)p),
                   r[p].prefix_hit_ratio);
        printf(",\"belady_hits\":%llu", (unsigned long long)bel.hits);
        for (int p = 0; p < NP; p++)
            printf(",\"%s_hits\":%llu", mc_conductor_evict_name((mc_conductor_evict_t)p),
                   (unsigned long long)r[p].hits);
        printf("}\n");
        if (f) {
            fprintf(f, "%.0f,%.0f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f", caps[i],
                    caps[i] * bb / GIB, r[0].hit_ratio, r[1].hit_ratio, r[2].hit_ratio,
                    bel.hit_ratio, r[0].prefix_hit_ratio, r[1].prefix_hit_ratio,
                    r[2].prefix_hit_ratio);
            for (int p = 3; p < NP; p++)
                fprintf(f, ",%.4f,%.4f", r[p].hit_ratio, r[p].prefix_hit_ratio);
            fputc('\n', f);
        }
    }
    return exp_finish(f, nc, "capacities", rc);
}

/* --experiment=bandwidth_sweep: network bandwidths x fetch policy. */
static int exp_bandwidth_sweep(const opts_t *o, const mc_conductor_sim_config_t *cfg,
                               const mc_conductor_trace_t *t)
{
    int rc = 0;
    double bws[64];
    int nb = parse_list(o->bandwidths, bws, 64);
    FILE *f = open_csv(o, "bandwidth_sweep.csv");
    static const char *fetches[] = {"cost", "always", "never"};
    for (int i = 0; i < nb && rc == 0; i++) {
        for (int k = 0; k < 3 && rc == 0; k++) {
            mc_conductor_sim_config_t c = *cfg;
            c.bw.pool_bw = bws[i] * GIB;
            c.handoff_bw = cfg->handoff_bw; /* hand-off path held fixed: only fetch varies */
            mc_conductor_fetch_parse(fetches[k], &c.router.fetch);
            rc = run_one(t, fetches[k], &c, f, NULL);
        }
    }
    return exp_finish(f, nb, "bandwidths", rc);
}

/* --experiment=failure: index event loss with gap detection + resync vs without. */
static int exp_failure(const opts_t *o, const mc_conductor_sim_config_t *cfg,
                       const mc_conductor_trace_t *t)
{
    int rc = 0;
    FILE *f = open_csv(o, "failure.csv");
    double loss = o->event_loss > 0 ? o->event_loss : 0.01;
    struct { const char *label; double loss; int ignore, hints; } v[] = {
        {"no_loss", 0, 0, 0},
        {"loss_resync_blind", loss, 0, 0},
        {"loss_resync_stale_hints", loss, 0, 1},
        {"loss_no_gap_detection", loss, 1, 0},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]) && rc == 0; i++) {
        mc_conductor_sim_config_t c = *cfg;
        c.event_loss = v[i].loss;
        c.ignore_gaps = v[i].ignore;
        c.stale_hints = v[i].hints;
        rc = run_one(t, v[i].label, &c, f, NULL);
    }
    return exp_finish(f, 1, NULL, rc);
}

static const struct experiment {
    const char *name;
    int (*fn)(const opts_t *o, const mc_conductor_sim_config_t *cfg,
              const mc_conductor_trace_t *t);
} EXPERIMENTS[] = {
    {"trace_stats", exp_trace_stats},
    {"run", exp_run},
    {"local_vs_global", exp_local_vs_global},
    {"routing", exp_routing},
    {"pd_vs_colocated", exp_pd_vs_colocated},
    {"cache_sweep", exp_cache_sweep},
    {"bandwidth_sweep", exp_bandwidth_sweep},
    {"failure", exp_failure},
};

/* Parses the command line (and --config_path) into o: -1 to go on, else main's exit status. */
static int parse_flags(opts_t *o, int argc, char **argv)
{
    *o = (opts_t){
        .trace = "data/traces/conversation_trace.jsonl",
        .experiment = "run", .out_dir = "", .csv = "", .dtype = "bf16",
        .policy = "cache_aware", .fetch = "cost", .evict = "lru",
        .rates = "0.5,1,1.5,2,2.5,3", .capacities = "1000,2000,5000,10000,20000,50000,100000,200000",
        .bandwidths = "0.1,0.25,0.5,1,1.5,2.5,5,10,20,50",
        .policies = "random,least_loaded,cache_aware,cache_aware_slo",
        .max_requests = 0, .prefill = 8, .decode = 4, .local_blocks = 0, .pool_blocks = 50000,
        .ssd_blocks = 0, .max_batch = 128, .degrade_output_tokens = 64, .seed = 1,
        .layers = 32, .kv_heads = 8, .q_heads = 32, .head_dim = 128, .block_tokens = 512,
        .time_scale = 1, .params_b = 8.03, .gpu_tflops = 312, .mfu = 0.5, .hbm_gb_s = 2000,
        .hbm_gb = 80, .local_gib_s = 25, .net_gib_s = 20, .ssd_gib_s = 3, .handoff_gib_s = 20,
        .latency_us = 200, .ttft_slo_s = 10, .itl_slo_ms = 100, .queue_budget_s = 5,
        .event_loss = 0, .resync_s = 1, .log_level = "error", .cdf_rate = 1.5, .workload = "", .workload_scale = 1.0,
        .measured_store = "",
    };
    mc_option_t opt[] = {
        {"trace", MC_OPT_STRING, &o->trace, "MC_TRACE", "trace file (JSON lines, FAST'25 format)", 0, 0},
        {"workload", MC_OPT_STRING, &o->workload, NULL, "instead of --trace, a synthetic trace: zipf|zipf_shift|recency|scan_hot|loop|conv_short|conv_long|conv_shared|docs (src/conductor/workload.h; --seed)", 0, 0},
        {"workload_scale", MC_OPT_DOUBLE, &o->workload_scale, NULL, "--workload: requests multiplier (1 = about 250 000 block accesses)", 1e-6, 100},
        {"experiment", MC_OPT_STRING, &o->experiment, NULL,
         "run|local_vs_global|routing|pd_vs_colocated|cache_sweep|bandwidth_sweep|failure|trace_stats", 0, 0},
        {"out_dir", MC_OPT_STRING, &o->out_dir, NULL, "directory for experiment CSV files", 0, 0},
        {"csv", MC_OPT_STRING, &o->csv, NULL, "run: write per-request rows to this CSV file", 0, 0},
        {"max_requests", MC_OPT_INT, &o->max_requests, NULL, "use the first N requests (0 = all)", 0, 1e9},
        {"time_scale", MC_OPT_DOUBLE, &o->time_scale, NULL, "rate multiplier: arrivals at timestamp/scale", 1e-6, 1e6},
        {"seed", MC_OPT_INT, &o->seed, NULL, "RNG seed (random routing, event loss)", 0, 9e18},
        {"prefill", MC_OPT_INT, &o->prefill, NULL, "prefill instances", 1, 1024},
        {"decode", MC_OPT_INT, &o->decode, NULL, "decode instances", 0, 1024},
        {"colocated", MC_OPT_BOOL, &o->colocated, NULL, "baseline: prefill+decode instances each do both", 0, 0},
        {"policy", MC_OPT_STRING, &o->policy, NULL, "random|least_loaded|cache_aware|cache_aware_slo", 0, 0},
        {"fetch", MC_OPT_STRING, &o->fetch, NULL, "cost|always|never: remote prefix fetch policy", 0, 0},
        {"evict", MC_OPT_STRING, &o->evict, NULL, "lru|lfu|fifo|slru|s3fifo|adaptive|slru_tinylfu (every cache tier)", 0, 0},
        {"probation_permille", MC_OPT_INT, &o->probation_permille, NULL, "slru: probation share in permille (0 = 20); adaptive: initial share (0 = warm-up, 975)", 0, 1000},
        {"ghost_factor", MC_OPT_INT, &o->ghost_factor, NULL, "slru/adaptive: ghost keys per cache entry (0 = 5)", 0, 64},
        {"local_blocks", MC_OPT_INT, &o->local_blocks, NULL, "per prefill instance private cache (512-token blocks)", 0, 4e9},
        {"pool_blocks", MC_OPT_INT, &o->pool_blocks, NULL, "shared DRAM pool capacity (blocks; 64 MiB each by default)", 0, 4e9},
        {"ssd_blocks", MC_OPT_INT, &o->ssd_blocks, NULL, "shared SSD tier capacity (blocks)", 0, 4e9},
        {"local_gib_s", MC_OPT_DOUBLE, &o->local_gib_s, NULL, "own-host DRAM -> GPU GiB/s", 1e-6, 1e6},
        {"net_gib_s", MC_OPT_DOUBLE, &o->net_gib_s, NULL, "remote pool fetch GiB/s per instance", 1e-6, 1e6},
        {"ssd_gib_s", MC_OPT_DOUBLE, &o->ssd_gib_s, NULL, "SSD tier read GiB/s", 1e-6, 1e6},
        {"handoff_gib_s", MC_OPT_DOUBLE, &o->handoff_gib_s, NULL, "prefill->decode KV hand-off GiB/s", 1e-6, 1e6},
        {"latency_us", MC_OPT_DOUBLE, &o->latency_us, NULL, "per remote transfer latency", 0, 1e9},
        {"ttft_slo_s", MC_OPT_DOUBLE, &o->ttft_slo_s, NULL, "TTFT SLO seconds", 1e-6, 1e6},
        {"itl_slo_ms", MC_OPT_DOUBLE, &o->itl_slo_ms, NULL, "inter-token (per request mean) SLO ms", 1e-6, 1e9},
        {"queue_budget_s", MC_OPT_DOUBLE, &o->queue_budget_s, NULL, "cache_aware_slo: wait tolerated beyond the SLO before rejecting", 0, 1e6},
        {"allow_degrade", MC_OPT_BOOL, &o->allow_degrade, NULL, "cache_aware_slo: cap output when decode is saturated", 0, 0},
        {"degrade_output_tokens", MC_OPT_INT, &o->degrade_output_tokens, NULL, "output cap when degraded", 1, 1e9},
        {"max_batch", MC_OPT_INT, &o->max_batch, NULL, "decode batch cap", 1, 65536},
        {"event_loss", MC_OPT_DOUBLE, &o->event_loss, NULL, "probability an index event is lost", 0, 1},
        {"resync_s", MC_OPT_DOUBLE, &o->resync_s, NULL, "gap detection -> resync completed, seconds", 0, 1e6},
        {"ignore_gaps", MC_OPT_BOOL, &o->ignore_gaps, NULL, "failure mode: subscriber without gap detection", 0, 0},
        {"stale_hints", MC_OPT_BOOL, &o->stale_hints, NULL, "while the index is stale, route on its flagged answers (the engine re-checks)", 0, 0},
        {"layers", MC_OPT_INT, &o->layers, NULL, "model layers", 1, 100000},
        {"kv_heads", MC_OPT_INT, &o->kv_heads, NULL, "KV heads", 1, 100000},
        {"q_heads", MC_OPT_INT, &o->q_heads, NULL, "query heads (attention FLOPs)", 1, 100000},
        {"head_dim", MC_OPT_INT, &o->head_dim, NULL, "head dimension", 1, 100000},
        {"dtype", MC_OPT_STRING, &o->dtype, NULL, "KV dtype bf16|fp16|fp32|fp8|int8", 0, 0},
        {"params_b", MC_OPT_DOUBLE, &o->params_b, NULL, "model parameters, billions", 1e-6, 1e6},
        {"gpu_tflops", MC_OPT_DOUBLE, &o->gpu_tflops, NULL, "GPU dense peak TFLOP/s", 1e-6, 1e9},
        {"mfu", MC_OPT_DOUBLE, &o->mfu, NULL, "achieved fraction of peak in prefill", 1e-6, 1},
        {"hbm_gb_s", MC_OPT_DOUBLE, &o->hbm_gb_s, NULL, "HBM bandwidth GB/s (decode)", 1e-6, 1e9},
        {"hbm_gb", MC_OPT_DOUBLE, &o->hbm_gb, NULL, "GPU memory GB", 1e-6, 1e9},
        {"block_tokens", MC_OPT_INT, &o->block_tokens, NULL, "tokens per trace block", 1, 1e6},
        {"rates", MC_OPT_STRING, &o->rates, NULL, "routing: rate multipliers (time_scale list)", 0, 0},
        {"cdf_rate", MC_OPT_DOUBLE, &o->cdf_rate, NULL, "routing: rate multiplier whose per-request rows go to <out_dir>/ttft_<policy>_x<rate>.csv", 0, 1e6},
        {"policies", MC_OPT_STRING, &o->policies, NULL, "routing: policies to compare", 0, 0},
        {"capacities", MC_OPT_STRING, &o->capacities, NULL, "cache_sweep: capacities in blocks", 0, 0},
        {"bandwidths", MC_OPT_STRING, &o->bandwidths, NULL, "bandwidth_sweep: GiB/s list", 0, 0},
        {"measured_store", MC_OPT_STRING, &o->measured_store, NULL,
         "live mode: store profile from mc_store_replay --profile_out; pool fetch, write-back and "
         "exist costs come from it (fixed per call + block bytes / measured bandwidth) instead of "
         "--net_gib_s/--latency_us and free writes", 0, 0},
        {"log_level", MC_OPT_STRING, &o->log_level, "MC_LOG_LEVEL", "debug|info|warn|error|off (gap warnings are counted in the results)", 0, 0},
    };
    mc_config_spec_t spec = {
        "mc_sim",
        "Trace-driven serving simulator for a shared KV cache (prefill/decode disaggregated or\n"
        "colocated), with per-instance local caches, a global DRAM pool, an optional SSD tier,\n"
        "the conductor's prefix index and router, and cache-only replays of every eviction\n"
        "policy with Belady's bound, on the trace or on a synthetic --workload.\n"
        "Experiments: run, local_vs_global, routing, pd_vs_colocated, cache_sweep,\n"
        "bandwidth_sweep, failure,"
        "trace_stats. Deterministic for the same flags and --seed. Formulas and assumptions:\n"
        "docs/internals/simulator.md.",
        opt, sizeof(opt) / sizeof(opt[0])};
    return mc_config_main(&spec, argc, argv);
}

int main(int argc, char **argv)
{
    opts_t o;
    int main_rc = parse_flags(&o, argc, argv);
    if (main_rc >= 0)
        return main_rc;
    mc_conductor_sim_config_t cfg;
    if (build_cfg(&o, &cfg) != 0)
        return 2;
    mc_conductor_trace_limits_t lim;
    mc_conductor_trace_limits_default(&lim);
    if (o.max_requests > 0)
        lim.max_requests = (size_t)o.max_requests;
    mc_conductor_trace_t *t;
    mc_status_t st;
    if (o.workload && *o.workload)
        st = mc_conductor_workload_generate(o.workload, (uint64_t)o.seed, o.workload_scale, &t);
    else
        st = mc_conductor_trace_load(o.trace, &lim, &t);
    if (st != MC_OK) {
        fprintf(stderr, "mc_sim: cannot %s %s: %s\n", o.workload && *o.workload ? "generate workload" : "load trace",
                o.workload && *o.workload ? o.workload : o.trace, mc_status_str(st));
        return 1;
    }
    int rc = 2;
    size_t i = 0;
    while (i < sizeof(EXPERIMENTS) / sizeof(EXPERIMENTS[0]) &&
           strcmp(o.experiment, EXPERIMENTS[i].name) != 0)
        i++;
    if (i < sizeof(EXPERIMENTS) / sizeof(EXPERIMENTS[0]))
        rc = EXPERIMENTS[i].fn(&o, &cfg, t);
    else
        fprintf(stderr, "mc_sim: unknown experiment '%s' (see --help)\n", o.experiment);
    mc_conductor_trace_free(t);
    return rc;
}
