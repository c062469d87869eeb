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

import dataclasses
import typing

import numpy as np

from . import _registry
from .search import rerank as _rerank, options as _search_options
from .search import scan as _search
from . import storage
from .search.codes import FASTSCAN_MAX_WORDS, CodeBlocks, uses_blocks
from ._index_rows import (
    BUILD_CHUNK, NORM_ENCODINGS, STORED_VECTOR_DTYPES, check_model_for, check_store_vectors, encode_all,
    norm_scales, resolve_norm_encoding,
)
from ._stored_rows import StoredRows
from ._validation import as_ids, as_vectors, check_choice, resolve_n_threads

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


# The types of the arguments whose checked options Index.search keeps: immutable scalars (an array could change in
# place between two calls and still compare equal to itself).
_KEY_TYPES = frozenset((type(None), bool, int, float, str))


class _KeptOptions(typing.NamedTuple):
    """What Index.search keeps of its last call with immutable scalar arguments: the key of those arguments
    (``_options_key``), their checked options, and ``Index._scan_runners``'s (run, one) for them."""

    key: tuple
    opts: _search_options.SearchOptions
    run: object
    one: object


def _options_key(*arguments):
    """A key of ``search``'s scalar arguments, their types included (k=True is not k=1), or None when one of them is
    not an immutable scalar (those calls are checked every time)."""
    types = tuple(map(type, arguments))
    if not _KEY_TYPES.issuperset(types):  # (one test for the usual Python scalars; numpy's are looked at one by one)
        for t in types:
            if t not in _KEY_TYPES and not issubclass(t, np.generic):
                return None
    return arguments + types


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
        if isinstance(codes, CodeBlocks):  # from a file or a build: already checked and packed
            if codes.n_words != quantizer.code_size:
                raise ValueError(f"codes hold {codes.n_words} words per row, the quantizer {quantizer.code_size}")
        else:
            codes = _check_array(codes, "codes", np.uint8, (None, quantizer.code_size))
            if uses_blocks(quantizer.n_codewords) and _resource is None:
                if codes.size and int(codes.max()) >= FASTSCAN_MAX_WORDS:
                    row = int(np.argmax((codes >= FASTSCAN_MAX_WORDS).any(axis=1)))
                    raise ValueError(f"codes: row {row} holds a word >= {FASTSCAN_MAX_WORDS}: a model with "
                                     f"n_codewords = {quantizer.n_codewords} stores 4 bits per word")
                codes = CodeBlocks.from_codes(codes, runs)
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
        self._stored = None  # the _rerank.StoredRows of the vectors, built by the first search that re-ranks them
        self._last_options = None  # the _KeptOptions of the last search: see search
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
        self._codes = self._norms = self._norm_levels = self._tables = self._norm_scales = self._stored = None
        self._last_options = None  # its runners hold views of the arrays

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
        """(N, M*C) uint8, the words of each code: as stored (possibly a read-only view), or, for a model with at most
        16 words per codebook (stored two per byte in fast-scan blocks), a new array of them unpacked."""
        self._check_open()
        return self._codes.unpack() if isinstance(self._codes, CodeBlocks) else self._codes

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
        return (4 if isinstance(self._codes, CodeBlocks) else 8) * self._quantizer.code_size

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
        K = self._quantizer.n_codewords
        codes = self._codes
        if isinstance(codes, CodeBlocks):
            bad_row, bad_block = codes.check(K)
            if bad_row >= 0:
                raise storage.format_error(where, "code out of range",
                                           f"section 'code_blocks': row {bad_row} holds a word >= K = {K}")
            if bad_block >= 0:
                raise storage.format_error(where, "non-zero block padding",
                                           f"section 'code_blocks': block {bad_block} has non-zero padding (its pad "
                                           "column or its rows past the end of its run)")
        else:
            for start in range(0, codes.shape[0], _VERIFY_ROWS):
                block = codes[start:start + _VERIFY_ROWS]
                if block.size and int(block.max()) >= K:
                    row, byte = np.unravel_index(int(np.argmax(block >= K)), block.shape)
                    raise storage.format_error(where, "code out of range",
                                               f"section 'codes': row {start + row}, byte {byte} holds "
                                               f"{int(block[row, byte])}, codes must be < K = {K}")
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
    def search(self, Q, k, *, n_probe=None, distance="adc", rerank=None, vectors=None, allow=None, n_threads=None,
               metric=None):
        """The k best base vectors of each query: by an exhaustive scan of the codes, or (an inverted file) of the
        lists nearest each query.

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
            "ip": of the largest inner product); None means ``ivf.default_n_probe`` (n_lists / 64 rounded up: 16 of
            1,024), and n_probe = n_lists gives exactly the exhaustive result over these codes. A flat index scans
            every code: only None (any other value raises ValueError).
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
            None means all cores. Results do not depend on it.
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
        # The checked options of the last call with the same scalar arguments: an app searching one query per call
        # pays the checks once, not per call (~3 us of ~30). Calls with vectors or allow are checked every time.
        key = None if vectors is not None or allow is not None else _options_key(k, n_probe, distance, rerank,
                                                                                   n_threads, metric)
        kept = self._last_options
        if key is None or kept is None or kept.key != key:
            opts = _search_options.search_options(
                self._quantizer, self._codes.shape[0], k, n_probe=n_probe, distance=distance, rerank=rerank,
                vectors=vectors, allow=allow, n_threads=n_threads, stored_vectors=self._vectors is not None,
                metric=metric)
            if key is None:
                return self._search(Q, opts)
            self._last_options = kept = _KeptOptions(key, opts, *self._scan_runners(opts))
        if kept.one is not None:  # one query: the compiled path, when it can take Q as it is (else None)
            found = kept.one.search(Q)
            if found is not None:
                return found
        return self._search(Q, kept.opts, kept.run)

    def _candidates(self, Q, k, **options):
        """``search(Q, k, rerank=0, **options)`` for a caller that re-ranks the results itself (a collection's
        segments, ``tune``): the same, except that a fast scan ranks them by its quantized bounds
        (``SearchOptions.by_bound``), as a search that re-ranks its own candidates does."""
        self._check_open()
        opts = _search_options.search_options(
            self._quantizer, self._codes.shape[0], k, rerank=0, stored_vectors=self._vectors is not None, **options)
        return self._search(Q, dataclasses.replace(opts, by_bound=True))

    def _search(self, Q, opts, run=None):
        """``search`` with its options checked (``_search_options.SearchOptions``); ``run``: the scan
        ``_scan_runners`` bound for them, or None."""
        Q, was_1d = as_vectors(Q, "Q", self._quantizer.dim)
        Q = self._quantizer._prepare(Q, "Q")
        bitmap = None
        if opts.allow is not None:
            mask = _search_options.allow_bitmap(opts.allow, self._codes.shape[0], self._ids, self._ids_lookup)
            if not mask.all():
                bitmap = _search.rows_bitmap(mask)
        # re-ranking from the stored vectors happens inside the scan; from the caller's vectors, on the candidates
        if run is not None:
            D, I = run(Q)
        elif opts.rerank is not None and opts.vectors is None:
            D, I = self._scan(Q, opts, bitmap, self._stored_rows(), ids=True)
        elif opts.rerank is not None:
            D, rows = self._scan(Q, opts, bitmap)
            D, I = _rerank.rerank(Q, rows, self._fetch(opts.vectors), self._quantizer.metric, opts.k,
                                  n_threads=opts.n_threads)
        else:
            D, I = self._scan(Q, opts, bitmap, ids=True)
            if self._quantizer.metric != "l2":
                np.negative(D, out=D)  # the scan ranks by minus the score: scores descending, padding -inf
        if was_1d:
            return D[0], I[0]
        return D, I

    def _scan_runners(self, opts):
        """(run, one): what ``search`` keeps with ``opts`` so that a query per call skips ``_search``'s steps, or
        (None, None). run: a function of prepared queries returning ``_search``'s (D, I) with this index's arguments
        bound once; one: an object whose ``search(q)`` returns a 1-D query's results, or None for any query it does
        not take as it is (``_kernels.IvfOneQuery``). An inverted file's (``IVFIndex._scan_runners``); a flat index's
        exhaustive scan costs too much for these steps to count."""
        return None, None

    def _scan(self, Q, opts, bitmap, stored=None, ids=False):
        """(D, rows) of the scan: the opts.width best rows of each prepared query (see ``search.search_codes``), or
        with ``stored`` (a _rerank.StoredRows of this index's vectors) the opts.k best of them by exact value; their
        ids instead of their rows with ``ids``."""
        if stored is None:
            D, rows = _search.search_codes(self._query_tables(), Q, opts.width, self._code_rows(bitmap),
                                           distance=opts.distance, n_threads=opts.n_threads, by_bound=opts.by_bound)
        else:
            D, rows = _search.search_codes(self._query_tables(), Q, opts.k, self._code_rows(bitmap),
                                           distance=opts.distance, n_threads=opts.n_threads,
                                           rerank=(stored, opts.rerank))
        if ids and self._ids is not None and self._codes.shape[0] > 0:
            found = self._ids[rows]  # row -1 (padding) takes the last id here, and gets -1 back below
            np.putmask(found, rows < 0, -1)
            return D, found
        return D, rows

    def _stored_rows(self):
        """The _rerank.StoredRows of the stored vectors (built on first use; damage named as verify names it)."""
        stored = self._stored
        if stored is None:
            stored = self._stored = _rerank.StoredRows(
                [self._vectors], [self._ids], self._quantizer.metric,
                sq8_ranges=self._quantizer.value_ranges if self._store_vectors == "sq8" else None,
                damaged=[self._damaged])
        return stored

    def _stored_values(self, rows):
        """``get``'s values: sq8 codes decoded to their stored representation (checked as re-ranking checks rows),
        other kinds as the mixin reads them."""
        if self._store_vectors != "sq8":
            return super()._stored_values(rows)
        stored = self._stored_rows()
        block = stored.values_of(rows)
        _rerank.check_vector_rows(block, rows, self._damaged)
        return block

    def _query_tables(self):
        """The QueryTables of the model, built on first search (opening a file stays cheap): two threads may both
        build them; one is kept."""
        tables = self._tables
        if tables is None:
            tables = self._tables = _search.QueryTables(self._quantizer)
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

    def _flat_scan_rows(self, bitmap):
        """The rows for one scan with the tables of the model shared by several indexes (a collection's segments,
        ``collection.scan.scan_parts``), or None when this index's rows cannot be scanned so (IVFIndex)."""
        return self._code_rows(bitmap)

    def _fetch(self, vectors):
        """``fetch`` of ``_rerank.rerank`` over this index's rows: the candidates' vectors from ``vectors`` (the
        caller's) or the stored section (whose damage is a FormatError naming the file), and their ids."""
        source = self._vectors if vectors is None else vectors
        damaged = self._damaged if source is self._vectors else None
        ids = self._ids

        def fetch(rows):
            return _rerank.gather_rows(source, rows, damaged), (rows if ids is None else ids[rows])

        return fetch
