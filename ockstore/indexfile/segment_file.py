"""Segment files by reference (docs/FORMAT.md section 18, rules S1-S6): the index files of a collection's segments,
which name the collection's quantizer file and carry its fingerprint instead of a copy of the model.

A collection shares one model (its quantizer file) among all its segments. A segment written by reference holds the
rows of an index file of its kind (codes or code blocks, norm terms, ids, stored vectors, list offsets) and no model
section; its meta "kind" is ``"segment"`` (readers of format 1.0-1.3 refuse it: "unknown kind"), ``index_kind`` says
which index file it would be with its model, and ``model`` names the quantizer file (a plain name, in the segment's
folder) with the model's fingerprint. A reader opens such a file with the model of that quantizer file, after
checking that the fingerprints agree, so a segment can never be searched with another model's tables.

The **fingerprint** of a model is the SHA-256 (64 lowercase hex digits) of the canonical msgpack of the map
``{"ivf": meta.ivf or nil, "method": meta.method, "params": meta.params, "sections": [[name, dtype, shape, crc32],
...]}`` of its quantizer file (its sections sorted by name). It is read from the quantizer file's header at open
(``file_fingerprint``: the CRCs are there, so no section is read), and computed from a model in memory by the same
rules (``model_fingerprint``: the sections a quantizer file of the model would hold, and their CRC-32) -- which is what
``verify`` does, so that a model loaded from a file that does not match its CRCs is caught.

    ModelRef            what a segment says of its model: the quantizer file's name and the fingerprint
    LinkedModel         a model loaded from its quantizer file, with that file's ModelRef and path: what a segment is
                        opened with
    segment_meta        the meta map of a segment file by reference, from its index file's
"""

from __future__ import annotations

import hashlib
import re
import zlib
from dataclasses import dataclass

import msgpack
import numpy as np

from .. import _registry, storage
from ..storage.layout import flat_bytes

__all__ = ["KIND_SEGMENT", "SEGMENT_MINOR_VERSION", "OPEN_THE_COLLECTION", "ModelRef", "LinkedModel", "fingerprint",
           "model_fingerprint", "file_fingerprint", "segment_meta", "model_ref_of"]

# docs/FORMAT.md section 18: the meta "kind" of segment files by reference, and the format version that added them.
KIND_SEGMENT = "segment"
SEGMENT_MINOR_VERSION = 4

# What messages about a segment opened alone advise (the command line's advice rewrites it: cli/advice.py).
OPEN_THE_COLLECTION = "open the collection it belongs to with ockstore.open_collection(folder)"

# A plain file name of the segment's folder (no path separator, no leading dot: a hostile segment cannot make a
# reader open a file elsewhere), as a collection's manifest names its files.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,254}")
_FINGERPRINT = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class ModelRef:
    """What a segment file says of its model (meta ``model``): the quantizer file's name and the model's
    fingerprint. Picklable (a distributed build ships it to its workers with the collection's SegmentSpec)."""

    file: str
    fingerprint: str

    def meta(self):
        return {"file": self.file, "fingerprint": self.fingerprint}


@dataclass(frozen=True)
class LinkedModel:
    """A model loaded from its quantizer file: the model, the file's ModelRef (its name and fingerprint) and its
    path (for messages). What a segment file by reference is opened with."""

    model: object
    ref: ModelRef
    path: str

    def check(self, model, where):
        """What ``verify()`` of a segment by reference adds (S5): the fingerprint of ``model``, computed from its
        arrays, is the one the segment names (a model that differs from the bytes its quantizer file's CRCs
        describe fails here); FormatError "model mismatch" naming ``where`` (the segment) and the quantizer file."""
        got = model_fingerprint(model)
        if got != self.ref.fingerprint:
            raise storage.format_error(where, "model mismatch", f"the segment refers to the model of {self.path!r} "
                                                                f"(fingerprint {self.ref.fingerprint[:16]}...), but "
                                                                f"the model it was opened with has {got[:16]}...")


def _short(value):
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def fingerprint(meta, sections):
    """The fingerprint of a model (module docstring): ``meta`` holds its method, params and (an IVF) ivf, as a
    quantizer file's meta; ``sections`` are (name, dtype, shape, crc32) of its quantizer file's sections."""
    body = {"ivf": meta.get("ivf"), "method": meta.get("method"), "params": meta.get("params"),
            "sections": [[name, dtype, list(shape), int(crc)] for name, dtype, shape, crc in sorted(sections)]}
    packed = msgpack.packb(storage.canonical_metadata(body), use_bin_type=True)
    return hashlib.sha256(packed).hexdigest()


def file_fingerprint(mf):
    """The fingerprint of the model of an opened quantizer file (from its header: no section is read)."""
    sections = []
    for name in mf.sections:
        info = mf.section_info(name)
        sections.append((name, info["dtype"], tuple(info["shape"]), info["crc32"]))
    return fingerprint(mf.meta, sections)


class _Sections:
    """Collects what a file writer's ``put`` would write: each section's name, dtype, shape and CRC-32."""

    def __init__(self):
        self.sections = []

    def put(self, name, array):
        array = np.ascontiguousarray(array)
        code = storage.dtype_code(array.dtype, f"section {name!r}")
        self.sections.append((name, code, tuple(array.shape), zlib.crc32(flat_bytes(array))))


def model_fingerprint(model):
    """The fingerprint of a fitted model in memory: that of the quantizer file ``save_quantizer`` would write for it
    (its sections computed, their CRC-32 taken; one pass over the model's arrays)."""
    files = _registry.of_model(model).files
    collected = _Sections()
    files.put_quantizer_file(collected, model)
    return fingerprint(storage.canonical_metadata(files.meta(files.quantizer_kind, model)), collected.sections)


def segment_meta(meta, ref):
    """The meta map of a segment file by reference whose index file would have the meta ``meta``: kind "segment",
    ``index_kind`` that file's kind, ``model`` the ModelRef (S1, S2)."""
    return {**meta, "kind": KIND_SEGMENT, "index_kind": meta["kind"], "model": ref.meta()}


def model_ref_of(meta, fail):
    """The ModelRef of a segment file's meta ``model`` (S2): a map with ``file``, a plain file name, and
    ``fingerprint``, 64 lowercase hex digits; ``fail(check, detail)`` makes the FormatError ("bad meta")."""
    model = meta.get("model")
    if not isinstance(model, dict):
        raise fail("bad meta", f"meta 'model' = {_short(model)}, expected a map (file, fingerprint): the quantizer "
                               "file a segment refers to")
    file, print_ = model.get("file"), model.get("fingerprint")
    if type(file) is not str or not _PLAIN_NAME.fullmatch(file):
        raise fail("bad meta", f"meta 'model'['file'] = {_short(file)}, expected a plain file name of the segment's "
                               "folder (no path separator, no leading dot)")
    if type(print_) is not str or not _FINGERPRINT.fullmatch(print_):
        raise fail("bad meta", f"meta 'model'['fingerprint'] = {_short(print_)}, expected 64 lowercase hex digits "
                               "(a SHA-256)")
    return ModelRef(file, print_)
