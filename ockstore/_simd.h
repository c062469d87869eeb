/* Tiny loops of the beam encoder that must be vectorised to run at table speed.
 *
 * They live in C rather than in _codec_kernels.pyx for one reason: a min-reduction over floats is only vectorised by
 * gcc when it may ignore NaN and signed zeros, and Cython cannot set floating-point options for one function. Here the
 * `optimize` attribute grants exactly that to these functions (their inputs are finite by construction: the
 * public API rejects NaN/inf), and `target_clones` adds an AVX2 version chosen at load time, so a portable build
 * (no -march) still runs 8 lanes wide on machines that have AVX2. Results are identical in every clone: the loops
 * only add and compare, with no reassociation of sums. "no-wrapv" undoes Python's -fwrapv for these loops: with
 * wrapping signed arithmetic gcc cannot count the iterations of `for (; k + 32 <= n; k += 32)` and stops
 * vectorising it (none of these loops relies on signed overflow).
 */
#ifndef OCKSTORE_SIMD_H
#define OCKSTORE_SIMD_H

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define OCK_VECTOR_FN __attribute__((target_clones("avx512f", "avx2", "default"), \
                                     optimize("no-trapping-math", "finite-math-only", "no-signed-zeros", \
                                              "fp-contract=off", "no-wrapv")))
#elif defined(__GNUC__) && !defined(__clang__)
#define OCK_VECTOR_FN __attribute__((optimize("no-trapping-math", "finite-math-only", "no-signed-zeros", \
                                              "fp-contract=off", "no-wrapv")))
#else
#define OCK_VECTOR_FN
#endif

/* unary[j] = sqnorm[j] - 2 * dot[j], in place over `dot`: the part of ||z - d_j||^2 that depends on word j. */
OCK_VECTOR_FN
static void ock_unary_inplace(float *dot, const float *sqnorm, int n) {
    for (int j = 0; j < n; j++) dot[j] = sqnorm[j] - 2.0f * dot[j];
}

/* min over k of a[k] + b[k] (n >= 1). 32 partial minima (four AVX2 or two AVX-512 registers) break the dependency
 * chain of a single running minimum; min is exact, so any grouping gives the same result. */
OCK_VECTOR_FN
static float ock_min_of_sum(const float *a, const float *b, int n) {
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
    float m = first;
    for (int j = 0; j < 32; j++) m = part[j] < m ? part[j] : m;
    for (; k < n; k++) {
        const float v = a[k] + b[k];
        m = v < m ? v : m;
    }
    return m;
}

/* min over k of a[k] (n >= 1), grouped as in ock_min_of_sum. */
OCK_VECTOR_FN
static float ock_min(const float *a, int n) {
    float part[32];
    for (int j = 0; j < 32; j++) part[j] = a[0];
    int k = 0;
    for (; k + 32 <= n; k += 32) {
        for (int j = 0; j < 32; j++) part[j] = a[k + j] < part[j] ? a[k + j] : part[j];
    }
    float m = a[0];
    for (int j = 0; j < 32; j++) m = part[j] < m ? part[j] : m;
    for (; k < n; k++) m = a[k] < m ? a[k] : m;
    return m;
}

#define OCK_SELECT_GROUPS 32

/* out[j] = min of a[j], a[j + G], a[j + 2G], ... for j < G = OCK_SELECT_GROUPS (n >= G): the minimum of each of
 * G interleaved groups. G is a compile-time constant so each step is a few whole vector operations. */
OCK_VECTOR_FN
static void ock_group_min(const float *a, int n, float *out) {
    for (int j = 0; j < OCK_SELECT_GROUPS; j++) out[j] = a[j];
    int i = OCK_SELECT_GROUPS;
    for (; i + OCK_SELECT_GROUPS <= n; i += OCK_SELECT_GROUPS) {
        for (int j = 0; j < OCK_SELECT_GROUPS; j++) out[j] = a[i + j] < out[j] ? a[i + j] : out[j];
    }
    for (int j = 0; i + j < n; j++) out[j] = a[i + j] < out[j] ? a[i + j] : out[j];
}

/* the first k with a[k] == target, or 0 if none (only possible with NaN, which the API keeps out: a code must
 * stay in range whatever happens). */
static int ock_first_index(const float *a, int n, float target) {
    for (int k = 0; k < n; k++) {
        if (a[k] == target) return k;
    }
    return 0;
}

/* the first k with a[k] + b[k] == target (the sum is rounded exactly as in ock_min_of_sum), or 0 if none.
 * Blocks of 16 are tested with a vectorised OR first, so only the block holding the answer is scanned one by one. */
OCK_VECTOR_FN
static int ock_first_index_of_sum(const float *a, const float *b, int n, float target) {
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

/* sum of a[k]^2 with 8 interleaved partial sums added in a fixed order at the end: vectorisable, and the same
 * result in every clone (no reassociation beyond the written one, no fused multiply-add: see OCK_VECTOR_FN). */
OCK_VECTOR_FN
static float ock_sum_of_squares(const float *a, int n) {
    float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int k = 0;
    for (; k + 8 <= n; k += 8) {
        for (int j = 0; j < 8; j++) part[j] += a[k + j] * a[k + j];
    }
    for (int j = 0; k + j < n; j++) part[j] += a[k + j] * a[k + j];
    return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

/* Insert (v, k) into the list of the best `count` <= T pairs, ascending by (v, k); returns the new count. */
static inline int ock_insert_ranked(float v, int k, int T, float *score, int *index, int count) {
    int j;
    if (count == T) {
        if (v > score[T - 1] || (v == score[T - 1] && k > index[T - 1])) return count;
        j = T - 1;
    } else {
        j = count++;
    }
    while (j > 0 && (score[j - 1] > v || (score[j - 1] == v && index[j - 1] > k))) {
        score[j] = score[j - 1];
        index[j] = index[j - 1];
        j--;
    }
    score[j] = v;
    index[j] = k;
    return count;
}

/* The T-th smallest of the OCK_SELECT_GROUPS values g (1 <= T <= OCK_SELECT_GROUPS), ties included: the largest
 * g[j] that has fewer than T values strictly below it. The counts are one vectorised pass per value, no branches. */
OCK_VECTOR_FN
static float ock_kth_smallest_of_groups(const float *g, int T) {
    int below[OCK_SELECT_GROUPS];
    for (int j = 0; j < OCK_SELECT_GROUPS; j++) below[j] = 0;
    for (int i = 0; i < OCK_SELECT_GROUPS; i++) {
        const float v = g[i];
        for (int j = 0; j < OCK_SELECT_GROUPS; j++) below[j] += v < g[j];
    }
    float theta = -3.0e38f;
    for (int j = 0; j < OCK_SELECT_GROUPS; j++) {
        const float candidate = below[j] < T ? g[j] : -3.0e38f;
        theta = candidate > theta ? candidate : theta;
    }
    return theta;
}

/* The T smallest of values[0:n] (n <= 256), ascending by (value, index), written to out_score/out_index; returns
 * their count.
 *
 * Inserting all n values into a sorted list costs an unpredictable branch per value. Instead: split the values into
 * G = 32 interleaved groups (j, j + G, j + 2G, ...) and take each group's minimum (one vector pass). The T-th
 * smallest group minimum, theta, bounds the T-th smallest value from above (T distinct values are <= theta), so only
 * values <= theta can win, and only groups whose minimum is <= theta hold any: about T of the 32 groups, a dozen
 * values. theta comes from branch-free rank counting; the survivors are gathered without
 * branches, then ranked exactly. 2.5x faster than plain insertion for n = 256, T = 10.
 */
static int ock_select_smallest(const float *values, int n, int T, float *out_score, int *out_index) {
    const int G = OCK_SELECT_GROUPS;
    int count = 0;
    if (!(T < G && n >= 2 * G)) {
        for (int k = 0; k < n; k++) count = ock_insert_ranked(values[k], k, T, out_score, out_index, count);
        return count;
    }
    float group_min[OCK_SELECT_GROUPS];
    ock_group_min(values, n, group_min);
    const float theta = ock_kth_smallest_of_groups(group_min, T);
    int groups[OCK_SELECT_GROUPS];
    int n_groups = 0;
    for (int j = 0; j < G; j++) {
        groups[n_groups] = j;
        n_groups += group_min[j] <= theta;
    }
    int survivors[256];  /* at most n <= 256 values survive */
    int n_survivors = 0;
    for (int g = 0; g < n_groups; g++) {
        for (int k = groups[g]; k < n; k += G) {
            survivors[n_survivors] = k;
            n_survivors += values[k] <= theta;
        }
    }
    for (int c = 0; c < n_survivors; c++)
        count = ock_insert_ranked(values[survivors[c]], survivors[c], T, out_score, out_index, count);
    return count;
}

#endif
