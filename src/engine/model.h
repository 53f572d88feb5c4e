/* mc_engine: a small Llama-style decoder-only transformer in C (RMSNorm, RoPE, grouped-query
 * attention, SwiGLU), fp32 compute, a paged KV cache, threads for the matmuls and attention.
 *
 * Determinism contract: every value the forward pass computes for a token (its activations, its
 * K/V rows, its logits) is a function of that token's row and of the K/V rows of the positions
 * before it, computed in one fixed order: matmul outputs are per-(token,row) dot products with a
 * fixed 8-lane accumulation and a fixed final reduction, attention runs over positions 0..pos in
 * order. So the result does not depend on how a sequence is split into prefill calls, on the
 * chunk size, on which thread computed what, or on whether the prefix K/V came from an earlier
 * call or from the store: prefill(all) and prefill(suffix | K/V of the prefix) give the same bits.
 * (Bits do depend on the kernel variant, AVX2+FMA or portable; mc_engine_kernels_name names it
 * and the KV compatibility identity includes it.)
 *
 * Weights: generated from a seed (splitmix64, uniform with variance 1/fan_in) or read from a
 * llama2.c checkpoint (run.c's format: seven int32 header fields dim, hidden_dim, n_layers,
 * n_heads, n_kv_heads, vocab_size (negative = unshared classifier), seq_len, then the fp32
 * weights: token embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, the unused
 * freq_cis_real/imag (seq_len * head_size / 2 each), and wcls when unshared).
 */
#ifndef MC_ENGINE_MODEL_H
#define MC_ENGINE_MODEL_H

#include "mooncake/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mc_engine_config {
    int32_t dim;         /* model width; multiple of 8 */
    int32_t hidden_dim;  /* SwiGLU width; multiple of 8 */
    int32_t n_layers;
    int32_t n_heads;     /* dim / n_heads = head_size, a multiple of 8 */
    int32_t n_kv_heads;  /* divides n_heads (grouped-query attention) */
    int32_t vocab_size;  /* > 0 (the checkpoint's sign is shared_classifier) */
    int32_t seq_len;     /* longest sequence (prompt + generated) */
    bool shared_classifier; /* wcls = token embedding */
} mc_engine_config_t;

/* Caps on a configuration (a checkpoint header is input). */
#define MC_ENGINE_DIM_MAX 16384
#define MC_ENGINE_HIDDEN_MAX 65536
#define MC_ENGINE_LAYERS_MAX 256
#define MC_ENGINE_VOCAB_MAX (1 << 20)
#define MC_ENGINE_SEQ_MAX (1 << 20)
#define MC_ENGINE_THREADS_MAX 256

/* The default model: an 8192-token prefill in about a second on two cores (docs/internals/engine.md). */
void mc_engine_config_default(mc_engine_config_t *cfg);
/* A tiny model for tests (dim 64, 2 layers, 4 heads, 2 kv heads, vocab 256, seq 256). */
void mc_engine_config_tiny(mc_engine_config_t *cfg);
/* MC_OK or MC_ERR_INVALID_PARAMS (with a log line naming the field). */
mc_status_t mc_engine_config_check(const mc_engine_config_t *cfg);

typedef struct mc_engine_model {
    mc_engine_config_t cfg;
    int32_t head_size, kv_dim;
    float *mem;          /* owned: every weight, back to back in checkpoint order */
    size_t n_floats;     /* floats in mem */
    float *tok_emb, *rms_att, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3, *rms_final, *wcls;
    uint64_t weights_hash; /* XXH3-64 of mem */
} mc_engine_model_t;

/* Allocates a model whose weights come from seed. *model_p owned (mc_engine_model_free). */
mc_status_t mc_engine_model_seeded(const mc_engine_config_t *cfg, uint64_t seed,
                                   mc_engine_model_t **model_p);
/* Reads a llama2.c checkpoint (the file size must match the header exactly). */
mc_status_t mc_engine_model_load(const char *path, mc_engine_model_t **model_p);
/* The model a tool asked for: the checkpoint at path when it is not NULL, else the tiny or
 * default configuration seeded with seed. *model_p owned (mc_engine_model_free). */
mc_status_t mc_engine_model_open(const char *path, bool tiny, uint64_t seed,
                                 mc_engine_model_t **model_p);
/* Writes the model as a llama2.c checkpoint (freq_cis written as zeros). */
mc_status_t mc_engine_model_save(const mc_engine_model_t *model, const char *path);
void mc_engine_model_free(mc_engine_model_t *model);

/* "avx2-fma" or "portable": the arithmetic an engine uses by default on this machine. */
const char *mc_engine_kernel_variant(void);

/* Paged KV cache: logical block i of a sequence lives in pool slot table[i]. A block holds, for
 * each layer, K transposed (position fastest, so attention scores vectorize over positions) then
 * V (one row per position):
 *   struct { float k[kv_dim][block_tokens]; float v[block_tokens][kv_dim]; } block[n_layers]
 * which is also the payload of a stored block (reuse.h). */
typedef struct mc_engine_kv {
    uint32_t block_tokens;
    uint32_t n_blocks;     /* capacity: ceil(seq_len / block_tokens) */
    size_t block_floats;   /* n_layers * 2 * block_tokens * kv_dim */
    float *pool;           /* owned, n_blocks * block_floats, 64-byte aligned */
    uint32_t *table;       /* owned, n_blocks entries (identity at creation) */
    uint32_t n_tokens;     /* positions [0, n_tokens) hold valid K/V */
} mc_engine_kv_t;

mc_status_t mc_engine_kv_create(const mc_engine_model_t *model, uint32_t block_tokens,
                                mc_engine_kv_t **kv_p);
void mc_engine_kv_free(mc_engine_kv_t *kv);
static inline float *mc_engine_kv_block(const mc_engine_kv_t *kv, uint32_t i)
{
    return kv->pool + (size_t)kv->table[i] * kv->block_floats;
}
static inline size_t mc_engine_kv_block_bytes(const mc_engine_kv_t *kv)
{
    return kv->block_floats * sizeof(float);
}

typedef struct mc_engine mc_engine_t; /* a model plus threads and scratch buffers */

/* n_threads 1..MC_ENGINE_THREADS_MAX (the caller's thread is one of them). The model is
 * borrowed and must outlive the engine. One engine runs one sequence at a time. */
mc_status_t mc_engine_create(const mc_engine_model_t *model, int n_threads, mc_engine_t **eng_p);
void mc_engine_destroy(mc_engine_t *eng);
const mc_engine_model_t *mc_engine_model(const mc_engine_t *eng);
/* Choose the kernel variant ("avx2-fma" or "portable"; NULL = the default): MC_ERR_NOT_SUPPORTED
 * if this CPU cannot run it or the name is unknown. Not while a prefill or decode runs. */
mc_status_t mc_engine_set_kernels(mc_engine_t *eng, const char *variant);
const char *mc_engine_kernels_name(const mc_engine_t *eng);

/* Prefill tokens[0..n) at positions kv->n_tokens .. kv->n_tokens + n - 1 (the K/V of the
 * positions before must already be in kv), appending their K/V. If logits is not NULL it
 * receives the vocab_size logits of the last token. n >= 1; the end must fit in seq_len and in
 * the cache (MC_ERR_INVALID_PARAMS otherwise); tokens must be in [0, vocab_size). */
mc_status_t mc_engine_prefill(mc_engine_t *eng, mc_engine_kv_t *kv, const int32_t *tokens,
                              uint32_t n, float *logits);

/* Greedy decode: out[0] = argmax(logits) (lowest index on ties), then feeds out[i] to get the
 * logits of out[i+1], for n_out tokens. logits (vocab_size floats) is read at the start and
 * holds, at the end, the logits out[n_out-1] was chosen from. */
mc_status_t mc_engine_decode(mc_engine_t *eng, mc_engine_kv_t *kv, float *logits,
                             int32_t *out, uint32_t n_out);

int32_t mc_engine_argmax(const float *v, int32_t n);

/* splitmix64 step: the one PRNG of the engine (weights, synthetic tokens). */
static inline uint64_t mc_engine_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#endif
