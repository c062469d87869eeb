"""Tests of the search options: the metric of a quantizer ("l2", "ip", "cosine"), exact re-ranking from stored or given
vectors (``rerank``, ``store_vectors``, ``vectors``) and filters (``allow``), checked against NumPy brute force (the
oracles and their rules: tests/support/search_checks.py). The options in files and at the public boundary:
test_search_option_inputs.py.

The kernels run small work on one thread whatever ``n_threads`` says; the tests turn that rule off (tests/conftest.py,
``threads_for_small_work``) so that ``n_threads=2`` really runs both parallel strategies (groups of queries, and one
query's blocks of codes split over threads and merged: N > 2048 codes).
"""

from __future__ import annotations

import numpy as np
import pytest

import ockstore
from ockstore import Index
from ockstore.search import rerank as _rerank
from ockstore.search.codes import CodeBlocks
from search_checks import (
    CASES, MAKERS, N, N_ALLOWED, NQ, P, RERANK_EXTRA, RTOL, Rows, allowed_rows_of_candidates, approx_keys,
    assert_lexicographic, case_id, check_topk, exact_keys, k_values, keys_of, make_allow, tolerance_scale,
    to_uint8_values,
)
from search_checks import data, indexes, quantizers  # noqa: F401 - pytest fixtures

# ----------------------------------------------------------------------------------------------- the main matrix
@pytest.fixture(scope="module")
def oracle_cache():
    return {}


def cached(cache, key, compute):
    if key not in cache:
        cache[key] = compute()
    return cache[key]


@pytest.mark.parametrize("allow_kind", ["none", "ids", "mask", "empty", "all"])
@pytest.mark.parametrize("rerank", [False, True], ids=["scan", "rerank"])
@pytest.mark.parametrize("distance", ["adc", "sdc"])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_search_matches_oracle(indexes, data, oracle_cache, case, distance, rerank, allow_kind):
    """Every metric and norm encoding x ADC/SDC x rerank x filter x k around the number of allowed rows x 1/2
    threads: the oracle's top k; the same results on 1 and 2 threads and for a query alone or in a batch."""
    metric = case[0]
    index = indexes[case]
    _, base, Q, ids = data
    rows_of = Rows(ids)
    allow, allowed = make_allow(allow_kind, ids, N)
    approx = cached(oracle_cache, (case, distance), lambda: approx_keys(index, Q, distance))
    exact = cached(oracle_cache, (case, "exact"), lambda: exact_keys(index.vectors, Q, metric))
    scale = tolerance_scale(Q, base, metric)
    for k in k_values(len(allowed)):
        R = k + RERANK_EXTRA if rerank else 0
        runs = []
        for threads in (1, 2):
            D, I = index.search(Q, k, distance=distance, rerank=R, allow=allow, n_threads=threads)
            if rerank:
                # the candidates are the scan's R best (by the fast scan's bounds for 4-bit codes: _candidates;
                # the scan's own R best checked against the oracle too); the results are their k best by exact value
                Dc, Ic = index.search(Q, R, distance=distance, allow=allow, n_threads=threads, rerank=0)
                check_topk(Dc, Ic, approx, allowed, R, metric, rows_of, scale)
                _, Ic = index._candidates(Q, R, distance=distance, allow=allow, n_threads=threads)
                check_topk(D, I, exact, allowed_rows_of_candidates(Ic, rows_of), k, metric, rows_of, scale)
            else:
                check_topk(D, I, approx, allowed, k, metric, rows_of, scale)
            for q in range(NQ):
                d1, i1 = index.search(Q[q], k, distance=distance, rerank=R, allow=allow, n_threads=threads)
                assert d1.shape == (k,) and i1.shape == (k,)
                np.testing.assert_array_equal(d1, D[q])
                np.testing.assert_array_equal(i1, I[q])
            runs.append((D, I))
        np.testing.assert_array_equal(runs[0][0], runs[1][0])
        np.testing.assert_array_equal(runs[0][1], runs[1][1])


@pytest.mark.parametrize("case", [("l2", "ockm", "u8"), ("ip", "pq", "none"), ("cosine", "ockm", "none")],
                         ids=case_id)
def test_more_threads_than_queries(indexes, data, case):
    """Results do not depend on n_threads, also above the number of queries, with filters and re-ranking."""
    index = indexes[case]
    Q, ids = data[2], data[3]
    allow, _ = make_allow("ids", ids, N, seed=3)
    for distance in ("adc", "sdc"):
        for options in ({}, {"allow": allow}, {"rerank": 30}, {"allow": allow, "rerank": 30}):
            D, I = index.search(Q, 12, distance=distance, n_threads=1, **options)
            for threads in (3, 8):
                for nq in (1, 2, NQ):
                    D2, I2 = index.search(Q[:nq], 12, distance=distance, n_threads=threads, **options)
                    np.testing.assert_array_equal(D2, D[:nq])
                    np.testing.assert_array_equal(I2, I[:nq])


# -------------------------------------------------------------------------------------------------------- re-ranking
@pytest.mark.parametrize("store", ["float16", "float32", "uint8"])
@pytest.mark.parametrize("case", [("l2", "ockm", "f32"), ("l2", "pq", "none"), ("ip", "ockm", "none"),
                                  ("cosine", "pq", "none")], ids=case_id)
def test_rerank_at_least_n_is_exact_brute_force(quantizers, data, case, store):
    """rerank >= N: the results are the exact top k (from the stored vectors, in their stored precision) of all the
    allowed rows, whatever the approximate values."""
    metric, method, enc = case
    _, base, Q, ids = data
    X = to_uint8_values(base) if store == "uint8" else base
    Qs = to_uint8_values(Q) if store == "uint8" else Q
    index = Index.from_vectors(quantizers[method, metric], X, ids, norm_encoding=enc, store_vectors=store)
    assert index.vectors.dtype == np.dtype(store) and index.store_vectors == store
    np.testing.assert_array_equal(index.vectors, X.astype(store))
    exact = exact_keys(index.vectors, Qs, metric)
    scale = tolerance_scale(Qs, X, metric)
    rows_of = Rows(ids)
    for allow_kind in ("none", "ids", "mask"):
        allow, allowed = make_allow(allow_kind, ids, N, seed=5)
        for k in (1, 7, len(allowed), len(allowed) + 2):
            for distance in ("adc", "sdc"):
                D, I = index.search(Qs, k, distance=distance, rerank=max(k, N), allow=allow, n_threads=2)
                check_topk(D, I, exact, allowed, k, metric, rows_of, scale)


@pytest.mark.parametrize("metric", ["l2", "ip", "cosine"])
def test_rerank_vectors_argument(quantizers, data, tmp_path, metric):
    """vectors= (float64 or float32 ndarray, read-only memory map, nested lists, uint8) re-ranks as the stored
    vectors of the same values do; it is used in place of the stored ones when both are there."""
    _, base, Q, ids = data
    q = quantizers["pq", metric]
    stored = Index.from_vectors(q, base, ids, store_vectors="float32")
    plain = Index.from_vectors(q, base, ids)
    assert plain.vectors is None and plain.store_vectors is None
    path = tmp_path / "vectors.f64"
    base.astype(np.float64).tofile(path)
    mapped = np.memmap(path, dtype=np.float64, mode="r", shape=(N, P))
    allow, _ = make_allow("mask", ids, N)
    for options in ({}, {"allow": allow}):
        for k, R in ((1, 1), (5, 40), (10, N)):
            D, I = stored.search(Q, k, rerank=R, **options)
            for given in (base, base.astype(np.float64), mapped):
                D2, I2 = plain.search(Q, k, rerank=R, vectors=given, **options)
                np.testing.assert_array_equal(D2, D)
                np.testing.assert_array_equal(I2, I)
            D3, I3 = plain.search(Q[:2], k, rerank=R, vectors=base.tolist(), **options)
            np.testing.assert_array_equal(D3, D[:2])
            np.testing.assert_array_equal(I3, I[:2])
    # given vectors win over the stored ones: other values, other results
    ints = to_uint8_values(base).astype(np.uint8)
    D, I = stored.search(Q, 5, rerank=N, vectors=ints)
    scale = tolerance_scale(Q, ints, metric)
    check_topk(D, I, exact_keys(ints, Q, metric), np.arange(N), 5, metric, Rows(ids), scale)


def test_rerank_only_reorders_the_candidates(indexes, data):
    """rerank = k returns the scan's k candidates (``_candidates``), re-ordered by exact value with exact values."""
    _, base, Q, ids = data
    for case in CASES:
        index, metric = indexes[case], case[0]
        _, I0 = index._candidates(Q, 9)
        D, I = index.search(Q, 9, rerank=9)
        np.testing.assert_array_equal(np.sort(I, axis=1), np.sort(I0, axis=1))
        exact = exact_keys(index.vectors, Q, metric)
        rows_of = Rows(ids)
        np.testing.assert_allclose(keys_of(D, metric), np.take_along_axis(exact, rows_of(I), axis=1), rtol=RTOL,
                                   atol=1e-5 * tolerance_scale(Q, base, metric))


@pytest.mark.parametrize("given", [False, True], ids=["stored", "given-h5py-like"])
def test_rerank_in_steps_of_queries(indexes, data, monkeypatch, given):
    """Re-ranking a batch one query per step (the smallest RERANK_STEP_BYTES) gives exactly the results of one step,
    with or without a filter that leaves fewer than R candidates, from the stored vectors or from a given array-like
    that is not an ndarray (read once per distinct row, in increasing order)."""
    _, base, Q, ids = data
    allow, _ = make_allow("ids", ids, N, seed=5)

    class RowsOnly:  # like an h5py dataset: shape, dtype, and indexing by an increasing array of rows only
        shape, dtype = base.shape, base.dtype

        def __getitem__(self, rows):
            rows = np.asarray(rows)
            assert rows.ndim == 1 and np.all(np.diff(rows) > 0), "rows must increase"
            return base[rows]

    vectors = RowsOnly() if given else None
    for case in [("l2", "ockm", "u8"), ("ip", "pq", "none"), ("cosine", "ockm", "none")]:
        index = indexes[case]
        for options in ({}, {"allow": allow}):
            expected = index.search(Q, 7, rerank=N_ALLOWED + 5, vectors=vectors, **options)
            with monkeypatch.context() as m:
                m.setattr(_rerank, "RERANK_STEP_BYTES", 1)
                got = index.search(Q, 7, rerank=N_ALLOWED + 5, vectors=vectors, **options)
            np.testing.assert_array_equal(got[0], expected[0])
            np.testing.assert_array_equal(got[1], expected[1])


def test_rerank_beyond_n_costs_no_more_than_n(indexes, data):
    """rerank far above N can only re-rank the N vectors: it is refused (naming rerank) or answered as rerank = N,
    without memory in proportion to rerank (rerank = 2**31 - 1 is accepted today and asks for ~25 GB per query)."""
    import tracemalloc

    base, Q = data[1][:300], data[2][:1]
    index = Index.from_vectors(indexes[("l2", "pq", "none")].quantizer, base, store_vectors="float32")
    D, I = index.search(Q, 5, rerank=300)
    tracemalloc.start()
    try:
        D2, I2 = index.search(Q, 5, rerank=10**6)
    except ValueError as exc:
        assert "rerank" in str(exc)
    else:
        np.testing.assert_array_equal(D2, D)
        np.testing.assert_array_equal(I2, I)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 4 << 20, f"rerank=10**6 over 300 vectors allocated {peak / 1e6:.0f} MB"


def test_rerank_recall_grows_with_candidates(indexes, data):
    """Against the exact neighbours of the stored vectors: the candidates of a larger rerank include those of a smaller
    one, so the recall of the re-ranked top 10 never falls as rerank grows (from rerank = 0 on, for byte codes), and
    rerank = N finds all of them."""
    Q, ids = data[2], data[3]
    rows_of = Rows(ids)
    for case in [("l2", "pq", "none"), ("l2", "ockm", "u8"), ("ip", "pq", "none"), ("cosine", "ockm", "none")]:
        index, metric = indexes[case], case[0]
        exact = exact_keys(index.vectors, Q, metric)
        true = np.argsort(exact, axis=1)[:, :10]
        recalls = []
        for rerank in (0, 10, 50, 200, 1000, N):
            _, I = index.search(Q, 10, rerank=rerank)
            recalls.append(np.mean([np.isin(true[q], rows_of(I[q])).mean() for q in range(NQ)]))
        if not isinstance(index._codes, CodeBlocks):  # 4-bit codes: rerank = k re-ranks the k smallest bounds, not
            assert recalls[1] >= recalls[0] - 1e-12  # the scan's exact k best (docs/ARCHITECTURE.md, "Fast scan")
        assert np.all(np.diff(recalls[1:]) >= -1e-12), recalls
        assert recalls[-1] == 1.0


# ------------------------------------------------------------------------------------------------------------ ties
@pytest.mark.parametrize("rerank", [None, 8, "all"])
@pytest.mark.parametrize("case", [("l2", "ckm", "none"), ("l2", "ockm", "u8"), ("ip", "ockm", "none"),
                                  ("cosine", "pq", "none")], ids=case_id)
def test_ties_broken_by_smaller_id(quantizers, data, case, rerank):
    """Three copies of each vector at rows far apart (different blocks, so different threads' heaps), ids shuffled:
    copies have equal values (approximate and exact), and the smaller id comes first, also at the cut-off k, with
    filters and re-ranking, on 1 and 2 threads."""
    metric, method, enc = case
    base, Q = data[1], data[2]
    n_unique = 1000
    X = np.concatenate([base[:n_unique]] * 3)
    rng = np.random.default_rng(9)
    ids = rng.permutation(len(X)).astype(np.int64) * 3 + 2
    index = Index.from_vectors(quantizers[method, metric], X, ids, norm_encoding=enc, store_vectors="float32")
    group_of_row = np.arange(len(X)) % n_unique
    rows_of = Rows(ids)
    mask = np.zeros(len(X), dtype=bool)
    mask[rng.choice(len(X), size=len(X) // 2, replace=False)] = True
    for allow in (None, mask):
        for k in (1, 2, 3, 4, 7, 20):
            R = None if rerank is None else (len(X) if rerank == "all" else max(k, rerank))
            for threads in (1, 2):
                D, I = index.search(Q, k, rerank=R, allow=allow, n_threads=threads)
                assert_lexicographic(D, I, metric)
                for q in range(NQ):
                    rows = rows_of(I[q])
                    for row in rows:
                        group = np.nonzero(group_of_row == group_of_row[row])[0]
                        if allow is not None:
                            group = group[allow[group]]
                        assert np.isin(ids[group][ids[group] < ids[row]], I[q]).all(), \
                            "a copy with a smaller id was left out"
        # copies have bit-equal values: ranking all rows shows each value three times (twice or once when filtered)
        D, I = index.search(Q, len(X), rerank=None if rerank is None else len(X), allow=allow)
        for q in range(NQ):
            rows = rows_of(I[q][I[q] >= 0])
            values = {}
            for row, value in zip(rows, D[q][I[q] >= 0]):
                values.setdefault(group_of_row[row], set()).add(float(value))
            assert all(len(v) == 1 for v in values.values()), "copies of one vector with different values"


def test_duplicate_stored_ids_all_allowed(quantizers, data):
    """With stored ids that repeat, allowing an id allows every row that holds it."""
    base, Q = data[1], data[2]
    ids = np.arange(300, dtype=np.int64) // 3  # rows 3j, 3j+1, 3j+2 hold id j
    for metric in ("l2", "ip", "cosine"):
        index = Index.from_vectors(quantizers["pq", metric], base[:300], ids, store_vectors="float32")
        for rerank in (None, 10):
            D, I = index.search(Q, 10, allow=[5, 17, 17, 500], rerank=rerank)
            assert np.all(np.sort(I[:, :6], axis=1) == [5, 5, 5, 17, 17, 17])
            assert np.all(I[:, 6:] == -1)
            pad = np.inf if metric == "l2" else -np.inf
            assert np.all(D[:, 6:] == pad) and np.all(np.isfinite(D[:, :6]))
            D2, I2 = index.search(Q, 10, allow=np.isin(np.arange(300) // 3, [5, 17]), rerank=rerank)
            np.testing.assert_array_equal(D2, D)
            np.testing.assert_array_equal(I2, I)


# ---------------------------------------------------------------------------------------------------------- metrics
def test_cosine_equals_l2_on_unit_vectors(quantizers, data):
    """On unit vectors and unit queries ||q - x||^2 = 2 - 2 cos(q, x): exact re-ranking of everything ranks the same
    under "l2" and "cosine" (different models, same exact values), with and without a filter."""
    base, Q, ids = data[1], data[2], data[3]
    Xu = (base / np.linalg.norm(base, axis=1, keepdims=True)).astype(np.float32)
    Qu = (Q / np.linalg.norm(Q, axis=1, keepdims=True)).astype(np.float32)
    l2 = Index.from_vectors(quantizers["ockm", "l2"], Xu, ids, norm_encoding="f32", store_vectors="float32")
    cos = Index.from_vectors(quantizers["ockm", "cosine"], Xu, ids, store_vectors="float32")
    rows_of = Rows(ids)
    exact_cos = exact_keys(Xu, Qu, "cosine")
    for allow_kind in ("none", "ids"):
        allow, allowed = make_allow(allow_kind, ids, N, seed=11)
        Dl, Il = l2.search(Qu, 10, rerank=N, allow=allow)
        Dc, Ic = cos.search(Qu, 10, rerank=N, allow=allow)
        kk = min(10, len(allowed))
        np.testing.assert_allclose(Dl[:, :kk], 2 - 2 * Dc[:, :kk].astype(np.float64), atol=1e-5)
        check_topk(Dc, Ic, exact_cos, allowed, 10, "cosine", rows_of, 1.0)
        check_topk(Dl, Il, exact_keys(Xu, Qu, "l2"), allowed, 10, "l2", rows_of, 1.0)
        # the same ids wherever the exact cosines are not near-ties
        for q in range(NQ):
            s = np.sort(exact_cos[q, allowed])
            for j in range(kk):
                clear = (j == 0 or s[j] - s[j - 1] > 1e-5) and s[j + 1] - s[j] > 1e-5 if j + 1 < len(s) else True
                if clear:
                    assert Il[q, j] == Ic[q, j]


def test_cosine_ignores_lengths(quantizers, data):
    """Scaling base vectors and queries by powers of two (exact in float32) changes nothing under "cosine": same
    codes, same results (re-ranked values divide by the stored vector's length)."""
    base, Q, ids = data[1], data[2], data[3]
    q = quantizers["ockm", "cosine"]
    rng = np.random.default_rng(12)
    factors = 2.0 ** rng.integers(-3, 4, size=(N, 1))
    a = Index.from_vectors(q, base, ids, store_vectors="float32")
    b = Index.from_vectors(q, (base * factors).astype(np.float32), ids, store_vectors="float32")
    np.testing.assert_array_equal(a.codes, b.codes)
    Q4 = (Q * 4).astype(np.float32)
    for distance in ("adc", "sdc"):
        for rerank in (None, 30):
            D, I = a.search(Q, 10, distance=distance, rerank=rerank)
            D2, I2 = b.search(Q4, 10, distance=distance, rerank=rerank)
            np.testing.assert_array_equal(I2, I)
            np.testing.assert_allclose(D2, D, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(q.encode(base[:50] * 8), q.encode(base[:50]))
    # the reconstructions are (close to) unit vectors and the scores are cosines: in [-1, 1]
    D, _ = a.search(Q, N)
    assert np.all(np.abs(D) <= 1 + 1e-3)


def test_ip_ranks_differently_from_l2(quantizers, data):
    """On vectors of different lengths the exact "ip" and "l2" top 10 differ; each is its brute force."""
    base, Q, ids = data[1], data[2], data[3]
    rows_of = Rows(ids)
    results = {}
    for metric in ("l2", "ip"):
        index = Index.from_vectors(quantizers["pq", metric], base, ids, store_vectors="float32")
        D, I = index.search(Q, 10, rerank=N)
        check_topk(D, I, exact_keys(base, Q, metric), np.arange(N), 10, metric, rows_of,
                   tolerance_scale(Q, base, metric))
        results[metric] = I
        if metric == "ip":
            assert np.all(np.diff(D, axis=1) <= 0), "ip scores must descend"
        else:
            assert np.all(np.diff(D, axis=1) >= 0), "l2 distances must ascend"
    differ = [set(results["l2"][q]) != set(results["ip"][q]) for q in range(NQ)]
    assert sum(differ) >= NQ // 2


def test_ip_and_cosine_quantizers_work_as_described(quantizers, data):
    """get_params() carries the metric; a clone keeps it; set_params(metric=...) discards the model; cosine encodes
    normalised vectors (its reconstructions are near unit length)."""
    learn, base = data[0], data[1]
    for (method, metric), q in quantizers.items():
        assert q.get_params()["metric"] == metric
        assert q.metric == metric
        clone = type(q)(**q.get_params())
        assert clone.metric == metric and not clone.is_fitted
    q = MAKERS["pq"]("l2").fit(learn)
    q.set_params(metric="cosine")
    assert q.metric == "cosine" and not q.is_fitted
    cos = quantizers["ockm", "cosine"]
    lengths = np.linalg.norm(cos.decode(cos.encode(base[:200])), axis=1)
    assert np.all((lengths > 0.3) & (lengths < 1.5)) and abs(lengths.mean() - 1) < 0.3
    for metric in ("l2", "ip", "cosine"):
        assert MAKERS["ockm"](metric).get_params()["metric"] == metric
    assert ockstore.PQ(4).metric == "l2"


def test_padding_per_metric(indexes, data):
    """k > N: results then padding, +inf for l2 and -inf for ip and cosine, id -1; also with rerank."""
    Q, ids = data[2], data[3]
    for case in [("l2", "ockm", "f32"), ("ip", "pq", "none"), ("cosine", "ockm", "none")]:
        index, metric = indexes[case], case[0]
        pad = np.inf if metric == "l2" else -np.inf
        for rerank in (None, N + 4):
            D, I = index.search(Q[0], N + 4, rerank=rerank)
            assert D.shape == (N + 4,) and I.shape == (N + 4,)
            assert np.all(D[N:] == pad) and np.all(I[N:] == -1)
            assert np.all(np.isfinite(D[:N]))
            np.testing.assert_array_equal(np.sort(I[:N]), np.sort(ids))


# ----------------------------------------------------------------------------------------------------------- filters
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_filter_equals_index_of_the_allowed_rows(indexes, data, case):
    """A filtered search equals, bit for bit, the search of an index of only the allowed rows (same codes, norm
    terms, ids, vectors), in any row order: ADC and SDC, with and without rerank, 1 and 2 threads."""
    full = indexes[case]
    Q, ids = data[2], data[3]
    rng = np.random.default_rng(13)
    for n_rows in (1, N_ALLOWED, 700):
        rows = np.sort(rng.choice(N, size=n_rows, replace=False))
        shuffled = rng.permutation(rows)
        mask = np.zeros(N, dtype=bool)
        mask[rows] = True
        for order in (rows, shuffled):
            sub = Index(full.quantizer, full.codes[order], None if full.norms is None else full.norms[order],
                        ids[order], full.norm_encoding, vectors=full.vectors[order])
            for distance in ("adc", "sdc"):
                for k, rerank in ((1, None), (10, None), (n_rows + 2, None), (5, 20), (n_rows, n_rows + 1)):
                    for threads in (1, 2):
                        D, I = sub.search(Q, k, distance=distance, rerank=rerank, n_threads=threads)
                        for allow in (mask, ids[shuffled], list(ids[rows]) * 2):
                            D2, I2 = full.search(Q, k, distance=distance, rerank=rerank, allow=allow,
                                                 n_threads=threads)
                            np.testing.assert_array_equal(D2, D)
                            np.testing.assert_array_equal(I2, I)


def test_allow_forms(indexes, data):
    """Ids in any integer dtype, order or container give the same results as the equivalent boolean mask; all rows
    allowed equals no filter; an empty filter returns only padding; unknown and negative ids are ignored."""
    index = indexes[("l2", "ockm", "u8")]
    Q, ids = data[2], data[3]
    rng = np.random.default_rng(14)
    rows = rng.choice(N, size=N_ALLOWED, replace=False)
    mask = np.zeros(N, dtype=bool)
    mask[rows] = True
    D, I = index.search(Q, 15, allow=mask)
    wanted = ids[rows]
    for allow in (wanted, wanted[::-1].copy(), wanted.astype(np.int32), wanted.astype(np.uint64),
                  wanted.astype(np.uint32), tuple(wanted.tolist()), list(wanted) + [-3, 2**62],
                  np.concatenate([wanted, wanted, [0, 1, 999, np.iinfo(np.int64).max]]),
                  np.concatenate([wanted.astype(np.uint64), [np.iinfo(np.uint64).max]]),
                  list(mask)):
        D2, I2 = index.search(Q, 15, allow=allow)
        np.testing.assert_array_equal(D2, D)
        np.testing.assert_array_equal(I2, I)
    D0, I0 = index.search(Q, 15)
    for allow in (np.ones(N, dtype=bool), ids, ids[::-1].tolist(), np.arange(N * 5 + 1000)):
        D2, I2 = index.search(Q, 15, allow=allow)
        np.testing.assert_array_equal(D2, D0)
        np.testing.assert_array_equal(I2, I0)
    for allow in ([], np.array([], dtype=np.int64), np.zeros(N, dtype=bool), [-1, 3, 10**15], np.arange(1000)):
        for rerank in (None, 20):
            D2, I2 = index.search(Q, 15, allow=allow, rerank=rerank)
            assert np.all(I2 == -1) and np.all(D2 == np.inf)


def test_allow_without_stored_ids(quantizers, data):
    """Without stored ids the ids are the row numbers: allow by row number; ids >= N and negative ones ignored."""
    base, Q = data[1], data[2]
    for metric in ("l2", "ip", "cosine"):
        index = Index.from_vectors(quantizers["pq", metric], base, store_vectors="float32")
        assert not index.has_ids
        allow, allowed = make_allow("ids", None, N, seed=15)
        exact = exact_keys(base, Q, metric)
        approx = approx_keys(index, Q, "adc")
        scale = tolerance_scale(Q, base, metric)
        for k in (5, N_ALLOWED, N_ALLOWED + 1):
            D, I = index.search(Q, k, allow=allow, rerank=0)
            check_topk(D, I, approx, allowed, k, metric, lambda i: i, scale)
            D, I = index.search(Q, k, allow=allow, rerank=N)
            check_topk(D, I, exact, allowed, k, metric, lambda i: i, scale)


def test_allow_serves_every_query_and_one_dimensional_queries(indexes, data):
    index = indexes[("cosine", "ockm", "none")]
    Q, ids = data[2], data[3]
    allow, _ = make_allow("mask", ids, N, seed=16)
    D, I = index.search(Q, 8, allow=allow, rerank=20, distance="sdc")
    for q in range(NQ):
        d, i = index.search(Q[q], 8, allow=allow, rerank=20, distance="sdc")
        assert d.shape == (8,) and i.shape == (8,) and d.dtype == np.float32 and i.dtype == np.int64
        np.testing.assert_array_equal(d, D[q])
        np.testing.assert_array_equal(i, I[q])
    assert np.isin(I, ids[allow]).all()


def test_default_rerank_is_one_rule_for_indexes_and_collections(quantizers, data, tmp_path):
    """rerank=None: 10 * k candidates (at most max(k, N)) when the searcher has vectors to re-rank from (stored, or
    given by the caller), none otherwise; rerank=0: none. The same rule for Index, IVFIndex and Collection."""
    _, base, Q, ids = data
    q = quantizers["ockm", "l2"]
    ivf = ockstore.IVF(4, ockstore.OCKM(4, 2, 3, n_codewords=16, n_iter=2, seed=0), seed=0).fit(data[0])
    stored = Index.from_vectors(q, base, ids, store_vectors="float16")
    plain = Index.from_vectors(q, base, ids)
    stored_ivf = Index.from_vectors(ivf, base, ids, store_vectors="float32")
    for index, extra in ((stored, {}), (stored_ivf, {"n_probe": 2})):
        for k in (1, 7, 300):
            same(index.search(Q, k, **extra), index.search(Q, k, rerank=min(10 * k, N), **extra))
        assert not np.array_equal(index.search(Q, 7, **extra)[0], index.search(Q, 7, rerank=0, **extra)[0])
    for k in (1, 7):
        same(plain.search(Q, k), plain.search(Q, k, rerank=0))
        same(plain.search(Q, k, vectors=base.astype(np.float16)), stored.search(Q, k))  # given vectors re-rank
    c = ockstore.create_collection(tmp_path / "c", q, store_vectors="float16")
    c.add(base, ids)
    same(c.search(Q, 7), c.search(Q, 7, rerank=70))
    same(c.search(Q, 7), stored.search(Q, 7))
    c.close()


def same(a, b):
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
