"""Search options benchmark: exact re-ranking, filters, single-query latency and the ip/cosine metrics, ockstore
against faiss-cpu, in one run on the same data.

faiss-cpu is a benchmark-only dependency: it is imported here and nowhere in the package.

Sections (``--sections``, default all four); every search is timed on one thread (``n_threads=1`` for ours,
``faiss.omp_set_num_threads(1)``, BLAS limited to one thread), ours and faiss interleaved, repeated:

1. **Re-ranking.** sift-real, OCKM M=4 C=2 T=10 (64-bit codes, u8 norm term), ``store_vectors="uint8"``, a batch of
   ``--queries`` (1,000) queries: plain ADC at k = 100, 10, 1 against ``rerank=100`` at k = 10 and k = 1:
   recall@1/10/100, 10-recall@10, ms per query. Beside it faiss ``IndexPQ(128, 8, 8)`` (8 bytes, the same learn set) and
   ``IndexRefineFlat`` over it with ``k_factor = 100 / k`` (also 100 candidates re-ranked, from float32 vectors).
   Targets: recall@1 with rerank >= 0.95; time rerank / plain <= 1.3 (plain at k = 100: the same scan; the ratio to
   plain at the same k is printed too).
2. **Filters.** The same 1M index, k = 10: unfiltered against ``allow=`` a seeded random 1% and 10% of the ids, given
   as an int64 id array (converted to a row mask in every call) and as a boolean mask. faiss: ``IndexIVFPQ`` with one
   list and ``by_residual=False`` holding the codebooks of section 1's IndexPQ (faiss's IndexPQ takes no selector;
   this index gives the same results, checked) with ``IDSelectorBitmap`` and ``IDSelectorBatch``. Correctness on
   ``--check-queries`` queries: every result allowed, id array and mask give the same results, and both equal a
   search of an index built from the allowed vectors only (the exact top k of the allowed rows). Targets: time
   filtered / unfiltered <= 0.3 (1%) and <= 0.5 (10%).
3. **Single-query latency.** One 1-D query per call, k = 10, indexes of the first 1,000 and 10,000 base vectors:
   P = 128 (sift, OCKM 64-bit) and P = 384 (minilm, OCKM M=16 C=2: 256-bit codes); the median (and 90th percentile)
   over ``--calls`` (2,000) calls of ``time.perf_counter_ns`` around each call, after a warm-up, ours and faiss
   alternating in rounds of 200 calls. faiss: IndexPQ at the same code bytes (P=128: 8x8, P=384: 32x8), and an
   IVFPQ(nlist=1) as in section 2, unfiltered (the same scan by another code path, cheaper per call). Also each
   option on: ``rerank=100`` (``store_vectors="float32"``; faiss IndexRefineFlat k_factor 10), ``allow`` 10% of the
   ids (ours: id array and mask, converted in each call; faiss: IVFPQ(nlist=1) with a selector made once), metric
   cosine (ours: a cosine-trained OCKM, the raw query, normalised by search; faiss: IndexPQ inner product on
   normalised vectors, the query normalised before timing). faiss OPQMatrix + IndexPQ (IndexPreTransform, trained
   on the same learn set, cached) is the peer that also rotates. An index of one vector gives the fixed cost of a
   call (validation, tables, heap) of ours, IndexPQ and OPQ; ``model_bytes`` is what a query's tables read (rotation
   and codebooks, float32). Targets: plain search < 40 us (P=128), < 80 us (P=384), and at most faiss IndexPQ.
4. **Metric recall.** minilm-real with metric "cosine" at 64 and 128 bits (OCKM M=4 and M=8, C=2), sift-real with
   metric "ip" at 64 bits: recall@1/10/100 (the paper's definition: the true nearest neighbour among the first R;
   exact ties count) and 10-recall@10 (|top 10 ∩ true top 10| / 10) against the exact cosine / inner-product ground
   truth computed here in float64 by brute force (cached). faiss IndexPQ with METRIC_INNER_PRODUCT at the same code
   bytes (on normalised vectors for cosine). Targets: each recall@1/10/100 of ours strictly above faiss's.

Quantizers are trained with the library's defaults (OCKM: 25 iterations, tol 1e-4, seed 0) on the whole learn set
and cached with ``save_quantizer`` in ``--cache-dir`` (keyed by data, learn size, M, C, T, metric and iterations; the
training time is kept in the file's metadata), so a second run loads them. ``--quick`` is a smoke test: the first
100K base vectors (ground truth recomputed exactly), 200 queries, 5 training iterations on 20K learn vectors, 500
calls per latency; about half a minute.

The machine (CPU model, cores) is printed first, then one markdown table per section and the targets. Typical use,
from the repository root:

    python tools/bench_options.py --json options.json          # full: ~10 min on 2 cores, +6 min of training
    python tools/bench_options.py --quick --sections 1 3       # smoke test
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import ockstore  # noqa: E402
from _machine import core_count, cpu_model  # noqa: E402
from ockstore import Index  # noqa: E402
from ockstore.datasets import load_texmex  # noqa: E402
from ockstore.evaluation import exact_knn, recall_at_r  # noqa: E402

SEED = 20240611  # the seed of the random filters
RERANK = 100
QUICK_BASE = 100_000
QUICK_LEARN = 20_000
QUICK_ITER = 5
LATENCY_SIZES = (1_000, 10_000)
LATENCY_FIXED_N = 1  # an index of one vector: the fixed cost of a call (validation, tables, heap), without the scan
LATENCY_ROUND = 200  # calls per round of one method before the next method takes its turn
TARGETS = {
    "rerank recall@1": 0.95,
    "rerank / plain time": 1.3,
    "filter 1% / unfiltered time": 0.3,
    "filter 10% / unfiltered time": 0.5,
    "latency P=128 us": 40.0,
    "latency P=384 us": 80.0,
}


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


# -------------------------------------------------------------------------------------------------------- section 1
def sift_index(bench, store):
    """The 64-bit OCKM index of the whole sift base (store_vectors=store), built once per store."""
    key = ("sift", store)
    if key not in bench.indexes:
        data = bench.data("sift")
        q = bench.quantizer("sift", 4)
        t0 = time.perf_counter()
        bench.indexes[key] = Index.from_vectors(q, data.base, store_vectors=store, n_threads=bench.threads)
        print(f"  ours: index of {len(data.base)} vectors (store_vectors={store}) built in "
              f"{time.perf_counter() - t0:.1f}s, {bench.indexes[key].bytes_per_vector} B/vector of codes", flush=True)
    return bench.indexes[key]


def section_rerank(bench, targets):
    import faiss

    print("\n1. exact re-ranking (sift, OCKM 64-bit, store_vectors uint8)", flush=True)
    data = bench.data("sift")
    index = sift_index(bench, "uint8")
    Q, gt = data.queries, data.l2_groundtruth()
    pq = bench.faiss_copy("sift", 8)
    refine = faiss.IndexRefineFlat(pq)
    t0 = time.perf_counter()
    faiss.omp_set_num_threads(bench.threads)
    add_in_chunks(refine, data.base)
    faiss.omp_set_num_threads(1)
    print(f"  faiss: IndexRefineFlat(IndexPQ 8x8) filled in {time.perf_counter() - t0:.1f}s", flush=True)

    def refined(k):
        def run():
            refine.k_factor = RERANK / k
            return refine.search(Q, k)
        return run

    fns = {
        "ours plain k=100": lambda: index.search(Q, 100, n_threads=1),
        "faiss PQ k=100": lambda: pq.search(Q, 100),
        "ours plain k=10": lambda: index.search(Q, 10, n_threads=1),
        "faiss PQ k=10": lambda: pq.search(Q, 10),
        "ours plain k=1": lambda: index.search(Q, 1, n_threads=1),
        "faiss PQ k=1": lambda: pq.search(Q, 1),
        f"ours rerank={RERANK} k=10": lambda: index.search(Q, 10, rerank=RERANK, n_threads=1),
        f"faiss refine k_factor={RERANK // 10} k=10": refined(10),
        f"ours rerank={RERANK} k=1": lambda: index.search(Q, 1, rerank=RERANK, n_threads=1),
        f"faiss refine k_factor={RERANK} k=1": refined(1),
    }
    timed = time_batches(fns, bench.args.repeats)
    nq = len(Q)
    rows = []
    for name, t in timed.items():
        ids = t["result"][1]
        row = {"method": name, "library": name.split()[0], "k": ids.shape[1],
               "bytes_per_vector": index.bytes_per_vector if name.startswith("ours") else int(pq.sa_code_size()),
               # what re-ranking reads besides the codes: ours the stored uint8 vectors, faiss its IndexFlat
               "vector_bytes": (data.dim if "rerank" in name else 4 * data.dim if "refine" in name else 0),
               "ms_per_query": 1e3 * t["min_s"] / nq, "ms_per_query_median": 1e3 * t["median_s"] / nq}
        row.update(recalls(ids, gt))
        rows.append(row)
    by = {r["method"]: r for r in rows}
    ratios = []
    for k in (10, 1):
        ours = by[f"ours rerank={RERANK} k={k}"]
        theirs = by[f"faiss refine k_factor={RERANK // k} k={k}"]
        ratios.append({
            "k": k,
            "ours rerank / ours plain k=100": ours["ms_per_query"] / by["ours plain k=100"]["ms_per_query"],
            f"ours rerank / ours plain k={k}": ours["ms_per_query"] / by[f"ours plain k={k}"]["ms_per_query"],
            "faiss refine / faiss PQ k=100": theirs["ms_per_query"] / by["faiss PQ k=100"]["ms_per_query"],
            "ours rerank / faiss refine (time)": ours["ms_per_query"] / theirs["ms_per_query"],
            "recall@1 ours - faiss (points)": 100 * (ours["recall@1"] - theirs["recall@1"]),
        })
    ratios.append({"k": 100, "ours plain / faiss PQ (time)":
                   by["ours plain k=100"]["ms_per_query"] / by["faiss PQ k=100"]["ms_per_query"],
                   "recall@1 ours - faiss (points)":
                   100 * (by["ours plain k=100"]["recall@1"] - by["faiss PQ k=100"]["recall@1"])})
    print_rows(rows, ["method", "k", "bytes_per_vector", "vector_bytes", "recall@1", "recall@10", "recall@100",
                      "10-recall@10", "ms_per_query", "ms_per_query_median"])
    for r in ratios:
        print("  " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()))
    for k in (10, 1):
        target_row(targets, f"rerank recall@1 (k={k})", by[f"ours rerank={RERANK} k={k}"]["recall@1"],
                   TARGETS["rerank recall@1"], higher_is_better=True)
    for k in (10, 1):
        r = next(x for x in ratios if x["k"] == k)
        target_row(targets, f"rerank={RERANK} k={k} / plain k=100 time", r["ours rerank / ours plain k=100"],
                   TARGETS["rerank / plain time"], note="the same scan of 100 candidates")
        target_row(targets, f"rerank={RERANK} k={k} / plain k={k} time", r[f"ours rerank / ours plain k={k}"],
                   TARGETS["rerank / plain time"], note="plain at the same k (stricter)")
    return {"rows": rows, "ratios": ratios}


# -------------------------------------------------------------------------------------------------------- section 2
def section_filter(bench, targets):
    import faiss

    print("\n2. filtered search (sift, OCKM 64-bit, k=10)", flush=True)
    data = bench.data("sift")
    index = sift_index(bench, "uint8")
    N = len(index)
    Q = data.queries
    pq = bench.faiss_copy("sift", 8)
    ivf = faiss_ivf_like(pq)
    t0 = time.perf_counter()
    faiss.omp_set_num_threads(bench.threads)
    add_in_chunks(ivf, data.base)
    add_in_chunks(pq, data.base)  # only for the check that the IVFPQ scans like IndexPQ
    faiss.omp_set_num_threads(1)
    print(f"  faiss: IVFPQ(nlist=1, no residual) filled in {time.perf_counter() - t0:.1f}s", flush=True)
    rng = np.random.default_rng(SEED)
    filters = {}
    for frac in (0.01, 0.10):
        ids = rng.choice(N, size=round(frac * N), replace=False).astype(np.int64)
        mask = np.zeros(N, dtype=bool)
        mask[ids] = True
        filters[frac] = (ids, mask, *faiss_selectors(mask))

    def ivf_search(sel):
        params = faiss.SearchParametersIVF(sel=sel, nprobe=1)
        return lambda: ivf.search(Q, 10, params=params)

    fns = {"ours unfiltered": lambda: index.search(Q, 10, n_threads=1),
           "faiss IVFPQ(1) unfiltered": lambda: ivf.search(Q, 10)}
    for frac, (ids, mask, bitmap, batch) in filters.items():
        pct = f"{frac:.0%}"
        fns[f"ours allow {pct} ids"] = (lambda ids=ids: index.search(Q, 10, allow=ids, n_threads=1))
        fns[f"ours allow {pct} mask"] = (lambda mask=mask: index.search(Q, 10, allow=mask, n_threads=1))
        fns[f"faiss allow {pct} IDSelectorBitmap"] = ivf_search(bitmap)
        fns[f"faiss allow {pct} IDSelectorBatch"] = ivf_search(batch)
    timed = time_batches(fns, bench.args.repeats)
    nq = len(Q)
    rows = []
    for name, t in timed.items():
        rows.append({"method": name, "ms_per_query": 1e3 * t["min_s"] / nq,
                     "ms_per_query_median": 1e3 * t["median_s"] / nq})
    by = {r["method"]: r for r in rows}
    for r in rows:
        ref = by["ours unfiltered" if r["method"].startswith("ours") else "faiss IVFPQ(1) unfiltered"]
        r["filtered / unfiltered"] = r["ms_per_query"] / ref["ms_per_query"]
    for frac in filters:
        pct = f"{frac:.0%}"
        for form in ("ids", "mask"):
            by[f"ours allow {pct} {form}"]["ours / faiss bitmap (time)"] = (
                by[f"ours allow {pct} {form}"]["ms_per_query"]
                / by[f"faiss allow {pct} IDSelectorBitmap"]["ms_per_query"])
    by["ours unfiltered"]["ours / faiss bitmap (time)"] = (by["ours unfiltered"]["ms_per_query"]
                                                           / by["faiss IVFPQ(1) unfiltered"]["ms_per_query"])

    # correctness on a few queries
    checks = {}
    n_check = min(bench.args.check_queries, nq)
    Qc = Q[:n_check]
    I_pq = pq.search(Qc, 10)[1]
    checks["faiss IVFPQ(1) = IndexPQ (ids)"] = bool(np.array_equal(timed["faiss IVFPQ(1) unfiltered"]["result"][1]
                                                                   [:n_check], I_pq))
    for frac, (ids, mask, _, _) in filters.items():
        pct = f"{frac:.0%}"
        D_ids, I_ids = timed[f"ours allow {pct} ids"]["result"]
        D_mask, I_mask = timed[f"ours allow {pct} mask"]["result"]
        allowed = np.sort(ids)
        sub = Index.from_vectors(index.quantizer, data.base[allowed], ids=allowed, n_threads=bench.threads)
        D_sub, I_sub = sub.search(Qc, 10, n_threads=1)
        f_ids = timed[f"faiss allow {pct} IDSelectorBitmap"]["result"][1]
        checks[f"{pct}: ours results all allowed"] = bool(mask[I_ids[I_ids >= 0]].all()
                                                         and (I_ids[:n_check] >= 0).all())
        checks[f"{pct}: ours ids = ours mask"] = bool(np.array_equal(I_ids, I_mask) and np.array_equal(D_ids, D_mask))
        checks[f"{pct}: ours = search of an index of the allowed vectors (ids)"] = bool(
            np.array_equal(I_ids[:n_check], I_sub))
        checks[f"{pct}: ours = search of an index of the allowed vectors (distances)"] = bool(
            np.allclose(D_ids[:n_check], D_sub, rtol=1e-6, atol=0))
        checks[f"{pct}: faiss results all allowed"] = bool(mask[f_ids[f_ids >= 0]].all())
    print_rows(rows, ["method", "ms_per_query", "ms_per_query_median", "filtered / unfiltered",
                      "ours / faiss bitmap (time)"])
    for name, ok in checks.items():
        print(f"  check {name}: {'ok' if ok else 'FAILED'}", flush=True)
    for frac, key in ((0.01, "filter 1% / unfiltered time"), (0.10, "filter 10% / unfiltered time")):
        pct = f"{frac:.0%}"
        for form in ("ids", "mask"):
            target_row(targets, f"allow {pct} ({form}) / unfiltered time",
                       by[f"ours allow {pct} {form}"]["filtered / unfiltered"], TARGETS[key])
    return {"rows": rows, "checks": checks, "check_queries": n_check, "seed": SEED}


# -------------------------------------------------------------------------------------------------------- section 3
def latency_calls(ours, ours_cos, pq, refine, ivf, pq_cos, ids, mask, p_bitmap, p_batch, queries, queries2d,
                  queries_cos):
    """The single-query callables of section 3, f(i) searching query i (k = 10, one thread)."""
    return {
        "ours plain": lambda i: ours.search(queries[i], 10, n_threads=1),
        "faiss IndexPQ": lambda i: pq.search(queries2d[i], 10),
        "faiss IVFPQ(1) unfiltered": lambda i: ivf.search(queries2d[i], 10),
        f"ours rerank={RERANK}": lambda i: ours.search(queries[i], 10, rerank=RERANK, n_threads=1),
        f"faiss IndexRefineFlat k_factor={RERANK // 10}": lambda i: refine.search(queries2d[i], 10),
        "ours allow 10% ids": lambda i: ours.search(queries[i], 10, allow=ids, n_threads=1),
        "ours allow 10% mask": lambda i: ours.search(queries[i], 10, allow=mask, n_threads=1),
        "faiss IVFPQ(1) IDSelectorBitmap 10%": lambda i: ivf.search(queries2d[i], 10, params=p_bitmap),
        "faiss IVFPQ(1) IDSelectorBatch 10%": lambda i: ivf.search(queries2d[i], 10, params=p_batch),
        "ours cosine": lambda i: ours_cos.search(queries[i], 10, n_threads=1),
        "faiss IndexPQ inner product (normalised)": lambda i: pq_cos.search(queries_cos[i], 10),
    }


def model_bytes(method, P, M, C=1, K=256):
    """Bytes of model a query's tables read: the rotation (P x P float32) when the method rotates, and the codebooks
    (M subspaces x C codebooks x K words x ceil(P / M) float32)."""
    rotation = 4 * P * P if method in ("ockm", "opq") else 0
    return rotation + 4 * M * C * K * -(-P // M)


def section_latency(bench, targets):
    import faiss

    print("\n3. single-query latency (1 thread, k=10, one 1-D query per call)", flush=True)
    calls, warmup = bench.args.calls, bench.args.warmup
    rows = []
    for name, M, faiss_M, target in (("sift", 4, 8, TARGETS["latency P=128 us"]),
                                      ("minilm", 16, 32, TARGETS["latency P=384 us"])):
        data = bench.data(name)
        P = data.dim
        q_l2 = bench.quantizer(name, M)
        q_cos = bench.quantizer(name, M, metric="cosine")
        queries = [np.ascontiguousarray(x, dtype=np.float32) for x in data.query[:2000]]
        queries2d = [x.reshape(1, -1) for x in queries]
        queries_cos = [normalised(x) for x in queries2d]
        bench.faiss_pq(name, faiss_M)
        bench.faiss_pq(name, faiss_M, "cosine")
        opq = bench.faiss_opq(name, faiss_M)
        models = {"ours plain": model_bytes("ockm", P, M, 2), "faiss IndexPQ": model_bytes("pq", P, faiss_M),
                  "faiss OPQ+IndexPQ": model_bytes("opq", P, faiss_M)}
        for N in (LATENCY_FIXED_N, *LATENCY_SIZES):
            base = data.base[:N]
            ours = Index.from_vectors(q_l2, base, store_vectors="float32", n_threads=bench.threads)
            pq = bench.faiss_copy(name, faiss_M)
            add_in_chunks(pq, base)
            opq.reset()
            add_in_chunks(opq, base)
            if N == LATENCY_FIXED_N:  # the fixed cost of a call: plain searches only
                fns = {"ours plain": lambda i: ours.search(queries[i], 1, n_threads=1),
                       "faiss IndexPQ": lambda i: pq.search(queries2d[i], 1),
                       "faiss OPQ+IndexPQ": lambda i: opq.search(queries2d[i], 1)}
            else:
                ours_cos = Index.from_vectors(q_cos, base, n_threads=bench.threads)
                refine = faiss.IndexRefineFlat(bench.faiss_copy(name, faiss_M))
                add_in_chunks(refine, base)
                refine.k_factor = RERANK / 10
                ivf = faiss_ivf_like(pq)
                add_in_chunks(ivf, base)
                pq_cos = bench.faiss_copy(name, faiss_M, "cosine")
                add_in_chunks(pq_cos, base, normalise=True)
                rng = np.random.default_rng(SEED)
                ids = rng.choice(N, size=N // 10, replace=False).astype(np.int64)
                mask = np.zeros(N, dtype=bool)
                mask[ids] = True
                bitmap, batch = faiss_selectors(mask)
                p_bitmap = faiss.SearchParametersIVF(sel=bitmap, nprobe=1)
                p_batch = faiss.SearchParametersIVF(sel=batch, nprobe=1)
                fns = latency_calls(ours, ours_cos, pq, refine, ivf, pq_cos, ids, mask, p_bitmap, p_batch, queries,
                                    queries2d, queries_cos)
                fns["faiss OPQ+IndexPQ"] = lambda i: opq.search(queries2d[i], 10)
            timed = time_calls(fns, queries, calls, warmup)
            print(f"  {name} P={P} N={N}: ours {ours.bytes_per_vector} B/vector, faiss {pq.sa_code_size()} B/vector",
                  flush=True)
            for method, t in timed.items():
                row = {"data": name, "P": P, "N": N, "method": method,
                       "bytes_per_vector": (ours.bytes_per_vector if method.startswith("ours")
                                            else int(pq.sa_code_size())),
                       "model_bytes": models.get(method), **t}
                rows.append(row)
                print(f"    {method:<44} median {t['median_us']:8.1f} us   p90 {t['p90_us']:8.1f} us   "
                      f"min {t['min_us']:8.1f} us", flush=True)
            pairs = [("ours plain", "faiss IndexPQ", "ours / faiss"),
                     ("ours plain", "faiss OPQ+IndexPQ", "ours / faiss OPQ")]
            if N != LATENCY_FIXED_N:
                pairs += [(f"ours rerank={RERANK}", f"faiss IndexRefineFlat k_factor={RERANK // 10}", "ours / faiss"),
                          ("ours allow 10% ids", "faiss IVFPQ(1) IDSelectorBitmap 10%", "ours / faiss"),
                          ("ours allow 10% mask", "faiss IVFPQ(1) IDSelectorBitmap 10%", "ours / faiss"),
                          ("ours cosine", "faiss IndexPQ inner product (normalised)", "ours / faiss")]
            for a, b, column in pairs:
                r = next(x for x in rows if x["method"] == a and x["N"] == N and x["data"] == name)
                r[column] = timed[a]["median_us"] / timed[b]["median_us"]
            if N != LATENCY_FIXED_N:
                target_row(targets, f"latency plain P={P} N={N} (median us)", timed["ours plain"]["median_us"], target)
                target_row(targets, f"latency plain P={P} N={N} / faiss IndexPQ", timed["ours plain"]["median_us"]
                           / timed["faiss IndexPQ"]["median_us"], 1.0,
                           note=f"OPQ+IndexPQ: {timed['ours plain']['median_us'] / timed['faiss OPQ+IndexPQ']['median_us']:.2f}")
    print_rows(rows, ["data", "P", "N", "method", "bytes_per_vector", "model_bytes", "median_us", "p90_us", "min_us",
                      "ours / faiss", "ours / faiss OPQ"])
    return {"rows": rows, "calls": calls, "warmup": warmup}


# -------------------------------------------------------------------------------------------------------- section 4
def section_metrics(bench, targets):
    import faiss

    print("\n4. recall with metrics ip and cosine (k=100, against exact float64 ground truth)", flush=True)
    rows = []
    for name, metric, bits in (("minilm", "cosine", 64), ("minilm", "cosine", 128), ("sift", "ip", 64)):
        data = bench.data(name)
        Q = data.queries
        gt_path = bench.cache_dir / f"gt-{name}-{metric}-q{len(Q)}-base{len(data.base)}.npz"
        gt_s, gt = exact_topk(Q, data.base, 100, metric, gt_path)
        q = bench.quantizer(name, bits // 16, metric=metric)
        t0 = time.perf_counter()
        ours = Index.from_vectors(q, data.base, n_threads=bench.threads)
        add_s = time.perf_counter() - t0
        pq = bench.faiss_copy(name, bits // 8, metric)
        faiss.omp_set_num_threads(bench.threads)
        add_in_chunks(pq, data.base, normalise=metric == "cosine")
        faiss.omp_set_num_threads(1)
        Qf = normalised(Q) if metric == "cosine" else Q
        timed = time_batches({"ours": partial(ours.search, Q, 100, n_threads=1), "faiss": partial(pq.search, Qf, 100)},
                             bench.args.repeats)
        for lib, t in timed.items():
            row = {"data": name, "metric": metric, "bits": bits,
                   "method": (f"ours OCKM M={bits // 16} C=2 {metric}" if lib == "ours"
                              else f"faiss IndexPQ {bits // 8}x8 inner product"
                              + (" (normalised)" if metric == "cosine" else "")),
                   "bytes_per_vector": ours.bytes_per_vector if lib == "ours" else int(pq.sa_code_size()),
                   "ms_per_query": 1e3 * t["min_s"] / len(Q), **recalls(t["result"][1], gt, gt_s)}
            if lib == "ours":
                row["add_s"] = add_s
            rows.append(row)
        a, b = rows[-2], rows[-1]
        a["recall@1 ours - faiss (points)"] = 100 * (a["recall@1"] - b["recall@1"])
        a["recall@10 ours - faiss (points)"] = 100 * (a["recall@10"] - b["recall@10"])
        a["ours / faiss (time)"] = a["ms_per_query"] / b["ms_per_query"]
        for r in (1, 10, 100):
            target_row(targets, f"{name} {metric} {bits} bits recall@{r}: ours - faiss IndexPQ (points)",
                       100 * (a[f"recall@{r}"] - b[f"recall@{r}"]), 0.0, higher_is_better=True, strict=True,
                       note=f"ours {a[f'recall@{r}']:.3f}, faiss {b[f'recall@{r}']:.3f}")
        print(f"  {name} {metric} {bits} bits: ours R@1 {a['recall@1']:.3f} R@10 {a['recall@10']:.3f} "
              f"R@100 {a['recall@100']:.3f} 10-R@10 {a['10-recall@10']:.3f} ({a['ms_per_query']:.3f} ms/q); "
              f"faiss R@1 {b['recall@1']:.3f} R@10 {b['recall@10']:.3f} R@100 {b['recall@100']:.3f} "
              f"10-R@10 {b['10-recall@10']:.3f} ({b['ms_per_query']:.3f} ms/q)", flush=True)
    print_rows(rows, ["data", "metric", "bits", "method", "bytes_per_vector", "recall@1", "recall@10", "recall@100",
                      "10-recall@10", "ms_per_query", "recall@1 ours - faiss (points)", "ours / faiss (time)"])
    return {"rows": rows}


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


SECTIONS = {1: ("rerank", section_rerank), 2: ("filter", section_filter), 3: ("latency", section_latency),
            4: ("metrics", section_metrics)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sift", default=str(REPO.parent / "shared" / "data" / "sift-real"),
                        help="texmex sift folder (default: ../shared/data/sift-real from the repository)")
    parser.add_argument("--minilm", default=str(REPO.parent / "shared" / "data" / "minilm-real"),
                        help="texmex minilm folder (default: ../shared/data/minilm-real from the repository)")
    parser.add_argument("--sections", type=int, nargs="+", default=[1, 2, 3, 4], choices=sorted(SECTIONS),
                        help="which sections to run (default: all)")
    parser.add_argument("--queries", type=int, default=1000, help="queries of the batch searches (default 1000)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed repeats of each batch search after a warm-up; the minimum is reported (default 3)")
    parser.add_argument("--calls", type=int, default=2000, help="timed single-query calls per method (default 2000)")
    parser.add_argument("--warmup", type=int, default=200, help="untimed single-query calls first (default 200)")
    parser.add_argument("--check-queries", type=int, default=20,
                        help="queries whose filtered results are checked (default 20)")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for training and adding (default: all cores); searches use one")
    parser.add_argument("--cache-dir", default="/tmp/ockstore-bench-cache",
                        help="trained quantizers and exact ground truths are kept here")
    parser.add_argument("--retrain", action="store_true", help="train again even when the cache has a quantizer")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke test: {QUICK_BASE // 1000}K sift base, 200 queries, {QUICK_ITER} training "
                             f"iterations on {QUICK_LEARN // 1000}K learn vectors, 500 latency calls")
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    parser.add_argument("--out", default=None, help="write the markdown tables to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.queries = min(args.queries, 200)
        args.calls = min(args.calls, 500)
        args.warmup = min(args.warmup, 50)

    machine = machine_info()
    print(f"machine: {machine['cpu']}, {machine['cores']} cores; Python {machine['python']}, numpy "
          f"{machine['numpy']} ({machine['blas']}), faiss {machine['faiss']}, ockstore {machine['ockstore']}",
          flush=True)
    threads = machine["cores"] if args.threads is None else args.threads
    bench = Bench(args, threads)
    setup = (f"{args.queries} queries per batch, {args.repeats} timed repeats (minimum reported), {args.calls} "
             f"single-query calls (median reported), searches on 1 thread, training and adding on {threads}"
             f"{'; quick' if args.quick else ''}")
    print(f"setup: {setup}", flush=True)
    results, targets = {}, []
    t_start = time.perf_counter()
    for s in sorted(set(args.sections)):
        name, fn = SECTIONS[s]
        t0 = time.perf_counter()
        results[name] = fn(bench, targets)
        results[name]["seconds"] = time.perf_counter() - t0
    data_info = {n: {"learn": len(d.learn), "base": len(d.base), "queries": d.n_queries}
                 for n, d in bench._data.items()}
    print("\ntargets:")
    for t in targets:
        print(f"  {'met   ' if t['met'] else 'MISSED'} {t['target']}: {t['value']:.3f} {t['op']} {t['limit']}"
              + (f"  ({t['note']})" if t["note"] else ""))
    print(f"\ntotal {time.perf_counter() - t_start:.0f}s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "setup": setup, "data": data_info, "training": bench.training,
                       "results": results, "targets": targets}, f, indent=1)
        print(f"wrote {args.json}")
    if args.out:
        lines = ["# ockstore search options benchmark", "",
                 (f"Machine: {machine['cpu']}, {machine['cores']} cores; Python {machine['python']}, numpy "
                  f"{machine['numpy']} ({machine['blas']}), faiss {machine['faiss']}, ockstore {machine['ockstore']}."),
                 "",
                 f"Setup: {setup}", ""]
        for name, res in results.items():
            lines += [f"## {name}", ""]
            cols = list(dict.fromkeys(c for r in res["rows"] for c in r))
            lines += table(res["rows"], cols) + [""]
        lines += ["## targets", ""] + table(targets, ["target", "value", "op", "limit", "met", "note"]) + [""]
        with open(args.out, "w") as f:
            f.write("\n".join(lines))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
