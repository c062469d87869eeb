/* The loops of the beam encoder (and of training's per-word sums) that must be vectorised to run at table speed.
 * A level body: simd_level.h includes it once per SIMD level (OCK_LEVEL, OCK_FN, OCK_TARGET; simd.h says what the
 * levels promise).
 *
 * Two kinds. The first half: small loops the compiler vectorises for the level in force. They live in C rather than in
 * the Cython kernels because Cython can set neither a target nor floating-point options for one function. Each is
 * written so that it vectorises without licence to reorder: minima are taken in 32 (or 8) explicit partial lanes,
 * folded by halves, and a min is exact whatever the grouping; sums keep their written order. The second half: the
 * table product, the selection and the leaves of the beam, written with x86 intrinsics at the AVX2 and AVX-512
 * levels (one body over the vector operations of simd_level.h where the two instruction sets allow it) and as plain
 * loops at the portable level, which the others fall back to for shapes they do not cover.
 */

/* unary[j] = sqnorm[j] - 2 * dot[j], in place over `dot`: the part of ||z - d_j||^2 that depends on word j. */
OCK_TARGET static void OCK_FN(unary_inplace)(float *dot, const float *sqnorm, int n) {
    for (int j = 0; j < n; j++) dot[j] = sqnorm[j] - 2.0f * dot[j];
}

/* The least of part[0..31], folded by halves: each step is whole vector operations (min is exact, so the grouping
 * cannot change the value). */
OCK_TARGET static inline float OCK_FN(min_of_32)(float *part) {
    for (int w = 16; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) part[j] = part[j + w] < part[j] ? part[j + w] : part[j];
    return part[0];
}

/* min over k of a[k] + b[k] (n >= 1). 32 partial minima (four AVX2 or two AVX-512 registers) break the dependency
 * chain of a single running minimum. */
OCK_TARGET static float OCK_FN(min_of_sum)(const float *a, const float *b, int n) {
    float part[32];
    const float first = a[0] + b[0];
    for (int j = 0; j < 32; j++) part[j] = first;
    int k = 0;
    for (; k + 32 <= n; k += 32) {
        for (int j = 0; j < 32; j++) {
            const float v = a[k + j] + b[k + j];
            part[j] = v < part[j] ? v : part[j];
        }
    }
    float m = OCK_FN(min_of_32)(part);
    for (; k < n; k++) {
        const float v = a[k] + b[k];
        m = v < m ? v : m;
    }
    return m;
}

/* min over k of a[k] (n >= 1), grouped as in min_of_sum. */
OCK_TARGET static float OCK_FN(min)(const float *a, int n) {
    float part[32];
    for (int j = 0; j < 32; j++) part[j] = a[0];
    int k = 0;
    for (; k + 32 <= n; k += 32) {
        for (int j = 0; j < 32; j++) part[j] = a[k + j] < part[j] ? a[k + j] : part[j];
    }
    float m = OCK_FN(min_of_32)(part);
    for (; k < n; k++) m = a[k] < m ? a[k] : m;
    return m;
}

/* out[j] = min of a[j], a[j + G], a[j + 2G], ... for j < G = OCK_SELECT_GROUPS (n >= G): the minimum of each of
 * G interleaved groups. G is a compile-time constant so each step is a few whole vector operations. */
OCK_TARGET static void OCK_FN(group_min)(const float *a, int n, float *out) {
    for (int j = 0; j < OCK_SELECT_GROUPS; j++) out[j] = a[j];
    int i = OCK_SELECT_GROUPS;
    for (; i + OCK_SELECT_GROUPS <= n; i += OCK_SELECT_GROUPS) {
        for (int j = 0; j < OCK_SELECT_GROUPS; j++) out[j] = a[i + j] < out[j] ? a[i + j] : out[j];
    }
    for (int j = 0; i + j < n; j++) out[j] = a[i + j] < out[j] ? a[i + j] : out[j];
}

/* the first k with a[k] == target, or 0 if none (only possible with NaN, which the API keeps out: a code must
 * stay in range whatever happens). */
OCK_TARGET static int OCK_FN(first_index)(const float *a, int n, float target) {
    for (int k = 0; k < n; k++) {
        if (a[k] == target) return k;
    }
    return 0;
}

/* the first k with a[k] + b[k] == target (the sum is rounded exactly as in min_of_sum), or 0 if none.
 * Blocks of 16 are tested with a vectorised OR first, so only the block holding the answer is scanned one by one. */
OCK_TARGET static int OCK_FN(first_index_of_sum)(const float *a, const float *b, int n, float target) {
    int start = 0;
    for (; start + 16 <= n; start += 16) {
        int hit = 0;
        for (int j = 0; j < 16; j++) hit |= (a[start + j] + b[start + j] == target);
        if (hit) break;
    }
    for (int k = start; k < n; k++) {
        if (a[k] + b[k] == target) return k;
    }
    return 0;
}

/* The largest |a[i]| (0 for n = 0), or +inf when any a[i] is NaN or infinite: the one check every vector input gets.
 * Computed on the bit patterns: with the sign bit cleared, the IEEE-754 bits of non-negative floats order as unsigned
 * integers do, and every inf and NaN lies above every finite value. An unsigned max is a reduction compilers vectorise
 * without any floating-point licence (a float max with NaN is not): ~0.1 ns per value instead of ~4 for the branchy
 * float loop, which dominated re-ranking 100 candidates of 384 dimensions. */
OCK_TARGET static float OCK_FN(max_abs)(const float *a, long n) {
    uint32_t largest = 0;
    for (long i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, a + i, sizeof b); /* a bit cast the compiler turns into a plain load */
        b &= 0x7fffffffu;
        largest = b > largest ? b : largest;
    }
    if (largest >= 0x7f800000u) return INFINITY;
    float out;
    memcpy(&out, &largest, sizeof out);
    return out;
}

/* sum of a[k]^2 with 8 interleaved partial sums added in a fixed order at the end: vectorisable, and the same
 * result at every level (no reassociation beyond the written one, no fused multiply-add). */
OCK_TARGET static float OCK_FN(sum_of_squares)(const float *a, int n) {
    float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int k = 0;
    for (; k + 8 <= n; k += 8) {
        for (int j = 0; j < 8; j++) part[j] += a[k + j] * a[k + j];
    }
    for (int j = 0; k + j < n; j++) part[j] += a[k + j] * a[k + j];
    return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

/* For rows i = 0..n-1 of X (n x P) and the byte positions w < WB of their codes (codes[i * W + w], stride W):
 * acc[(w * K + code) * P + p] += X[i, p], in float64, in row order: the sum of the rows that use each word of WB
 * codebooks (the statistics of least squares). Few codebooks at a time keep their WB*K x P sums in the core's cache
 * while the rows stream past. Plain adds, no reassociation: every level gives the same sums. */
OCK_TARGET static void OCK_FN(add_rows_to_words)(double *acc, const float *X, long n, int P,
                                                 const unsigned char *codes, int W, int WB, int K) {
    for (long i = 0; i < n; i++) {
        const float *x = X + (size_t)i * P;
        const unsigned char *code = codes + (size_t)i * W;
        for (int w = 0; w < WB; w++) {
            double *row = acc + ((size_t)w * K + code[w]) * (size_t)P;
            for (int p = 0; p < P; p++) row[p] += (double)x[p];
        }
    }
}

/* The T-th smallest of the OCK_SELECT_GROUPS values g (1 <= T <= OCK_SELECT_GROUPS), ties included: the largest
 * g[j] that has fewer than T values strictly below it. The counts are one vectorised pass per value, no branches. */
OCK_TARGET static float OCK_FN(kth_smallest_of_groups)(const float *g, int T) {
    int below[OCK_SELECT_GROUPS];
    for (int j = 0; j < OCK_SELECT_GROUPS; j++) below[j] = 0;
    for (int i = 0; i < OCK_SELECT_GROUPS; i++) {
        const float v = g[i];
        for (int j = 0; j < OCK_SELECT_GROUPS; j++) below[j] += v < g[j];
    }
    float candidate[OCK_SELECT_GROUPS];
    for (int j = 0; j < OCK_SELECT_GROUPS; j++) candidate[j] = below[j] < T ? g[j] : -3.0e38f;
    for (int w = OCK_SELECT_GROUPS / 2; w >= 1; w /= 2) /* the largest, folded by halves as in min_of_32 */
        for (int j = 0; j < w; j++) candidate[j] = candidate[j + w] > candidate[j] ? candidate[j + w] : candidate[j];
    return candidate[0];
}

/* Rank n <= OCK_SELECT_GROUPS candidates (value v[i], index k[i], distinct indices) and write the T smallest,
 * ascending by (value, index), to out_score/out_index (T <= n). The rank of each is the number of candidates before it
 * in that order: one vectorised pass per candidate, no branch on the values. The arrays are padded to
 * OCK_SELECT_GROUPS with the largest float and index, which rank after every real candidate. */
OCK_TARGET static void OCK_FN(rank_candidates)(float *v, int *k, int n, int T, float *out_score, int *out_index) {
    for (int j = n; j < OCK_SELECT_GROUPS; j++) {
        v[j] = 3.4028234663852886e38f;
        k[j] = 0x7fffffff;
    }
    for (int i = 0; i < n; i++) {
        const float vi = v[i];
        const int ki = k[i];
        int rank = 0;
        for (int j = 0; j < OCK_SELECT_GROUPS; j++) rank += (v[j] < vi) | ((v[j] == vi) & (k[j] < ki));
        if (rank < T) {
            out_score[rank] = vi;
            out_index[rank] = ki;
        }
    }
}

/* The T smallest of values[0:n] (n <= 256), ascending by (value, index), written to out_score/out_index; returns
 * their count.
 *
 * Inserting all n values into a sorted list costs an unpredictable branch per value. Instead: split the values into
 * G = 32 interleaved groups (j, j + G, j + 2G, ...) and take each group's minimum (one vector pass). The T-th
 * smallest group minimum, theta, bounds the T-th smallest value from above (T distinct values are <= theta), so only
 * values <= theta can win, and only groups whose minimum is <= theta hold any: about T of the 32 groups, a dozen
 * values. theta comes from branch-free rank counting; the survivors are gathered without branches, then ranked
 * exactly (by rank counting when at most G survive, as they do unless many values tie).
 */
OCK_TARGET static int OCK_FN(select_smallest_loops)(const float *values, int n, int T, float *out_score,
                                                    int *out_index) {
    const int G = OCK_SELECT_GROUPS;
    int count = 0;
    if (T <= n && n <= G) { /* few words (K <= 32, as 4-bit codes have): rank them all at once, without branches */
        float v[OCK_SELECT_GROUPS];
        int k[OCK_SELECT_GROUPS];
        for (int i = 0; i < n; i++) {
            v[i] = values[i];
            k[i] = i;
        }
        OCK_FN(rank_candidates)(v, k, n, T, out_score, out_index);
        return T;
    }
    if (!(T < G && n >= 2 * G)) {
        for (int k = 0; k < n; k++) count = ock_insert_ranked(values[k], k, T, out_score, out_index, count);
        return count;
    }
    float group_min[OCK_SELECT_GROUPS];
    OCK_FN(group_min)(values, n, group_min);
    const float theta = OCK_FN(kth_smallest_of_groups)(group_min, T);
    int groups[OCK_SELECT_GROUPS];
    int n_groups = 0;
    for (int j = 0; j < G; j++) {
        groups[n_groups] = j;
        n_groups += group_min[j] <= theta;
    }
    int survivors[256]; /* at most n <= 256 values survive */
    int n_survivors = 0;
    for (int g = 0; g < n_groups; g++) {
        for (int k = groups[g]; k < n; k += G) {
            survivors[n_survivors] = k;
            n_survivors += values[k] <= theta;
        }
    }
    if (n_survivors <= G) {
        float v[OCK_SELECT_GROUPS];
        for (int c = 0; c < n_survivors; c++) v[c] = values[survivors[c]];
        OCK_FN(rank_candidates)(v, survivors, n_survivors, T, out_score, out_index);
        return T;
    }
    for (int c = 0; c < n_survivors; c++)
        count = ock_insert_ranked(values[survivors[c]], survivors[c], T, out_score, out_index, count);
    return count;
}

/* ---- the selection of a level's T best candidates: select_smallest_loops's method with intrinsics for the
 * gathering of the survivors and their ranking. The two instruction sets take different routes there (AVX-512
 * compresses the survivors 16 at a time and counts ranks under masks; AVX2 left-packs them through ock_pack_lanes and
 * counts ranks in two registers of comparison results), so each level has its own body. */
#ifdef OCK_VW
/* Survivor i (value sv[i], index sk[i], i < ns) has rank r[i] among the survivors: the T best go to their places. */
OCK_TARGET static inline int OCK_FN(place_ranked)(const float *sv, const int *sk, const int *r, int ns, int T,
                                                  float *out_score, int *out_index) {
    for (int i = 0; i < ns; i++) {
        if (r[i] < T) {
            out_score[r[i]] = sv[i];
            out_index[r[i]] = sk[i];
        }
    }
    return T;
}

/* The T best of ns survivors (more than one register holds: many tied values), by rank counting or insertion. */
OCK_TARGET static int OCK_FN(rank_survivors)(float *sv, int *sk, int ns, int T, float *out_score, int *out_index) {
    if (ns <= OCK_SELECT_GROUPS) {
        OCK_FN(rank_candidates)(sv, sk, ns, T, out_score, out_index);
        return T;
    }
    int count = 0;
    for (int c = 0; c < ns; c++) count = ock_insert_ranked(sv[c], sk[c], T, out_score, out_index, count);
    return count;
}
#endif

#if OCK_LEVEL == OCK_LEVEL_AVX512
OCK_TARGET static int OCK_FN(select_smallest)(const float *values, int n, int T, float *out_score, int *out_index) {
    if (!(T < OCK_SELECT_GROUPS && n >= 2 * OCK_SELECT_GROUPS && n % 16 == 0 && n <= 256))
        return OCK_FN(select_smallest_loops)(values, n, T, out_score, out_index);
    /* The minima of the 32 groups k mod 32 (a last half block of 16 joins groups 0..15). */
    __m512 g0 = _mm512_loadu_ps(values), g1 = _mm512_loadu_ps(values + 16);
    int k = 32;
    for (; k + 32 <= n; k += 32) {
        g0 = _mm512_min_ps(_mm512_loadu_ps(values + k), g0);
        g1 = _mm512_min_ps(_mm512_loadu_ps(values + k + 16), g1);
    }
    if (k < n) g0 = _mm512_min_ps(_mm512_loadu_ps(values + k), g0);
    /* theta: the largest group minimum with fewer than T group minima strictly below it. */
    float g[OCK_SELECT_GROUPS];
    _mm512_storeu_ps(g, g0);
    _mm512_storeu_ps(g + 16, g1);
    const __m512i one = _mm512_set1_epi32(1);
    __m512i below0 = _mm512_setzero_si512(), below1 = _mm512_setzero_si512();
    for (int i = 0; i < OCK_SELECT_GROUPS; i++) {
        const __m512 b = _mm512_set1_ps(g[i]);
        below0 = _mm512_mask_add_epi32(below0, _mm512_cmp_ps_mask(b, g0, _CMP_LT_OQ), below0, one);
        below1 = _mm512_mask_add_epi32(below1, _mm512_cmp_ps_mask(b, g1, _CMP_LT_OQ), below1, one);
    }
    const __m512i tv = _mm512_set1_epi32(T);
    const __m512 lowest = _mm512_set1_ps(-3.0e38f);
    const __m512 c0 = _mm512_mask_blend_ps(_mm512_cmplt_epi32_mask(below0, tv), lowest, g0);
    const __m512 c1 = _mm512_mask_blend_ps(_mm512_cmplt_epi32_mask(below1, tv), lowest, g1);
    const __m512 theta = _mm512_set1_ps(_mm512_reduce_max_ps(_mm512_max_ps(c0, c1)));
    /* The survivors (values <= theta), in index order, compressed into contiguous arrays. */
    float sv[256 + 16];
    int sk[256 + 16];
    int ns = 0;
    const __m512i step = _mm512_set1_epi32(16);
    __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (k = 0; k < n; k += 16) {
        const __m512 v = _mm512_loadu_ps(values + k);
        const __mmask16 keep = _mm512_cmp_ps_mask(v, theta, _CMP_LE_OQ);
        _mm512_storeu_ps(sv + ns, _mm512_maskz_compress_ps(keep, v));
        _mm512_storeu_si512((void *)(sk + ns), _mm512_maskz_compress_epi32(keep, idx));
        ns += __builtin_popcount((unsigned)keep);
        idx = _mm512_add_epi32(idx, step);
    }
    if (ns <= 16) {
        /* One register of survivors (the usual case): the rank of each is the number of survivors before it in
         * (value, index) order, counted for all 16 lanes at once, one survivor per step. */
        for (int j = ns; j < 16; j++) {
            sv[j] = 3.4028234663852886e38f;
            sk[j] = 0x7fffffff;
        }
        const __m512 V = _mm512_loadu_ps(sv);
        const __m512i I = _mm512_loadu_si512((const void *)sk);
        __m512i rank = _mm512_setzero_si512();
        for (int j = 0; j < ns; j++) {
            const __m512 b = _mm512_set1_ps(sv[j]);
            const __mmask16 tie = _mm512_cmp_ps_mask(b, V, _CMP_EQ_OQ);
            const __mmask16 before = _mm512_cmp_ps_mask(b, V, _CMP_LT_OQ)
                                     | _mm512_mask_cmplt_epi32_mask(tie, _mm512_set1_epi32(sk[j]), I);
            rank = _mm512_mask_add_epi32(rank, before, rank, one);
        }
        int r[16];
        _mm512_storeu_si512((void *)r, rank);
        return OCK_FN(place_ranked)(sv, sk, r, ns, T, out_score, out_index);
    }
    return OCK_FN(rank_survivors)(sv, sk, ns, T, out_score, out_index);
}
#elif OCK_LEVEL == OCK_LEVEL_AVX2
/* theta as in the loops; the survivors gathered from comparison masks; when at most 16 survive (the usual case), each
 * one's rank counted in two registers as in the AVX-512 version. */
OCK_TARGET static int OCK_FN(select_smallest)(const float *values, int n, int T, float *out_score, int *out_index) {
    if (!(T < OCK_SELECT_GROUPS && n >= 2 * OCK_SELECT_GROUPS && n % 8 == 0 && n <= 256))
        return OCK_FN(select_smallest_loops)(values, n, T, out_score, out_index);
    float group_min[OCK_SELECT_GROUPS];
    OCK_FN(group_min)(values, n, group_min);
    const float theta = OCK_FN(kth_smallest_of_groups)(group_min, T);
    const __m256 tv = _mm256_set1_ps(theta);
    float sv[256 + 16];
    int sk[256 + 16];
    int ns = 0;
    for (int k = 0; k < n; k += 8) {
        /* Left-pack the lanes <= theta (a permutation from the table of the 8-bit mask), without branches. */
        const __m256 v = _mm256_loadu_ps(values + k);
        const int keep = _mm256_movemask_ps(_mm256_cmp_ps(v, tv, _CMP_LE_OQ));
        const __m256i perm = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)ock_pack_lanes[keep]));
        _mm256_storeu_ps(sv + ns, _mm256_permutevar8x32_ps(v, perm));
        _mm256_storeu_si256((__m256i *)(sk + ns), _mm256_add_epi32(perm, _mm256_set1_epi32(k)));
        ns += __builtin_popcount((unsigned)keep);
    }
    if (ns <= 16) {
        for (int j = ns; j < 16; j++) {
            sv[j] = 3.4028234663852886e38f;
            sk[j] = 0x7fffffff;
        }
        const __m256 V0 = _mm256_loadu_ps(sv), V1 = _mm256_loadu_ps(sv + 8);
        const __m256i I0 = _mm256_loadu_si256((const __m256i *)sk), I1 = _mm256_loadu_si256((const __m256i *)(sk + 8));
        __m256i r0 = _mm256_setzero_si256(), r1 = _mm256_setzero_si256();
        for (int j = 0; j < ns; j++) {
            const __m256 b = _mm256_set1_ps(sv[j]);
            const __m256i bk = _mm256_set1_epi32(sk[j]);
            /* survivor j comes before lane i: v_j < v_i, or v_j == v_i and k_j < k_i (all-ones lanes, i.e. -1) */
            const __m256i before0 = _mm256_or_si256(
                _mm256_castps_si256(_mm256_cmp_ps(b, V0, _CMP_LT_OQ)),
                _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(b, V0, _CMP_EQ_OQ)), _mm256_cmpgt_epi32(I0, bk)));
            const __m256i before1 = _mm256_or_si256(
                _mm256_castps_si256(_mm256_cmp_ps(b, V1, _CMP_LT_OQ)),
                _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(b, V1, _CMP_EQ_OQ)), _mm256_cmpgt_epi32(I1, bk)));
            r0 = _mm256_sub_epi32(r0, before0);
            r1 = _mm256_sub_epi32(r1, before1);
        }
        int r[16];
        _mm256_storeu_si256((__m256i *)r, r0);
        _mm256_storeu_si256((__m256i *)(r + 8), r1);
        return OCK_FN(place_ranked)(sv, sk, r, ns, T, out_score, out_index);
    }
    return OCK_FN(rank_survivors)(sv, sk, ns, T, out_score, out_index);
}
#else
OCK_TARGET static int OCK_FN(select_smallest)(const float *values, int n, int T, float *out_score, int *out_index) {
    return OCK_FN(select_smallest_loops)(values, n, T, out_score, out_index);
}
#endif

/* ---- the leaves of the beam search: the last level under one parent, for all of the parent's T candidates at once.
 *
 * Candidate t (score[t], word[t]) of level C-2 extends to the leaves (t, k) whose error (minus ||z||^2) is
 *     base[k] + (score[t] + pair[word[t] * K + k])
 * where base is the last level's row without the pair term of level C-2 (for C = 2: the unary row of codebook 1).
 * leaves_min writes acc[k] = min_t (score[t] + pair[word[t] * K + k]) and returns min_k base[k] + acc[k], the
 * least leaf error: one pass over each candidate's pair row, the running minimum of a block of words kept in
 * registers, one reduction at the end (count >= 1). */

OCK_TARGET static void OCK_FN(min_into)(float *acc, const float *row, float s, int K) {
    for (int k = 0; k < K; k++) {
        const float v = s + row[k];
        acc[k] = v < acc[k] ? v : acc[k];
    }
}

OCK_TARGET static float OCK_FN(leaves_min_loops)(const float *base, const float *pair, const float *score,
                                                 const int *word, int count, int K, float *acc) {
    /* One streaming pass per candidate over acc (in L1), each a simple loop the compiler vectorises. */
    const float *r = pair + (size_t)word[0] * K;
    for (int k = 0; k < K; k++) acc[k] = score[0] + r[k];
    for (int t = 1; t < count; t++) OCK_FN(min_into)(acc, pair + (size_t)word[t] * K, score[t], K);
    return OCK_FN(min_of_sum)(base, acc, K);
}

#ifdef OCK_VW
/* Blocks of 4 registers of words: the running minima of a block stay in registers across all candidates. */
OCK_TARGET static float OCK_FN(leaves_min)(const float *base, const float *pair, const float *score, const int *word,
                                           int count, int K, float *acc) {
    if (K % (4 * OCK_VW)) return OCK_FN(leaves_min_loops)(base, pair, score, word, count, K, acc);
    ock_vf part = OCK_VSET1(base[0] + (score[0] + pair[(size_t)word[0] * K]));
    for (int k0 = 0; k0 < K; k0 += 4 * OCK_VW) {
        ock_vf a[4];
        const float *r = pair + (size_t)word[0] * K + k0;
        ock_vf st = OCK_VSET1(score[0]);
        for (int q = 0; q < 4; q++) a[q] = OCK_VADD(st, OCK_VLOAD(r + OCK_VW * q));
        for (int t = 1; t < count; t++) {
            r = pair + (size_t)word[t] * K + k0;
            st = OCK_VSET1(score[t]);
            for (int q = 0; q < 4; q++) a[q] = OCK_VMIN(OCK_VADD(st, OCK_VLOAD(r + OCK_VW * q)), a[q]);
        }
        for (int q = 0; q < 4; q++) {
            OCK_VSTORE(acc + k0 + OCK_VW * q, a[q]);
            part = OCK_VMIN(OCK_VADD(OCK_VLOAD(base + k0 + OCK_VW * q), a[q]), part);
        }
    }
    float lanes[OCK_VW];
    OCK_VSTORE(lanes, part);
    float m = lanes[0];
    for (int j = 1; j < OCK_VW; j++) m = lanes[j] < m ? lanes[j] : m;
    return m;
}
#else
OCK_TARGET static float OCK_FN(leaves_min)(const float *base, const float *pair, const float *score, const int *word,
                                           int count, int K, float *acc) {
    return OCK_FN(leaves_min_loops)(base, pair, score, word, count, K, acc);
}
#endif

/* The first leaf (in rank order: candidate t first, then word k) among those whose error is the minimum `target`
 * found by leaves_min over the same arguments: every k with base[k] + acc[k] == target is a winning word, reached
 * from the first candidate t whose sum equals acc[k]; the least (t, k) wins. Writes *out_t and *out_k ((0, 0) if
 * none, only possible with NaN, which the API keeps out). */
OCK_TARGET static inline void OCK_FN(leaves_pick)(const float *pair, const float *score, const int *word, int count,
                                                  int K, const float *acc, int k, int *best_t, int *best_k) {
    /* Word k wins: reached from the first candidate t whose sum is acc[k]; keep the least (t, k) (k ascending). */
    int t = 0;
    while (t < count && score[t] + pair[(size_t)word[t] * K + k] != acc[k]) t++;
    if (t < *best_t) {
        *best_t = t;
        *best_k = k;
    }
}

OCK_TARGET static void OCK_FN(leaves_locate)(const float *base, const float *pair, const float *score,
                                             const int *word, int count, int K, const float *acc, float target,
                                             int *out_t, int *out_k) {
    int best_t = count, best_k = 0;
    int start = 0;
#ifdef OCK_VW
    /* A register of words at a time: their bits of base + acc == target, then each hit in ascending k. */
    const ock_vf tv = OCK_VSET1(target);
    for (; start + OCK_VW <= K; start += OCK_VW) {
        unsigned hits = OCK_VEQ_BITS(OCK_VADD(OCK_VLOAD(base + start), OCK_VLOAD(acc + start)), tv);
        while (hits) {
            OCK_FN(leaves_pick)(pair, score, word, count, K, acc, start + __builtin_ctz(hits), &best_t, &best_k);
            hits &= hits - 1;
        }
    }
#endif
    while (start < K) {
        /* The next word whose sum is the target (the blocks without one are skipped 16 at a time). */
        const int k = start + OCK_FN(first_index_of_sum)(base + start, acc + start, K - start, target);
        if (base[k] + acc[k] != target) break; /* none left (first_index_of_sum answers 0 when it finds none) */
        OCK_FN(leaves_pick)(pair, score, word, count, K, acc, k, &best_t, &best_k);
        start = k + 1;
    }
    *out_t = best_t < count ? best_t : 0;
    *out_k = best_k;
}

/* ---- the table product: out[i * ldo + j] = sqn[j] - 2 * sum_s Z[i * ldz + s] * W[s * ldw + j], for i < n, j < J,
 * or the product itself (out = sum_s ...) when sqn is NULL (the rotation of a chunk of vectors). The sum is the fused
 * chain a = fma(z_s, w_s, a) from a = 0, s ascending, at every level; 2a is exact, so sqn - 2a rounds once. The
 * portable level calls fmaf, which is exact, and is used only where fmaf is a hardware instruction (ock_fast_fma) or a
 * test asks for it. */

OCK_TARGET static inline float OCK_FN(table_entry)(const float *z, int S, const float *W, int ldw, int j,
                                                   const float *sqn) {
    float a = 0.0f;
    for (int s = 0; s < S; s++) a = fmaf(z[s], W[(size_t)s * ldw + j], a);
    return sqn ? sqn[j] - 2.0f * a : a;
}

#ifdef OCK_VW
OCK_TARGET static inline ock_vf OCK_FN(table_finish)(const float *sqn, int j, ock_vf a) {
    return sqn ? OCK_VSUB(OCK_VLOAD(sqn + j), OCK_VADD(a, a)) : a;
}

/* Blocks of 4 rows x OCK_NV registers of columns (2 for AVX2, 4 for AVX-512: 8 or 16 accumulators), NV word loads and
 * 4 broadcasts per 4*NV fused multiply-adds; then 4 rows x one register; the columns left (fewer than a register) and
 * the rows left (fewer than 4) entry by entry or register by register, by the same chain. */
OCK_TARGET static void OCK_FN(encoder_tables)(const float *Z, int ldz, int n, int S, const float *W, int ldw, int J,
                                              const float *sqn, float *out, int ldo) {
    const int JB = J / (OCK_NV * OCK_VW) * (OCK_NV * OCK_VW), JV = J / OCK_VW * OCK_VW;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const float *z = Z + (size_t)i * ldz;
        float *o = out + (size_t)i * ldo;
        int j = 0;
        for (; j < JB; j += OCK_NV * OCK_VW) {
            ock_vf a[4][OCK_NV];
            for (int r = 0; r < 4; r++)
                for (int q = 0; q < OCK_NV; q++) a[r][q] = OCK_VZERO();
            for (int s = 0; s < S; s++) {
                const float *w = W + (size_t)s * ldw + j;
                ock_vf wv[OCK_NV];
                for (int q = 0; q < OCK_NV; q++) wv[q] = OCK_VLOAD(w + OCK_VW * q);
                for (int r = 0; r < 4; r++) {
                    const ock_vf b = OCK_VSET1(z[(size_t)r * ldz + s]);
                    for (int q = 0; q < OCK_NV; q++) a[r][q] = OCK_VFMADD(b, wv[q], a[r][q]);
                }
            }
            for (int r = 0; r < 4; r++)
                for (int q = 0; q < OCK_NV; q++)
                    OCK_VSTORE(o + (size_t)r * ldo + j + OCK_VW * q,
                               OCK_FN(table_finish)(sqn, j + OCK_VW * q, a[r][q]));
        }
        for (; j < JV; j += OCK_VW) {
            ock_vf a[4];
            for (int r = 0; r < 4; r++) a[r] = OCK_VZERO();
            for (int s = 0; s < S; s++) {
                const ock_vf w = OCK_VLOAD(W + (size_t)s * ldw + j);
                for (int r = 0; r < 4; r++) a[r] = OCK_VFMADD(OCK_VSET1(z[(size_t)r * ldz + s]), w, a[r]);
            }
            for (int r = 0; r < 4; r++) OCK_VSTORE(o + (size_t)r * ldo + j, OCK_FN(table_finish)(sqn, j, a[r]));
        }
        for (int r = 0; r < 4; r++)
            for (int jj = JV; jj < J; jj++)
                o[(size_t)r * ldo + jj] = OCK_FN(table_entry)(z + (size_t)r * ldz, S, W, ldw, jj, sqn);
    }
    for (; i < n; i++) {
        const float *z = Z + (size_t)i * ldz;
        float *o = out + (size_t)i * ldo;
        for (int j = 0; j < JV; j += OCK_VW) {
            ock_vf a = OCK_VZERO();
            for (int s = 0; s < S; s++) a = OCK_VFMADD(OCK_VSET1(z[s]), OCK_VLOAD(W + (size_t)s * ldw + j), a);
            OCK_VSTORE(o + j, OCK_FN(table_finish)(sqn, j, a));
        }
        for (int j = JV; j < J; j++) o[j] = OCK_FN(table_entry)(z, S, W, ldw, j, sqn);
    }
}
#else
OCK_TARGET static void OCK_FN(encoder_tables)(const float *Z, int ldz, int n, int S, const float *W, int ldw, int J,
                                              const float *sqn, float *out, int ldo) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < J; j++) out[(size_t)i * ldo + j] = OCK_FN(table_entry)(Z + (size_t)i * ldz, S, W, ldw, j, sqn);
}
#endif
