"""A stateful property test of collections (hypothesis RuleBasedStateMachine) against a model, a dict id -> vector
(collection_model.Model): random adds (with and without ids, refused ones included), upserts, deletes, compactions,
vacuums, reopenings of the writer, readers opened and refreshed, and searches compared with one index built from the
model's live rows (the same quantizer: exactly the same values and ids, every option).

A small merge factor (3) makes the size-tiered policy merge often; after every step the collection holds exactly the
model's ids, at a generation that never goes back, and the files of the folder are only those the format names.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import ockstore
from ockstore.collection import names
from collection_model import Model, assert_same_search, reference_index
from helpers import gaussian_mixture

P = 8
ID_SPACE = 120  # user ids are drawn from 0..ID_SPACE-1: adds, upserts and deletes collide often
QUANTIZERS = {}


def quantizer(metric):
    if metric not in QUANTIZERS:
        learn = gaussian_mixture(800, P, seed=11)
        QUANTIZERS[metric] = ockstore.OCKM(2, 2, 3, n_codewords=16, n_iter=2, metric=metric, seed=0).fit(learn)
    return QUANTIZERS[metric]


def vectors(n, seed):
    return gaussian_mixture(n, P, seed=seed)


ids_strategy = st.lists(st.integers(0, ID_SPACE - 1), min_size=1, max_size=10, unique=True)


class CollectionMachine(RuleBasedStateMachine):
    """The collection under test (``self.c``, the writer) and its model; optionally a reader and the model of its
    snapshot."""

    @initialize(metric=st.sampled_from(["l2", "ip"]), store=st.sampled_from([None, "float32"]))
    def create(self, metric, store):
        self.tmp = tempfile.mkdtemp(prefix="ockstore-state-")
        self.folder = os.path.join(self.tmp, "c")
        self.q = quantizer(metric)
        self.store = store
        self.c = ockstore.create_collection(self.folder, self.q, store_vectors=store, merge_factor=3)
        self.model = Model(P)
        self.reader = None
        self.reader_model = None
        self.generation = 0

    def teardown(self):
        if getattr(self, "c", None) is not None:
            self.c.close()
        if getattr(self, "reader", None) is not None:
            self.reader.close()
        if getattr(self, "tmp", None) is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------------------------------------------------ changes
    @rule(n=st.integers(1, 12), seed=st.integers(0, 10**6))
    def add_without_ids(self, n, seed):
        X = vectors(n, seed)
        assert np.array_equal(self.c.add(X), self.model.add(X))

    @rule(ids=ids_strategy, seed=st.integers(0, 10**6))
    def add_with_ids(self, ids, seed):
        X = vectors(len(ids), seed)
        if any(i in self.model.vectors for i in ids):
            generation = self.c.generation
            with pytest.raises(ValueError, match="already in the collection"):
                self.c.add(X, ids)
            assert self.c.generation == generation
        else:
            assert np.array_equal(self.c.add(X, ids), self.model.add(X, ids))

    @rule(ids=st.lists(st.integers(0, ID_SPACE - 1), min_size=2, max_size=6))
    def add_duplicate_ids(self, ids):
        ids = ids + [ids[0]]
        generation = self.c.generation
        with pytest.raises(ValueError, match="unique"):
            self.c.add(vectors(len(ids), 1), ids)
        assert self.c.generation == generation

    @rule(ids=ids_strategy, seed=st.integers(0, 10**6))
    def upsert(self, ids, seed):
        X = vectors(len(ids), seed)
        self.c.upsert(X, ids)
        self.model.upsert(X, ids)

    @rule(data=st.data())
    def delete(self, data):
        live = sorted(self.model.vectors)
        chosen = data.draw(st.lists(st.sampled_from(live), max_size=8)) if live else []
        others = data.draw(st.lists(st.integers(0, 3 * ID_SPACE), max_size=4))
        ids = chosen + others
        assert self.c.delete(np.array(ids, dtype=np.int64)) == self.model.delete(ids)

    @rule()
    def compact(self):
        self.c.compact()
        info = self.c.info()
        assert info["segments"] <= 1 and info["deleted"] == 0

    @rule()
    def vacuum(self):
        self.c.vacuum()

    @rule()
    def reopen_writer(self):
        self.c.close()
        self.c = ockstore.open_collection(self.folder, "a")

    # ------------------------------------------------------------------------------------------------------ readers
    @rule()
    def open_reader(self):
        if self.reader is not None:
            self.reader.close()
        self.reader = ockstore.open_collection(self.folder)
        self.reader_model = self.model.copy()
        assert self.reader.generation == self.c.generation

    @precondition(lambda self: self.reader is not None)
    @rule()
    def refresh_reader(self):
        assert self.reader.refresh() == self.c.generation
        self.reader_model = self.model.copy()

    @precondition(lambda self: self.reader is not None)
    @rule(k=st.integers(1, 30), seed=st.integers(0, 10**6))
    def search_reader(self, k, seed):
        """A reader keeps its snapshot, whatever the writer did since (files removed included)."""
        ref = reference_index(self.q, self.reader_model, store_vectors=self.store)
        assert_same_search(self.reader, ref, vectors(4, seed), k)

    # ------------------------------------------------------------------------------------------------------ searches
    @rule(k=st.integers(1, 40), seed=st.integers(0, 10**6), distance=st.sampled_from(["adc", "sdc"]),
          rerank=st.sampled_from([None, 0, 15]), allow=st.sampled_from([None, "some", "none"]))
    def search(self, k, seed, distance, rerank, allow):
        options = {"distance": distance}
        if rerank is not None and self.store is not None:
            options["rerank"] = k + rerank
        if allow == "some":
            options["allow"] = np.arange(0, 3 * ID_SPACE, 3)
        elif allow == "none":
            options["allow"] = [10**9]
        ref = reference_index(self.q, self.model, store_vectors=self.store)
        assert_same_search(self.c, ref, vectors(5, seed), k, **options)

    # ---------------------------------------------------------------------------------------------------- invariants
    @invariant()
    def holds_the_model(self):
        if not hasattr(self, "c"):
            return
        assert len(self.c) == len(self.model)
        assert np.array_equal(self.c.ids(), self.model.live_ids())
        assert self.c.next_id == self.model.next_id
        assert self.c.generation >= self.generation
        self.generation = self.c.generation
        for name in os.listdir(self.folder):
            assert name in (names.QUANTIZER_NAME, names.LOCK_NAME) or names.parse_manifest(name) is not None or \
                names.is_segment(name) or names.is_deletions(name), name
        info = self.c.info()
        # the policy: with F = 3, no tier holds 3 segments (below max_merge_rows)
        tiers = {}
        for entry in info["segment_files"]:
            live = entry["rows"] - entry["deleted"]
            tiers.setdefault(int(np.floor(np.log(live) / np.log(3) + 1e-9)), []).append(live)
        assert all(len(v) < 3 for v in tiers.values()), info["segment_files"]


TestCollectionMachine = CollectionMachine.TestCase
TestCollectionMachine.settings = settings(max_examples=20, stateful_step_count=25, deadline=None,
                                          suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.slow
def test_collection_machine_longer():
    """More and longer runs (CI runs the slow tests too)."""
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(CollectionMachine, settings=settings(max_examples=60, stateful_step_count=50,
                                                                   deadline=None,
                                                                   suppress_health_check=[HealthCheck.too_slow]))
