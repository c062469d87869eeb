"""ockstore in one minute: train OCKM on a real SIFT sample, write an index file, reopen it, search it.

Data: demo/data (10,000 learn, 20,000 base and 200 query SIFT descriptors from the project's sift-real set, with the
exact top-100 neighbours of each query; see demo/data/README.md). Run it with ``make demo``, or from the repository
root with ockstore importable::

    python demo/demo.py            # writes out/demo_ockm.ock and out/demo_pq.ock
    python demo/demo.py --no-pq    # OCKM only

What it does: trains 64-bit OCKM codes (M=4 subspaces x C=2 codebooks of 256 words, beam T=10) on the learn set,
streams the base through ``ockstore.IndexWriter`` into one index file, reopens that file with ``ockstore.open_index``
(read-only memory map), searches the 200 queries (ADC, k=100) and prints the training time and distortion, the file
size, recall@1/10/100 and the time per query; then the same for 64-bit PQ (M=8), for contrast.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = HERE / "data"
FILES = ("demo_learn.bvecs.gz", "demo_base.bvecs.gz", "demo_query.bvecs.gz", "demo_groundtruth.ivecs.gz")

# Training iterations: on this sample OCKM's objective falls by 0.5% per iteration after 7 and by 0.1% after 15, so
# 15 keeps nearly all of the gain of the default 30 at half the time (the demo stays quick from a fresh clone).
N_ITER = 15
CHUNK = 5_000  # base vectors per IndexWriter.add: memory stays bounded by the chunk, as for a real base


def fail(message):
    print(f"demo: error: {message}", file=sys.stderr)
    return 1


def _short(path):
    """``path`` relative to the current folder when it is inside it (for commands to copy)."""
    path = Path(path).resolve()
    return path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path


def kb(n):
    return f"{n / 1000:,.1f} KB"


def run_method(name, quantizer, description, ds, out_dir, threads):
    import ockstore
    from ockstore.evaluation import recall_at_r

    print(f"{name} 64-bit: {description}")
    learn = ds.learn
    t0 = time.perf_counter()
    quantizer.fit(learn)
    train_s = time.perf_counter() - t0
    hist = quantizer.objective_history
    print(f"  trained on {learn.shape[0]:,} vectors in {train_s:.1f} s, {len(hist) - 1} iterations: distortion "
          f"{hist[0]:,.0f} -> {hist[-1]:,.0f} (mean squared error on the learn set)")

    path = out_dir / f"demo_{name.lower()}.ock"
    t0 = time.perf_counter()
    with ockstore.IndexWriter(path, quantizer, n_threads=threads, metadata={"made_by": "demo/demo.py"}) as writer:
        for chunk in ds.iter_base(CHUNK):
            writer.add(chunk)
    write_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    index = ockstore.open_index(path)
    open_ms = 1000 * (time.perf_counter() - t0)
    with index:
        info = index.info()
        size = os.path.getsize(path)
        payload = info["N"] * info["bytes_per_vector"]
        norm = " + 1 norm byte" if info["norm_encoding"] == "u8" else ""
        print(f"  index {_short(path)}: {info['N']:,} vectors, "
              f"written in {write_s:.2f} s, reopened in {open_ms:.1f} ms")
        print(f"  on disk: {kb(size)} = {kb(payload)} of codes ({info['bytes_per_vector']} bytes/vector: "
              f"{info['M'] * info['C']} code bytes{norm}) + {kb(size - payload)} of model and header")
        queries = ds.query
        index.search(queries[:5], 100, n_threads=threads)  # warm-up: pages in the codes
        t0 = time.perf_counter()
        _, ids = index.search(queries, 100, n_threads=threads)
        search_s = time.perf_counter() - t0
    gt = ds.groundtruth
    recalls = "  ".join(f"recall@{r} {recall_at_r(ids, gt, r):.3f}" for r in (1, 10, 100))
    print(f"  search (ADC, k=100, {len(queries)} queries): {recalls}   "
          f"{1000 * search_s / len(queries):.2f} ms/query")
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description="ockstore demo: OCKM (and PQ) on the bundled SIFT sample.")
    parser.add_argument("--data", default=str(DATA), help="the demo data folder (default: demo/data)")
    parser.add_argument("--out", default=str(REPO / "out"), help="where the index files go (default: out/)")
    parser.add_argument("--no-pq", action="store_true", help="skip the PQ comparison")
    parser.add_argument("--threads", type=int, default=None, help="threads (default: all cores)")
    args = parser.parse_args(argv)

    data = Path(args.data)
    if not data.is_dir():
        return fail(f"the demo data folder {data} is missing: it ships with the repository (demo/data); "
                    "restore it with `git checkout -- demo/data`")
    missing = [f for f in FILES if not (data / f).is_file()]
    if missing:
        return fail(f"{data} lacks {', '.join(missing)}: restore it with `git checkout -- demo/data`")

    try:
        import ockstore
        from ockstore import datasets
    except ImportError as exc:
        return fail(f"cannot import ockstore ({exc}); run `make demo`, or `pip install -e .` first")

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    ds = datasets.load_texmex(data)
    learn, base, query = ds.learn, ds.base, ds.query  # read once (a few MB)
    print(f"ockstore {ockstore.__version__} demo: {learn.shape[0]:,} learn, {base.shape[0]:,} base and "
          f"{query.shape[0]} query SIFT descriptors ({ds.dim}-d, uint8) from {data}")
    print()
    run_method("OCKM", ockstore.OCKM(4, 2, 10, n_iter=N_ITER, seed=0, n_threads=args.threads),
               "M=4 subspaces x C=2 codebooks of 256 words, beam T=10", ds, out_dir, args.threads)
    if not args.no_pq:
        print()
        run_method("PQ", ockstore.PQ(8, n_iter=N_ITER, seed=0, n_threads=args.threads),
                   "M=8 subspaces of 256 words, for contrast", ds, out_dir, args.threads)
    print()
    shown = _short(out_dir / "demo_ockm.ock")
    data = _short(data)
    script = Path(sys.executable).parent / "ockstore"  # the console script beside this Python (make demo: .venv)
    command = _short(script) if script.is_file() else f"{_short(sys.executable)} -m ockstore"
    print(f"done in {time.perf_counter() - t_start:.1f} s. Try the command line on the file it wrote:")
    print(f"  {command} info {shown}")
    print(f"  {command} eval {shown} {data / FILES[2]} {data / FILES[3]} --base {data / FILES[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
