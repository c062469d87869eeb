"""Building a collection on a Dask cluster: one task per partition writes one pending segment, the client commits
them all in one commit (docs/ARCHITECTURE.md, "Distributed builds and searches").

The client holds the collection's writer lock for the whole build. A task that fails (bad data, a missing file) fails
the build: the client sets the build's cancel event, waits until every task has ended (each checks the event between
chunks, so this takes at most one chunk), removes the pending files of the tasks that finished, and raises the
task's error; nothing was committed. A task whose worker dies is run again by Dask on another worker (its temporary
file is hidden and removed by the vacuum that follows the commit). A build that created the collection and fails
removes it again: the folder then holds nothing (or is gone); a build into an existing collection leaves it at its
previous generation.
"""

from __future__ import annotations

import os
import secrets

import dask
import distributed
import numpy as np

from .._index_rows import check_fitted_model
from ..collection.training import check_model, spec_with_dim
from .._validation import as_ids
from ..collection import create_collection, open_collection
from ..collection import names
from ..collection.manifest import MAX_ID
from ..paths import _as_str
from . import sources, tasks
from .cluster import connect

__all__ = ["build_collection"]


def build_collection(path, quantizer, source, *, ids=None, client=None, partition_rows=None, progress=None,
                     **collection_options):
    """ockstore.distributed.build_collection (its docstring says everything)."""
    folder = os.path.abspath(_as_str(path, "path"))
    existing = os.path.isdir(folder) and any(names.parse_manifest(n) is not None for n in os.listdir(folder))
    if not existing or quantizer is not None:
        quantizer = check_model(quantizer)
        if quantizer.is_fitted:
            quantizer = check_fitted_model(quantizer)
    if existing and collection_options:
        raise ValueError(f"{', '.join(sorted(collection_options))}: {folder!r} is already a collection, whose options "
                         "were fixed when it was created; leave them out to add to it")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a callable or None, got {type(progress).__name__}")
    with connect(client) as cl:
        src = sources.resolve(source, partition_rows, cl)
        if quantizer is not None and quantizer.is_fitted and src.dim != quantizer.dim:
            raise ValueError(f"source holds vectors of dimension {src.dim}, the quantizer expects {quantizer.dim}")
        if ids is not None:
            ids = as_ids(ids, "ids", n=src.rows)
            ordered = np.sort(ids)
            twice = ordered[1:] == ordered[:-1]
            if twice.any():
                raise ValueError(f"ids must be unique: id {int(ordered[1:][twice][0])} appears more than once")
        created_folder = not os.path.exists(folder)
        if existing:
            collection = open_collection(folder, "a")
        else:
            collection = create_collection(folder, quantizer, **collection_options)
        launched = False
        try:
            _check_against(collection, quantizer, src, ids)
            if src.rows:
                launched = True
                pending = _encode_all(cl, collection, src, ids, progress)
                collection.commit_segments(pending, operation="build", merge=False)
                collection.vacuum()  # temporary files of tasks whose worker died
        except BaseException:
            if existing and launched:
                try:  # files of tasks lost with their worker, or of a refused commit (every task has ended)
                    collection.vacuum()
                except Exception:  # noqa: BLE001 - best effort: the build's own error is the one to raise
                    pass
            collection.close()
            if not existing:
                _discard(folder, created_folder)
            raise
        collection.close()
    return open_collection(folder, "r")


def _check_against(collection, quantizer, src, ids):
    if quantizer is not None and (collection.quantizer != quantizer if quantizer.is_fitted else
                                  collection.quantizer.get_params() != quantizer.get_params()):
        raise ValueError(f"quantizer: the collection {collection.path!r} has another quantizer; pass None (or its own, "
                         "ockstore.load_quantizer of its quantizer.ockq) to add to it")
    if collection.dim is not None and src.dim != collection.dim:
        raise ValueError(f"source holds vectors of dimension {src.dim}, the collection {collection.path!r} "
                         f"{collection.dim}")
    if ids is None:
        if collection.next_id + src.rows - 1 > MAX_ID:
            raise ValueError(f"ids: no ids left to assign ({src.rows} needed from {collection.next_id})")
    elif len(collection):
        live = np.isin(ids, collection.ids())
        if live.any():
            raise ValueError(f"ids: id {int(ids[np.argmax(live)])} is already in the collection")


def _encode_all(cl, collection, src, ids, progress):
    """Run one task per partition; returns their PendingSegments in partition order. On any failure, no pending file
    of this build is left (see the module docstring) and the error is raised."""
    folder, first_id = collection.path, collection.next_id
    event_name = f"ockstore-build-{secrets.token_hex(8)}"
    event = distributed.Event(event_name, client=cl)
    spec = collection.segment_spec
    if not spec.trained and spec.dim is None:  # the first vectors of a collection that trains its quantizer
        spec = spec_with_dim(collection._snap, src.dim)[0]
    spec = dask.delayed(spec, pure=True)  # one copy in the graph, shipped once per worker
    blocks = src.blocks() if src.array is not None else [None] * len(src.partitions)
    encode = dask.delayed(tasks.encode_partition, pure=False)
    graphs = []
    for part in src.partitions:
        part_ids = None if ids is None else ids[part.first_row:part.first_row + part.rows]
        block = blocks[part.block] if src.array is not None else None
        graphs.append(encode(folder, spec, part, block, part_ids, first_id + part.first_row, event_name))
    futures = cl.compute(graphs)
    number = {f.key: i for i, f in enumerate(futures)}
    if progress is not None:
        progress(0, len(futures), 0, src.rows)
    pending = [None] * len(futures)
    error = None
    try:
        done = rows = 0
        for future in distributed.as_completed(futures):
            i = number[future.key]
            if future.status != "finished":
                error = _task_error(future, src.partitions[i])
                break
            pending[i] = future.result()
            # Released at once: were its worker to die now, Dask would run a task still wanted again, and write a
            # file nobody commits (perhaps after the vacuum that follows the commit).
            future.release()
            done += 1
            rows += src.partitions[i].rows
            if progress is not None:
                progress(done, len(futures), rows, src.rows)
    except BaseException:
        _abandon(cl, futures, event, pending)
        raise
    if error is not None:
        _abandon(cl, futures, event, pending)
        raise error
    event.clear()
    return pending


def _task_error(future, part):
    """The error to raise for a task that did not finish (its own exception, with its remote traceback)."""
    if future.status == "cancelled":
        return RuntimeError(f"{part.describe()}: the task was cancelled (was the cluster restarted, or the client "
                            "disconnected?); nothing was committed")
    try:
        future.result()
    except BaseException as exc:  # noqa: BLE001 - raised by the caller once the build is cleaned up
        return exc
    return RuntimeError(f"{part.describe()}: the task ended as {future.status!r}; nothing was committed")  # pragma: no cover


def _abandon(cl, futures, event, pending):
    """Stop a failed build: set its cancel event, wait until every task has ended (each checks the event between
    chunks), remove the pending files of the tasks that finished."""
    try:
        event.set()
        for i, future in enumerate(futures):
            if pending[i] is not None:
                continue  # released when its result came
            try:
                if future.exception() is None:  # waits until the task has ended
                    pending[i] = future.result()
            except Exception:  # noqa: BLE001 - cancelled (a restart), or the cluster is gone: nothing to wait for
                pass
    finally:
        cl.cancel(futures)
        for p in pending:
            if p is not None:
                try:
                    os.unlink(p.path)
                except FileNotFoundError:
                    pass
        try:
            event.clear()
        except Exception:  # noqa: BLE001 - best effort: the cluster may be gone
            pass


def _discard(folder, created_folder):
    """Remove a collection this build created (nothing was committed to it but its empty generation 0): its files,
    and the folder when the build created it."""
    for name in os.listdir(folder):
        if names.is_collection_file(name) or name in (names.QUANTIZER_NAME, names.LOCK_NAME):
            try:
                os.unlink(os.path.join(folder, name))
            except FileNotFoundError:
                pass
    if created_folder:
        try:
            os.rmdir(folder)
        except OSError:  # a file that is not the collection's appeared meanwhile: leave it
            pass
