"""The input files of the ``ockstore`` subcommands and the data errors the command finds itself (``CommandError``:
printed as one line, exit status 1). Imports no other module of the command but options.py.
"""

from __future__ import annotations

import os

import numpy as np

from ockstore import paths, vecfiles

from .options import DEFAULT_CHUNK, ID_FILES

__all__ = ["CommandError", "read_vectors", "check_dim", "check_output", "read_allowed_ids", "base_ids", "iter_base"]


class CommandError(Exception):
    """A data error detected by the command itself (message printed as is, exit status 1)."""


def read_vectors(path, what, limit=None):
    """Vectors of a file (its own dtype), the first ``limit`` rows when given (reading no further)."""
    if limit is None:
        X = vecfiles.read_vecs(path)
    else:
        parts, have = [], 0
        chunks = vecfiles.iter_vecs(path, chunk_size=min(limit, DEFAULT_CHUNK))
        try:
            for chunk in chunks:
                parts.append(chunk[: limit - have])
                have += len(parts[-1])
                if have >= limit:
                    break
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        X = parts[0] if len(parts) == 1 else np.concatenate(parts)
    if X.dtype.kind not in "iuf":
        raise CommandError(f"{path}: {what} must be numeric vectors, got dtype {X.dtype}")
    return X


def check_dim(path, what, dim, expected, owner):
    """CommandError when ``dim`` is not ``expected`` (None: anything, as a collection without vectors takes)."""
    if expected is not None and dim != expected:
        raise CommandError(f"{path}: {what} have dimension {dim}, but {owner} expects {expected}")


def check_output(path, what):
    """The folder of an output file must exist and the path must not be a directory (checked before any work)."""
    try:
        paths.check_output_file(path, what)
    except (FileNotFoundError, ValueError) as exc:
        raise CommandError(str(exc)) from None


def read_allowed_ids(path):
    """The ids of ``search --allow``: int64, shape (n,), in file order (duplicates and negative values kept: search
    ignores ids the index does not hold).

    ``.ivecs``/``.ivecs.gz``: every value of every row (a result file of `ockstore search -o` works; its -1 padding
    is ignored); ``.npy``: integer ids of shape (N,) or (N, 1) (ockstore.vecfiles.read_ids); any other name: a text
    file of decimal integers, whitespace separated (one per line), '#' starting a comment.
    """
    path = paths.check_input_file(path, "path")  # a missing file is reported as such, whatever its name
    name = os.path.basename(path).lower()
    if name.endswith((".ivecs", ".ivecs.gz")):
        X = vecfiles.read_vecs(path)
        return np.ascontiguousarray(X, dtype=np.int64).reshape(-1)
    if name.endswith(".npy"):
        return vecfiles.read_ids(path)
    if name.endswith((".fvecs", ".bvecs", ".fvecs.gz", ".bvecs.gz", ".hdf5", ".h5", ".gz")):
        raise CommandError(f"{path}: not an ids file; --allow reads {ID_FILES}")
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CommandError(f"{path}: not a text file of integer ids (nor .ivecs or .npy)") from None
    lines = [line.partition("#")[0] for line in text.splitlines()]
    tokens = " ".join(lines).split()
    try:
        return np.array(tokens, dtype=np.str_).astype(np.int64) if tokens else np.empty(0, dtype=np.int64)
    except (ValueError, OverflowError):
        pass
    for number, line in enumerate(lines, 1):  # find the bad token, to name its line
        for token in line.split():
            try:
                value = int(token, 10)
            except ValueError:
                raise CommandError(f"{path}: line {number}: expected an integer id, got {token[:40]!r}") from None
            if not np.iinfo(np.int64).min <= value <= np.iinfo(np.int64).max:
                raise CommandError(f"{path}: line {number}: id {token[:40]} is out of the int64 range")
    raise CommandError(f"{path}: not a text file of integer ids")  # pragma: no cover - numpy refused, int() did not


def base_ids(args, dim, owner, counted):
    """(ids, total) of a base file about to be streamed (``args.base``, ``args.ids``): the ids of ``--ids`` (or None)
    and, when ``counted`` or ids are given, the number of vectors (else None), after checking the file's dimension
    against ``dim`` (of ``owner``) and the number of ids against the number of vectors."""
    ids = vecfiles.read_ids(args.ids) if args.ids is not None else None
    total = None
    if counted or ids is not None:
        total, file_dim = vecfiles.count_vecs(args.base)
        check_dim(args.base, "base vectors", file_dim, dim, owner)
        if ids is not None and len(ids) != total:
            raise CommandError(f"{args.ids}: {len(ids):,} ids for {total:,} base vectors in {args.base}")
    return ids, total


def iter_base(args, ids, dim, owner):
    """(chunk, its ids or None, its first row in the file) of ``args.base``, ``args.chunk_size`` rows at a time, each
    chunk checked against ``dim`` and the ids (CommandError when the file has more vectors than ids or fewer)."""
    done = 0
    for chunk in vecfiles.iter_vecs(args.base, chunk_size=args.chunk_size):
        if dim is not None and chunk.shape[1] != dim:
            check_dim(args.base, "base vectors", chunk.shape[1], dim, owner)
        stop = done + chunk.shape[0]
        if ids is not None and stop > len(ids):
            raise CommandError(f"{args.ids}: {len(ids):,} ids, but {args.base} has more base vectors")
        yield chunk, None if ids is None else ids[done:stop], done
        done = stop
    if ids is not None and done != len(ids):
        raise CommandError(f"{args.ids}: {len(ids):,} ids for {done:,} base vectors in {args.base}")
