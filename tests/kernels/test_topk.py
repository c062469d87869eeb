"""The TopK collector of the scans (ockstore/kernels/topk.h): exactly the k best (distance, id, row) of what it is offered,
whatever the order, with ties, -0, +inf, a bound, and every buffer size around its compactions."""

import numpy as np
import pytest

from ockstore import _kernels


def collect(D, k, ids=None, bound=np.inf, sorted_output=True):
    out_d = np.empty((D.shape[0], k), dtype=np.float32)
    out_r = np.empty((D.shape[0], k), dtype=np.int64)
    _kernels.topk_collect(np.ascontiguousarray(D, dtype=np.float32), k, ids, bound, sorted_output, out_d, out_r)
    return out_d, out_r


def oracle(D, k, ids=None, bound=np.inf):
    """The k best (distance, id, row) below `bound`, padded with (inf, -1); -0 and +0 are equal distances."""
    nq, n = D.shape
    rows = np.arange(n)
    id_of = rows if ids is None else ids
    out_d = np.full((nq, k), np.inf, dtype=np.float32)
    out_r = np.full((nq, k), -1, dtype=np.int64)
    for q in range(nq):
        entered = rows[(D[q] < bound) & (D[q] != np.inf)]
        order = np.lexsort((entered, id_of[entered], D[q][entered] + np.float32(0)))[:k]
        out_d[q, :order.size] = D[q][entered][order]
        out_r[q, :order.size] = entered[order]
    return out_d, out_r


DISTRIBUTIONS = {
    "normal": lambda rng, shape: rng.standard_normal(shape),
    "few values": lambda rng, shape: rng.integers(0, 20, shape) / 7,
    "all equal": lambda rng, shape: np.full(shape, 1.5),
    "signed zeros": lambda rng, shape: rng.choice(np.array([-0.0, 0.0, 1.0, -1.0]), shape),
    "descending": lambda rng, shape: -np.sort(rng.standard_normal(shape), axis=1),
}


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("k", [1, 2, 10, 255, 256, 257, 1000])
@pytest.mark.parametrize("n", [0, 1, 5, 300, 3000])
def test_collector_keeps_exactly_the_k_best(distribution, k, n):
    rng = np.random.default_rng(k * 31 + n)
    D = DISTRIBUTIONS[distribution](rng, (3, n)).astype(np.float32)
    if n > 2:
        D[1, 2] = np.inf  # a corrupt code's distance never enters
    ids = rng.integers(0, max(1, n // 2), n).astype(np.int64)  # duplicated ids: ties go to the smaller row
    for id_arg in (None, ids):
        got_d, got_r = collect(D, k, id_arg)
        want_d, want_r = oracle(D, k, id_arg)
        np.testing.assert_array_equal(got_r, want_r)
        np.testing.assert_array_equal(got_d, want_d)
        _, unsorted_r = collect(D, k, id_arg, sorted_output=False)
        np.testing.assert_array_equal(np.sort(unsorted_r, axis=1), np.sort(want_r, axis=1))


def test_bound_lets_only_smaller_distances_in():
    rng = np.random.default_rng(0)
    D = rng.standard_normal((4, 2000)).astype(np.float32)
    D[0, 5] = -1.0  # exactly at the bound: stays out
    got_d, got_r = collect(D, 100, bound=np.float32(-1.0))
    want_d, want_r = oracle(D, 100, bound=np.float32(-1.0))
    np.testing.assert_array_equal(got_r, want_r)
    assert 5 not in got_r[0]


@pytest.mark.parametrize("n_threads", [1, 2])
def test_exhaustive_scan_keeps_the_same_order_in_a_heap_and_in_a_topk(n_threads):
    """The exhaustive scan keeps k <= 64 results in a heap and more in a TopK buffer: the first 64 of k = 300 or
    2500 (more than the 2,200 rows: padding) are the results of k = 64, for a batch and for one query split over
    threads, with and without a filter."""
    import ockstore

    rng = np.random.default_rng(1)
    X = rng.standard_normal((2200, 16)).astype(np.float32)
    X[100:120] = X[5]  # equal distances: ids decide
    index = ockstore.Index.from_vectors(ockstore.OCKM(4, 2, 3, n_codewords=16, n_iter=2, seed=0).fit(X[:1000]), X)
    Q = rng.standard_normal((5, 16)).astype(np.float32)
    allow = rng.permutation(2200)[:1500]
    for kwargs in ({}, {"allow": allow}):
        D64, I64 = index.search(Q, 64, n_threads=n_threads, **kwargs)
        for k in (300, 2500):
            D, I = index.search(Q, k, n_threads=n_threads, **kwargs)
            np.testing.assert_array_equal(I[:, :64], I64)
            np.testing.assert_array_equal(D[:, :64], D64)
            d1, i1 = index.search(Q[0], k, n_threads=n_threads, **kwargs)  # one query: codes split over threads
            np.testing.assert_array_equal(i1, I[0])
            n_real = 1500 if kwargs else 2200
            assert (I[:, n_real:] == -1).all() and (I[:, :min(k, n_real)] >= 0).all()


@pytest.fixture(scope="module")
def deep_indexes():
    """A flat and an IVF index of byte codes (K = 64) over 2,203 rows stored as float32: the flat scan's last block
    (155 rows) and the inverted lists end in rows past a multiple of four; a flat index of 515 rows."""
    import ockstore

    rng = np.random.default_rng(7)
    X = rng.standard_normal((2203, 16)).astype(np.float32)
    X[300:340] = X[11]  # equal codes: ties decided by id
    ids = rng.permutation(10 * len(X))[:len(X)].astype(np.int64)
    flat = ockstore.Index.from_vectors(ockstore.OCKM(4, 2, 3, n_codewords=64, n_iter=2, seed=0).fit(X[:1500]), X, ids,
                                       store_vectors="float32")
    ivf_model = ockstore.IVF(7, ockstore.OCKM(4, 2, 3, n_codewords=64, n_iter=2, seed=0), n_iter=3).fit(X[:1500])
    ivf = ockstore.Index.from_vectors(ivf_model, X, ids, store_vectors="float32")
    assert (np.diff(ivf.list_offsets) % 4 != 0).any()
    # 515 rows: a collector of 256 (512 places) fills exactly by groups of four, then 3 rows enter one by one
    small = ockstore.Index.from_vectors(flat.quantizer, X[:515], ids[:515], store_vectors="float32")
    Q = rng.standard_normal((9, 16)).astype(np.float32)
    Q[0] = X[11]
    return {"flat": (flat, {}), "ivf": (ivf, {"n_probe": 5}), "flat515": (small, {})}, Q


@pytest.mark.parametrize("kind", ["flat", "ivf", "flat515"])
def test_deep_collectors_of_the_scans_keep_exactly_the_k_best(deep_indexes, kind):
    """k >= 256 (the scans offer codes four at a time without a branch, ock_topk_offer4): the k best are the first k
    of every candidate of the probed rows (k = all rows: no compaction before the end), for k on both sides of the
    collector's compaction sizes; a query alone, the batch and 1 or 2 threads alike; the heap's (flat) or the shallow
    collector's (IVF) first 64."""
    indexes, Q = deep_indexes
    index, options = indexes[kind]
    n = index.ntotal
    D_all, I_all = index.search(Q, n, rerank=0, **options)
    D64, I64 = index.search(Q, 64, rerank=0, **options)
    np.testing.assert_array_equal(I_all[:, :64], I64)
    np.testing.assert_array_equal(D_all[:, :64], D64)
    for k in (256, 257, 300, 511, 1000, 1500):
        if k >= n:
            continue
        for threads in (1, 2):
            D, I = index.search(Q, k, rerank=0, n_threads=threads, **options)
            np.testing.assert_array_equal(I, I_all[:, :k])
            np.testing.assert_array_equal(D, D_all[:, :k])
        d1, i1 = index.search(Q[3], k, rerank=0, **options)
        np.testing.assert_array_equal(i1, I_all[3, :k])


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_deep_rerank_is_the_exact_best_of_the_candidates(deep_indexes, kind):
    """rerank = R >= 256 inside the scan: the k best by exact value of the scan's R best (re-ranked again from the
    given vectors, the separate path), a query alone, the batch and 1 or 2 threads alike; R = every row: brute
    force."""
    indexes, Q = deep_indexes
    index, options = indexes[kind]
    V = np.asarray(index.vectors, dtype=np.float64)
    order = np.argsort(index.ids)
    k = 10
    for R in (256, 300, 1000, index.ntotal):
        D, I = index.search(Q, k, rerank=R, **options)
        Dv, Iv = index.search(Q, k, rerank=R, vectors=index.vectors, **options)
        np.testing.assert_array_equal(I, Iv)
        np.testing.assert_array_equal(D, Dv)
        for threads in (2,):
            D2, I2 = index.search(Q, k, rerank=R, n_threads=threads, **options)
            np.testing.assert_array_equal(I2, I)
            np.testing.assert_array_equal(D2, D)
        d1, i1 = index.search(Q[5], k, rerank=R, **options)
        np.testing.assert_array_equal(i1, I[5])
        np.testing.assert_array_equal(d1, D[5])
        _, C = index.search(Q, R, rerank=0, **options)
        for q in range(len(Q)):
            cand = order[np.searchsorted(index.ids, C[q][C[q] >= 0], sorter=order)]
            exact = ((Q[q].astype(np.float64) - V[cand]) ** 2).sum(1)
            best = np.lexsort((index.ids[cand], exact))[:k]
            np.testing.assert_array_equal(np.sort(I[q]), np.sort(index.ids[cand[best]]))
            np.testing.assert_allclose(D[q], exact[best], rtol=1e-6)
