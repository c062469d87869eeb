/* Query tables of the ADC / SDC scans (ockstore/search.py explains the tables; docs/ARCHITECTURE.md, "Search").
 * A level body: simd_level.h includes it once per SIMD level (OCK_LEVEL, OCK_FN, OCK_TARGET; simd.h).
 *
 * In C rather than NumPy because an app searches one query at a time: a handful of NumPy calls per query cost more
 * than the arithmetic (about 80K multiply-adds for 64-bit codes at P = 128). The loops are axpy-shaped (the inner
 * loop runs over contiguous outputs) so the compiler vectorises them for the level in force. Products that are
 * rounded (the codebook stage) are never fused with the sums (simd.c is compiled with -ffp-contract=off), so every
 * level computes the same roundings; the rotation's products are exact, so the levels with FMA fuse them explicitly
 * (same sums, half the operations). Each sum runs in a fixed order: a query's tables are bit-identical alone or in a
 * batch, whatever the threads and whichever level runs.
 */
/* The kinds of table (OCK_TABLE_* in simd.h) say what a code's byte adds to its distance or score. */

/* out[i] = sum_r a[r] * (double)A[r, i] for i < n, each sum taken over r in order, where the R x n float32 matrix A
 * is stored in panels (ock_panels in ockstore/search.py writes them): columns i0 .. i0+w-1 (w = OCK_PANEL, or what is
 * left for the last panel) at m + i0*R, as R rows of w values. A panel's outputs are held in registers across all R
 * rows (a running sum in memory would cost a load and a store per multiply-add) and the panel is read sequentially:
 * the hardware prefetchers stream it, where the rows of a row-major A (a strided walk) took ~25% longer at P = 384
 * (measured on AMD EPYC, Zen 5). The order of every sum stays r = 0, 1, ..., so results equal the plain loop's.
 * Reading the model's float32 values (widened here) rather than float64 copies halves the memory traffic: for P = 384
 * the float64 copies would not fit in L2. The body is a macro because it is compiled twice (below), with
 * MULADD(a, b, c) = a * b + c, rounded twice or fused. */
#ifndef OCK_VECMAT_BODY
#define OCK_VECMAT_BODY(MULADD)                                                                      \
    int i0 = 0;                                                                                      \
    for (; i0 + OCK_PANEL <= n; i0 += OCK_PANEL) {                                                   \
        const float *panel = m + (long)i0 * R;                                                       \
        double t[OCK_PANEL];                                                                         \
        for (int j = 0; j < OCK_PANEL; j++) t[j] = 0.0;                                              \
        for (int r = 0; r < R; r++) {                                                                \
            const double ar = a[r];                                                                  \
            const float *row = panel + (long)r * OCK_PANEL;                                          \
            for (int j = 0; j < OCK_PANEL; j++) t[j] = MULADD(ar, (double)row[j], t[j]);             \
        }                                                                                            \
        for (int j = 0; j < OCK_PANEL; j++) out[i0 + j] = t[j];                                      \
    }                                                                                                \
    if (i0 < n) {                                                                                    \
        const int w = n - i0;                                                                        \
        const float *panel = m + (long)i0 * R;                                                       \
        for (int i = 0; i < w; i++) {                                                                \
            double t = 0.0;                                                                          \
            for (int r = 0; r < R; r++) t = MULADD(a[r], (double)panel[(long)r * w + i], t);         \
            out[i0 + i] = t;                                                                         \
        }                                                                                            \
    }
#define OCK_MUL_ADD(a, b, c) ((a) * (b) + (c))
#endif

/* a[r] is any float64 value: its products with the words are rounded, so they are never fused with the sums. */
OCK_TARGET static void OCK_FN(vecmat)(const double *a, const float *m, int R, int n, double *out) {
    OCK_VECMAT_BODY(OCK_MUL_ADD)
}

/* a[r] is a float64 widened from a float32: every product a[r] * (double)m[r, i] of two 24-bit significands is
 * exact in float64, so a fused multiply-add rounds exactly as the product then the add do. The levels with FMA use
 * it (one operation instead of two), the portable level computes the same sums with mul + add. */
#if OCK_LEVEL == OCK_LEVEL_PORTABLE
#define OCK_EXACT_MUL_ADD OCK_MUL_ADD
#else
#define OCK_EXACT_MUL_ADD(a, b, c) __builtin_fma(a, b, c)
#endif
OCK_TARGET static void OCK_FN(vecmat_exact_products)(const double *a, const float *m, int R, int n, double *out) {
    OCK_VECMAT_BODY(OCK_EXACT_MUL_ADD)
}
#undef OCK_EXACT_MUL_ADD

/* z = q @ R in float64, R the P x D rotation in panels (rot); qd is scratch of P doubles. */
OCK_TARGET static void OCK_FN(rotate)(const float *q, const float *rot, int P, int D, double *qd, double *z) {
    for (int p = 0; p < P; p++) qd[p] = (double)q[p];
    OCK_FN(vecmat_exact_products)(qd, rot, P, D, z);
}

/* The tables of one query from its rotated vector z (M*S): lut[(m*C + c)*slots + k] for k < K, +inf for
 * K <= k < slots. words_t holds M blocks of S*C*K values, block m the S x C*K matrix words_t[m, s, c*K + k] =
 * d[m, c, k, s] in panels; sqnorms is (M, C*K) (read for OCK_TABLE_L2_WHOLE only), acc scratch of C*K.
 * Returns the query's constant term (||z||^2 for OCK_TABLE_L2_NORM_TERM, else 0), in float64. */
OCK_TARGET static double OCK_FN(tables)(const double *z, const float *words_t, const double *sqnorms, int M, int C,
                                        int K, int S, int kind, int slots, double *acc, float *lut) {
    const int n = C * K;
    for (int m = 0; m < M; m++) {
        const double *zm = z + (long)m * S;
        OCK_FN(vecmat)(zm, words_t + (long)m * S * n, S, n, acc);
        if (kind == OCK_TABLE_L2_WHOLE) {
            double zz = 0.0;
            for (int s = 0; s < S; s++) zz += zm[s] * zm[s];
            const double *sq = sqnorms + (long)m * n;
            for (int i = 0; i < n; i++) acc[i] = (zz - 2.0 * acc[i]) + sq[i];
        } else if (kind == OCK_TABLE_NEG_DOT) {
            for (int i = 0; i < n; i++) acc[i] = -acc[i];
        } else {
            for (int i = 0; i < n; i++) acc[i] = -2.0 * acc[i];
        }
        for (int c = 0; c < C; c++) {
            float *out = lut + (long)(m * C + c) * slots;
            const double *a = acc + (long)c * K;
            for (int k = 0; k < K; k++) out[k] = (float)a[k];
            for (int k = K; k < slots; k++) out[k] = INFINITY;
        }
    }
    if (kind != OCK_TABLE_L2_NORM_TERM) return 0.0;
    double zz = 0.0;
    for (int j = 0; j < M * S; j++) zz += z[j] * z[j];
    return zz;
}
