"""Index: a fitted quantizer joined with the codes, norm terms and ids of a base, searched by ADC or SDC.

An index holds the arrays of ``ockstore._index_rows`` (codes, norm terms) and the ids of its vectors. The arrays may be
read-only (views of a read-only memory map): an index never writes into them and never copies them. Files are written
by the writer of the model's kind (``Index.save`` finds it in ``ockstore._registry``) and opened by ``open_index``, which
hands the mapped arrays to the index class of the file's kind (docs/ARCHITECTURE.md, "Kinds of index").

This is the flat index, and the base of its variants (``ivf_index.IVFIndex``): it never imports them. What differs
between the kinds is a few hooks here (``_scan``, ``_from_encoded``, ``_row_lists``, ``_flat_scan_rows``,
``_model_summary``) and the model's own methods (``_summary``, ``_check_n_probe``, ``_encode_for_index``).
"""

from __future__ import annotations

import numpy as np

from . import _registry
from .search import rerank as _rerank, options as _search_options
from .search import scan as _search
from . import storage
from .search.codes import FASTSCAN_MAX_WORDS, ByteCodes, CodeBlocks, code_store, uses_blocks
from .search.searcher import Parts, Searcher, SearcherCache, index_allow_bitmaps, tables_of
from ._index_rows import (
    BUILD_CHUNK, NORM_ENCODINGS, STORED_VECTOR_DTYPES, check_model_for, check_store_vectors, encode_all,
    norm_scales, resolve_norm_encoding,
)
from ._stored_rows import StoredRows
from ._validation import as_ids, as_vectors, check_choice, check_int, resolve_n_threads

__all__ = ["Index"]

# Rows of codes / norms / ids read per step by Index.verify: bounds the temporaries of a check whatever N is.
_VERIFY_ROWS = 1 << 20


def _check_array(arr, name, dtype, shape):
    """An existing ndarray (np.memmap and read-only views welcome) of exactly ``dtype`` and ``shape``.

    Returned as is when C-contiguous (no copy, no read of its data), otherwise as a contiguous copy.
    """
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"{name} must be a numpy array of dtype {np.dtype(dtype)}, got {type(arr).__name__}")
    if arr.dtype != np.dtype(dtype):
        raise TypeError(f"{name} must have dtype {np.dtype(dtype)}, got {arr.dtype}")
    if arr.ndim != len(shape) or any(want is not None and got != want for got, want in zip(arr.shape, shape)):
        want = "(" + ", ".join("n" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
        raise ValueError(f"{name} must have shape {want}, got {arr.shape}")
    return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)


def _stored_kind(quantizer, vectors, store_vectors):
    """The ``store_vectors`` name of checked stored ``vectors``: ``store_vectors`` when given (it must agree with
    their dtype; "sq8" needs the quantizer's value ranges), else the name of their dtype."""
    if store_vectors is None:
        return {dt: name for name, dt in STORED_VECTOR_DTYPES.items() if name != "sq8"}[vectors.dtype.newbyteorder("<")]
    store_vectors = check_store_vectors(store_vectors, quantizer)
    if vectors.dtype.newbyteorder("<") != STORED_VECTOR_DTYPES[store_vectors]:
        raise TypeError(f"vectors must have dtype {STORED_VECTOR_DTYPES[store_vectors]} for store_vectors = "
                        f"{store_vectors!r}, got {vectors.dtype}")
    return store_vectors


class Index(StoredRows):
    """Compact codes of a base with their quantizer, searched exhaustively by ADC or SDC.

    Parameters
    ----------
    quantizer : fitted PQ, CKM, ECKM or OCKM
        Must not be refitted while the index is in use.
    codes : ndarray of shape (N, M*C), dtype uint8
        Used as given (read-only arrays and memory maps welcome; a non-contiguous array is copied). Not scanned:
        bytes >= K can only come from corruption, and such vectors are never returned (``search`` gives them an
        infinite distance).
    norms : ndarray of shape (N,) or None
        float32 for ``norm_encoding="f32"``, uint8 codes of ``quantizer.norm_levels`` for ``"u8"``, None for
        ``"none"``.
    ids : ndarray of shape (N,), dtype int64, or None
        Used as given and not scanned (the caller vouches that they are >= 0); None means 0..N-1. Other integer
        dtypes are converted and checked.
    norm_encoding : "f32", "u8" or "none"
        "none" exactly when the scores need no norm term: one codebook per subspace (PQ, CKM), or metric "ip" or
        "cosine".
    vectors : ndarray of shape (N, P), dtype float16, float32 or uint8, or None
        The stored vectors, for exact re-ranking (``search(..., rerank=R)``); used as given, like ``codes``.
    store_vectors : None, "float16", "float32", "uint8" or "sq8"
        How ``vectors`` are stored; None: named by their dtype. "sq8": uint8 codes through
        ``quantizer.value_ranges`` (docs/FORMAT.md, "sq8"), which the quantizer must have.

    Most users build with :meth:`from_vectors` or open a file with :func:`open_index`; :meth:`save` writes one. The
    low-level constructor is O(1) in N: it reads none of the arrays, and search tables are built on first search.
    """

    def __init__(self, quantizer, codes, norms, ids, norm_encoding, *, vectors=None, store_vectors=None,
                 _resource=None):
        self._attach(check_model_for(type(self), quantizer), codes, norms, ids, norm_encoding, vectors, store_vectors,
                     _resource)

    def _attach(self, quantizer, codes, norms, ids, norm_encoding, vectors, store_vectors, _resource, runs=None):
        """Check and keep the arrays of a fitted model (``__init__`` of this class and of IVFIndex). A model with at
        most 16 words per codebook keeps its codes in fast-scan blocks (``_code_blocks``): given as (N, M*C) bytes
        they are packed here, in ``runs`` (the rows of each run; None: one run), and the words must fit 4 bits --
        except the byte codes of a file written before format 1.3 (``_resource`` given), which are searched as they
        are stored (the 8-bit scan; the same results) so that opening stays O(1)."""
        norm_encoding = resolve_norm_encoding(quantizer, check_choice(norm_encoding, "norm_encoding",
                                                                       NORM_ENCODINGS))
        store = code_store(codes)
        if store is not None:  # from a file or a build: already checked (and packed)
            if store.n_words != quantizer.code_size:
                raise ValueError(f"codes hold {store.n_words} words per row, the quantizer {quantizer.code_size}")
            codes = store
        else:
            codes = _check_array(codes, "codes", np.uint8, (None, quantizer.code_size))
            if uses_blocks(quantizer.n_codewords) and _resource is None:
                if codes.size and int(codes.max()) >= FASTSCAN_MAX_WORDS:
                    row = int(np.argmax((codes >= FASTSCAN_MAX_WORDS).any(axis=1)))
                    raise ValueError(f"codes: row {row} holds a word >= {FASTSCAN_MAX_WORDS}: a model with "
                                     f"n_codewords = {quantizer.n_codewords} stores 4 bits per word")
                codes = CodeBlocks.from_codes(codes, runs)
            else:
                codes = ByteCodes(codes)
        N = codes.shape[0]
        if norm_encoding == "none":
            if norms is not None:
                raise ValueError("norms must be None when norm_encoding is 'none'")
        else:
            if norms is None:
                raise ValueError(f"norms is required when norm_encoding is {norm_encoding!r}")
            norms = _check_array(norms, "norms", np.float32 if norm_encoding == "f32" else np.uint8, (N,))
        if ids is None:
            pass  # ids are the row numbers: nothing stored, nothing allocated (opening stays O(1) in N)
        elif isinstance(ids, np.ndarray) and ids.dtype == np.int64:
            ids = _check_array(ids, "ids", np.int64, (N,))
        else:
            ids = as_ids(ids, "ids", n=N)
        if vectors is not None:
            if not isinstance(vectors, np.ndarray) or vectors.dtype not in set(STORED_VECTOR_DTYPES.values()):
                raise TypeError("vectors must be a numpy array of dtype float16, float32 or uint8, got "
                                f"{getattr(vectors, 'dtype', type(vectors).__name__)}")
            vectors = _check_array(vectors, "vectors", vectors.dtype, (N, quantizer.dim))
            store_vectors = _stored_kind(quantizer, vectors, store_vectors)
        elif store_vectors is not None:
            raise ValueError(f"store_vectors = {store_vectors!r} needs vectors")
        self._quantizer = quantizer
        self._vectors = vectors
        self._store_vectors = store_vectors
        self._id_lookup = None  # _search_options.IdLookup of the ids, built by the first search that filters by id
        self._codes = codes
        self._norms = norms
        self._ids = ids
        self._norm_encoding = norm_encoding
        self._norm_levels = (np.ascontiguousarray(quantizer.norm_levels, dtype=np.float32)
                             if norm_encoding == "u8" else None)
        self._tables = None  # the QueryTables, built on first search: opening a file stays cheap
        self._parts = None  # the search.searcher.Parts of this index, built on first search
        self._searchers = SearcherCache()  # the searcher of the last search call
        self._norm_scales = None  # cosine: 1 / ||x_hat|| per row ("f32") or per level ("u8"), built on first search
        self._resource = _resource
        self._file = None  # the storage.MappedFile of an index opened by open_index
        self._model_link = None  # a collection's segment by reference: the LinkedModel it was opened with
        self._metadata = {}  # user metadata (the file's "user" map); written again by save()
        self._closed = False

    # ----------------------------------------------------------------------------------------------- construction
    @classmethod
    def from_vectors(cls, quantizer, X, ids=None, *, norm_encoding=None, store_vectors=None, n_threads=None):
        """Encode base vectors into a new in-memory index.

        Parameters
        ----------
        quantizer : fitted PQ, CKM, ECKM, OCKM or IVF
        X : array-like of shape (N, P)
            Any real numeric dtype; encoded BUILD_CHUNK rows at a time (temporary memory bounded by the chunk).
        ids : array-like of shape (N,), integers >= 0, or None
            User ids returned by ``search``; None means 0..N-1. Duplicates are allowed and returned as stored.
        norm_encoding : "u8", "f32", "none" or None
            How the norm term ||x_hat||^2 of each vector is stored (quantizers with C >= 2): "f32" exactly (4 bytes
            per vector), "u8" as one byte through the quantizer's 256 ``norm_levels`` (distances then use the
            quantized norm term: they approximate the "f32" ones). "none" is the only choice for C = 1 (PQ, CKM).
            None (default) means "u8" for L2 with C >= 2 and "none" otherwise ("ip" and "cosine" need no norm
            term: "none" is their only choice).
        store_vectors : None, "float16", "float32", "uint8" or "sq8"
            Also keep the vectors themselves (as given, not normalised), for exact re-ranking: ``search(...,
            rerank=R)``. "uint8" only when every value is an integer in 0..255 (ValueError otherwise); "float16"
            only when every value is within +-65504; "sq8": any real values at one byte per dimension, through the
            value ranges the quantizer learned from its training vectors (values outside them are clipped to them;
            docs/FORMAT.md, "sq8"): re-ranking then computes exact distances to that stored representation.
        n_threads : int or None
            Threads for encoding; None means all cores.

        The index class is the one of the model's kind (``ockstore._registry``): with an IVF as ``quantizer`` the result is
        an inverted-file index (``ockstore.ivf_index.IVFIndex``): rows are stored list after list, and
        ``norm_encoding`` "none" is refused for metric "l2".
        """
        if cls is Index:  # the flat class stands for every kind: the model decides
            cls = _registry.of_model(quantizer).index_class
        quantizer = check_model_for(cls, quantizer)
        norm_encoding = resolve_norm_encoding(quantizer, norm_encoding)
        store_vectors = check_store_vectors(store_vectors, quantizer)
        X, _ = as_vectors(X, "X", quantizer.dim, convert=False)
        threads = resolve_n_threads(n_threads)
        ids = None if ids is None else as_ids(ids, "ids", n=X.shape[0])
        lists, codes, norms, vectors = encode_all(quantizer, X, norm_encoding, store_vectors, threads, BUILD_CHUNK)
        return cls._from_encoded(quantizer, lists, codes, norms, ids, norm_encoding, vectors, store_vectors)

    @classmethod
    def _from_encoded(cls, quantizer, lists, codes, norms, ids, norm_encoding, vectors, store_vectors):
        """The index of rows encoded by ``_index_rows.encode_all`` in the order given (``lists`` None: a flat model)."""
        return cls(quantizer, codes, norms, ids, norm_encoding, vectors=vectors, store_vectors=store_vectors)

    # -------------------------------------------------------------------------------------------------- lifecycle
    def _release_arrays(self):
        self._codes = self._norms = self._norm_levels = self._tables = self._norm_scales = self._parts = None
        self._searchers.clear()  # its searcher holds views of the arrays

    def __repr__(self):
        if self._closed:
            return "<Index closed>"
        q = self._quantizer
        return (f"<Index {q.method} N={self.ntotal} P={q.dim} M={q.n_subspaces} C={q.n_codebooks} "
                f"K={q.n_codewords} norm_encoding={self._norm_encoding!r}>")

    # ------------------------------------------------------------------------------------------------- attributes
    def __len__(self):
        self._check_open()
        return int(self._codes.shape[0])

    @property
    def dim(self) -> int:
        """P, the dimension of the vectors."""
        self._check_open()
        return int(self._quantizer.dim)

    @property
    def quantizer(self):
        self._check_open()
        return self._quantizer

    @property
    def codes(self):
        """(N, M*C) uint8, the words of each code. Byte codes: as stored (possibly a read-only view of the file), no
        cost. A model with at most 16 words per codebook stores them two per byte in fast-scan blocks: then a new
        array of them unpacked, O(N) time and N * M*C bytes on every access (read rows in steps with
        ``index.codes_of(start, stop)`` instead)."""
        self._check_open()
        return self._codes.unpack()

    def codes_of(self, start=0, stop=None):
        """Rows start..stop-1 of the codes as one-byte words, (stop - start, M*C) uint8: a view of byte codes, a new
        array of unpacked 4-bit words (O(stop - start))."""
        self._check_open()
        N = len(self)
        stop = N if stop is None else check_int(stop, "stop", min_value=0, max_value=N)
        start = check_int(start, "start", min_value=0, max_value=stop)
        return self._codes.unpack(start, stop)

    @property
    def norms(self):
        """(N,) float32 norm terms ("f32"), (N,) uint8 norm codes ("u8"), or None ("none")."""
        self._check_open()
        return self._norms

    @property
    def vectors(self):
        """(N, P) stored vectors as stored (float16, float32 or uint8; for "sq8" their uint8 codes, decoded by
        ``ockstore.quantizers.sq8.sq8_decode`` with ``quantizer.value_ranges``; possibly a read-only view), or None."""
        self._check_open()
        return self._vectors

    @property
    def store_vectors(self):
        """None, "float16", "float32", "uint8" or "sq8": how the vectors are stored for re-ranking."""
        self._check_open()
        return self._store_vectors

    @property
    def metric(self) -> str:
        """"l2", "ip" or "cosine" (the quantizer's)."""
        self._check_open()
        return self._quantizer.metric

    @property
    def norm_encoding(self) -> str:
        self._check_open()
        return self._norm_encoding

    @property
    def bytes_per_vector(self) -> int:
        """Code bytes plus norm-term bytes stored per vector (ids not counted; a model with at most 16 words per
        codebook stores two words per byte, the padding of its last block of 32 rows aside)."""
        self._check_open()
        extra = {"f32": 4, "u8": 1, "none": 0}[self._norm_encoding]
        return -(-self._code_bits() // 8) + extra

    def _code_bits(self):
        """Bits of a code as stored: 4 per word in fast-scan blocks, else 8 (a file of format < 1.3 keeps the byte
        codes of a model with K <= 16)."""
        return self._codes.bits * self._quantizer.code_size

    def info(self) -> dict:
        """A plain dict describing the index.

        Always: N, P, method, metric, M, C, K, T (beam width), bits, norm_encoding, store_vectors,
        bytes_per_vector. An index opened from a
        file adds format_version (the file's, e.g. "1.0"), has_ids, metadata (the user dict, a copy) and path.
        """
        self._check_open()
        info = {"N": len(self), **self._model_summary(), "bits": self._code_bits(), "norm_encoding": self._norm_encoding,
                "store_vectors": self.store_vectors, "bytes_per_vector": self.bytes_per_vector}
        if self._file is not None:
            major, minor = self._file.version
            info["format_version"] = f"{major}.{minor}"
            info["has_ids"] = self._ids is not None
            info["metadata"] = storage.canonical_metadata(self._metadata)
            info["path"] = self._file.path
        return info

    def _model_summary(self):
        """The part of info() that describes the model (IVFIndex adds its lists)."""
        return self._quantizer._summary()

    # ------------------------------------------------------------------------------------------------ files
    def save(self, path, metadata=None):
        """Write this index to an index file, atomically (the same writer as IndexWriter: same content, same bytes).

        Parameters
        ----------
        path : str or os.PathLike
            Replaced atomically if it exists (also when it is the file this index was opened from: the open index
            keeps reading the old contents).
        metadata : dict or None
            User metadata stored in the file; None keeps the index's own (the metadata of the file it was opened
            from, {} for an index built in memory).
        """
        self._check_open()
        writer_class = _registry.of_model(self._quantizer).writer_class  # the file layer is above this module
        with writer_class(path, self._quantizer, norm_encoding=self._norm_encoding, store_vectors=self.store_vectors,
                          metadata=self._metadata if metadata is None else metadata) as writer:
            N = len(self)
            for start in range(0, max(N, 1), BUILD_CHUNK):  # once with zero rows when N == 0: declares ids
                self._copy_rows(writer, start, min(N, start + BUILD_CHUNK))

    def _copy_rows(self, writer, start, stop, keep=None):
        """Append rows start..stop-1 (those ``keep``, a boolean mask over them, selects; all when None) to ``writer``
        (an index writer of this index's model) as they are stored: codes, norm terms, ids, stored vectors and lists,
        no re-encoding (``save``, and the merges of a collection's segments). Returns the ids appended (None when
        the ids are the row numbers)."""
        select = slice(None) if keep is None else keep

        def rows(arr):
            return None if arr is None else np.ascontiguousarray(arr[start:stop][select])

        ids = rows(self._ids)
        writer._append(rows(self._codes), rows(self._norms), ids, rows(self._vectors),
                       list_ids=self._row_lists(start, stop, select))
        return ids

    def _row_lists(self, start, stop, select):
        """The list of each of rows start..stop-1 (``select`` of them), for a writer's ``_append``: None, a flat index
        has no lists (IVFIndex gives them)."""
        return None

    def verify(self):
        """Check the whole index; returns None or raises FormatError naming the check and the section.

        For an index opened from a file: every byte of the file (padding zero, CRC-32 of every section, through the
        container), then the large sections, which opening does not read (I7): every code byte < K, every float32
        norm and stored float vector finite, every id >= 0. The small sections were checked at open (I6). A
        collection's segment that refers to its quantizer file also gets the fingerprint of its model recomputed
        (docs/FORMAT.md S5). An index built in memory gets the same checks of its arrays. Reads the arrays in blocks:
        memory stays bounded whatever N is.
        """
        self._check_open()
        where = self._file.path if self._file is not None else "<in-memory index>"
        if self._file is not None:
            self._file.verify()
        if self._model_link is not None:  # a segment by reference: its model is the one it names (FORMAT.md S5)
            self._model_link.check(self._quantizer, where)
        bad = self._codes.check(self._quantizer.n_codewords)
        if bad is not None:
            raise storage.format_error(where, *bad)
        if self._norm_encoding == "f32":
            for start in range(0, self._norms.shape[0], _VERIFY_ROWS):
                block = self._norms[start:start + _VERIFY_ROWS]
                if not np.isfinite(block).all():
                    row = int(np.argmin(np.isfinite(block)))
                    raise storage.format_error(where, "non-finite values",
                                        f"section 'norms': row {start + row} holds {float(block[row])}")
        if self._vectors is not None and self._vectors.dtype.kind == "f":
            rows = max(1, _VERIFY_ROWS // max(1, self._vectors.shape[1]))
            for start in range(0, self._vectors.shape[0], rows):
                finite = np.isfinite(self._vectors[start:start + rows]).all(axis=1)
                if not finite.all():
                    raise storage.format_error(where, "non-finite values",
                                               f"section 'vectors': row {start + int(np.argmin(finite))} holds NaN or "
                                               "infinite values")
        if self._ids is not None:
            for start in range(0, self._ids.shape[0], _VERIFY_ROWS):
                block = self._ids[start:start + _VERIFY_ROWS]
                if block.size and int(block.min()) < 0:
                    row = int(np.argmax(block < 0))
                    raise storage.format_error(where, "negative id",
                                        f"section 'ids': row {start + row} holds {int(block[row])}, ids must be >= 0")

    # ----------------------------------------------------------------------------------------------------- search
    def searcher(self, k, *, n_probe=None, distance="adc", rerank=None, vectors=None, n_threads=None, metric=None):
        """A search with its options checked once (docs/ARCHITECTURE.md, "Search"): ``searcher(k, **options).search(Q,
        allow=None)`` returns what ``search(Q, k, **options, allow=allow)`` returns, for a batch or one 1-D query;
        an app searching one query per call keeps one and pays the checks once. The arguments are :meth:`search`'s.
        The searcher reads this index: closing the index makes it unusable."""
        self._check_open()
        opts = _search_options.search_options(
            self._quantizer, self._codes.shape[0], k, n_probe=n_probe, distance=distance, rerank=rerank,
            vectors=vectors, n_threads=n_threads, stored_vectors=self._vectors is not None, metric=metric)
        return Searcher(self, opts, exhaustive=self._exhaustive_scan())

    def search(self, Q, k, *, n_probe=None, distance="adc", rerank=None, vectors=None, allow=None, n_threads=None,
               metric=None):
        """The k best base vectors of each query: by an exhaustive scan of the codes, or (an inverted file) of the
        lists nearest each query. ``searcher(k, ...).search(Q, allow=allow)``: an app searching one query per call
        keeps a :meth:`searcher` (the searcher of the last call with the same scalar arguments is kept here too).

        Parameters
        ----------
        Q : array-like of shape (nq, P) or (P,)
            Queries, any real numeric dtype (converted once to float32); NaN/inf raise ValueError. Metric "cosine"
            normalises them (a zero query raises ValueError naming its row).
        k : int >= 1
            Results per query; past the last one, results are padding (+inf for "l2", -inf for "ip" and "cosine";
            id -1). At most max(N, 65536): a larger k would only ask for padding and raises ValueError.
        n_probe : int in 1..n_lists, or None
            Inverted-file indexes (IVFIndex) scan the n_probe lists whose centroids are nearest to each query (metric
            "ip": of the largest inner product); None means the model's default (``ivf.default_n_probe``), and
            n_probe = n_lists gives exactly the exhaustive result over these codes. A flat index scans every code:
            only None (any other value raises ValueError).
        distance : "adc" or "sdc"
            "adc" (asymmetric): from the query itself to each reconstruction. "sdc" (symmetric): from the query's own
            reconstruction (the query is encoded first) to each reconstruction; for "ip" and "cosine" the score is
            then the inner product of the two reconstructions.
        rerank : int >= k, 0, or None
            Keep ``rerank`` candidates per query from the scan, compute their exact distances or scores from the
            stored vectors (``store_vectors``) or from ``vectors``, and return the best k with those exact values
            (computed in float64 from the stored representation, rounded once to float32). ValueError without
            vectors. 0: no re-ranking (the values from the codes). None (default): 10 * k candidates when there are
            vectors (stored or given), no re-ranking otherwise (docs/ARCHITECTURE.md, "Search"; ``ockstore.tune``
            finds the fastest value for a target recall).
        vectors : array-like of shape (N, P), or None
            The original vectors in row order, for ``rerank`` when the index stores none (or to use others): an
            ndarray, np.memmap, HDF5 dataset, anything indexable by an increasing array of row numbers. Only the
            candidates' rows are read.
        allow : array-like of int ids, boolean array of shape (N,), or None
            Search only these vectors: ids (any order; duplicates and unknown ids are ignored; every row holding an
            allowed id is allowed) or a mask over rows. The results are the exact top k of the allowed rows; the scan
            skips the others before any table lookup, so a selective filter makes the search cheaper. One ``allow``
            serves every query of the call.
        n_threads : int or None
            None means all cores (a search too small to gain from threads runs on the caller's). Results do not
            depend on it.
        metric : None
            The metric is the quantizer's (``index.metric``), fixed when it was fitted: None or that metric; any other
            value raises ValueError saying so.

        Returns
        -------
        D : ndarray of shape (nq, k) or (k,), dtype float32
            Metric "l2": squared L2 distances, ascending. "ip": inner products, "cosine": cosine similarities, both
            descending. Without ``rerank`` they are computed from the codes (with norm_encoding "u8" through the
            quantized norm term).
        I : ndarray of shape (nq, k) or (k,), dtype int64
            Ids of the results; among equal values the smaller id comes first. A query gets the same results
            searched alone or in a batch.
        """
        self._check_open()
        searcher = self._searchers.get(
            lambda: self.searcher(k, n_probe=n_probe, distance=distance, rerank=rerank, vectors=vectors,
                                  n_threads=n_threads, metric=metric),
            k, n_probe, distance, rerank, n_threads, metric) if vectors is None else self.searcher(
            k, n_probe=n_probe, distance=distance, rerank=rerank, vectors=vectors, n_threads=n_threads, metric=metric)
        return searcher.search(Q, allow=allow)

    def _candidates(self, Q, k, *, allow=None, **options):
        """(values, ids) of the k best rows of each query by their codes, as a re-ranked search keeps its candidates
        before re-ranking them (4-bit codes: by quantized bound): for callers that re-rank them themselves (``tune``)."""
        D, rows = self.searcher(k, rerank=0, **options).candidates(Q, k, allow=allow)
        return D, self._search_parts().ids_of(rows)

    def _tune_view(self):
        """What ``ockstore.tune`` searches (this index, which it can tune)."""
        return self

    def _search_parts(self):
        """The Parts of this index (one part: its rows), built on first search and kept."""
        parts = self._parts
        if parts is None:
            parts = self._parts = Parts(self._quantizer, [self], tables=self._query_tables())
        return parts

    def _exhaustive_scan(self):
        """Whether batches take the exhaustive scan (a flat index file; an inverted file probes lists)."""
        return True

    def _allow_bitmaps(self, allow, parts):
        """The bitmap of a search's checked ``allow`` (ids, or a boolean mask over rows); None: every row."""
        return index_allow_bitmaps(self, allow)

    def _part_rows(self, live):
        """This index's rows as one part of a search (``_kernels.IvfPartRows``): a flat index's one list of every
        row (IVFIndex: its lists), ``live`` the rows scanned by default (None: every row)."""
        rows = self._code_rows(None)
        return self._codes.part_rows(rows, np.array([0, len(self)], dtype=np.int64), live)

    def _stored_vectors(self):
        """The search.rerank.StoredVectors of the stored vectors (those of this index's search parts, built on first
        use; damage named as verify names it)."""
        return self._search_parts().stored()

    def _stored_values(self, rows):
        """``get``'s values: sq8 codes decoded to their stored representation (checked as re-ranking checks rows),
        other kinds as the mixin reads them."""
        if self._store_vectors != "sq8":
            return super()._stored_values(rows)
        block = self._stored_vectors().values_of(rows)
        _rerank.check_vector_rows(block, rows, self._damaged)
        return block

    def _query_tables(self):
        """The QueryTables of the model (``searcher.tables_of``), built on first search (opening a file stays cheap):
        two threads may both build them; one is kept."""
        tables = self._tables
        if tables is None:
            tables = self._tables = tables_of(self._quantizer)
        return tables

    def _code_rows(self, bitmap):
        """The rows of this index as a scan reads them (search.CodeRows), restricted to ``bitmap`` (or all). The norm
        terms: added for L2 ("none" exactly when the tables need none: resolve_norm_encoding); for cosine, 1/||x_hat||
        scales (docs/FORMAT.md 11.3, I20): a float32 array made once per index from "f32" terms (N values), or a
        256-entry table of the "u8" levels (with "f32", the range of the scales too, for the fast scan's threshold)."""
        encoding = self._norm_encoding
        if encoding != "none" and self._quantizer.metric == "cosine":
            scales = self._norm_scales
            if scales is None:  # two threads may both make it; one is kept
                scales = norm_scales(self._norms if encoding == "f32" else self._norm_levels)
                scale_range = (np.array([scales.min(), scales.max()], dtype=np.float64)
                               if encoding == "f32" and scales.size else None)
                self._norm_scales = scales = (scales, scale_range)
            if encoding == "f32":
                return _search.CodeRows(self._codes, self._ids, scales[0], None, None, bitmap, True, scales[1])
            return _search.CodeRows(self._codes, self._ids, None, self._norms, scales[0], bitmap, True)
        return _search.CodeRows(self._codes, self._ids, self._norms if encoding == "f32" else None,
                                self._norms if encoding == "u8" else None, self._norm_levels, bitmap)

    def _fetch(self, vectors, handles, parts):
        """(keys, fetch) of the caller's ``vectors`` for re-ranking the candidates ``handles`` (this index's rows):
        keys the rows, ``fetch(rows) -> (vectors, ids)`` reads them (``_rerank.rerank``)."""
        ids = self._ids

        def fetch(rows):
            return _rerank.gather_rows(vectors, rows), (rows if ids is None else ids[rows])

        return handles, fetch
