"""Helpers of the tests of ockstore.distributed (tests/test_distributed*.py): small data whose values every vector
file format holds exactly, quantizers, the single-process build of the same partitions (the oracle), and a Dask
cluster of worker processes.

Imported as ``from distributed_helpers import ...`` (conftest.py puts this folder on sys.path).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os

import numpy as np

import ockstore
from helpers import gaussian_mixture
from ockstore.collection import names
from ockstore.indexfile.segment_file import ModelRef, model_fingerprint

DIM = 12
N = 2600


def base(n=N, seed=3):
    """n vectors of DIM integer values in 0..255, as float32: .fvecs, .bvecs and .npy hold them exactly."""
    X = gaussian_mixture(n, DIM, seed=seed, spread=3.0)
    return np.clip(np.rint(X * 20 + 128), 0, 255).astype(np.float32)


@functools.lru_cache(maxsize=None)
def quantizers():
    learn = base(1200, seed=4)
    return {
        "ockm": ockstore.OCKM(4, 2, 4, n_codewords=32, n_iter=3, seed=0).fit(learn),
        "pq-ip": ockstore.PQ(4, n_codewords=32, n_iter=3, metric="ip", seed=0).fit(learn),
    }


def reference_segments(folder, quantizer, X, bounds, ids=None, **options):
    """The oracle: each partition [a, b) of X encoded by a single-process IndexWriter into its own file (the name a
    build's commit gives it), by reference to the collection's quantizer.ockq as a collection writes its segments
    (docs/FORMAT.md section 18); returns the files' bytes in partition order."""
    os.makedirs(folder, exist_ok=True)
    out = []
    spec_options = {key: options[key] for key in ("norm_encoding", "store_vectors") if key in options}
    ref = ModelRef(names.QUANTIZER_NAME, model_fingerprint(quantizer))
    for number, (a, b) in enumerate(bounds):
        path = os.path.join(folder, f"ref.{number}.ock")
        with ockstore.IndexWriter(path, quantizer, n_threads=1, _model_ref=ref, **spec_options) as writer:
            writer.add(X[a:b], ids=np.arange(a, b) if ids is None else ids[a:b])
        with open(path, "rb") as f:
            out.append(f.read())
    return out


def segment_bytes(folder):
    """The bytes of the segments of a collection's newest generation, in manifest order."""
    with ockstore.open_collection(folder) as c:
        files = [s["file"] for s in c.info()["segment_files"]]
    out = []
    for file in files:
        with open(os.path.join(folder, file), "rb") as f:
            out.append(f.read())
    return out


def ranges(n, step):
    return [(a, min(n, a + step)) for a in range(0, n, step)]


def leftovers(folder):
    """Files of the folder that no committed generation should leave: pending segments and temporary files."""
    return [n for n in os.listdir(folder) if names.is_pending(n) or names.is_temporary(n)]


@contextlib.contextmanager
def local_cluster(n_workers=2):
    """A distributed.Client on a LocalCluster of worker processes (one thread each), closed on exit."""
    import distributed

    with distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None,
                                  scheduler_kwargs={"dashboard_address": ":0"}, silence_logs=logging.ERROR) as cluster, \
            distributed.Client(cluster) as client:
        yield client
