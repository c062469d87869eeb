"""Scratch memory of the kernels' parallel regions, shared by every extension (docs/ARCHITECTURE.md, "Layers").

Allocated with the GIL before a region, one block per buffer holding a slice for each thread (thread t uses slice t,
found with threadid()), freed after the region.
"""

from libc.stdlib cimport malloc


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
