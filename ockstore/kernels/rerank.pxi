# Exact re-ranking (included by _kernels.pyx; the loop is rerank.h's): the exact values of each query's candidates,
# read from their stored rows, and the best k by (value, id), in one compiled loop per query. Also the exhaustive
# exact search that gives the true neighbours (tuning's ground truth).
#
# A RerankSource holds the rows: one array per part (an index's `vectors` section; the segments of a collection),
# every part of one kind (float32, float16, uint8 or sq8 codes) and dimension, the metric, and for sq8 the model's
# value ranges. A candidate is a row of a part. The scans of flat.pxi and ivf.pxi call the same
# loop on their candidates before they leave the kernel (a search with `rerank` and stored vectors); `rerank` below
# takes candidates from anywhere else (a collection's merged candidates, vectors gathered from the caller's array).

cdef extern from "kernels/rerank.h" nogil:
    enum:
        OCK_RR_F32
        OCK_RR_F16
        OCK_RR_U8
        OCK_RR_SQ8
        OCK_RR_L2
        OCK_RR_IP
        OCK_RR_COSINE
        OCK_RR_BAD_VALUES
        OCK_RR_ZERO_VECTOR
    ctypedef struct ock_rr_part:
        const unsigned char *rows
        const int64_t *ids
    ctypedef struct ock_rr_source:
        int dtype
        int metric
        int P
        int64_t row_bytes
        const double *sq8_lo
        const double *sq8_step
        const ock_rr_part *parts
        int n_parts
    ctypedef struct ock_rr_state:
        pass
    int ock_rr_padded(int P)
    size_t ock_rr_scratch_bytes(int P, int k)
    void ock_rr_begin(ock_rr_state *st, const ock_rr_source *src, const float *q, const int64_t *rows,
                      const int64_t *parts, int k, void *scratch, const ock_rr_value_table *values)
    void ock_rr_offer_range(ock_rr_state *st, int64_t j0, int64_t j1)
    int ock_rr_end(ock_rr_state *st, float *out_value, int64_t *out_id, int64_t *out_pos)
    int ock_rerank_query(const ock_rr_source *src, const float *q, const int64_t *rows, const int64_t *parts,
                         int64_t R, int k, void *scratch, const ock_rr_value_table *values, float *out_value,
                         int64_t *out_id, int64_t *out_pos)

# The kinds of stored rows, the metrics and the flags of bad rows, as the Python layers name them.
RERANK_FLOAT32 = OCK_RR_F32
RERANK_FLOAT16 = OCK_RR_F16
RERANK_UINT8 = OCK_RR_U8
RERANK_SQ8 = OCK_RR_SQ8
RERANK_L2 = OCK_RR_L2
RERANK_IP = OCK_RR_IP
RERANK_COSINE = OCK_RR_COSINE
RERANK_BAD_VALUES = OCK_RR_BAD_VALUES
RERANK_ZERO_VECTOR = OCK_RR_ZERO_VECTOR

cdef enum:
    # Bytes of the rows an exhaustive exact search reads per block: a group of queries computes its values over a
    # block while it stays in L2, so a batch reads the rows from memory once per group.
    EXACT_BLOCK_BYTES = 1 << 17
    # Queries per group of the exhaustive exact search.
    EXACT_GROUP = 8


cdef class RerankSource:
    """The stored rows re-ranking reads, as typed pointers held for the life of the object.

    rows : list of ndarray, each (n_i, row_bytes) uint8, C-contiguous: part i's rows as bytes
        (``vectors.view(np.uint8)`` of a float32 / float16 / uint8 / sq8 section; read-only views and memory maps
        welcome)
    ids : list of (ndarray of shape (n_i,) int64, or None): the id of each row of part i (None: the row number)
    kind : RERANK_FLOAT32, RERANK_FLOAT16, RERANK_UINT8 or RERANK_SQ8 (every part alike)
    metric : RERANK_L2, RERANK_IP or RERANK_COSINE
    dim : P
    value_ranges : (2, P) float32 for RERANK_SQ8 (the model's lo and hi of each dimension), else None
    """

    cdef ock_rr_source src
    cdef ock_rr_part *parts
    cdef list _held             # the arrays the pointers point into
    cdef double *_ranges        # sq8: lo, then step, each ock_rr_padded(P) float64, zero past P

    def __cinit__(self, list rows not None, list ids not None, int kind, int metric, int dim,
                  const float[:, ::1] value_ranges):
        cdef const uint8_t[:, ::1] part_rows
        cdef const int64_t[::1] part_ids
        cdef int i, p, padded
        cdef int itemsize = 4 if kind == OCK_RR_F32 else 2 if kind == OCK_RR_F16 else 1
        self.parts = NULL
        self._ranges = NULL
        self._held = []
        self.parts = <ock_rr_part *>_alloc(max(1, len(rows)) * sizeof(ock_rr_part), "a re-ranking source's parts")
        for i in range(len(rows)):
            part_rows = rows[i]
            if part_rows.shape[1] != dim * itemsize:
                raise ValueError(f"part {i} has rows of {part_rows.shape[1]} bytes, not {dim * itemsize}")
            self.parts[i].rows = &part_rows[0, 0] if part_rows.shape[0] > 0 else NULL
            self.parts[i].ids = NULL
            if ids[i] is not None:
                part_ids = ids[i]
                self.parts[i].ids = &part_ids[0] if part_ids.shape[0] > 0 else NULL
            self._held.append((rows[i], ids[i]))
        self.src.dtype = kind
        self.src.metric = metric
        self.src.P = dim
        self.src.row_bytes = <int64_t>dim * itemsize
        self.src.parts = self.parts
        self.src.n_parts = len(rows)
        self.src.sq8_lo = NULL
        self.src.sq8_step = NULL
        if kind == OCK_RR_SQ8:
            padded = ock_rr_padded(dim)
            self._ranges = <double *>_alloc(2 * padded * sizeof(double), "a re-ranking source's value ranges")
            memset(self._ranges, 0, 2 * padded * sizeof(double))
            for p in range(dim):
                self._ranges[p] = value_ranges[0, p]
                self._ranges[padded + p] = (<double>value_ranges[1, p] - <double>value_ranges[0, p]) / 255
            self.src.sq8_lo = self._ranges
            self.src.sq8_step = self._ranges + padded

    def __dealloc__(self):
        free(self.parts)
        free(self._ranges)

    @property
    def n_parts(self):
        return self.src.n_parts


cdef struct ExactJob:
    # The arguments of rerank and exact_search as pointers, and their per-thread scratch (slice tid)
    const ock_rr_source *src
    const float *queries
    int P
    const int64_t *rows
    const int64_t *parts
    int64_t R, n_rows, block
    int k, nq
    float *out_values
    int64_t *out_ids
    int64_t *out_positions
    int32_t *out_flags
    unsigned char *scratch
    size_t stride
    ock_rr_state *states
    const ock_rr_value_table *values


def rerank(RerankSource source not None,
           const float[:, ::1] queries,         # IN (nq, P) as the model sees them (unit rows for cosine)
           const int64_t[:, ::1] rows,          # IN (nq, R) the candidates' rows in their parts, -1 for none
           const int64_t[:, ::1] parts,         # IN (nq, R) the part of each candidate, or None: part 0
           float[:, ::1] out_values,            # OUT (nq, k) exact distances ascending / scores descending
           int64_t[:, ::1] out_ids,             # OUT (nq, k) their ids; padding (+inf or -inf, -1)
           int64_t[:, ::1] out_positions,       # OUT (nq, k) their positions in `rows`, -1 for padding; or None
           int32_t[::1] out_flags,              # OUT (nq,) RERANK_BAD_VALUES / RERANK_ZERO_VECTOR seen, else 0
           int n_threads):
    """The best k of each query's candidates by exact value (rerank.h says exactly what is computed), the values
    of a query depending on its vector and its candidates' rows only. A query flagged in out_flags read a bad row
    (NaN, inf or a magnitude beyond 1e15 in a float row; a zero vector under cosine): its outputs are meaningless
    and the caller raises. Queries run in parallel (one thread for a single query: no parallel region)."""
    cdef int nq = queries.shape[0]
    cdef int k = out_values.shape[1]
    cdef ExactJob job
    if nq == 0 or k == 0:
        return
    job.src = &source.src
    job.queries = &queries[0, 0]
    job.P = queries.shape[1]
    job.R = rows.shape[1]
    job.rows = &rows[0, 0] if job.R > 0 else NULL
    job.parts = &parts[0, 0] if parts is not None and job.R > 0 else NULL
    job.k = k
    job.out_values = &out_values[0, 0]
    job.out_ids = &out_ids[0, 0]
    job.out_positions = &out_positions[0, 0] if out_positions is not None else NULL
    job.out_flags = &out_flags[0]
    job.stride = (ock_rr_scratch_bytes(source.src.P, k) + 63) // 64 * 64 + 64
    job.values = ock_rerank_values()
    job.scratch = NULL
    n_threads = ock_pool_threads(n_threads if n_threads < nq else nq, COST_EXACT_VALUE * nq * <double>job.R * job.P)
    try:
        job.scratch = <unsigned char *>_alloc(<size_t>n_threads * job.stride, "re-ranking's scratch (per thread)")
        with nogil:
            ock_pool_run(_rerank_task, &job, nq, n_threads, OCK_POOL_DYNAMIC)
    finally:
        free(job.scratch)


cdef void _rerank_task(void *ctx, int64_t q, int tid) noexcept nogil:
    """Query q of rerank, in thread tid's scratch."""
    cdef ExactJob *j = <ExactJob *>ctx
    j.out_flags[q] = ock_rerank_query(j.src, j.queries + q * j.P, j.rows + q * j.R if j.rows != NULL else NULL,
                                      j.parts + q * j.R if j.parts != NULL else NULL, j.R, j.k,
                                      j.scratch + tid * j.stride, j.values, j.out_values + q * j.k,
                                      j.out_ids + q * j.k,
                                      j.out_positions + q * j.k if j.out_positions != NULL else NULL)


def rerank_all_rows(RerankSource source not None,
                 const float[:, ::1] queries,   # IN (nq, P) as the model sees them
                 int64_t n_rows,                # IN the rows of part 0 searched: 0 .. n_rows - 1
                 float[:, ::1] out_values,      # OUT (nq, k) exact distances ascending / scores descending
                 int64_t[:, ::1] out_ids,       # OUT (nq, k) their ids; padding (+inf or -inf, -1)
                 int32_t[::1] out_flags,        # OUT (nq,) as for rerank
                 int n_threads):
    """The exact k nearest rows of part 0 for each query, by the values re-ranking computes (brute force: every row
    is a candidate). Groups of EXACT_GROUP queries read the rows in blocks of EXACT_BLOCK_BYTES, each block once per
    group; groups run in parallel. Results equal those of re-ranking every row."""
    cdef int nq = queries.shape[0]
    cdef int k = out_values.shape[1]
    cdef int n_groups = (nq + EXACT_GROUP - 1) // EXACT_GROUP
    cdef ExactJob job
    if nq == 0 or k == 0:
        return
    job.src = &source.src
    job.queries = &queries[0, 0]
    job.P = queries.shape[1]
    job.nq = nq
    job.k = k
    job.n_rows = n_rows
    job.block = max(1, EXACT_BLOCK_BYTES // max(1, source.src.row_bytes))
    job.out_values = &out_values[0, 0]
    job.out_ids = &out_ids[0, 0]
    job.out_flags = &out_flags[0]
    job.stride = (ock_rr_scratch_bytes(source.src.P, k) + 63) // 64 * 64 + 64
    job.values = ock_rerank_values()
    job.scratch = NULL
    job.states = NULL
    n_threads = ock_pool_threads(n_threads if n_threads < n_groups else n_groups,
                                 COST_EXACT_VALUE * nq * <double>n_rows * job.P)
    try:
        job.scratch = <unsigned char *>_alloc(<size_t>n_threads * EXACT_GROUP * job.stride, "exact search's scratch")
        job.states = <ock_rr_state *>_alloc(<size_t>n_threads * EXACT_GROUP * sizeof(ock_rr_state),
                                            "exact search's query states")
        with nogil:
            ock_pool_run(_exact_group_task, &job, n_groups, n_threads, OCK_POOL_DYNAMIC)
    finally:
        free(job.scratch)
        free(job.states)


cdef void _exact_group_task(void *ctx, int64_t g, int tid) noexcept nogil:
    """Group g (EXACT_GROUP queries) of exact_search, in thread tid's states and scratch: every block of rows in
    turn, offered to each query of the group while it is in cache."""
    cdef ExactJob *j = <ExactJob *>ctx
    cdef int q0 = <int>g * EXACT_GROUP
    cdef int q1 = q0 + EXACT_GROUP if q0 + EXACT_GROUP < j.nq else j.nq
    cdef ock_rr_state *states = j.states + tid * EXACT_GROUP
    cdef int q
    cdef int64_t r0, r1
    for q in range(q0, q1):
        ock_rr_begin(&states[q - q0], j.src, j.queries + <Py_ssize_t>q * j.P, NULL, NULL, j.k,
                     j.scratch + (tid * EXACT_GROUP + q - q0) * j.stride, j.values)
    r0 = 0
    while r0 < j.n_rows:
        r1 = r0 + j.block if r0 + j.block < j.n_rows else j.n_rows
        for q in range(q0, q1):
            ock_rr_offer_range(&states[q - q0], r0, r1)
        r0 = r1
    for q in range(q0, q1):
        j.out_flags[q] = ock_rr_end(&states[q - q0], j.out_values + <Py_ssize_t>q * j.k,
                                    j.out_ids + <Py_ssize_t>q * j.k, NULL)
