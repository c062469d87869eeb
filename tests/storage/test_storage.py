"""Tests of the file container (the package ockstore/storage/) against its specification, docs/FORMAT.md.

Every rule R1-R24 of the specification is cited by at least one test below (in its name or docstring). Corrupt files
are built by hand with struct + msgpack (``hand_file``), independently of the writer; the writer's output is checked
against the same hand-built bytes.
"""

import os
import stat
import struct
import sys
import zlib
from pathlib import Path

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ockstore import storage
from ockstore.errors import FormatError
from ockstore.storage import MAGIC, MAX_HEADER_BYTES, FileWriter, open_file
import helpers
from helpers import (align64, returns_within, code_of, hand_file, header_end_of, header_of, is_hidden_temp, listing, read_cost,
                     run_json_script, run_script_until_sigkill, write_sparse)

HERE = Path(__file__).resolve().parent
DTYPES = ["<u1", "<u2", "<i4", "<u4", "<i8", "<f4", "<f8", "<f2"]


# --------------------------------------------------------------------------------------------------------------------
# helpers


def canonical(value):
    """Metadata with map keys sorted, as the writer stores it (R20)."""
    if isinstance(value, dict):
        return {k: canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def save(tmp_path, data, name="f.ock"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def small_sections():
    """Two small sections: 'a' (3, 4) float32 and 'b' (5, 8) uint8."""
    return [("a", np.arange(12, dtype="<f4").reshape(3, 4)), ("b", np.arange(40, dtype="<u1").reshape(5, 8))]


def expect_format_error(path, check, section=None, *, when="open"):
    """open_file (and, for when="verify", verify) must raise FormatError naming the file, the check and section."""
    return helpers.expect_format_error(open_file, path, check, section, when=when)


def write_file(path, sections=(), growing=(), meta=None, user=None):
    """Write with FileWriter: ``sections`` [(name, array)], ``growing`` [(name, dtype, row_shape, [chunks])]."""
    with FileWriter(path) as w:
        for name, array in sections:
            w.put(name, array)
        for name, dtype, row_shape, chunks in growing:
            w.declare_growing(name, dtype, row_shape)
            for chunk in chunks:
                w.append(name, chunk)
        w.commit({} if meta is None else meta, user)
    return path


# --------------------------------------------------------------------------------------------------------------------
# round trips


def test_constants_match_the_specification_R1_R2_R6_R11():
    """R1, R2, R6, R11: the module's constants are the specification's."""
    assert storage.MAGIC == b"\x89OCK\r\n\x1a\n" and storage.PREAMBLE_SIZE == 24
    assert storage.FORMAT_VERSION == (1, 2) and storage.MAX_HEADER_BYTES == 16 * 1024 * 1024
    assert storage.DTYPES == tuple(DTYPES) and storage.ALIGNMENT == 64
    assert storage.MAX_NAME_LENGTH == 255 and storage.MAX_NDIM == 32


def test_writer_writes_the_lowest_minor_version_R4(tmp_path):
    """R4: a file says 1.0 unless it uses something of 1.1 (a float16 section, or a caller asking for 1.1)."""
    for sections, minor, expected in [({"a": np.zeros(3, "<f4")}, 0, (1, 0)),
                                      ({"a": np.zeros(3, "<f2")}, 0, (1, 1)),
                                      ({"a": np.zeros(3, "<u1")}, 1, (1, 1))]:
        path = tmp_path / f"v{len(list(tmp_path.iterdir()))}.ock"
        with FileWriter(path, minor_version=minor) as w:
            for name, arr in sections.items():
                w.put(name, arr)
            w.commit({})
        with storage.open_file(path) as mf:
            assert mf.version == expected
    with pytest.raises(ValueError, match="minor_version"):
        FileWriter(tmp_path / "x.ock", minor_version=storage.FORMAT_VERSION[1] + 1)


def test_round_trip_every_dtype_fixed_and_growing_R19(tmp_path):
    """R19, R11: every whitelisted dtype, as a fixed section and as a growing one, comes back equal and read-only."""
    rng = np.random.default_rng(0)
    fixed, growing, expected = [], [], {}
    for code in DTYPES:
        dt = np.dtype(code)
        if dt.kind == "f":
            values = rng.standard_normal((3, 5)).astype(dt)
            values[0, :3] = [np.finfo(dt).max, np.finfo(dt).tiny, -0.0]
        else:
            info = np.iinfo(dt)
            values = rng.integers(info.min, info.max, size=(3, 5), dtype=dt, endpoint=True)
            values[0, :2] = [info.min, info.max]
        fixed.append((f"fixed{code}", values))
        expected[f"fixed{code}"] = values
        rows = np.concatenate([values, values[::-1]]).reshape(6, 5)
        chunks = [rows[:2], rows[2:2], rows[2:5], rows[5:]]  # a zero-row chunk in the middle
        growing.append((f"grow{code}", code, (5,), chunks))
        expected[f"grow{code}"] = rows
    path = write_file(tmp_path / "f.ock", fixed, growing, meta={"n": 6})
    with open_file(path) as f:
        assert list(f.sections) == [name for name, _ in fixed] + [g[0] for g in growing]
        for name, want in expected.items():
            got = f.sections[name]
            assert got.dtype == want.dtype and got.shape == want.shape
            assert got.tobytes() == want.tobytes()  # bit-exact, -0.0 included
            assert not got.flags.writeable
            assert f.section_info(name)["dtype"] == code_of(want)
        f.verify()
        assert f.meta == {"n": 6} and f.user == {} and f.version == (1, 1)  # it holds float16 sections


def test_empty_scalar_and_zero_row_sections_R11_R12(tmp_path):
    """R11, R12: empty arrays (also with huge dimensions), 0-d arrays and growing sections with zero rows."""
    sections = [("empty", np.zeros(0, "<i8")), ("empty2d", np.zeros((0, 7), "<f4")), ("cols0", np.zeros((3, 0), "<u2")),
                ("scalar", np.array(7.5, "<f8")), ("huge_empty", np.zeros((0, 2**40), "<u1")),
                ("after", np.arange(3, dtype="<u4"))]
    growing = [("never", "<u1", (8,), []), ("zero_chunks", "<f4", (2, 3), [np.zeros((0, 2, 3), "<f4")] * 3),
               ("last_empty", "<i4", (), [])]
    path = write_file(tmp_path / "f.ock", sections, growing)
    data = path.read_bytes()
    with open_file(path) as f:
        for name, array in sections:
            assert f.sections[name].shape == array.shape
            assert f.sections[name].tobytes() == array.tobytes()
        assert f.sections["never"].shape == (0, 8)
        assert f.sections["zero_chunks"].shape == (0, 2, 3)
        assert f.sections["last_empty"].shape == (0,)
        for name in f.sections:
            info = f.section_info(name)
            assert info["offset"] % 64 == 0 and info["offset"] >= header_end_of(data)
        assert f.section_info("scalar")["length"] == 8 and f.sections["scalar"][()] == 7.5
        assert f.section_info("empty")["crc32"] == 0
        # R16: the last section is empty, so the file ends at its (aligned) offset.
        assert len(data) == f.section_info("last_empty")["offset"]
        f.verify()


def test_file_without_sections_ends_after_header_R16(tmp_path):
    """R16: with no sections the file ends right after the header."""
    path = write_file(tmp_path / "f.ock", meta={"k": 1})
    data = path.read_bytes()
    assert len(data) == header_end_of(data)
    with open_file(path) as f:
        assert dict(f.sections) == {} and f.meta == {"k": 1}
        f.verify()


def test_little_endian_c_order_on_disk_R19(tmp_path):
    """R19: section bytes are little-endian, C order, at the offset the header gives."""
    values = np.array([[0x0102, 0x0304], [0x0506, 0x0708]], dtype="<u2")
    path = write_file(tmp_path / "f.ock", [("v", values), ("w", np.array([1.0], "<f8"))])
    data = path.read_bytes()
    with open_file(path) as f:
        offset = f.section_info("v")["offset"]
        assert data[offset:offset + 8] == bytes([2, 1, 4, 3, 6, 5, 8, 7])
        offset = f.section_info("w")["offset"]
        assert data[offset:offset + 8] == struct.pack("<d", 1.0)


def test_unicode_names_and_metadata_round_trip_R24(tmp_path):
    """R24: every allowed metadata type round-trips, unicode and extremes included."""
    meta = {"méthode": "OCKM", "P": 128, "params": {"n_subspaces": 4, "beam": [10, 20], "tol": 1e-4},
            "big": 2**64 - 1, "small": -(2**63), "none": None, "flags": [True, False], "blob": b"\x00\xff",
            "inf": float("inf"), "nested": [[{"ключ": ["値", {"": []}]}]]}
    user = {"описание": "データ 🚀", "empty": {}}
    name = "коды/ü🚀"
    path = write_file(tmp_path / "f.ock", [(name, np.arange(4, dtype="<u1"))], meta=meta, user=user)
    with open_file(path) as f:
        assert f.meta == meta and f.user == user
        assert list(f.sections) == [name]
        assert type(f.meta["blob"]) is bytes and type(f.meta["big"]) is int


def test_views_are_read_only_R19(tmp_path):
    """R19: views cannot be written to, nor made writeable."""
    path = write_file(tmp_path / "f.ock", small_sections())
    with open_file(path) as f:
        view = f.sections["a"]
        with pytest.raises(ValueError):
            view[0, 0] = 1.0
        with pytest.raises(ValueError):
            view.setflags(write=True)
        with pytest.raises(TypeError):
            f.sections["new"] = view  # the mapping itself is read-only


def test_identical_input_gives_identical_bytes_R20(tmp_path):
    """R20: same input, same bytes: however the metadata dicts are ordered and however the rows are chunked."""
    rows = np.arange(600, dtype="<i4").reshape(100, 6)
    a = write_file(tmp_path / "a.ock", small_sections(), [("g", "<i4", (6,), [rows])],
                   meta={"z": 1, "a": {"y": 2, "b": 3}}, user={"u": "v", "c": None})
    chunks = [rows[:1], rows[1:1], rows[1:60], rows[60:]]
    b = write_file(tmp_path / "b.ock", small_sections(), [("g", "<i4", (6,), chunks)],
                   meta={"a": {"b": 3, "y": 2}, "z": 1}, user={"c": None, "u": "v"})
    assert a.read_bytes() == b.read_bytes()


def test_writer_matches_hand_built_bytes_R20_R2_R5(tmp_path):
    """R20, R2, R5: the writer's bytes equal the specification's layout built by hand (sorted keys, canonical
    offsets, zero padding, reserved 0, H exact)."""
    meta = {"zeta": [1, 2], "alpha": {"k": "v", "b": b"x"}}
    arrays = small_sections() + [("c", np.array([1.5, -2.0], "<f8")), ("d", np.zeros((0, 3), "<u4"))]
    path = write_file(tmp_path / "f.ock", arrays, meta=meta, user={"y": 1, "x": 2})
    assert path.read_bytes() == hand_file(arrays, canonical(meta), canonical({"y": 1, "x": 2}))
    magic, major, minor, reserved, length = struct.unpack_from("<8sHHIQ", path.read_bytes())
    assert (magic, major, minor, reserved) == (MAGIC, 1, 0, 0)
    header = msgpack.unpackb(path.read_bytes()[24:24 + length])
    assert list(header) == ["meta", "sections", "user"]
    assert list(header["sections"][0]) == ["crc32", "dtype", "length", "name", "offset", "shape"]
    assert list(header["meta"]) == ["alpha", "zeta"] and list(header["meta"]["alpha"]) == ["b", "k"]


@pytest.mark.parametrize("first", [10, 65_400, 65_500, 65_536, 4_294_967_296 // 65_536])
def test_header_offsets_fixed_point_R20(tmp_path, first):
    """R20: offsets around msgpack's integer width boundaries (uint16 -> uint32) still give the canonical layout."""
    arrays = [("a", np.zeros(first, "<u1")), ("b", np.ones(3, "<u1")), ("c", np.ones(1, "<u1"))]
    path = write_file(tmp_path / "f.ock", arrays)
    assert path.read_bytes() == hand_file(arrays)
    with open_file(path) as f:
        f.verify()


metadata_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.text(max_size=6)
    | st.binary(max_size=6),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=10)
section_specs = st.lists(st.tuples(st.text(min_size=1, max_size=8), st.sampled_from(DTYPES),
                                   st.lists(st.integers(0, 4), max_size=3), st.booleans(), st.integers(0, 3)),
                         max_size=5, unique_by=lambda s: s[0])


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=section_specs, meta=st.dictionaries(st.text(max_size=5), metadata_values, max_size=4),
       user=st.dictionaries(st.text(max_size=5), metadata_values, max_size=3), seed=st.integers(0, 2**32 - 1))
def test_round_trip_property_R19_R20(tmp_path, specs, meta, user, seed):
    """R19, R20, R24: random sections (fixed or growing, random chunking) and metadata round-trip, and the writer's
    bytes equal the hand-built ones."""
    rng = np.random.default_rng(seed)
    path = tmp_path / "p.ock"
    arrays = []
    with FileWriter(path) as w:
        for name, code, shape, grow, n_chunks in specs:
            dt = np.dtype(code)
            array = np.frombuffer(rng.bytes(int(np.prod(shape, dtype=np.int64)) * dt.itemsize), dtype=dt).reshape(shape)
            if grow and shape:
                w.declare_growing(name, code, shape[1:])
                cuts = np.sort(rng.integers(0, shape[0] + 1, size=n_chunks))
                for chunk in np.split(array, cuts):
                    w.append(name, chunk)
            else:
                w.put(name, array)
            arrays.append((name, array))
        w.commit(meta, user)
    minor = 1 if any(a.dtype == np.float16 for _, a in arrays) else 0  # R4: float16 came with format 1.1
    assert path.read_bytes() == hand_file(arrays, canonical(meta), canonical(user), minor=minor)
    with open_file(path) as f:
        assert f.meta == meta and f.user == user
        for name, array in arrays:
            got = f.sections[name]
            assert got.shape == array.shape and got.dtype == array.dtype and got.tobytes() == array.tobytes()
        f.verify()


# --------------------------------------------------------------------------------------------------------------------
# hand-written corrupt files: the preamble


@pytest.mark.parametrize("size", [0, 1, 23])
def test_file_too_small_R2(tmp_path, size):
    """R2: fewer than 24 bytes."""
    path = save(tmp_path, hand_file(small_sections())[:size])
    expect_format_error(path, "file too small")


def test_bad_magic_R1(tmp_path):
    """R1: any other first 8 bytes, a text-mode mangled magic included (with a hint)."""
    good = hand_file(small_sections())
    path = save(tmp_path, b"PK\x03\x04" + good[4:])
    expect_format_error(path, "bad magic")
    mangled = good[:4] + b"\n\x1a\n" + good[7:]  # \r\n -> \n, one byte shorter, as a text-mode copy does
    message = expect_format_error(save(tmp_path, mangled, "m.ock"), "bad magic")
    assert "text mode" in message
    path = save(tmp_path, hand_file(small_sections(), magic=b"\x89OCK\r\n\x1a\x00"), "z.ock")
    expect_format_error(path, "bad magic")


@pytest.mark.parametrize("major, minor", [(2, 0), (0, 9), (65535, 3)])
def test_unknown_major_version_refused_R3(tmp_path, major, minor):
    """R3: the message gives the file's version and the supported one."""
    path = save(tmp_path, hand_file(small_sections(), major=major, minor=minor))
    message = expect_format_error(path, "unsupported version")
    assert f"{major}.{minor}" in message and "major version 1" in message


@pytest.mark.parametrize("minor", [1, 7, 65535])
def test_unknown_minor_version_accepted_R4(tmp_path, minor):
    """R4: any minor of major 1 is accepted (and reported)."""
    path = save(tmp_path, hand_file(small_sections(), minor=minor))
    with open_file(path) as f:
        assert f.version == (1, minor)
        f.verify()


def test_reserved_field_ignored_R5(tmp_path):
    """R5: readers ignore the reserved field (writers write 0: see test_writer_matches_hand_built_bytes_R20_R2_R5)."""
    path = save(tmp_path, hand_file(small_sections(), reserved=0xDEADBEEF))
    with open_file(path) as f:
        f.verify()
        np.testing.assert_array_equal(f.sections["b"], small_sections()[1][1])


# --------------------------------------------------------------------------------------------------------------------
# the header length and encoding


@pytest.mark.parametrize("length", [MAX_HEADER_BYTES + 1, 2**63, 2**64 - 1])
def test_header_too_large_checked_before_parsing_R6(tmp_path, length):
    """R6: H above the limit is refused from the preamble alone (the file is tiny: not "beyond end of file")."""
    path = save(tmp_path, hand_file(small_sections(), header_length=length))
    expect_format_error(path, "header too large")


def test_header_beyond_end_of_file_R6(tmp_path):
    """R6: 24 + H beyond the file size."""
    data = hand_file(meta={"k": 1})
    path = save(tmp_path, hand_file(meta={"k": 1}, header_length=len(data) - 24 + 1))
    expect_format_error(path, "header beyond end of file")
    path = save(tmp_path, data[:-1], "cut.ock")  # a truncated header, same check
    expect_format_error(path, "header beyond end of file")


def test_header_of_exactly_max_size_accepted_and_one_more_refused_R6(tmp_path):
    """R6: the writer accepts a header of exactly MAX_HEADER_BYTES (and the reader opens it); one byte more is a
    ValueError before any file is created."""
    probe = write_file(tmp_path / "probe.ock", meta={"blob": bytes(70_000)})
    overhead = header_end_of(probe.read_bytes()) - 24 - 70_000
    probe.unlink()
    path = tmp_path / "f.ock"
    write_file(path, meta={"blob": bytes(MAX_HEADER_BYTES - overhead)})
    assert header_end_of(path.read_bytes()) - 24 == MAX_HEADER_BYTES
    with open_file(path) as f:
        assert len(f.meta["blob"]) == MAX_HEADER_BYTES - overhead
    path.unlink()
    with pytest.raises(ValueError, match="MAX_HEADER_BYTES"):
        write_file(path, [("a", np.zeros(3, "<u1"))], meta={"blob": bytes(MAX_HEADER_BYTES - overhead + 1)})
    assert listing(tmp_path) == []


NOT_MSGPACK = {
    "empty": b"",
    "reserved byte 0xc1": b"\xc1",
    "truncated map": b"\x82\xa1a\x01",
    "extra data": msgpack.packb({"sections": [], "meta": {}, "user": {}}) + b"\xc0",
    "invalid utf-8": b"\x81\xa1a\xa2\xff\xfe",
    "duplicate key": b"\x82\xa4meta\x80\xa4meta\x80",
    "bytes key": b"\x81\xc4\x04meta\x80",
    "int key": b"\x81\x01\x80",
    "extension type": b"\x81\xa4meta\xd6\x05\x00\x00\x00\x01",
    "timestamp in map": b"\x81\xa4meta\xd6\xff\x00\x00\x00\x01",
    "timestamp in list": b"\x81\xa8sections\x91\xd6\xff\x00\x00\x00\x01",
    "deep nesting": b"\x91" * 100_000 + b"\xc0",
    "huge array length": b"\xdd\xff\xff\xff\xff",
    "huge str length": b"\xdb\xff\xff\xff\xff",
    "huge map length": b"\xdf\xff\xff\xff\xff\xa1a",
}


@pytest.mark.parametrize("case", list(NOT_MSGPACK))
def test_header_not_valid_msgpack_R7(tmp_path, case):
    """R7: anything that is not exactly one msgpack object of the header profile."""
    path = save(tmp_path, hand_file(header_bytes=NOT_MSGPACK[case]))
    expect_format_error(path, "header not valid msgpack")


# --------------------------------------------------------------------------------------------------------------------
# the header's structure


BAD_TOP = {
    "not a map (list)": dict(header_obj=[1, 2]),
    "not a map (int)": dict(header_obj=5),
    "not a map (nil)": dict(header_obj=None),
    "missing sections": dict(header_obj={"meta": {}, "user": {}}),
    "missing meta": dict(header_obj={"sections": [], "user": {}}),
    "missing user": dict(header_obj={"sections": [], "meta": {}}),
    "sections is a map": dict(header_obj={"sections": {}, "meta": {}, "user": {}}),
    "meta is a list": dict(header_obj={"sections": [], "meta": [], "user": {}}),
    "user is a str": dict(header_obj={"sections": [], "meta": {}, "user": "x"}),
}


@pytest.mark.parametrize("case", list(BAD_TOP))
def test_bad_header_top_level_R8(tmp_path, case):
    """R8: the header is a map with sections (array), meta (map), user (map)."""
    path = save(tmp_path, hand_file(**BAD_TOP[case]))
    expect_format_error(path, "bad header")


BAD_ENTRY = {  # (override of section "b", or None to replace the entry) -> what the message must name
    "entry is an int": ("#1", None),
    "name missing": ("#1", {"drop": ["name"]}),
    "name is an int": ("#1", {"name": 7}),
    "name is bytes": ("#1", {"name": b"b"}),
    "name is empty": ("#1", {"name": ""}),
    "name has 256 characters": ("#1", {"name": "n" * 256}),
    "dtype missing": ("'b'", {"drop": ["dtype"]}),
    "shape missing": ("'b'", {"drop": ["shape"]}),
    "offset missing": ("'b'", {"drop": ["offset"]}),
    "length missing": ("'b'", {"drop": ["length"]}),
    "crc32 missing": ("'b'", {"drop": ["crc32"]}),
    "dtype float16 in a 1.0 file": ("'b'", {"dtype": "<f2"}),  # float16 came with format 1.1
    "dtype big-endian": ("'b'", {"dtype": ">u4"}),
    "dtype without byte order": ("'b'", {"dtype": "u1"}),
    "dtype numpy name": ("'b'", {"dtype": "uint8"}),
    "dtype |u1": ("'b'", {"dtype": "|u1"}),
    "dtype not a str": ("'b'", {"dtype": 1}),
    "shape is an int": ("'b'", {"shape": 40}),
    "shape is a str": ("'b'", {"shape": "5,8"}),
    "shape negative": ("'b'", {"shape": [-5, -8]}),
    "shape bool": ("'b'", {"shape": [True, 40]}),
    "shape float": ("'b'", {"shape": [5.0, 8]}),
    "shape nil": ("'b'", {"shape": [None]}),
    "shape 33 dimensions": ("'b'", {"shape": [40] + [1] * 32}),
    "shape too large for numpy": ("'b'", {"shape": [0, 2**62, 4]}),
    "offset negative": ("'b'", {"offset": -64}),
    "offset bool": ("'b'", {"offset": True}),
    "offset float": ("'b'", {"offset": 128.0}),
    "length str": ("'b'", {"length": "40"}),
    "length negative": ("'b'", {"length": -1}),
    "crc32 2**32": ("'b'", {"crc32": 2**32}),
    "crc32 negative": ("'b'", {"crc32": -1}),
    "crc32 bool": ("'b'", {"crc32": False}),
    "crc32 nil": ("'b'", {"crc32": None}),
}


@pytest.mark.parametrize("case", list(BAD_ENTRY))
def test_bad_section_entry_R9_R10_R11(tmp_path, case):
    """R9 (keys and types), R10 (name: str of 1-255 characters), R11 (dtype whitelist, shape of at most 32
    non-negative ints that NumPy can represent). The message names the section (or its index)."""
    named, change = BAD_ENTRY[case]
    if change is None:
        sections = small_sections()
        data = hand_file(sections, overrides={"b": {}})
        header = header_of(data)
        header["sections"][1] = 12
        data = hand_file(sections, header_obj=header)
    else:
        change = dict(change)
        drop = change.pop("drop", [])
        data = hand_file(small_sections(), overrides={"b": change}, drop={"b": drop})
    message = expect_format_error(save(tmp_path, data), "bad header")
    assert (f"section {named}" if named.startswith("#") else f"section {named}") in message


@pytest.mark.parametrize("shape", [[0, 2**62, 4], [0, 2**63 - 1, 2**63 - 1], [0] * 33, [2**64 - 1, 0]])
def test_empty_section_with_unrepresentable_shape_R11(tmp_path, shape):
    """R11: an empty section's shape must still be one NumPy can represent (else the view could not be made)."""
    data = hand_file(small_sections() + [("e", np.zeros(0, "<f8"))], overrides={"e": {"shape": shape}})
    expect_format_error(save(tmp_path, data), "bad header", "e")


def test_empty_section_with_largest_representable_shape_accepted_R11(tmp_path):
    """R11: the bound is exactly NumPy's: non-zero dimensions times itemsize up to 2**63 - 1."""
    data = hand_file(small_sections() + [("e", np.zeros(0, "<u1"))], overrides={"e": {"shape": [0, 2**63 - 1]}})
    with open_file(save(tmp_path, data)) as f:
        assert f.sections["e"].shape == (0, 2**63 - 1)
        f.verify()


def test_section_name_of_255_characters_accepted_R10(tmp_path):
    """R10: 255 characters is the limit, on both sides."""
    name = "é" * 255
    path = write_file(tmp_path / "f.ock", [(name, np.zeros(2, "<u1"))])
    assert path.read_bytes() == hand_file([(name, np.zeros(2, "<u1"))])
    with open_file(path) as f:
        assert list(f.sections) == [name]


def test_duplicate_section_name_R10(tmp_path):
    """R10: names are unique in the file."""
    a, b = small_sections()
    data = hand_file([a, ("a", b[1])])
    message = expect_format_error(save(tmp_path, data), "duplicate section name", "a")
    assert "more than once" in message


def test_unknown_header_keys_and_sections_accepted_R8_R9(tmp_path):
    """R8, R9: unknown top-level keys and unknown section-map keys are ignored; an unknown section is exposed."""
    sections = small_sections() + [("zz_future_section", np.ones(3, "<f8"))]
    data = hand_file(sections, meta={"m": 1}, overrides={"a": {"compression": "none", "zz": [1, {"x": None}]}},
                     extra={"future": {"nested": [1, 2]}, "checksum_kind": "crc32c"})
    with open_file(save(tmp_path, data)) as f:
        assert list(f.sections) == ["a", "b", "zz_future_section"]
        assert f.meta == {"m": 1}
        assert set(f.section_info("a")) == {"dtype", "shape", "offset", "length", "crc32"}
        np.testing.assert_array_equal(f.sections["a"], sections[0][1])
        f.verify()


# --------------------------------------------------------------------------------------------------------------------
# the placement of sections


def test_misaligned_section_R12(tmp_path):
    """R12: offsets are multiples of 64, zero-length sections included."""
    base = hand_file(small_sections())
    with open_file(save(tmp_path, base, "ok.ock")) as f:
        offset_b = f.section_info("b")["offset"]
    expect_format_error(save(tmp_path, hand_file(small_sections(), overrides={"b": {"offset": offset_b + 8}})),
                        "misaligned section", "b")
    empty = small_sections() + [("e", np.zeros(0, "<u1"))]
    end = len(hand_file(empty))
    data = hand_file(empty, overrides={"e": {"offset": end - 1}})
    expect_format_error(save(tmp_path, data, "e.ock"), "misaligned section", "e")


def test_section_overlaps_header_R12(tmp_path):
    """R12: no section starts before the end of the header, zero-length sections included."""
    expect_format_error(save(tmp_path, hand_file(small_sections(), overrides={"a": {"offset": 0}})),
                        "section overlaps header", "a")
    data = hand_file(small_sections() + [("e", np.zeros(0, "<u1"))], overrides={"e": {"offset": 64}})
    expect_format_error(save(tmp_path, data, "e.ock"), "section overlaps header", "e")


def test_section_beyond_end_of_file_R13(tmp_path):
    """R13: offset + length within the file; no 64-bit overflow, zero-length sections included."""
    cases = {"length": {"b": {"length": 41, "shape": [41]}}, "huge offset": {"b": {"offset": 2**64 - 64}},
             "huge length": {"b": {"length": 2**64 - 1}}}
    for i, overrides in enumerate(cases.values()):
        expect_format_error(save(tmp_path, hand_file(small_sections(), overrides=overrides), f"{i}.ock"),
                            "section beyond end of file", "b")
    expect_format_error(save(tmp_path, hand_file(small_sections())[:-1], "cut.ock"), "section beyond end of file", "b")
    empty = small_sections() + [("e", np.zeros(0, "<u1"))]
    data = hand_file(empty, overrides={"e": {"offset": align64(len(hand_file(empty)) + 1)}})
    expect_format_error(save(tmp_path, data, "e.ock"), "section beyond end of file", "e")


def test_section_size_mismatch_R11(tmp_path):
    """R11: length == prod(shape) * itemsize, computed without overflow."""
    expect_format_error(save(tmp_path, hand_file(small_sections(), overrides={"a": {"length": 44}})),
                        "section size mismatch", "a")
    expect_format_error(save(tmp_path, hand_file(small_sections(), overrides={"a": {"shape": [4, 4]}}), "s.ock"),
                        "section size mismatch", "a")
    expect_format_error(save(tmp_path, hand_file(small_sections(), overrides={"a": {"dtype": "<f8"}}), "d.ock"),
                        "section size mismatch", "a")
    # 2**30 * 2**30 * 4 bytes overflows 32-bit arithmetic; the message gives the exact product.
    message = expect_format_error(
        save(tmp_path, hand_file(small_sections(), overrides={"a": {"shape": [2**30, 2**30]}}), "o.ock"),
        "section size mismatch", "a")
    assert str(2**62) in message


def test_overlapping_sections_R14(tmp_path):
    """R14: in offset order, no section starts inside the previous one."""
    big = [("a", np.arange(64, dtype="<f4")), ("b", np.arange(16, dtype="<u1"))]
    with open_file(save(tmp_path, hand_file(big), "ok.ock")) as f:
        offset_a = f.section_info("a")["offset"]
    expect_format_error(save(tmp_path, hand_file(big, overrides={"b": {"offset": offset_a + 64}})),
                        "overlapping sections", "b")
    message = expect_format_error(save(tmp_path, hand_file(big, overrides={"b": {"offset": offset_a}}), "same.ock"),
                                  "overlapping sections", "a")  # sorted by (offset, length): b then a
    assert "section 'b'" in message


def test_gap_before_section_R15(tmp_path):
    """R15: only alignment padding (< 64 bytes) between the header and the first section, and between sections."""
    sections = small_sections()
    with open_file(save(tmp_path, hand_file(sections), "ok.ock")) as f:
        offset_a, offset_b = f.section_info("a")["offset"], f.section_info("b")["offset"]
    data = hand_file(sections, overrides={"b": {"offset": offset_b + 64}}, tail=bytes(64))
    expect_format_error(save(tmp_path, data), "gap before section", "b")
    with open_file(save(tmp_path, hand_file([sections[0]]), "ok1.ock")) as f:
        offset_a = f.section_info("a")["offset"]
    data = hand_file([sections[0]], overrides={"a": {"offset": offset_a + 64}}, tail=bytes(64))
    expect_format_error(save(tmp_path, data, "first.ock"), "gap before section", "a")


@pytest.mark.parametrize("tail", [b"\x00", bytes(63), bytes(64), b"garbage"])
def test_trailing_bytes_R16(tmp_path, tail):
    """R16: the file ends right after the last section: no padding, no extra byte."""
    expect_format_error(save(tmp_path, hand_file(small_sections(), tail=tail)), "trailing bytes", "b")
    message = expect_format_error(save(tmp_path, hand_file(meta={"k": 1}, tail=tail), "none.ock"), "trailing bytes")
    assert "the header" in message


def test_sections_listed_out_of_file_order_accepted_R14(tmp_path):
    """R14, R15: readers sort by offset; the header's list order does not matter."""
    data = hand_file(small_sections())
    header = header_of(data)
    header["sections"].reverse()
    swapped = hand_file(small_sections(), header_obj=header)
    with open_file(save(tmp_path, swapped)) as f:
        assert list(f.sections) == ["b", "a"]
        np.testing.assert_array_equal(f.sections["a"], small_sections()[0][1])
        f.verify()


# --------------------------------------------------------------------------------------------------------------------
# verify: padding and CRC


def test_non_zero_padding_found_by_verify_R17(tmp_path):
    """R17: padding after the header and between sections must be zero; verify checks it, open does not."""
    data = hand_file(small_sections())
    end = header_end_of(data)
    with open_file(save(tmp_path, data, "ok.ock")) as f:
        offset_a, end_a = f.section_info("a")["offset"], f.section_info("a")["offset"] + 48
        offset_b = f.section_info("b")["offset"]
    assert end < offset_a and end_a < offset_b  # both paddings exist in this layout
    for i, position in enumerate([end, offset_a - 1, end_a, offset_b - 1]):
        mutated = bytearray(data)
        mutated[position] = 0x20
        path = save(tmp_path, bytes(mutated), f"{i}.ock")
        with open_file(path) as f:  # opening does not look at padding
            np.testing.assert_array_equal(f.sections["b"], small_sections()[1][1])
        expect_format_error(path, "non-zero padding", "a" if position < offset_a else "b", when="verify")


def test_crc_mismatch_found_by_verify_only_R18(tmp_path):
    """R18: a changed section byte opens fine (and is visible) but verify names the section."""
    data = hand_file(small_sections())
    with open_file(save(tmp_path, data, "ok.ock")) as f:
        offset_b = f.section_info("b")["offset"]
        assert f.section_info("b")["crc32"] == zlib.crc32(np.arange(40, dtype="<u1").tobytes())
    mutated = bytearray(data)
    mutated[offset_b + 39] ^= 0x01
    path = save(tmp_path, bytes(mutated))
    with open_file(path) as f:
        assert f.sections["b"][4, 7] == 38
        with pytest.raises(FormatError, match=r"CRC mismatch: section 'b'"):
            f.verify()
    # A wrong CRC in the header, and a non-zero CRC on an empty section.
    expect_format_error(save(tmp_path, hand_file(small_sections(), overrides={"a": {"crc32": 12345}}), "h.ock"),
                        "CRC mismatch", "a", when="verify")
    data = hand_file(small_sections() + [("e", np.zeros(0, "<f4"))], overrides={"e": {"crc32": 1}})
    expect_format_error(save(tmp_path, data, "e.ock"), "CRC mismatch", "e", when="verify")


def test_crc_is_zlib_crc32_R18():
    """R18: the CRC is zlib's CRC-32 (check value of CRC-32/ISO-HDLC) and the empty CRC is 0."""
    assert zlib.crc32(b"123456789") == 0xCBF43926 and zlib.crc32(b"") == 0


# --------------------------------------------------------------------------------------------------------------------
# opening costs nothing per byte


def test_open_reads_no_section_bytes_R19(tmp_path):
    """R19: a file claiming a 64 GiB section (sparse) opens reading exactly the preamble and the header: no other
    read, no page of its mapping touched, no allocation to speak of."""
    huge = 2**36
    data = hand_file([("small", np.arange(4, dtype="<u1"))], phantom=[("huge", "<u1", (huge,))])
    path = write_sparse(tmp_path / "huge.ock", data)
    assert header_of(data)["sections"][1]["offset"] + huge == os.stat(path).st_size

    f, cost = read_cost(lambda: open_file(path), path)
    try:
        assert f.sections["huge"].shape == (huge,) and f.sections["huge"].dtype == np.uint8
        assert cost.explicit == header_end_of(data), cost  # the preamble and the header, read once
        if cost.syscalls is not None:
            assert cost.syscalls < 1 << 20, cost  # the preamble, the header and /proc/self/io itself
        if cost.mapped is not None:
            assert cost.mapped == 0, cost  # sections are views that read nothing until used
        assert cost.allocated < 1 << 20, cost
    finally:
        f.close()


def test_open_cost_independent_of_size_R19(tmp_path):
    """R19: a 10-million-row file opens with the same work as a 10-row one (no pass over the data): the same reads
    (the preamble and the header), no page of the mapping touched, the same small allocations. Reading the section
    afterwards does touch its pages (so the measure would see a pass over the data)."""
    small = write_file(tmp_path / "small.ock", growing=[("codes", "<u1", (), [np.zeros(10, "<u1")])])
    rows = np.zeros(1_000_000, "<u1")
    big = write_file(tmp_path / "big.ock", growing=[("codes", "<u1", (), [rows] * 10)])
    costs = {}
    for path in (small, big):
        f, cost = read_cost(lambda: open_file(path), path)
        with f:
            assert cost.explicit == header_end_of(path), cost
            if cost.mapped is not None:
                assert cost.mapped == 0, cost
            assert cost.allocated < 1 << 16, cost
            costs[path] = cost
            if path == big:
                assert f.sections["codes"].shape == (10_000_000,)
                _, touched = read_cost(lambda: int(f.sections["codes"].sum()), path)
                assert touched.mapped is None or touched.mapped >= 10_000_000, touched
    assert abs(costs[big].explicit - costs[small].explicit) < 64, costs
    assert abs(costs[big].allocated - costs[small].allocated) < 1 << 12, costs


# --------------------------------------------------------------------------------------------------------------------
# writer arguments


def test_put_refuses_bad_arguments_R10_R11(tmp_path):
    """R10, R11: the writer refuses invalid names, repeated names and dtypes outside the whitelist."""
    with FileWriter(tmp_path / "f.ock") as w:
        with pytest.raises(TypeError):
            w.put(5, np.zeros(3, "<u1"))
        with pytest.raises(ValueError, match="1 to 255"):
            w.put("", np.zeros(3, "<u1"))
        with pytest.raises(ValueError, match="1 to 255"):
            w.put("x" * 256, np.zeros(3, "<u1"))
        with pytest.raises(ValueError, match="UTF-8"):
            w.put("\ud800", np.zeros(3, "<u1"))
        with pytest.raises(TypeError, match="ndarray"):
            w.put("list", [1, 2, 3])
        for dtype in [">f2", ">f4", ">u2", "?", "O", "<c8", "<i2", "<u8", "U3"]:
            with pytest.raises(TypeError, match="not allowed"):
                w.put("x", np.zeros(2, dtype=dtype))
        w.put("a", np.zeros(3, "<u1"))
        with pytest.raises(ValueError, match="duplicate"):
            w.put("a", np.zeros(3, "<u1"))
        with pytest.raises(ValueError, match="duplicate"):
            w.declare_growing("a", "<u1")
        w.put("strided", np.arange(20, dtype=np.int32)[::2])  # native little-endian, non-contiguous: accepted
        w.put("fortran", np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3)))
        w.commit({})
    with open_file(tmp_path / "f.ock") as f:
        np.testing.assert_array_equal(f.sections["strided"], np.arange(0, 20, 2))
        np.testing.assert_array_equal(f.sections["fortran"], np.arange(6).reshape(2, 3))


def test_growing_sections_refuse_bad_rows(tmp_path):
    """append needs a declared growing section, an ndarray of exactly its dtype and row shape."""
    with FileWriter(tmp_path / "f.ock") as w:
        w.put("fixed", np.zeros(3, "<u1"))
        w.declare_growing("g", "<f4", (2,))
        with pytest.raises(ValueError, match="growing"):
            w.append("nope", np.zeros((1, 2), "<f4"))
        with pytest.raises(ValueError, match="growing"):
            w.append("fixed", np.zeros(3, "<u1"))
        with pytest.raises(TypeError, match="exactly"):
            w.append("g", np.zeros((1, 2), "<f8"))
        with pytest.raises(TypeError, match="exactly"):
            w.append("g", np.zeros((1, 2), ">f4"))
        with pytest.raises(ValueError, match="shape"):
            w.append("g", np.zeros((1, 3), "<f4"))
        with pytest.raises(ValueError, match="shape"):
            w.append("g", np.zeros(2, "<f4"))
        with pytest.raises(TypeError):
            w.append("g", [[1.0, 2.0]])
        with pytest.raises(ValueError):
            w.declare_growing("neg", "<u1", (-1,))
        with pytest.raises(TypeError):
            w.declare_growing("flt", "<u1", (2.0,))
        with pytest.raises(TypeError, match="not allowed"):
            w.declare_growing("bad", "<i2")
        w.append("g", np.arange(8, dtype="<f4").reshape(4, 2)[::2])  # non-contiguous rows are fine
        w.commit({})
    with open_file(tmp_path / "f.ock") as f:
        np.testing.assert_array_equal(f.sections["g"], [[0, 1], [4, 5]])


def test_filled_sections_rows_in_any_order_R18_R20_R21(tmp_path):
    """declare_filled / write_rows: a section of known size written in any order (rows never written are zeros),
    checksummed at commit (R18), the same bytes as the section given whole (R20); its backing file is a hidden
    temporary sibling, removed at commit and on abort (R21). Refused: undeclared names, rows past the end, other
    dtypes or row shapes; append to a filled section."""
    rows = np.arange(40, dtype="<i8").reshape(10, 4)
    order = [7, 2, 9, 0, 4, 1, 8]  # rows 3, 5, 6 never written
    with FileWriter(tmp_path / "f.ock") as w:
        w.declare_filled("f", "<i8", 10, (4,))
        w.declare_filled("empty", "<u1", 0)
        assert sum(is_hidden_temp(name, "f.ock") for name in listing(tmp_path)) == 1  # one backing file
        w.write_rows("f", 5, rows[5:5])  # zero rows: nothing
        for r in order:
            w.write_rows("f", r, rows[r:r + 1])
        w.write_rows("f", 8, rows[8:10])
        with pytest.raises(ValueError, match="beyond"):
            w.write_rows("f", 9, rows[:2])
        with pytest.raises(ValueError, match="filled"):
            w.write_rows("nope", 0, rows[:1])
        with pytest.raises(TypeError, match="exactly"):
            w.write_rows("f", 0, rows[:1].astype("<f8"))
        with pytest.raises(ValueError, match="shape"):
            w.write_rows("f", 0, rows[:1, :3])
        with pytest.raises(ValueError, match="growing"):
            w.append("f", rows[:1])
        w.commit({})
    assert listing(tmp_path) == ["f.ock"]
    expected = rows.copy()
    expected[[3, 5, 6]] = 0
    with open_file(tmp_path / "f.ock") as f:
        f.verify()
        np.testing.assert_array_equal(f.sections["f"], expected)
        assert f.sections["empty"].shape == (0,)
    with FileWriter(tmp_path / "g.ock") as w:
        w.put("f", expected)
        w.put("empty", np.zeros(0, "<u1"))
        w.commit({})
    assert (tmp_path / "f.ock").read_bytes() == (tmp_path / "g.ock").read_bytes()
    with pytest.raises(RuntimeError):
        with FileWriter(tmp_path / "h.ock") as w:
            w.declare_filled("f", "<i8", 10, (4,))
            w.write_rows("f", 0, rows[:3])
            raise RuntimeError("boom")
    assert sorted(listing(tmp_path)) == ["f.ock", "g.ock"]


class Custom:
    pass


def self_referencing_list():
    items = []
    items.append(items)
    return items


def nested_lists(depth):
    value = 1
    for _ in range(depth):
        value = [value]
    return value


BAD_METADATA = {
    "not a dict": [("k", 1)],
    "tuple value": {"shape": (1, 2)},
    "set value": {"s": {1}},
    "numpy int": {"n": np.int64(3)},
    "numpy bool": {"b": np.bool_(True)},
    "numpy array": {"a": np.zeros(2)},
    "object": {"o": Custom()},
    "int too large": {"n": 2**64},
    "int too small": {"n": -(2**63) - 1},
    "int key": {1: "x"},
    "nested int key": {"m": {2: "x"}},
    "lone surrogate": {"s": "\udc80"},
    "lone surrogate key": {"\udc80": 1},
    "bytearray": {"b": bytearray(b"x")},
    "too deep": {"d": nested_lists(70)},
    "cycle": {"c": self_referencing_list()},
}


@pytest.mark.parametrize("case", list(BAD_METADATA))
@pytest.mark.parametrize("which", ["meta", "user"])
def test_bad_metadata_type_error_before_any_file_R24(tmp_path, case, which):
    """R24: metadata that the header cannot hold is a TypeError before any file is created; the writer stays open
    and a corrected commit then works."""
    path = tmp_path / "f.ock"
    with FileWriter(path) as w:
        w.put("a", np.zeros(3, "<u1"))
        with pytest.raises(TypeError):
            if which == "meta":
                w.commit(BAD_METADATA[case])
            else:
                w.commit({}, BAD_METADATA[case])
        assert listing(tmp_path) == []
        w.commit({"ok": True})
    with open_file(path) as f:
        assert f.meta == {"ok": True}


def test_metadata_nesting_limit_R24(tmp_path):
    """R24: 64 levels of maps and lists (meta itself included) are fine, 65 are refused."""
    path = write_file(tmp_path / "f.ock", meta={"d": nested_lists(63)})
    with open_file(path) as f:
        assert f.meta == {"d": nested_lists(63)}
    with FileWriter(tmp_path / "g.ock") as w:
        with pytest.raises(TypeError, match="deeper than 64"):
            w.commit({"d": nested_lists(64)})


def test_oversized_metadata_value_error_before_any_file_R6(tmp_path):
    """R6: a header above MAX_HEADER_BYTES is a ValueError before any file is created (also user metadata)."""
    path = tmp_path / "f.ock"
    with pytest.raises(ValueError, match="MAX_HEADER_BYTES"):
        with FileWriter(path) as w:
            w.put("a", np.zeros(3, "<u1"))
            try:
                w.commit({}, {"notes": "x" * MAX_HEADER_BYTES})
            finally:
                assert listing(tmp_path) == []
    assert listing(tmp_path) == []


# --------------------------------------------------------------------------------------------------------------------
# atomic writes


def test_nothing_under_the_name_before_commit_R21(tmp_path):
    """R21: while writing, the target does not exist; spill files are hidden siblings; commit leaves only the file."""
    path = tmp_path / "index.ock"
    with FileWriter(path) as w:
        w.put("a", np.zeros(3, "<u1"))
        w.declare_growing("g", "<u1", (4,))
        w.append("g", np.zeros((10, 4), "<u1"))
        names = listing(tmp_path)
        assert "index.ock" not in names and names and all(is_hidden_temp(n, "index.ock") for n in names)
        w.commit({})
    assert listing(tmp_path) == ["index.ock"]


def test_exception_in_with_leaves_no_file_and_no_temps_R21(tmp_path):
    """R21: an exception inside the block aborts: no file under the name, no temporary file."""
    path = tmp_path / "f.ock"
    with pytest.raises(RuntimeError, match="boom"):
        with FileWriter(path) as w:
            w.declare_growing("g", "<i8", (2,))
            w.append("g", np.zeros((5, 2), "<i8"))
            assert listing(tmp_path)  # the spill file
            raise RuntimeError("boom")
    assert listing(tmp_path) == []


def test_exception_in_with_keeps_old_file_R21(tmp_path):
    """R21: an aborted write leaves an older file byte for byte."""
    path = write_file(tmp_path / "f.ock", small_sections(), meta={"v": 1})
    old = path.read_bytes()
    with pytest.raises(KeyError):
        with FileWriter(path) as w:
            w.declare_growing("g", "<i8", (2,))
            w.append("g", np.ones((5, 2), "<i8"))
            raise KeyError("x")
    assert path.read_bytes() == old and listing(tmp_path) == ["f.ock"]


def test_leaving_block_without_commit_aborts_R21(tmp_path):
    """R21: a block left normally without commit writes nothing and removes its temporary files."""
    path = tmp_path / "f.ock"
    with FileWriter(path) as w:
        w.declare_growing("g", "<u1")
        w.append("g", np.ones(100, "<u1"))
    assert listing(tmp_path) == [] and w.closed
    with pytest.raises(ValueError, match="closed"):
        w.commit({})


def test_commit_procedure_fsync_rename_fsync_R21(tmp_path, monkeypatch):
    """R21: the temporary file is a hidden sibling, fsynced before the rename; the folder is fsynced after."""
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        mode = os.fstat(fd).st_mode
        events.append("fsync-file" if stat.S_ISREG(mode) else "fsync-folder" if stat.S_ISDIR(mode) else "fsync-?")
        real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", os.path.dirname(os.path.abspath(src)), os.path.basename(src), dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    path = tmp_path / "f.ock"
    write_file(path, small_sections())
    assert events[0] == "fsync-file" and events[-1] == "fsync-folder" and len(events) == 3
    _, folder, name, dst = events[1]
    assert folder == str(tmp_path) and is_hidden_temp(name, "f.ock") and os.fspath(dst) == str(path)


def test_failure_while_writing_aborts_and_keeps_old_file_R21(tmp_path, monkeypatch):
    """R21: an I/O error during commit (here: fsync fails) removes the temporary files and keeps the old file."""
    path = write_file(tmp_path / "f.ock", small_sections())
    old = path.read_bytes()

    def failing_fsync(fd):
        raise OSError(28, "No space left on device")

    w = FileWriter(path)
    w.declare_growing("g", "<u1")
    w.append("g", np.ones(10, "<u1"))
    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="No space"):
        w.commit({})
    assert path.read_bytes() == old and listing(tmp_path) == ["f.ock"] and w.closed


@pytest.mark.parametrize("mode", ["midway", "before-fsync", "before-replace"])
def test_sigkill_keeps_previous_file_R21(tmp_path, mode):
    """R21: a writer killed with SIGKILL (while appending, before its fsync, before its rename) leaves the previous
    file byte for byte under the name; only hidden temporary files may remain."""
    path = write_file(tmp_path / "f.ock", small_sections(), meta={"v": "old"})
    old = path.read_bytes()
    run_script_until_sigkill("storage_kill_writer.py", path, mode,
                             kill_after_line="MIDWAY" if mode == "midway" else None, timeout=60)
    assert path.read_bytes() == old
    assert all(name == "f.ock" or is_hidden_temp(name, "f.ock") for name in listing(tmp_path))
    with open_file(path) as f:
        assert f.meta == {"v": "old"}
        f.verify()


def test_sigkill_after_rename_leaves_complete_new_file_R21(tmp_path):
    """R21: killed right after the rename, the new file is complete (no file is ever half written)."""
    path = write_file(tmp_path / "f.ock", small_sections(), meta={"v": "old"})
    run_script_until_sigkill("storage_kill_writer.py", path, "after-replace", timeout=60)
    with open_file(path) as f:
        assert f.meta == {"writer": "kill"}
        rows = f.sections["rows"]
        assert rows.shape == (1000, 4) and (rows == np.arange(1000)[:, None]).all()
        f.verify()
    assert listing(tmp_path) == ["f.ock"]


def test_reader_keeps_old_data_after_replacement_R22(tmp_path):
    """R22: a reader that has the old file open keeps reading the old contents after the file is replaced."""
    path = write_file(tmp_path / "f.ock", [("v", np.arange(1000, dtype="<i8"))], meta={"v": 1})
    old = open_file(path)
    view = old.sections["v"]
    write_file(path, [("v", np.arange(1000, dtype="<i8") * -1), ("w", np.ones(5, "<f4"))], meta={"v": 2})
    with open_file(path) as new:
        assert new.meta == {"v": 2} and new.sections["v"][5] == -5
    np.testing.assert_array_equal(view, np.arange(1000))
    np.testing.assert_array_equal(old.sections["v"], np.arange(1000))
    old.verify()
    old.close()
    assert view[999] == 999  # a view handed out outlives close


def test_a_writer_that_must_not_replace_refuses_an_existing_file(tmp_path):
    """FileWriter(replace=False) (collection manifests): an existing file, even one that appears while the writer
    writes, is never replaced: FileExistsError, the file untouched, no temporary file left; a new name is written."""
    path = tmp_path / "f.ock"
    path.write_bytes(b"first")
    w = FileWriter(path, replace=False)
    w.put("v", np.arange(3, dtype="<i8"))
    with pytest.raises(FileExistsError):
        w.commit({})
    assert path.read_bytes() == b"first" and sorted(os.listdir(tmp_path)) == ["f.ock"] and w.closed
    with FileWriter(tmp_path / "g.ock", replace=False) as w:
        w.put("v", np.arange(3, dtype="<i8"))
        w.commit({"v": 1})
    with open_file(tmp_path / "g.ock") as f:
        assert f.meta == {"v": 1} and f.sections["v"].tolist() == [0, 1, 2]
    assert sorted(os.listdir(tmp_path)) == ["f.ock", "g.ock"]
    with pytest.raises(TypeError, match="replace must be True or False"):
        FileWriter(tmp_path / "h.ock", replace=0)


# --------------------------------------------------------------------------------------------------------------------
# closed objects and paths


def test_writer_use_after_commit_or_abort_raises(tmp_path):
    """Any use after commit or abort is a ValueError; abort is idempotent and a no-op after commit."""
    path = tmp_path / "f.ock"
    w = FileWriter(path)
    w.declare_growing("g", "<u1")
    w.commit({})
    w.abort()  # no-op: the committed file stays
    assert path.exists()
    for call in (lambda: w.put("a", np.zeros(1, "<u1")), lambda: w.declare_growing("h", "<u1"),
                 lambda: w.append("g", np.zeros(1, "<u1")), lambda: w.commit({}), lambda: w.__enter__()):
        with pytest.raises(ValueError, match="closed"):
            call()
    w2 = FileWriter(tmp_path / "g.ock")
    w2.abort()
    w2.abort()
    with pytest.raises(ValueError, match="closed"):
        w2.put("a", np.zeros(1, "<u1"))
    assert listing(tmp_path) == ["f.ock"]


def test_mapped_file_use_after_close_raises(tmp_path):
    """close is idempotent; sections, section_info and verify raise ValueError afterwards; plain data stays."""
    path = write_file(tmp_path / "f.ock", small_sections(), meta={"m": 1})
    f = open_file(path)
    f.close()
    f.close()
    for call in (lambda: f.sections, lambda: f.verify(), lambda: f.section_info("a"), lambda: f.__enter__()):
        with pytest.raises(ValueError, match="closed"):
            call()
    assert f.meta == {"m": 1} and f.path == str(path) and f.closed
    with open_file(path) as g:
        pass
    with pytest.raises(ValueError, match="closed"):
        g.sections
    with open_file(path) as h:
        with pytest.raises(KeyError):
            h.section_info("missing")


def test_close_with_live_views_does_not_crash_and_frees_descriptors(tmp_path):
    """close with views still held does not raise (BufferError is absorbed); no descriptor leaks over many opens."""
    path = write_file(tmp_path / "f.ock", small_sections())
    fd_dir = Path("/proc/self/fd")
    before = len(list(fd_dir.iterdir())) if fd_dir.exists() else 0
    kept = []
    for _ in range(200):
        f = open_file(path)
        kept.append(f.sections["b"])
        f.close()
    np.testing.assert_array_equal(kept[-1], small_sections()[1][1])
    kept.clear()
    for _ in range(200):
        open_file(path).close()
    if fd_dir.exists():
        assert len(list(fd_dir.iterdir())) <= before + 2


def test_fifo_refused_without_blocking_R23(tmp_path):
    """R23: a FIFO is refused by stat alone (opening it for reading would block)."""
    fifo = tmp_path / "pipe.ock"
    os.mkfifo(fifo)
    kind, result = returns_within(lambda: open_file(fifo))
    assert kind == "raised" and isinstance(result, ValueError) and "not a regular file" in str(result), result
    with pytest.raises(ValueError, match="not a regular file"):
        FileWriter(fifo)


def test_paths_R23(tmp_path):
    """R23 and paths: folders are refused, missing files raise FileNotFoundError, PathLike and str both work."""
    with pytest.raises(ValueError, match="not a regular file"):
        open_file(tmp_path)
    with pytest.raises(FileNotFoundError):
        open_file(tmp_path / "missing.ock")
    with pytest.raises(TypeError):
        open_file(3)
    with pytest.raises(FileNotFoundError):
        FileWriter(tmp_path / "no" / "such" / "f.ock")
    with pytest.raises(ValueError):
        FileWriter(tmp_path)
    path = write_file(str(tmp_path / "s.ock"), small_sections())
    with open_file(Path(path)) as f:
        assert f.path == str(path)


# --------------------------------------------------------------------------------------------------------------------
# fuzzing


def _fuzz_seed_file(path):
    return write_file(path, small_sections() + [("e", np.zeros((0, 3), "<i8"))],
                      [("g", "<u2", (3,), [np.arange(9, dtype="<u2").reshape(3, 3)])], meta={"N": 3, "m": "x"},
                      user={"note": "ü"})


@pytest.mark.slow
def test_fuzz_mutations_in_subprocess_R16_R17_R18(tmp_path):
    """R16-R18 and every open-time check: >= 10,000 mutated files (every truncation, every single-byte flip, random
    flips, insertions, deletions, header edits) are either refused with FormatError or (only where harmless) pass;
    no other exception, and no change after the header goes unnoticed. Runs in a subprocess so that a crash of the
    reader fails this test instead of killing pytest."""
    valid = _fuzz_seed_file(tmp_path / "valid.ock")
    work = tmp_path / "work"
    work.mkdir()
    report = run_json_script("fuzz_storage.py", "--opener", "ockstore.storage:open_file", "--file", valid,
                             "--workdir", work, "--random", 9000, "--seed", 1, timeout=300)
    assert report["cases"] >= 10_000 and report["n_failures"] == 0
    counts = report["counts"]
    assert counts["truncate:refused"] == len(valid.read_bytes())
    assert counts.get("flip1:refused", 0) > 0 and counts.get("header:refused", 0) > 0


def test_fuzz_harness_detects_broken_readers(tmp_path):
    """The harness itself can fail: a reader whose verify does nothing, or that raises another exception, is
    reported."""
    sys.path.insert(0, str(HERE))
    try:
        import fuzz_storage
    finally:
        sys.path.remove(str(HERE))
    valid = _fuzz_seed_file(tmp_path / "valid.ock")
    work = tmp_path / "work"
    work.mkdir()

    class NoVerify:
        def __init__(self, path):
            self.f = open_file(path)

        def verify(self):
            pass

        def close(self):
            self.f.close()

    report = fuzz_storage.fuzz_file(NoVerify, valid, work, n_random=0)
    assert any("not detected" in failure["problem"] for failure in report["failures"])

    def crashing(path):
        if os.path.getsize(path) < 100:
            raise IndexError("simulated reader bug")
        return open_file(path)

    report = fuzz_storage.fuzz_file(crashing, valid, work, n_random=40)
    assert any("IndexError" in failure["problem"] for failure in report["failures"])
    report = fuzz_storage.fuzz_file(open_file, valid, work, n_random=40)
    assert report["failures"] == [] and report["cases"] > 3 * len(valid.read_bytes())
