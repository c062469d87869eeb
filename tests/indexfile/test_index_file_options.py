"""Tests of the index-file rules that format version 1.1 added (docs/FORMAT.md section 12, I15-I19): the search metric
in the quantizer parameters, stored vectors (meta key ``store_vectors``, section ``vectors``) and their values, the
minor version, and the meaning of the metrics. Every rule I15-I19 is cited by at least one test below (its name or
docstring); the round trips of every metric x stored dtype x builder are in tests/index/test_search_options.py.

Corrupt files are written with ``storage.FileWriter`` directly: valid containers, inconsistent as index files.
"""

from __future__ import annotations

import numpy as np
import pytest

import ockstore
from ockstore import build_index, load_quantizer, open_index, save_quantizer, storage
from ockstore.errors import FormatError

import helpers
import index_files

P = 8
N = 60
NQ = 5


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(5)
    X = (rng.normal(size=(400, P)) * np.linspace(2.0, 0.5, P) + 1.0).astype(np.float32)
    ints = np.clip(np.round(X * 20 + 100), 1, 255).astype(np.float32)  # integer values in 1..255, for uint8
    return X, ints


@pytest.fixture(scope="module")
def quantizers(data):
    X = data[0]
    return {metric: ockstore.OCKM(2, 2, 2, n_codewords=32, metric=metric, n_iter=2, seed=0).fit(X)
            for metric in ("l2", "ip", "cosine")} | {
        "pq-cosine": ockstore.PQ(2, n_codewords=32, metric="cosine", n_iter=2, seed=0).fit(X)}


def parts_of(path):
    """(version, meta, {name: array copy} in file order, user) of a container file."""
    with storage.open_file(path) as f:
        order = sorted(f.sections, key=lambda name: f.section_info(name)["offset"])
        return f.version, f.meta, {name: np.array(f.sections[name]) for name in order}, f.user


def built(path, *args, **kwargs):
    """build_index(path, ...), returning the path."""
    build_index(path, *args, **kwargs)
    return path


def write_parts(path, meta, sections, user=None, minor=None):
    """A container file of these parts, of format 1.1 (1.3 for fast-scan files, F1) unless ``minor`` says otherwise."""
    return index_files.write_parts(path, meta, sections, user, minor, floor=1)


def edited(parts, meta=None, params=None, drop_meta=(), sections=None, drop=()):
    """Copies of (meta, sections) of ``parts`` with meta keys or params replaced / dropped, sections replaced /
    dropped / added (at the end)."""
    _version, meta0, sections0, _user = parts
    new_meta = {**meta0, "params": dict(meta0["params"])}
    for key in drop_meta:
        new_meta.pop(key, None)
    new_meta.update(meta or {})
    new_meta["params"].update(params or {})
    new_sections = {name: arr.copy() for name, arr in sections0.items() if name not in drop}
    new_sections.update(sections or {})
    return new_meta, new_sections


def expect_format_error(path, check, name=None, *, when="open", opener=open_index):
    return helpers.expect_format_error(opener, path, check, name, when=when)


# ----------------------------------------------------------------------------------------------------------- I15
def test_metric_stored_in_params_I15(tmp_path, quantizers, data):
    """I15: params holds 'metric' exactly when it is not "l2"; index and quantizer files give it back; an explicit
    "l2" (which writers omit) reads as the absent key does."""
    X = data[0][:N]
    for metric in ("l2", "ip", "cosine"):
        q = quantizers[metric]
        path = built(tmp_path / f"{metric}.ock", q, X)
        _, meta, _, _ = parts_of(path)
        assert meta["params"].get("metric") == (None if metric == "l2" else metric)
        with open_index(path) as index:
            assert index.metric == metric and index.quantizer == q
        assert load_quantizer(path).metric == metric
        qpath = tmp_path / f"{metric}.ockq"
        save_quantizer(qpath, q)
        assert parts_of(qpath)[1]["params"].get("metric") == (None if metric == "l2" else metric)
        assert load_quantizer(qpath) == q
    parts = parts_of(tmp_path / "l2.ock")
    explicit = write_parts(tmp_path / "explicit.ock", *edited(parts, params={"metric": "l2"}), minor=0)
    with open_index(explicit) as a, open_index(tmp_path / "l2.ock") as b:
        assert a.metric == "l2"
        np.testing.assert_array_equal(a.search(X[:NQ], 7)[1], b.search(X[:NQ], 7)[1])


@pytest.mark.parametrize("bad", ["L2", "dot", "", 1, True, None, ["ip"]])
def test_unknown_metric_refused_I15(tmp_path, quantizers, data, bad):
    """I15: any other value of params 'metric' is "bad meta", in index and quantizer files."""
    parts = parts_of(built(tmp_path / "ip.ock", quantizers["ip"], data[0][:N]))
    path = write_parts(tmp_path / "bad.ock", *edited(parts, params={"metric": bad}))
    message = expect_format_error(path, "bad meta")
    assert "metric" in message
    expect_format_error(path, "bad meta", opener=load_quantizer)


def test_inner_product_metrics_have_no_norm_term_I15(tmp_path, quantizers, data):
    """I15, I3: an index of metric "ip" or "cosine" has norm_encoding "none"; "u8" or "f32" (with a norms section) is
    "bad meta", and so is an "l2" OCKM index claiming "none"."""
    X = data[0][:N]
    ip = parts_of(built(tmp_path / "ip.ock", quantizers["ip"], X))
    for encoding, norms in (("u8", np.zeros(N, "<u1")), ("f32", np.zeros(N, "<f4"))):
        path = write_parts(tmp_path / f"ip-{encoding}.ock",
                           *edited(ip, meta={"norm_encoding": encoding}, sections={"norms": norms}))
        assert "norm_encoding" in expect_format_error(path, "bad meta")
    l2 = parts_of(built(tmp_path / "l2.ock", quantizers["l2"], X))
    path = write_parts(tmp_path / "l2-none.ock", *edited(l2, meta={"norm_encoding": "none"}, drop=("norms",)))
    assert "norm_encoding" in expect_format_error(path, "bad meta")


# ----------------------------------------------------------------------------------------------------------- I16
@pytest.fixture()
def stored(tmp_path, quantizers, data):
    """The parts of a valid l2 index with user ids and float32 stored vectors."""
    path = built(tmp_path / "stored.ock", quantizers["l2"], data[0][:N], np.arange(N) * 3 + 5,
                       store_vectors="float32")
    return parts_of(path)


@pytest.mark.parametrize("bad", ["float64", "f4", "<f4", "", 4, None, True])
def test_bad_store_vectors_value_I16(tmp_path, stored, bad):
    """I16: meta 'store_vectors', when present, is "float16", "float32" or "uint8" ("bad meta")."""
    path = write_parts(tmp_path / "bad.ock", *edited(stored, meta={"store_vectors": bad}))
    assert "store_vectors" in expect_format_error(path, "bad meta")


def test_vectors_section_checks_I16(tmp_path, stored, quantizers, data):
    """I16: with store_vectors the section is required, of its dtype, N rows and P columns; without, it is refused;
    a quantizer file never has one."""
    cases = {
        "missing section": edited(stored, drop=("vectors",)),
        "bad section dtype": edited(stored, meta={"store_vectors": "float16"}),
        "row count mismatch": edited(stored, sections={"vectors": np.zeros((N + 1, P), "<f4")}),
        "bad section shape": edited(stored, sections={"vectors": np.zeros((N, P + 1), "<f4")}),
    }
    for check, parts in cases.items():
        path = write_parts(tmp_path / f"{check.replace(' ', '-')}.ock", *parts)
        expect_format_error(path, check, "vectors")
    for dtype, store in (("<f2", "float16"), ("<u1", "uint8")):  # each dtype with its own name only
        path = write_parts(tmp_path / f"{store}-as-f4.ock",
                           *edited(stored, meta={"store_vectors": store}, sections={"vectors": np.zeros((N, P), "<f4")}))
        expect_format_error(path, "bad section dtype", "vectors")
        ok = write_parts(tmp_path / f"{store}.ock",
                         *edited(stored, meta={"store_vectors": store}, sections={"vectors": np.ones((N, P), dtype)}))
        with open_index(ok) as index:
            assert index.store_vectors == store and index.vectors.dtype == np.dtype(dtype)
    path = write_parts(tmp_path / "unexpected.ock", *edited(stored, drop_meta=("store_vectors",)))
    expect_format_error(path, "unexpected section", "vectors")
    save_quantizer(tmp_path / "q.ockq", quantizers["l2"])
    qparts = parts_of(tmp_path / "q.ockq")
    path = write_parts(tmp_path / "q-vectors.ockq", *edited(qparts, sections={"vectors": np.zeros((N, P), "<f4")}))
    expect_format_error(path, "unexpected section", "vectors", opener=load_quantizer)


def test_opening_does_not_read_the_vectors_I16_I17(tmp_path, stored):
    """I16, I17: a file whose stored vectors hold NaN opens (the section is not read) and searches without re-ranking;
    verify reports the first bad row; a re-ranking search refuses the row instead of returning NaN."""
    _, sections = edited(stored)
    vectors = sections["vectors"]
    vectors[37, 2] = np.nan
    vectors[41, 0] = np.inf
    path = write_parts(tmp_path / "nan.ock", *edited(stored, sections={"vectors": vectors}))
    Q = stored[2]["vectors"][:NQ]
    with open_index(path) as index:
        D, I = index.search(Q, 5, rerank=0)
        assert (I >= 0).all() and np.isfinite(D).all()
        with pytest.raises(FormatError, match=f"{path.name}.*non-finite values: section 'vectors': row 37"):
            index.search(Q, 5, rerank=N)  # the file's section, not the caller's argument
    message = expect_format_error(path, "non-finite values", "vectors", when="verify")
    assert "row 37" in message


# ----------------------------------------------------------------------------------------------------------- I17
@pytest.mark.parametrize("store", ["float16", "float32", "uint8"])
def test_stored_rows_are_the_given_vectors_I17(tmp_path, quantizers, data, store):
    """I17: row i of the section is vector i as given (not normalised for cosine, not rotated), in the stored dtype,
    whatever the chunks of the build; re-ranking reads exactly these values."""
    X = data[1][:N] if store == "uint8" else data[0][:N] * 3
    q = quantizers["pq-cosine"]
    path = built(tmp_path / "x.ock", q, X.astype(np.float64), store_vectors=store, chunk_size=7)
    _, meta, sections, _ = parts_of(path)
    assert meta["store_vectors"] == store
    np.testing.assert_array_equal(sections["vectors"], X.astype(store))
    with open_index(path) as index:
        D, I = index.search(X[:NQ], 4, rerank=N)
    V = X.astype(store).astype(np.float64)
    Qn = X[:NQ] / np.linalg.norm(X[:NQ], axis=1, keepdims=True)
    exact = (Qn @ V.T) / np.linalg.norm(V, axis=1)
    np.testing.assert_allclose(D, np.take_along_axis(exact, I, axis=1), rtol=1e-5)
    np.testing.assert_allclose(D, -np.sort(-exact, axis=1)[:, :4], rtol=1e-5)


@pytest.mark.parametrize("store,bad,what", [("uint8", 3.5, "uint8"), ("uint8", 256, "uint8"), ("uint8", -1, "uint8"),
                                            ("float16", 1e5, "float16"), ("float32", np.nan, "NaN"),
                                            ("float16", np.inf, "NaN or infinite")])
def test_writer_refuses_values_the_dtype_cannot_hold_I17(tmp_path, quantizers, data, store, bad, what):
    """I17: a value the stored dtype cannot hold is a ValueError naming X and its row, before anything is written."""
    X = data[1][:N].astype(np.float64)
    X[23, 4] = bad
    path = tmp_path / "x.ock"
    with pytest.raises(ValueError, match=r"\bX\b") as info:
        built(path, quantizers["l2"], X, store_vectors=store, chunk_size=10)
    assert what in str(info.value)
    if np.isfinite(bad):
        assert "row 23" in str(info.value)
    assert not path.exists() and not list(tmp_path.iterdir())


# ----------------------------------------------------------------------------------------------------------- I18
@pytest.mark.parametrize("metric", ["l2", "ip", "cosine"])
@pytest.mark.parametrize("store", [None, "float16", "float32", "uint8"])
def test_minor_version_I18(tmp_path, quantizers, data, metric, store):
    """I18: 1.1 exactly when the metric is not "l2" or vectors are stored; otherwise 1.0, with exactly the meta keys
    and sections of format 1.0, byte for byte what the container writes at minor version 0 from them."""
    X = data[1][:N] if store == "uint8" else data[0][:N]
    path = built(tmp_path / "x.ock", quantizers[metric], X, store_vectors=store)
    version, meta, sections, user = parts_of(path)
    uses_1_1 = metric != "l2" or store is not None
    minor = 3 if metric == "cosine" else 1 if uses_1_1 else 0  # cosine: the norm term by default (I20)
    assert version == (1, minor)
    assert ockstore.file_info(path)["format_version"] == f"1.{minor}"
    assert ("store_vectors" in meta) == (store is not None) and ("vectors" in sections) == (store is not None)
    assert ("metric" in meta["params"]) == (metric != "l2")
    if not uses_1_1:
        assert set(meta) == {"kind", "method", "library", "params", "ntotal", "norm_encoding", "has_ids"}
        assert set(meta["params"]) == {"dim", "n_subspaces", "n_codebooks", "beam_width", "n_codewords", "n_iter",
                                       "tol", "seed"}
        assert list(sections) == ["rotation", "codebooks", "objective_history", "norm_levels", "codes", "norms"]
        again = write_parts(tmp_path / "container.ock", meta, sections, user, minor=0)
        assert again.read_bytes() == path.read_bytes()
    qpath = tmp_path / "q.ockq"
    save_quantizer(qpath, quantizers[metric])
    assert parts_of(qpath)[0] == (1, 3)  # a fitted model's value ranges are of format 1.3 (I21)


def test_float16_section_in_a_1_0_file_refused_I18(tmp_path, stored):
    """I18, R11: a 1.0 file cannot hold the float16 dtype of 1.1 (the container refuses it, "bad header"), while the
    same file saying 1.1 opens; readers do not otherwise compare the minor version with the meta (a 1.0 file with
    float32 vectors opens)."""
    meta, sections = edited(stored)
    with open_index(write_parts(tmp_path / "f4.ock", meta, sections, minor=0)) as index:
        assert index.store_vectors == "float32" and index.info()["format_version"] == "1.0"
    sections["vectors"] = sections["vectors"].astype("<f2")
    meta = {**meta, "store_vectors": "float16"}
    for minor in (0, 1):
        path = tmp_path / f"f2-{minor}.ock"
        path.write_bytes(helpers.hand_file(list(sections.items()), meta, {}, minor=minor))
        if minor == 0:
            expect_format_error(path, "bad header", "vectors")
        else:
            with open_index(path) as index:
                index.verify()
                np.testing.assert_array_equal(index.vectors, sections["vectors"])


# ----------------------------------------------------------------------------------------------------------- I19
@pytest.mark.parametrize("metric", ["ip", "cosine"])
def test_metric_meaning_from_a_file_I19(tmp_path, quantizers, data, metric):
    """I19, I20: a file of metric "ip" ranks by descending score q . x_hat, "cosine" by q . x_hat / ||x_hat|| (q
    normalised; ||x_hat|| from the "f32" norm term here); SDC by x_hat_q . x_hat (cosine: x_hat_q / ||x_hat_q||, and
    divided by ||x_hat||), ties by id, padding (-inf, -1); re-ranking gives the float32 exact scores of the rows."""
    X, Q = data[0][:N], data[0][200:200 + NQ]
    q = quantizers[metric]
    path = built(tmp_path / "x.ock", q, X, store_vectors="float32",
                 norm_encoding="f32" if metric == "cosine" else None)
    Xh = q.decode(q.encode(X)).astype(np.float64)
    Qv = Q / np.linalg.norm(Q, axis=1, keepdims=True) if metric == "cosine" else Q.astype(np.float64)
    Qs = q.decode(q.encode(Q)).astype(np.float64)
    if metric == "cosine":
        Qs = Qs / np.linalg.norm(Qs, axis=1, keepdims=True)
        Xh = Xh / np.linalg.norm(Xh, axis=1, keepdims=True)  # dividing every score by ||x_hat||
    with open_index(path) as index:
        for distance, queries in (("adc", Qv), ("sdc", Qs)):
            D, I = index.search(Q, N + 3, distance=distance, rerank=0)
            assert (I[:, N:] == -1).all() and (D[:, N:] == -np.inf).all()
            scores = queries @ Xh.T
            np.testing.assert_allclose(D[:, :N], np.take_along_axis(scores, I[:, :N], axis=1), rtol=1e-4, atol=1e-4)
            assert (np.diff(D[:, :N], axis=1) <= 0).all()
            tied = np.diff(D[:, :N], axis=1) == 0
            assert (np.diff(I[:, :N], axis=1)[tied] > 0).all()
        D, I = index.search(Q, 6, rerank=N)
        exact = Qv @ X.astype(np.float64).T
        if metric == "cosine":
            exact = exact / np.linalg.norm(X, axis=1)
        np.testing.assert_allclose(D, -np.sort(-exact, axis=1)[:, :6], rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------------------------------- I20
def test_the_norm_term_of_cosine_indexes_I20(tmp_path, quantizers, data):
    """I20: a cosine index stores the norm term by default ("u8"; "f32" and "none" on request) and says 1.3 when it
    does; "none" keeps format 1.1 and the scores <q, x_hat> of files written before 1.3, which open and search as
    they did. A file of minor version < 3 with a cosine norm term is refused ("bad meta"); a "u8" cosine index whose
    quantizer has no norm levels is refused ("missing section")."""
    X, Q = data[0][:N], data[0][300:305]
    q = quantizers["cosine"]
    for encoding, minor in (("u8", 3), ("f32", 3), ("none", 1)):
        path = built(tmp_path / f"{encoding}.ock", q, X, norm_encoding=encoding)
        version, meta, sections, user = parts_of(path)
        assert version == (1, minor) and meta["norm_encoding"] == encoding
        with open_index(path) as index:
            assert index.norm_encoding == encoding
            index.search(Q, 3)
    assert built(tmp_path / "d.ock", q, X).read_bytes() == (tmp_path / "u8.ock").read_bytes()  # u8 the default
    version, meta, sections, user = parts_of(tmp_path / "u8.ock")
    expect_format_error(write_parts(tmp_path / "old.ock", meta, sections, user, minor=2), "bad meta", "norm_encoding")
    pq = quantizers["pq-cosine"]  # one codebook per subspace: its norm levels are fitted for cosine (since 1.3)
    assert pq.norm_levels is not None
    qpath = tmp_path / "pq.ockq"
    save_quantizer(qpath, pq)
    version, meta, sections, user = parts_of(qpath)
    assert version == (1, 3) and "norm_levels" in sections
    del sections["norm_levels"], sections["value_ranges"]  # a quantizer of format 1.1, fitted before 1.3
    old = ockstore.load_quantizer(write_parts(tmp_path / "pq_old.ockq", meta, sections, user, minor=1))
    assert old.norm_levels is None
    index = ockstore.Index.from_vectors(old, X)
    assert index.norm_encoding == "none"  # what indexes of it were before 1.3
    with pytest.raises(ValueError, match="norm_encoding 'u8' needs the quantizer's norm levels"):
        ockstore.Index.from_vectors(old, X, norm_encoding="u8")
    ockstore.Index.from_vectors(old, X, norm_encoding="f32")
    version, meta, sections, user = parts_of(built(tmp_path / "pq.ock", pq, X))
    assert meta["norm_encoding"] == "u8"
    del sections["norm_levels"]
    expect_format_error(write_parts(tmp_path / "pq_nolevels.ock", meta, sections, user, minor=3), "missing section",
                        "norm_levels")
    meta, sections, user = parts_of(qpath)[1:]
    sections["norm_levels"] = sections["norm_levels"][::-1].copy()
    with pytest.raises(ockstore.FormatError, match="unsorted norm levels"):
        ockstore.load_quantizer(write_parts(tmp_path / "pq_bad.ockq", meta, sections, user, minor=3))
