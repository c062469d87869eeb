"""Corrupt container files refused with a FormatError naming the check (docs/FORMAT.md R1-R18): the preamble, the
header's length, encoding and structure, the placement of sections, padding and CRCs found by verify. The files are
built by hand with struct + msgpack (``hand_file``), independently of the writer; the mutation fuzzer
(tests/support/fuzz_storage.py) runs in a subprocess over thousands of mutants.
"""

from __future__ import annotations

import os
import zlib

import msgpack
import numpy as np
import pytest

from ockstore.errors import FormatError
from ockstore.storage import MAX_HEADER_BYTES, open_file
from helpers import align64, hand_file, header_end_of, header_of, listing, run_json_script

from storage_files import expect_format_error, save, small_sections, write_file


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


def test_section_check_streams_the_crc_of_the_sections_read_R18(tmp_path):
    """R18 while copying: MappedFile.section_check checks each section's CRC as a caller reads it step by step (the
    same fraction of every section), raising when a section is complete and differs, naming the file, the section and
    the caller's advice; sections not asked for are not checked."""
    data = hand_file(small_sections())
    with open_file(save(tmp_path, data, "ok.ock")) as f:
        offset_b = f.section_info("b")["offset"]
        check = f.section_check()
        for done in range(6):
            check.advance(done, 5)
        check.finish()
    mutated = bytearray(data)
    mutated[offset_b + 39] ^= 0x01  # the last byte of 'b'
    path = save(tmp_path, bytes(mutated))
    with open_file(path) as f:
        check = f.section_check(advice="; nothing was copied")
        for done in range(5):
            check.advance(done, 5)  # 'b' not complete yet: its damage is in its last bytes
        with pytest.raises(FormatError, match=r"CRC mismatch: section 'b': .*; nothing was copied$") as caught:
            check.advance(5, 5)
        assert repr(str(path)) in str(caught.value)
        f.section_check(["a"]).finish()  # only 'a' checked
        with pytest.raises(FormatError, match=r"section 'b'"):
            f.section_check(["b"]).finish()
        with pytest.raises(KeyError, match="no section named 'z'"):
            f.section_check(["z"])


def test_crc_is_zlib_crc32_R18():
    """R18: the CRC is zlib's CRC-32 (check value of CRC-32/ISO-HDLC) and the empty CRC is 0."""
    assert zlib.crc32(b"123456789") == 0xCBF43926 and zlib.crc32(b"") == 0


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
    import fuzz_storage
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
