"""Tests of the inverted-file index (IVFIndex) against NumPy: the norm terms it stores, and search by probing lists
(every metric, ADC and SDC, norm encodings, n_probe, empty lists, padding, ids, filters, re-ranking, threads) against
brute force over the reconstructions, restricted to the probed lists. The model (IVF): tests/quantizers/
test_ivf_quantizer.py; files: tests/indexfile/test_ivf_file.py; data and oracles: tests/support/ivf_checks.py.

Results are checked with ``search_checks.check_topk`` (values of the returned ids, the k best values of the
allowed rows, nothing clearly better missing): float32 and float64 may order near-ties differently.
"""

from __future__ import annotations

import numpy as np
import pytest

import reference
from ockstore import IVF, Index, IVFIndex
from ockstore.quantizers.ivf import default_n_probe
from ivf_checks import (
    CASES, FINE, L, N, NQ, approx_keys, case_id, checked_probe, clusters, prepared, probed_rows, query_vectors,
    reconstruct,
)
from ivf_checks import data, indexes, models  # noqa: F401 - pytest fixtures
from search_checks import Rows, check_topk, keys_of, make_allow, tolerance_scale


# ------------------------------------------------------------------------------------------------- stored norm terms
def test_norm_terms_are_those_of_the_whole_reconstruction(indexes, models, data):
    """The stored norm term is ||c_l + R z_hat||^2 (float32), or its one-byte code through ivf.norm_levels (fitted on
    the learn set's terms: ascending, 256 levels)."""
    index = indexes["l2", "ockm", "f32"]
    Xh = reconstruct(index.quantizer, index.row_lists(), index.codes)
    np.testing.assert_allclose(index.norms, (Xh ** 2).sum(axis=1), rtol=1e-5)
    u8 = indexes["l2", "ockm", "u8"]
    levels = u8.quantizer.norm_levels
    assert levels.shape == (256,) and np.all(np.diff(levels) >= 0)
    np.testing.assert_array_equal(u8.norms, reference.nearest_level((Xh ** 2).sum(axis=1), levels))


# ---------------------------------------------------------------------------------------------------------- search
@pytest.mark.parametrize("distance", ["adc", "sdc"])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_search_equals_brute_force_over_probed_lists(indexes, data, case, distance):
    """Every metric, fine method and norm encoding: n_probe = n_lists gives the exhaustive result over the codes
    (ids and values), smaller n_probe the exhaustive result over the rows of the probed lists; 1 and 2 threads give
    identical results, and so does a query searched alone."""
    _, base, queries, ids = data
    index = indexes[case]
    ivf = index.quantizer
    metric = case[0]
    Qv = query_vectors(index, queries, distance)
    keys = approx_keys(index, Qv)
    rows_of = Rows(index.ids)
    scale = tolerance_scale(Qv, base, metric) if metric != "cosine" else 1.0
    for n_probe in (L, 3, 1):
        lists = checked_probe(ivf, Qv if distance == "sdc" else prepared(queries, metric), Qv, n_probe)
        allowed = probed_rows(index, lists) if n_probe < L else np.arange(N)
        for k in (1, 10, 60):
            D, I = index.search(queries, k, n_probe=n_probe, distance=distance, n_threads=1, rerank=0)
            check_topk(D, I, keys, allowed, k, metric, rows_of, scale)
            D2, I2 = index.search(queries, k, n_probe=n_probe, distance=distance, n_threads=2, rerank=0)
            np.testing.assert_array_equal(D, D2)
            np.testing.assert_array_equal(I, I2)
        D, I = index.search(queries, 10, n_probe=n_probe, distance=distance, rerank=0)
        d, i = index.search(queries[2], 10, n_probe=n_probe, distance=distance, rerank=0)  # alone: the same results
        np.testing.assert_array_equal(d, D[2])
        np.testing.assert_array_equal(i, I[2])


def test_n_probe_default_and_bad_values(indexes, data):
    queries = data[2]
    index = indexes["l2", "ockm", "u8"]
    assert index.quantizer.default_n_probe == default_n_probe(L) == 7  # a model alone: 2 sqrt(L)
    assert index.info()["default_n_probe"] == default_n_probe(L, len(index)) == L  # few rows: every list
    D, I = index.search(queries, 5)
    D1, I1 = index.search(queries, 5, n_probe=L)
    np.testing.assert_array_equal(I, I1)
    for bad in (0, -1, L + 1):
        with pytest.raises(ValueError, match="n_probe"):
            index.search(queries, 5, n_probe=bad)
    for bad in (1.0, True, "2"):
        with pytest.raises(TypeError, match="n_probe"):
            index.search(queries, 5, n_probe=bad)


def test_n_probe_on_a_flat_index_is_refused(data):
    learn, base, queries, _ = data
    flat = Index.from_vectors(FINE["pq"]("l2").fit(learn), base)
    with pytest.raises(ValueError, match="n_probe"):
        flat.search(queries, 3, n_probe=2)
    flat.search(queries, 3, n_probe=None)  # the default: no probing, no error


@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_empty_lists_and_padding(data, metric):
    """A base drawn from 2 of the 8 clusters leaves most lists empty: searches still equal brute force over the
    probed rows, and a query whose probed lists hold fewer than k vectors (or none) is padded."""
    learn, _, queries, _ = data
    base = clusters(300, 9, which=(0, 1))
    ivf = IVF(L, FINE["ockm"](metric), n_iter=6, seed=3).fit(learn)
    index = Index.from_vectors(ivf, base, norm_encoding="f32" if metric == "l2" else None)
    sizes = index.list_sizes
    assert (sizes == 0).sum() >= 4 and index.info()["list_sizes"]["empty"] == int((sizes == 0).sum())
    Qv = prepared(queries, metric)
    keys = approx_keys(index, Qv)
    pad = np.inf if metric == "l2" else -np.inf
    for n_probe in (1, 2, 5, L):
        lists = checked_probe(ivf, queries, Qv, n_probe)
        allowed = probed_rows(index, lists)
        k = 400  # more than the base: always padding
        D, I = index.search(queries, k, n_probe=n_probe)
        check_topk(D, I, keys, allowed, k, metric, Rows(index.ids), tolerance_scale(Qv, base, metric))
        for q in range(NQ):
            assert np.all(I[q, len(allowed[q]):] == -1) and np.all(D[q, len(allowed[q]):] == pad)
    # a query whose only probed list is empty gets padding only
    empty = int(np.flatnonzero(sizes == 0)[0])
    q = ivf.centroids[empty][None] if metric == "l2" else None
    if q is not None:
        D, I = index.search(q, 3, n_probe=1)
        assert (I == -1).all() and np.isinf(D).all()


def test_ids_default_to_insertion_order(models, data):
    """Without ids, a vector's id is its position in X (rows are reordered list after list)."""
    _, base, queries, _ = data
    ivf = models["l2", "ockm"]
    index = Index.from_vectors(ivf, base)
    lists, _ = ivf.encode(base)
    order = np.argsort(lists, kind="stable")
    np.testing.assert_array_equal(index.ids, order)
    np.testing.assert_array_equal(index.row_lists(), lists[order])
    assert index.has_ids and isinstance(index, IVFIndex)
    np.testing.assert_array_equal(np.diff(index.list_offsets), np.bincount(lists, minlength=L))
    D, I = index.search(base[[17, 400]], 1, n_probe=L)
    Xh = ivf.decode(lists, ivf.encode(base)[1])
    assert np.all(np.linalg.norm(base[I[:, 0]] - base[[17, 400]], axis=1)
                  <= np.linalg.norm(Xh[[17, 400]] - base[[17, 400]], axis=1) * 2 + 1e-3)


@pytest.mark.parametrize("kind", ["ids", "mask", "empty"])
@pytest.mark.parametrize("case", [("l2", "ockm", "u8"), ("ip", "pq", "none")], ids=case_id)
def test_allow_restricts_to_allowed_rows_of_probed_lists(indexes, data, case, kind):
    """allow (ids, or a mask over the rows in file order): the exact top k of the allowed rows of the probed lists."""
    _, base, queries, ids = data
    index = indexes[case]
    metric = case[0]
    allow, rows = make_allow(kind, index.ids, N, seed=5)
    if kind == "ids":  # make_allow picks rows of the index; ids given as a set of ids
        allow = list(allow)
    Qv = prepared(queries, metric)
    keys = approx_keys(index, Qv)
    for n_probe in (2, L):
        lists = checked_probe(index.quantizer, queries, Qv, n_probe)
        allowed = [np.intersect1d(r, rows) for r in probed_rows(index, lists)]
        for k in (1, 5, 50):
            for threads in (1, 2):
                D, I = index.search(queries, k, n_probe=n_probe, allow=allow, n_threads=threads, rerank=0)
                check_topk(D, I, keys, allowed, k, metric, Rows(index.ids), tolerance_scale(Qv, base, metric))


@pytest.mark.parametrize("case", [("l2", "ockm", "u8"), ("cosine", "ockm", "none")], ids=case_id)
def test_rerank_of_probed_candidates(indexes, data, case):
    """rerank=R: the R best of the probed lists by the codes (by the fast scan's quantized bounds for 4-bit codes:
    ``_candidates``), re-ranked by their exact values from the stored vectors (or given ones)."""
    _, base, queries, ids = data
    index = indexes[case]
    metric = case[0]
    R, k, n_probe = 30, 5, 3
    D0, I0 = index._candidates(queries, R, n_probe=n_probe)
    D, I = index.search(queries, k, n_probe=n_probe, rerank=R)
    Dv, Iv = index.search(queries, k, n_probe=n_probe, rerank=R, vectors=index.vectors)
    np.testing.assert_array_equal(I, Iv)
    position = np.argsort(ids)  # the base's positions of the ids, in id order
    by_row = base[position[np.searchsorted(ids[position], index.ids)]]  # the base in the index's row order
    Db, Ib = index.search(queries, k, n_probe=n_probe, rerank=R, vectors=by_row)
    np.testing.assert_array_equal(I, Ib)
    rows_of = Rows(index.ids)
    Qv = prepared(queries, metric)
    V = np.asarray(index.vectors, dtype=np.float64)
    for q in range(NQ):
        cand = rows_of(I0[q][I0[q] >= 0])
        exact = ((Qv[q] - V[cand]) ** 2).sum(1) if metric == "l2" else -(V[cand] @ Qv[q]) / np.linalg.norm(
            V[cand], axis=1)
        best = cand[np.argsort(exact, kind="stable")[:k]]
        assert set(rows_of(I[q])) == set(best)
        np.testing.assert_allclose(keys_of(D[q], metric), np.sort(exact)[:k], rtol=1e-4, atol=1e-3)
    with pytest.raises(ValueError, match="rerank"):
        index.search(queries, k, n_probe=n_probe, rerank=k - 1)


def test_zero_rows_and_one_list(data):
    """N = 0 searches give padding; n_lists = 1 is a flat index with a centre (every query probes the one list)."""
    learn, base, queries, _ = data
    ivf = IVF(1, FINE["ockm"]("l2"), n_iter=2).fit(learn)
    empty = Index.from_vectors(ivf, base[:0])
    D, I = empty.search(queries, 4)
    assert (I == -1).all() and np.isinf(D).all() and empty.list_offsets.tolist() == [0, 0]
    index = Index.from_vectors(ivf, base, norm_encoding="f32")
    keys = approx_keys(index, prepared(queries, "l2"))
    D, I = index.search(queries, 7)
    check_topk(D, I, keys, np.arange(N), 7, "l2", Rows(index.ids), tolerance_scale(queries, base, "l2"))


def test_constructor_checks_list_offsets(indexes):
    index = indexes["l2", "ockm", "u8"]
    args = (index.quantizer, index.codes, index.norms, index.ids)
    offsets = np.array(index.list_offsets)
    IVFIndex(*args, offsets, "u8")  # fine
    for bad, match in ((offsets[:-1], "shape"), (offsets + 1, "from 0"), (offsets[::-1].copy(), "from 0")):
        with pytest.raises(ValueError, match=match):
            IVFIndex(*args, bad, "u8")
    swapped = offsets.copy()
    swapped[3], swapped[4] = offsets[4] + 1, offsets[3]
    with pytest.raises(ValueError, match="decrease"):
        IVFIndex(*args, swapped, "u8")
    with pytest.raises(TypeError, match="list_offsets"):
        IVFIndex(*args, offsets.astype(float), "u8")
    with pytest.raises(ValueError, match="norm_encoding"):
        IVFIndex(index.quantizer, index.codes, None, index.ids, offsets, "none")
    with pytest.raises(TypeError, match="IVF"):
        Index(index.quantizer, index.codes, index.norms, index.ids, "u8")
    with pytest.raises(TypeError, match="IVF"):
        IVFIndex(FINE["pq"]("l2").fit(clusters(100, 1)), index.codes, None, None, offsets, "none")
