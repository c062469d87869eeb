"""The one BLAS wrapper of the kernels (scipy.linalg.cython_blas), shared by every extension that multiplies."""

from scipy.linalg.cython_blas cimport sgemm
from libc.string cimport memset


cdef inline void _gemm(int m, int n, int k, const float *A, int lda, const float *B, int ldb,
                       float *C, int ldc) noexcept nogil:
    """C (m x n, row-major, leading dim ldc) = A (m x k, lda) @ B (k x n, ldb).

    A row-major matrix is its transpose in column-major order, so we ask Fortran for C^T = B^T A^T.
    """
    cdef char trans = b'N'
    cdef float one = 1.0
    if m == 0 or n == 0:
        return
    # Zero C here and accumulate into it (beta = 1): with beta = 0 OpenBLAS first runs a slow scalar pass over C.
    for i in range(m):
        memset(C + <size_t>i * ldc, 0, n * sizeof(float))
    if k == 0:
        return
    sgemm(&trans, &trans, &n, &m, &k, &one, <float *>B, &ldb, <float *>A, &lda, &one, C, &ldc)
