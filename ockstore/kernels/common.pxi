# What two or more parts of the kernels need, written once (included by _kernels.pyx before the parts): the C
# kernels of every SIMD level (simd.h), the thread pool and the small-work rule (pool.h), the constants shared with
# the Python layers, scratch memory of parallel regions, the one BLAS wrapper, and what query tables are computed
# from.

cdef extern from "kernels/pool.h" nogil:
    # The kernels' threads (pool.h; docs/ARCHITECTURE.md, "Threads"). A parallel region is a task function, called
    # as fn(ctx, task, tid) for every task on up to n_threads threads (tid: 0 for the caller's thread, unique among
    # the threads running at once, < n_threads: it indexes per-thread scratch), given a context struct of pointers
    # (no memoryview inside a task) that the caller fills before the region.
    ctypedef void (*ock_pool_task)(void *ctx, int64_t task, int tid) noexcept nogil
    enum:
        OCK_POOL_STATIC
        OCK_POOL_DYNAMIC
    int ock_pool_init()
    void ock_pool_run(ock_pool_task fn, void *ctx, int64_t n_tasks, int n_threads, int schedule)
    int ock_pool_threads(int n_threads, double work)
    double ock_pool_set_work_per_thread(double units)
    int ock_pool_set_crowding(int per_1024)
    int ock_pool_workers()
    int64_t ock_pool_parallel_jobs()
    int ock_pool_set_spin_us(int us)
    double OCK_POOL_WORK_PER_THREAD

cdef extern from "kernels/simd.h" nogil:
    # The SIMD levels (simd.c chooses one when the module loads; see simd_level in _kernels.pyx).
    enum:
        OCK_LEVEL_PORTABLE
        OCK_LEVEL_AVX2
        OCK_LEVEL_AVX512
        OCK_N_LEVELS
        OCK_PANEL
        OCK_TABLE_L2_NORM_TERM
        OCK_TABLE_L2_WHOLE
        OCK_TABLE_NEG_DOT
    int ock_simd_init()
    int ock_simd_best_level()
    int ock_simd_use(int level)
    int ock_simd_level()
    const char *ock_simd_level_name(int level)
    int ock_fast_fma()
    # The encoder (encoder.h).
    void ock_unary_inplace(float *dot, const float *sqnorm, int n)
    float ock_min_of_sum(const float *a, const float *b, int n)
    int ock_first_index_of_sum(const float *a, const float *b, int n, float target)
    float ock_min(const float *a, int n)
    int ock_first_index(const float *a, int n, float target)
    float ock_sum_of_squares(const float *a, int n)
    float ock_max_abs(const float *a, long n)
    void ock_add_rows_to_words(double *acc, const float *X, long n, int P, const uint8_t *codes, int W, int WB,
                               int K)
    void ock_encoder_tables(const float *Z, int ldz, int n, int S, const float *W, int ldw, int J, const float *sqn,
                            float *out, int ldo)
    int ock_select_smallest(const float *values, int n, int T, float *out_score, int *out_index)
    float ock_leaves_min(const float *base, const float *pair, const float *score, const int *word, int count, int K,
                         float *acc)
    void ock_leaves_locate(const float *base, const float *pair, const float *score, const int *word, int count,
                           int K, const float *acc, float target, int *out_t, int *out_k)
    # Query tables (tables.h) and the coarse step of the inverted file (ivf.h).
    void ock_rotate(const float *q, const float *rot, int P, int D, double *qd, double *z)
    double ock_tables(const double *z, const float *words_t, const double *sqnorms, int M, int C, int K, int S,
                      int kind, int slots, double *acc, float *lut)
    void ock_coarse_dots(const float *Q, int nq, const float *ct, int P, int L, float *out)
    enum:
        OCK_COARSE_PANEL
        OCK_COARSE_HALF_PANEL
        OCK_COARSE_HALF_MIN_LISTS
    # The prefilter of a query alone (ivf.h, "A query alone").
    ctypedef struct ock_coarse_half:
        const uint16_t *values
        const float *centroids
        const double *alpha
        const double *beta
        double factor
        double sqnorm_weight
        double qnorm_limit
        int P
        int L
        int kind
    size_t ock_coarse_alone_work_bytes(int L)
    int ock_coarse_alone(const float *q, const ock_coarse_half *h, const float *c_sqnorms, int n_probe, void *work,
                         int *cand, float *dots)
    # The exact values of re-ranking (rerank.h; the query loop is declared in rerank.pxi).
    ctypedef struct ock_rr_value_table:
        pass
    const ock_rr_value_table *ock_rerank_values()

cdef extern from *:
    int _count_trailing_zeros "__builtin_ctzll"(unsigned long long) noexcept nogil


cdef enum:
    # Table slots per code byte, whatever K is: a byte can only index 0..255, so a scan never reads past a table
    # (slots K..255 hold +inf). A constant, so that the scans address table entries by displacement: ~10% faster
    # than a stride in a register at 256-bit codes.
    SLOTS = 256
    # How lists are ranked for probing (the probe kernel's `kind`).
    PROBE_BY_L2 = 0   # by ||q - c_l||^2 (up to the constant ||q||^2)
    PROBE_BY_IP = 1   # by q.c_l, largest first

# The constants the Python layers read from here (nowhere else defines them): columns per panel of the model arrays
# the table kernel reads (search.panels writes them in this layout), table slots per code byte, the kinds of query
# table (what a code's byte adds to its distance or score: simd.h) and of probing.
TABLE_PANEL = OCK_PANEL
TABLE_SLOTS = SLOTS
TABLE_L2_NORM_TERM = OCK_TABLE_L2_NORM_TERM
TABLE_L2_WHOLE = OCK_TABLE_L2_WHOLE
TABLE_NEG_DOT = OCK_TABLE_NEG_DOT
PROBE_L2 = PROBE_BY_L2
PROBE_IP = PROBE_BY_IP


# --------------------------------------------------------------------------------------------------------------------
# Threads: how many a kernel uses (the small-work rule, one for every kernel) and the Python layers' view of it.
#
# A kernel estimates its work in units of about a nanosecond of one core (the constants below, measured on sift-like
# shapes with tools/bench_threads.py --costs at one thread) and asks ock_pool_threads how many of its n_threads to
# use: another thread only for every OCK_POOL_WORK_PER_THREAD units. The estimates need only be right within a factor
# of two or so: they decide between one thread and more for small work, and large work gets every thread anyway.

cdef double COST_SCAN_BYTE = 0.3        # one code byte of one query, the 8-bit ADC scan
cdef double COST_FAST_SCAN_WORD = 0.03  # one 4-bit word of one query, the fast scan
cdef double COST_TABLE_VALUE = 0.25     # one multiply-add of a query's tables (rotation, then words)
cdef double COST_EXACT_VALUE = 0.5      # one value of one stored row, re-ranking and the exact search
cdef double COST_ENCODE_VALUE = 0.05    # one multiply-add or table entry of beam encoding
cdef double COST_GEMM_VALUE = 0.02      # one multiply-add of a BLAS product on one thread
cdef double COST_ROW_VALUE = 0.5        # one value of a row of decoding, code norms, normal equations, sums

# For tools/bench_threads.py (costs): the constants above, by name.
WORK_COSTS = {"scan_byte": COST_SCAN_BYTE, "fast_scan_word": COST_FAST_SCAN_WORD, "table_value": COST_TABLE_VALUE,
              "exact_value": COST_EXACT_VALUE, "encode_value": COST_ENCODE_VALUE, "gemm_value": COST_GEMM_VALUE,
              "row_value": COST_ROW_VALUE}


def pool_threads(int n_threads, double work):
    """The threads a job of `work` units gets when n_threads are allowed (the kernels' small-work rule, which the
    Python layers apply to what they run outside the kernels, e.g. BLAS products)."""
    return ock_pool_threads(n_threads, work)


def product_threads(int n_threads, double multiply_adds):
    """The threads a BLAS product of `multiply_adds` multiply-adds gets when n_threads are allowed (the small-work
    rule, for the products the Python layers compute with NumPy outside the kernels)."""
    return ock_pool_threads(n_threads, COST_GEMM_VALUE * multiply_adds)


def _set_pool_work_per_thread(double units):
    """For tests: the work units per thread of the small-work rule from now on (0: every kernel uses the threads it
    is given, however small its work); returns the previous value (POOL_WORK_PER_THREAD unless changed)."""
    return ock_pool_set_work_per_thread(units)


def _set_pool_crowding(int per_1024):
    """For tests and measurements: how crowded the pool is (1024 x the share of recent parallel jobs whose threads
    gained no time; above 512 the small-work rule asks for 50 times the work per thread); returns the previous
    value."""
    return ock_pool_set_crowding(per_1024)


def _pool_workers():
    """For tests: the worker threads the kernels' pool has created in this process (0 in a child forked since,
    until its first parallel region)."""
    return ock_pool_workers()


def _pool_parallel_jobs():
    """For tests: the parallel regions this process has run on more than one thread so far."""
    return ock_pool_parallel_jobs()


def _set_pool_spin_us(int us):
    """For tests and measurements: how long (microseconds) a worker spins after a job before it sleeps; returns the
    previous value."""
    return ock_pool_set_spin_us(us)


POOL_WORK_PER_THREAD = OCK_POOL_WORK_PER_THREAD


# --------------------------------------------------------------------------------------------------------------------
# Scratch memory of parallel regions: allocated with the GIL before a region, one block per buffer holding a slice for
# each thread (thread t uses slice t, t being the tid of the region's task function), freed after the region.

cdef inline Py_ssize_t _slice_items(Py_ssize_t count) noexcept nogil:
    """Items of one thread's slice holding `count` floats or 8-byte values: count rounded up to a multiple of 16, plus
    16 (for 8-byte items that is 128 bytes of slack, for floats 64).

    A slice is then a multiple of 64 bytes (so every slice keeps malloc's alignment) and ends with at least 64 unused
    bytes, so no cache line holds data of two threads wherever malloc placed the block: a thread writing its scratch
    never evicts a line that another thread is using (false sharing).
    """
    return (count + 15) // 16 * 16 + 16


cdef inline void *_alloc(size_t n_bytes, str what) except NULL:
    """malloc, with the GIL (before a parallel region): MemoryError naming `what` instead of a NULL."""
    cdef void *p = malloc(n_bytes if n_bytes > 0 else 1)  # malloc(0) may return NULL without failing
    if p == NULL:
        raise MemoryError(f"cannot allocate {n_bytes} bytes for {what}")
    return p


# --------------------------------------------------------------------------------------------------------------------
# The one BLAS wrapper (scipy.linalg.cython_blas). Every matrix here is row-major; only this function knows that BLAS
# is Fortran (column-major).

cdef inline void _gemm(int m, int n, int k, const float *A, int lda, bint a_transposed, const float *B, int ldb,
                       float *C, int ldc) noexcept nogil:
    """C (m x n, leading dim ldc) = op(A) @ B (k x n, ldb), where op(A) (m x k) is
        A               when a_transposed is false: A is stored m x k (leading dim lda >= k);
        A^T             when a_transposed is true:  A is stored k x m (leading dim lda >= m), e.g. X^T Y over rows.

    A row-major matrix is its transpose in column-major order, so we ask Fortran for C^T = B^T op(A)^T: B is passed
    as is ('N'), and A as is ('N') when op(A) = A, or marked 'T' when op(A) = A^T.
    """
    cdef char trans_b = b'N'
    cdef char trans_a = b'T' if a_transposed else b'N'
    cdef float one = 1.0
    cdef int i
    if m == 0 or n == 0:
        return
    # Zero C here and accumulate into it (beta = 1): with beta = 0 OpenBLAS first runs a slow scalar pass over C.
    for i in range(m):
        memset(C + <size_t>i * ldc, 0, n * sizeof(float))
    if k == 0:
        return
    sgemm(&trans_b, &trans_a, &n, &m, &k, &one, <float *>B, &ldb, <float *>A, &lda, &one, C, &ldc)


# --------------------------------------------------------------------------------------------------------------------
# What the query tables of a scan are computed from (tables.h), shared by the exhaustive and the inverted-file scans.

cdef struct TableSource:
    const float *rot            # (P, D) rotation with padding columns, D = M*S, in panels
    const float *words          # M blocks of the S x C*K matrix of subspace m's words, in panels
    const double *sqnorms       # (M, C*K) squared norms of the words (OCK_TABLE_L2_WHOLE only)
    int P, D, M, C, K, S
    int kind                    # OCK_TABLE_*
    const float *queries        # (nq, P) the queries (ADC), or NULL
    const double *rotated       # (nq, D) the rotated vectors z (SDC: the queries' reconstructions), or NULL


cdef class TableModel:
    """The model arrays that query tables are computed from, in the table kernel's panel layout (search.panels),
    held as typed views for the life of the object: a search converts none of them again.

    rot : (P * D,) float32, the (P, D) padded rotation in panels, D = M*S
    words : (M, S * C*K) float32, row m the (S, C*K) matrix words_t[m] in panels
    sqnorms : (M, C*K) float64, the words' squared norms (read by TABLE_L2_WHOLE only)
    n_codebooks C, sub_dim S, kind (TABLE_*)
    """

    cdef const float[::1] _rot
    cdef const float[:, ::1] _words
    cdef const double[:, ::1] _sqnorms
    cdef TableSource _source

    def __cinit__(self, const float[::1] rot not None, const float[:, ::1] words not None,
                  const double[:, ::1] sqnorms not None, int n_codebooks, int sub_dim, int kind):
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


cdef inline Py_ssize_t _table_work_items(const TableSource *t) noexcept nogil:
    """Doubles of scratch _query_tables needs: z (D), the products of a subspace (C*K) and the query in float64 (P)."""
    return <Py_ssize_t>t.D + <Py_ssize_t>t.C * t.K + t.P


cdef float _query_tables(const TableSource *t, Py_ssize_t q, double *work, float *lut, int slots) noexcept nogil:
    """The tables of query q written to lut (W * slots floats: SLOTS for byte codes, 16 for the fast scan's 4-bit
    words); returns its constant term. work: scratch of _table_work_items doubles. The same arithmetic for a query
    whatever the batch, the scan and the thread."""
    cdef double *z = work
    cdef double *acc = work + t.D
    cdef double *qd = acc + <Py_ssize_t>t.C * t.K
    if t.rotated != NULL:
        memcpy(z, t.rotated + q * t.D, t.D * sizeof(double))
    else:
        ock_rotate(t.queries + q * t.P, t.rot, t.P, t.D, qd, z)
    return <float>ock_tables(z, t.words, t.sqnorms, t.M, t.C, t.K, t.S, t.kind, slots, acc, lut)
