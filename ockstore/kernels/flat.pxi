# The exhaustive scan (included by _kernels.pyx): the query tables of a batch and the ADC scan of every code of a
# base, each query keeping its k best (dist, id) pairs in a bounded max-heap, in one call per search. The scan loop,
# the heap and the order of results are scan.pxi's.

cdef enum:
    # Codes per scan block. A block's codes (SCAN_BLOCK * W bytes) and its norm terms stay in L1/L2 while every query
    # of a group scans them, so a batch reads each code from memory once per group instead of once per query.
    SCAN_BLOCK = 2048
    # A block with a bitmap is scanned whole (every distance computed, the bits tested only for codes that may enter
    # the heap) when at least 1/DENSE_FRACTION of its rows are allowed; sparser blocks read only the allowed rows.
    # Reading one allowed row costs a few times what a row of the unrolled block loop costs (its bit, a dependent
    # chain of adds): 1/4 keeps a 10% filter on the sparse path and a collection's few deletions on the dense one.
    DENSE_FRACTION = 4
    # Queries per group at most: a group's tables (8 KiB per query for 64-bit codes, 32 KiB for 256-bit), computed
    # by the thread that scans the group, stay in L2 next to the block of codes they scan.
    MAX_GROUP = 8
    # The largest k kept in a heap; a larger k (candidates for re-ranking) is collected in a TopK buffer, where a
    # heap would pay a sift of log2(k) unpredictable comparisons for each of the many candidates that enter.
    HEAP_MAX_K = 64
    # Queries scanned per step of a re-ranking scan: bounds the candidates held (RERANK_CHUNK x R distances and rows)
    # whatever nq, while each step still keeps every thread busy.
    RERANK_CHUNK = 256

cdef extern from *:
    int _popcount "__builtin_popcountll"(unsigned long long) noexcept nogil


cdef struct CodeBase:
    # The codes of a scan and what each code adds to its table entries (arrays of N rows, as given to scan).
    const uint8_t *codes        # (N, W), or NULL when N == 0
    Py_ssize_t N
    int W
    NormTerms norms             # (N,) from row 0
    const int64_t **ids         # the id table (one part: &id_part), or NULL: the id of a code is its row number
    const int64_t *id_part      # (N,) the ids
    const uint64_t *allow       # (ceil(N / 64),) bitmap of the rows to scan (bit r % 64 of word r // 64), or NULL


cdef struct QueryBatch:
    # The queries of a scan and where their results go.
    const TableSource *tables
    Py_ssize_t lut_row          # floats of one query's tables: W * SLOTS
    int nq
    int k
    bint topk                   # collect in TopK buffers (k > HEAP_MAX_K), else in heaps
    bint unordered              # TopK results in the order they came (rows ascending: re-ranking reads the rows of
                                # its candidates in memory order), not sorted
    const float *bound          # (nq,) or NULL: only codes below bound[q] may enter the results of query q
    float *out_dist             # (nq, k)
    int64_t *out_rows           # (nq, k): row numbers of the results (-1 for padding)


cdef struct ScanScratch:
    # Thread-local scratch of a scan, allocated with the GIL before its parallel region: thread t works in slice t
    # of each block (see _slice_items). NULL pointers are blocks not needed (or not allocated yet).
    float *norm_terms           # n_threads slices of SCAN_BLOCK decoded norm terms; NULL when codes have none
    Py_ssize_t norm_stride      # items from one thread's slice of norm_terms to the next
    float *heap_d               # n_threads slices of `queries` max-heaps of k (dist, id) pairs, one after another
    int64_t *heap_i
    Py_ssize_t heap_stride      # items from one thread's heaps to the next (in heap_d as in heap_i)
    float *luts                 # n_threads slices of the tables of `queries` queries, one after another
    Py_ssize_t lut_stride
    float *qconst               # n_threads slices of their constant terms
    Py_ssize_t qconst_stride
    double *work                # n_threads slices of the table kernel's float64 scratch (_query_tables)
    Py_ssize_t work_stride
    float *merged_d             # (k,) the heap that merges the threads' heaps of one query, or NULL
    int64_t *merged_i


cdef int _scratch_alloc(ScanScratch *s, const QueryBatch *batch, int n_threads, int queries, bint has_norm,
                        bint merge) except -1:
    """Fill s (zeroed by the caller) with blocks for n_threads threads of `queries` queries each (heaps, tables);
    the merge heap when `merge`. On MemoryError the blocks allocated so far stay in s, for _scratch_free."""
    cdef const TableSource *t = batch.tables
    s.norm_stride = _slice_items(SCAN_BLOCK)
    s.heap_stride = _slice_items(<Py_ssize_t>queries * (_topk_slot_items(batch.k) if batch.topk else batch.k))
    s.lut_stride = _slice_items(<Py_ssize_t>queries * batch.lut_row)
    s.qconst_stride = _slice_items(queries)
    s.work_stride = _slice_items(_table_work_items(t))
    if has_norm:
        s.norm_terms = <float *>_alloc(<size_t>n_threads * s.norm_stride * sizeof(float),
                                       "scan's decoded norm terms of a block (per thread)")
    s.heap_d = <float *>_alloc(<size_t>n_threads * s.heap_stride * sizeof(float),
                               "scan's top-k heaps (distances, per thread)")
    s.heap_i = <int64_t *>_alloc(<size_t>n_threads * s.heap_stride * sizeof(int64_t),
                                 "scan's top-k heaps (ids, per thread)")
    s.luts = <float *>_alloc(<size_t>n_threads * s.lut_stride * sizeof(float), "scan's query tables (per thread)")
    s.qconst = <float *>_alloc(<size_t>n_threads * s.qconst_stride * sizeof(float),
                               "scan's query constant terms (per thread)")
    s.work = <double *>_alloc(<size_t>n_threads * s.work_stride * sizeof(double),
                              "scan's table computation (per thread)")
    if merge:
        s.merged_d = <float *>_alloc(<size_t>batch.k * sizeof(float), "scan's merged top-k heap (distances)")
        s.merged_i = <int64_t *>_alloc(<size_t>(_topk_slot_items(batch.k) if batch.topk else batch.k)
                                       * sizeof(int64_t), "scan's merged top-k heap (ids)")
    return 0


cdef void _scratch_free(ScanScratch *s) noexcept nogil:
    free(s.norm_terms)
    free(s.heap_d)
    free(s.heap_i)
    free(s.luts)
    free(s.qconst)
    free(s.work)
    free(s.merged_d)
    free(s.merged_i)


cdef inline Py_ssize_t _block_stop(const CodeBase *base, Py_ssize_t start) noexcept nogil:
    """The end of the block of codes that begins at `start`."""
    return start + SCAN_BLOCK if start + SCAN_BLOCK < base.N else base.N


cdef bint _dense_block(const CodeBase *base, Py_ssize_t start, Py_ssize_t stop) noexcept nogil:
    """Whether the rows start..stop-1 (start a multiple of 64) are scanned as a whole block: no bitmap, or at least
    1/DENSE_FRACTION of them allowed. Computing a distance in the 4-codes-at-a-time loop costs a fraction of reading
    one allowed row out of a sparse bitmap, so a mostly allowed block (a collection's segment with a few deleted rows)
    is scanned whole, its bits tested only for the codes that may enter the heap."""
    cdef Py_ssize_t word
    cdef Py_ssize_t allowed = 0
    if base.allow == NULL:
        return True
    for word in range(start >> 6, (stop + 63) >> 6):
        allowed += _popcount(base.allow[word])
    return allowed * DENSE_FRACTION >= stop - start


cdef const float *_block_norm_terms(const CodeBase *base, Py_ssize_t start, Py_ssize_t stop, bint dense,
                                    float *buf) noexcept nogil:
    """The norm terms of codes start..stop-1 written to buf (float32 norms, or the level of each one-byte code) and
    returned; NULL, with buf untouched, when the codes have no norm term or the block is not `dense`."""
    cdef Py_ssize_t j
    if not dense:
        return NULL  # _scan_allowed_rows reads the norm terms of the rows it scans
    if base.norms.f32 != NULL:
        memcpy(buf, base.norms.f32 + start, (stop - start) * sizeof(float))
    elif base.norms.codes != NULL:
        for j in range(stop - start):
            buf[j] = base.norms.levels[base.norms.codes[start + j]]
    else:
        return NULL
    return buf


cdef inline void _scan_query(const CodeBase *base, const float *lut, float qconst, Py_ssize_t start, Py_ssize_t stop,
                             bint dense, const float *norm_terms, Collector *sink) noexcept nogil:
    """Offer codes start..stop-1 (the allowed ones) to a query's collector, its tables lut and constant term qconst;
    `dense` and norm_terms from _dense_block and _block_norm_terms (norm_terms unused when not dense)."""
    cdef NormTerms block_norms
    if not dense:
        _scan_allowed_rows(sink, base.codes, base.W, lut, qconst, _norm_terms_from(base.norms, start), start, stop,
                           base.allow, 0)
    else:
        block_norms.f32 = norm_terms
        block_norms.codes = NULL
        block_norms.levels = NULL
        block_norms.scales = base.norms.scales
        _scan_rows(sink, base.codes, base.W, lut, qconst, block_norms, start, stop, base.allow, 0)


cdef inline void _scan_query_heap(const CodeBase *base, const float *lut, float qconst, Py_ssize_t start,
                                  Py_ssize_t stop, bint dense, const float *norm_terms, float *hd, int64_t *hi,
                                  int k) noexcept nogil:
    """_scan_query into the heap (hd, hi) of k (its Heap a local: parallel regions share no collector struct)."""
    cdef Heap heap
    heap.d = hd
    heap.r = hi
    heap.k = k
    heap.ids = base.ids
    _scan_query(base, lut, qconst, start, stop, dense, norm_terms, &heap)


cdef inline Py_ssize_t _topk_slot_items(int k) noexcept nogil:
    """8-byte items of one query's TopK in the scan's scratch: the struct, then its buffers."""
    return (sizeof(TopK) + 7) // 8 + _topk_items(k)


cdef inline TopK *_topk_slot(int64_t *slots, int k, int q) noexcept nogil:
    """Query q's TopK among consecutive slots (_topk_slot_items each)."""
    return <TopK *>(slots + <Py_ssize_t>q * _topk_slot_items(k))


cdef inline void _start_topk_slot(int64_t *slots, int k, int q, const int64_t **ids, float bound) noexcept nogil:
    cdef TopK *t = _topk_slot(slots, k, q)
    _topk_start(t, <int64_t *>t + (sizeof(TopK) + 7) // 8, k, ids, bound)


cdef inline void _start_heap(float *hd, int64_t *hi, int k, const int64_t **ids, Heap *heap,
                             float bound) noexcept nogil:
    heap.d = hd
    heap.r = hi
    heap.k = k
    heap.ids = ids
    _heap_init(hd, hi, k, bound)


cdef inline float _bound(const QueryBatch *batch, int q) noexcept nogil:
    return batch.bound[q] if batch.bound != NULL else INFINITY


cdef void _scan_group(const CodeBase *base, const QueryBatch *batch, int q0, int q1, float *norm_buf, float *hd,
                      int64_t *hi, float *luts, float *qconst, double *work) noexcept nogil:
    """Queries q0..q1-1: their tables (computed into luts, qconst), then every block of codes in turn, each block
    scanned by all of them while it is in cache; query q collects in the heap (hd, hi) + (q - q0) * k, or with
    batch.topk in the TopK slot q - q0 of hi. Writes their sorted results."""
    cdef int k = batch.k
    cdef int q
    cdef Py_ssize_t start, stop
    cdef bint dense
    cdef const float *norm_terms
    for q in range(q1 - q0):
        qconst[q] = _query_tables(batch.tables, q0 + q, work, luts + q * batch.lut_row, SLOTS)
        if batch.topk:
            _start_topk_slot(hi, k, q, base.ids, _bound(batch, q0 + q))
        else:
            _heap_init(hd + <size_t>q * k, hi + <size_t>q * k, k, _bound(batch, q0 + q))
    start = 0
    while start < base.N:
        stop = _block_stop(base, start)
        dense = _dense_block(base, start, stop)
        norm_terms = _block_norm_terms(base, start, stop, dense, norm_buf)
        for q in range(q1 - q0):
            if batch.topk:
                _scan_query(base, luts + q * batch.lut_row, qconst[q], start, stop, dense, norm_terms,
                            _topk_slot(hi, k, q))
            else:
                _scan_query_heap(base, luts + q * batch.lut_row, qconst[q], start, stop, dense, norm_terms,
                                 hd + <size_t>q * k, hi + <size_t>q * k, k)
        start = stop
    for q in range(q0, q1):
        if batch.topk:
            _finish_topk(_topk_slot(hi, k, q - q0), batch, q)
        else:
            _heap_sort_into(hd + <size_t>(q - q0) * k, hi + <size_t>(q - q0) * k, k, base.ids,
                            batch.out_dist + <size_t>q * k, batch.out_rows + <size_t>q * k)


cdef inline void _finish_topk(TopK *t, const QueryBatch *batch, int q) noexcept nogil:
    """Query q's sorted results from its TopK; slots left empty come out as (bound[q], -1), as a heap's do."""
    cdef float *out_d = batch.out_dist + <size_t>q * batch.k
    cdef int64_t *out_r = batch.out_rows + <size_t>q * batch.k
    cdef int j
    ock_topk_finish(t, out_d, out_r, not batch.unordered)
    if batch.bound != NULL:
        for j in range(batch.k):
            if out_r[j] < 0:
                out_d[j] = batch.bound[q]


cdef struct ScanJob:
    # A parallel region of the scan: its base, batch and scratch; the query of _scan_by_code_blocks (its tables in the
    # first slice of the scratch) or the group size of _scan_by_query_groups.
    const CodeBase *base
    const QueryBatch *batch
    ScanScratch *s
    int group_size
    float qconst


cdef void _scan_by_query_groups(const CodeBase *base, const QueryBatch *batch, int group_size, int n_threads,
                                ScanScratch *s) noexcept nogil:
    """Strategy for batches: parallel over groups of group_size queries (the last may be smaller), each group
    scanned by one thread (_scan_group), in the thread's slice of the scratch."""
    cdef ScanJob job
    job.base = base
    job.batch = batch
    job.s = s
    job.group_size = group_size
    ock_pool_run(_scan_group_task, &job, (batch.nq + group_size - 1) // group_size, n_threads, OCK_POOL_DYNAMIC)


cdef void _scan_group_task(void *ctx, int64_t g, int tid) noexcept nogil:
    """Group g of _scan_by_query_groups, in thread tid's slice of the scratch."""
    cdef ScanJob *j = <ScanJob *>ctx
    cdef ScanScratch *s = j.s
    cdef int q0 = <int>g * j.group_size
    cdef int q1 = q0 + j.group_size if q0 + j.group_size < j.batch.nq else j.batch.nq
    _scan_group(j.base, j.batch, q0, q1, s.norm_terms + tid * s.norm_stride if s.norm_terms != NULL else NULL,
                s.heap_d + tid * s.heap_stride, s.heap_i + tid * s.heap_stride, s.luts + tid * s.lut_stride,
                s.qconst + tid * s.qconst_stride, s.work + tid * s.work_stride)


cdef void _merge_heaps(const float *heap_d, const int64_t *heap_i, int n_heaps, Py_ssize_t stride, int k,
                       const int64_t **ids, float bound, float *merged_d, int64_t *merged_i, float *out_d,
                       int64_t *out_i) noexcept nogil:
    """The k best pairs of n_heaps heaps (heap t at t * stride), sorted into out; merged_d/merged_i (k,) is scratch.

    Each heap holds the k best of its own codes, so the k best of all are among them (the k best of a union do not
    depend on how the codes were split).
    """
    cdef int t, j
    cdef const float *hd
    cdef const int64_t *hi
    _heap_init(merged_d, merged_i, k, bound)
    for t in range(n_heaps):
        hd = heap_d + t * stride
        hi = heap_i + t * stride
        for j in range(k):
            if hi[j] >= 0:  # empty slots are (bound, -1)
                _heap_push(merged_d, merged_i, k, hd[j], hi[j], ids)
    _heap_sort_into(merged_d, merged_i, k, ids, out_d, out_i)


cdef void _scan_by_code_blocks(const CodeBase *base, const QueryBatch *batch, int n_threads,
                               ScanScratch *s) noexcept nogil:
    """Strategy for fewer queries than threads: one query at a time, its tables computed first (in the first slice of
    the scratch), then its blocks of codes split over the threads, each thread with its own collector (one per
    slice), merged at the end (_merge_heaps, _merge_topks)."""
    cdef int k = batch.k
    cdef int q, t
    cdef ScanJob job
    job.base = base
    job.batch = batch
    job.s = s
    for q in range(batch.nq):
        job.qconst = _query_tables(batch.tables, q, s.work, s.luts, SLOTS)
        for t in range(n_threads):
            if batch.topk:
                _start_topk_slot(s.heap_i + t * s.heap_stride, k, 0, base.ids, _bound(batch, q))
            else:
                _heap_init(s.heap_d + t * s.heap_stride, s.heap_i + t * s.heap_stride, k, _bound(batch, q))
        ock_pool_run(_scan_block_task, &job, (base.N + SCAN_BLOCK - 1) // SCAN_BLOCK, n_threads, OCK_POOL_STATIC)
        if batch.topk:
            _merge_topks(s, n_threads, base.ids, batch, q)
        else:
            _merge_heaps(s.heap_d, s.heap_i, n_threads, s.heap_stride, k, base.ids, _bound(batch, q), s.merged_d,
                         s.merged_i, batch.out_dist + <size_t>q * k, batch.out_rows + <size_t>q * k)


cdef void _scan_block_task(void *ctx, int64_t b, int tid) noexcept nogil:
    """Block b of codes of _scan_by_code_blocks' query, into thread tid's collector."""
    cdef ScanJob *j = <ScanJob *>ctx
    cdef ScanScratch *s = j.s
    cdef const CodeBase *base = j.base
    cdef Py_ssize_t start = <Py_ssize_t>b * SCAN_BLOCK
    cdef Py_ssize_t stop = _block_stop(base, start)
    cdef bint dense = _dense_block(base, start, stop)
    cdef const float *norm_terms = _block_norm_terms(
        base, start, stop, dense, s.norm_terms + tid * s.norm_stride if s.norm_terms != NULL else NULL)
    if j.batch.topk:
        _scan_query(base, s.luts, j.qconst, start, stop, dense, norm_terms,
                    _topk_slot(s.heap_i + tid * s.heap_stride, j.batch.k, 0))
    else:
        _scan_query_heap(base, s.luts, j.qconst, start, stop, dense, norm_terms, s.heap_d + tid * s.heap_stride,
                         s.heap_i + tid * s.heap_stride, j.batch.k)


cdef void _merge_topks(ScanScratch *s, int n_threads, const int64_t **ids, const QueryBatch *batch,
                       int q) noexcept nogil:
    """The k best of the threads' TopKs (slot 0 of each thread's slice) into query q's results: each thread's
    candidates (unsorted, in s.merged_d / s.merged_i's first k) offered to the merging TopK in s.merged_i."""
    cdef int k = batch.k
    cdef int t, j
    cdef TopK *merged = _topk_slot(s.merged_i, k, 0)
    cdef float *cand_d = s.merged_d
    cdef int64_t *cand_r = batch.out_rows + <size_t>q * k  # k free slots: the results are written last
    _start_topk_slot(s.merged_i, k, 0, ids, _bound(batch, q))
    for t in range(n_threads):
        ock_topk_finish(_topk_slot(s.heap_i + t * s.heap_stride, k, 0), cand_d, cand_r, 0)
        for j in range(k):
            if cand_r[j] >= 0:
                ock_topk_offer(merged, cand_d[j], cand_r[j])
    _finish_topk(merged, batch, q)


# --------------------------------------------------------------------------------------------------------------------
# The entry point: query tables (tables.h) and the scan, in one call.

def scan(TableModel model not None,          # IN the quantizer's table arrays
         const float[:, ::1] queries,        # IN (nq, P) the queries (ADC), or None
         const double[:, ::1] rotated,       # IN (nq, M*S) the vectors z of SDC, or None: z = q @ R
         const uint8_t[:, ::1] codes,        # IN (N, W)
         const float[::1] norms_f32,         # IN (N,) float32 norm terms, or None
         const uint8_t[::1] norm_codes,      # IN (N,) one-byte norm codes, or None
         const float[::1] norm_levels,       # IN (256,) levels of the one-byte norm codes (with them), or None
         const int64_t[::1] ids,             # IN (N,), or None: the id of a code is then its row number
         const uint64_t[::1] allow,          # IN (ceil(N / 64),) bitmap of the rows to scan, or None: all
         float[:, ::1] out_dist,             # OUT (nq, k) ascending; with re-ranking the exact values
         int64_t[:, ::1] out_rows,           # OUT (nq, k) the rows of the results; (inf, -1) past the last
         int n_threads,
         const float[::1] bound=None,        # IN (nq,) or None: only codes at a distance below bound[q] may
                                             #    enter the results of query q; slots left empty come out as
                                             #    (bound[q], -1). For scanning the parts of one base in turn (the
                                             #    segments of a collection): the k-th best so far, just above.
         RerankSource rerank_rows=None,      # IN the stored rows (part 0: these N rows) to re-rank from, or None
         int rerank=0,                       # IN with rerank_rows: candidates kept per query (>= k)
         const float[:, ::1] rerank_queries=None,  # IN (nq, P) the queries re-ranked (None: `queries`)
         int32_t[::1] out_flags=None,        # OUT (nq,) with rerank_rows: bad rows seen (rerank's flags)
         bint norm_scales=False):            # IN the norm terms are scales s_b multiplying each code's sum
                                             #    (metric "cosine": 1 / ||x_hat_b||) instead of terms added to it
    """The tables of each query, then an exhaustive ADC scan keeping the k best (dist, id) of each query among the
    allowed rows; writes their distances and row numbers (the caller maps rows to ids; a row keeps the stored vector
    reachable for re-ranking). With rerank_rows: keeps `rerank` candidates instead, and writes the k best of them by
    exact value (distances ascending, scores descending; rerank.h) and their rows; queries are then scanned
    RERANK_CHUNK at a time, so the candidates held are bounded whatever nq.

    Batches (nq >= n_threads) run in parallel over groups of queries: a thread computes a group's tables, then the
    group shares each block of codes (and its decoded norm terms) while the block is in cache. Fewer queries than
    threads run one at a time, in parallel over blocks of codes, each thread with its own heap, merged at the end.
    Both give the same results: a query's tables are computed by the same code wherever it runs, every distance is
    summed in the same order, and the k best of all codes do not depend on how the codes were split (_merge_heaps).
    Memory: the tables of at most MAX_GROUP queries per thread, whatever nq.

    With `bound`, each heap starts full of (bound[q], row -1) slots: a code enters only below bound[q] (a code at
    exactly bound[q] does not: the empty slot's id -1 wins the tie), so a scan of many codes that cannot enter costs
    one comparison each. A caller that scans the parts of a base in turn passes the k-th best distance so far, raised
    to the next float32, and gets exactly the k best of the union when it merges the parts' results.
    """
    cdef int nq = out_dist.shape[0]
    cdef int k = out_dist.shape[1]
    cdef int R, chunk, c0, c1
    cdef float *cand_dist = NULL
    cdef int64_t *cand_rows = NULL
    cdef const float *rq
    if nq == 0 or k == 0:
        return
    if rerank_rows is None:
        _scan_batch(model, &queries[0, 0] if queries is not None else NULL,
                    &rotated[0, 0] if rotated is not None else NULL, codes, norms_f32, norm_codes, norm_levels, ids,
                    allow, &out_dist[0, 0], &out_rows[0, 0], nq, k, n_threads,
                    &bound[0] if bound is not None else NULL, False, norm_scales)
        return
    R = rerank if rerank > k else k
    chunk = nq if nq < RERANK_CHUNK else RERANK_CHUNK
    rq = &rerank_queries[0, 0] if rerank_queries is not None else &queries[0, 0]
    try:
        cand_dist = <float *>_alloc(<size_t>chunk * R * sizeof(float), "scan's re-ranking candidates (distances)")
        cand_rows = <int64_t *>_alloc(<size_t>chunk * R * sizeof(int64_t), "scan's re-ranking candidates (rows)")
        for c0 in range(0, nq, chunk):
            c1 = c0 + chunk if c0 + chunk < nq else nq
            _scan_batch(model, &queries[c0, 0] if queries is not None else NULL,
                        &rotated[c0, 0] if rotated is not None else NULL, codes, norms_f32, norm_codes, norm_levels,
                        ids, allow, cand_dist, cand_rows, c1 - c0, R, n_threads,
                        &bound[c0] if bound is not None else NULL, True, norm_scales)
            _rerank_candidates(&rerank_rows.src, rq + <Py_ssize_t>c0 * rerank_rows.src.P, cand_rows, R, c1 - c0,
                               &out_dist[c0, 0], &out_rows[c0, 0], k, &out_flags[c0], n_threads)
    finally:
        free(cand_dist)
        free(cand_rows)


cdef int _scan_batch(TableModel model, const float *queries, const double *rotated, const uint8_t[:, ::1] codes,
                     const float[::1] norms_f32, const uint8_t[::1] norm_codes, const float[::1] norm_levels,
                     const int64_t[::1] ids, const uint64_t[::1] allow, float *out_dist, int64_t *out_rows, int nq,
                     int k, int n_threads, const float *bound, bint unordered=False, bint norm_scales=False) except -1:
    """scan's work for nq queries (its documented arguments, as pointers where they may be a part of a batch);
    `unordered`: results of a TopK in the order they came (candidates for re-ranking)."""
    cdef CodeBase base
    cdef QueryBatch batch
    cdef ScanScratch scratch
    cdef TableSource source = model._source
    cdef int group_size
    cdef bint split_codes
    if n_threads < 1:
        n_threads = 1
    source.queries = queries
    source.rotated = rotated
    base.N = codes.shape[0]
    base.W = codes.shape[1]
    base.codes = &codes[0, 0] if base.N > 0 else NULL
    base.norms = _norm_terms(norms_f32, norm_codes, norm_levels, norm_scales)
    base.ids = _one_part_ids(ids, &base.id_part)
    base.allow = &allow[0] if allow is not None and allow.shape[0] > 0 else NULL
    batch.tables = &source
    batch.lut_row = <Py_ssize_t>base.W * SLOTS
    batch.nq = nq
    batch.k = k
    batch.bound = bound
    batch.topk = k > HEAP_MAX_K
    batch.unordered = unordered
    batch.out_dist = out_dist
    batch.out_rows = out_rows
    # the small-work rule: each query's tables, then its scan of every code
    n_threads = ock_pool_threads(n_threads, nq * (COST_TABLE_VALUE * (<double>source.P * source.D + <double>source.D
                                                                      * source.C * source.K)
                                                  + COST_SCAN_BYTE * <double>base.N * base.W))
    # Splitting the codes pays only when there are idle threads (fewer queries than threads) and more than one block
    # of codes to share among them.
    split_codes = batch.nq < n_threads and base.N > SCAN_BLOCK
    # Groups: at most MAX_GROUP queries, and no more than an equal share, so that every thread gets a group.
    group_size = (batch.nq + n_threads - 1) // n_threads
    if group_size > MAX_GROUP:
        group_size = MAX_GROUP
    if not split_codes and n_threads > 1 and (batch.nq + group_size - 1) // group_size < n_threads:
        n_threads = (batch.nq + group_size - 1) // group_size  # no thread without a group (no idle scratch)
    memset(&scratch, 0, sizeof(scratch))
    try:
        _scratch_alloc(&scratch, &batch, n_threads, 1 if split_codes else group_size,
                       base.norms.f32 != NULL or base.norms.codes != NULL, split_codes)
        with nogil:
            if split_codes:
                _scan_by_code_blocks(&base, &batch, n_threads, &scratch)
            else:
                _scan_by_query_groups(&base, &batch, group_size, n_threads, &scratch)
    finally:
        _scratch_free(&scratch)
    return 0


cdef struct RerankJob:
    # _rerank_candidates' arguments, and its per-thread scratch (slice tid: `stride` bytes each)
    const ock_rr_source *rows
    const float *queries
    const int64_t *candidates
    int R, k
    float *out_dist
    int64_t *out_rows
    int32_t *out_flags
    unsigned char *scratch
    size_t stride
    const ock_rr_value_table *values


cdef int _rerank_candidates(const ock_rr_source *rows, const float *queries, int64_t *candidates, int R, int nq,
                            float *out_dist, int64_t *out_rows, int k, int32_t *out_flags,
                            int n_threads) except -1:
    """Re-rank each query's R candidate rows (-1: none) from `rows`: the k best by exact value and their rows."""
    cdef size_t stride = (ock_rr_scratch_bytes(rows.P, k) + 63) // 64 * 64 + 64 + <size_t>k * sizeof(int64_t)
    cdef unsigned char *scratch = NULL
    cdef const ock_rr_value_table *values = ock_rerank_values()
    cdef RerankJob job
    n_threads = ock_pool_threads(n_threads if n_threads < nq else nq, COST_EXACT_VALUE * nq * <double>R * rows.P)
    try:
        scratch = <unsigned char *>_alloc(<size_t>n_threads * stride, "re-ranking's scratch (per thread)")
        job.rows = rows
        job.queries = queries
        job.candidates = candidates
        job.R = R
        job.k = k
        job.out_dist = out_dist
        job.out_rows = out_rows
        job.out_flags = out_flags
        job.scratch = scratch
        job.stride = stride
        job.values = values
        with nogil:
            ock_pool_run(_rerank_candidates_task, &job, nq, n_threads, OCK_POOL_DYNAMIC)
    finally:
        free(scratch)
    return 0


cdef void _rerank_candidates_task(void *ctx, int64_t q, int tid) noexcept nogil:
    cdef RerankJob *j = <RerankJob *>ctx
    j.out_flags[q] = _rerank_rows_of(j.rows, j.queries, j.candidates, j.R, <int>q, j.out_dist, j.out_rows, j.k,
                                     j.scratch + tid * j.stride, j.values)


cdef inline int _rerank_rows_of(const ock_rr_source *rows, const float *queries, const int64_t *candidates, int R,
                                int q, float *out_dist, int64_t *out_rows, int k, unsigned char *scratch,
                                const ock_rr_value_table *values) noexcept nogil:
    """Query q of _rerank_candidates: its k best, then their positions mapped back to rows."""
    cdef int64_t *positions = <int64_t *>scratch
    cdef const int64_t *cand = candidates + <Py_ssize_t>q * R
    cdef int64_t *rows_out = out_rows + <Py_ssize_t>q * k
    cdef int j
    cdef int flag = ock_rerank_query(rows, queries + <Py_ssize_t>q * rows.P, cand, NULL, R, k,
                                     scratch + <size_t>k * sizeof(int64_t), values, out_dist + <Py_ssize_t>q * k,
                                     rows_out, positions)
    for j in range(k):
        rows_out[j] = cand[positions[j]] if positions[j] >= 0 else -1
    return flag
