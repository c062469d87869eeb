"""What an inverted-file (IVF) index or quantizer file holds beyond a flat one (docs/FORMAT.md section 14, rules
V1-V10): the meta map ``ivf``, the sections of the coarse quantizer and the list offsets, and their open-time checks.

The fine quantizer is stored exactly as a flat file stores its quantizer (meta ``method`` and ``params``, sections
rotation, codebooks, objective_history, norm_levels: section 11), so every rule of section 11 applies to it; the
rows (codes, norms, ids, vectors) are those of section 11.2, stored list after list. ``IVF_FILES`` (an
``IVFFileSchema``, building on the flat ``schema.FileSchema``) is the inverted file's schema in ``ockstore._registry``:
writing adds ``ivf_meta`` and ``put_ivf_sections``; reading adds ``read_ivf_meta``, ``read_ivf_model`` and
``read_list_offsets``, called by ``schema.read_file`` as part of its straight line of checks.
"""

from __future__ import annotations

import numpy as np

from ..search.codes import uses_blocks
from ..quantizers.ivf import MAX_LISTS, ivf_from_state
from .schema import (
    FASTSCAN_MINOR_VERSION, N_NORM_LEVELS, FileSchema, _short, check_bounded, check_quantizer, format_minor_version,
    model_error, model_value_bounds, put_quantizer_sections, quantizer_meta,
)

__all__ = ["KIND_IVF_INDEX", "KIND_IVF_QUANTIZER", "KIND_IVF_FASTSCAN_INDEX", "IVF_MINOR_VERSION", "IVFFileSchema",
           "IVF_FILES", "ivf_meta", "coarse_arrays", "check_coarse_arrays", "check_ivf", "put_ivf_sections",
           "read_ivf_meta", "read_ivf_model", "read_list_offsets"]

# docs/FORMAT.md section 14.1: the kinds of inverted-file files. Readers of format 1.0 and 1.1 know only "index" and
# "quantizer": they refuse these files ("unknown kind") instead of reading their rows as a flat index (V1).
KIND_IVF_INDEX = "ivf-index"
KIND_IVF_QUANTIZER = "ivf-quantizer"
# Section 15: an inverted file of 4-bit codes, its lists in fast-scan blocks (format 1.3).
KIND_IVF_FASTSCAN_INDEX = "ivf-fastscan-index"

# The format minor version that introduced inverted files (every IVF file says at least 1.2).
IVF_MINOR_VERSION = 2


# ====================================================================================================================
# writing


def ivf_meta(ivf):
    """The ``ivf`` map of the meta of an IVF file (V2): n_lists, n_iter, seed."""
    return ivf._stored_params()


def coarse_arrays(ivf):
    """coarse_centroids, coarse_objective_history, ivf_norm_levels, in this order and in their file dtypes."""
    _params, arrays = ivf._get_state()
    return {"coarse_centroids": np.ascontiguousarray(arrays["coarse_centroids"], dtype="<f4"),
            "coarse_objective_history": np.ascontiguousarray(arrays["coarse_objective_history"], dtype="<f8"),
            "ivf_norm_levels": np.ascontiguousarray(arrays["ivf_norm_levels"], dtype="<f4")}


def check_coarse_arrays(fail, arrays, P):
    """V3 on the coarse sections: finite, centroids and norm levels bounded (levels >= 0), levels ascending. Shared by
    the reader and the writers (schema.check_model_arrays says why)."""
    for name, arr in arrays.items():
        if not np.isfinite(arr).all():
            raise fail("non-finite values", f"section {name!r} holds NaN or infinite values")
    bounds = model_value_bounds(P)
    check_bounded(fail, "coarse_centroids", arrays["coarse_centroids"], bounds["centroids"])
    check_bounded(fail, "ivf_norm_levels", arrays["ivf_norm_levels"], bounds["levels"], non_negative=True)
    if (np.diff(arrays["ivf_norm_levels"]) < 0).any():
        raise fail("unsorted norm levels", "section 'ivf_norm_levels' is not in ascending order")


def check_ivf(ivf):
    """ValueError (schema.model_error) when a file of ``ivf`` would break I6 or V3, before anything is written."""
    check_quantizer(ivf.quantizer)
    check_coarse_arrays(model_error, coarse_arrays(ivf), ivf.dim)


def put_ivf_sections(writer, ivf):
    """coarse_centroids, coarse_objective_history, ivf_norm_levels, in this order, after the fine quantizer's (V3),
    checked as the reader checks them."""
    arrays = coarse_arrays(ivf)
    check_coarse_arrays(model_error, arrays, ivf.dim)
    for name, arr in arrays.items():
        writer.put(name, arr)


# ====================================================================================================================
# reading (docs/FORMAT.md section 14.4; each failure a FormatError naming the check and the meta key or section)


def read_ivf_meta(reader):
    """The file's version (V1: the IVF kinds exist from format 1.2), then meta 'ivf' (V2): a map of n_lists (int in
    1..2**24), n_iter (int >= 1), seed (int >= 0 or nil)."""
    major, minor = reader.mf.version
    if (major, minor) < (1, IVF_MINOR_VERSION):  # the container refuses majors other than 1 (R3)
        raise reader.fail("bad format version", f"meta 'kind' = {reader.meta.get('kind')!r} exists from format "
                                                f"1.{IVF_MINOR_VERSION}, but the file says {major}.{minor}")
    ivf = reader.meta.get("ivf")
    if not isinstance(ivf, dict):
        raise reader.fail("bad meta", f"meta 'ivf' = {_short(ivf)}, expected a map (n_lists, n_iter, seed)")
    for key in ("n_lists", "n_iter", "seed"):
        if key not in ivf:
            raise reader.fail("bad meta", f"meta 'ivf' has no key {key!r}")
    params = {"n_lists": reader._int("meta 'ivf'['n_lists']", ivf["n_lists"], 1, MAX_LISTS),
              "n_iter": reader._int("meta 'ivf'['n_iter']", ivf["n_iter"], 1)}
    seed = ivf["seed"]
    params["seed"] = None if seed is None else reader._int("meta 'ivf'['seed']", seed, 0)
    return params


def read_ivf_model(reader, ivf_params, p, quantizer):
    """The coarse sections (V3, V4), checked, and the IVF they make with the fine ``quantizer`` (copies of the
    arrays: the model outlives the mapping)."""
    L, P = ivf_params["n_lists"], p["dim"]
    views = {"coarse_centroids": reader.section("coarse_centroids", "<f4", (L, P)),
             "coarse_objective_history": reader.section("coarse_objective_history", "<f8", (None,)),
             "ivf_norm_levels": reader.section("ivf_norm_levels", "<f4", (N_NORM_LEVELS,))}
    arrays = {name: np.array(view) for name, view in views.items()}
    check_coarse_arrays(reader.fail, arrays, P)
    return ivf_from_state({"dim": P, **ivf_params}, arrays, quantizer)


def read_list_offsets(reader, n_lists, ntotal):
    """The list offsets of an IVF index (V5), checked at open (n_lists + 1 values, read whole): from 0 to ntotal,
    non-decreasing. A read-only view of the mapping."""
    offsets = reader.section("list_offsets", "<i8", (n_lists + 1,))
    first, last = int(offsets[0]), int(offsets[-1])
    if first != 0 or last != ntotal:
        raise reader.fail("bad list offsets", f"section 'list_offsets' runs from {first} to {last}, expected 0 to "
                                              f"meta 'ntotal' = {ntotal}")
    steps = np.diff(offsets)
    if steps.size and int(steps.min()) < 0:
        bad = int(np.argmax(steps < 0))
        raise reader.fail("bad list offsets", f"section 'list_offsets' decreases: list {bad} ends at "
                                              f"{int(offsets[bad + 1])}, before its start {int(offsets[bad])}")
    return offsets


# ====================================================================================================================
# the schema of the inverted file's kind (ockstore._registry)


class IVFFileSchema(FileSchema):
    """The files of an IVF: the flat schema of its fine quantizer, plus meta 'ivf', the coarse sections and (indexes)
    the list offsets; format 1.2 at least."""

    index_kind = KIND_IVF_INDEX
    fastscan_index_kind = KIND_IVF_FASTSCAN_INDEX
    quantizer_kind = KIND_IVF_QUANTIZER
    own_sections = ("coarse_centroids", "coarse_objective_history", "ivf_norm_levels", "list_offsets")
    row_sections = ("list_offsets",)
    description = "an inverted file"

    def minor_version(self, model, store_vectors, norm_encoding="none", value_ranges=False, index=False):
        """1.2 at least; 1.3 for the norm term of a cosine inverted file or its fine quantizer's norm levels (I20), for
        value ranges or sq8 vectors (I21), and for an index of 4-bit codes (fast-scan blocks, F1)."""
        minor = max(IVF_MINOR_VERSION, format_minor_version(model.quantizer, store_vectors, norm_encoding,
                                                            value_ranges))
        return max(minor, FASTSCAN_MINOR_VERSION) if index and uses_blocks(model.n_codewords) else minor

    def meta(self, file_kind, ivf):
        return {**quantizer_meta(file_kind, ivf.quantizer), "ivf": ivf_meta(ivf)}

    def put_model(self, writer, ivf):
        """The fine quantizer's sections, then the coarse ones (V3)."""
        put_quantizer_sections(writer, ivf.quantizer)
        put_ivf_sections(writer, ivf)

    def read_meta(self, reader):
        return read_ivf_meta(reader)

    def index_meta(self, reader, p):
        """I3 with V6: a norm term exactly for metric "l2", has_ids true."""
        return reader.index_meta(p, ivf=True)

    def read_model(self, reader, meta, p, quantizer):
        return read_ivf_model(reader, meta, p, quantizer)

    def read_rows(self, reader, meta, ntotal):
        return {"list_offsets": read_list_offsets(reader, meta["n_lists"], ntotal)}

    def row_runs(self, rows):
        """Each list is a run (fast-scan blocks pad each list to whole blocks)."""
        return rows["list_offsets"]


IVF_FILES = IVFFileSchema()
