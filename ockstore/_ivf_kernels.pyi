"""Type stub of the compiled kernels of the inverted file (ockstore/_ivf_kernels.pyx). Arguments are C-contiguous
arrays of the stated dtypes, validated by the callers; outputs are preallocated by the caller and filled in place."""

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
U8 = npt.NDArray[np.uint8]
U64 = npt.NDArray[np.uint64]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]

def coarse_assign(X: F32, neg2_ct: F32, c_sqnorms: F32, labels: I32, distances: F32, n_threads: int) -> None: ...

def cluster_sums(X: F32, labels: I32, sums: F64, counts: I64) -> None: ...

def probe(
    queries: F32, ct: F32, c_sqnorms: F32, kind: int, term_factor: float, out_lists: I32, out_terms: F32,
    n_threads: int,
) -> None: ...

def ivf_scan(
    rot: F32, words: F32, sqnorms: F64, n_codebooks: int, sub_dim: int, kind: int, queries: F32, codes: U8,
    norms_f32: F32, norm_codes: U8, norm_levels: F32, ids: I64, allow: U64, list_offsets: I64, lists: I32,
    terms: F32, out_dist: F32, out_rows: I64, n_threads: int, norm_scales: bool = False,
) -> None: ...
