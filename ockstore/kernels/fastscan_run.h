/* What a fast scan reads: the rows of an index or of a collection's part (their norm terms, filter and ids:
 * ock_fs_base), one query (its float and quantized tables: ock_fs_query) and a run of consecutive blocks (a flat
 * index's rows or one inverted list: ock_fs_run); and the reads every scan makes of them, 32 rows at a time: the
 * rows a block must consider, their norm codes or float32 norms, the prefetch of the blocks ahead.
 */
#ifndef OCKSTORE_FASTSCAN_RUN_H
#define OCKSTORE_FASTSCAN_RUN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fastscan_layout.h"
#include "fastscan_tables.h"

#if defined(__GNUC__) || defined(__clang__)
/* Always inlined: the helpers of a scan's inner loop (ock_fs_prefetch says what being out of line cost it). */
#define OCK_FS_INLINE __attribute__((always_inline))
#else
#define OCK_FS_INLINE
#endif

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

#endif
