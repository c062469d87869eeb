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
    # Queries whose coarse step runs together (ivf_search, probe) before any of them scans its lists: the coarse
    # kernel takes them in groups of 4 (ivf.h), each group reading each row of the centroid matrix once, and with 32
    # the matrix stays in L2 from one group of 4 to the next instead of being read again after the scans of 4
    # queries (sift 1M, IVF1024 fast scan, batches: 2-4% less time per query than groups of 4). Fewer when a batch
    # has fewer queries per thread, or when the inner products would take more than COARSE_GROUP_BYTES of scratch
    # per thread (millions of lists). A query's inner products are the same in any group.
    COARSE_GROUP = 32
    COARSE_GROUP_BYTES = 1 << 24
    # n_probe up to which a query's best lists are kept by insertion into a sorted array (_probe_lists)
    PROBE_INSERT_MAX = 32

# Lists per panel of the coarse step's centroid matrix (ivf.h): panel after panel, each holds the P values of its
# lists as P rows of (up to) COARSE_PANEL floats (_kmeans.CoarseTables.panels builds it).
COARSE_PANEL = OCK_COARSE_PANEL
# Lists per panel of the half-precision centroids of a query alone's prefilter (ivf.h, "A query alone"), and the
# fewest lists it applies to (_kmeans.CoarseTables.prefilter).
COARSE_HALF_PANEL = OCK_COARSE_HALF_PANEL
COARSE_HALF_MIN_LISTS = OCK_COARSE_HALF_MIN_LISTS


# --------------------------------------------------------------------------------------------------------------------
# Coarse assignment and k-means sums.

cdef struct AssignJob:
    # coarse_assign's arguments as pointers, and its per-thread products (slice tid)
    const float *X
    const float *neg2_ct
    const float *c_sqnorms
    int32_t *labels
    float *distances
    float *products
    Py_ssize_t n, stride
    int P, L


cdef void _assign_task(void *ctx, int64_t chunk, int tid) noexcept nogil:
    """Chunk `chunk` (ASSIGN_ROWS rows) of coarse_assign, in thread tid's products."""
    cdef AssignJob *j = <AssignJob *>ctx
    cdef Py_ssize_t start = <Py_ssize_t>chunk * ASSIGN_ROWS
    cdef int count = <int>(j.n - start) if j.n - start < ASSIGN_ROWS else ASSIGN_ROWS
    cdef float *g = j.products + tid * j.stride
    cdef int i, p
    cdef int L = j.L, P = j.P
    cdef float best
    cdef double xx
    cdef const float *x
    # g (count x L) = X[start:start+count] (count x P) @ neg2_ct (P x L) = -2 x.c_l
    _gemm(count, L, P, j.X + start * P, P, False, j.neg2_ct, L, g, L)
    for i in range(count):
        best = ock_min_of_sum(j.c_sqnorms, g + <Py_ssize_t>i * L, L)
        j.labels[start + i] = ock_first_index_of_sum(j.c_sqnorms, g + <Py_ssize_t>i * L, L, best)
        x = j.X + (start + i) * P
        xx = 0
        for p in range(P):
            xx = xx + <double>x[p] * x[p]
        xx = xx + best
        j.distances[start + i] = <float>xx if xx > 0 else 0


def coarse_assign(const float[:, ::1] X,            # IN (n, P)
                  const float[:, ::1] neg2_ct,      # IN (P, L): -2 times the centroids, transposed
                  const float[::1] c_sqnorms,       # IN (L,): ||c_l||^2
                  int32_t[::1] labels,              # OUT (n,): the nearest centroid of each row (ties: smaller l)
                  float[::1] distances,             # OUT (n,): its squared distance ||x - c||^2 (clamped at 0)
                  int n_threads):
    """The nearest centroid of every row: argmin_l ||c_l||^2 - 2 x.c_l, one BLAS product per chunk of rows
    (BLAS itself must run on one thread: see blas_single_thread)."""
    cdef AssignJob job
    cdef Py_ssize_t n = X.shape[0]
    if n == 0:
        return
    job.X = &X[0, 0]
    job.neg2_ct = &neg2_ct[0, 0]
    job.c_sqnorms = &c_sqnorms[0]
    job.labels = &labels[0]
    job.distances = &distances[0]
    job.n = n
    job.P = X.shape[1]
    job.L = neg2_ct.shape[1]
    job.stride = _slice_items(<Py_ssize_t>ASSIGN_ROWS * job.L)
    job.products = NULL
    n_threads = ock_pool_threads(n_threads, COST_GEMM_VALUE * n * <double>job.P * job.L)
    try:
        job.products = <float *>_alloc(<size_t>n_threads * job.stride * sizeof(float),
                                       "coarse_assign's products of a chunk (per thread)")
        with nogil:
            ock_pool_run(_assign_task, &job, (n + ASSIGN_ROWS - 1) // ASSIGN_ROWS, n_threads, OCK_POOL_STATIC)
    finally:
        free(job.products)


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
# The search of an inverted file, query by query: the coarse step (the n_probe best lists and their terms), one
# table, the scan of the probed lists, and with re-ranking the exact values of the candidates, all before the query's
# results leave the kernel.
#
# Probing ranks the lists of a query by ||q - c_l||^2 (PROBE_L2, up to the constant ||q||^2) or by -q.c_l (PROBE_IP)
# and keeps the n_probe best (a TopK collector over the L keys, ids the list numbers); list l's term is
# term_factor * q.c_l. The inner products are float32 sums in a fixed order (ivf.h).
#
# For a query with tables lut[w, k], constant term qconst, and a probed list l with term t_l, the distance to code b
# of the list with norm term n_b is
#     dist = (qconst + t_l) + n_b + sum_w lut[w, b_w]
# (the scan loop of scan.pxi with the term qconst + t_l). Each query collects its k best (dist, id) pairs in
# a TopK buffer: a query scans only thousands of codes, too few for a heap to pay. With re-ranking, it collects R
# candidates instead and re-ranks them from their stored rows (rerank.h).


cdef class CoarseHalf:
    """The prefilter of the coarse step for a query alone (ivf.h, "A query alone"), as typed views held for the life
    of the object; _kmeans.CoarseTables.prefilter builds it (and says what each array holds).

    centroids : (L, P) float32; values : (ceil(L / COARSE_HALF_PANEL) * COARSE_HALF_PANEL * P,) uint16, the float16
        bits of the centroids divided by a power of two, in panels of COARSE_HALF_PANEL lists; alpha, beta : (L,)
        float64; kind : PROBE_L2 or PROBE_IP; factor, sqnorm_weight, qnorm_limit : floats (ock_coarse_half, simd.h)
    """

    cdef const float[:, ::1] _centroids
    cdef const uint16_t[::1] _values
    cdef const double[::1] _alpha
    cdef const double[::1] _beta
    cdef ock_coarse_half half

    def __cinit__(self, const float[:, ::1] centroids not None, const uint16_t[::1] values not None,
                  const double[::1] alpha not None, const double[::1] beta not None, int kind, double factor,
                  double sqnorm_weight, double qnorm_limit):
        cdef int L = centroids.shape[0]
        cdef int P = centroids.shape[1]
        cdef Py_ssize_t padded = (L + OCK_COARSE_HALF_PANEL - 1) // OCK_COARSE_HALF_PANEL * OCK_COARSE_HALF_PANEL
        if L < 1 or P < 1 or values.shape[0] != padded * P or alpha.shape[0] != L or beta.shape[0] != L:
            raise ValueError(f"CoarseHalf: arrays of {L} lists of {P} dims do not match ({values.shape[0]} values, "
                             f"{alpha.shape[0]} and {beta.shape[0]} bound coefficients)")
        if kind != PROBE_BY_L2 and kind != PROBE_BY_IP:
            raise ValueError(f"CoarseHalf: kind must be PROBE_L2 or PROBE_IP, got {kind}")
        self._centroids = centroids
        self._values = values
        self._alpha = alpha
        self._beta = beta
        self.half.values = &values[0]
        self.half.centroids = &centroids[0, 0]
        self.half.alpha = &alpha[0]
        self.half.beta = &beta[0]
        self.half.factor = factor
        self.half.sqnorm_weight = sqnorm_weight
        self.half.qnorm_limit = qnorm_limit
        self.half.P = P
        self.half.L = L
        self.half.kind = kind


cdef inline const ock_coarse_half *_coarse_half(CoarseHalf half, int P, int L, int kind) except? NULL:
    """The C struct of `half` (None: NULL), checked against the centroids it goes with."""
    if half is None:
        return NULL
    if half.half.P != P or half.half.L != L or half.half.kind != kind:
        raise ValueError(f"the prefilter (CoarseHalf of {half.half.L} lists of {half.half.P} dims, kind "
                         f"{half.half.kind}) is not that of these {L} lists of {P} dims, kind {kind}")
    return &half.half


cdef inline Py_ssize_t _alone_items(const ock_coarse_half *half, int L) noexcept nogil:
    """8-byte items of a query alone's prefilter (ock_coarse_alone's work and its candidates), 0 without one."""
    if half == NULL:
        return 0
    return (<Py_ssize_t>ock_coarse_alone_work_bytes(L) + 7) // 8 + (L + 16 + 1) // 2


cdef struct IvfPart:
    # One part of the rows a search reads: an index's rows, or one segment of a collection. List l holds its rows
    # offsets[l] .. offsets[l + 1] - 1 (a flat model: one list of every row). Its rows reach the collectors as
    # handles tag | row (rows.h), so the candidates of every part compete in one collector per query.
    const uint8_t *codes        # (N, W) byte codes, or NULL when N == 0 or the lists are in fast-scan blocks
    const uint8_t *blocks       # the lists in fast-scan blocks (K <= 16), or NULL
    const int64_t *list_blocks  # (L + 1,) with blocks: list l's blocks list_blocks[l] .. [l + 1] - 1
    const int64_t *offsets      # (L + 1,)
    NormTerms norms
    ock_fs_base fs_base         # with blocks: the rows as the fast scan reads them (its allow: the call's)
    const uint64_t *allow       # the call's bitmap of this part's rows to scan, or NULL: every row
    bint dense                  # most rows allowed: scan every row, test the bits of those that may enter
    int64_t tag                 # part << PART_SHIFT
    int64_t n_rows


cdef struct IvfQuery:
    # What every query of a search call shares.
    TableSource tables          # the fine quantizer's model, and the queries (or, flat SDC, their rotated vectors)
    const float *panels         # (P * L,) the centroids in panels (COARSE_PANEL), or NULL: a flat model (one list
                                # of every row, no coarse step, no list term)
    const float *c_sqnorms      # (L,)
    const ock_coarse_half *half  # the prefilter of a query alone, or NULL
    int L
    int probe_kind
    float term_factor
    int W
    bint blocks                 # the parts' lists are in fast-scan blocks (K <= 16)
    size_t block_bytes
    const ock_fs_norm *fs_norm  # with blocks: the one-byte norm codes' nibble tables, or NULL
    int flags_part              # with blocks: a part with rows, whose base says what every part's has alike (the
                                # kind of its norm terms; an empty part's base has none)
    bint by_bound               # with blocks: rank the candidates by their quantized bounds (re-ranked searches)
    bint out_ids                # write ids, not row handles
    IvfPart *parts              # (n_parts,)
    int n_parts
    const int64_t **ids         # (n_parts,) the id table of the row handles (each part's ids)
    int n_probe
    int k
    int width                   # candidates collected: k, or R with re-ranking
    const ock_rr_source *rerank  # the stored rows (part p: part p's rows), or NULL: no re-ranking
    const ock_rr_value_table *values
    const float *rerank_queries  # (nq, P)
    Py_ssize_t lut_items
    Py_ssize_t work_items


cdef class IvfPartRows:
    """One part of the rows an inverted-file search reads (an index's rows, or one segment of a collection), as typed
    views held for the life of the object.

    codes : (N, W) uint8 byte codes, or with list_blocks the lists in fast-scan blocks (B, block bytes)
    norms_f32 : (N,) float32 or None; norm_codes : (N,) uint8 or None, with norm_levels (256,) float32
    ids : (N,) int64, or None: the ids are the row numbers
    list_offsets : (L + 1,) int64 from 0 to N (a flat model: (2,), [0, N])
    norm_scales : the norm terms scale each code's sum instead of being added (cosine: 1 / ||x_hat||)
    list_blocks : (L + 1,) int64, or None: byte codes; n_words: W (with blocks); scale_range : (2,) float64 or None,
        the smallest and largest norm scale (cosine with float32 scales; found here when None)
    allow : (ceil(N / 64),) uint64 or None: the rows a search scans when the call gives no filter of its own (a
        segment's live rows)
    """

    cdef const uint8_t[:, ::1] _codes
    cdef const float[::1] _norms_f32
    cdef const uint8_t[::1] _norm_codes
    cdef const float[::1] _norm_levels
    cdef const int64_t[::1] _ids
    cdef const int64_t[::1] _offsets
    cdef const int64_t[::1] _list_blocks
    cdef const uint64_t[::1] _allow
    cdef IvfPart part
    cdef int n_words
    cdef int L

    def __cinit__(self, const uint8_t[:, ::1] codes not None, const float[::1] norms_f32,
                  const uint8_t[::1] norm_codes, const float[::1] norm_levels, const int64_t[::1] ids,
                  const int64_t[::1] list_offsets not None, bint norm_scales=False,
                  const int64_t[::1] list_blocks=None, int n_words=0, const double[::1] scale_range=None,
                  const uint64_t[::1] allow=None):
        cdef int64_t N = list_offsets[list_offsets.shape[0] - 1]
        self._codes = codes
        self._norms_f32 = norms_f32
        self._norm_codes = norm_codes
        self._norm_levels = norm_levels
        self._ids = ids
        self._offsets = list_offsets
        self._list_blocks = list_blocks
        self._allow = allow
        self.L = list_offsets.shape[0] - 1
        memset(&self.part, 0, sizeof(IvfPart))
        self.part.offsets = &list_offsets[0]
        self.part.n_rows = N
        self.part.norms = _norm_terms(norms_f32, norm_codes, norm_levels, norm_scales)
        self.part.allow = &allow[0] if allow is not None and allow.shape[0] > 0 else NULL
        self.part.dense = True  # a segment's live rows: almost every row
        if list_blocks is None:
            self.part.codes = &codes[0, 0] if codes.shape[0] > 0 else NULL
            self.n_words = codes.shape[1]
        else:
            self.n_words = n_words
            self.part.blocks = &codes[0, 0] if codes.shape[0] > 0 else NULL
            self.part.list_blocks = &list_blocks[0]
            self.part.fs_base = _fs_base(n_words, N, norms_f32, norm_codes, norm_levels, NULL, None, norm_scales,
                                         scale_range)
            self.part.fs_base.allow = self.part.allow

    @property
    def n_rows(self):
        return self.part.n_rows


cdef class IvfLists:
    """The parts an inverted-file search reads with their model, as typed views held for the life of the object (a
    search converts none of them again: a query searched alone pays for no more than its own arrays).

    model : TableModel of the fine quantizer (search.tables.QueryTables.model), kind TABLE_L2_NORM_TERM ("l2") or
        TABLE_NEG_DOT; for a flat model the kind of its metric and C
    panels : (P * L,) float32, the centroids in panels (COARSE_PANEL), or None: a flat model (one list of every row,
        no coarse step, no list term); c_sqnorms : (L,) float32, their squared norms (None when flat)
    probe_kind : PROBE_L2 or PROBE_IP; term_factor : -2 ("l2") or -1 (scores): list l's term is term_factor * q.c_l
    parts : list of IvfPartRows with L lists each, all byte codes or all in fast-scan blocks
    half : CoarseHalf of the centroids for probe_kind, or None: the prefilter of a query alone (a coarse step of one
        query reads it instead of every centroid; the lists and terms are the same)
    """

    cdef TableModel _model
    cdef const float[::1] _panels
    cdef const float[::1] _c_sqnorms
    cdef list _parts
    cdef IvfPart *parts
    cdef const int64_t **ids
    cdef ock_fs_norm _fs_norm
    cdef CoarseHalf _half
    cdef IvfQuery job

    def __cinit__(self, TableModel model not None, const float[::1] panels, const float[::1] c_sqnorms,
                  int probe_kind, float term_factor, list parts not None, CoarseHalf half=None):
        cdef IvfPartRows rows
        cdef IvfPartRows first = parts[0] if parts else None
        cdef int p, L
        self.parts = NULL
        self.ids = NULL
        if not parts:
            raise ValueError("IvfLists: at least one part")
        L = 1 if panels is None else c_sqnorms.shape[0]
        self._model = model
        self._panels = panels
        self._c_sqnorms = c_sqnorms
        self._parts = list(parts)
        self.parts = <IvfPart *>_alloc(len(parts) * sizeof(IvfPart), "a search's parts")
        self.ids = <const int64_t **>_alloc(len(parts) * sizeof(int64_t *), "a search's id table")
        memset(&self.job, 0, sizeof(IvfQuery))
        self.job.tables = model._source
        self.job.L = L
        if panels is not None:
            self.job.panels = &panels[0]
            self.job.c_sqnorms = &c_sqnorms[0]
            self.job.probe_kind = probe_kind
            self.job.term_factor = term_factor
            self._half = half
            self.job.half = _coarse_half(half, model._source.P, L, probe_kind)
        for p in range(len(parts)):
            rows = parts[p]
            if rows.L != L:
                raise ValueError(f"IvfLists: part {p} has {rows.L} lists, not {L}")
            if (rows.part.list_blocks != NULL) != (first.part.list_blocks != NULL):
                raise ValueError("IvfLists: every part holds byte codes or every part fast-scan blocks")
            self.parts[p] = rows.part
            self.parts[p].tag = <int64_t>p << OCK_PART_SHIFT
            self.parts[p].fs_base.ids = self.ids
            self.ids[p] = &rows._ids[0] if rows._ids is not None and rows._ids.shape[0] > 0 else NULL
        rows = parts[0]
        self.job.W = rows.n_words
        self.job.parts = self.parts
        self.job.n_parts = len(parts)
        self.job.ids = self.ids
        if rows.part.list_blocks != NULL:
            self.job.blocks = True
            self.job.block_bytes = ock_fs_block_bytes(rows.n_words)
            for p in range(len(parts)):  # a part with rows has its norm terms (an empty one has NULL pointers)
                if self.parts[p].n_rows > 0:
                    self.job.flags_part = p
                    break
            if (self.parts[self.job.flags_part].fs_base.norm_codes != NULL
                    and not self.parts[self.job.flags_part].fs_base.scales):  # scales: not in the sums
                ock_fs_norm_init(self.parts[self.job.flags_part].fs_base.norm_levels, &self._fs_norm)
                self.job.fs_norm = &self._fs_norm
        self.job.lut_items = _slice_items(<Py_ssize_t>self.job.W * SLOTS)
        self.job.work_items = _slice_items(_table_work_items(&self.job.tables))

    def __dealloc__(self):
        free(self.parts)
        free(<void *>self.ids)

    @property
    def n_parts(self):
        return self.job.n_parts


cdef IvfPart *_parts_of_call(const IvfQuery *job, list allow) except? NULL:
    """A copy of the job's parts with the call's filter (`allow`: one bitmap or None per part), or NULL when the call
    has none (the parts' own allow, a segment's live rows). Each part's density: whether most of its rows are allowed
    (at least 1 / 4, flat.pxi's DENSE_FRACTION), read off the bitmap."""
    cdef IvfPart *parts
    cdef const uint64_t[::1] bits
    cdef Py_ssize_t w, count
    cdef int p
    if allow is None:
        return NULL
    if len(allow) != job.n_parts:
        raise ValueError(f"allow: {len(allow)} bitmaps for {job.n_parts} parts")
    parts = <IvfPart *>_alloc(job.n_parts * sizeof(IvfPart), "a search's filtered parts")
    for p in range(job.n_parts):
        parts[p] = job.parts[p]
        parts[p].allow = NULL
        parts[p].dense = True
        if allow[p] is not None:
            bits = allow[p]
            if bits.shape[0] > 0:
                parts[p].allow = &bits[0]
                count = 0
                for w in range(bits.shape[0]):
                    count += _popcount(bits[w])
                parts[p].dense = count * DENSE_FRACTION >= parts[p].n_rows
        parts[p].fs_base.allow = parts[p].allow
    return parts


def ivf_search(IvfLists lists not None,        # IN the parts' arrays
               const float[:, ::1] queries,     # IN (nq, P) (None only for a flat model's SDC: `rotated`)
               int n_probe,                     # IN lists probed per query, 1..L (a flat model: 1)
               list allow,                      # IN a bitmap (ceil(N_p / 64),) uint64 or None per part: the rows of
                                                #    each part to scan; or None: each part's own (IvfPartRows.allow)
               float[:, ::1] out_dist,          # OUT (nq, k) ascending; with re-ranking the exact values
               int64_t[:, ::1] out_rows,        # OUT (nq, k) the row handles of the results (rows.h; ids with
                                                #     out_ids); (inf, -1) past the last
               int n_threads,
               RerankSource rerank_rows=None,   # IN the stored rows (part p: part p's rows) to re-rank from, or None
               int rerank=0,                    # IN with rerank_rows: candidates kept per query (>= k)
               const float[:, ::1] rerank_queries=None,  # IN (nq, P) the queries re-ranked (None: `queries`; SDC
                                                         #    scans with reconstructions, re-ranks with the queries)
               int32_t[::1] out_flags=None,     # OUT (nq,) with rerank_rows: bad rows seen (rerank's flags)
               bint by_bound=False,             # IN lists in fast-scan blocks: rank by the quantized bounds alone
                                                #    (implied by rerank_rows: fastscan.h "Ranking by the bound")
               bint out_ids=False,              # IN write the results' ids instead of their row handles
               const double[:, ::1] rotated=None):  # IN (nq, M*S) a flat model's SDC: the queries' rotated
                                                    #    reconstructions, scanned instead of `queries`
    """For each query: its n_probe best lists and their terms, its one table (_query_tables, the same arithmetic as
    the exhaustive scan's), then its probed lists scanned in every part, keeping its k best (dist, id) among the
    allowed rows of all parts; writes their distances and row handles. With rerank_rows: keeps `rerank` candidates
    instead, and writes the k best of them by exact value (distances ascending, scores descending; rerank.h) and
    their handles. Lists in fast-scan blocks are scanned by the fast scan (fastscan.pxi), with the same results as
    byte codes. A flat model's one list is every row, with no coarse step. Queries run in groups (COARSE_GROUP: their
    inner products with the centroids computed together), groups in parallel, each on one thread from start to end
    (one thread for a single query: no parallel region); a query's results depend neither on its group nor on the
    number of threads."""
    cdef IvfQuery job = lists.job
    cdef int nq = out_dist.shape[0]
    cdef int k = out_dist.shape[1]
    cdef Py_ssize_t stride
    cdef int64_t *scratch = NULL
    cdef IvfPart *call_parts = NULL
    cdef FsScratch fs
    cdef IvfSearchJob run
    cdef int group, n_groups
    if nq == 0 or k == 0:
        return
    n_threads = ock_pool_threads(n_threads, nq * _ivf_query_work(&job, n_probe, rerank if rerank_rows is not None
                                                                 else 0))
    group = _coarse_group(job.L, nq, n_threads)
    n_groups = (nq + group - 1) // group
    if n_threads > n_groups:
        n_threads = n_groups
    job.tables.queries = &queries[0, 0] if queries is not None else NULL
    job.tables.rotated = &rotated[0, 0] if rotated is not None else NULL
    job.n_probe = n_probe if job.panels != NULL else 1
    job.k = k
    job.width = k
    job.by_bound = by_bound
    job.out_ids = out_ids
    if rerank_rows is not None:
        job.rerank = &rerank_rows.src
        job.values = ock_rerank_values()
        job.width = rerank if rerank > k else k
        job.rerank_queries = &rerank_queries[0, 0] if rerank_queries is not None else &queries[0, 0]
        job.by_bound = True
    stride = _slice_items(_ivf_query_items(&job) + _dots_items(group, job.L))
    memset(&fs, 0, sizeof(fs))
    try:
        call_parts = _parts_of_call(&job, allow)
        if call_parts != NULL:
            job.parts = call_parts
        scratch = <int64_t *>_alloc(<size_t>n_threads * stride * sizeof(int64_t), "ivf_search's scratch (per thread)")
        if job.blocks:  # a fast-scan slot per thread (tables, collector, candidates)
            _fs_scratch_alloc(&fs, n_threads, n_threads, job.W, job.width, &job.tables)
        run.job = &job
        run.nq = nq
        run.group = group
        run.scratch = scratch
        run.stride = stride
        run.fs = &fs
        run.out_dist = &out_dist[0, 0]
        run.out_rows = &out_rows[0, 0]
        run.out_flags = &out_flags[0] if out_flags is not None else NULL
        with nogil:
            ock_pool_run(_ivf_group_task, &run, n_groups, n_threads, OCK_POOL_DYNAMIC)
    finally:
        free(scratch)
        free(call_parts)
        _fs_scratch_free(&fs)


cdef struct IvfSearchJob:
    # ivf_search's parallel region: the shared job, the groups, the per-thread scratch (slice tid) and the outputs
    const IvfQuery *job
    int nq, group
    int64_t *scratch
    Py_ssize_t stride
    FsScratch *fs
    float *out_dist
    int64_t *out_rows
    int32_t *out_flags


cdef void _ivf_group_task(void *ctx, int64_t g, int tid) noexcept nogil:
    """Group g of ivf_search, in thread tid's scratch (and fast-scan slot)."""
    cdef IvfSearchJob *r = <IvfSearchJob *>ctx
    cdef int q0 = <int>g * r.group
    _ivf_group(r.job, q0, r.group if r.group < r.nq - q0 else r.nq - q0, r.scratch + tid * r.stride,
               r.fs.slots + tid if r.fs.slots != NULL else NULL,
               r.fs.work + tid * r.fs.work_stride if r.fs.work != NULL else NULL, r.out_dist, r.out_rows,
               r.out_flags)


cdef double _ivf_query_work(const IvfQuery *job, int n_probe, int rerank) noexcept nogil:
    """The work of one query of ivf_search (the small-work rule's units): its inner products with the centroids,
    its table, the rows of n_probe average lists of every part, and the re-ranking of `rerank` candidates."""
    cdef const TableSource *t = &job.tables
    cdef double rows = 0
    cdef double coarse = 0
    cdef int p
    for p in range(job.n_parts):
        rows += <double>job.parts[p].n_rows
    if job.panels != NULL and job.L > 0:  # a flat model scans its one list, with no coarse step
        rows = rows * n_probe / job.L
        coarse = COST_GEMM_VALUE * <double>job.L * t.P
    return (coarse + COST_TABLE_VALUE * (<double>t.P * t.D + <double>t.D * t.C * t.K)
            + (COST_FAST_SCAN_WORD if job.blocks else COST_SCAN_BYTE) * rows * job.W
            + COST_EXACT_VALUE * <double>rerank * t.P)


cdef inline int _coarse_group(int L, Py_ssize_t nq, int n_threads) noexcept nogil:
    """Queries per group of the coarse step (COARSE_GROUP says why) for nq queries on n_threads threads."""
    cdef Py_ssize_t group = COARSE_GROUP
    cdef Py_ssize_t per_thread = (nq + n_threads - 1) // n_threads
    if group > per_thread:
        group = per_thread
    while group > 1 and group * L * <Py_ssize_t>sizeof(float) > COARSE_GROUP_BYTES:
        group -= 1
    return <int>group if group > 1 else 1


cdef inline Py_ssize_t _dots_items(int group, int L) noexcept nogil:
    """8-byte items of a group's inner products with the centroids (group x L floats)."""
    return (<Py_ssize_t>group * L + 1) // 2


cdef inline Py_ssize_t _probe_items(int L, int n_probe) noexcept nogil:
    """8-byte items of one query's probing scratch: its keys (L floats), a collector of n_probe, and the sorted lists
    (n_probe rows and keys)."""
    return (L + 1) // 2 + _topk_items(n_probe) + n_probe * 2


cdef inline Py_ssize_t _ivf_query_items(const IvfQuery *job) noexcept nogil:
    """8-byte items of one query's scratch: probing, its table, the table kernel's work, its collector, with
    re-ranking the candidates, the re-ranking loop's own scratch and (several parts) the candidates' parts and rows,
    and last, with a prefilter, the prefilter's work (_alone_items: used while the query alone probes, before
    anything after the lists is)."""
    cdef Py_ssize_t items = (_probe_items(job.L, job.n_probe) + (job.lut_items + 1) // 2 + job.work_items
                             + _topk_items(job.width))
    if job.rerank != NULL:
        items += job.width * 2 + job.k + (<Py_ssize_t>ock_rr_scratch_bytes(job.rerank.P, job.k) + 7) // 8 + 8
        if job.n_parts > 1:
            items += job.width * 2
    return items + _alone_items(job.half, job.L)


cdef void _probe_lists(const float *dots, const float *c_sqnorms, int L, int kind, int n_probe, int64_t *scratch,
                       int64_t *lists, float *list_keys) noexcept nogil:
    """The lists one query probes, from its inner products with the centroids dots (L,): lists (n_probe,) best first
    by key, ties to the smaller l, and their keys (padded with (+inf, -1) if fewer than n_probe keys are numbers);
    scratch: _probe_items(L, n_probe) 8-byte items.

    Only the keys not above a bound enter: the largest of the minima of n_probe disjoint runs of lists, which the
    n_probe best cannot exceed (n_probe keys are not above it)."""
    cdef float *keys = <float *>scratch
    cdef int l, r, run = L // n_probe
    cdef float least, bound = -INFINITY
    if kind == PROBE_BY_L2:
        for l in range(L):
            keys[l] = c_sqnorms[l] - 2 * dots[l]
    else:
        for l in range(L):
            keys[l] = -dots[l]
    for r in range(n_probe):
        least = ock_min(keys + <Py_ssize_t>r * run, run)
        if least != least:  # NaN (from overflowing values): no bound
            bound = INFINITY
            break
        if least > bound:
            bound = least
    _keep_best(keys, NULL, L, n_probe, bound, scratch + (L + 1) // 2, lists, list_keys)


cdef void _keep_best(const float *keys, const int *ids, int n, int n_probe, float bound, int64_t *buffers,
                     int64_t *lists, float *list_keys) noexcept nogil:
    """The n_probe best of keys[0..n-1], best first, ties to the smaller list (the list of key i: ids[i], or i when
    ids is NULL; increasing with i), keys above `bound` left out (keys equal to it enter), +inf and NaN never: lists
    (n_probe,) and their keys, padded with (+inf, -1). buffers: _topk_items(n_probe) 8-byte items.

    On sift with 1,024 lists, 23 lists are within the bound on average at n_probe 8 (54 at 16, 121 at 32), so a small
    n_probe keeps its best in a sorted array by insertion (no collector to fill and compact: that took as long as the
    inner products); a larger n_probe uses the collector (TopK), which keeps the same lists."""
    cdef TopK t
    cdef int i, j, held = 0
    cdef float key
    if n_probe > PROBE_INSERT_MAX:
        _topk_start(&t, buffers, n_probe, NULL, INFINITY)
        if bound < t.threshold:
            t.threshold = bound  # inclusive: keys equal to the bound enter
        for i in range(n):
            ock_topk_offer(&t, keys[i], ids[i] if ids != NULL else i)
        ock_topk_finish(&t, list_keys, lists, 1)
        return
    # insertion: lists come in increasing order, so a key equal to one held goes after it (ties: the smaller first)
    if bound > 3.4028234663852886e+38:
        bound = 3.4028234663852886e+38  # as the collector: +inf never enters
    for i in range(n):
        key = keys[i]
        if not (key <= bound) or (held == n_probe and not (key < list_keys[n_probe - 1])):
            continue
        j = held if held < n_probe else n_probe - 1
        while j > 0 and list_keys[j - 1] > key:
            list_keys[j] = list_keys[j - 1]
            lists[j] = lists[j - 1]
            j -= 1
        list_keys[j] = key
        lists[j] = ids[i] if ids != NULL else i
        if held < n_probe:
            held += 1
    for j in range(held, n_probe):
        list_keys[j] = INFINITY
        lists[j] = -1


cdef bint _probe_candidates(const float *dots, const float *c_sqnorms, const int *cand, int n, int kind, int n_probe,
                            int64_t *scratch, int64_t *lists, float *list_keys) noexcept nogil:
    """_probe_lists's choice for a query alone among its candidate lists (ock_coarse_alone: increasing, n >= n_probe,
    holding its n_probe best; their inner products in dots): the same lists and keys from the same keys, in
    `scratch` (_probe_items(L, n_probe)); False when a candidate's key is not a finite number (the caller then takes
    the full step, which ranks such keys its own way)."""
    cdef float *keys = <float *>scratch
    cdef int i, l
    for i in range(n):
        l = cand[i]
        if kind == PROBE_BY_L2:
            keys[i] = c_sqnorms[l] - 2 * dots[l]
        else:
            keys[i] = -dots[l]
        if not (keys[i] - keys[i] == 0):  # inf or NaN
            return False
    _keep_best(keys, cand, n, n_probe, INFINITY, scratch + (n + 1) // 2, lists, list_keys)
    return lists[n_probe - 1] >= 0


cdef int _probe_alone(const float *q, const ock_coarse_half *half, const float *c_sqnorms, int L, int kind,
                      int n_probe, float *dots, int64_t *alone, int64_t *scratch, int64_t *lists,
                      float *list_keys) noexcept nogil:
    """The coarse step of query q alone through the prefilter `half` (ivf.h, "A query alone"): its lists and keys
    as _probe_lists chooses them, and the inner products dots[l] of (at least) those lists, as coarse_dots computes
    them; returns the number of lists whose inner products it computed, or 0: the prefilter did not apply, the
    caller takes the full step. alone: _alone_items(half, L) 8-byte items; scratch: _probe_items(L, n_probe)."""
    cdef int *cand = <int *>alone
    cdef int n
    if half == NULL:
        return 0
    n = ock_coarse_alone(q, half, c_sqnorms, n_probe, alone + (L + 16 + 1) // 2, cand, dots)
    if n <= 0 or not _probe_candidates(dots, c_sqnorms, cand, n, kind, n_probe, scratch, lists, list_keys):
        return 0
    return n


cdef void _probe_group(const float *queries, int q0, int count, const float *panels, const float *c_sqnorms, int P,
                       int L, int kind, float term_factor, int n_probe, const ock_coarse_half *half,
                       int64_t *scratch, int32_t *out_lists, float *out_terms, int32_t *out_refined) noexcept nogil:
    """probe's work for queries q0 .. q0+count-1, in `scratch` (_dots_items(count, L) + _probe_items(L, n_probe) +
    _alone_items(half, L)): a group of one query through the prefilter `half` when it applies."""
    cdef float *dots = <float *>scratch
    cdef int64_t *buffers = scratch + _dots_items(count, L)
    cdef int64_t *lists = buffers + (L + 1) // 2 + _topk_items(n_probe)
    cdef int64_t *alone = buffers + _probe_items(L, n_probe)
    cdef const float *d
    cdef int i, j, refined = 0
    cdef Py_ssize_t row
    if count == 1:
        refined = _probe_alone(queries + <Py_ssize_t>q0 * P, half, c_sqnorms, L, kind, n_probe, dots, alone, buffers,
                               lists, <float *>(lists + n_probe))
    if refined == 0:
        ock_coarse_dots(queries + <Py_ssize_t>q0 * P, count, panels, P, L, dots)
    for i in range(count):
        d = dots + <Py_ssize_t>i * L
        if refined == 0:
            _probe_lists(d, c_sqnorms, L, kind, n_probe, buffers, lists, <float *>(lists + n_probe))
        row = <Py_ssize_t>(q0 + i) * n_probe
        for j in range(n_probe):
            out_lists[row + j] = <int32_t>lists[j]
            out_terms[row + j] = term_factor * d[lists[j]] if lists[j] >= 0 else INFINITY
        if out_refined != NULL:
            out_refined[q0 + i] = refined if refined > 0 else L


def probe(const float[:, ::1] queries,      # IN (nq, P)
          const float[::1] panels,          # IN (P * L,): the centroids in panels (COARSE_PANEL)
          const float[::1] c_sqnorms,       # IN (L,): ||c_l||^2 (read for PROBE_L2)
          int kind,                         # IN PROBE_L2 or PROBE_IP
          float term_factor,                # IN the list term is term_factor * q.c_l: -2 (metric "l2"), -1 (scores)
          int32_t[:, ::1] out_lists,        # OUT (nq, n_probe): the lists to scan, best first (ties: smaller l)
          float[:, ::1] out_terms,          # OUT (nq, n_probe): their list terms
          int n_threads=1,
          CoarseHalf half=None,             # IN the prefilter of a query alone (for `kind`), or None
          int32_t[::1] out_refined=None):   # OUT (nq,): lists whose inner product was computed (L: the full step)
    """The coarse step of ivf_search on its own (the fast scan of IVF lists probes with it; its tests check the lists
    a query probes): the same functions, queries in the same groups (COARSE_GROUP), groups in parallel, a group of
    one query through the prefilter `half` when given. A query's lists and terms depend neither on the batch nor on
    the number of threads, nor on `half`."""
    cdef int nq = queries.shape[0]
    cdef int P = queries.shape[1]
    cdef int L = c_sqnorms.shape[0]
    cdef int n_probe = out_lists.shape[1]
    cdef int64_t *scratch = NULL
    cdef Py_ssize_t stride
    cdef int group, n_groups
    cdef ProbeJob job
    cdef const ock_coarse_half *prefilter = _coarse_half(half, P, L, kind)
    cdef int32_t *refined = NULL
    if out_refined is not None:
        if out_refined.shape[0] != nq:
            raise ValueError(f"out_refined must hold {nq} counts, got {out_refined.shape[0]}")
        refined = &out_refined[0] if nq > 0 else NULL
    if nq == 0 or n_probe == 0:
        return
    n_threads = ock_pool_threads(n_threads, COST_GEMM_VALUE * nq * <double>L * P)
    group = _coarse_group(L, nq, n_threads)
    n_groups = (nq + group - 1) // group
    if n_threads > n_groups:
        n_threads = n_groups
    stride = _slice_items(_dots_items(group, L) + _probe_items(L, n_probe) + _alone_items(prefilter, L))
    try:
        scratch = <int64_t *>_alloc(<size_t>n_threads * stride * sizeof(int64_t), "probe's scratch (per thread)")
        job.queries = &queries[0, 0]
        job.panels = &panels[0]
        job.c_sqnorms = &c_sqnorms[0]
        job.nq, job.group, job.P, job.L, job.kind, job.n_probe = nq, group, P, L, kind, n_probe
        job.term_factor = term_factor
        job.half = prefilter
        job.scratch = scratch
        job.stride = stride
        job.out_lists = &out_lists[0, 0]
        job.out_terms = &out_terms[0, 0]
        job.refined = refined
        with nogil:
            ock_pool_run(_probe_group_task, &job, n_groups, n_threads, OCK_POOL_DYNAMIC)
    finally:
        free(scratch)


cdef struct ProbeJob:
    # probe's arguments as pointers, and its per-thread scratch (slice tid)
    const float *queries
    const float *panels
    const float *c_sqnorms
    int nq, group, P, L, kind, n_probe
    float term_factor
    const ock_coarse_half *half
    int64_t *scratch
    Py_ssize_t stride
    int32_t *out_lists
    float *out_terms
    int32_t *refined


cdef void _probe_group_task(void *ctx, int64_t g, int tid) noexcept nogil:
    """Group g of probe, in thread tid's scratch."""
    cdef ProbeJob *j = <ProbeJob *>ctx
    cdef int q0 = <int>g * j.group
    _probe_group(j.queries, q0, j.group if j.group < j.nq - q0 else j.nq - q0, j.panels, j.c_sqnorms, j.P, j.L,
                 j.kind, j.term_factor, j.n_probe, j.half, j.scratch + tid * j.stride, j.out_lists, j.out_terms,
                 j.refined)


cdef void _ivf_group(const IvfQuery *job, int q0, int count, int64_t *scratch, FsSlot *slot, double *fs_work,
                     float *out_dist, int64_t *out_rows, int32_t *out_flags) noexcept nogil:
    """ivf_search's work for queries q0 .. q0+count-1 (out_*: the whole batch's outputs), in `scratch`
    (_ivf_query_items, then _dots_items(count, L)), and with fast-scan lists the thread's slot and its table work:
    their inner products with the centroids together (a group of one query through the prefilter job.half when it
    applies, its work in the last _alone_items of the query's scratch), then each query's lists and its own work. A
    flat model's queries each probe the one list, of term 0."""
    cdef float *dots = <float *>(scratch + _ivf_query_items(job))
    cdef int64_t *lists = scratch + (job.L + 1) // 2 + _topk_items(job.n_probe)
    cdef float *list_keys = <float *>(lists + job.n_probe)
    cdef int i, q
    cdef int P = job.tables.P
    if job.panels == NULL:
        lists[0] = 0
        dots[0] = 0
        for q in range(q0, q0 + count):
            _ivf_query(job, q, dots, scratch, slot, fs_work, out_dist + <Py_ssize_t>q * job.k,
                       out_rows + <Py_ssize_t>q * job.k, out_flags + q if out_flags != NULL else NULL)
        return
    if count == 1 and _probe_alone(job.tables.queries + <Py_ssize_t>q0 * P, job.half, job.c_sqnorms, job.L,
                                   job.probe_kind, job.n_probe, dots,
                                   <int64_t *>dots - _alone_items(job.half, job.L), scratch, lists, list_keys) > 0:
        _ivf_query(job, q0, dots, scratch, slot, fs_work, out_dist + <Py_ssize_t>q0 * job.k,
                   out_rows + <Py_ssize_t>q0 * job.k, out_flags + q0 if out_flags != NULL else NULL)
        return
    ock_coarse_dots(job.tables.queries + <Py_ssize_t>q0 * P, count, job.panels, P, job.L, dots)
    for i in range(count):
        q = q0 + i
        _probe_lists(dots + <Py_ssize_t>i * job.L, job.c_sqnorms, job.L, job.probe_kind, job.n_probe, scratch, lists,
                     list_keys)
        _ivf_query(job, q, dots + <Py_ssize_t>i * job.L, scratch, slot, fs_work, out_dist + <Py_ssize_t>q * job.k,
                   out_rows + <Py_ssize_t>q * job.k, out_flags + q if out_flags != NULL else NULL)


cdef inline float _list_term(const IvfQuery *job, const float *dots, int l) noexcept nogil:
    """List l's term, term_factor * q.c_l (0 for a flat model's one list: no term is added)."""
    return job.term_factor * dots[l] if job.panels != NULL else 0


cdef void _ivf_query(const IvfQuery *job, int q, const float *dots, int64_t *scratch, FsSlot *slot, double *fs_work,
                     float *out_dist, int64_t *out_rows, int32_t *out_flag) noexcept nogil:
    """ivf_search's work for query q once its lists are chosen (in `scratch`, where _probe_lists writes them) with
    their inner products (dots[l] for each list l it probes), in `scratch` (_ivf_query_items; with fast-scan lists,
    `slot` and `fs_work` too): each probed list of every part scanned into one collector."""
    cdef int64_t *lists = scratch + (job.L + 1) // 2 + _topk_items(job.n_probe)
    cdef float *lut = <float *>(scratch + _probe_items(job.L, job.n_probe))
    cdef double *work = <double *>(<int64_t *>lut + (job.lut_items + 1) // 2)
    cdef int64_t *buffers = <int64_t *>(work + job.work_items)
    cdef int64_t *candidates
    cdef int64_t *positions
    cdef int64_t *after
    cdef const IvfPart *part
    cdef TopK t
    cdef float qconst, start_term
    cdef int j, l, p, flag
    cdef int64_t a, b
    if job.blocks:
        _ivf_query_fast_scan(job, q, dots, lists, slot, fs_work)
        if job.rerank == NULL:
            ock_fs_heap_sort_into(&slot.c.heap, out_dist, out_rows)
            _rows_to_ids(job, out_rows)
            return
        candidates = slot.c.heap.r  # the R handles of smallest bound, in the heap's order (their set is what counts)
        positions = buffers
    else:
        # the table, then the lists of every part
        qconst = _query_tables(&job.tables, q, work, lut, SLOTS)
        _topk_start(&t, buffers, job.width, job.ids, INFINITY)
        for j in range(job.n_probe):
            l = <int>lists[j]
            if l < 0:  # fewer lists than n_probe (keys that are not numbers)
                break
            start_term = qconst + _list_term(job, dots, l) if job.panels != NULL else qconst
            for p in range(job.n_parts):
                part = &job.parts[p]
                a = part.offsets[l]
                b = part.offsets[l + 1]
                if a == b:
                    continue
                if part.allow == NULL or part.dense:
                    _scan_rows(&t, part.codes, job.W, lut, start_term, _norm_terms_from(part.norms, a), a, b,
                               part.allow, part.tag)
                else:
                    _scan_allowed_rows(&t, part.codes, job.W, lut, start_term, _norm_terms_from(part.norms, a), a, b,
                                       part.allow, part.tag)
        if job.rerank == NULL:
            ock_topk_finish(&t, out_dist, out_rows, 1)
            _rows_to_ids(job, out_rows)
            return
        # re-ranking: the candidates in the order they came (their set is what counts)
        candidates = buffers + _topk_items(job.width)
        positions = candidates + job.width * 2
        ock_topk_finish(&t, <float *>(candidates + job.width), candidates, 0)
    # the k best candidates by exact value: their ids (the stored rows' ids), or their handles
    after = positions + job.k + (<Py_ssize_t>ock_rr_scratch_bytes(job.rerank.P, job.k) + 7) // 8 + 8
    flag = _rerank_handles(job, q, candidates, positions, after, out_dist, out_rows)
    if not job.out_ids:
        for j in range(job.k):
            out_rows[j] = candidates[positions[j]] if positions[j] >= 0 else -1
    if out_flag != NULL:
        out_flag[0] = flag


cdef int _rerank_handles(const IvfQuery *job, int q, const int64_t *handles, int64_t *positions, int64_t *split,
                         float *out_dist, int64_t *out_ids) noexcept nogil:
    """Re-rank query q's job.width candidates (row handles, -1 for none) from the stored rows: their k best by exact
    value, ids and positions among the handles (rerank.h's flags returned). With several parts the handles are first
    split into rows and parts (in `split`: 2 * width items)."""
    cdef int64_t *rows
    cdef int64_t *parts
    cdef int j
    cdef const float *query = job.rerank_queries + <Py_ssize_t>q * job.rerank.P
    if job.n_parts == 1:
        return ock_rerank_query(job.rerank, query, handles, NULL, job.width, job.k, positions + job.k, job.values,
                                out_dist, out_ids, positions)
    rows = split
    parts = split + job.width
    for j in range(job.width):
        if handles[j] >= 0:
            rows[j] = handles[j] & OCK_ROW_MASK
            parts[j] = handles[j] >> OCK_PART_SHIFT
        else:
            rows[j] = -1
            parts[j] = 0
    return ock_rerank_query(job.rerank, query, rows, parts, job.width, job.k, positions + job.k, job.values, out_dist,
                            out_ids, positions)


cdef void _ivf_query_fast_scan(const IvfQuery *job, int q, const float *dots, const int64_t *lists, FsSlot *slot,
                               double *fs_work) noexcept nogil:
    """The scan of query q's probed lists (lists, best first, -1 past the last) in fast-scan blocks, in every part:
    its tables, then its lists, each from its own term (its exact stage done; its job.width best in slot.c.heap, in
    the heap's order), as fastscan.pxi's exhaustive scan does for one run."""
    cdef int j, p
    cdef int64_t l
    cdef const IvfPart *part
    cdef bint in_list = job.panels != NULL
    _fs_prepare(slot, &job.tables, q, fs_work, job.fs_norm)
    _fs_start(slot, job.width, job.ids, INFINITY, job.by_bound)
    for j in range(job.n_probe):
        l = lists[j]
        if l < 0:
            break
        for p in range(job.n_parts):
            part = &job.parts[p]
            if part.offsets[l + 1] > part.offsets[l]:
                _fs_run(&slot.run, slot, part.blocks + <size_t>part.list_blocks[l] * job.block_bytes, part.offsets[l],
                        part.offsets[l + 1] - part.offsets[l], in_list, _list_term(job, dots, l))
                slot.run.tag = part.tag
                ock_fs_scan_run(&part.fs_base, &slot.q, &slot.run, &slot.c)
    ock_fs_refine(&slot.c, &job.parts[job.flags_part].fs_base, &slot.q)


cdef inline void _rows_to_ids(const IvfQuery *job, int64_t *out_rows) noexcept nogil:
    """With out_ids: the k row handles written replaced by their ids (-1 stays -1)."""
    cdef int j
    if job.out_ids:
        for j in range(job.k):
            out_rows[j] = ock_row_id(job.ids, out_rows[j])


# --------------------------------------------------------------------------------------------------------------------
# One query per call.

cdef class IvfOneQuery:
    """ivf_search of one query with everything else bound: the parts' lists, k, n_probe, and the stored rows to
    re-rank from with R (or None). A Searcher keeps it for an app that searches a query per call: that call then
    costs the kernel's work and little more (the general path's Python steps took about as long again in cache misses
    as they took themselves, ~9 us per query in all).

    search(q, norm, out_dist, out_ids) takes a query its caller checked (a C-contiguous float32 vector of P finite
    values, search.searcher says how) and, with `normalize` (metric "cosine"), its norm > 0 (_sqnorm64's, as
    _validation.normalize_rows computes it): it searches q / norm. It writes the k results as ivf_search(out_ids=True)
    writes them and returns ivf_search's flag of bad stored rows among the candidates (0: none). The results are
    ivf_search's: the same functions on the same values."""

    cdef IvfLists lists
    cdef RerankSource rerank_rows
    cdef IvfQuery job
    cdef bint normalize
    cdef Py_ssize_t unit_items   # where the query at unit length goes in the scratch (8-byte items from its start)
    cdef int64_t *scratch        # the scratch of one query, kept: a call that finds it in use allocates its own
    cdef FsScratch fs
    cdef bint busy

    def __cinit__(self, IvfLists lists not None, int k, int n_probe, RerankSource rerank_rows, int rerank,
                  bint normalize):
        self.scratch = NULL
        memset(&self.fs, 0, sizeof(self.fs))
        self.lists = lists
        self.rerank_rows = rerank_rows
        self.normalize = normalize
        self.job = lists.job
        self.job.n_probe = n_probe if self.job.panels != NULL else 1
        self.job.k = k
        self.job.width = k
        self.job.out_ids = True
        if rerank_rows is not None:
            self.job.rerank = &rerank_rows.src
            self.job.values = ock_rerank_values()
            self.job.width = rerank if rerank > k else k
            self.job.by_bound = True
        self.unit_items = _slice_items(_ivf_query_items(&self.job) + _dots_items(1, self.job.L))
        self.scratch = self._allocate(&self.fs)

    cdef int64_t *_allocate(self, FsScratch *fs) except NULL:
        """A query's scratch as ivf_search allocates it for one thread, then room for the query at unit length (P
        floats: _unit_query); with fast-scan lists its slot in fs."""
        cdef int64_t *scratch = <int64_t *>_alloc(<size_t>(self.unit_items + (self.job.tables.P + 1) // 2)
                                                  * sizeof(int64_t), "the scratch of a search of one query")
        if self.job.blocks:
            try:
                _fs_scratch_alloc(fs, 1, 1, self.job.W, self.job.width, &self.job.tables)
            except MemoryError:
                free(scratch)
                _fs_scratch_free(fs)
                raise
        return scratch

    def __dealloc__(self):
        free(self.scratch)
        _fs_scratch_free(&self.fs)

    def search(self, const float[::1] q not None, double norm, float[::1] out_dist not None,
               int64_t[::1] out_ids not None):
        cdef IvfQuery job
        cdef int64_t *scratch
        cdef FsScratch own
        cdef FsScratch *fs
        cdef int32_t flag = 0
        cdef bint mine
        cdef const float *query
        job = self.job
        mine = not self.busy
        if mine:
            self.busy = True
            scratch, fs = self.scratch, &self.fs
        else:  # another thread is searching with this object (each call holds the GIL until here)
            memset(&own, 0, sizeof(own))
            scratch, fs = self._allocate(&own), &own
        query = &q[0]
        if self.normalize:
            query = _unit_query(&q[0], norm, job.tables.P, <float *>(scratch + self.unit_items))
        job.tables.queries = query
        job.rerank_queries = query
        try:
            with nogil:
                _ivf_group(&job, 0, 1, scratch, fs.slots, fs.work, &out_dist[0], &out_ids[0], &flag)
        finally:
            if mine:
                self.busy = False
            else:
                free(scratch)
                _fs_scratch_free(&own)
        return flag


def query_checks(const float[::1] q not None):
    """(the largest |value| of q, its squared norm in float64 as _validation.normalize_rows computes it): what a
    Searcher checks of one query before the compiled one-query search (NaN and inf give a largest |value| that is no
    number or inf)."""
    return ock_max_abs(&q[0], q.shape[0]) if q.shape[0] > 0 else 0.0, _sqnorm64(&q[0], q.shape[0])


cdef const float *_unit_query(const float *q, double norm, int P, float *out) noexcept nogil:
    """q / norm written to out, each value divided in float64 and rounded once (as NumPy divides float32 rows by
    float64 norms into float32 in _validation.normalize_rows)."""
    cdef int p
    for p in range(P):
        out[p] = <float>(<double>q[p] / norm)
    return out
