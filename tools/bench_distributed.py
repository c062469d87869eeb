"""Distributed benchmark (issue 12): building and searching a collection on a Dask LocalCluster against the
single-process build (IndexWriter) and the in-process search, in one run on the same data.

Data: the sift-real base (1M x 128 uint8), converted once from ``sift_base.bvecs.gz`` to an uncompressed ``.npy``
in ``--cache-dir`` (the build reads it memory-mapped: the workers and the single process read the same file, from the
page cache after the first run); the first ``--queries`` (1,000) queries. Quantizer: OCKM M=4 C=2 T=10 (64-bit codes,
u8 norm term), the one ``tools/bench_collection.py`` caches (loaded, or trained on the learn set and saved).

1. **Build.** Runs interleaved, ``--repeats`` (3) times each, min and median wall time:
   ``IndexWriter`` (one file; one ``add`` per partition of the distributed build, read from the .npy) with n_threads=1
   and 2; ``build_collection``
   from the .npy (``--partition-rows``, default 125,000: 8 partitions) on a LocalCluster of 1 worker and of 2 workers
   (processes, one thread each; started once, before the runs: their start-up time is printed apart). Targets: 2
   workers >= 1.7x faster than 1 worker; each within 1.3x of IndexWriter at the same thread count (the cost of Dask).
   The collection's search results are checked equal to the index file's.
2. **Search.** 1,000 queries, k = 10 and 100: ``search_collection`` on the 2-worker cluster (each worker's share
   already open: the first, cold call is timed apart) against ``Collection.search`` in this process with 1 and 2
   threads, and the index file; every result checked equal. Then ``--single`` (100) queries one at a time (latency:
   the fan-out's round trip is not hidden behind a batch).

3. **Per-core rates** for docs/scale.md (encoding vectors/s per core, segment bytes per vector, scan ns per code on
   one thread) and the issue's targets, pass or missed.

The machine (CPU, cores) and the load average before and after each section are printed: the machine is shared,
measure when it is quiet. Typical use, from the repository root:

    python tools/bench_distributed.py --json distributed.json     # ~2 min on 2 cores (plus converting the data once)
    python tools/bench_distributed.py --quick                    # smoke test on 100K base rows
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
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
from ockstore import distributed as od  # noqa: E402
from ockstore import vecfiles  # noqa: E402

import distributed  # noqa: E402

def load_avg():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def base_npy(args):
    """The sift-real base as an uncompressed .npy (uint8), converted once into the cache folder."""
    path = Path(args.cache_dir) / "sift-real-base.npy"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        X = vecfiles.read_vecs(Path(args.sift) / "sift_base.bvecs.gz")
        vecfiles.write_vecs(path, X)
        print(f"data: converted sift_base.bvecs.gz to {path} in {time.perf_counter() - t0:.1f} s", flush=True)
    return path


def quantizer(args):
    return cached_sift_ockm(args.cache_dir, 100_000,
                            lambda: vecfiles.read_vecs(Path(args.sift) / "sift_learn.bvecs.gz"))


def cluster(n_workers):
    logging.getLogger("distributed").setLevel(logging.ERROR)  # no INFO lines of the scheduler in the report
    t0 = time.perf_counter()
    lc = distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None,
                                  scheduler_kwargs={"dashboard_address": ":0"}, silence_logs=logging.ERROR)
    client = distributed.Client(lc)
    return lc, client, time.perf_counter() - t0


def section_build(q, npy, rows, work, clients, args):
    def index_writer(threads):
        def run():
            path = work / f"one-{threads}.ock"
            X = vecfiles.read_vecs(npy)  # memory-mapped
            with ockstore.IndexWriter(path, q, n_threads=threads) as w:
                # one add per partition of the distributed build (each encoded 65,536 rows at a time from its first):
                # the same chunks, so the same codes bit for bit (a row's code may differ in its last bits of
                # float rounding when it is encoded in another chunk) and the searches below compare exactly
                for s in range(0, rows, args.partition_rows):
                    w.add(X[s:min(rows, s + args.partition_rows)])
            return path
        return run

    def dask_build(n_workers):
        def run():
            folder = work / f"dask-{n_workers}"
            shutil.rmtree(folder, ignore_errors=True)
            c = od.build_collection(folder, q, npy, client=clients[n_workers], partition_rows=args.partition_rows)
            c.close()
            return folder
        return run

    runs = {"IndexWriter, 1 thread": index_writer(1), "build_collection, 1 worker": dask_build(1),
            "IndexWriter, 2 threads": index_writer(2), "build_collection, 2 workers": dask_build(2)}
    times = {name: [] for name in runs}
    made = {}
    for _ in range(args.repeats):  # interleaved
        for name, fn in runs.items():
            t0 = time.perf_counter()
            made[name] = fn()
            times[name].append(time.perf_counter() - t0)
    best = {name: min(t) for name, t in times.items()}
    print(f"\n### 1. Build of {rows:,} vectors (load before: {args.load_before})\n")
    print("| build | min s | median s | vectors/s (min) | per core vectors/s | ratio |\n|---|---:|---:|---:|---:|---|")
    out = {}
    ratios = {"IndexWriter, 1 thread": "", "IndexWriter, 2 threads": "",
              "build_collection, 1 worker": f"{best['build_collection, 1 worker'] / best['IndexWriter, 1 thread']:.3f}"
                                            " x IndexWriter 1 thread",
              "build_collection, 2 workers": f"{best['build_collection, 2 workers'] / best['IndexWriter, 2 threads']:.3f}"
                                             " x IndexWriter 2 threads; speed-up over 1 worker "
                                             f"{best['build_collection, 1 worker'] / best['build_collection, 2 workers']:.2f}"}
    for name in runs:
        cores = 2 if "2" in name else 1
        out[name] = {"min_s": best[name], "median_s": statistics.median(times[name]), "all_s": times[name],
                     "vectors_per_s": rows / best[name], "per_core_vectors_per_s": rows / best[name] / cores}
        print(f"| {name} | {best[name]:.2f} | {statistics.median(times[name]):.2f} | {rows / best[name]:,.0f} | "
              f"{rows / best[name] / cores:,.0f} | {ratios[name]} |")
    out["speedup_2_over_1_workers"] = best["build_collection, 1 worker"] / best["build_collection, 2 workers"]
    out["dask_1_over_indexwriter_1"] = best["build_collection, 1 worker"] / best["IndexWriter, 1 thread"]
    out["dask_2_over_indexwriter_2"] = best["build_collection, 2 workers"] / best["IndexWriter, 2 threads"]
    with ockstore.open_collection(made["build_collection, 2 workers"]) as c:
        info = c.info()
    out["segments"], out["collection_bytes"] = info["segments"], sum(
        os.path.getsize(os.path.join(info["path"], f["file"])) for f in info["segment_files"])
    print(f"\nspeed-up 2 workers / 1 worker: {out['speedup_2_over_1_workers']:.2f} (target >= 1.7); build_collection / "
          f"IndexWriter: {out['dask_1_over_indexwriter_1']:.3f} (1), {out['dask_2_over_indexwriter_2']:.3f} (2) "
          f"(target <= 1.3); {info['segments']} segments, {out['collection_bytes'] / 1e6:.1f} MB of segments")
    return out, made["IndexWriter, 2 threads"], made["build_collection, 2 workers"]


def section_search(index_path, folder, Q, client, args):
    index = ockstore.open_index(index_path)
    coll = ockstore.open_collection(folder)
    colds = []
    for _ in range(args.repeats):  # the workers open their shares again: the first call of a generation
        client.run(od.tasks.clear_cache)
        t0 = time.perf_counter()
        od.search_collection(folder, Q, 10, client=client)
        colds.append(time.perf_counter() - t0)
    cold = min(colds)
    contenders = {
        "search_collection, 2 workers x 1 thread": lambda k: od.search_collection(folder, Q, k, client=client),
        "Collection.search, 1 thread": lambda k: coll.search(Q, k, n_threads=1),
        "Collection.search, 2 threads": lambda k: coll.search(Q, k, n_threads=2),
        "index file, 2 threads": lambda k: index.search(Q, k, n_threads=2),
    }
    print(f"\n### 2. Search of {len(Q):,} queries (load before: {load_avg()}); first fan-out call, shares not yet open: "
          f"{1e3 * cold:.0f} ms for k=10 (min of {len(colds)})\n")
    print("| search | k | min ms (batch) | median ms | ms/query (min) | / in-process 2 threads |\n"
          "|---|---:|---:|---:|---:|---:|")
    out = {"cold_fan_out_ms": 1e3 * cold}
    for k in (10, 100):
        times = {name: [] for name in contenders}
        results = {}
        for _ in range(args.repeats * 3):
            for name, fn in contenders.items():
                t0 = time.perf_counter()
                results[name] = fn(k)
                times[name].append(time.perf_counter() - t0)
        first = next(iter(contenders))
        for name in contenders:
            np.testing.assert_array_equal(results[name][1], results[first][1], err_msg=f"{name}, k={k}")
            np.testing.assert_array_equal(results[name][0], results[first][0], err_msg=f"{name}, k={k}")
        ref = min(times["Collection.search, 2 threads"])
        for name in contenders:
            t = min(times[name])
            out[f"{name}, k={k}"] = {"min_ms": 1e3 * t, "median_ms": 1e3 * statistics.median(times[name]),
                                     "ms_per_query": 1e3 * t / len(Q), "ratio_to_in_process_2_threads": t / ref}
            print(f"| {name} | {k} | {1e3 * t:.1f} | {1e3 * statistics.median(times[name]):.1f} | "
                  f"{1e3 * t / len(Q):.3f} | {t / ref:.2f} |")
    # one query at a time: the latency, where the fan-out's round trip (client -> scheduler -> workers -> client)
    # is not hidden behind a batch
    single = {"search_collection, 2 workers x 1 thread": lambda i: od.search_collection(folder, Q[i], 10,
                                                                                       client=client),
              "Collection.search, 1 thread": lambda i: coll.search(Q[i], 10, n_threads=1),
              "Collection.search, 2 threads": lambda i: coll.search(Q[i], 10, n_threads=2)}
    times = {name: [] for name in single}
    for i in range(args.single):
        for name, fn in single.items():
            t0 = time.perf_counter()
            fn(i)
            times[name].append(time.perf_counter() - t0)
    print(f"\nOne query at a time (k=10, {args.single} queries, interleaved):\n")
    print("| search | min ms | median ms | 90th percentile ms |\n|---|---:|---:|---:|")
    for name in single:
        t = np.array(times[name]) * 1e3
        out[f"single query: {name}"] = {"min_ms": float(t.min()), "median_ms": float(np.median(t)),
                                        "p90_ms": float(np.percentile(t, 90))}
        print(f"| {name} | {t.min():.2f} | {np.median(t):.2f} | {np.percentile(t, 90):.2f} |")
    coll.close()
    index.close()
    return out


def per_core(results, rows):
    """The per-core rates docs/scale.md extrapolates from, and the issue's targets met or not."""
    build = results["build"]
    out = {"encode_vectors_per_s_per_core": build["IndexWriter, 1 thread"]["per_core_vectors_per_s"],
           "encode_vectors_per_s_per_worker": build["build_collection, 1 worker"]["per_core_vectors_per_s"],
           "segment_bytes_per_vector": build["collection_bytes"] / rows}
    print(f"\n### Per-core rates (docs/scale.md)\n\n"
          f"- encoding: {out['encode_vectors_per_s_per_core']:,.0f} vectors/s per core (IndexWriter, 1 thread); "
          f"{out['encode_vectors_per_s_per_worker']:,.0f} per worker (build_collection, 1 worker)\n"
          f"- segments: {out['segment_bytes_per_vector']:.2f} bytes per vector (codes, norm term, ids, headers)")
    if "search" in results:
        for k in (10, 100):
            ms = results["search"][f"Collection.search, 1 thread, k={k}"]["ms_per_query"]
            out[f"scan_ns_per_code_k{k}"] = 1e6 * ms / rows
            print(f"- scan (batch of queries, 1 thread, k={k}): {ms:.3f} ms per query over {rows:,} codes = "
                  f"{1e6 * ms / rows:.2f} ns per code")
    checks = [("2 workers >= 1.7x faster than 1 worker", build["speedup_2_over_1_workers"] >= 1.7,
               f"{build['speedup_2_over_1_workers']:.2f}x"),
              ("1 worker within 1.3x of IndexWriter 1 thread", build["dask_1_over_indexwriter_1"] <= 1.3,
               f"{build['dask_1_over_indexwriter_1']:.3f}x"),
              ("2 workers within 1.3x of IndexWriter 2 threads", build["dask_2_over_indexwriter_2"] <= 1.3,
               f"{build['dask_2_over_indexwriter_2']:.3f}x")]
    print("\n### Targets (issue 12)\n")
    for text, ok, value in checks:
        print(f"- {'pass' if ok else 'MISSED'}: {text} ({value})")
    out["targets"] = {text: ok for text, ok, _v in checks}
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser, REPO)
    parser.add_argument("--partition-rows", type=int, default=125_000)
    parser.add_argument("--single", type=int, default=100, help="queries searched one at a time (latency)")
    parser.add_argument("--quick", action="store_true", help="100K base rows, 200 queries, 2 repeats")
    parser.add_argument("--json", default=None)
    parser.add_argument("--build-only", action="store_true", help="section 1 only")
    args = parser.parse_args()
    if args.quick:
        args.queries, args.repeats, args.partition_rows = 200, 2, 12_500
    print(f"machine: {cpu_model()}, {core_count()} cores; load average {load_avg()}", flush=True)
    npy = base_npy(args)
    args.full_rows = vecfiles.count_vecs(npy)[0]
    rows = 100_000 if args.quick else args.full_rows
    if rows != args.full_rows:  # the first rows, as their own .npy
        small = Path(args.cache_dir) / f"sift-real-base-{rows}.npy"
        if not small.exists():
            vecfiles.write_vecs(small, vecfiles.read_vecs(npy)[:rows])
        npy = small
    Q = np.ascontiguousarray(vecfiles.read_vecs(Path(args.sift) / "sift_query.bvecs.gz")[:args.queries],
                             dtype=np.float32)
    q = quantizer(args)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-distributed-"))
    work.mkdir(parents=True, exist_ok=True)
    clusters = {}
    results = {"machine": cpu_model(), "cores": core_count(), "load_before": load_avg(), "N": rows,
               "partition_rows": args.partition_rows, "queries": len(Q)}
    try:
        for n in (1, 2):
            lc, client, started = cluster(n)
            clusters[n] = (lc, client)
            results[f"cluster_{n}_start_s"] = started
            print(f"LocalCluster of {n} worker(s), 1 thread each: started in {started:.1f} s", flush=True)
        args.load_before = load_avg()
        clients = {n: c for n, (_lc, c) in clusters.items()}
        results["build"], index_path, folder = section_build(q, npy, rows, work, clients, args)
        results["load_after_build"] = load_avg()
        print(f"load average after the build: {results['load_after_build']}", flush=True)
        if not args.build_only:
            results["search"] = section_search(index_path, folder, Q, clients[2], args)
        results["load_after"] = load_avg()
        results["per_core"] = per_core(results, rows)
        print(f"\nload average after: {results['load_after']}")
    finally:
        for lc, client in clusters.values():
            client.close()
            lc.close()
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
