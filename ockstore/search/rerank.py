"""Exact re-ranking of candidates from any base, as Faiss's IndexRefine wraps any index: a scan keeps R candidates per
query by their codes, and the compiled loop of ``_kernels`` (ockstore/kernels/rerank.h) reads the candidates' vectors,
computes their exact distances or scores and keeps the best k (docs/ARCHITECTURE.md, "Search").

What is exact: the value of the vector as stored (float32, float16 and uint8 rows as they are; ``"sq8"`` codes as
the stored representation lo + step * code) against the float32 query, computed in float64 (16 lanes in a fixed
order, kernels/rerank.h) and rounded once to float32; ties by the smaller id. A value depends on the query and that row
only: never on the batch, the other candidates, the thread count or the SIMD level.

Two ways in, one loop:

* ``StoredVectors`` + ``rerank_stored``: the rows are read where they are stored (an index's ``vectors`` section, the
  segments of a collection: one part each), candidates given as (part, row). The scans of an index call the same
  loop before their candidates leave the kernel (``search.search_codes`` and ``ivf_index.search_lists`` take a
  StoredVectors), so a search re-ranks without any array of candidates in Python.
* ``rerank``: candidates given as keys and a ``fetch`` that gathers their vectors (the caller's ``vectors=`` array,
  an HDF5 dataset, vectors fetched from Dask workers); the gathered block is then one part.
"""

from __future__ import annotations

import numpy as np

from .. import _kernels
from ..quantizers.sq8 import sq8_decode
from .._validation import MAX_ABS_VALUE, resolve_n_threads, rows_beyond_limits

__all__ = ["RERANK_STEP_BYTES", "StoredVectors", "rerank_stored", "rerank_candidates", "exact_neighbours", "rerank",
           "gather_rows", "check_vector_rows", "raise_zero_vector"]

# Bytes of candidates' vectors gathered per step by ``rerank`` (the fetched block): bounds its memory whatever nq.
RERANK_STEP_BYTES = 8 << 20

_METRICS = {"l2": _kernels.RERANK_L2, "ip": _kernels.RERANK_IP, "cosine": _kernels.RERANK_COSINE}
_KINDS = {np.dtype("<f4"): _kernels.RERANK_FLOAT32, np.dtype("<f2"): _kernels.RERANK_FLOAT16,
          np.dtype("<u1"): _kernels.RERANK_UINT8}


class StoredVectors:
    """Vectors re-ranking reads in place: one array per part, every part of one kind and dimension.

    Parameters
    ----------
    arrays : list of ndarray of shape (n_i, P), C-contiguous, dtype float32, float16 or uint8 (little-endian)
        Part i's vectors as stored (read-only views and memory maps welcome; never copied).
    ids : list of (ndarray of shape (n_i,) int64, or None)
        The id of each row of part i, which breaks ties (None: the row number).
    metric : "l2", "ip" or "cosine"
    sq8_ranges : ndarray of shape (2, P), float32, or None
        For ``store_vectors="sq8"``: the model's value ranges, the uint8 arrays being codes (docs/FORMAT.md).
    damaged : list of (callable or None)
        ``damaged[i](check, detail)`` makes the FormatError of damage in part i's stored section (naming its file), or
        None for vectors given by the caller (ValueError naming ``vectors``).
    """

    def __init__(self, arrays, ids, metric, sq8_ranges=None, damaged=None):
        dim = arrays[0].shape[1]
        kind = _kernels.RERANK_SQ8 if sq8_ranges is not None else _KINDS[arrays[0].dtype.newbyteorder("<")]
        self.arrays = arrays
        self.ids = ids
        self.metric = metric
        self.sq8_ranges = sq8_ranges
        self.damaged = damaged if damaged is not None else [None] * len(arrays)
        self.source = _kernels.RerankSource([_row_bytes(a) for a in arrays], list(ids),
                                            kind, _METRICS[metric], dim,
                                            None if sq8_ranges is None else np.ascontiguousarray(sq8_ranges,
                                                                                                 dtype=np.float32))

    def values_of(self, rows, part=0):
        """float32 copies of the vectors of ``rows`` of ``part`` (for checks and the errors of damaged rows): the
        stored representation for sq8 codes."""
        block = self.arrays[part][rows]
        if self.sq8_ranges is not None:
            block = sq8_decode(block, self.sq8_ranges)
        with np.errstate(over="ignore", invalid="ignore"):
            return np.asarray(block, dtype=np.float32)

    def raise_bad(self, rows, parts=None):
        """Raise the error of the bad candidate rows (the kernel flagged some): the first part holding one, its
        smallest bad row (non-finite or too large values: FormatError of the stored section, or ValueError naming
        ``vectors``; a zero vector under cosine: ValueError). ``rows`` (n, R) -1 for none, ``parts`` alike or None."""
        rows = np.asarray(rows)
        parts = np.zeros_like(rows) if parts is None else np.asarray(parts)
        for p in range(len(self.arrays)):
            candidates = np.unique(rows[(parts == p) & (rows >= 0)])
            if candidates.size == 0:
                continue
            block = self.values_of(candidates, p)
            check_vector_rows(block, candidates, self.damaged[p])
            if self.metric == "cosine":
                raise_zero_vector(block, candidates)
        raise AssertionError("the re-ranking kernel flagged a row that no check finds bad")  # pragma: no cover


def _row_bytes(vectors):
    """The (n, P) vectors as (n, P * itemsize) uint8 rows: a view, no copy (a copy only for the n = 0 case)."""
    if vectors.shape[0] == 0:
        return np.empty((0, vectors.shape[1] * vectors.itemsize), dtype=np.uint8)
    return np.ascontiguousarray(vectors).view(np.uint8).reshape(vectors.shape[0], -1)


def rerank_stored(Q, rows, parts, stored, k, n_threads=None):
    """The best k of each query's candidates, read from ``stored`` (a StoredVectors) where they are.

    Q : (nq, P) float32, as the model sees them (unit rows for cosine); rows : (nq, R) int64, the candidates' rows,
    -1 for none; parts : (nq, R) int64 (the part of each) or None (part 0); k >= 1.

    Returns (values (nq, k) float32, ids (nq, k) int64): squared L2 distances ascending, or scores descending (inner
    product; cosine similarity q . x / ||x||); padding (+inf or -inf, id -1).
    """
    nq = Q.shape[0]
    D = np.empty((nq, k), dtype=np.float32)
    I = np.empty((nq, k), dtype=np.int64)
    flags = np.empty(nq, dtype=np.int32)
    threads = 1 if nq <= 1 else resolve_n_threads(n_threads)
    _kernels.rerank(stored.source, Q, rows, parts, D, I, None, flags, threads)
    if flags.any():
        bad = flags != 0
        stored.raise_bad(rows[bad], None if parts is None else parts[bad])
    return D, I


def rerank_candidates(Q, rows, stored, k, n_threads=None):
    """``rerank_stored`` of candidates of part 0 that returns their rows instead of their ids: what the scans return
    (``search.search_codes`` re-ranks the candidates of the exhaustive fast scan with it, whose kernel takes no stored
    rows). Q : (nq, P) float32 (the queries re-ranked); rows : (nq, R) int64, -1 for none.

    Returns (values (nq, k) float32, rows (nq, k) int64, -1 past the last result)."""
    nq = Q.shape[0]
    D = np.empty((nq, k), dtype=np.float32)
    ids = np.empty((nq, k), dtype=np.int64)
    positions = np.empty((nq, k), dtype=np.int64)
    flags = np.empty(nq, dtype=np.int32)
    threads = 1 if nq <= 1 else resolve_n_threads(n_threads)
    # in the scan's order: the k best of a set do not depend on its order, and the loop prefetches the rows ahead
    # of it (sorting them by row first cost more than it saved: 17 us per query at R = 1,000 for no faster loop)
    _kernels.rerank(stored.source, np.ascontiguousarray(Q, dtype=np.float32), rows, None, D, ids, positions, flags,
                    threads)
    if flags.any():
        stored.raise_bad(rows[flags != 0])
    found = np.take_along_axis(rows, np.maximum(positions, 0), axis=1) if rows.shape[1] else positions
    found[positions < 0] = -1
    return D, found


def exact_neighbours(Q, stored, k, n_threads=None):
    """The exact k best rows of ``stored`` (a StoredVectors of one part) for each prepared query ``Q`` (nq, P) float32, by
    the values re-ranking computes (brute force: every row a candidate). Returns (values, ids) as ``rerank_stored``;
    a bad row raises as re-ranking raises."""
    nq, n_rows = Q.shape[0], stored.arrays[0].shape[0]
    D = np.empty((nq, k), dtype=np.float32)
    I = np.empty((nq, k), dtype=np.int64)
    flags = np.empty(nq, dtype=np.int32)
    _kernels.rerank_all_rows(stored.source, Q, n_rows, D, I, flags, resolve_n_threads(n_threads))
    if flags.any():
        stored.raise_bad(np.arange(n_rows, dtype=np.int64)[None, :])
    return D, I


def rerank(Q, candidates, fetch, metric, k, *, sq8_ranges=None, n_threads=None):
    """The best k of each query's candidates by their exact distance or score, their vectors gathered by ``fetch``.

    Parameters
    ----------
    Q : ndarray of shape (nq, P), dtype float32
        The queries as the model sees them (unit rows for cosine).
    candidates : ndarray of shape (nq, R), dtype int64
        Keys of the candidates (rows of an index, ids of a collection), >= 0, then -1 for none.
    fetch : callable
        ``fetch(keys)`` for the real candidates of a step of queries (int64, query after query, a key possibly
        repeated across queries) returns (vectors (n, P), ids (n,) int64), aligned with ``keys``: the candidates'
        vectors, float32 checked as every vector input is (``gather_rows``), or as stored (float16, uint8, sq8 codes),
        and the ids reported for them (which break ties).
    metric : "l2", "ip" or "cosine"
    k : int <= R
    sq8_ranges : (2, P) float32 or None
        When the fetched vectors are sq8 codes: the model's value ranges.

    Returns as ``rerank_stored``. Candidates are gathered RERANK_STEP_BYTES at a time; a query's results do not
    depend on the step. ValueError for a zero candidate vector under cosine (its similarity is undefined), naming
    the smallest such key.
    """
    nq, R = candidates.shape
    D = np.full((nq, k), np.inf if metric == "l2" else -np.inf, dtype=np.float32)
    I = np.full((nq, k), -1, dtype=np.int64)
    step = max(1, RERANK_STEP_BYTES // (4 * R * Q.shape[1]))
    for start in range(0, nq, step):
        stop = min(nq, start + step)
        cand = candidates[start:stop]
        valid = cand >= 0
        keys = cand[valid]
        if keys.size == 0:
            continue
        vectors, ids = fetch(keys)
        vectors = np.ascontiguousarray(vectors)
        stored = StoredVectors([vectors], [np.ascontiguousarray(ids, dtype=np.int64)], metric, sq8_ranges)
        positions = np.full(cand.shape, -1, dtype=np.int64)
        positions[valid] = np.arange(keys.size)
        try:
            D[start:stop], I[start:stop] = rerank_stored(Q[start:stop], positions, None, stored, k, n_threads)
        except ValueError:
            if metric == "cosine":  # name the key, not the position in the gathered block
                raise_zero_vector(stored.values_of(np.arange(keys.size)), keys)
            raise
    return D, I


def raise_zero_vector(block, keys):
    """ValueError naming the smallest key whose vector (a row of ``block``, float32) is zero, if any: its cosine
    similarity is undefined."""
    zero = ~np.any(block != 0, axis=1)
    if zero.any():
        raise ValueError(f"vectors row {int(keys[zero].min())} is a zero vector: its cosine similarity is undefined")


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
