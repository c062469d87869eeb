"""Compiled loops of search: the ADC scan of byte codes with a bounded top-k heap per query.

Every function here trusts its arguments (the Python layers validate and allocate): C-contiguous arrays of the
documented shapes and dtypes. Arguments are tagged IN or OUT; outputs are allocated by the caller; nothing here raises
or touches Python objects inside its loops, and the GIL is released.
"""

from cython.parallel cimport parallel, prange, threadid
from libc.math cimport INFINITY
from libc.stdint cimport int64_t, uint8_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

cdef enum:
    # Codes per scan block. A block's codes (SCAN_BLOCK * W bytes) and its norm terms stay in L1/L2 while every query
    # of a group scans them, so a batch reads each code from memory once per group instead of once per query.
    SCAN_BLOCK = 2048

# --------------------------------------------------------------------------------------------------------------------
# ADC scan with top-k.
#
# For a query with tables lut[w, k] (w = m*C + c) and a constant term, the distance to code b with norm term n_b is
#     dist = qconst + n_b + sum_w lut[w, b_w]
# accumulated in exactly this order whatever the threading, so results never depend on the number of threads.
# Each query keeps a max-heap of its k best (dist, id) pairs, ordered lexicographically: a smaller id wins a tie.

cdef inline bint _worse(float d1, int64_t i1, float d2, int64_t i2) noexcept nogil:
    """(d1, i1) ranks after (d2, i2)."""
    return d1 > d2 or (d1 == d2 and i1 > i2)


cdef void _heap_replace_top(float *hd, int64_t *hi, int k, float d, int64_t idx) noexcept nogil:
    """Replace the worst element (the root) of a max-heap by (d, idx) and restore the heap."""
    cdef int pos = 0
    cdef int child
    while True:
        child = 2 * pos + 1
        if child >= k:
            break
        if child + 1 < k and _worse(hd[child + 1], hi[child + 1], hd[child], hi[child]):
            child += 1
        if not _worse(hd[child], hi[child], d, idx):
            break
        hd[pos] = hd[child]
        hi[pos] = hi[child]
        pos = child
    hd[pos] = d
    hi[pos] = idx


cdef inline void _heap_push(float *hd, int64_t *hi, int k, float d, int64_t idx) noexcept nogil:
    if d < hd[0] or (d == hd[0] and idx < hi[0]):
        _heap_replace_top(hd, hi, k, d, idx)


cdef inline void _consider(float *hd, int64_t *hi, int k, float d, const int64_t *ids, Py_ssize_t row) noexcept nogil:
    """Offer code `row` at distance d. Almost every code fails the first test, so its id (8 bytes, as much memory
    traffic as the code itself) is only read for the few that may enter. ids NULL: the id is the row number."""
    if d <= hd[0]:
        _heap_push(hd, hi, k, d, ids[row] if ids != NULL else row)


cdef void _heap_init(float *hd, int64_t *hi, int k) noexcept nogil:
    cdef int j
    for j in range(k):
        hd[j] = INFINITY
        hi[j] = -1


cdef void _heap_sort_into(float *hd, int64_t *hi, int k, float *out_d, int64_t *out_i) noexcept nogil:
    """Write the heap's elements to out in ascending (dist, id) order; the heap is consumed.

    Empty slots hold (inf, -1); every real result has a finite distance, so they sort last.
    """
    cdef int size = k
    cdef float d
    cdef int64_t idx
    while size > 0:
        # The root is the worst remaining: it goes to the end.
        out_d[size - 1] = hd[0]
        out_i[size - 1] = hi[0]
        size -= 1
        if size == 0:
            break
        d = hd[size]
        idx = hi[size]
        _heap_replace_top(hd, hi, size, d, idx)


cdef void _scan_range(const uint8_t *codes, int W, int table_stride, const float *lut, float qconst,
                      const float *norm_term, const int64_t *ids, Py_ssize_t start, Py_ssize_t stop, float *hd,
                      int64_t *hi, int k) noexcept nogil:
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
        _consider(hd, hi, k, d0, ids, i)
        _consider(hd, hi, k, d1, ids, i + 1)
        _consider(hd, hi, k, d2, ids, i + 2)
        _consider(hd, hi, k, d3, ids, i + 3)
        i += 4
    while i < stop:
        c0 = codes + <size_t>i * W
        d0 = qconst + norm_term[i - start] if norm_term != NULL else qconst
        for w in range(W):
            d0 = d0 + lut[<size_t>w * table_stride + c0[w]]
        _consider(hd, hi, k, d0, ids, i)
        i += 1


cdef void _fill_norm_block(const float *norms_f32, const uint8_t *norm_codes, const float *norm_levels,
                           Py_ssize_t start, Py_ssize_t stop, float *out) noexcept nogil:
    """out[j] = the stored norm term of code start + j (float32 norms, or the level of its one-byte code)."""
    cdef Py_ssize_t j
    if norms_f32 != NULL:
        memcpy(out, norms_f32 + start, (stop - start) * sizeof(float))
    else:
        for j in range(stop - start):
            out[j] = norm_levels[norm_codes[start + j]]


def adc_scan(const uint8_t[:, ::1] codes,        # IN (N, W)
             const float[:, ::1] luts,           # IN (nq, W*table_stride): lut of query q, byte w, word k at
                                                 #    [q, w*table_stride + k]
             const float[::1] qconst,            # IN (nq,): the constant term of each query
             const float[::1] norms_f32,         # IN (N,) float32 norm terms, or (0,)
             const uint8_t[::1] norm_codes,      # IN (N,) one-byte norm codes, or (0,)
             const float[::1] norm_levels,       # IN (256,) levels of the one-byte norm codes, or (0,)
             const int64_t[::1] ids,             # IN (N,), or (0,): the id of a code is then its row number
             int table_stride,                   # IN slots per code byte in a table (256: any byte is in range)
             float[:, ::1] out_dist,             # OUT (nq, k) ascending
             int64_t[:, ::1] out_ids,            # OUT (nq, k); (inf, -1) past the N-th result
             int n_threads):
    """Exhaustive ADC scan keeping the k best (dist, id) of each query.

    Batches (nq >= n_threads) run in parallel over groups of queries; a group shares each block of codes (and its
    decoded norm terms) while the block is in cache. Fewer queries than threads run in parallel over blocks of codes,
    each thread with its own heap, merged at the end.
    """
    cdef Py_ssize_t N = codes.shape[0]
    cdef int W = codes.shape[1]
    cdef int nq = luts.shape[0]
    cdef int k = out_dist.shape[1]
    cdef const float *nf = NULL
    cdef const uint8_t *nc = NULL
    cdef const float *nl = NULL
    cdef bint has_norm
    cdef int group_size, n_groups, g, q, q0, q1, t, b, n_blocks, tid
    cdef Py_ssize_t start, stop
    cdef float *normbuf
    cdef float *heap_d
    cdef int64_t *heap_i
    cdef float *all_d
    cdef int64_t *all_i
    cdef float *merged_d
    cdef int64_t *merged_i
    cdef const uint8_t *codes_ptr
    cdef const int64_t *ids_ptr = &ids[0] if ids.shape[0] > 0 else NULL
    cdef Py_ssize_t j
    if nq == 0 or k == 0:
        return
    if n_threads < 1:
        n_threads = 1
    if norms_f32.shape[0] > 0:
        nf = &norms_f32[0]
    elif norm_codes.shape[0] > 0:
        nc = &norm_codes[0]
        nl = &norm_levels[0]
    has_norm = nf != NULL or nc != NULL
    codes_ptr = &codes[0, 0] if N > 0 else NULL
    n_blocks = <int>((N + SCAN_BLOCK - 1) // SCAN_BLOCK)

    if nq >= n_threads or n_threads == 1 or N <= SCAN_BLOCK:
        # Parallel over groups of queries: each group of at most 8 queries shares every block of codes.
        group_size = (nq + n_threads - 1) // n_threads
        if group_size > 8:
            group_size = 8
        n_groups = (nq + group_size - 1) // group_size
        with nogil, parallel(num_threads=n_threads):
            normbuf = <float *>malloc(SCAN_BLOCK * sizeof(float))
            heap_d = <float *>malloc(<size_t>group_size * k * sizeof(float))
            heap_i = <int64_t *>malloc(<size_t>group_size * k * sizeof(int64_t))
            for g in prange(n_groups, schedule='dynamic'):
                q0 = g * group_size
                q1 = q0 + group_size if q0 + group_size < nq else nq
                for q in range(q1 - q0):
                    _heap_init(heap_d + <size_t>q * k, heap_i + <size_t>q * k, k)
                for b in range(n_blocks):
                    start = <Py_ssize_t>b * SCAN_BLOCK
                    stop = start + SCAN_BLOCK if start + SCAN_BLOCK < N else N
                    if has_norm:
                        _fill_norm_block(nf, nc, nl, start, stop, normbuf)
                    for q in range(q0, q1):
                        _scan_range(codes_ptr, W, table_stride, &luts[q, 0], qconst[q], normbuf if has_norm else NULL,
                                    ids_ptr, start, stop, heap_d + <size_t>(q - q0) * k,
                                    heap_i + <size_t>(q - q0) * k, k)
                for q in range(q0, q1):
                    _heap_sort_into(heap_d + <size_t>(q - q0) * k, heap_i + <size_t>(q - q0) * k, k,
                                    &out_dist[q, 0], &out_ids[q, 0])
            free(normbuf)
            free(heap_d)
            free(heap_i)
        return

    # Fewer queries than threads: each query is split over blocks of codes, one heap per thread, then merged.
    all_d = <float *>malloc(<size_t>n_threads * k * sizeof(float))
    all_i = <int64_t *>malloc(<size_t>n_threads * k * sizeof(int64_t))
    merged_d = <float *>malloc(<size_t>k * sizeof(float))
    merged_i = <int64_t *>malloc(<size_t>k * sizeof(int64_t))
    try:
        for q in range(nq):
            for t in range(n_threads):
                _heap_init(all_d + <size_t>t * k, all_i + <size_t>t * k, k)
            with nogil, parallel(num_threads=n_threads):
                normbuf = <float *>malloc(SCAN_BLOCK * sizeof(float))
                tid = threadid()
                for b in prange(n_blocks, schedule='static'):
                    start = <Py_ssize_t>b * SCAN_BLOCK
                    stop = start + SCAN_BLOCK if start + SCAN_BLOCK < N else N
                    if has_norm:
                        _fill_norm_block(nf, nc, nl, start, stop, normbuf)
                    _scan_range(codes_ptr, W, table_stride, &luts[q, 0], qconst[q], normbuf if has_norm else NULL,
                                ids_ptr, start, stop, all_d + <size_t>tid * k, all_i + <size_t>tid * k, k)
                free(normbuf)
            with nogil:
                _heap_init(merged_d, merged_i, k)
                for j in range(<Py_ssize_t>n_threads * k):
                    if all_d[j] < INFINITY:  # empty slots are (inf, -1)
                        _heap_push(merged_d, merged_i, k, all_d[j], all_i[j])
                _heap_sort_into(merged_d, merged_i, k, &out_dist[q, 0], &out_ids[q, 0])
    finally:
        free(all_d)
        free(all_i)
        free(merged_d)
        free(merged_i)

