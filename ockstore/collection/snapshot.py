"""One generation of a collection, opened: its manifest, quantizer and segments (a snapshot). Loading picks the
newest generation whose manifest verifies (docs/FORMAT.md C4); searching scans each segment with its deletions as a
row filter and merges the per-segment top-k exactly (docs/ARCHITECTURE.md, "Collections").

A snapshot never changes: the files it reads are immutable, and it stays searchable when a writer commits newer
generations or removes the files of old ones (POSIX keeps open and mapped files alive).
"""

from __future__ import annotations

import inspect
import os
import warnings

import numpy as np

from .. import _search_options, storage
from .._validation import as_vectors, check_choice, check_k, resolve_n_threads
from ..errors import FormatError
from ..exact_index import exact_search
from ..index import Index
from ..ivf import IVF, check_n_probe
from ..search import QueryTables, rows_bitmap
from ..indexfile.reader import load_quantizer
from . import names
from .manifest import check_regular_file, read_deletions, read_manifest
from .merge import merge_topk
from .scan import Part, scan_parts
from .segments import Segment, SegmentSpec, SegmentView

__all__ = ["CollectionWarning", "Snapshot", "manifest_generations", "load_newest", "open_generation", "remember"]

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
            view = self.views[number]
            path = view.segment.path
            out[hit] = _search_options.gather_vectors(
                view.index.vectors, rows, lambda check, detail: storage.format_error(path, check, detail))
        return out[where.reshape(-1)]

    def live_ids(self):
        """Every live id, sorted (int64)."""
        if not self.views:
            return np.empty(0, dtype=np.int64)
        return np.sort(np.concatenate([view.live_ids() for view in self.views]))

    # -------------------------------------------------------------------------------------------------- search
    def search(self, Q, k, *, distance="adc", rerank=None, vectors=None, allow=None, n_threads=None,
               **segment_options):
        """Collection.search (its docstring says everything)."""
        quantizer = self.spec.quantizer
        N = self.live
        k = check_k(k, N)
        distance = check_choice(distance, "distance", ("adc", "sdc"))
        rerank = self.resolve_rerank(rerank, k)
        if not self.spec.trained:
            return self._search_exact(Q, k, vectors, allow, n_threads, segment_options)
        if vectors is not None:
            vectors = _check_id_vectors(vectors, quantizer.dim)
        elif rerank is not None and self.spec.store_vectors is None:
            raise ValueError("rerank needs the original vectors: create the collection with store_vectors=... or "
                             "pass vectors= (indexed by id)")
        threads = resolve_n_threads(n_threads)
        self._check_segment_options(segment_options)
        if "n_probe" in segment_options:  # checked here once, also when no segment is searched
            check_n_probe(segment_options["n_probe"], quantizer, "collection")
        Q, was_1d = as_vectors(Q, "Q", quantizer.dim)
        allowed = None if allow is None else _allowed_ids(allow)
        width = k if rerank is None else rerank
        Qp = quantizer._prepare(Q, "Q")  # what Index.search scans with: unit rows for cosine
        searched, rows = [], None
        if _flat(self.views, segment_options) and not isinstance(quantizer, IVF):
            # flat segments: one table model, each segment bounded by the k-th best so far (scan.py)
            parts = []
            for view in self.views:
                if allowed is None:
                    bitmap = view.live_bitmap()
                else:
                    mask = view.allowed_mask(allowed)
                    if mask is None:
                        continue  # no allowed row here
                    bitmap = rows_bitmap(mask)
                parts.append(self._part(view, bitmap))
                searched.append(view)
            keys, I, part, rows = scan_parts(self.tables, Qp, width, parts, distance=distance, n_threads=threads)
            D = keys if quantizer.metric == "l2" else np.negative(keys)  # scores descending, padding -inf
        else:
            # IVF segments (options such as n_probe): each segment's own search, merged exactly
            results = []
            for view in self.views:
                mask = view.live_mask() if allowed is None else view.allowed_mask(allowed)
                if allowed is not None and mask is None:
                    continue
                results.append(view.index.search(Q, min(width, view.segment.rows), distance=distance, allow=mask,
                                                 n_threads=threads, **segment_options))
                searched.append(view)
            D, I, part = merge_topk(results, width, descending=quantizer.metric != "l2", n_queries=Q.shape[0],
                                    return_part=True)
        if rerank is not None:
            D, I = self._rerank(Qp, I, part, rows, searched, vectors, k)
        if was_1d:
            return D[0], I[0]
        return D, I

    def resolve_rerank(self, rerank, k):
        """The candidates a search re-ranks (None: none): ``rerank`` checked; None means the default re-ranking when
        the collection stores vectors and has trained its quantizer (``_search_options.default_rerank``), none
        otherwise; 0 means none. Before training every result is exact: None."""
        N = self.live
        if rerank is None and self.spec.store_vectors is not None and self.spec.trained:
            return _search_options.check_rerank(_search_options.default_rerank(k, N), k, N)
        rerank = _search_options.check_rerank(rerank, k, N)
        return rerank if self.spec.trained else None

    def _search_exact(self, Q, k, vectors, allow, n_threads, segment_options):
        """The search of a collection that has not trained its quantizer: every live row by brute force over the
        stored vectors (exact_index.exact_search, per segment), merged exactly. ``distance`` and ``rerank`` were
        checked and change nothing (the results are exact); ``n_probe`` is checked as it will be once trained."""
        quantizer = self.spec.quantizer
        self._check_segment_options(segment_options)
        if "n_probe" in segment_options:
            check_n_probe(segment_options["n_probe"], quantizer, "collection")
        if vectors is not None:
            raise ValueError("vectors: this collection has not trained its quantizer yet; it searches its stored "
                             "vectors exactly and takes no other vectors")
        threads = resolve_n_threads(n_threads)
        Q, was_1d = as_vectors(Q, "Q", self.spec.dim)
        allowed = None if allow is None else _allowed_ids(allow)
        Qp = quantizer._prepare(Q, "Q")
        results = []
        for view in self.views:
            mask = view.live_mask() if allowed is None else view.allowed_mask(allowed)
            if allowed is not None and mask is None:
                continue
            index = view.index
            results.append(exact_search(Qp, min(k, view.segment.rows), index.vectors, index.ids, quantizer.metric,
                                        allow=mask, n_threads=threads, source=index._damaged,
                                        screen=index._screen_arrays()))
        D, I = merge_topk(results, k, descending=quantizer.metric != "l2", n_queries=Q.shape[0])
        return (D[0], I[0]) if was_1d else (D, I)

    @property
    def tables(self):
        """The QueryTables of the collection's quantizer (built on first search, kept by the next generations)."""
        tables = self._tables
        if tables is None:
            tables = self._tables = QueryTables(self.spec.quantizer)
            if self._cache is not None:
                self._cache[("tables", self.manifest.quantizer)] = tables
        return tables

    def _part(self, view, bitmap):
        """The Part of a segment: its codes, ids and norm terms as the scan reads them (Index._scan_norms: added
        for L2, 1 / ||x_hat|| scales for cosine), and the row bitmap."""
        index = view.index
        norms, norm_codes, levels, scales = index._scan_norms(self.tables)
        return Part(index.codes, index.ids, norms, norm_codes, levels, bitmap, scales)

    def _check_segment_options(self, options):
        if not options:
            return
        classes = {type(view.index) for view in self.views} or {Index}
        for cls in classes:
            accepted = set(inspect.signature(cls.search).parameters)
            for name in options:
                if name not in accepted:
                    raise TypeError(f"search() got an unexpected keyword argument {name!r}")

    def _rerank(self, Q, I, part, rows, views, vectors, k):
        """The best k of the merged candidates by their exact distances, computed as Index.search(rerank=...) does
        (the same function, on the candidates' vectors gathered from their segments or from ``vectors`` by id), so
        the results equal those of one index holding the live rows."""
        metric = self.spec.quantizer.metric
        nq = I.shape[0]
        D_out = np.full((nq, k), np.inf if metric == "l2" else -np.inf, dtype=np.float32)
        I_out = np.full((nq, k), -1, dtype=np.int64)
        step = max(1, _search_options.RERANK_STEP_BYTES // (4 * max(1, I.shape[1]) * self.spec.quantizer.dim))
        for start in range(0, nq, step):
            stop = min(nq, start + step)
            cand, cand_part = I[start:stop], part[start:stop]
            valid = cand >= 0
            if not valid.any():
                continue
            unique_ids, where = np.unique(cand[valid], return_inverse=True)
            if vectors is not None:
                data = _fetch_by_id(vectors, unique_ids)
            else:  # each candidate's stored vector, from its segment (rows found by id when the scan gave none)
                part_of = np.empty(unique_ids.shape, dtype=np.int64)
                part_of[where] = cand_part[valid]
                row_of = None
                if rows is not None:
                    row_of = np.empty(unique_ids.shape, dtype=np.int64)
                    row_of[where] = rows[start:stop][valid]
                data = np.empty((unique_ids.size, self.spec.quantizer.dim), dtype=views[0].index.vectors.dtype)
                for p in np.unique(part_of):
                    chosen = part_of == p
                    if row_of is None:
                        _, found = views[p].segment.ids_index().find(unique_ids[chosen])
                    else:
                        found = row_of[chosen]
                    order = np.argsort(found)
                    block = np.empty((found.size, data.shape[1]), dtype=data.dtype)
                    block[order] = views[p].index.vectors[found[order]]
                    if block.dtype.kind == "f":  # damage of the segment's section: FormatError naming it
                        path = views[p].segment.path
                        _search_options.check_vector_rows(block.astype(np.float32), found,
                                                          lambda check, detail: storage.format_error(path, check,
                                                                                                     detail))
                    data[chosen] = block
            local = np.full(cand.shape, -1, dtype=np.int64)
            local[valid] = where
            D_out[start:stop], I_out[start:stop] = _search_options.rerank_exact(Q[start:stop], local, data, metric,
                                                                                unique_ids, k)
        return D_out, I_out


def _flat(views, options):
    """Whether every segment is a flat Index searched without segment options: then scan.py scans them all with one
    set of tables; otherwise (IVF segments, n_probe) each segment's own search runs and the results are merged. (A
    collection of an IVF takes the second path even without segments: its model has no flat tables.)"""
    return not options and all(type(view.index) is Index for view in views)


def _allowed_ids(allow):
    """``allow`` of a collection search: ids (any order; duplicates, negative and unknown ids ignored), sorted unique
    int64. A boolean row mask is refused: rows have no meaning across segments."""
    arr = allow if isinstance(allow, np.ndarray) else np.asarray(allow)
    if arr.dtype == np.bool_:
        raise TypeError("allow must be an array of ids on a collection: a boolean mask over rows has no meaning "
                        "across segments")
    return np.unique(_search_options.allow_ids(arr))


def _check_id_vectors(vectors, dim):
    """``vectors`` of a collection search: an array-like of shape (n, P) whose row i is the vector of id i (an ndarray,
    np.memmap, HDF5 dataset...). Only the candidates' rows are read, by increasing id."""
    if not hasattr(vectors, "shape") or not hasattr(vectors, "__getitem__"):
        vectors = np.asarray(vectors)
    shape = tuple(vectors.shape)
    if len(shape) != 2 or shape[1] != dim:
        raise ValueError(f"vectors must have shape (n, {dim}), row i holding the vector of id i, got {shape}")
    dtype = np.dtype(getattr(vectors, "dtype", np.float64))
    if dtype.kind not in "iuf":
        raise TypeError(f"vectors must hold real numbers, got dtype {dtype}")
    return vectors


def _fetch_by_id(vectors, ids):
    """vectors[ids] (ids sorted, unique) for re-ranking, as float32, checked: every id has a row, every value is finite
    and within the limit of every vector input (ValueError naming ``vectors`` and the row, i.e. the id)."""
    if ids.size and int(ids[-1]) >= vectors.shape[0]:
        raise ValueError(f"vectors has {vectors.shape[0]} rows, but id {int(ids[-1])} is a candidate: on a collection "
                         "row i of vectors is the vector of id i")
    with np.errstate(over="ignore"):  # float64 values beyond float32 become inf: refused below
        block = np.asarray(vectors[ids], dtype=np.float32)
    _search_options.check_vector_rows(block, ids)
    return block


# ==================================================================================================================
# loading


def _open_generation(folder, manifest, user, cache, problems, files=None):
    """The Snapshot of a verified manifest; ``cache`` (a dict kept by the caller) holds the quantizer, the Segments and
    SegmentViews already opened, reused when the files are the same. FileNotFoundError when a file is missing.
    ``files``: open only the segments of these names (a share of the generation; see open_generation)."""
    if manifest.training is not None:  # not trained yet: the quantizer's parameters, segments of stored vectors
        spec = SegmentSpec(manifest.training.quantizer(), manifest.norm_encoding, manifest.store_vectors,
                           manifest.training.dim)
    else:
        quantizer = cache.get(("quantizer", manifest.quantizer))
        if quantizer is None:
            quantizer = load_quantizer(check_regular_file(os.path.join(folder, manifest.quantizer)))
        spec = SegmentSpec(quantizer, manifest.norm_encoding, manifest.store_vectors)
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
        cache[("quantizer", snapshot.manifest.quantizer)] = snapshot.spec.quantizer
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
