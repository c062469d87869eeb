"""Plain helpers shared by several test files (no fixtures: those live in conftest.py).

Imported as ``from helpers import ...``: conftest.py puts this folder on sys.path.
"""

from __future__ import annotations

import numpy as np


# ------------------------------------------------------------------------------------------------------------ data
def random_rotation(P, seed):
    """A seeded orthogonal P x P matrix (QR of a Gaussian matrix, signs fixed), float32."""
    rng = np.random.default_rng(seed)
    Q, Rq = np.linalg.qr(rng.normal(size=(P, P)))
    return (Q * np.sign(np.diag(Rq))).astype(np.float32)
