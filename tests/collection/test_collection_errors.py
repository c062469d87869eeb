"""Errors an app can act on (issue 28): a read-only folder opened for writing, a full disk during a commit or a write,
and a collection with one damaged or missing segment, which a reader can still open and search without it
(``open_collection(path, "r", skip_damaged=True)``). Each error names the path and the fix.
"""

from __future__ import annotations

import errno
import os
import warnings

import numpy as np
import pytest

import ockstore
from ockstore import _atomic
from ockstore.collection import names
from ockstore.collection.snapshot import CollectionWarning
from ockstore.errors import FormatError
from collection_model import Model, assert_same_search, reference_index, vectors
from collection_model import q, quantizers  # noqa: F401 - pytest fixtures


# ---------------------------------------------------------------------------------------------- read-only folders
def test_a_read_only_lock_file_or_file_system_names_the_folder_and_mode_r(q, tmp_path, monkeypatch):
    """The lock file cannot be opened for writing (permissions, a read-only file system): PermissionError naming the
    folder and mode 'r', not the operating system's bare error; a reader opens it."""
    folder = tmp_path / "c"
    with ockstore.create_collection(folder, q) as c:
        c.add(vectors(20, 1))
    real_open = os.open
    for code in (errno.EACCES, errno.EROFS):
        def refusing(path, flags, *args, code=code):
            if os.fspath(path).endswith(names.LOCK_NAME) and flags & os.O_RDWR:
                raise OSError(code, os.strerror(code), path)
            return real_open(path, flags, *args)

        monkeypatch.setattr(os, "open", refusing)
        with pytest.raises(PermissionError) as caught:
            ockstore.open_collection(folder, "a")
        monkeypatch.setattr(os, "open", real_open)
        message = str(caught.value)
        assert caught.value.errno == code
        assert repr(str(folder)) in message and "open it with mode 'r'" in message and os.strerror(code) in message
    with ockstore.open_collection(folder) as reader:
        assert len(reader) == 20
    monkeypatch.setattr(os, "open", refusing)
    (tmp_path / "empty").mkdir()
    with pytest.raises(PermissionError, match=r"cannot create a collection in .*empty.*read-only") as caught:
        ockstore.create_collection(tmp_path / "empty", q)
    assert "mode 'r'" not in str(caught.value)  # not a collection yet: nothing to read


def test_a_folder_that_cannot_be_written_is_refused_at_open_not_at_the_first_commit(q, tmp_path, monkeypatch):
    """A lock file that opens for writing in a folder that cannot be written (the file existed before the folder was
    made read-only): refused when the writer opens, not by a bare error of the first commit."""
    folder = tmp_path / "c"
    ockstore.create_collection(folder, q).close()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if os.fspath(path) == str(folder) and mode ==
                        os.W_OK else real_access(path, mode, **kw))
    with pytest.raises(PermissionError, match=r"cannot be opened for writing.*open it with mode 'r'"):
        ockstore.open_collection(folder, "a")
    monkeypatch.setattr(os, "access", real_access)
    with ockstore.open_collection(folder, "a") as c:  # the lock was released
        c.add(vectors(3, 1))


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes read-only folders anyway")
def test_a_read_only_folder_by_its_permissions(q, tmp_path):
    folder = tmp_path / "c"
    with ockstore.create_collection(folder, q) as c:
        c.add(vectors(20, 1))
    os.chmod(folder, 0o555)
    try:
        with pytest.raises(PermissionError, match="open it with mode 'r'"):
            ockstore.open_collection(folder, "a")
        os.chmod(folder, 0o755)
        os.unlink(folder / names.LOCK_NAME)
        os.chmod(folder, 0o555)
        with pytest.raises(PermissionError, match="open it with mode 'r'"):  # no lock file, and none can be made
            ockstore.open_collection(folder, "a")
        with ockstore.open_collection(folder) as reader:
            assert len(reader) == 20
        with pytest.raises(PermissionError, match="cannot create the collection folder"):
            ockstore.create_collection(folder / "sub", q)
    finally:
        os.chmod(folder, 0o755)


# ----------------------------------------------------------------------------------------------------- full disks
class FullDisk:
    """While full, every temporary file that an atomic write or a spill creates writes to /dev/full: ENOSPC at the
    first write that reaches the device, as on a full file system."""

    def __init__(self, monkeypatch):
        self._monkeypatch = monkeypatch
        self._real = _atomic.new_temp_sibling

    def fill(self):
        real = self._real

        def on_full_device(path):
            temp, fd = real(path)
            full = os.open("/dev/full", os.O_WRONLY)
            os.dup2(full, fd)
            os.close(full)
            return temp, fd

        self._monkeypatch.setattr(_atomic, "new_temp_sibling", on_full_device)

    def free(self):
        self._monkeypatch.setattr(_atomic, "new_temp_sibling", self._real)


@pytest.fixture
def disk(monkeypatch):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    return FullDisk(monkeypatch)


def _no_space(caught, path):
    exc = caught.value
    assert isinstance(exc, OSError) and exc.errno == errno.ENOSPC
    message = str(exc)
    assert os.fspath(path) in message and "free space" in message, message


def test_a_full_disk_during_a_commit_names_the_file_and_commits_nothing(q, tmp_path, disk):
    """ENOSPC while an add writes its segment, or while a delete writes its deletion file: an OSError (errno kept)
    naming the file in the collection folder and the fix; nothing is committed or left behind, and the collection
    goes on once there is space."""
    folder = tmp_path / "c"
    writer = ockstore.create_collection(folder, q, store_vectors="float32")
    writer.add(vectors(30, 1))
    before = sorted(os.listdir(folder))
    generation = writer.generation
    disk.fill()
    with pytest.raises(OSError) as caught:
        writer.add(vectors(3000, 2))
    _no_space(caught, folder / names.segment_name(generation + 1, 0))
    with pytest.raises(OSError) as caught:
        writer.delete([1, 2])
    _no_space(caught, folder / names.deletions_name(generation + 1, 0))
    assert writer.generation == generation and sorted(os.listdir(folder)) == before
    disk.free()
    writer.add(vectors(5, 3))
    writer.delete([1, 2])
    writer.verify()
    assert len(writer) == 33
    writer.close()


@pytest.mark.parametrize("ivf", [False, True])
def test_a_full_disk_during_an_index_build_names_the_file(q, tmp_path, disk, ivf):
    model = ockstore.IVF(4, ockstore.PQ(5, n_codewords=16, n_iter=2, seed=0), seed=0).fit(vectors(500, 1)) if ivf \
        else q
    path = tmp_path / "x.ock"
    disk.fill()
    with pytest.raises(OSError) as caught:
        ockstore.build_index(path, model, vectors(2000, 2))
    _no_space(caught, path)
    assert os.listdir(tmp_path) == []  # no temporary file left
    with pytest.raises(OSError) as caught:
        ockstore.save_quantizer(tmp_path / "q.ockq", q)
    _no_space(caught, tmp_path / "q.ockq")


# -------------------------------------------------------------------------------------------- damaged segments
def _three_segments(folder, q):
    """A collection of three segments (ids 0..59, 60..119, 120..179), the second with a deletion; its model."""
    model = Model(vectors(1, 0).shape[1])
    with ockstore.create_collection(folder, q, store_vectors="float32", merge_factor=100) as c:
        for seed in range(3):
            X = vectors(60, seed)
            model.add(X, c.add(X))
        c.delete([70, 71])
        model.delete([70, 71])
        files = [s["file"] for s in c.info()["segment_files"]]
        deletions = c.info()["segment_files"][1]["deletions"]
    return model, files, deletions


def _without(model, ids):
    rest = model.copy()
    rest.delete(ids)
    return rest


@pytest.mark.parametrize("damage", ["missing", "truncated", "header", "deletions"])
def test_skip_damaged_opens_the_rest_of_a_collection_for_reading_C4(q, tmp_path, damage):
    """One segment missing, truncated, with a damaged header, or with a damaged deletion file: open_collection fails
    with FormatError naming the file and skip_damaged=True; with skip_damaged=True a reader opens, warns, names the
    segment in ``skipped`` and info()["problems"], searches and reads the other segments exactly, and verify fails."""
    folder = tmp_path / "c"
    model, files, deletions = _three_segments(folder, q)
    target = folder / (deletions if damage == "deletions" else files[1])
    if damage == "missing":
        target.unlink()
    elif damage == "truncated":
        target.write_bytes(target.read_bytes()[:-100])
    else:
        data = bytearray(target.read_bytes())
        data[30] ^= 0xFF  # inside the msgpack header
        target.write_bytes(bytes(data))
    for mode in ("r", "a"):
        with pytest.raises(FormatError) as caught:
            ockstore.open_collection(folder, mode)
        message = str(caught.value)
        assert target.name in message and "skip_damaged=True" in message, message
    with pytest.warns(CollectionWarning, match=files[1]):
        reader = ockstore.open_collection(folder, "r", skip_damaged=True)
    with reader:
        rest = _without(model, range(60, 120))
        assert reader.skipped == (files[1],)
        info = reader.info()
        assert info["skipped"] == [files[1]] and info["N"] == len(rest) == 120 and info["segments"] == 2
        assert any(files[1] in p and "58 live rows not searched" in p for p in info["problems"])
        assert np.array_equal(reader.ids(), rest.live_ids())
        assert_same_search(reader, reference_index(q, rest, store_vectors="float32"), vectors(5, 9), 7)
        np.testing.assert_array_equal(reader.get([0, 150]), np.stack([model.vectors[0], model.vectors[150]]))
        with pytest.raises(ValueError, match="75"):
            reader.get([75])
        with pytest.raises(FormatError, match=f"skipped segments.*{files[1]}"):
            reader.verify()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CollectionWarning)
            assert reader.refresh() == reader.generation and reader.skipped == (files[1],)


def test_skip_damaged_is_for_readers_and_cannot_skip_the_quantizer_C4(q, tmp_path):
    folder = tmp_path / "c"
    _three_segments(folder, q)
    with pytest.raises(ValueError, match=r"skip_damaged=True opens a collection for reading only \(mode='r'\)"):
        ockstore.open_collection(folder, "a", skip_damaged=True)
    with pytest.raises(TypeError, match="skip_damaged"):
        ockstore.open_collection(folder, "r", skip_damaged="yes")
    with ockstore.open_collection(folder, "r", skip_damaged=True) as reader:  # nothing damaged: nothing skipped
        assert reader.skipped == () and reader.info()["problems"] == [] and len(reader) == 178
        reader.verify()
    quantizer = folder / names.QUANTIZER_NAME
    quantizer.write_bytes(quantizer.read_bytes()[:-8])
    with pytest.raises(FormatError, match=names.QUANTIZER_NAME):
        ockstore.open_collection(folder, "r", skip_damaged=True)
    quantizer.unlink()
    with pytest.raises(FormatError, match="missing file") as caught:
        ockstore.open_collection(folder, "r", skip_damaged=True)
    assert "skip_damaged=True" not in str(caught.value)  # no segment to skip: the quantizer is needed by all
