"""Collections for apps (issue 21): a collection grown from empty that trains its own quantizer, against one built at
once from a model trained on the learn set; the training commit and retrain (time, peak memory); the disk after 20
writer launches; the default train_size and re-ranking (10-recall@10 against the training rows); cosine scored as a
ratio against the inner product of the reconstruction. One run, the same data, printed with the machine and its load.

Sections (``--sections``, default all):

* ``grow`` (minilm-real: 16K learn, 40K base, 1K queries, 384-d, unit vectors; OCKM(16, 2, 10), cosine, 256 bits,
  float16 stored vectors): a collection made with the unfitted quantizer and the default train_size (10,240) grown
  in 40 adds of 1,000 base vectors (the 11th trains it), against a collection created with the same OCKM fitted on
  the learn set and given the 40K base in one add. 10-recall@10 (the ground truth's top 10 in the top 10 returned,
  averaged) and recall@1 with the default re-ranking (10 k candidates), and queries/s of a batch of the 1,000 queries
  (``--threads``, default 1). The training commit (the 11th add) and a ``retrain`` of the grown collection each run in
  a child process: wall time and the child's peak resident memory (VmHWM) against its resident memory before the
  call. The exact search of the untrained collection (9,000 rows) is timed too.
* ``disk``: 20 launches of open("a") -> add 100 vectors -> close on the built collection after a compaction: the
  folder's bytes after each, against the bytes of the live generation's files.
* ``train-sizes``: 10-recall@10 of a flat index of the base (minilm-real: the 40K base, OCKM(16, 2, 10) cosine;
  sift-real: the first 100K base vectors, OCKM(8, 2, 10) L2, uint8 stored, exact ground truth by brute force) with a
  model trained on the first n learn vectors, without re-ranking and with rerank 5 k and 10 k: the measurement behind
  the default train_size (40 rows per word) and the default re-ranking (10 k).
* ``cosine``: minilm-real, OCKM(16, 2, 10) (256 bits) and OCKM(32, 2, 10) (512 bits), cosine, trained on the learn
  set, exhaustive ADC without re-ranking: 10-recall@10 and the mean |score - true cosine| of the top 10, scored as
  <q, x_hat> (norm_encoding "none", as before format 1.3) and as <q, x_hat> / ||x_hat|| ("u8" and "f32" norm terms).

Typical use, from the repository root (about 15 minutes on 2 busy cores):

    python tools/bench_app_collection.py --json app.json
    python tools/bench_app_collection.py --sections grow disk --quick
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ockstore  # noqa: E402
from _machine import core_count, cpu_model  # noqa: E402
from ockstore.datasets import iter_vecs, load_texmex  # noqa: E402
from ockstore.evaluation import exact_knn, k_recall_at_k, recall_at_r  # noqa: E402

DATA = REPO.parent.parent / "shared" / "data"
BATCHES, BATCH = 40, 1000


def load_avg():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def vm(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def minilm(root):
    ds = load_texmex(root / "minilm-real")
    return (np.asarray(ds.learn), np.asarray(ds.base), np.asarray(ds.query),
            np.asarray(ds.groundtruth)[:, :10].astype(np.int64))


def quality(collection_or_index, Q, gt, threads, **options):
    """(10-recall@10, recall@1, queries/s of the batch: the best of 3 runs)."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        D, I = collection_or_index.search(Q, 10, n_threads=threads, **options)
        best = min(best, time.perf_counter() - t0)
    return k_recall_at_k(I, gt, 10), recall_at_r(I, gt, 1), len(Q) / best


def folder_bytes(folder):
    return sum(e.stat().st_size for e in os.scandir(folder) if e.is_file())


def child(mode, folder, payload):
    """Run a timed call in a child process: its wall time, VmHWM and resident memory before (JSON on stdout)."""
    out = subprocess.run([sys.executable, __file__, "--child", mode, str(folder), str(payload)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the {mode} child failed (exit {out.returncode}):\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_child(mode, folder, payload):
    c = ockstore.open_collection(folder, "a")
    X = np.load(payload) if mode == "train-commit" else None
    before = vm("VmRSS")
    t0 = time.perf_counter()
    if mode == "train-commit":
        c.add(X)
    else:
        c.retrain()
    elapsed = time.perf_counter() - t0
    info = c.info()
    c.close()
    print(json.dumps({"seconds": elapsed, "rss_before": before, "peak": vm("VmHWM"), "trained": info["trained"],
                      "N": info["N"], "generation": info["generation"]}))


def section_grow(args, work, results):
    learn, base, Q, gt = minilm(args.data)
    if args.quick:
        base, BATCHES_ = base[:20000], 20
    else:
        BATCHES_ = BATCHES
    unfitted = ockstore.OCKM(16, 2, 10, metric="cosine")
    grown = work / "grown"
    c = ockstore.create_collection(grown, unfitted, store_vectors="float16")
    train_size = c.info()["train_size"]
    crossing = None
    for b in range(BATCHES_):
        rows = base[b * BATCH:(b + 1) * BATCH]
        if crossing is None and len(c) + len(rows) >= train_size:
            crossing = b
            t0 = time.perf_counter()
            c.search(Q, 10, n_threads=args.threads)
            exact_qps = len(Q) / (time.perf_counter() - t0)
            results["untrained"] = {"rows": len(c), "queries_per_s": exact_qps}
            print(f"untrained collection of {len(c):,} rows: exact search {exact_qps:,.0f} queries/s "
                  f"({args.threads} thread)", flush=True)
            c.close()
            np.save(work / "batch.npy", rows)
            stats = child("train-commit", grown, work / "batch.npy")
            results["training_commit"] = stats
            print(f"training commit (add {len(rows):,} -> {stats['N']:,} rows, trained={stats['trained']}): "
                  f"{stats['seconds']:.1f} s, peak RSS {stats['peak'] / 1e6:.0f} MB (before {stats['rss_before'] / 1e6:.0f}"
                  " MB)", flush=True)
            c = ockstore.open_collection(grown, "a")
            continue
        c.add(rows)
    t0 = time.perf_counter()
    at_once = ockstore.create_collection(work / "built", ockstore.OCKM(16, 2, 10, metric="cosine").fit(learn),
                                         store_vectors="float16")
    train_s = time.perf_counter() - t0
    at_once.add(base[:BATCHES_ * BATCH])
    n = len(at_once)
    gt_n = gt if n == len(base) and not args.quick else exact_knn(Q, base[:n], 10)[1]
    rows = {}
    for name, col in (("grown from empty (auto-trained)", c), ("built at once (learn set)", at_once)):
        r10, r1, qps = quality(col, Q, gt_n, args.threads)
        r10_0, _, qps_0 = quality(col, Q, gt_n, args.threads, rerank=0)
        rows[name] = {"ten_recall_at_10": r10, "recall_at_1": r1, "queries_per_s": qps, "segments":
                      col.info()["segments"], "trained_on": results["training_commit"]["N"] if "grown" in name
                      else len(learn), "without_rerank": {"ten_recall_at_10": r10_0, "queries_per_s": qps_0}}
        print(f"{name:34s} trained on {rows[name]['trained_on']:6,} rows, {rows[name]['segments']} segments: "
              f"10-recall@10 {r10:.3f}, recall@1 {r1:.3f}, {qps:,.0f} queries/s (rerank=0: {r10_0:.3f}, "
              f"{qps_0:,.0f} queries/s)", flush=True)
    results["grow"] = rows
    results["fit_learn_seconds"] = train_s
    c.close()
    stats = child("retrain", grown, "-")
    results["retrain"] = stats
    with ockstore.open_collection(grown) as r:
        r10, r1, qps = quality(r, Q, gt_n, args.threads)
    results["retrain"].update({"ten_recall_at_10": r10, "recall_at_1": r1, "queries_per_s": qps})
    print(f"retrain ({stats['N']:,} rows): {stats['seconds']:.1f} s, peak RSS {stats['peak'] / 1e6:.0f} MB (before "
          f"{stats['rss_before'] / 1e6:.0f} MB); after it 10-recall@10 {r10:.3f}, recall@1 {r1:.3f}", flush=True)
    at_once.close()


def section_disk(args, work, results):
    learn, base, _, _ = minilm(args.data)
    folder = work / "disk"
    with ockstore.create_collection(folder, ockstore.OCKM(16, 2, 10, metric="cosine").fit(learn[:4000]),
                                    store_vectors="float16") as c:
        for b in range(10):
            c.add(base[b * 1000:(b + 1) * 1000])
        c.compact()
    sizes = []
    for launch in range(20):
        with ockstore.open_collection(folder, "a") as c:
            c.add(base[20000 + launch * 100:20000 + (launch + 1) * 100])
            info = c.info()
        live = {"quantizer_file": info["quantizer_file"]}
        live_bytes = sum((folder / s["file"]).stat().st_size for s in info["segment_files"])
        sizes.append({"launch": launch + 1, "folder_bytes": folder_bytes(folder), "live_segment_bytes": live_bytes,
                      "files": len(os.listdir(folder)), **live})
    results["disk"] = sizes
    first, last = sizes[0], sizes[-1]
    print(f"disk after 20 launches: {last['folder_bytes'] / 1e6:.1f} MB in {last['files']} files (live segments "
          f"{last['live_segment_bytes'] / 1e6:.1f} MB); after the first launch {first['folder_bytes'] / 1e6:.1f} MB",
          flush=True)


def section_train_sizes(args, work, results):
    out = {}
    learn, base, Q, gt = minilm(args.data)
    sizes = [256, 1024, 2560, 5120, 10240, 16000]
    out["minilm"] = _sweep(learn, base, Q, gt, sizes, lambda: ockstore.OCKM(16, 2, 10, metric="cosine"), "float16")
    ds = load_texmex(args.data / "sift-real")
    sift_base = next(iter_vecs(args.data / "sift-real" / "sift_base.bvecs.gz", chunk_size=100_000))
    sift_q = np.asarray(ds.query)[:1000]
    sift_gt = exact_knn(sift_q, sift_base, 10)[1]
    out["sift"] = _sweep(np.asarray(ds.learn), sift_base, sift_q, sift_gt, [1024, 2560, 5120, 10240, 20480, 100000],
                         lambda: ockstore.OCKM(8, 2, 10), "uint8")
    results["train_sizes"] = out


def _sweep(learn, base, Q, gt, sizes, make, store):
    rows = []
    for n in sizes:
        t0 = time.perf_counter()
        q = make().fit(learn[:n])
        fit_s = time.perf_counter() - t0
        index = ockstore.Index.from_vectors(q, base, store_vectors=store)
        row = {"train_rows": n, "fit_seconds": fit_s}
        for name, R in (("none", None), ("5k", 50), ("10k", 100)):
            row[name] = k_recall_at_k(index.search(Q, 10, rerank=R)[1], gt, 10)
        rows.append(row)
        print(f"  {n:7,} training rows ({fit_s:5.1f} s): 10-recall@10 {row['none']:.3f} without re-ranking, "
              f"{row['5k']:.3f} with 5 k, {row['10k']:.3f} with 10 k", flush=True)
    return rows


def section_cosine(args, work, results):
    learn, base, Q, gt = minilm(args.data)
    Qn = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    Bn = base / np.linalg.norm(base, axis=1, keepdims=True)
    out = []
    for M in (16, 32):
        q = ockstore.OCKM(M, 2, 10, metric="cosine").fit(learn)
        for encoding in ("none", "u8", "f32"):
            index = ockstore.Index.from_vectors(q, base, norm_encoding=encoding)
            D, I = index.search(Q, 10)
            true = np.einsum("qkd,qd->qk", Bn[I], Qn)
            row = {"bits": q.bits, "norm_encoding": encoding, "ten_recall_at_10": k_recall_at_k(I, gt, 10),
                   "score_error": float(np.abs(D - true).mean()), "score_bias": float((D - true).mean())}
            out.append(row)
            print(f"  {q.bits} bits, norm term {encoding:4s}: 10-recall@10 {row['ten_recall_at_10']:.3f}, mean "
                  f"|score - cosine| of the top 10 {row['score_error']:.3f} (mean score - cosine "
                  f"{row['score_bias']:+.3f})", flush=True)
    results["cosine"] = out


SECTIONS = {"grow": section_grow, "disk": section_disk, "train-sizes": section_train_sizes, "cosine": section_cosine}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("OCKSTORE_DATA", DATA)))
    parser.add_argument("--sections", nargs="+", choices=tuple(SECTIONS), default=list(SECTIONS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="grow: half the base (20 adds)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--child", nargs=3, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_child(*args.child)
        return
    print(f"machine: {cpu_model()}, {core_count()} cores; load average {load_avg()}; ockstore {ockstore.__version__}",
          flush=True)
    results = {"machine": cpu_model(), "cores": core_count(), "load_before": load_avg(), "threads": args.threads}
    work = Path(tempfile.mkdtemp(prefix="bench_app_"))
    try:
        for name in args.sections:
            print(f"== {name}", flush=True)
            SECTIONS[name](args, work, results)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["load_after"] = load_avg()
    print(f"load average after: {results['load_after']}", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
