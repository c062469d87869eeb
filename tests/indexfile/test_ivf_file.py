"""Tests of inverted-file (IVF) index and quantizer files against docs/FORMAT.md section 14 (rules V1-V10): round
trips, canonical bytes whatever the chunks, the counting sort of the writer (bounded memory, atomic), copying rows
without re-encoding (``IndexWriter._append(..., list_ids=...)``), hand-made inconsistent files (FormatError naming the
check), and older files still opening unchanged. Every rule V1-V10 is cited by at least one test below.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import ockstore
from ockstore import _registry
from ockstore import IVF, Index, IndexWriter, build_index, load_quantizer, open_index, save_quantizer, storage
from ockstore.indexfile import ivf_writer
from ockstore.errors import FormatError

from helpers import is_hidden_temp, listing
from index_files import DATA, assert_same_parts, expect_format_error, parts_of, user_ids
from index_files import write_parts as write_flat_parts

P = 12
N = 1800
L = 10


def clusters(n, seed):
    centres = np.random.default_rng(100).normal(scale=4.0, size=(8, P)) + 1.0
    rng = np.random.default_rng(seed)
    X = centres[rng.integers(0, 8, size=n)] + rng.normal(size=(n, P)) * np.linspace(1.5, 0.3, P)
    return X.astype(np.float32)


@pytest.fixture(scope="module")
def learn():
    return clusters(1200, 1)


@pytest.fixture(scope="module")
def base():
    return clusters(N, 2)


@pytest.fixture(scope="module")
def queries():
    return clusters(9, 3)


@pytest.fixture(scope="module")
def ivf(learn):
    return IVF(L, ockstore.OCKM(3, 2, 3, n_codewords=32, n_iter=3, seed=0), n_iter=5, seed=1).fit(learn)


@pytest.fixture(scope="module")
def ivf_ip(learn):
    return IVF(L, ockstore.PQ(4, n_codewords=32, metric="ip", n_iter=3), n_iter=5).fit(learn)


def write_parts(path, meta, sections, user=None, minor=None):
    """A container file of these parts, of format 1.2 (V1; 1.3 for fast-scan files, F1) unless ``minor`` says
    otherwise."""
    return write_flat_parts(path, meta, sections, user, minor, floor=2)


# --------------------------------------------------------------------------------------------------------------------
# round trips


@pytest.mark.parametrize("store", [None, "float32", "uint8"])
@pytest.mark.parametrize("with_ids", [False, True], ids=["insertion-ids", "user-ids"])
@pytest.mark.parametrize("norm_encoding", ["u8", "f32"])
def test_round_trip_V5_V7(tmp_path, ivf, base, queries, norm_encoding, with_ids, store):
    """V5, V7: a file written by IndexWriter reopens to the same IVF and rows as the in-memory index (list after
    list, ids stored always), and every search gives exactly the in-memory results."""
    X = np.clip(np.round(base * 8 + 100), 0, 255) if store == "uint8" else base
    ids = user_ids(N) if with_ids else None
    path = tmp_path / "x.ock"
    build_index(path, ivf, X, ids, norm_encoding=norm_encoding, store_vectors=store, chunk_size=500)
    memory = Index.from_vectors(ivf, X, ids, norm_encoding=norm_encoding, store_vectors=store)
    with open_index(path) as index:
        assert isinstance(index, ockstore.IVFIndex)
        assert index.quantizer == ivf and index.quantizer is not ivf and index.has_ids
        for name in ("codes", "norms", "ids", "list_offsets", "vectors"):
            got, want = getattr(index, name), getattr(memory, name)
            if want is None:
                assert got is None
            else:
                np.testing.assert_array_equal(got, want)
                assert not got.flags.writeable
        for options in ({}, {"n_probe": 3}, {"n_probe": L, "distance": "sdc"}, {"allow": index.ids[::3]},
                        {"n_probe": 2, "rerank": 20} if store else {"n_probe": 2}):
            D, I = index.search(queries, 8, **options)
            D0, I0 = memory.search(queries, 8, **options)
            np.testing.assert_array_equal(D, D0)
            np.testing.assert_array_equal(I, I0)
        index.verify()
        info = index.info()
    assert info == {**memory.info(), "format_version": "1.2", "has_ids": True, "metadata": {}, "path": str(path)}
    assert ockstore.file_info(path) == {"kind": "ivf-index", **info}
    assert load_quantizer(path) == ivf


def test_quantizer_file_round_trip_V1_V3(tmp_path, ivf, ivf_ip, base):
    """V1, V3: save_quantizer writes an "ivf-quantizer" file that load_quantizer turns back into the same IVF (fine
    quantizer included); open_index refuses it; an index built from the loaded IVF is the same file."""
    for model in (ivf, ivf_ip):
        path = tmp_path / "q.ockq"
        save_quantizer(path, model, metadata={"note": 1})
        loaded = load_quantizer(path)
        assert isinstance(loaded, IVF) and loaded == model and loaded.quantizer == model.quantizer
        meta, sections, user = parts_of(path)
        assert meta["kind"] == "ivf-quantizer" and user == {"note": 1}
        assert meta["ivf"] == {"n_lists": L, "n_iter": model.n_iter, "seed": model.seed}
        expected = ["codebooks", "objective_history", "coarse_centroids", "coarse_objective_history", "ivf_norm_levels",
                    "value_ranges"]  # the model's value ranges (I21), last
        np.testing.assert_array_equal(sections["value_ranges"], model.value_ranges)
        if model.quantizer.rotation is not None:
            expected.insert(0, "rotation")
        if model.quantizer.norm_levels is not None:
            expected.insert(expected.index("coarse_centroids"), "norm_levels")
        assert list(sections) == expected
        expect_format_error(path, "wrong kind")
        info = ockstore.file_info(path)
        assert info["kind"] == "ivf-quantizer" and info["n_lists"] == L and info["format_version"] == "1.3"
        build_index(tmp_path / "a.ock", model, base)
        build_index(tmp_path / "b.ock", loaded, base)
        assert (tmp_path / "a.ock").read_bytes() == (tmp_path / "b.ock").read_bytes()


def test_meta_and_section_layout_V1_V2_V3_V6(tmp_path, ivf, base):
    """V1, V2, V3, V6: the meta of an IVF index (kind, ivf map, has_ids true, no timestamp), its sections in order,
    format 1.2."""
    path = tmp_path / "x.ock"
    build_index(path, ivf, base, store_vectors="float16", metadata={"a": [1, 2]})
    meta, sections, user = parts_of(path)
    assert set(meta) == {"kind", "library", "method", "params", "ivf", "ntotal", "norm_encoding", "has_ids",
                         "store_vectors"}
    assert meta["kind"] == "ivf-index" and meta["method"] == "ockm" and meta["ntotal"] == N
    assert meta["ivf"] == {"n_lists": L, "n_iter": 5, "seed": 1} and meta["has_ids"] is True
    assert meta["norm_encoding"] == "u8" and user == {"a": [1, 2]}
    assert list(sections) == ["rotation", "codebooks", "objective_history", "norm_levels", "coarse_centroids",
                              "coarse_objective_history", "ivf_norm_levels", "list_offsets", "codes", "norms", "ids",
                              "vectors"]
    assert sections["list_offsets"].dtype == np.dtype("<i8") and sections["list_offsets"].shape == (L + 1,)
    np.testing.assert_array_equal(sections["coarse_centroids"], ivf.centroids)
    with storage.open_file(path) as f:
        assert f.version == (1, 2)


def test_identical_bytes_whatever_the_chunks_V9(tmp_path, ivf, base):
    """V9: the same IVF, vectors, ids and options give the same bytes whether the vectors came in one chunk, in
    many of any sizes (an empty one too), through build_index, Index.save, or a save of the opened file."""
    ids = user_ids(N)
    paths = []
    for k, sizes in enumerate([[N], [1, 999, 0, 800], [7] * (N // 7) + [N % 7]]):
        path = tmp_path / f"w{k}.ock"
        with IndexWriter(path, ivf, store_vectors="float32") as w:
            start = 0
            for size in sizes:
                w.add(base[start:start + size], ids[start:start + size])
                start += size
        paths.append(path)
    build_index(tmp_path / "b.ock", ivf, base, ids, store_vectors="float32", chunk_size=333)
    Index.from_vectors(ivf, base, ids, store_vectors="float32").save(tmp_path / "s.ock")
    with open_index(paths[0]) as index:
        index.save(tmp_path / "r.ock")
    reference = paths[0].read_bytes()
    for path in paths[1:] + [tmp_path / "b.ock", tmp_path / "s.ock", tmp_path / "r.ock"]:
        assert path.read_bytes() == reference, path


def test_append_copies_rows_without_reencoding(tmp_path, ivf, base, queries):
    """IndexWriter._append(codes, norms, ids, vectors, list_ids=...) takes rows already encoded (compaction copies
    rows so): any order of the rows of an index, appended with their lists, gives back the same file; a flat writer
    refuses list_ids and the IVF writer requires them."""
    path = tmp_path / "a.ock"
    build_index(path, ivf, base, user_ids(N), store_vectors="float32")
    with open_index(path) as index:
        lists = index.row_lists()
        # the lists interleaved (first row of every list, then the second...), each list's rows in their order
        position = np.arange(N) - index.list_offsets[lists]
        rows = np.lexsort((lists, position))
        assert not np.array_equal(rows, np.arange(N))
        with IndexWriter(tmp_path / "b.ock", index.quantizer, store_vectors="float32") as w:
            for part in np.array_split(rows, 5):
                w._append(np.array(index.codes[part]), np.array(index.norms[part]), np.array(index.ids[part]),
                          np.array(index.vectors[part]), list_ids=lists[part])
        assert (tmp_path / "b.ock").read_bytes() == path.read_bytes()
        with pytest.raises(TypeError):
            with IndexWriter(tmp_path / "c.ock", index.quantizer) as w:
                w._append(np.array(index.codes[:3]), np.array(index.norms[:3]), np.array(index.ids[:3]))
        assert not (tmp_path / "c.ock").exists()
    flat = ockstore.PQ(4, n_codewords=32).fit(base)
    with pytest.raises(ValueError, match="list_ids"):
        with IndexWriter(tmp_path / "d.ock", flat) as w:
            w._append(np.zeros((2, 4), np.uint8), None, None, list_ids=np.zeros(2, np.int32))


def test_row_lists(ivf, base):
    index = Index.from_vectors(ivf, base)
    lists = index.row_lists()
    np.testing.assert_array_equal(lists, np.repeat(np.arange(L), index.list_sizes))
    for start, stop in ((0, 0), (0, 1), (5, 700), (N - 3, N), (N, N)):
        np.testing.assert_array_equal(index.row_lists(start, stop), lists[start:stop])
    with pytest.raises(ValueError):
        index.row_lists(5, 4)


def test_empty_index_and_writer_without_add_V5(tmp_path, ivf, queries):
    """V5: N = 0 is a valid IVF index (offsets all 0); a writer closed without any add writes one."""
    with IndexWriter(tmp_path / "e.ock", ivf) as w:
        pass
    assert w.closed and w.ntotal == 0
    with open_index(tmp_path / "e.ock") as index:
        index.verify()
        assert index.ntotal == 0 and index.list_offsets.tolist() == [0] * (L + 1)
        D, I = index.search(queries, 3, n_probe=L)
        assert (I == -1).all() and np.isinf(D).all()
        assert index.info()["list_sizes"] == {"min": 0, "max": 0, "mean": 0.0, "median": 0.0, "empty": L}


def test_writer_memory_is_bounded_by_the_chunk_V9(tmp_path, ivf, base, monkeypatch):
    """V9: the writer keeps no O(N) array: building 8x more vectors (same chunks) allocates no more at its peak,
    with the counting sort reading the spill back in blocks."""
    monkeypatch.setattr(ivf_writer, "ROWS_PER_SORT", 512)
    chunk = base[:400]
    peaks = {}
    for n_chunks in (2, 16):
        path = tmp_path / f"{n_chunks}.ock"
        w = IndexWriter(path, ivf, store_vectors="float32")
        w.add(chunk)  # the first add creates the spill files and warms the encoder's caches
        tracemalloc.start()
        for _ in range(n_chunks - 1):
            w.add(chunk)
        w.close()
        _, peaks[n_chunks] = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        with open_index(path) as index:
            assert index.ntotal == 400 * n_chunks
    assert peaks[16] < peaks[2] + 64 * 1024, peaks  # not 8x the rows (16 * 400 rows of 60 bytes each = 384 KB)


def test_exception_leaves_no_file_and_no_temps_V9(tmp_path, ivf, base):
    """V9 (I13): leaving the block with an exception writes nothing and removes every temporary file (the spill
    files included); a previous file stays byte for byte."""
    path = tmp_path / "x.ock"
    with pytest.raises(RuntimeError):
        with IndexWriter(path, ivf) as w:
            w.add(base[:500])
            raise RuntimeError("boom")
    assert listing(tmp_path) == []
    build_index(path, ivf, base[:100])
    before = path.read_bytes()
    with pytest.raises(RuntimeError):
        with IndexWriter(path, ivf, store_vectors="float32") as w:
            w.add(base)
            assert any(is_hidden_temp(name, "x.ock") for name in listing(tmp_path))  # the spill
            raise RuntimeError("boom")
    assert listing(tmp_path) == ["x.ock"] and path.read_bytes() == before
    with pytest.raises(ValueError, match="aborted"):
        w.add(base[:3])


def test_writer_arguments(tmp_path, ivf, ivf_ip, base):
    with pytest.raises(ValueError, match="norm_encoding"):
        IndexWriter(tmp_path / "x.ock", ivf, norm_encoding="none")
    with pytest.raises(ValueError, match="norm_encoding"):
        IndexWriter(tmp_path / "x.ock", ivf_ip, norm_encoding="u8")
    with pytest.raises(ockstore.NotFittedError):
        IndexWriter(tmp_path / "x.ock", IVF(4, ockstore.PQ(3)))
    with IndexWriter(tmp_path / "x.ock", ivf) as w:
        w.add(base[:10], ids=np.arange(10))
        with pytest.raises(ValueError, match="ids"):
            w.add(base[10:20])
        with pytest.raises(ValueError, match="X"):
            w.add(base[:3, :5], ids=np.arange(3))
        bad = np.array(base[:3])
        bad[1, 1] = np.inf
        with pytest.raises(ValueError, match="X"):
            w.add(bad, ids=np.arange(3))  # refused chunks append nothing
    assert listing(tmp_path) == ["x.ock"]
    with open_index(tmp_path / "x.ock") as index:
        assert index.ntotal == 10


# --------------------------------------------------------------------------------------------------------------------
# hand-made inconsistent files


@pytest.fixture(scope="module")
def valid(tmp_path_factory, ivf, base):
    """(meta, sections, user) of a valid IVF index file with stored ids."""
    path = tmp_path_factory.mktemp("valid") / "v.ock"
    build_index(path, ivf, base[:300])
    return parts_of(path)


def _drop(sections, name):
    return {k: v for k, v in sections.items() if k != name}


def _with(sections, name, value):
    return {k: (value if k == name else v) for k, v in sections.items()}


def _set(array, flat_index, value):
    out = array.copy()
    out.flat[flat_index] = value
    return out


def _decreasing(offsets):
    bad = offsets.copy()
    bad[3], bad[4] = bad[4] + 1, bad[3]
    return bad


META_CASES = {
    # name: (edit of meta, check, named key)
    "ivf missing": (lambda m: {k: v for k, v in m.items() if k != "ivf"}, "bad meta", "ivf"),
    "ivf not a map": (lambda m: {**m, "ivf": [1]}, "bad meta", "ivf"),
    "n_lists missing": (lambda m: {**m, "ivf": {"n_iter": 5, "seed": 1}}, "bad meta", "n_lists"),
    "n_lists zero": (lambda m: {**m, "ivf": {**m["ivf"], "n_lists": 0}}, "bad meta", "n_lists"),
    "n_lists float": (lambda m: {**m, "ivf": {**m["ivf"], "n_lists": 10.0}}, "bad meta", "n_lists"),
    "n_iter zero": (lambda m: {**m, "ivf": {**m["ivf"], "n_iter": 0}}, "bad meta", "n_iter"),
    "seed negative": (lambda m: {**m, "ivf": {**m["ivf"], "seed": -1}}, "bad meta", "seed"),
    "has_ids false": (lambda m: {**m, "has_ids": False}, "bad meta", "has_ids"),
    "norm none for l2": (lambda m: {**m, "norm_encoding": "none"}, "bad meta", "norm_encoding"),
    "unknown kind": (lambda m: {**m, "kind": "ivf"}, "unknown kind", "kind"),
}


@pytest.mark.parametrize("minor", [0, 1])
def test_an_ivf_file_of_format_before_1_2_is_refused_V1(tmp_path, valid, ivf, minor):
    """V1: the IVF kinds exist from format 1.2: a file that says 1.0 or 1.1 and holds one is refused at open (index and
    quantizer loaders), naming the version and the kind."""
    meta, sections, user = valid
    path = write_parts(tmp_path / "old.ock", meta, sections, user, minor=minor)
    message = expect_format_error(path, "bad format version", "ivf-index")
    assert f"1.{minor}" in message
    with pytest.raises(FormatError, match="bad format version"):
        ockstore.load_quantizer(path)
    quantizer = tmp_path / "q.ockq"
    ockstore.save_quantizer(quantizer, ivf)
    meta, sections, user = parts_of(quantizer)
    sections = {name: arr for name, arr in sections.items() if name != "value_ranges"}  # of format 1.3 (I21)
    path = write_parts(tmp_path / "oldq.ockq", meta, sections, user, minor=minor)
    with pytest.raises(FormatError, match="bad format version.*ivf-quantizer"):
        ockstore.load_quantizer(path)
    ockstore.load_quantizer(write_parts(tmp_path / "newq.ockq", meta, sections, user, minor=2))


@pytest.mark.parametrize("case", list(META_CASES))
def test_bad_ivf_meta_refused_at_open_V1_V2_V6(tmp_path, valid, case):
    """V1, V2, V6: the kind, the ivf map and the index meta of an inverted file are checked at open."""
    meta, sections, user = valid
    edit, check, name = META_CASES[case]
    if case == "norm none for l2":
        sections = _drop(sections, "norms")
    path = write_parts(tmp_path / "bad.ock", edit(dict(meta)), sections, user)
    expect_format_error(path, check, name)


SECTION_CASES = {
    "coarse_centroids missing": (lambda s: _drop(s, "coarse_centroids"), "missing section", "coarse_centroids"),
    "coarse_centroids shape": (lambda s: _with(s, "coarse_centroids", s["coarse_centroids"][:-1]), "bad section shape",
                               "coarse_centroids"),
    "coarse_centroids dtype": (lambda s: _with(s, "coarse_centroids", s["coarse_centroids"].astype("<f8")),
                               "bad section dtype", "coarse_centroids"),
    "coarse_centroids nan": (lambda s: _with(s, "coarse_centroids", _set(s["coarse_centroids"], 7, np.nan)),
                             "non-finite values", "coarse_centroids"),
    "coarse_centroids 1e20": (lambda s: _with(s, "coarse_centroids", s["coarse_centroids"] * 0 + np.float32(1e20)),
                              "value out of range", "coarse_centroids"),
    "ivf_norm_levels 1e38": (lambda s: _with(s, "ivf_norm_levels", np.linspace(0, 1e38, 256, dtype="<f4")),
                             "value out of range", "ivf_norm_levels"),
    "history missing": (lambda s: _drop(s, "coarse_objective_history"), "missing section",
                        "coarse_objective_history"),
    "history inf": (lambda s: _with(s, "coarse_objective_history", np.full(3, np.inf)), "non-finite values",
                    "coarse_objective_history"),
    "ivf_norm_levels missing": (lambda s: _drop(s, "ivf_norm_levels"), "missing section", "ivf_norm_levels"),
    "ivf_norm_levels unsorted": (lambda s: _with(s, "ivf_norm_levels", s["ivf_norm_levels"][::-1].copy()),
                                 "unsorted norm levels", "ivf_norm_levels"),
    "list_offsets missing": (lambda s: _drop(s, "list_offsets"), "missing section", "list_offsets"),
    "list_offsets shape": (lambda s: _with(s, "list_offsets", s["list_offsets"][:-1]), "bad section shape",
                           "list_offsets"),
    "list_offsets dtype": (lambda s: _with(s, "list_offsets", s["list_offsets"].astype("<i4")), "bad section dtype",
                           "list_offsets"),
    "list_offsets start": (lambda s: _with(s, "list_offsets", s["list_offsets"] + 1), "bad list offsets",
                           "list_offsets"),
    "list_offsets end": (lambda s: _with(s, "list_offsets", np.minimum(s["list_offsets"], 299)), "bad list offsets",
                         "list_offsets"),
    "list_offsets decrease": (lambda s: _with(s, "list_offsets", _decreasing(s["list_offsets"])), "bad list offsets",
                              "list_offsets"),
    "ids missing": (lambda s: _drop(s, "ids"), "missing section", "ids"),
}


@pytest.mark.parametrize("case", list(SECTION_CASES))
def test_bad_ivf_sections_refused_at_open_V3_V4_V5(tmp_path, valid, case):
    """V3, V4, V5: the coarse sections and the list offsets are checked at open (present, dtype, shape, finite,
    sorted levels, offsets from 0 to ntotal without decreasing), so a search never leaves its arrays."""
    meta, sections, user = valid
    edit, check, name = SECTION_CASES[case]
    path = write_parts(tmp_path / "bad.ock", meta, edit(dict(sections)), user)
    expect_format_error(path, check, name)


def test_ivf_sections_in_a_flat_file_refused_V4(tmp_path, valid, base):
    """V4: a flat index (or quantizer) file holding a section of an inverted file is refused: it would be read as
    a flat index while its rows are grouped by lists ("unexpected section")."""
    meta, sections, user = valid
    flat_meta = {k: v for k, v in meta.items() if k != "ivf"}
    flat_meta["kind"] = "index"
    flat = _drop(_drop(_drop(sections, "coarse_centroids"), "coarse_objective_history"), "ivf_norm_levels")
    path = write_parts(tmp_path / "f.ock", flat_meta, flat, user)
    expect_format_error(path, "unexpected section", "list_offsets")
    quantizer_meta = {k: v for k, v in meta.items() if k in ("kind", "library", "method", "params", "ivf")}
    quantizer_meta["kind"] = "ivf-quantizer"
    path = write_parts(tmp_path / "q.ock", quantizer_meta, sections, user)
    with pytest.raises(ockstore.FormatError, match="unexpected section"):
        load_quantizer(path)


def test_bad_codes_found_by_verify_and_never_returned_V7(tmp_path, valid, queries):
    """V7 (I7): code bytes >= K, non-finite float32 norms and negative ids are found by verify only; a search of a
    file with a bad code byte neither crashes nor returns that row."""
    meta, sections, user = valid
    codes = sections["codes"].copy()
    codes[17, 2] = 200
    path = write_parts(tmp_path / "c.ock", meta, _with(sections, "codes", codes), user)
    expect_format_error(path, "code out of range", "codes", when="verify")
    with open_index(path) as index:
        bad_id = int(index.ids[17])
        D, I = index.search(queries, 300, n_probe=L)
        assert bad_id not in I and np.isfinite(D[I >= 0]).all()
    ids = sections["ids"].copy()
    ids[5] = -3
    path = write_parts(tmp_path / "i.ock", meta, _with(sections, "ids", ids), user)
    expect_format_error(path, "negative id", "ids", when="verify")


def test_golden_files_still_open_unchanged_V8(tmp_path):
    """V8: files of format 1.0 (the committed golden file) open and search as before; written again today, its
    model (K = 16) makes it a fast-scan file of format 1.3 (F1) that searches alike; a flat file of K > 16 written
    today still says 1.0 when it uses nothing newer."""
    with open_index(DATA / "golden_v1.ock") as index:
        assert type(index) is Index and index.info()["format_version"] == "1.0"
        Q = np.load(DATA / "golden_v1_queries.npy")
        D, I = index.search(Q, 10)
        np.testing.assert_array_equal(I, np.load(DATA / "golden_v1_adc_I.npy"))
        with pytest.raises(ValueError, match="n_probe"):
            index.search(Q, 10, n_probe=1)
        index.save(tmp_path / "copy.ock")
        with open_index(tmp_path / "copy.ock") as copy:
            assert copy.info()["format_version"] == "1.3"
            np.testing.assert_array_equal(copy.codes, index.codes)
            np.testing.assert_array_equal(copy.search(Q, 10)[1], I)
    flat = ockstore.PQ(3, n_codewords=32, n_iter=2, seed=0).fit(np.load(DATA / "golden_v1_queries.npy").repeat(4, 0))
    build_index(tmp_path / "k32.ock", flat, np.load(DATA / "golden_v1_queries.npy"))
    assert ockstore.file_info(tmp_path / "k32.ock")["format_version"] == "1.0"
    assert _registry.file_kinds() == ("index", "fastscan-index", "quantizer", "ivf-index", "ivf-fastscan-index",
                                   "ivf-quantizer")


def test_golden_ivf_file_V10(tmp_path):
    """V10: the committed inverted file (tools/make_golden_index.py, format 1.2) opens, verifies and gives the committed
    neighbours (ids exactly, distances to 1e-5) for ADC at n_probe 2 and 6 (every list) and SDC at n_probe 2; saved
    again it gives the same sections and meta."""
    path = DATA / "golden_ivf.ock"
    Q = np.load(DATA / "golden_ivf_queries.npy")
    D0, I0 = np.load(DATA / "golden_ivf_D.npy"), np.load(DATA / "golden_ivf_I.npy")
    assert D0.shape == I0.shape == (3, 10, 10) and (I0 >= 0).all()
    with open_index(path) as index:
        index.verify()
        info = index.info()
        assert {key: info[key] for key in ("N", "P", "method", "M", "C", "K", "T", "n_lists", "norm_encoding",
                                           "format_version", "has_ids")} == {
            "N": 300, "P": 12, "method": "ockm", "M": 3, "C": 2, "K": 16, "T": 4, "n_lists": 6, "norm_encoding": "u8",
            "format_version": "1.2", "has_ids": True}
        for j, (distance, n_probe) in enumerate([("adc", 2), ("adc", 6), ("sdc", 2)]):
            D, I = index.search(Q, 10, distance=distance, n_probe=n_probe)
            np.testing.assert_array_equal(I, I0[j])
            np.testing.assert_allclose(D, D0[j], rtol=1e-5, atol=1e-5)
        index.save(tmp_path / "copy.ock")
    assert_same_parts(tmp_path / "copy.ock", path, fastscan_copy=True)  # K = 16: the copy in fast-scan blocks
