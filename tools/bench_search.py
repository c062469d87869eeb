"""Search benchmark: ockstore's PQ, CKM, ECKM and OCKM (ADC and SDC) against faiss-cpu, in one run on the same data.

faiss-cpu is a benchmark-only dependency: it is imported here and nowhere in the package.

For each code length (``--bits``) the same learn set trains every method and the same base and queries are searched:

    ours   PQ (M = bits/8), CKM (M = bits/8), ECKM and OCKM (M = bits/16, C = 2, OCKM beam T = 10); ADC and SDC;
           ECKM/OCKM store the norm term in one byte ("u8", the default); OCKM ADC also with a float32 norm ("f32").
    faiss  IndexPQ (M = bits/8, 8 bits; ADC and SDC), OPQ + PQ ("OPQ{M},PQ{M}"), IndexProductResidualQuantizer
           (bits/16 splits of 2 x 8-bit residual codebooks, max_beam_size 10 on every sub-quantizer) with the norm
           as float (ST_norm_float, +4 bytes) and as one byte (ST_norm_cqint8, +1 byte), IndexPQFastScan with 4-bit
           codes at M = bits/4 (equal bytes) and M = bits/8 (half the bytes).

Reported per method: recall@1/10/100 (the paper's definition: the true nearest neighbour among the first R,
``ockstore.evaluation.recall_at_r``), mean overall ratio at 10, ms per query on one thread (the whole batch of
queries, k = 100, ``n_threads=1`` for ours and ``faiss.omp_set_num_threads(1)``, BLAS limited to one thread),
queries per second on 2 threads, bytes per vector, training and adding (encoding) time; then ratios ours / faiss for
comparable pairs. Training parameters are the libraries' defaults (ours: PQ 25 iterations, CKM/ECKM/OCKM 30, tol 1e-4;
faiss: its defaults), except ``--quick``: ours 5 iterations, faiss k-means 10 iterations where it has the knob, the
first 25K learn vectors and a 200K base, for a smoke test.

The machine (CPU model, cores) is printed first. Typical use, from the repository root:

    python tools/bench_search.py --bits 64                 # full measurement: 1M base, 1000 queries
    python tools/bench_search.py --quick --out quick.md    # smoke test, minutes
"""

from __future__ import annotations

import argparse
import json
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
from ockstore.datasets import load_texmex  # noqa: E402
from ockstore.evaluation import exact_knn  # noqa: E402
from ockstore.evaluation import mean_overall_ratio, recall_at_r  # noqa: E402
from ockstore import Index  # noqa: E402

K_SEARCH = 100


# ---------------------------------------------------------------------------------------------------------- machine
def machine_info():
    model, cores = cpu_model(), core_count()
    import faiss

    return {
        "cpu": model,
        "cores": cores,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "faiss": faiss.__version__,
        "ockstore": ockstore.__version__,
    }


# ------------------------------------------------------------------------------------------------------------- data
def load_data(folder, n_queries, base_limit, learn_limit=None):
    """learn, base (float32), queries (float32), groundtruth ids (nq, >=100) and distances (or None)."""
    ds = load_texmex(folder)
    t0 = time.perf_counter()
    learn = np.ascontiguousarray(ds.learn[:learn_limit], dtype=np.float32)
    query = np.ascontiguousarray(ds.query[:n_queries], dtype=np.float32)
    if base_limit is None:
        base = np.ascontiguousarray(ds.base, dtype=np.float32)
        gt, gt_d = ds.groundtruth[:n_queries], None
    else:
        chunks, have = [], 0
        for chunk in ds.iter_base(min(base_limit, 100_000)):
            chunks.append(np.asarray(chunk[: base_limit - have], dtype=np.float32))
            have += len(chunks[-1])
            if have >= base_limit:
                break
        base = np.ascontiguousarray(np.concatenate(chunks))
        gt_d, gt = exact_knn(query, base, K_SEARCH)  # the file's ground truth is for the whole base
    print(f"data: {ds.name}: learn {learn.shape}, base {base.shape}, queries {query.shape} "
          f"(loaded in {time.perf_counter() - t0:.1f}s)", flush=True)
    return learn, base, query, gt, gt_d


# ---------------------------------------------------------------------------------------------------------- methods
class Method:
    """One row of the benchmark: build() trains and adds, search(Q, k, threads) returns ids (nq, k)."""

    library = ""
    name = ""
    pair = None  # the faiss row this one is compared with (ours only)

    def __init__(self, name, library, pair=None):
        self.name, self.library, self.pair = name, library, pair
        self.train_s = self.add_s = 0.0

    def bytes_per_vector(self):
        raise NotImplementedError


class Ours(Method):
    def __init__(self, name, make, distance, norm_encoding=None, pair=None, shared=None):
        super().__init__(name, "ockstore", pair)
        self.make, self.distance, self.norm_encoding, self.shared = make, distance, norm_encoding, shared
        self.index = None

    def build(self, learn, base, cache, threads):
        key = self.shared
        if key is not None and key in cache:  # the same quantizer as another row: reuse it
            q, train_s = cache[key]
        else:
            q = self.make()
            q.n_threads = threads
            t0 = time.perf_counter()
            q.fit(learn)
            train_s = time.perf_counter() - t0
            if key is not None:
                cache[key] = (q, train_s)
        index_key = (key, self.norm_encoding)
        if key is not None and index_key in cache:  # the same index as another row (ADC and SDC)
            self.index, add_s = cache[index_key]
        else:
            t0 = time.perf_counter()
            self.index = Index.from_vectors(q, base, norm_encoding=self.norm_encoding, n_threads=threads)
            add_s = time.perf_counter() - t0
            if key is not None:
                cache[index_key] = (self.index, add_s)
        self.train_s, self.add_s = train_s, add_s
        self.iterations = len(q.objective_history) - 1
        self.stop_reason = q.stop_reason

    def search(self, Q, k, threads):
        return self.index.search(Q, k, distance=self.distance, n_threads=threads)[1]

    def bytes_per_vector(self):
        return self.index.bytes_per_vector


class Faiss(Method):
    def __init__(self, name, make, quick, sdc=False):
        super().__init__(name, "faiss")
        self.make, self.quick, self.sdc = make, quick, sdc
        self.index = None

    def build(self, learn, base, cache, threads):
        import faiss

        faiss.omp_set_num_threads(threads)
        key = ("faiss", self.name.replace(" SDC", "")) if self.sdc else None
        if key in cache:
            self.index, self.train_s, self.add_s = cache[key]
        else:
            index = self.make(learn.shape[1])
            if self.quick:
                _quick_faiss(index)
            t0 = time.perf_counter()
            index.train(learn)
            self.train_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            index.add(base)
            self.add_s = time.perf_counter() - t0
            self.index = index
        if self.sdc:
            pq = faiss.downcast_index(self.index)
            pq.pq.compute_sdc_table()
            pq.search_type = faiss.IndexPQ.ST_SDC
        elif isinstance(self.index, faiss.IndexPQ):
            cache[("faiss", self.name)] = (self.index, self.train_s, self.add_s)

    def search(self, Q, k, threads):
        import faiss

        faiss.omp_set_num_threads(threads)
        return self.index.search(Q, k)[1]

    def bytes_per_vector(self):
        return int(self.index.sa_code_size())


def _quick_faiss(index):
    """Fewer k-means iterations for --quick (faiss's default is 25)."""
    import faiss

    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexPreTransform):
        faiss.downcast_VectorTransform(index.chain.at(0)).niter = 10
        index = faiss.downcast_index(index.index)
    if hasattr(index, "pq"):
        index.pq.cp.niter = 10
    if hasattr(index, "prq"):
        for i in range(index.prq.nsplits):
            faiss.downcast_Quantizer(index.prq.subquantizer(i)).cp.niter = 10


def faiss_prq(bits, search_type_name):
    import faiss

    def make(d):
        st = getattr(faiss.AdditiveQuantizer, search_type_name)
        index = faiss.IndexProductResidualQuantizer(d, bits // 16, 2, 8, faiss.METRIC_L2, st)
        # faiss 1.15's ProductResidualQuantizer has no max_beam_size of its own: it is a field of each sub-quantizer.
        for i in range(index.prq.nsplits):
            faiss.downcast_Quantizer(index.prq.subquantizer(i)).max_beam_size = 10
        return index

    return make


def methods_for(bits, quick):
    import faiss

    n_iter = {"n_iter": 5} if quick else {}
    M8, M16, M4 = bits // 8, bits // 16, bits // 4
    ours = [
        Ours(f"PQ M={M8} ADC", lambda: ockstore.PQ(M8, **n_iter), "adc", pair="faiss PQ", shared="pq"),
        Ours(f"PQ M={M8} SDC", lambda: ockstore.PQ(M8, **n_iter), "sdc", pair="faiss PQ SDC", shared="pq"),
        Ours(f"CKM M={M8} ADC", lambda: ockstore.CKM(M8, **n_iter), "adc", pair="faiss OPQ", shared="ckm"),
        Ours(f"CKM M={M8} SDC", lambda: ockstore.CKM(M8, **n_iter), "sdc", shared="ckm"),
        Ours(f"ECKM M={M16} C=2 ADC u8", lambda: ockstore.ECKM(M16, 2, **n_iter), "adc", shared="eckm"),
        Ours(f"ECKM M={M16} C=2 SDC u8", lambda: ockstore.ECKM(M16, 2, **n_iter), "sdc", shared="eckm"),
        Ours(f"OCKM M={M16} C=2 ADC u8", lambda: ockstore.OCKM(M16, 2, 10, **n_iter), "adc",
             pair="faiss PRQ cqint8", shared="ockm"),
        Ours(f"OCKM M={M16} C=2 ADC f32", lambda: ockstore.OCKM(M16, 2, 10, **n_iter), "adc", "f32",
             pair="faiss PRQ float", shared="ockm"),
        Ours(f"OCKM M={M16} C=2 SDC u8", lambda: ockstore.OCKM(M16, 2, 10, **n_iter), "sdc", shared="ockm"),
    ]
    theirs = [
        Faiss("faiss PQ", lambda d: faiss.IndexPQ(d, M8, 8), quick),
        Faiss("faiss PQ SDC", lambda d: faiss.IndexPQ(d, M8, 8), quick, sdc=True),
        Faiss("faiss OPQ", lambda d: faiss.index_factory(d, f"OPQ{M8},PQ{M8}"), quick),
        Faiss("faiss PRQ float", faiss_prq(bits, "ST_norm_float"), quick),
        Faiss("faiss PRQ cqint8", faiss_prq(bits, "ST_norm_cqint8"), quick),
        Faiss(f"faiss PQFastScan M={M4}x4", lambda d: faiss.IndexPQFastScan(d, M4, 4), quick),
        Faiss(f"faiss PQFastScan M={M8}x4", lambda d: faiss.IndexPQFastScan(d, M8, 4), quick),
    ]
    return ours + theirs


# ------------------------------------------------------------------------------------------------------- measuring
def measure(method, learn, base, query, gt, gt_d, cache, threads):
    from threadpoolctl import threadpool_limits

    method.build(learn, base, cache, threads)
    with threadpool_limits(limits=1):
        method.search(query[:10], K_SEARCH, 1)  # warm-up (page in the codes, build lazy tables)
        t0 = time.perf_counter()
        ids = method.search(query, K_SEARCH, 1)
        t1 = time.perf_counter() - t0
    with threadpool_limits(limits=2):
        t0 = time.perf_counter()
        ids2 = method.search(query, K_SEARCH, 2)
        t2 = time.perf_counter() - t0
    nq = len(query)
    row = {
        "library": method.library,
        "method": method.name,
        "bytes_per_vector": method.bytes_per_vector(),
        "recall@1": recall_at_r(ids, gt, 1, groundtruth_distances=gt_d),
        "recall@10": recall_at_r(ids, gt, 10, groundtruth_distances=gt_d),
        "recall@100": recall_at_r(ids, gt, 100, groundtruth_distances=gt_d),
        "mor@10": mean_overall_ratio(query, base, ids, gt, 10),
        "ms_per_query_1t": 1000.0 * t1 / nq,
        "qps_2t": nq / t2,
        "train_s": method.train_s,
        "add_s": method.add_s,
        "same_results_1t_2t": bool(np.array_equal(ids, ids2)),
        "train_iterations": getattr(method, "iterations", None),
        "stop_reason": getattr(method, "stop_reason", None),
        "pair": method.pair,
    }
    print(f"  {row['method']:<28} {row['bytes_per_vector']:>3} B  R@1 {row['recall@1']:.3f}  "
          f"R@10 {row['recall@10']:.3f}  R@100 {row['recall@100']:.3f}  MOR@10 {row['mor@10']:.4f}  "
          f"{row['ms_per_query_1t']:7.2f} ms/q (1t)  {row['qps_2t']:7.1f} q/s (2t)  "
          f"train {row['train_s']:6.1f}s  add {row['add_s']:5.1f}s"
          + (f"  ({row['train_iterations']} iterations)" if row["train_iterations"] is not None else "")
          + ("" if row["same_results_1t_2t"] else "  [1 and 2 threads gave different ids]"), flush=True)
    return row


def ratios(rows):
    by_name = {r["method"]: r for r in rows}
    out = []
    for r in rows:
        ref = by_name.get(r["pair"]) if r["pair"] else None
        if ref is None:
            continue
        out.append({
            "ours": r["method"],
            "faiss": ref["method"],
            "recall@10 ours-faiss (points)": 100.0 * (r["recall@10"] - ref["recall@10"]),
            "ms/query 1t ours/faiss": r["ms_per_query_1t"] / ref["ms_per_query_1t"],
            "qps 2t ours/faiss": r["qps_2t"] / ref["qps_2t"],
            "train ours/faiss": r["train_s"] / ref["train_s"] if ref["train_s"] > 0 else float("nan"),
            "bytes ours/faiss": r["bytes_per_vector"] / ref["bytes_per_vector"],
        })
    return out


# ---------------------------------------------------------------------------------------------------------- output
def markdown(machine, setup, results):
    lines = ["# ockstore search benchmark", "",
             f"Machine: {machine['cpu']}, {machine['cores']} cores; Python {machine['python']}, numpy "
             f"{machine['numpy']}, faiss {machine['faiss']}, ockstore {machine['ockstore']}.", "",
             f"Setup: {setup}", ""]
    cols = ["method", "bytes_per_vector", "recall@1", "recall@10", "recall@100", "mor@10", "ms_per_query_1t",
            "qps_2t", "train_s", "add_s"]
    heads = ["method", "B/vec", "R@1", "R@10", "R@100", "MOR@10", "ms/q 1t", "q/s 2t", "train s", "add s"]
    for bits, block in results.items():
        lines += [f"## {bits} bits", "", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
        for r in block["rows"]:
            cells = []
            for c in cols:
                v = r[c]
                if c.startswith("recall"):
                    cells.append(f"{v:.3f}")
                elif c == "mor@10":
                    cells.append(f"{v:.4f}")
                elif isinstance(v, float):
                    cells.append(f"{v:.2f}" if v < 100 else f"{v:.0f}")
                else:
                    cells.append(str(v))
            lines.append("| " + " | ".join(cells) + " |")
        if block["ratios"]:
            rh = list(block["ratios"][0].keys())
            lines += ["", "| " + " | ".join(rh) + " |", "|" + "---|" * len(rh)]
            for r in block["ratios"]:
                lines.append("| " + " | ".join(f"{v:+.2f}" if "points" in k else (f"{v:.2f}" if isinstance(v, float)
                                                                                 else str(v))
                                               for k, v in r.items()) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "sift-real"),
                        help="texmex-style dataset folder (default: ../shared/data/sift-real from the repository)")
    parser.add_argument("--bits", type=int, nargs="+", default=[32, 64, 128], help="code lengths (multiples of 16)")
    parser.add_argument("--queries", type=int, default=1000, help="first N queries (default 1000)")
    parser.add_argument("--base-limit", type=int, default=None,
                        help="use the first N base vectors (ground truth recomputed exactly)")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for training and adding (default: all cores); search is timed on 1 and 2")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: 5 training iterations (faiss k-means 10) on the first 25K learn vectors, "
                             "base limited to 200K")
    parser.add_argument("--only", nargs="*", default=None, help="run only the methods whose name contains one of these")
    parser.add_argument("--out", default=None, help="write the results to this file (.json, otherwise markdown)")
    args = parser.parse_args(argv)
    for b in args.bits:
        if b <= 0 or b % 16:
            parser.error(f"--bits must be positive multiples of 16, got {b}")
    if args.quick and args.base_limit is None:
        args.base_limit = 200_000

    machine = machine_info()
    print(f"machine: {machine['cpu']}, {machine['cores']} cores; numpy {machine['numpy']}, faiss {machine['faiss']}",
          flush=True)
    threads = machine["cores"] if args.threads is None else args.threads
    learn, base, query, gt, gt_d = load_data(args.data, args.queries, args.base_limit,
                                             25_000 if args.quick else None)
    setup = (f"{len(learn)} learn, {len(base)} base, {len(query)} queries, k={K_SEARCH}"
             f"{', quick' if args.quick else ''}; search timed on the whole batch of queries")
    results = {}
    for bits in args.bits:
        print(f"\n{bits} bits", flush=True)
        rows, cache = [], {}
        for m in methods_for(bits, args.quick):
            if args.only and not any(s in m.name for s in args.only):
                continue
            rows.append(measure(m, learn, base, query, gt, gt_d, cache, threads))
        results[bits] = {"rows": rows, "ratios": ratios(rows)}
        for r in results[bits]["ratios"]:
            print("  " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()))
    if args.out:
        if args.out.endswith(".json"):
            with open(args.out, "w") as f:
                json.dump({"machine": machine, "setup": setup, "results": results}, f, indent=1)
        else:
            with open(args.out, "w") as f:
                f.write(markdown(machine, setup, results))
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
