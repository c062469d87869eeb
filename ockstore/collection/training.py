"""Collections that train their quantizer (docs/ARCHITECTURE.md, "Collections for apps"): the default number of rows
that triggers training, and the training commit, which fits a quantizer on a sample of the live stored vectors and
re-encodes every live row into new segments, in one commit. The same commit serves the first training (the commit
whose rows cross ``train_size``) and ``Collection.retrain``.

A training commit of generation G, in this order (C10 as every commit):

1. the new rows of the commit, if any, are already in a file of stored vectors (``segment.<G>.0.ock``, or pending
   segments of a distributed build), written by the caller;
2. the quantizer is fitted on a uniform sample of the live rows' stored vectors (in memory: sample x P floats), and
   written to ``quantizer.<G>.ockq``;
3. every live row (ids kept; deleted rows, including those the commit deletes, left out) is read back from its
   segment COPY_ROWS at a time and encoded into ``segment.<G>.<i>.ock`` (i >= 1), at most ``max_merge_rows`` rows
   per segment, stored vectors copied as stored;
4. the manifest names the new quantizer file and segments (no ``training`` map). Readers of older generations keep
   their snapshots (their files stay); after the commit point the files of step 1 are removed (no manifest
   references them), and the writer removes the generations before the previous one, as after any commit.

A crash before the manifest leaves the previous generation; the files of the attempt are unreferenced (the next
commit's clean-up or ``vacuum`` removes them).
"""

from __future__ import annotations

import contextlib
import os

import numpy as np

from .._index_rows import check_store_vectors
from ..indexfile.reader import load_linked_model
from ..indexfile.writer import save_quantizer
from ..quantizers.ivf import IVF
from ..quantizers.cartesian import Quantizer
from . import names
from .commit import _remove, write_checked_manifest
from ..quantizers.default import default_quantizer
from .manifest import AutoModel, Manifest, SegmentEntry, Training
from .segments import COPY_ROWS, Segment, SegmentSpec, SegmentView, SegmentWriter

__all__ = ["default_train_size", "min_train_rows", "fresh_copy", "train_commit", "DEFAULT_SAMPLE_ROWS",
           "TRAIN_ROWS_PER_WORD", "AUTO_TRAIN_SIZE", "auto_placeholder"]

# The default train_size is TRAIN_ROWS_PER_WORD training rows per word of a codebook (K words), and as many per
# coarse centroid for an IVF: see default_train_size for the measurement behind it.
TRAIN_ROWS_PER_WORD = 40

# The train_size of a collection whose model the library picks (``create_collection`` without a quantizer): the live
# rows whose commit trains it. Below it searches are exact (brute force over the stored vectors: ~1.5 ms per query at
# 4,000 rows of 384 float16 values, one thread). A model fitted on 2,560 rows of minilm-real lost 0.004-0.006 of
# 10-recall@10 at rerank 50 and nothing at rerank 100 against one fitted on 16K (docs/results.md, "The model the
# library picks"); and it is refitted in the background as the collection doubles (background.REFRESH_BELOW).
AUTO_TRAIN_SIZE = 4_096

# A training commit or a retrain fits on at most this many live rows (a uniform sample) unless asked for more: the
# model's quality saturates long before (docs/results.md, "Collections that train themselves"), while fit's time and
# memory grow with the rows.
DEFAULT_SAMPLE_ROWS = 1 << 17


def _fine(quantizer):
    return quantizer.quantizer if isinstance(quantizer, IVF) else quantizer


def min_train_rows(quantizer):
    """The fewest rows ``fit`` accepts: K words per codebook (and, for an IVF, one row per list)."""
    rows = _fine(quantizer).n_codewords
    if isinstance(quantizer, IVF):
        rows = max(rows, quantizer.n_lists)
    return rows


def default_train_size(quantizer):
    """The train_size of a collection that trains its own quantizer when none is given: TRAIN_ROWS_PER_WORD rows per
    word of a codebook (K), and per coarse centroid for an IVF (10,240 for K = 256).

    Measured (tools/bench_app_collection.py --sections train-sizes; docs/results.md, "Collections that train
    themselves"): with a model trained on n rows, 10-recall@10 of a flat index with the default re-ranking (10 k) is,
    for OCKM(16, 2, 10) on minilm-real, 0.771 / 0.960 / 0.984 / 0.986 / 0.989 / 0.992 at n = 256 / 1,024 / 2,560 /
    5,120 / 10,240 / 16,000 (1 / 4 / 10 / 20 / 40 / 62 rows per word), and for OCKM(8, 2, 10) on sift-real (rerank
    5 k) 0.961 / 0.974 / 0.982 / 0.984 / 0.986 / 0.988 at n = 1,024 / 2,560 / 5,120 / 10,240 / 20,480 / 100,000: 40
    rows per word is within 0.004 of the most rows measured on both, where 4 per word lose 0.03. Until then the collection answers exactly (brute force over 10,240 rows of 384 floats takes
    about 1 ms per query). A rule per word, not a fixed number: a model of K = 16 words (4-bit codes) needs fewer.
    """
    rows = TRAIN_ROWS_PER_WORD * _fine(quantizer).n_codewords
    if isinstance(quantizer, IVF):
        rows = max(rows, TRAIN_ROWS_PER_WORD * quantizer.n_lists)
    return rows


def fresh_copy(quantizer):
    """An unfitted quantizer with the parameters of ``quantizer`` (an IVF over an unfitted copy of its fine one)."""
    fine = _fine(quantizer)
    copy = type(fine)(**fine.get_params())
    if isinstance(quantizer, IVF):
        return IVF(quantizer.n_lists, copy, n_iter=quantizer.n_iter, seed=quantizer.seed,
                   n_threads=quantizer.n_threads)
    return copy


def check_model(quantizer, name="quantizer"):
    """A PQ, CKM, ECKM, OCKM or IVF, fitted or not (TypeError naming ``name`` otherwise)."""
    if not isinstance(quantizer, (Quantizer, IVF)):
        raise TypeError(f"{name} must be a PQ, CKM, ECKM, OCKM or IVF instance, got {type(quantizer).__name__}")
    return quantizer


def _rng(quantizer):
    seed = _fine(quantizer).seed
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def _sample(views, live_masks, n, rng, dim):
    """A uniform sample of n of the live rows of ``views`` (without replacement), as float32 (n, P), in row order."""
    counts = [int(mask.sum()) for mask in live_masks]
    total = sum(counts)
    chosen = np.sort(rng.choice(total, size=n, replace=False)) if n < total else np.arange(total)
    out = np.empty((chosen.size, dim), dtype=np.float32)
    first, done = 0, 0
    for view, mask, count in zip(views, live_masks, counts):
        mine = chosen[(chosen >= first) & (chosen < first + count)] - first
        if mine.size:
            rows = np.flatnonzero(mask)[mine]
            out[done:done + rows.size] = view.index._stored_values(rows)  # sq8 codes decoded
            done += rows.size
        first += count
    return out


def spec_with_dim(snapshot, dim):
    """(SegmentSpec, Training) of a collection that has not trained its quantizer once its first vectors set its
    dimension ``dim`` (a collection whose model the library picks: the model it would pick for train_size rows of that
    dimension stands in for it until training)."""
    spec = snapshot.spec
    training = snapshot.manifest.training
    auto = snapshot.manifest.auto
    if auto is not None:
        quantizer = default_quantizer(training.train_size, dim, metric=auto.metric)
        return (SegmentSpec(quantizer, spec.norm_encoding, spec.store_vectors, dim),
                Training.of(quantizer, training.train_size, dim))
    subspaces = _fine(spec.quantizer).n_subspaces
    if subspaces > dim:
        raise ValueError(f"X has dimension {dim}, fewer than the quantizer's n_subspaces = {subspaces}")
    return (SegmentSpec(spec.quantizer, spec.norm_encoding, spec.store_vectors, dim), training.with_dim(dim))


def auto_placeholder(train_size, metric):
    """The unfitted model that stands in for the library's pick in a new collection (before its first vectors set
    the dimension): ``default_quantizer`` for train_size rows of one dimension."""
    return default_quantizer(train_size, 1, metric=metric)


def model_summary(spec):
    """P, method, metric, M, C, K, T, bits (and n_lists for an IVF) of a collection's model, fitted or not (P is None
    before the first vector of a collection that trains its quantizer)."""
    if spec.trained:
        return spec.quantizer._summary()
    fine = _fine(spec.quantizer)
    out = {"P": spec.dim, "method": fine.method, "metric": fine.metric, "M": int(fine.n_subspaces),
           "C": int(fine.n_codebooks), "K": int(fine.n_codewords), "T": int(fine.beam_width), "bits": int(fine.bits)}
    if isinstance(spec.quantizer, IVF):
        out["n_lists"] = int(spec.quantizer.n_lists)
    return out


def retrain_model(snapshot, quantizer, sample):
    """The checked arguments of Collection.retrain: (the model to commit, whether to fit it, the sample's rows, the
    AutoModel when the library picks the model again: then the model is picked for the live rows in train_commit)."""
    from .._index_rows import check_fitted_model, resolve_norm_encoding
    from .._validation import check_int

    spec = snapshot.spec
    if spec.store_vectors is None:
        raise ValueError("retrain needs the stored vectors (it fits on them): this collection stores none; create one "
                         "with store_vectors='float16' (or 'float32', 'uint8') and add the vectors to it")
    auto = None
    if quantizer is None:
        model, fit = fresh_copy(spec.quantizer), True
        auto = snapshot.manifest.auto
        if auto is not None and snapshot.live:  # the library picks again, for the rows the collection holds now
            model = default_quantizer(snapshot.live, spec.vector_dim, metric=auto.metric)
    else:
        model = check_model(quantizer)
        fit = not model.is_fitted
        if not fit:
            check_fitted_model(model)
        if spec.vector_dim is not None and model.dim is not None and model.dim != spec.vector_dim:
            raise ValueError(f"quantizer: fitted on vectors of dimension {model.dim}, the collection's are "
                             f"{spec.vector_dim}")
        if model.metric != spec.metric:
            raise ValueError(f"quantizer: metric {model.metric!r}, the collection's is {spec.metric!r} (fixed when it "
                             "was created: create a new collection for another metric)")
        if isinstance(model, IVF) != isinstance(spec.quantizer, IVF):
            raise ValueError("quantizer: an IVF collection needs an IVF, a flat one a flat quantizer (its segments "
                             "and searches depend on it)")
        try:
            resolve_norm_encoding(model, spec.norm_encoding)
        except ValueError as exc:
            raise ValueError(f"quantizer: the collection stores norm terms as {spec.norm_encoding!r}: {exc}") from None
    least = min_train_rows(model)
    sample = check_int(sample, "sample", min_value=least)
    if fit and snapshot.live < least:
        raise ValueError(f"retrain needs at least {least} live vectors to fit the quantizer (K words per codebook"
                         f"{', and n_lists' if isinstance(model, IVF) else ''}); the collection holds {snapshot.live}")
    if not fit and snapshot.live == 0:
        raise ValueError("retrain: the collection holds no vectors to encode")
    return model, fit, sample, auto


def train_commit(snapshot, generation, model, *, fit, sample_rows, operation, pending=(), deletes=None,
                 next_id=None, check=None, n_threads=None, spec=None, auto=None):
    """Fit ``model`` (when ``fit``; else it is fitted already) on a sample of at most ``sample_rows`` live rows, encode
    every live row, and commit generation ``generation`` (module docstring). Returns (Snapshot, files to remove after
    the commit: the consumed files of stored vectors). No input validation: the collection checked the rows, ids,
    deletions and the model. ``auto``: the collection's AutoModel when the library picks its model: then the model
    is ``default_quantizer`` for the live rows the commit holds (``model`` is ignored), and the manifest records their
    number.

    pending : sequence of PendingSegment (files of stored vectors: the new rows of this commit)
    deletes : dict view number -> int64 ids newly deleted (an upsert's), or None
    spec : the SegmentSpec the pending files were written with (the snapshot's, unless they set the dimension)
    """
    from .snapshot import Snapshot

    folder, old = snapshot.folder, snapshot.manifest
    pending_spec = snapshot.spec if spec is None else spec
    dim = pending_spec.vector_dim
    views = list(snapshot.views)
    opened, written = [], []
    try:
        for p in pending:  # the new rows, in files of stored vectors
            entry = SegmentEntry(os.path.basename(p.path), p.rows, p.min_id, p.max_id)
            segment = _open_pending(folder, p, entry, pending_spec)
            opened.append(segment)
            views.append(SegmentView(segment, entry, np.empty(0, dtype=np.int64)))
        masks = []
        for number, view in enumerate(views):
            mask = view.live_mask()
            mask = np.ones(view.segment.rows, dtype=bool) if mask is None else mask.copy()
            gone = None if deletes is None else deletes.get(number)
            if gone is not None and gone.size:
                _, rows = view.segment.ids_index().find(gone)
                mask[rows] = False
            masks.append(mask)
        total = sum(int(m.sum()) for m in masks)
        if auto is not None:
            model = default_quantizer(max(total, 1), dim, metric=auto.metric)
            fit = True
        if fit:
            X = _sample(views, masks, min(total, sample_rows), _rng(model), dim)
            model.fit(X)
            del X
        quantizer_file = names.quantizer_name(generation)
        save_quantizer(os.path.join(folder, quantizer_file), model)
        written.append(quantizer_file)
        # The model as readers will load it, with its fingerprint: the new segments refer to the file (FORMAT.md 18).
        linked = load_linked_model(os.path.join(folder, quantizer_file))
        spec = SegmentSpec(linked.model, old.norm_encoding, check_store_vectors(old.store_vectors),
                           model_ref=linked.ref)
        encoded = encode_live_rows(folder, spec, views, masks, old.max_merge_rows, n_threads, written,
                                   name_of=lambda i: names.segment_name(generation, i + 1))
        entries = [SegmentEntry(os.path.basename(p.path), p.rows, p.min_id, p.max_id) for p, _ in encoded]
        manifest = Manifest(generation, quantizer_file, old.norm_encoding, old.store_vectors,
                            old.next_id if next_id is None else next_id, old.merge_factor, old.max_merge_rows,
                            tuple(entries), operation, None, None if auto is None else AutoModel(auto.metric, total))
        new_views = []
        for entry in entries:
            segment = Segment(folder, entry, spec)
            opened.append(segment)
            new_views.append(SegmentView(segment, entry, np.empty(0, dtype=np.int64)))
        write_checked_manifest(folder, manifest, snapshot.user, check)
    except BaseException:
        if not os.path.exists(os.path.join(folder, names.manifest_name(generation))):
            for segment in opened:
                segment.close()
            for file in written:
                _remove(folder, file)
        raise
    for segment in opened[:len(pending)]:
        segment.close()  # the consumed files of stored vectors (removed by the caller)
    consumed = [p.path for p in pending]
    return Snapshot(folder, manifest, snapshot.user, spec, new_views, [], None, snapshot._cache), consumed


def _open_pending(folder, p, entry, spec):
    """A pending file of stored vectors opened as a segment (its name is not a segment name: Segment checks only
    its content)."""
    return Segment(folder, entry, spec)


def encode_live_rows(folder, spec, views, masks, max_rows, n_threads, written, name_of=None):
    """Encode the live rows of ``views`` (their stored vectors, ids kept; ``masks`` the rows to take of each) into
    segments of at most ``max_rows`` rows, each CRC of what is read checked as it is read (a damaged segment aborts
    the commit instead of being re-encoded under fresh checksums, C15). ``name_of(i)``: the file name of the i-th
    segment written (None: pending names); paths are appended to ``written`` as they are created, for the caller's
    clean-up. Returns [(PendingSegment, its ids sorted)]."""
    out, writer, ids = [], None, []
    try:
        for view, mask in zip(views, masks):
            index = view.index
            check = view.segment.copy_check([name for name in ("value_ranges", "vectors", "ids")
                                             if name in index._file.sections])
            for start in range(0, view.segment.rows, COPY_ROWS):
                stop = min(view.segment.rows, start + COPY_ROWS)
                check.advance(stop, view.segment.rows)
                keep = np.flatnonzero(mask[start:stop]) + start
                while keep.size:
                    if writer is None:
                        writer = SegmentWriter(folder, spec, n_threads=n_threads,
                                               _name=None if name_of is None else name_of(len(out)))
                        written.append(writer.path)
                        ids = []
                    take = keep[:max_rows - writer.rows]
                    keep = keep[take.size:]
                    taken = np.asarray(index.ids[take])
                    writer._add(index._stored_values(take), taken)  # sq8: decoded
                    ids.append(taken)
                    if writer.rows >= max_rows:
                        out.append((writer.close(), np.sort(np.concatenate(ids))))
                        writer = None
            check.finish()
        if writer is not None:
            out.append((writer.close(), np.sort(np.concatenate(ids))))
    except BaseException:
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.abort()
        raise
    return out
