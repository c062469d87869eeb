"""The collection commands of ``ockstore`` (create, add, delete, compact) and the commands that read a collection
folder as well as an index file (info, verify, search, eval), run in-process with test_cli.run; results are checked
against the Python API, failures against the exit-status rules (docs/ARCHITECTURE.md, "Command line")."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import ockstore
from ockstore import evaluation
from cli_runner import TRAIN_ARGS, assert_data_error, assert_usage_error, run, write_dataset


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("collection-cli")
    ds, paths = write_dataset(d, 30, seed=5)
    np.save(d / "more.npy", ds.base[:200] + 1.0)
    np.save(d / "more_ids.npy", np.arange(200) + 50_000)
    (d / "doomed.txt").write_text("# every 7th id\n" + "\n".join(str(i) for i in range(0, 3000, 7)) + "\n-1 99999\n")
    q = d / "q.ockq"
    run("train", paths["learn.fvecs"], "-o", q, *TRAIN_ARGS, check=0)
    return {"dir": d, "ds": ds, "q": q, **{k.split(".")[0]: v for k, v in paths.items()}}


def test_create_add_delete_compact_and_read(files, tmp_path):
    folder = tmp_path / "coll"
    out = run("create", files["q"], folder, "--store-vectors", "float32", "--metadata", "who=cli", "--merge-factor",
              "4", check=0).stdout
    assert "created collection" in out
    out = run("add", folder, files["base"], "--chunk-size", "700", check=0).stdout
    assert "added 3,000 vectors" in out and "ids 0..2,999" in out and "generation 1" in out
    out = run("add", folder, files["dir"] / "more.npy", "--ids", files["dir"] / "more_ids.npy", check=0).stdout
    assert "added 200 vectors" in out and "generation 2" in out
    out = run("delete", folder, files["dir"] / "doomed.txt", check=0).stdout
    assert "deleted 429 of 430 ids" in out and "generation 3" in out
    with ockstore.open_collection(folder) as c:
        assert c.metadata == {"who": "cli"} and len(c) == 3200 - 429 and c.info()["merge_factor"] == 4
        assert c.info()["segments"] == 2  # one commit per add, whatever the chunk size
        expected = c.search(np.asarray(files["ds"].query), 10)
        info = c.info()
    shown = json.loads(run("info", folder, "--json", check=0).stdout)
    assert shown == json.loads(json.dumps(info))
    text = run("info", folder, check=0).stdout
    assert "generation:" in text and "segment_files:" in text
    assert "ok: 2,771 vectors" in run("verify", folder, check=0).stdout
    ids_path = tmp_path / "ids.npy"
    run("search", folder, files["query"], "-k", "10", "-o", ids_path, check=0)
    assert np.array_equal(np.load(ids_path), expected[1])
    run("search", folder, files["query"], "-k", "5", "--rerank", "30", "-o", tmp_path / "rr.npy", check=0)
    out = run("compact", folder, check=0).stdout
    assert "2 segments" in out and "-> 1" in out and "removed" in out
    assert "generation 3 is kept as the fallback" in out and "ockstore compact --no-fallback" in out
    manifests = sorted(n for n in os.listdir(folder) if n.startswith("manifest."))
    assert manifests == ["manifest.0000000003", "manifest.0000000004"]
    with ockstore.open_collection(folder) as c:
        assert c.info()["segments"] == 1 and c.info()["deleted"] == 0
        D, I = c.search(np.asarray(files["ds"].query), 10)
    assert np.array_equal(I, expected[1]) and np.array_equal(D, expected[0])
    assert "ok: 2,771 vectors" in run("verify", folder, check=0).stdout
    run("delete", folder, files["dir"] / "doomed.txt", check=0)  # nothing left to delete: no commit
    run("add", folder, files["dir"] / "more.npy", check=0)
    out = run("compact", folder, "--no-fallback", check=0).stdout
    assert "fallback" not in out
    manifests = sorted(n for n in os.listdir(folder) if n.startswith("manifest."))
    assert manifests == ["manifest.0000000006"]
    assert "ok: 2,971 vectors" in run("verify", folder, check=0).stdout


def test_eval_of_a_collection_equals_the_api(files, tmp_path):
    folder = tmp_path / "coll"
    run("create", files["q"], folder, check=0)
    run("add", folder, files["base"], check=0)
    result = json.loads(run("eval", folder, files["query"], files["gt"], "-k", "10", "--json", check=0).stdout)
    with ockstore.open_collection(folder) as c:
        _, I = c.search(np.asarray(files["ds"].query), 10)
    gt = np.asarray(files["ds"].groundtruth)
    assert result["recall@1"] == evaluation.recall_at_r(I, gt, 1) and result["N"] == 3000


def test_collection_command_errors(files, tmp_path):
    folder = tmp_path / "coll"
    run("create", files["q"], folder, check=0)
    assert_data_error(run("create", files["q"], folder), "already a collection")
    assert_data_error(run("add", tmp_path / "nothing", files["base"]), "no such collection folder")
    assert_data_error(run("add", folder, files["dir"] / "nothing.fvecs"), "nothing.fvecs")
    assert_data_error(run("add", folder, files["learn"], "--ids", files["dir"] / "more_ids.npy"), "200 ids for 2,000")
    run("add", folder, files["dir"] / "more.npy", "--ids", files["dir"] / "more_ids.npy", check=0)
    assert_data_error(run("add", folder, files["dir"] / "more.npy", "--ids", files["dir"] / "more_ids.npy"),
                      "id 50000 is already in the collection")
    assert_data_error(run("delete", folder, files["dir"] / "missing.txt"), "missing.txt")
    assert_data_error(run("search", folder, files["query"], "-k", "3", "--rerank", "5"), "rerank needs")
    with ockstore.open_collection(folder, "a"):
        assert_data_error(run("delete", folder, files["dir"] / "doomed.txt"), "already open for writing",
                          "writer.lock")
        assert_data_error(run("compact", folder), "already open for writing")
        assert "ok: 200 vectors" in run("verify", folder, check=0).stdout  # readers are not refused
    assert_usage_error(run("create", files["q"], tmp_path / "x", "--merge-factor", "1"), "--merge-factor")
    assert_usage_error(run("add", folder), "BASE_FILE")
    assert_data_error(run("create", files["dir"] / "nothing.ockq", tmp_path / "y"), "nothing.ockq")
    assert not (tmp_path / "y").exists()


def test_add_is_one_commit_or_none(files, tmp_path):
    """A bad vector in the last chunk: nothing is added (no commit, no file left), exit 1 with one line."""
    folder = tmp_path / "coll"
    run("create", files["q"], folder, check=0)
    bad = np.array(files["ds"].base[:900], dtype=np.float32)
    bad[850, 3] = np.nan
    np.save(tmp_path / "bad.npy", bad)
    before = sorted(p.name for p in folder.iterdir())
    assert_data_error(run("add", folder, tmp_path / "bad.npy", "--chunk-size", "300"), "NaN")
    assert sorted(p.name for p in folder.iterdir()) == before
    with ockstore.open_collection(folder) as c:
        assert c.generation == 0 and len(c) == 0


def test_add_names_a_refused_row_by_its_row_in_the_file(files, tmp_path):
    folder = tmp_path / "coll"
    run("create", files["q"], folder, "--store-vectors", "float16", check=0)
    X = np.array(files["ds"].base[:500], dtype=np.float32)
    X[450, 1] = 1e6  # beyond float16
    np.save(tmp_path / "bad.npy", X)
    for chunk in ("100", "1000"):
        assert_data_error(run("add", folder, tmp_path / "bad.npy", "--chunk-size", chunk),
                          f"{tmp_path / 'bad.npy'} row 450")
    with ockstore.open_collection(folder) as c:
        assert len(c) == 0


def test_a_skipped_manifest_is_one_warning_line(files, tmp_path):
    """A collection whose newest manifest does not verify opens at the previous generation with a CollectionWarning:
    one line 'ockstore: warning: ...' on stderr (no source line); a data error after it is still one error line."""
    folder = tmp_path / "coll"
    run("create", files["q"], folder, check=0)
    run("add", folder, files["dir"] / "more.npy", check=0)
    run("add", folder, files["dir"] / "more.npy", check=0)
    newest = folder / "manifest.0000000002"
    data = bytearray(newest.read_bytes())
    data[-2] ^= 0xFF
    newest.write_bytes(bytes(data))
    for args in (("info", folder), ("search", folder, files["query"], "-k", "2", "--limit", "1")):
        proc = run(*args, check=0)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ockstore: warning: "), proc.stderr
        assert "manifest.0000000002" in lines[0] and "generation 1" in lines[0]
    proc = run("add", folder, files["dir"] / "nothing.fvecs")  # a data error after the warning: exit 1
    assert proc.returncode == 1, proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("ockstore: warning: "), proc.stderr
    assert lines[1].startswith("ockstore: error: ") and "Traceback" not in proc.stderr


def test_rerank_on_a_collection_without_vectors_says_how_to_create_one(files, tmp_path):
    folder = tmp_path / "coll"
    run("create", files["q"], folder, check=0)
    run("add", folder, files["dir"] / "more.npy", check=0)
    line = assert_data_error(run("search", folder, files["query"], "-k", "3", "--rerank", "10"),
                             "'ockstore create ... --store-vectors")
    assert "ockstore build" not in line


def test_delete_refuses_negative_ids_but_the_padding_of_results(files, tmp_path):
    """Ids are >= 0 (Collection.delete refuses others); -1, the padding of a result file, is skipped."""
    folder = tmp_path / "coll"
    run("create", files["q"], folder, check=0)
    run("add", folder, files["dir"] / "more.npy", check=0)
    (tmp_path / "neg.txt").write_text("3 4\n-5\n")
    assert_data_error(run("delete", folder, tmp_path / "neg.txt"), "-5")
    (tmp_path / "pad.txt").write_text("3 4 -1 -1\n")
    assert "deleted 2 of 2 ids" in run("delete", folder, tmp_path / "pad.txt", check=0).stdout


def test_a_collection_that_trains_its_quantizer_from_the_command_line(files, tmp_path):
    """create without QUANTIZER_FILE: the quantizer options, --store-vectors required; add below --train-size keeps
    stored vectors (search exact, info says untrained), the add that reaches it trains; retrain; the usage errors."""
    folder = tmp_path / "app"
    out = run("create", folder, "--method", "ockm", "--subspaces", "4", "--codebooks", "2", "--codewords", "16",
              "--iterations", "3", "--metric", "cosine", "--store-vectors", "float32", "--train-size", "2000",
              check=0).stdout
    assert "not trained yet" in out and "2,000 vectors" in out
    small = tmp_path / "small.npy"
    np.save(small, np.asarray(files["ds"].base[:1500]))
    run("add", folder, small, check=0)
    shown = json.loads(run("info", folder, "--json", check=0).stdout)
    assert shown["trained"] is False and shown["N"] == 1500 and shown["P"] == files["ds"].base.shape[1]
    ids_path = tmp_path / "ids.npy"
    run("search", folder, files["query"], "-k", "5", "-o", ids_path, check=0)
    with ockstore.open_collection(folder) as c:
        assert np.array_equal(np.load(ids_path), c.search(np.asarray(files["ds"].query), 5)[1])
    run("add", folder, files["base"], check=0)  # 3,000 more: trains
    shown = json.loads(run("info", folder, "--json", check=0).stdout)
    assert shown["trained"] is True and shown["N"] == 4500
    out = run("retrain", folder, "--sample", "1000", check=0).stdout
    assert "retrained" in out and "1,000 of 4,500" in out
    assert "ok: 4,500 vectors" in run("verify", folder, check=0).stdout
    assert_usage_error(run("create", tmp_path / "x", "--method", "ockm", "--subspaces", "4"), "--store-vectors")
    assert_usage_error(run("create", tmp_path / "x"), "give QUANTIZER_FILE")
    assert_usage_error(run("create", files["q"], tmp_path / "x", "--method", "pq"), "not with QUANTIZER_FILE")
    assert_usage_error(run("create", tmp_path / "x", "--method", "pq", "--subspaces", "2", "--beam", "3",
                           "--store-vectors", "float16"), "method pq has no beam_width")
    plain = tmp_path / "plain"
    run("create", files["q"], plain, check=0)
    assert_data_error(run("retrain", plain), "retrain needs the stored vectors", "--store-vectors")
