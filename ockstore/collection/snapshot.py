"""One generation of a collection, opened: its manifest, quantizer and segments (a snapshot). Loading picks the
newest generation whose manifest verifies (docs/FORMAT.md C4); searching scans each segment with its deletions as a
row filter and merges the per-segment top-k exactly (docs/ARCHITECTURE.md, "Collections").

A snapshot never changes: the files it reads are immutable, and it stays searchable when a writer commits newer
generations or removes the files of old ones (POSIX keeps open and mapped files alive).
"""

from __future__ import annotations

import dataclasses
import os
import warnings

import numpy as np

from ..search import rerank as _rerank, options as _search_options
from .. import storage
from ..errors import FormatError
from ..search.scan import rows_bitmap
from ..search.searcher import Parts, Searcher, tables_of
from ..indexfile.reader import load_linked_model
from . import names
from .manifest import check_regular_file, read_deletions, read_manifest
from .segments import Segment, SegmentSpec, SegmentView

__all__ = ["CollectionWarning", "Snapshot", "SkippedSegment", "manifest_generations", "load_newest", "open_generation",
           "remember", "vectors_by_id", "by_unique_ids"]

# Loading retries with a newer manifest this many times when files of the chosen one vanish meanwhile (a writer
# removed an old generation's files between our reading its manifest and opening them).
LOAD_ATTEMPTS = 20

class CollectionWarning(UserWarning):
    """A collection was opened at an older generation than its newest manifest file: that manifest does not verify
    (the message says why). The data of the skipped generations are not visible; ``info()["problems"]`` keeps the
    reasons and ``verify()`` fails, until a writer commits a newer generation (a vacuum then removes the damaged
    file). Also: a reader opened with ``skip_damaged=True`` left out damaged or missing segments (``skipped``)."""


def manifest_generations(folder):
    """The generations of the manifest files in ``folder``, descending (FileNotFoundError: no such folder)."""
    found = [names.parse_manifest(name) for name in os.listdir(folder)]
    return sorted((g for g in found if g is not None), reverse=True)


class Snapshot:
    """A generation opened for searching; ``views`` are its segments with their deletions, in manifest order."""

    skipped = ()  # the segments a reader opened with skip_damaged left out (SkippedSegment; see _open_generation)

    def __init__(self, folder, manifest, user, spec, views, problems, tables=None, cache=None):
        self.folder = folder
        self.manifest = manifest
        self.user = user
        self.spec = spec
        self.views = views
        self.problems = problems
        self._tables = tables  # QueryTables, built on first search
        self._parts = None  # the search.searcher.Parts of the segments, built on first search
        self._cache = cache  # the collection's cache (see remember), which keeps the tables for later generations

    @property
    def generation(self) -> int:
        return self.manifest.generation

    @property
    def live(self) -> int:
        return self.manifest.live

    # ---------------------------------------------------------------------------------------------------- ids
    def find_live(self, ids):
        """(live, found) for unique int64 ``ids``: ``live`` a bool mask over ids, ``found`` a list of
        (view number, hit mask over ids, rows) for every segment holding some of them live."""
        live = np.zeros(ids.shape, dtype=bool)
        found = []
        for number, view in enumerate(self.views):
            hit, rows = view.find_live(ids)
            if rows.size:
                found.append((number, hit, rows))
                live |= hit
        return live, found

    def get(self, ids):
        """The stored vectors of the live ``ids`` (int64, checked >= 0; any order, repeats allowed), float32 of shape
        (n, P) in the order given (Collection.get's docstring says everything)."""
        if self.spec.store_vectors is None:
            raise ValueError("get: this collection stores no vectors: create it with store_vectors='float32' (or "
                             "'float16', 'uint8') to read vectors back")
        unique, where = np.unique(ids, return_inverse=True)
        live, found = self.find_live(unique)
        if not live.all():
            raise _search_options.unknown_ids_error(ids, live[where], "the collection (they were never added, or "
                                                                      "were deleted)")
        out = np.empty((unique.size, self.spec.vector_dim or 0), dtype=np.float32)
        for number, hit, rows in found:
            out[hit] = self.views[number].index._stored_values(rows)  # checked (damage names the segment); sq8 decoded
        return out[where.reshape(-1)]

    def live_ids(self):
        """Every live id, sorted (int64)."""
        if not self.views:
            return np.empty(0, dtype=np.int64)
        return np.sort(np.concatenate([view.live_ids() for view in self.views]))

    # -------------------------------------------------------------------------------------------------- search
    def search_options(self, k, *, rerank=None, **options):
        """The checked options of a search of this generation: ``search.options.search_options`` over its live rows,
        ``vectors`` by id (every check of Collection.search but the queries' and the call's filter). ``rerank`` None
        means the default re-ranking of every searcher when the collection has vectors to re-rank from (stored, or
        given) and has trained its quantizer (``search.options.check_rerank``), none otherwise; 0 none. Before
        training every result is exact: no re-ranking (a ``rerank`` given is checked, and changes nothing)."""
        if not self.spec.trained and options.get("vectors") is not None:
            raise ValueError("vectors: this collection has not trained its quantizer yet; it searches its stored "
                             "vectors exactly and takes no other vectors")
        opts = _search_options.search_options(self.spec.quantizer, self.live, k, by_id=True, rerank=rerank,
                                              stored_vectors=self.spec.store_vectors is not None, **options)
        if not self.spec.trained:
            opts = dataclasses.replace(opts, rerank=None, by_bound=False)
        return opts

    def searcher(self, k, **options):
        """A Searcher of this generation (Collection.searcher's options, checked here once)."""
        return Searcher(self, self.search_options(k, **options), by_id=True)

    def search(self, Q, k, *, allow=None, **options):
        """Collection.search (its docstring says everything)."""
        return self.searcher(k, **options).search(Q, allow=allow)

    def _search_parts(self):
        """The Parts of this generation: every segment with its live rows (built on first search and kept: a snapshot
        never changes). Before training: the segments' stored vectors, searched exactly."""
        parts = self._parts
        if parts is None:
            views = self.views
            indexes = [view.index for view in views]
            damaged = [_segment_damage(view.segment.path) for view in views]
            if self.spec.trained:
                parts = Parts(self.spec.quantizer, indexes, [view.live_bitmap() for view in views], tables=self.tables,
                              damaged=damaged)
            else:
                parts = Parts(self.spec.quantizer, indexes, [view.live_mask() for view in views], damaged=damaged,
                              exact=True)
            self._parts = parts
        return parts

    def _allow_bitmaps(self, allow, parts):
        """The rows of each segment a call's filter allows (sorted unique ids) among its live ones: bitmaps (masks
        before training, whose search is exact), one per segment; a segment with none gets an empty one."""
        out = []
        for view in self.views:
            mask = view.allowed_mask(allow)
            if mask is None:
                mask = np.zeros(view.segment.rows, dtype=bool)
            out.append(mask if parts.exact else rows_bitmap(mask))
        return out

    def _fetch(self, vectors, handles, parts):
        """(keys, fetch) of the caller's ``vectors`` (row i: the vector of id i) for re-ranking candidates: keys their
        ids, ``fetch(ids)`` reads each id's row once, in increasing order."""
        keys = parts.ids_of(handles)

        def fetch(ids):
            return by_unique_ids(lambda unique: vectors_by_id(vectors, unique), ids), ids

        return keys, fetch

    def search_candidates(self, Q, width, *, allow=None, **options):
        """(values, ids) of the ``width`` best live rows of each query by their codes (4-bit codes: by quantized
        bound), as a re-ranked search keeps them before re-ranking: distributed search's workers send them to the
        client, which re-ranks them (values as a search returns them: distances, or scores)."""
        D, handles = self.searcher(width, rerank=0, **options).candidates(Q, width, allow=allow)
        return D, self._search_parts().ids_of(handles)

    @property
    def tables(self):
        """The QueryTables of the collection's quantizer (built on first search, kept by the next generations)."""
        tables = self._tables
        if tables is None:
            tables = self._tables = tables_of(self.spec.quantizer)
            if self._cache is not None:
                self._cache[("tables", self.manifest.quantizer)] = tables
        return tables


def _segment_damage(path):
    """The FormatError maker of damage in a segment's stored vectors, naming its file."""
    return lambda check, detail: storage.format_error(path, check, detail)


def by_unique_ids(read, ids):
    """``read(unique)`` of the sorted unique ``ids`` (each read once: an HDF5 dataset wants increasing rows), spread
    back over ``ids`` (a candidate id may come up for several queries)."""
    unique, where = np.unique(ids, return_inverse=True)
    return read(unique)[where.reshape(-1)]


def vectors_by_id(vectors, ids):
    """vectors[ids] (ids sorted, unique) for re-ranking, as float32, checked: every id has a row, every value is finite
    and within the limit of every vector input (ValueError naming ``vectors`` and the row, i.e. the id)."""
    if ids.size and int(ids[-1]) >= vectors.shape[0]:
        raise ValueError(f"vectors has {vectors.shape[0]} rows, but id {int(ids[-1])} is a candidate: on a collection "
                         "row i of vectors is the vector of id i")
    return _rerank.gather_rows(vectors, ids)


# ==================================================================================================================
# loading


@dataclasses.dataclass(frozen=True)
class SkippedSegment:
    """A segment that a reader opened with ``skip_damaged`` left out: its file, its live rows (not searched) and why."""

    file: str
    live: int
    problem: str

    def describe(self):
        return f"{self.file} skipped ({self.live} live rows not searched): {self.problem}"


# What the error of a damaged or missing segment says a reader can do.
SKIP_ADVICE = "open_collection({folder!r}, 'r', skip_damaged=True) reads the other segments"


def _open_generation(folder, manifest, user, cache, problems, files=None, skip_damaged=False):
    """The Snapshot of a verified manifest; ``cache`` (a dict kept by the caller) holds the quantizer, the Segments and
    SegmentViews already opened, reused when the files are the same. FileNotFoundError when a file is missing.
    ``files``: open only the segments of these names (a share of the generation; see open_generation).

    A segment that is missing (and no newer manifest appeared: a writer did not just remove it) or fails its checks at
    open, or whose deletion file does: ``skip_damaged`` leaves it out of the snapshot (whose manifest then lists the
    other segments only), reported in ``problems`` and ``skipped``; otherwise FormatError naming the file and the way
    to read the rest (SKIP_ADVICE). The quantizer cannot be skipped: every segment needs it."""
    if manifest.training is not None:  # not trained yet: the quantizer's parameters, segments of stored vectors
        spec = SegmentSpec(manifest.training.quantizer(), manifest.norm_encoding, manifest.store_vectors,
                           manifest.training.dim)
    else:  # the quantizer file, loaded once with its fingerprint: segments by reference are opened with it
        linked = cache.get(("quantizer", manifest.quantizer))
        if linked is None:
            linked = load_linked_model(check_regular_file(os.path.join(folder, manifest.quantizer)))
        spec = SegmentSpec(linked.model, manifest.norm_encoding, manifest.store_vectors, model_ref=linked.ref)
    views, opened, skipped = [], [], []
    try:
        for entry in manifest.segments:
            if files is not None and entry.file not in files:
                continue
            view = cache.get(("view", entry.file, entry.deletions))
            if view is None or view.segment.index.closed:
                try:
                    view = _open_view(folder, entry, spec, cache, opened)
                except (FormatError, OSError) as exc:
                    if isinstance(exc, FileNotFoundError) and _newer_manifest(folder, manifest.generation):
                        raise  # a writer removed this generation's files: load_newest takes the newer one
                    if not skip_damaged:
                        if isinstance(exc, FormatError):
                            raise FormatError(f"{exc}; " + SKIP_ADVICE.format(folder=folder)) from exc
                        raise
                    skipped.append(SkippedSegment(entry.file, entry.live, str(exc)))
                    continue
            views.append(view)
    except BaseException:
        for segment in opened:
            segment.close()
        raise
    if skipped:  # the snapshot holds the other segments: its counts and searches are theirs
        manifest = dataclasses.replace(manifest, segments=tuple(v.entry for v in views))
        problems = [*problems, *(s.describe() for s in skipped)]
    snapshot = Snapshot(folder, manifest, user, spec, views, problems, cache.get(("tables", manifest.quantizer)),
                        cache)
    snapshot.skipped = tuple(skipped)
    remember(cache, snapshot)
    return snapshot


def _open_view(folder, entry, spec, cache, opened):
    """The SegmentView of a manifest entry: its segment (from ``cache``, or opened and appended to ``opened``) and
    its deletions."""
    segment = cache.get(("segment", entry.file))
    if segment is None or segment.index.closed:
        segment = Segment(folder, entry, spec)
        opened.append(segment)
    deleted = np.empty(0, dtype=np.int64)
    if entry.deletions is not None:
        deleted = read_deletions(os.path.join(folder, entry.deletions), entry)
    return SegmentView(segment, entry, deleted)


def _newer_manifest(folder, generation):
    newest = manifest_generations(folder)
    return bool(newest) and newest[0] > generation


def open_generation(folder, generation, *, files=None, cache=None):
    """The Snapshot of generation ``generation`` of ``folder`` (not necessarily the newest), or of a share of it: with
    ``files``, only the segments of those names are opened and searched, while ``live`` and the checks of ``search``
    (k, rerank) stay those of the whole generation. For the workers of a distributed search, which each search a share
    of one generation (docs/ARCHITECTURE.md, "Collections"); ``cache`` as for load_newest, to reuse what an earlier
    share of the folder opened. FileNotFoundError when the manifest or a file of the share is gone (a writer removed
    that generation: search a newer one); FormatError when the manifest does not verify."""
    manifest, user = read_manifest(os.path.join(folder, names.manifest_name(generation)), generation)
    return _open_generation(folder, manifest, user, {} if cache is None else cache, [],
                            None if files is None else frozenset(files))


def remember(cache, snapshot):
    """Make ``cache`` hold what ``snapshot`` opened (and nothing of older generations): its quantizer, segments,
    views and query tables, for the next generation to reuse."""
    cache.clear()
    if snapshot.spec.trained:
        cache[("quantizer", snapshot.manifest.quantizer)] = snapshot.spec.linked_model(snapshot.folder)
    if snapshot._tables is not None:
        cache[("tables", snapshot.manifest.quantizer)] = snapshot._tables
    for view in snapshot.views:
        cache[("segment", view.segment.name)] = view.segment
        cache[("view", view.entry.file, view.entry.deletions)] = view


def load_newest(folder, cache, *, warn=True, skip_damaged=False):
    """The Snapshot of the newest generation of ``folder`` whose manifest verifies (C4).

    Newer manifests that do not verify are skipped, each reason kept in ``problems`` (and warned about with a
    CollectionWarning when ``warn``). FormatError when the folder holds no manifest, when none verifies, or when a file
    that the chosen manifest references is missing and no newer manifest appeared meanwhile. ``skip_damaged``: a
    segment that is missing or damaged is left out instead (``_open_generation``), reported as newer manifests are.
    """
    for _attempt in range(LOAD_ATTEMPTS):
        generations = manifest_generations(folder)
        if not generations:
            raise FormatError(f"{folder!r}: not a collection: no manifest file (manifest.<generation>) in the folder")
        problems, chosen = [], None
        for generation in generations:
            try:
                chosen = (generation, *read_manifest(os.path.join(folder, names.manifest_name(generation)),
                                                     generation))
                break
            except FileNotFoundError:
                continue  # removed by a writer's vacuum since we listed the folder: an older generation
            except FormatError as exc:
                problems.append(f"{names.manifest_name(generation)} does not verify ({exc})")
        if chosen is None:
            if not problems:
                continue
            raise FormatError(f"{folder!r}: no manifest verifies: " + "; ".join(problems))
        generation, manifest, user = chosen
        try:
            snapshot = _open_generation(folder, manifest, user, cache, problems, skip_damaged=skip_damaged)
        except FileNotFoundError as exc:
            newest = manifest_generations(folder)
            if newest and newest[0] > generation:
                continue  # the writer moved on and removed this generation's files: take the newer one
            missing = os.path.basename(exc.filename) if isinstance(exc.filename, str) else ""
            advice = "" if names.is_quantizer(missing) else "; " + SKIP_ADVICE.format(folder=folder)
            raise storage.format_error(folder, "missing file",
                                       f"a file that {names.manifest_name(generation)} references is missing ({exc})"
                                       f"{advice}") from None
        problems = snapshot.problems
        if problems and warn:
            warnings.warn(CollectionWarning(f"collection {folder!r} opened at generation {generation}: "
                                            + "; ".join(problems)), stacklevel=3)
        return snapshot
    raise FormatError(f"{folder!r}: the collection kept changing while it was being opened ({LOAD_ATTEMPTS} "
                      "attempts); is a writer committing and vacuuming continuously?")
