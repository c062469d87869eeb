"""Index files that break a rule of docs/FORMAT.md section 11 (I1-I8), written by hand with ``storage.FileWriter``:
container-valid, but inconsistent as index files; each is refused at open or by verify with a FormatError naming the
check. Also the golden file of format 1.0 (I14), pinned forever, and file_info of either kind of file.
"""

from __future__ import annotations

import json
import re
import struct

import numpy as np
import pytest

import ockstore
from ockstore import storage
from ockstore.errors import FormatError
from ockstore import Index, build_index, load_quantizer, open_index, save_quantizer

from index_files import DATA, NQ, P, assert_same_parts, expect_format_error, parts_of, user_ids, write_parts
from index_files import base, quantizers, queries  # noqa: F401 - pytest fixtures


# --------------------------------------------------------------------------------------------------------------------
# hand-written inconsistent files


@pytest.fixture(scope="module")
def valid_parts(tmp_path_factory, quantizers, base):
    """(meta, sections, user) of valid files: "ockm" (f32 norms, ids), "pq" (no ids), "quantizer" (OCKM)."""
    folder = tmp_path_factory.mktemp("valid")
    build_index(folder / "ockm.ock", quantizers["ockm"], base[:40], user_ids(40), norm_encoding="f32")
    build_index(folder / "pq.ock", quantizers["pq"], base[:40])
    save_quantizer(folder / "q.ockq", quantizers["ockm"])
    return {name: parts_of(folder / file) for name, file in
            (("ockm", "ockm.ock"), ("pq", "pq.ock"), ("quantizer", "q.ockq"))}


def _edit(parts, meta=None, params=None, drop_meta=(), drop_params=(), sections=None, drop=(), after=None):
    """Copies of (meta, sections) with meta keys / params replaced or dropped and sections replaced, dropped or
    added (``after``: (name, array) appended at the end)."""
    meta0, sections0, _user = parts
    new_meta = json.loads(json.dumps(meta0))
    for key in drop_meta:
        new_meta.pop(key, None)
    for key in drop_params:
        new_meta["params"].pop(key, None)
    new_meta.update(meta or {})
    if params is not None:
        if isinstance(params, dict):
            new_meta["params"] = {**new_meta["params"], **params}
        else:
            new_meta["params"] = params
    new_sections = {name: arr.copy() for name, arr in sections0.items() if name not in drop}
    for name, arr in (sections or {}).items():
        new_sections[name] = arr
    if after is not None:
        new_sections[after[0]] = after[1]
    return new_meta, new_sections


def _nan_at(arr, where):
    arr = arr.copy()
    arr[where] = np.nan
    return arr


# (case id, file, edit kwargs as a function of the valid sections, check, name in the message)
BAD_OPEN = [
    # I1: kind
    ("kind-missing", "ockm", lambda s: {"drop_meta": ["kind"]}, "bad meta", "kind"),
    ("kind-int", "ockm", lambda s: {"meta": {"kind": 1}}, "bad meta", "kind"),
    ("kind-unknown", "ockm", lambda s: {"meta": {"kind": "graph"}}, "unknown kind", "kind"),
    ("kind-quantizer", "quantizer", lambda s: {}, "wrong kind", "kind"),
    # I2: method and params
    ("method-unknown", "ockm", lambda s: {"meta": {"method": "opq"}}, "bad meta", "method"),
    ("method-list", "ockm", lambda s: {"meta": {"method": ["ockm"]}}, "bad meta", "method"),
    ("method-missing", "ockm", lambda s: {"drop_meta": ["method"]}, "bad meta", "method"),
    ("params-list", "ockm", lambda s: {"params": [1, 2]}, "bad meta", "params"),
    ("params-missing-key", "ockm", lambda s: {"drop_params": ["n_codewords"]}, "bad meta", "n_codewords"),
    ("params-missing-seed", "pq", lambda s: {"drop_params": ["seed"]}, "bad meta", "seed"),
    ("dim-zero", "ockm", lambda s: {"params": {"dim": 0}}, "bad meta", "dim"),
    ("dim-bool", "ockm", lambda s: {"params": {"dim": True}}, "bad meta", "dim"),
    ("dim-float", "ockm", lambda s: {"params": {"dim": 10.0}}, "bad meta", "dim"),
    ("n_subspaces-above-dim", "ockm", lambda s: {"params": {"n_subspaces": P + 1}}, "bad meta", "n_subspaces"),
    ("n_subspaces-zero", "ockm", lambda s: {"params": {"n_subspaces": 0}}, "bad meta", "n_subspaces"),
    ("n_codebooks-65", "ockm", lambda s: {"params": {"n_codebooks": 65}}, "bad meta", "n_codebooks"),
    ("beam_width-zero", "ockm", lambda s: {"params": {"beam_width": 0}}, "bad meta", "beam_width"),
    ("n_codewords-1", "ockm", lambda s: {"params": {"n_codewords": 1}}, "bad meta", "n_codewords"),
    ("n_codewords-257", "ockm", lambda s: {"params": {"n_codewords": 257}}, "bad meta", "n_codewords"),
    ("n_iter-zero", "ockm", lambda s: {"params": {"n_iter": 0}}, "bad meta", "n_iter"),
    ("tol-negative", "ockm", lambda s: {"params": {"tol": -1e-3}}, "bad meta", "tol"),
    ("tol-nan", "ockm", lambda s: {"params": {"tol": float("nan")}}, "bad meta", "tol"),
    ("tol-str", "ockm", lambda s: {"params": {"tol": "0.1"}}, "bad meta", "tol"),
    ("seed-negative", "ockm", lambda s: {"params": {"seed": -1}}, "bad meta", "seed"),
    ("seed-float", "ockm", lambda s: {"params": {"seed": 1.0}}, "bad meta", "seed"),
    ("pq-two-codebooks", "pq", lambda s: {"params": {"n_codebooks": 2}}, "bad meta", "params"),
    ("ckm-beam", "pq", lambda s: {"meta": {"method": "ckm"}, "params": {"beam_width": 3},
                                  "sections": {"rotation": np.eye(P, dtype="<f4")}}, "bad meta", "params"),
    ("eckm-beam", "ockm", lambda s: {"meta": {"method": "eckm"}}, "bad meta", "params"),
    # I3: index meta
    ("ntotal-negative", "ockm", lambda s: {"meta": {"ntotal": -1}}, "bad meta", "ntotal"),
    ("ntotal-str", "ockm", lambda s: {"meta": {"ntotal": "40"}}, "bad meta", "ntotal"),
    ("ntotal-missing", "ockm", lambda s: {"drop_meta": ["ntotal"]}, "bad meta", "ntotal"),
    ("norm_encoding-f16", "ockm", lambda s: {"meta": {"norm_encoding": "f16"}}, "bad meta", "norm_encoding"),
    ("norm_encoding-none-with-C2", "ockm", lambda s: {"meta": {"norm_encoding": "none"}}, "bad meta",
     "norm_encoding"),
    ("norm_encoding-u8-with-C1", "pq", lambda s: {"meta": {"norm_encoding": "u8"}}, "bad meta", "norm_encoding"),
    ("has_ids-int", "ockm", lambda s: {"meta": {"has_ids": 1}}, "bad meta", "has_ids"),
    # I4: required sections, dtypes, shapes, row counts
    ("codebooks-shape", "ockm", lambda s: {"sections": {"codebooks": s["codebooks"][:, :, :8]}},
     "bad section shape", "codebooks"),
    ("codebooks-S", "ockm", lambda s: {"sections": {"codebooks": np.zeros((4, 2, 16, 4), "<f4")}},
     "bad section shape", "codebooks"),
    ("codebooks-dtype", "ockm", lambda s: {"sections": {"codebooks": s["codebooks"].astype("<f8")}},
     "bad section dtype", "codebooks"),
    ("codebooks-missing", "ockm", lambda s: {"drop": ["codebooks"]}, "missing section", "codebooks"),
    ("rotation-missing", "ockm", lambda s: {"drop": ["rotation"]}, "missing section", "rotation"),
    ("rotation-shape", "ockm", lambda s: {"sections": {"rotation": np.eye(P + 1, dtype="<f4")}},
     "bad section shape", "rotation"),
    ("history-missing", "ockm", lambda s: {"drop": ["objective_history"]}, "missing section", "objective_history"),
    ("history-empty", "ockm", lambda s: {"sections": {"objective_history": np.zeros(0, "<f8")}},
     "bad section shape", "objective_history"),
    ("history-2d", "ockm", lambda s: {"sections": {"objective_history": np.zeros((2, 2), "<f8")}},
     "bad section shape", "objective_history"),
    ("norm_levels-missing", "ockm", lambda s: {"drop": ["norm_levels"]}, "missing section", "norm_levels"),
    ("norm_levels-shape", "ockm", lambda s: {"sections": {"norm_levels": s["norm_levels"][:255]}},
     "bad section shape", "norm_levels"),
    ("codes-missing", "ockm", lambda s: {"drop": ["codes"]}, "missing section", "codes"),
    ("codes-dtype", "ockm", lambda s: {"sections": {"codes": s["codes"].astype("<u2")}}, "bad section dtype",
     "codes"),
    ("codes-width", "ockm", lambda s: {"sections": {"codes": s["codes"][:, :7]}}, "bad section shape", "codes"),
    ("codes-flat", "ockm", lambda s: {"sections": {"codes": s["codes"].reshape(-1)}}, "bad section shape", "codes"),
    ("codes-rows", "ockm", lambda s: {"sections": {"codes": s["codes"][:39]}}, "row count mismatch", "codes"),
    ("norms-rows", "ockm", lambda s: {"sections": {"norms": s["norms"][:39]}}, "row count mismatch", "norms"),
    ("ids-rows", "ockm", lambda s: {"sections": {"ids": np.concatenate([s["ids"], s["ids"][:1]])}},
     "row count mismatch", "ids"),
    ("ntotal-vs-all", "ockm", lambda s: {"meta": {"ntotal": 41}}, "row count mismatch", "codes"),
    ("norms-missing", "ockm", lambda s: {"drop": ["norms"]}, "missing section", "norms"),
    ("norms-u8-for-f32", "ockm", lambda s: {"sections": {"norms": s["norms"].astype("<u1")}}, "bad section dtype",
     "norms"),
    ("ids-missing", "ockm", lambda s: {"drop": ["ids"]}, "missing section", "ids"),
    ("ids-dtype", "ockm", lambda s: {"sections": {"ids": s["ids"].astype("<u4")}}, "bad section dtype", "ids"),
    # I5: sections the meta makes absent
    ("pq-rotation", "pq", lambda s: {"after": ("rotation", np.eye(P, dtype="<f4"))}, "unexpected section",
     "rotation"),
    ("pq-norm_levels", "pq", lambda s: {"after": ("norm_levels", np.arange(256, dtype="<f4"))},
     "unexpected section", "norm_levels"),
    ("pq-norms", "pq", lambda s: {"after": ("norms", np.zeros(40, "<f4"))}, "unexpected section", "norms"),
    ("ids-without-has_ids", "ockm", lambda s: {"meta": {"has_ids": False}}, "unexpected section", "ids"),
    # I6: values of the small sections
    ("codebooks-nan", "ockm", lambda s: {"sections": {"codebooks": _nan_at(s["codebooks"], (1, 0, 3, 0))}},
     "non-finite values", "codebooks"),
    ("rotation-inf", "ockm", lambda s: {"sections": {"rotation": s["rotation"] * np.float32(np.inf)}},
     "non-finite values", "rotation"),
    ("norm_levels-nan", "ockm", lambda s: {"sections": {"norm_levels": _nan_at(s["norm_levels"], 200)}},
     "non-finite values", "norm_levels"),
    ("history-nan", "ockm", lambda s: {"sections": {"objective_history": _nan_at(s["objective_history"], 0)}},
     "non-finite values", "objective_history"),
    ("codebooks-huge", "ockm", lambda s: {"sections": {"codebooks": _scale_words(s["codebooks"], 1e38)}},
     "value out of range", "codebooks"),
    ("codebooks-1e20", "pq", lambda s: {"sections": {"codebooks": _scale_words(s["codebooks"], 1e20)}},
     "value out of range", "codebooks"),
    ("norm_levels-huge", "ockm", lambda s: {"sections": {"norm_levels": s["norm_levels"] * np.float32(1e36)}},
     "value out of range", "norm_levels"),
    ("norm_levels-negative", "ockm", lambda s: {"sections": {"norm_levels": s["norm_levels"] - s["norm_levels"][1]}},
     "value out of range", "norm_levels"),
    ("codebooks-padding", "ockm", lambda s: {"sections": {"codebooks": _poke(s["codebooks"], (3, 1, 5, 2))}},
     "non-zero codebook padding", "codebooks"),
    ("norm_levels-unsorted", "ockm", lambda s: {"sections": {"norm_levels": s["norm_levels"][::-1].copy()}},
     "unsorted norm levels", "norm_levels"),
    ("rotation-huge", "ockm", lambda s: {"sections": {"rotation": s["rotation"] * np.float32(1e30)}},
     "rotation not orthogonal", "rotation"),
    ("rotation-scaled", "ockm", lambda s: {"sections": {"rotation": s["rotation"] * np.float32(1.01)}},
     "rotation not orthogonal", "rotation"),
    ("rotation-skewed", "ockm", lambda s: {"sections": {"rotation": _add_at(s["rotation"], (3, 5), 0.01)}},
     "rotation not orthogonal", "rotation"),
]


def _scale_words(codebooks, value):
    """The codebooks with every used value set to +-value (padding columns stay zero): finite, huge."""
    return np.where(codebooks != 0, np.sign(codebooks) * np.float32(value), 0).astype("<f4")


def _add_at(arr, where, value):
    arr = arr.copy()
    arr[where] += value
    return arr


def test_a_rotation_within_the_tolerance_opens_I6(tmp_path, valid_parts, queries):
    """I6: the orthogonality check of the rotation (max |R^T R - I| <= ROTATION_TOLERANCE = 1e-3) leaves room for
    float32 rounding, far beyond what ockstore's own rotations show (about 6e-8 on sift and minilm, every method)."""
    from ockstore.indexfile.schema import ROTATION_TOLERANCE

    meta, sections = _edit(valid_parts["ockm"])
    R = sections["rotation"].astype(np.float64)
    assert np.abs(R.T @ R - np.eye(P)).max() < 1e-6
    for delta, opens in ((ROTATION_TOLERANCE / 10, True), (ROTATION_TOLERANCE * 3, False)):
        # (1 + delta) R: R^T R - I = (2 delta + delta^2) I
        sections["rotation"] = valid_parts["ockm"][1]["rotation"] * np.float32(1 + delta)
        path = write_parts(tmp_path / f"r{delta}.ock", meta, sections)
        if opens:
            with open_index(path) as index:
                index.search(queries[:2], 3)
        else:
            expect_format_error(path, "rotation not orthogonal", "rotation")


def _poke(arr, where):
    arr = arr.copy()
    arr[where] = 1.0
    return arr


@pytest.mark.parametrize("case,file,edit,check,name", BAD_OPEN, ids=[c[0] for c in BAD_OPEN])
def test_inconsistent_file_refused_at_open_I1_to_I6(tmp_path, valid_parts, case, file, edit, check, name):
    """I1-I6: container-valid files that are inconsistent as index files raise FormatError at open, naming the
    check and the meta key or section; load_quantizer refuses them too (the quantizer file only for its kind)."""
    parts = valid_parts[file]
    meta, sections = _edit(parts, **edit(parts[1]))
    path = write_parts(tmp_path / "bad.ock", meta, sections)
    expect_format_error(path, check, name)
    if check != "wrong kind":
        with pytest.raises(FormatError, match=re.escape(check)):
            load_quantizer(path)


I6_CASES = [case for case in BAD_OPEN if case[3] in ("non-finite values", "value out of range",
                                                      "non-zero codebook padding", "unsorted norm levels",
                                                      "rotation not orthogonal")]


@pytest.mark.parametrize("case,file,edit,check,name", I6_CASES, ids=[c[0] for c in I6_CASES])
def test_writers_refuse_a_model_their_reader_refuses_I6(tmp_path, valid_parts, quantizers, base, case, file, edit,
                                                        check, name):
    """I6, one check for readers and writers: a model holding what the reader refuses (the same edits as above) is
    refused by save_quantizer and IndexWriter with a ValueError naming the check and the section, before anything is
    written (issue 28: a fit wrote norm levels of -8e-20, and open_index then refused the file it had just written)."""
    parts = valid_parts[file]
    _meta, sections = _edit(parts, **edit(parts[1]))
    model = load_quantizer(_saved(quantizers[file], tmp_path / "src.ockq"))  # a copy to damage
    model._set_learned(sections.get("rotation"), sections["codebooks"], sections["objective_history"],
                       sections.get("norm_levels"))
    for write in (lambda: save_quantizer(tmp_path / "q.ockq", model),
                  lambda: build_index(tmp_path / "i.ock", model, base[:20])):
        with pytest.raises(ValueError, match=rf"quantizer: {re.escape(check)}: section '{name}'.*would not open"):
            write()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.ockq"]


def _saved(q, path):
    save_quantizer(path, q)
    return path


def test_a_fit_on_degenerate_data_writes_files_that_open_I6(tmp_path):
    """Two distinct rows (zeros and ones) repeated 300 times: the words of a code can cancel, and its squared norm,
    summed from the words' norms and pair products, came out at -8e-20; the fitted norm levels held it, and the file
    written from the model did not open. Norm terms and levels are clamped at 0 (squared norms are >= 0)."""
    X = np.repeat(np.stack([np.zeros(16), np.ones(16)]).astype(np.float32), 300, axis=0)
    for seed in (1, 3):
        for model in (ockstore.IVF(8, ockstore.OCKM(8, 2, 4, n_codewords=256, seed=seed), seed=seed),
                      ockstore.IVF(8, ockstore.OCKM(4, 3, 4, n_codewords=16, metric="ip", seed=seed), seed=seed)):
            model.fit(X)
            assert model.quantizer.norm_levels.min() >= 0 and model.norm_levels.min() >= 0
            _lists, codes = model.encode(X)
            assert (model.quantizer.code_norms(codes) >= 0).all()
            path = tmp_path / f"x{seed}.ock"
            build_index(path, model, X, store_vectors="float32")
            with open_index(path) as index:
                index.verify()
                D, I = index.search(X[:2], 3)
                assert (I >= 0).all()
            save_quantizer(tmp_path / "q.ockq", model)
            assert load_quantizer(tmp_path / "q.ockq") == model


def test_quantizer_file_with_vector_sections_refused_I5(tmp_path, valid_parts):
    """I5: a quantizer file holds no codes, norms or ids; an unknown kind is refused by load_quantizer too."""
    meta, sections = _edit(valid_parts["quantizer"], after=("codes", np.zeros((3, 8), "<u1")))
    path = write_parts(tmp_path / "q.ockq", meta, sections)
    with pytest.raises(FormatError, match="unexpected section: section 'codes'"):
        load_quantizer(path)
    meta, sections = _edit(valid_parts["quantizer"], meta={"kind": "tokenizer"})
    with pytest.raises(FormatError, match="unknown kind"):
        load_quantizer(write_parts(tmp_path / "q2.ockq", meta, sections))


BAD_VERIFY = [
    ("codes-above-K", lambda s: {"sections": {"codes": _put(s["codes"], (17, 5), 32)}}, "code out of range",
     "codes", "row 17, byte 5 holds 32"),
    ("codes-255", lambda s: {"sections": {"codes": _put(s["codes"], (39, 0), 255)}}, "code out of range", "codes",
     "row 39, byte 0 holds 255"),
    ("norms-nan", lambda s: {"sections": {"norms": _put(s["norms"], 3, np.nan)}}, "non-finite values", "norms",
     "row 3"),
    ("norms-inf", lambda s: {"sections": {"norms": _put(s["norms"], 0, -np.inf)}}, "non-finite values", "norms",
     "row 0"),
    ("ids-negative", lambda s: {"sections": {"ids": _put(s["ids"], 8, -5)}}, "negative id", "ids",
     "row 8 holds -5"),
    ("ids-minus-one", lambda s: {"sections": {"ids": _put(s["ids"], 39, -1)}}, "negative id", "ids", "row 39"),
]


def _put(arr, where, value):
    arr = arr.copy()
    arr[where] = value
    return arr


@pytest.mark.parametrize("case,edit,check,name,detail", BAD_VERIFY, ids=[c[0] for c in BAD_VERIFY])
def test_bad_vector_values_found_by_verify_only_I7(tmp_path, valid_parts, queries, case, edit, check, name, detail):
    """I7: codes >= K, non-finite norms and negative ids are found by verify (with their row), not by open; searching
    such a file does not crash, and a code >= K is never returned."""
    parts = valid_parts["ockm"]
    meta, sections = _edit(parts, **edit(parts[1]))
    path = write_parts(tmp_path / "bad.ock", meta, sections)
    message = expect_format_error(path, check, name, when="verify")
    assert detail in message
    with open_index(path) as index:
        for distance in ("adc", "sdc"):
            for threads in (1, 2):
                D, I = index.search(queries, 40, distance=distance, n_threads=threads)
                assert D.shape == (NQ, 40)
                if case.startswith("codes"):
                    bad_row = 17 if case == "codes-above-K" else 39
                    assert not (I == sections["ids"][bad_row]).any()
    # The same checks for an index in memory (no file): same messages, "<in-memory index>" for the path.
    # (int64 ids are used as given, not scanned, by the low-level constructor)
    memory = Index(load_quantizer(path), sections["codes"], sections["norms"], sections["ids"], "f32")
    with pytest.raises(FormatError, match=re.escape(f"'<in-memory index>': {check}: section {name!r}")):
        memory.verify()


def test_verify_reports_crc_before_values_R18_I7(tmp_path, valid_parts):
    """I7 comes after R18: a corrupted codes byte is reported as a CRC mismatch (opening still succeeds)."""
    path = write_parts(tmp_path / "ok.ock", *_edit(valid_parts["ockm"]))
    data = bytearray(path.read_bytes())
    with storage.open_file(path) as f:
        offset = f.section_info("codes")["offset"]
    data[offset + 3] = 250
    path.write_bytes(bytes(data))
    expect_format_error(path, "CRC mismatch", "codes", when="verify")


def test_unknown_sections_and_keys_ignored_I8(tmp_path, valid_parts, queries):
    """I8: unknown meta keys, unknown params keys, an unknown section and a different library string are ignored."""
    reference = write_parts(tmp_path / "ref.ock", *_edit(valid_parts["ockm"]))
    meta, sections = _edit(valid_parts["ockm"], meta={"future": {"x": [1, 2]}, "library": "other 9.9"},
                           params={"extra_param": "z"}, after=("graph", np.arange(12, dtype="<i4").reshape(3, 4)))
    path = write_parts(tmp_path / "extra.ock", meta, sections, user={"u": 1})
    with open_index(path) as index, open_index(reference) as ref:
        index.verify()
        for distance in ("adc", "sdc"):
            np.testing.assert_array_equal(index.search(queries, 7, distance=distance)[1],
                                          ref.search(queries, 7, distance=distance)[1])
        assert index.quantizer == ref.quantizer and index.info()["metadata"] == {"u": 1}
    assert load_quantizer(path) == load_quantizer(reference)


def test_minor_version_accepted_major_version_refused_R3_R4(tmp_path, valid_parts, queries):
    """A file of format 1.7 opens; a file of major version 2 is refused with a message giving both versions."""
    path = write_parts(tmp_path / "v.ock", *_edit(valid_parts["ockm"]))
    data = bytearray(path.read_bytes())
    struct.pack_into("<HH", data, 8, 1, 7)
    path.write_bytes(bytes(data))
    with open_index(path) as index:
        assert index.info()["format_version"] == "1.7"
        index.verify()
    struct.pack_into("<HH", data, 8, 2, 0)
    path.write_bytes(bytes(data))
    message = expect_format_error(path, "unsupported version")
    assert "2.0" in message and "major version 1" in message
    with pytest.raises(FormatError, match="unsupported version"):
        load_quantizer(path)


def test_huge_but_valid_params_I2(tmp_path, valid_parts, queries):
    """I2: params at the top of their ranges (beam_width and seed up to 2**64 - 1, tol as an int) are valid."""
    meta, sections = _edit(valid_parts["ockm"], params={"beam_width": 2**64 - 1, "seed": 2**64 - 1, "tol": 0,
                                                        "n_iter": 2**63})
    path = write_parts(tmp_path / "h.ock", meta, sections)
    with open_index(path) as index:
        index.verify()
        assert index.quantizer.beam_width == 2**64 - 1 and index.quantizer.tol == 0.0
        D, I = index.search(queries, 3, distance="sdc")  # encoding with T > K acts as T = K
        assert (I >= 0).all()


# --------------------------------------------------------------------------------------------------------------------
# the golden file (format version 1, pinned forever)


def test_golden_v1_file_I14(tmp_path):
    """I14: the committed v1 index file (tools/make_golden_index.py) opens, verifies and gives the committed
    neighbours: ids exactly, distances to 1e-5, for ADC and SDC. If this fails, the format or its meaning changed."""
    path = DATA / "golden_v1.ock"
    expected = {name: np.load(DATA / f"golden_v1_{name}.npy")
                for name in ("queries", "adc_D", "adc_I", "sdc_D", "sdc_I")}
    assert expected["adc_I"].shape == (10, 10) and (expected["adc_I"] >= 0).all()
    with open_index(path) as index:
        index.verify()
        info = index.info()
        assert {key: info[key] for key in ("N", "P", "method", "M", "C", "K", "T", "bits", "norm_encoding",
                                           "bytes_per_vector", "format_version", "has_ids")} == {
            "N": 200, "P": 12, "method": "ockm", "M": 3, "C": 2, "K": 16, "T": 4, "bits": 48, "norm_encoding": "u8",
            "bytes_per_vector": 7, "format_version": "1.0", "has_ids": True}
        assert info["metadata"]["generator"] == "tools/make_golden_index.py"
        Q = expected["queries"]
        k = expected["adc_I"].shape[1]
        for distance in ("adc", "sdc"):
            D, I = index.search(Q, k, distance=distance)
            np.testing.assert_array_equal(I, expected[f"{distance}_I"])
            np.testing.assert_allclose(D, expected[f"{distance}_D"], rtol=1e-5, atol=1e-5)
        # Writing it again with today's writer gives the same sections and the same meta (library aside), its codes
        # (K = 16) in fast-scan blocks (docs/FORMAT.md section 16) holding the same words.
        index.save(tmp_path / "copy.ock")
    assert_same_parts(tmp_path / "copy.ock", path, fastscan_copy=True)


# --------------------------------------------------------------------------------------------------------------------
# file_info: describe either kind of file without loading its vectors


def test_file_info_of_index_and_quantizer_files(tmp_path, quantizers, base):
    q = quantizers["ockm"]
    index_path, quantizer_path = tmp_path / "b.ock", tmp_path / "q.ock"
    build_index(index_path, q, base, metadata={"source": "test"})
    save_quantizer(quantizer_path, q, metadata={"note": "q"})
    with open_index(index_path) as index:
        expected = index.info()
    info = ockstore.file_info(index_path)
    assert info.pop("kind") == "index"
    assert info == expected
    qinfo = ockstore.file_info(quantizer_path)
    assert qinfo["kind"] == "quantizer"
    assert (qinfo["P"], qinfo["M"], qinfo["C"], qinfo["K"], qinfo["bits"]) == (P, 4, 2, 32, q.bits)
    assert qinfo["iterations"] == len(q.objective_history) - 1
    assert qinfo["objective"] == q.objective_history[-1]
    assert qinfo["metadata"] == {"note": "q"} and qinfo["format_version"] == "1.3"  # value_ranges (I21)
    (tmp_path / "junk.ock").write_bytes(b"not an index" * 10)
    with pytest.raises(FormatError):
        ockstore.file_info(tmp_path / "junk.ock")
