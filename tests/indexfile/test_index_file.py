"""Tests of index and quantizer files (ockstore.index: IndexWriter, build_index, open_index, Index.save / verify /
info, save_quantizer, load_quantizer) against docs/FORMAT.md sections 11-12.

Every rule I1-I14 is cited by at least one test below (in its name or docstring). Corrupt files are written with
``storage.FileWriter`` directly: container-valid, but inconsistent as index files. The mutation fuzzer lives in
tests/test_index_fuzz.py.
"""

from __future__ import annotations

import json
import os
import re
import select
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import ockstore
from ockstore import storage
from ockstore.errors import FormatError, NotFittedError
from ockstore import Index, IndexWriter, build_index, load_quantizer, open_index, save_quantizer
from ockstore.indexfile import schema as index_schema

from conftest import gaussian_mixture
import helpers
from helpers import (hand_file, returns_within, header_end_of, is_hidden_temp, listing, read_cost, run_script_until_sigkill,
                     subprocess_env, write_sparse)

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
P = 10  # not a multiple of M = 3 or M = 4: padded subspaces
N = 700
NQ = 12

# name -> (constructor, norm encodings)
CONFIGS = {
    "pq": (lambda: ockstore.PQ(3, n_codewords=16, n_iter=3, seed=0), ["none"]),
    "ckm": (lambda: ockstore.CKM(4, n_codewords=16, n_iter=3, seed=0), ["none"]),
    "eckm": (lambda: ockstore.ECKM(3, 2, n_codewords=16, n_iter=3, seed=0), ["f32", "u8"]),
    "ockm": (lambda: ockstore.OCKM(4, 2, 4, n_codewords=16, n_iter=3, seed=0), ["f32", "u8"]),
    "ockm-k256": (lambda: ockstore.OCKM(3, 3, 2, n_codewords=256, n_iter=2, seed=1), ["u8"]),
}
CASES = [(name, enc) for name, (_, encs) in CONFIGS.items() for enc in encs]


# --------------------------------------------------------------------------------------------------------------------
# fixtures and helpers


@pytest.fixture(scope="module")
def base():
    return gaussian_mixture(N, P, seed=11)


@pytest.fixture(scope="module")
def queries():
    return gaussian_mixture(NQ, P, seed=12)


@pytest.fixture(scope="module")
def quantizers(mixture):
    return {name: make().fit(mixture) for name, (make, _) in CONFIGS.items()}


def user_ids(n):
    """Distinct, non-sequential, large ids."""
    return (np.arange(n, dtype=np.int64) * 7919 + 10**12)[::-1].copy()


def parts_of(path):
    """(meta, {name: array copy} in file order, user) of a container file."""
    with storage.open_file(path) as f:
        order = sorted(f.sections, key=lambda name: f.section_info(name)["offset"])
        return f.meta, {name: np.array(f.sections[name]) for name in order}, f.user


def write_parts(path, meta, sections, user=None, minor=0):
    """A container file with exactly these sections (in this order) and meta: valid for the container, whatever the
    index layer thinks of it (format 1.``minor``, or more if a section's dtype needs it)."""
    with storage.FileWriter(path, minor_version=minor) as w:
        for name, array in sections.items():
            w.put(name, np.ascontiguousarray(array))
        w.commit(meta, user)
    return path


def expect_format_error(path, check, name=None, *, when="open"):
    """open_index (and, for when="verify", verify) must raise FormatError naming the file, the check and the
    section or meta key ``name``; returns the message."""
    return helpers.expect_format_error(open_index, path, check, name, when=when)


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
        "params": {"dim": P, "n_subspaces": 4, "n_codebooks": 2, "beam_width": 4, "n_codewords": 16, "n_iter": 3,
                   "tol": q.tol, "seed": 0},
        "ntotal": 50, "norm_encoding": "f32", "has_ids": True,
    }
    assert type(meta["params"]["tol"]) is float
    assert user == {"a": "ü", "b": [1, 2.5]}
    assert list(sections) == ["rotation", "codebooks", "objective_history", "norm_levels", "codes", "norms", "ids"]
    dtypes = {name: arr.dtype.str for name, arr in sections.items()}
    assert dtypes == {"rotation": "<f4", "codebooks": "<f4", "objective_history": "<f8", "norm_levels": "<f4",
                      "codes": "|u1", "norms": "<f4", "ids": "<i8"}
    assert sections["codebooks"].shape == (4, 2, 16, 3)  # S = ceil(10 / 4)
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
        q = ockstore.OCKM(3, 2, 3, n_codewords=16, n_iter=2, seed=5).fit(mixture)
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
    q = ockstore.OCKM(3, 2, 2, n_codewords=16, n_iter=2, seed=0).fit(mixture)
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


# --------------------------------------------------------------------------------------------------------------------
# opening: paths, lifecycle, cost


def test_open_paths(tmp_path, quantizers):
    with pytest.raises(FileNotFoundError, match="missing.ock"):
        open_index(tmp_path / "missing.ock")
    with pytest.raises(ValueError, match="not a regular file"):
        open_index(tmp_path)
    with pytest.raises(TypeError, match="path"):
        open_index(None)
    fifo = tmp_path / "pipe.ock"
    os.mkfifo(fifo)
    outcome = [returns_within(lambda: opener(fifo)) for opener in (open_index, load_quantizer)]
    assert all(kind == "raised" and isinstance(e, ValueError) and "not a regular file" in str(e)
               for kind, e in outcome), outcome
    with pytest.raises(FormatError, match="bad magic"):
        open_index(Path(__file__))  # not an ockstore file at all
    path = tmp_path / "x.ock"
    build_index(str(path), quantizers["pq"], np.zeros((2, P)))
    with open_index(path) as a, open_index(str(path)) as b:
        assert a.path == b.path == str(path)


def test_close_and_use_after_close(tmp_path, quantizers, base, queries):
    path = tmp_path / "x.ock"
    build_index(path, quantizers["ockm"], base)
    index = open_index(path)
    codes = index.codes
    mapped = index._file
    with index:
        index.search(queries, 2)
    assert index.closed and mapped.closed
    index.close()  # idempotent
    for use in (lambda: index.search(queries, 2), lambda: index.verify(), lambda: index.info(),
                lambda: index.save(tmp_path / "y.ock"), lambda: index.path, lambda: len(index)):
        with pytest.raises(ValueError, match="closed"):
            use()
    assert codes.shape == (N, 8) and int(codes[-1].max()) < 16  # a view handed out stays valid


def test_open_is_cheap_until_searched_I9(tmp_path, quantizers):
    """I9: opening builds no search tables (they come with the first search) and reads no vector section."""
    path = tmp_path / "x.ock"
    build_index(path, quantizers["ockm"], np.zeros((5, P)))
    with open_index(path) as index:
        assert index._tables is None and index.quantizer._codec_tables is None
        index.search(np.zeros(P), 1)
        assert index._tables is not None


def _sparse_index(path, n_rows, q):
    """A valid index file whose codes and norms sections are holes of n_rows rows (built by hand: preamble, msgpack
    header with canonical offsets, the small sections, then a sparse extension)."""
    meta = index_schema.quantizer_meta("index", q)
    meta.update(ntotal=n_rows, norm_encoding="u8", has_ids=False)
    small = [("rotation", q.rotation), ("codebooks", q.codebooks), ("objective_history", q.objective_history),
             ("norm_levels", q.norm_levels)]
    big = [("codes", "<u1", (n_rows, q.code_size)), ("norms", "<u1", (n_rows,))]
    return write_sparse(path, hand_file(small, meta, phantom=big))


def small_sections_pages(q):
    """The most of an index file's mapping that opening may touch: the small sections (rotation, codebooks,
    objective history, norm levels, a few KiB) plus the kernel's fault-around (up to 64 KiB mapped per page fault,
    one fault per section at most), far below the vector sections of the files below."""
    small = (q.rotation, q.codebooks, q.objective_history, q.norm_levels)
    return sum(np.asarray(a).nbytes for a in small) + len(small) * (64 << 10)


def test_open_reads_no_vector_bytes_I9(tmp_path, quantizers):
    """I9: a file claiming 2**32 vectors (48 GiB of codes and norms, a sparse hole) opens reading only the preamble,
    the header and the small sections: explicit reads of the header alone, a few pages of the mapping (the small
    sections, copied into the model), and little memory."""
    q = quantizers["ockm"]
    n_rows = 2**32
    path = _sparse_index(tmp_path / "huge.ock", n_rows, q)

    open_index(path).close()  # warm up imports and caches
    index, cost = read_cost(lambda: open_index(path), path)
    try:
        assert index.ntotal == n_rows and index.info()["bytes_per_vector"] == 9
        assert index.codes.shape == (n_rows, 8)
        assert cost.explicit == header_end_of(path), cost
        if cost.syscalls is not None:
            assert cost.syscalls < 1 << 20, cost
        if cost.mapped is not None:
            assert cost.mapped <= small_sections_pages(q), cost
        assert cost.allocated < 1 << 20, cost
    finally:
        index.close()


def test_open_cost_independent_of_n_I9(tmp_path, quantizers):
    """I9: a 2-million-vector file opens with the same work as a 10-vector one: the same explicit reads (the header),
    the same pages of the mapping (the small sections), the same allocations (the model's copies of the small
    sections). A search afterwards does read the codes (so the measure would see a pass over the vectors)."""
    q = quantizers["ockm"]
    costs = {}
    for n in (10, 2_000_000):
        meta = index_schema.quantizer_meta("index", q)
        meta.update(ntotal=n, norm_encoding="u8", has_ids=False)
        sections = {"rotation": q.rotation, "codebooks": q.codebooks, "objective_history": q.objective_history,
                    "norm_levels": q.norm_levels, "codes": np.zeros((n, 8), "<u1"), "norms": np.zeros(n, "<u1")}
        path = write_parts(tmp_path / f"{n}.ock", meta, sections)
        index, costs[n] = read_cost(lambda: open_index(path), path)
        with index:
            assert index.ntotal == n
            assert costs[n].explicit == header_end_of(path), costs[n]
            if n > 10:
                _, searched = read_cost(lambda: index.search(np.zeros((1, P), np.float32), 1, n_threads=1), path)
                assert searched.mapped is None or searched.mapped >= 16_000_000, searched
    small, big = costs[10], costs[2_000_000]
    assert abs(big.explicit - small.explicit) < 64, costs
    if big.mapped is not None:
        assert big.mapped <= small_sections_pages(q), costs
    assert big.allocated < small.allocated + (1 << 12), costs


# --------------------------------------------------------------------------------------------------------------------
# hand-written inconsistent files


@pytest.fixture(scope="module")
def valid_parts(tmp_path_factory, quantizers, base):
    """(meta, sections, user) of valid files: "ockm" (f32 norms, ids), "pq" (no ids), "quantizer" (OCKM)."""
    folder = tmp_path_factory.mktemp("valid")
    build_index(folder / "ockm.ock", quantizers["ockm"], base[:40], user_ids(40), norm_encoding="f32")
    build_index(folder / "pq.ock", quantizers["pq"], base[:40])
    save_quantizer(folder / "q.ockq", quantizers["ockm"])
    return {name: parts_of(folder / file) for name, file in
            (("ockm", "ockm.ock"), ("pq", "pq.ock"), ("quantizer", "q.ockq"))}


def _edit(parts, meta=None, params=None, drop_meta=(), drop_params=(), sections=None, drop=(), after=None):
    """Copies of (meta, sections) with meta keys / params replaced or dropped and sections replaced, dropped or
    added (``after``: (name, array) appended at the end)."""
    meta0, sections0, _user = parts
    new_meta = json.loads(json.dumps(meta0))
    for key in drop_meta:
        new_meta.pop(key, None)
    for key in drop_params:
        new_meta["params"].pop(key, None)
    new_meta.update(meta or {})
    if params is not None:
        if isinstance(params, dict):
            new_meta["params"] = {**new_meta["params"], **params}
        else:
            new_meta["params"] = params
    new_sections = {name: arr.copy() for name, arr in sections0.items() if name not in drop}
    for name, arr in (sections or {}).items():
        new_sections[name] = arr
    if after is not None:
        new_sections[after[0]] = after[1]
    return new_meta, new_sections


def _nan_at(arr, where):
    arr = arr.copy()
    arr[where] = np.nan
    return arr


# (case id, file, edit kwargs as a function of the valid sections, check, name in the message)
BAD_OPEN = [
    # I1: kind
    ("kind-missing", "ockm", lambda s: {"drop_meta": ["kind"]}, "bad meta", "kind"),
    ("kind-int", "ockm", lambda s: {"meta": {"kind": 1}}, "bad meta", "kind"),
    ("kind-unknown", "ockm", lambda s: {"meta": {"kind": "graph"}}, "unknown kind", "kind"),
    ("kind-quantizer", "quantizer", lambda s: {}, "wrong kind", "kind"),
    # I2: method and params
    ("method-unknown", "ockm", lambda s: {"meta": {"method": "opq"}}, "bad meta", "method"),
    ("method-list", "ockm", lambda s: {"meta": {"method": ["ockm"]}}, "bad meta", "method"),
    ("method-missing", "ockm", lambda s: {"drop_meta": ["method"]}, "bad meta", "method"),
    ("params-list", "ockm", lambda s: {"params": [1, 2]}, "bad meta", "params"),
    ("params-missing-key", "ockm", lambda s: {"drop_params": ["n_codewords"]}, "bad meta", "n_codewords"),
    ("params-missing-seed", "pq", lambda s: {"drop_params": ["seed"]}, "bad meta", "seed"),
    ("dim-zero", "ockm", lambda s: {"params": {"dim": 0}}, "bad meta", "dim"),
    ("dim-bool", "ockm", lambda s: {"params": {"dim": True}}, "bad meta", "dim"),
    ("dim-float", "ockm", lambda s: {"params": {"dim": 10.0}}, "bad meta", "dim"),
    ("n_subspaces-above-dim", "ockm", lambda s: {"params": {"n_subspaces": P + 1}}, "bad meta", "n_subspaces"),
    ("n_subspaces-zero", "ockm", lambda s: {"params": {"n_subspaces": 0}}, "bad meta", "n_subspaces"),
    ("n_codebooks-65", "ockm", lambda s: {"params": {"n_codebooks": 65}}, "bad meta", "n_codebooks"),
    ("beam_width-zero", "ockm", lambda s: {"params": {"beam_width": 0}}, "bad meta", "beam_width"),
    ("n_codewords-1", "ockm", lambda s: {"params": {"n_codewords": 1}}, "bad meta", "n_codewords"),
    ("n_codewords-257", "ockm", lambda s: {"params": {"n_codewords": 257}}, "bad meta", "n_codewords"),
    ("n_iter-zero", "ockm", lambda s: {"params": {"n_iter": 0}}, "bad meta", "n_iter"),
    ("tol-negative", "ockm", lambda s: {"params": {"tol": -1e-3}}, "bad meta", "tol"),
    ("tol-nan", "ockm", lambda s: {"params": {"tol": float("nan")}}, "bad meta", "tol"),
    ("tol-str", "ockm", lambda s: {"params": {"tol": "0.1"}}, "bad meta", "tol"),
    ("seed-negative", "ockm", lambda s: {"params": {"seed": -1}}, "bad meta", "seed"),
    ("seed-float", "ockm", lambda s: {"params": {"seed": 1.0}}, "bad meta", "seed"),
    ("pq-two-codebooks", "pq", lambda s: {"params": {"n_codebooks": 2}}, "bad meta", "params"),
    ("ckm-beam", "pq", lambda s: {"meta": {"method": "ckm"}, "params": {"beam_width": 3},
                                  "sections": {"rotation": np.eye(P, dtype="<f4")}}, "bad meta", "params"),
    ("eckm-beam", "ockm", lambda s: {"meta": {"method": "eckm"}}, "bad meta", "params"),
    # I3: index meta
    ("ntotal-negative", "ockm", lambda s: {"meta": {"ntotal": -1}}, "bad meta", "ntotal"),
    ("ntotal-str", "ockm", lambda s: {"meta": {"ntotal": "40"}}, "bad meta", "ntotal"),
    ("ntotal-missing", "ockm", lambda s: {"drop_meta": ["ntotal"]}, "bad meta", "ntotal"),
    ("norm_encoding-f16", "ockm", lambda s: {"meta": {"norm_encoding": "f16"}}, "bad meta", "norm_encoding"),
    ("norm_encoding-none-with-C2", "ockm", lambda s: {"meta": {"norm_encoding": "none"}}, "bad meta",
     "norm_encoding"),
    ("norm_encoding-u8-with-C1", "pq", lambda s: {"meta": {"norm_encoding": "u8"}}, "bad meta", "norm_encoding"),
    ("has_ids-int", "ockm", lambda s: {"meta": {"has_ids": 1}}, "bad meta", "has_ids"),
    # I4: required sections, dtypes, shapes, row counts
    ("codebooks-shape", "ockm", lambda s: {"sections": {"codebooks": s["codebooks"][:, :, :8]}},
     "bad section shape", "codebooks"),
    ("codebooks-S", "ockm", lambda s: {"sections": {"codebooks": np.zeros((4, 2, 16, 4), "<f4")}},
     "bad section shape", "codebooks"),
    ("codebooks-dtype", "ockm", lambda s: {"sections": {"codebooks": s["codebooks"].astype("<f8")}},
     "bad section dtype", "codebooks"),
    ("codebooks-missing", "ockm", lambda s: {"drop": ["codebooks"]}, "missing section", "codebooks"),
    ("rotation-missing", "ockm", lambda s: {"drop": ["rotation"]}, "missing section", "rotation"),
    ("rotation-shape", "ockm", lambda s: {"sections": {"rotation": np.eye(P + 1, dtype="<f4")}},
     "bad section shape", "rotation"),
    ("history-missing", "ockm", lambda s: {"drop": ["objective_history"]}, "missing section", "objective_history"),
    ("history-empty", "ockm", lambda s: {"sections": {"objective_history": np.zeros(0, "<f8")}},
     "bad section shape", "objective_history"),
    ("history-2d", "ockm", lambda s: {"sections": {"objective_history": np.zeros((2, 2), "<f8")}},
     "bad section shape", "objective_history"),
    ("norm_levels-missing", "ockm", lambda s: {"drop": ["norm_levels"]}, "missing section", "norm_levels"),
    ("norm_levels-shape", "ockm", lambda s: {"sections": {"norm_levels": s["norm_levels"][:255]}},
     "bad section shape", "norm_levels"),
    ("codes-missing", "ockm", lambda s: {"drop": ["codes"]}, "missing section", "codes"),
    ("codes-dtype", "ockm", lambda s: {"sections": {"codes": s["codes"].astype("<u2")}}, "bad section dtype",
     "codes"),
    ("codes-width", "ockm", lambda s: {"sections": {"codes": s["codes"][:, :7]}}, "bad section shape", "codes"),
    ("codes-flat", "ockm", lambda s: {"sections": {"codes": s["codes"].reshape(-1)}}, "bad section shape", "codes"),
    ("codes-rows", "ockm", lambda s: {"sections": {"codes": s["codes"][:39]}}, "row count mismatch", "codes"),
    ("norms-rows", "ockm", lambda s: {"sections": {"norms": s["norms"][:39]}}, "row count mismatch", "norms"),
    ("ids-rows", "ockm", lambda s: {"sections": {"ids": np.concatenate([s["ids"], s["ids"][:1]])}},
     "row count mismatch", "ids"),
    ("ntotal-vs-all", "ockm", lambda s: {"meta": {"ntotal": 41}}, "row count mismatch", "codes"),
    ("norms-missing", "ockm", lambda s: {"drop": ["norms"]}, "missing section", "norms"),
    ("norms-u8-for-f32", "ockm", lambda s: {"sections": {"norms": s["norms"].astype("<u1")}}, "bad section dtype",
     "norms"),
    ("ids-missing", "ockm", lambda s: {"drop": ["ids"]}, "missing section", "ids"),
    ("ids-dtype", "ockm", lambda s: {"sections": {"ids": s["ids"].astype("<u4")}}, "bad section dtype", "ids"),
    # I5: sections the meta makes absent
    ("pq-rotation", "pq", lambda s: {"after": ("rotation", np.eye(P, dtype="<f4"))}, "unexpected section",
     "rotation"),
    ("pq-norm_levels", "pq", lambda s: {"after": ("norm_levels", np.arange(256, dtype="<f4"))},
     "unexpected section", "norm_levels"),
    ("pq-norms", "pq", lambda s: {"after": ("norms", np.zeros(40, "<f4"))}, "unexpected section", "norms"),
    ("ids-without-has_ids", "ockm", lambda s: {"meta": {"has_ids": False}}, "unexpected section", "ids"),
    # I6: values of the small sections
    ("codebooks-nan", "ockm", lambda s: {"sections": {"codebooks": _nan_at(s["codebooks"], (1, 0, 3, 0))}},
     "non-finite values", "codebooks"),
    ("rotation-inf", "ockm", lambda s: {"sections": {"rotation": s["rotation"] * np.float32(np.inf)}},
     "non-finite values", "rotation"),
    ("norm_levels-nan", "ockm", lambda s: {"sections": {"norm_levels": _nan_at(s["norm_levels"], 200)}},
     "non-finite values", "norm_levels"),
    ("history-nan", "ockm", lambda s: {"sections": {"objective_history": _nan_at(s["objective_history"], 0)}},
     "non-finite values", "objective_history"),
    ("codebooks-padding", "ockm", lambda s: {"sections": {"codebooks": _poke(s["codebooks"], (3, 1, 5, 2))}},
     "non-zero codebook padding", "codebooks"),
    ("norm_levels-unsorted", "ockm", lambda s: {"sections": {"norm_levels": s["norm_levels"][::-1].copy()}},
     "unsorted norm levels", "norm_levels"),
    ("rotation-huge", "ockm", lambda s: {"sections": {"rotation": s["rotation"] * np.float32(1e30)}},
     "rotation not orthogonal", "rotation"),
    ("rotation-scaled", "ockm", lambda s: {"sections": {"rotation": s["rotation"] * np.float32(1.01)}},
     "rotation not orthogonal", "rotation"),
    ("rotation-skewed", "ockm", lambda s: {"sections": {"rotation": _add_at(s["rotation"], (3, 5), 0.01)}},
     "rotation not orthogonal", "rotation"),
]


def _add_at(arr, where, value):
    arr = arr.copy()
    arr[where] += value
    return arr


def test_a_rotation_within_the_tolerance_opens_I6(tmp_path, valid_parts, queries):
    """I6: the orthogonality check of the rotation (max |R^T R - I| <= ROTATION_TOLERANCE = 1e-3) leaves room for
    float32 rounding, far beyond what ockstore's own rotations show (about 6e-8 on sift and minilm, every method)."""
    from ockstore.indexfile.schema import ROTATION_TOLERANCE

    meta, sections = _edit(valid_parts["ockm"])
    R = sections["rotation"].astype(np.float64)
    assert np.abs(R.T @ R - np.eye(P)).max() < 1e-6
    for delta, opens in ((ROTATION_TOLERANCE / 10, True), (ROTATION_TOLERANCE * 3, False)):
        # (1 + delta) R: R^T R - I = (2 delta + delta^2) I
        sections["rotation"] = valid_parts["ockm"][1]["rotation"] * np.float32(1 + delta)
        path = write_parts(tmp_path / f"r{delta}.ock", meta, sections)
        if opens:
            with open_index(path) as index:
                index.search(queries[:2], 3)
        else:
            expect_format_error(path, "rotation not orthogonal", "rotation")


def _poke(arr, where):
    arr = arr.copy()
    arr[where] = 1.0
    return arr


@pytest.mark.parametrize("case,file,edit,check,name", BAD_OPEN, ids=[c[0] for c in BAD_OPEN])
def test_inconsistent_file_refused_at_open_I1_to_I6(tmp_path, valid_parts, case, file, edit, check, name):
    """I1-I6: container-valid files that are inconsistent as index files raise FormatError at open, naming the
    check and the meta key or section; load_quantizer refuses them too (the quantizer file only for its kind)."""
    parts = valid_parts[file]
    meta, sections = _edit(parts, **edit(parts[1]))
    path = write_parts(tmp_path / "bad.ock", meta, sections)
    expect_format_error(path, check, name)
    if check != "wrong kind":
        with pytest.raises(FormatError, match=re.escape(check)):
            load_quantizer(path)


def test_quantizer_file_with_vector_sections_refused_I5(tmp_path, valid_parts):
    """I5: a quantizer file holds no codes, norms or ids; an unknown kind is refused by load_quantizer too."""
    meta, sections = _edit(valid_parts["quantizer"], after=("codes", np.zeros((3, 8), "<u1")))
    path = write_parts(tmp_path / "q.ockq", meta, sections)
    with pytest.raises(FormatError, match="unexpected section: section 'codes'"):
        load_quantizer(path)
    meta, sections = _edit(valid_parts["quantizer"], meta={"kind": "tokenizer"})
    with pytest.raises(FormatError, match="unknown kind"):
        load_quantizer(write_parts(tmp_path / "q2.ockq", meta, sections))


BAD_VERIFY = [
    ("codes-above-K", lambda s: {"sections": {"codes": _put(s["codes"], (17, 5), 16)}}, "code out of range",
     "codes", "row 17, byte 5 holds 16"),
    ("codes-255", lambda s: {"sections": {"codes": _put(s["codes"], (39, 0), 255)}}, "code out of range", "codes",
     "row 39, byte 0 holds 255"),
    ("norms-nan", lambda s: {"sections": {"norms": _put(s["norms"], 3, np.nan)}}, "non-finite values", "norms",
     "row 3"),
    ("norms-inf", lambda s: {"sections": {"norms": _put(s["norms"], 0, -np.inf)}}, "non-finite values", "norms",
     "row 0"),
    ("ids-negative", lambda s: {"sections": {"ids": _put(s["ids"], 8, -5)}}, "negative id", "ids",
     "row 8 holds -5"),
    ("ids-minus-one", lambda s: {"sections": {"ids": _put(s["ids"], 39, -1)}}, "negative id", "ids", "row 39"),
]


def _put(arr, where, value):
    arr = arr.copy()
    arr[where] = value
    return arr


@pytest.mark.parametrize("case,edit,check,name,detail", BAD_VERIFY, ids=[c[0] for c in BAD_VERIFY])
def test_bad_vector_values_found_by_verify_only_I7(tmp_path, valid_parts, queries, case, edit, check, name, detail):
    """I7: codes >= K, non-finite norms and negative ids are found by verify (with their row), not by open; searching
    such a file does not crash, and a code >= K is never returned."""
    parts = valid_parts["ockm"]
    meta, sections = _edit(parts, **edit(parts[1]))
    path = write_parts(tmp_path / "bad.ock", meta, sections)
    message = expect_format_error(path, check, name, when="verify")
    assert detail in message
    with open_index(path) as index:
        for distance in ("adc", "sdc"):
            for threads in (1, 2):
                D, I = index.search(queries, 40, distance=distance, n_threads=threads)
                assert D.shape == (NQ, 40)
                if case.startswith("codes"):
                    bad_row = 17 if case == "codes-above-K" else 39
                    assert not (I == sections["ids"][bad_row]).any()
    # The same checks for an index in memory (no file): same messages, "<in-memory index>" for the path.
    # (int64 ids are used as given, not scanned, by the low-level constructor)
    memory = Index(load_quantizer(path), sections["codes"], sections["norms"], sections["ids"], "f32")
    with pytest.raises(FormatError, match=re.escape(f"'<in-memory index>': {check}: section {name!r}")):
        memory.verify()


def test_verify_reports_crc_before_values_R18_I7(tmp_path, valid_parts):
    """I7 comes after R18: a corrupted codes byte is reported as a CRC mismatch (opening still succeeds)."""
    path = write_parts(tmp_path / "ok.ock", *_edit(valid_parts["ockm"]))
    data = bytearray(path.read_bytes())
    with storage.open_file(path) as f:
        offset = f.section_info("codes")["offset"]
    data[offset + 3] = 250
    path.write_bytes(bytes(data))
    expect_format_error(path, "CRC mismatch", "codes", when="verify")


def test_unknown_sections_and_keys_ignored_I8(tmp_path, valid_parts, queries):
    """I8: unknown meta keys, unknown params keys, an unknown section and a different library string are ignored."""
    reference = write_parts(tmp_path / "ref.ock", *_edit(valid_parts["ockm"]))
    meta, sections = _edit(valid_parts["ockm"], meta={"future": {"x": [1, 2]}, "library": "other 9.9"},
                           params={"extra_param": "z"}, after=("graph", np.arange(12, dtype="<i4").reshape(3, 4)))
    path = write_parts(tmp_path / "extra.ock", meta, sections, user={"u": 1})
    with open_index(path) as index, open_index(reference) as ref:
        index.verify()
        for distance in ("adc", "sdc"):
            np.testing.assert_array_equal(index.search(queries, 7, distance=distance)[1],
                                          ref.search(queries, 7, distance=distance)[1])
        assert index.quantizer == ref.quantizer and index.info()["metadata"] == {"u": 1}
    assert load_quantizer(path) == load_quantizer(reference)


def test_minor_version_accepted_major_version_refused_R3_R4(tmp_path, valid_parts, queries):
    """A file of format 1.7 opens; a file of major version 2 is refused with a message giving both versions."""
    path = write_parts(tmp_path / "v.ock", *_edit(valid_parts["ockm"]))
    data = bytearray(path.read_bytes())
    struct.pack_into("<HH", data, 8, 1, 7)
    path.write_bytes(bytes(data))
    with open_index(path) as index:
        assert index.info()["format_version"] == "1.7"
        index.verify()
    struct.pack_into("<HH", data, 8, 2, 0)
    path.write_bytes(bytes(data))
    message = expect_format_error(path, "unsupported version")
    assert "2.0" in message and "major version 1" in message
    with pytest.raises(FormatError, match="unsupported version"):
        load_quantizer(path)


def test_huge_but_valid_params_I2(tmp_path, valid_parts, queries):
    """I2: params at the top of their ranges (beam_width and seed up to 2**64 - 1, tol as an int) are valid."""
    meta, sections = _edit(valid_parts["ockm"], params={"beam_width": 2**64 - 1, "seed": 2**64 - 1, "tol": 0,
                                                        "n_iter": 2**63})
    path = write_parts(tmp_path / "h.ock", meta, sections)
    with open_index(path) as index:
        index.verify()
        assert index.quantizer.beam_width == 2**64 - 1 and index.quantizer.tol == 0.0
        D, I = index.search(queries, 3, distance="sdc")  # encoding with T > K acts as T = K
        assert (I >= 0).all()


# --------------------------------------------------------------------------------------------------------------------
# concurrent readers while the file is replaced


_READER = r"""
import json, os, sys, time
import numpy as np
import ockstore

path, folder, worker = sys.argv[1], sys.argv[2], sys.argv[3]
Q = np.load(os.path.join(folder, "queries.npy"))
expected = [(np.load(os.path.join(folder, f"D{v}.npy")), np.load(os.path.join(folder, f"I{v}.npy"))) for v in (0, 1)]

def which(D, I):
    for v, (eD, eI) in enumerate(expected):
        if np.array_equal(D, eD) and np.array_equal(I, eI):
            return v
    return None

held = ockstore.open_index(path)  # kept open across every replacement: must keep giving its first answer
held_version = which(*held.search(Q, 5, n_threads=1))
counts = [0, 0]
ready = False
while True:
    stop = os.path.exists(os.path.join(folder, "stop"))
    with ockstore.open_index(path) as index:
        D, I = index.search(Q, 5, n_threads=1)
    v = which(D, I)
    if v is None or which(*held.search(Q, 5, n_threads=1)) != held_version:
        print(json.dumps({"error": "unexpected result", "worker": worker}), flush=True)
        sys.exit(3)
    counts[v] += 1
    if not ready:
        print("READY", flush=True)
        ready = True
    if stop:
        break
held.verify()
held.close()
print(json.dumps({"counts": counts, "held": held_version}), flush=True)
"""


@pytest.mark.slow
def test_readers_see_old_or_new_file_while_it_is_replaced_I13(tmp_path, quantizers, base, queries):
    """I13 (R21, R22): four processes open and search the file in a loop, and keep one index open, while the main
    process replaces the file six times with IndexWriter; every result equals the old or the new index's."""
    q = quantizers["ockm"]
    versions = [base, base[::-1] * 0.5]
    folder = tmp_path / "shared"
    folder.mkdir()
    np.save(folder / "queries.npy", queries)
    for v, X in enumerate(versions):
        D, I = Index.from_vectors(q, X, user_ids(N) + v).search(queries, 5, n_threads=1)
        np.save(folder / f"D{v}.npy", D)
        np.save(folder / f"I{v}.npy", I)
    assert not np.array_equal(np.load(folder / "I0.npy"), np.load(folder / "I1.npy"))
    path = tmp_path / "live.ock"

    def write(v):
        with IndexWriter(path, q) as w:
            for start in range(0, N, 100):
                w.add(versions[v][start:start + 100], user_ids(N)[start:start + 100] + v)

    write(0)
    env = subprocess_env()
    env["OMP_NUM_THREADS"] = "1"
    procs = [subprocess.Popen([sys.executable, "-c", _READER, str(path), str(folder), str(i)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for i in range(4)]
    try:
        for proc in procs:
            ready, _, _ = select.select([proc.stdout], [], [], 120)
            assert ready, "a reader did not start in time"
            line = proc.stdout.readline().strip()
            assert line == "READY", (line, proc.stderr.read() if proc.poll() is not None else "")
        for i in range(6):
            write((i + 1) % 2)
            time.sleep(0.15)
        (folder / "stop").touch()
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, (proc.returncode, out, err[-2000:])
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert all(r["held"] == 0 for r in results)
    totals = np.sum([r["counts"] for r in results], axis=0)
    assert totals.sum() >= 8 and totals[0] > 0 and totals[1] > 0, totals
    assert all(name == "live.ock" for name in listing(tmp_path) if name != "shared")


# --------------------------------------------------------------------------------------------------------------------
# a build killed with SIGKILL


@pytest.mark.parametrize("mode", ["midway", "before-replace"])
@pytest.mark.parametrize("existing", [True, False], ids=["old-file", "no-file"])
def test_sigkill_during_build_keeps_previous_file_I13(tmp_path, quantizers, base, mode, existing):
    """I13: a build killed with SIGKILL midway (between chunks) or just before its rename leaves the previous file
    byte for byte, or no file under the name when there was none; only hidden temporary files may remain."""
    qpath = tmp_path / "q.ockq"
    save_quantizer(qpath, quantizers["ockm"])
    path = tmp_path / "x.ock"
    if existing:
        build_index(path, quantizers["pq"], base[:30], metadata={"v": "old"})
        old = path.read_bytes()
    run_script_until_sigkill("index_kill_builder.py", qpath, path, mode,
                             kill_after_line="MIDWAY" if mode == "midway" else None, timeout=120)
    names = [n for n in listing(tmp_path) if n != "q.ockq"]
    assert all(n == "x.ock" or is_hidden_temp(n, "x.ock") for n in names), names
    if existing:
        assert path.read_bytes() == old
        with open_index(path) as index:
            index.verify()
            assert index.info()["metadata"] == {"v": "old"}
    else:
        assert not path.exists()
    if mode == "before-replace":
        assert any(is_hidden_temp(n, "x.ock") for n in names)  # the killed commit had written its temporary file


def test_sigkill_after_rename_leaves_complete_new_file_I13(tmp_path, quantizers):
    """I13: killed right after the rename (before the folder fsync), the new file is complete and valid."""
    qpath = tmp_path / "q.ockq"
    save_quantizer(qpath, quantizers["ockm"])
    path = tmp_path / "x.ock"
    run_script_until_sigkill("index_kill_builder.py", qpath, path, "after-replace", timeout=120)
    with open_index(path) as index:
        index.verify()
        assert index.info()["metadata"] == {"writer": "kill"} and index.ntotal > 0


# --------------------------------------------------------------------------------------------------------------------
# the golden file (format version 1, pinned forever)


def test_golden_v1_file_I14(tmp_path):
    """I14: the committed v1 index file (tools/make_golden_index.py) opens, verifies and gives the committed
    neighbours: ids exactly, distances to 1e-5, for ADC and SDC. If this fails, the format or its meaning changed."""
    path = DATA / "golden_v1.ock"
    expected = {name: np.load(DATA / f"golden_v1_{name}.npy")
                for name in ("queries", "adc_D", "adc_I", "sdc_D", "sdc_I")}
    assert expected["adc_I"].shape == (10, 10) and (expected["adc_I"] >= 0).all()
    with open_index(path) as index:
        index.verify()
        info = index.info()
        assert {key: info[key] for key in ("N", "P", "method", "M", "C", "K", "T", "bits", "norm_encoding",
                                           "bytes_per_vector", "format_version", "has_ids")} == {
            "N": 200, "P": 12, "method": "ockm", "M": 3, "C": 2, "K": 16, "T": 4, "bits": 48, "norm_encoding": "u8",
            "bytes_per_vector": 7, "format_version": "1.0", "has_ids": True}
        assert info["metadata"]["generator"] == "tools/make_golden_index.py"
        Q = expected["queries"]
        k = expected["adc_I"].shape[1]
        for distance in ("adc", "sdc"):
            D, I = index.search(Q, k, distance=distance)
            np.testing.assert_array_equal(I, expected[f"{distance}_I"])
            np.testing.assert_allclose(D, expected[f"{distance}_D"], rtol=1e-5, atol=1e-5)
        # Writing it again with today's writer gives the same sections and the same meta (library aside).
        index.save(tmp_path / "copy.ock")
        meta, sections, user = parts_of(tmp_path / "copy.ock")
    meta0, sections0, user0 = parts_of(path)
    assert {k: v for k, v in meta.items() if k != "library"} == {k: v for k, v in meta0.items() if k != "library"}
    assert user == user0 and list(sections) == list(sections0)
    for name in sections:
        assert sections[name].tobytes() == sections0[name].tobytes(), name


# --------------------------------------------------------------------------------------------------------------------
# file_info: describe either kind of file without loading its vectors


def test_file_info_of_index_and_quantizer_files(tmp_path, quantizers, base):
    q = quantizers["ockm"]
    index_path, quantizer_path = tmp_path / "b.ock", tmp_path / "q.ock"
    build_index(index_path, q, base, metadata={"source": "test"})
    save_quantizer(quantizer_path, q, metadata={"note": "q"})
    with open_index(index_path) as index:
        expected = index.info()
    info = ockstore.file_info(index_path)
    assert info.pop("kind") == "index"
    assert info == expected
    qinfo = ockstore.file_info(quantizer_path)
    assert qinfo["kind"] == "quantizer"
    assert (qinfo["P"], qinfo["M"], qinfo["C"], qinfo["K"], qinfo["bits"]) == (P, 4, 2, 16, q.bits)
    assert qinfo["iterations"] == len(q.objective_history) - 1
    assert qinfo["objective"] == q.objective_history[-1]
    assert qinfo["metadata"] == {"note": "q"} and qinfo["format_version"] == "1.0"
    (tmp_path / "junk.ock").write_bytes(b"not an index" * 10)
    with pytest.raises(FormatError):
        ockstore.file_info(tmp_path / "junk.ock")
