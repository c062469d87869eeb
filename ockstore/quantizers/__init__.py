"""The models: PQ, CKM, ECKM, OCKM (cartesian.py), the inverted file's IVF (ivf.py), their training
(training.py, kmeans.py), the arrays they keep in kernel layouts (tables.py), the norm levels and the value ranges of
sq8 (norm_levels.py, sq8.py), the parameter table (params.py)."""

from .cartesian import CKM, ECKM, METHODS, OCKM, PQ, Quantizer
from .ivf import IVF
from .default import default_quantizer

__all__ = ["PQ", "CKM", "ECKM", "OCKM", "Quantizer", "IVF", "METHODS", "default_quantizer"]
