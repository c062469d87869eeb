"""The one-byte quantizer of the norm term ||x_hat||^2: 256 levels learned by a one-dimensional k-means on the norm
terms of the training vectors, and the nearest level of a value (docs/ARCHITECTURE.md, "The method": an index may
store the norm term of each vector in one byte, the "+1 lookup" of the paper).
"""

from __future__ import annotations

import numpy as np

__all__ = ["fit_scalar_quantizer", "fit_norm_levels", "scalar_encode", "EVENLY_SPACED_MAX_WORDS"]

# Models with at most this many words per codebook (the fast scan's: docs/ARCHITECTURE.md, "Fast scan") get evenly
# spaced levels. The scan bounds a norm code 16 h + l by two 16-entry tables, hi[h] + lo[l], which is exact only when
# the levels are evenly spaced; with the k-means levels it falls below some levels by up to 36,000 (64-bit codes of
# SIFT1M), and every query then takes ~5x more rows into its exact stage. Evenly spaced levels over the k-means'
# range do not lose accuracy there: their RMS error on the base's norm terms is 212 against the k-means' 292 (sift-real,
# OCKM(8, 2, 10, K=16); 183 against 253 for OCKM(4, 2, 10)), the outliers beyond the range being clipped alike.
EVENLY_SPACED_MAX_WORDS = 16


def fit_scalar_quantizer(values, n_levels=256, n_iter=100):
    """Levels of a one-dimensional k-means (Lloyd) quantizer for ``values``, sorted ascending, float32.

    Initialised at evenly spaced quantiles; each step assigns every value to its nearest level (cut points halfway
    between levels) and moves each level to the mean of its values. Levels left without values keep their place.
    """
    v = np.sort(np.asarray(values, dtype=np.float64))
    if v.size == 0:
        return np.zeros(n_levels, dtype=np.float32)
    levels = np.quantile(v, (np.arange(n_levels) + 0.5) / n_levels)
    prefix = np.concatenate([[0.0], np.cumsum(v)])
    for _ in range(n_iter):
        cuts = np.searchsorted(v, (levels[1:] + levels[:-1]) / 2, side="right")
        bounds = np.concatenate([[0], cuts, [v.size]])
        counts = np.diff(bounds)
        sums = prefix[bounds[1:]] - prefix[bounds[:-1]]
        new = levels.copy()
        filled = counts > 0
        new[filled] = sums[filled] / counts[filled]
        new.sort()
        if np.array_equal(new, levels):
            break
        levels = new
    return levels.astype(np.float32)


def fit_norm_levels(values, n_codewords, n_levels=256):
    """The levels of the norm term of a model with ``n_codewords`` words per codebook: the k-means levels
    (``fit_scalar_quantizer``), or for at most EVENLY_SPACED_MAX_WORDS words, as many levels evenly spaced between
    the k-means' first and last (see EVENLY_SPACED_MAX_WORDS)."""
    # Norm terms are squared norms: >= 0 (docs/FORMAT.md I6 refuses a negative level), whatever rounding made of them.
    levels = fit_scalar_quantizer(np.maximum(np.asarray(values, dtype=np.float64), 0), n_levels)
    if n_codewords <= EVENLY_SPACED_MAX_WORDS:
        levels = np.linspace(float(levels[0]), float(levels[-1]), n_levels).astype(np.float32)
    return np.maximum(levels, 0, out=levels)


def scalar_encode(values, levels):
    """Index of the nearest level (levels sorted ascending) as uint8; ties go to the lower level."""
    cuts = (levels[1:].astype(np.float64) + levels[:-1]) / 2
    return np.searchsorted(cuts, np.asarray(values, dtype=np.float64), side="left").astype(np.uint8)
