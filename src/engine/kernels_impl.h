/* Kernel bodies, included by kernels.c once per variant with KV_PREFIX (name suffix),
 * KV_TARGET (function attribute) and KV_FMA(a, b, c) = a * b + c defined. */
typedef float KV_V8 __attribute__((vector_size(32), aligned(4)));

#define KV_CAT2(a, b) a##b
#define KV_CAT(a, b) KV_CAT2(a, b)
#define KV_FN(name) KV_CAT(name, KV_PREFIX)

KV_TARGET static inline KV_V8 KV_FN(ld)(const float *p)
{
    KV_V8 v;
    __builtin_memcpy(&v, p, sizeof(v));
    return v;
}

/* The fixed final reduction of the 8 lanes. */
KV_TARGET static inline float KV_FN(hsum)(KV_V8 a)
{
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

KV_TARGET static float KV_FN(dot)(const float *a, const float *b, int n)
{
    KV_V8 acc = {0};
    for (int k = 0; k < n; k += 8)
        acc = KV_FMA(KV_FN(ld)(a + k), KV_FN(ld)(b + k), acc);
    return KV_FN(hsum)(acc);
}

/* 4 tokens x 2 rows per tile: each element is the same acc = fma(w, x, acc) sequence as dot. */
KV_TARGET static void KV_FN(matmul)(float *out, int ld_out, const float *x, int ld_x, int n_tok,
                                    const float *W, int row0, int row1, int K)
{
    int t = 0;
    for (; t + 4 <= n_tok; t += 4) {
        const float *x0 = x + (size_t)t * ld_x, *x1 = x0 + ld_x, *x2 = x1 + ld_x, *x3 = x2 + ld_x;
        int j = row0;
        for (; j + 2 <= row1; j += 2) {
            const float *w0 = W + (size_t)j * K, *w1 = w0 + K;
            KV_V8 a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0},
                  a31 = {0};
            for (int k = 0; k < K; k += 8) {
                KV_V8 v0 = KV_FN(ld)(w0 + k), v1 = KV_FN(ld)(w1 + k);
                KV_V8 y = KV_FN(ld)(x0 + k);
                a00 = KV_FMA(v0, y, a00);
                a01 = KV_FMA(v1, y, a01);
                y = KV_FN(ld)(x1 + k);
                a10 = KV_FMA(v0, y, a10);
                a11 = KV_FMA(v1, y, a11);
                y = KV_FN(ld)(x2 + k);
                a20 = KV_FMA(v0, y, a20);
                a21 = KV_FMA(v1, y, a21);
                y = KV_FN(ld)(x3 + k);
                a30 = KV_FMA(v0, y, a30);
                a31 = KV_FMA(v1, y, a31);
            }
            float *o = out + (size_t)t * ld_out + j;
            o[0] = KV_FN(hsum)(a00);
            o[1] = KV_FN(hsum)(a01);
            o[ld_out] = KV_FN(hsum)(a10);
            o[ld_out + 1] = KV_FN(hsum)(a11);
            o[2 * (size_t)ld_out] = KV_FN(hsum)(a20);
            o[2 * (size_t)ld_out + 1] = KV_FN(hsum)(a21);
            o[3 * (size_t)ld_out] = KV_FN(hsum)(a30);
            o[3 * (size_t)ld_out + 1] = KV_FN(hsum)(a31);
        }
        for (; j < row1; j++)
            for (int u = 0; u < 4; u++)
                out[(size_t)(t + u) * ld_out + j] =
                    KV_FN(dot)(W + (size_t)j * K, x + (size_t)(t + u) * ld_x, K);
    }
    for (; t < n_tok; t++)
        for (int j = row0; j < row1; j++)
            out[(size_t)t * ld_out + j] = KV_FN(dot)(W + (size_t)j * K, x + (size_t)t * ld_x, K);
}

KV_TARGET static void KV_FN(axpy)(float *y, float a, const float *x, int n)
{
    KV_V8 av = {a, a, a, a, a, a, a, a};
    for (int i = 0; i < n; i += 8) {
        KV_V8 r = KV_FMA(av, KV_FN(ld)(x + i), KV_FN(ld)(y + i));
        __builtin_memcpy(y + i, &r, sizeof(r));
    }
}

#undef KV_FN
#undef KV_CAT
#undef KV_CAT2
