"""Indexes of 4-bit models through the public API (docs/ARCHITECTURE.md, "Fast scan"): every layout edge (N around
the block of 32 rows, P not divisible by M, empty IVF lists, k > N), every option (metric, norm encoding, ids, allow,
rerank, SDC, n_probe, 1 and 2 threads, each SIMD level), against two oracles:

* NumPy brute force over the decoded words (tests/support/search_checks.py, ivf_checks.py: values within float32
  rounding, the right ids), and
* the 8-bit scan of the same words (``_kernels.scan`` / ``IvfLists`` over the unpacked codes), which the
  fast scan must equal bit for bit: the returned distances are the exact ADC distances, not the quantized sums.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ivf_checks
import ockstore
import search_checks
from ockstore import _kernels
from ockstore.search.codes import ByteCodes
from ockstore.search import scan as search_module

P = 10  # not divisible by M = 4 or 3
LEVELS = ("portable", "avx2", "avx512")
SIZES = [1, 5, 31, 32, 33, 64, 97]


def rng_vectors(n, seed, dim=P):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3.0, size=(6, dim)) + 1.0
    return (centres[rng.integers(0, 6, n)] + rng.normal(size=(n, dim))).astype(np.float32)


LEARN = rng_vectors(600, 1)
BASE = rng_vectors(max(SIZES), 2)
QUERIES = rng_vectors(5, 3)

MODELS = {
    ("ockm", "l2"): lambda: ockstore.OCKM(4, 2, 3, n_codewords=16, n_iter=2, seed=0),
    ("ockm", "ip"): lambda: ockstore.OCKM(4, 2, 3, n_codewords=16, metric="ip", n_iter=2, seed=0),
    ("ockm", "cosine"): lambda: ockstore.OCKM(3, 2, 2, n_codewords=16, metric="cosine", n_iter=2, seed=0),
    ("pq", "l2"): lambda: ockstore.PQ(3, n_codewords=16, n_iter=2, seed=0),
    ("eckm", "l2"): lambda: ockstore.ECKM(4, 3, n_codewords=8, n_iter=2, seed=0),  # K < 16: impossible words
}
CASES = [("ockm", "l2", "u8"), ("ockm", "l2", "f32"), ("ockm", "ip", "none"), ("ockm", "cosine", "none"),
         ("ockm", "cosine", "u8"), ("ockm", "cosine", "f32"),  # cosine scored as cosine: sums times 1 / ||x_hat||
         ("pq", "l2", "none"), ("eckm", "l2", "u8")]


@pytest.fixture(scope="module")
def fitted():
    return {key: make().fit(LEARN) for key, make in MODELS.items()}


def byte_scan(index, Q, k, *, distance="adc", allow_rows=None):
    """The 8-bit scan's (D, I) over the index's words unpacked (the oracle of exactness), as Index.search gives
    them (ids, scores for "ip" / "cosine")."""
    q = index.quantizer
    Qp = q._prepare(np.ascontiguousarray(Q, dtype=np.float32), "Q")
    ids = np.arange(len(index)) if index.ids is None else np.asarray(index.ids)
    bitmap = None if allow_rows is None else search_module.rows_bitmap(np.isin(np.arange(len(index)), allow_rows))
    rows = dataclasses.replace(index._code_rows(bitmap), codes=ByteCodes(index.codes))  # its norm terms, or scales
    D, R = search_module.search_codes(search_module.QueryTables(q), Qp, k, rows, distance=distance)
    I = np.where(R >= 0, ids[np.maximum(R, 0)], -1)
    return (D if q.metric == "l2" else -D), I


# ------------------------------------------------------------------------------------------------------ flat indexes

def test_a_4bit_model_is_stored_two_words_per_byte(fitted):
    q = ockstore.OCKM(n_subspaces=4, n_codebooks=2, beam_width=10, n_codewords=16, n_iter=1, seed=0).fit(LEARN)
    assert q.bits == 32 and q.code_size == 8 and q.encode(BASE[:3]).shape == (3, 8)
    index = ockstore.Index.from_vectors(q, BASE[:40])
    assert index.bytes_per_vector == 4 + 1  # 8 words in 4 bytes, plus the u8 norm term
    np.testing.assert_array_equal(index.codes, q.encode(BASE[:40]))
    assert ockstore.PQ(16, n_codewords=16).bits == 64 and ockstore.OCKM(8, 2, 10, n_codewords=16).bits == 64
    assert ockstore.OCKM(4, 2, 10).bits == 64  # 8-bit words: unchanged


@pytest.mark.parametrize("case", CASES, ids=search_checks.case_id)
@pytest.mark.parametrize("n", SIZES)
def test_flat_search_equals_the_8bit_scan_and_numpy(fitted, case, n):
    method, metric, encoding = case
    q = fitted[method, metric]
    ids = (np.arange(n) * 7 + 3)[::-1].copy()
    index = ockstore.Index.from_vectors(q, BASE[:n], ids, norm_encoding=encoding, store_vectors="float32")
    keys = search_checks.approx_keys(index, QUERIES, "adc")
    rows_of = search_checks.Rows(ids)
    scale = search_checks.tolerance_scale(QUERIES, q.decode(index.codes), metric)
    for k in (1, 10, n + 4):
        for threads in (1, 2):
            D, I = index.search(QUERIES, k, n_threads=threads, rerank=0)  # the scan's own values
            Db, Ib = byte_scan(index, QUERIES, k)
            np.testing.assert_array_equal(I, Ib)
            np.testing.assert_array_equal(D, Db)  # exact ADC distances, bit for bit
            search_checks.check_topk(D, I, keys, np.arange(n), k, metric, rows_of, scale)
    # SDC, allow (ids), rerank
    D, I = index.search(QUERIES, 5, distance="sdc", rerank=0)
    np.testing.assert_array_equal(I, byte_scan(index, QUERIES, 5, distance="sdc")[1])
    allowed_rows = np.arange(0, n, 3)
    D, I = index.search(QUERIES, 4, allow=ids[allowed_rows], n_threads=2, rerank=0)
    Db, Ib = byte_scan(index, QUERIES, 4, allow_rows=allowed_rows)
    np.testing.assert_array_equal(I, Ib)
    np.testing.assert_array_equal(D, Db)
    # re-ranking: the exact top 3 of the 12 candidates the scan ranks by its quantized bounds
    D, I = index.search(QUERIES, 3, rerank=12)
    exact = search_checks.exact_keys(BASE[:n], QUERIES, metric)
    Qp = q._prepare(np.ascontiguousarray(QUERIES), "Q")
    _, by_bound = search_module.search_codes(index._query_tables(), Qp, min(n, 12), index._code_rows(None),
                                             by_bound=True)
    candidates = search_checks.allowed_rows_of_candidates(np.where(by_bound >= 0, ids[np.maximum(by_bound, 0)], -1),
                                                          rows_of)
    search_checks.check_topk(D, I, exact, candidates, 3, metric, rows_of, scale)


@pytest.mark.parametrize("level", LEVELS)
def test_every_simd_level_gives_the_same_results(fitted, level):
    """Each level this CPU runs, switched in process (the environment switch OCKSTORE_SIMD, in a fresh process:
    tests/kernels/test_kernels_simd.py, whose run_every_kernel searches 4-bit models too)."""
    if level not in LEVELS[:LEVELS.index(_kernels._best_simd_level()) + 1]:
        pytest.skip(f"this CPU does not run {level}")
    index = ockstore.Index.from_vectors(fitted["ockm", "l2"], BASE, norm_encoding="u8")
    expected = index.search(QUERIES, 7)
    best = _kernels._best_simd_level()
    try:
        _kernels._set_simd_level(level)
        for threads in (1, 2):
            got = index.search(QUERIES, 7, n_threads=threads)
            np.testing.assert_array_equal(got[0], expected[0])
            np.testing.assert_array_equal(got[1], expected[1])
    finally:
        _kernels._set_simd_level(best)


def test_file_round_trip_and_the_writers_agree(fitted, tmp_path):
    """build_index, IndexWriter in chunks that split blocks, Index.save: the same bytes (I10, F4); the file opens
    with the words, norms and ids it was given, and searches as the index in memory."""
    q = fitted["ockm", "l2"]
    ids = np.arange(97) * 2
    index = ockstore.Index.from_vectors(q, BASE, ids, store_vectors="float16")
    index.save(tmp_path / "saved.ock")
    ockstore.build_index(tmp_path / "built.ock", q, BASE, ids, store_vectors="float16")
    with ockstore.IndexWriter(tmp_path / "chunks.ock", q, store_vectors="float16") as writer:
        for start, stop in ((0, 5), (5, 40), (40, 41), (41, 97)):
            writer.add(BASE[start:stop], ids[start:stop])
    data = (tmp_path / "saved.ock").read_bytes()
    assert data == (tmp_path / "built.ock").read_bytes() == (tmp_path / "chunks.ock").read_bytes()
    with ockstore.open_index(tmp_path / "saved.ock") as opened:
        opened.verify()
        assert opened.info()["format_version"] == "1.3" and opened.info()["K"] == 16
        np.testing.assert_array_equal(opened.codes, index.codes)
        np.testing.assert_array_equal(opened.norms, index.norms)
        for options in ({}, {"distance": "sdc"}, {"rerank": 20}, {"allow": ids[::5]}):
            for got, want in zip(opened.search(QUERIES, 6, **options), index.search(QUERIES, 6, **options)):
                np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------------------------------------------ inverted file

def ivf_byte_scan(index, Q, k, n_probe, distance="adc"):
    """The 8-bit IVF scan of the unpacked words (``IvfLists`` over them), as IVFIndex.search gives it."""
    ivf = index.quantizer
    Qp = ivf._prepare(np.ascontiguousarray(Q, dtype=np.float32), "Q")
    if distance == "sdc":  # the queries' reconstructions (cosine: at unit length again, as IVFIndex scans them)
        Qp = np.ascontiguousarray(ivf_checks.query_vectors(index, Q, "sdc"), dtype=np.float32)
    D, R = ivf_checks.search_lists(ivf_checks.index_lists(index, index.codes), Qp, k, n_probe)
    I = np.where(R >= 0, np.asarray(index.ids)[np.maximum(R, 0)], -1)
    return (D if ivf.metric == "l2" else -D), I


@pytest.mark.parametrize("metric, encoding", [("l2", "u8"), ("l2", "f32"), ("ip", "none"), ("cosine", "none"),
                                              ("cosine", "u8"), ("cosine", "f32")])
def test_ivf_with_empty_lists_equals_the_8bit_scan_and_numpy(metric, encoding):
    ivf = ockstore.IVF(16, ockstore.OCKM(4, 2, 3, n_codewords=16, metric=metric, n_iter=2, seed=0),
                       n_iter=4, seed=1).fit(LEARN)
    X = BASE[:45]
    ids = np.arange(45) * 5 + 1
    index = ockstore.Index.from_vectors(ivf, X, ids, norm_encoding=encoding)
    sizes = np.diff(index.list_offsets)
    assert (sizes == 0).any() and (sizes > 32).any() or (sizes % 32 != 0).any()
    Qv = ivf_checks.prepared(QUERIES, metric)
    keys = ivf_checks.approx_keys(index, Qv)
    rows_of = search_checks.Rows(index.ids)  # rows in list order
    scale = search_checks.tolerance_scale(QUERIES, X, metric)
    for n_probe in (1, 3, 16):
        lists = ivf_checks.checked_probe(ivf, Qv.astype(np.float32), Qv, n_probe)
        for k in (1, 8, 50):
            for threads in (1, 2):
                D, I = index.search(QUERIES, k, n_probe=n_probe, n_threads=threads)
                Db, Ib = ivf_byte_scan(index, QUERIES, k, n_probe)
                np.testing.assert_array_equal(I, Ib)
                np.testing.assert_array_equal(D, Db)
                search_checks.check_topk(D, I, keys, ivf_checks.probed_rows(index, lists), k, metric, rows_of,
                                         scale)
    D, I = index.search(QUERIES, 5, n_probe=4, distance="sdc")
    Db, Ib = ivf_byte_scan(index, QUERIES, 5, 4, distance="sdc")
    np.testing.assert_array_equal(I, Ib)
    np.testing.assert_array_equal(D, Db)


def test_ivf_file_round_trip(tmp_path):
    ivf = ockstore.IVF(8, ockstore.OCKM(4, 2, 3, n_codewords=16, n_iter=2, seed=0), n_iter=3, seed=0).fit(LEARN)
    index = ockstore.Index.from_vectors(ivf, BASE, store_vectors="float32")
    index.save(tmp_path / "a.ock")
    with ockstore.IndexWriter(tmp_path / "b.ock", ivf, store_vectors="float32") as writer:
        for start in range(0, len(BASE), 13):
            writer.add(BASE[start:start + 13])
    assert (tmp_path / "a.ock").read_bytes() == (tmp_path / "b.ock").read_bytes()
    with ockstore.open_index(tmp_path / "a.ock") as opened:
        opened.verify()
        assert isinstance(opened, ockstore.IVFIndex)
        np.testing.assert_array_equal(opened.codes, index.codes)
        np.testing.assert_array_equal(opened.list_offsets, index.list_offsets)
        for options in ({"n_probe": 3}, {"n_probe": 8, "rerank": 30}, {"n_probe": 2, "allow": np.arange(0, 97, 4)}):
            for got, want in zip(opened.search(QUERIES, 6, **options), index.search(QUERIES, 6, **options)):
                np.testing.assert_array_equal(got, want)
