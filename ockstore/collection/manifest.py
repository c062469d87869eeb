"""Manifests and deletion files of a collection folder (docs/FORMAT.md sections 13.2-13.4, rules C1-C8).

Both are ordinary container files (docs/FORMAT.md sections 1-9), written atomically by the container's writer
(temporary sibling, fsync, rename, folder fsync):

* ``manifest.<G>``: meta ``{"kind": "manifest", "library", "generation": G}``, the collection's user metadata in
  the ``user`` map, and one section ``manifest`` (``<u1``) holding the manifest body, a msgpack map (C3). Everything
  that decides what the collection holds is in that section, so its CRC-32 covers it: a manifest "verifies" when the
  container opens, its CRC matches and the body follows the schema.
* ``deletions.<G>.<i>.ock``: meta ``{"kind": "deletions", "library", "segment": <segment file name>}``, one
  section ``ids`` (``<i8``): every deleted id of that segment, sorted, unique (C6).

No input validation of what the collection layer hands to the writers here; every check of the readers raises
FormatError naming the file and the check.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

import msgpack
import numpy as np

from .. import storage
from .._index_rows import EXACT_STORE_VECTORS, NORM_ENCODINGS, STORE_VECTORS
from ..quantizers.params import PARAMETERS, STORED_PARAMETERS
from ..indexfile.schema import LIBRARY
from ..quantizers.ivf import IVF, MAX_LISTS
from ..quantizers.cartesian import METHODS
from . import names

__all__ = ["SegmentEntry", "Training", "Manifest", "write_manifest", "read_manifest", "write_deletions", "read_deletions",
           "check_regular_file", "KIND_MANIFEST", "KIND_DELETIONS", "MAX_ID", "OPERATIONS"]

KIND_MANIFEST = "manifest"
KIND_DELETIONS = "deletions"
MAX_ID = 2**63 - 1  # ids are int64 >= 0; next_id may reach MAX_ID + 1 (no id left)
# What may make a generation (the body's 'operation', docs/FORMAT.md section 13.3); readers take any str.
OPERATIONS = ("create", "add", "upsert", "delete", "compact", "commit", "build", "retrain")  # "build": distributed

# The body of a manifest is a few hundred bytes per segment; anything larger than this is not a manifest.
MAX_BODY_BYTES = 1 << 28


@dataclass(frozen=True)
class SegmentEntry:
    """One live segment of a generation: its file, row count, id range and deletions."""

    file: str
    rows: int
    min_id: int
    max_id: int
    deletions: str | None = None  # the deletion file, None when no row of the segment is deleted
    deleted: int = 0

    @property
    def live(self) -> int:
        return self.rows - self.deleted


@dataclass(frozen=True)
class Training:
    """The quantizer of a collection that has not trained it yet (docs/FORMAT.md section 13.3, key ``training``): its
    method and parameters, the IVF's (or None), the dimension of the vectors (None until the first one) and the number
    of live vectors whose commit trains it."""

    method: str
    params: dict
    ivf: dict | None
    dim: int | None
    train_size: int

    @classmethod
    def of(cls, quantizer, train_size, dim=None):
        """The Training of an unfitted PQ, CKM, ECKM, OCKM or IVF (its constructor's stored parameters)."""
        fine = quantizer.quantizer if isinstance(quantizer, IVF) else quantizer
        ivf = quantizer._stored_params() if isinstance(quantizer, IVF) else None
        return cls(fine.method, dict(fine._stored_params()), ivf, dim, int(train_size))

    def quantizer(self):
        """A new unfitted quantizer (an IVF over a new fine quantizer) with these parameters."""
        cls = METHODS[self.method]
        fine = cls(**{name: self.params[name] for name in cls._param_names() if name in self.params})
        if self.ivf is None:
            return fine
        return IVF(self.ivf["n_lists"], fine, n_iter=self.ivf["n_iter"], seed=self.ivf["seed"])

    def with_dim(self, dim):
        return Training(self.method, self.params, self.ivf, dim, self.train_size)

    def body(self):
        return {"dim": self.dim, "ivf": self.ivf, "method": self.method, "params": dict(sorted(self.params.items())),
                "train_size": self.train_size}


@dataclass(frozen=True)
class AutoModel:
    """A collection whose model the library picks (``create_collection`` without a quantizer; docs/FORMAT.md 13.3,
    key ``auto_model``): its metric, and the live rows its current model was trained on (None before training).
    Training and ``retrain()`` call ``default_quantizer(live rows, dim, metric=metric)``."""

    metric: str
    trained_rows: int | None = None

    def body(self):
        return {"metric": self.metric, "trained_rows": self.trained_rows}


@dataclass(frozen=True)
class Manifest:
    """The state of a collection at one generation (the body of ``manifest.<generation>``). ``quantizer`` is None
    exactly when ``training`` is set: the collection has not trained its quantizer yet (its segments are files of
    stored vectors)."""

    generation: int
    quantizer: str | None
    norm_encoding: str
    store_vectors: str | None
    next_id: int
    merge_factor: int
    max_merge_rows: int
    segments: tuple = field(default=())
    operation: str = "create"
    training: Training | None = None
    auto: AutoModel | None = None

    @property
    def live(self) -> int:
        return sum(s.live for s in self.segments)

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.segments)

    def referenced(self):
        """The file names this generation needs (the quantizer, segments and deletion files)."""
        files = set() if self.quantizer is None else {self.quantizer}
        for s in self.segments:
            files.add(s.file)
            if s.deletions is not None:
                files.add(s.deletions)
        return files

    def body(self):
        """The msgpack map of docs/FORMAT.md section 13.3 (keys in ascending order)."""
        body = {
            "generation": self.generation, "max_merge_rows": self.max_merge_rows, "merge_factor": self.merge_factor,
            "next_id": self.next_id, "norm_encoding": self.norm_encoding, "operation": self.operation,
            "quantizer": self.quantizer,
            "segments": [{"deleted": s.deleted, "deletions": s.deletions, "file": s.file, "max_id": s.max_id,
                          "min_id": s.min_id, "rows": s.rows} for s in self.segments],
            "store_vectors": self.store_vectors,
        }
        if self.training is not None:  # absent once trained: the body of a trained collection is as before
            body["training"] = self.training.body()
        if self.auto is not None:  # absent for a model the user gave
            body["auto_model"] = self.auto.body()
        return dict(sorted(body.items()))


# ====================================================================================================================
# writing


def write_manifest(folder, manifest, user):
    """Write ``manifest.<generation>`` atomically, never replacing an existing file of that name (FileExistsError:
    another writer, or anyone, made that generation); returns its path."""
    path = os.path.join(folder, names.manifest_name(manifest.generation))
    body = np.frombuffer(msgpack.packb(manifest.body(), use_bin_type=True), dtype=np.uint8)
    with storage.FileWriter(path, replace=False) as writer:
        writer.put("manifest", body)
        writer.commit({"generation": manifest.generation, "kind": KIND_MANIFEST, "library": LIBRARY}, user)
    return path


def write_deletions(path, segment_file, ids):
    """Write a deletion file atomically: ``ids`` sorted, unique int64 (not checked here)."""
    with storage.FileWriter(path) as writer:
        writer.put("ids", np.ascontiguousarray(ids, dtype="<i8"))
        writer.commit({"kind": KIND_DELETIONS, "library": LIBRARY, "segment": segment_file})


# ====================================================================================================================
# reading (a straight line of early returns, each a FormatError naming the file and the check)


class _DuplicateKey(ValueError):
    pass


def _unique_pairs(pairs):
    result = {}
    for key, value in pairs:
        if type(key) is not str or key in result:
            raise _DuplicateKey(f"map key {key!r} is not a str or is repeated")
        result[key] = value
    return result


def _refuse_ext(code, data):
    raise _DuplicateKey(f"msgpack extension type {code} is not allowed")


def check_regular_file(path):
    """FormatError naming ``path`` when it is a folder, a FIFO, a device... (by ``stat`` alone: never opened, so a FIFO
    cannot block); FileNotFoundError when it is missing (a reader may then retry with a newer manifest)."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise storage.format_error(path, "not a regular file", f"a file of the collection is a {_file_type(mode)}")
    return path


def _file_type(mode):
    return ("folder" if stat.S_ISDIR(mode) else "FIFO" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode)
            else "device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "special file")


def _open_kind(path, kind):
    """The opened container at ``path`` after the container's checks and meta 'kind' (C2)."""
    mf = storage.open_file(check_regular_file(path))
    if mf.meta.get("kind") != kind:
        got = mf.meta.get("kind")
        mf.close()
        raise storage.format_error(path, "wrong kind", f"meta 'kind' = {got!r}, expected {kind!r}")
    return mf


class _Body:
    """Typed access to the body map, failing with "bad manifest" naming the key."""

    def __init__(self, path, body):
        self.path = path
        self.body = body

    def fail(self, detail):
        return storage.format_error(self.path, "bad manifest", detail)

    def int(self, key, lo, hi, where=None, source=None):
        value = (self.body if source is None else source).get(key)
        if type(value) is not int or not lo <= value <= hi:
            raise self.fail(f"{where or 'key'} {key!r} = {value!r}, expected an int in {lo}..{hi}")
        return value

    def choice(self, key, choices, nullable=False):
        value = self.body.get(key)
        if (value is None and nullable and key in self.body) or (type(value) is str and value in choices):
            return value
        raise self.fail(f"key {key!r} = {value!r}, expected one of {', '.join(map(repr, choices))}"
                        + (" or nil" if nullable else ""))

    def name(self, value, what, check):
        if not names.check_plain_name(value) or not check(value):
            raise self.fail(f"{what} {value!r} is not a file name a manifest may reference")
        return value


def read_manifest(path, generation):
    """(Manifest, user metadata) of the manifest file ``path`` of ``generation`` (its file name's number), after
    every check of docs/FORMAT.md section 13.3 (C2-C5); FormatError otherwise."""
    mf = _open_kind(path, KIND_MANIFEST)
    try:
        if mf.meta.get("generation") != generation or type(mf.meta.get("generation")) is not int:
            raise storage.format_error(path, "bad manifest", f"meta 'generation' = {mf.meta.get('generation')!r}, "
                                                             f"the file name says {generation}")
        if "manifest" not in mf.sections or mf.section_info("manifest")["dtype"] != "<u1" or \
                len(mf.section_info("manifest")["shape"]) != 1:
            raise storage.format_error(path, "missing section", "section 'manifest' (<u1, 1-D) is required")
        mf.verify()  # CRC-32 of the body (R18): a manifest is used only when this passes
        raw = bytes(mf.sections["manifest"])
        user = mf.user
    finally:
        mf.close()
    if len(raw) > MAX_BODY_BYTES:
        raise storage.format_error(path, "bad manifest", f"body of {len(raw)} bytes")
    try:
        body = msgpack.unpackb(raw, raw=False, object_pairs_hook=_unique_pairs, ext_hook=_refuse_ext,
                               strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:  # ExtraData, FormatError, StackError...
        raise storage.format_error(path, "bad manifest", f"the body is not a msgpack map: {exc}") from None
    if not isinstance(body, dict):
        raise storage.format_error(path, "bad manifest", f"the body is a {type(body).__name__}, not a map")
    b = _Body(path, body)
    if b.int("generation", 0, names.MAX_GENERATION) != generation:
        raise b.fail(f"key 'generation' = {body['generation']}, the file name says {generation}")
    training = None
    if body.get("quantizer") is None and "quantizer" in body:
        training = _read_training(b, body.get("training"))
        quantizer = None
    else:
        quantizer = b.name(body.get("quantizer"), "quantizer", lambda n: True)
        if body.get("training") is not None:
            raise b.fail("key 'training' must be nil (or absent) when key 'quantizer' names a quantizer file")
    norm_encoding = b.choice("norm_encoding", NORM_ENCODINGS)
    store_vectors = b.choice("store_vectors", STORE_VECTORS, nullable=True)
    if training is not None and store_vectors is None:
        raise b.fail("key 'store_vectors' = nil in a collection that has not trained its quantizer: its rows are "
                     "stored vectors")
    if training is not None and store_vectors not in EXACT_STORE_VECTORS:  # C14
        raise b.fail(f"key 'store_vectors' = {store_vectors!r} in a collection that has not trained its quantizer: "
                     f"its rows are files of stored vectors, which store {', '.join(map(repr, EXACT_STORE_VECTORS))} "
                     "(sq8 codes need the value ranges of a fitted model)")
    next_id = b.int("next_id", 0, MAX_ID + 1)
    merge_factor = b.int("merge_factor", 2, 2**31 - 1)
    max_merge_rows = b.int("max_merge_rows", 1, MAX_ID)
    operation = body.get("operation", "")
    if type(operation) is not str:
        raise b.fail(f"key 'operation' = {operation!r}, expected a str")
    raw_segments = body.get("segments")
    if not isinstance(raw_segments, list):
        raise b.fail(f"key 'segments' = {raw_segments!r}, expected an array")
    segments, seen = [], set()
    for number, entry in enumerate(raw_segments):
        where = f"segments[{number}]:"
        if not isinstance(entry, dict):
            raise b.fail(f"{where} not a map")
        file = b.name(entry.get("file"), f"{where} file", names.is_segment)
        rows = b.int("rows", 1, MAX_ID, where, entry)
        min_id = b.int("min_id", 0, MAX_ID, where, entry)
        max_id = b.int("max_id", min_id, MAX_ID, where, entry)
        deleted = b.int("deleted", 0, rows - 1, where, entry)
        deletions = entry.get("deletions")
        if deletions is not None:
            b.name(deletions, f"{where} deletions", names.is_deletions)
        if (deletions is None) != (deleted == 0):
            raise b.fail(f"{where} 'deletions' = {deletions!r} with 'deleted' = {deleted}: a deletion file exactly "
                         "when rows are deleted")
        if max_id - min_id + 1 < rows:
            raise b.fail(f"{where} {rows} rows with unique ids cannot lie in {min_id}..{max_id}")
        if max_id >= next_id:
            raise b.fail(f"{where} 'max_id' = {max_id} is not below 'next_id' = {next_id}")
        for name in (file, deletions):
            if name is not None and name in seen:
                raise b.fail(f"{where} file {name!r} is referenced twice")
            seen.add(name)
        segments.append(SegmentEntry(file, rows, min_id, max_id, deletions, deleted))
    manifest = Manifest(generation, quantizer, norm_encoding, store_vectors, next_id, merge_factor, max_merge_rows,
                        tuple(segments), operation, training, _read_auto(b, body.get("auto_model"), training))
    return manifest, user


def _read_auto(b, raw, training):
    """The ``auto_model`` map (docs/FORMAT.md 13.3), or None when absent: a metric its training's agrees with, and
    the rows its model was trained on (nil exactly before training)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise b.fail(f"key 'auto_model' = {raw!r}, expected a map or nil")
    metric = raw.get("metric")
    if metric not in ("l2", "ip", "cosine"):
        raise b.fail(f"auto_model: 'metric' = {metric!r}, expected 'l2', 'ip' or 'cosine'")
    rows = raw.get("trained_rows")
    if training is not None:
        if rows is not None:
            raise b.fail(f"auto_model: 'trained_rows' = {rows!r} before training, expected nil")
        if training.params.get("metric", "l2") != metric:
            raise b.fail(f"auto_model: 'metric' = {metric!r}, the training's is {training.params.get('metric')!r}")
    else:
        rows = b.int("trained_rows", 1, MAX_ID, "auto_model:", raw)
    return AutoModel(metric, rows)


def _read_training(b, raw):
    """The ``training`` map of a collection that has not trained its quantizer (docs/FORMAT.md 13.3), checked by the
    rules of the quantizers' own parameters."""
    if not isinstance(raw, dict):
        raise b.fail(f"key 'quantizer' = nil needs key 'training' (a map), got {raw!r}")
    method = raw.get("method")
    if type(method) is not str or method not in METHODS:
        raise b.fail(f"training: 'method' = {method!r}, expected one of {', '.join(map(repr, METHODS))}")
    params = raw.get("params")
    if not isinstance(params, dict):
        raise b.fail(f"training: 'params' = {params!r}, expected a map")
    checked = {}
    for name in STORED_PARAMETERS:
        if name not in params:
            if PARAMETERS[name].absent_means is None:
                raise b.fail(f"training: 'params' has no key {name!r}")
            continue
        try:
            checked[name] = PARAMETERS[name].check(params[name])
        except (TypeError, ValueError):
            raise b.fail(f"training: 'params'[{name!r}] = {params[name]!r}, expected "
                         f"{PARAMETERS[name].describe()}") from None
    for name, value in METHODS[method]._fixed.items():
        if checked.get(name, value) != value:
            raise b.fail(f"training: method {method!r} has {name} = {value}, got {checked[name]}")
    ivf = raw.get("ivf")
    if ivf is not None:
        if not isinstance(ivf, dict):
            raise b.fail(f"training: 'ivf' = {ivf!r}, expected a map or nil")
        ivf = {"n_lists": b.int("n_lists", 1, MAX_LISTS, "training: ivf", ivf),
               "n_iter": b.int("n_iter", 1, 2**31 - 1, "training: ivf", ivf),
               "seed": None if ivf.get("seed") is None else b.int("seed", 0, 2**64 - 1, "training: ivf", ivf)}
    dim = raw.get("dim")
    if dim is not None:
        dim = b.int("dim", 1, 2**31 - 1, "training:", raw)
        if checked["n_subspaces"] > dim:
            raise b.fail(f"training: 'n_subspaces' = {checked['n_subspaces']} exceeds 'dim' = {dim}")
    train_size = b.int("train_size", 1, MAX_ID, "training:", raw)
    return Training(method, checked, ivf, dim, train_size)


def read_deletions(path, entry):
    """The deleted ids of the segment ``entry`` (int64, sorted, unique, in memory), after the checks of C6."""
    mf = _open_kind(path, KIND_DELETIONS)
    try:
        if mf.meta.get("segment") != entry.file:
            raise storage.format_error(path, "bad deletions", f"meta 'segment' = {mf.meta.get('segment')!r}, the "
                                                              f"manifest lists it for {entry.file!r}")
        if "ids" not in mf.sections or mf.section_info("ids")["dtype"] != "<i8" or \
                mf.section_info("ids")["shape"] != (entry.deleted,):
            info = mf.section_info("ids") if "ids" in mf.sections else None
            raise storage.format_error(path, "bad deletions", f"section 'ids' must be <i8 of shape ({entry.deleted},) "
                                                              f"as the manifest says, got {info}")
        mf.verify()
        ids = np.array(mf.sections["ids"], dtype=np.int64)
    finally:
        mf.close()
    if ids.size and (int(ids[0]) < entry.min_id or int(ids[-1]) > entry.max_id or not (ids[1:] > ids[:-1]).all()):
        raise storage.format_error(path, "bad deletions", "ids must be sorted, unique and within the segment's "
                                                          f"{entry.min_id}..{entry.max_id}")
    return ids
