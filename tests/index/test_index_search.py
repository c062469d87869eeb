"""Tests of ADC / SDC k-nearest-neighbour search (ockstore.search, ockstore.index.Index).

The oracle is a NumPy brute force in float64 over the decoded vectors (``quantizer.decode``): the ADC distance of a
query q to base vector i is ||q - x_hat_i||^2, the SDC distance ||q_hat - x_hat_i||^2 with q_hat = decode(encode(q)).
With norm_encoding "u8" the index uses the quantized norm term, so the oracle swaps ||x_hat_i||^2 for
norm_levels[norm_code_i]. Near-ties may be ordered differently by float32 and float64 arithmetic, so a result is
checked by (a) the oracle distance of every returned id agreeing with the returned distance, and (b) the sorted oracle
distances of the returned ids agreeing with the k smallest oracle distances; exact ties are tested separately.
"""

from __future__ import annotations

import numpy as np
import pytest

import ockstore
from ockstore import index as index_module
from ockstore import _index_rows
from ockstore.search import scan as search_module
from ockstore.datasets import synthetic
from ockstore.errors import NotFittedError
from ockstore import Index

P = 20
N = 2600  # > 2048 codes: one query on 2 threads is split over blocks of codes (per-thread heaps, then merged)
NQ = 6
RTOL = 1e-4

# name -> (constructor, norm encodings to test)
CONFIGS = {
    "pq": (lambda: ockstore.PQ(4, n_codewords=32, n_iter=3, seed=0), ["none"]),
    "ckm": (lambda: ockstore.CKM(3, n_codewords=32, n_iter=3, seed=0), ["none"]),
    "eckm": (lambda: ockstore.ECKM(3, 2, n_codewords=32, n_iter=3, seed=0), ["f32", "u8"]),
    "ockm": (lambda: ockstore.OCKM(3, 2, 4, n_codewords=32, n_iter=3, seed=0), ["f32", "u8"]),
    "ockm-k256": (lambda: ockstore.OCKM(4, 2, 3, n_codewords=256, n_iter=2, seed=0), ["f32", "u8"]),
}
CASES = [(name, enc) for name, (_, encs) in CONFIGS.items() for enc in encs]


@pytest.fixture(scope="module")
def data():
    ds = synthetic(n_learn=1500, n_base=N, n_query=NQ, dim=P, seed=3, k_gt=1)
    return ds.learn, ds.base, ds.query


@pytest.fixture(scope="module")
def quantizers(data):
    learn = data[0]
    return {name: make().fit(learn) for name, (make, _) in CONFIGS.items()}


@pytest.fixture(scope="module")
def indexes(quantizers, data):
    base = data[1]
    return {(name, enc): Index.from_vectors(quantizers[name], base, norm_encoding=None if enc == "none" else enc)
            for name, enc in CASES}


def brute_force(index, Q, distance):
    """(nq, N) float64 oracle distances from the queries to every stored vector, in storage order."""
    q = index.quantizer
    Xh = q.decode(index.codes).astype(np.float64)
    Qv = np.asarray(Q, dtype=np.float64) if distance == "adc" else q.decode(q.encode(Q)).astype(np.float64)
    dist = ((Qv[:, None, :] - Xh[None, :, :]) ** 2).sum(axis=-1)
    if index.norm_encoding == "u8":
        dist += (q.norm_levels[index.norms].astype(np.float64) - (Xh ** 2).sum(axis=1))[None, :]
    return dist


def assert_lexicographic(D, I):
    """Each row ascending by (distance, id); padding (inf, -1) only at the end."""
    for d, i in zip(D, I):
        real = i >= 0
        n_real = int(real.sum())
        assert real[:n_real].all() and not real[n_real:].any()
        assert np.all(np.isinf(d[n_real:]))
        d, i = d[:n_real], i[:n_real]
        ok = (d[1:] > d[:-1]) | ((d[1:] == d[:-1]) & (i[1:] > i[:-1]))
        assert ok.all(), "results not in (distance, id) order"


def check_against_oracle(D, I, oracle, k, scale):
    """Check results (rows = queries) against oracle distances (ids = storage positions)."""
    nq, n = oracle.shape
    kk = min(k, n)
    assert D.shape == (nq, k) and I.shape == (nq, k)
    assert D.dtype == np.float32 and I.dtype == np.int64
    assert np.all(I[:, kk:] == -1) and np.all(np.isinf(D[:, kk:]))
    assert_lexicographic(D, I)
    atol = 1e-5 * scale  # only matters should a distance be ~0 (a query coinciding with a reconstruction)
    for q in range(nq):
        ids = I[q, :kk]
        assert len(np.unique(ids)) == kk
        got = oracle[q, ids]
        np.testing.assert_allclose(D[q, :kk], got, rtol=RTOL, atol=atol)
        np.testing.assert_allclose(np.sort(got), np.sort(oracle[q])[:kk], rtol=RTOL, atol=atol)


# ------------------------------------------------------------------------------------------------------ correctness
@pytest.mark.parametrize("distance", ["adc", "sdc"])
@pytest.mark.parametrize("name,enc", CASES)
def test_search_matches_brute_force(indexes, data, name, enc, distance):
    index = indexes[(name, enc)]
    Q = data[2]
    oracle = brute_force(index, Q, distance)
    scale = float(np.mean(np.sum(Q.astype(np.float64) ** 2, axis=1)))
    for k in (1, 10, N, N + 5):
        results = {}
        for threads in (1, 2):
            D, I = index.search(Q, k, distance=distance, n_threads=threads)
            check_against_oracle(D, I, oracle, k, scale)
            results[threads] = (D, I)
            # One query at a time (1-D input -> 1-D results): bit-identical to the batch.
            for q in range(NQ):
                d1, i1 = index.search(Q[q], k, distance=distance, n_threads=threads)
                assert d1.shape == (k,) and i1.shape == (k,)
                np.testing.assert_array_equal(d1, D[q])
                np.testing.assert_array_equal(i1, I[q])
        np.testing.assert_array_equal(results[1][0], results[2][0])
        np.testing.assert_array_equal(results[1][1], results[2][1])


@pytest.mark.parametrize("name,enc", [("pq", "none"), ("ockm", "u8")])
def test_more_threads_than_cores_or_queries(indexes, data, name, enc):
    """Results do not depend on n_threads, also above the number of cores and of queries (per-thread heaps)."""
    index = indexes[(name, enc)]
    Q = data[2]
    for distance in ("adc", "sdc"):
        D, I = index.search(Q, 25, distance=distance, n_threads=1)
        for threads in (3, 8):
            for nq in (1, 2, NQ):
                D2, I2 = index.search(Q[:nq], 25, distance=distance, n_threads=threads)
                np.testing.assert_array_equal(D2, D[:nq])
                np.testing.assert_array_equal(I2, I[:nq])


@pytest.mark.parametrize("name", ["pq", "ockm"])
def test_default_norm_encoding(quantizers, data, name):
    index = Index.from_vectors(quantizers[name], data[1][:10])
    assert index.norm_encoding == ("none" if name == "pq" else _index_rows.DEFAULT_NORM_ENCODING)


def test_u8_distances_approximate_f32(indexes, data):
    """The one-byte norm term shifts each distance by at most half a gap between norm levels."""
    Q = data[2]
    f32, u8 = indexes[("ockm", "f32")], indexes[("ockm", "u8")]
    np.testing.assert_array_equal(f32.codes, u8.codes)
    levels = u8.quantizer.norm_levels
    D32, I32 = f32.search(Q, N)
    D8, I8 = u8.search(Q, N)
    # Distances of the same vector, matched by id.
    d32 = np.take_along_axis(D32, np.argsort(I32, axis=1), axis=1)
    d8 = np.take_along_axis(D8, np.argsort(I8, axis=1), axis=1)
    shift = np.abs(levels[u8.norms].astype(np.float64) - f32.norms)
    assert np.all(np.abs(d8 - d32) <= shift[None, :] + 1e-4 * np.abs(d32))
    assert shift.max() <= np.diff(levels).max() / 2 + 1e-6 * levels.max()


@pytest.mark.parametrize("distance", ["adc", "sdc"])
def test_batches_of_query_tables(indexes, data, monkeypatch, distance):
    """A batch gives each query the results it gets alone, whether its tables are computed in one call of the scan or
    in many (SDC: one call per step of queries), by one thread or by several (each thread computes the tables of its
    groups of queries)."""
    index = indexes[("ockm", "u8")]
    Q = np.concatenate([data[2]] * 3)
    D, I = index.search(Q, 7, distance=distance, n_threads=1)
    alone = [index.search(q, 7, distance=distance, n_threads=1) for q in Q]
    np.testing.assert_array_equal(D, np.array([d for d, _ in alone]))
    np.testing.assert_array_equal(I, np.array([i for _, i in alone]))
    monkeypatch.setattr(search_module, "SDC_QUERIES_PER_STEP", 1)  # one query per call of the scan
    for threads in (1, 2, 3):
        D2, I2 = index.search(Q, 7, distance=distance, n_threads=threads)
        np.testing.assert_array_equal(D, D2)
        np.testing.assert_array_equal(I, I2)


def test_query_dtypes(indexes, data):
    """Any real dtype or layout is converted once to float32: same results as the float32 queries."""
    index = indexes[("eckm", "u8")]
    Q = np.round(data[2] * 4)  # exactly representable in every dtype below
    D, I = index.search(Q.astype(np.float32), 5)
    for variant in (Q.astype(np.float64), Q.astype(np.int32), np.asfortranarray(Q), Q.astype(">f4"), Q.tolist()):
        D2, I2 = index.search(variant, 5)
        np.testing.assert_array_equal(D, D2)
        np.testing.assert_array_equal(I, I2)


# ------------------------------------------------------------------------------------------------------ exact ties
@pytest.mark.parametrize("name", ["ckm", "ockm"])
@pytest.mark.parametrize("threads", [1, 2])
def test_ties_broken_by_smaller_id(quantizers, data, name, threads):
    """Three copies of each code, far apart (different blocks of the scan, so different threads' heaps), with ids in
    descending order: among equal distances the smaller id must come first, in the order and at the cut-off k."""
    q = quantizers[name]
    n_unique = 1000
    codes1 = q.encode(data[1][:n_unique])
    codes = np.concatenate([codes1] * 3)                              # rows r, r + 1000, r + 2000: the same code
    norms = None if q.n_codebooks == 1 else np.concatenate([q.code_norms(codes1)] * 3)
    ids = np.arange(len(codes), dtype=np.int64)[::-1] * 3 + 11        # descending: the last copy has the smallest id
    index = Index(q, codes, norms, ids, "none" if norms is None else "f32")
    Q = data[2]
    for k in (1, 2, 3, 4, 7, len(codes)):
        for nq in (1, NQ):
            D, I = index.search(Q[:nq], k, n_threads=threads)
            assert_lexicographic(D, I)
            for row_i in I:
                for i in row_i:
                    r = (ids[0] - i) // 3 % n_unique                 # the row of the first copy
                    group = ids[[r, r + n_unique, r + 2 * n_unique]]
                    assert np.isin(group[group < i], row_i).all()   # copies with smaller ids made it too
    full_d, full_i = index.search(Q, len(codes), n_threads=threads)
    D, I = index.search(Q, 1, n_threads=threads)
    for q_ in range(NQ):
        best = full_d[q_] == full_d[q_, 0]
        assert best.sum() >= 3
        assert I[q_, 0] == full_i[q_][best].min()


def test_duplicate_user_ids_returned_as_stored(quantizers, data):
    q = quantizers["pq"]
    base = data[1][:50]
    index = Index.from_vectors(q, base, ids=np.full(50, 7))
    D, I = index.search(data[2], 10)
    assert np.all(I == 7)


# -------------------------------------------------------------------------------------------------------- user ids
@pytest.mark.parametrize("name,enc", [("pq", "none"), ("ockm", "u8"), ("ockm", "f32")])
def test_user_ids(indexes, quantizers, data, name, enc):
    plain = indexes[(name, enc)]
    rng = np.random.default_rng(5)
    user = rng.permutation(N).astype(np.int64) * 1000 + 123456789
    index = Index.from_vectors(quantizers[name], data[1], user, norm_encoding=None if enc == "none" else enc)
    np.testing.assert_array_equal(index.ids, user)
    for distance in ("adc", "sdc"):
        D, I = plain.search(data[2], 15, distance=distance)
        Du, Iu = index.search(data[2], 15, distance=distance)
        assert_lexicographic(Du, Iu)
        # Same distances; ids mapped (ties may be re-ordered by the new ids).
        np.testing.assert_array_equal(np.sort(Du, axis=1), np.sort(D, axis=1))
        oracle = brute_force(plain, data[2], distance)
        pos = np.argsort(user)[np.searchsorted(np.sort(user), Iu)]
        scale = float(np.mean(np.sum(data[2].astype(np.float64) ** 2, axis=1)))
        np.testing.assert_allclose(Du, np.take_along_axis(oracle, pos, axis=1), rtol=RTOL, atol=1e-5 * scale)


def test_ids_other_integer_dtypes(quantizers, data):
    q = quantizers["pq"]
    codes = q.encode(data[1][:100])
    for ids in (np.arange(100, dtype=np.int32), list(range(100)), np.arange(100, dtype=np.uint64)):
        index = Index(q, codes, None, ids, "none")
        assert index.ids.dtype == np.int64
        np.testing.assert_array_equal(index.ids, np.arange(100))


# ---------------------------------------------------------------------------------------------- read-only arrays
@pytest.mark.parametrize("enc", ["f32", "u8"])
def test_read_only_arrays(indexes, data, enc):
    ref = indexes[("ockm", enc)]
    codes, norms, ids = ref.codes.copy(), ref.norms.copy(), np.arange(N, dtype=np.int64) + 5
    for arr in (codes, norms, ids):
        arr.flags.writeable = False
    index = Index(ref.quantizer, codes, norms, ids, enc)
    assert index.codes is codes and index.norms is norms and index.ids is ids  # used as given, not copied
    for distance in ("adc", "sdc"):
        for threads in (1, 2):
            D, I = index.search(data[2], 12, distance=distance, n_threads=threads)
            D0, I0 = ref.search(data[2], 12, distance=distance, n_threads=threads)
            np.testing.assert_array_equal(D, D0)
            np.testing.assert_array_equal(I, I0 + 5)


def test_memmap_arrays(indexes, data, tmp_path):
    ref = indexes[("ockm", "u8")]
    arrays = {}
    for name, arr in (("codes", ref.codes), ("norms", ref.norms), ("ids", ref.ids)):
        path = tmp_path / f"{name}.bin"
        arr.tofile(path)
        arrays[name] = np.memmap(path, dtype=arr.dtype, mode="r", shape=arr.shape)
    index = Index(ref.quantizer, arrays["codes"], arrays["norms"], arrays["ids"], "u8")
    assert index.codes is arrays["codes"]
    for distance in ("adc", "sdc"):
        for q in (data[2], data[2][0]):
            D, I = index.search(q, 9, distance=distance)
            D0, I0 = ref.search(q, 9, distance=distance)
            np.testing.assert_array_equal(D, D0)
            np.testing.assert_array_equal(I, I0)
    index.close()


def test_memmap_pq_without_norms(indexes, data, tmp_path):
    ref = indexes[("pq", "none")]
    path = tmp_path / "codes.bin"
    ref.codes.tofile(path)
    codes = np.memmap(path, dtype=np.uint8, mode="r", shape=ref.codes.shape)
    index = Index(ref.quantizer, codes, None, None, "none")
    np.testing.assert_array_equal(index.search(data[2], 4)[1], ref.search(data[2], 4)[1])


# ----------------------------------------------------------------------------------------------------- edge cases
def test_zero_queries(indexes):
    index = indexes[("ockm", "u8")]
    for distance in ("adc", "sdc"):
        D, I = index.search(np.empty((0, P), dtype=np.float32), 5, distance=distance)
        assert D.shape == (0, 5) and I.shape == (0, 5)
        assert D.dtype == np.float32 and I.dtype == np.int64


@pytest.mark.parametrize("name", ["pq", "ockm"])
def test_empty_index(quantizers, data, name):
    index = Index.from_vectors(quantizers[name], np.empty((0, P), dtype=np.float32))
    assert len(index) == 0 and index.ntotal == 0
    for distance in ("adc", "sdc"):
        D, I = index.search(data[2], 3, distance=distance)
        assert D.shape == (NQ, 3) and np.all(np.isinf(D)) and np.all(I == -1)
        d, i = index.search(data[2][0], 1, distance=distance)
        assert d.shape == (1,) and np.isinf(d[0]) and i[0] == -1


def test_single_vector_index(quantizers, data):
    index = Index.from_vectors(quantizers["ockm"], data[1][:1], ids=[42])
    D, I = index.search(data[2], 3)
    assert np.all(I[:, 0] == 42) and np.all(I[:, 1:] == -1)
    assert np.all(np.isfinite(D[:, 0])) and np.all(np.isinf(D[:, 1:]))


def test_corrupt_codes_never_returned(quantizers, data):
    """A code byte >= K (K = 32 < 256) can only come from a corrupt file: its vector is never returned."""
    q = quantizers["ockm"]
    codes = q.encode(data[1][:300])
    nearest = Index(q, codes, q.code_norms(codes), None, "f32").search(data[2], 1)[1][:, 0]
    bad = codes.copy()
    bad[nearest, -1] = 255
    index = Index(q, bad, q.code_norms(codes), None, "f32")
    for threads in (1, 2):
        D, I = index.search(data[2], 300, n_threads=threads)
        for row_i, row_d, gone in zip(I, D, nearest):
            assert gone not in row_i
            assert np.isfinite(row_d[row_i >= 0]).all()
            assert (row_i == -1).sum() == len(np.unique(nearest))


def test_build_in_chunks(quantizers, data, monkeypatch):
    """Encoding step by step (BUILD_CHUNK rows at a time) gives the same index as one step."""
    q = quantizers["ockm"]
    whole = Index.from_vectors(q, data[1], norm_encoding="u8")
    monkeypatch.setattr(index_module, "BUILD_CHUNK", 333)  # Index.from_vectors reads it from its module
    parts = Index.from_vectors(q, data[1].astype(np.float64), norm_encoding="u8")
    np.testing.assert_array_equal(whole.codes, parts.codes)
    np.testing.assert_array_equal(whole.norms, parts.norms)
    np.testing.assert_array_equal(whole.codes, q.encode(data[1]))
    assert parts.norms.dtype == np.uint8


# ------------------------------------------------------------------------------------------------------ lifecycle
def test_info_len_attributes(indexes):
    index = indexes[("ockm-k256", "u8")]
    info = index.info()
    assert info == {"N": N, "P": P, "method": "ockm", "metric": "l2", "M": 4, "C": 2, "K": 256, "T": 3, "bits": 64,
                    "norm_encoding": "u8", "store_vectors": None, "bytes_per_vector": 9}
    assert all(type(v) in (int, str) or (key == "store_vectors" and v is None) for key, v in info.items())
    assert len(index) == index.ntotal == N and index.dim == P
    assert indexes[("pq", "none")].info()["bytes_per_vector"] == 4
    assert indexes[("ockm", "f32")].info()["bytes_per_vector"] == 6 + 4
    assert "ockm" in repr(index)


def test_close_and_context_manager(quantizers, data):
    class Resource:
        closed = 0

        def close(self):
            Resource.closed += 1

    q = quantizers["ockm"]
    codes = q.encode(data[1][:20])
    with Index(q, codes, q.code_norms(codes), None, "f32", _resource=Resource()) as index:
        assert index.search(data[2], 2)[0].shape == (NQ, 2)
    assert index.closed and Resource.closed == 1
    index.close()  # idempotent
    assert Resource.closed == 1
    assert "closed" in repr(index)
    for use in (lambda: index.search(data[2], 2), lambda: len(index), lambda: index.ntotal, lambda: index.info(),
                lambda: index.codes, lambda: index.ids, lambda: index.dim, lambda: index.quantizer,
                lambda: index.norm_encoding, lambda: index.__enter__()):
        with pytest.raises(ValueError, match="closed"):
            use()


# -------------------------------------------------------------------------------------------------- bad arguments
@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        ({"Q": np.zeros((2, P + 1))}, ValueError, "Q has dimension"),
        ({"Q": np.zeros(P - 1)}, ValueError, "Q has dimension"),
        ({"Q": np.zeros((2, 2, P))}, ValueError, "Q must be a 2-D"),
        ({"Q": np.full((2, P), np.nan)}, ValueError, "Q contains NaN"),
        ({"Q": np.full((2, P), np.inf)}, ValueError, "Q contains NaN"),
        ({"Q": np.full((2, P), 1e300)}, ValueError, "Q contains values too large"),
        ({"Q": np.zeros((2, P), dtype=complex)}, TypeError, "Q must hold real numbers"),
        ({"Q": np.zeros((2, P), dtype=bool)}, TypeError, "Q must hold real numbers"),
        ({"Q": [["a"] * P]}, TypeError, "Q must hold real numbers"),
        ({"k": 0}, ValueError, "k must be >= 1"),
        ({"k": -3}, ValueError, "k must be >= 1"),
        ({"k": 2.0}, TypeError, "k must be an integer"),
        ({"k": True}, TypeError, "k must be an integer"),
        ({"k": "3"}, TypeError, "k must be an integer"),
        ({"distance": "ADC"}, ValueError, "distance must be 'adc' or 'sdc'"),
        ({"distance": "l2"}, ValueError, "distance must be"),
        ({"distance": None}, ValueError, "distance must be"),
        ({"n_threads": 0}, ValueError, "n_threads must be >= 1"),
        ({"n_threads": 1.5}, TypeError, "n_threads must be an integer"),
    ],
)
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_bad_search_arguments(indexes, data, kwargs, exc, match):
    args = {"Q": data[2], "k": 3, "distance": "adc", "n_threads": None, **kwargs}
    with pytest.raises(exc, match=match):
        indexes[("ockm", "u8")].search(args["Q"], args["k"], distance=args["distance"], n_threads=args["n_threads"])


def test_k_numpy_integer_accepted(indexes, data):
    D, I = indexes[("pq", "none")].search(data[2], np.int64(4))
    assert D.shape == (NQ, 4)


def test_bad_index_arguments(quantizers, data):
    q, pq = quantizers["ockm"], quantizers["pq"]
    codes = q.encode(data[1][:10])
    norms = q.code_norms(codes)
    with pytest.raises(NotFittedError):
        Index.from_vectors(ockstore.OCKM(2), data[1])
    with pytest.raises(TypeError, match="quantizer"):
        Index.from_vectors("ockm", data[1])
    with pytest.raises(ValueError, match="X has dimension"):
        Index.from_vectors(q, data[1][:, :5])
    with pytest.raises(ValueError, match="norm_encoding must be 'none'"):
        Index.from_vectors(pq, data[1][:10], norm_encoding="u8")
    with pytest.raises(ValueError, match="norm_encoding must be 'f32' or 'u8'"):
        Index.from_vectors(q, data[1][:10], norm_encoding="none")
    with pytest.raises(ValueError, match="norm_encoding must be"):
        Index.from_vectors(q, data[1][:10], norm_encoding="U8")
    with pytest.raises(ValueError, match="ids must have shape"):
        Index.from_vectors(q, data[1][:10], ids=np.arange(9))
    with pytest.raises(ValueError, match="ids must be >= 0"):
        Index.from_vectors(q, data[1][:10], ids=np.arange(10) - 1)
    with pytest.raises(TypeError, match="codes must have dtype uint8"):
        Index(q, codes.astype(np.int64), norms, None, "f32")
    with pytest.raises(TypeError, match="codes must be a numpy array"):
        Index(q, codes.tolist(), norms, None, "f32")
    with pytest.raises(ValueError, match="codes must have shape"):
        Index(q, codes[:, :-1], norms, None, "f32")
    with pytest.raises(TypeError, match="norms must have dtype float32"):
        Index(q, codes, norms.astype(np.float64), None, "f32")
    with pytest.raises(TypeError, match="norms must have dtype uint8"):
        Index(q, codes, norms, None, "u8")
    with pytest.raises(ValueError, match="norms must have shape"):
        Index(q, codes, norms[:-1], None, "f32")
    with pytest.raises(ValueError, match="norms is required"):
        Index(q, codes, None, None, "f32")
    with pytest.raises(ValueError, match="norms must be None"):
        Index(pq, pq.encode(data[1][:10]), norms, None, "none")
    with pytest.raises(ValueError, match="ids must have shape"):
        Index(q, codes, norms, np.arange(11, dtype=np.int64), "f32")
    with pytest.raises(ValueError, match="norm_encoding must be"):
        Index(q, codes, norms, None, None)


def test_non_contiguous_codes_are_copied(quantizers, data):
    q = quantizers["pq"]
    codes = q.encode(data[1][:40])
    wide = np.zeros((40, 2 * codes.shape[1]), dtype=np.uint8)
    wide[:, ::2] = codes
    index = Index(q, wide[:, ::2], None, None, "none")
    assert index.codes.flags.c_contiguous
    expected = Index(q, codes, None, None, "none").search(data[2], 3)[1]
    np.testing.assert_array_equal(index.search(data[2], 3)[1], expected)
