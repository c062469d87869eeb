"""ockstore's configurations for tools/bench_pareto.py, through the public API only (benchmark-only module).

Each configuration family is one function of (DataSpec, features) returning systems; ``FAMILIES`` lists them, so a
new family is one function more. Optional features of the library are detected by behaviour, not by version, so
the same script measures them as soon as they land:

- ``fastscan4``: a model with ``n_codewords=16`` is stored two codes per byte (an index of OCKM(8, 2, 10,
  n_codewords=16) takes at most 9 bytes per vector: 8 bytes of codes plus the norm byte) — issue 18;
- ``sq8``: ``store_vectors="sq8"`` is accepted — issue 19;
- ``tune``: ``ockstore.tune`` exists — issue 19; each configuration is then also searched at the parameters it picks
  for 10-recall@10 = 0.95 on held-out queries;
- ``no_rerank``: the value of ``rerank`` that means "no re-ranking": 0 if a search accepts it, else None (today's
  spelling; once search re-ranks by default, None may no longer mean "none").
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import numpy as np

from _peers import K, System

REPO = Path(__file__).resolve().parents[1]
PROBES = (1, 2, 4, 8, 16, 32, 64, 128)
RERANKS = (0, 10, 20, 50, 100, 200, 500, 1000)  # 0: no re-ranking
TUNE_TARGET = 0.95


def detect_features():
    """Which optional features this ockstore has (see the module's docstring), by trying them on tiny data."""
    import ockstore

    rng = np.random.default_rng(0)
    X = (rng.random((300, 16)) * 4).astype(np.float32)
    features = {"fastscan4": False, "sq8": False, "tune": hasattr(ockstore, "tune"), "no_rerank": None}
    try:
        q16 = ockstore.OCKM(8, 2, 10, n_codewords=16, n_iter=2).fit(X)
        features["fastscan4"] = ockstore.Index.from_vectors(q16, X).bytes_per_vector <= 9
    except (ValueError, TypeError):
        pass
    q = ockstore.OCKM(2, 2, 10, n_iter=2).fit(X)
    try:
        ockstore.Index.from_vectors(q, X, store_vectors="sq8")
        features["sq8"] = True
    except (ValueError, TypeError):
        pass
    index = ockstore.Index.from_vectors(q, X, store_vectors="float32")
    try:
        index.search(X[:2], 1, rerank=0, n_threads=1)
        features["no_rerank"] = 0
    except (ValueError, TypeError):
        pass
    return features


def source_hash():
    """A hash of the ockstore package's sources (.py, .pyx, .pxd, .h): the cache key of ockstore's files, so a file
    built by other code is rebuilt rather than reused."""
    h = hashlib.sha1()
    root = REPO / "ockstore"
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".pyx", ".pxd", ".h") and p.is_file()):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:10]


class OckstoreConfig(System):
    """One ockstore configuration: a model (made unfitted, fitted on the learn set), a stored-vector dtype, flat or
    inverted file. Built with ``build_index``, opened with ``open_index`` (read-only mmap), searched with
    ``index.search(Q, 10, n_probe=..., rerank=..., n_threads=1)``."""

    library = "ockstore"
    suffix = ".ock"
    is_ours = True
    modules = ("ockstore",)

    def __init__(self, data, features, slug, name, make_model, store, ivf):
        super().__init__(data)
        self.features = features
        self.slug, self.name, self.make_model, self.store, self.ivf = slug, name, make_model, store, ivf
        self.id = f"ock-{slug}"

    def build_key(self):
        return f"{self.data.key}-ockstore-{self.slug}-src{source_hash()}"

    def build(self, path, threads):
        import ockstore

        model = self.make_model(threads)
        t0 = time.perf_counter()
        model.fit(self.data.load("learn"))
        train_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        ockstore.build_index(str(path), model, self.data.load("base"), store_vectors=self.store, n_threads=threads)
        return {"train_s": train_s, "add_s": time.perf_counter() - t0}

    def open(self, path):
        import ockstore

        self.handle = ockstore.open_index(str(path))

    def close(self):
        if self.handle is not None:
            self.handle.close()
        self.handle = None

    def sweep(self):
        if not self.ivf:
            return [{"rerank": r} for r in RERANKS]
        return [{"n_probe": p, "rerank": r} for p in PROBES if p <= self.data.n_lists // 2 for r in RERANKS]

    def keywords(self, params):
        """The search keywords of ``params`` (a sweep point, or {"tuned": keywords} from ``tune``)."""
        if "tuned" in params:
            return dict(params["tuned"])
        kw = {"rerank": self.features["no_rerank"] if params["rerank"] == 0 else params["rerank"]}
        if self.ivf:
            kw["n_probe"] = params["n_probe"]
        return kw

    def search(self, Q, params):
        return self.handle.search(Q, K, n_threads=1, **self.keywords(params))[1]

    def label(self, params):
        if "tuned" in params:
            return "tune(0.95): " + " ".join(f"{k}={v}" for k, v in params["tuned"].items())
        return super().label(params)

    def tune(self, queries, ground_truth):
        """``ockstore.tune`` at 10-recall@10 = 0.95 on held-out queries (one thread): (its keywords, seconds)."""
        import ockstore

        t0 = time.perf_counter()
        keywords = ockstore.tune(self.handle, queries, k=K, target_recall=TUNE_TARGET, ground_truth=ground_truth,
                                 n_threads=1)
        return dict(keywords), time.perf_counter() - t0

    def versions(self):
        import ockstore

        return {"ockstore": ockstore.__version__, "ockstore_src": source_hash()}


def _metric(data):
    return "l2" if data.metric == "l2" else "cosine"


def _stores(data, features):
    """The stored-vector dtypes worth measuring: sift's integers 0..255 are exact in uint8; minilm's floats in
    float16, and in sq8 once it exists (one byte per dimension, as uint8 is for sift)."""
    if data.source == "sift":
        return ["uint8"]
    return ["float16"] + (["sq8"] if features["sq8"] else [])


def _fine_quantizers(data, features):
    """(slug, label, factory(threads)) of the fine quantizers: OCKM(4, 2, 10) (64-bit, 8-bit words) and, with fast
    scan, OCKM(8, 2, 10, n_codewords=16) (64-bit, 4-bit words)."""
    import ockstore

    metric = _metric(data)
    out = [("ockm4x2", "OCKM(4, 2, 10)", lambda t: ockstore.OCKM(4, 2, 10, metric=metric, n_threads=t))]
    if features["fastscan4"]:
        out.append(("ockm8x2k16", "OCKM(8, 2, 10, K=16)",
                    lambda t: ockstore.OCKM(8, 2, 10, n_codewords=16, metric=metric, n_threads=t)))
    return out


def flat_family(data, features):
    """Exhaustive scans of every code, re-ranked from the stored vectors."""
    return [OckstoreConfig(data, features, f"flat-{slug}-{store}", f"ockstore flat {label}, {store}",
                           make, store, ivf=False)
            for slug, label, make in _fine_quantizers(data, features) for store in _stores(data, features)]


def ivf_family(data, features):
    """Inverted files with the dataset's number of lists over each fine quantizer, re-ranked from stored vectors."""
    import ockstore

    L = data.n_lists
    out = []
    for slug, label, make in _fine_quantizers(data, features):
        for store in _stores(data, features):
            def make_ivf(threads, make=make):
                return ockstore.IVF(L, make(threads), n_threads=threads)

            out.append(OckstoreConfig(data, features, f"ivf{L}-{slug}-{store}", f"ockstore IVF{L} {label}, {store}",
                                      make_ivf, store, ivf=True))
    return out


FAMILIES = (flat_family, ivf_family)


def ockstore_systems(data, features):
    """Every ockstore configuration for ``data``, family after family."""
    return [system for family in FAMILIES for system in family(data, features)]
