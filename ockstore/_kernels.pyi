"""Type stub of the compiled kernels (ockstore/_kernels.pyx and its parts). Arguments are C-contiguous arrays of the
stated dtypes, validated by the callers; outputs are preallocated by the caller and filled in place. An absent array
is None."""

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
U8 = npt.NDArray[np.uint8]
U64 = npt.NDArray[np.uint64]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]

# Constants shared with the Python layers.
TABLE_PANEL: int
TABLE_SLOTS: int
TABLE_L2_NORM_TERM: int
TABLE_L2_WHOLE: int
TABLE_NEG_DOT: int
PROBE_L2: int
COARSE_PANEL: int
PROBE_IP: int
SIMD_ENVIRONMENT_VARIABLE: str

# SIMD levels ("portable", "avx2", "avx512").
def simd_level() -> str: ...
def _best_simd_level() -> str: ...
def _set_simd_level(name: str) -> str: ...
def _set_exact_portable_tables(exact: bool) -> bool: ...

# Threads (kernels/pool.h): the small-work rule and, for tests, the pool's state.
POOL_WORK_PER_THREAD: float
def pool_threads(n_threads: int, work: float) -> int: ...
def product_threads(n_threads: int, multiply_adds: float) -> int: ...
def _set_pool_work_per_thread(units: float) -> float: ...
def _set_pool_crowding(per_1024: int) -> int: ...
def _pool_workers() -> int: ...
def _pool_parallel_jobs() -> int: ...
def _set_pool_spin_us(us: int) -> int: ...

# The codec.
def encode_beam(
    X: F32, rot_pad: F32 | None, words_t: F32, word_sqnorms: F32, pair_tables: F32,
    n_codebooks: int, n_codewords: int, beam_width: int,
    prev_codes: U8 | None, codes: U8, errors: F32, n_threads: int,
) -> None: ...
def matmul_rows(X: F32, B: F32, out: F32, n_threads: int) -> None: ...
def code_sums(codes: U8, X: F32, n_codewords: int, out: F64, n_threads: int) -> None: ...
def code_gram(codes: U8, n_codebooks: int, n_codewords: int, gram: F64, n_threads: int) -> None: ...
def decode_rotated(codes: U8, words: F32, out: F32, n_threads: int) -> None: ...
def code_sqnorms(
    codes: U8, word_sqnorms: F32, pair_tables: F32, n_codebooks: int, n_codewords: int, out: F32, n_threads: int,
) -> None: ...
def normal_equations(
    codes: U8, Z: F32, n_codebooks: int, n_codewords: int, gram: F64, rhs: F64, n_threads: int,
) -> None: ...
def max_abs(values: F32) -> float: ...
def row_sqnorms(rows: F32, out: F64) -> None: ...

# Search.
class TableModel:
    def __init__(
        self, rot: F32, words: F32, sqnorms: F64, n_codebooks: int, sub_dim: int, kind: int,
    ) -> None: ...

def scan(
    model: TableModel, queries: F32 | None, rotated: F64 | None, codes: U8, norms_f32: F32 | None,
    norm_codes: U8 | None, norm_levels: F32 | None, ids: I64 | None, allow: U64 | None, out_dist: F32,
    out_rows: I64, n_threads: int, bound: F32 | None = None, rerank_rows: RerankSource | None = None,
    rerank: int = 0, rerank_queries: F32 | None = None, out_flags: I32 | None = None, norm_scales: bool = False,
) -> None: ...

# Exact re-ranking (kernels/rerank.h).
RERANK_FLOAT32: int
RERANK_FLOAT16: int
RERANK_UINT8: int
RERANK_SQ8: int
RERANK_L2: int
RERANK_IP: int
RERANK_COSINE: int
RERANK_BAD_VALUES: int
RERANK_ZERO_VECTOR: int

class RerankSource:
    def __init__(
        self, rows: list[U8], ids: list[I64 | None], kind: int, metric: int, dim: int, value_ranges: F32 | None,
    ) -> None: ...
    @property
    def n_parts(self) -> int: ...

def rerank(
    source: RerankSource, queries: F32, rows: I64, parts: I64 | None, out_values: F32, out_ids: I64,
    out_positions: I64 | None, out_flags: I32, n_threads: int,
) -> None: ...
def rerank_all_rows(
    source: RerankSource, queries: F32, n_rows: int, out_values: F32, out_ids: I64, out_flags: I32, n_threads: int,
) -> None: ...

# The inverted file.
def coarse_assign(X: F32, neg2_ct: F32, c_sqnorms: F32, labels: I32, distances: F32, n_threads: int) -> None: ...
def cluster_sums(X: F32, labels: I32, sums: F64, counts: I64) -> None: ...
COARSE_HALF_PANEL: int
COARSE_HALF_MIN_LISTS: int

class CoarseHalf:
    def __init__(
        self, centroids: F32, values: npt.NDArray[np.uint16], alpha: F64, beta: F64, kind: int, factor: float,
        sqnorm_weight: float, qnorm_limit: float,
    ) -> None: ...

def probe(
    queries: F32, panels: F32, c_sqnorms: F32, kind: int, term_factor: float, out_lists: I32, out_terms: F32,
    n_threads: int = 1, half: CoarseHalf | None = None, out_refined: I32 | None = None,
) -> None: ...

# Row handles of a search over several parts (kernels/rows.h): part << PART_SHIFT | row.
PART_SHIFT: int

class IvfPartRows:
    def __init__(
        self, codes: U8, norms_f32: F32 | None, norm_codes: U8 | None, norm_levels: F32 | None, ids: I64 | None,
        list_offsets: I64, norm_scales: bool = False, list_blocks: I64 | None = None, n_words: int = 0,
        scale_range: F64 | None = None, allow: U64 | None = None,
    ) -> None: ...
    @property
    def n_rows(self) -> int: ...

class IvfLists:
    def __init__(
        self, model: TableModel, panels: F32 | None, c_sqnorms: F32 | None, probe_kind: int, term_factor: float,
        parts: list[IvfPartRows], half: CoarseHalf | None = None,
    ) -> None: ...
    @property
    def n_parts(self) -> int: ...

def ivf_search(
    lists: IvfLists, queries: F32 | None, n_probe: int, allow: list[U64 | None] | None, out_dist: F32, out_rows: I64,
    n_threads: int, rerank_rows: RerankSource | None = None, rerank: int = 0, rerank_queries: F32 | None = None,
    out_flags: I32 | None = None, by_bound: bool = False, out_ids: bool = False, rotated: F64 | None = None,
) -> None: ...

class IvfOneQuery:
    def __init__(
        self, lists: IvfLists, k: int, n_probe: int, rerank_rows: RerankSource | None, rerank: int, normalize: bool,
    ) -> None: ...
    def search(self, q: F32, norm: float, out_dist: F32, out_ids: I64) -> int: ...

def query_checks(q: F32) -> tuple[float, float]: ...

# Fast scan: codes of words below 16 in blocks of FASTSCAN_BLOCK rows (docs/FORMAT.md section 16; kernels/fastscan.h).
FASTSCAN_BLOCK: int
U16 = npt.NDArray[np.uint16]

def fastscan_block_bytes(n_words: int) -> int: ...
def fastscan_pack(codes: U8, blocks: U8) -> None: ...
def fastscan_unpack(blocks: U8, start: int, codes: U8) -> None: ...
def fastscan_check(blocks: U8, n_rows: int, n_words: int, n_codewords: int, out: I64) -> None: ...
def fastscan_scan(
    model: TableModel, queries: F32 | None, rotated: F64 | None, blocks: U8, N: int, norms_f32: F32 | None,
    norm_codes: U8 | None, norm_levels: F32 | None, ids: I64 | None, allow: U64 | None, out_dist: F32,
    out_rows: I64, n_threads: int, bound: F32 | None = None, norm_scales: bool = False, scale_range: F64 | None = None,
) -> None: ...
def fastscan_sums(
    model: TableModel, queries: F32, blocks: U8, norm_codes: U8 | None, norm_levels: F32 | None, out: U16,
) -> None: ...
