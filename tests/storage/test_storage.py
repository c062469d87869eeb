"""Tests of the file container (the package ockstore/storage/) against its specification, docs/FORMAT.md: round trips
of every dtype and shape, identical bytes, the writer's output against hand-built bytes, and the writer's argument
checks.

Every rule R1-R24 of the specification is cited by at least one test of tests/storage/ (in its name or docstring).
Hand-written corrupt files and the fuzzer: test_storage_corrupt.py; atomic writes, the cost of open, closed objects
and paths: test_storage_lifecycle.py.
"""

from __future__ import annotations

import struct

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ockstore import storage
from ockstore.storage import MAGIC, MAX_HEADER_BYTES, FileWriter, open_file
from helpers import code_of, hand_file, header_end_of, is_hidden_temp, listing

from storage_files import DTYPES, canonical, small_sections, write_file


# --------------------------------------------------------------------------------------------------------------------
# round trips


def test_constants_match_the_specification_R1_R2_R6_R11():
    """R1, R2, R6, R11: the module's constants are the specification's."""
    assert storage.MAGIC == b"\x89OCK\r\n\x1a\n" and storage.PREAMBLE_SIZE == 24
    assert storage.FORMAT_VERSION == (1, 4) and storage.MAX_HEADER_BYTES == 16 * 1024 * 1024
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
