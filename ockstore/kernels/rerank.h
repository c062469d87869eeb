/* Exact re-ranking of search candidates (docs/ARCHITECTURE.md, "Search"): for one query, gather each candidate's
 * stored row, compute its exact distance or score, and keep the best k by (value, id) -- one compiled loop, nothing
 * per candidate outside it.
 *
 * What is computed, exactly (the NumPy oracle in the tests computes the same):
 *
 *   x        the candidate's stored row as real numbers: float32 or float16 values, uint8 values, or for "sq8" the
 *            stored representation x_p = lo_p + step_p * c_p of its codes c_p, evaluated in float64 with
 *            step_p = (hi_p - lo_p) / 255 (lo, hi: the float32 value ranges of the model, docs/FORMAT.md).
 *   q        the query, float32 (unit length for cosine: the caller normalised it), widened to float64.
 *   l2       sum_p (q_p - x_p)^2
 *   ip       sum_p q_p * x_p
 *   cosine   (sum_p q_p * x_p) / sqrt(sum_p x_p * x_p)
 *
 * Every product and difference is rounded to float64 as written (products of float32, float16 and uint8 values
 * with the float32 query are exact, so where the AVX2 level fuses them with the sum it rounds the same), and every
 * sum over p runs
 * in 16 lanes: lane j adds the terms of p = j, j + 16, j + 32, ... in increasing p (the dimensions are padded to a
 * multiple of 16 with zeros, whose terms are +0), then the lanes are added pairwise as a halving tree:
 * s8[j] = a[j] + a[j + 8], s4[j] = s8[j] + s8[j + 4], s2[j] = s4[j] + s4[j + 2], sum = s2[0] + s2[1]. The result is
 * rounded once to float32: that is the value returned (the score for ip and cosine), and candidates are ranked by
 * (value, id) -- ascending distances, descending scores -- a smaller id winning a tie. A query's values depend on its
 * query vector and its rows only: never on the batch, the other candidates, the thread or the instruction set.
 *
 * uint8 rows with a query of integers in 0..255 (queries of a uint8 base, as SIFT's) take an integer path: every
 * term and every sum is then an exact integer (|sum| < 2^31 for P <= 32768), which is also what the float64 lanes
 * give for such a query, so the path changes only the speed.
 *
 * Damage: a float32 row holding NaN, +-inf or a magnitude beyond OCK_RR_MAX_ABS (1e15, the limit of every vector
 * input) and a float16 row holding NaN or inf are "bad"; so is, for cosine, a row whose representation is the zero
 * vector. The kernel never fails: it reports them in its return value (OCK_RR_BAD_VALUES, OCK_RR_ZERO_VECTOR) and the
 * caller, which knows the file, raises the error naming the row (the values it returns for such a query are
 * meaningless).
 *
 * Speed: a candidate costs the bytes of its row (128 B for uint8 SIFT, 768 B for float16 MiniLM), prefetched
 * OCK_RR_PREFETCH_BYTES ahead, plus P / 16 blocks of a few vector instructions; the heap of k is touched only by
 * the few candidates that enter it. Two implementations of the values, one per SIMD level (rerank_values.h, a level
 * body: the kernels' table holds each level's value functions, and the caller passes the level's to the loop):
 * portable C that compilers vectorise for the baseline instruction set, and AVX2 (+F16C for float16) intrinsics; both
 * compute the same lanes in the same order, so they return bitwise the same values.
 *
 * This header: the constants and types, the query prepared once, the heap of the best k and the loop over a query's
 * candidates, which the Cython parts compile and run in their own threads.
 */
#ifndef OCKSTORE_RERANK_H
#define OCKSTORE_RERANK_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* No fused multiply-add anywhere in this file: a build with -march=native must round as the oracle does. The value
 * functions (rerank_values.h) are written once, generically, and inlined into one function per (row kind, metric),
 * where the kind and the metric are constants and their branches vanish. Every function of the loop and of the values
 * carries these attributes (OCK_RR_FN, or OCK_RR_INLINE for the helpers it must inline): GCC inlines nothing across
 * different optimize() options. */
#if defined(__GNUC__) && !defined(__clang__)
#define OCK_RR_FN __attribute__((optimize("fp-contract=off", "no-wrapv")))
#define OCK_RR_INLINE static inline __attribute__((always_inline, optimize("fp-contract=off", "no-wrapv")))
#elif defined(__clang__)
#pragma clang fp contract(off)
#define OCK_RR_FN
#define OCK_RR_INLINE static inline __attribute__((always_inline))
#else
#define OCK_RR_FN
#define OCK_RR_INLINE static inline
#endif

/* How the rows are stored (the `vectors` section's kinds, docs/FORMAT.md). */
#define OCK_RR_F32 0
#define OCK_RR_F16 1
#define OCK_RR_U8 2
#define OCK_RR_SQ8 3
#define OCK_RR_U8_INT 4         /* internal: uint8 rows and an integer query (the integer path) */
/* What is ranked. */
#define OCK_RR_L2 0
#define OCK_RR_IP 1
#define OCK_RR_COSINE 2
/* Return flags of ock_rerank_query. */
#define OCK_RR_BAD_VALUES 1
#define OCK_RR_ZERO_VECTOR 2

#define OCK_RR_LANES 16
/* Bytes of rows prefetched ahead of the candidate being computed: about what a core keeps in flight (32 cache
 * lines), so that a miss to memory (~100 ns) is covered without prefetches being dropped; the distance in
 * candidates is this over a row's bytes, between OCK_RR_MIN_AHEAD and OCK_RR_MAX_AHEAD (16 candidates of 128-byte
 * uint8 SIFT rows, 4 of 768-byte float16 MiniLM rows). */
#define OCK_RR_PREFETCH_BYTES 2048
#define OCK_RR_MIN_AHEAD 4
#define OCK_RR_MAX_AHEAD 16
/* The largest magnitude of a stored float (as every vector input, docs/ARCHITECTURE.md "Conventions"): with it no
 * float64 sum below overflows, and the float32 values stay finite for any P below 2^40. */
#define OCK_RR_MAX_ABS 1e15f
/* The integer path's bound on P: sum_p (q_p - x_p)^2 <= 255^2 * P < 2^31. */
#define OCK_RR_INT_MAX_P 32768

/* P rounded up to whole blocks of lanes: the length of the per-dimension float64 arrays below. */
static inline int ock_rr_padded(int P) { return (P + OCK_RR_LANES - 1) / OCK_RR_LANES * OCK_RR_LANES; }

/* The rows of one source of candidates (an index, or one segment of a collection). */
typedef struct {
    const unsigned char *rows;  /* row r starts at rows + r * row_bytes */
    const int64_t *ids;         /* the id of row r, or NULL: r itself */
} ock_rr_part;

/* What every candidate of a call shares: the row layout, the metric and the parts. */
typedef struct {
    int dtype;                  /* OCK_RR_F32, OCK_RR_F16, OCK_RR_U8 or OCK_RR_SQ8 */
    int metric;                 /* OCK_RR_L2, OCK_RR_IP or OCK_RR_COSINE */
    int P;
    int64_t row_bytes;          /* bytes from one row to the next (>= P * itemsize) */
    const double *sq8_lo;       /* (ock_rr_padded(P),) sq8 only: lo_p, zero past P */
    const double *sq8_step;     /* (ock_rr_padded(P),) sq8 only: (hi_p - lo_p) / 255, zero past P */
    const ock_rr_part *parts;   /* (n_parts,) */
    int n_parts;
} ock_rr_source;

/* One query, prepared (ock_rr_prepare) in the caller's scratch. */
typedef struct {
    const double *q;            /* (padded,) the query in float64, zero past P */
    const int16_t *q16;         /* (P rounded up to 32,) the query as integers (integer path), zero past P */
    int P;
    const double *lo, *step;    /* sq8: as in ock_rr_source */
} ock_rr_query;

/* The exact value of one row (float64); sets OCK_RR_* flags in *bad for a bad row. */
typedef double (*ock_rr_value_fn)(const ock_rr_query *qc, const unsigned char *row, int *bad);
/* A SIMD level's value functions: [row kind (OCK_RR_F32 .. OCK_RR_U8_INT)][metric]. */
typedef ock_rr_value_fn ock_rr_value_table[5][3];

/* Scratch of one thread: the float64 query, its int16 copy and the heap of k (key, position) pairs, each at a
 * 64-byte boundary; 64 bytes of slack let the kernel align the start itself. */
static inline size_t ock_rr_align64(size_t n) { return (n + 63) & ~(size_t)63; }
static inline size_t ock_rr_q16_offset(int P) { return ock_rr_align64((size_t)ock_rr_padded(P) * sizeof(double)); }
static inline size_t ock_rr_key_offset(int P) {
    return ock_rr_q16_offset(P) + ock_rr_align64(((size_t)P + 32) * sizeof(int16_t));
}
static inline size_t ock_rr_pos_offset(int P, int k) {
    return ock_rr_key_offset(P) + ock_rr_align64((size_t)k * sizeof(float));
}
static inline size_t ock_rr_scratch_bytes(int P, int k) {
    return ock_rr_pos_offset(P, k) + ock_rr_align64((size_t)k * sizeof(int64_t)) + 64;
}

/* What every level's value functions share: the bytes of a row's value, and the bit pattern of OCK_RR_MAX_ABS (a
 * float32 whose magnitude bits exceed it is too large, inf or NaN). */
OCK_RR_INLINE int ock_rr_itemsize(int kind) { return kind == OCK_RR_F32 ? 4 : kind == OCK_RR_F16 ? 2 : 1; }

static inline uint32_t ock_rr_max_abs_bits(void) {
    const float f = OCK_RR_MAX_ABS;
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

/* ------------------------------------------------------------------------------------------------------------------
 * The query, prepared once; the heap of the best k. */

/* Fill qc from the float32 query q in `scratch` (aligned to 64): its float64 copy, and for uint8 rows its int16
 * copy when every value is an integer in 0..255. Returns the row kind to compute with (OCK_RR_U8_INT for the integer
 * path, else the source's). */
OCK_RR_FN
static int ock_rr_prepare(const ock_rr_source *src, const float *q, unsigned char *scratch, ock_rr_query *qc) {
    const int P = src->P, padded = ock_rr_padded(P);
    double *qd = (double *)scratch;
    int16_t *q16 = (int16_t *)(scratch + ock_rr_q16_offset(P));
    int p, integer = src->dtype == OCK_RR_U8 && P <= OCK_RR_INT_MAX_P;
    for (p = 0; p < P; p++) {
        const float v = q[p];
        qd[p] = (double)v;
        if (integer) {
            if (v >= 0.0f && v <= 255.0f && v == (float)(int)v) q16[p] = (int16_t)v;
            else integer = 0;
        }
    }
    for (; p < padded; p++) qd[p] = 0.0;
    if (integer)
        for (p = P; p < (P + 31) / 32 * 32; p++) q16[p] = 0;
    qc->q = qd;
    qc->q16 = q16;
    qc->P = P;
    qc->lo = src->sq8_lo;
    qc->step = src->sq8_step;
    return integer ? OCK_RR_U8_INT : src->dtype;
}

/* A max-heap of the best k (key, position) pairs by (key, id), the worst at the root; keys ascend as results get
 * worse (the distance, or minus the score). A position j is candidate j: row rows[j] of part parts[j] (rows NULL:
 * row j of part 0). */
typedef struct {
    float *key;
    int64_t *pos;
    int k;
    int size;
    const ock_rr_source *src;
    const int64_t *rows;
    const int64_t *parts;
} ock_rr_heap;

OCK_RR_INLINE int64_t ock_rr_row_of(const ock_rr_heap *h, int64_t pos) { return h->rows != NULL ? h->rows[pos] : pos; }

OCK_RR_INLINE const ock_rr_part *ock_rr_part_of(const ock_rr_heap *h, int64_t pos) {
    return &h->src->parts[h->parts != NULL ? h->parts[pos] : 0];
}

OCK_RR_INLINE int64_t ock_rr_id(const ock_rr_heap *h, int64_t pos) {
    const int64_t row = ock_rr_row_of(h, pos);
    const ock_rr_part *part = ock_rr_part_of(h, pos);
    return part->ids != NULL ? part->ids[row] : row;
}

/* (k1, p1) ranks after (k2, p2): a larger key, or an equal key and a larger id (ids are read only for ties). */
OCK_RR_INLINE int ock_rr_worse(const ock_rr_heap *h, float k1, int64_t p1, float k2, int64_t p2) {
    return k1 > k2 || (k1 == k2 && ock_rr_id(h, p1) > ock_rr_id(h, p2));
}

/* Put (key, pos) at the root of the heap's first `size` slots and sift it down. */
OCK_RR_FN
static void ock_rr_sift_down(ock_rr_heap *h, int size, float key, int64_t pos) {
    int at = 0;
    for (;;) {
        int child = 2 * at + 1;
        if (child >= size) break;
        if (child + 1 < size && ock_rr_worse(h, h->key[child + 1], h->pos[child + 1], h->key[child], h->pos[child]))
            child++;
        if (!ock_rr_worse(h, h->key[child], h->pos[child], key, pos)) break;
        h->key[at] = h->key[child];
        h->pos[at] = h->pos[child];
        at = child;
    }
    h->key[at] = key;
    h->pos[at] = pos;
}

OCK_RR_INLINE void ock_rr_offer(ock_rr_heap *h, float key, int64_t pos) {
    if (h->size < h->k) {
        int at = h->size++;
        while (at > 0) {  /* sift up */
            const int parent = (at - 1) / 2;
            if (!ock_rr_worse(h, key, pos, h->key[parent], h->pos[parent])) break;
            h->key[at] = h->key[parent];
            h->pos[at] = h->pos[parent];
            at = parent;
        }
        h->key[at] = key;
        h->pos[at] = pos;
    } else if (key <= h->key[0] && ock_rr_worse(h, h->key[0], h->pos[0], key, pos)) {
        ock_rr_sift_down(h, h->k, key, pos);
    }
}

/* Prefetch every cache line of the `bytes` bytes at `row`. Always inlined, as every helper of the loop: GCC cannot
 * inline a plain `static inline` function into one with other optimize() options (OCK_RR_FN's), and a prefetch
 * helper left out of line counts as free of side effects, so its calls were deleted (no prefetch instruction was
 * left in the binary, the rows missed the cache at every candidate: 0.26 -> 0.17 us per float16 MiniLM candidate
 * once inlined). */
OCK_RR_INLINE void ock_rr_prefetch(const unsigned char *row, int64_t bytes) {
#if defined(__GNUC__) || defined(__clang__)
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b, 0, 3);
    __builtin_prefetch(row + bytes - 1, 0, 3);
#else
    (void)row;
    (void)bytes;
#endif
}

/* Prefetch the cache line at `row` alone. */
OCK_RR_INLINE void ock_rr_prefetch_line(const unsigned char *row) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(row, 0, 3);
#else
    (void)row;
#endif
}

/* ------------------------------------------------------------------------------------------------------------------
 * One query: begin, offer ranges of candidates, end.
 *
 * The state of a query's re-ranking: its prepared query, the value function for its row kind and the metric, its
 * heap, and the flags of bad rows seen. It lives in the caller's scratch (ock_rr_scratch_bytes) for as long as the
 * query's candidates come: all at once (ock_rerank_query), or range after range (an exhaustive scan in blocks of rows
 * shared by a group of queries). */
typedef struct {
    ock_rr_query qc;
    ock_rr_value_fn value_of;
    ock_rr_heap heap;
    int64_t data_bytes;         /* bytes of a row's values (what is prefetched) */
    int64_t ahead;              /* candidates prefetched ahead */
    int bad;
} ock_rr_state;

/* src      the rows, their kind and the metric
 * q        (P,) float32, finite (unit length for cosine)
 * rows     (R,) the candidates' rows in their parts, -1 for none (skipped); NULL: candidate j is row j
 * parts    (R,) the part of each candidate, or NULL: part 0
 * k        results kept, >= 1
 * scratch  ock_rr_scratch_bytes(P, k) bytes, the query's own (any alignment)
 * values   the value functions of the SIMD level in use (the per-level part below: OCK_FN(rerank_values)) */
OCK_RR_FN
static void ock_rr_begin(ock_rr_state *st, const ock_rr_source *src, const float *q, const int64_t *rows,
                         const int64_t *parts, int k, void *scratch, const ock_rr_value_table *values) {
    unsigned char *base = (unsigned char *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    const int kind = ock_rr_prepare(src, q, base, &st->qc);
    st->value_of = (*values)[kind][src->metric];
    st->heap.key = (float *)(base + ock_rr_key_offset(src->P));
    st->heap.pos = (int64_t *)(base + ock_rr_pos_offset(src->P, k));
    st->heap.k = k;
    st->heap.size = 0;
    st->heap.src = src;
    st->heap.rows = rows;
    st->heap.parts = parts;
    st->data_bytes = (int64_t)src->P * ock_rr_itemsize(src->dtype);
    st->ahead = OCK_RR_PREFETCH_BYTES / (st->data_bytes > 0 ? st->data_bytes : 1);
    if (st->ahead < OCK_RR_MIN_AHEAD) st->ahead = OCK_RR_MIN_AHEAD;
    if (st->ahead > OCK_RR_MAX_AHEAD) st->ahead = OCK_RR_MAX_AHEAD;
    st->bad = 0;
}

OCK_RR_INLINE const unsigned char *ock_rr_row_at(const ock_rr_state *st, int64_t pos) {
    return ock_rr_part_of(&st->heap, pos)->rows + ock_rr_row_of(&st->heap, pos) * st->heap.src->row_bytes;
}

/* Candidates j0 .. j1-1: each row's exact value, offered to the heap. Two prefetches run ahead of the candidate
 * computed, within the range: every line of the row `st->ahead` candidates on, and before that the first line of the
 * row 2 * `st->ahead` candidates on, which starts its page's translation early (rows of a large mapping are on
 * pages the TLB does not hold; a prefetch waits for the walk): 28 -> 22 ns per uint8 SIFT candidate of a 128 MB file
 * (the float16 MiniLM rows, compute bound once prefetched, unchanged). */
OCK_RR_FN
static void ock_rr_offer_range(ock_rr_state *st, int64_t j0, int64_t j1) {
    const int64_t *rows = st->heap.rows;
    const int l2 = st->heap.src->metric == OCK_RR_L2;
    const int64_t ahead = st->ahead, early = 2 * st->ahead;
    for (int64_t j = j0; j < j1 && j < j0 + early; j++)
        if (rows == NULL || rows[j] >= 0) ock_rr_prefetch_line(ock_rr_row_at(st, j));
    for (int64_t j = j0; j < j1 && j < j0 + ahead; j++)
        if (rows == NULL || rows[j] >= 0) ock_rr_prefetch(ock_rr_row_at(st, j), st->data_bytes);
    for (int64_t j = j0; j < j1; j++) {
        if (j + early < j1 && (rows == NULL || rows[j + early] >= 0))
            ock_rr_prefetch_line(ock_rr_row_at(st, j + early));
        if (j + ahead < j1 && (rows == NULL || rows[j + ahead] >= 0))
            ock_rr_prefetch(ock_rr_row_at(st, j + ahead), st->data_bytes);
        if (rows != NULL && rows[j] < 0) continue;
        const float v = (float)st->value_of(&st->qc, ock_rr_row_at(st, j), &st->bad);
        ock_rr_offer(&st->heap, l2 ? v : -v, j);
    }
}

/* Write the best k (value, id) in order -- distances ascending, scores descending, ties by id -- then padding
 * (+inf or -inf, -1) when fewer came; out_pos (or NULL) gets each result's candidate position (-1 for padding).
 * Returns 0, or OCK_RR_BAD_VALUES / OCK_RR_ZERO_VECTOR (or both) when a candidate's row was bad: the outputs are
 * then meaningless and the caller raises. */
OCK_RR_FN
static int ock_rr_end(ock_rr_state *st, float *out_value, int64_t *out_id, int64_t *out_pos) {
    ock_rr_heap *h = &st->heap;
    const int l2 = h->src->metric == OCK_RR_L2;
    for (int n = h->size; n > 0; n--) {  /* heap sort: the worst goes last */
        const float key = h->key[0];
        const int64_t pos = h->pos[0];
        out_value[n - 1] = l2 ? key : -key;
        out_id[n - 1] = ock_rr_id(h, pos);
        if (out_pos != NULL) out_pos[n - 1] = pos;
        if (n > 1) ock_rr_sift_down(h, n - 1, h->key[n - 1], h->pos[n - 1]);
    }
    for (int n = h->size; n < h->k; n++) {
        out_value[n] = l2 ? INFINITY : -INFINITY;
        out_id[n] = -1;
        if (out_pos != NULL) out_pos[n] = -1;
    }
    return st->bad;
}

/* One query's R candidates, at once (see ock_rr_begin and ock_rr_end). */
OCK_RR_FN
static inline int ock_rerank_query(const ock_rr_source *src, const float *q, const int64_t *rows, const int64_t *parts,
                                   int64_t R, int k, void *scratch, const ock_rr_value_table *values, float *out_value,
                                   int64_t *out_id, int64_t *out_pos) {
    ock_rr_state st;
    ock_rr_begin(&st, src, q, rows, parts, k, scratch, values);
    ock_rr_offer_range(&st, 0, R);
    return ock_rr_end(&st, out_value, out_id, out_pos);
}

#endif
