"""The data, quantizers, fixtures and NumPy oracles of the search-option tests (tests/index/test_search_options.py,
test_search_option_inputs.py; the oracle pieces also serve tests/index/test_ivf_index.py).

Oracles (float64, over every stored row; ``Xh = quantizer.decode(index.codes)``):

* approximate values (no rerank): "l2" ||q - Xh||^2 (norm encoding "u8": ||q||^2 - 2 q.Xh + norm_levels[norms]),
  "ip" q.Xh, "cosine" q_n.Xh / ||Xh|| with q_n = q / ||q|| and ||Xh|| from the stored norm term (sqrt of the "f32"
  term or of norm_levels[norms] for "u8"; with norm encoding "none", q_n.Xh: files before format 1.3); with SDC the
  query is replaced by decode(encode(q)) (for cosine scaled to unit length).
* exact values (rerank): from the vectors the re-ranking reads (``index.vectors`` or ``vectors=``): "l2"
  ||q - x||^2, "ip" q.x, "cosine" q_n.x / ||x||.

Every check is made on a sort key that ascends: the distance for "l2", minus the score for "ip" and "cosine".
float32 and float64 may order near-ties differently, so a result is checked by (a) the oracle value of every returned
id agreeing with the returned value, (b) the sorted oracle values of the returned ids agreeing with the k best oracle
values of the allowed rows, (c) every allowed row clearly better than the k-th oracle value being returned and none
clearly worse; exact ties (equal float32 values) must come out by ascending id, which duplicated vectors test.

The fixtures (``data``, ``quantizers``, ``indexes``) are imported by the test modules that use them.
"""

from __future__ import annotations

import numpy as np
import pytest

import ockstore
from helpers import seeded_dataset
from ockstore import Index

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
    ("cosine", "pq", "none"), ("cosine", "ockm", "none"), ("cosine", "pq", "u8"), ("cosine", "ockm", "u8"),
    ("cosine", "ockm", "f32"),
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
    """(learn, base, queries, ids): float32 vectors (read-only) and distinct, shuffled user ids of the base."""
    return seeded_dataset(mixture, N_LEARN, N, NQ, 5, 1000)


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
        if metric == "cosine":
            Qv = Qv / np.linalg.norm(Qv, axis=1, keepdims=True)
    else:
        Qv = prepared_queries(Q, metric)
    if metric == "cosine" and index.norm_encoding != "none":
        return -(Qv @ Xh.T) / np.sqrt(stored_norm_terms(index))[None, :]
    if metric != "l2":
        return -(Qv @ Xh.T)
    if index.norm_encoding == "u8":
        norm_term = q.norm_levels[index.norms].astype(np.float64)
        return (Qv ** 2).sum(axis=1)[:, None] - 2 * Qv @ Xh.T + norm_term[None, :]
    return ((Qv[:, None, :] - Xh[None, :, :]) ** 2).sum(axis=-1)


def stored_norm_terms(index):
    """||x_hat||^2 of every row as the index stores it (float64): the "f32" terms, or the levels of the "u8" codes."""
    if index.norm_encoding == "f32":
        return np.asarray(index.norms, dtype=np.float64)
    return np.asarray(index.quantizer.norm_levels, dtype=np.float64)[index.norms]


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
