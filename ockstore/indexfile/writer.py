"""Writing index and quantizer files: IndexWriter (streaming, memory bounded by the chunk, atomic), build_index,
save_quantizer (docs/FORMAT.md sections 11.5 and 12)."""

from __future__ import annotations

import numpy as np

from .. import _registry, storage
from .._index_rows import (
    NORM_DTYPES, STORED_VECTOR_DTYPES, check_fitted_model, check_model_for, check_store_vectors, encode_rows,
    resolve_norm_encoding, vectors_for_storage,
)
from ..search.codes import BLOCK_ROWS, block_bytes, pack_rows, uses_blocks
from .._validation import as_ids, as_vectors, check_int, resolve_n_threads
from ..quantizers.cartesian import quantizer_from_state
from .schema import FLAT_FILES, check_user_metadata, put_value_ranges
from .segment_file import SEGMENT_MINOR_VERSION, segment_meta

__all__ = ["IndexWriter", "RowPacker", "build_index", "save_quantizer"]


class IndexWriter:
    """Build an index file from chunks of vectors, with memory bounded by the chunk, not by N.

    Each :meth:`add` encodes its chunk and appends the codes (and norm terms, and ids) to hidden temporary sibling
    files; :meth:`close` writes the index file and renames it into place atomically (docs/FORMAT.md R21): until then
    nothing appears under ``path``, and an existing file there is untouched. Used as a context manager, leaving the
    block normally closes (commits); leaving it with an exception aborts (no file under ``path``, an older file there
    untouched, temporary files removed). A writer closed without any ``add`` writes a valid empty index.

    Parameters
    ----------
    path : str or os.PathLike
        The index file to write; its folder must exist.
    quantizer : fitted PQ, CKM, ECKM, OCKM or IVF
        Its model is captured when the writer is created (refitting it afterwards does not affect this file). With
        an IVF the writer is an ``ockstore.indexfile.ivf_writer.IVFIndexWriter``: it writes an inverted-file index
        (rows list after list, sorted through temporary files at close; docs/FORMAT.md section 14).
    norm_encoding : "u8", "f32", "none" or None
        As for :meth:`Index.from_vectors`: None means "u8" for L2 with C >= 2 and "none" otherwise.
    store_vectors : None, "float16", "float32", "uint8" or "sq8"
        As for :meth:`Index.from_vectors`: also store the vectors (as given) in a ``vectors`` section, for exact
        re-ranking. Each chunk is checked before anything of it is appended.
    metadata : dict or None
        User metadata stored in the file (str keys; None, bool, int, float, str, bytes, lists and dicts of these).
        TypeError for other values, ValueError when it would not fit in the header (about 16 MiB), both raised here,
        before anything is written.
    n_threads : int or None
        Threads for encoding; None means all cores.

    Attributes
    ----------
    ntotal : int
        Vectors added so far (still readable after close).
    path : str
    closed : bool

    Any other use after :meth:`close` or :meth:`abort` raises ValueError. A writer garbage-collected without
    :meth:`close` writes nothing (its temporary files are removed). Not thread-safe: one writer, one thread.
    """

    def __new__(cls, path=None, quantizer=None, *args, **kwargs):
        if cls is IndexWriter:  # the flat class stands for every kind: the model decides (an IVF: IVFIndexWriter)
            kind = _registry.find_model(quantizer)
            if kind is not None:
                cls = kind.writer_class
        return super().__new__(cls)

    def __init__(self, path, quantizer, *, norm_encoding=None, store_vectors=None, metadata=None, n_threads=None,
                 _model_ref=None):
        # _model_ref (a segment_file.ModelRef): write a collection's segment by reference (docs/FORMAT.md section 18):
        # no model section, meta "kind" "segment" naming the quantizer file that holds ``quantizer`` (the caller
        # vouches for it: the collection made the ModelRef from that file).
        quantizer = check_model_for(type(self), quantizer)
        self._norm_encoding = resolve_norm_encoding(quantizer, norm_encoding)
        self._store_vectors = check_store_vectors(store_vectors, quantizer)
        self._user = check_user_metadata(metadata)
        self._threads = resolve_n_threads(n_threads)
        params, arrays = quantizer._get_state()
        # A private quantizer over the same (read-only) arrays: a refit of the caller's object replaces its arrays,
        # so it cannot mix two models in one file.
        self._quantizer = quantizer_from_state(params, arrays)
        self._state = "open"  # "open", "committed" or "aborted"
        self._ntotal = 0
        self._has_ids = None  # decided by the first add
        self._model_ref = _model_ref
        minor = FLAT_FILES.minor_version(self._quantizer, self._store_vectors, self._norm_encoding, index=True)
        # checks the path; creates nothing yet
        writer = storage.FileWriter(path, minor_version=minor if _model_ref is None else max(minor,
                                                                                             SEGMENT_MINOR_VERSION))
        if _model_ref is None:  # a segment by reference holds no model (its quantizer file has the value ranges)
            FLAT_FILES.put_model(writer, self._quantizer)
            if self._store_vectors == "sq8":
                put_value_ranges(writer, self._quantizer)
        self._blocks = RowPacker(self._quantizer) if uses_blocks(self._quantizer.n_codewords) else None
        if self._blocks is not None:  # 4-bit words, in fast-scan blocks (docs/FORMAT.md section 16)
            writer.declare_growing("code_blocks", "<u1", (self._blocks.block_bytes,))
        else:
            writer.declare_growing("codes", "<u1", (self._quantizer.code_size,))
        if self._norm_encoding != "none":
            writer.declare_growing("norms", NORM_DTYPES[self._norm_encoding])
        if self._store_vectors is not None:
            writer.declare_growing("vectors", STORED_VECTOR_DTYPES[self._store_vectors], (self._quantizer.dim,))
        self._writer = writer

    # ---- attributes

    @property
    def path(self) -> str:
        return self._writer.path

    @property
    def ntotal(self) -> int:
        """The number of vectors added so far."""
        return self._ntotal

    @property
    def closed(self) -> bool:
        return self._state != "open"

    @property
    def norm_encoding(self) -> str:
        return self._norm_encoding

    @property
    def store_vectors(self):
        return self._store_vectors

    def __repr__(self):
        return f"<IndexWriter {self.path!r} {self._state}, {self._ntotal} vectors>"

    def __enter__(self):
        self._check_open()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.abort()
        elif self._state == "open":
            self.close()
        return False

    def _check_open(self):
        if self._state != "open":
            what = "closed" if self._state == "committed" else "aborted"
            raise ValueError(f"I/O operation on a {what} IndexWriter ({self.path!r})")

    # ---- building

    def add(self, X, ids=None):
        """Encode a chunk of vectors and append it.

        Parameters
        ----------
        X : array-like of shape (n, P) or (P,)
            Any real numeric dtype, converted to float32 step by step; n may be 0. NaN/inf raise ValueError.
        ids : array-like of shape (n,), integers >= 0 (int64 range), or None
            Either every add gives ids or none does (ValueError naming ids otherwise); without ids, vectors are
            numbered 0..N-1 in the order they were added.

        A chunk that is refused (ValueError or TypeError) leaves the writer as it was: nothing of it is appended
        and further chunks can be added.
        """
        self._add(X, ids)

    def _add(self, X, ids, first_row=0):
        """add(), naming a refused row by its number plus ``first_row`` (build_index feeds chunks of its X)."""
        X, ids, vectors = self._checked_rows(X, ids, first_row)
        lists, codes, norms = encode_rows(self._quantizer, X, self._norm_encoding, self._threads, first_row)
        self._append(codes, norms, ids, vectors, list_ids=lists)

    def _checked_rows(self, X, ids, first_row):
        """(X (n, P) as given, ids int64 (n,) or None, the vectors to store or None) of an add, every check done
        (vectors_for_storage and the encoder check every value before anything is appended)."""
        self._check_open()
        X, _ = as_vectors(X, "X", self._quantizer.dim, convert=False)
        if ids is not None:
            if not isinstance(ids, np.ndarray) and np.size(ids) == 0:
                ids = np.empty(np.shape(ids), dtype=np.int64)  # an empty list has no integer dtype of its own
            ids = as_ids(ids, "ids", n=X.shape[0])
        self._check_ids_given(ids is not None)
        vectors = None
        if self._store_vectors is not None:
            vectors = vectors_for_storage(self._quantizer, X, self._store_vectors, "X", first_row)
        return X, ids, vectors

    def _check_ids_given(self, given):
        if self._has_ids is not None and given != self._has_ids:
            if given:
                raise ValueError("ids: earlier chunks were added without ids; give ids with every chunk or with none")
            raise ValueError("ids: earlier chunks were added with ids; give ids with every chunk or with none")

    def _append(self, codes, norms, ids, vectors=None, *, list_ids=None):
        """Append checked rows: codes (n, M*C) uint8, norms (n,) of the norm dtype or None, ids (n,) int64 or None,
        vectors (n, P) of the stored dtype or None. No input validation beyond the consistency of ids with earlier
        chunks. ``list_ids`` (n,) (the list of each row) is for inverted files only (IVFIndexWriter._append, which
        requires it); a flat writer refuses it."""
        if list_ids is not None:
            raise ValueError("list_ids: this writer makes a flat index (its quantizer is not an IVF)")
        self._check_open()
        self._check_ids_given(ids is not None)
        if self._has_ids is None:
            self._has_ids = ids is not None
            if self._has_ids:
                self._writer.declare_growing("ids", "<i8")
        try:
            if self._blocks is not None:
                self._writer.append("code_blocks", self._blocks.add(codes))
            else:
                self._writer.append("codes", codes)
            if norms is not None:
                self._writer.append("norms", norms)
            if ids is not None:
                self._writer.append("ids", ids)
            if vectors is not None:
                self._writer.append("vectors", vectors)
        except BaseException:
            self.abort()  # the sections may now disagree on their row counts: this writer cannot go on
            raise
        self._ntotal += codes.shape[0]

    # ---- finishing

    def close(self):
        """Write the index file and put it in place atomically. Idempotent after success; ValueError after abort.

        An error while writing aborts the writer (nothing under ``path``, an older file there untouched) and
        propagates.
        """
        if self._state == "committed":
            return
        self._check_open()
        meta = FLAT_FILES.meta(FLAT_FILES.index_kind_of(self._quantizer), self._quantizer)
        meta.update(ntotal=self._ntotal, norm_encoding=self._norm_encoding, has_ids=bool(self._has_ids))
        if self._store_vectors is not None:  # absent means none: files without vectors stay as format 1.0 wrote them
            meta["store_vectors"] = self._store_vectors
        if self._model_ref is not None:
            meta = segment_meta(meta, self._model_ref)
        try:
            if self._blocks is not None:
                self._writer.append("code_blocks", self._blocks.finish())  # the last rows, in a padded block
            self._writer.commit(meta, self._user)
        except BaseException:
            self.abort()
            raise
        self._state = "committed"

    def abort(self):
        """Discard everything: temporary files removed, nothing written under ``path``. Idempotent; a no-op after
        a successful close."""
        if self._state != "open":
            return
        self._state = "aborted"
        self._writer.abort()


class RowPacker:
    """Rows of one-byte words packed into fast-scan blocks as they come: whole blocks out, the rows of an unfinished
    block (fewer than 32, W bytes each) held until more come or the run ends (``finish``: padded)."""

    def __init__(self, model):
        self.n_words = model.code_size
        self.block_bytes = block_bytes(self.n_words)
        self._held = np.empty((0, self.n_words), dtype=np.uint8)

    def add(self, codes):
        """The whole blocks that ``codes`` (n, W) completes, (b, block_bytes) uint8 (b may be 0)."""
        rows = np.concatenate([self._held, codes]) if len(self._held) else np.asarray(codes, dtype=np.uint8)
        whole = len(rows) // BLOCK_ROWS * BLOCK_ROWS
        self._held = np.array(rows[whole:], dtype=np.uint8)
        return pack_rows(rows[:whole]) if whole else np.empty((0, self.block_bytes), dtype=np.uint8)

    def finish(self):
        """The block of the rows held (padded with zero rows), or no block; nothing is held afterwards."""
        rows, self._held = self._held, self._held[:0]
        return pack_rows(rows) if len(rows) else np.empty((0, self.block_bytes), dtype=np.uint8)


def build_index(path, quantizer, X, ids=None, *, norm_encoding=None, store_vectors=None, metadata=None,
                n_threads=None, chunk_size=100_000):
    """Encode a whole base into an index file in one call (an IndexWriter fed ``chunk_size`` rows at a time).

    Parameters
    ----------
    path, quantizer, norm_encoding, store_vectors, metadata, n_threads
        As for :class:`IndexWriter`.
    X : array-like of shape (N, P)
        Any real numeric dtype; a np.memmap (or any ndarray) is read ``chunk_size`` rows at a time, so memory stays
        bounded by the chunk (other array-likes are converted to an ndarray first).
    ids : array-like of shape (N,), integers >= 0, or None
    chunk_size : int >= 1
        Rows encoded per step. The file does not depend on it.

    Writes atomically: on any error nothing appears under ``path`` and an older file there is untouched.
    """
    chunk_size = check_int(chunk_size, "chunk_size", min_value=1)
    quantizer = check_fitted_model(quantizer)
    X, _ = as_vectors(X, "X", quantizer.dim, convert=False)
    N = X.shape[0]
    if ids is not None:
        ids = as_ids(ids, "ids", n=N, values=False)  # values are checked chunk by chunk by add()
    with IndexWriter(path, quantizer, norm_encoding=norm_encoding, store_vectors=store_vectors, metadata=metadata,
                     n_threads=n_threads) as w:
        for start in range(0, max(N, 1), chunk_size):  # once with zero rows when N == 0: ids given -> has_ids
            stop = min(N, start + chunk_size)
            w._add(X[start:stop], None if ids is None else ids[start:stop], start)


def save_quantizer(path, quantizer, *, metadata=None):
    """Write a fitted quantizer to a file of kind "quantizer" (the container of docs/FORMAT.md, no vector sections),
    atomically.

    Parameters
    ----------
    path : str or os.PathLike
    quantizer : fitted PQ, CKM, ECKM, OCKM or IVF
        An IVF gives a file of kind "ivf-quantizer": its fine quantizer, coarse centroids and norm levels
        (docs/FORMAT.md section 14); ``load_quantizer`` returns the IVF.
    metadata : dict or None
        User metadata, as for :class:`IndexWriter`.

    A model that learned value ranges when it was fitted (every model fitted by this version) keeps them in the file
    (section 'value_ranges', format 1.3), so that indexes of ``store_vectors="sq8"`` can be built with it later.
    """
    quantizer = check_fitted_model(quantizer)
    user = check_user_metadata(metadata)
    files = _registry.of_model(quantizer).files
    ranges = quantizer.value_ranges is not None
    with storage.FileWriter(path, minor_version=files.minor_version(quantizer, None, value_ranges=ranges)) as writer:
        files.put_quantizer_file(writer, quantizer)
        writer.commit(files.meta(files.quantizer_kind, quantizer), user)
