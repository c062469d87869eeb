"""The coarse quantizer of the inverted file: its centroids in the layouts the kernels want (``CoarseTables``), and
its training by k-means (``train_coarse``): docs/ARCHITECTURE.md, "Inverted file".

No input validation here: callers pass C-contiguous float32 rows without NaN/inf, parameters in range and a
``numpy.random.Generator``.
"""

from __future__ import annotations

import math

import numpy as np

from .. import _kernels
from .._blas import blas_single_thread

__all__ = ["CoarseTables", "train_coarse", "PROBE_L2", "PROBE_IP", "MAX_POINTS_PER_LIST"]

# How the lists are ranked for probing (PROBE_* of _kernels.pyx).
PROBE_L2 = 0  # by ||q - c_l||^2: metrics "l2" and "cosine" (unit vectors: the nearest centroids hold the best cosines)
PROBE_IP = 1  # by q.c_l, largest first: metric "ip"

# The k-means runs on at most this many training rows per list (a seeded sample), as Faiss samples at most 256 per
# centroid. Measured with sift-real's 100K learn set and 1,024 lists (the fraction of 10,000 queries whose true
# nearest neighbour lies in one of their n_probe nearest lists): a sample of 64 rows per list lost 0.01 of it at
# n_probe 1 to 4 and 0.007 at n_probe 8 against the whole learn set (98 per list), and the recall@10 of the IVF
# followed; a k-means iteration over 100K rows takes ~0.15 s on 2 cores, so the whole set is worth its time.
MAX_POINTS_PER_LIST = 256

# Relative perturbation when an empty cluster takes over half of a large one (as Faiss splits clusters).
SPLIT_EPS = 1.0 / 1024


class CoarseTables:
    """The coarse centroids in the layouts the kernels want (computed once per model).

    centroids   (L, P) float32
    panels      (P * L,) float32 the centroids in panels of _kernels.COARSE_PANEL lists (what the probe kernel reads:
                                 kernels/ivf.h says why): panel after panel, the P values of list first + j of the panel
                                 starting at list `first` at first * P + p * width + j (width: its lists)
    neg2_ct     (P, L) float32   -2 times the centroids transposed: the assignment's BLAS product then gives -2 x.c_l
                                 directly (exactly: a power-of-two scale)
    sqnorms     (L,) float32     ||c_l||^2 (summed in float64)

    ``prefilter(kind)`` gives the coarse step of a query alone its half-precision copy (built on first use).
    """

    def __init__(self, centroids):
        self.centroids = np.ascontiguousarray(centroids, dtype=np.float32)
        self.n_lists, self.dim = self.centroids.shape
        panel = _kernels.COARSE_PANEL
        self.panels = np.concatenate([np.ascontiguousarray(self.centroids[first:first + panel].T).reshape(-1)
                                      for first in range(0, self.n_lists, panel)] or [np.empty(0, np.float32)])
        self.neg2_ct = np.ascontiguousarray(-2.0 * self.centroids.T)
        c64 = self.centroids.astype(np.float64)
        self.sqnorms = np.einsum("lp,lp->l", c64, c64).astype(np.float32)
        self._prefilters = {}

    def __getstate__(self):
        """Pickled (a quantizer pickles: distributed builds ship it) without the prefilters, built again on use."""
        state = self.__dict__.copy()
        state["_prefilters"] = {}
        return state

    def prefilter(self, kind):
        """The prefilter of the coarse step for a query alone, for probing by `kind` (PROBE_L2, PROBE_IP): a
        _kernels.CoarseHalf, or None where it does not apply (fewer than COARSE_HALF_MIN_LISTS lists, centroids that
        are not finite or whose squared norms come near float32's largest value).

        kernels/ivf.h ("A query alone") derives what is computed here, in float64: the float16 values h_l of c_l / s (s the
        power of two that puts max |c| in [2^14, 2^15)), in panels of COARSE_HALF_PANEL lists, and the coefficients
        of each list's bound on |key - approximate key|, twice the derived ones."""
        if kind not in self._prefilters:
            self._prefilters[kind] = self._build_prefilter(kind)
        return self._prefilters[kind]

    def _build_prefilter(self, kind):
        L, P = self.n_lists, self.dim
        C = self.centroids.astype(np.float64)
        if L < _kernels.COARSE_HALF_MIN_LISTS or not np.isfinite(C).all() or not (self.sqnorms.max() <= 2.0 ** 120):
            return None
        largest = float(np.abs(C).max())
        scale = math.ldexp(1.0, math.frexp(largest)[1] - 15) if largest > 0 else 1.0  # largest / scale < 2^15
        H = (C / scale).astype(np.float16)  # C / scale: exact (a power of two)
        H64 = H.astype(np.float64)
        error = np.sqrt(np.einsum("lp,lp->l", C - scale * H64, C - scale * H64))  # e_l = ||c_l - s h_l||
        c_norm = np.sqrt(np.einsum("lp,lp->l", C, C))
        h_norm = np.sqrt(np.einsum("lp,lp->l", H64, H64))
        u = 2.0 ** -24
        gamma = (P + 1) * u / (1 - (P + 1) * u)
        underflow = (P + 8) * 2.0 ** -149 * (1 + scale)  # P products' underflows, of each sum (2^-150 each), doubled
        spread = c_norm + scale * h_norm + error
        if kind == PROBE_L2:
            alpha = 2 * error + (2 * gamma + 8 * u) * spread
            beta = np.full(L, 2 * underflow)
            factor, sqnorm_weight = -2.0 * scale, 2 * 4 * u
        else:
            alpha = error + (gamma + 4 * u) * spread
            beta = np.full(L, underflow)
            factor, sqnorm_weight = -scale, 0.0
        alpha = 2 * alpha * (1 + 2.0 ** -20)  # twice the bound, and the float64 rounding of its computation
        beta = 2 * beta
        largest_norm = max(float(c_norm.max()), float(h_norm.max()))
        qnorm_limit = 2.0 ** 120 / largest_norm if largest_norm > 0 else math.inf
        panel = _kernels.COARSE_HALF_PANEL
        padded = -(-L // panel) * panel
        H_padded = np.zeros((padded, P), dtype=np.float16)
        H_padded[:L] = H
        values = np.ascontiguousarray(H_padded.reshape(padded // panel, panel, P).transpose(0, 2, 1)).reshape(-1)
        return _kernels.CoarseHalf(self.centroids, values.view(np.uint16), alpha, beta, kind, factor, sqnorm_weight,
                                   qnorm_limit)

    def assign(self, X, n_threads):
        """(labels int32 (n,), squared distances float32 (n,)): the nearest centroid of each row (ties: the smaller
        list id)."""
        n = X.shape[0]
        labels = np.empty(n, dtype=np.int32)
        distances = np.empty(n, dtype=np.float32)
        with blas_single_thread():
            _kernels.coarse_assign(X, self.neg2_ct, self.sqnorms, labels, distances, n_threads)
        return labels, distances


def _split_empty(centroids, counts, rng):
    """Give every empty cluster half of a large one (Faiss's rule): pick a cluster with probability proportional to
    its size beyond one row, copy its centroid, and move the two copies apart by +-SPLIT_EPS in alternating
    dimensions. Changes ``centroids`` (float64) and ``counts`` in place."""
    P = centroids.shape[1]
    sign = np.where(np.arange(P) % 2 == 0, 1.0, -1.0)
    for empty in np.flatnonzero(counts == 0):
        weights = np.maximum(counts - 1, 0).astype(np.float64)
        if weights.sum() == 0:  # every cluster has at most one row: nothing to split
            return
        big = int(rng.choice(counts.size, p=weights / weights.sum()))
        centroids[empty] = centroids[big] * (1 + sign * SPLIT_EPS)
        centroids[big] = centroids[big] * (1 - sign * SPLIT_EPS)
        counts[empty] = counts[big] // 2
        counts[big] -= counts[empty]


def train_coarse(X, n_lists, n_iter, rng, n_threads):
    """k-means (Lloyd) on the rows of X; returns (centroids (L, P) float32, history (n_iter + 1,) float64, labels
    (n,) int32 of every row of X with the final centroids).

    At most MAX_POINTS_PER_LIST * n_lists rows (a seeded sample) take part; the centroids start at n_lists distinct
    sampled rows. Each iteration assigns every sampled row to its nearest centroid (one BLAS product per chunk of
    rows, ``CoarseTables.assign``) and moves each centroid to the mean of its rows (summed in float64); an empty
    cluster takes over half of a large one. history[i] is the mean squared distance of the sampled rows to their
    nearest centroid after i updates (in exact arithmetic it never rises, except when an empty cluster is split).
    The result is the same for any n_threads.
    """
    n = X.shape[0]
    if n > MAX_POINTS_PER_LIST * n_lists:
        sample = X[np.sort(rng.choice(n, size=MAX_POINTS_PER_LIST * n_lists, replace=False))]
    else:
        sample = X
    centroids = sample[np.sort(rng.choice(sample.shape[0], size=n_lists, replace=False))].astype(np.float64)
    sums = np.empty((n_lists, X.shape[1]), dtype=np.float64)
    counts = np.empty(n_lists, dtype=np.int64)
    history = []
    for _ in range(n_iter):
        labels, distances = CoarseTables(centroids).assign(sample, n_threads)
        history.append(float(distances.mean(dtype=np.float64)))
        _kernels.cluster_sums(sample, labels, sums, counts)
        filled = counts > 0
        centroids[filled] = sums[filled] / counts[filled, None]
        if not filled.all():
            _split_empty(centroids, counts, rng)
    tables = CoarseTables(centroids)
    labels, distances = tables.assign(sample, n_threads)
    history.append(float(distances.mean(dtype=np.float64)))
    if sample is not X:
        labels, _ = tables.assign(X, n_threads)
    return tables.centroids, np.array(history, dtype=np.float64), labels
