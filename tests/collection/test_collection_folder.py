"""Collection folders (docs/FORMAT.md section 13, rules C1-C11): the one writer and its lock, readers on snapshots,
the files of a folder, pending segments committed at once, damaged, foreign and non-collection folders. What stays on
disk (C12: old generations' removal, vacuum) is tested in test_collection_disk.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

import msgpack
import numpy as np
import pytest

import ockstore
from ockstore import collection as coll
from ockstore.collection import names
from ockstore.errors import CollectionLockedError, FormatError
from collection_model import P, Model, assert_same_search, populated, reference_index, vectors
from collection_model import q, quantizers  # noqa: F401 - pytest fixtures
from helpers import subprocess_env

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


@pytest.mark.parametrize("first", ["old writer", "new writer"])
@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_a_writer_whose_lock_file_was_removed_or_replaced_commits_nothing(q, tmp_path, first, how):
    """C9: the lock belongs to the file the writer locked. When writer.lock is removed (or replaced) under a writer, a
    second writer can lock the new file; the first then refuses every change (CollectionLockedError naming the lock)
    and never overwrites the second's segments or manifests: no acknowledged commit is lost."""
    path = tmp_path / "c"
    old = ockstore.create_collection(path, q)
    old.add(vectors(4, 1))
    lock = path / names.LOCK_NAME
    lock.unlink()
    if how == "replaced":
        (path / "new.lock").write_bytes(b"")
        os.replace(path / "new.lock", lock)
    new = ockstore.open_collection(path, "a")
    if first == "new writer":
        new.add(vectors(3, 2), ids=[100, 101, 102])
    for change in (lambda: old.add(vectors(5, 3)), lambda: old.delete([0]), old.compact, old.vacuum,
                   lambda: old.commit_segments([])):
        with pytest.raises(CollectionLockedError, match="no longer holds the folder's lock") as info:
            change()
        assert repr(str(lock)) in str(info.value)
    if first == "old writer":
        new.add(vectors(3, 2), ids=[100, 101, 102])
    old.close()
    new.close()
    with ockstore.open_collection(path) as reader:
        assert reader.ids().tolist() == [0, 1, 2, 3, 100, 101, 102]
        reader.verify()


def test_a_commit_never_replaces_an_existing_manifest(q, tmp_path):
    """C11: a manifest is created, never renamed over another: a writer that finds the name of its next generation
    taken (here by a file that appeared after it opened the folder) commits nothing, leaves that file as it was, and
    commits above it on its next change, which removes the failed commit's segment and the manifest it passed (C12:
    only the live generation and its fallback stay)."""
    path = tmp_path / "c"
    c = ockstore.create_collection(path, q)
    c.add(vectors(4, 1))
    taken = path / names.manifest_name(c.generation + 1)
    taken.write_bytes(b"someone else's")
    with pytest.raises(CollectionLockedError, match="already exists"):
        c.add(vectors(5, 2))
    assert taken.read_bytes() == b"someone else's" and c.generation == 1 and len(c) == 4
    assert not [n for n in os.listdir(path) if names.is_temporary(n)]
    c.add(vectors(5, 2))
    assert c.generation == 3
    assert not taken.exists() and not (path / names.segment_name(2, 0)).exists()
    assert c.vacuum() == []
    c.close()
    with ockstore.open_collection(path) as reader:
        assert reader.generation == 3 and len(reader) == 9
        reader.verify()


def test_no_commit_beyond_the_largest_generation(q, tmp_path):
    """docs/FORMAT.md 13.1: G < 2**63. A (stray) manifest of the largest generation leaves no generation to commit:
    every change raises FormatError naming it before anything is written, instead of a commit no reader would see."""
    path = tmp_path / "c"
    with ockstore.create_collection(path, q) as c:
        c.add(vectors(10, 1))
    last = path / names.manifest_name(names.MAX_GENERATION)
    last.write_bytes(b"junk")
    with pytest.warns(coll.CollectionWarning):
        c = ockstore.open_collection(path, "a")
    files = sorted(os.listdir(path))
    pending = coll.write_pending_segment(c.path, c.segment_spec, vectors(2, 3), [50, 51])
    for change in (lambda: c.add(vectors(10, 2)), lambda: c.upsert(vectors(1, 2), [3]), lambda: c.delete([0]),
                   lambda: c.commit_segments([pending])):
        with pytest.raises(FormatError, match=f"no generation left.*{last.name}"):
            change()
    assert sorted(os.listdir(path)) == sorted(files + [os.path.basename(pending.path)])
    assert c.generation == 1 and len(c) == 10
    c.close()
    with pytest.warns(coll.CollectionWarning):
        with ockstore.open_collection(path) as reader:
            assert reader.generation == 1 and len(reader) == 10


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
# the folder (C1-C7, C10, C11; C12 in test_collection_disk.py)


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


@pytest.mark.parametrize("options, error, match", [
    ({"operation": None}, ValueError, "operation must be"),
    ({"operation": 3}, ValueError, "operation must be"),
    ({"operation": ["add"]}, ValueError, "operation must be"),
    ({"operation": "rewrite"}, ValueError, "operation must be"),
    ({"merge": "no"}, TypeError, "merge must be True or False"),
    ({"merge": None}, TypeError, "merge must be True or False"),
])
def test_commit_segments_checks_operation_and_merge_before_writing(q, tmp_path, options, error, match):
    """C3: a manifest's 'operation' is a str of docs/FORMAT.md 13.3; a bad one is refused before anything is written
    (a manifest the reader then skips would lose an acknowledged commit)."""
    c, model = populated(tmp_path / "c", q)
    pending = coll.write_pending_segment(c.path, c.segment_spec, vectors(5, 7), np.arange(5) + c.next_id)
    generation, files = c.generation, sorted(os.listdir(c.path))
    with pytest.raises(error, match=match):
        c.commit_segments([pending], **options)
    assert c.generation == generation and sorted(os.listdir(c.path)) == files
    c.commit_segments([pending], operation="add", merge=False)
    c.close()
    with ockstore.open_collection(tmp_path / "c") as reader:
        assert reader.generation == generation + 1 and len(reader) == len(model) + 5


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


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_newest_manifest_that_is_not_a_regular_file_is_skipped(q, tmp_path, kind):
    """C4: a newer manifest.<G> that is a folder or a FIFO does not verify: skipped and reported like a corrupt one
    (never opened, so a FIFO never blocks), for readers and the writer, which commits past it and vacuum keeps it."""
    if kind == "fifo" and not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this system")
    folder = tmp_path / "c"
    with ockstore.create_collection(folder, q) as c:
        c.add(vectors(10, 1))
    odd = folder / names.manifest_name(50)
    odd.mkdir() if kind == "folder" else os.mkfifo(odd)
    for mode in ("r", "a"):
        with pytest.warns(coll.CollectionWarning, match=f"{odd.name} does not verify.*not a regular file"):
            c = ockstore.open_collection(folder, mode)
        assert c.generation == 1 and len(c) == 10
        assert len(c.info()["problems"]) == 1 and odd.name in c.info()["problems"][0]
        if mode == "a":
            c.add(vectors(2, 2))
            assert c.generation == 51
            c.vacuum()
        c.close()
    with ockstore.open_collection(folder) as reader:
        assert reader.generation == 51 and len(reader) == 12


@pytest.mark.parametrize("which", ["segment", "deletions", "quantizer"])
def test_a_referenced_file_that_is_not_a_regular_file_is_a_format_error(q, tmp_path, which):
    """C4: a file the current manifest references that is a FIFO (or a folder) fails the open with a FormatError naming
    it, without opening it."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this system")
    folder = tmp_path / "c"
    with ockstore.create_collection(folder, q) as c:
        c.add(vectors(10, 1))
        c.delete([2])
        entry = c.info()["segment_files"][0]
    name = {"segment": entry["file"], "deletions": entry["deletions"], "quantizer": names.QUANTIZER_NAME}[which]
    (folder / name).unlink()
    os.mkfifo(folder / name)
    with pytest.raises(FormatError, match=f"{name}.*not a regular file"):
        ockstore.open_collection(folder)


class _no_warning:
    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("error", coll.CollectionWarning)

    def __exit__(self, *exc):
        return self._catch.__exit__(*exc)


def _one_generation(folder, q):
    """(generation, manifest body) of a new collection at ``folder`` holding 20 vectors."""
    with ockstore.create_collection(folder, q) as c:
        c.add(vectors(20, 1))
        generation = c.generation
    with ockstore.storage.open_file(folder / names.manifest_name(generation)) as mf:
        return generation, msgpack.unpackb(bytes(mf.sections["manifest"]))


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
    generation, body = _one_generation(folder, q)
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
    generation, body = _one_generation(folder, q)
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
        offset = mf.section_info("code_blocks" if "code_blocks" in mf.sections else "codes")["offset"]
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
    with ockstore.create_collection(tmp_path / "u", ockstore.PQ(2)) as c:  # unfitted: float16 stored by default
        assert c.store_vectors == "float16"
    with pytest.raises(ValueError, match="train_size applies to an unfitted quantizer"):
        ockstore.create_collection(tmp_path / "m", q, train_size=1000)
    with pytest.raises(ValueError, match="train_size must be >= 256"):
        ockstore.create_collection(tmp_path / "m", ockstore.PQ(2), store_vectors="float16", train_size=255)
    with pytest.raises(TypeError, match="quantizer must be a PQ, CKM, ECKM, OCKM or IVF"):
        ockstore.create_collection(tmp_path / "m", "OCKM(16, 2)", store_vectors="float16")
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
    assert (info["P"], info["method"], info["bits"], info["store_vectors"]) == (P, "ockm", 24, "float16")  # 6 words of 4 bits
    assert info["generation"] == c.generation and info["mode"] == "a" and info["problems"] == []
    assert c.metric == "l2" and c.dim == P and c.quantizer == q and c.metadata == {}
    assert "mode='a'" in repr(c)
