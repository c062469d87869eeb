"""What machine a benchmark ran on (shared by the tools; never imported by the package)."""

import os
import platform


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def core_count() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def load_average():
    """The 1, 5 and 15 minute load averages (NaN where the system does not say)."""
    try:
        return os.getloadavg()
    except OSError:  # pragma: no cover
        return (float("nan"),) * 3


def machine_info():
    """CPU, cores and the versions of what a benchmark against faiss-cpu runs (faiss imported here, on demand)."""
    import faiss
    import numpy as np

    import ockstore

    return {"cpu": cpu_model(), "cores": core_count(), "python": platform.python_version(), "numpy": np.__version__,
            "faiss": faiss.__version__, "ockstore": ockstore.__version__, "platform": platform.platform()}


def machine_line(machine, load):
    """The first line a benchmark against faiss-cpu prints: the machine, the versions and the load it starts under."""
    return (f"machine: {machine['cpu']}, {machine['cores']} cores; numpy {machine['numpy']}, faiss {machine['faiss']}; "
            f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def texmex_prefix(folder, n_queries, base_limit, learn_limit, k):
    """(dataset, learn float32, base in its stored dtype, queries float32, ground truth (n_queries, >= k)) of a
    texmex folder: the whole base with its ground truth file, or its first ``base_limit`` rows with the exact k
    nearest neighbours of that prefix."""
    import numpy as np

    from ockstore.datasets import load_texmex
    from ockstore.evaluation import exact_knn

    ds = load_texmex(folder)
    learn = np.ascontiguousarray(ds.learn[:learn_limit], dtype=np.float32)
    query = np.ascontiguousarray(ds.query[:n_queries], dtype=np.float32)
    if base_limit is None:
        return ds, learn, np.ascontiguousarray(ds.base), query, np.asarray(ds.groundtruth[:n_queries])
    parts, have = [], 0
    for chunk in ds.iter_base(min(base_limit, 100_000)):
        parts.append(np.asarray(chunk[: base_limit - have]))
        have += len(parts[-1])
        if have >= base_limit:
            break
    base = np.ascontiguousarray(np.concatenate(parts))
    _, gt = exact_knn(query, base.astype(np.float32), k)
    return ds, learn, base, query, gt


def bench_start(args, k, prefix):
    """What the benchmarks against faiss on texmex data (bench_fastscan, bench_ivf) start with: the machine, printed
    with the load it starts under; the threads for training (``args.threads``, else every core); the data of
    ``args.data`` (the first ``args.queries`` queries with k true neighbours; with ``args.quick`` a base of 200K rows
    and 25K learn rows); the work folder (``args.workdir``, else a new temporary one).

    Returns (machine, threads, load_start, learn, base in its stored dtype, queries, ground truth, workdir Path)."""
    import tempfile
    from pathlib import Path

    base_limit, learn_limit = (200_000, 25_000) if args.quick else (None, None)
    machine = machine_info()
    threads = machine["cores"] if args.threads is None else args.threads
    load_start = load_average()
    print(machine_line(machine, load_start), flush=True)
    _, learn, base, query, gt = texmex_prefix(args.data, args.queries, base_limit, learn_limit, k)
    print(f"data: learn {learn.shape}, base {base.shape}, queries {query.shape}", flush=True)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix=prefix))
    workdir.mkdir(parents=True, exist_ok=True)
    return machine, threads, load_start, learn, base, query, gt, workdir


def bench_finish(report, args, markdown):
    """What bench_fastscan and bench_ivf end with: each criterion printed PASS / FAIL, then the report written as JSON
    (``args.json``) and as markdown (``args.out``, by ``markdown(report)``) when asked for."""
    import json

    for line in report["criteria"]:
        print(("PASS " if line["pass"] else "FAIL ") + line["what"], flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(markdown(report))
        print(f"wrote {args.out}")
