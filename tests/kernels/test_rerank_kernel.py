"""The re-ranking loop (ockstore/kernels/rerank.h through _kernels.rerank, exact_search and the scans' own re-ranking):
bitwise equal to the NumPy oracle that adds in the same lanes (tests/support/reference.py), for every kind of stored
row, metric and SIMD level; bad rows flagged; independent of threads and of how candidates come."""

import itertools

import numpy as np
import pytest

from ockstore import _kernels
from support.reference import rerank_topk, rerank_values, sq8_values

KINDS = {"float32": _kernels.RERANK_FLOAT32, "float16": _kernels.RERANK_FLOAT16, "uint8": _kernels.RERANK_UINT8,
         "sq8": _kernels.RERANK_SQ8}
METRICS = {"l2": _kernels.RERANK_L2, "ip": _kernels.RERANK_IP, "cosine": _kernels.RERANK_COSINE}
LEVELS = ("portable", "avx2", "avx512")


def runnable_levels():
    best = _kernels._best_simd_level()
    return LEVELS[:LEVELS.index(best) + 1]


@pytest.fixture(params=runnable_levels())
def level(request):
    previous = _kernels._set_simd_level(request.param)
    yield request.param
    _kernels._set_simd_level(previous)


def stored(kind, n, P, rng):
    if kind == "float32":
        return (rng.standard_normal((n, P)) * 3).astype(np.float32)
    if kind == "float16":
        return (rng.standard_normal((n, P)) * 3).astype(np.float16)
    return rng.integers(0, 256, (n, P)).astype(np.uint8)


def numbers(rows, kind, ranges):
    """The stored rows as the real numbers they hold."""
    return sq8_values(rows, ranges) if kind == "sq8" else rows.astype(np.float64)


def source(parts, kind, metric, P, ranges=None):
    return _kernels.RerankSource([np.ascontiguousarray(v).view(np.uint8).reshape(v.shape[0], -1) for v, _ in parts],
                                 [ids for _, ids in parts], KINDS[kind], METRICS[metric], P,
                                 None if ranges is None else np.ascontiguousarray(ranges, dtype=np.float32))


def run(src, Q, rows, parts, k, n_threads=1):
    nq = Q.shape[0]
    D = np.empty((nq, k), dtype=np.float32)
    I = np.empty((nq, k), dtype=np.int64)
    pos = np.empty((nq, k), dtype=np.int64)
    flags = np.empty(nq, dtype=np.int32)
    _kernels.rerank(src, Q, rows, parts, D, I, pos, flags, n_threads)
    return D, I, pos, flags


def oracle(Q, rows, part_of, parts, kind, metric, k, ranges=None):
    nq = Q.shape[0]
    D = np.empty((nq, k), dtype=np.float32)
    I = np.empty((nq, k), dtype=np.int64)
    for q in range(nq):
        real = rows[q] >= 0
        which = np.zeros(rows.shape[1], dtype=np.int64) if part_of is None else part_of[q]
        values = np.array([rerank_values(Q[q], numbers(parts[p][0][r:r + 1], kind, ranges), metric)[0]
                           for r, p in zip(rows[q][real], which[real])], dtype=np.float32)
        ids = np.array([r if parts[p][1] is None else parts[p][1][r] for r, p in zip(rows[q][real], which[real])],
                       dtype=np.int64)
        D[q], I[q] = rerank_topk(values, ids, metric, k)
    return D, I


def queries(rng, nq, P, metric, integer=False):
    Q = rng.integers(0, 256, (nq, P)) if integer else rng.standard_normal((nq, P)) * 3
    Q = Q.astype(np.float32)
    if metric == "cosine":
        Q = (Q / np.linalg.norm(Q, axis=1, keepdims=True)).astype(np.float32)
    return Q


@pytest.mark.parametrize("kind,metric", list(itertools.product(KINDS, METRICS)))
@pytest.mark.parametrize("P", [1, 7, 16, 17, 33, 130])
def test_values_and_order_equal_the_lane_oracle(level, kind, metric, P):
    rng = np.random.default_rng(P)
    n, nq, R, k = 50, 9, 30, 7
    V = stored(kind, n, P, rng)
    V[5] = V[4]  # equal values: the smaller id first
    ids = rng.permutation(1000)[:n].astype(np.int64)
    ranges = None
    if kind == "sq8":
        lo = (rng.standard_normal(P) - 2).astype(np.float32)
        ranges = np.stack([lo, lo + rng.random(P).astype(np.float32) * 4])
        ranges[1, 0] = ranges[0, 0]  # a dimension constant in training: step 0
    Q = queries(rng, nq, P, metric)
    rows = np.stack([rng.permutation(n)[:R] for _ in range(nq)]).astype(np.int64)
    rows[0, :2] = [4, 5]
    rows[1, 10:] = -1   # fewer than R candidates
    rows[2, :] = -1     # none: padding only
    if metric == "cosine" and kind in ("uint8", "sq8"):
        V[:, 0] = np.maximum(V[:, 0], 1)  # no zero vector (a sq8 row decodes to zero only by accident)
    D, I, pos, flags = run(source([(V, ids)], kind, metric, P, ranges), Q, rows, None, k)
    want_D, want_I = oracle(Q, rows, None, [(V, ids)], kind, metric, k, ranges)
    assert not flags.any()
    np.testing.assert_array_equal(I, want_I)
    np.testing.assert_array_equal(D, want_D)
    for q in range(nq):  # positions point at the candidates returned
        real = pos[q] >= 0
        np.testing.assert_array_equal(ids[rows[q][pos[q][real]]], I[q][real])


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("P", [1, 31, 32, 33, 128, 200])
def test_uint8_rows_with_integer_queries(level, metric, P):
    """Queries of integers 0..255 take the integer path: exact sums, the same as the float64 lanes give."""
    rng = np.random.default_rng(P + 1)
    V = stored("uint8", 60, P, rng)
    V[:, 0] = np.maximum(V[:, 0], 1)
    Q = queries(rng, 8, P, "l2", integer=True)
    Q[0], Q[1] = 255, 0
    rows = np.stack([rng.permutation(60)[:40] for _ in range(8)]).astype(np.int64)
    D, I, _, flags = run(source([(V, None)], "uint8", metric, P), Q, rows, None, 10)
    want_D, want_I = oracle(Q, rows, None, [(V, None)], "uint8", metric, 10)
    np.testing.assert_array_equal(I, want_I)
    np.testing.assert_array_equal(D, want_D)


@pytest.mark.parametrize("kind,metric", list(itertools.product(KINDS, METRICS)))
def test_candidates_from_several_parts_and_threads(kind, metric):
    rng = np.random.default_rng(3)
    P = 45
    parts = [(stored(kind, 40, P, rng), np.arange(40, dtype=np.int64) * 3 + s) for s in range(3)]
    ranges = np.stack([np.full(P, -5, np.float32), np.full(P, 5, np.float32)])
    Q = queries(rng, 20, P, metric)
    rows = rng.integers(0, 40, (20, 25)).astype(np.int64)
    part_of = rng.integers(0, 3, (20, 25)).astype(np.int64)
    src = source(parts, kind, metric, P, ranges)
    results = []
    for level, threads in itertools.product(runnable_levels(), (1, 2)):
        previous = _kernels._set_simd_level(level)
        try:
            results.append(run(src, Q, rows, part_of, 10, threads))
        finally:
            _kernels._set_simd_level(previous)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)
    want_D, want_I = oracle(Q, rows, part_of, parts, kind, metric, 10, ranges)
    np.testing.assert_array_equal(results[0][0], want_D)
    np.testing.assert_array_equal(results[0][1], want_I)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 2e15, 3e38])
def test_bad_float32_rows_are_flagged(level, bad):
    rng = np.random.default_rng(0)
    V = rng.standard_normal((10, 20)).astype(np.float32)
    V[3, 19] = bad
    Q = queries(rng, 2, 20, "l2")
    rows = np.array([[0, 1, 2], [3, 4, 5]], dtype=np.int64)
    for metric in METRICS:
        *_, flags = run(source([(V, None)], "float32", metric, 20), Q, rows, None, 2)
        assert flags[0] == 0 and flags[1] & _kernels.RERANK_BAD_VALUES


def test_bad_float16_rows_and_zero_vectors_are_flagged(level):
    V = np.ones((4, 20), dtype=np.float16)
    V[1, 17] = np.inf
    V[2] = 0
    Q = (np.ones((3, 20)) / np.sqrt(20)).astype(np.float32)
    rows = np.array([[0], [1], [2]], dtype=np.int64)
    *_, flags = run(source([(V, None)], "float16", "cosine", 20), Q, rows, None, 1)
    assert flags[0] == 0 and flags[1] & _kernels.RERANK_BAD_VALUES and flags[2] & _kernels.RERANK_ZERO_VECTOR
    *_, flags = run(source([(V, None)], "float16", "l2", 20), Q, rows, None, 1)
    assert list(flags) == [0, _kernels.RERANK_BAD_VALUES, 0]


def test_every_float16_value_is_converted_exactly(level):
    """Each finite float16 bit pattern, read back through "ip" with one-hot queries (the float16 -> float64 path)."""
    values = np.arange(65536, dtype=np.uint16).view(np.float16)
    values = values[np.isfinite(values)]
    V = values[: values.size // 16 * 16].reshape(-1, 16)
    rows = np.arange(V.shape[0], dtype=np.int64)[:, None]
    src = source([(V, None)], "float16", "ip", 16)
    for lane in range(16):
        Q = np.zeros((V.shape[0], 16), dtype=np.float32)
        Q[:, lane] = 1
        D, *_ = run(src, Q, rows, None, 1)
        np.testing.assert_array_equal(D[:, 0], V[:, lane].astype(np.float32))


@pytest.mark.parametrize("kind,metric", list(itertools.product(KINDS, METRICS)))
def test_exact_search_is_the_rerank_of_every_row(level, kind, metric):
    rng = np.random.default_rng(5)
    P, n = 37, 500
    V = stored(kind, n, P, rng)
    V[7] = V[3]
    ids = rng.permutation(n).astype(np.int64)
    ranges = np.stack([np.full(P, -1, np.float32), np.full(P, 2, np.float32)])
    Q = queries(rng, 13, P, metric)
    src = source([(V, ids)], kind, metric, P, ranges)
    every_row = np.tile(np.arange(n, dtype=np.int64), (13, 1))
    want_D, want_I, *_ = run(src, Q, every_row, None, 10)
    for threads in (1, 2):
        D = np.empty((13, 10), dtype=np.float32)
        I = np.empty((13, 10), dtype=np.int64)
        flags = np.empty(13, dtype=np.int32)
        _kernels.rerank_all_rows(src, Q, n, D, I, flags, threads)
        np.testing.assert_array_equal(I, want_I)
        np.testing.assert_array_equal(D, want_D)
