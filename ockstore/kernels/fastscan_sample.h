/* A limit before a long fast scan, from the quantized sums of a sample of its blocks. The Cython layer sums the
 * sample's blocks through the kernels' table (ock_fs_block_sums) and lowers each query's limit with these before
 * the scan of a flat index's rows.
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
 * found by counting sums (two histograms of 256 bins, no comparison sort).
 */
#ifndef OCKSTORE_FASTSCAN_SAMPLE_H
#define OCKSTORE_FASTSCAN_SAMPLE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fastscan_run.h"
#include "fastscan_collector.h"

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

#endif
