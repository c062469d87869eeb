"""Index: a fitted quantizer joined with the codes, norm terms and ids of a base, searched by ADC or SDC.

This is the one module that joins quantizers and search (and, later, the file format). An index holds

    codes   (N, M*C) uint8   the code of each base vector
    norms   (N,) float32     ||x_hat||^2 of each code, when norm_encoding == "f32"
            (N,) uint8       its one-byte code, when norm_encoding == "u8": the term used is quantizer.norm_levels[code]
            None             when norm_encoding == "none" (C = 1: PQ and CKM need no norm term)
    ids     (N,) int64       the id returned for each vector (0..N-1 unless user ids were given)

The arrays may be read-only (views of a read-only memory map): an index never writes into them and never copies them.
"""

from __future__ import annotations

import numpy as np

from . import search as _search
from ._training import scalar_encode
from ._validation import (
    as_ids,
    as_vectors,
    check_choice,
    check_int,
    resolve_n_threads,
)
from .errors import NotFittedError
from .quantizers import Quantizer

__all__ = ["Index", "NORM_ENCODINGS", "DEFAULT_NORM_ENCODING", "BUILD_CHUNK"]

NORM_ENCODINGS = ("f32", "u8", "none")

# The norm encoding of quantizers with C >= 2 when none is asked for. "u8" keeps 64-bit OCKM codes at 9 bytes per
# vector instead of 12. Measured with tools/bench_search.py --bits 64 (sift-real, 100K learn, 1M base, first 1000
# queries, OCKM M=4 C=2 T=10, ADC): recall@1/10/100 = 0.208/0.679/0.965 with "u8" against 0.211/0.678/0.963 with
# "f32" -- within the 0.5-point budget on recall@10 that the default was held to.
DEFAULT_NORM_ENCODING = "u8"

# Rows encoded per step by Index.from_vectors: the memory of a build beyond its output arrays is bounded by a float32
# copy of this many rows and their tables, whatever N is.
BUILD_CHUNK = 65536


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

    Most users build with :meth:`from_vectors` (or open a file). The low-level constructor is O(1) in N apart from
    the default ids: it reads none of the arrays.
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
        self._tables = _search.QueryTables(quantizer)
        self._resource = _resource
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

    def info(self) -> dict:
        """A plain dict describing the index: N, P, method, M, C, K, T (beam width), bits, norm_encoding,
        bytes_per_vector."""
        self._check_open()
        q = self._quantizer
        return {
            "N": len(self),
            "P": int(q.dim),
            "method": q.method,
            "M": int(q.n_subspaces),
            "C": int(q.n_codebooks),
            "K": int(q.n_codewords),
            "T": int(q.beam_width),
            "bits": int(q.bits),
            "norm_encoding": self._norm_encoding,
            "bytes_per_vector": self.bytes_per_vector,
        }

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
        D, I = _search.search_codes(
            self._tables, Q, k, self._codes, self._ids, distance=distance,
            norms=self._norms if self._norm_encoding == "f32" else None,
            norm_codes=self._norms if self._norm_encoding == "u8" else None,
            norm_levels=self._norm_levels, n_threads=threads,
        )
        if was_1d:
            return D[0], I[0]
        return D, I
