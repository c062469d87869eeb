"""Search-quality metrics: recall@R, k-recall@k, mean overall ratio, and quantization distortion.

Two recalls, named as their communities name them (never "recall@10" alone for either):

* **recall@R** (the OCKM paper and its predecessors, Jégou et al.) — the fraction of queries whose true nearest
  neighbour is among the first R results: recall@1, recall@10, recall@100 (``recall_at_r``).
* **k-recall@k** (ann-benchmarks, hnswlib, Faiss's "intersection") — the mean over queries of the fraction of the true
  k nearest neighbours found among the first k results: 10-recall@10 (``k_recall_at_k``).
* **mean overall ratio** (Tao et al., "Quality and efficiency in high-dimensional nearest neighbor search", 2009) —
  for each query the mean over i = 1..k of ‖q − r_i‖ / ‖q − r*_i‖, where r_i is the i-th of the k returned points
  re-sorted by true distance and r*_i the exact i-th neighbour; averaged over queries. 1.0 is perfect.
* **distortion** — the mean squared reconstruction error per vector.
* **exact k-NN** — the ground truth itself, by brute force (``exact_knn``).

Everything is computed in float64 from the original vectors.
"""

from __future__ import annotations

import numpy as np

from ._validation import as_ids, as_vectors, check_int

__all__ = ["recall_at_r", "k_recall_at_k", "mean_overall_ratio", "distortion", "exact_knn"]

# Rows of float64 gathered per block by mean_overall_ratio (queries × 2k × dim): about 32 MB.
_BLOCK_ELEMS = 1 << 22

# exact_knn keeps a (queries × (k + base block)) float64 distance block: about 32 MB at this many elements.
_KNN_BLOCK_ELEMS = 1 << 22
_KNN_BASE_BLOCK = 16384


def _as_id_matrix(ids, name):
    """Integer ids of shape (nq, k) (a 1-D array is one query), -1 meaning "no result"; returns int64 2-D."""
    return as_ids(ids, name, matrix=True, missing_ok=True)


def _check_same_queries(a, a_name, b, b_name):
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"{a_name} has {a.shape[0]} rows but {b_name} has {b.shape[0]}: one row per query each")


def recall_at_r(retrieved_ids, groundtruth_ids, r, *, groundtruth_distances=None):
    """Fraction of queries whose true nearest neighbour is among the first ``r`` retrieved ids.

    Parameters
    ----------
    retrieved_ids : array-like of shape (n_queries, k), integers
        Search results, best first; −1 means "no result" and never matches.
    groundtruth_ids : array-like of shape (n_queries, k_gt), integers, k_gt ≥ 1
        Exact neighbours, nearest first; only column 0 is used unless ``groundtruth_distances`` is given. Column 0
        must hold a real id (≥ 0).
    r : int
        1 ≤ r ≤ k.
    groundtruth_distances : array-like of shape (n_queries, k_gt), optional
        Distances matching ``groundtruth_ids``. When given, ties count: every ground-truth id whose distance equals
        that of column 0 is an equally true nearest neighbour, and a query counts as found when any of them is among
        the first ``r`` results. Ties are only seen within the k_gt columns given. Without distances, ties are not
        recognised (the ground truth's own tie-break, usually the smaller index, decides).

    Returns
    -------
    recall : float in [0, 1]
        Zero queries raise ValueError (the fraction is undefined).
    """
    ret = _as_id_matrix(retrieved_ids, "retrieved_ids")
    gt = _as_id_matrix(groundtruth_ids, "groundtruth_ids")
    _check_same_queries(ret, "retrieved_ids", gt, "groundtruth_ids")
    if ret.shape[0] == 0:
        raise ValueError("retrieved_ids has no rows: recall of zero queries is undefined")
    if gt.shape[1] < 1:
        raise ValueError("groundtruth_ids must have at least one column")
    if ret.shape[1] < 1:
        raise ValueError("retrieved_ids must have at least one column")
    r = check_int(r, "r", min_value=1, max_value=ret.shape[1])
    if int(gt[:, 0].min()) < 0:
        raise ValueError("groundtruth_ids[:, 0] must hold the nearest neighbour's id (>= 0), found a negative id")
    top = ret[:, :r]
    if groundtruth_distances is None:
        hits = (top == gt[:, :1]).any(axis=1)
        return float(hits.mean())
    dist = np.asarray(groundtruth_distances, dtype=np.float64)
    if dist.shape != gt.shape:
        raise ValueError(f"groundtruth_distances must have the shape of groundtruth_ids {gt.shape}, got {dist.shape}")
    tied = (dist == dist[:, :1]) & (gt >= 0)
    tied[:, 0] = True  # column 0 is the nearest neighbour whatever its distance says (even NaN)
    width = int(tied.sum(axis=1).max())  # ties are usually none: compare against as few columns as needed
    # Move the tied columns of each row to the front (stable), pad the rest with -2 (matches nothing, not even -1).
    order = np.argsort(~tied, axis=1, kind="stable")[:, :width]
    accepted = np.where(np.take_along_axis(tied, order, axis=1), np.take_along_axis(gt, order, axis=1), -2)
    hits = np.zeros(ret.shape[0], dtype=bool)
    step = max(1, _BLOCK_ELEMS // max(1, r * width))
    for i in range(0, ret.shape[0], step):
        hits[i : i + step] = (top[i : i + step, :, None] == accepted[i : i + step, None, :]).any(axis=(1, 2))
    return float(hits.mean())


def _gather_rows(base, ids):
    """float64 rows of ``base`` for ``ids`` (any shape), reading each needed row once (fine for a memmap)."""
    uniq, inverse = np.unique(ids, return_inverse=True)
    rows = np.asarray(base[uniq], dtype=np.float64)
    if not np.isfinite(rows).all():
        raise ValueError("base contains NaN or infinite values")
    return rows[inverse.reshape(ids.shape)]


def mean_overall_ratio(queries, base, retrieved_ids, groundtruth_ids, k):
    """Mean overall ratio of the first ``k`` results: 1.0 when they are the exact k nearest neighbours.

    For each query q, with r_1..r_k the first ``k`` retrieved points re-sorted by their true distance to q and
    r*_1..r*_k the exact neighbours (their distances sorted too), the query's ratio is the mean over i of
    ‖q − r_i‖ / ‖q − r*_i‖; the result is the mean over queries. Distances are Euclidean (not squared), computed in
    float64 from ``queries`` and ``base``, never taken from a search's output. With exact ground truth and distinct
    retrieved ids every term is ≥ 1.

    Zero exact distance: a term whose exact distance ‖q − r*_i‖ is 0 counts as 1 when ‖q − r_i‖ is 0 too, and is
    left out otherwise (the ratio would be infinite; a query that duplicates a base vector would dominate the mean).
    A query with no term left is left out of the mean; when no query has any term, ValueError.

    Parameters
    ----------
    queries : array-like of shape (n_queries, dim)
    base : array-like of shape (n_base, dim)
        May be a large memory-mapped array: only the rows named by the ids are read.
    retrieved_ids : array-like of shape (n_queries, ≥ k), integers
        Row indices into ``base``. The first ``k`` of each row must be valid (no −1) and distinct.
    groundtruth_ids : array-like of shape (n_queries, ≥ k), integers
        Exact nearest neighbours (row indices into ``base``), nearest first.
    k : int
        ≥ 1, at most the number of columns of both id arrays.

    Returns
    -------
    ratio : float ≥ 1 (for exact ground truth)
    """
    base, _ = as_vectors(base, "base", convert=False)
    queries, _ = as_vectors(queries, "queries", dim=base.shape[1], convert=False)
    ret = _as_id_matrix(retrieved_ids, "retrieved_ids")
    gt = _as_id_matrix(groundtruth_ids, "groundtruth_ids")
    _check_same_queries(ret, "retrieved_ids", queries, "queries")
    _check_same_queries(gt, "groundtruth_ids", queries, "queries")
    if queries.shape[0] == 0:
        raise ValueError("queries has no rows: the mean overall ratio of zero queries is undefined")
    k = check_int(k, "k", min_value=1, max_value=min(ret.shape[1], gt.shape[1]))
    ret, gt = ret[:, :k], gt[:, :k]
    nb = base.shape[0]
    for arr, name in ((ret, "retrieved_ids"), (gt, "groundtruth_ids")):
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0:
            raise ValueError(f"{name} holds {lo} among its first k={k} columns: a missing result (-1) has no distance")
        if hi >= nb:
            raise ValueError(f"{name} holds id {hi}, but base has only {nb} rows")
    srt = np.sort(ret, axis=1)
    if k > 1 and (srt[:, 1:] == srt[:, :-1]).any():
        row = int(np.flatnonzero((srt[:, 1:] == srt[:, :-1]).any(axis=1))[0])
        raise ValueError(f"retrieved_ids repeats an id among the first k={k} columns (query {row})")

    total = 0.0
    counted = 0
    step = max(1, _BLOCK_ELEMS // (2 * k * base.shape[1]))
    for i in range(0, queries.shape[0], step):
        q = np.asarray(queries[i : i + step], dtype=np.float64)
        if not np.isfinite(q).all():
            raise ValueError("queries contains NaN or infinite values")
        ids = np.concatenate([ret[i : i + step], gt[i : i + step]], axis=1)
        rows = _gather_rows(base, ids)  # (b, 2k, dim)
        dist = np.sqrt(np.einsum("bjd,bjd->bj", rows - q[:, None, :], rows - q[:, None, :]))
        got = np.sort(dist[:, :k], axis=1)
        exact = np.sort(dist[:, k:], axis=1)
        zero = exact == 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(zero, 1.0, got / np.where(zero, 1.0, exact))
        keep = ~zero | (got == 0.0)
        n_terms = keep.sum(axis=1)
        has = n_terms > 0
        total += float((np.where(keep, ratio, 0.0).sum(axis=1)[has] / n_terms[has]).sum())
        counted += int(has.sum())
    if counted == 0:
        raise ValueError(
            "mean overall ratio undefined: for every query all exact distances are 0 and the retrieved ones are not"
        )
    return total / counted


def distortion(X, X_reconstructed):
    """Mean squared L2 reconstruction error per vector, in float64: mean over rows of ‖x − x̂‖².

    Parameters
    ----------
    X, X_reconstructed : array-like of shape (n, dim), or (dim,) for one vector
        Same shape, n ≥ 1, any real numeric dtypes, finite values.

    Returns
    -------
    float
    """
    X, _ = as_vectors(X, "X", convert=False)
    Y, _ = as_vectors(X_reconstructed, "X_reconstructed", convert=False)
    if X.shape != Y.shape:
        raise ValueError(f"X_reconstructed has shape {Y.shape}, expected the shape of X {X.shape}")
    n = X.shape[0]
    if n == 0:
        raise ValueError("X has no rows: the distortion of zero vectors is undefined")
    step = max(1, _BLOCK_ELEMS // X.shape[1])
    total = 0.0
    for i in range(0, n, step):
        a = np.asarray(X[i : i + step], dtype=np.float64)
        b = np.asarray(Y[i : i + step], dtype=np.float64)
        if not np.isfinite(a).all():
            raise ValueError("X contains NaN or infinite values")
        if not np.isfinite(b).all():
            raise ValueError("X_reconstructed contains NaN or infinite values")
        diff = a - b
        total += float(np.einsum("ij,ij->", diff, diff))
    return total / n


# --------------------------------------------------------------------------------------------------------------------
# exact nearest neighbours


def _topk_positions(dist, k):
    """Column positions of the ``k`` smallest entries of each row, by (distance, column); ``k`` ≤ columns.

    The caller orders columns so that a smaller column means a smaller id among equal distances.
    """
    b, m = dist.shape
    if k >= m:
        return np.argsort(dist, axis=1, kind="stable")
    kth = np.partition(dist, k - 1, axis=1)[:, k - 1]
    mask = dist <= kth[:, None]
    counts = mask.sum(axis=1)
    out = np.empty((b, k), dtype=np.intp)
    regular = np.flatnonzero(counts == k)
    if regular.size:  # the usual case: exactly k candidates, no tie at the k-th place
        cols = np.nonzero(mask[regular])[1].reshape(regular.size, k)
        order = np.argsort(np.take_along_axis(dist[regular], cols, axis=1), axis=1, kind="stable")
        out[regular] = np.take_along_axis(cols, order, axis=1)
    for r in np.flatnonzero(counts != k):  # ties at the k-th distance: keep the smallest columns
        cols = np.flatnonzero(mask[r])
        out[r] = cols[np.argsort(dist[r, cols], kind="stable")[:k]]
    return out


def _float64_block(arr, name):
    out = np.asarray(arr, dtype=np.float64)
    if not np.isfinite(out).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return out


def k_recall_at_k(retrieved_ids, groundtruth_ids, k):
    """k-recall@k (10-recall@10 for k = 10): the mean over queries of |first k retrieved ∩ true k nearest| / k.

    Parameters
    ----------
    retrieved_ids : array-like of shape (n_queries, >= k), integers
        Search results, best first; −1 means "no result" and never matches; an id returned twice counts once.
    groundtruth_ids : array-like of shape (n_queries, >= k), integers
        Exact neighbours, nearest first; the first k are the true k nearest (ties as the ground truth broke them).
    k : int >= 1

    Returns
    -------
    recall : float in [0, 1]. Zero queries raise ValueError.
    """
    ret = _as_id_matrix(retrieved_ids, "retrieved_ids")
    gt = _as_id_matrix(groundtruth_ids, "groundtruth_ids")
    _check_same_queries(ret, "retrieved_ids", gt, "groundtruth_ids")
    if ret.shape[0] == 0:
        raise ValueError("retrieved_ids has no rows: recall of zero queries is undefined")
    k = check_int(k, "k", min_value=1)
    if ret.shape[1] < k or gt.shape[1] < k:
        raise ValueError(f"k = {k} needs at least k columns in retrieved_ids and groundtruth_ids")
    found = 0
    step = max(1, _BLOCK_ELEMS // (k * k))
    for i in range(0, ret.shape[0], step):
        top, true = ret[i:i + step, :k], gt[i:i + step, :k]
        # a retrieved id counts when it is a true neighbour and its first occurrence in its row (duplicates once)
        first = np.ones(top.shape, dtype=bool)
        order = np.argsort(top, axis=1, kind="stable")
        ordered = np.take_along_axis(top, order, axis=1)
        repeat = np.zeros(top.shape, dtype=bool)
        repeat[:, 1:] = ordered[:, 1:] == ordered[:, :-1]
        np.put_along_axis(first, order, ~repeat, axis=1)
        match = (top[:, :, None] == true[:, None, :]).any(axis=2) & first & (top >= 0)
        found += int(match.sum())
    return found / (ret.shape[0] * k)


def exact_knn(queries, base, k):
    """Exact k nearest neighbours by brute force, in float64, with ties broken by the smaller base index.

    Queries come first, as in Faiss's ``knn(xq, xb, k)``.

    Parameters
    ----------
    queries : array-like of shape (n_queries, dim), or (dim,) for one query
    base : array-like of shape (n_base, dim)
        Any real numeric dtype; may be a large memory-mapped array (read block by block).
    k : int
        ≥ 1. When ``k > n_base`` the missing neighbours are padded with distance ``inf`` and id −1.

    Returns
    -------
    distances : ndarray of shape (n_queries, k), dtype float64
        Squared L2 distances, nondecreasing along each row.
    ids : ndarray of shape (n_queries, k), dtype int64
        Base row indices, nearest first. A 1-D query gives two arrays of shape (k,).

    Notes
    -----
    Distances are ‖q‖² − 2 q·b + ‖b‖² with one float64 matrix product per block (clipped at 0). For integer data
    whose squared norms stay below 2**53 (uint8 SIFT, small integers) every term is exact, so the result is exactly
    the integer ground truth; for float data the rounding is ~1e-16 relative, so only near-ties that close can be
    ordered differently from a direct Σ(q−b)². Memory is bounded by blocks of about ``_KNN_BLOCK_ELEMS`` float64
    distances, whatever the sizes.
    """
    base, _ = as_vectors(base, "base", convert=False)
    queries, was_1d = as_vectors(queries, "queries", dim=base.shape[1], convert=False)
    k = check_int(k, "k", min_value=1)
    nq, nb = queries.shape[0], base.shape[0]
    D = np.full((nq, k), np.inf)
    I = np.full((nq, k), -1, dtype=np.int64)
    bb = max(1, min(nb, _KNN_BASE_BLOCK))
    bq = max(1, _KNN_BLOCK_ELEMS // (bb + k))
    kk = min(k, nb)
    for q0 in range(0, nq, bq):
        q = _float64_block(queries[q0 : q0 + bq], "queries")
        qn = np.einsum("ij,ij->i", q, q)
        best_d = np.empty((len(q), 0))
        best_i = np.empty((len(q), 0), dtype=np.int64)
        for b0 in range(0, nb, bb):
            b = _float64_block(base[b0 : b0 + bb], "base")
            dist = qn[:, None] - 2.0 * (q @ b.T) + np.einsum("ij,ij->i", b, b)[None, :]
            np.maximum(dist, 0.0, out=dist)
            # best columns first (sorted by (distance, id), all ids smaller than this block's), then the block in id
            # order: column order is id order among equal distances.
            cand_d = np.concatenate([best_d, dist], axis=1)
            cand_i = np.concatenate([best_i, np.broadcast_to(np.arange(b0, b0 + len(b)), dist.shape)], axis=1)
            pos = _topk_positions(cand_d, min(kk, cand_d.shape[1]))
            best_d = np.take_along_axis(cand_d, pos, axis=1)
            best_i = np.take_along_axis(cand_i, pos, axis=1)
        D[q0 : q0 + len(q), : best_d.shape[1]] = best_d
        I[q0 : q0 + len(q), : best_i.shape[1]] = best_i
    if was_1d:
        return D[0], I[0]
    return D, I
