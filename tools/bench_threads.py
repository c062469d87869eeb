"""The kernels' threads (docs/ARCHITECTURE.md, "Threads"): what the small-work rule saves on small work, what each
kernel's work estimate is worth, and batch speed on two threads against another build (e.g. the OpenMP one).

    python tools/bench_threads.py small [--busy 1] [--gap-ms 2]
                                                       # small searches and adds: one thread, default threads with the
                                                       # rule, and default threads without it (--busy N: N processes
                                                       # spinning meanwhile, as on a loaded machine; --gap-ms: calls
                                                       # that far apart, as an app makes them)
    python tools/bench_threads.py costs                # nanoseconds per work unit of each kernel at one thread: the
                                                       # COST_* constants of kernels/common.pxi should give ~1
    python tools/bench_threads.py batch --other PYTHON # batch speed on 2 threads, this build and PYTHON's (another
                                                       # virtual environment's interpreter, with its own ockstore)
                                                       # in turn, --rounds times, min of repeats

On a machine shared with other users' processes, run the measurement (and the busy loop of a loaded-machine case)
each in a session of its own whose autogroup weighs more than theirs, so that the cores are the measurement's: as
root, ``setsid sh -c 'echo -15 > /proc/self/autogroup; exec python tools/bench_threads.py small --gap-ms 2'`` (and
``setsid sh -c 'echo -15 > /proc/self/autogroup; exec python3 -c "while True: pass"' &`` for the busy loop, killed by
its pid afterwards). docs/ARCHITECTURE.md ("Threads") gives the figures measured so.

The data is sift-real (``--sift``; learn, base, query), cached as .npy with the models and index files in
``--cache-dir``: the first run trains OCKM(8, 2, 10) with 256 and with 16 words per codebook and IVF(1024,
OCKM(8, 2, 10)) on 20,000 learn rows (8 iterations: speed, not recall, is measured here) and builds the indexes with
this build; every later run, of either build, reads the same files. Times are per call; the machine's load average
is printed with them (the machine may be shared: compare builds in one run, interleaved, min of repeats).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import ockstore

REPO = Path(__file__).resolve().parents[1]
LEARN_ROWS = 20_000
TRAIN_ITER = 8


# ------------------------------------------------------------------------------------------------------------- data
def _sift(args):
    """learn (100K), base (1M) and queries (10K) of sift-real as uint8 .npy files in the cache (read once)."""
    cache = Path(args.cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    paths = {role: cache / f"sift_{role}.npy" for role in ("learn", "base", "query")}
    if not all(p.exists() for p in paths.values()):
        from ockstore.datasets import load_texmex

        ds = load_texmex(args.sift)
        for role, p in paths.items():
            np.save(p, np.ascontiguousarray(getattr(ds, role), dtype=np.uint8))
    return {role: np.load(p, mmap_mode="r") for role, p in paths.items()}


def _f32(rows):
    return np.ascontiguousarray(rows, dtype=np.float32)


def _files(args):
    """The models and index files (made by this build when absent)."""
    cache = Path(args.cache_dir)
    sift = _sift(args)
    files = {name: cache / name for name in ("ockm8.ockq", "ockm4.ockq", "ivf.ockq", "flat8_100k.ock",
                                             "fs4_1m.ock", "ivf_1m.ock")}
    learn = _f32(sift["learn"][:LEARN_ROWS])
    models = {
        "ockm8.ockq": lambda: ockstore.OCKM(8, 2, 10, n_iter=TRAIN_ITER),
        "ockm4.ockq": lambda: ockstore.OCKM(8, 2, 10, n_codewords=16, n_iter=TRAIN_ITER),
        "ivf.ockq": lambda: ockstore.IVF(1024, ockstore.OCKM(8, 2, 10, n_iter=TRAIN_ITER), n_iter=TRAIN_ITER),
    }
    for name, make in models.items():
        if not files[name].exists():
            t0 = time.perf_counter()
            ockstore.save_quantizer(files[name], make().fit(learn))
            print(f"trained {name} in {time.perf_counter() - t0:.0f} s", flush=True)
    for name, model, rows in (("flat8_100k.ock", "ockm8.ockq", 100_000), ("fs4_1m.ock", "ockm4.ockq", 1_000_000),
                              ("ivf_1m.ock", "ivf.ockq", 1_000_000)):
        if not files[name].exists():
            t0 = time.perf_counter()
            q = ockstore.load_quantizer(files[model])
            with ockstore.IndexWriter(files[name], q) as w:
                for start in range(0, rows, 100_000):
                    w.add(_f32(sift["base"][start:min(rows, start + 100_000)]))
            print(f"built {name} in {time.perf_counter() - t0:.0f} s", flush=True)
    return files, sift


def _load():
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def _best(fn, repeats, clock=time.perf_counter):
    """Min seconds of `repeats` calls (after one warm-up call)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best


# ------------------------------------------------------------------------------------------------------------ batch
def batch_run(args):
    """This build's batch timings on 2 threads, as JSON on stdout (run by `batch` in each build)."""
    files, sift = _files(args)
    base = _f32(sift["base"][:100_000])
    Q = _f32(sift["query"][:1000])
    q8 = ockstore.load_quantizer(files["ockm8.ockq"])
    flat8 = ockstore.open_index(files["flat8_100k.ock"])
    fs4 = ockstore.open_index(files["fs4_1m.ock"])
    ivf = ockstore.open_index(files["ivf_1m.ock"])
    r = args.repeats
    out = {
        "encode OCKM(8,2,10), 100K rows": _best(lambda: q8.encode(base, n_threads=2), r),
        "flat 8-bit, 100K rows, 1000 queries": _best(lambda: flat8.search(Q, 10, n_threads=2), r),
        "fast scan 4-bit, 1M rows, 1000 queries": _best(lambda: fs4.search(Q, 10, n_threads=2), r),
        "IVF1024 8-bit, 1M rows, n_probe 16, 1000 queries": _best(
            lambda: ivf.search(Q, 10, n_probe=16, n_threads=2), r),
    }
    json.dump({"ockstore": ockstore.__file__, "times": out}, sys.stdout)


def batch(args):
    _files(args)  # made by this build, before any timing
    builds = {"this": sys.executable}
    if args.other:
        builds["other"] = args.other
    times = {}
    for rnd in range(args.rounds):
        order = list(builds) if rnd % 2 == 0 else list(builds)[::-1]
        for name in order:
            cmd = [builds[name], str(Path(__file__).resolve()), "batch-run", "--sift", args.sift, "--cache-dir",
                   args.cache_dir, "--repeats", str(args.repeats)]
            if args.spin_us is not None and name == "this":
                cmd += ["--spin-us", str(args.spin_us)]
            env = {**os.environ, "PYTHONPATH": ""}
            load = _load()
            result = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=tempfile.gettempdir(),
                                               env=env).stdout)
            print(f"round {rnd + 1} {name} ({result['ockstore']}), load {load}: "
                  + ", ".join(f"{v * 1e3:.0f} ms" for v in result["times"].values()), flush=True)
            for case, v in result["times"].items():
                times.setdefault(case, {}).setdefault(name, []).append(v)
    print(f"\nmin over {args.rounds} rounds x {args.repeats} repeats, n_threads=2 (load now {_load()}):")
    print("| case | this build (ms) |" + (" other build (ms) | this / other |" if args.other else ""))
    print("|---|---|" + ("---|---|" if args.other else ""))
    for case, by in times.items():
        row = f"| {case} | {min(by['this']) * 1e3:.1f} |"
        if args.other:
            row += f" {min(by['other']) * 1e3:.1f} | {min(by['this']) / min(by['other']):.3f} |"
        print(row)


# ------------------------------------------------------------------------------------------------------------ small
def small(args):
    """Small searches and adds: per call, one thread against default threads (None: every core) with the small-work
    rule and without it."""
    from ockstore import _kernels

    files, sift = _files(args)
    base = _f32(sift["base"][:100_000])
    Q = _f32(sift["query"][:100])
    q8 = ockstore.load_quantizer(files["ockm8.ockq"])
    q4 = ockstore.load_quantizer(files["ockm4.ockq"])
    ivf = ockstore.open_index(files["ivf_1m.ock"])
    work = Path(tempfile.mkdtemp())
    rng = np.random.default_rng(0)
    X384 = rng.normal(size=(3000, 384)).astype(np.float32)
    exact = ockstore.create_collection(work / "exact", ockstore.OCKM(16, 2, 10, metric="cosine"),
                                       store_vectors="float16", train_size=8000)
    exact.add(X384)
    flat = {n: ockstore.Index.from_vectors(q8, base[:n], n_threads=1) for n in (3000, 20_000, 100_000)}
    fast = {n: ockstore.Index.from_vectors(q4, base[:n], n_threads=1) for n in (20_000, 100_000)}
    cases = [("exact collection 3K x 384, 1 query", lambda t: exact.search(X384[5], 10, n_threads=t))]
    for n, index in flat.items():
        for nq in (1, 4, 16):
            cases.append((f"flat 8-bit {n // 1000}K, {nq} queries",
                          lambda t, index=index, nq=nq: index.search(Q[:nq], 10, n_threads=t)))
    for n, index in fast.items():
        for nq in (1, 16):
            cases.append((f"fast scan 4-bit {n // 1000}K, {nq} queries",
                          lambda t, index=index, nq=nq: index.search(Q[:nq], 10, n_threads=t)))
    for nq in (1, 16, 64):
        cases.append((f"IVF1024 1M n_probe 16, {nq} queries",
                      lambda t, nq=nq: ivf.search(Q[:nq], 10, n_probe=16, n_threads=t)))
    for n in (1, 100, 1000):
        cases.append((f"encode {n} rows OCKM(8,2,10)", lambda t, n=n: q8.encode(base[:n], n_threads=t)))
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    rule = _kernels._set_pool_work_per_thread(0)
    _kernels._set_pool_work_per_thread(rule)
    try:
        print(f"{args.busy} busy process(es), {args.gap_ms} ms between calls; load {_load()}; per call: min / median "
              f"over {args.repeats} calls, interleaved")
        print("| case | 1 thread (ms) | default, rule (ms) | default, no rule (ms) | default / 1 thread |")
        print("|---|---|---|---|---|")
        for name, call in cases:
            t = {"one": [], "rule": [], "none": []}
            for _ in range(args.repeats):
                for kind, threads, per_thread in (("one", 1, rule), ("rule", None, rule), ("none", None, 0)):
                    _kernels._set_pool_work_per_thread(per_thread)
                    if args.gap_ms:
                        time.sleep(args.gap_ms / 1e3)  # calls apart, as an app makes them: the workers sleep
                    t0 = time.perf_counter()
                    call(threads)
                    t[kind].append(time.perf_counter() - t0)
            _kernels._set_pool_work_per_thread(rule)
            f = {k: (min(v) * 1e3, float(np.median(v)) * 1e3) for k, v in t.items()}
            print(f"| {name} | {f['one'][0]:.3f} / {f['one'][1]:.3f} | {f['rule'][0]:.3f} / {f['rule'][1]:.3f} | "
                  f"{f['none'][0]:.3f} / {f['none'][1]:.3f} | {f['rule'][1] / f['one'][1]:.2f} |", flush=True)
    finally:
        _kernels._set_pool_work_per_thread(rule)
        for p in busy:
            p.kill()
            p.wait()
        exact.close()
    print(f"load after: {_load()}")


# ------------------------------------------------------------------------------------------------------------ costs
def costs(args):
    """Each kernel's time at one thread divided by its work estimate (the formulas of the kernels, kernels/*.pxi,
    with the constants of kernels/common.pxi): ~1 ns per unit when the constants fit this machine. Times are the
    CPU time of the calling thread (everything runs on it here), which a machine busy with other work inflates less
    than the wall clock."""
    from ockstore import _kernels
    from ockstore.search.rerank import rerank_stored

    c = _kernels.WORK_COSTS
    files, sift = _files(args)
    base = _f32(sift["base"][:100_000])
    Q = _f32(sift["query"][:200])
    q8 = ockstore.load_quantizer(files["ockm8.ockq"])
    flat8 = ockstore.open_index(files["flat8_100k.ock"])
    fs4 = ockstore.open_index(files["fs4_1m.ock"])
    ivf = ockstore.open_index(files["ivf_1m.ock"])
    stored = ockstore.Index.from_vectors(q8, base, store_vectors="float32", n_threads=1)
    P, D, C, K, M, S, W, T = 128, 128, 2, 256, 8, 16, 16, 10
    tables = c["table_value"] * (P * D + D * C * 256)
    tables16 = c["table_value"] * (P * D + D * C * 16)
    nq, R = len(Q), 100
    candidates = np.random.default_rng(0).integers(0, 100_000, size=(nq, R)).astype(np.int64)
    X = _f32(sift["base"][:3000])
    cpu = time.thread_time
    rows = [
        ("scan: 8-bit ADC, 100K rows", _best(lambda: flat8.search(Q, 10, n_threads=1), args.repeats, cpu),
         nq * (tables + c["scan_byte"] * 100_000 * W)),
        ("fastscan: 4-bit, 1M rows", _best(lambda: fs4.search(Q, 10, n_threads=1), args.repeats, cpu),
         nq * (tables16 + c["fast_scan_word"] * 1_000_000 * W)),
        ("ivf_search: 1024 lists, 1M rows, n_probe 16", _best(lambda: ivf.search(Q, 10, n_probe=16, n_threads=1),
                                                               args.repeats, cpu),
         nq * (c["gemm_value"] * 1024 * P + tables + c["scan_byte"] * 1_000_000 * 16 / 1024 * W)),
        ("rerank: 100 float32 candidates of 100K rows", _best(lambda: rerank_stored(Q, candidates, None, stored._stored_rows(), 10,
                                                                                    n_threads=1), args.repeats, cpu),
         c["exact_value"] * nq * R * P),
        ("encode_beam: OCKM(8,2,10), 2,000 rows", _best(lambda: q8.encode(base[:2000], n_threads=1), args.repeats,
                                                        cpu),
         c["encode_value"] * 2000 * (P * M * S + M * S * C * K + M * C * T * K)),
        ("BLAS product: 3,000 x 128 by 128 x 200 (one BLAS thread)", _best(lambda: X @ Q.T, args.repeats, cpu),
         c["gemm_value"] * 3000 * 128 * 200),
    ]
    print(f"load {_load()}; min of {args.repeats}; ns per estimated unit (1.0: the estimate is right)")
    print("| kernel | ms | estimated units | ns per unit |")
    print("|---|---|---|---|")
    for name, seconds, units in rows:
        print(f"| {name} | {seconds * 1e3:.2f} | {units:.3g} | {seconds * 1e9 / units:.2f} |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["small", "costs", "batch", "batch-run"])
    parser.add_argument("--sift", default=str(REPO.parent / "shared" / "data" / "sift-real"))
    parser.add_argument("--cache-dir", default="/tmp/ockstore-bench-threads")
    parser.add_argument("--repeats", type=int, default=None, help="calls per measurement (default: 3, small: 50)")
    parser.add_argument("--busy", type=int, default=0, help="small: processes spinning meanwhile")
    parser.add_argument("--gap-ms", type=float, default=0, help="small: sleep between calls (the workers sleep)")
    parser.add_argument("--spin-us", type=int, default=None,
                        help="how long the pool's workers spin after a job (default: the pool's own)")
    parser.add_argument("--other", default=None, help="batch: the Python of another build to compare with")
    parser.add_argument("--rounds", type=int, default=3, help="batch: rounds of both builds")
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = 50 if args.mode == "small" else 3
    if args.spin_us is not None:
        from ockstore import _kernels

        print(f"workers spin {args.spin_us} us after a job (default {_kernels._set_pool_spin_us(args.spin_us)})",
              file=sys.stderr)
    if args.mode == "costs":
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1, user_api="blas"):
            costs(args)
    else:
        {"small": small, "batch": batch, "batch-run": batch_run}[args.mode](args)


if __name__ == "__main__":
    main()
