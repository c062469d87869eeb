/* The coarse step of the inverted file (docs/ARCHITECTURE.md, "Inverted file"): the inner products of a batch of
 * queries with every coarse centroid. A level body: simd_level.h includes it once per SIMD level (OCK_LEVEL, OCK_FN,
 * OCK_TARGET; simd.h).
 *
 * In C for the same reasons as tables.h: the portable level is a plain loop the compiler vectorises, the AVX2 and
 * AVX-512 levels the same loop written with the level's vectors (OCK_V*, simd_level.h), and no product is fused with
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
 * The centroid matrix is stored in panels (OCK_COARSE_PANEL lists each, simd.h; _kmeans.CoarseTables builds it):
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


/* ---- A query alone -------------------------------------------------------------------------------------------------
 *
 * A query searched alone has no group to share the reading of the centroid matrix with (512 KB at P = 128, L =
 * 1,024), so it first reads a float16 copy of it, half the bytes, in panels of OCK_COARSE_HALF_PANEL lists (one run
 * read front to back), and computes approximate keys with proven bounds; only the lists whose bounds admit them
 * among the n_probe best (the candidates: 8.3 at n_probe 8, 32.9 at 32 on sift1M with 1,024 lists) get their exact
 * inner products, the very float32 sums coarse_dots computes (p = 0, 1, ..., P-1 in order, unfused), and the caller
 * (ivf.pxi, _probe_candidates) ranks them by the same keys as _probe_lists. The lists and terms are those of
 * the full step, bit for bit, at every level; the portable level has no prefilter. A probe alone went from 10.8 to
 * 7.1 us at n_probe 32 (8.2 to 5.2 at 8), about what a query of a batch of 4 costs.
 *
 * Method. h_l: the float16 values of c_l / s, s a power of two with max |c| / s in [2^14, 2^15) (any float32 centroid
 * fits float16's range); d_l = the float32 sum of q_p h_lp (fused, any order). Approximate key X_l = c_sqnorms[l] -
 * 2 s d_l (PROBE_L2) or -s d_l (PROBE_IP), in double; |key_l - X_l| <= E_l = alpha_l ||q|| + beta_l + w |c_sqnorms[l]|.
 * Any U with n_probe upper bounds X + E <= U has n_probe keys <= U, so every list of the n_probe best has key <= U,
 * hence lower bound X - E <= U: the candidates (l with X_l - E_l <= U) hold them all, and the n_probe best of the
 * candidates by (key, l) are the n_probe best of all. U: T0, the largest of the minima of the upper bounds over
 * n_probe disjoint runs of lists, then, among the lists whose lower bound is <= T0, the least of 2 x 16 evenly spaced
 * thresholds with n_probe upper bounds under it (near_kth).
 *
 * Bound (u = 2^-24, g = gamma_{P+1} = (P+1) u / (1 - (P+1) u), e_l = ||c_l - s h_l|| in float64; a float32 sum of P
 * products, any order, fused or not, errs by at most g sum |x_p y_p| + P 2^-150 with underflow, and sum |q_p c_lp| <=
 * ||q|| ||c_l|| (Cauchy-Schwarz)):
 *   |q.c_l - s d_l| <= ||q|| e_l + s (g ||q|| ||h_l|| + P 2^-150)                      (float16 rounding, its sum)
 *   |dot_l - q.c_l| <= g ||q|| ||c_l|| + P 2^-150                                       (the exact kernel's sum)
 *   PROBE_IP:  key = -dot_l exactly:  |key - X| <= ||q|| (e + g (||c|| + s ||h||)) + P 2^-150 (1 + s)
 *   PROBE_L2:  key = fl(sqn - 2 dot_l) (one rounding, u |sqn - 2 dot_l|):  |key - X| <= ||q|| (2 e + 2 g (||c|| + s
 *              ||h||) + 2 u (1 + g) ||c||) + u sqn + 2 P 2^-150 (1 + s)
 * CoarseTables.prefilter stores alpha_l, beta_l and w as twice these, with extra 8 u (||c|| + s ||h|| + e) ||q|| and
 * 4 u sqn terms that cover the double arithmetic of the bounds below and ||q||'s own rounding (computed in double,
 * raised by 2^-20). Overflow: a query with ||q|| max(||c_l||, ||h_l||) > 2^120 (qnorm_limit), a threshold U above
 * 2^127 or not a number, or a candidate's key that is not a finite number sends the query to the full step. */
#if OCK_LEVEL != OCK_LEVEL_PORTABLE
/* out[l] = the float32 sum of q_p h_lp over the padded lists (a multiple of OCK_COARSE_HALF_PANEL), in 8 registers of
 * 8 lists per panel: 256-bit conversions at both levels (AVX-512's 512-bit conversion ran at half the speed on Zen 4:
 * 4.4 against 2.6 us at P = 128, L = 1,024), and 64-list panels read front to back (2.9 us with the L2 cache
 * flushed, 4.4 in 256-list panels read as two blocks of 128). */
OCK_TARGET static void OCK_FN(coarse_half_dots)(const float *q, const uint16_t *h, int P, int padded, float *out) {
    for (int first = 0; first < padded; first += OCK_COARSE_HALF_PANEL) {
        const uint16_t *panel = h + (long)first * P;
        __m256 t[8];
        for (int v = 0; v < 8; v++) t[v] = _mm256_setzero_ps();
        for (int p = 0; p < P; p++) {
            const __m256 qp = _mm256_set1_ps(q[p]);
            const uint16_t *row = panel + (long)p * OCK_COARSE_HALF_PANEL;
            for (int v = 0; v < 8; v++)
                t[v] = _mm256_fmadd_ps(qp, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 8 * v))), t[v]);
        }
        for (int v = 0; v < 8; v++) _mm256_storeu_ps(out + first + 8 * v, t[v]);
    }
}

/* The smallest of a[0..n-1], NaN skipped (+inf for none). */
OCK_TARGET static double OCK_FN(least_of)(const double *a, int n) {
    int i = 0;
    double least = INFINITY;
#if OCK_LEVEL == OCK_LEVEL_AVX512
    if (n >= 8) {
        __m512d acc = _mm512_set1_pd(INFINITY);
        /* min(a, b) = a < b ? a : b: a NaN in a loses */
        for (; i + 8 <= n; i += 8) acc = _mm512_min_pd(_mm512_loadu_pd(a + i), acc);
        least = _mm512_reduce_min_pd(acc);
    }
#else
    if (n >= 4) {
        __m256d acc = _mm256_set1_pd(INFINITY);
        for (; i + 4 <= n; i += 4) acc = _mm256_min_pd(_mm256_loadu_pd(a + i), acc);
        const __m128d half = _mm_min_pd(_mm256_castpd256_pd128(acc), _mm256_extractf128_pd(acc, 1));
        least = _mm_cvtsd_f64(_mm_min_sd(half, _mm_unpackhi_pd(half, half)));
    }
#endif
    for (; i < n; i++) least = a[i] < least ? a[i] : least;
    return least;
}

/* The lists l < L with lower[l] <= bound, increasing, in cand (room for L + 16); their number. Without a branch per
 * list: the comparisons' masks left-pack the lists' numbers. */
OCK_TARGET static int OCK_FN(lists_under)(const double *lower, int L, double bound, int *cand) {
    int l = 0, m = 0;
#if OCK_LEVEL == OCK_LEVEL_AVX512
    const __m512d b = _mm512_set1_pd(bound);
    const __m512i step = _mm512_set1_epi32(16);
    __m512i ids = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (; l + 16 <= L; l += 16) {
        const __mmask16 k = (__mmask16)(_mm512_cmp_pd_mask(_mm512_loadu_pd(lower + l), b, _CMP_LE_OQ) |
                                        (_mm512_cmp_pd_mask(_mm512_loadu_pd(lower + l + 8), b, _CMP_LE_OQ) << 8));
        _mm512_storeu_si512((void *)(cand + m), _mm512_maskz_compress_epi32(k, ids));
        m += __builtin_popcount(k);
        ids = _mm512_add_epi32(ids, step);
    }
#else
    const __m256d b = _mm256_set1_pd(bound);
    const __m256i step = _mm256_set1_epi32(8);
    __m256i ids = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (; l + 8 <= L; l += 8) {
        const int k = _mm256_movemask_pd(_mm256_cmp_pd(_mm256_loadu_pd(lower + l), b, _CMP_LE_OQ)) |
                      _mm256_movemask_pd(_mm256_cmp_pd(_mm256_loadu_pd(lower + l + 4), b, _CMP_LE_OQ)) << 4;
        const __m256i lanes = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)ock_pack_lanes[k]));
        _mm256_storeu_si256((__m256i *)(cand + m), _mm256_permutevar8x32_epi32(ids, lanes));
        m += __builtin_popcount((unsigned)k);
        ids = _mm256_add_epi32(ids, step);
    }
#endif
    for (; l < L; l++) {
        cand[m] = l;
        m += lower[l] <= bound;
    }
    return m;
}

/* The counts of values[0..m-1] (no NaN) <= each of OCK_HALF_STEPS thresholds from above `low` to `top` (evenly
 * spaced, the last one `top` itself) into count, and the thresholds into step; branch-free (the compiler vectorises
 * the thresholds). */
#define OCK_HALF_STEPS 16
OCK_TARGET static void OCK_FN(count_under_steps)(const double *values, int m, double low, double top,
                                                      double *step, int *count) {
    const double width = (top - low) / OCK_HALF_STEPS;
    for (int s = 0; s < OCK_HALF_STEPS; s++) {
        step[s] = s == OCK_HALF_STEPS - 1 ? top : low + (s + 1) * width;
        count[s] = 0;
    }
    for (int i = 0; i < m; i++) {
        const double v = values[i];
        for (int s = 0; s < OCK_HALF_STEPS; s++) count[s] += v <= step[s];
    }
}

/* A value >= the k-th smallest (1-based) of values[0..m-1] (no NaN, k of them <= top) and close to it: counts under
 * evenly spaced thresholds between `low` and `top`, twice (the second time between the two thresholds the k-th lies
 * between). Any threshold with k values under it is >= the k-th smallest, whatever the rounding of the thresholds. */
OCK_TARGET static double OCK_FN(near_kth)(const double *values, int m, int k, double low, double top) {
    double step[OCK_HALF_STEPS];
    int count[OCK_HALF_STEPS];
    for (int pass = 0; pass < 2 && low < top; pass++) {
        OCK_FN(count_under_steps)(values, m, low, top, step, count);
        int s = 0;
        while (count[s] < k) s++; /* count[OCK_HALF_STEPS - 1]: the values <= top, at least k */
        top = step[s];
        if (s > 0) low = step[s - 1];
    }
    return top;
}

/* dots[cand[i]] for i < n: each summed over p = 0..P-1 in order from 0, a product then a sum, as coarse_dots does.
 * Eight candidates at a time, one per lane: their rows are read 8 values at a time and transposed in registers (the
 * same sums: each lane adds its own products in order): a probe alone at n_probe 32 (33 candidates, P = 128) took
 * 0.4 us less than with eight scalar sums side by side. A last group of fewer repeats its last candidate in the
 * spare lanes. */
OCK_TARGET static void OCK_FN(coarse_dots_of)(const float *q, const float *C, int P, const int *cand, int n,
                                                   float *dots) {
    for (int i = 0; i < n; i += 8) {
        const float *c[8];
        for (int j = 0; j < 8; j++) c[j] = C + (long)cand[i + j < n ? i + j : n - 1] * P;
        __m256 t = _mm256_setzero_ps();
        int p = 0;
        for (; p + 8 <= P; p += 8) {
            const __m256 a0 = _mm256_unpacklo_ps(_mm256_loadu_ps(c[0] + p), _mm256_loadu_ps(c[1] + p));
            const __m256 a1 = _mm256_unpackhi_ps(_mm256_loadu_ps(c[0] + p), _mm256_loadu_ps(c[1] + p));
            const __m256 a2 = _mm256_unpacklo_ps(_mm256_loadu_ps(c[2] + p), _mm256_loadu_ps(c[3] + p));
            const __m256 a3 = _mm256_unpackhi_ps(_mm256_loadu_ps(c[2] + p), _mm256_loadu_ps(c[3] + p));
            const __m256 a4 = _mm256_unpacklo_ps(_mm256_loadu_ps(c[4] + p), _mm256_loadu_ps(c[5] + p));
            const __m256 a5 = _mm256_unpackhi_ps(_mm256_loadu_ps(c[4] + p), _mm256_loadu_ps(c[5] + p));
            const __m256 a6 = _mm256_unpacklo_ps(_mm256_loadu_ps(c[6] + p), _mm256_loadu_ps(c[7] + p));
            const __m256 a7 = _mm256_unpackhi_ps(_mm256_loadu_ps(c[6] + p), _mm256_loadu_ps(c[7] + p));
            const __m256 b0 = _mm256_shuffle_ps(a0, a2, 0x44), b1 = _mm256_shuffle_ps(a0, a2, 0xee);
            const __m256 b2 = _mm256_shuffle_ps(a1, a3, 0x44), b3 = _mm256_shuffle_ps(a1, a3, 0xee);
            const __m256 b4 = _mm256_shuffle_ps(a4, a6, 0x44), b5 = _mm256_shuffle_ps(a4, a6, 0xee);
            const __m256 b6 = _mm256_shuffle_ps(a5, a7, 0x44), b7 = _mm256_shuffle_ps(a5, a7, 0xee);
            /* column k: the 8 candidates' values at p + k */
            const __m256 column[8] = {
                _mm256_permute2f128_ps(b0, b4, 0x20), _mm256_permute2f128_ps(b1, b5, 0x20),
                _mm256_permute2f128_ps(b2, b6, 0x20), _mm256_permute2f128_ps(b3, b7, 0x20),
                _mm256_permute2f128_ps(b0, b4, 0x31), _mm256_permute2f128_ps(b1, b5, 0x31),
                _mm256_permute2f128_ps(b2, b6, 0x31), _mm256_permute2f128_ps(b3, b7, 0x31),
            };
            for (int k = 0; k < 8; k++) t = _mm256_add_ps(t, _mm256_mul_ps(_mm256_set1_ps(q[p + k]), column[k]));
        }
        for (; p < P; p++) {
            const __m256 column = _mm256_setr_ps(c[0][p], c[1][p], c[2][p], c[3][p], c[4][p], c[5][p], c[6][p],
                                                 c[7][p]);
            t = _mm256_add_ps(t, _mm256_mul_ps(_mm256_set1_ps(q[p]), column));
        }
        float sums[8];
        _mm256_storeu_ps(sums, t);
        for (int j = 0; j < 8 && i + j < n; j++) dots[cand[i + j]] = sums[j];
    }
}

/* ock_coarse_alone (simd.h): the candidates of query q, increasing, in cand, their exact inner products in dots;
 * their number, or -1 (the full step). */
OCK_TARGET static int OCK_FN(coarse_alone)(const float *q, const ock_coarse_half *h, const float *c_sqnorms,
                                                int n_probe, void *work, int *cand, float *dots) {
    const int P = h->P, L = h->L;
    if (L < OCK_COARSE_HALF_MIN_LISTS || n_probe < 1 || 2 * n_probe > L) return -1;
    double qq = 0;
    for (int p = 0; p < P; p++) qq += (double)q[p] * q[p];
    const double qnorm = sqrt(qq) * (1 + 0x1p-20);
    if (!(qnorm <= h->qnorm_limit)) return -1; /* also NaN */
    const int padded = (L + OCK_COARSE_HALF_PANEL - 1) / OCK_COARSE_HALF_PANEL * OCK_COARSE_HALF_PANEL;
    float *approx = (float *)work;
    double *lower = (double *)(approx + padded), *upper = lower + L; /* and the candidates' upper bounds */
    OCK_FN(coarse_half_dots)(q, h->values, P, padded, approx);
    const double factor = h->factor, weight = h->sqnorm_weight;
    const double *alpha = h->alpha, *beta = h->beta;
    if (h->kind == 0) {
        for (int l = 0; l < L; l++) {
            const double sqn = c_sqnorms[l], x = sqn + factor * approx[l];
            const double e = qnorm * alpha[l] + beta[l] + weight * fabs(sqn);
            lower[l] = x - e;
            upper[l] = x + e;
        }
    } else {
        for (int l = 0; l < L; l++) {
            const double x = factor * approx[l], e = qnorm * alpha[l] + beta[l];
            lower[l] = x - e;
            upper[l] = x + e;
        }
    }
    /* T0: n_probe lists (one per run) have upper bounds <= T0 (NaN bounds are skipped: a run of them gives +inf) */
    const int run = L / n_probe;
    double t0 = -INFINITY, low = INFINITY;
    for (int r = 0; r < n_probe; r++) {
        const double least = OCK_FN(least_of)(upper + (long)r * run, run);
        t0 = least > t0 ? least : t0;
        low = least < low ? least : low;
    }
    if (!(t0 <= 0x1p127) || !(low > -0x1p127)) return -1;
    /* the lists under T0 (lower <= upper: they include the n_probe lists of the runs' minima), then U, then the
     * candidates among them */
    const int m = OCK_FN(lists_under)(lower, L, t0, cand);
    double *cand_upper = upper + L;
    for (int i = 0; i < m; i++) cand_upper[i] = upper[cand[i]];
    const double bound = OCK_FN(near_kth)(cand_upper, m, n_probe, low, t0);
    int n = 0;
    for (int i = 0; i < m; i++) {
        cand[n] = cand[i];
        n += lower[cand[i]] <= bound;
    }
    if (2 * n > L) return -1; /* ties everywhere: the full step reads less */
    OCK_FN(coarse_dots_of)(q, h->centroids, P, cand, n, dots);
    return n;
}
#undef OCK_HALF_STEPS
#endif

#undef OCK_COARSE_GROUP
#undef OCK_COARSE_WIDE
#undef OCK_COARSE_BLOCKS
#undef OCK_IVF_GROUP
#undef OCK_IVF_BLOCK
#undef OCK_IVF_NARROW
