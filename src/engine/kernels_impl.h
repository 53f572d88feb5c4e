/* Kernel bodies, included by kernels.c once per variant with KV_PREFIX (name suffix),
 * KV_TARGET (function attribute) and KV_FMA(a, b, c) = a * b + c defined. */
typedef float KV_V8 __attribute__((vector_size(32)));
/* the same vector at any float-aligned address (loads and stores only) */
typedef float KV_V8U __attribute__((vector_size(32), aligned(4), may_alias));

#define KV_CAT2(a, b) a##b
#define KV_CAT(a, b) KV_CAT2(a, b)
#define KV_FN(name) KV_CAT(name, KV_PREFIX)

KV_TARGET static inline KV_V8 KV_FN(ld)(const float *p)
{
    return *(const KV_V8U *)p;
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

typedef int KV_I8 __attribute__((vector_size(32)));

/* Lane-wise select: m ? a : b (m from a vector comparison: all ones or zero). */
KV_TARGET static inline KV_V8 KV_FN(sel)(KV_I8 m, KV_V8 a, KV_V8 b)
{
    return (KV_V8)(((KV_I8)a & m) | ((KV_I8)b & ~m));
}

/* s[p] = scale * (sum over d in order of q[d] * Kt[d * ld + p]), p < n_pos; returns the max of
 * s[0..n_pos) (-inf when n_pos is 0). Lanes are positions, so each s[p] is the same fma chain
 * whether it falls in a vector or in the scalar tail. */
KV_TARGET static float KV_FN(scores)(float *s, const float *q, const float *Kt, int ld, int n_pos,
                                     int hs, float scale)
{
    KV_V8 mxv = {-__builtin_inff(), -__builtin_inff(), -__builtin_inff(), -__builtin_inff(),
                 -__builtin_inff(), -__builtin_inff(), -__builtin_inff(), -__builtin_inff()};
    int p = 0;
    for (; p + 16 <= n_pos; p += 16) {
        KV_V8 a0 = {0}, a1 = {0};
        for (int d = 0; d < hs; d++) {
            KV_V8 qd = {q[d], q[d], q[d], q[d], q[d], q[d], q[d], q[d]};
            a0 = KV_FMA(qd, KV_FN(ld)(Kt + (size_t)d * ld + p), a0);
            a1 = KV_FMA(qd, KV_FN(ld)(Kt + (size_t)d * ld + p + 8), a1);
        }
        a0 = a0 * scale;
        a1 = a1 * scale;
        mxv = KV_FN(sel)(a0 > mxv, a0, mxv);
        mxv = KV_FN(sel)(a1 > mxv, a1, mxv);
        *(KV_V8U *)(s + p) = a0;
        *(KV_V8U *)(s + p + 8) = a1;
    }
    for (; p + 8 <= n_pos; p += 8) {
        KV_V8 a0 = {0};
        for (int d = 0; d < hs; d++) {
            KV_V8 qd = {q[d], q[d], q[d], q[d], q[d], q[d], q[d], q[d]};
            a0 = KV_FMA(qd, KV_FN(ld)(Kt + (size_t)d * ld + p), a0);
        }
        a0 = a0 * scale;
        mxv = KV_FN(sel)(a0 > mxv, a0, mxv);
        *(KV_V8U *)(s + p) = a0;
    }
    float mx = mxv[0];
    for (int u = 1; u < 8; u++)
        mx = mxv[u] > mx ? mxv[u] : mx;
    for (; p < n_pos; p++) {
        float a = 0.0f;
        for (int d = 0; d < hs; d++)
            a = KV_FMA1(q[d], Kt[(size_t)d * ld + p], a);
        s[p] = a * scale;
        mx = s[p] > mx ? s[p] : mx;
    }
    return mx;
}

/* out[i] = fma(w[p] * scale, V[p * ld + i], out[i]) for p = 0, 1, ... n_pos - 1 in order. */
KV_TARGET static void KV_FN(wsum)(float *out, const float *w, float scale, const float *V, int ld,
                                  int n_pos, int hs)
{
    int i = 0;
    for (; i + 32 <= hs; i += 32) {
        KV_V8 a0 = KV_FN(ld)(out + i), a1 = KV_FN(ld)(out + i + 8), a2 = KV_FN(ld)(out + i + 16),
              a3 = KV_FN(ld)(out + i + 24);
        for (int p = 0; p < n_pos; p++) {
            float wp = w[p] * scale;
            KV_V8 wv = {wp, wp, wp, wp, wp, wp, wp, wp};
            const float *v = V + (size_t)p * ld + i;
            a0 = KV_FMA(wv, KV_FN(ld)(v), a0);
            a1 = KV_FMA(wv, KV_FN(ld)(v + 8), a1);
            a2 = KV_FMA(wv, KV_FN(ld)(v + 16), a2);
            a3 = KV_FMA(wv, KV_FN(ld)(v + 24), a3);
        }
        *(KV_V8U *)(out + i) = a0;
        *(KV_V8U *)(out + i + 8) = a1;
        *(KV_V8U *)(out + i + 16) = a2;
        *(KV_V8U *)(out + i + 24) = a3;
    }
    for (; i < hs; i += 8) {
        KV_V8 a0 = KV_FN(ld)(out + i);
        for (int p = 0; p < n_pos; p++) {
            float wp = w[p] * scale;
            KV_V8 wv = {wp, wp, wp, wp, wp, wp, wp, wp};
            a0 = KV_FMA(wv, KV_FN(ld)(V + (size_t)p * ld + i), a0);
        }
        *(KV_V8U *)(out + i) = a0;
    }
}

/* a[p] = exp(a[p] - mx) for p < n (a has room for n rounded up to 8, the lanes past n are
 * written as 0); returns their sum, with
 * lane p % 8 accumulating in order, then the fixed reduction. exp: Cody-Waite reduction and a
 * degree-6 polynomial, inputs clamped to [-87, 0]. */
KV_TARGET static float KV_FN(expsum)(float *a, int n, float mx)
{
    const KV_V8 lo = {-87.0f, -87.0f, -87.0f, -87.0f, -87.0f, -87.0f, -87.0f, -87.0f};
    KV_V8 sum = {0};
    for (int p = 0; p < n; p += 8) {
        KV_V8 x = KV_FN(ld)(a + p) - mx;
        for (int u = n - p; u < 8; u++) /* lanes past n: defined input, zeroed below */
            x[u] = -87.0f;
        x = KV_FN(sel)(x < lo, lo, x); /* x <= 0 already: mx is the max */
        KV_V8 t = x * 1.44269504088896341f - 0.5f;
        KV_I8 ni = __builtin_convertvector(t, KV_I8);
        KV_V8 nf = __builtin_convertvector(ni, KV_V8);
        KV_V8 r = x - nf * 0.693359375f;
        r = r - nf * -2.12194440e-4f;
        KV_V8 y = r * 1.9875691500E-4f + 1.3981999507E-3f;
        y = y * r + 8.3334519073E-3f;
        y = y * r + 4.1665795894E-2f;
        y = y * r + 1.6666665459E-1f;
        y = y * r + 5.0000001201E-1f;
        y = (y * r) * r + r + 1.0f;
        KV_I8 bits = (ni + 127) << 23;
        KV_V8 scale;
        __builtin_memcpy(&scale, &bits, sizeof(scale));
        y = y * scale;
        if (n - p < 8) {
            for (int u = n - p; u < 8; u++)
                y[u] = 0.0f;
        }
        *(KV_V8U *)(a + p) = y;
        sum = sum + y;
    }
    return KV_FN(hsum)(sum);
}

#undef KV_FN
#undef KV_CAT
#undef KV_CAT2
