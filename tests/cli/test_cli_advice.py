"""The command line's errors give command-line advice (issue 21): a library error that names a Python call
(``open_collection``, ``store_vectors='uint8'``, ``X row 3``, ``mode='r'``) reaches the user of ``ockstore`` as the
command to run, the option to give, the file and its row (ockstore/cli/advice.py). Each case is one line on stderr,
exit 1 (docs/ARCHITECTURE.md, "Command line")."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

import ockstore
from ockstore.cli.advice import RULES, command_line_message
from cli_runner import assert_data_error, data, run  # noqa: F401 - data: a pytest fixture
from helpers import subprocess_env

# What Python advice looks like: a call of the API, a keyword argument, a parameter's row.
PYTHON_ADVICE = re.compile(r"ockstore\.[a-z_]+|open_collection|open_index|load_quantizer|\b[a-z_]+='|mode=|mode '|"
                           r"\bX row\b|fit\(|upsert")


def assert_cli_advice(proc, *fragments):
    line = assert_data_error(proc, *fragments)
    assert not PYTHON_ADVICE.search(line), line
    return line


def test_collection_commands_give_command_advice(data, tmp_path):
    folder = tmp_path / "c"
    run("create", data["q"], folder, check=0)
    assert_cli_advice(run("create", data["q"], folder), "is already a collection",
                      f"'ockstore add {folder} BASE_FILE'")
    assert_cli_advice(run("add", data["index"], data["base"]), "is a file, not a collection folder",
                      "'ockstore create QUANTIZER_FILE FOLDER'")
    empty = tmp_path / "empty"
    empty.mkdir()
    for command in (("add", empty, data["base"]), ("search", empty, data["query"], "-k", "3"), ("info", empty)):
        assert_cli_advice(run(*command), "not a collection", "'ockstore create QUANTIZER_FILE FOLDER'")
    ids = tmp_path / "ids.npy"
    np.save(ids, np.arange(3))
    three = tmp_path / "three.npy"
    np.save(three, np.asarray(data["ds"].base[:3]))
    run("add", folder, three, "--ids", ids, check=0)
    assert_cli_advice(run("add", folder, three, "--ids", ids), "--ids: id 0 is already in the collection",
                      f"'ockstore delete {folder} IDS_FILE'")


def test_a_locked_collection_says_to_wait_not_to_call_python(data, tmp_path):
    """The lock is held by another process (a Python program): the command's error names no Python call."""
    folder = tmp_path / "c"
    run("create", data["q"], folder, check=0)
    holder = subprocess.Popen([sys.executable, "-c", "import ockstore, sys; c = ockstore.open_collection(sys.argv[1], "
                               "'a'); print('held', flush=True); sys.stdin.read()", str(folder)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=subprocess_env())
    try:
        assert holder.stdout.readline().strip() == "held"
        assert_cli_advice(run("add", folder, data["base"]), "already open for writing", "wait until")
    finally:
        holder.communicate("", timeout=60)


@pytest.mark.parametrize("store, values, fragment", [
    ("uint8", 0.5, "--store-vectors uint8 needs integers in 0..255, but {base} row 2"),
    ("float16", 1e6, "--store-vectors float16 cannot hold {base} row 2: a value exceeds float16's range (+-65504); "
                     "use --store-vectors float32"),
])
def test_stored_values_a_dtype_cannot_hold_name_the_option_the_file_and_its_row(data, tmp_path, store, values,
                                                                                 fragment):
    X = np.zeros((4, data["ds"].base.shape[1]), dtype=np.float32)
    X[2, 1] = values
    base = tmp_path / "bad.npy"
    np.save(base, X)
    want = fragment.format(base=base)
    assert_cli_advice(run("build", data["q"], base, "-o", tmp_path / "i.ock", "--store-vectors", store), want)
    folder = tmp_path / "c"
    run("create", data["q"], folder, "--store-vectors", store, check=0)
    assert_cli_advice(run("add", folder, base), want)


def test_training_errors_name_the_options_and_the_file(data, tmp_path):
    learn = data["learn"]
    assert_cli_advice(run("train", learn, "-o", tmp_path / "q.ockq", "--method", "pq", "--subspaces", "40"),
                      f"--subspaces 40 is larger than the dimension of {learn} (16)")
    assert_cli_advice(run("train", learn, "-o", tmp_path / "q.ockq", "--method", "pq", "--subspaces", "4",
                          "--lists", "5000"), f"{learn} has 2000 rows; need at least --lists 5000 training vectors")


def test_a_segment_alone_says_to_give_the_collection_folder(data, tmp_path):
    """A segment of a collection copied out of its folder (its quantizer file is not beside it): info, verify and
    search name the quantizer file it needs and say to give the collection's folder, not a Python call."""
    folder = tmp_path / "c"
    run("create", data["q"], folder, check=0)
    run("add", folder, data["base"], check=0)
    segment = next(p for p in folder.iterdir() if p.name.startswith("segment."))
    alone = tmp_path / "alone.ock"
    alone.write_bytes(segment.read_bytes())
    for command in (("info", alone), ("verify", alone), ("search", alone, data["query"], "-k", "3")):
        assert_cli_advice(run(*command), "missing model", "'quantizer.ockq'", "the collection's folder")
    assert "model_file:" in run("info", segment, check=0).stdout


def test_every_rule_rewrites_what_it_is_for():
    """Each rule of advice.RULES changes a message it matches, leaving no Python advice behind."""
    class Args:
        base = ["base.npy"]
        folder = "photos"
    samples = [
        "'/x' is already a collection; open it with open_collection",
        "'/x' is a file, not a collection folder (an index file opens with ockstore.open_index)",
        "'/x': not a collection: no manifest file (manifest.<generation>) in the folder",
        "collection '/x' is already open for writing: another writer holds its lock '/x/writer.lock' (close that "
        "writer first, or open the collection with mode='r' to read it)",
        "collection '/x': 1 already exists ... Close this writer and open the collection again",
        "collection '/x' cannot be opened for writing: Read-only file system (...); open it with mode 'r' to read it",
        "'/x/segment.0000000002.0.ock': bad magic: ...; open_collection('/x', 'r', skip_damaged=True) reads the other "
        "segments",
        "ids: id 7 is already in the collection (use upsert to replace it)",
        "store_vectors='uint8' needs integers in 0..255, but X row 3 holds 0.5",
        "store_vectors='float16' cannot hold X row 0: a value exceeds float16's range (+-65504); use 'float32'",
        "quantizer: the collection '/x' has another quantizer; pass None (or its own, ockstore.load_quantizer of its "
        "quantizer.ockq) to add to it",
        "n_threads must be >= 1",
        "X has 300 rows; fit needs at least n_lists=400 training vectors",
        "n_subspaces=40 is larger than the dimension of X (16)",
        "X has 10 rows; fit needs at least n_codewords=256 training vectors",
        "'/x/segment.0000000003.0.ock': missing model: the file is a segment of a collection whose model is in the "
        "quantizer file 'quantizer.ockq', which is not in its folder ('/x/quantizer.ockq'): open the collection it "
        "belongs to with ockstore.open_collection(folder)",
    ]
    used = set()
    for sample in samples:
        rewritten = command_line_message(sample, Args)
        assert rewritten != sample and not PYTHON_ADVICE.search(rewritten), (sample, rewritten)
        used |= {i for i, (pattern, _) in enumerate(RULES) if re.search(pattern, sample)}
    assert used == set(range(len(RULES)))
