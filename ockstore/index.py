"""Index: a fitted quantizer joined with the codes, norm terms and ids of a base, searched by ADC or SDC; and the
index files that hold one (write with IndexWriter / build_index / Index.save, read with open_index).

This is the one module that joins quantizers, search and the file container. An index holds

    codes   (N, M*C) uint8   the code of each base vector
    norms   (N,) float32     ||x_hat||^2 of each code, when norm_encoding == "f32"
            (N,) uint8       its one-byte code, when norm_encoding == "u8": the term used is quantizer.norm_levels[code]
            None             when norm_encoding == "none" (C = 1: PQ and CKM need no norm term)
    ids     (N,) int64       the id returned for each vector (0..N-1 unless user ids were given)

The arrays may be read-only (views of a read-only memory map): an index never writes into them and never copies them.

Index files use the container of ``ockstore.storage``; ``docs/FORMAT.md`` section 11 specifies what an index (or
quantizer) file stores in it: the ``meta`` keys and the sections rotation, codebooks, objective_history, norm_levels,
codes, norms, ids. The rule numbers quoted below (I1, I2, ...) refer to it. Opening reads the header and the small
sections only (a straight line of early returns, each failure a FormatError naming the check and the section);
``Index.verify`` reads everything else.
"""

from __future__ import annotations

import math

import msgpack
import numpy as np

from . import search as _search
from . import storage
from ._training import SubspaceLayout, scalar_encode
from ._validation import (
    as_ids,
    as_vectors,
    check_choice,
    check_int,
    resolve_n_threads,
)
from .errors import NotFittedError
from .quantizers import Quantizer, quantizer_from_state

__all__ = [
    "Index",
    "IndexWriter",
    "build_index",
    "open_index",
    "save_quantizer",
    "load_quantizer",
    "file_info",
    "NORM_ENCODINGS",
    "DEFAULT_NORM_ENCODING",
    "BUILD_CHUNK",
]

NORM_ENCODINGS = ("f32", "u8", "none")

# The norm encoding of quantizers with C >= 2 when none is asked for. "u8" keeps 64-bit OCKM codes at 9 bytes per
# vector instead of 12. Measured with tools/bench_search.py --bits 64 (sift-real, 100K learn, 1M base, first 1000
# queries, OCKM M=4 C=2 T=10, ADC): recall@1/10/100 = 0.208/0.679/0.965 with "u8" against 0.211/0.678/0.963 with
# "f32" -- within the 0.5-point budget on recall@10 that the default was held to.
DEFAULT_NORM_ENCODING = "u8"

# Rows encoded per step by Index.from_vectors (and copied per step by Index.save): the memory of a build beyond its
# output arrays is bounded by a float32 copy of this many rows and their tables, whatever N is.
BUILD_CHUNK = 65536

# Rows of codes / norms / ids read per step by Index.verify: bounds the temporaries of a check whatever N is.
_VERIFY_ROWS = 1 << 20

# docs/FORMAT.md section 11: the values of meta "kind", the methods, and the parameters of meta "params".
KIND_INDEX = "index"
KIND_QUANTIZER = "quantizer"
_METHODS = ("pq", "ckm", "eckm", "ockm")
_PARAM_KEYS = ("dim", "n_subspaces", "n_codebooks", "beam_width", "n_codewords", "n_iter", "tol", "seed")
_N_NORM_LEVELS = 256
_NORM_DTYPES = {"f32": "<f4", "u8": "<u1"}

# The header holds the user metadata plus the index's own meta and section list, which take well under 1 KiB (eight
# params, seven section entries, every int at most 9 bytes packed). User metadata is refused up front when it leaves
# less than this margin, so that a long build cannot fail at its very end because of its metadata (I11).
_HEADER_MARGIN = 4096


def _library():
    """The ``library`` string of the files this module writes (I9): the package and its version, no timestamp."""
    from . import __version__

    return f"ockstore {__version__}"


def _check_quantizer(quantizer):
    if not isinstance(quantizer, Quantizer):
        raise TypeError(f"quantizer must be a PQ, CKM, ECKM or OCKM instance, got {type(quantizer).__name__}")
    if not quantizer.is_fitted:
        raise NotFittedError(f"quantizer: this {type(quantizer).__name__} is not fitted yet: call fit(X) first")
    return quantizer


def _resolve_norm_encoding(quantizer, norm_encoding):
    """None means the default for the quantizer: DEFAULT_NORM_ENCODING for C >= 2, "none" for C = 1."""
    C = quantizer.n_codebooks
    if norm_encoding is None:
        return DEFAULT_NORM_ENCODING if C > 1 else "none"
    check_choice(norm_encoding, "norm_encoding", NORM_ENCODINGS)
    if C == 1 and norm_encoding != "none":
        raise ValueError(f"norm_encoding must be 'none' (or None) for {type(quantizer).__name__} with one codebook "
                         f"per subspace: its tables hold the whole distance, got {norm_encoding!r}")
    if C > 1 and norm_encoding == "none":
        raise ValueError(f"norm_encoding must be 'f32' or 'u8' for {type(quantizer).__name__} with "
                         f"n_codebooks={C}: its distances need the norm term, got 'none'")
    return norm_encoding


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
        "none" exactly when the quantizer has one codebook per subspace (PQ, CKM).

    Most users build with :meth:`from_vectors` or open a file with :func:`open_index`; :meth:`save` writes one. The
    low-level constructor is O(1) in N: it reads none of the arrays, and search tables are built on first search.
    """

    def __init__(self, quantizer, codes, norms, ids, norm_encoding, *, _resource=None):
        quantizer = _check_quantizer(quantizer)
        norm_encoding = _resolve_norm_encoding(quantizer, check_choice(norm_encoding, "norm_encoding",
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
            ids = as_ids(ids, N, "ids")
        self._quantizer = quantizer
        self._codes = codes
        self._norms = norms
        self._ids = ids
        self._norm_encoding = norm_encoding
        self._norm_levels = (np.ascontiguousarray(quantizer.norm_levels, dtype=np.float32)
                             if norm_encoding == "u8" else None)
        self._tables = None  # the QueryTables, built on first search: opening a file stays cheap
        self._resource = _resource
        self._file = None  # the storage.MappedFile of an index opened by open_index
        self._metadata = {}  # user metadata (the file's "user" map); written again by save()
        self._closed = False

    # ----------------------------------------------------------------------------------------------- construction
    @classmethod
    def from_vectors(cls, quantizer, X, ids=None, *, norm_encoding=None, n_threads=None):
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
            None (default) means "u8" for C >= 2 and "none" for C = 1.
        n_threads : int or None
            Threads for encoding; None means all cores.
        """
        quantizer = _check_quantizer(quantizer)
        norm_encoding = _resolve_norm_encoding(quantizer, norm_encoding)
        X, _ = as_vectors(X, "X", quantizer.dim, convert=False)
        threads = resolve_n_threads(n_threads)
        N = X.shape[0]
        ids = None if ids is None else as_ids(ids, N, "ids")
        codes = np.empty((N, quantizer.code_size), dtype=np.uint8)
        norms = None
        if norm_encoding == "f32":
            norms = np.empty(N, dtype=np.float32)
        elif norm_encoding == "u8":
            norms = np.empty(N, dtype=np.uint8)
            levels = quantizer.norm_levels
        for start in range(0, N, BUILD_CHUNK):
            stop = min(N, start + BUILD_CHUNK)
            chunk_codes = quantizer.encode(X[start:stop], n_threads=threads)
            codes[start:stop] = chunk_codes
            if norms is not None:
                sq = quantizer.code_norms(chunk_codes, n_threads=threads)
                norms[start:stop] = sq if norm_encoding == "f32" else scalar_encode(sq, levels)
        return cls(quantizer, codes, norms, ids, norm_encoding)

    # -------------------------------------------------------------------------------------------------- lifecycle
    def close(self):
        """Release the arrays (and the file behind them, if any). Idempotent; any later use raises ValueError."""
        if self._closed:
            return
        self._closed = True
        self._codes = self._norms = self._ids = self._norm_levels = None
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
            raise ValueError("I/O operation on a closed index")

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
        return storage._canonical(self._metadata)

    def info(self) -> dict:
        """A plain dict describing the index.

        Always: N, P, method, M, C, K, T (beam width), bits, norm_encoding, bytes_per_vector. An index opened from a
        file adds format_version (the file's, e.g. "1.0"), has_ids, metadata (the user dict, a copy) and path.
        """
        self._check_open()
        info = {"N": len(self), **_quantizer_summary(self._quantizer), "norm_encoding": self._norm_encoding,
                "bytes_per_vector": self.bytes_per_vector}
        if self._file is not None:
            major, minor = self._file.version
            info["format_version"] = f"{major}.{minor}"
            info["has_ids"] = self._ids is not None
            info["metadata"] = storage._canonical(self._metadata)
            info["path"] = self._file.path
        return info

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
        writer = IndexWriter(path, self._quantizer, norm_encoding=self._norm_encoding,
                             metadata=self._metadata if metadata is None else metadata)
        with writer:
            N = len(self)
            for start in range(0, max(N, 1), BUILD_CHUNK):  # once with zero rows when N == 0: declares ids
                stop = min(N, start + BUILD_CHUNK)
                writer._append(
                    np.ascontiguousarray(self._codes[start:stop]),
                    None if self._norms is None else np.ascontiguousarray(self._norms[start:stop]),
                    None if self._ids is None else np.ascontiguousarray(self._ids[start:stop]),
                )

    def verify(self):
        """Check the whole index; returns None or raises FormatError naming the check and the section.

        For an index opened from a file: every byte of the file (padding zero, CRC-32 of every section, through the
        container), then the large sections, which opening does not read (I7): every code byte < K, every float32
        norm finite, every id >= 0. The small sections were checked at open (I6). An index built in memory gets the
        same checks of its arrays. Reads the arrays in blocks: memory stays bounded whatever N is.
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
                raise storage._fail(where, "code out of range",
                                    f"section 'codes': row {start + row}, byte {byte} holds {int(block[row, byte])}, "
                                    f"codes must be < K = {K}")
        if self._norm_encoding == "f32":
            for start in range(0, self._norms.shape[0], _VERIFY_ROWS):
                block = self._norms[start:start + _VERIFY_ROWS]
                if not np.isfinite(block).all():
                    row = int(np.argmin(np.isfinite(block)))
                    raise storage._fail(where, "non-finite values",
                                        f"section 'norms': row {start + row} holds {float(block[row])}")
        if self._ids is not None:
            for start in range(0, self._ids.shape[0], _VERIFY_ROWS):
                block = self._ids[start:start + _VERIFY_ROWS]
                if block.size and int(block.min()) < 0:
                    row = int(np.argmax(block < 0))
                    raise storage._fail(where, "negative id",
                                        f"section 'ids': row {start + row} holds {int(block[row])}, ids must be >= 0")

    # ----------------------------------------------------------------------------------------------------- search
    def search(self, Q, k, distance="adc", n_threads=None):
        """The k nearest base vectors of each query, by an exhaustive scan of the codes.

        Parameters
        ----------
        Q : array-like of shape (nq, P) or (P,)
            Queries, any real numeric dtype (converted once to float32); NaN/inf raise ValueError.
        k : int >= 1
            Results per query; past the N-th, results are (inf, -1).
        distance : "adc" or "sdc"
            "adc" (asymmetric): distance from the query itself to each reconstruction. "sdc" (symmetric): from the
            query's own reconstruction (the query is encoded first) to each reconstruction.
        n_threads : int or None
            None means all cores. Results do not depend on it.

        Returns
        -------
        D : ndarray of shape (nq, k) or (k,), dtype float32
            Squared L2 distances, ascending. With norm_encoding "u8" they use the quantized norm term, so they
            approximate the "f32" distances.
        I : ndarray of shape (nq, k) or (k,), dtype int64
            Ids of the results; among equal distances the smaller id comes first. A query gets the same results
            searched alone or in a batch.
        """
        self._check_open()
        k = check_int(k, "k", min_value=1)
        distance = check_choice(distance, "distance", ("adc", "sdc"))
        threads = resolve_n_threads(n_threads)
        Q, was_1d = as_vectors(Q, "Q", self._quantizer.dim)
        tables = self._tables
        if tables is None:  # first search: two threads may both build them; one is kept
            tables = self._tables = _search.QueryTables(self._quantizer)
        D, I = _search.search_codes(
            tables, Q, k, self._codes, self._ids, distance=distance,
            norms=self._norms if self._norm_encoding == "f32" else None,
            norm_codes=self._norms if self._norm_encoding == "u8" else None,
            norm_levels=self._norm_levels, n_threads=threads,
        )
        if was_1d:
            return D[0], I[0]
        return D, I


# ====================================================================================================================
# index files: writing


def _check_user_metadata(metadata, name="metadata"):
    """A canonical copy of the user metadata (None means {}), checked as the container will check it (R24:
    TypeError) and small enough to leave room for the index's own header (I11: ValueError). Nothing is written."""
    if metadata is None:
        return {}
    storage._check_metadata(metadata, name)
    user = storage._canonical(metadata)  # a copy: later changes by the caller do not reach the file
    size = len(msgpack.packb(user, use_bin_type=True))
    if size > storage.MAX_HEADER_BYTES - _HEADER_MARGIN:
        raise ValueError(f"{name} takes {size} bytes packed; at most {storage.MAX_HEADER_BYTES - _HEADER_MARGIN} "
                         f"fit in a file header (MAX_HEADER_BYTES = {storage.MAX_HEADER_BYTES} less {_HEADER_MARGIN} "
                         "for the index's own entries): store large data elsewhere")
    return user


def _quantizer_meta(kind, quantizer):
    """The meta map of a quantizer or index file (I1, I2, I9), as Python scalars."""
    q = quantizer
    params = {
        "dim": int(q.dim),
        "n_subspaces": int(q.n_subspaces),
        "n_codebooks": int(q.n_codebooks),
        "beam_width": int(q.beam_width),
        "n_codewords": int(q.n_codewords),
        "n_iter": int(q.n_iter),
        "tol": float(q.tol),
        "seed": q.get_params()["seed"],
    }
    return {"kind": kind, "library": _library(), "method": q.method, "params": params}


def _put_quantizer_sections(writer, quantizer):
    """rotation (not for PQ), codebooks, objective_history, norm_levels (C >= 2), in this order (I4, I5)."""
    if quantizer.rotation is not None:
        writer.put("rotation", np.ascontiguousarray(quantizer.rotation, dtype="<f4"))
    writer.put("codebooks", np.ascontiguousarray(quantizer.codebooks, dtype="<f4"))
    writer.put("objective_history", np.ascontiguousarray(quantizer.objective_history, dtype="<f8"))
    if quantizer.norm_levels is not None:
        writer.put("norm_levels", np.ascontiguousarray(quantizer.norm_levels, dtype="<f4"))


class IndexWriter:
    """Build an index file from chunks of vectors, with memory bounded by the chunk, not by N.

    Each :meth:`add` encodes its chunk and appends the codes (and norm terms, and ids) to hidden temporary sibling
    files; :meth:`close` writes the index file and renames it into place atomically (docs/FORMAT.md R21): until then
    nothing appears under ``path``, and an existing file there is untouched. Used as a context manager, leaving the
    block normally closes (commits); leaving it with an exception aborts (no file under ``path``, an older file there
    untouched, temporary files removed). A writer closed without any ``add`` writes a valid empty index.

    Parameters
    ----------
    path : str or os.PathLike
        The index file to write; its folder must exist.
    quantizer : fitted PQ, CKM, ECKM or OCKM
        Its model is captured when the writer is created (refitting it afterwards does not affect this file).
    norm_encoding : "u8", "f32", "none" or None
        As for :meth:`Index.from_vectors`: None means "u8" for C >= 2 and "none" for C = 1.
    metadata : dict or None
        User metadata stored in the file (str keys; None, bool, int, float, str, bytes, lists and dicts of these).
        TypeError for other values, ValueError when it would not fit in the header (about 16 MiB), both raised here,
        before anything is written.
    n_threads : int or None
        Threads for encoding; None means all cores.

    Attributes
    ----------
    ntotal : int
        Vectors added so far (still readable after close).
    path : str
    closed : bool

    Any other use after :meth:`close` or :meth:`abort` raises ValueError. A writer garbage-collected without
    :meth:`close` writes nothing (its temporary files are removed). Not thread-safe: one writer, one thread.
    """

    def __init__(self, path, quantizer, *, norm_encoding=None, metadata=None, n_threads=None):
        quantizer = _check_quantizer(quantizer)
        self._norm_encoding = _resolve_norm_encoding(quantizer, norm_encoding)
        self._user = _check_user_metadata(metadata)
        self._threads = resolve_n_threads(n_threads)
        params, arrays = quantizer._get_state()
        # A private quantizer over the same (read-only) arrays: a refit of the caller's object replaces its arrays,
        # so it cannot mix two models in one file.
        self._quantizer = quantizer_from_state(params, arrays)
        self._state = "open"  # "open", "committed" or "aborted"
        self._ntotal = 0
        self._has_ids = None  # decided by the first add
        writer = storage.FileWriter(path)  # checks the path; creates nothing yet
        _put_quantizer_sections(writer, self._quantizer)
        writer.declare_growing("codes", "<u1", (self._quantizer.code_size,))
        if self._norm_encoding != "none":
            writer.declare_growing("norms", _NORM_DTYPES[self._norm_encoding])
        self._writer = writer

    # ---- attributes

    @property
    def path(self) -> str:
        return self._writer.path

    @property
    def ntotal(self) -> int:
        """The number of vectors added so far."""
        return self._ntotal

    @property
    def closed(self) -> bool:
        return self._state != "open"

    @property
    def norm_encoding(self) -> str:
        return self._norm_encoding

    def __repr__(self):
        return f"<IndexWriter {self.path!r} {self._state}, {self._ntotal} vectors>"

    def __enter__(self):
        self._check_open()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.abort()
        elif self._state == "open":
            self.close()
        return False

    def _check_open(self):
        if self._state != "open":
            what = "closed" if self._state == "committed" else "aborted"
            raise ValueError(f"I/O operation on a {what} IndexWriter ({self.path!r})")

    # ---- building

    def add(self, X, ids=None):
        """Encode a chunk of vectors and append it.

        Parameters
        ----------
        X : array-like of shape (n, P) or (P,)
            Any real numeric dtype, converted to float32 step by step; n may be 0. NaN/inf raise ValueError.
        ids : array-like of shape (n,), integers >= 0 (int64 range), or None
            Either every add gives ids or none does (ValueError naming ids otherwise); without ids, vectors are
            numbered 0..N-1 in the order they were added.

        A chunk that is refused (ValueError or TypeError) leaves the writer as it was: nothing of it is appended
        and further chunks can be added.
        """
        self._check_open()
        X, _ = as_vectors(X, "X", self._quantizer.dim, convert=False)
        n = X.shape[0]
        if ids is not None:
            if not isinstance(ids, np.ndarray) and np.size(ids) == 0:
                ids = np.empty(np.shape(ids), dtype=np.int64)  # an empty list has no integer dtype of its own
            ids = as_ids(ids, n, "ids")
        self._check_ids_given(ids is not None)
        codes = self._quantizer.encode(X, n_threads=self._threads)  # checks every value before anything is appended
        norms = None
        if self._norm_encoding != "none":
            sq = self._quantizer.code_norms(codes, n_threads=self._threads)
            norms = sq if self._norm_encoding == "f32" else scalar_encode(sq, self._quantizer.norm_levels)
        self._append(codes, norms, ids)

    def _check_ids_given(self, given):
        if self._has_ids is not None and given != self._has_ids:
            if given:
                raise ValueError("ids: earlier chunks were added without ids; give ids with every chunk or with none")
            raise ValueError("ids: earlier chunks were added with ids; give ids with every chunk or with none")

    def _append(self, codes, norms, ids):
        """Append checked rows: codes (n, M*C) uint8, norms (n,) of the norm dtype or None, ids (n,) int64 or None.
        No input validation beyond the consistency of ids with earlier chunks."""
        self._check_open()
        self._check_ids_given(ids is not None)
        if self._has_ids is None:
            self._has_ids = ids is not None
            if self._has_ids:
                self._writer.declare_growing("ids", "<i8")
        try:
            self._writer.append("codes", codes)
            if norms is not None:
                self._writer.append("norms", norms)
            if ids is not None:
                self._writer.append("ids", ids)
        except BaseException:
            self.abort()  # the sections may now disagree on their row counts: this writer cannot go on
            raise
        self._ntotal += codes.shape[0]

    # ---- finishing

    def close(self):
        """Write the index file and put it in place atomically. Idempotent after success; ValueError after abort.

        An error while writing aborts the writer (nothing under ``path``, an older file there untouched) and
        propagates.
        """
        if self._state == "committed":
            return
        self._check_open()
        meta = _quantizer_meta(KIND_INDEX, self._quantizer)
        meta.update(ntotal=self._ntotal, norm_encoding=self._norm_encoding, has_ids=bool(self._has_ids))
        try:
            self._writer.commit(meta, self._user)
        except BaseException:
            self.abort()
            raise
        self._state = "committed"

    def abort(self):
        """Discard everything: temporary files removed, nothing written under ``path``. Idempotent; a no-op after
        a successful close."""
        if self._state != "open":
            return
        self._state = "aborted"
        self._writer.abort()


def build_index(path, quantizer, X, ids=None, *, norm_encoding=None, metadata=None, n_threads=None,
                chunk_size=100_000):
    """Encode a whole base into an index file in one call (an IndexWriter fed ``chunk_size`` rows at a time).

    Parameters
    ----------
    path, quantizer, norm_encoding, metadata, n_threads
        As for :class:`IndexWriter`.
    X : array-like of shape (N, P)
        Any real numeric dtype; a np.memmap (or any ndarray) is read ``chunk_size`` rows at a time, so memory stays
        bounded by the chunk (other array-likes are converted to an ndarray first).
    ids : array-like of shape (N,), integers >= 0, or None
    chunk_size : int >= 1
        Rows encoded per step. The file does not depend on it.

    Writes atomically: on any error nothing appears under ``path`` and an older file there is untouched.
    """
    chunk_size = check_int(chunk_size, "chunk_size", min_value=1)
    quantizer = _check_quantizer(quantizer)
    X, _ = as_vectors(X, "X", quantizer.dim, convert=False)
    N = X.shape[0]
    if ids is not None:
        ids = np.asarray(ids) if not isinstance(ids, np.ndarray) else ids
        if ids.dtype.kind == "b" or ids.dtype.kind not in "iu":
            raise TypeError(f"ids must be an integer array, got dtype {ids.dtype}")
        if ids.ndim != 1 or ids.shape[0] != N:
            raise ValueError(f"ids must have shape ({N},) to match the vectors, got {ids.shape}")
    with IndexWriter(path, quantizer, norm_encoding=norm_encoding, metadata=metadata, n_threads=n_threads) as w:
        for start in range(0, max(N, 1), chunk_size):  # once with zero rows when N == 0: ids given -> has_ids
            stop = min(N, start + chunk_size)
            w.add(X[start:stop], None if ids is None else ids[start:stop])


def save_quantizer(path, quantizer, *, metadata=None):
    """Write a fitted quantizer to a file of kind "quantizer" (the container of docs/FORMAT.md, no vector sections),
    atomically.

    Parameters
    ----------
    path : str or os.PathLike
    quantizer : fitted PQ, CKM, ECKM or OCKM
    metadata : dict or None
        User metadata, as for :class:`IndexWriter`.
    """
    quantizer = _check_quantizer(quantizer)
    user = _check_user_metadata(metadata)
    with storage.FileWriter(path) as writer:
        _put_quantizer_sections(writer, quantizer)
        writer.commit(_quantizer_meta(KIND_QUANTIZER, quantizer), user)


# ====================================================================================================================
# index files: reading (docs/FORMAT.md section 11; a straight line of early returns, each a FormatError)


def _short(value):
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class _Reader:
    """The index-layer checks of one opened container, in the order of docs/FORMAT.md section 11.4."""

    def __init__(self, mf):
        self.mf = mf
        self.path = mf.path
        self.meta = mf.meta

    def fail(self, check, detail):
        return storage._fail(self.path, check, detail)

    # ---- meta (I1-I3)

    def kind(self, accepted):
        kind = self.meta.get("kind")
        if type(kind) is not str:
            raise self.fail("bad meta", f"meta 'kind' = {_short(kind)}, expected a str: is this an ockstore index "
                                        "or quantizer file?")
        if kind not in (KIND_INDEX, KIND_QUANTIZER):
            raise self.fail("unknown kind", f"meta 'kind' = {_short(kind)}, expected 'index' or 'quantizer'")
        if kind not in accepted:
            raise self.fail("wrong kind", f"the file holds a {kind}, not an index (meta 'kind' = {kind!r}); "
                                          "load it with ockstore.load_quantizer")
        return kind

    def _int(self, where, value, lo, hi=None):
        if type(value) is not int or value < lo or (hi is not None and value > hi):
            expected = f"an int >= {lo}" if hi is None else f"an int in {lo}..{hi}"
            raise self.fail("bad meta", f"{where} = {_short(value)}, expected {expected}")
        return value

    def params(self):
        """meta 'method' and 'params' (I2); returns the params for quantizer_from_state (with 'method')."""
        method = self.meta.get("method")
        if type(method) is not str or method not in _METHODS:
            raise self.fail("bad meta", f"meta 'method' = {_short(method)}, expected one of "
                                        f"{', '.join(repr(m) for m in _METHODS)}")
        params = self.meta.get("params")
        if not isinstance(params, dict):
            raise self.fail("bad meta", f"meta 'params' = {_short(params)}, expected a map")
        for key in _PARAM_KEYS:
            if key not in params:
                raise self.fail("bad meta", f"meta 'params' has no key {key!r}")
        p = {key: params[key] for key in _PARAM_KEYS}
        P = self._int("meta 'params'['dim']", p["dim"], 1)
        self._int("meta 'params'['n_subspaces']", p["n_subspaces"], 1, P)
        self._int("meta 'params'['n_codebooks']", p["n_codebooks"], 1, 64)
        self._int("meta 'params'['beam_width']", p["beam_width"], 1)
        self._int("meta 'params'['n_codewords']", p["n_codewords"], 2, 256)
        self._int("meta 'params'['n_iter']", p["n_iter"], 1)
        tol = p["tol"]
        if type(tol) not in (int, float) or not math.isfinite(tol) or tol < 0:
            raise self.fail("bad meta", f"meta 'params'['tol'] = {_short(tol)}, expected a finite number >= 0")
        if p["seed"] is not None:
            self._int("meta 'params'['seed']", p["seed"], 0)
        if method in ("pq", "ckm") and (p["n_codebooks"], p["beam_width"]) != (1, 1):
            raise self.fail("bad meta", f"meta 'params': method {method!r} has n_codebooks = 1 and beam_width = 1, "
                                        f"got {p['n_codebooks']} and {p['beam_width']}")
        if method == "eckm" and p["beam_width"] != 1:
            raise self.fail("bad meta", f"meta 'params': method 'eckm' has beam_width = 1, got {p['beam_width']}")
        p["tol"] = float(tol)
        p["method"] = method
        return p

    def index_meta(self, p):
        """meta 'ntotal', 'norm_encoding', 'has_ids' of an index file (I3)."""
        ntotal = self._int("meta 'ntotal'", self.meta.get("ntotal"), 0)
        encoding = self.meta.get("norm_encoding")
        if type(encoding) is not str or encoding not in NORM_ENCODINGS:
            raise self.fail("bad meta", f"meta 'norm_encoding' = {_short(encoding)}, expected 'f32', 'u8' or 'none'")
        if (p["n_codebooks"] == 1) != (encoding == "none"):
            expected = "'none'" if p["n_codebooks"] == 1 else "'f32' or 'u8'"
            raise self.fail("bad meta", f"meta 'norm_encoding' = {encoding!r} with n_codebooks = {p['n_codebooks']}, "
                                        f"expected {expected}")
        has_ids = self.meta.get("has_ids")
        if type(has_ids) is not bool:
            raise self.fail("bad meta", f"meta 'has_ids' = {_short(has_ids)}, expected true or false")
        return ntotal, encoding, has_ids

    # ---- sections (I4, I5)

    def section(self, name, dtype, shape, rows=None):
        """The view of a required section of exactly ``dtype`` and ``shape`` (None in ``shape``: any length >= 1);
        ``rows``: the row count meta 'ntotal' gives."""
        if name not in self.mf.sections:
            raise self.fail("missing section", f"section {name!r} is required in this file")
        info = self.mf.section_info(name)
        if info["dtype"] != dtype:
            raise self.fail("bad section dtype", f"section {name!r}: dtype {info['dtype']!r}, expected {dtype!r}")
        got = info["shape"]
        if rows is not None and len(got) == len(shape) and got[0] != rows:
            raise self.fail("row count mismatch", f"section {name!r}: {got[0]} rows, meta 'ntotal' is {rows}")
        if len(got) != len(shape) or any(want is not None and g != want for g, want in zip(got, shape)) or (
                None in shape and got[shape.index(None)] < 1):
            want = "[" + ", ".join("n >= 1" if d is None else str(d) for d in shape) + "]"
            raise self.fail("bad section shape", f"section {name!r}: shape {list(got)}, expected {want}")
        return self.mf.sections[name]

    def absent(self, name, why):
        if name in self.mf.sections:
            raise self.fail("unexpected section", f"section {name!r} must not be present: {why}")

    def quantizer_sections(self, p):
        """The small sections, checked (I4-I6); returns the arrays for quantizer_from_state, as copies."""
        P, M, C, K = p["dim"], p["n_subspaces"], p["n_codebooks"], p["n_codewords"]
        S = -(-P // M)
        views = {}
        if p["method"] == "pq":
            self.absent("rotation", "method 'pq' has no rotation")
        else:
            views["rotation"] = self.section("rotation", "<f4", (P, P))
        views["codebooks"] = self.section("codebooks", "<f4", (M, C, K, S))
        views["objective_history"] = self.section("objective_history", "<f8", (None,))
        if C == 1:
            self.absent("norm_levels", "n_codebooks = 1 has no norm term")
        else:
            views["norm_levels"] = self.section("norm_levels", "<f4", (_N_NORM_LEVELS,))
        arrays = {name: np.array(view) for name, view in views.items()}  # copies: the model outlives the mapping
        # I6: values of the small sections.
        for name, arr in arrays.items():
            if not np.isfinite(arr).all():
                raise self.fail("non-finite values", f"section {name!r} holds NaN or infinite values")
        sizes = SubspaceLayout(P, M).sizes
        for m in range(M):
            if arrays["codebooks"][m, :, :, sizes[m]:].any():
                raise self.fail("non-zero codebook padding",
                                f"section 'codebooks': subspace {m} has {sizes[m]} dimensions, but its words have "
                                f"non-zero values in columns {sizes[m]}..{S - 1}")
        if C > 1 and (np.diff(arrays["norm_levels"]) < 0).any():
            raise self.fail("unsorted norm levels", "section 'norm_levels' is not in ascending order")
        return arrays

    def index_sections(self, p, ntotal, encoding, has_ids):
        """Views of codes, norms, ids (I4, I5); their values are checked by Index.verify (I7)."""
        codes = self.section("codes", "<u1", (ntotal, p["n_subspaces"] * p["n_codebooks"]), rows=ntotal)
        norms = ids = None
        if encoding == "none":
            self.absent("norms", "meta 'norm_encoding' is 'none'")
        else:
            norms = self.section("norms", _NORM_DTYPES[encoding], (ntotal,), rows=ntotal)
        if has_ids:
            ids = self.section("ids", "<i8", (ntotal,), rows=ntotal)
        else:
            self.absent("ids", "meta 'has_ids' is false")
        return codes, norms, ids

    def for_quantizer_file(self):
        for name in ("codes", "norms", "ids"):
            self.absent(name, "a quantizer file holds no vectors")


def _read(mf, accepted):
    """Run every open-time check of docs/FORMAT.md section 11.4 on an opened container; returns
    (kind, quantizer, (codes, norms, ids, norm_encoding) or None)."""
    reader = _Reader(mf)
    kind = reader.kind(accepted)
    p = reader.params()
    index_meta = reader.index_meta(p) if kind == KIND_INDEX else None
    arrays = reader.quantizer_sections(p)
    if kind == KIND_INDEX:
        ntotal, encoding, has_ids = index_meta
        codes, norms, ids = reader.index_sections(p, ntotal, encoding, has_ids)
        vectors = (codes, norms, ids, encoding)
    else:
        reader.for_quantizer_file()
        vectors = None
    quantizer = quantizer_from_state(p, arrays)
    return kind, quantizer, vectors


def open_index(path):
    """Open an index file read-only: O(1) in N (the header and the small sections are read; codes, norms and ids
    are views of a read-only memory map, read by searches as they scan).

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    Index
        Searchable at once; close it (or use ``with``) to release the file. Its arrays are read-only. The file may
        be replaced while open (the index keeps reading the old contents).

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    ValueError
        ``path`` is not a regular file (refused without opening it: a FIFO does not block).
    FormatError
        The file breaks a rule of docs/FORMAT.md (container or index layer), or is a quantizer file; the message
        names the file, the check and the section. Values of the large sections are checked by ``Index.verify()``.
    """
    mf = storage.open_file(path)
    try:
        _kind, quantizer, (codes, norms, ids, encoding) = _read(mf, (KIND_INDEX,))
        index = Index(quantizer, codes, norms, ids, encoding, _resource=mf)
    except BaseException:
        mf.close()
        raise
    index._file = mf
    index._metadata = mf.user
    return index


def load_quantizer(path):
    """Load the fitted quantizer of a quantizer file (written by :func:`save_quantizer`) or of an index file.

    Raises FileNotFoundError, ValueError (not a regular file) or FormatError, as :func:`open_index`. The file is
    closed before this returns: the quantizer holds copies of its arrays.
    """
    with storage.open_file(path) as mf:
        _kind, quantizer, _vectors = _read(mf, (KIND_INDEX, KIND_QUANTIZER))
    return quantizer


def file_info(path) -> dict:
    """Describe an index file or a quantizer file without loading its vectors (every open-time check runs).

    An index file gives ``open_index(path).info()`` plus ``kind: "index"``. A quantizer file gives kind
    ("quantizer"), P, method, M, C, K, T, bits, code_size, iterations, objective (the last training objective),
    format_version, metadata and path. Raises as :func:`open_index`.
    """
    with storage.open_file(path) as mf:
        kind, quantizer, vectors = _read(mf, (KIND_INDEX, KIND_QUANTIZER))
        major, minor = mf.version
        common = {"format_version": f"{major}.{minor}", "metadata": storage._canonical(mf.user), "path": mf.path}
        if kind == KIND_INDEX:
            codes, norms, ids, encoding = vectors
            index = Index(quantizer, codes, norms, ids, encoding)
            try:
                info = index.info()
            finally:
                index.close()
            return {"kind": KIND_INDEX, **info, "has_ids": ids is not None, **common}
    return {
        "kind": KIND_QUANTIZER,
        **_quantizer_summary(quantizer),
        "code_size": int(quantizer.code_size),
        "iterations": int(len(quantizer.objective_history) - 1),
        "objective": float(quantizer.objective_history[-1]),
        **common,
    }


def _quantizer_summary(q):
    """P, method, M, C, K, T, bits of a fitted quantizer (the part of info() that describes the model)."""
    return {"P": int(q.dim), "method": q.method, "M": int(q.n_subspaces), "C": int(q.n_codebooks),
            "K": int(q.n_codewords), "T": int(q.beam_width), "bits": int(q.bits)}
