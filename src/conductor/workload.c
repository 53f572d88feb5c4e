/* Synthetic traces (contract and shapes in workload.h). Every generator appends requests until
 * the trace holds its target number of block accesses; conversation generators create whole
 * conversations (all their turns) and the trace is sorted by timestamp at the end. */
#include "conductor/workload.h"

#include "common/alloc.h"
#include "common/buf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BASE_ACCESSES 250000.0
#define BLOCK_TOKENS 512

static const char *const names[] = {"zipf",      "zipf_shift", "recency",     "scan_hot",
                                    "loop",      "conv_short", "conv_long",   "conv_shared",
                                    "docs",      "conv_bursty", "phases"};
#define N_NAMES (sizeof(names) / sizeof(names[0]))

const char *const *mc_conductor_workload_names(size_t *n_p)
{
    *n_p = N_NAMES;
    return names;
}

typedef struct gen {
    mc_conductor_trace_t *t;
    size_t cap_reqs, cap_blocks;
    uint64_t rng, next_id;
    size_t target; /* block accesses */
    int trim;      /* keep only the earliest requests that reach target / 2 accesses */
    mc_status_t st;
} gen_t;

static uint64_t rnd64(gen_t *g) /* splitmix64 */
{
    uint64_t z = (g->rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double unif(gen_t *g) /* (0, 1) */
{
    return ((double)(rnd64(g) >> 11) + 0.5) / 9007199254740992.0;
}

static double expo(gen_t *g, double mean)
{
    return -log(unif(g)) * mean;
}

static uint32_t geom(gen_t *g, double mean) /* 0, 1, 2, ... with about that mean */
{
    double x = floor(expo(g, mean + 0.5));
    return x > 1e6 ? 1000000u : (uint32_t)x;
}

static double normal(gen_t *g)
{
    return sqrt(-2.0 * log(unif(g))) * cos(6.283185307179586 * unif(g));
}

/* Zipf(alpha) over ranks 0..n-1 by inverse CDF. */
typedef struct zipf {
    double *cdf;
    size_t n;
} zipf_t;

static mc_status_t zipf_init(zipf_t *z, size_t n, double alpha)
{
    z->n = n;
    z->cdf = mc_malloc(n * sizeof(double));
    if (!z->cdf)
        return MC_ERR_NO_MEMORY;
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        z->cdf[i] = (sum += pow((double)(i + 1), -alpha));
    for (size_t i = 0; i < n; i++)
        z->cdf[i] /= sum;
    return MC_OK;
}

static size_t zipf_draw(const zipf_t *z, gen_t *g)
{
    double u = unif(g);
    size_t lo = 0, hi = z->n - 1;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (z->cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void zipf_fini(zipf_t *z)
{
    mc_free(z->cdf);
}

/* Append one request (input = its blocks; output 128 tokens). */
static void add_req(gen_t *g, uint64_t ts_ms, const uint64_t *ids, uint32_t n)
{
    mc_conductor_trace_t *t = g->t;
    if (g->st != MC_OK)
        return;
    if (mc_array_reserve(&t->reqs, &g->cap_reqs, t->n_reqs + 1, 1024) != MC_OK ||
        mc_array_reserve(&t->blocks, &g->cap_blocks, t->n_blocks + n, 4096) != MC_OK) {
        g->st = MC_ERR_NO_MEMORY;
        return;
    }
    mc_conductor_request_t *r = &t->reqs[t->n_reqs];
    r->timestamp_ms = ts_ms;
    r->input_tokens = n * BLOCK_TOKENS;
    r->output_tokens = 128;
    r->n_blocks = n;
    r->line = (uint32_t)(t->n_reqs + 1);
    r->blocks_off = t->n_blocks;
    memcpy(t->blocks + t->n_blocks, ids, n * sizeof(uint64_t));
    t->n_blocks += n;
    t->n_reqs++;
}

static int more(const gen_t *g)
{
    return g->st == MC_OK && g->t->n_blocks < g->target;
}

/* ---- independent keys ---- */

static void gen_zipf(gen_t *g, size_t n, double alpha, size_t shift_every)
{
    zipf_t z;
    if ((g->st = zipf_init(&z, n, alpha)) != MC_OK)
        return;
    for (uint64_t i = 0; more(g); i++) {
        uint64_t phase = shift_every ? i / shift_every : 0;
        uint64_t id = zipf_draw(&z, g) + phase * (n / 2) + 1;
        add_req(g, i * 10, &id, 1);
    }
    zipf_fini(&z);
}

enum { RECENCY_RING = 65536 };

/* recency's next key: the i-th access's, given the keys of the accesses before it in ring. */
static uint64_t recency_next(gen_t *g, uint64_t *ring, uint64_t i)
{
    uint64_t id;
    uint64_t back = 1 + geom(g, 3000);
    if (unif(g) < 0.7 && back <= i && back < RECENCY_RING)
        id = ring[(i - back) % RECENCY_RING];
    else
        id = ++g->next_id;
    ring[i % RECENCY_RING] = id;
    return id;
}

/* scan_hot's next key: hot keys are 1..4 000, scan keys new ids (next_id starts above them). */
static uint64_t scan_hot_next(gen_t *g, const zipf_t *z, uint32_t *scan_left)
{
    if (!*scan_left && unif(g) < 1.0 / 3000)
        *scan_left = 2000;
    if (*scan_left) {
        (*scan_left)--;
        return ++g->next_id;
    }
    return zipf_draw(z, g) + 1;
}

/* phase_len 0: recency only; else phase_len accesses of recency, then as many of scan_hot, and
 * so on (the best policy changes with every phase). */
static void gen_recency_scan(gen_t *g, uint64_t phase_len)
{
    uint64_t *ring = mc_malloc(RECENCY_RING * sizeof(uint64_t));
    zipf_t z = {0};
    if (!ring || (phase_len && zipf_init(&z, 4000, 0.7) != MC_OK)) {
        mc_free(ring);
        g->st = MC_ERR_NO_MEMORY;
        return;
    }
    if (phase_len)
        g->next_id = 1000000;
    uint32_t scan_left = 0;
    for (uint64_t i = 0, n_rec = 0; more(g); i++) {
        uint64_t id = phase_len && (i / phase_len) % 2 ? scan_hot_next(g, &z, &scan_left)
                                                      : recency_next(g, ring, n_rec++);
        add_req(g, i * 10, &id, 1);
    }
    zipf_fini(&z);
    mc_free(ring);
}

static void gen_scan_hot(gen_t *g)
{
    zipf_t z;
    if ((g->st = zipf_init(&z, 4000, 0.7)) != MC_OK)
        return;
    g->next_id = 1000000;
    uint32_t scan_left = 0;
    for (uint64_t i = 0; more(g); i++) {
        uint64_t id = scan_hot_next(g, &z, &scan_left);
        add_req(g, i * 10, &id, 1);
    }
    zipf_fini(&z);
}

static void gen_loop(gen_t *g)
{
    g->next_id = 1000000;
    for (uint64_t i = 0, pos = 0; more(g); i++) {
        uint64_t id = unif(g) < 0.1 ? ++g->next_id : (pos++ % 30000) + 1;
        add_req(g, i * 10, &id, 1);
    }
}

/* ---- prefix chains ---- */

typedef struct conv_params {
    uint32_t apps, sys_blocks;  /* system prompts (one per application) and their length */
    double first_blocks, turn_blocks; /* mean own blocks of the first turn, added per turn */
    double p_continue;
    int lognormal;              /* turn gaps: 0 exponential(mean gap_s), 1 log-normal */
    double gap_s, sigma;        /* exponential mean, or log-normal median and sigma */
    double starts_per_s;        /* conversation arrivals (Poisson) */
    double pause_p, pause_s;    /* with probability pause_p a gap is a pause instead: log-normal,
                                 * median pause_s, the same sigma */
} conv_params_t;

static void gen_conv(gen_t *g, const conv_params_t *p)
{
    uint64_t *ctx = NULL;
    size_t cap = 0;
    g->next_id = 1000;
    double start = 0;
    /* twice the target: the caller keeps the earliest `target` accesses, a span in which every
     * conversation that started has all its turns (the tail would hold only old ones) */
    g->target *= 2;
    g->trim = 1;
    while (more(g)) {
        start += expo(g, 1.0 / p->starts_per_s);
        uint32_t app = (uint32_t)(rnd64(g) % p->apps);
        size_t n = 0;
        if (mc_array_reserve(&ctx, &cap, p->sys_blocks, 64) != MC_OK) {
            g->st = MC_ERR_NO_MEMORY;
            break;
        }
        for (uint32_t j = 0; j < p->sys_blocks; j++)
            ctx[n++] = (uint64_t)app * p->sys_blocks + j; /* ids below 1000: system prompts */
        double t = start;
        for (uint32_t turn = 0; turn < 64; turn++) {
            uint32_t add = 1 + geom(g, (turn ? p->turn_blocks : p->first_blocks) - 1);
            if (n + add > 4096 || mc_array_reserve(&ctx, &cap, n + add, 64) != MC_OK)
                break;
            for (uint32_t j = 0; j < add; j++)
                ctx[n++] = ++g->next_id;
            add_req(g, (uint64_t)(t * 1000.0), ctx, (uint32_t)n);
            if (unif(g) >= p->p_continue)
                break;
            if (p->pause_p > 0 && unif(g) < p->pause_p)
                t += p->pause_s * exp(p->sigma * normal(g));
            else
                t += p->lognormal ? p->gap_s * exp(p->sigma * normal(g)) : expo(g, p->gap_s);
        }
    }
    mc_free(ctx);
}

static void gen_docs(gen_t *g)
{
    enum { DOCS = 3000 };
    zipf_t z;
    if ((g->st = zipf_init(&z, DOCS, 0.8)) != MC_OK)
        return;
    uint32_t len[DOCS];
    for (int d = 0; d < DOCS; d++)
        len[d] = 4 + (uint32_t)(rnd64(g) % 29);
    g->next_id = (uint64_t)DOCS * 64;
    uint64_t ids[32 + 2];
    for (uint64_t i = 0; more(g); i++) {
        size_t d = zipf_draw(&z, g);
        uint32_t n = 0;
        for (uint32_t j = 0; j < len[d]; j++)
            ids[n++] = (uint64_t)d * 64 + j; /* document blocks: d*64 + position */
        uint32_t own = 1 + (uint32_t)(rnd64(g) % 2);
        for (uint32_t j = 0; j < own; j++)
            ids[n++] = ++g->next_id;
        add_req(g, i * 100, ids, n);
    }
    zipf_fini(&z);
}

static int req_cmp(const void *a, const void *b)
{
    const mc_conductor_request_t *x = a, *y = b;
    if (x->timestamp_ms != y->timestamp_ms)
        return x->timestamp_ms < y->timestamp_ms ? -1 : 1;
    return x->line < y->line ? -1 : (x->line > y->line);
}

mc_status_t mc_conductor_workload_generate(const char *name, uint64_t seed, double scale,
                                           mc_conductor_trace_t **trace_p)
{
    *trace_p = NULL;
    size_t k = 0;
    while (k < N_NAMES && strcmp(name, names[k]) != 0)
        k++;
    if (k == N_NAMES || !(scale > 0 && scale <= 100))
        return MC_ERR_INVALID_PARAMS;
    gen_t g = {.rng = seed * 0x2545f4914f6cdd1dULL + k, .target = (size_t)(BASE_ACCESSES * scale)};
    if (!(g.t = MC_NEW(mc_conductor_trace_t)))
        return MC_ERR_NO_MEMORY;
    static const conv_params_t conv_short = {1, 1, 8, 3, 0.6, 0, 20, 0, 2.0, 0, 0};
    static const conv_params_t conv_long = {1, 1, 16, 4, 0.5, 1, 150, 1.0, 2.0, 0, 0};
    static const conv_params_t conv_shared = {8, 4, 6, 2, 0.7, 0, 60, 0, 2.0, 0, 0};
    static const conv_params_t conv_bursty = {1, 1, 12, 3, 0.8, 0, 15, 1.0, 2.0, 0.25, 900};
    switch (k) {
    case 0: gen_zipf(&g, 200000, 0.9, 0); break;
    case 1: gen_zipf(&g, 50000, 0.9, 50000); break;
    case 2: gen_recency_scan(&g, 0); break;
    case 3: gen_scan_hot(&g); break;
    case 4: gen_loop(&g); break;
    case 5: gen_conv(&g, &conv_short); break;
    case 6: gen_conv(&g, &conv_long); break;
    case 7: gen_conv(&g, &conv_shared); break;
    case 8: gen_docs(&g); break;
    case 9: gen_conv(&g, &conv_bursty); break;
    default: gen_recency_scan(&g, 50000); break;
    }
    if (g.st != MC_OK) {
        mc_conductor_trace_free(g.t);
        return g.st;
    }
    qsort(g.t->reqs, g.t->n_reqs, sizeof(*g.t->reqs), req_cmp);
    if (g.trim) {
        size_t keep = 0, acc = 0;
        while (keep < g.t->n_reqs && acc < g.target / 2)
            acc += g.t->reqs[keep++].n_blocks;
        g.t->n_reqs = keep;
    }
    *trace_p = g.t;
    return MC_OK;
}
