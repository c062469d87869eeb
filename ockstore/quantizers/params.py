"""The parameters of the quantizers and their rules, written once (docs/ARCHITECTURE.md, "Conventions").

One table, ``PARAMETERS``, says for every constructor argument of PQ, CKM, ECKM and OCKM what it accepts. It drives
the constructors and ``set_params`` (TypeError or ValueError naming the parameter), the index-file reader (a
FormatError naming the meta key, ``ockstore.indexfile``) and the command line (usage errors naming the option). The
defaults live in one place too, the constructors' signatures (what ``help()`` shows); ``get_params`` reads the
parameter names from there, so a method fixes a parameter simply by not taking it (PQ has no ``beam_width``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._validation import check_bool, check_choice, check_float, check_int, resolve_n_threads

__all__ = ["Parameter", "PARAMETERS", "STORED_PARAMETERS", "METRICS"]


@dataclass(frozen=True)
class Parameter:
    """The rule of one quantizer parameter.

    kind : "int", "float", "seed", "threads", "bool" or "choice"
    low, high : bounds of an "int" (inclusive; None: unbounded) or the lower bound of a "float"
    choices : the accepted strings of a "choice"
    stored : written in the ``params`` map of index and quantizer files (the model's parameters, compared by ``==``)
    structural : changing it on a fitted quantizer discards the learned model (it no longer fits the arrays)
    absent_means : for a parameter added after format 1.0: the value that files omit (and that a file without the
        key has), so that files made without the feature stay byte-identical to those of earlier versions
    """

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    choices: tuple = ()
    stored: bool = True
    structural: bool = False
    absent_means: object = None
    doc: str = ""

    def check(self, value):
        """``value`` converted (a Python int, float, ...) when it is acceptable; TypeError or ValueError naming the
        parameter otherwise."""
        if self.kind == "int":
            return check_int(value, self.name, min_value=self.low, max_value=self.high)
        if self.kind == "float":
            return check_float(value, self.name, min_value=self.low)
        if self.kind == "seed":
            if value is None or isinstance(value, np.random.Generator):
                return value
            return check_int(value, self.name, min_value=0)
        if self.kind == "threads":
            return None if value is None else resolve_n_threads(value)
        if self.kind == "bool":
            return check_bool(value, self.name)
        return check_choice(value, self.name, self.choices)

    def describe(self) -> str:
        """What the rule accepts, in words (for messages and help texts)."""
        if self.kind == "int":
            if self.high is not None:
                return f"an integer in {self.low}..{self.high}"
            return f"an integer >= {self.low}"
        if self.kind == "float":
            return f"a finite number >= {self.low:g}"
        if self.kind == "seed":
            return "an integer >= 0, a numpy.random.Generator or None"
        if self.kind == "threads":
            return "an integer >= 1 or None (all cores)"
        if self.kind == "bool":
            return "True or False"
        return " or ".join(repr(c) for c in self.choices)


PARAMETERS = {p.name: p for p in (
    Parameter("n_subspaces", "int", 1, structural=True,
              doc="M, subspaces of the rotated space (at most the dimension P); a code has M*C bytes"),
    Parameter("n_codebooks", "int", 1, 64, structural=True,
              doc="C, codebooks (words summed) per subspace"),
    Parameter("beam_width", "int", 1,
              doc="T, candidates kept per level of the encoder's pursuit (values above n_codewords act as it)"),
    Parameter("n_codewords", "int", 2, 256, structural=True, doc="K, words per codebook (one byte per word index)"),
    Parameter("metric", "choice", choices=("l2", "ip", "cosine"), structural=True, absent_means="l2",
              doc="what search ranks by: squared L2 distance (ascending), inner product or cosine similarity "
                  "(descending); cosine normalises every vector to unit length"),
    Parameter("n_iter", "int", 1, doc="maximum training iterations"),
    Parameter("tol", "float", 0.0, doc="stop training when an iteration lowers the objective by less than this fraction"),
    Parameter("seed", "seed", doc="seeds training; the same seed gives the same model for any n_threads"),
    Parameter("n_threads", "threads", stored=False, doc="threads for training and encoding; None: all cores"),
    Parameter("verbose", "bool", stored=False, doc="print the objective of every iteration on stderr"),
)}

# The parameters written in the ``params`` map of files (with ``dim``), in this order (docs/FORMAT.md 11.1); those
# with ``absent_means`` are omitted when they have that value.
STORED_PARAMETERS = tuple(name for name, p in PARAMETERS.items() if p.stored)

# The metrics of search, and the direction of their results.
METRICS = PARAMETERS["metric"].choices
