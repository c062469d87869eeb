"""Collections (docs/FORMAT.md section 13, rules C1-C13; docs/ARCHITECTURE.md "Collections"): add, upsert, delete,
compact, ids, snapshots, the lock, the folder's files, damaged folders, and searches that equal one search over an
index of the live rows (the oracle of collection_model.py: the same codes, so the same values bit for bit).

The property test (random sequences of operations) is tests/test_collection_state.py; crashes (SIGKILL) and readers in
other processes are tests/test_collection_crash.py; the command line is tests/test_collection_cli.py.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tracemalloc

import msgpack
import numpy as np
import pytest

import ockstore
from ockstore import collection as coll
from ockstore.collection import manifest as manifest_module
from ockstore import _search_kernels
from ockstore import search as search_module
from ockstore.collection import names, segments
from ockstore.collection import scan as scan_module
from ockstore.collection import snapshot as snapshot_module
from ockstore.storage import writer as storage_writer
from ockstore.errors import CollectionLockedError, FormatError
from collection_model import Model, assert_same_search, reference_index
from conftest import gaussian_mixture
from helpers import subprocess_env

P = 10


def vectors(n, seed):
    return gaussian_mixture(n, P, seed=seed)


@pytest.fixture(scope="module")
def quantizers():
    learn = vectors(1500, 1)
    return {
        "ockm": ockstore.OCKM(3, 2, 4, n_codewords=16, n_iter=3, seed=0).fit(learn),
        "pq": ockstore.PQ(5, n_codewords=16, n_iter=3, seed=0).fit(learn),
        "ockm-ip": ockstore.OCKM(3, 2, 4, n_codewords=16, n_iter=3, metric="ip", seed=0).fit(learn),
        "pq-cosine": ockstore.PQ(5, n_codewords=16, n_iter=3, metric="cosine", seed=0).fit(learn),
    }


@pytest.fixture
def q(quantizers):
    return quantizers["ockm"]


def populated(path, quantizer, *, store_vectors=None, norm_encoding=None, merge_factor=3, seed=0):
    """A collection with several segments, deletions and an upsert, and its model."""
    c = ockstore.create_collection(path, quantizer, store_vectors=store_vectors, norm_encoding=norm_encoding,
                                   merge_factor=merge_factor)
    model = Model(P)
    rng = np.random.default_rng(seed)
    for step in range(6):
        X = vectors(int(rng.integers(20, 90)), 100 * seed + step)
        ids = None if step % 2 == 0 else rng.choice(100_000, size=len(X), replace=False) + 1000 * step
        assert np.array_equal(c.add(X, ids), model.add(X, ids))
    doomed = rng.choice(model.live_ids(), size=40, replace=False)
    assert c.delete(doomed) == model.delete(doomed)
    replaced = np.concatenate([rng.choice(model.live_ids(), size=5, replace=False), [7_777_777, 8_888_888]])
    X = vectors(len(replaced), 999 + seed)
    c.upsert(X, replaced)
    model.upsert(X, replaced)
    assert len(c.info()["segment_files"]) > 1 and c.info()["deleted"] > 0
    return c, model


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
    for options in ({"distance": "sdc"}, {"rerank": 30}, {"rerank": 30, "distance": "sdc"}, {"n_threads": 2},
                    {"allow": live[::4]}, {"allow": live[::4], "rerank": 20}, {"allow": [live[3], -5, 10**12]},
                    {"allow": np.array([], dtype=np.int64)}, {"allow": live[::2].astype(np.uint64)}):
        assert_same_search(c, ref, Q, 10, **options)
    D1, I1 = c.search(Q[0], 5)  # one 1-D query: 1-D results
    D2, I2 = ref.search(Q[0], 5)
    assert D1.shape == I1.shape == (5,) and np.array_equal(I1, I2) and np.array_equal(D1, D2)
    # the user's vectors, indexed by id, for rerank (here: the model's)
    by_id = np.zeros((int(live.max()) + 1, P), dtype=np.float32)
    by_id[live] = model.rows()[0]
    ref32 = reference_index(quantizer, model, norm_encoding=norm_encoding, store_vectors="float32")
    D1, I1 = c.search(Q, 10, rerank=40, vectors=by_id)
    D2, I2 = ref32.search(Q, 10, rerank=40)
    assert np.array_equal(I1, I2) and np.array_equal(D1, D2)
    c.close()


def test_the_general_path_of_segment_searches_gives_the_same_results(quantizers, tmp_path, monkeypatch):
    """C13 for the path that IVF segments will take: each segment's own Index.search, merged by merge_topk."""
    monkeypatch.setattr(snapshot_module, "_flat", lambda views, options: False)
    for name in ("ockm", "ockm-ip"):
        c, model = populated(tmp_path / name, quantizers[name], store_vectors="float32")
        ref = reference_index(quantizers[name], model, store_vectors="float32")
        Q = vectors(12, 8)
        live = model.live_ids()
        for options in ({}, {"distance": "sdc"}, {"rerank": 25}, {"allow": live[::3]}, {"allow": live[::5], "rerank": 19}):
            assert_same_search(c, ref, Q, 10, **options)
        assert_same_search(c, ref, Q, len(model) + 3)
        c.close()


def test_scan_parts_equals_one_scan_of_the_union(q):
    """scan.scan_parts (one set of tables, each part bounded by the k-th best so far) gives exactly the results of
    search_codes over the concatenated parts, ties included (duplicated codes in different parts)."""
    X = vectors(900, 3)
    X[500:520] = X[100:120]  # equal codes in two parts: equal distances, ordered by id
    ids = np.random.default_rng(0).permutation(900).astype(np.int64)
    whole = ockstore.Index.from_vectors(q, X, ids)
    tables = search_module.QueryTables(q)
    Q = vectors(7, 4)
    cuts = [0, 100, 480, 510, 900]
    parts = [scan_module.Part(np.ascontiguousarray(whole.codes[a:b]), np.ascontiguousarray(ids[a:b]), None,
                              np.ascontiguousarray(whole.norms[a:b]), np.asarray(q.norm_levels, np.float32), None)
             for a, b in zip(cuts, cuts[1:])]
    for k in (1, 5, 40, 1000):
        for distance in ("adc", "sdc"):
            D, I, part, rows = scan_module.scan_parts(tables, Q, k, parts, distance=distance, n_threads=2)
            D2, I2 = whole.search(Q, k, distance=distance)
            assert np.array_equal(I, I2) and np.array_equal(D, D2)
            found = I >= 0
            starts = np.array(cuts[:-1])
            assert np.array_equal(ids[starts[part[found]] + rows[found]], I[found])


def test_the_scan_bound_keeps_only_codes_below_it(q):
    """_search_kernels.adc_scan(bound=...): the results are those below the bound, the other slots (bound, -1)."""
    X = vectors(3000, 5)
    index = ockstore.Index.from_vectors(q, X)
    tables = search_module.QueryTables(q)
    Q = vectors(3, 6)
    luts, qconst = tables.compute(Q, "adc", 1)
    D, I = index.search(Q, 50)
    for n_threads, rows in ((1, 3), (2, 1)):  # groups of queries; one query's blocks split over threads
        bound = D[:rows, 20].copy()  # the 21st best distance (codes at it do not enter: ties included)
        out_d = np.empty((rows, 50), np.float32)
        out_r = np.empty((rows, 50), np.int64)
        _search_kernels.adc_scan(index.codes, luts[:rows], qconst[:rows], np.empty(0, np.float32), index.norms,
                                 np.asarray(q.norm_levels, np.float32), np.empty(0, np.int64),
                                 np.empty(0, np.uint64), search_module.LUT_SLOTS, out_d, out_r, n_threads, bound)
        for qi in range(rows):
            n = int((D[qi] < bound[qi]).sum())
            assert 0 < n <= 20
            assert np.array_equal(out_r[qi, :n], I[qi, :n]) and np.array_equal(out_d[qi, :n], D[qi, :n])
            assert (out_r[qi, n:] == -1).all() and (out_d[qi, n:] == bound[qi]).all()


@pytest.mark.parametrize("fraction", [0.02, 0.2, 0.3, 0.9, 0.999])
def test_filters_of_any_density_give_the_top_k_of_the_allowed_rows(q, fraction, monkeypatch):
    """The scan reads the allowed rows of a sparse block one by one and scans a mostly allowed block whole (testing
    the bits of the codes that may enter): both give exactly the results of an index of the allowed rows only. The
    collections' deletions are such filters (most rows allowed)."""
    monkeypatch.setattr(search_module, "SMALL_SCAN_CODES", 0)  # n_threads=2 really runs on two threads
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


# ====================================================================================================================
# one writer (C9), readers on snapshots


def test_a_second_writer_is_refused_naming_the_folder_and_the_lock(q, tmp_path):
    """C9: a second writer, in this process or another, gets CollectionLockedError; readers are never refused; the
    lock is free again once the writer is closed."""
    path = tmp_path / "c"
    c = ockstore.create_collection(path, q)
    lock = str(path / names.LOCK_NAME)
    with pytest.raises(CollectionLockedError) as info:
        ockstore.open_collection(path, "a")
    assert repr(str(path)) in str(info.value) and repr(lock) in str(info.value)
    script = ("import ockstore, sys\n"
              "try:\n    ockstore.open_collection(sys.argv[1], 'a')\n"
              "except ockstore.CollectionLockedError as exc:\n    print('LOCKED', exc)\n")
    out = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True,
                         env=subprocess_env(), timeout=60)
    assert out.stdout.startswith("LOCKED") and lock in out.stdout, (out.stdout, out.stderr)
    with ockstore.open_collection(path) as reader:
        assert reader.generation == 0
    c.close()
    with ockstore.open_collection(path, "a") as again:
        again.add(vectors(2, 1))


def test_a_reader_keeps_its_snapshot_until_refresh(q, tmp_path):
    """Readers see one generation, whatever the writer commits, compacts and removes meanwhile."""
    c, model = populated(tmp_path / "c", q, store_vectors="float32")
    reader = ockstore.open_collection(tmp_path / "c")
    Q = vectors(8, 4)
    before = reader.search(Q, 10, rerank=20)
    generation = reader.generation
    frozen = model.copy()
    c.add(vectors(30, 77))
    model.add(vectors(30, 77))
    c.delete(model.live_ids()[:50])
    model.delete(model.live_ids()[:50])
    c.compact()
    c.vacuum(keep_generations=1)  # the reader's files are removed from the folder: POSIX keeps them open
    assert reader.generation == generation and len(reader) == len(frozen)
    after = reader.search(Q, 10, rerank=20)
    assert np.array_equal(before[0], after[0]) and np.array_equal(before[1], after[1])
    reader.verify()
    assert reader.refresh() == c.generation
    assert_same_search(reader, reference_index(q, model, store_vectors="float32"), Q, 10, rerank=20)
    assert np.array_equal(reader.ids(), model.live_ids())
    reader.close()
    c.close()


# ====================================================================================================================
# the folder (C1-C7, C10-C12)


def test_the_folder_holds_the_files_of_the_format(q, tmp_path):
    """C1: file names; C2, C3: manifests are containers of kind "manifest" whose body lists the segments; C6:
    deletion files hold sorted ids of their segment; C7: segments are ordinary index files storing ids."""
    c, model = populated(tmp_path / "c", q, store_vectors="float16")
    folder = tmp_path / "c"
    listing = sorted(os.listdir(folder))
    assert names.QUANTIZER_NAME in listing and names.LOCK_NAME in listing
    for name in listing:
        assert name in (names.QUANTIZER_NAME, names.LOCK_NAME) or names.parse_manifest(name) is not None or \
            names.is_segment(name) or names.is_deletions(name), name
    path = folder / names.manifest_name(c.generation)
    with ockstore.storage.open_file(path) as mf:
        assert mf.meta["kind"] == "manifest" and mf.meta["generation"] == c.generation
        assert list(mf.sections) == ["manifest"]
        body = msgpack.unpackb(bytes(mf.sections["manifest"]))
    assert body["generation"] == c.generation and body["next_id"] == model.next_id
    assert body["quantizer"] == names.QUANTIZER_NAME and body["store_vectors"] == "float16"
    assert {s["file"] for s in body["segments"]} == {s["file"] for s in c.info()["segment_files"]}
    seen = []
    for entry in body["segments"]:
        with ockstore.open_index(folder / entry["file"]) as seg:
            assert seg.has_ids and seg.ntotal == entry["rows"] and seg.quantizer == q
            assert (int(seg.ids.min()), int(seg.ids.max())) == (entry["min_id"], entry["max_id"])
            ids = set(seg.ids.tolist())
        if entry["deletions"] is not None:
            with ockstore.storage.open_file(folder / entry["deletions"]) as mf:
                assert mf.meta["kind"] == "deletions" and mf.meta["segment"] == entry["file"]
                deleted = np.array(mf.sections["ids"])
            assert len(deleted) == entry["deleted"] and (np.diff(deleted) > 0).all() and set(deleted) <= ids
            ids -= set(deleted.tolist())
        seen += sorted(ids)
    assert sorted(seen) == model.live_ids().tolist()  # C8: every live id in one segment


def test_old_generations_are_removed_as_commits_go(q, tmp_path):
    """C12: after a commit the files only the generation before last referenced are removed, manifest first; the
    previous generation stays complete."""
    folder = tmp_path / "c"
    with ockstore.create_collection(folder, q, merge_factor=100) as c:
        for seed in range(5):
            c.add(vectors(10, seed))
        c.compact()
        kept = {names.manifest_name(c.generation), names.manifest_name(c.generation - 1)}
        assert {n for n in os.listdir(folder) if names.parse_manifest(n) is not None} == kept
        previous = manifest_module.read_manifest(folder / names.manifest_name(c.generation - 1), c.generation - 1)[0]
        for file in previous.referenced():
            assert (folder / file).exists()


def test_vacuum_removes_leftovers_and_keeps_foreign_files(q, tmp_path):
    """vacuum: unreferenced files of the collection's kinds go (leftovers of a killed writer included), foreign
    files stay (C1)."""
    c, model = populated(tmp_path / "c", q)
    folder = tmp_path / "c"
    leftovers = [names.segment_name(c.generation + 5, 0), names.deletions_name(3, 9), ".pending.0123456789abcdef.ock",
                 f".{names.manifest_name(99)}.0a1b2c.tmp", names.manifest_name(0)]
    foreign = ["notes.txt", "segment.1.ock", "manifest.7", ".hidden"]
    for name in leftovers + foreign:
        (folder / name).write_bytes(b"x")
    removed = c.vacuum()
    assert set(leftovers) <= set(removed)
    for name in foreign:
        assert (folder / name).read_bytes() == b"x"
    with ockstore.open_collection(folder) as reader:  # foreign files are ignored
        assert_same_search(reader, reference_index(q, model), vectors(4, 1), 5)
        reader.verify()
    with pytest.raises(ValueError, match="keep_generations must be >= 1"):
        c.vacuum(keep_generations=0)
    c.close()


def test_commit_segments_makes_pending_segments_visible_at_once(q, tmp_path):
    """The entry point of distributed builds: pending segments written apart, committed in one generation."""
    c, model = populated(tmp_path / "c", q)
    spec = c.segment_spec
    first = c.next_id
    pendings = [coll.write_pending_segment(c.path, spec, vectors(40, 10 + i), np.arange(40) + first + 40 * i)
                for i in range(3)]
    assert all(names.is_pending(os.path.basename(p.path)) for p in pendings)
    generation = c.generation
    with ockstore.open_collection(tmp_path / "c") as reader:
        assert len(reader) == len(model)  # not visible before the commit
    clash = coll.write_pending_segment(c.path, spec, vectors(2, 5), [first + 5, 10**9])
    with pytest.raises(ValueError, match="ids must be unique"):
        c.commit_segments(pendings + [clash])
    live = coll.write_pending_segment(c.path, spec, vectors(1, 5), model.live_ids()[:1])
    with pytest.raises(ValueError, match="already in the collection"):
        c.commit_segments([live])
    other = ockstore.OCKM(3, 2, 4, n_codewords=16, n_iter=2, seed=5).fit(vectors(500, 3))
    foreign = coll.write_pending_segment(c.path, coll.SegmentSpec(other, "u8", None), vectors(2, 5), [10**10, 10**10 + 1])
    with pytest.raises(FormatError, match="segment mismatch"):
        c.commit_segments([foreign])
    with pytest.raises(ValueError, match="is not a pending segment"):
        c.commit_segments([coll.PendingSegment(str(tmp_path / "elsewhere.ock"), 1, 0, 0)])
    assert c.generation == generation
    c.commit_segments(pendings, merge=False)
    for i in range(3):
        model.add(vectors(40, 10 + i), np.arange(40) + first + 40 * i)
    assert c.generation == generation + 1 and c.next_id == first + 120
    assert sum(s["rows"] == 40 for s in c.info()["segment_files"]) == 3  # kept as written
    assert_same_search(c, reference_index(q, model), vectors(6, 3), 9)
    assert len(c.vacuum()) >= 2  # the refused pending files
    c.close()


# ====================================================================================================================
# damaged and foreign folders (C4, C5, C11)


def _corrupt_body(path):
    """Flip one byte of the manifest body (its CRC no longer matches)."""
    with ockstore.storage.open_file(path) as mf:
        offset = mf.section_info("manifest")["offset"]
    data = bytearray(path.read_bytes())
    data[offset + 3] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "remove"])
def test_a_damaged_newest_manifest_falls_back_to_the_previous_generation(q, tmp_path, damage):
    """C4: the current state is the newest manifest that verifies; the skipped one is reported (warning, info,
    verify). C11: a writer commits above every manifest file, the damaged one included."""
    folder = tmp_path / "c"
    c = ockstore.create_collection(folder, q)
    model = Model(P)
    c.add(vectors(20, 1))
    model.add(vectors(20, 1))
    older = model.copy()
    c.add(vectors(10, 2))
    generation = c.generation
    c.close()
    path = folder / names.manifest_name(generation)
    if damage == "flip":
        _corrupt_body(path)
    elif damage == "truncate":
        path.write_bytes(path.read_bytes()[:-7])
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        path.unlink()
    if damage == "remove":  # indistinguishable from a commit that never happened: nothing to report
        reader = ockstore.open_collection(folder)
        assert reader.info()["problems"] == []
    else:
        with pytest.warns(coll.CollectionWarning, match=names.manifest_name(generation)):
            reader = ockstore.open_collection(folder)
        assert len(reader.info()["problems"]) == 1 and names.manifest_name(generation) in reader.info()["problems"][0]
        with pytest.raises(FormatError, match="skipped manifest"):
            reader.verify()
    assert reader.generation == generation - 1
    assert_same_search(reader, reference_index(q, older), vectors(5, 3), 6)
    with pytest.warns(coll.CollectionWarning) if damage != "remove" else _no_warning():
        writer = ockstore.open_collection(folder, "a")
    writer.add(vectors(3, 4))
    older.add(vectors(3, 4))
    assert writer.generation == generation + (0 if damage == "remove" else 1)
    writer.vacuum()
    writer.verify()
    assert_same_search(writer, reference_index(q, older), vectors(5, 3), 6)
    writer.close()
    reader.close()


class _no_warning:
    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("error", coll.CollectionWarning)

    def __exit__(self, *exc):
        return self._catch.__exit__(*exc)


def _write_body(folder, generation, body, meta=None):
    """A manifest file with the given body (msgpack), bypassing the writer's schema."""
    with ockstore.storage.FileWriter(folder / names.manifest_name(generation)) as w:
        w.put("manifest", np.frombuffer(msgpack.packb(body, use_bin_type=True), dtype=np.uint8))
        w.commit(meta or {"kind": "manifest", "generation": generation})


@pytest.mark.parametrize("change, check", [
    (lambda b: b.pop("next_id"), "'next_id'"),
    (lambda b: b.update(norm_encoding="f16"), "'norm_encoding'"),
    (lambda b: b.update(generation=3), "'generation' = 3"),
    (lambda b: b.update(quantizer="../../etc/passwd"), "quantizer"),
    (lambda b: b["segments"][0].update(file="../segment.0000000001.0.ock"), "segments[0]: file"),
    (lambda b: b["segments"][0].update(rows=0), "'rows'"),
    (lambda b: b["segments"][0].update(deleted=1), "a deletion file exactly when"),
    (lambda b: b["segments"][0].update(max_id=10**6), "is not below 'next_id'"),
    (lambda b: b["segments"][0].update(min_id=5), "cannot lie in"),
    (lambda b: b["segments"].append(dict(b["segments"][0])), "referenced twice"),
    (lambda b: b.update(segments="all"), "'segments'"),
])
def test_a_manifest_that_breaks_the_schema_does_not_verify(q, tmp_path, change, check):
    """C3, C5: the body's keys, types, ranges and file names are checked; such a manifest is skipped (C4)."""
    folder = tmp_path / "c"
    with ockstore.create_collection(folder, q) as c:
        c.add(vectors(20, 1))
        generation = c.generation
    with ockstore.storage.open_file(folder / names.manifest_name(generation)) as mf:
        body = msgpack.unpackb(bytes(mf.sections["manifest"]))
    body["generation"] = generation + 1
    change(body)
    _write_body(folder, generation + 1, body)
    with pytest.warns(coll.CollectionWarning) as caught:
        with ockstore.open_collection(folder) as reader:
            assert reader.generation == generation
    message = str(caught[0].message)
    assert "bad manifest" in message and check in message, message


def test_a_manifest_ignores_unknown_keys(q, tmp_path):
    """C3: unknown keys of the body (and of segment entries) are ignored by readers."""
    folder = tmp_path / "c"
    with ockstore.create_collection(folder, q) as c:
        c.add(vectors(20, 1))
        generation = c.generation
    with ockstore.storage.open_file(folder / names.manifest_name(generation)) as mf:
        body = msgpack.unpackb(bytes(mf.sections["manifest"]))
    body["future"] = {"x": [1, 2]}
    body["segments"][0]["future"] = "yes"
    _write_body(folder, generation + 1, body | {"generation": generation + 1},
                {"kind": "manifest", "generation": generation + 1, "extra": 1})
    with ockstore.open_collection(folder) as reader:
        assert reader.generation == generation + 1 and len(reader) == 20


def test_missing_or_mismatched_segment_files_are_format_errors(q, tmp_path):
    """C4, C7: a verified manifest whose segment is missing, of another quantizer or of another row count is a
    FormatError naming the file (no silent fallback to older data)."""
    folder = tmp_path / "c"
    with ockstore.create_collection(folder, q) as c:
        c.add(vectors(20, 1))
        segment = folder / c.info()["segment_files"][0]["file"]
    data = segment.read_bytes()
    other = ockstore.OCKM(3, 2, 4, n_codewords=16, n_iter=2, seed=5).fit(vectors(500, 3))
    ockstore.build_index(segment, other, vectors(20, 1), ids=np.arange(20))
    with pytest.raises(FormatError, match="segment mismatch.*quantizer"):
        ockstore.open_collection(folder)
    ockstore.build_index(segment, q, vectors(21, 1), ids=np.arange(21))
    with pytest.raises(FormatError, match="segment mismatch.*21 rows"):
        ockstore.open_collection(folder)
    ockstore.build_index(segment, q, vectors(20, 1))
    with pytest.raises(FormatError, match="stores no ids"):
        ockstore.open_collection(folder)
    segment.unlink()
    with pytest.raises(FormatError, match="missing file"):
        ockstore.open_collection(folder)
    segment.write_bytes(data[:-1])
    with pytest.raises(FormatError, match=str(segment.name)):
        ockstore.open_collection(folder)
    segment.write_bytes(data)
    with ockstore.open_collection(folder) as reader:
        reader.verify()


def test_a_corrupt_segment_or_deletion_file_fails_verify_or_open(q, tmp_path):
    """verify reads every byte of every segment (CRC); a deletion file is checked when opened (C6)."""
    folder = tmp_path / "c"
    with ockstore.create_collection(folder, q) as c:
        c.add(vectors(200, 1))
        c.delete([3, 4, 5])
        info = c.info()["segment_files"][0]
    segment = folder / info["file"]
    with ockstore.storage.open_file(segment) as mf:
        offset = mf.section_info("codes")["offset"]
    data = bytearray(segment.read_bytes())
    data[offset + 17] ^= 1
    segment.write_bytes(bytes(data))
    with ockstore.open_collection(folder) as reader:  # opening reads no codes
        with pytest.raises(FormatError, match="CRC mismatch"):
            reader.verify()
    deletions = folder / info["deletions"]
    raw = bytearray(deletions.read_bytes())
    raw[-3] ^= 0x40
    deletions.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match=info["deletions"]):
        ockstore.open_collection(folder)


def test_paths_that_are_not_collections(q, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FormatError, match="not a collection"):
        ockstore.open_collection(empty)
    with pytest.raises(FormatError, match="not a collection"):
        ockstore.open_collection(empty, "a")
    assert os.listdir(empty) == []  # no lock file made in a folder that is not a collection
    with pytest.raises(FileNotFoundError, match="no such collection folder"):
        ockstore.open_collection(tmp_path / "nothing")
    index_file = tmp_path / "x.ock"
    ockstore.build_index(index_file, q, vectors(5, 1))
    with pytest.raises(ValueError, match="is a file, not a collection folder"):
        ockstore.open_collection(index_file)
    with pytest.raises(FileExistsError, match="is a file"):
        ockstore.create_collection(index_file, q)
    with pytest.raises(TypeError, match="path must be a str or os.PathLike"):
        ockstore.open_collection(42)
    c = ockstore.create_collection(empty, q)  # an empty folder is fine
    c.close()
    with pytest.raises(FileExistsError, match="already a collection"):
        ockstore.create_collection(empty, q)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "photo.jpg").write_bytes(b"x")
    with pytest.raises(ValueError, match="not empty"):
        ockstore.create_collection(busy, q)
    with pytest.raises(FileNotFoundError, match="folder does not exist"):
        ockstore.create_collection(tmp_path / "a" / "b", q)
    with pytest.raises(ValueError, match="merge_factor must be >= 2"):
        ockstore.create_collection(tmp_path / "m", q, merge_factor=1)
    with pytest.raises(ockstore.NotFittedError):
        ockstore.create_collection(tmp_path / "m", ockstore.PQ(2))
    with pytest.raises(ValueError, match="norm_encoding"):
        ockstore.create_collection(tmp_path / "m", q, norm_encoding="none")
    assert not (tmp_path / "m").exists()  # arguments are checked before anything is made


def test_info_describes_the_collection(q, tmp_path):
    c, model = populated(tmp_path / "c", q, store_vectors="float16")
    info = c.info()
    assert info["kind"] == "collection" and info["N"] == len(model) == len(c) == c.ntotal
    assert info["rows"] == sum(s["rows"] for s in info["segment_files"])
    assert info["deleted"] == sum(s["deleted"] for s in info["segment_files"]) == info["rows"] - info["N"]
    assert info["segments"] == len(info["segment_files"]) and info["next_id"] == model.next_id
    assert (info["P"], info["method"], info["bits"], info["store_vectors"]) == (P, "ockm", 48, "float16")
    assert info["generation"] == c.generation and info["mode"] == "a" and info["problems"] == []
    assert c.metric == "l2" and c.dim == P and c.quantizer == q and c.metadata == {}
    assert "mode='a'" in repr(c)
