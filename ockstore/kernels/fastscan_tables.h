/* A query's tables quantized to bytes for the fast scan (fastscan.h, 2., and "The norm term"): the nibble tables
 * that bound the one-byte norm codes' levels, ock_fs_quantize (the bias and the one scale that keep every entry in a
 * byte and every sum in uint16), and what turns a quantized sum into bounds of the exact distance: the float
 * rounding allowance rho and the largest sum a row may have and still enter.
 */
#ifndef OCKSTORE_FASTSCAN_TABLES_H
#define OCKSTORE_FASTSCAN_TABLES_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fastscan_layout.h"

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

#endif
