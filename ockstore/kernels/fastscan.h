/* Fast scan: codes of words below 16 (four bits each) scanned with 16-entry tables held in SIMD registers
 * (docs/ARCHITECTURE.md, "Fast scan"; the block layout is docs/FORMAT.md's).
 *
 * An exhaustive ADC scan of one-byte words costs a table load from memory per word (~2-3 ns per 64-bit code). With
 * at most 16 words per codebook a table fits in one 16-byte register, and one byte shuffle (vpshufb) looks up 16 (per
 * 128-bit lane) words at once: 32 rows per AVX2 instruction, 64 rows of two codebooks per AVX-512 one. That needs
 * three things, each here:
 *
 * 1. A block layout. Rows live in blocks of OCK_FS_BLOCK = 32. A block holds `cols` = W rounded up to even columns of
 *    16 bytes, column w at byte 16 w: byte i (0..15) is word w of row i in its low nibble and word w of row i + 16 in
 *    its high nibble. One 32-byte load thus brings columns w, w + 1 (an even w) of 32 rows, lane 0 column w and lane 1
 *    column w + 1: a mask and a shift give two registers of nibbles that index one table register holding the two
 *    columns' tables. Padding (the odd column, rows past the end) is zero.
 *
 * 2. Tables quantized to bytes, per query: Q_w[j] = floor((T_w[j] - bias_w) / scale), with bias_w = min_j T_w[j] and
 *    one shared scale, so that the sum of a row's W entries (plus its norm term's, below) is one uint16 sum
 *    S(x) = sum_w Q_w[x_w] and
 *        c0 + scale * S(x) <= D(x) = exact ADC distance of x, in real arithmetic, c0 = qconst + sum_w bias_w (+ ...)
 *    because floor only rounds down: the quantized sum is a *lower bound*. The scale is the smallest that keeps every
 *    entry <= 255 and the largest possible sum <= 65535 (checked after quantizing, never assumed).
 *
 * 3. An exact stage. A row's quantized sum gives a lower bound of its exact float ADC distance (the distance the 8-bit
 *    scan computes: the same float additions in the same order): lb = c0 + scale * S(x) - rho, where rho bounds the
 *    float rounding of the exact sum. The scan collects the rows whose bound does not exceed a limit (the k-th best
 *    exact distance known so far) and refines them in batches: the k with the smallest bounds get their exact
 *    distances first, then every other row whose bound is still within the new k-th best; the limit then falls to
 *    that k-th best. A row left out has an exact distance above the final k-th best and could never have entered, so
 *    the results -- ids, distances and their order, ties by id -- are exactly those of the 8-bit scan over the same
 *    words, on every instruction set: the quantized sums only decide which rows are worth an exact look. Refining
 *    in batches, best bounds first, keeps those exact looks near k (on SIFT1M with 64-bit codes about 1.5 k per
 *    query, docs/results.md "Fast scan"), where offering rows one by one in scan order would pay an exact distance
 *    and a heap update for every row that improves on the k-th best so far (~k ln(N / k)).
 *
 * Ranking by the bound. A search that re-ranks its candidates from stored vectors needs no exact ADC distance: the
 * collector's `by_bound` mode takes a row's lower bound (rounded to float, equal bounds by id) as its value, skips
 * the exact stage, and keeps the k rows of smallest bound (docs/ARCHITECTURE.md, "Fast scan").
 *
 * The norm term. An L2 code with C >= 2 adds its stored norm term n = ||x_hat||^2, whose spread is as large as the
 * words' tables together: leaving it out of the bound selects tens of thousands of rows instead of tens. A one-byte
 * norm code (16 h + l) is split into two nibbles with 16-entry lower-bound tables hi[h] + lo[l] <= level(16 h + l),
 * held as 16-bit values (two byte shuffles each) so that they do not coarsen the words' scale. A float32 norm is
 * added per block in float, with a rounding allowance per row (ock_fs_limits).
 *
 * This header holds what every instruction set shares: the layout, the tables, the candidates and the exact stage,
 * and the portable scan (the oracle). fastscan_simd.h adds the AVX2 scans (functions with a `target` attribute;
 * the AVX-512 level runs them too), which the kernels' dispatch table (simd.h) chooses at run time: every level
 * computes the same uint16 sums, hence the same results. Everything here trusts its arguments (the Python layers
 * validate), never allocates and never touches Python objects.
 */
#ifndef OCKSTORE_FASTSCAN_H
#define OCKSTORE_FASTSCAN_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rows.h"

#if defined(__GNUC__) && !defined(__clang__)
/* The exact stage adds floats in a fixed order; nothing may be contracted or reassociated. */
#define OCK_FS_EXACT_FN __attribute__((optimize("fp-contract=off", "no-fast-math")))
#else
#define OCK_FS_EXACT_FN
#endif

#if defined(__GNUC__) || defined(__clang__)
#define OCK_FS_INLINE __attribute__((always_inline))
#else
#define OCK_FS_INLINE
#endif

#define OCK_FS_BLOCK 32            /* rows per block */
#define OCK_FS_LANE 16             /* bytes per column: rows i and i + 16 share byte i */
#define OCK_FS_WORDS 16            /* entries per table (words below 16) */
#define OCK_FS_MAX_SUM 65535       /* the accumulator's range (uint16) */
#define OCK_FS_NO_ROW (-1)

/* Columns of a block for W words (W rounded up to even: one 32-byte load feeds two columns). */
static inline int ock_fs_columns(int W) { return W + (W & 1); }

/* Bytes of one block for W words. */
static inline size_t ock_fs_block_bytes(int W) { return (size_t)OCK_FS_LANE * (size_t)ock_fs_columns(W); }

/* Blocks holding n rows. */
static inline size_t ock_fs_blocks(size_t n) { return (n + OCK_FS_BLOCK - 1) / OCK_FS_BLOCK; }

/* --------------------------------------------------------------------------------------------------------------------
 * Layout: packing and unpacking. */

/* Word w of row i (0..31) of a block. */
static inline unsigned ock_fs_word(const uint8_t *block, int i, int w) {
    return ((unsigned)block[(size_t)w * OCK_FS_LANE + (i & 15)] >> ((i >> 4) << 2)) & 15u;
}

/* Pack rows codes[0..n-1] (n x W bytes, each < 16) into ock_fs_blocks(n) blocks at `blocks` (zeroing the padding:
 * the odd column and the rows past n of the last block). */
static inline void ock_fs_pack(const uint8_t *codes, size_t n, int W, uint8_t *blocks) {
    const int cols = ock_fs_columns(W);
    const size_t bytes = ock_fs_block_bytes(W);
    const size_t nb = ock_fs_blocks(n);
    memset(blocks, 0, nb * bytes);
    for (size_t r = 0; r < n; r++) {
        uint8_t *block = blocks + (r / OCK_FS_BLOCK) * bytes;
        const int i = (int)(r % OCK_FS_BLOCK);
        const int shift = i < 16 ? 0 : 4;
        const uint8_t *code = codes + r * (size_t)W;
        for (int w = 0; w < W; w++) block[(size_t)w * OCK_FS_LANE + (i & 15)] |= (uint8_t)((code[w] & 15) << shift);
    }
    (void)cols;
}

/* The inverse: rows start..stop-1 of the blocks, written to codes (stop - start rows of W bytes). */
static inline void ock_fs_unpack(const uint8_t *blocks, int W, size_t start, size_t stop, uint8_t *codes) {
    const size_t bytes = ock_fs_block_bytes(W);
    for (size_t r = start; r < stop; r++) {
        const uint8_t *block = blocks + (r / OCK_FS_BLOCK) * bytes;
        const int i = (int)(r % OCK_FS_BLOCK);
        uint8_t *code = codes + (r - start) * (size_t)W;
        for (int w = 0; w < W; w++) code[w] = (uint8_t)ock_fs_word(block, i, w);
    }
}

/* --------------------------------------------------------------------------------------------------------------------
 * Per-query quantized tables. */

/* The norm term of one-byte norm codes as the scan bounds it: 16-entry tables with hi[h] + lo[l] <= levels[16 h + l]
 * for every h, l (in float64). hi[h] = levels[16 h] (the smallest level of group h, the levels ascending),
 * lo[l] = min over h of levels[16 h + l] - hi[h] (>= 0). The bound is exact (up to rounding) when the levels are
 * uniform, as the quantizers fit them for K <= 16 (docs/ARCHITECTURE.md, "Fast scan"), and valid, only looser, for
 * any ascending levels. */
typedef struct {
    double hi[16], lo[16];
    double fit;                /* max over codes of levels[c] - (hi + lo) >= 0: how far a bound may fall below */
    double magnitude;          /* max |level| */
} ock_fs_norm;

static inline void ock_fs_norm_init(const float *levels, ock_fs_norm *n) {
    for (int h = 0; h < 16; h++) n->hi[h] = (double)levels[16 * h];
    for (int l = 0; l < 16; l++) {
        double m = INFINITY;
        for (int h = 0; h < 16; h++) {
            const double v = (double)levels[16 * h + l] - n->hi[h];
            if (v < m) m = v;
        }
        n->lo[l] = m;
    }
    n->fit = 0.0;
    n->magnitude = 0.0;
    for (int c = 0; c < 256; c++) {
        const double gap = (double)levels[c] - (n->hi[c >> 4] + n->lo[c & 15]);
        if (gap > n->fit) n->fit = gap;
        if (fabs((double)levels[c]) > n->magnitude) n->magnitude = fabs((double)levels[c]);
    }
}

/* One query's tables for the fast scan. */
typedef struct {
    int W, cols;
    double scale;              /* real distance per quantized unit (> 0) */
    double c0;                 /* LB(x) = c0 + scale * S(x) <= exact(x) - list term, in real arithmetic */
    double magnitude;          /* |qconst| + sum_w max_j |T_w[j]| + max |norm term| (u8 norms): rounding bound base */
    double slack;              /* exact(x) - list term <= c0 + scale * S(x) + slack (+ n for float32 norms): what
                                * the floors cut off, at most a unit per table, plus the norm tables' fit */
    int impossible;            /* some words cannot occur (K < 16: their float entries are +inf): a row holding one
                                * (a damaged file) has an infinite exact distance, above any upper bound */
    int has_norm;              /* 1: the u8 norm's nibble tables are part of S */
    uint16_t norm_lo[16];      /* quantized lower-bound tables of the norm code's nibbles (has_norm) */
    uint16_t norm_hi[16];
    int max_sum;               /* the largest S any row can reach (<= OCK_FS_MAX_SUM, checked) */
} ock_fs_tables;

/* The smallest and largest finite entries of one table (0, 0 when it has none: every word of it is impossible). */
static inline void ock_fs_table_range(const float *row, double *lo, double *hi, double *amax) {
    double l = INFINITY, h = -INFINITY, a = 0.0;
    for (int j = 0; j < OCK_FS_WORDS; j++) {
        const double v = (double)row[j];
        if (!isfinite(v)) continue;
        if (v < l) l = v;
        if (v > h) h = v;
        if (fabs(v) > a) a = fabs(v);
    }
    if (!(l <= h)) l = h = 0.0;
    *lo = l;
    *hi = h;
    *amax = a;
}

/* Quantize one query's float tables lut (W x 16, entries >= K may be +inf: words that cannot occur) into qlut
 * (cols x 16 bytes, the pad column zero) and t. norm: the one-byte norm codes' bounds (ock_fs_norm_init), or NULL
 * (no norm term, or float32 norms added per row). Returns 0, or -1 when no scale keeps the sum in uint16 (not seen:
 * the scale below does by construction, and the loop only guards its rounding). */
static inline int ock_fs_quantize(const float *lut, int W, float qconst, const ock_fs_norm *norm, uint8_t *qlut,
                           ock_fs_tables *t) {
    const double *norm_hi = norm != NULL ? norm->hi : NULL, *norm_lo = norm != NULL ? norm->lo : NULL;
    double bias_sum = 0.0, range_max = 0.0, range_sum = 0.0, magnitude = fabs((double)qconst);
    t->W = W;
    t->cols = ock_fs_columns(W);
    t->impossible = 0;
    for (size_t j = 0; j < (size_t)W * OCK_FS_WORDS; j++)
        if (!isfinite((double)lut[j])) t->impossible = 1;
    double bias_of[W > 0 ? W : 1];  /* each table's smallest finite entry, found once for every attempt below */
    for (int w = 0; w < W; w++) {
        double lo, hi, amax;
        ock_fs_table_range(lut + (size_t)w * OCK_FS_WORDS, &lo, &hi, &amax);
        bias_of[w] = lo;
        bias_sum += lo;
        range_sum += hi - lo;
        if (hi - lo > range_max) range_max = hi - lo;
        magnitude += amax;
    }
    double nrange_hi = 0.0, nrange_lo = 0.0, nmin_hi = 0.0, nmin_lo = 0.0;
    t->has_norm = norm_hi != NULL;
    if (t->has_norm) {
        nmin_hi = nmin_lo = INFINITY;
        double nmax_hi = -INFINITY, nmax_lo = -INFINITY;
        for (int j = 0; j < 16; j++) {
            if (norm_hi[j] < nmin_hi) nmin_hi = norm_hi[j];
            if (norm_hi[j] > nmax_hi) nmax_hi = norm_hi[j];
            if (norm_lo[j] < nmin_lo) nmin_lo = norm_lo[j];
            if (norm_lo[j] > nmax_lo) nmax_lo = norm_lo[j];
        }
        nrange_hi = nmax_hi - nmin_hi;
        nrange_lo = nmax_lo - nmin_lo;
        magnitude += norm->magnitude;
    }
    /* The scale: every word entry within a byte, and the whole sum within uint16. */
    double scale = range_max / 255.0;
    const double total = range_sum + nrange_hi + nrange_lo;
    if (total / OCK_FS_MAX_SUM > scale) scale = total / OCK_FS_MAX_SUM;
    if (!(scale > 0.0)) scale = 1.0;  /* constant tables: every sum is 0, any scale bounds them */
    for (int attempt = 0; attempt < 8; attempt++, scale *= 1.0 + 1e-6) {
        /* A product by the inverse instead of a division per entry: it may round an entry a hair above an integer
         * the exact quotient lies below, so that floor exceeds it by one part in 2^50 of the entry, far inside the
         * rounding allowance rho that every bound carries. */
        const double inv = 1.0 / scale;
        long max_sum = 0;
        double cut = 0.0;  /* sum over tables of the most a floor cut off, in units */
        for (int w = 0; w < W; w++) {
            const float *row = lut + (size_t)w * OCK_FS_WORDS;
            uint8_t *q = qlut + (size_t)w * OCK_FS_WORDS;
            const double bias = bias_of[w];
            int qmax = 0;
            double cut_w = 0.0;
            for (int j = 0; j < OCK_FS_WORDS; j++) {
                const double v = (double)row[j];
                const double x = isfinite(v) ? (v - bias) * inv : 0.0;
                double u = floor(x);
                u = u < 0.0 ? 0.0 : u > 255.0 ? 255.0 : u;
                q[j] = (uint8_t)u;
                qmax = (int)u > qmax ? (int)u : qmax;
                cut_w = x - u > cut_w ? x - u : cut_w;
            }
            /* an impossible word (+inf: a code byte >= K, only in a damaged file) gets the column's largest entry:
             * a lower bound of +inf that keeps the sum's bound */
            if (t->impossible)
                for (int j = 0; j < OCK_FS_WORDS; j++)
                    if (!isfinite((double)row[j])) q[j] = (uint8_t)qmax;
            cut += cut_w;
            max_sum += qmax;
        }
        if (t->has_norm) {
            int mh = 0, ml = 0;
            double cut_h = 0.0, cut_l = 0.0;
            for (int j = 0; j < 16; j++) {
                const double xh = (norm_hi[j] - nmin_hi) * inv, xl = (norm_lo[j] - nmin_lo) * inv;
                double uh = floor(xh), ul = floor(xl);
                if (uh < 0.0) uh = 0.0;
                if (ul < 0.0) ul = 0.0;
                if (uh > OCK_FS_MAX_SUM) uh = OCK_FS_MAX_SUM;
                if (ul > OCK_FS_MAX_SUM) ul = OCK_FS_MAX_SUM;
                t->norm_hi[j] = (uint16_t)uh;
                t->norm_lo[j] = (uint16_t)ul;
                if (xh - uh > cut_h) cut_h = xh - uh;
                if (xl - ul > cut_l) cut_l = xl - ul;
                if ((int)uh > mh) mh = (int)uh;
                if ((int)ul > ml) ml = (int)ul;
            }
            max_sum += mh + ml;
            cut += cut_h + cut_l;
        }
        if (max_sum <= OCK_FS_MAX_SUM) {
            if (W & 1) memset(qlut + (size_t)W * OCK_FS_WORDS, 0, OCK_FS_WORDS);
            t->scale = scale;
            t->c0 = (double)qconst + bias_sum + (t->has_norm ? nmin_hi + nmin_lo : 0.0);
            t->magnitude = magnitude;
            t->max_sum = (int)max_sum;
            /* a hair more than the cuts (the divisions above round), plus the norm tables' fit */
            t->slack = scale * (cut * (1.0 + 1e-9) + 1e-9 * (double)W) + (t->has_norm ? norm->fit : 0.0);
            return 0;
        }
    }
    return -1;
}

/* The bound on the float rounding of an exact distance: it is the float sum of W + 3 terms (the query's constant,
 * a list term, the norm term, W table entries), each partial sum rounded once, so it lies within
 * (W + 3) u / (1 - (W + 3) u) * (sum of the terms' magnitudes) of the real sum (u = 2^-24; Higham, "Accuracy and
 * Stability of Numerical Algorithms", 4.2). Doubled for the safety of the double arithmetic around it. */
static inline double ock_fs_rounding(const ock_fs_tables *t, double list_term) {
    const double u = 5.9604644775390625e-08;
    const double n = (double)t->W + 3.0;
    return 2.0 * n * u / (1.0 - n * u) * (t->magnitude + fabs(list_term));
}

/* The largest S a row may have and still enter a heap whose worst distance is dk: -1 when no row can (the whole run
 * is skipped), OCK_FS_MAX_SUM when every row may (dk infinite or far). A row with S above it has
 * exact >= c0 + scale * S - rho > dk. One unit more than the bare bound absorbs the rounding of this arithmetic. */
static inline int ock_fs_threshold(double dk, double c0, double rho, double scale) {
    if (!(dk < INFINITY)) return OCK_FS_MAX_SUM;
    const double units = floor((dk - c0 + rho) / scale) + 1.0;
    if (units < 0.0) return -1;
    if (units >= OCK_FS_MAX_SUM) return OCK_FS_MAX_SUM;
    return (int)units;
}

/* --------------------------------------------------------------------------------------------------------------------
 * The k best (distance, row) pairs: a max-heap ordered by (distance, id), a smaller id winning a tie, as the 8-bit
 * scan's (ockstore/_topk.pxd). Empty slots are (bound, -1). */

typedef struct {
    float *d;                   /* (k,) */
    int64_t *r;                 /* (k,) rows, -1 for an empty slot */
    int k;
    const int64_t **ids;        /* row handle -> id (rows.h), or NULL (the handle) */
} ock_fs_heap;

static inline int64_t ock_fs_id(const int64_t **ids, int64_t row) { return ock_row_id(ids, row); }

/* (d1, r1) ranks after (d2, r2). */
static inline int ock_fs_worse(float d1, int64_t r1, float d2, int64_t r2, const int64_t **ids) {
    return d1 > d2 || (d1 == d2 && ock_fs_id(ids, r1) > ock_fs_id(ids, r2));
}

static inline void ock_fs_heap_init(ock_fs_heap *h, float bound) {
    for (int j = 0; j < h->k; j++) {
        h->d[j] = bound;
        h->r[j] = -1;
    }
}

static inline void ock_fs_heap_sift(float *hd, int64_t *hr, int k, int pos, float d, int64_t row,
                                    const int64_t **ids) {
    for (;;) {
        int child = 2 * pos + 1;
        if (child >= k) break;
        if (child + 1 < k && ock_fs_worse(hd[child + 1], hr[child + 1], hd[child], hr[child], ids)) child++;
        if (!ock_fs_worse(hd[child], hr[child], d, row, ids)) break;
        hd[pos] = hd[child];
        hr[pos] = hr[child];
        pos = child;
    }
    hd[pos] = d;
    hr[pos] = row;
}

/* Put (d, row) at the top of the heap, in place of its worst, and restore the heap. */
static inline void ock_fs_heap_replace_top(float *hd, int64_t *hr, int k, float d, int64_t row, const int64_t **ids) {
    ock_fs_heap_sift(hd, hr, k, 0, d, row, ids);
}

/* Make hd/hr[0..k-1] (any k pairs) a heap in place (Floyd: about 2 k comparisons, where k insertions into a heap of
 * empty slots pay log2 k each). */
static inline void ock_fs_heapify(float *hd, int64_t *hr, int k, const int64_t **ids) {
    for (int pos = k / 2 - 1; pos >= 0; pos--) ock_fs_heap_sift(hd, hr, k, pos, hd[pos], hr[pos], ids);
}

/* Offer (d, row); returns 1 when it entered. */
static inline int ock_fs_heap_offer(ock_fs_heap *h, float d, int64_t row) {
    if (d < h->d[0] || (d == h->d[0] && ock_fs_id(h->ids, row) < ock_fs_id(h->ids, h->r[0]))) {
        ock_fs_heap_replace_top(h->d, h->r, h->k, d, row, h->ids);
        return 1;
    }
    return 0;
}

/* Write the heap's pairs in ascending order to out (k each); the heap is consumed. */
static inline void ock_fs_heap_sort_into(ock_fs_heap *h, float *out_d, int64_t *out_r) {
    int size = h->k;
    while (size > 0) {
        out_d[size - 1] = h->d[0];
        out_r[size - 1] = h->r[0];
        size--;
        if (size == 0) break;
        ock_fs_heap_replace_top(h->d, h->r, size, h->d[size], h->r[size], h->ids);
    }
}

/* --------------------------------------------------------------------------------------------------------------------
 * What a scan reads. */

/* The rows of an index (or of one part of a collection: a segment): the norms and filter are indexed by row numbers
 * from its first row (a run's row0 counts from there too); the rows it gives collectors are handles (rows.h: the run's
 * tag | the row). */
typedef struct {
    int W;
    const float *norms_f32;     /* (N,) float32 norm terms, or NULL */
    const uint8_t *norm_codes;  /* (N,) one-byte norm codes, or NULL */
    const float *norm_levels;   /* (256,) their levels */
    const int64_t **ids;        /* the id table of the rows' handles (rows.h), or NULL: a row's id is its number */
    const uint64_t *allow;      /* (ceil(N / 64),) bitmap of the rows to scan (bit r % 64 of word r // 64), or NULL */
    size_t N;
    int scales;                 /* 1: the norm terms (float32, or the levels of the codes) are scales s > 0 that
                                 * multiply a row's sum (metric "cosine": s = 1 / ||x_hat||), as the 8-bit scan does:
                                 * exact = fl(sum * s); they are then not part of S */
    double scale_lo, scale_hi;  /* with scales: the smallest and largest scale a row may have */
} ock_fs_base;

/* One query as a scan needs it. */
typedef struct {
    const float *lut;           /* (W, 16) float tables: the exact stage */
    const uint8_t *qlut;        /* (cols, 16) quantized tables */
    const ock_fs_tables *t;
} ock_fs_query;

/* A run of rows stored in consecutive blocks: a flat index's rows (or a share of them), or one inverted list. */
typedef struct {
    const uint8_t *blocks;      /* the run's first block */
    size_t row0;                /* the row of its first row (in its base's numbering) */
    size_t n_rows;              /* its rows (its last block is padded) */
    int64_t tag;                /* what turns its rows into row handles (rows.h): the part's, part << OCK_PART_SHIFT */
    float start_term;           /* the exact distance's first term: qconst (+ the list term, float32 sum) */
    double c0;                  /* the lower bound's constant: t->c0 (+ the list term) */
    double rho;                 /* ock_fs_rounding for this run */
} ock_fs_run;

/* 32 bits of the row filter from global row r0 (bits past the bitmap's N rows are zero). */
static inline uint32_t ock_fs_allow_bits(const ock_fs_base *b, size_t r0) {
    if (b->allow == NULL) return 0xffffffffu;
    const size_t word = r0 >> 6;
    const unsigned shift = (unsigned)(r0 & 63);
    uint64_t v = b->allow[word] >> shift;
    if (shift > 32 && word + 1 < (b->N + 63) / 64) v |= b->allow[word + 1] << (64 - shift);
    return (uint32_t)v;
}

/* The rows of block `bi` of a run that the scan must consider: inside the run, and allowed. */
static inline uint32_t ock_fs_live_bits(const ock_fs_base *b, const ock_fs_run *run, size_t bi) {
    const size_t first = bi * OCK_FS_BLOCK;
    const size_t left = run->n_rows - first;
    const uint32_t inside = left >= 32 ? 0xffffffffu : (uint32_t)((1ull << left) - 1);
    return inside & ock_fs_allow_bits(b, run->row0 + first);
}

/* The 32 norm codes (or float32 norms) of rows r0..r0+31, zero past N, as a pointer to 32 readable values. */
static inline const uint8_t *ock_fs_norm_bytes(const ock_fs_base *b, size_t r0, uint8_t *spare) {
    if (r0 + 32 <= b->N) return b->norm_codes + r0;
    memset(spare, 0, 32);
    if (r0 < b->N) memcpy(spare, b->norm_codes + r0, b->N - r0);
    return spare;
}

static inline const float *ock_fs_norm_floats(const ock_fs_base *b, size_t r0, float *spare) {
    if (r0 + 32 <= b->N) return b->norms_f32 + r0;
    memset(spare, 0, 32 * sizeof(float));
    if (r0 < b->N) memcpy(spare, b->norms_f32 + r0, (b->N - r0) * sizeof(float));
    return spare;
}

/* Blocks ahead that the scan asks the memory system for: a run's blocks are read once, in order, and an inverted
 * list's (a few kB) are over before the hardware prefetcher has learnt the stream. */
#define OCK_FS_PREFETCH 4

/* Ask for block bi of a run (its codes, and its norm codes) while earlier blocks are summed. Always inlined: out of
 * line, GCC judged the call free of effects and dropped it (the kernels held no prefetch at all). */
OCK_FS_INLINE static inline void ock_fs_prefetch(const ock_fs_base *b, const ock_fs_run *run, size_t bi,
                                                 size_t bytes) {
    if (bi * OCK_FS_BLOCK >= run->n_rows) return;
    const char *p = (const char *)(run->blocks + bi * bytes);
    for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off);
    if (b->norm_codes != NULL) __builtin_prefetch(b->norm_codes + run->row0 + bi * OCK_FS_BLOCK);
    if (b->norms_f32 != NULL) __builtin_prefetch(b->norms_f32 + run->row0 + bi * OCK_FS_BLOCK);
}

/* The norm term of a row as the exact distance adds it (or, with b->scales, the scale that multiplies it). */
static inline float ock_fs_norm_term(const ock_fs_base *b, size_t row) {
    if (b->norms_f32 != NULL) return b->norms_f32[row];
    if (b->norm_codes != NULL) return b->norm_levels[b->norm_codes[row]];
    return 0.0f;
}

/* --------------------------------------------------------------------------------------------------------------------
 * Candidates and their refinement (the exact stage), shared by every instruction set.
 *
 * A row's quantized sum gives two bounds of its exact distance d (as the float sum computes it): lb <= d <= ub. Rows
 * are collected while lb <= limit, where the limit is the smallest value known to be at least the final k-th best
 * distance: the k-th smallest ub of the rows seen so far (k rows are at most that far; found every k rows by a
 * selection among 2 k bounds, without any exact distance), or the heap's worst after an exact refine. The exact
 * distances are computed once, at the end (or when the buffer is full of rows the bounds cannot separate, as with
 * norm levels the nibble tables fit badly): the k rows with the smallest lb first, then every other row whose lb is
 * still within the k-th best. A row holding a word that cannot occur (a damaged file) has no upper bound: it gives
 * none to the limit. */

typedef struct {
    double lb;                  /* a lower bound of the row's exact distance, as the float sum computes it */
    int64_t row;                /* its row handle (rows.h) */
    const uint8_t *block;       /* its block, and its place in it */
    float start_term;           /* its run's first term */
    float norm;                 /* its norm term (or with scales its scale; 0 without), read where its part is known */
    int i;
} ock_fs_cand;

/* The k best rows of one query (a heap by exact distance) and the rows waiting for their exact distance. */
typedef struct {
    ock_fs_heap heap;
    ock_fs_cand *cand;          /* (cap,) */
    int n, cap;                 /* cap >= 2 k */
    double *ub;                 /* (2 k,) upper bounds of rows seen, among them the k smallest so far */
    int n_ub;
    double limit;               /* a row whose lower bound exceeds it cannot enter */
    int heap_fresh;             /* 1: the heap holds only empty slots of bound +inf (nothing offered yet) */
    int by_bound;               /* 1: rows ranked by their lower bound alone, no exact stage (the candidates of a
                                 * re-ranked search: "Ranking by the bound" above) */
} ock_fs_collector;

/* The candidate buffer a collector of k results wants (>= 2 k): room for a few hundred rows beyond k, so that it is
 * rarely full. */
static inline int ock_fs_collector_cap(int k) { return 2 * k + 512; }

/* Start a collection into the heap arrays (k each), the candidate buffer (cap >= 2 k entries) and the bounds' buffer
 * (2 k doubles): empty slots (bound, -1), so that only rows below `bound` (+inf: any row) may enter. */
static inline void ock_fs_collector_init(ock_fs_collector *c, float *hd, int64_t *hr, int k, const int64_t **ids,
                                  ock_fs_cand *cand, int cap, double *ub, float bound) {
    c->heap.d = hd;
    c->heap.r = hr;
    c->heap.k = k;
    c->heap.ids = ids;
    ock_fs_heap_init(&c->heap, bound);
    c->cand = cand;
    c->n = 0;
    c->cap = cap;
    c->ub = ub;
    c->n_ub = 0;
    c->limit = (double)bound;
    c->by_bound = 0;
    c->heap_fresh = !(bound < INFINITY);
}

/* Reorder a[0..n-1] so that its k smallest values come first, in any order (0 < k < n); returns the largest of
 * them. Quickselect with a median-of-three pivot and Hoare partitioning. */
static inline double ock_fs_kth_smallest(double *a, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        double t;
        if (a[mid] < a[lo]) { t = a[mid]; a[mid] = a[lo]; a[lo] = t; }
        if (a[hi] < a[mid]) {
            t = a[hi]; a[hi] = a[mid]; a[mid] = t;
            if (a[mid] < a[lo]) { t = a[mid]; a[mid] = a[lo]; a[lo] = t; }
        }
        const double pivot = a[mid];
        int i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot) i++;
            while (a[j] > pivot) j--;
            if (i <= j) {
                t = a[i]; a[i] = a[j]; a[j] = t;
                i++;
                j--;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
    double kth = a[0];
    for (int j = 1; j < k; j++)
        if (a[j] > kth) kth = a[j];
    return kth;
}

/* The number of a[0..n-1] at most t: no branch on the data (the compiler vectorises it). */
static inline int ock_fs_count_at_most(const double *a, int n, double t) {
    int count = 0;
    for (int j = 0; j < n; j++) count += a[j] <= t;
    return count;
}

/* A value t that at least k of a[0..n-1] are at most (0 < k < n), and not many more: a[] is compacted to those
 * values (any order) and their number returned in *kept (k <= *kept <= 3 k / 2 - 1, so that a buffer of 2 k has room
 * again). Any such t is a valid limit (k rows are at most t); it need not be the k-th smallest. Found by bisection
 * of the values' range with branch-free counts, where a quickselect's data-dependent branches mispredict about once
 * per value (measured: 35% of an IVF fast scan at k = 50); values too tied to separate fall back to the exact
 * k-th smallest (ock_fs_kth_smallest). */
static inline double ock_fs_fuzzy_kth(double *a, int n, int k, int *kept) {
    const int enough = k + k / 2 - 1 > k ? k + k / 2 - 1 : k;
    double lo = a[0], hi = a[0];
    for (int j = 1; j < n; j++) {
        lo = a[j] < lo ? a[j] : lo;
        hi = a[j] > hi ? a[j] : hi;
    }
    int count = n;  /* of the values at most hi; always >= k */
    for (int step = 0; step < 48 && count > enough; step++) {
        const double mid = lo + 0.5 * (hi - lo);
        if (!(mid > lo && mid < hi)) break;  /* lo and hi adjacent: the values between cannot be split */
        const int c = ock_fs_count_at_most(a, n, mid);
        if (c >= k) {
            hi = mid;
            count = c;
        } else {
            lo = mid;
        }
    }
    if (count > enough) {  /* ties: the exact k-th smallest, the k smallest first */
        hi = ock_fs_kth_smallest(a, n, k);
        *kept = k;
        return hi;
    }
    int m = 0;
    for (int j = 0; j < n; j++) {
        a[m] = a[j];
        m += a[j] <= hi;
    }
    *kept = m;
    return hi;
}

/* Keep an upper bound: the buffer of bounds holds up to 2 k; when full, a limit that k of them are within
 * (ock_fs_fuzzy_kth) replaces the collector's when lower, and only the bounds within it stay. */
static inline void ock_fs_offer_ub(ock_fs_collector *c, double ub) {
    const int k = c->heap.k;
    c->ub[c->n_ub++] = ub;
    if (c->n_ub < 2 * k) return;
    const double kth = ock_fs_fuzzy_kth(c->ub, c->n_ub, k, &c->n_ub);
    if (kth < c->limit) c->limit = kth;
}

/* The exact ADC distances of up to four candidates at once: start + n + sum_w lut[w, word], each in this order (the
 * 8-bit scan's order), four independent sums so that each add need not wait for the previous one. */
OCK_FS_EXACT_FN
static inline void ock_fs_exact4(const ock_fs_base *b, const ock_fs_query *q, const ock_fs_cand *const *x, int m,
                          float *out) {
    const float *lut = q->lut;
    const ock_fs_cand *x0 = x[0], *x1 = x[m > 1 ? 1 : 0], *x2 = x[m > 2 ? 2 : 0], *x3 = x[m > 3 ? 3 : 0];
    float d0 = x0->start_term, d1 = x1->start_term, d2 = x2->start_term, d3 = x3->start_term;
    if (!b->scales && (b->norms_f32 != NULL || b->norm_codes != NULL)) {  /* no norm term: nothing added */
        d0 = d0 + x0->norm;
        d1 = d1 + x1->norm;
        d2 = d2 + x2->norm;
        d3 = d3 + x3->norm;
    }
    for (int w = 0; w < b->W; w++) {
        const float *l = lut + (size_t)w * OCK_FS_WORDS;
        d0 = d0 + l[ock_fs_word(x0->block, x0->i, w)];
        d1 = d1 + l[ock_fs_word(x1->block, x1->i, w)];
        d2 = d2 + l[ock_fs_word(x2->block, x2->i, w)];
        d3 = d3 + l[ock_fs_word(x3->block, x3->i, w)];
    }
    if (b->scales) {  /* cosine: the sum times the row's scale 1 / ||x_hat||, one float multiply as the 8-bit scan */
        d0 = d0 * x0->norm;
        d1 = d1 * x1->norm;
        d2 = d2 * x2->norm;
        d3 = d3 * x3->norm;
    }
    out[0] = d0;
    out[1] = d1;
    out[2] = d2;
    out[3] = d3;
}

static inline void ock_fs_cand_swap(ock_fs_cand *a, ock_fs_cand *b) {
    const ock_fs_cand t = *a;
    *a = *b;
    *b = t;
}

/* Reorder cand[0..n-1] so that the k with the smallest lower bounds come first, in any order (0 < k < n):
 * quickselect with a median-of-three pivot and Hoare partitioning. */
static inline void ock_fs_select_smallest(ock_fs_cand *cand, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (cand[mid].lb < cand[lo].lb) ock_fs_cand_swap(&cand[mid], &cand[lo]);
        if (cand[hi].lb < cand[mid].lb) {
            ock_fs_cand_swap(&cand[hi], &cand[mid]);
            if (cand[mid].lb < cand[lo].lb) ock_fs_cand_swap(&cand[mid], &cand[lo]);
        }
        const double pivot = cand[mid].lb;
        int i = lo, j = hi;
        while (i <= j) {
            while (cand[i].lb < pivot) i++;
            while (cand[j].lb > pivot) j--;
            if (i <= j) {
                ock_fs_cand_swap(&cand[i], &cand[j]);
                i++;
                j--;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

/* Offer cand[from..to-1] whose lower bound is within the heap's worst, four exact distances at a time. */
static inline void ock_fs_offer_range(ock_fs_collector *c, const ock_fs_base *b, const ock_fs_query *q, int from,
                                      int to) {
    const ock_fs_cand *batch[4];
    float d[4];
    int m = 0;
    for (int j = from; j <= to; j++) {
        if (j < to && c->cand[j].lb <= (double)c->heap.d[0]) batch[m++] = &c->cand[j];
        if (m == 4 || (j == to && m > 0)) {
            ock_fs_exact4(b, q, batch, m, d);
#ifdef OCK_FS_COUNT
            OCK_FS_COUNT += m;
#endif
            for (int x = 0; x < m; x++)
                if (d[x] <= c->heap.d[0]) ock_fs_heap_offer(&c->heap, d[x], batch[x]->row);
            m = 0;
        }
    }
}

/* The exact stage: offer the waiting rows still within the limit to the heap, the k with the smallest lower bounds
 * first, then every other one whose bound is within the heap's new worst; empty the buffer and lower the limit to
 * that worst. */
static inline void ock_fs_refine(ock_fs_collector *c, const ock_fs_base *b, const ock_fs_query *q) {
    const int k = c->heap.k;
    /* first the rows the limit has passed since they came (most of them: the limit falls as the scan goes), without
     * a branch on each: the selection below then sorts a few k rows, not the whole buffer (IVF fast scan, sift 1M,
     * n_probe 8, k 50: 21.8 -> 19.7 us per query) */
    int kept = 0;
    for (int j = 0; j < c->n; j++) {
        c->cand[kept] = c->cand[j];
        kept += c->cand[j].lb <= c->limit;
    }
    c->n = kept;
    if (c->by_bound) {  /* the bound is the row's value: every row still within the limit is offered */
        int j = 0;
        if (c->heap_fresh && c->n >= k) {  /* a heap of empty slots (+inf): its first k entries built at once */
            for (; j < k; j++) {
                c->heap.d[j] = (float)c->cand[j].lb;
                c->heap.r[j] = c->cand[j].row;
            }
            ock_fs_heapify(c->heap.d, c->heap.r, k, c->heap.ids);
        }
        if (c->n > 0) c->heap_fresh = 0;
        for (; j < c->n; j++) ock_fs_heap_offer(&c->heap, (float)c->cand[j].lb, c->cand[j].row);
        c->n = 0;
        if ((double)c->heap.d[0] < c->limit) c->limit = (double)c->heap.d[0];
        return;
    }
    if (c->n > k) ock_fs_select_smallest(c->cand, c->n, k);
    const int first = c->n < k ? c->n : k;
    ock_fs_offer_range(c, b, q, 0, first);
    ock_fs_offer_range(c, b, q, first, c->n);
    c->n = 0;
    if ((double)c->heap.d[0] < c->limit) c->limit = (double)c->heap.d[0];
}

/* A full buffer: drop the rows the limit has passed since they came; refine when that frees less than half. */
static inline void ock_fs_make_room(ock_fs_collector *c, const ock_fs_base *b, const ock_fs_query *q) {
    int kept = 0;
    for (int j = 0; j < c->n; j++)
        if (c->cand[j].lb <= c->limit) c->cand[kept++] = c->cand[j];
    c->n = kept;
    if (2 * c->n > c->cap) ock_fs_refine(c, b, q);
}

/* Whether row i of a block holds only words that can occur (finite table entries): only then is its upper bound
 * one (a row of a damaged file holding a word >= K has an infinite exact distance). */
static inline int ock_fs_row_possible(const ock_fs_base *b, const ock_fs_query *q, const uint8_t *block, int i) {
    for (int w = 0; w < b->W; w++)
        if (!isfinite(q->lut[(size_t)w * OCK_FS_WORDS + ock_fs_word(block, i, w)])) return 0;
    return 1;
}

/* --------------------------------------------------------------------------------------------------------------------
 * A limit before a long scan, from a sample of its blocks.
 *
 * A collector starts with an infinite limit: the first 2 k rows all become candidates, and while the limit falls as
 * the k-th smallest upper bound of the rows seen so far (the bound of rank ~k N / t after t of N rows), about
 * k ln(N / k) rows pass it, each costing an upper bound kept, a candidate stored and a share of the selections. A
 * first look at s spread blocks (32 s rows: their sums only, no candidate) gives at once the k-th smallest upper
 * bound among them, of rank ~k N / (32 s): then about k (1 + ln(N / (32 s))) rows pass (a third fewer at s = k, for
 * a pass over 1 / 8 of the blocks at most and usually ~1 / 60). The rows of the sample are scanned again later as
 * any row: the limit is only a value that k distinct rows are known to be within, which is all a limit must be.
 *
 * Only where a row's upper bound is the same increasing function of its quantized sum for every row (no float32
 * norm, no scales, no word that cannot occur): the k-th smallest bound is then that of the k-th smallest sum,
 * found by counting sums (two histograms of 256 bins, no comparison sort). */

/* Whether a sample can bound a query's scan (every row's upper bound the same function of its sum). */
static inline int ock_fs_sample_applies(const ock_fs_base *b, const ock_fs_query *q) {
    return b->norms_f32 == NULL && !b->scales && !q->t->impossible;
}

/* Blocks of the sample before a scan of nb blocks for k results (0: none; a run too short to gain from one). */
static inline size_t ock_fs_sample_blocks(const ock_fs_base *b, const ock_fs_query *q, int k, size_t nb) {
    if (!ock_fs_sample_applies(b, q) || k < 1) return 0;
    const size_t s = (size_t)k;
    return 8 * s <= nb ? s : 0;
}

/* Block j of a sample of s blocks among nb (distinct, spread evenly: s <= nb). */
static inline size_t ock_fs_sample_block(size_t j, size_t s, size_t nb) { return j * nb / s; }

/* Lower the collector's limit to the k-th smallest upper bound among the live rows of the sample: sums holds the
 * s blocks' sums (row order, 32 per block: ock_fs_block_sums of block ock_fs_sample_block(j, s, nb) of the run). */
static inline void ock_fs_sample_limit(ock_fs_collector *c, const ock_fs_base *b, const ock_fs_query *q,
                                       const ock_fs_run *run, const uint16_t *sums, size_t s, size_t nb) {
    const int k = c->heap.k;
    unsigned sh = 0;
    while ((q->t->max_sum >> sh) >= 256) sh++;
    uint32_t coarse[256], fine[256];
    memset(coarse, 0, sizeof(coarse));
    size_t total = 0;
    for (size_t j = 0; j < s; j++) {
        const uint32_t live = ock_fs_live_bits(b, run, ock_fs_sample_block(j, s, nb));
        const uint16_t *x = sums + 32 * j;
        for (int i = 0; i < 32; i++) coarse[x[i] >> sh] += (live >> i) & 1u;
        total += (size_t)__builtin_popcount(live);
    }
    if (total < (size_t)k) return;
    unsigned bin = 0;
    size_t below = 0;
    while (below + coarse[bin] < (size_t)k) below += coarse[bin++];
    memset(fine, 0, sizeof(fine));
    const unsigned mask = (1u << sh) - 1u;
    for (size_t j = 0; j < s; j++) {
        const uint32_t live = ock_fs_live_bits(b, run, ock_fs_sample_block(j, s, nb));
        const uint16_t *x = sums + 32 * j;
        for (int i = 0; i < 32; i++) fine[x[i] & mask] += ((live >> i) & 1u) & (uint32_t)((unsigned)(x[i] >> sh) == bin);
    }
    unsigned low = 0;
    while (below + fine[low] < (size_t)k) below += fine[low++];
    const unsigned kth = (bin << sh) | low;
    /* the upper bound of a row of sum kth, computed as ock_fs_collect_block computes it */
    const double base = run->c0 + q->t->scale * (double)kth;
    const double ub = c->by_bound ? base : base + q->t->slack + run->rho;
    if (ub < c->limit) c->limit = ub;
}

/* --------------------------------------------------------------------------------------------------------------------
 * Thresholds of a run: which quantized sums may hold a row below the collector's limit. */

/* Float32 norms are not in S: a row's bound is c0 + scale * S + n - rho - gamma |n|, where gamma |n| is the norm
 * term's share of the exact sum's rounding (ock_fs_rounding covers the other terms). */
static inline double ock_fs_norm_gamma(int W) {
    const double u = 5.9604644775390625e-08, n = (double)W + 3.0;
    return 2.0 * n * u / (1.0 - n * u);
}

/* With scales (b->scales), a row enters when fl(sum * s) <= limit; its sum's bound lb (as for any row) gives
 * fl(sum * s) >= lb * s - 2u |lb * s| (ock_fs_scaled_bounds). This is the limit on lb itself above which no scale in
 * [scale_lo, scale_hi] can bring a row within `limit` (margins of 4u absorb the rounding of this arithmetic); without
 * scales, `limit` itself. */
static inline double ock_fs_unscaled_limit(const ock_fs_base *b, double limit) {
    const double u = 5.9604644775390625e-08;
    if (!b->scales || !(limit < INFINITY) || !(limit > -INFINITY)) return limit;
    if (limit >= 0.0) return limit * (1.0 + 4.0 * u) / b->scale_lo;
    return limit * (1.0 - 4.0 * u) / b->scale_hi;
}

/* The bounds of fl(sum * s) from the bounds lb <= fl(sum) <= ub: the product of reals, then one float rounding. */
static inline void ock_fs_scaled_bounds(double s, double *lb, double *ub) {
    const double u = 5.9604644775390625e-08;
    const double l = *lb * s, h = *ub * s;
    *lb = l - 2.0 * u * fabs(l);
    *ub = h + 2.0 * u * fabs(h);
}

typedef struct {
    int thr;                    /* rows with S > thr cannot enter (-1: no row of the run can); MAX_SUM for f32 norms */
    int f32;                    /* float32 norms: the SIMD test is fl(fl(fscale * S) + n) - fl(fkappa * |n|) <= fthr */
    double gamma;
    float fscale, fkappa, fthr;
} ock_fs_limits;

/* The thresholds of a run for the collector's current limit. The float test rounds under u per operation of
 * values up to scale * 65535 + |n|: the absolute part of that goes into fthr, the part in |n| into fkappa, each with
 * room to spare (x8, rounded up). A SIMD test may thus keep a few more rows than the exact bound would (which the
 * candidate's own bound, computed in double, then drops): never fewer. */
static inline void ock_fs_limits_set(ock_fs_limits *L, const ock_fs_base *b, const ock_fs_query *q,
                                     const ock_fs_run *run, double limit) {
    const double u = 5.9604644775390625e-08;
    memset(L, 0, sizeof(*L));
    L->f32 = b->norms_f32 != NULL && !b->scales;
    if (!L->f32) {
        L->thr = ock_fs_threshold(ock_fs_unscaled_limit(b, limit), run->c0, run->rho, q->t->scale);
        return;
    }
    L->thr = OCK_FS_MAX_SUM;
    L->gamma = ock_fs_norm_gamma(q->t->W);
    L->fscale = (float)q->t->scale;
    float kappa = (float)(L->gamma + 8.0 * u);
    if ((double)kappa < L->gamma + 8.0 * u) kappa = nextafterf(kappa, INFINITY);
    L->fkappa = kappa;
    if (!(limit < INFINITY)) {
        L->fthr = INFINITY;
        return;
    }
    const double R = limit - run->c0 + run->rho + 8.0 * u * q->t->scale * OCK_FS_MAX_SUM;
    float Rf = (float)R;
    if ((double)Rf < R) Rf = nextafterf(Rf, INFINITY);
    L->fthr = Rf;
}

/* Append the rows of `mask` (bit i: row i of the block, quantized sum sums[i]) whose bound is within the limit;
 * make room when the buffer fills. Returns 1 when the limit changed (the caller recomputes its thresholds). */
OCK_FS_INLINE static inline int ock_fs_collect_block(ock_fs_collector *c, const ock_fs_base *b, const ock_fs_query *q,
                                       const ock_fs_run *run, const uint8_t *block, size_t r0, uint32_t mask,
                                       const uint16_t *sums, const ock_fs_limits *L) {
    const double limit = c->limit;
    const double scale = q->t->scale;
    while (mask != 0) {
        const int i = __builtin_ctz(mask);
        mask &= mask - 1;
        const size_t row = r0 + (size_t)i;
        const double base = run->c0 + scale * (double)sums[i];
        double lb, ub;
        if (c->by_bound) {  /* the row's value is its bound (with its norm term, or times its scale) */
            lb = base;
            if (L->f32) lb += (double)b->norms_f32[row];
            else if (b->scales) lb *= (double)ock_fs_norm_term(b, row);
            lb = (double)(float)lb;  /* the heap's float: every comparison then sees the value the heap holds */
            ub = lb;
        } else {
            lb = base - run->rho;
            ub = base + q->t->slack + run->rho;
            if (L->f32) {
                const double n = (double)b->norms_f32[row];
                lb += n - L->gamma * fabs(n);
                ub += n + L->gamma * fabs(n);
            } else if (b->scales) {
                ock_fs_scaled_bounds((double)ock_fs_norm_term(b, row), &lb, &ub);
            }
        }
        if (!(lb <= c->limit)) continue;
        if (!q->t->impossible || ock_fs_row_possible(b, q, block, i)) ock_fs_offer_ub(c, ub);
        if (!(lb <= c->limit)) continue;
#ifdef OCK_FS_COUNT_APPENDS
        OCK_FS_COUNT_APPENDS++;
#endif
        ock_fs_cand *x = &c->cand[c->n++];
        x->lb = lb;
        x->row = (int64_t)row | run->tag;
        x->block = block;
        x->start_term = run->start_term;
        x->norm = ock_fs_norm_term(b, row);
        x->i = i;
        if (c->n == c->cap) ock_fs_make_room(c, b, q);
    }
    return c->limit != limit;
}

/* --------------------------------------------------------------------------------------------------------------------
 * Portable version: the oracle. */

/* S of the 32 rows of a block (norm term included when t->has_norm: norm_bytes holds the rows' 32 norm codes). */
static inline void ock_fs_block_sums_portable(const uint8_t *block, const uint8_t *qlut, const ock_fs_tables *t,
                                       const uint8_t *norm_bytes, uint16_t *out) {
    for (int i = 0; i < OCK_FS_BLOCK; i++) {
        unsigned s = 0;
        for (int w = 0; w < t->cols; w++) s += qlut[(size_t)w * OCK_FS_WORDS + ock_fs_word(block, i, w)];
        if (t->has_norm) s += (unsigned)t->norm_lo[norm_bytes[i] & 15] + (unsigned)t->norm_hi[norm_bytes[i] >> 4];
        out[i] = (uint16_t)s;
    }
}

/* The rows of a block that may be within the limit: S <= thr, or the float test of float32 norms (in double). */
static inline uint32_t ock_fs_mask_portable(const uint16_t *sums, const float *norms, const ock_fs_run *run,
                                            const ock_fs_limits *L, double scale, double limit) {
    uint32_t m = 0;
    if (!L->f32) {
        for (int i = 0; i < OCK_FS_BLOCK; i++) m |= (uint32_t)(sums[i] <= (unsigned)L->thr) << i;
        return m;
    }
    if (!(limit < INFINITY)) return 0xffffffffu;
    for (int i = 0; i < OCK_FS_BLOCK; i++) {
        const double n = (double)norms[i];
        m |= (uint32_t)(run->c0 + scale * (double)sums[i] + n - run->rho - L->gamma * fabs(n) <= limit) << i;
    }
    return m;
}

/* Scan one run for one query into its collector. */
static inline void ock_fs_scan_run_portable(const ock_fs_base *b, const ock_fs_query *q, const ock_fs_run *run,
                                     ock_fs_collector *c) {
    const size_t bytes = ock_fs_block_bytes(b->W);
    const size_t nb = ock_fs_blocks(run->n_rows);
    ock_fs_limits L;
    ock_fs_limits_set(&L, b, q, run, c->limit);
    uint16_t sums[OCK_FS_BLOCK];
    uint8_t spare[32];
    float fspare[32];
    for (size_t bi = 0; bi < nb && L.thr >= 0; bi++) {
        const uint32_t live = ock_fs_live_bits(b, run, bi);
        if (live == 0) continue;
        const uint8_t *block = run->blocks + bi * bytes;
        const size_t r0 = run->row0 + bi * OCK_FS_BLOCK;
        ock_fs_block_sums_portable(block, q->qlut, q->t, q->t->has_norm ? ock_fs_norm_bytes(b, r0, spare) : NULL,
                                   sums);
        const uint32_t mask = live & ock_fs_mask_portable(sums, L.f32 ? ock_fs_norm_floats(b, r0, fspare) : NULL,
                                                          run, &L, q->t->scale, c->limit);
        if (mask && ock_fs_collect_block(c, b, q, run, block, r0, mask, sums, &L))
            ock_fs_limits_set(&L, b, q, run, c->limit);
    }
}

#endif
