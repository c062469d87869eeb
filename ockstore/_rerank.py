"""Exact re-ranking of candidates from any base, as Faiss's IndexRefine wraps any index: a scan keeps R candidates per
query by their codes, ``rerank`` fetches the candidates' vectors and keeps the best k by their exact distances or
scores (docs/ARCHITECTURE.md, "Search"). One function for every searcher: an index (candidates are its rows, vectors
its stored section or the caller's array), a collection (candidates are ids, vectors from the segments holding them or
the caller's array by id), a distributed search (vectors fetched from the workers).

``exact_topk`` is the compute-and-select step over candidates whose vectors are at hand: the seam a compiled loop
replaces (its docstring says what such a loop must reproduce).
"""

from __future__ import annotations

import numpy as np

from ._validation import MAX_ABS_VALUE, rows_beyond_limits

__all__ = ["RERANK_STEP_BYTES", "rerank", "exact_topk", "gather_rows", "check_vector_rows"]

# Bytes of the float32 temporaries of one step of re-ranking (the gathered candidates, and as much again for the
# repeated queries and their differences): a step of queries x R x P floats is bounded by this, so that it stays in L2
# (measured on sift 1M, R = 100, P = 128, 1,000 queries: 16 us per query with steps of 20-60 queries, 27 with 256).
RERANK_STEP_BYTES = 2 << 20


def rerank(Q, candidates, fetch, metric, k):
    """The best k of each query's candidates by their exact distance or score.

    Parameters
    ----------
    Q : ndarray of shape (nq, P), dtype float32
        The queries as the model sees them (unit rows for cosine).
    candidates : ndarray of shape (nq, R), dtype int64
        Keys of the candidates (rows of an index, ids of a collection), >= 0, then -1 for none.
    fetch : callable
        ``fetch(keys)`` for the real candidates of a step of queries (int64, query after query, a key possibly
        repeated across queries) returns (vectors (n, P) float32, ids (n,) int64), aligned with ``keys``: the
        candidates' vectors, checked as every vector input is (``check_vector_rows``), and the ids reported for them
        (which break ties). ``gather_rows`` serves an array of vectors indexed by the keys.
    metric : "l2", "ip" or "cosine"
    k : int <= R

    Returns (values (nq, k) float32, ids (nq, k) int64): squared L2 distances ascending, or scores descending (inner
    product; cosine similarity q . x / ||x||); padding (+inf or -inf, id -1). Queries are re-ranked RERANK_STEP_BYTES
    of candidates at a time; a query's results do not depend on the step, on the other queries or on the other
    candidates. ValueError for a zero candidate vector under cosine (its similarity is undefined).
    """
    nq, R = candidates.shape
    D = np.full((nq, k), np.inf if metric == "l2" else -np.inf, dtype=np.float32)
    I = np.full((nq, k), -1, dtype=np.int64)
    step = max(1, RERANK_STEP_BYTES // (4 * R * Q.shape[1]))
    for start in range(0, nq, step):
        stop = min(nq, start + step)
        cand = candidates[start:stop]
        valid = cand >= 0
        every = bool(valid.all())  # the common case: R real candidates per query
        keys = cand.reshape(-1) if every else cand[valid]
        if keys.size == 0:
            continue
        vectors, ids = fetch(keys)
        if metric == "cosine":
            zero = np.einsum("ij,ij->i", vectors, vectors) == 0
            if zero.any():
                raise ValueError(f"vectors row {int(keys[zero].min())} is a zero vector: its cosine similarity is "
                                 "undefined")
        D[start:stop], I[start:stop] = exact_topk(Q[start:stop], None if every else valid, vectors, ids, metric, k)
    return D, I


def exact_topk(Q, valid, V, ids, metric, k):
    """The best k of each query's candidates by exact value (no input validation).

    Q : (nq, P) float32; valid : (nq, R) bool, which of each query's R candidate slots hold a candidate (the real ones
    first), or None when all do; V : (n, P) float32, finite, the candidates' vectors query after query (n = R * nq, or
    the number of True in ``valid``); ids : (n,) int64, their ids; metric : "l2", "ip", "cosine"; k <= R. Returns
    (values (nq, k) float32, ids (nq, k) int64), as ``rerank``.

    What a compiled loop replacing this must reproduce: for each query and each real candidate, the value in float32
    from the float32 vectors -- "l2" sum_j (q_j - x_j)^2, "ip" sum_j q_j x_j, "cosine" (sum_j q_j x_j) / sqrt(sum_j
    x_j^2) (here one NumPy reduction per candidate, so a value depends on that candidate only); the k best by (value,
    id): ascending distances for "l2", descending scores otherwise, equal values by the smaller id; padding (+inf
    for "l2", -inf otherwise, id -1) after the last real candidate. It may gather the rows itself from the stored
    section of an index (any stored dtype: uint8 and float16 widen to float32 exactly), fetched row by row with
    prefetching, instead of taking a gathered block.
    """
    nq = Q.shape[0]
    R = V.shape[0] // max(nq, 1) if valid is None else valid.shape[1]
    shape = (nq, R)
    pad = np.inf if metric == "l2" else -np.inf
    D = np.full((nq, k), pad, dtype=np.float32)
    I = np.full((nq, k), -1, dtype=np.int64)
    Qv = np.repeat(Q, R, axis=0) if valid is None else Q[np.nonzero(valid)[0]]
    if metric == "l2":
        diff = Qv - V
        exact = np.einsum("ij,ij->i", diff, diff)
    else:
        exact = np.einsum("ij,ij->i", Qv, V)
        if metric == "cosine":
            exact = exact / np.sqrt(np.einsum("ij,ij->i", V, V))
    key = exact if metric == "l2" else -exact  # the sort key: ascending
    if valid is None:
        values, cand_ids = key.reshape(shape), ids.reshape(shape)
        tie_ids = cand_ids
    else:
        values = np.full(shape, np.inf, dtype=np.float32)  # padding sorts last
        values[valid] = key
        cand_ids = np.full(shape, -1, dtype=np.int64)
        cand_ids[valid] = ids
        tie_ids = np.where(valid, cand_ids, np.iinfo(np.int64).max)
    order = np.lexsort((tie_ids, values), axis=-1)[:, :k]
    best = np.take_along_axis(values, order, axis=1)
    best_ids = np.take_along_axis(cand_ids, order, axis=1)
    kk = order.shape[1]
    if valid is None:
        D[:, :kk] = best if metric == "l2" else -best
    else:
        D[:, :kk] = np.where(best_ids >= 0, best if metric == "l2" else -best, pad)
    I[:, :kk] = best_ids
    return D, I


def gather_rows(vectors, rows, source=None):
    """float32 copies of ``vectors[rows]`` (rows in any order, a row possibly repeated), checked by
    ``check_vector_rows``: ``vectors`` is an index's stored section (``source`` makes the FormatError of damage) or
    the caller's array-like (``source`` None). An ndarray (a stored section, a memory map) is indexed directly; any
    other array-like (an HDF5 dataset) is read once per distinct row, in increasing order, as h5py requires. Either
    way a row's values are the same."""
    with np.errstate(over="ignore"):  # float64 values beyond float32 become inf: refused below
        if isinstance(vectors, np.ndarray):
            block = vectors[rows].astype(np.float32, copy=False)  # fancy indexing copies
        else:
            unique_rows, where = np.unique(rows, return_inverse=True)
            block = np.asarray(vectors[unique_rows], dtype=np.float32)[where]
    check_vector_rows(block, rows, source)
    return block


def check_vector_rows(block, rows, source=None):
    """Check the float32 candidates ``block`` (row j is row ``rows[j]`` of the vectors) as every vector input is
    checked (docs/ARCHITECTURE.md, "Conventions"): finite, within +-MAX_ABS_VALUE. ``source`` None: the caller's
    ``vectors`` (ValueError naming ``vectors`` and the smallest bad row); else the vectors are an index's stored
    section, and the values damage: ``source(check, detail)`` makes the FormatError naming its file (as verify)."""
    bad = rows_beyond_limits(block)
    if bad is None:
        return
    j = np.flatnonzero(bad)[np.argmin(rows[bad])]
    row, finite = int(rows[j]), bool(np.isfinite(block[j]).all())
    if source is None:
        if finite:
            raise ValueError(f"vectors row {row} holds values of magnitude up to {float(np.abs(block[j]).max()):.3g}; "
                             f"ockstore accepts at most {MAX_ABS_VALUE:.0e} (exact distances must fit in float32)")
        raise ValueError(f"vectors row {row} holds NaN or infinite values (or values too large for float32)")
    if finite:
        raise source("value out of range", f"section 'vectors': row {row} holds values of magnitude up to "
                                           f"{float(np.abs(block[j]).max()):.3g}, beyond {MAX_ABS_VALUE:.0e}")
    raise source("non-finite values", f"section 'vectors': row {row} holds NaN or infinite values")
