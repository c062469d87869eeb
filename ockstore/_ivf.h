/* The coarse step of the inverted file (docs/ARCHITECTURE.md, "Inverted file"): the inner products of one query with
 * every coarse centroid. A level body: _simd_level.h includes it once per SIMD level (OCK_LEVEL, OCK_FN, OCK_TARGET;
 * _simd.h).
 *
 * In C for the same reasons as _tables.h: the compiler vectorises it for each level, and no product is fused with its
 * sum (-ffp-contract=off), so every level rounds alike. Each output is summed over the P dimensions in order
 * p = 0, 1, ..., P-1 whatever the level and whatever the other queries of a batch: a query ranks the lists identically
 * when searched alone or in a batch, on any number of threads (a BLAS product of a batch would not promise that: its
 * kernels, hence its roundings, depend on the shape of the batch).
 */

/* Outputs computed at once, held in registers across the P dimensions (four AVX-512 or eight AVX2 registers): the
 * centroid matrix is read once per query, from L2 for up to a few thousand lists at P = 128. */
#ifndef OCK_IVF_BLOCK
#define OCK_IVF_BLOCK 64
#endif

/* out[l] = sum_p q[p] * ct[p * L + l] for l < L (ct: the centroids transposed, P rows of L float32 values). */
OCK_TARGET static void OCK_FN(coarse_dots)(const float *q, const float *ct, int P, int L, float *out) {
    int l0 = 0;
    for (; l0 + OCK_IVF_BLOCK <= L; l0 += OCK_IVF_BLOCK) {
        float t[OCK_IVF_BLOCK];
        for (int j = 0; j < OCK_IVF_BLOCK; j++) t[j] = 0.0f;
        for (int p = 0; p < P; p++) {
            const float qp = q[p];
            const float *row = ct + (long)p * L + l0;
            for (int j = 0; j < OCK_IVF_BLOCK; j++) t[j] += qp * row[j];
        }
        for (int j = 0; j < OCK_IVF_BLOCK; j++) out[l0 + j] = t[j];
    }
    for (int l = l0; l < L; l++) {
        float t = 0.0f;
        for (int p = 0; p < P; p++) t += q[p] * ct[(long)p * L + l];
        out[l] = t;
    }
}
