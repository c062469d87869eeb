"""``ockstore.tune``: the fastest search keywords (``n_probe``, ``rerank``) whose mean recall reaches a target on the
caller's queries (docs/ARCHITECTURE.md, "Tuning").

Tuning measures; it never guesses. For each n_probe of a geometric grid (an inverted file; a flat index has none) one
search keeps R_max candidates per query in the scan's order and one re-ranks them all: the candidates a search with
``rerank=R`` would re-rank are the first R of them, and its k results the k best of those by exact value, so the
recall of every R of a grid follows from these two searches. The smallest R that reaches the target is kept for
each n_probe and that setting's searches are timed; the fastest wins. R_max grows (x4, up to the number of vectors)
while no setting reaches the target; when even the largest cannot, ValueError says the best recall measured.
"""

from __future__ import annotations

import logging
import os
import time
import warnings

import numpy as np

from .merge import merge_topk
from .rerank import exact_neighbours
from .._validation import MAX_K, as_vectors, check_float, check_k, resolve_n_threads

__all__ = ["tune", "TuneResult"]

logger = logging.getLogger("ockstore.tune")

# Candidates per query examined at first (at least): enough for 10-recall@10 above 0.95 on 64-bit codes of SIFT and
# MiniLM; R_max is multiplied by RERANK_GROWTH while the target is not reached, up to the number of vectors.
FIRST_MAX_RERANK = 1024
RERANK_GROWTH = 4
# The rerank values tried: k, then a geometric grid of ratio 2^(1/4) (a setting at most ~19% above the smallest
# rerank that reaches the target).
RERANK_STEPS_PER_DOUBLING = 4
# Elements of the (queries x candidates) arrays handled at once: bounds the memory of tuning with deep candidate lists.
MAX_BLOCK_ELEMENTS = 1 << 22
# Timed repetitions of each setting; the fastest is kept (the others measure the machine's noise).
TIMING_REPEATS = 3
# A setting is chosen when the lower confidence bound of its mean recall reaches the target: mean - Z s / sqrt(nq)
# (s the spread of the per-query recalls; Z of a one-sided 95% bound): a target met on the tuning queries by luck
# would undershoot on others.
CONFIDENCE_Z = 1.645
# The share of tuning queries that are stored rows of the index above which tune warns (neighbours of stored rows are
# easier to find than those of new queries: 0.01-0.03 higher 10-recall@10 on minilm-real).
STORED_QUERY_SHARE = 0.5


class TuneResult(dict):
    """The search keywords chosen by :func:`tune` (a dict: ``index.search(Q, k, **result)``), with what was measured:

    measurements : list of dict
        One per setting timed: ``n_probe`` (None for a flat index), ``rerank``, ``recall`` (mean k-recall@k on the
        tuning queries), ``recall_lower`` (its lower confidence bound, which the target was held to) and
        ``seconds_per_query`` (the fastest of TIMING_REPEATS searches of all the queries).
    recall, recall_lower, seconds_per_query : float
        Those of the setting chosen.
    """

    def __init__(self, keywords, measurements, recall, seconds_per_query, recall_lower=None):
        super().__init__(keywords)
        self.measurements = measurements
        self.recall = recall
        self.recall_lower = recall if recall_lower is None else recall_lower
        self.seconds_per_query = seconds_per_query


def _not_tunable_hint(index):
    """What to do instead, for the things tune is given by mistake (the rest of tune's TypeError)."""
    if isinstance(index, (str, bytes, os.PathLike)):
        return (f": a path; open it first, ockstore.tune(ockstore.open_index({os.fsdecode(index)!r}), ...) "
                "(ockstore.open_collection for a collection folder)")
    if type(index).__name__ == "ExactIndex":
        return ": it searches exactly, with no setting to tune"
    return ""


def tune(index, queries, *, k=10, target_recall=0.95, ground_truth=None, n_threads=None):
    """The fastest ``n_probe`` / ``rerank`` whose mean k-recall@k reaches ``target_recall`` on ``queries``.

    Parameters
    ----------
    index : Index, IVFIndex or Collection
        Searched as it is: the settings are measured on this index (a collection: on its current generation), on
        this machine. A collection must have trained its quantizer (before, its searches are exact: nothing to
        tune).
    queries : array-like of shape (nq, P)
        Queries like those the index will serve (any real dtype; a 1-D vector is one query).
    k : int >= 1
        Results per query.
    target_recall : float in (0, 1]
        Mean over the queries of |results ∩ true k nearest| / k. The setting chosen reaches it with confidence: the
        lower bound of a one-sided 95% interval of the mean over these queries (mean - 1.645 s / sqrt(nq)) must reach
        it, so that it holds on other queries of the same kind, not only on these (more queries: a tighter bound).
        Tune on queries like the application's: queries that are stored rows of the index (documents searched for
        their neighbours) find them more easily than new queries do (0.01-0.03 of 10-recall@10 on sentence
        embeddings): tune warns (UserWarning) when most of the queries are stored rows (it checks when it computes
        the ground truth itself).
    ground_truth : array-like of ints of shape (nq, >= k), or None
        The ids of each query's true nearest neighbours, nearest first (the first k are used). None: computed here
        by brute force over the index's stored vectors (``store_vectors``), by the exact values re-ranking computes
        (ValueError when the index stores no vectors).
    n_threads : int or None
        Threads of the timed searches (None: every core), as the application will search.

    Returns
    -------
    TuneResult
        A dict of search keywords only: ``{"n_probe": p, "rerank": R}`` for an inverted file, ``{"rerank": R}`` for a
        flat index (``rerank=0``: no re-ranking, which reaches the target already or is all an index without stored
        vectors can do); its ``measurements`` attribute, and the log ``ockstore.tune`` (INFO), hold every setting
        measured.

    Raises ValueError when no setting reaches the target (the message gives the best recall measured).
    """
    tunable = getattr(index, "_tune_view", None)
    if tunable is None:
        raise TypeError("index must be an Index, IVFIndex or Collection (an open one, searched by codes), got "
                        f"{type(index).__name__}{_not_tunable_hint(index)}")
    index._check_open()
    tunable()  # refuses what cannot be tuned (a collection that has not trained its quantizer)
    target = check_float(target_recall, "target_recall", min_value=0.0)
    if not 0.0 < target <= 1.0:
        raise ValueError(f"target_recall must be in (0, 1], got {target}")
    N = len(index)
    k = check_k(k, N)
    if k > N:
        raise ValueError(f"k = {k} exceeds the {N} vectors of the index: recall@{k} cannot be measured")
    threads = resolve_n_threads(n_threads)
    Q, _ = as_vectors(queries, "queries", index.dim)
    if Q.shape[0] == 0:
        raise ValueError("queries must hold at least one query")
    stored = index.store_vectors is not None
    if ground_truth is None:
        if not stored:
            raise ValueError("tune needs the true neighbours: pass ground_truth=, or build the index with "
                             "store_vectors=... so that they can be computed by brute force")
        truth = _exact_neighbours(index, Q, k, threads)
    else:
        truth = _check_ground_truth(ground_truth, Q.shape[0], k)
    if ground_truth is None and _stored_query_share(index, Q, truth) > STORED_QUERY_SHARE:
        warnings.warn("tune: most of these queries are vectors stored in the index; the neighbours of stored rows are "
                      "easier to find than those of new queries, so the setting may fall short of the target on the "
                      "application's queries: tune on held-out queries (not added to the index)", UserWarning,
                      stacklevel=2)
    is_ivf = hasattr(index.quantizer, "n_lists")
    probes = _probe_grid(index.quantizer.n_lists) if is_ivf else [None]
    max_rerank = min(N, MAX_K, max(FIRST_MAX_RERANK, 64 * k)) if stored else k
    measurements, best = [], None
    while True:
        best_recall = 0.0
        for n_probe in probes:
            if best is not None and _scan_seconds(index, Q, k, n_probe, threads) >= best["seconds_per_query"]:
                break  # this scan alone is slower than the best setting: larger n_probe cannot win
            grid = _rerank_grid(k, max_rerank) if stored else [0]
            recalls, lowers = _recalls(index, Q, truth, k, n_probe, grid, threads)
            best_recall = max(best_recall, recalls[-1])
            reached = [R for R, r in zip(grid, lowers) if r >= target]
            if not reached:
                logger.info("n_probe=%s: recall %.4f (lower bound %.4f) at rerank=%d, below the target", n_probe,
                            recalls[-1], lowers[-1], grid[-1])
                continue
            R = reached[0]
            seconds = _search_seconds(index, Q, k, n_probe, R, threads)
            entry = {"n_probe": n_probe, "rerank": R, "recall": float(recalls[grid.index(R)]),
                     "recall_lower": float(lowers[grid.index(R)]), "seconds_per_query": seconds}
            measurements.append(entry)
            logger.info("n_probe=%s rerank=%d: recall %.4f (lower bound %.4f), %.1f us per query", n_probe, R,
                        entry["recall"], entry["recall_lower"], seconds * 1e6)
            if best is None or seconds < best["seconds_per_query"]:
                best = entry
            if R == 0 or R == k:
                break  # nothing left to save on re-ranking: a larger n_probe only costs more
        if best is not None or max_rerank >= min(N, MAX_K) or not stored:
            break
        max_rerank = min(N, MAX_K, max_rerank * RERANK_GROWTH)
    if best is None:
        raise ValueError(f"target_recall {target} cannot be reached on these queries: the best mean {k}-recall@{k} "
                         f"measured is {best_recall:.4f} (the target is held to its lower confidence bound: more "
                         "queries tighten it)" + (f" (n_probe={probes[-1]}" if is_ivf else " (")
                         + f"{', ' if is_ivf else ''}rerank={max_rerank if stored else 'none: no stored vectors'})")
    keywords = {"n_probe": best["n_probe"]} if is_ivf else {}
    keywords["rerank"] = best["rerank"]  # explicit: without it a search would take the default
    return TuneResult(keywords, measurements, best["recall"], best["seconds_per_query"], best["recall_lower"])


def _probe_grid(n_lists):
    """1, 2, 3, 4, 6, 8, 12, 16, ... (powers of two and 1.5 times them) up to n_lists, n_lists itself included: the
    high-recall end needs a setting between two powers of two (48 of 512 lists on sift 1M)."""
    grid, p = [], 1
    while p < n_lists:
        grid.append(p)
        if p >= 2 and p * 3 // 2 < n_lists:
            grid.append(p * 3 // 2)
        p *= 2
    return grid + [n_lists]


def _rerank_grid(k, max_rerank):
    """0 (no re-ranking), then rerank values from k to max_rerank: k and a geometric grid above it."""
    grid, step = [0, k], 0
    while True:
        step += 1
        R = int(round(k * 2.0 ** (step / RERANK_STEPS_PER_DOUBLING)))
        if R >= max_rerank:
            return grid + [max_rerank] if grid[-1] < max_rerank else grid
        if R > grid[-1]:
            grid.append(R)


def _check_ground_truth(ground_truth, nq, k):
    arr = np.asarray(ground_truth)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"ground_truth must hold integer ids, got dtype {arr.dtype}")
    if arr.ndim != 2 or arr.shape[0] != nq or arr.shape[1] < k:
        raise ValueError(f"ground_truth must have shape ({nq}, >= {k}) (the ids of each query's nearest neighbours, "
                         f"nearest first), got {arr.shape}")
    return np.ascontiguousarray(arr[:, :k], dtype=np.int64)


def _exact_neighbours(index, Q, k, n_threads):
    """The ids of the k nearest stored vectors of each query by exact value (the order of re-ranking): brute force
    over the stored representation, as re-ranking every row would give (a collection: over every segment's live
    rows, merged)."""
    prepared = index.quantizer._prepare(Q, "queries")
    parts = index._search_parts()
    results = []
    for p, (one, live) in enumerate(zip(parts.indexes, parts.live)):
        if not len(one):
            continue
        stored = parts.stored_part(p)
        if live is None:
            results.append(exact_neighbours(prepared, stored, min(k, len(one)), n_threads))
            continue
        deleted = one.ids[~_mask_of(live, len(one))]
        D, I = exact_neighbours(prepared, stored, min(k + deleted.size, len(one)), n_threads)
        alive = ~np.isin(I, deleted) & (I >= 0)  # the deleted rows left out, the live ones first in their order
        order = np.argsort(~alive, axis=1, kind="stable")
        pad = np.float32(np.inf if index.quantizer.metric == "l2" else -np.inf)
        results.append((np.take_along_axis(np.where(alive, D, pad), order, axis=1)[:, :k],
                        np.take_along_axis(np.where(alive, I, -1), order, axis=1)[:, :k]))
    return merge_topk(results, k, descending=index.quantizer.metric != "l2", n_queries=Q.shape[0])[1]


def _mask_of(bitmap, n):
    """The boolean mask of a scan's bitmap of n rows."""
    return np.unpackbits(bitmap.view(np.uint8), bitorder="little")[:n].astype(bool)


def _in_truth(ids, truth):
    """(nq, R) bool: whether each id of ``ids`` (nq, R) is among its query's true neighbours (truth (nq, k))."""
    return (ids[:, :, None] == truth[:, None, :]).any(axis=2) & (ids >= 0)


def _recalls(index, Q, truth, k, n_probe, grid, threads):
    """The mean recall of each rerank of ``grid`` (0: the scan's own k best) at this n_probe, from one search that
    keeps max(grid) candidates in the scan's order and one that re-ranks them all."""
    R_max = max(grid[-1], k)
    extra = {} if n_probe is None else {"n_probe": n_probe}
    nq = Q.shape[0]
    hits = np.zeros((len(grid), nq))
    step = max(1, MAX_BLOCK_ELEMENTS // (R_max * k))
    for start in range(0, nq, step):
        block, block_truth = Q[start:start + step], truth[start:start + step]
        # the candidates a re-ranked search keeps, in the scan's order (by bound for 4-bit codes: Index._candidates)
        _, candidates = index._candidates(block, R_max, n_threads=threads, **extra)
        if 0 in grid:  # no re-ranking: the scan's own k best -- the candidates' first k, except for 4-bit codes,
            # whose candidates are ranked by bound and whose searches without re-ranking by exact ADC
            plain = (index.search(block, k, rerank=0, n_threads=threads, **extra)[1]
                     if index._search_parts().ranks_by_bound else candidates[:, :k])
            hits[grid.index(0), start:start + step] = _in_truth(plain, block_truth).sum(axis=1)
        if grid[-1] == 0:
            continue
        _, exact = index.search(block, R_max, rerank=R_max, n_threads=threads, **extra)  # the same, by exact value
        # where[q, j]: the position in the scan's order of the j-th candidate by exact value (both rows hold the
        # same ids: sorted, they align); padding (-1) is never within a prefix
        by_scan = np.argsort(candidates, axis=1, kind="stable")
        by_exact = np.argsort(exact, axis=1, kind="stable")
        rank_in_exact = np.empty_like(by_exact)
        np.put_along_axis(rank_in_exact, by_exact, np.arange(R_max)[None, :], axis=1)
        where = np.take_along_axis(by_scan, rank_in_exact, axis=1)
        where[exact < 0] = R_max
        true_hit = _in_truth(exact, block_truth)
        for j, R in enumerate(grid):
            if R == 0:
                continue
            inside = where < R  # the candidates a search with rerank=R re-ranks, in exact order
            kept = inside & (np.cumsum(inside, axis=1) <= k)  # the k best of them: what it returns
            hits[j, start:start + step] = (kept & true_hit).sum(axis=1)
    per_query = hits / k
    means = per_query.mean(axis=1)
    spread = per_query.std(axis=1, ddof=1) if nq > 1 else np.zeros(len(grid))
    return list(means), list(means - CONFIDENCE_Z * spread / np.sqrt(nq))


def _stored_query_share(index, Q, truth):
    """The share of the queries that are stored rows of the index: equal (to the stored precision) to the stored
    vector of their nearest neighbour."""
    nearest = truth[:, 0]
    found = nearest >= 0
    if not found.any():
        return 0.0
    V = index.get(nearest[found])
    same = np.all(np.isclose(V, Q[found], rtol=2e-3, atol=1e-6), axis=1)
    return float(same.sum()) / Q.shape[0]


def _timed(fn):
    best = float("inf")
    for _ in range(TIMING_REPEATS):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _search_seconds(index, Q, k, n_probe, rerank, threads):
    extra = {} if n_probe is None else {"n_probe": n_probe}
    return _timed(lambda: index.search(Q, k, rerank=rerank, n_threads=threads, **extra)) / Q.shape[0]


def _scan_seconds(index, Q, k, n_probe, threads):
    """Seconds per query of the scan alone (no re-ranking) at this n_probe."""
    extra = {} if n_probe is None else {"n_probe": n_probe}
    return _timed(lambda: index.search(Q, k, rerank=0, n_threads=threads, **extra)) / Q.shape[0]
