"""Every Python block of README.md runs, in order, as written (issue 21): the blocks share one namespace, as a reader
pasting them into one session would, in a fresh folder that holds the shipped demo data (``demo/data``)."""

from __future__ import annotations

import os
import re
import shutil
import time

import pytest

from helpers import REPO

BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks():
    return BLOCK.findall((REPO / "README.md").read_text(encoding="utf-8"))


def test_the_readme_has_its_blocks_and_commands():
    """The first lines are the two commands; the quickstart (first block) shows cosine, stored vectors, the default
    re-ranking, allow, add and delete, reopening and get."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert text.splitlines()[3].startswith("make demo") and text.splitlines()[4].startswith("make test")
    first = python_blocks()[0]
    for needle in ('metric="cosine"', "store_vectors=", "allow=", ".add(", ".delete(", "open_collection(", ".get(",
                   "retrain("):
        assert needle in first, needle


def test_the_quickstart_block_runs_on_its_own(tmp_path, monkeypatch):
    """The first block needs nothing but numpy and ockstore: an app could paste it alone."""
    monkeypatch.chdir(tmp_path)
    exec(compile(python_blocks()[0], "README.md python block 1", "exec"), {"__name__": "__readme__"})
    assert os.path.isdir("notes")


@pytest.mark.slow
def test_every_python_block_of_the_readme_runs(tmp_path, monkeypatch):
    """All the blocks in one session (about a minute: three trainings on the demo sample and a local Dask
    cluster)."""
    blocks = python_blocks()
    assert len(blocks) >= 5
    shutil.copytree(REPO / "demo" / "data", tmp_path / "demo" / "data")
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__readme__"}
    for number, block in enumerate(blocks):
        if "ockstore import distributed" in block:
            pytest.importorskip("distributed", reason="the Dask block needs ockstore[dask]")
        t0 = time.perf_counter()
        try:
            exec(compile(block, f"README.md python block {number + 1}", "exec"), namespace)
        except Exception as exc:  # noqa: BLE001 - re-raised with the block that failed
            raise AssertionError(f"README python block {number + 1} failed: {exc!r}\n{block}") from exc
        print(f"block {number + 1}: {time.perf_counter() - t0:.1f} s")
    assert os.path.isdir("notes") and os.path.isdir("sift")
