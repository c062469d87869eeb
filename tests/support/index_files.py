"""The data, quantizers, fixtures and file helpers of the index-file tests (tests/indexfile/): hand-made container
files (``parts_of``, ``write_parts``: valid for the container whatever the index layer thinks of them) and the
FormatError check of ``open_index``.

The fixtures (``base``, ``queries``, ``quantizers``) are imported by the test modules that use them.
"""

from __future__ import annotations

import numpy as np
import pytest

import helpers
import ockstore
from helpers import TESTS, gaussian_mixture
from ockstore import open_index, storage

DATA = TESTS / "data"  # the golden files (tests/data/README.md)
P = 10  # not a multiple of M = 3 or M = 4: padded subspaces
N = 700
NQ = 12

# name -> (constructor, norm encodings). K = 32: codes one byte per word (section 11.2); the fast-scan files of K <= 16
# (section 16) are tested in tests/indexfile/test_fastscan_file.py.
CONFIGS = {
    "pq": (lambda: ockstore.PQ(3, n_codewords=32, n_iter=3, seed=0), ["none"]),
    "ckm": (lambda: ockstore.CKM(4, n_codewords=32, n_iter=3, seed=0), ["none"]),
    "eckm": (lambda: ockstore.ECKM(3, 2, n_codewords=32, n_iter=3, seed=0), ["f32", "u8"]),
    "ockm": (lambda: ockstore.OCKM(4, 2, 4, n_codewords=32, n_iter=3, seed=0), ["f32", "u8"]),
    "ockm-k256": (lambda: ockstore.OCKM(3, 3, 2, n_codewords=256, n_iter=2, seed=1), ["u8"]),
}
CASES = [(name, enc) for name, (_, encs) in CONFIGS.items() for enc in encs]


@pytest.fixture(scope="module")
def base():
    return gaussian_mixture(N, P, seed=11)


@pytest.fixture(scope="module")
def queries():
    return gaussian_mixture(NQ, P, seed=12)


@pytest.fixture(scope="module")
def quantizers(mixture):
    return {name: make().fit(mixture) for name, (make, _) in CONFIGS.items()}


def user_ids(n):
    """Distinct, non-sequential, large ids."""
    return (np.arange(n, dtype=np.int64) * 7919 + 10**12)[::-1].copy()


def parts_of(path):
    """(meta, {name: array copy} in file order, user) of a container file."""
    with storage.open_file(path) as f:
        order = sorted(f.sections, key=lambda name: f.section_info(name)["offset"])
        return f.meta, {name: np.array(f.sections[name]) for name in order}, f.user


FASTSCAN_KINDS = ("fastscan-index", "ivf-fastscan-index")


def write_parts(path, meta, sections, user=None, minor=None, floor=0):
    """A container file with exactly these sections (in this order) and meta: valid for the container, whatever the
    index layer thinks of it (format 1.``minor``, or more if a section's dtype needs it; None: 1.``floor``, or 1.3
    for the kinds of fast-scan files, which exist from 1.3, docs/FORMAT.md F1)."""
    if minor is None:
        minor = max(floor, 3 if meta.get("kind") in FASTSCAN_KINDS else 0)
    with storage.FileWriter(path, minor_version=minor) as w:
        for name, array in sections.items():
            w.put(name, np.ascontiguousarray(array))
        w.commit(meta, user or {})
    return path


def expect_format_error(path, check, name=None, *, when="open"):
    """open_index (and, for when="verify", verify) must raise FormatError naming the file, the check and the
    section or meta key ``name``; returns the message."""
    return helpers.expect_format_error(open_index, path, check, name, when=when)


def assert_same_parts(path, original, *, fastscan_copy=False):
    """The file ``path`` holds what ``original`` holds: the same meta (the writing library aside), user metadata and
    sections in the same order, byte for byte. ``fastscan_copy``: ``original`` is an index of a model with K <= 16
    written before format 1.3 (byte codes) and ``path`` its copy written today, whose meta "kind" is the fast-scan
    one and whose ``code_blocks`` hold the same words as the original's ``codes`` (docs/FORMAT.md section 16)."""
    meta, sections, user = parts_of(path)
    meta0, sections0, user0 = parts_of(original)
    if fastscan_copy:
        assert meta.pop("kind") == {"index": "fastscan-index", "ivf-index": "ivf-fastscan-index"}[meta0.pop("kind")]
        with open_index(path) as copy, open_index(original) as old:
            np.testing.assert_array_equal(copy.codes, old.codes)
        sections = {("codes" if name == "code_blocks" else name): array for name, array in sections.items()}
        sections["codes"] = sections0["codes"]
    assert {k: v for k, v in meta.items() if k != "library"} == {k: v for k, v in meta0.items() if k != "library"}
    assert user == user0 and list(sections) == list(sections0)
    for name in sections:
        assert sections[name].tobytes() == sections0[name].tobytes(), name
