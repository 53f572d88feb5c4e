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
    void (*axpy)(float *y, float a, const float *x, int n); /* y[i] += a * x[i] */
} mc_engine_kernels_t;

const mc_engine_kernels_t *mc_engine_kernels(void);

#endif
