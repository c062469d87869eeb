"""Writing a container file atomically: FileWriter (docs/FORMAT.md section 8.1)."""

from __future__ import annotations

import os
import zlib

import msgpack
import numpy as np

from .. import _atomic
from .._validation import check_bool, check_int
from ..paths import check_output_file
from .layout import (
    CHUNK_BYTES, DTYPE_MINOR, FORMAT_VERSION, MAGIC, MAX_HEADER_BYTES, MAX_NAME_LENGTH, PREAMBLE, PREAMBLE_SIZE, align,
    canonical_metadata, check_metadata, check_shape_bytes, dtype_code, flat_bytes,
)

__all__ = ["FileWriter"]


class _Section:
    """One section of a FileWriter: a fixed array, or a growing one spilled to a temporary file."""

    __slots__ = ("name", "dtype", "array", "row_shape", "rows", "nbytes", "crc", "spill", "spill_path", "filled")

    def __init__(self, name, dtype, array=None, row_shape=None):
        self.name = name
        self.dtype = dtype
        self.array = array  # fixed sections: the C-contiguous array, read at commit
        self.row_shape = row_shape  # growing sections: the shape of one row
        self.rows = 0
        self.nbytes = 0
        self.crc = 0
        self.spill = None  # growing sections: the open spill file, created at the first non-empty append
        self.spill_path = None
        self.filled = False  # a section of known size whose rows are written in any order (declare_filled)

    @property
    def shape(self):
        return self.array.shape if self.row_shape is None else (self.rows, *self.row_shape)


class FileWriter:
    """Write one ockstore container file atomically.

    Fixed sections are given whole with :meth:`put`; growing sections are declared with :meth:`declare_growing` and
    filled with :meth:`append`, chunk by chunk, with memory bounded by the chunk: their rows spill to hidden temporary
    sibling files that :meth:`commit` copies into place. Sections appear in the file in the order they were put or
    declared. Nothing appears under ``path`` before :meth:`commit`, which writes everything to a hidden temporary file
    in the same folder (``.<name>.<random>.tmp``), flushes and fsyncs it, renames it over ``path`` and fsyncs the
    folder: a crash leaves either the old file or the new one, never part of one.

    Used as a context manager, leaving the block without a successful :meth:`commit` (by an exception or normally)
    aborts: every temporary file is removed and ``path`` is left as it was. Any use after commit or abort raises
    ValueError, as Python's closed files do; :meth:`abort` itself may be called any number of times.

    Parameters
    ----------
    path : str or os.PathLike
        The file to write. Its folder must exist; an existing regular file there is replaced at commit.
    minor_version : int, default 0
        The format minor version the caller's meta needs; the file gets the larger of it and the minor version of
        every section dtype (DTYPE_MINOR): a file using nothing newer than 1.0 says 1.0.
    replace : bool, default True
        False: :meth:`commit` never replaces an existing ``path`` (FileExistsError, the writer aborted), even one
        created by another process while this writer was writing (``_atomic.atomic_write(replace=False)``).
    """

    def __init__(self, path, *, minor_version=0, replace=True):
        self._minor = check_int(minor_version, "minor_version", min_value=0, max_value=FORMAT_VERSION[1])
        self._replace = check_bool(replace, "replace")
        self._path = check_output_file(path, "path")
        self._sections = {}  # name -> _Section, in file order
        self._temps = []  # every temporary file created and not yet removed or renamed
        self._state = "open"  # "open", "committed" or "aborted"

    @property
    def path(self):
        return self._path

    @property
    def closed(self):
        return self._state != "open"

    def __repr__(self):
        return f"<FileWriter {self._path!r} {self._state}, {len(self._sections)} sections>"

    def __enter__(self):
        self._check_open()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.abort()  # a no-op after a successful commit
        return False

    def __del__(self):
        if getattr(self, "_state", None) == "open":
            try:
                self.abort()
            except Exception:  # pragma: no cover - interpreter shutdown
                pass

    # ---- building

    def put(self, name, array):
        """Add a whole section.

        Parameters
        ----------
        name : str
            Non-empty, at most 255 characters, unique in the file.
        array : ndarray of any shape (empty and 0-d included), dtype one of ``DTYPES``
            Native little-endian dtypes match (``np.float32`` is ``"<f4"``); big-endian arrays raise TypeError.
            The array is referenced, not copied (unless it is not C-contiguous): do not modify it before commit.
        """
        self._check_open()
        self._check_new_name(name)
        if not isinstance(array, np.ndarray):
            raise TypeError(f"section {name!r}: array must be a numpy.ndarray, got {type(array).__name__}")
        code = dtype_code(array.dtype, f"section {name!r}")
        check_shape_bytes(array.shape, array.itemsize, f"section {name!r}")
        if not array.flags.c_contiguous:
            array = array.copy(order="C")
        self._sections[name] = _Section(name, code, array=array)

    def declare_growing(self, name, dtype, row_shape=()):
        """Declare a section whose rows come later through :meth:`append`; zero rows are fine.

        Its shape in the file is ``(n_rows, *row_shape)``.
        """
        self._check_open()
        self._check_new_name(name)
        code = dtype_code(dtype, f"section {name!r}")
        if isinstance(row_shape, (str, bytes)) or not hasattr(row_shape, "__iter__"):
            raise TypeError(f"section {name!r}: row_shape must be a tuple of ints, got {type(row_shape).__name__}")
        row_shape = tuple(check_int(d, f"section {name!r}: row_shape", min_value=0) for d in row_shape)
        check_shape_bytes((0, *row_shape), np.dtype(code).itemsize, f"section {name!r}")
        self._sections[name] = _Section(name, code, row_shape=row_shape)

    def declare_filled(self, name, dtype, n_rows, row_shape=()):
        """Declare a section of exactly ``n_rows`` rows whose rows are written in any order by :meth:`write_rows`
        (rows never written hold zeros). It is backed by a hidden temporary file of its final size, so memory stays
        bounded whatever ``n_rows`` is; its CRC is computed at commit, by one more read of that file.

        Its shape in the file is ``(n_rows, *row_shape)``. Used to sort rows by a key through the file system (a
        counting sort: the caller knows where every row goes).
        """
        self.declare_growing(name, dtype, row_shape)
        section = self._sections[name]
        section.filled = True
        section.rows = check_int(n_rows, f"section {name!r}: n_rows", min_value=0)
        check_shape_bytes((section.rows, *section.row_shape), np.dtype(section.dtype).itemsize, f"section {name!r}")
        row_items = int(np.prod(section.row_shape, dtype=np.int64))
        section.nbytes = section.rows * row_items * np.dtype(section.dtype).itemsize
        if section.nbytes:
            section.spill_path, fd = self._new_temp()
            section.spill = open(fd, "w+b")
            try:
                with _atomic.naming_no_space(self._path):
                    section.spill.truncate(section.nbytes)
            except BaseException:
                self.abort()
                raise

    def write_rows(self, name, start, rows):
        """Write ``rows`` at rows ``start``, ``start + 1``, ... of a section declared with :meth:`declare_filled`.

        Parameters
        ----------
        name : str
        start : int >= 0
        rows : ndarray of shape (n, *row_shape), exactly the declared dtype; start + n must not exceed n_rows.
        """
        self._check_open()
        section = self._sections.get(name) if isinstance(name, str) else None
        if section is None or not section.filled:
            raise ValueError(f"no filled section named {name!r}; declare it with declare_filled first")
        self._check_rows(section, rows)
        start = check_int(start, "start", min_value=0)
        if start + rows.shape[0] > section.rows:
            raise ValueError(f"section {name!r}: rows {start}..{start + rows.shape[0] - 1} are beyond its "
                             f"{section.rows} rows")
        if rows.size:
            data = flat_bytes(np.ascontiguousarray(rows))
            row_bytes = data.size // rows.shape[0]
            try:
                with _atomic.naming_no_space(self._path):
                    written = os.pwrite(section.spill.fileno(), data, start * row_bytes)
                    while written < data.size:  # a short write (a signal, a pipe-like file system): write the rest
                        written += os.pwrite(section.spill.fileno(), data[written:], start * row_bytes + written)
            except BaseException:
                self.abort()  # the section may now hold part of the rows: this writer cannot go on
                raise

    def _check_rows(self, section, rows):
        name = section.name
        if not isinstance(rows, np.ndarray):
            raise TypeError(f"section {name!r}: rows must be a numpy.ndarray, got {type(rows).__name__}")
        if rows.dtype != np.dtype(section.dtype):
            raise TypeError(f"section {name!r}: rows must have dtype {section.dtype} exactly, got {rows.dtype.str}")
        if rows.ndim != 1 + len(section.row_shape) or rows.shape[1:] != section.row_shape:
            expected = ("n", *section.row_shape)
            raise ValueError(f"section {name!r}: rows must have shape ({', '.join(map(str, expected))}), "
                             f"got {rows.shape}")

    def append(self, name, rows):
        """Append rows to a growing section.

        Parameters
        ----------
        name : str
            A section declared with :meth:`declare_growing`.
        rows : ndarray of shape (n, *row_shape), exactly the declared dtype
            ``n`` may be 0. The rows are written to the section's spill file before this returns.
        """
        self._check_open()
        section = self._sections.get(name) if isinstance(name, str) else None
        if section is None or section.row_shape is None or section.filled:
            raise ValueError(f"no growing section named {name!r}; declare it with declare_growing first")
        self._check_rows(section, rows)
        if rows.size:
            data = flat_bytes(np.ascontiguousarray(rows))
            if section.spill is None:
                section.spill_path, fd = self._new_temp()
                section.spill = open(fd, "w+b")
            try:
                with _atomic.naming_no_space(self._path):
                    section.spill.write(data)
                    section.spill.flush()
            except BaseException:
                # Disk full or interrupted: forget the partial rows, so a caller who goes on gets a consistent file;
                # when even that fails, the writer cannot go on.
                try:
                    section.spill.seek(section.nbytes)
                    section.spill.truncate()
                except Exception:
                    self.abort()
                raise
            section.crc = zlib.crc32(data, section.crc)
            section.nbytes += data.size
        section.rows += rows.shape[0]

    # ---- finishing

    def _version_minor(self, sections):
        """The minor version of the file: the lowest that holds the caller's meta and every section dtype."""
        return max([self._minor, *(DTYPE_MINOR.get(section.dtype, 0) for section in sections)])

    def commit(self, meta, user=None):
        """Write the file and put it in place atomically; the writer is closed afterwards.

        Parameters
        ----------
        meta : dict
            The caller's header data (the index layer's method, parameters, N, P), stored as given.
        user : dict or None
            User metadata; None stores an empty map.

        Metadata maps have str keys and values that are None, bool, int (int64 or uint64 range), float, str, bytes,
        or lists and dicts of these; anything else raises TypeError. A header larger than ``MAX_HEADER_BYTES``
        raises ValueError. Both are raised before any file is created, and the writer stays open. An error while
        writing aborts the writer (temporary files removed, ``path`` untouched) and propagates.
        """
        self._check_open()
        check_metadata(meta, "meta")
        if user is None:
            user = {}
        check_metadata(user, "user")
        sections = list(self._sections.values())
        for section in sections:
            if section.row_shape is None:  # fixed: read now, so what is written is what is checksummed
                section.nbytes = section.array.nbytes
                section.crc = zlib.crc32(flat_bytes(section.array))
            elif section.filled:  # written in any order: its CRC needs one pass over its file
                section.crc = self._spill_crc(section)
        header, entries = self._build_header(sections, canonical_metadata(meta), canonical_metadata(user))
        if len(header) > MAX_HEADER_BYTES:
            raise ValueError(
                f"the header would take {len(header)} bytes, more than MAX_HEADER_BYTES = {MAX_HEADER_BYTES}; "
                "store large data in sections, not in metadata"
            )
        try:
            with _atomic.atomic_write(self._path, replace=self._replace) as f:
                f.write(PREAMBLE.pack(MAGIC, FORMAT_VERSION[0], self._version_minor(sections), 0, len(header)))
                f.write(header)
                position = PREAMBLE_SIZE + len(header)
                for section, entry in zip(sections, entries):
                    f.write(bytes(entry["offset"] - position))
                    self._write_section(f, section)
                    position = entry["offset"] + entry["length"]
                if f.tell() != position:  # pragma: no cover - an internal invariant
                    raise RuntimeError(f"wrote {f.tell()} bytes, the header describes {position}")
                self._release()  # the spill files are copied: a crash from here on leaves none of them behind
        except BaseException:
            self.abort()
            raise
        self._release()
        self._state = "committed"

    def abort(self):
        """Remove every temporary file and close the writer. Idempotent; a no-op after a successful commit."""
        if self._state != "open":
            return
        self._state = "aborted"
        self._release()

    # ---- private

    def _check_open(self):
        if self._state != "open":
            raise ValueError(f"writer is closed ({self._state})")

    def _check_new_name(self, name):
        if not isinstance(name, str):
            raise TypeError(f"section name must be a str, got {type(name).__name__}")
        if not 1 <= len(name) <= MAX_NAME_LENGTH:
            raise ValueError(f"section name must have 1 to {MAX_NAME_LENGTH} characters, got {len(name)}")
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"section name {name!r} is not encodable as UTF-8") from None
        if name in self._sections:
            raise ValueError(f"duplicate section name {name!r}")

    def _new_temp(self):
        """A hidden temporary sibling of the target for a spill file; returns (path, fd)."""
        with _atomic.naming_no_space(self._path):
            tmp_path, fd = _atomic.new_temp_sibling(self._path)
        self._temps.append(tmp_path)
        return tmp_path, fd

    def _build_header(self, sections, meta, user):
        """Pack the header; returns (bytes, section entries).

        Offsets depend on the header's length and the length on the offsets (msgpack ints are variable-width), so
        iterate: start from a header packed with offsets computed as if the header were empty, recompute offsets
        from its length, repack. Lengths only grow (larger offsets never pack shorter) and are bounded, so this
        stops, usually after one or two rounds.
        """
        header_length = 0
        while True:
            entries = []
            end = PREAMBLE_SIZE + header_length
            for section in sections:
                offset = align(end)
                entries.append({"crc32": section.crc, "dtype": section.dtype, "length": section.nbytes,  # sorted keys
                                "name": section.name, "offset": offset, "shape": list(section.shape)})
                end = offset + section.nbytes
            packed = msgpack.packb({"meta": meta, "sections": entries, "user": user}, use_bin_type=True)  # sorted
            if len(packed) == header_length:
                break
            header_length = len(packed)
        return packed, entries

    def _spill_chunks(self, section):
        """The bytes of a spilled section, CHUNK_BYTES at a time, from its start (OSError if the spill is short)."""
        with _atomic.naming_no_space(self._path):
            section.spill.flush()
        section.spill.seek(0)
        remaining = section.nbytes
        while remaining:
            chunk = section.spill.read(min(remaining, CHUNK_BYTES))
            if not chunk:
                raise OSError(f"spill file of section {section.name!r} is shorter than its {section.nbytes} bytes")
            yield chunk
            remaining -= len(chunk)

    def _spill_crc(self, section):
        crc = 0
        if section.spill is not None:
            for chunk in self._spill_chunks(section):
                crc = zlib.crc32(chunk, crc)
        return crc

    def _write_section(self, f, section):
        if section.row_shape is None:
            data = flat_bytes(section.array)
            f.write(data)
            return
        if section.spill is not None:
            for chunk in self._spill_chunks(section):
                f.write(chunk)

    def _release(self):
        """Close and remove the spill files; drop the arrays."""
        for section in self._sections.values():
            if section.spill is not None:
                try:
                    section.spill.close()
                except OSError:
                    pass
                section.spill = None
            section.array = None
        for tmp_path in self._temps:
            _atomic.remove_quietly(tmp_path)
        self._temps = []

