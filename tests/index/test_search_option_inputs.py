"""The search options in files and at the public boundary: metric and stored vectors through index and quantizer
files, the values each ``store_vectors`` choice can hold, non-finite and out-of-range stored or given vectors, zero
vectors under cosine, and every refused argument of a search or a build (docs/ARCHITECTURE.md, "Search" and
"Conventions"). The data and oracles: tests/support/search_checks.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import ockstore
from ockstore import Index
from ockstore import index as index_module
from ockstore.errors import FormatError
from search_checks import MAKERS, N, P, case_id, make_allow, to_uint8_values
from search_checks import data, indexes, quantizers  # noqa: F401 - pytest fixtures


# ------------------------------------------------------------------------------------------------------------ files
FILE_CASES = [("l2", "ockm", "u8"), ("l2", "pq", "none"), ("l2", "eckm", "f32"), ("ip", "ockm", "none"),
              ("cosine", "pq", "none")]
N_FILE = 500


def file_data(data, store):
    base, Q = data[1][:N_FILE], data[2]
    if store == "uint8":
        return to_uint8_values(base), to_uint8_values(Q)
    return base, Q


@pytest.mark.parametrize("store", [None, "float16", "float32", "uint8"])
@pytest.mark.parametrize("case", FILE_CASES, ids=case_id)
def test_file_round_trip(tmp_path, quantizers, data, case, store):
    """I15-I18 (docs/FORMAT.md): build_index, IndexWriter (chunks) and Index.save write the same index; open_index
    gives the same searches as the in-memory index (every option), the same stored vectors, the metric,
    store_vectors, format 1.1 exactly when the metric is not "l2" or vectors are stored (1.3 for the fast-scan files
    of these models, K = 16: F1)."""
    metric, method, enc = case
    q = quantizers[method, metric]
    X, Q = file_data(data, store)
    ids = data[3][:N_FILE]
    memory = Index.from_vectors(q, X, ids, norm_encoding=enc, store_vectors=store)
    built, written, saved = tmp_path / "built.ock", tmp_path / "written.ock", tmp_path / "saved.ock"
    ockstore.build_index(built, q, X, ids, norm_encoding=enc, store_vectors=store, chunk_size=128)
    with ockstore.IndexWriter(written, q, norm_encoding=enc, store_vectors=store) as w:
        for start in (0, 7, 300):
            stop = {0: 7, 7: 300, 300: N_FILE}[start]
            w.add(X[start:stop], ids[start:stop])
        w.add(X[:0], ids[:0])
        assert w.store_vectors == store
    memory.save(saved)
    assert built.read_bytes() == written.read_bytes() == saved.read_bytes()
    version = "1.1" if metric != "l2" or store is not None else "1.0"
    if metric == "cosine" and (enc != "none" or q.n_codebooks == 1):  # the norm term, or the norm levels (I20)
        version = "1.3"
    if q.n_codewords <= 16:  # fast-scan files (F1)
        version = "1.3"
    assert ockstore.file_info(built)["format_version"] == version
    assert ockstore.file_info(built)["metric"] == metric
    assert ockstore.file_info(built)["store_vectors"] == store
    loaded = ockstore.load_quantizer(built)
    assert loaded.metric == metric and loaded.get_params()["metric"] == metric and loaded == q
    allow, _ = make_allow("ids", ids, N_FILE, seed=17)
    with ockstore.open_index(built) as index:
        index.verify()
        info = index.info()
        assert info["metric"] == metric and info["store_vectors"] == store and info["format_version"] == version
        assert index.metric == metric and index.store_vectors == store and index.norm_encoding == memory.norm_encoding
        assert memory.info()["metric"] == metric and memory.info()["store_vectors"] == store
        if store is None:
            assert index.vectors is None and memory.vectors is None
        else:
            assert index.vectors.dtype == np.dtype(store) and memory.vectors.dtype == np.dtype(store)
            np.testing.assert_array_equal(index.vectors, memory.vectors)
            np.testing.assert_array_equal(index.vectors, X.astype(store))
        np.testing.assert_array_equal(index.codes, memory.codes)
        for distance in ("adc", "sdc"):
            for options in ({}, {"allow": allow}, {"allow": np.arange(N_FILE) % 3 == 0}):
                reranks = [None] if store is None else [None, 12, N_FILE]
                for rerank in reranks:
                    for threads in (1, 2):
                        D, I = index.search(Q, 10, distance=distance, rerank=rerank, n_threads=threads, **options)
                        D0, I0 = memory.search(Q, 10, distance=distance, rerank=rerank, n_threads=threads,
                                               **options)
                        np.testing.assert_array_equal(D, D0)
                        np.testing.assert_array_equal(I, I0)
        if store is None:  # vectors given at search time re-rank a file without them
            D, I = index.search(Q, 10, rerank=40, vectors=X)
            D0, I0 = Index.from_vectors(q, X, ids, norm_encoding=enc, store_vectors="float32").search(Q, 10, rerank=40)
            np.testing.assert_array_equal(D, D0)
            np.testing.assert_array_equal(I, I0)


def test_quantizer_file_keeps_the_metric(tmp_path, quantizers):
    """I15, I18, I21: a quantizer file keeps its metric; the value ranges of a fitted model make it format 1.3."""
    for (method, metric), q in quantizers.items():
        path = tmp_path / f"{method}-{metric}.ockq"
        ockstore.save_quantizer(path, q)
        loaded = ockstore.load_quantizer(path)
        assert loaded == q and loaded.metric == metric
        assert ockstore.file_info(path)["metric"] == metric
        assert ockstore.file_info(path)["format_version"] == "1.3"  # value_ranges (I21), and cosine levels (I20)


def test_empty_index_with_stored_vectors(tmp_path, quantizers, data):
    q = quantizers["pq", "cosine"]
    path = tmp_path / "empty.ock"
    ockstore.build_index(path, q, np.empty((0, P), dtype=np.float32), store_vectors="float16")
    with ockstore.open_index(path) as index:
        assert len(index) == 0 and index.vectors.shape == (0, P) and index.vectors.dtype == np.float16
        index.verify()
        D, I = index.search(data[2], 3, rerank=5, allow=[1, 2])
        assert np.all(I == -1) and np.all(D == -np.inf)


# ---------------------------------------------------------------------------------------------- stored vector values
BUILDERS = ["from_vectors", "writer", "build_index"]


def build_with(builder, tmp_path, q, X, store, **kwargs):
    """Build an index of X storing vectors in ``store`` with the given builder (the call that must refuse X)."""
    if builder == "from_vectors":
        return Index.from_vectors(q, X, store_vectors=store, **kwargs)
    path = tmp_path / f"{builder}.ock"
    if builder == "build_index":
        return ockstore.build_index(path, q, X, store_vectors=store, **kwargs)
    with ockstore.IndexWriter(path, q, store_vectors=store) as w:
        w.add(X)


@pytest.mark.parametrize("builder", BUILDERS)
def test_uint8_store_refuses_non_byte_values(tmp_path, quantizers, data, builder):
    q = quantizers["pq", "l2"]
    good = to_uint8_values(data[1][:20])
    for bad in (3.5, 300, -1, 255.5, 256):
        X = good.astype(np.float64)
        X[3, 5] = bad
        with pytest.raises(ValueError, match=r"store_vectors='uint8'.*\bX row 3\b"):
            build_with(builder, tmp_path, q, X, "uint8")
    for bad in (300, -1):  # integer dtypes too
        X = good.astype(np.int64)
        X[4, 0] = bad
        with pytest.raises(ValueError, match=r"store_vectors='uint8'.*\bX row 4\b"):
            build_with(builder, tmp_path, q, X, "uint8")
    assert not list(tmp_path.iterdir()), "a refused build left a file"
    # the limits themselves are fine, in any dtype
    X = good.copy()
    X[0, :2] = (0, 255)
    for arr in (X, X.astype(np.float64), X.astype(np.int16), X.astype(np.uint8)):
        index = Index.from_vectors(q, arr, store_vectors="uint8")
        np.testing.assert_array_equal(index.vectors, X.astype(np.uint8))


@pytest.mark.parametrize("builder", BUILDERS)
def test_float16_store_refuses_values_beyond_its_range(tmp_path, quantizers, data, builder):
    q = quantizers["pq", "l2"]
    for bad in (1e6, -1e6, 70000.0):
        X = data[1][:20].astype(np.float64)
        X[6, 2] = bad
        with pytest.raises(ValueError, match=r"float16.*\bX row 6\b"):
            build_with(builder, tmp_path, q, X, "float16")
    X = data[1][:20].astype(np.float64)
    X[1, 1] = 65504.0
    index = Index.from_vectors(q, X, store_vectors="float16")
    assert index.vectors[1, 1] == np.float16(65504.0)
    assert np.all(np.isfinite(index.vectors))


@pytest.mark.parametrize("store", [None, "float16", "float32", "uint8"])
@pytest.mark.parametrize("builder", BUILDERS)
def test_non_finite_input_refused(tmp_path, quantizers, data, builder, store):
    q = quantizers["ockm", "l2"]
    for bad in (np.nan, np.inf, -np.inf):
        X = (to_uint8_values(data[1][:20]) if store == "uint8" else data[1][:20]).astype(np.float64)
        X[2, 3] = bad
        with pytest.raises(ValueError, match=r"\bX\b.*(NaN|infinite)"):
            build_with(builder, tmp_path, q, X, store)
    assert not list(tmp_path.iterdir())


def test_writer_refused_chunk_appends_nothing(tmp_path, quantizers, data):
    """A chunk refused for its stored values leaves the writer as it was: later chunks build a consistent file."""
    q = quantizers["ockm", "ip"]
    X = to_uint8_values(data[1][:30])
    path = tmp_path / "w.ock"
    with ockstore.IndexWriter(path, q, store_vectors="uint8") as w:
        w.add(X[:10], np.arange(10))
        bad = X[10:20].copy()
        bad[9, 0] = 256
        with pytest.raises(ValueError, match="uint8"):
            w.add(bad, np.arange(10, 20))
        bad[9, 0] = np.nan
        with pytest.raises(ValueError, match="NaN"):
            w.add(bad, np.arange(10, 20))
        w.add(X[20:30], np.arange(20, 30))
        assert w.ntotal == 20
    with ockstore.open_index(path) as index:
        index.verify()
        np.testing.assert_array_equal(index.vectors, np.concatenate([X[:10], X[20:30]]).astype(np.uint8))
        np.testing.assert_array_equal(index.ids, np.r_[0:10, 20:30])
        np.testing.assert_array_equal(index.codes, q.encode(np.concatenate([X[:10], X[20:30]])))


def test_verify_and_rerank_report_non_finite_stored_vectors(quantizers, data):
    """verify() checks that stored float vectors are finite (the constructor does not read them); re-ranking from such
    a vector refuses it, naming its row."""
    q = quantizers["pq", "l2"]
    base, Q = data[1][:100], data[2]
    good = Index.from_vectors(q, base, store_vectors="float16")
    good.verify()
    for dtype in (np.float16, np.float32):
        vectors = base.astype(dtype)
        vectors[42, 1] = np.inf if dtype == np.float16 else np.nan
        index = Index(q, good.codes, None, None, "none", vectors=vectors)
        with pytest.raises(FormatError, match="vectors"):
            index.verify()
        with pytest.raises(FormatError, match="in-memory index.*non-finite values: section 'vectors': row 42"):
            index.search(Q, 5, rerank=100)  # the index's own vectors: not an argument of the caller's
        index.search(Q, 5, rerank=0)  # the scan does not read the vectors
    ints = Index(q, good.codes, None, None, "none", vectors=np.full((100, P), 255, dtype=np.uint8))
    ints.verify()
    bad_given = base.astype(np.float64)
    bad_given[7, 0] = np.nan
    with pytest.raises(ValueError, match="vectors row 7"):
        good.search(Q, 5, rerank=100, vectors=bad_given)


@pytest.mark.parametrize("metric", ["l2", "cosine"])
@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_rerank_refuses_given_vectors_beyond_the_magnitude_limit(quantizers, data, metric, kind):
    """docs/ARCHITECTURE.md "Conventions": values beyond +-1e15 raise ValueError, for ``vectors`` given to a re-ranking
    search as for Q and X (they would overflow the float32 arithmetic: +inf distances, cosine 0); a row of values
    too large for float32 too. The row is named; values at the limit are accepted."""
    q = quantizers["pq", metric]
    base, Q = data[1][:100], data[2]
    if kind == "ivf":
        q = ockstore.IVF(2, ockstore.PQ(4, n_codewords=16, n_iter=2, metric=metric, seed=0), n_iter=2,
                         seed=0).fit(data[0])
    index = Index.from_vectors(q, base)
    options = {"n_probe": 2} if kind == "ivf" else {}
    for value, row in ((1e20, 7), (-2e15, 31), (1e40, 0)):
        given = base.astype(np.float64)
        given[row, 3] = value
        with pytest.raises(ValueError, match=f"vectors row {row} ") as info:
            index.search(Q, 5, rerank=100, vectors=given, **options)
        assert not isinstance(info.value, FormatError)
    given = base.astype(np.float64)
    given[7, 3] = 1e15
    D, _ = index.search(Q, 5, rerank=100, vectors=given, **options)
    assert np.isfinite(D).all()


def test_cosine_rerank_refuses_zero_given_vector(quantizers, data):
    q = quantizers["pq", "cosine"]
    base, Q = data[1][:100], data[2]
    index = Index.from_vectors(q, base)
    given = base.copy()
    given[13] = 0
    with pytest.raises(ValueError, match="vectors row 13"):
        index.search(Q, 5, rerank=100, vectors=given)


def test_constructor_vectors_checks(quantizers, data):
    q = quantizers["pq", "l2"]
    index = Index.from_vectors(q, data[1][:50], store_vectors="float32")
    for bad in (index.vectors.astype(np.float64), index.vectors.astype(np.int32), index.vectors.tolist()):
        with pytest.raises(TypeError, match="vectors"):
            Index(q, index.codes, None, None, "none", vectors=bad)
    for bad in (index.vectors[:49], index.vectors[:, :P - 1], index.vectors[0]):
        with pytest.raises(ValueError, match="vectors"):
            Index(q, index.codes, None, None, "none", vectors=bad)
    view = Index(q, index.codes, None, None, "none", vectors=index.vectors)
    assert view.vectors is index.vectors and view.store_vectors == "float32"


# ------------------------------------------------------------------------------------------------------- bad input
def test_unknown_metric_refused(quantizers):
    for make in (lambda m: ockstore.PQ(4, metric=m), lambda m: ockstore.CKM(4, metric=m),
                 lambda m: ockstore.ECKM(4, 2, metric=m), lambda m: ockstore.OCKM(4, 2, 3, metric=m)):
        for bad in ("euclidean", "L2", "dot", "", None, 2):
            with pytest.raises(ValueError, match="metric"):
                make(bad)
    with pytest.raises(ValueError, match="metric"):
        ockstore.PQ(4).set_params(metric="manhattan")


def test_cosine_zero_vectors_refused(tmp_path, quantizers, data):
    learn, base, Q = data[0], data[1], data[2]
    q = quantizers["ockm", "cosine"]
    X = learn.copy()
    X[17] = 0
    with pytest.raises(ValueError, match=r"\bX row 17\b.*zero"):
        MAKERS["pq"]("cosine").fit(X)
    with pytest.raises(ValueError, match=r"\bX row 17\b.*zero"):
        q.encode(X)
    with pytest.raises(ValueError, match=r"\bX row 17\b.*zero"):
        Index.from_vectors(q, X)
    with pytest.raises(ValueError, match=r"\bX row 17\b.*zero"):
        ockstore.build_index(tmp_path / "a.ock", q, X)
    with pytest.raises(ValueError, match=r"\bX row 17\b.*zero"), ockstore.IndexWriter(tmp_path / "b.ock", q) as w:
        w.add(X)
    assert not list(tmp_path.iterdir())
    index = Index.from_vectors(q, base[:100], store_vectors="float32")
    Qz = Q.copy()
    Qz[4] = 0
    for options in ({}, {"distance": "sdc"}, {"rerank": 20}, {"allow": [1, 2]}):
        with pytest.raises(ValueError, match=r"\bQ row 4\b.*zero"):
            index.search(Qz, 5, **options)
    with pytest.raises(ValueError, match=r"\bQ row 0\b.*zero"):
        index.search(np.zeros(P), 5)
    # l2 and ip accept zero vectors
    for metric in ("l2", "ip"):
        other = Index.from_vectors(quantizers["pq", metric], X[:50], store_vectors="float32")
        _, I = other.search(np.zeros((1, P)), 3, rerank=10)
        assert np.all(I >= 0)


def test_cosine_zero_vector_named_by_its_row_in_the_whole_input(quantizers, data, monkeypatch):
    """A zero vector beyond the first step of an encode is named by its row in X; so is a refused stored value
    beyond the first chunk of from_vectors."""
    from ockstore.quantizers import cartesian as quantizers_module

    monkeypatch.setattr(quantizers_module, "ROWS_PER_STEP", 1000)
    monkeypatch.setattr(index_module, "BUILD_CHUNK", 1000)
    q = quantizers["pq", "cosine"]
    X = data[1].copy()
    X[N - 5] = 0
    with pytest.raises(ValueError, match=rf"\bX row {N - 5}\b"):
        q.encode(X)
    Y = to_uint8_values(data[1])
    Y[N - 5, 1] = 0.5
    with pytest.raises(ValueError, match=rf"\bX row {N - 5}\b"):
        Index.from_vectors(q, Y, store_vectors="uint8")


@pytest.mark.parametrize("builder", ["from_vectors", "build_index"])
def test_zero_vector_named_by_its_row_in_x_beyond_the_first_chunk(tmp_path, quantizers, data, monkeypatch, builder):
    monkeypatch.setattr(index_module, "BUILD_CHUNK", 1000)
    q = quantizers["pq", "cosine"]
    X = data[1].copy()
    X[N - 5] = 0
    with pytest.raises(ValueError, match=rf"\bX row {N - 5}\b"):
        if builder == "from_vectors":
            Index.from_vectors(q, X)
        else:
            ockstore.build_index(tmp_path / "c.ock", q, X, chunk_size=1000)


def test_build_index_names_refused_stored_value_by_its_row_in_x(tmp_path, quantizers, data):
    q = quantizers["pq", "l2"]
    X = to_uint8_values(data[1][:300]).astype(np.float64)
    X[250, 0] = 3.5
    with pytest.raises(ValueError, match=r"\bX row 250\b"):
        ockstore.build_index(tmp_path / "d.ock", q, X, store_vectors="uint8", chunk_size=100)


def test_search_option_errors(indexes, data):
    index = indexes[("l2", "ockm", "u8")]
    plain = Index.from_vectors(index.quantizer, data[1][:300], norm_encoding="u8")
    Q = data[2]
    n = len(plain)
    # rerank
    with pytest.raises(ValueError, match="rerank"):
        index.search(Q, 10, rerank=9)
    D0, I0 = index.search(Q, 10, rerank=100)  # None: 10 k candidates on an index that stores vectors
    D1, I1 = index.search(Q, 10)
    assert np.array_equal(I0, I1) and np.array_equal(D0, D1)
    D0, I0 = plain.search(Q, 10, rerank=0)  # 0: no re-ranking, as None on an index without vectors
    D1, I1 = plain.search(Q, 10)
    assert np.array_equal(I0, I1) and np.array_equal(D0, D1)
    with pytest.raises(ValueError, match="rerank"):
        index.search(Q, 10, rerank=-1)
    for bad in (20.0, "20", True):
        with pytest.raises(TypeError, match="rerank"):
            index.search(Q, 10, rerank=bad)
    with pytest.raises(ValueError, match="rerank"):
        plain.search(Q, 10, rerank=20)
    # vectors
    base = data[1][:300]
    for bad in (base[:n - 1], base[:, :P - 1], np.concatenate([base, base[:1]]), base[0], base[None], base.T):
        with pytest.raises(ValueError, match="vectors"):
            plain.search(Q, 10, rerank=20, vectors=bad)
    with pytest.raises(TypeError, match="vectors"):
        plain.search(Q, 10, rerank=20, vectors=base.astype(str))
    with pytest.raises(TypeError, match="vectors"):
        plain.search(Q, 10, rerank=20, vectors=base.astype(complex))
    # allow
    for bad in (np.ones(n - 1, dtype=bool), np.ones(n + 1, dtype=bool), np.ones((n, 1), dtype=bool),
                [True] * (n + 64)):
        with pytest.raises(ValueError, match="allow"):
            plain.search(Q, 10, allow=bad)
    for bad in (np.array([1.0, 2.0]), [0.5, 3], np.ones(n), np.array(["1", "2"])):
        with pytest.raises(TypeError, match="allow"):
            plain.search(Q, 10, allow=bad)
    for bad in (np.array([[1, 2], [3, 4]]), np.array(5)):
        with pytest.raises(ValueError, match="allow"):
            plain.search(Q, 10, allow=bad)
    # the options do not hide the usual checks
    with pytest.raises(ValueError, match="distance"):
        index.search(Q, 10, distance="exact", rerank=20)
    with pytest.raises(ValueError, match="Q"):
        index.search(Q[:, :P - 1], 10, rerank=20)


@pytest.mark.parametrize("metric", ["ip"])
def test_norm_encoding_with_inner_product_metrics_refused(tmp_path, quantizers, data, metric):
    """"ip" needs no norm term: only "none" (or None, which means it) is accepted. (Cosine takes all three: I20.)"""
    base = data[1][:50]
    for method in ("pq", "ockm"):
        q = quantizers[method, metric]
        for enc in ("u8", "f32"):
            with pytest.raises(ValueError, match="norm_encoding"):
                Index.from_vectors(q, base, norm_encoding=enc)
            with pytest.raises(ValueError, match="norm_encoding"):
                ockstore.IndexWriter(tmp_path / "x.ock", q, norm_encoding=enc)
            with pytest.raises(ValueError, match="norm_encoding"):
                ockstore.build_index(tmp_path / "y.ock", q, base, norm_encoding=enc)
            codes = q.encode(base)
            norms = np.zeros(50, dtype=np.float32 if enc == "f32" else np.uint8)
            with pytest.raises(ValueError, match="norm_encoding"):
                Index(q, codes, norms, None, enc)
        for enc in (None, "none"):
            index = Index.from_vectors(q, base, norm_encoding=enc)
            assert index.norm_encoding == "none" and index.norms is None
            assert index.bytes_per_vector == -(-q.bits // 8)  # K = 16: two words per byte
    assert not list(tmp_path.iterdir())


def test_norm_encodings_of_l2(quantizers, data):
    base = data[1][:50]
    for method in ("pq", "ckm"):
        q = quantizers[method, "l2"]
        assert Index.from_vectors(q, base).norm_encoding == "none"
        for enc in ("u8", "f32"):
            with pytest.raises(ValueError, match="norm_encoding"):
                Index.from_vectors(q, base, norm_encoding=enc)
    for method in ("eckm", "ockm"):
        q = quantizers[method, "l2"]
        with pytest.raises(ValueError, match="norm_encoding"):
            Index.from_vectors(q, base, norm_encoding="none")
        for enc in ("u8", "f32"):
            assert Index.from_vectors(q, base, norm_encoding=enc).norm_encoding == enc


def test_store_vectors_choice_refused(tmp_path, quantizers, data):
    q = quantizers["pq", "l2"]
    for bad in ("float64", "int8", "f32", "", True, np.float32):
        with pytest.raises(ValueError, match="store_vectors"):
            Index.from_vectors(q, data[1][:10], store_vectors=bad)
        with pytest.raises(ValueError, match="store_vectors"):
            ockstore.IndexWriter(tmp_path / "s.ock", q, store_vectors=bad)
        with pytest.raises(ValueError, match="store_vectors"):
            ockstore.build_index(tmp_path / "s.ock", q, data[1][:10], store_vectors=bad)
    assert not list(tmp_path.iterdir())


def test_repeated_searches_check_every_new_argument(indexes, data):
    """Index.search keeps the checked options of its last call (a one-query-per-call app pays the checks once): a
    call with other arguments is checked again and gets their results, k=True is refused after k=1, an array where a
    number belongs is refused, and the results equal those of a fresh index object's first call."""
    _, base, Q, ids = data
    index = indexes[("l2", "ockm", "u8")]
    first = index.search(Q[0], 5, rerank=20)
    np.testing.assert_array_equal(index.search(Q[0], 5, rerank=20)[1], first[1])  # the kept options
    D7, I7 = index.search(Q[0], 7, rerank=20)
    assert I7.shape == (7,)
    np.testing.assert_array_equal(I7[:5], first[1])
    D0, I0 = index.search(Q[0], 5, rerank=0)  # other options: the scan's own values, not the re-ranked ones
    assert not np.array_equal(D0, first[0])
    with pytest.raises(TypeError):
        index.search(Q[0], True)
    index.search(Q[0], 1)
    with pytest.raises(TypeError):
        index.search(Q[0], True)
    with pytest.raises((TypeError, ValueError)):
        index.search(Q[0], np.array([5, 5]))
    with pytest.raises(ValueError, match="rerank"):
        index.search(Q[0], 5, rerank=3)
    fresh = Index(index.quantizer, index.codes, index.norms, index.ids, index.norm_encoding, vectors=index.vectors)
    for got, want in zip(fresh.search(Q[0], 5, rerank=20), first):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", ["ivf", "flat"])
@pytest.mark.parametrize("n_codewords", [256, 16], ids=["bytes", "fastscan"])
@pytest.mark.parametrize("metric", ["l2", "ip", "cosine"])
def test_one_query_per_call_through_a_searcher_equals_the_batch(tmp_path, data, metric, n_codewords, kind):
    """A searcher checks its options once and searches a 1-D query through a compiled one-query search (built on the
    first such query): a query per call gets the batch's results and ``search``'s, with and without re-ranking, for
    flat and inverted files; a query it does not take as it is (float64, a list, NaN, zero under cosine) goes the
    general way, which converts it or names the problem; ``search`` keeps the searcher of its last scalar arguments;
    closing the file makes the searcher unusable (it reads the mapped arrays)."""
    _, base, Q, ids = data
    fine = ockstore.OCKM(2, 2, 4, n_codewords=n_codewords, metric=metric, n_iter=1, seed=3)
    model = (ockstore.IVF(6, fine, n_iter=3) if kind == "ivf" else fine).fit(base)
    path = tmp_path / "index.ock"
    ockstore.build_index(path, model, base, ids, store_vectors="float32")
    with ockstore.open_index(path) as index:
        for rerank in (0, 25):
            options = {"n_probe": 3} if kind == "ivf" else {}
            options["rerank"] = rerank
            searcher = index.searcher(5, **options)
            D, I = index.search(Q, 5, **options)
            assert index._searchers.get(lambda: None, 5, *[options.get("n_probe"), "adc", rerank, None, None]) \
                is not None  # kept for these scalar arguments
            for got, want in zip(searcher.search(Q), (D, I)):
                np.testing.assert_array_equal(got, want)
            for i in range(len(Q)):
                for query in (Q[i], Q[i].astype(np.float64), list(Q[i])):
                    for d, got in (index.search(query, 5, **options), searcher.search(query)):
                        np.testing.assert_array_equal(d, D[i])
                        np.testing.assert_array_equal(got, I[i])
            assert searcher._one is not None  # the compiled path served the float32 queries
            bad = np.array(Q[0])
            bad[1] = np.nan
            for search in (lambda q: index.search(q, 5, **options), searcher.search):
                with pytest.raises(ValueError, match="NaN"):
                    search(bad)
                if metric == "cosine":
                    with pytest.raises(ValueError, match="zero vector"):
                        search(np.zeros_like(Q[0]))
        with pytest.raises(ValueError, match="rerank"):  # other arguments are checked again
            index.search(Q[0], 5, rerank=3)
    with pytest.raises(ValueError, match="closed"):
        searcher.search(Q[0])
