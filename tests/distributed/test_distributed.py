"""ockstore.distributed on a LocalCluster of two worker processes: builds whose segments are byte-identical to a
single-process build of the same partitions (every kind of source), ids, searches equal to Collection.search for every
option, the workers' cache of opened shares, sample, and the errors (bad data: a clear error, nothing committed).

Workers killed during a build, a scheduler and workers started as separate processes, and the command line are
tests/distributed/test_distributed_cluster.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("distributed", reason="dask[distributed] is not installed (pip install 'ockstore[dask]')")

import dask.array as da  # noqa: E402

import ockstore  # noqa: E402
from helpers import gaussian_mixture  # noqa: E402
from ockstore import distributed as od  # noqa: E402
from ockstore.datasets import write_vecs  # noqa: E402
from ockstore.distributed import search as dsearch  # noqa: E402
from ockstore.distributed import tasks  # noqa: E402
from distributed_helpers import (  # noqa: E402
    DIM, N, base, leftovers, local_cluster, quantizers, ranges, reference_segments, segment_bytes,
)


@pytest.fixture(scope="module")
def client():
    with local_cluster(2) as c:
        yield c


@pytest.fixture(scope="module")
def X():
    return base()


@pytest.fixture
def q():
    return quantizers()["ockm"]


def test_import_ockstore_does_not_import_dask():
    """Neither the package nor its command line (whose --workers/--scheduler import ockstore.distributed only when
    given) imports Dask."""
    code = ("import sys, ockstore, ockstore.cli.commands, ockstore.cli.parser; "
            "assert 'dask' not in sys.modules and 'distributed' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


# ====================================================================================================================
# builds


def test_segments_are_byte_identical_to_a_single_process_build(client, X, q, tmp_path):
    """One .npy file in ranges of partition_rows: one segment per range, in order, each byte-identical to an
    IndexWriter build of the same rows with the same ids; ids are the global row numbers; one commit."""
    write_vecs(tmp_path / "x.npy", X)
    c = od.build_collection(tmp_path / "c", q, tmp_path / "x.npy", client=client, partition_rows=700)
    assert c.mode == "r" and c.generation == 1 and len(c) == N
    np.testing.assert_array_equal(c.ids(), np.arange(N))
    info = c.info()
    assert [(s["rows"], s["min_id"], s["max_id"]) for s in info["segment_files"]] == \
        [(b - a, a, b - 1) for a, b in ranges(N, 700)]
    c.verify()
    c.close()
    assert segment_bytes(tmp_path / "c") == reference_segments(tmp_path / "ref", q, X, ranges(N, 700))
    assert leftovers(tmp_path / "c") == []
    assert sorted(n for n in os.listdir(tmp_path / "c") if n.startswith("manifest")) == \
        ["manifest.0000000000", "manifest.0000000001"]  # created, then the one commit of every segment


def test_segments_do_not_depend_on_the_blas_threads_of_the_workers(client, tmp_path):
    """K = 256 words of 32 dimensions and float32 norm terms: every bit of the encoder's tables shows in the file.
    The workers' BLAS runs on one thread (their nanny sets OPENBLAS_NUM_THREADS=1), this process's on every core;
    the segments are still the bytes of the single-process build."""
    X = gaussian_mixture(1500, 64, n_clusters=20, seed=5)
    q = ockstore.OCKM(2, 2, 4, n_iter=1, seed=0).fit(X[:800])
    od.build_collection(tmp_path / "c", q, da.from_array(X, chunks=(500, 64)), client=client, norm_encoding="f32",
                        store_vectors="float32").close()
    assert segment_bytes(tmp_path / "c") == reference_segments(tmp_path / "ref", q, X, ranges(1500, 500),
                                                               norm_encoding="f32", store_vectors="float32")


def test_a_collection_of_an_ivf_has_the_segments_and_results_of_one_process(client, X, tmp_path):
    """An IVF quantizer: each task writes an inverted-file segment (rows list after list), byte-identical to an
    IndexWriter build of the same rows; a search with n_probe equals the collection's."""
    learn = base(1200, seed=4)
    ivf = ockstore.IVF(n_lists=6, quantizer=ockstore.OCKM(4, 2, 4, n_codewords=32, n_iter=2, seed=0)).fit(learn)
    c = od.build_collection(tmp_path / "c", ivf, da.from_array(X, chunks=(900, DIM)), client=client)
    assert len(c) == N and c.info()["segments"] == 3
    c.close()
    assert segment_bytes(tmp_path / "c") == reference_segments(tmp_path / "ref", ivf, X, ranges(N, 900))
    Q = base(30, seed=9)
    for n_probe in (1, 3, 6):
        _assert_same(tmp_path / "c", Q, 10, client, n_probe=n_probe)


def test_every_kind_of_source_gives_the_same_segments(client, X, q, tmp_path):
    """A dask.array (chunked by rows and columns), .fvecs, .fvecs.gz and .bvecs files in ranges, and a list of files
    (one partition each, of mixed formats) give the same partitions, hence the same bytes."""
    reference = reference_segments(tmp_path / "ref", q, X, ranges(N, 650), norm_encoding="f32",
                                   store_vectors="uint8")
    for name in ("x.fvecs", "x.fvecs.gz", "x.bvecs"):
        write_vecs(tmp_path / name, X.astype(np.uint8) if "bvecs" in name else X)
    parts = []
    for number, (a, b) in enumerate(ranges(N, 650)):
        parts.append(tmp_path / f"part{number}.{('npy', 'bvecs', 'fvecs.gz', 'fvecs')[number % 4]}")
        write_vecs(parts[-1], X[a:b].astype(np.uint8) if "bvecs" in parts[-1].name else X[a:b])
    sources = {
        "dask": (da.from_array(X, chunks=(650, 5)), None),
        "dask-rechunked": (da.from_array(X, chunks=(100, DIM)), 650),
        "fvecs": (tmp_path / "x.fvecs", 650),
        "fvecs.gz": (str(tmp_path / "x.fvecs.gz"), 650),
        "bvecs": (tmp_path / "x.bvecs", 650),
        "files": (parts, None),
    }
    for name, (source, partition_rows) in sources.items():
        folder = tmp_path / name
        od.build_collection(folder, q, source, client=client, partition_rows=partition_rows, norm_encoding="f32",
                            store_vectors="uint8").close()
        assert segment_bytes(folder) == reference, name


def test_sq8_partitions_are_the_bytes_of_a_single_process_writer(client, X, q, tmp_path):
    """store_vectors="sq8": every partition stores its vectors through the model's value ranges (which the
    collection's quantizer file keeps), so a distributed build writes the bytes one IndexWriter writes."""
    reference = reference_segments(tmp_path / "ref", q, X, ranges(N, 650), store_vectors="sq8")
    od.build_collection(tmp_path / "c", q, da.from_array(X, chunks=(650, DIM)), client=client,
                        store_vectors="sq8").close()
    assert segment_bytes(tmp_path / "c") == reference


def test_sq8_search_equals_the_collection_search(client, X, q, tmp_path):
    """A distributed search of a collection of sq8 vectors re-ranks the codes the workers send as the collection
    does (exact values of lo + step * code): the same values and ids, with the default re-ranking and others."""
    od.build_collection(tmp_path / "c", q, da.from_array(X, chunks=(650, DIM)), client=client,
                        store_vectors="sq8").close()
    Q = base(20, seed=4)
    for options in ({}, {"rerank": 0}, {"rerank": 37}, {"rerank": N}):
        _assert_same(tmp_path / "c", Q, 10, client, **options)


def test_ids_given_and_ids_that_continue_in_an_existing_collection(client, X, q, tmp_path):
    rng = np.random.default_rng(0)
    ids = rng.choice(10**12, size=N, replace=False).astype(np.int64)
    write_vecs(tmp_path / "x.npy", X)
    c = od.build_collection(tmp_path / "c", q, tmp_path / "x.npy", ids=ids, client=client, partition_rows=1000)
    np.testing.assert_array_equal(c.ids(), np.sort(ids))
    D, I = c.search(X[:50], 3)
    D2, I2 = ockstore.Index.from_vectors(q, X, ids, n_threads=1).search(X[:50], 3)  # one index of the same rows
    np.testing.assert_array_equal(I, I2)
    np.testing.assert_array_equal(D, D2)
    c.close()
    assert segment_bytes(tmp_path / "c") == reference_segments(tmp_path / "ref", q, X, ranges(N, 1000), ids=ids)
    # a second build adds to it (quantizer None: the collection's), ids continuing after next_id
    with ockstore.open_collection(tmp_path / "c") as c:
        first = c.next_id
    c = od.build_collection(tmp_path / "c", None, da.from_array(X[:300], chunks=120), client=client)
    assert c.generation == 2 and len(c) == N + 300
    np.testing.assert_array_equal(c.ids()[-300:], np.arange(first, first + 300))
    c.close()
    # duplicate ids, or ids already in the collection: refused before any task, nothing committed
    with pytest.raises(ValueError, match="unique"):
        od.build_collection(tmp_path / "c", q, da.from_array(X[:3]), ids=[5, 6, 5], client=client)
    with pytest.raises(ValueError, match=f"id {ids[7]} is already in the collection"):
        od.build_collection(tmp_path / "c", q, da.from_array(X[:3]), ids=[1, ids[7], 2], client=client)
    with ockstore.open_collection(tmp_path / "c") as c:
        assert c.generation == 2 and len(c) == N + 300
    assert leftovers(tmp_path / "c") == []


def test_an_empty_source_gives_an_empty_collection(client, q, tmp_path):
    np.save(tmp_path / "empty.npy", np.zeros((0, DIM), dtype=np.float32))
    c = od.build_collection(tmp_path / "c", q, tmp_path / "empty.npy", client=client)
    assert len(c) == 0 and c.info()["segments"] == 0
    D, I = od.search_collection(tmp_path / "c", np.ones((2, DIM)), 3, client=client)
    assert D.shape == (2, 3) and (I == -1).all()
    c.close()


# ====================================================================================================================
# errors: nothing committed, nothing left


def test_bad_data_in_one_partition_fails_the_build_and_commits_nothing(client, X, q, tmp_path):
    bad = X.copy()
    bad[1500 + 17, 3] = np.nan  # partition 2 of ranges of 600
    np.save(tmp_path / "bad.npy", bad)
    # a new collection: the folder is removed again
    with pytest.raises(ValueError, match=r"partition 2 \(rows 1200\.\.1799 of .*bad\.npy\).*NaN.*first at row 1517"):
        od.build_collection(tmp_path / "new", q, tmp_path / "bad.npy", client=client, partition_rows=600)
    assert not (tmp_path / "new").exists()
    # an existing collection: its generation stays, no file of the failed build remains
    od.build_collection(tmp_path / "c", q, da.from_array(X[:500], chunks=250), client=client).close()
    before = sorted(os.listdir(tmp_path / "c"))
    bad[2100, 0] = 1e20  # beyond the magnitude every vector input must hold, in a later partition
    with pytest.raises(ValueError, match=r"NaN.*first at row 1517|magnitude.*first at row 2100"):
        od.build_collection(tmp_path / "c", None, da.from_array(bad, chunks=(600, DIM)), client=client)
    assert sorted(os.listdir(tmp_path / "c")) == before
    with ockstore.open_collection(tmp_path / "c") as c:
        assert c.generation == 1 and len(c) == 500


def test_a_failing_task_stops_the_others_between_chunks(client, X, q, tmp_path):
    """Partition 0 fails at once while partition 1 runs (slowed down: 25-row chunks, 0.05 s each): the build's cancel
    event stops it after a few chunks (not its 52), the client waits for it, and no file of the build remains."""

    def slow(delay, chunk):
        import time

        from ockstore.collection import SegmentWriter
        from ockstore.distributed import tasks as t

        class Slow(SegmentWriter):
            def _add(self, X, ids, first_row=0):
                t.CHUNKS_SEEN = getattr(t, "CHUNKS_SEEN", 0) + 1
                time.sleep(delay)
                super()._add(X, ids, first_row)

        t.SegmentWriter, t.BUILD_CHUNK, t.CHUNKS_SEEN = (Slow, chunk, 0) if delay else (SegmentWriter, 65536, 0)

    bad = X.copy()
    bad[3, 0] = np.inf
    od.build_collection(tmp_path / "c", q, da.from_array(X[:100]), client=client).close()
    before = sorted(os.listdir(tmp_path / "c"))
    client.run(slow, 0.05, 25)
    try:
        with pytest.raises(ValueError, match="partition 0.*infinite"):
            od.build_collection(tmp_path / "c", None, da.from_array(bad, chunks=(1300, DIM)), client=client)
        seen = client.run(lambda: __import__("ockstore.distributed.tasks").distributed.tasks.CHUNKS_SEEN)
    finally:
        client.run(slow, 0, 0)
    assert 1 <= sum(seen.values()) <= 30, seen  # a run to the end would be 1 + 52
    assert sorted(os.listdir(tmp_path / "c")) == before


def test_argument_errors(client, X, q, tmp_path):
    write_vecs(tmp_path / "x.npy", X)
    write_vecs(tmp_path / "small.fvecs", X[:10, :5])
    (tmp_path / "x.txt").write_text("1 2 3")
    cases = [
        (TypeError, "source must be", dict(source=X)),  # an ndarray is not a source
        (TypeError, "source must be", dict(source=[tmp_path / "x.npy", 3])),
        (ValueError, "list of vector files is empty", dict(source=[])),
        (ValueError, "unsupported file type", dict(source=tmp_path / "x.txt")),
        (FileNotFoundError, "missing", dict(source=[tmp_path / "x.npy", tmp_path / "missing.npy"])),
        (ValueError, "dimension 5", dict(source=[tmp_path / "x.npy", tmp_path / "small.fvecs"])),
        (ValueError, "dimension 5, the quantizer expects 12", dict(source=tmp_path / "small.fvecs")),
        (ValueError, "shape", dict(source=da.zeros((5, 2, 3)))),
        (TypeError, "real numbers", dict(source=da.zeros((5, DIM), dtype=bool))),
        (ValueError, "partition_rows", dict(source=tmp_path / "x.npy", partition_rows=0)),
        (TypeError, "partition_rows", dict(source=tmp_path / "x.npy", partition_rows=2.0)),
        (ValueError, "ids must have shape", dict(source=tmp_path / "x.npy", ids=np.arange(5))),
        (ValueError, ">= 0", dict(source=tmp_path / "x.npy", ids=np.arange(N) - 1)),
        (TypeError, "progress", dict(source=tmp_path / "x.npy", progress=3)),
        (TypeError, "merge", dict(source=tmp_path / "x.npy", merge=True)),  # not an option of create_collection
    ]
    for error, match, kwargs in cases:
        kwargs.setdefault("client", client)
        source = kwargs.pop("source")
        with pytest.raises(error, match=match):
            od.build_collection(tmp_path / "c", q, source, **kwargs)
        assert not (tmp_path / "c").exists(), (error, match)
    with pytest.raises(TypeError, match="client"):
        od.build_collection(tmp_path / "c", q, tmp_path / "x.npy", client=3)
    with pytest.raises(TypeError, match="quantizer|fitted"):
        od.build_collection(tmp_path / "c", None, tmp_path / "x.npy", client=client)
    # an existing collection: its options are fixed, its quantizer is the one to use
    od.build_collection(tmp_path / "c", q, da.from_array(X[:100]), client=client).close()
    with pytest.raises(ValueError, match="store_vectors.*already a collection"):
        od.build_collection(tmp_path / "c", q, da.from_array(X[:100]), client=client, store_vectors="float32")
    with pytest.raises(ValueError, match="another quantizer"):
        od.build_collection(tmp_path / "c", quantizers()["pq-ip"], da.from_array(X[:100]), client=client)
    with ockstore.open_collection(tmp_path / "c") as c:
        assert c.generation == 1 and len(c) == 100
    # the collection is locked by another writer: a clear error, the collection untouched
    with ockstore.open_collection(tmp_path / "c", "a"):
        with pytest.raises(ockstore.CollectionLockedError):
            od.build_collection(tmp_path / "c", None, da.from_array(X[:100]), client=client)
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(FileExistsError):
        od.build_collection(tmp_path / "file", q, da.from_array(X[:100]), client=client)


# ====================================================================================================================
# searches


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_4bit_models_build_fastscan_segments_of_one_process(client, X, tmp_path, kind):
    """n_codewords = 16 (docs/ARCHITECTURE.md, "Fast scan"): every task writes a fast-scan segment byte-identical to
    an IndexWriter build of its rows (blocks of 32 rows cut by partitions of 450), and searches equal the
    collection's, with deletions, rerank and SDC."""
    learn = base(1200, seed=4)
    fine = ockstore.OCKM(4, 2, 4, n_codewords=16, n_iter=2, seed=0)
    model = (fine if kind == "flat" else ockstore.IVF(n_lists=6, quantizer=fine, n_iter=3, seed=0)).fit(learn)
    path = tmp_path / "c"
    c = od.build_collection(path, model, da.from_array(X, chunks=(450, DIM)), client=client, store_vectors="float32")
    c.close()
    assert segment_bytes(path) == reference_segments(tmp_path / "ref", model, X, ranges(N, 450),
                                                     store_vectors="float32")
    with ockstore.open_collection(path, "a") as c:
        c.delete(np.arange(0, N, 5))
        c.verify()
    Q = base(20, seed=9)
    probe = {} if kind == "flat" else {"n_probe": 3}
    for options in ({}, {"distance": "sdc"}, {"rerank": 40}):
        _assert_same(path, Q, 10, client, **probe, **options)


def _assert_same(path, Q, k, client, **options):
    D1, I1 = od.search_collection(path, Q, k, client=client, **options)
    with ockstore.open_collection(path) as c:
        D2, I2 = c.search(Q, k, **options)
    np.testing.assert_array_equal(I1, I2, err_msg=f"ids differ with {options}")
    np.testing.assert_array_equal(D1, D2, err_msg=f"values differ with {options}")
    return D1, I1


@pytest.mark.parametrize("name", ["ockm", "pq-ip"])
def test_search_equals_the_collection_search_for_every_option(client, X, tmp_path, name):
    """Exactly Collection.search (values, ids, order; ties by id) with k from 1 to past N, sdc, allow, rerank from
    stored vectors or from vectors by id, deletions, one 1-D query; duplicated vectors make ties across workers."""
    q = quantizers()[name]
    data = X.copy()
    data[1300:1340] = data[100:140]  # equal codes in different segments (and workers): equal values, ordered by id
    path = tmp_path / "c"
    od.build_collection(path, q, da.from_array(data, chunks=(400, DIM)), client=client, store_vectors="float32",
                        merge_factor=50).close()
    with ockstore.open_collection(path, "a") as c:
        c.delete(np.arange(0, N, 7))  # deletion files: the rows are filtered inside each worker's scan
    Q = base(40, seed=9)
    Q[:5] = data[100:105]
    live = np.setdiff1d(np.arange(N), np.arange(0, N, 7))
    for k in (1, 10, 100, N + 20):
        _assert_same(path, Q, k, client)
    for options in ({"distance": "sdc"}, {"allow": live[::5]}, {"allow": [3, -1, 10**15]}, {"n_threads": 2},
                    {"rerank": 50}, {"rerank": 50, "distance": "sdc", "allow": live[::3]}, {"rerank": N + 50}):
        _assert_same(path, Q, 10, client, **options)
    by_id = np.zeros((N, DIM), dtype=np.float32)
    by_id[live] = data[live] + 0.25  # the user's own vectors by id: re-ranked from them, not from the stored ones
    _assert_same(path, Q, 10, client, rerank=40, vectors=by_id)
    D, I = _assert_same(path, Q[0], 5, client)
    assert D.shape == I.shape == (5,)
    D, I = _assert_same(path, Q[:0], 5, client)
    assert D.shape == I.shape == (0, 5)


def test_search_errors_are_those_of_the_collection_search(client, X, q, tmp_path):
    od.build_collection(tmp_path / "c", q, da.from_array(X[:500], chunks=250), client=client).close()
    Q = X[:3]
    cases = [(ValueError, "k", dict(k=0)), (TypeError, "k", dict(k=2.5)), (ValueError, "distance", dict(distance="x")),
             (ValueError, "n_probe applies to inverted-file", dict(n_probe=3)),
             (TypeError, "unexpected keyword argument 'probes'", dict(probes=3)),
             (ValueError, "rerank needs the original vectors", dict(rerank=20)),
             (ValueError, "rerank = 3 must be >= k", dict(rerank=3, vectors=X)),
             (TypeError, "boolean mask", dict(allow=np.ones(500, dtype=bool))), (ValueError, "n_threads",
                                                                                 dict(n_threads=0))]
    for error, match, options in cases:
        k = options.pop("k", 5)
        with pytest.raises(error, match=match):
            od.search_collection(tmp_path / "c", Q, k, client=client, **options)
    with pytest.raises(ValueError, match="Q"):
        od.search_collection(tmp_path / "c", X[:3, :5], 5, client=client)
    with pytest.raises(ValueError, match="Q"):
        od.search_collection(tmp_path / "c", np.full((2, DIM), np.nan), 5, client=client)
    with pytest.raises(FileNotFoundError):
        od.search_collection(tmp_path / "missing", Q, 5, client=client)


def _shares():
    return sorted((os.path.basename(folder), generation, files) for folder, generation, files in tasks._SHARES)


def test_workers_keep_their_share_open_across_searches(client, X, q, tmp_path):
    """Each worker opens its share once (the same Snapshot object serves the next search); a newer generation of the
    folder replaces the older share; the shares of the workers partition the segments, balanced by rows."""
    path = tmp_path / "shared"
    od.build_collection(path, q, da.from_array(X, chunks=(500, DIM)), client=client).close()
    client.run(tasks.clear_cache)
    Q = X[:4]
    od.search_collection(path, Q, 5, client=client)
    first = client.run(lambda: {key: id(snap) for key, snap in tasks._SHARES.items()})
    od.search_collection(path, Q, 5, client=client)
    again = client.run(lambda: {key: id(snap) for key, snap in tasks._SHARES.items()})
    assert first == again and all(len(shares) == 1 for shares in first.values())
    files = sorted(file for shares in first.values() for (_f, _g, share) in shares for file in share)
    with ockstore.open_collection(path) as c:
        assert files == sorted(s["file"] for s in c.info()["segment_files"])  # every segment, in one share only
    with ockstore.open_collection(path, "a") as c:
        c.delete([1, 2, 3])
    _assert_same(path, Q, 5, client)
    after = client.run(_shares)
    assert all([generation for _n, generation, _f in shares] == [2] for shares in after.values())


def test_assign_balances_rows_and_is_stable():
    segments = [("a", 100), ("b", 900), ("c", 300), ("d", 300), ("e", 50)]
    shares = dsearch.assign(segments, ["w1", "w2"])
    assert shares == {"w1": ("b",), "w2": ("a", "c", "d", "e")}
    assert dsearch.assign(segments, ["w1", "w2"]) == shares
    assert dsearch.assign(segments[:1], ["w1", "w2", "w3"]) == {"w1": ("a",)}


def test_without_a_client_an_embedded_cluster_of_processes_is_started_and_closed(X, q, tmp_path, monkeypatch):
    """client=None: a LocalCluster of worker processes, one thread each, one per core this process may use, closed
    when the call returns (build and search alike)."""
    import distributed

    from ockstore import _validation

    made = []

    class Recording(distributed.LocalCluster):
        def __init__(self, *args, **kwargs):
            made.append((self, kwargs))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(distributed, "LocalCluster", Recording)
    path = tmp_path / "c"
    od.build_collection(path, q, da.from_array(X[:600], chunks=300)).close()
    D, I = od.search_collection(path, X[:5], 3)
    with ockstore.open_collection(path) as c:
        np.testing.assert_array_equal(I, c.search(X[:5], 3)[1])
    assert len(made) == 2
    for cluster, kwargs in made:
        assert kwargs["processes"] is True and kwargs["threads_per_worker"] == 1
        assert kwargs["n_workers"] == _validation.resolve_n_threads(None)
        assert cluster.status.name == "closed"


# ====================================================================================================================
# sample


def test_sample_is_uniform_over_every_partition_and_seeded(client, X, tmp_path):
    write_vecs(tmp_path / "x.fvecs.gz", X)
    parts = [tmp_path / "a.npy", tmp_path / "b.bvecs"]
    write_vecs(parts[0], X[:1000])
    write_vecs(parts[1], X[1000:].astype(np.uint8))
    rows = np.sort(np.random.default_rng(5).choice(N, size=300, replace=False))
    for source in (tmp_path / "x.fvecs.gz", parts, da.from_array(X, chunks=(333, 7))):
        for c in (None, client):
            S = od.sample(source, n=300, seed=5, client=c)
            assert S.dtype == np.float32 and S.flags.c_contiguous
            np.testing.assert_array_equal(S, X[rows])
    np.testing.assert_array_equal(od.sample(parts, n=N + 10, seed=1), X)  # n >= N: every row, in order
    assert not np.array_equal(od.sample(parts, n=50, seed=1), od.sample(parts, n=50, seed=2))
    for n, error in ((0, ValueError), (True, TypeError), (2.0, TypeError)):
        with pytest.raises(error, match="n"):
            od.sample(parts, n=n)
    with pytest.raises(ValueError, match="seed"):
        od.sample(parts, seed=-1)
    np.save(tmp_path / "empty.npy", np.zeros((0, DIM), dtype=np.float32))
    with pytest.raises(ValueError, match="no rows"):
        od.sample(tmp_path / "empty.npy")


# ====================================================================================================================
# collections that train their quantizer (docs/ARCHITECTURE.md, "Collections for apps")


def test_a_build_with_an_unfitted_quantizer_stores_vectors_then_trains_at_train_size(client, X, tmp_path):
    """An unfitted quantizer: the workers write files of stored vectors; a build below train_size commits them
    (searched exactly, on the cluster as locally), the build that crosses it trains the quantizer in its commit."""
    unfitted = ockstore.OCKM(4, 2, 4, n_codewords=16, n_iter=2, seed=0)
    path = tmp_path / "c"
    first = od.build_collection(path, unfitted, da.from_array(X[:600], chunks=(200, DIM)), client=client,
                                store_vectors="float32", train_size=1000)
    with first:
        assert not first.info()["trained"] and len(first) == 600 and first.dim == DIM
        assert all(isinstance(v.index, ockstore.exact_index.ExactIndex) for v in first._snap.views)
    Q = base(20, seed=11)
    for options in ({}, {"allow": np.arange(0, 600, 3)}):
        D1, I1 = od.search_collection(path, Q, 7, client=client, **options)
        with ockstore.open_collection(path) as c:
            D2, I2 = c.search(Q, 7, **options)
        np.testing.assert_array_equal(I1, I2)
        np.testing.assert_array_equal(D1, D2)
    second = od.build_collection(path, None, da.from_array(X[600:1400], chunks=(400, DIM)), client=client)
    with second:
        assert second.info()["trained"] and len(second) == 1400
        assert np.array_equal(second.ids(), np.arange(1400))
        np.testing.assert_array_equal(second.get(np.arange(1400)), X[:1400])
    D1, I1 = od.search_collection(path, Q, 7, client=client)
    with ockstore.open_collection(path) as c:
        D2, I2 = c.search(Q, 7)
    np.testing.assert_array_equal(I1, I2)
    np.testing.assert_array_equal(D1, D2)
    with od.build_collection(tmp_path / "d", unfitted, da.from_array(X[:10]), client=client) as d:
        assert d.store_vectors == "float16" and not d.trained  # stored vectors by default until it trains
