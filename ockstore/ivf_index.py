"""IVFIndex: the codes of a base stored list after list with their IVF, searched by probing the nearest lists.

An inverted-file index holds the arrays of a flat index (codes, norm terms, ids, stored vectors), with its rows
grouped by list: list l holds rows ``list_offsets[l] .. list_offsets[l + 1] - 1``. Ids are always stored (rows are
reordered; without user ids they are the insertion order 0..N-1). A search computes, per query, the coarse step (the
n_probe best lists and their terms -2 q.c_l), one ADC table, and scans the probed lists only
(docs/ARCHITECTURE.md, "Inverted file"). Files are written by ``ockstore.indexfile.ivf_writer`` and opened by
``open_index``, which hands the mapped arrays to this class.

IVFIndex builds on the flat ``Index`` (every attribute and method of an index applies) and overrides its hooks: how
rows are made from encoded vectors (sorted list after list), how they are scanned (by probing lists), which list each
row belongs to (for copying rows into a writer), and what info() says of the model.
"""

from __future__ import annotations

import numpy as np

from .quantizers.ivf import default_n_probe
from .search.codes import code_store
from ._index_rows import check_model_for
from ._validation import check_int
from .index import Index

__all__ = ["IVFIndex", "check_list_offsets"]


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
        "none" for metric "ip"; "f32" or "u8" for "l2"; any for "cosine" (the norm term divides its scores).
    vectors : ndarray of shape (N, P), dtype float16, float32 or uint8, or None
        The stored vectors in row order, for exact re-ranking.
    store_vectors : None, "float16", "float32", "uint8" or "sq8"
        How ``vectors`` are stored, as for :class:`Index`.

    Most users build with ``Index.from_vectors(ivf, X)`` or ``IndexWriter(path, ivf)``, or open a file with
    ``open_index``. Every attribute and method of :class:`Index` applies; ``quantizer`` is the IVF.

    ``search(Q, k, n_probe=...)`` scans the n_probe lists nearest each query (see :meth:`Index.search`); a query
    whose probed lists hold fewer than k (allowed) vectors gets padding after them. ``allow`` given as a boolean mask
    and ``vectors`` (for ``rerank``) are in the index's row order: list after list, not the order the vectors were
    added (row r holds id ``ids[r]``; with the default ids, which are positions in the base X, pass ``X[index.ids]``).
    """

    def __init__(self, ivf, codes, norms, ids, list_offsets, norm_encoding, *, vectors=None, store_vectors=None,
                 _resource=None):
        ivf = check_model_for(type(self), ivf, "ivf")
        store = code_store(codes)
        n_rows = (len(store) if store is not None
                  else codes.shape[0] if isinstance(codes, np.ndarray) and codes.ndim == 2 else None)
        if ids is None and n_rows is not None:
            ids = np.arange(n_rows, dtype=np.int64)  # rows are in list order: their ids are kept explicitly
        runs = None
        if n_rows is not None:  # the lists are the runs of fast-scan blocks (K <= 16): known before packing
            runs = check_list_offsets(list_offsets, ivf.n_lists, n_rows)
            if store is not None and not store.runs_are(runs):
                raise ValueError("codes: the runs of the blocks are not the lists of list_offsets")
        self._attach(ivf, codes, norms, ids, norm_encoding, vectors, store_vectors, _resource, runs=runs)
        self._list_offsets = check_list_offsets(list_offsets, ivf.n_lists, len(self._codes))

    # ----------------------------------------------------------------------------------------------- construction
    @classmethod
    def _from_encoded(cls, ivf, lists, codes, norms, ids, norm_encoding, vectors, store_vectors):
        """``Index.from_vectors`` with an IVF comes here: rows are stored list after list, in the order given within
        a list; without ids, the ids are the positions in X."""
        N = codes.shape[0]
        ids = np.arange(N, dtype=np.int64) if ids is None else ids
        order = np.argsort(lists, kind="stable")  # list after list, insertion order within a list
        offsets = np.zeros(ivf.n_lists + 1, dtype=np.int64)
        np.cumsum(np.bincount(lists, minlength=ivf.n_lists), out=offsets[1:])
        return cls(ivf, codes[order], None if norms is None else norms[order], ids[order], offsets, norm_encoding,
                   vectors=None if vectors is None else vectors[order], store_vectors=store_vectors)

    def _release_arrays(self):
        super()._release_arrays()
        self._list_offsets = None

    # ------------------------------------------------------------------------------------------------- attributes
    @property
    def ivf(self):
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
        return {**self._quantizer._summary(),
                "default_n_probe": int(default_n_probe(self._quantizer.n_lists, len(self._codes))),
                "list_sizes": stats}

    # ------------------------------------------------------------------------------------------- the hooks of Index
    def _row_lists(self, start, stop, select):
        """The list of each of rows start..stop-1 (``select`` of them): an IVF writer's ``_append`` sorts by them."""
        return self.row_lists(start, stop)[select]

    def _exhaustive_scan(self):
        """False: queries probe lists (the search kernel of lists, ``search.searcher``)."""
        return False

    def _part_rows(self, live):
        """This index's rows as one part of a search: its lists (in fast-scan blocks, one run of blocks per list)."""
        return self._codes.part_rows(self._code_rows(None), self._list_offsets, live)
