/* The fast scan's collector (fastscan.h, 3., and "Ranking by the bound"): one query's k best rows, in a heap ordered
 * by (distance, id), and the rows waiting for their exact distance. It keeps the limit a row's lower bound must not
 * exceed (from the upper bounds of the rows seen, or the heap's worst), and refines its candidates in batches: the
 * exact stage that makes the results those of the 8-bit scan. Every SIMD level's scan feeds it the same candidates
 * (fastscan_scan.h); the Cython layer refines and sorts its heap at the end of a query.
 */
#ifndef OCKSTORE_FASTSCAN_COLLECTOR_H
#define OCKSTORE_FASTSCAN_COLLECTOR_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rows.h"
#include "fastscan_layout.h"
#include "fastscan_run.h"

#if defined(__GNUC__) && !defined(__clang__)
/* The exact stage adds floats in a fixed order; nothing may be contracted or reassociated. */
#define OCK_FS_EXACT_FN __attribute__((optimize("fp-contract=off", "no-fast-math")))
#else
#define OCK_FS_EXACT_FN
#endif

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

#endif
