"""Search options benchmark: exact re-ranking, filters, single-query latency and the ip/cosine metrics, ockstore
against faiss-cpu, in one run on the same data.

faiss-cpu is a benchmark-only dependency: it is imported here (and in tools/_options_support.py, the shared parts:
data, cached quantizers, faiss peers, timers, output) and nowhere in the package.

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
import json
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _options_support import (  # noqa: E402
    LATENCY_SIZES, QUICK_BASE, QUICK_ITER, QUICK_LEARN, REPO, Bench, add_in_chunks, exact_topk, faiss_ivf_like,
    faiss_selectors, machine_info, normalised, print_rows, recalls, table, target_row, time_batches, time_calls,
)
from ockstore import Index  # noqa: E402

SEED = 20240611  # the seed of the random filters
RERANK = 100
LATENCY_FIXED_N = 1  # an index of one vector: the fixed cost of a call (validation, tables, heap), without the scan
TARGETS = {
    "rerank recall@1": 0.95,
    "rerank / plain time": 1.3,
    "filter 1% / unfiltered time": 0.3,
    "filter 10% / unfiltered time": 0.5,
    "latency P=128 us": 40.0,
    "latency P=384 us": 80.0,
}


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
