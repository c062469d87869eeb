"""Training by coordinate descent: orthogonal Procrustes, least-squares codebooks, beam-search codes.

No input validation here: callers pass C-contiguous float32 training vectors without NaN/inf, parameters in range,
and a ``numpy.random.Generator``. See docs/ARCHITECTURE.md ("The method") and ``quantizers.py`` for the public classes.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from .. import _kernels
from .._blas import blas_single_thread
from .tables import CodecTables, SubspaceLayout, rotate

__all__ = ["TrainResult", "train"]

# Ridge added to the normal equations, relative to their mean diagonal (the mean count of a word). The matrix is
# always singular for C >= 2 (adding a vector to every word of one codebook and subtracting it from another leaves
# every reconstruction unchanged), and a word that is never used makes it singular for any C. As the ridge goes to
# zero the solution tends to the minimum-norm least-squares solution; at this size it changes the objective by a
# relative ~1e-12 while keeping the Cholesky factorisation well conditioned (10x faster than an eigendecomposition).
RIDGE = 1e-9

# Lloyd iterations of the k-means that initialise each codebook (see _initial_codebooks).
INIT_ITER = 10
# Training vectors per codeword used by that initial k-means (at most).
INIT_SAMPLE_PER_WORD = 64


@dataclass
class TrainResult:
    rotation: np.ndarray | None      # (P, P) float32, or None when the rotation is not learned (PQ)
    codebooks: np.ndarray            # (M, C, K, S) float32
    codes: np.ndarray                # (n, M*C) uint8: the codes of the training vectors
    errors: np.ndarray               # (n,) float32: their squared reconstruction errors
    objective_history: np.ndarray    # (n_iterations + 1,) float64: mean squared error, [0] after initialisation
    stop_reason: str


def _log(verbose, message):
    if verbose:
        print(f"[ockstore] {message}", file=sys.stderr, flush=True)


def _procrustes(A_padded, layout):
    """The orthogonal R minimising ||X - Zhat R^T||_F, from A_padded = X^T Zhat (P, M*S) float64 (padding columns
    included): R = U V^T from the SVD of X^T Zhat."""
    A = A_padded[:, layout.padded_columns]
    try:
        # Divide and conquer: 2.5x (P = 128) to 10x (P = 384) faster than gesvd, as accurate.
        U, _, Vt = scipy.linalg.svd(A, lapack_driver="gesdd", check_finite=False)
    except np.linalg.LinAlgError:
        # gesdd can fail to converge where the QR iteration of gesvd still does.
        U, _, Vt = scipy.linalg.svd(A, lapack_driver="gesvd", check_finite=False)
    return (U @ Vt).astype(np.float32)


def _solve_codebooks(gram, rhs, C, K, shared):
    """Least-squares codebooks of one subspace from its normal equations (gram: CK x CK, rhs: CK x S).

    C = 1: each word is the mean of its vectors (k-means' update). Shared (ECKM): one K-word codebook used C times,
    whose normal equations are the C x C block sums. Otherwise all C codebooks jointly, by pseudo-inverse.
    Returns (words (C, K, S), used (C, K) bool): words never used get zeros here and are re-seeded by the caller.
    """
    S = rhs.shape[1]
    if shared:
        g = gram.reshape(C, K, C, K).sum(axis=(0, 2))
        r = rhs.reshape(C, K, S).sum(axis=0)
        words = _pinv_solve(g, r)
        used = np.broadcast_to(np.diag(g) > 0, (C, K))
        return np.broadcast_to(words, (C, K, S)), used
    counts = np.diag(gram).reshape(C, K)
    used = counts > 0
    if C == 1:
        words = np.zeros((K, S))
        words[used[0]] = rhs[used[0]] / counts[0, used[0], None]
        return words[None], used
    return _pinv_solve(gram, rhs).reshape(C, K, S), used


def _pinv_solve(gram, rhs):
    """Least-squares solution of gram @ D = rhs for a symmetric positive semi-definite gram (ridge-regularised).

    Falls back to an eigendecomposition (exact minimum-norm solution) should the factorisation fail.
    """
    n = gram.shape[0]
    ridge = RIDGE * max(float(np.trace(gram)) / n, 1.0)
    try:
        factor = scipy.linalg.cho_factor(gram + ridge * np.eye(n), lower=True, check_finite=False)
        return scipy.linalg.cho_solve(factor, rhs, check_finite=False)
    except np.linalg.LinAlgError:
        w, V = scipy.linalg.eigh(gram)
        keep = w > 1e-10 * max(float(w[-1]), 1e-300)
        Vk = V[:, keep]
        return Vk @ ((Vk.T @ rhs) / w[keep, None])


def _reseed_unused(words, used, X, rot_pad, codes, rng):
    """Give every unused word a new value: the vector its codebook would have to add to a random training vector.

    An unused word does not enter the objective, so any value keeps it unchanged; the residual of a random vector
    (its rotated subvector minus the words of the other codebooks in its code) gives the word a chance to be chosen
    by the next encoding, as k-means re-seeds empty clusters.
    """
    M, C, K, S = words.shape
    n = X.shape[0]
    for m in range(M):
        for c in range(C):
            empty = np.flatnonzero(~used[m, c])
            if empty.size == 0:
                continue
            rows = rng.choice(n, size=empty.size, replace=empty.size > n)
            target = rotate(X[rows], rot_pad, 1)[:, m * S:(m + 1) * S].astype(np.float64)
            for c2 in range(C):
                if c2 != c:
                    target -= words[m, c2, codes[rows, m * C + c2]]
            words[m, c, empty] = target


def _initial_codebooks(X, layout, rotation, C, K, T, shared, rng, n_threads, init_iter):
    """Initial codebooks, codebook by codebook, each by k-means on what the previous ones leave.

    Codebook 0 of each subspace: k-means (init_iter Lloyd iterations from K random training subvectors) on the
    subvectors. Codebook c >= 1: k-means on the residuals of the training vectors encoded with codebooks 0..c-1, so the
    sum of C words starts at the right scale with each codebook refining the previous ones (residual quantization).
    This start is much closer to a good optimum than random words, which saves coordinate-descent iterations. A
    shared codebook (ECKM) is k-means on the subvectors. With init_iter = 0 the words are the random samples.
    The k-means run on a random sample of at most INIT_SAMPLE_PER_WORD * K training vectors (as Faiss samples its
    k-means input), so initialisation costs a fixed amount however large the training set.
    """
    M, S = layout.n_subspaces, layout.sub_dim
    if X.shape[0] > INIT_SAMPLE_PER_WORD * K:
        X = X[np.sort(rng.choice(X.shape[0], size=INIT_SAMPLE_PER_WORD * K, replace=False))]
    n = X.shape[0]
    target = rotate(X, layout.pad_rotation(rotation), n_threads)  # (n, M*S): subvectors, zero-padded
    padded = SubspaceLayout(M * S, M)                # the padded space itself, cut into the same M blocks
    words = np.zeros((M, C, K, S), dtype=np.float32)
    for c in range(1 if shared else C):
        start = np.stack([target[rng.choice(n, size=K, replace=False), m * S:(m + 1) * S] for m in range(M)])
        if init_iter > 0:
            start = _lloyd(target, padded, start, init_iter, rng, n_threads)
        words[:, c] = start
        if c + 1 < C and not shared:
            tables = CodecTables(padded, None, words[:, c:c + 1].copy())
            codes, _ = tables.encode(target, 1, n_threads)
            target = target - tables.decode_rotated(codes, n_threads)
    if shared:
        words[:] = words[:, :1]
    return words


def _lloyd(Y, layout, words, n_iter, rng, n_threads):
    """k-means in each of the M column blocks of Y (n, M*S) from the given words (M, K, S); returns the words."""
    M, K, S = words.shape
    n = Y.shape[0]
    for _ in range(n_iter):
        tables = CodecTables(layout, None, words[:, None])
        codes, _ = tables.encode(Y, 1, n_threads)
        gram = np.empty((M, K, K), dtype=np.float64)
        rhs = np.empty((M, K, S), dtype=np.float64)
        _kernels.normal_equations(codes, Y, 1, K, gram, rhs, n_threads)
        new = np.empty_like(words)
        for m in range(M):
            counts = np.diag(gram[m])
            used = counts > 0
            new[m, used] = rhs[m, used] / counts[used, None]
            empty = np.flatnonzero(~used)
            new[m, empty] = Y[rng.choice(n, size=empty.size), m * S:(m + 1) * S]
        words = new
    return words


def _update_rotation_and_codebooks(X, codes, tables, layout, learn_rotation, shared_codebook, rng, n_threads):
    """With the codes fixed: R by orthogonal Procrustes (when learned), then every codebook by least squares.

    Both steps need only the sum of the training vectors that use each word, G = B^T X ((M*C*K, P), float64, one
    pass over the rows): X^T Zhat = sum over words of G[word]^T word (Procrustes), and the right-hand sides of the
    normal equations B_m^T Z_m = G_m R_pad[:, block m] with the new rotation. Neither the reconstructions nor the
    rotated vectors are formed. Returns (rotation or None, codebooks (M, C, K, S) float32).
    """
    n, P = X.shape
    M, C, K, S = tables.words.shape
    CK = C * K
    sums = np.empty((M * CK, P), dtype=np.float64)
    _kernels.code_sums(codes, X, K, sums, n_threads)
    sums = sums.reshape(M, CK, P)
    rotation = None
    if learn_rotation:
        words = tables.words.astype(np.float64).reshape(M, CK, S)
        A_padded = np.empty((P, M * S), dtype=np.float64)
        for m in range(M):
            A_padded[:, m * S:(m + 1) * S] = sums[m].T @ words[m]
        rotation = _procrustes(A_padded, layout)
    rot_pad = layout.pad_rotation(rotation).astype(np.float64)
    gram = np.empty((M, CK, CK), dtype=np.float64)
    _kernels.code_gram(codes, C, K, gram, n_threads)
    words = np.empty((M, C, K, S), dtype=np.float64)
    used = np.empty((M, C, K), dtype=bool)
    for m in range(M):
        rhs = sums[m] @ rot_pad[:, m * S:(m + 1) * S]
        words[m], used[m] = _solve_codebooks(gram[m], rhs, C, K, shared_codebook)
    if not used.all():
        if shared_codebook:
            # One codebook: re-seed its unused words from random subvectors.
            for m in range(M):
                empty = np.flatnonzero(~used[m, 0])
                if empty.size:
                    rows = rng.choice(n, size=empty.size, replace=empty.size > n)
                    words[m, :, empty] = rotate(X[rows], layout.pad_rotation(rotation), 1)[:, None, m * S:(m + 1) * S]
        else:
            _reseed_unused(words, used, X, layout.pad_rotation(rotation), codes, rng)
    for m, size in enumerate(layout.sizes):
        words[m, :, :, size:] = 0.0  # padding dimensions stay exactly zero
    return rotation, words.astype(np.float32)


def train(X, *, n_subspaces, n_codebooks, n_codewords, beam_width, n_iter, tol, rng, learn_rotation,
          shared_codebook, n_threads, verbose=False, name="", init_iter=INIT_ITER) -> TrainResult:
    """Coordinate descent on the mean squared error (1/n) sum_i ||x_i - R sum_m sum_c d[m, c, b_imc]||^2.

    Each iteration: R by orthogonal Procrustes (when learned), the codebooks of each subspace jointly by least squares,
    then the codes by beam search, a code replaced only when its error drops. Each step minimises the objective over
    its own variables, so the objective never rises in exact arithmetic; should rounding ever make an iteration end
    higher than the last, that iteration is undone and training stops, so the recorded history never rises.
    Stops after n_iter iterations or when the relative decrease of an iteration is below tol.
    """
    n, P = X.shape
    M, C, K = n_subspaces, n_codebooks, n_codewords
    T = min(beam_width, K)
    layout = SubspaceLayout(P, M)
    t0 = time.perf_counter()

    rotation = np.eye(P, dtype=np.float32) if learn_rotation else None
    with blas_single_thread():
        words = _initial_codebooks(X, layout, rotation, C, K, T, shared_codebook, rng, n_threads, init_iter)
    tables = CodecTables(layout, rotation, words)
    codes, errors = tables.encode(X, T, n_threads)
    history = [float(errors.mean(dtype=np.float64))]
    _log(verbose, f"{name} init: objective {history[0]:.6g} ({time.perf_counter() - t0:.2f}s)")
    stop_reason = f"reached n_iter={n_iter}"

    with blas_single_thread():
        for it in range(1, n_iter + 1):
            new_rotation, new_words = _update_rotation_and_codebooks(
                X, codes, tables, layout, learn_rotation, shared_codebook, rng, n_threads)
            new_tables = CodecTables(layout, new_rotation, new_words)
            new_codes, new_errors = new_tables.encode(X, T, n_threads, prev_codes=codes)
            objective = float(new_errors.mean(dtype=np.float64))
            if objective > history[-1]:
                stop_reason = f"iteration {it} did not lower the objective (rounding); it was undone"
                break
            previous = history[-1]
            tables, codes, errors, rotation = new_tables, new_codes, new_errors, new_rotation
            history.append(objective)
            _log(verbose, f"{name} iteration {it}: objective {objective:.6g} "
                          f"({time.perf_counter() - t0:.2f}s)")
            if previous > 0 and (previous - objective) / previous < tol:
                stop_reason = f"relative decrease below tol={tol:g} at iteration {it}"
                break
            if objective == 0:
                stop_reason = f"objective reached 0 at iteration {it}"
                break
    _log(verbose, f"{name} stopped: {stop_reason}")
    return TrainResult(rotation, tables.words, codes, errors, np.array(history, dtype=np.float64), stop_reason)
