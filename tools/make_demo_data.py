"""Cut the small real demo dataset in demo/data/ from the sift-real dataset.

    python tools/make_demo_data.py [--source DIR] [--out DIR]

(ockstore must be importable: installed, or ``PYTHONPATH=.`` from the repository root.)

Takes the first 10,000 rows of sift_learn, the first 20,000 of sift_base and the first 200 of sift_query, computes
their exact top-100 ground truth over those 20,000 base vectors (ockstore.evaluation.exact_knn, checked again with
int64 arithmetic), and writes demo_{learn,base,query}.bvecs.gz, demo_groundtruth.ivecs.gz (gzip level 9, mtime 0:
the same input always gives the same bytes) and a README.md with provenance and sha256 sums.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path

import numpy as np

from ockstore.datasets import iter_vecs, write_vecs
from ockstore.evaluation import exact_knn

REPO = Path(__file__).resolve().parents[1]
N_LEARN, N_BASE, N_QUERY, K = 10_000, 20_000, 200, 100
MAX_TOTAL_BYTES = 5 * 1000 * 1000
SOURCE_FILES = {
    "learn": "sift_learn.bvecs.gz",
    "base": "sift_base.bvecs.gz",
    "query": "sift_query.bvecs.gz",
}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def first_rows(path, n):
    """The first ``n`` rows of a vector file, reading no further than needed."""
    rows, = iter_vecs(path, chunk_size=n, stop=n)
    if rows.shape[0] != n:
        raise SystemExit(f"{path}: has only {rows.shape[0]} rows, {n} needed")
    return rows


def check_groundtruth(base, query, ids):
    """Recompute the top-K with int64 arithmetic (exact for uint8 data) and ties by smaller index."""
    b = base.astype(np.int64)
    q = query.astype(np.int64)
    d = (q * q).sum(1)[:, None] - 2 * (q @ b.T) + (b * b).sum(1)[None, :]
    for i in range(len(q)):
        order = np.lexsort((np.arange(len(b)), d[i]))[:K]
        if not np.array_equal(order, ids[i]):
            raise SystemExit(f"ground truth check failed for query {i}")


README = """\
# demo data: a small real sample of sift-real

128-d SIFT descriptors (uint8) of real photographs, cut from the project's `sift-real` dataset (shared data,
`sift-real/README.md` there describes the images, the extraction and the licences of the source photographs; the
same licence notes apply to this sample). Small enough to ship with the repository and to run the demos and tests in
seconds.

| file | vectors | dim | type | taken from | bytes | sha256 |
|---|---:|---:|---|---|---:|---|
{rows}

- learn = rows 0..{l1} of `sift_learn.bvecs.gz`, base = rows 0..{b1} of `sift_base.bvecs.gz`, query = rows
  0..{q1} of `sift_query.bvecs.gz` (0-based, in file order).
- ground truth = exact squared-L2 top-{k} of each query over these {nb} base vectors (0-based indices into
  demo_base, nearest first, ties broken by the smaller index), computed with `ockstore.evaluation.exact_knn` in
  float64 (exact for uint8 data) and checked again with int64 arithmetic. It is **not** a slice of
  `sift_groundtruth.ivecs.gz`, which indexes the full 1M base.
- texmex format (int32 dimension, then the components), gzip level 9 with mtime 0 and no file name, so rerunning
  the command gives the same bytes. Total {total} bytes.

Source files read (their sha256, to compare with the sift-real README):

| file | sha256 |
|---|---|
{sources}

Made with (from the repository root, ockstore importable):

```
python tools/make_demo_data.py --source ../shared/data/sift-real --out demo/data
```

Load with `ockstore.datasets.load_texmex("demo/data")`.
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--source",
        type=Path,
        default=REPO.parent / "shared" / "data" / "sift-real",
        help="folder of the sift-real dataset (default: %(default)s)",
    )
    parser.add_argument("--out", type=Path, default=REPO / "demo" / "data", help="output folder (default: %(default)s)")
    args = parser.parse_args(argv)
    if not args.source.is_dir():
        parser.error(f"--source: no such folder: {args.source}")
    args.out.mkdir(parents=True, exist_ok=True)

    learn = first_rows(args.source / SOURCE_FILES["learn"], N_LEARN)
    base = first_rows(args.source / SOURCE_FILES["base"], N_BASE)
    query = first_rows(args.source / SOURCE_FILES["query"], N_QUERY)
    _, gt = exact_knn(query, base, K)
    check_groundtruth(base, query, gt)

    outputs = [
        ("demo_learn.bvecs.gz", learn, "uint8", f"sift_learn rows 0..{N_LEARN - 1}"),
        ("demo_base.bvecs.gz", base, "uint8", f"sift_base rows 0..{N_BASE - 1}"),
        ("demo_query.bvecs.gz", query, "uint8", f"sift_query rows 0..{N_QUERY - 1}"),
        ("demo_groundtruth.ivecs.gz", gt.astype(np.int32), "int32", f"exact top-{K} over demo_base"),
    ]
    rows, total = [], 0
    for name, arr, kind, origin in outputs:
        path = args.out / name
        write_vecs(path, arr, compresslevel=9)
        size = os.path.getsize(path)
        total += size
        rows.append(f"| {name} | {arr.shape[0]} | {arr.shape[1]} | {kind} | {origin} | {size} | `{sha256(path)}` |")
        print(f"{name}: {arr.shape} {size} bytes", file=sys.stderr)
    if total > MAX_TOTAL_BYTES:
        raise SystemExit(f"demo data is {total} bytes, above the {MAX_TOTAL_BYTES} budget")
    sources = "\n".join(f"| {f} | `{sha256(args.source / f)}` |" for f in SOURCE_FILES.values())
    text = README.format(
        rows="\n".join(rows),
        l1=N_LEARN - 1,
        b1=N_BASE - 1,
        q1=N_QUERY - 1,
        k=K,
        nb=N_BASE,
        total=total,
        sources=sources,
    )
    (args.out / "README.md").write_text(text)
    print(f"total {total} bytes in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
