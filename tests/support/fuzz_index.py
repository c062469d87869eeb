"""Mutation fuzzing of index files (docs/FORMAT.md I1-I9 on top of the container's R1-R23).

The storage fuzz harness (tests/support/fuzz_storage.py) mutates a small valid index file -- every truncation, every
single byte flipped with two masks, then hypothesis-driven flips, insertions, deletions and header edits -- and opens
each variant with :func:`open_and_search`: ``ockstore.open_index``, whose ``verify()`` here also searches the index
(ADC and SDC), after a successful verify and after a failed one alike, so that a corrupt file that opens must at least
not crash a search. Only FormatError may escape; every change after the header must be refused.

The tests (tests/indexfile/test_index_fuzz.py) run this file as a script in a subprocess, so that a hard crash of
the reader fails the test instead of killing pytest::

    python tests/support/fuzz_index.py --file valid.ock --workdir DIR --random 4000 --seed 3 [--meta-edits 1500]

``--meta-edits N`` adds N hypothesis-driven edits of the index layer's meta map itself (the storage harness replaces
whole top-level keys): one key of meta, or of one of its maps (``model`` of a segment by reference, ``params``,
``ivf``), replaced by an arbitrary value -- often one of the file's own -- or deleted, the header re-packed. A segment
by reference (docs/FORMAT.md section 18) is fuzzed in a workdir that also holds its quantizer file, where open_index
finds it (``make_segment_seed_file``).

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

import msgpack
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


def make_segment_seed_file(folder, n_codewords=4, ivf=False):
    """A small valid segment by reference (docs/FORMAT.md section 18; about 1 KB) in ``folder``, next to its quantizer
    file ``quantizer.ockq``: the seed of make_seed_file (or make_ivf_seed_file) written as a collection writes its
    segments, sq8 stored vectors added (their ranges are in the quantizer file). Returns the segment's path."""
    from ockstore.indexfile.reader import load_linked_model

    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 4)).astype(np.float32)
    q = ockstore.OCKM(2, 2, 2, n_codewords=n_codewords, n_iter=2, seed=0)
    model = (ockstore.IVF(3, q, n_iter=2) if ivf else q).fit(X)
    ockstore.save_quantizer(os.path.join(folder, "quantizer.ockq"), model)
    linked = load_linked_model(os.path.join(folder, "quantizer.ockq"))
    path = os.path.join(folder, "segment.ock")
    with ockstore.IndexWriter(path, linked.model, norm_encoding="u8", store_vectors="sq8", metadata={"note": "fuzz"},
                              _model_ref=linked.ref) as w:
        w.add(X[:6], np.arange(6) * 3 + 1)
    return path


def meta_edits(n, seed):
    """The mutation step of ``--meta-edits`` (module docstring), for fuzz_storage.fuzz_file's ``extra``."""

    def step(runner):
        import fuzz_storage
        from hypothesis import HealthCheck, Phase, given, settings
        from hypothesis import seed as hypothesis_seed
        from hypothesis import strategies as st

        data = runner.original
        preamble, header, rest = fuzz_storage._header_parts(data)
        meta = header["meta"]
        paths = [(key,) for key in meta] + [("extra",)] + [
            (key, sub) for key, value in meta.items() if isinstance(value, dict) for sub in [*value, "extra"]]
        own = [value for value in meta.values() if not isinstance(value, dict)] + [
            sub for value in meta.values() if isinstance(value, dict) for sub in value.values()]
        fingerprint = meta.get("model", {}).get("fingerprint", "0" * 64)
        scalars = st.one_of(st.sampled_from(own + ["segment", "index", "fastscan-index", "ivf-index", "quantizer",
                                                   "vectors", "../quantizer.ockq", "case.ock", ".case.ock.next",
                                                   fingerprint[:-1] + "f", fingerprint.upper(), ""]),
                            st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(),
                            st.text(max_size=8), st.binary(max_size=4))
        values = st.recursive(scalars, lambda children: st.one_of(
            st.lists(children, max_size=4), st.dictionaries(st.sampled_from(["file", "fingerprint", "dim", "x"]),
                                                             children, max_size=3)), max_leaves=8)

        @settings(max_examples=max(1, n), database=None, deadline=None, derandomize=False,
                  phases=(Phase.generate, Phase.shrink), suppress_health_check=list(HealthCheck))
        @hypothesis_seed(seed + 7)
        @given(st.sampled_from(paths), values, st.booleans())
        def edit(path, value, delete):
            edited = msgpack.unpackb(msgpack.packb(header, use_bin_type=True), raw=False)  # a deep copy
            target = edited["meta"]
            for key in path[:-1]:
                target = target[key]
            if delete:
                target.pop(path[-1], None)
            else:
                target[path[-1]] = value
            packed = fuzz_storage._pack_to_length(edited, len(data) - len(rest) - fuzz_storage.PREAMBLE.size)
            mutated = fuzz_storage.PREAMBLE.pack(*preamble, len(packed)) + packed + rest
            what = "del" if delete else f"= {value!r}"
            runner.run("meta", mutated, False, f"meta{''.join(f'[{k!r}]' for k in path)} {what}"[:300])

        try:
            edit()
        except Exception as exc:  # hypothesis re-raises the first (shrunk) error; the runner already counted it
            runner.failures.append({"kind": "harness", "case": "meta_edits", "problem": repr(exc)})

    return step


def main(argv=None):
    import fuzz_storage

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--random", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--meta-edits", type=int, default=0)
    args = parser.parse_args(argv)
    extra = [meta_edits(args.meta_edits, args.seed)] if args.meta_edits else []
    report = fuzz_storage.fuzz_file(open_and_search, args.file, args.workdir, n_random=args.random, seed=args.seed,
                                    extra=extra)
    summary = {"cases": report["cases"], "counts": report["counts"], "n_failures": len(report["failures"]),
               "failures": report["failures"][:5], "checks": dict(CHECKS), "searches": SEARCHES[0]}
    print(json.dumps(summary))
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
