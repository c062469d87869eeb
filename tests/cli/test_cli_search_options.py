"""The ``ockstore`` command's search options on small data, run in-process (tests/support/cli_runner.py): metric "ip",
stored vectors (``--store-vectors``), exact re-ranking (``--rerank``) and filters (``--allow``), checked against the
Python API, and their usage and data errors.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import ockstore
from ockstore import datasets, evaluation

from cli_runner import TRAIN_ARGS, assert_data_error, assert_usage_error, run
from cli_runner import bad_files, data  # noqa: F401 - pytest fixtures


# ------------------------------------------------------------------------------------- metric, rerank, allow
@pytest.fixture(scope="module")
def rr(data):
    """An l2 index of the base with its vectors stored (float32), for --rerank and --allow."""
    index = data["dir"] / "stored.ock"
    build = run("build", data["q"], data["base"], "-o", index, "--store-vectors", "float32", check=0)
    return {"index": index, "build_out": build.stdout}


@pytest.fixture(scope="module")
def ip(tmp_path_factory):
    """Small integer data (components 0..255, as .bvecs) and a quantizer trained with --metric ip."""
    d = tmp_path_factory.mktemp("cli_ip")
    rng = np.random.default_rng(5)
    X = rng.integers(0, 256, size=(600, 16)).astype(np.uint8)
    base, query = d / "base.bvecs", d / "query.bvecs"
    datasets.write_vecs(base, X)
    datasets.write_vecs(query, X[:12])
    q = d / "ip.ockq"
    train = run("train", base, "-o", q, *TRAIN_ARGS, "--metric", "ip", check=0)
    return {"dir": d, "X": X, "base": base, "query": query, "q": q, "train_out": train.stdout}


def test_train_metric_ip(ip):
    q = ockstore.load_quantizer(ip["q"])
    assert q.metric == "ip"
    assert "metric ip" in ip["train_out"]
    ref = ockstore.OCKM(4, 2, 4, n_codewords=16, n_iter=3, metric="ip").fit(ip["X"])
    np.testing.assert_array_equal(ref.codebooks, q.codebooks)
    assert json.loads(run("info", ip["q"], "--json", check=0).stdout)["metric"] == "ip"


def test_build_store_vectors_uint8_on_integer_data(ip, tmp_path):
    out = tmp_path / "ip_u8.ock"
    proc = run("build", ip["q"], ip["base"], "-o", out, "--store-vectors", "uint8", check=0)
    assert "metric ip" in proc.stdout and "stored uint8 vectors" in proc.stdout
    with ockstore.open_index(out) as index:
        assert index.metric == "ip" and index.store_vectors == "uint8"
        np.testing.assert_array_equal(index.vectors, ip["X"])
        D, I = index.search(ip["X"][:12], 5, rerank=40)
    text = run("info", out, check=0).stdout
    assert {"metric:": "ip", "store_vectors:": "uint8"}.items() <= dict(line.split()[:2] for line in text.splitlines()
                                                                         if len(line.split()) >= 2).items()
    nn = tmp_path / "nn.npy"
    run("search", out, ip["query"], "-k", "5", "--rerank", "40", "-o", nn, "--distances", check=0)
    np.testing.assert_array_equal(np.load(nn), I)
    np.testing.assert_array_equal(np.load(tmp_path / "nn.dist.npy"), D)
    # exact inner products, descending
    Xf = ip["X"].astype(np.float64)
    np.testing.assert_allclose(D, np.take_along_axis(Xf[:12] @ Xf.T, I, axis=1), rtol=1e-6)
    assert (np.diff(D, axis=1) <= 0).all()


def test_search_ip_prints_scores_and_minus_inf_padding(ip, tmp_path):
    out = tmp_path / "ip_f16.ock"
    run("build", ip["q"], ip["base"], "-o", out, "--store-vectors", "float16", check=0)
    allow = tmp_path / "allow.txt"
    allow.write_text("# two ids\n7\n\n3  # and a comment\n")
    proc = run("search", out, ip["query"], "-k", "4", "--limit", "1", "--allow", allow, check=0)
    lines = proc.stdout.splitlines()
    assert lines[0] == "query 0:  rank. id (inner product)"
    cells = lines[1].split()
    assert {int(cells[1]), int(cells[4])} == {3, 7}
    assert cells[7:] == ["-1", "(-inf)", "4.", "-1", "(-inf)"]


def test_info_shows_metric_and_store_vectors(data, rr):
    def fields(path):
        return dict(line.split(None, 1) for line in run("info", path, check=0).stdout.splitlines()
                    if not line.startswith(" ") and len(line.split()) >= 2)

    assert fields(data["index"])["metric:"] == "l2" and fields(data["index"])["store_vectors:"] == "none"
    assert fields(rr["index"])["store_vectors:"] == "float32"
    assert json.loads(run("info", data["index"], "--json", check=0).stdout)["store_vectors"] is None


def test_search_rerank_equals_the_api_with_exact_distances(data, rr, tmp_path):
    assert "stored float32 vectors" in rr["build_out"]
    with ockstore.open_index(rr["index"]) as index:
        D, I = index.search(data["ds"].query, 10, rerank=60)
    out = tmp_path / "nn.ivecs"
    proc = run("search", rr["index"], data["query"], "-k", "10", "--rerank", "60", "-o", out, "--distances", check=0)
    assert "rerank 60" in proc.stdout
    np.testing.assert_array_equal(datasets.read_vecs(out), I)
    got = datasets.read_vecs(tmp_path / "nn.dist.fvecs")
    np.testing.assert_array_equal(got, D)
    base, query = data["ds"].base.astype(np.float64), data["ds"].query.astype(np.float64)
    exact = ((base[I] - query[:, None, :]) ** 2).sum(axis=2)
    np.testing.assert_allclose(got, exact, rtol=1e-4, atol=1e-4)


def test_search_allow_restricts_to_the_allowed_ids(data, rr, tmp_path):
    allowed = np.arange(5, 3000, 11)
    with ockstore.open_index(rr["index"]) as index:
        _, I = index.search(data["ds"].query, 8, allow=allowed, rerank=20)
    text = tmp_path / "allow.txt"
    text.write_text("\n".join(str(i) for i in allowed[::-1]) + "\n99999\n")  # any order; unknown ids ignored
    ivecs = tmp_path / "allow.ivecs"  # a 2-column file, -1 padding included: every value is read
    datasets.write_vecs(ivecs, np.append(allowed, -1).reshape(-1, 2).astype(np.int32))
    npy = tmp_path / "allow.npy"
    np.save(npy, allowed)
    for path in (text, ivecs, npy):
        out = tmp_path / f"nn_{path.suffix[1:]}.npy"
        proc = run("search", rr["index"], data["query"], "-k", "8", "--rerank", "20", "--allow", path, "-o", out,
                   check=0)
        assert "allowed ids" in proc.stdout
        got = np.load(out)
        np.testing.assert_array_equal(got, I)
        assert np.isin(got, allowed).all()


def test_eval_rerank_reports_metric_and_improves_recall(data, rr):
    args = ("eval", rr["index"], data["query"], data["gt"], "-k", "10", "--json")
    plain = json.loads(run(*args, "--rerank", "0", check=0).stdout)
    reranked = json.loads(run(*args, "--rerank", "100", check=0).stdout)
    default = json.loads(run(*args, check=0).stdout)  # an index with stored vectors re-ranks 10 * k by default
    assert (plain["metric"], plain["rerank"], default["rerank"]) == ("l2", 0, None)
    assert reranked["recall@10"] == default["recall@10"] and reranked["recall@1"] == default["recall@1"]
    assert (reranked["metric"], reranked["rerank"]) == ("l2", 100)
    with ockstore.open_index(rr["index"]) as index:
        _, I = index.search(data["ds"].query, 10, rerank=100)
    for r in (1, 10):
        assert reranked[f"recall@{r}"] == evaluation.recall_at_r(I, data["ds"].groundtruth, r)
        assert reranked[f"recall@{r}"] >= plain[f"recall@{r}"]
    assert reranked["recall@1"] > plain["recall@1"]
    text = run("eval", rr["index"], data["query"], data["gt"], "-k", "10", "--rerank", "100", "--base", data["base"],
               check=0).stdout
    assert "metric l2" in text and "rerank 100" in text and "MOR@10" in text


def test_search_options_usage_errors(data, rr, ip, tmp_path):
    idx, qf, gt = rr["index"], data["query"], data["gt"]
    assert_usage_error(run("search", idx, qf, "-k", "10", "--rerank", "5"), "--rerank", "smaller than -k 10")
    assert_usage_error(run("search", idx, qf, "-k", "10", "--rerank", "-1"), "--rerank")
    assert_usage_error(run("search", idx, qf, "-k", "10", "--rerank", "many"), "--rerank")
    assert_usage_error(run("search", idx, qf, "-k", "10", "--allow"), "--allow")
    assert_usage_error(run("eval", idx, qf, gt, "-k", "20", "--rerank", "10"), "--rerank", "smaller than -k 20")
    assert_usage_error(run("train", data["learn"], "-o", tmp_path / "x.ockq", *TRAIN_ARGS, "--metric", "l1"),
                       "--metric")
    assert_usage_error(run("build", data["q"], data["base"], "-o", tmp_path / "x.ock", "--store-vectors", "int8"),
                       "--store-vectors")
    ip_index = tmp_path / "ip.ock"
    run("build", ip["q"], ip["base"], "-o", ip_index, check=0)
    ip_gt = tmp_path / "ip_gt.ivecs"
    datasets.write_vecs(ip_gt, np.zeros((12, 10), np.int32))
    assert_usage_error(run("eval", ip_index, ip["query"], ip_gt, "-k", "10", "--base", ip["base"]),
                       "--base", "metric ip")
    assert sorted(os.listdir(tmp_path)) == ["ip.ock", "ip_gt.ivecs"]


def test_search_options_data_errors(data, rr, bad_files, tmp_path):
    idx, qf = rr["index"], data["query"]
    for command in (("search", data["index"], qf), ("eval", data["index"], qf, data["gt"])):
        assert_data_error(run(*command, "-k", "5", "--rerank", "10"), "stores no vectors", "--store-vectors")
    bad = tmp_path / "bad.txt"
    bad.write_text("1\n2\nthree\n")
    assert_data_error(run("search", idx, qf, "-k", "5", "--allow", bad), "bad.txt", "line 3", "three")
    big = tmp_path / "big.txt"
    big.write_text("1\n99999999999999999999\n")
    assert_data_error(run("search", idx, qf, "-k", "5", "--allow", big), "line 2", "int64")
    binary = tmp_path / "ids.bin"
    binary.write_bytes(b"\xff\xfe\x00")
    assert_data_error(run("search", idx, qf, "-k", "5", "--allow", binary), "not a text file")
    assert_data_error(run("search", idx, qf, "-k", "5", "--allow", data["base"]), "not an ids file")
    assert_data_error(run("search", idx, qf, "-k", "5", "--allow", bad_files["missing"]), "no such file")
    assert_data_error(run("search", idx, qf, "-k", "5", "--allow", data["learn"]), "not an ids file")
    out = tmp_path / "x.ock"
    assert_data_error(run("build", data["q"], data["base"], "-o", out, "--store-vectors", "uint8"), "uint8")
    assert not out.exists()


def test_build_names_a_refused_row_by_its_row_in_the_file(ip, tmp_path):
    """The base file is streamed in chunks; a refused value is named by its row in BASE_FILE, not in its chunk."""
    X = ip["X"].astype(np.float32)
    X[450, 1] = 0.5  # not an integer: refused by --store-vectors uint8
    np.save(tmp_path / "bad.npy", X)
    out = tmp_path / "x.ock"
    for chunk in ("100", "1000"):
        assert_data_error(run("build", ip["q"], tmp_path / "bad.npy", "-o", out, "--store-vectors", "uint8",
                              "--chunk-size", chunk), f"{tmp_path / 'bad.npy'} row 450")
    assert not out.exists()


def test_build_store_vectors_sq8(ip, tmp_path):
    """--store-vectors sq8: the file stores the codes the library stores through the quantizer's value ranges, and
    search --rerank re-ranks over them as the library does."""
    out = tmp_path / "ip_sq8.ock"
    proc = run("build", ip["q"], ip["base"], "-o", out, "--store-vectors", "sq8", check=0)
    assert "stored sq8 vectors" in proc.stdout
    q = ockstore.load_quantizer(ip["q"])
    expected = ockstore.Index.from_vectors(q, ip["X"], store_vectors="sq8")
    with ockstore.open_index(out) as index:
        assert index.store_vectors == "sq8"
        np.testing.assert_array_equal(index.vectors, expected.vectors)
    ids = tmp_path / "ids.npy"
    run("search", out, ip["query"], "-k", "5", "--rerank", "40", "-o", ids, check=0)
    np.testing.assert_array_equal(np.load(ids), expected.search(ip["X"][:12], 5, rerank=40)[1])


def test_tune_prints_the_options_of_the_library(data, rr, tmp_path):
    """ockstore tune INDEX QUERIES --target: the options ockstore.tune finds (rerank only: a flat index), printed as
    search flags and as JSON with the measurements; an impossible target is a data error (exit 1)."""
    proc = run("tune", rr["index"], data["query"], "--target", "0.9", "--threads", "1", check=0)
    assert proc.stdout.startswith("--rerank ") and "recall@10" in proc.stdout
    found = json.loads(run("tune", rr["index"], data["query"], "--target", "0.9", "--json", check=0).stdout)
    assert set(found["options"]) == {"rerank"} and found["recall"] >= 0.9 and found["measurements"]
    with ockstore.open_index(rr["index"]) as index:
        truth = ockstore.search.tune._exact_neighbours(index, data["ds"].query, 10, 1)
        _, I = index.search(data["ds"].query, 10, **found["options"])
    assert np.mean([np.isin(truth[q], I[q]).mean() for q in range(len(I))]) == pytest.approx(found["recall"])
    absent = tmp_path / "absent.npy"  # neighbours the index does not hold: no setting finds them
    np.save(absent, data["ds"].groundtruth[:, :10].astype(np.int64) + 10**9)
    assert_data_error(run("tune", rr["index"], data["query"], "--groundtruth", absent, "--target", "0.5"),
                      "cannot be reached")
