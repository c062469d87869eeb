"""NaN and +-inf sent through every public entry point that takes vectors: each must raise ValueError naming the
problem, whatever the dtype, shape (one row or several) and position of the bad value (docs/ARCHITECTURE.md,
"Conventions"). Also impossible k values, which must be refused by name rather than exhaust memory.
"""

from __future__ import annotations

import numpy as np
import pytest

import ockstore
from ockstore import evaluation, vecfiles
from helpers import gaussian_mixture

P = 8
BAD_VALUES = [np.nan, np.inf, -np.inf]


@pytest.fixture(scope="module")
def learn():
    return gaussian_mixture(600, P, seed=11)


@pytest.fixture(scope="module")
def quantizers(learn):
    return {
        "pq": ockstore.PQ(4, n_codewords=16, n_iter=2).fit(learn),
        "ckm": ockstore.CKM(4, n_codewords=16, n_iter=2).fit(learn),
        "eckm": ockstore.ECKM(2, 2, n_codewords=16, n_iter=2).fit(learn),
        "ockm": ockstore.OCKM(2, 2, 4, n_codewords=16, n_iter=2).fit(learn),
    }


@pytest.fixture(scope="module")
def indexes(quantizers, learn):
    return {name: ockstore.Index.from_vectors(q, learn[:200]) for name, q in quantizers.items()}


def poisoned(value, dtype, one_row, row=3, col=5):
    """Valid vectors with ``value`` at one position; one 1-D row or a (7, P) batch."""
    X = gaussian_mixture(7, P, seed=12).astype(dtype)
    X[row, col] = value
    return X[row] if one_row else X


def _entry_points(quantizers, indexes, learn, tmp_path, method):
    """name -> function of the poisoned array; every public entry point that takes vectors."""
    q, index = quantizers[method], indexes[method]
    return {
        "fit": lambda X: type(q)(**q.get_params()).fit(np.concatenate([learn, np.atleast_2d(X)])),
        "encode": lambda X: q.encode(X),
        "distortion": lambda X: q.distortion(X),
        "Index.from_vectors": lambda X: ockstore.Index.from_vectors(q, np.atleast_2d(X)),
        "Index.search adc": lambda X: index.search(X, 3),
        "Index.search sdc": lambda X: index.search(X, 3, distance="sdc"),
        "IndexWriter.add": lambda X: _add_to_writer(tmp_path / "w.ock", q, X),
        "build_index": lambda X: ockstore.build_index(tmp_path / "b.ock", q, np.atleast_2d(X)),
    }


def _add_to_writer(path, q, X):
    with ockstore.IndexWriter(path, q) as writer:
        writer.add(X)


@pytest.mark.parametrize("method", ["pq", "ckm", "eckm", "ockm"])
@pytest.mark.parametrize("value", BAD_VALUES, ids=["nan", "+inf", "-inf"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("one_row", [False, True], ids=["rows", "one-row"])
def test_every_entry_point_refuses_non_finite_values(quantizers, indexes, learn, tmp_path, method, value, dtype,
                                                     one_row):
    X = poisoned(value, dtype, one_row)
    for name, call in _entry_points(quantizers, indexes, learn, tmp_path, method).items():
        with pytest.raises(ValueError, match="NaN or infinite"):
            call(X)
        assert not (tmp_path / "w.ock").exists() and not (tmp_path / "b.ock").exists(), name


@pytest.mark.parametrize("value", BAD_VALUES, ids=["nan", "+inf", "-inf"])
def test_lists_and_values_beyond_float32_are_refused(quantizers, value):
    q = quantizers["ockm"]
    row = [0.5] * P
    row[2] = value
    with pytest.raises(ValueError, match="NaN or infinite"):
        q.encode([row])
    with pytest.raises(ValueError, match="too large"):
        q.encode(np.full((1, P), 1e39))  # finite in float64, infinite in float32


@pytest.mark.parametrize("value", BAD_VALUES, ids=["nan", "+inf", "-inf"])
def test_evaluation_and_vector_files_refuse_non_finite_values(tmp_path, value):
    base = gaussian_mixture(20, P, seed=1).astype(np.float64)
    queries = gaussian_mixture(3, P, seed=2).astype(np.float64)
    bad = queries.copy()
    bad[1, 1] = value
    with pytest.raises(ValueError, match="NaN or infinite"):
        evaluation.exact_knn(bad, base, 2)
    with pytest.raises(ValueError, match="NaN or infinite"):
        evaluation.exact_knn(queries, np.concatenate([base, bad]), 2)
    ids = np.tile(np.arange(3), (3, 1))
    with pytest.raises(ValueError, match="NaN or infinite"):
        evaluation.mean_overall_ratio(bad, base, ids, ids, 3)
    with pytest.raises(ValueError, match="NaN or infinite"):
        evaluation.distortion(bad, queries)
    for name in ("x.fvecs", "x.fvecs.gz", "x.npy"):
        with pytest.raises(ValueError, match="NaN"):
            vecfiles.write_vecs(tmp_path / name, bad)
        assert not (tmp_path / name).exists()


def test_inf_is_written_only_when_allowed(tmp_path):
    D = np.array([[1.0, np.inf]], dtype=np.float32)
    for name in ("d.fvecs", "d.npy"):
        with pytest.raises(ValueError, match="infinite"):
            vecfiles.write_vecs(tmp_path / name, D)
        vecfiles.write_vecs(tmp_path / name, D, allow_inf=True)
        np.testing.assert_array_equal(vecfiles.read_vecs(tmp_path / name), D)
    with pytest.raises(ValueError, match="NaN"):
        vecfiles.write_vecs(tmp_path / "n.fvecs", np.array([[np.nan]]), allow_inf=True)


@pytest.mark.parametrize("k", [2**31, 2**40, 2**63, 2**64, (1 << 16) + 1])
def test_impossible_k_is_refused_by_name(indexes, k):
    index = indexes["ockm"]
    Q = gaussian_mixture(2, P, seed=3)
    with pytest.raises((ValueError, TypeError), match=r"\bk\b"):
        index.search(Q, k)


def test_large_k_pads_up_to_the_limit(indexes):
    index = indexes["ockm"]
    D, I = index.search(gaussian_mixture(1, P, seed=3)[0], 1 << 16)
    assert D.shape == I.shape == (1 << 16,)
    assert (I[len(index):] == -1).all() and np.isinf(D[len(index):]).all()
    assert (I[:len(index)] >= 0).all()


@pytest.mark.parametrize("n_threads", [1025, 2**20, 2**63])
def test_absurd_thread_counts_are_refused_by_name(indexes, n_threads):
    """Millions of threads (each with its scratch allocated up front) are refused by name before any kernel runs."""
    Q = gaussian_mixture(2, P, seed=3)
    with pytest.raises(ValueError, match="n_threads must be <= 1024"):
        indexes["ockm"].search(Q, 3, n_threads=n_threads)
    with pytest.raises(ValueError, match="n_threads must be <= 1024"):
        ockstore.OCKM(2, 2, n_threads=n_threads)
