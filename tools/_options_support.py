"""What the sections of tools/bench_options.py share: the machine, the datasets, the trained quantizers (cached), the
faiss peers, the timers, the targets and the markdown output. Benchmark-only (faiss-cpu is imported here, never by the
package); run tools/bench_options.py, not this file."""

from __future__ import annotations

import gc
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import ockstore  # noqa: E402
from _machine import core_count, cpu_model  # noqa: E402
from ockstore.datasets import load_texmex  # noqa: E402
from ockstore.evaluation import exact_knn, recall_at_r  # noqa: E402

QUICK_BASE = 100_000
QUICK_LEARN = 20_000
QUICK_ITER = 5
LATENCY_SIZES = (1_000, 10_000)
LATENCY_ROUND = 200  # calls per round of one method before the next method takes its turn

# ---------------------------------------------------------------------------------------------------------- machine
def machine_info():
    import faiss
    import threadpoolctl

    blas = [f"{p.get('internal_api')} {p.get('version')}" for p in threadpoolctl.threadpool_info()
            if p.get("user_api") == "blas"]
    return {
        "cpu": cpu_model(),
        "cores": core_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "blas": ", ".join(blas) or "?",
        "faiss": faiss.__version__,
        "ockstore": ockstore.__version__,
    }


# ------------------------------------------------------------------------------------------------------------- data
class Data:
    """One dataset as the sections use it: learn, base (the file's dtype), queries, and the L2 ground truth of the
    first ``n_queries`` queries (the file's, or recomputed exactly over a base prefix)."""

    def __init__(self, name, folder, n_queries, base_limit, learn_limit):
        ds = load_texmex(folder)
        t0 = time.perf_counter()
        self.name = name
        self.learn = np.ascontiguousarray(ds.learn[:learn_limit])
        self.query = np.ascontiguousarray(ds.query)
        self.n_queries = min(n_queries, len(self.query))
        if base_limit is None:
            self.base = np.ascontiguousarray(ds.base)
            self.gt = ds.groundtruth[: self.n_queries]
        else:
            chunks, have = [], 0
            for chunk in ds.iter_base(min(base_limit, 100_000)):
                chunks.append(np.asarray(chunk[: base_limit - have]))
                have += len(chunks[-1])
                if have >= base_limit:
                    break
            self.base = np.ascontiguousarray(np.concatenate(chunks))
            self.gt = None  # computed on first use: a base prefix has its own ground truth
        self.dim = self.base.shape[1]
        self._base_f32 = None
        print(f"data: {name}: learn {self.learn.shape} {self.learn.dtype}, base {self.base.shape} {self.base.dtype}, "
              f"queries {self.query.shape} (loaded in {time.perf_counter() - t0:.1f}s)", flush=True)

    @property
    def queries(self):
        """The first n_queries queries, float32 (converted once, so no search times a conversion)."""
        return np.ascontiguousarray(self.query[: self.n_queries], dtype=np.float32)

    def l2_groundtruth(self):
        if self.gt is None:
            t0 = time.perf_counter()
            _, self.gt = exact_knn(self.queries, self.base, 100)
            print(f"  exact L2 ground truth of {self.n_queries} queries over {len(self.base)} base vectors "
                  f"({time.perf_counter() - t0:.1f}s)", flush=True)
        return self.gt

    def base_f32(self):
        if self._base_f32 is None:
            self._base_f32 = np.ascontiguousarray(self.base, dtype=np.float32)
        return self._base_f32


def normalised(X):
    X = np.array(X, dtype=np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X


def exact_topk(Q, B, k, metric, cache_path=None):
    """Exact top k by inner product or cosine similarity in float64 (scores descending, ties by the smaller index):
    (scores (nq, k) float64, ids (nq, k) int64), by blocks of the base and of the queries; cached as .npz."""
    if cache_path is not None and cache_path.exists():
        with np.load(cache_path) as f:
            return f["scores"], f["ids"]
    t0 = time.perf_counter()
    Q = np.asarray(Q, dtype=np.float64)
    if metric == "cosine":
        Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    nq = len(Q)
    best_s = np.full((nq, 0), -np.inf)
    best_i = np.full((nq, 0), -1, dtype=np.int64)
    q_step = 250
    for b0 in range(0, len(B), 100_000):
        b = np.asarray(B[b0 : b0 + 100_000], dtype=np.float64)
        if metric == "cosine":
            b = b / np.linalg.norm(b, axis=1, keepdims=True)
        kk = min(k, len(b))
        new_s, new_i = [], []
        for q0 in range(0, nq, q_step):
            s = Q[q0 : q0 + q_step] @ b.T
            part = np.argpartition(-s, kk - 1, axis=1)[:, :kk]
            new_s.append(np.take_along_axis(s, part, axis=1))
            new_i.append(part + b0)
        cand_s = np.concatenate([best_s, np.concatenate(new_s)], axis=1)
        cand_i = np.concatenate([best_i, np.concatenate(new_i)], axis=1)
        order = np.lexsort((cand_i, -cand_s), axis=-1)[:, :k]
        best_s = np.take_along_axis(cand_s, order, axis=1)
        best_i = np.take_along_axis(cand_i, order, axis=1)
    print(f"  exact {metric} ground truth: {nq} queries x {len(B)} base vectors in float64 "
          f"({time.perf_counter() - t0:.1f}s)", flush=True)
    if cache_path is not None:
        np.savez(cache_path, scores=best_s, ids=best_i)
    return best_s, best_i


def recalls(ids, gt, gt_d=None):
    """recall@1/10/100 (as far as k allows; ties of the ground truth count when gt_d is given) and 10-recall@10."""
    out = {}
    for r in (1, 10, 100):
        if ids.shape[1] >= r:
            out[f"recall@{r}"] = recall_at_r(ids, gt, r, groundtruth_distances=gt_d)
    if ids.shape[1] >= 10:
        out["10-recall@10"] = float((ids[:, :10, None] == gt[:, None, :10]).any(axis=2).sum(axis=1).mean() / 10)
    return out


# ------------------------------------------------------------------------------------------------------- the bench
class Bench:
    """What the sections share: the arguments, the datasets (loaded on first use), the trained quantizers (cached in
    files) and the faiss IndexPQ of each (data, M, metric)."""

    def __init__(self, args, threads):
        self.args, self.threads = args, threads
        self.cache_dir = Path(args.cache_dir)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self._data, self._faiss, self.indexes = {}, {}, {}
        self.training = {}  # quantizer key -> {"train_s", "cached"}
        self.n_iter = QUICK_ITER if args.quick else None

    def data(self, name):
        if name not in self._data:
            a = self.args
            if name == "sift":
                if a.quick:
                    limit = QUICK_BASE
                elif set(a.sections) <= {3}:
                    limit = max(LATENCY_SIZES)  # only the latency section: no need for the 1M base
                else:
                    limit = None
                self._data[name] = Data("sift", a.sift, a.queries, limit, QUICK_LEARN if a.quick else None)
            else:
                self._data[name] = Data("minilm", a.minilm, a.queries, None, QUICK_LEARN if a.quick else None)
        return self._data[name]

    def quantizer(self, name, M, C=2, T=10, metric="l2"):
        """A fitted OCKM, loaded from the cache or trained (on all cores) and saved there."""
        data = self.data(name)
        iters = "default" if self.n_iter is None else f"iter{self.n_iter}"
        key = f"{name}-learn{len(data.learn)}-ockm-M{M}-C{C}-T{T}-{metric}-{iters}-seed0"
        path = self.cache_dir / f"{key}.ockq"
        if path.exists() and not self.args.retrain:
            q = ockstore.load_quantizer(path)
            meta = ockstore.file_info(path)["metadata"]
            self.training[key] = {"train_s": meta.get("train_s"), "cached": True}
            print(f"  quantizer {key}: loaded from {path} (trained in {meta.get('train_s', float('nan')):.1f}s)",
                  flush=True)
            return q
        kwargs = {} if self.n_iter is None else {"n_iter": self.n_iter}
        q = ockstore.OCKM(M, C, T, metric=metric, n_threads=self.threads, **kwargs)
        t0 = time.perf_counter()
        q.fit(data.learn)
        train_s = time.perf_counter() - t0
        ockstore.save_quantizer(path, q, metadata={"train_s": train_s, "key": key})
        self.training[key] = {"train_s": train_s, "cached": False}
        print(f"  quantizer {key}: trained in {train_s:.1f}s ({len(q.objective_history) - 1} iterations), "
              f"saved to {path}", flush=True)
        return q

    def faiss_pq(self, name, M, metric="l2"):
        """A trained, empty faiss IndexPQ(P, M, 8) on the same learn set (normalised for cosine), made once."""
        import faiss

        key = (name, M, metric)
        if key not in self._faiss:
            data = self.data(name)
            fm = faiss.METRIC_L2 if metric == "l2" else faiss.METRIC_INNER_PRODUCT
            index = faiss.IndexPQ(data.dim, M, 8, fm)
            if self.args.quick:
                index.pq.cp.niter = 10
            learn = normalised(data.learn) if metric == "cosine" else np.ascontiguousarray(data.learn, np.float32)
            faiss.omp_set_num_threads(self.threads)
            t0 = time.perf_counter()
            index.train(learn)
            train_s = time.perf_counter() - t0
            faiss.omp_set_num_threads(1)
            print(f"  faiss IndexPQ {name} M={M}x8 {metric}: trained in {train_s:.1f}s", flush=True)
            self._faiss[key] = (index, train_s)
        return self._faiss[key][0]

    def faiss_opq(self, name, M):
        """A trained, empty faiss OPQMatrix(P, M) + IndexPQ(P, M, 8) (IndexPreTransform) on the same learn set: the
        peer that also rotates (as OCKM does) at the same code bytes; trained once and cached (faiss.write_index)."""
        import faiss

        data = self.data(name)
        path = self.cache_dir / f"faiss-opq-{name}-learn{len(data.learn)}-M{M}{'-quick' if self.args.quick else ''}.index"
        if path.exists() and not self.args.retrain:
            index = faiss.read_index(str(path))
            print(f"  faiss OPQ {name} M={M}x8: loaded from {path}", flush=True)
        else:
            index = faiss.IndexPreTransform(faiss.OPQMatrix(data.dim, M), faiss.IndexPQ(data.dim, M, 8))
            if self.args.quick:
                faiss.downcast_VectorTransform(index.chain.at(0)).niter = 5
            faiss.omp_set_num_threads(self.threads)
            t0 = time.perf_counter()
            index.train(np.ascontiguousarray(data.learn, dtype=np.float32))
            faiss.omp_set_num_threads(1)
            print(f"  faiss OPQ {name} M={M}x8: trained in {time.perf_counter() - t0:.1f}s, saved to {path}",
                  flush=True)
            faiss.write_index(index, str(path))
        index.reset()
        return index

    def faiss_copy(self, name, M, metric="l2"):
        """A new empty IndexPQ holding the trained codebooks of faiss_pq(name, M, metric)."""
        import faiss

        trained = self.faiss_pq(name, M, metric)
        index = faiss.IndexPQ(trained.d, M, 8, trained.metric_type)
        index.pq = trained.pq
        index.is_trained = True
        return index


def faiss_ivf_like(pq_index):
    """An IndexIVFPQ with one list and no residual holding pq_index's codebooks: it scans like IndexPQ (the same
    results) but takes a selector (IndexPQ refuses one). Empty; add to it."""
    import faiss

    d = pq_index.d
    coarse = faiss.IndexFlat(d, pq_index.metric_type)
    coarse.add(np.zeros((1, d), dtype=np.float32))
    ivf = faiss.IndexIVFPQ(coarse, d, 1, pq_index.pq.M, 8, pq_index.metric_type)
    ivf.by_residual = False
    ivf.pq = pq_index.pq
    ivf.is_trained = True
    ivf.nprobe = 1  # faiss's Python wrapper keeps the coarse quantizer alive with the index
    return ivf


_SELECTOR_BITS = []


def faiss_selectors(mask):
    """(IDSelectorBitmap, IDSelectorBatch) of a boolean mask over 0..N-1. The bitmap points into a module-level list
    of arrays (the selector does not own its bits), so it stays valid for the whole run."""
    import faiss

    bits = np.packbits(mask, bitorder="little")
    _SELECTOR_BITS.append(bits)
    bitmap = faiss.IDSelectorBitmap(len(mask), faiss.swig_ptr(bits))
    batch = faiss.IDSelectorBatch(np.flatnonzero(mask).astype(np.int64))
    return bitmap, batch


def add_in_chunks(index, X, normalise=False):
    for i in range(0, len(X), 100_000):
        chunk = np.ascontiguousarray(X[i : i + 100_000], dtype=np.float32)
        index.add(normalised(chunk) if normalise else chunk)


def time_batches(fns, repeats):
    """Run each callable once (warm-up; its result is kept), then ``repeats`` rounds of all of them in turn.
    Returns {name: {"min_s", "median_s", "result"}}."""
    from threadpoolctl import threadpool_limits

    out = {}
    with threadpool_limits(limits=1):
        for name, f in fns.items():
            out[name] = {"result": f(), "times": []}
        for _ in range(repeats):
            for name, f in fns.items():
                t0 = time.perf_counter()
                f()
                out[name]["times"].append(time.perf_counter() - t0)
    for v in out.values():
        v["min_s"], v["median_s"] = min(v["times"]), statistics.median(v["times"])
    return out


def time_calls(fns, queries, calls, warmup):
    """Per-call latency of single queries: each callable f(i) searches query i; rounds of LATENCY_ROUND calls of
    each in turn until ``calls`` were timed per callable. Returns {name: {"median_us", "p90_us", "min_us"}}."""
    from threadpoolctl import threadpool_limits

    ns = {name: np.empty(calls, dtype=np.int64) for name in fns}
    nq = len(queries)
    clock = time.perf_counter_ns
    with threadpool_limits(limits=1):
        for f in fns.values():
            for i in range(warmup):
                f(i % nq)
        gc.collect()
        gc.disable()
        try:
            for start in range(0, calls, LATENCY_ROUND):
                stop = min(calls, start + LATENCY_ROUND)
                for name, f in fns.items():
                    t = ns[name]
                    for i in range(start, stop):
                        t0 = clock()
                        f(i % nq)
                        t[i] = clock() - t0
        finally:
            gc.enable()
    return {name: {"median_us": float(np.median(t)) / 1e3, "p90_us": float(np.percentile(t, 90)) / 1e3,
                   "min_us": float(t.min()) / 1e3} for name, t in ns.items()}


def target_row(targets, name, value, limit, higher_is_better=False, note="", strict=False):
    if higher_is_better:
        met, op = (value > limit, ">") if strict else (value >= limit, ">=")
    else:
        met, op = (value < limit, "<") if strict else (value <= limit, "<=")
    targets.append({"target": name, "value": value, "limit": limit, "op": op, "met": bool(met), "note": note})
    print(f"  target {name}: {value:.3f} {op} {limit} {'met' if met else 'MISSED'}{'  (' + note + ')' if note else ''}",
          flush=True)


# ---------------------------------------------------------------------------------------------------------- output
def fmt(v):
    if isinstance(v, bool) or v is None:
        return "" if v is None else str(v)
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


def table(rows, cols):
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(c)) for c in cols) + " |")
    return lines


def print_rows(rows, cols):
    print("\n".join(table(rows, cols)), flush=True)
