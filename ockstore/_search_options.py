"""The options of a search beyond the scan itself: filters (``allow``) and exact re-ranking (``rerank``), checked and
applied here so that the Index only strings them together (docs/ARCHITECTURE.md, "Search").

* ``allow`` becomes a bitmap over rows (``search.rows_bitmap``), which the scan tests before any table lookup.
* ``rerank=R`` makes the scan keep R candidates per query (by row); their exact distances or scores are computed
  here, in float32, from the stored vectors or from the caller's ``vectors``, and the best k are kept.
"""

from __future__ import annotations

import numpy as np

from ._validation import MAX_ABS_VALUE, MAX_K, check_int, rows_beyond_limits

__all__ = ["check_metric", "check_rerank", "default_rerank", "DEFAULT_RERANK_FACTOR", "check_user_vectors", "check_vector_rows", "allow_bitmap", "allow_ids", "IdLookup",
           "gather_vectors", "rerank_exact", "unknown_ids_error"]

# Bytes of the float32 temporaries of one step of re-ranking (the gathered candidates, and as much again for the
# repeated queries and their differences): a step of queries x R x P floats is bounded by this, so that it stays in L2
# (measured on sift 1M, R = 100, P = 128, 1,000 queries: 16 us per query with steps of 20-60 queries, 27 with 256).
RERANK_STEP_BYTES = 2 << 20


def check_metric(metric, model_metric, what="index"):
    """``metric`` given to a search: None, or the metric the model already has (accepted, changes nothing). The metric
    is fixed when the quantizer is fitted (its codebooks, and for cosine the normalised vectors, are trained for it):
    any other value is a ValueError saying so and how to get an index of that metric."""
    if metric is None or (isinstance(metric, str) and metric == model_metric):
        return
    raise ValueError(f"metric: this {what} ranks by {model_metric!r}, fixed when its quantizer was fitted; a search "
                     f"cannot change it. To rank by {metric!r}, fit a quantizer with metric={metric!r} and build a new "
                     f"{what} with it (leave metric out of search)")


# The re-ranking a collection's search does by default when it stores vectors (``rerank=None``): the best
# DEFAULT_RERANK_FACTOR * k candidates by code are re-ranked exactly. Measured on minilm-real (tools/
# bench_app_collection.py; docs/results.md, "Collections that train themselves"), see default_rerank.
DEFAULT_RERANK_FACTOR = 10


def default_rerank(k, n_rows):
    """The candidates a collection that stores vectors re-ranks when a search gives no ``rerank``:
    DEFAULT_RERANK_FACTOR * k (at most the rows there are, at least k)."""
    return max(k, min(DEFAULT_RERANK_FACTOR * k, MAX_K, n_rows))


def check_rerank(rerank, k, n_rows):
    """None (no re-ranking: ``rerank`` None or 0), or the number of candidates the scan keeps for ``rerank=R`` (an
    int, k <= R <= MAX_K): R, or max(k, N) when R exceeds both (N rows give at most N candidates: a larger R would
    only allocate padding)."""
    if rerank is None:
        return None
    rerank = check_int(rerank, "rerank", min_value=0, max_value=MAX_K)
    if rerank == 0:
        return None
    if rerank < k:
        raise ValueError(f"rerank = {rerank} must be >= k = {k}: the scan keeps rerank candidates, of which the best "
                         "k are returned")
    return min(rerank, max(k, n_rows))


def check_user_vectors(vectors, n_rows, dim):
    """``vectors`` given to search: an array-like of shape (N, P) and a real numeric dtype, indexable by an
    increasing array of row numbers (an ndarray, np.memmap, h5py dataset). Not read here."""
    if not hasattr(vectors, "shape") or not hasattr(vectors, "__getitem__"):
        vectors = np.asarray(vectors)
    shape = tuple(vectors.shape)
    if shape != (n_rows, dim):
        raise ValueError(f"vectors must have shape ({n_rows}, {dim}) (one row per indexed vector, in index order), "
                         f"got {shape}")
    dtype = np.dtype(getattr(vectors, "dtype", np.float64))
    if dtype.kind not in "iuf":
        raise TypeError(f"vectors must hold real numbers, got dtype {dtype}")
    return vectors


class IdLookup:
    """Rows of ids: a sorted copy of an index's ids, made once (O(N log N)) and reused by every filtered search."""

    def __init__(self, ids):
        self.order = np.argsort(ids, kind="stable")
        self.sorted_ids = ids[self.order]

    def rows_of(self, wanted):
        """Every row whose id is in ``wanted`` (int64, any order; duplicates and unknown ids ignored)."""
        left = np.searchsorted(self.sorted_ids, wanted, side="left")
        right = np.searchsorted(self.sorted_ids, wanted, side="right")
        counts = right - left
        total = int(counts.sum())
        if total == 0:
            return np.empty(0, dtype=np.intp)
        # positions left[j], left[j] + 1, ..., right[j] - 1 for every j, concatenated
        starts = np.repeat(left - (np.cumsum(counts) - counts), counts)
        return self.order[starts + np.arange(total)]

    def first_rows(self, wanted):
        """(found, rows): ``found`` a bool mask over ``wanted`` (int64, any order, repeats allowed), ``rows`` the
        smallest row holding each found id (the sort is stable), -1 for the others."""
        n = self.sorted_ids.shape[0]
        rows = np.full(wanted.shape, -1, dtype=np.int64)
        if n == 0:
            return np.zeros(wanted.shape, dtype=bool), rows
        pos = np.minimum(np.searchsorted(self.sorted_ids, wanted, side="left"), n - 1)
        found = self.sorted_ids[pos] == wanted
        rows[found] = self.order[pos[found]]
        return found, rows


def unknown_ids_error(ids, found, where):
    """The ValueError of a look-up by id that found not every id: names the first unknown ids (in the order given)
    and how many there are; ``where`` says what was searched ("the index", "the collection's live vectors")."""
    missing = ids[~found]
    shown = ", ".join(str(int(i)) for i in missing[:5]) + (", ..." if missing.size > 5 else "")
    return ValueError(f"ids: {missing.size} of {ids.size} ids are not in {where}: {shown}")


def allow_ids(arr, expected="an array of integer ids"):
    """The ids of an ``allow`` given as ids (``arr`` an ndarray, not boolean), as int64 in the given order: an empty
    list counts as ids, values beyond int64 are dropped (no id can match them). TypeError or ValueError naming
    ``allow`` (``expected`` says what it may be) otherwise. Shared by indexes and collections."""
    if arr.size == 0 and arr.dtype.kind == "f" and arr.ndim == 1:
        arr = arr.astype(np.int64)  # an empty list has no integer dtype of its own
    if arr.dtype.kind not in "iu":
        raise TypeError(f"allow must be {expected}, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"allow: ids must be a 1-D array, got shape {arr.shape}")
    if arr.dtype == np.uint64:
        arr = arr[arr <= np.iinfo(np.int64).max]  # larger values are no id: ignored
    return np.asarray(arr, dtype=np.int64)


def allow_bitmap(allow, n_rows, ids, id_lookup):
    """The boolean mask over rows that ``allow`` gives: an array-like of ids (integers; any order, duplicates and
    unknown ids ignored) or a boolean array of shape (N,). ``ids`` is the index's ids (None: the row numbers);
    ``id_lookup`` a callable returning its IdLookup (built on first use)."""
    arr = allow if isinstance(allow, np.ndarray) else np.asarray(allow)
    if arr.dtype == np.bool_:
        if arr.shape != (n_rows,):
            raise ValueError(f"allow: a boolean mask must have shape ({n_rows},) (one flag per row), got {arr.shape}")
        return arr
    wanted = allow_ids(arr, "an array of integer ids or a boolean mask over rows")
    mask = np.zeros(n_rows, dtype=bool)
    if ids is None:
        mask[wanted[(wanted >= 0) & (wanted < n_rows)]] = True
    else:
        mask[id_lookup().rows_of(wanted)] = True
    return mask


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


def gather_vectors(vectors, rows, source=None):
    """float32 copies of vectors[rows] (rows: the candidates' rows, in any order, a row possibly repeated across
    queries), checked by check_vector_rows. An ndarray (the stored section, a memory map) is indexed directly; any
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


def rerank_exact(Q, rows, vectors, metric, ids, k, source=None):
    """The best k of each query's candidates by their exact distance or score.

    Parameters
    ----------
    Q : (nq, P) float32 queries (unit rows for cosine)
    rows : (nq, R) int64 candidate rows from the scan, -1 for none (after the real ones)
    vectors : (N, P) array-like, indexable by increasing row numbers
    metric : "l2", "ip" or "cosine"
    ids : (N,) int64 or None (row numbers): the ids returned, which break ties
    k : int <= R
    source : None when ``vectors`` is the caller's argument, else (stored vectors) as for ``check_vector_rows``

    Returns (values (nq, k) float32, ids (nq, k) int64): squared L2 distances ascending, or scores descending
    (inner product; cosine similarity q . x / ||x||), each computed in float32 from the float32 vectors by one
    NumPy reduction per candidate (its value does not depend on the other candidates); padding (+inf or -inf, -1).
    """
    nq, R = rows.shape
    pad = np.inf if metric == "l2" else -np.inf
    D = np.full((nq, k), pad, dtype=np.float32)
    I = np.full((nq, k), -1, dtype=np.int64)
    step = max(1, RERANK_STEP_BYTES // (4 * R * Q.shape[1]))
    for start in range(0, nq, step):
        stop = min(nq, start + step)
        cand = rows[start:stop]
        valid = cand >= 0
        every = bool(valid.all())  # the common case: R real candidates per query
        flat = cand.reshape(-1) if every else cand[valid]
        if flat.size == 0:
            continue
        V = gather_vectors(vectors, flat, source)
        Qv = np.repeat(Q[start:stop], R, axis=0) if every else Q[start:stop][np.nonzero(valid)[0]]
        if metric == "l2":
            diff = Qv - V
            exact = np.einsum("ij,ij->i", diff, diff)
        else:
            exact = np.einsum("ij,ij->i", Qv, V)
            if metric == "cosine":
                lengths = np.sqrt(np.einsum("ij,ij->i", V, V))
                if (lengths == 0).any():
                    bad = int(flat[lengths == 0].min())
                    raise ValueError(f"vectors row {bad} is a zero vector: its cosine similarity is undefined")
                exact = exact / lengths
        key = exact if metric == "l2" else -exact  # the sort key: ascending
        found_ids = flat if ids is None else ids[flat]
        if every:
            values, cand_ids = key.reshape(cand.shape), found_ids.reshape(cand.shape)
            tie_ids = cand_ids
        else:
            values = np.full(cand.shape, np.inf, dtype=np.float32)  # padding sorts last
            values[valid] = key
            cand_ids = np.full(cand.shape, -1, dtype=np.int64)
            cand_ids[valid] = found_ids
            tie_ids = np.where(valid, cand_ids, np.iinfo(np.int64).max)
        order = np.lexsort((tie_ids, values), axis=-1)[:, :k]
        best = np.take_along_axis(values, order, axis=1)
        best_ids = np.take_along_axis(cand_ids, order, axis=1)
        kk = order.shape[1]
        if every:
            D[start:stop, :kk] = best if metric == "l2" else -best
        else:
            D[start:stop, :kk] = np.where(best_ids >= 0, best if metric == "l2" else -best, pad)
        I[start:stop, :kk] = best_ids
    return D, I
