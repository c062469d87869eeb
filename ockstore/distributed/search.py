"""Searching a collection on a Dask cluster: its segments are assigned to the workers, each searches its share and
returns per-query top-k, the client merges them exactly (docs/ARCHITECTURE.md, "Distributed builds and searches").

The client opens the collection (read-only) to fix the generation searched and to check every argument exactly as
``Collection.search`` does (``Snapshot.search_options``, the one check of a search), before any task runs. Shares
are assigned by rows, largest segment first to the least loaded worker, the same way for the same workers and
generation: each worker finds its share already open in its cache (tasks.MAX_SHARES) on the next call. With
``rerank=R`` the workers return their best R candidates by code; the client merges the best R of the collection,
fetches their stored vectors from the workers that hold them (or reads them from ``vectors``, indexed by id) and
re-ranks them with the same function as ``Collection.search`` (``_rerank.rerank``): the results are equal, bit for
bit.
"""

from __future__ import annotations

import os

import numpy as np

from ..search import rerank as _rerank
from .._validation import as_vectors
from ..collection import merge_topk, open_collection
from ..collection.snapshot import by_unique_ids, vectors_by_id
from ..paths import _as_str
from . import tasks
from .cluster import connect, workers_of

__all__ = ["search_collection", "assign"]

# Bytes of queries sent inline with each task; larger query sets are scattered to the cluster once.
INLINE_QUERY_BYTES = 1 << 20

# Re-ranking gathers the candidates' stored vectors for this many bytes of them at a time (bounds the client's memory).
RERANK_GATHER_BYTES = 64 << 20

# Attempts when the generation searched disappears meanwhile (a writer committed twice and removed it).
ATTEMPTS = 3


def assign(segments, workers):
    """{worker: (file, ...)}: the segments ((file, live rows), in manifest order) shared among ``workers`` (sorted
    addresses) by rows, the largest segment first to the least loaded worker (ties: the first worker); each share
    lists its files in manifest order. Workers left without a segment are not in the result."""
    load = [0] * len(workers)
    share = [[] for _ in workers]
    for position, (file, rows) in sorted(enumerate(segments), key=lambda s: (-s[1][1], s[0])):
        w = min(range(len(workers)), key=lambda i: (load[i], i))
        load[w] += rows
        share[w].append((position, file))
    return {workers[w]: tuple(file for _p, file in sorted(share[w])) for w in range(len(workers)) if share[w]}


def search_collection(path, Q, k, *, client=None, **search_options):
    """ockstore.distributed.search_collection (its docstring says everything)."""
    folder = os.path.abspath(_as_str(path, "path"))
    with open_collection(folder, "r") as collection:
        Qv, was_1d = as_vectors(Q, "Q", collection.dim)
        opts = collection._snap.search_options(k, **search_options)  # every check of Collection.search
        if Qv.shape[0] == 0 or not collection.info()["segments"]:
            D, I = collection.search(Qv, k, **search_options)  # nothing to fan out: empty or padding results
        else:
            with connect(client) as cl:
                for attempt in range(ATTEMPTS):
                    try:
                        D, I = _fan_out(cl, collection, Qv, opts)
                        break
                    except FileNotFoundError as exc:
                        generation = collection.generation
                        if attempt + 1 == ATTEMPTS or collection.refresh() == generation:
                            raise FileNotFoundError(
                                f"{folder}: a worker could not open generation {generation} ({exc}); is the folder on "
                                "a filesystem every worker sees?") from exc
    return (D[0], I[0]) if was_1d else (D, I)


def _fan_out(cl, collection, Q, opts):
    """The search of the checked ``opts`` (SearchOptions) on the workers: each its share's top opts.width, merged."""
    info = collection.info()
    folder, generation = collection.path, info["generation"]
    segments = [(s["file"], s["rows"] - s["deleted"]) for s in info["segment_files"]]
    shares = list(assign(segments, workers_of(cl)).items())
    # what the workers' Snapshot.search takes (the client re-ranks): allow as checked (sorted unique ids), n_probe
    # as resolved, n_threads None for the worker's own threads
    # (no re-ranking there: the workers return candidates by code -- by bound when they will be re-ranked, as
    # Collection.search ranks them --; the collection's default re-ranking, like any other, happens here)
    options = {"n_probe": opts.n_probe, "distance": opts.distance, "allow": opts.allow, "n_threads": opts.n_threads,
               "by_bound": opts.by_bound}
    queries = Q if Q.nbytes <= INLINE_QUERY_BYTES else cl.scatter(Q, broadcast=True, hash=False)
    futures = [cl.submit(tasks.search_share, folder, generation, files, queries, opts.width, options,
                         workers=[worker], allow_other_workers=True, pure=False) for worker, files in shares]
    results = cl.gather(futures)
    D, I, part = merge_topk(results, opts.width, descending=collection.metric != "l2", n_queries=Q.shape[0],
                            return_part=True)
    if opts.rerank is None:
        return D, I
    return _rerank_fetched(cl, collection, folder, generation, shares, Q, I, part, opts.vectors, opts.k)


class _ById:
    """Vectors gathered from the workers, indexed by id as ``Collection.search(vectors=...)`` reads them."""

    def __init__(self, ids, data):
        self.ids, self.data = ids, data
        self.shape = (int(ids[-1]) + 1 if ids.size else 0, data.shape[1])
        self.dtype = data.dtype

    def __getitem__(self, wanted):
        return self.data[np.searchsorted(self.ids, wanted)]


def _rerank_fetched(cl, collection, folder, generation, shares, Q, I, part, vectors, k):
    """The best k of the merged candidates ``I`` by exact distance, as Collection.search(rerank=...) computes them
    (``_rerank.rerank``), their vectors fetched from the workers (or read from ``vectors`` by id) RERANK_GATHER_BYTES
    at a time."""
    snapshot = collection._snap  # the generation searched
    Qp = snapshot.spec.quantizer._prepare(Q, "Q")  # what the search scans with: unit rows for cosine
    metric = snapshot.spec.quantizer.metric
    sq8_ranges = snapshot.spec.quantizer.value_ranges if snapshot.spec.store_vectors == "sq8" else None
    nq, R = I.shape
    D_out = np.empty((nq, k), dtype=np.float32)
    I_out = np.empty((nq, k), dtype=np.int64)
    step = max(1, RERANK_GATHER_BYTES // (4 * R * Q.shape[1]))
    for start in range(0, nq, step):
        stop = min(nq, start + step)
        block = vectors
        if vectors is None:  # the stored vectors of this block's candidates, from the workers that hold them
            futures, held = [], []
            for p, (worker, files) in enumerate(shares):
                ids = np.unique(I[start:stop][part[start:stop] == p])
                if ids.size:
                    futures.append(cl.submit(tasks.fetch_vectors, folder, generation, files, ids, workers=[worker],
                                             allow_other_workers=True, pure=False))
                    held.append(ids)
            data = cl.gather(futures)
            if held:
                ids = np.concatenate(held)
                order = np.argsort(ids)
                block = _ById(ids[order], np.concatenate(data)[order])
            else:
                block = _ById(np.empty(0, dtype=np.int64), np.empty((0, Q.shape[1]), dtype=np.float32))

        if sq8_ranges is not None and vectors is None:
            def fetch(ids, block=block):  # sq8 codes as the workers store them: re-ranked as stored (lo + step code)
                return block.data[np.searchsorted(block.ids, ids)], ids
        else:
            def fetch(ids, block=block):
                return by_unique_ids(lambda unique: vectors_by_id(block, unique), ids), ids

        D_out[start:stop], I_out[start:stop] = _rerank.rerank(
            Qp[start:stop], I[start:stop], fetch, metric, k,
            sq8_ranges=sq8_ranges if vectors is None else None)
    return D_out, I_out
