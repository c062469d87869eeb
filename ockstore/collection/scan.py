"""Scanning the segments of a collection as if they were one index (flat segments; docs/ARCHITECTURE.md,
"Collections").

Every segment has the collection's quantizer, so one table model serves them all (and, for SDC, one encoding of the
queries); the kernel computes each query's tables as it scans (a few microseconds per query and segment). The segments
are scanned in turn (the largest first), each with the k-th best distance found so far as a bound
(``_kernels.scan(..., bound=...)``, or ``fastscan_scan`` for 4-bit codes: ``search.scanner``): its heap only takes
codes that can still be among the k best, so ten segments cost about what one segment of all their rows costs, not ten
heaps filling up. The parts' results are then merged exactly (``merge.topk_columns``: by distance, equal distances by
the smaller id), so the results are those of one scan over the union of the rows, bit for bit.

No input validation here: ``Snapshot.search`` checks everything first.
"""

from __future__ import annotations

import numpy as np

from ..search.scan import scanner
from .merge import topk_columns

__all__ = ["scan_parts", "QUERIES_PER_STEP"]

# Queries whose results are gathered per step: bounds the per-part results held at once (queries x k x segments).
QUERIES_PER_STEP = 1024


def scan_parts(tables, Q, k, parts, *, distance="adc", n_threads=1, by_bound=False):
    """The k best codes of each query over all ``parts``, exactly as one scan of their union would give them.

    Parameters
    ----------
    tables : search.QueryTables of the quantizer every part was encoded with
    Q : ndarray of shape (nq, P), float32, C-contiguous, finite (unit rows for cosine)
    k : int >= 1
    parts : sequence of search.CodeRows (``Index._flat_scan_rows``)
    distance : "adc" or "sdc"
    n_threads : int >= 1
    by_bound : bool
        Fast-scan parts: rank by the quantized bounds (candidates to re-rank: ``search.search_codes``); the bound
        passed from part to part is then the k-th best bound.

    Returns
    -------
    D : (nq, k) float32, ascending: distances, or minus the scores for "ip" and "cosine"; +inf for padding
    ids : (nq, k) int64, -1 for padding
    part : (nq, k) int64, the index in ``parts`` of each result, -1 for padding
    rows : (nq, k) int64, the row of each result in its part, -1 for padding
    """
    nq = Q.shape[0]
    D = np.full((nq, k), np.inf, dtype=np.float32)
    ids = np.full((nq, k), -1, dtype=np.int64)
    part = np.full((nq, k), -1, dtype=np.int64)
    rows = np.full((nq, k), -1, dtype=np.int64)
    if nq == 0 or not parts:
        return D, ids, part, rows
    order = sorted(range(len(parts)), key=lambda p: -parts[p].codes.shape[0])  # largest first: a tight bound early
    for start in range(0, nq, QUERIES_PER_STEP):
        stop = min(nq, start + QUERIES_PER_STEP)
        nb = stop - start
        Qb = Q if nb == nq else Q[start:stop]
        # ADC: each scan computes the tables of its queries (in its scratch); SDC: the queries' reconstructions,
        # computed once, serve every part.
        queries, rotated = (Qb, None) if distance == "adc" else (None, tables.sdc_rotated(Qb, n_threads))
        best = np.full((nb, k), np.inf, dtype=np.float32)  # the k best distances so far (unordered): the bound
        found_d, found_i, found_p, found_r = [], [], [], []
        for p in order:
            pa = parts[p]
            N = pa.codes.shape[0]
            kk = min(k, N)
            out_d = np.empty((nb, kk), dtype=np.float32)
            out_r = np.empty((nb, kk), dtype=np.int64)
            bound = np.nextafter(best.max(axis=1), np.float32(np.inf))  # a code at the k-th best distance enters
            # byte codes, or fast-scan blocks (K <= 16)
            scan = scanner(pa.codes, bound, pa.norm_scales, pa.scale_range, by_bound)
            scan(tables.model, queries, rotated, pa.norms, pa.norm_codes,
                 pa.norm_levels if pa.norm_codes is not None else None, pa.ids, pa.allow, out_d, out_r,
                 n_threads)
            real = out_r >= 0
            out_i = np.where(real, pa.ids[np.where(real, out_r, 0)], -1)
            found_d.append(out_d)
            found_i.append(out_i)
            found_p.append(np.full(kk, p, dtype=np.int64))
            found_r.append(out_r)
            pool = np.concatenate([best, np.where(real, out_d, np.inf)], axis=1)
            best = np.partition(pool, k - 1, axis=1)[:, :k] if pool.shape[1] > k else pool
        all_d = np.concatenate(found_d, axis=1)
        all_i = np.concatenate(found_i, axis=1)
        cols = topk_columns(all_d, all_i, k)
        hit = cols >= 0
        safe = np.where(hit, cols, 0)
        source = np.concatenate(found_p)
        all_r = np.concatenate(found_r, axis=1)
        D[start:stop][hit] = np.take_along_axis(all_d, safe, axis=1)[hit]
        ids[start:stop][hit] = np.take_along_axis(all_i, safe, axis=1)[hit]
        part[start:stop][hit] = source[safe][hit]
        rows[start:stop][hit] = np.take_along_axis(all_r, safe, axis=1)[hit]
    return D, ids, part, rows
