"""Compiled loops of the inverted file (IVF): coarse assignment and k-means sums, the choice of the lists a query
probes, and the scan of those lists with one ADC table per query and a bounded top-k heap.

Every function here trusts its arguments (the Python layers validate and allocate): C-contiguous arrays of the
documented shapes and dtypes, list ids < L, list offsets non-decreasing from 0 to N. Arguments are tagged IN or OUT;
outputs are allocated by the caller. The loops run without the GIL and never raise or touch Python objects: the only
error is MemoryError, raised with the GIL before a parallel region when its scratch memory cannot be allocated.

Notation (docs/ARCHITECTURE.md, "Inverted file"): L lists with centroids c_l (P dims), a code b of W = M*C bytes
stored in list l, its norm term n_b = ||c_l + R z_hat_b||^2. For a query q with z = R^T q:

    ||q - c_l - R z_hat_b||^2 = ||q||^2 - 2 q.c_l - 2 z.z_hat_b + n_b        (metric "l2", "cosine" on unit vectors)
    -(q.c_l + z.z_hat_b)                                                     (minus the score, metric "ip"/"cosine")

The query's table holds -2 z_m.d (or -z_m.d) for every word, its constant term ||q||^2 (or 0); the list term
-2 q.c_l (or -q.c_l) comes from the coarse step. So one table per query serves every list it probes.
"""

from cython.parallel cimport parallel, prange, threadid
from libc.math cimport INFINITY
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport free
from libc.string cimport memcpy

from ockstore._gemm cimport _gemm
from ockstore._scratch cimport _alloc, _slice_items
from ockstore._topk cimport _worse

cdef extern from "_ivf.h" nogil:
    void ock_coarse_dots(const float *q, const float *ct, int P, int L, float *out)

cdef extern from "_tables.h" nogil:
    void ock_rotate(const float *q, const float *rot, int P, int D, double *qd, double *z)
    double ock_tables(const double *z, const float *words_t, const double *sqnorms, int M, int C, int K, int S,
                      int kind, int slots, double *acc, float *lut)

cdef extern from "_simd.h" nogil:
    float ock_min_of_sum(const float *a, const float *b, int n)
    int ock_first_index_of_sum(const float *a, const float *b, int n, float target)

cdef extern from *:
    int _count_trailing_zeros "__builtin_ctzll"(unsigned long long) noexcept nogil


cdef enum:
    # Rows per sgemm call of coarse_assign: each call runs near BLAS peak, and a thread's products
    # (ASSIGN_ROWS x L floats: 1 MiB for 1,024 lists) stay in L2 while their minima are taken. The chunks are fixed
    # row ranges, so which thread computes one never changes its result.
    ASSIGN_ROWS = 256
    # How lists are ranked for probing (PROBE_* in ockstore/ivf.py).
    PROBE_L2 = 0   # by ||q - c_l||^2 (up to the constant ||q||^2)
    PROBE_IP = 1   # by q.c_l, largest first
    # Table slots per code byte, whatever K is (as in _search_kernels.pyx): a byte can only index 0..255, so the scan
    # never reads past a table (slots K..255 hold +inf); a constant, so that entries are addressed by displacement.
    SLOTS = 256
    # Candidates a query's TopK collector holds beyond its k (at least; k more for k above it): each compaction
    # (linear in k + slack) then frees room for at least this many candidates.
    TOPK_SLACK = 256


# --------------------------------------------------------------------------------------------------------------------
# A top-k collector for short scans (the inverted file's): a buffer of `cap` > k candidates instead of a heap.
#
# A heap pays a sift-down of log2(k) unpredictable comparisons for every candidate that enters it, and when a query
# scans a few thousand codes for k = 100 most candidates do enter (the first k all do): that cost then exceeds the
# scan itself. The collector appends every candidate not worse than its threshold (one predictable comparison and
# two stores) and, when the buffer is full, keeps its k best (a quickselect, linear in cap) and sets the threshold
# to the worst of them. Results are the same as a heap's: the k best (distance, id) pairs of the candidates, in
# ascending order; the collector only changes the cost.

cdef struct TopK:
    float *d                    # (cap,) distances of the candidates kept
    int64_t *r                  # (cap,) their rows
    int k
    int cap                     # > k
    int n                       # candidates held
    float threshold             # a candidate enters when its distance is <= threshold (no NaN, no +inf ever)
    const int64_t *ids          # row -> id (NULL: the row number), for ties


cdef inline void _topk_init(TopK *t, float *d, int64_t *r, int k, int cap, const int64_t *ids) noexcept nogil:
    t.d = d
    t.r = r
    t.k = k
    t.cap = cap
    t.n = 0
    t.threshold = 3.4028234663852886e+38  # the largest float: +inf (a corrupt code's distance) never enters
    t.ids = ids


cdef inline void _topk_offer(TopK *t, float d, int64_t row) noexcept nogil:
    if d <= t.threshold:
        t.d[t.n] = d
        t.r[t.n] = row
        t.n += 1
        if t.n == t.cap:
            _topk_compact(t)


cdef inline void _topk_swap(TopK *t, int i, int j) noexcept nogil:
    cdef float d = t.d[i]
    cdef int64_t r = t.r[i]
    t.d[i] = t.d[j]
    t.r[i] = t.r[j]
    t.d[j] = d
    t.r[j] = r


cdef inline void _topk_partition(TopK *t, int lo, int hi, int *i_out, int *j_out) noexcept nogil:
    """Hoare partition of candidates lo..hi (inclusive, hi > lo) by (distance, id) around a median-of-three pivot;
    afterwards [lo, j] <= pivot <= [i, hi] with j < i, and equal keys split evenly between the sides."""
    cdef int mid = lo + (hi - lo) // 2
    cdef int i = lo
    cdef int j = hi
    cdef float pd
    cdef int64_t pr
    if _worse(t.d[lo], t.r[lo], t.d[mid], t.r[mid], t.ids):
        _topk_swap(t, lo, mid)
    if _worse(t.d[mid], t.r[mid], t.d[hi], t.r[hi], t.ids):
        _topk_swap(t, mid, hi)
        if _worse(t.d[lo], t.r[lo], t.d[mid], t.r[mid], t.ids):
            _topk_swap(t, lo, mid)
    pd = t.d[mid]
    pr = t.r[mid]
    while i <= j:
        while _worse(pd, pr, t.d[i], t.r[i], t.ids):
            i += 1
        while _worse(t.d[j], t.r[j], pd, pr, t.ids):
            j -= 1
        if i <= j:
            _topk_swap(t, i, j)
            i += 1
            j -= 1
    i_out[0] = i
    j_out[0] = j


cdef void _topk_compact(TopK *t) noexcept nogil:
    """Keep the k best of the n > k candidates (in positions 0..k-1, any order) and set the threshold to the worst
    kept distance. Quickselect by (distance, id) with a median-of-three pivot and Hoare partitioning (equal keys
    split evenly, so repeated values cost no more than distinct ones)."""
    cdef int lo = 0
    cdef int hi = t.n - 1
    cdef int i, j
    cdef float worst
    while lo < hi:
        _topk_partition(t, lo, hi, &i, &j)
        if t.k - 1 <= j:
            hi = j
        elif t.k - 1 >= i:
            lo = i
        else:
            break
    t.n = t.k
    worst = t.d[0]
    for i in range(1, t.k):
        if t.d[i] > worst:
            worst = t.d[i]
    t.threshold = worst


cdef void _topk_sort(TopK *t, int lo, int hi) noexcept nogil:
    """Sort candidates lo..hi (inclusive) ascending by (distance, id): quicksort with a median-of-three pivot and
    Hoare partitioning, recursing into the smaller side (depth <= log2(n)), insertion sort below 16 candidates. Far
    fewer mispredicted branches than popping a heap."""
    cdef int i, j
    cdef float d
    cdef int64_t r
    while hi - lo >= 16:
        _topk_partition(t, lo, hi, &i, &j)
        if j - lo < hi - i:
            _topk_sort(t, lo, j)
            lo = i
        else:
            _topk_sort(t, i, hi)
            hi = j
    for i in range(lo + 1, hi + 1):
        d = t.d[i]
        r = t.r[i]
        j = i - 1
        while j >= lo and _worse(t.d[j], t.r[j], d, r, t.ids):
            t.d[j + 1] = t.d[j]
            t.r[j + 1] = t.r[j]
            j -= 1
        t.d[j + 1] = d
        t.r[j + 1] = r


cdef void _topk_sort_into(TopK *t, float *out_d, int64_t *out_r) noexcept nogil:
    """Write the k best candidates in ascending (distance, id) order to out (k each), padded with (+inf, -1); the
    collector is consumed."""
    cdef int j
    if t.n > t.k:
        _topk_compact(t)
    _topk_sort(t, 0, t.n - 1)
    for j in range(t.n):
        out_d[j] = t.d[j]
        out_r[j] = t.r[j]
    for j in range(t.n, t.k):  # padding: worse than any candidate, it sorts last
        out_d[j] = INFINITY
        out_r[j] = -1


# --------------------------------------------------------------------------------------------------------------------
# Coarse assignment and k-means sums.

def coarse_assign(const float[:, ::1] X,            # IN (n, P)
                  const float[:, ::1] neg2_ct,      # IN (P, L): -2 times the centroids, transposed
                  const float[::1] c_sqnorms,       # IN (L,): ||c_l||^2
                  int32_t[::1] labels,              # OUT (n,): the nearest centroid of each row (ties: smaller l)
                  float[::1] distances,             # OUT (n,): its squared distance ||x - c||^2 (clamped at 0)
                  int n_threads):
    """The nearest centroid of every row: argmin_l ||c_l||^2 - 2 x.c_l, one BLAS product per chunk of rows
    (BLAS itself must run on one thread: see blas_single_thread)."""
    cdef Py_ssize_t n = X.shape[0]
    cdef int P = X.shape[1]
    cdef int L = neg2_ct.shape[1]
    cdef Py_ssize_t n_chunks = (n + ASSIGN_ROWS - 1) // ASSIGN_ROWS
    cdef Py_ssize_t stride = _slice_items(<Py_ssize_t>ASSIGN_ROWS * L)
    cdef Py_ssize_t chunk, start, i
    cdef int count, p, tid
    cdef float *products = NULL
    cdef float *g
    cdef float best
    cdef double xx
    cdef const float *x
    if n == 0:
        return
    if n_threads < 1:
        n_threads = 1
    try:
        products = <float *>_alloc(<size_t>n_threads * stride * sizeof(float),
                                   "coarse_assign's products of a chunk (per thread)")
        with nogil, parallel(num_threads=n_threads):
            tid = threadid()
            g = products + tid * stride
            for chunk in prange(n_chunks, schedule='static'):
                start = chunk * ASSIGN_ROWS
                count = <int>(n - start) if n - start < ASSIGN_ROWS else ASSIGN_ROWS
                # g (count x L) = X[start:start+count] (count x P) @ neg2_ct (P x L) = -2 x.c_l
                _gemm(count, L, P, &X[start, 0], P, False, &neg2_ct[0, 0], L, g, L)
                for i in range(count):
                    best = ock_min_of_sum(&c_sqnorms[0], g + i * L, L)
                    labels[start + i] = ock_first_index_of_sum(&c_sqnorms[0], g + i * L, L, best)
                    x = &X[start + i, 0]
                    xx = 0
                    for p in range(P):
                        xx = xx + <double>x[p] * x[p]
                    xx = xx + best
                    distances[start + i] = <float>xx if xx > 0 else 0
    finally:
        free(products)


def cluster_sums(const float[:, ::1] X,       # IN (n, P)
                 const int32_t[::1] labels,   # IN (n,) in 0..L-1
                 double[:, ::1] sums,         # OUT (L, P): the sum of the rows of each cluster, in row order
                 int64_t[::1] counts):        # OUT (L,): the rows of each cluster
    """Sums and sizes of the clusters (the k-means update), in float64, one row after another (deterministic)."""
    cdef Py_ssize_t n = X.shape[0]
    cdef int P = X.shape[1]
    cdef Py_ssize_t L = sums.shape[0]
    cdef Py_ssize_t i, l
    cdef int p
    cdef double *s
    cdef const float *x
    with nogil:
        for l in range(L):
            counts[l] = 0
            for p in range(P):
                sums[l, p] = 0
        for i in range(n):
            l = labels[i]
            counts[l] += 1
            s = &sums[l, 0]
            x = &X[i, 0]
            for p in range(P):
                s[p] = s[p] + x[p]


# --------------------------------------------------------------------------------------------------------------------
# Probing: the n_probe best lists of each query, and their list terms.

def probe(const float[:, ::1] queries,      # IN (nq, P)
          const float[:, ::1] ct,           # IN (P, L): the centroids, transposed
          const float[::1] c_sqnorms,       # IN (L,): ||c_l||^2 (read for PROBE_L2)
          int kind,                         # IN PROBE_L2 or PROBE_IP
          float term_factor,                # IN the list term is term_factor * q.c_l: -2 (metric "l2"), -1 (scores)
          int32_t[:, ::1] out_lists,        # OUT (nq, n_probe): the lists to scan, best first (ties: smaller l)
          float[:, ::1] out_terms,          # OUT (nq, n_probe): their list terms
          int n_threads):
    """Rank the lists of each query by ||q - c_l||^2 (PROBE_L2) or by -q.c_l (PROBE_IP), keep the n_probe best (a
    TopK collector over the L keys, ids the list numbers) and their list terms term_factor * q.c_l. The inner
    products are float32 sums in a fixed order (_ivf.h). Queries run in parallel; each query's result depends on
    nothing else."""
    cdef int nq = queries.shape[0]
    cdef int P = queries.shape[1]
    cdef int L = ct.shape[1]
    cdef int n_probe = out_lists.shape[1]
    cdef int cap = n_probe + (n_probe if n_probe > TOPK_SLACK else TOPK_SLACK)
    cdef Py_ssize_t dot_stride = _slice_items(L)
    cdef Py_ssize_t buf_stride = _slice_items(cap)
    cdef float *dots = NULL
    cdef float *buf_d = NULL
    cdef int64_t *buf_r = NULL
    cdef TopK *collectors = NULL
    cdef TopK *t
    cdef float *qd
    cdef int q, l, j, tid
    if nq == 0 or n_probe == 0:
        return
    if n_threads < 1:
        n_threads = 1
    try:
        dots = <float *>_alloc(<size_t>n_threads * dot_stride * sizeof(float), "probe's inner products (per thread)")
        buf_d = <float *>_alloc(<size_t>n_threads * buf_stride * sizeof(float), "probe's list keys (per thread)")
        buf_r = <int64_t *>_alloc(<size_t>n_threads * buf_stride * sizeof(int64_t), "probe's lists (per thread)")
        collectors = <TopK *>_alloc(<size_t>n_threads * 2 * _slice_items(sizeof(TopK)), "probe's collectors")
        with nogil, parallel(num_threads=n_threads):
            tid = threadid()
            qd = dots + tid * dot_stride
            t = <TopK *>(<char *>collectors + <size_t>tid * 2 * _slice_items(sizeof(TopK)))
            for q in prange(nq, schedule='dynamic'):
                ock_coarse_dots(&queries[q, 0], &ct[0, 0], P, L, qd)
                _topk_init(t, buf_d + tid * buf_stride, buf_r + tid * buf_stride, n_probe, cap, NULL)
                if kind == PROBE_L2:
                    for l in range(L):
                        _topk_offer(t, c_sqnorms[l] - 2 * qd[l], l)
                else:
                    for l in range(L):
                        _topk_offer(t, -qd[l], l)
                _topk_sort_into(t, t.d, t.r)  # in place: the n_probe best come first
                for j in range(n_probe):
                    l = <int>t.r[j]
                    out_lists[q, j] = l
                    out_terms[q, j] = term_factor * qd[l]
    finally:
        free(dots)
        free(buf_d)
        free(buf_r)
        free(collectors)


# --------------------------------------------------------------------------------------------------------------------
# The scan of the probed lists.
#
# For a query with tables lut[w, k], constant term qconst, and a probed list l with term t_l, the distance to code b
# of the list with norm term n_b is
#     dist = (qconst + t_l) + n_b + sum_w lut[w, b_w]
# accumulated in exactly this order whatever the threading; with a norm scale s_b instead (metric "cosine":
# 1 / ||c_l + R z_hat_b||, the list term -q.c_l and the tables -z.d), dist = ((qconst + t_l) + sum_w lut[w, b_w]) * s_b. Each query collects its k best (dist, id) pairs in a
# TopK buffer (_topk.pxd; a smaller id wins a tie): a query scans only thousands of codes, too few for a heap to pay.

cdef struct ListBase:
    # The rows of an IVF index, list after list (arrays of N rows, as given to ivf_scan).
    const uint8_t *codes        # (N, W), or NULL when N == 0
    int W
    const float *norms_f32      # (N,) float32 norm terms, or NULL
    const uint8_t *norm_codes   # (N,) one-byte norm codes, or NULL
    const float *norm_levels    # (256,) the levels of norm_codes (NULL with them)
    const int64_t *ids          # (N,)
    const uint64_t *allow       # (ceil(N / 64),) bitmap of the rows to scan (bit r % 64 of word r // 64), or NULL
    const int64_t *offsets      # (L + 1,): list l holds rows offsets[l] .. offsets[l+1] - 1
    bint norm_scales            # the norm terms multiply each code's sum (s_b) instead of being added to it


cdef inline float _norm_term(const ListBase *base, Py_ssize_t row) noexcept nogil:
    """The norm term added to the sum of row `row` (0 when the norm terms are scales, or absent)."""
    if base.norm_scales:
        return 0
    if base.norms_f32 != NULL:
        return base.norms_f32[row]
    if base.norm_codes != NULL:
        return base.norm_levels[base.norm_codes[row]]
    return 0


cdef inline float _scaled(const ListBase *base, float d, Py_ssize_t row) noexcept nogil:
    """The sum d of row `row` times its norm scale (d itself when the norm terms are not scales)."""
    if not base.norm_scales:
        return d
    if base.norms_f32 != NULL:
        return d * base.norms_f32[row]
    return d * base.norm_levels[base.norm_codes[row]]


cdef void _scan_list(const ListBase *base, const float *lut, float start_term, Py_ssize_t start, Py_ssize_t stop,
                     TopK *t) noexcept nogil:
    """Offer rows start..stop-1 (one list) to the collector t; start_term = qconst + the list term."""
    cdef Py_ssize_t i = start
    cdef int w
    cdef int W = base.W
    cdef float d0, d1, d2, d3
    cdef const uint8_t *c0
    cdef const uint8_t *c1
    cdef const uint8_t *c2
    cdef const uint8_t *c3
    cdef const float *l
    # Four codes at a time: four independent sums, so each add need not wait for the previous one.
    while i + 4 <= stop:
        c0 = base.codes + <size_t>i * W
        c1 = c0 + W
        c2 = c1 + W
        c3 = c2 + W
        d0 = start_term + _norm_term(base, i)
        d1 = start_term + _norm_term(base, i + 1)
        d2 = start_term + _norm_term(base, i + 2)
        d3 = start_term + _norm_term(base, i + 3)
        for w in range(W):
            l = lut + <size_t>w * SLOTS
            d0 = d0 + l[c0[w]]
            d1 = d1 + l[c1[w]]
            d2 = d2 + l[c2[w]]
            d3 = d3 + l[c3[w]]
        _topk_offer(t, _scaled(base, d0, i), i)
        _topk_offer(t, _scaled(base, d1, i + 1), i + 1)
        _topk_offer(t, _scaled(base, d2, i + 2), i + 2)
        _topk_offer(t, _scaled(base, d3, i + 3), i + 3)
        i += 4
    while i < stop:
        c0 = base.codes + <size_t>i * W
        d0 = start_term + _norm_term(base, i)
        for w in range(W):
            d0 = d0 + lut[<size_t>w * SLOTS + c0[w]]
        _topk_offer(t, _scaled(base, d0, i), i)
        i += 1


cdef void _scan_list_allowed(const ListBase *base, const float *lut, float start_term, Py_ssize_t start,
                             Py_ssize_t stop, TopK *t) noexcept nogil:
    """_scan_list for the rows of start..stop-1 whose bit is set in base.allow. The bitmap is read 64 rows at a time
    (the first word masked below `start`) and a row's code is read only when its bit is set."""
    cdef Py_ssize_t first = start - (start & 63)
    cdef Py_ssize_t row
    cdef uint64_t word
    cdef int w
    cdef float d
    cdef const uint8_t *c
    if start >= stop:
        return
    word = base.allow[first >> 6] & (~(<uint64_t>0) << (start & 63))
    while True:
        while word != 0:
            row = first + _count_trailing_zeros(word)
            word = word & (word - 1)
            if row >= stop:
                return
            c = base.codes + <size_t>row * base.W
            d = start_term + _norm_term(base, row)
            for w in range(base.W):
                d = d + lut[<size_t>w * SLOTS + c[w]]
            _topk_offer(t, _scaled(base, d, row), row)
        first += 64
        if first >= stop:
            return
        word = base.allow[first >> 6]


cdef struct Tables:
    # What the tables of a query are computed from (_tables.h; search.QueryTables holds these arrays): the fine
    # quantizer's rotation and words in panels, and the kind of table.
    const float *rot            # (P * D,) the (P, D) padded rotation in panels, D = M*S
    const float *words          # M blocks of the S x C*K matrix of subspace m's words, in panels
    const double *sqnorms       # (M, C*K) squared norms of the words (OCK_TABLE_L2_WHOLE only)
    int P, D, M, C, K, S
    int kind                    # OCK_TABLE_*: 0 for metric "l2" (-2 z.d, constant ||z||^2), 2 for scores (-z.d)


def ivf_scan(const float[::1] rot,              # IN (P * M*S,) the fine quantizer's rotation, in panels
             const float[:, ::1] words,         # IN (M, S * C*K) its words, in panels (search.QueryTables)
             const double[:, ::1] sqnorms,      # IN (M, C*K) the words' squared norms
             int n_codebooks,                   # IN C
             int sub_dim,                       # IN S
             int kind,                          # IN the kind of table (OCK_TABLE_* of _tables.h)
             const float[:, ::1] queries,       # IN (nq, P)
             const uint8_t[:, ::1] codes,       # IN (N, W), rows list after list
             const float[::1] norms_f32,        # IN (N,) float32 norm terms, or (0,)
             const uint8_t[::1] norm_codes,     # IN (N,) one-byte norm codes, or (0,)
             const float[::1] norm_levels,      # IN (256,) levels of the one-byte norm codes, or (0,)
             const int64_t[::1] ids,            # IN (N,): the id of each row
             const uint64_t[::1] allow,         # IN (ceil(N / 64),) bitmap of the rows to scan, or (0,): all
             const int64_t[::1] list_offsets,   # IN (L + 1,): non-decreasing, from 0 to N
             const int32_t[:, ::1] lists,       # IN (nq, n_probe): the lists each query scans (from probe)
             const float[:, ::1] terms,         # IN (nq, n_probe): their list terms
             float[:, ::1] out_dist,            # OUT (nq, k) ascending
             int64_t[:, ::1] out_rows,          # OUT (nq, k) the rows of the results; (inf, -1) past the last
             int n_threads,
             bint norm_scales=False):           # IN the norm terms multiply each code's sum (cosine: 1/||x_hat||)
    """For each query: its one table (_tables.h, the same arithmetic as the exhaustive scan's), then its probed lists
    scanned, keeping its k best (dist, id) among the allowed rows; writes their distances and row numbers. Queries
    run in parallel, each on one thread from start to end, so results do not depend on the number of threads."""
    cdef ListBase base
    cdef Tables tb
    cdef int nq = out_dist.shape[0]
    cdef int n_probe = lists.shape[1]
    cdef int k = out_dist.shape[1]
    cdef int cap = k + (k if k > TOPK_SLACK else TOPK_SLACK)
    cdef Py_ssize_t buf_stride = _slice_items(cap)
    cdef Py_ssize_t lut_stride
    cdef Py_ssize_t work_stride
    cdef float *buf_d = NULL
    cdef int64_t *buf_r = NULL
    cdef float *luts = NULL
    cdef double *work = NULL
    cdef TopK *collectors = NULL
    cdef TopK *t
    cdef float *lut
    cdef double *z
    cdef int q, j, tid
    cdef int32_t l
    cdef float qconst, start_term
    if nq == 0 or k == 0:
        return
    if n_threads < 1:
        n_threads = 1
    tb.M = words.shape[0]
    tb.S = sub_dim
    tb.C = n_codebooks
    tb.K = sqnorms.shape[1] // n_codebooks
    tb.D = tb.M * sub_dim
    tb.P = queries.shape[1]
    tb.kind = kind
    tb.rot = &rot[0]
    tb.words = &words[0, 0]
    tb.sqnorms = &sqnorms[0, 0]
    base.W = codes.shape[1]
    base.codes = &codes[0, 0] if codes.shape[0] > 0 else NULL
    base.norms_f32 = &norms_f32[0] if norms_f32.shape[0] > 0 else NULL
    base.norm_codes = &norm_codes[0] if base.norms_f32 == NULL and norm_codes.shape[0] > 0 else NULL
    base.norm_levels = &norm_levels[0] if base.norm_codes != NULL else NULL
    base.ids = &ids[0] if ids.shape[0] > 0 else NULL
    base.allow = &allow[0] if allow.shape[0] > 0 else NULL
    base.offsets = &list_offsets[0]
    base.norm_scales = norm_scales and (base.norms_f32 != NULL or base.norm_codes != NULL)
    lut_stride = _slice_items(<Py_ssize_t>base.W * SLOTS)
    work_stride = _slice_items(<Py_ssize_t>tb.D + <Py_ssize_t>tb.C * tb.K + tb.P)
    try:
        buf_d = <float *>_alloc(<size_t>n_threads * buf_stride * sizeof(float),
                                "ivf_scan's top-k candidates (distances, per thread)")
        buf_r = <int64_t *>_alloc(<size_t>n_threads * buf_stride * sizeof(int64_t),
                                  "ivf_scan's top-k candidates (rows, per thread)")
        luts = <float *>_alloc(<size_t>n_threads * lut_stride * sizeof(float), "ivf_scan's query tables (per thread)")
        work = <double *>_alloc(<size_t>n_threads * work_stride * sizeof(double),
                                "ivf_scan's table computation (per thread)")
        # one collector per thread, each in a cache line of its own
        collectors = <TopK *>_alloc(<size_t>n_threads * 2 * _slice_items(sizeof(TopK)), "ivf_scan's collectors")
        with nogil, parallel(num_threads=n_threads):
            tid = threadid()
            t = <TopK *>(<char *>collectors + <size_t>tid * 2 * _slice_items(sizeof(TopK)))
            lut = luts + tid * lut_stride
            z = work + tid * work_stride
            for q in prange(nq, schedule='dynamic'):
                # the query's table: z = R^T q (float64), then its products with the words (_tables.h)
                ock_rotate(&queries[q, 0], tb.rot, tb.P, tb.D, z + tb.D + <Py_ssize_t>tb.C * tb.K, z)
                qconst = <float>ock_tables(z, tb.words, tb.sqnorms, tb.M, tb.C, tb.K, tb.S, tb.kind, SLOTS,
                                           z + tb.D, lut)
                _topk_init(t, buf_d + tid * buf_stride, buf_r + tid * buf_stride, k, cap, base.ids)
                for j in range(n_probe):
                    l = lists[q, j]
                    start_term = qconst + terms[q, j]
                    if base.allow != NULL:
                        _scan_list_allowed(&base, lut, start_term, base.offsets[l], base.offsets[l + 1], t)
                    else:
                        _scan_list(&base, lut, start_term, base.offsets[l], base.offsets[l + 1], t)
                _topk_sort_into(t, &out_dist[q, 0], &out_rows[q, 0])
    finally:
        free(buf_d)
        free(buf_r)
        free(luts)
        free(work)
        free(collectors)
