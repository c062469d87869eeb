"""The rules of the ockstore container that both the writer and the reader apply: constants, the dtype whitelist,
shape limits, what metadata may hold, and the FormatError of a failed check (docs/FORMAT.md sections 2-4 and 9).
"""

from __future__ import annotations

import struct

import numpy as np

from ..errors import FormatError

__all__ = [
    "MAGIC", "FORMAT_VERSION", "DTYPE_MINOR", "MAX_HEADER_BYTES", "ALIGNMENT", "DTYPES", "MAX_NAME_LENGTH", "MAX_NDIM",
    "MAX_METADATA_DEPTH", "PREAMBLE", "PREAMBLE_SIZE", "CHUNK_BYTES", "SECTION_KEYS", "align", "dtype_code",
    "check_shape_bytes", "flat_bytes", "check_metadata", "canonical_metadata", "format_error",
]

MAGIC = b"\x89OCK\r\n\x1a\n"
# (major, minor): the newest version this module writes; readers accept any minor of major 1. Writers write the
# lowest minor that holds what the file uses (DTYPE_MINOR; the index layer asks for more when its meta needs it), so
# files without newer features stay byte-identical to those of earlier versions. 1.1: float16 sections (and the index
# layer's metric and stored vectors); 1.2: the index layer's inverted files (docs/FORMAT.md section 14); 1.3: files of
# stored vectors without codes (section 15), the norm term of cosine indexes (section 11), fast-scan files, 4-bit
# codes in blocks (section 16), and vectors stored as sq8 codes with the model's value ranges (section 17); 1.4: the
# index layer's segments that refer to their collection's quantizer file instead of holding a model (section 18).
FORMAT_VERSION = (1, 4)
MAX_HEADER_BYTES = 16 * 1024 * 1024
ALIGNMENT = 64  # every section starts at a multiple of this (a cache line; also any dtype's alignment)
DTYPES = ("<u1", "<u2", "<i4", "<u4", "<i8", "<f4", "<f8", "<f2")
DTYPE_MINOR = {"<f2": 1}  # dtypes added after 1.0 -> the minor version that introduced them (R23)
MAX_NAME_LENGTH = 255  # characters of a section name
MAX_NDIM = 32  # dimensions of a section (NumPy 1 allowed 32, NumPy 2 allows 64; 32 is portable)
MAX_METADATA_DEPTH = 64  # nesting of lists and maps in meta/user; also stops reference cycles

PREAMBLE = struct.Struct("<8sHHIQ")  # magic, major, minor, reserved, header length
PREAMBLE_SIZE = PREAMBLE.size  # 24
_MAX_ARRAY_BYTES = 2**63 - 1  # NumPy's limit on prod(non-zero dims) * itemsize, even for an empty array
CHUNK_BYTES = 16 * 1024 * 1024  # spill copy and CRC chunks: bounds the memory a commit or verify touches at once
SECTION_KEYS = ("name", "dtype", "shape", "offset", "length", "crc32")


def align(n):
    """The smallest multiple of ALIGNMENT that is >= n."""
    return -(-n // ALIGNMENT) * ALIGNMENT


def dtype_code(dtype, what):
    """The whitelist string of ``dtype`` (e.g. ``"<f4"``); TypeError for anything else, big-endian included."""
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what}: not a NumPy dtype: {dtype!r} ({exc})") from None
    for code in DTYPES:
        if dt == np.dtype(code):
            return code
    raise TypeError(f"{what}: dtype {dt.str} is not allowed; allowed dtypes are {', '.join(DTYPES)}")


def check_shape_bytes(shape, itemsize, what):
    """Raise ValueError when NumPy could not represent ``shape`` (even an empty array): too many dimensions, or the
    non-zero dimensions multiply to more than 2**63 - 1 bytes."""
    if len(shape) > MAX_NDIM:
        raise ValueError(f"{what}: {len(shape)} dimensions, at most {MAX_NDIM} are allowed")
    total = itemsize
    for d in shape:
        total *= max(d, 1)
    if total > _MAX_ARRAY_BYTES:
        raise ValueError(f"{what}: shape {tuple(shape)} is too large for a NumPy array")


def flat_bytes(arr):
    """A 1-D uint8 view of a C-contiguous array (no copy; also for 0-d and empty arrays)."""
    return arr.reshape(-1).view(np.uint8)


# --------------------------------------------------------------------------------------------------------------------
# metadata


def check_metadata(value, what):
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


def canonical_metadata(value):
    """A copy of checked metadata with every map's keys in ascending order (R20: same content, same bytes)."""
    if isinstance(value, dict):
        return {key: canonical_metadata(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [canonical_metadata(item) for item in value]
    return value



def format_error(path, check, detail):
    """The FormatError of a failed check: names the file, the check and (in ``detail``) the section or key."""
    return FormatError(f"{path!r}: {check}: {detail}")
