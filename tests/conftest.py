"""Shared fixtures: small seeded datasets and a cached sample of the real SIFT data.

The real data is looked up where ``helpers.data_root`` says: the folder named by the environment variable
OCKSTORE_DATA (the folder that holds ``sift-real/``), by default ``<repo>/../shared/data``; tests that need it skip,
saying where they looked, when it is absent.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
SUPPORT = TESTS / "support"  # helpers, oracles, fuzzers, helper scripts: imported by name (``import reference``)
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

from helpers import data_root, gaussian_mixture  # noqa: E402

DATA_ROOT = data_root()
SIFT = DATA_ROOT / "sift-real"
SIFT_SAMPLE_ROWS = 20_000


@pytest.fixture(autouse=True, scope="session")
def threads_for_small_work():
    """Every kernel runs on the threads a test gives it, however small its work: the kernels' small-work rule
    (kernels/pool.h, ock_pool_threads) would run the tests' small inputs on one thread, and the many tests that
    compare results on 1, 2 and 3 threads would compare one thread with itself. The rule's own tests
    (tests/kernels/test_pool.py) put it back for their duration."""
    from ockstore import _kernels

    previous = _kernels._set_pool_work_per_thread(0)
    yield
    _kernels._set_pool_work_per_thread(previous)


@pytest.fixture(scope="session")
def mixture():
    """(1500, 10) float32 Gaussian mixture: P = 10 does not divide evenly by M = 3 or 4."""
    return gaussian_mixture(1500, 10, seed=1)


@pytest.fixture(scope="session")
def mixture_queries():
    """(200, 10) float32 vectors from the same mixture as ``mixture`` (different seed for the noise)."""
    return gaussian_mixture(200, 10, seed=2)


def _sift_paths():
    """(learn, base) .bvecs.gz paths of sift-real; skips the test, saying where it looked, when they are absent."""
    learn_path = SIFT / "sift_learn.bvecs.gz"
    base_path = SIFT / "sift_base.bvecs.gz"
    missing = [str(p) for p in (learn_path, base_path) if not p.is_file()]
    if missing:
        pytest.skip(f"sift-real data not found ({', '.join(missing)}); set OCKSTORE_DATA to the folder holding "
                    "sift-real/")
    return learn_path, base_path


def _first_rows(path, n):
    """The first n rows of a vector file (a gzip stream is decompressed that far only)."""
    from ockstore.datasets import iter_vecs

    rows, = iter_vecs(path, chunk_size=n, stop=n)
    return rows


@pytest.fixture(scope="session")
def sift_sample():
    """(learn, base): the first 20,000 vectors of sift-real's learn and base sets, uint8 (20000, 128) each.

    Read once per test session (streamed from the .gz files, stopping after the sample).
    """
    learn_path, base_path = _sift_paths()
    learn = _first_rows(learn_path, SIFT_SAMPLE_ROWS)
    base = _first_rows(base_path, SIFT_SAMPLE_ROWS)
    for arr in (learn, base):
        arr.flags.writeable = False
    return learn, base


@pytest.fixture(scope="session")
def sift_full_learn():
    """(learn, base): all 100,000 sift-real learn vectors and the first 50,000 base vectors, uint8."""
    learn_path, base_path = _sift_paths()
    from ockstore.datasets import read_vecs

    learn = read_vecs(learn_path)
    base = _first_rows(base_path, 50_000)
    for arr in (learn, base):
        arr.flags.writeable = False
    return learn, base
