"""Tests of the IVF model against NumPy: coarse k-means (its kernels and Lloyd's algorithm, empty clusters split), the
fine quantizer fitted on residuals, reconstruction c_l + R z_hat, determinism, parameters, and bad input. Its index:
tests/index/test_ivf_index.py; data and oracles: tests/support/ivf_checks.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import ockstore
from ockstore import IVF, Index
from ockstore.errors import NotFittedError
from ockstore.quantizers.ivf import MAX_LISTS, default_n_probe
from ivf_checks import FINE, L, N, P, clusters, reconstruct
from ivf_checks import data, models  # noqa: F401 - pytest fixtures


# ------------------------------------------------------------------------------------------------------- the model
@pytest.mark.parametrize("method", sorted(FINE))
def test_decode_is_centroid_plus_fine_reconstruction(models, data, method):
    """decode(l, b) = c_l + R z_hat_b; encode gives each vector's nearest centroid and the fine code of its residual."""
    learn, base, _, _ = data
    ivf = models["l2", method]
    lists, codes = ivf.encode(base)
    assert lists.dtype == np.int64 and lists.shape == (N,) and codes.shape == (N, ivf.code_size)
    np.testing.assert_allclose(ivf.decode(lists, codes), reconstruct(ivf, lists, codes), rtol=1e-5, atol=1e-4)
    # the nearest centroid (up to float32 ties)
    d = ((base[:, None, :].astype(np.float64) - ivf.centroids[None].astype(np.float64)) ** 2).sum(-1)
    chosen = d[np.arange(N), lists]
    assert np.all(chosen <= d.min(axis=1) * (1 + 1e-5) + 1e-5)
    # the fine code of the residual: what the fine quantizer gives it
    residuals = base - ivf.centroids[lists]
    np.testing.assert_array_equal(codes, ivf.quantizer.encode(residuals))
    # one vector: a scalar list and a 1-D code
    l0, c0 = ivf.encode(base[5])
    assert l0 == lists[5] and np.array_equal(c0, codes[5])
    np.testing.assert_array_equal(ivf.decode(l0, c0), ivf.decode(lists[5:6], codes[5:6])[0])


@pytest.mark.parametrize("method", ["pq", "ockm"])
def test_fine_quantizer_is_fitted_on_residuals(data, method):
    """fit: the fine quantizer is fitted (in place) on x - c_l(x): the IVF's distortion of the learn set is the fine
    quantizer's distortion of the residuals (at most its training objective's: training keeps a code only when a new
    one is better, a fresh encoding may not find it); its rotation is learned on the residuals."""
    learn = data[0]
    fine = FINE[method]("l2")
    ivf = IVF(L, fine, n_iter=6, seed=3).fit(learn)
    assert ivf.quantizer is fine and fine.is_fitted and ivf.is_fitted
    lists, _ = ivf.encode(learn)
    residuals = learn - ivf.centroids[lists]
    assert np.isclose(ivf.distortion(learn), fine.distortion(residuals), rtol=1e-5)
    assert fine.objective_history[-1] <= fine.distortion(residuals) * (1 + 1e-6)
    if method == "pq":  # nearest-word encoding: the training codes are the fresh ones
        assert np.isclose(fine.objective_history[-1], fine.distortion(residuals), rtol=1e-5)
    flat = FINE[method]("l2").fit(learn)
    assert ivf.distortion(learn) < flat.distortion(learn)  # the lists explain part of the vectors
    if method == "ockm":
        refit = FINE[method]("l2").fit(residuals)
        np.testing.assert_array_equal(refit.rotation, fine.rotation)  # learned on the residuals, nothing else
    # the coarse k-means: history of L centroids, never rising here (no empty cluster)
    history = ivf.coarse_objective_history
    assert history.shape == (7,) and np.all(np.diff(history) <= 1e-9 * history[0])
    d = ((learn[:, None, :].astype(np.float64) - ivf.centroids[None]) ** 2).sum(-1).min(axis=1)
    assert np.isclose(history[-1], d.mean(), rtol=1e-5)


def test_same_seed_same_model_for_any_threads(data):
    learn = data[0]
    a = IVF(L, FINE["ockm"]("l2"), n_iter=4, seed=7, n_threads=1).fit(learn)
    b = IVF(L, FINE["ockm"]("l2"), n_iter=4, seed=7, n_threads=2).fit(learn)
    c = IVF(L, FINE["ockm"]("l2"), n_iter=4, seed=8).fit(learn)
    assert a == b and a != c
    assert a != IVF(L, FINE["ockm"]("l2"), n_iter=4, seed=7)  # fitted != unfitted


def test_params_and_repr(data):
    fine = FINE["ockm"]("l2")
    ivf = IVF(n_lists=16, quantizer=fine, n_iter=3, seed=1, n_threads=2)
    params = ivf.get_params()
    assert params == {"n_lists": 16, "quantizer": fine, "n_iter": 3, "seed": 1, "n_threads": 2}
    assert IVF(**params).get_params() == params
    assert "IVF(n_lists=16" in repr(ivf) and "OCKM(" in repr(ivf)
    ivf.fit(data[0])
    assert ivf.metric == "l2" and ivf.code_size == 6 and ivf.bits == 24 and ivf.n_codewords == 16
    assert ivf.set_params(n_iter=4, seed=2) is ivf and ivf.is_fitted  # not structural
    ivf.set_params(n_lists=8)
    assert not ivf.is_fitted and ivf.n_lists == 8
    with pytest.raises(ValueError, match="'bogus' is not a parameter"):
        ivf.set_params(bogus=1)
    with pytest.raises(ValueError, match="n_lists"):
        ivf.set_params(n_lists=0)
    # the lists of about DEFAULT_SCAN_ROWS rows, at least 2 sqrt(L), at most L; a model alone: 2 sqrt(L)
    assert default_n_probe(1024) == 64 and default_n_probe(1) == 1 and default_n_probe(100) == 20
    assert default_n_probe(512, 1_000_000) == 46 and default_n_probe(128, 100_000) == 42
    assert default_n_probe(64, 40_000) == 53 and default_n_probe(2048, 10_000_000) == 91


def test_cosine_normalises_and_refuses_zero_vectors(models, data):
    learn, base, _, _ = data
    ivf = models["cosine", "ockm"]
    lists, codes = ivf.encode(base[:50] * 7.5)
    l1, c1 = ivf.encode(base[:50])
    np.testing.assert_array_equal(lists, l1)
    np.testing.assert_array_equal(codes, c1)
    zero = np.array(base[:3])
    zero[1] = 0
    with pytest.raises(ValueError, match="row 1"):
        ivf.encode(zero)


# ------------------------------------------------------------------------------------------------------- bad input
def test_bad_constructor_arguments():
    fine = FINE["ockm"]("l2")
    for bad in (0, -1, MAX_LISTS + 1):
        with pytest.raises(ValueError, match="n_lists"):
            IVF(bad, fine)
    for bad in (2.0, True, "8", None):
        with pytest.raises(TypeError, match="n_lists"):
            IVF(bad, fine)
    for bad in (None, "ockm", ockstore.OCKM, IVF(4, FINE["pq"]("l2")), np.zeros(3)):
        with pytest.raises(TypeError, match="quantizer"):
            IVF(4, bad)
    with pytest.raises(ValueError, match="n_iter"):
        IVF(4, fine, n_iter=0)
    with pytest.raises(TypeError, match="n_iter"):
        IVF(4, fine, n_iter=1.5)
    with pytest.raises(ValueError, match="seed"):
        IVF(4, fine, seed=-1)
    with pytest.raises(ValueError, match="n_threads"):
        IVF(4, fine, n_threads=0)


def test_too_few_training_rows_and_bad_training_data(data):
    learn = data[0]
    with pytest.raises(ValueError, match="n_lists=40"):
        IVF(40, FINE["pq"]("l2")).fit(learn[:39])
    with pytest.raises(ValueError, match="n_codewords=16"):
        IVF(4, FINE["pq"]("l2")).fit(learn[:15])
    with pytest.raises(ValueError, match="n_subspaces"):
        IVF(4, ockstore.PQ(13, n_codewords=16)).fit(learn)
    bad = np.array(learn)
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        IVF(4, FINE["pq"]("l2")).fit(bad)
    with pytest.raises(TypeError):
        IVF(4, FINE["pq"]("l2")).fit(learn > 0)


def test_unfitted_and_bad_encode_decode_input(models, data):
    ivf = IVF(4, FINE["pq"]("l2"))
    for call in (lambda: ivf.encode(data[1]), lambda: ivf.decode([0], np.zeros((1, 4), np.uint8)),
                 lambda: ivf.distortion(data[1]), lambda: ivf.centroids):
        with pytest.raises(NotFittedError):
            call()
    ivf = models["l2", "ockm"]
    lists, codes = ivf.encode(data[1][:5])
    with pytest.raises(ValueError, match="list_ids"):
        ivf.decode(np.array([0, 1, 2, 3, L]), codes)
    with pytest.raises(ValueError, match="list_ids"):
        ivf.decode(lists[:4], codes)
    with pytest.raises(TypeError, match="list_ids"):
        ivf.decode(lists.astype(np.float32), codes)
    with pytest.raises(ValueError, match="codes"):
        ivf.decode(lists, codes[:, :3])
    with pytest.raises(ValueError, match="X"):
        ivf.encode(data[1][:, :5])
    with pytest.raises(ValueError, match="no rows"):
        ivf.distortion(data[1][:0])
    assert ivf.encode(data[1][:0])[1].shape == (0, ivf.code_size)


def test_refitting_the_fine_quantizer_alone_is_detected(data):
    learn = data[0]
    fine = FINE["pq"]("l2")
    ivf = IVF(4, fine, n_iter=2).fit(learn)
    fine.set_params(n_subspaces=3)  # structural: the fine model is discarded
    with pytest.raises(NotFittedError, match="fine quantizer"):
        ivf.encode(learn[:3])


# ---------------------------------------------------------------------------------------------------- coarse k-means
def test_coarse_kernels_against_numpy(data):
    """coarse_assign: the nearest centroid of each row (ties: the smaller list) and its squared distance;
    cluster_sums: the float64 sum and the size of every cluster."""
    from ockstore import _kernels
    from ockstore.quantizers.kmeans import CoarseTables

    learn = data[0]
    C = learn[::97][:L].astype(np.float32)
    C[5] = C[3]  # two equal centroids: their rows go to the smaller list
    tables = CoarseTables(C)
    labels, distances = tables.assign(learn, 2)
    d = ((learn[:, None, :].astype(np.float64) - C[None].astype(np.float64)) ** 2).sum(-1)
    best = d.min(axis=1)
    assert np.all(d[np.arange(len(learn)), labels] <= best * (1 + 1e-5) + 1e-4)
    assert not np.any(labels == 5)
    np.testing.assert_allclose(distances, best, rtol=1e-4, atol=1e-3)
    sums = np.empty((L, P), dtype=np.float64)
    counts = np.empty(L, dtype=np.int64)
    _kernels.cluster_sums(learn, labels, sums, counts)
    expected = np.zeros((L, P))
    np.add.at(expected, labels, learn.astype(np.float64))
    np.testing.assert_allclose(sums, expected, rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(counts, np.bincount(labels, minlength=L))


def test_coarse_kmeans_is_lloyd(data):
    """train_coarse = Lloyd from n_lists distinct sampled rows (the seeded Generator's choice), each centroid moved to
    the mean of its rows, on every row when there are at most 256 per list; history = the mean squared distance
    before each update and after the last."""
    from ockstore.quantizers.kmeans import train_coarse

    X = clusters(800, 11)
    n_lists, n_iter = 6, 4
    centroids, history, labels = train_coarse(X, n_lists, n_iter, np.random.default_rng(21), 1)
    rng = np.random.default_rng(21)
    C = X[np.sort(rng.choice(len(X), size=n_lists, replace=False))].astype(np.float64)
    X64 = X.astype(np.float64)
    expected_history = []
    for _ in range(n_iter + 1):
        d = ((X64[:, None, :] - C[None]) ** 2).sum(-1)
        lab = d.argmin(axis=1)
        expected_history.append(d.min(axis=1).mean())
        if len(expected_history) <= n_iter:
            C = np.stack([X64[lab == j].mean(axis=0) for j in range(n_lists)])
    np.testing.assert_allclose(centroids, C, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(history, expected_history, rtol=1e-5)
    np.testing.assert_array_equal(labels, lab)


def test_empty_clusters_are_split(data):
    """With fewer distinct training vectors than lists, empty clusters take over half of a large one: the model stays
    finite and usable, and lists without vectors simply stay empty."""
    X = np.repeat(clusters(5, 12), 40, axis=0)  # 5 distinct vectors, 200 rows
    ivf = IVF(9, ockstore.PQ(3, n_codewords=4, n_iter=2), n_iter=5).fit(X)
    assert np.isfinite(ivf.centroids).all() and np.isfinite(ivf.coarse_objective_history).all()
    index = Index.from_vectors(ivf, X, norm_encoding="f32")
    assert (index.list_sizes == 0).sum() >= 4
    D, I = index.search(X[:3], 5, n_probe=9)
    assert (I >= 0).all()
