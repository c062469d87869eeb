"""The model a collection is checked against (tests of collections, their property test and their SIGKILL helper):
a dict id -> vector with the collection's id rules, and the oracle of a collection search, one ``Index`` built from
the model's live rows (encoded with the same quantizer: the same codes, so exactly the same distances and ids).

Imported as ``from collection_model import ...`` (conftest.py puts this folder on sys.path; helper scripts run next to
it).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import ockstore
from helpers import gaussian_mixture

INT64_MAX = np.iinfo(np.int64).max


class Model:
    """What a collection should hold: live id -> vector (float32), and the next id to assign."""

    def __init__(self, dim):
        self.dim = dim
        self.vectors = {}
        self.next_id = 0

    def copy(self):
        other = Model(self.dim)
        other.vectors = dict(self.vectors)
        other.next_id = self.next_id
        return other

    def __len__(self):
        return len(self.vectors)

    def _take(self, ids):
        if len(ids):
            self.next_id = max(self.next_id, int(max(ids)) + 1)

    def add(self, X, ids=None):
        X = np.asarray(X, dtype=np.float32).reshape(-1, self.dim)
        if ids is None:
            ids = list(range(self.next_id, self.next_id + len(X)))
        ids = [int(i) for i in ids]
        assert not any(i in self.vectors for i in ids) and len(set(ids)) == len(ids)
        self.vectors.update(zip(ids, X))
        self._take(ids)
        return np.array(ids, dtype=np.int64)

    def upsert(self, X, ids):
        X = np.asarray(X, dtype=np.float32).reshape(-1, self.dim)
        ids = [int(i) for i in ids]
        self.vectors.update(zip(ids, X))
        self._take(ids)

    def delete(self, ids):
        removed = 0
        for i in {int(i) for i in ids}:
            removed += self.vectors.pop(i, None) is not None
        return removed

    def live_ids(self):
        return np.array(sorted(self.vectors), dtype=np.int64)

    def rows(self):
        """(X, ids): the live vectors and their ids, by ascending id."""
        ids = self.live_ids()
        X = np.array([self.vectors[i] for i in ids], dtype=np.float32).reshape(len(ids), self.dim)
        return X, ids


def reference_index(quantizer, model, *, norm_encoding=None, store_vectors=None):
    """One Index over the model's live rows (the oracle of a collection search)."""
    X, ids = model.rows()
    return ockstore.Index.from_vectors(quantizer, X, ids, norm_encoding=norm_encoding, store_vectors=store_vectors,
                                       n_threads=1)


def assert_same_search(collection, reference, Q, k, **options):
    """The collection's results equal the reference index's, bit for bit (values and ids). A collection that stores
    vectors re-ranks by default (``rerank`` None: ``_search_options.default_rerank``); the reference is asked for the
    same re-ranking."""
    from ockstore.search.options import default_rerank

    D1, I1 = collection.search(Q, k, **options)
    if options.get("rerank") is None and collection.store_vectors is not None and collection.trained:
        options = {**options, "rerank": max(default_rerank(k, len(collection)), 1)}
    D2, I2 = reference.search(Q, k, **options)
    np.testing.assert_array_equal(I1, I2, err_msg=f"ids differ with {options}")
    np.testing.assert_array_equal(D1, D2, err_msg=f"values differ with {options}")
    return D1, I1


# ----------------------------------------------------------------------------------------- small test collections
P = 10  # the dimension of the vectors of tests/test_collection*.py


def vectors(n, seed):
    """n seeded vectors of dimension P (a Gaussian mixture)."""
    return gaussian_mixture(n, P, seed=seed)


@functools.lru_cache(maxsize=None)
def fitted_quantizers():
    """Small fitted quantizers of dimension P, by name (fitted once per process)."""
    learn = vectors(1500, 1)
    return {
        "ockm": ockstore.OCKM(3, 2, 4, n_codewords=16, n_iter=3, seed=0).fit(learn),
        "pq": ockstore.PQ(5, n_codewords=16, n_iter=3, seed=0).fit(learn),
        "ockm-ip": ockstore.OCKM(3, 2, 4, n_codewords=16, n_iter=3, metric="ip", seed=0).fit(learn),
        "pq-cosine": ockstore.PQ(5, n_codewords=16, n_iter=3, metric="cosine", seed=0).fit(learn),
    }


@pytest.fixture(scope="module")
def quantizers():
    """The fitted_quantizers of a test module (a pytest fixture)."""
    return fitted_quantizers()


@pytest.fixture
def q(quantizers):
    """Its OCKM (a pytest fixture)."""
    return quantizers["ockm"]


def populated(path, quantizer, *, store_vectors=None, norm_encoding=None, merge_factor=3, seed=0):
    """A new collection with several segments, deletions and an upsert, and its model."""
    c = ockstore.create_collection(path, quantizer, store_vectors=store_vectors, norm_encoding=norm_encoding,
                                   merge_factor=merge_factor)
    model = Model(P)
    rng = np.random.default_rng(seed)
    for step in range(6):
        X = vectors(int(rng.integers(20, 90)), 100 * seed + step)
        ids = None if step % 2 == 0 else rng.choice(100_000, size=len(X), replace=False) + 1000 * step
        assert np.array_equal(c.add(X, ids), model.add(X, ids))
    doomed = rng.choice(model.live_ids(), size=40, replace=False)
    assert c.delete(doomed) == model.delete(doomed)
    replaced = np.concatenate([rng.choice(model.live_ids(), size=5, replace=False), [7_777_777, 8_888_888]])
    X = vectors(len(replaced), 999 + seed)
    c.upsert(X, replaced)
    model.upsert(X, replaced)
    assert len(c.info()["segment_files"]) > 1 and c.info()["deleted"] > 0
    return c, model
