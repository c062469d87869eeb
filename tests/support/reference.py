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
    "normal_equations",
    "xty",
    "procrustes",
    "procrustes_error",
    "procrustes_min_error",
    "lloyd_1d",
    "nearest_level",
    "lane_sum",
    "sq8_values",
    "rerank_values",
    "rerank_topk",
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


# -------------------------------------------------------------------------------------------------------- training
def normal_equations(codes, Z, C, K):
    """(gram (M, C*K, C*K), rhs (M, C*K, S)) float64: the normal equations of the codebooks given the codes.

    B_m is the n x C*K binary matrix with a one in column c*K + codes[i, m*C + c] of row i for each c, and Z_m the
    m-th block of S columns of Z (n, M*S), so that Z_m ~ B_m D_m (D_m: the C*K x S stack of subspace m's words):
        gram[m] = B_m^T B_m   (gram[m][c*K + k, c'*K + k'] = #rows whose words are k in codebook c and k' in c')
        rhs[m]  = B_m^T Z_m   (rhs[m][c*K + k] = the sum of the subvectors whose word in codebook c is k)
    """
    codes = np.asarray(codes, dtype=np.int64)
    Z = np.asarray(Z, dtype=np.float64)
    n = codes.shape[0]
    M = codes.shape[1] // C
    S = Z.shape[1] // M
    gram = np.zeros((M, C * K, C * K))
    rhs = np.zeros((M, C * K, S))
    for m in range(M):
        B = np.zeros((n, C * K))
        for c in range(C):
            B[np.arange(n), c * K + codes[:, m * C + c]] = 1.0
        gram[m] = B.T @ B
        rhs[m] = B.T @ Z[:, m * S:(m + 1) * S]
    return gram, rhs


def xty(X, Y):
    """X^T Y in float64: (P, Q) from X (n, P) and Y (n, Q)."""
    return np.asarray(X, dtype=np.float64).T @ np.asarray(Y, dtype=np.float64)


def procrustes(X, Zhat):
    """The orthogonal R minimising ||X - Zhat R^T||_F (rows: x_i ~ R zhat_i), float64 (P, P).

    ||X - Zhat R^T||^2 = ||X||^2 + ||Zhat||^2 - 2 tr(R^T A) with A = X^T Zhat = U Sigma V^T, and
    tr(R^T U Sigma V^T) = tr((U^T R V)^T Sigma) <= tr(Sigma) with equality for U^T R V = I: R = U V^T.
    """
    U, _, Vt = np.linalg.svd(xty(X, Zhat))
    return U @ Vt


def procrustes_error(X, Zhat, R):
    """||X - Zhat R^T||_F^2 in float64."""
    diff = np.asarray(X, dtype=np.float64) - np.asarray(Zhat, dtype=np.float64) @ np.asarray(R, dtype=np.float64).T
    return float(np.sum(diff * diff))


def procrustes_min_error(X, Zhat):
    """The least ||X - Zhat R^T||_F^2 over orthogonal R: ||X||^2 + ||Zhat||^2 - 2 (sum of singular values of X^T Zhat).

    (See ``procrustes``: the maximum of tr(R^T A) is tr(Sigma), the nuclear norm of A.) Holds whatever the rank.
    """
    X = np.asarray(X, dtype=np.float64)
    Zhat = np.asarray(Zhat, dtype=np.float64)
    return float(np.sum(X * X) + np.sum(Zhat * Zhat) - 2.0 * np.linalg.svd(xty(X, Zhat), compute_uv=False).sum())


# ---------------------------------------------------------------------------------------------- scalar quantizer
def lloyd_1d(values, n_levels, n_iter):
    """Levels (n_levels,) float32, ascending, of a one-dimensional Lloyd k-means of ``values``.

    Start: the quantiles (i + 0.5) / n_levels of the values, i = 0..n_levels-1, linearly interpolated between the
    sorted values v_0 <= ... <= v_{n-1} (position q (n - 1)). Each iteration:
        cells   level j owns the values v with  m_{j-1} < v <= m_j,  m_j = (l_j + l_{j+1}) / 2, m_{-1} = -inf,
                m_{L-1} = +inf: its nearest values, a value halfway between two levels going to the lower one; of a
                level present in several copies, the first owns the values at or below it, the last those above
        update  a level that owns values moves to their mean; one that owns none stays; the levels are re-sorted
        stop    when an update changes no level, or after n_iter iterations.
    No values: n_levels zeros.
    """
    v = np.sort(np.asarray(values, dtype=np.float64).ravel())
    n = v.size
    if n == 0:
        return np.zeros(n_levels, dtype=np.float32)
    position = (np.arange(n_levels) + 0.5) / n_levels * (n - 1)
    lo = np.floor(position).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    levels = v[lo] + (position - lo) * (v[hi] - v[lo])
    for _ in range(n_iter):
        mids = (levels[1:] + levels[:-1]) / 2
        lower = np.concatenate([[-np.inf], mids])
        upper = np.concatenate([mids, [np.inf]])
        new = levels.copy()
        for j in range(n_levels):
            owned = v[(v > lower[j]) & (v <= upper[j])]
            if owned.size:
                new[j] = owned.mean()
        new = np.sort(new)
        if np.array_equal(new, levels):
            break
        levels = new
    return levels.astype(np.float32)


def nearest_level(values, levels):
    """(n,) int64: argmin_j |v - levels[j]| for each value, ties to the lower j (the first minimum).

    Computed in float64; for float32 values and levels of similar magnitudes the differences are exact, so a value
    exactly halfway between two levels is a true tie.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    dist = np.abs(v[:, None] - np.asarray(levels, dtype=np.float64)[None, :])
    return np.argmin(dist, axis=1)


# ---------------------------------------------------------------------------------------------------- re-ranking
def lane_sum(terms):
    """Sum over the last axis as the re-ranking loop adds (ockstore/kernels/rerank.h): 16 lanes, lane j adding the terms of
    positions j, j + 16, ... in order (zero-padded to a multiple of 16), then lanes j and j + 8, j and j + 4, j and
    j + 2, and the last two added. float64 throughout."""
    P = terms.shape[-1]
    padded = -(-P // 16) * 16
    blocks = np.zeros(terms.shape[:-1] + (padded,))
    blocks[..., :P] = terms
    blocks = blocks.reshape(terms.shape[:-1] + (padded // 16, 16))
    lanes = np.zeros(terms.shape[:-1] + (16,))
    for b in range(blocks.shape[-2]):
        lanes = lanes + blocks[..., b, :]
    for half in (8, 4, 2, 1):
        lanes = lanes[..., :half] + lanes[..., half:2 * half]
    return lanes[..., 0]


def sq8_values(codes, ranges):
    """The stored representation of sq8 codes: lo + (hi - lo) / 255 * code, in float64 (docs/FORMAT.md)."""
    lo = np.asarray(ranges[0], dtype=np.float32).astype(np.float64)
    step = (np.asarray(ranges[1], dtype=np.float32).astype(np.float64) - lo) / 255
    return lo + step * np.asarray(codes, dtype=np.float64)


def rerank_values(q, X, metric):
    """The exact values of rows X (n, P) (their numbers in float64) for the float32 query q (P,), as kernels/rerank.h
    computes them, rounded to float32: "l2" sum (q - x)^2, "ip" sum q x, "cosine" sum q x / sqrt(sum x x)."""
    q = np.asarray(q, dtype=np.float32).astype(np.float64)
    X = np.asarray(X, dtype=np.float64)
    if metric == "l2":
        return lane_sum((q - X) * (q - X)).astype(np.float32)
    dots = lane_sum(q * X)
    if metric == "cosine":
        dots = dots / np.sqrt(lane_sum(X * X))
    return dots.astype(np.float32)


def rerank_topk(values, ids, metric, k):
    """The k best (value, id) of candidates (values float32, ids int64): ascending distances for "l2", descending
    scores otherwise, ties by the smaller id; padding (+inf or -inf, -1)."""
    key = values if metric == "l2" else -values
    order = np.lexsort((ids, key))[:k]
    D = np.full(k, np.inf if metric == "l2" else -np.inf, dtype=np.float32)
    I = np.full(k, -1, dtype=np.int64)
    D[:order.size] = values[order]
    I[:order.size] = ids[order]
    return D, I
