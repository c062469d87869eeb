"""Tests of index and quantizer files (IndexWriter, build_index, open_index, Index.save, save_quantizer,
load_quantizer) against docs/FORMAT.md sections 11-12: round trips, identical bytes, quantizer files, the writer.

Every rule I1-I19 is cited by at least one test of tests/indexfile/ (in its name or docstring). Opening, readers of a
file being replaced and killed builds: test_index_file_open.py; hand-written inconsistent files, the golden file and
file_info: test_index_file_checks.py; the mutation fuzzer: test_index_fuzz.py.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import ockstore
from ockstore import storage
from ockstore.errors import NotFittedError
from ockstore import Index, IndexWriter, build_index, load_quantizer, open_index, save_quantizer
from ockstore.indexfile import schema as index_schema

from index_files import CASES, CONFIGS, N, NQ, P, expect_format_error, parts_of, user_ids
from index_files import base, quantizers, queries  # noqa: F401 - pytest fixtures
from helpers import listing

# --------------------------------------------------------------------------------------------------------------------
# round trips


@pytest.mark.parametrize("with_ids", [False, True], ids=["row-ids", "user-ids"])
@pytest.mark.parametrize("name,enc", CASES)
def test_round_trip_I4_I9_I14(tmp_path, quantizers, base, queries, name, enc, with_ids):
    """I4, I9, I14: a file built for each method and norm encoding, with and without ids, reopens to the same
    quantizer and gives exactly the in-memory index's ADC and SDC results; its arrays are read-only views."""
    q = quantizers[name]
    ids = user_ids(N) if with_ids else None
    path = tmp_path / "x.ock"
    norm_encoding = None if enc == "none" else enc
    build_index(path, q, base, ids, norm_encoding=norm_encoding, chunk_size=256)
    memory = Index.from_vectors(q, base, ids, norm_encoding=norm_encoding)
    with open_index(path) as index:
        assert index.quantizer == q and index.quantizer is not q
        assert index.norm_encoding == enc and index.has_ids == with_ids and index.ntotal == N
        np.testing.assert_array_equal(index.codes, memory.codes)
        if enc != "none":
            np.testing.assert_array_equal(index.norms, memory.norms)
        np.testing.assert_array_equal(index.ids, memory.ids)
        for distance in ("adc", "sdc"):
            D, I = index.search(queries, 15, distance=distance)
            D0, I0 = memory.search(queries, 15, distance=distance)
            np.testing.assert_array_equal(D, D0)
            np.testing.assert_array_equal(I, I0)
            d, i = index.search(queries[3], 4, distance=distance)  # one vector: one row, axis dropped
            np.testing.assert_array_equal(i, I0[3, :4])
        for arr in (index.codes, index.norms, index._ids):
            if arr is not None:
                assert not arr.flags.writeable
                with pytest.raises(ValueError):
                    arr[0] = 1
        assert index.path == str(path)
        index.verify()
        info = index.info()
    assert info == {**memory.info(), "format_version": "1.0", "has_ids": with_ids, "metadata": {},
                    "path": str(path)}
    assert info["P"] == P and info["method"] == q.method and info["N"] == N


@pytest.mark.parametrize("with_ids", [False, True])
@pytest.mark.parametrize("name", ["pq", "ockm"])
def test_empty_index_I4(tmp_path, quantizers, queries, name, with_ids):
    """I4: N = 0 is a valid index (zero-row codes / norms / ids); searches return padding."""
    q = quantizers[name]
    path = tmp_path / "empty.ock"
    build_index(path, q, np.empty((0, P), np.float32), np.empty(0, np.int64) if with_ids else None)
    with open_index(path) as index:
        index.verify()
        assert index.ntotal == 0 and index.has_ids == with_ids
        assert index.codes.shape == (0, q.code_size)
        for distance in ("adc", "sdc"):
            D, I = index.search(queries, 3, distance=distance)
            assert D.shape == (NQ, 3) and np.isinf(D).all() and (I == -1).all()
    meta, sections, _ = parts_of(path)
    assert meta["ntotal"] == 0 and ("ids" in sections) == with_ids


def test_writer_closed_without_add_writes_valid_empty_index_I4(tmp_path, quantizers):
    """I4: a writer closed without any add writes a valid empty index without ids."""
    path = tmp_path / "e.ock"
    with IndexWriter(path, quantizers["ockm"]) as w:
        pass
    assert w.closed and w.ntotal == 0
    with open_index(path) as index:
        index.verify()
        assert index.info()["N"] == 0 and not index.has_ids and index.norm_encoding == "u8"


def test_meta_and_section_layout_I10_I11(tmp_path, quantizers, base):
    """I10, I11: the meta map holds exactly the keys of section 11.1 (no timestamp), the sections come in the order
    of section 11.2, and user metadata is in the container's user map."""
    q = quantizers["ockm"]
    path = tmp_path / "x.ock"
    build_index(path, q, base[:50], user_ids(50), norm_encoding="f32", metadata={"b": [1, 2.5], "a": "ü"})
    meta, sections, user = parts_of(path)
    assert meta == {
        "kind": "index", "method": "ockm", "library": f"ockstore {ockstore.__version__}",
        "params": {"dim": P, "n_subspaces": 4, "n_codebooks": 2, "beam_width": 4, "n_codewords": 32, "n_iter": 3,
                   "tol": q.tol, "seed": 0},
        "ntotal": 50, "norm_encoding": "f32", "has_ids": True,
    }
    assert type(meta["params"]["tol"]) is float
    assert user == {"a": "ü", "b": [1, 2.5]}
    assert list(sections) == ["rotation", "codebooks", "objective_history", "norm_levels", "codes", "norms", "ids"]
    dtypes = {name: arr.dtype.str for name, arr in sections.items()}
    assert dtypes == {"rotation": "<f4", "codebooks": "<f4", "objective_history": "<f8", "norm_levels": "<f4",
                      "codes": "|u1", "norms": "<f4", "ids": "<i8"}
    assert sections["codebooks"].shape == (4, 2, 32, 3)  # S = ceil(10 / 4)
    np.testing.assert_array_equal(sections["rotation"], q.rotation)
    np.testing.assert_array_equal(sections["objective_history"], q.objective_history)
    np.testing.assert_array_equal(sections["ids"], user_ids(50))
    with open_index(path) as index:
        assert index.info()["metadata"] == {"a": "ü", "b": [1, 2.5]}
    # PQ: no rotation, no norm levels, no norms; no ids section without ids.
    build_index(path, quantizers["pq"], base[:50])
    meta, sections, _ = parts_of(path)
    assert list(sections) == ["codebooks", "objective_history", "codes"]
    assert meta["norm_encoding"] == "none" and meta["has_ids"] is False


def test_identical_inputs_give_identical_bytes_whatever_the_chunks_I10(tmp_path, quantizers, base):
    """I10: same inputs -> byte-identical files: two one-shot builds, streaming builds in chunks of 1, 7 and 250 and
    of irregular sizes, and Index.save of the in-memory index."""
    q = quantizers["ockm"]
    X, ids, meta = base[:300], user_ids(300), {"run": 1}
    build_index(tmp_path / "a.ock", q, X, ids, metadata=meta)
    reference = (tmp_path / "a.ock").read_bytes()
    build_index(tmp_path / "b.ock", q, X, ids, metadata=meta)
    assert (tmp_path / "b.ock").read_bytes() == reference
    for chunk in (1, 7, 250):
        build_index(tmp_path / f"c{chunk}.ock", q, X, ids, metadata=meta, chunk_size=chunk)
        assert (tmp_path / f"c{chunk}.ock").read_bytes() == reference, chunk
    with IndexWriter(tmp_path / "w.ock", q, metadata=meta, n_threads=1) as w:
        for start, stop in [(0, 0), (0, 5), (5, 6), (6, 200), (200, 200), (200, 300)]:
            w.add(X[start:stop].astype(np.float64), ids[start:stop].tolist())
        assert w.ntotal == 300
    assert (tmp_path / "w.ock").read_bytes() == reference
    Index.from_vectors(q, X, ids).save(tmp_path / "s.ock", metadata=meta)
    assert (tmp_path / "s.ock").read_bytes() == reference
    # Different content gives different bytes (the comparison above can fail).
    build_index(tmp_path / "d.ock", q, X, ids, metadata={"run": 2})
    assert (tmp_path / "d.ock").read_bytes() != reference


def test_retrained_quantizer_gives_identical_file_I10(tmp_path, mixture, base):
    """I10: training with the same seed and building again gives the same bytes (no timestamps anywhere)."""
    files = []
    for run in range(2):
        q = ockstore.OCKM(3, 2, 3, n_codewords=32, n_iter=2, seed=5).fit(mixture)
        path = tmp_path / f"r{run}.ock"
        build_index(path, q, base[:100], norm_encoding="u8")
        files.append(path.read_bytes())
    assert files[0] == files[1]


def test_save_of_opened_index_round_trips(tmp_path, quantizers, base, queries):
    """Index.save of an opened index writes the same bytes, also over its own file while it is open (R22)."""
    path = tmp_path / "x.ock"
    build_index(path, quantizers["eckm"], base, user_ids(N), metadata={"k": "v"})
    original = path.read_bytes()
    with open_index(path) as index:
        D, I = index.search(queries, 5)
        index.save(tmp_path / "copy.ock")
        assert (tmp_path / "copy.ock").read_bytes() == original
        index.save(path, metadata={"k": "new"})  # replaces the open file: the open index keeps the old contents
        np.testing.assert_array_equal(index.search(queries, 5)[1], I)
        index.verify()
    with open_index(path) as index:
        assert index.info()["metadata"] == {"k": "new"}
        np.testing.assert_array_equal(index.search(queries, 5)[0], D)


def test_large_user_ids_and_duplicates_round_trip_I12(tmp_path, quantizers, base, queries):
    """I12: int64 ids up to 2**63 - 1, duplicates and uint64 input within range are stored as given."""
    ids = np.full(N, 2**63 - 1, dtype=np.uint64)
    ids[::2] = 5
    path = tmp_path / "x.ock"
    build_index(path, quantizers["pq"], base, ids)
    with open_index(path) as index:
        assert index.ids.dtype == np.int64
        np.testing.assert_array_equal(index.ids, ids.astype(np.int64))
        I = index.search(queries, 10)[1]
        assert set(np.unique(I)) <= {5, 2**63 - 1}


def test_memmap_input(tmp_path, quantizers, base):
    """build_index reads a np.memmap chunk by chunk; any real dtype is converted per chunk."""
    raw = tmp_path / "base.f64"
    base.astype(np.float64).tofile(raw)
    X = np.memmap(raw, dtype=np.float64, mode="r", shape=base.shape)
    build_index(tmp_path / "m.ock", quantizers["ckm"], X, chunk_size=64)
    build_index(tmp_path / "a.ock", quantizers["ckm"], base)
    assert (tmp_path / "m.ock").read_bytes() == (tmp_path / "a.ock").read_bytes()
    build_index(tmp_path / "l.ock", quantizers["ckm"], base[:20].tolist())
    build_index(tmp_path / "a20.ock", quantizers["ckm"], base[:20])
    assert (tmp_path / "l.ock").read_bytes() == (tmp_path / "a20.ock").read_bytes()


# --------------------------------------------------------------------------------------------------------------------
# quantizer files


@pytest.mark.parametrize("name", list(CONFIGS))
def test_quantizer_file_round_trip_I1(tmp_path, quantizers, name):
    """I1: save_quantizer writes a kind "quantizer" file without vector sections; load_quantizer reads it, and the
    quantizer of an index file; open_index refuses a quantizer file ("wrong kind")."""
    q = quantizers[name]
    path = tmp_path / "q.ockq"
    save_quantizer(path, q, metadata={"learn": "mixture"})
    loaded = load_quantizer(path)
    assert loaded == q and type(loaded) is type(q)
    np.testing.assert_array_equal(loaded.encode(np.ones((3, P))), q.encode(np.ones((3, P))))
    meta, sections, user = parts_of(path)
    assert meta["kind"] == "quantizer" and meta["method"] == q.method and user == {"learn": "mixture"}
    assert not {"ntotal", "norm_encoding", "has_ids"} & set(meta)
    assert not {"codes", "norms", "ids"} & set(sections)
    first = path.read_bytes()
    save_quantizer(path, loaded, metadata={"learn": "mixture"})
    assert path.read_bytes() == first  # I10
    message = expect_format_error(path, "wrong kind")
    assert "load_quantizer" in message
    build_index(tmp_path / "i.ock", q, np.zeros((3, P)))
    assert load_quantizer(tmp_path / "i.ock") == q


def test_quantizer_arguments(tmp_path, quantizers):
    with pytest.raises(NotFittedError):
        save_quantizer(tmp_path / "q", ockstore.OCKM(2))
    with pytest.raises(TypeError, match="quantizer"):
        save_quantizer(tmp_path / "q", "ockm")
    with pytest.raises(TypeError, match="metadata"):
        save_quantizer(tmp_path / "q", quantizers["pq"], metadata=[1])
    with pytest.raises(FileNotFoundError, match="missing"):
        load_quantizer(tmp_path / "missing.q")
    assert listing(tmp_path) == []


# --------------------------------------------------------------------------------------------------------------------
# IndexWriter


def test_exception_in_block_leaves_no_file_and_no_temps_I13(tmp_path, quantizers, base):
    """I13: an exception inside the with-block aborts: nothing under the name, no temporary file left."""
    path = tmp_path / "x.ock"
    with pytest.raises(RuntimeError, match="boom"):
        with IndexWriter(path, quantizers["ockm"]) as w:
            w.add(base[:100], user_ids(100))
            assert listing(tmp_path) != []  # the spill files exist while building
            raise RuntimeError("boom")
    assert listing(tmp_path) == []
    assert w.closed
    with pytest.raises(ValueError, match="aborted"):
        w.add(base[:1])
    with pytest.raises(ValueError, match="aborted"):
        w.close()  # close after abort does not pretend to have written anything
    w.abort()  # idempotent


def test_exception_in_block_keeps_old_file_I13(tmp_path, quantizers, base):
    """I13: an aborted build leaves an older file under the name byte for byte."""
    path = tmp_path / "x.ock"
    build_index(path, quantizers["pq"], base[:50])
    old = path.read_bytes()
    with pytest.raises(KeyboardInterrupt):
        with IndexWriter(path, quantizers["ockm"]) as w:
            w.add(base)
            raise KeyboardInterrupt
    assert path.read_bytes() == old and listing(tmp_path) == ["x.ock"]
    w = IndexWriter(path, quantizers["ockm"])
    w.add(base)
    w.abort()
    assert path.read_bytes() == old and listing(tmp_path) == ["x.ock"]


def test_mixing_ids_and_no_ids_refused_I12(tmp_path, quantizers, base):
    """I12: all chunks give ids or none do; the refused chunk is not appended and the writer goes on."""
    path = tmp_path / "x.ock"
    with IndexWriter(path, quantizers["ockm"]) as w:
        w.add(base[:10], np.arange(10))
        with pytest.raises(ValueError, match="ids"):
            w.add(base[10:20])
        assert w.ntotal == 10
        w.add(base[10:20], np.arange(10, 20))
    with IndexWriter(tmp_path / "y.ock", quantizers["ockm"]) as w:
        w.add(base[:10])
        with pytest.raises(ValueError, match="ids"):
            w.add(base[10:20], np.arange(10))
        w.add(base[10:20])
    for name, has_ids in (("x.ock", True), ("y.ock", False)):
        with open_index(tmp_path / name) as index:
            index.verify()
            assert index.ntotal == 20 and index.has_ids == has_ids
            np.testing.assert_array_equal(index.ids, np.arange(20))


_ROWS = np.linspace(-1, 1, 4 * P).reshape(4, P)


def _with_last_row(value):
    rows = _ROWS.copy()
    rows[-1, -1] = value
    return rows


@pytest.mark.parametrize(
    "chunk,ids,exc,match",
    [
        (np.zeros((4, P + 1)), None, ValueError, "X has dimension"),
        (np.zeros((2, 3, P)), None, ValueError, "X must be a 2-D"),
        (_with_last_row(np.nan), None, ValueError, "X contains NaN"),
        (_with_last_row(-np.inf), None, ValueError, "X contains NaN"),
        (_with_last_row(1e300), None, ValueError, "X contains values too large"),
        (_ROWS.astype(bool), None, TypeError, "X must hold real numbers"),
        (_ROWS.astype(complex), None, TypeError, "X must hold real numbers"),
        (_ROWS, np.array([0, 1, 2, -1]), ValueError, "ids must be >= 0"),
        (_ROWS, np.arange(3), ValueError, "ids must have shape"),
        (_ROWS, np.zeros(4), TypeError, "ids must be an integer array"),
        (_ROWS, np.full(4, 2**63, dtype=np.uint64), ValueError, "ids holds values above"),
    ],
)
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_refused_chunk_appends_nothing(tmp_path, quantizers, base, chunk, ids, exc, match):
    """A refused chunk (bad dimension, NaN/inf in its last row, bad ids) raises before anything of it is appended;
    the writer goes on and writes exactly the other chunks; leaving the block with the error writes nothing."""
    q = quantizers["ockm"]
    with_ids = ids is not None

    def good_ids(a, b):
        return np.arange(a, b) if with_ids else None

    path = tmp_path / "x.ock"
    with IndexWriter(path, q) as w:
        w.add(base[:5], good_ids(0, 5))
        with pytest.raises(exc, match=match):
            w.add(chunk, ids)
        assert w.ntotal == 5
        w.add(base[5:9], good_ids(5, 9))
    build_index(tmp_path / "ref.ock", q, base[:9], good_ids(0, 9))
    assert path.read_bytes() == (tmp_path / "ref.ock").read_bytes()
    os.remove(path)
    os.remove(tmp_path / "ref.ock")
    with pytest.raises(exc, match=match):
        with IndexWriter(path, q) as w:
            w.add(chunk, ids)
    assert listing(tmp_path) == []


def test_use_after_close_I13(tmp_path, quantizers, base):
    """close() commits and is idempotent; any later use raises ValueError; ntotal stays readable."""
    path = tmp_path / "x.ock"
    w = IndexWriter(path, quantizers["pq"])
    assert not path.exists() and not w.closed
    w.add(base[:3])
    assert not path.exists()  # I13: nothing under the name before close
    w.close()
    assert path.exists() and w.closed and w.ntotal == 3
    before = path.read_bytes()
    w.close()
    w.abort()  # a no-op after close
    assert path.read_bytes() == before
    for use in (lambda: w.add(base[:1]), lambda: w.__enter__(), lambda: w._append(None, None, None)):
        with pytest.raises(ValueError, match="closed"):
            use()
    assert "committed" in repr(w) and w.path == str(path)


def test_writer_captures_the_model(tmp_path, quantizers, mixture, base):
    """Refitting the caller's quantizer while a writer is open does not mix two models in one file."""
    q = ockstore.OCKM(3, 2, 2, n_codewords=32, n_iter=2, seed=0).fit(mixture)
    snapshot = load_quantizer_roundtrip(tmp_path, q)
    with IndexWriter(tmp_path / "x.ock", q) as w:
        w.add(base[:100])
        q.fit(mixture[::-1][:500])  # a different model now
        w.add(base[100:200])
    with open_index(tmp_path / "x.ock") as index:
        assert index.quantizer == snapshot and index.quantizer != q
        np.testing.assert_array_equal(index.codes, snapshot.encode(base[:200]))


def load_quantizer_roundtrip(tmp_path, q):
    save_quantizer(tmp_path / "snap.q", q)
    out = load_quantizer(tmp_path / "snap.q")
    os.remove(tmp_path / "snap.q")
    return out


def test_writer_arguments(tmp_path, quantizers, base):
    q, pq = quantizers["ockm"], quantizers["pq"]
    with pytest.raises(NotFittedError):
        IndexWriter(tmp_path / "x", ockstore.OCKM(2))
    with pytest.raises(TypeError, match="quantizer"):
        IndexWriter(tmp_path / "x", None)
    with pytest.raises(ValueError, match="norm_encoding must be 'none'"):
        IndexWriter(tmp_path / "x", pq, norm_encoding="u8")
    with pytest.raises(ValueError, match="norm_encoding must be 'f32' or 'u8'"):
        IndexWriter(tmp_path / "x", q, norm_encoding="none")
    with pytest.raises(ValueError, match="norm_encoding must be"):
        IndexWriter(tmp_path / "x", q, norm_encoding="F32")
    with pytest.raises(ValueError, match="n_threads must be >= 1"):
        IndexWriter(tmp_path / "x", q, n_threads=0)
    with pytest.raises(TypeError, match="metadata"):
        IndexWriter(tmp_path / "x", q, metadata="note")
    with pytest.raises(TypeError, match="metadata"):
        IndexWriter(tmp_path / "x", q, metadata={"a": {1, 2}})
    with pytest.raises(TypeError, match="metadata"):
        IndexWriter(tmp_path / "x", q, metadata={1: "a"})
    with pytest.raises(FileNotFoundError, match="folder"):
        IndexWriter(tmp_path / "no" / "x.ock", q)
    with pytest.raises(ValueError, match="directory"):
        IndexWriter(tmp_path, q)
    with pytest.raises(TypeError, match="path"):
        IndexWriter(3, q)
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        build_index(tmp_path / "x", q, base, chunk_size=0)
    with pytest.raises(TypeError, match="chunk_size must be an integer"):
        build_index(tmp_path / "x", q, base, chunk_size=10.0)
    with pytest.raises(ValueError, match="X has dimension"):
        build_index(tmp_path / "x", q, base[:, :4])
    with pytest.raises(ValueError, match="ids must have shape"):
        build_index(tmp_path / "x", q, base, np.arange(N - 1))
    with pytest.raises(TypeError, match="ids must be an integer array"):
        build_index(tmp_path / "x", q, base, np.zeros(N))
    with pytest.raises(ValueError, match="ids must be >= 0"):
        build_index(tmp_path / "x", q, base, np.arange(N) - 300, chunk_size=100)  # refused at its chunk
    assert listing(tmp_path) == []


def test_oversized_metadata_refused_before_writing_I11(tmp_path, quantizers, base):
    """I11: metadata that cannot fit in the header is a ValueError when the writer is created, before any work;
    metadata just below the limit is stored."""
    q = quantizers["pq"]
    limit = storage.MAX_HEADER_BYTES - index_schema.HEADER_MARGIN
    with pytest.raises(ValueError, match="metadata takes"):
        IndexWriter(tmp_path / "x.ock", q, metadata={"blob": bytes(limit)})
    with pytest.raises(ValueError, match="metadata takes"):
        build_index(tmp_path / "x.ock", q, base, metadata={"blob": bytes(storage.MAX_HEADER_BYTES)})
    with pytest.raises(ValueError, match="metadata takes"):
        save_quantizer(tmp_path / "x.ock", q, metadata={"blob": bytes(limit)})
    assert listing(tmp_path) == []
    blob = bytes(limit - 32)
    build_index(tmp_path / "x.ock", q, base[:10], metadata={"blob": blob})
    with open_index(tmp_path / "x.ock") as index:
        assert index.info()["metadata"]["blob"] == blob


def test_metadata_is_copied_at_creation_I11(tmp_path, quantizers, base):
    meta = {"list": [1]}
    with IndexWriter(tmp_path / "x.ock", quantizers["pq"], metadata=meta) as w:
        meta["list"].append(2)
        meta["late"] = True
        w.add(base[:2])
    with open_index(tmp_path / "x.ock") as index:
        assert index.info()["metadata"] == {"list": [1]}
        info = index.info()
        info["metadata"]["list"].append(3)  # a copy: the index is not changed
        assert index.info()["metadata"] == {"list": [1]}
