"""Collection benchmark (issue 10): adding, searching, deleting and compacting a collection of the sift-real base,
against building and searching one index file, in one run on the same data.

faiss-cpu is benchmark-only: one faiss IndexPQ search is timed beside ours for context (section 2).

Sections, on sift-real (1M base, 128-d uint8, the first ``--queries`` (1,000) queries), OCKM M=4 C=2 T=10 (64-bit
codes, u8 norm term; loaded from ``--cache-dir`` as ``tools/bench_options.py`` caches it, or trained and saved):

1. **Adding.** The 1M base in 10 calls of 100K to a new collection, against one file built with ``IndexWriter``
   (10 chunks of 100K, no ids), all threads, runs interleaved: with ``merge_factor=16`` (the ten segments are kept:
   the collection searched in section 2) and with the default policy (F = 10: the tenth add merges the ten segments
   into one). Target: collection / IndexWriter <= 1.25.
2. **Searching.** 1 thread, a batch of ``--queries`` queries, k = 10 and 100: the 10-segment collection against the
   same collection compacted into one segment and against the plain index file of section 1; every result checked
   equal. Target: 10 segments / compacted <= 1.2.
3. **Deleting 10%.** A seeded random 10% of the ids deleted from the 10-segment collection in one commit; its results
   must equal a filtered search (``allow=`` the survivors' ids) of the plain index; both timed.
4. **Compaction** of that collection (1M rows, 10 segments, 10% deleted) into one segment, in a child process (a
   fresh copy each run): wall time and the child's peak resident memory (``VmHWM``; the resident memory after
   opening is printed too). Targets: <= 2 s, < 200 MB. The compacted collection's results are checked against the filtered
   search again.
5. **Single-row adds.** ``--single-adds`` (10,000) adds of one vector each (sift-real learn vectors, auto ids) to the
   1M collection of section 1 made with the default policy (one segment): time per add (median, 90th percentile,
   mean, max), segments left, and the search time (as in section 2) of the generation after the adds against the
   one before (two readers, searched in turn).

Timings: ``time.perf_counter`` around each call; ``--repeats`` (3) runs, min and median. The machine (CPU, cores) and
its load average before and after are printed. Typical use, from the repository root:

    python tools/bench_collection.py --json collection.json     # ~5 min on 2 cores (plus the data loading)
    python tools/bench_collection.py --quick                   # smoke test on 100K base rows
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
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
from _cache import add_common_arguments, cached_sift_ockm  # noqa: E402
from _machine import core_count, cpu_model  # noqa: E402
from ockstore.datasets import load_texmex  # noqa: E402

SEED = 20240612
CALLS = 10
DELETE_FRACTION = 0.10


def load_avg():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def timed(fn, repeats):
    """(min, median, last result) of ``repeats`` calls."""
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times), result


def quantizer(args, learn):
    return cached_sift_ockm(args.cache_dir, len(learn), lambda: learn)


def folder_bytes(folder):
    return sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder))


# ---------------------------------------------------------------------------------------------------- the sections
def section_adding(q, base, work, repeats):
    chunk = len(base) // CALLS
    rows = {}

    def build_file():
        path = work / "one.ock"
        with ockstore.IndexWriter(path, q) as w:
            for s in range(0, len(base), chunk):
                w.add(base[s:s + chunk])
        return path

    def build_collection(name, factor):
        def run():
            folder = work / name
            shutil.rmtree(folder, ignore_errors=True)
            with ockstore.create_collection(folder, q, merge_factor=factor) as c:
                for s in range(0, len(base), chunk):
                    c.add(base[s:s + chunk])
                return folder, c.info()["segments"]
        return run

    runs = {"IndexWriter, one file": build_file, "collection, 10 adds, F=16 (10 segments)": build_collection("ten", 16),
            "collection, 10 adds, F=10 (default: merged)": build_collection("merged", 10)}
    times = {name: [] for name in runs}
    for _ in range(repeats):  # interleaved
        for name, fn in runs.items():
            t0 = time.perf_counter()
            rows[name] = fn()
            times[name].append(time.perf_counter() - t0)
    base_t = min(times["IndexWriter, one file"])
    print("\n### 1. Adding the base in 10 calls (all threads)\n")
    print("| build | min s | median s | / IndexWriter (min) | segments | size MB |\n|---|---:|---:|---:|---:|---:|")
    out = {}
    for name in runs:
        result = rows[name]
        segs, size = (1, os.path.getsize(result)) if isinstance(result, Path) else (result[1], folder_bytes(result[0]))
        out[name] = {"min_s": min(times[name]), "median_s": statistics.median(times[name]),
                     "ratio": min(times[name]) / base_t, "segments": segs, "bytes": size}
        print(f"| {name} | {min(times[name]):.2f} | {statistics.median(times[name]):.2f} | "
              f"{min(times[name]) / base_t:.3f} | {segs} | {size / 1e6:.1f} |")
    return (out, rows["IndexWriter, one file"], rows["collection, 10 adds, F=16 (10 segments)"][0],
            rows["collection, 10 adds, F=10 (default: merged)"][0])


def search_table(title, contenders, Q, repeats, ks=(10, 100)):
    """Time each contender's search (1 thread) at each k, interleaved; check every result equals the first's."""
    print(f"\n### {title}\n")
    print("| searched | k | min ms/query | median ms/query | / first |\n|---|---:|---:|---:|---:|")
    out = {}
    for k in ks:
        times = {name: [] for name in contenders}
        results = {}
        for _ in range(repeats):
            for name, fn in contenders.items():
                t0 = time.perf_counter()
                results[name] = fn(Q, k)
                times[name].append(time.perf_counter() - t0)
        first = next(iter(contenders))
        for name in contenders:
            if not name.startswith("faiss"):
                assert np.array_equal(results[name][1], results[first][1]), f"{name} differs from {first} at k={k}"
                assert np.array_equal(results[name][0], results[first][0]), f"{name} differs from {first} at k={k}"
            t, m = min(times[name]), statistics.median(times[name])
            ratio = t / min(times[first])
            out[f"{name}, k={k}"] = {"min_ms_per_query": 1e3 * t / len(Q), "median_ms_per_query": 1e3 * m / len(Q),
                                     "ratio": ratio}
            print(f"| {name} | {k} | {1e3 * t / len(Q):.3f} | {1e3 * m / len(Q):.3f} | {ratio:.3f} |")
    return out


def child_compact(folder):
    """In a child process: open, compact, report time and peak RSS (JSON on stdout). The peak is VmHWM of
    /proc/self/status: ru_maxrss would report the parent's size (Linux keeps it across the exec of a forked child)."""
    def status_mb(field):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(field)) / 1024
    c = ockstore.open_collection(folder, "a")
    before = status_mb("VmRSS:")
    t0 = time.perf_counter()
    c.compact()
    elapsed = time.perf_counter() - t0
    peak = status_mb("VmHWM:")
    info = c.info()
    c.close()
    print(json.dumps({"seconds": elapsed, "peak_rss_mb": peak, "rss_after_open_mb": before,
                      "segments": info["segments"], "N": info["N"]}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser, REPO)
    parser.add_argument("--single-adds", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="100K base rows, 200 queries, 1,000 single adds")
    parser.add_argument("--json", default=None)
    parser.add_argument("--child-compact", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_compact:
        child_compact(args.child_compact)
        return
    if args.quick:
        args.queries, args.single_adds = 200, 1000
    print(f"machine: {cpu_model()}, {core_count()} cores; load average {load_avg()}", flush=True)
    ds = load_texmex(args.sift)
    t0 = time.perf_counter()
    learn = np.ascontiguousarray(ds.learn)
    base = np.ascontiguousarray(ds.base)
    if args.quick:
        base = base[:100_000]
    Q = np.ascontiguousarray(ds.query[:args.queries], dtype=np.float32)
    print(f"data: base {base.shape}, learn {learn.shape}, {len(Q)} queries ({time.perf_counter() - t0:.1f} s)",
          flush=True)
    q = quantizer(args, learn)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-collection-"))
    work.mkdir(parents=True, exist_ok=True)
    results = {"machine": cpu_model(), "cores": core_count(), "load_before": load_avg(), "N": len(base)}
    try:
        results["adding"], one_file, ten, merged = section_adding(q, base, work, args.repeats)

        compacted = work / "compacted"
        shutil.copytree(ten, compacted)
        with ockstore.open_collection(compacted, "a") as c:
            c.compact()
        ten_c = ockstore.open_collection(ten)
        one_c = ockstore.open_collection(compacted)
        index = ockstore.open_index(one_file)
        import faiss
        faiss.omp_set_num_threads(1)
        fpq = faiss.IndexPQ(base.shape[1], 8, 8)
        fpq.train(learn.astype(np.float32))
        fpq.add(base.astype(np.float32))
        contenders = {"collection, 10 segments": lambda Q, k: ten_c.search(Q, k, n_threads=1),
                      "collection, compacted (1 segment)": lambda Q, k: one_c.search(Q, k, n_threads=1),
                      "index file (IndexWriter)": lambda Q, k: index.search(Q, k, n_threads=1),
                      "faiss IndexPQ 8x8 (context)": lambda Q, k: fpq.search(Q, k)}
        results["search"] = search_table("2. Searching (1 thread, batch)", contenders, Q, args.repeats)

        rng = np.random.default_rng(SEED)
        doomed = rng.choice(len(base), size=int(DELETE_FRACTION * len(base)), replace=False).astype(np.int64)
        survivors = np.setdiff1d(np.arange(len(base), dtype=np.int64), doomed)
        with ockstore.open_collection(ten, "a") as w:
            t0 = time.perf_counter()
            removed = w.delete(doomed)
            delete_s = time.perf_counter() - t0
        assert removed == len(doomed)
        ten_c.refresh()
        mask = np.zeros(len(base), dtype=bool)
        mask[survivors] = True
        contenders = {"collection, 10 segments, 10% deleted": lambda Q, k: ten_c.search(Q, k, n_threads=1),
                      "index file, allow=survivor ids": lambda Q, k: index.search(Q, k, allow=survivors, n_threads=1),
                      "index file, allow=survivor mask": lambda Q, k: index.search(Q, k, allow=mask, n_threads=1)}
        results["deleted"] = search_table(f"3. After deleting 10% (delete: {delete_s:.2f} s, one commit)", contenders,
                                          Q, args.repeats)
        results["delete_s"] = delete_s

        runs = []
        for r in range(args.repeats):
            copy = work / f"compact-{r}"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(ten, copy)
            out = subprocess.run([sys.executable, __file__, "--child-compact", str(copy)], capture_output=True,
                                 text=True, check=True)
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        with ockstore.open_collection(work / "compact-0") as c:
            D1, I1 = c.search(Q, 10, n_threads=1)
        D2, I2 = index.search(Q, 10, allow=survivors, n_threads=1)
        assert np.array_equal(I1, I2) and np.array_equal(D1, D2), "compacted results differ from the filtered search"
        seconds = [r["seconds"] for r in runs]
        results["compaction"] = {"min_s": min(seconds), "median_s": statistics.median(seconds),
                                 "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
                                 "rss_after_open_mb": runs[0]["rss_after_open_mb"], "rows": len(base),
                                 "live": runs[0]["N"]}
        print(f"\n### 4. Compaction ({len(base):,} rows in 10 segments, 10% deleted -> 1 segment, child process)\n")
        print("| min s | median s | peak RSS MB | RSS after open MB |\n|---:|---:|---:|---:|")
        c = results["compaction"]
        print(f"| {c['min_s']:.2f} | {c['median_s']:.2f} | {c['peak_rss_mb']:.0f} | {c['rss_after_open_mb']:.0f} |")
        print("results of the compacted collection == filtered search of the index file: yes")

        single = merged  # the default policy (F = 10): the 1M rows of section 1 in one segment
        X = learn[:args.single_adds]
        per_add = []
        before_reader = ockstore.open_collection(single)  # keeps its snapshot: searched beside the one after
        with ockstore.open_collection(single, "a") as w:
            for x in X:
                t0 = time.perf_counter()
                w.add(x)
                per_add.append(time.perf_counter() - t0)
            info = w.info()
        after_reader = ockstore.open_collection(single)
        times = {"before": [], "after": []}
        for _ in range(args.repeats):
            for name, reader in (("before", before_reader), ("after", after_reader)):
                t0 = time.perf_counter()
                reader.search(Q, 10, n_threads=1)
                times[name].append(time.perf_counter() - t0)
        before_reader.close()
        after_reader.close()
        per_add = np.array(per_add) * 1e3
        results["single_adds"] = {"adds": len(X), "median_ms": float(np.median(per_add)),
                                  "p90_ms": float(np.percentile(per_add, 90)), "mean_ms": float(per_add.mean()),
                                  "max_ms": float(per_add.max()), "segments": info["segments"],
                                  "segment_rows": sorted((s["rows"] for s in info["segment_files"]), reverse=True),
                                  "search_before_ms_per_query": 1e3 * min(times["before"]) / len(Q),
                                  "search_after_ms_per_query": 1e3 * min(times["after"]) / len(Q)}
        s = results["single_adds"]
        print(f"\n### 5. {len(X):,} single-row adds to a collection of {info['N'] - len(X):,} vectors (default policy)\n")
        print("| median ms/add | p90 ms | mean ms | max ms | segments left | search before ms/q | after ms/q |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        print(f"| {s['median_ms']:.2f} | {s['p90_ms']:.2f} | {s['mean_ms']:.2f} | {s['max_ms']:.1f} | {s['segments']} "
              f"| {s['search_before_ms_per_query']:.3f} | {s['search_after_ms_per_query']:.3f} |")
        print(f"segment rows: {s['segment_rows']}")
        for handle in (ten_c, one_c, index):
            handle.close()
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    results["load_after"] = load_avg()
    add = results["adding"]
    ratio_add = add["collection, 10 adds, F=16 (10 segments)"]["ratio"]
    ratio_search = max(results["search"][f"collection, 10 segments, k={k}"]["min_ms_per_query"]
                       / results["search"][f"collection, compacted (1 segment), k={k}"]["min_ms_per_query"]
                       for k in (10, 100))
    print("\n### Targets\n")
    print(f"- adding in 10 calls / IndexWriter: {ratio_add:.3f} (F=16), "
          f"{add['collection, 10 adds, F=10 (default: merged)']['ratio']:.3f} (default policy) (target <= 1.25)")
    print(f"- search, 10 segments / compacted: {ratio_search:.3f} (worst of k=10, 100) (target <= 1.2)")
    print(f"- compaction: {results['compaction']['min_s']:.2f} s (target <= 2), peak RSS "
          f"{results['compaction']['peak_rss_mb']:.0f} MB (target < 200)")
    print(f"load average after: {results['load_after']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
