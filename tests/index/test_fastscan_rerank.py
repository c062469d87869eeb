"""Re-ranking of 4-bit (fast-scan) indexes: the fast scan keeps the candidates, the compiled re-ranking loop keeps
the k best by exact value (search.search_codes, ivf_index.search_block_lists; docs/ARCHITECTURE.md, "Search" and
"Fast scan"). Checked against two oracles:

* NumPy brute force over the stored representation (sq8: lo + step * code), when every row is a candidate (the
  default rerank = 10 k >= N, every list probed), and over the candidates of the scan otherwise;
* the byte-code path of the same words (``_kernels.scan`` / ``IvfLists`` re-ranking inside the kernel), which the
  fast-scan path must equal bit for bit: the same candidates, the same loop.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ockstore
from index_files import parts_of
from ockstore import _kernels
from ockstore.search import rerank as _rerank
import ivf_checks
from ockstore.search import scan as search_module
from ockstore.search.codes import CodeBlocks
from ockstore.quantizers.sq8 import sq8_decode
from search_checks import Rows, allowed_rows_of_candidates, check_topk, exact_keys, tolerance_scale

P = 10
K = 6  # default rerank: 60 candidates


def vectors(n, seed):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3.0, size=(5, P)) + 1.0
    return (centres[rng.integers(0, 5, n)] + rng.normal(size=(n, P))).astype(np.float32)


LEARN = vectors(500, 1)
BASE = vectors(400, 2)
QUERIES = vectors(7, 3)


def model(kind, metric):
    fine = ockstore.OCKM(4, 2, 3, n_codewords=16, metric=metric, n_iter=2, seed=0)
    return (fine if kind == "flat" else ockstore.IVF(8, fine, n_iter=3, seed=0)).fit(LEARN)


def every_list(index):
    return {"n_probe": index.n_lists} if isinstance(index, ockstore.IVFIndex) else {}


@pytest.mark.parametrize("store", ["sq8", "uint8", "float16"])
@pytest.mark.parametrize("metric", ["l2", "ip", "cosine"])
@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_default_rerank_of_a_small_4bit_index_is_brute_force(kind, metric, store):
    """N <= 10 k and every list probed: every row is a candidate, so the default re-ranking returns the exact top k
    over the stored representation, for ADC, SDC, an allow filter and 1 or 2 threads."""
    base = BASE[:55]
    if store == "uint8":
        base = np.clip(np.round(base * 10 + 100), 0, 255).astype(np.float32)
    ids = np.arange(55) * 3 + 11
    index = ockstore.Index.from_vectors(model(kind, metric), base, ids, store_vectors=store)
    assert isinstance(index._codes, CodeBlocks)  # the fast-scan layout
    stored = (sq8_decode(index.vectors, index.quantizer.value_ranges) if store == "sq8"
              else np.asarray(index.vectors, dtype=np.float64))
    Q = QUERIES * 10 + 100 if store == "uint8" else QUERIES
    exact = exact_keys(stored, Q, metric)
    rows_of = Rows(index.ids)
    scale = tolerance_scale(Q, stored, metric)
    allowed = np.arange(0, 55, 2)
    for options, rows in (({}, np.arange(55)), ({"distance": "sdc"}, np.arange(55)),
                          ({"allow": np.asarray(index.ids)[allowed]}, allowed)):
        for threads in (1, 2):
            D, I = index.search(Q, K, n_threads=threads, **options, **every_list(index))
            check_topk(D, I, exact, rows, K, metric, rows_of, scale)
            D10, I10 = index.search(Q, K, rerank=10 * K, n_threads=threads, **options, **every_list(index))
            np.testing.assert_array_equal(D, D10)  # the default is rerank = 10 k
            np.testing.assert_array_equal(I, I10)


def smallest_sums(index, Qp, R, first_row, n_rows, first_block):
    """The oracle of a re-ranked fast scan's candidates within one run of rows (the whole flat index, or one list):
    the R rows of the smallest quantized sums, equal sums by row number (their bounds c0 + scale * S rank alike
    within a run when no float32 norm or scale enters them), from the sums of every row (``fastscan_sums``, checked
    against the portable sums in tests/kernels)."""
    rows = index._code_rows(None)
    n_blocks = -(-n_rows // 32)
    blocks = np.ascontiguousarray(rows.codes.blocks[first_block:first_block + n_blocks])
    norm_codes = None
    if rows.norm_codes is not None:
        norm_codes = np.zeros(n_blocks * 32, dtype=np.uint8)
        norm_codes[:n_rows] = rows.norm_codes[first_row:first_row + n_rows]
    out = []
    for q in range(Qp.shape[0]):
        sums = np.empty((n_blocks, 32), dtype=np.uint16)
        _kernels.fastscan_sums(index._query_tables().model, Qp[q:q + 1], blocks, norm_codes,
                               rows.norm_levels if norm_codes is not None else None, sums)
        order = np.lexsort((np.arange(n_rows), sums.reshape(-1)[:n_rows]))
        out.append(np.sort(order[:R]) + first_row)
    return out


@pytest.mark.parametrize("metric", ["l2", "ip", "cosine"])
@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_rerank_of_the_fast_scan_reranks_the_rows_of_smallest_bounds(kind, metric):
    """N > 10 k: the scan ranks the rows by their quantized lower bounds alone (no exact ADC: re-ranking replaces
    it) and keeps R; the results are the k best of those candidates by exact value (the compiled loop, and brute
    force over them); where the bounds rank as the sums do (no float32 norm, no scale), the candidates are the R
    smallest sums."""
    index = ockstore.Index.from_vectors(model(kind, metric), BASE, store_vectors="sq8")
    assert isinstance(index._codes, CodeBlocks)
    stored = index._stored_vectors()
    Qp = index.quantizer._prepare(np.ascontiguousarray(QUERIES), "Q")
    rows = index._code_rows(None)
    R = 10 * K
    if kind == "flat":
        got_d, got_r = search_module.search_codes(index._query_tables(), Qp, K, rows, rerank=(stored, R))
        _, candidates = search_module.search_codes(index._query_tables(), Qp, R, rows, by_bound=True)
        runs = [(0, len(index), 0)] * len(QUERIES)
    else:
        ivf, n_probe = index.quantizer, 1
        got_d, got_r = ivf_checks.search_lists(ivf_checks.index_lists(index), Qp, K, n_probe, rerank=(stored, R))
        candidates = np.stack([_search_candidates_of_list(index, Qp[q:q + 1], R, n_probe)
                               for q in range(len(QUERIES))])
        offsets, run_blocks = index.list_offsets, rows.codes.run_blocks
        runs = [(int(offsets[l]), int(offsets[l + 1] - offsets[l]), int(run_blocks[l]))
                for l in ivf._probe(Qp, n_probe)[0][:, 0]]
    want_d, want_r = _rerank.rerank_candidates(Qp, candidates, stored, K, 1)
    np.testing.assert_array_equal(got_d, want_d)
    np.testing.assert_array_equal(got_r, want_r)
    if rows.norms is None and not rows.norm_scales:
        for q, (first_row, n_rows, first_block) in enumerate(runs):
            if n_rows <= R:
                continue
            want = smallest_sums(index, Qp[q:q + 1], R, first_row, n_rows, first_block)[0]
            np.testing.assert_array_equal(np.sort(candidates[q]), want)
    # and through the public API, against brute force over each query's candidates
    D, I = index.search(QUERIES, K, **({"n_probe": 1} if kind == "ivf" else {}))
    ids = np.arange(len(index)) if index.ids is None else np.asarray(index.ids)
    np.testing.assert_array_equal(I, np.where(want_r >= 0, ids[np.maximum(want_r, 0)], -1))
    represented = sq8_decode(index.vectors, index.quantizer.value_ranges)
    row_numbers = Rows(np.arange(len(index)))
    check_topk(D, want_r, exact_keys(represented, QUERIES, metric),
               allowed_rows_of_candidates(candidates, row_numbers), K, metric, row_numbers,
               tolerance_scale(QUERIES, represented, metric))


def _search_candidates_of_list(index, Qp, R, n_probe):
    """The R candidates a re-ranked IVF fast scan keeps for one query (the scan ranked by bound)."""
    return ivf_checks.search_lists(ivf_checks.index_lists(index), Qp, R, n_probe, by_bound=True)[1][0]


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_4bit_index_with_sq8_vectors_round_trips(kind, tmp_path):
    """A fast-scan file of sq8 vectors holds both code_blocks (section 16) and value_ranges (section 17), is of
    format 1.3, opens with the same words, codes and ranges, and searches as the index in memory."""
    index = ockstore.Index.from_vectors(model(kind, "l2"), BASE, store_vectors="sq8")
    index.save(tmp_path / "a.ock")
    ockstore.build_index(tmp_path / "b.ock", index.quantizer, BASE, store_vectors="sq8")
    assert (tmp_path / "a.ock").read_bytes() == (tmp_path / "b.ock").read_bytes()
    meta, sections, _ = parts_of(tmp_path / "a.ock")
    assert meta["kind"] == ("fastscan-index" if kind == "flat" else "ivf-fastscan-index")
    assert "code_blocks" in sections and "codes" not in sections and "value_ranges" in sections
    with ockstore.open_index(tmp_path / "a.ock") as opened:
        opened.verify()
        assert opened.info()["format_version"] == "1.3" and opened.store_vectors == "sq8"
        np.testing.assert_array_equal(opened.codes, index.codes)
        np.testing.assert_array_equal(opened.vectors, index.vectors)
        np.testing.assert_array_equal(opened.quantizer.value_ranges, index.quantizer.value_ranges)
        probe = every_list(index)
        for options in ({}, {"rerank": 0}, {"distance": "sdc"}, {"allow": np.arange(0, 400, 3)}):
            for got, want in zip(opened.search(QUERIES, K, **options, **probe), index.search(QUERIES, K, **options,
                                                                                            **probe)):
                np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_a_bad_stored_row_among_the_candidates_is_named(kind):
    """The compiled loop flags a non-finite stored row among the fast scan's candidates; the search names it (the
    FormatError of the vectors section, as the byte-code path does) instead of returning it."""
    good = ockstore.Index.from_vectors(model(kind, "l2"), BASE, store_vectors="float32")
    vectors = np.array(good.vectors)
    vectors[5] = np.nan
    if kind == "ivf":
        index = ockstore.IVFIndex(good.quantizer, good.codes, good.norms, good.ids, good.list_offsets,
                                  good.norm_encoding, vectors=vectors)
    else:
        index = ockstore.Index(good.quantizer, good.codes, good.norms, good.ids, good.norm_encoding, vectors=vectors)
    ids = np.arange(len(good)) if good.ids is None else np.asarray(good.ids)
    with pytest.raises(ockstore.errors.FormatError, match="row 5 holds NaN"):
        index.search(BASE[ids[5]][None, :], K, **every_list(index))
    for _ in range(2):  # one query per call (the second through the kept compiled search of an inverted file)
        with pytest.raises(ockstore.errors.FormatError, match="row 5 holds NaN"):
            index.search(np.ascontiguousarray(BASE[ids[5]], dtype=np.float32), K, **every_list(index))
