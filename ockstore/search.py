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

The scan (``_search_kernels.adc_scan``) adds qconst + n_b + the W = M*C table entries of each code and keeps the k best
(distance, row) pairs of each query, a smaller id winning a tie; rows map to ids (and to stored vectors, for
re-ranking) afterwards. A row bitmap restricts the scan to allowed rows, tested before any table lookup. SDC (symmetric distance) encodes the queries, and
uses their reconstructions z_hat_q in place of z: the distance is then ||x_hat_q - x_hat||^2 (with the stored norm
term of the base code).

Determinism: a query's tables are computed in float64 one query at a time, every sum in a fixed order
(``_tables.h``), and rounded once to float32; the scan adds in a fixed order, so a query gets bit-identical results whether it is searched alone or in
a batch, and whatever ``n_threads``. Distances are float32 sums of float32 table entries: they are squared L2
distances up to rounding, and may be slightly negative when a query (nearly) coincides with a reconstruction.

Robustness to corrupt codes: each byte's table has 256 slots whatever K is; slots K..255 hold +inf, so a code byte
>= K (possible only in a corrupt file, which ``verify`` reports) makes that vector's distance +inf and it is never
returned, instead of reading outside the table.
"""

from __future__ import annotations

import numpy as np

from . import _search_kernels

__all__ = ["QueryTables", "search_codes", "rows_bitmap", "LUT_BYTES", "LUT_SLOTS", "TABLE_L2_NORM_TERM",
           "TABLE_L2_WHOLE", "TABLE_NEG_DOT"]

# Table slots per code byte, whatever K is: a byte can only index 0..255, so the scan never reads past a table.
LUT_SLOTS = 256

# Bytes of query tables computed and scanned at once (W * LUT_SLOTS * 4 bytes per query: 8 KiB for 64-bit codes).
# Bounds the table memory of a search whatever the number of queries (the float64 intermediates of a batch take up to
# four times as much, briefly), and is large enough that the kernel's groups of queries keep every thread busy.
LUT_BYTES = 8 << 20

# Below this many (query, code) pairs a search runs on one thread: the scan takes well under a millisecond, less
# than starting a parallel region costs on a busy machine.
SMALL_SCAN_CODES = 1 << 17


# The kinds of table (_tables.h): what each code byte's table entry holds.
TABLE_L2_NORM_TERM = 0  # -2 z_m.d: L2 with C >= 2; qconst = ||z||^2, the stored norm term completes the distance
TABLE_L2_WHOLE = 1      # ||z_m - d||^2: L2 with C = 1, the whole distance
TABLE_NEG_DOT = 2       # -z_m.d: inner product and cosine (scores are the negated sums; no norm term)


class QueryTables:
    """The arrays of a fitted quantizer that query tables are built from, in float64 (computed once per index).

    Parameters
    ----------
    quantizer : fitted Quantizer
        Its ``_tables`` (``rot_pad`` (P, M*S), ``words_t`` (M, S, C*K), ``words`` (M, C, K, S)) and its ``metric``
        are read once; the quantizer must not be refitted while these tables are in use.
    kind : TABLE_L2_NORM_TERM, TABLE_L2_WHOLE, TABLE_NEG_DOT or None
        None: the kind the quantizer's metric and C call for. An inverted file asks for TABLE_L2_NORM_TERM with
        metric "l2" whatever C is: its stored norm term (of the whole reconstruction) completes every distance.

    No input validation in this class: callers pass fitted quantizers and checked queries.
    """

    def __init__(self, quantizer, kind=None):
        tables = quantizer._tables
        M, C, K, S = tables.words.shape
        self.n_subspaces, self.n_codebooks, self.n_codewords, self.sub_dim = M, C, K, S
        self.code_size = M * C
        self.quantizer = quantizer
        self.metric = quantizer.metric
        # float32 as the model holds them: the table kernel widens each value to float64 (_tables.h).
        self.rot_pad = np.ascontiguousarray(tables.rot_pad, dtype=np.float32)          # (P, M*S)
        self.words_t = np.ascontiguousarray(tables.words_t, dtype=np.float32)          # (M, S, C*K)
        self.words = np.ascontiguousarray(tables.words, dtype=np.float64)              # (M, C, K, S)
        # ||d[m, k]||^2 in float64, for the classic C = 1 table.
        self.word_sqnorms = np.einsum("mcks,mcks->mck", self.words, self.words).reshape(M, C * K)
        if kind is not None:
            self.kind = kind
        elif self.metric != "l2":
            self.kind = TABLE_NEG_DOT
        else:
            self.kind = TABLE_L2_WHOLE if C == 1 else TABLE_L2_NORM_TERM
        self._no_rotated = np.empty((0, 0), dtype=np.float64)
        self._no_queries = np.empty((0, 0), dtype=np.float32)

    @property
    def uses_norm_term(self) -> bool:
        """True when distances add the stored norm term ||x_hat||^2 of each code (L2 with C >= 2)."""
        return self.kind == TABLE_L2_NORM_TERM

    @property
    def queries_per_batch(self) -> int:
        """Queries whose tables fit in LUT_BYTES (at least one)."""
        return max(1, LUT_BYTES // (self.code_size * LUT_SLOTS * 4))

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
        return np.ascontiguousarray(z.reshape(nq, M * self.sub_dim))

    def compute(self, Q, distance="adc", n_threads=1):
        """Tables and constant terms of a batch of queries.

        Parameters
        ----------
        Q : ndarray of shape (nq, P), dtype float32, C-contiguous, finite, unit rows for cosine (no validation here)
        distance : "adc" or "sdc"
        n_threads : int >= 1 (used by the SDC encoder)

        Returns
        -------
        luts : ndarray of shape (nq, M*C*LUT_SLOTS), dtype float32
            ``luts[q, w*LUT_SLOTS + k]`` for code byte w = m*C + c and word k < K; +inf for k >= K.
        qconst : ndarray of shape (nq,), dtype float32
        """
        nq = Q.shape[0]
        luts = np.empty((nq, self.code_size * LUT_SLOTS), dtype=np.float32)
        qconst = np.empty(nq, dtype=np.float32)
        if distance == "sdc":
            rotated, queries = self.sdc_rotated(Q, n_threads), self._no_queries
        else:
            rotated, queries = self._no_rotated, Q
        _search_kernels.make_tables(queries, rotated, self.rot_pad, self.words_t, self.word_sqnorms,
                                    self.n_codebooks, self.kind, luts, qconst)
        return luts, qconst


_EMPTY_F32 = np.empty(0, dtype=np.float32)
_EMPTY_U8 = np.empty(0, dtype=np.uint8)
_EMPTY_I64 = np.empty(0, dtype=np.int64)


_EMPTY_U64 = np.empty(0, dtype=np.uint64)


def search_codes(tables, Q, k, codes, ids, *, distance="adc", norms=None, norm_codes=None, norm_levels=None,
                 allow=None, n_threads=1):
    """The k best codes of each query by ADC or SDC, scanning the codes exhaustively (no input validation).

    Parameters
    ----------
    tables : QueryTables
    Q : ndarray of shape (nq, P), dtype float32, C-contiguous, finite (unit rows for cosine)
    k : int >= 1
    codes : ndarray of shape (N, M*C), dtype uint8, C-contiguous
        May be read-only (e.g. a view of a read-only memory map): it is only read, never copied.
    ids : ndarray of shape (N,), dtype int64, C-contiguous, or None
        The id of each code, which breaks ties (read-only arrays welcome); None: the row number.
    distance : "adc" or "sdc"
    norms : ndarray of shape (N,), dtype float32, or None
        The float32 norm term ||x_hat||^2 of each code (L2 with C >= 2).
    norm_codes : ndarray of shape (N,), dtype uint8, or None
        The one-byte norm term of each code, decoded through ``norm_levels`` (256,) float32.
        At most one of norms / norm_codes, and only when ``tables.uses_norm_term``.
    allow : ndarray of shape (ceil(N / 64),), dtype uint64, or None
        Bitmap of the rows to scan (``rows_bitmap``); None scans every row.
    n_threads : int >= 1

    Returns
    -------
    D : ndarray of shape (nq, k), dtype float32
        Ascending: squared L2 distances, or minus the scores for ip and cosine; +inf past the last result.
    rows : ndarray of shape (nq, k), dtype int64
        The row numbers of the results; -1 past the last result. Equal values are ordered by id.
    """
    nq = Q.shape[0]
    N = codes.shape[0]
    kk = min(k, N)
    if kk == k and nq > 0:  # the kernel writes every entry
        D = np.empty((nq, k), dtype=np.float32)
        rows = np.empty((nq, k), dtype=np.int64)
    else:
        D = np.full((nq, k), np.inf, dtype=np.float32)
        rows = np.full((nq, k), -1, dtype=np.int64)
    if nq == 0 or kk == 0:
        return D, rows
    if nq * N < SMALL_SCAN_CODES:
        n_threads = 1  # waking other threads costs more than scanning this few codes (results are the same)
    nf = norms if norms is not None else _EMPTY_F32
    nc = norm_codes if norm_codes is not None else _EMPTY_U8
    nl = norm_levels if norm_codes is not None else _EMPTY_F32
    step = tables.queries_per_batch
    for start in range(0, nq, step):
        stop = min(nq, start + step)
        luts, qconst = tables.compute(Q if stop - start == nq else Q[start:stop], distance, n_threads)
        if kk == k:
            out_d, out_r = D[start:stop], rows[start:stop]  # C-contiguous row slices: the kernel writes in place
        else:
            out_d = np.empty((stop - start, kk), dtype=np.float32)
            out_r = np.empty((stop - start, kk), dtype=np.int64)
        _search_kernels.adc_scan(codes, luts, qconst, nf, nc, nl, ids if ids is not None else _EMPTY_I64,
                                 allow if allow is not None else _EMPTY_U64, LUT_SLOTS, out_d, out_r, n_threads)
        if kk != k:
            D[start:stop, :kk] = out_d
            rows[start:stop, :kk] = out_r
    return D, rows


def rows_bitmap(mask):
    """The scan's bitmap of a boolean mask over rows: bit r % 64 of word r // 64 is mask[r]; bits past N are 0."""
    bits = np.packbits(np.asarray(mask, dtype=bool), bitorder="little")
    padded = np.zeros(-(-bits.size // 8) * 8, dtype=np.uint8)
    padded[:bits.size] = bits
    return padded.view("<u8").astype(np.uint64, copy=False)
