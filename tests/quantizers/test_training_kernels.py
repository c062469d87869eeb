"""Tests of the training kernels against the NumPy oracles of tests/support/reference.py (docs/ARCHITECTURE.md,
"The method"): the normal equations of the codebooks, the sums of the vectors using each word (from which training
forms X^T Zhat and the right-hand sides), row products, orthogonal Procrustes, and the scalar quantizer of the norms.

Each kernel is run on small seeded inputs of several shapes (odd sizes, n = 0 and n = 1, more rows than one chunk)
with 1 and 2 threads. Integer-valued inputs make every float32 sum exact, so there the kernels must equal the
oracles bit for bit; on Gaussian inputs they must stay within the rounding bound of float32 products.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

import reference as ref
from helpers import random_rotation

# The package's private functions under test, imported in this one block so that a move of the modules changes
# only these lines.
from ockstore._blas import blas_single_thread
from ockstore._kernels import code_gram, code_sums, matmul_rows, normal_equations
from ockstore.quantizers.tables import SubspaceLayout
from ockstore.quantizers.norm_levels import fit_scalar_quantizer, scalar_encode
from ockstore.quantizers.training import _procrustes

EPS32 = float(np.finfo(np.float32).eps) / 2  # unit roundoff of float32, 2^-24
THREADS = [1, 2]


def gaussian(rng, *shape):
    return rng.normal(size=shape).astype(np.float32)


def small_integers(rng, *shape, high=8):
    """float32 integers in [-high, high]: every product and every partial sum below 2^24 is exact in float32."""
    return rng.integers(-high, high + 1, size=shape).astype(np.float32)


# --------------------------------------------------------------------------------------------- normal equations
def run_normal_equations(codes, Z, C, K, n_threads):
    """The kernel's (gram, rhs), written into buffers filled with NaN beforehand (everything must be overwritten)."""
    M = codes.shape[1] // C
    S = Z.shape[1] // M
    gram = np.full((M, C * K, C * K), np.nan)
    rhs = np.full((M, C * K, S), np.nan)
    normal_equations(codes, Z, C, K, gram, rhs, n_threads)
    return gram, rhs


# (M, C, K, S): PQ-like (C = 1), additive (C = 2..4), odd K and S, K = 256 (every byte value a word).
NE_SHAPES = [(1, 1, 4, 1), (3, 1, 16, 3), (2, 2, 5, 4), (4, 3, 7, 2), (2, 4, 3, 5), (1, 2, 256, 3)]


def over_shapes(sizes):
    """Parametrize a test over (M, C, K, S) of NE_SHAPES, n in ``sizes`` and n_threads in THREADS."""
    def decorate(test):
        for name, values in (("M,C,K,S", NE_SHAPES), ("n", sizes), ("n_threads", THREADS)):
            test = pytest.mark.parametrize(name, values)(test)
        return test

    return decorate


@over_shapes([0, 1, 37, 300])
def test_normal_equations_match_oracle(M, C, K, S, n, n_threads):
    """gram[m] = B_m^T B_m exactly (counts) and rhs[m] = B_m^T Z_m (float64 sums of float32 values)."""
    rng = np.random.default_rng(M * 1000 + C * 100 + K + n)
    codes = rng.integers(0, K, size=(n, M * C)).astype(np.uint8)
    Z = gaussian(rng, n, M * S)
    gram, rhs = run_normal_equations(codes, Z, C, K, n_threads)
    want_gram, want_rhs = ref.normal_equations(codes, Z, C, K)
    np.testing.assert_array_equal(gram, want_gram)
    # Both sum at most n float32 values in float64: they agree to ~n * 2^-53 of the sum of magnitudes.
    _, magnitude = ref.normal_equations(codes, np.abs(Z), C, K)
    assert np.all(np.abs(rhs - want_rhs) <= 1e-14 * (n + 1) * magnitude + 1e-300), np.abs(rhs - want_rhs).max()


@pytest.mark.parametrize("n_threads", THREADS)
def test_normal_equations_exact_on_integer_data(n_threads):
    rng = np.random.default_rng(5)
    M, C, K, S = 3, 3, 11, 4
    codes = rng.integers(0, K, size=(2000, M * C)).astype(np.uint8)
    Z = small_integers(rng, 2000, M * S, high=100)
    gram, rhs = run_normal_equations(codes, Z, C, K, n_threads)
    want_gram, want_rhs = ref.normal_equations(codes, Z, C, K)
    np.testing.assert_array_equal(gram, want_gram)
    np.testing.assert_array_equal(rhs, want_rhs)


# ------------------------------------------------------------------------------------- sums of the rows per word
def run_code_sums(codes, X, K, n_threads):
    """The kernel's B^T X, written into a buffer filled with NaN beforehand (everything must be overwritten)."""
    out = np.full((codes.shape[1] * K, X.shape[1]), np.nan)
    code_sums(codes, X, K, out, n_threads)
    return out


def sums_oracle(codes, X, K):
    """B^T X in float64, B the n x W*K binary matrix of the codes: every code byte as one codebook of one subspace."""
    _, rhs = ref.normal_equations(codes, X, codes.shape[1], K)
    return rhs[0]


def run_code_gram(codes, C, K, n_threads):
    M = codes.shape[1] // C
    gram = np.full((M, C * K, C * K), np.nan)
    code_gram(codes, C, K, gram, n_threads)
    return gram


# (n, W, K, P): no rows, one row, fewer rows than a slice, several slices of 2,048 rows (the last one short),
# K = 256 (every byte value a word).
SUM_SHAPES = [(0, 2, 4, 3), (1, 1, 2, 1), (37, 3, 5, 7), (300, 8, 16, 12), (9001, 4, 7, 5), (5000, 2, 256, 3)]


@pytest.mark.parametrize("n_threads", THREADS)
@pytest.mark.parametrize("n,W,K,P", SUM_SHAPES)
def test_code_sums_match_oracle(n, W, K, P, n_threads):
    """out[w*K + k] = the sum of the rows whose byte w is k: float64 sums of float32 values, so within
    ~n * 2^-53 of the sum of magnitudes."""
    rng = np.random.default_rng(n + 10 * W + K + P)
    codes = rng.integers(0, K, size=(n, W)).astype(np.uint8)
    X = gaussian(rng, n, P)
    out = run_code_sums(codes, X, K, n_threads)
    want = sums_oracle(codes, X, K)
    magnitude = sums_oracle(codes, np.abs(X), K)
    assert out.shape == (W * K, P) and out.dtype == np.float64
    assert np.all(np.abs(out - want) <= 1e-14 * (n + 1) * magnitude + 1e-300), np.abs(out - want).max()


@pytest.mark.parametrize("n_threads", THREADS)
@pytest.mark.parametrize("n", [1, 7, 9001])
def test_code_sums_exact_on_integer_data(n, n_threads):
    rng = np.random.default_rng(n)
    codes = rng.integers(0, 9, size=(n, 5)).astype(np.uint8)
    X = small_integers(rng, n, 6, high=100)
    np.testing.assert_array_equal(run_code_sums(codes, X, 9, n_threads), sums_oracle(codes, X, 9))


@over_shapes([0, 1, 300, 3001])
def test_code_gram_matches_oracle(M, C, K, S, n, n_threads):
    """gram[m] = B_m^T B_m exactly (counts): the Gram matrices of the normal equations."""
    rng = np.random.default_rng(M * 1000 + C * 100 + K + n)
    codes = rng.integers(0, K, size=(n, M * C)).astype(np.uint8)
    want, _ = ref.normal_equations(codes, np.zeros((n, M), np.float32), C, K)
    np.testing.assert_array_equal(run_code_gram(codes, C, K, n_threads), want)


def test_training_products_from_the_sums():
    """What training forms from the sums G = B^T X equals the products it replaces: X^T Zhat = sum over the words
    of G[word]^T word (Zhat the reconstructions in the padded rotated space), and B_m^T (X R_pad)_m = G_m R_pad_m
    (the right-hand sides of the normal equations with rotation R)."""
    rng = np.random.default_rng(11)
    n, P, M, C, K = 3000, 10, 3, 2, 16
    S = -(-P // M)
    codes = rng.integers(0, K, size=(n, M * C)).astype(np.uint8)
    X = gaussian(rng, n, P)
    D = gaussian(rng, M, C, K, S)
    for m, size in enumerate(ref.subspace_sizes(P, M)):
        D[m, :, :, size:] = 0.0
    G = run_code_sums(codes, X, K, 2).reshape(M, C * K, P)
    Zhat = ref.decode_rotated(codes, D).reshape(n, M * S)
    A = np.concatenate([G[m].T @ D[m].reshape(C * K, S).astype(np.float64) for m in range(M)], axis=1)
    scale = ref.xty(np.abs(X), np.abs(Zhat))
    assert np.all(np.abs(A - ref.xty(X, Zhat)) <= 1e-12 * scale + 1e-300)
    rot_pad = SubspaceLayout(P, M).pad_rotation(random_rotation(P, seed=2)).astype(np.float64)
    _, want = ref.normal_equations(codes, X.astype(np.float64) @ rot_pad, C, K)
    for m in range(M):
        got = G[m] @ rot_pad[:, m * S:(m + 1) * S]
        _, magnitude = ref.normal_equations(codes, np.abs(X).astype(np.float64) @ np.abs(rot_pad), C, K)
        assert np.all(np.abs(got - want[m]) <= 1e-12 * magnitude[m] + 1e-300)


# ---------------------------------------------------------------------------------------------------- X @ B
def run_matmul(X, B, n_threads):
    out = np.full((X.shape[0], B.shape[1]), np.nan, dtype=np.float32)
    with blas_single_thread():
        matmul_rows(X, B, out, n_threads)
    return out


# (n, P, Q): around the kernel's 1024-row chunks.
MATMUL_SHAPES = [(0, 3, 5), (1, 1, 1), (1, 7, 3), (1023, 5, 9), (1024, 4, 4), (1025, 10, 12), (2500, 7, 13)]


@pytest.mark.parametrize("n_threads", THREADS)
@pytest.mark.parametrize("n,P,Q", MATMUL_SHAPES)
def test_matmul_rows_matches_numpy(n, P, Q, n_threads):
    """out = X @ B within the float32 bound |out - X B| <= (P + 1) 2^-24 |X| |B|."""
    rng = np.random.default_rng(n + 10 * P + Q)
    X, B = gaussian(rng, n, P), gaussian(rng, P, Q)
    out = run_matmul(X, B, n_threads)
    want = X.astype(np.float64) @ B.astype(np.float64)
    bound = (P + 1) * EPS32 * (np.abs(X).astype(np.float64) @ np.abs(B).astype(np.float64))
    assert out.shape == (n, Q) and out.dtype == np.float32
    assert np.all(np.abs(out - want) <= bound), np.abs(out - want).max()


@pytest.mark.parametrize("n_threads", THREADS)
def test_matmul_rows_exact_on_integer_data(n_threads):
    rng = np.random.default_rng(9)
    X, B = small_integers(rng, 2500, 7), small_integers(rng, 7, 13)
    want = X.astype(np.float64) @ B.astype(np.float64)
    np.testing.assert_array_equal(run_matmul(X, B, n_threads), want)


# ------------------------------------------------------------------------------------------------ thread counts
def kernel_runs(kernel):
    """A function n_threads -> the kernel's outputs (a tuple) on fixed inputs spanning several chunks or slices."""
    rng = np.random.default_rng(6)
    if kernel == "normal_equations":
        M, C, K, S = 5, 2, 9, 3
        codes = rng.integers(0, K, size=(3001, M * C)).astype(np.uint8)
        Z = gaussian(rng, 3001, M * S)
        return lambda n_threads: run_normal_equations(codes, Z, C, K, n_threads)
    if kernel == "code_sums":
        codes = rng.integers(0, 13, size=(20001, 6)).astype(np.uint8)
        X = gaussian(rng, 20001, 9)
        return lambda n_threads: (run_code_sums(codes, X, 13, n_threads),)
    if kernel == "code_gram":
        codes = rng.integers(0, 13, size=(20001, 6)).astype(np.uint8)
        return lambda n_threads: (run_code_gram(codes, 2, 13, n_threads),)
    X, B = gaussian(rng, 5000, 10), gaussian(rng, 10, 12)
    return lambda n_threads: (run_matmul(X, B, n_threads),)


@pytest.mark.parametrize("kernel", ["normal_equations", "code_sums", "code_gram", "matmul_rows"])
def test_kernels_identical_for_any_number_of_threads(kernel):
    """Every chunk is computed the same way whichever thread runs it, and code_sums adds its slices in a fixed
    order: the bits do not depend on the number of threads."""
    run = kernel_runs(kernel)
    one = run(1)
    for n_threads in (2, 3):
        for got, want in zip(run(n_threads), one):
            np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------------------------------- orthogonal Procrustes
# (P, M): no padding, padded subspaces (P % M != 0), one dimension per subspace, a single dimension.
LAYOUTS = [(8, 4), (10, 3), (7, 7), (5, 2), (12, 5), (1, 1)]


def padding_columns(P, M):
    """Columns of the padded (n, M*S) space that hold no rotated dimension."""
    S = -(-P // M)
    return np.concatenate([m * S + np.arange(size, S) for m, size in enumerate(ref.subspace_sizes(P, M))])


def run_procrustes(X, Zhat, M, padding=0.0):
    """_procrustes on X^T Zhat with Zhat (n, P) zero-padded to (n, M*S) by the oracle's layout; ``padding`` fills the
    padding columns instead (they must not matter)."""
    n, P = Zhat.shape
    Zp = ref.rotate_and_split(Zhat, None, M).reshape(n, M * -(-P // M))
    Zp[:, padding_columns(P, M)] = padding
    return _procrustes(ref.xty(X, Zp), SubspaceLayout(P, M))


def assert_orthogonal(R, P):
    assert R.shape == (P, P) and R.dtype == np.float32
    np.testing.assert_allclose(R.astype(np.float64).T @ R, np.eye(P), rtol=0, atol=1e-5)


@pytest.mark.parametrize("P,M", LAYOUTS)
def test_procrustes_recovers_a_known_rotation(P, M):
    """X = Zhat R0^T exactly (up to float32): the minimiser is R0 itself."""
    rng = np.random.default_rng(P * 10 + M)
    R0 = random_rotation(P, seed=P)
    Zhat = gaussian(rng, 300, P)
    X = (Zhat.astype(np.float64) @ R0.T).astype(np.float32)
    R = run_procrustes(X, Zhat, M)
    assert_orthogonal(R, P)
    np.testing.assert_allclose(R, R0, rtol=0, atol=1e-5)


@pytest.mark.parametrize("n", [1, 3, 200])
@pytest.mark.parametrize("P,M", LAYOUTS)
def test_procrustes_is_the_minimiser(P, M, n):
    """R is orthogonal and ||X - Zhat R^T||^2 is the least over orthogonal matrices (the oracle's closed form,
    ||X||^2 + ||Zhat||^2 - 2 ||X^T Zhat||_*); 50 random rotations and the identity do no better. With n >= P the
    minimiser is unique: R equals the SVD oracle and scipy.linalg.orthogonal_procrustes."""
    rng = np.random.default_rng(P * 100 + M * 10 + n)
    Zhat = gaussian(rng, n, P)
    X = (Zhat @ random_rotation(P, seed=P + 1).T + 0.5 * gaussian(rng, n, P)).astype(np.float32)
    R = run_procrustes(X, Zhat, M)
    assert_orthogonal(R, P)
    scale = float(np.sum(X.astype(np.float64) ** 2) + np.sum(Zhat.astype(np.float64) ** 2))
    tol = 1e-5 * scale
    best = ref.procrustes_error(X, Zhat, R)
    assert abs(best - ref.procrustes_min_error(X, Zhat)) <= tol, (best, ref.procrustes_min_error(X, Zhat))
    for seed in range(50):
        assert ref.procrustes_error(X, Zhat, random_rotation(P, seed=1000 + seed)) >= best - tol
    assert ref.procrustes_error(X, Zhat, np.eye(P)) >= best - tol
    if n >= P:
        np.testing.assert_allclose(R, ref.procrustes(X, Zhat), rtol=0, atol=1e-4)
        scipy_R, _ = scipy.linalg.orthogonal_procrustes(Zhat.astype(np.float64), X.astype(np.float64))
        np.testing.assert_allclose(R, scipy_R.T, rtol=0, atol=1e-4)


@pytest.mark.parametrize("P,M", LAYOUTS)
def test_procrustes_without_rows_is_orthogonal(P, M):
    """n = 0: every orthogonal matrix is optimal; the result must still be one."""
    R = run_procrustes(np.zeros((0, P), np.float32), np.zeros((0, P), np.float32), M)
    assert_orthogonal(R, P)


@pytest.mark.parametrize("P,M", [(10, 3), (5, 2), (12, 5)])
def test_procrustes_ignores_padding(P, M):
    """Values in the padding columns of Zhat do not change R."""
    rng = np.random.default_rng(P + M)
    Zhat = gaussian(rng, 500, P)
    X = (Zhat @ random_rotation(P, seed=3).T + gaussian(rng, 500, P)).astype(np.float32)
    R = run_procrustes(X, Zhat, M)
    np.testing.assert_array_equal(run_procrustes(X, Zhat, M, padding=7.0), R)


# ---------------------------------------------------------------------------------------------- scalar quantizer
def norm_like(rng, n):
    """Squared norms of 16-dim Gaussian vectors (what the quantizer is fitted to), float32."""
    return np.sum(rng.normal(size=(n, 16)) ** 2, axis=1).astype(np.float32)


DISTRIBUTIONS = {
    "norms": norm_like,
    "uniform": lambda rng, n: rng.uniform(-3.0, 5.0, size=n).astype(np.float32),
    "lognormal": lambda rng, n: rng.lognormal(0.0, 2.0, size=n),  # float64, spread over orders of magnitude
    "few-values": lambda rng, n: rng.choice(np.array([0.5, 2.0, 7.0, 7.25], np.float32), size=n),
}

# (distribution, n, n_levels, n_iter)
SCALAR_CASES = [
    ("norms", 3000, 256, 100),   # the package's use: 256 levels of the squared norms
    ("norms", 1000, 16, 0),      # the initial quantiles alone
    ("norms", 1000, 16, 1),
    ("norms", 1000, 16, 3),
    ("uniform", 17, 7, 100),
    ("uniform", 2, 4, 100),
    ("uniform", 500, 1, 100),
    ("lognormal", 800, 32, 100),
    ("lognormal", 800, 32, 2),
    ("few-values", 100, 8, 100),  # fewer distinct values than levels
    ("few-values", 9, 256, 100),
]


@pytest.mark.parametrize("dist,n,n_levels,n_iter", SCALAR_CASES)
def test_fit_scalar_quantizer_matches_lloyd_oracle(dist, n, n_levels, n_iter):
    """Same start (quantiles (i + 0.5) / n_levels), same cells, same update and stopping rule: the same levels
    (the package sums by prefix sums, the oracle by means of each cell: they differ by rounding only)."""
    rng = np.random.default_rng(n + n_levels + n_iter)
    values = DISTRIBUTIONS[dist](rng, n)
    levels = fit_scalar_quantizer(values, n_levels, n_iter)
    want = ref.lloyd_1d(values, n_levels, n_iter)
    assert levels.shape == (n_levels,) and levels.dtype == np.float32
    assert np.all(np.diff(levels) >= 0)
    np.testing.assert_allclose(levels, want, rtol=1e-6, atol=1e-12 * float(np.max(np.abs(values))))


def test_fit_scalar_quantizer_stops_at_a_fixed_point():
    """Once no level moves, more iterations change nothing (the stopping rule, not the iteration cap, ended it)."""
    values = norm_like(np.random.default_rng(11), 2000)
    converged = fit_scalar_quantizer(values, 8, 1000)
    np.testing.assert_array_equal(fit_scalar_quantizer(values, 8, 5000), converged)
    np.testing.assert_allclose(converged, ref.lloyd_1d(values, 8, 1000), rtol=1e-6)
    # At the fixed point each level is the mean of the values nearest to it.
    codes = ref.nearest_level(values, converged)
    for j in range(8):
        np.testing.assert_allclose(converged[j], values[codes == j].astype(np.float64).mean(), rtol=1e-6)


@pytest.mark.parametrize("n_levels", [1, 4, 256])
def test_fit_scalar_quantizer_edge_cases(n_levels):
    # No values: n_levels zeros.
    for empty in ([], np.zeros(0, np.float32)):
        levels = fit_scalar_quantizer(empty, n_levels)
        assert levels.dtype == np.float32
        np.testing.assert_array_equal(levels, np.zeros(n_levels, np.float32))
        np.testing.assert_array_equal(levels, ref.lloyd_1d(empty, n_levels, 100))
    # One value, or a constant: every level is that value.
    for values in (np.array([3.25], np.float32), np.full(50, 3.25, np.float32)):
        np.testing.assert_array_equal(fit_scalar_quantizer(values, n_levels), np.full(n_levels, 3.25, np.float32))
    # Fewer distinct values than levels: every value is a level and is encoded exactly.
    values = np.array([0, 0, 0, 0, 0, 0, 0.1, 1.0] * 3 + [-2.5], np.float32)
    distinct = np.unique(values)
    levels = fit_scalar_quantizer(values, n_levels)
    np.testing.assert_allclose(levels, ref.lloyd_1d(values, n_levels, 100), rtol=1e-6)
    if n_levels >= distinct.size:
        assert set(distinct) <= set(levels)
        np.testing.assert_array_equal(levels[scalar_encode(values, levels)], values)


def test_scalar_encode_matches_nearest_level():
    """The index of the nearest level (uint8) on random values inside and outside the range of the levels."""
    rng = np.random.default_rng(12)
    for n_levels in (1, 2, 5, 100, 256):
        levels = np.unique(rng.normal(size=n_levels).astype(np.float32))
        values = (rng.normal(size=5000) * 1.5).astype(np.float32)
        codes = scalar_encode(values, levels)
        assert codes.dtype == np.uint8 and codes.shape == values.shape
        np.testing.assert_array_equal(codes, ref.nearest_level(values, levels))


def test_scalar_encode_ties_go_to_the_lower_level():
    levels = np.array([0.0, 2.0, 4.0, 7.0, 8.0], np.float32)
    halfway = np.array([1.0, 3.0, 5.5, 7.5], np.float32)
    above = np.nextafter(halfway, np.float32(np.inf))
    below = np.nextafter(halfway, np.float32(-np.inf))
    np.testing.assert_array_equal(scalar_encode(halfway, levels), [0, 1, 2, 3])
    np.testing.assert_array_equal(scalar_encode(above, levels), [1, 2, 3, 4])
    np.testing.assert_array_equal(scalar_encode(below, levels), [0, 1, 2, 3])
    for values in (halfway, above, below, levels, np.array([-1e6, -0.5, 8.5, 1e6], np.float32)):
        np.testing.assert_array_equal(scalar_encode(values, levels), ref.nearest_level(values, levels))


def test_scalar_encode_edge_cases():
    levels = np.linspace(0.0, 1.0, 256, dtype=np.float32)
    assert scalar_encode(np.zeros(0, np.float32), levels).shape == (0,)
    assert scalar_encode(np.zeros(0, np.float32), levels).dtype == np.uint8
    np.testing.assert_array_equal(scalar_encode(np.array([-5.0, 0.0, 1.0, 5.0], np.float32), levels),
                                  [0, 0, 255, 255])
    np.testing.assert_array_equal(scalar_encode(np.array([-5.0, 0.0, 5.0], np.float32),
                                                np.array([2.0], np.float32)), [0, 0, 0])
    # Repeated levels (a quantizer fitted to fewer distinct values than levels): the code decodes to the nearest
    # value. (Of equal levels, a value above them gets the last copy's index, one at or below them the first's.)
    levels = np.array([0.0, 0.0, 0.0, 0.1, 1.0, 1.0], np.float32)
    values = np.array([-1.0, 0.0, 0.04, 0.05, 0.06, 0.1, 0.7, 1.0, 3.0], np.float32)
    codes = scalar_encode(values, levels)
    np.testing.assert_array_equal(levels[codes], levels[ref.nearest_level(values, levels)])
