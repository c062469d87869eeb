"""ockstore: compact-code vector indexes with Optimized Cartesian K-Means.

Train a quantizer (PQ, CKM, ECKM, OCKM), encode vectors into bytes, store them in one file that any process opens
read-only through mmap, and search it with asymmetric (ADC) or symmetric (SDC) distances; an inverted file (IVF) over
any of them searches large bases in sublinear time.
"""

try:
    from . import _kernels  # noqa: F401  (the compiled loops)
except ImportError as exc:  # pragma: no cover - exercised by hand on broken installs
    if "OCKSTORE_SIMD" in str(exc):  # a bad setting, not a broken build: its own message says what to do
        raise
    raise ImportError(
        "ockstore's compiled extension ockstore._kernels is missing or broken: "
        f"{exc}. "
        "Rebuild them with `pip install -e .` (or `python setup.py build_ext --inplace`) from the source folder."
    ) from exc

from ._version import __version__
from .errors import CollectionLockedError, FormatError, NotFittedError
from .index import Index
from .indexfile.reader import file_info, load_quantizer, open_index
from .indexfile.writer import IndexWriter, build_index, save_quantizer
from .quantizers.ivf import IVF
from .ivf_index import IVFIndex
from .quantizers.cartesian import CKM, ECKM, OCKM, PQ, Quantizer
from .quantizers.default import default_quantizer
from .indexfile import kinds as _index_kinds  # noqa: F401  (registers the kinds of index: flat, inverted file)
from .collection import Collection, CollectionWarning, create_collection, open_collection
from .search.tune import tune
from . import datasets, evaluation, paths

__all__ = [
    "PQ", "CKM", "ECKM", "OCKM", "Quantizer", "IVF", "default_quantizer",
    "Index", "IVFIndex", "IndexWriter", "build_index", "open_index", "file_info", "save_quantizer", "load_quantizer",
    "Collection", "create_collection", "open_collection", "CollectionWarning", "tune",
    "FormatError", "NotFittedError", "CollectionLockedError",
    "datasets", "evaluation", "paths",
    "__version__",
]
