"""Collections (docs/FORMAT.md section 13, rules C1-C14; docs/ARCHITECTURE.md "Collections"): searches that equal
one search over an index of the live rows (the oracle of collection_model.py: the same codes, so the same values bit
for bit), the scan of segments and the exact merge, add / upsert / delete / compact and the ids, the merge policy.

The folder, the lock, snapshots and damaged folders are tests/collection/test_collection_folder.py; what stays on
disk (old generations, vacuum) is tests/collection/test_collection_disk.py; the property
test (random sequences of operations) is tests/collection/test_collection_state.py; crashes (SIGKILL) and readers in
other processes are tests/collection/test_collection_crash.py; the command line is tests/cli/test_collection_cli.py.
"""

from __future__ import annotations

import io
import os
import tracemalloc

import types

import numpy as np
import pytest

import ockstore
from ockstore import _kernels
from ockstore import collection as coll
from ockstore.search import scan as search_module
from ockstore.collection import names, segments
from ockstore.search import searcher as searcher_module
from ockstore.search.options import search_options
from ockstore.collection import snapshot as snapshot_module
from ockstore.storage import writer as storage_writer
from collection_model import P, Model, assert_same_search, populated, reference_index, vectors
from collection_model import q, quantizers  # noqa: F401 - pytest fixtures


# ====================================================================================================================
# searches equal one index of the live rows (C13)


@pytest.mark.parametrize("name, norm_encoding", [("ockm", "u8"), ("ockm", "f32"), ("pq", None), ("ockm-ip", None),
                                                 ("pq-cosine", None)])
def test_search_equals_one_index_of_the_live_rows(quantizers, tmp_path, name, norm_encoding):
    """C13: every option on a collection of several segments with deletions gives exactly the results (values, ids,
    order) of one index holding the live rows."""
    quantizer = quantizers[name]
    c, model = populated(tmp_path / "c", quantizer, store_vectors="float16", norm_encoding=norm_encoding)
    ref = reference_index(quantizer, model, norm_encoding=norm_encoding, store_vectors="float16")
    Q = vectors(15, 7)
    live = model.live_ids()
    for k in (1, 10, len(model), len(model) + 25):
        assert_same_search(c, ref, Q, k)
    for options in ({"distance": "sdc"}, {"rerank": 0}, {"rerank": 30}, {"rerank": 30, "distance": "sdc"}, {"n_threads": 2},
                    {"allow": live[::4]}, {"allow": live[::4], "rerank": 20}, {"allow": [live[3], -5, 10**12]},
                    {"allow": np.array([], dtype=np.int64)}, {"allow": live[::2].astype(np.uint64)}):
        assert_same_search(c, ref, Q, 10, **options)
    D1, I1 = c.search(Q[0], 5)  # one 1-D query: 1-D results (re-ranked by default: the collection stores vectors)
    D2, I2 = ref.search(Q[0], 5, rerank=50)
    assert D1.shape == I1.shape == (5,) and np.array_equal(I1, I2) and np.array_equal(D1, D2)
    # the user's vectors, indexed by id, for rerank (here: the model's)
    by_id = np.zeros((int(live.max()) + 1, P), dtype=np.float32)
    by_id[live] = model.rows()[0]
    ref32 = reference_index(quantizer, model, norm_encoding=norm_encoding, store_vectors="float32")
    D1, I1 = c.search(Q, 10, rerank=40, vectors=by_id)
    D2, I2 = ref32.search(Q, 10, rerank=40)
    assert np.array_equal(I1, I2) and np.array_equal(D1, D2)
    c.close()


@pytest.mark.parametrize("n_codewords", [32, 16], ids=["bytes", "fastscan"])
def test_the_parts_of_one_search_equal_one_scan_of_their_union(n_codewords):
    """search.searcher.Parts: indexes of one model (a collection's segments) searched by one kernel call (one
    collector per query over every part: a flat model's one list of every row) give exactly the results of one index
    of their rows, ties included (duplicated codes in different parts); the candidates' handles name each row's part
    and row; a part's own rows (a segment's live ones) and a call's bitmaps restrict the scan."""
    model = ockstore.OCKM(3, 2, 4, n_codewords=n_codewords, n_iter=2, seed=0).fit(vectors(1200, 9))
    X = vectors(900, 3)
    X[500:520] = X[100:120]  # equal codes in two parts: equal distances, ordered by id
    ids = np.random.default_rng(0).permutation(900).astype(np.int64)
    whole = ockstore.Index.from_vectors(model, X, ids, store_vectors="float32")
    Q = vectors(7, 4)
    cuts = [0, 100, 480, 510, 900]
    pieces = [ockstore.Index.from_vectors(model, X[a:b], ids[a:b], store_vectors="float32")
              for a, b in zip(cuts, cuts[1:])]
    live = np.random.default_rng(1).random(900) < 0.8
    cases = [(None, np.ones(900, bool)), ([search_module.rows_bitmap(live[a:b]) for a, b in zip(cuts, cuts[1:])], live)]
    for bitmaps, allowed in cases:
        parts = searcher_module.Parts(model, pieces, live=bitmaps)
        source = types.SimpleNamespace(_search_parts=lambda parts=parts: parts)
        for k in (1, 5, 40, 1000):
            for distance in ("adc", "sdc"):
                for rerank in (0, max(k, 50)):
                    opts = search_options(model, 900, k, distance=distance, rerank=rerank, stored_vectors=True)
                    D, I = searcher_module.Searcher(source, opts).search(Q)
                    D2, I2 = whole.search(Q, k, distance=distance, rerank=rerank, allow=ids[allowed])
                    assert np.array_equal(I, I2) and np.array_equal(D, D2)
                opts = search_options(model, 900, k, distance=distance, rerank=0)
                _, handles = searcher_module.Searcher(source, opts).candidates(Q, k)
                found = handles >= 0
                part, rows = handles >> searcher_module.PART_SHIFT, handles & searcher_module.ROW_MASK
                starts = np.array(cuts[:-1])
                assert np.array_equal(ids[starts[part[found]] + rows[found]],
                                      whole._candidates(Q, k, distance=distance, allow=ids[allowed])[1][found])


def test_the_scan_bound_keeps_only_codes_below_it(q):
    """_kernels.scan(bound=...): the results are those below the bound, the other slots (bound, -1)."""
    X = vectors(3000, 5)
    index = ockstore.Index.from_vectors(q, X)
    tables = search_module.QueryTables(q)
    Q = vectors(3, 6)
    D, I = index.search(Q, 50)
    for n_threads, rows in ((1, 3), (2, 1)):  # groups of queries; one query's blocks split over threads
        bound = D[:rows, 20].copy()  # the 21st best distance (codes at it do not enter: ties included)
        out_d = np.empty((rows, 50), np.float32)
        out_r = np.empty((rows, 50), np.int64)
        _kernels.scan(tables.model, Q[:rows], None, index.codes, None, index.norms,
                             np.asarray(q.norm_levels, np.float32), None, None, out_d, out_r, n_threads, bound)
        for qi in range(rows):
            n = int((D[qi] < bound[qi]).sum())
            assert 0 < n <= 20
            assert np.array_equal(out_r[qi, :n], I[qi, :n]) and np.array_equal(out_d[qi, :n], D[qi, :n])
            assert (out_r[qi, n:] == -1).all() and (out_d[qi, n:] == bound[qi]).all()


@pytest.mark.parametrize("fraction", [0.02, 0.2, 0.3, 0.9, 0.999])
def test_filters_of_any_density_give_the_top_k_of_the_allowed_rows(q, fraction):
    """The scan reads the allowed rows of a sparse block one by one and scans a mostly allowed block whole (testing
    the bits of the codes that may enter): both give exactly the results of an index of the allowed rows only. The
    collections' deletions are such filters (most rows allowed)."""
    X = vectors(9000, 12)
    ids = np.random.default_rng(1).permutation(9000).astype(np.int64) + 7
    index = ockstore.Index.from_vectors(q, X, ids, norm_encoding="f32")
    mask = np.random.default_rng(2).random(9000) < fraction
    mask[:2048] = np.random.default_rng(3).random(2048) < 0.1  # one sparse block whatever the fraction
    allowed = ockstore.Index.from_vectors(q, X[mask], ids[mask], norm_encoding="f32")
    for n_threads in (1, 2):
        for Q in (vectors(6, 13), vectors(1, 14)):  # batches (groups of queries) and one query (blocks split)
            D1, I1 = index.search(Q, 25, allow=mask, n_threads=n_threads)
            D2, I2 = allowed.search(Q, 25)
            assert np.array_equal(I1, I2) and np.array_equal(D1, D2)


def test_search_of_an_empty_collection_pads(q, tmp_path):
    with ockstore.create_collection(tmp_path / "c", q) as c:
        D, I = c.search(vectors(3, 2), 4)
        assert D.shape == (3, 4) and np.isinf(D).all() and (I == -1).all()
        c.add(vectors(2, 3))
        c.delete([0, 1])
        assert c.info()["segments"] == 0  # C5: a segment without live rows is dropped
        D, I = c.search(vectors(3, 2), 4)
        assert (I == -1).all()


def test_search_option_errors(q, tmp_path):
    c, model = populated(tmp_path / "c", q)
    Q = vectors(2, 5)
    with pytest.raises(TypeError, match="allow must be an array of ids on a collection"):
        c.search(Q, 3, allow=np.ones(len(model), dtype=bool))
    with pytest.raises(ValueError, match="rerank needs the original vectors"):
        c.search(Q, 3, rerank=10)
    with pytest.raises(ValueError, match="rerank"):
        c.search(Q, 3, rerank=2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'n_probes'"):
        c.search(Q, 3, n_probes=4)
    with pytest.raises(ValueError, match="vectors has 3 rows"):
        c.search(Q, 3, rerank=5, vectors=np.zeros((3, P)))
    with pytest.raises(ValueError, match="Q has dimension 4"):
        c.search(np.zeros((2, 4)), 3)
    with pytest.raises(ValueError, match="k = 70000 is too large"):
        c.search(Q, 70_000)
    with pytest.raises(ValueError, match="distance"):
        c.search(Q, 3, distance="l2")


def test_rerank_checks_given_vectors_and_reports_damaged_stored_ones(q, tmp_path):
    """vectors= given to a re-ranking search: values beyond +-1e15 (or NaN) raise ValueError naming ``vectors`` and
    the row (the id); NaN in a segment's stored vectors is damage: FormatError naming the segment file and section."""
    c = ockstore.create_collection(tmp_path / "c", q, store_vectors="float32")
    model = Model(P)
    for n, seed in ((30, 1), (20, 2)):
        model.add(vectors(n, seed), c.add(vectors(n, seed), np.arange(n) * 3 + 100 * seed))
    Q = vectors(2, 5)
    X, live = model.rows()
    given = np.zeros((int(live.max()) + 1, P))
    given[live] = X
    for value in (1e20, np.nan):
        bad = given.copy()
        bad[live[3], 0] = value
        with pytest.raises(ValueError, match=f"vectors row {live[3]} ") as info:
            c.search(Q, 3, rerank=len(model), vectors=bad)
        assert not isinstance(info.value, ockstore.FormatError)
    c.search(Q, 3, rerank=len(model), vectors=given)
    segment = c.info()["segment_files"][0]["file"]
    c.close()
    path = tmp_path / "c" / segment
    with ockstore.storage.open_file(path) as mf:
        offset = mf.section_info("vectors")["offset"]
    data = bytearray(path.read_bytes())
    data[offset + 4 * P * 2:offset + 4 * P * 2 + 4] = np.float32(np.nan).tobytes()  # row 2 of the segment
    path.write_bytes(bytes(data))
    with ockstore.open_collection(tmp_path / "c") as reader:
        with pytest.raises(ockstore.FormatError, match=f"{segment}.*non-finite values: section 'vectors': row 2"):
            reader.search(Q, 3, rerank=len(model))


# ====================================================================================================================
# add, upsert, delete, ids (C8)


def test_ids_continue_after_the_largest_ever_assigned(q, tmp_path):
    """C8: without ids, new ids follow the largest id ever assigned, deleted ones included, across reopenings."""
    path = tmp_path / "c"
    with ockstore.create_collection(path, q) as c:
        assert c.add(vectors(3, 1)).tolist() == [0, 1, 2]
        assert c.add(vectors(2, 2), ids=[50, 10]).tolist() == [50, 10]
        assert c.add(vectors(2, 3)).tolist() == [51, 52]
        assert c.delete([51, 52]) == 2
        assert c.next_id == 53
    with ockstore.open_collection(path, "a") as c:
        assert c.add(vectors(1, 4)).tolist() == [53]
        one = c.add(vectors(1, 5)[0])  # one 1-D vector: one id
        assert one == 54 and np.ndim(one) == 0
        assert c.ids().tolist() == [0, 1, 2, 10, 50, 53, 54]


def test_add_refuses_duplicate_and_live_ids_and_adds_nothing(q, tmp_path):
    c, model = populated(tmp_path / "c", q)
    before = (c.generation, sorted(os.listdir(tmp_path / "c")))
    live = int(model.live_ids()[0])
    with pytest.raises(ValueError, match="ids must be unique: id 5 appears more than once"):
        c.add(vectors(3, 1), ids=[5, 6, 5])
    with pytest.raises(ValueError, match=f"id {live} is already in the collection"):
        c.add(vectors(2, 1), ids=[123_456_789, live])
    with pytest.raises(ValueError, match="ids must be unique"):
        c.upsert(vectors(2, 1), ids=[9, 9])
    with pytest.raises(ValueError, match="ids must have shape"):
        c.add(vectors(2, 1), ids=[1, 2, 3])
    with pytest.raises(ValueError, match=">= 0"):
        c.add(vectors(1, 1), ids=[-3])
    with pytest.raises(TypeError, match="ids must be an integer array"):
        c.add(vectors(1, 1), ids=[1.5])
    with pytest.raises(ValueError, match="X has dimension 3"):
        c.add(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="NaN"):
        c.add(np.full((2, P), np.nan))
    with pytest.raises(TypeError, match="upsert needs ids"):
        c.upsert(vectors(1, 1), None)
    assert (c.generation, sorted(os.listdir(tmp_path / "c"))) == before  # no commit, no file left behind
    assert np.array_equal(c.ids(), model.live_ids())


def test_delete_counts_live_ids_and_ignores_unknown_ones(q, tmp_path):
    c, model = populated(tmp_path / "c", q)
    live = model.live_ids()
    generation = c.generation
    assert c.delete([10**15, 424242]) == 0 and c.generation == generation  # nothing deleted: no commit
    assert c.delete(np.array([live[0], live[0], live[1], 10**15])) == 2 == model.delete(live[:2])
    assert c.generation == generation + 1
    assert c.delete([live[0]]) == 0  # already deleted
    assert c.delete(live[2]) == 1 == model.delete([live[2]])  # one id as a scalar
    assert c.delete([]) == 0
    with pytest.raises(ValueError, match="ids must be >= 0"):
        c.delete([-1])
    with pytest.raises(TypeError, match="ids must be an integer array"):
        c.delete([1.0])
    with pytest.raises(ValueError, match="ids must have shape"):
        c.delete([[1, 2]])
    assert np.array_equal(c.ids(), model.live_ids())


def test_upsert_replaces_and_adds_in_one_commit(q, tmp_path):
    c, model = populated(tmp_path / "c", q, store_vectors="float32")
    generation = c.generation
    ids = np.concatenate([model.live_ids()[:3], [123_123_123]])
    X = vectors(4, 55)
    c.upsert(X, ids)
    model.upsert(X, ids)
    assert c.generation == generation + 1 and len(c) == len(model)
    ref = reference_index(q, model, store_vectors="float32")
    assert_same_search(c, ref, X, 3)
    assert_same_search(c, ref, X, 3, rerank=10)


def test_compact_copies_codes_and_drops_deleted_rows(q, tmp_path):
    """Compaction copies the stored bytes of every live row (no re-encoding) into one segment."""
    c, model = populated(tmp_path / "c", q, store_vectors="float16")
    by_id = {}
    for view in c._snap.views:
        index = view.index
        for row, i in enumerate(index.ids):
            by_id[int(i)] = (bytes(index.codes[row]), bytes(index.norms[row:row + 1]), bytes(index.vectors[row]))
    generation = c.generation
    c.compact()
    assert c.generation == generation + 1
    info = c.info()
    assert info["segments"] == 1 and info["deleted"] == 0 and info["N"] == len(model)
    with ockstore.open_index(tmp_path / "c" / info["segment_files"][0]["file"]) as seg:
        assert sorted(seg.ids.tolist()) == model.live_ids().tolist()
        for row, i in enumerate(seg.ids):
            assert by_id[int(i)] == (bytes(seg.codes[row]), bytes(seg.norms[row:row + 1]), bytes(seg.vectors[row]))
    assert_same_search(c, reference_index(q, model, store_vectors="float16"), vectors(10, 3), 10, rerank=25)
    c.compact()  # one segment, nothing deleted: nothing to do, no commit
    assert c.generation == generation + 1
    c.verify()


def test_compaction_memory_is_bounded_by_the_step(q, tmp_path, monkeypatch):
    """Merging copies COPY_ROWS rows per step (and the container copies its spill files CHUNK_BYTES at a time): with
    both small, Python's peak allocation during a compaction does not grow with the rows merged."""
    monkeypatch.setattr(segments, "COPY_ROWS", 500)
    monkeypatch.setattr(storage_writer, "CHUNK_BYTES", 1 << 16)

    def compaction(n, folder):
        with ockstore.create_collection(tmp_path / folder, q, store_vectors="float32", merge_factor=100) as c:
            for seed in range(4):
                c.add(vectors(n, seed))
            c.delete(np.arange(0, 4 * n, 3))
            total = sum(os.path.getsize(tmp_path / folder / s["file"]) for s in c.info()["segment_files"])
            tracemalloc.start()
            try:
                c.compact()
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert c.info()["segments"] == 1 and len(c) == 4 * n - len(range(0, 4 * n, 3))
        return peak, total

    small, _ = compaction(2000, "small")
    peak, total = compaction(16000, "large")
    assert peak < 1.5 * small and peak < total / 4, (small, peak, total)


def test_reader_cannot_change_and_closed_collection_refuses(q, tmp_path):
    c, _ = populated(tmp_path / "c", q)
    with ockstore.open_collection(tmp_path / "c") as r:
        for call in (lambda: r.add(vectors(1, 1)), lambda: r.delete([1]), lambda: r.compact(), lambda: r.vacuum(),
                     lambda: r.upsert(vectors(1, 1), [1])):
            with pytest.raises(io.UnsupportedOperation, match="read-only"):
                call()
    assert r.closed
    with pytest.raises(ValueError, match="closed collection"):
        r.search(vectors(1, 1), 1)
    c.close()
    c.close()
    with pytest.raises(ValueError, match="closed collection"):
        len(c)
    with pytest.raises(ValueError, match="mode must be 'r' or 'a'"):
        ockstore.open_collection(tmp_path / "c", "w")


# ====================================================================================================================
# merge policy and the exact merge


def test_merge_topk_is_the_top_k_of_the_union():
    rng = np.random.default_rng(0)
    for descending in (False, True):
        parts = []
        for width in (5, 0, 3, 8):
            D = rng.integers(0, 6, size=(7, width)).astype(np.float32)  # many exact ties
            I = rng.choice(1000, size=(7, width), replace=False) if width else np.empty((7, 0), np.int64)
            I = np.asarray(I, dtype=np.int64).reshape(7, width)
            if width == 8:
                D[:, 6:] = -np.inf if descending else np.inf
                I[:, 6:] = -1
            parts.append((D, I))
        D, I, part = coll.merge_topk(parts, 20, descending=descending, return_part=True)
        for qi in range(7):
            pool = [(d, i, p) for p, (Dp, Ip) in enumerate(parts) for d, i in zip(Dp[qi], Ip[qi]) if i >= 0]
            pool.sort(key=lambda t: (-t[0] if descending else t[0], t[1]))
            assert I[qi, :len(pool)].tolist() == [t[1] for t in pool]
            assert D[qi, :len(pool)].tolist() == [t[0] for t in pool]
            assert part[qi, :len(pool)].tolist() == [t[2] for t in pool]
            assert (I[qi, len(pool):] == -1).all() and (part[qi, len(pool):] == -1).all()
            assert (D[qi, len(pool):] == (-np.inf if descending else np.inf)).all()
    D, I = coll.merge_topk([], 3, n_queries=2)
    assert D.shape == (2, 3) and (I == -1).all()


def test_size_tiered_policy_bounds_the_segments():
    """A million single-row adds leave O(log N) segments: the digit sum of N in base F (no deletions)."""
    for factor in (2, 3, 10):
        sizes = []
        for n in range(1, 3000):
            sizes.append(1)
            for group in coll.plan_merges(sizes, factor):
                merged = sum(sizes[i] for i in group)
                sizes = [s for i, s in enumerate(sizes) if i not in group] + [merged]
            digits, rest = 0, n
            while rest:
                digits, rest = digits + rest % factor, rest // factor
            assert len(sizes) == digits and sum(sizes) == n
    assert coll.plan_merges([5, 5, 5], 3, max_rows=14) == []  # never above max_rows
    assert coll.plan_merges([1, 1, 1, 3, 3], 3) == [[0, 1, 2, 3, 4]]  # a cascade is planned at once
    assert coll.plan_merges([30, 1, 1, 2, 40], 3) == [[1, 2, 3]]


def test_single_row_adds_leave_few_segments(q, tmp_path):
    """Real single-row commits follow the policy: 100 adds with F = 3 leave the digit sum of 100 in base 3
    (10201: 4) segments, and the files of old generations are gone."""
    with ockstore.create_collection(tmp_path / "c", q, merge_factor=3) as c:
        X = vectors(100, 3)
        for i in range(100):
            c.add(X[i])
        info = c.info()
        assert info["N"] == 100 and info["segments"] == 4
        assert sorted(s["rows"] for s in info["segment_files"]) == [1, 9, 9, 81]
        files = [name for name in os.listdir(tmp_path / "c") if names.is_segment(name)]
        assert len(files) <= 2 * info["segments"]  # this generation's and the previous one's (C12)
        model = Model(P)
        model.add(X)
        assert_same_search(c, reference_index(q, model), vectors(5, 9), 7)
