"""The kinds of index (flat, inverted file): for each, the class of its models, its index class, its writer class and
its file schema. The one place that says which kind a model or a file is (docs/ARCHITECTURE.md, "Kinds of index"), as
Faiss decides the type of a file by its fourcc in one reader above every index type.

The kinds are registered by ``ockstore.indexfile.kinds``, which imports the modules of every kind (``import ockstore``
imports it). The modules of a kind never import those of another: ``Index.from_vectors(ivf, X)`` and
``IndexWriter(path, ivf)`` find the inverted file's classes here, so the flat index never imports its variant. A new
kind (a new model, its index, writer and file schema) is one more ``register`` there.

This module imports nothing of ockstore.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["IndexKind", "register", "kinds", "of_model", "find_model", "of_class", "of_file", "file_kinds"]


@dataclass(frozen=True)
class IndexKind:
    """One kind of index.

    name : str
        "flat", "ivf".
    model_class : type
        Its models are the instances of this class (``quantizers.Quantizer``, ``ivf_quantizer.IVF``).
    model_names : tuple of str
        What messages call its models ("PQ", "CKM", ...).
    index_class : type
        The index of its models (``Index``, ``IVFIndex``): what ``Index.from_vectors`` and ``open_index`` make.
    writer_class : type
        The streaming writer of its index files (``IndexWriter``, ``IVFIndexWriter``): what ``IndexWriter(path,
        model)`` makes.
    files : object
        Its file schema (``indexfile.schema.FLAT_FILES``, ``indexfile.ivf_schema.IVF_FILES``): the values of meta
        "kind" of its index files (byte codes, and 4-bit codes in fast-scan blocks) and quantizer files, and how the
        model part of those files is written and read.
    """

    name: str
    model_class: type
    model_names: tuple
    index_class: type
    writer_class: type
    files: object


_KINDS = []


def register(kind):
    """Add ``kind`` (IndexKind); its name and file kinds must be new. Returns it."""
    for other in _KINDS:
        if other.name == kind.name or {*_index_kinds(other), other.files.quantizer_kind} & {
                *_index_kinds(kind), kind.files.quantizer_kind}:
            raise ValueError(f"index kind {kind.name!r}: its name or file kinds are taken by {other.name!r}")
    _KINDS.append(kind)
    return kind


def kinds():
    """Every registered kind, in the order of registration."""
    return tuple(_KINDS)


def find_model(model):
    """The kind of ``model`` (a fitted or unfitted model instance), or None when it is no model of a known kind."""
    for kind in _KINDS:
        if isinstance(model, kind.model_class):
            return kind
    return None


def of_model(model, name="quantizer"):
    """The kind of ``model``; TypeError naming ``name`` and every kind's models otherwise."""
    kind = find_model(model)
    if kind is None:
        every = [n for k in _KINDS for n in k.model_names]
        names = ", ".join(every[:-1]) + " or " + every[-1] if len(every) > 1 else "".join(every)
        raise TypeError(f"{name} must be a {names} instance, got {type(model).__name__}")
    return kind


def of_class(cls):
    """The kind whose index class or writer class ``cls`` is (or subclasses: a user's subclass of Index is flat), or
    None. The most derived match wins: IVFIndex is an Index, and the inverted file's."""
    found = [(len(c.__mro__), kind) for kind in _KINDS for c in (kind.index_class, kind.writer_class)
             if issubclass(cls, c)]
    return max(found, key=lambda item: item[0])[1] if found else None


def _index_kinds(kind):
    """The values of meta "kind" of the index files of a kind: byte codes, and 4-bit codes in fast-scan blocks."""
    return (kind.files.index_kind, kind.files.fastscan_index_kind)


def file_kinds():
    """Every value meta "kind" may have: the index (byte codes, fast-scan blocks) and quantizer file kinds of each
    kind, in registration order."""
    return tuple(name for kind in _KINDS for name in (*_index_kinds(kind), kind.files.quantizer_kind))


def of_file(file_kind):
    """(kind, is_index) of a file whose meta "kind" is ``file_kind`` (one of ``file_kinds()``), or None."""
    for kind in _KINDS:
        if file_kind in _index_kinds(kind):
            return kind, True
        if file_kind == kind.files.quantizer_kind:
            return kind, False
    return None
