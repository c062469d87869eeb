"""What runs on the workers: encoding one partition into a pending segment, and searching a share of a collection's
segments with the per-worker cache of opened shares (docs/ARCHITECTURE.md, "Distributed builds and searches").

Every function here is called by Dask in a worker process (or a thread of one) with arguments the client checked.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from .. import vecfiles
from .._index_rows import BUILD_CHUNK
from .._validation import rows_beyond_limits
from ..collection import SegmentWriter
from ..collection.snapshot import open_generation
from .cluster import worker_threads

__all__ = ["BuildCancelled", "encode_partition", "search_share", "fetch_vectors", "clear_cache", "MAX_SHARES"]


class BuildCancelled(Exception):
    """Raised by a task that saw its build cancelled (another partition failed): it stopped without leaving a file."""


# ================================================================================================================
# build


def _is_cancelled(event_name):
    if event_name is None:
        return lambda: False
    import distributed

    return distributed.Event(event_name).is_set  # the scheduler's event of this build (one RPC per check)


def _chunks(part, block):
    if part.path is None:
        for start in range(0, block.shape[0], BUILD_CHUNK):
            yield block[start:start + BUILD_CHUNK]
    else:
        yield from vecfiles.iter_vecs(part.path, chunk_size=BUILD_CHUNK, start=part.start,
                                      stop=part.start + part.rows)


def _located(exc, where):
    """``exc`` with ``where`` (the partition) before its message, when its class takes a plain message."""
    if type(exc).__init__ in (ValueError.__init__, TypeError.__init__, OSError.__init__, Exception.__init__):
        try:
            located = type(exc)(f"{where}: {exc}")
        except Exception:  # pragma: no cover - a class whose constructor wants something else
            return exc
        return located
    return exc


def encode_partition(folder, spec, part, block, ids, first_id, event_name):
    """Encode the rows of partition ``part`` (the ndarray ``block`` for a dask.array, else read from its file in
    chunks: memory bounded by BUILD_CHUNK rows) into a new pending segment of ``folder`` with ``spec``; returns the
    PendingSegment. Ids: ``ids`` (int64, one per row) or ``first_id``, ``first_id + 1``... Stops (BuildCancelled)
    between chunks once the event ``event_name`` is set. Any error leaves no file (the writer aborts); a killed
    worker may leave a hidden temporary file, removed by the client's vacuum."""
    cancelled = _is_cancelled(event_name)
    where = part.describe()
    if cancelled():
        raise BuildCancelled(f"{where}: not started, the build was cancelled")
    done = 0
    try:
        with SegmentWriter(folder, spec, n_threads=1) as writer:
            for X in _chunks(part, block):
                n = X.shape[0]
                if done + n > part.rows:
                    raise ValueError(f"more than the {part.rows} rows counted (did the file change?)")
                chunk_ids = np.arange(first_id + done, first_id + done + n, dtype=np.int64) if ids is None \
                    else ids[done:done + n]
                first = (part.start if part.path is not None else part.first_row) + done  # as part.describe() counts
                try:
                    writer._add(X, chunk_ids, first_row=first)  # a refused row named by its row in the source
                except (ValueError, TypeError) as exc:
                    bad = rows_beyond_limits(X) if isinstance(exc, ValueError) else None
                    row = "" if bad is None else f" (first at row {first + int(np.argmax(bad))})"
                    raise type(exc)(f"rows {first}..{first + n - 1}: {exc}{row}") from exc
                done += n
                if cancelled():
                    raise BuildCancelled(f"{where}: stopped, the build was cancelled")
            if done != part.rows:
                raise ValueError(f"{done} rows, not the {part.rows} counted (did the file change?)")
            return writer.close()
    except BuildCancelled:
        raise
    except (ValueError, TypeError, OSError) as exc:
        located = _located(exc, where)
        if located is exc:
            raise
        raise located from exc


# ================================================================================================================
# search

# Shares of collections a worker keeps open (least recently used dropped first), each its segments memory-mapped
# once: a search of the same share of the same generation reuses them. A share of a newer generation of a folder
# replaces the older ones (the segments both hold are reused, not reopened).
MAX_SHARES = 8

_LOCK = threading.Lock()
_SHARES = OrderedDict()  # (folder, generation, files) -> Snapshot of the share
_OPENED = {}  # folder -> the open_generation cache of the folder's latest share (segments reused across generations)


def _share(folder, generation, files):
    key = (folder, generation, files)
    with _LOCK:
        snap = _SHARES.get(key)
        if snap is not None:
            _SHARES.move_to_end(key)
            return snap
        snap = open_generation(folder, generation, files=files, cache=_OPENED.setdefault(folder, {}))
        found = {view.entry.file for view in snap.views}
        if found != set(files):
            missing = sorted(set(files) - found)
            raise FileNotFoundError(f"{folder}: generation {generation} has no segment {missing[0]!r}")
        for old in [k for k in _SHARES if k[0] == folder and k[1] < generation]:
            del _SHARES[old]  # a search still running on it keeps its own reference: nothing is closed under it
        _SHARES[key] = snap
        while len(_SHARES) > MAX_SHARES:
            _SHARES.popitem(last=False)
        for gone in set(_OPENED) - {k[0] for k in _SHARES}:
            del _OPENED[gone]  # no share of that folder left
        return snap


def clear_cache():
    """Forget every share this worker holds (their files are closed when no search uses them any more)."""
    with _LOCK:
        _SHARES.clear()
        _OPENED.clear()


def search_share(folder, generation, files, Q, k, options):
    """The k best results of the queries ``Q`` (checked float32) over the segments ``files`` of one generation:
    Collection.search over that share with no re-ranking (``options``: n_probe, distance, allow, n_threads --
    None means the worker's threads -- and by_bound: the candidates of a search the client re-ranks)."""
    snap = _share(folder, generation, files)
    options = dict(options)
    if options.get("n_threads") is None:
        options["n_threads"] = worker_threads()
    if options.pop("by_bound", False):  # the client re-ranks them: candidates as Collection.search ranks them
        return snap.search_candidates(Q, k, **options)
    return snap.search(Q, k, rerank=0, **options)


def fetch_vectors(folder, generation, files, ids):
    """The stored vectors of ``ids`` (sorted unique int64, each live in the share), shape (len(ids), P), for the
    exact re-ranking done by the client."""
    snap = _share(folder, generation, files)
    out = np.empty((ids.size, snap.spec.quantizer.dim), dtype=snap.views[0].index.vectors.dtype)
    found = np.zeros(ids.size, dtype=bool)
    for view in snap.views:
        hit, rows = view.find_live(ids)
        if rows.size:
            order = np.argsort(rows)  # read the mapped rows in increasing order
            out[np.flatnonzero(hit)[order]] = view.index.vectors[rows[order]]
            found |= hit
    if not found.all():
        raise ValueError(f"{folder}: id {int(ids[np.argmin(found)])} is not live in generation {generation}'s share")
    return out
