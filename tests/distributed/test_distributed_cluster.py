"""ockstore.distributed against real failures and real processes: a worker process killed in the middle of a build
(the build completes, byte-identical), a cluster restarted in the middle of one (it fails cleanly, the previous
generation stays), a scheduler and two workers started as separate processes with the `dask` command line (build and
search through the address), and `ockstore build --workers / --scheduler`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("distributed", reason="dask[distributed] is not installed (pip install 'ockstore[dask]')")

import dask.array as da  # noqa: E402
import distributed  # noqa: E402

import ockstore  # noqa: E402
from ockstore import distributed as od  # noqa: E402
from ockstore.datasets import write_vecs  # noqa: E402
from distributed_helpers import (  # noqa: E402
    DIM, N, base, leftovers, local_cluster, quantizers, ranges, reference_segments, segment_bytes,
)


def _slow_blocks(X, rows, seconds):
    """X as a dask.array whose blocks of ``rows`` rows each take ``seconds`` to compute (on a worker)."""

    def slow(block):
        import time as t

        t.sleep(seconds)
        return block

    return da.from_array(X, chunks=(rows, DIM)).map_blocks(slow, dtype=X.dtype)


def test_a_worker_killed_in_the_middle_of_a_build_costs_time_not_correctness(tmp_path):
    """SIGKILL one worker process once two partitions are done (results it holds are lost, tasks in flight too):
    Dask runs them again, the build completes with segments byte-identical to a single-process build, and the
    pending files of the lost tasks are removed."""
    X, q = base(), quantizers()["ockm"]
    with local_cluster(2) as client:
        pids = client.run(os.getpid)
        killed = []

        def progress(done, total, rows, rows_total):
            if done == 2 and not killed:
                victim = sorted(pids.values())[0]
                os.kill(victim, signal.SIGKILL)
                killed.append(victim)

        c = od.build_collection(tmp_path / "c", q, _slow_blocks(X, 200, 0.15), client=client, progress=progress)
        assert killed
        assert len(c) == N and c.generation == 1
        c.verify()
        c.close()
        assert client.run(os.getpid).values() != pids.values()  # the nanny started a new worker process
    assert segment_bytes(tmp_path / "c") == reference_segments(tmp_path / "ref", q, X, ranges(N, 200))
    assert leftovers(tmp_path / "c") == []


def test_a_cluster_restarted_in_the_middle_of_a_build_leaves_the_previous_generation(tmp_path):
    X, q = base(), quantizers()["ockm"]
    with local_cluster(2) as client:
        od.build_collection(tmp_path / "c", q, da.from_array(X[:300], chunks=100), client=client).close()
        before = sorted(os.listdir(tmp_path / "c"))

        def progress(done, total, rows, rows_total):
            if done == 2:
                client.restart()

        with pytest.raises(RuntimeError, match="cancelled.*nothing was committed"):
            od.build_collection(tmp_path / "c", None, _slow_blocks(X, 200, 0.1), client=client, progress=progress)
        assert sorted(os.listdir(tmp_path / "c")) == before
        with ockstore.open_collection(tmp_path / "c") as c:
            assert c.generation == 1 and len(c) == 300
        # a new collection: removed again
        with pytest.raises(RuntimeError, match="cancelled"):
            od.build_collection(tmp_path / "new", q, _slow_blocks(X, 200, 0.1), client=client, progress=progress)
        assert not (tmp_path / "new").exists()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dask_command():
    exe = Path(sys.executable).with_name("dask")
    if not exe.exists():
        pytest.skip(f"the `dask` command line is not next to {sys.executable}")
    return str(exe)


def test_a_scheduler_and_two_workers_as_separate_processes(tmp_path):
    """`dask scheduler` and two `dask worker` processes on loopback (random free ports): build and search through
    the scheduler's address, from the API and from `ockstore build --scheduler`; then everything is stopped."""
    X, q = base(), quantizers()["ockm"]
    dask_cmd = _dask_command()
    address = f"tcp://127.0.0.1:{_free_port()}"
    procs = [subprocess.Popen([dask_cmd, "scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1],
                               "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        for name in ("w1", "w2"):
            procs.append(subprocess.Popen(
                [dask_cmd, "worker", address, "--name", name, "--nthreads", "1", "--nworkers", "1", "--host",
                 "127.0.0.1", "--no-dashboard", "--no-nanny"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        with distributed.Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=60)
        write_vecs(tmp_path / "x.fvecs", X)
        c = od.build_collection(tmp_path / "c", q, tmp_path / "x.fvecs", client=address, partition_rows=600)
        assert len(c) == N
        c.close()
        assert segment_bytes(tmp_path / "c") == reference_segments(tmp_path / "ref", q, X, ranges(N, 600))
        Q = base(30, seed=8)
        D, I = od.search_collection(tmp_path / "c", Q, 10, client=address)
        with ockstore.open_collection(tmp_path / "c") as c:
            D2, I2 = c.search(Q, 10)
        np.testing.assert_array_equal(I, I2)
        np.testing.assert_array_equal(D, D2)
        # the command line, through the same scheduler
        ockstore.save_quantizer(tmp_path / "q.ockq", q)
        proc = subprocess.run([sys.executable, "-m", "ockstore", "build", str(tmp_path / "q.ockq"),
                               str(tmp_path / "x.fvecs"), "-o", str(tmp_path / "cli"), "--scheduler", address,
                               "--partition-rows", "600", "-q"], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert f"the cluster of {address}" in proc.stdout and f"{N:,} vectors in 5 segments" in proc.stdout
        assert segment_bytes(tmp_path / "cli") == segment_bytes(tmp_path / "c")
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_command_line_build_with_local_workers(tmp_path):
    """`ockstore build QUANTIZER FILES... -o FOLDER --workers 2`: the collection of build_collection, a progress bar
    over tasks, and the usage errors of the options that only one kind of build takes."""
    X, q = base(), quantizers()["ockm"]
    ockstore.save_quantizer(tmp_path / "q.ockq", q)
    write_vecs(tmp_path / "a.npy", X[:1000])
    write_vecs(tmp_path / "b.fvecs.gz", X[1000:])
    np.save(tmp_path / "ids.npy", np.arange(N, dtype=np.int64) * 3 + 1)
    run = [sys.executable, "-m", "ockstore", "build", str(tmp_path / "q.ockq"), str(tmp_path / "a.npy"),
           str(tmp_path / "b.fvecs.gz"), "-o", str(tmp_path / "c"), "--workers", "2", "--ids",
           str(tmp_path / "ids.npy"), "--store-vectors", "uint8", "--metadata", "source=test", "--progress"]
    proc = subprocess.run(run, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"{N:,} vectors in 2 segments" in proc.stdout and "2 local workers" in proc.stdout
    assert "build [" in proc.stderr and "2/2 tasks" in proc.stderr
    with ockstore.open_collection(tmp_path / "c") as c:
        assert c.metadata == {"source": "test"} and c.store_vectors == "uint8"
        np.testing.assert_array_equal(c.ids(), np.arange(N) * 3 + 1)
    ids = np.arange(N, dtype=np.int64) * 3 + 1
    assert segment_bytes(tmp_path / "c") == reference_segments(tmp_path / "ref", q, X, [(0, 1000), (1000, N)],
                                                               ids=ids, store_vectors="uint8")
    # usage errors (exit 2) and data errors (exit 1, one line)
    usage = [["--threads", "2"], ["--chunk-size", "10"]]
    for extra in usage:
        proc = subprocess.run(run + extra, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and "not with --workers or --scheduler" in proc.stderr
    single = run[:7] + ["-o", str(tmp_path / "x.ock")]
    proc = subprocess.run(single, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "several base files need --workers or --scheduler" in proc.stderr
    proc = subprocess.run(run[:6] + ["-o", str(tmp_path / "x.ock"), "--partition-rows", "5"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "--partition-rows: needs --workers or --scheduler" in proc.stderr
    proc = subprocess.run(run[:6] + ["-o", str(tmp_path / "c"), "--workers", "1", "--ids", str(tmp_path / "ids.npy")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "ids must have shape (1000,)" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_command_line_build_of_an_ivf_collection(tmp_path):
    """A quantizer file of an IVF: the collection's segments are inverted files, byte-identical to IndexWriter's, and
    the command says so."""
    X = base()
    ivf = ockstore.IVF(n_lists=6, quantizer=ockstore.OCKM(4, 2, 4, n_codewords=32, n_iter=2, seed=0))
    ivf.fit(base(1200, seed=4))
    ockstore.save_quantizer(tmp_path / "ivf.ockq", ivf)
    write_vecs(tmp_path / "x.npy", X)
    command = [sys.executable, "-m", "ockstore", "build", str(tmp_path / "ivf.ockq"), str(tmp_path / "x.npy"), "-o",
               str(tmp_path / "c"), "--workers", "2", "--partition-rows", "1000", "-q"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"{N:,} vectors in 3 segments" in proc.stdout and "IVF of 6 lists over OCKM 64 bits" in proc.stdout
    assert segment_bytes(tmp_path / "c") == reference_segments(tmp_path / "ref", ivf, X, ranges(N, 1000))
