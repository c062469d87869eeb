"""The sources of a distributed build and their partitions: a dask.array (its blocks of rows), a list of vector files
(each file, or row ranges of each), one vector file (row ranges); and ``sample``, a uniform random sample of the rows
for training (docs/ARCHITECTURE.md, "Distributed builds and searches").

A partition is one task of a build and one segment of the collection: rows ``first_row`` to ``first_row + rows - 1``
of the source (global row numbers, in source order: the files one after the other), read on a worker. Files are
counted (and gzip ones checked) by tasks on the cluster, so the client need not read them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from .. import vecfiles
from .._validation import check_int

__all__ = ["Partition", "Source", "resolve", "sample", "DEFAULT_PARTITION_ROWS"]

# Rows per partition of a file when partition_rows is None. A task streams its partition BUILD_CHUNK rows at a time,
# so its memory is bounded by the chunk whatever this is; the size sets the granularity instead: one segment per
# partition, the work redone when a worker dies, the balance between workers (2**18 rows of SIFT: 128 MiB of float32
# input, 2.3 MiB of 64-bit codes and norm bytes).
DEFAULT_PARTITION_ROWS = 1 << 18

_KINDS = "a dask.array of shape (N, P), a vector file (.fvecs, .bvecs, .ivecs, each optionally .gz, or .npy) or a " \
         "list of vector files"


@dataclass(frozen=True)
class Partition:
    """One task of a build: ``rows`` rows from global row ``first_row``; from the file ``path`` (rows ``start`` ...)
    or, when ``path`` is None, block ``block`` of a dask.array."""

    number: int
    first_row: int
    rows: int
    path: str | None = None
    start: int = 0
    block: int = 0

    def describe(self):
        where = f"rows {self.start}..{self.start + self.rows - 1} of {self.path}" if self.path is not None else \
            f"block {self.block} of the dask.array, rows {self.first_row}..{self.first_row + self.rows - 1}"
        return f"partition {self.number} ({where})"


@dataclass
class Source:
    """A source resolved: N rows of P components, cut into partitions. ``array`` (rechunked to whole rows) for a
    dask.array, ``files`` ((path, rows) pairs, in order) for files."""

    rows: int
    dim: int
    partitions: list
    array: object = None
    files: tuple = ()

    def blocks(self):
        """The dask.array's blocks as Delayed objects, in row order (one per row chunk)."""
        return list(self.array.to_delayed().ravel())


def _is_dask_array(source):
    try:
        import dask.array as da
    except ImportError:  # pragma: no cover - the package needs dask
        return False
    return isinstance(source, da.Array)


def _paths(source):
    """The file paths of a file source (str), and whether it was one file; TypeError for anything else."""
    if isinstance(source, (str, os.PathLike)):
        paths, single = [source], True
    elif isinstance(source, (list, tuple)) and all(isinstance(p, (str, os.PathLike)) for p in source):
        paths, single = list(source), False
        if not paths:
            raise ValueError("source: the list of vector files is empty")
    else:
        raise TypeError(f"source must be {_KINDS}, got {type(source).__name__}")
    out = []
    for p in paths:
        p = os.fspath(p)
        if isinstance(p, bytes):
            raise TypeError(f"source: file paths must be str or os.PathLike of str, got bytes {p!r}")
        kind, _gz = vecfiles._file_kind(p, "source")
        if kind == "hdf5":
            raise ValueError(f"source: {p!r} is an HDF5 file; give a dask.array over its dataset instead "
                             "(dask.array.from_array(h5py_file['train'], chunks=(rows, -1)))")
        out.append(os.path.abspath(p))
    return out, single


def _count(paths, client):
    """(rows, dim) of each file: on the cluster when there is one (a gzip file is decompressed to be counted)."""
    if client is None:
        return [vecfiles.count_vecs(p) for p in paths]
    futures = client.map(vecfiles.count_vecs, paths, pure=False)
    return client.gather(futures)


def _ranges(total, step):
    return [(start, min(total, start + step)) for start in range(0, total, step)]


def resolve(source, partition_rows=None, client=None):
    """The Source of ``source`` cut into partitions of at most ``partition_rows`` rows (see build_collection)."""
    if partition_rows is not None:
        partition_rows = check_int(partition_rows, "partition_rows", min_value=1)
    if _is_dask_array(source):
        return _resolve_array(source, partition_rows)
    paths, single = _paths(source)
    counts = _count(paths, client)
    dims = {d for n, d in counts}
    if len(dims) > 1:
        first = counts[0][1]
        bad = next(i for i, (_n, d) in enumerate(counts) if d != first)
        raise ValueError(f"source: {paths[bad]} holds vectors of dimension {counts[bad][1]}, {paths[0]} of {first}")
    step = partition_rows if partition_rows is not None else DEFAULT_PARTITION_ROWS
    partitions, first_row = [], 0
    for path, (n, _d) in zip(paths, counts):
        ranges = _ranges(n, step) if (single or partition_rows is not None) else ([(0, n)] if n else [])
        for start, stop in ranges:
            partitions.append(Partition(len(partitions), first_row + start, stop - start, path, start))
        first_row += n
    return Source(first_row, counts[0][1], partitions, files=tuple((p, n) for p, (n, _d) in zip(paths, counts)))


def _resolve_array(array, partition_rows):
    if array.ndim != 2:
        raise ValueError(f"source must have shape (N, P), got a dask.array of shape {array.shape}")
    if array.dtype.kind not in "iuf":
        raise TypeError(f"source must hold real numbers, got a dask.array of dtype {array.dtype}")
    if any(np.isnan(c) for c in array.chunks[0]):
        raise ValueError("source: the dask.array's row chunks are unknown (NaN); call compute_chunk_sizes() first")
    chunks = {1: -1} if partition_rows is None else {0: partition_rows, 1: -1}
    if partition_rows is not None or len(array.chunks[1]) > 1:
        array = array.rechunk(chunks)
    partitions, first_row = [], 0
    for block, n in enumerate(array.chunks[0]):
        if n:
            partitions.append(Partition(len(partitions), first_row, int(n), block=block))
        first_row += int(n)
    return Source(int(array.shape[0]), int(array.shape[1]), partitions, array=array)


def sample(source, n=100_000, seed=0, *, client=None):
    """A uniform random sample of ``n`` rows of ``source`` (without replacement, across all its partitions), for
    training a quantizer; see ockstore.distributed.sample."""
    n = check_int(n, "n", min_value=1)
    seed = check_int(seed, "seed", min_value=0)
    src = resolve(source, None, client)
    if src.rows == 0:
        raise ValueError("source holds no rows: nothing to sample")
    rows = np.sort(np.random.default_rng(seed).choice(src.rows, size=min(n, src.rows), replace=False))
    if src.array is not None:
        picked = src.array[rows]
        X = (client.compute(picked).result() if client is not None else picked.compute())
    else:
        offsets = np.cumsum([0] + [count for _p, count in src.files])
        wanted = []
        for (path, count), low in zip(src.files, offsets):
            hit = rows[(rows >= low) & (rows < low + count)] - low
            if hit.size:
                wanted.append((path, hit))
        if client is None:
            parts = [vecfiles.read_rows(path, hit) for path, hit in wanted]
        else:
            parts = client.gather([client.submit(vecfiles.read_rows, path, hit, pure=False) for path, hit in wanted])
        X = np.concatenate(parts)
    return np.ascontiguousarray(X, dtype=np.float32)
