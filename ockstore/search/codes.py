"""The fast-scan layout of 4-bit codes: models with at most 16 words per codebook store their codes two words per
byte, in blocks of 32 rows whose nibbles are interleaved so that one SIMD load feeds one table shuffle
(docs/FORMAT.md, "Fast-scan files"; docs/ARCHITECTURE.md, "Fast scan").

Rows are stored in runs, each in whole blocks: one run for a flat index, one per list for an inverted file (each list
padded to a whole block). ``CodeBlocks`` holds the blocks with the runs' row and block offsets; it answers what an
index asks of its codes (their number, rows as one-byte words for copying them, their check) and is what the scans
read. Encoding stays one byte per word (``Quantizer.encode``); the indexes and the file writers pack.
"""

from __future__ import annotations

import numpy as np

from .. import _kernels

__all__ = ["FASTSCAN_MAX_WORDS", "BLOCK_ROWS", "CodeBlocks", "uses_blocks", "block_bytes", "blocks_of_runs",
           "pack_rows"]

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
