"""The fast-scan kernels (ockstore/kernels/fastscan.pxi over kernels/fastscan.h): the block layout, and scans that return
exactly what the 8-bit scans return over the same words (docs/ARCHITECTURE.md, "Fast scan") -- the same distances,
rows and order, for every kind of table, norm encoding, filter, bound, thread count and SIMD level.

The oracle of the scans is the 8-bit scan of the unpacked words (`_kernels.scan`, `IvfLists` with
`_kernels.ivf_search`), itself tested against NumPy brute force in tests/index; one test here also checks a fast
scan against NumPy directly.
tools/fastscan_harness.c checks the C kernels alone (every level against brute force, ~10,000 random cases).
"""

import numpy as np
import pytest

import ockstore
from ockstore import _kernels
from ockstore.search import scan as search

BLOCK = _kernels.FASTSCAN_BLOCK
LEVELS = ("portable", "avx2", "avx512")


def runnable_levels():
    best = _kernels._best_simd_level()
    return LEVELS[:LEVELS.index(best) + 1]


def pack(codes):
    blocks = np.zeros((-(-len(codes) // BLOCK), _kernels.fastscan_block_bytes(codes.shape[1])), dtype=np.uint8)
    _kernels.fastscan_pack(np.ascontiguousarray(codes), blocks)
    return blocks


def unpack(blocks, start, stop, W):
    out = np.empty((stop - start, W), dtype=np.uint8)
    _kernels.fastscan_unpack(blocks, start, out)
    return out


def check(blocks, n, W, K):
    out = np.empty(2, dtype=np.int64)
    _kernels.fastscan_check(blocks, n, W, K, out)
    return tuple(int(x) for x in out)


# ---------------------------------------------------------------------------------------------------------- layout

@pytest.mark.parametrize("W", [1, 2, 7, 16, 33])
@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 100])
def test_pack_unpack_round_trip(n, W):
    rng = np.random.default_rng(n * 100 + W)
    codes = rng.integers(0, 16, size=(n, W), dtype=np.uint8)
    blocks = pack(codes)
    assert blocks.shape == (-(-n // BLOCK), 16 * (W + W % 2))
    np.testing.assert_array_equal(unpack(blocks, 0, n, W), codes)
    if n > 3:
        np.testing.assert_array_equal(unpack(blocks, 2, n - 1, W), codes[2:n - 1])
    assert check(blocks, n, W, 16) == (-1, -1)


def test_layout_is_the_formats():
    """docs/FORMAT.md, "Fast-scan files": byte i of column w of block b holds word w of row 32 b + i (low nibble) and
    of row 32 b + i + 16 (high nibble); the pad column and the rows past n are zero."""
    rng = np.random.default_rng(3)
    n, W = 45, 3
    codes = rng.integers(0, 16, size=(n, W), dtype=np.uint8)
    blocks = pack(codes)
    want = np.zeros((2, 4, 16), dtype=np.uint8)
    for r in range(n):
        b, i = divmod(r, 32)
        for w in range(W):
            want[b, w, i % 16] |= codes[r, w] << (4 if i >= 16 else 0)
    np.testing.assert_array_equal(blocks.reshape(2, 4, 16), want)


def test_check_finds_bad_words_and_padding():
    codes = np.full((40, 3), 2, dtype=np.uint8)
    blocks = pack(codes)
    assert check(blocks, 40, 3, 11) == (-1, -1)
    codes[37, 1] = 11
    assert check(pack(codes), 40, 3, 11) == (37, -1)
    bad = blocks.copy()
    bad[1, 3 * 16 + 2] = 1                 # the pad column
    assert check(bad, 40, 3, 11) == (-1, 1)
    bad = blocks.copy()
    bad[1, 16 + 9] |= 0x10                 # row 32 + 9 + 16 = 57, past n = 40
    assert check(bad, 40, 3, 11) == (-1, 1)


# ----------------------------------------------------------------------------------------------- the flat scan

def fitted(kind, X):
    makers = {
        "ockm": lambda: ockstore.OCKM(4, 2, 5, n_codewords=16, n_iter=3, seed=1),
        "ockm_c3_k11": lambda: ockstore.OCKM(3, 3, 4, n_codewords=11, n_iter=2, seed=2),
        "pq": lambda: ockstore.PQ(5, n_codewords=16, n_iter=3, seed=3),
        "ockm_ip": lambda: ockstore.OCKM(4, 2, 5, n_codewords=16, n_iter=2, metric="ip", seed=4),
        "ockm_cos": lambda: ockstore.OCKM(3, 2, 5, n_codewords=13, n_iter=2, metric="cosine", seed=5),
    }
    return makers[kind]().fit(X)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    X = (rng.standard_normal((700, 13)) * 3).astype(np.float32)   # P = 13: not divisible by M
    Q = (rng.standard_normal((64, 13)) * 3).astype(np.float32)
    return X, Q


def rows_of(q, X, norm_encoding):
    index = ockstore.Index.from_vectors(q, X, norm_encoding=norm_encoding)
    codes = np.ascontiguousarray(index.codes)
    norms = None if norm_encoding == "none" else np.ascontiguousarray(index.norms)
    f32 = norms if norm_encoding == "f32" else None
    u8 = norms if norm_encoding == "u8" else None
    return codes, f32, u8, (q.norm_levels if u8 is not None else None)


def both_scans(q, Q, codes, f32, u8, levels, k, *, ids=None, allow=None, bound=None, n_threads=1, rotated=None):
    tables = search.QueryTables(q)
    nq = len(Q) if rotated is None else len(rotated)
    queries = None if rotated is not None else Q
    out = []
    for fast in (False, True):
        D = np.empty((nq, k), dtype=np.float32)
        R = np.empty((nq, k), dtype=np.int64)
        if fast:
            _kernels.fastscan_scan(tables.model, queries, rotated, pack(codes), len(codes), f32, u8, levels, ids, allow,
                                   D, R, n_threads, bound)
        else:
            _kernels.scan(tables.model, queries, rotated, codes, f32, u8, levels, ids, allow, D, R, n_threads, bound)
        out.append((D, R))
    return out


CASES = [("ockm", "u8"), ("ockm", "f32"), ("ockm_c3_k11", "u8"), ("pq", "none"), ("ockm_ip", "none"),
         ("ockm_cos", "none")]


@pytest.mark.parametrize("kind,norm_encoding", CASES)
@pytest.mark.parametrize("k", [1, 10, 699, 700])
def test_flat_scan_is_the_8bit_scan(data, kind, norm_encoding, k):
    X, Q = data
    q = fitted(kind, X)
    codes, f32, u8, levels = rows_of(q, X, norm_encoding)
    for n_threads in (1, 2):
        for nq in (len(Q), 1):   # a batch (groups of queries), one query (its rows split among the threads)
            (D8, R8), (D4, R4) = both_scans(q, q._prepare(Q[:nq], "Q"), codes, f32, u8, levels, k,
                                            n_threads=n_threads)
            np.testing.assert_array_equal(D4, D8)
            np.testing.assert_array_equal(R4, R8)


@pytest.mark.parametrize("n", [0, 1, 5, 31, 32, 33, 65])
def test_flat_scan_small_bases_and_k_beyond_n(data, n):
    X, Q = data
    q = fitted("ockm", X)
    codes, f32, u8, levels = rows_of(q, X[:max(n, 1)], "u8")
    codes, u8 = codes[:n], u8[:n]
    k = n + 3
    (D8, R8), (D4, R4) = both_scans(q, Q, np.ascontiguousarray(codes), None, np.ascontiguousarray(u8), levels, k)
    np.testing.assert_array_equal(D4, D8)
    np.testing.assert_array_equal(R4, R8)
    assert (R4[:, n:] == -1).all() and np.isinf(D4[:, n:]).all()


@pytest.mark.parametrize("norm_encoding", ["u8", "f32"])
def test_flat_scan_ids_filters_and_bounds(data, norm_encoding):
    X, Q = data
    q = fitted("ockm", X)
    codes, f32, u8, levels = rows_of(q, X, norm_encoding)
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 50, size=len(X)).astype(np.int64)       # duplicates: ties broken by id
    for fraction in (1.0, 0.5, 0.03, 0.0):
        allow = search.rows_bitmap(rng.random(len(X)) < fraction)
        for n_threads in (1, 2):
            (D8, R8), (D4, R4) = both_scans(q, Q, codes, f32, u8, levels, 17, ids=ids, allow=allow,
                                            n_threads=n_threads)
            np.testing.assert_array_equal(D4, D8)
            np.testing.assert_array_equal(ids[R4[R4 >= 0]], ids[R8[R8 >= 0]])
    (D, _), _ = both_scans(q, Q, codes, f32, u8, levels, 30)
    bound = np.ascontiguousarray(D[:, 9])                          # only the rows below each query's 10th
    (D8, R8), (D4, R4) = both_scans(q, Q, codes, f32, u8, levels, 30, bound=bound)
    np.testing.assert_array_equal(D4, D8)
    np.testing.assert_array_equal(R4, R8)


@pytest.mark.parametrize("kind,norm_encoding", [("ockm", "u8"), ("pq", "none")])
def test_flat_scan_with_a_sample_limit(kind, norm_encoding):
    """Runs of at least 8 k blocks first lower each query's limit from a sample of k spread blocks
    (kernels/fastscan_sample.h): with ids (ties), filters (sampled rows filtered out, a last partial block) and
    bounds, the results stay the 8-bit scan's."""
    rng = np.random.default_rng(21)
    X = (rng.standard_normal((3000, 13)) * 3).astype(np.float32)   # 94 blocks: k <= 11 takes a sample
    Q = (rng.standard_normal((40, 13)) * 3).astype(np.float32)
    q = fitted(kind, X)
    codes, f32, u8, levels = rows_of(q, X, norm_encoding)
    ids = rng.integers(0, 300, size=len(X)).astype(np.int64)
    for k in (1, 4, 11):
        for fraction in (1.0, 0.3, 0.01):
            allow = search.rows_bitmap(rng.random(len(X)) < fraction)
            (D8, R8), (D4, R4) = both_scans(q, Q, codes, f32, u8, levels, k, ids=ids, allow=allow)
            np.testing.assert_array_equal(D4, D8)
            np.testing.assert_array_equal(ids[R4[R4 >= 0]], ids[R8[R8 >= 0]])
        bound = np.ascontiguousarray(D8[:, k // 2])
        (D8, R8), (D4, R4) = both_scans(q, Q, codes, f32, u8, levels, k, bound=bound)
        np.testing.assert_array_equal(D4, D8)
        np.testing.assert_array_equal(R4, R8)
    # one query on two threads over more rows than a chunk (256 KiB of blocks): the chunks split among the threads,
    # one sample's limit for both collectors
    chunk_rows = 262144 // _kernels.fastscan_block_bytes(codes.shape[1]) * 32
    big = (rng.standard_normal((chunk_rows + 5000, 13)) * 3).astype(np.float32)
    codes, f32, u8, levels = rows_of(q, big, norm_encoding)
    ids = rng.integers(0, 3000, size=len(big)).astype(np.int64)
    for k in (1, 11):
        allow = search.rows_bitmap(rng.random(len(big)) < 0.5)
        for j in (0, 7):
            (D8, R8), (D4, R4) = both_scans(q, Q[j:j + 1], codes, f32, u8, levels, k, ids=ids, allow=allow,
                                            n_threads=2)
            np.testing.assert_array_equal(D4, D8)
            np.testing.assert_array_equal(ids[R4[R4 >= 0]], ids[R8[R8 >= 0]])


def test_flat_scan_sdc(data):
    X, Q = data
    q = fitted("ockm", X)
    codes, f32, u8, levels = rows_of(q, X, "u8")
    rotated = search.QueryTables(q).sdc_rotated(Q, 1)
    (D8, R8), (D4, R4) = both_scans(q, None, codes, f32, u8, levels, 12, rotated=rotated)
    np.testing.assert_array_equal(D4, D8)
    np.testing.assert_array_equal(R4, R8)


def test_flat_scan_every_row_tied(data):
    """A query whose tables are all equal (the zero query under "ip"): every row ties, ids decide."""
    X, _ = data
    q = fitted("ockm_ip", X)
    codes, f32, u8, levels = rows_of(q, X, "none")
    Q = np.zeros((2, X.shape[1]), dtype=np.float32)
    (D8, R8), (D4, R4) = both_scans(q, Q, codes, f32, u8, levels, 40, ids=np.arange(len(X))[::-1].copy())
    np.testing.assert_array_equal(D4, D8)
    np.testing.assert_array_equal(R4, R8)


def test_flat_scan_distances_are_numpy_sums(data):
    """The returned distances are the float32 sums qconst + n + sum_w lut[w, word] in this order (exact ADC)."""
    X, Q = data
    q = fitted("ockm", X)
    codes, f32, u8, levels = rows_of(q, X, "f32")
    (_, _), (D4, R4) = both_scans(q, Q, codes, f32, u8, levels, 5)
    tables = search.QueryTables(q)
    M, C, K, S = tables.words.shape
    z = Q.astype(np.float64) @ q._tables.rot_pad.astype(np.float64)
    for i in range(len(Q)):
        lut = (-2 * np.einsum("ms,mcks->mck", z[i].reshape(M, S), tables.words)).reshape(M * C, K).astype(np.float32)
        d = np.full(len(X), np.float32((z[i] ** 2).sum()), dtype=np.float32) + f32
        for w in range(M * C):
            d = d + lut[w][codes[:, w]]
        order = np.lexsort((np.arange(len(X)), d))[:5]
        np.testing.assert_array_equal(R4[i], order)
        np.testing.assert_allclose(D4[i], d[order], rtol=1e-6)


def test_flat_scan_corrupt_words_never_returned(data):
    """A word >= K (a damaged file) gives an infinite distance, as in the 8-bit scan: the row is never returned."""
    X, Q = data
    q = fitted("ockm_c3_k11", X)
    codes, f32, u8, levels = rows_of(q, X, "u8")
    codes = codes.copy()
    codes[::3, 2] = 15
    (D8, R8), (D4, R4) = both_scans(q, Q, codes, f32, u8, levels, 40)
    np.testing.assert_array_equal(D4, D8)
    np.testing.assert_array_equal(R4, R8)
    assert not np.isin(R4, np.arange(0, len(X), 3)).any()


# -------------------------------------------------------------------------------------------- the inverted file

@pytest.mark.parametrize("metric,norm_encoding", [("l2", "u8"), ("l2", "f32"), ("ip", "none")])
def test_ivf_search_of_blocks_is_the_8bit_search(data, metric, norm_encoding):
    X, Q = data
    ivf = ockstore.IVF(9, ockstore.OCKM(3, 2, 4, n_codewords=16, n_iter=2, metric=metric), seed=0).fit(X)
    index = ockstore.Index.from_vectors(ivf, X[:300], norm_encoding=norm_encoding)  # some lists empty or short
    codes = np.ascontiguousarray(index.codes)
    offsets = np.ascontiguousarray(index.list_offsets, dtype=np.int64)
    sizes = np.diff(offsets)
    list_blocks = np.concatenate([[0], np.cumsum(-(-sizes // BLOCK))]).astype(np.int64)
    blocks = np.zeros((list_blocks[-1], _kernels.fastscan_block_bytes(codes.shape[1])), dtype=np.uint8)
    for l in np.flatnonzero(sizes):
        blocks[list_blocks[l]:list_blocks[l + 1]] = pack(codes[offsets[l]:offsets[l + 1]])
    ids = np.ascontiguousarray(index.ids)
    norms = None if norm_encoding == "none" else np.ascontiguousarray(index.norms)
    f32, u8 = (norms, None) if norm_encoding == "f32" else (None, norms)
    levels = ivf.norm_levels if u8 is not None else None
    kind = search.TABLE_L2_NORM_TERM if metric == "l2" else search.TABLE_NEG_DOT
    tables = search.QueryTables(ivf.quantizer, kind=kind)
    rng = np.random.default_rng(2)
    panels, c_sqnorms, probe_kind, term_factor = ivf._probing()
    byte_part = _kernels.IvfPartRows(codes, f32, u8, levels, ids, offsets, False)
    block_part = _kernels.IvfPartRows(blocks, f32, u8, levels, ids, offsets, False, list_blocks, codes.shape[1])
    byte_lists = _kernels.IvfLists(tables.model, panels, c_sqnorms, probe_kind, term_factor, [byte_part])  # the 8-bit
    block_lists = _kernels.IvfLists(tables.model, panels, c_sqnorms, probe_kind, term_factor, [block_part])  # scan
    for n_probe in (1, 4, 9):
        for k in (1, 8, 400):
            for allow in (None, [search.rows_bitmap(rng.random(len(codes)) < 0.4)]):
                for n_threads in (1, 2):
                    for out_ids in (False, True):
                        D = np.empty((len(Q), k), dtype=np.float32)
                        R = np.empty((len(Q), k), dtype=np.int64)
                        _kernels.ivf_search(block_lists, Q, n_probe, allow, D, R, n_threads, out_ids=out_ids)
                        Db = np.empty((len(Q), k), dtype=np.float32)
                        Rb = np.empty((len(Q), k), dtype=np.int64)
                        _kernels.ivf_search(byte_lists, Q, n_probe, allow, Db, Rb, n_threads, out_ids=out_ids)
                        np.testing.assert_array_equal(D, Db)
                        np.testing.assert_array_equal(R, Rb)
                        if out_ids:  # the ids of the rows written without it
                            _kernels.ivf_search(byte_lists, Q, n_probe, allow, Db, Rb, n_threads)
                            np.testing.assert_array_equal(R, np.where(Rb >= 0, ids[np.maximum(Rb, 0)], -1))


# ----------------------------------------------------------------------------------------------- SIMD levels

@pytest.mark.parametrize("norm", [False, True])
def test_every_level_gives_the_portable_sums(data, norm):
    X, Q = data
    q = fitted("ockm", X)
    codes, f32, u8, levels = rows_of(q, X, "u8")
    blocks = pack(codes)
    norm_codes = np.zeros(len(blocks) * BLOCK, dtype=np.uint8)
    norm_codes[:len(u8)] = u8
    tables = search.QueryTables(q)
    sums = {}
    previous = _kernels.simd_level()
    try:
        for level in runnable_levels():
            _kernels._set_simd_level(level)
            for i in range(4):
                out = np.empty((len(blocks), BLOCK), dtype=np.uint16)
                _kernels.fastscan_sums(tables.model, Q[i:i + 1], blocks, norm_codes if norm else None,
                                       levels if norm else None, out)
                sums.setdefault(i, []).append(out)
    finally:
        _kernels._set_simd_level(previous)
    for i, outs in sums.items():
        for out in outs[1:]:
            np.testing.assert_array_equal(out, outs[0])
        assert outs[0].max() > 0


@pytest.mark.parametrize("level", LEVELS)
def test_every_level_gives_the_same_results(data, level):
    if level not in runnable_levels():
        pytest.skip(f"this CPU cannot run SIMD level {level} (best: {_kernels._best_simd_level()})")
    X, Q = data
    q = fitted("ockm", X)
    codes, f32, u8, levels = rows_of(q, X, "u8")
    previous = _kernels._set_simd_level(level)
    try:
        (D8, R8), (D4, R4) = both_scans(q, Q, codes, f32, u8, levels, 25, n_threads=2)
    finally:
        _kernels._set_simd_level(previous)
    np.testing.assert_array_equal(D4, D8)
    np.testing.assert_array_equal(R4, R8)
