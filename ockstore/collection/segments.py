"""Segments of a collection: opening them (read-only mmap through ``open_index``), finding ids in them, their
deletion masks, and writing them: new rows (``SegmentWriter``, ``write_pending_segment``) and merged rows
(``copy_live_rows``, by copying codes, norm terms, ids and stored vectors, never re-encoding).

A segment is an ordinary index file that always stores ids (docs/FORMAT.md rule C7). Its ids are unique within it;
an id may appear in several segments, but is live (not deleted) in at most one. Segments are written by reference
(docs/FORMAT.md section 18): they name the collection's quantizer file and carry its fingerprint instead of a copy of
the model (``SegmentSpec.model_ref``), and are opened with the model the collection loaded once (``open_segment``).
Segments of older collections, each with its own copy of the model, open as any index file.

IVF segments (inverted files, rows stored list after list): ``SegmentWriter`` and ``copy_live_rows`` hand the writer
each row's list with its code (``IndexWriter._append(..., list_ids=...)``); the writer sorts the rows by list.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from .. import storage
from .._closable import AbortOnError
from .._index_rows import BUILD_CHUNK, encode_step
from .._validation import as_ids, as_vectors, resolve_n_threads
from ..exact_index import ExactIndex
from ..indexfile.reader import open_index, open_segment
from ..indexfile.segment_file import LinkedModel, ModelRef
from ..indexfile.vectors_file import VectorsWriter, checked_vector_rows
from ..indexfile.writer import IndexWriter
from ..search.scan import rows_bitmap
from . import names
from .manifest import check_regular_file

__all__ = ["SegmentSpec", "IdIndex", "Segment", "SegmentView", "PendingSegment", "SegmentWriter",
           "write_pending_segment", "copy_live_rows", "COPY_ROWS", "COPY_DAMAGED_ADVICE"]

# Rows copied per step when merging segments: bounds the temporaries of a merge (codes, norms, ids and stored
# vectors of this many rows) whatever the size of the segments.
COPY_ROWS = 1 << 16


@dataclass(frozen=True)
class SegmentSpec:
    """What every segment of a collection shares: the quantizer, the norm encoding and the stored vectors' dtype.

    While the collection has not trained its quantizer, ``quantizer`` is the unfitted one (its parameters), ``dim``
    the dimension of the vectors (None before the first), and segments are files of stored vectors only
    (``ExactIndex``). Once trained, ``model_ref`` names the collection's quantizer file (loaded as ``quantizer``) with
    its fingerprint: segments are written by reference to it (docs/FORMAT.md section 18); None writes segments that
    hold their own copy of the model, as collections did before format 1.4. Picklable (a quantizer pickles), so that a
    distributed build can ship it to its workers.
    """

    quantizer: object
    norm_encoding: str
    store_vectors: str | None
    dim: int | None = None
    model_ref: ModelRef | None = None

    @property
    def trained(self) -> bool:
        return self.quantizer.is_fitted

    @property
    def metric(self) -> str:
        return self.quantizer.metric

    @property
    def vector_dim(self):
        """The dimension of the vectors (None only before the first vector of an untrained collection)."""
        return self.quantizer.dim if self.trained else self.dim

    def linked_model(self, folder):
        """The LinkedModel segments of ``folder`` by reference are opened with (None without ``model_ref``)."""
        if self.model_ref is None:
            return None
        return LinkedModel(self.quantizer, self.model_ref, os.path.join(folder, self.model_ref.file))


# ====================================================================================================================
# reading


class IdIndex:
    """Rows of ids in a segment (its ids are unique): a binary search over the ids themselves when they are sorted
    (no copy: the mapped section is searched in place), else over a sorted copy made once (O(n log n))."""

    def __init__(self, ids):
        if ids.shape[0] < 2 or bool((ids[1:] > ids[:-1]).all()):
            self.order = None
            self.sorted = ids
        else:
            self.order = np.argsort(ids, kind="stable")
            self.sorted = ids[self.order]

    def find(self, wanted):
        """(hit, rows): ``hit`` a bool mask over ``wanted`` (int64, any order), ``rows`` the row of each wanted id
        that is in the segment, in the order of ``wanted[hit]``."""
        n = self.sorted.shape[0]
        if n == 0 or wanted.size == 0:
            return np.zeros(wanted.shape, dtype=bool), np.empty(0, dtype=np.int64)
        pos = np.searchsorted(self.sorted, wanted)
        np.minimum(pos, n - 1, out=pos)
        hit = self.sorted[pos] == wanted
        rows = pos[hit]
        if self.order is not None:
            rows = self.order[rows]
        return hit, rows.astype(np.int64, copy=False)


class Segment:
    """An opened segment file: the Index over its read-only mapping, and the lookup of its ids (built on first use).
    Shared by every generation that holds the file (segment files never change)."""

    def __init__(self, folder, entry, spec):
        self.name = entry.file
        self.path = os.path.join(folder, entry.file)
        # FileNotFoundError propagates: the caller may retry with a newer manifest
        linked = spec.linked_model(folder)
        path = check_regular_file(self.path)
        index = open_index(path) if linked is None else open_segment(path, linked)
        try:
            _check_segment(index, self.path, entry, spec)
        except BaseException:
            index.close()
            raise
        self.index = index
        self.rows = entry.rows
        self._ids = None

    def ids_index(self):
        ids = self._ids
        if ids is None:
            ids = self._ids = IdIndex(self.index.ids)
        return ids

    def copy_check(self, sections=None, advice=None):
        """The storage.SectionCheck of the CRCs of this segment's sections (``sections``, or all of them) for a commit
        that copies its rows (merges, compaction, training): damage stops at the first copy instead of being carried
        into a new file under a fresh checksum, after which ``verify`` would pass. ``advice`` follows the error
        (COPY_DAMAGED_ADVICE when None)."""
        return self.index._file.section_check(sections, advice=COPY_DAMAGED_ADVICE if advice is None else advice)

    def close(self):
        self.index.close()


# What a commit that meets a damaged segment says after the check that failed.
COPY_DAMAGED_ADVICE = ("; the segment is damaged: nothing was committed (a copy of it would carry the damage on "
                       "under a fresh checksum). Restore the file from a backup, or delete the ids it holds (a "
                       "segment none of whose rows is live is dropped without being read)")


def _check_segment(index, path, entry, spec):
    """The open-time checks of a segment against its manifest entry and the collection (C7)."""
    def fail(detail):
        return storage.format_error(path, "segment mismatch", detail)

    if index.ntotal != entry.rows:
        raise fail(f"{index.ntotal} rows, the manifest says {entry.rows}")
    if not index.has_ids:
        raise fail("the segment stores no ids (meta 'has_ids' is false)")
    if isinstance(index, ExactIndex) != (not spec.trained):
        raise fail("a file of stored vectors in a collection that has trained its quantizer" if spec.trained else
                   "an index file in a collection that has not trained its quantizer (its segments store vectors only)")
    if not spec.trained:
        if (index.metric, index.store_vectors, index.dim) != (spec.metric, spec.store_vectors, spec.dim):
            raise fail(f"metric {index.metric!r}, store_vectors {index.store_vectors!r}, dimension {index.dim}; the "
                       f"collection has {spec.metric!r}, {spec.store_vectors!r}, {spec.dim}")
        return
    if index.norm_encoding != spec.norm_encoding or index.store_vectors != spec.store_vectors:
        raise fail(f"norm_encoding {index.norm_encoding!r} and store_vectors {index.store_vectors!r}, the collection "
                   f"has {spec.norm_encoding!r} and {spec.store_vectors!r}")
    if index.quantizer is not spec.quantizer and index.quantizer != spec.quantizer:  # a segment with its own model
        raise fail("its quantizer differs from the collection's quantizer file")


class SegmentView:
    """A segment as one generation sees it: with its deleted ids (sorted, in memory) and the mask of deleted rows
    (built on first use and kept: one per segment and deletion file, never per search)."""

    def __init__(self, segment, entry, deleted_ids):
        self.segment = segment
        self.entry = entry
        self.deleted_ids = deleted_ids  # int64 sorted unique, empty when nothing is deleted
        self._live_mask = None
        self._live_bitmap = None

    @property
    def index(self):
        return self.segment.index

    @property
    def live(self) -> int:
        return self.entry.live

    def live_mask(self):
        """None when every row is live, else the bool mask of live rows (read-only, cached)."""
        if self.entry.deleted == 0:
            return None
        mask = self._live_mask
        if mask is None:
            hit, rows = self.segment.ids_index().find(self.deleted_ids)
            if not hit.all():
                bad = int(self.deleted_ids[np.argmin(hit)])
                raise storage.format_error(os.path.join(os.path.dirname(self.segment.path), self.entry.deletions),
                                           "bad deletions", f"id {bad} is not in segment {self.segment.name!r}")
            mask = np.ones(self.segment.rows, dtype=bool)
            mask[rows] = False
            mask.flags.writeable = False
            self._live_mask = mask
        return mask

    def live_bitmap(self):
        """None when every row is live, else the scan's bitmap of live rows (search.rows_bitmap; cached)."""
        if self.entry.deleted == 0:
            return None
        bitmap = self._live_bitmap
        if bitmap is None:
            bitmap = self._live_bitmap = rows_bitmap(self.live_mask())
        return bitmap

    def find_live(self, wanted):
        """(hit, rows) of the ``wanted`` ids (int64) that are live in this segment (see IdIndex.find)."""
        in_range = (wanted >= self.entry.min_id) & (wanted <= self.entry.max_id)
        hit = np.zeros(wanted.shape, dtype=bool)
        if not in_range.any():
            return hit, np.empty(0, dtype=np.int64)
        sub_hit, rows = self.segment.ids_index().find(wanted[in_range])
        if self.entry.deleted:
            alive = self.live_mask()[rows]
            where = np.flatnonzero(sub_hit)
            sub_hit[where[~alive]] = False
            rows = rows[alive]
        hit[np.flatnonzero(in_range)[sub_hit]] = True
        return hit, rows

    def allowed_mask(self, allowed_ids):
        """The mask of live rows whose id is in ``allowed_ids`` (int64), or None when no row is."""
        hit, rows = self.find_live(allowed_ids)
        if rows.size == 0:
            return None
        mask = np.zeros(self.segment.rows, dtype=bool)
        mask[rows] = True
        return mask

    def live_ids(self):
        ids = self.index.ids
        mask = self.live_mask()
        return np.array(ids if mask is None else ids[mask], dtype=np.int64)


# ====================================================================================================================
# writing


@dataclass(frozen=True)
class PendingSegment:
    """A segment file written into a collection folder under a hidden name (``.pending.<hex>.ock``), not yet part
    of any generation: ``Collection.commit_segments`` makes a list of them visible in one commit."""

    path: str
    rows: int
    min_id: int
    max_id: int


class SegmentWriter(AbortOnError):
    """Write one pending segment into a collection folder, chunk by chunk (memory bounded by the chunk).

    Every chunk comes with its ids (int64 >= 0; the collection assigns them when the caller gives none). Nothing is
    checked against the collection here: the commit does that. Used as a context manager, an exception aborts (the
    file is removed). ``dim``: the dimension of the vectors, for a collection that has not trained its quantizer and
    has no vectors yet (its spec does not know it).
    """

    def __init__(self, folder, spec, *, n_threads=None, dim=None, _name=None):
        # _name: the collection's own adds write their segment under its final name (saves a rename and an fsync)
        self.path = os.path.join(folder, names.pending_name() if _name is None else _name)
        if not spec.trained and spec.dim is None and dim is not None:  # the first vectors of an untrained collection
            spec = SegmentSpec(spec.quantizer, spec.norm_encoding, spec.store_vectors, dim)
        self._spec = spec
        self._threads = resolve_n_threads(n_threads)
        if spec.trained:  # by reference to the collection's quantizer file (model_ref; None: a copy of the model)
            self._writer = IndexWriter(self.path, spec.quantizer, norm_encoding=spec.norm_encoding,
                                       store_vectors=spec.store_vectors, n_threads=1, _model_ref=spec.model_ref)
        else:  # stored vectors only, until the collection trains its quantizer
            if spec.dim is None:
                raise ValueError("the collection has no vectors yet: its dimension is set by its first add")
            self._writer = VectorsWriter(self.path, spec.dim, spec.metric, spec.store_vectors)
        self.rows = 0
        self.min_id = None
        self.max_id = None

    def add(self, X, ids):
        """Encode and append ``X`` (n, P) with ``ids`` (n,) (checked: integers >= 0), BUILD_CHUNK rows at a time.
        After an error (a refused value in a later step) part of ``X`` may be appended: abort the writer (leaving a
        ``with`` block by the exception does)."""
        self._add(X, ids)

    def _add(self, X, ids, first_row=0):
        """add(), naming a refused row by its number plus ``first_row`` (the command line streams chunks of a file)."""
        spec = self._spec
        X, _ = as_vectors(X, "X", spec.vector_dim, convert=False)
        ids = as_ids(ids, "ids", n=X.shape[0])
        if not spec.trained:
            for start in range(0, X.shape[0], BUILD_CHUNK):
                stop = min(X.shape[0], start + BUILD_CHUNK)
                self._writer._append(checked_vector_rows(X[start:stop], spec.metric, spec.store_vectors,
                                                         first_row + start), ids[start:stop])
            self._count(ids)
            return
        # Encoded here with the collection's quantizer, whose tables are built once, not by the IndexWriter (its own
        # copy of the model would build them again for every segment: most of the cost of a one-row add). The writer
        # of an IVF segment takes each row's list with its code.
        for start in range(0, max(X.shape[0], 1), BUILD_CHUNK):  # once with zero rows: declares the ids section
            stop = min(X.shape[0], start + BUILD_CHUNK)
            lists, codes, norms, vectors = encode_step(spec.quantizer, X[start:stop], spec.norm_encoding,
                                                       spec.store_vectors, self._threads, first_row + start)
            self._writer._append(codes, norms, ids[start:stop], vectors, list_ids=lists)  # lists: None when flat
        self._count(ids)

    def _count(self, ids):
        if ids.size:
            low, high = int(ids.min()), int(ids.max())
            self.min_id = low if self.min_id is None else min(self.min_id, low)
            self.max_id = high if self.max_id is None else max(self.max_id, high)
        self.rows += ids.size

    def close(self):
        """Write the file (atomically, under its name); returns the PendingSegment."""
        if self.rows == 0:
            self.abort()
            raise ValueError("a segment needs at least one row")
        self._writer.close()
        return PendingSegment(self.path, self.rows, self.min_id, self.max_id)

    def abort(self):
        """Discard the segment: nothing is left under its name, even after close(). Idempotent."""
        self._writer.abort()
        _remove(self.path)


def write_pending_segment(folder, spec, X, ids, *, n_threads=None, _name=None):
    """Encode ``X`` with ``ids`` into a new pending segment of the collection folder ``folder``; returns its
    PendingSegment. For a distributed build: each worker calls this, the client commits them all at once."""
    with SegmentWriter(folder, spec, n_threads=n_threads, _name=_name) as writer:
        writer.add(X, ids)
        return writer.close()


def copy_live_rows(path, spec, views):
    """Write the segment file ``path`` (atomically) holding the live rows of ``views``, in their order, by copying
    codes, norm terms, ids and stored vectors COPY_ROWS rows at a time (no re-encoding; memory bounded by the step
    whatever the segments' sizes). Returns (rows, min_id, max_id).

    IVF segments: each row goes with its list (``Index._copy_rows`` of an IVFIndex); the IVF writer sorts the rows
    list after list (within a list in the order copied), through temporary files.
    """
    rows, low, high = 0, None, None
    if spec.trained:  # by reference to the collection's quantizer file, as every new segment
        writer = IndexWriter(path, spec.quantizer, norm_encoding=spec.norm_encoding, store_vectors=spec.store_vectors,
                             _model_ref=spec.model_ref)
    else:  # files of stored vectors (ExactIndex._copy_rows appends their vectors and ids)
        writer = VectorsWriter(path, spec.dim, spec.metric, spec.store_vectors)
    with writer:
        for view in views:
            live = view.live_mask()
            # Every section's CRC, checked step by step as the copy reads the rows (one pass over the file): a
            # damaged segment aborts the merge before its rows get a fresh checksum (docs/FORMAT.md C15).
            check = view.segment.copy_check()
            for start in range(0, view.segment.rows, COPY_ROWS):
                stop = min(view.segment.rows, start + COPY_ROWS)
                check.advance(stop, view.segment.rows)
                keep = None if live is None else live[start:stop]
                if keep is not None and not keep.any():
                    continue
                ids = view.index._copy_rows(writer, start, stop, keep)  # a segment stores its ids
                rows += ids.size
                low = int(ids.min()) if low is None else min(low, int(ids.min()))
                high = int(ids.max()) if high is None else max(high, int(ids.max()))
            check.finish()
        if rows == 0:
            writer.abort()
            return 0, None, None
        writer.close()
    return rows, low, high


def _remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
