"""Type stub of the compiled kernels (ockstore/_codec_kernels.pyx). Arguments are C-contiguous arrays of the stated
dtypes, validated by the callers; outputs are preallocated by the caller and filled in place."""

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]

def encode_beam(
    X: F32, rot_pad: F32, words_t: F32, word_sqnorms: F32, pair_tables: F32,
    n_codebooks: int, n_codewords: int, beam_width: int,
    prev_codes: U8, codes: U8, errors: F32, n_threads: int,
) -> None: ...
def matmul_rows(X: F32, B: F32, out: F32, n_threads: int) -> None: ...
def accumulate_xty(X: F32, Y: F32, out: F64, n_threads: int) -> None: ...
def decode_rotated(codes: U8, words: F32, out: F32, n_threads: int) -> None: ...
def code_sqnorms(
    codes: U8, word_sqnorms: F32, pair_tables: F32, n_codebooks: int, n_codewords: int, out: F32, n_threads: int,
) -> None: ...
def normal_equations(
    codes: U8, Z: F32, n_codebooks: int, n_codewords: int, gram: F64, rhs: F64, n_threads: int,
) -> None: ...

def max_abs(values: npt.NDArray[np.float32]) -> float: ...
