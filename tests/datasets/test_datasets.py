"""Tests of ockstore.datasets and exact k-NN (ockstore.evaluation.exact_knn): seeded synthetic data, texmex folders,
HDF5 files of ann-benchmarks, the shipped demo data and the real datasets. Vector files themselves:
test_vecfiles.py.

The real datasets are found where ``helpers.data_root`` says: ``../shared/data/<name>`` from the repository root, or
under the folder named by the environment variable OCKSTORE_DATA (the folder that holds ``sift-real/`` and
``minilm-real/``); their tests skip when the data is absent.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from ockstore import datasets, evaluation
from ockstore.datasets import count_vecs, load_hdf5, load_texmex, synthetic, write_vecs
from ockstore.errors import FormatError
from ockstore.evaluation import exact_knn

from helpers import REPO, data_root, vecs_sample

DATA_ROOT = data_root()


# ----------------------------------------------------------------------------------------------------------------
# exact k-NN


def _brute_force(base, queries, k):
    """Direct Σ(q−b)² in float64 for every pair; order by (distance, index)."""
    b = np.asarray(base, np.float64)
    ids, dists = [], []
    for q in np.asarray(queries, np.float64):
        d = ((b - q) ** 2).sum(axis=1)
        order = np.lexsort((np.arange(len(b)), d))[:k]
        ids.append(order)
        dists.append(d[order])
    return np.array(dists), np.array(ids)


def test_exact_knn_hand_case():
    base = np.array([[0.0], [1.0], [3.0], [-1.0], [1.0]])
    # distances to 0.9: 0.81, 0.01, 4.41, 3.61, 0.01 → ids 1 and 4 tie, then 0, 3, 2
    D, I = exact_knn([[0.9]], base, 5)
    np.testing.assert_array_equal(I, [[1, 4, 0, 3, 2]])
    np.testing.assert_allclose(D, [[0.01, 0.01, 0.81, 3.61, 4.41]])
    D1, I1 = exact_knn([0.9], base, 2)  # one 1-D query: 1-D results
    assert I1.shape == (2,) and I1.tolist() == [1, 4]
    D7, I7 = exact_knn([[0.9]], base, 7)  # k > n_base: padding
    assert I7[0, 5:].tolist() == [-1, -1] and np.isinf(D7[0, 5:]).all()


def test_exact_knn_ties_across_blocks(monkeypatch):
    """Small blocks and many exact ties (integer data): ties must go to the smaller index, as brute force."""
    monkeypatch.setattr(evaluation, "_KNN_BASE_BLOCK", 7)
    monkeypatch.setattr(evaluation, "_KNN_BLOCK_ELEMS", 40)
    rng = np.random.default_rng(3)
    base = rng.integers(0, 3, size=(60, 2)).astype(np.uint8)
    queries = rng.integers(0, 3, size=(9, 2))
    D, I = exact_knn(queries, base, 13)
    Dr, Ir = _brute_force(base, queries, 13)
    np.testing.assert_array_equal(I, Ir)
    np.testing.assert_array_equal(D, Dr)


def test_exact_knn_checks():
    with pytest.raises(ValueError, match="queries has dimension 3, expected 2"):
        exact_knn(np.zeros((1, 3)), np.zeros((4, 2)), 1)
    with pytest.raises(ValueError, match="k must be >= 1"):
        exact_knn(np.zeros((1, 2)), np.zeros((4, 2)), 0)
    with pytest.raises(ValueError, match="base contains NaN"):
        exact_knn(np.zeros((1, 2)), np.array([[np.nan, 0.0]]), 1)


# ----------------------------------------------------------------------------------------------------------------
# datasets


def test_synthetic_is_seeded_and_exact():
    a = synthetic(50, 300, 20, 16, seed=7, k_gt=10)
    b = synthetic(50, 300, 20, 16, seed=7, k_gt=10)
    c = synthetic(50, 300, 20, 16, seed=8, k_gt=10)
    for attr in ("learn", "base", "query", "groundtruth"):
        np.testing.assert_array_equal(getattr(a, attr), getattr(b, attr))
    assert not np.array_equal(a.base, c.base)
    assert a.learn.shape == (50, 16) and a.base.shape == (300, 16) and a.query.shape == (20, 16)
    assert a.base.dtype == np.float32 and a.groundtruth.dtype == np.int64 and a.groundtruth.shape == (20, 10)
    assert a.dim == 16
    Dr, Ir = _brute_force(a.base, a.query, 10)
    np.testing.assert_array_equal(a.groundtruth, Ir)
    np.testing.assert_allclose(a.groundtruth_distances, Dr, rtol=1e-12)
    # uneven variances: the largest per-dimension variance is several times the smallest
    var = a.base.var(axis=0)
    assert var.max() > 5 * var.min()
    chunks = list(a.iter_base(chunk_size=64))
    assert [len(c) for c in chunks] == [64, 64, 64, 64, 44]
    np.testing.assert_array_equal(np.concatenate(chunks), a.base)


def test_synthetic_checks():
    with pytest.raises(ValueError, match="k_gt must be <= 5"):
        synthetic(0, 5, 1, 2)
    with pytest.raises(TypeError, match="dim must be an integer"):
        synthetic(0, 5, 1, 2.0, k_gt=1)


def test_load_texmex_tmp_folder(tmp_path):
    learn, base, query = vecs_sample("fvecs", 30, 4, 1), vecs_sample("fvecs", 40, 4, 2), vecs_sample("fvecs", 5, 4, 3)
    _, gt = exact_knn(query, base, 3)
    write_vecs(tmp_path / "toy_learn.fvecs", learn)
    write_vecs(tmp_path / "toy_base.fvecs.gz", base)
    np.save(tmp_path / "toy_query.npy", query)
    write_vecs(tmp_path / "toy_groundtruth.ivecs", gt.astype(np.int32))
    (tmp_path / ".toy_base.fvecs.gz.abc.tmp").write_bytes(b"")  # a writer's leftover is ignored
    (tmp_path / "notes.txt").write_text("ignored")
    ds = load_texmex(tmp_path)
    assert ds.name == "toy" and ds.dim == 4
    np.testing.assert_array_equal(ds.learn, learn)
    np.testing.assert_array_equal(ds.query, query)
    assert ds.groundtruth.dtype == np.int64
    np.testing.assert_array_equal(ds.groundtruth, gt)
    np.testing.assert_array_equal(np.concatenate(list(ds.iter_base(chunk_size=16))), base)
    np.testing.assert_array_equal(ds.base, base)


def test_load_texmex_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such directory"):
        load_texmex(tmp_path / "nope")
    write_vecs(tmp_path / "a_learn.fvecs", np.ones((2, 3), np.float32))
    write_vecs(tmp_path / "a_base.fvecs", np.ones((2, 3), np.float32))
    with pytest.raises(FileNotFoundError, match="query.*groundtruth"):
        load_texmex(tmp_path)
    write_vecs(tmp_path / "a_query.fvecs", np.ones((2, 3), np.float32))
    write_vecs(tmp_path / "a_query.fvecs.gz", np.ones((2, 3), np.float32))
    write_vecs(tmp_path / "a_groundtruth.ivecs", np.zeros((2, 1), np.int32))
    with pytest.raises(ValueError, match="several query files"):
        load_texmex(tmp_path)
    os.unlink(tmp_path / "a_query.fvecs.gz")
    write_vecs(tmp_path / "a_base.fvecs", np.ones((2, 4), np.float32))  # dimension differs from the queries
    ds = load_texmex(tmp_path)
    with pytest.raises(FormatError, match="a_base.fvecs.*dimension 4, expected 3"):
        ds.base
    with pytest.raises(FormatError, match="dimension 4, expected 3"):
        list(ds.iter_base())


def test_dataset_from_arrays_checks():
    with pytest.raises(TypeError, match="groundtruth must be an integer array"):
        datasets.Dataset("x", learn=np.ones((2, 2)), base=np.ones((2, 2)), query=np.ones((1, 2)),
                         groundtruth=np.zeros((1, 1)))
    with pytest.raises(TypeError, match="learn must hold real numbers"):
        datasets.Dataset("x", learn=np.ones((2, 2), bool), base=np.ones((2, 2)), query=np.ones((1, 2)),
                         groundtruth=np.zeros((1, 1), int))


def test_hdf5(tmp_path):
    h5py = pytest.importorskip("h5py", reason="h5py (the optional extra ockstore[hdf5]) is not installed")
    train = vecs_sample("fvecs", 30, 4, 1)
    test = vecs_sample("fvecs", 6, 4, 2)
    D, I = exact_knn(test, train, 5)
    path = tmp_path / "toy-4-euclidean.hdf5"
    with h5py.File(path, "w") as f:
        f.create_dataset("train", data=train)
        f.create_dataset("test", data=test)
        f.create_dataset("neighbors", data=I.astype(np.int32))
        f.create_dataset("distances", data=np.sqrt(D).astype(np.float32))
        f.attrs["distance"] = "euclidean"
    ds = load_hdf5(path)
    assert ds.name == "toy-4-euclidean" and ds.dim == 4 and ds.metric == "euclidean"
    np.testing.assert_array_equal(ds.base, train)
    np.testing.assert_array_equal(ds.learn, train)
    np.testing.assert_array_equal(ds.query, test)
    assert ds.groundtruth.dtype == np.int64
    np.testing.assert_array_equal(ds.groundtruth, I)
    np.testing.assert_allclose(ds.groundtruth_distances, np.sqrt(D), rtol=1e-6)
    np.testing.assert_array_equal(np.concatenate(list(ds.iter_base(chunk_size=7))), train)
    with h5py.File(tmp_path / "bad.hdf5", "w") as f:
        f.create_dataset("train", data=train)
    with pytest.raises(FormatError, match="no 'test' dataset"):
        load_hdf5(tmp_path / "bad.hdf5")
    (tmp_path / "junk.hdf5").write_bytes(b"junk" * 100)
    with pytest.raises(FormatError, match="not a readable HDF5 file"):
        load_hdf5(tmp_path / "junk.hdf5")


def test_hdf5_missing_h5py_message(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "h5py":
            raise ImportError("No module named 'h5py'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match=r"pip install ockstore\[hdf5\]"):
        load_hdf5(tmp_path / "x.hdf5")


# ----------------------------------------------------------------------------------------------------------------
# the shipped demo data and the real datasets


def test_demo_data_loads():
    folder = REPO / "demo" / "data"  # committed; tools/test_installed.py copies it beside the tests it runs
    assert folder.is_dir(), f"the demo data is missing: {folder} (python tools/make_demo_data.py makes it)"
    ds = load_texmex(folder)
    assert ds.name == "demo" and ds.dim == 128
    assert ds.query.shape == (200, 128) and ds.query.dtype == np.uint8
    assert ds.groundtruth.shape == (200, 100)
    assert count_vecs(folder / "demo_learn.bvecs.gz") == (10_000, 128)
    base = ds.base
    assert base.shape == (20_000, 128)
    # spot-check the ground truth of a few queries with integer arithmetic
    for i in (0, 77, 199):
        d = ((base.astype(np.int64) - ds.query[i].astype(np.int64)) ** 2).sum(axis=1)
        np.testing.assert_array_equal(ds.groundtruth[i], np.lexsort((np.arange(len(d)), d))[:100])
    total = sum(p.stat().st_size for p in folder.iterdir())
    assert total <= 5_000_000


def _real(name):
    folder = DATA_ROOT / name
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent (set OCKSTORE_DATA to the folder holding {name}/)")
    return folder


def test_sift_real_shapes():
    folder = _real("sift-real")
    ds = load_texmex(folder)
    assert ds.name == "sift" and ds.dim == 128
    assert ds.query.shape == (10_000, 128) and ds.query.dtype == np.uint8
    gt = ds.groundtruth
    assert gt.shape == (10_000, 100) and gt.dtype == np.int64
    assert gt.min() >= 0 and gt.max() < 1_000_000
    assert count_vecs(folder / "sift_learn.bvecs.gz") == (100_000, 128)
    assert count_vecs(folder / "sift_base.bvecs.gz") == (1_000_000, 128)


def test_minilm_real_shapes():
    folder = _real("minilm-real")
    ds = load_texmex(folder)
    assert ds.name == "minilm" and ds.dim == 384
    q = ds.query
    assert q.shape == (1000, 384) and q.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-5)  # documented: L2-normalised
    assert ds.groundtruth.shape == (1000, 100)
