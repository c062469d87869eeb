"""The options of a search, checked once: ``search_options`` returns them resolved, as a ``SearchOptions``, for every
searcher (Index, IVFIndex, a collection, a distributed search of a collection; docs/ARCHITECTURE.md, "Search").

* ``k``, ``distance``, ``n_probe`` (the model says which values it takes), ``n_threads``.
* ``rerank=R``: the scan keeps R candidates per query, re-ranked exactly by ``_rerank.rerank`` from the stored vectors
  or from the caller's ``vectors`` (of one row per indexed vector, or by id on a collection). ``rerank=None`` (the
  default) is the one rule of every searcher: DEFAULT_RERANK_FACTOR * k candidates when there are vectors to re-rank
  from (stored, or given), none otherwise; ``rerank=0``: no re-ranking (docs/ARCHITECTURE.md, "Search").
* ``allow``: ids (any order; duplicates and unknown ids ignored) or, on an index, a boolean mask over rows; an index
  turns it into a bitmap over rows (``allow_bitmap``, ``search.rows_bitmap``) that the scan tests before any table
  lookup.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._validation import MAX_K, check_choice, check_int, check_k, resolve_n_threads

__all__ = ["SearchOptions", "search_options", "check_metric", "check_rerank", "default_rerank", "DEFAULT_RERANK_FACTOR",
           "check_user_vectors", "check_id_vectors", "allow_ids", "index_allow", "collection_allow", "allow_bitmap", "IdLookup", "unknown_ids_error"]

# The re-ranking every search does by default when the searcher has vectors to re-rank from (``rerank=None``): the
# best DEFAULT_RERANK_FACTOR * k candidates by code are re-ranked exactly. Measured on minilm-real (OCKM(16, 2, 10),
# cosine, 256 bits, float16 stored vectors; tools/bench_app_collection.py, docs/results.md "Collections that train
# themselves"): 10-recall@10 0.989 with 10 k candidates and a model trained on 10,240 rows, 0.962 with 5 k, 0.649 with
# none (sift-real, OCKM(8, 2, 10), 100K base: 0.984 with 5 k, 0.998 with 10 k). 10 k keeps 0.96 even for a model
# trained on 1,024 rows. ockstore.tune finds the fastest setting for a target recall on the caller's own queries.
DEFAULT_RERANK_FACTOR = 10



@dataclass(frozen=True)
class SearchOptions:
    """The checked options of one search.

    k : int >= 1
    distance : "adc" or "sdc"
    rerank : int or None
        The candidates the scan keeps for exact re-ranking (k <= R <= max(k, N)), or None: no re-ranking (the
        caller's rerank=0, or rerank=None without vectors to re-rank from).
    vectors : array-like or None
        The caller's vectors for re-ranking (shape and dtype checked, not read), or None: the stored ones.
    allow : ndarray or None
        The filter: int64 ids (on an index in the given order, duplicates kept; on a collection sorted and unique),
        or a boolean mask over the rows of an index; None: every row.
    n_probe : int or None
        The lists probed by an inverted file (its default when the caller gave none); None for a flat model.
    n_threads : int or None
        Threads (>= 1), or None: every core.
    by_bound : bool
        The results are candidates that will be re-ranked (``rerank``, or a caller that re-ranks them itself: a
        collection's segments, distributed workers, ``tune``): a fast scan (K <= 16) then ranks them by its quantized
        bounds alone, with no exact ADC stage (docs/ARCHITECTURE.md, "Fast scan"). Byte-code scans ignore it.
    """

    k: int
    distance: str
    rerank: int | None
    vectors: object | None
    allow: np.ndarray | None
    n_probe: int | None
    n_threads: int | None
    by_bound: bool = False

    @property
    def width(self) -> int:
        """The candidates a scan keeps per query: rerank, or k without re-ranking."""
        return self.k if self.rerank is None else self.rerank


def search_options(model, n_rows, k, *, n_probe=None, distance="adc", rerank=None, vectors=None, allow=None,
                   n_threads=None, stored_vectors=False, by_id=False, metric=None):
    """The checked, resolved options of a search over ``n_rows`` rows encoded with ``model``, in this order: k,
    distance, rerank, vectors (and whether re-ranking has vectors: ``stored_vectors`` says whether the searched thing
    stores them), n_probe (``model._check_n_probe``), n_threads, allow. TypeError or ValueError naming the argument.

    ``by_id``: the searched thing is a collection: ``vectors`` is indexed by id (row i holds the vector of id i) and
    ``allow`` must be ids (rows have no meaning across segments). Otherwise an index: ``vectors`` has one row per row
    of the index, and ``allow`` may be a boolean mask over them.
    """
    what = "collection" if by_id else "index"
    check_metric(metric, model.metric, what)
    k = check_k(k, n_rows)
    distance = check_choice(distance, "distance", ("adc", "sdc"))
    if vectors is not None:
        vectors = check_id_vectors(vectors, model.dim) if by_id else check_user_vectors(vectors, n_rows, model.dim)
    rerank = check_rerank(rerank, k, n_rows, can_rerank=vectors is not None or stored_vectors)
    if rerank is not None and vectors is None and not stored_vectors:
        how = ("create the collection with store_vectors=... or pass vectors= (indexed by id)" if by_id else
               "build the index with store_vectors=... or pass vectors=")
        raise ValueError(f"rerank needs the original vectors: {how}")
    n_probe = model._check_n_probe(n_probe, what, n_rows)
    n_threads = None if n_threads is None else resolve_n_threads(n_threads)
    if allow is not None:
        allow = collection_allow(allow) if by_id else index_allow(allow, n_rows)
    return SearchOptions(k, distance, rerank, vectors, allow, n_probe, n_threads, by_bound=rerank is not None)


def check_metric(metric, model_metric, what="index"):
    """``metric`` given to a search: None, or the metric the model already has (accepted, changes nothing). The metric
    is fixed when the quantizer is fitted (its codebooks, and for cosine the normalised vectors, are trained for it):
    any other value is a ValueError saying so and how to get an index of that metric."""
    if metric is None or (isinstance(metric, str) and metric == model_metric):
        return
    raise ValueError(f"metric: this {what} ranks by {model_metric!r}, fixed when its quantizer was fitted; a search "
                     f"cannot change it. To rank by {metric!r}, fit a quantizer with metric={metric!r} and build a new "
                     f"{what} with it (leave metric out of search)")


def default_rerank(k, n_rows):
    """The candidates a search re-ranks when it gives no ``rerank`` and has vectors to re-rank from:
    DEFAULT_RERANK_FACTOR * k (at most the rows there are, at least k)."""
    return max(k, min(DEFAULT_RERANK_FACTOR * k, MAX_K, n_rows))


def check_rerank(rerank, k, n_rows, can_rerank=False):
    """None (no re-ranking), or the number of candidates the scan keeps for ``rerank=R`` (an int, 0 or k <= R <=
    MAX_K): R, or max(k, N) when R exceeds both (N rows give at most N candidates: a larger R would only allocate
    padding). ``rerank=0``: None. ``rerank=None``: the default, ``default_rerank(k, N)``, when ``can_rerank`` (the
    searcher has vectors to re-rank from: stored, or given), else None. The one rule of every searcher."""
    if rerank is None:
        if not can_rerank:
            return None
        return default_rerank(k, n_rows)
    rerank = check_int(rerank, "rerank", min_value=0, max_value=MAX_K)
    if rerank == 0:
        return None
    if rerank < k:
        raise ValueError(f"rerank = {rerank} must be >= k = {k}: the scan keeps rerank candidates, of which the best "
                         "k are returned")
    return min(rerank, max(k, n_rows))


def _real_array_like(vectors):
    """``vectors`` as given when it has a shape and can be indexed (an ndarray, np.memmap, h5py dataset), else as an
    ndarray; TypeError unless its dtype is a real numeric one. Not read."""
    if not hasattr(vectors, "shape") or not hasattr(vectors, "__getitem__"):
        vectors = np.asarray(vectors)
    dtype = np.dtype(getattr(vectors, "dtype", np.float64))
    if dtype.kind not in "iuf":
        raise TypeError(f"vectors must hold real numbers, got dtype {dtype}")
    return vectors


def check_user_vectors(vectors, n_rows, dim):
    """``vectors`` given to an index's search: an array-like of shape (N, P) and a real numeric dtype, indexable by an
    increasing array of row numbers (an ndarray, np.memmap, h5py dataset). Not read here."""
    if not hasattr(vectors, "shape") or not hasattr(vectors, "__getitem__"):
        vectors = np.asarray(vectors)
    shape = tuple(vectors.shape)
    if shape != (n_rows, dim):
        raise ValueError(f"vectors must have shape ({n_rows}, {dim}) (one row per indexed vector, in index order), "
                         f"got {shape}")
    return _real_array_like(vectors)


def check_id_vectors(vectors, dim):
    """``vectors`` given to a collection's search: an array-like of shape (n, P) whose row i is the vector of id i (an
    ndarray, np.memmap, HDF5 dataset...). Only the candidates' rows are read, by increasing id."""
    if not hasattr(vectors, "shape") or not hasattr(vectors, "__getitem__"):
        vectors = np.asarray(vectors)
    shape = tuple(vectors.shape)
    if len(shape) != 2 or shape[1] != dim:
        raise ValueError(f"vectors must have shape (n, {dim}), row i holding the vector of id i, got {shape}")
    return _real_array_like(vectors)


def allow_ids(arr, expected="an array of integer ids"):
    """The ids of an ``allow`` given as ids (``arr`` an ndarray, not boolean), as int64 in the given order: an empty
    list counts as ids, values beyond int64 are dropped (no id can match them). TypeError or ValueError naming
    ``allow`` (``expected`` says what it may be) otherwise."""
    if arr.size == 0 and arr.dtype.kind == "f" and arr.ndim == 1:
        arr = arr.astype(np.int64)  # an empty list has no integer dtype of its own
    if arr.dtype.kind not in "iu":
        raise TypeError(f"allow must be {expected}, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"allow: ids must be a 1-D array, got shape {arr.shape}")
    if arr.dtype == np.uint64:
        arr = arr[arr <= np.iinfo(np.int64).max]  # larger values are no id: ignored
    return np.asarray(arr, dtype=np.int64)


def index_allow(allow, n_rows):
    """``allow`` of an index's search: a boolean mask of shape (N,) (returned as is), or ids (int64, as given)."""
    arr = allow if isinstance(allow, np.ndarray) else np.asarray(allow)
    if arr.dtype == np.bool_:
        if arr.shape != (n_rows,):
            raise ValueError(f"allow: a boolean mask must have shape ({n_rows},) (one flag per row), got {arr.shape}")
        return arr
    return allow_ids(arr, "an array of integer ids or a boolean mask over rows")


def collection_allow(allow):
    """``allow`` of a collection's search: ids (any order; duplicates, negative and unknown ids ignored), sorted
    unique int64. A boolean row mask is refused: rows have no meaning across segments."""
    arr = allow if isinstance(allow, np.ndarray) else np.asarray(allow)
    if arr.dtype == np.bool_:
        raise TypeError("allow must be an array of ids on a collection: a boolean mask over rows has no meaning "
                        "across segments")
    return np.unique(allow_ids(arr))


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
    and how many there are; ``where`` says what was searched ("the index", "the collection ...")."""
    missing = ids[~found]
    shown = ", ".join(str(int(i)) for i in missing[:5]) + (", ..." if missing.size > 5 else "")
    return ValueError(f"ids: {missing.size} of {ids.size} ids are not in {where}: {shown}")


def allow_bitmap(allow, n_rows, ids, id_lookup):
    """The boolean mask over rows of a checked ``allow`` (SearchOptions.allow of an index: a mask, or int64 ids).
    ``ids`` is the index's ids (None: the row numbers); ``id_lookup`` a callable returning its IdLookup (built on
    first use)."""
    if allow.dtype == np.bool_:
        return allow
    mask = np.zeros(n_rows, dtype=bool)
    if ids is None:
        mask[allow[(allow >= 0) & (allow < n_rows)]] = True
    else:
        mask[id_lookup().rows_of(allow)] = True
    return mask
