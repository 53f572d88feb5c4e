/* Kernel variants (kernels.h). This file is compiled with -ffp-contract=off so that the portable
 * variant never fuses a multiply and an add on its own: the only fused operations are the
 * explicit FMAs of the AVX2 variant. */
#include "engine/kernels.h"

#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#define KV_PREFIX _portable
#define KV_TARGET
#define KV_FMA(a, b, c) ((a) * (b) + (c))
#define KV_FMA1(a, b, c) ((a) * (b) + (c))
#include "engine/kernels_impl.h"
#undef KV_PREFIX
#undef KV_TARGET
#undef KV_FMA
#undef KV_FMA1

#if defined(__x86_64__)
#define KV_PREFIX _avx2
#define KV_TARGET __attribute__((target("avx2,fma")))
#define KV_FMA(a, b, c) ((KV_V8)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#define KV_FMA1(a, b, c) __builtin_fmaf((a), (b), (c))
#include "engine/kernels_impl.h"
#undef KV_PREFIX
#undef KV_TARGET
#undef KV_FMA
#undef KV_FMA1
#endif

static const mc_engine_kernels_t k_portable = {"portable", matmul_portable, dot_portable,
                                               scores_portable, wsum_portable,
                                               expsum_portable};
#if defined(__x86_64__)
static const mc_engine_kernels_t k_avx2 = {"avx2-fma", matmul_avx2, dot_avx2, scores_avx2,
                                           wsum_avx2, expsum_avx2};
#endif

static bool have_avx2_fma(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

const mc_engine_kernels_t *mc_engine_kernels(void)
{
#if defined(__x86_64__)
    if (have_avx2_fma())
        return &k_avx2;
#endif
    return &k_portable;
}

const mc_engine_kernels_t *mc_engine_kernels_named(const char *name)
{
    if (!name)
        return mc_engine_kernels();
    if (!strcmp(name, k_portable.name))
        return &k_portable;
#if defined(__x86_64__)
    if (!strcmp(name, k_avx2.name) && have_avx2_fma())
        return &k_avx2;
#endif
    return NULL;
}
