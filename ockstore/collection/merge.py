"""The exact merge of top-k results searched in parts (segments of a collection, or the workers of a distributed
search): the k best of the union, in the order one search over all the rows gives (docs/ARCHITECTURE.md,
"Collections").

Each part gives its own top k (or more, or fewer) results per query as ``Index.search`` returns them. The k best of
the union are the k best of the parts' results, provided every part returned its own k best (a row that is not among
its part's k best has k better rows before it). The order is the one of a single search: by value (distances
ascending for metric "l2", scores descending for "ip" and "cosine"), equal values by the smaller id, padding (+inf
for "l2", -inf otherwise, id -1) last.
"""

from __future__ import annotations

import numpy as np

__all__ = ["merge_topk"]

_NO_ID_KEY = np.iinfo(np.int64).max  # sorts padding (id -1) after every real id


def merge_topk(parts, k, *, descending=False, n_queries=None, return_part=False):
    """The exact top k of per-part results.

    Parameters
    ----------
    parts : sequence of (D, I)
        D of shape (nq, k_i), float32: distances (``descending=False``) or scores (``descending=True``);
        I of shape (nq, k_i), int64: ids, -1 for padding. The widths k_i may differ and may be below k. Each row
        need not be sorted. No input validation beyond the shapes.
    k : int >= 1
    descending : bool
        False: smaller values are better (metric "l2"; padding +inf). True: larger values are better ("ip",
        "cosine"; padding -inf).
    n_queries : int or None
        nq, required when ``parts`` is empty (the result is then all padding).
    return_part : bool
        Also return which part each result came from.

    Returns
    -------
    D : ndarray of shape (nq, k), float32
    I : ndarray of shape (nq, k), int64
        Best first, equal values by the smaller id; padding (+inf or -inf, -1) past the last result.
    part : ndarray of shape (nq, k), int64, only with ``return_part``
        The index in ``parts`` of each result, -1 for padding.
    """
    parts = [(np.asarray(D, dtype=np.float32), np.asarray(I, dtype=np.int64)) for D, I in parts]
    if n_queries is None:
        if not parts:
            raise ValueError("merge_topk: n_queries is required when there are no parts")
        n_queries = parts[0][0].shape[0]
    for D, I in parts:
        if D.ndim != 2 or D.shape != I.shape or D.shape[0] != n_queries:
            raise ValueError(f"merge_topk: every part must give D and I of shape ({n_queries}, k_i), got "
                             f"{D.shape} and {I.shape}")
    pad = -np.inf if descending else np.inf
    out_D = np.full((n_queries, k), pad, dtype=np.float32)
    out_I = np.full((n_queries, k), -1, dtype=np.int64)
    out_part = np.full((n_queries, k), -1, dtype=np.int64)
    parts = [(D, I, p) for p, (D, I) in enumerate(parts) if D.shape[1] > 0]
    if not parts or n_queries == 0:
        return (out_D, out_I, out_part) if return_part else (out_D, out_I)
    D = np.concatenate([D for D, _, _ in parts], axis=1)
    I = np.concatenate([I for _, I, _ in parts], axis=1)
    source = np.concatenate([np.full(D.shape[1], p, dtype=np.int64) for D, _, p in parts])
    real = I >= 0
    key = np.where(real, -D if descending else D, np.inf)  # ascending; padding last whatever its value
    id_key = np.where(real, I, _NO_ID_KEY)
    width = min(k, D.shape[1])
    order = np.lexsort((id_key, key), axis=-1)[:, :width]
    best_I = np.take_along_axis(I, order, axis=1)
    found = best_I >= 0
    out_D[:, :width] = np.where(found, np.take_along_axis(D, order, axis=1), pad)
    out_I[:, :width] = np.where(found, best_I, -1)
    if return_part:
        out_part[:, :width] = np.where(found, source[order], -1)
        return out_D, out_I, out_part
    return out_D, out_I
