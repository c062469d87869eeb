"""Writing inverted-file (IVF) index files: ``IndexWriter(path, ivf)`` is an IVFIndexWriter (docs/FORMAT.md sections
14.2 and 14.5).

An IVF file stores its rows list after list, but vectors arrive in any order. The writer keeps memory bounded by the
chunk, not by N, with a counting sort through the file system:

1. ``add`` encodes a chunk (list ids, codes, norm terms) and appends every row, tagged by its list, to hidden
   temporary spill files (one per column: list ids, codes, norms, ids, vectors); it counts the rows of each list.
2. ``close`` turns the counts into the list offsets, declares the row sections at their final size, and reads the
   spill back ROWS_PER_SORT rows at a time: each block is sorted stably by list and every run of one list is
   written at that list's next free rows (a cursor per list). Rows of a list keep their insertion order, so the
   file does not depend on how the vectors were split into chunks (V9).

Memory: the chunk being encoded, one sort block, and O(n_lists) counts and cursors. Disk: the spill (the rows once
more) while the file is written. The result is committed atomically like every index file (I13).
"""

from __future__ import annotations

import os

import numpy as np

from .. import _atomic, storage
from ..search.codes import block_bytes, blocks_of_runs, uses_blocks
from .._index_rows import (
    NORM_DTYPES, STORED_VECTOR_DTYPES, check_model_for, check_store_vectors, resolve_norm_encoding,
)
from .._validation import resolve_n_threads
from ..quantizers.ivf import ivf_from_state
from ..quantizers.cartesian import quantizer_from_state
from .ivf_schema import IVF_FILES, check_ivf
from .schema import check_user_metadata, put_value_ranges
from .segment_file import SEGMENT_MINOR_VERSION, segment_meta
from .writer import IndexWriter, RowPacker

__all__ = ["IVFIndexWriter", "ROWS_PER_SORT"]

# Rows read back from the spill and sorted per step at close: bounds the memory of the counting sort (a block of
# codes, norms, ids and vectors: ~35 MB with float32 vectors at P = 128) whatever N is.
ROWS_PER_SORT = 65536

_LIST_DTYPE = np.dtype("<i4")


class _Column:
    """One spilled column: rows of a fixed shape and dtype appended to a hidden temporary sibling of the target."""

    def __init__(self, target, dtype, row_shape):
        self.dtype = np.dtype(dtype)
        self.row_shape = tuple(row_shape)
        self.row_bytes = self.dtype.itemsize * int(np.prod(self.row_shape, dtype=np.int64))
        self.target = target
        with _atomic.naming_no_space(target):
            self.path, fd = _atomic.new_temp_sibling(target)
        self.file = open(fd, "w+b")

    def append(self, rows):
        data = np.ascontiguousarray(rows, dtype=self.dtype)
        if data.size:
            with _atomic.naming_no_space(self.target):
                self.file.write(memoryview(data).cast("B"))

    def read(self, start, count):
        """Rows start..start+count-1, as an array of (count, *row_shape)."""
        with _atomic.naming_no_space(self.target):
            self.file.flush()
        data = os.pread(self.file.fileno(), count * self.row_bytes, start * self.row_bytes)
        if len(data) != count * self.row_bytes:
            raise OSError(f"spill file {self.path!r} is shorter than its rows")
        return np.frombuffer(data, dtype=self.dtype).reshape(count, *self.row_shape)

    def remove(self):
        try:
            self.file.close()
        except OSError:
            pass
        _atomic.remove_quietly(self.path)


class IVFIndexWriter(IndexWriter):
    """Build an inverted-file index file from chunks of vectors, with memory bounded by the chunk (``IndexWriter``
    with an IVF as its quantizer makes one of these).

    Parameters
    ----------
    path, norm_encoding, store_vectors, metadata, n_threads
        As for :class:`IndexWriter`; ``norm_encoding`` None means "u8" for metric "l2" and "none" for "ip" and
        "cosine" ("none" is refused for "l2": the norm term of the whole reconstruction completes every distance).
    quantizer : fitted IVF
        Its model is captured when the writer is created.

    Ids: given with every ``add`` or with none; without them the ids are the insertion order 0..N-1. Either way the
    file stores them (rows are reordered list after list).
    """

    def __init__(self, path, quantizer, *, norm_encoding=None, store_vectors=None, metadata=None, n_threads=None,
                 _model_ref=None):
        ivf = check_model_for(type(self), quantizer)
        self._norm_encoding = resolve_norm_encoding(ivf, norm_encoding)
        self._store_vectors = check_store_vectors(store_vectors, ivf)
        self._user = check_user_metadata(metadata)
        self._threads = resolve_n_threads(n_threads)
        # A private IVF over the same (read-only) arrays: a refit of the caller's objects cannot mix two models.
        params, arrays = ivf.quantizer._get_state()
        ivf_params, ivf_arrays = ivf._get_state()
        self._quantizer = ivf_from_state(ivf_params, ivf_arrays, quantizer_from_state(params, arrays))
        check_ivf(self._quantizer)  # a model whose file would not open is refused now, not after the rows' spill
        self._state = "open"
        self._ntotal = 0
        self._has_ids = None  # decided by the first add
        self._counts = np.zeros(self._quantizer.n_lists, dtype=np.int64)
        self._model_ref = _model_ref  # a segment by reference (IndexWriter's parameter)
        minor = IVF_FILES.minor_version(self._quantizer, self._store_vectors, self._norm_encoding, index=True)
        # checks the path; creates nothing yet
        self._writer = storage.FileWriter(path, minor_version=minor if _model_ref is None else max(
            minor, SEGMENT_MINOR_VERSION))
        self._columns = None  # the spill files, created by the first append
        self._blocks = uses_blocks(self._quantizer.n_codewords)  # 4-bit words: each list in fast-scan blocks

    def __repr__(self):
        return f"<IndexWriter {self.path!r} {self._state}, {self._ntotal} vectors, IVF {self._quantizer.n_lists} lists>"

    # ---- building

    def _append(self, codes, norms, ids, vectors=None, *, list_ids):
        """Append rows already encoded, with the list of each (no re-encoding: compaction copies rows this way).

        Parameters
        ----------
        codes : ndarray (n, M*C) uint8
        norms : ndarray (n,) of the norm dtype ("<f4" or "<u1"), or None for norm_encoding "none"
        ids : ndarray (n,) int64 >= 0, or None (then the rows get the next insertion numbers; every append must
            then give none, as with add)
        vectors : ndarray (n, P) of the stored dtype, or None
        list_ids : ndarray (n,) of integers in 0..n_lists-1: the list of each row

        No input validation beyond the consistency of ids with earlier chunks: callers pass checked rows.
        """
        self._check_open()
        self._check_ids_given(ids is not None)
        if self._has_ids is None:
            self._has_ids = ids is not None
        n = codes.shape[0]
        if ids is None:
            ids = np.arange(self._ntotal, self._ntotal + n, dtype=np.int64)
        try:
            if self._columns is None:
                self._open_columns()
            columns = self._columns
            columns["lists"].append(list_ids)
            columns["codes"].append(codes)
            if "norms" in columns:
                columns["norms"].append(norms)
            columns["ids"].append(ids)
            if "vectors" in columns:
                columns["vectors"].append(vectors)
        except BaseException:
            self.abort()  # the spill files may now disagree on their row counts: this writer cannot go on
            raise
        self._counts += np.bincount(np.asarray(list_ids, dtype=np.int64), minlength=self._counts.size)
        self._ntotal += n

    def _open_columns(self):
        ivf = self._quantizer
        columns = {}
        try:
            columns["lists"] = _Column(self.path, _LIST_DTYPE, ())
            columns["codes"] = _Column(self.path, "<u1", (ivf.code_size,))
            if self._norm_encoding != "none":
                columns["norms"] = _Column(self.path, NORM_DTYPES[self._norm_encoding], ())
            columns["ids"] = _Column(self.path, "<i8", ())
            if self._store_vectors is not None:
                columns["vectors"] = _Column(self.path, STORED_VECTOR_DTYPES[self._store_vectors], (ivf.dim,))
        except BaseException:
            for column in columns.values():
                column.remove()
            raise
        self._columns = columns

    # ---- finishing

    def close(self):
        """Sort the spilled rows list after list into the index file and put it in place atomically. Idempotent
        after success; ValueError after abort. An error while writing aborts the writer (nothing under ``path``, an
        older file there untouched) and propagates."""
        if self._state == "committed":
            return
        self._check_open()
        ivf = self._quantizer
        meta = IVF_FILES.meta(IVF_FILES.index_kind_of(ivf), ivf)
        meta.update(ntotal=self._ntotal, norm_encoding=self._norm_encoding, has_ids=True)
        if self._store_vectors is not None:
            meta["store_vectors"] = self._store_vectors
        if self._model_ref is not None:
            meta = segment_meta(meta, self._model_ref)
        offsets = np.zeros(ivf.n_lists + 1, dtype=np.int64)
        np.cumsum(self._counts, out=offsets[1:])
        try:
            writer = self._writer
            if self._model_ref is None:  # a segment by reference holds no model
                IVF_FILES.put_model(writer, ivf)
                if self._store_vectors == "sq8":
                    put_value_ranges(writer, ivf)
            writer.put("list_offsets", offsets)
            N = self._ntotal
            if self._blocks:  # each list padded to whole blocks (docs/FORMAT.md section 16)
                writer.declare_filled("code_blocks", "<u1", int(blocks_of_runs(offsets)[-1]),
                                      (block_bytes(ivf.code_size),))
            else:
                writer.declare_filled("codes", "<u1", N, (ivf.code_size,))
            if self._norm_encoding != "none":
                writer.declare_filled("norms", NORM_DTYPES[self._norm_encoding], N)
            writer.declare_filled("ids", "<i8", N)
            if self._store_vectors is not None:
                writer.declare_filled("vectors", STORED_VECTOR_DTYPES[self._store_vectors], N, (ivf.dim,))
            if self._columns is not None:
                self._sort_rows(offsets[:-1].copy(), blocks_of_runs(offsets)[:-1].copy() if self._blocks else None)
                self._remove_columns()  # the sorted sections hold every row now
            writer.commit(meta, self._user)
        except BaseException:
            self.abort()
            raise
        self._state = "committed"

    def _sort_rows(self, cursors, block_cursors=None):
        """The counting sort: every spilled row to its list's next free row of the sections (see the module). With
        ``block_cursors`` (each list's next free block), codes go into fast-scan blocks: each list packs its rows as
        they come, holding the rows of its unfinished block (fewer than 32) until the next run or the end."""
        columns = self._columns
        packers = {}
        for start in range(0, self._ntotal, ROWS_PER_SORT):
            count = min(ROWS_PER_SORT, self._ntotal - start)
            lists = columns["lists"].read(start, count)
            order = np.argsort(lists, kind="stable")
            sorted_lists = lists[order]
            run_starts = np.flatnonzero(np.r_[True, sorted_lists[1:] != sorted_lists[:-1]])
            run_ends = np.r_[run_starts[1:], count]
            blocks = {name: column.read(start, count)[order] for name, column in columns.items() if name != "lists"}
            for begin, end in zip(run_starts.tolist(), run_ends.tolist()):
                lst = int(sorted_lists[begin])
                row = int(cursors[lst])
                for name, block in blocks.items():
                    if name == "codes" and block_cursors is not None:
                        packer = packers.setdefault(lst, RowPacker(self._quantizer))
                        self._write_blocks(block_cursors, lst, packer.add(block[begin:end]))
                    else:
                        self._writer.write_rows(name, row, block[begin:end])
                cursors[lst] = row + (end - begin)
        for lst, packer in packers.items():  # the last block of each list, padded
            self._write_blocks(block_cursors, lst, packer.finish())

    def _write_blocks(self, block_cursors, lst, packed):
        if len(packed):
            self._writer.write_rows("code_blocks", int(block_cursors[lst]), packed)
            block_cursors[lst] += len(packed)

    def _remove_columns(self):
        columns, self._columns = self._columns, None
        if columns is not None:
            for column in columns.values():
                column.remove()

    def abort(self):
        """Discard everything: temporary files removed, nothing written under ``path``. Idempotent; a no-op after
        a successful close."""
        if self._state != "open":
            return
        self._state = "aborted"
        self._remove_columns()
        self._writer.abort()

    def __del__(self):
        if getattr(self, "_state", None) == "open":
            try:
                self._remove_columns()
            except Exception:  # pragma: no cover - interpreter shutdown
                pass
