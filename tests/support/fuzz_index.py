"""Mutation fuzzing of index files (docs/FORMAT.md I1-I9 on top of the container's R1-R23).

The storage fuzz harness (tests/support/fuzz_storage.py) mutates a small valid index file -- every truncation, every
single byte flipped with two masks, then hypothesis-driven flips, insertions, deletions and header edits -- and opens
each variant with :func:`open_and_search`: ``ockstore.open_index``, whose ``verify()`` here also searches the index
(ADC and SDC), after a successful verify and after a failed one alike, so that a corrupt file that opens must at least
not crash a search. Only FormatError may escape; every change after the header must be refused.

The tests (tests/indexfile/test_index_fuzz.py) run this file as a script in a subprocess, so that a hard crash of
the reader fails the test instead of killing pytest::

    python tests/support/fuzz_index.py --file valid.ock --workdir DIR --random 4000 --seed 3

prints one JSON line: the harness's report plus ``checks`` (how often each FormatError check name was raised) and
``searches`` (how many searches ran), and exits 0 when there are no failures.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
if __name__ == "__main__":  # run as a script: the repository's ockstore and the harness next to this file
    sys.path[:0] = [str(REPO), str(HERE)]

import ockstore  # noqa: E402
from ockstore.errors import FormatError  # noqa: E402

CHECKS = collections.Counter()  # FormatError check names seen by open_and_search (script use)
SEARCHES = [0]


def _check_name(message, path):
    prefix = repr(os.fspath(path)) + ": "
    return message[len(prefix):].split(":", 1)[0] if message.startswith(prefix) else "?"


class _Searched:
    """What the harness gets from the opener: ``verify()`` verifies and searches (ADC and SDC); ``close()``."""

    def __init__(self, index, path):
        self.index = index
        self.path = path

    def verify(self):
        try:
            self.index.verify()
        except FormatError as exc:
            CHECKS[_check_name(str(exc), self.path)] += 1
            raise
        finally:  # search a file that failed verify too: a corrupt file that opens must not crash a search
            queries = np.linspace(-2.0, 2.0, 3 * self.index.dim, dtype=np.float32).reshape(3, self.index.dim)
            probes = [{}]
            if isinstance(self.index, ockstore.IVFIndex):  # an inverted file: every list scanned too
                probes.append({"n_probe": self.index.n_lists})
            for distance in ("adc", "sdc"):
                for probe in probes:
                    D, I = self.index.search(queries, 4, distance=distance, n_threads=1, **probe)
                    if D.shape != (3, 4) or I.shape != (3, 4):
                        raise AssertionError(f"search returned shapes {D.shape}, {I.shape}")
                    SEARCHES[0] += 1
            self.index.info()

    def close(self):
        self.index.close()


def open_and_search(path):
    """The harness's opener: open_index(path), recording the check name of any FormatError."""
    try:
        return _Searched(ockstore.open_index(path), path)
    except FormatError as exc:
        CHECKS[_check_name(str(exc), path)] += 1
        raise


def make_seed_file(path, n_codewords=4):
    """A small valid index (about 2 KB): OCKM P=4 M=2 C=2 T=2 K=``n_codewords``, 6 vectors, user ids, u8 norms, user
    metadata. Every optional section is present, so every index-layer check has something to find. K <= 16: a
    fast-scan file (docs/FORMAT.md section 16: code_blocks); K > 16: codes one byte per word."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 4)).astype(np.float32)
    q = ockstore.OCKM(2, 2, 2, n_codewords=n_codewords, n_iter=2, seed=0).fit(X)
    ockstore.build_index(path, q, X[:6], np.arange(6) * 3 + 1, norm_encoding="u8", metadata={"note": "fuzz"})
    return path


def make_ivf_seed_file(path, n_codewords=4):
    """A small valid inverted-file index (docs/FORMAT.md section 14): IVF of 3 lists over OCKM P=4 M=2 C=2 T=2
    K=``n_codewords``, 6 vectors, user ids, u8 norms, user metadata (K <= 16: its lists in fast-scan blocks)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 4)).astype(np.float32)
    ivf = ockstore.IVF(3, ockstore.OCKM(2, 2, 2, n_codewords=n_codewords, n_iter=2, seed=0), n_iter=2).fit(X)
    ockstore.build_index(path, ivf, X[:6], np.arange(6) * 3 + 1, norm_encoding="u8", metadata={"note": "fuzz"})
    return path


def main(argv=None):
    import fuzz_storage

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--random", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    report = fuzz_storage.fuzz_file(open_and_search, args.file, args.workdir, n_random=args.random, seed=args.seed)
    summary = {"cases": report["cases"], "counts": report["counts"], "n_failures": len(report["failures"]),
               "failures": report["failures"][:5], "checks": dict(CHECKS), "searches": SEARCHES[0]}
    print(json.dumps(summary))
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
