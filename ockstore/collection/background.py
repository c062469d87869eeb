"""Training beside the writer (docs/ARCHITECTURE.md, "Collections for apps", *Training beside the writer*).

An ``add`` never fits a model in the caller's thread: its rows commit at once (as stored vectors while the collection
has not trained), and when the collection is due for training (its live rows reached ``train_size``; or, for a model
the library picks, the rows have grown enough that ``default_quantizer`` would pick another model) a thread of the
writer process trains:

1. **Prepare**, with no lock (adds, deletes and searches go on): open the generation G0 it starts from (its own
   snapshot: files a later commit removes stay readable), pick the model (``default_quantizer`` for G0's live rows,
   or the parameters the collection was created with), fit it on a sample of G0's live stored vectors, write it under
   a pending name, and encode every live row of G0 into pending segments that refer to the quantizer file by the name
   it will have (``quantizer.<G0 + 1>.ockq``, unique: only this thread writes quantizer files meanwhile).
2. **Commit**, under the writer's commit lock (an add waits for it): the generation G1 the writer has reached may hold
   rows G0 did not (adds since; rows merged into new segments) and may have lost some (deletes, upserts). The rows of
   G1 in segments that G0 did not have are encoded now (few: those of the adds during training); the pending
   segments' rows that are no longer live in the same segment of G1 are deleted in the same commit. The quantizer file
   gets its name, then one commit makes the new model, the pending segments and the new rows visible.

A crash at any point leaves the last committed generation (the pending files are unreferenced: the next writer's first
commit removes them, C16), and the next writer, finding the collection still due, trains again. ``close`` waits for
a training in progress; ``wait_trained`` waits for the first.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading

import numpy as np

from ..indexfile.reader import load_linked_model
from ..indexfile.writer import save_quantizer
from ..quantizers.default import default_quantizer
from . import names
from .manifest import AutoModel, Manifest
from .segments import SegmentSpec
from .snapshot import Snapshot, open_generation
from .training import DEFAULT_SAMPLE_ROWS, _rng, _sample, encode_live_rows

__all__ = ["Trainer", "training_due", "GROWTH_FACTOR", "REFRESH_BELOW"]

logger = logging.getLogger("ockstore.collection")

# A model the library picked is picked again (in the background) once the live rows reach GROWTH_FACTOR times the
# rows it was picked for, and either default_quantizer picks another model for them or the model was fitted on fewer
# than REFRESH_BELOW rows (a model fitted early, on a few thousand rows, is refitted as more arrive). Retraining
# costs an encoding of every row, so at most a constant number of encodings per row over any growth (a factor of 2:
# each row is encoded about twice in all, however large the collection grows).
GROWTH_FACTOR = 2
REFRESH_BELOW = 16_384


def _shape(model):
    """What tells two models of default_quantizer apart: the inverted file's lists (0: flat) and the code."""
    fine = getattr(model, "quantizer", model)
    return (getattr(model, "n_lists", 0), fine.n_subspaces, fine.n_codebooks, fine.n_codewords)


def training_due(snapshot):
    """Whether the collection should train now: it has not trained and its live rows reached train_size (with their
    dimension known), or the library picks its model and would pick another for the rows it holds now."""
    manifest = snapshot.manifest
    if manifest.training is not None:
        return snapshot.spec.dim is not None and snapshot.live >= manifest.training.train_size
    auto = manifest.auto
    if auto is None or snapshot.live < GROWTH_FACTOR * auto.trained_rows:
        return False
    if auto.trained_rows < REFRESH_BELOW:
        return True
    pick = default_quantizer(snapshot.live, snapshot.spec.vector_dim, metric=auto.metric)
    return _shape(pick) != _shape(snapshot.spec.quantizer)


class _Prepared:
    """What the training thread made before its commit: the fitted model, its quantizer file under a pending name,
    the SegmentSpec by reference to its final name, the pending segments of G0's live rows with their ids, and what
    G0 held (its segment files, and the rows live in each)."""

    def __init__(self, model, quantizer_path, final_name, spec, pending, base_files, live_rows):
        self.model = model
        self.quantizer_path = quantizer_path
        self.final_name = final_name
        self.spec = spec
        self.pending = pending  # list of (PendingSegment, ids)
        self.base_files = base_files  # {segment file: (deletions file, live ids sorted)}
        self.live_rows = live_rows

    def files(self):
        return [self.quantizer_path] + [p.path for p, _ in self.pending]


class Trainer:
    """The training thread of one writer (module docstring). ``start_if_due`` is called by the writer after each
    commit and when it opens the folder, with its commit lock held."""

    def __init__(self, collection):
        self._collection = collection
        self._thread = None
        self._error = None
        self._done = threading.Event()
        self._done.set()

    @property
    def running(self):
        return not self._done.is_set()

    def start_if_due(self):
        """Start a training when the writer's current generation is due for one and none is running."""
        if self.running:
            return
        snapshot = self._collection._snap
        if not training_due(snapshot):
            return
        self._error = None
        self._done.clear()
        self._thread = threading.Thread(target=self._run, args=(snapshot.generation,), name="ockstore-training",
                                        daemon=True)
        self._thread.start()

    def wait(self, timeout=None):
        """Wait for a training in progress; True when none runs any more (False: the timeout passed first). The
        error of a failed training is raised here, once."""
        finished = self._done.wait(timeout)
        if finished and self._error is not None:
            error, self._error = self._error, None
            raise error
        return finished

    def _run(self, generation):
        prepared = None
        collection = self._collection
        try:
            prepared = _prepare(collection._folder, generation, collection._n_threads)
            with collection._commit_lock:
                if collection._closed_for_commits:
                    return
                collection._commit_generation(lambda g: _commit(collection._snap, g, prepared,
                                                                check=collection._lock.check))
        except BaseException as exc:  # kept for wait() / close(); the pending files are removed
            logger.warning("training of %s failed: %s", collection._folder, exc)
            self._error = exc
            if prepared is not None:
                for path in prepared.files():
                    if os.path.exists(path):
                        os.unlink(path)
        finally:
            self._done.set()


def _live_masks(views):
    return [np.ones(v.segment.rows, dtype=bool) if v.live_mask() is None else v.live_mask() for v in views]


def _prepare(folder, generation, n_threads):
    """Step 1 of the module docstring, from generation ``generation``."""

    base = open_generation(folder, generation)
    written = []
    try:
        manifest = base.manifest
        views = base.views
        masks = _live_masks(views)
        total = int(sum(int(m.sum()) for m in masks))
        dim = base.spec.vector_dim
        if manifest.auto is not None:
            model = default_quantizer(max(total, 1), dim, metric=manifest.auto.metric)
        else:
            model = manifest.training.quantizer()
        model.fit(_sample(views, masks, min(total, DEFAULT_SAMPLE_ROWS), _rng(model), dim))
        quantizer_path = os.path.join(folder, names.pending_name())
        written.append(quantizer_path)
        save_quantizer(quantizer_path, model)
        final_name = names.quantizer_name(generation + 1)
        linked = load_linked_model(quantizer_path)
        spec = SegmentSpec(linked.model, manifest.norm_encoding, manifest.store_vectors,
                           model_ref=dataclasses.replace(linked.ref, file=final_name))
        pending = encode_live_rows(folder, spec, views, masks, manifest.max_merge_rows, n_threads, written)
        base_files = {v.entry.file: v.live_ids() for v in views}
        return _Prepared(model, quantizer_path, final_name, spec, pending, base_files, total)
    except BaseException:
        for path in written:
            if os.path.exists(path):
                os.unlink(path)
        raise
    finally:
        for view in base.views:
            view.segment.close()


def _commit(current, generation, prepared, *, check):
    """Step 2 of the module docstring: the training's commit of ``generation`` on top of the writer's ``current``
    Snapshot. Returns (Snapshot, files to remove after the commit: none)."""
    from .commit import commit

    folder = current.folder
    spec = prepared.spec
    final = os.path.join(folder, prepared.final_name)
    written = []
    try:
        # the rows of segments G0 did not have (adds during training, merges), encoded now
        new_views = [v for v in current.views if v.entry.file not in prepared.base_files]
        delta = encode_live_rows(folder, spec, new_views, _live_masks(new_views), current.manifest.max_merge_rows,
                                 None, written) if new_views else []
        # the rows of G0 no longer live in their segment of G1 (deleted, upserted, or merged into a new segment)
        still = {v.entry.file: v.live_ids() for v in current.views if v.entry.file in prepared.base_files}
        gone = []
        for file, ids in prepared.base_files.items():
            gone.append(ids if file not in still else np.setdiff1d(ids, still[file], assume_unique=True))
        gone = np.sort(np.concatenate(gone)) if gone else np.empty(0, dtype=np.int64)
        pending_deletes = {}
        for number, (_p, ids) in enumerate(prepared.pending):
            dropped = ids[np.isin(ids, gone, assume_unique=True)]
            if dropped.size:
                pending_deletes[number] = dropped
        os.replace(prepared.quantizer_path, final)
        written.append(final)
        old = current.manifest
        base = Snapshot(folder, Manifest(old.generation, prepared.final_name, old.norm_encoding, old.store_vectors,
                                         old.next_id, old.merge_factor, old.max_merge_rows, (), old.operation, None,
                                         None if old.auto is None else AutoModel(old.auto.metric,
                                                                                 prepared.live_rows)),
                        current.user, spec, [], [], None, current._cache)
        pending = [p for p, _ in prepared.pending] + [p for p, _ in delta]
        new = commit(base, generation, operation="retrain", pending=pending, pending_deletes=pending_deletes,
                     merge=False, check=check)
    except BaseException:
        if not os.path.exists(os.path.join(folder, names.manifest_name(generation))):
            for path in written:
                if os.path.exists(path):
                    os.unlink(path)
        raise
    return new, ()
