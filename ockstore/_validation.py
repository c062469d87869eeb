"""The one place where public inputs are checked and converted (docs/ARCHITECTURE.md, "Conventions").

Everything past these helpers trusts its input: C-contiguous float32 vectors without NaN/inf, integers in range.
Messages name the parameter as it is spelled in the public signature and say what was expected.
"""

from __future__ import annotations

import numbers
import os

import numpy as np

from . import _kernels

__all__ = [
    "as_vectors",
    "normalize_rows",
    "check_vectors_dtype",
    "to_float32_rows",
    "check_int",
    "check_float",
    "check_choice",
    "check_k",
    "check_bool",
    "resolve_n_threads",
    "as_codes",
    "as_ids",
    "as_list_ids",
]


def check_vectors_dtype(X, name):
    """Return ``X`` as an ndarray (no copy when it already is one) after checking its dtype is real numeric.

    bool, complex, object, string and structured arrays raise TypeError.
    """
    if isinstance(X, np.ndarray):
        arr = X
    else:
        try:
            arr = np.asarray(X)
        except (ValueError, TypeError) as exc:  # ragged nested lists and the like
            raise TypeError(f"{name} must be a numeric array-like, could not convert it: {exc}") from None
    kind = arr.dtype.kind
    if kind == "b":
        raise TypeError(f"{name} must hold real numbers, got a boolean array")
    if kind not in "iuf":
        raise TypeError(f"{name} must hold real numbers (integer or float dtype), got dtype {arr.dtype}")
    return arr


_FLOAT32 = np.dtype(np.float32)

# Largest magnitude accepted in a vector. Squared distances are computed in float32 (max 3.4e38): with entries up
# to 1e15 a squared norm stays below 1e30 * dimension, far from overflow for any practical dimension.
MAX_ABS_VALUE = 1e15


def to_float32_rows(arr, name):
    """Convert a 2-D real numeric array (or a slice of one) to C-contiguous float32; reject NaN, inf and values
    beyond +-MAX_ABS_VALUE.

    No input validation beyond these value checks: ``arr`` must already have passed ``check_vectors_dtype``.
    """
    # == rather than `is`: arrays viewed from file records carry an equal float32 dtype that is another object
    if type(arr) is np.ndarray and arr.dtype == _FLOAT32 and arr.flags.c_contiguous:
        out = arr  # already what the kernels take (the common case of a search): no copy, nothing can overflow
    else:
        with np.errstate(over="ignore"):  # values beyond float32 become inf: reported below as too large
            out = np.ascontiguousarray(arr, dtype=np.float32)
    if out.size:
        largest = _kernels.max_abs(out.reshape(-1))  # +inf for NaN too: one test covers NaN, inf, magnitude
        if not largest <= MAX_ABS_VALUE:
            if not np.isfinite(out).all():
                if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                    raise ValueError(f"{name} contains NaN or infinite values")
                raise ValueError(f"{name} contains values too large for float32")
            raise ValueError(f"{name} contains values of magnitude up to {largest:.3g}; ockstore accepts at "
                             f"most {MAX_ABS_VALUE:.0e} (squared distances must fit in float32)")
    return out


def rows_beyond_limits(rows):
    """None when every value of the float32 2-D ``rows`` is finite and within +-MAX_ABS_VALUE (what every vector input
    must hold), else a bool mask of the rows that are not (for a message naming the row)."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    if rows.size == 0 or _kernels.max_abs(rows.reshape(-1)) <= MAX_ABS_VALUE:  # +inf for NaN too
        return None
    return ~(np.abs(rows) <= MAX_ABS_VALUE).all(axis=1)


def normalize_rows(rows, name, first_row=0):
    """Checked float32 rows scaled to unit length (a new array), for metric "cosine"; ValueError naming the first
    zero row (``first_row`` is the number of rows[0] in the caller's array). Norms are computed in float64, by the
    kernel a query searched alone is normalised with too (``_kernels.row_sqnorms``), so a vector is normalised to the
    same values on every path."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    norms = np.empty(rows.shape[0], dtype=np.float64)
    if rows.shape[1]:
        _kernels.row_sqnorms(rows, norms)
    else:
        norms[:] = 0.0
    np.sqrt(norms, out=norms)
    if np.count_nonzero(norms) < norms.shape[0]:  # (a single-query search calls this: a cheaper test than any())
        row = first_row + int(np.argmax(norms == 0.0))
        raise ValueError(f"{name} row {row} is a zero vector: metric 'cosine' cannot normalise it (cosine "
                         "similarity is undefined for it)")
    out = np.empty(rows.shape, dtype=np.float32)
    return np.divide(rows, norms[:, None], out=out, casting="unsafe")  # in float64, rounded once to float32


def as_vectors(X, name, dim=None, *, convert=True):
    """Check vectors and return ``(X2d, was_1d)``.

    Parameters
    ----------
    X : array-like of shape (n, dim) or (dim,)
        Any real numeric dtype (float16/32/64, signed or unsigned integers, any byte order or memory layout).
    name : str
        The parameter's name in the public signature, used in messages.
    dim : int or None
        The expected number of columns; None accepts any positive number.
    convert : bool
        When True the result is C-contiguous float32 and checked for NaN/inf. When False the result keeps the input's
        dtype (callers convert chunk by chunk with ``to_float32_rows`` to keep memory bounded).

    Returns
    -------
    X2d : ndarray of shape (n, dim)
    was_1d : bool
        True when a single vector was given; the caller drops that axis from its result again.
    """
    if convert and type(X) is np.ndarray and X.ndim == 1 and X.dtype == _FLOAT32 and X.shape[0] == dim and dim:
        # one query of the right dimension in float32 (an app searching one query per call): the checks below would
        # all pass but the values', made here directly (~0.5 of ~1.2 us); a bad value takes the path below, which
        # names it
        if X.flags.c_contiguous and _kernels.max_abs(X) <= MAX_ABS_VALUE:
            return X[None], True
    arr = check_vectors_dtype(X, name)
    was_1d = arr.ndim == 1
    if was_1d:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array of shape (n, dim) or one 1-D vector, got {arr.ndim} dimensions")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(f"{name} has dimension {arr.shape[1]}, expected {dim}")
    if dim is None and arr.shape[1] == 0:
        raise ValueError(f"{name} must have at least one column")
    if convert:
        arr = to_float32_rows(arr, name)
    return arr, was_1d


def check_int(value, name, *, min_value=None, max_value=None):
    """Return ``value`` as a Python int; it must be a Python or NumPy integer (not bool, not float) in range."""
    if type(value) is int and (min_value is None or value >= min_value) and (max_value is None or value <= max_value):
        return value  # the common case, without the abstract-class checks below (bool is not exactly int)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if min_value is not None and value < min_value:
        raise ValueError(f"{name} must be >= {min_value}, got {value}")
    if max_value is not None and value > max_value:
        raise ValueError(f"{name} must be <= {max_value}, got {value}")
    return value


def check_float(value, name, *, min_value=None):
    """Return ``value`` as a finite Python float (ints accepted, bool refused), at least ``min_value``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if min_value is not None and value < min_value:
        raise ValueError(f"{name} must be >= {min_value}, got {value}")
    return value


def check_bool(value, name):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def check_choice(value, name, choices):
    """``value`` must be exactly one of ``choices`` (strings, compared exactly)."""
    if not isinstance(value, str) or value not in choices:
        expected = " or ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    return value


# Results beyond the number of vectors are padding; a k above max(N, MAX_PADDED_K) is refused rather than answered
# with that much padding (k = 2**40 would ask for terabytes of it). The kernels' heaps are indexed by a C int.
MAX_PADDED_K = 1 << 16
MAX_K = 2**31 - 1


def check_k(k, n_rows, name="k"):
    """``k`` as an int: 1 <= k <= max(n_rows, MAX_PADDED_K) and k <= MAX_K; results past n_rows are padding."""
    if type(k) is int and 1 <= k <= MAX_PADDED_K:  # always allowed (MAX_PADDED_K <= MAX_K): skip the general checks
        return k
    k = check_int(k, name, min_value=1)
    if k > min(MAX_K, max(n_rows, MAX_PADDED_K)):
        raise ValueError(f"{name} = {k} is too large: the index holds {n_rows} vectors and at most "
                         f"{max(MAX_PADDED_K, min(n_rows, MAX_K))} results per query can be asked for (results past "
                         f"the last vector are padding)")
    return k


# More threads than this is never useful; the kernels' pool runs at most this many (kernels/pool.h,
# OCK_POOL_MAX_THREADS), and each thread of a kernel gets its own scratch, allocated before it starts.
MAX_THREADS = 1024


def resolve_n_threads(n_threads):
    """None means every core this process may use; otherwise an integer in 1..MAX_THREADS."""
    if n_threads is None:
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # not on Linux
            return max(1, os.cpu_count() or 1)
    return check_int(n_threads, "n_threads", min_value=1, max_value=MAX_THREADS)


def as_codes(codes, name, width, n_codewords):
    """Check codes: integers of shape (n, width) or (width,), every value in 0..n_codewords-1; returns uint8 2-D."""
    arr = np.asarray(codes) if not isinstance(codes, np.ndarray) else codes
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array (uint8 codes), got dtype {arr.dtype}")
    was_1d = arr.ndim == 1
    if was_1d:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2 or arr.shape[1] != width:
        raise ValueError(f"{name} must have shape (n, {width}), got {np.shape(codes)}")
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= n_codewords:
            raise ValueError(f"{name} holds values outside 0..{n_codewords - 1} (found {lo}..{hi})")
    return np.ascontiguousarray(arr, dtype=np.uint8), was_1d


def as_ids(ids, name="ids", *, n=None, matrix=False, missing_ok=False, values=True):
    """The one check of ids: integers in the int64 range, none negative; returns C-contiguous int64.

    Parameters
    ----------
    ids : array-like
        Shape (n,); with ``matrix=True`` shape (n_queries, k), a 1-D array being one row.
    n : int or None
        The required length (rows for a matrix); None accepts any.
    missing_ok : bool
        Accept -1, which means "no result" in search results (user ids are never negative).
    values : bool
        False checks only the dtype and shape and returns the array as it is (a large memory map stays unread, to be
        checked chunk by chunk with values=True).
    """
    arr = ids if isinstance(ids, np.ndarray) else np.asarray(ids)
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, got dtype {arr.dtype}")
    if matrix and arr.ndim == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != (2 if matrix else 1) or (n is not None and arr.shape[0] != n):
        expected = f"({'n_queries' if n is None else n}, k)" if matrix else f"({'n' if n is None else n},)"
        raise ValueError(f"{name} must have shape {expected}" + (" to match the vectors" if n is not None else "")
                         + f", got {np.shape(ids)}")
    if not values:
        return arr
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"{name} holds values above the int64 range")
    out = np.ascontiguousarray(arr, dtype=np.int64)
    lowest = -1 if missing_ok else 0
    if out.size and int(out.min()) < lowest:
        raise ValueError(f"{name} must be >= {lowest} (-1 means 'no result'), found {int(out.min())}")
    return out


def as_list_ids(list_ids, name, n_lists, n=None):
    """Check the list ids of an inverted file: integers of shape (n,) (or a scalar, one row), each in
    0..n_lists-1; returns (C-contiguous int64 1-D, was_scalar)."""
    arr = list_ids if isinstance(list_ids, np.ndarray) else np.asarray(list_ids)
    if arr.size == 0 and arr.dtype.kind == "f" and not isinstance(list_ids, np.ndarray):
        arr = arr.astype(np.int64)  # an empty list has no integer dtype of its own
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array (list ids), got dtype {arr.dtype}")
    was_scalar = arr.ndim == 0
    if was_scalar:
        arr = arr.reshape(1)
    if arr.ndim != 1 or (n is not None and arr.shape[0] != n):
        expected = f"({'n' if n is None else n},)"
        raise ValueError(f"{name} must have shape {expected}, got {np.shape(list_ids)}")
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= n_lists:
            raise ValueError(f"{name} holds values outside 0..{n_lists - 1} (found {lo}..{hi})")
    return np.ascontiguousarray(arr, dtype=np.int64), was_scalar
