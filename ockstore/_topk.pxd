"""The bounded top-k heap of the scans, shared by every extension that keeps the k best (distance, row) pairs of a
query (_search_kernels.pyx: the exhaustive scan; _ivf_kernels.pyx: the inverted-file scan).

A query's heap is a max-heap of k (distance, row) pairs ordered lexicographically by (distance, id): its root is the
worst pair kept, and a smaller id wins a tie. Empty slots are (+inf, row -1). Rows map to ids through `ids` (the id of
row r is ids[r], or r itself when ids is NULL). Every function is GIL-free and allocation-free; callers own the
memory.
"""

from libc.math cimport INFINITY
from libc.stdint cimport int64_t, uint64_t


cdef inline int64_t _id_of(const int64_t *ids, int64_t row) noexcept nogil:
    """The id of a row (its row number when ids is NULL); -1 for the empty slot of a heap (row -1)."""
    if row < 0:
        return -1
    return ids[row] if ids != NULL else row


cdef inline bint _worse(float d1, int64_t r1, float d2, int64_t r2, const int64_t *ids) noexcept nogil:
    """(d1, row r1) ranks after (d2, row r2): a larger distance, or an equal one and a larger id."""
    return d1 > d2 or (d1 == d2 and _id_of(ids, r1) > _id_of(ids, r2))


cdef inline void _heap_replace_top(float *hd, int64_t *hr, int k, float d, int64_t row,
                                   const int64_t *ids) noexcept nogil:
    """Replace the worst element (the root) of a max-heap by (d, row) and restore the heap."""
    _heap_sift_down(hd, hr, k, 0, d, row, ids)


cdef inline void _heap_sift_down(float *hd, int64_t *hr, int k, int pos, float d, int64_t row,
                                 const int64_t *ids) noexcept nogil:
    """Put (d, row) at `pos` of a max-heap of k pairs whose subtrees below `pos` are heaps, and sift it down."""
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
    """Offer (d, row): it replaces the root when it ranks before it."""
    if d < hd[0] or (d == hd[0] and _id_of(ids, row) < _id_of(ids, hr[0])):
        _heap_replace_top(hd, hr, k, d, row, ids)


cdef inline void _consider(float *hd, int64_t *hr, int k, float d, const int64_t *ids, Py_ssize_t row,
                           const uint64_t *allow) noexcept nogil:
    """Offer code `row` at distance d, if the bitmap `allow` (NULL: every row) allows it. Almost every code fails the
    first test, so its id (8 bytes, as much memory traffic as the code itself) and its bit are only read for the few
    that may enter."""
    if d <= hd[0] and (allow == NULL or (allow[row >> 6] >> (row & 63)) & 1):
        _heap_push(hd, hr, k, d, row, ids)


cdef inline void _heap_init(float *hd, int64_t *hr, int k, float bound) noexcept nogil:
    """k empty slots (bound, row -1): only a code at a distance below `bound` enters (INFINITY: any real code)."""
    cdef int j
    for j in range(k):
        hd[j] = bound
        hr[j] = -1


cdef inline void _heap_sort_into(float *hd, int64_t *hr, int k, const int64_t *ids, float *out_d,
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


cdef inline void _merge_heaps(const float *heap_d, const int64_t *heap_i, int n_heaps, Py_ssize_t stride, int k,
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


cdef inline void _topk_compact(TopK *t) noexcept nogil:
    """Keep the k best of the n > k candidates (in positions 0..k-1, any order) and set the threshold to the worst
    kept distance. Quickselect by (distance, id) with a median-of-three pivot and Hoare partitioning (equal keys
    split evenly, so repeated values cost no more than distinct ones)."""
    cdef int lo = 0
    cdef int hi = t.n - 1
    cdef int i, j, mid
    cdef float pd
    cdef int64_t pr
    cdef float worst
    while lo < hi:
        mid = lo + (hi - lo) // 2
        # median of three at mid
        if _worse(t.d[lo], t.r[lo], t.d[mid], t.r[mid], t.ids):
            _topk_swap(t, lo, mid)
        if _worse(t.d[mid], t.r[mid], t.d[hi], t.r[hi], t.ids):
            _topk_swap(t, mid, hi)
            if _worse(t.d[lo], t.r[lo], t.d[mid], t.r[mid], t.ids):
                _topk_swap(t, lo, mid)
        pd = t.d[mid]
        pr = t.r[mid]
        i = lo
        j = hi
        while i <= j:
            while _worse(pd, pr, t.d[i], t.r[i], t.ids):
                i += 1
            while _worse(t.d[j], t.r[j], pd, pr, t.ids):
                j -= 1
            if i <= j:
                _topk_swap(t, i, j)
                i += 1
                j -= 1
        # now [lo, j] <= pivot <= [i, hi]
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


cdef inline void _topk_sort(TopK *t, int lo, int hi) noexcept nogil:
    """Sort candidates lo..hi (inclusive) ascending by (distance, id): quicksort with a median-of-three pivot and
    Hoare partitioning, recursing into the smaller side (depth <= log2(n)), insertion sort below 16 candidates. Far
    fewer mispredicted branches than popping a heap."""
    cdef int i, j, mid
    cdef float pd, d
    cdef int64_t pr, r
    while hi - lo >= 16:
        mid = lo + (hi - lo) // 2
        if _worse(t.d[lo], t.r[lo], t.d[mid], t.r[mid], t.ids):
            _topk_swap(t, lo, mid)
        if _worse(t.d[mid], t.r[mid], t.d[hi], t.r[hi], t.ids):
            _topk_swap(t, mid, hi)
            if _worse(t.d[lo], t.r[lo], t.d[mid], t.r[mid], t.ids):
                _topk_swap(t, lo, mid)
        pd = t.d[mid]
        pr = t.r[mid]
        i = lo
        j = hi
        while i <= j:
            while _worse(pd, pr, t.d[i], t.r[i], t.ids):
                i += 1
            while _worse(t.d[j], t.r[j], pd, pr, t.ids):
                j -= 1
            if i <= j:
                _topk_swap(t, i, j)
                i += 1
                j -= 1
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


cdef inline void _topk_sort_into(TopK *t, float *out_d, int64_t *out_r) noexcept nogil:
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
