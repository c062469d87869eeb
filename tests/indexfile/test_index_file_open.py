"""Opening index files (docs/FORMAT.md sections 11-12): paths, lifecycle, the cost of open (O(1) in N, no vector bytes
read), readers that keep working while the file is replaced (I13), and builds killed with SIGKILL (I13).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ockstore.errors import FormatError
from ockstore import Index, IndexWriter, build_index, load_quantizer, open_index, save_quantizer
from ockstore.indexfile import schema as index_schema

from index_files import N, P, user_ids, write_parts
from index_files import base, quantizers, queries  # noqa: F401 - pytest fixtures
from helpers import (
    hand_file, returns_within, header_end_of, is_hidden_temp, listing, read_cost, run_script_until_sigkill,
    subprocess_env, write_sparse,
)


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
    assert codes.shape == (N, 8) and int(codes[-1].max()) < 32  # a view handed out stays valid


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
