"""Type stub of the compiled kernels (ockstore/_search_kernels.pyx). Arguments are C-contiguous arrays of the stated
dtypes, validated by the callers; outputs are preallocated by the caller and filled in place."""

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
U8 = npt.NDArray[np.uint8]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]

TABLE_PANEL: int
TABLE_SLOTS: int

class TableModel:
    def __init__(
        self, rot: F32, words: F32, sqnorms: F64, n_codebooks: int, sub_dim: int, kind: int,
    ) -> None: ...

def scan(
    model: TableModel, queries: F32 | None, rotated: F64 | None, codes: U8, norms_f32: F32 | None,
    norm_codes: U8 | None, norm_levels: F32 | None, ids: I64 | None, allow: U64 | None, out_dist: F32,
    out_rows: I64, n_threads: int, bound: F32 | None = None, norm_scales: bool = False,
) -> None: ...
