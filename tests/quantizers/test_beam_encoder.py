"""Tests of the beam encoder (the codec kernel of OCKM, ECKM, CKM and PQ) against the NumPy recursion of
``tests/support/reference.py``: random codebooks, exact ties, every instruction set, T = K exhaustive, and huge but
finite inputs (docs/ARCHITECTURE.md, "The method").
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import reference as ref
from helpers import REPO
from helpers import random_rotation
from quantizer_checks import assert_codes_match, sq_rows
from ockstore import _kernels
from ockstore.quantizers.tables import CodecTables, SubspaceLayout


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
    """The encoder's kernels exist for AVX-512, AVX2+FMA and portable C (kernels/encoder.h); every level this CPU runs
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
