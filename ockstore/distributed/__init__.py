"""Beyond one machine: build and search collections on a Dask cluster (docs/ARCHITECTURE.md, "Distributed builds and
searches"; docs/scale.md for the costs at the scale of SIFT1B).

Needs Dask (``pip install 'ockstore[dask]'``); ``import ockstore`` never imports it. Dask is the engine: it places
tasks on workers, moves data, runs a task again when its worker dies. ockstore adds what makes the result correct: a
build is one task per partition of the source, each writing one pending segment into the collection folder (a path
every worker and the client see: a shared or a local filesystem), and the client commits them all in ONE commit, so
the result is an ordinary collection (``ockstore.open_collection``) whose segments are byte-identical to a
single-process build of the same partitions with the same quantizer; a search assigns the segments to the workers and
merges their top-k exactly (ties by id), so it returns what ``Collection.search`` returns.

    X = sample(source, n=100_000, seed=0)       # train on it in one process: q = ockstore.OCKM(...).fit(X)
    c = build_collection(path, q, source)       # one task per partition, one commit
    D, I = search_collection(path, Q, k)        # fan-out over the workers, exact merge

``client``: a ``distributed.Client``, a scheduler address ("tcp://host:8786"), or None for an embedded LocalCluster
(processes, one thread each, as many as cores) started for the call and closed after it.

    cluster.py   the client of a call (given, by address, or embedded)
    sources.py   sources and their partitions (dask.array blocks, files, row ranges of files); sample
    tasks.py     what runs on the workers: encoding a partition, searching a share (with the per-worker cache)
    build.py     build_collection: tasks, cancellation, one commit
    search.py    search_collection: shares, fan-out, exact merge, re-ranking
"""

from __future__ import annotations

try:
    import dask  # noqa: F401
    import distributed  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised by hand without dask
    raise ImportError(f"ockstore.distributed needs Dask: pip install 'ockstore[dask]' ({exc})") from exc

from . import build as _build
from . import search as _search
from . import sources as _sources
from .sources import DEFAULT_PARTITION_ROWS

__all__ = ["sample", "build_collection", "search_collection", "DEFAULT_PARTITION_ROWS"]


def sample(source, n=100_000, seed=0, *, client=None):
    """A uniform random sample of the rows of ``source``, for training a quantizer.

    Parameters
    ----------
    source : dask.array of shape (N, P), a vector file, or a list of vector files
        As for :func:`build_collection`.
    n : int >= 1
        Rows wanted; all N rows (in order) when n >= N.
    seed : int >= 0
        The same seed and N give the same rows, however the source is partitioned.
    client : distributed.Client, scheduler address, or None
        Where files are counted and read (and the dask.array computed). None: in this process (dask.array: dask's
        current scheduler).

    Returns
    -------
    X : ndarray of shape (min(n, N), P), float32
        min(n, N) distinct rows drawn uniformly (without replacement) from all N, in increasing row order. Files are
        read at those rows only (uncompressed ones memory-mapped; gzip ones decompressed up to the last row wanted).
    """
    return _sources.sample(source, n, seed, client=client)


def build_collection(path, quantizer, source, *, ids=None, client=None, partition_rows=None, progress=None,
                     **collection_options):
    """Encode ``source`` on a Dask cluster into the collection folder ``path``, in one commit.

    Parameters
    ----------
    path : str or os.PathLike
        A folder every worker sees at the same path. When it does not exist (or is empty) the collection is created
        (``ockstore.create_collection(path, quantizer, **collection_options)``); when it is a collection the vectors
        are added to it (its quantizer, ids continuing after its ``next_id``).
    quantizer : PQ, CKM, ECKM, OCKM or IVF (any model a collection accepts; an IVF gives inverted-file
        segments, searched with ``n_probe``), or None to add to an existing
        collection with its own quantizer. Shipped to every worker once. An unfitted one makes a collection that
        trains it itself (``store_vectors`` required): the workers write stored vectors, and the commit trains the
        quantizer when the rows reach ``train_size``, on the client (a sample of at most 131,072 rows in memory).
    source : dask.array of shape (N, P), a vector file, or a list of vector files
        Files: ``.fvecs``, ``.bvecs``, ``.ivecs`` (each optionally ``.gz``) or ``.npy``, at paths every worker sees.
        Partitions (one task and one segment each): a dask.array's blocks of rows (rechunked to ``partition_rows``
        rows when given); each file of a list (split into ranges of ``partition_rows`` rows when given); one file,
        split into ranges of ``partition_rows`` rows (default DEFAULT_PARTITION_ROWS). A task reads its rows 65,536
        at a time (a dask.array block is in memory whole), so memory is bounded whatever the partition size; a gzip
        file is decompressed from its start by every range of it (prefer uncompressed files, or one file per
        partition). Files are counted first, by tasks (a gzip file is decompressed once to be counted).
    ids : array-like of shape (N,), integers >= 0, unique, not live in the collection; or None
        None: the global row numbers (files one after the other), plus the collection's ``next_id`` (0 for a new
        collection).
    client : distributed.Client, scheduler address (str), or None
        None: an embedded LocalCluster (processes, one thread each, as many as cores), closed after the build.
    partition_rows : int >= 1 or None
    progress : callable or None
        Called on the client when the tasks start and as each finishes: ``progress(tasks_done, tasks_total,
        rows_done, rows_total)``.
    **collection_options
        ``norm_encoding``, ``store_vectors``, ``metadata``, ``merge_factor``, ``train_size`` of a new collection
        (ValueError for an existing one).

    Returns
    -------
    Collection, opened read-only (mode "r") at the generation the build committed.

    Each task encodes one partition on one thread into a hidden pending segment (``.pending.<hex>.ock``); when every
    task succeeded, the client commits them in one commit (segments in partition order, no merge). A task whose worker
    dies is run again by Dask; a task that raises (bad data: NaN, wrong dimension, a corrupt file) fails the build
    with that error, naming the partition: the other tasks stop, their pending files are removed, nothing is
    committed, and the folder holds the previous generation (or nothing: a collection the build created is removed).
    The client holds the collection's writer lock throughout. Encoding runs one thread per task: the parallelism is
    the cluster's (threads x workers).
    """
    return _build.build_collection(path, quantizer, source, ids=ids, client=client, partition_rows=partition_rows,
                                   progress=progress, **collection_options)


def search_collection(path, Q, k, *, client=None, **search_options):
    """Search the collection ``path`` on a Dask cluster; equal to ``ockstore.open_collection(path).search(Q, k,
    **search_options)`` (same distances, same ids, same order; ties by the smaller id).

    Parameters
    ----------
    path : str or os.PathLike
        A collection folder every worker sees at the same path. Its newest generation is searched.
    Q, k, **search_options
        As for :meth:`ockstore.Collection.search` (``distance``, ``rerank``, ``vectors``, ``allow``, ``n_threads``,
        and the segments' own options such as ``n_probe``), checked on the client before any task runs.
        ``n_threads`` is per worker (None: the worker's threads).
    client : distributed.Client, scheduler address (str), or None
        None: an embedded LocalCluster, closed after the search.

    Returns
    -------
    D, I : as for ``Collection.search``.

    The segments are assigned to the workers by rows (the largest first to the least loaded), the same way for the
    same workers and generation; each worker memory-maps its share once and keeps it open across calls (at most
    ``tasks.MAX_SHARES`` shares per worker, the older generations of a folder dropped), so only the first search of a
    generation pays for opening it. Each returns its top-k per query; the client merges them exactly. With ``rerank``
    the client re-ranks the merged candidates with the vectors the workers fetch for it.
    """
    return _search.search_collection(path, Q, k, client=client, **search_options)
