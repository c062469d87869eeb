"""Segment files by reference (docs/FORMAT.md section 18, rules S1-S6): a collection's segment that names its quantizer
file and carries the model's fingerprint instead of a copy of the model. Round trips against the index file of the
same model and rows (same row bytes, same searches), the fingerprint, the open-time checks (FormatError naming the
check, the segment and the quantizer file), verify, file_info and load_quantizer of a segment. Every rule S1-S6 is cited
by at least one test below; the fuzzing of these files is tests/indexfile/test_index_fuzz.py; the collection's use of
them is tests/collection/test_collection_models.py.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import ockstore
from ockstore import IVF, IndexWriter, build_index, file_info, load_quantizer, open_index, save_quantizer, storage
from ockstore.errors import FormatError
from ockstore.indexfile.reader import load_linked_model, open_segment
from ockstore.indexfile.segment_file import (
    KIND_SEGMENT, LinkedModel, ModelRef, file_fingerprint, fingerprint, model_fingerprint,
)

from index_files import expect_format_error, parts_of, write_parts

P = 10
MODEL_SECTIONS = {"rotation", "codebooks", "objective_history", "norm_levels", "value_ranges", "coarse_centroids",
                  "coarse_objective_history", "ivf_norm_levels"}


def vectors(n, seed):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(6, P))[rng.integers(0, 6, n)] * 3 + rng.normal(size=(n, P))).astype(np.float32)


LEARN, BASE, QUERIES = vectors(600, 1), vectors(90, 2), vectors(5, 3)
IDS = np.arange(90, dtype=np.int64) * 13 + 5

# name -> (model maker, IndexWriter options): byte codes and fast-scan blocks, flat and inverted files, the metrics,
# stored vectors of every kind (sq8 through the quantizer file's value ranges).
CASES = {
    "ockm-k32": (lambda: ockstore.OCKM(3, 2, 2, n_codewords=32, n_iter=2, seed=0), {"store_vectors": "float32"}),
    "ockm-k16": (lambda: ockstore.OCKM(3, 2, 2, n_codewords=16, n_iter=2, seed=0), {"store_vectors": "sq8"}),
    "pq-cosine": (lambda: ockstore.PQ(5, n_codewords=16, n_iter=2, metric="cosine", seed=0),
                  {"store_vectors": "float16"}),
    "ivf-k32": (lambda: IVF(4, ockstore.OCKM(3, 2, 2, n_codewords=32, n_iter=2, seed=0), n_iter=3, seed=0),
                {"norm_encoding": "f32"}),
    "ivf-k16-ip": (lambda: IVF(4, ockstore.OCKM(3, 2, 2, n_codewords=16, n_iter=2, metric="ip", seed=0), n_iter=3,
                               seed=0), {"store_vectors": "sq8"}),
}


@pytest.fixture(scope="module")
def models():
    return {name: make().fit(LEARN) for name, (make, _) in CASES.items()}


def write_pair(folder, model, options, quantizer_name="quantizer.ockq", chunks=(90,)):
    """The quantizer file, a segment by reference to it and the index file of the same rows, in ``folder``; returns
    (LinkedModel, segment path, index path)."""
    folder.mkdir(exist_ok=True)
    save_quantizer(folder / quantizer_name, model)
    linked = load_linked_model(folder / quantizer_name)
    segment, index = folder / "segment.ock", folder / "index.ock"
    with IndexWriter(segment, linked.model, _model_ref=linked.ref, **options) as w:
        start = 0
        for n in chunks:
            w.add(BASE[start:start + n], IDS[start:start + n])
            start += n
    build_index(index, model, BASE, IDS, **options)
    return linked, segment, index


@pytest.fixture(scope="module")
def pairs(tmp_path_factory, models):
    root = tmp_path_factory.mktemp("pairs")
    return {name: write_pair(root / name, models[name], CASES[name][1]) for name in CASES}


def rewrite(path, out, *, meta=None, drop_meta=(), model=None, sections=None, drop=(), minor=None):
    """A copy of the container ``path`` at ``out`` with meta keys (and keys of meta 'model') replaced or dropped,
    sections added or dropped: valid for the container, whatever the index layer thinks of it."""
    meta0, sections0, user = parts_of(path)
    new_meta = {k: v for k, v in meta0.items() if k not in drop_meta}
    new_meta.update(meta or {})
    if model is not None:
        new_meta["model"] = {**meta0["model"], **model}
    new_sections = {name: arr for name, arr in sections0.items() if name not in drop}
    new_sections.update(sections or {})
    with storage.open_file(path) as f:
        version = f.version[1]
    write_parts(out, new_meta, new_sections, user, minor=version if minor is None else minor)
    return out


# ----------------------------------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("name", list(CASES))
def test_segment_holds_the_rows_of_the_index_file_and_no_model_S1_S2_S3_S6(pairs, name):
    """S1, S2, S3, S6: a segment by reference says format 1.4, kind "segment", its index file's kind, the quantizer
    file and its fingerprint, has_ids true; it holds exactly the row sections of the index file of the same model and
    rows, byte for byte, and none of the model's."""
    linked, segment, index = pairs[name]
    meta, sections, _user = parts_of(segment)
    meta0, sections0, _user0 = parts_of(index)
    with storage.open_file(segment) as f:
        assert f.version == (1, 4)
    assert meta["kind"] == KIND_SEGMENT and meta["index_kind"] == meta0["kind"]
    assert meta["model"] == {"file": "quantizer.ockq", "fingerprint": linked.ref.fingerprint}
    assert meta["has_ids"] is True
    rest = {k: v for k, v in meta.items() if k not in ("kind", "index_kind", "model", "library")}
    assert rest == {k: v for k, v in meta0.items() if k not in ("kind", "library")}
    assert not MODEL_SECTIONS & set(sections)
    assert list(sections) == [n for n in sections0 if n not in MODEL_SECTIONS]
    for section in sections:
        assert sections[section].tobytes() == sections0[section].tobytes(), section
    # the index file stays self-contained (S6): every section of the quantizer file is in it, no reference
    assert "model" not in meta0 and meta0["kind"] != KIND_SEGMENT
    assert os.path.getsize(segment) < os.path.getsize(index)


@pytest.mark.parametrize("name", list(CASES))
def test_segment_searches_as_its_index_file_S4(pairs, name):
    """S4: opened with its model (found in its folder by open_index, or given by open_segment), a segment answers every
    search as the index file of the same model and rows: ADC, SDC, re-ranking, filters, n_probe."""
    linked, segment, index = pairs[name]
    probes = [{}, {"n_probe": 4}] if name.startswith("ivf") else [{}]
    with open_index(segment) as a, open_index(index) as b, open_segment(segment, linked) as c:
        assert c.quantizer is linked.model and a.quantizer == b.quantizer
        for probe in probes:
            for options in ({}, {"distance": "sdc"}, {"allow": IDS[::3]}, {"rerank": 30} if a.store_vectors else {}):
                for s in (a, c):
                    D1, I1 = s.search(QUERIES, 7, **options, **probe)
                    D2, I2 = b.search(QUERIES, 7, **options, **probe)
                    np.testing.assert_array_equal(I1, I2)
                    np.testing.assert_array_equal(D1, D2)
        if a.store_vectors is not None:
            np.testing.assert_array_equal(a.get(IDS[:4]), b.get(IDS[:4]))
        a.verify()
        c.verify()


def test_segment_bytes_are_canonical_S6(tmp_path, models):
    """S6: the same model reference, rows and options give the same bytes whatever the chunks (I10, V9)."""
    for name in ("ockm-k16", "ivf-k32"):
        _, one, _ = write_pair(tmp_path / f"{name}-1", models[name], CASES[name][1])
        _, many, _ = write_pair(tmp_path / f"{name}-n", models[name], CASES[name][1], chunks=(1, 40, 0, 31, 18))
        assert one.read_bytes() == many.read_bytes()


def test_build_index_save_and_index_writer_stay_self_contained_S6(tmp_path, models):
    """S6: files made by build_index, IndexWriter and Index.save hold their model and no reference, at the format
    version they had (below 1.4), also when saved from an index opened from a segment by reference."""
    model = models["ockm-k16"]
    linked, segment, index = write_pair(tmp_path / "w", model, {"store_vectors": "sq8"})
    with open_index(segment) as seg:
        seg.save(tmp_path / "saved.ock")
    with IndexWriter(tmp_path / "writer.ock", model, store_vectors="sq8") as w:
        w.add(BASE, IDS)
    for path in (index, tmp_path / "saved.ock", tmp_path / "writer.ock"):
        assert path.read_bytes() == index.read_bytes()
        with storage.open_file(path) as f:
            assert f.version == (1, 3) and f.meta["kind"] == "fastscan-index" and "model" not in f.meta
            assert "codebooks" in f.sections and "value_ranges" in f.sections


# ----------------------------------------------------------------------------------------------------- fingerprint


def test_fingerprint_is_the_quantizer_files_whatever_its_name_and_metadata_S4(tmp_path, models):
    """Section 18.3: the fingerprint read from a quantizer file's header equals the one computed from the model in
    memory, for every kind of model; the name, user metadata and library of the file do not change it; another model
    (one value of one codebook) or other parameters do; the formula is the one written in FORMAT.md."""
    for name, model in models.items():
        save_quantizer(tmp_path / f"{name}.ockq", model)
        save_quantizer(tmp_path / f"{name}-meta.ockq", model, metadata={"note": "other user metadata"})
        with storage.open_file(tmp_path / f"{name}.ockq") as f, storage.open_file(tmp_path / f"{name}-meta.ockq") as g:
            assert file_fingerprint(f) == file_fingerprint(g) == model_fingerprint(model)
            # the formula of FORMAT.md 18.3, by hand: SHA-256 of the canonical msgpack of the map
            import hashlib
            import msgpack

            body = {"ivf": f.meta.get("ivf"), "method": f.meta["method"], "params": f.meta["params"],
                    "sections": [[n, f.section_info(n)["dtype"], list(f.section_info(n)["shape"]),
                                  f.section_info(n)["crc32"]] for n in sorted(f.sections)]}
            packed = msgpack.packb(storage.canonical_metadata(body), use_bin_type=True)
            assert hashlib.sha256(packed).hexdigest() == file_fingerprint(f)
    meta, sections, user = parts_of(tmp_path / "ockm-k32.ockq")
    sections["codebooks"] = sections["codebooks"].copy()
    sections["codebooks"][0, 0, 0, 0] += 1
    write_parts(tmp_path / "other.ockq", meta, sections, user, minor=3)
    with storage.open_file(tmp_path / "other.ockq") as f:
        assert file_fingerprint(f) != model_fingerprint(models["ockm-k32"])
        assert file_fingerprint(f) == model_fingerprint(load_quantizer(tmp_path / "other.ockq"))
    entries = [("codebooks", "<f4", (1,), 7)]
    assert fingerprint({"method": "ockm", "params": {"dim": 3}}, entries) != \
        fingerprint({"method": "ockm", "params": {"dim": 4}}, entries)


# ------------------------------------------------------------------------------------------------ open-time checks


def test_segment_of_a_format_before_1_4_is_refused_S1(pairs, tmp_path):
    """S1: the kind "segment" in a file that says 1.3 -> "bad format version". Readers of 1.0-1.3 know no such kind:
    it is none of the kinds they read, so they refuse it ("unknown kind") instead of reading rows without a model."""
    _linked, segment, _index = pairs["ockm-k32"]
    shutil.copy(segment.parent / "quantizer.ockq", tmp_path / "quantizer.ockq")
    bad = rewrite(segment, tmp_path / "v13.ock", minor=3)
    expect_format_error(bad, "bad format version", "segment")
    kinds_of_1_3 = {"index", "quantizer", "ivf-index", "ivf-quantizer", "fastscan-index", "ivf-fastscan-index",
                    "vectors", "manifest", "deletions"}
    assert KIND_SEGMENT not in kinds_of_1_3


BAD_META = [
    # S1: index_kind
    ("index-kind-missing", {"drop_meta": ["index_kind"]}, "bad meta", "index_kind"),
    ("index-kind-quantizer", {"meta": {"index_kind": "quantizer"}}, "bad meta", "index_kind"),
    ("index-kind-segment", {"meta": {"index_kind": "segment"}}, "bad meta", "index_kind"),
    ("index-kind-vectors", {"meta": {"index_kind": "vectors"}}, "bad meta", "index_kind"),
    ("index-kind-int", {"meta": {"index_kind": 3}}, "bad meta", "index_kind"),
    # S2: the model reference and has_ids
    ("model-missing", {"drop_meta": ["model"]}, "bad meta", "model"),
    ("model-list", {"meta": {"model": ["quantizer.ockq"]}}, "bad meta", "model"),
    ("file-missing", {"meta": {"model": {"fingerprint": "0" * 64}}}, "bad meta", "file"),
    ("file-path", {"model": {"file": "../quantizer.ockq"}}, "bad meta", "file"),
    ("file-absolute", {"model": {"file": "/etc/passwd"}}, "bad meta", "file"),
    ("file-hidden", {"model": {"file": ".quantizer.ockq"}}, "bad meta", "file"),
    ("file-empty", {"model": {"file": ""}}, "bad meta", "file"),
    ("file-bytes", {"model": {"file": b"quantizer.ockq"}}, "bad meta", "file"),
    ("fingerprint-upper", {"model": {"fingerprint": "A" * 64}}, "bad meta", "fingerprint"),
    ("fingerprint-short", {"model": {"fingerprint": "a" * 63}}, "bad meta", "fingerprint"),
    ("fingerprint-int", {"model": {"fingerprint": 7}}, "bad meta", "fingerprint"),
    ("has-ids-false", {"meta": {"has_ids": False}, "drop": ["ids"]}, "bad meta", "has_ids"),
]


@pytest.mark.parametrize("case, edit, check, name", BAD_META, ids=[c[0] for c in BAD_META])
def test_bad_segment_meta_is_refused_S1_S2(pairs, tmp_path, case, edit, check, name):
    """S1, S2: meta 'index_kind' names an index kind; meta 'model' is a map of a plain file name and 64 lowercase hex
    digits; has_ids is true. Anything else: "bad meta" naming the key, before any other file is opened -- also when
    the segment is opened with a model (open_segment)."""
    linked, segment, _index = pairs["ockm-k32"]
    shutil.copy(segment.parent / "quantizer.ockq", tmp_path / "quantizer.ockq")
    bad = rewrite(segment, tmp_path / "bad.ock", **edit)
    message = expect_format_error(bad, check, name)
    assert "/etc/passwd'" not in message.split(":", 2)[2] or case == "file-absolute"
    with pytest.raises(FormatError, match=check):
        open_segment(bad, linked)


@pytest.mark.parametrize("section", ["codebooks", "rotation", "norm_levels", "value_ranges", "coarse_centroids"])
def test_model_sections_in_a_segment_are_refused_S3(pairs, tmp_path, section):
    """S3: a segment by reference holds no section of a model ("unexpected section" naming it)."""
    name = "ivf-k32" if section == "coarse_centroids" else "ockm-k16"
    linked, segment, index = pairs[name]
    shutil.copy(segment.parent / "quantizer.ockq", tmp_path / "quantizer.ockq")
    _meta, sections0, _user = parts_of(index if section != "value_ranges" else segment.parent / "quantizer.ockq")
    bad = rewrite(segment, tmp_path / "bad.ock", sections={section: sections0[section]})
    expect_format_error(bad, "unexpected section", section)


def test_another_model_is_refused_naming_both_files_S4(pairs, models, tmp_path):
    """S4: the quantizer file replaced by another model (same name), a model given under another name or with other
    parameters: "model mismatch" naming the segment and the quantizer file; nothing is searched."""
    linked, segment, _index = pairs["ockm-k32"]
    folder = tmp_path / "f"
    folder.mkdir()
    shutil.copy(segment, folder / "segment.ock")
    other = ockstore.OCKM(3, 2, 2, n_codewords=32, n_iter=2, seed=5).fit(LEARN)  # the same parameters, refitted
    save_quantizer(folder / "quantizer.ockq", other)
    message = expect_format_error(folder / "segment.ock", "model mismatch")
    assert "quantizer.ockq" in message and linked.ref.fingerprint[:16] in message
    assert model_fingerprint(other)[:16] in message
    # open_segment with the model of another file, or under another name
    save_quantizer(folder / "quantizer.0000000007.ockq", models["ockm-k32"])
    renamed = load_linked_model(folder / "quantizer.0000000007.ockq")
    assert renamed.ref.fingerprint == linked.ref.fingerprint and renamed.ref.file != linked.ref.file
    for given in (load_linked_model(folder / "quantizer.ockq"), renamed):
        with pytest.raises(FormatError) as info:
            open_segment(folder / "segment.ock", given)
        text = str(info.value)
        assert text.startswith(repr(str(folder / "segment.ock")) + ": model mismatch:"), text
        assert repr(given.path) in text and "'quantizer.ockq'" in text
    # the segment's own params edited (a model of another shape under the right name and fingerprint)
    bad = rewrite(segment, folder / "params.ock", meta={"params": {**parts_of(segment)[0]["params"], "n_iter": 9}})
    with pytest.raises(FormatError, match="model mismatch: meta 'params'\\['n_iter'\\] = 9, but the model of .* has 2"):
        open_segment(bad, linked)
    # a flat segment opened with an IVF's file: another kind of model
    ivf = models["ivf-k32"]
    wrong = LinkedModel(ivf, linked.ref, "ivf.ockq")
    with pytest.raises(FormatError, match="model mismatch: meta 'method'.*another kind of model"):
        open_segment(segment, wrong)


def test_missing_or_bad_quantizer_file_is_named_S4(pairs, models, tmp_path):
    """S4: open_index of a segment alone whose quantizer file is not in its folder: "missing model" naming that file
    and open_collection; a quantizer file that is an index, a segment (itself), or damaged: "bad model file" naming
    both. load_quantizer and file_info of the segment fail the same way; open_segment without a model cannot be
    called: read_file says "missing model"."""
    linked, segment, index = pairs["ockm-k32"]
    folder = tmp_path / "f"
    folder.mkdir()
    shutil.copy(segment, folder / "segment.ock")
    for opener in (open_index, load_quantizer, file_info):
        message = helpers_expect(opener, folder / "segment.ock", "missing model")
        assert "'quantizer.ockq'" in message and "open_collection" in message
    shutil.copy(index, folder / "quantizer.ockq")  # an index file under the quantizer's name
    message = helpers_expect(open_index, folder / "segment.ock", "bad model file")
    assert "wrong kind" in message and str(folder / "quantizer.ockq") in message and "open_collection" in message
    shutil.copy(segment, folder / "quantizer.ockq")  # the segment itself: no recursion
    message = helpers_expect(open_index, folder / "segment.ock", "bad model file")
    assert "missing model" in message
    (folder / "quantizer.ockq").unlink()
    (folder / "quantizer.ockq").mkdir()  # not a regular file
    helpers_expect(open_index, folder / "segment.ock", "bad model file")
    with storage.open_file(folder / "segment.ock") as f:
        from ockstore.indexfile.schema import read_file

        with pytest.raises(FormatError, match="missing model"):
            read_file(f, index_only=True)


def helpers_expect(opener, path, check):
    with pytest.raises(FormatError) as info:
        opener(path)
    message = str(info.value)
    assert message.startswith(repr(os.fspath(path)) + ": " + check + ":"), message
    return message


# ---------------------------------------------------------------------------------------------------------- verify


def test_verify_recomputes_the_fingerprint_S5(pairs, models, tmp_path):
    """S5: verify of a segment by reference recomputes the fingerprint of the model it is searched with: a quantizer
    file whose bytes do not match its header's CRCs (so its header fingerprint still matches) opens, and verify fails
    ("model mismatch"); a model given with the right reference but other arrays, the same."""
    linked, segment, _index = pairs["ockm-k32"]
    folder = tmp_path / "f"
    folder.mkdir()
    shutil.copy(segment, folder / "segment.ock")
    shutil.copy(segment.parent / "quantizer.ockq", folder / "quantizer.ockq")
    with open_index(folder / "segment.ock") as s:
        s.verify()
    with storage.open_file(folder / "quantizer.ockq") as f:
        offset = f.section_info("codebooks")["offset"]
    data = bytearray((folder / "quantizer.ockq").read_bytes())
    data[offset + 2] ^= 0x01  # a low bit of a codebook value: still a valid model
    (folder / "quantizer.ockq").write_bytes(bytes(data))
    message = expect_format_error(folder / "segment.ock", "model mismatch", when="verify")
    assert str(folder / "quantizer.ockq") in message
    other = ockstore.OCKM(3, 2, 2, n_codewords=32, n_iter=2, seed=0).fit(vectors(600, 9))  # same parameters
    with open_segment(segment, LinkedModel(other, linked.ref, "elsewhere.ockq")) as s:
        with pytest.raises(FormatError, match="model mismatch.*'elsewhere.ockq'"):
            s.verify()


# ------------------------------------------------------------------------------------------ file_info, load_quantizer


def test_file_info_and_load_quantizer_of_a_segment_name_its_model_S4(pairs, models):
    """file_info of a segment by reference says which model it refers to (model_file, model_fingerprint) beside what
    an index file's says; load_quantizer of it gives the model of its quantizer file."""
    for name in ("ockm-k16", "ivf-k16-ip"):
        linked, segment, index = pairs[name]
        info, info0 = file_info(segment), file_info(index)
        assert info["model_file"] == "quantizer.ockq" and info["model_fingerprint"] == linked.ref.fingerprint
        assert info["format_version"] == "1.4" and info0["format_version"] == "1.3"
        same = {k: v for k, v in info.items() if k not in ("model_file", "model_fingerprint", "format_version", "path")}
        assert same == {k: v for k, v in info0.items() if k not in ("format_version", "path")}
        assert load_quantizer(segment) == models[name]
