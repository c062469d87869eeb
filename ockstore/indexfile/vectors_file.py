"""Files of stored vectors without codes, kind "vectors" (docs/FORMAT.md section 15, rules E1-E5): the segments of a
collection whose quantizer is not trained yet, searched exactly (``ockstore.exact_index.ExactIndex``).

Writing: ``VectorsWriter`` (streaming, atomic, as the index writer: sections ``vectors`` and ``ids`` grow chunk by
chunk). Reading: ``read_vectors_file`` runs the open-time checks of section 15.3 as a straight line of early
returns, each failure a FormatError naming the check and the meta key or section.
"""

from __future__ import annotations

import numpy as np

from .. import storage
from .._closable import AbortOnError
from .._index_rows import EXACT_STORE_VECTORS, STORED_VECTOR_DTYPES, check_store_vectors, vectors_for_storage
from ..quantizers.params import PARAMETERS
from .._validation import as_ids, as_vectors, check_int, normalize_rows, to_float32_rows
from .schema import LIBRARY, _short

__all__ = ["KIND_VECTORS", "VECTORS_MINOR_VERSION", "VectorsWriter", "read_vectors_file", "checked_vector_rows"]

KIND_VECTORS = "vectors"
# The format minor version that introduced files of stored vectors (docs/FORMAT.md section 7).
VECTORS_MINOR_VERSION = 3
METRICS = PARAMETERS["metric"].choices


def checked_vector_rows(X, metric, store_vectors, first_row=0):
    """The rows ``X`` (checked dtype and dimension, any real dtype) as a ``vectors`` section stores them, after the
    checks every vector input gets (finite, within +-1e15; values the dtype holds, I17) and, for metric "cosine", no
    zero row (a cosine similarity to it is undefined). A refused row is named by its number plus ``first_row``."""
    rows = vectors_for_storage(None, X, store_vectors, "X", first_row)
    if metric == "cosine" and rows.shape[0]:
        normalize_rows(to_float32_rows(rows, "X"), "X", first_row)  # raises naming a zero row
    return rows


class VectorsWriter(AbortOnError):
    """Write a file of stored vectors (kind "vectors") chunk by chunk, atomically at ``close``; memory bounded by the
    chunk. Every chunk comes with its ids (int64 >= 0).

    Parameters
    ----------
    path : str or os.PathLike
    dim : int >= 1
    metric : "l2", "ip" or "cosine"
    store_vectors : "float16", "float32" or "uint8"
    """

    def __init__(self, path, dim, metric, store_vectors, *, metadata=None):
        self._dim = check_int(dim, "dim", min_value=1)
        self._metric = PARAMETERS["metric"].check(metric)
        self._store = check_store_vectors(store_vectors)
        if self._store not in EXACT_STORE_VECTORS:  # None, or sq8: its codes need a fitted model's value ranges
            raise ValueError(f"store_vectors: a file of stored vectors stores 'float16', 'float32' or 'uint8', not "
                             f"{self._store!r}")
        self._user = {} if metadata is None else storage.canonical_metadata(metadata)
        self._writer = storage.FileWriter(path, minor_version=VECTORS_MINOR_VERSION)
        self._writer.declare_growing("vectors", STORED_VECTOR_DTYPES[self._store], (self._dim,))
        self._writer.declare_growing("ids", "<i8")
        self.ntotal = 0

    @property
    def path(self) -> str:
        return self._writer.path

    def add(self, X, ids, first_row=0):
        """Check and append ``X`` (n, P) with ``ids`` (n,); nothing of a refused chunk is appended."""
        X, _ = as_vectors(X, "X", self._dim, convert=False)
        ids = as_ids(ids, "ids", n=X.shape[0])
        self._append(checked_vector_rows(X, self._metric, self._store, first_row), ids)

    def _append(self, vectors, ids):
        """Append rows already in the section's dtype with their checked ids (no validation)."""
        self._writer.append("vectors", np.ascontiguousarray(vectors, dtype=STORED_VECTOR_DTYPES[self._store]))
        self._writer.append("ids", np.ascontiguousarray(ids, dtype="<i8"))
        self.ntotal += int(ids.shape[0])

    def close(self):
        """Write the file and rename it into place (docs/FORMAT.md section 8.1)."""
        meta = {"kind": KIND_VECTORS, "library": LIBRARY, "dim": self._dim, "metric": self._metric,
                "ntotal": self.ntotal, "store_vectors": self._store, "has_ids": True}
        self._writer.commit(meta, self._user)

    def abort(self):
        """Discard everything written (idempotent)."""
        self._writer.abort()


def read_vectors_file(mf):
    """The checks of docs/FORMAT.md section 15.3 on an opened container of kind "vectors" (E1-E4); returns
    (vectors view, ids view or None, metric)."""
    def fail(check, detail):
        return storage.format_error(mf.path, check, detail)

    meta = mf.meta
    major, minor = mf.version
    if (major, minor) < (1, VECTORS_MINOR_VERSION):  # E1
        raise fail("bad format version", f"meta 'kind' = 'vectors' exists from format 1.{VECTORS_MINOR_VERSION}, but "
                                         f"the file says {major}.{minor}")
    dim, ntotal = meta.get("dim"), meta.get("ntotal")  # E2
    if type(dim) is not int or dim < 1:
        raise fail("bad meta", f"meta 'dim' = {_short(dim)}, expected an int >= 1")
    if type(ntotal) is not int or ntotal < 0:
        raise fail("bad meta", f"meta 'ntotal' = {_short(ntotal)}, expected an int >= 0")
    metric = meta.get("metric")
    if type(metric) is not str or metric not in METRICS:
        raise fail("bad meta", f"meta 'metric' = {_short(metric)}, expected one of {', '.join(map(repr, METRICS))}")
    store = meta.get("store_vectors")
    if type(store) is not str or store not in EXACT_STORE_VECTORS:  # not sq8: no model, no value ranges (E2)
        raise fail("bad meta", f"meta 'store_vectors' = {_short(store)}, expected one of "
                               f"{', '.join(map(repr, EXACT_STORE_VECTORS))}")
    has_ids = meta.get("has_ids")
    if type(has_ids) is not bool:
        raise fail("bad meta", f"meta 'has_ids' = {_short(has_ids)}, expected true or false")
    vectors = _section(mf, fail, "vectors", storage.dtype_code(STORED_VECTOR_DTYPES[store], "vectors"),
                       (ntotal, dim))  # E3
    ids = None
    if has_ids:
        ids = _section(mf, fail, "ids", "<i8", (ntotal,))
    elif "ids" in mf.sections:
        raise fail("unexpected section", "section 'ids' must not be present: meta 'has_ids' is false")
    for name in ("codes", "norms", "codebooks", "rotation", "coarse_centroids", "list_offsets"):  # E4
        if name in mf.sections:
            raise fail("unexpected section", f"section {name!r} must not be present: a file of stored vectors has "
                                             "no codes and no model")
    return vectors, ids, metric


def _section(mf, fail, name, dtype, shape):
    if name not in mf.sections:
        raise fail("missing section", f"section {name!r} is required in this file")
    info = mf.section_info(name)
    if info["dtype"] != dtype:
        raise fail("bad section dtype", f"section {name!r}: dtype {info['dtype']!r}, expected {dtype!r}")
    if len(info["shape"]) == len(shape) and info["shape"][0] != shape[0]:
        raise fail("row count mismatch", f"section {name!r}: {info['shape'][0]} rows, meta 'ntotal' is {shape[0]}")
    if tuple(info["shape"]) != shape:
        raise fail("bad section shape", f"section {name!r}: shape {list(info['shape'])}, expected {list(shape)}")
    return mf.sections[name]
