"""What an index stores for each vector, and how it is made from a vector: the code and the norm term in its
encoding (docs/ARCHITECTURE.md, "Indexes"). Shared by the in-memory ``Index`` and the file writer, so that both
encode the same vectors into the same bytes.

    codes   (n, M*C) uint8   the code of each vector
    norms   (n,) float32     ||x_hat||^2 of each code, when norm_encoding == "f32"
            (n,) uint8       its one-byte code, when norm_encoding == "u8": the term used is quantizer.norm_levels[code]
            absent           when norm_encoding == "none" (C = 1: PQ and CKM need no norm term)
"""

from __future__ import annotations

import numpy as np

from ._codec import scalar_encode
from ._validation import check_choice
from .errors import NotFittedError
from .quantizers import Quantizer

__all__ = ["NORM_ENCODINGS", "NORM_DTYPES", "DEFAULT_NORM_ENCODING", "BUILD_CHUNK", "check_fitted_quantizer",
           "resolve_norm_encoding", "encode_rows"]

NORM_ENCODINGS = ("f32", "u8", "none")
NORM_DTYPES = {"f32": np.dtype("<f4"), "u8": np.dtype("<u1")}

# The norm encoding of quantizers with C >= 2 when none is asked for. "u8" keeps 64-bit OCKM codes at 9 bytes per
# vector instead of 12. Measured with tools/bench_search.py --bits 64 (sift-real, 100K learn, 1M base, first 1000
# queries, OCKM M=4 C=2 T=10, ADC): recall@1/10/100 = 0.208/0.679/0.965 with "u8" against 0.211/0.678/0.963 with
# "f32" -- within the 0.5-point budget on recall@10 that the default was held to.
DEFAULT_NORM_ENCODING = "u8"

# Rows encoded per step by Index.from_vectors (and copied per step by Index.save): the memory of a build beyond its
# output arrays is bounded by a float32 copy of this many rows and their tables, whatever N is.
BUILD_CHUNK = 65536


def check_fitted_quantizer(quantizer):
    """``quantizer`` when it is a fitted PQ, CKM, ECKM or OCKM; TypeError or NotFittedError naming it otherwise."""
    if not isinstance(quantizer, Quantizer):
        raise TypeError(f"quantizer must be a PQ, CKM, ECKM or OCKM instance, got {type(quantizer).__name__}")
    if not quantizer.is_fitted:
        raise NotFittedError(f"quantizer: this {type(quantizer).__name__} is not fitted yet: call fit(X) first")
    return quantizer


def resolve_norm_encoding(quantizer, norm_encoding):
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


def encode_rows(quantizer, X, norm_encoding, n_threads):
    """Codes and norm terms of checked rows ``X`` (any real dtype, right dimension; values are checked here, before
    anything is returned). Returns ``(codes (n, M*C) uint8, norms (n,) in NORM_DTYPES[norm_encoding] or None)``."""
    codes = quantizer.encode(X, n_threads=n_threads)
    if norm_encoding == "none":
        return codes, None
    sq = quantizer.code_norms(codes, n_threads=n_threads)
    return codes, (sq if norm_encoding == "f32" else scalar_encode(sq, quantizer.norm_levels))
