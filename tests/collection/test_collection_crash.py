"""Collections across processes: a writer killed with SIGKILL at any file-system event of its commits (docs/FORMAT.md
C10-C12), and readers in other processes searching their snapshots while a writer commits, compacts and removes
files.

After a kill, the collection opens at a committed generation no older than the last one acknowledged (the in-flight
operation either fully committed or not at all), verifies, holds exactly the model's rows (none lost, none deleted
back) and searches like one index of them; the lock is free again, and the next writer's first commit leaves only the
files of the live generation and its fallback (C16).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import warnings

import numpy as np
import pytest

import ockstore
from ockstore.search.options import default_rerank
from ockstore.collection import names
from collection_model import Model, assert_same_search, reference_index
from helpers import gaussian_mixture
from helpers import SUPPORT, subprocess_env

P = 8


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(quantizer, its file, a template collection folder holding 50 vectors)."""
    root = tmp_path_factory.mktemp("crash")
    q = ockstore.OCKM(2, 2, 3, n_codewords=16, n_iter=2, seed=0).fit(gaussian_mixture(600, P, seed=3))
    qpath = root / "q.ockq"
    ockstore.save_quantizer(qpath, q)
    template = root / "template"
    with ockstore.create_collection(template, q, store_vectors="float32", merge_factor=3) as c:
        c.add(gaussian_mixture(50, P, seed=4))
    return q, qpath, template


def _apply(model, op):
    if op["op"] == "add":
        model.add(np.array(op["X"], dtype=np.float32))
    elif op["op"] == "add_ids":
        model.add(np.array(op["X"], dtype=np.float32), op["ids"])
    elif op["op"] == "upsert":
        model.upsert(np.array(op["X"], dtype=np.float32), op["ids"])
    elif op["op"] == "delete":
        model.delete(op["ids"])


def _run_writer(qpath, folder, seed, kill_at):
    return subprocess.run([sys.executable, str(SUPPORT / "collection_kill_writer.py"), str(qpath), str(folder),
                           str(seed), str(kill_at)], capture_output=True, text=True, env=subprocess_env(), timeout=120)


def _trial(setup, folder, seed, kill_at):
    q, qpath, template = setup
    shutil.copytree(template, folder)
    proc = _run_writer(qpath, folder, seed, kill_at)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-2000:])
    model = Model(P)
    model.add(gaussian_mixture(50, P, seed=4))
    acked, in_flight = 1, None
    for line in proc.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word == "BEGIN":
            in_flight = json.loads(rest)
        elif word == "ACK":
            _apply(model, in_flight)
            acked, in_flight = int(rest), None
    committed = model.copy()
    if in_flight is not None:
        _apply(committed, in_flight)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a crash never leaves a manifest that does not verify
        reader = ockstore.open_collection(folder)
    with reader:
        assert reader.generation >= acked
        if reader.generation == acked:
            expected = model
        else:  # the in-flight operation reached its commit point
            assert in_flight is not None and reader.generation == acked + 1
            expected = committed
        reader.verify()
        assert np.array_equal(reader.ids(), expected.live_ids())
        ref = reference_index(q, expected, store_vectors="float32")
        assert_same_search(reader, ref, gaussian_mixture(6, P, seed=seed), 12)
        assert_same_search(reader, ref, gaussian_mixture(6, P, seed=seed), 5, rerank=20)
    with ockstore.open_collection(folder, "a") as writer:  # the dead writer's lock went with it
        writer.add(gaussian_mixture(3, P, seed=9))  # its first commit removes what the dead writer left (C16)
        expected.add(gaussian_mixture(3, P, seed=9))
        writer.verify()
        assert np.array_equal(writer.ids(), expected.live_ids())
        kept = set()
        for generation in (writer.generation, writer.generation - 1):
            kept |= {names.manifest_name(generation)} | ockstore.collection.manifest.read_manifest(
                folder / names.manifest_name(generation), generation)[0].referenced()
    assert {name.name for name in folder.iterdir()} == kept | {names.LOCK_NAME}


def _events(setup, tmp_path, seed):
    _, qpath, template = setup
    folder = tmp_path / f"dry-{seed}"
    shutil.copytree(template, folder)
    proc = _run_writer(qpath, folder, seed, 0)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return int(proc.stdout.splitlines()[-1].split()[1])


def _trials(setup, tmp_path, n_trials, seed):
    rng = np.random.default_rng(seed)
    events = {}
    for trial in range(n_trials):
        run_seed = int(rng.integers(4))
        if run_seed not in events:
            events[run_seed] = _events(setup, tmp_path, run_seed)
        event = int(rng.integers(1, events[run_seed] + 1))
        _trial(setup, tmp_path / f"trial-{trial}", run_seed, event if trial % 2 else -event)


@pytest.mark.slow
def test_sigkill_at_random_events_of_commits(setup, tmp_path):
    """C10: a few kills at random events (before or after each)."""
    _trials(setup, tmp_path, 6, seed=1)


@pytest.mark.slow
def test_sigkill_at_many_random_events_of_commits(setup, tmp_path):
    """C10-C12: many kills at random events of adds, upserts, deletes, compactions, merges and vacuums."""
    _trials(setup, tmp_path, 40, seed=2)


def test_readers_in_other_processes_keep_their_snapshots(setup, tmp_path):
    """Three reader processes, opened at different generations, search their snapshot unchanged while this process
    commits, merges, compacts and vacuums; after refresh they see the newest generation."""
    q, _, template = setup
    folder = tmp_path / "c"
    shutil.copytree(template, folder)
    stop = tmp_path / "stop"
    models = {}
    model = Model(P)
    model.add(gaussian_mixture(50, P, seed=4))
    readers = []
    writer = ockstore.open_collection(folder, "a")
    models[writer.generation] = model.copy()
    rng = np.random.default_rng(5)
    try:
        for round_ in range(3):
            proc = subprocess.Popen([sys.executable, str(SUPPORT / "collection_reader.py"), str(folder), str(round_),
                                     str(stop)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=subprocess_env())
            readers.append(proc)
            line = proc.stdout.readline()
            assert line.startswith("OPENED"), (line, proc.stderr.read() if proc.poll() is not None else "")
            proc.opened = json.loads(line.split(" ", 1)[1])
            for step in range(6):
                X = gaussian_mixture(int(rng.integers(5, 40)), P, seed=100 * round_ + step)
                if step % 3 == 2:
                    doomed = rng.choice(model.live_ids(), size=10, replace=False)
                    writer.delete(doomed)
                    model.delete(doomed)
                else:
                    writer.add(X)
                    model.add(X)
                models[writer.generation] = model.copy()
            writer.compact()
            writer.vacuum(keep_generations=1)  # the readers' files leave the folder
            models[writer.generation] = model.copy()
        stop.write_text("stop")
        for proc in readers:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, (out[-2000:], err[-2000:])
            done = json.loads(out.splitlines()[-1].split(" ", 1)[1])
            assert done["searches"] > 0 and done["generation"] == writer.generation
            Q = gaussian_mixture(5, P, seed=readers.index(proc))
            for seen in (proc.opened, done):
                live = models[seen["generation"]]  # the collection stores vectors: re-ranked by default
                D, I = reference_index(q, live, store_vectors="float32").search(Q, 8, rerank=default_rerank(8, len(live)))
                assert np.array_equal(np.array(seen["I"]), I)
                assert np.array_equal(np.array(seen["D"], dtype=np.float32), D)
        assert len({p.opened["generation"] for p in readers}) == 3
    finally:
        stop.write_text("stop")
        for proc in readers:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        writer.close()
