"""One generation of a collection, opened: its manifest, quantizer and segments (a snapshot). Loading picks the
newest generation whose manifest verifies (docs/FORMAT.md C4); searching scans each segment with its deletions as a
row filter and merges the per-segment top-k exactly (docs/ARCHITECTURE.md, "Collections").

A snapshot never changes: the files it reads are immutable, and it stays searchable when a writer commits newer
generations or removes the files of old ones (POSIX keeps open and mapped files alive).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import warnings

import numpy as np

from ..search import rerank as _rerank, options as _search_options
from .. import storage
from .._validation import as_vectors, resolve_n_threads
from ..errors import FormatError
from ..exact_index import exact_search
from ..search.scan import QueryTables, rows_bitmap
from ..indexfile.reader import load_linked_model
from . import names
from .manifest import check_regular_file, read_deletions, read_manifest
from .merge import merge_topk
from .scan import scan_parts
from .segments import Segment, SegmentSpec, SegmentView

__all__ = ["CollectionWarning", "Snapshot", "manifest_generations", "load_newest", "open_generation", "remember",
           "vectors_by_id", "by_unique_ids"]

# Loading retries with a newer manifest this many times when files of the chosen one vanish meanwhile (a writer
# removed an old generation's files between our reading its manifest and opening them).
LOAD_ATTEMPTS = 20

class CollectionWarning(UserWarning):
    """A collection was opened at an older generation than its newest manifest file: that manifest does not verify
    (the message says why). The data of the skipped generations are not visible; ``info()["problems"]`` keeps the
    reasons and ``verify()`` fails, until a writer commits a newer generation (a vacuum then removes the damaged
    file)."""


def manifest_generations(folder):
    """The generations of the manifest files in ``folder``, descending (FileNotFoundError: no such folder)."""
    found = [names.parse_manifest(name) for name in os.listdir(folder)]
    return sorted((g for g in found if g is not None), reverse=True)


class Snapshot:
    """A generation opened for searching; ``views`` are its segments with their deletions, in manifest order."""

    def __init__(self, folder, manifest, user, spec, views, problems, tables=None, cache=None):
        self.folder = folder
        self.manifest = manifest
        self.user = user
        self.spec = spec
        self.views = views
        self.problems = problems
        self._tables = tables  # QueryTables, built on first search
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
        """The checked options of a search of this generation: ``_search_options.search_options`` over its live rows,
        ``vectors`` and ``allow`` by id (every check of Collection.search but the queries'). ``rerank`` None means the
        default re-ranking of every searcher when the collection has vectors to re-rank from (stored, or given) and
        has trained its quantizer (``_search_options.check_rerank``), none otherwise; 0 none. Before training every result is exact: no
        re-ranking (a ``rerank`` given is checked, and changes nothing)."""
        if not self.spec.trained and options.get("vectors") is not None:
            raise ValueError("vectors: this collection has not trained its quantizer yet; it searches its stored "
                             "vectors exactly and takes no other vectors")
        opts = _search_options.search_options(self.spec.quantizer, self.live, k, by_id=True, rerank=rerank,
                                              stored_vectors=self.spec.store_vectors is not None, **options)
        if not self.spec.trained:
            opts = dataclasses.replace(opts, rerank=None)
        return opts

    def search(self, Q, k, *, n_probe=None, distance="adc", rerank=None, vectors=None, allow=None, n_threads=None,
               metric=None):
        """Collection.search (its docstring says everything)."""
        opts = self.search_options(k, n_probe=n_probe, distance=distance, rerank=rerank, vectors=vectors, allow=allow,
                                   n_threads=n_threads, metric=metric)
        return self._search(Q, opts)

    def search_candidates(self, Q, k, **options):
        """``search(Q, k, rerank=0, **options)`` for a caller that re-ranks the results itself (distributed search's
        workers): fast-scan segments rank them by their quantized bounds, as a search that re-ranks does
        (``SearchOptions.by_bound``)."""
        return self._search(Q, dataclasses.replace(self.search_options(k, rerank=0, **options), by_bound=True))

    def _search(self, Q, opts):
        """``search`` with its options checked."""
        Q, was_1d = as_vectors(Q, "Q", self.spec.vector_dim)
        if not self.spec.trained:
            D, I = self._search_exact(Q, opts)
            return (D[0], I[0]) if was_1d else (D, I)
        quantizer = self.spec.quantizer
        threads = resolve_n_threads(opts.n_threads)
        Qp = quantizer._prepare(Q, "Q")  # what Index.search scans with: unit rows for cosine
        D, I, part, rows, searched = self._candidates(Q, Qp, opts, threads)
        if opts.rerank is not None and opts.vectors is not None:
            def fetch(ids):
                return by_unique_ids(lambda unique: vectors_by_id(opts.vectors, unique), ids), ids

            D, I = _rerank.rerank(Qp, I, fetch, quantizer.metric, opts.k, n_threads=threads)
        elif opts.rerank is not None and searched:  # the stored vectors where they are: part p is segment searched[p]
            rows = self._candidate_rows(I, part, rows, searched)
            D, I = _rerank.rerank_stored(Qp, rows, np.where(rows >= 0, part, 0), self._stored_rows(searched), opts.k,
                                         threads)
        elif opts.rerank is not None:  # nothing searched: padding
            D, I = D[:, :opts.k], I[:, :opts.k]
        if was_1d:
            return D[0], I[0]
        return D, I

    def _candidates(self, Q, Qp, opts, threads):
        """(D, ids, part, rows, views) of the opts.width best live (allowed) rows of each query over the segments:
        ``part`` the position in ``views`` of each result, ``rows`` its row there (None when unknown)."""
        quantizer = self.spec.quantizer
        width, searched = opts.width, []
        if _scan_jointly(self.views):
            # flat segments: one table model, each segment bounded by the k-th best so far (scan.py)
            parts = []
            for view in self.views:
                if opts.allow is None:
                    bitmap = view.live_bitmap()
                else:
                    mask = view.allowed_mask(opts.allow)
                    if mask is None:
                        continue  # no allowed row here
                    bitmap = rows_bitmap(mask)
                parts.append(view.index._flat_scan_rows(bitmap))
                searched.append(view)
            keys, I, part, rows = scan_parts(self.tables, Qp, width, parts, distance=opts.distance, n_threads=threads,
                                             by_bound=opts.by_bound)
            D = keys if quantizer.metric == "l2" else np.negative(keys)  # scores descending, padding -inf
            return D, I, part, rows, searched
        # segments of other kinds (IVF: probed lists): each segment's own search, merged exactly
        results = []
        for view in self.views:
            mask = view.live_mask() if opts.allow is None else view.allowed_mask(opts.allow)
            if opts.allow is not None and mask is None:
                continue
            search = view.index._candidates if opts.by_bound else functools.partial(view.index.search, rerank=0)
            results.append(search(Q, min(width, view.segment.rows), n_probe=opts.n_probe, distance=opts.distance,
                                  allow=mask, n_threads=threads))
            searched.append(view)
        D, I, part = merge_topk(results, width, descending=quantizer.metric != "l2", n_queries=Q.shape[0],
                                return_part=True)
        return D, I, part, None, searched

    def _search_exact(self, Q, opts):
        """The search of a collection that has not trained its quantizer: every live (allowed) row by brute force
        over the stored vectors (exact_index.exact_search, per segment), merged exactly."""
        quantizer = self.spec.quantizer
        threads = resolve_n_threads(opts.n_threads)
        Qp = quantizer._prepare(Q, "Q")
        results = []
        for view in self.views:
            mask = view.live_mask() if opts.allow is None else view.allowed_mask(opts.allow)
            if opts.allow is not None and mask is None:
                continue
            index = view.index
            results.append(exact_search(Qp, min(opts.k, view.segment.rows), index.vectors, index.ids,
                                        quantizer.metric, allow=mask, n_threads=threads, source=index._damaged,
                                        screen=index._screen_arrays()))
        return merge_topk(results, opts.k, descending=quantizer.metric != "l2", n_queries=Q.shape[0])

    @property
    def tables(self):
        """The QueryTables of the collection's quantizer (built on first search, kept by the next generations)."""
        tables = self._tables
        if tables is None:
            tables = self._tables = QueryTables(self.spec.quantizer)
            if self._cache is not None:
                self._cache[("tables", self.manifest.quantizer)] = tables
        return tables

    def _candidate_rows(self, I, part, rows, views):
        """The row of each candidate id ``I`` in its segment ``views[part]`` (``rows`` when the scan gave them; else
        found by id: a live id is in one segment, at one row); -1 for none."""
        if rows is not None:
            return np.where(I >= 0, rows, -1)
        out = np.full(I.shape, -1, dtype=np.int64)
        for p, view in enumerate(views):
            chosen = (part == p) & (I >= 0)
            if chosen.any():
                _, out[chosen] = view.segment.ids_index().find(I[chosen])
        return out

    def _stored_rows(self, views):
        """The _rerank.StoredRows of the segments' stored vectors, part p being views[p] (damage named by file)."""
        return _rerank.StoredRows(
            [view.index.vectors for view in views], [view.index.ids for view in views], self.spec.quantizer.metric,
            sq8_ranges=self.spec.quantizer.value_ranges if self.spec.store_vectors == "sq8" else None,
            damaged=[lambda check, detail, path=view.segment.path: storage.format_error(path, check, detail)
                     for view in views])


def _scan_jointly(views):
    """Whether the segments are scanned as rows of one table model (scan.py: every segment flat, bounded by the k-th
    best so far), rather than each by its own search with the results merged (IVF segments: each probes its lists).
    A collection without segments takes the second path: it has nothing to scan."""
    return bool(views) and all(view.index._flat_scan_rows(None) is not None for view in views)


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


def _open_generation(folder, manifest, user, cache, problems, files=None):
    """The Snapshot of a verified manifest; ``cache`` (a dict kept by the caller) holds the quantizer, the Segments and
    SegmentViews already opened, reused when the files are the same. FileNotFoundError when a file is missing.
    ``files``: open only the segments of these names (a share of the generation; see open_generation)."""
    if manifest.training is not None:  # not trained yet: the quantizer's parameters, segments of stored vectors
        spec = SegmentSpec(manifest.training.quantizer(), manifest.norm_encoding, manifest.store_vectors,
                           manifest.training.dim)
    else:  # the quantizer file, loaded once with its fingerprint: segments by reference are opened with it
        linked = cache.get(("quantizer", manifest.quantizer))
        if linked is None:
            linked = load_linked_model(check_regular_file(os.path.join(folder, manifest.quantizer)))
        spec = SegmentSpec(linked.model, manifest.norm_encoding, manifest.store_vectors, model_ref=linked.ref)
    views, opened = [], []
    try:
        for entry in manifest.segments:
            if files is not None and entry.file not in files:
                continue
            view = cache.get(("view", entry.file, entry.deletions))
            if view is None or view.segment.index.closed:
                segment = cache.get(("segment", entry.file))
                if segment is None or segment.index.closed:
                    segment = Segment(folder, entry, spec)
                    opened.append(segment)
                deleted = np.empty(0, dtype=np.int64)
                if entry.deletions is not None:
                    deleted = read_deletions(os.path.join(folder, entry.deletions), entry)
                view = SegmentView(segment, entry, deleted)
            views.append(view)
    except BaseException:
        for segment in opened:
            segment.close()
        raise
    snapshot = Snapshot(folder, manifest, user, spec, views, problems, cache.get(("tables", manifest.quantizer)),
                        cache)
    remember(cache, snapshot)
    return snapshot


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


def load_newest(folder, cache, *, warn=True):
    """The Snapshot of the newest generation of ``folder`` whose manifest verifies (C4).

    Newer manifests that do not verify are skipped, each reason kept in ``problems`` (and warned about with a
    CollectionWarning when ``warn``). FormatError when the folder holds no manifest, when none verifies, or when a file
    that the chosen manifest references is missing and no newer manifest appeared meanwhile.
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
            snapshot = _open_generation(folder, manifest, user, cache, problems)
        except FileNotFoundError as exc:
            newest = manifest_generations(folder)
            if newest and newest[0] > generation:
                continue  # the writer moved on and removed this generation's files: take the newer one
            raise storage.format_error(folder, "missing file",
                                       f"a file that {names.manifest_name(generation)} references is missing ({exc})"
                                       ) from None
        if problems and warn:
            warnings.warn(CollectionWarning(f"collection {folder!r} opened at generation {generation}: "
                                            + "; ".join(problems)), stacklevel=3)
        return snapshot
    raise FormatError(f"{folder!r}: the collection kept changing while it was being opened ({LOAD_ATTEMPTS} "
                      "attempts); is a writer committing and vacuuming continuously?")
