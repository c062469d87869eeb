"""The one search pipeline of every container (docs/ARCHITECTURE.md, "Search", *One pipeline*).

An index file, a collection's segments and a Dask worker's share of them are all *parts* of one model: arrays of codes
(one byte per word, or 4-bit words in fast-scan blocks), norm terms, ids, stored vectors and, for an inverted file,
lists. A ``Searcher`` is a search with its options checked once (``searcher(k, ...)`` of each container); its
``search(Q, allow=None)`` runs the same stages whatever the container:

    query (checked, prepared) -> the parts' rows to scan (the call's filter, a segment's live rows)
      -> one kernel call: per query its tables once, its probed lists of every part scanned into one collector
         (the candidates of all parts compete by their bound), the compiled re-ranking of the best R from the stored
         rows of every part, the ids -> (D, I)

The kernel (``_kernels.ivf_search`` over ``_kernels.IvfLists``) takes a flat model as one list of every row. A flat
index file searched by a batch keeps the exhaustive scan (``scan.search_codes``: threads over blocks for a few
queries, a sampled limit before a long fast scan); both kernels give the same results. A query per call goes through
a compiled one-query search (``_kernels.IvfOneQuery``) once the searcher has checked it.
"""

from __future__ import annotations

import math

import numpy as np

from .. import _kernels
from .._validation import MAX_ABS_VALUE, as_vectors, resolve_n_threads
from . import options as _options
from . import rerank as _rerank
from .merge import merge_topk
from .scan import TABLE_L2_NORM_TERM, TABLE_NEG_DOT, QueryTables, rows_bitmap, search_codes

__all__ = ["Searcher", "Parts", "SearcherCache", "tables_of", "PART_SHIFT", "ROW_MASK"]

# A row handle of a search (kernels/rows.h): part << PART_SHIFT | row.
PART_SHIFT = _kernels.PART_SHIFT
ROW_MASK = (1 << PART_SHIFT) - 1

# A flat model of this many rows or more searches one query through the general path when threads are allowed: it
# splits the codes over the kernels' pool (the compiled one-query search runs on the caller's thread alone).
ONE_QUERY_FLAT_ROWS = 1 << 17


def tables_of(model):
    """The QueryTables of a model's scans: an inverted file's fine quantizer with TABLE_L2_NORM_TERM for "l2" (the
    stored norm term of the whole reconstruction completes every distance) or TABLE_NEG_DOT; a flat model's own."""
    if hasattr(model, "n_lists"):
        return QueryTables(model.quantizer, kind=TABLE_L2_NORM_TERM if model.metric == "l2" else TABLE_NEG_DOT)
    return QueryTables(model)


class Parts:
    """The rows a search reads: indexes of one model (an index's, or a collection's segments), each with the rows a
    search scans when the call gives no filter (``live``: a segment's live rows as a bitmap, or None: every row).
    What the kernels take is built once, on first use, and kept: the query tables, the lists of every part, the
    stored vectors of every part.

    Parameters
    ----------
    model : fitted Quantizer or IVF
    indexes : list of Index (or IVFIndex) of that model
    live : list of (uint64 bitmap or None), or None (every row of every part)
    tables : QueryTables or None
        The model's tables when the caller keeps them (a collection across generations); None: made here.
    damaged : list of callables or None
        ``damaged[p](check, detail)``: the FormatError of damage in part p's stored vectors (None: the index's own).
    exact : bool
        The parts hold stored vectors and no codes (a collection before it trains its quantizer, ``ExactIndex``
        segments): every search is exact, ``live`` holds boolean masks.
    """

    def __init__(self, model, indexes, live=None, tables=None, damaged=None, exact=False):
        self.model = model
        self.exact = exact
        self.indexes = list(indexes)
        self.live = list(live) if live is not None else [None] * len(self.indexes)
        self.ivf = hasattr(model, "n_lists")
        self.metric = model.metric
        self.dim = model.dim
        self.n_rows = sum(len(index) for index in self.indexes)
        self.store_vectors = self.indexes[0].store_vectors if self.indexes else None
        self._tables = tables
        self._damaged = damaged
        self._lists = None
        self._stored = None

    @property
    def tables(self):
        tables = self._tables
        if tables is None:  # two threads may both make them; one is kept
            tables = self._tables = tables_of(self.model)
        return tables

    def lists(self):
        """The _kernels.IvfLists of every part (a flat model: one list of every row)."""
        lists = self._lists
        if lists is None:
            if self.ivf:
                panels, c_sqnorms, kind, term_factor = self.model._probing()
                half = self.model._probing_alone()
            else:
                panels = c_sqnorms = half = None
                kind, term_factor = 0, 0.0
            parts = [index._part_rows(live) for index, live in zip(self.indexes, self.live)]
            lists = self._lists = _kernels.IvfLists(self.tables.model, panels, c_sqnorms, kind, term_factor, parts,
                                                    half)
        return lists

    def stored(self):
        """The _rerank.StoredVectors of every part's stored vectors (damage named by each part's file)."""
        stored = self._stored
        if stored is None:
            damaged = self._damaged or [index._damaged for index in self.indexes]
            stored = self._stored = _rerank.StoredVectors(
                [index._vectors for index in self.indexes], [index._ids for index in self.indexes], self.metric,
                sq8_ranges=self.model.value_ranges if self.store_vectors == "sq8" else None, damaged=damaged)
        return stored

    def stored_part(self, p):
        """The _rerank.StoredVectors of part p's stored vectors alone (its rows as part 0)."""
        stored = self.stored()
        return _rerank.StoredVectors([stored.arrays[p]], [stored.ids[p]], self.metric, sq8_ranges=stored.sq8_ranges,
                                     damaged=[stored.damaged[p]])

    @property
    def ranks_by_bound(self):
        """Whether a re-ranked search's candidates are ranked by quantized bounds (4-bit codes), not by the values a
        search without re-ranking returns."""
        return any(index._codes.ranks_by_bound for index in self.indexes)

    def check_open(self):
        for index in self.indexes:
            index._check_open()

    def ids_of(self, handles):
        """The ids of row handles (-1 for -1)."""
        out = np.full(handles.shape, -1, dtype=np.int64)
        part = np.where(handles >= 0, handles >> PART_SHIFT, -1)
        rows = handles & ROW_MASK
        for p, index in enumerate(self.indexes):
            hit = part == p
            if hit.any():
                out[hit] = rows[hit] if index._ids is None else index._ids[rows[hit]]
        return out


class Searcher:
    """A search with its options checked once: ``search(Q, allow=None)`` returns what ``container.search(Q, k,
    **options)`` returns, for a batch or one 1-D query (docs/ARCHITECTURE.md, "Search"). Made by ``searcher(k, ...)``
    of an Index, IVFIndex or Collection.

    Parameters
    ----------
    source : the container searched (an Index, or a collection's snapshot), which gives ``_search_parts()`` (its
        Parts), ``_allow_bitmaps(allow, parts)`` (the per-part bitmaps of a call's checked filter) and ``_fetch(vectors,
        handles, parts)`` (keys and a fetch of the caller's vectors for re-ranking candidates)
    opts : search.options.SearchOptions without ``allow`` (a call's filter)
    by_id : bool
        The container is a collection: ``allow`` and ``vectors`` are by id, results come from several segments.
    exhaustive : bool
        A flat index file: batches take the exhaustive scan (``scan.search_codes``).
    """

    def __init__(self, source, opts, *, by_id=False, exhaustive=False):
        self._source = source
        self.options = opts
        self._by_id = by_id
        self._exhaustive = exhaustive
        self._one = None
        self._one_ready = False

    def _parts_now(self):
        """The Parts searched (checked open); a collection's searcher follows its current generation here."""
        parts = self._source._search_parts()
        parts.check_open()
        return parts

    @property
    def k(self) -> int:
        return self.options.k

    def __repr__(self):
        o = self.options
        return (f"<Searcher k={o.k} n_probe={o.n_probe} rerank={o.rerank} distance={o.distance!r} "
                f"n_threads={o.n_threads}>")

    # ------------------------------------------------------------------------------------------------------ search
    def search(self, Q, *, allow=None):
        """The k best of each query (see the container's ``search`` for Q, allow and what is returned).

        Q : array-like of shape (nq, P) or (P,); allow : ids (a collection: ids only; an index: ids or a boolean mask
        over its rows) or None.
        """
        parts = self._parts_now()
        if allow is None and type(Q) is np.ndarray and Q.ndim == 1:
            one = self._one if self._one_ready else self._one_query(parts)
            if one is not None:
                found = self._search_one(one, Q, parts)
                if found is not None:
                    return found
        Q, was_1d = as_vectors(Q, "Q", parts.dim)
        Qp = parts.model._prepare(Q, "Q")
        bitmaps = None if allow is None else self._source._allow_bitmaps(self._check_allow(allow, parts), parts)
        D, I = self._search(Qp, bitmaps, parts)
        return (D[0], I[0]) if was_1d else (D, I)

    def _check_allow(self, allow, parts):
        if self._by_id:
            return _options.collection_allow(allow)
        return _options.index_allow(allow, parts.n_rows)

    def _search(self, Qp, bitmaps, parts):
        """The results of prepared queries, the call's bitmaps given (None: each part's own rows)."""
        opts = self.options
        if not parts.indexes:  # nothing to search (a collection without segments): padding
            return (np.full((Qp.shape[0], opts.k), np.inf if parts.metric == "l2" else -np.inf, dtype=np.float32),
                    np.full((Qp.shape[0], opts.k), -1, dtype=np.int64))
        if parts.exact:
            return self._search_exact(Qp, bitmaps, parts)
        if opts.rerank is not None and opts.vectors is not None:  # the caller's vectors: candidates, then re-ranked
            D, handles = self._scan(Qp, bitmaps, parts, opts.rerank, by_bound=True)
            keys, fetch = self._source._fetch(opts.vectors, handles, parts)
            return _rerank.rerank(Qp, keys, fetch, parts.metric, opts.k, n_threads=opts.n_threads)
        if opts.rerank is not None:
            return self._scan(Qp, bitmaps, parts, opts.k, rerank=opts.rerank, ids=True)
        D, I = self._scan(Qp, bitmaps, parts, opts.k, ids=True)
        if parts.metric != "l2":
            np.negative(D, out=D)  # the scan ranks by minus the score: scores descending, padding -inf
        return D, I

    def candidates(self, Q, width, *, allow=None):
        """(values, handles) of the ``width`` best rows of each query by their codes (4-bit codes: by quantized
        bound), as a re-ranked search keeps them before re-ranking (tune and distributed searches re-rank them
        themselves): values as a search returns them (distances ascending, scores descending), handles the rows of
        the parts (rows.h: part << PART_SHIFT | row; -1 past the last)."""
        parts = self._parts_now()
        Q, _ = as_vectors(Q, "Q", parts.dim)
        Qp = parts.model._prepare(Q, "Q")
        bitmaps = None if allow is None else self._source._allow_bitmaps(self._check_allow(allow, parts), parts)
        D, handles = self._scan(Qp, bitmaps, parts, width, by_bound=True)
        if parts.metric != "l2":
            np.negative(D, out=D)
        return D, handles

    # ------------------------------------------------------------------------------------------------------ stages
    def _scan(self, Qp, bitmaps, parts, width, *, rerank=None, ids=False, by_bound=False):
        """One kernel call: the ``width`` best rows of each query (re-ranked from R = ``rerank`` candidates when
        given, then their exact values); their ids with ``ids``, else their row handles."""
        opts = self.options
        nq = Qp.shape[0]
        if self._exhaustive and (nq > 1 or opts.distance == "sdc"):
            return self._scan_exhaustive(Qp, bitmaps, parts, width, rerank, ids, by_bound)
        D = np.empty((nq, width), dtype=np.float32)
        found = np.empty((nq, width), dtype=np.int64)
        if nq == 0:
            return D, found
        threads = 1 if nq == 1 else min(resolve_n_threads(opts.n_threads), nq)  # a thread per query at most
        scan_Q, rotated, rerank_Q = Qp, None, None
        if opts.distance == "sdc":
            scan_Q, rotated = self._sdc_queries(Qp, parts, threads)
            rerank_Q = Qp
        lists = parts.lists()
        n_probe = opts.n_probe or 1
        if rerank is None:
            _kernels.ivf_search(lists, scan_Q, n_probe, bitmaps, D, found, threads, None, 0, None, None, by_bound,
                                ids, rotated)
            return D, found
        stored = parts.stored()
        flags = np.empty(nq, dtype=np.int32)
        _kernels.ivf_search(lists, scan_Q, n_probe, bitmaps, D, found, threads, stored.source, rerank, rerank_Q, flags,
                            True, ids, rotated)
        if np.count_nonzero(flags):  # a bad stored row among some query's candidates: name it
            bad = flags != 0
            _, handles = self._scan(Qp[bad], bitmaps, parts, rerank, by_bound=True)
            stored.raise_bad(handles & ROW_MASK, np.where(handles >= 0, handles >> PART_SHIFT, 0))
        return D, found

    def _search_exact(self, Qp, masks, parts):
        """Parts without codes (``Parts.exact``): each part's k best by exact value (``ExactIndex``'s screened
        search), merged (ties by id)."""
        opts = self.options
        masks = parts.live if masks is None else masks
        results = [index._exact_results(Qp, min(opts.k, len(index)), mask, opts.n_threads)
                   for index, mask in zip(parts.indexes, masks) if len(index) and (mask is None or mask.any())]
        return merge_topk(results, opts.k, descending=parts.metric != "l2", n_queries=Qp.shape[0])

    def _sdc_queries(self, Qp, parts, threads):
        """(queries, rotated) scanned by SDC: an inverted file's queries replaced by their reconstructions c_l + R z
        (unit length for cosine), a flat model's by their rotated reconstructions (``QueryTables.sdc_rotated``)."""
        model = parts.model
        if not parts.ivf:
            return None, parts.tables.sdc_rotated(Qp, threads)
        lists, codes = model._encode_prepared(Qp, threads)
        scan_Q = np.ascontiguousarray(model._reconstruct(lists, codes, threads))
        if model.metric == "cosine":  # the query's reconstruction at unit length: scores estimate cosines
            lengths = np.sqrt(np.einsum("ij,ij->i", scan_Q, scan_Q, dtype=np.float64))
            scan_Q = np.ascontiguousarray(scan_Q / np.where(lengths > 0, lengths, 1.0)[:, None], dtype=np.float32)
        return scan_Q, None

    def _scan_exhaustive(self, Qp, bitmaps, parts, width, rerank, ids, by_bound):
        """The flat index file's batch scan (scan.search_codes), as ``_scan`` returns it."""
        opts = self.options
        index = parts.indexes[0]
        bitmap = parts.live[0] if bitmaps is None else bitmaps[0]
        rows = index._code_rows(bitmap)
        if rerank is None:
            D, found = search_codes(parts.tables, Qp, width, rows, distance=opts.distance, n_threads=opts.n_threads,
                                    by_bound=by_bound)
        else:
            D, found = search_codes(parts.tables, Qp, width, rows, distance=opts.distance, n_threads=opts.n_threads,
                                    rerank=(parts.stored(), rerank))
        if ids and index._ids is not None and len(index) > 0:
            out = index._ids[found]  # row -1 (padding) takes the last id here, and gets -1 back below
            np.putmask(out, found < 0, -1)
            return D, out
        return D, found

    # ----------------------------------------------------------------------------------------- one query per call
    def _one_query(self, parts):
        """The compiled search of one query for these options (built on the first 1-D query, then kept), or None
        where the general path is the way: SDC, the caller's vectors, SDC, a flat file too large for one thread."""
        opts = self.options
        one = None
        if (parts.indexes and not parts.exact and opts.distance == "adc" and opts.vectors is None
                and not (self._exhaustive and parts.n_rows >= ONE_QUERY_FLAT_ROWS and opts.n_threads != 1)):
            stored = None if opts.rerank is None else parts.stored()
            one = _kernels.IvfOneQuery(parts.lists(), opts.k, opts.n_probe or 1,
                                       None if stored is None else stored.source, opts.rerank or 0,
                                       parts.metric == "cosine")
        self._one, self._one_ready = one, True
        return one

    def _search_one(self, one, q, parts):
        """(D, I) of one 1-D query through the compiled search, or None for a query the general path must check (or
        whose candidates hold a bad stored row: the general path names it)."""
        if q.dtype != np.float32 or not q.flags.c_contiguous or q.shape[0] != parts.dim:
            return None
        largest, sqnorm = _kernels.query_checks(q)
        if not largest <= MAX_ABS_VALUE:  # NaN, inf or beyond the limit of every input: the general path names it
            return None
        norm = 0.0
        if parts.metric == "cosine":
            if not sqnorm > 0:
                return None  # a zero query: the general path names it
            norm = math.sqrt(sqnorm)
        k = self.options.k
        D = np.empty(k, dtype=np.float32)
        I = np.empty(k, dtype=np.int64)
        if one.search(q, norm, D, I) != 0:
            return None
        if self.options.rerank is None and parts.metric != "l2":
            np.negative(D, out=D)
        return D, I


class SearcherCache:
    """The searcher of a container's last ``search`` call, for the same scalar arguments: an app that calls
    ``search(q, k)`` once per query pays the checks of its options once, as with ``searcher(k).search(q)``.

    Only immutable scalar arguments make a key (with their types: k=True is not k=1); a call with anything else
    (vectors, an array) makes a new searcher every time."""

    _SCALARS = (type(None), bool, int, float, str)

    def __init__(self):
        self._key = None
        self._searcher = None

    def get(self, make, *arguments):
        """The kept searcher of these arguments, or ``make()`` (kept when the arguments are scalars)."""
        key = self._key_of(arguments)
        if key is not None and key == self._key:
            return self._searcher
        searcher = make()
        if key is not None:
            self._key, self._searcher = key, searcher
        return searcher

    def clear(self):
        self._key = self._searcher = None

    def _key_of(self, arguments):
        for a in arguments:
            if type(a) not in self._SCALARS and not isinstance(a, np.generic):
                return None
        return arguments + tuple(map(type, arguments))


def index_allow_bitmaps(index, allow):
    """The per-part bitmaps of an index's checked ``allow`` (ids, or a boolean mask over its rows): one bitmap, or
    None when every row is allowed."""
    mask = _options.allow_bitmap(allow, len(index), index._ids, index._ids_lookup)
    return [None if mask.all() else rows_bitmap(mask)]
