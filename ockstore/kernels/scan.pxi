# The ADC scan of byte codes and the collectors of its k best results, shared by the exhaustive scan
# (flat.pxi: a bounded max-heap per query) and the inverted file's scan of probed lists (ivf.pxi:
# a TopK buffer per query). One loop serves both: it is written once over the fused type Collector, and Cython
# compiles one copy per collector, so neither pays for the other's test.
#
# For a query with tables lut[w, k] (w = m*C + c, SLOTS entries each) and a term t (its constant term, plus the list
# term in an inverted file), the distance to code b with norm term n_b is
#     dist = t + n_b + sum_w lut[w, b_w]
# accumulated in exactly this order whatever the threading and the scan, so results never depend on the number of
# threads, and an inverted file probing every list gives the exhaustive scan's distances.

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


# --------------------------------------------------------------------------------------------------------------------
# The order of results: pairs (distance, id), lexicographically, so a smaller id wins a tie. Collectors hold row
# handles (rows.h: part << PART_SHIFT | row; a single part's handles are its rows) and map them to ids through an id
# table `ids` (one pointer per part, NULL for a part whose ids are its row numbers; NULL: every handle is its own id;
# handle -1 is an empty slot).

cdef extern from "kernels/rows.h" nogil:
    enum:
        OCK_PART_SHIFT
    int64_t OCK_ROW_MASK
    int64_t ock_row_id(const int64_t **ids, int64_t handle)

PART_SHIFT = OCK_PART_SHIFT


cdef inline int64_t _id_of(const int64_t **ids, int64_t row) noexcept nogil:
    """The id of a row handle (ock_row_id); -1 for the empty slot of a heap (row -1)."""
    return ock_row_id(ids, row)


cdef inline const int64_t **_one_part_ids(const int64_t[::1] ids, const int64_t **table) noexcept nogil:
    """The id table of a single part whose ids are `ids` (None or empty: the row numbers), in `table` (one pointer,
    the caller's, alive while the table is used)."""
    if ids is None or ids.shape[0] == 0:
        return NULL
    table[0] = &ids[0]
    return table


cdef inline bint _worse(float d1, int64_t r1, float d2, int64_t r2, const int64_t **ids) noexcept nogil:
    """(d1, row r1) ranks after (d2, row r2): a larger distance, or an equal one and a larger id."""
    return d1 > d2 or (d1 == d2 and _id_of(ids, r1) > _id_of(ids, r2))


# --------------------------------------------------------------------------------------------------------------------
# A bounded max-heap of k (distance, row) pairs: the exhaustive scan's collector. Its root is the worst pair kept.
# _heap_replace_top stays out of line: inlining it into the scan loop slowed that loop by ~14%.

cdef void _heap_replace_top(float *hd, int64_t *hr, int k, float d, int64_t row,
                            const int64_t **ids) noexcept nogil:
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


cdef inline void _heap_push(float *hd, int64_t *hr, int k, float d, int64_t row, const int64_t **ids) noexcept nogil:
    if d < hd[0] or (d == hd[0] and _id_of(ids, row) < _id_of(ids, hr[0])):
        _heap_replace_top(hd, hr, k, d, row, ids)


cdef void _heap_init(float *hd, int64_t *hr, int k, float bound) noexcept nogil:
    """k empty slots (bound, row -1): only a code at a distance below `bound` enters (INFINITY: any real code)."""
    cdef int j
    for j in range(k):
        hd[j] = bound
        hr[j] = -1


cdef void _heap_sort_into(float *hd, int64_t *hr, int k, const int64_t **ids, float *out_d,
                          int64_t *out_r) noexcept nogil:
    """Write the heap's elements to out in ascending (dist, id) order; the heap is consumed.

    Empty slots hold (bound, row -1); every real result is below the bound, so they sort last.
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


cdef struct Heap:
    # One query's heap as a collector of the scan loop.
    float *d                    # (k,) distances, the worst at d[0]
    int64_t *r                  # (k,) rows
    int k
    const int64_t **ids         # the id table of the row handles (NULL: a handle is its id), for ties


# --------------------------------------------------------------------------------------------------------------------
# A top-k collector for scans that keep many candidates or read few codes (topk.h): a buffer of `cap` > k candidates
# instead of a heap, compacted by a radix selection when full. The inverted file's scan and the probing of its lists
# use it, and the exhaustive scan when it keeps many candidates (re-ranking); results are those of a heap.

cdef extern from "kernels/topk.h" nogil:
    ctypedef struct ock_topk:
        float *d                # (cap,) distances of the candidates held
        int64_t *r              # (cap,) their rows
        int k
        int cap
        int n
        float threshold         # a candidate enters when its distance is <= threshold
        const int64_t **ids
    int ock_topk_capacity(int k)
    void ock_topk_init(ock_topk *t, float *d, int64_t *r, int64_t *scratch, int k, const int64_t **ids, float bound)
    void ock_topk_push(ock_topk *t, float d, int64_t row)
    void ock_topk_offer(ock_topk *t, float d, int64_t row)
    void ock_topk_offer4(ock_topk *t, float d0, float d1, float d2, float d3, int64_t row)
    void ock_topk_finish(ock_topk *t, float *out_d, int64_t *out_r, int sorted)

ctypedef ock_topk TopK

cdef enum:
    # The k from which the scan loop offers its codes to a TopK four at a time without a branch (ock_topk_offer4):
    # a deep collector lets thousands of codes in per query, each a mispredicted branch of the inline test.
    DEEP_TOPK_K = 256


cdef inline Py_ssize_t _topk_items(int k) noexcept nogil:
    """8-byte items of one collector's buffers: cap distances (as 8-byte items, rounded up), cap rows, 2 cap scratch."""
    cdef Py_ssize_t cap = ock_topk_capacity(k)
    return (cap + 1) // 2 + 3 * cap


cdef inline void _topk_start(TopK *t, int64_t *buffers, int k, const int64_t **ids, float bound) noexcept nogil:
    """A collector of k in `buffers` (_topk_items(k) 8-byte items); only distances below `bound` enter."""
    cdef Py_ssize_t cap = ock_topk_capacity(k)
    ock_topk_init(t, <float *>buffers, buffers + (cap + 1) // 2, buffers + (cap + 1) // 2 + cap, k, ids,
                  _entry_threshold(bound))


cdef inline float _entry_threshold(float bound) noexcept nogil:
    """The collector's threshold for "below `bound`": the float just under it (the largest float for +inf, so that
    +inf, a corrupt code's distance, never enters)."""
    cdef float t
    if bound == INFINITY:
        return 3.4028234663852886e+38
    t = nextafterf(bound, -INFINITY)
    return t


# --------------------------------------------------------------------------------------------------------------------
# The scan loop, over either collector.

ctypedef fused Collector:
    Heap
    TopK


cdef inline const float *_threshold_of(Collector *c) noexcept nogil:
    """Where the collector keeps the distance a code must not exceed to enter: the heap's root, the TopK's threshold.
    The scan loop compares every code with it (one load), and calls _enter only for the few that pass."""
    if Collector is Heap:
        return c.d
    else:
        return &c.threshold


cdef inline void _enter(Collector *c, float d, int64_t row) noexcept nogil:
    """Offer a code whose distance passed the threshold test."""
    if Collector is Heap:
        _heap_push(c.d, c.r, c.k, d, row, c.ids)
    else:
        ock_topk_push(c, d, row)


cdef inline void _offer(Collector *c, const float *threshold, float d, Py_ssize_t row,
                        const uint64_t *allow, int64_t tag) noexcept nogil:
    """Offer code `row` (handle tag | row) at distance d, if the bitmap `allow` (NULL: every row) allows it. Almost
    every code fails the first test, so its id (8 bytes, as much memory traffic as the code itself) and its bit are
    only read for the few that may enter."""
    if d <= threshold[0] and (allow == NULL or (allow[row >> 6] >> (row & 63)) & 1):
        _enter(c, d, row | tag)


cdef struct NormTerms:
    # The norm terms n_b of the rows a scan reads, indexed from the first row it scans. Added to each code's sum, or,
    # with `scales` (metric "cosine": the values are s_b = 1 / ||x_hat_b||, the tables -z.d), multiplying it after the
    # sum: dist = (term + sum_w lut[w, b_w]) * s_b = -<q, x_hat_b> / ||x_hat_b||, one multiply per code.
    const float *f32            # float32 norm terms, or NULL
    const uint8_t *codes        # one-byte norm codes (when f32 is NULL), or NULL: no norm term
    const float *levels         # (256,) the levels of `codes`
    bint scales                 # the values scale the sums instead of being added to them


cdef inline NormTerms _norm_terms_from(NormTerms n, Py_ssize_t start) noexcept nogil:
    """The same norm terms, indexed from row `start`."""
    if n.f32 != NULL:
        n.f32 = n.f32 + start
    if n.codes != NULL:
        n.codes = n.codes + start
    return n


cdef inline float _with_norm_term(float t, const NormTerms *n, Py_ssize_t j) noexcept nogil:
    """t + the norm term of row j (t itself when there is none, or when the terms are scales)."""
    if n.scales:
        return t
    if n.f32 != NULL:
        return t + n.f32[j]
    if n.codes != NULL:
        return t + n.levels[n.codes[j]]
    return t


cdef inline float _scaled(float d, const NormTerms *n, Py_ssize_t j) noexcept nogil:
    """The sum d of row j times its scale s_j (d itself unless the norm terms are scales)."""
    if not n.scales:
        return d
    if n.f32 != NULL:
        return d * n.f32[j]
    return d * n.levels[n.codes[j]]


cdef inline float _code_distance(const uint8_t *c, int W, const float *lut, float d) noexcept nogil:
    """d + the table entries of one code, in order."""
    cdef int w
    for w in range(W):
        d = d + lut[<size_t>w * SLOTS + c[w]]
    return d


cdef void _scan_rows(Collector *sink, const uint8_t *codes, int W, const float *lut, float term, NormTerms norms,
                     Py_ssize_t start, Py_ssize_t stop, const uint64_t *allow, int64_t tag) noexcept nogil:
    """Offer rows start..stop-1 to the collector as handles tag | row (byte w of a code indexes lut + w * SLOTS);
    norms indexed from `start`. Every distance is computed; with a bitmap `allow`, only the allowed rows are offered (the way to scan
    rows of which most are allowed; _scan_allowed_rows reads only the allowed ones)."""
    cdef const float *threshold = _threshold_of(sink)
    cdef Py_ssize_t i = start
    cdef int w, j
    cdef bint deep = False
    if Collector is TopK:
        deep = allow == NULL and sink.k >= DEEP_TOPK_K
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
        if norms.scales:
            d0 = term
            d1 = term
            d2 = term
            d3 = term
        elif norms.f32 != NULL:
            d0 = term + norms.f32[i - start]
            d1 = term + norms.f32[i - start + 1]
            d2 = term + norms.f32[i - start + 2]
            d3 = term + norms.f32[i - start + 3]
        elif norms.codes != NULL:
            d0 = term + norms.levels[norms.codes[i - start]]
            d1 = term + norms.levels[norms.codes[i - start + 1]]
            d2 = term + norms.levels[norms.codes[i - start + 2]]
            d3 = term + norms.levels[norms.codes[i - start + 3]]
        else:
            d0 = term
            d1 = term
            d2 = term
            d3 = term
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
        if norms.scales:
            d0 = _scaled(d0, &norms, i - start)
            d1 = _scaled(d1, &norms, i - start + 1)
            d2 = _scaled(d2, &norms, i - start + 2)
            d3 = _scaled(d3, &norms, i - start + 3)
        if Collector is TopK:
            if deep:
                ock_topk_offer4(sink, d0, d1, d2, d3, i | tag)
                i += 4
                continue
        _offer(sink, threshold, d0, i, allow, tag)
        _offer(sink, threshold, d1, i + 1, allow, tag)
        _offer(sink, threshold, d2, i + 2, allow, tag)
        _offer(sink, threshold, d3, i + 3, allow, tag)
        i += 4
    while i < stop:
        d0 = _code_distance(codes + <size_t>i * W, W, lut, _with_norm_term(term, &norms, i - start))
        _offer(sink, threshold, _scaled(d0, &norms, i - start), i, allow, tag)
        i += 1


cdef void _scan_allowed_rows(Collector *sink, const uint8_t *codes, int W, const float *lut, float term,
                             NormTerms norms, Py_ssize_t start, Py_ssize_t stop,
                             const uint64_t *allow, int64_t tag) noexcept nogil:
    """_scan_rows for the rows of start..stop-1 whose bit is set in `allow` (bit r % 64 of word r // 64; bits past
    the last row are zero); norms indexed from `start`. The bitmap is read 64 rows at a time (the first word masked
    below `start`) and a row's code is read only when its bit is set, so the cost falls with the fraction of rows
    allowed."""
    cdef const float *threshold = _threshold_of(sink)
    cdef Py_ssize_t first = start - (start & 63)
    cdef Py_ssize_t row
    cdef uint64_t word
    cdef float d
    if start >= stop:
        return
    word = allow[first >> 6] & (~(<uint64_t>0) << (start & 63))
    while True:
        while word != 0:
            row = first + _count_trailing_zeros(word)
            word = word & (word - 1)
            if row >= stop:
                return
            d = _code_distance(codes + <size_t>row * W, W, lut, _with_norm_term(term, &norms, row - start))
            _offer(sink, threshold, _scaled(d, &norms, row - start), row, NULL, tag)
        first += 64
        if first >= stop:
            return
        word = allow[first >> 6]


cdef NormTerms _norm_terms(const float[::1] norms_f32, const uint8_t[::1] norm_codes, const float[::1] norm_levels,
                           bint scales=False):
    """The NormTerms of a kernel's arguments (None: absent; norm_codes only without norms_f32, with norm_levels);
    ``scales``: they multiply the sums (cosine) instead of being added."""
    cdef NormTerms n
    n.f32 = &norms_f32[0] if norms_f32 is not None and norms_f32.shape[0] > 0 else NULL
    n.codes = &norm_codes[0] if n.f32 == NULL and norm_codes is not None and norm_codes.shape[0] > 0 else NULL
    n.levels = &norm_levels[0] if n.codes != NULL else NULL
    n.scales = scales and (n.f32 != NULL or n.codes != NULL)
    return n


def topk_collect(const float[:, ::1] distances,   # IN (nq, n) the distances offered, row i of a query being row i
                 int k,                           # IN the candidates kept
                 const int64_t[::1] ids,          # IN (n,) the id of each row (ties), or None: the row number
                 float bound,                     # IN only distances below it enter (inf: all finite ones)
                 bint sorted_output,              # IN ascending (distance, id, row), or in the collector's order
                 float[:, ::1] out_dist,          # OUT (nq, k)
                 int64_t[:, ::1] out_rows):       # OUT (nq, k): (inf, -1) past the last
    """The TopK collector (topk.h) over given distances, for tests (its scans offer computed distances)."""
    cdef TopK t
    cdef int64_t *buffers = NULL
    cdef const int64_t *id_part
    cdef const int64_t **id_table = _one_part_ids(ids, &id_part)
    cdef int q
    cdef Py_ssize_t i
    try:
        buffers = <int64_t *>_alloc(<size_t>_topk_items(k) * sizeof(int64_t), "topk_collect's buffers")
        with nogil:
            for q in range(distances.shape[0]):
                _topk_start(&t, buffers, k, id_table, bound)
                for i in range(distances.shape[1]):
                    ock_topk_offer(&t, distances[q, i], i)
                ock_topk_finish(&t, &out_dist[q, 0], &out_rows[q, 0], sorted_output)
    finally:
        free(buffers)
