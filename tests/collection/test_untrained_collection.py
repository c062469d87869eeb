"""Collections that start empty and train their quantizer themselves (issue 21; docs/ARCHITECTURE.md, "Collections
for apps"; docs/FORMAT.md sections 13 and 15): exact searches while untrained, the one commit that crosses
train_size (concurrent readers, SIGKILL at every file-system event of it), retrain, and everything a collection does
(delete, upsert, merges, compaction, filters, get) on rows that are stored vectors only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import ockstore
from ockstore.search import rerank as _rerank
from ockstore._validation import normalize_rows
from ockstore.collection import names
from ockstore.exact_index import ExactIndex
from collection_model import Model, assert_same_search, reference_index
from helpers import SUPPORT, gaussian_mixture, subprocess_env

P = 16
TRAIN_SIZE = 300


def unfitted(metric="l2", ivf=False):
    q = ockstore.OCKM(4, 2, 4, n_codewords=16, n_iter=3, metric=metric, seed=0)
    return ockstore.IVF(4, q, seed=0) if ivf else q


def rows(n, seed):
    return gaussian_mixture(n, P, seed=seed)


def as_stored(model, store):
    """A copy of the model whose vectors are as the collection stores them (float16: rounded)."""
    out = model.copy()
    if store == "float16":
        out.vectors = {i: v.astype(np.float16).astype(np.float32) for i, v in out.vectors.items()}
    return out


def exact_oracle(model, Q, k, metric, store):
    """NumPy brute force over the live rows in float64: (values, ids), best first, ties by id."""
    X, ids = model.rows()
    X = X.astype(np.float16).astype(np.float64) if store == "float16" else X.astype(np.float64)
    Qd = Q.astype(np.float64)
    if metric == "cosine":
        Qd = Qd / np.linalg.norm(Qd, axis=1, keepdims=True)
        values = -(Qd @ X.T) / np.linalg.norm(X, axis=1)[None, :]
    elif metric == "ip":
        values = -(Qd @ X.T)
    else:
        values = ((Qd[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    order = np.lexsort((np.broadcast_to(ids, values.shape), values), axis=1)[:, :k]
    best = np.take_along_axis(values, order, axis=1)
    return (best if metric == "l2" else -best), ids[order]


def assert_exact(collection, model, Q, k, store, **options):
    """The untrained collection's results: the ids of NumPy's brute force (float64) and its values to float32
    rounding, and exactly the values re-ranking computes (``_rerank.rerank`` over every live row)."""
    metric = collection.metric
    D, I = collection.search(Q, k, **options)
    n = min(k, len(model))
    want_D, want_I = exact_oracle(model, Q, n, metric, store)
    np.testing.assert_array_equal(I[:, :n], want_I)
    np.testing.assert_allclose(D[:, :n], want_D, rtol=1e-5, atol=1e-5)
    assert (I[:, n:] == -1).all()
    X, ids = model.rows()
    stored = X.astype(np.float16) if store == "float16" else X
    Qp = normalize_rows(Q, "Q") if metric == "cosine" else Q
    D2, I2 = _rerank.rerank(Qp, np.tile(np.arange(len(ids)), (len(Q), 1)),
                            lambda rows: (_rerank.gather_rows(stored, rows), ids[rows]), metric, k)
    np.testing.assert_array_equal(I, I2)
    np.testing.assert_array_equal(D, D2)


@pytest.mark.parametrize("metric, store", [("l2", "float32"), ("ip", "float16"), ("cosine", "float16"),
                                           ("cosine", "float32")])
@pytest.mark.parametrize("ivf", [False, True], ids=["flat", "ivf"])
def test_exact_until_trained_then_encoded_in_one_commit(tmp_path, metric, store, ivf):
    """Untrained: rows are files of stored vectors (kind "vectors"), searches exact (NumPy brute force), with
    deletions, upserts, merges, filters, padding and get. The add that crosses train_size trains the quantizer on the
    live rows and encodes them, in one commit: then searches equal one index of the live rows encoded with the
    collection's quantizer (re-ranked by default), ids, deletions and stored vectors kept."""
    folder = tmp_path / "c"
    model = Model(P)
    c = ockstore.create_collection(folder, unfitted(metric, ivf), store_vectors=store, train_size=TRAIN_SIZE,
                                   merge_factor=3)
    assert c.info()["trained"] is False and c.info()["train_size"] == TRAIN_SIZE and c.dim is None
    Q = rows(7, 99)
    D, I = c.search(Q, 5)
    assert D.shape == (7, 5) and (I == -1).all()
    for step in range(7):  # merges of stored-vector segments along the way (merge_factor 3)
        X = rows(25, step)
        model.add(X, c.add(X))
    assert c.dim == P and len(c.info()["segment_files"]) < 7
    doomed = model.live_ids()[::5]
    assert c.delete(doomed) == model.delete(doomed)
    c.upsert(rows(3, 50), [1, 2, 900])
    model.upsert(rows(3, 50), [1, 2, 900])
    assert not c.info()["trained"] and len(c) == len(model) < TRAIN_SIZE
    for segment in c.info()["segment_files"]:
        with ockstore.open_index(folder / segment["file"]) as index:
            assert isinstance(index, ExactIndex) and index.store_vectors == store
    for k in (1, 10, len(model) + 5):
        assert_exact(c, model, Q, k, store)
    assert_exact(c, model, Q, 8, store, rerank=20, distance="sdc")  # accepted, changes nothing: already exact
    live = model.live_ids()
    D, I = c.search(Q, 6, allow=live[::3])
    assert np.isin(I[I >= 0], live[::3]).all()
    sub = Model(P)
    for i in live[::3]:
        sub.vectors[int(i)] = model.vectors[int(i)]
    np.testing.assert_array_equal(I, exact_oracle(sub, Q, 6, metric, store)[1])
    np.testing.assert_array_equal(c.get([900, 1]), np.array([model.vectors[900], model.vectors[1]]).astype(
        np.float16 if store == "float16" else np.float32))
    c.compact()
    assert_exact(c, model, Q, 10, store)
    c.verify()
    reader = ockstore.open_collection(folder)  # a reader before training: keeps its exact snapshot
    before = reader.search(Q, 10)
    X = rows(TRAIN_SIZE, 200)  # crosses train_size: committed untrained, then trained beside the writer
    generation = c.generation
    model.add(X, c.add(X))
    assert c.wait_trained(timeout=300)
    info = c.info()
    assert info["trained"] and info["train_size"] is None and c.generation == generation + 2
    assert info["quantizer_file"] == names.quantizer_name(c.generation)
    assert all(not isinstance(v.index, ExactIndex) for v in c._snap.views)
    assert np.array_equal(c.ids(), model.live_ids()) and c.quantizer.is_fitted
    encoded = as_stored(model, store)  # the training commit encodes the stored vectors (float16: rounded)
    ref = reference_index(c.quantizer, encoded, store_vectors=store)
    for options in ({}, {"rerank": 0}, {"rerank": 40}, {"allow": live[::2]}):
        if ivf:
            options = {**options, "n_probe": 4}
        assert_same_search(c, ref, Q, 10, **options)
    after = reader.search(Q, 10)
    assert np.array_equal(after[1], before[1]) and np.array_equal(after[0], before[0])
    reader.refresh()
    D1, I1 = reader.search(Q, 10)
    D2, I2 = c.search(Q, 10)
    assert np.array_equal(I1, I2) and np.array_equal(D1, D2)
    reader.close()
    ids = model.live_ids()
    expected = np.array([model.vectors[int(i)] for i in ids])
    np.testing.assert_array_equal(c.get(ids), expected.astype(np.float16 if store == "float16" else np.float32))
    X2 = rows(20, 300)  # later adds encode as any collection's: the vectors given
    encoded.add(X2, c.add(X2))
    assert_same_search(c, reference_index(c.quantizer, encoded, store_vectors=store), Q, 10,
                       **({"n_probe": 4} if ivf else {}))
    c.verify()
    c.close()


def test_a_first_add_above_train_size_trains_at_once_and_refuses_bad_rows(tmp_path):
    """The first add may cross train_size by itself: its rows set the dimension and train the model in one commit.
    Cosine refuses a zero vector before anything is written; the dimension, once set, is checked."""
    q = unfitted("cosine")
    c = ockstore.create_collection(tmp_path / "c", q, store_vectors="float32", train_size=100)
    X = rows(150, 1)
    X[40] = 0
    with pytest.raises(ValueError, match="X row 40 is a zero vector"):
        c.add(X)
    assert c.generation == 0 and c.dim is None and sorted(os.listdir(tmp_path / "c")) == sorted(
        [names.LOCK_NAME, names.manifest_name(0)])
    X[40] = 1
    c.add(X)
    assert c.wait_trained(timeout=300)
    assert c.info()["trained"] and len(c) == 150 and c.generation == 2 and not q.is_fitted  # the given one unchanged
    with pytest.raises(ValueError, match="Q has dimension 3"):
        c.search(np.ones((1, 3)), 2)
    c.close()
    c = ockstore.create_collection(tmp_path / "d", unfitted(), store_vectors="float32", train_size=1000)
    c.add(rows(5, 2))
    with pytest.raises(ValueError, match=f"X has dimension 3, expected {P}"):
        c.add(np.ones((2, 3)))
    with pytest.raises(ValueError, match="vectors: this collection has not trained"):
        c.search(rows(1, 3), 2, vectors=rows(5, 2))
    with pytest.raises(ValueError, match="n_probe applies to inverted-file"):
        c.search(rows(1, 3), 2, n_probe=2)
    c.close()


def test_retrain_keeps_ids_deletions_and_stored_vectors(tmp_path):
    """retrain: a fresh copy of the parameters fitted on a sample of the live stored vectors, every row re-encoded in
    one commit: the same live ids and stored vectors, deleted ids stay deleted, results those of one index of the
    live rows encoded with the new model. A quantizer given fitted is used as it is; unfitted, it is fitted in place."""
    folder = tmp_path / "c"
    model = Model(P)
    c = ockstore.create_collection(folder, unfitted(), store_vectors="float32", train_size=64)
    for seed in range(3):
        X = rows(40, seed)
        model.add(X, c.add(X))  # the second add makes it due: trained beside the writer on those 80 rows
        c.wait_trained(timeout=300)
    first = c.quantizer
    c.delete([3, 4, 50])
    model.delete([3, 4, 50])
    for extra in range(2):
        X = rows(60, 10 + extra)
        model.add(X, c.add(X))
    generation = c.generation
    c.retrain(sample=200)
    assert c.generation == generation + 1 and c.info()["operation" if False else "trained"]
    assert c.quantizer != first and c.info()["segments"] == 1 and c.info()["deleted"] == 0
    assert np.array_equal(c.ids(), model.live_ids())
    np.testing.assert_array_equal(c.get(model.live_ids()), model.rows()[0])
    Q = rows(9, 99)
    assert_same_search(c, reference_index(c.quantizer, model, store_vectors="float32"), Q, 10)
    with pytest.raises(ValueError, match="1 of 1 ids are not in the collection"):
        c.get([3])
    fitted = ockstore.OCKM(4, 2, 4, n_codewords=16, n_iter=2, seed=5).fit(rows(500, 77))
    c.retrain(fitted)
    assert c.quantizer == fitted
    assert_same_search(c, reference_index(fitted, model, store_vectors="float32"), Q, 10)
    given = unfitted()
    c.retrain(given, sample=100)
    assert given.is_fitted and c.quantizer == given
    with pytest.raises(ValueError, match="metric 'ip', the collection's is 'l2'"):
        c.retrain(unfitted("ip"))
    with pytest.raises(ValueError, match="sample must be >= 16"):
        c.retrain(sample=3)
    with pytest.raises(ValueError, match="an IVF collection needs an IVF"):
        c.retrain(unfitted(ivf=True))
    c.close()
    with ockstore.open_collection(folder) as reader:
        assert_same_search(reader, reference_index(given, model, store_vectors="float32"), Q, 10)
        reader.verify()
    plain = ockstore.create_collection(tmp_path / "p", first)
    plain.add(rows(30, 1))
    with pytest.raises(ValueError, match="retrain needs the stored vectors"):
        plain.retrain()
    plain.close()
    few = ockstore.create_collection(tmp_path / "f", unfitted(), store_vectors="float16", train_size=100)
    few.add(rows(10, 1))
    with pytest.raises(ValueError, match="retrain needs at least 16 live vectors"):
        few.retrain()
    few.add(rows(10, 2))
    few.retrain()  # trains now, below train_size
    assert few.info()["trained"] and len(few) == 20
    few.close()


def _run_kill_writer(folder, kill_at):
    proc = subprocess.run([sys.executable, str(SUPPORT / "untrained_kill_writer.py"), str(folder), str(kill_at)],
                          capture_output=True, text=True, env=subprocess_env(), timeout=120)
    lines = proc.stdout.splitlines()
    begin = json.loads(next(line for line in lines if line.startswith("BEGIN "))[6:])
    acked = any(line.startswith("ACK ") for line in lines)
    events = next((int(line.split()[1]) for line in lines if line.startswith("EVENTS ")), None)
    return proc, begin, acked, events


def _untrained_folder(folder):
    model = Model(P)
    with ockstore.create_collection(folder, unfitted("cosine"), store_vectors="float32", train_size=150) as c:
        for seed in range(2):
            X = rows(50, seed)
            model.add(X, c.add(X))
        c.delete([7])
        model.delete([7])
    return model


def _check_after_kill(folder, model, begin, acked):
    """The collection opens at its last committed generation: without the killed add's rows (killed before its
    commit), or with them, untrained (killed while the training thread fitted, encoded or committed) or trained;
    every live id once, every stored vector as added; an acknowledged add's rows are there."""
    with ockstore.open_collection(folder) as c:
        c.verify()
        added = model.copy()
        added.add(np.array(begin["X"], dtype=np.float32), begin["ids"])
        expected = added if acked or np.array_equal(c.ids(), added.live_ids()) else model.copy()
        assert np.array_equal(c.ids(), expected.live_ids())
        np.testing.assert_array_equal(c.get(expected.live_ids()), expected.rows()[0])
        assert c.trained or len(c) < 150 or not c.trained  # either state is a committed one
    with ockstore.open_collection(folder, "a") as c:  # the next writer goes on (trains if due), its commits clean up
        c.add(rows(3, 999))
        c.wait_trained()
        referenced = {names.manifest_name(c.generation), names.manifest_name(c.generation - 1), names.LOCK_NAME}
        for g in (c.generation, c.generation - 1):
            referenced |= ockstore.collection.manifest.read_manifest(folder / names.manifest_name(g), g)[0].referenced()
        assert set(os.listdir(folder)) == referenced  # temporary files of the killed commit included (C16)


def test_sigkill_during_the_training_commit_keeps_the_last_generation(tmp_path):
    """SIGKILL before or after a sample of the file-system events of the add that crosses train_size and of the
    training thread that follows it (the rows' file, the quantizer file, the encoded segments, the manifest link, the
    removals after it): the collection opens at the last committed generation with every acknowledged vector
    once."""
    template = tmp_path / "template"
    model = _untrained_folder(template)
    probe = tmp_path / "probe"
    shutil.copytree(template, probe, symlinks=True)
    proc, begin, acked, events = _run_kill_writer(probe, 0)
    assert proc.returncode == 0 and acked and events > 5, (proc.stdout[-500:], proc.stderr[-2000:])
    points = sorted({1, 2, events // 3, events // 2, events - 2, events - 1, events} | {-events // 2, -(events - 1)})
    for kill_at in points:
        folder = tmp_path / f"k{kill_at}"
        shutil.copytree(template, folder, symlinks=True)
        proc, begin, acked, _ = _run_kill_writer(folder, kill_at)
        assert proc.returncode == -9, (kill_at, proc.stdout[-500:], proc.stderr[-2000:])
        _check_after_kill(folder, model, begin, acked)


@pytest.mark.slow
def test_sigkill_at_every_event_of_the_training_commit(tmp_path):
    template = tmp_path / "template"
    model = _untrained_folder(template)
    probe = tmp_path / "probe"
    shutil.copytree(template, probe, symlinks=True)
    _, _, _, events = _run_kill_writer(probe, 0)
    for kill_at in [*range(1, events + 1), *range(-events, 0)]:
        folder = tmp_path / f"k{kill_at}"
        shutil.copytree(template, folder, symlinks=True)
        proc, begin, acked, _ = _run_kill_writer(folder, kill_at)
        assert proc.returncode == -9, (kill_at, proc.stderr[-2000:])
        _check_after_kill(folder, model, begin, acked)


def test_an_untrained_collection_of_uint8_vectors_adds_searches_and_trains(tmp_path):
    """store_vectors="uint8" (issue 28: every add was refused as a segment mismatch, its files of stored vectors read
    back as "sq8"): adds, exact searches, merges, the training commit and get work; the vectors come back exactly."""
    folder = tmp_path / "c"
    X = np.random.default_rng(0).integers(0, 256, size=(400, P)).astype(np.uint8)
    model = Model(P)
    with ockstore.create_collection(folder, unfitted(), store_vectors="uint8", train_size=TRAIN_SIZE,
                                    merge_factor=2) as c:
        for part in np.array_split(np.arange(250), 3):
            model.add(X[part], c.add(X[part]))
        assert not c.trained and c.info()["store_vectors"] == "uint8"
        assert_exact(c, model, X[:5].astype(np.float32), 6, "uint8")
        model.add(X[250:], c.add(X[250:]))  # crosses train_size
        assert c.wait_trained(timeout=300) and c.trained
        np.testing.assert_array_equal(c.get(np.arange(400)), X.astype(np.float32))
        c.verify()


def test_a_manifest_of_an_untrained_collection_that_says_sq8_is_refused_C14(tmp_path):
    """A collection that has not trained its quantizer stores files of stored vectors, which cannot hold sq8 codes
    (no value ranges without a fitted model): a manifest that says so does not verify (C14; issue 28: it opened and
    verified, and the next add raised AttributeError)."""
    from ockstore.collection import manifest as manifest_module

    folder = tmp_path / "c"
    with ockstore.create_collection(folder, unfitted(), store_vectors="float32", train_size=TRAIN_SIZE) as c:
        c.add(rows(20, 1))
        generation = c.generation
    manifest, user = manifest_module.read_manifest(folder / names.manifest_name(generation), generation)
    import dataclasses

    hostile = dataclasses.replace(manifest, generation=generation + 1, store_vectors="sq8")
    manifest_module.write_manifest(folder, hostile, user)
    with pytest.warns(ockstore.collection.CollectionWarning, match="store_vectors' = 'sq8'"):
        reader = ockstore.open_collection(folder)
    with reader:
        assert reader.generation == generation  # the hostile manifest is skipped (C4), and reported
        with pytest.raises(ockstore.FormatError, match="store_vectors' = 'sq8' in a collection that has not trained"):
            reader.verify()
    for name in os.listdir(folder):
        if names.parse_manifest(name) is not None and name != names.manifest_name(generation + 1):
            os.unlink(folder / name)
    with pytest.raises(ockstore.FormatError, match="no manifest verifies.*sq8 codes need the value ranges"):
        ockstore.open_collection(folder, "a")
