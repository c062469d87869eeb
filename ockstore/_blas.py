"""BLAS thread control, shared by training, encoding and search (no input validation)."""

from __future__ import annotations

import contextlib

__all__ = ["blas_single_thread", "blas_threads"]

_controller = None


@contextlib.contextmanager
def blas_single_thread():
    """Run BLAS on one thread inside the block.

    The kernels' threads call sgemm, each on its own chunk; a multi-threaded BLAS inside them would
    oversubscribe the cores. With BLAS on one thread, the number of threads is set by n_threads alone and every
    product is computed the same way whatever n_threads is, so results are bit-identical across thread counts.
    The controller is created on first use, after the BLAS libraries it must find (numpy's, scipy's) are loaded.
    """
    with blas_threads(1):
        yield


@contextlib.contextmanager
def blas_threads(n):
    """Run BLAS on at most ``n`` threads inside the block (a search's ``n_threads`` bounds its products too)."""
    global _controller
    if _controller is None:
        from threadpoolctl import ThreadpoolController

        _controller = ThreadpoolController()
    with _controller.limit(limits=n, user_api="blas"):
        yield
