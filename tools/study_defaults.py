"""The measurements behind ``ockstore.default_quantizer`` (issues 27, 30, 31): 10-recall@10 and time per query of
candidate models, flat and inverted file, 4-bit and 8-bit words, at several base sizes, against hnswlib (M=16,
ef_construction=100) in the same run, all on one thread.

For each dataset and base size, each configuration (``--configs``) is fitted once (on the learn set, or on the first
rows of the base with ``--train base:N``, as a collection trains on its first rows), built into an index file with
the dataset's stored vectors (minilm: float16, cosine; sift: uint8, l2), and searched over a grid of ``n_probe``
(inverted files) and ``rerank``. The recall of every setting comes from one batch search; the settings worth timing
(10@10 at least ``--min-recall``; each rerank's n_probe sweep stops at 0.995 or where 10@10 gains < 0.001) are then
timed in ``--repeats`` interleaved rounds together with hnswlib's ef sweep, each as a batch of the queries and as one
1-D query per call, in process CPU time (the machine is shared: another process's load adds no CPU time here, and
the smallest of the rounds is kept).

A configuration is ``flat:m<M>:k<K>`` (``OCKM(M, 2, 10, n_codewords=K)``: M bytes of codes for K = 16, 2M for
K = 256) or ``ivf<L>:m<M>:k<K>`` (``IVF(L, OCKM(M, 2, 10, n_codewords=K))``); the metric is the dataset's.

    python tools/study_defaults.py --dataset minilm --sizes 10000,20000,40000 --quick
    python tools/study_defaults.py --dataset sift --sizes 100000,1000000 \\
        --configs flat:m8:k16,ivf1024:m8:k16,ivf2048:m8:k16 --out /work/notes/study-results

``--coarse-only`` measures the coarse step alone instead: the share of each query's true 10 nearest that lie in its
n_probe nearest lists, for real queries and for stored rows used as queries (what ``tune`` on documents sees).
``--rule`` measures the rule proposed for ``default_quantizer`` (``RULE``, ``proposed_rule``) at its default search
settings against hnswlib at the recall they reach (``--rule-params`` varies its constants).

    python tools/study_defaults.py --dataset minilm --sizes 40000 --rule --train base:10240
    python tools/study_defaults.py --dataset sift --sizes 100000 --coarse-only --configs ivf256:m8:k16,ivf1024:m8:k16

Models, indexes, hnswlib graphs and data (as .npy) are cached under ``--cache``. Each (dataset, size, train) writes
``<out>/<dataset>-<size>-<train>.json`` (every measurement) and ``.md`` (tables: the fastest setting reaching each
recall target, its ratio to hnswlib's interpolated time at the same recall, and the n_probe each target needs).
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ.setdefault(_name, "2")  # BLAS for brute force and training: the machine's two cores at most

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DATA_ROOT = REPO.parent / "shared" / "data"
if not DATA_ROOT.is_dir():  # a worktree under /work/wt/<name>
    DATA_ROOT = REPO.parents[1] / "shared" / "data"
K = 10
TARGETS = (0.90, 0.95, 0.965, 0.97, 0.98, 0.99)
PROBES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
HNSW_EF = (10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
DATASETS = {
    # name: (folder, metric, stored vectors, default configurations)
    "minilm": ("minilm-real", "cosine", "float16",
               "flat:m12:k16,flat:m24:k16,flat:m48:k16,flat:m6:k256,flat:m12:k256,"
               "ivf64:m24:k16,ivf128:m24:k16,ivf256:m24:k16,ivf128:m12:k256"),
    "sift": ("sift-real", "l2", "uint8",
             "flat:m4:k16,flat:m8:k16,flat:m16:k16,flat:m4:k256,"
             "ivf256:m8:k16,ivf512:m8:k16,ivf1024:m8:k16,ivf2048:m8:k16,ivf1024:m16:k16,ivf1024:m4:k256"),
}
QUICK = {"minilm": "flat:m24:k16,ivf128:m24:k16", "sift": "flat:m8:k16,ivf512:m8:k16"}


def log(*parts):
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


# ---------------------------------------------------------------------------------------------------------- data
class Data:
    """One dataset's arrays, read once from the texmex files and kept as .npy under the cache (memory-mapped)."""

    def __init__(self, name, cache, n_queries):
        self.name = name
        self.folder, self.metric, self.store, self.default_configs = DATASETS[name]
        self.dir = Path(cache) / name / "data"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.n_queries = n_queries
        if not (self.dir / "gt.npy").exists():
            import ockstore

            ds = ockstore.datasets.load_texmex(DATA_ROOT / self.folder)
            log(f"reading {self.folder}")
            for role, arr in (("learn", ds.learn), ("base", ds.base), ("queries", ds.query)):
                np.save(self.dir / f"{role}.npy", arr)
            np.save(self.dir / "gt.npy", np.asarray(ds.groundtruth, dtype=np.int64))
        self.learn = np.load(self.dir / "learn.npy", mmap_mode="r")
        self.base = np.load(self.dir / "base.npy", mmap_mode="r")
        self.queries = np.ascontiguousarray(np.load(self.dir / "queries.npy")[:n_queries], dtype=np.float32)
        self.dim = self.base.shape[1]

    def gt(self, n):
        """Exact top-K ids of the queries among the first n base rows (the dataset's file for the whole base)."""
        if n == self.base.shape[0]:
            return np.load(self.dir / "gt.npy")[: self.n_queries, :K]
        path = self.dir / f"gt-n{n}-q{self.n_queries}.npy"
        if not path.exists():
            from ockstore.evaluation import exact_knn

            Q, B = self.queries, self.base[:n]
            if self.metric == "cosine":  # unit vectors already; normalise anyway so the order is cosine's
                Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
                B = np.asarray(B, dtype=np.float32)
                B = B / np.linalg.norm(B, axis=1, keepdims=True)
            np.save(path, exact_knn(Q, B, K)[1])
        return np.load(path)

    def train_rows(self, train):
        if train == "learn":
            return self.learn
        m = re.fullmatch(r"base:(\d+)", train)
        if not m:
            raise SystemExit(f"--train: 'learn' or 'base:N', got {train!r}")
        return self.base[: int(m[1])]


def recall(I, gt):
    """Mean 10-recall@10."""
    return float(np.mean([len(np.intersect1d(a[:K], b[:K])) for a, b in zip(I, gt)]) / K)


# ---------------------------------------------------------------------------------------------------------- models
@dataclass(frozen=True)
class Config:
    text: str
    n_lists: int  # 0: flat
    M: int
    n_codewords: int

    @staticmethod
    def parse(text):
        m = re.fullmatch(r"(flat|ivf(\d+)):m(\d+):k(16|256)", text)
        if not m:
            raise SystemExit(f"configuration {text!r}: expected flat:m<M>:k<16|256> or ivf<L>:m<M>:k<16|256>")
        return Config(text, int(m[2] or 0), int(m[3]), int(m[4]))

    @property
    def code_bytes(self):
        return self.M * 2 * (4 if self.n_codewords == 16 else 8) // 8

    def model(self, metric, threads):
        import ockstore

        fine = ockstore.OCKM(self.M, 2, 10, n_codewords=self.n_codewords, metric=metric, n_threads=threads)
        return ockstore.IVF(self.n_lists, fine, n_threads=threads) if self.n_lists else fine

    def label(self):
        fine = f"OCKM({self.M},2,10{', K=16' if self.n_codewords == 16 else ''})"
        return f"IVF({self.n_lists}, {fine})" if self.n_lists else fine


# The rule proposed for ockstore.default_quantizer and its default search settings (the notes of the study give
# the measurements behind each constant); --rule measures it, --rule-params changes its constants.
RULE = {"bits_per_dim": 1.0,  # code bits per dimension: OCKM(M = P / 8, 2, 10, K = 16), P / 8 bytes
        "flat_below": 65_536,  # n below this: flat; else IVF
        "sqrt_div": 2.0,  # n_lists: the power of two nearest sqrt(n) / sqrt_div
        "scan_rows": 32_768,  # default n_probe: at least the lists holding this many rows...
        "probe_sqrt": 2.0,  # ...and at least probe_sqrt * sqrt(n_lists)
        "rerank_factor": 10}  # default rerank: rerank_factor * k candidates


def proposed_rule(n, dim, rule=RULE):
    """(Config, default search keywords) of the rule for n vectors of dimension dim."""
    import math

    M = max(1, round(dim * rule["bits_per_dim"] / 8))
    params = {"rerank": int(rule["rerank_factor"] * K)}
    if n < rule["flat_below"]:
        return Config.parse(f"flat:m{M}:k16"), params
    L = 2 ** max(0, round(math.log2(math.sqrt(n) / rule["sqrt_div"])))
    n_probe = min(L, max(math.ceil(L * rule["scan_rows"] / n), math.ceil(rule["probe_sqrt"] * math.sqrt(L))))
    return Config.parse(f"ivf{L}:m{M}:k16"), {"n_probe": n_probe, **params}


def fitted(data, config, train, cache, threads):
    """(model, fit seconds): fitted on ``train`` rows once, then loaded from the cache."""
    import ockstore

    key = f"{config.text.replace(':', '-')}-{train.replace(':', '')}"
    path = Path(cache) / data.name / "models" / f"{key}.ockq"
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = path.with_suffix(".json")
    if path.exists() and meta.exists():
        return ockstore.load_quantizer(str(path)), json.loads(meta.read_text())["fit_s"]
    X = np.asarray(data.train_rows(train))
    t0 = time.perf_counter()
    model = config.model(data.metric, threads).fit(X)
    fit_s = time.perf_counter() - t0
    ockstore.save_quantizer(str(path) + ".part", model)
    os.replace(str(path) + ".part", path)
    meta.write_text(json.dumps({"fit_s": fit_s, "threads": threads, "rows": len(X)}))
    log(f"fitted {key} on {len(X)} rows in {fit_s:.1f} s")
    return model, fit_s


def built(data, config, train, n, model, cache, threads):
    """(path of the index of the first n base rows, build seconds or None when cached)."""
    import ockstore

    key = f"{config.text.replace(':', '-')}-{train.replace(':', '')}-n{n}-{data.store}"
    path = Path(cache) / data.name / "indexes" / f"{key}.ock"
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        return path, None
    t0 = time.perf_counter()
    index = ockstore.Index.from_vectors(model, data.base[:n], store_vectors=data.store, n_threads=threads)
    index.save(str(path) + ".part")
    os.replace(str(path) + ".part", path)
    build_s = time.perf_counter() - t0
    log(f"built {key} in {build_s:.1f} s")
    return path, build_s


def hnsw_index(data, n, cache, threads):
    import hnswlib

    space = "l2" if data.metric == "l2" else "ip"  # unit vectors: inner product orders as cosine
    path = Path(cache) / data.name / "hnsw" / f"n{n}-M16-efc100-{space}.bin"
    path.parent.mkdir(parents=True, exist_ok=True)
    index = hnswlib.Index(space=space, dim=data.dim)
    if path.exists():
        index.load_index(str(path))
    else:
        t0 = time.perf_counter()
        index.init_index(max_elements=n, ef_construction=100, M=16, random_seed=100)
        for start in range(0, n, 100_000):
            stop = min(n, start + 100_000)
            index.add_items(np.asarray(data.base[start:stop], dtype=np.float32), np.arange(start, stop),
                            num_threads=threads)
        index.save_index(str(path) + ".part")
        os.replace(str(path) + ".part", path)
        log(f"built hnswlib n={n} in {time.perf_counter() - t0:.1f} s ({threads} threads)")
    index.set_num_threads(1)
    return index


# ---------------------------------------------------------------------------------------------------------- runs
@dataclass
class Setting:
    system: str  # a config's text, or "hnswlib"
    params: dict
    search_batch: object  # () -> ids
    search_one: object  # (q) -> ids
    recall: float = 0.0
    batch_us: float = float("inf")
    one_us: float = float("inf")

    def row(self):
        return {"system": self.system, **self.params, "recall": self.recall,
                "batch_us": self.batch_us, "one_us": self.one_us}


def ockstore_settings(config, index, Q, gt, min_recall, reranks):
    """(every setting of one index with its recall, those worth timing: recall >= min_recall)."""
    probes = [None] if not config.n_lists else [p for p in PROBES if p <= config.n_lists]
    out, timed = [], []
    for rerank in reranks:
        previous = -1.0
        for p in probes:
            opts = {"rerank": rerank, "n_threads": 1} if p is None else {"n_probe": p, "rerank": rerank,
                                                                       "n_threads": 1}
            ids = index.search(Q, K, **opts)[1]
            s = Setting(config.text, {k: v for k, v in opts.items() if k != "n_threads"},
                        lambda o=opts: index.search(Q, K, **o), lambda q, o=opts: index.search(q, K, **o),
                        recall(ids, gt))
            out.append(s)
            if s.recall >= min_recall:
                timed.append(s)
            if s.recall >= 0.995 or s.recall < previous + 0.001:  # more lists only cost time now
                break
            previous = s.recall
    return out, timed


def hnsw_settings(index, Q, gt):
    out = []
    for ef in HNSW_EF:
        def batch(ef=ef):
            index.set_ef(ef)
            return index.knn_query(Q, k=K, num_threads=1)[0]

        def one(q, ef=ef):
            return index.knn_query(q, k=K, num_threads=1)[0]

        ids = batch()
        out.append(Setting("hnswlib", {"ef": ef}, batch, one, recall(ids.astype(np.int64), gt)))
        if out[-1].recall >= 0.999:
            break
    return out


def time_rounds(settings, Q, repeats, n_one):
    """Each setting's batch and one-query-per-call CPU time per query: ``repeats`` rounds over all settings (so noise
    spreads over all of them alike), the smallest of the rounds."""
    Q1 = Q[:n_one]
    for r in range(repeats):
        t_round = time.perf_counter()
        for s in settings:
            s.search_batch()  # warms (and sets hnswlib's ef for the one-query calls after it)
            t0 = time.process_time()
            s.search_batch()
            s.batch_us = min(s.batch_us, (time.process_time() - t0) / len(Q) * 1e6)
            one = s.search_one
            for q in Q1[:20]:
                one(q)
            t0 = time.process_time()
            for q in Q1:
                one(q)
            s.one_us = min(s.one_us, (time.process_time() - t0) / len(Q1) * 1e6)
        log(f"timing round {r + 1}/{repeats}: {len(settings)} settings in {time.perf_counter() - t_round:.0f} s")


def interpolated_us(curve, target, field):
    """hnswlib's time per query at 10@10 = ``target``, linear between the ef settings around it (None beyond)."""
    pts = sorted((s.recall, getattr(s, field)) for s in curve)
    best = None
    for (r0, t0), (r1, t1) in zip(pts, pts[1:]):
        if r0 <= target <= r1:
            t = t0 if r1 == r0 else t0 + (t1 - t0) * (target - r0) / (r1 - r0)
            best = t if best is None else min(best, t)
    if best is None and pts and pts[0][0] >= target:
        best = min(t for r, t in pts)
    return best


def fastest_reaching(settings, target, field):
    ok = [s for s in settings if s.recall >= target and np.isfinite(getattr(s, field))]
    return min(ok, key=lambda s: getattr(s, field)) if ok else None


def probes_needed(all_settings, n_lists, target):
    """{rerank: the smallest n_probe whose 10@10 reaches target} of one inverted file."""
    need = {}
    for s in all_settings:
        if s.recall >= target:
            r = s.params["rerank"]
            need[r] = min(need.get(r, 1 << 30), s.params["n_probe"])
    return need


# ---------------------------------------------------------------------------------------------------------- coarse
COARSE_FRACTIONS = (1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 3 / 8, 1 / 2)


def coarse_recall(index, Q, gt, metric, probes):
    """{n_probe: mean fraction of each query's true K nearest that lie in its n_probe nearest lists}: what the
    coarse step alone lets through, an upper bound of 10@10 at that n_probe whatever the codes and the re-ranking."""
    ids = np.asarray(index.ids)
    list_of = np.empty(ids.max() + 1, dtype=np.int64)
    list_of[ids] = index.row_lists()
    C = np.asarray(index.quantizer.centroids, dtype=np.float64)
    Q = np.asarray(Q, dtype=np.float64)
    if metric == "cosine":
        Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    keys = (C * C).sum(1)[None, :] - 2 * Q @ C.T  # what ranks the lists for "l2" and "cosine" alike
    order = np.argsort(keys, axis=1, kind="stable")
    rank = np.empty_like(order)
    rank[np.arange(len(Q))[:, None], order] = np.arange(order.shape[1])[None, :]
    true_rank = np.take_along_axis(rank, list_of[gt[:, :K]], axis=1)  # each neighbour's list's rank for its query
    return {p: float((true_rank < p).mean()) for p in probes}


def document_queries(data, n, count, seed=0):
    """(queries, true K nearest) for ``count`` stored rows used as queries (themselves left out): what a tuning on
    the index's own rows sees, next to real queries."""
    from ockstore.evaluation import exact_knn

    rows = np.sort(np.random.default_rng(seed).choice(n, count, replace=False))
    Q = np.asarray(data.base[rows], dtype=np.float32)
    B = np.asarray(data.base[:n], dtype=np.float32)
    if data.metric == "cosine":
        Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
        B = B / np.linalg.norm(B, axis=1, keepdims=True)
    I = exact_knn(Q, B, K + 1)[1]
    return Q, np.array([[i for i in r if i != row][:K] for r, row in zip(I, rows)])


# ---------------------------------------------------------------------------------------------------------- report
def markdown(result):
    lines = [f"## {result['dataset']} n={result['n']:,} (models fitted on {result['train']}; "
             f"{result['n_queries']} queries, one thread, CPU µs per query, min of {result['repeats']} rounds)", ""]
    lines.append("| system | code B | fit s | target | setting | 10@10 | one/call µs | batch µs | "
                 "hnsw one µs | ratio one | hnsw batch µs | ratio batch |")
    lines.append("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in result["summary"]:
        lines.append("| {system} | {code_bytes} | {fit_s} | {target} | {setting} | {recall} | {one_us} | {batch_us} | "
                     "{hnsw_one_us} | {ratio_one} | {hnsw_batch_us} | {ratio_batch} |".format(
                         **{k: ("—" if v is None else f"{v:.3f}" if k in ("recall", "target") else
                                f"{v:.2f}" if k.startswith("ratio") else f"{v:.1f}" if isinstance(v, float) else v)
                            for k, v in row.items()}))
    if result.get("rule"):
        m = result["rule"].get("measured", {})
        fmt = lambda v: "—" if v is None else f"{v:.2f}"  # noqa: E731
        lines += ["", f"**rule**: {result['rule']['label']}, defaults {result['rule']['defaults']}: 10@10 "
                  f"{m.get('recall', 0):.3f}, one/call {m.get('one_us', 0):.1f} µs (hnswlib at that recall "
                  f"{fmt(m.get('hnsw_one_us'))}, ratio {fmt(m.get('ratio_one'))}), "
                  f"batch {m.get('batch_us', 0):.1f} µs (hnswlib {fmt(m.get('hnsw_batch_us'))}, "
                  f"ratio {fmt(m.get('ratio_batch'))}); hnswlib's best setting measured: "
                  f"{result['rule'].get('hnsw_best')}"]
    lines += ["", "n_probe needed (smallest reaching the target, per rerank) as n_probe/n_lists:", ""]
    for system, need in result["probes_needed"].items():
        parts = []
        for target, per_rerank in need.items():
            parts.append(f"{target}: " + ", ".join(f"R{r}→{p}" for r, p in sorted(per_rerank.items(),
                                                                                   key=lambda x: int(x[0]))))
        lines.append(f"- {system}: " + "; ".join(parts))
    if result.get("coarse"):
        lines += ["", "coarse step alone: fraction of the true 10 nearest in the n_probe nearest lists, real queries / "
                  "stored rows as queries (n_probe/n_lists):", ""]
        for system, c in result["coarse"].items():
            L = result["models"][system]["n_lists"]
            lines.append(f"- {system}: " + ", ".join(
                f"{int(p)}/{L} {c['queries'][p]:.3f}/{c['documents'][p]:.3f}" for p in c["queries"]))
    lines += ["", "hnswlib: " + ", ".join(f"ef{s['ef']} {s['recall']:.3f} {s['one_us']:.0f}/{s['batch_us']:.0f}µs"
                                          for s in result["rows"] if s["system"] == "hnswlib"), ""]
    return "\n".join(lines)


def run(data, n, configs, train, args):
    import ockstore

    gt = data.gt(n)
    Q = data.queries
    result = {"dataset": data.name, "n": n, "train": train, "n_queries": len(Q), "repeats": args.repeats,
              "load_before": os.getloadavg(), "models": {}, "rows": []}
    all_by_system, timed, opened = {}, [], []
    defaults = {}
    if args.rule is not None:
        config, params = proposed_rule(n, data.dim, args.rule)
        configs, defaults[config.text] = [config], params
        result["rule"] = {"constants": args.rule, "config": config.text, "label": config.label(), "defaults": params}
        log(f"rule for n={n}, dim={data.dim}: {config.label()}, defaults {params}")
    docs = document_queries(data, n, 500)
    for config in configs:
        if config.n_lists and 40 * config.n_lists > len(data.train_rows(train)):
            log(f"skip {config.text}: fewer than 40 training rows per list")
            continue
        model, fit_s = fitted(data, config, train, args.cache, args.threads)
        path, build_s = built(data, config, train, n, model, args.cache, args.threads)
        index = ockstore.open_index(str(path))
        opened.append(index)
        t0 = time.perf_counter()
        skip = args.coarse_only or (args.rule is not None and not args.rule_sweep)
        every, chosen = ([], []) if skip else ockstore_settings(config, index, Q, gt, args.min_recall, args.reranks)
        if every:
            log(f"{config.text}: {len(every)} settings, best 10@10 {max(s.recall for s in every):.4f}, "
                f"{len(chosen)} to time ({time.perf_counter() - t0:.0f} s)")
        if config.text in defaults:  # the rule's default setting, timed whatever its recall
            opts = {**defaults[config.text], "n_threads": 1}
            d = Setting("default " + config.text, defaults[config.text], lambda o=opts: index.search(Q, K, **o),
                        lambda q, o=opts: index.search(q, K, **o), recall(index.search(Q, K, **opts)[1], gt))
            timed.append(d)
            result["default_setting"] = d
        all_by_system[config.text] = every
        if config.n_lists:
            probes = sorted({max(1, round(f * config.n_lists)) for f in COARSE_FRACTIONS})
            result.setdefault("coarse", {})[config.text] = {
                "queries": coarse_recall(index, Q, gt, data.metric, probes),
                "documents": coarse_recall(index, *docs, data.metric, probes)}
        timed += chosen
        result["models"][config.text] = {"label": config.label(), "code_bytes": config.code_bytes, "fit_s": fit_s,
                                          "build_s": build_s, "file_bytes": path.stat().st_size,
                                          "n_lists": config.n_lists}
    hnsw = [] if args.coarse_only else hnsw_settings(hnsw_index(data, n, args.cache, args.threads), Q, gt)
    if timed or hnsw:
        time_rounds(timed + hnsw, Q, args.repeats, args.one_queries)
    result["rows"] = [s.row() for s in hnsw] + [s.row() for e in all_by_system.values() for s in e]
    summary = []
    for system, every in all_by_system.items():
        info = result["models"][system]
        for target in TARGETS:
            s = fastest_reaching(every, target, "one_us")
            if s is None:
                continue
            b = fastest_reaching(every, target, "batch_us")
            h1 = interpolated_us(hnsw, s.recall, "one_us")
            hb = interpolated_us(hnsw, b.recall, "batch_us")
            summary.append({"system": info["label"], "code_bytes": info["code_bytes"],
                            "fit_s": round(info["fit_s"], 1), "target": target,
                            "setting": " ".join(f"{k}={v}" for k, v in s.params.items()), "recall": s.recall,
                            "one_us": s.one_us, "batch_us": b.batch_us, "hnsw_one_us": h1,
                            "ratio_one": h1 / s.one_us if h1 else None, "hnsw_batch_us": hb,
                            "ratio_batch": hb / b.batch_us if hb else None,
                            "batch_setting": " ".join(f"{k}={v}" for k, v in b.params.items())})
    result["summary"] = summary
    if "default_setting" in result:
        d = result.pop("default_setting")
        h1, hb = interpolated_us(hnsw, d.recall, "one_us"), interpolated_us(hnsw, d.recall, "batch_us")
        top = max(hnsw, key=lambda x: x.recall)  # when hnswlib's sweep stops short of the rule's recall
        result["rule"]["hnsw_best"] = {"ef": top.params["ef"], "recall": top.recall, "one_us": top.one_us,
                                       "batch_us": top.batch_us}
        result["rule"]["measured"] = {**d.row(), "hnsw_one_us": h1, "hnsw_batch_us": hb,
                                      "ratio_one": h1 / d.one_us if h1 else None,
                                      "ratio_batch": hb / d.batch_us if hb else None}
    result["probes_needed"] = {
        result["models"][sys_]["label"]: {str(t): {str(r): p for r, p in probes_needed(every, 0, t).items()}
                                          for t in (0.95, 0.965, 0.97, 0.98, 0.99)}
        for sys_, every in all_by_system.items() if result["models"][sys_]["n_lists"]}
    result["load_after"] = os.getloadavg()
    for index in opened:
        index.close()
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=sorted(DATASETS), required=True)
    parser.add_argument("--sizes", default=None, help="base sizes, comma-separated (default: the whole base)")
    parser.add_argument("--configs", default=None, help="comma-separated configurations (see above)")
    parser.add_argument("--train", default="learn", help="'learn', or 'base:N' (the first N base rows)")
    parser.add_argument("--quick", action="store_true", help="two configurations, 200 queries, 2 rounds")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--one-queries", type=int, default=None, help="queries timed one per call (default all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reranks", default="20,30,50,100,200", help="rerank values, comma-separated")
    parser.add_argument("--min-recall", type=float, default=0.85, help="time only settings at least this good")
    parser.add_argument("--rule", action="store_true", help="the configuration and default settings of the rule "
                        "proposed for default_quantizer (RULE), instead of --configs")
    parser.add_argument("--rule-params", default="", help="changes to RULE, e.g. flat_below=10000,sqrt_div=2")
    parser.add_argument("--rule-sweep", action="store_true", help="with --rule: the whole n_probe/rerank sweep of "
                        "the rule's configuration too (else its default setting only)")
    parser.add_argument("--coarse-only", action="store_true",
                        help="fit and build, then only the coarse step's share of true neighbours (no timing)")
    parser.add_argument("--threads", type=int, default=2, help="threads for fitting and building (not searching)")
    parser.add_argument("--cache", default="/work/notes/study-cache")
    parser.add_argument("--out", default=str(REPO / "bench-results" / "study-defaults"))
    args = parser.parse_args()
    if args.quick:
        args.queries, args.repeats = min(args.queries, 200), min(args.repeats, 2)
        args.configs = args.configs or QUICK[args.dataset]
    args.one_queries = args.one_queries or args.queries
    args.reranks = [int(r) for r in args.reranks.split(",")]
    if args.rule:
        args.rule = dict(RULE)
        for item in filter(None, args.rule_params.split(",")):
            name, value = item.split("=")
            if name not in RULE:
                raise SystemExit(f"--rule-params: {name!r} is not one of {', '.join(RULE)}")
            args.rule[name] = float(value)
    else:
        args.rule = None
    data = Data(args.dataset, args.cache, args.queries)
    configs = [Config.parse(c) for c in (args.configs or data.default_configs).split(",")]
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else [data.base.shape[0]]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for n in sizes:
        if n > data.base.shape[0]:
            raise SystemExit(f"--sizes: {n} is more than the {data.base.shape[0]} base rows")
        result = run(data, n, configs, args.train, args)
        stem = (f"{data.name}-{n}-{args.train.replace(':', '')}{'-quick' if args.quick else ''}"
                f"{'-coarse' if args.coarse_only else ''}{'-rule' if args.rule else ''}")
        (out / f"{stem}.json").write_text(json.dumps(result, indent=1))
        text = markdown(result)
        (out / f"{stem}.md").write_text(text)
        print(text, flush=True)


if __name__ == "__main__":
    sys.exit(main())
