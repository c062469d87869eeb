"""Commits of a collection: the one way a generation follows another (docs/FORMAT.md section 13.6, rules C10-C12).

A commit of generation G, in this order:

1. new deletion files ``deletions.<G>.<i>.ock`` (each the whole sorted set of a segment's deleted ids), written
   atomically; a segment whose every row is deleted is dropped instead;
2. pending segments renamed to ``segment.<G>.<i>.ock`` (the collection's own adds write theirs under that name);
3. the merges of the size-tiered policy (or of ``compact``), each a new ``segment.<G>.<i>.ock`` holding the live
   rows of the merged segments, copied;
4. the folder fsynced (after renames), then ``manifest.<G>`` written atomically (temporary sibling, fsync, a hard link
   that never replaces an existing manifest, folder fsync): the link is the commit point. Every file the manifest
   references is durable before it. The writer's lock is checked just before (C9).

A crash anywhere before the rename leaves generation G - 1 (or whichever was newest) intact and readable; the files of
the failed attempt are unreferenced, removed by ``vacuum`` (or overwritten by the next commit of generation G). An
exception (not a crash) before the commit point removes them at once. After the commit point the files that only the
generations before the previous one referenced are deleted, whichever writer made them (the previous generation stays
complete: a fallback if the newest manifest is ever damaged, and readers on it keep working).
"""

from __future__ import annotations

import contextlib
import os
import stat

import numpy as np

from .. import _atomic
from ..errors import CollectionLockedError
from . import names
from .manifest import Manifest, SegmentEntry, read_manifest, write_deletions, write_manifest
from .policy import plan_merges
from .segments import Segment, SegmentView, copy_live_rows
from .snapshot import Snapshot, manifest_generations

__all__ = ["GenerationTaken", "commit", "write_checked_manifest", "remove_older_generations", "leftover_files",
           "remove_leftovers", "vacuum"]


def _remove(folder, name):
    """Remove a file of the folder; False when it cannot be removed now (Windows keeps open files)."""
    try:
        os.unlink(os.path.join(folder, name))
    except FileNotFoundError:
        pass
    except PermissionError:  # pragma: no cover - Windows: a reader has it mapped; a later vacuum removes it
        return False
    return True


class GenerationTaken(CollectionLockedError):
    """A commit found its manifest's name taken: nothing was committed (the writer must reopen the collection)."""


def commit(snapshot, generation, *, operation, pending=(), deletes=None, compact=False, merge=True, next_id=None,
           check=None, spec=None, training=None, pending_deletes=None):
    """Write generation ``generation`` from ``snapshot`` and return its Snapshot (no input validation: the collection
    checked ids and pending segments).

    Parameters
    ----------
    snapshot : Snapshot
        The writer's current generation.
    generation : int
        Larger than every manifest in the folder.
    operation : str
        Recorded in the manifest ("add", "delete", "upsert", "compact", "commit").
    pending : sequence of PendingSegment
        New segments, in order.
    deletes : dict or None
        View number -> int64 ids newly deleted from that segment (unique, live there).
    pending_deletes : dict or None
        Pending number -> int64 ids deleted from that new segment in the same commit (sorted, unique, in it): a
        training's segments encoded from an older generation, whose rows were deleted meanwhile.
    compact : bool
        Merge every segment into one (when there is more than one, or any deletion).
    merge : bool
        Apply the size-tiered merge policy (ignored with ``compact``).
    next_id : int or None
        The new ``next_id`` (None: unchanged).
    check : callable or None
        Called just before the manifest is written (the writer's lock check); its exception aborts the commit.
    spec, training : SegmentSpec and manifest.Training, or None (unchanged)
        A collection that has not trained its quantizer learns the dimension of its vectors from its first add:
        the spec and the training map with that dimension.

    GenerationTaken when ``manifest.<generation>`` exists already (it is never replaced).
    """
    folder, old = snapshot.folder, snapshot.manifest
    spec = snapshot.spec if spec is None else spec
    training = old.training if training is None else training
    written, opened = [], []
    counters = {"segment": 0, "deletions": 0}
    manifest_path = os.path.join(folder, names.manifest_name(generation))

    def new_name(kind):
        number = counters[kind]
        counters[kind] += 1
        return (names.segment_name if kind == "segment" else names.deletions_name)(generation, number)

    def open_segment(entry):
        segment = Segment(folder, entry, spec)
        opened.append(segment)
        return segment

    try:
        views = []
        for number, view in enumerate(snapshot.views):
            new = None if deletes is None else deletes.get(number)
            if new is not None and new.size:
                deleted = np.union1d(view.deleted_ids, new)
                if deleted.size == view.entry.rows:
                    continue  # no live row left: the segment is dropped
                file = new_name("deletions")
                write_deletions(os.path.join(folder, file), view.entry.file, deleted)
                written.append(file)
                entry = view.entry
                view = SegmentView(view.segment, SegmentEntry(entry.file, entry.rows, entry.min_id, entry.max_id,
                                                              file, int(deleted.size)), deleted)
            views.append(view)
        renamed = {}  # final name -> pending path, to give a pending file its name back when the commit fails
        renamed_order = []  # the final names of the pending segments so far, in order
        for p in pending:
            file = new_name("segment")
            if p.path != os.path.join(folder, file):  # a pending file (the collection's own adds write the final name)
                os.replace(p.path, os.path.join(folder, file))
                renamed[file] = p.path
            written.append(file)
            entry = SegmentEntry(file, p.rows, p.min_id, p.max_id)
            gone = None if pending_deletes is None else pending_deletes.get(len(renamed_order))
            renamed_order.append(file)
            if gone is not None and gone.size:
                if gone.size == p.rows:
                    continue  # no live row left: the segment is not committed (unreferenced, removed later)
                deletions = new_name("deletions")
                write_deletions(os.path.join(folder, deletions), file, gone)
                written.append(deletions)
                entry = SegmentEntry(file, p.rows, p.min_id, p.max_id, deletions, int(gone.size))
                views.append(SegmentView(open_segment(entry), entry, gone))
                continue
            views.append(SegmentView(open_segment(entry), entry, np.empty(0, dtype=np.int64)))
        if compact:
            groups = [list(range(len(views)))] if len(views) > 1 or any(v.entry.deleted for v in views) else []
        elif merge:
            groups = plan_merges([v.live for v in views], old.merge_factor, old.max_merge_rows)
        else:
            groups = []
        merged_at, members = {}, set()  # a merged segment takes the place of the oldest one it replaces
        for group in groups:
            file = new_name("segment")
            rows, low, high = copy_live_rows(os.path.join(folder, file), spec, [views[i] for i in group])
            merged_at[group[0]] = None
            if rows:
                written.append(file)
                entry = SegmentEntry(file, rows, low, high)
                merged_at[group[0]] = SegmentView(open_segment(entry), entry, np.empty(0, dtype=np.int64))
            members.update(group)
        views = [merged_at[i] if i in merged_at else v for i, v in enumerate(views) if i not in members or i in merged_at]
        views = [v for v in views if v is not None]
        if renamed:
            _atomic.fsync_folder(folder)  # the renames of pending segments (files written atomically are synced)
        manifest = Manifest(generation, old.quantizer, old.norm_encoding, old.store_vectors,
                            old.next_id if next_id is None else next_id, old.merge_factor, old.max_merge_rows,
                            tuple(v.entry for v in views), operation, training, old.auto)
        write_checked_manifest(folder, manifest, snapshot.user, check)
    except GenerationTaken:
        for segment in opened:
            segment.close()
        raise  # the files this commit wrote are left to vacuum: their names may be those of the other commit's files
    except BaseException:
        if os.path.exists(manifest_path):
            raise  # renamed into place, then an error (a folder fsync): committed; the caller reloads from disk
        for segment in opened:
            segment.close()
        for file in written:
            if file in renamed:  # the caller's pending file stays, for a retry (commit_segments' promise)
                with contextlib.suppress(OSError):
                    os.replace(os.path.join(folder, file), renamed[file])
                    continue
            _remove(folder, file)
        raise
    # Files this commit wrote that its own merges made useless (a new segment merged at once, the deletion file of a
    # segment merged after the deletion): no manifest references them.
    referenced = manifest.referenced()
    for segment in opened:
        if segment.name not in referenced:
            segment.close()
    for file in written:
        if file not in referenced:
            _remove(folder, file)
    return Snapshot(folder, manifest, snapshot.user, spec, views, [], snapshot._tables, snapshot._cache)


def write_checked_manifest(folder, manifest, user, check):
    """The commit point (C10, C11): ``check()`` (the writer's lock), then the manifest written atomically, never over
    an existing one (GenerationTaken then: nothing committed)."""
    if check is not None:
        check()  # the writer still holds the folder's lock
    try:
        write_manifest(folder, manifest, user)
    except FileExistsError:
        generation = manifest.generation
        raise GenerationTaken(
            f"collection {folder!r}: {names.manifest_name(generation)} already exists: generation {generation} "
            "was made by someone else (another writer, if the folder's lock file was removed); nothing was "
            "committed. Close this writer and open the collection again") from None


def _is_regular(path):
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def remove_older_generations(folder, kept):
    """Remove every manifest of the folder that is not one of ``kept`` (Manifests: the writer's current generation
    and its fallback) and older than the newest of them, then every segment, deletion and quantizer file that none of
    ``kept`` references (C12: manifests first, so that no manifest ever references a removed file). Run by the writer after
    each commit, it removes whatever older generations left, also those of earlier writers of the folder (a writer
    starts with no memory of them): after any number of writer launches the folder holds the current generation and
    one fallback. Pending segments and temporary files are left alone here (a distributed build's workers may be
    writing them for a later commit; those that were there when the writer took the lock are removed by
    ``remove_leftovers``), as are foreign files (C1)."""
    newest = max(m.generation for m in kept)
    keep_manifests = {names.manifest_name(m.generation) for m in kept}
    referenced = set()
    for manifest in kept:
        referenced |= manifest.referenced()
    listing = sorted(os.listdir(folder))
    for name in listing:
        generation = names.parse_manifest(name)
        if generation is not None and generation < newest and name not in keep_manifests and \
                _is_regular(os.path.join(folder, name)):
            _remove(folder, name)
    for name in listing:
        if (names.is_segment(name) or names.is_deletions(name) or names.is_quantizer(name)) and \
                name not in referenced and _is_regular(os.path.join(folder, name)):
            _remove(folder, name)


def leftover_files(folder):
    """The pending segments and temporary files of the folder (names of section 13.1), sorted: read by a writer as it
    takes the lock, when every such file is a leftover of a writer (or a distributed build's worker) that died."""
    return sorted(name for name in os.listdir(folder)
                  if (names.is_pending(name) or names.is_temporary(name)) and _is_regular(os.path.join(folder, name)))


def remove_leftovers(folder, leftovers):
    """Remove the files ``leftovers`` (leftover_files of the folder when the writer locked it) that are still there:
    the first commit of a writer does, so that what killed writers left does not wait for a vacuum (C16)."""
    for name in leftovers:
        if _is_regular(os.path.join(folder, name)):
            _remove(folder, name)


def vacuum(folder, current, keep):
    """Remove every file of the collection's own kinds (manifests, segments, deletion files, pending segments,
    temporary files) that none of the ``keep`` newest verifying manifests up to ``current`` references, except
    manifests newer than ``current``. Foreign files are never touched. Returns the names removed."""
    kept = [current]
    for generation in manifest_generations(folder):
        if len(kept) >= keep:
            break
        if generation >= current.generation:
            continue
        with contextlib.suppress(ValueError, OSError):  # a manifest that does not verify is not kept
            kept.append(read_manifest(os.path.join(folder, names.manifest_name(generation)), generation)[0])
    referenced = {names.manifest_name(m.generation) for m in kept}
    for manifest in kept:
        referenced |= manifest.referenced()
    removed = []
    for name in sorted(os.listdir(folder)):
        if name in referenced or not names.is_collection_file(name) or not _is_regular(os.path.join(folder, name)):
            continue  # a folder, FIFO or link of a collection file's name was not made by a collection: foreign
        generation = names.parse_manifest(name)
        if generation is not None and generation > current.generation:
            continue  # a newer manifest that did not verify: kept as evidence until a commit passes it
        if _remove(folder, name):
            removed.append(name)
    return removed
