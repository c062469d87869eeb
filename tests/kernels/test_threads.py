"""The kernels' threads (kernels/pool.h; docs/ARCHITECTURE.md, "Threads"): a process forked after parallel regions
can run its own, concurrent callers share the pool, and small work runs on the caller's thread (the small-work rule).
"""

from __future__ import annotations

import multiprocessing
import sys
import threading

import numpy as np
import pytest

import ockstore
from helpers import gaussian_mixture
from ockstore import _kernels

# A forked child that hangs (GNU OpenMP's threads did: issue 28) is killed after this many seconds and the test fails.
CHILD_TIMEOUT = 60

fork_only = pytest.mark.skipif(sys.platform == "win32" or "fork" not in multiprocessing.get_all_start_methods(),
                               reason="needs the 'fork' start method")


@pytest.fixture(scope="module")
def model():
    X = gaussian_mixture(3000, 16, seed=3)
    return ockstore.OCKM(4, 2, 4, n_codewords=16, n_iter=2, seed=0).fit(X[:1000]), X


def _child_work(quantizer, X, folder, expected, results):
    """In the forked child: its own collection add (encoding on two threads) and batch search, compared with the
    parent's results for the same rows and queries."""
    try:
        workers_at_start = _kernels._pool_workers()
        jobs = _kernels._pool_parallel_jobs()
        col = ockstore.create_collection(folder, quantizer, store_vectors="float32")
        col.add(X[:2000], n_threads=2)
        D, I = col.search(X[2000:2100], 5, n_threads=2)
        col.close()
        index = ockstore.Index.from_vectors(quantizer, X[:2000], n_threads=2)
        D2, I2 = index.search(X[2000:2100], 5, n_threads=2)
        results.put(("ok", workers_at_start, _kernels._pool_parallel_jobs() - jobs,
                     bool(np.array_equal(I, expected[1]) and np.array_equal(D, expected[0])),
                     bool(np.array_equal(I2, expected[3]) and np.array_equal(D2, expected[2]))))
    except BaseException as e:  # the parent reports it
        results.put(("error", repr(e)))


@fork_only
def test_a_child_forked_after_parallel_regions_adds_and_searches(model, tmp_path):
    """The parent encodes (an Index built on two threads, a collection add) and searches on two threads; a child
    forked then (multiprocessing's "fork", Python 3.11's default on Linux) completes its own add and search, with the
    parent's results, within CHILD_TIMEOUT seconds (a hung child is killed: the test fails, it does not hang). With
    GNU OpenMP's threads this child blocked forever in its first parallel region."""
    q, X = model
    parent = ockstore.create_collection(tmp_path / "parent", q, store_vectors="float32")
    parent.add(X[:2000], n_threads=2)
    D, I = parent.search(X[2000:2100], 5, n_threads=2)
    parent.close()
    index = ockstore.Index.from_vectors(q, X[:2000], n_threads=2)
    D2, I2 = index.search(X[2000:2100], 5, n_threads=2)
    assert _kernels._pool_workers() >= 1 and _kernels._pool_parallel_jobs() > 0  # the parent really ran threads
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_child_work, args=(q, X, tmp_path / "child", (D, I, D2, I2), results))
    child.start()
    child.join(CHILD_TIMEOUT)
    if child.is_alive():
        child.kill()
        child.join()
        pytest.fail(f"the forked child did not finish its add and search within {CHILD_TIMEOUT} s (hung)")
    assert child.exitcode == 0
    outcome = results.get(timeout=10)
    assert outcome[0] == "ok", outcome
    _, workers_at_start, child_jobs, same_collection, same_index = outcome
    assert workers_at_start == 0  # the child starts with an empty pool...
    assert child_jobs > 0  # ...and ran parallel regions of its own
    assert same_collection and same_index


@fork_only
def test_a_child_forked_while_another_thread_runs_kernels(model):
    """A fork while another thread of the parent is inside a parallel region (a search with the GIL released): the
    child does not inherit the pool's job nor its lock, and searches on two threads."""
    q, X = model
    index = ockstore.Index.from_vectors(q, X[:2000], n_threads=2)
    expected = index.search(X[2000:2050], 5, n_threads=1)
    stop = threading.Event()

    def search_until_stopped():
        while not stop.is_set():
            index.search(X[2000:2400], 5, n_threads=2)

    thread = threading.Thread(target=search_until_stopped)
    thread.start()
    try:
        context = multiprocessing.get_context("fork")
        for _ in range(5):
            results = context.Queue()
            child = context.Process(target=_search_in_child, args=(index, X[2000:2050], expected, results))
            child.start()
            child.join(CHILD_TIMEOUT)
            if child.is_alive():
                child.kill()
                child.join()
                pytest.fail(f"the forked child did not finish its search within {CHILD_TIMEOUT} s (hung)")
            assert child.exitcode == 0 and results.get(timeout=10) == "same"
    finally:
        stop.set()
        thread.join()


def _search_in_child(index, Q, expected, results):
    D, I = index.search(Q, 5, n_threads=2)
    results.put("same" if np.array_equal(D, expected[0]) and np.array_equal(I, expected[1]) else "different")


def test_concurrent_callers_get_the_results_of_one(model):
    """Python threads searching one index at once (the GIL released in the kernels): one of them runs on the pool,
    the others on their own threads; every result is the single-threaded one."""
    q, X = model
    index = ockstore.Index.from_vectors(q, X[:2000], n_threads=2)
    Q = X[2000:2300]
    expected = index.search(Q, 5, n_threads=1)
    failures = []

    def search(threads):
        for _ in range(20):
            D, I = index.search(Q, 5, n_threads=threads)
            if not (np.array_equal(D, expected[0]) and np.array_equal(I, expected[1])):
                failures.append(threads)

    threads = [threading.Thread(target=search, args=(t,)) for t in (2, 3, 2, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


# ------------------------------------------------------------------------------------------------ the small-work rule
@pytest.fixture
def small_work_rule():
    """The rule as it is outside the tests (tests/conftest.py turns it off), on a pool that is not crowded (how
    crowded it is depends on the machine's load while earlier tests ran)."""
    previous = _kernels._set_pool_work_per_thread(_kernels.POOL_WORK_PER_THREAD)
    crowding = _kernels._set_pool_crowding(0)
    yield _kernels.POOL_WORK_PER_THREAD
    _kernels._set_pool_work_per_thread(previous)
    _kernels._set_pool_crowding(crowding)


def test_the_rule_gives_a_thread_per_share_of_work(small_work_rule):
    unit = small_work_rule
    assert _kernels.pool_threads(8, 0) == 1
    assert _kernels.pool_threads(8, 1.99 * unit) == 1  # a second thread only for two shares of work
    assert _kernels.pool_threads(8, 2 * unit) == 2
    assert _kernels.pool_threads(8, 5.5 * unit) == 5
    assert _kernels.pool_threads(8, 1e12) == 8
    assert _kernels.pool_threads(1, 1e12) == 1
    assert _kernels.pool_threads(0, 1e12) == 1
    assert _kernels.pool_threads(4, float("nan")) == 1
    assert _kernels.pool_threads(4, float("inf")) == 4
    _kernels._set_pool_work_per_thread(0)  # off: every job gets its threads
    assert _kernels.pool_threads(3, 1) == 3


def test_a_crowded_pool_asks_for_more_work_per_thread(small_work_rule):
    """While recent jobs' threads gained no time (the machine's other cores busy), a job gets threads only for 50
    times the work per thread, and one small job in 16 still runs on two threads (to notice when cores are free)."""
    unit = small_work_rule
    previous = _kernels._set_pool_crowding(1024)
    try:
        assert _kernels.pool_threads(8, 1.5 * unit) == 1  # below two shares: one thread however crowded
        small = [_kernels.pool_threads(8, 5 * unit) for _ in range(64)]
        assert sorted(set(small)) == [1, 2] and small.count(2) == 4
        assert _kernels.pool_threads(1, 5 * unit) == 1
        assert _kernels.pool_threads(8, 99 * unit) in (1, 2)  # a small job (a probe runs on two threads)
        assert _kernels.pool_threads(8, 125 * unit) == 2
        assert _kernels.pool_threads(8, 1e12) == 8
        _kernels._set_pool_crowding(0)
        assert _kernels.pool_threads(8, 5 * unit) == 5
    finally:
        _kernels._set_pool_crowding(previous)


def test_small_searches_and_adds_run_on_the_callers_thread(model, small_work_rule):
    """A one-query search of a few thousand rows and an add of a few rows start no parallel region, whatever
    n_threads says; a batch large enough does."""
    q, X = model
    index = ockstore.Index.from_vectors(q, X[:2000], n_threads=1)
    jobs = _kernels._pool_parallel_jobs()
    for threads in (None, 2, 8):
        index.search(X[2000], 10, n_threads=threads)
        index.search(X[2000:2004], 10, n_threads=threads)
        q.encode(X[:50], n_threads=threads)
    assert _kernels._pool_parallel_jobs() == jobs
    big = ockstore.Index.from_vectors(q, np.tile(X, (40, 1)), n_threads=2)  # encoding 120,000 rows: threads
    big.search(X[:200], 10, n_threads=2)
    assert _kernels._pool_parallel_jobs() > jobs
