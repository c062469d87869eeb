"""The "Done when" figures of issue 19 (recall at speed), one thread, batches of the benchmark's 1,000 queries:

1. re-ranking cost per extra candidate: sift (uint8, 128-d) IVF{L} OCKM(4, 2, 10), n_probe 8, rerank 100 -> 1,000,
   and minilm (float16, 384-d, cosine) flat OCKM(4, 2, 10), rerank 100 -> 1,000: (t(1000) - t(100)) / 900 per query;
   beside it, the time NumPy takes to gather and compare the same rows (a floor of the work, same run);
2. one query per call against a batch: sift IVF, n_probe 32, rerank 200, per-query time of 1-D calls over the
   per-query time of one batch of the same queries (process CPU time, the two interleaved ``--repeats`` times, the
   smallest of each), for the 8-bit IVF above, a 4-bit one (IVF{L} OCKM(8, 2, 10, n_codewords=16): fast scan) and
   minilm's cosine IVF OCKM(4, 2, 10) with float16 vectors;
3. sq8 against float16 on minilm (flat, cosine, rerank 200): 10-recall@10 of each and the bytes each stores per vector;
4. ``ockstore.tune(target_recall=0.95)`` on held-out queries (sift IVF; the benchmark's tune_queries with their ground
   truth), then 10-recall@10 of the setting it picks on the timed queries (the goal: >= 0.94).

The data are tools/bench_pareto.py's (``--cache``: its .npy files are reused, written the first time); indexes are
built once into ``<cache>/recall_speed`` (keyed by the ockstore sources, so changed code rebuilds).

    python tools/bench_recall_speed.py --cache /work/cache/pareto             # sift 1M (IVF1024) and minilm
    python tools/bench_recall_speed.py --cache /work/cache/pareto --quick     # sift 100K (IVF256): a smoke run
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS))
from _pareto_child import THREAD_VARIABLES  # noqa: E402  (no numpy imported yet)

for _name in THREAD_VARIABLES:  # one thread for every library this process loads, before any is imported
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(TOOLS.parent))
from _pareto_data import DEFAULT_CACHE, DEFAULT_DATA_ROOT, load_average, prepare, recall_10_at_10  # noqa: E402
from _pareto_ockstore import source_hash  # noqa: E402

K = 10


def timed(fn, repeats):
    """Median wall seconds of ``repeats`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def fitted(cache, data, name, make_model, threads):
    """The model ``name`` of ``data``, fitted on its learn set once and kept as a quantizer file (with its value
    ranges: the sq8 indexes need them)."""
    import ockstore

    path = Path(cache) / "recall_speed" / f"{data.key}-{name}-src{source_hash()}.ockq"
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        return ockstore.load_quantizer(str(path))
    t0 = time.perf_counter()
    model = make_model(threads).fit(data.load("learn"))
    ockstore.save_quantizer(str(path), model)
    print(f"trained {path.name} in {time.perf_counter() - t0:.0f} s", flush=True)
    return model


def built(cache, data, name, model, store, threads):
    """The path of the index of ``data`` with ``model`` and ``store`` (built unless cached)."""
    import ockstore

    path = Path(cache) / "recall_speed" / f"{data.key}-{name}-{store}-src{source_hash()}.ock"
    if not path.exists():
        t0 = time.perf_counter()
        ockstore.build_index(str(path) + ".part", model, data.load("base"), store_vectors=store, n_threads=threads)
        os.replace(str(path) + ".part", path)
        print(f"built {path.name} in {time.perf_counter() - t0:.0f} s", flush=True)
    return path


def single_over_batch(index, Q, repeats, options):
    """(per-query seconds of 1-D calls, of one batch): process CPU time, the two interleaved ``repeats`` times after a
    warm-up of each, the smallest of each (the machine's other load only ever adds time)."""
    index.search(Q, K, **options)
    for q in Q[:100]:
        index.search(q, K, **options)
    singles, batches = [], []
    for _ in range(repeats):
        t0 = time.process_time()
        index.search(Q, K, **options)
        batches.append(time.process_time() - t0)
        t0 = time.process_time()
        for q in Q:
            index.search(q, K, **options)
        singles.append(time.process_time() - t0)
    return min(singles) / len(Q), min(batches) / len(Q)


def per_candidate(index, Q, repeats, extra, low=100, high=1000):
    """(microseconds per extra candidate per query from rerank=low to high, t(low), t(high) per query)."""
    t_low = timed(lambda: index.search(Q, K, rerank=low, n_threads=1, **extra), repeats) / len(Q)
    t_high = timed(lambda: index.search(Q, K, rerank=high, n_threads=1, **extra), repeats) / len(Q)
    return (t_high - t_low) / (high - low) * 1e6, t_low * 1e6, t_high * 1e6


def gather_floor(vectors, Q, n_candidates, repeats):
    """Microseconds per candidate NumPy takes to gather random rows of ``vectors`` and compute their L2 distances to a
    query (a floor of the bytes' cost measured in the same run; NumPy's per-call overhead amortised over 1,000 rows)."""
    rng = np.random.default_rng(0)
    rows = np.sort(rng.integers(0, vectors.shape[0], size=(len(Q), n_candidates)), axis=1)

    def run():
        for q in range(len(Q)):
            block = vectors[rows[q]].astype(np.float32)
            ((block - Q[q]) ** 2).sum(axis=1)

    return timed(run, repeats) / (len(Q) * n_candidates) * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", default=str(DEFAULT_CACHE))
    parser.add_argument("--data-root", default=str(DEFAULT_DATA_ROOT))
    parser.add_argument("--quick", action="store_true", help="sift: the first 100K base vectors")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--single-repeats", type=int, default=9, help="interleaved repeats of figure 2")
    parser.add_argument("--build-threads", type=int, default=2)
    parser.add_argument("--skip-minilm", action="store_true")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    import ockstore

    figures = {"load_before": load_average()}
    sift = prepare("sift", Path(args.data_root) / "sift-real", args.cache, quick=args.quick)
    L = sift.n_lists
    model = fitted(args.cache, sift, f"ivf{L}-ockm4x2", lambda t: ockstore.IVF(
        L, ockstore.OCKM(4, 2, 10, n_threads=t), n_threads=t), args.build_threads)
    path = built(args.cache, sift, f"ivf{L}-ockm4x2", model, "uint8", args.build_threads)
    Q, gt = np.asarray(sift.load("queries"), dtype=np.float32), sift.load("gt")
    with ockstore.open_index(str(path)) as index:
        cost, t_low, t_high = per_candidate(index, Q, args.repeats, {"n_probe": 8})
        figures["sift_uint8_ivf_nprobe8_us_per_extra_candidate"] = cost
        figures["sift_uint8_ivf_nprobe8_us_per_query_rerank100_1000"] = [t_low, t_high]
        figures["sift_uint8_numpy_gather_l2_us_per_candidate"] = gather_floor(index.vectors, Q[:200], 1000, 1)
        options = {"n_probe": 32, "rerank": 200, "n_threads": 1}
        single, batch = single_over_batch(index, Q, args.single_repeats, options)
        figures["one_query_per_call_over_batch_nprobe32_rerank200"] = single / batch
        figures["one_query_us"], figures["batch_us_per_query"] = single * 1e6, batch * 1e6
        tuned = ockstore.tune(index, sift.load("tune_queries"), k=K, target_recall=0.95,
                              ground_truth=sift.load("tune_gt"), n_threads=1)
        figures["tune_0.95_keywords"] = dict(tuned)
        figures["tune_0.95_recall_on_tuning_queries"] = tuned.recall
        figures["tune_0.95_recall_on_other_queries"] = recall_10_at_10(index.search(Q, K, n_threads=1, **tuned)[1],
                                                                       gt)
    model4 = fitted(args.cache, sift, f"ivf{L}-ockm8x2k16", lambda t: ockstore.IVF(
        L, ockstore.OCKM(8, 2, 10, n_codewords=16, n_threads=t), n_threads=t), args.build_threads)
    with ockstore.open_index(str(built(args.cache, sift, f"ivf{L}-ockm8x2k16", model4, "uint8",
                                       args.build_threads))) as index4:
        single, batch = single_over_batch(index4, Q, args.single_repeats, options)
        figures["4bit_one_query_per_call_over_batch_nprobe32_rerank200"] = single / batch
        figures["4bit_one_query_us"], figures["4bit_batch_us_per_query"] = single * 1e6, batch * 1e6
    if not args.skip_minilm:
        minilm = prepare("minilm", Path(args.data_root) / "minilm-real", args.cache)
        model = fitted(args.cache, minilm, "flat-ockm4x2", lambda t: ockstore.OCKM(
            4, 2, 10, metric="cosine", n_threads=t), args.build_threads)
        path16 = built(args.cache, minilm, "flat-ockm4x2", model, "float16", args.build_threads)
        path8 = built(args.cache, minilm, "flat-ockm4x2", model, "sq8", args.build_threads)
        Qm, gtm = np.asarray(minilm.load("queries"), dtype=np.float32), minilm.load("gt")
        with ockstore.open_index(str(path16)) as f16, ockstore.open_index(str(path8)) as s8:
            cost, t_low, t_high = per_candidate(f16, Qm, args.repeats, {})
            figures["minilm_float16_flat_us_per_extra_candidate"] = cost
            figures["minilm_float16_flat_us_per_query_rerank100_1000"] = [t_low, t_high]
            figures["minilm_float16_numpy_gather_l2_us_per_candidate"] = gather_floor(f16.vectors, Qm[:100], 1000, 1)
            for name, index in (("float16", f16), ("sq8", s8)):
                figures[f"minilm_{name}_rerank200_recall10at10"] = recall_10_at_10(
                    index.search(Qm, K, rerank=200, n_threads=1)[1], gtm)
                figures[f"minilm_{name}_stored_bytes_per_vector"] = int(index.vectors.nbytes // len(index))
            figures["minilm_sq8_minus_float16_recall10at10"] = (figures["minilm_sq8_rerank200_recall10at10"]
                                                                - figures["minilm_float16_rerank200_recall10at10"])
        Lm = minilm.n_lists
        model_ivf = fitted(args.cache, minilm, f"ivf{Lm}-ockm4x2", lambda t: ockstore.IVF(
            Lm, ockstore.OCKM(4, 2, 10, metric="cosine", n_threads=t), n_threads=t), args.build_threads)
        with ockstore.open_index(str(built(args.cache, minilm, f"ivf{Lm}-ockm4x2", model_ivf, "float16",
                                           args.build_threads))) as index_m:
            single, batch = single_over_batch(index_m, Qm, args.single_repeats, options)
            figures["minilm_cosine_ivf_one_query_per_call_over_batch_nprobe32_rerank200"] = single / batch
            figures["minilm_cosine_ivf_one_query_us"], figures["minilm_cosine_ivf_batch_us_per_query"] = (
                single * 1e6, batch * 1e6)
    figures["load_after"] = load_average()
    for key, value in figures.items():
        print(f"{key:58s} {value:.4g}" if isinstance(value, float) else f"{key:58s} {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
