"""Shared pieces of the quantizer tests (tests/quantizers/): a constructor per method by name, and the comparison of
kernel codes with the NumPy oracle's (``reference.py``).
"""

from __future__ import annotations

import numpy as np

import reference as ref
from ockstore import CKM, ECKM, OCKM, PQ

__all__ = ["METHODS", "make", "assert_codes_match", "sq_rows"]

METHODS = {
    "PQ": lambda M, C, T, **kw: PQ(M, **kw),
    "CKM": lambda M, C, T, **kw: CKM(M, **kw),
    "ECKM": lambda M, C, T, **kw: ECKM(M, C, **kw),
    "OCKM": lambda M, C, T, **kw: OCKM(M, C, T, **kw),
}


def make(method, M, C=2, T=4, **kw):
    """A quantizer of `method` with M subspaces (C and T ignored by the methods that have none)."""
    return METHODS[method](M, C, T, **kw)


def assert_codes_match(X, rotation, codebooks, codes, expected, *, max_fraction=0.01):
    """Codes equal the oracle's; where they differ, the two errors agree within 1e-5 relative and differences are
    rare (a near-tie decided differently by float32 rounding).

    The absolute slack, 1e-6 ||x||^2, is below what float32 tables (errors accurate to ~eps ||x||^2) can resolve.
    """
    codes = np.asarray(codes, dtype=np.int64)
    assert codes.shape == expected.shape
    differ = np.flatnonzero((codes != expected).any(axis=1))
    if differ.size:
        got = ref.code_errors(X[differ], rotation, codebooks, codes[differ])
        want = ref.code_errors(X[differ], rotation, codebooks, expected[differ])
        slack = 1e-6 * np.einsum("ij,ij->i", X[differ].astype(np.float64), X[differ].astype(np.float64))
        bad = np.abs(got - want) > 1e-5 * np.abs(want) + slack
        assert not bad.any(), (
            f"{bad.sum()} rows get a different code with a different error, e.g. row {differ[bad][0]}: "
            f"kernel {codes[differ[bad][0]]} error {got[bad][0]!r}, reference {expected[differ[bad][0]]} "
            f"error {want[bad][0]!r}")
    assert differ.size <= max_fraction * len(X), f"{differ.size} of {len(X)} rows differ from the reference"


def sq_rows(X):
    X = np.asarray(X, dtype=np.float64)
    return np.einsum("ij,ij->i", X, X)
