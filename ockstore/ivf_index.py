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

import functools

import numpy as np

from . import _kernels
from .search import scan as _search
from .search.codes import CodeBlocks
from ._index_rows import check_model_for
from ._validation import MAX_ABS_VALUE, check_int, resolve_n_threads
from .index import Index

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


def search_lists(lists, Q, k, n_probe, allow, *, n_threads=1, rerank=None, rerank_queries=None, by_bound=False,
                 ids=False):
    """The k best rows of each query among its n_probe best lists (no input validation): one call of
    ``_kernels.ivf_search`` (the coarse step, the scan of the probed lists -- byte codes, or blocks read by the fast
    scan -- and with ``rerank`` the exact values of the candidates, query by query in the kernel).

    Parameters
    ----------
    lists : _kernels.IvfLists of the index (``IVFIndex._ivf_lists``)
    Q : ndarray of shape (nq, P), dtype float32, C-contiguous, finite (unit rows for cosine)
    k : int >= 1
    n_probe : int in 1..n_lists
    allow : ndarray of shape (ceil(N / 64),), dtype uint64, or None: bitmap of the rows to scan (search.rows_bitmap)
    n_threads : int >= 1, or None (every core)
    rerank : (StoredRows, R) or None
        Re-rank inside the scan (as ``search.search_codes``): R >= k candidates per query (in fast-scan blocks the R
        of smallest quantized bound, docs/ARCHITECTURE.md "Fast scan"), the k best by exact value.
    rerank_queries : ndarray like Q, or None
        The queries re-ranked, when the scan uses others (SDC: their reconstructions); None: Q.
    by_bound : bool
        Without ``rerank``, lists in fast-scan blocks: the k rows of smallest quantized bound (candidates the caller
        re-ranks), ranked by that bound.
    ids : bool
        Return the results' ids instead of their rows.

    Returns (D (nq, k) float32 ascending, rows or ids (nq, k) int64; (inf, -1) past the last result); with
    ``rerank`` the exact values (scores descending for "ip" and "cosine").
    """
    nq = Q.shape[0]
    D = np.empty((nq, k), dtype=np.float32)
    found = np.empty((nq, k), dtype=np.int64)
    if nq == 0:
        return D, found
    threads = 1 if nq == 1 else min(resolve_n_threads(n_threads), nq)  # a thread per query at most
    if rerank is None:
        _kernels.ivf_search(lists, Q, n_probe, allow, D, found, threads, None, 0, None, None, by_bound, ids)
        return D, found
    stored, width = rerank
    flags = np.empty(nq, dtype=np.int32)
    _kernels.ivf_search(lists, Q, n_probe, allow, D, found, threads, stored.source, width, rerank_queries, flags,
                        True, ids)
    if np.count_nonzero(flags):  # a bad stored row among some query's candidates: name it
        bad = flags != 0
        _, candidates = search_lists(lists, Q[bad], width, n_probe, allow, n_threads=threads, by_bound=True)
        stored.raise_bad(candidates)
    return D, found


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
        n_rows = (len(codes) if isinstance(codes, CodeBlocks)
                  else codes.shape[0] if isinstance(codes, np.ndarray) and codes.ndim == 2 else None)
        if ids is None and n_rows is not None:
            ids = np.arange(n_rows, dtype=np.int64)  # rows are in list order: their ids are kept explicitly
        runs = None
        if n_rows is not None:  # the lists are the runs of fast-scan blocks (K <= 16): known before packing
            runs = check_list_offsets(list_offsets, ivf.n_lists, n_rows)
            if isinstance(codes, CodeBlocks) and not np.array_equal(codes.run_offsets, runs):
                raise ValueError("codes: the runs of the blocks are not the lists of list_offsets")
        self._attach(ivf, codes, norms, ids, norm_encoding, vectors, store_vectors, _resource, runs=runs)
        self._list_offsets = check_list_offsets(list_offsets, ivf.n_lists, len(self._codes))
        self._lists = None  # the _kernels.IvfLists, built on first search

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
        self._list_offsets = self._lists = None

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
        return {**self._quantizer._summary(), "default_n_probe": int(self._quantizer.default_n_probe),
                "list_sizes": stats}

    # ------------------------------------------------------------------------------------------- the hooks of Index
    def _row_lists(self, start, stop, select):
        """The list of each of rows start..stop-1 (``select`` of them): an IVF writer's ``_append`` sorts by them."""
        return self.row_lists(start, stop)[select]

    def _query_tables(self):
        """One ADC table per query serves every list: TABLE_L2_NORM_TERM for "l2" whatever C is (the stored norm term
        of the whole reconstruction completes the distance), TABLE_NEG_DOT for "ip" and "cosine"."""
        tables = self._tables
        if tables is None:  # first search: two threads may both build them; one is kept
            kind = _search.TABLE_L2_NORM_TERM if self._quantizer.metric == "l2" else _search.TABLE_NEG_DOT
            tables = self._tables = _search.QueryTables(self._quantizer.quantizer, kind=kind)
        return tables

    def _scan(self, Q, opts, bitmap, stored=None, ids=False):
        """The opts.width best rows (``ids``: their ids) of each prepared query among its opts.n_probe lists
        (``search_lists``), or with ``stored`` the opts.k best of them by exact value. ``distance="sdc"`` replaces
        each query by its own reconstruction c_l + R z_hat (the query encoded by the IVF) before the coarse step and
        the scan (re-ranking uses the query itself). Queries are searched in parallel, each on one thread."""
        ivf = self._quantizer
        scan_Q = Q
        if opts.distance == "sdc":
            threads = 1 if Q.shape[0] == 1 else resolve_n_threads(opts.n_threads)  # None: every core
            lists, codes = ivf._encode_prepared(Q, threads)
            scan_Q = np.ascontiguousarray(ivf._reconstruct(lists, codes, threads))
            if ivf.metric == "cosine":  # the query's reconstruction at unit length: scores estimate cosines
                lengths = np.sqrt(np.einsum("ij,ij->i", scan_Q, scan_Q, dtype=np.float64))
                scan_Q = np.ascontiguousarray(scan_Q / np.where(lengths > 0, lengths, 1.0)[:, None], dtype=np.float32)
        return self._list_search(opts, bitmap, stored, ids)(scan_Q, rerank_queries=None if scan_Q is Q else Q)

    def _list_search(self, opts, bitmap, stored, ids):
        """``search_lists`` over this index's lists with ``opts``, the row bitmap, the stored rows to re-rank from (or
        None) and ``ids`` bound: a function of the queries scanned (and ``rerank_queries``)."""
        if stored is None:
            return functools.partial(search_lists, self._ivf_lists(), k=opts.width, n_probe=opts.n_probe,
                                     allow=bitmap, n_threads=opts.n_threads, by_bound=opts.by_bound, ids=ids)
        return functools.partial(search_lists, self._ivf_lists(), k=opts.k, n_probe=opts.n_probe, allow=bitmap,
                                 n_threads=opts.n_threads, rerank=(stored, opts.rerank), ids=ids)

    def _scan_runners(self, opts):
        """The scan of the lists with ``opts`` bound, and the compiled search of one query with them
        (``Index._scan_runners``): where ``_search`` would do nothing but call the scan (no allow, no caller's vectors,
        ADC; scores from the codes are negated by ``_search``, so only for "l2" without re-ranking); the one-query
        search normalises a "cosine" query itself, as ``_prepare`` does."""
        if opts.allow is not None or opts.vectors is not None or opts.distance != "adc":
            return None, None
        stored = None if opts.rerank is None else self._stored_rows()
        if stored is None and self._quantizer.metric != "l2":
            return None, None
        run = self._list_search(opts, None, stored, True)
        one = _kernels.IvfOneQuery(self._ivf_lists(), opts.k, opts.n_probe, None if stored is None else stored.source,
                                   0 if stored is None else opts.rerank, MAX_ABS_VALUE,
                                   self._quantizer.metric == "cosine")
        return run, one

    def _ivf_lists(self):
        """The _kernels.IvfLists of this index (built on first search, like the tables): its byte codes, or (K <= 16)
        its lists in fast-scan blocks, one run of blocks per list."""
        lists = self._lists
        if lists is None:
            rows = self._code_rows(None)
            panels, c_sqnorms, kind, term_factor = self._quantizer._probing()
            blocks = {}
            codes = rows.codes
            if isinstance(codes, CodeBlocks):
                blocks = {"list_blocks": codes.run_blocks, "n_words": codes.n_words, "scale_range": rows.scale_range}
                codes = codes.blocks
            lists = self._lists = _kernels.IvfLists(
                self._query_tables().model, panels, c_sqnorms, kind, term_factor, codes, rows.norms,
                rows.norm_codes, rows.norm_levels if rows.norm_codes is not None else None, rows.ids,
                self._list_offsets, rows.norm_scales, half=self._quantizer._probing_alone(), **blocks)
        return lists

    def _flat_scan_rows(self, bitmap):
        """None: each list has its own term (-2 q.c_l), so these rows cannot join one flat scan; a collection of IVF
        segments searches each with its own ``search`` and merges the results."""
        return None
