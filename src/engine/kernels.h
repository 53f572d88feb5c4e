/* The engine's arithmetic kernels, one variant picked per process (AVX2+FMA when the CPU has
 * it, else portable 8-lane vector code). Every kernel computes each output element with the same
 * sequence of operations whatever the tile it falls in, so results are independent of how the
 * work is split (model.h, "Determinism contract"). Lengths are multiples of 8. */
#ifndef MC_ENGINE_KERNELS_H
#define MC_ENGINE_KERNELS_H

typedef struct mc_engine_kernels {
    const char *name;
    /* out[t * ld_out + j] = dot(W + j * K, x + t * ld_x) for t < n_tok, row0 <= j < row1 */
    void (*matmul)(float *out, int ld_out, const float *x, int ld_x, int n_tok, const float *W,
                   int row0, int row1, int K);
    float (*dot)(const float *a, const float *b, int n); /* same bits as one matmul element */
    /* Attention: scale * q.k of n_pos positions from K stored transposed (Kt[d * ld + p]);
     * returns their max. */
    float (*scores)(float *s, const float *q, const float *Kt, int ld, int n_pos, int hs,
                    float scale);
    /* out[i] += w[p] * scale * V[p * ld + i] over p in order. */
    void (*wsum)(float *out, const float *w, float scale, const float *V, int ld, int n_pos,
                 int hs);
    /* a[p] = exp(a[p] - mx) for p < n (a sized n rounded up to 8); returns the sum. */
    float (*expsum)(float *a, int n, float mx);
} mc_engine_kernels_t;

/* The best variant this CPU runs. */
const mc_engine_kernels_t *mc_engine_kernels(void);
/* The variant named "avx2-fma" or "portable"; NULL if unknown or not supported by this CPU. */
const mc_engine_kernels_t *mc_engine_kernels_named(const char *name);

#endif
