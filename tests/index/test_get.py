"""Reading stored vectors back by id: ``Index.get``, ``IVFIndex.get`` and ``Collection.get`` (issue 21: apps keep the
vectors to re-embed, export, show "similar items"). Every stored dtype, flat and inverted file, files and memory,
unknown, deleted, repeated and upserted ids, and the errors of a base that stores no vectors.
"""

from __future__ import annotations

import numpy as np
import pytest

import ockstore
from ockstore.errors import FormatError
from helpers import gaussian_mixture

P = 12
STORES = ["float16", "float32", "uint8"]


@pytest.fixture(scope="module")
def base():
    """(X, X as uint8 values): 400 rows of a mixture, and the same rows rounded into 0..255."""
    X = gaussian_mixture(400, P, seed=3)
    return X, np.clip(np.round(X * 10 + 128), 0, 255).astype(np.float32)


@pytest.fixture(scope="module")
def models(base):
    learn = base[0]
    flat = ockstore.OCKM(3, 2, 4, n_codewords=16, n_iter=2, seed=0).fit(learn)
    ivf = ockstore.IVF(4, ockstore.PQ(3, n_codewords=16, n_iter=2, seed=0), seed=0).fit(learn)
    cosine = ockstore.PQ(3, n_codewords=16, n_iter=2, metric="cosine", seed=0).fit(learn)
    return {"flat": flat, "ivf": ivf, "cosine": cosine}


def stored(X, store):
    """What the vectors section holds of X, in float32 (the oracle of get)."""
    return X.astype(np.float16).astype(np.float32) if store == "float16" else X.astype(np.float32)


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("model", ["flat", "ivf", "cosine"])
@pytest.mark.parametrize("where", ["memory", "file"])
def test_index_get_returns_the_stored_vectors_in_the_order_given(tmp_path, base, models, store, model, where):
    """Index.get(ids) is (n, P) float32: the stored rows of the ids in the order given, repeated ids repeated, as
    stored (float16 rounding, uint8 values exact; not normalised for cosine); one id gives one vector. An inverted file
    (rows reordered by list) gives the same."""
    X = base[1] if store == "uint8" else base[0]
    ids = np.arange(len(X), dtype=np.int64) * 7 + 3
    index = ockstore.Index.from_vectors(models[model], X, ids, store_vectors=store)
    if where == "file":
        index.save(tmp_path / "i.ock")
        index = ockstore.open_index(tmp_path / "i.ock")
    with index:
        wanted = np.array([ids[5], ids[0], ids[399], ids[5], ids[17]])
        V = index.get(wanted)
        assert V.dtype == np.float32 and V.shape == (5, P)
        np.testing.assert_array_equal(V, stored(X, store)[[5, 0, 399, 5, 17]])
        np.testing.assert_array_equal(index.get(int(ids[17])), stored(X, store)[17])
        np.testing.assert_array_equal(index.get(np.uint32(ids[1])), stored(X, store)[1])
        assert index.get([]).shape == (0, P)
        every = index.get(ids[::-1])
        np.testing.assert_array_equal(every, stored(X, store)[::-1])


def test_index_get_without_ids_uses_the_row_numbers_and_takes_the_first_of_duplicates(base, models):
    """Without stored ids the ids are 0..N-1; with an id stored in two rows (allowed in an index), its first row."""
    X = base[0][:50]
    index = ockstore.Index.from_vectors(models["flat"], X, store_vectors="float32")
    np.testing.assert_array_equal(index.get([49, 0]), X[[49, 0]])
    with pytest.raises(ValueError, match=r"ids: 2 of 3 ids are not in the index: 50, 1000"):
        index.get([50, 3, 1000])
    ids = np.array([10] * 2 + list(range(11, 59)))
    twice = ockstore.Index.from_vectors(models["flat"], X, ids, store_vectors="float32")
    np.testing.assert_array_equal(twice.get([10, 11]), X[[0, 2]])


def test_get_errors_name_the_ids_and_the_fix(tmp_path, base, models):
    """Unknown ids are named (the first five, and how many); negative or non-integer ids are refused naming ``ids``;
    an index or collection without stored vectors says how to store them; a closed one refuses."""
    X = base[0]
    index = ockstore.Index.from_vectors(models["flat"], X, np.arange(400) + 1000, store_vectors="float16")
    with pytest.raises(ValueError, match=r"ids: 6 of 7 ids are not in the index: 0, 1, 2, 3, 4, \.\.\."):
        index.get([0, 1, 2, 1000, 3, 4, 5])
    with pytest.raises(ValueError, match="ids must be >= 0"):
        index.get([-1])
    with pytest.raises(TypeError, match="ids must be an integer array"):
        index.get([1.5])
    plain = ockstore.Index.from_vectors(models["flat"], X)
    with pytest.raises(ValueError, match="stores no vectors: build it with store_vectors="):
        plain.get([0])
    with ockstore.create_collection(tmp_path / "c", models["flat"]) as c:
        c.add(X[:10])
        with pytest.raises(ValueError, match="stores no vectors: create it with store_vectors="):
            c.get([0])
    index.close()
    with pytest.raises(ValueError, match="closed"):
        index.get([1000])


def test_get_refuses_damaged_stored_values_as_a_format_error(tmp_path, base, models):
    """A stored row that is not finite (damage that verify reports) is a FormatError naming the file and the row, as
    re-ranking reports it, never NaN handed to the app."""
    X = base[0][:20].copy()
    path = tmp_path / "i.ock"
    ockstore.Index.from_vectors(models["flat"], X, store_vectors="float32").save(path)
    with ockstore.open_index(path) as index:
        offset = index._file.section_info("vectors")["offset"]
    data = bytearray(path.read_bytes())
    data[offset + 4 * (P * 7 + 2):offset + 4 * (P * 7 + 3)] = np.float32(np.nan).tobytes()
    path.write_bytes(bytes(data))
    with ockstore.open_index(path) as index:
        np.testing.assert_array_equal(index.get([6]), X[[6]])
        with pytest.raises(FormatError, match=r"section 'vectors': row 7"):
            index.get([6, 7])


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("model", ["flat", "ivf"])
def test_collection_get_reads_live_ids_across_segments(tmp_path, base, models, store, model):
    """Collection.get over several segments, with deletions and an upsert: the newest vector of each live id, in the
    order given; deleted and never-added ids are named; a reader and a writer read the same."""
    X = base[1] if store == "uint8" else base[0]
    folder = tmp_path / "c"
    with ockstore.create_collection(folder, models[model], store_vectors=store, merge_factor=100) as c:
        c.add(X[:150])
        c.add(X[150:300], np.arange(150, 300) * 10)
        c.delete([3, 1500])
        c.upsert(X[300:302], [4, 1510])
        expected = {i: X[i] for i in range(150)}
        expected.update({i * 10: X[i] for i in range(150, 300)})
        del expected[3], expected[1500]
        expected[4], expected[1510] = X[300], X[301]
        wanted = np.array([1510, 4, 0, 2990, 4, 149])
        oracle = stored(np.array([expected[int(i)] for i in wanted]), store)
        np.testing.assert_array_equal(c.get(wanted), oracle)
        with pytest.raises(ValueError, match=r"ids: 2 of 4 ids are not in the collection .*deleted.*: 3, 1500"):
            c.get([0, 3, 1500, 4])
        with pytest.raises(ValueError, match=r"1 of 1 ids are not in the collection.*: 151"):
            c.get(151)
        c.compact()
        np.testing.assert_array_equal(c.get(wanted), oracle)
    with ockstore.open_collection(folder) as reader:
        np.testing.assert_array_equal(reader.get(wanted), oracle)
        np.testing.assert_array_equal(reader.get(1510), oracle[0])
        ids = reader.ids()
        np.testing.assert_array_equal(reader.get(ids), stored(np.array([expected[int(i)] for i in ids]), store))
