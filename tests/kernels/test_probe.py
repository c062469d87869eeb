"""The coarse step of the inverted file (kernels/ivf.h, kernels/ivf.pxi: `_kernels.probe`, and ivf_search's own): queries
computed in groups against blocks of lists, yet each inner product summed over p = 0..P-1 in order, unfused, so a
query probes the same lists with the same terms alone, in any batch, on any number of threads and at every SIMD level
(docs/ARCHITECTURE.md, "Inverted file").

Oracle: the inner products in float32 by NumPy, one dimension after another (a product, then a sum, each rounded:
what the kernel computes), the keys ||c_l||^2 - 2 q.c_l (or -q.c_l) rounded to float32, the n_probe best by (key, l).
Shapes: P odd, L = 1, 7, 100, 300 (not multiples of any block of lists; 300: a full panel and a narrow one), batches of 1, 3, 5, 17 queries (not multiples of
any group), n_probe up to L on both sides of the insertion path's limit (32), and centroids repeated so that keys
tie.
"""

import pickle

import numpy as np
import pytest

import ockstore
from ockstore import _kernels
from ockstore.quantizers.kmeans import CoarseTables

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


def probe(Q, ct, c_sqnorms, kind, term_factor, n_probe, n_threads=1, prefilter=True, refined=None):
    """The kernel's (lists, terms), given the centroids transposed (ct): it reads them in panels (CoarseTables), and
    a query alone its prefilter (CoarseTables.prefilter) unless `prefilter` is False. `refined`: an int32 array of
    the queries' counts of exact inner products (probe's out_refined), or None."""
    lists = np.empty((Q.shape[0], n_probe), dtype=np.int32)
    terms = np.empty((Q.shape[0], n_probe), dtype=np.float32)
    tables = CoarseTables(ct.T)
    half = tables.prefilter(kind) if prefilter else None
    _kernels.probe(Q, tables.panels, c_sqnorms, kind, term_factor, lists, terms, n_threads, half, refined)
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


def test_an_ivf_pickles_after_probing_alone(ivf_index):
    """The prefilter (a compiled object) is built on use and left out of pickles; the copy probes alike."""
    index, Q = ivf_index
    ivf = index.quantizer
    want = ivf._probe(Q[:1], 5)
    copy = pickle.loads(pickle.dumps(ivf))
    got = copy._probe(Q[:1], 5)
    assert same_bits(got[0], want[0]) and same_bits(got[1], want[1])


@pytest.mark.parametrize("rerank", [0, 30])
def test_ivf_search_is_the_same_for_any_threads_and_batch_split(ivf_index, rerank):
    """ivf_search's groups of queries: the results of a batch on 1 or 2 threads equal those of any split of it, and
    of each query alone (byte codes and fast-scan blocks, with and without re-ranking; a query alone probes through
    the prefilter)."""
    index, Q = ivf_index
    assert index.quantizer._probing_alone() is not None

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


# --------------------------------------------------------------------------------------------------------------------
# A query alone (kernels/ivf.h, "A query alone"): its lists are chosen through the centroids in float16 and proven bounds,
# then the exact inner products of the candidates; the lists and terms are those of the full step, bit for bit.

def alone_cases():
    """(name, C (L, P) float32, queries (nq, P) float32): the shapes and values the prefilter's bounds must hold for."""
    rng = np.random.default_rng(7)
    cases = []
    C = (rng.standard_normal((300, 37)) * rng.uniform(0.5, 2.0, size=(300, 1))).astype(np.float32)
    cases.append(("L=300, P odd", C, queries(9, 37, seed=1)))
    D = C.copy()
    for l in range(2, 300, 3):  # exact ties: every third centroid a copy of an earlier one
        D[l] = D[l // 3]
    cases.append(("repeated centroids", D, queries(9, 37, seed=2)))
    # near-ties: centroids one float32 ulp apart in one dimension, and queries close to some of them
    base = rng.standard_normal((100, 16)).astype(np.float32)
    E = np.repeat(base, 3, axis=0)
    E[1::3, 0] = np.nextafter(E[1::3, 0], np.float32(np.inf))
    E[2::3, 5] = np.nextafter(E[2::3, 5], np.float32(-np.inf))
    Q = np.concatenate([E[:30:4] + np.float32(1e-7), queries(5, 16, seed=3)]).astype(np.float32)
    cases.append(("centroids one ulp apart", E, Q))
    # the global scale: tiny and huge magnitudes (the queries of the same scale and of unit scale)
    for magnitude in (1e-30, 1e14):
        F = (rng.standard_normal((257, 24)) * magnitude).astype(np.float32)
        Q = np.concatenate([queries(4, 24, seed=4) * np.float32(magnitude), queries(3, 24, seed=5)]).astype(np.float32)
        cases.append((f"magnitude {magnitude:g}", F, Q))
    # sift-like: non-negative integers, L a multiple of the panels
    G = rng.integers(0, 120, size=(512, 32)).astype(np.float32)
    cases.append(("integers", G, rng.integers(0, 200, size=(9, 32)).astype(np.float32)))
    return cases


ALONE_CASES = alone_cases()


@pytest.mark.parametrize("case", range(len(ALONE_CASES)), ids=[c[0] for c in ALONE_CASES])
@pytest.mark.parametrize("kind, term_factor", KINDS)
def test_a_query_alone_probes_as_the_reference_through_the_prefilter(case, kind, term_factor):
    """Each query alone, through the prefilter, probes the reference's lists with its terms, at every level and for
    n_probe 1, 8, 33 and L (the last one without the prefilter), as it does in a batch; and the prefilter is used
    (fewer exact inner products than lists) for some query of each case wherever it applies (not where every key
    ties: the tiny queries of magnitude 1e-30, whose inner products all underflow to 0)."""
    _, C, Q = ALONE_CASES[case]
    ct = np.ascontiguousarray(C.T)
    c_sqnorms = np.einsum("lp,lp->l", C.astype(np.float64), C.astype(np.float64)).astype(np.float32)
    L = C.shape[0]
    previous = _kernels.simd_level()
    try:
        for level in runnable_levels():
            _kernels._set_simd_level(level)
            for n_probe in (1, 8, 33, L):
                want = reference_probe(Q, ct, c_sqnorms, kind, term_factor, n_probe)
                batch = probe(Q, ct, c_sqnorms, kind, term_factor, n_probe)
                assert same_bits(batch[0], want[0]) and same_bits(batch[1], want[1]), (level, n_probe)
                refined = np.zeros(Q.shape[0], dtype=np.int32)
                for i in range(Q.shape[0]):
                    alone = probe(Q[i:i + 1], ct, c_sqnorms, kind, term_factor, n_probe, refined=refined[i:i + 1])
                    assert same_bits(alone[0], want[0][i:i + 1]) and same_bits(alone[1], want[1][i:i + 1]), \
                        (level, n_probe, i)
                if level == "portable" or 2 * n_probe > L:
                    assert (refined == L).all()  # no prefilter: every inner product
                else:
                    assert (refined >= n_probe).all() and refined.min() < L, (level, n_probe, refined)
    finally:
        _kernels._set_simd_level(previous)


def test_the_prefilter_refines_few_lists_and_falls_back_where_it_cannot_apply():
    """On well-spread centroids a query alone computes the exact inner products of little more than its n_probe
    lists; values out of the bounds' range (a huge query, a NaN) and too few lists take the full step, with the
    reference's lists."""
    best = runnable_levels()[-1]
    if best == "portable":
        pytest.skip("the portable level has no prefilter")
    previous = _kernels._set_simd_level(best)
    try:
        P, L = 32, 512
        ct, c_sqnorms = centroids(P, L, seed=9, copies=False)
        Q = queries(20, P, seed=10)
        refined = np.zeros(20, dtype=np.int32)
        for i in range(20):
            probe(Q[i:i + 1], ct, c_sqnorms, _kernels.PROBE_L2, -2.0, 8, refined=refined[i:i + 1])
        assert 8 <= refined.min() and refined.mean() < 8 * 1.5, refined
        # sums near float32's range; inner products and keys that overflow
        huge = [Q[:1] * np.float32(m) for m in (1e34, 1e37)]
        for q in huge + [np.where(np.arange(P) == 3, np.nan, Q[0]).astype(np.float32)[None]]:
            got = np.zeros(1, dtype=np.int32)
            lists, terms = probe(q, ct, c_sqnorms, _kernels.PROBE_L2, -2.0, 8, refined=got)
            assert got[0] == L
            full = probe(q, ct, c_sqnorms, _kernels.PROBE_L2, -2.0, 8, prefilter=False)
            assert same_bits(lists, full[0]) and same_bits(terms, full[1])
        small = centroids(P, _kernels.COARSE_HALF_MIN_LISTS - 1, seed=11)
        assert CoarseTables(small[0].T).prefilter(_kernels.PROBE_L2) is None
    finally:
        _kernels._set_simd_level(previous)


def test_a_prefilter_of_other_centroids_is_refused():
    ct, c_sqnorms = centroids(8, 100, seed=12)
    other = CoarseTables(centroids(8, 99, seed=13)[0].T).prefilter(_kernels.PROBE_L2)
    lists = np.empty((1, 4), dtype=np.int32)
    terms = np.empty((1, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="prefilter"):
        _kernels.probe(queries(1, 8, seed=1), CoarseTables(ct.T).panels, c_sqnorms, _kernels.PROBE_L2, -2.0, lists,
                       terms, 1, other)
    with pytest.raises(ValueError, match="prefilter"):  # another kind
        _kernels.probe(queries(1, 8, seed=1), CoarseTables(ct.T).panels, c_sqnorms, _kernels.PROBE_IP, -1.0, lists,
                       terms, 1, CoarseTables(ct.T).prefilter(_kernels.PROBE_L2))
