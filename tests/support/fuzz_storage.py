"""Mutation fuzzing of ockstore container files: every corrupt variant of a valid file must be refused cleanly.

The harness takes an *opener*: a callable ``path -> object`` whose object has ``verify()`` (and, if it has one,
``close()``). ``ockstore.storage.open_file`` is one; the index layer's ``open_index`` is meant to be another, so the
same harness checks full index files. For each mutated copy of a valid file it calls ``opener(path).verify()`` and
requires one of two outcomes:

* a FormatError (from opening or from verify), or
* success, which is only allowed where the container can legitimately not notice: a change inside the preamble's
  minor/reserved fields or inside the header that still parses as a valid header. Any change after the header
  (section bytes or padding), any truncation and any growth of the file must be refused (docs/FORMAT.md R16-R18).

Any other exception, or a success where a refusal is required, is a failure and is reported with the case.

Mutations: every truncation length; every single-byte flip with two masks (exhaustive, deterministic); then
hypothesis-generated multi-byte flips, insertions, deletions and structured header edits (one header field replaced
by an arbitrary msgpack value, the header re-packed with a correct length).

Library use::

    from fuzz_storage import fuzz_file
    report = fuzz_file(opener, "valid.ock", workdir, n_random=8000, seed=0)
    assert not report["failures"], report["failures"][:3]

Script use (the tests run it this way, so that a hard crash fails one subprocess and not pytest)::

    python tests/support/fuzz_storage.py --opener ockstore.storage:open_file --file valid.ock --workdir DIR \
        --random 8000

The script prints one JSON line (the report without the full failure list) and exits 0 when there are no failures,
1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import struct
import sys
import traceback

import msgpack

PREAMBLE = struct.Struct("<8sHHIQ")
MINOR_AND_RESERVED = range(10, 16)  # preamble bytes a reader of major 1 ignores or accepts any value of


def _format_error_class():
    from ockstore.errors import FormatError

    return FormatError


class _Runner:
    """Runs one case at a time against ``opener`` and keeps the tally."""

    def __init__(self, opener, original, workdir, max_failures):
        self.opener = opener
        self.original = bytes(original)
        self.header_end = PREAMBLE.size + PREAMBLE.unpack_from(self.original)[4]
        self.path = os.path.join(workdir, "case.ock")
        self.tmp = os.path.join(workdir, ".case.ock.next")
        self.format_error = _format_error_class()
        self.counts = {}
        self.failures = []
        self.max_failures = max_failures

    def run(self, kind, data, must_refuse, description):
        """Write ``data``, open and verify it; returns "ok" or "refused" and records failures."""
        with open(self.tmp, "wb") as f:
            f.write(data)
        os.replace(self.tmp, self.path)  # a new inode per case: mappings of earlier cases never see this one
        outcome, detail = "ok", None
        obj = None
        try:
            obj = self.opener(self.path)
            obj.verify()
        except self.format_error:
            outcome = "refused"
        except Exception as exc:  # anything else is a bug in the reader
            outcome = "crashed"
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            detail += "\n" + "".join(traceback.format_tb(exc.__traceback__)[-3:])
        finally:
            close = getattr(obj, "close", None)
            if close is not None:
                close()
        key = f"{kind}:{outcome}"
        self.counts[key] = self.counts.get(key, 0) + 1
        if outcome == "crashed" or (outcome == "ok" and must_refuse):
            if len(self.failures) < self.max_failures:
                problem = detail or "corruption not detected (open and verify succeeded)"
                self.failures.append({"kind": kind, "case": description, "problem": problem})
        return outcome

    @property
    def total(self):
        return sum(self.counts.values())


def _flip_must_be_refused(runner, positions):
    """A change after the header must be caught (R16-R18); so must one in the magic, major version or header
    length. Changes in the minor/reserved fields or inside the header may be harmless."""
    for pos in positions:
        if pos >= runner.header_end:
            continue
        if pos in MINOR_AND_RESERVED or pos >= PREAMBLE.size:
            return False
    return True


def _exhaustive(runner):
    data = runner.original
    size = len(data)
    for n in range(size):  # every truncation (R16): the file no longer ends where the header says
        runner.run("truncate", data[:n], True, f"truncate to {n} of {size} bytes")
    runner.run("extend", data + b"\0", True, "one zero byte appended")
    for mask in (0xFF, 0x01):
        for pos in range(size):
            mutated = bytearray(data)
            mutated[pos] ^= mask
            must = _flip_must_be_refused(runner, [pos])
            runner.run("flip1", bytes(mutated), must, f"byte {pos} xor {mask:#04x}")


def _header_parts(data):
    magic, major, minor, reserved, length = PREAMBLE.unpack_from(data)
    header = msgpack.unpackb(data[PREAMBLE.size:PREAMBLE.size + length], raw=False)
    return (magic, major, minor, reserved), header, data[PREAMBLE.size + length:]


def _pack_to_length(header, target):
    """Pack ``header``, padded through an unknown top-level key (ignored by readers, R8) to exactly ``target`` bytes
    when it would be shorter, so that the section bytes stay at the offsets the header names and the edit reaches
    the checks behind the layout ones."""
    packed = msgpack.packb(header, use_bin_type=True)
    missing = target - len(packed)
    if missing < 7 or len(header) >= 15:  # too little room, or adding a key would widen the map's own header
        return packed
    # "~pad" packs as 5 bytes; a bin of n bytes adds 2 (n < 256) or 3 (n < 65536) bytes of its own.
    n = missing - 7 if missing - 7 < 256 else missing - 8
    padded = msgpack.packb({**header, "~pad": bytes(n)}, use_bin_type=True)
    return padded if len(padded) == target else packed


def _random(runner, n_random, seed):
    """Hypothesis-driven mutations; ``n_random`` cases in total, split over four kinds."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st

    data = runner.original
    size = len(data)
    preamble, header, rest = _header_parts(data)
    n_sections = len(header.get("sections", []))
    section_keys = ["name", "dtype", "shape", "offset", "length", "crc32", "extra"]
    top_keys = ["sections", "meta", "user", "extra"]

    def configured(n):
        return settings(max_examples=max(1, n), database=None, deadline=None, derandomize=False,
                        phases=(Phase.generate, Phase.shrink), suppress_health_check=list(HealthCheck))

    interesting_ints = st.sampled_from([0, 1, 63, 64, 65, 127, 128, 255, 256, size - 1, size, size + 1,
                                        runner.header_end, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63,
                                        2**64 - 1, -1, -(2**63)])
    # Values taken from the file itself make duplicate names, overlapping offsets and swapped shapes likely.
    existing = [value for entry in header.get("sections", []) if isinstance(entry, dict) for value in entry.values()]
    scalars = st.one_of(st.sampled_from(existing or [0]), st.none(), st.booleans(),
                        st.integers(-(2**63), 2**64 - 1), interesting_ints,
                        st.floats(), st.text(max_size=6), st.binary(max_size=6),
                        st.sampled_from(["<u1", "<u2", "<i4", "<u4", "<i8", "<f4", "<f8", "<f2", ">f4", "|u1", "",
                                         "a" * 256]))
    shapes = st.lists(st.sampled_from([0, 1, 2, 3, 8, 2**31, 2**62, 2**63 - 1, 2**64 - 1]), max_size=40)
    values = st.recursive(scalars | shapes, lambda children: st.one_of(
        st.lists(children, max_size=40), st.dictionaries(st.text(max_size=4), children, max_size=4)), max_leaves=50)

    share = max(1, n_random // 4)

    @configured(share)
    @hypothesis_seed(seed)
    @given(st.lists(st.tuples(st.integers(0, size - 1), st.integers(1, 255)), min_size=1, max_size=6))
    def flips(changes):
        mutated = bytearray(data)
        for pos, mask in changes:
            mutated[pos] ^= mask
        changed = [pos for pos in range(size) if mutated[pos] != data[pos]]
        if not changed:
            return
        must = _flip_must_be_refused(runner, changed)
        runner.run("flip", bytes(mutated), must, f"xor {changes}")

    @configured(share)
    @hypothesis_seed(seed + 1)
    @given(st.integers(0, size), st.binary(min_size=1, max_size=70))
    def insertions(pos, inserted):
        mutated = data[:pos] + inserted + data[pos:]
        # After the header, an insertion shifts bytes past the header's offsets and grows the file: refused (R16).
        runner.run("insert", mutated, pos >= runner.header_end, f"insert {inserted!r} at {pos}")

    @configured(share)
    @hypothesis_seed(seed + 2)
    @given(st.integers(0, size - 1), st.integers(1, 70))
    def deletions(pos, count):
        mutated = data[:pos] + data[pos + count:]
        runner.run("delete", mutated, pos >= runner.header_end, f"delete {count} bytes at {pos}")

    @configured(n_random - 3 * share)
    @hypothesis_seed(seed + 3)
    @given(st.integers(-1, max(0, n_sections - 1)), st.sampled_from(section_keys), st.sampled_from(top_keys),
           values, st.booleans())
    def header_edits(section, section_key, top_key, value, delete):
        edited = msgpack.unpackb(msgpack.packb(header, use_bin_type=True), raw=False)  # a deep copy
        if section >= 0 and n_sections:
            target, key = edited["sections"][section], section_key
            where = f"sections[{section}][{key!r}]"
        else:
            target, key = edited, top_key
            where = f"[{key!r}]"
        if delete:
            target.pop(key, None)
            where = "del " + where
        else:
            target[key] = value
            where = f"{where} = {value!r}"[:300]
        packed = _pack_to_length(edited, len(data) - len(rest) - PREAMBLE.size)
        mutated = PREAMBLE.pack(*preamble, len(packed)) + packed + rest
        runner.run("header", mutated, False, where)

    for test in (flips, insertions, deletions, header_edits):
        try:
            test()
        except Exception as exc:  # hypothesis re-raises the first (shrunk) error; the runner already counted it
            runner.failures.append({"kind": "harness", "case": test.__name__, "problem": repr(exc)})


def fuzz_file(opener, valid_path, workdir, *, n_random=8000, seed=0, exhaustive=True, max_failures=20, extra=()):
    """Mutate the valid file at ``valid_path`` and check every variant with ``opener``; returns a report dict.

    Parameters
    ----------
    opener : callable (path -> object with verify())
    valid_path : str or os.PathLike
        A small valid file (a few hundred bytes keeps the exhaustive part quick: it runs 3 cases per byte).
    workdir : str or os.PathLike
        An existing folder for the mutated copies.
    n_random : int
        Hypothesis cases, split evenly over flips, insertions, deletions and header edits.
    extra : sequence of callables
        More mutations of a layer above the container, each called with the runner after the others (its
        ``original`` bytes, and ``run(kind, data, must_refuse, description)`` for each case).

    Returns
    -------
    dict with ``cases`` (int), ``counts`` ({"kind:outcome": n}, outcomes "ok", "refused", "crashed") and
    ``failures`` (list of {"kind", "case", "problem"}, at most ``max_failures``).
    """
    with open(valid_path, "rb") as f:
        original = f.read()
    runner = _Runner(opener, original, os.fspath(workdir), max_failures)
    if runner.run("original", original, False, "the unmodified file") != "ok":
        runner.failures.append({"kind": "original", "case": "the unmodified file", "problem": "refused"})
    if exhaustive:
        _exhaustive(runner)
    if n_random:
        _random(runner, n_random, seed)
    for step in extra:
        step(runner)
    return {"cases": runner.total, "counts": dict(sorted(runner.counts.items())), "failures": runner.failures}


def _load_opener(spec):
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--opener", default="ockstore.storage:open_file", help="module:callable (path -> object)")
    parser.add_argument("--file", required=True, help="a small valid file")
    parser.add_argument("--workdir", required=True, help="an existing folder for the mutated copies")
    parser.add_argument("--random", type=int, default=8000, help="hypothesis cases (default 8000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    report = fuzz_file(_load_opener(args.opener), args.file, args.workdir, n_random=args.random, seed=args.seed)
    summary = {"cases": report["cases"], "counts": report["counts"], "n_failures": len(report["failures"]),
               "failures": report["failures"][:5]}
    print(json.dumps(summary))
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    # the repository's ockstore (this file is tests/support/fuzz_storage.py)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    sys.exit(main())
