"""The peers of tools/bench_pareto.py: hnswlib, usearch, faiss HNSW32, faiss IVF-PQ fast scan refined by SQ8, and
ScaNN, each behind the same small interface as ockstore's configurations (tools/_pareto_ockstore.py). Benchmark-only:
these libraries are installed in the benchmark environment and never imported by the package.

A system knows how to build its index from a DataSpec into a file (run in a child process with the build's thread
count), open the saved file, set its library to one thread, list its sweep of search parameters and search the
batch of queries at one of them. Build parameters follow the issue; everything else is each library's default.
"""

from __future__ import annotations

import numpy as np

K = 10
CHUNK = 100_000
# One list for the three graph indexes: the candidate-list size of a search (ef >= k).
GRAPH_EF = (10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)


class System:
    """What every system of the benchmark provides (peers here, ockstore configurations in _pareto_ockstore)."""

    id = ""  # unique, stable: names the system on the command line and in the child processes
    name = ""  # label in tables and plots
    library = ""  # the --systems family: hnswlib, usearch, faiss, scann, ockstore
    suffix = ".bin"
    is_ours = False
    modules = ()  # imported by the memory child before its first reading (a library's own code is not the index)

    def __init__(self, data):
        self.data = data
        self.handle = None

    # build side (child process)
    def build_key(self) -> str:
        raise NotImplementedError

    def build(self, path, threads) -> dict:
        """Build the index and save it at ``path``; returns timings {"train_s", "add_s"} (seconds)."""
        raise NotImplementedError

    # search side
    def open(self, path):
        raise NotImplementedError

    def one_thread(self):
        """Set the library's own thread count to one (environment variables are set by the benchmark too)."""

    def sweep(self) -> list:
        """The search parameters, each a dict, from cheap to expensive along each axis."""
        raise NotImplementedError

    def search(self, Q, params):
        """Ids (nq, 10) of the batch Q at ``params``, on one thread."""
        raise NotImplementedError

    def label(self, params) -> str:
        return " ".join(f"{k}={v}" for k, v in params.items())

    def close(self):
        self.handle = None

    def import_libraries(self):
        import importlib

        for name in self.modules:
            importlib.import_module(name)

    def versions(self) -> dict:
        return {}


def _version(distribution):
    import importlib.metadata

    return importlib.metadata.version(distribution)


def _ids(labels):
    """int64 ids from a library's labels (uint64 padding such as 2**64-1 becomes negative: never a true id)."""
    labels = np.asarray(labels)
    return labels.view(np.int64) if labels.dtype == np.uint64 else labels.astype(np.int64, copy=False)


# ------------------------------------------------------------------------------------------------------- hnswlib
class Hnswlib(System):
    id = "hnswlib"
    library = "hnswlib"
    modules = ("hnswlib",)
    M, EF_CONSTRUCTION = 16, 100

    @property
    def name(self):
        return f"hnswlib M={self.M} efC={self.EF_CONSTRUCTION} (float32)"

    def _space(self):
        return "l2" if self.data.metric == "l2" else "ip"  # minilm: inner product of unit vectors = cosine

    def build_key(self):
        return f"{self.data.key}-hnswlib-M{self.M}-efc{self.EF_CONSTRUCTION}-{self._space()}-v{_version('hnswlib')}"

    def build(self, path, threads):
        import time

        import hnswlib

        d = self.data
        index = hnswlib.Index(space=self._space(), dim=d.dim)
        index.init_index(max_elements=d.n_base, ef_construction=self.EF_CONSTRUCTION, M=self.M, random_seed=100)
        index.set_num_threads(threads)
        t0 = time.perf_counter()
        for start in range(0, d.n_base, CHUNK):
            stop = min(d.n_base, start + CHUNK)
            index.add_items(d.base_f32(start, stop), np.arange(start, stop), num_threads=threads)
        add_s = time.perf_counter() - t0
        index.save_index(str(path))
        return {"train_s": 0.0, "add_s": add_s}

    def open(self, path):
        import hnswlib

        self.handle = hnswlib.Index(space=self._space(), dim=self.data.dim)
        self.handle.load_index(str(path))
        self.one_thread()

    def one_thread(self):
        self.handle.set_num_threads(1)

    def sweep(self):
        return [{"ef": ef} for ef in GRAPH_EF]

    def search(self, Q, params):
        self.handle.set_ef(params["ef"])
        return _ids(self.handle.knn_query(Q, k=K, num_threads=1)[0])

    def versions(self):
        return {"hnswlib": _version("hnswlib")}


# ------------------------------------------------------------------------------------------------------- usearch
class Usearch(System):
    """usearch with float16 vectors, connectivity 16 and expansion_add 128 (its defaults); one file, searched either
    loaded into memory or viewed (memory-mapped, ``view=True``)."""

    library = "usearch"
    modules = ("usearch.index",)
    CONNECTIVITY, EXPANSION_ADD = 16, 128

    def __init__(self, data, view):
        super().__init__(data)
        self.view = view
        self.id = "usearch-view" if view else "usearch-load"

    @property
    def name(self):
        how = "view (mmap)" if self.view else "loaded"
        return f"usearch f16 M={self.CONNECTIVITY} efC={self.EXPANSION_ADD}, {how}"

    def _metric(self):
        return "l2sq" if self.data.metric == "l2" else "ip"

    def build_key(self):
        import usearch

        return (f"{self.data.key}-usearch-f16-M{self.CONNECTIVITY}-efc{self.EXPANSION_ADD}-{self._metric()}"
                f"-v{usearch.__version__}")

    def build(self, path, threads):
        import time

        from usearch.index import Index

        d = self.data
        index = Index(ndim=d.dim, metric=self._metric(), dtype="f16", connectivity=self.CONNECTIVITY,
                      expansion_add=self.EXPANSION_ADD)
        t0 = time.perf_counter()
        for start in range(0, d.n_base, CHUNK):
            stop = min(d.n_base, start + CHUNK)
            index.add(np.arange(start, stop, dtype=np.uint64), d.base_f32(start, stop), threads=threads)
        add_s = time.perf_counter() - t0
        index.save(str(path))
        return {"train_s": 0.0, "add_s": add_s, "note": f"SIMD: {index.hardware_acceleration}"}

    def open(self, path):
        from usearch.index import Index

        self.handle = Index.restore(str(path), view=self.view)

    def sweep(self):
        return [{"ef": ef} for ef in GRAPH_EF]

    def search(self, Q, params):
        self.handle.expansion_search = params["ef"]
        return _ids(self.handle.search(Q, K, threads=1).keys)

    def versions(self):
        import usearch

        return {"usearch": usearch.__version__}


# ------------------------------------------------------------------------------------------------------- faiss
def _faiss_metric(data):
    import faiss

    return faiss.METRIC_L2 if data.metric == "l2" else faiss.METRIC_INNER_PRODUCT


class FaissSystem(System):
    library = "faiss"
    suffix = ".faissindex"
    modules = ("faiss",)

    def open(self, path):
        import faiss

        self.handle = faiss.read_index(str(path))
        self.one_thread()

    def one_thread(self):
        import faiss

        faiss.omp_set_num_threads(1)

    def _save(self, index, path):
        import faiss

        faiss.write_index(index, str(path))

    def versions(self):
        import faiss

        return {"faiss": faiss.__version__}


class FaissHNSW(FaissSystem):
    """IndexHNSWFlat(d, 32): float32 vectors, efConstruction 100 (as hnswlib's; faiss's default is 40)."""

    id = "faiss-hnsw"
    M, EF_CONSTRUCTION = 32, 100

    @property
    def name(self):
        return f"faiss HNSW{self.M} efC={self.EF_CONSTRUCTION} (float32)"

    def build_key(self):
        import faiss

        return f"{self.data.key}-faiss-hnsw{self.M}-efc{self.EF_CONSTRUCTION}-{self.data.metric}-v{faiss.__version__}"

    def build(self, path, threads):
        import time

        import faiss

        faiss.omp_set_num_threads(threads)
        d = self.data
        index = faiss.IndexHNSWFlat(d.dim, self.M, _faiss_metric(d))
        index.hnsw.efConstruction = self.EF_CONSTRUCTION
        t0 = time.perf_counter()
        for start in range(0, d.n_base, CHUNK):
            index.add(d.base_f32(start, min(d.n_base, start + CHUNK)))
        add_s = time.perf_counter() - t0
        self._save(index, path)
        return {"train_s": 0.0, "add_s": add_s}

    def sweep(self):
        return [{"ef": ef} for ef in GRAPH_EF]

    def search(self, Q, params):
        self.handle.hnsw.efSearch = params["ef"]
        return self.handle.search(Q, K)[1]


class FaissIVFFastScanRefine(FaissSystem):
    """index_factory("IVF{L},PQ{d/8}x4fs") (4-bit PQ fast scan of the residuals, 8 dimensions per 4-bit
    sub-quantizer: PQ16x4fs on sift) wrapped by IndexRefine(..., IndexScalarQuantizer SQ8): n_probe and k_factor
    swept."""

    id = "faiss-ivfpqfs-sq8"
    PROBES = (1, 2, 4, 8, 16, 32, 64, 128)
    K_FACTORS = (1, 2, 5, 10, 20, 50, 100)

    def _factory(self):
        return f"IVF{self.data.n_lists},PQ{self.data.dim // 8}x4fs"

    @property
    def name(self):
        return f"faiss {self._factory()} + RefineSQ8"

    def build_key(self):
        import faiss

        return f"{self.data.key}-faiss-{self._factory().replace(',', '-')}-sq8-{self.data.metric}-v{faiss.__version__}"

    def build(self, path, threads):
        import time

        import faiss

        faiss.omp_set_num_threads(threads)
        d = self.data
        metric = _faiss_metric(d)
        base = faiss.index_factory(d.dim, self._factory(), metric)
        refine = faiss.IndexRefine(base, faiss.IndexScalarQuantizer(d.dim, faiss.ScalarQuantizer.QT_8bit, metric))
        t0 = time.perf_counter()
        refine.train(np.ascontiguousarray(d.load("learn"), dtype=np.float32))
        train_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for start in range(0, d.n_base, CHUNK):
            refine.add(d.base_f32(start, min(d.n_base, start + CHUNK)))
        add_s = time.perf_counter() - t0
        self._save(refine, path)
        return {"train_s": train_s, "add_s": add_s}

    def open(self, path):
        import faiss

        super().open(path)
        self._ivf = faiss.extract_index_ivf(self.handle)

    def sweep(self):
        probes = [p for p in self.PROBES if p <= self.data.n_lists // 2]
        return [{"n_probe": p, "k_factor": f} for p in probes for f in self.K_FACTORS]

    def search(self, Q, params):
        self._ivf.nprobe = params["n_probe"]
        self.handle.k_factor = float(params["k_factor"])
        return self.handle.search(Q, K)[1]


# ------------------------------------------------------------------------------------------------------- ScaNN
class Scann(System):
    """ScaNN: a k-means tree (1,000 leaves on sift 1M), asymmetric hashing with 2 dimensions per 4-bit block
    (anisotropic threshold 0.2 for dot product, none for L2, as in ScaNN's README and ann-benchmarks), exact
    re-ordering from float32 vectors; leaves_to_search and the re-ordered count swept. Saved as a folder."""

    id = "scann"
    library = "scann"
    suffix = ".scann"
    modules = ("scann",)
    LEAVES_TO_SEARCH = (1, 2, 4, 8, 16, 32, 64, 128)
    REORDER = (10, 20, 50, 100, 200, 500)

    @property
    def name(self):
        return f"ScaNN tree {self.data.scann_leaves}, AH 2, reorder (float32)"

    def _distance(self):
        return "squared_l2" if self.data.metric == "l2" else "dot_product"

    def build_key(self):
        return f"{self.data.key}-scann-tree{self.data.scann_leaves}-ah2-{self._distance()}-v{_version('scann')}"

    def build(self, path, threads):
        import os
        import time

        import scann

        d = self.data
        X = np.ascontiguousarray(d.load("base"), dtype=np.float32)
        threshold = 0.2 if self._distance() == "dot_product" else float("nan")
        t0 = time.perf_counter()
        searcher = (scann.scann_ops_pybind.builder(X, K, self._distance())
                    .tree(num_leaves=d.scann_leaves, num_leaves_to_search=max(1, d.scann_leaves // 10),
                          training_sample_size=min(250_000, d.n_base))
                    .score_ah(2, anisotropic_quantization_threshold=threshold)
                    .reorder(100)
                    .set_n_training_threads(threads)
                    .build())
        train_s = time.perf_counter() - t0
        os.makedirs(path, exist_ok=True)
        searcher.serialize(str(path), relative_path=True)  # the folder is renamed into place after
        return {"train_s": train_s, "add_s": 0.0, "note": "train_s: the whole build (tree, AH, encoding)"}

    def open(self, path):
        import scann

        self.handle = scann.scann_ops_pybind.load_searcher(str(path))
        self.one_thread()

    def one_thread(self):
        self.handle.set_num_threads(1)

    def sweep(self):
        leaves = [n for n in self.LEAVES_TO_SEARCH if n <= self.data.scann_leaves // 2]
        return [{"leaves": n, "reorder": r} for n in leaves for r in self.REORDER]

    def search(self, Q, params):
        ids, _ = self.handle.search_batched(Q, final_num_neighbors=K, leaves_to_search=params["leaves"],
                                            pre_reorder_num_neighbors=params["reorder"])
        return _ids(ids)

    def versions(self):
        return {"scann": _version("scann")}


def peer_systems(data):
    """Every peer of the benchmark, in the order of the tables."""
    return [Hnswlib(data), Usearch(data, view=False), Usearch(data, view=True), FaissHNSW(data),
            FaissIVFFastScanRefine(data), Scann(data)]
