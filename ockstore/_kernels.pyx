"""ockstore's compiled kernels: one extension module, its parts included below (docs/ARCHITECTURE.md, "Layers" and
"Kernels and SIMD levels").

    kernels/common.pxi   what several parts need: the C kernels of every SIMD level (kernels/simd.h), shared constants,
                          scratch memory, the BLAS wrapper, the query tables' source (TableModel)
    kernels/scan.pxi     the one ADC scan loop of byte codes, its collectors (heap, TopK) and the order of results
    kernels/codec.pxi    beam encoding, decoding, code norms, normal equations, row products, the vector check
    kernels/flat.pxi   the exhaustive scan of a batch of queries (scan)
    kernels/rerank.pxi   exact re-ranking of candidates from their stored rows (kernels/rerank.h), and the exact search
    kernels/fastscan.pxi the fast scan of 4-bit codes in blocks (kernels/fastscan.h; its SIMD kernels in kernels/simd.h's table)
    kernels/ivf.pxi      the inverted file: coarse assignment, k-means sums, probing, the search of probed lists
                          (byte codes, or blocks read by the fast scan)

The contract of every kernel:
- It trusts its arguments (the Python layers validate and allocate): C-contiguous arrays of the documented shapes and
  dtypes. Arguments are tagged IN or OUT; outputs are allocated by the caller, filled in place; nothing is returned.
- An absent array is None, never an empty array (documented per argument as "or None"); an array that may be absent
  is declared without `not None`, every other one is required. Kernels read None as a NULL pointer.
- The loops run without the GIL and never raise or touch Python objects: the only error is MemoryError, raised with
  the GIL before a parallel region when its scratch memory cannot be allocated.
- Parallel regions run on the kernels' own thread pool (kernels/pool.h: a task function given a context struct, a
  task index and a thread id), never OpenMP, so that a process forked after a search or an encoding can search and
  encode too; a kernel uses fewer threads than asked for when its work is small (ock_pool_threads, common.pxi).
- Results never depend on the number of threads, nor on the SIMD level (simd_level): every level gives bitwise the
  same results as the portable one.
"""

import os

import numpy as _np  # the arrays IvfOneQuery returns (Python objects: no NumPy C API)

from libc.math cimport INFINITY, nextafterf, sqrt
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset
from scipy.linalg.cython_blas cimport sgemm

include "kernels/common.pxi"
include "kernels/scan.pxi"
include "kernels/codec.pxi"
include "kernels/flat.pxi"
include "kernels/rerank.pxi"
include "kernels/fastscan.pxi"
include "kernels/ivf.pxi"


# --------------------------------------------------------------------------------------------------------------------
# The SIMD level: chosen once, here, when the module loads.

SIMD_ENVIRONMENT_VARIABLE = "OCKSTORE_SIMD"


def _level_names():
    return tuple(ock_simd_level_name(level).decode() for level in range(OCK_N_LEVELS))


def _level_number(str name):
    """The level called `name`, or -1."""
    names = _level_names()
    return names.index(name) if name in names else -1


def simd_level():
    """The SIMD level the kernels run at: "portable", "avx2" (AVX2, FMA and F16C) or "avx512" (AVX-512F). The best this CPU
    runs, unless the environment variable OCKSTORE_SIMD asked for a lower one when the module loaded."""
    return ock_simd_level_name(ock_simd_level()).decode()


def _best_simd_level():
    """The best SIMD level this CPU runs (and this build compiled)."""
    return ock_simd_level_name(ock_simd_best_level()).decode()


def _set_simd_level(str name not None):
    """For tests: run the kernels at level `name` from now on; returns the previous level. ValueError for a name that
    is no level or a level this CPU cannot run. Not safe while kernels run in other threads."""
    previous = simd_level()
    level = _level_number(name)
    if level < 0:
        raise ValueError(f"name must be one of {', '.join(_level_names())}, got {name!r}")
    if ock_simd_use(level) != 0:
        raise ValueError(f"this CPU cannot run SIMD level {name!r}: it runs {', '.join(_level_names()[:ock_simd_best_level() + 1])}")
    return previous


def _init_simd():
    """Select the level when the module loads: the best this CPU runs, or OCKSTORE_SIMD's if it is lower (a level the
    CPU lacks falls back to the best it has). An unknown value raises ImportError naming the variable: a typo must
    not pass for a measurement at some level."""
    best = ock_simd_init()
    value = os.environ.get(SIMD_ENVIRONMENT_VARIABLE, "")
    if value == "":
        return
    level = _level_number(value)
    if level < 0:
        raise ImportError(f"{SIMD_ENVIRONMENT_VARIABLE}={value!r} is not a SIMD level: use one of "
                          f"{', '.join(_level_names())}, or leave it unset for the best this CPU runs")
    ock_simd_use(level if level < best else best)


_init_simd()

# The thread pool's fork handlers (kernels/pool.h): a forked child starts with no workers and no lock held.
if ock_pool_init() != 0:
    raise ImportError("ockstore._kernels: cannot register the thread pool's fork handlers (pthread_atfork failed)")
