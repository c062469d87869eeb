# The codec (included by _kernels.pyx): beam encoding, decoding, code norms, normal equations, row products.
#
# Notation (docs/ARCHITECTURE.md, "The method"): n vectors, P input dims, M subspaces of S dims (the rotated space is
# zero-padded to M*S), C codebooks per subspace, K words per codebook, T beam width, W = M*C code bytes per vector.

# The encoder's table products at the portable level need a hardware fmaf to be fast (ock_fast_fma); without one they
# come from BLAS (rounded its own way), unless a test asks for the exact, slow, fmaf path (_set_exact_portable_tables)
# so that every level gives the same bits.
cdef bint _portable_fma = ock_fast_fma()


def _set_exact_portable_tables(bint exact):
    """For tests: whether the portable level computes the encoder's table products with fmaf even where fmaf is slow
    (software), instead of BLAS, so that it gives the same bits as the other levels. Returns the previous setting."""
    global _portable_fma
    previous = bool(_portable_fma)
    _portable_fma = exact or ock_fast_fma()
    return previous


cdef enum:
    # Vectors per encoding task. Large enough that each sgemm call runs near peak (the tables of one chunk are
    # ENCODE_CHUNK x C*K floats: 256 KiB for C*K = 512, which stays in L2 next to the pair tables of one subspace),
    # small enough that two threads get balanced work on small inputs. Results do not depend on it and never on the
    # number of threads: every chunk is computed the same way whichever thread runs it.
    ENCODE_CHUNK = 128


# --------------------------------------------------------------------------------------------------------------------
# Beam encoding of one subvector.
#
# For a subvector z and words d[c, k] (codebook c, word k), with
#     unary[c*K + k]            = ||d[c,k]||^2 - 2 z.d[c,k]
#     pair(c, c')[k * K + k']   = 2 d[c,k].d[c',k']           (c < c', one K x K table per pair, precomputed once)
# the error of a code (k_0, ..., k_{C-1}) is a sum of table entries:
#     ||z - sum_c d[c,k_c]||^2 = ||z||^2 + sum_c unary[c*K + k_c] + sum_{c<c'} pair(c,c')[k_c*K + k_c'].
# Choosing k_l after the prefix (k_0..k_{l-1}) with residual r = z - sum_{c<l} d[c,k_c]:
#     ||r - d[l,k]||^2 - ||r||^2 = unary[l*K + k] + sum_{c<l} pair(c,l)[k_c*K + k]
# so the "T best candidates for the current residual" at level l are the T smallest of
#     score_l[k] = partial(prefix) + unary[l*K + k] + sum_{c<l} pair(c,l)[k_c*K + k],
# which is also the exact partial error of the longer prefix. Levels 0..C-2 keep their T best (ties: smaller k
# first) and recurse into each; the last level takes its single best; the least error over all leaves wins (ties:
# the first leaf in the order the candidates were ranked). This equals the direct recursion on residual vectors.

cdef inline int _pair_index(int c, int c2, int C) noexcept nogil:
    """Index of the table of the pair (c, c2), c < c2, in the order (0,1), (0,2), ..., (0,C-1), (1,2), ..."""
    return c * C - (c * (c + 1)) // 2 + (c2 - c - 1)


cdef struct BeamScratch:
    float *scores        # (C, K): score row of each level
    float *cand_score    # (C, T): ranked candidates of each level
    float *leaf_acc      # (K,): per word of the last level, the least partial error over the candidates above it
    int *cand_word       # (C, T)
    int *chosen          # (C,): current prefix
    int *best_code       # (C,): best leaf so far
    float best_error


# The arrays of a BeamScratch come from two slices of encode_beam's blocks: its floats (scores, cand_score, then
# leaf_acc) and its ints (cand_word, chosen, then best_code).

cdef inline Py_ssize_t _beam_floats(int C, int K, int T) noexcept nogil:
    return <Py_ssize_t>C * K + <Py_ssize_t>C * T + K


cdef inline Py_ssize_t _beam_ints(int C, int T) noexcept nogil:
    return <Py_ssize_t>C * T + 2 * C


cdef void _beam_scratch_init(BeamScratch *s, float *floats, int *ints, int C, int K, int T) noexcept nogil:
    """Point the arrays of s into floats (_beam_floats items) and ints (_beam_ints items), owned by the caller."""
    s.scores = floats
    s.cand_score = floats + <size_t>C * K
    s.leaf_acc = s.cand_score + <size_t>C * T
    s.cand_word = ints
    s.chosen = ints + <size_t>C * T
    s.best_code = s.chosen + C


cdef const float *_level_row(int level, const float *unary, const float *pairs, const int *prefix, int C, int K,
                             float *buf) noexcept nogil:
    """For level >= 2 (C >= 3): buf[k] = unary_l[k] + the pair rows of every prefix word but the last; returns buf.

    The last prefix word's pair row is added by the caller, fused with the minimum or the candidate ranking.
    """
    cdef const float *row = unary + <size_t>level * K
    cdef const float *p
    cdef int c, k
    cdef size_t KK = <size_t>K * K
    for k in range(K):
        buf[k] = row[k]
    for c in range(level - 1):
        p = pairs + _pair_index(c, level, C) * KK + <size_t>prefix[c] * K
        for k in range(K):
            buf[k] += p[k]
    return buf


cdef void _descend(int level, float partial, const float *unary, const float *pairs, int C, int K, int T,
                   BeamScratch *s) noexcept nogil:
    """Explore level `level` (< C - 1) below the prefix s.chosen[0:level] whose partial error is `partial`."""
    cdef const float *row = unary + <size_t>level * K
    cdef float *buf = s.scores + <size_t>level * K
    cdef const float *last
    cdef const float *base
    cdef float *cand_score = s.cand_score + <size_t>level * T
    cdef int *cand_word = s.cand_word + <size_t>level * T
    cdef int c, k, t, count, leaf_t, leaf_k
    cdef float m
    cdef size_t KK = <size_t>K * K
    if level == 0 and C == 1:
        # PQ / CKM: the nearest word.
        m = ock_min(row, K)
        s.best_error = m
        s.best_code[0] = ock_first_index(row, K, m)
        return
    if level >= 2:
        row = _level_row(level, unary, pairs, s.chosen, C, K, buf)
    # The T best candidates of this level, in rank order.
    if level > 0:
        last = pairs + _pair_index(level - 1, level, C) * KK + <size_t>s.chosen[level - 1] * K
        for k in range(K):
            buf[k] = partial + (row[k] + last[k])
        row = buf
    count = ock_select_smallest(row, K, T, cand_score, cand_word)
    if level < C - 2:
        for t in range(count):
            s.chosen[level] = cand_word[t]
            _descend(level + 1, cand_score[t], unary, pairs, C, K, T, s)
        return
    # The children are leaves: the last level takes its single best word under each candidate, all candidates at
    # once. Its row without the pair term of this level's word: unary (C = 2) plus the pairs of the earlier prefix.
    base = unary + <size_t>(C - 1) * K
    if C >= 3:
        base = _level_row(C - 1, unary, pairs, s.chosen, C, K, s.scores + <size_t>(C - 1) * K)
    last = pairs + _pair_index(C - 2, C - 1, C) * KK
    m = ock_leaves_min(base, last, cand_score, cand_word, count, K, s.leaf_acc)
    if m < s.best_error:
        # Strictly less: on equal errors the earlier leaf (in rank order) stays.
        ock_leaves_locate(base, last, cand_score, cand_word, count, K, s.leaf_acc, m, &leaf_t, &leaf_k)
        s.best_error = m
        for c in range(level):
            s.best_code[c] = s.chosen[c]
        s.best_code[level] = cand_word[leaf_t]
        s.best_code[C - 1] = leaf_k


cdef float _leaf_error(const float *unary, const float *pairs, const uint8_t *code, int C, int K) noexcept nogil:
    """The error of a given code (minus ||z||^2), summed exactly as _descend sums it when it reaches that leaf: the
    beam finds a code with bitwise the same error, so a code is only replaced by a strictly better one."""
    cdef float partial, row_value
    cdef int level, c
    cdef size_t KK = <size_t>K * K
    if C == 1:
        return unary[code[0]]
    partial = unary[code[0]]
    for level in range(1, C):
        row_value = unary[<size_t>level * K + code[level]]
        for c in range(level - 1):
            row_value = row_value + pairs[_pair_index(c, level, C) * KK + <size_t>code[c] * K + code[level]]
        if level < C - 1:
            partial = partial + (row_value + pairs[_pair_index(level - 1, level, C) * KK
                                                   + <size_t>code[level - 1] * K + code[level]])
        else:
            partial = row_value + (partial + pairs[_pair_index(level - 1, level, C) * KK
                                                   + <size_t>code[level - 1] * K + code[level]])
    return partial


cdef float _code_error(const float *unary, const float *pairs, const uint8_t *code, int C, int K) noexcept nogil:
    """sum_c unary[c*K + b_c] + sum_{c<c'} pair(c,c')[b_c*K + b_c']: the error of a given code, minus ||z||^2."""
    cdef float e = 0
    cdef int c, c2
    cdef size_t KK = <size_t>K * K
    for c in range(C):
        e += unary[<size_t>c * K + code[c]]
    for c in range(C):
        for c2 in range(c + 1, C):
            e += pairs[_pair_index(c, c2, C) * KK + <size_t>code[c] * K + code[c2]]
    return e


cdef void _encode_chunk(const float *X, int n, int P, const float *rot_pad, const float *words_t,
                        const float *word_sqnorms, const float *pair_tables, int M, int S, int C, int K, int T,
                        const uint8_t *prev_codes, uint8_t *codes, float *errors,
                        float *zbuf, float *gbuf, float *beam_floats, int *beam_ints,
                        bint vector_tables) noexcept nogil:
    """Encode n vectors (rows of X); see encode_beam for the arguments. The rest is the thread's scratch: zbuf
    (n x M*S floats), gbuf (n x C*K floats) and the arrays of its BeamScratch (see _beam_scratch_init). vector_tables:
    the table products come from ock_encoder_tables (else from BLAS: a portable level without a hardware fmaf)."""
    cdef BeamScratch scratch  # on this thread's stack: its fields are written at every leaf
    cdef int MS = M * S
    cdef int CK = C * K
    cdef int W = M * C
    cdef size_t pair_stride = <size_t>(C * (C - 1) // 2) * K * K
    cdef int i, m, c
    cdef float zz, new_error, old_error
    cdef float *g
    cdef const float *z
    _beam_scratch_init(&scratch, beam_floats, beam_ints, C, K, T)
    # zbuf (n x MS) = X (n x P) @ rot_pad (P x MS): the rotated, zero-padded vectors, by the table kernel (or BLAS,
    # as for the tables). Without a rotation (rot_pad NULL) X is already laid out that way (P == MS), used in place.
    if rot_pad != NULL and vector_tables:
        ock_encoder_tables(X, P, n, P, rot_pad, MS, MS, NULL, zbuf, MS)
    elif rot_pad != NULL:
        _gemm(n, MS, P, X, P, False, rot_pad, MS, zbuf, MS)
    else:
        zbuf = <float *>X
    for i in range(n):
        errors[i] = 0
    for m in range(M):
        # gbuf (n x CK): unary[c*K + k] = ||d[c,k]||^2 - 2 z.d[c,k] for every z (row of z_m, a column block of zbuf)
        # and word (column of words_t[m], S x CK). Fused multiply-adds in registers (encoder.h), or, at the portable
        # level without a hardware FMA, BLAS (rounded its own way: the same on that CPU for any number of threads).
        if vector_tables:
            ock_encoder_tables(zbuf + <size_t>m * S, MS, n, S, words_t + <size_t>m * S * CK, CK, CK,
                               word_sqnorms + <size_t>m * CK, gbuf, CK)
        else:
            _gemm(n, CK, S, zbuf + <size_t>m * S, MS, False, words_t + <size_t>m * S * CK, CK, gbuf, CK)
            for i in range(n):
                ock_unary_inplace(gbuf + <size_t>i * CK, word_sqnorms + <size_t>m * CK, CK)
        for i in range(n):
            g = gbuf + <size_t>i * CK
            z = zbuf + <size_t>i * MS + <size_t>m * S
            zz = ock_sum_of_squares(z, S)
            scratch.best_error = INFINITY
            for c in range(C):
                scratch.best_code[c] = 0  # a valid code even if no leaf compares below infinity
            _descend(0, 0.0, g, pair_tables + m * pair_stride, C, K, T, &scratch)
            new_error = scratch.best_error
            if prev_codes != NULL:
                # A code is replaced only when the new one is strictly better, so the objective never rises.
                old_error = _leaf_error(g, pair_tables + m * pair_stride, prev_codes + <size_t>i * W + m * C, C, K)
                if not new_error < old_error:
                    new_error = old_error
                    for c in range(C):
                        scratch.best_code[c] = prev_codes[<size_t>i * W + m * C + c]
            for c in range(C):
                codes[<size_t>i * W + m * C + c] = <uint8_t>scratch.best_code[c]
            # The table sum can dip below zero by rounding when the code is (almost) exact; a squared error cannot.
            new_error = zz + new_error
            errors[i] += new_error if new_error > 0 else 0


cdef struct EncodeJob:
    # encode_beam's arguments as pointers, and its per-thread scratch (slice tid of each block)
    const float *X
    int n, P, M, S, C, K, T
    const float *rot
    const float *words_t
    const float *word_sqnorms
    const float *pairs
    const uint8_t *prev
    uint8_t *codes
    float *errors
    float *zbufs
    float *gbufs
    float *beam_floats
    int *beam_ints
    Py_ssize_t z_stride, g_stride, bf_stride, bi_stride
    bint vector_tables


cdef void _encode_task(void *ctx, int64_t chunk, int tid) noexcept nogil:
    """Chunk `chunk` (ENCODE_CHUNK rows) of encode_beam, in thread tid's scratch."""
    cdef EncodeJob *j = <EncodeJob *>ctx
    cdef Py_ssize_t start = <Py_ssize_t>chunk * ENCODE_CHUNK
    cdef int count = <int>(j.n - start) if j.n - start < ENCODE_CHUNK else ENCODE_CHUNK
    _encode_chunk(j.X + start * j.P, count, j.P, j.rot, j.words_t, j.word_sqnorms, j.pairs, j.M, j.S, j.C, j.K, j.T,
                  (j.prev + <size_t>start * j.M * j.C) if j.prev != NULL else NULL,
                  j.codes + <size_t>start * j.M * j.C, j.errors + start, j.zbufs + tid * j.z_stride,
                  j.gbufs + tid * j.g_stride, j.beam_floats + tid * j.bf_stride, j.beam_ints + tid * j.bi_stride,
                  j.vector_tables)


def encode_beam(const float[:, ::1] X,               # IN (n, P)
                const float[:, ::1] rot_pad,         # IN (P, M*S): rotation, columns grouped by subspace, zero pads;
                                                     #    None when X is already rotated and padded (P == M*S)
                const float[:, :, ::1] words_t,      # IN (M, S, C*K): words_t[m, s, c*K + k] = d[m, c, k][s]
                const float[:, ::1] word_sqnorms,    # IN (M, C*K): ||d[m, c, k]||^2
                const float[:, ::1] pair_tables,     # IN (M, C(C-1)/2 * K * K) (any shape when C == 1): 2 d.d'
                int n_codebooks, int n_codewords, int beam_width,
                const uint8_t[:, ::1] prev_codes,    # IN (n, M*C) or None: the current codes (replace only if better)
                uint8_t[:, ::1] codes,               # OUT (n, M*C)
                float[::1] errors,                   # OUT (n,): ||x - decode(code)||^2 of the code written
                int n_threads):
    """Beam-encode every row of X (multiple-candidates matching pursuit; greedy pursuit when beam_width == 1)."""
    cdef EncodeJob job
    cdef int n = X.shape[0]
    cdef int M = words_t.shape[0]
    cdef int S = words_t.shape[1]
    cdef int C = n_codebooks
    cdef int K = n_codewords
    cdef int T = beam_width if beam_width < n_codewords else n_codewords
    cdef int n_chunks = (n + ENCODE_CHUNK - 1) // ENCODE_CHUNK
    if n == 0:
        return
    # per row: the rotation (P x M*S), the tables (M*S x C*K) and the beam (about M*C*T*K table entries)
    n_threads = ock_pool_threads(n_threads, COST_ENCODE_VALUE * n * (<double>X.shape[1] * M * S
                                                                      + <double>M * S * C * K + <double>M * C * T * K))
    memset(&job, 0, sizeof(job))
    job.X = &X[0, 0]
    job.n = n
    job.P = X.shape[1]
    job.M, job.S, job.C, job.K, job.T = M, S, C, K, T
    job.rot = &rot_pad[0, 0] if rot_pad is not None else NULL
    job.words_t = &words_t[0, 0, 0]
    job.word_sqnorms = &word_sqnorms[0, 0]
    job.pairs = &pair_tables[0, 0] if C > 1 else NULL
    job.prev = &prev_codes[0, 0] if prev_codes is not None else NULL
    job.codes = &codes[0, 0]
    job.errors = &errors[0]
    job.vector_tables = ock_simd_level() != OCK_LEVEL_PORTABLE or _portable_fma
    # Thread scratch: one block per buffer, a slice per thread (see _slice_items).
    job.z_stride = _slice_items(<Py_ssize_t>ENCODE_CHUNK * M * S)
    job.g_stride = _slice_items(<Py_ssize_t>ENCODE_CHUNK * C * K)
    job.bf_stride = _slice_items(_beam_floats(C, K, T))
    job.bi_stride = _slice_items(_beam_ints(C, T))
    try:
        job.zbufs = <float *>_alloc(<size_t>n_threads * job.z_stride * sizeof(float),
                                    "encode_beam's rotated vectors of a chunk (per thread)")
        job.gbufs = <float *>_alloc(<size_t>n_threads * job.g_stride * sizeof(float),
                                    "encode_beam's tables of a chunk (per thread)")
        job.beam_floats = <float *>_alloc(<size_t>n_threads * job.bf_stride * sizeof(float),
                                          "encode_beam's beam scores (per thread)")
        job.beam_ints = <int *>_alloc(<size_t>n_threads * job.bi_stride * sizeof(int),
                                      "encode_beam's beam words (per thread)")
        with nogil:
            ock_pool_run(_encode_task, &job, n_chunks, n_threads, OCK_POOL_DYNAMIC)
    finally:
        free(job.zbufs)
        free(job.gbufs)
        free(job.beam_floats)
        free(job.beam_ints)


# --------------------------------------------------------------------------------------------------------------------
# Products over many rows, in parallel, with results independent of the number of threads.

cdef enum:
    # Rows per sgemm call in matmul_rows: enough rows that each call runs near BLAS peak, few enough that a training
    # set splits into many tasks for the threads. The chunks are fixed row ranges, so which thread computes one never
    # changes its result.
    PRODUCT_CHUNK = 1024
    # code_sums sums over at most this many fixed slices of rows, each in float64 and in row order, then adds the
    # slices in order. A slice has at least SUM_SLICE_ROWS and SUM_ROWS_PER_WORD * K rows (its K x P sums per byte
    # position are worth zeroing and adding), and the slices hold at most SUM_SLICE_BYTES (SLICES * W*K*P doubles).
    # The number of slices depends on the shapes only, so the result is the same for any number of threads.
    SUM_SLICES = 8
    SUM_SLICE_ROWS = 2048
    SUM_ROWS_PER_WORD = 16
    # code_sums gives each task a group of byte positions whose sums (group*K x P doubles) fill about this much cache.
    SUM_BLOCK_BYTES = 256 * 1024
    # Rows per task of the row-by-row kernels (decode_rotated, code_sqnorms) and values per task of code_sums' final
    # additions: a task's work is then many times the cost of handing it out.
    ROWS_PER_TASK = 256
    VALUES_PER_TASK = 16384


cdef struct RowsJob:
    # The arguments of the row kernels below, as pointers (one struct for all of them: each reads its own fields).
    const float *X              # matmul_rows: (n, P) @ B (P, Q) -> out
    const float *B
    float *out
    const uint8_t *codes        # (n, W)
    const float *words          # decode_rotated: (M, C, K, S)
    const float *word_sqnorms   # code_sqnorms: (M, C*K), pair tables (M, pair_stride)
    const float *pairs
    size_t pair_stride
    double *gram                # normal_equations, code_gram: (M, C*K, C*K); rhs (M, C*K, S)
    double *rhs
    const float *Z              # normal_equations: (n, M*S)
    double *sums                # code_sums: slice 0's sums (out) and the others' (acc)
    double *acc
    Py_ssize_t n, slice_rows, KP, WKP, n_slices
    int P, Q, M, C, K, S, W, WB, n_groups
    int code_cols, z_cols         # the columns (row strides) of codes and Z


def matmul_rows(const float[:, ::1] X,      # IN (n, P)
                const float[:, ::1] B,      # IN (P, Q)
                float[:, ::1] out,          # OUT (n, Q) = X @ B
                int n_threads):
    """X @ B by chunks of rows in parallel (BLAS itself must run on one thread: see blas_single_thread)."""
    cdef RowsJob job
    cdef Py_ssize_t n = X.shape[0]
    if n == 0:
        return
    job.X = &X[0, 0]
    job.B = &B[0, 0]
    job.out = &out[0, 0]
    job.n = n
    job.P = X.shape[1]
    job.Q = B.shape[1]
    with nogil:
        ock_pool_run(_matmul_task, &job, (n + PRODUCT_CHUNK - 1) // PRODUCT_CHUNK,
                     ock_pool_threads(n_threads, COST_GEMM_VALUE * n * job.P * job.Q), OCK_POOL_STATIC)


cdef void _matmul_task(void *ctx, int64_t chunk, int tid) noexcept nogil:
    cdef RowsJob *j = <RowsJob *>ctx
    cdef Py_ssize_t start = <Py_ssize_t>chunk * PRODUCT_CHUNK
    cdef int count = <int>(j.n - start) if j.n - start < PRODUCT_CHUNK else PRODUCT_CHUNK
    _gemm(count, j.Q, j.P, j.X + start * j.P, j.P, False, j.B, j.Q, j.out + start * j.Q, j.Q)


# --------------------------------------------------------------------------------------------------------------------
# Decoding, code norms, normal equations.

def decode_rotated(const uint8_t[:, ::1] codes,      # IN (n, M*C)
                   const float[:, :, :, ::1] words,  # IN (M, C, K, S)
                   float[:, ::1] out,                # OUT (n, M*S): sum_c d[m, c, code] per subspace (rotated space)
                   int n_threads):
    """Reconstruct the rotated, zero-padded vectors: out[i, m*S:(m+1)*S] = sum_c words[m, c, codes[i, m*C + c]]."""
    cdef RowsJob job
    cdef Py_ssize_t n = codes.shape[0]
    if n == 0:
        return
    job.codes = &codes[0, 0]
    job.code_cols = codes.shape[1]
    job.words = &words[0, 0, 0, 0]
    job.out = &out[0, 0]
    job.n = n
    job.M = words.shape[0]
    job.C = words.shape[1]
    job.K = words.shape[2]
    job.S = words.shape[3]
    with nogil:
        ock_pool_run(_decode_task, &job, (n + ROWS_PER_TASK - 1) // ROWS_PER_TASK,
                     ock_pool_threads(n_threads, COST_ROW_VALUE * n * job.M * job.C * job.S), OCK_POOL_STATIC)


cdef void _decode_task(void *ctx, int64_t task, int tid) noexcept nogil:
    cdef RowsJob *j = <RowsJob *>ctx
    cdef Py_ssize_t i
    cdef Py_ssize_t stop = (task + 1) * ROWS_PER_TASK if (task + 1) * ROWS_PER_TASK < j.n else j.n
    cdef int m, c, s_
    cdef int M = j.M, C = j.C, K = j.K, S = j.S
    cdef float *o
    cdef const float *d
    cdef const uint8_t *code
    for i in range(task * ROWS_PER_TASK, stop):
        code = j.codes + i * j.code_cols
        for m in range(M):
            o = j.out + i * M * S + m * S
            d = j.words + ((<size_t>m * C) * K + code[m * C]) * S
            for s_ in range(S):
                o[s_] = d[s_]
            for c in range(1, C):
                d = j.words + ((<size_t>m * C + c) * K + code[m * C + c]) * S
                for s_ in range(S):
                    o[s_] = o[s_] + d[s_]


def code_sqnorms(const uint8_t[:, ::1] codes,        # IN (n, M*C)
                 const float[:, ::1] word_sqnorms,   # IN (M, C*K)
                 const float[:, ::1] pair_tables,    # IN (M, C(C-1)/2 * K * K) (ignored when C == 1)
                 int n_codebooks, int n_codewords,
                 float[::1] out,                     # OUT (n,): ||decode(code)||^2
                 int n_threads):
    """||sum_m sum_c d[m, c, b]||^2 = sum_m (sum_c ||d||^2 + sum_{c<c'} 2 d.d'): C + C(C-1)/2 lookups per subspace."""
    cdef RowsJob job
    cdef Py_ssize_t n = codes.shape[0]
    cdef float zero_pair = 0
    if n == 0:
        return
    job.codes = &codes[0, 0]
    job.code_cols = codes.shape[1]
    job.word_sqnorms = &word_sqnorms[0, 0]
    job.M = word_sqnorms.shape[0]
    job.C = n_codebooks
    job.K = n_codewords
    job.pair_stride = <size_t>(job.C * (job.C - 1) // 2) * job.K * job.K
    job.pairs = &pair_tables[0, 0] if job.C > 1 else &zero_pair
    job.out = &out[0]
    job.n = n
    with nogil:
        ock_pool_run(_code_sqnorms_task, &job, (n + ROWS_PER_TASK - 1) // ROWS_PER_TASK,
                     ock_pool_threads(n_threads, COST_ROW_VALUE * n * job.M * job.C * job.C), OCK_POOL_STATIC)


cdef void _code_sqnorms_task(void *ctx, int64_t task, int tid) noexcept nogil:
    cdef RowsJob *j = <RowsJob *>ctx
    cdef Py_ssize_t i
    cdef Py_ssize_t stop = (task + 1) * ROWS_PER_TASK if (task + 1) * ROWS_PER_TASK < j.n else j.n
    cdef int m
    cdef float acc
    for i in range(task * ROWS_PER_TASK, stop):
        acc = 0
        for m in range(j.M):
            acc = acc + _code_error(j.word_sqnorms + <size_t>m * j.C * j.K, j.pairs + m * j.pair_stride,
                                    j.codes + i * j.code_cols + m * j.C, j.C, j.K)
        j.out[i] = acc


def normal_equations(const uint8_t[:, ::1] codes,    # IN (n, M*C)
                     const float[:, ::1] Z,          # IN (n, M*S): rotated, zero-padded training vectors
                     int n_codebooks, int n_codewords,
                     double[:, :, ::1] gram,         # OUT (M, C*K, C*K): B_m^T B_m (co-occurrence counts)
                     double[:, :, ::1] rhs,          # OUT (M, C*K, S): B_m^T Z_m
                     int n_threads):
    """Accumulate the least-squares normal equations of every subspace's codebooks given the codes.

    B_m is the n x C*K binary matrix whose row i has a one in column c*K + codes[i, m*C + c] for each c, so that
    Z_m ~ B_m D_m with D_m the C*K x S stack of the subspace's codebooks. One subspace per task; sums in float64.
    """
    cdef RowsJob job
    cdef Py_ssize_t n = codes.shape[0]
    if gram.shape[0] == 0:
        return
    job.codes = &codes[0, 0] if n > 0 else NULL
    job.code_cols = codes.shape[1]
    job.Z = &Z[0, 0] if n > 0 else NULL
    job.z_cols = Z.shape[1]
    job.gram = &gram[0, 0, 0]
    job.rhs = &rhs[0, 0, 0]
    job.n = n
    job.M = gram.shape[0]
    job.C = n_codebooks
    job.K = n_codewords
    job.S = rhs.shape[2]
    with nogil:
        ock_pool_run(_normal_equations_task, &job, job.M,
                     ock_pool_threads(n_threads, COST_ROW_VALUE * n * job.M * job.C * (job.S + job.C)),
                     OCK_POOL_DYNAMIC)


cdef void _normal_equations_task(void *ctx, int64_t task, int tid) noexcept nogil:
    """Subspace `task` of normal_equations."""
    cdef RowsJob *j = <RowsJob *>ctx
    cdef int m = <int>task
    cdef int C = j.C, K = j.K, S = j.S
    cdef int c, c2, r, s_
    cdef Py_ssize_t i
    cdef double *gram = j.gram + <size_t>m * C * K * C * K
    cdef double *rhs = j.rhs + <size_t>m * C * K * S
    cdef double *acc
    cdef const float *z
    cdef const uint8_t *code
    memset(gram, 0, <size_t>C * K * C * K * sizeof(double))
    memset(rhs, 0, <size_t>C * K * S * sizeof(double))
    for i in range(j.n):
        z = j.Z + i * j.z_cols + m * S
        code = j.codes + i * j.code_cols + m * C
        for c in range(C):
            r = c * K + code[c]
            acc = rhs + <size_t>r * S
            for s_ in range(S):
                acc[s_] = acc[s_] + z[s_]
            for c2 in range(C):
                gram[<size_t>r * C * K + c2 * K + code[c2]] += 1.0



cdef Py_ssize_t SUM_SLICE_BYTES = 64 * 1024 * 1024


def code_sums(const uint8_t[:, ::1] codes,   # IN (n, W)
              const float[:, ::1] X,         # IN (n, P)
              int n_codewords,
              double[:, ::1] out,            # OUT (W*K, P): out[w*K + k] = the sum of the rows X[i] with codes[i, w] == k
              int n_threads):
    """The sum of the vectors that use each word, in float64: B^T X for the n x W*K binary matrix B of the codes.

    Training gets every product it needs from these sums: X^T Zhat = sum over words of (sum of its rows)^T word
    (Procrustes), and B_m^T Z_m = (B_m^T X) R_pad[:, block m] (the right-hand sides of the normal equations).
    Tasks are (slice of rows, group of byte positions): each sums its slice's rows in row order, and the slices are
    then added in slice order, so the result is the same for any n_threads.
    """
    cdef Py_ssize_t n = X.shape[0]
    cdef int P = X.shape[1]
    cdef int W = codes.shape[1]
    cdef int K = n_codewords
    cdef Py_ssize_t KP = <Py_ssize_t>K * P
    cdef Py_ssize_t WKP = W * KP
    cdef Py_ssize_t min_rows = SUM_ROWS_PER_WORD * K if SUM_ROWS_PER_WORD * K > SUM_SLICE_ROWS else SUM_SLICE_ROWS
    cdef Py_ssize_t n_slices = n // min_rows
    cdef Py_ssize_t slice_rows
    # Byte positions per task: their WB*K x P sums fill about SUM_BLOCK_BYTES.
    cdef int WB = <int>(SUM_BLOCK_BYTES // (KP * <Py_ssize_t>sizeof(double))) if KP > 0 else 1
    cdef int n_groups
    cdef double *flat = &out[0, 0] if W > 0 and P > 0 else NULL
    cdef RowsJob job
    if WB < 1:
        WB = 1
    if WB > W:
        WB = W
    n_groups = (W + WB - 1) // WB if W > 0 else 0
    if n_slices > SUM_SLICES:
        n_slices = SUM_SLICES
    if n_slices > SUM_SLICE_BYTES // (WKP * <Py_ssize_t>sizeof(double) + 1):
        n_slices = SUM_SLICE_BYTES // (WKP * <Py_ssize_t>sizeof(double) + 1)
    if n_slices < 1:
        n_slices = 1
    slice_rows = (n + n_slices - 1) // n_slices
    if flat == NULL:
        return
    job.sums = flat
    job.acc = NULL
    job.X = &X[0, 0] if n > 0 else NULL
    job.codes = &codes[0, 0] if n > 0 else NULL
    job.n, job.P, job.W, job.K, job.WB, job.n_groups = n, P, W, K, WB, n_groups
    job.KP, job.WKP, job.n_slices, job.slice_rows = KP, WKP, n_slices, slice_rows
    n_threads = ock_pool_threads(n_threads, COST_ROW_VALUE * n * W * P)
    try:
        # Slice 0 sums straight into out, the others into acc; then out += acc[0], acc[1], ... in slice order.
        job.acc = <double *>_alloc(<size_t>(n_slices - 1) * WKP * sizeof(double),
                                   "code_sums' float64 sums of the slices")
        with nogil:
            ock_pool_run(_code_sums_task, &job, n_slices * n_groups, n_threads, OCK_POOL_DYNAMIC)
            if n_slices > 1:
                ock_pool_run(_code_sums_add_task, &job, (WKP + VALUES_PER_TASK - 1) // VALUES_PER_TASK, n_threads,
                             OCK_POOL_STATIC)
    finally:
        free(job.acc)


cdef void _code_sums_task(void *ctx, int64_t task, int tid) noexcept nogil:
    """Task (slice of rows, group of byte positions) of code_sums: the sums of its slice's rows, in row order."""
    cdef RowsJob *j = <RowsJob *>ctx
    cdef Py_ssize_t sl = task // j.n_groups
    cdef int w0 = <int>(task % j.n_groups) * j.WB
    cdef int wb = j.W - w0 if j.W - w0 < j.WB else j.WB
    cdef double *sums = (j.sums if sl == 0 else j.acc + (sl - 1) * j.WKP) + w0 * j.KP
    cdef Py_ssize_t start = sl * j.slice_rows
    cdef Py_ssize_t stop = start + j.slice_rows if start + j.slice_rows < j.n else j.n
    memset(sums, 0, wb * j.KP * sizeof(double))
    if start < stop:
        ock_add_rows_to_words(sums, j.X + start * j.P, stop - start, j.P, j.codes + start * j.W + w0, j.W, wb, j.K)


cdef void _code_sums_add_task(void *ctx, int64_t task, int tid) noexcept nogil:
    """Values task*VALUES_PER_TASK.. of code_sums' result: out += the other slices' sums, in slice order."""
    cdef RowsJob *j = <RowsJob *>ctx
    cdef Py_ssize_t i, sl
    cdef Py_ssize_t stop = (task + 1) * VALUES_PER_TASK if (task + 1) * VALUES_PER_TASK < j.WKP else j.WKP
    cdef double total
    for i in range(task * VALUES_PER_TASK, stop):
        total = j.sums[i]
        for sl in range(j.n_slices - 1):
            total = total + j.acc[sl * j.WKP + i]
        j.sums[i] = total


def code_gram(const uint8_t[:, ::1] codes,   # IN (n, M*C)
              int n_codebooks, int n_codewords,
              double[:, :, ::1] gram,        # OUT (M, C*K, C*K): B_m^T B_m (co-occurrence counts)
              int n_threads):
    """The Gram matrices of the normal equations: gram[m, c*K + k, c2*K + k2] = #rows whose code uses word k of
    codebook c and word k2 of codebook c2 in subspace m (exact counts). One subspace per task."""
    cdef RowsJob job
    cdef Py_ssize_t n = codes.shape[0]
    if gram.shape[0] == 0:
        return
    job.codes = &codes[0, 0] if n > 0 else NULL
    job.code_cols = codes.shape[1]
    job.gram = &gram[0, 0, 0]
    job.n = n
    job.M = gram.shape[0]
    job.C = n_codebooks
    job.K = n_codewords
    with nogil:
        ock_pool_run(_code_gram_task, &job, job.M,
                     ock_pool_threads(n_threads, COST_ROW_VALUE * n * job.M * job.C * job.C), OCK_POOL_DYNAMIC)


cdef void _code_gram_task(void *ctx, int64_t task, int tid) noexcept nogil:
    """Subspace `task` of code_gram."""
    cdef RowsJob *j = <RowsJob *>ctx
    cdef int m = <int>task
    cdef int C = j.C, K = j.K
    cdef int c, c2, r
    cdef Py_ssize_t i
    cdef double *gram = j.gram + <size_t>m * C * K * C * K
    cdef const uint8_t *code
    memset(gram, 0, <size_t>C * K * C * K * sizeof(double))
    for i in range(j.n):
        code = j.codes + i * j.code_cols + m * C
        for c in range(C):
            r = c * K + code[c]
            for c2 in range(C):
                gram[<size_t>r * C * K + c2 * K + code[c2]] += 1.0


def max_abs(const float[::1] values):   # IN (n,)
    """The largest |value| (0 for none); +inf when any value is NaN or infinite. One vectorised pass (max_abs in
    encoder.h) instead of NumPy's min and max (two passes and their call overhead, which dominate the check of a single
    query)."""
    cdef long n = values.shape[0]
    cdef float largest = 0
    if n:
        with nogil:
            largest = ock_max_abs(&values[0], n)
    return largest


cdef double _sqnorm64(const float *x, Py_ssize_t n) noexcept nogil:
    """sum_p x_p^2 in float64, in four running sums (p mod 4) added in a fixed order: the one definition of the
    squared norm by which "cosine" normalises a vector (normalize_rows, and IvfOneQuery for a query alone), so that a
    vector is normalised to the same float32 values on every path."""
    cdef double s0 = 0, s1 = 0, s2 = 0, s3 = 0
    cdef Py_ssize_t p = 0
    while p + 4 <= n:
        s0 = s0 + <double>x[p] * x[p]
        s1 = s1 + <double>x[p + 1] * x[p + 1]
        s2 = s2 + <double>x[p + 2] * x[p + 2]
        s3 = s3 + <double>x[p + 3] * x[p + 3]
        p += 4
    while p < n:
        s0 = s0 + <double>x[p] * x[p]
        p += 1
    return (s0 + s1) + (s2 + s3)


def row_sqnorms(const float[:, ::1] rows,   # IN (n, P)
                double[::1] out):           # OUT (n,): each row's squared norm in float64 (_sqnorm64)
    """The squared norms by which metric "cosine" normalises rows (_validation.normalize_rows)."""
    cdef Py_ssize_t i
    cdef Py_ssize_t P = rows.shape[1]
    with nogil:
        for i in range(rows.shape[0]):
            out[i] = _sqnorm64(&rows[i, 0], P)
