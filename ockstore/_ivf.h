/* The coarse step of the inverted file (docs/ARCHITECTURE.md, "Inverted file"): the inner products of a batch of
 * queries with every coarse centroid. A level body: _simd_level.h includes it once per SIMD level (OCK_LEVEL, OCK_FN,
 * OCK_TARGET; _simd.h).
 *
 * In C for the same reasons as _tables.h: the portable level is a plain loop the compiler vectorises, the AVX2 and
 * AVX-512 levels the same loop written with the level's vectors (OCK_V*, _simd_level.h), and no product is fused with
 * its sum (-ffp-contract=off), so every level rounds alike. Each output is summed over the P dimensions in order
 * p = 0, 1, ..., P-1 in its own accumulator, whatever the level, the group and the other queries of a batch: a query
 * ranks the lists identically when searched alone or in a batch, on any number of threads (a BLAS product of a batch
 * would not promise that: its kernels, hence its roundings, depend on the shape of the batch).
 *
 * The queries go in groups of OCK_IVF_GROUP, the lists in blocks of OCK_IVF_BLOCK: a group's outputs for a block are
 * held in registers across the P dimensions, so each row of a block of the centroid matrix (read from L2: 512 KB at
 * P = 128, L = 1,024) serves the whole group once loaded. One query at a time read the whole matrix per query, and
 * paid ~19 us per query for it at P = 128, L = 1,024 (AMD EPYC, Zen 4); a group of four shares that reading.
 *
 * The centroid matrix is stored in panels (OCK_COARSE_PANEL lists each, _simd.h; _kmeans.CoarseTables builds it):
 * panel after panel, the P values of the panel's list j at p * width + j. A single query's block of 256 lists is then
 * one run of 128 KB read front to back, which the hardware prefetchers follow; in the transposed matrix it was 128
 * runs of 1 KB, 4 KB apart (PANEL_MEASURE). Panels change where values are read from, not what is summed.
 */

/* Queries per group and lists per block: the group's outputs of a block take 16 of AVX-512's 32 registers (4 x 4),
 * 8 of AVX2's 16 (4 x 2), leaving room for the row's vectors and the products. The portable level is plain C: 2
 * queries x 32 lists is the shape gcc compiled best for SSE2 (2 x 16, 2 x 8, 4 x 8 came out with shuffles and
 * spills; 10.7 against 36.9 us per query in a batch at P = 128, L = 1,024). A block of OCK_IVF_NARROW lists (one
 * register) takes the lists left over, single lists the rest. */
#if OCK_LEVEL == OCK_LEVEL_AVX512
#define OCK_IVF_GROUP 4
#define OCK_IVF_BLOCK 64
#define OCK_IVF_NARROW 16
#elif OCK_LEVEL == OCK_LEVEL_AVX2
#define OCK_IVF_GROUP 4
#define OCK_IVF_BLOCK 16
#define OCK_IVF_NARROW 8
#else
#define OCK_IVF_GROUP 2
#define OCK_IVF_BLOCK 32
#define OCK_IVF_NARROW 4
#endif

/* Blocks of B lists from l0 on (while l0 + B <= width) of a panel (ctp: its P rows of `width` floats): G queries (q,
 * rows of P floats) into their outputs (o, rows of L floats, from the panel's first list). Plain C, for the portable
 * level and single lists. */
#define OCK_COARSE_BLOCKS(G, B)                                                                      \
    for (; l0 + (B) <= width; l0 += (B)) {                                                           \
        float t[G][B];                                                                               \
        for (int i = 0; i < (G); i++)                                                                \
            for (int j = 0; j < (B); j++) t[i][j] = 0.0f;                                            \
        for (int p = 0; p < P; p++) {                                                                \
            const float *row = ctp + (long)p * width + l0;                                           \
            for (int i = 0; i < (G); i++) {                                                          \
                const float qp = q[(long)i * P + p];                                                 \
                for (int j = 0; j < (B); j++) t[i][j] += qp * row[j];                                \
            }                                                                                        \
        }                                                                                            \
        for (int i = 0; i < (G); i++)                                                                \
            for (int j = 0; j < (B); j++) o[(long)i * L + l0 + j] = t[i][j];                         \
    }

#if OCK_LEVEL == OCK_LEVEL_PORTABLE
#define OCK_COARSE_WIDE(G, B) OCK_COARSE_BLOCKS(G, B)
#else
/* The same with the level's vectors (NV = B / OCK_VW per query): the compiler's own vectorisation of the plain loop
 * spread AVX2's group over the lanes of SSE registers, with shuffles and spills. */
#define OCK_COARSE_WIDE(G, B)                                                                        \
    for (; l0 + (B) <= width; l0 += (B)) {                                                           \
        enum { NV = (B) / OCK_VW };                                                                  \
        ock_vf t[G][NV];                                                                             \
        for (int i = 0; i < (G); i++)                                                                \
            for (int v = 0; v < NV; v++) t[i][v] = OCK_VZERO();                                      \
        for (int p = 0; p < P; p++) {                                                                \
            const float *row = ctp + (long)p * width + l0;                                           \
            ock_vf r[NV];                                                                            \
            for (int v = 0; v < NV; v++) r[v] = OCK_VLOAD(row + v * OCK_VW);                         \
            for (int i = 0; i < (G); i++) {                                                          \
                const ock_vf qp = OCK_VSET1(q[(long)i * P + p]);                                     \
                for (int v = 0; v < NV; v++) t[i][v] = OCK_VADD(t[i][v], OCK_VMUL(qp, r[v]));        \
            }                                                                                        \
        }                                                                                            \
        for (int i = 0; i < (G); i++)                                                                \
            for (int v = 0; v < NV; v++) OCK_VSTORE(o + (long)i * L + l0 + v * OCK_VW, t[i][v]);     \
    }
#endif

/* Every list for the G queries from query i0 on, panel after panel. A smaller group takes wider blocks (the same
 * registers): each block is a pass over the P rows of its panel: at P = 128, L = 1,024 a single query took 52.7 us in
 * AVX2 blocks of 16 lists, 12.8 in blocks of 64; with AVX-512, 19.9 in blocks of 64, 9.5 in blocks of 256 (in the
 * transposed matrix, before panels). */
#define OCK_COARSE_GROUP(G)                                                                          \
    do {                                                                                             \
        const float *q = Q + (long)i0 * P;                                                           \
        for (int first = 0; first < L; first += OCK_COARSE_PANEL) {                                  \
            const int width = L - first < OCK_COARSE_PANEL ? L - first : OCK_COARSE_PANEL;           \
            const float *ctp = ct + (long)first * P;                                                 \
            float *o = out + (long)i0 * L + first;                                                   \
            int l0 = 0;                                                                              \
            OCK_COARSE_WIDE(G, OCK_IVF_BLOCK * (OCK_IVF_GROUP / (G)))                                \
            OCK_COARSE_WIDE(G, OCK_IVF_BLOCK)                                                        \
            OCK_COARSE_WIDE(G, OCK_IVF_NARROW)                                                       \
            OCK_COARSE_BLOCKS(G, 1)                                                                  \
        }                                                                                            \
    } while (0)

/* out[i * L + l] = sum_p Q[i * P + p] * c_l[p] for i < nq, l < L (Q: nq queries of P float32 values; ct: the
 * centroids in panels, P * L float32 values, see above; out: nq rows of L). Any nq: the groups are an implementation
 * detail, each output's sum is the same whatever the group it is computed in. */
OCK_TARGET static void OCK_FN(coarse_dots)(const float *Q, int nq, const float *ct, int P, int L, float *out) {
    int i0 = 0;
    for (; i0 + OCK_IVF_GROUP <= nq; i0 += OCK_IVF_GROUP) OCK_COARSE_GROUP(OCK_IVF_GROUP);
    switch (nq - i0) { /* the last group, of fewer queries */
#if OCK_IVF_GROUP > 3
    case 3:
        OCK_COARSE_GROUP(3);
        break;
#endif
#if OCK_IVF_GROUP > 2
    case 2:
        OCK_COARSE_GROUP(2);
        break;
#endif
    case 1:
        OCK_COARSE_GROUP(1);
        break;
    default:
        break;
    }
}

#undef OCK_COARSE_GROUP
#undef OCK_COARSE_WIDE
#undef OCK_COARSE_BLOCKS
#undef OCK_IVF_GROUP
#undef OCK_IVF_BLOCK
#undef OCK_IVF_NARROW
