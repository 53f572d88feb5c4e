/* Cost model (formulas in cost.h and docs/internals/simulator.md): defaults for an 8B-class
 * model on an A100-class GPU, a range check, and pure functions for KV bytes, prefill FLOPs and
 * time, decode step time and transfer time. No state, no allocation. */
#include "conductor/cost.h"

#include "common/log.h"

#include <math.h>
#include <string.h>

void mc_conductor_model_default(mc_conductor_model_t *m)
{
    memset(m, 0, sizeof(*m));
    m->layers = 32;
    m->kv_heads = 8;
    m->q_heads = 32;
    m->head_dim = 128;
    m->dtype_bytes = 2;
    m->weight_bytes_per_param = 2;
    m->params = 8.03e9;
    m->gpu_tflops = 312;
    m->mfu = 0.5;
    m->hbm_bw = 2.0e12;
    m->hbm_bytes = 80e9;
    m->prefill_overhead_s = 0.005;
    m->decode_overhead_s = 0.004;
    m->block_tokens = 512;
}

mc_status_t mc_conductor_model_check(const mc_conductor_model_t *m)
{
    if (m->layers <= 0 || m->kv_heads <= 0 || m->q_heads <= 0 || m->head_dim <= 0 ||
        !(m->dtype_bytes > 0) || !(m->weight_bytes_per_param > 0) || !(m->params > 0) ||
        !(m->gpu_tflops > 0) || !(m->mfu > 0 && m->mfu <= 1) || !(m->hbm_bw > 0) ||
        !(m->hbm_bytes > 0) || !(m->prefill_overhead_s >= 0) || !(m->decode_overhead_s >= 0) ||
        m->block_tokens <= 0) {
        MC_LOG_ERROR("cost model: a model parameter is out of range");
        return MC_ERR_INVALID_PARAMS;
    }
    return MC_OK;
}

double mc_conductor_kv_bytes_per_token(const mc_conductor_model_t *m)
{
    return 2.0 * (double)m->layers * (double)m->kv_heads * (double)m->head_dim * m->dtype_bytes;
}

double mc_conductor_block_bytes(const mc_conductor_model_t *m)
{
    return (double)m->block_tokens * mc_conductor_kv_bytes_per_token(m);
}

double mc_conductor_prefill_flops(const mc_conductor_model_t *m, double n, double p)
{
    if (n <= 0)
        return 0;
    double linear = 2.0 * m->params * n;
    double attn = 4.0 * (double)m->layers * (double)m->q_heads * (double)m->head_dim *
                  (n * p + n * (n + 1) / 2.0);
    return linear + attn;
}

double mc_conductor_prefill_s(const mc_conductor_model_t *m, double n, double p)
{
    if (n <= 0)
        return 0;
    return mc_conductor_prefill_flops(m, n, p) / (m->gpu_tflops * 1e12 * m->mfu) +
           m->prefill_overhead_s;
}

double mc_conductor_decode_step_s(const mc_conductor_model_t *m, double batch, double ctx)
{
    if (batch <= 0)
        return 0;
    double mem = (m->params * m->weight_bytes_per_param + ctx * mc_conductor_kv_bytes_per_token(m)) /
                 m->hbm_bw;
    double compute = 2.0 * m->params * batch / (m->gpu_tflops * 1e12 * m->mfu);
    return m->decode_overhead_s + fmax(mem, compute);
}

double mc_conductor_kv_capacity_bytes(const mc_conductor_model_t *m)
{
    double c = m->hbm_bytes * 0.9 - m->params * m->weight_bytes_per_param;
    return c > 0 ? c : 0;
}
