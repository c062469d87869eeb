"""Fast-scan benchmark: 4-bit OCKM codes (OCKM(8, 2, 10, n_codewords=16), 64 bits) scanned with in-register tables,
against today's 8-bit OCKM(4, 2, 10) and faiss-cpu's fast scan (PQ16x4fs), in one run on the same data.

faiss-cpu (and matplotlib, for --plot) are benchmark-only dependencies: imported here and nowhere in the package.

1. Exhaustive scan (k = 10 and k = 100, one thread, the batch of queries at once; minimum of --repeats interleaved
   runs, wall clock and process CPU time: on a loaded machine the CPU time is the steadier figure):
       ours        Index.from_vectors(OCKM(8, 2, 10, n_codewords=16), base): 4-bit words in fast-scan blocks + a
                   one-byte norm term, 9 bytes per vector
       ockm-8bit   the same of OCKM(4, 2, 10): one byte per word, 9 bytes per vector (today's scan)
       faiss PQ16x4fs   faiss.IndexPQFastScan(128, 16, 4), 8 bytes per vector
       faiss PQ8x8      faiss.IndexPQ(128, 8, 8), 8 bytes per vector (reported, no criterion)
   Criteria (at each k): ours >= 4x faster than ockm-8bit, at most PQ16x4fs's time; recall@1/10/100 (of the k = 100
   results) above PQ16x4fs's.
2. Inverted file, k = 10, 10-recall@10 (the share of the true 10 nearest neighbours among the 10 returned):
       ours        IVF(1024, OCKM(8, 2, 10, n_codewords=16)) with store_vectors="uint8", search(n_probe, rerank=R)
       faiss       IVF1024,PQ16x4fs refined by IndexRefine(..., SQ8), k_factor = R / 10
   at (n_probe, R) in PAIRS; criteria at (8, 50), (16, 100), (32, 100): our 10@10 at least faiss's and our time at
   most faiss's. --plot draws both curves (10@10 against queries per second).
3. Distortion of the 64-bit options (mean squared reconstruction error over --distortion-rows base vectors, and the
   training time on all cores): OCKM(8, 2, K=16), OCKM(4, 4, K=16), PQ(16, K=16) against OCKM(4, 2) and PQ(8) with
   K = 256 (--skip-distortion leaves it out: OCKM(4, 4) trains for minutes).

The machine (CPU, cores) and its load average are printed; figures are ratios in the same run plus absolute times.

    python tools/bench_fastscan.py --out bench-fastscan.md --json bench-fastscan.json --plot docs/figures/fastscan.png
    python tools/bench_fastscan.py --quick       # smoke test: 200K base, 25K learn, 256 lists, no distortion
"""

from __future__ import annotations

import argparse
import os
import statistics
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

K_FLATS = (10, 100)
K_FLAT = max(K_FLATS)   # the recalls are those of the k = 100 results
K_IVF = 10
# (n_probe, candidates re-ranked): ours rerank=R, faiss IndexRefine k_factor = R / K_IVF. The first three are the
# issue's criteria; the others complete the curves.
PAIRS = ((4, 50), (8, 50), (16, 100), (32, 100), (64, 100))
CRITERIA_PAIRS = ((8, 50), (16, 100), (32, 100))


def default_data():
    """$OCKSTORE_DATA/sift-real, else shared/data/sift-real in the nearest folder above the repository."""
    if os.environ.get("OCKSTORE_DATA"):
        return str(Path(os.environ["OCKSTORE_DATA"]) / "sift-real")
    for folder in REPO.parents:
        if (folder / "shared" / "data" / "sift-real").is_dir():
            return str(folder / "shared" / "data" / "sift-real")
    return str(REPO.parent / "shared" / "data" / "sift-real")


def ten_at_ten(ids, gt):
    """10-recall@10: the share of the 10 true nearest neighbours among the first 10 returned (ann-benchmarks')."""
    ids = np.asarray(ids)[:, :K_IVF]
    return float(np.mean([len(set(ids[i]) & set(gt[i, :K_IVF])) / K_IVF for i in range(len(ids))]))


def timed(fn):
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def timed_cpu(fn):
    """(wall seconds, process CPU seconds, result): every search here runs on one thread, so its CPU time is its
    own work, without the time other processes took the core."""
    t0, c0 = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - t0, time.process_time() - c0, result


def interleaved(searches, repeats):
    """Run each search `repeats` times, interleaved; returns {name: (min seconds, median seconds, ids)}."""
    times = {name: [] for name in searches}
    ids = {}
    for _ in range(repeats):
        for name, fn in searches.items():
            seconds, ids[name] = timed(fn)
            times[name].append(seconds)
    return {name: (min(t), statistics.median(t), ids[name]) for name, t in times.items()}


def interleaved_cpu(searches, repeats):
    """As interleaved, with the minimum CPU time too: {name: (min s, median s, min CPU s, ids)}."""
    wall = {name: [] for name in searches}
    cpu = {name: [] for name in searches}
    ids = {}
    for _ in range(repeats):
        for name, fn in searches.items():
            seconds, cpu_seconds, ids[name] = timed_cpu(fn)
            wall[name].append(seconds)
            cpu[name].append(cpu_seconds)
    return {name: (min(wall[name]), statistics.median(wall[name]), min(cpu[name]), ids[name]) for name in searches}


def exhaustive(learn, base, query, gt, repeats, threads):
    import faiss

    models = {}
    train = {}
    for name, make in (("ours", lambda: ockstore.OCKM(8, 2, 10, n_codewords=16, n_threads=threads)),
                       ("ockm-8bit", lambda: ockstore.OCKM(4, 2, 10, n_threads=threads))):
        q = make()
        train[name], _ = timed(lambda: q.fit(learn))
        models[name] = ockstore.Index.from_vectors(q, base, n_threads=threads)
        print(f"{name}: trained in {train[name]:.1f} s, {models[name].bytes_per_vector} bytes/vector", flush=True)
    faiss.omp_set_num_threads(threads)
    fs = faiss.IndexPQFastScan(base.shape[1], 16, 4)
    pq = faiss.IndexPQ(base.shape[1], 8, 8)
    for name, index in (("faiss PQ16x4fs", fs), ("faiss PQ8x8", pq)):
        train[name], _ = timed(lambda: index.train(learn))
        index.add(base)
        print(f"{name}: trained in {train[name]:.1f} s", flush=True)
    faiss.omp_set_num_threads(1)
    searches = {}
    for k in K_FLATS:
        for name, index in models.items():
            searches[name, k] = lambda index=index, k=k: index.search(query, k, n_threads=1)[1]
        searches["faiss PQ16x4fs", k] = lambda k=k: fs.search(query, k)[1]
        searches["faiss PQ8x8", k] = lambda k=k: pq.search(query, k)[1]
    for fn in searches.values():  # warm-up
        fn()
    sizes = {name: index.bytes_per_vector for name, index in models.items()}
    sizes.update({"faiss PQ16x4fs": fs.code_size, "faiss PQ8x8": pq.code_size})
    timings = interleaved_cpu(searches, repeats)
    rows = []
    for (name, k), (best, median, cpu, _) in timings.items():
        ids = timings[name, K_FLAT][3]
        row = {"index": name, "k": k, "bytes_per_vector": int(sizes[name]), "recall@1": recall_at_r(ids, gt, 1),
               "recall@10": recall_at_r(ids, gt, 10), "recall@100": recall_at_r(ids, gt, 100),
               "ms_per_query": 1000 * best / len(query), "ms_per_query_median": 1000 * median / len(query),
               "cpu_ms_per_query": 1000 * cpu / len(query), "train_s": train[name]}
        rows.append(row)
        print(f"  {name:<15} k={k:<3} R@1 {row['recall@1']:.3f}  R@10 {row['recall@10']:.3f}  "
              f"R@100 {row['recall@100']:.3f}  {row['ms_per_query']:.4f} ms/q (median "
              f"{row['ms_per_query_median']:.4f}, CPU {row['cpu_ms_per_query']:.4f})", flush=True)
    return rows


def inverted(learn, base_u8, query, gt, n_lists, repeats, threads, workdir):
    import faiss

    ivf = ockstore.IVF(n_lists, ockstore.OCKM(8, 2, 10, n_codewords=16), n_threads=threads)
    train_ours, _ = timed(lambda: ivf.fit(learn))
    path = Path(workdir) / "fastscan_ivf.ock"
    build_ours, _ = timed(lambda: ockstore.build_index(path, ivf, base_u8, store_vectors="uint8", n_threads=threads))
    ours = ockstore.open_index(path)
    faiss.omp_set_num_threads(threads)
    ref = faiss.IndexRefine(faiss.index_factory(base_u8.shape[1], f"IVF{n_lists},PQ16x4fs"),
                            faiss.index_factory(base_u8.shape[1], "SQ8"))
    train_faiss, _ = timed(lambda: ref.train(learn))
    build_faiss, _ = timed(lambda: ref.add(np.asarray(base_u8, dtype=np.float32)))
    faiss.omp_set_num_threads(1)
    print(f"IVF: ours trained in {train_ours:.1f} s, built in {build_ours:.1f} s; faiss trained in {train_faiss:.1f} "
          f"s, added in {build_faiss:.1f} s", flush=True)
    rows = []
    for n_probe, rerank in PAIRS:
        params = faiss.IndexRefineSearchParameters(k_factor=rerank / K_IVF,
                                                   base_index_params=faiss.SearchParametersIVF(nprobe=n_probe))
        searches = {"ours": lambda: ours.search(query, K_IVF, n_probe=n_probe, rerank=rerank, n_threads=1)[1],
                    "faiss": lambda: ref.search(query, K_IVF, params=params)[1]}
        for fn in searches.values():
            fn()
        for name, (best, median, ids) in interleaved(searches, repeats).items():
            row = {"index": name, "n_probe": n_probe, "rerank": rerank, "10@10": ten_at_ten(ids, gt),
                   "ms_per_query": 1000 * best / len(query), "ms_per_query_median": 1000 * median / len(query)}
            row["qps"] = 1000 / row["ms_per_query"]
            rows.append(row)
            print(f"  n_probe {n_probe:3d} rerank {rerank:3d}  {name:<6} 10@10 {row['10@10']:.4f}  "
                  f"{row['ms_per_query']:.4f} ms/q (median {row['ms_per_query_median']:.4f})", flush=True)
    ours.close()
    return rows, {"ours_train_s": train_ours, "ours_build_s": build_ours, "faiss_train_s": train_faiss,
                  "faiss_add_s": build_faiss, "file_bytes": os.path.getsize(path)}


def distortion(learn, base, rows, threads, n_iter=None):
    """Distortion, training and encoding time of the 64-bit options; ``n_iter`` None: each model's default."""
    sample = np.ascontiguousarray(base[:rows], dtype=np.float32)
    it = {} if n_iter is None else {"n_iter": n_iter}
    out = []
    for name, make in (("OCKM(8, 2, 10, K=16)", lambda: ockstore.OCKM(8, 2, 10, n_codewords=16, **it)),
                       ("OCKM(4, 4, 10, K=16)", lambda: ockstore.OCKM(4, 4, 10, n_codewords=16, **it)),
                       ("PQ(16, K=16)", lambda: ockstore.PQ(16, n_codewords=16, **it)),
                       ("OCKM(4, 2, 10)", lambda: ockstore.OCKM(4, 2, 10, **it)),
                       ("PQ(8)", lambda: ockstore.PQ(8, **it))):
        q = make()
        q.set_params(n_threads=threads)
        seconds, _ = timed(lambda: q.fit(learn))
        enc, _ = timed(lambda: q.encode(sample, n_threads=1))
        row = {"quantizer": name, "bits": q.bits, "distortion": float(q.distortion(sample)), "train_s": seconds,
               "encode_us_per_vector_1thread": 1e6 * enc / len(sample)}
        out.append(row)
        print(f"  {name:<22} {row['bits']} bits  distortion {row['distortion']:.0f}  trained in {seconds:.1f} s  "
              f"encode {row['encode_us_per_vector_1thread']:.2f} us/vector (1 thread)", flush=True)
    return out


def criteria(flat, ivf):
    out = []
    for k in K_FLATS:
        by = {r["index"]: r for r in flat if r.get("k", K_FLAT) == k}
        ours, old, fs = by["ours"], by["ockm-8bit"], by["faiss PQ16x4fs"]
        out += [{"what": f"exhaustive k={k}: {old['ms_per_query'] / ours['ms_per_query']:.2f}x faster than "
                         f"OCKM(4, 2, 10) ({ours['ms_per_query']:.3f} against {old['ms_per_query']:.3f} ms/q; >= 4x)",
                 "pass": old["ms_per_query"] >= 4 * ours["ms_per_query"]},
                {"what": f"exhaustive k={k}: {ours['ms_per_query'] / fs['ms_per_query']:.2f}x faiss PQ16x4fs's time "
                         f"({ours['ms_per_query']:.3f} against {fs['ms_per_query']:.3f} ms/q; <= 1x; CPU time "
                         f"{ours['cpu_ms_per_query'] / fs['cpu_ms_per_query']:.2f}x)",
                 "pass": ours["ms_per_query"] <= fs["ms_per_query"]}]
    by = {r["index"]: r for r in flat if r.get("k", K_FLAT) == K_FLAT}
    ours, fs = by["ours"], by["faiss PQ16x4fs"]
    for r in (1, 10, 100):
        out.append({"what": f"exhaustive: recall@{r} {ours[f'recall@{r}']:.3f} > PQ16x4fs {fs[f'recall@{r}']:.3f}",
                    "pass": ours[f"recall@{r}"] > fs[f"recall@{r}"]})
    by = {(r["index"], r["n_probe"], r["rerank"]): r for r in ivf}
    for n_probe, rerank in CRITERIA_PAIRS:
        o, f = by.get(("ours", n_probe, rerank)), by.get(("faiss", n_probe, rerank))
        if o is None or f is None:
            continue
        out.append({"what": f"IVF n_probe {n_probe}, rerank {rerank}: 10@10 {o['10@10']:.4f} >= faiss "
                            f"{f['10@10']:.4f}; {o['ms_per_query']:.4f} ms/q <= faiss {f['ms_per_query']:.4f} "
                            f"({o['ms_per_query'] / f['ms_per_query']:.2f}x)",
                    "pass": o["10@10"] >= f["10@10"] and o["ms_per_query"] <= f["ms_per_query"]})
    return out


def markdown(report):
    m, s = report["machine"], report["setup"]
    la, lb = report["load_average_start"], report["load_average_end"]
    lines = [f"Machine: {m['cpu']}, {m['cores']} cores ({m['platform']}); Python {m['python']}, numpy {m['numpy']}, "
             f"faiss-cpu {m['faiss']}, ockstore {m['ockstore']}. Load average {la[0]:.2f} at the start, {lb[0]:.2f} "
             "at the end.", "",
             f"Setup: {s['learn']:,} learn, {s['base']:,} base, {s['queries']:,} queries; searches on 1 thread, the "
             f"batch of queries at once, minimum of {s['repeats']} interleaved runs.", "",
             f"Exhaustive scan, k = {' and '.join(map(str, K_FLATS))} (recalls of the k = {K_FLAT} results; CPU: the "
             "process's CPU time, steadier on a loaded machine):", "",
             "| index | k | bytes/vector | R@1 | R@10 | R@100 | ms/query | CPU ms/query | training s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in report["exhaustive"]:
        lines.append(f"| {r['index']} | {r.get('k', K_FLAT)} | {r['bytes_per_vector']} | {r['recall@1']:.3f} | "
                     f"{r['recall@10']:.3f} | {r['recall@100']:.3f} | {r['ms_per_query']:.4f} | "
                     f"{r.get('cpu_ms_per_query', float('nan')):.4f} | {r['train_s']:.1f} |")
    lines += ["", f"Inverted file ({s['n_lists']} lists), k = {K_IVF}: ours IVF + OCKM(8, 2, 10, K=16) with "
                  "store_vectors='uint8' and rerank=R; faiss IVF,PQ16x4fs refined by SQ8 (k_factor = R / 10).", "",
              "| n_probe | R | index | 10@10 | ms/query | queries/s |", "|---:|---:|---|---:|---:|---:|"]
    for r in report["ivf"]:
        lines.append(f"| {r['n_probe']} | {r['rerank']} | {r['index']} | {r['10@10']:.4f} | {r['ms_per_query']:.4f} "
                     f"| {r['qps']:,.0f} |")
    if report.get("distortion"):
        it = s.get("distortion_iter")
        lines += ["", f"Distortion of 64-bit codes (mean squared error over {s['distortion_rows']:,} base vectors; "
                  f"trained on {s['distortion_learn']:,} learn vectors, "
                  f"{'each model’s default iterations' if it is None else f'{it} iterations'}, on all cores):", "",
                  "| quantizer | bits | distortion | training s | encoding us/vector (1 thread) |",
                  "|---|---:|---:|---:|---:|"]
        for r in report["distortion"]:
            lines.append(f"| {r['quantizer']} | {r['bits']} | {r['distortion']:.0f} | {r['train_s']:.1f} | "
                         f"{r['encode_us_per_vector_1thread']:.2f} |")
    lines += ["", "Criteria:", ""] + [f"- {'pass' if c['pass'] else 'FAIL'}: {c['what']}" for c in report["criteria"]]
    return "\n".join(lines) + "\n"


def plot(report, path):
    n_lists = report["setup"]["n_lists"]
    styles = {"ours": (f"ockstore IVF{n_lists} + OCKM(8, 2, 10, K=16) fast scan, rerank uint8", "C0", "o"),
              "faiss": (f"faiss IVF{n_lists},PQ16x4fs + IndexRefine(SQ8)", "C1", "s")}
    curves = [(label, color, marker, [(r["qps"], r["10@10"], f"{r['n_probe']}/{r['rerank']}")
                                      for r in report["ivf"] if r["index"] == name])
              for name, (label, color, marker) in styles.items()]
    plot_recall_speed(curves, path, ylabel="10-recall@10",
                      xlabel=f"queries per second (1 thread, batch of {report['setup']['queries']:,}, k = {K_IVF})",
                      title=f"sift-real {report['setup']['base']:,} vectors, 64-bit codes "
                            "(labels: n_probe / re-ranked)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=default_data(),
                        help="texmex-style dataset folder (default: $OCKSTORE_DATA/sift-real, else shared/data/sift-real "
                             "in the nearest folder above the repository)")
    parser.add_argument("--queries", type=int, default=1000, help="first N queries (default 1000)")
    parser.add_argument("--lists", type=int, default=1024, help="n_lists of the inverted files (default 1024)")
    parser.add_argument("--repeats", type=int, default=3, help="timed searches per index, interleaved (default 3)")
    parser.add_argument("--threads", type=int, default=None, help="threads for training and adding (default: all)")
    parser.add_argument("--distortion-rows", type=int, default=100_000, help="base rows the distortion is measured on")
    parser.add_argument("--distortion-learn", type=int, default=None, help="learn rows the distortion's models "
                        "train on (default: all)")
    parser.add_argument("--distortion-iter", type=int, default=None, help="training iterations of the distortion's "
                        "models (default: each model's)")
    parser.add_argument("--skip-distortion", action="store_true", help="leave out the distortion report")
    parser.add_argument("--skip-ivf", action="store_true", help="leave out the inverted files")
    parser.add_argument("--quick", action="store_true", help="smoke test: 200K base, 25K learn, 256 lists, 2 "
                        "repeats; distortion on 10K rows of models trained 3 iterations on 10K rows")
    parser.add_argument("--out", default=None, help="write the markdown report here")
    parser.add_argument("--json", default=None, help="write every figure as JSON here")
    parser.add_argument("--plot", default=None, help="write the 10@10 / queries-per-second plot here (.png)")
    parser.add_argument("--workdir", default=None, help="folder for the index files (default: a temporary folder)")
    args = parser.parse_args(argv)
    if args.quick:
        args.lists = 256 if args.lists == 1024 else args.lists
        args.repeats = min(args.repeats, 2)
        args.distortion_rows = min(args.distortion_rows, 10_000)
        args.distortion_learn = args.distortion_learn or 10_000
        args.distortion_iter = args.distortion_iter or 3

    from threadpoolctl import threadpool_limits

    machine, threads, load_start, learn, base_u8, query, gt, workdir = bench_start(args, K_FLAT, "bench_fastscan_")
    base = np.asarray(base_u8, dtype=np.float32)

    with threadpool_limits(limits=1):
        flat = exhaustive(learn, base, query, gt, args.repeats, threads)
        ivf, ivf_build = ([], {}) if args.skip_ivf else inverted(learn, base_u8, query, gt, args.lists, args.repeats,
                                                                 threads, workdir)
    dist = [] if args.skip_distortion else distortion(learn[:args.distortion_learn], base, args.distortion_rows,
                                                      threads, args.distortion_iter)
    report = {"machine": machine, "load_average_start": load_start, "load_average_end": load_average(),
              "setup": {"learn": len(learn), "base": len(base), "queries": len(query), "repeats": args.repeats,
                        "n_lists": args.lists, "threads_train": threads, "quick": args.quick,
                        "distortion_learn": len(learn[:args.distortion_learn]), "distortion_rows": args.distortion_rows,
                        "distortion_iter": args.distortion_iter},
              "exhaustive": flat, "ivf": ivf, "ivf_build": ivf_build, "distortion": dist,
              "criteria": criteria(flat, ivf)}
    bench_finish(report, args, markdown)
    print(f"load average at the end: {report['load_average_end'][0]:.2f}", flush=True)
    if args.plot and ivf:
        plot(report, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
