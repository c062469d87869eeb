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

/* out[i] = sum_r a[r] * (double)m[r, i] for i < n (m: R rows of n float32 values), each sum taken over r in order.
 * Outputs are done in blocks of OCK_BLOCK held in registers across all R rows (a running sum in memory would cost a
 * load and a store per multiply-add); the order of every sum stays r = 0, 1, ..., so results equal the plain loop's.
 * Each product of a float32 value and a float64 widened from float32 is exact, so reading the model's float32
 * arrays gives exactly the sums of float64 copies, at half the memory traffic (for P = 384 the float64 copies would
 * not fit in L2). */
#define OCK_BLOCK 32
OCK_TABLE_FN
static void ock_vecmat(const double *a, const float *m, int R, int n, double *out) {
    int i0 = 0;
    for (; i0 + OCK_BLOCK <= n; i0 += OCK_BLOCK) {
        double t[OCK_BLOCK];
        for (int j = 0; j < OCK_BLOCK; j++) t[j] = 0.0;
        for (int r = 0; r < R; r++) {
            const double ar = a[r];
            const float *row = m + (long)r * n + i0;
            for (int j = 0; j < OCK_BLOCK; j++) t[j] += ar * (double)row[j];
        }
        for (int j = 0; j < OCK_BLOCK; j++) out[i0 + j] = t[j];
    }
    for (int i = i0; i < n; i++) {
        double t = 0.0;
        for (int r = 0; r < R; r++) t += a[r] * (double)m[(long)r * n + i];
        out[i] = t;
    }
}

/* z = q @ rot (rot: P rows of D), in float64; qd is scratch of P doubles. */
static void ock_rotate(const float *q, const float *rot, int P, int D, double *qd, double *z) {
    for (int p = 0; p < P; p++) qd[p] = (double)q[p];
    ock_vecmat(qd, rot, P, D, z);
}

/* The tables of one query from its rotated vector z (M*S): lut[(m*C + c)*slots + k] for k < K, +inf for
 * K <= k < slots. words_t is (M, S, C*K), sqnorms (M, C*K) (read for OCK_TABLE_L2_WHOLE only), acc scratch of C*K.
 * Returns the query's constant term (||z||^2 for OCK_TABLE_L2_NORM_TERM, else 0), in float64. */
OCK_TABLE_FN
static double ock_tables(const double *z, const float *words_t, const double *sqnorms, int M, int C, int K, int S,
                         int kind, int slots, double *acc, float *lut) {
    const int n = C * K;
    for (int m = 0; m < M; m++) {
        const double *zm = z + (long)m * S;
        ock_vecmat(zm, words_t + (long)m * S * n, S, n, acc);
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
