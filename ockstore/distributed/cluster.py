"""The Dask client a call runs on: the one given, one connected to a scheduler address, or an embedded LocalCluster
(processes, one thread each, as many as cores) started for the call and closed after it (docs/ARCHITECTURE.md,
"Distributed builds and searches")."""

from __future__ import annotations

import contextlib
import logging

import distributed

from .._validation import check_int, resolve_n_threads

__all__ = ["connect", "embedded", "workers_of", "worker_threads"]


@contextlib.contextmanager
def embedded(n_workers=None):
    """A distributed.Client on a new LocalCluster of ``n_workers`` worker processes (None: one per core this process
    may use), one thread each, no dashboard; both closed on exit."""
    n_workers = resolve_n_threads(None) if n_workers is None else check_int(n_workers, "n_workers", min_value=1)
    # One thread per worker: each task encodes or searches on one core, and Dask runs as many tasks as workers.
    # No dashboard; the scheduler's HTTP server (health checks) on a free port rather than 8787, which another
    # cluster of the machine may hold.
    cluster = distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                                       dashboard_address=None, scheduler_kwargs={"dashboard_address": ":0"},
                                       silence_logs=logging.ERROR)
    try:
        with distributed.Client(cluster) as client:
            yield client
    finally:
        cluster.close()


@contextlib.contextmanager
def connect(client):
    """The client of a call: ``client`` itself (a distributed.Client, left open), a new Client connected to the
    scheduler address ``client`` (a str such as "tcp://host:8786", closed on exit), or, for None, an embedded cluster
    (see ``embedded``)."""
    if client is None:
        with embedded() as new:
            yield new
    elif isinstance(client, str):
        with distributed.Client(client) as new:
            yield new
    elif isinstance(client, distributed.Client):
        if client.status not in ("running", "connecting", "newly-created"):
            raise ValueError(f"client: the distributed.Client is {client.status}, not running")
        yield client
    else:
        raise TypeError(f"client must be a distributed.Client, a scheduler address (str) or None, got "
                        f"{type(client).__name__}")


def workers_of(client):
    """The addresses of the cluster's workers, sorted (ValueError when it has none)."""
    workers = sorted(client.nthreads())
    if not workers:
        raise ValueError("client: the Dask cluster has no workers (start some, or wait for them with "
                         "client.wait_for_workers)")
    return workers


def worker_threads():
    """The threads of the worker running the current task (1 outside a worker)."""
    try:
        return max(1, int(distributed.get_worker().state.nthreads))
    except ValueError:  # not in a worker
        return 1
