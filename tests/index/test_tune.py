"""ockstore.tune: the fastest n_probe / rerank whose mean k-recall@k reaches a target (docs/ARCHITECTURE.md,
"Tuning"), checked against recalls recomputed here from searches and NumPy brute force."""

import logging

import numpy as np
import pytest

import ockstore
from ockstore import IVF, OCKM, Index
from ockstore.search import tune as tuning

P = 24
K = 10


def clustered(n, seed):
    """n vectors around 40 centres (the same centres for every seed): queries look like the base."""
    centres = np.random.default_rng(0).normal(scale=2.0, size=(40, P))
    rng = np.random.default_rng(seed)
    return (centres[rng.integers(0, 40, n)] + rng.normal(size=(n, P))).astype(np.float32)


@pytest.fixture(scope="module")
def base():
    return clustered(6000, 1)


@pytest.fixture(scope="module")
def queries():
    return clustered(600, 2)


@pytest.fixture(scope="module")
def indexes(base):
    learn = base[:3000]
    flat = OCKM(4, 2, 3, n_codewords=16, n_iter=3, seed=0).fit(learn)
    ivf = IVF(32, OCKM(4, 2, 3, n_codewords=16, n_iter=3, seed=0), seed=0).fit(learn)
    return {"flat": Index.from_vectors(flat, base, store_vectors="float32"),
            "ivf": Index.from_vectors(ivf, base, store_vectors="sq8"),
            "ivf-plain": Index.from_vectors(ivf, base)}


def true_neighbours(index, Q, k=K):
    """Brute force in NumPy over the stored representation (float64), ids of the k nearest."""
    V = np.asarray(index.vectors, dtype=np.float64)
    if index.store_vectors == "sq8":
        lo, hi = index.quantizer.value_ranges.astype(np.float64)
        V = lo + (hi - lo) / 255 * V
    d = (Q.astype(np.float64) ** 2).sum(1)[:, None] - 2 * Q @ V.T + (V ** 2).sum(1)[None, :]
    return index.ids[np.argsort(d, axis=1, kind="stable")[:, :k]]


def recall(I, truth):
    return float(np.mean([np.isin(truth[q], I[q]).mean() for q in range(truth.shape[0])]))


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_tune_reaches_the_target_on_held_out_queries(indexes, queries, kind, caplog):
    """The setting chosen on 300 queries reaches the target on them (its recall recomputed from a search equals the
    one reported) and, up to the sampling noise of 300 other queries, on those; the next smaller rerank of the grid
    at that n_probe does not reach it; every setting timed is in the log and in ``measurements``."""
    index = indexes[kind]
    tuning_q, held_out = queries[:300], queries[300:]
    target = 0.9
    with caplog.at_level(logging.INFO, logger="ockstore.tune"):
        found = ockstore.tune(index, tuning_q, k=K, target_recall=target, n_threads=1)
    assert isinstance(found, dict)
    assert set(found) == ({"n_probe", "rerank"} if kind == "ivf" else {"rerank"})
    D, I = index.search(tuning_q, K, **found)
    truth = true_neighbours(index, tuning_q)
    assert recall(I, truth) == pytest.approx(found.recall, abs=1e-12)
    assert found.recall >= target
    assert recall(index.search(held_out, K, **found)[1], true_neighbours(index, held_out)) >= target - 0.03
    smaller = [R for R in tuning._rerank_grid(K, found["rerank"]) if R < found["rerank"]]
    if smaller:
        _, I_less = index.search(tuning_q, K, **dict(found, rerank=smaller[-1]))
        assert recall(I_less, truth) < target
    assert found.measurements and all(m["recall"] >= target for m in found.measurements)
    assert min(m["seconds_per_query"] for m in found.measurements) == found.seconds_per_query
    assert sum("us per query" in r.getMessage() for r in caplog.records) == len(found.measurements)


def test_ground_truth_given_and_an_index_without_stored_vectors(indexes, queries):
    """Without stored vectors only n_probe can be tuned (rerank 0), from the ground truth given; the brute force of
    tune equals NumPy's."""
    plain, stored = indexes["ivf-plain"], indexes["ivf"]
    Q = queries[:200]
    truth = true_neighbours(stored, Q, 20)
    np.testing.assert_array_equal(tuning._exact_neighbours(stored, Q, 20, 2), truth)
    found = ockstore.tune(plain, Q, k=K, target_recall=0.4, ground_truth=truth)
    assert found["rerank"] == 0 and 1 <= found["n_probe"] <= 32
    assert recall(plain.search(Q, K, **found)[1], truth[:, :K]) >= 0.4


def test_impossible_targets_and_bad_arguments_are_refused(indexes, queries, base):
    plain, stored = indexes["ivf-plain"], indexes["flat"]
    Q = queries[:50]
    truth = true_neighbours(stored, Q)
    # codes alone at every n_probe cannot reach recall 1 here: ValueError with the best recall measured
    with pytest.raises(ValueError, match=r"target_recall 1.0 cannot be reached.*best mean 10-recall@10 measured is"):
        ockstore.tune(plain, Q, target_recall=1.0, ground_truth=truth)
    # a ground truth that the index cannot hold (ids it does not have) cannot be reached either
    with pytest.raises(ValueError, match="cannot be reached"):
        ockstore.tune(stored, Q, target_recall=0.5, ground_truth=truth + 10**9)
    with pytest.raises(ValueError, match="ground_truth="):
        ockstore.tune(plain, Q)  # neither stored vectors nor ground truth
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="target_recall"):
            ockstore.tune(stored, Q, target_recall=bad)
    with pytest.raises(ValueError, match="ground_truth must have shape"):
        ockstore.tune(stored, Q, ground_truth=truth[:, :5])
    with pytest.raises(TypeError, match="ground_truth"):
        ockstore.tune(stored, Q, ground_truth=truth.astype(float))
    with pytest.raises(ValueError, match="queries"):
        ockstore.tune(stored, Q[:, :5])
    with pytest.raises(ValueError, match="k = 0|k must be"):
        ockstore.tune(stored, Q, k=0)
    small = Index.from_vectors(stored.quantizer, base[:5], store_vectors="float32")
    with pytest.raises(ValueError, match="k = 10 exceeds the 5 vectors"):
        ockstore.tune(small, Q)


def test_tune_says_what_it_takes(indexes, queries, base, tmp_path):
    """Anything but an Index, IVFIndex or Collection is a TypeError saying what tune takes (issue 28: an ExactIndex, a
    path or None raised AttributeError naming internals): a path is told to open the file, an ExactIndex that it is
    exact."""
    from ockstore.exact_index import ExactIndex

    Q = queries[:5]
    path = tmp_path / "i.ock"
    indexes["flat"].save(path)
    for bad, hint in ((None, "got NoneType$"), (str(path), r"got str: a path; .*open_index\("),
                      (path, r"got PosixPath: a path|got WindowsPath: a path"),
                      (ExactIndex(base[:50], None, "l2"), "got ExactIndex: it searches exactly"),
                      (base, "got ndarray$")):
        with pytest.raises(TypeError, match=r"^index must be an Index, IVFIndex or Collection \(an open one, "
                                            rf"searched by codes\), {hint}"):
            ockstore.tune(bad, Q)
    with ockstore.open_index(path) as index:  # what the message says to do works
        assert "rerank" in ockstore.tune(index, Q, target_recall=0.5)


def test_the_target_is_held_to_a_lower_confidence_bound_and_stored_queries_warn(indexes, base, queries):
    """The setting chosen reaches the target by the lower confidence bound of its mean recall (mean - 1.645 s /
    sqrt(nq)), below its mean; few queries give a looser bound (a higher mean needed); queries that are stored rows
    of the index make tune warn (their neighbours are easier to find)."""
    index = indexes["flat"]
    many = ockstore.tune(index, queries, k=K, target_recall=0.9)
    assert many.recall_lower >= 0.9 and many.recall_lower < many.recall
    for m in many.measurements:
        assert m["recall_lower"] <= m["recall"]
    I = index.search(queries, K, **many)[1]
    per_query = np.array([np.isin(t, i).mean() for t, i in zip(true_neighbours(index, queries), I)])
    lower = per_query.mean() - tuning.CONFIDENCE_Z * per_query.std(ddof=1) / np.sqrt(len(queries))
    assert lower == pytest.approx(many.recall_lower, abs=1e-9)
    few = ockstore.tune(index, queries[:20], k=K, target_recall=0.9)
    assert few.recall_lower >= 0.9
    with pytest.warns(UserWarning, match="stored in the index"):
        ockstore.tune(index, base[:100], k=K, target_recall=0.9)
    assert tuning._probe_grid(64) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
