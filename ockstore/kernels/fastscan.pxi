# The fast scan of 4-bit codes (included by _kernels.pyx): models with at most 16 words per codebook store their
# codes in blocks of 32 rows, two words per byte, and are scanned with 16-entry tables held in SIMD registers
# (fastscan.h explains the method, the layout and why the results are exactly the 8-bit scan's; the instruction-set
# kernels, fastscan_simd.h, are reached through the dispatch table of simd.h). Here: packing, checking, the
# exhaustive scan of a batch, and the block sums (for tests); the inverted file's search of lists in blocks is
# ivf.pxi's ivf_search, which runs one query's scan with the functions of this file.

cdef extern from "kernels/fastscan_layout.h" nogil:
    enum:
        OCK_FS_BLOCK
        OCK_FS_WORDS
    int ock_fs_columns(int W)
    size_t ock_fs_block_bytes(int W)
    size_t ock_fs_blocks(size_t n)
    unsigned ock_fs_word(const uint8_t *block, int i, int w)
    void ock_fs_pack(const uint8_t *codes, size_t n, int W, uint8_t *blocks)
    void ock_fs_unpack(const uint8_t *blocks, int W, size_t start, size_t stop, uint8_t *codes)

cdef extern from "kernels/fastscan_tables.h" nogil:
    ctypedef struct ock_fs_norm:
        double fit
    ctypedef struct ock_fs_tables:
        int W, cols
        double scale, c0
        int has_norm
    void ock_fs_norm_init(const float *levels, ock_fs_norm *n)
    int ock_fs_quantize(const float *lut, int W, float qconst, const ock_fs_norm *norm, uint8_t *qlut,
                        ock_fs_tables *t)
    double ock_fs_rounding(const ock_fs_tables *t, double list_term)

cdef extern from "kernels/fastscan_run.h" nogil:
    ctypedef struct ock_fs_base:
        int W
        const float *norms_f32
        const uint8_t *norm_codes
        const float *norm_levels
        const int64_t **ids
        const uint64_t *allow
        size_t N
        int scales
        double scale_lo, scale_hi
    ctypedef struct ock_fs_query:
        const float *lut
        const uint8_t *qlut
        const ock_fs_tables *t
    ctypedef struct ock_fs_run:
        const uint8_t *blocks
        size_t row0
        size_t n_rows
        int64_t tag
        float start_term
        double c0
        double rho
    const uint8_t *ock_fs_norm_bytes(const ock_fs_base *b, size_t r0, uint8_t *spare)

cdef extern from "kernels/fastscan_collector.h" nogil:
    ctypedef struct ock_fs_heap:
        float *d
        int64_t *r
        int k
        const int64_t **ids
    ctypedef struct ock_fs_cand:
        double lb
    ctypedef struct ock_fs_collector:
        ock_fs_heap heap
        double limit
        int by_bound
    int ock_fs_collector_cap(int k)
    void ock_fs_collector_init(ock_fs_collector *c, float *hd, int64_t *hr, int k, const int64_t **ids,
                               ock_fs_cand *cand, int cap, double *ub, float bound)
    void ock_fs_refine(ock_fs_collector *c, const ock_fs_base *b, const ock_fs_query *q)
    int ock_fs_heap_offer(ock_fs_heap *h, float d, int64_t row)
    void ock_fs_heap_init(ock_fs_heap *h, float bound)
    void ock_fs_heap_sort_into(ock_fs_heap *h, float *out_d, int64_t *out_r)

cdef extern from "kernels/fastscan_sample.h" nogil:
    size_t ock_fs_sample_blocks(const ock_fs_base *b, const ock_fs_query *q, int k, size_t nb)
    size_t ock_fs_sample_block(size_t j, size_t s, size_t nb)
    void ock_fs_sample_limit(ock_fs_collector *c, const ock_fs_base *b, const ock_fs_query *q, const ock_fs_run *run,
                             const uint16_t *sums, size_t s, size_t nb)

cdef extern from "kernels/simd.h" nogil:
    # Each SIMD level's (fastscan_simd.h), through the kernels' table.
    void ock_fs_scan_run(const ock_fs_base *b, const ock_fs_query *q, const ock_fs_run *run, ock_fs_collector *c)
    void ock_fs_scan_run2(const ock_fs_base *b, const ock_fs_query *qa, const ock_fs_query *qb, const ock_fs_run *ra,
                          const ock_fs_run *rb, ock_fs_collector *ca, ock_fs_collector *cb)
    void ock_fs_block_sums(const uint8_t *block, const uint8_t *qlut, const ock_fs_tables *t,
                           const uint8_t *norm_bytes, uint16_t *out)

# Rows per block of the layout (the file format's, docs/FORMAT.md "Fast-scan files").
FASTSCAN_BLOCK = OCK_FS_BLOCK

cdef enum:
    # Queries per group of a batch: they share each chunk of blocks while it is in L2; their tables (W x 16 floats
    # and bytes) and candidates are small, so a group of 16 fits beside a chunk.
    FS_GROUP = 16
    # Bytes of blocks per chunk: a chunk (256 KiB: 28K rows of 64-bit codes) stays in L2 while a group scans it.
    FS_CHUNK_BYTES = 262144


def fastscan_block_bytes(int n_words):
    """Bytes of one block of 32 rows of n_words words (16 per column, columns rounded up to even)."""
    return ock_fs_block_bytes(n_words)


def fastscan_pack(const uint8_t[:, ::1] codes not None,    # IN (n, W) words < 16
                  uint8_t[:, ::1] blocks not None):         # OUT (ceil(n / 32), block bytes)
    """Pack rows of one-byte words into blocks (docs/FORMAT.md, "Fast-scan files"); the rows past n of the last block
    and the pad column are zero."""
    if codes.shape[0] == 0:
        return
    with nogil:
        ock_fs_pack(&codes[0, 0], codes.shape[0], codes.shape[1], &blocks[0, 0])


def fastscan_unpack(const uint8_t[:, ::1] blocks not None,  # IN (n_blocks, block bytes)
                    Py_ssize_t start,                       # IN the first row
                    uint8_t[:, ::1] codes not None):        # OUT (n, W): rows start .. start + n - 1
    """The one-byte words of rows start .. start + n - 1 of the blocks."""
    if codes.shape[0] == 0:
        return
    with nogil:
        ock_fs_unpack(&blocks[0, 0], codes.shape[1], start, start + codes.shape[0], &codes[0, 0])


def fastscan_check(const uint8_t[:, ::1] blocks not None,   # IN (ceil(n / 32), block bytes): one run of rows
                   Py_ssize_t n_rows,                       # IN the run's rows
                   int n_words,                             # IN W
                   int n_codewords,                         # IN K
                   int64_t[::1] out not None):              # OUT (2,): the first row holding a word >= K, or -1;
                                                            #     the first block with non-zero padding, or -1
    """Check a run of blocks: its words below K, its padding (the pad column, the rows past n_rows) zero."""
    cdef Py_ssize_t bad_row = -1
    cdef Py_ssize_t bad_block = -1
    cdef Py_ssize_t b, r
    cdef int i, w
    cdef int cols = ock_fs_columns(n_words)
    cdef const uint8_t *block
    with nogil:
        for b in range(blocks.shape[0]):
            block = &blocks[b, 0]
            for i in range(OCK_FS_BLOCK):
                r = b * OCK_FS_BLOCK + i
                for w in range(cols):
                    if r < n_rows and w < n_words:
                        if ock_fs_word(block, i, w) >= <unsigned>n_codewords and bad_row < 0:
                            bad_row = r
                    elif ock_fs_word(block, i, w) != 0 and bad_block < 0:
                        bad_block = b
            if bad_row >= 0 and bad_block >= 0:
                break
    out[0] = bad_row
    out[1] = bad_block


# --------------------------------------------------------------------------------------------------------------------
# The state of one query in a scan, and its memory.

cdef struct FsSlot:
    float *lut                  # (W, 16) float tables
    uint8_t *qlut               # (cols, 16) quantized tables
    ock_fs_tables t
    ock_fs_query q
    ock_fs_collector c
    float *heap_d               # (k,)
    int64_t *heap_r             # (k,)
    ock_fs_cand *cand           # (cap,)
    double *ub                  # (2 k,)
    float qconst
    ock_fs_run run              # the run being scanned (the slot's thread's own)


cdef struct FsScratch:
    FsSlot *slots               # n_slots
    char *memory                # every slot's arrays, each slot's in its own run of cache lines
    double *work                # n_threads slices of the table kernel's scratch
    Py_ssize_t work_stride
    uint16_t *sample            # n_threads slices of sample_stride: the sums of a sample (_fs_sample)
    size_t sample_stride
    int n_slots


cdef inline size_t _round64(size_t n) noexcept nogil:
    return (n + 63) // 64 * 64


cdef int _fs_scratch_alloc(FsScratch *s, int n_slots, int n_threads, int W, int k,
                           const TableSource *source, size_t sample_blocks=0) except -1:
    """Slots for n_slots queries (their tables, heaps and candidates), table scratch and the sums of a sample of
    sample_blocks blocks for n_threads threads; on MemoryError what was allocated stays in s, for
    _fs_scratch_free."""
    cdef int cap = ock_fs_collector_cap(k)
    cdef size_t lut_b = _round64(<size_t>W * OCK_FS_WORDS * sizeof(float))
    cdef size_t qlut_b = _round64(<size_t>ock_fs_columns(W) * OCK_FS_WORDS + 64)
    cdef size_t hd_b = _round64(<size_t>k * sizeof(float))
    cdef size_t hr_b = _round64(<size_t>k * sizeof(int64_t))
    cdef size_t cand_b = _round64(<size_t>cap * sizeof(ock_fs_cand))
    cdef size_t ub_b = _round64(<size_t>2 * k * sizeof(double))
    cdef size_t slot_b = lut_b + qlut_b + hd_b + hr_b + cand_b + ub_b + 64
    cdef char *p
    cdef int j
    s.n_slots = n_slots
    s.slots = <FsSlot *>_alloc(<size_t>n_slots * sizeof(FsSlot), "fast scan's query slots")
    s.memory = <char *>_alloc(<size_t>n_slots * slot_b + 64, "fast scan's tables, heaps and candidates")
    s.work_stride = _slice_items(_table_work_items(source))
    s.work = <double *>_alloc(<size_t>n_threads * s.work_stride * sizeof(double), "fast scan's table computation")
    s.sample_stride = sample_blocks * OCK_FS_BLOCK
    s.sample = <uint16_t *>_alloc(<size_t>n_threads * s.sample_stride * sizeof(uint16_t), "fast scan's sample")
    p = s.memory + (-(<size_t>s.memory) % 64)
    for j in range(n_slots):
        s.slots[j].lut = <float *>p
        s.slots[j].qlut = <uint8_t *>(p + lut_b)
        s.slots[j].heap_d = <float *>(p + lut_b + qlut_b)
        s.slots[j].heap_r = <int64_t *>(p + lut_b + qlut_b + hd_b)
        s.slots[j].cand = <ock_fs_cand *>(p + lut_b + qlut_b + hd_b + hr_b)
        s.slots[j].ub = <double *>(p + lut_b + qlut_b + hd_b + hr_b + cand_b)
        p += slot_b
    return 0


cdef void _fs_scratch_free(FsScratch *s) noexcept nogil:
    free(s.slots)
    free(s.memory)
    free(s.work)
    free(s.sample)


cdef void _fs_prepare(FsSlot *slot, const TableSource *source, Py_ssize_t q, double *work,
                      const ock_fs_norm *norm) noexcept nogil:
    """Query q's float tables (16 slots per word: entries K..15 +inf), its quantized tables, and its query view."""
    slot.qconst = _query_tables(source, q, work, slot.lut, OCK_FS_WORDS)
    ock_fs_quantize(slot.lut, source.M * source.C, slot.qconst, norm, slot.qlut, &slot.t)
    slot.q.lut = slot.lut
    slot.q.qlut = slot.qlut
    slot.q.t = &slot.t


cdef inline void _fs_start(FsSlot *slot, int k, const int64_t **ids, float bound, bint by_bound) noexcept nogil:
    """Start a query's collector of k rows below `bound`; `by_bound`: ranked by their quantized lower bounds alone
    (the candidates of a re-ranked search, fastscan.h "Ranking by the bound")."""
    ock_fs_collector_init(&slot.c, slot.heap_d, slot.heap_r, k, ids, slot.cand, ock_fs_collector_cap(k), slot.ub,
                          bound)
    slot.c.by_bound = by_bound


cdef void _fs_sample(const ock_fs_base *base, const uint8_t *blocks, FsSlot *slot, uint16_t *sums,
                     size_t most) noexcept nogil:
    """Lower a started query's limit before its scan of every row, from the sums of a sample of at most `most`
    blocks (fastscan_sample.h): fewer rows then pass the early, loose limits."""
    cdef size_t nb = ock_fs_blocks(base.N)
    cdef size_t bb = ock_fs_block_bytes(base.W)
    cdef size_t n = ock_fs_sample_blocks(base, &slot.q, slot.c.heap.k, nb)
    cdef size_t x, bi
    cdef uint8_t spare[32]
    if n == 0 or n > most:
        return
    _fs_run(&slot.run, slot, blocks, 0, base.N, False, 0)
    for x in range(n):
        bi = ock_fs_sample_block(x, n, nb)
        # the query's view (slot.q), not the slot's own buffers: a split scan's slots share one prepared query
        ock_fs_block_sums(blocks + bi * bb, slot.q.qlut, slot.q.t,
                          ock_fs_norm_bytes(base, bi * OCK_FS_BLOCK, spare) if slot.q.t.has_norm else NULL,
                          sums + x * OCK_FS_BLOCK)
    ock_fs_sample_limit(&slot.c, base, &slot.q, &slot.run, sums, n, nb)


cdef inline void _fs_run(ock_fs_run *run, const FsSlot *slot, const uint8_t *blocks, size_t row0, size_t n_rows,
                         bint in_list, float list_term) noexcept nogil:
    """The run of rows row0 .. row0 + n_rows - 1 (from `blocks`) for a query: its first term is the query's constant
    (a flat scan), or the float sum of the constant and the list term (an inverted list), as the 8-bit scans have
    it."""
    run.blocks = blocks
    run.row0 = row0
    run.n_rows = n_rows
    run.tag = 0
    run.start_term = slot.qconst + list_term if in_list else slot.qconst
    run.c0 = slot.t.c0 + <double>list_term if in_list else slot.t.c0
    run.rho = ock_fs_rounding(&slot.t, list_term if in_list else 0)


cdef ock_fs_base _fs_base(int W, Py_ssize_t N, const float[::1] norms_f32, const uint8_t[::1] norm_codes,
                          const float[::1] norm_levels, const int64_t **ids, const uint64_t[::1] allow,
                          bint scales=False, const double[::1] scale_range=None):
    """The base of a scan (`ids`: the id table of its rows' handles, held by the caller); ``scales``: the norm terms
    are scales (cosine) that multiply the sums; their range is
    ``scale_range`` when given (the caller's, found once per index), else found here (over the 256 levels, or over
    the N float32 scales)."""
    cdef ock_fs_base b
    cdef Py_ssize_t j
    cdef double v
    b.W = W
    b.N = N
    b.norms_f32 = &norms_f32[0] if norms_f32 is not None and norms_f32.shape[0] > 0 else NULL
    b.norm_codes = (&norm_codes[0] if b.norms_f32 == NULL and norm_codes is not None and norm_codes.shape[0] > 0
                    else NULL)
    b.norm_levels = &norm_levels[0] if b.norm_codes != NULL else NULL
    b.ids = ids
    b.allow = &allow[0] if allow is not None and allow.shape[0] > 0 else NULL
    b.scales = 1 if scales and (b.norms_f32 != NULL or b.norm_codes != NULL) else 0
    b.scale_lo = INFINITY
    b.scale_hi = 0.0
    if b.scales and scale_range is not None:
        b.scale_lo = scale_range[0]
        b.scale_hi = scale_range[1]
    elif b.scales:
        with nogil:
            for j in range(N if b.norms_f32 != NULL else 256):
                v = b.norms_f32[j] if b.norms_f32 != NULL else b.norm_levels[j]
                if v < b.scale_lo:
                    b.scale_lo = v
                if v > b.scale_hi:
                    b.scale_hi = v
    if b.scales and not (b.scale_lo > 0.0):  # scales are positive (Python's norm_scales); else no pruning by them
        b.scale_lo = 0.0
    return b


# --------------------------------------------------------------------------------------------------------------------
# The exhaustive scan of a batch.

cdef void _fs_scan_group(const ock_fs_base *base, const uint8_t *blocks, FsSlot *slots, int m,
                         size_t chunk_blocks) noexcept nogil:
    """Scan every row for the m queries of a group (prepared and started): chunk after chunk of blocks, each chunk
    scanned by all of them while it is in L2, two queries per pass where the level has a pair kernel."""
    cdef size_t bb = ock_fs_block_bytes(base.W)
    cdef size_t nb = ock_fs_blocks(base.N)
    cdef size_t first, rows
    cdef ock_fs_run ra, rb
    cdef int j
    first = 0
    while first < nb:
        rows = chunk_blocks * OCK_FS_BLOCK
        if first * OCK_FS_BLOCK + rows > base.N:
            rows = base.N - first * OCK_FS_BLOCK
        j = 0
        while j + 2 <= m:
            _fs_run(&ra, &slots[j], blocks + first * bb, first * OCK_FS_BLOCK, rows, False, 0)
            _fs_run(&rb, &slots[j + 1], blocks + first * bb, first * OCK_FS_BLOCK, rows, False, 0)
            ock_fs_scan_run2(base, &slots[j].q, &slots[j + 1].q, &ra, &rb, &slots[j].c, &slots[j + 1].c)
            j += 2
        if j < m:
            _fs_run(&ra, &slots[j], blocks + first * bb, first * OCK_FS_BLOCK, rows, False, 0)
            ock_fs_scan_run(base, &slots[j].q, &ra, &slots[j].c)
        first += chunk_blocks


cdef struct FsJob:
    # A parallel region of fastscan_scan: the base and its blocks, the slots and table scratch, and the queries.
    const ock_fs_base *base
    const uint8_t *blocks
    FsScratch *s
    const TableSource *source
    const ock_fs_norm *norm
    const float *bounds
    float *out_dist
    int64_t *out_rows
    size_t chunk_blocks, sample_blocks
    Py_ssize_t N
    int nq, k
    bint by_bound


cdef void _fs_chunk_task(void *ctx, int64_t ch, int tid) noexcept nogil:
    """Chunk ch of the split scan of one query (fastscan_scan), into thread tid's slot and collector."""
    cdef FsJob *j = <FsJob *>ctx
    cdef FsSlot *slot = &j.s.slots[tid]
    cdef size_t bb = ock_fs_block_bytes(j.base.W)
    cdef size_t rows = j.chunk_blocks * OCK_FS_BLOCK
    if <size_t>ch * rows + rows > <size_t>j.N:
        rows = <size_t>j.N - <size_t>ch * rows
    _fs_run(&slot.run, slot, j.blocks + <size_t>ch * j.chunk_blocks * bb, <size_t>ch * j.chunk_blocks * OCK_FS_BLOCK,
            rows, False, 0)
    ock_fs_scan_run(j.base, &slot.q, &slot.run, &slot.c)


cdef void _fs_group_task(void *ctx, int64_t g, int tid) noexcept nogil:
    """Group g (FS_GROUP queries) of fastscan_scan's batch, in thread tid's slots and scratch: the queries' tables,
    a sample's limit, the scan of every row, then each query's exact stage and its sorted results."""
    cdef FsJob *j = <FsJob *>ctx
    cdef FsSlot *mine = j.s.slots + tid * FS_GROUP
    cdef int q0 = <int>g * FS_GROUP
    cdef int m = j.nq - q0 if j.nq - q0 < FS_GROUP else FS_GROUP
    cdef int i
    for i in range(m):
        _fs_prepare(&mine[i], j.source, q0 + i, j.s.work + tid * j.s.work_stride, j.norm)
        _fs_start(&mine[i], j.k, j.base.ids, j.bounds[q0 + i] if j.bounds != NULL else INFINITY, j.by_bound)
        if j.sample_blocks > 0:
            _fs_sample(j.base, j.blocks, &mine[i], j.s.sample + tid * j.s.sample_stride, j.sample_blocks)
    if j.N > 0:
        _fs_scan_group(j.base, j.blocks, mine, m, j.chunk_blocks)
    for i in range(m):
        ock_fs_refine(&mine[i].c, j.base, &mine[i].q)
        ock_fs_heap_sort_into(&mine[i].c.heap, j.out_dist + <Py_ssize_t>(q0 + i) * j.k,
                              j.out_rows + <Py_ssize_t>(q0 + i) * j.k)


def fastscan_scan(TableModel model not None,          # IN the quantizer's table arrays
                  const float[:, ::1] queries,        # IN (nq, P) the queries (ADC), or None
                  const double[:, ::1] rotated,       # IN (nq, M*S) the vectors z of SDC, or None
                  const uint8_t[:, ::1] blocks,       # IN (ceil(N / 32), block bytes): the rows in fast-scan blocks
                  Py_ssize_t N,                       # IN rows
                  const float[::1] norms_f32,         # IN (N,) float32 norm terms, or None
                  const uint8_t[::1] norm_codes,      # IN (N,) one-byte norm codes, or None
                  const float[::1] norm_levels,       # IN (256,) levels of the one-byte norm codes (with them), or None
                  const int64_t[::1] ids,             # IN (N,), or None: the id of a row is then its number
                  const uint64_t[::1] allow,          # IN (ceil(N / 64),) bitmap of the rows to scan, or None: all
                  float[:, ::1] out_dist,             # OUT (nq, k) ascending
                  int64_t[:, ::1] out_rows,           # OUT (nq, k) the rows of the results; (bound, -1) past the last
                  int n_threads,
                  const float[::1] bound=None,        # IN (nq,) or None: only rows below bound[q] may enter (as scan)
                  bint norm_scales=False,             # IN the norm terms are scales multiplying the sums (cosine)
                  const double[::1] scale_range=None,  # IN (2,) their smallest and largest (float32 scales), or None
                  bint by_bound=False):               # IN rank by the quantized bounds alone: candidates to re-rank
    """_kernels_search's scan for codes in fast-scan blocks: the same arguments, the same results (distances, rows,
    order), by a scan of quantized sums that computes exact distances only for the rows that may enter
    (fastscan.h).

    Batches (nq >= n_threads) run in parallel over groups of FS_GROUP queries, each group sharing chunks of
    FS_CHUNK_BYTES of blocks. Fewer queries than threads run one at a time, their chunks shared among the threads, each
    with its own collector, whose k best are merged at the end (the k best of a union do not depend on the split)."""
    cdef TableSource source = model._source
    cdef int nq = out_dist.shape[0]
    cdef int k = out_dist.shape[1]
    cdef int W = source.M * source.C
    cdef ock_fs_base base
    cdef const int64_t *id_part
    cdef ock_fs_norm norm
    cdef const ock_fs_norm *norm_ptr = NULL
    cdef FsScratch s
    cdef FsSlot *slots
    cdef FsJob job
    cdef const uint8_t *bp
    cdef size_t bb = ock_fs_block_bytes(W)
    cdef size_t chunk_blocks = FS_CHUNK_BYTES // bb if FS_CHUNK_BYTES // bb > 0 else 1
    cdef size_t nb = ock_fs_blocks(N)
    cdef Py_ssize_t n_chunks
    cdef int n_groups = 0, g, j, t  # set when not split (gcc cannot see it)
    cdef bint split
    cdef ock_fs_heap merged
    cdef const float *bounds = &bound[0] if bound is not None else NULL
    cdef size_t sample_blocks = <size_t>k if 8 * <size_t>k <= nb else 0  # ock_fs_sample_blocks' most
    if nq == 0 or k == 0:
        return
    # the small-work rule: each query's tables, then its scan of every word
    n_threads = ock_pool_threads(n_threads, nq * (COST_TABLE_VALUE * (<double>source.P * source.D + <double>source.D
                                                                      * source.C * source.K)
                                                  + COST_FAST_SCAN_WORD * <double>N * W))
    source.queries = &queries[0, 0] if queries is not None else NULL
    source.rotated = &rotated[0, 0] if rotated is not None else NULL
    base = _fs_base(W, N, norms_f32, norm_codes, norm_levels, _one_part_ids(ids, &id_part), allow, norm_scales,
                    scale_range)
    if base.norm_codes != NULL and not base.scales:  # scales are not part of the quantized sums
        ock_fs_norm_init(base.norm_levels, &norm)
        norm_ptr = &norm
    bp = &blocks[0, 0] if N > 0 else NULL
    n_chunks = <Py_ssize_t>((nb + chunk_blocks - 1) // chunk_blocks)
    split = nq < n_threads and n_chunks > 1
    if not split:
        n_groups = (nq + FS_GROUP - 1) // FS_GROUP
        if n_threads > n_groups:
            n_threads = n_groups
    memset(&s, 0, sizeof(s))
    try:
        _fs_scratch_alloc(&s, n_threads + 1 if split else n_threads * FS_GROUP, n_threads, W, k, &source,
                          sample_blocks)
        slots = s.slots
        job.base = &base
        job.blocks = bp
        job.s = &s
        job.source = &source
        job.norm = norm_ptr
        job.bounds = bounds
        job.out_dist = &out_dist[0, 0]
        job.out_rows = &out_rows[0, 0]
        job.chunk_blocks = chunk_blocks
        job.sample_blocks = sample_blocks
        job.N = N
        job.nq = nq
        job.k = k
        job.by_bound = by_bound
        with nogil:
            if split:
                for g in range(nq):
                    # the tables once (in the last slot), the collectors one per thread
                    _fs_prepare(&slots[n_threads], &source, g, s.work, norm_ptr)
                    for t in range(n_threads):
                        slots[t].q = slots[n_threads].q
                        slots[t].t = slots[n_threads].t
                        slots[t].q.t = &slots[t].t
                        slots[t].qconst = slots[n_threads].qconst
                        _fs_start(&slots[t], k, base.ids, bounds[g] if bounds != NULL else INFINITY, by_bound)
                    # one sample's limit for every thread's collector: k rows of the whole run are within it, so a
                    # row any thread leaves out cannot be among the merged k best
                    if sample_blocks > 0:
                        _fs_sample(&base, bp, &slots[0], s.sample, sample_blocks)
                        for t in range(1, n_threads):
                            slots[t].c.limit = slots[0].c.limit
                    ock_pool_run(_fs_chunk_task, &job, n_chunks, n_threads, OCK_POOL_STATIC)
                    # each thread's exact stage, then their k best merged
                    merged.d = slots[n_threads].heap_d
                    merged.r = slots[n_threads].heap_r
                    merged.k = k
                    merged.ids = base.ids
                    ock_fs_heap_init(&merged, bounds[g] if bounds != NULL else INFINITY)
                    for t in range(n_threads):
                        ock_fs_refine(&slots[t].c, &base, &slots[t].q)
                        for j in range(k):
                            if slots[t].heap_r[j] >= 0:
                                ock_fs_heap_offer(&merged, slots[t].heap_d[j], slots[t].heap_r[j])
                    ock_fs_heap_sort_into(&merged, &out_dist[g, 0], &out_rows[g, 0])
            else:
                ock_pool_run(_fs_group_task, &job, n_groups, n_threads, OCK_POOL_DYNAMIC)
    finally:
        _fs_scratch_free(&s)


# --------------------------------------------------------------------------------------------------------------------
# For tests: the uint16 sums of the level in use.

def fastscan_sums(TableModel model not None,            # IN the quantizer's table arrays
                  const float[:, ::1] queries not None, # IN (1, P) the query
                  const uint8_t[:, ::1] blocks not None,# IN (n_blocks, block bytes)
                  const uint8_t[::1] norm_codes,        # IN (32 n_blocks,) one-byte norm codes, or None
                  const float[::1] norm_levels,         # IN (256,) their levels (with them), or None
                  uint16_t[:, ::1] out):                # OUT (n_blocks, 32) the quantized sums of every row
    """The quantized sums S of every row of the blocks for one query, computed by the SIMD level in use (every level
    must give the portable level's sums); the norm term's nibble tables are included with norm_codes."""
    cdef TableSource source = model._source
    cdef int W = source.M * source.C
    cdef FsScratch s
    cdef ock_fs_norm norm
    cdef const ock_fs_norm *norm_ptr = NULL
    cdef Py_ssize_t b
    source.queries = &queries[0, 0]
    if norm_codes is not None:
        ock_fs_norm_init(&norm_levels[0], &norm)
        norm_ptr = &norm
    memset(&s, 0, sizeof(s))
    try:
        _fs_scratch_alloc(&s, 1, 1, W, 1, &source)
        with nogil:
            _fs_prepare(&s.slots[0], &source, 0, s.work, norm_ptr)
            for b in range(blocks.shape[0]):
                ock_fs_block_sums(&blocks[b, 0], s.slots[0].qlut, &s.slots[0].t,
                                  &norm_codes[b * OCK_FS_BLOCK] if norm_ptr != NULL else NULL, &out[b, 0])
    finally:
        _fs_scratch_free(&s)
