/* mc_engine model: weights, checkpoint I/O, KV cache, thread pool, forward pass (model.h). */
#include "engine/model.h"

#include "common/hash.h"
#include "common/log.h"
#include "engine/kernels.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- configuration ---- */

void mc_engine_config_default(mc_engine_config_t *cfg)
{
    *cfg = (mc_engine_config_t){.dim = 128, .hidden_dim = 384, .n_layers = 2, .n_heads = 4,
                                .n_kv_heads = 2, .vocab_size = 32000, .seq_len = 16384,
                                .shared_classifier = false};
}

void mc_engine_config_tiny(mc_engine_config_t *cfg)
{
    *cfg = (mc_engine_config_t){.dim = 64, .hidden_dim = 176, .n_layers = 2, .n_heads = 4,
                                .n_kv_heads = 2, .vocab_size = 256, .seq_len = 256,
                                .shared_classifier = false};
}

#define CHECK_RANGE(field, lo, hi)                                                                 \
    do {                                                                                           \
        if (cfg->field < (lo) || cfg->field > (hi)) {                                              \
            MC_LOG_ERROR("engine config: " #field " %d outside [%d, %d]", (int)cfg->field,         \
                         (int)(lo), (int)(hi));                                                    \
            return MC_ERR_INVALID_PARAMS;                                                          \
        }                                                                                          \
    } while (0)

mc_status_t mc_engine_config_check(const mc_engine_config_t *cfg)
{
    CHECK_RANGE(dim, 8, MC_ENGINE_DIM_MAX);
    CHECK_RANGE(hidden_dim, 8, MC_ENGINE_HIDDEN_MAX);
    CHECK_RANGE(n_layers, 1, MC_ENGINE_LAYERS_MAX);
    CHECK_RANGE(n_heads, 1, cfg->dim / 8);
    CHECK_RANGE(n_kv_heads, 1, cfg->n_heads);
    CHECK_RANGE(vocab_size, 1, MC_ENGINE_VOCAB_MAX);
    CHECK_RANGE(seq_len, 1, MC_ENGINE_SEQ_MAX);
    if (cfg->dim % 8 || cfg->hidden_dim % 8 || cfg->dim % cfg->n_heads ||
        (cfg->dim / cfg->n_heads) % 8 || cfg->n_heads % cfg->n_kv_heads) {
        MC_LOG_ERROR("engine config: dim %d, hidden_dim %d, heads %d/%d: dim and hidden_dim "
                     "must be multiples of 8, head_size = dim/n_heads a multiple of 8, "
                     "n_kv_heads must divide n_heads",
                     cfg->dim, cfg->hidden_dim, cfg->n_heads, cfg->n_kv_heads);
        return MC_ERR_INVALID_PARAMS;
    }
    return MC_OK;
}

/* ---- weights ---- */

/* Floats of each tensor in checkpoint order; freq_cis (not kept) sits before wcls. */
typedef struct layout {
    size_t emb, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, freq, wcls;
} layout_t;

static layout_t layout_of(const mc_engine_config_t *c)
{
    size_t L = (size_t)c->n_layers, d = (size_t)c->dim, h = (size_t)c->hidden_dim;
    size_t kvd = d / (size_t)c->n_heads * (size_t)c->n_kv_heads, hs = d / (size_t)c->n_heads;
    return (layout_t){.emb = (size_t)c->vocab_size * d, .rms_att = L * d, .wq = L * d * d,
                      .wk = L * d * kvd, .wv = L * d * kvd, .wo = L * d * d, .rms_ffn = L * d,
                      .w1 = L * h * d, .w2 = L * d * h, .w3 = L * h * d, .rms_final = d,
                      .freq = (size_t)c->seq_len * hs, /* real + imag, hs/2 each */
                      .wcls = c->shared_classifier ? 0 : (size_t)c->vocab_size * d};
}

static size_t kept_floats(const layout_t *l)
{
    return l->emb + l->rms_att + l->wq + l->wk + l->wv + l->wo + l->rms_ffn + l->w1 + l->w2 +
           l->w3 + l->rms_final + l->wcls;
}

static mc_status_t model_alloc(const mc_engine_config_t *cfg, mc_engine_model_t **model_p)
{
    mc_status_t st = mc_engine_config_check(cfg);
    if (st != MC_OK)
        return st;
    mc_engine_model_t *m = calloc(1, sizeof(*m));
    if (!m)
        return MC_ERR_NO_MEMORY;
    layout_t l = layout_of(cfg);
    m->cfg = *cfg;
    m->head_size = cfg->dim / cfg->n_heads;
    m->kv_dim = m->head_size * cfg->n_kv_heads;
    m->n_floats = kept_floats(&l);
    if (posix_memalign((void **)&m->mem, 64, m->n_floats * sizeof(float)) != 0) {
        free(m);
        return MC_ERR_NO_MEMORY;
    }
    float *p = m->mem;
    m->tok_emb = p, p += l.emb;
    m->rms_att = p, p += l.rms_att;
    m->wq = p, p += l.wq;
    m->wk = p, p += l.wk;
    m->wv = p, p += l.wv;
    m->wo = p, p += l.wo;
    m->rms_ffn = p, p += l.rms_ffn;
    m->w1 = p, p += l.w1;
    m->w2 = p, p += l.w2;
    m->w3 = p, p += l.w3;
    m->rms_final = p, p += l.rms_final;
    m->wcls = cfg->shared_classifier ? m->tok_emb : p;
    *model_p = m;
    return MC_OK;
}

/* Uniform in [-a, a) from the top 24 bits of one PRNG draw. */
static void fill_uniform(float *dst, size_t n, float a, uint64_t *state)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t r = (uint32_t)(mc_engine_splitmix64(state) >> 40);
        dst[i] = ((float)r * (1.0f / 16777216.0f) * 2.0f - 1.0f) * a;
    }
}

static void fill_const(float *dst, size_t n, float v)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = v;
}

mc_status_t mc_engine_model_seeded(const mc_engine_config_t *cfg, uint64_t seed,
                                   mc_engine_model_t **model_p)
{
    mc_engine_model_t *m;
    mc_status_t st = model_alloc(cfg, &m);
    if (st != MC_OK)
        return st;
    layout_t l = layout_of(cfg);
    uint64_t s = seed;
    /* uniform [-a, a) has variance a^2/3: a = sqrt(3 / fan_in) gives variance 1/fan_in */
    float ad = sqrtf(3.0f / (float)cfg->dim), ah = sqrtf(3.0f / (float)cfg->hidden_dim);
    fill_uniform(m->tok_emb, l.emb, 1.0f, &s);
    fill_const(m->rms_att, l.rms_att, 1.0f);
    fill_uniform(m->wq, l.wq, ad, &s);
    fill_uniform(m->wk, l.wk, ad, &s);
    fill_uniform(m->wv, l.wv, ad, &s);
    fill_uniform(m->wo, l.wo, ad, &s);
    fill_const(m->rms_ffn, l.rms_ffn, 1.0f);
    fill_uniform(m->w1, l.w1, ad, &s);
    fill_uniform(m->w2, l.w2, ah, &s);
    fill_uniform(m->w3, l.w3, ad, &s);
    fill_const(m->rms_final, l.rms_final, 1.0f);
    if (!cfg->shared_classifier)
        fill_uniform(m->wcls, l.wcls, ad, &s);
    m->weights_hash = mc_hash64(m->mem, m->n_floats * sizeof(float));
    *model_p = m;
    return MC_OK;
}

void mc_engine_model_free(mc_engine_model_t *model)
{
    if (!model)
        return;
    free(model->mem);
    free(model);
}

mc_status_t mc_engine_model_open(const char *path, bool tiny, uint64_t seed,
                                 mc_engine_model_t **model_p)
{
    if (path)
        return mc_engine_model_load(path, model_p);
    mc_engine_config_t cfg;
    if (tiny)
        mc_engine_config_tiny(&cfg);
    else
        mc_engine_config_default(&cfg);
    return mc_engine_model_seeded(&cfg, seed, model_p);
}

mc_status_t mc_engine_model_load(const char *path, mc_engine_model_t **model_p)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        MC_LOG_ERROR("engine: cannot open checkpoint %s: %s", path, strerror(errno));
        return errno == ENOENT ? MC_ERR_FILE_NOT_FOUND : MC_ERR_FILE_OPEN_FAIL;
    }
    int32_t h[7];
    mc_status_t st = MC_OK;
    mc_engine_model_t *m = NULL;
    if (fread(h, sizeof(h), 1, f) != 1) {
        MC_LOG_ERROR("engine: checkpoint %s: short header", path);
        st = MC_ERR_FILE_READ_FAIL;
        goto out;
    }
    if (h[5] == INT32_MIN) { /* not negatable; any other value is range-checked below */
        MC_LOG_ERROR("engine: checkpoint %s: bad vocab_size", path);
        st = MC_ERR_INVALID_PARAMS;
        goto out;
    }
    mc_engine_config_t cfg = {.dim = h[0], .hidden_dim = h[1], .n_layers = h[2], .n_heads = h[3],
                              .n_kv_heads = h[4], .vocab_size = h[5] < 0 ? -h[5] : h[5],
                              .seq_len = h[6], .shared_classifier = h[5] > 0};
    /* the file must be exactly header + weights: checked before allocating anything */
    if ((st = mc_engine_config_check(&cfg)) != MC_OK)
        goto out;
    layout_t l = layout_of(&cfg);
    size_t before_freq = kept_floats(&l) - l.wcls;
    if (fseek(f, 0, SEEK_END) != 0) {
        st = MC_ERR_FILE_READ_FAIL;
        goto out;
    }
    long size = ftell(f);
    size_t want = sizeof(h) + (kept_floats(&l) + l.freq) * sizeof(float);
    if (size < 0 || (size_t)size != want) {
        MC_LOG_ERROR("engine: checkpoint %s: %ld bytes, its header says %zu", path, size, want);
        st = MC_ERR_INVALID_PARAMS;
        goto out;
    }
    if ((st = model_alloc(&cfg, &m)) != MC_OK)
        goto out;
    if (fseek(f, sizeof(h), SEEK_SET) != 0 ||
        fread(m->mem, sizeof(float), before_freq, f) != before_freq ||
        fseek(f, (long)(l.freq * sizeof(float)), SEEK_CUR) != 0 ||
        (l.wcls && fread(m->wcls, sizeof(float), l.wcls, f) != l.wcls)) {
        MC_LOG_ERROR("engine: checkpoint %s: read failed", path);
        st = MC_ERR_FILE_READ_FAIL;
        goto out;
    }
    m->weights_hash = mc_hash64(m->mem, m->n_floats * sizeof(float));
    *model_p = m;
    m = NULL;
out:
    mc_engine_model_free(m);
    fclose(f);
    return st;
}

mc_status_t mc_engine_model_save(const mc_engine_model_t *m, const char *path)
{
    const mc_engine_config_t *c = &m->cfg;
    layout_t l = layout_of(c);
    int32_t h[7] = {c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads,
                    c->shared_classifier ? c->vocab_size : -c->vocab_size, c->seq_len};
    FILE *f = fopen(path, "wb");
    if (!f) {
        MC_LOG_ERROR("engine: cannot create %s: %s", path, strerror(errno));
        return MC_ERR_FILE_OPEN_FAIL;
    }
    size_t before_freq = m->n_floats - l.wcls;
    bool ok = fwrite(h, sizeof(h), 1, f) == 1 &&
              fwrite(m->mem, sizeof(float), before_freq, f) == before_freq;
    static const float zeros[1024];
    for (size_t left = l.freq; ok && left > 0;) {
        size_t n = left < 1024 ? left : 1024;
        ok = fwrite(zeros, sizeof(float), n, f) == n;
        left -= n;
    }
    ok = ok && (!l.wcls || fwrite(m->wcls, sizeof(float), l.wcls, f) == l.wcls);
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        MC_LOG_ERROR("engine: writing %s failed", path);
        return MC_ERR_FILE_WRITE_FAIL;
    }
    return MC_OK;
}

const char *mc_engine_kernel_variant(void)
{
    return mc_engine_kernels()->name;
}

/* ---- KV cache ---- */

mc_status_t mc_engine_kv_create(const mc_engine_model_t *model, uint32_t block_tokens,
                                mc_engine_kv_t **kv_p)
{
    if (block_tokens == 0 || block_tokens > (uint32_t)model->cfg.seq_len)
        return MC_ERR_INVALID_PARAMS;
    mc_engine_kv_t *kv = calloc(1, sizeof(*kv));
    if (!kv)
        return MC_ERR_NO_MEMORY;
    kv->block_tokens = block_tokens;
    kv->n_blocks = ((uint32_t)model->cfg.seq_len + block_tokens - 1) / block_tokens;
    kv->block_floats = (size_t)model->cfg.n_layers * 2 * block_tokens * (size_t)model->kv_dim;
    kv->table = calloc(kv->n_blocks, sizeof(uint32_t));
    if (!kv->table ||
        posix_memalign((void **)&kv->pool, 64, kv->n_blocks * kv->block_floats * sizeof(float))) {
        free(kv->table);
        free(kv);
        return MC_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < kv->n_blocks; i++)
        kv->table[i] = i;
    *kv_p = kv;
    return MC_OK;
}

void mc_engine_kv_free(mc_engine_kv_t *kv)
{
    if (!kv)
        return;
    free(kv->pool);
    free(kv->table);
    free(kv);
}

/* Layer l of block b: K transposed (kv_dim rows of block_tokens positions), then V
 * (block_tokens rows of kv_dim). */
static inline float *kv_k(const mc_engine_kv_t *kv, int kv_dim, int layer, uint32_t b)
{
    return mc_engine_kv_block(kv, b) + (size_t)layer * 2 * kv->block_tokens * (size_t)kv_dim;
}

static inline float *kv_v(const mc_engine_kv_t *kv, int kv_dim, int layer, uint32_t b)
{
    return kv_k(kv, kv_dim, layer, b) + (size_t)kv->block_tokens * (size_t)kv_dim;
}

/* ---- thread pool: run fn(arg, task) for task in [0, n_tasks), caller included ---- */

typedef void (*task_fn)(void *arg, int task, int worker); /* worker: 0 = caller */

typedef struct pool_arg {
    struct pool *p;
    int worker;
} pool_arg_t;

typedef struct pool {
    int n_threads;
    pthread_t *threads;
    pool_arg_t *args;     /* one per worker thread */
    pthread_mutex_t mu;
    pthread_cond_t cv_start, cv_done;
    uint64_t generation;  /* bumped per job */
    int busy;             /* workers still in the current job */
    bool stop;
    task_fn fn;
    void *arg;
    int n_tasks;
    atomic_int next;
} pool_t;

static void pool_work(pool_t *p, int worker)
{
    for (;;) {
        int t = atomic_fetch_add(&p->next, 1);
        if (t >= p->n_tasks)
            return;
        p->fn(p->arg, t, worker);
    }
}


static void *pool_main(void *arg)
{
    pool_arg_t *pa = arg;
    pool_t *p = pa->p;
    int worker = pa->worker;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->generation == seen)
            pthread_cond_wait(&p->cv_start, &p->mu);
        if (p->stop)
            break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        pool_work(p, worker);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0)
            pthread_cond_signal(&p->cv_done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void pool_run(pool_t *p, int n_tasks, task_fn fn, void *arg)
{
    if (p->n_threads <= 1 || n_tasks <= 1) {
        for (int t = 0; t < n_tasks; t++)
            fn(arg, t, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->n_tasks = n_tasks;
    atomic_store(&p->next, 0);
    p->busy = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    pool_work(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->busy > 0)
        pthread_cond_wait(&p->cv_done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

static void pool_stop(pool_t *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads - 1; i++)
        pthread_join(p->threads[i], NULL);
    free(p->threads);
    free(p->args);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_start);
    pthread_cond_destroy(&p->cv_done);
}

static mc_status_t pool_start(pool_t *p, int n_threads)
{
    memset(p, 0, sizeof(*p));
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_start, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    p->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    p->args = calloc((size_t)n_threads, sizeof(pool_arg_t));
    p->n_threads = 1;
    if (!p->threads || !p->args) {
        pool_stop(p);
        return MC_ERR_NO_MEMORY;
    }
    for (int i = 0; i < n_threads - 1; i++) {
        p->args[i] = (pool_arg_t){p, i + 1};
        if (pthread_create(&p->threads[i], NULL, pool_main, &p->args[i]) != 0) {
            pool_stop(p);
            return MC_ERR_INTERNAL;
        }
        p->n_threads++;
    }
    return MC_OK;
}

/* ---- forward pass ---- */

#define CHUNK_TOKENS 256 /* tokens per prefill step: bounds the scratch memory */
#define ROWS_PER_TASK 16
#define ATT_TILE 8 /* tokens per attention task (att_task) */

struct mc_engine {
    const mc_engine_model_t *m;
    const mc_engine_kernels_t *k;
    pool_t pool;
    int n_threads;
    /* scratch, CHUNK_TOKENS rows each */
    float *x, *xb, *q, *kk, *vv, *hb, *hb2;
    float *att;      /* per pool worker, ATT_TILE rows of att_stride scores */
    size_t att_stride; /* seq_len rounded up to 8 (expsum works on whole vectors) */
};

mc_status_t mc_engine_create(const mc_engine_model_t *model, int n_threads, mc_engine_t **eng_p)
{
    if (!model || n_threads < 1 || n_threads > MC_ENGINE_THREADS_MAX)
        return MC_ERR_INVALID_PARAMS;
    mc_engine_t *e = calloc(1, sizeof(*e));
    if (!e)
        return MC_ERR_NO_MEMORY;
    e->m = model;
    e->k = mc_engine_kernels();
    e->n_threads = n_threads;
    const mc_engine_config_t *c = &model->cfg;
    e->att_stride = ((size_t)c->seq_len + 7) & ~(size_t)7;
    size_t C = CHUNK_TOKENS, d = (size_t)c->dim, h = (size_t)c->hidden_dim,
           kvd = (size_t)model->kv_dim;
    float **bufs[] = {&e->x, &e->xb, &e->q, &e->kk, &e->vv, &e->hb, &e->hb2, &e->att};
    size_t sizes[] = {C * d, C * d, C * d, C * kvd, C * kvd, C * h, C * h,
                      (size_t)n_threads * ATT_TILE * e->att_stride};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        if (posix_memalign((void **)bufs[i], 64, sizes[i] * sizeof(float)) != 0) {
            mc_engine_destroy(e);
            return MC_ERR_NO_MEMORY;
        }
    }
    mc_status_t st = pool_start(&e->pool, n_threads);
    if (st != MC_OK) { /* pool_start cleaned up after itself */
        e->pool.n_threads = 0;
        mc_engine_destroy(e);
        return st;
    }
    *eng_p = e;
    return MC_OK;
}

void mc_engine_destroy(mc_engine_t *e)
{
    if (!e)
        return;
    if (e->pool.n_threads > 0)
        pool_stop(&e->pool);
    free(e->x);
    free(e->xb);
    free(e->q);
    free(e->kk);
    free(e->vv);
    free(e->hb);
    free(e->hb2);
    free(e->att);
    free(e);
}

const mc_engine_model_t *mc_engine_model(const mc_engine_t *e)
{
    return e->m;
}

mc_status_t mc_engine_set_kernels(mc_engine_t *e, const char *variant)
{
    const mc_engine_kernels_t *k = mc_engine_kernels_named(variant);
    if (!k)
        return MC_ERR_NOT_SUPPORTED;
    e->k = k;
    return MC_OK;
}

const char *mc_engine_kernels_name(const mc_engine_t *e)
{
    return e->k->name;
}

/* out[t][j] = W[j] . x[t] for a chunk of n_tok tokens, rows split across the pool. */
typedef struct mm_job {
    const mc_engine_kernels_t *k;
    float *out;
    const float *x, *W;
    int n_tok, rows, K;
} mm_job_t;

static void mm_task(void *arg, int task, int worker)
{
    mm_job_t *j = arg;
    int r0 = task * ROWS_PER_TASK, r1 = r0 + ROWS_PER_TASK < j->rows ? r0 + ROWS_PER_TASK : j->rows;
    j->k->matmul(j->out, j->rows, j->x, j->K, j->n_tok, j->W, r0, r1, j->K);
}

static void matmul(mc_engine_t *e, float *out, const float *x, int n_tok, const float *W,
                   int rows, int K)
{
    mm_job_t j = {e->k, out, x, W, n_tok, rows, K};
    pool_run(&e->pool, (rows + ROWS_PER_TASK - 1) / ROWS_PER_TASK, mm_task, &j);
}

static void rmsnorm(float *o, const float *x, const float *w, int n)
{
    float ss = 0.0f;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    ss = 1.0f / sqrtf(ss / (float)n + 1e-5f);
    for (int i = 0; i < n; i++)
        o[i] = w[i] * (ss * x[i]);
}

/* llama2.c's RoPE: pairs (i, i+1) rotated by pos * 10000^(-(i % head_size) / head_size). */
static void rope(float *v, int n, int head_size, uint32_t pos)
{
    for (int i = 0; i < n; i += 2) {
        float freq = 1.0f / powf(10000.0f, (float)(i % head_size) / (float)head_size);
        float val = (float)pos * freq, fcr = cosf(val), fci = sinf(val);
        float v0 = v[i], v1 = v[i + 1];
        v[i] = v0 * fcr - v1 * fci;
        v[i + 1] = v0 * fci + v1 * fcr;
    }
}

/* Attention of a tile of ATT_TILE consecutive tokens for one head, over positions 0..pos of
 * each, in position order. The tile only orders the loops (a block's K, then V, stays in cache
 * while every token of the tile uses it); each token's arithmetic is the same as alone. */
typedef struct att_job {
    mc_engine_t *e;
    const mc_engine_kv_t *kv;
    int layer, n_tok;
    uint32_t pos0;
} att_job_t;

static void att_task(void *arg, int task, int worker)
{
    att_job_t *j = arg;
    mc_engine_t *e = j->e;
    const mc_engine_model_t *m = e->m;
    const mc_engine_kv_t *kv = j->kv;
    int hs = m->head_size, n_heads = m->cfg.n_heads, kvd = m->kv_dim;
    int t0 = task / n_heads * ATT_TILE, h = task % n_heads;
    int nt = j->n_tok - t0 < ATT_TILE ? j->n_tok - t0 : ATT_TILE;
    int kvh = h / (n_heads / m->cfg.n_kv_heads);
    uint32_t B = kv->block_tokens, last = j->pos0 + (uint32_t)(t0 + nt - 1);
    float *att = e->att + (size_t)worker * ATT_TILE * e->att_stride; /* this worker's rows */
    float scale = 1.0f / sqrtf((float)hs), mx[ATT_TILE], inv[ATT_TILE];
    for (int u = 0; u < nt; u++)
        mx[u] = -INFINITY;
    for (uint32_t b = 0; b * B <= last; b++) {
        const float *kt = kv_k(kv, kvd, j->layer, b) + (size_t)kvh * hs * B;
        for (int u = 0; u < nt; u++) {
            uint32_t pos = j->pos0 + (uint32_t)(t0 + u);
            if (b * B > pos)
                continue;
            uint32_t n = pos + 1 - b * B < B ? pos + 1 - b * B : B;
            const float *q = e->q + (size_t)(t0 + u) * m->cfg.dim + (size_t)h * hs;
            float bm = e->k->scores(att + (size_t)u * e->att_stride + (size_t)b * B, q, kt, (int)B,
                                    (int)n, hs, scale);
            mx[u] = bm > mx[u] ? bm : mx[u];
        }
    }
    for (int u = 0; u < nt; u++) {
        uint32_t pos = j->pos0 + (uint32_t)(t0 + u);
        inv[u] = 1.0f / e->k->expsum(att + (size_t)u * e->att_stride, (int)pos + 1, mx[u]);
        memset(e->xb + (size_t)(t0 + u) * m->cfg.dim + (size_t)h * hs, 0,
               (size_t)hs * sizeof(float));
    }
    for (uint32_t b = 0; b * B <= last; b++) {
        const float *v = kv_v(kv, kvd, j->layer, b) + (size_t)kvh * hs;
        for (int u = 0; u < nt; u++) {
            uint32_t pos = j->pos0 + (uint32_t)(t0 + u);
            if (b * B > pos)
                continue;
            uint32_t n = pos + 1 - b * B < B ? pos + 1 - b * B : B;
            e->k->wsum(e->xb + (size_t)(t0 + u) * m->cfg.dim + (size_t)h * hs,
                       att + (size_t)u * e->att_stride + (size_t)b * B, inv[u], v, kvd, (int)n, hs);
        }
    }
}

/* One chunk of n tokens at positions pos0..pos0+n-1 through every layer; leaves the final
 * hidden state (before the final norm) in e->x. */
static void forward_chunk(mc_engine_t *e, mc_engine_kv_t *kv, const int32_t *tokens, int n,
                          uint32_t pos0)
{
    const mc_engine_model_t *m = e->m;
    const mc_engine_config_t *c = &m->cfg;
    int d = c->dim, hd = c->hidden_dim, kvd = m->kv_dim;
    for (int t = 0; t < n; t++)
        memcpy(e->x + (size_t)t * d, m->tok_emb + (size_t)tokens[t] * d, (size_t)d * sizeof(float));
    for (int l = 0; l < c->n_layers; l++) {
        for (int t = 0; t < n; t++)
            rmsnorm(e->xb + (size_t)t * d, e->x + (size_t)t * d, m->rms_att + (size_t)l * d, d);
        matmul(e, e->q, e->xb, n, m->wq + (size_t)l * d * d, d, d);
        matmul(e, e->kk, e->xb, n, m->wk + (size_t)l * d * kvd, kvd, d);
        matmul(e, e->vv, e->xb, n, m->wv + (size_t)l * d * kvd, kvd, d);
        for (int t = 0; t < n; t++) {
            uint32_t pos = pos0 + (uint32_t)t;
            rope(e->q + (size_t)t * d, d, m->head_size, pos);
            rope(e->kk + (size_t)t * kvd, kvd, m->head_size, pos);
            uint32_t b = pos / kv->block_tokens, off = pos % kv->block_tokens;
            float *kt = kv_k(kv, kvd, l, b) + off;
            for (int i = 0; i < kvd; i++)
                kt[(size_t)i * kv->block_tokens] = e->kk[(size_t)t * kvd + i];
            memcpy(kv_v(kv, kvd, l, b) + (size_t)off * kvd, e->vv + (size_t)t * kvd,
                   (size_t)kvd * sizeof(float));
        }
        att_job_t aj = {e, kv, l, n, pos0};
        pool_run(&e->pool, (n + ATT_TILE - 1) / ATT_TILE * c->n_heads, att_task, &aj);
        matmul(e, e->hb, e->xb, n, m->wo + (size_t)l * d * d, d, d); /* hb as scratch: n x d */
        for (size_t i = 0; i < (size_t)n * d; i++)
            e->x[i] += e->hb[i];
        for (int t = 0; t < n; t++)
            rmsnorm(e->xb + (size_t)t * d, e->x + (size_t)t * d, m->rms_ffn + (size_t)l * d, d);
        matmul(e, e->hb, e->xb, n, m->w1 + (size_t)l * hd * d, hd, d);
        matmul(e, e->hb2, e->xb, n, m->w3 + (size_t)l * hd * d, hd, d);
        for (size_t i = 0; i < (size_t)n * hd; i++) {
            float v = e->hb[i];
            e->hb[i] = v * (1.0f / (1.0f + expf(-v))) * e->hb2[i];
        }
        matmul(e, e->xb, e->hb, n, m->w2 + (size_t)l * d * hd, d, hd);
        for (size_t i = 0; i < (size_t)n * d; i++)
            e->x[i] += e->xb[i];
    }
}

static void final_logits(mc_engine_t *e, const float *x, float *logits)
{
    const mc_engine_model_t *m = e->m;
    rmsnorm(e->xb, x, m->rms_final, m->cfg.dim);
    matmul(e, logits, e->xb, 1, m->wcls, m->cfg.vocab_size, m->cfg.dim);
}

mc_status_t mc_engine_prefill(mc_engine_t *e, mc_engine_kv_t *kv, const int32_t *tokens,
                              uint32_t n, float *logits)
{
    const mc_engine_config_t *c = &e->m->cfg;
    uint64_t end = (uint64_t)kv->n_tokens + n;
    if (n == 0 || !tokens || end > (uint64_t)c->seq_len ||
        end > (uint64_t)kv->n_blocks * kv->block_tokens)
        return MC_ERR_INVALID_PARAMS;
    for (uint32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return MC_ERR_INVALID_PARAMS;
    uint32_t done = 0;
    while (done < n) {
        uint32_t step = n - done < CHUNK_TOKENS ? n - done : CHUNK_TOKENS;
        forward_chunk(e, kv, tokens + done, (int)step, kv->n_tokens);
        kv->n_tokens += step;
        done += step;
        if (done == n && logits)
            final_logits(e, e->x + (size_t)(step - 1) * c->dim, logits);
    }
    return MC_OK;
}

int32_t mc_engine_argmax(const float *v, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

mc_status_t mc_engine_decode(mc_engine_t *e, mc_engine_kv_t *kv, float *logits, int32_t *out,
                             uint32_t n_out)
{
    for (uint32_t i = 0; i < n_out; i++) {
        out[i] = mc_engine_argmax(logits, e->m->cfg.vocab_size);
        if (i + 1 == n_out)
            break;
        mc_status_t st = mc_engine_prefill(e, kv, &out[i], 1, logits);
        if (st != MC_OK)
            return st;
    }
    return MC_OK;
}
