"""Compiled loops of search: the query tables (_tables.h) and the ADC scan of byte codes with a bounded top-k heap per
query, in one call per search.

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
from ockstore._topk cimport _id_of, _worse

cdef extern from "_tables.h" nogil:
    enum: OCK_PANEL
    void ock_rotate(const float *q, const float *rot, int P, int D, double *qd, double *z)
    double ock_tables(const double *z, const float *words_t, const double *sqnorms, int M, int C, int K, int S,
                      int kind, int slots, double *acc, float *lut)

# Columns per panel of the model arrays the table kernel reads (search.panels writes them in this layout).
TABLE_PANEL = OCK_PANEL
# Table slots per code byte.
TABLE_SLOTS = SLOTS


cdef enum:
    # Table slots per code byte, whatever K is: a byte can only index 0..255, so the scan never reads past a table
    # (slots K..255 hold +inf). A constant, so that the scan addresses table entries by displacement: ~10% faster
    # than a stride in a register at 256-bit codes.
    SLOTS = 256
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

# --------------------------------------------------------------------------------------------------------------------
# ADC scan with top-k.
#
# For a query with tables lut[w, k] (w = m*C + c) and a constant term, the distance to code b with norm term n_b is
#     dist = qconst + n_b + sum_w lut[w, b_w]
# accumulated in exactly this order whatever the threading, so results never depend on the number of threads. With a
# norm *scale* instead (metric "cosine": s_b = 1 / ||x_hat_b||, the tables holding -z.d), the value is
#     dist = (qconst + sum_w lut[w, b_w]) * s_b            = -<q, x_hat_b> / ||x_hat_b||
# one multiply per code after its sum (the same order of adds).
# Each query keeps a max-heap of its k best (dist, id) pairs, ordered lexicographically: a smaller id wins a tie.

cdef extern from *:
    int _count_trailing_zeros "__builtin_ctzll"(unsigned long long) noexcept nogil
    int _popcount "__builtin_popcountll"(unsigned long long) noexcept nogil

cdef extern from *:
    """
    #include <string.h>
    /* Eight code bytes as one integer, byte j in bits 8j..8j+7 (the first byte lowest) whatever the byte order. */
    static inline unsigned long long ock_load_bytes8(const unsigned char *p) {
        unsigned long long v;
        memcpy(&v, p, 8);
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        v = __builtin_bswap64(v);
    #endif
        return v;
    }
    """
    uint64_t _load_bytes8 "ock_load_bytes8"(const uint8_t *p) noexcept nogil


cdef void _heap_replace_top(float *hd, int64_t *hr, int k, float d, int64_t row,
                            const int64_t *ids) noexcept nogil:
    """Replace the worst element (the root) of a max-heap by (d, row) and restore the heap."""
    cdef int pos = 0
    cdef int child
    while True:
        child = 2 * pos + 1
        if child >= k:
            break
        if child + 1 < k and _worse(hd[child + 1], hr[child + 1], hd[child], hr[child], ids):
            child += 1
        if not _worse(hd[child], hr[child], d, row, ids):
            break
        hd[pos] = hd[child]
        hr[pos] = hr[child]
        pos = child
    hd[pos] = d
    hr[pos] = row


cdef inline void _heap_push(float *hd, int64_t *hr, int k, float d, int64_t row, const int64_t *ids) noexcept nogil:
    if d < hd[0] or (d == hd[0] and _id_of(ids, row) < _id_of(ids, hr[0])):
        _heap_replace_top(hd, hr, k, d, row, ids)


cdef inline void _consider(float *hd, int64_t *hr, int k, float d, const int64_t *ids, Py_ssize_t row,
                           const uint64_t *allow) noexcept nogil:
    """Offer code `row` at distance d, if the bitmap `allow` (NULL: every row) allows it. Almost every code fails the
    first test, so its id (8 bytes, as much memory traffic as the code itself) and its bit are only read for the few
    that may enter."""
    if d <= hd[0] and (allow == NULL or (allow[row >> 6] >> (row & 63)) & 1):
        _heap_push(hd, hr, k, d, row, ids)


cdef void _heap_init(float *hd, int64_t *hr, int k, float bound) noexcept nogil:
    """k empty slots (bound, row -1): only a code at a distance below `bound` enters (INFINITY: any real code)."""
    cdef int j
    for j in range(k):
        hd[j] = bound
        hr[j] = -1


cdef void _heap_sort_into(float *hd, int64_t *hr, int k, const int64_t *ids, float *out_d,
                          int64_t *out_r) noexcept nogil:
    """Write the heap's elements to out in ascending (dist, id) order; the heap is consumed.

    Empty slots hold (inf, row -1); every real result has a finite distance, so they sort last.
    """
    cdef int size = k
    cdef float d
    cdef int64_t row
    while size > 0:
        # The root is the worst remaining: it goes to the end.
        out_d[size - 1] = hd[0]
        out_r[size - 1] = hr[0]
        size -= 1
        if size == 0:
            break
        d = hd[size]
        row = hr[size]
        _heap_replace_top(hd, hr, size, d, row, ids)


cdef void _scan_range(const uint8_t *codes, int W, const float *lut, float qconst,
                      const float *norm_term, bint scale, const int64_t *ids, const uint64_t *allow, Py_ssize_t start,
                      Py_ssize_t stop, float *hd, int64_t *hr, int k) noexcept nogil:
    """Scan codes[start:stop] for one query (byte w of a code indexes lut + w * SLOTS). norm_term is indexed
    from `start` (NULL when there is none). With a bitmap `allow`, every distance is computed and only the allowed
    rows are offered: the way to scan a block where most rows are allowed (see _dense_block)."""
    cdef Py_ssize_t i = start
    cdef int w, j
    cdef float d0, d1, d2, d3
    cdef uint64_t b0, b1, b2, b3
    cdef const uint8_t *c0
    cdef const uint8_t *c1
    cdef const uint8_t *c2
    cdef const uint8_t *c3
    cdef const float *l
    # Four codes at a time: four independent sums, so each add need not wait for the previous one. Their bytes are
    # read eight at a time (one load instead of eight; the loads of table entries are what bounds this loop). Every
    # sum still runs over w = 0, 1, ..., W-1 in order.
    while i + 4 <= stop:
        c0 = codes + <size_t>i * W
        c1 = c0 + W
        c2 = c1 + W
        c3 = c2 + W
        if norm_term != NULL and not scale:
            d0 = qconst + norm_term[i - start]
            d1 = qconst + norm_term[i - start + 1]
            d2 = qconst + norm_term[i - start + 2]
            d3 = qconst + norm_term[i - start + 3]
        else:
            d0 = qconst
            d1 = qconst
            d2 = qconst
            d3 = qconst
        l = lut
        w = 0
        while w + 8 <= W:
            b0 = _load_bytes8(c0 + w)
            b1 = _load_bytes8(c1 + w)
            b2 = _load_bytes8(c2 + w)
            b3 = _load_bytes8(c3 + w)
            for j in range(8):
                d0 = d0 + l[b0 & 255]
                d1 = d1 + l[b1 & 255]
                d2 = d2 + l[b2 & 255]
                d3 = d3 + l[b3 & 255]
                b0 = b0 >> 8
                b1 = b1 >> 8
                b2 = b2 >> 8
                b3 = b3 >> 8
                l = l + SLOTS
            w += 8
        while w < W:
            d0 = d0 + l[c0[w]]
            d1 = d1 + l[c1[w]]
            d2 = d2 + l[c2[w]]
            d3 = d3 + l[c3[w]]
            l = l + SLOTS
            w += 1
        if scale:
            d0 = d0 * norm_term[i - start]
            d1 = d1 * norm_term[i - start + 1]
            d2 = d2 * norm_term[i - start + 2]
            d3 = d3 * norm_term[i - start + 3]
        _consider(hd, hr, k, d0, ids, i, allow)
        _consider(hd, hr, k, d1, ids, i + 1, allow)
        _consider(hd, hr, k, d2, ids, i + 2, allow)
        _consider(hd, hr, k, d3, ids, i + 3, allow)
        i += 4
    while i < stop:
        c0 = codes + <size_t>i * W
        d0 = qconst + norm_term[i - start] if norm_term != NULL and not scale else qconst
        for w in range(W):
            d0 = d0 + lut[<size_t>w * SLOTS + c0[w]]
        if scale:
            d0 = d0 * norm_term[i - start]
        _consider(hd, hr, k, d0, ids, i, allow)
        i += 1


cdef struct CodeBase:
    # The codes of a scan and what each code adds to its table entries (arrays of N rows, as given to scan).
    const uint8_t *codes        # (N, W), or NULL when N == 0
    Py_ssize_t N
    int W
    const float *norms_f32      # (N,) float32 norm terms, or NULL
    const uint8_t *norm_codes   # (N,) one-byte norm codes, or NULL
    const float *norm_levels    # (256,) the levels of norm_codes (NULL with them)
    const int64_t *ids          # (N,), or NULL: the id of a code is then its row number
    const uint64_t *allow       # (ceil(N / 64),) bitmap of the rows to scan (bit r % 64 of word r // 64), or NULL
    bint norm_scales            # the norm terms (norms_f32, or norm_levels[norm_codes]) multiply the sum: s_b


cdef struct TableSource:
    # What the tables of a scan's queries are computed from (_tables.h): the model, in panels, and the queries.
    const float *rot            # (P, D) rotation with padding columns, D = M*S
    const float *words          # M blocks of the S x C*K matrix of subspace m's words
    const double *sqnorms       # (M, C*K) squared norms of the words (OCK_TABLE_L2_WHOLE only)
    int P, D, M, C, K, S
    int kind                    # OCK_TABLE_*
    const float *queries        # (nq, P) the queries (ADC), or NULL
    const double *rotated       # (nq, D) the rotated vectors z (SDC: the queries' reconstructions), or NULL


cdef struct QueryBatch:
    # The queries of a scan and where their results go.
    const TableSource *tables
    Py_ssize_t lut_row          # floats of one query's tables: W * SLOTS
    int nq
    int k
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
    s.heap_stride = _slice_items(<Py_ssize_t>queries * batch.k)
    s.lut_stride = _slice_items(<Py_ssize_t>queries * batch.lut_row)
    s.qconst_stride = _slice_items(queries)
    s.work_stride = _slice_items(<Py_ssize_t>t.D + <Py_ssize_t>t.C * t.K + t.P)
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
        s.merged_i = <int64_t *>_alloc(<size_t>batch.k * sizeof(int64_t), "scan's merged top-k heap (ids)")
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


cdef float _query_tables(const TableSource *t, Py_ssize_t q, double *work, float *lut) noexcept nogil:
    """The tables of query q written to lut (W * SLOTS floats); returns its constant term. work: scratch of
    D + C*K + P doubles. The same arithmetic for a query whatever the batch and the thread that computes it."""
    cdef double *z = work
    cdef double *acc = work + t.D
    cdef double *qd = acc + <Py_ssize_t>t.C * t.K
    if t.rotated != NULL:
        memcpy(z, t.rotated + q * t.D, t.D * sizeof(double))
    else:
        ock_rotate(t.queries + q * t.P, t.rot, t.P, t.D, qd, z)
    return <float>ock_tables(z, t.words, t.sqnorms, t.M, t.C, t.K, t.S, t.kind, SLOTS, acc, lut)


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
        return NULL  # _scan_allowed reads the norm terms of the rows it scans
    if base.norms_f32 != NULL:
        memcpy(buf, base.norms_f32 + start, (stop - start) * sizeof(float))
    elif base.norm_codes != NULL:
        for j in range(stop - start):
            buf[j] = base.norm_levels[base.norm_codes[start + j]]
    else:
        return NULL
    return buf


cdef void _scan_allowed(const CodeBase *base, const float *lut, float qconst, Py_ssize_t start,
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
            if not base.norm_scales:
                if base.norms_f32 != NULL:
                    d = d + base.norms_f32[row]
                elif base.norm_codes != NULL:
                    d = d + base.norm_levels[base.norm_codes[row]]
            for w in range(base.W):
                d = d + lut[<size_t>w * SLOTS + c[w]]
            if base.norm_scales:
                d = d * (base.norms_f32[row] if base.norms_f32 != NULL else base.norm_levels[base.norm_codes[row]])
            _consider(hd, hr, k, d, base.ids, row, NULL)
        first += 64


cdef inline void _scan_query(const CodeBase *base, const float *lut, float qconst, int k,
                             Py_ssize_t start, Py_ssize_t stop, bint dense, const float *norm_terms, float *hd,
                             int64_t *hi) noexcept nogil:
    """Offer codes start..stop-1 (the allowed ones) to the heap (hd, hi) of a query with tables lut and constant term
    qconst; `dense` and norm_terms from _dense_block and _block_norm_terms (norm_terms unused when not dense)."""
    if not dense:
        _scan_allowed(base, lut, qconst, start, stop, hd, hi, k)
    else:
        _scan_range(base.codes, base.W, lut, qconst, norm_terms, base.norm_scales, base.ids, base.allow, start, stop,
                    hd, hi, k)


cdef inline float _bound(const QueryBatch *batch, int q) noexcept nogil:
    return batch.bound[q] if batch.bound != NULL else INFINITY


cdef void _scan_group(const CodeBase *base, const QueryBatch *batch, int q0, int q1, float *norm_buf, float *hd,
                      int64_t *hi, float *luts, float *qconst, double *work) noexcept nogil:
    """Queries q0..q1-1: their tables (computed into luts, qconst), then every block of codes in turn, each block
    scanned by all of them while it is in cache; the heap of query q is (hd, hi) + (q - q0) * k. Writes their sorted
    results."""
    cdef int k = batch.k
    cdef int q
    cdef Py_ssize_t start, stop
    cdef bint dense
    cdef const float *norm_terms
    for q in range(q1 - q0):
        qconst[q] = _query_tables(batch.tables, q0 + q, work, luts + q * batch.lut_row)
        _heap_init(hd + <size_t>q * k, hi + <size_t>q * k, k, _bound(batch, q0 + q))
    start = 0
    while start < base.N:
        stop = _block_stop(base, start)
        dense = _dense_block(base, start, stop)
        norm_terms = _block_norm_terms(base, start, stop, dense, norm_buf)
        for q in range(q1 - q0):
            _scan_query(base, luts + q * batch.lut_row, qconst[q], k, start, stop, dense, norm_terms,
                        hd + <size_t>q * k, hi + <size_t>q * k)
        start = stop
    for q in range(q0, q1):
        _heap_sort_into(hd + <size_t>(q - q0) * k, hi + <size_t>(q - q0) * k, k, base.ids,
                        batch.out_dist + <size_t>q * k, batch.out_rows + <size_t>q * k)


cdef void _scan_by_query_groups(const CodeBase *base, const QueryBatch *batch, int group_size, int n_threads,
                                ScanScratch *s) noexcept nogil:
    """Strategy for batches: parallel over groups of group_size queries (the last may be smaller), each group
    scanned by one thread (_scan_group), in the thread's slice of the scratch. One thread runs the groups in turn
    without a parallel region (starting one costs more than a small scan)."""
    cdef int n_groups = (batch.nq + group_size - 1) // group_size
    cdef int g, q0, q1, tid
    cdef float *norm_buf
    if n_threads == 1:
        for g in range(n_groups):
            q0 = g * group_size
            q1 = q0 + group_size if q0 + group_size < batch.nq else batch.nq
            _scan_group(base, batch, q0, q1, s.norm_terms, s.heap_d, s.heap_i, s.luts, s.qconst, s.work)
        return
    with parallel(num_threads=n_threads):
        tid = threadid()
        norm_buf = s.norm_terms + tid * s.norm_stride if s.norm_terms != NULL else NULL
        for g in prange(n_groups, schedule='dynamic'):
            q0 = g * group_size
            q1 = q0 + group_size if q0 + group_size < batch.nq else batch.nq
            _scan_group(base, batch, q0, q1, norm_buf, s.heap_d + tid * s.heap_stride, s.heap_i + tid * s.heap_stride,
                        s.luts + tid * s.lut_stride, s.qconst + tid * s.qconst_stride, s.work + tid * s.work_stride)


cdef void _merge_heaps(const float *heap_d, const int64_t *heap_i, int n_heaps, Py_ssize_t stride, int k,
                       const int64_t *ids, float bound, float *merged_d, int64_t *merged_i, float *out_d,
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
    the scratch), then its blocks of codes split over the threads, each thread with its own heap (one per slice),
    merged at the end (_merge_heaps)."""
    cdef int k = batch.k
    cdef Py_ssize_t n_blocks = (base.N + SCAN_BLOCK - 1) // SCAN_BLOCK
    cdef Py_ssize_t b, start, stop
    cdef bint dense
    cdef int q, t, tid
    cdef float *norm_buf
    cdef float qconst
    for q in range(batch.nq):
        qconst = _query_tables(batch.tables, q, s.work, s.luts)
        for t in range(n_threads):
            _heap_init(s.heap_d + t * s.heap_stride, s.heap_i + t * s.heap_stride, k, _bound(batch, q))
        with parallel(num_threads=n_threads):
            tid = threadid()
            norm_buf = s.norm_terms + tid * s.norm_stride if s.norm_terms != NULL else NULL
            for b in prange(n_blocks, schedule='static'):
                start = b * SCAN_BLOCK
                stop = _block_stop(base, start)
                dense = _dense_block(base, start, stop)
                _scan_query(base, s.luts, qconst, k, start, stop, dense,
                            _block_norm_terms(base, start, stop, dense, norm_buf), s.heap_d + tid * s.heap_stride,
                            s.heap_i + tid * s.heap_stride)
        _merge_heaps(s.heap_d, s.heap_i, n_threads, s.heap_stride, k, base.ids, _bound(batch, q), s.merged_d,
                     s.merged_i, batch.out_dist + <size_t>q * k, batch.out_rows + <size_t>q * k)


# --------------------------------------------------------------------------------------------------------------------
# The entry point: query tables (_tables.h) and the scan, in one call.

cdef class TableModel:
    """The model arrays that query tables are computed from, in the table kernel's panel layout (search.panels),
    held as typed views for the life of the object: a search converts none of them again.

    rot : (P * D,) float32, the (P, D) padded rotation in panels, D = M*S
    words : (M, S * C*K) float32, row m the (S, C*K) matrix words_t[m] in panels
    sqnorms : (M, C*K) float64, the words' squared norms (read by kind 1 only)
    n_codebooks C, sub_dim S, kind (OCK_TABLE_* of _tables.h)
    """

    cdef const float[::1] _rot
    cdef const float[:, ::1] _words
    cdef const double[:, ::1] _sqnorms
    cdef TableSource _source

    def __cinit__(self, const float[::1] rot, const float[:, ::1] words, const double[:, ::1] sqnorms,
                  int n_codebooks, int sub_dim, int kind):
        self._rot = rot
        self._words = words
        self._sqnorms = sqnorms
        memset(&self._source, 0, sizeof(TableSource))
        self._source.M = words.shape[0]
        self._source.S = sub_dim
        self._source.C = n_codebooks
        self._source.K = sqnorms.shape[1] // n_codebooks
        self._source.D = self._source.M * sub_dim
        self._source.P = rot.shape[0] // self._source.D
        self._source.kind = kind
        self._source.rot = &rot[0]
        self._source.words = &words[0, 0]
        self._source.sqnorms = &sqnorms[0, 0]


def scan(TableModel model,                   # IN the quantizer's table arrays
         const float[:, ::1] queries,        # IN (nq, P) the queries (ADC), or None
         const double[:, ::1] rotated,       # IN (nq, M*S) the vectors z of SDC, or None: z = q @ R
         const uint8_t[:, ::1] codes,        # IN (N, W)
         const float[::1] norms_f32,         # IN (N,) float32 norm terms, or None
         const uint8_t[::1] norm_codes,      # IN (N,) one-byte norm codes, or None
         const float[::1] norm_levels,       # IN (256,) levels of the one-byte norm codes (with them), or None
         const int64_t[::1] ids,             # IN (N,), or None: the id of a code is then its row number
         const uint64_t[::1] allow,          # IN (ceil(N / 64),) bitmap of the rows to scan, or None: all
         float[:, ::1] out_dist,             # OUT (nq, k) ascending
         int64_t[:, ::1] out_rows,           # OUT (nq, k) the rows of the results; (inf, -1) past the last
         int n_threads,
         const float[::1] bound=None,        # IN (nq,) or None: only codes at a distance below bound[q] may
                                             #    enter the results of query q; slots left empty come out as
                                             #    (bound[q], -1). For scanning the parts of one base in turn (the
                                             #    segments of a collection): the k-th best so far, just above.
         bint norm_scales=False):            # IN the norm terms are scales s_b that multiply each code's sum
                                             #    (metric "cosine": 1 / ||x_hat_b||) instead of terms added to it
    """The tables of each query, then an exhaustive ADC scan keeping the k best (dist, id) of each query among the
    allowed rows; writes their distances and row numbers (the caller maps rows to ids; a row keeps the stored vector
    reachable for re-ranking). Arguments that are None are passed as None (no conversion).

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
    cdef CodeBase base
    cdef QueryBatch batch
    cdef ScanScratch scratch
    cdef TableSource source = model._source
    cdef int group_size
    cdef bint split_codes
    if out_dist.shape[0] == 0 or out_dist.shape[1] == 0:
        return
    if n_threads < 1:
        n_threads = 1
    source.queries = &queries[0, 0] if queries is not None else NULL
    source.rotated = &rotated[0, 0] if rotated is not None else NULL
    base.N = codes.shape[0]
    base.W = codes.shape[1]
    base.codes = &codes[0, 0] if base.N > 0 else NULL
    base.norms_f32 = &norms_f32[0] if norms_f32 is not None and norms_f32.shape[0] > 0 else NULL
    base.norm_codes = (&norm_codes[0] if base.norms_f32 == NULL and norm_codes is not None
                       and norm_codes.shape[0] > 0 else NULL)
    base.norm_levels = &norm_levels[0] if base.norm_codes != NULL else NULL
    base.ids = &ids[0] if ids is not None and ids.shape[0] > 0 else NULL
    base.allow = &allow[0] if allow is not None and allow.shape[0] > 0 else NULL
    base.norm_scales = norm_scales and (base.norms_f32 != NULL or base.norm_codes != NULL)
    batch.tables = &source
    batch.lut_row = <Py_ssize_t>base.W * SLOTS
    batch.nq = out_dist.shape[0]
    batch.k = out_dist.shape[1]
    batch.bound = &bound[0] if bound is not None else NULL
    batch.out_dist = &out_dist[0, 0]
    batch.out_rows = &out_rows[0, 0]
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
                       base.norms_f32 != NULL or base.norm_codes != NULL, split_codes)
        with nogil:
            if split_codes:
                _scan_by_code_blocks(&base, &batch, n_threads, &scratch)
            else:
                _scan_by_query_groups(&base, &batch, group_size, n_threads, &scratch)
    finally:
        _scratch_free(&scratch)
