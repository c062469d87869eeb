"""Tests of PQ, CKM, ECKM and OCKM: the beam encoder against NumPy oracles, training, determinism, decode and
distortion, the paper's theorems on real data, and the public boundary's input checks (docs/ARCHITECTURE.md, "The method" and "Conventions").

The oracles live in ``tests/reference.py``; they share no code with the package.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import reference as ref
from conftest import REPO, gaussian_mixture
from helpers import random_rotation
from ockstore import CKM, ECKM, OCKM, PQ, NotFittedError, load_quantizer, save_quantizer
from ockstore import _kernels
from ockstore._codec import CodecTables, SubspaceLayout
from ockstore.quantizers import quantizer_from_state

METHODS = {
    "PQ": lambda M, C, T, **kw: PQ(M, **kw),
    "CKM": lambda M, C, T, **kw: CKM(M, **kw),
    "ECKM": lambda M, C, T, **kw: ECKM(M, C, **kw),
    "OCKM": lambda M, C, T, **kw: OCKM(M, C, T, **kw),
}


def make(method, M, C=2, T=4, **kw):
    """A quantizer of `method` with M subspaces (C and T ignored by the methods that have none)."""
    return METHODS[method](M, C, T, **kw)


def random_codec(P, M, C, K, *, n=400, seed=0):
    """Random rotation, codebooks (M, C, K, S) with zero padding columns, and n float32 vectors to encode.

    Codebook c has scale 0.6^c (each refines the previous ones, as trained codebooks do). Half the vectors are
    reconstructions of random codes plus small noise (a clear optimum deep in the beam), half are plain Gaussian.
    """
    rng = np.random.default_rng(seed)
    S = -(-P // M)
    D = np.zeros((M, C, K, S), dtype=np.float32)
    for m, size in enumerate(ref.subspace_sizes(P, M)):
        for c in range(C):
            D[m, c, :, :size] = rng.normal(scale=0.6 ** c, size=(K, size))
    R = random_rotation(P, seed + 1)
    codes = rng.integers(0, K, size=(n // 2, M * C))
    near = ref.decode(codes, R, D) + rng.normal(scale=0.05, size=(n // 2, P))
    far = rng.normal(scale=1.2, size=(n - n // 2, P))
    X = np.concatenate([near, far]).astype(np.float32)
    return R, D, X


def assert_codes_match(X, rotation, codebooks, codes, expected, *, max_fraction=0.01):
    """Codes equal the oracle's; where they differ, the two errors agree within 1e-5 relative and differences are
    rare (a near-tie decided differently by float32 rounding).

    The absolute slack, 1e-6 ||x||^2, is below what float32 tables (errors accurate to ~eps ||x||^2) can resolve.
    """
    codes = np.asarray(codes, dtype=np.int64)
    assert codes.shape == expected.shape
    differ = np.flatnonzero((codes != expected).any(axis=1))
    if differ.size:
        got = ref.code_errors(X[differ], rotation, codebooks, codes[differ])
        want = ref.code_errors(X[differ], rotation, codebooks, expected[differ])
        slack = 1e-6 * np.einsum("ij,ij->i", X[differ].astype(np.float64), X[differ].astype(np.float64))
        bad = np.abs(got - want) > 1e-5 * np.abs(want) + slack
        assert not bad.any(), (
            f"{bad.sum()} rows get a different code with a different error, e.g. row {differ[bad][0]}: "
            f"kernel {codes[differ[bad][0]]} error {got[bad][0]!r}, reference {expected[differ[bad][0]]} "
            f"error {want[bad][0]!r}")
    assert differ.size <= max_fraction * len(X), f"{differ.size} of {len(X)} rows differ from the reference"


def sq_rows(X):
    X = np.asarray(X, dtype=np.float64)
    return np.einsum("ij,ij->i", X, X)


# ================================================================================================================
# 1-2. The beam encoder against the NumPy recursion on residual vectors


# C = 1 has no inner level, so the beam width plays no part there: one T suffices.
C_T = [(1, 1)] + [(C, T) for C in (2, 3) for T in (1, 3, 10)]


@pytest.mark.parametrize("P, M", [(10, 3), (128, 4)])
@pytest.mark.parametrize("C, T", C_T)
@pytest.mark.parametrize("K", [16, 256])
def test_beam_encoder_matches_reference(P, M, C, K, T):
    R, D, X = random_codec(P, M, C, K, seed=P + 10 * C + K + T)
    tables = CodecTables(SubspaceLayout(P, M), R, D)
    codes, errors = tables.encode(X, T, 2)
    assert codes.dtype == np.uint8 and codes.shape == (len(X), M * C)
    expected, _ = ref.beam_encode(X, R, D, T)
    assert_codes_match(X, R, D, codes, expected)
    # The errors the kernel returns are those of the codes it returns.
    direct = ref.code_errors(X, R, D, codes)
    np.testing.assert_array_less(np.abs(errors - direct), 1e-5 * (sq_rows(X) + direct) + 1e-30)


@pytest.mark.parametrize("K, T", [(64, 31), (64, 32), (100, 5), (256, 40), (2, 1), (2, 5)])
def test_beam_encoder_selection_edges(K, T):
    """Widths around the fast selection path's limits (T < 32, K >= 64), K not a multiple of 32, T > K."""
    P, M, C = 12, 2, 2
    R, D, X = random_codec(P, M, C, K, n=300, seed=K * 100 + T)
    codes, _ = CodecTables(SubspaceLayout(P, M), R, D).encode(X, T, 1)
    expected, _ = ref.beam_encode(X, R, D, T)
    assert_codes_match(X, R, D, codes, expected)


@pytest.mark.parametrize("C, K, T", [(4, 16, 1), (4, 16, 3), (5, 8, 2)])
def test_beam_encoder_deeper_recursions(C, K, T):
    """C >= 4: the score rows of levels >= 3 sum several pair tables."""
    P, M = 10, 3
    R, D, X = random_codec(P, M, C, K, n=300, seed=C * 10 + T)
    codes, _ = CodecTables(SubspaceLayout(P, M), R, D).encode(X, T, 2)
    expected, _ = ref.beam_encode(X, R, D, T)
    assert_codes_match(X, R, D, codes, expected)
    Di, Xi = _integer_codec(P, M, C, K, seed=C + T)
    codes, errors = CodecTables(SubspaceLayout(P, M), None, Di).encode(Xi, T, 2)
    expected, expected_errors = ref.beam_encode(Xi, None, Di, T)
    np.testing.assert_array_equal(codes, expected)
    np.testing.assert_array_equal(errors, expected_errors)


def _integer_codec(P, M, C, K, *, n=300, values=(-2, 3), seed=0):
    """Small-integer codebooks (with many duplicate words) and vectors: every float32 sum is exact, so every tie is
    a true tie, and the kernel must break it exactly as the reference does."""
    rng = np.random.default_rng(seed)
    S = -(-P // M)
    D = np.zeros((M, C, K, S), dtype=np.float32)
    for m, size in enumerate(ref.subspace_sizes(P, M)):
        D[m, :, :, :size] = rng.integers(-1, 2, size=(C, K, size))
    X = rng.integers(values[0], values[1], size=(n, P)).astype(np.float32)
    return D, X


@pytest.mark.parametrize("P, M", [(10, 3), (6, 3)])
@pytest.mark.parametrize("C", [1, 2, 3])
@pytest.mark.parametrize("K, T", [(16, 1), (16, 3), (16, 16), (256, 10), (256, 3)])
def test_beam_encoder_breaks_exact_ties_like_reference(P, M, C, K, T):
    D, X = _integer_codec(P, M, C, K, seed=C * 1000 + K + T)
    codes, errors = CodecTables(SubspaceLayout(P, M), None, D).encode(X, T, 2)
    expected, expected_errors = ref.beam_encode(X, None, D, T)
    np.testing.assert_array_equal(codes, expected)
    np.testing.assert_array_equal(errors, expected_errors)


@pytest.fixture
def isa_restored():
    """Restores the SIMD level and the portable tables' mode (tests below force each) to what they were."""
    previous = _kernels._set_simd_level(_kernels.simd_level()), _kernels._set_exact_portable_tables(False)
    yield
    _kernels._set_simd_level(previous[0])
    _kernels._set_exact_portable_tables(previous[1])


# (P, M, C, K, T, n): the benchmark's shape; uneven subspaces and C = 3; K and S not multiples of any vector width;
# C = 1; T = 31 next to the fast selection's limit; K = 8 below one vector; C = 4. n is never a multiple of 4 (the
# table kernel's row blocks).
ISA_CASES = [(128, 4, 2, 256, 10, 203), (10, 3, 3, 16, 3, 130), (12, 2, 2, 100, 5, 37), (9, 3, 1, 24, 1, 66),
             (40, 2, 2, 64, 31, 129), (7, 2, 4, 8, 2, 50)]


@pytest.mark.parametrize("P, M, C, K, T, n", ISA_CASES)
def test_every_instruction_set_gives_the_same_bits(P, M, C, K, T, n, isa_restored):
    """The encoder's kernels exist for AVX-512, AVX2+FMA and portable C (_encoder.h); every level this CPU runs
    (the portable one computing its tables with exact fmaf) gives bitwise the same codes and errors, with and
    without previous codes, and they match the reference."""
    R, D, X = random_codec(P, M, C, K, n=n, seed=P + C + K + T)
    tables = CodecTables(SubspaceLayout(P, M), R, D)
    prev = np.random.default_rng(1).integers(0, K, size=(n, M * C)).astype(np.uint8)
    runs = {}
    _kernels._set_exact_portable_tables(True)
    for level in ("portable", "avx2", "avx512"):
        try:
            _kernels._set_simd_level(level)
        except ValueError:  # a level this CPU cannot run (tests/test_kernels_simd.py reports it as skipped)
            continue
        runs[level] = tables.encode(X, T, 2) + tables.encode(X, T, 1, prev_codes=prev)
    for level, run in runs.items():
        for got, want in zip(run, runs["portable"]):
            np.testing.assert_array_equal(got, want, err_msg=f"SIMD level {level} differs from the portable one")
    expected, _ = ref.beam_encode(X, R, D, T)
    assert_codes_match(X, R, D, runs["portable"][0], expected)


@pytest.mark.parametrize("C, K, T", [(2, 256, 10), (3, 16, 3)])
def test_portable_encoder_with_blas_tables_matches_reference(C, K, T, isa_restored):
    """Where fmaf is not a hardware instruction the portable encoder takes its tables from BLAS instead (rounded
    differently, so not bitwise equal to the other versions): its codes still match the reference."""
    P, M = 20, 3
    R, D, X = random_codec(P, M, C, K, n=300, seed=C + K)
    _kernels._set_simd_level("portable")
    _kernels._set_exact_portable_tables(False)
    tables = CodecTables(SubspaceLayout(P, M), R, D)
    codes, errors = tables.encode(X, T, 2)
    expected, _ = ref.beam_encode(X, R, D, T)
    assert_codes_match(X, R, D, codes, expected)
    direct = ref.code_errors(X, R, D, codes)
    np.testing.assert_array_less(np.abs(errors - direct), 1e-5 * (sq_rows(X) + direct) + 1e-30)


@pytest.mark.parametrize("C, T", [(1, 1), (2, 1), (2, 4), (3, 2)])
def test_encoder_with_previous_codes_keeps_the_better(C, T):
    """During training a subspace's code is replaced only when the beam's is strictly better: per subspace the
    result is the beam's code or the previous one, and never worse than either."""
    P, M, K = 10, 3, 16
    R, D, X = random_codec(P, M, C, K, n=300, seed=40 + C + T)
    tables = CodecTables(SubspaceLayout(P, M), R, D)
    beam, _ = tables.encode(X, T, 2)
    rng = np.random.default_rng(3)
    optimal, _ = ref.exhaustive_encode(X, R, D)
    # previous codes: the optimum for a third of the rows, random for a third, the beam's own for the rest
    prev = np.where(rng.random((len(X), 1)) < 0.5, optimal, rng.integers(0, K, size=optimal.shape))
    prev[::3] = beam[::3]
    prev = prev.astype(np.uint8)
    codes, errors = tables.encode(X, T, 2, prev_codes=prev)
    Z = ref.rotate_and_split(X, R, M)
    for m in range(M):
        sl = slice(m * C, (m + 1) * C)
        from_beam = (codes[:, sl] == beam[:, sl]).all(axis=1)
        from_prev = (codes[:, sl] == prev[:, sl]).all(axis=1)
        assert (from_beam | from_prev).all()
        def sub_error(c):
            diff = Z[:, m] - ref.decode_rotated(c, D[m:m + 1])[:, 0]
            return np.einsum("ns,ns->n", diff, diff)
        e_new, e_beam, e_prev = sub_error(codes[:, sl]), sub_error(beam[:, sl]), sub_error(prev[:, sl])
        scale = 1e-5 * (np.einsum("ns,ns->n", Z[:, m], Z[:, m]) + 1e-12)
        assert (e_new <= np.minimum(e_beam, e_prev) + scale).all()
    direct = ref.code_errors(X, R, D, codes)
    np.testing.assert_array_less(np.abs(errors - direct), 1e-5 * (sq_rows(X) + direct) + 1e-30)
    if C >= 2 and T == 1:
        # the greedy beam is beaten by the kept optimal codes somewhere, so the test above exercised both branches
        assert (direct < ref.code_errors(X, R, D, beam) * (1 - 1e-4)).any()


# ================================================================================================================
# 3. T = K is exhaustive


@pytest.mark.parametrize("C", [2, 3])
@pytest.mark.parametrize("K", [8, 16])
def test_full_beam_finds_exhaustive_optimum(C, K):
    P, M = 10, 3
    R, D, X = random_codec(P, M, C, K, n=300, seed=7 * C + K)
    codes, _ = CodecTables(SubspaceLayout(P, M), R, D).encode(X, K, 2)
    _, best = ref.exhaustive_encode(X, R, D)
    got = ref.code_errors(X, R, D, codes)
    np.testing.assert_allclose(got, best, rtol=1e-5, atol=1e-6 * sq_rows(X).max())


@pytest.mark.parametrize("C", [2, 3])
def test_full_beam_exhaustive_on_exact_integers(C):
    D, X = _integer_codec(7, 2, C, 8, seed=C)
    _, errors = CodecTables(SubspaceLayout(7, 2), None, D).encode(X, 8, 1)
    _, best = ref.exhaustive_encode(X, None, D)
    np.testing.assert_array_equal(errors, best)


def test_narrow_beam_is_not_exhaustive_here():
    """The exhaustive oracle can tell a narrow beam from a full one on this data (so the test above has teeth)."""
    R, D, X = random_codec(10, 3, 3, 16, n=300, seed=5)
    _, best = ref.exhaustive_encode(X, R, D)
    narrow = ref.code_errors(X, R, D, CodecTables(SubspaceLayout(10, 3), R, D).encode(X, 1, 1)[0])
    assert (narrow > best * (1 + 1e-4)).any()


# ================================================================================================================
# Fitted quantizers: encode through the public API


FITTED_CASES = [
    ("PQ", 3, 1, 1, 16),
    ("PQ", 5, 1, 1, 16),
    ("CKM", 4, 1, 1, 32),
    ("ECKM", 3, 2, 1, 16),
    ("ECKM", 2, 3, 1, 8),
    ("OCKM", 3, 2, 3, 16),
    ("OCKM", 4, 3, 10, 16),
    ("OCKM", 2, 2, 10, 256),
]


@pytest.fixture(scope="module")
def fitted(mixture):
    """Quantizers fitted briefly on the (1500, 10) mixture, keyed by their FITTED_CASES entry."""
    return {case: make(case[0], case[1], case[2], case[3], n_codewords=case[4], n_iter=4, seed=3).fit(mixture)
            for case in FITTED_CASES}


@pytest.mark.parametrize("case", FITTED_CASES, ids=lambda c: "-".join(map(str, c)))
def test_fitted_encode_matches_reference(fitted, mixture_queries, case):
    q = fitted[case]
    method, M, C, T, K = case
    X = mixture_queries
    codes = q.encode(X, n_threads=2)
    assert codes.shape == (len(X), M * C) and codes.dtype == np.uint8
    T_used = 1 if method == "ECKM" else T   # ECKM: greedy pursuit (paper Alg. 1)
    expected, _ = ref.beam_encode(X, q.rotation, q.codebooks, T_used)
    assert_codes_match(X, q.rotation, q.codebooks, codes, expected)


def test_eckm_is_ockm_with_shared_codebook_and_unit_beam(mixture, mixture_queries):
    """ECKM's encoding is the greedy pursuit: OCKM with T = 1 on ECKM's (repeated) codebooks gives the same codes."""
    e = ECKM(3, 2, n_codewords=16, n_iter=3, seed=0).fit(mixture)
    params, arrays = e._get_state()
    o = quantizer_from_state({**params, "method": "ockm", "beam_width": 1}, arrays)
    np.testing.assert_array_equal(o.encode(mixture_queries), e.encode(mixture_queries))


# ================================================================================================================
# 4. Training: the objective never rises


TRAIN_SHAPES = [(40, 7, 3, 8), (257, 10, 4, 16), (33, 5, 5, 32), (64, 3, 1, 4)]   # (n, P, M, K)


@pytest.mark.parametrize("method", ["PQ", "CKM", "ECKM", "OCKM"])
@pytest.mark.parametrize("shape", TRAIN_SHAPES, ids=lambda s: "n{}-P{}-M{}-K{}".format(*s))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_objective_never_rises(method, shape, seed):
    n, P, M, K = shape
    X = np.random.default_rng(seed + 100).normal(size=(n, P)) * np.linspace(2.0, 0.2, P)
    C = 3 if method == "OCKM" and seed == 2 else 2
    q = make(method, M, C, 2, n_codewords=K, n_iter=6, tol=0.0, seed=seed).fit(X)
    h = q.objective_history
    assert h.dtype == np.float64 and h.ndim == 1 and 1 <= len(h) <= 7
    assert np.isfinite(h).all()
    assert (np.diff(h) <= 0).all(), f"objective rose: {h}"


@pytest.mark.parametrize("method", ["PQ", "CKM", "ECKM", "OCKM"])
def test_objective_decreases_on_structured_data(method):
    X = gaussian_mixture(600, 12, n_clusters=40, seed=4)
    q = make(method, 3, 2, 4, n_codewords=16, n_iter=8, tol=0.0, seed=0).fit(X)
    h = q.objective_history
    assert (np.diff(h) <= 0).all()
    assert h[-1] < h[0] * (1 - 1e-3), f"training did not lower the objective: {h}"


@pytest.mark.parametrize("case", FITTED_CASES, ids=lambda c: "-".join(map(str, c)))
def test_history_is_the_training_distortion(fitted, mixture, case):
    """The last objective is the mean error of the training codes. With C = 1 encoding is exact, so re-encoding
    gives the same value; with C >= 2 the training codes are the best of the beam and the previous code, so
    re-encoding with the beam alone can only be worse or equal."""
    q = fitted[case]
    last = q.objective_history[-1]
    d = q.distortion(mixture)
    if q.n_codebooks == 1:
        np.testing.assert_allclose(d, last, rtol=1e-4)
    else:
        assert d >= last * (1 - 1e-5)


def test_objective_is_a_squared_error_and_never_negative():
    """n == K: every training vector can be a word, the objective reaches ~0 but must not go below it."""
    X = np.random.default_rng(0).normal(size=(300, 8)).astype(np.float32)
    for method in ("PQ", "CKM", "OCKM"):
        h = make(method, 2, 2, 2, n_codewords=16, n_iter=3, seed=0).fit(X[:16]).objective_history
        assert (h >= 0).all(), f"{method}: negative mean squared error in objective_history {h}"


@pytest.mark.parametrize("method", ["PQ", "CKM", "ECKM", "OCKM"])
def test_tol_and_n_iter_bound_training(method, mixture):
    q = make(method, 3, n_codewords=16, n_iter=3, tol=0.0, seed=0).fit(mixture)
    assert len(q.objective_history) <= 4
    # An iteration cannot lower the objective by 100 %: tol = 1 stops after the first one.
    q = make(method, 3, n_codewords=16, n_iter=50, tol=1.0, seed=0).fit(mixture)
    assert len(q.objective_history) <= 2, q.stop_reason


def test_ockm_with_one_codebook_is_ckm(mixture, mixture_queries):
    """CKM is the OCKM loop with C = 1 (docs/ARCHITECTURE.md, "The method"): same seed, same model arrays, same codes."""
    a = CKM(3, n_codewords=16, n_iter=4, seed=2).fit(mixture)
    b = OCKM(3, 1, 10, n_codewords=16, n_iter=4, seed=2).fit(mixture)
    np.testing.assert_array_equal(a.rotation, b.rotation)
    np.testing.assert_array_equal(a.codebooks, b.codebooks)
    np.testing.assert_array_equal(a.objective_history, b.objective_history)
    np.testing.assert_array_equal(a.encode(mixture_queries), b.encode(mixture_queries))


def test_refit_replaces_the_model(mixture):
    q = OCKM(3, n_codewords=16, n_iter=2, seed=0)
    q.fit(mixture)
    X12 = gaussian_mixture(300, 12, seed=5)
    q.fit(X12)
    assert q.dim == 12 and q.rotation.shape == (12, 12) and q.encode(X12).shape == (300, 6)
    assert q == OCKM(3, n_codewords=16, n_iter=2, seed=0).fit(X12)


def test_state_round_trip(fitted):
    for q in fitted.values():
        params, arrays = q._get_state()
        again = quantizer_from_state(params, arrays)
        assert type(again) is type(q) and again == q


def test_verbose_writes_to_stderr_only(mixture, capsys):
    OCKM(3, n_codewords=16, n_iter=2, seed=0, verbose=True).fit(mixture)
    out, err = capsys.readouterr()
    assert out == "" and "objective" in err
    OCKM(3, n_codewords=16, n_iter=2, seed=0).fit(mixture)
    assert capsys.readouterr() == ("", "")


# ================================================================================================================
# 5. Determinism


@pytest.fixture(scope="module")
def determinism_data():
    # Enough rows for several encode chunks (128), product chunks (1024) and all X^T Y slices; P = 20, M = 3 uneven.
    return gaussian_mixture(2600, 20, n_clusters=30, seed=9)


@pytest.mark.parametrize("method", ["PQ", "CKM", "ECKM", "OCKM"])
def test_same_seed_bit_identical_any_threads(method, determinism_data):
    X = determinism_data
    kw = dict(n_codewords=32, n_iter=4, seed=11)
    models = [make(method, 3, 2, 4, n_threads=t, **kw).fit(X) for t in (1, 2, 1, 2)]
    first = models[0]
    codes = first.encode(X, n_threads=1)
    for q in models:
        assert q == first
        if method == "PQ":
            assert q.rotation is None
        else:
            np.testing.assert_array_equal(q.rotation, first.rotation)
        np.testing.assert_array_equal(q.codebooks, first.codebooks)
        np.testing.assert_array_equal(q.objective_history, first.objective_history)
        for t in (1, 2):
            np.testing.assert_array_equal(q.encode(X, n_threads=t), codes)
            np.testing.assert_array_equal(q.decode(codes, n_threads=t), first.decode(codes, n_threads=1))
            np.testing.assert_array_equal(q.code_norms(codes, n_threads=t), first.code_norms(codes, n_threads=1))
            assert q.distortion(X, n_threads=t) == first.distortion(X, n_threads=1)


def test_model_tables_do_not_depend_on_the_process_blas_threads(tmp_path):
    """The tables derived from a model (the codebooks' cross products of the encoder and the norm terms) are the same
    bits in a process whose BLAS runs on one thread (a Dask worker: OPENBLAS_NUM_THREADS=1) as in one using every
    core: files built by either are identical. A 256 x 256 x 32 product is large enough for a threaded sgemm."""
    X = gaussian_mixture(800, 64, n_clusters=20, seed=3)
    q = OCKM(2, 2, 4, n_iter=1, seed=0).fit(X)
    codes = q.encode(X[:400], n_threads=1)
    path = tmp_path / "q.ockq"
    save_quantizer(path, q)
    script = textwrap.dedent(f"""
        import numpy as np, ockstore
        q = ockstore.load_quantizer({str(path)!r})
        X = np.load({str(tmp_path / "x.npy")!r})
        np.save({str(tmp_path / "pairs.npy")!r}, q._tables.pair_tables)
        np.save({str(tmp_path / "norms.npy")!r}, q.code_norms(q.encode(X, n_threads=1), n_threads=1))
    """)
    np.save(tmp_path / "x.npy", X[:400])
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, check=True, timeout=120)
    loaded = load_quantizer(path)
    np.testing.assert_array_equal(np.load(tmp_path / "pairs.npy"), loaded._tables.pair_tables)
    np.testing.assert_array_equal(np.load(tmp_path / "norms.npy"), loaded.code_norms(codes, n_threads=2))


@pytest.mark.parametrize("method", ["PQ", "CKM", "ECKM", "OCKM"])
def test_different_seeds_differ(method, mixture):
    a = make(method, 3, n_codewords=16, n_iter=2, seed=0).fit(mixture)
    b = make(method, 3, n_codewords=16, n_iter=2, seed=1).fit(mixture)
    assert not np.array_equal(a.codebooks, b.codebooks)
    assert a != b


def test_generator_seed_is_used(mixture):
    a = OCKM(3, n_codewords=16, n_iter=2, seed=np.random.default_rng(5)).fit(mixture)
    b = OCKM(3, n_codewords=16, n_iter=2, seed=np.random.default_rng(5)).fit(mixture)
    np.testing.assert_array_equal(a.codebooks, b.codebooks)


# ================================================================================================================
# 6. Decode, distortion, code norms, equality, learned attributes


@pytest.mark.parametrize("case", FITTED_CASES, ids=lambda c: "-".join(map(str, c)))
def test_decode_distortion_and_norms(fitted, mixture_queries, case):
    q = fitted[case]
    X = mixture_queries
    codes = q.encode(X)
    X_hat = q.decode(codes)
    assert X_hat.dtype == np.float32 and X_hat.shape == X.shape
    want = ref.decode(codes, q.rotation, q.codebooks, dim=X.shape[1])
    np.testing.assert_allclose(X_hat, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())

    diff = X.astype(np.float64) - X_hat.astype(np.float64)
    np.testing.assert_allclose(q.distortion(X), np.einsum("ij,ij->", diff, diff) / len(X), rtol=1e-6)
    # and against the float64 oracle, to float32 accuracy
    np.testing.assert_allclose(q.distortion(X), ref.code_errors(X, q.rotation, q.codebooks, codes).mean(),
                               rtol=1e-4)

    norms = q.code_norms(codes)
    assert norms.dtype == np.float32 and norms.shape == (len(X),)
    np.testing.assert_allclose(norms, sq_rows(X_hat), rtol=1e-4, atol=1e-6 * sq_rows(X_hat).max())


@pytest.mark.parametrize("case", FITTED_CASES, ids=lambda c: "-".join(map(str, c)))
def test_adc_oracle_agrees_with_decode(fitted, mixture_queries, case):
    """The ADC oracle kept for the search tests equals the plain squared distance to the reconstruction (to the
    orthogonality of a float32 rotation, ~1e-7)."""
    q = fitted[case]
    codes = q.encode(mixture_queries[:50])
    Q = mixture_queries[50:60]
    X_hat = ref.decode(codes, q.rotation, q.codebooks, dim=Q.shape[1])
    plain = ((Q.astype(np.float64)[:, None] - X_hat[None]) ** 2).sum(axis=2)
    np.testing.assert_allclose(ref.adc_distances(Q, codes, q.rotation, q.codebooks), plain, rtol=1e-6)


@pytest.mark.parametrize("case", FITTED_CASES, ids=lambda c: "-".join(map(str, c)))
def test_learned_attributes(fitted, case):
    q = fitted[case]
    method, M, C, T, K = case
    P = 10
    S = -(-P // M)
    assert q.code_size == M * C and q.bits == 8 * M * C
    assert q.codebooks.shape == (M, C, K, S) and q.codebooks.dtype == np.float32
    assert q.subspace_dims.tolist() == ref.subspace_sizes(P, M)
    for m, size in enumerate(ref.subspace_sizes(P, M)):
        assert (q.codebooks[m, :, :, size:] == 0).all(), "padding columns must stay exactly zero"
    assert np.isfinite(q.codebooks).all()
    if method == "PQ":
        assert q.rotation is None
    else:
        assert q.rotation.shape == (P, P) and q.rotation.dtype == np.float32
        np.testing.assert_allclose(q.rotation.T @ q.rotation, np.eye(P), atol=1e-5)
    if method == "ECKM":
        for c in range(1, C):
            np.testing.assert_array_equal(q.codebooks[:, c], q.codebooks[:, 0])
    if C == 1:
        assert q.norm_levels is None
    else:
        levels = q.norm_levels
        assert levels.shape == (256,) and levels.dtype == np.float32
        assert (np.diff(levels) >= 0).all()


@pytest.mark.parametrize("method", ["PQ", "CKM", "ECKM", "OCKM"])
def test_equality_semantics(method, mixture):
    kw = dict(n_codewords=16, n_iter=3)
    a = make(method, 3, **kw, seed=0).fit(mixture)
    assert a == a
    assert a == make(method, 3, **kw, seed=0).fit(mixture)
    assert a == copy.deepcopy(a)
    assert a != make(method, 3, **kw, seed=1).fit(mixture)
    assert a != make(method, 3, **kw, seed=0)                     # unfitted
    assert a != make(method, 3, n_codewords=16, n_iter=4, seed=0).fit(mixture)   # other parameters
    assert (a == 3) is False
    assert make(method, 3, **kw) == make(method, 3, **kw)          # two unfitted models with equal parameters
    with pytest.raises(TypeError):
        hash(a)


def test_beam_width_above_n_codewords_acts_as_n_codewords(mixture, mixture_queries):
    a = OCKM(3, 2, 16, n_codewords=16, n_iter=3, seed=0).fit(mixture)
    b = OCKM(3, 2, 1000, n_codewords=16, n_iter=3, seed=0).fit(mixture)
    np.testing.assert_array_equal(a.codebooks, b.codebooks)
    np.testing.assert_array_equal(a.encode(mixture_queries), b.encode(mixture_queries))


def test_beam_width_beyond_int32_acts_as_n_codewords(mixture, mixture_queries):
    """docs/ARCHITECTURE.md, "Conventions": beam_width >= 1, values above K act as K. A Python int above 2**31 - 1 must not overflow."""
    a = OCKM(3, 2, 16, n_codewords=16, n_iter=2, seed=0).fit(mixture)
    b = OCKM(3, 2, 2**31, n_codewords=16, n_iter=2, seed=0).fit(mixture)
    np.testing.assert_array_equal(b.encode(mixture_queries), a.encode(mixture_queries))
    assert b.distortion(mixture_queries) == a.distortion(mixture_queries)


# ================================================================================================================
# Theorems, constructively: OCKM's model contains CKM's (synthetic, exact)


def test_theorem2_construction_ockm_half_m_represents_ckm(mixture):
    """Theorem 2's proof: OCKM(M/2, C=2) with codebooks [D_2i; 0] and [0; D_2i+1] and CKM(M)'s rotation
    reproduces CKM(M) exactly, so the best OCKM(M/2, 2) can only do better at the same code length."""
    X = gaussian_mixture(800, 16, seed=6)
    ckm = CKM(4, n_codewords=16, n_iter=3, seed=0).fit(X)
    D = ckm.codebooks                                      # (4, 1, 16, 4)
    W = np.zeros((2, 2, 16, 8), dtype=np.float32)
    for i in range(2):
        W[i, 0, :, :4] = D[2 * i, 0]
        W[i, 1, :, 4:] = D[2 * i + 1, 0]
    params, arrays = ckm._get_state()
    ockm = quantizer_from_state({**params, "method": "ockm", "n_subspaces": 2, "n_codebooks": 2, "beam_width": 1},
                                {**arrays, "codebooks": W})
    np.testing.assert_array_equal(ockm.encode(X), ckm.encode(X))
    np.testing.assert_allclose(ockm.distortion(X), ckm.distortion(X), rtol=1e-5)


# ================================================================================================================
# 7. The theorems on real data (sift-real sample)


@pytest.mark.slow
def test_theorems_on_sift(sift_sample):
    """Distortion at 64-bit codes (K = 256) on 20,000 learn vectors, evaluated on 20,000 base vectors.

    Theorem 1 (equal M): OCKM(M, 2) <= CKM(M) and OCKM(M, 2) <= ECKM(M, 2).
    Theorem 2 (equal code length): OCKM(M/2, 2) < CKM(M), here 64 bits: OCKM(4, 2) vs CKM(8).
    The theorems are about the objective that training minimises, so both are asserted on the training vectors;
    Theorem 1, whose margin is large, also on the held-out base vectors.
    """
    learn, base = sift_sample
    kw = dict(n_iter=8, seed=0)
    ckm8 = CKM(8, **kw).fit(learn)
    eckm8 = ECKM(8, 2, **kw).fit(learn)
    ockm8 = OCKM(8, 2, **kw).fit(learn)
    ockm4 = OCKM(4, 2, **kw).fit(learn)
    assert ockm4.bits == ckm8.bits == 64
    train = {name: q.distortion(learn) for name, q in
             [("ckm8", ckm8), ("eckm8", eckm8), ("ockm8", ockm8), ("ockm4", ockm4)]}
    held_out = {name: q.distortion(base) for name, q in [("ckm8", ckm8), ("eckm8", eckm8), ("ockm8", ockm8)]}
    assert train["ockm8"] <= train["ckm8"], train
    assert train["ockm8"] <= train["eckm8"], train
    assert held_out["ockm8"] <= held_out["ckm8"], held_out
    assert held_out["ockm8"] <= held_out["eckm8"], held_out
    assert train["ockm4"] < train["ckm8"], train


@pytest.mark.slow
def test_theorems_on_sift_held_out_with_defaults(sift_full_learn):
    """The paper's setting: the whole 100K learn set, default iterations, distortion on 50,000 held-out base vectors.

    Theorem 2 at 64 bits: OCKM(4, 2) < CKM(8). Theorem 1 at M = 4: OCKM(4, 2) <= CKM(4) and <= ECKM(4, 2).
    (With a 20K sample and few iterations OCKM over-fits enough to lose Theorem 2 on held-out data; see above.)
    """
    learn, base = sift_full_learn
    ockm4 = OCKM(4, 2, 10).fit(learn)
    held_out = {
        "ockm4": ockm4.distortion(base),
        "ckm8": CKM(8).fit(learn).distortion(base),
        "ckm4": CKM(4, n_iter=10).fit(learn).distortion(base),
        "eckm4": ECKM(4, 2, n_iter=10).fit(learn).distortion(base),
    }
    assert held_out["ockm4"] < held_out["ckm8"], held_out
    assert held_out["ockm4"] <= held_out["ckm4"], held_out
    assert held_out["ockm4"] <= held_out["eckm4"], held_out


# ================================================================================================================
# 8. The public boundary: bad inputs, shapes, dtypes


@pytest.fixture(scope="module")
def small_model(mixture):
    return OCKM(3, 2, 4, n_codewords=16, n_iter=2, seed=0).fit(mixture)


def assert_refused_by_fit_encode_distortion(model, bad, exc):
    """fit (of a new OCKM), model.encode and model.distortion each raise ``exc`` naming the argument X."""
    for call in (OCKM(3, n_codewords=16, n_iter=1).fit, model.encode, model.distortion):
        with pytest.raises(exc, match=r"\bX\b"):
            call(bad)


def _with_bad_value(X, value):
    X = np.array(X, dtype=np.float64)
    X[3, 2] = value
    return X


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_values_refused(small_model, mixture, value):
    bad = _with_bad_value(mixture, value)
    assert_refused_by_fit_encode_distortion(small_model, bad, ValueError)
    with pytest.raises(ValueError, match=r"\bX\b"):
        small_model.encode(bad.astype(np.float16))


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_values_too_large_for_float32_refused(small_model):
    with pytest.raises(ValueError, match=r"\bX\b"):
        small_model.encode(np.full((2, 10), 1e300))


def test_wrong_shapes_refused(small_model, mixture):
    with pytest.raises(ValueError, match=r"\bX\b.*2-D"):
        OCKM(3, n_codewords=16).fit(mixture.reshape(3, 500, 10))
    with pytest.raises(ValueError, match=r"\bX\b.*2-D"):
        small_model.encode(mixture[None])
    with pytest.raises(ValueError, match=r"\bX\b.*dimension 9.*10"):
        small_model.encode(mixture[:, :9])
    with pytest.raises(ValueError, match=r"\bX\b"):
        small_model.distortion(np.zeros((5, 11)))
    with pytest.raises(ValueError, match=r"\bX\b"):
        small_model.encode(np.float32(3.0))
    with pytest.raises(ValueError, match=r"\bX\b"):
        OCKM(3).fit(np.zeros((300, 0)))


def test_fit_needs_n_codewords_rows_and_enough_dims(mixture):
    with pytest.raises(ValueError, match="n_codewords"):
        OCKM(3, n_codewords=16).fit(mixture[:15])
    OCKM(3, n_codewords=16, n_iter=1).fit(mixture[:16])  # exactly K rows is enough
    with pytest.raises(ValueError, match="n_subspaces"):
        CKM(11, n_codewords=16).fit(mixture)
    PQ(10, n_codewords=16, n_iter=1).fit(mixture)        # M == P is allowed


@pytest.mark.parametrize("factory, name", [
    (lambda: OCKM(3, n_codewords=257), "n_codewords"),
    (lambda: OCKM(3, n_codewords=1), "n_codewords"),
    (lambda: PQ(3, n_codewords=0), "n_codewords"),
    (lambda: OCKM(0), "n_subspaces"),
    (lambda: CKM(-1), "n_subspaces"),
    (lambda: OCKM(3, 0), "n_codebooks"),
    (lambda: ECKM(3, 0), "n_codebooks"),
    (lambda: OCKM(3, 2, 0), "beam_width"),
    (lambda: OCKM(3, n_iter=0), "n_iter"),
    (lambda: PQ(3, n_iter=-2), "n_iter"),
    (lambda: OCKM(3, tol=-1e-9), "tol"),
    (lambda: OCKM(3, tol=float("nan")), "tol"),
    (lambda: OCKM(3, seed=-1), "seed"),
    (lambda: OCKM(3, n_threads=0), "n_threads"),
])
def test_out_of_range_parameters(factory, name):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        factory()


@pytest.mark.parametrize("factory, name", [
    (lambda: OCKM(True), "n_subspaces"),
    (lambda: OCKM(3.0), "n_subspaces"),
    (lambda: OCKM(np.float64(3)), "n_subspaces"),
    (lambda: OCKM(3, np.True_), "n_codebooks"),
    (lambda: OCKM(3, 2, 2.0), "beam_width"),
    (lambda: OCKM(3, 2, True), "beam_width"),
    (lambda: PQ(3, n_codewords=16.0), "n_codewords"),
    (lambda: CKM(3, n_codewords=True), "n_codewords"),
    (lambda: ECKM(3, n_iter=5.0), "n_iter"),
    (lambda: OCKM(3, n_iter=False), "n_iter"),
    (lambda: OCKM(3, tol=True), "tol"),
    (lambda: OCKM(3, tol="0.1"), "tol"),
    (lambda: OCKM(3, seed=1.0), "seed"),
    (lambda: OCKM(3, seed=True), "seed"),
    (lambda: OCKM(3, n_threads=2.0), "n_threads"),
    (lambda: OCKM(3, n_threads=True), "n_threads"),
    (lambda: OCKM(3, verbose=1), "verbose"),
])
def test_wrongly_typed_parameters(factory, name):
    with pytest.raises(TypeError, match=rf"\b{name}\b"):
        factory()


def test_numpy_integers_accepted_as_parameters(mixture):
    q = OCKM(np.int64(3), np.uint8(2), np.int32(4), n_codewords=np.int16(16), n_iter=np.int64(1),
             tol=np.float32(0.0), seed=np.uint32(0)).fit(mixture)
    assert q == OCKM(3, 2, 4, n_codewords=16, n_iter=1, tol=0.0, seed=0).fit(mixture)
    assert type(q.n_subspaces) is int


def test_encode_n_threads_checked(small_model, mixture):
    with pytest.raises(ValueError, match="n_threads"):
        small_model.encode(mixture, n_threads=0)
    with pytest.raises(TypeError, match="n_threads"):
        small_model.encode(mixture, n_threads=1.0)


@pytest.mark.parametrize("bad", [
    np.ones((20, 10), dtype=bool),
    np.ones((20, 10), dtype=np.complex64),
    np.ones((20, 10), dtype=object),
    np.full((20, 10), "1.0"),
    np.zeros(20, dtype=[("a", "f4"), ("b", "f4")]),
    [[1.0, 2.0], [3.0]],
    [[1.0] * 10, [2.0] * 9],
    [[1.0] * 9 + ["x"]] * 20,
], ids=["bool", "complex", "object", "str", "structured", "ragged", "ragged10", "mixed-str"])
def test_non_numeric_arrays_refused(small_model, bad):
    assert_refused_by_fit_encode_distortion(small_model, bad, TypeError)


def test_decode_refuses_bad_codes(small_model):
    W = small_model.code_size
    with pytest.raises(ValueError, match=r"\bcodes\b"):
        small_model.decode(np.full((3, W), 16))
    with pytest.raises(ValueError, match=r"\bcodes\b"):
        small_model.decode(np.full((3, W), -1))
    with pytest.raises(ValueError, match=r"\bcodes\b"):
        small_model.decode(np.zeros((3, W + 1), dtype=np.uint8))
    with pytest.raises(ValueError, match=r"\bcodes\b"):
        small_model.decode(np.zeros((3, W - 1), dtype=np.uint8))
    with pytest.raises(ValueError, match=r"\bcodes\b"):
        small_model.decode(np.zeros((2, 3, W), dtype=np.uint8))
    with pytest.raises(TypeError, match=r"\bcodes\b"):
        small_model.decode(np.zeros((3, W), dtype=np.float32))
    with pytest.raises(TypeError, match=r"\bcodes\b"):
        small_model.decode(np.zeros((3, W), dtype=bool))
    with pytest.raises(ValueError, match=r"\bcodes\b"):
        small_model.code_norms(np.full((3, W), 255, dtype=np.uint8))


@pytest.mark.parametrize("method", ["PQ", "CKM", "ECKM", "OCKM"])
def test_unfitted_use_raises_not_fitted(method, mixture):
    q = make(method, 3)
    assert not q.is_fitted
    calls = [lambda: q.encode(mixture), lambda: q.decode(np.zeros((1, q.code_size), np.uint8)),
             lambda: q.distortion(mixture), lambda: q.code_norms(np.zeros((1, q.code_size), np.uint8)),
             lambda: q.rotation, lambda: q.codebooks, lambda: q.objective_history, lambda: q.norm_levels,
             lambda: q.subspace_dims]
    for call in calls:
        with pytest.raises(NotFittedError, match="fit"):
            call()
    assert issubclass(NotFittedError, ValueError)


def test_zero_rows_and_single_vectors(small_model, mixture):
    q = small_model
    W = q.code_size
    empty = q.encode(np.empty((0, 10), dtype=np.float32))
    assert empty.shape == (0, W) and empty.dtype == np.uint8
    assert q.decode(empty).shape == (0, 10)
    assert q.code_norms(empty).shape == (0,)
    with pytest.raises(ValueError, match=r"\bX\b"):
        q.distortion(np.empty((0, 10)))

    x = mixture[7]
    code = q.encode(x)
    assert code.shape == (W,) and code.dtype == np.uint8
    np.testing.assert_array_equal(code, q.encode(mixture[7:8])[0])
    x_hat = q.decode(code)
    assert x_hat.shape == (10,)
    np.testing.assert_array_equal(x_hat, q.decode(code[None])[0])
    assert np.ndim(q.code_norms(code)) == 0
    np.testing.assert_allclose(q.distortion(x), ((x.astype(np.float64) - x_hat) ** 2).sum(), rtol=1e-6)
    # codes as a plain list of Python ints
    np.testing.assert_array_equal(q.decode(code.tolist()), x_hat)


@pytest.fixture(scope="module")
def integer_data():
    """(500, 10) integer-valued vectors in 0..255, as float32, and a model fitted on them."""
    X = np.clip(np.round(gaussian_mixture(500, 10, seed=12) * 12 + 128), 0, 255).astype(np.float32)
    return X, OCKM(3, 2, 4, n_codewords=16, n_iter=2, seed=0).fit(X)


def _layouts(X):
    """Equivalent representations of the integer-valued float32 array X (values 0..255)."""
    wide = np.zeros((X.shape[0], 2 * X.shape[1]), dtype=np.float32)
    wide[:, ::2] = X
    return {
        "float64": X.astype(np.float64),
        "float16": X.astype(np.float16),
        "uint8": X.astype(np.uint8),
        "int16": X.astype(np.int16),
        "int64": X.astype(np.int64),
        "uint64": X.astype(np.uint64),
        "big-endian-f4": X.astype(">f4"),
        "big-endian-i4": X.astype(">i4"),
        "fortran": np.asfortranarray(X),
        "non-contiguous": wide[:, ::2],
        "negative-strides": np.ascontiguousarray(X[::-1])[::-1],
        "read-only": np.frombuffer(X.tobytes(), dtype=np.float32).reshape(X.shape),
        "list": X.tolist(),
    }


@pytest.mark.parametrize("layout", list(_layouts(np.zeros((1, 1), np.float32))))
def test_any_real_dtype_and_layout_gives_same_codes(integer_data, layout):
    X, q = integer_data
    expected = q.encode(X)
    Y = _layouts(X)[layout]
    np.testing.assert_array_equal(q.encode(Y), expected)
    assert q.distortion(Y) == q.distortion(X)
    # fit converts once: the same model whatever the input representation
    if layout in ("uint8", "big-endian-f4", "non-contiguous"):
        assert OCKM(3, 2, 4, n_codewords=16, n_iter=2, seed=0).fit(Y) == q


def test_encode_in_steps_equals_one_step(small_model, mixture, monkeypatch):
    """encode / decode / distortion work ROWS_PER_STEP rows at a time: results must not depend on the step."""
    from ockstore import quantizers

    codes = small_model.encode(mixture)
    X_hat = small_model.decode(codes)
    dist = small_model.distortion(mixture)
    monkeypatch.setattr(quantizers, "ROWS_PER_STEP", 97)
    np.testing.assert_array_equal(small_model.encode(mixture), codes)
    np.testing.assert_array_equal(small_model.decode(codes), X_hat)
    np.testing.assert_allclose(small_model.distortion(mixture), dist, rtol=1e-12)


# ================================================================================================================
# Huge but finite inputs: the kernel's minimum search must never return an index outside the codebook


def test_encoder_codes_in_range_for_large_finite_tables():
    """Word norms in (3e38, FLT_MAX) are finite float32; the nearest word must still be one of the K words.

    Words 1.80e19 .. 1.77e19 (1-D): ||d||^2 is 3.24e38 .. 3.13e38, all finite; z = 0, so word 3 is nearest.
    """
    D = np.array([1.80e19, 1.79e19, 1.78e19, 1.77e19], dtype=np.float32).reshape(1, 1, 4, 1)
    assert np.isfinite(D.astype(np.float32) ** 2).all()
    codes, errors = CodecTables(SubspaceLayout(1, 1), None, D).encode(np.zeros((3, 1), np.float32), 1, 1)
    assert (codes < 4).all(), f"codes out of range 0..3: {codes.ravel()}"
    np.testing.assert_array_equal(codes.ravel(), [3, 3, 3])


def test_fit_on_huge_finite_values_fails_cleanly_or_works():
    """X finite in float32 whose squares overflow it (|x| ~ 1e19): fit must raise ValueError naming X, or give
    codes in range -- never corrupt memory. Run in a subprocess because today it crashes the interpreter."""
    script = textwrap.dedent("""
        import numpy as np, ockstore
        X = np.random.default_rng(0).normal(size=(300, 8)).astype(np.float32) * np.float32(1e19)
        try:
            q = ockstore.PQ(2, n_codewords=16, n_iter=2, seed=0).fit(X)
            codes = q.encode(X)
            h = q.objective_history
        except ValueError as exc:
            print("ValueError", exc)
        else:
            print("fitted", int(codes.max()), bool(np.isfinite(h).all()))
        import gc; gc.collect()
        print("done")
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"interpreter died (rc {proc.returncode}): {proc.stderr[-800:]}"
    lines = proc.stdout.split("\n")
    assert lines[-2] == "done"
    if lines[0].startswith("ValueError"):
        assert "X" in lines[0].split(), lines[0]
    else:
        _, top, finite = lines[0].split()
        assert int(top) < 16 and finite == "True", lines[0]
