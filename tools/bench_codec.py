"""Codec benchmark: training time, encoding throughput and distortion of ockstore's quantizers beside faiss-cpu.

For each code length (bits): ockstore PQ and CKM with M = bits/8, ECKM and OCKM with M = bits/16 and C = 2
(T = 10); faiss IndexPQ (M = bits/8, 8 bits), OPQ+PQ ("OPQ{M},PQ{M}") and IndexProductResidualQuantizer
(nsplits = bits/16, Msub = 2, nbits = 8, max_beam_size = 10). Everything runs in this process, on the same data, one
after the other. Reported: training time (total and per iteration where the method iterates), encoding throughput
of the base with 1 and 2 threads, distortion (mean squared error per vector) on the learn and base sets, and ratios
of ockstore OCKM to each faiss index.

With --train-repeats N (N >= 2) the training of OCKM and of faiss's product residual quantizer (the peer at equal
bits with the same beam) is then repeated N more times, interleaved (ockstore, faiss, ockstore, faiss, ...), and the
report gives every run, the median of each and the median of the per-pair ratios: one run is at the mercy of
whatever else the machine does. The load average is printed before and after.

faiss-cpu is imported here only (``make bench`` installs it into the benchmark environment); ockstore never depends
on it. Usage::

    python tools/bench_codec.py --data ../shared/data/sift-real --bits 32 64 128 --out bench-results/codec.md
    python tools/bench_codec.py --bits 64 --methods OCKM --faiss-methods PRQ --train-repeats 5  # training ratio
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

import ockstore
from _machine import core_count, cpu_model
from ockstore import datasets

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def machine_description():
    return f"{cpu_model()}, {core_count()} cores, Python {platform.python_version()}, numpy {np.__version__}"


def mean_sq_error(X, X_hat, chunk=100_000):
    total = 0.0
    for s in range(0, X.shape[0], chunk):
        d = X[s:s + chunk].astype(np.float64) - X_hat[s:s + chunk]
        total += float(np.einsum("ij,ij->", d, d))
    return total / X.shape[0]


def load_average():
    try:
        return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    except OSError:
        return "unknown"


def timed(fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t


# ------------------------------------------------------------------------------------------------------- ockstore
def run_ockstore(name, make, learn, base, threads_list):
    q = make()
    _, t_train = timed(q.fit, learn)
    n_iter = len(q.objective_history) - 1
    row = {"library": "ockstore", "method": name, "bytes": q.code_size, "train_s": t_train,
           "iterations": n_iter, "train_per_iter_s": t_train / max(n_iter, 1)}
    for th in threads_list:
        _, t = timed(lambda: q.encode(base, n_threads=th))
        row[f"encode_vps_{th}t"] = base.shape[0] / t
    row["distortion_learn"] = q.distortion(learn)
    row["distortion_base"] = q.distortion(base)
    return row


# ---------------------------------------------------------------------------------------------------------- faiss
def faiss_codec(faiss, kind, d, bits):
    if kind == "IndexPQ":
        return faiss.IndexPQ(d, bits // 8, 8)
    if kind == "OPQ+PQ":
        m = bits // 8
        return faiss.index_factory(d, f"OPQ{m},PQ{m}")
    if kind == "PRQ":
        index = faiss.IndexProductResidualQuantizer(d, bits // 16, 2, 8)
        index.prq.max_beam_size = 10
        for i in range(index.prq.nsplits):
            faiss.downcast_Quantizer(index.prq.subquantizer(i)).max_beam_size = 10
        return index
    raise ValueError(kind)


def run_faiss(faiss, kind, bits, learn, base, threads_list, max_threads):
    index = faiss_codec(faiss, kind, learn.shape[1], bits)
    faiss.omp_set_num_threads(max_threads)
    _, t_train = timed(index.train, learn)
    row = {"library": "faiss", "method": kind, "bytes": index.sa_code_size(), "train_s": t_train}
    codes = None
    for th in threads_list:
        faiss.omp_set_num_threads(th)
        codes, t = timed(index.sa_encode, base)
        row[f"encode_vps_{th}t"] = base.shape[0] / t
    faiss.omp_set_num_threads(max_threads)
    row["distortion_learn"] = mean_sq_error(learn, index.sa_decode(index.sa_encode(learn)))
    row["distortion_base"] = mean_sq_error(base, index.sa_decode(codes))
    return row


# ---------------------------------------------------------------------------------------------- training repeats
def repeat_training(faiss, bits, learn, repeats, max_threads):
    """OCKM(bits/16, 2, 10) and faiss PRQ(bits/16 x 2 x 8, beam 10) trained `repeats` times each, interleaved."""
    ours, theirs = [], []
    for _ in range(repeats):
        q = ockstore.OCKM(bits // 16, 2, 10, n_threads=max_threads)
        ours.append(timed(q.fit, learn)[1])
        if faiss is not None:
            index = faiss_codec(faiss, "PRQ", learn.shape[1], bits)
            faiss.omp_set_num_threads(max_threads)
            theirs.append(timed(index.train, learn)[1])
    return {"bits": bits, "ockm_train_s": ours, "prq_train_s": theirs}


def report_repeats(runs):
    lines = ["### Training time, interleaved runs: OCKM(M, 2, 10) vs faiss PRQ (M x 2 x 8, beam 10)", "",
             "| bits | OCKM runs (s) | PRQ runs (s) | OCKM median | PRQ median | ratio of medians | median of ratios |",
             "|---|---|---|---|---|---|---|"]
    for run in runs:
        ours, theirs = run["ockm_train_s"], run["prq_train_s"]
        row = (f"| {run['bits']} | {' '.join(f'{t:.2f}' for t in ours)} | {' '.join(f'{t:.2f}' for t in theirs)} | "
               f"{np.median(ours):.2f} | ")
        if theirs:
            ratios = [a / b for a, b in zip(ours, theirs)]
            row += (f"{np.median(theirs):.2f} | {np.median(ours) / np.median(theirs):.3f}× | "
                    f"{np.median(ratios):.3f}× |")
        else:
            row += "— | — | — |"
        lines.append(row)
    lines.append("")
    return "\n".join(lines)


# -------------------------------------------------------------------------------------------------------- report
def fmt(v, digits=0):
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    return f"{v:,.{digits}f}"


def report(rows, bits_list, threads_list, header):
    lines = [header, ""]
    for bits in bits_list:
        rs = [r for r in rows if r["bits"] == bits]
        lines.append(f"### {bits}-bit codes")
        lines.append("")
        enc_cols = " | ".join(f"encode vec/s {t}T" for t in threads_list)
        lines.append(f"| library | method | bytes | train s | iters | s/iter | {enc_cols} | distortion learn | "
                     "distortion base |")
        lines.append("|" + "---|" * (8 + len(threads_list)))
        for r in rs:
            enc = " | ".join(fmt(r.get(f"encode_vps_{t}t")) for t in threads_list)
            lines.append(f"| {r['library']} | {r['method']} | {r['bytes']} | {fmt(r['train_s'], 2)} | "
                         f"{fmt(r.get('iterations'))} | {fmt(r.get('train_per_iter_s'), 3)} | {enc} | "
                         f"{fmt(r['distortion_learn'], 1)} | {fmt(r['distortion_base'], 1)} |")
        ockm = next((r for r in rs if r["method"].startswith("OCKM")), None)
        if ockm:
            lines.append("")
            lines.append("Ratios, ockstore OCKM / faiss (training time, encoding time per vector at the largest "
                         "thread count, base distortion):")
            lines.append("")
            t_max = threads_list[-1]
            for r in rs:
                if r["library"] != "faiss":
                    continue
                enc_ratio = r[f"encode_vps_{t_max}t"] / ockm[f"encode_vps_{t_max}t"]
                lines.append(f"- vs {r['method']}: train {ockm['train_s'] / r['train_s']:.3f}×, "
                             f"encode time {enc_ratio:.3f}× (OCKM {ockm[f'encode_vps_{t_max}t'] / r[f'encode_vps_{t_max}t']:.1f}× faster), "
                             f"base distortion {ockm['distortion_base'] / r['distortion_base']:.4f}×")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=os.path.join(REPO, "..", "shared", "data", "sift-real"),
                        help="texmex dataset folder (*_learn, *_base files)")
    parser.add_argument("--bits", type=int, nargs="+", default=[32, 64, 128], help="code lengths (multiples of 16)")
    parser.add_argument("--base-limit", type=int, default=None, help="use only the first N base vectors")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts for encoding")
    parser.add_argument("--no-faiss", action="store_true", help="skip the faiss peers")
    parser.add_argument("--methods", nargs="+", default=["PQ", "CKM", "ECKM", "OCKM"])
    parser.add_argument("--faiss-methods", nargs="+", default=["IndexPQ", "OPQ+PQ", "PRQ"],
                        choices=["IndexPQ", "OPQ+PQ", "PRQ"])
    parser.add_argument("--train-repeats", type=int, default=0,
                        help="then train OCKM and faiss PRQ this many more times each, interleaved (0: no repeats)")
    parser.add_argument("--out", default=None, help="write the markdown report here (and a .json beside it)")
    args = parser.parse_args(argv)
    for b in args.bits:
        if b % 16:
            parser.error(f"--bits {b}: code lengths must be multiples of 16 (ECKM/OCKM use M = bits/16, C = 2)")

    ds = datasets.load_texmex(args.data)
    print(f"# machine: {machine_description()}; load average {load_average()}", flush=True)
    t = time.perf_counter()
    learn = np.ascontiguousarray(ds.learn, dtype=np.float32)
    base = ds.base if args.base_limit is None else ds.base[:args.base_limit]
    base = np.ascontiguousarray(base, dtype=np.float32)
    print(f"# data: {ds.name}: learn {learn.shape}, base {base.shape} (loaded in {time.perf_counter() - t:.1f}s)",
          flush=True)
    faiss = None
    if not args.no_faiss:
        import faiss  # noqa: PLC0415 (benchmark-only dependency)
    max_threads = max(args.threads)

    rows = []
    for bits in args.bits:
        makers = {
            "PQ": (f"PQ(M={bits // 8})", lambda: ockstore.PQ(bits // 8, n_threads=max_threads)),
            "CKM": (f"CKM(M={bits // 8})", lambda: ockstore.CKM(bits // 8, n_threads=max_threads)),
            "ECKM": (f"ECKM(M={bits // 16},C=2)", lambda: ockstore.ECKM(bits // 16, 2, n_threads=max_threads)),
            "OCKM": (f"OCKM(M={bits // 16},C=2,T=10)",
                     lambda: ockstore.OCKM(bits // 16, 2, 10, n_threads=max_threads)),
        }
        for key in args.methods:
            name, make = makers[key]
            row = run_ockstore(name, make, learn, base, args.threads)
            row["bits"] = bits
            rows.append(row)
            print(json.dumps(row), flush=True)
        if faiss is not None:
            for kind in args.faiss_methods:
                row = run_faiss(faiss, kind, bits, learn, base, args.threads, max_threads)
                row["bits"] = bits
                rows.append(row)
                print(json.dumps(row), flush=True)

    repeats = []
    if args.train_repeats > 0:
        for bits in args.bits:
            run = repeat_training(faiss, bits, learn, args.train_repeats, max_threads)
            repeats.append(run)
            print(json.dumps(run), flush=True)

    header = (f"Codec benchmark on {ds.name} (learn {learn.shape[0]:,}, base {base.shape[0]:,}, dim "
              f"{learn.shape[1]}).\nMachine: {machine_description()}; load average at the end {load_average()}.\n"
              f"Command: python tools/bench_codec.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    text = report(rows, args.bits, args.threads, header)
    if repeats:
        text += "\n" + report_repeats(repeats)
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text + "\n")
        with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
            json.dump({"rows": rows, "train_repeats": repeats}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
