"""Storage benchmark: building, writing and opening index files, ockstore against faiss-cpu, in one run.

faiss-cpu is a benchmark-only dependency: it is imported here and nowhere in the package.

Measured on the sift-real data (texmex .bvecs.gz; the folder is an argument):

1. **Build, 1M.** The 1M base streamed from the gzip'ed .bvecs with ``ockstore.datasets.iter_vecs(...,
   chunk_size=100_000)`` into ``ockstore.IndexWriter``, in a child process that reports its time and its peak
   resident memory (``resource.getrusage(RUSAGE_SELF).ru_maxrss``, and its resident memory after imports, before
   building). The quantizer (OCKM, M=4, C=2, T=10: 64-bit codes, u8 norm term) is trained once here on the first
   ``--n-learn`` learn vectors (``--n-iter`` iterations: the model's quality does not matter for storage), written
   with ``save_quantizer`` and loaded by the child with ``load_quantizer``.
2. **Build, 10K.** The same with the first 10,000 base vectors.
3. **Open.** For the 10K and the 1M file: ``--repeat`` (20) fresh child processes each import ockstore, then time
   one ``open_index`` and measure the resident memory it adds (``/proc/self/statm`` before and after), then the
   first search (one query, k = 10, all cores) and the memory after it; then, still in that child, the median of
   ``--repeat`` further opens with everything warm. Reported: the median over the children of the first open (a
   fresh process, page cache warm: the files were just written and read), of the memory it adds and of the first
   search; and the median of the warm in-process medians.
4. **faiss.** ``IndexPQ(128, M=8, nbits=8)`` (64-bit codes) trained on the same learn vectors, filled in a child
   the same way (``add`` per 100K chunk, then ``write_index``: time and peak memory), then opened like ours with
   ``read_index`` and with each of ``IO_FLAG_MMAP`` and ``IO_FLAG_MMAP_IFC`` that this faiss has and accepts for the
   file (detected: a flag that raises is reported as unsupported). ``--with-prq`` adds
   ``IndexProductResidualQuantizer`` 4x2x8 (64-bit codes, norm as one byte) trained on at most 20K learn vectors:
   its training and encoding take minutes on two cores, so it is off by default (only IndexPQ is measured).

Targets (from the issue): open of the 1M file <= 5 ms (median of 20) and <= 2 MB of resident memory added, the same
as the 10K file within noise; build peak <= 400 MB resident.

    python tools/bench_storage.py                          # default data folder ../shared/data/sift-real
    python tools/bench_storage.py --data DIR --out storage.md --workdir /tmp/ock --with-prq

The machine is printed first, then a markdown table (also written to ``--out``) with ratios ours / faiss.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _machine import core_count, cpu_model

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CHUNK = 100_000
SMALL_N = 10_000
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


# -------------------------------------------------------------------------------------------------------- helpers
def rss_mb():
    """Resident memory of this process now, from /proc/self/statm (MB = 10**6 bytes)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 1e6


def peak_rss_mb():
    """Peak resident memory of this process since it started (exec'ed): VmHWM of /proc/self/status (MB).

    Not ``getrusage(RUSAGE_SELF).ru_maxrss``: on Linux a child inherits its parent's high-water mark through fork
    and keeps it across exec, so a child started by a parent of 500 MB reports at least 500 MB there. Both are
    reported; VmHWM is the one that measures the child alone.
    """
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / 1e6
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6  # pragma: no cover - not Linux


def ru_maxrss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6


def machine_info():
    model, cores = cpu_model(), core_count()
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / 1e6:.1f} GB"
    except OSError:
        pass
    import faiss
    import numpy as np

    import ockstore

    return {"cpu": model, "cores": cores, "memory": mem, "python": platform.python_version(),
            "numpy": np.__version__, "faiss": faiss.__version__, "ockstore": ockstore.__version__,
            "kernel": platform.release()}


def run_child(*args):
    """Run this script in child mode; returns its JSON result (the last line of its stdout)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    result = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", *map(str, args)],
                            capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"child {args[0]} failed ({result.returncode}): {result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def first_rows(path, n):
    """The first n rows of a vector file (a gzip stream is decompressed that far only)."""
    from ockstore.datasets import iter_vecs

    rows, = iter_vecs(path, chunk_size=n, stop=n)
    return rows


def base_chunks(base, limit):
    """The base, CHUNK rows at a time, stopping after ``limit`` rows (0: all)."""
    from ockstore.datasets import iter_vecs

    chunk_size = CHUNK if not limit else min(CHUNK, limit)
    done = 0
    chunks = iter_vecs(base, chunk_size=chunk_size)
    try:
        for chunk in chunks:
            if limit and done + chunk.shape[0] > limit:
                chunk = chunk[:limit - done]
            yield chunk
            done += chunk.shape[0]
            if limit and done >= limit:
                return
    finally:
        chunks.close()


# ----------------------------------------------------------------------------------------------- child processes
def child_build(qfile, base, out, limit):
    import ockstore

    rss0 = rss_mb()
    start = time.perf_counter()
    q = ockstore.load_quantizer(qfile)
    with ockstore.IndexWriter(out, q) as writer:
        for chunk in base_chunks(base, int(limit)):
            writer.add(chunk)
        t = time.perf_counter()
        writer.close()  # the commit: spilled rows copied into the file, fsync, rename
        write = time.perf_counter() - t
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "write_s": write, "peak_rss_mb": peak_rss_mb(), "ru_maxrss_mb": ru_maxrss_mb(),
            "rss_after_imports_mb": rss0, "n": writer.ntotal, "bytes": os.path.getsize(out)}


def measure_open(open_index, query, repeat):
    """open_ms (a cold open), rss_added_mb, first_search_ms, rss_after_search_mb and warm_open_ms (median of
    ``repeat`` more opens) of ``open_index()``, whose result searches ``query`` for 10 neighbours (and closes, if it
    can; else it is dropped)."""
    import gc

    def close(index):
        getattr(index, "close", lambda: None)()

    gc.collect()
    rss0 = rss_mb()
    t0 = time.perf_counter()
    index = open_index()
    t1 = time.perf_counter()
    rss1 = rss_mb()
    t2 = time.perf_counter()
    index.search(query, 10)
    t3 = time.perf_counter()
    rss2 = rss_mb()
    close(index)
    del index
    warm = []
    for _ in range(int(repeat)):
        s = time.perf_counter()
        close(open_index())
        warm.append(time.perf_counter() - s)
    return {"open_ms": (t1 - t0) * 1e3, "rss_added_mb": rss1 - rss0, "first_search_ms": (t3 - t2) * 1e3,
            "rss_after_search_mb": rss2 - rss0, "warm_open_ms": statistics.median(warm) * 1e3}


def child_open(path, query_file, repeat):
    import numpy as np

    import ockstore

    query = np.load(query_file)
    return measure_open(lambda: ockstore.open_index(path), query, repeat)


def child_faiss_build(trained, base, out, limit):
    import faiss
    import numpy as np

    rss0 = rss_mb()
    start = time.perf_counter()
    index = faiss.read_index(trained)
    for chunk in base_chunks(base, int(limit)):
        index.add(np.ascontiguousarray(chunk, dtype=np.float32))
    added = time.perf_counter() - start
    t = time.perf_counter()
    faiss.write_index(index, out)
    write = time.perf_counter() - t
    return {"seconds": added + write, "write_s": write, "peak_rss_mb": peak_rss_mb(), "ru_maxrss_mb": ru_maxrss_mb(),
            "rss_after_imports_mb": rss0, "n": int(index.ntotal), "bytes": os.path.getsize(out)}


def child_faiss_open(path, query_file, repeat, flag):
    import faiss
    import numpy as np

    query = np.load(query_file).reshape(1, -1).astype(np.float32)
    flags = 0 if flag == "none" else getattr(faiss, flag)
    try:
        return measure_open(lambda: faiss.read_index(path, flags), query, repeat)
    except Exception as exc:  # noqa: BLE001 - reported: this faiss does not support the flag for this index type
        return {"error": " ".join(str(exc).split())[:200]}


CHILDREN = {"build": child_build, "open": child_open, "faiss-build": child_faiss_build,
            "faiss-open": child_faiss_open}


# ---------------------------------------------------------------------------------------------------------- parent
def open_stats(kind, path, query_file, repeat, flag=None):
    """Median over ``repeat`` fresh child processes of each figure of child_open / child_faiss_open."""
    runs = []
    for _ in range(repeat):
        args = ("open", path, query_file, repeat) if kind == "ours" else ("faiss-open", path, query_file, repeat,
                                                                          flag)
        result = run_child(*args)
        if "error" in result:
            return result
        runs.append(result)
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def fmt(value, digits=1):
    if value is None:
        return "-"
    return f"{value:.{digits}f}"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.2f}"


def main(argv=None):
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "--child":
        print(json.dumps(CHILDREN[argv[1]](*argv[2:])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "sift-real"),
                        help="folder with sift_learn.bvecs.gz, sift_base.bvecs.gz, sift_query.bvecs.gz "
                             "(default: ../shared/data/sift-real relative to the repository)")
    parser.add_argument("--out", help="also write the markdown report to this file")
    parser.add_argument("--workdir", help="folder for the files built (default: a temporary folder, removed)")
    parser.add_argument("--n-learn", type=int, default=50_000, help="learn vectors to train on (default 50000)")
    parser.add_argument("--n-iter", type=int, default=8, help="OCKM training iterations (default 8)")
    parser.add_argument("--base-limit", type=int, default=0, help="use only this many base vectors (default: all)")
    parser.add_argument("--repeat", type=int, default=20, help="fresh processes per open measurement (default 20)")
    parser.add_argument("--with-prq", action="store_true", help="also faiss IndexProductResidualQuantizer 4x2x8")
    args = parser.parse_args(argv)

    import faiss
    import numpy as np

    import ockstore

    data = Path(args.data)
    learn_path, base_path, query_path = (data / f"sift_{name}.bvecs.gz" for name in ("learn", "base", "query"))
    for path in (learn_path, base_path, query_path):
        if not path.is_file():
            parser.error(f"missing {path}")
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench_storage_"))
    work.mkdir(parents=True, exist_ok=True)
    lines = []

    def say(text=""):
        print(text, flush=True)
        lines.append(text)

    info = machine_info()
    say("# ockstore storage benchmark")
    say()
    say("Machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    say(f"Command: python tools/bench_storage.py {' '.join(argv)}".rstrip())
    say()
    try:
        t = time.perf_counter()
        learn = first_rows(learn_path, args.n_learn)
        np.save(work / "query.npy", first_rows(query_path, 1)[0].astype(np.float32))
        q = ockstore.OCKM(4, 2, 10, n_iter=args.n_iter, seed=0).fit(learn)
        train_s = time.perf_counter() - t
        qfile = work / "ockm64.ockq"
        ockstore.save_quantizer(qfile, q)
        print(f"trained OCKM 64-bit on {len(learn):,} learn vectors, {args.n_iter} iterations: {train_s:.1f} s",
              flush=True)
        t = time.perf_counter()
        pq = faiss.IndexPQ(learn.shape[1], 8, 8)
        pq.train(np.ascontiguousarray(learn, dtype=np.float32))
        faiss_train_s = time.perf_counter() - t
        faiss.write_index(pq, str(work / "pq_trained.faiss"))
        print(f"trained faiss IndexPQ M=8 on {len(learn):,} learn vectors: {faiss_train_s:.1f} s", flush=True)
        faiss_kinds = [("IndexPQ M=8x8", "pq")]
        if args.with_prq:
            t = time.perf_counter()
            prq = faiss.IndexProductResidualQuantizer(learn.shape[1], 4, 2, 8, faiss.METRIC_L2,
                                                      faiss.AdditiveQuantizer.ST_norm_cqint8)
            prq.train(np.ascontiguousarray(learn[:20_000], dtype=np.float32))
            print(f"trained faiss PRQ 4x2x8 on {min(len(learn), 20_000):,} vectors: {time.perf_counter() - t:.1f} s",
                  flush=True)
            faiss.write_index(prq, str(work / "prq_trained.faiss"))
            faiss_kinds.append(("PRQ 4x2x8", "prq"))
        del learn

        sizes = [("10K", SMALL_N), ("1M", args.base_limit)]
        builds, opens = {}, {}
        for label, limit in sizes:
            out = work / f"base_{label}.ock"
            builds[("ours", label)] = run_child("build", qfile, base_path, out, limit)
            print(f"built {out.name}: {json.dumps(builds[('ours', label)])}", flush=True)
            for name, key in faiss_kinds:
                fout = work / f"base_{label}.{key}.faiss"
                builds[(key, label)] = run_child("faiss-build", work / f"{key}_trained.faiss", base_path, fout, limit)
                print(f"built {fout.name}: {json.dumps(builds[(key, label)])}", flush=True)
        for label, _limit in sizes:
            opens[("ours", label)] = open_stats("ours", work / f"base_{label}.ock", work / "query.npy", args.repeat)
            print(f"open {label} ours: {json.dumps(opens[('ours', label)])}", flush=True)
            for name, key in faiss_kinds:
                for flag in ("none", "IO_FLAG_MMAP", "IO_FLAG_MMAP_IFC"):
                    if flag != "none" and not hasattr(faiss, flag):
                        opens[(key, label, flag)] = {"error": "this faiss has no such flag"}
                        continue
                    opens[(key, label, flag)] = open_stats("faiss", work / f"base_{label}.{key}.faiss",
                                                           work / "query.npy", args.repeat, flag)
                    print(f"open {label} {key} {flag}: {json.dumps(opens[(key, label, flag)])}", flush=True)

        say("## Build (child process, chunks of 100K; time includes reading the gzip'ed .bvecs)")
        say()
        say("Peak RSS is the child's VmHWM; ru_maxrss also counts the parent's peak, inherited through fork "
            f"(this parent: {peak_rss_mb():.0f} MB).")
        say()
        say("| file | N | bytes | time (s) | write (s) | peak RSS (MB) | ru_maxrss (MB) | RSS after imports (MB) |")
        say("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for label, _ in sizes:
            for name, key in [("ockstore OCKM 64-bit (.ock)", "ours")] + [(f"faiss {n} (write_index)", k)
                                                                         for n, k in faiss_kinds]:
                b = builds[(key, label)]
                say(f"| {name}, {label} | {b['n']:,} | {b['bytes']:,} | {fmt(b['seconds'])} | "
                    f"{fmt(b.get('write_s'), 3)} | {fmt(b['peak_rss_mb'])} | {fmt(b['ru_maxrss_mb'])} | "
                    f"{fmt(b['rss_after_imports_mb'])} |")
        say()
        say(f"Open: median over {args.repeat} fresh processes (page cache warm) of the first open, the resident "
            "memory it adds (statm) and the first search (1 query, k=10); warm = median of "
            f"{args.repeat} more opens in the same process.")
        say()
        say("| file | open (ms) | RSS added (MB) | first search (ms) | RSS after search (MB) | warm open (ms) |")
        say("| --- | ---: | ---: | ---: | ---: | ---: |")
        for label, _ in sizes:
            rows = [(f"ockstore open_index, {label}", opens[("ours", label)])]
            for name, key in faiss_kinds:
                for flag in ("none", "IO_FLAG_MMAP", "IO_FLAG_MMAP_IFC"):
                    flag_name = "read_index" if flag == "none" else f"read_index({flag})"
                    rows.append((f"faiss {name} {flag_name}, {label}", opens[(key, label, flag)]))
            for name, o in rows:
                if "error" in o:
                    say(f"| {name} | unsupported: {o['error']} | | | | |")
                    continue
                say(f"| {name} | {fmt(o['open_ms'], 2)} | {fmt(o['rss_added_mb'], 2)} | "
                    f"{fmt(o['first_search_ms'], 2)} | {fmt(o['rss_after_search_mb'], 2)} | "
                    f"{fmt(o['warm_open_ms'], 3)} |")
        say()
        say("## Ratios (ockstore / faiss IndexPQ; < 1 means ockstore is smaller or faster)")
        say()
        say("| figure | 10K | 1M |")
        say("| --- | ---: | ---: |")
        for figure, key in (("open time vs read_index", "open_ms"), ("RSS added vs read_index", "rss_added_mb"),
                            ("warm open vs read_index", "warm_open_ms")):
            cells = [ratio(opens[("ours", label)].get(key), opens[("pq", label, "none")].get(key))
                     for label, _ in sizes]
            say(f"| {figure} | {' | '.join(cells)} |")
        for flag in ("IO_FLAG_MMAP", "IO_FLAG_MMAP_IFC"):
            if all("error" not in opens[("pq", label, flag)] for label, _ in sizes):
                cells = [ratio(opens[("ours", label)]["open_ms"], opens[("pq", label, flag)]["open_ms"])
                         for label, _ in sizes]
                say(f"| open time vs read_index({flag}) | {' | '.join(cells)} |")
                cells = [ratio(opens[("ours", label)]["rss_added_mb"], opens[("pq", label, flag)]["rss_added_mb"])
                         for label, _ in sizes]
                say(f"| RSS added vs read_index({flag}) | {' | '.join(cells)} |")
        cells = [ratio(builds[("ours", label)]["peak_rss_mb"], builds[("pq", label)]["peak_rss_mb"])
                 for label, _ in sizes]
        say(f"| build peak RSS | {' | '.join(cells)} |")
        say()
        big, small = opens[("ours", "1M")], opens[("ours", "10K")]
        say("## Targets")
        say()
        say(f"- open of the 1M file <= 5 ms: {fmt(big['open_ms'], 2)} ms "
            f"({'met' if big['open_ms'] <= 5 else 'NOT met'}); 10K file: {fmt(small['open_ms'], 2)} ms")
        say(f"- RSS added by open <= 2 MB: 1M {fmt(big['rss_added_mb'], 2)} MB, 10K {fmt(small['rss_added_mb'], 2)} MB "
            f"({'met' if max(big['rss_added_mb'], small['rss_added_mb']) <= 2 else 'NOT met'})")
        peak = builds[("ours", "1M")]["peak_rss_mb"]
        say(f"- build peak <= 400 MB RSS: {fmt(peak)} MB ({'met' if peak <= 400 else 'NOT met'})")
        say(f"- training (not part of the targets): ours {train_s:.1f} s, faiss IndexPQ {faiss_train_s:.1f} s")
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
