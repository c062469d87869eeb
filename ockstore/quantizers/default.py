"""``default_quantizer``: the unfitted model the library recommends for a base of ``n_vectors`` vectors of ``dim``
dimensions (docs/ARCHITECTURE.md, "Defaults the library chooses"; the measurements behind each constant in
docs/results.md, "The model the library picks", made with tools/study_defaults.py on sift-real and minilm-real).

The rule, each part a function of the dimension or of the number of vectors only (nothing here knows a dataset):

* **Words**: 4-bit words (K = 16, two per byte), scanned with their tables in SIMD registers (docs/ARCHITECTURE.md,
  "Fast scan"): at equal code bytes and recall after re-ranking they beat 8-bit words everywhere measured (minilm
  40K: 0.76-2.0x hnswlib's queries/s against 0.44-0.93x; sift: 1.8-2.6x against 1.2-1.6x). C = 2 codebooks per
  subspace (OCKM's own structure) and ``dim / 8`` code bytes: 16 B for a 128-d SIFT descriptor, 48 B for a 384-d
  sentence embedding. At 10-recall@10 0.98 and above (where the defaults aim) that size won on both datasets against
  half and three quarters of it: re-ranking needs the true neighbours among the candidates, and how many candidates
  that takes grows with the dimension the code leaves out.
* **Lists**: flat below ``FLAT_BELOW`` vectors -- a fast scan of every code costs about what probing costs there,
  and on embeddings the coarse step loses neighbours (0.97 of them only within 3/8-1/2 of the lists) -- and an
  inverted file above, with ``n_lists`` the power of two nearest ``LISTS_PER_SQRT * sqrt(n_vectors)``: 128 at 100K,
  512 at 1M, 2,048 at 10M.
* **Search defaults** come with the index: the inverted file's default ``n_probe`` scans about
  ``quantizers.ivf.DEFAULT_SCAN_ROWS`` rows and at least ``2 sqrt(n_lists)`` lists (``ivf.default_n_probe``), and every
  searcher re-ranks 10 k candidates from stored vectors (``search.options.check_rerank``). Measured at these defaults:
  minilm 40K flat 10-recall@10 0.999, sift 100K 0.996, sift 1M 0.984.
"""

from __future__ import annotations

import math

from .._validation import check_int
from .cartesian import OCKM
from .ivf import IVF
from .params import PARAMETERS

__all__ = ["default_quantizer", "DIMS_PER_SUBSPACE", "FLAT_BELOW", "LISTS_PER_SQRT", "DEFAULT_BEAM_WIDTH"]

# Dimensions per subspace of C = 2 four-bit words: a code of dim / 8 bytes (dim / 4 words).
DIMS_PER_SUBSPACE = 8
# Bases of fewer vectors are flat (no lists): below it a flat fast scan kept pace with the best inverted file on
# sift (100K: IVF256 already 2.5x faster at 0.99) and beat every inverted file on minilm (40K).
FLAT_BELOW = 65_536
# n_lists ~ LISTS_PER_SQRT * sqrt(n_vectors), a power of two.
LISTS_PER_SQRT = 0.5
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
    """M: P / DIMS_PER_SUBSPACE subspaces of two 4-bit words (dim / 8 code bytes), rounded, at least 1."""
    return max(1, int(round(P / DIMS_PER_SUBSPACE)))


def _lists(n):
    """n_lists for n vectors: 0 (flat) below FLAT_BELOW, else the power of two nearest LISTS_PER_SQRT * sqrt(n)."""
    if n < FLAT_BELOW:
        return 0
    return 1 << max(0, int(round(math.log2(LISTS_PER_SQRT * math.sqrt(n)))))
