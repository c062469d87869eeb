"""The file names of a collection folder (docs/FORMAT.md section 13.1): which names the collection writes, how a
name says what a file is, and which names a reader ignores.

    quantizer.ockq                     the shared quantizer (a quantizer file, FORMAT.md section 11), when the collection
                                       was created with a fitted one
    quantizer.<G>.ockq                 the quantizer fitted by the commit of generation G (training, retrain)
    writer.lock                        the writer's lock file (empty; locked with flock / msvcrt while a writer is open)
    manifest.<G>                       the manifest of generation G (G in decimal, zero-padded to at least 10 digits)
    segment.<G>.<i>.ock                the i-th segment file written by the commit of generation G (an index file)
    deletions.<G>.<i>.ock              the i-th deletion file written by the commit of generation G
    .pending.<16 hex>.ock              a segment written for a later commit (a distributed build's worker, or add)
    .<name>.<hex>.tmp                  a temporary file of an atomic write (ockstore._atomic)

A name that is none of these is a foreign file: readers ignore it and ``vacuum`` leaves it alone.
"""

from __future__ import annotations

import re
import secrets

__all__ = ["QUANTIZER_NAME", "LOCK_NAME", "MAX_GENERATION", "manifest_name", "segment_name", "deletions_name",
           "quantizer_name", "pending_name", "parse_manifest", "is_segment", "is_deletions", "is_quantizer",
           "is_pending", "is_temporary", "is_collection_file", "check_plain_name"]

QUANTIZER_NAME = "quantizer.ockq"
LOCK_NAME = "writer.lock"

# Generations are int64 (msgpack ints, and file names of at most 19 digits).
MAX_GENERATION = 2**63 - 1
# Generation numbers exactly as f"{g:010d}" writes them (10 digits, more without leading zeros when needed).
_MANIFEST = re.compile(r"manifest\.([0-9]{10}|[1-9][0-9]{10,18})")
_SEGMENT = re.compile(r"segment\.([0-9]{10}|[1-9][0-9]{10,18})\.(0|[1-9][0-9]{0,8})\.ock")
_DELETIONS = re.compile(r"deletions\.([0-9]{10}|[1-9][0-9]{10,18})\.(0|[1-9][0-9]{0,8})\.ock")
_QUANTIZER = re.compile(r"quantizer\.([0-9]{10}|[1-9][0-9]{10,18})\.ockq")
_PENDING = re.compile(r"\.pending\.[0-9a-f]{16}\.ock")
_TEMPORARY = re.compile(r"\..+\.[0-9a-f]+\.tmp", re.DOTALL)
# Names a manifest may reference: plain names of the folder, never a path (no separator, no leading dot).
_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,254}")


def _gen(generation):
    return f"{generation:010d}"


def manifest_name(generation):
    return f"manifest.{_gen(generation)}"


def segment_name(generation, number):
    return f"segment.{_gen(generation)}.{number}.ock"


def deletions_name(generation, number):
    return f"deletions.{_gen(generation)}.{number}.ock"


def quantizer_name(generation):
    """The quantizer file written by the commit of ``generation`` (a training commit or a retrain)."""
    return f"quantizer.{_gen(generation)}.ockq"


def pending_name():
    """A fresh hidden name for a segment written before its commit (64 random bits)."""
    return f".pending.{secrets.token_hex(8)}.ock"


def parse_manifest(name):
    """The generation of a manifest file name, or None when ``name`` is not one (exactly as manifest_name writes)."""
    match = _MANIFEST.fullmatch(name)
    if match is None:
        return None
    generation = int(match.group(1))
    if generation > MAX_GENERATION or manifest_name(generation) != name:
        return None
    return generation


def is_segment(name):
    return _SEGMENT.fullmatch(name) is not None


def is_deletions(name):
    return _DELETIONS.fullmatch(name) is not None


def is_quantizer(name):
    """Whether ``name`` is a quantizer file of the collection: quantizer.ockq or quantizer.<G>.ockq."""
    return name == QUANTIZER_NAME or _QUANTIZER.fullmatch(name) is not None


def is_pending(name):
    return _PENDING.fullmatch(name) is not None


def is_temporary(name):
    return _TEMPORARY.fullmatch(name) is not None


def is_collection_file(name):
    """Whether ``name`` is a file the collection writes (and ``vacuum`` may remove when nothing references it); the
    lock file is not in this set. A quantizer file is removed only once no kept generation references it (after a
    retrain made a new one)."""
    return (parse_manifest(name) is not None or is_segment(name) or is_deletions(name) or is_quantizer(name)
            or is_pending(name) or is_temporary(name))


def check_plain_name(name):
    """Whether ``name`` may be referenced by a manifest: a plain file name of the folder (no path)."""
    return isinstance(name, str) and _PLAIN.fullmatch(name) is not None and name not in (".", "..")
