"""Shared fixtures: small seeded datasets and a cached sample of the real SIFT data.

The real data is looked up where ``helpers.data_root`` says: the folder named by the environment variable
OCKSTORE_DATA (the folder that holds ``sift-real/``), by default ``<repo>/../shared/data``; tests that need it skip,
saying where they looked, when it is absent.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Idle OpenMP threads sleep instead of spinning. Results do not depend on it; run time does: on a shared machine
# (2 cores, other jobs running) the default spin-wait of every short parallel region made this suite ~2.5x slower.
# Must be set before ockstore's extension loads the OpenMP runtime; an explicit setting in the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:  # so that test modules can `import reference`
    sys.path.insert(0, str(TESTS))

from helpers import data_root  # noqa: E402

DATA_ROOT = data_root()
SIFT = DATA_ROOT / "sift-real"
SIFT_SAMPLE_ROWS = 20_000


def gaussian_mixture(n, dim, *, n_clusters=8, spread=4.0, seed=0, dtype=np.float32):
    """n seeded vectors around ``n_clusters`` centres: a structured dataset that quantizers can actually learn.

    Each dimension has its own scale (1 down to 0.1) so that the rotation and the subspace split matter.
    """
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=spread, size=(n_clusters, dim))
    scales = np.linspace(1.0, 0.1, dim)
    X = centres[rng.integers(0, n_clusters, size=n)] + rng.normal(size=(n, dim)) * scales
    return X.astype(dtype)


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
    from ockstore.datasets import iter_vecs

    chunks = iter_vecs(path, chunk_size=n)
    try:
        return next(chunks)
    finally:
        chunks.close()


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
