"""Training beside the writer (ockstore/collection/background.py; docs/ARCHITECTURE.md, "Collections for apps"): an
add never fits a model in the caller's thread; the training thread commits the model with the rows added and without
the rows deleted meanwhile; close() waits for it; a killed training is done again by the next writer; a model the
library picks is picked again as the collection grows."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import ockstore
from helpers import gaussian_mixture, run_until_sigkill, subprocess_env
from ockstore.collection import background

P = 16


@pytest.fixture(scope="module")
def rows():
    return gaussian_mixture(6000, P, seed=5)


def _exact_ids(X, ids, Q, k):
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    Qn = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    return ids[np.argsort(-(Qn @ Xn.T), axis=1, kind="stable")[:, :k]]


@pytest.fixture
def paused(monkeypatch):
    """The training thread stops before its commit until the test sets the event (it has fitted its model and
    encoded the rows of the generation it started from)."""
    go, reached = threading.Event(), threading.Event()
    prepare = background._prepare

    def waiting(*args, **kwargs):
        prepared = prepare(*args, **kwargs)
        reached.set()
        assert go.wait(60)
        return prepared

    monkeypatch.setattr(background, "_prepare", waiting)
    return go, reached


def test_the_add_that_crosses_train_size_commits_at_once_and_trains_beside(tmp_path, rows, paused):
    """The add reaching train_size returns with its rows committed as stored vectors (searches exact, here and in a
    reader); the training thread commits the model later; rows added and deleted while it trained are in and out of
    the trained generation; wait_trained then returns True (a reader's too, after a refresh)."""
    go, reached = paused
    col = ockstore.create_collection(tmp_path / "c", ockstore.OCKM(4, 2, 4, n_iter=2, metric="cosine"),
                                     train_size=2000)
    ids = col.add(rows[:2500])
    assert reached.wait(60) and not col.trained and col._trainer.running
    reader = ockstore.open_collection(tmp_path / "c")
    Q = rows[:5]
    np.testing.assert_array_equal(reader.search(Q, 3)[1], _exact_ids(rows[:2500], ids, Q, 3))  # exact meanwhile
    more = col.add(rows[2500:3000])  # during the training: commits at once, untrained
    col.delete(ids[:100])
    col.upsert(rows[3000:3010], ids[200:210])  # replaced vectors: the training's copy of these rows is stale
    assert not col.trained
    assert reader.wait_trained(timeout=0.2) is False
    go.set()
    assert col.wait_trained(timeout=120) is True and col.trained
    live = np.setdiff1d(np.concatenate([ids, more]), ids[:100])
    np.testing.assert_array_equal(col.ids(), live)
    assert len(col) == live.size
    np.testing.assert_array_equal(col.get(ids[200:210]), rows[3000:3010].astype(np.float16).astype(np.float32))
    assert reader.wait_trained(timeout=30) is True and reader.trained
    D, I = col.search(rows[3000:3005], 1, rerank=50)
    np.testing.assert_array_equal(I[:, 0], ids[200:205])  # the replaced vectors, re-ranked: found exactly
    assert not np.isin(col.search(rows[:50], 10)[1], ids[:100]).any()  # no deleted id comes back
    col.verify()
    col.close()
    reader.close()


def test_close_waits_for_the_training_and_a_killed_one_is_done_again(tmp_path, rows):
    """close() returns once the training has committed; a writer killed while training leaves the untrained
    generation, and the next writer trains it again (and its first commit removes the killed one's pending files)."""
    col = ockstore.create_collection(tmp_path / "c", ockstore.OCKM(4, 2, 4, n_iter=2), train_size=1000)
    col.add(rows[:1200])
    col.close()
    with ockstore.open_collection(tmp_path / "c") as reader:
        assert reader.trained
    script = '''
import sys, time, numpy as np, ockstore
from helpers import gaussian_mixture
from ockstore.collection import background
encode = background.encode_live_rows
def encoded(*args, **kwargs):  # the training's files are written: the process is killed before its commit
    out = encode(*args, **kwargs)
    print("encoded", flush=True)
    time.sleep(120)
    return out
background.encode_live_rows = encoded
col = ockstore.create_collection(sys.argv[1], ockstore.OCKM(4, 2, 4, n_iter=2), train_size=1000)
col.add(gaussian_mixture(1500, 16, seed=5))
col.wait_trained()
'''
    path = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=subprocess_env())
    run_until_sigkill(proc, kill_after_line="encoded", timeout=120)
    assert any(name.startswith(".pending.") for name in os.listdir(path))  # the training's files, unfinished
    with ockstore.open_collection(path) as reader:
        assert not reader.trained and len(reader) == 1500
    writer = ockstore.open_collection(path, "a")  # due for training: it starts again
    assert writer.wait_trained(timeout=300) is True
    writer.close()
    assert not any(name.startswith(".pending.") for name in os.listdir(path))  # removed by the first commit
    with ockstore.open_collection(path) as reader:
        assert reader.trained and len(reader) == 1500
        reader.verify()


def test_a_model_the_library_picks_is_picked_again_as_the_collection_grows(tmp_path, rows):
    """create_collection without a quantizer: trained at train_size with default_quantizer's pick for those rows,
    picked again in the background once the rows reach GROWTH_FACTOR times those and the pick changes (flat to
    inverted file here, FLAT_BELOW lowered for the test)."""
    from ockstore.quantizers import default as default_module

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(default_module, "FLAT_BELOW", 2500)
        col = ockstore.create_collection(tmp_path / "c", train_size=1200)
        col.add(rows[:1300])
        assert col.wait_trained(timeout=120)
        assert not hasattr(col.quantizer, "n_lists") and col._snap.manifest.auto.trained_rows == 1300
        col.add(rows[1300:2000])  # 2,000 rows: below 2 x 1,300, nothing to do
        assert not col._trainer.running
        col.add(rows[2000:2700])  # 2,700 rows: the pick is an inverted file now
        assert col.wait_trained(timeout=120)
        assert hasattr(col.quantizer, "n_lists") and col._snap.manifest.auto.trained_rows == 2700
        assert len(col) == 2700
        col.close()


def test_the_auto_model_key_of_the_manifest_C17(tmp_path, rows):
    """C17: auto_model names the metric (the training's, before training) and, once trained, the rows the model was
    fitted for; anything else does not verify. Written and read back by a collection without a quantizer."""
    import dataclasses

    from ockstore.collection import manifest as manifest_module
    from ockstore.collection import names as names_module
    from ockstore.errors import FormatError

    col = ockstore.create_collection(tmp_path / "c", metric="ip", train_size=1000)
    m0 = col._snap.manifest
    assert m0.auto == manifest_module.AutoModel("ip", None) and m0.training.params["metric"] == "ip"
    col.add(rows[:1100])
    assert col.wait_trained(timeout=300)
    m1 = col._snap.manifest
    assert m1.auto == manifest_module.AutoModel("ip", 1100) and m1.training is None
    col.close()
    folder = tmp_path / "c"
    bad = [dataclasses.replace(m0, generation=50, auto=manifest_module.AutoModel("cosine", None)),  # not the training's
           dataclasses.replace(m0, generation=51, auto=manifest_module.AutoModel("ip", 10)),  # rows before training
           dataclasses.replace(m1, generation=52, auto=manifest_module.AutoModel("ip", None)),  # no rows after
           dataclasses.replace(m1, generation=53, auto=manifest_module.AutoModel("l1", 10))]
    for manifest in bad:
        manifest_module.write_manifest(folder, manifest, {})
        with pytest.raises(FormatError, match="auto_model"):
            manifest_module.read_manifest(folder / names_module.manifest_name(manifest.generation),
                                          manifest.generation)
