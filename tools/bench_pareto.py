"""Pareto benchmark: recall against queries per second of ockstore's configurations and the graph and quantization
indexes it competes with, each process serving its saved index, on one thread, in one run.

Systems (``--systems``: ockstore hnswlib usearch faiss scann; the peers are benchmark-only dependencies, installed in
the benchmark environment: ``pip install faiss-cpu hnswlib usearch scann matplotlib`` and ``pip install -e .``):

    ockstore  flat and IVF configurations (tools/_pareto_ockstore.py: OCKM(4, 2, 10) codes; 4-bit fast-scan codes,
              store_vectors="sq8" and ockstore.tune join by themselves once the library has them); n_probe and
              rerank (0 = none .. 1,000) swept; stored vectors uint8 (sift) / float16 (minilm).
    hnswlib   M=16, ef_construction=100, float32; ef swept.
    usearch   float16, connectivity 16, expansion_add 128 (its defaults); expansion_search swept; the same file
              searched loaded into memory and viewed (mmap, view=True).
    faiss     HNSW32 (efConstruction 100, float32; efSearch swept) and IVF{L},PQ{d/8}x4fs + IndexRefine SQ8
              (n_probe and k_factor swept).
    scann     tree of 1,000 leaves (sift 1M), AH 2 dimensions per block, exact re-ordering from float32 vectors;
              leaves_to_search and the re-ordered count swept.

Every index is built once in a child process (2 threads by default, ``--build-threads``) and saved under
``--cache`` (default bench-results/pareto) with a key naming data and configuration (ockstore's: a hash of its
sources, so changed code rebuilds); a rerun reuses them. The searching process opens each saved index and runs on
one thread: OMP_NUM_THREADS and the other thread variables are 1 before any library loads, every library's own
thread count is set to 1, and each timed call's CPU time / wall time is reported (> 1.1 would mean a second core
worked). Each point: the batch of the first 1,000 queries of the query file, k = 10, one warm-up call, then the
median of ``--repeats`` (3) calls; 10-recall@10 (|top 10 ∩ true top 10| / 10, mean) and recall@1 (the first result
is the true nearest neighbour). After the sweeps, the points around 10@10 = 0.95 of every system are timed again in
interleaved rounds (``--rounds``), which gives each system's ratio to hnswlib round by round, under the same load.
Memory: a fresh process per system imports its library, reads the queries, reads /proc/self/status, opens the saved
index, searches the batch once at the cheapest point reaching 10@10 = 0.95 and reads it again (tools/_pareto_child.py).

    python tools/bench_pareto.py --data sift minilm --json pareto.json --out pareto.md --plot-dir docs/figures
    python tools/bench_pareto.py --quick --systems ockstore hnswlib      # 100K sift subset: a smoke run

The other "Done when" figures of issue 19 (re-ranking cost per extra candidate, one query per call against a batch,
sq8 against float16, tune on held-out queries) come from tools/bench_recall_speed.py, on the same data and cache.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS))
from _pareto_child import THREAD_VARIABLES, thread_env  # noqa: E402  (no numpy imported yet)

for _name in THREAD_VARIABLES:  # one thread for every library this process loads, before any of them is imported
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(TOOLS.parent))
from _machine import core_count, cpu_model  # noqa: E402
from _pareto_data import (  # noqa: E402
    DEFAULT_CACHE, DEFAULT_DATA_ROOT, dir_or_file_bytes, load_average, prepare, recall_10_at_10, recall_at_1,
    thread_ticks, threads_that_ran,
)
from _pareto_ockstore import detect_features, ockstore_systems  # noqa: E402
from _pareto_report import frontier, interpolate_qps, markdown, plot, summary_rows  # noqa: E402
from _peers import peer_systems  # noqa: E402

CHILD = TOOLS / "_pareto_child.py"
LIBRARIES = ("ockstore", "hnswlib", "usearch", "faiss", "scann")
TARGETS = (0.90, 0.95, 0.97)
MEMORY_TARGET = 0.95
CPU_RATIO_LIMIT = 1.1


def log(message):
    print(message, flush=True)


# ---------------------------------------------------------------------------------------------------------- builds
def ensure_built(system, data, args, features):
    """The saved index of ``system`` (built by a child process unless cached) and its build record."""
    folder = Path(args.cache) / "indexes"
    folder.mkdir(parents=True, exist_ok=True)
    key = system.build_key()
    path = folder / f"{key}{system.suffix}"
    meta_path = folder / f"{key}.json"
    if path.exists() and meta_path.exists() and system.library not in args.rebuild:
        record = json.loads(meta_path.read_text())
        record["cached"] = True
        return path, record
    if system.is_ours:  # files of older ockstore sources for the same configuration are stale: remove them
        stem = key.rsplit("-src", 1)[0]
        for old in folder.glob(f"{stem}-src*"):
            if not old.name.startswith(key):
                old.unlink()
    log(f"  building {system.name} ({key}) on {args.build_threads} threads ...")
    cmd = [sys.executable, str(CHILD), "build", system.id, str(Path(data.cache) / "meta.json"), str(path),
           str(args.build_threads), json.dumps(features)]
    child = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=thread_env(args.build_threads))
    if child.returncode != 0:
        raise RuntimeError(f"building {system.id} failed (exit {child.returncode})")
    record = json.loads(child.stdout.strip().splitlines()[-1])
    record["file_bytes"] = dir_or_file_bytes(path)
    record["key"] = key
    meta_path.write_text(json.dumps(record, indent=1))
    log(f"  built in {record['build_s']:.1f} s (train {record['train_s']:.1f} s, add {record['add_s']:.1f} s), "
        f"file {record['file_bytes'] / 1e6:.1f} MB, peak RSS {record['peak_rss_kb'] / 1024:.0f} MB")
    record["cached"] = False
    return path, record


# ---------------------------------------------------------------------------------------------------------- timing
def timed_call(system, Q, params, threads=None):
    """(ids, wall seconds, CPU seconds) of one search of the batch; ``threads`` (a list) gets the number of threads
    of this process that ran during the call."""
    ticks = thread_ticks() if threads is not None else None
    c0, t0 = time.process_time(), time.perf_counter()
    ids = system.search(Q, params)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    if threads is not None:
        threads.append(threads_that_ran(ticks, thread_ticks()))
    return ids, wall, cpu


def measure(system, Q, gt, params, repeats):
    """One sweep point: a warm-up call, then ``repeats`` timed calls of the whole batch."""
    threads = []
    ids, _, _ = timed_call(system, Q, params, threads)
    walls, cpus = [], []
    for _ in range(repeats):
        ids, wall, cpu = timed_call(system, Q, params, threads)
        walls.append(wall)
        cpus.append(cpu)
    return {"params": params, "label": system.label(params), "recall10": recall_10_at_10(ids, gt),
            "recall1": recall_at_1(ids, gt), "seconds": walls, "cpu_seconds": cpus,
            "qps": len(Q) / statistics.median(walls), "qps_cpu": len(Q) / statistics.median(cpus),
            "cpu_per_wall": sum(cpus) / sum(walls), "threads_ran": max(threads)}


def sweep(system, Q, gt, repeats, thin=1):
    points = []
    t0 = time.perf_counter()
    for params in system.sweep()[::thin]:
        points.append(measure(system, Q, gt, params, repeats))
        p = points[-1]
        log(f"    {p['label']:<28} 10@10 {p['recall10']:.4f}  R@1 {p['recall1']:.3f}  {p['qps']:>9,.0f} q/s  "
            f"({p['qps_cpu']:>9,.0f} by CPU time)  cpu/wall {p['cpu_per_wall']:.2f}, threads {p['threads_ran']}")
    log(f"  swept {len(points)} points in {time.perf_counter() - t0:.0f} s")
    return points


def bracketing(points, target):
    """The frontier points just below and just above ``target`` 10@10 (one if the target is not bracketed)."""
    front = frontier(points, "recall10")
    below = [p for p in front if p["recall10"] < target]
    above = [p for p in front if p["recall10"] >= target]
    chosen = ([max(below, key=lambda p: p["recall10"])] if below else []) + (
        [min(above, key=lambda p: p["recall10"])] if above else [])
    return chosen


def interleaved(runs, Q, rounds):
    """Time the points around 10@10 = 0.95 of every system in interleaved rounds; per round, each system's
    interpolated q/s at 0.95 by wall time and by CPU time (None when its frontier does not reach it)."""
    plan = {sid: bracketing(run["points"], MEMORY_TARGET) for sid, run in runs.items()}
    per_round = {sid: {"wall": [], "cpu": []} for sid in runs}
    for _ in range(rounds):
        for sid, run in runs.items():
            system = run["system"]
            walls, cpus = [], []
            for p in plan[sid]:
                _, wall, cpu = timed_call(system, Q, p["params"])
                walls.append({**p, "qps": len(Q) / wall})
                cpus.append({**p, "qps": len(Q) / cpu})
            for kind, timed in (("wall", walls), ("cpu", cpus)):
                reached = len(timed) == 2 or (len(timed) == 1 and timed[0]["recall10"] == MEMORY_TARGET)
                per_round[sid][kind].append(interpolate_qps(timed, MEMORY_TARGET) if reached else None)
    return per_round


# ---------------------------------------------------------------------------------------------------------- memory
def memory_point(points):
    """The cheapest frontier point reaching 10@10 = 0.95, else the most accurate point."""
    reaching = [p for p in points if p["recall10"] >= MEMORY_TARGET]
    if reaching:
        return max(reaching, key=lambda p: p["qps"]), True
    return max(points, key=lambda p: p["recall10"]), False


def measure_memory(system, data, path, params, features):
    cmd = [sys.executable, str(CHILD), "memory", system.id, str(Path(data.cache) / "meta.json"), str(path),
           json.dumps(params), json.dumps(features)]
    child = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=thread_env(1))
    if child.returncode != 0:
        return {"error": f"exit {child.returncode}"}
    result = json.loads(child.stdout.strip().splitlines()[-1])
    b, a = result["before"], result["after"]
    result["gain_kb"] = {name: a.get(name, 0) - b.get(name, 0) for name in ("VmRSS", "RssAnon", "RssFile", "RssShmem")}
    return result


# ---------------------------------------------------------------------------------------------------------- main
def machine_info(features):
    import importlib.metadata as md

    versions = {}
    for package in ("numpy", "ockstore", "faiss-cpu", "hnswlib", "usearch", "scann", "matplotlib"):
        try:
            versions[package] = md.version(package)
        except md.PackageNotFoundError:
            versions[package] = "absent"
    return {"cpu": cpu_model(), "cores": core_count(), "platform": platform.platform(),
            "python": platform.python_version(), "versions": versions, "ockstore_features": features}


def select_systems(data, args, features):
    chosen = [s for s in peer_systems(data) + ockstore_systems(data, features)
              if s.library in args.systems or s.id in args.systems]
    return sorted(chosen, key=lambda s: (s.library != "hnswlib", s.is_ours))  # hnswlib first: the longest build


def run_dataset(source, args, features):
    folder = Path(args.data_root) / f"{source}-real"
    data = prepare(source, folder, args.cache, quick=args.quick and source == "sift")
    Q = np.array(data.load("queries"), dtype=np.float32)
    gt = np.array(data.load("gt"))
    log(f"\n== {data.key}: {data.n_base:,} base vectors, {data.dim}-d, metric {data.metric}; timed batch: the first "
        f"{len(Q):,} queries of the query file; {data.n_lists} IVF lists, {data.scann_leaves} ScaNN leaves")
    systems = select_systems(data, args, features)
    built = {}
    for system in systems:  # every build first (the longest, hnswlib, first of all)
        built[system.id] = ensure_built(system, data, args, features)
    if args.build_only:
        return None
    runs = {}
    for system in systems:
        path, record = built[system.id]
        log(f"\n  {system.name}: {path.name}")
        system.open(path)
        system.one_thread()
        run = {"system": system, "build": record, "points": sweep(system, Q, gt, args.repeats, args.thin)}
        if system.is_ours and features["tune"]:
            run["tuned"] = tuned_point(system, data, Q, gt, args.repeats)
        runs[system.id] = run
    log(f"\n  interleaved rounds at 10@10 = {MEMORY_TARGET} ({args.rounds} rounds) ...")
    rounds = interleaved(runs, Q, args.rounds)
    for run in runs.values():
        run["system"].close()
    memory = {}
    if not args.no_memory:
        for sid, run in runs.items():
            point, reached = memory_point(run["points"])
            memory[sid] = measure_memory(run["system"], data, built[sid][0], point["params"], features)
            memory[sid].update(point=point["label"], recall10=point["recall10"], reached=reached)
            g = memory[sid].get("gain_kb")
            if g:
                log(f"  memory {run['system'].name} at {point['label']}: +{g['VmRSS'] / 1024:.0f} MB "
                    f"(anon {g['RssAnon'] / 1024:.0f}, file {g['RssFile'] / 1024:.0f})")
    result = {"data": data.__dict__, "n_queries": len(Q),
              "systems": {sid: {"name": run["system"].name, "library": run["system"].library,
                                "ours": run["system"].is_ours, "build": run["build"], "points": run["points"],
                                "tuned": run.get("tuned"), "interleaved_qps_095": rounds[sid],
                                "memory": memory.get(sid)}
                          for sid, run in runs.items()}}
    return result


def tuned_point(system, data, Q, gt, repeats):
    """ockstore.tune on the held-out queries (target 0.95), then the benchmark's batch at what it picked."""
    Qt = np.array(data.load("tune_queries"), dtype=np.float32)
    try:
        keywords, seconds = system.tune(Qt, np.array(data.load("tune_gt")))
    except (TypeError, ValueError) as exc:
        log(f"    tune failed: {type(exc).__name__}: {exc}")
        return {"error": f"{type(exc).__name__}: {exc}"}
    point = measure(system, Q, gt, {"tuned": keywords}, repeats)
    point["tune_s"] = seconds
    log(f"    {point['label']}: 10@10 on the benchmark queries {point['recall10']:.4f}, {point['qps']:,.0f} q/s "
        f"(tune took {seconds:.1f} s)")
    return point


def replot(files, plot_dir):
    """The figures of several runs' JSON files, their systems merged per dataset (the curves of systems measured in
    different runs were measured under different loads: the tables of each run keep their same-run ratios)."""
    merged = {}
    for name in files:
        report = json.loads(Path(name).read_text())
        for key, result in report["datasets"].items():
            if key not in merged:
                merged[key] = (result, report)
            else:
                for sid, system in result["systems"].items():
                    merged[key][0]["systems"].setdefault(sid, system)
    for result, report in merged.values():
        out = Path(plot_dir) / f"pareto_{result['data']['source']}.png"
        plot(result, out, report["machine"], report["load_average_start"], report["load_average_end"])
        log(f"wrote {out} ({len(result['systems'])} systems)")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", nargs="+", default=["sift", "minilm"], choices=["sift", "minilm"])
    parser.add_argument("--systems", nargs="+", default=list(LIBRARIES),
                        help=f"libraries ({' '.join(LIBRARIES)}) or system ids (default: all)")
    parser.add_argument("--quick", action="store_true", help="sift: the first 100K base vectors (a smoke run)")
    parser.add_argument("--cache", default=str(DEFAULT_CACHE), help=f"built indexes and data (default {DEFAULT_CACHE})")
    parser.add_argument("--data-root", default=str(DEFAULT_DATA_ROOT), help="folder of sift-real/ and minilm-real/")
    parser.add_argument("--rebuild", nargs="*", default=[], help="libraries whose cached indexes are rebuilt")
    parser.add_argument("--build-threads", type=int, default=2)
    parser.add_argument("--build-only", action="store_true", help="build (or find) every index, then stop")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per point after a warm-up (median)")
    parser.add_argument("--thin", type=int, default=1, help="keep every THIN-th sweep point (smoke runs)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds at 10@10 = 0.95")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory child processes")
    parser.add_argument("--json", help="write every figure here")
    parser.add_argument("--out", help="write the markdown report here")
    parser.add_argument("--plot-dir", help="write pareto_<data>.png here")
    parser.add_argument("--replot", nargs="+", metavar="JSON",
                        help="only draw pareto_<data>.png into --plot-dir from these --json files of earlier runs "
                             "(a system found in several is taken from the first)")
    args = parser.parse_args(argv)
    if args.replot:
        return replot(args.replot, args.plot_dir or ".")

    features = detect_features()
    machine = machine_info(features)
    load_start = load_average()
    log(f"machine: {machine['cpu']}, {machine['cores']} cores, {machine['platform']}; load average "
        f"{load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    log("versions: " + ", ".join(f"{k} {v}" for k, v in machine["versions"].items()))
    log(f"ockstore features: {features}")
    report = {"machine": machine, "load_average_start": load_start, "args": vars(args), "datasets": {}}
    t0 = time.perf_counter()
    for source in args.data:
        result = run_dataset(source, args, features)
        if result is not None:
            report["datasets"][result["data"]["key"]] = result
    report["load_average_end"] = load_average()
    report["seconds"] = time.perf_counter() - t0
    le = report["load_average_end"]
    log(f"\nload average at the end {le[0]:.2f} {le[1]:.2f} {le[2]:.2f}; run took {report['seconds'] / 60:.1f} min")
    if args.build_only:
        return 0
    for key, result in report["datasets"].items():
        log(f"\n{key}")
        for line in summary_rows(result, TARGETS):
            log(line)
    text = markdown(report, TARGETS)
    if args.out:
        Path(args.out).write_text(text)
        log(f"wrote {args.out}")
    else:
        log("\n" + text)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
        log(f"wrote {args.json}")
    if args.plot_dir:
        for key, result in report["datasets"].items():
            out = Path(args.plot_dir) / f"pareto_{result['data']['source']}.png"
            plot(result, out, machine, load_start, le)
            log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
