"""What a collection folder keeps on disk (docs/FORMAT.md rule C12, docs/ARCHITECTURE.md "Collections"): old
generations removed as commits go and across writer launches (the live generation and one fallback, nothing else),
and vacuum.
"""

from __future__ import annotations

import os

import pytest

import ockstore
from ockstore.collection import manifest as manifest_module
from ockstore.collection import names
from collection_model import assert_same_search, populated, reference_index, vectors
from collection_model import q, quantizers  # noqa: F401 - pytest fixtures
from helpers import run_script_until_sigkill


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


def _folder_files(folder):
    """{name: bytes} of the regular files of a folder."""
    return {name: os.path.getsize(folder / name) for name in os.listdir(folder) if (folder / name).is_file()}


def _generation_files(folder, generation):
    """The names generation ``generation`` needs: its manifest and every file it references."""
    manifest = manifest_module.read_manifest(folder / names.manifest_name(generation), generation)[0]
    return {names.manifest_name(generation)} | manifest.referenced()


def test_twenty_writer_launches_keep_the_live_generation_and_one_fallback(q, tmp_path):
    """C12 across writer launches (docs/ARCHITECTURE.md, "Collections"): each launch is open("a") -> add -> close,
    and a writer starts knowing nothing of the generations before the one it opened. After each launch's commit the
    folder holds exactly the live generation, its fallback (the generation before) and the quantizer and lock: its
    bytes stay those of two generations, not one more generation per launch (the bug: 5 launches after a compaction
    left 51 MB)."""
    folder = tmp_path / "c"
    c, model = populated(folder, q, store_vectors="float32")
    c.compact()
    c.close()
    for launch in range(20):
        with ockstore.open_collection(folder, "a") as c:
            model.add(vectors(30, 500 + launch), c.add(vectors(30, 500 + launch)))
            live, fallback = c.generation, c.generation - 1
        files = _folder_files(folder)
        expected = _generation_files(folder, live) | _generation_files(folder, fallback)
        assert set(files) == expected | {names.LOCK_NAME}, launch
        generation_bytes = [sum(files[name] for name in _generation_files(folder, g)) for g in (live, fallback)]
        assert sum(files.values()) <= sum(generation_bytes) + files[names.LOCK_NAME], launch
    with ockstore.open_collection(folder) as reader:
        assert_same_search(reader, reference_index(q, model, store_vectors="float32"), vectors(4, 1), 5)
        reader.verify()


def test_the_first_commit_of_a_writer_removes_what_older_writers_left_C16(q, tmp_path):
    """A folder whose earlier writers left several old generations (and the segment of a killed commit, never
    referenced), pending segments and temporary files: the next writer's first commit removes them all (C16), keeping
    the generation it opened as the fallback; foreign files are left alone (C1)."""
    folder = tmp_path / "c"
    with ockstore.create_collection(folder, q, merge_factor=100) as c:
        for seed in range(4):
            c.add(vectors(10, seed))
    # Old generations as the bug left them: copy the manifests of generations 1 and 2 back (their segments are still
    # referenced by generation 4), and a segment of a commit that was killed before its manifest.
    opened = 4
    for generation in (1, 2):
        manifest = manifest_module.read_manifest(folder / names.manifest_name(opened), opened)[0]
        body = manifest.__class__(generation, manifest.quantizer, manifest.norm_encoding, manifest.store_vectors,
                                  manifest.next_id, manifest.merge_factor, manifest.max_merge_rows,
                                  manifest.segments[:generation], "add")
        manifest_module.write_manifest(folder, body, {})
    (folder / names.segment_name(3, 7)).write_bytes(b"killed")
    leftovers = [".pending.0123456789abcdef.ock", f".{names.manifest_name(9)}.0a1b2c.tmp"]
    untouched = ["notes.txt", ".pending.12.ock", ".hidden"]
    for name in leftovers + untouched:
        (folder / name).write_bytes(b"x")
    with ockstore.open_collection(folder, "a") as c:
        assert set(leftovers) <= set(os.listdir(folder))  # opening changes nothing: the first commit cleans up
        c.add(vectors(10, 9))
        assert set(_folder_files(folder)) == (_generation_files(folder, opened + 1) | _generation_files(folder, opened)
                                              | {names.LOCK_NAME, *untouched})


def test_a_writers_commits_keep_the_pending_files_of_its_own_build_C16(q, tmp_path):
    """Pending segments written after the writer took the lock are its own (a distributed build's workers write them
    for its next commit): its commits leave them, and committing them works."""
    folder = tmp_path / "c"
    with ockstore.create_collection(folder, q, merge_factor=100) as c:
        pending = ockstore.collection.write_pending_segment(folder, c.segment_spec, vectors(20, 1), range(100, 120))
        c.add(vectors(10, 2))
        c.add(vectors(10, 3))
        assert os.path.exists(pending.path)
        c.commit_segments([pending])
        assert len(c) == 40


@pytest.mark.parametrize("point", ["spill", "before-replace", "pending"])
def test_a_new_writers_first_commit_removes_what_a_killed_writer_left_C16(q, tmp_path, point):
    """kill -9 of a writer in the middle of an add (its segment's spill files, its complete temporary file, or a
    pending segment written and not committed): the next writer's first commit removes the leftovers (C16); the
    folder then holds the live generation, its fallback and the lock, nothing else."""
    folder = tmp_path / "c"
    with ockstore.create_collection(folder, q, store_vectors="float32") as c:
        c.add(vectors(50, 1))
        c.add(vectors(50, 2))
    before = set(os.listdir(folder))
    run_script_until_sigkill("collection_kill_add.py", folder, point)
    left = set(os.listdir(folder)) - before
    assert left and all(names.is_temporary(n) or names.is_pending(n) or names.is_segment(n) for n in left), left
    with ockstore.open_collection(folder, "a") as c:
        c.add(vectors(5, 3))
        live = c.generation
        assert set(_folder_files(folder)) == (_generation_files(folder, live) | _generation_files(folder, live - 1)
                                              | {names.LOCK_NAME})
        c.verify()
        assert len(c) == 105


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


def test_after_retrain_and_compact_the_folder_holds_the_live_generation_and_one_fallback(q, tmp_path):
    """Issue 28: retrain() then compact() leave the live generation and one fallback (the generation before the last
    commit), nothing else: about twice the live data right after a retrain (the fallback's segments hold the same
    rows), back to the live data plus the last commit's files after the next commit, or at once with
    vacuum(keep_generations=1) (docs/ARCHITECTURE.md, "Collections")."""
    folder = tmp_path / "c"
    c, model = populated(folder, q, store_vectors="float32")
    with c:
        c.retrain()
        c.compact()  # one segment and no deletion after a retrain: nothing to do
        live = c.generation
        files = _folder_files(folder)
        assert set(files) == _generation_files(folder, live) | _generation_files(folder, live - 1) | {names.LOCK_NAME}
        live_bytes = sum(files[name] for name in _generation_files(folder, live))
        c.delete(model.live_ids()[:3])
        model.delete(model.live_ids()[:3])
        c.compact()
        live = c.generation
        files = _folder_files(folder)
        assert set(files) == _generation_files(folder, live) | _generation_files(folder, live - 1) | {names.LOCK_NAME}
        assert sum(files.values()) <= 2.2 * live_bytes  # this generation and the retrained one it compacted
        c.vacuum(keep_generations=1)
        files = _folder_files(folder)
        assert set(files) == _generation_files(folder, live) | {names.LOCK_NAME}
        assert sum(files.values()) <= 1.05 * live_bytes
        assert_same_search(c, reference_index(c.quantizer, model, store_vectors="float32"), vectors(4, 1), 5)
