"""The one BLAS wrapper of the kernels (scipy.linalg.cython_blas), shared by every extension that multiplies.

Every matrix here is row-major; the wrapper alone knows that BLAS is Fortran (column-major).
"""

from scipy.linalg.cython_blas cimport sgemm
from libc.string cimport memset


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
