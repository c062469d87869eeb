# The inverted file (included by _kernels.pyx): coarse assignment and k-means sums, the choice of the lists a query
# probes, and the scan of those lists with one ADC table per query and a TopK collector of its k best. Beyond the
# kernels' common contract (_kernels.pyx), the callers guarantee list ids < L and list offsets non-decreasing from 0
# to N.
#
# Notation (docs/ARCHITECTURE.md, "Inverted file"): L lists with centroids c_l (P dims), a code b of W = M*C bytes
# stored in list l, its norm term n_b = ||c_l + R z_hat_b||^2. For a query q with z = R^T q:
#
#     ||q - c_l - R z_hat_b||^2 = ||q||^2 - 2 q.c_l - 2 z.z_hat_b + n_b        (metric "l2", "cosine" on unit vectors)
#     -(q.c_l + z.z_hat_b)                                                     (minus the score, metric "ip"/"cosine")
#
# The query's table holds -2 z_m.d (or -z_m.d) for every word, its constant term ||q||^2 (or 0); the list term
# -2 q.c_l (or -q.c_l) comes from the coarse step. So one table per query serves every list it probes.

cdef enum:
    # Rows per sgemm call of coarse_assign: each call runs near BLAS peak, and a thread's products
    # (ASSIGN_ROWS x L floats: 1 MiB for 1,024 lists) stay in L2 while their minima are taken. The chunks are fixed
    # row ranges, so which thread computes one never changes its result.
    ASSIGN_ROWS = 256
    # Candidates a query's TopK collector holds beyond its k (at least; k more for k above it): each compaction
    # (linear in k + slack) then frees room for at least this many candidates.
    TOPK_SLACK = 256


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
                if kind == PROBE_BY_L2:
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
# (the scan loop of _kernels_scan.pxi with the term qconst + t_l); with norm scales (cosine: s_b = 1 / ||c_l + R z_b||),
# dist = ((qconst + t_l) + sum_w lut[w, b_w]) * s_b. Each query collects its k best (dist, id) pairs in
# a TopK buffer: a query scans only thousands of codes, too few for a heap to pay.

def ivf_scan(TableModel model not None,         # IN the fine quantizer's table arrays (search.QueryTables.model)
             const float[:, ::1] queries,       # IN (nq, P)
             const uint8_t[:, ::1] codes,       # IN (N, W), rows list after list
             const float[::1] norms_f32,        # IN (N,) float32 norm terms, or None
             const uint8_t[::1] norm_codes,     # IN (N,) one-byte norm codes, or None
             const float[::1] norm_levels,      # IN (256,) levels of the one-byte norm codes (with them), or None
             const int64_t[::1] ids,            # IN (N,): the id of each row
             const uint64_t[::1] allow,         # IN (ceil(N / 64),) bitmap of the rows to scan, or None: all
             const int64_t[::1] list_offsets,   # IN (L + 1,): non-decreasing, from 0 to N
             const int32_t[:, ::1] lists,       # IN (nq, n_probe): the lists each query scans (from probe)
             const float[:, ::1] terms,         # IN (nq, n_probe): their list terms
             float[:, ::1] out_dist,            # OUT (nq, k) ascending
             int64_t[:, ::1] out_rows,          # OUT (nq, k) the rows of the results; (inf, -1) past the last
             int n_threads,
             bint norm_scales=False):           # IN the norm terms scale each code's sum (cosine: 1 / ||x_hat||)
    """For each query: its one table (_query_tables, the same arithmetic as the exhaustive scan's), then its probed
    lists scanned, keeping its k best (dist, id) among the allowed rows; writes their distances and row numbers.
    Queries run in parallel, each on one thread from start to end, so results do not depend on the number of
    threads."""
    cdef TableSource source = model._source
    cdef int nq = out_dist.shape[0]
    cdef int n_probe = lists.shape[1]
    cdef int k = out_dist.shape[1]
    cdef int W = codes.shape[1]
    cdef int cap = k + (k if k > TOPK_SLACK else TOPK_SLACK)
    cdef Py_ssize_t buf_stride = _slice_items(cap)
    cdef Py_ssize_t lut_stride = _slice_items(<Py_ssize_t>W * SLOTS)
    cdef Py_ssize_t work_stride
    cdef const uint8_t *code_rows = &codes[0, 0] if codes.shape[0] > 0 else NULL
    cdef NormTerms norms = _norm_terms(norms_f32, norm_codes, norm_levels, norm_scales)
    cdef const int64_t *row_ids = &ids[0] if ids.shape[0] > 0 else NULL
    cdef const uint64_t *allowed = &allow[0] if allow is not None and allow.shape[0] > 0 else NULL
    cdef const int64_t *offsets = &list_offsets[0]
    cdef float *buf_d = NULL
    cdef int64_t *buf_r = NULL
    cdef float *luts = NULL
    cdef double *work = NULL
    cdef TopK *collectors = NULL
    cdef TopK *t
    cdef float *lut
    cdef double *w
    cdef int q, j, tid
    cdef int32_t l
    cdef float qconst, start_term
    if nq == 0 or k == 0:
        return
    if n_threads < 1:
        n_threads = 1
    source.queries = &queries[0, 0]
    work_stride = _slice_items(_table_work_items(&source))
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
            w = work + tid * work_stride
            for q in prange(nq, schedule='dynamic'):
                qconst = _query_tables(&source, q, w, lut, SLOTS)
                _topk_init(t, buf_d + tid * buf_stride, buf_r + tid * buf_stride, k, cap, row_ids)
                for j in range(n_probe):
                    l = lists[q, j]
                    start_term = qconst + terms[q, j]
                    if allowed != NULL:
                        _scan_allowed_rows(t, code_rows, W, lut, start_term, _norm_terms_from(norms, offsets[l]),
                                           offsets[l], offsets[l + 1], allowed)
                    else:
                        _scan_rows(t, code_rows, W, lut, start_term, _norm_terms_from(norms, offsets[l]),
                                   offsets[l], offsets[l + 1], NULL)
                _topk_sort_into(t, &out_dist[q, 0], &out_rows[q, 0])
    finally:
        free(buf_d)
        free(buf_r)
        free(luts)
        free(work)
        free(collectors)
