"""The index layer's schema of a container file: its meta map and its sections (docs/FORMAT.md section 11).

Writing: ``quantizer_meta`` and ``put_quantizer_sections`` give what every index or quantizer file holds about its
model; ``check_user_metadata`` refuses metadata a header cannot hold before anything is written. Reading:
``read_file`` runs every open-time check of section 11.4 on an opened container, in order, as a straight line of
early returns, each failure a FormatError naming the check and the meta key or section. The rule numbers (I1, I2,
...) are those of docs/FORMAT.md section 12.

``FileSchema`` is the flat kind's schema (``FLAT_FILES``): the values of meta "kind" of its files and how their model
part is written and read. The inverted file's schema (``ivf_schema.IVFFileSchema``) builds on it; ``read_file`` takes
the schema of a file's kind from ``ockstore._registry`` and never names a kind itself.
"""

from __future__ import annotations

import collections
import math
import threading

import msgpack
import numpy as np

from .. import _registry, storage
from .._blas import blas_single_thread
from ..search.codes import FASTSCAN_MAX_WORDS, CodeBlocks, block_bytes, blocks_of_runs, uses_blocks
from ..quantizers.tables import SubspaceLayout
from .._index_rows import NORM_DTYPES, NORM_ENCODINGS, STORE_VECTORS, STORED_VECTOR_DTYPES
from .._validation import MAX_ABS_VALUE
from .._version import __version__
from ..quantizers.params import STORED_PARAMETERS
from ..quantizers.cartesian import METHODS, PARAMETERS, quantizer_from_state
from .segment_file import KIND_SEGMENT, OPEN_THE_COLLECTION, SEGMENT_MINOR_VERSION, model_ref_of

__all__ = ["KIND_INDEX", "KIND_QUANTIZER", "KIND_FASTSCAN_INDEX", "FASTSCAN_MINOR_VERSION", "HEADER_MARGIN",
           "ROTATION_TOLERANCE", "ROW_SECTIONS", "FileSchema", "FLAT_FILES", "check_user_metadata", "quantizer_meta",
           "format_minor_version", "quantizer_arrays", "check_quantizer", "check_model_arrays", "check_value_ranges",
           "check_bounded", "model_error", "put_quantizer_sections", "put_value_ranges", "SQ8_MINOR_VERSION",
           "read_file"]

# docs/FORMAT.md section 11: the values of meta "kind" of flat files and the number of levels of the one-byte norm
# quantizer. (Inverted files: ivf_schema.py; every kind's values: ockstore._registry.file_kinds().)
KIND_INDEX = "index"
KIND_QUANTIZER = "quantizer"
N_NORM_LEVELS = 256

# The format minor version from which a file may hold the section 'value_ranges' and sq8 vectors (rule I21).
SQ8_MINOR_VERSION = 3

# docs/FORMAT.md section 16: the index files of models with at most 16 words per codebook store their codes in
# fast-scan blocks (section "code_blocks"), under a kind of their own, from format 1.3. Readers of 1.0-1.2 refuse them
# ("unknown kind") instead of failing on a missing "codes" section, or worse.
KIND_FASTSCAN_INDEX = "fastscan-index"
FASTSCAN_MINOR_VERSION = 3

# The sections of the rows of an index (sections 11.2 and 16), which a quantizer file does not hold.
ROW_SECTIONS = ("codes", "code_blocks", "norms", "ids", "vectors")
# The sections of a flat model (section 11.2, and value_ranges, section 17), which a segment by reference does not hold
# (section 18, S3; each kind adds its own, e.g. the coarse sections of an inverted file).
MODEL_SECTIONS = ("rotation", "codebooks", "objective_history", "norm_levels", "value_ranges")

# docs/FORMAT.md rule I6: the largest max |R^T R - I| a rotation may show. ockstore's own float32 rotations show about
# 6e-8 (every method with a rotation, flat and IVF, on sift and minilm, and the golden files), the float32 product at
# open adds well under 1e-5: the margin is wide, and a rotation this far from orthogonal would distort every distance.
ROTATION_TOLERANCE = 1e-3

# docs/FORMAT.md rules I6 and V3: bounds on the values of a model, so that every distance a search computes stays finite
# in float32, as the bound on every vector input (|v| <= MAX_ABS_VALUE = 1e15) makes it for the vectors. Codebook words
# live in the rotated space, where a vector within +-1e15 has coordinates up to sqrt(P) * 1e15; coarse centroids are
# means of input vectors (within +-1e15); norm levels are squared norms of reconstructions, 0 <= level <= 4 P 1e30
# (reconstructions within +-2e15 per coordinate). A file whose model breaks them (e.g. centroids rewritten to 1e20 with
# the CRCs recomputed) would otherwise open, verify, and answer every search with padding only.
def model_value_bounds(P):
    """{"words": bound on |codebooks|, "centroids": bound on |coarse_centroids|, "levels": bound on norm levels}."""
    return {"words": MAX_ABS_VALUE * math.sqrt(P), "centroids": MAX_ABS_VALUE, "levels": 4.0 * P * MAX_ABS_VALUE ** 2}


def check_bounded(fail, name, arr, bound, non_negative=False):
    """``fail("value out of range", detail)`` naming the section when a value of ``arr`` (finite) is beyond +-bound,
    or negative with ``non_negative`` (I6, V3, I21)."""
    largest = float(np.abs(arr).max()) if arr.size else 0.0
    if largest > bound:
        raise fail("value out of range", f"section {name!r} holds values of magnitude up to {largest:.3g}, "
                                         f"beyond {bound:.3g}")
    if non_negative and arr.size and float(arr.min()) < 0:
        raise fail("value out of range", f"section {name!r} holds {float(arr.min()):.3g}: squared norms are >= 0")


# The checks of a model's sections below are shared by the readers (``fail`` gives a FormatError naming the file) and
# the writers (``model_error``: a ValueError naming the model): a writer refuses, before writing anything, a model
# whose file its reader would refuse, instead of writing a file that does not open.
def model_error(check, detail):
    """The error of a writer given a model whose file would not open (the reader's check and detail)."""
    return ValueError(f"quantizer: {check}: {detail}; a file holding this model would not open (docs/FORMAT.md I6, "
                      "V3, I21), so nothing was written")


def check_model_arrays(fail, arrays, P, M):
    """I6 on the sections of a model (``arrays``: rotation when it has one, codebooks, objective_history, norm_levels
    when it has them, in their file dtypes): finite ("non-finite values"), bounded ("value out of range"), the
    rotation orthogonal, the codebooks' padding zero, the norm levels ascending."""
    for name, arr in arrays.items():
        if not np.isfinite(arr).all():
            raise fail("non-finite values", f"section {name!r} holds NaN or infinite values")
    bounds = model_value_bounds(P)
    check_bounded(fail, "codebooks", arrays["codebooks"], bounds["words"])
    if "norm_levels" in arrays:
        check_bounded(fail, "norm_levels", arrays["norm_levels"], bounds["levels"], non_negative=True)
    if "rotation" in arrays:
        _check_orthogonal(fail, arrays["rotation"], P)
    S = arrays["codebooks"].shape[-1]
    sizes = SubspaceLayout(P, M).sizes
    for m in range(M):
        if arrays["codebooks"][m, :, :, sizes[m]:].any():
            raise fail("non-zero codebook padding",
                       f"section 'codebooks': subspace {m} has {sizes[m]} dimensions, but its words have "
                       f"non-zero values in columns {sizes[m]}..{S - 1}")
    if "norm_levels" in arrays and (np.diff(arrays["norm_levels"]) < 0).any():
        raise fail("unsorted norm levels", "section 'norm_levels' is not in ascending order")


# Rotations found orthogonal lately (copies): a collection writes and opens a segment file of the same model at every
# add, and the check's product, O(P^3), would cost each add about a millisecond at P = 384 (5 ms at P = 960), where
# comparing the rotation with one checked before costs a read of it.
_ORTHOGONAL = collections.deque(maxlen=8)
_ORTHOGONAL_LOCK = threading.Lock()


def _check_orthogonal(fail, R, P):
    """I6: max |R^T R - I| <= ROTATION_TOLERANCE (``fail`` "rotation not orthogonal" otherwise)."""
    with _ORTHOGONAL_LOCK:
        known = list(_ORTHOGONAL)
    if any(checked.shape == R.shape and np.array_equal(checked, R) for checked in known):
        return
    # One BLAS thread: a multi-threaded product would leave OpenBLAS's threads spinning for a while after it,
    # competing with the encoder's threads (a collection opens each segment it commits: adds were 1.4x slower).
    with np.errstate(over="ignore", invalid="ignore"), blas_single_thread():  # huge values: inf/NaN, below
        gram = R.T @ R  # O(P^3) in float32 BLAS: 5 ms at P = 960
        gram[np.diag_indices(P)] -= 1
        deviation = float(np.abs(gram).max())
    if not deviation <= ROTATION_TOLERANCE:
        raise fail("rotation not orthogonal", f"section 'rotation': max |R^T R - I| = {deviation:.3g}, "
                                              f"more than {ROTATION_TOLERANCE:g}")
    with _ORTHOGONAL_LOCK:
        _ORTHOGONAL.append(np.array(R, dtype=np.float32))


def check_value_ranges(fail, ranges):
    """I21 on the section 'value_ranges' (2, P) float32: finite, within the bound of every vector input (the ranges
    are the smallest and largest training values: a value beyond it would make every sq8 row's distance infinite),
    lo <= hi in every dimension."""
    if not np.isfinite(ranges).all():
        raise fail("non-finite values", "section 'value_ranges' holds NaN or infinite values")
    check_bounded(fail, "value_ranges", ranges, MAX_ABS_VALUE)
    if (ranges[0] > ranges[1]).any():
        p = int(np.argmax(ranges[0] > ranges[1]))
        raise fail("bad value ranges", f"section 'value_ranges': dimension {p} has lowest value "
                                       f"{float(ranges[0, p])!r} above its highest {float(ranges[1, p])!r}")


# The header holds the user metadata plus the index's own meta and section list, which take well under 1 KiB (eight
# params, seven section entries, every int at most 9 bytes packed). User metadata is refused up front when it leaves
# less than this margin, so that a long build cannot fail at its very end because of its metadata (I11).
HEADER_MARGIN = 4096

# The ``library`` string of the files this layer writes (I9): the package and its version, no timestamp.
LIBRARY = f"ockstore {__version__}"


# ====================================================================================================================
# writing


def check_user_metadata(metadata, name="metadata"):
    """A canonical copy of the user metadata (None means {}), checked as the container will check it (R24:
    TypeError) and small enough to leave room for the index's own header (I11: ValueError). Nothing is written."""
    if metadata is None:
        return {}
    storage.check_metadata(metadata, name)
    user = storage.canonical_metadata(metadata)  # a copy: later changes by the caller do not reach the file
    size = len(msgpack.packb(user, use_bin_type=True))
    if size > storage.MAX_HEADER_BYTES - HEADER_MARGIN:
        raise ValueError(f"{name} takes {size} bytes packed; at most {storage.MAX_HEADER_BYTES - HEADER_MARGIN} "
                         f"fit in a file header (MAX_HEADER_BYTES = {storage.MAX_HEADER_BYTES} less {HEADER_MARGIN} "
                         "for the index's own entries): store large data elsewhere")
    return user


def quantizer_meta(kind, quantizer):
    """The meta map of a quantizer or index file (I1, I2, I9), as Python scalars."""
    params = {"dim": int(quantizer.dim), **quantizer._stored_params()}
    return {"kind": kind, "library": LIBRARY, "method": quantizer.method, "params": params}


# The format minor version of the norm term of cosine indexes and of the norm levels of cosine quantizers with C = 1
# (docs/FORMAT.md I20).
COSINE_NORM_MINOR_VERSION = 3


def format_minor_version(quantizer, store_vectors, norm_encoding="none", value_ranges=False):
    """The format minor version a file needs (docs/FORMAT.md, "Versions"): 3 for the norm term of a cosine index or
    the norm levels of a cosine quantizer with one codebook per subspace (I20), for the section 'value_ranges'
    (``value_ranges``: the file holds it) or sq8 vectors (I21), 1 for a metric other than "l2" or stored vectors
    (format 1.1), 0 otherwise, so that files using none are exactly what earlier writers wrote."""
    if value_ranges or store_vectors == "sq8":
        return SQ8_MINOR_VERSION
    if quantizer.metric == "cosine" and (norm_encoding != "none" or (quantizer.n_codebooks == 1
                                                                      and quantizer.norm_levels is not None)):
        return COSINE_NORM_MINOR_VERSION
    return 1 if quantizer.metric != "l2" or store_vectors is not None else 0


def quantizer_arrays(quantizer):
    """The sections of a model as its file stores them: rotation (not for PQ), codebooks, objective_history,
    norm_levels (C >= 2, and cosine quantizers), in this order (I4, I5), in their file dtypes."""
    arrays = {}
    if quantizer.rotation is not None:
        arrays["rotation"] = np.ascontiguousarray(quantizer.rotation, dtype="<f4")
    arrays["codebooks"] = np.ascontiguousarray(quantizer.codebooks, dtype="<f4")
    arrays["objective_history"] = np.ascontiguousarray(quantizer.objective_history, dtype="<f8")
    if quantizer.norm_levels is not None:
        arrays["norm_levels"] = np.ascontiguousarray(quantizer.norm_levels, dtype="<f4")
    return arrays


def check_quantizer(quantizer):
    """ValueError (model_error) when a file of ``quantizer`` would break I6: what the reader checks, checked before
    anything is written."""
    check_model_arrays(model_error, quantizer_arrays(quantizer), quantizer.dim, quantizer.n_subspaces)


def put_quantizer_sections(writer, quantizer):
    """rotation (not for PQ), codebooks, objective_history, norm_levels (C >= 2), in this order (I4, I5), after the
    checks of the reader (I6: ValueError before anything is written)."""
    arrays = quantizer_arrays(quantizer)
    check_model_arrays(model_error, arrays, quantizer.dim, quantizer.n_subspaces)
    for name, arr in arrays.items():
        writer.put(name, arr)


def put_value_ranges(writer, model):
    """The section 'value_ranges' of ``model`` (I21): after every section of the model, before the rows; checked as
    the reader checks it."""
    ranges = np.ascontiguousarray(model.value_ranges, dtype="<f4")
    check_value_ranges(model_error, ranges)
    writer.put("value_ranges", ranges)


# ====================================================================================================================
# reading (docs/FORMAT.md section 11.4; a straight line of early returns, each a FormatError)


def _short(value):
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class _Reader:
    """The index-layer checks of one opened container, in the order of docs/FORMAT.md section 11.4."""

    def __init__(self, mf):
        self.mf = mf
        self.path = mf.path
        self.meta = mf.meta
        self.by_reference = False  # a segment by reference (meta "kind" "segment", section 18)

    def fail(self, check, detail):
        return storage.format_error(self.path, check, detail)

    # ---- meta (I1-I3)

    def kind(self, index_only):
        """meta 'kind' (I1): (the file kind, its IndexKind, whether the file is an index). For a segment by reference
        (section 18, S1), the kind of index file its meta 'index_kind' names."""
        kind = self.meta.get("kind")
        if type(kind) is not str:
            raise self.fail("bad meta", f"meta 'kind' = {_short(kind)}, expected a str: is this an ockstore index "
                                        "or quantizer file?")
        if kind == KIND_SEGMENT:
            return self.segment_kind()
        found = _registry.of_file(kind)
        if found is None:
            raise self.fail("unknown kind", f"meta 'kind' = {_short(kind)}, expected "
                                            f"{', '.join(repr(k) for k in (*_registry.file_kinds(), KIND_SEGMENT))}")
        if index_only and not found[1]:
            raise self.fail("wrong kind", f"the file holds a {kind}, not an index (meta 'kind' = {kind!r}); "
                                          "load it with ockstore.load_quantizer")
        return (kind, *found)

    # ---- segments by reference (section 18)

    def segment_kind(self):
        """A segment by reference (S1): format 1.4 or more, meta 'index_kind' one of the index kinds; returns the
        file kind, IndexKind and is-index of that index kind."""
        self.by_reference = True
        major, minor = self.mf.version
        if (major, minor) < (1, SEGMENT_MINOR_VERSION):
            raise self.fail("bad format version", f"meta 'kind' = {KIND_SEGMENT!r} exists from format "
                                                  f"1.{SEGMENT_MINOR_VERSION}, but the file says {major}.{minor}")
        kind = self.meta.get("index_kind")
        found = _registry.of_file(kind) if type(kind) is str else None
        if found is None or not found[1]:
            index_kinds = [k for k in _registry.file_kinds() if _registry.of_file(k)[1]]
            raise self.fail("bad meta", f"meta 'index_kind' = {_short(kind)}, expected the kind of an index file: "
                                        f"{', '.join(repr(k) for k in index_kinds)}")
        return (kind, *found)

    def linked_model(self, files, kind, given):
        """The model of a segment by reference: ``given`` (a segment_file.LinkedModel) when it is the model meta
        'model' names (S2, S4), else a FormatError naming both files; its sections are not in the segment (S3)."""
        ref = model_ref_of(self.meta, self.fail)
        if self.meta.get("has_ids") is not True:
            raise self.fail("bad meta", f"meta 'has_ids' = {_short(self.meta.get('has_ids'))}, expected true: a "
                                        "segment always stores its ids")
        for name in MODEL_SECTIONS + tuple(n for n in kind.files.own_sections if n not in kind.files.row_sections):
            self.absent(name, f"a segment by reference holds no model (its model is in {ref.file!r})")
        if given is None:
            raise self.fail("missing model", f"the file is a segment of a collection whose model is in its quantizer "
                                             f"file {ref.file!r}: {OPEN_THE_COLLECTION}")
        if given.ref != ref:
            raise self.fail("model mismatch", f"the segment was written with the model of quantizer file {ref.file!r} "
                                              f"(fingerprint {ref.fingerprint[:16]}...), but is opened with "
                                              f"{given.path!r} (fingerprint {given.ref.fingerprint[:16]}...)")
        model = given.model
        expected = storage.canonical_metadata(files.meta(files.quantizer_kind, model)) \
            if _registry.find_model(model) is kind else None
        for key in ("method", "params", "ivf"):
            ours, theirs = self.meta.get(key), None if expected is None else expected.get(key)
            if expected is not None and ours == theirs:
                continue
            where = f"meta {key!r}"
            if isinstance(ours, dict) and isinstance(theirs, dict):  # name the first parameter that differs
                name = sorted(k for k in {*ours, *theirs} if ours.get(k) != theirs.get(k))[0]
                where, ours, theirs = f"meta {key!r}[{name!r}]", ours.get(name), theirs.get(name)
            what = "another kind of model" if expected is None else _short(theirs)
            raise self.fail("model mismatch", f"{where} = {_short(ours)}, but the model of {given.path!r} has {what}")
        if self.meta.get("store_vectors") == "sq8" and model.value_ranges is None:
            raise self.fail("model mismatch", f"meta 'store_vectors' = 'sq8' needs the model's value ranges, which "
                                              f"{given.path!r} does not hold")
        return model

    def _int(self, where, value, lo, hi=None):
        if type(value) is not int or value < lo or (hi is not None and value > hi):
            expected = f"an int >= {lo}" if hi is None else f"an int in {lo}..{hi}"
            raise self.fail("bad meta", f"{where} = {_short(value)}, expected {expected}")
        return value

    def params(self):
        """meta 'method' and 'params' (I2), checked by the rules of the quantizers' own parameters; returns the params
        for quantizer_from_state (with 'method' and 'dim')."""
        method = self.meta.get("method")
        if type(method) is not str or method not in METHODS:
            raise self.fail("bad meta", f"meta 'method' = {_short(method)}, expected one of "
                                        f"{', '.join(repr(m) for m in METHODS)}")
        params = self.meta.get("params")
        if not isinstance(params, dict):
            raise self.fail("bad meta", f"meta 'params' = {_short(params)}, expected a map")
        for key in ("dim", *STORED_PARAMETERS):
            if key not in params and (key == "dim" or PARAMETERS[key].absent_means is None):
                raise self.fail("bad meta", f"meta 'params' has no key {key!r}")
        p = {"method": method, "dim": self._int("meta 'params'['dim']", params["dim"], 1)}
        for name in STORED_PARAMETERS:
            if name not in params:
                p[name] = PARAMETERS[name].absent_means  # a parameter added after format 1.0, at its old value
                continue
            try:
                p[name] = PARAMETERS[name].check(params[name])
            except (TypeError, ValueError):
                raise self.fail("bad meta", f"meta 'params'[{name!r}] = {_short(params[name])}, expected "
                                            f"{PARAMETERS[name].describe()}") from None
        if p["n_subspaces"] > p["dim"]:
            raise self.fail("bad meta", f"meta 'params'['n_subspaces'] = {p['n_subspaces']}, expected at most "
                                        f"'dim' = {p['dim']}")
        for name, value in METHODS[method]._fixed.items():
            if p[name] != value:
                raise self.fail("bad meta", f"meta 'params': method {method!r} has {name} = {value}, "
                                            f"got {p[name]}")
        return p

    def index_meta(self, p, ivf=False):
        """meta 'ntotal', 'norm_encoding', 'has_ids', 'store_vectors' of an index file (I3; with ``ivf``, V6: a norm
        term exactly for metric "l2", has_ids true)."""
        ntotal = self._int("meta 'ntotal'", self.meta.get("ntotal"), 0)
        encoding = self.meta.get("norm_encoding")
        if type(encoding) is not str or encoding not in NORM_ENCODINGS:
            raise self.fail("bad meta", f"meta 'norm_encoding' = {_short(encoding)}, expected 'f32', 'u8' or 'none'")
        needs_norm = (ivf or p["n_codebooks"] > 1) and p["metric"] == "l2"
        if p["metric"] == "cosine" and encoding != "none" and self.mf.version < (1, COSINE_NORM_MINOR_VERSION):
            raise self.fail("bad meta", f"meta 'norm_encoding' = {encoding!r} with metric 'cosine' exists from format "
                                        f"1.{COSINE_NORM_MINOR_VERSION}, but the file says "
                                        f"{self.mf.version[0]}.{self.mf.version[1]}")
        if p["metric"] != "cosine" and needs_norm == (encoding == "none"):  # I3; cosine: any of the three (I20)
            expected = "'f32' or 'u8'" if needs_norm else "'none'"
            what = "an inverted file" if ivf else f"n_codebooks = {p['n_codebooks']}"
            raise self.fail("bad meta", f"meta 'norm_encoding' = {encoding!r} with {what} and metric "
                                        f"{p['metric']!r}, expected {expected}")
        has_ids = self.meta.get("has_ids")
        if type(has_ids) is not bool or (ivf and not has_ids):
            expected = "true (an inverted file always stores its ids)" if ivf else "true or false"
            raise self.fail("bad meta", f"meta 'has_ids' = {_short(has_ids)}, expected {expected}")
        store_vectors = self.meta.get("store_vectors")  # absent: no stored vectors (format 1.0 had none)
        if "store_vectors" in self.meta and (type(store_vectors) is not str or store_vectors not in STORE_VECTORS):
            raise self.fail("bad meta", f"meta 'store_vectors' = {_short(store_vectors)}, expected "
                                        f"{', '.join(repr(v) for v in STORE_VECTORS)} (or no key)")
        if store_vectors == "sq8" and self.mf.version < (1, SQ8_MINOR_VERSION):
            raise self.fail("bad format version", f"meta 'store_vectors' = 'sq8' exists from format "
                                                  f"1.{SQ8_MINOR_VERSION}, but the file says "
                                                  f"{self.mf.version[0]}.{self.mf.version[1]}")
        return ntotal, encoding, has_ids, store_vectors

    # ---- sections (I4, I5)

    def section(self, name, dtype, shape, rows=None):
        """The view of a required section of exactly ``dtype`` and ``shape`` (None in ``shape``: any length >= 1);
        ``rows``: the row count meta 'ntotal' gives."""
        if name not in self.mf.sections:
            raise self.fail("missing section", f"section {name!r} is required in this file")
        info = self.mf.section_info(name)
        if info["dtype"] != dtype:
            raise self.fail("bad section dtype", f"section {name!r}: dtype {info['dtype']!r}, expected {dtype!r}")
        got = info["shape"]
        if rows is not None and len(got) == len(shape) and got[0] != rows:
            raise self.fail("row count mismatch", f"section {name!r}: {got[0]} rows, meta 'ntotal' is {rows}")
        if len(got) != len(shape) or any(want is not None and g != want for g, want in zip(got, shape)) or (
                None in shape and got[shape.index(None)] < 1):
            want = "[" + ", ".join("n >= 1" if d is None else str(d) for d in shape) + "]"
            raise self.fail("bad section shape", f"section {name!r}: shape {list(got)}, expected {want}")
        return self.mf.sections[name]

    def absent(self, name, why):
        if name in self.mf.sections:
            raise self.fail("unexpected section", f"section {name!r} must not be present: {why}")

    def quantizer_sections(self, p):
        """The small sections, checked (I4-I6); returns the arrays for quantizer_from_state, as copies."""
        P, M, C, K = p["dim"], p["n_subspaces"], p["n_codebooks"], p["n_codewords"]
        S = -(-P // M)
        views = {}
        if p["method"] == "pq":
            self.absent("rotation", "method 'pq' has no rotation")
        else:
            views["rotation"] = self.section("rotation", "<f4", (P, P))
        views["codebooks"] = self.section("codebooks", "<f4", (M, C, K, S))
        views["objective_history"] = self.section("objective_history", "<f8", (None,))
        if C > 1:
            views["norm_levels"] = self.section("norm_levels", "<f4", (N_NORM_LEVELS,))
        elif p["metric"] == "cosine" and "norm_levels" in self.mf.sections:  # I20: since 1.3, optional
            views["norm_levels"] = self.section("norm_levels", "<f4", (N_NORM_LEVELS,))
        else:
            self.absent("norm_levels", "n_codebooks = 1 has no norm term" + (
                "" if p["metric"] != "cosine" else " (a cosine quantizer may hold its norm levels)"))
        arrays = {name: np.array(view) for name, view in views.items()}  # copies: the model outlives the mapping
        check_model_arrays(self.fail, arrays, P, M)  # I6: values of the small sections (the writers' check too)
        return arrays

    def fastscan(self, p, blocks):
        """A fast-scan kind (``blocks``) needs format 1.3 and a model with at most 16 words per codebook (F1)."""
        if not blocks:
            return
        major, minor = self.mf.version
        if (major, minor) < (1, FASTSCAN_MINOR_VERSION):
            raise self.fail("bad format version", f"meta 'kind' = {self.meta.get('kind')!r} exists from format "
                                                  f"1.{FASTSCAN_MINOR_VERSION}, but the file says {major}.{minor}")
        if not uses_blocks(p["n_codewords"]):
            raise self.fail("bad meta", f"meta 'kind' = {self.meta.get('kind')!r} stores 4-bit words, but meta "
                                        f"'params'['n_codewords'] = {p['n_codewords']} (more than "
                                        f"{FASTSCAN_MAX_WORDS})")

    def code_sections(self, p, ntotal, blocks, runs):
        """codes (I4), or for a fast-scan kind code_blocks (F2): the blocks of ``runs`` (the rows of each run; None:
        one run of ntotal rows), as a CodeBlocks over the view; the other of the two absent (I5, F2)."""
        W = p["n_subspaces"] * p["n_codebooks"]
        if not blocks:
            self.absent("code_blocks", f"meta 'kind' is {self.meta.get('kind')!r}, whose codes are one byte per word")
            return self.section("codes", "<u1", (ntotal, W), rows=ntotal)
        self.absent("codes", f"meta 'kind' is {self.meta.get('kind')!r}, whose codes are in 'code_blocks'")
        n_blocks = int(blocks_of_runs(runs if runs is not None else [0, ntotal])[-1])
        view = self.section("code_blocks", "<u1", (n_blocks, block_bytes(W)))
        return CodeBlocks(view, W, runs, ntotal)

    def index_sections(self, p, ntotal, encoding, has_ids, store_vectors, blocks=False, runs=None):
        """Views of codes (or code_blocks), norms, ids, vectors (I4, I5, F2); their values are checked by Index.verify
        (I7, F3)."""
        codes = self.code_sections(p, ntotal, blocks, runs)
        norms = ids = None
        if encoding == "none":
            self.absent("norms", "meta 'norm_encoding' is 'none'")
        else:
            norms = self.section("norms", NORM_DTYPES[encoding], (ntotal,), rows=ntotal)
        if has_ids:
            ids = self.section("ids", "<i8", (ntotal,), rows=ntotal)
        else:
            self.absent("ids", "meta 'has_ids' is false")
        vectors = None
        if store_vectors is None:
            self.absent("vectors", "meta 'store_vectors' is absent")
        else:
            dtype = storage.dtype_code(STORED_VECTOR_DTYPES[store_vectors], "vectors")  # "<u1", as written
            vectors = self.section("vectors", dtype, (ntotal, p["dim"]), rows=ntotal)
        return codes, norms, ids, vectors

    def value_ranges(self, model, P, required, allowed):
        """The section 'value_ranges' (I21), checked and given to ``model``: required in an index file of sq8 vectors,
        optional in a quantizer file (from format 1.3), refused elsewhere."""
        if not allowed:
            self.absent("value_ranges", "only a quantizer file or an index of sq8 vectors holds value ranges")
            return
        if not required and "value_ranges" not in self.mf.sections:
            return
        if self.mf.version < (1, SQ8_MINOR_VERSION):
            raise self.fail("bad format version", f"section 'value_ranges' exists from format 1.{SQ8_MINOR_VERSION}, "
                                                  f"but the file says {self.mf.version[0]}.{self.mf.version[1]}")
        ranges = np.array(self.section("value_ranges", "<f4", (2, P)))
        check_value_ranges(self.fail, ranges)  # the writers' check too
        model._set_value_ranges(ranges)

    def for_quantizer_file(self):
        """No section of the rows of an index, of any kind (I5)."""
        for name in ROW_SECTIONS + tuple(n for k in _registry.kinds() for n in k.files.row_sections):
            self.absent(name, "a quantizer file holds no vectors")

    def absent_sections_of_other_kinds(self, kind):
        """The sections only the files of another kind hold are not in this one (V4: the sections of an inverted file
        are not in a flat one)."""
        for other in _registry.kinds():
            if other is not kind:
                for name in other.files.own_sections:
                    self.absent(name, f"meta 'kind' is {self.meta.get('kind')!r}, not {other.files.description}")


class FileSchema:
    """The schema of the files of one kind of index: the flat one (``FLAT_FILES``); the inverted file's builds on it
    (``ivf_schema.IVFFileSchema``). Writing: the format minor version, the meta map and the sections of the model.
    Reading: the hooks ``read_file`` calls in its straight line of checks, for what a kind adds to the flat file."""

    index_kind = KIND_INDEX          # meta "kind" of its index files
    fastscan_index_kind = KIND_FASTSCAN_INDEX  # ... of those with 4-bit codes in fast-scan blocks
    quantizer_kind = KIND_QUANTIZER  # ... and of its quantizer files
    own_sections = ()                # sections only the files of this kind hold (V4 refuses them in the others)
    row_sections = ()                # sections of the rows beyond ROW_SECTIONS (a quantizer file holds none)
    description = "a flat index"     # what messages call a file of this kind

    # ---- writing
    def minor_version(self, model, store_vectors, norm_encoding="none", value_ranges=False, index=False):
        """The format minor version its files need (docs/FORMAT.md, "Versions"): 1.3 for value ranges or sq8 vectors
        (I21) and for an index of 4-bit codes."""
        minor = format_minor_version(model, store_vectors, norm_encoding, value_ranges)
        return max(minor, FASTSCAN_MINOR_VERSION) if index and uses_blocks(model.n_codewords) else minor

    def index_kind_of(self, model):
        """The meta "kind" of an index file of ``model``: the fast-scan kind when its codes are 4-bit words."""
        return self.fastscan_index_kind if uses_blocks(model.n_codewords) else self.index_kind

    def meta(self, file_kind, model):
        """The meta map of a file of ``file_kind`` holding ``model`` (I1, I2, I9)."""
        return quantizer_meta(file_kind, model)

    def put_model(self, writer, model):
        """The sections of ``model``, in file order (I4, I5)."""
        put_quantizer_sections(writer, model)

    def put_quantizer_file(self, writer, model):
        """Every section of a quantizer file of ``model``: its model's, then its value ranges when it learned them
        (I21). What ``save_quantizer`` writes and what the fingerprint of a model covers (section 18)."""
        self.put_model(writer, model)
        if model.value_ranges is not None:
            put_value_ranges(writer, model)

    # ---- reading (called by read_file, in this order)
    def read_meta(self, reader):
        """What the kind adds to the meta map, checked (None: nothing)."""
        return None

    def index_meta(self, reader, p):
        """meta 'ntotal', 'norm_encoding', 'has_ids', 'store_vectors' of an index file (I3)."""
        return reader.index_meta(p)

    def read_model(self, reader, meta, p, quantizer):
        """The model of the file, from its quantizer (read by the flat rules) and what ``read_meta`` returned."""
        return quantizer

    def read_rows(self, reader, meta, ntotal):
        """The arrays the kind adds to the rows of an index, by the keyword its index class takes them with."""
        return {}

    def row_runs(self, rows):
        """The runs of rows of an index (what ``read_rows`` returned): None, one run (an inverted file: its lists)."""
        return None


FLAT_FILES = FileSchema()


def read_file(mf, index_only, model=None):
    """Run every open-time check of docs/FORMAT.md sections 11.4, 14.4 and 18.4 on an opened container; returns
    (file kind, IndexKind, model, rows): the model is the quantizer, or the IVF of an inverted file; ``rows`` None for
    a quantizer file, else the keyword arguments of the kind's index class (codes, norms, ids, norm_encoding,
    vectors, and what the kind adds: list_offsets). ``index_only``: a quantizer file is refused ("wrong kind").
    ``model``: the segment_file.LinkedModel a segment by reference (section 18) is opened with (its model is returned;
    "missing model" without it); ignored for any other file. For a segment the file kind is its meta 'index_kind'."""
    reader = _Reader(mf)
    file_kind, kind, is_index = reader.kind(index_only)
    files = kind.files
    p = reader.params()
    meta = files.read_meta(reader)
    index_meta = files.index_meta(reader, p) if is_index else None
    if reader.by_reference:
        model = reader.linked_model(files, kind, model)
    else:
        arrays = reader.quantizer_sections(p)
        model = files.read_model(reader, meta, p, quantizer_from_state(p, arrays))
    rows = None
    if is_index:
        ntotal, encoding, has_ids, store_vectors = index_meta
        if encoding == "u8" and model.norm_levels is None:  # I20: a cosine index with C = 1 and no levels
            raise reader.fail("missing section", "section 'norm_levels' is required in this file (meta "
                                                 "'norm_encoding' is 'u8')")
        blocks = file_kind == files.fastscan_index_kind
        reader.fastscan(p, blocks)
        extra = files.read_rows(reader, meta, ntotal)
        codes, norms, ids, stored = reader.index_sections(p, ntotal, encoding, has_ids, store_vectors, blocks,
                                                          files.row_runs(extra))
        rows = {"codes": codes, "norms": norms, "ids": ids, "norm_encoding": encoding, "vectors": stored,
                "store_vectors": store_vectors, **extra}
    else:
        reader.for_quantizer_file()
    reader.absent_sections_of_other_kinds(kind)
    if not reader.by_reference:  # a segment's model has its ranges (checked by linked_model; S3: none here)
        sq8 = is_index and index_meta[3] == "sq8"
        reader.value_ranges(model, p["dim"], required=sq8, allowed=sq8 or not is_index)
    return file_kind, kind, model, rows
