"""Plain helpers shared by several test files (no fixtures: those live in tests/conftest.py).

Imported as ``from helpers import ...``: tests/conftest.py puts this folder (tests/support/) on sys.path, and the helper
scripts run as ``python tests/support/SCRIPT`` (kill writers, fuzzers) find it next to themselves.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import threading
import tracemalloc
import zlib
from dataclasses import dataclass
from pathlib import Path

import msgpack
import numpy as np
import pytest

from ockstore.storage import MAGIC

SUPPORT = Path(__file__).resolve().parent  # tests/support: these modules and the helper scripts
TESTS = SUPPORT.parent
REPO = TESTS.parent


def data_root():
    """The folder holding the real datasets (``sift-real/``, ``minilm-real/``): $OCKSTORE_DATA when set, else
    ``shared/data`` in the nearest folder above the repository that has one (``<repo>/../shared/data`` normally; a
    clone made one level deeper finds it too), else ``<repo>/../shared/data`` (absent: the tests that need it skip,
    saying where they looked)."""
    if os.environ.get("OCKSTORE_DATA"):
        return Path(os.environ["OCKSTORE_DATA"])
    for folder in REPO.parents:
        if (folder / "shared" / "data").is_dir():
            return folder / "shared" / "data"
    return REPO.parent / "shared" / "data"


# ------------------------------------------------------------------------------------------------------------ data
def gaussian_mixture(n, dim, *, n_clusters=8, spread=4.0, seed=0, dtype=np.float32):
    """n seeded vectors around ``n_clusters`` centres: a structured dataset that quantizers can actually learn.

    Each dimension has its own scale (1 down to 0.1) so that the rotation and the subspace split matter.
    """
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=spread, size=(n_clusters, dim))
    scales = np.linspace(1.0, 0.1, dim)
    X = centres[rng.integers(0, n_clusters, size=n)] + rng.normal(size=(n, dim)) * scales
    return X.astype(dtype)


def vecs_sample(kind, n=23, d=5, seed=0):
    """n seeded rows of d values for a vector file of ``kind`` ("fvecs", "bvecs", "ivecs"), in its dtype."""
    rng = np.random.default_rng(seed)
    if kind == "fvecs":
        return rng.normal(size=(n, d)).astype(np.float32)
    if kind == "bvecs":
        return rng.integers(0, 256, size=(n, d)).astype(np.uint8)
    return rng.integers(-(2**31), 2**31 - 1, size=(n, d), dtype=np.int64).astype(np.int32)


def read_only(*arrays):
    """The arrays, made read-only (module-scoped fixtures share them: a test that writes into one fails at once)."""
    for arr in arrays:
        arr.flags.writeable = False
    return arrays


def seeded_dataset(draw, n_learn, n_base, n_queries, id_scale, id_offset):
    """(learn, base, queries, ids), read-only: ``draw(n, seed)`` with seeds 1, 2, 3, and distinct, shuffled user ids
    of the base (a permutation of 0..n_base-1 times ``id_scale`` plus ``id_offset``)."""
    ids = np.random.default_rng(4).permutation(n_base).astype(np.int64) * id_scale + id_offset
    return read_only(draw(n_learn, 1), draw(n_base, 2), draw(n_queries, 3), ids)


def random_rotation(P, seed):
    """A seeded orthogonal P x P matrix (QR of a Gaussian matrix, signs fixed), float32."""
    rng = np.random.default_rng(seed)
    Q, Rq = np.linalg.qr(rng.normal(size=(P, P)))
    return (Q * np.sign(np.diag(Rq))).astype(np.float32)


# ------------------------------------------------------------------------------------------- folders and paths
def listing(folder):
    return sorted(os.listdir(folder))


def is_hidden_temp(name, target):
    """Whether ``name`` is a writer's hidden temporary file for ``target`` (".TARGET.<hex>.tmp")."""
    return re.fullmatch(rf"\.{re.escape(target)}\.[0-9a-f]+\.tmp", name) is not None


def returns_within(fn, seconds=10.0):
    """Run fn in a daemon thread: ('ok', value) or ('raised', exception). Fails the test if the call is still
    blocked after ``seconds`` (opening a FIFO for reading blocks forever: a guard against hangs, not a timing)."""
    box = {}

    def run():
        try:
            box["result"] = ("ok", fn())
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["result"] = ("raised", exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the call blocked (it must not open a FIFO)"
    return box["result"]


# ------------------------------------------------------------------------------------------------- container files
def align64(n):
    return (n + 63) // 64 * 64


def code_of(array):
    return f"<{array.dtype.kind}{array.dtype.itemsize}"


_NOT_GIVEN = object()


def hand_file(sections=(), meta=None, user=None, *, overrides=None, drop=None, extra=None, header_obj=_NOT_GIVEN,
              header_bytes=None, phantom=(), magic=MAGIC, major=1, minor=0, reserved=0, header_length=None,
              tail=b""):
    """Container bytes built by hand, following docs/FORMAT.md and not the writer's code.

    ``sections`` is a list of (name, ndarray); the data sit at the canonical offsets, while ``overrides``
    ({name: {key: value}}) and ``drop`` ({name: [keys]}) change what the header says about them. ``extra`` adds
    top-level keys; ``header_obj`` replaces the header object and ``header_bytes`` the packed header entirely;
    ``header_length`` replaces H in the preamble; ``tail`` is appended. ``phantom`` lists sections
    (name, dtype, shape) placed after the others whose bytes are not written (the caller extends the file).
    """
    meta = {} if meta is None else meta
    user = {} if user is None else user
    blobs = [(name, a, a.tobytes(order="C")) for name, a in sections]
    length = 0
    while True:  # offsets depend on H and H on the offsets: repeat until H is stable
        entries, places, end = [], [], 24 + length
        for name, a, blob in blobs:
            offset = align64(end)
            entry = {"name": name, "dtype": code_of(a), "shape": list(a.shape), "offset": offset,
                     "length": len(blob), "crc32": zlib.crc32(blob)}
            entry.update((overrides or {}).get(name, {}))
            for key in (drop or {}).get(name, ()):
                del entry[key]
            entries.append(dict(sorted(entry.items())))  # canonical: every map's keys in ascending order
            places.append(offset)
            end = offset + len(blob)
        for name, code, shape in phantom:
            nbytes = int(np.prod(shape, dtype=object)) * np.dtype(code).itemsize
            entries.append({"crc32": 0, "dtype": code, "length": nbytes, "name": name, "offset": align64(end),
                            "shape": list(shape)})
            end = align64(end) + nbytes
        header = {"meta": meta, "sections": entries, "user": user, **(extra or {})}
        if header_obj is not _NOT_GIVEN:
            header = header_obj
        raw = header_bytes if header_bytes is not None else msgpack.packb(header, use_bin_type=True)
        if len(raw) == length:
            break
        length = len(raw)
    out = bytearray(struct.pack("<8sHHIQ", magic, major, minor, reserved,
                                len(raw) if header_length is None else header_length))
    out += raw
    for (name, a, blob), offset in zip(blobs, places):
        out += bytes(offset - len(out))
        out += blob
    return bytes(out + tail)


def header_end_of(data):
    """24 + H: where the header of a container file ends (docs/FORMAT.md: H is the u64 at byte 16 of the preamble).

    ``data``: the file's bytes (at least its 24-byte preamble) or its path (only the preamble is read).
    """
    if isinstance(data, (str, os.PathLike)):
        with open(data, "rb") as fh:
            data = fh.read(24)
    return 24 + struct.unpack_from("<Q", data, 16)[0]


def header_of(data):
    """The header map of container bytes (at least the preamble and the header)."""
    return msgpack.unpackb(data[24:header_end_of(data)])


def expect_format_error(opener, path, check, name=None, *, when="open"):
    """``opener(path)`` (and, for when="verify", its ``verify()``, the file opening fine) must raise FormatError
    whose message starts with the file and the check ("'PATH': CHECK: ...") and names the section or meta key
    ``name``; returns the message."""
    from ockstore.errors import FormatError

    if when == "open":
        with pytest.raises(FormatError) as info:
            opener(path)
    else:
        with opener(path) as f:
            with pytest.raises(FormatError) as info:
                f.verify()
    message = str(info.value)
    assert message.startswith(repr(os.fspath(path)) + ": " + check + ":"), message
    assert str(path) in message, message
    if name is not None:
        assert repr(name) in message, message
    return message


def write_sparse(path, data):
    """Write container bytes whose last sections were left out (``hand_file(phantom=...)``), then extend the file to
    the end its header claims with a hole: no disk space, no data. Skips the test on a file system without holes."""
    header = header_of(data)
    end = max([header_end_of(data)] + [entry["offset"] + entry["length"] for entry in header["sections"]])
    path = Path(path)
    path.write_bytes(data)
    with open(path, "r+b") as fh:
        fh.truncate(end)
    if os.stat(path).st_blocks * 512 > 2**30:
        pytest.skip("the file system does not make sparse files")
    return path


# ------------------------------------------------------------------------------------------------- cost of a call
def _mapped_rss(path):
    """Bytes of ``path``'s memory mappings resident in this process (/proc/self/smaps), None without /proc."""
    target = os.path.realpath(path)
    try:
        with open("/proc/self/smaps") as smaps:
            lines = smaps.read().splitlines()
    except OSError:
        return None
    total, inside = 0, False
    for line in lines:
        first = line.split(None, 1)[0]
        if "-" in first and not first.endswith(":"):  # a mapping's header line: "start-end perms offset dev inode path"
            fields = line.split(None, 5)
            inside = len(fields) == 6 and fields[5] == target
        elif inside and first == "Rss:":
            total += int(line.split()[1]) * 1024
    return total


def _rchar():
    """Bytes this process has read through read-like system calls (/proc/self/io), None without /proc."""
    try:
        with open("/proc/self/io") as io:
            return int(next(line for line in io if line.startswith("rchar")).split()[1])
    except OSError:
        return None


@dataclass
class ReadCost:
    """What a call read of a file (see ``read_cost``); None where the platform cannot tell."""

    explicit: int              # bytes returned by os.pread / os.read during the call, counted by wrapping them
    syscalls: int | None       # bytes read by read-like system calls during the call (rchar of /proc/self/io)
    mapped: int | None         # resident bytes of the file's memory mappings after the call (pages touched)
    allocated: int             # peak of the memory Python allocated during the call (tracemalloc)


def read_cost(call, path):
    """(call(), ReadCost): run ``call`` and measure, deterministically, what it read of the file at ``path``.

    ``explicit`` counts the bytes the os.pread/os.read wrappers returned (every explicit read of the file, and any
    other in the meantime); ``mapped`` sums Rss over the mappings of ``path``, so a pass over mapped data shows as
    resident pages; ``allocated`` catches copies. None of them depends on how busy the machine is.
    """
    counted = [0]
    real = {name: getattr(os, name) for name in ("pread", "read") if hasattr(os, name)}

    def counting(name):
        def wrapper(*args, **kwargs):
            data = real[name](*args, **kwargs)
            counted[0] += len(data)
            return data
        return wrapper

    rchar_before = _rchar()
    tracemalloc.start()
    for name in real:
        setattr(os, name, counting(name))
    try:
        result = call()
    finally:
        for name, fn in real.items():
            setattr(os, name, fn)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    rchar_after = _rchar()
    syscalls = None if rchar_before is None or rchar_after is None else rchar_after - rchar_before
    return result, ReadCost(counted[0], syscalls, _mapped_rss(path), peak)


# ------------------------------------------------------------------------------------------------- subprocesses
def subprocess_env():
    """The environment for a helper process: the repository's ockstore and this folder first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(SUPPORT)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def run_json_script(script, *args, timeout):
    """Run ``python tests/support/SCRIPT ARGS`` to its end; it must exit 0. Returns the JSON object of its last stdout
    line."""
    result = subprocess.run([sys.executable, str(SUPPORT / script), *map(str, args)], capture_output=True, text=True,
                            timeout=timeout, env=subprocess_env())
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_until_sigkill(proc, *, kill_after_line=None, timeout=60):
    """Wait for a helper subprocess that dies by SIGKILL: killed by us once it prints ``kill_after_line``, or by
    itself. Asserts it did die by SIGKILL; the process is reaped and its pipes closed whatever happens."""
    try:
        if kill_after_line is not None:
            ready, _, _ = select.select([proc.stdout], [], [], timeout)
            assert ready, "the helper process did not report in time"
            line = proc.stdout.readline().strip()
            assert line == kill_after_line, (line, proc.stderr.read() if proc.poll() is not None else "")
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, err)


def run_script_until_sigkill(script, *args, kill_after_line=None, timeout=60):
    """Start ``python tests/support/SCRIPT ARGS`` (a helper that dies by SIGKILL) and wait for its death
    (run_until_sigkill)."""
    proc = subprocess.Popen([sys.executable, str(SUPPORT / script), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=subprocess_env())
    run_until_sigkill(proc, kill_after_line=kill_after_line, timeout=timeout)


def die():
    """Flush stdout and kill this process with SIGKILL: no cleanup, no exit handler, as a crash or power cut."""
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def count_events(kill_at, names=("fsync", "replace", "rename", "unlink")):
    """Patch the os functions ``names`` so that each call counts (the helper scripts' kill writers): KILL_AT = n > 0
    kills this process (SIGKILL) just before event n, KILL_AT = -n just after it, 0 never. Returns the counter (a
    one-element list: the events so far)."""
    counter = [0]

    def counted(real):
        def call(*args, **kwargs):
            counter[0] += 1
            if counter[0] == kill_at:
                die()
            result = real(*args, **kwargs)
            if counter[0] == -kill_at:
                die()
            return result
        return call

    for name in names:
        setattr(os, name, counted(getattr(os, name)))
    return counter


@contextlib.contextmanager
def sigkill_at(point):
    """Inside the block this process kills itself (SIGKILL) at ``point`` of a commit (helper scripts' kill points):

    before-fsync    at the first os.fsync: the temporary file is written, not yet synced nor renamed
    before-replace  instead of os.replace: the temporary file is complete and synced, not in place
    after-replace   right after os.replace, before the folder is synced

    Raises SystemExit for another point, before the block runs.
    """
    real_fsync, real_replace = os.fsync, os.replace

    def replace_then_die(src, dst):
        real_replace(src, dst)
        die()

    patches = {"before-fsync": ("fsync", lambda fd: die()),
               "before-replace": ("replace", lambda src, dst: die()),
               "after-replace": ("replace", replace_then_die)}
    if point not in patches:
        raise SystemExit(f"unknown mode {point!r}")
    name, patched = patches[point]
    setattr(os, name, patched)
    try:
        yield
    finally:
        os.fsync, os.replace = real_fsync, real_replace
