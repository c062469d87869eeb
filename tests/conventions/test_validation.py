"""Unit tests of ockstore._validation (the one place where public inputs are checked and converted) and of the path
rules of ockstore.paths (docs/ARCHITECTURE.md, "Conventions")."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from ockstore import _kernels
from ockstore._validation import (
    as_codes,
    as_ids,
    as_vectors,
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_vectors_dtype,
    resolve_n_threads,
    to_float32_rows,
)
from ockstore.paths import check_input_file as check_regular_file
from ockstore.paths import check_output_file as check_output_path

from helpers import returns_within


# ----------------------------------------------------------------------------------------------------- check_int
@pytest.mark.parametrize("value", [0, 7, np.int8(7), np.uint8(7), np.int64(7), np.uint64(7), 10**30])
def test_check_int_accepts_python_and_numpy_integers(value):
    out = check_int(value, "n")
    assert type(out) is int and out == int(value)


@pytest.mark.parametrize("value", [True, False, np.True_, 7.0, np.float32(7), 7.5, "7", None, [7], 7 + 0j,
                                   np.array(7), np.array([7])])
def test_check_int_refuses_non_integers(value):
    with pytest.raises(TypeError, match=r"^n_things must be an integer"):
        check_int(value, "n_things")


def test_check_int_range():
    assert check_int(3, "k", min_value=3, max_value=3) == 3
    with pytest.raises(ValueError, match=r"k must be >= 1, got 0"):
        check_int(0, "k", min_value=1)
    with pytest.raises(ValueError, match=r"k must be <= 256, got 257"):
        check_int(257, "k", max_value=256)
    with pytest.raises(ValueError, match=r"k must be >= 1"):
        check_int(np.int64(-5), "k", min_value=1)


# --------------------------------------------------------------------------------------------------- check_float
@pytest.mark.parametrize("value", [0, 1, 0.5, np.float32(0.25), np.float64(2.0), np.int32(3)])
def test_check_float_accepts_reals(value):
    out = check_float(value, "tol", min_value=0.0)
    assert type(out) is float and out == float(value)


@pytest.mark.parametrize("value", [True, np.bool_(False), "0.1", None, 1j, [0.1]])
def test_check_float_refuses_non_reals(value):
    with pytest.raises(TypeError, match=r"^tol must be a real number"):
        check_float(value, "tol")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -np.inf, np.float32("nan")])
def test_check_float_refuses_non_finite(value):
    with pytest.raises(ValueError, match=r"^tol must be finite"):
        check_float(value, "tol")


def test_check_float_minimum():
    assert check_float(0.0, "tol", min_value=0.0) == 0.0
    with pytest.raises(ValueError, match=r"tol must be >= 0"):
        check_float(-1e-12, "tol", min_value=0.0)


# ------------------------------------------------------------------------------------- check_bool, check_choice
def test_check_bool():
    assert check_bool(True, "verbose") is True
    assert check_bool(np.False_, "verbose") is False
    for bad in (1, 0, "yes", None):
        with pytest.raises(TypeError, match="verbose"):
            check_bool(bad, "verbose")


def test_check_choice_is_exact():
    assert check_choice("adc", "distance", ("adc", "sdc")) == "adc"
    for bad in ("ADC", " adc", "adc ", b"adc", None, 1):
        with pytest.raises(ValueError, match=r"distance must be 'adc' or 'sdc'"):
            check_choice(bad, "distance", ("adc", "sdc"))


# --------------------------------------------------------------------------------------------- resolve_n_threads
def test_resolve_n_threads():
    assert resolve_n_threads(None) == len(os.sched_getaffinity(0))
    assert resolve_n_threads(1) == 1
    assert resolve_n_threads(np.int64(2)) == 2
    with pytest.raises(ValueError, match="n_threads"):
        resolve_n_threads(0)
    with pytest.raises(TypeError, match="n_threads"):
        resolve_n_threads(2.0)
    with pytest.raises(TypeError, match="n_threads"):
        resolve_n_threads(True)


# -------------------------------------------------------------------------------------------------- as_vectors
def test_as_vectors_converts_to_c_contiguous_float32():
    X = np.arange(12, dtype=np.int16).reshape(3, 4)
    out, was_1d = as_vectors(X, "X")
    assert out.dtype == np.float32 and out.flags.c_contiguous and not was_1d
    np.testing.assert_array_equal(out, X)


@pytest.mark.parametrize("make", [
    lambda X: X.astype(">f8"),
    lambda X: X.astype(">i2"),
    lambda X: np.asfortranarray(X),
    lambda X: np.repeat(X, 2, axis=1)[:, ::2],
    lambda X: X.astype(np.float16),
    lambda X: X.astype(np.uint8),
    lambda X: X.astype(np.uint64),
    lambda X: X.tolist(),
    lambda X: tuple(map(tuple, X.tolist())),
], ids=["f8-big-endian", "i2-big-endian", "fortran", "strided", "float16", "uint8", "uint64", "list", "tuple"])
def test_as_vectors_any_real_representation(make):
    X = np.arange(24, dtype=np.float32).reshape(4, 6)
    out, _ = as_vectors(make(X), "X", 6)
    assert out.dtype == np.dtype(np.float32) and out.dtype.isnative and out.flags.c_contiguous
    np.testing.assert_array_equal(out, X)


def test_as_vectors_one_vector():
    out, was_1d = as_vectors([1, 2, 3], "X", 3)
    assert was_1d and out.shape == (1, 3)
    out, was_1d = as_vectors(np.ones((1, 3)), "X", 3)
    assert not was_1d and out.shape == (1, 3)


def test_as_vectors_without_conversion_keeps_dtype():
    X = np.arange(6, dtype=np.uint8).reshape(2, 3)
    out, _ = as_vectors(X, "X", convert=False)
    assert out.dtype == np.uint8
    assert np.shares_memory(out, X)  # no copy: the caller converts chunk by chunk


def test_as_vectors_zero_rows_allowed():
    out, was_1d = as_vectors(np.empty((0, 5)), "X", 5)
    assert out.shape == (0, 5) and out.dtype == np.float32 and not was_1d


@pytest.mark.parametrize("X, pattern", [
    (np.zeros((2, 3, 4)), r"base must be a 2-D array .* got 3 dimensions"),
    (np.float64(1.0), r"base must be a 2-D array .* got 0 dimensions"),
    (np.zeros((2, 4)), r"base has dimension 4, expected 5"),
    (np.zeros(4), r"base has dimension 4, expected 5"),
])
def test_as_vectors_shape_errors(X, pattern):
    with pytest.raises(ValueError, match=pattern):
        as_vectors(X, "base", 5)


def test_as_vectors_needs_a_column():
    with pytest.raises(ValueError, match=r"base must have at least one column"):
        as_vectors(np.zeros((3, 0)), "base")
    with pytest.raises(ValueError, match=r"base must have at least one column"):
        as_vectors([], "base")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_as_vectors_refuses_non_finite(bad, dtype):
    X = np.zeros((3, 4), dtype=dtype)
    X[2, 1] = bad
    with pytest.raises(ValueError, match=r"queries contains NaN or infinite values"):
        as_vectors(X, "queries")
    # convert=False defers the check to to_float32_rows
    out, _ = as_vectors(X, "queries", convert=False)
    with pytest.raises(ValueError, match=r"queries contains NaN"):
        to_float32_rows(out, "queries")


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_as_vectors_refuses_values_beyond_float32():
    with pytest.raises(ValueError, match=r"X contains values too large for float32"):
        as_vectors(np.array([[1.0, 4e38]]), "X")
    with pytest.raises(ValueError, match=r"X contains values too large for float32"):
        to_float32_rows(np.array([[1.0, -1e300]]), "X")


@pytest.mark.parametrize("bad", [
    np.ones((2, 3), dtype=bool),
    np.ones((2, 3), dtype=np.complex128),
    np.ones((2, 3), dtype=object),
    np.array([["a", "b"]]),
    np.array([[b"a", b"b"]]),
    np.zeros(3, dtype=[("x", "f4")]),
    np.array([[1, 2]], dtype="datetime64[s]"),
    [[1, 2], [3]],
    [[1, 2], [3, "x"]],
    [[True, False]],
    [[1 + 2j, 3]],
], ids=["bool", "complex", "object", "str", "bytes", "structured", "datetime", "ragged", "ragged-str",
        "bool-list", "complex-list"])
def test_as_vectors_refuses_non_real(bad):
    with pytest.raises(TypeError, match=r"^learn must "):
        as_vectors(bad, "learn")


def test_check_vectors_dtype_no_copy_for_arrays():
    X = np.ones((2, 3), dtype=np.float64)
    assert check_vectors_dtype(X, "X") is X


# ----------------------------------------------------------------------------------------------------- as_codes
def test_as_codes_converts_and_checks_range():
    codes = np.array([[0, 15, 3], [7, 7, 7]], dtype=np.int64)
    out, was_1d = as_codes(codes, "codes", 3, 16)
    assert out.dtype == np.uint8 and out.flags.c_contiguous and not was_1d
    np.testing.assert_array_equal(out, codes)
    out, was_1d = as_codes([1, 2, 3], "codes", 3, 16)
    assert was_1d and out.shape == (1, 3)
    out, _ = as_codes(np.asfortranarray(codes.astype(">u2")), "codes", 3, 16)
    np.testing.assert_array_equal(out, codes)
    out, _ = as_codes(np.zeros((0, 3), dtype=np.uint8), "codes", 3, 16)
    assert out.shape == (0, 3)
    out, _ = as_codes(np.full((1, 3), 255, dtype=np.uint8), "codes", 3, 256)
    assert (out == 255).all()


@pytest.mark.parametrize("codes, pattern", [
    (np.array([[0, 16, 0]]), r"codes holds values outside 0..15 \(found 0..16\)"),
    (np.array([[0, -1, 0]]), r"codes holds values outside 0..15 \(found -1..0\)"),
    (np.array([[0, 256 + 3, 0]]), r"codes holds values outside"),   # would wrap to 3 in uint8
    (np.zeros((2, 4), dtype=np.uint8), r"codes must have shape \(n, 3\)"),
    (np.zeros((2, 2, 3), dtype=np.uint8), r"codes must have shape \(n, 3\)"),
    (np.zeros(4, dtype=np.uint8), r"codes must have shape \(n, 3\)"),
    (np.uint8(3), r"codes must have shape \(n, 3\)"),
])
def test_as_codes_value_errors(codes, pattern):
    with pytest.raises(ValueError, match=pattern):
        as_codes(codes, "codes", 3, 16)


@pytest.mark.parametrize("codes", [np.zeros((2, 3), dtype=np.float32), np.zeros((2, 3), dtype=bool),
                                   [[0.0, 1.0, 2.0]], np.zeros((2, 3), dtype=object), [["a", "b", "c"]]])
def test_as_codes_type_errors(codes):
    with pytest.raises(TypeError, match=r"^codes must be an integer array"):
        as_codes(codes, "codes", 3, 16)


# ------------------------------------------------------------------------------------------------------- as_ids
def test_as_ids():
    out = as_ids([5, 0, 5, 2**40], n=4)
    assert out.dtype == np.int64 and out.flags.c_contiguous
    np.testing.assert_array_equal(out, [5, 0, 5, 2**40])   # duplicates allowed
    out = as_ids(np.array([3, 1], dtype=">u4"), n=2)
    np.testing.assert_array_equal(out, [3, 1])
    assert as_ids(np.zeros(0, dtype=np.int32), n=0).shape == (0,)
    big = np.array([np.iinfo(np.int64).max], dtype=np.uint64)
    assert as_ids(big, n=1)[0] == np.iinfo(np.int64).max


@pytest.mark.parametrize("ids, n, exc, pattern", [
    (np.array([1, -1]), 2, ValueError, r"my_ids must be >= 0"),
    (np.array([1, 2, 3]), 2, ValueError, r"my_ids must have shape \(2,\)"),
    (np.zeros((2, 1), dtype=np.int64), 2, ValueError, r"my_ids must have shape \(2,\)"),
    (np.array([2**63], dtype=np.uint64), 1, ValueError, r"my_ids holds values above the int64 range"),
    (np.array([1.0, 2.0]), 2, TypeError, r"my_ids must be an integer array"),
    (np.array([True, False]), 2, TypeError, r"my_ids must be an integer array"),
    (["a", "b"], 2, TypeError, r"my_ids must be an integer array"),
])
def test_as_ids_errors(ids, n, exc, pattern):
    with pytest.raises(exc, match=pattern):
        as_ids(ids, "my_ids", n=n)


# ------------------------------------------------------------------------------------------- check_regular_file
def test_check_regular_file_accepts_files(tmp_path):
    f = tmp_path / "a.fvecs"
    f.write_bytes(b"x")
    assert check_regular_file(f) == str(f)
    assert check_regular_file(str(f)) == str(f)
    link = tmp_path / "link"
    link.symlink_to(f)
    assert check_regular_file(link) == str(link)


def test_check_regular_file_refuses_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    kind, result = returns_within(lambda: check_regular_file(fifo, "index_path"))
    assert kind == "raised" and isinstance(result, ValueError), result
    assert "index_path" in str(result) and "not a regular file" in str(result)


def test_check_regular_file_refuses_directory_and_devices(tmp_path):
    with pytest.raises(ValueError, match=r"path: .* is not a regular file"):
        check_regular_file(tmp_path)
    link = tmp_path / "dirlink"
    link.symlink_to(tmp_path)
    with pytest.raises(ValueError, match=r"is not a regular file"):
        check_regular_file(link)
    if os.path.exists("/dev/null"):
        kind, result = returns_within(lambda: check_regular_file("/dev/null"))
        assert kind == "raised" and isinstance(result, ValueError)


def test_check_regular_file_missing_and_wrong_type(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"src: no such file"):
        check_regular_file(tmp_path / "missing", "src")
    broken = tmp_path / "broken"
    broken.symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError):
        check_regular_file(broken)
    for bad in (3, None, ["a"]):
        with pytest.raises(TypeError, match=r"src must be a str or os.PathLike"):
            check_regular_file(bad, "src")


# -------------------------------------------------------------------------------------------- check_output_path
def test_check_output_path_accepts_new_and_existing_files(tmp_path, monkeypatch):
    new = tmp_path / "out.ock"
    assert check_output_path(new) == str(new)
    assert not new.exists(), "checking a path must not create it"
    new.write_bytes(b"old")
    assert check_output_path(str(new)) == str(new)
    monkeypatch.chdir(tmp_path)
    assert check_output_path("relative.ock") == "relative.ock"
    assert check_output_path(Path("relative.ock")) == "relative.ock"


def test_check_output_path_refusals(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"out: folder does not exist"):
        check_output_path(tmp_path / "no" / "such" / "x.ock", "out")
    with pytest.raises(ValueError, match=r"out: .* is a directory"):
        check_output_path(tmp_path, "out")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    kind, result = returns_within(lambda: check_output_path(fifo, "out"))
    assert kind == "raised" and isinstance(result, ValueError), result
    assert "not a regular file" in str(result)
    with pytest.raises(TypeError, match=r"out must be a str or os.PathLike"):
        check_output_path(42, "out")


@pytest.mark.parametrize("n", [0, 1, 7, 8, 15, 16, 17, 63, 64, 65, 384, 1001])
def test_max_abs_kernel_equals_numpy(n):
    """The one-pass check behind every vector input (_kernels.max_abs: an unsigned max over the bit patterns)
    equals NumPy's max |x| for finite values, and is +inf as soon as any value is NaN (either sign) or infinite,
    wherever it sits in the vector (any lane, the tail after the last full vector)."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)).astype(np.float32)
    expected = float(np.abs(x).max()) if n else 0.0
    assert _kernels.max_abs(x) == expected
    negative_nan = np.frombuffer(np.uint32(0xFFC00001).tobytes(), dtype=np.float32)[0]
    for bad in (np.nan, negative_nan, np.inf, -np.inf):
        for where in {0, n // 2, n - 1} if n else ():
            y = x.copy()
            y[where] = bad
            assert _kernels.max_abs(y) == np.inf
    if n:
        z = -np.abs(x)  # signs do not matter, -0.0 included
        z[0] = -0.0
        assert _kernels.max_abs(z) == float(np.abs(z).max())


def test_normalize_rows_divides_by_the_float64_norm():
    """Metric "cosine" normalises by the float64 norm (the kernel _kernels.row_sqnorms, which a query searched alone
    is normalised with too): each value divided in float64 and rounded once; within float64 rounding of the norm of
    NumPy's sum, for lengths around the kernel's four running sums, with values of very different magnitudes; a zero
    row is named."""
    from ockstore._validation import normalize_rows
    rng = np.random.default_rng(5)
    for P in (1, 3, 4, 5, 127, 384):
        rows = (rng.standard_normal((7, P)) * 10.0 ** rng.integers(-6, 7, size=(7, 1))).astype(np.float32)
        got = normalize_rows(rows, "X")
        norms = np.sqrt((rows.astype(np.float64) ** 2).sum(axis=1))
        want = (rows.astype(np.float64) / norms[:, None]).astype(np.float32)
        assert got.dtype == np.float32 and got.shape == rows.shape
        np.testing.assert_allclose(got, want, rtol=2e-7, atol=0)
        np.testing.assert_allclose(np.linalg.norm(got.astype(np.float64), axis=1), 1.0, rtol=1e-6)
    rows = rng.standard_normal((4, 9)).astype(np.float32)
    rows[2] = 0
    with pytest.raises(ValueError, match="X row 2 is a zero vector"):
        normalize_rows(rows, "X")
    assert normalize_rows(np.zeros((0, 9), np.float32), "X").shape == (0, 9)
