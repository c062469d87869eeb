"""The ockstore file container: named, typed, 64-byte-aligned sections behind a msgpack header.

This module turns bytes into named NumPy arrays and back, and nothing more: it knows nothing of quantizers, codes or
indexes. ``docs/FORMAT.md`` is the normative specification; the rule numbers (R1, R2, ...) quoted in comments below
refer to it.

Layout, in one picture (little-endian, offsets absolute from the start of the file)::

    0   magic  b"\\x89OCK\\r\\n\\x1a\\n"          8 bytes
    8   major  u16      10  minor  u16      12  reserved u32 (0)      16  header length H  u64
    24  header: H bytes of msgpack  {"sections": [...], "meta": {...}, "user": {...}}
        zero padding up to a multiple of 64, then section 0, zero padding, section 1, ...; the file ends right after
        the last section's last byte (right after the header when there are no sections).

Writing goes through :class:`FileWriter` (atomic: temporary sibling file, fsync, rename, folder fsync); reading goes
through :func:`open_file`, which validates the header in a straight line of early returns and maps the file
read-only without touching section bytes; :meth:`MappedFile.verify` reads everything and checks the CRC-32s.
"""

from __future__ import annotations

import errno
import mmap
import os
import secrets
import stat
import struct
import types
import zlib

import msgpack
import numpy as np

from ._validation import check_int, check_output_path, check_regular_file
from .errors import FormatError

__all__ = [
    "MAGIC",
    "FORMAT_VERSION",
    "MAX_HEADER_BYTES",
    "ALIGNMENT",
    "DTYPES",
    "MAX_NAME_LENGTH",
    "MAX_NDIM",
    "PREAMBLE_SIZE",
    "FileWriter",
    "MappedFile",
    "open_file",
]

MAGIC = b"\x89OCK\r\n\x1a\n"
FORMAT_VERSION = (1, 0)  # (major, minor) written by this module; readers accept any minor of major 1
MAX_HEADER_BYTES = 16 * 1024 * 1024
ALIGNMENT = 64  # every section starts at a multiple of this (a cache line; also any dtype's alignment)
DTYPES = ("<u1", "<u2", "<i4", "<u4", "<i8", "<f4", "<f8")
MAX_NAME_LENGTH = 255  # characters of a section name
MAX_NDIM = 32  # dimensions of a section (NumPy 1 allowed 32, NumPy 2 allows 64; 32 is portable)
MAX_METADATA_DEPTH = 64  # nesting of lists and maps in meta/user; also stops reference cycles

_PREAMBLE = struct.Struct("<8sHHIQ")  # magic, major, minor, reserved, header length
PREAMBLE_SIZE = _PREAMBLE.size  # 24
_MAX_ARRAY_BYTES = 2**63 - 1  # NumPy's limit on prod(non-zero dims) * itemsize, even for an empty array
_CHUNK_BYTES = 16 * 1024 * 1024  # spill copy and CRC chunks: bounds the memory a commit or verify touches at once
_SECTION_KEYS = ("name", "dtype", "shape", "offset", "length", "crc32")


def _align(n):
    """The smallest multiple of ALIGNMENT that is >= n."""
    return -(-n // ALIGNMENT) * ALIGNMENT


def _dtype_code(dtype, what):
    """The whitelist string of ``dtype`` (e.g. ``"<f4"``); TypeError for anything else, big-endian included."""
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what}: not a NumPy dtype: {dtype!r} ({exc})") from None
    for code in DTYPES:
        if dt == np.dtype(code):
            return code
    raise TypeError(f"{what}: dtype {dt.str} is not allowed; allowed dtypes are {', '.join(DTYPES)}")


def _check_shape_bytes(shape, itemsize, what):
    """Raise ValueError when NumPy could not represent ``shape`` (even an empty array): too many dimensions, or the
    non-zero dimensions multiply to more than 2**63 - 1 bytes."""
    if len(shape) > MAX_NDIM:
        raise ValueError(f"{what}: {len(shape)} dimensions, at most {MAX_NDIM} are allowed")
    total = itemsize
    for d in shape:
        total *= max(d, 1)
    if total > _MAX_ARRAY_BYTES:
        raise ValueError(f"{what}: shape {tuple(shape)} is too large for a NumPy array")


def _flat_bytes(arr):
    """A 1-D uint8 view of a C-contiguous array (no copy; also for 0-d and empty arrays)."""
    return arr.reshape(-1).view(np.uint8)


# --------------------------------------------------------------------------------------------------------------------
# metadata


def _check_metadata(value, what):
    """Check that ``value`` is a dict that the header can hold (R22); TypeError naming the offending item."""
    if not isinstance(value, dict):
        raise TypeError(f"{what} must be a dict with str keys, got {type(value).__name__}")
    _check_meta_value(value, what, 0)


def _check_meta_value(value, where, depth):
    if value is None or isinstance(value, (bool, float, bytes)):
        return
    if isinstance(value, int):
        if not -(2**63) <= value < 2**64:
            raise TypeError(f"{where}: int {value} does not fit in int64 or uint64")
        return
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise TypeError(f"{where}: str is not encodable as UTF-8 ({exc.reason})") from None
        return
    if isinstance(value, (list, dict)):
        if depth >= MAX_METADATA_DEPTH:
            raise TypeError(f"{where}: nested deeper than {MAX_METADATA_DEPTH} levels (or a reference cycle)")
        if isinstance(value, list):
            for i, item in enumerate(value):
                _check_meta_value(item, f"{where}[{i}]", depth + 1)
        else:
            for key, item in value.items():
                if not isinstance(key, str):
                    raise TypeError(f"{where}: map keys must be str, got {type(key).__name__} {key!r}")
                _check_meta_value(key, f"{where} key {key!r}", depth + 1)
                _check_meta_value(item, f"{where}[{key!r}]", depth + 1)
        return
    raise TypeError(
        f"{where}: {type(value).__name__} cannot be stored; metadata values are None, bool, int, float, str, bytes, "
        "lists and dicts of these"
    )


def _canonical(value):
    """A copy of checked metadata with every map's keys in ascending order (R20: same content, same bytes)."""
    if isinstance(value, dict):
        return {key: _canonical(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    return value


# --------------------------------------------------------------------------------------------------------------------
# writing


def _fsync_folder(folder):
    """Make a rename in ``folder`` durable; filesystems that cannot fsync a directory are tolerated."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


class _Section:
    """One section of a FileWriter: a fixed array, or a growing one spilled to a temporary file."""

    __slots__ = ("name", "dtype", "array", "row_shape", "rows", "nbytes", "crc", "spill", "spill_path")

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
    """

    def __init__(self, path):
        self._path = check_output_path(path, "path")
        self._folder = os.path.dirname(os.path.abspath(self._path))
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
        code = _dtype_code(array.dtype, f"section {name!r}")
        _check_shape_bytes(array.shape, array.itemsize, f"section {name!r}")
        if not array.flags.c_contiguous:
            array = array.copy(order="C")
        self._sections[name] = _Section(name, code, array=array)

    def declare_growing(self, name, dtype, row_shape=()):
        """Declare a section whose rows come later through :meth:`append`; zero rows are fine.

        Its shape in the file is ``(n_rows, *row_shape)``.
        """
        self._check_open()
        self._check_new_name(name)
        code = _dtype_code(dtype, f"section {name!r}")
        if isinstance(row_shape, (str, bytes)) or not hasattr(row_shape, "__iter__"):
            raise TypeError(f"section {name!r}: row_shape must be a tuple of ints, got {type(row_shape).__name__}")
        row_shape = tuple(check_int(d, f"section {name!r}: row_shape", min_value=0) for d in row_shape)
        _check_shape_bytes((0, *row_shape), np.dtype(code).itemsize, f"section {name!r}")
        self._sections[name] = _Section(name, code, row_shape=row_shape)

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
        if section is None or section.row_shape is None:
            raise ValueError(f"no growing section named {name!r}; declare it with declare_growing first")
        if not isinstance(rows, np.ndarray):
            raise TypeError(f"section {name!r}: rows must be a numpy.ndarray, got {type(rows).__name__}")
        if rows.dtype != np.dtype(section.dtype):
            raise TypeError(f"section {name!r}: rows must have dtype {section.dtype} exactly, got {rows.dtype.str}")
        if rows.ndim != 1 + len(section.row_shape) or rows.shape[1:] != section.row_shape:
            expected = ("n", *section.row_shape)
            raise ValueError(f"section {name!r}: rows must have shape ({', '.join(map(str, expected))}), "
                             f"got {rows.shape}")
        if rows.size:
            data = _flat_bytes(np.ascontiguousarray(rows))
            if section.spill is None:
                section.spill_path, fd = self._new_temp()
                section.spill = open(fd, "w+b")
            try:
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
        _check_metadata(meta, "meta")
        if user is None:
            user = {}
        _check_metadata(user, "user")
        sections = list(self._sections.values())
        for section in sections:
            if section.row_shape is None:  # fixed: read now, so what is written is what is checksummed
                section.nbytes = section.array.nbytes
                section.crc = zlib.crc32(_flat_bytes(section.array))
        header, entries = self._build_header(sections, _canonical(meta), _canonical(user))
        if len(header) > MAX_HEADER_BYTES:
            raise ValueError(
                f"the header would take {len(header)} bytes, more than MAX_HEADER_BYTES = {MAX_HEADER_BYTES}; "
                "store large data in sections, not in metadata"
            )
        try:
            tmp_path, fd = self._new_temp()
            with open(fd, "wb") as f:
                f.write(_PREAMBLE.pack(MAGIC, FORMAT_VERSION[0], FORMAT_VERSION[1], 0, len(header)))
                f.write(header)
                position = PREAMBLE_SIZE + len(header)
                for section, entry in zip(sections, entries):
                    f.write(bytes(entry["offset"] - position))
                    self._write_section(f, section)
                    position = entry["offset"] + entry["length"]
                if f.tell() != position:  # pragma: no cover - an internal invariant
                    raise RuntimeError(f"wrote {f.tell()} bytes, the header describes {position}")
                f.flush()
                os.fsync(f.fileno())
            self._release(keep=tmp_path)  # the spill files are no longer needed: a crash from here leaves none
            os.replace(tmp_path, self._path)
            self._temps.remove(tmp_path)
        except BaseException:
            self.abort()
            raise
        self._release()
        self._state = "committed"
        _fsync_folder(self._folder)

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
        """Create a hidden sibling ``.<name>.<random>.tmp`` of the target; returns (path, fd)."""
        base = os.path.basename(self._path)[:200]  # keep the temporary name within NAME_MAX
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
        while True:
            tmp_path = os.path.join(self._folder, f".{base}.{secrets.token_hex(6)}.tmp")
            try:
                fd = os.open(tmp_path, flags, 0o666)  # the umask applies, as for any new file
            except FileExistsError:  # pragma: no cover - 48 random bits
                continue
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
                offset = _align(end)
                entries.append({"crc32": section.crc, "dtype": section.dtype, "length": section.nbytes,  # sorted keys
                                "name": section.name, "offset": offset, "shape": list(section.shape)})
                end = offset + section.nbytes
            packed = msgpack.packb({"meta": meta, "sections": entries, "user": user}, use_bin_type=True)  # sorted
            if len(packed) == header_length:
                break
            header_length = len(packed)
        return packed, entries

    def _write_section(self, f, section):
        if section.row_shape is None:
            data = _flat_bytes(section.array)
            f.write(data)
            return
        if section.spill is not None:
            section.spill.flush()
            section.spill.seek(0)
            remaining = section.nbytes
            while remaining:
                chunk = section.spill.read(min(remaining, _CHUNK_BYTES))
                if not chunk:
                    raise OSError(f"spill file of section {section.name!r} is shorter than its {section.nbytes} bytes")
                f.write(chunk)
                remaining -= len(chunk)

    def _release(self, keep=None):
        """Close and remove the spill files and every temporary file but ``keep``; drop the arrays."""
        for section in self._sections.values():
            if section.spill is not None:
                try:
                    section.spill.close()
                except OSError:
                    pass
                section.spill = None
            section.array = None
        for tmp_path in self._temps:
            if tmp_path != keep:
                try:
                    os.unlink(tmp_path)
                except FileNotFoundError:
                    pass
        self._temps = [keep] if keep is not None else []


# --------------------------------------------------------------------------------------------------------------------
# reading


def _fail(path, check, detail):
    """The FormatError of a failed check: names the file, the check and (in ``detail``) the section."""
    return FormatError(f"{path!r}: {check}: {detail}")


def _read_at(fd, offset, size):
    """Read up to ``size`` bytes at ``offset`` (fewer only at the end of the file)."""
    chunks = []
    while size > 0:
        if hasattr(os, "pread"):
            chunk = os.pread(fd, size, offset)
        else:  # pragma: no cover - Windows
            os.lseek(fd, offset, os.SEEK_SET)
            chunk = os.read(fd, size)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        size -= len(chunk)
    return b"".join(chunks)


class _HeaderProfileError(Exception):
    """Raised by the unpack hooks for msgpack that parses but is outside the header's profile (R7)."""


def _unpack_map(pairs):
    result = {}
    for key, value in pairs:
        if type(key) is not str:
            raise _HeaderProfileError(f"map key {key!r} is not a str")
        if key in result:
            raise _HeaderProfileError(f"duplicate map key {key!r}")
        if isinstance(value, msgpack.Timestamp):
            raise _HeaderProfileError(f"value of {key!r} is a msgpack timestamp (extension types are not allowed)")
        result[key] = value
    return result


def _unpack_list(items):
    for item in items:
        if isinstance(item, msgpack.Timestamp):
            raise _HeaderProfileError("a list holds a msgpack timestamp (extension types are not allowed)")
    return items


def _unpack_ext(code, data):
    raise _HeaderProfileError(f"msgpack extension type {code} is not allowed")


def _is_count(value):
    """A non-negative integer (msgpack ints; bool is not one)."""
    return type(value) is int and value >= 0


def _check_section_entry(path, index, entry):
    """Check the types of one section map (R9-R11); returns (name, dtype, shape, offset, length, crc32)."""
    if not isinstance(entry, dict):
        raise _fail(path, "bad header", f"section #{index} is not a map but {type(entry).__name__}")
    name = entry.get("name")
    if type(name) is not str:
        raise _fail(path, "bad header", f"section #{index}: 'name' is not a str: {name!r}")
    if not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise _fail(path, "bad header", f"section #{index}: name has {len(name)} characters, "
                                        f"expected 1 to {MAX_NAME_LENGTH}")
    for key in _SECTION_KEYS:
        if key not in entry:
            raise _fail(path, "bad header", f"section {name!r}: missing key {key!r}")
    dtype = entry["dtype"]
    if type(dtype) is not str or dtype not in DTYPES:
        raise _fail(path, "bad header", f"section {name!r}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    shape = entry["shape"]
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        raise _fail(path, "bad header", f"section {name!r}: shape {shape!r} is not a list of non-negative ints")
    try:
        _check_shape_bytes(shape, np.dtype(dtype).itemsize, f"section {name!r}")
    except ValueError as exc:
        raise _fail(path, "bad header", str(exc)) from None
    for key in ("offset", "length", "crc32"):
        if not _is_count(entry[key]):
            raise _fail(path, "bad header", f"section {name!r}: {key} {entry[key]!r} is not a non-negative int")
    if entry["crc32"] >= 2**32:
        raise _fail(path, "bad header", f"section {name!r}: crc32 {entry['crc32']} is not below 2**32")
    return name, dtype, tuple(shape), entry["offset"], entry["length"], entry["crc32"]


def _read_layout(fd, path, file_size):
    """Every check of docs/FORMAT.md that needs no section byte, in order; returns
    (version, meta, user, sections, header_end) with sections as tuples (name, dtype, shape, offset, length, crc32)
    in header order. A straight line of early returns: the first failed check raises FormatError."""
    # R2: the preamble is there.
    if file_size < PREAMBLE_SIZE:
        raise _fail(path, "file too small", f"{file_size} bytes, the preamble alone takes {PREAMBLE_SIZE}")
    magic, major, minor, _reserved, header_length = _PREAMBLE.unpack(_read_at(fd, 0, PREAMBLE_SIZE))
    # R1: the magic.
    if magic != MAGIC:
        hint = ""
        if magic[:4] == MAGIC[:4]:
            hint = " (its start matches: was the file transferred in text mode, converting line endings?)"
        raise _fail(path, "bad magic", f"the file starts with {magic!r}, not {MAGIC!r}{hint}")
    # R3/R4: the major version must be known; any minor of it is accepted. R5: reserved is ignored.
    if major != FORMAT_VERSION[0]:
        raise _fail(path, "unsupported version",
                    f"the file has format version {major}.{minor}; this reader supports major version "
                    f"{FORMAT_VERSION[0]} (writes {FORMAT_VERSION[0]}.{FORMAT_VERSION[1]})")
    # R6: the header length, checked before anything is parsed.
    if header_length > MAX_HEADER_BYTES:
        raise _fail(path, "header too large",
                    f"header length {header_length} exceeds MAX_HEADER_BYTES = {MAX_HEADER_BYTES}")
    header_end = PREAMBLE_SIZE + header_length
    if header_end > file_size:
        raise _fail(path, "header beyond end of file",
                    f"the header ends at byte {header_end}, the file has {file_size} bytes")
    # R7: one msgpack map of exactly H bytes, str keys, no duplicate keys, no extension types.
    try:
        header = msgpack.unpackb(_read_at(fd, PREAMBLE_SIZE, header_length), raw=False, strict_map_key=True,
                                 use_list=True, object_pairs_hook=_unpack_map, list_hook=_unpack_list,
                                 ext_hook=_unpack_ext)
    except _HeaderProfileError as exc:
        raise _fail(path, "header not valid msgpack", str(exc)) from exc
    except Exception as exc:  # msgpack raises ExtraData, OutOfData, FormatError, StackError, ValueError, TypeError...
        raise _fail(path, "header not valid msgpack", f"{type(exc).__name__}: {exc}") from exc
    # R8: the three keys; others are ignored.
    if not isinstance(header, dict):
        raise _fail(path, "bad header", f"the header is not a map but {type(header).__name__}")
    for key, kind in (("sections", list), ("meta", dict), ("user", dict)):
        if key not in header:
            raise _fail(path, "bad header", f"missing key {key!r}")
        if not isinstance(header[key], kind):
            raise _fail(path, "bad header", f"{key!r} is not a {'list' if kind is list else 'map'} "
                                            f"but {type(header[key]).__name__}")
    # R9-R11: every section map, then R10: unique names.
    sections = []
    names = set()
    for index, entry in enumerate(header["sections"]):
        section = _check_section_entry(path, index, entry)
        if section[0] in names:
            raise _fail(path, "duplicate section name", f"section {section[0]!r} appears more than once")
        names.add(section[0])
        sections.append(section)
    # R12, R13, R11: each section's place and size.
    for name, dtype, shape, offset, length, _crc in sections:
        if offset % ALIGNMENT:
            raise _fail(path, "misaligned section", f"section {name!r}: offset {offset} is not a multiple of "
                                                    f"{ALIGNMENT}")
        if offset < header_end:
            raise _fail(path, "section overlaps header", f"section {name!r}: offset {offset} is before the end of "
                                                         f"the header at {header_end}")
        if offset + length > file_size:
            raise _fail(path, "section beyond end of file", f"section {name!r}: bytes {offset}..{offset + length} "
                                                            f"but the file has {file_size} bytes")
        expected = np.dtype(dtype).itemsize
        for d in shape:
            expected *= d
        if expected != length:
            raise _fail(path, "section size mismatch", f"section {name!r}: shape {list(shape)} of {dtype} takes "
                                                       f"{expected} bytes, the header says length {length}")
    # R14, R15: in file order, no overlap and nothing but alignment padding in between.
    end, previous = header_end, "the header"
    for name, _dtype, _shape, offset, length, _crc in sorted(sections, key=lambda s: (s[3], s[4])):
        if offset < end:
            raise _fail(path, "overlapping sections", f"section {name!r} at {offset} starts before the end of "
                                                      f"{previous} at {end}")
        if offset != _align(end):
            raise _fail(path, "gap before section", f"section {name!r} starts at {offset}, expected {_align(end)}: "
                                                    f"only padding to the next multiple of {ALIGNMENT} may follow "
                                                    f"{previous}")
        end, previous = offset + length, f"section {name!r}"
    # R16: the file ends right after the last section (or the header).
    if file_size != end:
        raise _fail(path, "trailing bytes", f"{file_size - end} bytes after the end of {previous} at {end}")
    return (major, minor), header["meta"], header["user"], sections, header_end


def open_file(path):
    """Open a container file: validate its preamble and header, map it read-only, return a :class:`MappedFile`.

    Costs the same for any file size: only the preamble and the header are read; sections are views into the mapping
    that read nothing until used. Call :meth:`MappedFile.verify` to read everything and check the CRC-32s.

    Raises
    ------
    TypeError
        ``path`` is not a str or os.PathLike.
    FileNotFoundError
        No file at ``path``.
    ValueError
        ``path`` is not a regular file (a FIFO, a device, a folder); refused without reading, so nothing blocks.
    FormatError
        The file breaks a rule of docs/FORMAT.md; the message names the file, the check and the section.
    """
    path = check_regular_file(path, "path")
    # O_NONBLOCK: should the path have been swapped for a FIFO since the check, opening it still returns at once.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"path: {path!r} is not a regular file")
        version, meta, user, sections, header_end = _read_layout(fd, path, st.st_size)
        mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)  # the mapping keeps its own descriptor
    finally:
        os.close(fd)
    if len(mm) != st.st_size:
        mm.close()
        raise _fail(path, "file changed while opening", f"{st.st_size} bytes when checked, {len(mm)} when mapped")
    return MappedFile(path, version, meta, user, sections, header_end, mm)


class MappedFile:
    """A container file opened read-only by :func:`open_file` (do not construct it directly).

    Attributes
    ----------
    path : str
    version : tuple of (int, int)
        The file's format version (major, minor).
    meta : dict
        The writer's ``meta`` map, as stored.
    user : dict
        The user metadata map, as stored.
    sections : mapping of str to ndarray
        Read-only views into one read-only memory map, in header order; shape and dtype as in the header.
        A read-only mapping (``types.MappingProxyType``); ValueError after :meth:`close`.

    Views handed out stay valid after :meth:`close` (they keep the mapping alive until they are garbage collected).
    The file may be replaced or deleted while open: the mapping keeps reading the old contents. It must not be
    truncated in place while open (ockstore writers never do; reading a truncated mapping kills the process with
    SIGBUS).
    """

    def __init__(self, path, version, meta, user, sections, header_end, mm):
        self.path = path
        self.version = version
        self.meta = meta
        self.user = user
        self._info = {s[0]: s for s in sections}
        self._order = sorted(sections, key=lambda s: (s[3], s[4]))  # file order, for verify
        self._header_end = header_end
        self._mm = mm
        self._views = {}
        for name, dtype, shape, offset, _length, _crc in sections:
            count = 1
            for d in shape:
                count *= d
            view = np.frombuffer(mm, dtype=np.dtype(dtype), count=count, offset=offset).reshape(shape)
            self._views[name] = view  # non-writeable: the buffer is an ACCESS_READ mmap
        self._closed = False

    def __repr__(self):
        state = "closed" if self._closed else f"{len(self._info)} sections"
        return f"<MappedFile {self.path!r} v{self.version[0]}.{self.version[1]}, {state}>"

    def __enter__(self):
        self._check_open()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False

    @property
    def closed(self):
        return self._closed

    @property
    def sections(self):
        self._check_open()
        return types.MappingProxyType(self._views)

    def section_info(self, name):
        """The header's entry of section ``name``: dict with dtype (str), shape (tuple), offset, length, crc32."""
        self._check_open()
        if name not in self._info:
            raise KeyError(f"no section named {name!r} in {self.path!r}")
        _name, dtype, shape, offset, length, crc = self._info[name]
        return {"dtype": dtype, "shape": shape, "offset": offset, "length": length, "crc32": crc}

    def verify(self):
        """Read every byte after the header: padding must be zero (R17) and each section must match its CRC-32
        (R18). Returns None or raises FormatError naming the section (or the padding's offset)."""
        self._check_open()
        end = self._header_end
        for name, _dtype, _shape, offset, length, crc in self._order:
            if offset > end and self._mm[end:offset].count(0) != offset - end:
                raise _fail(self.path, "non-zero padding", f"bytes {end}..{offset} before section {name!r} "
                                                           "are not all zero")
            end = offset + length
            flat = _flat_bytes(self._views[name])
            actual = 0
            for start in range(0, length, _CHUNK_BYTES):
                actual = zlib.crc32(flat[start:start + _CHUNK_BYTES], actual)
            if actual != crc:
                raise _fail(self.path, "CRC mismatch", f"section {name!r}: the header says {crc:#010x}, "
                                                       f"the data has {actual:#010x}")

    def close(self):
        """Release the mapping. Idempotent. Views handed out keep it alive until they are garbage collected."""
        if self._closed:
            return
        self._closed = True
        self._views = {}
        mm, self._mm = self._mm, None
        try:
            mm.close()
        except BufferError:  # views still exist outside: they hold the mapping; it is unmapped when they go
            pass

    def _check_open(self):
        if self._closed:
            raise ValueError(f"file is closed: {self.path!r}")
