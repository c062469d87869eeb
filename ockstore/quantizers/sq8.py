"""8-bit stored vectors, ``store_vectors="sq8"``: any real vectors at one byte per dimension, for exact re-ranking
(docs/FORMAT.md, "sq8"; docs/ARCHITECTURE.md, "Search").

A model learns the range of every dimension from its training data when it is fitted: ``ranges[0, p]`` and
``ranges[1, p]`` are the smallest and the largest value of dimension p among the training vectors (float32; the
vectors as given, before any normalisation for cosine, as they are stored). Every index and segment built with the
model stores its vectors through these same ranges, so segments of a collection, partitions of a Dask build and a
compaction's output hold the same bytes for the same vector.

    step_p = (hi_p - lo_p) / 255                            (float64, from the float32 lo_p and hi_p)
    code   = nearest integer to (x_p - lo_p) / step_p, ties to even, clipped to 0 .. 255   (0 when step_p == 0)
    value  = lo_p + step_p * code                           (float64: the stored representation)

Values outside [lo_p, hi_p] are clipped to the nearest end (a base vector beyond the training data's range is
stored as if it were at the edge); a dimension constant in the training data (step_p = 0) stores lo_p for every
vector. Re-ranking computes exact distances to the stored representation (``kernels/rerank.h``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["SQ8_LEVELS", "learn_value_ranges", "check_value_ranges", "sq8_steps", "sq8_encode", "sq8_decode"]

# The largest code: codes 0 .. SQ8_LEVELS are SQ8_LEVELS + 1 = 256 levels, lo_p and hi_p being the first and last.
SQ8_LEVELS = 255

# Rows read per step when learning ranges or encoding: bounds the float64 temporaries whatever the number of rows.
_ROWS_PER_STEP = 65536


def learn_value_ranges(X):
    """(2, P) float32: the smallest and largest value of each dimension of the rows ``X`` (checked, finite, any real
    dtype; at least one row)."""
    lo = hi = None
    for start in range(0, X.shape[0], _ROWS_PER_STEP):
        block = np.asarray(X[start:start + _ROWS_PER_STEP], dtype=np.float32)
        block_lo, block_hi = block.min(axis=0), block.max(axis=0)
        lo = block_lo if lo is None else np.minimum(lo, block_lo)
        hi = block_hi if hi is None else np.maximum(hi, block_hi)
    return np.stack([lo, hi]).astype(np.float32)


def check_value_ranges(ranges, dim, name="value_ranges"):
    """``ranges`` as a C-contiguous (2, dim) float32 array with finite lo <= hi in every dimension, or ValueError /
    TypeError naming ``name``."""
    arr = np.asarray(ranges)
    if arr.dtype.kind != "f":
        raise TypeError(f"{name} must hold floats, got dtype {arr.dtype}")
    if arr.shape != (2, dim):
        raise ValueError(f"{name} must have shape (2, {dim}) (lowest and highest value of each dimension), got "
                         f"{arr.shape}")
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} holds NaN or infinite values")
    bad = np.flatnonzero(arr[0] > arr[1])
    if bad.size:
        p = int(bad[0])
        raise ValueError(f"{name}: dimension {p} has lowest value {float(arr[0, p])!r} above its highest "
                         f"{float(arr[1, p])!r}")
    return arr


def sq8_steps(ranges):
    """(lo, step), each (P,) float64: the offset and the step of the stored representation lo + step * code."""
    lo = ranges[0].astype(np.float64)
    return lo, (ranges[1].astype(np.float64) - lo) / SQ8_LEVELS


def sq8_encode(X, ranges):
    """The (n, P) uint8 codes of the rows ``X`` (checked, finite, any real dtype) through ``ranges`` (module
    docstring: nearest level, ties to even, clipped to 0 .. 255)."""
    lo, step = sq8_steps(ranges)
    constant = step == 0
    safe_step = np.where(constant, 1.0, step)
    codes = np.empty(X.shape, dtype=np.uint8)
    for start in range(0, X.shape[0], _ROWS_PER_STEP):
        block = np.asarray(X[start:start + _ROWS_PER_STEP], dtype=np.float64)
        levels = np.rint((block - lo) / safe_step)
        np.clip(levels, 0, SQ8_LEVELS, out=levels)
        levels[:, constant] = 0
        codes[start:start + block.shape[0]] = levels
    return codes


def sq8_decode(codes, ranges):
    """The stored representation of ``codes`` (n, P) uint8: lo + step * code, float64."""
    lo, step = sq8_steps(ranges)
    return lo + step * np.asarray(codes, dtype=np.float64)
