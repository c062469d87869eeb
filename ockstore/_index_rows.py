"""What an index stores for each vector, and how it is made from a vector: the code and the norm term in its
encoding (docs/ARCHITECTURE.md, "Kinds of index"). Shared by the in-memory ``Index`` and the file writer, so that both
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
            exact re-ranking (``store_vectors``); for "sq8", uint8 codes through the model's value ranges
            (``ockstore.quantizers.sq8``)
"""

from __future__ import annotations

import numpy as np

from . import _registry
from .quantizers.norm_levels import scalar_encode
from .quantizers.sq8 import sq8_encode
from ._validation import check_choice, to_float32_rows
from .errors import NotFittedError

__all__ = ["NORM_ENCODINGS", "NORM_DTYPES", "DEFAULT_NORM_ENCODING", "BUILD_CHUNK", "STORE_VECTORS",
           "STORED_VECTOR_DTYPES", "EXACT_STORE_VECTORS", "check_fitted_model", "check_model_for", "resolve_norm_encoding",
           "check_store_vectors", "vectors_for_storage", "encode_rows", "encode_step", "encode_all", "norm_scales"]

NORM_ENCODINGS = ("f32", "u8", "none")
NORM_DTYPES = {"f32": np.dtype("<f4"), "u8": np.dtype("<u1")}

# What ``store_vectors`` accepts, and the dtype of the ``vectors`` section each choice writes.
STORE_VECTORS = ("float16", "float32", "uint8", "sq8")
STORED_VECTOR_DTYPES = {"float16": np.dtype("<f2"), "float32": np.dtype("<f4"), "uint8": np.dtype("<u1"),
                        "sq8": np.dtype("<u1")}
# What a file of stored vectors without a model (kind "vectors", an ExactIndex) may store: sq8 codes need the value
# ranges of a fitted model. One dtype each, so the dtype of such vectors says which they are (uint8 and sq8 share one).
EXACT_STORE_VECTORS = ("float16", "float32", "uint8")
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


def check_fitted_model(model, name="quantizer"):
    """``model`` when it is a fitted model of a known kind (PQ, CKM, ECKM, OCKM, IVF: what index files are made with);
    TypeError or NotFittedError naming ``name`` otherwise."""
    _registry.of_model(model, name)
    if not model.is_fitted:
        raise NotFittedError(f"{name}: this {type(model).__name__} is not fitted yet: call fit(X) first")
    model._check_fitted()  # an IVF also checks that its fine quantizer was not refitted since
    return model


def check_model_for(cls, model, name="quantizer"):
    """``model`` when it is a fitted model that ``cls`` (an index class, or a writer class) takes: an Index (or an
    IndexWriter) takes a PQ, CKM, ECKM or OCKM, an IVFIndex (IVFIndexWriter) an IVF, and subclasses take what their
    base takes. TypeError naming ``name`` otherwise, saying which class the model makes (``Index.from_vectors``,
    ``IndexWriter`` and ``build_index`` choose it from the model); NotFittedError for an unfitted model."""
    kind = _registry.of_model(model, name)
    if _registry.of_class(cls) is not kind:
        made = kind.writer_class if any(issubclass(cls, k.writer_class) for k in _registry.kinds()) else kind.index_class
        raise TypeError(f"{name}: a {type(model).__name__} makes {made.__name__} objects, not {cls.__name__}: build "
                        "with Index.from_vectors, IndexWriter or build_index, which choose the class from the model")
    return check_fitted_model(model, name)


def resolve_norm_encoding(model, norm_encoding):
    """None means the default for the model: DEFAULT_NORM_ENCODING when its L2 distances need the norm term (C >= 2,
    or an IVF: the norm term of its whole reconstruction c_l + R z_hat), and for metric "cosine" (its scores are
    <q, x_hat> / ||x_hat||, the norm term scaling them: docs/FORMAT.md I20; "none" for a model fitted before format
    1.3 without norm levels for the one-byte term); "none" otherwise (C = 1 with "l2", or metric "ip", whose scores
    need no norm term). An explicit choice must agree (ValueError naming norm_encoding); cosine takes any of the
    three ("none": scores <q, x_hat>, as before 1.3)."""
    needed, reason = model._norm_term_need()
    if model.metric == "cosine":
        has_levels = not model.is_fitted or model.norm_levels is not None
        if norm_encoding is None:
            return DEFAULT_NORM_ENCODING if has_levels else "none"
        check_choice(norm_encoding, "norm_encoding", NORM_ENCODINGS)
        if norm_encoding == "u8" and not has_levels:
            raise ValueError("norm_encoding 'u8' needs the quantizer's norm levels, which a cosine quantizer with one "
                             "codebook per subspace fitted before format 1.3 lacks: use 'f32', 'none', or fit it again")
        return norm_encoding
    if norm_encoding is None:
        return DEFAULT_NORM_ENCODING if needed else "none"
    check_choice(norm_encoding, "norm_encoding", NORM_ENCODINGS)
    if model.metric != "l2" and norm_encoding != "none":
        raise ValueError(f"norm_encoding must be 'none' (or None) for metric {model.metric!r}: inner products "
                         f"need no norm term, got {norm_encoding!r}")
    if needed and norm_encoding == "none":
        raise ValueError(f"norm_encoding must be 'f32' or 'u8' for {reason}, got 'none'")
    if not needed and norm_encoding != "none":
        raise ValueError(f"norm_encoding must be 'none' (or None) for {reason}, got {norm_encoding!r}")
    return norm_encoding


def check_store_vectors(store_vectors, model=None):
    """None, or one of STORE_VECTORS (ValueError naming store_vectors otherwise). "sq8" needs the value ranges of
    ``model`` (the fitted model the vectors are stored with; ValueError when it has none)."""
    if store_vectors is None:
        return None
    store_vectors = check_choice(store_vectors, "store_vectors", STORE_VECTORS)
    if store_vectors == "sq8" and model is not None and model.value_ranges is None:
        raise ValueError("store_vectors='sq8' needs the value ranges a model learns when it is fitted; this "
                         f"{type(model).__name__} has none (it was read from a file that holds none: fit it again, "
                         "or load it from the file of an index with sq8 vectors)")
    return store_vectors


def vectors_for_storage(model, X, store_vectors, name="X", first_row=0):
    """Checked rows ``X`` (any real dtype, right dimension) as the ``vectors`` section stores them: float32 or
    float16 (ValueError when a value is beyond float16's range), uint8 (ValueError unless every value is an
    integer in 0..255), or sq8 codes through ``model.value_ranges`` (values outside the ranges clipped to them).
    NaN and inf raise ValueError. The vectors are stored as given: not normalised for cosine."""
    if store_vectors == "sq8":
        return sq8_encode(to_float32_rows(X, name), model.value_ranges)
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


def encode_rows(model, X, norm_encoding, n_threads, first_row=0):
    """What an index stores for checked rows ``X`` (any real dtype, right dimension; values are checked here, before
    anything is returned; a bad row is named by its number plus ``first_row``): ``(lists (n,) int32 or None for a
    flat model, codes (n, M*C) uint8, norms (n,) in NORM_DTYPES[norm_encoding] or None)``. The norm term is
    ||x_hat||^2 of the model's reconstruction (for an IVF, of the whole c_l + R z_hat), its one-byte code through
    ``model.norm_levels`` for "u8"."""
    lists, codes, sq = model._encode_for_index(X, n_threads, first_row, norm_terms=norm_encoding != "none")
    if norm_encoding == "none":
        return lists, codes, None
    return lists, codes, (sq if norm_encoding == "f32" else scalar_encode(sq, model.norm_levels))


def encode_step(model, X, norm_encoding, store_vectors, n_threads, first_row=0):
    """What an index stores for the checked rows ``X`` of one step: ``(lists (n,) int32, or None for a flat model,
    codes, norms or None, vectors or None)``. The vectors to store are checked first: a refused value costs no
    encoding."""
    vectors = None if store_vectors is None else vectors_for_storage(model, X, store_vectors, "X", first_row)
    return (*encode_rows(model, X, norm_encoding, n_threads, first_row), vectors)


def encode_all(model, X, norm_encoding, store_vectors, n_threads, step):
    """``encode_step`` over all of the checked rows ``X``, ``step`` rows at a time, into arrays allocated at the first
    step (run once with zero rows when X has none; the memory beyond the arrays is bounded by one step): ``(lists or
    None, codes, norms or None, vectors or None)``."""
    N = X.shape[0]
    out = None
    for start in range(0, max(N, 1), step):
        stop = min(N, start + step)
        parts = encode_step(model, X[start:stop], norm_encoding, store_vectors, n_threads, start)
        if out is None:
            out = [None if part is None else np.empty((N, *part.shape[1:]), dtype=part.dtype) for part in parts]
        for whole, part in zip(out, parts):
            if whole is not None:
                whole[start:stop] = part
    return tuple(out)


def norm_scales(norms):
    """1 / ||x_hat|| of float32 norm terms ||x_hat||^2 (or of the 256 norm levels): what the scan multiplies a cosine
    score by (docs/FORMAT.md 11.3). A zero norm (a reconstruction that is 0: its score is 0 whatever the scale) gets
    scale 1. float32."""
    n = np.asarray(norms, dtype=np.float64)
    with np.errstate(divide="ignore"):
        out = np.where(n > 0, 1.0 / np.sqrt(np.maximum(n, 0.0)), 1.0)
    return np.ascontiguousarray(out, dtype=np.float32)
