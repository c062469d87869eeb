"""Tests of ockstore.datasets: vector file formats, chunked iteration, datasets, exact k-NN.

The real datasets are found where ``helpers.data_root`` says: ``../shared/data/<name>`` from the repository root, or
under the folder named by the environment variable OCKSTORE_DATA (the folder that holds ``sift-real/`` and
``minilm-real/``); their tests skip when the data is absent.
"""

import gzip
import os
import struct

import numpy as np
import pytest

from ockstore import datasets, evaluation, vecfiles
from ockstore.datasets import (
    count_vecs,
    iter_vecs,
    load_hdf5,
    load_texmex,
    read_vecs,
    synthetic,
    write_vecs,
)
from ockstore.errors import FormatError
from ockstore.evaluation import exact_knn

from helpers import REPO, data_root, returns_within

DATA_ROOT = data_root()


def _sample(kind, n=23, d=5, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "fvecs":
        return rng.normal(size=(n, d)).astype(np.float32)
    if kind == "bvecs":
        return rng.integers(0, 256, size=(n, d)).astype(np.uint8)
    return rng.integers(-(2**31), 2**31 - 1, size=(n, d), dtype=np.int64).astype(np.int32)


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
    X = _sample(kind)
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
    X = _sample(kind, n=3, d=2)
    path = tmp_path / f"x.{kind}"
    write_vecs(path, X)
    fmt = {"fvecs": "f", "bvecs": "B", "ivecs": "i"}[kind]
    assert path.read_bytes() == _texmex_bytes([(2, row.tolist()) for row in X], fmt)
    gz = tmp_path / f"x.{kind}.gz"
    write_vecs(gz, X)
    assert gzip.decompress(gz.read_bytes()) == path.read_bytes()


def test_gzip_output_is_reproducible(tmp_path):
    X = _sample("bvecs", n=50)
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
    X = _sample("fvecs", n=11, d=5)
    path = tmp_path / "x.fvecs.gz"
    write_vecs(path, X)
    np.testing.assert_array_equal(read_vecs(path), X)
    for chunk_size in (1, 3, 7, 100):
        np.testing.assert_array_equal(np.concatenate(list(iter_vecs(path, chunk_size))), X)
    assert count_vecs(path) == (11, 5)


def test_gzip_with_misleading_size_trailer(tmp_path):
    """Two gzip members: the trailer's size hint covers only the last one; the reader must not rely on it."""
    X = _sample("ivecs", n=9, d=3)
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
    X = _sample(kind, n=23, d=5)
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
    X = _sample("fvecs", n=200, d=8)
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
    X = _sample("bvecs", n=100)
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


# ----------------------------------------------------------------------------------------------------------------
# exact k-NN


def _brute_force(base, queries, k):
    """Direct Σ(q−b)² in float64 for every pair; order by (distance, index)."""
    b = np.asarray(base, np.float64)
    ids, dists = [], []
    for q in np.asarray(queries, np.float64):
        d = ((b - q) ** 2).sum(axis=1)
        order = np.lexsort((np.arange(len(b)), d))[:k]
        ids.append(order)
        dists.append(d[order])
    return np.array(dists), np.array(ids)


def test_exact_knn_hand_case():
    base = np.array([[0.0], [1.0], [3.0], [-1.0], [1.0]])
    # distances to 0.9: 0.81, 0.01, 4.41, 3.61, 0.01 → ids 1 and 4 tie, then 0, 3, 2
    D, I = exact_knn([[0.9]], base, 5)
    np.testing.assert_array_equal(I, [[1, 4, 0, 3, 2]])
    np.testing.assert_allclose(D, [[0.01, 0.01, 0.81, 3.61, 4.41]])
    D1, I1 = exact_knn([0.9], base, 2)  # one 1-D query: 1-D results
    assert I1.shape == (2,) and I1.tolist() == [1, 4]
    D7, I7 = exact_knn([[0.9]], base, 7)  # k > n_base: padding
    assert I7[0, 5:].tolist() == [-1, -1] and np.isinf(D7[0, 5:]).all()


def test_exact_knn_ties_across_blocks(monkeypatch):
    """Small blocks and many exact ties (integer data): ties must go to the smaller index, as brute force."""
    monkeypatch.setattr(evaluation, "_KNN_BASE_BLOCK", 7)
    monkeypatch.setattr(evaluation, "_KNN_BLOCK_ELEMS", 40)
    rng = np.random.default_rng(3)
    base = rng.integers(0, 3, size=(60, 2)).astype(np.uint8)
    queries = rng.integers(0, 3, size=(9, 2))
    D, I = exact_knn(queries, base, 13)
    Dr, Ir = _brute_force(base, queries, 13)
    np.testing.assert_array_equal(I, Ir)
    np.testing.assert_array_equal(D, Dr)


def test_exact_knn_checks():
    with pytest.raises(ValueError, match="queries has dimension 3, expected 2"):
        exact_knn(np.zeros((1, 3)), np.zeros((4, 2)), 1)
    with pytest.raises(ValueError, match="k must be >= 1"):
        exact_knn(np.zeros((1, 2)), np.zeros((4, 2)), 0)
    with pytest.raises(ValueError, match="base contains NaN"):
        exact_knn(np.zeros((1, 2)), np.array([[np.nan, 0.0]]), 1)


# ----------------------------------------------------------------------------------------------------------------
# datasets


def test_synthetic_is_seeded_and_exact():
    a = synthetic(50, 300, 20, 16, seed=7, k_gt=10)
    b = synthetic(50, 300, 20, 16, seed=7, k_gt=10)
    c = synthetic(50, 300, 20, 16, seed=8, k_gt=10)
    for attr in ("learn", "base", "query", "groundtruth"):
        np.testing.assert_array_equal(getattr(a, attr), getattr(b, attr))
    assert not np.array_equal(a.base, c.base)
    assert a.learn.shape == (50, 16) and a.base.shape == (300, 16) and a.query.shape == (20, 16)
    assert a.base.dtype == np.float32 and a.groundtruth.dtype == np.int64 and a.groundtruth.shape == (20, 10)
    assert a.dim == 16
    Dr, Ir = _brute_force(a.base, a.query, 10)
    np.testing.assert_array_equal(a.groundtruth, Ir)
    np.testing.assert_allclose(a.groundtruth_distances, Dr, rtol=1e-12)
    # uneven variances: the largest per-dimension variance is several times the smallest
    var = a.base.var(axis=0)
    assert var.max() > 5 * var.min()
    chunks = list(a.iter_base(chunk_size=64))
    assert [len(c) for c in chunks] == [64, 64, 64, 64, 44]
    np.testing.assert_array_equal(np.concatenate(chunks), a.base)


def test_synthetic_checks():
    with pytest.raises(ValueError, match="k_gt must be <= 5"):
        synthetic(0, 5, 1, 2)
    with pytest.raises(TypeError, match="dim must be an integer"):
        synthetic(0, 5, 1, 2.0, k_gt=1)


def test_load_texmex_tmp_folder(tmp_path):
    learn, base, query = _sample("fvecs", 30, 4, 1), _sample("fvecs", 40, 4, 2), _sample("fvecs", 5, 4, 3)
    _, gt = exact_knn(query, base, 3)
    write_vecs(tmp_path / "toy_learn.fvecs", learn)
    write_vecs(tmp_path / "toy_base.fvecs.gz", base)
    np.save(tmp_path / "toy_query.npy", query)
    write_vecs(tmp_path / "toy_groundtruth.ivecs", gt.astype(np.int32))
    (tmp_path / ".toy_base.fvecs.gz.abc.tmp").write_bytes(b"")  # a writer's leftover is ignored
    (tmp_path / "notes.txt").write_text("ignored")
    ds = load_texmex(tmp_path)
    assert ds.name == "toy" and ds.dim == 4
    np.testing.assert_array_equal(ds.learn, learn)
    np.testing.assert_array_equal(ds.query, query)
    assert ds.groundtruth.dtype == np.int64
    np.testing.assert_array_equal(ds.groundtruth, gt)
    np.testing.assert_array_equal(np.concatenate(list(ds.iter_base(chunk_size=16))), base)
    np.testing.assert_array_equal(ds.base, base)


def test_load_texmex_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such directory"):
        load_texmex(tmp_path / "nope")
    write_vecs(tmp_path / "a_learn.fvecs", np.ones((2, 3), np.float32))
    write_vecs(tmp_path / "a_base.fvecs", np.ones((2, 3), np.float32))
    with pytest.raises(FileNotFoundError, match="query.*groundtruth"):
        load_texmex(tmp_path)
    write_vecs(tmp_path / "a_query.fvecs", np.ones((2, 3), np.float32))
    write_vecs(tmp_path / "a_query.fvecs.gz", np.ones((2, 3), np.float32))
    write_vecs(tmp_path / "a_groundtruth.ivecs", np.zeros((2, 1), np.int32))
    with pytest.raises(ValueError, match="several query files"):
        load_texmex(tmp_path)
    os.unlink(tmp_path / "a_query.fvecs.gz")
    write_vecs(tmp_path / "a_base.fvecs", np.ones((2, 4), np.float32))  # dimension differs from the queries
    ds = load_texmex(tmp_path)
    with pytest.raises(FormatError, match="a_base.fvecs.*dimension 4, expected 3"):
        ds.base
    with pytest.raises(FormatError, match="dimension 4, expected 3"):
        list(ds.iter_base())


def test_dataset_from_arrays_checks():
    with pytest.raises(TypeError, match="groundtruth must be an integer array"):
        datasets.Dataset("x", learn=np.ones((2, 2)), base=np.ones((2, 2)), query=np.ones((1, 2)),
                         groundtruth=np.zeros((1, 1)))
    with pytest.raises(TypeError, match="learn must hold real numbers"):
        datasets.Dataset("x", learn=np.ones((2, 2), bool), base=np.ones((2, 2)), query=np.ones((1, 2)),
                         groundtruth=np.zeros((1, 1), int))


def test_hdf5(tmp_path):
    h5py = pytest.importorskip("h5py", reason="h5py (the optional extra ockstore[hdf5]) is not installed")
    train = _sample("fvecs", 30, 4, 1)
    test = _sample("fvecs", 6, 4, 2)
    D, I = exact_knn(test, train, 5)
    path = tmp_path / "toy-4-euclidean.hdf5"
    with h5py.File(path, "w") as f:
        f.create_dataset("train", data=train)
        f.create_dataset("test", data=test)
        f.create_dataset("neighbors", data=I.astype(np.int32))
        f.create_dataset("distances", data=np.sqrt(D).astype(np.float32))
        f.attrs["distance"] = "euclidean"
    ds = load_hdf5(path)
    assert ds.name == "toy-4-euclidean" and ds.dim == 4 and ds.metric == "euclidean"
    np.testing.assert_array_equal(ds.base, train)
    np.testing.assert_array_equal(ds.learn, train)
    np.testing.assert_array_equal(ds.query, test)
    assert ds.groundtruth.dtype == np.int64
    np.testing.assert_array_equal(ds.groundtruth, I)
    np.testing.assert_allclose(ds.groundtruth_distances, np.sqrt(D), rtol=1e-6)
    np.testing.assert_array_equal(np.concatenate(list(ds.iter_base(chunk_size=7))), train)
    with h5py.File(tmp_path / "bad.hdf5", "w") as f:
        f.create_dataset("train", data=train)
    with pytest.raises(FormatError, match="no 'test' dataset"):
        load_hdf5(tmp_path / "bad.hdf5")
    (tmp_path / "junk.hdf5").write_bytes(b"junk" * 100)
    with pytest.raises(FormatError, match="not a readable HDF5 file"):
        load_hdf5(tmp_path / "junk.hdf5")


def test_hdf5_missing_h5py_message(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "h5py":
            raise ImportError("No module named 'h5py'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match=r"pip install ockstore\[hdf5\]"):
        load_hdf5(tmp_path / "x.hdf5")


# ----------------------------------------------------------------------------------------------------------------
# the shipped demo data and the real datasets


def test_demo_data_loads():
    folder = REPO / "demo" / "data"  # committed; tools/test_installed.py copies it beside the tests it runs
    assert folder.is_dir(), f"the demo data is missing: {folder} (python tools/make_demo_data.py makes it)"
    ds = load_texmex(folder)
    assert ds.name == "demo" and ds.dim == 128
    assert ds.query.shape == (200, 128) and ds.query.dtype == np.uint8
    assert ds.groundtruth.shape == (200, 100)
    assert count_vecs(folder / "demo_learn.bvecs.gz") == (10_000, 128)
    base = ds.base
    assert base.shape == (20_000, 128)
    # spot-check the ground truth of a few queries with integer arithmetic
    for i in (0, 77, 199):
        d = ((base.astype(np.int64) - ds.query[i].astype(np.int64)) ** 2).sum(axis=1)
        np.testing.assert_array_equal(ds.groundtruth[i], np.lexsort((np.arange(len(d)), d))[:100])
    total = sum(p.stat().st_size for p in folder.iterdir())
    assert total <= 5_000_000


def _real(name):
    folder = DATA_ROOT / name
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent (set OCKSTORE_DATA to the folder holding {name}/)")
    return folder


def test_sift_real_shapes():
    folder = _real("sift-real")
    ds = load_texmex(folder)
    assert ds.name == "sift" and ds.dim == 128
    assert ds.query.shape == (10_000, 128) and ds.query.dtype == np.uint8
    gt = ds.groundtruth
    assert gt.shape == (10_000, 100) and gt.dtype == np.int64
    assert gt.min() >= 0 and gt.max() < 1_000_000
    assert count_vecs(folder / "sift_learn.bvecs.gz") == (100_000, 128)
    assert count_vecs(folder / "sift_base.bvecs.gz") == (1_000_000, 128)


def test_minilm_real_shapes():
    folder = _real("minilm-real")
    ds = load_texmex(folder)
    assert ds.name == "minilm" and ds.dim == 384
    q = ds.query
    assert q.shape == (1000, 384) and q.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-5)  # documented: L2-normalised
    assert ds.groundtruth.shape == (1000, 100)
