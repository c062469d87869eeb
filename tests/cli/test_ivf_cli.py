"""The ``ockstore`` command with inverted files: ``train --lists N``, ``build``, ``info`` (list sizes), ``search`` and
``eval --probe N``; checked against the Python API, with the exit-status rules of docs/ARCHITECTURE.md (helpers of
tests/cli/test_cli.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ockstore
from ockstore import evaluation
from cli_runner import TRAIN_ARGS, assert_data_error, assert_usage_error, run, write_dataset

LISTS = 8


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("ivfcli")
    ds, paths = write_dataset(d, 40, seed=3)
    q, index = d / "ivf.ockq", d / "ivf.ock"
    train = run("train", paths["learn.fvecs"], "-o", q, *TRAIN_ARGS, "--lists", LISTS, "--seed", 5, check=0)
    build = run("build", q, paths["base.fvecs"], "-o", index, "--chunk-size", "700", check=0)
    flat_q, flat = d / "flat.ockq", d / "flat.ock"
    run("train", paths["learn.fvecs"], "-o", flat_q, *TRAIN_ARGS, check=0)
    run("build", flat_q, paths["base.fvecs"], "-o", flat, check=0)
    return {"dir": d, "ds": ds, **{k.split(".")[0]: v for k, v in paths.items()}, "q": q, "index": index,
            "flat": flat, "train_out": train.stdout, "build_out": build.stdout}


def test_train_lists_makes_an_ivf(data):
    ivf = ockstore.load_quantizer(data["q"])
    assert isinstance(ivf, ockstore.IVF) and ivf.n_lists == LISTS and ivf.seed == 5
    assert ivf.quantizer.get_params()["n_codewords"] == 16 and ivf.quantizer.n_iter == 3
    out = data["train_out"]
    assert f"IVF of {LISTS} lists over OCKM" in out and "coarse k-means: 10 iterations" in out
    assert "of the residuals" in out
    assert "IVF of 8 lists" in data["build_out"]
    with ockstore.open_index(data["index"]) as index:
        assert isinstance(index, ockstore.IVFIndex) and index.ntotal == 3000
        memory = ockstore.Index.from_vectors(ivf, data["ds"].base)
        np.testing.assert_array_equal(index.codes, memory.codes)
        np.testing.assert_array_equal(index.ids, memory.ids)


def test_verify_and_eval_with_base(data):
    assert "ok: 3,000 vectors" in run("verify", data["index"], check=0).stdout
    result = json.loads(run("eval", data["index"], data["query"], data["gt"], "-k", 10, "--probe", LISTS, "--base",
                            data["base"], "--json", check=0).stdout)
    assert result["mean_overall_ratio@10"] >= 1.0


def test_info_shows_the_lists(data):
    proc = run("info", data["index"], check=0)
    for fragment in ("kind:", "ivf-index", "n_lists:", "default_n_probe:", "list_sizes:", "empty:", "median:"):
        assert fragment in proc.stdout, fragment
    described = json.loads(run("info", data["index"], "--json", check=0).stdout)
    with ockstore.open_index(data["index"]) as index:
        sizes = index.list_sizes
        assert described["list_sizes"] == {"min": int(sizes.min()), "max": int(sizes.max()),
                                           "mean": float(sizes.mean()), "median": float(np.median(sizes)),
                                           "empty": int((sizes == 0).sum())}
    assert json.loads(run("info", data["q"], "--json", check=0).stdout)["kind"] == "ivf-quantizer"


@pytest.mark.parametrize("probe", [None, 1, 3, LISTS])
def test_search_and_eval_with_probe(data, probe):
    out = data["dir"] / f"r{probe}.npy"
    extra = [] if probe is None else ["--probe", probe]
    run("search", data["index"], data["query"], "-k", 10, "-o", out, *extra, check=0)
    with ockstore.open_index(data["index"]) as index:
        _, expected = index.search(data["ds"].query, 10, n_probe=probe)
    np.testing.assert_array_equal(np.load(out), expected)
    proc = run("eval", data["index"], data["query"], data["gt"], "-k", 10, "--json", *extra, check=0)
    result = json.loads(proc.stdout)
    default = LISTS  # the index's default n_probe: a small inverted file scans every list (default_n_probe)
    assert result["n_lists"] == LISTS and result["n_probe"] == (probe or default)
    assert result["recall@10"] == evaluation.recall_at_r(expected, data["ds"].groundtruth, 10)
    text = run("eval", data["index"], data["query"], data["gt"], "-k", 10, *extra, check=0).stdout
    assert f"probe {probe or default} of {LISTS} lists" in text and "IVF 8 lists" in text


def test_probe_errors(data):
    assert_data_error(run("search", data["flat"], data["query"], "-k", 3, "--probe", 2), "flat index", "--probe")
    assert_data_error(run("eval", data["flat"], data["query"], data["gt"], "--probe", 2), "flat index")
    assert_data_error(run("search", data["index"], data["query"], "-k", 3, "--probe", LISTS + 1), "8 lists")
    assert_usage_error(run("search", data["index"], data["query"], "-k", 3, "--probe", 0), "--probe")
    assert_usage_error(run("search", data["index"], data["query"], "-k", 3, "--probe", "x"), "--probe")


def test_train_lists_errors(data, tmp_path):
    assert_usage_error(run("train", data["learn"], "-o", tmp_path / "x.ockq", *TRAIN_ARGS, "--lists", 0), "--lists")
    assert_data_error(run("train", data["learn"], "-o", tmp_path / "x.ockq", *TRAIN_ARGS, "--lists", 5000),
                      "need at least --lists 5000 training vectors")
    assert not (tmp_path / "x.ockq").exists()


def test_collection_of_an_ivf_from_the_command_line(data, tmp_path):
    folder = tmp_path / "coll"
    assert "IVF of 8 lists over OCKM" in run("create", data["q"], folder, check=0).stdout
    run("add", folder, data["base"], check=0)
    assert json.loads(run("info", folder, "--json", check=0).stdout)["n_lists"] == LISTS
    out = tmp_path / "r.npy"
    run("search", folder, data["query"], "-k", 5, "--probe", 3, "-o", out, check=0)
    with ockstore.open_index(data["index"]) as index:
        np.testing.assert_array_equal(np.load(out), index.search(data["ds"].query, 5, n_probe=3)[1])
