"""The data, models, fixtures and NumPy oracles of the inverted-file tests (tests/quantizers/test_ivf_quantizer.py,
tests/index/test_ivf_index.py).

Oracles, in float64 (``reference.decode`` for R z_hat; nothing shared with the package):

* reconstruction of row i of list l: x_hat_i = c_l + R z_hat_i; the probed lists of a query q: the n_probe smallest
  ||q - c_l||^2 (metrics "l2", "cosine") or largest q.c_l ("ip"), ties by list id;
* values: "l2" ||q - x_hat||^2 (norm encoding "u8": ||q||^2 - 2 q.x_hat + norm_levels[norm code]), "ip" q.x_hat,
  "cosine" q_n.x_hat with q_n = q / ||q||; SDC replaces q by decode(*encode(q)).

The fixtures (``data``, ``models``, ``indexes``) are imported by the test modules that use them.
"""

from __future__ import annotations

import numpy as np
import pytest

import ockstore
import reference
from helpers import seeded_dataset
from ockstore import IVF, Index

P = 12
N_LEARN = 1500
N = 2600
NQ = 7
L = 12

FINE = {
    "pq": lambda metric: ockstore.PQ(4, n_codewords=16, metric=metric, n_iter=3, seed=0),
    "ckm": lambda metric: ockstore.CKM(3, n_codewords=16, metric=metric, n_iter=3, seed=0),
    "eckm": lambda metric: ockstore.ECKM(3, 2, n_codewords=16, metric=metric, n_iter=3, seed=0),
    "ockm": lambda metric: ockstore.OCKM(3, 2, 3, n_codewords=16, metric=metric, n_iter=3, seed=0),
}
# (metric, fine method, norm encoding) of the indexes searched
CASES = [("l2", "ockm", "u8"), ("l2", "ockm", "f32"), ("l2", "pq", "u8"), ("l2", "ckm", "f32"), ("l2", "eckm", "u8"),
         ("ip", "ockm", "none"), ("ip", "pq", "none"), ("cosine", "ockm", "none"), ("cosine", "ckm", "none"),
         ("cosine", "ockm", "u8"), ("cosine", "pq", "f32")]


def case_id(case):
    return "-".join(case)


def clusters(n, seed, which=range(8)):
    """n seeded vectors around some of 8 fixed centres (off the origin, of different lengths, so that the metrics
    rank differently), each dimension with its own spread."""
    centres = np.random.default_rng(100).normal(scale=4.0, size=(8, P)) + 1.0
    rng = np.random.default_rng(seed)
    X = centres[rng.choice(list(which), size=n)] + rng.normal(size=(n, P)) * np.linspace(1.5, 0.3, P)
    return (X * rng.uniform(0.6, 1.6, size=(n, 1))).astype(np.float32)


@pytest.fixture(scope="module")
def data():
    return seeded_dataset(clusters, N_LEARN, N, NQ, 3, 500)


@pytest.fixture(scope="module")
def models(data):
    """(metric, method) -> fitted IVF of L lists."""
    wanted = {(metric, method) for metric, method, _ in CASES}
    return {key: IVF(L, FINE[key[1]](key[0]), n_iter=6, seed=3).fit(data[0]) for key in sorted(wanted)}


@pytest.fixture(scope="module")
def indexes(models, data):
    _, base, _, ids = data
    return {case: Index.from_vectors(models[case[0], case[1]], base, ids, norm_encoding=case[2],
                                     store_vectors="float32") for case in CASES}


# ---------------------------------------------------------------------------------------------------------- oracles
def reconstruct(ivf, lists, codes):
    """(n, P) float64: c_l + R z_hat."""
    q = ivf.quantizer
    residual = reference.decode(codes, q.rotation, q.codebooks, dim=ivf.dim)
    return ivf.centroids[np.asarray(lists)].astype(np.float64) + residual


def prepared(Q, metric):
    Q = np.asarray(Q, dtype=np.float64)
    return Q / np.linalg.norm(Q, axis=1, keepdims=True) if metric == "cosine" else Q


def query_vectors(index, Q, distance):
    """The vectors the scan compares with, float64: the (normalised) queries, or for SDC their reconstructions."""
    ivf = index.quantizer
    if distance == "sdc":  # encode normalises for cosine; the reconstruction is scaled to unit length again
        return prepared(ivf.decode(*ivf.encode(Q)).astype(np.float64), ivf.metric)
    return prepared(Q, ivf.metric)


def list_keys(ivf, Qv):
    """(nq, L) float64: the ranking keys of the lists (smaller is probed first)."""
    C = ivf.centroids.astype(np.float64)
    if ivf.metric == "ip":
        return -(Qv @ C.T)
    return (C * C).sum(axis=1)[None, :] - 2 * Qv @ C.T


def approx_keys(index, Qv):
    """(nq, N) float64 sort keys of the scan over every row (rows in file order)."""
    ivf = index.quantizer
    Xh = reconstruct(ivf, index.row_lists(), index.codes)
    if ivf.metric == "cosine" and index.norm_encoding != "none":  # scores / ||x_hat|| from the stored norm term
        terms = (np.asarray(index.norms, dtype=np.float64) if index.norm_encoding == "f32"
                 else ivf.norm_levels[index.norms].astype(np.float64))
        return -(Qv @ Xh.T) / np.sqrt(terms)[None, :]
    if ivf.metric != "l2":
        return -(Qv @ Xh.T)
    if index.norm_encoding == "u8":
        norm_term = ivf.norm_levels[index.norms].astype(np.float64)
        return (Qv ** 2).sum(axis=1)[:, None] - 2 * Qv @ Xh.T + norm_term[None, :]
    return ((Qv[:, None, :] - Xh[None, :, :]) ** 2).sum(axis=-1)


def checked_probe(ivf, Q32, Qv, n_probe):
    """The lists the kernel probes (ivf._probe), checked against the oracle ranking: every list clearly among the
    n_probe best is probed, none clearly outside; returned best first (ties by list id)."""
    lists, terms = ivf._probe(np.ascontiguousarray(Q32, dtype=np.float32), n_probe)
    keys = list_keys(ivf, Qv)
    scale = 1e-5 * (1 + np.abs(keys).max())
    for q in range(keys.shape[0]):
        got = keys[q, lists[q]]
        assert len(set(lists[q].tolist())) == n_probe
        assert np.all(np.diff(got) >= -scale), "probed lists not best first"
        kth = np.sort(keys[q])[n_probe - 1]
        assert np.isin(np.flatnonzero(keys[q] < kth - scale), lists[q]).all(), "a clearly nearer list not probed"
        assert not np.any(got > kth + scale), "a clearly farther list probed"
        # the list terms: -2 q.c_l (l2: of the distance) or -q.c_l (ip, cosine: of minus the score)
        dots = Qv[q] @ ivf.centroids[lists[q]].astype(np.float64).T
        np.testing.assert_allclose(terms[q], -2 * dots if ivf.metric == "l2" else -dots, rtol=1e-5, atol=scale)
    return lists


def probed_rows(index, lists):
    """Per query, the rows of its probed lists."""
    offsets = index.list_offsets
    return [np.concatenate([np.arange(offsets[l], offsets[l + 1]) for l in row]).astype(np.int64) for row in lists]


def index_lists(index, codes=None):
    """The _kernels.IvfLists of an index's one part (a flat index: one list of every row); ``codes``: one-byte words
    to scan in place of its own (the 8-bit scan of the same words, the oracle of the fast scan)."""
    from ockstore._kernels import IvfLists
    from ockstore.search.codes import ByteCodes

    rows = index._code_rows(None)
    store = index._codes if codes is None else ByteCodes(np.ascontiguousarray(codes))
    offsets = (np.asarray(index.list_offsets, dtype=np.int64) if hasattr(index, "list_offsets")
               else np.array([0, len(index)], dtype=np.int64))
    part = store.part_rows(rows, offsets, None)
    model = index.quantizer
    if hasattr(model, "n_lists"):
        panels, c_sqnorms, kind, term_factor = model._probing()
    else:
        panels = c_sqnorms = None
        kind, term_factor = 0, 0.0
    return IvfLists(index._query_tables().model, panels, c_sqnorms, kind, term_factor, [part])


def search_lists(lists, Q, k, n_probe, *, allow=None, rerank=None, by_bound=False, n_threads=1, out_ids=False):
    """(D, rows) of _kernels.ivf_search over ``lists`` (``rerank``: (StoredVectors, R) re-ranked inside the kernel;
    ``allow``: one bitmap or None per part)."""
    from ockstore import _kernels

    D = np.empty((len(Q), k), dtype=np.float32)
    R = np.empty((len(Q), k), dtype=np.int64)
    if rerank is None:
        _kernels.ivf_search(lists, Q, n_probe, allow, D, R, n_threads, None, 0, None, None, by_bound, out_ids)
    else:
        stored, width = rerank
        flags = np.empty(len(Q), dtype=np.int32)
        _kernels.ivf_search(lists, Q, n_probe, allow, D, R, n_threads, stored.source, width, None, flags, True,
                            out_ids)
        assert not flags.any()
    return D, R
