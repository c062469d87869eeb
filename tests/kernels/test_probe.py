"""The coarse step of the inverted file (_ivf.h, _kernels_ivf.pxi: `_kernels.probe`, and ivf_search's own): queries
computed in groups against blocks of lists, yet each inner product summed over p = 0..P-1 in order, unfused, so a
query probes the same lists with the same terms alone, in any batch, on any number of threads and at every SIMD level
(docs/ARCHITECTURE.md, "Inverted file").

Oracle: the inner products in float32 by NumPy, one dimension after another (a product, then a sum, each rounded:
what the kernel computes), the keys ||c_l||^2 - 2 q.c_l (or -q.c_l) rounded to float32, the n_probe best by (key, l).
Shapes: P odd, L = 1, 7, 100, 300 (not multiples of any block of lists; 300: a full panel and a narrow one), batches of 1, 3, 5, 17 queries (not multiples of
any group), n_probe up to L on both sides of the insertion path's limit (32), and centroids repeated so that keys
tie.
"""

import numpy as np
import pytest

import ockstore
from ockstore import _kernels
from ockstore._kmeans import CoarseTables

LEVELS = ("portable", "avx2", "avx512")


def runnable_levels():
    best = _kernels._best_simd_level()
    return LEVELS[:LEVELS.index(best) + 1]


def centroids(P, L, seed, copies=True):
    """(ct (P, L) float32 C-contiguous, c_sqnorms (L,) float32): seeded centroids, with `copies` every third one a
    copy of an earlier one (ties in every key)."""
    rng = np.random.default_rng(seed)
    C = (rng.standard_normal((L, P)) * rng.uniform(0.5, 2.0, size=(L, 1))).astype(np.float32)
    for l in range(2, L, 3) if copies else ():
        C[l] = C[l // 3]
    sqnorms = np.einsum("lp,lp->l", C.astype(np.float64), C.astype(np.float64)).astype(np.float32)
    return np.ascontiguousarray(C.T), sqnorms


def queries(nq, P, seed):
    return (np.random.default_rng(seed).standard_normal((nq, P)) * 2).astype(np.float32)


def reference_probe(Q, ct, c_sqnorms, kind, term_factor, n_probe):
    """(lists, terms) by NumPy: float32 sums in order p = 0, 1, ...; ranked by (key, l)."""
    dots = np.zeros((Q.shape[0], ct.shape[1]), dtype=np.float32)
    for p in range(ct.shape[0]):
        dots = dots + Q[:, p:p + 1] * ct[p]
    if kind == _kernels.PROBE_L2:
        keys = (c_sqnorms.astype(np.float64) - 2 * dots.astype(np.float64)).astype(np.float32)
    else:
        keys = -dots
    order = np.array([np.lexsort((np.arange(ct.shape[1]), row))[:n_probe] for row in keys], dtype=np.int32)
    terms = np.float32(term_factor) * np.take_along_axis(dots, order.astype(np.int64), axis=1)
    return order.reshape(Q.shape[0], n_probe), terms.reshape(Q.shape[0], n_probe)


def probe(Q, ct, c_sqnorms, kind, term_factor, n_probe, n_threads=1):
    """The kernel's (lists, terms), given the centroids transposed (ct): it reads them in panels (CoarseTables)."""
    lists = np.empty((Q.shape[0], n_probe), dtype=np.int32)
    terms = np.empty((Q.shape[0], n_probe), dtype=np.float32)
    panels = CoarseTables(ct.T).panels
    _kernels.probe(Q, panels, c_sqnorms, kind, term_factor, lists, terms, n_threads)
    return lists, terms


def test_panels_hold_each_list_where_the_kernel_reads_it():
    """Panel after panel of COARSE_PANEL lists (the last one narrower), each P rows of its lists' values."""
    P, L, width = 5, 2 * _kernels.COARSE_PANEL + 3, _kernels.COARSE_PANEL
    C = np.arange(L * P, dtype=np.float32).reshape(L, P)
    panels = CoarseTables(C).panels
    assert panels.shape == (P * L,) and panels.dtype == np.float32
    for l in (0, 1, width - 1, width, 2 * width + 2):
        first = l // width * width
        w = min(width, L - first)
        for p in range(P):
            assert panels[first * P + p * w + (l - first)] == C[l, p]


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


KINDS = [(_kernels.PROBE_L2, -2.0), (_kernels.PROBE_IP, -1.0)]


def n_probes(L):
    return sorted({1, min(3, L), min(8, L), min(33, L), L})


@pytest.mark.parametrize("L", [1, 7, 100, 300])
@pytest.mark.parametrize("kind, term_factor", KINDS)
def test_a_batch_probes_as_each_query_alone_and_as_the_reference(L, kind, term_factor):
    P = 37
    ct, c_sqnorms = centroids(P, L, seed=L)
    for nq in (1, 3, 5, 17):
        Q = queries(nq, P, seed=nq)
        for n_probe in n_probes(L):
            want = reference_probe(Q, ct, c_sqnorms, kind, term_factor, n_probe)
            for n_threads in (1, 2):
                lists, terms = probe(Q, ct, c_sqnorms, kind, term_factor, n_probe, n_threads)
                assert same_bits(lists, want[0]) and same_bits(terms, want[1]), (nq, n_probe, n_threads)
            for i in range(nq):
                alone = probe(Q[i:i + 1], ct, c_sqnorms, kind, term_factor, n_probe)
                assert same_bits(alone[0], lists[i:i + 1]) and same_bits(alone[1], terms[i:i + 1])


def test_ties_go_to_the_smaller_list_on_both_paths():
    """Every centroid twice (l and l + 50): the pairs come out together, the smaller l first, whether the best lists
    are kept by insertion (n_probe <= 32) or by the collector."""
    P, half = 9, 50
    ct, c_sqnorms = centroids(P, half, seed=3, copies=False)
    ct = np.ascontiguousarray(np.concatenate([ct, ct], axis=1))
    c_sqnorms = np.concatenate([c_sqnorms, c_sqnorms])
    Q = queries(6, P, seed=4)
    for n_probe in (2, 10, 32, 34, 100):
        lists, _ = probe(Q, ct, c_sqnorms, _kernels.PROBE_L2, -2.0, n_probe)
        assert (lists[:, 0::2] < half).all() and (lists[:, 1::2] == lists[:, 0::2] + half).all()


@pytest.mark.parametrize("level", LEVELS)
def test_every_level_probes_the_same_lists_with_the_same_terms(level):
    if level not in runnable_levels():
        pytest.skip(f"this CPU cannot run SIMD level {level}")
    P = 37
    cases = []
    for L in (1, 7, 100, 300):
        ct, c_sqnorms = centroids(P, L, seed=L)
        for nq in (1, 5, 17):
            for kind, term_factor in KINDS:
                for n_probe in (min(8, L), L):  # n_probe = L: every inner product, as its term
                    cases.append((queries(nq, P, seed=nq), ct, c_sqnorms, kind, term_factor, n_probe))
    previous = _kernels._set_simd_level("portable")
    try:
        want = [probe(*case) for case in cases]
        _kernels._set_simd_level(level)
        for case, (lists, terms) in zip(cases, want):
            got = probe(*case)
            assert same_bits(got[0], lists) and same_bits(got[1], terms)
    finally:
        _kernels._set_simd_level(previous)


@pytest.fixture(scope="module", params=[256, 16], ids=["bytes", "fastscan"])
def ivf_index(request):
    """An IVF over seeded data, its vectors stored for re-ranking, and 23 queries: byte codes (K = 256) or codes in
    fast-scan blocks (K = 16); the search kernel ivf_search, which probes itself, scans both."""
    rng = np.random.default_rng(11)
    X = (rng.standard_normal((3000, 19)) + rng.integers(0, 4, size=(3000, 1))).astype(np.float32)
    ivf = ockstore.IVF(40, ockstore.OCKM(3, 2, 4, n_codewords=request.param, n_iter=2, seed=1), n_iter=4).fit(X)
    index = ockstore.IVFIndex.from_vectors(ivf, X, store_vectors="float32")
    return index, (rng.standard_normal((23, 19)) + 1.5).astype(np.float32)


@pytest.mark.parametrize("rerank", [0, 30])
def test_ivf_search_is_the_same_for_any_threads_and_batch_split(ivf_index, rerank):
    """ivf_search's groups of queries: the results of a batch on 1 or 2 threads equal those of any split of it, and
    of each query alone (byte codes and fast-scan blocks, with and without re-ranking)."""
    index, Q = ivf_index

    def search(queries, n_threads):
        return index.search(queries, 10, n_probe=7, rerank=rerank, n_threads=n_threads)

    D, I = search(Q, 1)
    for n_threads in (1, 2):
        D2, I2 = search(Q, n_threads)
        assert same_bits(D2, D) and same_bits(I2, I)
        for splits in ([1, 4, 9], [5, 10, 15, 20], list(range(1, 23))):
            parts = [search(part, n_threads) for part in np.split(Q, splits)]
            assert same_bits(np.concatenate([p[0] for p in parts]), D)
            assert same_bits(np.concatenate([p[1] for p in parts]), I)
    for i in range(Q.shape[0]):  # one query, as a vector
        d, r = search(Q[i], 2)
        assert same_bits(d, D[i]) and same_bits(r, I[i])
