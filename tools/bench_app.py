"""An app's index (issue 27): a collection of minilm-real sentence embeddings created with no quantizer, grown by
writer launches of 1,000 rows, searched one query per call by a reader, against hnswlib and usearch grown the same
way; the criteria of issue 27's "Done when", each printed with its goal and PASS / FAIL.

The scenario (minilm-real: 40K base, 1K queries, 384-d unit vectors; metric "cosine", float16 stored vectors):

* **Launches.** ``create_collection(path, quantizer, metric="cosine", store_vectors="float16")``, closed at once;
  then ``--launches`` (40) writer launches, each ``open_collection(path, "a")`` -> ``add`` of the next ``--rows``
  (1,000) base rows -> ``close`` (in this process, or with ``--subprocess`` in a child process of its own). The
  launch's wall time is kept (close waits for a training the launch started).
* **After each launch** a reader (one ``open_collection(path)``, ``refresh()``-ed after each launch) searches the first
  ``--queries`` (200) queries one query per call through ``searcher(10)`` with its default options, and the same
  queries as one batch through ``searcher(10, n_threads=1)``: 10-recall@10 against brute force over the rows present
  (the exact top 10 by inner product, NumPy), queries/s one query per call and per query of the batch (wall time, the
  best of ``--repeats`` (3) interleaved runs; CPU time kept too), the folder's bytes and segments.
* **Peers**, grown by the same adds of 1,000 rows in memory (each library's default threads for adds) and searched one
  query per call on one thread: hnswlib (M=16, ef_construction=100, space "ip") and usearch (f32, metric "cos",
  connectivity 16, expansion_add 100). At every ``--every``-th launch and at the last, their ef sweep (10, 16, 24, ...,
  512) runs until it passes ockstore's recall of that launch; the two ef around it are timed and their queries/s is
  interpolated at that recall (linear in recall, geometric in queries/s; tools/_pareto_report.interpolate_qps).
* **At the end**, on copies of the grown folder: one after ``vacuum(keep_generations=1)``, one after ``compact()`` and
  ``vacuum(keep_generations=1)`` (the compacted copy), their bytes; then ``--final-rounds`` (5) interleaved rounds of
  every final figure (grown and compacted, one query per call and batch; hnswlib and usearch at their two ef), the
  best of each.

Criteria (issue 27, "Done when"): 10-recall@10 >= 0.95; queries/s >= 2x hnswlib's at the same recall; the grown
collection >= 0.9x the queries/s of its compacted copy; its live generation <= 1.3x the compacted copy's bytes (both
folders after vacuum(keep_generations=1)); one-query calls <= 1.15x the per-query time of a batch. Judged by wall
time, each ratio by CPU time beside it (steadier while other work shares the machine); the load average is printed at
the start and the end.

Until the library picks the model itself, ``--quantizer`` gives one: an expression evaluated in ockstore's namespace
whose models default to ``metric="cosine"`` (e.g. ``"OCKM(24, 2, 10, n_codewords=16)"``, ``"IVF(64, OCKM(8, 2, 10))"``).
Benchmark-only: hnswlib, usearch and matplotlib (``--plot``) are imported here, never by the package. From the
repository root, in the benchmark environment:

    python tools/bench_app.py --json app.json --markdown app.md --plot docs/figures/app.png
    python tools/bench_app.py --quick --quantizer "OCKM(24, 2, 10, n_codewords=16)"    # 10 launches, 100 queries
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS))
from _pareto_child import THREAD_VARIABLES  # noqa: E402  (no numpy imported yet)

for _name in THREAD_VARIABLES:  # one thread for every library this process loads, before any is imported
    os.environ[_name] = "1"

import argparse  # noqa: E402
import functools  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402

import numpy as np  # noqa: E402

REPO = TOOLS.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import ockstore  # noqa: E402
from _machine import bench_finish, core_count, cpu_model, load_average  # noqa: E402
from _pareto_report import interpolate_qps  # noqa: E402
from _peers import GRAPH_EF, Hnswlib, _ids  # noqa: E402

K = 10
METRIC, STORE = "cosine", "float16"
from _pareto_data import DEFAULT_DATA_ROOT  # noqa: E402  (shared/data beside the repository, or above a worktree)

DATA = DEFAULT_DATA_ROOT / "minilm-real"
GOALS = {"recall": 0.95, "over_hnswlib": 2.0, "over_compacted": 0.9, "bytes_over_compacted": 1.3,
         "one_over_batch": 1.15}


# ----------------------------------------------------------------------------------------------- the ockstore side
def quantizer_from(expression):
    """The unfitted model of ``--quantizer``: the expression evaluated with ockstore's public names, its models
    defaulting to the scenario's metric (an explicit ``metric=`` in the expression wins); None for no expression."""
    if expression is None:
        return None
    namespace = {name: getattr(ockstore, name) for name in ockstore.__all__}
    for name in ("PQ", "CKM", "ECKM", "OCKM"):
        namespace[name] = functools.partial(getattr(ockstore, name), metric=METRIC)
    return eval(expression, {"__builtins__": {}}, namespace)  # a benchmark's own command line, not user input


def create(folder, quantizer):
    """The empty collection of the scenario, closed. ``metric`` is passed where create_collection takes it (issue
    27's API); today's takes the metric from the quantizer, which quantizer_from gives it."""
    options = {"store_vectors": STORE}
    if "metric" in inspect.signature(ockstore.create_collection).parameters:
        options["metric"] = METRIC
    elif quantizer is None:
        raise SystemExit("this ockstore's create_collection needs a quantizer (issue 27's quantizer=None is not there "
                         'yet): give one with --quantizer, e.g. --quantizer "OCKM(24, 2, 10, n_codewords=16)"')
    ockstore.create_collection(folder, quantizer, **options).close()


# TODO(remove when Collection.searcher lands): today's stand-in for ``collection.searcher(k, **options)``.
def searcher(collection, k, **options):
    if hasattr(collection, "searcher"):
        return collection.searcher(k, **options)
    return types.SimpleNamespace(search=lambda Q: collection.search(Q, k, **options))


def writer_launch(folder, base_npy, start, stop):
    """One writer launch: open "a", add base rows [start, stop), close (which waits for a training the add started).
    Returns {"seconds" (the launch), "add_seconds" (the add alone), "N", "trained", "generation", "segments"}."""
    rows = np.ascontiguousarray(np.load(base_npy, mmap_mode="r")[start:stop])
    t0 = time.perf_counter()
    col = ockstore.open_collection(folder, "a")
    t1 = time.perf_counter()
    col.add(rows)
    add_seconds = time.perf_counter() - t1
    col.close()
    seconds = time.perf_counter() - t0
    with ockstore.open_collection(folder) as r:
        info = r.info()
    return {"seconds": seconds, "add_seconds": add_seconds, "N": info["N"], "trained": info["trained"],
            "generation": info["generation"], "segments": info["segments"]}


def launch(args, folder, base_npy, start, stop):
    if not args.subprocess:
        return writer_launch(folder, base_npy, start, stop)
    out = subprocess.run([sys.executable, __file__, "--child-launch", str(folder), str(base_npy), str(start),
                          str(stop)], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"writer launch of rows {start}..{stop} failed (exit {out.returncode}):\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def folder_bytes(folder):
    return sum(f.stat().st_size for f in Path(folder).rglob("*") if f.is_file())


# ------------------------------------------------------------------------------------------------------- the peers
class GrowingGraph:
    """A graph index of a peer library grown in memory by the same adds as the collection, searched one query per
    call on one thread at an ef."""

    name = ""

    def add(self, X, start):
        raise NotImplementedError

    def set_ef(self, ef):
        raise NotImplementedError

    def search_one(self, q):
        raise NotImplementedError


class GrowingHnswlib(GrowingGraph):
    name = f"hnswlib M={Hnswlib.M} efC={Hnswlib.EF_CONSTRUCTION}"

    def __init__(self, dim, capacity):
        import hnswlib

        self.index = hnswlib.Index(space="ip", dim=dim)  # inner product of unit vectors = cosine
        self.index.init_index(max_elements=capacity, ef_construction=Hnswlib.EF_CONSTRUCTION, M=Hnswlib.M,
                              random_seed=100)

    def add(self, X, start):
        self.index.add_items(X, np.arange(start, start + len(X)))

    def set_ef(self, ef):
        self.index.set_ef(ef)

    def search_one(self, q):
        return self.index.knn_query(q, k=K, num_threads=1)[0][0]


class GrowingUsearch(GrowingGraph):
    CONNECTIVITY, EXPANSION_ADD = 16, 100
    name = f"usearch f32 M={CONNECTIVITY} efC={EXPANSION_ADD}"

    def __init__(self, dim, capacity):
        from usearch.index import Index

        self.index = Index(ndim=dim, metric="cos", dtype="f32", connectivity=self.CONNECTIVITY,
                           expansion_add=self.EXPANSION_ADD)

    def add(self, X, start):
        self.index.add(np.arange(start, start + len(X), dtype=np.uint64), X)

    def set_ef(self, ef):
        self.index.expansion_search = ef

    def search_one(self, q):
        return _ids(self.index.search(q, K, threads=1).keys)


PEERS = {"hnswlib": GrowingHnswlib, "usearch": GrowingUsearch}


# ------------------------------------------------------------------------------------------------------ measuring
def exact_top(Q, B):
    """The exact top-k ids of each query by inner product (unit vectors: cosine), best first."""
    S = Q @ B.T
    top = np.argpartition(-S, K, axis=1)[:, :K]
    order = np.argsort(-np.take_along_axis(S, top, axis=1), axis=1, kind="stable")
    return np.take_along_axis(top, order, axis=1)


def recall(I, gt):
    """10-recall@10: the share of the true top 10 among the 10 returned, averaged over the queries."""
    return float(np.mean([len(np.intersect1d(i, g)) for i, g in zip(np.asarray(I), gt)]) / K)


def one_by_one(search_one, Q):
    """(wall s, CPU s, ids (nq, 10)) of a loop of one-query calls."""
    c0, t0 = time.process_time(), time.perf_counter()
    out = [search_one(q) for q in Q]
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return wall, cpu, np.asarray(out)


def batch(search, Q):
    c0, t0 = time.process_time(), time.perf_counter()
    _, I = search(Q)
    return time.perf_counter() - t0, time.process_time() - c0, np.asarray(I)


def best(runs, nq):
    """{"qps", "qps_cpu", "us"} of the fastest of (wall, cpu) runs of nq queries."""
    wall, cpu = min(r[0] for r in runs), min(r[1] for r in runs)
    return {"qps": nq / wall, "qps_cpu": nq / cpu, "us": wall / nq * 1e6}


def measure_collection(reader, Q, gt, repeats):
    """One query per call through searcher(10) (default options) and a batch through searcher(10, n_threads=1),
    interleaved ``repeats`` times after a warm-up of each."""
    one = searcher(reader, K)
    many = searcher(reader, K, n_threads=1)
    search_one = lambda q: one.search(q)[1]  # noqa: E731
    _, _, I1 = one_by_one(search_one, Q)
    _, _, Ib = batch(many.search, Q)
    singles, batches = [], []
    for _ in range(repeats):
        singles.append(one_by_one(search_one, Q))
        batches.append(batch(many.search, Q))
    return {"recall": recall(I1, gt), "recall_batch": recall(Ib, gt), "one": best(singles, len(Q)),
            "batch": best(batches, len(Q))}


# The graph peers' ef beyond _peers.GRAPH_EF: the library's defaults reach 10-recall@10 0.999 on minilm, where
# hnswlib needs ef > 512.
HIGH_EF = (768, 1024, 1536, 2048)


def sweep_peer(peer, Q, gt, target, repeats):
    """The ef sweep of ``peer`` up to the first ef whose recall reaches ``target``; the ef below it and that one are
    timed (best of ``repeats``) and the queries/s at ``target`` interpolated between them."""
    swept, points = [], []
    for ef in GRAPH_EF + HIGH_EF:
        peer.set_ef(ef)
        swept.append({"ef": ef, "recall10": recall(one_by_one(peer.search_one, Q)[2], gt)})
        if swept[-1]["recall10"] >= target:
            break
    reached = swept[-1]["recall10"] >= target
    for p in swept[-2:] if reached else swept[-1:]:
        peer.set_ef(p["ef"])
        points.append({**p, **best([one_by_one(peer.search_one, Q) for _ in range(repeats)], len(Q))})
    return {"swept": swept, "points": points, "qps_at_target": interpolate_qps(points, target) if reached else None,
            "floor": reached and len(swept) == 1}


def peer_at(peer, Q, ef):
    peer.set_ef(ef)
    return one_by_one(peer.search_one, Q)


# ---------------------------------------------------------------------------------------------------------- the run
def grow(args, work, base, Q, base_npy):
    """The launches; returns (per-launch rows, peers, the grown folder)."""
    folder = work / "grown"
    create(folder, quantizer_from(args.quantizer))
    peers = {name: PEERS[name](base.shape[1], args.launches * args.rows) for name in args.peers}
    reader = ockstore.open_collection(folder)
    rows = []
    for n in range(1, args.launches + 1):
        start, stop = (n - 1) * args.rows, n * args.rows
        row = {"launch": n, "rows": stop, **launch(args, folder, base_npy, start, stop)}
        for name, peer in peers.items():
            t0 = time.perf_counter()
            peer.add(base[start:stop], start)
            row.setdefault("peer_add_seconds", {})[name] = time.perf_counter() - t0
        reader.refresh()
        gt = exact_top(Q, base[:stop])
        row.update(measure_collection(reader, Q, gt, args.repeats))
        row["folder_bytes"] = folder_bytes(folder)
        if n % args.every == 0 or n == args.launches:
            row["peers"] = {name: sweep_peer(peer, Q, gt, row["recall"], args.repeats) for name, peer in peers.items()}
        rows.append(row)
        print(launch_line(row), flush=True)
    reader.close()
    return rows, peers, folder


def launch_line(row):
    text = (f"launch {row['launch']:3d}: {row['N']:6,} rows, {row['segments']:2d} segments, "
            f"{'trained' if row['trained'] else 'exact  '}, launch {row['seconds']:5.2f} s; 10@10 {row['recall']:.3f}; "
            f"one query {row['one']['qps']:7,.0f} q/s, batch {row['batch']['qps']:7,.0f} q/s; "
            f"{row['folder_bytes'] / 1e6:5.1f} MB")
    for name, p in row.get("peers", {}).items():
        text += f"; {name} {fmt(p['qps_at_target'])}{'+' if p['floor'] else ''}"
    return text


def fmt(x, digits=0):
    return "–" if x is None else f"{x:,.{digits}f}"


def final(args, work, grown, rows, peers, base, Q):
    """The copies (vacuumed; compacted and vacuumed), their bytes, and the interleaved final rounds."""
    vacuumed, compacted = work / "grown-vacuumed", work / "compacted"
    shutil.copytree(grown, vacuumed)
    shutil.copytree(grown, compacted)
    with ockstore.open_collection(vacuumed, "a") as c:
        c.vacuum(keep_generations=1)
    t0 = time.perf_counter()
    with ockstore.open_collection(compacted, "a") as c:
        c.compact()
        c.vacuum(keep_generations=1)
    compact_s = time.perf_counter() - t0
    gt = exact_top(Q, base[:rows[-1]["rows"]])
    last = rows[-1]
    out = {"grown_folder_bytes": folder_bytes(grown), "grown_vacuumed_bytes": folder_bytes(vacuumed),
           "compacted_bytes": folder_bytes(compacted), "compact_seconds": compact_s}
    g, c = ockstore.open_collection(grown), ockstore.open_collection(compacted)
    out["segments"] = {"grown": g.info()["segments"], "compacted": c.info()["segments"]}
    runs = {}
    searches = {}
    for tag, col in (("grown", g), ("compacted", c)):
        one, many = searcher(col, K), searcher(col, K, n_threads=1)
        searches[f"{tag}_one"] = functools.partial(one_by_one, lambda q, s=one: s.search(q)[1], Q)
        searches[f"{tag}_batch"] = functools.partial(batch, many.search, Q)
    for name, p in last["peers"].items():
        for point in p["points"]:
            searches[f"{name}_ef{point['ef']}"] = functools.partial(peer_at, peers[name], Q, point["ef"])
    for key, run in searches.items():  # warm-up, and each one's recall
        runs[key] = {"recall": recall(run()[2], gt), "runs": []}
    for _ in range(args.final_rounds):
        for key, run in searches.items():
            runs[key]["runs"].append(run()[:2])
    g.close()
    c.close()
    out["rounds"] = {key: {"recall": v["recall"], **best(v["runs"], len(Q))} for key, v in runs.items()}
    out["peers"] = {}
    target = out["rounds"]["grown_one"]["recall"]
    for name, p in last["peers"].items():
        points = [{"ef": q["ef"], "recall10": out["rounds"][f"{name}_ef{q['ef']}"]["recall"],
                   "qps": out["rounds"][f"{name}_ef{q['ef']}"]["qps"],
                   "qps_cpu": out["rounds"][f"{name}_ef{q['ef']}"]["qps_cpu"]} for q in p["points"]]
        reached = bool(points) and max(q["recall10"] for q in points) >= target
        cpu_points = [{**q, "qps": q["qps_cpu"]} for q in points]
        out["peers"][name] = {"points": points, "floor": p["floor"],
                              "qps_at_target": interpolate_qps(points, target) if reached else None,
                              "qps_cpu_at_target": interpolate_qps(cpu_points, target) if reached else None}
    return out


def criteria(fin):
    """Issue 27's criteria on the final rounds, by wall time; the same ratios by CPU time (steadier while other work
    shares the machine: a search preempted by it loses wall time, not CPU time) are given beside them."""
    r = fin["rounds"]
    one, batch_, comp = r["grown_one"], r["grown_batch"], r["compacted_one"]
    hnsw = fin["peers"].get("hnswlib", {})
    ratio = lambda a, b: None if a is None or b is None else a / b  # noqa: E731
    over_hnsw = ratio(one["qps"], hnsw.get("qps_at_target"))
    over_comp = ratio(one["qps"], comp["qps"])
    size = ratio(fin["grown_vacuumed_bytes"], fin["compacted_bytes"])
    one_batch = ratio(one["us"], batch_["us"])
    cpu = {"over_hnswlib": ratio(one["qps_cpu"], hnsw.get("qps_cpu_at_target")),
           "over_compacted": ratio(one["qps_cpu"], comp["qps_cpu"]),
           "one_over_batch": ratio(batch_["qps_cpu"], one["qps_cpu"])}
    return [
        {"what": f"10-recall@10 one query per call {one['recall']:.3f} >= {GOALS['recall']}",
         "value": one["recall"], "pass": one["recall"] >= GOALS["recall"]},
        {"what": f"queries/s one query per call {one['qps']:,.0f} / hnswlib's at that recall "
                 f"{fmt(hnsw.get('qps_at_target'))} = "
                 f"{fmt(over_hnsw, 2)}x >= {GOALS['over_hnswlib']}x (CPU time: {fmt(cpu['over_hnswlib'], 2)}x)",
         "value": over_hnsw, "cpu_value": cpu["over_hnswlib"],
         "pass": over_hnsw is not None and over_hnsw >= GOALS["over_hnswlib"]},
        {"what": f"grown / compacted queries/s {one['qps']:,.0f} / {comp['qps']:,.0f} = {fmt(over_comp, 2)}x >= "
                 f"{GOALS['over_compacted']}x (CPU time: {fmt(cpu['over_compacted'], 2)}x)", "value": over_comp,
         "cpu_value": cpu["over_compacted"], "pass": over_comp >= GOALS["over_compacted"]},
        {"what": f"grown / compacted bytes after vacuum(keep_generations=1) {fin['grown_vacuumed_bytes'] / 1e6:.1f} / "
                 f"{fin['compacted_bytes'] / 1e6:.1f} MB = {size:.2f}x <= {GOALS['bytes_over_compacted']}x",
         "value": size, "pass": size <= GOALS["bytes_over_compacted"]},
        {"what": f"one query per call / batch per query {one['us']:.0f} / {batch_['us']:.0f} us = {one_batch:.2f}x <= "
                 f"{GOALS['one_over_batch']}x (CPU time: {fmt(cpu['one_over_batch'], 2)}x)", "value": one_batch,
         "cpu_value": cpu["one_over_batch"], "pass": one_batch <= GOALS["one_over_batch"]},
    ]


# ----------------------------------------------------------------------------------------------------------- output
def markdown(report):
    s, fin = report["setup"], report["final"]
    la, lb = report["load_average_start"], report["load_average_end"]
    lines = [f"Machine: {report['machine']['cpu']}, {report['machine']['cores']} cores; "
             + ", ".join(f"{k} {v}" for k, v in report["machine"]["versions"].items())
             + f". Load average {la[0]:.2f} at the start, {lb[0]:.2f} at the end.", "",
             f"Setup: minilm-real, {s['launches']} writer launches of {s['rows']:,} rows "
             f"({'child processes' if s['subprocess'] else 'in the benchmark process'}), quantizer "
             f"{s['quantizer'] or 'None (the library picks)'}, metric {METRIC}, {STORE} stored vectors; "
             f"{s['queries']} queries one per call on one thread (best of {s['repeats']}); peers at ockstore's recall "
             f"(interpolated between the two ef around it; + : their smallest ef already reaches it).", "",
             "| launch | rows | segments | 10@10 | one query q/s | batch q/s | "
             + " | ".join(f"{p} q/s" for p in s["peers"]) + " | folder MB |",
             "|---:|---:|---:|---:|---:|---:|" + "---:|" * len(s["peers"]) + "---:|"]
    for r in report["launches"]:
        peers = [fmt(r["peers"][p]["qps_at_target"]) + ("+" if r["peers"][p]["floor"] else "")
                 if "peers" in r else "" for p in s["peers"]]
        lines.append(f"| {r['launch']} | {r['N']:,} | {r['segments']} | {r['recall']:.3f} | {r['one']['qps']:,.0f} | "
                     f"{r['batch']['qps']:,.0f} | " + " | ".join(peers) + f" | {r['folder_bytes'] / 1e6:.1f} |")
    lines += ["", f"Final rounds ({s['final_rounds']} interleaved, best of each):", "",
              "| search | 10@10 | queries/s | us/query | CPU queries/s |", "|---|---:|---:|---:|---:|"]
    for key, v in fin["rounds"].items():
        lines.append(f"| {key} | {v['recall']:.3f} | {v['qps']:,.0f} | {v['us']:.0f} | {v['qps_cpu']:,.0f} |")
    for name, p in fin["peers"].items():
        lines.append(f"| {name} at ockstore's recall | | {fmt(p['qps_at_target'])}{'+' if p['floor'] else ''} | | |")
    lines += ["", f"Folders: grown {fin['grown_folder_bytes'] / 1e6:.1f} MB (segments: {fin['segments']['grown']}), "
                  f"after vacuum(keep_generations=1) {fin['grown_vacuumed_bytes'] / 1e6:.1f} MB; compacted copy "
                  f"{fin['compacted_bytes'] / 1e6:.1f} MB (segments: {fin['segments']['compacted']}; compact + vacuum "
                  f"{fin['compact_seconds']:.1f} s).", "", "Criteria:", ""]
    lines += [f"- {'PASS' if c['pass'] else 'FAIL'}: {c['what']}" for c in report["criteria"]]
    return "\n".join(lines) + "\n"


def plot(report, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    launches = report["launches"]
    rows = [r["N"] for r in launches]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 7.5), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    top.plot(rows, [r["one"]["qps"] for r in launches], "o-", color="C0", ms=3, label="ockstore, one query per call")
    top.plot(rows, [r["batch"]["qps"] for r in launches], "--", color="C0", alpha=0.6,
             label="ockstore, batch (per query)")
    for color, name in zip(("C1", "C2"), report["setup"]["peers"]):
        pts = [(r["N"], r["peers"][name]["qps_at_target"]) for r in launches
               if "peers" in r and r["peers"][name]["qps_at_target"] is not None]
        top.plot([p[0] for p in pts], [p[1] for p in pts], "s-", color=color, ms=3,
                 label=f"{PEERS[name].name}, one query per call, at ockstore's recall")
    pts = [(r["N"], GOALS["over_hnswlib"] * r["peers"]["hnswlib"]["qps_at_target"]) for r in launches
           if "peers" in r and r["peers"]["hnswlib"]["qps_at_target"] is not None]
    top.plot([p[0] for p in pts], [p[1] for p in pts], ":", color="C1", lw=1,
             label=f"goal: {GOALS['over_hnswlib']:g}x hnswlib's")
    fin = report["final"]["rounds"]
    top.plot([rows[-1]], [fin["compacted_one"]["qps"]], "*", color="C3", ms=10, ls="none",
             label="compacted copy, one query per call (final rounds)")
    top.set_yscale("log")
    top.set_ylabel("queries/s (1 thread)")
    top.grid(True, which="both", alpha=0.3)
    recalls = [r["recall"] for r in launches]
    bottom.plot(rows, recalls, "o-", color="C0", ms=3,
                label="ockstore's 10-recall@10, one query per call (the peers' target)")
    bottom.axhline(GOALS["recall"], color="grey", ls=":", lw=1, label=f"goal {GOALS['recall']}")
    bottom.set_ylim(min(min(recalls), GOALS["recall"]) - 0.01, 1.005)
    trained = next((r["N"] for r in launches if r["trained"]), None)
    if trained is not None and trained != rows[0]:  # the launches before searched exactly (brute force)
        for ax in (top, bottom):
            ax.axvline(trained, color="grey", lw=0.8, ls="--")
        bottom.annotate("trained", (trained, bottom.get_ylim()[0]), textcoords="offset points", xytext=(3, 3),
                        fontsize=7, color="grey")
    bottom.set_ylabel("10-recall@10")
    bottom.set_xlabel(f"rows after each writer launch of {report['setup']['rows']:,}")
    bottom.grid(True, alpha=0.3)
    s = report["setup"]
    top.set_title(f"minilm-real grown by writer launches, quantizer {s['quantizer'] or 'chosen by the library'}, "
                  f"{s['queries']} queries", fontsize=9)
    handles = [h for ax in (top, bottom) for h in ax.get_legend_handles_labels()[0]]
    fig.legend(handles=handles, fontsize=7, loc="lower center", ncol=2, frameon=False)  # below: the lines stay clear
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)


def machine():
    import importlib.metadata

    versions = {"numpy": np.__version__, "ockstore": ockstore.__version__}
    for dist in ("hnswlib", "usearch"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return {"cpu": cpu_model(), "cores": core_count(), "versions": versions}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("OCKSTORE_DATA", DATA.parent)) / DATA.name)
    parser.add_argument("--quantizer", default=None,
                        help='an unfitted model, evaluated in ockstore\'s namespace (e.g. "OCKM(24, 2, 10, '
                             'n_codewords=16)"); default: none, the collection picks it')
    parser.add_argument("--launches", type=int, default=None, help="writer launches (default 40; --quick 10)")
    parser.add_argument("--rows", type=int, default=1000, help="base rows added per launch (default 1000)")
    parser.add_argument("--queries", type=int, default=None, help="queries searched (default 200; --quick 100)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per measure, best kept (default 3)")
    parser.add_argument("--final-rounds", type=int, default=None, help="interleaved final rounds (default 5; quick 3)")
    parser.add_argument("--every", type=int, default=1, help="measure the peers every N launches (and at the last)")
    parser.add_argument("--peers", nargs="*", choices=tuple(PEERS), default=list(PEERS))
    parser.add_argument("--subprocess", action="store_true", help="each writer launch in a child process")
    parser.add_argument("--quick", action="store_true", help="10 launches, 100 queries, 3 final rounds")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the folders here (default: a temporary one)")
    parser.add_argument("--json", type=Path, default=None, help="write every figure as JSON here")
    parser.add_argument("--markdown", "--out", dest="out", type=Path, default=None, help="write the markdown report")
    parser.add_argument("--plot", type=Path, default=None, help="write the two-panel PNG here")
    parser.add_argument("--child-launch", nargs=4, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_launch:
        folder, base_npy, start, stop = args.child_launch
        print(json.dumps(writer_launch(folder, base_npy, int(start), int(stop))))
        return
    args.launches = args.launches or (10 if args.quick else 40)
    args.queries = args.queries or (100 if args.quick else 200)
    args.final_rounds = args.final_rounds or (3 if args.quick else 5)
    if "hnswlib" not in args.peers:
        raise SystemExit("--peers: hnswlib is the reference of the criteria; keep it")

    info = machine()
    load_start = load_average()
    print(f"machine: {info['cpu']}, {info['cores']} cores; "
          + ", ".join(f"{k} {v}" for k, v in info["versions"].items())
          + f"; load average {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}", flush=True)
    ds = ockstore.datasets.load_texmex(args.data)
    base = np.ascontiguousarray(ds.base, dtype=np.float32)
    Q = np.ascontiguousarray(ds.query[:args.queries], dtype=np.float32)
    if args.launches * args.rows > len(base):
        raise SystemExit(f"--launches x --rows = {args.launches * args.rows:,} rows: the base has {len(base):,}")
    print(f"data: base {base.shape}, queries {Q.shape}; quantizer {args.quantizer or 'None (the library picks)'}",
          flush=True)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_app_"))
    work.mkdir(parents=True, exist_ok=True)
    if (work / "grown").exists():
        raise SystemExit(f"--workdir: {work / 'grown'} exists (a folder of an earlier run); give an empty folder")
    try:
        base_npy = work / "base.npy"
        np.save(base_npy, base[:args.launches * args.rows])
        rows, peers, grown = grow(args, work, base, Q, base_npy)
        fin = final(args, work, grown, rows, peers, base, Q)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    report = {"machine": info, "load_average_start": load_start, "load_average_end": load_average(),
              "setup": {"quantizer": args.quantizer, "launches": args.launches, "rows": args.rows,
                        "queries": args.queries, "repeats": args.repeats, "final_rounds": args.final_rounds,
                        "every": args.every, "peers": args.peers, "subprocess": args.subprocess,
                        "searcher": hasattr(ockstore.Collection, "searcher")},
              "launches": rows, "final": fin}
    report["criteria"] = criteria(fin)
    for key, v in fin["rounds"].items():
        print(f"final {key:22s} 10@10 {v['recall']:.3f}  {v['qps']:8,.0f} q/s  {v['us']:7.0f} us/query", flush=True)
    for name, p in fin["peers"].items():
        pts = ", ".join(f"ef {q['ef']}: {q['recall10']:.3f} at {q['qps']:,.0f} q/s" for q in p["points"])
        floor = " (its smallest ef)" if p["floor"] else ""
        print(f"final {name} at ockstore's recall: {fmt(p['qps_at_target'])} q/s{floor} ({pts})", flush=True)
    print(f"folders: grown {fin['grown_folder_bytes'] / 1e6:.1f} MB, vacuumed {fin['grown_vacuumed_bytes'] / 1e6:.1f} "
          f"MB, compacted {fin['compacted_bytes'] / 1e6:.1f} MB; load average after "
          f"{report['load_average_end'][0]:.2f}", flush=True)
    bench_finish(report, args, markdown)
    if args.plot:
        plot(report, args.plot)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
