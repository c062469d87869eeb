"""Tests of the inverted file (ockstore.IVF, IVFIndex) against NumPy: the model (coarse k-means, fine quantizer on
residuals, reconstruction c_l + R z_hat, norm terms), and search by probing lists (every metric, ADC and SDC, norm
encodings, n_probe, empty lists, padding, ids, filters, re-ranking, threads) against brute force over the
reconstructions, restricted to the probed lists. Files: tests/test_ivf_file.py.

Oracles, in float64 (``reference.decode`` for R z_hat; nothing shared with the package):

* reconstruction of row i of list l: x_hat_i = c_l + R z_hat_i; the probed lists of a query q: the n_probe smallest
  ||q - c_l||^2 (metrics "l2", "cosine") or largest q.c_l ("ip"), ties by list id;
* values: "l2" ||q - x_hat||^2 (norm encoding "u8": ||q||^2 - 2 q.x_hat + norm_levels[norm code]), "ip" q.x_hat,
  "cosine" q_n.x_hat with q_n = q / ||q||; SDC replaces q by decode(*encode(q)).

Results are checked with ``test_search_options.check_topk`` (values of the returned ids, the k best values of the
allowed rows, nothing clearly better missing): float32 and float64 may order near-ties differently.
"""

from __future__ import annotations

import numpy as np
import pytest

import ockstore
import reference
from ockstore import IVF, Index, IVFIndex
from ockstore.errors import NotFittedError
from ockstore.ivf import MAX_LISTS, default_n_probe
from test_search_options import Rows, check_topk, keys_of, make_allow, tolerance_scale

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
         ("ip", "ockm", "none"), ("ip", "pq", "none"), ("cosine", "ockm", "none"), ("cosine", "ckm", "none")]


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
    learn, base, queries = clusters(N_LEARN, 1), clusters(N, 2), clusters(NQ, 3)
    ids = np.random.default_rng(4).permutation(N).astype(np.int64) * 3 + 500
    for arr in (learn, base, queries, ids):
        arr.flags.writeable = False
    return learn, base, queries, ids


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
    if distance == "sdc":
        return ivf.decode(*ivf.encode(Q)).astype(np.float64)  # encode normalises for cosine
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
    if ivf.metric != "l2":
        return -(Qv @ Xh.T)
    if index.norm_encoding == "u8":
        norm_term = ivf.norm_levels[index.norms].astype(np.float64)
        return (Qv ** 2).sum(axis=1)[:, None] - 2 * Qv @ Xh.T + norm_term[None, :]
    return ((Qv[:, None, :] - Xh[None, :, :]) ** 2).sum(axis=-1)


def checked_probe(ivf, Q32, Qv, n_probe):
    """The lists the kernel probes (ivf._probe), checked against the oracle ranking: every list clearly among the
    n_probe best is probed, none clearly outside; returned best first (ties by list id)."""
    lists, terms = ivf._probe(np.ascontiguousarray(Q32, dtype=np.float32), n_probe, 1)
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


# ------------------------------------------------------------------------------------------------------- the model
@pytest.mark.parametrize("method", sorted(FINE))
def test_decode_is_centroid_plus_fine_reconstruction(models, data, method):
    """decode(l, b) = c_l + R z_hat_b; encode gives each vector's nearest centroid and the fine code of its residual."""
    learn, base, _, _ = data
    ivf = models["l2", method]
    lists, codes = ivf.encode(base)
    assert lists.dtype == np.int64 and lists.shape == (N,) and codes.shape == (N, ivf.code_size)
    np.testing.assert_allclose(ivf.decode(lists, codes), reconstruct(ivf, lists, codes), rtol=1e-5, atol=1e-4)
    # the nearest centroid (up to float32 ties)
    d = ((base[:, None, :].astype(np.float64) - ivf.centroids[None].astype(np.float64)) ** 2).sum(-1)
    chosen = d[np.arange(N), lists]
    assert np.all(chosen <= d.min(axis=1) * (1 + 1e-5) + 1e-5)
    # the fine code of the residual: what the fine quantizer gives it
    residuals = base - ivf.centroids[lists]
    np.testing.assert_array_equal(codes, ivf.quantizer.encode(residuals))
    # one vector: a scalar list and a 1-D code
    l0, c0 = ivf.encode(base[5])
    assert l0 == lists[5] and np.array_equal(c0, codes[5])
    np.testing.assert_array_equal(ivf.decode(l0, c0), ivf.decode(lists[5:6], codes[5:6])[0])


@pytest.mark.parametrize("method", ["pq", "ockm"])
def test_fine_quantizer_is_fitted_on_residuals(data, method):
    """fit: the fine quantizer is fitted (in place) on x - c_l(x): the IVF's distortion of the learn set is the fine
    quantizer's distortion of the residuals (at most its training objective's: training keeps a code only when a new
    one is better, a fresh encoding may not find it); its rotation is learned on the residuals."""
    learn = data[0]
    fine = FINE[method]("l2")
    ivf = IVF(L, fine, n_iter=6, seed=3).fit(learn)
    assert ivf.quantizer is fine and fine.is_fitted and ivf.is_fitted
    lists, _ = ivf.encode(learn)
    residuals = learn - ivf.centroids[lists]
    assert np.isclose(ivf.distortion(learn), fine.distortion(residuals), rtol=1e-5)
    assert fine.objective_history[-1] <= fine.distortion(residuals) * (1 + 1e-6)
    if method == "pq":  # nearest-word encoding: the training codes are the fresh ones
        assert np.isclose(fine.objective_history[-1], fine.distortion(residuals), rtol=1e-5)
    flat = FINE[method]("l2").fit(learn)
    assert ivf.distortion(learn) < flat.distortion(learn)  # the lists explain part of the vectors
    if method == "ockm":
        refit = FINE[method]("l2").fit(residuals)
        np.testing.assert_array_equal(refit.rotation, fine.rotation)  # learned on the residuals, nothing else
    # the coarse k-means: history of L centroids, never rising here (no empty cluster)
    history = ivf.coarse_objective_history
    assert history.shape == (7,) and np.all(np.diff(history) <= 1e-9 * history[0])
    d = ((learn[:, None, :].astype(np.float64) - ivf.centroids[None]) ** 2).sum(-1).min(axis=1)
    assert np.isclose(history[-1], d.mean(), rtol=1e-5)


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


def test_same_seed_same_model_for_any_threads(data):
    learn = data[0]
    a = IVF(L, FINE["ockm"]("l2"), n_iter=4, seed=7, n_threads=1).fit(learn)
    b = IVF(L, FINE["ockm"]("l2"), n_iter=4, seed=7, n_threads=2).fit(learn)
    c = IVF(L, FINE["ockm"]("l2"), n_iter=4, seed=8).fit(learn)
    assert a == b and a != c
    assert a != IVF(L, FINE["ockm"]("l2"), n_iter=4, seed=7)  # fitted != unfitted


def test_params_and_repr(data):
    fine = FINE["ockm"]("l2")
    ivf = IVF(n_lists=16, quantizer=fine, n_iter=3, seed=1, n_threads=2)
    params = ivf.get_params()
    assert params == {"n_lists": 16, "quantizer": fine, "n_iter": 3, "seed": 1, "n_threads": 2}
    assert IVF(**params).get_params() == params
    assert "IVF(n_lists=16" in repr(ivf) and "OCKM(" in repr(ivf)
    ivf.fit(data[0])
    assert ivf.metric == "l2" and ivf.code_size == 6 and ivf.bits == 48 and ivf.n_codewords == 16
    assert ivf.set_params(n_iter=4, seed=2) is ivf and ivf.is_fitted  # not structural
    ivf.set_params(n_lists=8)
    assert not ivf.is_fitted and ivf.n_lists == 8
    with pytest.raises(ValueError, match="'bogus' is not a parameter"):
        ivf.set_params(bogus=1)
    with pytest.raises(ValueError, match="n_lists"):
        ivf.set_params(n_lists=0)
    assert default_n_probe(1024) == 16 and default_n_probe(1) == 1 and default_n_probe(100) == 2


def test_cosine_normalises_and_refuses_zero_vectors(models, data):
    learn, base, _, _ = data
    ivf = models["cosine", "ockm"]
    lists, codes = ivf.encode(base[:50] * 7.5)
    l1, c1 = ivf.encode(base[:50])
    np.testing.assert_array_equal(lists, l1)
    np.testing.assert_array_equal(codes, c1)
    zero = np.array(base[:3])
    zero[1] = 0
    with pytest.raises(ValueError, match="row 1"):
        ivf.encode(zero)


# ------------------------------------------------------------------------------------------------------- bad input
def test_bad_constructor_arguments():
    fine = FINE["ockm"]("l2")
    for bad in (0, -1, MAX_LISTS + 1):
        with pytest.raises(ValueError, match="n_lists"):
            IVF(bad, fine)
    for bad in (2.0, True, "8", None):
        with pytest.raises(TypeError, match="n_lists"):
            IVF(bad, fine)
    for bad in (None, "ockm", ockstore.OCKM, IVF(4, FINE["pq"]("l2")), np.zeros(3)):
        with pytest.raises(TypeError, match="quantizer"):
            IVF(4, bad)
    with pytest.raises(ValueError, match="n_iter"):
        IVF(4, fine, n_iter=0)
    with pytest.raises(TypeError, match="n_iter"):
        IVF(4, fine, n_iter=1.5)
    with pytest.raises(ValueError, match="seed"):
        IVF(4, fine, seed=-1)
    with pytest.raises(ValueError, match="n_threads"):
        IVF(4, fine, n_threads=0)


def test_too_few_training_rows_and_bad_training_data(data):
    learn = data[0]
    with pytest.raises(ValueError, match="n_lists=40"):
        IVF(40, FINE["pq"]("l2")).fit(learn[:39])
    with pytest.raises(ValueError, match="n_codewords=16"):
        IVF(4, FINE["pq"]("l2")).fit(learn[:15])
    with pytest.raises(ValueError, match="n_subspaces"):
        IVF(4, ockstore.PQ(13, n_codewords=16)).fit(learn)
    bad = np.array(learn)
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        IVF(4, FINE["pq"]("l2")).fit(bad)
    with pytest.raises(TypeError):
        IVF(4, FINE["pq"]("l2")).fit(learn > 0)


def test_unfitted_and_bad_encode_decode_input(models, data):
    ivf = IVF(4, FINE["pq"]("l2"))
    for call in (lambda: ivf.encode(data[1]), lambda: ivf.decode([0], np.zeros((1, 4), np.uint8)),
                 lambda: ivf.distortion(data[1]), lambda: ivf.centroids):
        with pytest.raises(NotFittedError):
            call()
    ivf = models["l2", "ockm"]
    lists, codes = ivf.encode(data[1][:5])
    with pytest.raises(ValueError, match="list_ids"):
        ivf.decode(np.array([0, 1, 2, 3, L]), codes)
    with pytest.raises(ValueError, match="list_ids"):
        ivf.decode(lists[:4], codes)
    with pytest.raises(TypeError, match="list_ids"):
        ivf.decode(lists.astype(np.float32), codes)
    with pytest.raises(ValueError, match="codes"):
        ivf.decode(lists, codes[:, :3])
    with pytest.raises(ValueError, match="X"):
        ivf.encode(data[1][:, :5])
    with pytest.raises(ValueError, match="no rows"):
        ivf.distortion(data[1][:0])
    assert ivf.encode(data[1][:0])[1].shape == (0, ivf.code_size)


def test_refitting_the_fine_quantizer_alone_is_detected(data):
    learn = data[0]
    fine = FINE["pq"]("l2")
    ivf = IVF(4, fine, n_iter=2).fit(learn)
    fine.set_params(n_subspaces=3)  # structural: the fine model is discarded
    with pytest.raises(NotFittedError, match="fine quantizer"):
        ivf.encode(learn[:3])


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
            D, I = index.search(queries, k, n_probe=n_probe, distance=distance, n_threads=1)
            check_topk(D, I, keys, allowed, k, metric, rows_of, scale)
            D2, I2 = index.search(queries, k, n_probe=n_probe, distance=distance, n_threads=2)
            np.testing.assert_array_equal(D, D2)
            np.testing.assert_array_equal(I, I2)
        D, I = index.search(queries, 10, n_probe=n_probe, distance=distance)
        d, i = index.search(queries[2], 10, n_probe=n_probe, distance=distance)  # alone: the same results
        np.testing.assert_array_equal(d, D[2])
        np.testing.assert_array_equal(i, I[2])


def test_n_probe_default_and_bad_values(indexes, data):
    queries = data[2]
    index = indexes["l2", "ockm", "u8"]
    assert index.quantizer.default_n_probe == default_n_probe(L) == 1
    D, I = index.search(queries, 5)
    D1, I1 = index.search(queries, 5, n_probe=1)
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
                D, I = index.search(queries, k, n_probe=n_probe, allow=allow, n_threads=threads)
                check_topk(D, I, keys, allowed, k, metric, Rows(index.ids), tolerance_scale(Qv, base, metric))


@pytest.mark.parametrize("case", [("l2", "ockm", "u8"), ("cosine", "ockm", "none")], ids=case_id)
def test_rerank_of_probed_candidates(indexes, data, case):
    """rerank=R: the R best of the probed lists by the codes, re-ranked by their exact values from the stored
    vectors (or given ones)."""
    _, base, queries, ids = data
    index = indexes[case]
    metric = case[0]
    R, k, n_probe = 30, 5, 3
    D0, I0 = index.search(queries, R, n_probe=n_probe)
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


# ---------------------------------------------------------------------------------------------------- coarse k-means
def test_coarse_kernels_against_numpy(data):
    """coarse_assign: the nearest centroid of each row (ties: the smaller list) and its squared distance;
    cluster_sums: the float64 sum and the size of every cluster."""
    from ockstore import _kernels
    from ockstore._kmeans import CoarseTables

    learn = data[0]
    C = learn[::97][:L].astype(np.float32)
    C[5] = C[3]  # two equal centroids: their rows go to the smaller list
    tables = CoarseTables(C)
    labels, distances = tables.assign(learn, 2)
    d = ((learn[:, None, :].astype(np.float64) - C[None].astype(np.float64)) ** 2).sum(-1)
    best = d.min(axis=1)
    assert np.all(d[np.arange(len(learn)), labels] <= best * (1 + 1e-5) + 1e-4)
    assert not np.any(labels == 5)
    np.testing.assert_allclose(distances, best, rtol=1e-4, atol=1e-3)
    sums = np.empty((L, P), dtype=np.float64)
    counts = np.empty(L, dtype=np.int64)
    _kernels.cluster_sums(learn, labels, sums, counts)
    expected = np.zeros((L, P))
    np.add.at(expected, labels, learn.astype(np.float64))
    np.testing.assert_allclose(sums, expected, rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(counts, np.bincount(labels, minlength=L))


def test_coarse_kmeans_is_lloyd(data):
    """train_coarse = Lloyd from n_lists distinct sampled rows (the seeded Generator's choice), each centroid moved to
    the mean of its rows, on every row when there are at most 256 per list; history = the mean squared distance
    before each update and after the last."""
    from ockstore._kmeans import train_coarse

    X = clusters(800, 11)
    n_lists, n_iter = 6, 4
    centroids, history, labels = train_coarse(X, n_lists, n_iter, np.random.default_rng(21), 1)
    rng = np.random.default_rng(21)
    C = X[np.sort(rng.choice(len(X), size=n_lists, replace=False))].astype(np.float64)
    X64 = X.astype(np.float64)
    expected_history = []
    for _ in range(n_iter + 1):
        d = ((X64[:, None, :] - C[None]) ** 2).sum(-1)
        lab = d.argmin(axis=1)
        expected_history.append(d.min(axis=1).mean())
        if len(expected_history) <= n_iter:
            C = np.stack([X64[lab == j].mean(axis=0) for j in range(n_lists)])
    np.testing.assert_allclose(centroids, C, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(history, expected_history, rtol=1e-5)
    np.testing.assert_array_equal(labels, lab)


def test_empty_clusters_are_split(data):
    """With fewer distinct training vectors than lists, empty clusters take over half of a large one: the model stays
    finite and usable, and lists without vectors simply stay empty."""
    X = np.repeat(clusters(5, 12), 40, axis=0)  # 5 distinct vectors, 200 rows
    ivf = IVF(9, ockstore.PQ(3, n_codewords=4, n_iter=2), n_iter=5).fit(X)
    assert np.isfinite(ivf.centroids).all() and np.isfinite(ivf.coarse_objective_history).all()
    index = Index.from_vectors(ivf, X, norm_encoding="f32")
    assert (index.list_sizes == 0).sum() >= 4
    D, I = index.search(X[:3], 5, n_probe=9)
    assert (I >= 0).all()
