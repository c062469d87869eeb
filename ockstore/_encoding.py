"""What an index stores for each vector, and how it is made from a vector: the code and the norm term in its
encoding (docs/ARCHITECTURE.md, "Indexes"). Shared by the in-memory ``Index`` and the file writer, so that both
encode the same vectors into the same bytes.

    codes   (n, M*C) uint8   the code of each vector (of its residual x - c_l for an inverted file)
    norms   (n,) float32     ||x_hat||^2 of each code, when norm_encoding == "f32" (for an inverted file the norm of
                             the whole reconstruction c_l + R z_hat)
            (n,) uint8       its one-byte code, when norm_encoding == "u8": the term used is quantizer.norm_levels[code]
            absent           when norm_encoding == "none" (C = 1 with L2: PQ and CKM need no norm term; metric "ip" needs
                             none either; "cosine" uses it as the scale 1 / ||x_hat|| of its scores, and without it
                             scores <q, x_hat> as before format 1.3; an inverted file with metric "l2" always needs
                             one)
    vectors (n, P) float16, float32 or uint8: the vectors themselves, as given, when the index stores them for
            exact re-ranking (``store_vectors``)
"""

from __future__ import annotations

import numpy as np

from ._codec import scalar_encode
from ._validation import check_choice, to_float32_rows
from .errors import NotFittedError
from .ivf import IVF
from .quantizers import Quantizer

__all__ = ["norm_scales", "NORM_ENCODINGS", "NORM_DTYPES", "DEFAULT_NORM_ENCODING", "BUILD_CHUNK", "STORE_VECTORS",
           "STORED_VECTOR_DTYPES", "check_fitted_quantizer", "check_fitted_model", "resolve_norm_encoding",
           "check_store_vectors", "vectors_for_storage", "encode_rows", "encode_ivf_rows", "encode_step", "encode_all"]

NORM_ENCODINGS = ("f32", "u8", "none")
NORM_DTYPES = {"f32": np.dtype("<f4"), "u8": np.dtype("<u1")}

# What ``store_vectors`` accepts, and the dtype of the ``vectors`` section each choice writes.
STORE_VECTORS = ("float16", "float32", "uint8")
STORED_VECTOR_DTYPES = {"float16": np.dtype("<f2"), "float32": np.dtype("<f4"), "uint8": np.dtype("<u1")}
FLOAT16_MAX = float(np.finfo(np.float16).max)

# The norm encoding of quantizers with C >= 2 when none is asked for. "u8" keeps 64-bit OCKM codes at 9 bytes per
# vector instead of 12. Measured with tools/bench_search.py --bits 64 (sift-real, 100K learn, 1M base, first 1000
# queries, OCKM M=4 C=2 T=10, ADC): recall@1/10/100 = 0.208/0.679/0.965 with "u8" against 0.211/0.678/0.963 with
# "f32" -- within the 0.5-point budget on recall@10 (the nearest neighbour among the first 10) that the default was
# held to.
DEFAULT_NORM_ENCODING = "u8"

# Rows encoded per step by Index.from_vectors (and copied per step by Index.save): the memory of a build beyond its
# output arrays is bounded by a float32 copy of this many rows and their tables, whatever N is.
BUILD_CHUNK = 65536


def check_fitted_quantizer(quantizer):
    """``quantizer`` when it is a fitted PQ, CKM, ECKM or OCKM; TypeError or NotFittedError naming it otherwise."""
    if isinstance(quantizer, IVF):
        raise TypeError("quantizer: an IVF makes an inverted-file index: build it with Index.from_vectors, "
                        "IndexWriter or build_index (ockstore.ivf_index.IVFIndex), not with the flat Index")
    if not isinstance(quantizer, Quantizer):
        raise TypeError(f"quantizer must be a PQ, CKM, ECKM or OCKM instance, got {type(quantizer).__name__}")
    if not quantizer.is_fitted:
        raise NotFittedError(f"quantizer: this {type(quantizer).__name__} is not fitted yet: call fit(X) first")
    return quantizer


def check_fitted_model(quantizer):
    """``quantizer`` when it is a fitted PQ, CKM, ECKM, OCKM or IVF (what index files are made with); TypeError or
    NotFittedError naming it otherwise."""
    if isinstance(quantizer, IVF):
        if not quantizer.is_fitted:
            raise NotFittedError("quantizer: this IVF is not fitted yet: call fit(X) first")
        quantizer._check_fitted()
        return quantizer
    if not isinstance(quantizer, Quantizer):
        raise TypeError(f"quantizer must be a PQ, CKM, ECKM, OCKM or IVF instance, got {type(quantizer).__name__}")
    return check_fitted_quantizer(quantizer)


def resolve_norm_encoding(quantizer, norm_encoding):
    """None means the default for the quantizer: DEFAULT_NORM_ENCODING for L2 with C >= 2, and for cosine (its scores
    are <q, x_hat> / ||x_hat||, the norm term scaling them; "none" when a quantizer fitted before format 1.3 has no
    norm levels for the one-byte term), "none" otherwise (C = 1 with L2, or metric "ip", whose scores need no norm
    term). An IVF with metric "l2" always needs the norm term (that of the whole reconstruction c_l + R z_hat,
    whatever C): "u8" by default, "none" refused. Cosine accepts "none" (scores <q, x_hat>, as before 1.3)."""
    is_ivf = isinstance(quantizer, IVF)
    C = 2 if is_ivf else quantizer.n_codebooks
    needs_norm = C > 1 and quantizer.metric == "l2"
    has_levels = is_ivf or C > 1 or not quantizer.is_fitted or quantizer.norm_levels is not None
    if norm_encoding is None:
        if quantizer.metric == "cosine":
            return DEFAULT_NORM_ENCODING if has_levels else "none"
        return DEFAULT_NORM_ENCODING if needs_norm else "none"
    check_choice(norm_encoding, "norm_encoding", NORM_ENCODINGS)
    if quantizer.metric == "cosine":
        if norm_encoding == "u8" and not has_levels:
            raise ValueError("norm_encoding 'u8' needs the quantizer's norm levels, which a cosine quantizer with one "
                             "codebook per subspace fitted before format 1.3 lacks: use 'f32', 'none', or fit it again")
        return norm_encoding
    if quantizer.metric != "l2" and norm_encoding != "none":
        raise ValueError(f"norm_encoding must be 'none' (or None) for metric {quantizer.metric!r}: inner products "
                         f"need no norm term, got {norm_encoding!r}")
    if is_ivf and needs_norm and norm_encoding == "none":
        raise ValueError("norm_encoding must be 'f32' or 'u8' for an IVF with metric 'l2': its distances need the "
                         "norm term of the whole reconstruction, got 'none'")
    if C == 1 and norm_encoding != "none":
        raise ValueError(f"norm_encoding must be 'none' (or None) for {type(quantizer).__name__} with one codebook "
                         f"per subspace: its tables hold the whole distance, got {norm_encoding!r}")
    if needs_norm and norm_encoding == "none":
        raise ValueError(f"norm_encoding must be 'f32' or 'u8' for {type(quantizer).__name__} with "
                         f"n_codebooks={C}: its distances need the norm term, got 'none'")
    return norm_encoding


def check_store_vectors(store_vectors):
    """None, or one of STORE_VECTORS (ValueError naming store_vectors otherwise)."""
    if store_vectors is None:
        return None
    return check_choice(store_vectors, "store_vectors", STORE_VECTORS)


def vectors_for_storage(X, store_vectors, name="X", first_row=0):
    """Checked rows ``X`` (any real dtype, right dimension) as the ``vectors`` section stores them: float32 or
    float16 (ValueError when a value is beyond float16's range) or uint8 (ValueError unless every value is an
    integer in 0..255). NaN and inf raise ValueError. The vectors are stored as given: not normalised for cosine."""
    if store_vectors == "uint8":
        if X.dtype == np.uint8:
            return np.ascontiguousarray(X)
        rows = np.asarray(X)
        if rows.dtype.kind == "f" and not np.isfinite(rows).all():
            raise ValueError(f"{name} contains NaN or infinite values")
        if rows.size and (rows.min() < 0 or rows.max() > 255 or (rows.dtype.kind == "f"
                                                                 and (rows != np.round(rows)).any())):
            bad = np.argwhere((rows < 0) | (rows > 255) | (rows != np.round(rows)))[0]
            raise ValueError(f"store_vectors='uint8' needs integers in 0..255, but {name} row "
                             f"{first_row + int(bad[0])} holds {rows[tuple(bad)]!r}")
        return rows.astype(np.uint8)
    rows = to_float32_rows(X, name)
    if store_vectors == "float16":
        big = np.abs(rows) > FLOAT16_MAX
        if big.any():
            row = first_row + int(np.argmax(big.any(axis=1)))
            raise ValueError(f"store_vectors='float16' cannot hold {name} row {row}: a value exceeds float16's range "
                             f"(+-{FLOAT16_MAX:g}); use 'float32'")
        return rows.astype(np.float16)
    return rows


def encode_rows(quantizer, X, norm_encoding, n_threads, first_row=0):
    """Codes and norm terms of checked rows ``X`` (any real dtype, right dimension; values are checked here, before
    anything is returned; a bad row is named by its number plus ``first_row``). Returns ``(codes (n, M*C) uint8,
    norms (n,) in NORM_DTYPES[norm_encoding] or None)``."""
    codes, _ = quantizer._encode_rows(X, n_threads, first_row)
    if norm_encoding == "none":
        return codes, None
    sq = quantizer.code_norms(codes, n_threads=n_threads)
    return codes, (sq if norm_encoding == "f32" else scalar_encode(sq, quantizer.norm_levels))


def encode_ivf_rows(ivf, X, norm_encoding, n_threads, first_row=0):
    """``encode_rows`` for an IVF: ``(lists (n,) int32, codes (n, M*C) uint8, norms (n,) or None)``; the norm term is
    that of the whole reconstruction, ||c_l + R z_hat||^2, its one-byte code through ``ivf.norm_levels``."""
    lists, codes, sq = ivf._encode_rows(X, n_threads, first_row, norms=norm_encoding != "none")
    if norm_encoding == "none":
        return lists, codes, None
    return lists, codes, (sq if norm_encoding == "f32" else scalar_encode(sq, ivf.norm_levels))


def encode_step(model, X, norm_encoding, store_vectors, n_threads, first_row=0):
    """What an index stores for the checked rows ``X`` of one step: ``(lists (n,) int32, or None for a flat quantizer,
    codes, norms or None, vectors or None)``. The vectors to store are checked first: a refused value costs no
    encoding."""
    vectors = None if store_vectors is None else vectors_for_storage(X, store_vectors, "X", first_row)
    if isinstance(model, IVF):
        lists, codes, norms = encode_ivf_rows(model, X, norm_encoding, n_threads, first_row)
    else:
        lists = None
        codes, norms = encode_rows(model, X, norm_encoding, n_threads, first_row)
    return lists, codes, norms, vectors


def encode_all(model, X, norm_encoding, store_vectors, n_threads, step):
    """``encode_step`` over all of the checked rows ``X``, ``step`` rows at a time, into arrays allocated once (the
    memory beyond them is bounded by one step): ``(lists or None, codes, norms or None, vectors or None)``."""
    N = X.shape[0]
    lists = np.empty(N, dtype=np.int32) if isinstance(model, IVF) else None
    codes = np.empty((N, model.code_size), dtype=np.uint8)
    norms = None if norm_encoding == "none" else np.empty(N, dtype=NORM_DTYPES[norm_encoding])
    vectors = None if store_vectors is None else np.empty((N, model.dim), dtype=STORED_VECTOR_DTYPES[store_vectors])
    for start in range(0, N, step):
        stop = min(N, start + step)
        parts = encode_step(model, X[start:stop], norm_encoding, store_vectors, n_threads, start)
        for out, part in zip((lists, codes, norms, vectors), parts):
            if out is not None:
                out[start:stop] = part
    return lists, codes, norms, vectors


def norm_scales(norms):
    """1 / ||x_hat|| of float32 norm terms ||x_hat||^2 (or of the 256 norm levels): what the scan multiplies a cosine
    score by (docs/FORMAT.md 11.3). A zero norm (a reconstruction that is 0: its score is 0 whatever the scale) gets
    scale 1. float32."""
    n = np.asarray(norms, dtype=np.float64)
    with np.errstate(divide="ignore"):
        out = np.where(n > 0, 1.0 / np.sqrt(np.maximum(n, 0.0)), 1.0)
    return np.ascontiguousarray(out, dtype=np.float32)
