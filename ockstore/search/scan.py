"""Query tables and the exhaustive ADC / SDC k-nearest-neighbour scan over compact codes.

A fitted quantizer approximates a base vector as x_hat = R z_hat, where z_hat (the rotated, zero-padded
reconstruction, M*S dims) is the sum over subspaces m and codebooks c of the words d[m, c, b_mc] (docs/ARCHITECTURE.md, "The method").
R is orthogonal, so for a query q with z = R^T q (computed as z = q @ rot_pad):

    ||q - x_hat||^2 = ||z||^2 - 2 sum_m sum_c z_m . d[m, c, b_mc] + ||z_hat||^2

* C >= 2 (ECKM, OCKM): the table of a query is lut[(m*C + c)*K + k] = -2 z_m . d[m, c, k], its constant term is
  qconst = ||z||^2 and the norm term n_b = ||z_hat||^2 is stored with each code (float32, or one byte through the
  quantizer's 256 ``norm_levels``: then distances use the quantized norm term and are approximations of the float32
  ones).
* C = 1 (PQ, CKM): the classic table lut[m*K + k] = ||z_m||^2 - 2 z_m . d[m, k] + ||d[m, k]||^2 = ||z_m - d[m, k]||^2
  holds everything; qconst = 0 and there is no norm term.
* metric "ip" and "cosine": the score q . x_hat = sum_m sum_c z_m . d[m, c, b_mc] needs no norm term; the tables hold
  -z_m . d[m, c, k] so that the scan, which keeps the smallest sums, keeps the largest scores, and the caller negates
  the sums back into scores. For cosine the queries and the base were normalised to unit length first.

The scan (``_kernels.scan``) computes the tables of each query (``kernels/tables.h``), adds qconst + n_b + the W = M*C
table entries of each code and keeps the k best (distance, row) pairs of each query, a smaller id winning a tie; rows
map to ids (and to stored vectors, for re-ranking) afterwards. A row bitmap restricts the scan to allowed rows, tested
before any table lookup. SDC (symmetric distance) encodes the queries, and uses their reconstructions z_hat_q in place
of z: the distance is then ||x_hat_q - x_hat||^2 (with the stored norm term of the base code); for "ip" and "cosine"
the score is x_hat_q . x_hat.

Determinism: a query's tables are computed in float64, every sum in a fixed order (``kernels/tables.h``), and rounded once
to float32, by the same code whichever thread computes them; the scan adds in a fixed order, so a query gets
bit-identical results whether it is searched alone or in a batch, and whatever ``n_threads``. Distances are float32
sums of float32 table entries: they are squared L2 distances up to rounding, and may be slightly negative when a query
(nearly) coincides with a reconstruction.

Robustness to corrupt codes: each byte's table has 256 slots whatever K is; slots K..255 hold +inf, so a code byte
>= K (possible only in a corrupt file, which ``verify`` reports) makes that vector's distance +inf and it is never
returned, instead of reading outside the table.

Codes in the fast-scan layout (K <= 16: ``codes.CodeBlocks``) are scanned by ``_kernels.fastscan_scan``, with the same
arguments and the same results (docs/ARCHITECTURE.md, "Fast scan"); each code store gives the scan of its layout
(``scanner``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _kernels
from . import rerank as _rerank
from .._validation import resolve_n_threads

__all__ = ["QueryTables", "CodeRows", "search_codes", "rows_bitmap", "panels", "LUT_SLOTS",
           "TABLE_L2_NORM_TERM", "TABLE_L2_WHOLE", "TABLE_NEG_DOT"]

# Table slots per code byte, whatever K is: a byte can only index 0..255, so the scan never reads past a table.
LUT_SLOTS = _kernels.TABLE_SLOTS

# Queries whose SDC reconstructions are computed per call of the scan: bounds the (queries x M*S) float64 vectors of
# a batch. ADC needs none: the kernel computes each group's tables in its own bounded scratch.
SDC_QUERIES_PER_STEP = 4096

# Byte alignment of the model arrays the table kernel reads (in vectors of 32 and 64 bytes). numpy aligns data to 16
# bytes only, and a vector load straddling two cache lines costs a second access.
MODEL_ALIGN = 64


def panels(matrix, width=_kernels.TABLE_PANEL):
    """The (R, n) matrix in the table kernel's panel layout, as a 1-D float32 array aligned to MODEL_ALIGN bytes:
    columns i0..i0+w-1 (w = width, or what is left for the last panel) as R rows of w values, panel after panel
    (kernels/tables.h, ock_vecmat). Each panel is then one sequential read."""
    matrix = np.asarray(matrix, dtype=np.float32)
    n = matrix.shape[1]
    flat = np.concatenate([matrix[:, i0:i0 + width].ravel() for i0 in range(0, n, width)]) if n else matrix.ravel()
    buf = np.empty(flat.nbytes + MODEL_ALIGN, dtype=np.uint8)
    start = -buf.ctypes.data % MODEL_ALIGN
    out = buf[start:start + flat.nbytes].view(np.float32)
    out[...] = flat
    return out


# The kinds of table (kernels/tables.h): what each code byte's table entry holds.
TABLE_L2_NORM_TERM = _kernels.TABLE_L2_NORM_TERM  # -2 z_m.d: L2 with C >= 2; qconst = ||z||^2, the stored norm
#                                                  term completes the distance
TABLE_L2_WHOLE = _kernels.TABLE_L2_WHOLE  # ||z_m - d||^2: L2 with C = 1, the whole distance
TABLE_NEG_DOT = _kernels.TABLE_NEG_DOT    # -z_m.d: inner product and cosine (scores are the negated sums; cosine
#                                          divides them by ||x_hat|| with a norm term: CodeRows.norm_scales)


class QueryTables:
    """The arrays of a fitted quantizer that query tables are built from (prepared once per index).

    Parameters
    ----------
    quantizer : fitted Quantizer
        Its ``_tables`` (``rot_pad`` (P, M*S), ``words_t`` (M, S, C*K), ``words`` (M, C, K, S)) and its ``metric``
        are read once; the quantizer must not be refitted while these tables are in use.
    kind : TABLE_L2_NORM_TERM, TABLE_L2_WHOLE, TABLE_NEG_DOT or None
        None: the kind the quantizer's metric and C call for. An inverted file asks for TABLE_L2_NORM_TERM with
        metric "l2" whatever C is: its stored norm term (of the whole reconstruction) completes every distance.

    ``model`` holds the rotation and the words in float32 as the model holds them (the table kernel widens each value
    to float64, kernels/tables.h), in panels; ``words`` in float64 serves SDC's reconstructions of the queries.
    No input validation in this class: callers pass fitted quantizers and checked queries.
    """

    def __init__(self, quantizer, kind=None):
        tables = quantizer._tables
        M, C, K, S = tables.words.shape
        self.n_subspaces, self.n_codebooks, self.n_codewords, self.sub_dim = M, C, K, S
        self.code_size = M * C
        self.quantizer = quantizer
        self.metric = quantizer.metric
        self.words = np.ascontiguousarray(tables.words, dtype=np.float64)              # (M, C, K, S)
        # ||d[m, k]||^2 in float64, for the classic C = 1 table.
        self.word_sqnorms = np.einsum("mcks,mcks->mck", self.words, self.words).reshape(M, C * K)
        if kind is not None:
            self.kind = kind
        elif self.metric != "l2":
            self.kind = TABLE_NEG_DOT
        else:
            self.kind = TABLE_L2_WHOLE if C == 1 else TABLE_L2_NORM_TERM
        # The arrays of the table kernel (also read by the inverted file's kernel, which computes its tables itself).
        self.rot_panels = panels(tables.rot_pad)                                                   # (P * M*S,)
        self.word_panels = np.stack([panels(w) for w in np.asarray(tables.words_t, dtype=np.float32)])  # (M, S*C*K)
        self.model = _kernels.TableModel(self.rot_panels, self.word_panels, self.word_sqnorms, C, S, self.kind)

    @property
    def uses_norm_term(self) -> bool:
        """True when distances add the stored norm term ||x_hat||^2 of each code (L2 with C >= 2)."""
        return self.kind == TABLE_L2_NORM_TERM

    @property
    def uses_norm_scale(self) -> bool:
        """True when scores are divided by ||x_hat|| (metric "cosine", from the stored norm term when there is one:
        docs/FORMAT.md 11.3, I20): the scan multiplies each code's sum by 1 / ||x_hat||."""
        return self.metric == "cosine"

    def sdc_rotated(self, Q, n_threads):
        """The (nq, M*S) float64 reconstructions z_hat_q of the queries' own codes, sum_c d[m, c, b_mc] per subspace,
        in the decoder's order. Q : (nq, P) float32, C-contiguous, finite (normalised for cosine)."""
        nq = Q.shape[0]
        codes = self.quantizer._encode_prepared(Q, n_threads)  # (nq, M*C) uint8
        M, C = self.n_subspaces, self.n_codebooks
        b = codes.reshape(nq, M, C).astype(np.intp)
        picked = self.words[np.arange(M)[None, :, None], np.arange(C)[None, None, :], b]  # (nq, M, C, S)
        z = picked[:, :, 0]
        for c in range(1, C):  # the decoder's order: d[m, 0] + d[m, 1] + ...
            z = z + picked[:, :, c]
        z = z.reshape(nq, M * self.sub_dim)
        if self.metric == "cosine":  # the query's reconstruction at unit length: scores estimate cosines
            lengths = np.sqrt(np.einsum("ij,ij->i", z, z))
            z = z / np.where(lengths > 0, lengths, 1.0)[:, None]
        return np.ascontiguousarray(z)


@dataclass(frozen=True)
class CodeRows:
    """The rows of an index as a scan reads them (an index, or one segment of a collection). Arrays may be read-only
    (views of a read-only memory map): a scan only reads them, never copies them.

    codes : search.codes.ByteCodes, or search.codes.CodeBlocks (K <= 16) of one run
    ids : ndarray of shape (N,), dtype int64, C-contiguous, or None
        The id of each row, which breaks ties; None: the row number.
    norms : ndarray of shape (N,), dtype float32, or None
        The float32 norm term ||x_hat||^2 of each code (L2 with C >= 2).
    norm_codes : ndarray of shape (N,), dtype uint8, or None
        The one-byte norm term of each code, decoded through ``norm_levels``. At most one of norms / norm_codes, and
        only when the tables use the norm term (``QueryTables.uses_norm_term``) or scale by it (``norm_scales``).
    norm_levels : ndarray of shape (256,), dtype float32, or None (with norm_codes only)
    allow : ndarray of shape (ceil(N / 64),), dtype uint64, or None
        Bitmap of the rows to scan (``rows_bitmap``); None scans every row.
    norm_scales : bool
        The norms (or the levels of norm_codes) are scales 1 / ||x_hat|| that multiply each code's sum (metric
        "cosine", ``QueryTables.uses_norm_scale``) instead of norm terms added to it.
    scale_range : ndarray of shape (2,), dtype float64, or None
        With norm_scales and float32 scales: their smallest and largest value, found once per index, so that a fast
        scan (``_kernels.fastscan_scan``: its threshold) need not read the N scales per call; None: found by the kernel
        (256 levels for norm codes).
    """

    codes: object
    ids: np.ndarray | None
    norms: np.ndarray | None
    norm_codes: np.ndarray | None
    norm_levels: np.ndarray | None
    allow: np.ndarray | None
    norm_scales: bool = False
    scale_range: np.ndarray | None = None


def search_codes(tables, Q, k, rows, *, distance="adc", n_threads=1, rerank=None, by_bound=False):
    """The k best codes of each query by ADC or SDC, scanning the codes exhaustively (no input validation).

    Parameters
    ----------
    tables : QueryTables
    Q : ndarray of shape (nq, P), dtype float32, C-contiguous, finite (unit rows for cosine)
    k : int >= 1
    rows : CodeRows
    distance : "adc" or "sdc"
    n_threads : int >= 1, or None (every core, resolved only when the scan is large enough to use them)
    rerank : (StoredVectors, R) or None
        Re-rank inside the scan: keep R >= k candidates per query and return the k best of them by exact value,
        read from the StoredVectors (``_rerank``; part 0 holds these rows' vectors, the queries being ``Q``).
    by_bound : bool
        Fast-scan blocks only: rank the rows by their quantized lower bounds alone, no exact stage (the candidates of
        a re-ranked search; docs/ARCHITECTURE.md, "Fast scan"). D then holds those bounds.

    Returns
    -------
    D : ndarray of shape (nq, k), dtype float32
        Ascending: squared L2 distances, or minus the scores for ip and cosine; +inf past the last result. With
        ``rerank``: the exact values (distances ascending, scores descending; padding +inf or -inf).
    rows : ndarray of shape (nq, k), dtype int64
        The row numbers of the results; -1 past the last result. Equal values are ordered by id.
    """
    codes, ids, norms, norm_codes, allow = rows.codes, rows.ids, rows.norms, rows.norm_codes, rows.allow
    norm_levels = rows.norm_levels if norm_codes is not None else None
    nq = Q.shape[0]
    N = codes.shape[0]
    kk = min(k, N)
    if kk == k and nq > 0:  # the kernel writes every entry
        D = np.empty((nq, k), dtype=np.float32)
        found = np.empty((nq, k), dtype=np.int64)
    else:
        pad = np.inf if rerank is None or tables.metric == "l2" else -np.inf
        D = np.full((nq, k), pad, dtype=np.float32)
        found = np.full((nq, k), -1, dtype=np.int64)
    if nq == 0 or kk == 0:
        return D, found
    if n_threads is None:
        n_threads = resolve_n_threads(None)  # the kernel uses fewer for small work (its small-work rule)
    out_d, out_r = (D, found) if kk == k else (D[:, :kk].copy(), found[:, :kk].copy())
    if rerank is not None and not codes.reranks_in_scan:  # 4-bit codes: the fast scan, then compiled re-ranking
        return _search_blocks_reranked(tables, Q, k, rows, distance, n_threads, rerank)
    stored, width = (None, 0) if rerank is None else (rerank[0], min(rerank[1], N))
    flags = None if stored is None else np.empty(nq, dtype=np.int32)
    scan = codes.scanner(None, rows.norm_scales, rows.scale_range, by_bound)
    # re-ranking inside the byte-code scan: _kernels.scan's keywords (SDC re-ranks the queries, not their codes)
    reranking = {} if stored is None else {"rerank_rows": stored.source, "rerank": width, "out_flags": flags}
    if distance == "adc":
        scan(tables.model, Q, None, norms, norm_codes, norm_levels, ids, allow, out_d, out_r, n_threads, **reranking)
    else:
        for start in range(0, nq, SDC_QUERIES_PER_STEP):
            stop = min(nq, start + SDC_QUERIES_PER_STEP)
            if stored is not None:
                reranking.update(rerank_queries=Q[start:stop], out_flags=flags[start:stop])
            scan(tables.model, None, tables.sdc_rotated(Q[start:stop], n_threads), norms, norm_codes, norm_levels,
                 ids, allow, out_d[start:stop], out_r[start:stop], n_threads, **reranking)
    if flags is not None and flags.any():  # a bad stored row among some query's candidates: name it
        bad = flags != 0
        _, candidates = search_codes(tables, Q[bad], width, rows, distance=distance, n_threads=n_threads)
        stored.raise_bad(candidates)
    if kk != k:
        D[:, :kk] = out_d
        found[:, :kk] = out_r
    return D, found


def _search_blocks_reranked(tables, Q, k, rows, distance, n_threads, rerank):
    """``search_codes`` with ``rerank`` for codes in fast-scan blocks (K <= 16): the fast scan keeps the R rows of
    each query with the smallest quantized bounds (``by_bound``: no exact ADC stage), then the compiled re-ranking loop
    (``_rerank.rerank_candidates``) keeps the k best of them by exact value. The fast-scan kernels take no stored
    rows, so the candidates leave the kernel, RERANK_STEP_BYTES of rows at a time (no per-candidate Python)."""
    stored, R = rerank
    width = min(R, rows.codes.shape[0])
    nq = Q.shape[0]
    D = np.empty((nq, k), dtype=np.float32)
    found = np.empty((nq, k), dtype=np.int64)
    step = max(1, _rerank.RERANK_STEP_BYTES // (8 * width))
    for start in range(0, nq, step):
        stop = min(nq, start + step)
        _, candidates = search_codes(tables, Q[start:stop], width, rows, distance=distance, n_threads=n_threads,
                                     by_bound=True)
        D[start:stop], found[start:stop] = _rerank.rerank_candidates(Q[start:stop], candidates, stored, k,
                                                                      n_threads)
    return D, found


def rows_bitmap(mask):
    """The scan's bitmap of a boolean mask over rows: bit r % 64 of word r // 64 is mask[r]; bits past N are 0."""
    bits = np.packbits(np.asarray(mask, dtype=bool), bitorder="little")
    padded = np.zeros(-(-bits.size // 8) * 8, dtype=np.uint8)
    padded[:bits.size] = bits
    return padded.view("<u8").astype(np.uint64, copy=False)
