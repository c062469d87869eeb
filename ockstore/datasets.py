"""Vector files and benchmark datasets: texmex ``.fvecs/.bvecs/.ivecs`` (optionally ``.gz``), ``.npy`` and
ann-benchmarks ``.hdf5``; chunked iteration with bounded memory; exact k-NN ground truth; a seeded synthetic set.

The texmex layout (http://corpus-texmex.irisa.fr/) stores every vector as one record: a little-endian int32
dimension ``d`` followed by ``d`` components (float32 for ``.fvecs``, uint8 for ``.bvecs``, int32 for ``.ivecs``).
Every record of a file must carry the same ``d``. A file that breaks a rule raises :class:`~ockstore.errors.FormatError`
whose message names the file and the byte offset of the offending record; for ``.gz`` files that offset counts bytes
of the *uncompressed* stream.

Datasets follow the small interface of Faiss's ``contrib.datasets``: ``learn``, ``base``, ``query`` and
``groundtruth`` arrays (loaded on first use), ``iter_base(chunk_size)`` to stream the base, ``dim`` and ``name``.
"""

from __future__ import annotations

import gzip
import os
import re
import tempfile
import zlib

import numpy as np

from ._validation import as_vectors, check_int, check_output_path, check_regular_file
from .errors import FormatError

__all__ = [
    "read_vecs",
    "iter_vecs",
    "write_vecs",
    "count_vecs",
    "exact_knn",
    "Dataset",
    "load_texmex",
    "load_hdf5",
    "synthetic",
]

# Component dtype of each texmex extension (the dimension prefix is always little-endian int32).
_TEXMEX_DTYPES = {"fvecs": np.dtype("<f4"), "bvecs": np.dtype("u1"), "ivecs": np.dtype("<i4")}

# A dimension prefix above this is taken as a sign that the file is not a texmex file at all (e.g. the first four
# bytes of a gzip or .npy header read as an int32): no real descriptor has a million components.
MAX_DIM = 1 << 20

# Upper bound on the bytes read from a gzip stream or copied out of a memory map in one step. Bounds the working
# buffer independently of the dimension, and small enough to stay friendly to the page cache of a shared machine.
_BLOCK_BYTES = 8 << 20

# exact_knn keeps a (queries × (k + base block)) float64 distance block: about 32 MB at this many elements.
_KNN_BLOCK_ELEMS = 1 << 22
_KNN_BASE_BLOCK = 16384

_SUPPORTED = ".fvecs, .bvecs, .ivecs (each optionally .gz) or .npy"


# --------------------------------------------------------------------------------------------------------------------
# file kinds


def _file_kind(path, name="path"):
    """Return ``(kind, gz)`` for a path by its extension: kind is 'fvecs', 'bvecs', 'ivecs', 'npy' or 'hdf5'."""
    low = os.path.basename(path).lower()
    gz = low.endswith(".gz")
    stem = low[:-3] if gz else low
    ext = stem.rsplit(".", 1)[-1] if "." in stem else ""
    if ext in _TEXMEX_DTYPES:
        return ext, gz
    if ext == "npy" and not gz:
        return "npy", False
    if ext in ("hdf5", "h5") and not gz:
        return "hdf5", False
    raise ValueError(f"{name}: unsupported file type {path!r}; expected {_SUPPORTED}")


def _texmex_kind(path, name="path"):
    kind, gz = _file_kind(path, name)
    if kind == "hdf5":
        raise ValueError(f"{name}: {path!r} is an ann-benchmarks HDF5 file; open it with load_hdf5()")
    return kind, gz


def _record_dtype(kind, d):
    """One texmex record: int32 dimension then ``d`` components, packed (no padding)."""
    return np.dtype([("dim", "<i4"), ("v", _TEXMEX_DTYPES[kind], (d,))])


def _native(kind):
    """The dtype arrays are returned in: the component dtype in native byte order."""
    return _TEXMEX_DTYPES[kind].newbyteorder("=")


def _where(offset, gz):
    return f"byte offset {offset}" + (" of the uncompressed stream" if gz else "")


def _check_dim(path, d, gz):
    if d <= 0 or d > MAX_DIM:
        raise FormatError(
            f"{path}: invalid dimension prefix {d} at {_where(0, gz)} (expected 1..{MAX_DIM}); "
            "is this a texmex .fvecs/.bvecs/.ivecs file?"
        )


def _check_prefixes(path, dims, d, first_offset, record_size, gz):
    """Every record's prefix must equal the first one; ``first_offset`` is the byte offset of ``dims[0]``'s record."""
    bad = np.flatnonzero(dims != d)
    if bad.size:
        i = int(bad[0])
        offset = first_offset + i * record_size
        raise FormatError(
            f"{path}: record {offset // record_size} at {_where(offset, gz)} has dimension prefix {int(dims[i])}, "
            f"expected {d} like the first record"
        )


# --------------------------------------------------------------------------------------------------------------------
# uncompressed texmex: memory map with a structured dtype


def _texmex_header(path, kind):
    """Check an uncompressed texmex file's size and first prefix; return ``(d, n)``. Reads 4 bytes."""
    size = os.path.getsize(path)
    if size == 0:
        raise FormatError(f"{path}: empty file (byte offset 0): a texmex file holds at least one record")
    with open(path, "rb") as f:
        head = f.read(4)
    if len(head) < 4:
        raise FormatError(f"{path}: truncated record at byte offset 0: {size} bytes, less than a dimension prefix")
    d = int.from_bytes(head, "little", signed=True)
    _check_dim(path, d, False)
    record_size = _record_dtype(kind, d).itemsize
    n, rem = divmod(size, record_size)
    if rem:
        raise FormatError(
            f"{path}: file size {size} is not a whole number of {record_size}-byte records (dimension {d}): "
            f"truncated record at byte offset {n * record_size} ({rem} of {record_size} bytes)"
        )
    return d, n


def _mmap_records(path, kind, d, n):
    return np.memmap(path, dtype=_record_dtype(kind, d), mode="r", shape=(n,))


def _copy_checked(path, recs, out, start, d, gz=False):
    """Check the prefixes of ``recs`` (records ``start``… of the file) and copy their components to ``out``."""
    record_size = recs.dtype.itemsize
    _check_prefixes(path, recs["dim"], d, start * record_size, record_size, gz)
    out[...] = recs["v"]


def _read_texmex_plain(path, kind):
    d, n = _texmex_header(path, kind)
    mm = _mmap_records(path, kind, d, n)
    out = np.empty((n, d), dtype=_native(kind))
    step = max(1, _BLOCK_BYTES // mm.dtype.itemsize)
    for i in range(0, n, step):
        _copy_checked(path, mm[i : i + step], out[i : i + step], i, d)
    del mm
    return out


def _iter_texmex_plain(path, kind, d, n, chunk_size):
    mm = _mmap_records(path, kind, d, n)
    try:
        for i in range(0, n, chunk_size):
            recs = mm[i : i + chunk_size]
            out = np.empty((len(recs), d), dtype=_native(kind))
            _copy_checked(path, recs, out, i, d)
            yield out
    finally:
        del mm


# --------------------------------------------------------------------------------------------------------------------
# gzip-compressed texmex: streamed with readinto


def _readinto_full(f, view, stream_offset, path):
    """Fill ``view`` from ``f`` until it is full or the stream ends; return the byte count.

    Decompression errors become FormatError at the uncompressed offset reached (``stream_offset`` is the offset of
    ``view[0]`` in the uncompressed stream).
    """
    pos = 0
    total = len(view)
    while pos < total:
        try:
            got = f.readinto(view[pos:])
        except EOFError:
            raise FormatError(
                f"{path}: truncated gzip stream: compressed data ends before the end-of-stream marker "
                f"(after {_where(stream_offset + pos, True)})"
            ) from None
        except (gzip.BadGzipFile, zlib.error) as exc:
            raise FormatError(
                f"{path}: corrupt gzip stream near {_where(stream_offset + pos, True)}: {exc}"
            ) from None
        if not got:
            break
        pos += got
    return pos


def _gz_blocks(path, kind, max_rows=None):
    """Yield ``(d, recs, first_row)``: checked records of a gzip texmex file, in blocks of at most ``_BLOCK_BYTES``
    (and at most ``max_rows`` records; at least one record whatever the dimension).

    ``recs`` is a structured view into a buffer reused for the next block: the consumer copies what it keeps.
    """
    with gzip.open(path, "rb") as f:
        head = bytearray(4)
        got = _readinto_full(f, memoryview(head), 0, path)
        if got == 0:
            raise FormatError(f"{path}: empty file (byte offset 0 of the uncompressed stream)")
        if got < 4:
            raise FormatError(f"{path}: truncated record at {_where(0, True)}: {got} bytes, less than a prefix")
        d = int.from_bytes(head, "little", signed=True)
        _check_dim(path, d, True)
        rec = _record_dtype(kind, d)
        record_size = rec.itemsize
        per_block = max(1, _BLOCK_BYTES // record_size)
        if max_rows is not None:
            per_block = min(per_block, max_rows)
        raw = np.empty(per_block * record_size, dtype=np.uint8)
        raw[:4] = np.frombuffer(head, dtype=np.uint8)
        filled = 4
        offset = 0  # uncompressed offset of raw[0]
        while True:
            filled += _readinto_full(f, memoryview(raw)[filled:], offset + filled, path)
            nrec = filled // record_size
            if nrec:
                recs = raw[: nrec * record_size].view(rec)
                _check_prefixes(path, recs["dim"], d, offset, record_size, True)
                yield d, recs, offset // record_size
            if filled < raw.size:  # end of stream
                rem = filled - nrec * record_size
                if rem:
                    at = offset + nrec * record_size
                    raise FormatError(
                        f"{path}: the uncompressed stream is not a whole number of {record_size}-byte records "
                        f"(dimension {d}): truncated record at {_where(at, True)} ({rem} of {record_size} bytes)"
                    )
                return
            offset += filled
            filled = 0


def _gz_size_hint(path):
    """The uncompressed size mod 2**32 from the gzip trailer (ISIZE); only a hint (multi-member files, > 4 GiB)."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() < 18:
            return None
        f.seek(-4, os.SEEK_END)
        return int.from_bytes(f.read(4), "little")


def _read_texmex_gz(path, kind):
    out = None
    extra = []  # blocks beyond the preallocated rows, when the trailer's hint was short
    n = 0
    for d, recs, row in _gz_blocks(path, kind):
        if out is None:
            hint = _gz_size_hint(path) or 0
            rows = hint // recs.dtype.itemsize if hint % recs.dtype.itemsize == 0 else 0
            out = np.empty((rows, d), dtype=_native(kind))
        m = len(recs)
        fit = max(0, min(m, out.shape[0] - row))
        if fit:
            out[row : row + fit] = recs["v"][:fit]
        if fit < m:
            extra.append(np.array(recs["v"][fit:], dtype=_native(kind)))
        n = row + m
    if extra:
        return np.concatenate([out] + extra)
    return out if n == out.shape[0] else out[:n].copy()


def _iter_texmex_gz(path, kind, chunk_size):
    parts, have = [], 0
    for d, recs, _ in _gz_blocks(path, kind, chunk_size):
        vecs = recs["v"]
        i = 0
        while i < len(vecs):
            take = min(chunk_size - have, len(vecs) - i)
            parts.append(np.array(vecs[i : i + take], dtype=_native(kind)))
            have += take
            i += take
            if have == chunk_size:
                yield parts[0] if len(parts) == 1 else np.concatenate(parts)
                parts, have = [], 0
    if have:
        yield parts[0] if len(parts) == 1 else np.concatenate(parts)


# --------------------------------------------------------------------------------------------------------------------
# .npy


def _npy_header(path):
    """Parse a .npy header; return ``(shape, fortran_order, dtype, data_offset)`` after checking it holds vectors."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError(f"unsupported .npy format version {version}")
        except (ValueError, OSError, EOFError, SyntaxError) as exc:
            raise FormatError(f"{path}: invalid .npy header (byte offset 0): {exc}") from None
        offset = f.tell()
    if dtype.kind not in "iuf" or dtype.fields is not None or dtype.subdtype is not None:
        raise FormatError(f"{path}: .npy array has dtype {dtype}; expected integers or floats (header, byte offset 0)")
    if len(shape) != 2:
        raise FormatError(f"{path}: .npy array has shape {shape}; expected 2 dimensions (n, dim)")
    if shape[1] == 0:
        raise FormatError(f"{path}: .npy array has shape {shape}; expected at least one column")
    need = shape[0] * shape[1] * dtype.itemsize
    if size - offset < need:
        raise FormatError(
            f"{path}: truncated .npy data: shape {shape} of {dtype} needs {need} bytes from byte offset {offset}, "
            f"the file has {size - offset}"
        )
    return shape, fortran, dtype, offset


def _read_npy(path):
    shape, fortran, dtype, offset = _npy_header(path)
    if shape[0] == 0:  # mmap cannot map zero bytes
        out = np.empty(shape, dtype=dtype)
        out.flags.writeable = False
        return out
    return np.memmap(path, dtype=dtype, mode="r", shape=shape, order="F" if fortran else "C", offset=offset)


def _iter_npy(path, chunk_size):
    arr = _read_npy(path)
    for i in range(0, arr.shape[0], chunk_size):
        yield np.array(arr[i : i + chunk_size], order="C")


# --------------------------------------------------------------------------------------------------------------------
# public readers


def read_vecs(path):
    """Read a whole vector file.

    Parameters
    ----------
    path : str or os.PathLike
        ``.fvecs``, ``.bvecs``, ``.ivecs`` (each optionally gzip-compressed, ``.fvecs.gz`` …) or ``.npy``.

    Returns
    -------
    X : ndarray of shape (n, dim)
        In the file's own dtype: float32 (``.fvecs``), uint8 (``.bvecs``), int32 (``.ivecs``), native byte order,
        C-contiguous and writeable. A ``.npy`` file is returned memory-mapped and read-only, in its stored dtype
        and memory order (a file without rows gives a read-only empty array).

    Raises
    ------
    FormatError
        Dimension prefix ≤ 0 or above ``MAX_DIM``, a record whose prefix differs from the first, a size that is not a
        whole number of records, an empty file, a truncated or corrupt gzip stream, an invalid ``.npy`` header. The
        message names the file and the byte offset (of the uncompressed stream for ``.gz``).
    FileNotFoundError, ValueError
        Missing file, not a regular file, unsupported extension.

    Notes
    -----
    Uncompressed files are memory-mapped with a structured dtype (int32 prefix, then the components) and copied out
    block by block while the prefixes are checked. Gzip files are streamed; the gzip trailer's size field is used to
    allocate the result once when it is consistent.
    """
    path = check_regular_file(path, "path")
    kind, gz = _texmex_kind(path)
    if kind == "npy":
        return _read_npy(path)
    if gz:
        return _read_texmex_gz(path, kind)
    return _read_texmex_plain(path, kind)


def iter_vecs(path, chunk_size=100_000):
    """Iterate over a vector file in chunks of rows, with memory bounded by the chunk.

    Parameters
    ----------
    path : str or os.PathLike
        As for :func:`read_vecs`.
    chunk_size : int, default 100_000
        Rows per chunk (≥ 1); the last chunk may be shorter.

    Yields
    ------
    chunk : ndarray of shape (≤ chunk_size, dim)
        In the file's dtype (as :func:`read_vecs`), C-contiguous, a fresh array (never a view of the file).

    Notes
    -----
    The path, extension and ``chunk_size`` are checked when ``iter_vecs`` is called; for uncompressed texmex files
    and ``.npy`` the file size and header are checked then too, so a truncated file raises before any chunk. A gzip
    stream can only be checked while it is read: its errors (FormatError) are raised when the bad record is reached,
    after the chunks before it were yielded.
    """
    path = check_regular_file(path, "path")
    kind, gz = _texmex_kind(path)
    chunk_size = check_int(chunk_size, "chunk_size", min_value=1)
    if kind == "npy":
        _npy_header(path)
        return _iter_npy(path, chunk_size)
    if gz:
        return _iter_texmex_gz(path, kind, chunk_size)
    d, n = _texmex_header(path, kind)
    return _iter_texmex_plain(path, kind, d, n, chunk_size)


def count_vecs(path):
    """Return ``(n, dim)`` of a vector file without keeping its data.

    Uncompressed texmex files and ``.npy``: from the file size and header only (O(1); the prefixes of the other
    records are not checked). ``.gz``: the stream is decompressed once in bounded memory and every prefix checked.
    """
    path = check_regular_file(path, "path")
    kind, gz = _texmex_kind(path)
    if kind == "npy":
        shape = _npy_header(path)[0]
        return int(shape[0]), int(shape[1])
    if not gz:
        d, n = _texmex_header(path, kind)
        return n, d
    n = d = 0
    for d, recs, row in _gz_blocks(path, kind):
        n = row + len(recs)
    return n, d


def _peek_dim(path):
    """The dimension of a vector file from its first bytes (no data read, no full check)."""
    kind, gz = _texmex_kind(path)
    if kind == "npy":
        return int(_npy_header(path)[0][1])
    if not gz:
        return _texmex_header(path, kind)[0]
    for d, _, _ in _gz_blocks(path, kind, max_rows=1):
        return d


# --------------------------------------------------------------------------------------------------------------------
# writing


def _umask():
    """The process umask, read without changing it (os.umask would, racing other threads)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def _atomic_write(path, write):
    """Call ``write(fileobj)`` on a hidden temporary sibling of ``path``, fsync it, then rename it over ``path``.

    On any error the temporary file is removed and ``path`` is left as it was.
    """
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:  # make the rename itself durable; not possible everywhere
        dir_fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def _check_finite(arr, name):
    if arr.dtype.kind != "f":
        return
    step = max(1, _BLOCK_BYTES // max(1, arr.shape[1] * arr.dtype.itemsize))
    for i in range(0, arr.shape[0], step):
        if not np.isfinite(arr[i : i + step]).all():
            raise ValueError(f"{name} contains NaN or infinite values")


def _texmex_rows(kind, block, name):
    """Convert one block of rows to the component dtype of ``kind``, checking dtype and range."""
    if kind == "fvecs":
        with np.errstate(over="ignore"):  # float64 beyond float32: reported as a ValueError by as_vectors
            return as_vectors(block, name)[0]
    if block.dtype.kind not in "iu":
        raise TypeError(
            f"{name} must be an integer array to be written as .{kind} (got dtype {block.dtype}); "
            "convert it explicitly after checking its values"
        )
    lo, hi, what = (0, 255, "uint8") if kind == "bvecs" else (-(2**31), 2**31 - 1, "int32")
    if block.size:
        bmin, bmax = int(block.min()), int(block.max())
        if bmin < lo or bmax > hi:
            raise ValueError(f"{name} holds values {bmin}..{bmax}, outside the {what} range {lo}..{hi} of .{kind}")
    return block


def write_vecs(path, X, *, compresslevel=9):
    """Write vectors to a texmex file (``.fvecs``, ``.bvecs``, ``.ivecs``, each optionally ``.gz``) or ``.npy``.

    Parameters
    ----------
    path : str or os.PathLike
        The target; its extension chooses the format. Written atomically: a hidden temporary sibling is written,
        fsynced and renamed over the target, so a crash never leaves a partial file under the final name.
    X : array-like of shape (n, dim), or (dim,) for one vector
        ``.fvecs``: any real numeric dtype, converted to float32 (values must be finite and fit float32).
        ``.bvecs``: an integer dtype with values in 0..255. ``.ivecs``: an integer dtype within the int32 range.
        ``.npy``: any real numeric dtype, stored as is (float values must be finite). Texmex files need n ≥ 1 (the
        dimension is only stored in the records); ``.npy`` accepts zero rows.
    compresslevel : int, default 9
        gzip level 0..9 for ``.gz`` targets. The gzip header carries neither a file name nor a time stamp, so the
        same input gives the same bytes.
    """
    path = check_output_path(path, "path")
    kind, gz = _texmex_kind(path)
    compresslevel = check_int(compresslevel, "compresslevel", min_value=0, max_value=9)
    arr, _ = as_vectors(X, "X", convert=False)
    if kind == "npy":
        _check_finite(arr, "X")
        _atomic_write(path, lambda f: np.lib.format.write_array(f, arr, allow_pickle=False))
        return
    n, d = arr.shape
    if n == 0:
        raise ValueError(f"X has no rows: a .{kind} file cannot store zero vectors (the dimension is in the records)")
    if d > MAX_DIM:
        raise ValueError(f"X has dimension {d}, above the {MAX_DIM} a texmex reader accepts")
    rec = _record_dtype(kind, d)
    step = max(1, _BLOCK_BYTES // rec.itemsize)

    def write(f):
        out = gzip.GzipFile(filename="", mode="wb", fileobj=f, compresslevel=compresslevel, mtime=0) if gz else f
        buf = np.empty(min(step, n), dtype=rec)
        buf["dim"] = d
        for i in range(0, n, step):
            block = _texmex_rows(kind, arr[i : i + step], "X")
            recs = buf[: len(block)]
            recs["v"] = block
            out.write(memoryview(recs.view(np.uint8)))
        if gz:
            out.close()  # writes the trailer; leaves f open

    _atomic_write(path, write)


# --------------------------------------------------------------------------------------------------------------------
# exact nearest neighbours


def _topk_positions(dist, k):
    """Column positions of the ``k`` smallest entries of each row, by (distance, column); ``k`` ≤ columns.

    The caller orders columns so that a smaller column means a smaller id among equal distances.
    """
    b, m = dist.shape
    if k >= m:
        return np.argsort(dist, axis=1, kind="stable")
    kth = np.partition(dist, k - 1, axis=1)[:, k - 1]
    mask = dist <= kth[:, None]
    counts = mask.sum(axis=1)
    out = np.empty((b, k), dtype=np.intp)
    regular = np.flatnonzero(counts == k)
    if regular.size:  # the usual case: exactly k candidates, no tie at the k-th place
        cols = np.nonzero(mask[regular])[1].reshape(regular.size, k)
        order = np.argsort(np.take_along_axis(dist[regular], cols, axis=1), axis=1, kind="stable")
        out[regular] = np.take_along_axis(cols, order, axis=1)
    for r in np.flatnonzero(counts != k):  # ties at the k-th distance: keep the smallest columns
        cols = np.flatnonzero(mask[r])
        out[r] = cols[np.argsort(dist[r, cols], kind="stable")[:k]]
    return out


def _float64_block(arr, name):
    out = np.asarray(arr, dtype=np.float64)
    if not np.isfinite(out).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return out


def exact_knn(base, queries, k):
    """Exact k nearest neighbours by brute force, in float64, with ties broken by the smaller base index.

    Parameters
    ----------
    base : array-like of shape (n_base, dim)
        Any real numeric dtype; may be a large memory-mapped array (read block by block).
    queries : array-like of shape (n_queries, dim), or (dim,) for one query
    k : int
        ≥ 1. When ``k > n_base`` the missing neighbours are padded with distance ``inf`` and id −1.

    Returns
    -------
    distances : ndarray of shape (n_queries, k), dtype float64
        Squared L2 distances, nondecreasing along each row.
    ids : ndarray of shape (n_queries, k), dtype int64
        Base row indices, nearest first. A 1-D query gives two arrays of shape (k,).

    Notes
    -----
    Distances are ‖q‖² − 2 q·b + ‖b‖² with one float64 matrix product per block (clipped at 0). For integer data
    whose squared norms stay below 2**53 (uint8 SIFT, small integers) every term is exact, so the result is exactly
    the integer ground truth; for float data the rounding is ~1e-16 relative, so only near-ties that close can be
    ordered differently from a direct Σ(q−b)². Memory is bounded by blocks of about ``_KNN_BLOCK_ELEMS`` float64
    distances, whatever the sizes.
    """
    base, _ = as_vectors(base, "base", convert=False)
    queries, was_1d = as_vectors(queries, "queries", dim=base.shape[1], convert=False)
    k = check_int(k, "k", min_value=1)
    nq, nb = queries.shape[0], base.shape[0]
    D = np.full((nq, k), np.inf)
    I = np.full((nq, k), -1, dtype=np.int64)
    bb = max(1, min(nb, _KNN_BASE_BLOCK))
    bq = max(1, _KNN_BLOCK_ELEMS // (bb + k))
    kk = min(k, nb)
    for q0 in range(0, nq, bq):
        q = _float64_block(queries[q0 : q0 + bq], "queries")
        qn = np.einsum("ij,ij->i", q, q)
        best_d = np.empty((len(q), 0))
        best_i = np.empty((len(q), 0), dtype=np.int64)
        for b0 in range(0, nb, bb):
            b = _float64_block(base[b0 : b0 + bb], "base")
            dist = qn[:, None] - 2.0 * (q @ b.T) + np.einsum("ij,ij->i", b, b)[None, :]
            np.maximum(dist, 0.0, out=dist)
            # best columns first (sorted by (distance, id), all ids smaller than this block's), then the block in id
            # order: column order is id order among equal distances.
            cand_d = np.concatenate([best_d, dist], axis=1)
            cand_i = np.concatenate([best_i, np.broadcast_to(np.arange(b0, b0 + len(b)), dist.shape)], axis=1)
            pos = _topk_positions(cand_d, min(kk, cand_d.shape[1]))
            best_d = np.take_along_axis(cand_d, pos, axis=1)
            best_i = np.take_along_axis(cand_i, pos, axis=1)
        D[q0 : q0 + len(q), : best_d.shape[1]] = best_d
        I[q0 : q0 + len(q), : best_i.shape[1]] = best_i
    if was_1d:
        return D[0], I[0]
    return D, I


# --------------------------------------------------------------------------------------------------------------------
# datasets


class _Source:
    """One array of a dataset: given in memory, a file read on first use, or a loader function.

    ``convert`` turns what was loaded into the array kept (vectors are kept as they are; ids become int64).
    """

    def __init__(self, role, convert, *, value=None, loader=None, chunker=None, dim=None):
        self.role = role
        self.convert = convert
        self.path = None
        self.array = None
        self.loader, self.chunker, self._dim = loader, chunker, dim
        if loader is not None:
            return
        if isinstance(value, (str, os.PathLike)):
            self.path = check_regular_file(value, role)
            _texmex_kind(self.path, role)
        else:
            self.array = convert(value, role)

    def dim(self):
        if self.array is not None:
            return int(self.array.shape[1])
        if self.path is not None:
            return _peek_dim(self.path)
        return self._dim

    def load(self):
        if self.array is None:
            raw = read_vecs(self.path) if self.path is not None else self.loader()
            try:
                self.array = self.convert(raw, self.role)
            except (TypeError, ValueError) as exc:
                raise FormatError(f"{self.describe()}: {exc}") from None
        return self.array

    def iterate(self, chunk_size):
        if self.array is not None:
            return (self.array[i : i + chunk_size] for i in range(0, self.array.shape[0], chunk_size))
        if self.path is not None:
            return iter_vecs(self.path, chunk_size)
        return self.chunker(chunk_size)

    def describe(self):
        return self.path if self.path is not None else f"{self.role} array"


def _as_vectors_kept(value, role):
    return as_vectors(value, role, convert=False)[0]


def _as_ids_2d(value, name):
    arr = np.asarray(value)
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer ids, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"{name} must have shape (n_query, k), got {arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.int64)


class Dataset:
    """A benchmark dataset: learn (training) vectors, base (database) vectors, queries and exact ground truth.

    Parameters
    ----------
    name : str
    learn, base, query : array-like of shape (n, dim), or path
        Arrays are kept as given (their own dtype); a path (any file :func:`read_vecs` reads) is read on first
        access of the attribute.
    groundtruth : array-like of shape (n_query, k_gt), integers, or path
        Base indices of the exact nearest neighbours of each query, nearest first.
    groundtruth_distances : array-like of shape (n_query, k_gt), optional
        Distances matching ``groundtruth``. Only their equality is used (to recognise ties, see
        :func:`ockstore.evaluation.recall_at_r`), so squared or plain distances serve alike.
    metric : str, default "euclidean"
        The metric the ground truth was computed with, as the source states it (ann-benchmarks also has "angular").

    Attributes
    ----------
    learn, base, query : ndarray of shape (n, dim)
        Read on first access and kept (use :meth:`iter_base` to stream a large base instead). Their dtype is the
        file's (uint8 for SIFT ``.bvecs``; ``.npy`` stays memory-mapped): convert where needed.
    groundtruth : ndarray of shape (n_query, k_gt), dtype int64
    groundtruth_distances : ndarray of shape (n_query, k_gt), float64, or None
    dim : int
        From the queries (a file header, or an array's shape). Every array read later must have ``dim`` columns,
        otherwise FormatError naming the file.
    name, metric : str
    """

    def __init__(self, name, *, learn, base, query, groundtruth, groundtruth_distances=None, metric="euclidean"):
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        if not isinstance(metric, str):
            raise TypeError(f"metric must be a str, got {type(metric).__name__}")
        self.name = name
        self.metric = metric
        self._sources = {}
        for role, value in (("learn", learn), ("base", base), ("query", query), ("groundtruth", groundtruth)):
            convert = _as_ids_2d if role == "groundtruth" else _as_vectors_kept
            self._sources[role] = value if isinstance(value, _Source) else _Source(role, convert, value=value)
        self._gt_dist = None
        if groundtruth_distances is not None:
            gd = np.asarray(groundtruth_distances, dtype=np.float64)
            if gd.ndim != 2:
                raise ValueError(f"groundtruth_distances must have shape (n_query, k_gt), got {gd.shape}")
            self._gt_dist = gd
        self._dim = None

    @property
    def dim(self):
        if self._dim is None:
            self._dim = int(self._sources["query"].dim())
        return self._dim

    def _vectors(self, role):
        src = self._sources[role]
        arr = src.load()
        if arr.shape[1] != self.dim:
            if src.path is not None:
                src.array = None  # do not keep a file that was refused
            raise FormatError(
                f"{src.describe()}: {role} vectors have dimension {arr.shape[1]}, expected {self.dim} like the "
                f"queries of dataset {self.name!r}"
            )
        return arr

    @property
    def learn(self):
        return self._vectors("learn")

    @property
    def base(self):
        return self._vectors("base")

    @property
    def query(self):
        return self._vectors("query")

    @property
    def groundtruth(self):
        return self._sources["groundtruth"].load()

    @property
    def groundtruth_distances(self):
        return self._gt_dist

    def iter_base(self, chunk_size=100_000):
        """Iterate over the base vectors in chunks of at most ``chunk_size`` rows.

        A base not yet read is streamed from its file (memory bounded by the chunk, see :func:`iter_vecs`) and not
        kept; a base already in memory is sliced (the chunks are views of it).
        """
        chunk_size = check_int(chunk_size, "chunk_size", min_value=1)
        src = self._sources["base"]
        dim = self.dim
        chunks = src.iterate(chunk_size)

        def gen():
            for chunk in chunks:
                if chunk.shape[1] != dim:
                    raise FormatError(
                        f"{src.describe()}: base vectors have dimension {chunk.shape[1]}, expected {dim} "
                        f"like the queries of dataset {self.name!r}"
                    )
                yield chunk

        return gen()

    def __repr__(self):
        files = ", ".join(f"{r}={s.describe()!r}" for r, s in self._sources.items())
        return f"Dataset({self.name!r}, {files})"


_ROLE_RE = re.compile(r"^(?P<prefix>.+)_(?P<role>learn|base|query|groundtruth)\.(?:[fbi]vecs(?:\.gz)?|npy)$", re.I)


def load_texmex(folder):
    """Open a dataset folder laid out like texmex's SIFT1M: ``<name>_learn.*``, ``<name>_base.*``, ``<name>_query.*``
    and ``<name>_groundtruth.*``, each a ``.fvecs/.bvecs/.ivecs`` file (optionally ``.gz``) or ``.npy``.

    Nothing but the query file's first record is read here; each array is read on first access. Raises
    FileNotFoundError when a role has no file and ValueError when it has several (e.g. ``.fvecs`` and ``.fvecs.gz``).
    The dataset's name is the common prefix of the four files (the folder's name when they differ).
    """
    if not isinstance(folder, (str, os.PathLike)):
        raise TypeError(f"folder must be a str or os.PathLike, got {type(folder).__name__}")
    folder = os.fsdecode(os.fspath(folder))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"folder: no such directory: {folder!r}")
    found = {}
    prefixes = set()
    for entry in sorted(os.listdir(folder)):
        if entry.startswith("."):  # hidden, e.g. a writer's temporary file
            continue
        m = _ROLE_RE.match(entry)
        if m:
            found.setdefault(m["role"].lower(), []).append(os.path.join(folder, entry))
            prefixes.add(m["prefix"])
    roles = ("learn", "base", "query", "groundtruth")
    missing = [r for r in roles if r not in found]
    if missing:
        raise FileNotFoundError(
            f"folder {folder!r} has no " + ", ".join(f"*_{r}.*vecs[.gz]" for r in missing) + " file"
        )
    for r in roles:
        if len(found[r]) > 1:
            raise ValueError(f"folder {folder!r} has several {r} files: {found[r]}")
    name = prefixes.pop() if len(prefixes) == 1 else os.path.basename(os.path.abspath(folder))
    return Dataset(name, **{r: found[r][0] for r in roles})


def load_hdf5(path):
    """Open an ann-benchmarks ``.hdf5`` file as a :class:`Dataset` (needs the optional h5py: ``ockstore[hdf5]``).

    The file's ``train`` array is both ``learn`` and ``base`` (ann-benchmarks trains on the database), ``test`` is
    ``query``, ``neighbors`` is ``groundtruth`` and ``distances`` (when present) ``groundtruth_distances`` — plain,
    not squared, distances. The file's ``distance`` attribute ("euclidean", "angular", …) becomes ``metric``: the
    ground truth of an "angular" file is by cosine similarity. Arrays are read on first access; ``iter_base`` reads
    slices.
    """
    try:
        import h5py
    except ImportError:
        raise ImportError("reading .hdf5 files needs the optional h5py package: pip install ockstore[hdf5]") from None
    path = check_regular_file(path, "path")
    try:
        with h5py.File(path, "r") as f:
            for key in ("train", "test", "neighbors"):
                if key not in f:
                    raise FormatError(f"{path}: ann-benchmarks file has no {key!r} dataset")
                if len(f[key].shape) != 2:
                    raise FormatError(f"{path}: {key!r} has shape {f[key].shape}, expected 2 dimensions")
            metric = f.attrs.get("distance", "euclidean")
            metric = metric.decode() if isinstance(metric, bytes) else str(metric)
            dists = np.asarray(f["distances"], dtype=np.float64) if "distances" in f else None
            dim = int(f["test"].shape[1])
    except OSError as exc:
        raise FormatError(f"{path}: not a readable HDF5 file: {exc}") from None

    def reader(key):
        def load():
            with h5py.File(path, "r") as f:
                return np.asarray(f[key][()])

        return load

    def train_chunks(chunk_size):
        with h5py.File(path, "r") as f:
            train = f["train"]
            for i in range(0, train.shape[0], chunk_size):
                yield np.asarray(train[i : i + chunk_size])

    def vectors(role, key, chunker=None):
        return _Source(role, _as_vectors_kept, loader=reader(key), chunker=chunker, dim=dim)

    train = vectors("train", "train", train_chunks)  # one source: read once for learn and base
    return Dataset(
        os.path.splitext(os.path.basename(path))[0],
        learn=train,
        base=train,
        query=vectors("query", "test"),
        groundtruth=_Source("groundtruth", _as_ids_2d, loader=reader("neighbors")),
        groundtruth_distances=dists,
        metric=metric,
    )


def synthetic(n_learn, n_base, n_query, dim, seed=0, k_gt=100):
    """A seeded synthetic dataset of clustered Gaussian float32 vectors with exact ground truth.

    Data: 20 cluster centres ~ N(0, s²) per dimension, points = centre + N(0, (s/2)²), where the per-dimension
    scales s are log-uniform between 0.1 and 1 in a random order (uneven variances, so rotations and codebooks have
    structure to learn). Learn, base and query are independent draws from that mixture, in that order, from one
    ``np.random.default_rng(seed)``: the same arguments always give the same arrays.

    The ground truth is :func:`exact_knn` over the base (float64, ties by smaller index); its squared distances are
    kept as ``groundtruth_distances``.

    Parameters
    ----------
    n_learn, n_query : int ≥ 0
    n_base : int ≥ 1
    dim : int ≥ 1
    seed : int ≥ 0
    k_gt : int, 1..n_base
    """
    n_learn = check_int(n_learn, "n_learn", min_value=0)
    n_base = check_int(n_base, "n_base", min_value=1)
    n_query = check_int(n_query, "n_query", min_value=0)
    dim = check_int(dim, "dim", min_value=1)
    seed = check_int(seed, "seed", min_value=0)
    k_gt = check_int(k_gt, "k_gt", min_value=1, max_value=n_base)
    rng = np.random.default_rng(seed)
    n_clusters = 20
    scales = rng.permutation(np.geomspace(0.1, 1.0, dim))
    centres = rng.normal(size=(n_clusters, dim)) * scales

    def draw(n):
        labels = rng.integers(0, n_clusters, size=n)
        noise = rng.normal(size=(n, dim)) * (0.5 * scales)
        return (centres[labels] + noise).astype(np.float32)

    learn, base, query = draw(n_learn), draw(n_base), draw(n_query)
    gt_d, gt_i = exact_knn(base, query, k_gt)
    return Dataset(
        f"synthetic-{dim}d-seed{seed}",
        learn=learn,
        base=base,
        query=query,
        groundtruth=gt_i,
        groundtruth_distances=gt_d,
    )
