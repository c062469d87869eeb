"""PQ, CKM, ECKM and OCKM: vector quantizers with the verbs fit / encode / decode / distortion.

All four approximate a vector x (P dims) as x ~ R z_hat, where R is a P x P rotation (the identity for PQ) and the
rotated space is cut into M subspaces; subspace m of z_hat is the sum of C words, one from each of its C codebooks of
K words (Wang, Wang, Song, Xu, Shen, Li, "Optimized Cartesian K-Means", IEEE TKDE 2015):

    method  rotation R   codebooks per subspace              encoding
    PQ      identity     C = 1                                nearest word (k-means per subspace)
    CKM     learned      C = 1                                nearest word (= OPQ, non-parametric)
    ECKM    learned      one codebook used C times            greedy pursuit (paper Alg. 1)
    OCKM    learned      C codebooks, learned jointly         multiple-candidates matching pursuit, beam T (Alg. 2-3)

A code is M*C bytes (K <= 256): byte m*C + c is the index of the word of codebook c of subspace m.
"""

from __future__ import annotations

import functools
import inspect

import numpy as np

from . import training as _training
from .tables import CodecTables, SubspaceLayout
from .norm_levels import fit_norm_levels
from .params import PARAMETERS, STORED_PARAMETERS
from .sq8 import learn_value_ranges
from .._validation import as_codes, as_vectors, normalize_rows, resolve_n_threads, to_float32_rows
from ..errors import NotFittedError

__all__ = ["PQ", "CKM", "ECKM", "OCKM", "Quantizer", "METHODS", "PARAMETERS", "quantizer_from_state", "Model",
           "learned"]

# Rows converted to float32 and encoded per step in encode/decode/distortion: bounds the temporary memory of a call
# (a float32 copy of this many rows plus its tables) whatever the number of rows given.
ROWS_PER_STEP = 65536


def learned(name, doc=None):
    """A read-only property giving the learned attribute ``name`` of a fitted model (NotFittedError before fit)."""
    def get(self):
        self._check_fitted()
        return getattr(self, name)

    return property(get, doc=doc)


class Model:
    """What every model (the quantizers below, and the IVF of ivf_quantizer.py) does with its ``seed`` and
    ``n_threads`` parameters, and the value ranges it learns from its training vectors."""

    _value_ranges = None

    @property
    def value_ranges(self):
        """(2, P) float32: the smallest (row 0) and largest (row 1) value of each dimension among the training vectors,
        as given (before any normalisation for cosine); what ``store_vectors="sq8"`` stores vectors through
        (docs/FORMAT.md, "value_ranges"). None for a model read from a file of format 1.2 or older."""
        self._check_fitted()
        return self._value_ranges

    def _set_value_ranges(self, ranges):
        self._value_ranges = None if ranges is None else _read_only_copy(ranges, np.float32)

    def _same_value_ranges(self, other):
        """Whether the value ranges do not tell two models apart: equal, or unknown in either (a model read from an
        index file that stores no sq8 vectors has none; its codes are the same)."""
        a, b = self._value_ranges, other._value_ranges
        return a is None or b is None or np.array_equal(a, b)

    def _rng(self):
        """The Generator of ``seed`` (a fresh one seeded by it, or the Generator given)."""
        if isinstance(self.seed, np.random.Generator):
            return self.seed
        return np.random.default_rng(self.seed)

    def _threads(self, n_threads=None):
        """The threads of a call: ``n_threads``, else the model's own (None: every core)."""
        return resolve_n_threads(self.n_threads if n_threads is None else n_threads)

    def distortion(self, X, *, n_threads=None) -> float:
        """Mean squared reconstruction error per vector, (1/n) sum_i ||x_i - x_hat_i||^2 in float64, x_hat_i the
        reconstruction of x_i's encoding (``decode(encode(x_i))``; for an IVF ``decode(*encode(x_i))``).

        X : array-like of shape (n, P) or (P,), n >= 1 (normalised first for metric "cosine"); converted to float32
        a step of rows at a time (memory stays bounded).
        """
        self._check_fitted()
        X, _ = as_vectors(X, "X", self.dim, convert=False)
        if X.shape[0] == 0:
            raise ValueError("X has no rows: the distortion of zero vectors is undefined")
        threads = self._threads(n_threads)
        step = self._rows_per_step()
        total = 0.0
        for start in range(0, X.shape[0], step):
            rows = self._prepare(to_float32_rows(X[start:start + step], "X"), "X", start)
            diff = rows.astype(np.float64) - self._reconstruct_prepared(rows, threads)
            total += float(np.einsum("ij,ij->", diff, diff))
        return total / X.shape[0]


def _read_only_copy(arr, dtype):
    out = np.array(arr, dtype=dtype, order="C")
    out.flags.writeable = False
    return out


class Quantizer(Model):
    """Common machinery of the four methods; use PQ, CKM, ECKM or OCKM.

    Learned attributes (after ``fit``)
    ----------------------------------
    rotation : ndarray of shape (P, P), dtype float32, or None for PQ
        Orthogonal; a vector x is encoded through z = R^T x and decoded as x_hat = R z_hat.
    codebooks : ndarray of shape (M, C, K, S), dtype float32
        ``codebooks[m, c, k]`` is word k of codebook c of subspace m, in the rotated space. S = ceil(P / M):
        subspace m covers ``subspace_dims[m]`` rotated dimensions (P // M or P // M + 1, larger ones first) and the
        remaining columns of its words are zero. For ECKM the C codebooks of a subspace are one codebook, repeated.
    objective_history : ndarray of shape (n_iterations + 1,), dtype float64
        Mean squared reconstruction error of the training vectors: [0] after initialisation, [i] after iteration i.
        Never rises.
    norm_levels : ndarray of shape (256,), dtype float32, or None when C = 1 (and the metric is not "cosine")
        The 256 levels of the one-dimensional quantizer of ||x_hat||^2 (fitted on the training vectors), used by
        indexes that store the norm term in one byte (L2 with C >= 2: added to distances; cosine: 1 / ||x_hat||
        scales scores).
    """

    method = ""  # the method's name in files and on the command line
    _learn_rotation = True
    _shared_codebook = False
    _fixed = {}  # parameters the method fixes (not constructor arguments): PQ and CKM have one codebook, no beam

    def _init(self, arguments):
        """Check and keep the constructor's arguments (``locals()`` of a subclass's ``__init__``)."""
        for name, value in arguments.items():
            if name != "self":
                setattr(self, name, PARAMETERS[name].check(value))
        for name, value in self._fixed.items():
            setattr(self, name, value)
        self._reset()

    def _reset(self):
        self.dim = self.stop_reason = None
        self._rotation = self._codebooks = self._history = self._norm_levels = self._codec_tables = None
        self._value_ranges = None

    # ---------------------------------------------------------------------------------------------------- parameters
    @property
    def code_size(self) -> int:
        """Bytes per encoded vector: M * C (one byte per word index, K <= 256)."""
        return self.n_subspaces * self.n_codebooks

    @property
    def bits(self) -> int:
        """Bits per encoded vector as stored: 8 per word, or 4 with at most 16 words per codebook (then stored two
        per byte, in the fast-scan layout); ``encode`` returns one byte per word either way (code_size)."""
        return (4 if self.n_codewords <= 16 else 8) * self.code_size

    @classmethod
    @functools.cache
    def _param_names(cls):
        """The constructor's argument names, in signature order (scikit-learn's convention)."""
        return tuple(name for name in inspect.signature(cls.__init__).parameters if name != "self")

    def get_params(self, deep=True) -> dict:
        """The constructor's arguments, exactly: ``type(q)(**q.get_params())`` is an unfitted copy of ``q``.

        ``deep`` is accepted for scikit-learn compatibility (a quantizer holds no sub-estimators).
        """
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params):
        """Set constructor arguments (checked as the constructor checks them); returns self.

        Changing a parameter that shapes the model (n_subspaces, n_codebooks, n_codewords) discards a fitted model:
        the quantizer must be fitted again. Others (beam_width, n_iter, tol, seed, n_threads, verbose) keep it;
        beam_width then applies to later encodings.
        """
        names = self._param_names()
        unknown = [name for name in params if name not in names]
        if unknown:
            raise ValueError(f"{unknown[0]!r} is not a parameter of {type(self).__name__}; its parameters are "
                             f"{', '.join(names)}")
        checked = {name: PARAMETERS[name].check(value) for name, value in params.items()}
        reshaped = any(PARAMETERS[name].structural and value != getattr(self, name)
                       for name, value in checked.items())
        for name, value in checked.items():
            setattr(self, name, value)
        if reshaped:
            self._reset()
        return self

    def _stored_params(self) -> dict:
        """The model's parameters as files store them (docs/FORMAT.md 11.1); a Generator seed is stored as None."""
        params = {name: getattr(self, name) for name in STORED_PARAMETERS
                  if getattr(self, name) != PARAMETERS[name].absent_means or PARAMETERS[name].absent_means is None}
        if isinstance(params["seed"], np.random.Generator):
            params["seed"] = None
        return params

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    # ------------------------------------------------------------------------------------------------ learned state
    @property
    def _tables(self):
        """The CodecTables of the learned model, built on first use (None before fit).

        Lazy so that rebuilding a quantizer from a file (``quantizer_from_state``, used by ``open_index``) costs only
        the copy of its arrays: the pair tables alone take M * C(C-1)/2 * K^2 floats (1 MiB for 64-bit OCKM codes).
        Two threads building them at once both compute the same tables; one is kept.
        """
        tables = self._codec_tables
        if tables is None and self._codebooks is not None:
            tables = CodecTables(SubspaceLayout(self.dim, self.n_subspaces), self._rotation, self._codebooks)
            self._codec_tables = tables
        return tables

    @property
    def is_fitted(self) -> bool:
        return self._codebooks is not None

    def _check_fitted(self):
        if self._codebooks is None:
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet: call fit(X) first")

    rotation = learned("_rotation")
    codebooks = learned("_codebooks")
    objective_history = learned("_history")
    norm_levels = learned("_norm_levels")

    @property
    def subspace_dims(self) -> np.ndarray:
        """Number of rotated dimensions in each subspace, shape (M,)."""
        self._check_fitted()
        return SubspaceLayout(self.dim, self.n_subspaces).sizes

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        if self._stored_params() != other._stored_params() or self.dim != other.dim:
            return False
        if self.is_fitted != other.is_fitted:
            return False
        if not self.is_fitted:
            return True
        return all(
            (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))
            for a, b in [
                (self._rotation, other._rotation),
                (self._codebooks, other._codebooks),
                (self._history, other._history),
                (self._norm_levels, other._norm_levels),
            ]
        ) and self._same_value_ranges(other)

    __hash__ = None

    # ---------------------------------------------------------------------------------------------------------- fit
    def fit(self, X):
        """Learn the rotation and codebooks from training vectors (and their ``value_ranges``).

        Parameters
        ----------
        X : array-like of shape (n, P)
            Training vectors, any real numeric dtype; n >= n_codewords and P >= n_subspaces.

        Returns
        -------
        self
        """
        X, _ = as_vectors(X, "X")
        self._fit_prepared(self._prepare(X, "X"))
        self._set_value_ranges(learn_value_ranges(X))  # of the vectors as given (stored vectors are not normalised)
        return self

    def _fit_prepared(self, X, n_threads=None):
        """fit() on rows already checked and prepared (``_prepare``): C-contiguous float32. An inverted file fits its
        fine quantizer on residuals this way (never normalised, whatever the metric). ``n_threads`` None: the
        quantizer's own. Returns the codes of the training rows, (n, M*C) uint8."""
        n, P = X.shape
        if n < self.n_codewords:
            raise ValueError(f"X has {n} rows; fit needs at least n_codewords={self.n_codewords} training vectors")
        if self.n_subspaces > P:
            raise ValueError(f"n_subspaces={self.n_subspaces} is larger than the dimension of X ({P})")
        result = _training.train(
            X,
            n_subspaces=self.n_subspaces,
            n_codebooks=self.n_codebooks,
            n_codewords=self.n_codewords,
            beam_width=self._encode_beam_width(),
            n_iter=self.n_iter,
            tol=self.tol,
            rng=self._rng(),
            learn_rotation=self._learn_rotation,
            shared_codebook=self._shared_codebook,
            n_threads=self._threads(n_threads),
            verbose=self.verbose,
            name=type(self).__name__,
        )
        self._reset()
        self.dim = P
        self._set_learned(result.rotation, result.codebooks, result.objective_history, None)
        if self.n_codebooks > 1 or self.metric == "cosine":  # the norm term (L2), or the norm scale of cosine scores
            norms = self._tables.code_sqnorms(result.codes, self._threads(n_threads))
            self._norm_levels = fit_norm_levels(norms, self.n_codewords)
        self.stop_reason = result.stop_reason
        return result.codes

    def _encode_beam_width(self):
        return self.beam_width

    def _prepare(self, rows, name, first_row=0):
        """Checked float32 rows as the model sees them: normalised to unit length for metric "cosine" (a zero row
        raises ValueError naming it, ``first_row`` being the number of its first row), as given otherwise."""
        if self.metric == "cosine":
            return normalize_rows(rows, name, first_row)
        return rows

    def _set_learned(self, rotation, codebooks, history, norm_levels):
        self._rotation = None if rotation is None else np.ascontiguousarray(rotation, dtype=np.float32)
        self._codebooks = np.ascontiguousarray(codebooks, dtype=np.float32)
        self._history = np.ascontiguousarray(history, dtype=np.float64)
        self._norm_levels = None if norm_levels is None else np.ascontiguousarray(norm_levels, dtype=np.float32)
        for arr in (self._rotation, self._codebooks, self._history, self._norm_levels):
            if arr is not None:
                arr.flags.writeable = False
        self._codec_tables = None  # built on first use (see _tables)

    # ----------------------------------------------------------------------------------------- encode / decode
    def encode(self, X, *, n_threads=None):
        """Encode vectors.

        Parameters
        ----------
        X : array-like of shape (n, P) or (P,)
            Any real numeric dtype; converted to float32 ROWS_PER_STEP rows at a time (memory stays bounded).
        n_threads : int or None
            Threads to use; None means the quantizer's ``n_threads`` (itself None: all cores).

        Returns
        -------
        codes : ndarray of shape (n, M*C) or (M*C,), dtype uint8
        """
        self._check_fitted()
        X, was_1d = as_vectors(X, "X", self.dim, convert=False)
        codes, _ = self._encode_rows(X, self._threads(n_threads))
        return codes[0] if was_1d else codes

    def _encode_rows(self, X, n_threads, first_row=0):
        """Encode checked rows (any numeric dtype) step by step; returns (codes, errors). Messages name a bad row by
        its number plus ``first_row`` (the rows may be a chunk of a larger X)."""
        n = X.shape[0]
        codes = np.empty((n, self.code_size), dtype=np.uint8)
        errors = np.empty(n, dtype=np.float32)
        T = self._encode_beam_width()
        for start in range(0, n, ROWS_PER_STEP):
            rows = self._prepare(to_float32_rows(X[start:start + ROWS_PER_STEP], "X"), "X", first_row + start)
            codes[start:start + rows.shape[0]], errors[start:start + rows.shape[0]] = self._tables.encode(
                rows, T, n_threads
            )
        return codes, errors

    def _encode_prepared(self, rows, n_threads):
        """Codes of rows already checked and prepared (``_prepare``): float32, C-contiguous."""
        return self._tables.encode(rows, self._encode_beam_width(), n_threads)[0]

    def decode(self, codes, *, n_threads=None):
        """Reconstruct vectors from codes.

        Parameters
        ----------
        codes : array-like of shape (n, M*C) or (M*C,), integers in 0..n_codewords-1

        Returns
        -------
        X_hat : ndarray of shape (n, P) or (P,), dtype float32
        """
        self._check_fitted()
        codes, was_1d = as_codes(codes, "codes", self.code_size, self.n_codewords)
        threads = self._threads(n_threads)
        out = np.empty((codes.shape[0], self.dim), dtype=np.float32)
        for start in range(0, codes.shape[0], ROWS_PER_STEP):
            block = codes[start:start + ROWS_PER_STEP]
            out[start:start + block.shape[0]] = self._tables.decode(block, threads)
        return out[0] if was_1d else out

    def _rows_per_step(self):
        return ROWS_PER_STEP

    def _reconstruct_prepared(self, rows, n_threads):
        """x_hat = decode(encode(rows)) of rows already checked and prepared, (n, P) float32."""
        return self._tables.decode(self._encode_prepared(rows, n_threads), n_threads)

    def code_norms(self, codes, *, n_threads=None):
        """||decode(code)||^2 of each code, shape (n,), float32 (from tables: C + C(C-1)/2 lookups per subspace)."""
        self._check_fitted()
        codes, was_1d = as_codes(codes, "codes", self.code_size, self.n_codewords)
        out = self._tables.code_sqnorms(codes, self._threads(n_threads))
        return out[0] if was_1d else out

    # ------------------------------------------------------------------------------------- what indexes ask of a model
    # The IVF (ivf_quantizer.py) has the same methods: indexes, writers and collections call them, never asking
    # which kind of model they hold (docs/ARCHITECTURE.md, "Kinds of index").
    def _encode_for_index(self, X, n_threads, first_row=0, norm_terms=True):
        """(None, codes (n, M*C) uint8, norm terms ||x_hat||^2 (n,) float32 or None) of checked rows ``X`` (any real
        dtype, right dimension; values are checked here; a bad row is named by its number plus ``first_row``). A flat
        quantizer puts every vector in one list: the first item, the lists, is None."""
        codes, _ = self._encode_rows(X, n_threads, first_row)
        return None, codes, (self.code_norms(codes, n_threads=n_threads) if norm_terms else None)

    def _norm_term_need(self):
        """(needed, reason): whether L2 distances need the stored norm term ||x_hat||^2 (C >= 2 with metric "l2"),
        and the words error messages about ``norm_encoding`` give for it."""
        name = type(self).__name__
        if self.n_codebooks == 1:
            return False, f"{name} with one codebook per subspace: its tables hold the whole distance"
        return self.metric == "l2", f"{name} with n_codebooks={self.n_codebooks}: its distances need the norm term"

    def _check_n_probe(self, n_probe, what="index", n_rows=None):
        """The n_probe of a search over codes of this model: None, the only value a flat model takes (it scans every
        code); ValueError naming n_probe otherwise (``what``: "index" or "collection")."""
        if n_probe is not None:
            raise ValueError(f"n_probe applies to inverted-file (IVF) indexes only: this {what} is flat and scans "
                             "every code; leave n_probe out")
        return None

    def _summary(self) -> dict:
        """P, method, metric, M, C, K, T, bits: the part of an index's info() that describes its model."""
        return {"P": int(self.dim), "method": self.method, "metric": self.metric, "M": int(self.n_subspaces),
                "C": int(self.n_codebooks), "K": int(self.n_codewords), "T": int(self.beam_width),
                "bits": int(self.bits)}

    def _file_summary(self) -> dict:
        """What file_info says of the model of a quantizer file: ``_summary``, then code_size, iterations and
        objective (the last training objective)."""
        return {**self._summary(), "code_size": int(self.code_size), "iterations": int(len(self._history) - 1),
                "objective": float(self._history[-1])}

    # ------------------------------------------------------------------------------------------------- state
    def _get_state(self):
        """(params, arrays) describing the model completely; arrays absent when not learned are omitted."""
        self._check_fitted()
        params = {"method": self.method, "dim": self.dim, **self._stored_params()}
        arrays = {"codebooks": self._codebooks, "objective_history": self._history}
        if self._rotation is not None:
            arrays["rotation"] = self._rotation
        if self._norm_levels is not None:
            arrays["norm_levels"] = self._norm_levels
        if self._value_ranges is not None:
            arrays["value_ranges"] = self._value_ranges
        return params, arrays


class PQ(Quantizer):
    """Product quantization: k-means in each of M subspaces of the input space (R = I, C = 1).

    Parameters
    ----------
    n_subspaces : int
        M, 1..P. A code has M bytes.
    n_codewords : int, default 256
        K, 2..256 words per codebook.
    metric : "l2", "ip" or "cosine", default "l2"
        What search ranks by: squared L2 distance (ascending), inner product or cosine similarity (descending).
        "cosine" normalises every vector to unit length in fit, encode, decode's inputs and search (a zero vector
        raises ValueError naming its row); the model then describes unit vectors.
    n_iter : int, default 25
        Maximum number of k-means (Lloyd) iterations. Why 25: on SIFT (64-bit codes) the objective falls by only
        ~0.02% per iteration by then.
    tol : float, default 1e-4
        Stop when an iteration lowers the objective by less than this fraction.
    seed : int, numpy.random.Generator or None, default 0
        Seeds the initial codebooks; the same seed gives bit-identical results for any n_threads. None: fresh entropy.
    n_threads : int or None, default None
        Threads for training and encoding; None means all cores available to the process.
    verbose : bool, default False
        Print the objective of each iteration to stderr.
    """

    method = "pq"
    _learn_rotation = False
    _fixed = {"n_codebooks": 1, "beam_width": 1}

    def __init__(self, n_subspaces, *, n_codewords=256, metric="l2", n_iter=25, tol=1e-4, seed=0, n_threads=None,
                 verbose=False):
        self._init(locals())


class CKM(Quantizer):
    """Cartesian k-means (= non-parametric OPQ): a learned rotation R, then k-means per subspace (C = 1).

    Parameters as for PQ. ``n_iter`` (default 30) counts iterations of (Procrustes, codebooks, codes). Why 30 and not
    PQ's 25: the rotation keeps lowering the objective longer than k-means alone does (on SIFT 64-bit codes by ~0.04%
    per iteration at 25, twice PQ's rate), and an iteration costs little more than PQ's (a nearest-word encoding plus
    a P x P SVD).
    """

    method = "ckm"
    _fixed = {"n_codebooks": 1, "beam_width": 1}

    def __init__(self, n_subspaces, *, n_codewords=256, metric="l2", n_iter=30, tol=1e-4, seed=0, n_threads=None,
                 verbose=False):
        self._init(locals())


class ECKM(Quantizer):
    """Extended Cartesian k-means: a learned rotation; each subspace approximated by the sum of C words taken from
    one shared codebook by greedy pursuit (paper Alg. 1: each step takes the word nearest to the current residual).

    Parameters
    ----------
    n_subspaces : int
        M, 1..P.
    n_codebooks : int, default 2
        C, the number of words summed per subspace. A code has M*C bytes.
    Other parameters as for CKM (``n_iter`` default 30 for the same reason: greedy encoding is cheap, and on SIFT the
    objective still falls by ~0.1% per iteration at 25).
    """

    method = "eckm"
    _shared_codebook = True
    _fixed = {"beam_width": 1}

    def __init__(self, n_subspaces, n_codebooks=2, *, n_codewords=256, metric="l2", n_iter=30, tol=1e-4, seed=0,
                 n_threads=None, verbose=False):
        self._init(locals())


class OCKM(Quantizer):
    """Optimized Cartesian k-means: a learned rotation; each subspace approximated by the sum of one word from each
    of its C codebooks, learned jointly by least squares; codes by multiple-candidates matching pursuit.

    Parameters
    ----------
    n_subspaces : int
        M, 1..P.
    n_codebooks : int, default 2
        C, codebooks per subspace. A code has M*C bytes (64-bit codes: M=4, C=2).
    beam_width : int, default 10
        T, candidates kept at each of the first C-1 levels of the pursuit (values above n_codewords act as
        n_codewords; T = K makes C = 2 encoding exhaustive).
    n_codewords, metric
        As for PQ: K, 2..256 words per codebook (default 256); "l2" (default), "ip" or "cosine".
    n_iter : int, default 25
        Maximum number of iterations of (Procrustes, codebooks, codes). Why 25, fewer than CKM's 30: an iteration
        costs a beam encoding of the training set (about 1.4 times a nearest-word encoding), and 25 keeps training
        at about a quarter of the time of Faiss's product residual quantizer on SIFT (tools/bench_codec.py) while
        the objective falls by only ~0.08% per iteration there (~0.16% on MiniLM sentence embeddings).
    tol : float, default 1e-4
        Stop when an iteration lowers the objective by less than this fraction.
    seed, n_threads, verbose
        As for PQ.
    """

    method = "ockm"

    def __init__(self, n_subspaces, n_codebooks=2, beam_width=10, *, n_codewords=256, metric="l2", n_iter=25, tol=1e-4, seed=0,
                 n_threads=None, verbose=False):
        self._init(locals())


# The method registry: a method's name (in files, on the command line) -> its class.
METHODS = {cls.method: cls for cls in (PQ, CKM, ECKM, OCKM)}


def quantizer_from_state(params: dict, arrays: dict) -> Quantizer:
    """Rebuild a fitted quantizer from ``Quantizer._get_state()`` output (as stored in an index file): ``params``
    holds "method", "dim" and the stored parameters; the method's fixed parameters are not read.

    No validation of shapes here: the storage layer checks the file, the index layer checks what it hands over.
    """
    cls = METHODS[params["method"]]
    q = cls(**{name: params[name] for name in cls._param_names() if name in params})
    q.dim = params["dim"]
    q._set_learned(arrays.get("rotation"), arrays["codebooks"], arrays["objective_history"],
                   arrays.get("norm_levels"))
    q._set_value_ranges(arrays.get("value_ranges"))
    return q
