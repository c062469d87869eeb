"""Reproduce the experiments of the OCKM paper on texmex-style datasets: distortion, recall@R, mean overall ratio,
beam width and convergence, for PQ, CKM, ECKM and OCKM; writes PNG figures and docs/results.md.

Wang, Wang, Song, Xu, Shen, Li, "Optimized Cartesian K-Means", IEEE TKDE 2015. For every dataset folder:

(a) distortion (mean squared reconstruction error per vector) on the learn (training) set and on the base
    (database) set, at equal M (M = 2, 4, 8; C = 2 for ECKM/OCKM, so they use twice the bits of PQ/CKM) and at equal
    code length (32/64/128 bits: PQ/CKM with M = bits/8, ECKM/OCKM with M = bits/16 and C = 2);
(b) recall@R for R = 1..1000 (the fraction of queries whose true nearest neighbour is among the first R results;
    search with k = 1000), with asymmetric (A = ADC) and symmetric (S = SDC) distances, at 32, 64 and 128 bits;
(c) the mean overall ratio at 10 of the same searches;
(d) OCKM's distortion against the beam width T (64 bits) and every method's training objective against the iteration
    (64 bits).

Quantizers use the package defaults (K = 256, their default iteration counts and tol, OCKM T = 10, seed 0);
ECKM and OCKM indexes store the norm term in one byte (the default "u8": 1 byte per vector beyond the code; OCKM ADC
is also reported with a float32 norm). Searches are exhaustive over the whole base with all cores.
``--quick`` is a smoke test (first 20K learn and 100K base vectors with exact ground truth recomputed, 200 queries,
5 iterations, T in {1, 4, 16}).

Only the public API of ockstore is used, plus matplotlib (Agg backend) for the figures. From the repository root:

    python tools/reproduce_paper.py --data ../shared/data/sift-real ../shared/data/minilm-real --out docs/
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import ockstore  # noqa: E402
from _machine import core_count, cpu_model  # noqa: E402
from _paper_report import BITS, EQUAL_M, METHODS, fmt_d, markdown  # noqa: E402
from ockstore import datasets, evaluation  # noqa: E402

BEAMS = (1, 2, 4, 8, 16, 32, 64)
K_SEARCH = 1000
TABLE_R = (1, 10, 100, 1000)
STEP = 100_000  # base rows decoded per step for the base distortion (memory bounded by the step)
COLORS = {"PQ": "tab:blue", "CKM": "tab:green", "ECKM": "tab:orange", "OCKM": "tab:red"}


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------------------- machine
def machine_info():
    cpu, cores = cpu_model(), core_count()
    mem = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    mem = int(line.split()[1]) / 1e6
    except OSError:
        pass
    import matplotlib
    import scipy

    import subprocess

    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no", "--",
                                "ockstore"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        source = f"git {commit}" + (" with uncommitted changes to ockstore/" if dirty else "") if commit else "unknown"
    except (OSError, subprocess.SubprocessError):
        source = "unknown"
    return {"cpu": cpu, "cores": cores, "memory_gb": mem, "os": platform.platform(), "source": source,
            "python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__,
            "matplotlib": matplotlib.__version__, "ockstore": ockstore.__version__}


# ------------------------------------------------------------------------------------------------------------- data
def load(folder, n_queries, quick):
    ds = datasets.load_texmex(folder)
    t0 = time.perf_counter()
    learn = np.ascontiguousarray(ds.learn[: 20_000 if quick else None], dtype=np.float32)
    query = np.ascontiguousarray(ds.query[:n_queries], dtype=np.float32)
    if quick:
        parts, have = [], 0
        for chunk in ds.iter_base(100_000):
            parts.append(np.asarray(chunk, dtype=np.float32))
            have += len(chunk)
            if have >= 100_000:
                break
        base = np.ascontiguousarray(np.concatenate(parts)[:100_000])
        _, gt = evaluation.exact_knn(query, base, 100)
    else:
        base = np.ascontiguousarray(ds.base, dtype=np.float32)
        gt = np.ascontiguousarray(ds.groundtruth[:n_queries])
    if gt.shape[0] < query.shape[0]:
        raise SystemExit(f"{folder}: ground truth has {gt.shape[0]} rows for {query.shape[0]} queries")
    log(f"{ds.name}: learn {learn.shape}, base {base.shape}, queries {query.shape}, ground truth {gt.shape} "
        f"({time.perf_counter() - t0:.1f} s)")
    return ds.name, learn, base, query, gt


# ------------------------------------------------------------------------------------------------------- quantizers
def make(method, M, *, T=10, quick=False):
    kw = {"n_iter": 5} if quick else {}
    if method == "PQ":
        return ockstore.PQ(M, **kw)
    if method == "CKM":
        return ockstore.CKM(M, **kw)
    if method == "ECKM":
        return ockstore.ECKM(M, 2, **kw)
    return ockstore.OCKM(M, 2, T, **kw)


def base_distortion(q, index, base):
    """Mean squared error of the base from the index's codes (decoded step by step): no second encoding."""
    total = 0.0
    codes = index.codes
    for s in range(0, base.shape[0], STEP):
        rec = q.decode(codes[s:s + STEP])
        total += evaluation.distortion(base[s:s + STEP], rec) * rec.shape[0]
    return total / base.shape[0]


class Run:
    """Trained quantizers (and their base indexes), keyed by (method, M, T)."""

    def __init__(self, learn, base, quick):
        self.learn, self.base, self.quick = learn, base, quick
        self.models = {}

    def get(self, method, M, T=10, keep_index=False):
        key = (method, M, T if method == "OCKM" else None)
        rec = self.models.get(key)
        if rec is not None:
            if keep_index and rec.get("index") is None:
                raise RuntimeError(f"{key}: index was dropped")
            return rec
        q = make(method, M, T=T, quick=self.quick)
        t0 = time.perf_counter()
        q.fit(self.learn)
        train_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        index = ockstore.Index.from_vectors(q, self.base)
        encode_s = time.perf_counter() - t0
        rec = {
            "method": method, "M": M, "C": q.n_codebooks, "T": key[2], "bits": q.bits,
            "bytes_per_vector": index.bytes_per_vector,
            "train_s": train_s, "encode_s": encode_s,
            "iterations": len(q.objective_history) - 1, "stop_reason": q.stop_reason,
            "history": [float(v) for v in q.objective_history],
            "distortion_learn": q.distortion(self.learn),
            "distortion_base": base_distortion(q, index, self.base),
            "quantizer": q, "index": index if keep_index else None,
        }
        self.models[key] = rec
        log(f"  {method:<4} M={M:<2} C={q.n_codebooks}" + (f" T={key[2]:<2}" if key[2] is not None else "      ")
            + f" {q.bits:>3} bits: train {train_s:6.1f} s ({rec['iterations']} it), encode {encode_s:5.1f} s, "
            f"distortion learn {rec['distortion_learn']:.6g} base {rec['distortion_base']:.6g}")
        return rec


def public(rec):
    return {k: v for k, v in rec.items() if k not in ("quantizer", "index")}


# ---------------------------------------------------------------------------------------------------------- search
def nn_positions(I, gt):
    """Rank (0-based) of each query's true nearest neighbour in its results, K_SEARCH when absent."""
    hit = I == gt[:, :1]
    return np.where(hit.any(axis=1), hit.argmax(axis=1), I.shape[1])


def search_row(rec, query, base, gt, distance, threads, norm_encoding=None):
    index = rec["index"]
    label = f"{rec['method']} {'A' if distance == 'adc' else 'S'}"
    if norm_encoding == "f32":  # the same codes with the exact float32 norm term (OCKM ADC, for reference)
        q = rec["quantizer"]
        index = ockstore.Index(q, index.codes, q.code_norms(index.codes), None, "f32")
        label += " (f32 norm)"
    index.search(query[:10], K_SEARCH, distance=distance, n_threads=threads)  # warm-up
    t0 = time.perf_counter()
    D, I = index.search(query, K_SEARCH, distance=distance, n_threads=threads)
    elapsed = time.perf_counter() - t0
    pos = nn_positions(I, gt)
    curve = [float((pos < r).mean()) for r in range(1, K_SEARCH + 1)]
    for r in TABLE_R:  # the curve is the paper's recall@R, as evaluation.recall_at_r defines it
        assert abs(curve[r - 1] - evaluation.recall_at_r(I, gt, r)) < 1e-12
    row = {
        "label": label, "method": rec["method"], "distance": distance, "bits": rec["bits"],
        "norm_encoding": norm_encoding or index.norm_encoding, "bytes_per_vector": index.bytes_per_vector,
        "recall": {r: curve[r - 1] for r in TABLE_R}, "curve": curve,
        "mor10": evaluation.mean_overall_ratio(query, base, I, gt, 10),
        "ms_per_query": 1000.0 * elapsed / len(query), "positions": pos.tolist(),
    }
    log(f"    {label:<20} R@1 {row['recall'][1]:.3f}  R@10 {row['recall'][10]:.3f}  R@100 {row['recall'][100]:.3f}"
        f"  R@1000 {row['recall'][1000]:.3f}  MOR@10 {row['mor10']:.4f}  {row['ms_per_query']:.2f} ms/q")
    return row


# ------------------------------------------------------------------------------------------------------ experiments
def run_dataset(folder, args, threads):
    t_start = time.perf_counter()
    name, learn, base, query, gt = load(folder, args.queries, args.quick)
    run = Run(learn, base, args.quick)
    res = {"name": name, "folder": str(folder), "learn": list(learn.shape), "base": list(base.shape),
           "queries": int(query.shape[0]), "quick": args.quick}

    log(f"{name}: (a) distortion at equal code length, (b, c) recall and mean overall ratio")
    res["search"] = {}
    for bits in BITS:
        Ms = {"PQ": bits // 8, "CKM": bits // 8, "ECKM": bits // 16, "OCKM": bits // 16}
        rows = []
        for method in METHODS:
            rec = run.get(method, Ms[method], keep_index=True)
            for distance in ("adc", "sdc"):
                rows.append(search_row(rec, query, base, gt, distance, threads))
            if method == "OCKM":
                rows.append(search_row(rec, query, base, gt, "adc", threads, norm_encoding="f32"))
        for method in METHODS:  # free the codes of this code length
            run.models[(method, Ms[method], 10 if method == "OCKM" else None)]["index"] = None
        res["search"][bits] = rows

    log(f"{name}: (a) distortion at equal M")
    for M in EQUAL_M:
        for method in METHODS:
            run.get(method, M)
    res["equal_m"] = {M: {m: public(run.get(m, M)) for m in METHODS} for M in EQUAL_M}
    res["equal_bits"] = {bits: {m: public(run.get(m, bits // (8 if m in ("PQ", "CKM") else 16))) for m in METHODS}
                         for bits in BITS}

    log(f"{name}: (d) OCKM distortion against the beam width T (64 bits)")
    beams = (1, 4, 16) if args.quick else BEAMS
    res["beam"] = [public(run.get("OCKM", 4, T)) for T in sorted(set(beams) | {10})]
    res["history"] = {m: res["equal_bits"][64][m]["history"] for m in METHODS}
    res["seconds"] = time.perf_counter() - t_start
    log(f"{name}: done in {res['seconds'] / 60:.1f} min")
    return res


# ------------------------------------------------------------------------------------------------------------ plots
def plot_all(res, fig_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    name = res["name"]
    files = {}

    # (a) distortion: equal code length and equal M, learn (dashed) and base (solid)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, xs, xlabel in ((axes[0], "equal_bits", BITS, "code length (bits)"),
                                (axes[1], "equal_m", EQUAL_M, "M (subspaces); ECKM/OCKM use C = 2: twice the bits")):
        for m in METHODS:
            base_d = [res[key][x][m]["distortion_base"] for x in xs]
            learn_d = [res[key][x][m]["distortion_learn"] for x in xs]
            ax.plot(xs, base_d, "o-", color=COLORS[m], label=f"{m} base")
            ax.plot(xs, learn_d, "x--", color=COLORS[m], alpha=0.6, label=f"{m} learn")
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("distortion (mean squared error)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_title(f"{name}: equal code length")
    axes[1].set_title(f"{name}: equal M")
    axes[1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    files["distortion"] = _save(fig, fig_dir, f"{name}_distortion.png")

    # (b) recall@R curves
    fig, axes = plt.subplots(1, len(BITS), figsize=(5 * len(BITS), 4.2), sharey=True)
    R = np.arange(1, K_SEARCH + 1)
    for ax, bits in zip(axes, BITS):
        for row in res["search"][bits]:
            if row["norm_encoding"] == "f32" and row["method"] == "OCKM":
                continue
            ax.plot(R, row["curve"], "-" if row["distance"] == "adc" else "--", color=COLORS[row["method"]],
                    label=row["label"])
        ax.set_xscale("log")
        ax.set_xlabel("R")
        ax.set_title(f"{name}: {bits} bits")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("recall@R (true nearest neighbour in the top R)")
    axes[0].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    files["recall"] = _save(fig, fig_dir, f"{name}_recall.png")

    # (c) mean overall ratio at 10
    fig, ax = plt.subplots(figsize=(8, 4))
    labels = [f"{m} {d}" for m in METHODS for d in ("A", "S")]
    width = 0.8 / len(BITS)
    for j, bits in enumerate(BITS):
        by = {row["label"]: row["mor10"] for row in res["search"][bits]}
        ax.bar(np.arange(len(labels)) + (j - (len(BITS) - 1) / 2) * width, [by[lbl] - 1.0 for lbl in labels],
               width, bottom=1.0, label=f"{bits} bits")
    ax.set_xticks(np.arange(len(labels)), labels)
    ax.set_ylabel("mean overall ratio at 10 (1 = exact)")
    ax.set_title(f"{name}: mean overall ratio at 10 (lower is better)")
    ax.legend()
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    files["mor"] = _save(fig, fig_dir, f"{name}_mor.png")

    # (d) beam width and iterations
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    Ts = [r["T"] for r in res["beam"]]
    axes[0].plot(Ts, [r["distortion_base"] for r in res["beam"]], "o-", color=COLORS["OCKM"], label="OCKM base")
    axes[0].plot(Ts, [r["distortion_learn"] for r in res["beam"]], "x--", color=COLORS["OCKM"], alpha=0.6,
                 label="OCKM learn")
    for m in ("CKM", "ECKM"):
        axes[0].axhline(res["equal_bits"][64][m]["distortion_base"], color=COLORS[m], lw=1, ls=":",
                        label=f"{m} base (64 bits)")
    axes[0].set_xscale("log", base=2)
    axes[0].set_xticks(Ts, [str(t) for t in Ts])
    axes[0].set_xlabel("beam width T")
    axes[0].set_ylabel("distortion")
    axes[0].set_title(f"{name}: OCKM 64 bits (M=4, C=2) against T")
    axes[0].legend(fontsize=8)
    axes[0].grid(True, which="both", alpha=0.3)
    # The y range follows the iterations, not an initialisation far above them (ECKM's greedy start): such a start is
    # clipped and its value written in the legend.
    top = 1.03 * max(max(h[1:]) if len(h) > 1 else h[0] for h in res["history"].values())
    top = max(top, 1.03 * float(np.median([h[0] for h in res["history"].values()])))
    bottom = 0.98 * min(min(h) for h in res["history"].values())
    for m in METHODS:
        h = res["history"][m]
        note = f", init {fmt_d(h[0])} off scale" if h[0] > top else ""
        axes[1].plot(range(len(h)), h, "-", color=COLORS[m], label=f"{m} ({len(h) - 1} it{note})")
    axes[1].set_ylim(bottom, top)
    axes[1].set_xlabel("iteration (0 = initialisation)")
    axes[1].set_ylabel("learn distortion (training objective)")
    axes[1].set_title(f"{name}: convergence at 64 bits")
    axes[1].legend(fontsize=8)
    axes[1].grid(True, alpha=0.3)
    fig.tight_layout()
    files["beam_iterations"] = _save(fig, fig_dir, f"{name}_beam_iterations.png")
    plt.close("all")
    return files


def _save(fig, fig_dir, fname):
    path = fig_dir / fname
    tmp = path.with_name("." + fname + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)
    return path


# -------------------------------------------------------------------------------------------------------------- main
def main(argv=None):
    default_data = str(REPO.parent / "shared" / "data" / "sift-real")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="example:\n  python tools/reproduce_paper.py --data ../shared/data/sift-real "
                                            "../shared/data/minilm-real --out docs/")
    parser.add_argument("--data", nargs="+", default=[default_data], metavar="FOLDER",
                        help="texmex dataset folders (default: ../shared/data/sift-real from the repository)")
    parser.add_argument("--out", default=str(REPO / "docs"),
                        help="where results.md and figures/ are written (default: docs/)")
    parser.add_argument("--queries", type=int, default=None, help="first N queries (default 1000; 200 with --quick)")
    parser.add_argument("--threads", type=int, default=None, help="threads (default: all cores)")
    parser.add_argument("--quick", action="store_true", help="smoke test on reduced data (minutes)")
    parser.add_argument("--json", default=None, metavar="PATH", help="also save the raw results as JSON")
    args = parser.parse_args(argv)
    if args.queries is None:
        args.queries = 200 if args.quick else 1000
    if args.queries < 1:
        parser.error("--queries must be >= 1")
    for folder in args.data:
        if not os.path.isdir(folder):
            parser.error(f"--data: no such folder: {folder}")
    out = Path(args.out)
    fig_dir = out / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    log(f"machine: {machine['cpu']}, {machine['cores']} cores")
    threads = args.threads
    t0 = time.perf_counter()
    all_res = []
    for folder in args.data:
        res = run_dataset(folder, args, threads)
        plot_all(res, fig_dir)
        all_res.append(res)
    total = time.perf_counter() - t0
    shown_argv = ["tools/reproduce_paper.py"] + (sys.argv[1:] if argv is None else list(argv))
    text = markdown(all_res, machine, shown_argv, total, out)
    path = out / "results.md"
    tmp = out / ".results.md.tmp"
    tmp.write_text(text)
    os.replace(tmp, path)
    log(f"wrote {path} and {len(all_res) * 4} figures in {fig_dir} ({total / 60:.1f} min)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "results": all_res}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
