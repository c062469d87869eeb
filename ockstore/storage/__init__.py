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

from .layout import (
    ALIGNMENT, DTYPES, FORMAT_VERSION, MAGIC, MAX_HEADER_BYTES, MAX_METADATA_DEPTH, MAX_NAME_LENGTH, MAX_NDIM,
    PREAMBLE_SIZE, canonical_metadata, check_metadata, dtype_code, format_error,
)
from .reader import MappedFile, open_file
from .writer import FileWriter

__all__ = [
    "MAGIC", "FORMAT_VERSION", "MAX_HEADER_BYTES", "ALIGNMENT", "DTYPES", "MAX_NAME_LENGTH", "MAX_NDIM",
    "MAX_METADATA_DEPTH", "PREAMBLE_SIZE", "FileWriter", "MappedFile", "open_file", "check_metadata",
    "canonical_metadata", "format_error", "dtype_code",
]
