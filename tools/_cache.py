"""What the collection and distributed benchmarks share (tools only; never imported by the package): their data,
cache and work-folder options, and the OCKM(4, 2, 10) quantizer, trained once and cached."""

import time
from pathlib import Path

import ockstore


def add_common_arguments(parser, repo):
    """--sift (default: shared/data/sift-real beside the repository ``repo``), --cache-dir, --work, --queries,
    --repeats: the options both benchmarks take."""
    parser.add_argument("--sift", default=str(Path(repo).parent / "shared" / "data" / "sift-real"))
    parser.add_argument("--cache-dir", default="/tmp/ockstore-bench-cache")
    parser.add_argument("--work", default=None, help="folder for the files made (default: a temporary folder)")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)


def cached_sift_ockm(cache_dir, learn_size, load_learn):
    """OCKM(4, 2, 10) with the library's defaults, trained on ``load_learn()`` (``learn_size`` sift learn rows) and
    saved in ``cache_dir`` under a key naming the data and the parameters; a later call with the same key loads it."""
    key = f"sift-learn{learn_size}-ockm-M4-C2-T10-l2-default-seed0"
    path = Path(cache_dir) / f"{key}.ockq"
    if path.exists():
        print(f"quantizer: loaded {path}", flush=True)
        return ockstore.load_quantizer(path)
    learn = load_learn()
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    q = ockstore.OCKM(4, 2, 10).fit(learn)
    ockstore.save_quantizer(path, q, metadata={"train_s": time.perf_counter() - t0, "key": key})
    print(f"quantizer: trained in {time.perf_counter() - t0:.1f} s, saved to {path}", flush=True)
    return q
