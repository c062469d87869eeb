"""Reading index and quantizer files: open_index (read-only mmap, O(1) in N), load_quantizer, file_info
(docs/FORMAT.md section 11.4); for collections, the model of a quantizer file with its fingerprint
(``load_linked_model``) and the segments opened with it (``open_segment``, docs/FORMAT.md section 18)."""

from __future__ import annotations

import functools
import os

from .. import storage
from ..errors import FormatError
from .schema import read_file
from .segment_file import KIND_SEGMENT, OPEN_THE_COLLECTION, LinkedModel, ModelRef, file_fingerprint, model_ref_of
from .vectors_file import KIND_VECTORS, read_vectors_file

__all__ = ["open_index", "load_quantizer", "file_info", "load_linked_model", "open_segment"]


def open_index(path):
    """Open an index file read-only: O(1) in N (the header and the small sections are read; codes, norms and ids
    are views of a read-only memory map, read by searches as they scan).

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    Index, IVFIndex or ExactIndex
        Of the index class of the file's kind: an IVFIndex for an inverted file, an ExactIndex (stored vectors
        searched by brute force) for a file of kind "vectors" (a collection's segment before its quantizer is
        trained). Searchable at once; close it (or
        use ``with``) to release the file. Its arrays are read-only. The file may be replaced while open (the index
        keeps reading the old contents).

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    ValueError
        ``path`` is not a regular file (refused without opening it: a FIFO does not block).
    FormatError
        The file breaks a rule of docs/FORMAT.md (container or index layer), or is a quantizer file; the message
        names the file, the check and the section. Values of the large sections are checked by ``Index.verify()``.
        A collection's segment that refers to its quantizer file (docs/FORMAT.md section 18) opens with the model of
        that file, found in the segment's folder; FormatError when it is missing or is not the model the segment
        was written with (the message names both files; ``ockstore.open_collection`` opens the whole collection).
    """
    _refuse_collection_folder(path)
    return _open(path, None)


def open_segment(path, model):
    """``open_index`` of a collection's segment: a segment by reference (docs/FORMAT.md section 18) is opened with
    ``model`` (a LinkedModel: the collection's quantizer file, loaded once for all its segments; FormatError "model
    mismatch" naming both files when it is not the segment's), any other file as ``open_index`` opens it."""
    return _open(path, model)


def _open(path, model):
    mf = storage.open_file(path)
    try:
        if mf.meta.get("kind") == KIND_VECTORS:  # stored vectors without codes (a collection before training)
            index = _make_exact_index(mf, mf)
        else:
            by_reference = mf.meta.get("kind") == KIND_SEGMENT
            if by_reference and model is None:
                model = _segment_model(mf)
            _file_kind, kind, quantizer, rows = read_file(mf, index_only=True, model=model)
            index = kind.index_class(quantizer, **rows, _resource=mf)
            if by_reference:
                index._model_link = model  # verify() recomputes the fingerprint of the model (S5)
    except BaseException:
        mf.close()
        raise
    index._file = mf
    index._metadata = mf.user
    return index


def load_linked_model(path):
    """The LinkedModel of the quantizer file at ``path``: its model, its name and the model's fingerprint (from the
    header: docs/FORMAT.md section 18), as a collection loads its quantizer once for all its segments. FormatError
    when the file is not a quantizer file (kind "quantizer" or "ivf-quantizer") or breaks a rule."""
    with storage.open_file(path) as mf:
        kind = mf.meta.get("kind")
        _file_kind, _kind, model, rows = read_file(mf, index_only=False)
        if rows is not None:
            raise storage.format_error(mf.path, "wrong kind", f"meta 'kind' = {kind!r}: the model of a collection's "
                                                              "segments is a quantizer file, not an index")
        ref = ModelRef(os.path.basename(mf.path), file_fingerprint(mf))
        return LinkedModel(model, ref, mf.path)


def _segment_model(mf):
    """The LinkedModel of the quantizer file that the segment ``mf`` names, from the segment's folder; FormatError
    naming the segment (and the quantizer file) when it cannot be loaded."""
    ref = model_ref_of(mf.meta, functools.partial(storage.format_error, mf.path))
    path = os.path.join(os.path.dirname(mf.path), ref.file)
    try:
        return load_linked_model(path)
    except FileNotFoundError:
        raise storage.format_error(mf.path, "missing model", f"the file is a segment of a collection whose model is "
                                                             f"in the quantizer file {ref.file!r}, which is not in its "
                                                             f"folder ({path!r}): {OPEN_THE_COLLECTION}") from None
    except (FormatError, ValueError, OSError) as exc:
        raise storage.format_error(mf.path, "bad model file", f"the file is a segment of a collection whose model is "
                                                              f"in {path!r}, which cannot be loaded ({exc}): "
                                                              f"{OPEN_THE_COLLECTION}") from None


def _refuse_collection_folder(path):
    """ValueError naming open_collection when ``path`` is a collection folder (a folder is refused anyway; this one
    says what to call instead)."""
    try:
        folder = os.path.isdir(path)
    except (TypeError, ValueError):
        return  # not a path: the container's check names the parameter
    if not folder:
        return
    from ..collection.names import parse_manifest  # the collection layer builds on this one: imported on error only

    try:
        entries = os.listdir(path)
    except OSError:
        return
    if any(parse_manifest(name) is not None for name in entries):
        raise ValueError(f"path: {os.fspath(path)!r} is a collection folder: use ockstore.open_collection")


def _make_exact_index(mf, resource=None):
    """The ExactIndex of an opened file of kind "vectors" (docs/FORMAT.md section 15)."""
    from ..exact_index import ExactIndex

    vectors, ids, metric = read_vectors_file(mf)
    return ExactIndex(vectors, ids, metric, _resource=resource)


def load_quantizer(path):
    """Load the fitted quantizer of a quantizer file (written by :func:`save_quantizer`) or of an index file: a PQ,
    CKM, ECKM or OCKM, or an IVF for an inverted file (its fine quantizer is ``ivf.quantizer``).

    Raises FileNotFoundError, ValueError (not a regular file) or FormatError, as :func:`open_index`. The file is
    closed before this returns: the quantizer holds copies of its arrays.
    """
    with storage.open_file(path) as mf:
        model = _segment_model(mf) if mf.meta.get("kind") == KIND_SEGMENT else None  # its quantizer file's model
        _file_kind, _kind, quantizer, _rows = read_file(mf, index_only=False, model=model)
    return quantizer


def file_info(path) -> dict:
    """Describe an index file or a quantizer file without loading its vectors (every open-time check runs).

    An index file gives ``open_index(path).info()`` plus ``kind`` ("index" or "ivf-index"); a collection's segment
    that refers to its quantizer file (docs/FORMAT.md section 18) adds ``model_file`` (that file's name) and
    ``model_fingerprint``, and needs the file in its folder (FormatError naming it otherwise). A quantizer file gives
    kind ("quantizer"), P, method, metric, M, C, K, T, bits, code_size, iterations, objective (the last training
    objective), format_version, metadata and path; an IVF quantizer file (kind "ivf-quantizer") adds n_lists,
    default_n_probe and coarse_objective (the fine quantizer's iterations and objective are on residuals). Raises as
    :func:`open_index`.
    """
    with storage.open_file(path) as mf:
        major, minor = mf.version
        common = {"format_version": f"{major}.{minor}", "metadata": storage.canonical_metadata(mf.user), "path": mf.path}
        if mf.meta.get("kind") == KIND_VECTORS:
            index = _make_exact_index(mf)
            try:
                return {"kind": KIND_VECTORS, **index.info(), "has_ids": index.has_ids, **common}
            finally:
                index.close()
        linked = _segment_model(mf) if mf.meta.get("kind") == KIND_SEGMENT else None
        file_kind, kind, model, rows = read_file(mf, index_only=False, model=linked)
        if rows is not None:
            index = kind.index_class(model, **rows)
            try:
                info = index.info()
                has_ids = index.has_ids
            finally:
                index.close()
            # the kind of index, whatever the layout of its codes (4-bit codes in fast-scan blocks have a meta "kind"
            # of their own, docs/FORMAT.md section 16, which the format version and K already tell)
            model_of = {} if linked is None else {"model_file": linked.ref.file,
                                                  "model_fingerprint": linked.ref.fingerprint}
            return {"kind": kind.files.index_kind, **info, "has_ids": has_ids, **model_of, **common}
    return {"kind": file_kind, **model._file_summary(), **common}
