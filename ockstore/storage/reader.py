"""Reading a container file: open_file validates the preamble and header in a straight line of early returns and maps
the file read-only without reading section bytes; MappedFile.verify reads everything (docs/FORMAT.md section 8.2).
"""

from __future__ import annotations

import mmap
import os
import stat
import types
import zlib

import msgpack
import numpy as np

from .._closable import Closable
from ..paths import check_input_file
from .layout import (
    ALIGNMENT, CHUNK_BYTES, DTYPE_MINOR, DTYPES, FORMAT_VERSION, MAGIC, MAX_HEADER_BYTES, MAX_NAME_LENGTH, PREAMBLE,
    PREAMBLE_SIZE, SECTION_KEYS, align, check_shape_bytes, flat_bytes, format_error,
)

__all__ = ["open_file", "MappedFile", "SectionCheck"]


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
        raise format_error(path, "bad header", f"section #{index} is not a map but {type(entry).__name__}")
    name = entry.get("name")
    if type(name) is not str:
        raise format_error(path, "bad header", f"section #{index}: 'name' is not a str: {name!r}")
    if not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise format_error(path, "bad header", f"section #{index}: name has {len(name)} characters, "
                                        f"expected 1 to {MAX_NAME_LENGTH}")
    for key in SECTION_KEYS:
        if key not in entry:
            raise format_error(path, "bad header", f"section {name!r}: missing key {key!r}")
    dtype = entry["dtype"]
    if type(dtype) is not str or dtype not in DTYPES:
        raise format_error(path, "bad header", f"section {name!r}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    shape = entry["shape"]
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        raise format_error(path, "bad header", f"section {name!r}: shape {shape!r} is not a list of non-negative ints")
    try:
        check_shape_bytes(shape, np.dtype(dtype).itemsize, f"section {name!r}")
    except ValueError as exc:
        raise format_error(path, "bad header", str(exc)) from None
    for key in ("offset", "length", "crc32"):
        if not _is_count(entry[key]):
            raise format_error(path, "bad header", f"section {name!r}: {key} {entry[key]!r} is not a non-negative int")
    if entry["crc32"] >= 2**32:
        raise format_error(path, "bad header", f"section {name!r}: crc32 {entry['crc32']} is not below 2**32")
    return name, dtype, tuple(shape), entry["offset"], entry["length"], entry["crc32"]


def _read_layout(fd, path, file_size):
    """Every check of docs/FORMAT.md that needs no section byte, in order; returns
    (version, meta, user, sections, header_end) with sections as tuples (name, dtype, shape, offset, length, crc32)
    in header order. A straight line of early returns: the first failed check raises FormatError."""
    # R2: the preamble is there.
    if file_size < PREAMBLE_SIZE:
        raise format_error(path, "file too small", f"{file_size} bytes, the preamble alone takes {PREAMBLE_SIZE}")
    magic, major, minor, _reserved, header_length = PREAMBLE.unpack(_read_at(fd, 0, PREAMBLE_SIZE))
    # R1: the magic.
    if magic != MAGIC:
        hint = ""
        if magic[:4] == MAGIC[:4]:
            hint = " (its start matches: was the file transferred in text mode, converting line endings?)"
        raise format_error(path, "bad magic", f"the file starts with {magic!r}, not {MAGIC!r}{hint}")
    # R3/R4: the major version must be known; any minor of it is accepted. R5: reserved is ignored.
    if major != FORMAT_VERSION[0]:
        raise format_error(path, "unsupported version",
                    f"the file has format version {major}.{minor}; this reader supports major version "
                    f"{FORMAT_VERSION[0]} (writes {FORMAT_VERSION[0]}.{FORMAT_VERSION[1]})")
    # R6: the header length, checked before anything is parsed.
    if header_length > MAX_HEADER_BYTES:
        raise format_error(path, "header too large",
                    f"header length {header_length} exceeds MAX_HEADER_BYTES = {MAX_HEADER_BYTES}")
    header_end = PREAMBLE_SIZE + header_length
    if header_end > file_size:
        raise format_error(path, "header beyond end of file",
                    f"the header ends at byte {header_end}, the file has {file_size} bytes")
    # R7: one msgpack map of exactly H bytes, str keys, no duplicate keys, no extension types.
    try:
        header = msgpack.unpackb(_read_at(fd, PREAMBLE_SIZE, header_length), raw=False, strict_map_key=True,
                                 use_list=True, object_pairs_hook=_unpack_map, list_hook=_unpack_list,
                                 ext_hook=_unpack_ext)
    except _HeaderProfileError as exc:
        raise format_error(path, "header not valid msgpack", str(exc)) from exc
    except Exception as exc:  # msgpack raises ExtraData, OutOfData, FormatError, StackError, ValueError, TypeError...
        raise format_error(path, "header not valid msgpack", f"{type(exc).__name__}: {exc}") from exc
    # R8: the three keys; others are ignored.
    if not isinstance(header, dict):
        raise format_error(path, "bad header", f"the header is not a map but {type(header).__name__}")
    for key, kind in (("sections", list), ("meta", dict), ("user", dict)):
        if key not in header:
            raise format_error(path, "bad header", f"missing key {key!r}")
        if not isinstance(header[key], kind):
            raise format_error(path, "bad header", f"{key!r} is not a {'list' if kind is list else 'map'} "
                                            f"but {type(header[key]).__name__}")
    # R9-R11: every section map, then R10: unique names.
    sections = []
    names = set()
    for index, entry in enumerate(header["sections"]):
        section = _check_section_entry(path, index, entry)
        if section[0] in names:
            raise format_error(path, "duplicate section name", f"section {section[0]!r} appears more than once")
        names.add(section[0])
        if DTYPE_MINOR.get(section[1], 0) > minor:
            raise format_error(path, "bad header", f"section {section[0]!r}: dtype {section[1]} needs format version "
                                                   f"{major}.{DTYPE_MINOR[section[1]]}, the file says {major}.{minor}")
        sections.append(section)
    # R12, R13, R11: each section's place and size.
    for name, dtype, shape, offset, length, _crc in sections:
        if offset % ALIGNMENT:
            raise format_error(path, "misaligned section", f"section {name!r}: offset {offset} is not a multiple of "
                                                    f"{ALIGNMENT}")
        if offset < header_end:
            raise format_error(path, "section overlaps header", f"section {name!r}: offset {offset} is before the end of "
                                                         f"the header at {header_end}")
        if offset + length > file_size:
            raise format_error(path, "section beyond end of file", f"section {name!r}: bytes {offset}..{offset + length} "
                                                            f"but the file has {file_size} bytes")
        expected = np.dtype(dtype).itemsize
        for d in shape:
            expected *= d
        if expected != length:
            raise format_error(path, "section size mismatch", f"section {name!r}: shape {list(shape)} of {dtype} takes "
                                                       f"{expected} bytes, the header says length {length}")
    # R14, R15: in file order, no overlap and nothing but alignment padding in between.
    end, previous = header_end, "the header"
    for name, _dtype, _shape, offset, length, _crc in sorted(sections, key=lambda s: (s[3], s[4])):
        if offset < end:
            raise format_error(path, "overlapping sections", f"section {name!r} at {offset} starts before the end of "
                                                      f"{previous} at {end}")
        if offset != align(end):
            raise format_error(path, "gap before section", f"section {name!r} starts at {offset}, expected {align(end)}: "
                                                    f"only padding to the next multiple of {ALIGNMENT} may follow "
                                                    f"{previous}")
        end, previous = offset + length, f"section {name!r}"
    # R16: the file ends right after the last section (or the header).
    if file_size != end:
        raise format_error(path, "trailing bytes", f"{file_size - end} bytes after the end of {previous} at {end}")
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
    path = check_input_file(path, "path")
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
        raise format_error(path, "file changed while opening", f"{st.st_size} bytes when checked, {len(mm)} when mapped")
    return MappedFile(path, version, meta, user, sections, header_end, mm)


class MappedFile(Closable):
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
                raise format_error(self.path, "non-zero padding", f"bytes {end}..{offset} before section {name!r} "
                                                           "are not all zero")
            end = offset + length
            flat = flat_bytes(self._views[name])
            actual = 0
            for start in range(0, length, CHUNK_BYTES):
                actual = zlib.crc32(flat[start:start + CHUNK_BYTES], actual)
            if actual != crc:
                raise format_error(self.path, "CRC mismatch", f"section {name!r}: the header says {crc:#010x}, "
                                                       f"the data has {actual:#010x}")

    def section_check(self, names=None, *, advice=""):
        """A :class:`SectionCheck` of the CRC-32 of sections ``names`` (every section when None), computed while the
        caller reads them in order: a copy of the sections checks them in the same pass (R18)."""
        self._check_open()
        return SectionCheck(self, self._info if names is None else names, advice)

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



class SectionCheck:
    """The CRC-32 of some sections of a MappedFile, computed as a caller streams through them (R18, as ``verify``).

    A caller that copies the rows of a file step by step (a collection's merge, compaction or training commit) calls
    :meth:`advance` after each step with the rows done and the rows in all: each section is checked up to the same
    fraction of its bytes (exactly the rows done for a section of one entry per row), so the check reads the pages the
    copy reads while they are in memory, instead of a second pass over the file. A section whose bytes are all read and
    do not match its CRC raises FormatError "CRC mismatch" naming the file and the section, followed by ``advice``.
    :meth:`finish` checks what is left.
    """

    def __init__(self, mf, names, advice=""):
        self._path = mf.path
        self._advice = advice
        self._items = []  # [name, bytes, expected crc, bytes checked, running crc]
        for name in names:
            if name not in mf._info:
                raise KeyError(f"no section named {name!r} in {mf.path!r}")
            self._items.append([name, flat_bytes(mf._views[name]), mf._info[name][5], 0, 0])

    def advance(self, done, total):
        """Check every section up to ``done / total`` of its bytes (all of them when done >= total)."""
        for item in self._items:
            name, data, expected, position, crc = item
            target = data.size if done >= total else data.size * done // total
            while position < target:
                stop = min(target, position + CHUNK_BYTES)
                crc = zlib.crc32(data[position:stop], crc)
                position = stop
            item[3], item[4] = position, crc
            if position == data.size and crc != expected:
                raise format_error(self._path, "CRC mismatch", f"section {name!r}: the header says {expected:#010x}, "
                                                               f"the data has {crc:#010x}{self._advice}")

    def finish(self):
        """Check what is left of every section."""
        self.advance(1, 1)
