"""The data of tools/bench_pareto.py: each dataset read once from its texmex files and kept as .npy files in the cache
(so build and memory child processes map them instead of decompressing the .gz again), the recall measures, and the
process status figures (benchmark-only; never imported by the package)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA_ROOT = REPO.parent / "shared" / "data"
if not DEFAULT_DATA_ROOT.is_dir():  # a worktree under /work/wt/<name>: shared/data is two levels up
    DEFAULT_DATA_ROOT = REPO.parents[1] / "shared" / "data"
# Built indexes (several GB for sift 1M): outside git (bench-results/ is ignored); --cache puts them elsewhere.
DEFAULT_CACHE = REPO / "bench-results" / "pareto"

N_QUERIES = 1000  # the timed batch: the first 1,000 queries of the query file
QUICK_BASE = 100_000  # --quick: the first 100K base vectors of sift (ground truth recomputed exactly)
K = 10


@dataclass(frozen=True)
class DataSpec:
    """One dataset as the benchmark uses it: a key naming data and subset (cache keys start with it), the metric
    ("l2", or "cosine" on normalised vectors), and the sizes of the partitions the inverted files use, which depend
    only on the number of base vectors (see ``partitions``)."""

    key: str
    source: str  # "sift" or "minilm"
    folder: str
    metric: str
    n_base: int
    dim: int
    n_lists: int  # ockstore IVF and faiss IVF lists
    scann_leaves: int  # ScaNN tree leaves
    cache: str  # the folder of this dataset's .npy files

    def path(self, role):
        return Path(self.cache) / f"{role}.npy"

    def load(self, role, mmap=True):
        """``role`` in learn, base, queries (the timed batch), gt (its true top 100 ids), tune_queries, tune_gt."""
        return np.load(self.path(role), mmap_mode="r" if mmap else None)

    def base_f32(self, start, stop):
        """Base rows start..stop as float32 (what the graph libraries take)."""
        return np.ascontiguousarray(self.load("base")[start:stop], dtype=np.float32)

    def to_json(self):
        return json.dumps(self.__dict__)

    @staticmethod
    def from_json(text):
        return DataSpec(**json.loads(text))


def partitions(n_base):
    """(ockstore/faiss IVF lists, ScaNN leaves): 1,024 / 1,000 from 500K base vectors up (the figures of the issue on
    sift 1M), else 256 / 250 (the 40K of minilm and the 100K --quick subset: ~√N, with ≥ 60 learn rows per list)."""
    return (1024, 1000) if n_base >= 500_000 else (256, 250)


def _normalised(X):
    X = np.array(X, dtype=np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X


def _exact_top(Q, base, k, metric):
    """Exact top-k ids of Q over base (squared L2 in float64; cosine on normalised rows is the same order)."""
    from ockstore.evaluation import exact_knn

    if metric == "cosine":
        Q, base = _normalised(Q), _normalised(base)
    return np.asarray(exact_knn(np.asarray(Q, dtype=np.float32), base, k)[1], dtype=np.int64)


def prepare(source, folder, cache_root, quick=False):
    """The DataSpec of ``source`` ("sift" or "minilm"), writing its .npy files into ``cache_root`` the first time.

    sift: base uint8 as in the file (1M, or the first 100K with ``quick``), queries = the first 1,000 queries, gt = the
    file's top 100 of them (recomputed exactly over a 100K subset); tune_queries = queries 1,000..1,999 (held out from
    the timed batch) with their ground truth. minilm: vectors normalised again in float32 (the file's are unit
    length up to rounding), metric cosine, the file's ground truth (squared L2 over unit vectors = cosine order);
    tune_queries = the first 1,000 learn vectors (minilm has only 1,000 queries), ground truth computed here."""
    from ockstore.datasets import load_texmex

    if source not in ("sift", "minilm"):
        raise ValueError(f"data must be sift or minilm, got {source!r}")
    if source == "sift":
        key = "sift100K" if quick else "sift1M"
    else:
        key = "minilm40K"
    cache = Path(cache_root) / "data" / key
    meta_path = cache / "meta.json"
    if meta_path.exists():
        return DataSpec.from_json(meta_path.read_text())
    t0 = time.perf_counter()
    cache.mkdir(parents=True, exist_ok=True)
    ds = load_texmex(folder)
    metric = "l2" if source == "sift" else "cosine"
    if source == "sift":
        learn = np.asarray(ds.learn)
        if quick:
            parts, have = [], 0
            for chunk in ds.iter_base(QUICK_BASE):
                parts.append(np.asarray(chunk[: QUICK_BASE - have]))
                have += len(parts[-1])
                if have >= QUICK_BASE:
                    break
            base = np.concatenate(parts)
        else:
            base = np.asarray(ds.base)
        queries_all = np.asarray(ds.query[: 2 * N_QUERIES])
        if quick:
            gt_all = _exact_top(queries_all, base, 100, metric)
        else:
            gt_all = np.asarray(ds.groundtruth[: 2 * N_QUERIES], dtype=np.int64)
        queries, tune_queries = queries_all[:N_QUERIES], queries_all[N_QUERIES:]
        gt, tune_gt = gt_all[:N_QUERIES], gt_all[N_QUERIES:]
    else:
        learn = _normalised(ds.learn)
        base = _normalised(ds.base)
        queries = _normalised(ds.query[:N_QUERIES])
        gt = np.asarray(ds.groundtruth[:N_QUERIES], dtype=np.int64)
        tune_queries = learn[:N_QUERIES]
        tune_gt = _exact_top(tune_queries, base, 100, metric)
    for role, arr in (("learn", learn), ("base", base), ("queries", queries), ("gt", gt),
                      ("tune_queries", tune_queries), ("tune_gt", tune_gt)):
        np.save(cache / f"{role}.npy", np.ascontiguousarray(arr))
    n_lists, leaves = partitions(len(base))
    spec = DataSpec(key=key, source=source, folder=str(folder), metric=metric, n_base=int(len(base)),
                    dim=int(base.shape[1]), n_lists=n_lists, scann_leaves=leaves, cache=str(cache))
    meta_path.write_text(spec.to_json())
    print(f"data {key}: base {base.shape} {base.dtype}, learn {learn.shape}, queries {queries.shape}; written to "
          f"{cache} in {time.perf_counter() - t0:.0f} s", flush=True)
    return spec


# ------------------------------------------------------------------------------------------------------- recall
def recall_10_at_10(I, gt):
    """Mean |top 10 returned ∩ true top 10| / 10 (padding ids -1 never match)."""
    I = np.asarray(I)[:, :10]
    return float((I[:, :, None] == np.asarray(gt)[:, None, :10]).any(axis=2).sum(axis=1).mean() / 10)


def recall_at_1(I, gt):
    """Fraction of queries whose first result is the true nearest neighbour."""
    return float((np.asarray(I)[:, 0] == np.asarray(gt)[:, 0]).mean())


# ------------------------------------------------------------------------------------------------ process figures
STATUS_FIELDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM")


def process_status():
    """VmRSS and its parts (anon, file-backed, shared memory) and VmHWM of this process, in KiB, from
    /proc/self/status. Pages of a file mapped with mmap count in RssFile once touched (they are page-cache pages,
    shared with other processes mapping the file and reclaimable); memory the process allocated counts in RssAnon."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in STATUS_FIELDS:
                out[name] = int(value.split()[0])
    return out


def thread_ticks():
    """CPU time (clock ticks, user + system) of each thread of this process, by thread id, from
    /proc/self/task/*/stat: comparing two readings shows how many threads ran between them."""
    ticks = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        ticks[task] = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks


def threads_that_ran(before, after):
    """Threads whose CPU time grew between two ``thread_ticks`` readings (a thread that ran less than one tick,
    10 ms, is not seen)."""
    return sum(1 for tid, t in after.items() if t > before.get(tid, 0))


def load_average():
    try:
        return os.getloadavg()
    except OSError:  # pragma: no cover
        return (float("nan"),) * 3


def dir_or_file_bytes(path):
    """Bytes of a file, or of every file under a folder (ScaNN saves a folder)."""
    path = Path(path)
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size
