"""The code stores: how an index holds its codes, chosen when the index is made or opened (docs/ARCHITECTURE.md,
"Search", *Code layouts*). Two layouts, one interface:

* ``ByteCodes``: one byte per word, (N, W) uint8 (models with more than 16 words per codebook, and files written
  before format 1.3).
* ``CodeBlocks``: 4-bit words, two per byte, in blocks of 32 rows whose nibbles are interleaved so that one SIMD load
  feeds one table shuffle (models with at most 16 words per codebook; docs/FORMAT.md, "Fast-scan files";
  docs/ARCHITECTURE.md, "Fast scan"). Rows are stored in runs, each in whole blocks: one run for a flat index, one per
  list for an inverted file (each list padded to a whole block).

Both answer what indexes and searches ask of codes: their shape and bits, rows as one-byte words (``[start:stop]``,
for copying them), their check, the exhaustive scan kernel of their layout (``scanner``), one part of a search of
lists (``part_rows``), and how a scan of them ranks candidates for re-ranking (``ranks_by_bound``). Nothing outside
this module asks which layout it holds. Encoding stays one byte per word (``Quantizer.encode``); the indexes and the
file writers pack.
"""

from __future__ import annotations

import numpy as np

from .. import _kernels

__all__ = ["FASTSCAN_MAX_WORDS", "BLOCK_ROWS", "ByteCodes", "CodeBlocks", "code_store", "uses_blocks", "block_bytes",
           "blocks_of_runs", "pack_rows"]

# Models whose codebooks have at most this many words store their codes in the fast-scan layout.
FASTSCAN_MAX_WORDS = 16

# Rows per block (the layout's, docs/FORMAT.md).
BLOCK_ROWS = _kernels.FASTSCAN_BLOCK


def uses_blocks(n_codewords) -> bool:
    """True when codes of ``n_codewords`` words per codebook (a model's ``n_codewords``; an IVF's is its fine
    quantizer's) are stored in fast-scan blocks."""
    return n_codewords <= FASTSCAN_MAX_WORDS


def block_bytes(n_words) -> int:
    """Bytes of one block of 32 rows of ``n_words`` words (16 per column, columns rounded up to even)."""
    return int(_kernels.fastscan_block_bytes(n_words))


def blocks_of_runs(run_offsets):
    """(R + 1,) int64: the first block of each run of rows run_offsets[r] .. run_offsets[r + 1] - 1, each padded to
    whole blocks (the last entry: the blocks of all the runs)."""
    sizes = np.diff(np.asarray(run_offsets, dtype=np.int64))
    out = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(-(-sizes // BLOCK_ROWS), out=out[1:])
    return out


def pack_rows(codes):
    """(ceil(n / 32), block bytes) uint8: rows of one-byte words (each < 16) packed into blocks, padding zero."""
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    blocks = np.zeros((-(-codes.shape[0] // BLOCK_ROWS), block_bytes(codes.shape[1])), dtype=np.uint8)
    _kernels.fastscan_pack(codes, blocks)
    return blocks


def code_store(codes):
    """``codes`` as a code store: a ByteCodes or CodeBlocks as it is, or None for anything else (an array the caller
    still has to check)."""
    return codes if isinstance(codes, (ByteCodes, CodeBlocks)) else None


# Rows of byte codes checked per step by ByteCodes.check: bounds its temporaries whatever N is.
_CHECK_ROWS = 1 << 20


class ByteCodes:
    """Codes of one byte per word: an (N, W) uint8 array, C-contiguous (read-only views of a file welcome; never
    written). No input validation: the indexes check the array first."""

    bits = 8
    ranks_by_bound = False  # a scan's candidates are ranked by their exact ADC distances
    reranks_in_scan = True  # the exhaustive scan re-ranks its candidates itself (kernels/flat.pxi)

    def __init__(self, array):
        self.array = array

    @property
    def shape(self):
        return self.array.shape

    @property
    def n_words(self):
        return int(self.array.shape[1])

    def __len__(self):
        return int(self.array.shape[0])

    def __getitem__(self, rows):
        """Rows ``start:stop`` as one-byte words: a view."""
        return self.array[rows]

    def unpack(self, start=0, stop=None):
        """Rows start..stop-1 as one-byte words, (stop - start, W) uint8: the array itself (all rows) or a view of
        it, no copy."""
        if start == 0 and (stop is None or stop == self.array.shape[0]):
            return self.array
        return self.array[start:stop]

    def runs_are(self, offsets):
        """Whether rows can be read in these runs (byte codes: any)."""
        return True

    def check(self, n_codewords):
        """None, or (check, detail) of the first byte >= n_codewords (verify's FormatError)."""
        codes = self.array
        for start in range(0, codes.shape[0], _CHECK_ROWS):
            block = codes[start:start + _CHECK_ROWS]
            if block.size and int(block.max()) >= n_codewords:
                row, byte = np.unravel_index(int(np.argmax(block >= n_codewords)), block.shape)
                return ("code out of range", f"section 'codes': row {start + row}, byte {byte} holds "
                        f"{int(block[row, byte])}, codes must be < K = {n_codewords}")
        return None

    def scanner(self, bound=None, norm_scales=False, scale_range=None, by_bound=False):
        """The exhaustive scan of these codes (search.scan.scanner's contract), with the re-ranking keywords of
        ``_kernels.scan``."""
        codes = self.array

        def scan(model, queries, rotated, *rest, **rerank):
            _kernels.scan(model, queries, rotated, codes, *rest, bound=bound, norm_scales=norm_scales, **rerank)
        return scan

    def part_rows(self, rows, list_offsets, allow):
        """These rows as one part of a search of lists (``_kernels.IvfPartRows``): ``rows`` a search.scan.CodeRows
        of them (norm terms, ids), ``list_offsets`` their lists, ``allow`` the rows scanned by default."""
        return _kernels.IvfPartRows(self.array, rows.norms, rows.norm_codes,
                                    rows.norm_levels if rows.norm_codes is not None else None, rows.ids, list_offsets,
                                    rows.norm_scales, allow=allow)


class CodeBlocks:
    """The codes of N rows in fast-scan blocks (no input validation: the readers and indexes check the shapes).

    Parameters
    ----------
    blocks : ndarray of shape (B, block_bytes(W)), dtype uint8
        The blocks, run after run (read-only views of a file welcome; never written).
    n_words : int
        W = M*C, the words of a code.
    run_offsets : ndarray of shape (R + 1,), dtype int64, or None
        Run r holds rows run_offsets[r] .. run_offsets[r + 1] - 1 (an inverted file's list offsets); None: one run
        of every row (then ``n_rows`` gives N).
    n_rows : int
        N, with ``run_offsets`` None.
    """

    bits = 4
    ranks_by_bound = True  # a re-ranked search's candidates are ranked by their quantized bounds (no exact ADC)
    reranks_in_scan = False  # the exhaustive fast scan hands its candidates to the re-ranking loop (search.scan)

    def __init__(self, blocks, n_words, run_offsets=None, n_rows=None):
        self.blocks = blocks
        self.n_words = int(n_words)
        if run_offsets is None:
            run_offsets = np.array([0, n_rows], dtype=np.int64)
        self.run_offsets = np.ascontiguousarray(run_offsets, dtype=np.int64)
        self.run_blocks = blocks_of_runs(self.run_offsets)

    @classmethod
    def from_codes(cls, codes, run_offsets=None):
        """Pack (N, W) one-byte words (each < 16), run after run (``run_offsets`` as in the constructor)."""
        codes = np.ascontiguousarray(codes, dtype=np.uint8)
        N, W = codes.shape
        offsets = np.array([0, N], dtype=np.int64) if run_offsets is None else np.asarray(run_offsets, np.int64)
        starts = blocks_of_runs(offsets)
        blocks = np.zeros((int(starts[-1]), block_bytes(W)), dtype=np.uint8)
        for r in np.flatnonzero(np.diff(offsets)):
            _kernels.fastscan_pack(codes[offsets[r]:offsets[r + 1]], blocks[starts[r]:starts[r + 1]])
        return cls(blocks, W, offsets)

    def runs_are(self, offsets):
        """Whether the runs of the blocks are these (an inverted file's lists must be its runs)."""
        return np.array_equal(self.run_offsets, offsets)

    @property
    def shape(self):
        """(N, W): the shape of the codes as one-byte words."""
        return (int(self.run_offsets[-1]), self.n_words)

    def __len__(self):
        return int(self.run_offsets[-1])

    def __getitem__(self, rows):
        """Rows ``start:stop`` (a slice with step 1) as one-byte words: a new (n, W) uint8 array."""
        if not isinstance(rows, slice) or rows.step not in (None, 1):
            raise TypeError("CodeBlocks take a slice of rows with step 1")
        start, stop, _ = rows.indices(len(self))
        return self.unpack(start, max(start, stop))

    def unpack(self, start=0, stop=None):
        """Rows start..stop-1 as one-byte words, (stop - start, W) uint8."""
        stop = len(self) if stop is None else stop
        out = np.empty((stop - start, self.n_words), dtype=np.uint8)
        offsets, starts = self.run_offsets, self.run_blocks
        first = int(np.searchsorted(offsets, start, side="right")) - 1
        row = start
        for r in range(max(first, 0), offsets.size - 1):
            if row >= stop:
                break
            lo, hi = int(offsets[r]), int(offsets[r + 1])
            if hi <= row:
                continue
            end = min(hi, stop)
            _kernels.fastscan_unpack(self.blocks[starts[r]:starts[r + 1]], row - lo, out[row - start:end - start])
            row = end
        return out

    def check(self, n_codewords):
        """None, or (check, detail) of the first row holding a word >= n_codewords, else of the first block whose
        padding is not zero (verify's FormatError)."""
        bad_row, bad_block = self.first_bad(n_codewords)
        if bad_row >= 0:
            return "code out of range", f"section 'code_blocks': row {bad_row} holds a word >= K = {n_codewords}"
        if bad_block >= 0:
            return ("non-zero block padding", f"section 'code_blocks': block {bad_block} has non-zero padding (its pad "
                    "column or its rows past the end of its run)")
        return None

    def scanner(self, bound=None, norm_scales=False, scale_range=None, by_bound=False):
        """The exhaustive fast scan of these codes (search.scan.scanner's contract; no re-ranking keywords)."""
        def scan(model, queries, rotated, *rest):
            _kernels.fastscan_scan(model, queries, rotated, self.blocks, len(self), *rest, bound, norm_scales,
                                   scale_range, by_bound)
        return scan

    def part_rows(self, rows, list_offsets, allow):
        """These rows as one part of a search of lists (``_kernels.IvfPartRows``), each list one run of blocks (the
        runs must be the lists: a flat index's one run, an inverted file's lists)."""
        return _kernels.IvfPartRows(self.blocks, rows.norms, rows.norm_codes,
                                    rows.norm_levels if rows.norm_codes is not None else None, rows.ids, list_offsets,
                                    rows.norm_scales, list_blocks=self.run_blocks, n_words=self.n_words,
                                    scale_range=rows.scale_range, allow=allow)

    def first_bad(self, n_codewords):
        """(the first row holding a word >= n_codewords, or -1; the first block whose padding is not zero, or -1)."""
        out = np.empty(2, dtype=np.int64)
        bad_row = bad_block = -1
        offsets, starts = self.run_offsets, self.run_blocks
        for r in range(offsets.size - 1):
            if starts[r + 1] == starts[r]:
                continue
            _kernels.fastscan_check(self.blocks[starts[r]:starts[r + 1]], int(offsets[r + 1] - offsets[r]),
                                    self.n_words, n_codewords, out)
            if bad_row < 0 and out[0] >= 0:
                bad_row = int(offsets[r] + out[0])
            if bad_block < 0 and out[1] >= 0:
                bad_block = int(starts[r] + out[1])
            if bad_row >= 0 and bad_block >= 0:
                break
        return bad_row, bad_block
