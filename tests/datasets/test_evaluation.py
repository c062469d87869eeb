"""Tests of ockstore.evaluation: recall@R, mean overall ratio, distortion.

Expected values in the hand-made cases are worked out in the comments, not computed by the code under test.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ockstore.evaluation import distortion, exact_knn, mean_overall_ratio, recall_at_r

# ----------------------------------------------------------------------------------------------------------------
# recall@R


def test_recall_hand_case():
    retrieved = np.array([[3, 1, 2], [0, 5, 7], [9, 8, 4]])
    gt = np.array([[1, 3], [7, 0], [6, 9]])  # true nearest neighbours: 1, 7, 6 (column 0 only)
    # r=1: first ids 3, 0, 9 — none is the true NN                          → 0/3
    # r=2: query 0 has {3, 1} ∋ 1; query 1 {0, 5} ∌ 7; query 2 {9, 8} ∌ 6 → 1/3
    # r=3: query 1 now has 7; query 2 never has 6                          → 2/3
    assert recall_at_r(retrieved, gt, 1) == 0.0
    assert recall_at_r(retrieved, gt, 2) == pytest.approx(1 / 3)
    assert recall_at_r(retrieved, gt, 3) == pytest.approx(2 / 3)


def test_recall_perfect_and_missing_results():
    gt = np.arange(20).reshape(4, 5)
    assert recall_at_r(gt, gt, 1) == 1.0
    # -1 ("no result") never matches, even where the retrieved list is otherwise empty
    retrieved = np.array([[-1, 0], [-1, -1], [10, -1], [15, 16]])
    # true NNs 0, 5, 10, 15: r=1 → queries 2 and 3 → 0.5; r=2 → query 0 too → 0.75
    assert recall_at_r(retrieved, gt, 1) == 0.5
    assert recall_at_r(retrieved, gt, 2) == 0.75


def test_recall_ties_with_distances():
    gt = np.array([[4, 2, 9], [1, 3, 5]])
    dist = np.array([[1.0, 1.0, 2.0], [0.5, 0.7, 0.9]])  # query 0: ids 4 and 2 tie for nearest
    retrieved = np.array([[2, 4], [3, 1]])
    # without distances only column 0 counts: query 0 finds 4 at rank 2, query 1 finds 1 at rank 2
    assert recall_at_r(retrieved, gt, 1) == 0.0
    assert recall_at_r(retrieved, gt, 2) == 1.0
    # with distances, id 2 is an equally near neighbour of query 0: r=1 → 1/2 (query 1's 3 is not tied)
    assert recall_at_r(retrieved, gt, 1, groundtruth_distances=dist) == 0.5
    assert recall_at_r(retrieved, gt, 2, groundtruth_distances=dist) == 1.0


def test_recall_one_query_as_1d():
    assert recall_at_r([5, 6, 7], [6], 2) == 1.0
    assert recall_at_r([5, 6, 7], [6], 1) == 0.0


def test_recall_checks():
    gt = np.zeros((2, 1), dtype=np.int64)
    ret = np.zeros((2, 3), dtype=np.int64)
    with pytest.raises(ValueError, match="r must be <= 3"):
        recall_at_r(ret, gt, 4)
    with pytest.raises(ValueError, match="r must be >= 1"):
        recall_at_r(ret, gt, 0)
    with pytest.raises(TypeError, match="r must be an integer"):
        recall_at_r(ret, gt, 1.0)
    with pytest.raises(TypeError, match="retrieved_ids must be an integer array"):
        recall_at_r(ret.astype(float), gt, 1)
    with pytest.raises(TypeError, match="groundtruth_ids must be an integer array"):
        recall_at_r(ret, gt.astype(bool), 1)
    with pytest.raises(ValueError, match="retrieved_ids has 2 rows but groundtruth_ids has 3"):
        recall_at_r(ret, np.zeros((3, 1), int), 1)
    with pytest.raises(ValueError, match=r"groundtruth_ids\[:, 0\]"):
        recall_at_r(ret, -np.ones((2, 1), int), 1)
    with pytest.raises(ValueError, match="zero queries"):
        recall_at_r(np.zeros((0, 3), int), np.zeros((0, 1), int), 1)
    with pytest.raises(ValueError, match="groundtruth_distances must have the shape"):
        recall_at_r(ret, gt, 1, groundtruth_distances=np.zeros((2, 2)))


# ----------------------------------------------------------------------------------------------------------------
# mean overall ratio


def test_ratio_hand_case_2d():
    base = np.array([[3, 4], [6, 8], [1, 0], [0, 2]], dtype=np.float32)
    query = np.array([[0, 0]], dtype=np.float32)
    # distances from the origin: 5, 10, 1, 2 → exact top-2 ids [2, 3] at distances 1, 2
    # retrieved [1, 0]: distances 10, 5 → re-sorted 5, 10 → ratios 5/1, 10/2 → mean 5
    assert mean_overall_ratio(query, base, [[1, 0]], [[2, 3]], 2) == pytest.approx(5.0)
    # k=1 uses the first column of each: retrieved 1 (distance 10) vs exact 2 (distance 1) → 10
    assert mean_overall_ratio(query, base, [[1, 0]], [[2, 3]], 1) == pytest.approx(10.0)


def test_ratio_hand_case_two_queries():
    base = np.array([[0], [1], [2], [4], [8]], dtype=np.float64)
    queries = np.array([[3], [0.5]])
    # query 3: distances 3, 2, 1, 1, 5 → exact top-2 ids 2, 3 (1, 1); retrieved [4, 1] → 5, 2 → sorted 2, 5
    #          ratios 2/1, 5/1 → 3.5
    # query 0.5: distances 0.5, 0.5, 1.5, 3.5, 7.5 → exact ids 0, 1; retrieved [1, 2] → 0.5, 1.5
    #          ratios 1, 3 → 2
    # mean over queries (3.5 + 2) / 2 = 2.75; columns past k are ignored
    ret = [[4, 1, 0], [1, 2, 3]]
    gt = [[2, 3, 1], [0, 1, 2]]
    assert mean_overall_ratio(queries, base, ret, gt, 2) == pytest.approx(2.75)


def test_ratio_zero_exact_distance():
    base = np.array([[0.0], [1.0], [2.0], [4.0]])
    query = np.array([[0.0]])  # equal to base row 0: exact distances 0, 1
    # retrieved [1, 2]: distances 1, 2. Term 1: exact 0, returned 1 → left out. Term 2: 2/1 → ratio 2.
    assert mean_overall_ratio(query, base, [[1, 2]], [[0, 1]], 2) == pytest.approx(2.0)
    # retrieved [1, 0], re-sorted by distance to [0, 1]: term 1 is 0/0 → counts as 1; term 2 is 1/1 → ratio 1
    assert mean_overall_ratio(query, base, [[1, 0]], [[0, 1]], 2) == 1.0
    # a query whose only term is left out is left out of the mean: second query (at 4) returns [3] exactly
    queries = np.array([[0.0], [4.0]])
    assert mean_overall_ratio(queries, base, [[1], [3]], [[0], [3]], 1) == 1.0
    with pytest.raises(ValueError, match="undefined"):
        mean_overall_ratio(query, base, [[1]], [[0]], 1)


def test_ratio_perfect_retrieval_is_one():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(200, 8))
    queries = rng.normal(size=(10, 8))
    _, gt = exact_knn(queries, base, 10)
    assert mean_overall_ratio(queries, base, gt, gt, 10) == pytest.approx(1.0, abs=1e-12)
    # reversed order is the same set: re-sorting by true distance makes it perfect too
    assert mean_overall_ratio(queries, base, gt[:, ::-1], gt, 10) == pytest.approx(1.0, abs=1e-12)


def test_ratio_reads_only_needed_rows_of_a_memmap(tmp_path):
    rng = np.random.default_rng(1)
    base = rng.integers(0, 256, size=(500, 16)).astype(np.uint8)
    path = tmp_path / "b.npy"
    np.save(path, base)
    mm = np.load(path, mmap_mode="r")
    queries = rng.integers(0, 256, size=(4, 16)).astype(np.uint8)
    _, gt = exact_knn(queries, base, 5)
    ret = (gt + 1) % 500
    assert mean_overall_ratio(queries, mm, ret, gt, 5) == mean_overall_ratio(queries, base, ret, gt, 5)


def test_ratio_checks():
    base = np.zeros((5, 2))
    q = np.zeros((1, 2))
    with pytest.raises(ValueError, match=r"retrieved_ids holds -1.*missing result"):
        mean_overall_ratio(q, base, [[0, -1]], [[0, 1]], 2)
    with pytest.raises(ValueError, match="base has only 5 rows"):
        mean_overall_ratio(q, base, [[0, 5]], [[0, 1]], 2)
    with pytest.raises(ValueError, match="repeats an id"):
        mean_overall_ratio(q, base, [[1, 1]], [[0, 1]], 2)
    with pytest.raises(ValueError, match="k must be <= 2"):
        mean_overall_ratio(q, base, [[0, 1]], [[0, 1, 2]], 3)
    with pytest.raises(ValueError, match="queries has dimension 3, expected 2"):
        mean_overall_ratio(np.zeros((1, 3)), base, [[0]], [[0]], 1)
    with pytest.raises(ValueError, match="retrieved_ids has 2 rows but queries has 1"):
        mean_overall_ratio(q, base, [[0], [1]], [[0]], 1)
    with pytest.raises(ValueError, match="base contains NaN"):
        mean_overall_ratio(q, np.full((5, 2), np.nan), [[0]], [[1]], 1)


@settings(max_examples=60, deadline=None)
@given(
    n_base=st.integers(2, 30),
    dim=st.integers(1, 4),
    n_queries=st.integers(1, 5),
    k=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_ratio_is_at_least_one(n_base, dim, n_queries, k, seed):
    """Any k distinct retrieved ids, against exact ground truth, give a ratio ≥ 1 (small integer coordinates, so
    ties and zero distances are frequent)."""
    k = min(k, n_base)
    rng = np.random.default_rng(seed)
    base = rng.integers(-3, 4, size=(n_base, dim)).astype(np.float32)
    queries = rng.integers(-3, 4, size=(n_queries, dim)).astype(np.float32)
    _, gt = exact_knn(queries, base, k)
    ret = np.array([rng.choice(n_base, size=k, replace=False) for _ in range(n_queries)])
    try:
        ratio = mean_overall_ratio(queries, base, ret, gt, k)
    except ValueError as exc:  # every term left out (zero exact distances only): documented
        assert "undefined" in str(exc)
        return
    assert ratio >= 1.0
    assert mean_overall_ratio(queries, base, gt, gt, k) == 1.0


# ----------------------------------------------------------------------------------------------------------------
# distortion


def test_distortion_hand_case():
    X = np.array([[0, 0], [1, 1]], dtype=np.uint8)
    Y = np.array([[3, 4], [1, 1]], dtype=np.float32)
    # squared errors 9 + 16 = 25 and 0 → mean 12.5 (uint8 input must not wrap around)
    assert distortion(X, Y) == 12.5
    assert distortion(Y, X) == 12.5
    assert distortion(X, X) == 0.0
    assert distortion([1.0, 2.0], [1.0, 4.0]) == 4.0  # one vector


def test_distortion_checks():
    with pytest.raises(ValueError, match="X_reconstructed has shape"):
        distortion(np.zeros((2, 2)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="zero vectors"):
        distortion(np.zeros((0, 2)), np.zeros((0, 2)))
    with pytest.raises(ValueError, match="X_reconstructed contains NaN"):
        distortion(np.zeros((1, 2)), np.array([[np.inf, 0]]))
    with pytest.raises(TypeError, match="X must hold real numbers"):
        distortion(np.zeros((1, 2), dtype=bool), np.zeros((1, 2)))


def test_k_recall_at_k_is_the_mean_overlap_of_the_top_k():
    """10-recall@10 (k-recall@k): |first k returned ∩ true k| / k averaged over queries; -1 and repeats count
    nothing; a permutation of the true top k is 1; only the first k columns of each matter."""
    from ockstore.evaluation import k_recall_at_k

    gt = np.array([[0, 1, 2, 3, 9], [5, 6, 7, 8, 9]])
    assert k_recall_at_k(np.array([[3, 2, 1, 0, 7], [8, 7, 6, 5, 1]]), gt, 4) == 1.0
    assert k_recall_at_k(np.array([[0, 0, -1, 9], [5, 9, 9, 1]]), gt, 4) == pytest.approx((1 + 1) / 8)
    assert k_recall_at_k(np.array([[0, 1, 7, 3], [5, 6, 7, 8]]), gt, 2) == 1.0
    rng = np.random.default_rng(0)
    ret, true = rng.integers(0, 30, size=(50, 10)), np.argsort(rng.random((50, 30)), axis=1)[:, :10]
    expected = np.mean([len(set(r.tolist()) & set(t.tolist())) / 10 for r, t in zip(ret, true)])
    assert k_recall_at_k(ret, true, 10) == pytest.approx(expected)
    with pytest.raises(ValueError, match="k = 5 needs at least k columns"):
        k_recall_at_k(ret[:, :4], true, 5)
    with pytest.raises(ValueError, match="no rows"):
        k_recall_at_k(ret[:0], true[:0], 3)
