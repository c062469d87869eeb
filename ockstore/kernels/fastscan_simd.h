/* The fast scan's kernels at each SIMD level (fastscan.h explains the method and lists its parts): the uint16 sums of
 * a block's 32 rows, and the scan of a run of blocks into a collector, for one query and for two over the same rows.
 * A level body (simd.h, "One convention"): simd_level.h includes it once per level, and the kernels' table holds
 * this level's fs_block_sums, fs_scan_run and fs_scan_run2. Every level computes the same uint16 sums as the portable
 * one, so that the same rows reach the collector (fastscan_scan.h) and the results are the same.
 *
 * The portable level is the oracle: plain C, a row at a time. The AVX2 and the AVX-512 levels run the same AVX2 code,
 * compiled for AVX2 at both (OCK_TARGET_AVX2). An AVX-512BW version (four columns per 64-byte load) was slower on the
 * AMD EPYC (Zen 4) this is measured on, whose 512-bit units are two 256-bit halves: 0.48 against 0.33 ms per query
 * for the exhaustive scan of sift 1M (k = 10, one thread), where AVX2 scans two queries per pass over the blocks
 * (fs_scan_run2) and the 512-bit loop could not; an inverted file's one-query runs were 5% slower too.
 * (docs/ARCHITECTURE.md, "Fast scan".)
 */

#if OCK_LEVEL == OCK_LEVEL_PORTABLE
/* --------------------------------------------------------------------------------------------------------------------
 * The portable level: the oracle, plain C. */

/* S of the 32 rows of a block (norm term included when t->has_norm: norm_bytes holds the rows' 32 norm codes). */
OCK_TARGET static inline void OCK_FN(fs_block_sums)(const uint8_t *block, const uint8_t *qlut, const ock_fs_tables *t,
                                                    const uint8_t *norm_bytes, uint16_t *out) {
    for (int i = 0; i < OCK_FS_BLOCK; i++) {
        unsigned s = 0;
        for (int w = 0; w < t->cols; w++) s += qlut[(size_t)w * OCK_FS_WORDS + ock_fs_word(block, i, w)];
        if (t->has_norm) s += (unsigned)t->norm_lo[norm_bytes[i] & 15] + (unsigned)t->norm_hi[norm_bytes[i] >> 4];
        out[i] = (uint16_t)s;
    }
}

/* The rows of a block that may be within the limit: S <= thr, or the float test of float32 norms (in double). */
OCK_TARGET static inline uint32_t OCK_FN(fs_mask)(const uint16_t *sums, const float *norms, const ock_fs_run *run,
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
OCK_TARGET static void OCK_FN(fs_scan_run)(const ock_fs_base *b, const ock_fs_query *q, const ock_fs_run *run,
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
        OCK_FN(fs_block_sums)(block, q->qlut, q->t, q->t->has_norm ? ock_fs_norm_bytes(b, r0, spare) : NULL, sums);
        const uint32_t mask = live & OCK_FN(fs_mask)(sums, L.f32 ? ock_fs_norm_floats(b, r0, fspare) : NULL, run, &L,
                                                     q->t->scale, c->limit);
        if (mask && ock_fs_collect_block(c, b, q, run, block, r0, mask, sums, &L))
            ock_fs_limits_set(&L, b, q, run, c->limit);
    }
}

/* Two queries over the same rows: the portable version scans them one after the other. */
OCK_TARGET static void OCK_FN(fs_scan_run2)(const ock_fs_base *b, const ock_fs_query *qa, const ock_fs_query *qb,
                                            const ock_fs_run *ra, const ock_fs_run *rb, ock_fs_collector *ca,
                                            ock_fs_collector *cb) {
    OCK_FN(fs_scan_run)(b, qa, ra, ca);
    OCK_FN(fs_scan_run)(b, qb, rb, cb);
}

#else
/* --------------------------------------------------------------------------------------------------------------------
 * The AVX2 and AVX-512 levels: AVX2 code (OCK_TARGET_AVX2). One 32-byte load per two columns, two shuffles (rows
 * 0..15 and 16..31), sums in uint16.
 *
 * Widening bytes to uint16 costs nothing extra: the shuffled bytes are added as 16-bit words (each word then holds
 * an even row's entry plus 256 times the next odd row's), the odd rows' entries are added separately (a shift right
 * by 8), and at the end even = words - 256 * odd. Every sum is taken modulo 2^16, which is exact because no true sum
 * exceeds OCK_FS_MAX_SUM (checked by ock_fs_quantize).
 *
 * The sums stay split by row parity, as the accumulation leaves them: E holds the even rows (0, 2, .., 14 in its low
 * lane, 16, .., 30 in its high lane), O the odd ones. Comparing them with the threshold in that order and putting the
 * mask's bits back in row order only for the rare block that has a candidate (fs_unsplit) costs fewer operations
 * per block than interleaving the sums first; the norm codes are split alike by one byte shuffle. */

/* The running sums of one query over a block: per 16-bit word, lane 0 the even columns and lane 1 the odd ones;
 * `w` the words as added (even row + 256 x odd row), `odd` the odd rows alone; lo: rows 0..15, hi: rows 16..31. */
typedef struct {
    __m256i lo_w, lo_odd, hi_w, hi_odd;
} OCK_FN(fs_acc);

OCK_TARGET_AVX2 OCK_FS_INLINE
static inline void OCK_FN(fs_acc_zero)(OCK_FN(fs_acc) *a) {
    a->lo_w = a->lo_odd = a->hi_w = a->hi_odd = _mm256_setzero_si256();
}

/* Add the entries of one column pair to four running sums held in local registers (w0, odd0: rows 0..15; w1, odd1:
 * rows 16..31): tab the pair's two tables, lo / hi the nibbles of rows 0..15 / 16..31. A macro, not a function of a
 * struct: with the accumulators of a struct gcc kept one of them on the stack (see fs_sums). */
#define OCK_FS_ADD_PAIR(w0, odd0, w1, odd1, tab, lo, hi)                                        \
    do {                                                                                             \
        const __m256i rl_ = _mm256_shuffle_epi8(tab, lo), rh_ = _mm256_shuffle_epi8(tab, hi);        \
        w0 = _mm256_add_epi16(w0, rl_);                                                              \
        odd0 = _mm256_add_epi16(odd0, _mm256_srli_epi16(rl_, 8));                                    \
        w1 = _mm256_add_epi16(w1, rh_);                                                              \
        odd1 = _mm256_add_epi16(odd1, _mm256_srli_epi16(rh_, 8));                                    \
    } while (0)

/* E and O (s[0], s[1]) from running sums laid out as AVX2's: even rows, then the two lanes (even and odd columns)
 * of rows 0..15 and of rows 16..31 added side by side. */
OCK_TARGET_AVX2 OCK_FS_INLINE
static inline void OCK_FN(fs_acc_finish)(const OCK_FN(fs_acc) *a, __m256i *s) {
    const __m256i lo_even = _mm256_sub_epi16(a->lo_w, _mm256_slli_epi16(a->lo_odd, 8));
    const __m256i hi_even = _mm256_sub_epi16(a->hi_w, _mm256_slli_epi16(a->hi_odd, 8));
    s[0] = _mm256_add_epi16(_mm256_permute2x128_si256(lo_even, hi_even, 0x20),
                            _mm256_permute2x128_si256(lo_even, hi_even, 0x31));
    s[1] = _mm256_add_epi16(_mm256_permute2x128_si256(a->lo_odd, a->hi_odd, 0x20),
                            _mm256_permute2x128_si256(a->lo_odd, a->hi_odd, 0x31));
}

/* E and O of a block.
 *
 * The running sums are plain local registers, not a struct reached through a pointer, and the column loop is
 * unrolled: with the accumulators of a struct gcc kept one of them on the stack, and the load-add-store of that
 * accumulator per column pair (a store-to-load forwarding chain of ~7 cycles) set the pace of the whole loop. */
OCK_TARGET_AVX2 OCK_FS_INLINE
static inline void OCK_FN(fs_sums)(const uint8_t *block, const uint8_t *qlut, int cols, __m256i *s) {
    const __m256i nib = _mm256_set1_epi8(0x0f);
    __m256i lo_w = _mm256_setzero_si256(), lo_odd = lo_w, hi_w = lo_w, hi_odd = lo_w;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 8
#endif
    for (int c = 0; c < cols; c += 2) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(block + (size_t)c * OCK_FS_LANE));
        const __m256i tab = _mm256_loadu_si256((const __m256i *)(qlut + (size_t)c * OCK_FS_WORDS));
        OCK_FS_ADD_PAIR(lo_w, lo_odd, hi_w, hi_odd, tab, _mm256_and_si256(v, nib),
                             _mm256_and_si256(_mm256_srli_epi16(v, 4), nib));
    }
    const OCK_FN(fs_acc) a = {lo_w, lo_odd, hi_w, hi_odd};
    OCK_FN(fs_acc_finish)(&a, s);
}

/* The same for two queries at once: each column pair is loaded and split into nibbles once for both (eight
 * accumulators, the nibble mask and the split codes: 11 of the 16 registers, the rest for the shuffles). */
OCK_TARGET_AVX2 OCK_FS_INLINE
static inline void OCK_FN(fs_sums2)(const uint8_t *block, const uint8_t *qa, const uint8_t *qb, int cols,
                                     __m256i *sa, __m256i *sb) {
    const __m256i nib = _mm256_set1_epi8(0x0f);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 8
#endif
    for (int c = 0; c < cols; c += 2) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(block + (size_t)c * OCK_FS_LANE));
        const __m256i lo = _mm256_and_si256(v, nib), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
        const __m256i ta = _mm256_loadu_si256((const __m256i *)(qa + (size_t)c * OCK_FS_WORDS));
        OCK_FS_ADD_PAIR(a0, a1, a2, a3, ta, lo, hi);
        const __m256i tb = _mm256_loadu_si256((const __m256i *)(qb + (size_t)c * OCK_FS_WORDS));
        OCK_FS_ADD_PAIR(b0, b1, b2, b3, tb, lo, hi);
    }
    const OCK_FN(fs_acc) a = {a0, a1, a2, a3}, b = {b0, b1, b2, b3};
    OCK_FN(fs_acc_finish)(&a, sa);
    OCK_FN(fs_acc_finish)(&b, sb);
}

/* The norm codes of rows 0..31 split by parity, as E and O hold the sums: per lane the even rows' bytes, then the
 * odd rows'. */
OCK_TARGET_AVX2 OCK_FS_INLINE
static inline __m256i OCK_FN(fs_norm_split)(const uint8_t *norm_bytes) {
    const __m256i by_parity = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
                                               0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    return _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)norm_bytes), by_parity);
}

/* Add the norm codes' nibble tables (16-bit entries: a shuffle for each byte) to E and O; v: fs_norm_split. */
OCK_TARGET_AVX2 OCK_FS_INLINE
static inline void OCK_FN(fs_norm)(__m256i v, const __m256i *tabs, __m256i *s) {
    const __m256i nib = _mm256_set1_epi8(0x0f);
    const __m256i lo = _mm256_and_si256(v, nib), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
    /* tabs: low bytes of lo table, high bytes of lo table, low bytes of hi table, high bytes of hi table */
    const __m256i a = _mm256_shuffle_epi8(tabs[0], lo), b = _mm256_shuffle_epi8(tabs[1], lo);
    const __m256i c = _mm256_shuffle_epi8(tabs[2], hi), d = _mm256_shuffle_epi8(tabs[3], hi);
    /* per lane, the first 8 bytes are even rows, the last 8 odd ones: unpacklo gives E's words, unpackhi O's */
    s[0] = _mm256_add_epi16(s[0], _mm256_add_epi16(_mm256_unpacklo_epi8(a, b), _mm256_unpacklo_epi8(c, d)));
    s[1] = _mm256_add_epi16(s[1], _mm256_add_epi16(_mm256_unpackhi_epi8(a, b), _mm256_unpackhi_epi8(c, d)));
}

/* The four shuffle tables of the norm nibbles (see fs_norm). */
OCK_TARGET_AVX2
static inline void OCK_FN(fs_norm_tabs)(const ock_fs_tables *t, __m256i *tabs) {
    uint8_t b[4][16];
    for (int j = 0; j < 16; j++) {
        b[0][j] = (uint8_t)(t->norm_lo[j] & 255);
        b[1][j] = (uint8_t)(t->norm_lo[j] >> 8);
        b[2][j] = (uint8_t)(t->norm_hi[j] & 255);
        b[3][j] = (uint8_t)(t->norm_hi[j] >> 8);
    }
    for (int x = 0; x < 4; x++) tabs[x] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)b[x]));
}

/* Bits e (bit j: row 2j) and o (bit j: row 2j + 1) interleaved into a row mask. */
static inline uint32_t OCK_FN(fs_interleave_bits)(uint32_t e, uint32_t o) {
    e = (e | (e << 8)) & 0x00ff00ffu;
    e = (e | (e << 4)) & 0x0f0f0f0fu;
    e = (e | (e << 2)) & 0x33333333u;
    e = (e | (e << 1)) & 0x55555555u;
    o = (o | (o << 8)) & 0x00ff00ffu;
    o = (o | (o << 4)) & 0x0f0f0f0fu;
    o = (o | (o << 2)) & 0x33333333u;
    o = (o | (o << 1)) & 0x55555555u;
    return e | (o << 1);
}

/* E's and O's words with sum <= thr, as a mask in "packs" order: bytes E low lane, O low lane, E high, O high. */
OCK_TARGET_AVX2 OCK_FS_INLINE
static inline uint32_t OCK_FN(fs_split_mask)(const __m256i *s, __m256i thr) {
    const __m256i m0 = _mm256_cmpeq_epi16(_mm256_max_epu16(s[0], thr), thr);
    const __m256i m1 = _mm256_cmpeq_epi16(_mm256_max_epu16(s[1], thr), thr);
    return (uint32_t)_mm256_movemask_epi8(_mm256_packs_epi16(m0, m1));
}

/* A mask of fs_split_mask in row order. */
static inline uint32_t OCK_FN(fs_unsplit)(uint32_t m) {
    return OCK_FN(fs_interleave_bits)((m & 0xffu) | ((m >> 8) & 0xff00u), ((m >> 8) & 0xffu) | ((m >> 16) & 0xff00u));
}

/* E and O in row order: rows 0..15 in r[0], 16..31 in r[1]. */
OCK_TARGET_AVX2 OCK_FS_INLINE
static inline void OCK_FN(fs_rows)(const __m256i *s, __m256i *r) {
    const __m256i lo = _mm256_unpacklo_epi16(s[0], s[1]), hi = _mm256_unpackhi_epi16(s[0], s[1]);
    r[0] = _mm256_permute2x128_si256(lo, hi, 0x20);
    r[1] = _mm256_permute2x128_si256(lo, hi, 0x31);
}

/* Store the sums of E and O in row order. */
OCK_TARGET_AVX2 OCK_FS_INLINE
static inline void OCK_FN(fs_store_rows)(const __m256i *s, uint16_t *out) {
    __m256i r[2];
    OCK_FN(fs_rows)(s, r);
    _mm256_storeu_si256((__m256i *)out, r[0]);
    _mm256_storeu_si256((__m256i *)(out + 16), r[1]);
}

OCK_TARGET_AVX2
static void OCK_FN(fs_block_sums)(const uint8_t *block, const uint8_t *qlut, const ock_fs_tables *t,
                                   const uint8_t *norm_bytes, uint16_t *out) {
    __m256i s[2];
    OCK_FN(fs_sums)(block, qlut, t->cols, s);
    if (t->has_norm) {
        __m256i tabs[4];
        OCK_FN(fs_norm_tabs)(t, tabs);
        OCK_FN(fs_norm)(OCK_FN(fs_norm_split)(norm_bytes), tabs, s);
    }
    OCK_FN(fs_store_rows)(s, out);
}

/* The float32 norms' test of the 32 rows (ock_fs_limits), from E and O; a row-order mask. */
OCK_TARGET_AVX2
static inline uint32_t OCK_FN(fs_f32_mask)(const __m256i *s, const float *norms, const ock_fs_limits *L) {
    const __m256 sc = _mm256_set1_ps(L->fscale), ka = _mm256_set1_ps(L->fkappa), th = _mm256_set1_ps(L->fthr);
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256i r[2];
    OCK_FN(fs_rows)(s, r);
    uint32_t m = 0;
    for (int g = 0; g < 4; g++) {
        const __m128i h = (g & 1) ? _mm256_extracti128_si256(r[g >> 1], 1) : _mm256_castsi256_si128(r[g >> 1]);
        const __m256 sf = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(h));
        const __m256 n = _mm256_loadu_ps(norms + 8 * g);
        const __m256 y = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(sf, sc), n),
                                       _mm256_mul_ps(ka, _mm256_and_ps(n, magnitude)));
        m |= (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(y, th, _CMP_LE_OQ)) << (8 * g);
    }
    return m;
}

/* The rows of one query's block that may be within its limit (row order), and their sums in `sums` when any. */
OCK_TARGET_AVX2 OCK_FS_INLINE
static inline uint32_t OCK_FN(fs_block_rows)(const __m256i *s, __m256i thr, const ock_fs_limits *L,
                                              const float *norms, uint32_t live, uint16_t *sums) {
    uint32_t mask;
    if (L->f32) {
        mask = OCK_FN(fs_f32_mask)(s, norms, L) & live;
    } else {
        mask = OCK_FN(fs_split_mask)(s, thr);
        if (mask == 0) return 0;
        mask = OCK_FN(fs_unsplit)(mask) & live;
    }
    if (mask) OCK_FN(fs_store_rows)(s, sums);
    return mask;
}

OCK_TARGET_AVX2 OCK_FS_INLINE
static inline __m256i OCK_FN(fs_threshold)(const ock_fs_limits *L) {
    return _mm256_set1_epi16((short)(uint16_t)(L->thr < 0 ? 0 : L->thr));
}

OCK_TARGET_AVX2
static void OCK_FN(fs_scan_run)(const ock_fs_base *b, const ock_fs_query *q, const ock_fs_run *run,
                                 ock_fs_collector *c) {
    const int cols = q->t->cols;
    const size_t bytes = (size_t)OCK_FS_LANE * (size_t)cols;
    const size_t nb = ock_fs_blocks(run->n_rows);
    const int has_norm = q->t->has_norm;
    ock_fs_limits L;
    ock_fs_limits_set(&L, b, q, run, c->limit);
    __m256i thr = OCK_FN(fs_threshold)(&L);
    __m256i tabs[4];
    if (has_norm) OCK_FN(fs_norm_tabs)(q->t, tabs);
    uint8_t spare[32];
    float fspare[32];
    uint16_t sums[OCK_FS_BLOCK];
    for (size_t bi = 0; bi < nb && L.thr >= 0; bi++) {
        const uint32_t live = ock_fs_live_bits(b, run, bi);
        if (live == 0) continue;
        const uint8_t *block = run->blocks + bi * bytes;
        const size_t r0 = run->row0 + bi * OCK_FS_BLOCK;
        ock_fs_prefetch(b, run, bi + OCK_FS_PREFETCH, bytes);
        __m256i s[2];
        OCK_FN(fs_sums)(block, q->qlut, cols, s);
        if (has_norm) OCK_FN(fs_norm)(OCK_FN(fs_norm_split)(ock_fs_norm_bytes(b, r0, spare)), tabs, s);
        const uint32_t mask =
            OCK_FN(fs_block_rows)(s, thr, &L, L.f32 ? ock_fs_norm_floats(b, r0, fspare) : NULL, live, sums);
        if (mask && ock_fs_collect_block(c, b, q, run, block, r0, mask, sums, &L)) {
            ock_fs_limits_set(&L, b, q, run, c->limit);
            thr = OCK_FN(fs_threshold)(&L);
        }
    }
}

/* Two queries over the same run (a batch's flat scan): the block's codes are read and split once for both. */
OCK_TARGET_AVX2
static void OCK_FN(fs_scan_run2)(const ock_fs_base *b, const ock_fs_query *qa, const ock_fs_query *qb,
                                  const ock_fs_run *ra, const ock_fs_run *rb, ock_fs_collector *ca,
                                  ock_fs_collector *cb) {
    const int cols = qa->t->cols;
    const size_t bytes = (size_t)OCK_FS_LANE * (size_t)cols;
    const size_t nb = ock_fs_blocks(ra->n_rows);
    const int has_norm = qa->t->has_norm;
    ock_fs_limits La, Lb;
    ock_fs_limits_set(&La, b, qa, ra, ca->limit);
    ock_fs_limits_set(&Lb, b, qb, rb, cb->limit);
    __m256i thra = OCK_FN(fs_threshold)(&La), thrb = OCK_FN(fs_threshold)(&Lb);
    __m256i tabsa[4], tabsb[4];
    if (has_norm) {
        OCK_FN(fs_norm_tabs)(qa->t, tabsa);
        OCK_FN(fs_norm_tabs)(qb->t, tabsb);
    }
    uint8_t spare[32];
    float fspare[32];
    uint16_t sums[OCK_FS_BLOCK];
    for (size_t bi = 0; bi < nb && (La.thr >= 0 || Lb.thr >= 0); bi++) {
        const uint32_t live = ock_fs_live_bits(b, ra, bi);
        if (live == 0) continue;
        const uint8_t *block = ra->blocks + bi * bytes;
        const size_t r0 = ra->row0 + bi * OCK_FS_BLOCK;
        ock_fs_prefetch(b, ra, bi + OCK_FS_PREFETCH, bytes);
        __m256i sa[2], sb[2];
        OCK_FN(fs_sums2)(block, qa->qlut, qb->qlut, cols, sa, sb);
        if (has_norm) {
            const __m256i nv = OCK_FN(fs_norm_split)(ock_fs_norm_bytes(b, r0, spare));
            OCK_FN(fs_norm)(nv, tabsa, sa);
            OCK_FN(fs_norm)(nv, tabsb, sb);
        }
        const float *nf = La.f32 ? ock_fs_norm_floats(b, r0, fspare) : NULL;
        uint32_t mask = La.thr < 0 ? 0 : OCK_FN(fs_block_rows)(sa, thra, &La, nf, live, sums);
        if (mask && ock_fs_collect_block(ca, b, qa, ra, block, r0, mask, sums, &La)) {
            ock_fs_limits_set(&La, b, qa, ra, ca->limit);
            thra = OCK_FN(fs_threshold)(&La);
        }
        mask = Lb.thr < 0 ? 0 : OCK_FN(fs_block_rows)(sb, thrb, &Lb, nf, live, sums);
        if (mask && ock_fs_collect_block(cb, b, qb, rb, block, r0, mask, sums, &Lb)) {
            ock_fs_limits_set(&Lb, b, qb, rb, cb->limit);
            thrb = OCK_FN(fs_threshold)(&Lb);
        }
    }
}

#undef OCK_FS_ADD_PAIR
#endif
