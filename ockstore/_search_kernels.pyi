"""Type stub of the compiled kernels (ockstore/_search_kernels.pyx). Arguments are C-contiguous arrays of the stated
dtypes, validated by the callers; outputs are preallocated by the caller and filled in place."""

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
U8 = npt.NDArray[np.uint8]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]

def adc_scan(
    codes: U8, luts: F32, qconst: F32, norms_f32: F32, norm_codes: U8, norm_levels: F32, ids: I64,
    allow: U64, table_stride: int, out_dist: F32, out_rows: I64, n_threads: int, bound: F32 | None = None,
) -> None: ...

def make_tables(
    queries: F32, rotated: F64, rot_pad: F32, words_t: F32, sqnorms: F64, n_codebooks: int,
    kind: int, luts: F32, qconst: F32,
) -> None: ...
