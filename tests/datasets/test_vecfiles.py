"""Tests of the vector files (ockstore.vecfiles, read through ockstore.datasets): texmex .fvecs/.bvecs/.ivecs (also
.gz) and .npy round trips, their byte layout, reproducible gzip, write checks and atomicity, row ranges, and bad
files written by hand.
"""

from __future__ import annotations

import gzip
import os
import struct

import numpy as np
import pytest

from ockstore import vecfiles
from ockstore.datasets import count_vecs, iter_vecs, read_vecs, write_vecs
from ockstore.errors import FormatError

from helpers import returns_within, vecs_sample


DTYPES = {"fvecs": np.float32, "bvecs": np.uint8, "ivecs": np.int32}


def _texmex_bytes(rows, fmt):
    """Hand-made texmex bytes: each row as int32 dimension then components packed with struct format ``fmt``."""
    out = b""
    for dim, values in rows:
        out += struct.pack("<i", dim) + struct.pack("<" + fmt * len(values), *values)
    return out


# ----------------------------------------------------------------------------------------------------------------
# round trips


@pytest.mark.parametrize("kind", ["fvecs", "bvecs", "ivecs"])
@pytest.mark.parametrize("gz", [False, True])
def test_round_trip_texmex(tmp_path, kind, gz):
    X = vecs_sample(kind)
    path = tmp_path / f"x.{kind}{'.gz' if gz else ''}"
    write_vecs(path, X)
    Y = read_vecs(path)
    assert Y.dtype == DTYPES[kind] and Y.shape == X.shape
    np.testing.assert_array_equal(Y, X)
    assert Y.flags.c_contiguous and Y.flags.writeable
    assert count_vecs(path) == X.shape
    for chunk_size in (1, 7, 1000):
        chunks = list(iter_vecs(path, chunk_size=chunk_size))
        assert all(c.dtype == DTYPES[kind] for c in chunks)
        assert [len(c) for c in chunks[:-1]] == [chunk_size] * (len(chunks) - 1)
        assert 1 <= len(chunks[-1]) <= chunk_size
        np.testing.assert_array_equal(np.concatenate(chunks), X)


@pytest.mark.parametrize("kind", ["fvecs", "bvecs", "ivecs"])
def test_file_bytes_are_the_texmex_layout(tmp_path, kind):
    X = vecs_sample(kind, n=3, d=2)
    path = tmp_path / f"x.{kind}"
    write_vecs(path, X)
    fmt = {"fvecs": "f", "bvecs": "B", "ivecs": "i"}[kind]
    assert path.read_bytes() == _texmex_bytes([(2, row.tolist()) for row in X], fmt)
    gz = tmp_path / f"x.{kind}.gz"
    write_vecs(gz, X)
    assert gzip.decompress(gz.read_bytes()) == path.read_bytes()


def test_gzip_output_is_reproducible(tmp_path):
    X = vecs_sample("bvecs", n=50)
    write_vecs(tmp_path / "a.bvecs.gz", X)
    write_vecs(tmp_path / "b.bvecs.gz", X)
    assert (tmp_path / "a.bvecs.gz").read_bytes() == (tmp_path / "b.bvecs.gz").read_bytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.uint8, np.int16])
@pytest.mark.parametrize("fortran", [False, True])
def test_round_trip_npy(tmp_path, dtype, fortran):
    X = (np.arange(23 * 5).reshape(23, 5) % 97).astype(dtype)
    if fortran:
        X = np.asfortranarray(X)
    path = tmp_path / "x.npy"
    write_vecs(path, X)
    Y = read_vecs(path)
    assert isinstance(Y, np.memmap) and not Y.flags.writeable
    assert Y.dtype == dtype
    np.testing.assert_array_equal(Y, X)
    assert count_vecs(path) == (23, 5)
    for chunk_size in (1, 7, 100):
        chunks = list(iter_vecs(path, chunk_size=chunk_size))
        assert all(c.flags.c_contiguous and c.flags.writeable for c in chunks)
        np.testing.assert_array_equal(np.concatenate(chunks), X)


def test_npy_zero_rows(tmp_path):
    path = tmp_path / "empty.npy"
    np.save(path, np.zeros((0, 4), dtype=np.float32))
    Y = read_vecs(path)
    assert Y.shape == (0, 4) and not Y.flags.writeable
    assert list(iter_vecs(path)) == []
    assert count_vecs(path) == (0, 4)


def test_gzip_blocks_smaller_than_records_and_chunks(tmp_path, monkeypatch):
    """Exercise block boundaries of the gzip reader: blocks of 2 records (5-d float32, 24-byte records)."""
    monkeypatch.setattr(vecfiles, "_BLOCK_BYTES", 2 * 24 + 5)
    X = vecs_sample("fvecs", n=11, d=5)
    path = tmp_path / "x.fvecs.gz"
    write_vecs(path, X)
    np.testing.assert_array_equal(read_vecs(path), X)
    for chunk_size in (1, 3, 7, 100):
        np.testing.assert_array_equal(np.concatenate(list(iter_vecs(path, chunk_size))), X)
    assert count_vecs(path) == (11, 5)


def test_gzip_with_misleading_size_trailer(tmp_path):
    """Two gzip members: the trailer's size hint covers only the last one; the reader must not rely on it."""
    X = vecs_sample("ivecs", n=9, d=3)
    path = tmp_path / "x.ivecs"
    write_vecs(path, X)
    raw = path.read_bytes()
    cut = 4 * 16  # whole records: 16 bytes per record
    gz = tmp_path / "two.ivecs.gz"
    gz.write_bytes(gzip.compress(raw[:cut]) + gzip.compress(raw[cut:]))
    np.testing.assert_array_equal(read_vecs(gz), X)


def test_one_vector_is_one_row(tmp_path):
    path = tmp_path / "x.fvecs"
    write_vecs(path, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(read_vecs(path), np.array([[1.0, 2.0, 3.0]], dtype=np.float32))


# ----------------------------------------------------------------------------------------------------------------
# write checks, atomicity


def test_write_checks_dtype_against_extension(tmp_path):
    with pytest.raises(ValueError, match="0..255"):
        write_vecs(tmp_path / "x.bvecs", np.array([[0, 256]]))
    with pytest.raises(ValueError, match="0..255"):
        write_vecs(tmp_path / "x.bvecs", np.array([[-1, 3]]))
    with pytest.raises(TypeError, match="integer"):
        write_vecs(tmp_path / "x.bvecs", np.array([[1.0, 2.0]]))
    with pytest.raises(ValueError, match="int32"):
        write_vecs(tmp_path / "x.ivecs", np.array([[2**31]]))
    with pytest.raises(TypeError, match="integer"):
        write_vecs(tmp_path / "x.ivecs", np.array([[0.5]]))
    with pytest.raises(ValueError, match="NaN"):
        write_vecs(tmp_path / "x.fvecs", np.array([[np.nan]]))
    with pytest.raises(ValueError, match="too large"):
        write_vecs(tmp_path / "x.fvecs", np.array([[1e300]]))
    with pytest.raises(TypeError):
        write_vecs(tmp_path / "x.fvecs", np.array([[True]]))
    with pytest.raises(ValueError, match="zero vectors"):
        write_vecs(tmp_path / "x.fvecs", np.zeros((0, 3), np.float32))
    with pytest.raises(ValueError, match="unsupported file type"):
        write_vecs(tmp_path / "x.txt", np.zeros((1, 3), np.float32))
    with pytest.raises(FileNotFoundError):
        write_vecs(tmp_path / "missing" / "x.fvecs", np.zeros((1, 3), np.float32))
    assert list(tmp_path.iterdir()) == []  # nothing left behind, not even a temporary file


def test_fvecs_accepts_other_real_dtypes(tmp_path):
    X = np.array([[1, 2], [3, 4]], dtype=np.int64)
    write_vecs(tmp_path / "x.fvecs", X)
    np.testing.assert_array_equal(read_vecs(tmp_path / "x.fvecs"), X.astype(np.float32))


def test_failed_write_keeps_old_file(tmp_path):
    path = tmp_path / "x.bvecs"
    write_vecs(path, np.array([[1, 2, 3]], dtype=np.uint8))
    before = path.read_bytes()
    big = np.zeros((3, 3), dtype=np.int64)
    big[2, 1] = 300  # range error found after the first rows were converted
    with pytest.raises(ValueError):
        write_vecs(path, big)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.bvecs"]
    write_vecs(path, np.array([[7, 8, 9]], dtype=np.uint8))  # overwriting works
    np.testing.assert_array_equal(read_vecs(path), [[7, 8, 9]])


@pytest.mark.parametrize("name", ["x.fvecs", "x.fvecs.gz", "x.bvecs", "x.bvecs.gz", "x.npy"])
def test_row_ranges_and_chosen_rows(tmp_path, monkeypatch, name):
    """iter_vecs(start=, stop=) yields exactly the slice X[start:stop] (clipped at the end), and read_rows the rows
    asked for, for every kind of file; gzip blocks of 3 records put the ranges across block edges."""
    kind = "bvecs" if "bvecs" in name else "fvecs"
    X = vecs_sample(kind, n=23, d=5)
    monkeypatch.setattr(vecfiles, "_BLOCK_BYTES", 3 * (4 + 5 * X.itemsize) + 1)
    path = tmp_path / name
    write_vecs(path, X)
    for start, stop in [(0, 23), (0, 1), (5, 17), (7, 7), (22, 23), (20, 40), (30, None), (3, None)]:
        for chunk_size in (1, 4, 100):
            chunks = list(iter_vecs(path, chunk_size, start=start, stop=stop))
            assert all(1 <= len(c) <= chunk_size for c in chunks)
            got = np.concatenate(chunks) if chunks else np.empty((0, 5), X.dtype)
            np.testing.assert_array_equal(got, X[start:stop])
    for rows in ([0], [22], [1, 2, 3, 10, 11, 21], list(range(23)), []):
        got = vecfiles.read_rows(path, np.array(rows, dtype=np.int64))
        assert got.dtype == X.dtype and got.shape == (len(rows), 5) and got.flags.c_contiguous
        np.testing.assert_array_equal(got, X[rows])
    with pytest.raises(ValueError, match="row 23 is past the end"):
        vecfiles.read_rows(path, [3, 23])
    with pytest.raises(ValueError, match="strictly increasing"):
        vecfiles.read_rows(path, [4, 4])
    with pytest.raises(ValueError, match="rows"):
        vecfiles.read_rows(path, [-1, 2])
    with pytest.raises(TypeError, match="rows"):
        vecfiles.read_rows(path, [1.5])
    with pytest.raises(ValueError, match="stop"):
        iter_vecs(path, start=5, stop=4)
    with pytest.raises(ValueError, match="start"):
        iter_vecs(path, start=-1)


def test_chosen_rows_check_their_prefixes(tmp_path):
    rows = [(4, [1.0, 2.0, 3.0, 4.0])] * 3 + [(5, [1.0, 2.0, 3.0, 4.0])] + [(4, [0.0] * 4)] * 2
    path = tmp_path / "bad.fvecs"
    path.write_bytes(_texmex_bytes(rows, "f"))
    np.testing.assert_array_equal(vecfiles.read_rows(path, [0, 2]), [[1, 2, 3, 4]] * 2)
    with pytest.raises(FormatError, match=r"byte offset 60\b"):  # row 3 starts at byte 60
        vecfiles.read_rows(path, [1, 3])


# ----------------------------------------------------------------------------------------------------------------
# bad files written by hand


def test_wrong_prefix_in_row_3(tmp_path):
    rows = [(4, [1.0, 2.0, 3.0, 4.0])] * 3 + [(5, [1.0, 2.0, 3.0, 4.0])] + [(4, [0.0] * 4)] * 2
    raw = _texmex_bytes(rows, "f")
    # record size 4 + 4*4 = 20 bytes: row 3 starts at byte 60
    path = tmp_path / "bad.fvecs"
    path.write_bytes(raw)
    with pytest.raises(FormatError, match=r"byte offset 60\b") as exc:
        read_vecs(path)
    assert "bad.fvecs" in str(exc.value)
    with pytest.raises(FormatError, match=r"byte offset 60\b"):
        list(iter_vecs(path, chunk_size=2))
    # In chunks, the rows before the bad one are still delivered.
    it = iter_vecs(path, chunk_size=3)
    np.testing.assert_array_equal(next(it), np.array([[1, 2, 3, 4]] * 3, dtype=np.float32))
    with pytest.raises(FormatError, match=r"byte offset 60\b"):
        next(it)

    gz = tmp_path / "bad.fvecs.gz"
    gz.write_bytes(gzip.compress(raw))
    with pytest.raises(FormatError, match=r"byte offset 60 of the uncompressed stream") as exc:
        read_vecs(gz)
    assert "bad.fvecs.gz" in str(exc.value)
    with pytest.raises(FormatError, match=r"byte offset 60 of the uncompressed stream"):
        count_vecs(gz)


def test_truncated_record(tmp_path):
    raw = _texmex_bytes([(3, [1, 2, 3]), (3, [4, 5, 6])], "B")  # 7-byte records
    path = tmp_path / "t.bvecs"
    path.write_bytes(raw[:-2])  # second record loses 2 bytes: it starts at byte 7
    for call in (read_vecs, count_vecs, iter_vecs):
        with pytest.raises(FormatError, match=r"truncated record at byte offset 7\b"):
            call(path)
    gz = tmp_path / "t.bvecs.gz"
    gz.write_bytes(gzip.compress(raw[:-2]))
    with pytest.raises(FormatError, match=r"truncated record at byte offset 7 of the uncompressed stream"):
        read_vecs(gz)
    with pytest.raises(FormatError, match=r"byte offset 7 of the uncompressed"):
        list(iter_vecs(gz, chunk_size=1))


def test_truncated_gzip_stream(tmp_path):
    X = vecs_sample("fvecs", n=200, d=8)
    path = tmp_path / "x.fvecs.gz"
    write_vecs(path, X)
    full = path.read_bytes()
    for cut in (8, len(full) // 2):  # trailer gone; half the compressed data gone
        path.write_bytes(full[:-cut])
        with pytest.raises(FormatError, match="truncated gzip stream.*byte offset \\d+ of the uncompressed stream"):
            read_vecs(path)
        with pytest.raises(FormatError, match="truncated gzip stream"):
            list(iter_vecs(path, chunk_size=10))


def test_corrupt_and_non_gzip(tmp_path):
    X = vecs_sample("bvecs", n=100)
    path = tmp_path / "x.bvecs.gz"
    write_vecs(path, X)
    data = bytearray(path.read_bytes())
    data[-6] ^= 0xFF  # CRC-32 of the trailer
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="corrupt gzip stream"):
        read_vecs(path)
    path.write_bytes(b"this is not gzip at all")
    with pytest.raises(FormatError, match="byte offset 0 of the uncompressed stream"):
        read_vecs(path)


@pytest.mark.parametrize("name", ["e.fvecs", "e.ivecs", "e.bvecs.gz"])
def test_empty_file(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(gzip.compress(b"") if name.endswith(".gz") else b"")
    for call in (read_vecs, count_vecs):
        with pytest.raises(FormatError, match="empty file") as exc:
            call(path)
        assert name in str(exc.value) and "byte offset 0" in str(exc.value)


@pytest.mark.parametrize("dim", [0, -3, vecfiles.MAX_DIM + 1])
def test_bad_dimension(tmp_path, dim):
    path = tmp_path / "d.fvecs"
    path.write_bytes(struct.pack("<i", dim) + b"\0" * 64)
    with pytest.raises(FormatError, match=f"invalid dimension prefix {dim} at byte offset 0"):
        read_vecs(path)
    gz = tmp_path / "d.fvecs.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    with pytest.raises(FormatError, match=f"invalid dimension prefix {dim} at byte offset 0 of the uncompressed"):
        read_vecs(gz)


def test_npy_misnamed_as_fvecs(tmp_path):
    path = tmp_path / "x.fvecs"
    np.save(tmp_path / "x.npy", np.zeros((3, 3), np.float32))
    path.write_bytes((tmp_path / "x.npy").read_bytes())
    with pytest.raises(FormatError, match="invalid dimension prefix"):
        read_vecs(path)


def test_bad_npy(tmp_path):
    path = tmp_path / "x.npy"
    path.write_bytes(b"not an npy file")
    with pytest.raises(FormatError, match="invalid .npy header"):
        read_vecs(path)
    np.save(path, np.zeros(5, np.float32))
    with pytest.raises(FormatError, match="2 dimensions"):
        read_vecs(path)
    np.save(path, np.zeros((2, 2), dtype=bool))
    with pytest.raises(FormatError, match="dtype bool"):
        read_vecs(path)
    np.save(path, np.zeros((10, 4), np.float32))
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(FormatError, match="truncated .npy data"):
        read_vecs(path)
    with pytest.raises(FormatError, match="truncated .npy data"):
        iter_vecs(path)


def test_argument_checks(tmp_path):
    path = tmp_path / "x.fvecs"
    write_vecs(path, np.ones((2, 2), np.float32))
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        iter_vecs(path, chunk_size=0)
    with pytest.raises(TypeError, match="chunk_size must be an integer"):
        iter_vecs(path, chunk_size=2.0)
    with pytest.raises(FileNotFoundError):
        read_vecs(tmp_path / "missing.fvecs")
    with pytest.raises(ValueError, match="not a regular file"):
        read_vecs(tmp_path)
    with pytest.raises(ValueError, match="unsupported file type"):
        read_vecs(_touch(tmp_path / "x.csv"))
    with pytest.raises(ValueError, match="load_hdf5"):
        read_vecs(_touch(tmp_path / "x.hdf5"))


def _touch(path):
    path.write_bytes(b"")
    return path


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "x.fvecs"
    os.mkfifo(fifo)
    kind, result = returns_within(lambda: read_vecs(fifo))
    assert kind == "raised" and isinstance(result, ValueError) and "not a regular file" in str(result), result
