/* Fast scan: codes of words below 16 (four bits each) scanned with 16-entry tables held in SIMD registers
 * (docs/ARCHITECTURE.md, "Fast scan"; the block layout is docs/FORMAT.md's).
 *
 * An exhaustive ADC scan of one-byte words costs a table load from memory per word (~2-3 ns per 64-bit code). With
 * at most 16 words per codebook a table fits in one 16-byte register, and one byte shuffle (vpshufb) looks up 16 (per
 * 128-bit lane) words at once: 32 rows per AVX2 instruction, 64 rows of two codebooks per AVX-512 one. That needs
 * three things (numbered below, in the list of the headers that hold them):
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
 * The parts, each in a header named by what it holds (this one includes them in this order; each trusts its
 * arguments -- the Python layers validate --, never allocates and never touches Python objects):
 *
 *   fastscan_layout.h     1. the blocks: their sizes, word access, packing and unpacking
 *   fastscan_tables.h     2. a query's quantized tables, the norm codes' nibble tables, the bounds' rounding
 *   fastscan_run.h        what a scan reads: the rows (norms, filter, ids), the query, a run of blocks
 *   fastscan_collector.h  3. the k best rows, the candidates and the exact stage; ranking by the bound
 *   fastscan_sample.h     a limit before a long scan, from a sample of its blocks
 *   fastscan_scan.h       what every level's scan of a run shares: its thresholds, and the candidates of a block
 *   fastscan_simd.h       the block sums and the scan of a run at each SIMD level: the portable scan (the oracle)
 *                         and the AVX2 one, which the AVX-512 level runs too. A level body (simd.h: not included
 *                         here, but once per level by simd_level.h), reached through the kernels' dispatch table:
 *                         every level computes the same uint16 sums, hence the same results.
 */
#ifndef OCKSTORE_FASTSCAN_H
#define OCKSTORE_FASTSCAN_H

#include "fastscan_layout.h"
#include "fastscan_tables.h"
#include "fastscan_run.h"
#include "fastscan_collector.h"
#include "fastscan_sample.h"
#include "fastscan_scan.h"

#endif
