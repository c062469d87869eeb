"""Training by coordinate descent: orthogonal Procrustes, least-squares codebooks, beam-search codes.

No input validation here: callers pass C-contiguous float32 training vectors without NaN/inf, parameters in range,
and a ``numpy.random.Generator``. See DESIGN.md section 3 for the method and ``quantizers.py`` for the public classes.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from . import _codec_kernels
from ._blas import blas_single_thread

__all__ = ["SubspaceLayout", "CodecTables", "TrainResult", "train", "fit_scalar_quantizer", "scalar_encode"]

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

@dataclass(frozen=True)
class SubspaceLayout:
    """How the P rotated dimensions are split into M subspaces of at most S dimensions.

    Any P works: subspace m holds ``sizes[m]`` consecutive rotated dimensions (P // M or P // M + 1 of them, the
    larger ones first) and is zero-padded to S = ceil(P / M) dimensions, so every codebook is a K x S array whose
    padding columns are zero.
    """

    dim: int
    n_subspaces: int

    @property
    def sub_dim(self) -> int:
        return -(-self.dim // self.n_subspaces)

    @property
    def sizes(self) -> np.ndarray:
        base, extra = divmod(self.dim, self.n_subspaces)
        return np.array([base + (1 if m < extra else 0) for m in range(self.n_subspaces)], dtype=np.int64)

    @property
    def padded_columns(self) -> np.ndarray:
        """For each of the P rotated dims, its column in the padded M*S space."""
        S = self.sub_dim
        return np.concatenate([m * S + np.arange(size) for m, size in enumerate(self.sizes)])

    def pad_rotation(self, rotation) -> np.ndarray:
        """(P, M*S) float32: the rotation's columns placed in their subspace blocks, zero columns for padding."""
        out = np.zeros((self.dim, self.n_subspaces * self.sub_dim), dtype=np.float32)
        out[:, self.padded_columns] = np.eye(self.dim, dtype=np.float32) if rotation is None else rotation
        return out

    def unpad(self, Zp) -> np.ndarray:
        """(n, M*S) -> (n, P): drop the padding columns."""
        return Zp[:, self.padded_columns]


# Encodings of at most this many rows run on one thread.
SMALL_ENCODE_ROWS = 256

_NO_ROTATION = np.zeros((0, 0), dtype=np.float32)  # tells encode_beam that its input is already rotated and padded


class CodecTables:
    """Arrays derived from a rotation and codebooks in the layouts the kernels want (computed once per model).

    rot_pad      (P, M*S) float32   rotation with padding columns
    words_t      (M, S, C*K) float32  words_t[m, s, c*K + k] = codebooks[m, c, k, s]
    word_sqnorms (M, C*K) float32   ||codebooks[m, c, k]||^2
    pair_tables  (M, C(C-1)/2 * K * K) float32  2 codebooks[m,c,k] . codebooks[m,c',k'] for c < c' (empty for C = 1)
    """

    def __init__(self, layout: SubspaceLayout, rotation, codebooks):
        M, C, K, S = codebooks.shape
        self.layout = layout
        self.n_codebooks = C
        self.n_codewords = K
        self.rot_pad = layout.pad_rotation(rotation)
        # Without a rotation and without padding, vectors are already in the kernel's layout: skip the product.
        identity = rotation is None and layout.dim == layout.n_subspaces * layout.sub_dim
        self._encode_rot = _NO_ROTATION if identity else self.rot_pad
        self.words = np.ascontiguousarray(codebooks, dtype=np.float32)
        self.words_t = np.ascontiguousarray(self.words.transpose(0, 3, 1, 2).reshape(M, S, C * K))
        self.word_sqnorms = np.ascontiguousarray(np.einsum("mcks,mcks->mck", self.words, self.words).reshape(M, C * K))
        pairs = [
            2.0 * (self.words[:, c] @ self.words[:, c2].transpose(0, 2, 1))
            for c in range(C)
            for c2 in range(c + 1, C)
        ]
        if pairs:
            stacked = np.stack(pairs, axis=1)  # (M, n_pairs, K, K)
            self.pair_tables = np.ascontiguousarray(stacked.reshape(M, -1), dtype=np.float32)
        else:
            self.pair_tables = np.zeros((M, 1), dtype=np.float32)

    def encode(self, X, beam_width, n_threads, prev_codes=None, rotated=False):
        """Beam-encode float32 rows; returns (codes uint8 (n, M*C), errors float32 (n,)).

        rotated=True: X is already X @ rot_pad, shape (n, M*S) (training computes it anyway), so it is used as is.
        """
        n = X.shape[0]
        M = self.words.shape[0]
        codes = np.empty((n, M * self.n_codebooks), dtype=np.uint8)
        errors = np.empty(n, dtype=np.float32)
        prev = prev_codes if prev_codes is not None else np.zeros((0, 0), dtype=np.uint8)
        beam_width = min(beam_width, self.n_codewords)  # wider than K acts as K (and fits the kernel's int)
        if n <= SMALL_ENCODE_ROWS:
            n_threads = 1  # one or two kernel chunks: not worth waking other threads (results are the same)
        with blas_single_thread():
            _codec_kernels.encode_beam(X, _NO_ROTATION if rotated else self._encode_rot, self.words_t, self.word_sqnorms, self.pair_tables,
                                 self.n_codebooks, self.n_codewords, beam_width, prev, codes, errors, n_threads)
        return codes, errors

    def decode_rotated(self, codes, n_threads):
        """(n, M*S) float32 reconstructions in the rotated, padded space."""
        out = np.empty((codes.shape[0], self.rot_pad.shape[1]), dtype=np.float32)
        _codec_kernels.decode_rotated(codes, self.words, out, n_threads)
        return out

    def decode(self, codes, n_threads):
        """(n, P) float32 reconstructions in the input space: x_hat = R z_hat."""
        return self.decode_rotated(codes, n_threads) @ self.rot_pad.T

    def code_sqnorms(self, codes, n_threads):
        out = np.empty(codes.shape[0], dtype=np.float32)
        _codec_kernels.code_sqnorms(codes, self.word_sqnorms, self.pair_tables, self.n_codebooks, self.n_codewords,
                              out, n_threads)
        return out


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


def _procrustes(X, Zhat, layout, n_threads):
    """The orthogonal R minimising ||X - Zhat R^T||_F: R = U V^T from the SVD of X^T Zhat (summed in float64)."""
    P = X.shape[1]
    A_padded = np.empty((P, Zhat.shape[1]), dtype=np.float64)
    _codec_kernels.accumulate_xty(X, Zhat, A_padded, n_threads)
    U, _, Vt = scipy.linalg.svd(A_padded[:, layout.padded_columns], lapack_driver="gesvd")
    return (U @ Vt).astype(np.float32)


def rotate(X, rot_pad, n_threads):
    """X @ rot_pad, (n, M*S) float32, by chunks of rows in parallel."""
    out = np.empty((X.shape[0], rot_pad.shape[1]), dtype=np.float32)
    with blas_single_thread():
        _codec_kernels.matmul_rows(X, rot_pad, out, n_threads)
    return out


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


def _reseed_unused(words, used, Zp, codes, rng):
    """Give every unused word a new value: the vector its codebook would have to add to a random training vector.

    An unused word does not enter the objective, so any value keeps it unchanged; the residual of a random vector
    (its subvector minus the words of the other codebooks in its code) gives the word a chance to be chosen by the
    next encoding, as k-means re-seeds empty clusters.
    """
    M, C, K, S = words.shape
    n = Zp.shape[0]
    for m in range(M):
        for c in range(C):
            empty = np.flatnonzero(~used[m, c])
            if empty.size == 0:
                continue
            rows = rng.choice(n, size=empty.size, replace=empty.size > n)
            target = Zp[rows, m * S:(m + 1) * S].astype(np.float64)
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
        _codec_kernels.normal_equations(codes, Y, 1, K, gram, rhs, n_threads)
        new = np.empty_like(words)
        for m in range(M):
            counts = np.diag(gram[m])
            used = counts > 0
            new[m, used] = rhs[m, used] / counts[used, None]
            empty = np.flatnonzero(~used)
            new[m, empty] = Y[rng.choice(n, size=empty.size), m * S:(m + 1) * S]
        words = new
    return words


def _update_rotation_and_codebooks(X, codes, tables, layout, learn_rotation, shared_codebook, rng, n_threads,
                                   Zp, Zhat):
    """With the codes fixed: R by orthogonal Procrustes (when learned), then every codebook by least squares.

    Zp and Zhat are (n, M*S) float32 work buffers. Returns (rotation or None, codebooks (M, C, K, S) float32).
    """
    n = X.shape[0]
    M, C, K, S = tables.words.shape
    rotation = None
    if learn_rotation:
        _codec_kernels.decode_rotated(codes, tables.words, Zhat, n_threads)
        rotation = _procrustes(X, Zhat, layout, n_threads)
    _codec_kernels.matmul_rows(X, layout.pad_rotation(rotation), Zp, n_threads)
    gram = np.empty((M, C * K, C * K), dtype=np.float64)
    rhs = np.empty((M, C * K, S), dtype=np.float64)
    _codec_kernels.normal_equations(codes, Zp, C, K, gram, rhs, n_threads)
    words = np.empty((M, C, K, S), dtype=np.float64)
    used = np.empty((M, C, K), dtype=bool)
    for m in range(M):
        words[m], used[m] = _solve_codebooks(gram[m], rhs[m], C, K, shared_codebook)
    if not used.all():
        if shared_codebook:
            # One codebook: re-seed its unused words from random subvectors.
            for m in range(M):
                empty = np.flatnonzero(~used[m, 0])
                if empty.size:
                    rows = rng.choice(n, size=empty.size, replace=empty.size > n)
                    words[m, :, empty] = Zp[rows, m * S:(m + 1) * S][:, None, :]
        else:
            _reseed_unused(words, used, Zp, codes, rng)
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
    S = layout.sub_dim
    t0 = time.perf_counter()

    rotation = np.eye(P, dtype=np.float32) if learn_rotation else None
    with blas_single_thread():
        words = _initial_codebooks(X, layout, rotation, C, K, T, shared_codebook, rng, n_threads, init_iter)
    tables = CodecTables(layout, rotation, words)
    codes, errors = tables.encode(X, T, n_threads)
    history = [float(errors.mean(dtype=np.float64))]
    _log(verbose, f"{name} init: objective {history[0]:.6g} ({time.perf_counter() - t0:.2f}s)")
    stop_reason = f"reached n_iter={n_iter}"

    Zp = np.empty((n, M * S), dtype=np.float32)    # rotated training vectors, reused every iteration
    Zhat = np.empty((n, M * S), dtype=np.float32)  # their reconstructions, reused every iteration
    with blas_single_thread():
        for it in range(1, n_iter + 1):
            new_rotation, new_words = _update_rotation_and_codebooks(
                X, codes, tables, layout, learn_rotation, shared_codebook, rng, n_threads, Zp, Zhat)
            new_tables = CodecTables(layout, new_rotation, new_words)
            # Zp holds X rotated by new_rotation: the last update computed it.
            new_codes, new_errors = new_tables.encode(Zp, T, n_threads, prev_codes=codes, rotated=True)
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


def scalar_encode(values, levels):
    """Index of the nearest level (levels sorted ascending) as uint8; ties go to the lower level."""
    cuts = (levels[1:].astype(np.float64) + levels[:-1]) / 2
    return np.searchsorted(cuts, np.asarray(values, dtype=np.float64), side="left").astype(np.uint8)
