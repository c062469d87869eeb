"""store_vectors="sq8" in indexes, files and collections: exact re-ranking over the stored representation
lo + step * code against NumPy brute force, for every metric x flat/IVF x allow; round trips through files; values
beyond the learned ranges; the errors (docs/FORMAT.md, "sq8"; rule I21)."""

import numpy as np
import pytest

import ockstore
from index_files import parts_of, write_parts
from ockstore import IVF, Index
from ockstore.quantizers.sq8 import learn_value_ranges, sq8_decode, sq8_encode
from ockstore.errors import FormatError
from search_checks import (  # noqa: F401 (fixtures)
    N, Rows, case_id, check_topk, data, exact_keys, make_allow, quantizers, tolerance_scale,
)

MODELS = [("l2", "ockm"), ("l2", "pq"), ("ip", "ockm"), ("cosine", "pq")]


@pytest.fixture(scope="module")
def ivfs(data):
    learn = data[0]
    return {metric: IVF(6, ockstore.OCKM(4, 2, 3, n_codewords=16, metric=metric, n_iter=2, seed=0), seed=0).fit(learn)
            for metric in ("l2", "ip", "cosine")}


def model_of(kind, case, quantizers, ivfs):
    metric, method = case
    return quantizers[method, metric] if kind == "flat" else ivfs[metric]


@pytest.mark.parametrize("kind", ["flat", "ivf"])
@pytest.mark.parametrize("case", MODELS, ids=case_id)
def test_rerank_over_every_row_is_brute_force_over_the_stored_representation(quantizers, ivfs, data, kind, case):
    """rerank >= N (every list probed): the exact top k of the allowed rows by the values of lo + step * code, the
    stored codes being those of the vectors through the model's value ranges."""
    metric = case[0]
    model = model_of(kind, case, quantizers, ivfs)
    _, base, Q, ids = data
    index = Index.from_vectors(model, base, ids, store_vectors="sq8")
    assert index.store_vectors == "sq8" and index.vectors.dtype == np.uint8
    np.testing.assert_array_equal(model.value_ranges, learn_value_ranges(data[0]))
    order = Rows(ids)(index.ids)  # the base row of each stored row (an IVF stores list after list)
    np.testing.assert_array_equal(index.vectors, sq8_encode(base[order], model.value_ranges))
    represented = sq8_decode(index.vectors, model.value_ranges)
    exact = exact_keys(represented, Q, metric)
    scale = tolerance_scale(Q, represented, metric)
    rows_of = Rows(index.ids)
    extra = {"n_probe": model.n_lists} if kind == "ivf" else {}
    for allow_kind in ("none", "ids", "mask"):
        allow, allowed = make_allow(allow_kind, index.ids, N, seed=3)
        for k in (1, 10, len(allowed) + 2):
            D, I = index.search(Q, k, rerank=max(k, N), allow=allow, n_threads=2, **extra)
            check_topk(D, I, exact, allowed, k, metric, rows_of, scale)


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_file_round_trip_and_writer_in_chunks(quantizers, ivfs, data, tmp_path, kind):
    """build_index, IndexWriter (in chunks) and Index.save write the same file; open_index gives back the codes, the
    ranges and the same results; the file is of format 1.3 and holds section 'value_ranges' (I21)."""
    model = model_of(kind, ("l2", "ockm"), quantizers, ivfs)
    _, base, Q, ids = data
    built = ockstore.build_index(tmp_path / "a.ock", model, base, ids, store_vectors="sq8")
    with ockstore.IndexWriter(tmp_path / "b.ock", model, store_vectors="sq8") as writer:
        for start in range(0, N, 700):
            writer.add(base[start:start + 700], ids[start:start + 700])
    memory = Index.from_vectors(model, base, ids, store_vectors="sq8")
    memory.save(tmp_path / "c.ock")
    assert (tmp_path / "a.ock").read_bytes() == (tmp_path / "b.ock").read_bytes() == (tmp_path / "c.ock").read_bytes()
    meta, sections, _ = parts_of(tmp_path / "a.ock")
    assert ockstore.file_info(tmp_path / "a.ock")["format_version"] == "1.3" and meta["store_vectors"] == "sq8"
    np.testing.assert_array_equal(sections["value_ranges"], model.value_ranges)
    with ockstore.open_index(tmp_path / "a.ock") as index:
        index.verify()
        assert index.store_vectors == "sq8" and index.info()["store_vectors"] == "sq8"
        np.testing.assert_array_equal(index.quantizer.value_ranges, model.value_ranges)
        np.testing.assert_array_equal(index.vectors, memory.vectors)
        for R in (10, 60):
            D, I = index.search(Q, 10, rerank=R)
            D2, I2 = memory.search(Q, 10, rerank=R)
            np.testing.assert_array_equal(I, I2)
            np.testing.assert_array_equal(D, D2)
    assert built is None or built.__class__  # build_index returns nothing of interest here


def test_values_beyond_the_learned_ranges_are_stored_at_the_edges(quantizers, data):
    """A base vector outside the training data's range is stored clipped to it (and a constant training dimension
    stores its one value): the index stores what sq8_encode gives, and re-ranks with those values."""
    learn, base, Q, _ = data
    q = quantizers["ockm", "l2"]
    lo, hi = q.value_ranges
    far = np.array(base[:4], dtype=np.float32)
    far[0] = hi + 100.0
    far[1] = lo - 100.0
    far[2, ::2] = hi[::2] * 3 + 5
    index = Index.from_vectors(q, far, store_vectors="sq8")
    np.testing.assert_array_equal(index.vectors[0], 255)
    np.testing.assert_array_equal(index.vectors[1], 0)
    np.testing.assert_array_equal(index.vectors[2, ::2], 255)
    represented = sq8_decode(index.vectors, q.value_ranges)
    np.testing.assert_allclose(represented[0], hi, rtol=1e-6)
    np.testing.assert_allclose(represented[1], lo, rtol=1e-6)
    D, I = index.search(Q[:2], 4, rerank=4)
    expect = ((Q[:2, None, :].astype(np.float64) - represented[None]) ** 2).sum(axis=-1)
    np.testing.assert_allclose(D, np.take_along_axis(expect, I, axis=1), rtol=1e-5)


def test_errors(quantizers, data, tmp_path):
    _, base, _, _ = data
    q = quantizers["ockm", "l2"]
    with pytest.raises(ValueError, match="store_vectors"):
        Index.from_vectors(q, base, store_vectors="sq4")
    with pytest.raises(ValueError, match="NaN or infinite"):
        Index.from_vectors(q, np.where(np.arange(16) == 3, np.nan, base[:5]), store_vectors="sq8")
    # a model read from an index file without sq8 vectors has no ranges: sq8 is refused, naming why
    ockstore.build_index(tmp_path / "f.ock", q, base[:50], store_vectors="float16")
    plain = ockstore.load_quantizer(tmp_path / "f.ock")
    assert plain.value_ranges is None and plain == q
    for make in (lambda: Index.from_vectors(plain, base, store_vectors="sq8"),
                 lambda: ockstore.IndexWriter(tmp_path / "g.ock", plain, store_vectors="sq8"),
                 lambda: ockstore.create_collection(tmp_path / "c", plain, store_vectors="sq8")):
        with pytest.raises(ValueError, match="value ranges"):
            make()
    # the sq8 codes need their dtype
    with pytest.raises(TypeError, match="uint8"):
        Index(q, q.encode(base[:5]), None if q.norm_levels is None else np.zeros(5, np.uint8), None, "u8",
              vectors=np.zeros((5, 16), np.float32), store_vectors="sq8")


def test_damaged_value_ranges_refused_at_open_I21(quantizers, data, tmp_path):
    """I21: an index of sq8 vectors needs its section 'value_ranges' ((2, P) float32, finite, lo <= hi), from format
    1.3; any other index file holds none."""
    _, base, _, _ = data
    q = quantizers["ockm", "l2"]
    ockstore.build_index(tmp_path / "a.ock", q, base[:100], store_vectors="sq8")
    meta, sections, user = parts_of(tmp_path / "a.ock")

    def write(name, sections, meta=meta, minor=3):
        return write_parts(tmp_path / name, meta, sections, user, minor=minor)

    swapped = dict(sections, value_ranges=sections["value_ranges"][::-1].copy())
    with pytest.raises(FormatError, match="bad value ranges: section 'value_ranges'"):
        ockstore.open_index(write("swapped.ock", swapped))
    missing = {name: arr for name, arr in sections.items() if name != "value_ranges"}
    with pytest.raises(FormatError, match="missing section: section 'value_ranges'"):
        ockstore.open_index(write("missing.ock", missing))
    with pytest.raises(FormatError, match="bad format version"):
        ockstore.open_index(write("old.ock", sections, minor=2))
    as_uint8 = dict(meta, store_vectors="uint8")
    with pytest.raises(FormatError, match="unexpected section: section 'value_ranges'"):
        ockstore.open_index(write("uint8.ock", sections, meta=as_uint8))
    # Finite values beyond the bound of every vector input (issue 28: the file opened and verified, re-ranked searches
    # returned inf distances with real ids, and get() refused it): "value out of range", in an index file and a
    # quantizer file alike.
    for value in (1e16, -3e20):
        huge = sections["value_ranges"].copy()
        huge[0 if value < 0 else 1, 2] = value
        with pytest.raises(FormatError, match=r"value out of range: section 'value_ranges' holds values of magnitude"):
            ockstore.open_index(write("huge.ock", dict(sections, value_ranges=huge)))
    qmeta, qsections, quser = parts_of(_saved(q, tmp_path / "q.ockq"))
    qsections["value_ranges"] = huge
    with pytest.raises(FormatError, match="value out of range: section 'value_ranges'"):
        ockstore.load_quantizer(write_parts(tmp_path / "hq.ockq", qmeta, qsections, quser, minor=3))
    edge = sections["value_ranges"].copy()
    edge[0, 0], edge[1, 0] = -1e15, 1e15  # within the bound: opens
    ockstore.open_index(write("edge.ock", dict(sections, value_ranges=edge))).close()


def _saved(q, path):
    ockstore.save_quantizer(path, q)
    return path


def test_writers_refuse_value_ranges_their_reader_refuses_I21(quantizers, data, tmp_path):
    """The writers check the value ranges as the reader does (one check): a model whose ranges are beyond +-1e15 is
    refused with a ValueError before anything is written."""
    _, base, _, _ = data
    q = ockstore.load_quantizer(_saved(quantizers["ockm", "l2"], tmp_path / "src.ockq"))  # a copy to damage
    ranges = q.value_ranges.copy()
    ranges[1, 0] = 1e20
    q._set_value_ranges(ranges)
    for write in (lambda: ockstore.save_quantizer(tmp_path / "q.ockq", q),
                  lambda: ockstore.build_index(tmp_path / "i.ock", q, base[:50], store_vectors="sq8")):
        with pytest.raises(ValueError, match="quantizer: value out of range: section 'value_ranges'.* would not open"):
            write()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.ockq"]  # nothing written, no temporary file left


def test_collection_and_compaction_keep_the_same_codes(quantizers, data, tmp_path):
    """A collection of sq8 vectors stores what an index stores, across segments and through compaction, and its
    search re-ranks over the same representation (the collection's quantizer file keeps the ranges)."""
    _, base, Q, _ = data
    q = quantizers["ockm", "cosine"]
    reference = Index.from_vectors(q, base, store_vectors="sq8")
    c = ockstore.create_collection(tmp_path / "c", q, store_vectors="sq8")
    for start in range(0, N, 800):
        c.add(base[start:start + 800])
    assert c.store_vectors == "sq8"
    for step in ("segments", "compacted"):
        D, I = c.search(Q, 10, rerank=N)
        D2, I2 = reference.search(Q, 10, rerank=N)
        np.testing.assert_array_equal(I, I2)
        np.testing.assert_allclose(D, D2, rtol=1e-6)
        c.compact()
    c.close()
    with ockstore.open_collection(tmp_path / "c") as reader:
        np.testing.assert_array_equal(reader.quantizer.value_ranges, q.value_ranges)


@pytest.mark.parametrize("store", ["sq8", "float16", "uint8"])
def test_one_query_per_call_equals_its_row_of_a_batch(ivfs, data, store):
    """IVF + rerank: a 1-D query (searched on one thread, without a parallel region) gets exactly its row of a batch
    searched on 1 or 2 threads, with or without a filter, and so does a batch split in two."""
    _, base, Q, ids = data
    X = np.clip(np.round(base * 8 + 128), 0, 255) if store == "uint8" else base
    Qs = np.clip(np.round(Q * 8 + 128), 0, 255) if store == "uint8" else Q
    index = Index.from_vectors(ivfs["l2"], X, ids, store_vectors=store)
    allow, _ = make_allow("ids", index.ids, N, seed=8)
    for options in ({}, {"allow": allow}):
        for threads in (1, 2):
            D, I = index.search(Qs, 10, n_probe=3, rerank=60, n_threads=threads, **options)
            for q in range(Qs.shape[0]):
                d, i = index.search(Qs[q], 10, n_probe=3, rerank=60, n_threads=threads, **options)
                np.testing.assert_array_equal(d, D[q])
                np.testing.assert_array_equal(i, I[q])
            D1, I1 = index.search(Qs[:2], 10, n_probe=3, rerank=60, n_threads=threads, **options)
            D2, I2 = index.search(Qs[2:], 10, n_probe=3, rerank=60, n_threads=threads, **options)
            np.testing.assert_array_equal(np.vstack([D1, D2]), D)
            np.testing.assert_array_equal(np.vstack([I1, I2]), I)


def test_get_returns_the_decoded_values_and_retrain_reads_them(quantizers, data, tmp_path):
    """get: the stored representation lo + step * code as float32 (index, file, collection); a collection of sq8
    vectors retrains on those values and stores them again through the new model's ranges; an unfitted quantizer
    cannot store sq8 (no ranges yet)."""
    learn, base, Q, ids = data
    q = quantizers["ockm", "l2"]
    index = Index.from_vectors(q, base, ids, store_vectors="sq8")
    decoded = sq8_decode(index.vectors, q.value_ranges).astype(np.float32)
    np.testing.assert_array_equal(index.get(ids[[5, 0, 5]]), decoded[[5, 0, 5]])
    index.save(tmp_path / "i.ock")
    with ockstore.open_index(tmp_path / "i.ock") as opened:
        np.testing.assert_array_equal(opened.get(ids[7]), decoded[7])
    c = ockstore.create_collection(tmp_path / "c", q, store_vectors="sq8")
    c.add(base, ids)
    np.testing.assert_array_equal(c.get(ids[:20]), decoded[:20])
    c.retrain(ockstore.OCKM(4, 2, 3, n_codewords=16, n_iter=2, seed=1))
    new = c.quantizer.value_ranges
    assert not np.array_equal(new, q.value_ranges)  # learned again, from the decoded sample
    again = sq8_decode(sq8_encode(decoded[:20], new), new).astype(np.float32)
    np.testing.assert_array_equal(c.get(ids[:20]), again)
    c.close()
    with pytest.raises(ValueError, match="sq8.*not fitted"):
        ockstore.create_collection(tmp_path / "u", ockstore.OCKM(4, 2, 3, n_codewords=16), store_vectors="sq8")
