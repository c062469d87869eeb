"""Cosine scored as cosine (issue 21; docs/FORMAT.md 11.3, I20): with the stored norm term a cosine score is
<q_n, x_hat> / ||x_hat||, for flat and inverted-file indexes, ADC and SDC, "f32" and "u8" norm terms, against NumPy.
(How much nearer the true cosines than <q_n, x_hat> these scores are depends on the data: measured on minilm-real in
docs/results.md, "Cosine scored as cosine".)"""

from __future__ import annotations

import numpy as np
import pytest

import ockstore
from helpers import gaussian_mixture

P = 24


@pytest.fixture(scope="module")
def data():
    X = gaussian_mixture(3000, P, seed=8)
    Q = gaussian_mixture(40, P, seed=9)
    return X / np.linalg.norm(X, axis=1, keepdims=True), Q


@pytest.fixture(scope="module")
def models(data):
    X = data[0]
    return {"ockm": ockstore.OCKM(4, 2, 4, n_codewords=32, metric="cosine", n_iter=4, seed=0).fit(X),
            "pq": ockstore.PQ(4, n_codewords=32, metric="cosine", n_iter=4, seed=0).fit(X),
            "ivf": ockstore.IVF(8, ockstore.PQ(4, n_codewords=32, metric="cosine", n_iter=4, seed=0), seed=0).fit(X)}


def reconstructions(q, X):
    return q.decode(*q.encode(X)) if isinstance(q, ockstore.IVF) else q.decode(q.encode(X))


@pytest.mark.parametrize("model", ["ockm", "pq", "ivf"])
@pytest.mark.parametrize("encoding", ["f32", "u8"])
@pytest.mark.parametrize("distance", ["adc", "sdc"])
def test_cosine_scores_are_the_ratio(data, models, model, encoding, distance):
    X, Q = data
    q = models[model]
    index = ockstore.Index.from_vectors(q, X, norm_encoding=encoding)
    options = {"n_probe": 8} if model == "ivf" else {}
    D, I = index.search(Q, 10, distance=distance, **options)
    Xh = reconstructions(q, X).astype(np.float64)
    if encoding == "f32":
        lengths = np.linalg.norm(Xh, axis=1)
    else:  # through the 256 levels of the one-byte term (rows of an inverted file are in list order: by id)
        levels = q.norm_levels.astype(np.float64)
        lengths = np.empty(len(X))
        lengths[index.ids] = np.sqrt(levels[np.asarray(index.norms)])
    Qn = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    if distance == "sdc":
        Qn = reconstructions(q, Q).astype(np.float64)
        Qn = Qn / np.linalg.norm(Qn, axis=1, keepdims=True)
    scores = (Qn @ Xh.T) / lengths[None, :]
    np.testing.assert_allclose(D, np.take_along_axis(scores, I, axis=1), rtol=1e-5, atol=2e-6)
    best = -np.sort(-scores, axis=1)[:, :10]
    np.testing.assert_allclose(D, best, rtol=1e-5, atol=2e-6)  # the 10 best by that score


def test_a_cosine_collection_scores_the_ratio(tmp_path, data, models):
    """A collection's segments carry the norm term: its scores are those of one index of its rows."""
    X, Q = data
    q = models["ockm"]
    with ockstore.create_collection(tmp_path / "c", q, merge_factor=50) as c:
        assert c.norm_encoding == "u8"
        for part in np.array_split(np.arange(len(X)), 4):
            c.add(X[part])
        D, I = c.search(Q, 10)
    D2, I2 = ockstore.Index.from_vectors(q, X).search(Q, 10)
    np.testing.assert_array_equal(I, I2)
    np.testing.assert_array_equal(D, D2)
