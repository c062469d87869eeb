"""Compiled loops of search: the ADC scan of byte codes with a bounded top-k heap per query.

Every function here trusts its arguments (the Python layers validate and allocate): C-contiguous arrays of the
documented shapes and dtypes. Arguments are tagged IN or OUT; outputs are allocated by the caller. The loops run
without the GIL and never raise or touch Python objects: the only error is MemoryError, raised with the GIL before a
parallel region when its scratch memory cannot be allocated.
"""

from cython.parallel cimport parallel, prange, threadid
from libc.math cimport INFINITY
from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.stdlib cimport free
from libc.string cimport memcpy, memset

from ockstore._scratch cimport _alloc, _slice_items
from ockstore._topk cimport _consider, _heap_init, _heap_sort_into, _merge_heaps

cdef extern from "_tables.h" nogil:
    void ock_rotate(const float *q, const float *rot, int P, int D, double *qd, double *z)
    double ock_tables(const double *z, const float *words_t, const double *sqnorms, int M, int C, int K, int S,
                      int kind, int slots, double *acc, float *lut)


cdef enum:
    # Codes per scan block. A block's codes (SCAN_BLOCK * W bytes) and its norm terms stay in L1/L2 while every query
    # of a group scans them, so a batch reads each code from memory once per group instead of once per query.
    SCAN_BLOCK = 2048
    # Queries per group at most: a group's tables (8 KiB per query for 64-bit codes) stay in L2 next to the block of
    # codes they scan.
    MAX_GROUP = 8

# --------------------------------------------------------------------------------------------------------------------
# ADC scan with top-k.
#
# For a query with tables lut[w, k] (w = m*C + c) and a constant term, the distance to code b with norm term n_b is
#     dist = qconst + n_b + sum_w lut[w, b_w]
# accumulated in exactly this order whatever the threading, so results never depend on the number of threads.
# Each query keeps a max-heap of its k best (dist, id) pairs, ordered lexicographically: a smaller id wins a tie.

cdef extern from *:
    int _count_trailing_zeros "__builtin_ctzll"(unsigned long long) noexcept nogil


cdef void _scan_range(const uint8_t *codes, int W, int table_stride, const float *lut, float qconst,
                      const float *norm_term, const int64_t *ids, Py_ssize_t start, Py_ssize_t stop, float *hd,
                      int64_t *hr, int k) noexcept nogil:
    """Scan codes[start:stop] for one query (byte w of a code indexes lut + w * table_stride). norm_term is indexed
    from `start` (NULL when there is none)."""
    cdef Py_ssize_t i = start
    cdef int w
    cdef float d0, d1, d2, d3
    cdef const uint8_t *c0
    cdef const uint8_t *c1
    cdef const uint8_t *c2
    cdef const uint8_t *c3
    cdef const float *l
    # Four codes at a time: four independent sums, so each add need not wait for the previous one.
    while i + 4 <= stop:
        c0 = codes + <size_t>i * W
        c1 = c0 + W
        c2 = c1 + W
        c3 = c2 + W
        if norm_term != NULL:
            d0 = qconst + norm_term[i - start]
            d1 = qconst + norm_term[i - start + 1]
            d2 = qconst + norm_term[i - start + 2]
            d3 = qconst + norm_term[i - start + 3]
        else:
            d0 = qconst
            d1 = qconst
            d2 = qconst
            d3 = qconst
        for w in range(W):
            l = lut + <size_t>w * table_stride
            d0 = d0 + l[c0[w]]
            d1 = d1 + l[c1[w]]
            d2 = d2 + l[c2[w]]
            d3 = d3 + l[c3[w]]
        _consider(hd, hr, k, d0, ids, i)
        _consider(hd, hr, k, d1, ids, i + 1)
        _consider(hd, hr, k, d2, ids, i + 2)
        _consider(hd, hr, k, d3, ids, i + 3)
        i += 4
    while i < stop:
        c0 = codes + <size_t>i * W
        d0 = qconst + norm_term[i - start] if norm_term != NULL else qconst
        for w in range(W):
            d0 = d0 + lut[<size_t>w * table_stride + c0[w]]
        _consider(hd, hr, k, d0, ids, i)
        i += 1


cdef struct CodeBase:
    # The codes of a scan and what each code adds to its table entries (arrays of N rows, as given to adc_scan).
    const uint8_t *codes        # (N, W), or NULL when N == 0
    Py_ssize_t N
    int W
    const float *norms_f32      # (N,) float32 norm terms, or NULL
    const uint8_t *norm_codes   # (N,) one-byte norm codes, or NULL
    const float *norm_levels    # (256,) the levels of norm_codes (NULL with them)
    const int64_t *ids          # (N,), or NULL: the id of a code is then its row number
    const uint64_t *allow       # (ceil(N / 64),) bitmap of the rows to scan (bit r % 64 of word r // 64), or NULL


cdef struct QueryBatch:
    # The queries of a scan and where their results go.
    const float *luts           # (nq, lut_row): the tables of query q start at luts + q * lut_row
    Py_ssize_t lut_row
    int table_stride            # slots per code byte within the tables of a query
    const float *qconst         # (nq,)
    int nq
    int k
    float *out_dist             # (nq, k)
    int64_t *out_rows           # (nq, k): row numbers of the results (-1 for padding)


cdef struct ScanScratch:
    # Thread-local scratch of a scan, allocated with the GIL before its parallel region: thread t works in slice t
    # of each block (see _slice_items). NULL pointers are blocks not needed (or not allocated yet).
    float *norm_terms           # n_threads slices of SCAN_BLOCK decoded norm terms; NULL when codes have none
    Py_ssize_t norm_stride      # items from one thread's slice of norm_terms to the next
    float *heap_d               # n_threads slices of `heaps` max-heaps of k (dist, id) pairs, one after another
    int64_t *heap_i
    Py_ssize_t heap_stride      # items from one thread's heaps to the next (in heap_d as in heap_i)
    float *merged_d             # (k,) the heap that merges the threads' heaps of one query, or NULL
    int64_t *merged_i


cdef int _scratch_alloc(ScanScratch *s, int n_threads, int heaps, int k, bint has_norm, bint merge) except -1:
    """Fill s (zeroed by the caller) with blocks for n_threads threads of `heaps` heaps each; the merge heap when
    `merge`. On MemoryError the blocks allocated so far stay in s, for _scratch_free."""
    s.norm_stride = _slice_items(SCAN_BLOCK)
    s.heap_stride = _slice_items(<Py_ssize_t>heaps * k)
    if has_norm:
        s.norm_terms = <float *>_alloc(<size_t>n_threads * s.norm_stride * sizeof(float),
                                       "adc_scan's decoded norm terms of a block (per thread)")
    s.heap_d = <float *>_alloc(<size_t>n_threads * s.heap_stride * sizeof(float),
                               "adc_scan's top-k heaps (distances, per thread)")
    s.heap_i = <int64_t *>_alloc(<size_t>n_threads * s.heap_stride * sizeof(int64_t),
                                 "adc_scan's top-k heaps (ids, per thread)")
    if merge:
        s.merged_d = <float *>_alloc(<size_t>k * sizeof(float), "adc_scan's merged top-k heap (distances)")
        s.merged_i = <int64_t *>_alloc(<size_t>k * sizeof(int64_t), "adc_scan's merged top-k heap (ids)")
    return 0


cdef void _scratch_free(ScanScratch *s) noexcept nogil:
    free(s.norm_terms)
    free(s.heap_d)
    free(s.heap_i)
    free(s.merged_d)
    free(s.merged_i)


cdef inline Py_ssize_t _block_stop(const CodeBase *base, Py_ssize_t start) noexcept nogil:
    """The end of the block of codes that begins at `start`."""
    return start + SCAN_BLOCK if start + SCAN_BLOCK < base.N else base.N


cdef const float *_block_norm_terms(const CodeBase *base, Py_ssize_t start, Py_ssize_t stop,
                                    float *buf) noexcept nogil:
    """The norm terms of codes start..stop-1 written to buf (float32 norms, or the level of each one-byte code) and
    returned; NULL, with buf untouched, when the codes have no norm term."""
    cdef Py_ssize_t j
    if base.allow != NULL:
        return NULL  # _scan_allowed reads the norm terms of the rows it scans
    if base.norms_f32 != NULL:
        memcpy(buf, base.norms_f32 + start, (stop - start) * sizeof(float))
    elif base.norm_codes != NULL:
        for j in range(stop - start):
            buf[j] = base.norm_levels[base.norm_codes[start + j]]
    else:
        return NULL
    return buf


cdef void _scan_allowed(const CodeBase *base, const float *lut, int table_stride, float qconst, Py_ssize_t start,
                        Py_ssize_t stop, float *hd, int64_t *hr, int k) noexcept nogil:
    """Scan the rows of start..stop-1 whose bit is set in base.allow (start is a multiple of 64; bits past N are
    zero). The bitmap is read 64 rows at a time and a row's code is read only when its bit is set, so the cost falls
    with the fraction of rows allowed. Norm terms are read per row (decoding a block's would cost more than the
    few rows scanned)."""
    cdef Py_ssize_t first = start
    cdef Py_ssize_t row
    cdef uint64_t word
    cdef int w
    cdef float d
    cdef const uint8_t *c
    while first < stop:
        word = base.allow[first >> 6]
        while word != 0:
            row = first + _count_trailing_zeros(word)
            word = word & (word - 1)
            if row >= stop:
                break
            c = base.codes + <size_t>row * base.W
            d = qconst
            if base.norms_f32 != NULL:
                d = d + base.norms_f32[row]
            elif base.norm_codes != NULL:
                d = d + base.norm_levels[base.norm_codes[row]]
            for w in range(base.W):
                d = d + lut[<size_t>w * table_stride + c[w]]
            _consider(hd, hr, k, d, base.ids, row)
        first += 64


cdef inline void _scan_query(const CodeBase *base, const QueryBatch *batch, int q, Py_ssize_t start,
                             Py_ssize_t stop, const float *norm_terms, float *hd, int64_t *hi) noexcept nogil:
    """Offer codes start..stop-1 (the allowed ones) to the heap (hd, hi) of query q; norm_terms from
    _block_norm_terms (unused with a bitmap)."""
    if base.allow != NULL:
        _scan_allowed(base, batch.luts + q * batch.lut_row, batch.table_stride, batch.qconst[q], start, stop, hd, hi,
                      batch.k)
    else:
        _scan_range(base.codes, base.W, batch.table_stride, batch.luts + q * batch.lut_row, batch.qconst[q],
                    norm_terms, base.ids, start, stop, hd, hi, batch.k)


cdef void _scan_group(const CodeBase *base, const QueryBatch *batch, int q0, int q1, float *norm_buf, float *hd,
                      int64_t *hi) noexcept nogil:
    """Queries q0..q1-1, every block of codes in turn, each block scanned by all of them while it is in cache; the
    heap of query q is (hd, hi) + (q - q0) * k. Writes their sorted results."""
    cdef int k = batch.k
    cdef int q
    cdef Py_ssize_t start, stop
    cdef const float *norm_terms
    for q in range(q1 - q0):
        _heap_init(hd + <size_t>q * k, hi + <size_t>q * k, k)
    start = 0
    while start < base.N:
        stop = _block_stop(base, start)
        norm_terms = _block_norm_terms(base, start, stop, norm_buf)
        for q in range(q0, q1):
            _scan_query(base, batch, q, start, stop, norm_terms, hd + <size_t>(q - q0) * k, hi + <size_t>(q - q0) * k)
        start = stop
    for q in range(q0, q1):
        _heap_sort_into(hd + <size_t>(q - q0) * k, hi + <size_t>(q - q0) * k, k, base.ids,
                        batch.out_dist + <size_t>q * k, batch.out_rows + <size_t>q * k)


cdef void _scan_by_query_groups(const CodeBase *base, const QueryBatch *batch, int group_size, int n_threads,
                                ScanScratch *scratch) noexcept nogil:
    """Strategy for batches: parallel over groups of group_size queries (the last may be smaller), each group
    scanned by one thread (_scan_group), in the thread's slice of the scratch."""
    cdef int n_groups = (batch.nq + group_size - 1) // group_size
    cdef int g, q0, q1, tid
    cdef float *norm_buf
    cdef float *hd
    cdef int64_t *hi
    with parallel(num_threads=n_threads):
        tid = threadid()
        norm_buf = scratch.norm_terms + tid * scratch.norm_stride if scratch.norm_terms != NULL else NULL
        hd = scratch.heap_d + tid * scratch.heap_stride
        hi = scratch.heap_i + tid * scratch.heap_stride
        for g in prange(n_groups, schedule='dynamic'):
            q0 = g * group_size
            q1 = q0 + group_size if q0 + group_size < batch.nq else batch.nq
            _scan_group(base, batch, q0, q1, norm_buf, hd, hi)


cdef void _scan_by_code_blocks(const CodeBase *base, const QueryBatch *batch, int n_threads,
                               ScanScratch *scratch) noexcept nogil:
    """Strategy for fewer queries than threads: one query at a time, its blocks of codes split over the threads,
    each thread with its own heap (one per slice of the scratch), merged at the end (_merge_heaps)."""
    cdef int k = batch.k
    cdef Py_ssize_t n_blocks = (base.N + SCAN_BLOCK - 1) // SCAN_BLOCK
    cdef Py_ssize_t b, start, stop
    cdef int q, t, tid
    cdef float *norm_buf
    cdef float *hd
    cdef int64_t *hi
    for q in range(batch.nq):
        for t in range(n_threads):
            _heap_init(scratch.heap_d + t * scratch.heap_stride, scratch.heap_i + t * scratch.heap_stride, k)
        with parallel(num_threads=n_threads):
            tid = threadid()
            norm_buf = scratch.norm_terms + tid * scratch.norm_stride if scratch.norm_terms != NULL else NULL
            hd = scratch.heap_d + tid * scratch.heap_stride
            hi = scratch.heap_i + tid * scratch.heap_stride
            for b in prange(n_blocks, schedule='static'):
                start = b * SCAN_BLOCK
                stop = _block_stop(base, start)
                _scan_query(base, batch, q, start, stop, _block_norm_terms(base, start, stop, norm_buf), hd, hi)
        _merge_heaps(scratch.heap_d, scratch.heap_i, n_threads, scratch.heap_stride, k, base.ids, scratch.merged_d,
                     scratch.merged_i, batch.out_dist + <size_t>q * k, batch.out_rows + <size_t>q * k)


def adc_scan(const uint8_t[:, ::1] codes,        # IN (N, W)
             const float[:, ::1] luts,           # IN (nq, W*table_stride): lut of query q, byte w, word k at
                                                 #    [q, w*table_stride + k]
             const float[::1] qconst,            # IN (nq,): the constant term of each query
             const float[::1] norms_f32,         # IN (N,) float32 norm terms, or (0,)
             const uint8_t[::1] norm_codes,      # IN (N,) one-byte norm codes, or (0,)
             const float[::1] norm_levels,       # IN (256,) levels of the one-byte norm codes, or (0,)
             const int64_t[::1] ids,             # IN (N,), or (0,): the id of a code is then its row number
             const uint64_t[::1] allow,          # IN (ceil(N / 64),) bitmap of the rows to scan, or (0,): all
             int table_stride,                   # IN slots per code byte in a table (256: any byte is in range)
             float[:, ::1] out_dist,             # OUT (nq, k) ascending
             int64_t[:, ::1] out_rows,           # OUT (nq, k) the rows of the results; (inf, -1) past the last
             int n_threads):
    """Exhaustive ADC scan keeping the k best (dist, id) of each query, among the allowed rows; writes their
    distances and row numbers (the caller maps rows to ids; a row keeps the stored vector reachable for re-ranking).

    Batches (nq >= n_threads) run in parallel over groups of queries; a group shares each block of codes (and its
    decoded norm terms) while the block is in cache. Fewer queries than threads run in parallel over blocks of codes,
    each thread with its own heap, merged at the end. Both give the same results: every distance is summed in the
    same order, and the k best of all codes do not depend on how the codes were split (see _merge_heaps).
    """
    cdef CodeBase base
    cdef QueryBatch batch
    cdef ScanScratch scratch
    cdef int group_size
    cdef bint split_codes
    if luts.shape[0] == 0 or out_dist.shape[1] == 0:
        return
    if n_threads < 1:
        n_threads = 1
    base.N = codes.shape[0]
    base.W = codes.shape[1]
    base.codes = &codes[0, 0] if base.N > 0 else NULL
    base.norms_f32 = &norms_f32[0] if norms_f32.shape[0] > 0 else NULL
    base.norm_codes = &norm_codes[0] if base.norms_f32 == NULL and norm_codes.shape[0] > 0 else NULL
    base.norm_levels = &norm_levels[0] if base.norm_codes != NULL else NULL
    base.ids = &ids[0] if ids.shape[0] > 0 else NULL
    base.allow = &allow[0] if allow.shape[0] > 0 else NULL
    batch.luts = &luts[0, 0]
    batch.lut_row = luts.shape[1]
    batch.table_stride = table_stride
    batch.qconst = &qconst[0]
    batch.nq = luts.shape[0]
    batch.k = out_dist.shape[1]
    batch.out_dist = &out_dist[0, 0]
    batch.out_rows = &out_rows[0, 0]
    # Splitting the codes pays only when there are idle threads (fewer queries than threads) and more than one block
    # of codes to share among them.
    split_codes = batch.nq < n_threads and base.N > SCAN_BLOCK
    # Groups: at most MAX_GROUP queries, and no more than an equal share, so that every thread gets a group.
    group_size = (batch.nq + n_threads - 1) // n_threads
    if group_size > MAX_GROUP:
        group_size = MAX_GROUP
    memset(&scratch, 0, sizeof(scratch))
    try:
        _scratch_alloc(&scratch, n_threads, 1 if split_codes else group_size, batch.k,
                       base.norms_f32 != NULL or base.norm_codes != NULL, split_codes)
        with nogil:
            if split_codes:
                _scan_by_code_blocks(&base, &batch, n_threads, &scratch)
            else:
                _scan_by_query_groups(&base, &batch, group_size, n_threads, &scratch)
    finally:
        _scratch_free(&scratch)


# --------------------------------------------------------------------------------------------------------------------
# Query tables (_tables.h): the tables of each query, from the query (ADC) or from a given rotated vector (SDC).

def make_tables(const float[:, ::1] queries,       # IN (nq, P), or (nq, 0) when `rotated` is given
                const double[:, ::1] rotated,      # IN (nq, M*S) the vectors z of SDC, or (0, 0): z = q @ rot_pad
                const float[:, ::1] rot_pad,       # IN (P, M*S)
                const float[:, :, ::1] words_t,    # IN (M, S, C*K)
                const double[:, ::1] sqnorms,      # IN (M, C*K) squared norms of the words (kind 1 only)
                int n_codebooks,                   # IN C
                int kind,                          # IN 0, 1 or 2: see OCK_TABLE_* in _tables.h
                float[:, ::1] luts,                # OUT (nq, M*C*slots)
                float[::1] qconst):                # OUT (nq,)
    """Tables and constant terms of a batch of queries, one query after another (each query's arithmetic is the
    same alone or in a batch)."""
    cdef int nq = luts.shape[0]
    cdef int M = words_t.shape[0]
    cdef int S = words_t.shape[1]
    cdef int C = n_codebooks
    cdef int K = words_t.shape[2] // n_codebooks
    cdef int D = M * S
    cdef int slots = luts.shape[1] // (M * C)
    cdef int P = rot_pad.shape[0]
    cdef bint given = rotated.shape[0] > 0
    cdef double *z = NULL
    cdef double *acc = NULL
    cdef double *qd = NULL
    cdef int q
    if nq == 0:
        return
    try:
        z = <double *>_alloc(<size_t>D * sizeof(double), "make_tables's rotated query")
        acc = <double *>_alloc(<size_t>C * K * sizeof(double), "make_tables's dot products")
        qd = <double *>_alloc(<size_t>P * sizeof(double), "make_tables's query in float64")
        with nogil:
            for q in range(nq):
                if given:
                    memcpy(z, &rotated[q, 0], D * sizeof(double))
                else:
                    ock_rotate(&queries[q, 0], &rot_pad[0, 0], P, D, qd, z)
                qconst[q] = <float>ock_tables(z, &words_t[0, 0, 0], &sqnorms[0, 0], M, C, K, S, kind, slots, acc,
                                              &luts[q, 0])
    finally:
        free(z)
        free(acc)
        free(qd)
