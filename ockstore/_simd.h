/* The loops of the beam encoder (and of training's per-word sums) that must be vectorised to run at table speed.
 *
 * Two kinds. The first half: small loops the compiler vectorises, cloned per instruction set (below). The second
 * half ("Kernels written with x86 intrinsics"): the table product, the selection and the leaves of the beam, with
 * AVX-512 and AVX2+FMA versions picked at run time and a portable version, all giving bitwise the same results.
 *
 * The first kind live in C rather than in _codec_kernels.pyx for one reason: a min-reduction over floats is only vectorised by
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

/* The largest |a[i]| (0 for n = 0), or +inf when any a[i] is NaN or infinite: the one check every vector input gets.
 * Computed on the bit patterns: with the sign bit cleared, the IEEE-754 bits of non-negative floats order as unsigned
 * integers do, and every inf and NaN lies above every finite value. An unsigned max is a reduction gcc vectorises
 * without any floating-point licence (a float max with NaN is not): ~0.1 ns per value instead of ~4 for the branchy
 * float loop, which dominated re-ranking 100 candidates of 384 dimensions. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static float ock_max_abs(const float *a, long n) {
    uint32_t largest = 0;
    for (long i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, a + i, sizeof b);  /* a bit cast the compiler turns into a plain load */
        b &= 0x7fffffffu;
        largest = b > largest ? b : largest;
    }
    if (largest >= 0x7f800000u) return INFINITY;
    float out;
    memcpy(&out, &largest, sizeof out);
    return out;
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

/* For rows i = 0..n-1 of X (n x P) and the byte positions w < WB of their codes (codes[i * W + w], stride W):
 * acc[(w * K + code) * P + p] += X[i, p], in float64, in row order: the sum of the rows that use each word of WB
 * codebooks (the statistics of least squares). Few codebooks at a time keep their WB*K x P sums in the core's cache
 * while the rows stream past. Plain adds, no reassociation: every clone gives the same sums. */
OCK_VECTOR_FN
static void ock_add_rows_to_words(double *acc, const float *X, long n, int P, const unsigned char *codes, int W,
                                  int WB, int K) {
    for (long i = 0; i < n; i++) {
        const float *x = X + (size_t)i * P;
        const unsigned char *code = codes + (size_t)i * W;
        for (int w = 0; w < WB; w++) {
            double *row = acc + ((size_t)w * K + code[w]) * (size_t)P;
            for (int p = 0; p < P; p++) row[p] += (double)x[p];
        }
    }
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

/* Rank n <= OCK_SELECT_GROUPS candidates (value v[i], index k[i], distinct indices) and write the T smallest,
 * ascending by (value, index), to out_score/out_index (T <= n). The rank of each is the number of candidates before it
 * in that order: one vectorised pass per candidate, no branch on the values. The arrays are padded to
 * OCK_SELECT_GROUPS with the largest float and index, which rank after every real candidate. */
OCK_VECTOR_FN
static void ock_rank_candidates(float *v, int *k, int n, int T, float *out_score, int *out_index) {
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
static int ock_select_smallest_portable(const float *values, int n, int T, float *out_score, int *out_index) {
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
    if (n_survivors <= G) {
        float v[OCK_SELECT_GROUPS];
        for (int c = 0; c < n_survivors; c++) v[c] = values[survivors[c]];
        ock_rank_candidates(v, survivors, n_survivors, T, out_score, out_index);
        return T;
    }
    for (int c = 0; c < n_survivors; c++)
        count = ock_insert_ranked(values[survivors[c]], survivors[c], T, out_score, out_index, count);
    return count;
}

/* ------------------------------------------------------------------------------------------------------------------
 * Kernels written with x86 intrinsics, chosen at run time.
 *
 * Two loops need more control than the compiler's vectoriser gives: the table product (z.d for every word: a matrix
 * product with a short inner dimension S, kept in registers) and the leaves of the beam search. Each has a portable
 * C version and, on x86-64 with GCC or Clang, AVX2+FMA and AVX-512 versions compiled with `target` attributes and
 * picked by ock_detect_isa(). The versions give bitwise the same results: the products are chains of fused
 * multiply-adds over s = 0..S-1 in order, starting from 0, in every version (the portable one calls fmaf, which is
 * exact, and is used only where fmaf is a hardware instruction: see ock_fast_fma); the leaves only add and compare.
 */
enum { OCK_ISA_PORTABLE = 0, OCK_ISA_AVX2 = 1, OCK_ISA_AVX512 = 2 };

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define OCK_X86 1
#include <immintrin.h>
#define OCK_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define OCK_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma")))
#endif

#include <math.h>

/* ock_pack_lanes[mask]: the positions of the set bits of an 8-bit mask, in order, then zeros (AVX2 left-packing). */
static unsigned char ock_pack_lanes[256][8];

/* The widest instruction set of this CPU that the kernels below use (called once, when the module loads: it also
 * fills ock_pack_lanes). */
static int ock_detect_isa(void) {
    for (int mask = 0; mask < 256; mask++) {
        int j = 0;
        for (int b = 0; b < 8; b++)
            if (mask >> b & 1) ock_pack_lanes[mask][j++] = (unsigned char)b;
        for (; j < 8; j++) ock_pack_lanes[mask][j] = 0;
    }
#ifdef OCK_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return OCK_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return OCK_ISA_AVX2;
#endif
    return OCK_ISA_PORTABLE;
}

/* 1 when the portable table product may be used: fmaf is a single instruction here (aarch64, POWER, ...). Without it
 * (an x86-64 CPU without FMA) the caller computes the tables with BLAS instead, which rounds differently. */
static int ock_fast_fma(void) {
#ifdef FP_FAST_FMAF
    return 1;
#else
    return 0;
#endif
}

/* ---- the table product: out[i * ldo + j] = sqn[j] - 2 * sum_s Z[i * ldz + s] * W[s * ldw + j], for i < n, j < J,
 * or the product itself (out = sum_s ...) when sqn is NULL (the rotation of a chunk of vectors). The sum is the fused
 * chain a = fma(z_s, w_s, a) from a = 0, s ascending; 2a is exact, so sqn - 2a rounds once. */

static inline float ock_finish(const float *sqn, int j, float a) {
    return sqn ? sqn[j] - 2.0f * a : a;
}

static void ock_encoder_tables_portable(const float *Z, int ldz, int n, int S, const float *W, int ldw, int J,
                                const float *sqn, float *out, int ldo) {
    for (int i = 0; i < n; i++) {
        const float *z = Z + (size_t)i * ldz;
        for (int j = 0; j < J; j++) {
            float a = 0.0f;
            for (int s = 0; s < S; s++) a = fmaf(z[s], W[(size_t)s * ldw + j], a);
            out[(size_t)i * ldo + j] = ock_finish(sqn, j, a);
        }
    }
}

#ifdef OCK_X86
/* One entry by the scalar chain (a hardware FMA in these targets): the columns beyond the vector blocks. */
OCK_TARGET_AVX2
static inline float ock_table_entry(const float *z, int S, const float *W, int ldw, int j, const float *sqn) {
    float a = 0.0f;
    for (int s = 0; s < S; s++) a = fmaf(z[s], W[(size_t)s * ldw + j], a);
    return ock_finish(sqn, j, a);
}

OCK_TARGET_AVX2
static inline __m256 ock_finish256(const float *sqn, int j, __m256 a) {
    return sqn ? _mm256_sub_ps(_mm256_loadu_ps(sqn + j), _mm256_add_ps(a, a)) : a;
}

OCK_TARGET_AVX2
static void ock_encoder_tables_avx2(const float *Z, int ldz, int n, int S, const float *W, int ldw, int J,
                            const float *sqn, float *out, int ldo) {
    const int J16 = J / 16 * 16;
    int i = 0;
    /* Blocks of 4 rows x 16 columns: 8 accumulators, 2 word loads and 4 broadcasts per 8 multiply-adds. */
    for (; i + 4 <= n; i += 4) {
        const float *z = Z + (size_t)i * ldz;
        float *o = out + (size_t)i * ldo;
        for (int j = 0; j < J16; j += 16) {
            __m256 a[4][2];
            for (int r = 0; r < 4; r++) a[r][0] = a[r][1] = _mm256_setzero_ps();
            for (int s = 0; s < S; s++) {
                const __m256 w0 = _mm256_loadu_ps(W + (size_t)s * ldw + j);
                const __m256 w1 = _mm256_loadu_ps(W + (size_t)s * ldw + j + 8);
                for (int r = 0; r < 4; r++) {
                    const __m256 b = _mm256_broadcast_ss(z + (size_t)r * ldz + s);
                    a[r][0] = _mm256_fmadd_ps(b, w0, a[r][0]);
                    a[r][1] = _mm256_fmadd_ps(b, w1, a[r][1]);
                }
            }
            for (int r = 0; r < 4; r++) {
                _mm256_storeu_ps(o + (size_t)r * ldo + j, ock_finish256(sqn, j, a[r][0]));
                _mm256_storeu_ps(o + (size_t)r * ldo + j + 8, ock_finish256(sqn, j + 8, a[r][1]));
            }
        }
        for (int r = 0; r < 4; r++)
            for (int j = J16; j < J; j++) o[(size_t)r * ldo + j] = ock_table_entry(z + (size_t)r * ldz, S, W, ldw, j, sqn);
    }
    for (; i < n; i++) {
        const float *z = Z + (size_t)i * ldz;
        float *o = out + (size_t)i * ldo;
        for (int j = 0; j < J16; j += 16) {
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
            for (int s = 0; s < S; s++) {
                const __m256 b = _mm256_broadcast_ss(z + s);
                a0 = _mm256_fmadd_ps(b, _mm256_loadu_ps(W + (size_t)s * ldw + j), a0);
                a1 = _mm256_fmadd_ps(b, _mm256_loadu_ps(W + (size_t)s * ldw + j + 8), a1);
            }
            _mm256_storeu_ps(o + j, ock_finish256(sqn, j, a0));
            _mm256_storeu_ps(o + j + 8, ock_finish256(sqn, j + 8, a1));
        }
        for (int j = J16; j < J; j++) o[j] = ock_table_entry(z, S, W, ldw, j, sqn);
    }
}

OCK_TARGET_AVX512
static inline __m512 ock_finish512(const float *sqn, int j, __mmask16 mk, __m512 a) {
    return sqn ? _mm512_sub_ps(_mm512_maskz_loadu_ps(mk, sqn + j), _mm512_add_ps(a, a)) : a;
}

OCK_TARGET_AVX512
static void ock_encoder_tables_avx512(const float *Z, int ldz, int n, int S, const float *W, int ldw, int J,
                              const float *sqn, float *out, int ldo) {
    const int J64 = J / 64 * 64;
    int i = 0;
    /* Blocks of 4 rows x 64 columns: 16 accumulators, 4 word loads and 4 broadcasts per 16 multiply-adds. The
     * columns beyond the last block of 64 go 16 at a time, the last ones masked. */
    for (; i + 4 <= n; i += 4) {
        const float *z = Z + (size_t)i * ldz;
        float *o = out + (size_t)i * ldo;
        for (int j = 0; j < J64; j += 64) {
            __m512 a[4][4];
            for (int r = 0; r < 4; r++)
                for (int q = 0; q < 4; q++) a[r][q] = _mm512_setzero_ps();
            for (int s = 0; s < S; s++) {
                const float *w = W + (size_t)s * ldw + j;
                const __m512 w0 = _mm512_loadu_ps(w), w1 = _mm512_loadu_ps(w + 16);
                const __m512 w2 = _mm512_loadu_ps(w + 32), w3 = _mm512_loadu_ps(w + 48);
                for (int r = 0; r < 4; r++) {
                    const __m512 b = _mm512_set1_ps(z[(size_t)r * ldz + s]);
                    a[r][0] = _mm512_fmadd_ps(b, w0, a[r][0]);
                    a[r][1] = _mm512_fmadd_ps(b, w1, a[r][1]);
                    a[r][2] = _mm512_fmadd_ps(b, w2, a[r][2]);
                    a[r][3] = _mm512_fmadd_ps(b, w3, a[r][3]);
                }
            }
            for (int r = 0; r < 4; r++)
                for (int q = 0; q < 4; q++)
                    _mm512_storeu_ps(o + (size_t)r * ldo + j + 16 * q, ock_finish512(sqn, j + 16 * q, 0xFFFF, a[r][q]));
        }
        for (int j = J64; j < J; j += 16) {
            const __mmask16 mk = J - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (J - j)) - 1);
            __m512 a[4];
            for (int r = 0; r < 4; r++) a[r] = _mm512_setzero_ps();
            for (int s = 0; s < S; s++) {
                const __m512 w = _mm512_maskz_loadu_ps(mk, W + (size_t)s * ldw + j);
                for (int r = 0; r < 4; r++) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(z[(size_t)r * ldz + s]), w, a[r]);
            }
            for (int r = 0; r < 4; r++)
                _mm512_mask_storeu_ps(o + (size_t)r * ldo + j, mk, ock_finish512(sqn, j, mk, a[r]));
        }
    }
    for (; i < n; i++) {
        const float *z = Z + (size_t)i * ldz;
        float *o = out + (size_t)i * ldo;
        for (int j = 0; j < J; j += 16) {
            const __mmask16 mk = J - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (J - j)) - 1);
            __m512 a = _mm512_setzero_ps();
            for (int s = 0; s < S; s++)
                a = _mm512_fmadd_ps(_mm512_set1_ps(z[s]), _mm512_maskz_loadu_ps(mk, W + (size_t)s * ldw + j), a);
            _mm512_mask_storeu_ps(o + j, mk, ock_finish512(sqn, j, mk, a));
        }
    }
}
#endif

/* The table product with the kernel of `isa` (OCK_ISA_PORTABLE needs ock_fast_fma() to be fast). */
static void ock_encoder_tables(int isa, const float *Z, int ldz, int n, int S, const float *W, int ldw, int J,
                       const float *sqn, float *out, int ldo) {
#ifdef OCK_X86
    if (isa >= OCK_ISA_AVX512) {
        ock_encoder_tables_avx512(Z, ldz, n, S, W, ldw, J, sqn, out, ldo);
        return;
    }
    if (isa >= OCK_ISA_AVX2) {
        ock_encoder_tables_avx2(Z, ldz, n, S, W, ldw, J, sqn, out, ldo);
        return;
    }
#endif
    (void)isa;
    ock_encoder_tables_portable(Z, ldz, n, S, W, ldw, J, sqn, out, ldo);
}

/* ---- the selection of a level's T best candidates: ock_select_smallest_portable's method, with AVX-512 for the
 * group minima, theta, and the gathering of the survivors (compressed 16 at a time). */
#ifdef OCK_X86
OCK_TARGET_AVX512
static int ock_select_smallest_avx512(const float *values, int n, int T, float *out_score, int *out_index) {
    if (!(T < OCK_SELECT_GROUPS && n >= 2 * OCK_SELECT_GROUPS && n % 16 == 0 && n <= 256))
        return ock_select_smallest_portable(values, n, T, out_score, out_index);
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
        for (int i = 0; i < ns; i++) {
            if (r[i] < T) {
                out_score[r[i]] = sv[i];
                out_index[r[i]] = sk[i];
            }
        }
        return T;
    }
    if (ns <= OCK_SELECT_GROUPS) {
        ock_rank_candidates(sv, sk, ns, T, out_score, out_index);
        return T;
    }
    int count = 0;
    for (int c = 0; c < ns; c++) count = ock_insert_ranked(sv[c], sk[c], T, out_score, out_index, count);
    return count;
}
#endif

#ifdef OCK_X86
/* AVX2: theta as in the portable version; the survivors gathered from comparison masks; when at most 16 survive (the
 * usual case), each one's rank counted in two registers as in the AVX-512 version. */
OCK_TARGET_AVX2
static int ock_select_smallest_avx2(const float *values, int n, int T, float *out_score, int *out_index) {
    if (!(T < OCK_SELECT_GROUPS && n >= 2 * OCK_SELECT_GROUPS && n % 8 == 0 && n <= 256))
        return ock_select_smallest_portable(values, n, T, out_score, out_index);
    float group_min[OCK_SELECT_GROUPS];
    ock_group_min(values, n, group_min);
    const float theta = ock_kth_smallest_of_groups(group_min, T);
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
        for (int i = 0; i < ns; i++) {
            if (r[i] < T) {
                out_score[r[i]] = sv[i];
                out_index[r[i]] = sk[i];
            }
        }
        return T;
    }
    if (ns <= OCK_SELECT_GROUPS) {
        ock_rank_candidates(sv, sk, ns, T, out_score, out_index);
        return T;
    }
    int count = 0;
    for (int c = 0; c < ns; c++) count = ock_insert_ranked(sv[c], sk[c], T, out_score, out_index, count);
    return count;
}
#endif

static int ock_select_smallest(int isa, const float *values, int n, int T, float *out_score, int *out_index) {
#ifdef OCK_X86
    if (isa >= OCK_ISA_AVX512) return ock_select_smallest_avx512(values, n, T, out_score, out_index);
    if (isa >= OCK_ISA_AVX2) return ock_select_smallest_avx2(values, n, T, out_score, out_index);
#endif
    (void)isa;
    return ock_select_smallest_portable(values, n, T, out_score, out_index);
}

/* ---- the leaves of the beam search: the last level under one parent, for all of the parent's T candidates at once.
 *
 * Candidate t (score[t], word[t]) of level C-2 extends to the leaves (t, k) whose error (minus ||z||^2) is
 *     base[k] + (score[t] + pair[word[t] * K + k])
 * where base is the last level's row without the pair term of level C-2 (for C = 2: the unary row of codebook 1).
 * ock_leaves_min writes acc[k] = min_t (score[t] + pair[word[t] * K + k]) and returns min_k base[k] + acc[k], the
 * least leaf error: one pass over each candidate's pair row, the running minimum of a block of words kept in
 * registers, one reduction at the end (count >= 1). */

OCK_VECTOR_FN
static void ock_min_into(float *acc, const float *row, float s, int K) {
    for (int k = 0; k < K; k++) {
        const float v = s + row[k];
        acc[k] = v < acc[k] ? v : acc[k];
    }
}

static float ock_leaves_min_portable(const float *base, const float *pair, const float *score, const int *word,
                                     int count, int K, float *acc) {
    /* One streaming pass per candidate over acc (in L1), each a simple loop the compiler vectorises. */
    const float *r = pair + (size_t)word[0] * K;
    for (int k = 0; k < K; k++) acc[k] = score[0] + r[k];
    for (int t = 1; t < count; t++) ock_min_into(acc, pair + (size_t)word[t] * K, score[t], K);
    return ock_min_of_sum(base, acc, K);
}

#ifdef OCK_X86
OCK_TARGET_AVX2
static float ock_leaves_min_avx2(const float *base, const float *pair, const float *score, const int *word,
                                 int count, int K, float *acc) {
    if (K % 32) return ock_leaves_min_portable(base, pair, score, word, count, K, acc);
    __m256 part = _mm256_set1_ps(base[0] + (score[0] + pair[(size_t)word[0] * K]));
    for (int k0 = 0; k0 < K; k0 += 32) {
        __m256 a[4];
        const float *r = pair + (size_t)word[0] * K + k0;
        __m256 st = _mm256_set1_ps(score[0]);
        for (int q = 0; q < 4; q++) a[q] = _mm256_add_ps(st, _mm256_loadu_ps(r + 8 * q));
        for (int t = 1; t < count; t++) {
            r = pair + (size_t)word[t] * K + k0;
            st = _mm256_set1_ps(score[t]);
            for (int q = 0; q < 4; q++) a[q] = _mm256_min_ps(_mm256_add_ps(st, _mm256_loadu_ps(r + 8 * q)), a[q]);
        }
        for (int q = 0; q < 4; q++) {
            _mm256_storeu_ps(acc + k0 + 8 * q, a[q]);
            part = _mm256_min_ps(_mm256_add_ps(_mm256_loadu_ps(base + k0 + 8 * q), a[q]), part);
        }
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, part);
    float m = lanes[0];
    for (int j = 1; j < 8; j++) m = lanes[j] < m ? lanes[j] : m;
    return m;
}

OCK_TARGET_AVX512
static float ock_leaves_min_avx512(const float *base, const float *pair, const float *score, const int *word,
                                   int count, int K, float *acc) {
    if (K % 64) return ock_leaves_min_portable(base, pair, score, word, count, K, acc);
    __m512 part = _mm512_set1_ps(base[0] + (score[0] + pair[(size_t)word[0] * K]));
    for (int k0 = 0; k0 < K; k0 += 64) {
        __m512 a[4];
        const float *r = pair + (size_t)word[0] * K + k0;
        __m512 st = _mm512_set1_ps(score[0]);
        for (int q = 0; q < 4; q++) a[q] = _mm512_add_ps(st, _mm512_loadu_ps(r + 16 * q));
        for (int t = 1; t < count; t++) {
            r = pair + (size_t)word[t] * K + k0;
            st = _mm512_set1_ps(score[t]);
            for (int q = 0; q < 4; q++) a[q] = _mm512_min_ps(_mm512_add_ps(st, _mm512_loadu_ps(r + 16 * q)), a[q]);
        }
        for (int q = 0; q < 4; q++) {
            _mm512_storeu_ps(acc + k0 + 16 * q, a[q]);
            part = _mm512_min_ps(_mm512_add_ps(_mm512_loadu_ps(base + k0 + 16 * q), a[q]), part);
        }
    }
    return _mm512_reduce_min_ps(part);
}
#endif

static float ock_leaves_min(int isa, const float *base, const float *pair, const float *score, const int *word,
                            int count, int K, float *acc) {
#ifdef OCK_X86
    if (isa >= OCK_ISA_AVX512) return ock_leaves_min_avx512(base, pair, score, word, count, K, acc);
    if (isa >= OCK_ISA_AVX2) return ock_leaves_min_avx2(base, pair, score, word, count, K, acc);
#endif
    (void)isa;
    return ock_leaves_min_portable(base, pair, score, word, count, K, acc);
}

/* The first leaf (in rank order: candidate t first, then word k) among those whose error is the minimum `target`
 * found by ock_leaves_min over the same arguments: every k with base[k] + acc[k] == target is a winning word, reached
 * from the first candidate t whose sum equals acc[k]; the least (t, k) wins. Writes *out_t and *out_k ((0, 0) if
 * none, only possible with NaN, which the API keeps out). */
static void ock_leaves_pick(const float *pair, const float *score, const int *word, int count, int K,
                            const float *acc, int k, int *best_t, int *best_k) {
    /* Word k wins: reached from the first candidate t whose sum is acc[k]; keep the least (t, k) (k ascending). */
    int t = 0;
    while (t < count && score[t] + pair[(size_t)word[t] * K + k] != acc[k]) t++;
    if (t < *best_t) {
        *best_t = t;
        *best_k = k;
    }
}

static void ock_leaves_locate_portable(const float *base, const float *pair, const float *score, const int *word,
                                       int count, int K, const float *acc, float target, int *best_t, int *best_k) {
    int start = 0;
    while (start < K) {
        /* The next word whose sum is the target (the blocks without one are skipped 16 at a time). */
        const int k = start + ock_first_index_of_sum(base + start, acc + start, K - start, target);
        if (base[k] + acc[k] != target) break;  /* none left (first_index_of_sum answers 0 when it finds none) */
        ock_leaves_pick(pair, score, word, count, K, acc, k, best_t, best_k);
        start = k + 1;
    }
}

#ifdef OCK_X86
OCK_TARGET_AVX2
static void ock_leaves_locate_avx2(const float *base, const float *pair, const float *score, const int *word,
                                   int count, int K, const float *acc, float target, int *best_t, int *best_k) {
    const __m256 tv = _mm256_set1_ps(target);
    int k0 = 0;
    for (; k0 + 8 <= K; k0 += 8) {
        const __m256 v = _mm256_add_ps(_mm256_loadu_ps(base + k0), _mm256_loadu_ps(acc + k0));
        unsigned hits = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(v, tv, _CMP_EQ_OQ));
        while (hits) {
            ock_leaves_pick(pair, score, word, count, K, acc, k0 + __builtin_ctz(hits), best_t, best_k);
            hits &= hits - 1;
        }
    }
    for (int k = k0; k < K; k++)
        if (base[k] + acc[k] == target) ock_leaves_pick(pair, score, word, count, K, acc, k, best_t, best_k);
}

OCK_TARGET_AVX512
static void ock_leaves_locate_avx512(const float *base, const float *pair, const float *score, const int *word,
                                     int count, int K, const float *acc, float target, int *best_t, int *best_k) {
    const __m512 tv = _mm512_set1_ps(target);
    for (int k0 = 0; k0 < K; k0 += 16) {
        const __mmask16 mk = K - k0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (K - k0)) - 1);
        const __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(mk, base + k0), _mm512_maskz_loadu_ps(mk, acc + k0));
        unsigned hits = (unsigned)_mm512_mask_cmp_ps_mask(mk, v, tv, _CMP_EQ_OQ);
        while (hits) {
            ock_leaves_pick(pair, score, word, count, K, acc, k0 + __builtin_ctz(hits), best_t, best_k);
            hits &= hits - 1;
        }
    }
}
#endif

static void ock_leaves_locate(int isa, const float *base, const float *pair, const float *score, const int *word,
                              int count, int K, const float *acc, float target, int *out_t, int *out_k) {
    int best_t = count, best_k = 0;
#ifdef OCK_X86
    if (isa >= OCK_ISA_AVX512)
        ock_leaves_locate_avx512(base, pair, score, word, count, K, acc, target, &best_t, &best_k);
    else if (isa >= OCK_ISA_AVX2)
        ock_leaves_locate_avx2(base, pair, score, word, count, K, acc, target, &best_t, &best_k);
    else
#endif
        ock_leaves_locate_portable(base, pair, score, word, count, K, acc, target, &best_t, &best_k);
    (void)isa;
    *out_t = best_t < count ? best_t : 0;
    *out_k = best_k;
}

#endif
