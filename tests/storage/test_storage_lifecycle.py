"""The container's file lifecycle (docs/FORMAT.md R19-R23): opening costs nothing per byte, writes are atomic (nothing
under the name before the commit, fsync-rename-fsync, a killed writer leaves the old file), readers keep the old
data after a replacement, closed objects refuse use, and paths that are not regular files are refused.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from ockstore.storage import FileWriter, open_file
from helpers import (
    returns_within, hand_file, header_end_of, header_of, is_hidden_temp, listing, read_cost, run_script_until_sigkill,
    write_sparse,
)

from storage_files import small_sections, write_file


# --------------------------------------------------------------------------------------------------------------------
# opening costs nothing per byte


def test_open_reads_no_section_bytes_R19(tmp_path):
    """R19: a file claiming a 64 GiB section (sparse) opens reading exactly the preamble and the header: no other
    read, no page of its mapping touched, no allocation to speak of."""
    huge = 2**36
    data = hand_file([("small", np.arange(4, dtype="<u1"))], phantom=[("huge", "<u1", (huge,))])
    path = write_sparse(tmp_path / "huge.ock", data)
    assert header_of(data)["sections"][1]["offset"] + huge == os.stat(path).st_size

    f, cost = read_cost(lambda: open_file(path), path)
    try:
        assert f.sections["huge"].shape == (huge,) and f.sections["huge"].dtype == np.uint8
        assert cost.explicit == header_end_of(data), cost  # the preamble and the header, read once
        if cost.syscalls is not None:
            assert cost.syscalls < 1 << 20, cost  # the preamble, the header and /proc/self/io itself
        if cost.mapped is not None:
            assert cost.mapped == 0, cost  # sections are views that read nothing until used
        assert cost.allocated < 1 << 20, cost
    finally:
        f.close()


def test_open_cost_independent_of_size_R19(tmp_path):
    """R19: a 10-million-row file opens with the same work as a 10-row one (no pass over the data): the same reads
    (the preamble and the header), no page of the mapping touched, the same small allocations. Reading the section
    afterwards does touch its pages (so the measure would see a pass over the data)."""
    small = write_file(tmp_path / "small.ock", growing=[("codes", "<u1", (), [np.zeros(10, "<u1")])])
    rows = np.zeros(1_000_000, "<u1")
    big = write_file(tmp_path / "big.ock", growing=[("codes", "<u1", (), [rows] * 10)])
    costs = {}
    for path in (small, big):
        f, cost = read_cost(lambda: open_file(path), path)
        with f:
            assert cost.explicit == header_end_of(path), cost
            if cost.mapped is not None:
                assert cost.mapped == 0, cost
            assert cost.allocated < 1 << 16, cost
            costs[path] = cost
            if path == big:
                assert f.sections["codes"].shape == (10_000_000,)
                _, touched = read_cost(lambda: int(f.sections["codes"].sum()), path)
                assert touched.mapped is None or touched.mapped >= 10_000_000, touched
    assert abs(costs[big].explicit - costs[small].explicit) < 64, costs
    assert abs(costs[big].allocated - costs[small].allocated) < 1 << 12, costs


# --------------------------------------------------------------------------------------------------------------------
# atomic writes


def test_nothing_under_the_name_before_commit_R21(tmp_path):
    """R21: while writing, the target does not exist; spill files are hidden siblings; commit leaves only the file."""
    path = tmp_path / "index.ock"
    with FileWriter(path) as w:
        w.put("a", np.zeros(3, "<u1"))
        w.declare_growing("g", "<u1", (4,))
        w.append("g", np.zeros((10, 4), "<u1"))
        names = listing(tmp_path)
        assert "index.ock" not in names and names and all(is_hidden_temp(n, "index.ock") for n in names)
        w.commit({})
    assert listing(tmp_path) == ["index.ock"]


def test_exception_in_with_leaves_no_file_and_no_temps_R21(tmp_path):
    """R21: an exception inside the block aborts: no file under the name, no temporary file."""
    path = tmp_path / "f.ock"
    with pytest.raises(RuntimeError, match="boom"):
        with FileWriter(path) as w:
            w.declare_growing("g", "<i8", (2,))
            w.append("g", np.zeros((5, 2), "<i8"))
            assert listing(tmp_path)  # the spill file
            raise RuntimeError("boom")
    assert listing(tmp_path) == []


def test_exception_in_with_keeps_old_file_R21(tmp_path):
    """R21: an aborted write leaves an older file byte for byte."""
    path = write_file(tmp_path / "f.ock", small_sections(), meta={"v": 1})
    old = path.read_bytes()
    with pytest.raises(KeyError):
        with FileWriter(path) as w:
            w.declare_growing("g", "<i8", (2,))
            w.append("g", np.ones((5, 2), "<i8"))
            raise KeyError("x")
    assert path.read_bytes() == old and listing(tmp_path) == ["f.ock"]


def test_leaving_block_without_commit_aborts_R21(tmp_path):
    """R21: a block left normally without commit writes nothing and removes its temporary files."""
    path = tmp_path / "f.ock"
    with FileWriter(path) as w:
        w.declare_growing("g", "<u1")
        w.append("g", np.ones(100, "<u1"))
    assert listing(tmp_path) == [] and w.closed
    with pytest.raises(ValueError, match="closed"):
        w.commit({})


def test_commit_procedure_fsync_rename_fsync_R21(tmp_path, monkeypatch):
    """R21: the temporary file is a hidden sibling, fsynced before the rename; the folder is fsynced after."""
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        mode = os.fstat(fd).st_mode
        events.append("fsync-file" if stat.S_ISREG(mode) else "fsync-folder" if stat.S_ISDIR(mode) else "fsync-?")
        real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", os.path.dirname(os.path.abspath(src)), os.path.basename(src), dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    path = tmp_path / "f.ock"
    write_file(path, small_sections())
    assert events[0] == "fsync-file" and events[-1] == "fsync-folder" and len(events) == 3
    _, folder, name, dst = events[1]
    assert folder == str(tmp_path) and is_hidden_temp(name, "f.ock") and os.fspath(dst) == str(path)


def test_failure_while_writing_aborts_and_keeps_old_file_R21(tmp_path, monkeypatch):
    """R21: an I/O error during commit (here: fsync fails) removes the temporary files and keeps the old file."""
    path = write_file(tmp_path / "f.ock", small_sections())
    old = path.read_bytes()

    def failing_fsync(fd):
        raise OSError(28, "No space left on device")

    w = FileWriter(path)
    w.declare_growing("g", "<u1")
    w.append("g", np.ones(10, "<u1"))
    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="No space"):
        w.commit({})
    assert path.read_bytes() == old and listing(tmp_path) == ["f.ock"] and w.closed


@pytest.mark.parametrize("mode", ["midway", "before-fsync", "before-replace"])
def test_sigkill_keeps_previous_file_R21(tmp_path, mode):
    """R21: a writer killed with SIGKILL (while appending, before its fsync, before its rename) leaves the previous
    file byte for byte under the name; only hidden temporary files may remain."""
    path = write_file(tmp_path / "f.ock", small_sections(), meta={"v": "old"})
    old = path.read_bytes()
    run_script_until_sigkill("storage_kill_writer.py", path, mode,
                             kill_after_line="MIDWAY" if mode == "midway" else None, timeout=60)
    assert path.read_bytes() == old
    assert all(name == "f.ock" or is_hidden_temp(name, "f.ock") for name in listing(tmp_path))
    with open_file(path) as f:
        assert f.meta == {"v": "old"}
        f.verify()


def test_sigkill_after_rename_leaves_complete_new_file_R21(tmp_path):
    """R21: killed right after the rename, the new file is complete (no file is ever half written)."""
    path = write_file(tmp_path / "f.ock", small_sections(), meta={"v": "old"})
    run_script_until_sigkill("storage_kill_writer.py", path, "after-replace", timeout=60)
    with open_file(path) as f:
        assert f.meta == {"writer": "kill"}
        rows = f.sections["rows"]
        assert rows.shape == (1000, 4) and (rows == np.arange(1000)[:, None]).all()
        f.verify()
    assert listing(tmp_path) == ["f.ock"]


def test_reader_keeps_old_data_after_replacement_R22(tmp_path):
    """R22: a reader that has the old file open keeps reading the old contents after the file is replaced."""
    path = write_file(tmp_path / "f.ock", [("v", np.arange(1000, dtype="<i8"))], meta={"v": 1})
    old = open_file(path)
    view = old.sections["v"]
    write_file(path, [("v", np.arange(1000, dtype="<i8") * -1), ("w", np.ones(5, "<f4"))], meta={"v": 2})
    with open_file(path) as new:
        assert new.meta == {"v": 2} and new.sections["v"][5] == -5
    np.testing.assert_array_equal(view, np.arange(1000))
    np.testing.assert_array_equal(old.sections["v"], np.arange(1000))
    old.verify()
    old.close()
    assert view[999] == 999  # a view handed out outlives close


def test_a_writer_that_must_not_replace_refuses_an_existing_file(tmp_path):
    """FileWriter(replace=False) (collection manifests): an existing file, even one that appears while the writer
    writes, is never replaced: FileExistsError, the file untouched, no temporary file left; a new name is written."""
    path = tmp_path / "f.ock"
    path.write_bytes(b"first")
    w = FileWriter(path, replace=False)
    w.put("v", np.arange(3, dtype="<i8"))
    with pytest.raises(FileExistsError):
        w.commit({})
    assert path.read_bytes() == b"first" and sorted(os.listdir(tmp_path)) == ["f.ock"] and w.closed
    with FileWriter(tmp_path / "g.ock", replace=False) as w:
        w.put("v", np.arange(3, dtype="<i8"))
        w.commit({"v": 1})
    with open_file(tmp_path / "g.ock") as f:
        assert f.meta == {"v": 1} and f.sections["v"].tolist() == [0, 1, 2]
    assert sorted(os.listdir(tmp_path)) == ["f.ock", "g.ock"]
    with pytest.raises(TypeError, match="replace must be True or False"):
        FileWriter(tmp_path / "h.ock", replace=0)


# --------------------------------------------------------------------------------------------------------------------
# closed objects and paths


def test_writer_use_after_commit_or_abort_raises(tmp_path):
    """Any use after commit or abort is a ValueError; abort is idempotent and a no-op after commit."""
    path = tmp_path / "f.ock"
    w = FileWriter(path)
    w.declare_growing("g", "<u1")
    w.commit({})
    w.abort()  # no-op: the committed file stays
    assert path.exists()
    for call in (lambda: w.put("a", np.zeros(1, "<u1")), lambda: w.declare_growing("h", "<u1"),
                 lambda: w.append("g", np.zeros(1, "<u1")), lambda: w.commit({}), lambda: w.__enter__()):
        with pytest.raises(ValueError, match="closed"):
            call()
    w2 = FileWriter(tmp_path / "g.ock")
    w2.abort()
    w2.abort()
    with pytest.raises(ValueError, match="closed"):
        w2.put("a", np.zeros(1, "<u1"))
    assert listing(tmp_path) == ["f.ock"]


def test_mapped_file_use_after_close_raises(tmp_path):
    """close is idempotent; sections, section_info and verify raise ValueError afterwards; plain data stays."""
    path = write_file(tmp_path / "f.ock", small_sections(), meta={"m": 1})
    f = open_file(path)
    f.close()
    f.close()
    for call in (lambda: f.sections, lambda: f.verify(), lambda: f.section_info("a"), lambda: f.__enter__()):
        with pytest.raises(ValueError, match="closed"):
            call()
    assert f.meta == {"m": 1} and f.path == str(path) and f.closed
    with open_file(path) as g:
        pass
    with pytest.raises(ValueError, match="closed"):
        g.sections
    with open_file(path) as h:
        with pytest.raises(KeyError):
            h.section_info("missing")


def test_close_with_live_views_does_not_crash_and_frees_descriptors(tmp_path):
    """close with views still held does not raise (BufferError is absorbed); no descriptor leaks over many opens."""
    path = write_file(tmp_path / "f.ock", small_sections())
    fd_dir = Path("/proc/self/fd")
    before = len(list(fd_dir.iterdir())) if fd_dir.exists() else 0
    kept = []
    for _ in range(200):
        f = open_file(path)
        kept.append(f.sections["b"])
        f.close()
    np.testing.assert_array_equal(kept[-1], small_sections()[1][1])
    kept.clear()
    for _ in range(200):
        open_file(path).close()
    if fd_dir.exists():
        assert len(list(fd_dir.iterdir())) <= before + 2


def test_fifo_refused_without_blocking_R23(tmp_path):
    """R23: a FIFO is refused by stat alone (opening it for reading would block)."""
    fifo = tmp_path / "pipe.ock"
    os.mkfifo(fifo)
    kind, result = returns_within(lambda: open_file(fifo))
    assert kind == "raised" and isinstance(result, ValueError) and "not a regular file" in str(result), result
    with pytest.raises(ValueError, match="not a regular file"):
        FileWriter(fifo)


def test_paths_R23(tmp_path):
    """R23 and paths: folders are refused, missing files raise FileNotFoundError, PathLike and str both work."""
    with pytest.raises(ValueError, match="not a regular file"):
        open_file(tmp_path)
    with pytest.raises(FileNotFoundError):
        open_file(tmp_path / "missing.ock")
    with pytest.raises(TypeError):
        open_file(3)
    with pytest.raises(FileNotFoundError):
        FileWriter(tmp_path / "no" / "such" / "f.ock")
    with pytest.raises(ValueError):
        FileWriter(tmp_path)
    path = write_file(str(tmp_path / "s.ock"), small_sections())
    with open_file(Path(path)) as f:
        assert f.path == str(path)
