/* What the scan of a run shares at every SIMD level (fastscan_simd.h holds each level's loop): the thresholds of a
 * run for the collector's current limit (which quantized sums, or with float32 norms which float tests, may hold a
 * row within it), and the candidates of a block (ock_fs_collect_block: each passing row's bounds computed in double,
 * its upper bound offered to the limit, the row appended to the collector's buffer).
 */
#ifndef OCKSTORE_FASTSCAN_SCAN_H
#define OCKSTORE_FASTSCAN_SCAN_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fastscan_layout.h"
#include "fastscan_tables.h"
#include "fastscan_run.h"
#include "fastscan_collector.h"

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

/* --------------------------------------------------------------------------------------------------------------------
 * The candidates of a block. */

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

#endif
