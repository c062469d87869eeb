"""ExactIndex: stored vectors searched by brute force, no codes (a collection's rows before it has trained its
quantizer; docs/ARCHITECTURE.md, "Collections for apps"). Files of kind "vectors" (docs/FORMAT.md section 15) open as
one, through ``open_index``.

A search is exact: its values are those re-ranking computes (``_rerank.rerank``, float32 from the
stored vectors converted to float32), for every row, ranked by (value, id). Computing them for every row costs N
reductions of P values per query; instead one matrix product per block of rows (BLAS) screens the rows, and only the
rows that can be among the k best are computed exactly:

    key(q, x) = ||q||^2 - 2 q.x + ||x||^2  ("l2"),   -q.x  ("ip"),   -q.x / ||x||  ("cosine"; q of unit length)

The product and the exact value differ by at most the rounding of two float32 sums of P products,
|key - exact| <= delta = 2 (P + 4) 2^-24 s, s = (||q|| + max ||x||)^2 for "l2", ||q|| max ||x|| for "ip", 1 for
"cosine" (a bound with a factor 2 to spare). If t is the k-th smallest key of a query, k rows have exact values <= t +
delta, so every row of the true top k has key <= t + 2 delta: those rows, and only those, are re-ranked. The results
are therefore exactly those of re-ranking every row (``rerank=N``), at the cost of one product per row.
"""

from __future__ import annotations

import numpy as np

from .search import rerank as _rerank, options as _search_options
from . import _kernels, storage
from ._blas import blas_threads
from ._index_rows import EXACT_STORE_VECTORS, STORED_VECTOR_DTYPES
from ._stored_rows import StoredRows
from ._validation import as_vectors, check_choice, check_k, normalize_rows, resolve_n_threads

__all__ = ["ExactIndex", "screened_search"]

# Rows whose keys are computed per matrix product: bounds the float32 copy of their stored vectors (8 MiB at P = 128).
ROWS_PER_BLOCK = 16384
# Bytes of the key matrix of one step of queries (queries x rows, float32): bounds a search's memory whatever nq is.
KEY_BYTES = 32 << 20
# An ExactIndex keeps a float32 copy of its stored vectors (and their norms) for the products when the copy takes at
# most this many bytes: NumPy converts float16 at ~130M values/s here, so converting 40,000 x 384 values per search
# took 0.12 s where the product takes 5 ms. Larger ones (a collection whose train_size the app set very high) convert
# block by block in each search.
SCREEN_CACHE_BYTES = 256 << 20


def row_norms(block):
    """||x|| of each row of a float32 block, in float64."""
    return np.sqrt(np.einsum("ij,ij->i", block, block, dtype=np.float64))


def screened_search(Q, k, vectors, ids, metric, *, allow=None, n_threads=None, source=None, screen=None):
    """The k best rows of each query by their exact values (no input validation).

    Parameters
    ----------
    Q : ndarray of shape (nq, P), float32, C-contiguous, finite (unit rows for cosine)
    k : int >= 1
    vectors : ndarray of shape (N, P), float16, float32 or uint8 (a memory map welcome: read block by block)
    ids : ndarray of shape (N,), int64, or None (the row numbers)
    metric : "l2", "ip" or "cosine"
    allow : bool ndarray of shape (N,), or None: only these rows
    n_threads : int or None (BLAS threads of the products)
    source : as for ``_rerank.gather_rows`` (damage of stored vectors is a FormatError naming the file)
    screen : (float32 (N, P) copy of ``vectors`` or None, float64 (N,) norms) or None: what the screening products read
        (None: ``vectors`` converted block by block, norms computed each time)

    Returns (D (nq, k) float32, I (nq, k) int64): distances ascending ("l2") or scores descending, equal values by
    the smaller id, padding (+inf or -inf, -1); I holds ids.
    """
    nq, P = Q.shape

    def fetch(keys):  # the candidates' stored vectors, checked (damage: a FormatError naming the file), and ids
        return _rerank.gather_rows(vectors, keys, source), (keys if ids is None else ids[keys])

    pad = np.inf if metric == "l2" else -np.inf
    D = np.full((nq, k), pad, dtype=np.float32)
    I = np.full((nq, k), -1, dtype=np.int64)
    rows = np.arange(vectors.shape[0], dtype=np.int64) if allow is None else np.flatnonzero(allow).astype(np.int64)
    N = rows.size
    if nq == 0 or N == 0:
        return D, I
    kk = min(k, N)
    step = max(1, KEY_BYTES // (4 * N))
    q_norms = np.sqrt(np.einsum("ij,ij->i", Q, Q, dtype=np.float64))
    threads = resolve_n_threads(n_threads)
    for start in range(0, nq, step):
        stop = min(nq, start + step)
        Qs = Q[start:stop]
        keys = np.empty((stop - start, N), dtype=np.float32)
        largest = 0.0
        # BLAS threads by the kernels' small-work rule: a multi-threaded product of one query and a few thousand
        # rows took 20 ms instead of 0.6 ms with another process busy on the machine's other core
        with blas_threads(_kernels.product_threads(threads, float(stop - start) * N * P)):
            for b in range(0, N, ROWS_PER_BLOCK):
                chosen = rows[b:b + ROWS_PER_BLOCK]
                whole = slice(b, b + ROWS_PER_BLOCK) if allow is None else chosen
                copy = vectors if screen is None or screen[0] is None else screen[0]
                with np.errstate(over="ignore", invalid="ignore"):  # damage (inf, NaN): refused by the exact stage
                    block = np.ascontiguousarray(copy[whole], dtype=np.float32)
                    norms = row_norms(block) if screen is None else screen[1][whole]
                    dots = Qs @ block.T
                    if metric == "l2":
                        keys[:, b:b + block.shape[0]] = (np.square(q_norms[start:stop])[:, None] - 2.0 * dots
                                                         + np.square(norms)[None, :])
                    elif metric == "ip":
                        keys[:, b:b + block.shape[0]] = -dots
                    else:
                        keys[:, b:b + block.shape[0]] = -dots / np.where(norms > 0, norms, 1.0)[None, :]
                largest = max(largest, float(norms.max()))
        if not np.isfinite(keys).all() or not np.isfinite(largest):
            keys = np.nan_to_num(keys, nan=-np.inf, neginf=-np.inf, posinf=-np.inf)  # damaged rows: re-ranked (refused)
        qn = q_norms[start:stop]
        scale = {"l2": np.square(qn + largest), "ip": qn * largest, "cosine": np.ones_like(qn)}[metric]
        margin = 2.0 * 2.0 * (P + 4) * 2.0 ** -24 * scale
        kth = np.partition(keys, kk - 1, axis=1)[:, kk - 1]
        chosen = keys <= (kth + margin)[:, None]
        counts = chosen.sum(axis=1)
        cand = np.full((stop - start, int(counts.max())), -1, dtype=np.int64)
        qi, col = np.nonzero(chosen)
        position = np.arange(qi.size) - np.repeat(np.cumsum(counts) - counts, counts)
        cand[qi, position] = rows[col]
        D[start:stop], I[start:stop] = _rerank.rerank(Qs, cand, fetch, metric, k)
    return D, I


class ExactIndex(StoredRows):
    """Stored vectors (with their ids), searched by brute force: exact results, no codes, no model to train.

    Parameters
    ----------
    vectors : ndarray of shape (N, P), dtype float16, float32 or uint8
        Used as given (read-only arrays and memory maps welcome), as an index's stored vectors.
    ids : ndarray of shape (N,), dtype int64, or None (0..N-1)
    metric : "l2", "ip" or "cosine"
        What searches rank by; "cosine" divides by the length of each stored vector (a zero vector cannot be stored
        by ockstore's writers, and is refused by a search that meets it).

    Made by a collection before it trains its quantizer (its segments hold these until the training commit), or by
    :func:`ockstore.open_index` from a file of kind "vectors". The methods and attributes that make sense without
    codes are those of :class:`ockstore.Index`: search, get, verify, info, ids, vectors, store_vectors, metric, dim,
    ntotal, close.
    """

    def __init__(self, vectors, ids, metric, *, _resource=None):
        if not isinstance(vectors, np.ndarray) or vectors.dtype not in set(STORED_VECTOR_DTYPES.values()) or \
                vectors.ndim != 2:
            raise TypeError("vectors must be a 2-D numpy array of dtype float16, float32 or uint8, got "
                            f"{getattr(vectors, 'dtype', type(vectors).__name__)}")
        self._vectors = vectors
        self._ids = None if ids is None else np.asarray(ids, dtype=np.int64)
        if self._ids is not None and self._ids.shape != (vectors.shape[0],):
            raise ValueError(f"ids must have shape ({vectors.shape[0]},), got {self._ids.shape}")
        self._metric = check_choice(metric, "metric", ("l2", "ip", "cosine"))
        self._screen = None  # (float32 copy or None, norms): built by the first search (see SCREEN_CACHE_BYTES)
        self._id_lookup = None
        self._resource = _resource
        self._file = None
        self._metadata = {}
        self._closed = False
        self._closed_path = None

    # ------------------------------------------------------------------------------------------------- lifecycle
    def _release_arrays(self):
        self._screen = None

    def __repr__(self):
        if self._closed:
            return "<ExactIndex closed>"
        return f"<ExactIndex N={self.ntotal} P={self.dim} metric={self._metric!r} store_vectors={self.store_vectors!r}>"

    # ------------------------------------------------------------------------------------------------ attributes
    def __len__(self):
        self._check_open()
        return int(self._vectors.shape[0])

    @property
    def dim(self) -> int:
        self._check_open()
        return int(self._vectors.shape[1])

    @property
    def metric(self) -> str:
        self._check_open()
        return self._metric

    @property
    def vectors(self):
        self._check_open()
        return self._vectors

    @property
    def store_vectors(self) -> str:
        self._check_open()
        # uint8, not sq8 (the same dtype): an ExactIndex has no model, hence no sq8 codes (EXACT_STORE_VECTORS)
        return {STORED_VECTOR_DTYPES[name]: name for name in EXACT_STORE_VECTORS}[self._vectors.dtype.newbyteorder("<")]

    def info(self) -> dict:
        """N, P, metric, store_vectors, bytes_per_vector (of the stored vectors) and, from a file, format_version,
        has_ids, metadata and path."""
        self._check_open()
        info = {"N": len(self), "P": self.dim, "metric": self._metric, "store_vectors": self.store_vectors,
                "bytes_per_vector": int(self._vectors.dtype.itemsize * self.dim)}
        if self._file is not None:
            major, minor = self._file.version
            info.update({"format_version": f"{major}.{minor}", "has_ids": self._ids is not None,
                         "metadata": storage.canonical_metadata(self._metadata), "path": self._file.path})
        return info

    def _screen_arrays(self):
        """(float32 copy of the vectors or None, their norms), built on first use: the copy when it fits in
        SCREEN_CACHE_BYTES and the stored dtype is not float32 already (a float32 section is read in place)."""
        screen = self._screen
        if screen is None:
            V = self._vectors
            small = V.shape[0] * V.shape[1] * 4 <= SCREEN_CACHE_BYTES
            copy = None
            norms = np.empty(V.shape[0], dtype=np.float64)
            if V.dtype != np.float32 and small:
                with np.errstate(over="ignore", invalid="ignore"):
                    copy = np.ascontiguousarray(V, dtype=np.float32)
            for start in range(0, V.shape[0], ROWS_PER_BLOCK):
                block = (copy if copy is not None else V)[start:start + ROWS_PER_BLOCK]
                with np.errstate(over="ignore", invalid="ignore"):
                    norms[start:start + block.shape[0]] = row_norms(np.ascontiguousarray(block, dtype=np.float32))
            screen = self._screen = (copy if copy is not None else (V if V.dtype == np.float32 else None), norms)
        return screen

    # ------------------------------------------------------------------------------------------------------ reads
    def _copy_rows(self, writer, start, stop, keep=None):
        """Append rows start..stop-1 (those ``keep`` selects; all when None) to ``writer`` (a VectorsWriter) as they
        are stored: the merges of a collection's segments before it trains its quantizer. Returns the ids appended."""
        select = slice(None) if keep is None else keep
        ids = np.ascontiguousarray(self.ids[start:stop][select])
        writer._append(np.ascontiguousarray(self._vectors[start:stop][select]), ids)
        return ids

    def verify(self):
        """The file's CRCs (from a file), every stored float value finite, every id >= 0; None or FormatError."""
        self._check_open()
        if self._file is not None:
            self._file.verify()
        V = self._vectors
        if V.dtype.kind == "f":
            step = max(1, (1 << 20) // max(1, V.shape[1]))
            for start in range(0, V.shape[0], step):
                finite = np.isfinite(V[start:start + step]).all(axis=1)
                if not finite.all():
                    raise self._damaged("non-finite values", f"section 'vectors': row {start + int(np.argmin(finite))} "
                                                             "holds NaN or infinite values")
        if self._ids is not None and self._ids.size and int(self._ids.min()) < 0:
            row = int(np.argmax(self._ids < 0))
            raise self._damaged("negative id", f"section 'ids': row {row} holds {int(self._ids[row])}, ids must be >= 0")

    def search(self, Q, k, *, distance="adc", rerank=None, vectors=None, allow=None, n_threads=None, n_probe=None,
               metric=None):
        """The k nearest stored vectors of each query, exactly (module docstring).

        Q, k, allow, n_threads, metric as for :meth:`ockstore.Index.search`. There are no codes, so every result is
        exact: ``distance`` ("adc" or "sdc"), ``rerank`` and ``n_probe`` are checked as an index checks them and
        change nothing; ``vectors`` (other vectors to re-rank from) is refused.
        """
        self._check_open()
        _search_options.check_metric(metric, self._metric)
        N = len(self)
        k = check_k(k, N)
        check_choice(distance, "distance", ("adc", "sdc"))
        _search_options.check_rerank(rerank, k, N)
        if vectors is not None:
            raise ValueError("vectors: this index searches its stored vectors exactly; it takes no other vectors")
        if n_probe is not None:
            raise ValueError("n_probe applies to inverted-file (IVF) indexes only: this index is flat and scans "
                             "every vector; leave n_probe out")
        Q, was_1d = as_vectors(Q, "Q", self.dim)
        if self._metric == "cosine":
            Q = normalize_rows(Q, "Q")
        mask = None
        if allow is not None:
            mask = _search_options.allow_bitmap(allow, N, self._ids, self._ids_lookup)
            if mask.all():
                mask = None
        D, I = self._exact_results(Q, k, mask, n_threads)
        return (D[0], I[0]) if was_1d else (D, I)

    def _exact_results(self, Q, k, mask, n_threads):
        """(D, ids) of the k best rows (those of the bool ``mask``, or all) of prepared queries, by exact values
        (``screened_search``; a collection's untrained segments are searched so, as parts of one search)."""
        return screened_search(Q, k, self._vectors, self._ids, self._metric, allow=mask, n_threads=n_threads,
                               source=self._damaged, screen=self._screen_arrays())
