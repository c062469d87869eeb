"""Plain NumPy oracles for ockstore's compiled loops (docs/ARCHITECTURE.md, "The method").

Everything here is written for clarity, not speed, in float64, and shares no code with the package: the layout of
the rotated space is re-derived from its description in ``SubspaceLayout`` (subspace m holds P // M or P // M + 1
consecutive rotated dimensions, larger ones first, zero-padded to S = ceil(P / M)).

Symbols: n vectors of P dims, rotation R (P x P, or None for the identity), codebooks D of shape (M, C, K, S),
codes of shape (n, M*C) where byte m*C + c is the word of codebook c of subspace m, beam width T.
"""

from __future__ import annotations

import itertools

import numpy as np

__all__ = [
    "subspace_sizes",
    "rotate_and_split",
    "beam_encode",
    "exhaustive_encode",
    "code_errors",
    "decode_rotated",
    "decode",
    "adc_distances",
]


# --------------------------------------------------------------------------------------------------------- layout
def subspace_sizes(P, M):
    """Rotated dimensions held by each subspace: P // M each, the first P % M of them one more."""
    base, extra = divmod(P, M)
    return [base + 1 if m < extra else base for m in range(M)]


def rotate_and_split(X, rotation, M):
    """(n, M, S) float64: the rotated vectors z = R^T x cut into M consecutive blocks, each zero-padded to S."""
    X = np.asarray(X, dtype=np.float64)
    n, P = X.shape
    Z = X if rotation is None else X @ np.asarray(rotation, dtype=np.float64)  # row form of z = R^T x
    S = -(-P // M)
    out = np.zeros((n, M, S))
    offset = 0
    for m, size in enumerate(subspace_sizes(P, M)):
        out[:, m, :size] = Z[:, offset:offset + size]
        offset += size
    assert offset == P
    return out


# --------------------------------------------------------------------------------------------------------- encoding
def _sqdist(R, words):
    """||r - d||^2 for every residual r (rows of R, shape (..., S)) and word d (rows of words, (K, S))."""
    # The expansion ||r||^2 - 2 r.d + ||d||^2, in float64 (its rounding, ~1e-16 ||r||^2, is far below float32's).
    flat = R.reshape(-1, R.shape[-1])   # one matrix product, not a stack of small ones
    dist = (np.einsum("is,is->i", flat, flat)[:, None] - 2.0 * (flat @ words.T)
            + np.einsum("ks,ks->k", words, words))
    return dist.reshape(R.shape[:-1] + (words.shape[0],))


def _beam_subspace(Z, D, T):
    """Beam search in one subspace. Z: (n, S) subvectors, D: (C, K, S) codebooks. Returns (codes (n, C), errors).

    The recursion on residual vectors, vectorised over rows: level l < C-1 ranks the words of codebook l by
    ||r - d||^2 (a stable sort: ties go to the smaller index), keeps the T best and recurses into each residual
    r - d; the last level takes its single best word (the first minimum). The leaves are kept in depth-first order
    (beam b of the parent level, then rank t), so "the least total error, ties to the first leaf in rank order" is
    the first minimum over the leaves.

        def search(r, level, prefix):                     # the readable form of the loop below
            dist = [||r - D[level, k]||^2 for k in range(K)]
            if level == C - 1:
                k = argmin(dist); yield prefix + [k], dist[k]; return
            for k in stable_argsort(dist)[:T]:
                yield from search(r - D[level, k], level + 1, prefix + [k])
    """
    n, S = Z.shape
    C, K, _ = D.shape
    T = min(T, K)
    residuals = Z[:, None, :]                    # (n, B, S) with B = 1 beam at level 0
    prefixes = np.zeros((n, 1, 0), dtype=np.int64)
    for level in range(C - 1):
        dist = _sqdist(residuals, D[level])      # (n, B, K)
        ranked = np.argsort(dist, axis=-1, kind="stable")[..., :T]          # (n, B, T)
        B = residuals.shape[1]
        residuals = (residuals[:, :, None, :] - D[level][ranked]).reshape(n, B * T, S)
        prefixes = np.concatenate(
            [np.repeat(prefixes, T, axis=1), ranked.reshape(n, B * T, 1)], axis=2)
    dist = _sqdist(residuals, D[C - 1])          # (n, B, K)
    last = np.argmin(dist, axis=-1)              # first minimum over the words
    leaf_error = np.take_along_axis(dist, last[..., None], axis=-1)[..., 0]  # (n, B)
    best = np.argmin(leaf_error, axis=1)         # first minimum over the leaves, in rank order
    rows = np.arange(n)
    codes = np.concatenate([prefixes[rows, best], last[rows, best][:, None]], axis=1)
    return codes, leaf_error[rows, best]


def beam_encode(X, rotation, codebooks, beam_width):
    """Reference of the beam encoder. Returns (codes int64 (n, M*C), errors float64 (n,)).

    ``errors`` are recomputed directly from the chosen words, ||z - sum_c d_c||^2 summed over subspaces.
    """
    D = np.asarray(codebooks, dtype=np.float64)
    M, C, K, S = D.shape
    Z = rotate_and_split(X, rotation, M)
    codes = np.empty((Z.shape[0], M * C), dtype=np.int64)
    for m in range(M):
        codes[:, m * C:(m + 1) * C], _ = _beam_subspace(Z[:, m], D[m], beam_width)
    return codes, code_errors(X, rotation, codebooks, codes)


def exhaustive_encode(X, rotation, codebooks):
    """Brute force over all K^C word combinations of each subspace (small K and C only).

    Returns (codes int64 (n, M*C), errors float64 (n,)); ties go to the first combination in lexicographic order.
    """
    D = np.asarray(codebooks, dtype=np.float64)
    M, C, K, S = D.shape
    Z = rotate_and_split(X, rotation, M)
    combos = np.array(list(itertools.product(range(K), repeat=C)), dtype=np.int64)  # (K^C, C), lexicographic
    codes = np.empty((Z.shape[0], M * C), dtype=np.int64)
    for m in range(M):
        sums = D[m, np.arange(C), combos].sum(axis=1)   # (K^C, S): every reconstruction of this subspace
        diff = Z[:, m, None, :] - sums[None]
        dist = np.einsum("nks,nks->nk", diff, diff)
        codes[:, m * C:(m + 1) * C] = combos[np.argmin(dist, axis=1)]
    return codes, code_errors(X, rotation, codebooks, codes)


def code_errors(X, rotation, codebooks, codes):
    """||x - decode(code)||^2 per row, float64, computed directly from the vectors."""
    X = np.asarray(X, dtype=np.float64)
    diff = X - decode(codes, rotation, codebooks, dim=X.shape[1])
    return np.einsum("ij,ij->i", diff, diff)


# --------------------------------------------------------------------------------------------------------- decoding
def decode_rotated(codes, codebooks):
    """(n, M, S) float64: sum over c of the word codes[:, m*C + c] of codebook c, per subspace."""
    D = np.asarray(codebooks, dtype=np.float64)
    M, C, K, S = D.shape
    codes = np.asarray(codes, dtype=np.int64).reshape(-1, M, C)
    out = np.zeros((codes.shape[0], M, S))
    for m in range(M):
        for c in range(C):
            out[:, m] += D[m, c][codes[:, m, c]]
    return out


def decode(codes, rotation, codebooks, dim=None):
    """(n, P) float64: x_hat = R z_hat, z_hat the concatenation of each subspace's first sizes[m] columns.

    ``rotation`` None means R = I (PQ); then ``dim`` (P) must be given.
    """
    D = np.asarray(codebooks, dtype=np.float64)
    M = D.shape[0]
    P = np.asarray(rotation).shape[0] if rotation is not None else dim
    if P is None:
        raise ValueError("decode with rotation=None needs dim")
    Zhat = decode_rotated(codes, D)
    z = np.concatenate([Zhat[:, m, :size] for m, size in enumerate(subspace_sizes(P, M))], axis=1)
    return z if rotation is None else z @ np.asarray(rotation, dtype=np.float64).T   # row form of x_hat = R z_hat


# -------------------------------------------------------------------------------------------------------------- ADC
def adc_distances(Q, codes, rotation, codebooks):
    """(nq, N) float64 asymmetric distances of queries Q (nq, P) to encoded vectors.

    C >= 2: ||q||^2 - 2 sum_m z_m . zhat_m + ||x_hat||^2 with z = R^T q (the norm term stored per vector).
    C == 1: sum_m ||z_m - d_m||^2 (the classic table, no stored norm).
    Both equal ||q - x_hat||^2 in exact arithmetic because R is orthogonal.
    """
    D = np.asarray(codebooks, dtype=np.float64)
    M, C, K, S = D.shape
    Q = np.asarray(Q, dtype=np.float64)
    Z = rotate_and_split(Q, rotation, M)                 # (nq, M, S)
    Zhat = decode_rotated(codes, D)                      # (N, M, S)
    if C == 1:
        diff = Z[:, None] - Zhat[None]                   # (nq, N, M, S)
        return np.einsum("qnms,qnms->qn", diff, diff)
    norms = np.einsum("nms,nms->n", Zhat, Zhat)          # ||x_hat||^2 = ||z_hat||^2 (R orthogonal)
    return (np.einsum("qp,qp->q", Q, Q)[:, None] - 2.0 * np.einsum("qms,nms->qn", Z, Zhat) + norms[None])
