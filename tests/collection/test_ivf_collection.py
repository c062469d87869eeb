"""Collections of inverted files: ``create_collection(path, ivf)`` makes every segment an IVF index (rows list after
list, written with their lists by ``IndexWriter._append(..., list_ids=...)``); searches take ``n_probe`` and equal one
search over an IVF index of the live rows, before and after compaction (which copies rows with their lists, never
re-encoding)."""

from __future__ import annotations

import numpy as np
import pytest

import ockstore
from ockstore.search.options import default_rerank
from helpers import gaussian_mixture

P = 10
L = 8


@pytest.fixture(scope="module")
def ivf():
    learn = gaussian_mixture(2500, P, seed=1)
    return ockstore.IVF(L, ockstore.OCKM(3, 2, 4, n_codewords=16, n_iter=3), n_iter=5).fit(learn)


@pytest.fixture(scope="module")
def base():
    return gaussian_mixture(2400, P, seed=2)


@pytest.fixture(scope="module")
def queries():
    return gaussian_mixture(9, P, seed=3)


def _as_collection(options, store, k, n):
    """The options of an index search that give a collection's search with ``options``: a collection that stores
    vectors re-ranks by default (_search_options.default_rerank)."""
    if store is None or "rerank" in options:
        return options
    return {**options, "rerank": default_rerank(k, n)}


@pytest.mark.parametrize("store", [None, "float32"])
def test_collection_of_an_ivf(tmp_path, ivf, base, queries, store):
    path = tmp_path / "c"
    ids = np.arange(len(base), dtype=np.int64) * 3 + 7
    with ockstore.create_collection(path, ivf, store_vectors=store, merge_factor=4) as c:
        for part in np.array_split(np.arange(len(base)), 5):
            c.add(base[part], ids[part])
        gone = ids[::7]
        c.delete(gone)
        c.upsert(base[:30] * 1.01, ids[:30])  # replaced rows: their new vectors
        assert isinstance(ockstore.load_quantizer(path / "quantizer.ockq"), ockstore.IVF)
        X = np.concatenate([base, base[:30] * 1.01])
        all_ids = np.concatenate([ids, ids[:30]])
        live = np.setdiff1d(ids, gone)
        live = np.union1d(live, ids[:30])
        keep = np.concatenate([np.isin(ids, live) & ~np.isin(ids, ids[:30]), np.ones(30, dtype=bool)])
        index = ockstore.Index.from_vectors(ivf, X[keep], all_ids[keep], store_vectors=store)
        options = [{"n_probe": L}, {"n_probe": 3}, {"n_probe": 2, "distance": "sdc"}]
        if store is not None:
            options.append({"n_probe": 3, "rerank": 25})
        for compacted in (False, True):
            if compacted:
                c.compact()
                assert c.info()["segments"] == 1
            assert len(c) == len(live)
            for opt in options:
                D, I = c.search(queries, 12, **opt)
                D0, I0 = index.search(queries, 12, **_as_collection(opt, store, 12, len(c)))
                np.testing.assert_array_equal(I, I0)
                np.testing.assert_allclose(D, D0, rtol=1e-6)
            D, I = c.search(queries, 5, n_probe=4, allow=live[::2])
            D0, I0 = index.search(queries, 5, n_probe=4, allow=live[::2], **_as_collection({}, store, 5, len(c)))
            np.testing.assert_array_equal(I, I0)
        c.verify()
    # every segment is an inverted file, its rows list after list
    segments = sorted(path.glob("segment.*.ock"))
    assert segments
    for segment in segments:
        with ockstore.open_index(segment) as s:
            assert isinstance(s, ockstore.IVFIndex) and s.quantizer == ivf
            assert np.all(np.diff(s.row_lists()) >= 0)
    with ockstore.open_collection(path) as reader:
        D, I = reader.search(queries, 7, n_probe=3)
        np.testing.assert_array_equal(I, index.search(queries, 7, n_probe=3,
                                                      **_as_collection({}, store, 7, len(reader)))[1])
        info = reader.info()
        assert info["n_lists"] == L and info["method"] == "ockm"


def test_empty_ivf_collection_searches_to_padding(tmp_path, ivf, queries):
    with ockstore.create_collection(tmp_path / "c", ivf) as c:
        D, I = c.search(queries, 4, n_probe=2)
        assert (I == -1).all() and np.isinf(D).all()


BAD_N_PROBES = [(0, ValueError), (-3, ValueError), (L + 1, ValueError), (1.5, TypeError), (True, TypeError),
                ("2", TypeError)]


def _n_probe_error(searchable, queries, n_probe, **options):
    try:
        searchable.search(queries, 3, n_probe=n_probe, **options)
    except (TypeError, ValueError) as exc:
        return type(exc), str(exc)
    return None


def test_n_probe_is_checked_whatever_the_collection_holds(tmp_path, ivf, base, queries):
    """n_probe is checked once for the collection, against its IVF: the same error whether the collection is empty,
    has every row deleted, is searched with an allow= that matches no live id, or holds rows to search."""
    c = ockstore.create_collection(tmp_path / "c", ivf)
    empty = [_n_probe_error(c, queries, bad) for bad, _ in BAD_N_PROBES]
    c.add(base[:300])
    for (bad, error), when_empty in zip(BAD_N_PROBES, empty):
        expected = _n_probe_error(c, queries, bad)
        assert expected is not None and expected[0] is error and "n_probe" in expected[1], (bad, expected)
        assert when_empty == expected, bad
        assert _n_probe_error(c, queries, bad, allow=[10**9]) == expected, bad
    c.delete(np.arange(300))
    assert c.info()["segments"] == 0
    for bad, _ in BAD_N_PROBES:
        assert _n_probe_error(c, queries, bad) is not None, bad
    c.close()


def test_a_flat_collection_refuses_n_probe_like_a_flat_index(tmp_path, base, queries):
    flat = ockstore.OCKM(3, 2, 4, n_codewords=16, n_iter=2).fit(base[:1000])
    index = ockstore.Index.from_vectors(flat, base[:50])
    with pytest.raises(ValueError, match="n_probe applies to inverted-file"):
        index.search(queries, 3, n_probe=4)
    with ockstore.create_collection(tmp_path / "c", flat) as c:
        for step in range(2):
            with pytest.raises(ValueError, match="n_probe applies to inverted-file .*this collection is flat"):
                c.search(queries, 3, n_probe=4)
            with pytest.raises(ValueError, match="n_probe applies to inverted-file"):
                c.search(queries, 3, n_probe=4, allow=[10**9])
            c.add(base[:50])
        D, I = c.search(queries, 3, n_probe=None)  # None: as if left out
        np.testing.assert_array_equal(I, c.search(queries, 3)[1])
