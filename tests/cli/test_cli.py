"""The ``ockstore`` command on small synthetic data, run in-process.

``run(ARGS)`` calls ``ockstore.cli.main(ARGS)`` with stdout and stderr redirected and returns what the process would
have given (exit status, stdout, stderr); argparse's ``SystemExit`` (a usage error, ``--help``, ``--version``)
becomes the exit status. Only ``test_entry_point_end_to_end`` starts processes: it runs the installed console script
and ``python -m ockstore`` to check that both work and give the same exit statuses and stderr end to end.

Success paths are checked against the Python API (the ids a search writes equal ``open_index(...).search(...)``, the
recall eval prints equals ``evaluation.recall_at_r``, ``info --json`` equals ``info()``); every failure must follow
the exit-status rules of docs/ARCHITECTURE.md: exit 1 with exactly one line on stderr and no traceback for a data or
format error, exit 2 with argparse's usage line for a usage error, the traceback only with ``--debug``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import ockstore
from ockstore import cli, datasets, evaluation

from cli_runner import COMMANDS, TRAIN_ARGS, assert_data_error, assert_usage_error, run, run_process
from cli_runner import bad_files, data  # noqa: F401 - pytest fixtures


# ---------------------------------------------------------------------------------------------------------- help
@pytest.mark.parametrize("command", COMMANDS)
def test_help_of_every_command_has_an_example(command):
    proc = run(command, "--help", check=0)
    assert "example" in proc.stdout
    assert f"usage: ockstore {command}" in proc.stdout


def test_top_level_help_version_and_missing_command():
    proc = run("--help", check=0)
    assert "example" in proc.stdout and all(c in proc.stdout for c in COMMANDS)
    assert run("--version", check=0).stdout.strip() == f"ockstore {ockstore.__version__}"
    assert_usage_error(run(), "required")
    assert_usage_error(run("frobnicate"), "invalid choice")


# --------------------------------------------------------------------------------------------------------- train
def test_train_writes_the_quantizer_and_reports_objective(data):
    q = ockstore.load_quantizer(data["q"])
    assert (q.method, q.n_subspaces, q.n_codebooks, q.beam_width, q.n_codewords) == ("ockm", 4, 2, 4, 16)
    assert len(q.objective_history) == 4  # init + 3 iterations
    out = data["train_out"]
    assert "objective" in out and f"{q.objective_history[-1]:.6g}" in out
    assert "2,000 vectors" in out and " s " in out
    # the same as training through the API with the same parameters
    ref = ockstore.OCKM(4, 2, 4, n_codewords=16, n_iter=3).fit(data["ds"].learn)
    np.testing.assert_array_equal(ref.codebooks, q.codebooks)


def test_train_limit_and_other_methods(data, tmp_path):
    out = tmp_path / "pq.ockq"
    proc = run("train", data["learn"], "-o", out, "--method", "pq", "-M", "2", "-K", "16", "--iterations", "2",
               "--limit", "500", check=0)
    assert "500 vectors" in proc.stdout
    q = ockstore.load_quantizer(out)
    assert (q.method, q.n_subspaces, q.n_codebooks) == ("pq", 2, 1)
    ref = ockstore.PQ(2, n_codewords=16, n_iter=2).fit(data["ds"].learn[:500])
    np.testing.assert_array_equal(ref.codebooks, q.codebooks)


@pytest.mark.parametrize("args, fragment", [
    (["--method", "ockm"], "--subspaces"),                                # missing required option
    (["--method", "lsh", "-M", "4"], "invalid choice"),
    (["--method", "pq", "-M", "0"], "--subspaces"),
    (["--method", "pq", "-M", "four"], "--subspaces"),
    (["--method", "pq", "-M", "4", "--beam", "3"], "--beam"),            # pq has no beam
    (["--method", "ckm", "-M", "4", "--codebooks", "2"], "--codebooks"),
    (["--method", "ockm", "-M", "4", "--codewords", "300"], "--codewords"),
    (["--method", "ockm", "-M", "4", "--metadata", "novalue"], "KEY=VALUE"),
    (["--method", "ockm", "-M", "4", "--tol", "-1"], "--tol"),
])
def test_train_usage_errors(data, tmp_path, args, fragment):
    assert_usage_error(run("train", data["learn"], "-o", tmp_path / "x.ockq", *args), fragment)
    assert not (tmp_path / "x.ockq").exists()


def test_train_data_errors(data, bad_files, tmp_path):
    out = tmp_path / "x.ockq"
    assert_data_error(run("train", bad_files["missing"], "-o", out, *TRAIN_ARGS), "no such file")
    assert_data_error(run("train", bad_files["truncated"], "-o", out, *TRAIN_ARGS), "truncated")
    assert_data_error(run("train", bad_files["folder"], "-o", out, *TRAIN_ARGS), "not a regular file")
    assert_data_error(run("train", data["learn"], "-o", out, "--method", "pq", "-M", "17"), "dimension")
    assert_data_error(run("train", data["learn"], "-o", tmp_path / "nofolder" / "x.ockq", *TRAIN_ARGS),
                      "folder does not exist")
    assert_data_error(run("train", data["learn"], "-o", out, *TRAIN_ARGS[:-2], "--limit", "10"), "at least")
    assert not out.exists()


# --------------------------------------------------------------------------------------------------------- build
def test_build_writes_the_index_of_the_api(data):
    q = ockstore.load_quantizer(data["q"])
    ref = ockstore.Index.from_vectors(q, data["ds"].base)
    with ockstore.open_index(data["index"]) as index:
        assert index.ntotal == 3000 and not index.has_ids
        np.testing.assert_array_equal(index.codes, ref.codes)
        np.testing.assert_array_equal(index.norms, ref.norms)
    assert "3,000 vectors" in data["build_out"] and "bytes/vector" in data["build_out"]
    assert "vectors/s" in data["build_out"]


def test_build_with_ids_metadata_and_progress(data, tmp_path):
    ids = np.arange(3000, dtype=np.int64) * 7 + 5
    for ids_path in (tmp_path / "ids.npy", tmp_path / "ids.ivecs"):
        if ids_path.suffix == ".npy":
            np.save(ids_path, ids)
        else:
            datasets.write_vecs(ids_path, ids.reshape(-1, 1).astype(np.int32))
        out = tmp_path / f"with_ids_{ids_path.suffix[1:]}.ock"
        proc = run("build", data["q"], data["base"], "-o", out, "--ids", ids_path, "--norm-encoding", "f32",
                   "--metadata", "source=test", "n=3", "--chunk-size", "700", "--progress", check=0)
        assert "vectors/s" in proc.stderr and "100.0%" in proc.stderr  # the bar, forced on a non-terminal
        with ockstore.open_index(out) as index:
            info = index.info()
            assert info["has_ids"] and info["norm_encoding"] == "f32" and info["N"] == 3000
            assert info["metadata"] == {"source": "test", "n": "3"}
            np.testing.assert_array_equal(index.ids, ids)


def test_build_progress_only_on_a_terminal_or_when_asked(data, tmp_path):
    proc = run("build", data["q"], data["base"], "-o", tmp_path / "a.ock", check=0)
    assert proc.stderr == ""  # stderr is not a terminal here: no bar
    proc = run("build", data["q"], data["base"], "-o", tmp_path / "b.ock", "-q", check=0)
    assert proc.stderr == ""
    assert (tmp_path / "a.ock").read_bytes() == (tmp_path / "b.ock").read_bytes()


def test_build_data_errors_leave_no_file(data, bad_files, tmp_path):
    out = tmp_path / "x.ock"
    assert_data_error(run("build", bad_files["missing"], data["base"], "-o", out), "no such file")
    assert_data_error(run("build", bad_files["garbage"], data["base"], "-o", out), "garbage.ock")
    assert_data_error(run("build", data["q"], bad_files["missing"], "-o", out), "no such file")
    assert_data_error(run("build", data["q"], bad_files["truncated"], "-o", out), "truncated")
    other = tmp_path / "other_dim.fvecs"
    datasets.write_vecs(other, np.zeros((10, 8), np.float32))
    assert_data_error(run("build", data["q"], other, "-o", out), "dimension 8", "16")
    few_ids = tmp_path / "few.npy"
    np.save(few_ids, np.arange(10))
    assert_data_error(run("build", data["q"], data["base"], "-o", out, "--ids", few_ids), "10 ids")
    neg_ids = tmp_path / "neg.npy"
    np.save(neg_ids, -np.arange(3000))
    assert_data_error(run("build", data["q"], data["base"], "-o", out, "--ids", neg_ids), ">= 0")
    assert sorted(os.listdir(tmp_path)) == ["few.npy", "neg.npy", "other_dim.fvecs"]  # no output, no temp file


def test_build_usage_errors(data, tmp_path):
    assert_usage_error(run("build", data["q"], data["base"]), "-o")
    assert_usage_error(run("build", data["q"], data["base"], "-o", tmp_path / "x.ock", "--norm-encoding", "f16"),
                       "--norm-encoding")
    assert_usage_error(run("build", data["q"], data["base"], "-o", tmp_path / "x.ock", "--chunk-size", "0"),
                       "--chunk-size")
    assert_usage_error(run("build", data["q"], data["base"], "-o", tmp_path / "x.ock", "-q", "--progress"),
                       "not allowed")


# -------------------------------------------------------------------------------------------------------- search
def test_search_output_files_equal_the_api(data, tmp_path):
    with ockstore.open_index(data["index"]) as index:
        D, I = index.search(data["ds"].query, 15)
        Ds, Is = index.search(data["ds"].query[:7], 15, distance="sdc")
    out = tmp_path / "nn.ivecs"
    proc = run("search", data["index"], data["query"], "-k", "15", "-o", out, "--distances", check=0)
    assert "40 queries" in proc.stdout
    np.testing.assert_array_equal(datasets.read_vecs(out), I)
    np.testing.assert_array_equal(datasets.read_vecs(tmp_path / "nn.dist.fvecs"), D)
    out = tmp_path / "nn.npy"
    run("search", data["index"], data["query"], "-k", "15", "-o", out, "--distances", "--distance", "sdc",
        "--limit", "7", "--threads", "1", check=0)
    got = np.load(out)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, Is)
    np.testing.assert_array_equal(np.load(tmp_path / "nn.dist.npy"), Ds)
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".")]  # no temporary file left


def test_search_k_beyond_n_pads(data, tmp_path):
    small = tmp_path / "small.fvecs"
    datasets.write_vecs(small, data["ds"].base[:5])
    index = tmp_path / "small.ock"
    run("build", data["q"], small, "-o", index, check=0)
    out = tmp_path / "nn.ivecs"
    run("search", index, data["query"], "-k", "8", "-o", out, "--distances", check=0)
    ids = datasets.read_vecs(out)
    assert (ids[:, 5:] == -1).all() and (ids[:, :5] >= 0).all()
    assert np.isinf(datasets.read_vecs(tmp_path / "nn.dist.fvecs")[:, 5:]).all()


def test_search_prints_results_without_output(data):
    with ockstore.open_index(data["index"]) as index:
        D, I = index.search(data["ds"].query[:2], 6)
    proc = run("search", data["index"], data["query"], "-k", "6", "--limit", "2", check=0)
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("query 0:") and any(line.startswith("query 1:") for line in lines)
    assert len(lines) == 2 * (1 + 2)  # per query: a heading and two lines of five results
    first = lines[1].split()
    assert first[0] == "1." and int(first[1]) == I[0, 0]
    assert float(first[2].strip("()")) == pytest.approx(float(D[0, 0]), rel=1e-5)


def test_search_errors(data, bad_files, tmp_path):
    idx, qf = data["index"], data["query"]
    assert_data_error(run("search", bad_files["missing"], qf, "-k", "3"), "no such file")
    assert_data_error(run("search", bad_files["garbage"], qf, "-k", "3"), "garbage.ock")
    assert_data_error(run("search", data["q"], qf, "-k", "3"), "a quantizer file, not an index", "ockstore build")
    assert_data_error(run("search", idx, bad_files["truncated"], "-k", "3"), "truncated")
    assert_data_error(run("search", idx, data["gt"], "-k", "3"), "dimension 20")
    assert_usage_error(run("search", idx, qf), "-k")
    assert_usage_error(run("search", idx, qf, "-k", "0"), "-k")
    assert_usage_error(run("search", idx, qf, "-k", "3", "--distance", "l2"), "--distance")
    assert_usage_error(run("search", idx, qf, "-k", "3", "-o", tmp_path / "out.txt"), ".ivecs")
    assert_usage_error(run("search", idx, qf, "-k", "3", "--distances"), "--distances")


# ---------------------------------------------------------------------------------------------------- info, verify
def test_info_json_matches_info_and_text_is_aligned(data):
    with ockstore.open_index(data["index"]) as index:
        expected = index.info()
    got = json.loads(run("info", data["index"], "--json", check=0).stdout)
    assert got == json.loads(json.dumps(expected))
    lines = run("info", data["index"], check=0).stdout.splitlines()
    top = [line for line in lines if not line.startswith(" ") and not line.endswith(":")]
    assert {line.split(":")[0] for line in top} >= {"N", "P", "method", "bits", "bytes_per_vector", "path"}
    assert len({line.index(":") + len(line[line.index(":") + 1:]) - len(line[line.index(":") + 1:].lstrip())
                for line in top}) == 1  # values start in one column


def test_info_of_a_quantizer_file(data):
    got = json.loads(run("info", data["q"], "--json", check=0).stdout)
    q = ockstore.load_quantizer(data["q"])
    assert got["kind"] == "quantizer" and got["method"] == "ockm" and got["bits"] == q.bits
    assert got["metadata"] == {"who": "test"}
    assert got["objective"] == pytest.approx(float(q.objective_history[-1]))


def test_verify_ok_and_corrupt(data, tmp_path):
    proc = run("verify", data["index"], check=0)
    assert proc.stdout.startswith("ok") and "3,000" in proc.stdout
    from ockstore import storage

    with storage.open_file(data["index"]) as mf:
        section = "code_blocks" if "code_blocks" in mf.sections else "codes"  # K <= 16: fast-scan blocks
        offset = mf.section_info(section)["offset"]
    raw = bytearray(Path(data["index"]).read_bytes())
    raw[offset + 11] ^= 0x01  # one bit of one code: open still works, verify must find it
    bad = tmp_path / "flipped.ock"
    bad.write_bytes(bytes(raw))
    run("info", bad, check=0)  # opening reads the header only
    assert_data_error(run("verify", bad), "flipped.ock", section)


def test_info_verify_errors(bad_files, data, tmp_path):
    for command in ("info", "verify"):
        line = assert_data_error(run(command, bad_files["missing"]))
        assert line == f"ockstore: error: no such file: {str(bad_files['missing'])!r}"
        assert_data_error(run(command, bad_files["garbage"]), "garbage.ock")
        # a folder is read as a collection folder (tests/cli/test_collection_cli.py): this one is not one
        assert_data_error(run(command, bad_files["folder"]), "not a collection")
        assert_usage_error(run(command), "required")
    half = tmp_path / "half.ock"
    half.write_bytes(Path(data["index"]).read_bytes()[:5000])
    assert_data_error(run("verify", half), "half.ock")
    assert_usage_error(run("info", data["index"], "--yaml"), "unrecognized")
    assert_data_error(run("verify", data["q"]), "a quantizer file, not an index")


# ---------------------------------------------------------------------------------------------------------- eval
def test_eval_matches_the_api(data):
    proc = run("eval", data["index"], data["query"], data["gt"], "-k", "20", "--recalls", "1", "5", "20",
               "--base", data["base"], check=0)
    values = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if parts and (parts[0].startswith("recall@") or parts[0] in ("10-recall@10", "MOR@10", "ms/query")):
            values[parts[0]] = float(parts[1])
    with ockstore.open_index(data["index"]) as index:
        _, I = index.search(data["ds"].query, 20)
    gt = data["ds"].groundtruth
    for r in (1, 5, 20):
        assert values[f"recall@{r}"] == pytest.approx(evaluation.recall_at_r(I, gt, r), abs=5e-5)
    assert values["10-recall@10"] == pytest.approx(evaluation.k_recall_at_k(I, gt, 10), abs=5e-5)
    mor = evaluation.mean_overall_ratio(data["ds"].query, data["ds"].base, I, gt, 10)
    assert values["MOR@10"] == pytest.approx(mor, abs=5e-5)
    assert values["ms/query"] > 0

    got = json.loads(run("eval", data["index"], data["query"], data["gt"], "-k", "20", "--distance", "sdc",
                         "--json", "--limit", "10", check=0).stdout)
    with ockstore.open_index(data["index"]) as index:
        _, I = index.search(data["ds"].query[:10], 20, distance="sdc")
    assert got["queries"] == 10 and got["distance"] == "sdc"
    for r in (1, 10):
        assert got[f"recall@{r}"] == evaluation.recall_at_r(I, gt[:10], r)
    assert got["10-recall@10"] == evaluation.k_recall_at_k(I, gt[:10], 10)
    assert "recall@100" not in got  # default recalls are those <= k


def test_eval_errors(data, bad_files):
    idx, qf, gt = data["index"], data["query"], data["gt"]
    assert_data_error(run("eval", bad_files["missing"], qf, gt), "no such file")
    assert_data_error(run("eval", bad_files["garbage"], qf, gt), "garbage.ock")
    assert_data_error(run("eval", idx, bad_files["truncated"], gt), "truncated")
    assert_data_error(run("eval", idx, qf, bad_files["missing"]), "no such file")
    assert_data_error(run("eval", idx, qf, data["learn"]), "integer")        # float vectors as ground truth
    assert_data_error(run("eval", idx, qf, gt, "--limit", "5", "--base", bad_files["truncated"], "-k", "10"),
                      "truncated")
    short_gt = Path(bad_files["folder"]) / "short_gt.ivecs"
    datasets.write_vecs(short_gt, data["ds"].groundtruth[:5].astype(np.int32))
    assert_data_error(run("eval", idx, qf, short_gt), "5 ground-truth rows", "40 queries")
    assert_usage_error(run("eval", idx, qf), "GROUNDTRUTH_FILE")
    assert_usage_error(run("eval", idx, qf, gt, "-k", "10", "--recalls", "100"), "--recalls")
    assert_usage_error(run("eval", idx, qf, gt, "-k", "5", "--base", data["base"]), "--base")


# ------------------------------------------------------------------------------------------------ error reporting
def test_debug_shows_the_traceback(bad_files):
    proc = run("--debug", "info", bad_files["garbage"])
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "FormatError" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("ockstore: error: ")


def test_keyboard_interrupt_is_one_line_and_130(monkeypatch, data):
    def interrupted(args, out):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.commands.COMMANDS, "info", interrupted)
    proc = run("info", data["index"], check=130)
    assert proc.stderr.strip().splitlines() == ["ockstore: interrupted"]


def test_os_errors_are_one_line(monkeypatch, data):
    def denied(args, out):
        raise PermissionError(13, "Permission denied", "locked.ock")

    monkeypatch.setitem(cli.commands.COMMANDS, "verify", denied)
    proc = run("verify", data["index"], check=1)
    assert proc.stderr == "ockstore: error: Permission denied: 'locked.ock'\n"


# -------------------------------------------------------------------------------------------- real entry points
def _entry_point(name):
    """The command line of an entry point: the console script installed beside this interpreter (.venv/bin/ockstore
    with `make install`), or `python -m ockstore`."""
    if name == "python -m":
        return [sys.executable, "-m", "ockstore"]
    script = shutil.which("ockstore", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip(f"no ockstore console script in {Path(sys.executable).parent} (package not installed there)")
    return [script]


@pytest.mark.parametrize("entry", ["console script", "python -m"])
def test_entry_point_end_to_end(entry, data, bad_files):
    """The real processes: success, data error, usage error and --debug, with their exit statuses and stderr."""
    command = _entry_point(entry)
    proc = run_process(command, "info", data["index"], "--json", check=0)
    with ockstore.open_index(data["index"]) as index:
        assert json.loads(proc.stdout) == json.loads(json.dumps(index.info()))
    assert proc.stderr == ""
    assert_data_error(run_process(command, "verify", bad_files["garbage"]), "garbage.ock")
    assert_usage_error(run_process(command, "search", data["index"], data["query"]), "-k")
    proc = run_process(command, "--debug", "info", bad_files["garbage"])
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "FormatError" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("ockstore: error: ")
