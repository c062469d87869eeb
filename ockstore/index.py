"""Index: a fitted quantizer joined with the codes, norm terms and ids of a base, searched by ADC or SDC.

An index holds the arrays of ``ockstore._encoding`` (codes, norm terms) and the ids of its vectors. The arrays may be
read-only (views of a read-only memory map): an index never writes into them and never copies them. Files are written
by ``ockstore.indexfile.writer`` (``Index.save`` uses it) and opened by ``ockstore.indexfile.reader`` (``open_index``),
which hands the mapped arrays to this class (docs/ARCHITECTURE.md, "Indexes").
"""

from __future__ import annotations

import numpy as np

from . import _search_options
from . import search as _search
from . import storage
from ._encoding import (
    BUILD_CHUNK, NORM_ENCODINGS, STORED_VECTOR_DTYPES, check_fitted_quantizer, check_store_vectors, encode_all,
    resolve_norm_encoding,
)
from ._encoding import norm_scales as _encoding_norm_scales
from ._validation import as_ids, as_vectors, check_choice, check_k, resolve_n_threads
from .ivf import check_n_probe

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


class Index:
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

    Most users build with :meth:`from_vectors` or open a file with :func:`open_index`; :meth:`save` writes one. The
    low-level constructor is O(1) in N: it reads none of the arrays, and search tables are built on first search.
    """

    def __init__(self, quantizer, codes, norms, ids, norm_encoding, *, vectors=None, _resource=None):
        self._attach(check_fitted_quantizer(quantizer), codes, norms, ids, norm_encoding, vectors, _resource)

    def _attach(self, quantizer, codes, norms, ids, norm_encoding, vectors, _resource):
        """Check and keep the arrays of a fitted model (``__init__`` of this class and of IVFIndex)."""
        norm_encoding = resolve_norm_encoding(quantizer, check_choice(norm_encoding, "norm_encoding",
                                                                       NORM_ENCODINGS))
        codes = _check_array(codes, "codes", np.uint8, (None, quantizer.code_size))
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
        self._quantizer = quantizer
        self._vectors = vectors
        self._id_lookup = None  # _search_options.IdLookup of the ids, built by the first search that filters by id
        self._codes = codes
        self._norms = norms
        self._ids = ids
        self._norm_encoding = norm_encoding
        self._norm_levels = (np.ascontiguousarray(quantizer.norm_levels, dtype=np.float32)
                             if norm_encoding == "u8" else None)
        self._tables = None  # the QueryTables, built on first search: opening a file stays cheap
        self._norm_scales = None  # cosine: 1 / ||x_hat|| per row ("f32") or per level ("u8"), built on first search
        self._resource = _resource
        self._file = None  # the storage.MappedFile of an index opened by open_index
        self._metadata = {}  # user metadata (the file's "user" map); written again by save()
        self._closed = False

    # ----------------------------------------------------------------------------------------------- construction
    @classmethod
    def from_vectors(cls, quantizer, X, ids=None, *, norm_encoding=None, store_vectors=None, n_threads=None):
        """Encode base vectors into a new in-memory index.

        Parameters
        ----------
        quantizer : fitted PQ, CKM, ECKM or OCKM
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
        store_vectors : None, "float16", "float32" or "uint8"
            Also keep the vectors themselves (as given, not normalised), for exact re-ranking: ``search(...,
            rerank=R)``. "uint8" only when every value is an integer in 0..255 (ValueError otherwise); "float16"
            only when every value is within +-65504.
        n_threads : int or None
            Threads for encoding; None means all cores.

        With an IVF as ``quantizer`` the result is an inverted-file index (``ockstore.ivf_index.IVFIndex``): rows
        are stored list after list, and ``norm_encoding`` "none" is refused for metric "l2".
        """
        from .ivf import IVF  # the inverted file builds on this module, not the other way

        if isinstance(quantizer, IVF) and cls is Index:
            from .ivf_index import IVFIndex

            return IVFIndex.from_vectors(quantizer, X, ids, norm_encoding=norm_encoding,
                                         store_vectors=store_vectors, n_threads=n_threads)
        quantizer = check_fitted_quantizer(quantizer)
        norm_encoding = resolve_norm_encoding(quantizer, norm_encoding)
        store_vectors = check_store_vectors(store_vectors)
        X, _ = as_vectors(X, "X", quantizer.dim, convert=False)
        threads = resolve_n_threads(n_threads)
        ids = None if ids is None else as_ids(ids, "ids", n=X.shape[0])
        _, codes, norms, vectors = encode_all(quantizer, X, norm_encoding, store_vectors, threads, BUILD_CHUNK)
        return cls(quantizer, codes, norms, ids, norm_encoding, vectors=vectors)

    # -------------------------------------------------------------------------------------------------- lifecycle
    def close(self):
        """Release the arrays (and the file behind them, if any). Idempotent; any later use raises ValueError."""
        if self._closed:
            return
        self._closed = True
        self._closed_path = None if self._file is None else self._file.path  # for the advice of _check_open
        self._codes = self._norms = self._ids = self._norm_levels = self._vectors = self._id_lookup = None
        self._norm_scales = None
        self._tables = None
        self._file = None
        resource, self._resource = self._resource, None
        if resource is not None:
            resource.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self):
        self._check_open()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False

    def _check_open(self):
        if self._closed:
            path = getattr(self, "_closed_path", None)
            if path is not None:
                raise ValueError(f"I/O operation on a closed index: reopen it with ockstore.open_index({path!r})")
            raise ValueError("I/O operation on a closed index (built in memory: nothing to reopen; save() an index "
                             "before closing it to open it again with ockstore.open_index)")

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
    def ntotal(self) -> int:
        """N, the number of vectors."""
        return len(self)

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
        """(N, M*C) uint8, as stored (possibly a read-only view)."""
        self._check_open()
        return self._codes

    @property
    def norms(self):
        """(N,) float32 norm terms ("f32"), (N,) uint8 norm codes ("u8"), or None ("none")."""
        self._check_open()
        return self._norms

    @property
    def ids(self):
        """(N,) int64: the stored ids, or 0..N-1 (made on request) when none were given."""
        self._check_open()
        return self._ids if self._ids is not None else np.arange(len(self), dtype=np.int64)

    @property
    def has_ids(self) -> bool:
        """True when user ids are stored; False when the ids are the row numbers 0..N-1."""
        self._check_open()
        return self._ids is not None

    @property
    def vectors(self):
        """(N, P) stored vectors (float16, float32 or uint8, possibly a read-only view), or None."""
        self._check_open()
        return self._vectors

    @property
    def store_vectors(self):
        """None, "float16", "float32" or "uint8": how the vectors are stored for re-ranking."""
        self._check_open()
        if self._vectors is None:
            return None
        return {dt: name for name, dt in STORED_VECTOR_DTYPES.items()}[self._vectors.dtype.newbyteorder("<")]

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
        """Code bytes plus norm-term bytes stored per vector (ids not counted)."""
        self._check_open()
        extra = {"f32": 4, "u8": 1, "none": 0}[self._norm_encoding]
        return self._quantizer.code_size + extra

    @property
    def path(self):
        """The file this index was opened from (str), or None for an index built in memory."""
        self._check_open()
        return None if self._file is None else self._file.path

    @property
    def metadata(self) -> dict:
        """The user metadata: the file's user map (a copy), {} for an index built in memory."""
        self._check_open()
        return storage.canonical_metadata(self._metadata)

    def info(self) -> dict:
        """A plain dict describing the index.

        Always: N, P, method, metric, M, C, K, T (beam width), bits, norm_encoding, store_vectors,
        bytes_per_vector. An index opened from a
        file adds format_version (the file's, e.g. "1.0"), has_ids, metadata (the user dict, a copy) and path.
        """
        self._check_open()
        info = {"N": len(self), **self._model_summary(), "norm_encoding": self._norm_encoding,
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
        return _quantizer_summary(self._quantizer)

    def get(self, ids):
        """The stored vectors of ``ids``, in the order given.

        Parameters
        ----------
        ids : array-like of shape (n,) of integer ids, or one id
            Any order; an id given twice gives its row twice. Every id must be stored in the index (ValueError naming
            the unknown ones otherwise); an id stored in several rows gives its first row.

        Returns
        -------
        V : ndarray of shape (n, P), or (P,) for one id, dtype float32
            The vectors as stored (``store_vectors``), converted to float32, which holds float16 and uint8 values
            exactly: the vectors as given to the index (for "float16" rounded to float16), not normalised for
            cosine. ValueError when the index stores no vectors.
        """
        self._check_open()
        ids, was_scalar = _ids_to_get(ids)
        if self._vectors is None:
            raise ValueError("get: this index stores no vectors: build it with store_vectors='float32' (or 'float16', "
                             "'uint8') to read vectors back")
        N = len(self)
        if self._ids is None:
            found = (ids >= 0) & (ids < N)
            rows = np.where(found, ids, -1)
        else:
            found, rows = self._ids_lookup().first_rows(ids)
        if not found.all():
            raise _search_options.unknown_ids_error(ids, found, "the index")
        V = _search_options.gather_vectors(self._vectors, rows, self._damaged)
        return V[0] if was_scalar else V

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
        from .indexfile.writer import IndexWriter  # the file layer builds on this module, not the other way

        self._check_open()
        writer = IndexWriter(path, self._quantizer, norm_encoding=self._norm_encoding, store_vectors=self.store_vectors,
                             metadata=self._metadata if metadata is None else metadata)
        with writer:
            N = len(self)
            for start in range(0, max(N, 1), BUILD_CHUNK):  # once with zero rows when N == 0: declares ids
                stop = min(N, start + BUILD_CHUNK)
                writer._append(
                    np.ascontiguousarray(self._codes[start:stop]),
                    None if self._norms is None else np.ascontiguousarray(self._norms[start:stop]),
                    None if self._ids is None else np.ascontiguousarray(self._ids[start:stop]),
                    None if self._vectors is None else np.ascontiguousarray(self._vectors[start:stop]),
                )

    def verify(self):
        """Check the whole index; returns None or raises FormatError naming the check and the section.

        For an index opened from a file: every byte of the file (padding zero, CRC-32 of every section, through the
        container), then the large sections, which opening does not read (I7): every code byte < K, every float32
        norm and stored float vector finite, every id >= 0. The small sections were checked at open (I6). An index
        built in memory gets the same checks of its arrays. Reads the arrays in blocks: memory stays bounded whatever N is.
        """
        self._check_open()
        where = self._file.path if self._file is not None else "<in-memory index>"
        if self._file is not None:
            self._file.verify()
        K = self._quantizer.n_codewords
        codes = self._codes
        for start in range(0, codes.shape[0], _VERIFY_ROWS):
            block = codes[start:start + _VERIFY_ROWS]
            if block.size and int(block.max()) >= K:
                row, byte = np.unravel_index(int(np.argmax(block >= K)), block.shape)
                raise storage.format_error(where, "code out of range",
                                    f"section 'codes': row {start + row}, byte {byte} holds {int(block[row, byte])}, "
                                    f"codes must be < K = {K}")
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
    def search(self, Q, k, *, distance="adc", rerank=None, vectors=None, allow=None, n_threads=None, n_probe=None,
               metric=None):
        """The k best base vectors of each query, by an exhaustive scan of the codes.

        Parameters
        ----------
        Q : array-like of shape (nq, P) or (P,)
            Queries, any real numeric dtype (converted once to float32); NaN/inf raise ValueError. Metric "cosine"
            normalises them (a zero query raises ValueError naming its row).
        k : int >= 1
            Results per query; past the last one, results are padding (+inf for "l2", -inf for "ip" and "cosine";
            id -1). At most max(N, 65536): a larger k would only ask for padding and raises ValueError.
        distance : "adc" or "sdc"
            "adc" (asymmetric): from the query itself to each reconstruction. "sdc" (symmetric): from the query's own
            reconstruction (the query is encoded first) to each reconstruction; for "ip" and "cosine" the score is
            then the inner product of the two reconstructions.
        rerank : int >= k, or None
            Keep ``rerank`` candidates per query from the scan, compute their exact distances or scores from the
            stored vectors (``store_vectors``) or from ``vectors``, and return the best k with those exact values
            (computed in float32 from the vectors converted to float32). ValueError without vectors.
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
        n_probe : None
            Only inverted-file indexes (``IVFIndex.search``) probe lists; a flat index scans every code, and any
            other value raises ValueError.
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
        check_n_probe(n_probe, self._quantizer)  # a flat index: only None
        _search_options.check_metric(metric, self._quantizer.metric)
        Q, was_1d, k, distance, rerank, vectors, bitmap, threads = self._search_arguments(
            Q, k, distance, rerank, vectors, allow, n_threads)
        tables = self._tables
        if tables is None:  # first search: two threads may both build them; one is kept
            tables = self._tables = _search.QueryTables(self._quantizer)
        norms, norm_codes, levels, scales = self._scan_norms(tables)
        D, rows = _search.search_codes(
            tables, Q, k if rerank is None else rerank, self._codes, self._ids, distance=distance, norms=norms,
            norm_codes=norm_codes, norm_levels=levels, allow=bitmap, n_threads=threads, norm_scales=scales,
        )
        return self._search_results(Q, was_1d, k, D, rows, rerank, vectors)

    def _scan_norms(self, tables):
        """What the scan reads of the norm terms: (float32 per row or None, uint8 codes per row or None, their 256
        levels or None, whether they scale the sums). L2 with a norm term: the stored terms, added. Cosine with one:
        1 / ||x_hat|| (docs/FORMAT.md 11.3), from the "f32" terms (a float32 array made once per index, N values)
        or through a table of the 256 "u8" levels. Otherwise nothing."""
        if self._norm_encoding == "none":
            return None, None, None, False
        if tables.uses_norm_term:
            if self._norm_encoding == "f32":
                return self._norms, None, None, False
            return None, self._norms, self._norm_levels, False
        if not tables.uses_norm_scale:
            return None, None, None, False
        scales = self._norm_scales
        if scales is None:  # two threads may both make it; one is kept
            source = self._norms if self._norm_encoding == "f32" else self._norm_levels
            scales = self._norm_scales = _encoding_norm_scales(source)
        if self._norm_encoding == "f32":
            return scales, None, None, True
        return None, self._norms, scales, True

    def _search_arguments(self, Q, k, distance, rerank, vectors, allow, n_threads):
        """The checked arguments of a search (shared with IVFIndex.search): (Q prepared float32 (nq, P), was_1d, k,
        distance, rerank (the candidates the scan keeps, or None), vectors for re-ranking or None, the row bitmap
        of ``allow`` or None, threads)."""
        N = self._codes.shape[0]
        k = check_k(k, N)
        distance = check_choice(distance, "distance", ("adc", "sdc"))
        rerank = _search_options.check_rerank(rerank, k, N)
        if vectors is not None:
            vectors = _search_options.check_user_vectors(vectors, N, self._quantizer.dim)
        elif rerank is not None:
            if self._vectors is None:
                raise ValueError("rerank needs the original vectors: build the index with store_vectors=... or pass "
                                 "vectors=")
            vectors = self._vectors
        threads = None if n_threads is None else resolve_n_threads(n_threads)  # None: resolved if the scan needs it
        Q, was_1d = as_vectors(Q, "Q", self._quantizer.dim)
        Q = self._quantizer._prepare(Q, "Q")
        bitmap = None
        if allow is not None:
            mask = _search_options.allow_bitmap(allow, N, self._ids, self._ids_lookup)
            if not mask.all():
                bitmap = _search.rows_bitmap(mask)
        return Q, was_1d, k, distance, rerank, vectors, bitmap, threads

    def _search_results(self, Q, was_1d, k, D, rows, rerank, vectors):
        """What search returns, from the scan's (D, rows): re-ranked, rows mapped to ids, scores for "ip"/"cosine"."""
        metric = self._quantizer.metric
        if rerank is not None:
            source = self._damaged if vectors is self._vectors else None  # the stored section, or the caller's
            D, I = _search_options.rerank_exact(Q, rows, vectors, metric, self._ids, k, source)
        else:
            I = rows
            if self._ids is not None and self._codes.shape[0] > 0:
                I = self._ids[rows]  # row -1 (padding) takes the last id here, and gets -1 back below
                np.putmask(I, rows < 0, -1)
            if metric != "l2":
                np.negative(D, out=D)  # the scan ranks by minus the score: scores descending, padding -inf
        if was_1d:
            return D[0], I[0]
        return D, I

    def _damaged(self, check, detail):
        """The FormatError of damage found in this index's arrays (named as verify names them)."""
        return storage.format_error(self._file.path if self._file is not None else "<in-memory index>", check, detail)

    def _ids_lookup(self):
        """The IdLookup of the stored ids, built on first use (filters by id need it)."""
        lookup = self._id_lookup
        if lookup is None:
            lookup = self._id_lookup = _search_options.IdLookup(self._ids)
        return lookup


def _quantizer_summary(q):
    """P, method, metric, M, C, K, T, bits of a fitted quantizer (the part of info() that describes the model); for an
    IVF those of its fine quantizer, then n_lists."""
    from .ivf import IVF  # the inverted file builds on the quantizers, not on this module

    if isinstance(q, IVF):
        return {**_quantizer_summary(q.quantizer), "n_lists": int(q.n_lists)}
    return {"P": int(q.dim), "method": q.method, "metric": q.metric, "M": int(q.n_subspaces), "C": int(q.n_codebooks),
            "K": int(q.n_codewords), "T": int(q.beam_width), "bits": int(q.bits)}


def _ids_to_get(ids):
    """The ids of a ``get`` (``Index.get``, ``Collection.get``): (int64 1-D, was one id). Integers >= 0 (TypeError or
    ValueError naming ``ids``); an empty list is no ids."""
    arr = ids if isinstance(ids, np.ndarray) else np.asarray(ids)
    if arr.size == 0 and arr.dtype.kind == "f":
        arr = arr.astype(np.int64)  # an empty list has no integer dtype of its own
    was_scalar = arr.ndim == 0
    return as_ids(arr.reshape(1) if was_scalar else arr, "ids"), was_scalar
