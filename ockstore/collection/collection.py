"""The Collection: a folder of immutable segments that changes by commits (add, upsert, delete, compact), one writer
holding the folder's lock, readers on snapshots (docs/ARCHITECTURE.md, "Collections"; docs/FORMAT.md section 13).
"""

from __future__ import annotations

import functools
import io
import os
import threading
import time

import numpy as np

from .. import storage
from .._closable import Closable
from .._stored_rows import ids_to_get
from .._validation import as_ids, as_vectors, check_bool, check_choice, check_int
from ..errors import FormatError
from ..indexfile.segment_file import file_fingerprint
from . import commit as _commit
from . import names
from .manifest import MAX_ID, OPERATIONS, SegmentEntry
from .segments import IdIndex, PendingSegment, Segment, write_pending_segment
from ..search.searcher import Searcher, SearcherCache
from .snapshot import load_newest, manifest_generations, remember
from .background import Trainer
from .training import DEFAULT_SAMPLE_ROWS, model_summary, retrain_model, spec_with_dim, train_commit

__all__ = ["Collection", "CollectionSearcher"]

# Generations whose files a writer keeps (the current one and the one before): readers on them keep working, and the
# previous one is a complete fallback should the newest manifest ever be damaged.
KEEP_GENERATIONS = 2

# How often a reader's wait_trained looks for a trained generation (seconds).
READER_POLL_SECONDS = 0.1


def _holding_commit_lock(method):
    """A writer's change, run holding the commit lock (the training thread commits under it too)."""

    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._commit_lock:
            return method(self, *args, **kwargs)

    return locked


class Collection(Closable):
    """A collection folder opened as a writer (mode "a") or as a read-only snapshot (mode "r").

    Made by :func:`create_collection` or :func:`open_collection`, not by this constructor. Every change (``add``,
    ``upsert``, ``delete``, ``compact``) is one atomic, durable commit of a new generation when it returns; a call
    that changes nothing commits nothing. Searches may run in several threads at once, also while another thread
    commits or refreshes (a search uses the generation that was current when it started); changes are made by one
    thread at a time, and ``close`` must wait for the searches in progress (it closes the segments).

    Attributes
    ----------
    path : str
        The folder.
    mode : "r" or "a"
    generation : int
        The generation this object sees (a reader keeps it until :meth:`refresh`).
    """

    def __init__(self, folder, mode, snapshot, lock, cache, skip_damaged=False):
        self._folder = folder
        self._mode = mode
        self._skip_damaged = skip_damaged
        self._snap = snapshot
        self._lock = lock
        self._cache = cache
        self._next_generation = None
        self._searchers = SearcherCache()  # the searcher of the last search call
        self._leftovers = []
        self._commit_lock = threading.RLock()  # one commit at a time: the caller's, or the training thread's
        self._closed_for_commits = False
        self._n_threads = None  # the threads of the training thread's encoding (None: every core)
        self._trainer = Trainer(self) if mode == "a" else None
        if mode == "a":
            self._next_generation = max(manifest_generations(folder)[0], snapshot.generation) + 1
            # Pending and temporary files present when this writer took the lock were left by writers that are dead
            # (a live one would hold the lock), or by the workers of a dead distributed build: the first commit
            # removes them. Those that appear later are this writer's own (its distributed build's workers).
            self._leftovers = _commit.leftover_files(folder)
        self._closed = False
        if self._trainer is not None:  # a training that a killed writer did not finish is done again
            self._trainer.start_if_due()

    # ---------------------------------------------------------------------------------------------------- lifecycle
    def close(self):
        """Release the segments and, for a writer, the lock. Idempotent; any later use raises ValueError.

        A writer first waits for a training in progress (``wait_trained``) to commit: an app that adds the rows that
        make the collection due for training and closes at once pays for the training here (seconds for tens of
        thousands of rows), not in its ``add``. The error of a failed training is raised here, after the collection
        is closed (its last committed generation stays as it was; the next writer trains again)."""
        if self._closed:
            return
        error = None
        if self._trainer is not None:
            try:
                self._trainer.wait()
            except BaseException as exc:  # raised once the collection is closed
                error = exc
            with self._commit_lock:
                self._closed_for_commits = True
        self._close()
        if error is not None:
            raise error

    def wait_trained(self, timeout=None):
        """Wait until the collection has committed a trained generation; True when it has (this object then sees it),
        False when ``timeout`` (seconds) passed first or, for a writer, when no training is running and the
        collection is not trained (it holds fewer than ``train_size`` live rows).

        A writer trains in a thread of its own (docs/ARCHITECTURE.md, "Collections for apps"): ``add`` commits rows at
        once and the training commits when done; this waits for it, and raises the error of a failed training. A
        reader (mode "r") refreshes until a writer has committed a trained generation (``timeout`` None: as long as
        that takes)."""
        self._check_open()
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        if self._trainer is not None:
            if not self._trainer.wait(timeout):
                return False
            return self.trained
        while not self.trained:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            time.sleep(min(READER_POLL_SECONDS, left) if left is not None else READER_POLL_SECONDS)
            self.refresh()
        return True

    def _close(self):
        if self._closed:
            return
        self._closed = True
        snap, self._snap = self._snap, None
        for view in snap.views:
            view.segment.close()
        self._cache.clear()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __del__(self):
        if getattr(self, "_lock", None) is not None:
            self._lock.release()

    def __repr__(self):
        if self._closed:
            return f"<Collection {self._folder!r} closed>"
        return (f"<Collection {self._folder!r} mode={self._mode!r} generation={self.generation} N={len(self)} "
                f"segments={len(self._snap.views)}>")

    def _check_open(self):
        if self._closed:
            how = "" if self._mode == "r" else ", 'a'"
            raise ValueError(f"I/O operation on a closed collection: reopen it with "
                             f"ockstore.open_collection({self._folder!r}{how})")

    def _check_writer(self, what):
        self._check_open()
        if self._mode != "a":
            raise io.UnsupportedOperation(f"{what}: collection {self._folder!r} is open read-only (mode='r'); open it "
                                          "with mode='a' to change it")
        self._lock.check()  # writer.lock removed or replaced: another writer may be in (C9)

    # --------------------------------------------------------------------------------------------------- attributes
    def __len__(self):
        self._check_open()
        return self._snap.live

    @property
    def ntotal(self) -> int:
        """N, the number of live vectors (as ``len``)."""
        return len(self)

    @property
    def path(self) -> str:
        return self._folder

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def generation(self) -> int:
        self._check_open()
        return self._snap.generation

    @property
    def quantizer(self):
        """The fitted quantizer; the unfitted one (its parameters) while the collection has not trained it."""
        self._check_open()
        return self._snap.spec.quantizer

    @property
    def trained(self) -> bool:
        """False while the collection has not trained its quantizer (its rows are stored vectors, searched exactly)."""
        self._check_open()
        return self._snap.spec.trained

    @property
    def dim(self):
        """P; None only for a collection that trains its quantizer and has had no vector yet."""
        self._check_open()
        return self._snap.spec.vector_dim

    @property
    def metric(self) -> str:
        return self.quantizer.metric

    @property
    def norm_encoding(self) -> str:
        self._check_open()
        return self._snap.spec.norm_encoding

    @property
    def store_vectors(self):
        self._check_open()
        return self._snap.spec.store_vectors

    @property
    def metadata(self) -> dict:
        """The user metadata given to create_collection (a copy)."""
        self._check_open()
        return storage.canonical_metadata(self._snap.user)

    @property
    def next_id(self) -> int:
        """The id the next vector added without ids gets: one past the largest id ever assigned."""
        self._check_open()
        return self._snap.manifest.next_id

    @property
    def skipped(self) -> tuple:
        """The segment files a reader opened with ``skip_damaged=True`` left out of this generation because they are
        missing or damaged (their rows are not searched; ``info()["problems"]`` says why); () otherwise."""
        self._check_open()
        return tuple(s.file for s in self._snap.skipped)

    @property
    def segment_spec(self):
        """The SegmentSpec (quantizer, norm encoding, stored vectors) every segment of this collection shares: what a
        worker of a distributed build needs for ``write_pending_segment``."""
        self._check_open()
        return self._snap.spec

    def get(self, ids):
        """The stored vectors of live ``ids``, in the order given.

        Parameters
        ----------
        ids : array-like of shape (n,) of integer ids, or one id
            Any order; an id given twice gives its vector twice. Every id must be live (ValueError naming the
            unknown and deleted ones otherwise).

        Returns
        -------
        V : ndarray of shape (n, P), or (P,) for one id, dtype float32
            The vectors as stored (``store_vectors``), converted to float32, which holds float16 and uint8 values
            exactly: the vectors as added (for "float16" rounded to float16), not normalised for cosine; an upserted
            id gives its newest vector. ValueError when the collection stores no vectors.
        """
        self._check_open()
        ids, was_scalar = ids_to_get(ids)
        V = self._snap.get(ids)
        return V[0] if was_scalar else V

    def ids(self):
        """Every live id, sorted ascending (int64)."""
        self._check_open()
        return self._snap.live_ids()

    def info(self) -> dict:
        """A plain dict: kind ("collection"), path, mode, generation, N (live vectors), rows (stored, deleted ones
        included), deleted, segments (their number), next_id, trained (False while the collection has not trained its
        quantizer), train_size (the live rows whose commit trains it; None once trained), quantizer_file (None while
        untrained), the quantizer's P (None before the first vector), method, metric, M, C, K, T, bits,
        norm_encoding, store_vectors, bytes_per_vector (once trained), merge_factor, metadata, problems (why newer
        manifests or, with ``skip_damaged``, segments were skipped, if any), skipped (the segment files left out) and
        segment_files (file, rows, deleted, deletions, min_id, max_id of each segment searched)."""
        self._check_open()
        snap = self._snap
        m, q = snap.manifest, snap.spec.quantizer
        return {
            "kind": "collection", "path": self._folder, "mode": self._mode, "generation": m.generation, "N": m.live,
            "rows": m.rows, "deleted": m.rows - m.live, "segments": len(m.segments), "next_id": m.next_id,
            "trained": snap.spec.trained, "train_size": None if m.training is None else m.training.train_size,
            "quantizer_file": m.quantizer,
            **model_summary(snap.spec), "norm_encoding": m.norm_encoding, "store_vectors": m.store_vectors,
            "bytes_per_vector": int(q.code_size) + {"f32": 4, "u8": 1, "none": 0}[m.norm_encoding],
            "merge_factor": m.merge_factor, "metadata": storage.canonical_metadata(snap.user),
            "problems": list(snap.problems), "skipped": [s.file for s in snap.skipped],
            "segment_files": [{"file": s.file, "rows": s.rows, "deleted": s.deleted, "deletions": s.deletions,
                               "min_id": s.min_id, "max_id": s.max_id} for s in m.segments],
        }

    # ------------------------------------------------------------------------------------------------------ search
    def search(self, Q, k, *, n_probe=None, distance="adc", rerank=None, vectors=None, allow=None, n_threads=None,
               metric=None):
        """The k best live vectors of each query, over every segment: equal to one ``Index.search`` over an index
        holding the live rows (same values, same ids, same order).

        Parameters
        ----------
        Q, k, distance, n_threads
            As for :meth:`ockstore.Index.search`; ``k`` is bounded by the number of live vectors as there.
        n_probe : int in 1..n_lists, or None
            A collection of an IVF (inverted-file segments): the lists each segment's search probes per query, as for
            ``Index.search`` (None: the IVF's default_n_probe). A flat collection takes only None.
        rerank : int >= k, 0, or None
            As for ``Index.search``: the best ``rerank`` candidates of the whole collection by their codes are
            re-ranked exactly, from the vectors stored in the segments (``store_vectors``) or from ``vectors``. None:
            the default re-ranking of every searcher when there are vectors to re-rank from (10 k candidates,
            ``_search_options.check_rerank``), none otherwise; 0: none. Before the collection has trained its
            quantizer every result is exact (brute force over the stored vectors) and ``rerank`` changes nothing.
        vectors : array-like of shape (n, P), or None
            For ``rerank``: row i is the vector of **id** i (on a collection rows have no fixed place; ids do). An
            ndarray, np.memmap, HDF5 dataset; only the candidates' rows are read, by increasing id.
        allow : array-like of int ids, or None
            Search only the vectors with these ids (any order; duplicates and unknown ids ignored). A boolean mask
            over rows is refused (TypeError): rows have no meaning across segments.
        metric : None
            The quantizer's metric (``collection.metric``), fixed when it was fitted: None or that metric.

        Returns
        -------
        D, I : as for ``Index.search`` (distances ascending for "l2", scores descending for "ip" and "cosine",
            equal values by the smaller id; padding +inf or -inf with id -1).
        """
        self._check_open()
        if vectors is not None:
            searcher = self.searcher(k, n_probe=n_probe, distance=distance, rerank=rerank, vectors=vectors,
                                     n_threads=n_threads, metric=metric)
        else:
            searcher = self._searchers.get(
                lambda: self.searcher(k, n_probe=n_probe, distance=distance, rerank=rerank, n_threads=n_threads,
                                      metric=metric),
                k, n_probe, distance, rerank, n_threads, metric)
        return searcher.search(Q, allow=allow)

    def _search_parts(self):
        """The search Parts of the current generation (ockstore.tune reads them)."""
        return self._snap._search_parts()

    def _tune_view(self):
        """What ``ockstore.tune`` searches: this collection, once it has trained its quantizer."""
        if not self._snap.spec.trained:
            raise ValueError("tune: this collection has not trained its quantizer yet: its searches are exact "
                             "(brute force over the stored vectors), there is nothing to tune")
        return self

    def _candidates(self, Q, k, *, allow=None, **options):
        """(values, ids) of the k best live rows of each query by their codes, as a re-ranked search keeps its
        candidates before re-ranking them (for ``tune``, which re-ranks them itself)."""
        D, handles = self.searcher(k, rerank=0, **options).candidates(Q, k, allow=allow)
        return D, self._snap._search_parts().ids_of(handles)

    def searcher(self, k, *, n_probe=None, distance="adc", rerank=None, vectors=None, n_threads=None, metric=None):
        """A search with its options checked once: ``searcher(k, **options).search(Q, allow=None)`` returns what
        ``search(Q, k, **options, allow=allow)`` returns, for a batch or one 1-D query (an app searching one query
        per call keeps one). The arguments are :meth:`search`'s. The searcher follows this object's generation: after
        a commit (writer) or ``refresh()`` (reader) it searches the new one, its options checked again once then.
        Closing the collection makes it unusable."""
        self._check_open()
        return CollectionSearcher(self, dict(k=k, n_probe=n_probe, distance=distance, rerank=rerank, vectors=vectors,
                                             n_threads=n_threads, metric=metric))

    # ---------------------------------------------------------------------------------------------------- changes
    @_holding_commit_lock
    def add(self, X, ids=None, *, n_threads=None):
        """Add vectors in one commit; returns their ids (int64, shape (n,); one id for a single 1-D vector).

        Parameters
        ----------
        X : array-like of shape (n, P) or (P,)
            Any real numeric dtype; NaN/inf raise ValueError.
        ids : array-like of shape (n,), integers >= 0, or None
            Must be unique and not live in the collection (ValueError otherwise, and nothing is added). None: ids
            continue after the largest id ever assigned (``next_id``).
        n_threads : int or None
            Threads for encoding; None means all cores.
        """
        self._check_writer("add")
        X, was_1d = as_vectors(X, "X", self._snap.spec.vector_dim, convert=False)
        n = X.shape[0]
        if ids is None:
            first = self._snap.manifest.next_id
            if first + n > MAX_ID + 1:
                raise ValueError(f"ids: no ids left to assign ({n} needed from {first}; ids are int64)")
            ids = np.arange(first, first + n, dtype=np.int64)
        else:
            ids = self._check_new_ids(ids if not was_1d else np.reshape(ids, -1), n)
            live, _ = self._snap.find_live(ids)
            if live.any():
                raise ValueError(f"ids: id {int(ids[np.argmax(live)])} is already in the collection (use upsert to "
                                 "replace it)")
        if n:
            self._write(X, ids, "add", n_threads=n_threads)
        return ids[0] if was_1d else ids

    @_holding_commit_lock
    def upsert(self, X, ids, *, n_threads=None):
        """Replace the vectors of the live ``ids`` and add the others, in one commit.

        ``ids`` (array-like of shape (n,), integers >= 0) must be unique (ValueError otherwise).
        """
        self._check_writer("upsert")
        X, was_1d = as_vectors(X, "X", self._snap.spec.vector_dim, convert=False)
        if ids is None:
            raise TypeError("upsert needs ids (the vectors to replace)")
        ids = self._check_new_ids(ids if not was_1d else np.reshape(ids, -1), X.shape[0])
        if X.shape[0]:
            self._write(X, ids, "upsert", n_threads=n_threads)

    @_holding_commit_lock
    def delete(self, ids):
        """Delete the vectors of ``ids`` (integers >= 0; unknown or already deleted ids are ignored) in one commit;
        returns the number of live vectors removed (no commit when it is 0)."""
        self._check_writer("delete")
        arr = ids if isinstance(ids, np.ndarray) else np.asarray(ids)
        if arr.size == 0 and arr.dtype.kind == "f":
            arr = arr.astype(np.int64)  # an empty list has no integer dtype of its own
        ids = np.unique(as_ids(np.reshape(arr, -1) if arr.ndim == 0 else arr, "ids"))
        _, found = self._snap.find_live(ids)
        deletes = {number: ids[hit] for number, hit, _rows in found}
        removed = sum(int(d.size) for d in deletes.values())
        if removed:
            self._apply(operation="delete", deletes=deletes)
        return removed

    @_holding_commit_lock
    def compact(self):
        """Merge every segment into one holding the live rows (codes, norm terms, ids and stored vectors copied, not
        re-encoded; memory bounded by a step of COPY_ROWS rows), in one commit. Readers of older generations are not
        affected. Nothing to do (no commit) when there is at most one segment and nothing deleted.

        The generation before the compaction is kept as the fallback, like the generation before any commit (should
        the newest manifest ever be damaged, readers open it): until the next commit the folder holds its segments
        too, about twice the live data. ``vacuum(keep_generations=1)`` removes it at once."""
        self._check_writer("compact")
        snap = self._snap
        if len(snap.views) > 1 or any(v.entry.deleted for v in snap.views):
            self._apply(operation="compact", compact=True)

    def retrain(self, quantizer=None, *, sample=None, n_threads=None):
        """Fit the quantizer again on a sample of the live stored vectors and re-encode every segment, in one commit
        (ids, deletions and stored vectors kept; readers keep their snapshots). How an app refreshes a model trained
        too early; on a collection that has not trained its quantizer yet, trains it now (below ``train_size``).

        Parameters
        ----------
        quantizer : PQ, CKM, ECKM, OCKM or IVF, or None
            None: a fresh copy of the collection's quantizer's parameters, fitted here. Unfitted: fitted here, in
            place (it becomes the collection's model). Fitted: used as it is (nothing is fitted: every row is
            re-encoded with it). Its dimension and metric must be the collection's, and its norm term the
            collection's ``norm_encoding``.
        sample : int or None
            Fit on a uniform sample of this many live rows (all of them when there are fewer); None:
            ``training.DEFAULT_SAMPLE_ROWS`` (131,072). At least what ``fit`` needs (K, and n_lists for an IVF).
        n_threads : int or None
            Threads for encoding; None means all cores.

        ValueError when the collection stores no vectors (nothing to fit on: create it with ``store_vectors``) or
        holds fewer live vectors than ``fit`` needs.
        """
        self._check_writer("retrain")
        self._trainer.wait()  # a training in progress commits first (it needs the commit lock)
        with self._commit_lock:
            self._retrain_locked(quantizer, sample, n_threads)

    def _retrain_locked(self, quantizer, sample, n_threads):
        snap = self._snap
        model, fit, sample_rows, auto = retrain_model(snap, quantizer,
                                                      DEFAULT_SAMPLE_ROWS if sample is None else sample)
        self._commit_generation(lambda generation: train_commit(
            snap, generation, model, fit=fit, sample_rows=sample_rows, operation="retrain", check=self._lock.check,
            auto=auto,
            n_threads=n_threads))

    def refresh(self):
        """Move to the newest committed generation (a reader; a writer is always there). Returns the generation."""
        self._check_open()
        if self._mode == "r":
            self._snap = load_newest(self._folder, self._cache, skip_damaged=self._skip_damaged)
        return self._snap.generation

    def vacuum(self, *, keep_generations=KEEP_GENERATIONS):
        """Remove the files that none of the ``keep_generations`` newest generations references: older manifests,
        segments and deletion files, leftovers of interrupted commits (pending segments, temporary files). Files the
        collection does not name (docs/FORMAT.md 13.1) are never removed. Readers on removed generations keep working
        on POSIX (their files stay open); on Windows a file still open is left for a later vacuum. Must not run while
        a distributed build is writing pending segments into the folder. Returns the names removed (sorted)."""
        self._check_writer("vacuum")
        self._trainer.wait()  # the files of a training in progress are not garbage
        keep = check_int(keep_generations, "keep_generations", min_value=1)
        return _commit.vacuum(self._folder, self._snap.manifest, keep)

    def verify(self):
        """Check the whole collection; returns None or raises FormatError naming the file and the check.

        Every segment as ``Index.verify`` checks it (CRCs, codes < K, finite norms and vectors, ids >= 0; for a
        segment that refers to the quantizer file, the fingerprint of the model recomputed from its arrays), ids unique
        within each segment and within the manifest's id range, deleted ids present in their segment, every live id
        live in one segment only, the quantizer file's CRCs and fingerprint; and no manifest newer than this
        generation failed to verify (``info()["problems"]``).
        """
        self._check_open()
        snap = self._snap
        if snap.skipped:
            raise FormatError(f"{self._folder!r}: skipped segments: generation {snap.generation} was opened without "
                              "them (skip_damaged=True): " + "; ".join(snap.problems))
        if snap.problems:
            raise FormatError(f"{self._folder!r}: skipped manifest: the collection is at generation "
                              f"{snap.generation}, but " + "; ".join(snap.problems))
        if snap.manifest.quantizer is not None:  # None: not trained yet
            with storage.open_file(os.path.join(self._folder, snap.manifest.quantizer)) as mf:
                mf.verify()
                if file_fingerprint(mf) != snap.spec.model_ref.fingerprint:  # replaced since it was loaded
                    raise storage.format_error(mf.path, "model mismatch", "the quantizer file holds another model "
                                                                          "than the one the collection opened")
        live = []
        for view in snap.views:
            index, entry = view.index, view.entry
            index.verify()
            ordered = view.segment.ids_index().sorted
            duplicate = ordered[1:] == ordered[:-1]
            if duplicate.any():
                raise storage.format_error(view.segment.path, "duplicate id",
                                           f"id {int(ordered[1:][duplicate][0])} is stored twice")
            if ordered.size and (int(ordered[0]) != entry.min_id or int(ordered[-1]) != entry.max_id):
                raise storage.format_error(view.segment.path, "segment mismatch",
                                           f"ids span {int(ordered[0])}..{int(ordered[-1])}, the manifest says "
                                           f"{entry.min_id}..{entry.max_id}")
            live.append(view.live_ids())  # checks that every deleted id is in the segment
        if live:
            every = np.sort(np.concatenate(live))
            twice = every[1:] == every[:-1]
            if twice.any():
                raise FormatError(f"{self._folder!r}: duplicate live id: id {int(every[1:][twice][0])} is live in "
                                  "two segments")

    # ------------------------------------------------------------------------------------------ distributed builds
    @_holding_commit_lock
    def commit_segments(self, pending, *, operation="commit", merge=True):
        """Make pending segments (written by ``write_pending_segment``, e.g. by the workers of a distributed build)
        part of the collection in one commit.

        Each must be a pending file of this folder written with ``segment_spec``; its ids are read and checked:
        unique within it and across the list, equal to its PendingSegment's range, not live in the collection. On any
        error nothing is committed (the pending files stay, for the caller to retry or remove). With ``merge`` the
        size-tiered policy runs as after any add; without it every pending file becomes one segment as written.
        ``operation`` (recorded in the manifest) is one of "add", "upsert", "commit", ... (docs/FORMAT.md 13.3).
        """
        self._check_writer("commit_segments")
        operation = check_choice(operation, "operation", OPERATIONS)
        merge = check_bool(merge, "merge")
        pending = list(pending)
        spec, training = self._snap.spec, None
        if not spec.trained and spec.dim is None and pending and isinstance(pending[0], PendingSegment):
            with _open_file_index(pending[0].path) as first:  # the first vectors: their dimension is the collection's
                spec, training = spec_with_dim(self._snap, first.dim)
        all_ids = []
        for p in pending:
            if not isinstance(p, PendingSegment):
                raise TypeError(f"pending must hold PendingSegment objects, got {type(p).__name__}")
            folder, name = os.path.split(os.path.abspath(p.path))
            if folder != self._folder or not names.is_pending(name):
                raise ValueError(f"pending: {p.path!r} is not a pending segment of {self._folder!r}")
            segment = Segment(  # the checks of any segment at open, against the entry it will get
                folder, SegmentEntry(name, p.rows, p.min_id, p.max_id), spec)
            try:
                check = segment.copy_check(["ids"], advice="; the pending segment is damaged: nothing was committed "
                                                           "(write it again)")
                ids = np.array(segment.index.ids)  # read once, its CRC checked on the way (C15)
                check.finish()
            finally:
                segment.close()
            if ids.size and (int(ids.min()) != p.min_id or int(ids.max()) != p.max_id):
                raise ValueError(f"pending: {p.path!r} holds ids {int(ids.min())}..{int(ids.max())}, not "
                                 f"{p.min_id}..{p.max_id}")
            all_ids.append(ids)
        ids = np.concatenate(all_ids) if all_ids else np.empty(0, dtype=np.int64)
        ids = self._check_new_ids(ids, ids.size)
        live, _ = self._snap.find_live(ids)
        if live.any():
            raise ValueError(f"ids: id {int(ids[np.argmax(live)])} is already in the collection (use upsert to replace "
                             "it)")
        if pending:
            self._commit_rows(pending, None, ids.size, operation, self._next_id_after(ids), spec, training,
                              merge=merge)

    # ----------------------------------------------------------------------------------------------------- private
    @staticmethod
    def _check_new_ids(ids, n):
        if not isinstance(ids, np.ndarray) and np.size(ids) == 0:
            ids = np.empty(np.shape(ids), dtype=np.int64)
        ids = as_ids(ids, "ids", n=n)
        if ids.size > 1:
            index = IdIndex(ids)
            ordered = index.sorted
            twice = ordered[1:] == ordered[:-1]
            if twice.any():
                raise ValueError(f"ids must be unique: id {int(ordered[1:][twice][0])} appears more than once")
        return ids

    def _next_id_after(self, ids):
        return max(self._snap.manifest.next_id, int(ids.max()) + 1) if ids.size else self._snap.manifest.next_id

    def _write(self, X, ids, operation, n_threads):
        """Encode X with ids into the first segment of the next generation (written under its final name: nothing
        references it before the commit), then commit it (deleting the live ids first for upsert). Before the
        collection has trained its quantizer the segment holds the stored vectors only, and the commit whose live rows
        reach train_size trains it (train_commit)."""
        snap = self._snap
        spec, training = snap.spec, None
        if not spec.trained and spec.dim is None:  # the first vectors of the collection set its dimension
            spec, training = spec_with_dim(snap, X.shape[1])
        pending = write_pending_segment(self._folder, spec, X, ids, n_threads=n_threads,
                                        _name=names.segment_name(self._generation_to_commit(), 0))
        try:
            deletes = None
            if operation == "upsert":
                _, found = snap.find_live(ids)
                deletes = {number: ids[hit] for number, hit, _rows in found}
            self._commit_rows([pending], deletes, ids.size, operation, self._next_id_after(ids), spec, training,
                              n_threads=n_threads)
        except BaseException:
            if not os.path.exists(os.path.join(self._folder, names.manifest_name(_generation_of(pending)))):
                _remove_file(pending.path)  # not committed
            raise

    def _commit_rows(self, pending, deletes, added, operation, next_id, spec, training, merge=True, n_threads=None):
        """Commit new rows (pending files) and deletions: an ordinary commit (when the collection becomes due for
        training, the training runs after it in the background: ``_commit_generation``)."""
        self._n_threads = n_threads
        self._apply(operation=operation, pending=pending, deletes=deletes, next_id=next_id, merge=merge, spec=spec,
                    training=training)

    def _generation_to_commit(self):
        generation = self._next_generation
        if generation > names.MAX_GENERATION:  # docs/FORMAT.md 13.1: G < 2**63
            raise FormatError(f"{self._folder!r}: no generation left to commit: "
                              f"{names.manifest_name(generation - 1)} holds the largest one (2**63 - 1); remove that "
                              "file if no commit of yours made it")
        return generation

    def _apply(self, **changes):
        """One commit of the next generation (commit.commit)."""
        snap = self._snap
        self._commit_generation(lambda generation: _commit.commit(snap, generation, check=self._lock.check,
                                                                  **changes))

    def _commit_generation(self, make):
        """``make(generation)`` commits the next generation and returns its Snapshot (or (Snapshot, files to remove
        after the commit)); then the files only older generations than the one before it referenced are removed
        (also those earlier writers left: commit.remove_older_generations)."""
        generation = self._generation_to_commit()
        try:
            new = make(generation)
        except _commit.GenerationTaken:
            self._next_generation = max(manifest_generations(self._folder)[0], generation) + 1
            raise
        except BaseException:
            if os.path.exists(os.path.join(self._folder, names.manifest_name(generation))):
                self._next_generation = generation + 1  # committed, though an error followed: take it from disk
                self._snap = load_newest(self._folder, self._cache, warn=False)
            raise
        new, consumed = new if isinstance(new, tuple) else (new, ())
        self._next_generation = generation + 1
        remember(self._cache, new)
        previous, self._snap = self._snap.manifest, new
        for path in consumed:
            _remove_file(path)  # no manifest references them
        _commit.remove_older_generations(self._folder, [new.manifest, previous])
        if self._trainer is not None:
            self._trainer.start_if_due()  # in the background: the commit's caller does not wait for a training
        leftovers, self._leftovers = self._leftovers, []
        _commit.remove_leftovers(self._folder, leftovers)


def _generation_of(pending):
    """The generation whose commit a segment written under its final name (segment.<G>.0.ock) belongs to."""
    return int(os.path.basename(pending.path).split(".")[1])


def _open_file_index(path):
    from ..indexfile.reader import open_index

    return open_index(path)


def _remove_file(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class CollectionSearcher(Searcher):
    """``Collection.searcher``'s Searcher: it searches the collection's current generation, and checks its options
    again (once) when that changes -- the bounds of k and rerank depend on the live rows."""

    def __init__(self, collection, arguments):
        self._collection = collection
        self._arguments = arguments
        self._bind(collection._snap)

    def _bind(self, snapshot):
        super().__init__(snapshot, snapshot.search_options(**self._arguments), by_id=True)

    def _parts_now(self):
        collection = self._collection
        collection._check_open()
        snapshot = collection._snap
        if snapshot is not self._source:
            self._bind(snapshot)
        return super()._parts_now()
