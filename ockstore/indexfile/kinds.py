"""The kinds of index, registered in ``ockstore._registry``: the one module that names every kind (docs/ARCHITECTURE.md,
"Kinds of index"). Each kind's model, index, writer and file schema live in modules of their own that never import
another kind's; ``import ockstore`` imports this module, so the registry is complete before any call.

    kind   model            index      writer           files
    flat   PQ, CKM, ECKM,   Index      IndexWriter      schema.FLAT_FILES ("index", "quantizer")
           OCKM (Quantizer)
    ivf    IVF              IVFIndex   IVFIndexWriter   ivf_schema.IVF_FILES ("ivf-index", "ivf-quantizer")

A new kind (say, 4-bit codes scanned in registers) is a model class, an index class (on ``Index``), a writer class
(on ``IndexWriter``), a file schema (on ``schema.FileSchema``), and one ``register`` call below.
"""

from __future__ import annotations

from .. import _registry
from ..index import Index
from ..ivf_index import IVFIndex
from ..quantizers.ivf import IVF
from ..quantizers.cartesian import METHODS, Quantizer
from .ivf_schema import IVF_FILES
from .ivf_writer import IVFIndexWriter
from .schema import FLAT_FILES
from .writer import IndexWriter

__all__ = ["FLAT", "INVERTED_FILE"]

FLAT = _registry.register(_registry.IndexKind(
    "flat", Quantizer, tuple(cls.__name__ for cls in METHODS.values()), Index, IndexWriter, FLAT_FILES))
INVERTED_FILE = _registry.register(_registry.IndexKind("ivf", IVF, ("IVF",), IVFIndex, IVFIndexWriter, IVF_FILES))
