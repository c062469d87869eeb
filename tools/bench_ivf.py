"""Inverted-file benchmark: ockstore IVF(1024, OCKM(4, 2, 10)) against faiss-cpu's IVF1024,PQ8 and IVF1024 with a
ProductResidualQuantizer 4x2x8 (beam 10, cqint8 norm), in one run on the same data.

faiss-cpu (and matplotlib, for --plot) are benchmark-only dependencies: imported here and nowhere in the package.

    ours     IVF(n_lists, OCKM(4, 2, 10)): coarse k-means, OCKM codes of the residuals (64 bits) + the norm term of the
             whole reconstruction in one byte; built into a file by IndexWriter in a child process (its peak resident
             memory, VmHWM, is reported), searched through open_index (read-only mmap).
    faiss    index_factory("IVF{n_lists},PQ8") (residuals by default, precomputed tables: faiss's defaults), and
             IndexIVFProductResidualQuantizer(n_lists, 4 splits x 2 x 8 bits, ST_norm_cqint8) with max_beam_size 10
             on every sub-quantizer.
    exhaustive  a flat OCKM(4, 2, 10) index of the same base (every code scanned), and our IVF at n_probe = n_lists.

For each n_probe: recall@1/10/100 (the true nearest neighbour among the first R results, ockstore.evaluation) and
ms per query on 1 thread for the whole batch of queries (k = 100; BLAS on one thread too), the three libraries
interleaved, the minimum (and median) of --repeats runs. Training (coarse + fine) runs on all cores for every
library; ours and faiss IVF-PRQ are trained --train-repeats times, interleaved, and the minimum is kept. The criteria
of the inverted-file issue are checked at the end. The machine (CPU, cores) and its load average are printed.

    python tools/bench_ivf.py --out bench-ivf.md --json bench-ivf.json --plot docs/figures/ivf_recall_speed.png
    python tools/bench_ivf.py --quick          # smoke test: 200K base, 25K learn, 256 lists
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import ockstore  # noqa: E402
from _machine import bench_finish, bench_start, load_average  # noqa: E402
from _plots import plot_recall_speed  # noqa: E402
from ockstore.evaluation import recall_at_r  # noqa: E402

K_SEARCH = 100
PROBES = (1, 4, 8, 16, 32, 64, 128)

# The child process that builds our file: the IVF from its quantizer file, the base streamed from its file in
# chunks, IndexWriter; prints the build time and VmHWM (peak resident memory) as JSON.
BUILD_CHILD = r"""
import json, sys, time
import ockstore
from ockstore.datasets import iter_vecs
quantizer_path, base_path, out_path, limit, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
ivf = ockstore.load_quantizer(quantizer_path)
t0 = time.perf_counter()
done = 0
with ockstore.IndexWriter(out_path, ivf, n_threads=threads) as w:
    for chunk in iter_vecs(base_path, chunk_size=100_000):
        chunk = chunk[: limit - done] if limit else chunk
        w.add(chunk)
        done += len(chunk)
        if limit and done >= limit:
            break
seconds = time.perf_counter() - t0
status = {line.split(":")[0]: line.split(":")[1].strip() for line in open("/proc/self/status") if ":" in line}
print(json.dumps({"seconds": seconds, "vmhwm_kb": int(status.get("VmHWM", "0 kB").split()[0]), "n": done}))
"""


def make_faiss_pq(d, n_lists):
    import faiss

    return faiss.index_factory(d, f"IVF{n_lists},PQ8")


def make_faiss_prq(d, n_lists):
    import faiss

    coarse = faiss.IndexFlatL2(d)
    index = faiss.IndexIVFProductResidualQuantizer(coarse, d, n_lists, 4, 2, 8, faiss.METRIC_L2,
                                                   faiss.AdditiveQuantizer.ST_norm_cqint8)
    coarse.this.disown()  # the IVF index owns its coarse quantizer (else Python frees it under faiss's feet)
    index.own_fields = True
    for i in range(index.prq.nsplits):
        faiss.downcast_Quantizer(index.prq.subquantizer(i)).max_beam_size = 10
    return index


def timed(fn):
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "sift-real"),
                        help="texmex-style dataset folder (default: ../shared/data/sift-real from the repository)")
    parser.add_argument("--queries", type=int, default=1000, help="first N queries (default 1000)")
    parser.add_argument("--lists", type=int, default=1024, help="n_lists (default 1024)")
    parser.add_argument("--probes", type=int, nargs="+", default=list(PROBES), help="n_probe values")
    parser.add_argument("--repeats", type=int, default=3, help="timed searches per (index, n_probe) (default 3)")
    parser.add_argument("--train-repeats", type=int, default=2,
                        help="trainings of ours and of faiss IVF-PRQ, interleaved (default 2)")
    parser.add_argument("--threads", type=int, default=None, help="threads for training and adding (default: all)")
    parser.add_argument("--quick", action="store_true", help="smoke test: 200K base, 25K learn, 256 lists")
    parser.add_argument("--out", default=None, help="write the markdown report here")
    parser.add_argument("--json", default=None, help="write every figure as JSON here")
    parser.add_argument("--plot", default=None, help="write the recall@10 / queries-per-second plot here (.png)")
    parser.add_argument("--workdir", default=None, help="folder for the index files (default: a temporary folder)")
    parser.add_argument("--training-only", action="store_true",
                        help="only the interleaved trainings of ours and faiss IVF-PRQ, and their ratio")
    args = parser.parse_args(argv)
    if args.quick:
        args.lists = 256 if args.lists == 1024 else args.lists

    import faiss
    from threadpoolctl import threadpool_limits

    machine, threads, load_start, learn, base, query, gt, workdir = bench_start(args, K_SEARCH, "bench_ivf_")
    base = np.ascontiguousarray(base, dtype=np.float32)
    L = args.lists

    # ---- training: ours and faiss IVF-PRQ interleaved, all cores
    train = {"ours": [], "faiss IVF-PRQ": []}
    ivf = prq = None
    for rep in range(args.train_repeats):
        model = ockstore.IVF(L, ockstore.OCKM(4, 2, 10), n_threads=threads)
        seconds, _ = timed(lambda: model.fit(learn))
        train["ours"].append(seconds)
        ivf = model if ivf is None else ivf
        faiss.omp_set_num_threads(threads)
        index = make_faiss_prq(learn.shape[1], L)
        seconds, _ = timed(lambda: index.train(learn))
        train["faiss IVF-PRQ"].append(seconds)
        prq = index if prq is None else prq
        print(f"training {rep + 1}: ours {train['ours'][-1]:.2f} s, faiss IVF-PRQ {train['faiss IVF-PRQ'][-1]:.2f} s",
              flush=True)
    if args.training_only:
        pairs = [f"{a / b:.2f}" for a, b in zip(train["ours"], train["faiss IVF-PRQ"])]
        print(f"training: ours min {min(train['ours']):.2f} s, faiss IVF-PRQ min {min(train['faiss IVF-PRQ']):.2f} s, "
              f"ratio of the minima {min(train['ours']) / min(train['faiss IVF-PRQ']):.2f}, of each pair "
              f"{', '.join(pairs)}; load average {load_average()[0]:.2f}", flush=True)
        return 0
    faiss.omp_set_num_threads(threads)
    pq = make_faiss_pq(learn.shape[1], L)
    seconds, _ = timed(lambda: pq.train(learn))
    train["faiss IVF-PQ"] = [seconds]
    print(f"training faiss IVF-PQ {seconds:.2f} s", flush=True)

    # ---- building: ours in a child process (peak memory), faiss in this one
    quantizer_path = workdir / "ivf.ockq"
    index_path = workdir / "ivf.ock"
    ockstore.save_quantizer(quantizer_path, ivf)
    base_file = next(p for p in Path(args.data).iterdir() if "_base." in p.name)
    base_rows = len(base) if args.quick else 0  # the child reads the same prefix of the base file (0: all of it)
    child = subprocess.run([sys.executable, "-c", BUILD_CHILD, str(quantizer_path), str(base_file), str(index_path),
                            str(base_rows), str(threads)], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    build = json.loads(child.stdout.strip().splitlines()[-1])
    print(f"build (child): {build['n']:,} vectors in {build['seconds']:.1f} s, peak RSS {build['vmhwm_kb'] / 1024:.0f} "
          "MB", flush=True)
    add = {"ours": build["seconds"]}
    for name, index in (("faiss IVF-PQ", pq), ("faiss IVF-PRQ", prq)):
        seconds, _ = timed(lambda: index.add(base))
        add[name] = seconds
        print(f"add {name}: {seconds:.1f} s", flush=True)

    # ---- exhaustive: a flat OCKM index of the same base
    flat_q = ockstore.OCKM(4, 2, 10, n_threads=threads)
    flat_train, _ = timed(lambda: flat_q.fit(learn))
    flat = ockstore.Index.from_vectors(flat_q, base, n_threads=threads)

    ours = ockstore.open_index(index_path)
    sizes = ours.list_sizes
    searches = {"ours": lambda p: ours.search(query, K_SEARCH, n_probe=p, n_threads=1)[1]}
    for name, index in (("faiss IVF-PQ", pq), ("faiss IVF-PRQ", prq)):
        def run(p, index=index):
            faiss.omp_set_num_threads(1)
            index.nprobe = p
            return index.search(query, K_SEARCH)[1]
        searches[name] = run

    rows = []
    with threadpool_limits(limits=1):
        for name, fn in searches.items():  # warm-up: page in the codes, build lazy tables
            fn(args.probes[0])
        flat.search(query[:10], K_SEARCH, n_threads=1)
        exhaustive = [timed(lambda: flat.search(query, K_SEARCH, n_threads=1)[1]) for _ in range(args.repeats)]
        flat_ms = 1000 * min(t for t, _ in exhaustive) / len(query)
        flat_ids = exhaustive[0][1]
        for p in list(args.probes) + [L]:
            times = {name: [] for name in searches}
            ids = {}
            for _ in range(args.repeats):
                for name, fn in searches.items():  # interleaved
                    if p == L and name != "ours":
                        continue
                    seconds, ids[name] = timed(lambda: fn(p))
                    times[name].append(seconds)
            for name in ids:
                row = {"index": name, "n_probe": p,
                       "recall@1": recall_at_r(ids[name], gt, 1), "recall@10": recall_at_r(ids[name], gt, 10),
                       "recall@100": recall_at_r(ids[name], gt, 100),
                       "ms_per_query": 1000 * min(times[name]) / len(query),
                       "ms_per_query_median": 1000 * statistics.median(times[name]) / len(query)}
                row["qps"] = 1000 / row["ms_per_query"]
                rows.append(row)
                print(f"  n_probe {p:4d}  {name:<14} R@1 {row['recall@1']:.3f}  R@10 {row['recall@10']:.3f}  "
                      f"R@100 {row['recall@100']:.3f}  {row['ms_per_query']:.4f} ms/q (median "
                      f"{row['ms_per_query_median']:.4f})", flush=True)
    flat_row = {"recall@1": recall_at_r(flat_ids, gt, 1), "recall@10": recall_at_r(flat_ids, gt, 10),
                "recall@100": recall_at_r(flat_ids, gt, 100), "ms_per_query": flat_ms, "train_s": flat_train}
    print(f"  exhaustive flat OCKM: R@10 {flat_row['recall@10']:.3f}, {flat_ms:.3f} ms/q", flush=True)
    load_end = load_average()

    report = {"machine": machine, "load_average_start": load_start, "load_average_end": load_end,
              "setup": {"learn": len(learn), "base": len(base), "queries": len(query), "k": K_SEARCH, "n_lists": L,
                        "repeats": args.repeats, "threads_train": threads},
              "train_s": train, "add_s": add, "build_peak_rss_mb": build["vmhwm_kb"] / 1024,
              "file_bytes": os.path.getsize(index_path),
              "list_sizes": {"min": int(sizes.min()), "max": int(sizes.max()), "median": float(np.median(sizes)),
                             "empty": int((sizes == 0).sum())},
              "rows": rows, "flat": flat_row, "criteria": criteria(rows, train, build, flat_row, L)}
    ours.close()
    bench_finish(report, args, markdown)
    if args.plot:
        plot(report, args.plot)
        print(f"wrote {args.plot}")
    return 0


def criteria(rows, train, build, flat, L):
    """The done-when list of the inverted-file issue, each with its figures."""
    by = {(r["index"], r["n_probe"]): r for r in rows}
    out = []
    for p in sorted({r["n_probe"] for r in rows}):
        if not 8 <= p <= 128 or ("faiss IVF-PQ", p) not in by:
            continue
        o, a, b = by["ours", p], by["faiss IVF-PQ", p], by["faiss IVF-PRQ", p]
        out.append({"what": f"n_probe {p}: recall@10 {o['recall@10']:.3f} > IVF-PQ {a['recall@10']:.3f} and "
                            f"IVF-PRQ {b['recall@10']:.3f}; {o['ms_per_query']:.4f} ms/q <= IVF-PQ "
                            f"{a['ms_per_query']:.4f}",
                    "pass": o["recall@10"] > max(a["recall@10"], b["recall@10"])
                    and o["ms_per_query"] <= a["ms_per_query"]})
    if ("ours", 16) in by:
        o = by["ours", 16]
        out.append({"what": f"n_probe 16: recall@10 {o['recall@10']:.3f} >= 0.70", "pass": o["recall@10"] >= 0.70})
        speedup = flat["ms_per_query"] / o["ms_per_query"]
        out.append({"what": f"n_probe 16: {speedup:.1f}x faster than exhaustive OCKM ({flat['ms_per_query']:.3f} ms/q)",
                    "pass": speedup >= 15})
    ratio = min(train["ours"]) / min(train["faiss IVF-PRQ"])
    out.append({"what": f"training {min(train['ours']):.2f} s = {ratio:.2f}x faiss IVF-PRQ's "
                        f"{min(train['faiss IVF-PRQ']):.2f} s (<= 0.5x)", "pass": ratio <= 0.5})
    mb = build["vmhwm_kb"] / 1024
    out.append({"what": f"building the file peaks at {mb:.0f} MB resident (< 400 MB)", "pass": mb < 400})
    return out


def markdown(report):
    m = report["machine"]
    s = report["setup"]
    la, lb = report["load_average_start"], report["load_average_end"]
    lines = [f"Machine: {m['cpu']}, {m['cores']} cores ({m['platform']}); Python {m['python']}, numpy {m['numpy']}, "
             f"faiss-cpu {m['faiss']}, ockstore {m['ockstore']}. Load average {la[0]:.2f} at the start, {lb[0]:.2f} "
             "at the end.", "",
             f"Setup: {s['learn']:,} learn, {s['base']:,} base, {s['queries']:,} queries, k = {s['k']}, "
             f"{s['n_lists']} lists; search on 1 thread, the batch of queries at once, minimum of {s['repeats']} "
             f"interleaved runs; training and adding on {s['threads_train']} threads.", "",
             "| n_probe | index | R@1 | R@10 | R@100 | ms/query | queries/s |", "|---:|---|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        lines.append(f"| {r['n_probe']} | {r['index']} | {r['recall@1']:.3f} | {r['recall@10']:.3f} | "
                     f"{r['recall@100']:.3f} | {r['ms_per_query']:.4f} | {r['qps']:,.0f} |")
    f = report["flat"]
    lines += ["", f"Exhaustive flat OCKM(4, 2, 10) over the same base: R@1/10/100 {f['recall@1']:.3f}/"
                  f"{f['recall@10']:.3f}/{f['recall@100']:.3f}, {f['ms_per_query']:.3f} ms/query.", "",
              "| | ockstore IVF-OCKM | faiss IVF-PQ8 | faiss IVF-PRQ 4x2x8 |", "|---|---:|---:|---:|"]
    t, a = report["train_s"], report["add_s"]
    runs = {name: ", ".join(f"{x:.2f}" for x in values) for name, values in t.items()}
    lines.append(f"| training (coarse + fine), s: min (every run, interleaved) | {min(t['ours']):.2f} "
                 f"({runs['ours']}) | {min(t['faiss IVF-PQ']):.2f} | {min(t['faiss IVF-PRQ']):.2f} "
                 f"({runs['faiss IVF-PRQ']}) |")
    lines.append(f"| adding 1M (ours: IndexWriter to a file, in a child process), s | {a['ours']:.1f} | "
                 f"{a['faiss IVF-PQ']:.1f} | {a['faiss IVF-PRQ']:.1f} |")
    ls = report["list_sizes"]
    lines += ["", f"Building our file peaked at {report['build_peak_rss_mb']:.0f} MB resident (VmHWM of the child); "
                  f"file {report['file_bytes'] / 1e6:.1f} MB; list sizes {ls['min']}..{ls['max']} (median "
                  f"{ls['median']:.0f}, {ls['empty']} empty).", "", "Criteria:", ""]
    lines += [f"- {'pass' if c['pass'] else 'FAIL'}: {c['what']}" for c in report["criteria"]]
    return "\n".join(lines) + "\n"


def plot(report, path):
    n_lists = report["setup"]["n_lists"]
    styles = {"ours": (f"ockstore IVF{n_lists} + OCKM(4, 2, 10), 9 B/vector", "C0", "o"),
              "faiss IVF-PQ": (f"faiss IVF{n_lists},PQ8, 8 B/vector", "C1", "s"),
              "faiss IVF-PRQ": (f"faiss IVF{n_lists} + PRQ 4x2x8 (beam 10, cqint8), 9 B/vector", "C2", "^")}
    curves = [(label, color, marker, [(r["qps"], r["recall@10"], str(r["n_probe"]) if name == "ours" else None)
                                      for r in report["rows"] if r["index"] == name and r["n_probe"] < n_lists])
              for name, (label, color, marker) in styles.items()]
    plot_recall_speed(curves, path, xlabel="queries per second (1 thread, batch of 1,000, k = 100)",
                      ylabel="recall@10",
                      title=f"sift-real {report['setup']['base']:,} vectors: recall@10 against speed (labels: n_probe)")


if __name__ == "__main__":
    sys.exit(main())
