/* Serving simulator (model in sim.h and docs/internals/simulator.md): a discrete-event loop over
 * a time-ordered heap of arrivals, instance completions, P->D hand-offs and resyncs. Each run
 * has phases: setup (arrays, index, caches, instances, requests), the event loop, then results
 * (per-request CSV, percentiles and ratios). Cache evictions and commits become index events,
 * some dropped when event_loss is set; a gap schedules a resync from the caches' contents
 * resync_s later. Everything random draws from the config's seed, so a run is reproducible.
 * Also here: the cache-only replay (mc_conductor_cache_replay). */
#include "conductor/sim.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"
#include "conductor/index.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NONE (-1)
#define ITL_BINS 3000
#define ITL_BASE 1e-6
#define ITL_GROWTH 1.01

void mc_conductor_sim_config_default(mc_conductor_sim_config_t *c)
{
    memset(c, 0, sizeof(*c));
    mc_conductor_model_default(&c->model);
    mc_conductor_router_config_default(&c->router);
    c->bw.local_bw = 25.0 * (1 << 30);  /* PCIe-class host DRAM -> GPU */
    c->bw.pool_bw = 20.0 * (1 << 30);   /* the seed's per-endpoint figure */
    c->bw.ssd_bw = 3.0 * (1 << 30);
    c->bw.latency_s = 0.0002;
    c->handoff_bw = 20.0 * (1 << 30);
    c->prefill = 8;
    c->decode = 4;
    c->colocated = 0;
    c->time_scale = 1.0;
    c->seed = 1;
    c->local_blocks = 0;
    c->pool_blocks = 100000;
    c->ssd_blocks = 0;
    c->evict = MC_CONDUCTOR_EVICT_LRU;
    c->itl_slo_s = 0.1;
    c->max_batch = 128;
    c->degrade_output_tokens = 64;
    c->event_loss = 0;
    c->resync_s = 1.0;
}

enum { EV_ARRIVAL = 0, EV_INST_DONE = 1, EV_HANDOFF = 2, EV_RESYNC = 3 };
enum { RUN_IDLE = 0, RUN_PREFILL = 1, RUN_DECODE = 2, RUN_WRITEBACK = 3 };

typedef struct sim_ev {
    double t;
    uint64_t seq;
    int type, a;
} sim_ev_t;

typedef struct sim_req {
    const mc_conductor_request_t *r;
    double arrival, start, end_prefill, first_token, finish, last_token;
    double pred_service, fetch_s, prefill_s, kv_need, ctx;
    int inst, dinst, next;
    uint32_t out_target, out_done, idx_any, real_any, reuse, remote, ssd;
    mc_conductor_decision_t decision;
    int done;
} sim_req_t;

struct sim;
typedef struct cache_arg {
    struct sim *s;
    int inst; /* -1 pool, -2 ssd */
} cache_arg_t;

typedef struct sim_inst {
    int can_prefill, can_decode;
    int pq_head, pq_tail;      /* prefill FIFO (linked through req.next) */
    int dq_head, dq_tail;      /* decode admission FIFO */
    double backlog;            /* predicted service of queued prefills */
    int running, running_req;
    double busy_until, step_len;
    int *batch;
    size_t nbatch;
    double batch_ctx, kv_reserved;
    mc_conductor_cache_t local;
    cache_arg_t local_arg;
    uint32_t host_id;
    int seg_local, seg_pool;   /* segment name indices */
} sim_inst_t;

typedef struct sim {
    const mc_conductor_sim_config_t *cfg;
    mc_conductor_bandwidth_t bw; /* cfg->bw, with the pool terms of a measured store profile */
    const mc_conductor_trace_t *trace;
    mc_conductor_sim_result_t *res;
    sim_req_t *reqs;
    size_t nreq;
    sim_inst_t *inst;
    int ninst, nprefill_cand;
    sim_ev_t *heap;
    size_t nheap, capheap;
    uint64_t evseq;
    double now;
    uint64_t rng;
    mc_conductor_cache_t pool, ssd;
    cache_arg_t pool_arg, ssd_arg;
    mc_conductor_index_t *idx;
    uint64_t pub_seq;
    int resync_pending;
    char (*seg_names)[32];
    char (*host_names)[32];
    uint32_t *cand_hosts;
    mc_conductor_candidate_t *cands;
    mc_conductor_prefix_t *prefixes;
    double *ttfts, *tpots;
    size_t nttft;
    uint64_t itl_hist[ITL_BINS];
    uint64_t itl_count;
    double kv_cap, block_bytes, kvpt;
    mc_status_t err;
} sim_t;

/* ---- event heap ---- */
static int ev_less(const sim_ev_t *a, const sim_ev_t *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static void ev_push(sim_t *s, double t, int type, int a)
{
    if (mc_array_reserve(&s->heap, &s->capheap, s->nheap + 1, 1024) != MC_OK) {
        s->err = MC_ERR_NO_MEMORY;
        return;
    }
    sim_ev_t e = {t, s->evseq++, type, a};
    size_t i = s->nheap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ev_less(&e, &s->heap[p]))
            break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = e;
}

static sim_ev_t ev_pop(sim_t *s)
{
    sim_ev_t top = s->heap[0], last = s->heap[--s->nheap];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const sim_ev_t *mv = &last;
        if (l < s->nheap && ev_less(&s->heap[l], mv)) {
            m = l;
            mv = &s->heap[l];
        }
        if (r < s->nheap && ev_less(&s->heap[r], mv))
            m = r;
        if (m == i)
            break;
        s->heap[i] = s->heap[m];
        i = m;
    }
    if (s->nheap)
        s->heap[i] = last;
    return top;
}

/* ---- index events ---- */
static void emit(sim_t *s, mc_conductor_event_kind_t kind, uint64_t hash, int seg,
                 const char *host, mc_conductor_tier_t tier)
{
    s->res->index_events++;
    s->pub_seq++;
    if (s->cfg->event_loss > 0 && mc_conductor_rand01(&s->rng) < s->cfg->event_loss) {
        s->res->index_events_lost++;
        return;
    }
    mc_conductor_index_stats_t st;
    mc_conductor_index_get_stats(s->idx, &st);
    /* A subscriber without gap detection simply applies what arrives. */
    uint64_t seq = s->cfg->ignore_gaps ? st.next_seq : s->pub_seq;
    mc_conductor_event_t ev = {seq, kind, hash, (uint64_t)s->block_bytes, s->seg_names[seg], host,
                               tier};
    mc_status_t rc = mc_conductor_index_apply(s->idx, &ev);
    if (rc == MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS && !s->resync_pending) {
        s->resync_pending = 1;
        ev_push(s, s->now + s->cfg->resync_s, EV_RESYNC, 0);
    }
}

static void on_local_evict(void *arg, uint64_t hash, uint32_t owner)
{
    cache_arg_t *a = arg;
    sim_t *s = a->s;
    sim_inst_t *in = &s->inst[a->inst];
    emit(s, MC_CONDUCTOR_EV_EVICTED, hash, in->seg_local, s->host_names[a->inst],
         MC_CONDUCTOR_TIER_LOCAL);
}

static void on_ssd_evict(void *arg, uint64_t hash, uint32_t owner)
{
    cache_arg_t *a = arg;
    emit(a->s, MC_CONDUCTOR_EV_EVICTED, hash, a->s->ninst * 2, "ssd", MC_CONDUCTOR_TIER_SSD);
}

static void on_pool_evict(void *arg, uint64_t hash, uint32_t owner)
{
    cache_arg_t *a = arg;
    sim_t *s = a->s;
    emit(s, MC_CONDUCTOR_EV_EVICTED, hash, s->inst[owner].seg_pool, s->host_names[owner],
         MC_CONDUCTOR_TIER_POOL);
    if (s->cfg->ssd_blocks > 0 && mc_conductor_cache_insert(&s->ssd, hash, 0)) {
        s->res->ssd_write_bytes += s->block_bytes;
        emit(s, MC_CONDUCTOR_EV_COMMITTED, hash, s->ninst * 2, "ssd", MC_CONDUCTOR_TIER_SSD);
    }
}

typedef struct resync_arg {
    sim_t *s;
    int tier, inst; /* inst: the local cache's instance (the pool names the owner per block) */
} resync_arg_t;

static void resync_add(void *arg, uint64_t hash, uint32_t owner)
{
    resync_arg_t *a = arg;
    sim_t *s = a->s;
    if (a->tier == MC_CONDUCTOR_TIER_LOCAL)
        mc_conductor_index_snapshot_add(s->idx, hash, s->seg_names[s->inst[a->inst].seg_local],
                                        s->host_names[a->inst], MC_CONDUCTOR_TIER_LOCAL);
    else if (a->tier == MC_CONDUCTOR_TIER_POOL)
        mc_conductor_index_snapshot_add(s->idx, hash, s->seg_names[s->inst[owner].seg_pool],
                                        s->host_names[owner], MC_CONDUCTOR_TIER_POOL);
    else
        mc_conductor_index_snapshot_add(s->idx, hash, "ssd", "ssd", MC_CONDUCTOR_TIER_SSD);
}

static void do_resync(sim_t *s)
{
    s->resync_pending = 0;
    mc_conductor_index_resync_begin(s->idx);
    for (int i = 0; i < s->ninst; i++) {
        resync_arg_t a = {s, MC_CONDUCTOR_TIER_LOCAL, i};
        mc_conductor_cache_foreach(&s->inst[i].local, resync_add, &a);
    }
    resync_arg_t ap = {s, MC_CONDUCTOR_TIER_POOL, 0}, as = {s, MC_CONDUCTOR_TIER_SSD, 0};
    mc_conductor_cache_foreach(&s->pool, resync_add, &ap);
    mc_conductor_cache_foreach(&s->ssd, resync_add, &as);
    mc_conductor_index_resync_end(s->idx, s->pub_seq + 1);
}

/* ---- helpers ---- */
/* Measured store: every request asks the pool which of its n blocks exist (one batch exist). */
static double store_exist_s(const sim_t *s, uint32_t n)
{
    const mc_conductor_store_cost_t *sc = &s->cfg->store;
    return sc->enabled && s->cfg->pool_blocks > 0 ? sc->exist_s + n * sc->exist_block_s : 0;
}

static void pool_insert_blocks(sim_t *s, int i, const sim_req_t *rq)
{
    const uint64_t *b = mc_conductor_trace_req_blocks(s->trace, rq->r);
    for (uint32_t j = 0; j < rq->r->n_blocks; j++)
        if (mc_conductor_cache_insert(&s->pool, b[j], (uint32_t)i))
            emit(s, MC_CONDUCTOR_EV_COMMITTED, b[j], s->inst[i].seg_pool, s->host_names[i],
                 MC_CONDUCTOR_TIER_POOL);
}

static int index_stale(const sim_t *s)
{
    mc_conductor_index_stats_t st;
    mc_conductor_index_get_stats(s->idx, &st);
    return st.state != MC_CONDUCTOR_INDEX_OK;
}

static double inst_queue_s(const sim_t *s, const sim_inst_t *in)
{
    double q = in->backlog;
    if (in->running != RUN_IDLE && in->busy_until > s->now)
        q += in->busy_until - s->now;
    return q;
}

/* Real contiguous availability of req's blocks for instance i (same semantics as the index). */
static mc_conductor_prefix_t real_prefix(sim_t *s, int i, const uint64_t *b, uint32_t n)
{
    mc_conductor_prefix_t p = {0, 0, 0};
    int al = 1, ap = 1;
    for (uint32_t j = 0; j < n; j++) {
        uint32_t owner;
        int on_host = mc_conductor_cache_lookup(&s->inst[i].local, b[j], 0, NULL);
        int in_pool = mc_conductor_cache_lookup(&s->pool, b[j], 0, &owner);
        on_host = on_host || (in_pool && (int)owner == i);
        int in_ssd = !on_host && !in_pool && mc_conductor_cache_lookup(&s->ssd, b[j], 0, NULL);
        if (!(on_host || in_pool || in_ssd))
            break;
        al = al && on_host;
        ap = ap && (on_host || in_pool);
        p.local += (uint32_t)al;
        p.pool += (uint32_t)ap;
        p.any++;
    }
    return p;
}

static void start_prefill(sim_t *s, int i)
{
    sim_inst_t *in = &s->inst[i];
    int q = in->pq_head;
    sim_req_t *rq = &s->reqs[q];
    in->pq_head = rq->next;
    if (in->pq_head == NONE)
        in->pq_tail = NONE;
    in->backlog -= rq->pred_service;
    if (in->backlog < 0)
        in->backlog = 0;
    const uint64_t *b = mc_conductor_trace_req_blocks(s->trace, rq->r);
    mc_conductor_candidate_t c = {(uint32_t)i, 0, 0, real_prefix(s, i, b, rq->r->n_blocks)};
    mc_conductor_estimate_t e;
    mc_conductor_estimate(&s->cfg->model, &s->bw, s->cfg->router.fetch, rq->r->input_tokens,
                          &c, &e);
    double exist_s = store_exist_s(s, rq->r->n_blocks);
    e.fetch_s += exist_s;
    s->res->store_exist_s += exist_s;
    rq->real_any = c.prefix.any;
    if (rq->idx_any > c.prefix.any) {
        s->res->hint_overestimates++;
        s->res->hint_overestimate_blocks += rq->idx_any - c.prefix.any;
    }
    for (uint32_t j = 0; j < e.reuse_blocks; j++) { /* a use: refresh recency/frequency */
        mc_conductor_cache_lookup(&in->local, b[j], 1, NULL);
        mc_conductor_cache_lookup(&s->pool, b[j], 1, NULL);
        mc_conductor_cache_lookup(&s->ssd, b[j], 1, NULL);
    }
    rq->reuse = e.reuse_blocks;
    rq->remote = e.remote_blocks;
    rq->ssd = e.ssd_blocks;
    rq->fetch_s = e.fetch_s;
    rq->prefill_s = e.prefill_s;
    rq->start = s->now;
    mc_conductor_sim_result_t *R = s->res;
    /* ratios are over served requests: a rejected request neither hits nor costs compute */
    R->blocks_requested += rq->r->n_blocks;
    R->input_tokens += rq->r->input_tokens;
    R->prefill_flops_nocache += mc_conductor_prefill_flops(&s->cfg->model, rq->r->input_tokens, 0);
    R->reuse_blocks += e.reuse_blocks;
    R->remote_reuse_blocks += e.remote_blocks;
    R->ssd_reuse_blocks += e.ssd_blocks;
    R->local_reuse_blocks += e.reuse_blocks - e.remote_blocks - e.ssd_blocks;
    R->reused_tokens += e.reuse_tokens;
    R->fetch_net_bytes += e.remote_blocks * s->block_bytes;
    R->ssd_read_bytes += e.ssd_blocks * s->block_bytes;
    R->prefill_flops += mc_conductor_prefill_flops(&s->cfg->model, e.new_tokens, e.reuse_tokens);
    double service = e.fetch_s + e.prefill_s;
    R->prefill_busy_s += service;
    in->running = RUN_PREFILL;
    in->running_req = q;
    in->busy_until = s->now + service;
    ev_push(s, in->busy_until, EV_INST_DONE, i);
}

static void finish_request(sim_t *s, sim_req_t *rq)
{
    rq->finish = s->now;
    rq->done = 1;
    s->res->completed++;
    double ttft = rq->first_token - rq->arrival;
    double tpot = rq->out_target > 1 ? (rq->finish - rq->first_token) / (rq->out_target - 1) : 0;
    s->ttfts[s->nttft] = ttft;
    s->tpots[s->nttft++] = tpot;
    if (ttft <= s->cfg->router.ttft_slo_s && tpot <= s->cfg->itl_slo_s &&
        rq->decision != MC_CONDUCTOR_DEGRADE)
        s->res->good++;
    if (s->now > s->res->makespan_s)
        s->res->makespan_s = s->now;
}

static void decode_admit(sim_t *s, int d)
{
    sim_inst_t *in = &s->inst[d];
    while (in->dq_head != NONE && (int64_t)in->nbatch < s->cfg->max_batch) {
        sim_req_t *rq = &s->reqs[in->dq_head];
        if (in->nbatch > 0 && in->kv_reserved + rq->kv_need > s->kv_cap)
            break;
        in->dq_head = rq->next;
        if (in->dq_head == NONE)
            in->dq_tail = NONE;
        /* colocated: the prefill produced the first token; disaggregated: the first token is
         * counted when the KV has landed and the request joined a decode batch */
        if (!s->cfg->colocated)
            rq->first_token = s->now;
        rq->last_token = rq->first_token;
        if (rq->out_target <= 1) {
            finish_request(s, rq);
            continue;
        }
        rq->ctx = rq->r->input_tokens + 1;
        in->kv_reserved += rq->kv_need;
        in->batch_ctx += rq->ctx;
        in->batch[in->nbatch++] = (int)(rq - s->reqs);
    }
}

static void next_activity(sim_t *s, int i)
{
    sim_inst_t *in = &s->inst[i];
    if (in->running != RUN_IDLE)
        return;
    if (in->can_prefill && in->pq_head != NONE) {
        start_prefill(s, i);
        return;
    }
    if (in->can_decode) {
        decode_admit(s, i);
        if (in->nbatch) {
            double step = mc_conductor_decode_step_s(&s->cfg->model, (double)in->nbatch,
                                                     in->batch_ctx);
            in->running = RUN_DECODE;
            in->step_len = step;
            in->busy_until = s->now + step;
            s->res->decode_busy_s += step;
            ev_push(s, in->busy_until, EV_INST_DONE, i);
        }
    }
}

static void enqueue_decode(sim_t *s, int d, int q)
{
    sim_inst_t *in = &s->inst[d];
    s->reqs[q].next = NONE;
    s->reqs[q].dinst = d;
    if (in->dq_tail == NONE)
        in->dq_head = q;
    else
        s->reqs[in->dq_tail].next = q;
    in->dq_tail = q;
}

static int pick_decode(sim_t *s)
{
    int best = NONE;
    double best_load = 0;
    for (int d = 0; d < s->ninst; d++) {
        sim_inst_t *in = &s->inst[d];
        if (!in->can_decode || in->can_prefill)
            continue;
        double load = in->kv_reserved;
        for (int q = in->dq_head; q != NONE; q = s->reqs[q].next)
            load += s->reqs[q].kv_need;
        if (best == NONE || load < best_load) {
            best = d;
            best_load = load;
        }
    }
    return best;
}

static void prefill_done(sim_t *s, int i)
{
    sim_inst_t *in = &s->inst[i];
    int q = in->running_req;
    sim_req_t *rq = &s->reqs[q];
    in->running = RUN_IDLE;
    rq->end_prefill = s->now;
    const uint64_t *b = mc_conductor_trace_req_blocks(s->trace, rq->r);
    uint32_t new_in_pool = 0;
    for (uint32_t j = 0; j < rq->r->n_blocks; j++) {
        if (mc_conductor_cache_insert(&in->local, b[j], (uint32_t)i))
            emit(s, MC_CONDUCTOR_EV_COMMITTED, b[j], in->seg_local, s->host_names[i],
                 MC_CONDUCTOR_TIER_LOCAL);
        if (s->cfg->pool_blocks > 0 && !mc_conductor_cache_lookup(&s->pool, b[j], 0, NULL))
            new_in_pool++;
    }
    if (s->cfg->pool_blocks > 0) {
        if (s->cfg->store.enabled && new_in_pool > 0) {
            /* measured store: the instance writes the new blocks back with one batch put and
             * is busy until it completes; the blocks become visible in the pool (and to the
             * index) only then. The hand-off below runs concurrently. */
            const mc_conductor_store_cost_t *sc = &s->cfg->store;
            double bytes = (double)new_in_pool * s->block_bytes;
            double wb = mc_conductor_store_call_s(sc->put_call_s, sc->put_bw, bytes);
            s->res->writeback_s += wb;
            s->res->writeback_bytes += bytes;
            s->res->prefill_busy_s += wb;
            in->running = RUN_WRITEBACK;
            in->running_req = q;
            in->busy_until = s->now + wb;
            ev_push(s, in->busy_until, EV_INST_DONE, i);
        } else {
            pool_insert_blocks(s, i, rq);
        }
    }
    if (s->cfg->colocated) {
        rq->first_token = s->now;
        enqueue_decode(s, i, q);
    } else {
        int d = pick_decode(s);
        double bytes = (double)rq->r->input_tokens * s->kvpt;
        s->res->handoff_net_bytes += bytes;
        rq->dinst = d;
        ev_push(s, s->now + mc_conductor_transfer_s(bytes, s->cfg->handoff_bw, s->cfg->bw.latency_s),
                EV_HANDOFF, q);
    }
}

static void writeback_done(sim_t *s, int i)
{
    sim_inst_t *in = &s->inst[i];
    in->running = RUN_IDLE;
    pool_insert_blocks(s, i, &s->reqs[in->running_req]);
}

static void decode_step_done(sim_t *s, int d)
{
    sim_inst_t *in = &s->inst[d];
    in->running = RUN_IDLE;
    for (size_t k = 0; k < in->nbatch;) {
        sim_req_t *rq = &s->reqs[in->batch[k]];
        double gap = s->now - rq->last_token;
        rq->last_token = s->now;
        rq->out_done++;
        rq->ctx += 1;
        in->batch_ctx += 1;
        int bin = gap > ITL_BASE ? (int)(log(gap / ITL_BASE) / log(ITL_GROWTH)) : 0;
        if (bin >= ITL_BINS)
            bin = ITL_BINS - 1;
        s->itl_hist[bin]++;
        s->itl_count++;
        if (rq->out_done + 1 >= rq->out_target) {
            in->kv_reserved -= rq->kv_need;
            in->batch_ctx -= rq->ctx;
            in->batch[k] = in->batch[--in->nbatch];
            finish_request(s, rq);
        } else {
            k++;
        }
    }
}

static int decode_ok(sim_t *s, double kv_need, double input_tokens)
{
    for (int d = 0; d < s->ninst; d++) {
        sim_inst_t *in = &s->inst[d];
        if (!in->can_decode)
            continue;
        size_t waiting = 0;
        double wkv = 0;
        for (int q = in->dq_head; q != NONE; q = s->reqs[q].next) {
            waiting++;
            wkv += s->reqs[q].kv_need;
        }
        double batch = (double)(in->nbatch + waiting + 1);
        if (batch > (double)s->cfg->max_batch || in->kv_reserved + wkv + kv_need > s->kv_cap)
            continue;
        double step = mc_conductor_decode_step_s(&s->cfg->model, batch, in->batch_ctx + input_tokens);
        if (step <= s->cfg->itl_slo_s)
            return 1;
    }
    return 0;
}

static void arrival(sim_t *s, int q)
{
    sim_req_t *rq = &s->reqs[q];
    const mc_conductor_sim_config_t *cfg = s->cfg;
    const uint64_t *b = mc_conductor_trace_req_blocks(s->trace, rq->r);
    int n = s->nprefill_cand;
    int stale = index_stale(s);
    if (stale)
        s->res->routes_while_stale++;
    /* a stale index is not consulted (cache-blind routing) unless the failure mode says so */
    unsigned flags = cfg->ignore_gaps || cfg->stale_hints ? MC_CONDUCTOR_QUERY_ALLOW_STALE : 0;
    mc_conductor_index_query(s->idx, b, rq->r->n_blocks, s->cand_hosts, (size_t)n, flags,
                             s->prefixes);
    for (int c = 0; c < n; c++) {
        s->cands[c].id = (uint32_t)c;
        s->cands[c].queue_s = inst_queue_s(s, &s->inst[c]);
        s->cands[c].handoff_s =
            cfg->colocated ? 0
                           : mc_conductor_transfer_s((double)rq->r->input_tokens * s->kvpt,
                                                     cfg->handoff_bw, cfg->bw.latency_s);
        s->cands[c].prefix = s->prefixes[c];
    }
    mc_conductor_route_t rt;
    mc_conductor_route(&cfg->router, &cfg->model, &s->bw, rq->r->input_tokens, s->cands,
                       (size_t)n, decode_ok(s, rq->kv_need, rq->r->input_tokens), &s->rng, &rt);
    rq->decision = rt.decision;
    if (rt.decision == MC_CONDUCTOR_REJECT) {
        rq->done = 1;
        s->res->rejected++;
        return;
    }
    if (rt.decision == MC_CONDUCTOR_QUEUE)
        s->res->queued++;
    if (rt.decision == MC_CONDUCTOR_DEGRADE) {
        s->res->degraded++;
        if (rq->out_target > (uint32_t)cfg->degrade_output_tokens)
            rq->out_target = (uint32_t)cfg->degrade_output_tokens;
        rq->kv_need = ((double)rq->r->input_tokens + rq->out_target) * s->kvpt;
    }
    int i = (int)rt.chosen;
    rq->inst = i;
    rq->idx_any = s->prefixes[i].any;
    rq->pred_service = rt.est.fetch_s + rt.est.prefill_s + store_exist_s(s, rq->r->n_blocks);
    sim_inst_t *in = &s->inst[i];
    in->backlog += rq->pred_service;
    rq->next = NONE;
    if (in->pq_tail == NONE)
        in->pq_head = q;
    else
        s->reqs[in->pq_tail].next = q;
    in->pq_tail = q;
    next_activity(s, i);
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *v, size_t n, double p)
{
    if (!n)
        return 0;
    size_t k = (size_t)ceil(p * (double)n) - 1;
    if (k >= n)
        k = n - 1;
    return v[k];
}

static double itl_pct(const sim_t *s, double p)
{
    if (!s->itl_count)
        return 0;
    uint64_t target = (uint64_t)ceil(p * (double)s->itl_count), acc = 0;
    for (int k = 0; k < ITL_BINS; k++) {
        acc += s->itl_hist[k];
        if (acc >= target)
            return ITL_BASE * pow(ITL_GROWTH, k + 0.5);
    }
    return ITL_BASE * pow(ITL_GROWTH, ITL_BINS);
}

static mc_status_t check_cfg(const mc_conductor_sim_config_t *c)
{
    if (mc_conductor_model_check(&c->model) != MC_OK)
        return MC_ERR_INVALID_PARAMS;
    int ok = c->prefill >= 1 && c->prefill <= 1024 && c->decode >= (c->colocated ? 0 : 1) &&
             c->decode <= 1024 && c->time_scale > 0 && c->local_blocks >= 0 &&
             c->pool_blocks >= 0 && c->ssd_blocks >= 0 && c->bw.local_bw > 0 && c->bw.pool_bw > 0 &&
             c->bw.ssd_bw > 0 && c->bw.latency_s >= 0 && c->handoff_bw > 0 && c->itl_slo_s > 0 &&
             c->router.ttft_slo_s > 0 && c->router.queue_budget_s >= 0 && c->max_batch >= 1 &&
             c->degrade_output_tokens >= 1 && c->event_loss >= 0 && c->event_loss <= 1 &&
             c->resync_s >= 0 && c->local_blocks < (1LL << 32) && c->pool_blocks < (1LL << 32) &&
             c->ssd_blocks < (1LL << 32);
    if (ok && c->store.enabled) {
        const mc_conductor_store_cost_t *st = &c->store;
        ok = isfinite(st->exist_s) && st->exist_s >= 0 && isfinite(st->exist_block_s) &&
             st->exist_block_s >= 0 && isfinite(st->get_call_s) &&
             st->get_call_s >= 0 && isfinite(st->put_call_s) && st->put_call_s >= 0 &&
             isfinite(st->get_bw) && st->get_bw > 0 && isfinite(st->put_bw) && st->put_bw > 0;
    }
    if (!ok) {
        MC_LOG_ERROR("sim: configuration out of range");
        return MC_ERR_INVALID_PARAMS;
    }
    return MC_OK;
}

/* Setup: the state that does not depend on instances (bandwidths, sizes, arrays, the index and
 * the shared pool/SSD caches). MC_ERR_NO_MEMORY when anything cannot be had. */
static mc_status_t sim_setup(sim_t *s, const mc_conductor_trace_t *trace,
                             const mc_conductor_sim_config_t *cfg, mc_conductor_sim_result_t *res)
{
    s->cfg = cfg;
    s->bw = cfg->bw;
    if (cfg->store.enabled) {
        s->bw.pool_bw = cfg->store.get_bw;
        /* > 0 marks the measured fixed cost (router.h); a measured 0 becomes 1 ns */
        s->bw.pool_call_s = cfg->store.get_call_s > 0 ? cfg->store.get_call_s : 1e-9;
    }
    s->trace = trace;
    s->res = res;
    s->rng = cfg->seed;
    s->nreq = cfg->max_requests && cfg->max_requests < trace->n_reqs ? cfg->max_requests
                                                                      : trace->n_reqs;
    s->ninst = (int)(cfg->prefill + cfg->decode);
    s->nprefill_cand = cfg->colocated ? s->ninst : (int)cfg->prefill;
    s->kvpt = mc_conductor_kv_bytes_per_token(&cfg->model);
    s->block_bytes = mc_conductor_block_bytes(&cfg->model);
    s->kv_cap = mc_conductor_kv_capacity_bytes(&cfg->model);
    s->reqs = mc_calloc(s->nreq ? s->nreq : 1, sizeof(sim_req_t));
    s->inst = mc_calloc((size_t)s->ninst, sizeof(sim_inst_t));
    s->seg_names = mc_calloc((size_t)s->ninst * 2 + 1, 32);
    s->host_names = mc_calloc((size_t)s->ninst, 32);
    s->cand_hosts = mc_calloc((size_t)s->ninst, sizeof(uint32_t));
    s->cands = mc_calloc((size_t)s->ninst, sizeof(mc_conductor_candidate_t));
    s->prefixes = mc_calloc((size_t)s->ninst, sizeof(mc_conductor_prefix_t));
    s->ttfts = mc_calloc(s->nreq + 1, sizeof(double));
    s->tpots = mc_calloc(s->nreq + 1, sizeof(double));
    if (!s->reqs || !s->inst || !s->seg_names || !s->host_names || !s->cand_hosts || !s->cands ||
        !s->prefixes || !s->ttfts || !s->tpots)
        return MC_ERR_NO_MEMORY;
    mc_conductor_index_config_t icfg;
    mc_conductor_index_config_default(&icfg);
    icfg.size_hint = (size_t)(cfg->pool_blocks + cfg->ssd_blocks + 1024);
    if (mc_conductor_index_create(&icfg, &s->idx) != MC_OK)
        return MC_ERR_NO_MEMORY;
    s->pool_arg = (cache_arg_t){s, -1};
    s->ssd_arg = (cache_arg_t){s, -2};
    if (mc_conductor_cache_init_tuned(&s->pool, (size_t)cfg->pool_blocks, cfg->evict,
                                      &cfg->evict_tuning, on_pool_evict, &s->pool_arg) != MC_OK ||
        mc_conductor_cache_init_tuned(&s->ssd, (size_t)cfg->ssd_blocks, cfg->evict,
                                      &cfg->evict_tuning, on_ssd_evict, &s->ssd_arg) != MC_OK)
        return MC_ERR_NO_MEMORY;
    snprintf(s->seg_names[s->ninst * 2], 32, "ssd");
    return MC_OK;
}

/* Setup: each instance's role, batch slots, local cache, segment names and index host. */
static mc_status_t sim_setup_instances(sim_t *s)
{
    const mc_conductor_sim_config_t *cfg = s->cfg;
    for (int i = 0; i < s->ninst; i++) {
        sim_inst_t *in = &s->inst[i];
        in->can_prefill = cfg->colocated || i < cfg->prefill;
        in->can_decode = cfg->colocated || i >= cfg->prefill;
        in->pq_head = in->pq_tail = in->dq_head = in->dq_tail = NONE;
        in->batch = mc_calloc((size_t)cfg->max_batch, sizeof(int));
        in->local_arg = (cache_arg_t){s, i};
        if (!in->batch ||
            mc_conductor_cache_init_tuned(&in->local,
                                          in->can_prefill ? (size_t)cfg->local_blocks : 0,
                                          cfg->evict, &cfg->evict_tuning, on_local_evict,
                                          &in->local_arg) != MC_OK)
            return MC_ERR_NO_MEMORY;
        snprintf(s->host_names[i], 32, "h%d", i);
        snprintf(s->seg_names[2 * i], 32, "h%d/local", i);
        snprintf(s->seg_names[2 * i + 1], 32, "h%d/pool", i);
        in->seg_local = 2 * i;
        in->seg_pool = 2 * i + 1;
        if (mc_conductor_index_host_id(s->idx, s->host_names[i], &in->host_id) != MC_OK)
            return MC_ERR_NO_MEMORY;
        s->cand_hosts[i] = in->host_id;
    }
    return MC_OK;
}

/* Setup: each request's arrival (scaled, from the first one), output target and KV need. */
static void sim_setup_requests(sim_t *s)
{
    const mc_conductor_trace_t *trace = s->trace;
    double t0 = s->nreq ? (double)trace->reqs[0].timestamp_ms : 0;
    for (size_t k = 0; k < s->nreq; k++) {
        sim_req_t *rq = &s->reqs[k];
        rq->r = &trace->reqs[k];
        rq->arrival = ((double)rq->r->timestamp_ms - t0) / 1000.0 / s->cfg->time_scale;
        rq->out_target = rq->r->output_tokens ? rq->r->output_tokens : 1;
        rq->kv_need = ((double)rq->r->input_tokens + rq->out_target) * s->kvpt;
        rq->inst = rq->dinst = rq->next = NONE;
    }
    s->res->requests = s->nreq;
    s->res->span_s = s->nreq ? s->reqs[s->nreq - 1].arrival : 0;
}

/* The event loop: arrivals are pushed one ahead; runs until no event is left. Checks that
 * every request ended completed or rejected. */
static mc_status_t sim_events(sim_t *s)
{
    mc_conductor_sim_result_t *res = s->res;
    size_t next_arrival = 0;
    if (s->nreq)
        ev_push(s, s->reqs[0].arrival, EV_ARRIVAL, 0);
    while (s->nheap && s->err == MC_OK) {
        sim_ev_t e = ev_pop(s);
        s->now = e.t;
        switch (e.type) {
        case EV_ARRIVAL:
            next_arrival = (size_t)e.a + 1;
            if (next_arrival < s->nreq)
                ev_push(s, s->reqs[next_arrival].arrival, EV_ARRIVAL, (int)next_arrival);
            arrival(s, e.a);
            break;
        case EV_INST_DONE: {
            sim_inst_t *in = &s->inst[e.a];
            if (in->running == RUN_PREFILL)
                prefill_done(s, e.a);
            else if (in->running == RUN_DECODE)
                decode_step_done(s, e.a);
            else if (in->running == RUN_WRITEBACK)
                writeback_done(s, e.a);
            next_activity(s, e.a);
            break;
        }
        case EV_HANDOFF: {
            int d = s->reqs[e.a].dinst;
            enqueue_decode(s, d, e.a);
            next_activity(s, d);
            break;
        }
        case EV_RESYNC:
            do_resync(s);
            break;
        }
    }
    if (s->err != MC_OK)
        return s->err;
    if (res->completed + res->rejected != res->requests) {
        MC_LOG_ERROR("sim: requests not conserved (%llu completed + %llu rejected != %llu)",
                     (unsigned long long)res->completed, (unsigned long long)res->rejected,
                     (unsigned long long)res->requests);
        return MC_ERR_INTERNAL;
    }
    return MC_OK;
}

/* Results: one CSV row per request (header first). */
static void sim_write_csv(const sim_t *s, FILE *csv)
{
    const mc_conductor_sim_config_t *cfg = s->cfg;
    fprintf(csv, "id,arrival_s,decision,prefill_inst,decode_inst,input_tokens,output_tokens,"
                 "blocks,index_prefix,real_prefix,reuse_blocks,remote_blocks,ssd_blocks,"
                 "queue_s,fetch_s,prefill_s,ttft_s,tpot_s,good\n");
    for (size_t k = 0; k < s->nreq; k++) {
        sim_req_t *rq = &s->reqs[k];
        int rej = rq->decision == MC_CONDUCTOR_REJECT;
        double ttft = rej ? -1 : rq->first_token - rq->arrival;
        double tpot = rej || rq->out_target <= 1
                          ? 0
                          : (rq->finish - rq->first_token) / (rq->out_target - 1);
        int good = !rej && ttft <= cfg->router.ttft_slo_s && tpot <= cfg->itl_slo_s &&
                   rq->decision != MC_CONDUCTOR_DEGRADE;
        fprintf(csv, "%zu,%.6f,%s,%d,%d,%u,%u,%u,%u,%u,%u,%u,%u,%.6f,%.6f,%.6f,%.6f,%.6f,%d\n",
                k, rq->arrival, mc_conductor_decision_name(rq->decision), rq->inst, rq->dinst,
                rq->r->input_tokens, rq->out_target, rq->r->n_blocks, rq->idx_any,
                rq->real_any, rq->reuse, rq->remote, rq->ssd, rej ? 0 : rq->start - rq->arrival,
                rq->fetch_s, rq->prefill_s, ttft, tpot, good);
    }
}

/* Results: latency percentiles, goodput, hit ratios and utilisation from the counters. */
static void sim_summarise(sim_t *s)
{
    mc_conductor_sim_result_t *res = s->res;
    qsort(s->ttfts, s->nttft, sizeof(double), cmp_dbl);
    double sum = 0;
    for (size_t k = 0; k < s->nttft; k++)
        sum += s->ttfts[k];
    res->ttft_mean = s->nttft ? sum / (double)s->nttft : 0;
    res->ttft_p50 = pct(s->ttfts, s->nttft, 0.5);
    res->ttft_p90 = pct(s->ttfts, s->nttft, 0.9);
    res->ttft_p99 = pct(s->ttfts, s->nttft, 0.99);
    qsort(s->tpots, s->nttft, sizeof(double), cmp_dbl);
    res->tpot_p50 = pct(s->tpots, s->nttft, 0.5);
    res->tpot_p90 = pct(s->tpots, s->nttft, 0.9);
    res->tpot_p99 = pct(s->tpots, s->nttft, 0.99);
    res->itl_p50 = itl_pct(s, 0.5);
    res->itl_p90 = itl_pct(s, 0.9);
    res->itl_p99 = itl_pct(s, 0.99);
    double span = res->span_s > 0 ? res->span_s : 1;
    res->goodput_rps = (double)res->good / span;
    res->goodput_share = res->requests ? (double)res->good / (double)res->requests : 0;
    res->block_hit_ratio =
        res->blocks_requested ? (double)res->reuse_blocks / (double)res->blocks_requested : 0;
    res->token_hit_ratio = res->input_tokens > 0 ? res->reused_tokens / res->input_tokens : 0;
    res->compute_saved = res->prefill_flops_nocache > 0
                             ? 1.0 - res->prefill_flops / res->prefill_flops_nocache
                             : 0;
    double ms = res->makespan_s > 0 ? res->makespan_s : 1;
    res->prefill_util = res->prefill_busy_s / (ms * (double)s->nprefill_cand);
    mc_conductor_index_stats_t ist;
    mc_conductor_index_get_stats(s->idx, &ist);
    res->index_gaps = ist.gaps;
    res->index_resyncs = ist.resyncs;
}

static void sim_free(sim_t *s)
{
    if (s->inst) {
        for (int i = 0; i < s->ninst; i++) {
            mc_free(s->inst[i].batch);
            mc_conductor_cache_fini(&s->inst[i].local);
        }
    }
    mc_conductor_cache_fini(&s->pool);
    mc_conductor_cache_fini(&s->ssd);
    mc_conductor_index_destroy(s->idx);
    mc_free(s->reqs);
    mc_free(s->inst);
    mc_free(s->seg_names);
    mc_free(s->host_names);
    mc_free(s->cand_hosts);
    mc_free(s->cands);
    mc_free(s->prefixes);
    mc_free(s->ttfts);
    mc_free(s->tpots);
    mc_free(s->heap);
    mc_free(s);
}

mc_status_t mc_conductor_sim_run(const mc_conductor_trace_t *trace,
                                 const mc_conductor_sim_config_t *cfg,
                                 mc_conductor_sim_result_t *res, FILE *csv)
{
    mc_status_t st = check_cfg(cfg);
    if (st != MC_OK)
        return st;
    memset(res, 0, sizeof(*res));
    sim_t *s = MC_NEW(sim_t);
    if (!s)
        return MC_ERR_NO_MEMORY;
    st = sim_setup(s, trace, cfg, res);
    if (st == MC_OK)
        st = sim_setup_instances(s);
    if (st == MC_OK) {
        sim_setup_requests(s);
        st = sim_events(s);
    }
    if (st == MC_OK) {
        if (csv)
            sim_write_csv(s, csv);
        sim_summarise(s);
    }
    sim_free(s);
    return st;
}

mc_status_t mc_conductor_cache_replay(const mc_conductor_trace_t *trace, size_t max_requests,
                                      size_t capacity, mc_conductor_evict_t policy, int belady,
                                      const mc_conductor_evict_tuning_t *tune,
                                      mc_conductor_replay_result_t *res)
{
    memset(res, 0, sizeof(*res));
    size_t nreq = max_requests && max_requests < trace->n_reqs ? max_requests : trace->n_reqs;
    size_t nacc = nreq ? trace->reqs[nreq - 1].blocks_off + trace->reqs[nreq - 1].n_blocks : 0;
    /* requests are sorted by time but blocks are stored in file order: gather the sequence */
    uint64_t *seq = mc_malloc((nacc ? nacc : 1) * sizeof(uint64_t));
    if (!seq)
        return MC_ERR_NO_MEMORY;
    size_t n = 0;
    for (size_t k = 0; k < nreq; k++) {
        const uint64_t *b = mc_conductor_trace_req_blocks(trace, &trace->reqs[k]);
        for (uint32_t j = 0; j < trace->reqs[k].n_blocks; j++) {
            if (mc_array_reserve(&seq, &nacc, n + 1, 16) != MC_OK) {
                mc_free(seq);
                return MC_ERR_NO_MEMORY;
            }
            seq[n++] = b[j];
        }
    }
    res->accesses = n;
    mc_status_t st = MC_OK;
    if (belady) {
        st = mc_conductor_belady_hits(seq, n, capacity, &res->hits);
    } else {
        mc_conductor_cache_t c;
        st = mc_conductor_cache_init_tuned(&c, capacity, policy, tune, NULL, NULL);
        if (st == MC_OK) {
            size_t pos = 0;
            for (size_t k = 0; k < nreq; k++) {
                int prefix = 1;
                for (uint32_t j = 0; j < trace->reqs[k].n_blocks; j++, pos++) {
                    if (mc_conductor_cache_lookup(&c, seq[pos], 1, NULL)) {
                        res->hits++;
                        res->prefix_hits += (uint64_t)prefix;
                    } else {
                        prefix = 0;
                        mc_conductor_cache_insert(&c, seq[pos], 0);
                    }
                }
            }
            mc_conductor_cache_fini(&c);
        }
    }
    mc_free(seq);
    res->hit_ratio = n ? (double)res->hits / (double)n : 0;
    res->prefix_hit_ratio = n ? (double)res->prefix_hits / (double)n : 0;
    return st;
}
