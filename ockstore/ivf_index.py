"""IVFIndex: the codes of a base stored list after list with their IVF, searched by probing the nearest lists.

An inverted-file index holds the arrays of a flat index (codes, norm terms, ids, stored vectors), with its rows
grouped by list: list l holds rows ``list_offsets[l] .. list_offsets[l + 1] - 1``. Ids are always stored (rows are
reordered; without user ids they are the insertion order 0..N-1). A search computes, per query, the coarse step (the
n_probe best lists and their terms -2 q.c_l), one ADC table, and scans the probed lists only
(docs/ARCHITECTURE.md, "Inverted file"). Files are written by ``ockstore.indexfile.ivf_writer`` and opened by
``open_index``, which hands the mapped arrays to this class.
"""

from __future__ import annotations

import numpy as np

from . import _kernels
from . import search as _search
from ._encoding import check_fitted_model, check_store_vectors, encode_all, resolve_norm_encoding
from ._validation import as_ids, as_vectors, check_int, resolve_n_threads
from .index import Index, _quantizer_summary
from .ivf import IVF, ROWS_PER_STEP, check_n_probe

__all__ = ["IVFIndex", "search_lists", "check_list_offsets"]


def check_list_offsets(offsets, n_lists, n_rows, name="list_offsets"):
    """The list offsets of an inverted file: int64 of shape (n_lists + 1,), from 0 to n_rows, non-decreasing
    (ValueError naming ``name`` otherwise); returned C-contiguous (a read-only view stays a view)."""
    if not isinstance(offsets, np.ndarray):
        offsets = np.asarray(offsets)
    if offsets.dtype.kind not in "iu" or offsets.dtype.kind == "b":
        raise TypeError(f"{name} must be an integer array, got dtype {offsets.dtype}")
    if offsets.shape != (n_lists + 1,):
        raise ValueError(f"{name} must have shape ({n_lists + 1},) (one more than the lists), got {offsets.shape}")
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if offsets[0] != 0 or offsets[-1] != n_rows:
        raise ValueError(f"{name} must run from 0 to the number of rows {n_rows}, got {int(offsets[0])} .. "
                         f"{int(offsets[-1])}")
    steps = np.diff(offsets)
    if steps.size and int(steps.min()) < 0:
        bad = int(np.argmax(steps < 0))
        raise ValueError(f"{name} must not decrease: list {bad} ends at {int(offsets[bad + 1])}, before its start "
                         f"{int(offsets[bad])}")
    return offsets


# Queries probed per kernel call: bounds the (queries x n_probe) lists and terms of a batch (8 bytes each).
PROBE_QUERIES_PER_STEP = 8192


def search_lists(tables, ivf, Q, k, codes, ids, list_offsets, n_probe, *, norms=None, norm_codes=None,
                 norm_levels=None, allow=None, n_threads=1):
    """The k best rows of each query among its n_probe best lists (no input validation).

    Parameters
    ----------
    tables : QueryTables of the fine quantizer, kind TABLE_L2_NORM_TERM (metric "l2") or TABLE_NEG_DOT
    ivf : fitted IVF
    Q : ndarray of shape (nq, P), dtype float32, C-contiguous, finite (unit rows for cosine)
    k : int >= 1
    codes, ids, list_offsets : the rows of the index, list after list (ids (N,) int64)
    n_probe : int in 1..n_lists
    norms, norm_codes, norm_levels, allow : as for ``search.search_codes``
    n_threads : int >= 1, or None (every core)

    Returns (D (nq, k) float32 ascending, rows (nq, k) int64; (inf, -1) past the last result).
    """
    nq = Q.shape[0]
    D = np.empty((nq, k), dtype=np.float32)
    rows = np.empty((nq, k), dtype=np.int64)
    if nq == 0:
        return D, rows
    threads = max(1, min(resolve_n_threads(n_threads), nq))  # queries run in parallel: a thread per query at most
    for start in range(0, nq, PROBE_QUERIES_PER_STEP):
        stop = min(nq, start + PROBE_QUERIES_PER_STEP)
        batch = Q if stop - start == nq else Q[start:stop]
        lists, terms = ivf._probe(batch, n_probe, threads)
        _kernels.ivf_scan(tables.model, batch, codes, norms, norm_codes, norm_levels if norm_codes is not None else None,
                          ids, allow, list_offsets, lists, terms, D[start:stop], rows[start:stop], threads)
    return D, rows


class IVFIndex(Index):
    """Compact codes of a base grouped in the lists of an IVF, searched by probing the lists nearest each query.

    Parameters
    ----------
    ivf : fitted IVF
        Must not be refitted while the index is in use.
    codes : ndarray of shape (N, M*C), dtype uint8
        The fine codes (of the residuals), list after list. Used as given (read-only arrays and memory maps
        welcome).
    norms : ndarray of shape (N,) or None
        The norm terms ||c_l + R z_hat||^2: float32 ("f32"), uint8 codes of ``ivf.norm_levels`` ("u8"), None
        ("none": metrics "ip" and "cosine").
    ids : ndarray of shape (N,), dtype int64, or None
        The id of each row (None: 0..N-1, in row order).
    list_offsets : ndarray of shape (n_lists + 1,), integers
        List l holds rows list_offsets[l] .. list_offsets[l + 1] - 1: from 0 to N, non-decreasing.
    norm_encoding : "f32", "u8" or "none"
        "none" exactly for metrics "ip" and "cosine".
    vectors : ndarray of shape (N, P), dtype float16, float32 or uint8, or None
        The stored vectors in row order, for exact re-ranking.

    Most users build with ``Index.from_vectors(ivf, X)`` or ``IndexWriter(path, ivf)``, or open a file with
    ``open_index``. Every attribute and method of :class:`Index` applies; ``quantizer`` is the IVF.
    """

    def __init__(self, ivf, codes, norms, ids, list_offsets, norm_encoding, *, vectors=None, _resource=None):
        ivf = check_fitted_model(ivf)
        if not isinstance(ivf, IVF):
            raise TypeError(f"ivf must be a fitted IVF, got {type(ivf).__name__}: a flat quantizer makes an Index")
        n_rows = codes.shape[0] if isinstance(codes, np.ndarray) and codes.ndim == 2 else None
        if ids is None and n_rows is not None:
            ids = np.arange(n_rows, dtype=np.int64)  # rows are in list order: their ids are kept explicitly
        self._attach(ivf, codes, norms, ids, norm_encoding, vectors, _resource)
        self._list_offsets = check_list_offsets(list_offsets, ivf.n_lists, len(self._codes))

    # ----------------------------------------------------------------------------------------------- construction
    @classmethod
    def from_vectors(cls, ivf, X, ids=None, *, norm_encoding=None, store_vectors=None, n_threads=None):
        """Encode base vectors into a new in-memory IVF index (``Index.from_vectors`` with an IVF comes here).

        Parameters as for :meth:`Index.from_vectors`; ``norm_encoding`` None means "u8" for metric "l2" and "none"
        for "ip" and "cosine". Rows are stored list after list, in the order given within a list; without ids, the
        ids are the positions in X.
        """
        ivf = check_fitted_model(ivf)
        if not isinstance(ivf, IVF):
            raise TypeError(f"ivf must be a fitted IVF, got {type(ivf).__name__}")
        norm_encoding = resolve_norm_encoding(ivf, norm_encoding)
        store_vectors = check_store_vectors(store_vectors)
        X, _ = as_vectors(X, "X", ivf.dim, convert=False)
        threads = resolve_n_threads(n_threads)
        N = X.shape[0]
        ids = np.arange(N, dtype=np.int64) if ids is None else as_ids(ids, "ids", n=N)
        lists, codes, norms, vectors = encode_all(ivf, X, norm_encoding, store_vectors, threads, ROWS_PER_STEP)
        order = np.argsort(lists, kind="stable")  # list after list, insertion order within a list
        offsets = np.zeros(ivf.n_lists + 1, dtype=np.int64)
        np.cumsum(np.bincount(lists, minlength=ivf.n_lists), out=offsets[1:])
        return cls(ivf, codes[order], None if norms is None else norms[order], ids[order], offsets, norm_encoding,
                   vectors=None if vectors is None else vectors[order])

    def close(self):
        """As :meth:`Index.close` (the list offsets are released with the other arrays)."""
        self._list_offsets = None
        super().close()

    # ------------------------------------------------------------------------------------------------- attributes
    @property
    def ivf(self) -> IVF:
        """The IVF (also ``quantizer``)."""
        self._check_open()
        return self._quantizer

    @property
    def n_lists(self) -> int:
        self._check_open()
        return int(self._quantizer.n_lists)

    @property
    def list_offsets(self):
        """(n_lists + 1,) int64: list l holds rows list_offsets[l] .. list_offsets[l + 1] - 1 (possibly a read-only
        view of the file)."""
        self._check_open()
        return self._list_offsets

    @property
    def list_sizes(self):
        """(n_lists,) int64: the rows of each list."""
        self._check_open()
        return np.diff(self._list_offsets)

    def row_lists(self, start=0, stop=None):
        """(stop - start,) int32: the list of each row of rows start..stop-1 (what a writer's ``_append`` needs to
        copy rows without re-encoding them)."""
        self._check_open()
        N = len(self)
        stop = N if stop is None else stop
        start = check_int(start, "start", min_value=0, max_value=N)
        stop = check_int(stop, "stop", min_value=start, max_value=N)
        offsets = self._list_offsets
        first = int(np.searchsorted(offsets, start, side="right")) - 1
        last = int(np.searchsorted(offsets, stop, side="left"))
        bounds = np.clip(offsets[first:last + 1], start, stop)
        return np.repeat(np.arange(first, last, dtype=np.int32), np.diff(bounds))

    @property
    def has_ids(self) -> bool:
        """True: an inverted-file index always stores the ids of its rows."""
        self._check_open()
        return True

    def __repr__(self):
        if self._closed:
            return "<IVFIndex closed>"
        q = self._quantizer.quantizer
        return (f"<IVFIndex n_lists={self._quantizer.n_lists} {q.method} N={self.ntotal} P={q.dim} "
                f"M={q.n_subspaces} C={q.n_codebooks} K={q.n_codewords} norm_encoding={self._norm_encoding!r}>")

    def _model_summary(self):
        """info(): the fine quantizer's P, method, metric, M, C, K, T, bits, then n_lists, default_n_probe and
        list_sizes (min, max, mean, median, and the number of empty lists)."""
        sizes = self.list_sizes
        stats = {"min": int(sizes.min()), "max": int(sizes.max()), "mean": float(sizes.mean()),
                 "median": float(np.median(sizes)), "empty": int((sizes == 0).sum())}
        return {**ivf_summary(self._quantizer), "default_n_probe": int(self._quantizer.default_n_probe),
                "list_sizes": stats}

    # ------------------------------------------------------------------------------------------------ files
    def save(self, path, metadata=None):
        """Write this index to an index file, atomically (the writer of IndexWriter(path, ivf): same bytes).

        Parameters as for :meth:`Index.save`.
        """
        from .indexfile.writer import IndexWriter

        self._check_open()
        writer = IndexWriter(path, self._quantizer, norm_encoding=self._norm_encoding,
                             store_vectors=self.store_vectors,
                             metadata=self._metadata if metadata is None else metadata)
        with writer:
            N = len(self)
            for start in range(0, max(N, 1), ROWS_PER_STEP):  # once with zero rows when N == 0
                stop = min(N, start + ROWS_PER_STEP)
                writer._append(
                    np.ascontiguousarray(self._codes[start:stop]),
                    None if self._norms is None else np.ascontiguousarray(self._norms[start:stop]),
                    np.ascontiguousarray(self._ids[start:stop]),
                    None if self._vectors is None else np.ascontiguousarray(self._vectors[start:stop]),
                    list_ids=self.row_lists(start, stop),
                )

    # ----------------------------------------------------------------------------------------------------- search
    def search(self, Q, k, *, n_probe=None, distance="adc", rerank=None, vectors=None, allow=None, n_threads=None):
        """The k best base vectors of each query among the lists it probes.

        Parameters
        ----------
        n_probe : int in 1..n_lists, or None
            The lists each query scans: those whose centroids are nearest to it (metric "ip": of the largest inner
            product), best first. None means ``ivf.default_n_probe`` (n_lists / 64 rounded up: 16 of 1,024).
            n_probe = n_lists scans every list and gives exactly the exhaustive ADC result over these codes.
        Q, k, distance, rerank, vectors, allow, n_threads
            As for :meth:`Index.search`. ``distance="sdc"`` replaces each query by its own reconstruction
            c_l + R z_hat (the query encoded by the IVF) before the coarse step and the scan. ``allow`` is a set of
            ids or a boolean mask over the rows of this index, and ``vectors`` (for ``rerank``) holds one vector per
            row, both in the index's row order (list after list, not the order the vectors were added: row r holds
            id ``ids[r]``; with the default ids, which are positions in the base X, pass ``X[index.ids]``). Results
            do not depend on ``n_threads``; queries are searched in parallel, each on one thread.

        Returns
        -------
        D, I : as for :meth:`Index.search`. A query whose probed lists hold fewer than k (allowed) vectors gets
            padding (+inf for "l2", -inf for "ip" and "cosine"; id -1) after them.
        """
        self._check_open()
        ivf = self._quantizer
        n_probe = min(check_n_probe(n_probe, ivf), ivf.n_lists)
        Q, was_1d, k, distance, rerank, vectors, bitmap, threads = self._search_arguments(
            Q, k, distance, rerank, vectors, allow, n_threads)
        threads = resolve_n_threads(threads)  # None: every core
        scan_Q = Q
        if distance == "sdc":
            lists, codes = ivf._encode_prepared(Q, threads)
            scan_Q = np.ascontiguousarray(ivf._reconstruct(lists, codes, threads))
        tables = self._tables
        if tables is None:  # first search: two threads may both build them; one is kept
            kind = _search.TABLE_L2_NORM_TERM if ivf.metric == "l2" else _search.TABLE_NEG_DOT
            tables = self._tables = _search.QueryTables(ivf.quantizer, kind=kind)
        norm_term = tables.uses_norm_term
        D, rows = search_lists(
            tables, ivf, scan_Q, k if rerank is None else rerank, self._codes, self._ids, self._list_offsets,
            n_probe, norms=self._norms if norm_term and self._norm_encoding == "f32" else None,
            norm_codes=self._norms if norm_term and self._norm_encoding == "u8" else None,
            norm_levels=self._norm_levels, allow=bitmap, n_threads=threads,
        )
        return self._search_results(Q, was_1d, k, D, rows, rerank, vectors)


def ivf_summary(ivf):
    """P, method, metric, M, C, K, T, bits of the fine quantizer, and n_lists (what describes an IVF model)."""
    return _quantizer_summary(ivf)
