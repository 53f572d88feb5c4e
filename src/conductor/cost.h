/* Cost model for prefill, decode and KV movement (formulas: docs/internals/simulator.md).
 *
 *   kv_bytes/token = 2 * layers * kv_heads * head_dim * dtype_bytes
 *   prefill FLOPs(n new tokens after p cached tokens)
 *       = 2 * params * n                                   (weight GEMMs)
 *       + 4 * layers * q_heads * head_dim * (n*p + n*(n+1)/2)  (QK^T and AV, causal)
 *   prefill s   = FLOPs / (gpu_tflops * 1e12 * mfu) + prefill_overhead_s
 *   decode step = overhead + max(memory, compute), memory = (weight bytes + KV bytes of all
 *                 context tokens in the batch) / hbm_bw, compute = 2 * params * batch / peak
 *   transfer s  = latency + bytes / bandwidth
 * Pure functions on a caller-owned struct; no allocation. */
#ifndef MC_CONDUCTOR_COST_H
#define MC_CONDUCTOR_COST_H

#include "mooncake/status.h"

#include <stdint.h>

typedef struct mc_conductor_model {
    int64_t layers, kv_heads, q_heads, head_dim;
    double dtype_bytes;        /* KV dtype */
    double weight_bytes_per_param; /* weights dtype (2 = bf16) */
    double params;             /* parameter count */
    double gpu_tflops;         /* dense peak, TFLOP/s */
    double mfu;                /* achieved fraction of peak in prefill */
    double hbm_bw;             /* bytes/s */
    double hbm_bytes;          /* GPU memory */
    double prefill_overhead_s; /* per prefill batch launch */
    double decode_overhead_s;  /* per decode step (scheduling, sampling, launch) */
    int64_t block_tokens;      /* tokens per cache block (trace: 512) */
} mc_conductor_model_t;

/* Llama-3-8B-like shape (32 layers, 8 KV heads, 32 query heads, head dim 128, bf16, 8.03e9
 * params) on an A100-80GB-like GPU (312 TFLOP/s bf16 at 50% MFU, 2.0 TB/s HBM). */
void mc_conductor_model_default(mc_conductor_model_t *m_p);
mc_status_t mc_conductor_model_check(const mc_conductor_model_t *m);

double mc_conductor_kv_bytes_per_token(const mc_conductor_model_t *m);
double mc_conductor_block_bytes(const mc_conductor_model_t *m);
double mc_conductor_prefill_flops(const mc_conductor_model_t *m, double new_tokens,
                                  double prefix_tokens);
double mc_conductor_prefill_s(const mc_conductor_model_t *m, double new_tokens,
                              double prefix_tokens);
/* One decode step for `batch` sequences holding `ctx_tokens` tokens of KV in total. */
double mc_conductor_decode_step_s(const mc_conductor_model_t *m, double batch, double ctx_tokens);
/* KV bytes that fit next to the weights (0 if the weights do not fit). */
double mc_conductor_kv_capacity_bytes(const mc_conductor_model_t *m);
static inline double mc_conductor_transfer_s(double bytes, double bw, double latency_s)
{
    return bytes > 0 ? latency_s + bytes / bw : 0;
}

#endif
