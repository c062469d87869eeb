/* The vectorised kernels, compiled once per SIMD level, and the one table through which every caller reaches them
 * (docs/ARCHITECTURE.md, "Kernels and SIMD levels").
 *
 * Levels: portable C (any CPU, any compiler), AVX2+FMA+F16C and AVX-512 (x86-64 with gcc or clang). simd.c
 * compiles each kernel once per level (`target` attributes, no ifunc, so the same source builds for Linux, macOS and
 * Windows) and fills one `ock_kernels` table per level; `ock_simd_use` points `ock_kernels_in_use` at one of them,
 * once when the module loads (the best level this CPU runs, or the one OCKSTORE_SIMD asks for), or again in tests.
 * Every level gives bitwise the same results as the portable one: the kernels only add, multiply, compare and take
 * minima, in the order the source writes (no reassociation; simd.c is compiled with -ffp-contract=off, fused
 * multiply-adds only where the source asks for one and the portable level computes the same value).
 *
 * One convention, for every family of kernels (the beam encoder, the query tables, the inverted file's coarse step,
 * re-ranking's values, the fast scan):
 *
 * - Level bodies. A family's kernels are written in a level body, a header without include guard that simd_level.h,
 *   and nothing else, includes once per level: encoder.h, tables.h, ivf.h, rerank_values.h, fastscan_simd.h. Around
 *   each inclusion simd.c defines
 *       OCK_LEVEL        OCK_LEVEL_PORTABLE, OCK_LEVEL_AVX2 or OCK_LEVEL_AVX512
 *       OCK_FN(name)     this level's name of a function: name_portable, name_avx2, name_avx512
 *       OCK_TARGET       the `target` attribute of this level (empty at the portable level)
 *       OCK_TARGET_AVX2  at the AVX2 and AVX-512 levels, the AVX2 level's target: for the code the AVX-512 level runs
 *                        as AVX2, because that measured faster (the fast scan) or because it has no AVX-512 version
 *                        (re-ranking's values)
 *   Every function of a body, helpers too, is `OCK_TARGET static ... OCK_FN(name)(...)` (or OCK_TARGET_AVX2), so each
 *   level has its own copy, compiled for its instruction set. The levels differ inside a body only by `#if OCK_LEVEL
 *   == ...` -- intrinsics only where OCK_LEVEL is not the portable level: simd.c compiles the other levels for x86-64
 *   alone, and includes <immintrin.h> for them -- or by `#ifdef OCK_VW` (the vector macros of simd_level.h, which
 *   AVX2 and AVX-512 share). No body tests __AVX2__, the compiler's target or the CPU itself.
 * - Shared code. What the levels, or the Cython parts, share beyond the kernels (types, constants, plain C compiled
 *   for no particular level) is in ordinary headers with include guards: this one, fastscan.h's parts, rerank.h,
 *   and simd.c's helpers ahead of the levels.
 * - One table. simd_level.h ends each level with its `ock_kernels` table (below), filled from the OCK_FN names; simd.c
 *   asks the CPU once which levels it runs and points `ock_kernels_in_use` at one table. Callers call the wrappers
 *   below (ock_<kernel>), never a level's function by name. An entry is a function; or NULL at a level that has no
 *   such kernel (its wrapper says what the caller does instead: coarse_alone); or a table of specialisations its
 *   caller picks from once per call (rerank_values, one function per row kind and metric).
 *
 * A new kernel plugs in at three places: its functions in a level body (a new body is one more #include in
 * simd_level.h), its entry in `ock_kernels` below with its wrapper, and its line in simd_level.h's table.
 */
#ifndef OCKSTORE_SIMD_H
#define OCKSTORE_SIMD_H

#include <stddef.h>

/* The fast scan's level-independent parts: the types its kernels take. */
#include "fastscan.h"

/* The levels, in order: a CPU that runs one runs every lower one. Macros (not an enum) so that the level bodies can
 * test them with #if. */
#define OCK_LEVEL_PORTABLE 0
#define OCK_LEVEL_AVX2 1
#define OCK_LEVEL_AVX512 2
#define OCK_N_LEVELS 3

/* Lists per panel of the coarse step's centroid matrix (ivf.h): a multiple of every level's blocks of lists (256,
 * 64, 32 and 16). */
#define OCK_COARSE_PANEL 256

/* The prefilter of the coarse step for a query alone (ivf.h, "A query alone"): the centroids in half precision, in
 * panels of OCK_COARSE_HALF_PANEL lists (the last one padded with zeros), and what the bounds of the keys need.
 * Built by _kmeans.CoarseTables.prefilter; the kernel applies it to at least OCK_COARSE_HALF_MIN_LISTS lists. */
#define OCK_COARSE_HALF_PANEL 64
#define OCK_COARSE_HALF_MIN_LISTS 32
typedef struct ock_coarse_half {
    const uint16_t *values;  /* float16 bits of c_l / scale: panel after panel, the P values of the panel's list j at
                                p * OCK_COARSE_HALF_PANEL + j */
    const float *centroids;  /* (L, P) the centroids, row after row (the exact inner products of the candidates) */
    const double *alpha;     /* (L,) list l's bound on |key - approximate key| is alpha[l] ||q|| + beta[l] */
    const double *beta;      /*      + sqnorm_weight |c_sqnorms[l]| (ivf.h derives it) */
    double factor;           /* approximate key: c_sqnorms[l] - 2 scale d_l (PROBE_L2) or -scale d_l (PROBE_IP), with
                                d_l the float32 inner product of q with the list's half values: factor = -2 scale or
                                -scale */
    double sqnorm_weight;
    double qnorm_limit;      /* a query with ||q|| above it takes the full step (no float32 sum can overflow below) */
    int P, L;
    int kind;                /* 0: PROBE_L2 (c_sqnorms[l] - 2 q.c_l), 1: PROBE_IP (-q.c_l) */
} ock_coarse_half;

/* Bytes of ock_coarse_alone's work area for L lists. */
static inline size_t ock_coarse_alone_work_bytes(int L) {
    const size_t padded = (size_t)(L + OCK_COARSE_HALF_PANEL - 1) / OCK_COARSE_HALF_PANEL * OCK_COARSE_HALF_PANEL;
    return padded * sizeof(float) + 3 * (size_t)L * sizeof(double);
}

/* The re-ranking loop's level-independent part: its types, the query loop and the heap (rerank.h). */
#include "rerank.h"

typedef struct ock_kernels {
    const char *name; /* "portable", "avx2", "avx512": the names of OCKSTORE_SIMD and simd_level() */

    /* The beam encoder and training's per-word sums (encoder.h). */
    void (*unary_inplace)(float *dot, const float *sqnorm, int n);
    float (*min_of_sum)(const float *a, const float *b, int n);
    int (*first_index_of_sum)(const float *a, const float *b, int n, float target);
    float (*min)(const float *a, int n);
    int (*first_index)(const float *a, int n, float target);
    float (*sum_of_squares)(const float *a, int n);
    float (*max_abs)(const float *a, long n);
    void (*add_rows_to_words)(double *acc, const float *X, long n, int P, const unsigned char *codes, int W, int WB,
                              int K);
    void (*encoder_tables)(const float *Z, int ldz, int n, int S, const float *W, int ldw, int J, const float *sqn,
                           float *out, int ldo);
    int (*select_smallest)(const float *values, int n, int T, float *out_score, int *out_index);
    float (*leaves_min)(const float *base, const float *pair, const float *score, const int *word, int count, int K,
                        float *acc);
    void (*leaves_locate)(const float *base, const float *pair, const float *score, const int *word, int count, int K,
                          const float *acc, float target, int *out_t, int *out_k);

    /* Query tables of the scans (tables.h). */
    void (*rotate)(const float *q, const float *rot, int P, int D, double *qd, double *z);
    double (*tables)(const double *z, const float *words_t, const double *sqnorms, int M, int C, int K, int S,
                     int kind, int slots, double *acc, float *lut);

    /* The coarse step of the inverted file (ivf.h): the inner products of nq queries with every centroid (ct: the
     * centroids in panels of OCK_COARSE_PANEL lists). */
    void (*coarse_dots)(const float *Q, int nq, const float *ct, int P, int L, float *out);
    /* The coarse step's candidates for a query alone and their exact inner products (NULL at the portable level:
     * every query takes coarse_dots). */
    int (*coarse_alone)(const float *q, const ock_coarse_half *h, const float *c_sqnorms, int n_probe, void *work,
                        int *cand, float *dots);

    /* The exact values of re-ranking (rerank_values.h; rerank.h's loop takes them): one function per (row kind,
     * metric). */
    const ock_rr_value_table *rerank_values;

    /* The fast scan of 4-bit codes (fastscan.h, fastscan_simd.h): a run of blocks for one query, for two queries
     * over the same rows, and the uint16 sums of one block (a flat scan's sample, and tests). */
    void (*fs_scan_run)(const ock_fs_base *b, const ock_fs_query *q, const ock_fs_run *run, ock_fs_collector *c);
    void (*fs_scan_run2)(const ock_fs_base *b, const ock_fs_query *qa, const ock_fs_query *qb, const ock_fs_run *ra,
                         const ock_fs_run *rb, ock_fs_collector *ca, ock_fs_collector *cb);
    void (*fs_block_sums)(const uint8_t *block, const uint8_t *qlut, const ock_fs_tables *t,
                          const uint8_t *norm_bytes, uint16_t *out);
} ock_kernels;

#if defined(__GNUC__) || defined(__clang__)
#define OCK_HIDDEN __attribute__((visibility("hidden")))
#else
#define OCK_HIDDEN
#endif

/* The table in use. Never NULL once ock_simd_init has run (the portable table before that). */
OCK_HIDDEN extern const ock_kernels *ock_kernels_in_use;

/* Fills the level-independent lookup tables and selects the best level this CPU runs; returns that level. Called
 * once, when the module loads. */
OCK_HIDDEN int ock_simd_init(void);
/* The best level this CPU runs (OCK_LEVEL_PORTABLE where no other level is compiled in). */
OCK_HIDDEN int ock_simd_best_level(void);
/* Uses `level` from now on; returns 0, or -1 (and changes nothing) when this CPU cannot run it. Not safe while a
 * kernel runs in another thread (for the module's load and for tests). */
OCK_HIDDEN int ock_simd_use(int level);
/* The level in use, and the name of a level (NULL outside 0 .. OCK_N_LEVELS - 1). */
OCK_HIDDEN int ock_simd_level(void);
OCK_HIDDEN const char *ock_simd_level_name(int level);
/* 1 when fmaf is a single instruction on this target (aarch64, POWER, ... or an x86 build for a CPU with FMA): the
 * portable encoder then computes its table products with fmaf, bitwise as the other levels do. Without it, the
 * caller computes them with BLAS (rounded its own way) unless a test asks for the exact, slow, fmaf path. */
OCK_HIDDEN int ock_fast_fma(void);

/* Wrappers with the kernels' names, so that callers read as plain calls. */
#define OCK_CALL(kernel) (ock_kernels_in_use->kernel)
static inline void ock_unary_inplace(float *dot, const float *sqnorm, int n) { OCK_CALL(unary_inplace)(dot, sqnorm, n); }
static inline float ock_min_of_sum(const float *a, const float *b, int n) { return OCK_CALL(min_of_sum)(a, b, n); }
static inline int ock_first_index_of_sum(const float *a, const float *b, int n, float target) {
    return OCK_CALL(first_index_of_sum)(a, b, n, target);
}
static inline float ock_min(const float *a, int n) { return OCK_CALL(min)(a, n); }
static inline int ock_first_index(const float *a, int n, float target) { return OCK_CALL(first_index)(a, n, target); }
static inline float ock_sum_of_squares(const float *a, int n) { return OCK_CALL(sum_of_squares)(a, n); }
static inline float ock_max_abs(const float *a, long n) { return OCK_CALL(max_abs)(a, n); }
static inline void ock_add_rows_to_words(double *acc, const float *X, long n, int P, const unsigned char *codes, int W,
                                         int WB, int K) {
    OCK_CALL(add_rows_to_words)(acc, X, n, P, codes, W, WB, K);
}
static inline void ock_encoder_tables(const float *Z, int ldz, int n, int S, const float *W, int ldw, int J,
                                      const float *sqn, float *out, int ldo) {
    OCK_CALL(encoder_tables)(Z, ldz, n, S, W, ldw, J, sqn, out, ldo);
}
static inline int ock_select_smallest(const float *values, int n, int T, float *out_score, int *out_index) {
    return OCK_CALL(select_smallest)(values, n, T, out_score, out_index);
}
static inline float ock_leaves_min(const float *base, const float *pair, const float *score, const int *word,
                                   int count, int K, float *acc) {
    return OCK_CALL(leaves_min)(base, pair, score, word, count, K, acc);
}
static inline void ock_leaves_locate(const float *base, const float *pair, const float *score, const int *word,
                                     int count, int K, const float *acc, float target, int *out_t, int *out_k) {
    OCK_CALL(leaves_locate)(base, pair, score, word, count, K, acc, target, out_t, out_k);
}
static inline void ock_rotate(const float *q, const float *rot, int P, int D, double *qd, double *z) {
    OCK_CALL(rotate)(q, rot, P, D, qd, z);
}
static inline double ock_tables(const double *z, const float *words_t, const double *sqnorms, int M, int C, int K,
                                int S, int kind, int slots, double *acc, float *lut) {
    return OCK_CALL(tables)(z, words_t, sqnorms, M, C, K, S, kind, slots, acc, lut);
}
static inline void ock_coarse_dots(const float *Q, int nq, const float *ct, int P, int L, float *out) {
    OCK_CALL(coarse_dots)(Q, nq, ct, P, L, out);
}
/* The candidate lists of query q alone (h: the prefilter of its P x L centroids), in increasing order, in cand (L + 16
 * ints), and their exact inner products dots[cand[i]], as coarse_dots computes them; returns their number, or -1 when
 * the prefilter does not apply (this level has none, n_probe > L / 2, too few lists, values out of its range): the
 * caller then takes coarse_dots for every list. work: ock_coarse_alone_work_bytes(L), 8-byte aligned. */
static inline int ock_coarse_alone(const float *q, const ock_coarse_half *h, const float *c_sqnorms, int n_probe,
                                   void *work, int *cand, float *dots) {
    return OCK_CALL(coarse_alone) != NULL ? OCK_CALL(coarse_alone)(q, h, c_sqnorms, n_probe, work, cand, dots) : -1;
}
static inline const ock_rr_value_table *ock_rerank_values(void) { return OCK_CALL(rerank_values); }

static inline void ock_fs_scan_run(const ock_fs_base *b, const ock_fs_query *q, const ock_fs_run *run,
                                   ock_fs_collector *c) {
    OCK_CALL(fs_scan_run)(b, q, run, c);
}
static inline void ock_fs_scan_run2(const ock_fs_base *b, const ock_fs_query *qa, const ock_fs_query *qb,
                                    const ock_fs_run *ra, const ock_fs_run *rb, ock_fs_collector *ca,
                                    ock_fs_collector *cb) {
    OCK_CALL(fs_scan_run2)(b, qa, qb, ra, rb, ca, cb);
}
static inline void ock_fs_block_sums(const uint8_t *block, const uint8_t *qlut, const ock_fs_tables *t,
                                     const uint8_t *norm_bytes, uint16_t *out) {
    OCK_CALL(fs_block_sums)(block, qlut, t, norm_bytes, out);
}

/* Constants the callers share with the kernels. */
#define OCK_PANEL 32                 /* columns per panel of the model arrays the table kernel reads (tables.h) */
#define OCK_TABLE_L2_NORM_TERM 0     /* kinds of query table (tables.h): -2 z_m.d, completed by ||z||^2 and n_b */
#define OCK_TABLE_L2_WHOLE 1         /* ||z_m - d||^2: the whole distance (C = 1) */
#define OCK_TABLE_NEG_DOT 2          /* -z_m.d: minus the inner product (ip, cosine) */

#endif
