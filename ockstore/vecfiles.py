"""Vector files: texmex ``.fvecs/.bvecs/.ivecs`` (optionally ``.gz``) and ``.npy``; reading whole, in chunks with
bounded memory, counting, writing atomically; and id files.

The texmex layout (http://corpus-texmex.irisa.fr/) stores every vector as one record: a little-endian int32
dimension ``d`` followed by ``d`` components (float32 for ``.fvecs``, uint8 for ``.bvecs``, int32 for ``.ivecs``).
Every record of a file must carry the same ``d``. A file that breaks a rule raises :class:`~ockstore.errors.FormatError`
whose message names the file and the byte offset of the offending record; for ``.gz`` files that offset counts bytes
of the *uncompressed* stream.
"""

from __future__ import annotations

import gzip
import os
import zlib

import numpy as np

from ._atomic import atomic_write
from ._validation import as_ids, as_vectors, check_bool, check_int
from .errors import FormatError
from .paths import check_input_file, check_output_file

__all__ = ["read_vecs", "iter_vecs", "read_rows", "write_vecs", "count_vecs", "read_ids", "MAX_DIM"]

# Component dtype of each texmex extension (the dimension prefix is always little-endian int32).
_TEXMEX_DTYPES = {"fvecs": np.dtype("<f4"), "bvecs": np.dtype("u1"), "ivecs": np.dtype("<i4")}

# A dimension prefix above this is taken as a sign that the file is not a texmex file at all (e.g. the first four
# bytes of a gzip or .npy header read as an int32): no real descriptor has a million components.
MAX_DIM = 1 << 20

# Upper bound on the bytes read from a gzip stream or copied out of a memory map in one step. Bounds the working
# buffer independently of the dimension, and small enough to stay friendly to the page cache of a shared machine.
_BLOCK_BYTES = 8 << 20

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


def _iter_texmex_plain(path, kind, d, n, chunk_size, start=0, stop=None):
    mm = _mmap_records(path, kind, d, n)
    stop = n if stop is None else min(stop, n)
    try:
        for i in range(start, stop, chunk_size):
            recs = mm[i : min(i + chunk_size, stop)]
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


def _iter_texmex_gz(path, kind, chunk_size, start=0, stop=None):
    parts, have = [], 0
    blocks = _gz_blocks(path, kind, chunk_size)
    for d, recs, row in blocks:
        if stop is not None and row >= stop:
            blocks.close()  # the rows wanted are behind: stop decompressing
            break
        if row + len(recs) <= start:
            continue
        vecs = recs["v"][max(0, start - row) : len(recs) if stop is None else max(0, stop - row)]
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


def _iter_npy(path, chunk_size, start=0, stop=None):
    arr = _read_npy(path)
    stop = arr.shape[0] if stop is None else min(stop, arr.shape[0])
    for i in range(start, stop, chunk_size):
        yield np.array(arr[i : min(i + chunk_size, stop)], order="C")


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
    path = check_input_file(path, "path")
    kind, gz = _texmex_kind(path)
    if kind == "npy":
        return _read_npy(path)
    if gz:
        return _read_texmex_gz(path, kind)
    return _read_texmex_plain(path, kind)


def iter_vecs(path, chunk_size=100_000, *, start=0, stop=None):
    """Iterate over a vector file (or its rows ``[start:stop]``) in chunks of rows, with memory bounded by the chunk.

    Parameters
    ----------
    path : str or os.PathLike
        As for :func:`read_vecs`.
    chunk_size : int, default 100_000
        Rows per chunk (≥ 1); the last chunk may be shorter.
    start, stop : int ≥ 0, or None for ``stop`` (the end)
        Rows as a slice of the file (clipped to its end). A gzip stream is decompressed from its beginning up to
        ``stop`` (the rows before ``start`` skipped); other files are read from ``start`` directly.

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
    path = check_input_file(path, "path")
    kind, gz = _texmex_kind(path)
    chunk_size = check_int(chunk_size, "chunk_size", min_value=1)
    start = check_int(start, "start", min_value=0)
    if stop is not None:
        stop = check_int(stop, "stop", min_value=start)
    if kind == "npy":
        _npy_header(path)
        return _iter_npy(path, chunk_size, start, stop)
    if gz:
        return _iter_texmex_gz(path, kind, chunk_size, start, stop)
    d, n = _texmex_header(path, kind)
    return _iter_texmex_plain(path, kind, d, n, chunk_size, start, stop)


def read_rows(path, rows):
    """The rows ``rows`` (strictly increasing, in 0..n-1; ValueError otherwise) of a vector file, e.g. a random sample,
    shape (len(rows), dim), C-contiguous, in the file's dtype (as :func:`read_vecs`). Uncompressed files and ``.npy``
    read only those rows (memory-mapped); a gzip stream is decompressed up to the last one."""
    path = check_input_file(path, "path")
    kind, gz = _texmex_kind(path)
    rows = as_ids(rows, "rows")  # 1-D integers >= 0, int64
    if not bool((rows[1:] > rows[:-1]).all()):
        raise ValueError("rows must be strictly increasing")
    if kind == "npy" or not gz:
        (n, d), dtype = _npy_header(path)[::2] if kind == "npy" else (_texmex_header(path, kind)[::-1], None)
        if rows.size and int(rows[-1]) >= n:
            raise ValueError(f"rows: row {int(rows[-1])} is past the end of {path} ({n} rows)")
        if kind == "npy":
            return np.ascontiguousarray(_read_npy(path)[rows]) if n else np.empty((0, d), dtype)
        out = np.empty((rows.size, d), dtype=_native(kind))
        recs = _mmap_records(path, kind, d, n)[rows]
        bad = np.flatnonzero(recs["dim"] != d)[:1]  # the first offending record, named by its own offset
        _check_prefixes(path, recs["dim"][bad], d, int(rows[bad[0]]) * recs.itemsize if bad.size else 0,
                        recs.itemsize, False)
        out[...] = recs["v"]
        return out
    parts, at, d = [], 0, None
    for d, recs, row in _gz_blocks(path, kind):
        stop = at + int(np.searchsorted(rows[at:], row + len(recs)))
        if stop > at:
            parts.append(np.array(recs["v"][rows[at:stop] - row], dtype=_native(kind)))
            at = stop
        if at == rows.size:
            break
    if at < rows.size:
        raise ValueError(f"rows: row {int(rows[-1])} is past the end of {path}")
    return np.concatenate(parts) if parts else np.empty((0, d), dtype=_native(kind))


def count_vecs(path):
    """Return ``(n, dim)`` of a vector file without keeping its data.

    Uncompressed texmex files and ``.npy``: from the file size and header only (O(1); the prefixes of the other
    records are not checked). ``.gz``: the stream is decompressed once in bounded memory and every prefix checked.
    """
    path = check_input_file(path, "path")
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


def _check_finite(arr, name, allow_inf=False):
    """NaN (and, unless ``allow_inf``, +-inf) in a float array raise ValueError; read block by block."""
    if arr.dtype.kind != "f":
        return
    step = max(1, _BLOCK_BYTES // max(1, arr.shape[1] * arr.dtype.itemsize))
    for i in range(0, arr.shape[0], step):
        block = arr[i : i + step]
        if (np.isnan(block) if allow_inf else ~np.isfinite(block)).any():
            raise ValueError(f"{name} contains NaN" + ("" if allow_inf else " or infinite") + " values")


def _texmex_rows(kind, block, name, allow_inf=False):
    """Convert one block of rows to the component dtype of ``kind``, checking dtype and range."""
    if kind == "fvecs":
        if not allow_inf:
            with np.errstate(over="ignore"):  # float64 beyond float32: reported as a ValueError by as_vectors
                return as_vectors(block, name)[0]
        _check_finite(block, name, allow_inf=True)
        with np.errstate(over="ignore"):
            rows = np.ascontiguousarray(block, dtype=np.float32)
        if (np.isinf(rows) & np.isfinite(block)).any():
            raise ValueError(f"{name} contains values too large for float32")
        return rows
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


def write_vecs(path, X, *, compresslevel=9, allow_inf=False):
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
    allow_inf : bool, default False
        Let +-inf through in float files (search distances pad missing results with inf); NaN is always refused.
    """
    path = check_output_file(path, "path")
    kind, gz = _texmex_kind(path)
    compresslevel = check_int(compresslevel, "compresslevel", min_value=0, max_value=9)
    allow_inf = check_bool(allow_inf, "allow_inf")
    arr, _ = as_vectors(X, "X", convert=False)
    if kind == "npy":
        _check_finite(arr, "X", allow_inf)
        with atomic_write(path) as f:
            np.lib.format.write_array(f, arr, allow_pickle=False)
        return
    n, d = arr.shape
    if n == 0:
        raise ValueError(f"X has no rows: a .{kind} file cannot store zero vectors (the dimension is in the records)")
    if d > MAX_DIM:
        raise ValueError(f"X has dimension {d}, above the {MAX_DIM} a texmex reader accepts")
    rec = _record_dtype(kind, d)
    step = max(1, _BLOCK_BYTES // rec.itemsize)

    with atomic_write(path) as f:
        out = gzip.GzipFile(filename="", mode="wb", fileobj=f, compresslevel=compresslevel, mtime=0) if gz else f
        buf = np.empty(min(step, n), dtype=rec)
        buf["dim"] = d
        for i in range(0, n, step):
            block = _texmex_rows(kind, arr[i : i + step], "X", allow_inf)
            recs = buf[: len(block)]
            recs["v"] = block
            out.write(memoryview(recs.view(np.uint8)))
        if gz:
            out.close()  # writes the trailer; leaves f open


def read_ids(path):
    """Read an id file: ``.ivecs`` (optionally ``.gz``) with dimension 1, or an integer ``.npy`` of shape (N,) or
    (N, 1). Returns int64 ids of shape (N,), checked as every id of ockstore is (>= 0, int64 range).

    Raises FormatError (a malformed file, or ids that break the rules; the message names the file),
    FileNotFoundError or ValueError (not a regular file, unsupported extension).
    """
    path = check_input_file(path, "path")
    kind, _gz = _texmex_kind(path)
    if kind == "npy":
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, EOFError, OSError) as exc:  # not .npy, pickled objects, truncated header
            raise FormatError(f"{path}: not a valid .npy file of ids: {exc}") from None
    else:
        arr = read_vecs(path)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise FormatError(f"{path}: ids must have shape (N,) or (N, 1), got {arr.shape}")
    try:
        return as_ids(arr, "ids")
    except (TypeError, ValueError) as exc:
        raise FormatError(f"{path}: {exc}") from None
