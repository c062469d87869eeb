"""Fast-scan files (docs/FORMAT.md section 16, rules F1-F5): index files of models with K <= 16 store their codes
two words per byte in blocks of 32 rows (section ``code_blocks``) under the kinds "fastscan-index" and
"ivf-fastscan-index" (format 1.3). The layout against a NumPy reading of the format's formula, the open-time and
verify-time checks (FormatError naming the check), searches of damaged files, canonical bytes. Every rule F1-F5 is
cited by at least one test below; the fuzzing of these files is tests/indexfile/test_index_fuzz.py (its seed files
have K = 4).
"""

from __future__ import annotations

import numpy as np
import pytest

import ockstore
from ockstore import IVF, IndexWriter, build_index, load_quantizer, open_index, save_quantizer, storage

from index_files import DATA, expect_format_error, parts_of, write_parts

P = 10
BLOCK = 32


def vectors(n, seed):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(6, P))[rng.integers(0, 6, n)] * 3 + rng.normal(size=(n, P))).astype(np.float32)


LEARN, BASE, QUERIES = vectors(500, 1), vectors(77, 2), vectors(4, 3)


@pytest.fixture(scope="module")
def models():
    return {"ockm": ockstore.OCKM(3, 2, 3, n_codewords=16, n_iter=2, seed=0).fit(LEARN),  # W = 6
            "pq": ockstore.PQ(3, n_codewords=8, n_iter=2, seed=0).fit(LEARN),  # W = 3: the pad column; K < 16
            "ivf": IVF(6, ockstore.OCKM(3, 2, 3, n_codewords=16, n_iter=2, seed=0), n_iter=3, seed=0).fit(LEARN)}


def format_words(blocks, run_offsets, W):
    """(N, W) words read from code_blocks by the formula of section 16.2, with NumPy only."""
    sizes = np.diff(run_offsets)
    starts = np.concatenate([[0], np.cumsum(-(-sizes // BLOCK))])
    out = np.zeros((int(run_offsets[-1]), W), dtype=np.uint8)
    for r, n in enumerate(sizes):
        for j in range(n):
            block = blocks[starts[r] + j // BLOCK]
            i = j % BLOCK
            for w in range(W):
                out[run_offsets[r] + j, w] = (block[16 * w + i % 16] >> (4 * (i // 16))) & 15
    return out


def padding_is_zero(blocks, run_offsets, W):
    sizes = np.diff(run_offsets)
    starts = np.concatenate([[0], np.cumsum(-(-sizes // BLOCK))])
    for r, n in enumerate(sizes):
        for b in range(starts[r], starts[r + 1]):
            for i in range(BLOCK):
                row_in = (b - starts[r]) * BLOCK + i < n
                for w in range((W + 1) // 2 * 2):
                    word = (blocks[b, 16 * w + i % 16] >> (4 * (i // 16))) & 15
                    if (not row_in or w >= W) and word:
                        return False
    return True


# ----------------------------------------------------------------------------------------------------------- F1, F4

@pytest.mark.parametrize("name", ["ockm", "pq"])
def test_flat_layout_is_the_formats_F1_F2_F4(tmp_path, models, name):
    q = models[name]
    path = tmp_path / "a.ock"
    build_index(path, q, BASE, np.arange(77) * 3, store_vectors="float16")
    meta, sections, _ = parts_of(path)
    with storage.open_file(path) as f:
        assert f.version == (1, 3)
    assert meta["kind"] == "fastscan-index" and meta["params"]["n_codewords"] == q.n_codewords
    W = q.code_size
    assert "codes" not in sections
    assert list(sections)[list(sections).index("code_blocks") - 1] in ("norm_levels", "objective_history")
    blocks = sections["code_blocks"]
    assert blocks.dtype == np.uint8 and blocks.shape == (3, 16 * (W + W % 2))  # 77 rows: 3 blocks
    np.testing.assert_array_equal(format_words(blocks, np.array([0, 77]), W), q.encode(BASE))
    assert padding_is_zero(blocks, np.array([0, 77]), W)
    with open_index(path) as index:
        assert index.bytes_per_vector == -(-W // 2) + (1 if q.n_codebooks > 1 else 0)
        np.testing.assert_array_equal(index.codes, q.encode(BASE))


def test_ivf_layout_each_list_in_whole_blocks_F2_F4(tmp_path, models):
    ivf = models["ivf"]
    path = tmp_path / "i.ock"
    build_index(path, ivf, BASE)
    meta, sections, _ = parts_of(path)
    assert meta["kind"] == "ivf-fastscan-index"
    offsets = sections["list_offsets"]
    sizes = np.diff(offsets)
    assert sections["code_blocks"].shape[0] == int((-(-sizes // BLOCK)).sum())
    lists, codes = ivf.encode(BASE)
    order = np.argsort(lists, kind="stable")  # rows list after list, in insertion order within a list
    np.testing.assert_array_equal(format_words(sections["code_blocks"], offsets, ivf.code_size), codes[order])
    assert padding_is_zero(sections["code_blocks"], offsets, ivf.code_size)


def test_quantizer_files_and_k_above_16_are_written_as_before_F1_F5(tmp_path, models):
    # quantizer files: no code_blocks, and the version their other contents ask for (a fitted model's value ranges:
    # 1.3 by rule I21, for K = 17 alike), none for K <= 16
    q32 = ockstore.OCKM(3, 2, 3, n_codewords=17, n_iter=1, seed=0).fit(LEARN)
    save_quantizer(tmp_path / "q17.ockq", q32)
    save_quantizer(tmp_path / "q.ockq", models["ockm"])
    with storage.open_file(tmp_path / "q.ockq") as f, storage.open_file(tmp_path / "q17.ockq") as f17:
        assert f.meta["kind"] == "quantizer" and f.version == f17.version == (1, 3)
    assert "value_ranges" in parts_of(tmp_path / "q.ockq")[1] and "code_blocks" not in parts_of(tmp_path / "q.ockq")[1]
    ivf = IVF(6, ockstore.OCKM(3, 2, 3, n_codewords=16, n_iter=2, seed=0), n_iter=3, seed=0).fit(LEARN)
    ivf._set_value_ranges(None)  # a model without ranges (as read from an older file): the lowest minor, 1.2
    save_quantizer(tmp_path / "iq.ockq", ivf)
    with storage.open_file(tmp_path / "iq.ockq") as f:
        assert f.meta["kind"] == "ivf-quantizer" and f.version == (1, 2)
    build_index(tmp_path / "k17.ock", q32, BASE)
    meta, sections, _ = parts_of(tmp_path / "k17.ock")
    assert meta["kind"] == "index" and "codes" in sections and "code_blocks" not in sections
    # a quantizer loader takes the model of a fast-scan file
    build_index(tmp_path / "a.ock", models["ockm"], BASE)
    loaded = load_quantizer(tmp_path / "a.ock")
    np.testing.assert_array_equal(loaded.encode(BASE), models["ockm"].encode(BASE))


def test_golden_files_of_older_versions_open_F5():
    """F5: the committed files of format 1.0 and 1.2 (K = 16, byte codes) open, verify and search (their results:
    tests/indexfile/test_index_file_checks.py, test_ivf_file.py) with their codes one byte per word."""
    for name, version in (("golden_v1.ock", "1.0"), ("golden_ivf.ock", "1.2")):
        with open_index(DATA / name) as index:
            index.verify()
            assert index.info()["format_version"] == version and index.quantizer.n_codewords == 16
            assert index.info()["bits"] == 8 * index.quantizer.code_size


# ------------------------------------------------------------------------------------------------ F1, F2 at open

@pytest.fixture(scope="module")
def valid(tmp_path_factory, models):
    folder = tmp_path_factory.mktemp("valid")
    build_index(folder / "a.ock", models["ockm"], BASE, np.arange(77) + 5, norm_encoding="f32")
    build_index(folder / "i.ock", models["ivf"], BASE)
    return {"flat": parts_of(folder / "a.ock"), "ivf": parts_of(folder / "i.ock")}


def _replace(sections, name, array=None):
    out = {}
    for key, value in sections.items():
        if key == name:
            if array is not None:
                out[key] = array
        else:
            out[key] = value
    return out


@pytest.mark.parametrize("which", ["flat", "ivf"])
@pytest.mark.parametrize("minor", [0, 1, 2])
def test_a_fastscan_kind_before_1_3_is_refused_F1(tmp_path, valid, which, minor):
    meta, sections, user = valid[which]
    path = write_parts(tmp_path / "old.ock", meta, sections, user, minor=max(minor, 2 if which == "ivf" else 0))
    message = expect_format_error(path, "bad format version", meta["kind"])
    assert "1.3" in message


def test_older_readers_refuse_the_kinds_F1(valid):
    """Readers of format 1.0-1.2 accept exactly the kinds of their sections 11 and 14: a fast-scan file's kind is
    none of them (so they refuse it, "unknown kind", before looking for 'codes'), and it holds no 'codes'."""
    for which in ("flat", "ivf"):
        meta, sections, _ = valid[which]
        assert meta["kind"] not in ("index", "quantizer", "ivf-index", "ivf-quantizer") and "codes" not in sections


CASES = {
    "n_codewords-17": (lambda m, s: ({**m, "params": {**m["params"], "n_codewords": 17}}, _replace(
        s, "codebooks", np.concatenate([s["codebooks"], s["codebooks"][:, :, :1]], axis=2))), "bad meta",
                       "n_codewords"),
    "blocks-missing": (lambda m, s: (m, _replace(s, "code_blocks")), "missing section", "code_blocks"),
    "blocks-dtype": (lambda m, s: (m, _replace(s, "code_blocks", s["code_blocks"].view("<i4"))), "bad section dtype",
                     "code_blocks"),
    "blocks-short": (lambda m, s: (m, _replace(s, "code_blocks", s["code_blocks"][:-1])), "bad section shape",
                     "code_blocks"),
    "blocks-wide": (lambda m, s: (m, _replace(s, "code_blocks", np.zeros((s["code_blocks"].shape[0], 16 * 8),
                                                                         np.uint8))), "bad section shape",
                    "code_blocks"),
    "codes-too": (lambda m, s: (m, {**s, "codes": np.zeros((77, 6), np.uint8)}), "unexpected section", "codes"),
    "byte-kind": (lambda m, s: ({**m, "kind": {"fastscan-index": "index", "ivf-fastscan-index": "ivf-index"}[
        m["kind"]]}, s), "unexpected section", "code_blocks"),
}


@pytest.mark.parametrize("which", ["flat", "ivf"])
@pytest.mark.parametrize("case", list(CASES))
def test_inconsistent_fastscan_file_refused_at_open_F1_F2(tmp_path, valid, which, case):
    meta, sections, user = valid[which]
    edit, check, name = CASES[case]
    new_meta, new_sections = edit(dict(meta), dict(sections))
    path = write_parts(tmp_path / "bad.ock", new_meta, new_sections, user, minor=3)
    expect_format_error(path, check, name)


def test_code_blocks_in_a_byte_file_refused_F2(tmp_path):
    q = ockstore.PQ(3, n_codewords=32, n_iter=1, seed=0).fit(LEARN)
    build_index(tmp_path / "a.ock", q, BASE)
    meta, sections, user = parts_of(tmp_path / "a.ock")
    path = write_parts(tmp_path / "b.ock", meta, {**sections, "code_blocks": np.zeros((3, 64), np.uint8)}, user,
                       minor=3)
    expect_format_error(path, "unexpected section", "code_blocks")


# ------------------------------------------------------------------------------------------------- F3 at verify

def _flip_word(blocks, row, w, value):
    """A copy of one run's blocks with word w of ``row`` set to ``value`` (0..15)."""
    blocks = blocks.copy()
    b, i = divmod(row, BLOCK)
    shift = 4 * (i // 16)
    byte = int(blocks[b, 16 * w + i % 16])
    blocks[b, 16 * w + i % 16] = (byte & (0xFF ^ (15 << shift))) | (value << shift)
    return blocks


def test_words_above_k_found_by_verify_and_never_returned_F3(tmp_path, models):
    q = models["pq"]  # K = 8: words 8..15 cannot occur
    build_index(tmp_path / "a.ock", q, BASE, np.arange(77) + 100)
    meta, sections, user = parts_of(tmp_path / "a.ock")
    bad_row = 45
    blocks = _flip_word(sections["code_blocks"], bad_row, 1, 13)
    path = write_parts(tmp_path / "bad.ock", meta, {**sections, "code_blocks": blocks}, user)
    message = expect_format_error(path, "code out of range", "code_blocks", when="verify")
    assert f"row {bad_row}" in message
    with open_index(path) as index:
        for distance in ("adc", "sdc"):
            for threads in (1, 2):
                D, I = index.search(np.repeat(QUERIES, 3, axis=0), 77, distance=distance, n_threads=threads)
                assert (bad_row + 100) not in I and (I[:, :76] >= 0).all() and np.isfinite(D[:, :76]).all()


@pytest.mark.parametrize("where", ["row-past-end", "pad-column"])
def test_non_zero_padding_found_by_verify_F3(tmp_path, models, where):
    q = models["pq"]  # W = 3: a pad column
    build_index(tmp_path / "a.ock", q, BASE)
    meta, sections, user = parts_of(tmp_path / "a.ock")
    row, w = (77 + 5, 0) if where == "row-past-end" else (10, 3)
    blocks = _flip_word(sections["code_blocks"], row, w, 1)
    path = write_parts(tmp_path / "bad.ock", meta, {**sections, "code_blocks": blocks}, user)
    message = expect_format_error(path, "non-zero block padding", "code_blocks", when="verify")
    assert f"block {row // BLOCK}" in message
    with open_index(path) as index:  # the padding is never read as a row
        D, I = index.search(QUERIES, 80)
        assert sorted(I[0, :77].tolist()) == list(range(77)) and (I[:, 77:] == -1).all()


def test_writers_are_canonical_whatever_the_chunks_F4(tmp_path, models):
    ivf = models["ivf"]
    build_index(tmp_path / "a.ock", ivf, BASE, np.arange(77) * 2, norm_encoding="f32")
    with IndexWriter(tmp_path / "b.ock", ivf, norm_encoding="f32") as writer:
        for start, stop in ((0, 1), (1, 33), (33, 34), (34, 77)):
            writer.add(BASE[start:stop], np.arange(start, stop) * 2)
    assert (tmp_path / "a.ock").read_bytes() == (tmp_path / "b.ock").read_bytes()


def test_new_codes_must_fit_four_bits(models):
    q = models["ockm"]
    codes = q.encode(BASE[:5])
    codes[2, 3] = 16
    with pytest.raises(ValueError, match="codes: row 2 holds a word >= 16"):
        ockstore.Index(q, codes, np.zeros(5, np.uint8), None, "u8")
