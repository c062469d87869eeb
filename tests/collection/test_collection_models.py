"""One model per collection (docs/FORMAT.md section 18 and rule C7; docs/ARCHITECTURE.md "Collections"): every segment
a collection writes -- adds, merges, compaction, the training commit, retrain, pending segments -- refers to the
quantizer file its manifest names instead of holding a copy of the model; the collection opens that file once and
every segment with it; the wrong model or a missing quantizer file is refused naming the files; verify checks the
fingerprint; a grown collection takes about the bytes of its compacted copy; collections of format 1.3 (committed
golden folders whose segments hold their own model) open and search as they did, and grow with segments by reference.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import ockstore
from ockstore import storage
from ockstore.collection import SegmentSpec, names, write_pending_segment
from ockstore.errors import FormatError
from ockstore.indexfile.segment_file import KIND_SEGMENT, file_fingerprint
from collection_model import Model, P, assert_same_search, reference_index, vectors
from collection_model import q, quantizers  # noqa: F401 - pytest fixtures
from helpers import TESTS

DATA = TESTS / "data"


def segment_files(folder):
    """{segment file name: (meta kind, meta model or None, section names)} of the newest generation."""
    with ockstore.open_collection(folder) as c:
        files = [s["file"] for s in c.info()["segment_files"]]
    out = {}
    for file in files:
        with storage.open_file(folder / file) as f:
            out[file] = (f.meta["kind"], f.meta.get("model"), set(f.sections))
    return out


def assert_by_reference(folder):
    """Every segment of the newest generation is a segment by reference to the manifest's quantizer file, with its
    fingerprint, and holds no model section (S2, S3, C7); returns the quantizer file's name."""
    with ockstore.open_collection(folder) as c:
        quantizer_file = c.info()["quantizer_file"]
        spec_model = c.quantizer
        for view in c._snap.views:  # one model object for every segment: loaded once
            assert view.index.quantizer is spec_model
    with storage.open_file(folder / quantizer_file) as f:
        expected = {"file": quantizer_file, "fingerprint": file_fingerprint(f)}
    segments = segment_files(folder)
    assert segments
    for file, (kind, model, sections) in segments.items():
        assert kind == KIND_SEGMENT and model == expected, file
        assert not sections & {"rotation", "codebooks", "norm_levels", "coarse_centroids", "value_ranges"}, file
    return quantizer_file


# --------------------------------------------------------------------------------------------- what is written


@pytest.mark.parametrize("name", ["ockm", "pq-cosine"])
def test_every_segment_a_collection_writes_refers_to_its_quantizer_file_C7_S6(quantizers, tmp_path, name):
    """C7, S6: adds, merges (merge_factor 3), deletions, an upsert, compaction, pending segments and retrain (a fresh
    fit, then a fitted model given) all leave segments by reference to the manifest's quantizer file; searches equal
    one index over the live rows all along."""
    q = quantizers[name]
    store = "float32" if name == "ockm" else "float16"
    folder = tmp_path / "c"
    model = Model(P)
    Q = vectors(5, 77)
    with ockstore.create_collection(folder, q, store_vectors=store, merge_factor=3) as c:
        for step in range(7):  # two tiers of merges
            X = vectors(20 + step, step)
            model.add(X, c.add(X))
            assert assert_by_reference(folder) == names.QUANTIZER_NAME
        doomed = model.live_ids()[::7]
        c.delete(doomed)
        model.delete(doomed)
        X = vectors(4, 50)
        c.upsert(X, model.live_ids()[:4])
        model.upsert(X, model.live_ids()[:4])
        X = vectors(30, 51)
        ids = np.arange(c.next_id, c.next_id + 30)
        c.commit_segments([write_pending_segment(c.path, c.segment_spec, X, ids)])
        model.add(X, ids)
        assert_by_reference(folder)
        assert_same_search(c, reference_index(q, model, store_vectors=store), Q, 6)
        c.compact()
        assert assert_by_reference(folder) == names.QUANTIZER_NAME and len(segment_files(folder)) == 1
        assert_same_search(c, reference_index(q, model, store_vectors=store), Q, 6)
        c.verify()
        c.retrain(sample=400)
        retrained = assert_by_reference(folder)
        assert retrained == names.quantizer_name(c.generation)
        c.retrain(q)  # a fitted model given: every row re-encoded with it
        assert assert_by_reference(folder) == names.quantizer_name(c.generation)
        stored = model.copy()
        if store == "float16":  # a retrain encodes the stored (rounded) vectors
            stored.vectors = {i: v.astype(np.float16).astype(np.float32) for i, v in stored.vectors.items()}
        assert_same_search(c, reference_index(q, stored, store_vectors=store), Q, 6)
        c.verify()


def test_ivf_and_training_commits_write_segments_by_reference_C7_S6(tmp_path):
    """S6: a collection that trains its IVF: files of stored vectors (no model) until the commit that crosses
    train_size, whose segments refer to quantizer.<G>.ockq; later adds and merges refer to it too; sq8 stored vectors
    are codes through the quantizer file's value ranges (the segments hold none)."""
    ivf = ockstore.IVF(4, ockstore.OCKM(3, 2, 2, n_codewords=16, n_iter=3, seed=0), n_iter=3, seed=0)
    folder = tmp_path / "c"
    with ockstore.create_collection(folder, ivf, store_vectors="float16", train_size=200, merge_factor=3) as c:
        c.add(vectors(150, 1))
        assert {kind for kind, _m, _s in segment_files(folder).values()} == {"vectors"}
        c.add(vectors(100, 2))  # crosses train_size: the training commit follows beside the writer
        assert c.wait_trained(timeout=300)
        assert c.trained and assert_by_reference(folder) == names.quantizer_name(c.generation)
        for seed in range(3, 8):
            c.add(vectors(30, seed))
        assert_by_reference(folder)
        D, I = c.search(vectors(3, 9), 5, n_probe=4)
        c.compact()
        np.testing.assert_array_equal(c.search(vectors(3, 9), 5, n_probe=4)[1], I)
        c.verify()
    fitted = ockstore.OCKM(3, 2, 2, n_codewords=32, n_iter=3, seed=0).fit(vectors(500, 3))
    with ockstore.create_collection(tmp_path / "sq8", fitted, store_vectors="sq8", merge_factor=3) as c:
        model = Model(P)
        for seed in range(4):
            X = vectors(25, 10 + seed)
            model.add(X, c.add(X))
        assert_by_reference(tmp_path / "sq8")
        assert_same_search(c, reference_index(fitted, model, store_vectors="sq8"), vectors(4, 20), 5)
        np.testing.assert_array_equal(c.get([0, 60]), reference_index(fitted, model, store_vectors="sq8").get([0, 60]))


def test_pending_segments_that_hold_their_own_model_still_commit_C7(q, tmp_path):
    """C7: a segment written the way collections did before format 1.4 (a SegmentSpec without model_ref: its own copy
    of the model) is still a valid segment: it commits, searches with the others, and a merge rewrites it by
    reference."""
    folder = tmp_path / "c"
    model = Model(P)
    with ockstore.create_collection(folder, q, store_vectors="float32") as c:
        X = vectors(40, 1)
        model.add(X, c.add(X))
        old_style = SegmentSpec(c.quantizer, c.norm_encoding, c.store_vectors)  # model_ref None
        X, ids = vectors(30, 2), np.arange(1000, 1030)
        c.commit_segments([write_pending_segment(c.path, old_style, X, ids)])
        model.add(X, ids)
        kinds = sorted(kind for kind, _m, _s in segment_files(folder).values())
        assert kinds == ["fastscan-index", KIND_SEGMENT]
        assert_same_search(c, reference_index(q, model, store_vectors="float32"), vectors(4, 3), 5)
        c.verify()
        c.compact()
        assert_by_reference(folder)
        assert_same_search(c, reference_index(q, model, store_vectors="float32"), vectors(4, 3), 5)


# ------------------------------------------------------------------------------------------------- disk figure


def _generation_bytes(folder):
    with ockstore.open_collection(folder) as c:
        info = c.info()
    files = [info["quantizer_file"], names.manifest_name(info["generation"])]
    for s in info["segment_files"]:
        files += [s["file"]] + ([s["deletions"]] if s["deletions"] else [])
    return sum(os.path.getsize(folder / f) for f in files), len(info["segment_files"])


def test_a_grown_collection_takes_the_bytes_of_its_compacted_copy(tmp_path):
    """The disk figure of issue 27 on small synthetic data: 39 writer launches of 100 rows (P = 48, float16 stored
    vectors, a model file of 110 KB against 11 KB of rows per launch) leave 12 segments whose live generation is
    within 1.1x the bytes of its compacted copy (both after vacuum(keep_generations=1); measured 1.015x); with a copy
    of the model in each segment it would hold about 3x."""
    dim = 48
    X = np.random.default_rng(0).normal(size=(4000, dim)).astype(np.float32)
    q = ockstore.OCKM(4, 2, 2, n_iter=2, metric="cosine", seed=0).fit(X[:1000])
    folder = tmp_path / "grown"
    ockstore.create_collection(folder, q, store_vectors="float16").close()
    for launch in range(39):
        with ockstore.open_collection(folder, "a") as c:
            c.add(X[launch * 100:(launch + 1) * 100])
    shutil.copytree(folder, tmp_path / "compacted")
    with ockstore.open_collection(folder, "a") as c:
        c.vacuum(keep_generations=1)
        results = c.search(X[:5], 10)
    with ockstore.open_collection(tmp_path / "compacted", "a") as c:
        c.compact()
        c.vacuum(keep_generations=1)
        np.testing.assert_array_equal(c.search(X[:5], 10)[1], results[1])
    grown, segments = _generation_bytes(folder)
    compacted, one = _generation_bytes(tmp_path / "compacted")
    model_bytes = os.path.getsize(folder / names.QUANTIZER_NAME)
    launch_bytes = (compacted - model_bytes) / 39  # the rows of one launch
    assert one == 1 and segments == 12 and model_bytes > 5 * launch_bytes
    assert grown <= 1.1 * compacted, (grown, compacted, segments)
    assert grown + (segments - 1) * model_bytes > 2.5 * compacted  # what a copy of the model per segment would cost
    assert sum(os.path.getsize(folder / n) for n in os.listdir(folder)) == grown  # vacuumed (the lock file is empty)


# ------------------------------------------------------------------------------------------ refused, named, checked


@pytest.fixture
def grown(q, tmp_path):
    """A collection of three segments by reference, and its model."""
    folder = tmp_path / "c"
    model = Model(P)
    with ockstore.create_collection(folder, q, store_vectors="float32", merge_factor=10) as c:
        for seed in range(3):
            X = vectors(30, seed)
            model.add(X, c.add(X))
    return folder, model


def test_another_model_under_the_quantizer_files_name_is_refused_naming_both_C7_S4(grown, tmp_path):
    """C7, S4: the quantizer file replaced by another model: opening the collection fails with "model mismatch" naming
    a segment and the quantizer file; so does open_index of a segment alone."""
    folder, _model = grown
    other = ockstore.OCKM(3, 2, 4, n_codewords=16, n_iter=3, seed=5).fit(vectors(800, 9))
    ockstore.save_quantizer(folder / names.QUANTIZER_NAME, other)
    with pytest.raises(FormatError) as info:
        ockstore.open_collection(folder)
    message = str(info.value)
    assert "model mismatch" in message and "segment." in message and names.QUANTIZER_NAME in message
    segment = next(n for n in os.listdir(folder) if names.is_segment(n))
    with pytest.raises(FormatError, match="model mismatch"):
        ockstore.open_index(folder / segment)


def test_a_missing_quantizer_file_is_named_C4_S4(grown, tmp_path):
    """C4, S4: without its quantizer file a collection does not open (FormatError naming it); a segment copied alone
    elsewhere says which file it needs and to open the collection."""
    folder, _model = grown
    segment = next(n for n in os.listdir(folder) if names.is_segment(n))
    shutil.copy(folder / segment, tmp_path / segment)
    with pytest.raises(FormatError, match="missing model.*'quantizer.ockq'.*open_collection"):
        ockstore.open_index(tmp_path / segment)
    os.remove(folder / names.QUANTIZER_NAME)
    with pytest.raises(FormatError, match="quantizer.ockq"):
        ockstore.open_collection(folder)


def test_verify_checks_the_model_and_its_fingerprint_S5(grown, tmp_path):
    """S5: verify of a reader whose quantizer file was replaced by another model after it opened fails ("model
    mismatch", naming the file); a quantizer file whose bytes break their CRC fails too (the collection opens: its
    header's fingerprint still matches). A segment's verify recomputes the fingerprint of the model it searches."""
    folder, _model = grown
    with ockstore.open_collection(folder) as reader:
        reader.verify()
        for view in reader._snap.views:
            view.index.verify()  # the model's fingerprint recomputed for each segment
        os.replace(folder / names.QUANTIZER_NAME, tmp_path / "kept.ockq")
        other = ockstore.OCKM(3, 2, 4, n_codewords=16, n_iter=3, seed=5).fit(vectors(800, 9))
        ockstore.save_quantizer(folder / names.QUANTIZER_NAME, other)
        with pytest.raises(FormatError, match="quantizer.ockq'.*model mismatch"):
            reader.verify()
    os.replace(tmp_path / "kept.ockq", folder / names.QUANTIZER_NAME)
    with storage.open_file(folder / names.QUANTIZER_NAME) as f:
        offset = f.section_info("codebooks")["offset"]
    data = bytearray((folder / names.QUANTIZER_NAME).read_bytes())
    data[offset + 1] ^= 0x01
    (folder / names.QUANTIZER_NAME).write_bytes(bytes(data))
    with ockstore.open_collection(folder) as reader:
        with pytest.raises(FormatError, match="CRC mismatch"):
            reader.verify()
        with pytest.raises(FormatError, match="model mismatch"):
            reader._snap.views[0].index.verify()


def test_a_segment_opens_alone_with_its_quantizer_file(grown):
    """open_index of a segment by reference in its folder: the collection's quantizer file, checked; the same results
    as the collection's search of that segment alone; file_info and `ockstore info` name the model."""
    folder, model = grown
    with ockstore.open_collection(folder) as c:
        entry = c.info()["segment_files"][0]
        only = c.search(vectors(3, 40), 4, allow=np.arange(entry["min_id"], entry["max_id"] + 1))
    with ockstore.open_index(folder / entry["file"]) as s:
        D, I = s.search(vectors(3, 40), 4)
        s.verify()
    np.testing.assert_array_equal(I, only[1])
    np.testing.assert_array_equal(D, only[0])
    info = ockstore.file_info(folder / entry["file"])
    assert info["model_file"] == names.QUANTIZER_NAME and len(info["model_fingerprint"]) == 64
    from cli_runner import run

    proc = run("info", str(folder / entry["file"]))
    assert "model_file:" in proc.stdout and names.QUANTIZER_NAME in proc.stdout


# ----------------------------------------------------------------------------------- collections of format 1.3


GOLDEN = [("flat", "golden_collection_v13", {}), ("ivf", "golden_collection_ivf_v13", {"n_probe": 2})]


@pytest.mark.parametrize("prefix, name, probe", GOLDEN, ids=[g[0] for g in GOLDEN])
def test_collections_of_format_1_3_open_and_search_as_they_did_C7(tmp_path, prefix, name, probe):
    """C7 (segments that hold their own model, written before format 1.4): the committed golden collections open,
    verify and return the committed results (ids exactly, values to 1e-5); their segments keep their kind."""
    expected = np.load(DATA / "golden_collections.npz")
    folder = tmp_path / name
    shutil.copytree(DATA / name, folder)
    Q = expected[prefix + "_Q"]
    with ockstore.open_collection(folder) as c:
        c.verify()
        D, I = c.search(Q, 10, n_threads=1)
        D0, I0 = c.search(Q, 10, rerank=0, n_threads=1, **probe)
    np.testing.assert_array_equal(I, expected[prefix + "_I"])
    np.testing.assert_allclose(D, expected[prefix + "_D"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(I0, expected[prefix + "_I0"])
    np.testing.assert_allclose(D0, expected[prefix + "_D0"], rtol=1e-5, atol=1e-6)
    kinds = {kind for kind, _m, _s in segment_files(folder).values()}
    assert kinds == ({"fastscan-index"} if prefix == "flat" else {"ivf-fastscan-index"})


def test_a_collection_of_format_1_3_grows_with_segments_by_reference_C7(tmp_path):
    """C7: a golden flat collection of format 1.3 (segments holding their own model) takes new segments by reference
    beside its old ones; searches equal one index over the live rows (the old rows' stored float32 vectors are the
    vectors they were encoded from); compaction rewrites everything by reference, with the same results."""
    folder = tmp_path / "flat"
    shutil.copytree(DATA / "golden_collection_v13", folder)
    with ockstore.open_collection(folder, "a") as c:
        q = c.quantizer
        model = Model(c.dim)
        old_ids = c.ids()
        model.add(c.get(old_ids), old_ids)
        model.next_id = c.next_id
        X = np.random.default_rng(5).normal(size=(25, c.dim)).astype(np.float32) * 2
        model.add(X, c.add(X))
        kinds = sorted(kind for kind, _m, _s in segment_files(folder).values())
        assert kinds == ["fastscan-index"] * 3 + [KIND_SEGMENT]
        Q = np.load(DATA / "golden_collections.npz")["flat_Q"]
        reference = reference_index(q, model, store_vectors="float32")
        for options in ({}, {"rerank": 0}, {"distance": "sdc", "rerank": 0}, {"allow": model.live_ids()[::2]}):
            assert_same_search(c, reference, Q, 7, **options)
        c.verify()
        c.compact()
        assert assert_by_reference(folder) == names.QUANTIZER_NAME
        for options in ({}, {"rerank": 0}):
            assert_same_search(c, reference, Q, 7, **options)
        c.verify()
    ivf_folder = tmp_path / "ivf"
    shutil.copytree(DATA / "golden_collection_ivf_v13", ivf_folder)
    with ockstore.open_collection(ivf_folder, "a") as c:
        c.add(np.random.default_rng(6).normal(size=(20, c.dim)).astype(np.float32))
        Q = np.load(DATA / "golden_collections.npz")["ivf_Q"]
        before = [c.search(Q, 8, n_probe=p, rerank=r) for p in (1, 4) for r in (None, 0)]
        c.compact()
        assert_by_reference(ivf_folder).startswith("quantizer.0")
        after = [c.search(Q, 8, n_probe=p, rerank=r) for p in (1, 4) for r in (None, 0)]
        for (D1, I1), (D2, I2) in zip(before, after):
            np.testing.assert_array_equal(I1, I2)
            np.testing.assert_array_equal(D1, D2)
        c.verify()
