"""The order of search results, shared by the extensions that keep the k best (distance, row) pairs of a query:
_search_kernels.pyx (the exhaustive scan, with a bounded max-heap per query) and _ivf_kernels.pyx (the inverted
file's scan of probed lists, with a TopK collector).

Pairs are ordered lexicographically by (distance, id): a smaller id wins a tie. Rows map to ids through `ids` (the
id of row r is ids[r], or r itself when ids is NULL; row -1 is an empty slot). Every function is GIL-free and
allocation-free; callers own the memory. Only these small inline functions live here: the heap and the collector stay
in their extensions as ordinary functions, out of line (a pxd can only hold inline ones, and inlining the heap into
the exhaustive scan's loop slowed that loop by ~14%).
"""

from libc.math cimport INFINITY
from libc.stdint cimport int64_t


cdef inline int64_t _id_of(const int64_t *ids, int64_t row) noexcept nogil:
    """The id of a row (its row number when ids is NULL); -1 for the empty slot of a heap (row -1)."""
    if row < 0:
        return -1
    return ids[row] if ids != NULL else row


cdef inline bint _worse(float d1, int64_t r1, float d2, int64_t r2, const int64_t *ids) noexcept nogil:
    """(d1, row r1) ranks after (d2, row r2): a larger distance, or an equal one and a larger id."""
    return d1 > d2 or (d1 == d2 and _id_of(ids, r1) > _id_of(ids, r2))
