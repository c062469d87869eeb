/* Query tables of the ADC / SDC scan (ockstore/search.py explains the tables; docs/ARCHITECTURE.md, "Search").
 *
 * In C rather than NumPy because an app searches one query at a time: a handful of NumPy calls per query cost more
 * than the arithmetic (about 80K multiply-adds for 64-bit codes at P = 128). The loops are axpy-shaped (the inner
 * loop runs over contiguous outputs) so gcc vectorises them; `target_clones` adds AVX2 and AVX-512 versions chosen
 * at load time. "fp-contract=off" forbids fused multiply-adds, so every clone computes the same roundings, and each
 * sum runs in a fixed order: a query's tables are bit-identical alone or in a batch, and whatever the threads.
 */
#ifndef OCKSTORE_TABLES_H
#define OCKSTORE_TABLES_H

#include <math.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define OCK_TABLE_FN __attribute__((target_clones("avx512f", "avx2", "default"), \
                                    optimize("fp-contract=off", "no-wrapv")))
#elif defined(__GNUC__) && !defined(__clang__)
#define OCK_TABLE_FN __attribute__((optimize("fp-contract=off", "no-wrapv")))
#else
#define OCK_TABLE_FN
#endif

/* The kinds of table (TABLE_* in _search_kernels.pyx): what a code's byte adds to its distance or score. */
#define OCK_TABLE_L2_NORM_TERM 0   /* -2 z_m.d; the constant ||z||^2 and the stored norm term complete it (C >= 2) */
#define OCK_TABLE_L2_WHOLE 1       /* ||z_m - d||^2: the whole distance (C = 1) */
#define OCK_TABLE_NEG_DOT 2        /* -z_m.d: minus the inner product (ip, cosine) */

/* z[j] = sum_p q[p] * rot[p, j] for j < D, summed over p in order. */
OCK_TABLE_FN
static void ock_rotate(const float *q, const double *rot, int P, int D, double *z) {
    for (int j = 0; j < D; j++) z[j] = 0.0;
    for (int p = 0; p < P; p++) {
        const double a = (double)q[p];
        const double *r = rot + (long)p * D;
        for (int j = 0; j < D; j++) z[j] += a * r[j];
    }
}

/* acc[i] = sum_s zm[s] * wt[s, i] for i < n, summed over s in order (wt: S rows of n). */
OCK_TABLE_FN
static void ock_dots(const double *zm, const double *wt, int S, int n, double *acc) {
    for (int i = 0; i < n; i++) acc[i] = 0.0;
    for (int s = 0; s < S; s++) {
        const double a = zm[s];
        const double *w = wt + (long)s * n;
        for (int i = 0; i < n; i++) acc[i] += a * w[i];
    }
}

/* The tables of one query from its rotated vector z (M*S): lut[(m*C + c)*slots + k] for k < K, +inf for
 * K <= k < slots. words_t is (M, S, C*K), sqnorms (M, C*K) (read for OCK_TABLE_L2_WHOLE only), acc scratch of C*K.
 * Returns the query's constant term (||z||^2 for OCK_TABLE_L2_NORM_TERM, else 0), in float64. */
OCK_TABLE_FN
static double ock_tables(const double *z, const double *words_t, const double *sqnorms, int M, int C, int K, int S,
                         int kind, int slots, double *acc, float *lut) {
    const int n = C * K;
    for (int m = 0; m < M; m++) {
        const double *zm = z + (long)m * S;
        ock_dots(zm, words_t + (long)m * S * n, S, n, acc);
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

#endif
