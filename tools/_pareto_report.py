"""Output of tools/bench_pareto.py: Pareto frontiers, interpolated queries/s, the tables and the plots
(benchmark-only; never imported by the package)."""

from __future__ import annotations

import itertools

import math
import statistics
from pathlib import Path

REFERENCE = "hnswlib"  # the ratios are to this system's figures
HEADLINE = 0.95


def frontier(points, key="recall10"):
    """The points no other point beats on both ``key`` (a recall) and queries/s, by ``key`` ascending."""
    best = []
    for p in sorted(points, key=lambda p: (-p[key], -p["qps"])):
        if not best or p["qps"] > best[-1]["qps"]:
            best.append(p)
    return best[::-1]


def interpolate_qps(points, target, key="recall10"):
    """Queries/s at recall ``target`` on the frontier: linear in recall, geometric in queries/s between the two
    frontier points around it; None when no point reaches it."""
    front = frontier(points, key)
    if not front or front[-1][key] < target:
        return None
    above = next(i for i, p in enumerate(front) if p[key] >= target)
    if above == 0 or front[above][key] == target:
        return front[above]["qps"]
    lo, hi = front[above - 1], front[above]
    t = (target - lo[key]) / (hi[key] - lo[key])
    return math.exp((1 - t) * math.log(lo["qps"]) + t * math.log(hi["qps"]))


def _fmt(x, digits=0, none="–"):
    return none if x is None else f"{x:,.{digits}f}"


def _ratio(a, b, digits=2):
    return "–" if a is None or b is None or b == 0 else f"{a / b:.{digits}f}"


def _spread(values):
    """(median, min, max), or None when a value is missing (a round that did not reach the target)."""
    if not values or any(v is None for v in values):
        return None
    return statistics.median(values), min(values), max(values)


def _round_ratios(system, reference, kind):
    a = (system.get("interleaved_qps_095") or {}).get(kind) or []
    b = (reference.get("interleaved_qps_095") or {}).get(kind) or []
    if not a or not b or any(v is None for v in a + b):
        return None
    return _spread([x / y for x, y in zip(a, b)])


def _mem_mb(row, part="VmRSS"):
    g = (row.get("memory") or {}).get("gain_kb")
    return None if not g else g[part] / 1024


def analyse(result, targets):
    """Per system: the figures of the tables (q/s at each target by wall and CPU time, ratios to hnswlib's, memory)."""
    systems = result["systems"]
    ref = next((s for s in systems.values() if s["library"] == REFERENCE), None)
    out = {}
    for sid, s in systems.items():
        pts = s["points"]
        cpu_pts = [{**p, "qps": p["qps_cpu"]} for p in pts]
        row = {"name": s["name"], "ours": s["ours"], "best10": max(p["recall10"] for p in pts),
               "qps": {t: interpolate_qps(pts, t) for t in targets},
               "qps_cpu": interpolate_qps(cpu_pts, HEADLINE),
               "qps_r1": interpolate_qps(pts, HEADLINE, "recall1"),
               "cpu_per_wall": [min(p["cpu_per_wall"] for p in pts), max(p["cpu_per_wall"] for p in pts)],
               "threads_ran": max(p.get("threads_ran", 0) for p in pts),
               "build": s["build"], "memory": s.get("memory"), "tuned": s.get("tuned")}
        if ref is not None:
            ref_cpu = [{**p, "qps": p["qps_cpu"]} for p in ref["points"]]
            row["ratio_sweep"] = _div(row["qps"][HEADLINE], interpolate_qps(ref["points"], HEADLINE))
            row["ratio_sweep_cpu"] = _div(row["qps_cpu"], interpolate_qps(ref_cpu, HEADLINE))
            row["ratio_rounds"] = _round_ratios(s, ref, "wall")
            row["ratio_rounds_cpu"] = _round_ratios(s, ref, "cpu")
            ref_mem = (ref.get("memory") or {}).get("gain_kb")
            row["memory_ratio"] = _div(_mem_mb(row), None if not ref_mem else ref_mem["VmRSS"] / 1024)
        out[sid] = row
    return out


def _div(a, b):
    return None if a is None or not b else a / b


def best_ours(rows):
    """The ockstore configuration with the most queries/s at 10@10 = 0.95 (None if none reaches it)."""
    ours = [r for r in rows.values() if r["ours"] and r["qps"][HEADLINE] is not None]
    return max(ours, key=lambda r: r["qps"][HEADLINE]) if ours else None


def _spread_text(x):
    return "–" if x is None else f"{x[0]:.2f} ({x[1]:.2f}–{x[2]:.2f})"


def summary_rows(result, targets):
    """Plain-text lines for stdout."""
    rows = analyse(result, targets)
    lines = [f"{'system':<50} {'build s':>7} {'cpu s':>6} {'file MB':>7} {'best':>6} "
             + " ".join(f"{'q/s@' + format(t, '.2f'):>9}" for t in targets)
             + f" {'cpu q/s':>8} {'x hnsw':>6} {'x cpu':>6} {'rounds x hnsw (wall)':>20} {'rounds x hnsw (cpu)':>20}"
             f" {'+RSS MB':>7} {'anon':>5} {'file':>5} {'x hnsw':>6} {'cpu/wall':>9} {'threads':>7}"]
    for r in rows.values():
        b = r["build"]
        lines.append(
            f"{r['name'][:50]:<50} {b['build_s']:>7.0f} {_fmt(b.get('cpu_s')):>6} {b['file_bytes'] / 1e6:>7.1f} "
            f"{r['best10']:>6.3f} " + " ".join(f"{_fmt(r['qps'][t]):>9}" for t in targets)
            + f" {_fmt(r['qps_cpu']):>8} {_fmt(r.get('ratio_sweep'), 2):>6} {_fmt(r.get('ratio_sweep_cpu'), 2):>6}"
            f" {_spread_text(r.get('ratio_rounds')):>20} {_spread_text(r.get('ratio_rounds_cpu')):>20}"
            f" {_fmt(_mem_mb(r)):>7} {_fmt(_mem_mb(r, 'RssAnon')):>5} {_fmt(_mem_mb(r, 'RssFile')):>5}"
            f" {_fmt(r.get('memory_ratio'), 2):>6} {r['cpu_per_wall'][0]:>4.2f}-{r['cpu_per_wall'][1]:.2f}"
            f" {r['threads_ran']:>7}")
    best = best_ours(rows)
    if best is not None:
        lines.append(criterion(best))
    return lines


def criterion(best):
    """The benchmark goal of issue 19 at 10@10 = 0.95, with every figure that decides it."""
    figures = [best.get("ratio_sweep"), best.get("ratio_sweep_cpu")] + [
        x[0] for x in (best.get("ratio_rounds"), best.get("ratio_rounds_cpu")) if x is not None]
    mem = best.get("memory_ratio")
    ok_q = all(f is not None and f >= 1 for f in figures)
    ok_m = mem is not None and mem <= 1 / 3
    return (f"issue 19 at 10@10 = 0.95: {best['name']}: q/s {_fmt(best.get('ratio_sweep'), 2)}x hnswlib's "
            f"(sweep, wall), {_fmt(best.get('ratio_sweep_cpu'), 2)}x (sweep, CPU time), "
            f"{_spread_text(best.get('ratio_rounds'))}x / {_spread_text(best.get('ratio_rounds_cpu'))}x (interleaved "
            f"rounds, wall / CPU: median (range)); memory {_fmt(mem, 2)}x: "
            f"{'met' if ok_q and ok_m else 'NOT met'} (needs >= 1x and <= 0.33x)")


def markdown(report, targets):
    m = report["machine"]
    la, lb = report["load_average_start"], report["load_average_end"]
    lines = [f"Machine: {m['cpu']}, {m['cores']} cores ({m['platform']}); Python {m['python']}; "
             + ", ".join(f"{k} {x}" for k, x in m["versions"].items()) + ". ockstore features detected: "
             + ", ".join(f"{k}={x}" for k, x in m["ockstore_features"].items())
             + f". Load average {la[0]:.2f} / {la[1]:.2f} / {la[2]:.2f} at the start, {lb[0]:.2f} / {lb[1]:.2f} / "
             f"{lb[2]:.2f} at the end; run {report['seconds'] / 60:.0f} min.", ""]
    for key, result in report["datasets"].items():
        rows = analyse(result, targets)
        d = result["data"]
        lines += [f"#### {key} ({d['n_base']:,} × {d['dim']}, {d['metric']}; the first {result['n_queries']:,} "
                  "queries, k = 10, one thread)", "",
                  "| system | build s: wall / CPU (threads) | file MB | best 10@10 | "
                  + " | ".join(f"q/s at 10@10 = {t:.2f}" for t in targets)
                  + " | q/s at 0.95 by CPU time | × hnswlib at 0.95: wall / CPU | × hnswlib, interleaved rounds: "
                    "wall / CPU | q/s at R@1 = 0.95 | memory point (10@10) | + RSS MB (anon / file) | "
                    "memory × hnswlib |",
                  "|---|---|---:|---:|" + "---:|" * len(targets) + "---:|---|---|---:|---|---|---:|"]
        for r in rows.values():
            b = r["build"]
            mem = r["memory"] or {}
            name = f"**{r['name']}**" if r["ours"] else r["name"]
            lines.append(
                f"| {name} | {b['build_s']:.0f} / {_fmt(b.get('cpu_s'))} ({b['threads']}) | "
                f"{b['file_bytes'] / 1e6:.0f} | {r['best10']:.3f} | "
                + " | ".join(_fmt(r["qps"][t]) for t in targets)
                + f" | {_fmt(r['qps_cpu'])} | {_fmt(r.get('ratio_sweep'), 2)} / {_fmt(r.get('ratio_sweep_cpu'), 2)} | "
                f"{_spread_text(r.get('ratio_rounds'))} / {_spread_text(r.get('ratio_rounds_cpu'))} | "
                f"{_fmt(r['qps_r1'])} | {mem.get('point', '–')} ({_fmt(mem.get('recall10'), 3)}"
                + ("" if mem.get("reached", True) else ", below 0.95") + ") | "
                f"{_fmt(_mem_mb(r))} ({_fmt(_mem_mb(r, 'RssAnon'))} / {_fmt(_mem_mb(r, 'RssFile'))}) | "
                f"{_fmt(r.get('memory_ratio'), 2)} |")
        lines.append("")
        for r in rows.values():
            t = r.get("tuned")
            if t and "error" in t:
                lines.append(f"- tune on {r['name']}: {t['error']}")
            elif t:
                lines.append(f"- {t['label']} on {r['name']}: 10@10 {t['recall10']:.4f} on the benchmark queries, "
                             f"{t['qps']:,.0f} q/s (tune took {t['tune_s']:.1f} s)")
        best = best_ours(rows)
        if best is not None:
            lines.append(f"- {criterion(best)}")
        lo = min(r["cpu_per_wall"][0] for r in rows.values())
        hi = max(r["cpu_per_wall"][1] for r in rows.values())
        threads = max(r["threads_ran"] for r in rows.values())
        lines += [f"- Threads of the searching process that ran during any timed call (from /proc/self/task): at "
                  f"most {threads}; CPU time / wall time of the calls {lo:.2f}–{hi:.2f} (below 1: the process waited "
                  "for a core).", "",
                  "<details><summary>Frontier points (10@10 ≥ 0.8)</summary>", "",
                  "| system | parameters | 10@10 | R@1 | q/s | q/s by CPU time |", "|---|---|---:|---:|---:|---:|"]
        for s in result["systems"].values():
            for p in frontier(s["points"]):
                if p["recall10"] >= 0.8:
                    lines.append(f"| {s['name']} | {p['label']} | {p['recall10']:.4f} | {p['recall1']:.3f} | "
                                 f"{p['qps']:,.0f} | {p['qps_cpu']:,.0f} |")
        lines += ["", "</details>", ""]
    return "\n".join(lines) + "\n"


def plot(result, path, machine, load_start, load_end):
    """Two panels: 10@10 and recall@1 against queries/s (log), every system's frontier; ockstore's bold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5))
    # ockstore's lines are bold and solid, the peers' thin and dashed: the two palettes may share colours, and
    # cycle when a run has more systems than colours (minilm: eight ockstore indexes)
    peers_colors = itertools.cycle(["#7f7f7f", "#8c564b", "#bcbd22", "#17becf", "#9467bd", "#e377c2", "#2ca02c"])
    ours_colors = itertools.cycle(["#d62728", "#1f77b4", "#ff7f0e", "#000000", "#2ca02c", "#9467bd", "#e377c2",
                                   "#8c564b", "#17becf", "#bcbd22"])
    colors = {sid: next(ours_colors) if s["ours"] else next(peers_colors) for sid, s in result["systems"].items()}
    for ax, key, title in ((axes[0], "recall10", "10-recall@10"), (axes[1], "recall1", "recall@1")):
        for sid, s in result["systems"].items():
            front = [p for p in frontier(s["points"], key) if p[key] >= 0.5]
            if not front:
                continue
            style = dict(lw=2.4, ms=5, zorder=3) if s["ours"] else dict(lw=1.2, ms=3.5, ls="--", zorder=2)
            ax.plot([p[key] for p in front], [p["qps"] for p in front], marker="o", color=colors[sid],
                    label=s["name"], **style)
            t = s.get("tuned")
            if t and "error" not in t:
                ax.plot([t[key]], [t["qps"]], marker="*", ms=13, color=colors[sid], zorder=4)
        ax.set_yscale("log")
        ax.set_xlabel(title)
        ax.set_ylabel("queries / s (1 thread, batch of 1,000)")
        ax.grid(True, which="both", alpha=0.3)
        if key == "recall10":
            ax.axvline(HEADLINE, color="k", lw=0.6, alpha=0.4)
    d = result["data"]
    axes[0].legend(fontsize=7, loc="lower left")
    fig.suptitle(f"{d['key']} ({d['n_base']:,} × {d['dim']}, {d['metric']}): frontiers; ockstore bold, "
                 f"★ tune(0.95). {machine['cpu']}, load {load_start[0]:.1f} → {load_end[0]:.1f}", fontsize=10)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)  # --plot-dir may name a folder not made yet
    fig.savefig(path, dpi=120)
    plt.close(fig)
