/* The top-k collector of the scans (docs/ARCHITECTURE.md, "Search"): the k best (distance, row) pairs of one query,
 * ordered by (distance, id, row) -- a smaller id wins a tie, the id of a row handle found by ock_row_id (rows.h:
 * the handle itself when ids is NULL), and among equal ids (an index may hold an id twice) the smaller row.
 *
 * A heap pays a sift of log2(k) unpredictable comparisons for every candidate that enters it, and a scan that keeps
 * many candidates (k = 1,000 for re-ranking) lets thousands enter. The collector instead appends every candidate not
 * worse than its threshold (one predictable comparison and two stores, or none for a deep collector:
 * ock_topk_offer4) into a buffer of `cap` > k slots; when the buffer is full it keeps the candidates of the histogram
 * bucket of the k-th best and better (ock_topk_make_room: a superset of the k best, one histogram of the distances'
 * leading bits) and lowers the threshold to that bucket's edge. The last compaction (ock_topk_finish) is exact: the
 * k-th best is found by a radix selection over the distances' bit patterns (passes of histograms, no data-dependent
 * branch), where a quickselect of (distance, id) pairs mispredicts about every other comparison; the final order is a
 * radix sort. The result is exactly the k best pairs whatever the order the
 * candidates came in: a query gets the same candidates alone or in a batch, on any thread.
 *
 * Distances are finite or +inf (a corrupt code's), never NaN; +inf never enters (the threshold starts at most at the
 * largest float). A collector holds no memory of its own: the caller gives its buffers (one collector per thread).
 */
#ifndef OCKSTORE_TOPK_H
#define OCKSTORE_TOPK_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "rows.h"

/* Candidates a collector buffers beyond k (at least; k more for k above it): each compaction, linear in the buffer,
 * then frees room for at least this many candidates. */
#define OCK_TOPK_SLACK 256

typedef struct {
    float *d;                   /* (cap,) distances of the candidates held */
    int64_t *r;                 /* (cap,) their rows */
    int64_t *scratch;           /* (2 * cap,) the compaction's keys and ties, the final sort's second buffer */
    int k;
    int cap;                    /* > k */
    int n;                      /* candidates held */
    float threshold;            /* a candidate enters when its distance is <= threshold */
    const int64_t **ids;        /* row handle -> id (rows.h; NULL: the handle), for ties */
} ock_topk;

/* The buffer size of a collector of k. */
static inline int ock_topk_capacity(int k) { return k + (k > OCK_TOPK_SLACK ? k : OCK_TOPK_SLACK); }

/* d, r: ock_topk_capacity(k) items each, scratch twice that. Only distances <= bound enter (FLT_MAX: every finite
 * one; a caller that wants "below b" passes the float just below b). */
static inline void ock_topk_init(ock_topk *t, float *d, int64_t *r, int64_t *scratch, int k, const int64_t **ids,
                                 float bound) {
    t->d = d;
    t->r = r;
    t->scratch = scratch;
    t->k = k;
    t->cap = ock_topk_capacity(k);
    t->n = 0;
    t->threshold = bound;
    t->ids = ids;
}

static void ock_topk_make_room(ock_topk *t);

/* Offer a candidate. It is written to the next free slot in every case and counted only when it enters: no branch
 * on the comparison, whose outcome is unpredictable while the buffer fills (about half of the candidates enter). */
static inline void ock_topk_offer(ock_topk *t, float d, int64_t row) {
    t->d[t->n] = d;
    t->r[t->n] = row;
    t->n += d <= t->threshold;
    if (t->n == t->cap) ock_topk_make_room(t);
}

/* Offer four candidates (rows row .. row + 3), without a branch on their distances: each is written to the next free
 * slot and counted only when it enters. The scans of a deep collector (k candidates for re-ranking) use it, where a
 * test per candidate mispredicts for every one that enters (thousands per query at k = 1,000: 40% of the scan's
 * time went to them); for a small k few enter and the scans' inline test is cheaper. Room for four is made first, so
 * it mixes with ock_topk_push and ock_topk_offer (all three leave fewer than cap held). */
static inline void ock_topk_offer4(ock_topk *t, float d0, float d1, float d2, float d3, int64_t row) {
    if (t->n > t->cap - 4) ock_topk_make_room(t);
    float *d = t->d;
    int64_t *r = t->r;
    const float threshold = t->threshold;
    int n = t->n;
    d[n] = d0;
    r[n] = row;
    n += d0 <= threshold;
    d[n] = d1;
    r[n] = row + 1;
    n += d1 <= threshold;
    d[n] = d2;
    r[n] = row + 2;
    n += d2 <= threshold;
    d[n] = d3;
    r[n] = row + 3;
    n += d3 <= threshold;
    t->n = n;
    if (n == t->cap) ock_topk_make_room(t);  /* never left full: ock_topk_push writes before it tests */
}

/* Add a candidate the caller found not worse than the threshold (the scans test it inline, with their filter). */
static inline void ock_topk_push(ock_topk *t, float d, int64_t row) {
    t->d[t->n] = d;
    t->r[t->n] = row;
    if (++t->n == t->cap) ock_topk_make_room(t);
}

static inline int64_t ock_topk_id(const ock_topk *t, int64_t row) { return ock_row_id(t->ids, row); }

/* A float's bit pattern mapped so that unsigned order is the order of the values; -0 is first made +0 (they are
 * equal distances, ranked by id like any other tie). */
static inline uint32_t ock_topk_key(float d) {
    uint32_t b;
    d = d + 0.0f;
    memcpy(&b, &d, 4);
    return b ^ ((uint32_t)((int32_t)b >> 31) | 0x80000000u);
}

/* Buckets of a selection pass at most: a histogram of 2048 counts (8 KiB) stays in L1. */
#define OCK_TOPK_MAX_BITS 11

static inline int ock_topk_bit_length(uint32_t v) { int n = 0; while (v) { n++; v >>= 1; } return n; }

/* One histogram pass of the selection: over the bits in which keys[0..n-1] (their range lo..hi) differ,
 * about n / 4 buckets; returns the bucket holding the k-th smallest key (as key >> *shift), with *below the keys in
 * the buckets before it and *in_bucket the keys in it. hist: 1 << OCK_TOPK_MAX_BITS counts of scratch. */
static inline uint32_t ock_topk_bucket_of_kth(const uint32_t *keys, int n, int k, uint32_t lo, uint32_t hi,
                                              uint32_t *hist, int *shift, uint32_t *below, uint32_t *in_bucket) {
    int bits = ock_topk_bit_length((uint32_t)n) - 2;  /* about n / 4 buckets: a few keys each */
    bits = bits < 4 ? 4 : bits > OCK_TOPK_MAX_BITS ? OCK_TOPK_MAX_BITS : bits;
    const int span = ock_topk_bit_length(lo ^ hi);
    const int s = span > bits ? span - bits : 0;
    const uint32_t first = lo >> s, n_buckets = (hi >> s) - first + 1;
    memset(hist, 0, n_buckets * sizeof(uint32_t));
    for (int i = 0; i < n; i++) hist[(keys[i] >> s) - first]++;
    uint32_t bucket = 0, before = 0;
    while (before + hist[bucket] < (uint32_t)k) before += hist[bucket++];
    *shift = s;
    *below = before;
    *in_bucket = hist[bucket];
    return first + bucket;
}

/* The k-th smallest (1-based) of keys[0..n-1], 1 <= k <= n; keys is reordered (it is scratch). Each pass is a
 * histogram over the bits in which the remaining keys differ (their range, not the whole 32 bits: distances of one
 * query share their sign and most of their exponent), then the keys of the bucket holding the k-th are gathered
 * and the next pass refines among them. Two passes usually suffice; every pass is linear and its histogram small. */
static uint32_t ock_topk_select_key(uint32_t *keys, int n, int k) {
    uint32_t hist[1 << OCK_TOPK_MAX_BITS];
    uint32_t lo = keys[0], hi = keys[0];
    for (int i = 1; i < n; i++) {
        lo = keys[i] < lo ? keys[i] : lo;
        hi = keys[i] > hi ? keys[i] : hi;
    }
    for (;;) {
        if (lo == hi) return lo;
        int shift;
        uint32_t below, in_bucket;
        const uint32_t wanted = ock_topk_bucket_of_kth(keys, n, k, lo, hi, hist, &shift, &below, &in_bucket);
        if (shift == 0) return wanted;
        /* the keys of that bucket to the front, with their range */
        int m = 0;
        lo = 0xffffffffu;
        hi = 0;
        for (int i = 0; i < n; i++) {
            const uint32_t key = keys[i];
            if ((key >> shift) == wanted) {
                keys[m++] = key;
                lo = key < lo ? key : lo;
                hi = key > hi ? key : hi;
            }
        }
        n = m;
        k -= (int)below;
    }
}

/* (id, row) of a > of b. */
static inline int ock_topk_after(const ock_topk *t, int64_t row_a, int64_t row_b) {
    const int64_t ia = ock_topk_id(t, row_a), ib = ock_topk_id(t, row_b);
    return ia > ib || (ia == ib && row_a > row_b);
}

/* Move rows[at] down the max-heap rows[0..end-1] (ordered by (id, row)). */
static void ock_topk_sift(const ock_topk *t, int64_t *rows, int at, int end) {
    const int64_t r = rows[at];
    for (;;) {
        int child = 2 * at + 1;
        if (child >= end) break;
        if (child + 1 < end && ock_topk_after(t, rows[child + 1], rows[child])) child++;
        if (!ock_topk_after(t, rows[child], r)) break;
        rows[at] = rows[child];
        at = child;
    }
    rows[at] = r;
}

/* Sort rows[0..n-1] by (id, row): insertion sort for a few (ties are rare), heapsort beyond (no quadratic case). */
static void ock_topk_sort_rows(const ock_topk *t, int64_t *rows, int n) {
    if (n <= 16) {
        for (int i = 1; i < n; i++) {
            const int64_t r = rows[i];
            int j = i - 1;
            while (j >= 0 && ock_topk_after(t, rows[j], r)) {
                rows[j + 1] = rows[j];
                j--;
            }
            rows[j + 1] = r;
        }
        return;
    }
    for (int start = n / 2 - 1; start >= 0; start--) ock_topk_sift(t, rows, start, n);
    for (int end = n - 1; end > 0; end--) {
        const int64_t top = rows[0];
        rows[0] = rows[end];
        rows[end] = top;
        ock_topk_sift(t, rows, 0, end);
    }
}

/* Keep the k best of the n > k candidates held, in positions 0..k-1 (in the order they came), and set the threshold
 * to the k-th best distance. Of the candidates at exactly that distance, those of the smallest (id, row) are kept. */
static void ock_topk_compact(ock_topk *t) {
    const int n = t->n, k = t->k;
    uint32_t *keys = (uint32_t *)t->scratch;
    for (int i = 0; i < n; i++) keys[i] = ock_topk_key(t->d[i]);
    const uint32_t kth = ock_topk_select_key(keys, n, k);
    /* every candidate not worse than the k-th to the front, without a branch (half of them go, unpredictably);
     * writes never pass the read position */
    int kept = 0, less = 0;
    for (int i = 0; i < n; i++) {
        const uint32_t key = ock_topk_key(t->d[i]);
        t->d[kept] = t->d[i];
        t->r[kept] = t->r[i];
        kept += key <= kth;
        less += key < kth;
    }
    if (kept > k) {
        /* more candidates at the k-th distance than places: keep the k - less smallest (id, row) of them */
        int64_t *tied = t->scratch;  /* the keys are no longer needed */
        int n_tied = 0;
        for (int i = 0; i < kept; i++)
            if (ock_topk_key(t->d[i]) == kth) tied[n_tied++] = t->r[i];
        ock_topk_sort_rows(t, tied, n_tied);
        const int64_t last_row = tied[k - less - 1];  /* the last tied candidate kept */
        int out = 0;
        for (int i = 0; i < kept; i++) {
            if (ock_topk_key(t->d[i]) == kth && ock_topk_after(t, t->r[i], last_row)) continue;
            t->d[out] = t->d[i];
            t->r[out] = t->r[i];
            out++;
        }
        kept = out;
    }
    t->n = kept;
    {
        float worst;
        uint32_t b = kth ^ ((kth & 0x80000000u) ? 0x80000000u : 0xffffffffu);
        memcpy(&worst, &b, 4);
        t->threshold = worst;
    }
}

/* The float whose key (ock_topk_key) is `key`. */
static inline float ock_topk_value_of_key(uint32_t key) {
    float value;
    const uint32_t b = key ^ ((key & 0x80000000u) ? 0x80000000u : 0xffffffffu);
    memcpy(&value, &b, 4);
    return value;
}

/* Make room while candidates come (the buffer is full or nearly): keep every candidate whose key is at most the upper
 * edge of the histogram bucket that holds the k-th smallest key -- at least k candidates, ties and all, so the k best
 * are among them -- and lower the threshold to that edge. One histogram of the keys' leading bits (as the first pass
 * of ock_topk_select_key) and one pass that moves the kept ones: the exact selection, its further passes and its
 * ordering of ties by id are left to ock_topk_finish, which compacts the last buffer exactly. Only what is kept
 * changes (a superset of the k best at every step), so the results do not. A bucket crowded with equal or close
 * distances, which would keep more than half of the free places, falls back to the exact compaction. */
static void ock_topk_make_room(ock_topk *t) {
    uint32_t hist[1 << OCK_TOPK_MAX_BITS];
    const int n = t->n, k = t->k;
    uint32_t *keys = (uint32_t *)t->scratch;
    uint32_t lo = 0xffffffffu, hi = 0;
    for (int i = 0; i < n; i++) {
        const uint32_t key = ock_topk_key(t->d[i]);
        keys[i] = key;
        lo = key < lo ? key : lo;
        hi = key > hi ? key : hi;
    }
    int shift;
    uint32_t below, in_bucket;
    const uint32_t wanted = ock_topk_bucket_of_kth(keys, n, k, lo, hi, hist, &shift, &below, &in_bucket);
    if (below + in_bucket > (uint32_t)(k + (t->cap - k) / 2)) {
        ock_topk_compact(t);
        return;
    }
    uint32_t edge = (wanted << shift) | ((1u << shift) - 1u);
    edge = edge < hi ? edge : hi;
    int kept = 0;
    for (int i = 0; i < n; i++) {  /* without a branch, writes never passing the read position */
        t->d[kept] = t->d[i];
        t->r[kept] = t->r[i];
        kept += keys[i] <= edge;
    }
    t->n = kept;
    t->threshold = ock_topk_value_of_key(edge);
}

/* Write the k best to out_d / out_r (k each; not the collector's own buffers), then padding (+inf, -1) when fewer
 * came; the collector is consumed.
 * sorted: in ascending (distance, id, row) order (an LSD radix sort of the distances' keys, stable, then runs of
 * equal distances ordered by (id, row)); otherwise in an order that depends only on the candidates offered and the
 * order they came in (what re-ranking needs: the set). */
static void ock_topk_finish(ock_topk *t, float *out_d, int64_t *out_r, int sorted) {
    if (t->n > t->k) ock_topk_compact(t);
    const int n = t->n;
    if (!sorted || n <= 1) {
        memcpy(out_d, t->d, (size_t)n * sizeof(float));
        memcpy(out_r, t->r, (size_t)n * sizeof(int64_t));
    } else {
        /* sort (key, row) pairs: key in the high 32 bits of a uint64 and the position in the low 32 bits, four
         * passes of 8 bits over the key part, between scratch and a second buffer of the same size */
        uint64_t *a = (uint64_t *)t->scratch, *b = a + t->cap;
        for (int i = 0; i < n; i++) a[i] = ((uint64_t)ock_topk_key(t->d[i]) << 32) | (uint32_t)i;
        for (int s = 32; s < 64; s += 8) {
            uint32_t count[256] = {0};
            for (int i = 0; i < n; i++) count[(a[i] >> s) & 255]++;
            uint32_t sum = 0;
            for (int j = 0; j < 256; j++) {
                const uint32_t c = count[j];
                count[j] = sum;
                sum += c;
            }
            for (int i = 0; i < n; i++) b[count[(a[i] >> s) & 255]++] = a[i];
            uint64_t *swap = a;
            a = b;
            b = swap;
        }
        for (int i = 0; i < n; i++) {
            const uint32_t at = (uint32_t)a[i];
            out_d[i] = t->d[at];
            out_r[i] = t->r[at];
        }
        /* runs of equal distances: by (id, row) */
        for (int i = 0; i < n;) {
            int j = i + 1;
            while (j < n && (a[j] >> 32) == (a[i] >> 32)) j++;
            if (j - i > 1) ock_topk_sort_rows(t, out_r + i, j - i);
            i = j;
        }
    }
    for (int j = n; j < t->k; j++) {
        out_d[j] = INFINITY;
        out_r[j] = -1;
    }
    t->n = 0;
}

#endif
