"""Helpers of the container tests (tests/storage/): files written with ``FileWriter`` or saved from hand-made bytes,
the metadata as the writer canonicalises it, and the FormatError check of ``open_file``.
"""

from __future__ import annotations

import numpy as np

import helpers
from ockstore.storage import FileWriter, open_file

DTYPES = ["<u1", "<u2", "<i4", "<u4", "<i8", "<f4", "<f8", "<f2"]


def canonical(value):
    """Metadata with map keys sorted, as the writer stores it (R20)."""
    if isinstance(value, dict):
        return {k: canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def save(tmp_path, data, name="f.ock"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def small_sections():
    """Two small sections: 'a' (3, 4) float32 and 'b' (5, 8) uint8."""
    return [("a", np.arange(12, dtype="<f4").reshape(3, 4)), ("b", np.arange(40, dtype="<u1").reshape(5, 8))]


def expect_format_error(path, check, section=None, *, when="open"):
    """open_file (and, for when="verify", verify) must raise FormatError naming the file, the check and section."""
    return helpers.expect_format_error(open_file, path, check, section, when=when)


def write_file(path, sections=(), growing=(), meta=None, user=None):
    """Write with FileWriter: ``sections`` [(name, array)], ``growing`` [(name, dtype, row_shape, [chunks])]."""
    with FileWriter(path) as w:
        for name, array in sections:
            w.put(name, array)
        for name, dtype, row_shape, chunks in growing:
            w.declare_growing(name, dtype, row_shape)
            for chunk in chunks:
                w.append(name, chunk)
        w.commit({} if meta is None else meta, user)
    return path
