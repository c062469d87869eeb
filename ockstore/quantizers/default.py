"""``default_quantizer``: the unfitted model the library recommends for a base of ``n_vectors`` vectors of ``dim``
dimensions (docs/ARCHITECTURE.md, "Defaults the library chooses"; the measurements behind each constant in
docs/results.md, "The model the library picks").

The rule, in three parts, each a function of the dimension or of the number of vectors only (nothing here knows a
dataset):

* **Words**: 4-bit words (K = 16, two per byte), scanned with their tables in SIMD registers (docs/ARCHITECTURE.md,
  "Fast scan"): at equal code bytes and recall after re-ranking they are faster to scan than 8-bit words, whose
  table lookups go to memory. ``WORDS_PER_DIM`` words per dimension (C = 2 codebooks per subspace, OCKM's own
  structure), so a 384-d embedding gets three times the code of a 128-d SIFT descriptor: re-ranking needs the true
  neighbours among the candidates, and how many candidates that takes grows with the dimension the code leaves out.
* **Lists**: flat below ``FLAT_BELOW`` vectors (a fast scan of every code costs about what probing costs there), an
  inverted file above, with ``n_lists`` the power of two nearest ``LISTS_PER_SQRT * sqrt(n_vectors)``: the coarse
  step costs n_lists dot products, the scan about n_probe / n_lists of the rows; the sum is least near sqrt(n).
* **Search defaults** come with the model: the inverted file's default ``n_probe`` (``ivf.default_n_probe``) and the
  default re-ranking of every searcher (``search.options.check_rerank``).
"""

from __future__ import annotations

import math

from .._validation import check_int
from .cartesian import OCKM
from .ivf import IVF
from .params import PARAMETERS

__all__ = ["default_quantizer", "WORDS_PER_DIM", "FLAT_BELOW", "LISTS_PER_SQRT", "MIN_WORDS", "DEFAULT_BEAM_WIDTH"]

# Words (4 bits each) of a code per dimension of the vectors: 1/8, so 16 words (8 bytes) for 128 dims and 48 (24
# bytes) for 384 -- rounded to whole subspaces of C = 2 words.
WORDS_PER_DIM = 0.125
# The fewest words of a code (a few-dimensional base still gets a code worth scanning).
MIN_WORDS = 8
# Bases of fewer vectors are flat (no lists).
FLAT_BELOW = 20_000
# n_lists ~ LISTS_PER_SQRT * sqrt(n_vectors), a power of two.
LISTS_PER_SQRT = 1.0
# The beam width T of the encoder (the paper's multiple-candidates matching pursuit).
DEFAULT_BEAM_WIDTH = 10


def default_quantizer(n_vectors, dim, *, metric="l2"):
    """The unfitted quantizer the library recommends for ``n_vectors`` vectors of ``dim`` dimensions.

    Parameters
    ----------
    n_vectors : int >= 1
        How many vectors the index will hold (an estimate is fine: the rule changes with its order of magnitude).
    dim : int >= 1
        P, the dimension of the vectors.
    metric : "l2", "ip" or "cosine"

    Returns
    -------
    OCKM or IVF
        Not fitted: ``fit`` it on a sample of the vectors (or give it to ``create_collection``, or leave the
        quantizer out there: a collection calls this itself when it trains). An OCKM of 4-bit words with two
        codebooks per subspace, flat for small bases, inside an IVF for larger ones. The rule and the measurements
        behind it: docs/ARCHITECTURE.md, "Defaults the library chooses".
    """
    n = check_int(n_vectors, "n_vectors", min_value=1)
    P = check_int(dim, "dim", min_value=1)
    metric = PARAMETERS["metric"].check(metric)
    fine = OCKM(_subspaces(P), 2, DEFAULT_BEAM_WIDTH, n_codewords=16, metric=metric)
    lists = _lists(n)
    return fine if lists == 0 else IVF(lists, fine)


def _subspaces(P):
    """M: the subspaces of a code of ~WORDS_PER_DIM * P words (C = 2 per subspace), at least MIN_WORDS / 2, at
    most P (a subspace holds at least one dimension)."""
    words = max(MIN_WORDS, int(round(WORDS_PER_DIM * P)))
    return max(1, min(P, words // 2))


def _lists(n):
    """n_lists for n vectors: 0 (flat) below FLAT_BELOW, else the power of two nearest LISTS_PER_SQRT * sqrt(n)."""
    if n < FLAT_BELOW:
        return 0
    return 1 << max(0, int(round(math.log2(LISTS_PER_SQRT * math.sqrt(n)))))
