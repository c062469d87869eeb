"""What every index over rows with ids shares, whether it searches codes (``index.Index`` and its variants) or only
stored vectors (``exact_index.ExactIndex``): its ids and their lookup, its file and user metadata, reading stored
vectors back by id (``get``), the advice of a closed index, and the FormatError of damage found in its arrays
(docs/ARCHITECTURE.md, "Kinds of index").

A subclass sets ``_ids`` (int64 array, or None for the row numbers 0..N-1), ``_vectors`` (stored vectors or None),
``_id_lookup`` (None), ``_file`` (the storage.MappedFile it was opened from, or None), ``_metadata``, ``_resource``
(what ``close`` closes, or None) and ``_closed``, and defines ``__len__`` and ``_release_arrays``.
"""

from __future__ import annotations

import numpy as np

from .search import rerank as _rerank, options as _search_options
from . import storage
from ._closable import Closable
from ._validation import as_ids

__all__ = ["StoredRows", "ids_to_get"]


class StoredRows(Closable):
    """Mixin of the index classes: ids, path, metadata, get (see the module docstring)."""

    def close(self):
        """Release the arrays (and the file behind them, if any). Idempotent; any later use raises ValueError."""
        if self._closed:
            return
        self._closed = True
        self._closed_path = None if self._file is None else self._file.path  # for the advice of _check_open
        self._release_arrays()
        self._ids = self._vectors = self._id_lookup = self._file = None
        resource, self._resource = self._resource, None
        if resource is not None:
            resource.close()

    def _release_arrays(self):
        """Drop the subclass's own arrays (those ``close`` does not know)."""

    def _check_open(self):
        if self._closed:
            path = getattr(self, "_closed_path", None)
            if path is not None:
                raise ValueError(f"I/O operation on a closed index: reopen it with ockstore.open_index({path!r})")
            advice = ("; save() an index before closing it to open it again with ockstore.open_index"
                      if hasattr(self, "save") else "")
            raise ValueError(f"I/O operation on a closed index (built in memory: nothing to reopen{advice})")

    @property
    def ntotal(self) -> int:
        """N, the number of vectors."""
        return len(self)

    @property
    def ids(self):
        """(N,) int64: the stored ids, or 0..N-1 (made on request) when none were given."""
        self._check_open()
        return self._ids if self._ids is not None else np.arange(len(self), dtype=np.int64)

    @property
    def has_ids(self) -> bool:
        """True when user ids are stored; False when the ids are the row numbers 0..N-1."""
        self._check_open()
        return self._ids is not None

    @property
    def path(self):
        """The file this index was opened from (str), or None for an index built in memory."""
        self._check_open()
        return None if self._file is None else self._file.path

    @property
    def metadata(self) -> dict:
        """The user metadata: the file's user map (a copy), {} for an index built in memory."""
        self._check_open()
        return storage.canonical_metadata(self._metadata)

    def get(self, ids):
        """The stored vectors of ``ids``, in the order given.

        Parameters
        ----------
        ids : array-like of shape (n,) of integer ids, or one id
            Any order; an id given twice gives its row twice. Every id must be stored in the index (ValueError naming
            the unknown ones otherwise); an id stored in several rows gives its first row.

        Returns
        -------
        V : ndarray of shape (n, P), or (P,) for one id, dtype float32
            The vectors as stored (``store_vectors``), converted to float32, which holds float16 and uint8 values
            exactly: the vectors as given to the index (for "float16" rounded to float16), not normalised for
            cosine; for "sq8" the decoded values lo + step * code (docs/FORMAT.md section 17) rounded to float32.
            ValueError when the index stores no vectors.
        """
        self._check_open()
        ids, was_scalar = ids_to_get(ids)
        if self._vectors is None:
            raise ValueError("get: this index stores no vectors: build it with store_vectors='float32' (or 'float16', "
                             "'uint8') to read vectors back")
        if self._ids is None:
            found = (ids >= 0) & (ids < len(self))
            rows = np.where(found, ids, -1)
        else:
            found, rows = self._ids_lookup().first_rows(ids)
        if not found.all():
            raise _search_options.unknown_ids_error(ids, found, "the index")
        V = self._stored_values(rows)
        return V[0] if was_scalar else V

    def _stored_values(self, rows):
        """float32 values of the stored vectors of ``rows``, checked (damage: a FormatError naming the file). An index
        of sq8 codes gives their stored representation instead (``Index._stored_values``)."""
        return _rerank.gather_rows(self._vectors, rows, self._damaged)

    def _damaged(self, check, detail):
        """The FormatError of damage found in this index's arrays (named as verify names them)."""
        return storage.format_error(self._file.path if self._file is not None else "<in-memory index>", check, detail)

    def _ids_lookup(self):
        """The IdLookup of the stored ids, built on first use (filters by id and get need it)."""
        lookup = self._id_lookup
        if lookup is None:
            lookup = self._id_lookup = _search_options.IdLookup(self._ids)
        return lookup


def ids_to_get(ids):
    """The ids of a ``get`` (``Index.get``, ``Collection.get``, ``ExactIndex.get``): (int64 1-D, was one id). Integers
    >= 0 (TypeError or ValueError naming ``ids``); an empty list is no ids."""
    arr = ids if isinstance(ids, np.ndarray) else np.asarray(ids)
    if arr.size == 0 and arr.dtype.kind == "f":
        arr = arr.astype(np.int64)  # an empty list has no integer dtype of its own
    was_scalar = arr.ndim == 0
    return as_ids(arr.reshape(1) if was_scalar else arr, "ids"), was_scalar
