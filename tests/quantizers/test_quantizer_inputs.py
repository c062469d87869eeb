"""The public boundary of PQ, CKM, ECKM and OCKM: bad inputs, shapes, dtypes, parameters, unfitted use, zero rows
and single vectors, and any real dtype or layout giving the same codes (docs/ARCHITECTURE.md, "Conventions").
"""

from __future__ import annotations


import numpy as np
import pytest

from helpers import gaussian_mixture
from quantizer_checks import make
from ockstore import CKM, ECKM, OCKM, PQ, NotFittedError


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
    from ockstore.quantizers import cartesian as quantizers

    codes = small_model.encode(mixture)
    X_hat = small_model.decode(codes)
    dist = small_model.distortion(mixture)
    monkeypatch.setattr(quantizers, "ROWS_PER_STEP", 97)
    np.testing.assert_array_equal(small_model.encode(mixture), codes)
    np.testing.assert_array_equal(small_model.decode(codes), X_hat)
    np.testing.assert_allclose(small_model.distortion(mixture), dist, rtol=1e-12)
