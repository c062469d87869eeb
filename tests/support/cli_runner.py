"""Running the ``ockstore`` command in tests (tests/cli/): ``run(ARGS)`` calls ``ockstore.cli.main(ARGS)`` in this
process with stdout and stderr redirected and returns what a process would have given (exit status, stdout,
stderr); ``run_process`` starts a real process. ``assert_data_error`` and ``assert_usage_error`` check the
exit-status rules of docs/ARCHITECTURE.md ("Command line"). The fixtures (``data``, ``bad_files``: a small dataset,
a quantizer and an index made by the command, and bad inputs) are imported by the test modules that use them.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from helpers import REPO
from ockstore import cli, datasets

COMMANDS = ("train", "build", "search", "info", "verify", "eval", "create", "add", "delete", "compact", "retrain")

# OCKM M=4 C=2 with K=16 words: 4 bytes per code, trains in a fraction of a second.
TRAIN_ARGS = ["--method", "ockm", "--subspaces", "4", "--codebooks", "2", "--beam", "4", "--codewords", "16",
              "--iterations", "3"]


def _exit_status(code, stderr):
    """The status of a process that ends with ``sys.exit(code)``: None is 0, a non-integer is printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=stderr)
    return 1


def _warning_to_stderr(message, category, filename, lineno, file=None, line=None):
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def run(*args, check=None):
    """``ockstore ARGS`` in this process: ``cli.main`` with stdout and stderr redirected to StringIO buffers.

    Returns a CompletedProcess (text). ``check``: the expected exit status. What a separate process would see:
    - the streams are not terminals (StringIO.isatty() is False, fileno() fails), as with the pipes of a subprocess:
      no progress bar unless --progress, help wrapped at the default width;
    - ``SystemExit`` (usage errors, --help, --version) is turned into the exit status, as the interpreter does;
    - warnings are written to the captured stderr (with Python's default filters, not pytest's), so that a stray
      warning still breaks the "exactly one line on stderr" checks instead of going to pytest's summary.
    Any other exception is a bug in the command (a process would print its traceback and exit 1): it propagates
    and fails the test with its traceback. Results do not depend on the number of threads.
    """
    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.resetwarnings()
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", category)
        warnings.showwarning = _warning_to_stderr
        try:
            code = cli.main(argv)
        except SystemExit as exc:
            code = exc.code
        status = _exit_status(code, err)
    proc = subprocess.CompletedProcess(["ockstore", *argv], status, out.getvalue(), err.getvalue())
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def run_process(command, *args, check=None):
    """Run ``COMMAND ARGS`` (an entry point of the command) as a real process; returns the CompletedProcess (text).

    The environment: this checkout first on PYTHONPATH.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run([*command, *map(str, args)], capture_output=True, text=True, env=env, timeout=120,
                          stdin=subprocess.DEVNULL)
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def assert_data_error(proc, *fragments):
    """Exit 1, exactly one line on stderr, no traceback; the line contains every fragment."""
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("ockstore: error: "), lines[0]
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def assert_usage_error(proc, *fragments):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr.startswith("usage: ockstore"), proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, (fragment, proc.stderr)


def write_dataset(folder, n_queries, seed):
    """(ds, paths): datasets.synthetic(2000 learn, 3000 base, n_queries, 16 dims, ground truth of 20) written to
    ``folder`` as learn.fvecs, base.fvecs, query.fvecs and gt.ivecs (paths by those names)."""
    ds = datasets.synthetic(2000, 3000, n_queries, 16, seed=seed, k_gt=20)
    paths = {name: folder / name for name in ("learn.fvecs", "base.fvecs", "query.fvecs", "gt.ivecs")}
    for name, rows in zip(paths, (ds.learn, ds.base, ds.query, ds.groundtruth.astype(np.int32))):
        datasets.write_vecs(paths[name], rows)
    return ds, paths


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Files of a small synthetic dataset, a quantizer trained and an index built by the command."""
    d = tmp_path_factory.mktemp("cli")
    ds, paths = write_dataset(d, 40, seed=3)
    q = d / "q.ockq"
    train = run("train", paths["learn.fvecs"], "-o", q, *TRAIN_ARGS, "--metadata", "who=test", check=0)
    index = d / "base.ock"
    build = run("build", q, paths["base.fvecs"], "-o", index, "--chunk-size", "1000", check=0)
    return {"dir": d, "ds": ds, "learn": paths["learn.fvecs"], "base": paths["base.fvecs"],
            "query": paths["query.fvecs"], "gt": paths["gt.ivecs"], "q": q, "index": index,
            "train_out": train.stdout, "build_out": build.stdout}


@pytest.fixture(scope="module")
def bad_files(data):
    """A corrupt index (garbage), a truncated .fvecs, a folder, a missing path."""
    d = data["dir"]
    garbage = d / "garbage.ock"
    garbage.write_bytes(b"this is not an ockstore file" * 10)
    truncated = d / "truncated.fvecs"
    raw = Path(data["query"]).read_bytes()
    truncated.write_bytes(raw[: len(raw) - 7])
    return {"garbage": garbage, "truncated": truncated, "missing": d / "no_such_file.fvecs", "folder": d}
