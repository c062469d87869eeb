"""Files of stored vectors, kind "vectors" (docs/FORMAT.md section 15, rules E1-E5): written by VectorsWriter,
opened by open_index as an ExactIndex, every open-time check, verify, and exact searches against NumPy brute force.
"""

from __future__ import annotations

import numpy as np
import pytest

import ockstore
from ockstore._validation import normalize_rows
from ockstore.exact_index import ExactIndex, screened_search
from ockstore.indexfile.vectors_file import VectorsWriter
from helpers import gaussian_mixture
from index_files import expect_format_error, parts_of, write_parts

P = 12


def write(path, X, ids, metric="l2", store="float32", chunks=1):
    w = VectorsWriter(path, X.shape[1], metric, store)
    for part in np.array_split(np.arange(len(X)), chunks):
        w.add(X[part], ids[part])
    w.close()
    return path


@pytest.fixture
def valid(tmp_path):
    X = gaussian_mixture(50, P, seed=3)
    path = write(tmp_path / "v.ock", X, np.arange(50) * 2)
    return X, path


def test_round_trip_E1_E3(tmp_path, valid):
    """A file of stored vectors says format 1.3, kind "vectors"; open_index gives an ExactIndex with its vectors,
    ids, metric; the same rows in one chunk or many give the same bytes; file_info describes it."""
    X, path = valid
    with ockstore.open_index(path) as index:
        assert isinstance(index, ExactIndex) and index.info()["format_version"] == "1.3"
        assert index.ntotal == 50 and index.dim == P and index.metric == "l2" and index.store_vectors == "float32"
        np.testing.assert_array_equal(index.vectors, X)
        np.testing.assert_array_equal(index.ids, np.arange(50) * 2)
        np.testing.assert_array_equal(index.get([98, 0]), X[[49, 0]])
        index.verify()
    again = write(tmp_path / "w.ock", X, np.arange(50) * 2, chunks=4)
    assert again.read_bytes() == path.read_bytes()
    info = ockstore.file_info(path)
    assert info["kind"] == "vectors" and info["N"] == 50 and info["has_ids"] is True
    with pytest.raises(ockstore.FormatError, match="unknown kind"):
        ockstore.load_quantizer(path)


@pytest.mark.parametrize("edit, check, name", [
    (lambda m, s: ({**m, "dim": 0}, s), "bad meta", "dim"),
    (lambda m, s: ({**m, "dim": True}, s), "bad meta", "dim"),
    (lambda m, s: ({**m, "ntotal": -1}, s), "bad meta", "ntotal"),
    (lambda m, s: ({**m, "metric": "hamming"}, s), "bad meta", "metric"),
    (lambda m, s: ({**m, "store_vectors": "int8"}, s), "bad meta", "store_vectors"),
    # sq8 codes need a model's value ranges, which a file of stored vectors has not (issue 28: a collection's next
    # add raised AttributeError)
    (lambda m, s: ({**m, "store_vectors": "sq8"}, {**s, "vectors": np.zeros((50, 12), "<u1")}), "bad meta",
     "store_vectors"),
    (lambda m, s: ({**m, "has_ids": 1}, s), "bad meta", "has_ids"),
    (lambda m, s: (m, {"ids": s["ids"]}), "missing section", "vectors"),
    (lambda m, s: (m, {"vectors": s["vectors"].astype("<f2"), "ids": s["ids"]}), "bad section dtype", "vectors"),
    (lambda m, s: (m, {"vectors": s["vectors"][:, :5], "ids": s["ids"]}), "bad section shape", "vectors"),
    (lambda m, s: (m, {"vectors": s["vectors"][:49], "ids": s["ids"]}), "row count mismatch", "vectors"),
    (lambda m, s: (m, {"vectors": s["vectors"]}), "missing section", "ids"),
    (lambda m, s: ({**m, "has_ids": False}, s), "unexpected section", "ids"),
    (lambda m, s: (m, {**s, "codes": np.zeros((50, 4), "<u1")}), "unexpected section", "codes"),
    (lambda m, s: (m, {**s, "codebooks": np.zeros((1, 1, 2, 12), "<f4")}), "unexpected section", "codebooks"),
])
def test_bad_files_are_refused_at_open_E2_E4(tmp_path, valid, edit, check, name):
    _, path = valid
    meta, sections, user = parts_of(path)
    meta, sections = edit(dict(meta), dict(sections))
    expect_format_error(write_parts(tmp_path / "bad.ock", meta, sections, user, minor=3), check, name)


def test_the_kind_needs_format_1_3_E1(tmp_path, valid):
    _, path = valid
    meta, sections, user = parts_of(path)
    expect_format_error(write_parts(tmp_path / "old.ock", meta, sections, user, minor=2), "bad format version")


def test_verify_reports_damaged_rows_and_search_refuses_them_E5(tmp_path, valid):
    X, path = valid
    meta, sections, user = parts_of(path)
    sections["vectors"][17, 3] = np.inf
    bad = write_parts(tmp_path / "bad.ock", meta, sections, user, minor=3)
    message = expect_format_error(bad, "non-finite values", "vectors", when="verify")
    assert "row 17" in message
    with ockstore.open_index(bad) as index:
        with pytest.raises(ockstore.FormatError, match="row 17"):
            index.search(X[17], 3)
    meta, sections, user = parts_of(path)
    sections["ids"][4] = -3
    expect_format_error(write_parts(tmp_path / "neg.ock", meta, sections, user, minor=3), "negative id", "ids",
                        when="verify")


def test_uint8_vectors_are_uint8_not_sq8_E2(tmp_path):
    """uint8 and sq8 share the dtype <u1: a file (or an in-memory ExactIndex) of uint8 vectors says "uint8" (issue 28:
    it said "sq8", and a collection refused every add as a segment mismatch); the writer refuses sq8 (no model)."""
    X = np.arange(10 * P, dtype=np.uint8).reshape(10, P)
    path = write(tmp_path / "u.ock", X, np.arange(10), store="uint8")
    with ockstore.open_index(path) as index:
        assert index.store_vectors == "uint8" and index.info()["store_vectors"] == "uint8"
    assert ExactIndex(X, None, "l2").store_vectors == "uint8"
    with pytest.raises(ValueError, match="stores 'float16', 'float32' or 'uint8', not 'sq8'"):
        VectorsWriter(tmp_path / "s.ock", P, "l2", "sq8")
    assert not (tmp_path / "s.ock").exists()


def test_the_writer_refuses_what_the_section_cannot_hold(tmp_path):
    X = gaussian_mixture(10, P, seed=1)
    w = VectorsWriter(tmp_path / "u.ock", P, "cosine", "uint8")
    with pytest.raises(ValueError, match="needs integers in 0..255"):
        w.add(X, np.arange(10))
    zero = np.zeros((2, P))
    zero[0] = 3
    with pytest.raises(ValueError, match="X row 1 is a zero vector"):
        w.add(zero, [0, 1])
    w.abort()
    assert not (tmp_path / "u.ock").exists()


@pytest.mark.parametrize("metric", ["l2", "ip", "cosine"])
@pytest.mark.parametrize("store", ["float16", "float32", "uint8"])
def test_exact_search_is_numpy_brute_force_E5(tmp_path, metric, store):
    """An ExactIndex's search: the ids of NumPy's brute force in float64 (ties by id: duplicated rows included), its
    values to float32 rounding, with filters, padding, one 1-D query; the same with or without the float32 copy the
    screening keeps, and on one thread or two."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(700, P)) * 20 + 128
    X = np.clip(np.round(X), 1, 255) if store == "uint8" else X
    X[100:110] = X[200:210]  # ties
    Q = rng.normal(size=(9, P)) * 20 + 128
    Q[0] = X[200]
    ids = rng.permutation(5000)[:700].astype(np.int64)
    path = write(tmp_path / "e.ock", X, ids, metric, store)
    stored = X.astype(np.float32).astype(np.float16 if store == "float16" else np.float32).astype(np.float64)
    with ockstore.open_index(path) as index:
        for allow in (None, ids[::3]):
            rows = np.arange(700) if allow is None else np.flatnonzero(np.isin(ids, allow))
            Qd = Q / np.linalg.norm(Q, axis=1, keepdims=True) if metric == "cosine" else Q
            if metric == "l2":
                keys = ((Qd[:, None, :] - stored[None, rows]) ** 2).sum(-1)
            else:
                keys = -(Qd @ stored[rows].T)
                if metric == "cosine":
                    keys /= np.linalg.norm(stored[rows], axis=1)
            order = np.lexsort((np.broadcast_to(ids[rows], keys.shape), keys), axis=1)[:, :10]
            D, I = index.search(Q, 10, allow=allow, n_threads=2)
            np.testing.assert_array_equal(I, ids[rows][order])
            want = np.take_along_axis(keys, order, axis=1)
            np.testing.assert_allclose(D, want if metric == "l2" else -want, rtol=1e-5, atol=1e-4)
            D1, I1 = index.search(Q[3], 10, allow=allow, n_threads=1)
            np.testing.assert_array_equal(I1, I[3])
            np.testing.assert_array_equal(D1, D[3])
        screen = index._screen_arrays()
        Q32 = Q.astype(np.float32)
        plain = screened_search(normalize_rows(Q32, "Q") if metric == "cosine" else Q32, 10, index.vectors, index.ids,
                             metric)  # without the screening arrays the index keeps
        D, I = index.search(Q, 10)
        np.testing.assert_array_equal(plain[1], I)
        np.testing.assert_array_equal(plain[0], D)
        assert screen[1].shape == (700,)
        D, I = index.search(Q[:2], 800)
        assert (I[:, 700:] == -1).all() and np.isinf(D[:, 700:]).all()
        with pytest.raises(ValueError, match="vectors: this index searches its stored vectors exactly"):
            index.search(Q, 3, vectors=X)
        with pytest.raises(ValueError, match="n_probe applies to inverted-file"):
            index.search(Q, 3, n_probe=2)
        with pytest.raises(ValueError, match="rerank"):
            index.search(Q, 3, rerank=2)
