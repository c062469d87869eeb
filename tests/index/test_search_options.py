"""Tests of the search options: the metric of a quantizer ("l2", "ip", "cosine"), exact re-ranking from stored or given
vectors (``rerank``, ``store_vectors``, ``vectors``) and filters (``allow``), checked against NumPy brute force.

Oracles (float64, over every stored row; ``Xh = quantizer.decode(index.codes)``):

* approximate values (no rerank): "l2" ||q - Xh||^2 (norm encoding "u8": ||q||^2 - 2 q.Xh + norm_levels[norms]),
  "ip" q.Xh, "cosine" q_n.Xh with q_n = q / ||q||; with SDC the query is replaced by decode(encode(q)).
* exact values (rerank): from the vectors the re-ranking reads (``index.vectors`` or ``vectors=``): "l2"
  ||q - x||^2, "ip" q.x, "cosine" q_n.x / ||x||.

Every check is made on a sort key that ascends: the distance for "l2", minus the score for "ip" and "cosine".
float32 and float64 may order near-ties differently, so a result is checked by (a) the oracle value of every returned
id agreeing with the returned value, (b) the sorted oracle values of the returned ids agreeing with the k best oracle
values of the allowed rows, (c) every allowed row clearly better than the k-th oracle value being returned and none
clearly worse; exact ties (equal float32 values) must come out by ascending id, which duplicated vectors test.

The scan runs on one thread below ``search.SMALL_SCAN_CODES`` (query, code) pairs whatever ``n_threads`` says; every
test here sets it to 0 so that ``n_threads=2`` really runs both parallel strategies (groups of queries, and one query's
blocks of codes split over threads and merged: N > 2048 codes).
"""

from __future__ import annotations

import numpy as np
import pytest

import ockstore
from ockstore import Index
from ockstore import _search_options
from ockstore import index as index_module
from ockstore import search as search_module
from ockstore.errors import FormatError

P = 16
N = 2200           # > 2048 codes (the scan's block): one query on two threads splits its codes over both
N_LEARN = 1000
NQ = 6
N_ALLOWED = 40     # rows allowed by the "ids" and "mask" filters
RERANK_EXTRA = 25  # rerank = k + RERANK_EXTRA in the main matrix
RTOL = 1e-4

# (method, metric) -> an unfitted quantizer; fitted once per module (fixture ``quantizers``).
MAKERS = {
    "pq": lambda metric: ockstore.PQ(4, n_codewords=16, metric=metric, n_iter=2, seed=0),
    "ckm": lambda metric: ockstore.CKM(4, n_codewords=16, metric=metric, n_iter=2, seed=0),
    "eckm": lambda metric: ockstore.ECKM(4, 2, n_codewords=16, metric=metric, n_iter=2, seed=0),
    "ockm": lambda metric: ockstore.OCKM(4, 2, 3, n_codewords=16, metric=metric, n_iter=2, seed=0),
}
FITTED = [("pq", "l2"), ("ckm", "l2"), ("eckm", "l2"), ("ockm", "l2"),
          ("pq", "ip"), ("ockm", "ip"), ("pq", "cosine"), ("ockm", "cosine")]

# (metric, method, norm_encoding) of the indexes of the main matrix.
CASES = [
    ("l2", "pq", "none"), ("l2", "ckm", "none"), ("l2", "eckm", "f32"), ("l2", "ockm", "f32"), ("l2", "ockm", "u8"),
    ("ip", "pq", "none"), ("ip", "ockm", "none"),
    ("cosine", "pq", "none"), ("cosine", "ockm", "none"),
]


def case_id(case):
    return "-".join(case)


# ------------------------------------------------------------------------------------------------------------ data
def mixture(n, seed, *, row_scale=True):
    """n seeded vectors around 8 centres off the origin (so that "ip", "cosine" and "l2" rank differently), each
    dimension with its own spread, each row scaled by a factor in [0.5, 2] (vectors of different lengths)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3.0, size=(8, P)) + 1.0
    X = centres[rng.integers(0, 8, size=n)] + rng.normal(size=(n, P)) * np.linspace(1.0, 0.2, P)
    if row_scale:
        X *= rng.uniform(0.5, 2.0, size=(n, 1))
    return X.astype(np.float32)


def to_uint8_values(X):
    """Integer-valued vectors in 1..255 (no zero vector), for store_vectors="uint8"."""
    return np.clip(np.round(X * 8 + 128), 1, 255).astype(np.float32)


@pytest.fixture(scope="module")
def data():
    """(learn, base, queries, ids): float32 vectors and distinct, shuffled user ids of the base."""
    learn = mixture(N_LEARN, 1)
    base = mixture(N, 2)
    queries = mixture(NQ, 3)
    ids = np.random.default_rng(4).permutation(N).astype(np.int64) * 5 + 1000
    for arr in (learn, base, queries, ids):
        arr.flags.writeable = False
    return learn, base, queries, ids


@pytest.fixture(scope="module")
def quantizers(data):
    return {(method, metric): MAKERS[method](metric).fit(data[0]) for method, metric in FITTED}


@pytest.fixture(scope="module")
def indexes(quantizers, data):
    """The indexes of CASES, with user ids and float32 stored vectors."""
    _, base, _, ids = data
    return {case: Index.from_vectors(quantizers[case[1], case[0]], base, ids, norm_encoding=case[2],
                                     store_vectors="float32")
            for case in CASES}


@pytest.fixture(autouse=True)
def parallel_scan(monkeypatch):
    """Every scan runs on the threads asked for, however small (see the module docstring)."""
    monkeypatch.setattr(search_module, "SMALL_SCAN_CODES", 0)


# ---------------------------------------------------------------------------------------------------------- oracles
def prepared_queries(Q, metric):
    Q = np.asarray(Q, dtype=np.float64)
    if metric == "cosine":
        Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    return Q


def approx_keys(index, Q, distance):
    """(nq, N) float64 sort keys of the scan (ADC / SDC values from the codes), rows in storage order."""
    q = index.quantizer
    metric = q.metric
    Xh = q.decode(index.codes).astype(np.float64)
    if distance == "sdc":
        Qv = q.decode(q.encode(Q)).astype(np.float64)  # encode normalises for cosine
    else:
        Qv = prepared_queries(Q, metric)
    if metric != "l2":
        return -(Qv @ Xh.T)
    if index.norm_encoding == "u8":
        norm_term = q.norm_levels[index.norms].astype(np.float64)
        return (Qv ** 2).sum(axis=1)[:, None] - 2 * Qv @ Xh.T + norm_term[None, :]
    return ((Qv[:, None, :] - Xh[None, :, :]) ** 2).sum(axis=-1)


def exact_keys(vectors, Q, metric):
    """(nq, N) float64 sort keys of the exact values over ``vectors`` (as the re-ranking reads them)."""
    V = np.asarray(vectors, dtype=np.float64)
    Qv = prepared_queries(Q, metric)
    if metric == "l2":
        return ((Qv[:, None, :] - V[None, :, :]) ** 2).sum(axis=-1)
    scores = Qv @ V.T
    if metric == "cosine":
        scores = scores / np.linalg.norm(V, axis=1)[None, :]
    return -scores


def keys_of(D, metric):
    """The ascending sort key of returned values."""
    D = np.asarray(D, dtype=np.float64)
    return D if metric == "l2" else -D


def tolerance_scale(Q, vectors, metric):
    """The magnitude of the values: float32 rounding errors are relative to it (atol = 1e-5 * scale)."""
    if metric == "cosine":
        return 1.0
    q = np.linalg.norm(np.asarray(Q, dtype=np.float64), axis=1).max()
    x = np.linalg.norm(np.asarray(vectors, dtype=np.float64), axis=1).max()
    return float(q * max(q, x)) if metric == "l2" else float(q * x)


class Rows:
    """id -> row of an index whose ids are distinct."""

    def __init__(self, ids):
        self.order = np.argsort(ids, kind="stable")
        self.sorted = np.asarray(ids)[self.order]

    def __call__(self, wanted):
        pos = np.searchsorted(self.sorted, wanted)
        assert np.all(self.sorted[np.minimum(pos, len(self.sorted) - 1)] == wanted), "an id that is not stored"
        return self.order[pos]


def assert_lexicographic(D, I, metric):
    """Each row ordered by (key, id); padding (+inf for l2, -inf otherwise, id -1) only after the last result."""
    pad = np.inf if metric == "l2" else -np.inf
    for d, i in zip(np.atleast_2d(D), np.atleast_2d(I)):
        real = i >= 0
        n_real = int(real.sum())
        assert real[:n_real].all() and not real[n_real:].any(), "padding before a result"
        assert np.all(d[n_real:] == pad), "padding values"
        assert np.all(np.isfinite(d[:n_real])), "a result with a non-finite value"
        key, i = keys_of(d[:n_real], metric), i[:n_real]
        ok = (key[1:] > key[:-1]) | ((key[1:] == key[:-1]) & (i[1:] > i[:-1]))
        assert ok.all(), "results not in (value, id) order"


def check_topk(D, I, keys, allowed, k, metric, rows_of, scale):
    """Results (D, I) of a batch against oracle keys (nq, N) (rows in storage order).

    ``allowed``: the allowed rows, an int array for every query or a list of one array per query. ``rows_of`` maps
    returned ids to rows (distinct ids).
    """
    nq = keys.shape[0]
    assert D.shape == (nq, k) and I.shape == (nq, k)
    assert D.dtype == np.float32 and I.dtype == np.int64
    assert_lexicographic(D, I, metric)
    atol = 1e-5 * scale
    for q in range(nq):
        rows_allowed = allowed[q] if isinstance(allowed, list) else allowed
        kk = min(k, len(rows_allowed))
        assert np.all(I[q, :kk] >= 0) and np.all(I[q, kk:] == -1), (q, kk, I[q])
        if kk == 0:
            continue
        rows = rows_of(I[q, :kk])
        assert len(np.unique(rows)) == kk, "a row returned twice"
        assert np.isin(rows, rows_allowed).all(), "a row that is not allowed"
        got = keys[q, rows]
        np.testing.assert_allclose(keys_of(D[q, :kk], metric), got, rtol=RTOL, atol=atol)
        best = np.sort(keys[q, rows_allowed])
        np.testing.assert_allclose(np.sort(got), best[:kk], rtol=RTOL, atol=atol)
        # ids: every allowed row clearly inside the top k is returned, none clearly outside is
        kth = best[kk - 1]
        margin = RTOL * abs(kth) + atol
        clearly_in = rows_allowed[keys[q, rows_allowed] < kth - margin]
        assert np.isin(clearly_in, rows).all(), "a row clearly in the top k is missing"
        assert not np.any(keys[q, rows] > kth + margin), "a row clearly outside the top k was returned"


def allowed_rows_of_candidates(I, rows_of):
    """Per query, the rows of the (non-padding) ids of a result."""
    return [rows_of(i[i >= 0]) for i in I]


def k_values(n_allowed):
    """k below, at and above the number of allowed rows (padding), and 1."""
    if n_allowed == 0:
        return [1, 4]
    return sorted({1, max(1, n_allowed - 1), n_allowed, n_allowed + 3})


def make_allow(kind, ids, n_rows, seed=0):
    """(allow argument, allowed rows) for a filter kind over an index with distinct ``ids`` (None: rows)."""
    rng = np.random.default_rng(seed)
    stored = np.arange(n_rows) if ids is None else ids
    if kind == "none":
        return None, np.arange(n_rows)
    if kind == "all":
        return np.ones(n_rows, dtype=bool), np.arange(n_rows)
    if kind == "empty":
        return [], np.arange(0)
    rows = np.sort(rng.choice(n_rows, size=N_ALLOWED, replace=False))
    if kind == "mask":
        mask = np.zeros(n_rows, dtype=bool)
        mask[rows] = True
        return mask, rows
    assert kind == "ids"
    # shuffled, with duplicates, ids that are stored nowhere and negative ids (all ignored)
    unknown = [int(stored.max()) + 1, 10**12, -1, -7]
    if ids is not None:
        unknown.append(int(ids.min()) - 1)
    wanted = np.concatenate([stored[rows], stored[rows[:10]], unknown]).astype(np.int64)
    return rng.permutation(wanted).tolist(), rows


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
        R = k + RERANK_EXTRA if rerank else None
        runs = []
        for threads in (1, 2):
            D, I = index.search(Q, k, distance=distance, rerank=R, allow=allow, n_threads=threads)
            if rerank:
                # the candidates are the scan's R best (checked against the oracle too); the results are their
                # k best by exact value
                Dc, Ic = index.search(Q, R, distance=distance, allow=allow, n_threads=threads)
                check_topk(Dc, Ic, approx, allowed, R, metric, rows_of, scale)
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
    """rerank = k returns the scan's k candidates, re-ordered by exact value with exact values."""
    _, base, Q, ids = data
    for case in CASES:
        index, metric = indexes[case], case[0]
        _, I0 = index.search(Q, 9)
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
                m.setattr(_search_options, "RERANK_STEP_BYTES", 1)
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
    one, so the recall of the re-ranked top 10 never falls as rerank grows, and rerank = N finds all of them."""
    Q, ids = data[2], data[3]
    rows_of = Rows(ids)
    for case in [("l2", "pq", "none"), ("l2", "ockm", "u8"), ("ip", "pq", "none"), ("cosine", "ockm", "none")]:
        index, metric = indexes[case], case[0]
        exact = exact_keys(index.vectors, Q, metric)
        true = np.argsort(exact, axis=1)[:, :10]
        recalls = []
        for rerank in (None, 10, 50, 200, 1000, N):
            _, I = index.search(Q, 10, rerank=rerank)
            recalls.append(np.mean([np.isin(true[q], rows_of(I[q])).mean() for q in range(NQ)]))
        assert recalls[1] >= recalls[0] - 1e-12
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
            D, I = index.search(Q, k, allow=allow)
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


# ------------------------------------------------------------------------------------------------------------ files
FILE_CASES = [("l2", "ockm", "u8"), ("l2", "pq", "none"), ("l2", "eckm", "f32"), ("ip", "ockm", "none"),
              ("cosine", "pq", "none")]
N_FILE = 500


def file_data(data, store):
    base, Q = data[1][:N_FILE], data[2]
    if store == "uint8":
        return to_uint8_values(base), to_uint8_values(Q)
    return base, Q


@pytest.mark.parametrize("store", [None, "float16", "float32", "uint8"])
@pytest.mark.parametrize("case", FILE_CASES, ids=case_id)
def test_file_round_trip(tmp_path, quantizers, data, case, store):
    """I15-I18 (docs/FORMAT.md): build_index, IndexWriter (chunks) and Index.save write the same index; open_index
    gives the same searches as the in-memory index (every option), the same stored vectors, the metric,
    store_vectors, format 1.1 exactly when the metric is not "l2" or vectors are stored."""
    metric, method, enc = case
    q = quantizers[method, metric]
    X, Q = file_data(data, store)
    ids = data[3][:N_FILE]
    memory = Index.from_vectors(q, X, ids, norm_encoding=enc, store_vectors=store)
    built, written, saved = tmp_path / "built.ock", tmp_path / "written.ock", tmp_path / "saved.ock"
    ockstore.build_index(built, q, X, ids, norm_encoding=enc, store_vectors=store, chunk_size=128)
    with ockstore.IndexWriter(written, q, norm_encoding=enc, store_vectors=store) as w:
        for start in (0, 7, 300):
            stop = {0: 7, 7: 300, 300: N_FILE}[start]
            w.add(X[start:stop], ids[start:stop])
        w.add(X[:0], ids[:0])
        assert w.store_vectors == store
    memory.save(saved)
    assert built.read_bytes() == written.read_bytes() == saved.read_bytes()
    version = "1.1" if metric != "l2" or store is not None else "1.0"
    assert ockstore.file_info(built)["format_version"] == version
    assert ockstore.file_info(built)["metric"] == metric
    assert ockstore.file_info(built)["store_vectors"] == store
    loaded = ockstore.load_quantizer(built)
    assert loaded.metric == metric and loaded.get_params()["metric"] == metric and loaded == q
    allow, _ = make_allow("ids", ids, N_FILE, seed=17)
    with ockstore.open_index(built) as index:
        index.verify()
        info = index.info()
        assert info["metric"] == metric and info["store_vectors"] == store and info["format_version"] == version
        assert index.metric == metric and index.store_vectors == store and index.norm_encoding == memory.norm_encoding
        assert memory.info()["metric"] == metric and memory.info()["store_vectors"] == store
        if store is None:
            assert index.vectors is None and memory.vectors is None
        else:
            assert index.vectors.dtype == np.dtype(store) and memory.vectors.dtype == np.dtype(store)
            np.testing.assert_array_equal(index.vectors, memory.vectors)
            np.testing.assert_array_equal(index.vectors, X.astype(store))
        np.testing.assert_array_equal(index.codes, memory.codes)
        for distance in ("adc", "sdc"):
            for options in ({}, {"allow": allow}, {"allow": np.arange(N_FILE) % 3 == 0}):
                reranks = [None] if store is None else [None, 12, N_FILE]
                for rerank in reranks:
                    for threads in (1, 2):
                        D, I = index.search(Q, 10, distance=distance, rerank=rerank, n_threads=threads, **options)
                        D0, I0 = memory.search(Q, 10, distance=distance, rerank=rerank, n_threads=threads,
                                               **options)
                        np.testing.assert_array_equal(D, D0)
                        np.testing.assert_array_equal(I, I0)
        if store is None:  # vectors given at search time re-rank a file without them
            D, I = index.search(Q, 10, rerank=40, vectors=X)
            D0, I0 = Index.from_vectors(q, X, ids, norm_encoding=enc, store_vectors="float32").search(Q, 10, rerank=40)
            np.testing.assert_array_equal(D, D0)
            np.testing.assert_array_equal(I, I0)


def test_quantizer_file_keeps_the_metric(tmp_path, quantizers):
    """I15, I18: a quantizer file keeps its metric; it is format 1.1 exactly when the metric is not "l2"."""
    for (method, metric), q in quantizers.items():
        path = tmp_path / f"{method}-{metric}.ockq"
        ockstore.save_quantizer(path, q)
        loaded = ockstore.load_quantizer(path)
        assert loaded == q and loaded.metric == metric
        assert ockstore.file_info(path)["metric"] == metric
        assert ockstore.file_info(path)["format_version"] == ("1.0" if metric == "l2" else "1.1")


def test_empty_index_with_stored_vectors(tmp_path, quantizers, data):
    q = quantizers["pq", "cosine"]
    path = tmp_path / "empty.ock"
    ockstore.build_index(path, q, np.empty((0, P), dtype=np.float32), store_vectors="float16")
    with ockstore.open_index(path) as index:
        assert len(index) == 0 and index.vectors.shape == (0, P) and index.vectors.dtype == np.float16
        index.verify()
        D, I = index.search(data[2], 3, rerank=5, allow=[1, 2])
        assert np.all(I == -1) and np.all(D == -np.inf)


# ---------------------------------------------------------------------------------------------- stored vector values
BUILDERS = ["from_vectors", "writer", "build_index"]


def build_with(builder, tmp_path, q, X, store, **kwargs):
    """Build an index of X storing vectors in ``store`` with the given builder (the call that must refuse X)."""
    if builder == "from_vectors":
        return Index.from_vectors(q, X, store_vectors=store, **kwargs)
    path = tmp_path / f"{builder}.ock"
    if builder == "build_index":
        return ockstore.build_index(path, q, X, store_vectors=store, **kwargs)
    with ockstore.IndexWriter(path, q, store_vectors=store) as w:
        w.add(X)


@pytest.mark.parametrize("builder", BUILDERS)
def test_uint8_store_refuses_non_byte_values(tmp_path, quantizers, data, builder):
    q = quantizers["pq", "l2"]
    good = to_uint8_values(data[1][:20])
    for bad in (3.5, 300, -1, 255.5, 256):
        X = good.astype(np.float64)
        X[3, 5] = bad
        with pytest.raises(ValueError, match=r"store_vectors='uint8'.*\bX row 3\b"):
            build_with(builder, tmp_path, q, X, "uint8")
    for bad in (300, -1):  # integer dtypes too
        X = good.astype(np.int64)
        X[4, 0] = bad
        with pytest.raises(ValueError, match=r"store_vectors='uint8'.*\bX row 4\b"):
            build_with(builder, tmp_path, q, X, "uint8")
    assert not list(tmp_path.iterdir()), "a refused build left a file"
    # the limits themselves are fine, in any dtype
    X = good.copy()
    X[0, :2] = (0, 255)
    for arr in (X, X.astype(np.float64), X.astype(np.int16), X.astype(np.uint8)):
        index = Index.from_vectors(q, arr, store_vectors="uint8")
        np.testing.assert_array_equal(index.vectors, X.astype(np.uint8))


@pytest.mark.parametrize("builder", BUILDERS)
def test_float16_store_refuses_values_beyond_its_range(tmp_path, quantizers, data, builder):
    q = quantizers["pq", "l2"]
    for bad in (1e6, -1e6, 70000.0):
        X = data[1][:20].astype(np.float64)
        X[6, 2] = bad
        with pytest.raises(ValueError, match=r"float16.*\bX row 6\b"):
            build_with(builder, tmp_path, q, X, "float16")
    X = data[1][:20].astype(np.float64)
    X[1, 1] = 65504.0
    index = Index.from_vectors(q, X, store_vectors="float16")
    assert index.vectors[1, 1] == np.float16(65504.0)
    assert np.all(np.isfinite(index.vectors))


@pytest.mark.parametrize("store", [None, "float16", "float32", "uint8"])
@pytest.mark.parametrize("builder", BUILDERS)
def test_non_finite_input_refused(tmp_path, quantizers, data, builder, store):
    q = quantizers["ockm", "l2"]
    for bad in (np.nan, np.inf, -np.inf):
        X = (to_uint8_values(data[1][:20]) if store == "uint8" else data[1][:20]).astype(np.float64)
        X[2, 3] = bad
        with pytest.raises(ValueError, match=r"\bX\b.*(NaN|infinite)"):
            build_with(builder, tmp_path, q, X, store)
    assert not list(tmp_path.iterdir())


def test_writer_refused_chunk_appends_nothing(tmp_path, quantizers, data):
    """A chunk refused for its stored values leaves the writer as it was: later chunks build a consistent file."""
    q = quantizers["ockm", "ip"]
    X = to_uint8_values(data[1][:30])
    path = tmp_path / "w.ock"
    with ockstore.IndexWriter(path, q, store_vectors="uint8") as w:
        w.add(X[:10], np.arange(10))
        bad = X[10:20].copy()
        bad[9, 0] = 256
        with pytest.raises(ValueError, match="uint8"):
            w.add(bad, np.arange(10, 20))
        bad[9, 0] = np.nan
        with pytest.raises(ValueError, match="NaN"):
            w.add(bad, np.arange(10, 20))
        w.add(X[20:30], np.arange(20, 30))
        assert w.ntotal == 20
    with ockstore.open_index(path) as index:
        index.verify()
        np.testing.assert_array_equal(index.vectors, np.concatenate([X[:10], X[20:30]]).astype(np.uint8))
        np.testing.assert_array_equal(index.ids, np.r_[0:10, 20:30])
        np.testing.assert_array_equal(index.codes, q.encode(np.concatenate([X[:10], X[20:30]])))


def test_verify_and_rerank_report_non_finite_stored_vectors(quantizers, data):
    """verify() checks that stored float vectors are finite (the constructor does not read them); re-ranking from such
    a vector refuses it, naming its row."""
    q = quantizers["pq", "l2"]
    base, Q = data[1][:100], data[2]
    good = Index.from_vectors(q, base, store_vectors="float16")
    good.verify()
    for dtype in (np.float16, np.float32):
        vectors = base.astype(dtype)
        vectors[42, 1] = np.inf if dtype == np.float16 else np.nan
        index = Index(q, good.codes, None, None, "none", vectors=vectors)
        with pytest.raises(FormatError, match="vectors"):
            index.verify()
        with pytest.raises(FormatError, match="in-memory index.*non-finite values: section 'vectors': row 42"):
            index.search(Q, 5, rerank=100)  # the index's own vectors: not an argument of the caller's
        index.search(Q, 5)  # the scan does not read the vectors
    ints = Index(q, good.codes, None, None, "none", vectors=np.full((100, P), 255, dtype=np.uint8))
    ints.verify()
    bad_given = base.astype(np.float64)
    bad_given[7, 0] = np.nan
    with pytest.raises(ValueError, match="vectors row 7"):
        good.search(Q, 5, rerank=100, vectors=bad_given)


@pytest.mark.parametrize("metric", ["l2", "cosine"])
@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_rerank_refuses_given_vectors_beyond_the_magnitude_limit(quantizers, data, metric, kind):
    """docs/ARCHITECTURE.md "Conventions": values beyond +-1e15 raise ValueError, for ``vectors`` given to a re-ranking
    search as for Q and X (they would overflow the float32 arithmetic: +inf distances, cosine 0); a row of values
    too large for float32 too. The row is named; values at the limit are accepted."""
    q = quantizers["pq", metric]
    base, Q = data[1][:100], data[2]
    if kind == "ivf":
        q = ockstore.IVF(2, ockstore.PQ(4, n_codewords=16, n_iter=2, metric=metric, seed=0), n_iter=2,
                         seed=0).fit(data[0])
    index = Index.from_vectors(q, base)
    options = {"n_probe": 2} if kind == "ivf" else {}
    for value, row in ((1e20, 7), (-2e15, 31), (1e40, 0)):
        given = base.astype(np.float64)
        given[row, 3] = value
        with pytest.raises(ValueError, match=f"vectors row {row} ") as info:
            index.search(Q, 5, rerank=100, vectors=given, **options)
        assert not isinstance(info.value, FormatError)
    given = base.astype(np.float64)
    given[7, 3] = 1e15
    D, _ = index.search(Q, 5, rerank=100, vectors=given, **options)
    assert np.isfinite(D).all()


def test_cosine_rerank_refuses_zero_given_vector(quantizers, data):
    q = quantizers["pq", "cosine"]
    base, Q = data[1][:100], data[2]
    index = Index.from_vectors(q, base)
    given = base.copy()
    given[13] = 0
    with pytest.raises(ValueError, match="vectors row 13"):
        index.search(Q, 5, rerank=100, vectors=given)


def test_constructor_vectors_checks(quantizers, data):
    q = quantizers["pq", "l2"]
    index = Index.from_vectors(q, data[1][:50], store_vectors="float32")
    for bad in (index.vectors.astype(np.float64), index.vectors.astype(np.int32), index.vectors.tolist()):
        with pytest.raises(TypeError, match="vectors"):
            Index(q, index.codes, None, None, "none", vectors=bad)
    for bad in (index.vectors[:49], index.vectors[:, :P - 1], index.vectors[0]):
        with pytest.raises(ValueError, match="vectors"):
            Index(q, index.codes, None, None, "none", vectors=bad)
    view = Index(q, index.codes, None, None, "none", vectors=index.vectors)
    assert view.vectors is index.vectors and view.store_vectors == "float32"


# ------------------------------------------------------------------------------------------------------- bad input
def test_unknown_metric_refused(quantizers):
    for make in (lambda m: ockstore.PQ(4, metric=m), lambda m: ockstore.CKM(4, metric=m),
                 lambda m: ockstore.ECKM(4, 2, metric=m), lambda m: ockstore.OCKM(4, 2, 3, metric=m)):
        for bad in ("euclidean", "L2", "dot", "", None, 2):
            with pytest.raises(ValueError, match="metric"):
                make(bad)
    with pytest.raises(ValueError, match="metric"):
        ockstore.PQ(4).set_params(metric="manhattan")


def test_cosine_zero_vectors_refused(tmp_path, quantizers, data):
    learn, base, Q = data[0], data[1], data[2]
    q = quantizers["ockm", "cosine"]
    X = learn.copy()
    X[17] = 0
    with pytest.raises(ValueError, match=r"\bX row 17\b.*zero"):
        MAKERS["pq"]("cosine").fit(X)
    with pytest.raises(ValueError, match=r"\bX row 17\b.*zero"):
        q.encode(X)
    with pytest.raises(ValueError, match=r"\bX row 17\b.*zero"):
        Index.from_vectors(q, X)
    with pytest.raises(ValueError, match=r"\bX row 17\b.*zero"):
        ockstore.build_index(tmp_path / "a.ock", q, X)
    with pytest.raises(ValueError, match=r"\bX row 17\b.*zero"), ockstore.IndexWriter(tmp_path / "b.ock", q) as w:
        w.add(X)
    assert not list(tmp_path.iterdir())
    index = Index.from_vectors(q, base[:100], store_vectors="float32")
    Qz = Q.copy()
    Qz[4] = 0
    for options in ({}, {"distance": "sdc"}, {"rerank": 20}, {"allow": [1, 2]}):
        with pytest.raises(ValueError, match=r"\bQ row 4\b.*zero"):
            index.search(Qz, 5, **options)
    with pytest.raises(ValueError, match=r"\bQ row 0\b.*zero"):
        index.search(np.zeros(P), 5)
    # l2 and ip accept zero vectors
    for metric in ("l2", "ip"):
        other = Index.from_vectors(quantizers["pq", metric], X[:50], store_vectors="float32")
        _, I = other.search(np.zeros((1, P)), 3, rerank=10)
        assert np.all(I >= 0)


def test_cosine_zero_vector_named_by_its_row_in_the_whole_input(quantizers, data, monkeypatch):
    """A zero vector beyond the first step of an encode is named by its row in X; so is a refused stored value
    beyond the first chunk of from_vectors."""
    from ockstore import quantizers as quantizers_module

    monkeypatch.setattr(quantizers_module, "ROWS_PER_STEP", 1000)
    monkeypatch.setattr(index_module, "BUILD_CHUNK", 1000)
    q = quantizers["pq", "cosine"]
    X = data[1].copy()
    X[N - 5] = 0
    with pytest.raises(ValueError, match=rf"\bX row {N - 5}\b"):
        q.encode(X)
    Y = to_uint8_values(data[1])
    Y[N - 5, 1] = 0.5
    with pytest.raises(ValueError, match=rf"\bX row {N - 5}\b"):
        Index.from_vectors(q, Y, store_vectors="uint8")


@pytest.mark.parametrize("builder", ["from_vectors", "build_index"])
def test_zero_vector_named_by_its_row_in_x_beyond_the_first_chunk(tmp_path, quantizers, data, monkeypatch, builder):
    monkeypatch.setattr(index_module, "BUILD_CHUNK", 1000)
    q = quantizers["pq", "cosine"]
    X = data[1].copy()
    X[N - 5] = 0
    with pytest.raises(ValueError, match=rf"\bX row {N - 5}\b"):
        if builder == "from_vectors":
            Index.from_vectors(q, X)
        else:
            ockstore.build_index(tmp_path / "c.ock", q, X, chunk_size=1000)


def test_build_index_names_refused_stored_value_by_its_row_in_x(tmp_path, quantizers, data):
    q = quantizers["pq", "l2"]
    X = to_uint8_values(data[1][:300]).astype(np.float64)
    X[250, 0] = 3.5
    with pytest.raises(ValueError, match=r"\bX row 250\b"):
        ockstore.build_index(tmp_path / "d.ock", q, X, store_vectors="uint8", chunk_size=100)


def test_search_option_errors(indexes, data):
    index = indexes[("l2", "ockm", "u8")]
    plain = Index.from_vectors(index.quantizer, data[1][:300], norm_encoding="u8")
    Q = data[2]
    n = len(plain)
    # rerank
    with pytest.raises(ValueError, match="rerank"):
        index.search(Q, 10, rerank=9)
    with pytest.raises(ValueError, match="rerank"):
        index.search(Q, 10, rerank=0)
    for bad in (20.0, "20", True):
        with pytest.raises(TypeError, match="rerank"):
            index.search(Q, 10, rerank=bad)
    with pytest.raises(ValueError, match="rerank"):
        plain.search(Q, 10, rerank=20)
    # vectors
    base = data[1][:300]
    for bad in (base[:n - 1], base[:, :P - 1], np.concatenate([base, base[:1]]), base[0], base[None], base.T):
        with pytest.raises(ValueError, match="vectors"):
            plain.search(Q, 10, rerank=20, vectors=bad)
    with pytest.raises(TypeError, match="vectors"):
        plain.search(Q, 10, rerank=20, vectors=base.astype(str))
    with pytest.raises(TypeError, match="vectors"):
        plain.search(Q, 10, rerank=20, vectors=base.astype(complex))
    # allow
    for bad in (np.ones(n - 1, dtype=bool), np.ones(n + 1, dtype=bool), np.ones((n, 1), dtype=bool),
                [True] * (n + 64)):
        with pytest.raises(ValueError, match="allow"):
            plain.search(Q, 10, allow=bad)
    for bad in (np.array([1.0, 2.0]), [0.5, 3], np.ones(n), np.array(["1", "2"])):
        with pytest.raises(TypeError, match="allow"):
            plain.search(Q, 10, allow=bad)
    for bad in (np.array([[1, 2], [3, 4]]), np.array(5)):
        with pytest.raises(ValueError, match="allow"):
            plain.search(Q, 10, allow=bad)
    # the options do not hide the usual checks
    with pytest.raises(ValueError, match="distance"):
        index.search(Q, 10, distance="exact", rerank=20)
    with pytest.raises(ValueError, match="Q"):
        index.search(Q[:, :P - 1], 10, rerank=20)


@pytest.mark.parametrize("metric", ["ip", "cosine"])
def test_norm_encoding_with_inner_product_metrics_refused(tmp_path, quantizers, data, metric):
    """"ip" and "cosine" need no norm term: only "none" (or None, which means it) is accepted."""
    base = data[1][:50]
    for method in ("pq", "ockm"):
        q = quantizers[method, metric]
        for enc in ("u8", "f32"):
            with pytest.raises(ValueError, match="norm_encoding"):
                Index.from_vectors(q, base, norm_encoding=enc)
            with pytest.raises(ValueError, match="norm_encoding"):
                ockstore.IndexWriter(tmp_path / "x.ock", q, norm_encoding=enc)
            with pytest.raises(ValueError, match="norm_encoding"):
                ockstore.build_index(tmp_path / "y.ock", q, base, norm_encoding=enc)
            codes = q.encode(base)
            norms = np.zeros(50, dtype=np.float32 if enc == "f32" else np.uint8)
            with pytest.raises(ValueError, match="norm_encoding"):
                Index(q, codes, norms, None, enc)
        for enc in (None, "none"):
            index = Index.from_vectors(q, base, norm_encoding=enc)
            assert index.norm_encoding == "none" and index.norms is None
            assert index.bytes_per_vector == q.code_size
    assert not list(tmp_path.iterdir())


def test_norm_encodings_of_l2(quantizers, data):
    base = data[1][:50]
    for method in ("pq", "ckm"):
        q = quantizers[method, "l2"]
        assert Index.from_vectors(q, base).norm_encoding == "none"
        for enc in ("u8", "f32"):
            with pytest.raises(ValueError, match="norm_encoding"):
                Index.from_vectors(q, base, norm_encoding=enc)
    for method in ("eckm", "ockm"):
        q = quantizers[method, "l2"]
        with pytest.raises(ValueError, match="norm_encoding"):
            Index.from_vectors(q, base, norm_encoding="none")
        for enc in ("u8", "f32"):
            assert Index.from_vectors(q, base, norm_encoding=enc).norm_encoding == enc


def test_store_vectors_choice_refused(tmp_path, quantizers, data):
    q = quantizers["pq", "l2"]
    for bad in ("float64", "int8", "f32", "", True, np.float32):
        with pytest.raises(ValueError, match="store_vectors"):
            Index.from_vectors(q, data[1][:10], store_vectors=bad)
        with pytest.raises(ValueError, match="store_vectors"):
            ockstore.IndexWriter(tmp_path / "s.ock", q, store_vectors=bad)
        with pytest.raises(ValueError, match="store_vectors"):
            ockstore.build_index(tmp_path / "s.ock", q, data[1][:10], store_vectors=bad)
    assert not list(tmp_path.iterdir())
