"""The one search pipeline (ockstore/search/searcher.py; docs/ARCHITECTURE.md, "Search", *One pipeline*): a searcher
checks its options once and returns what ``search`` returns, for Index, IVFIndex and Collection, every option, one
query and batches; a collection's searcher follows its generation; the library's model (``default_quantizer``)."""

from __future__ import annotations

import numpy as np
import pytest

import ockstore
from helpers import gaussian_mixture

P = 12


@pytest.fixture(scope="module")
def base():
    return gaussian_mixture(2400, P, seed=3)


@pytest.fixture(scope="module")
def queries():
    Q = gaussian_mixture(9, P, seed=4)
    Q[3] = gaussian_mixture(2400, P, seed=3)[17]  # a stored vector: exact ties at distance 0
    return Q


def _models(metric, n_codewords):
    fine = ockstore.OCKM(3, 2, 4, n_codewords=n_codewords, metric=metric, n_iter=2, seed=1)
    ivf = ockstore.IVF(8, ockstore.OCKM(3, 2, 4, n_codewords=n_codewords, metric=metric, n_iter=2, seed=1), n_iter=4)
    return {"flat": fine, "ivf": ivf}


def _option_cases(kind, k, ids):
    probe = {"n_probe": 3} if kind == "ivf" else {}
    return [
        {**probe},
        {**probe, "rerank": 0},
        {**probe, "rerank": 3 * k},
        {**probe, "distance": "sdc", "rerank": 0},
        {**probe, "distance": "sdc"},
        {**probe, "n_threads": 1},
        {**probe, "n_threads": 2, "rerank": 2 * k},
    ]


def _assert_same(got, want):
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("n_codewords", [32, 16], ids=["bytes", "fastscan"])
@pytest.mark.parametrize("metric", ["l2", "ip", "cosine"])
@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_searcher_equals_search_for_indexes_and_collections(tmp_path, base, queries, metric, n_codewords, kind):
    """For an index and a collection of several segments (some rows deleted) of the same rows: searcher(k,
    **options).search(Q, allow=...) equals search(Q, k, **options, allow=...) for every option, batches and 1-D
    queries (the compiled one-query path), and the collection's results equal the index's over its live rows."""
    model = _models(metric, n_codewords)[kind].fit(base)
    ids = np.arange(len(base), dtype=np.int64) * 3 + 1
    index = ockstore.Index.from_vectors(model, base, ids, store_vectors="float32")
    col = ockstore.create_collection(tmp_path / "c", model, store_vectors="float32")
    for start in range(0, len(base), 600):  # four segments
        col.add(base[start:start + 600], ids[start:start + 600])
    gone = ids[::7]
    col.delete(gone)
    live = np.setdiff1d(ids, gone)
    k = 6
    allow = ids[::2]
    for options in _option_cases(kind, k, ids):
        for container, allowed in ((index, live), (col, live)):
            s = container.searcher(k, **options)
            for filt in (None, allow):
                want_allow = allowed if filt is None else np.intersect1d(allowed, filt)
                want = index.search(queries, k, allow=want_allow, **options)
                got_search = container.search(queries, k, allow=None if (container is index and filt is None)
                                              else (want_allow if container is index else filt), **options)
                got = s.search(queries, allow=None if (container is index and filt is None)
                               else (want_allow if container is index else filt))
                if container is col:
                    _assert_same(got_search, want)
                _assert_same(got, got_search)
                for i, q in enumerate(queries):  # one query per call: the batch's results
                    one = s.search(q, allow=None if (container is index and filt is None)
                                   else (want_allow if container is index else filt))
                    np.testing.assert_array_equal(one[0], got[0][i])
                    np.testing.assert_array_equal(one[1], got[1][i])
    col.close()


def test_a_collection_searcher_follows_its_generation(tmp_path, base, queries):
    """A collection's searcher searches the generation its collection sees: a writer's after each commit, a
    reader's after refresh(), its options checked again then (the bound of rerank follows the live rows)."""
    model = ockstore.OCKM(3, 2, 4, n_iter=2, seed=1).fit(base)
    writer = ockstore.create_collection(tmp_path / "c", model, store_vectors="float32")
    writer.add(base[:40])
    reader = ockstore.open_collection(tmp_path / "c")
    ws, rs = writer.searcher(5), reader.searcher(5)
    assert rs.options.rerank == 40  # 10 k, at most the 40 live rows
    writer.add(base[40:1000])
    _assert_same(ws.search(queries), writer.search(queries, 5))
    assert rs.search(queries)[1].max() < 40  # the reader's generation until it refreshes
    reader.refresh()
    _assert_same(rs.search(queries), writer.search(queries, 5))
    assert rs.options.rerank == 50
    writer.delete(np.arange(0, 1000, 2))
    for q in queries:
        assert not np.isin(ws.search(q)[1], np.arange(0, 1000, 2)).any()
    writer.close()
    reader.close()
    with pytest.raises(ValueError, match="closed"):
        rs.search(queries[0])


def test_search_keeps_the_searcher_of_its_last_scalar_arguments(base, queries):
    """search(Q, k, ...) keeps the searcher of its last call with the same scalar arguments (their types count:
    k=True is refused, not taken for 1) and makes a new one for other arguments."""
    model = ockstore.OCKM(3, 2, 4, n_iter=2, seed=1).fit(base)
    index = ockstore.Index.from_vectors(model, base)
    index.search(queries, 5)
    kept = index._searchers._searcher
    index.search(queries[0], 5)
    assert index._searchers._searcher is kept
    index.search(queries, 5, n_threads=1)
    assert index._searchers._searcher is not kept
    with pytest.raises(TypeError, match="k"):
        index.search(queries, True)


@pytest.mark.parametrize("metric", ["l2", "ip", "cosine"])
def test_default_quantizer_follows_its_rule(metric):
    """default_quantizer: unfitted, 4-bit words (fast scan), two codebooks per subspace, more words for more
    dimensions, flat for small bases and an inverted file whose lists grow with n_vectors; checked arguments."""
    small = ockstore.default_quantizer(1000, 128, metric=metric)
    assert isinstance(small, ockstore.OCKM) and not small.is_fitted
    assert small.n_codewords == 16 and small.n_codebooks == 2 and small.metric == metric
    wide = ockstore.default_quantizer(1000, 384, metric=metric)
    assert wide.n_subspaces > small.n_subspaces
    lists = []
    for n in (10**5, 10**6, 10**7, 10**8):
        model = ockstore.default_quantizer(n, 128, metric=metric)
        assert isinstance(model, ockstore.IVF) and not model.is_fitted and model.metric == metric
        lists.append(model.n_lists)
    assert lists == sorted(lists) and lists[0] < lists[-1] and lists[2] >= 1000
    tiny = ockstore.default_quantizer(5, 3, metric=metric)
    assert tiny.n_subspaces <= 3
    for bad, error in (({"n_vectors": 0}, ValueError), ({"dim": 0}, ValueError), ({"n_vectors": 1.5}, TypeError),
                       ({"dim": True}, TypeError), ({"metric": "cos"}, ValueError)):
        arguments = {"n_vectors": 100, "dim": 8, **bad}
        metric_kw = {"metric": arguments.pop("metric")} if "metric" in arguments else {}
        with pytest.raises(error, match=next(iter(bad))):
            ockstore.default_quantizer(arguments["n_vectors"], arguments["dim"], **metric_kw)


def test_a_collection_without_a_quantizer_picks_its_model(tmp_path, base, queries):
    """create_collection without a quantizer: cosine and float16 stored vectors by default, exact searches until
    train_size, then the model default_quantizer picks for the rows it holds (recorded in the manifest); retrain()
    picks again for the rows it then holds; a reader opens it."""
    col = ockstore.create_collection(tmp_path / "c", train_size=600)
    assert col.metric == "cosine" and col.store_vectors == "float16" and not col.trained
    col.add(base[:500])
    D, I = col.search(queries, 5)  # exact before training
    X = base[:500].astype(np.float16).astype(np.float32)
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    Qn = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    np.testing.assert_array_equal(I[:, 0], np.argmax(Qn @ Xn.T, axis=1))
    col.add(base[500:1200])
    assert col.wait_trained(timeout=300) and col.trained
    want = ockstore.default_quantizer(1200, P, metric="cosine")
    assert col.quantizer.n_subspaces == want.n_subspaces and col.quantizer.n_codewords == want.n_codewords
    assert col._snap.manifest.auto.trained_rows == 1200
    col.retrain()
    assert col._snap.manifest.auto.trained_rows == 1200
    col.close()
    reader = ockstore.open_collection(tmp_path / "c")
    assert reader._snap.manifest.auto.metric == "cosine"
    assert reader.search(queries, 5)[1].shape == (len(queries), 5)
    reader.close()
    with pytest.raises(ValueError, match="metric"):
        ockstore.create_collection(tmp_path / "d", ockstore.OCKM(3, 2, metric="l2"), metric="cosine")


def test_tune_takes_a_collection(tmp_path, base, queries):
    """ockstore.tune(collection, ...): the keywords of the fastest setting reaching the target on the collection's
    live rows (ground truth by brute force over every segment's live stored vectors, deleted rows left out), valid
    for its search; an untrained collection and other objects are refused with what tune takes."""
    model = ockstore.IVF(8, ockstore.OCKM(3, 2, 4, n_codewords=16, n_iter=2, seed=1), n_iter=4).fit(base)
    col = ockstore.create_collection(tmp_path / "c", model, store_vectors="float32")
    for start in range(0, len(base), 800):
        col.add(base[start:start + 800])
    col.delete(np.arange(0, len(base), 3))
    Q = gaussian_mixture(60, P, seed=9)
    result = ockstore.tune(col, Q, k=5, target_recall=0.9)
    assert set(result) == {"n_probe", "rerank"} and result.recall >= 0.9
    D, I = col.search(Q, 5, **result)
    assert not np.isin(I, np.arange(0, len(base), 3)).any()
    live = np.setdiff1d(np.arange(len(base)), np.arange(0, len(base), 3))
    truth = live[np.argsort(((Q[:, None, :] - base[live][None, :, :]) ** 2).sum(-1), axis=1, kind="stable")[:, :5]]
    got = np.mean([len(np.intersect1d(a, b)) / 5 for a, b in zip(I, truth)])
    assert got >= 0.85
    col.close()
    fresh = ockstore.create_collection(tmp_path / "d", train_size=1000)
    fresh.add(base[:100])
    with pytest.raises(ValueError, match="not trained"):
        ockstore.tune(fresh, Q)
    fresh.close()
    for bad in (None, str(tmp_path / "c"), base):
        with pytest.raises(TypeError, match="Index, IVFIndex or Collection"):
            ockstore.tune(bad, Q)
