"""Benchmark datasets: learn, base, query and ground-truth arrays from a texmex folder, an ann-benchmarks ``.hdf5``
file, or a seeded synthetic generator.

Datasets follow the small interface of Faiss's ``contrib.datasets``: ``learn``, ``base``, ``query`` and
``groundtruth`` arrays (loaded on first use), ``iter_base(chunk_size)`` to stream the base, ``dim`` and ``name``.
The vector-file functions of ``ockstore.vecfiles`` are re-exported here, where dataset code looks for them.
"""

from __future__ import annotations

import os
import re

import numpy as np

from ._validation import as_ids, as_vectors, check_int
from .errors import FormatError
from .evaluation import exact_knn
from .paths import check_input_file
from .vecfiles import _peek_dim, _texmex_kind, count_vecs, iter_vecs, read_vecs, write_vecs

__all__ = [
    "read_vecs",
    "iter_vecs",
    "write_vecs",
    "count_vecs",
    "Dataset",
    "load_texmex",
    "load_hdf5",
    "synthetic",
]

# --------------------------------------------------------------------------------------------------------------------
# datasets


class _Source:
    """One array of a dataset: given in memory, a file read on first use, or a loader function.

    ``convert`` turns what was loaded into the array kept (vectors are kept as they are; ids become int64).
    """

    def __init__(self, role, convert, *, value=None, loader=None, chunker=None, dim=None):
        self.role = role
        self.convert = convert
        self.path = None
        self.array = None
        self.loader, self.chunker, self._dim = loader, chunker, dim
        if loader is not None:
            return
        if isinstance(value, (str, os.PathLike)):
            self.path = check_input_file(value, role)
            _texmex_kind(self.path, role)
        else:
            self.array = convert(value, role)

    def dim(self):
        if self.array is not None:
            return int(self.array.shape[1])
        if self.path is not None:
            return _peek_dim(self.path)
        return self._dim

    def load(self):
        if self.array is None:
            raw = read_vecs(self.path) if self.path is not None else self.loader()
            try:
                self.array = self.convert(raw, self.role)
            except (TypeError, ValueError) as exc:
                raise FormatError(f"{self.describe()}: {exc}") from None
        return self.array

    def iterate(self, chunk_size):
        if self.array is not None:
            return (self.array[i : i + chunk_size] for i in range(0, self.array.shape[0], chunk_size))
        if self.path is not None:
            return iter_vecs(self.path, chunk_size)
        return self.chunker(chunk_size)

    def describe(self):
        return self.path if self.path is not None else f"{self.role} array"


def _as_vectors_kept(value, role):
    return as_vectors(value, role, convert=False)[0]


def _as_ids_2d(value, name):
    return as_ids(value, name, matrix=True, missing_ok=True)


class Dataset:
    """A benchmark dataset: learn (training) vectors, base (database) vectors, queries and exact ground truth.

    Parameters
    ----------
    name : str
    learn, base, query : array-like of shape (n, dim), or path
        Arrays are kept as given (their own dtype); a path (any file :func:`read_vecs` reads) is read on first
        access of the attribute.
    groundtruth : array-like of shape (n_query, k_gt), integers, or path
        Base indices of the exact nearest neighbours of each query, nearest first.
    groundtruth_distances : array-like of shape (n_query, k_gt), optional
        Distances matching ``groundtruth``. Only their equality is used (to recognise ties, see
        :func:`ockstore.evaluation.recall_at_r`), so squared or plain distances serve alike.
    metric : str, default "euclidean"
        The metric the ground truth was computed with, as the source states it (ann-benchmarks also has "angular").

    Attributes
    ----------
    learn, base, query : ndarray of shape (n, dim)
        Read on first access and kept (use :meth:`iter_base` to stream a large base instead). Their dtype is the
        file's (uint8 for SIFT ``.bvecs``; ``.npy`` stays memory-mapped): convert where needed.
    groundtruth : ndarray of shape (n_query, k_gt), dtype int64
    groundtruth_distances : ndarray of shape (n_query, k_gt), float64, or None
    dim : int
        From the queries (a file header, or an array's shape). Every array read later must have ``dim`` columns,
        otherwise FormatError naming the file.
    name, metric : str
    """

    def __init__(self, name, *, learn, base, query, groundtruth, groundtruth_distances=None, metric="euclidean"):
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        if not isinstance(metric, str):
            raise TypeError(f"metric must be a str, got {type(metric).__name__}")
        self.name = name
        self.metric = metric
        self._sources = {}
        for role, value in (("learn", learn), ("base", base), ("query", query), ("groundtruth", groundtruth)):
            convert = _as_ids_2d if role == "groundtruth" else _as_vectors_kept
            self._sources[role] = value if isinstance(value, _Source) else _Source(role, convert, value=value)
        self._gt_dist = None
        if groundtruth_distances is not None:
            gd = np.asarray(groundtruth_distances, dtype=np.float64)
            if gd.ndim != 2:
                raise ValueError(f"groundtruth_distances must have shape (n_query, k_gt), got {gd.shape}")
            self._gt_dist = gd
        self._dim = None

    @property
    def dim(self):
        if self._dim is None:
            self._dim = int(self._sources["query"].dim())
        return self._dim

    def _vectors(self, role):
        src = self._sources[role]
        arr = src.load()
        if arr.shape[1] != self.dim:
            if src.path is not None:
                src.array = None  # do not keep a file that was refused
            raise FormatError(
                f"{src.describe()}: {role} vectors have dimension {arr.shape[1]}, expected {self.dim} like the "
                f"queries of dataset {self.name!r}"
            )
        return arr

    @property
    def learn(self):
        return self._vectors("learn")

    @property
    def base(self):
        return self._vectors("base")

    @property
    def query(self):
        return self._vectors("query")

    @property
    def groundtruth(self):
        return self._sources["groundtruth"].load()

    @property
    def groundtruth_distances(self):
        return self._gt_dist

    def iter_base(self, chunk_size=100_000):
        """Iterate over the base vectors in chunks of at most ``chunk_size`` rows.

        A base not yet read is streamed from its file (memory bounded by the chunk, see :func:`iter_vecs`) and not
        kept; a base already in memory is sliced (the chunks are views of it).
        """
        chunk_size = check_int(chunk_size, "chunk_size", min_value=1)
        src = self._sources["base"]
        dim = self.dim
        chunks = src.iterate(chunk_size)

        def gen():
            for chunk in chunks:
                if chunk.shape[1] != dim:
                    raise FormatError(
                        f"{src.describe()}: base vectors have dimension {chunk.shape[1]}, expected {dim} "
                        f"like the queries of dataset {self.name!r}"
                    )
                yield chunk

        return gen()

    def __repr__(self):
        files = ", ".join(f"{r}={s.describe()!r}" for r, s in self._sources.items())
        return f"Dataset({self.name!r}, {files})"


_ROLE_RE = re.compile(r"^(?P<prefix>.+)_(?P<role>learn|base|query|groundtruth)\.(?:[fbi]vecs(?:\.gz)?|npy)$", re.I)


def load_texmex(folder):
    """Open a dataset folder laid out like texmex's SIFT1M: ``<name>_learn.*``, ``<name>_base.*``, ``<name>_query.*``
    and ``<name>_groundtruth.*``, each a ``.fvecs/.bvecs/.ivecs`` file (optionally ``.gz``) or ``.npy``.

    Nothing but the query file's first record is read here; each array is read on first access. Raises
    FileNotFoundError when a role has no file and ValueError when it has several (e.g. ``.fvecs`` and ``.fvecs.gz``).
    The dataset's name is the common prefix of the four files (the folder's name when they differ).
    """
    if not isinstance(folder, (str, os.PathLike)):
        raise TypeError(f"folder must be a str or os.PathLike, got {type(folder).__name__}")
    folder = os.fsdecode(os.fspath(folder))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"folder: no such directory: {folder!r}")
    found = {}
    prefixes = set()
    for entry in sorted(os.listdir(folder)):
        if entry.startswith("."):  # hidden, e.g. a writer's temporary file
            continue
        m = _ROLE_RE.match(entry)
        if m:
            found.setdefault(m["role"].lower(), []).append(os.path.join(folder, entry))
            prefixes.add(m["prefix"])
    roles = ("learn", "base", "query", "groundtruth")
    missing = [r for r in roles if r not in found]
    if missing:
        raise FileNotFoundError(
            f"folder {folder!r} has no " + ", ".join(f"*_{r}.*vecs[.gz]" for r in missing) + " file"
        )
    for r in roles:
        if len(found[r]) > 1:
            raise ValueError(f"folder {folder!r} has several {r} files: {found[r]}")
    name = prefixes.pop() if len(prefixes) == 1 else os.path.basename(os.path.abspath(folder))
    return Dataset(name, **{r: found[r][0] for r in roles})


def load_hdf5(path):
    """Open an ann-benchmarks ``.hdf5`` file as a :class:`Dataset` (needs the optional h5py: ``ockstore[hdf5]``).

    The file's ``train`` array is both ``learn`` and ``base`` (ann-benchmarks trains on the database), ``test`` is
    ``query``, ``neighbors`` is ``groundtruth`` and ``distances`` (when present) ``groundtruth_distances`` — plain,
    not squared, distances. The file's ``distance`` attribute ("euclidean", "angular", …) becomes ``metric``: the
    ground truth of an "angular" file is by cosine similarity. Arrays are read on first access; ``iter_base`` reads
    slices.
    """
    try:
        import h5py
    except ImportError:
        raise ImportError("reading .hdf5 files needs the optional h5py package: pip install ockstore[hdf5]") from None
    path = check_input_file(path, "path")
    try:
        with h5py.File(path, "r") as f:
            for key in ("train", "test", "neighbors"):
                if key not in f:
                    raise FormatError(f"{path}: ann-benchmarks file has no {key!r} dataset")
                if len(f[key].shape) != 2:
                    raise FormatError(f"{path}: {key!r} has shape {f[key].shape}, expected 2 dimensions")
            metric = f.attrs.get("distance", "euclidean")
            metric = metric.decode() if isinstance(metric, bytes) else str(metric)
            dists = np.asarray(f["distances"], dtype=np.float64) if "distances" in f else None
            dim = int(f["test"].shape[1])
    except OSError as exc:
        raise FormatError(f"{path}: not a readable HDF5 file: {exc}") from None

    def reader(key):
        def load():
            with h5py.File(path, "r") as f:
                return np.asarray(f[key][()])

        return load

    def train_chunks(chunk_size):
        with h5py.File(path, "r") as f:
            train = f["train"]
            for i in range(0, train.shape[0], chunk_size):
                yield np.asarray(train[i : i + chunk_size])

    def vectors(role, key, chunker=None):
        return _Source(role, _as_vectors_kept, loader=reader(key), chunker=chunker, dim=dim)

    train = vectors("train", "train", train_chunks)  # one source: read once for learn and base
    return Dataset(
        os.path.splitext(os.path.basename(path))[0],
        learn=train,
        base=train,
        query=vectors("query", "test"),
        groundtruth=_Source("groundtruth", _as_ids_2d, loader=reader("neighbors")),
        groundtruth_distances=dists,
        metric=metric,
    )


def synthetic(n_learn, n_base, n_query, dim, seed=0, k_gt=100):
    """A seeded synthetic dataset of clustered Gaussian float32 vectors with exact ground truth.

    Data: 20 cluster centres ~ N(0, s²) per dimension, points = centre + N(0, (s/2)²), where the per-dimension
    scales s are log-uniform between 0.1 and 1 in a random order (uneven variances, so rotations and codebooks have
    structure to learn). Learn, base and query are independent draws from that mixture, in that order, from one
    ``np.random.default_rng(seed)``: the same arguments always give the same arrays.

    The ground truth is :func:`exact_knn` over the base (float64, ties by smaller index); its squared distances are
    kept as ``groundtruth_distances``.

    Parameters
    ----------
    n_learn, n_query : int ≥ 0
    n_base : int ≥ 1
    dim : int ≥ 1
    seed : int ≥ 0
    k_gt : int, 1..n_base
    """
    n_learn = check_int(n_learn, "n_learn", min_value=0)
    n_base = check_int(n_base, "n_base", min_value=1)
    n_query = check_int(n_query, "n_query", min_value=0)
    dim = check_int(dim, "dim", min_value=1)
    seed = check_int(seed, "seed", min_value=0)
    k_gt = check_int(k_gt, "k_gt", min_value=1, max_value=n_base)
    rng = np.random.default_rng(seed)
    n_clusters = 20
    scales = rng.permutation(np.geomspace(0.1, 1.0, dim))
    centres = rng.normal(size=(n_clusters, dim)) * scales

    def draw(n):
        labels = rng.integers(0, n_clusters, size=n)
        noise = rng.normal(size=(n, dim)) * (0.5 * scales)
        return (centres[labels] + noise).astype(np.float32)

    learn, base, query = draw(n_learn), draw(n_base), draw(n_query)
    gt_d, gt_i = exact_knn(query, base, k_gt)
    return Dataset(
        f"synthetic-{dim}d-seed{seed}",
        learn=learn,
        base=base,
        query=query,
        groundtruth=gt_i,
        groundtruth_distances=gt_d,
    )
