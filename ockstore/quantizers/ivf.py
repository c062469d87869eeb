"""IVF: an inverted file over the codes of a fine quantizer (PQ, CKM, ECKM or OCKM), for sublinear search.

A coarse k-means splits the space into L lists with centroids c_l; a vector x goes to the list of its nearest
centroid l(x), and its residual x - c_l is encoded by the fine quantizer, which is trained on the residuals of the
learn set (its rotation R is learned on them). The reconstruction of a vector is

    x_hat = c_l + R z_hat_b        (z_hat_b: the sum of the code's words, in the rotated space)

and an index stores, per vector, the code b and the norm term of the **whole** reconstruction n = ||x_hat||^2, so
that one ADC table per query serves every list (docs/ARCHITECTURE.md, "Inverted file"):

    ||q - x_hat||^2 = ||q||^2 - 2 q.c_l - 2 (R^T q).z_hat_b + n          q.c_l comes from the coarse step

A search probes the n_probe lists whose centroids are nearest to the query (largest q.c_l for metric "ip") and scans
only their codes.
"""

from __future__ import annotations

import math
import numpy as np

from .. import _kernels
from .norm_levels import fit_norm_levels
from .kmeans import PROBE_IP, PROBE_L2, CoarseTables, train_coarse
from .params import PARAMETERS
from .sq8 import learn_value_ranges
from .._validation import as_codes, as_list_ids, as_vectors, check_int, to_float32_rows
from ..errors import NotFittedError
from .cartesian import Model, Quantizer, learned

__all__ = ["IVF", "MAX_LISTS", "ROWS_PER_STEP", "default_n_probe", "ivf_from_state"]

# Lists of an inverted file at most: list ids are C ints in the kernels, and every list costs P floats of centroid.
MAX_LISTS = 1 << 24

# Rows encoded per step by IVF.encode, decode, distortion and the index writers: bounds the temporaries of a call (a
# float32 copy of the rows, their residuals, reconstructions and float64 norms: ~24 MB at P = 128) whatever n is.
ROWS_PER_STEP = 16384

# n_probe when a search gives none: the lists that hold about DEFAULT_SCAN_ROWS rows (a fast scan of that many rows
# costs about what the rest of a query costs), and at least 2 sqrt(n_lists) (on sift the lists a query needs for a
# given recall grow as sqrt(L): 0.99 of the true neighbours reach the scan at ~2-3 sqrt(L)), at most every list. With
# the default re-ranking this gave 10-recall@10 0.996 on sift 100K (IVF128) and 0.984 on sift 1M (IVF512)
# (tools/study_defaults.py --rule; docs/results.md, "The model the library picks"). An index that knows its rows uses
# them; a model alone (no rows) takes 2 sqrt(L).
DEFAULT_SCAN_ROWS = 32_768


def default_n_probe(n_lists, n_rows=None) -> int:
    """The n_probe of a search that gives none: min(L, max(ceil(L * DEFAULT_SCAN_ROWS / n_rows), ceil(2 sqrt(L)))),
    or without n_rows min(L, ceil(2 sqrt(L)))."""
    L = int(n_lists)
    least = int(math.ceil(2 * math.sqrt(L)))
    if n_rows:
        least = max(least, -(-L * DEFAULT_SCAN_ROWS // int(n_rows)))
    return max(1, min(L, least))


def _check_fine_quantizer(quantizer):
    if not isinstance(quantizer, Quantizer):
        raise TypeError(f"quantizer must be a PQ, CKM, ECKM or OCKM instance (the fine quantizer of the residuals), "
                        f"got {type(quantizer).__name__}")
    return quantizer


class IVF(Model):
    """Inverted file: coarse k-means lists, residuals encoded by a fine quantizer.

    Parameters
    ----------
    n_lists : int
        L, the number of lists (coarse centroids), 1..2**24. fit needs at least L training vectors.
    quantizer : PQ, CKM, ECKM or OCKM
        The fine quantizer. ``fit`` fits it, in place, on the residuals x - c_l(x) of the training vectors (whatever
        its metric, residuals are never normalised); afterwards it is ``ivf.quantizer``. Its metric is the IVF's.
    n_iter : int, default 10
        Lloyd iterations of the coarse k-means (Faiss's default for its inverted files too). Measured on sift-real
        (1,024 lists, 10,000 queries): 20 iterations raise the fraction of queries whose true nearest neighbour
        lies in one of their n_probe nearest lists by at most 0.004 (n_probe 1 to 32), for twice the time.
    seed : int, numpy.random.Generator or None, default 0
        Seeds the coarse k-means (its sample and its initial centroids); the fine quantizer has its own seed. The
        same seeds give bit-identical models for any n_threads. None: fresh entropy.
    n_threads : int or None, default None
        Threads for training and encoding (the fine quantizer's training included); None means all cores.

    Learned attributes (after ``fit``)
    ----------------------------------
    centroids : ndarray of shape (L, P), dtype float32
        ``centroids[l]`` is c_l.
    coarse_objective_history : ndarray of shape (n_iter + 1,), dtype float64
        Mean squared distance of the k-means training rows to their nearest centroid, [i] after i updates.
    norm_levels : ndarray of shape (256,), dtype float32
        The levels of the one-byte quantizer of the norm term ||c_l + R z_hat||^2 (fitted on the training vectors),
        for indexes that store it in one byte.
    """

    method = "ivf"

    def __init__(self, n_lists, quantizer, *, n_iter=10, seed=0, n_threads=None):
        self.n_lists = check_int(n_lists, "n_lists", min_value=1, max_value=MAX_LISTS)
        self.quantizer = _check_fine_quantizer(quantizer)
        self.n_iter = check_int(n_iter, "n_iter", min_value=1)
        self.seed = PARAMETERS["seed"].check(seed)
        self.n_threads = PARAMETERS["n_threads"].check(n_threads)
        self._reset()

    def _reset(self):
        self.dim = None
        self._coarse = None  # CoarseTables
        self._history = None
        self._norm_levels = None
        self._value_ranges = None
        self._rotated_centroids = None  # (L, M*S) float64, built on first use

    # ---------------------------------------------------------------------------------------------------- parameters
    _PARAM_NAMES = ("n_lists", "quantizer", "n_iter", "seed", "n_threads")

    def get_params(self, deep=True) -> dict:
        """The constructor's arguments: ``IVF(**ivf.get_params())`` is an unfitted IVF over the same (fitted) fine
        quantizer object. ``deep`` is accepted for scikit-learn compatibility (the fine quantizer is returned as is)."""
        return {name: getattr(self, name) for name in self._PARAM_NAMES}

    def set_params(self, **params):
        """Set constructor arguments (checked as the constructor checks them); returns self. Changing n_lists or the
        quantizer discards a fitted model."""
        unknown = [name for name in params if name not in self._PARAM_NAMES]
        if unknown:
            raise ValueError(f"{unknown[0]!r} is not a parameter of IVF; its parameters are "
                             f"{', '.join(self._PARAM_NAMES)}")
        checked = IVF(**{**self.get_params(), **params}).get_params()  # one set of checks: the constructor's
        reshaped = checked["n_lists"] != self.n_lists or checked["quantizer"] is not self.quantizer
        for name in params:
            setattr(self, name, checked[name])
        if reshaped:
            self._reset()
        return self

    def _stored_params(self) -> dict:
        """The IVF's own parameters as files store them (docs/FORMAT.md 14.1); a Generator seed is stored as None."""
        seed = None if isinstance(self.seed, np.random.Generator) else self.seed
        return {"n_iter": self.n_iter, "n_lists": self.n_lists, "seed": seed}

    def __repr__(self):
        return (f"IVF(n_lists={self.n_lists!r}, quantizer={self.quantizer!r}, n_iter={self.n_iter!r}, "
                f"seed={self.seed!r}, n_threads={self.n_threads!r})")

    # ------------------------------------------------------------------------------------------------ learned state
    @property
    def is_fitted(self) -> bool:
        return self._coarse is not None and self.quantizer.is_fitted

    def _check_fitted(self):
        if self._coarse is None:
            raise NotFittedError("this IVF is not fitted yet: call fit(X) first")
        if not self.quantizer.is_fitted or self.quantizer.dim != self.dim:
            raise NotFittedError("the fine quantizer of this IVF was reset or refitted since the IVF was fitted: "
                                 "fit the IVF again")

    @property
    def metric(self) -> str:
        """"l2", "ip" or "cosine": the fine quantizer's."""
        return self.quantizer.metric

    @property
    def centroids(self):
        self._check_fitted()
        return self._coarse.centroids

    coarse_objective_history = learned("_history")
    norm_levels = learned("_norm_levels")

    @property
    def code_size(self) -> int:
        """Code bytes per vector: the fine quantizer's M * C."""
        return self.quantizer.code_size

    @property
    def n_codewords(self) -> int:
        return self.quantizer.n_codewords

    @property
    def bits(self) -> int:
        """Bits of a code as stored (the fine quantizer's; the list of a vector is implied by its place in a file)."""
        return self.quantizer.bits

    @property
    def default_n_probe(self) -> int:
        """The n_probe of a search that gives none, for a model alone (``default_n_probe(n_lists)``; an index's
        search takes its rows into account too: ``default_n_probe(n_lists, n_rows)``)."""
        return default_n_probe(self.n_lists)

    def _prepare(self, rows, name, first_row=0):
        """Checked float32 rows as the model sees them: unit length for metric "cosine" (as the fine quantizer's)."""
        return self.quantizer._prepare(rows, name, first_row)

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        if self._stored_params() != other._stored_params() or self.dim != other.dim:
            return False
        if self.is_fitted != other.is_fitted or self.quantizer != other.quantizer:
            return False
        if not self.is_fitted:
            return True
        return all(np.array_equal(a, b) for a, b in [(self._coarse.centroids, other._coarse.centroids),
                                                     (self._history, other._history),
                                                     (self._norm_levels, other._norm_levels)]
                   ) and self._same_value_ranges(other)

    __hash__ = None

    # ---------------------------------------------------------------------------------------------------------- fit
    def fit(self, X):
        """Learn the coarse centroids, then fit the fine quantizer on the residuals; and the ``value_ranges`` of the
        training vectors.

        Parameters
        ----------
        X : array-like of shape (n, P)
            Training vectors, any real numeric dtype; n >= n_lists, n >= the fine quantizer's n_codewords and
            P >= its n_subspaces. Metric "cosine" normalises them first.

        Returns
        -------
        self
        """
        X, _ = as_vectors(X, "X")
        n, P = X.shape
        ranges = learn_value_ranges(X) if n else None  # of the vectors as given (stored vectors are not normalised)
        X = self._prepare(X, "X")
        q = self.quantizer
        if n < self.n_lists:
            raise ValueError(f"X has {n} rows; fit needs at least n_lists={self.n_lists} training vectors")
        if n < q.n_codewords:
            raise ValueError(f"X has {n} rows; fit needs at least n_codewords={q.n_codewords} training vectors "
                             "(the fine quantizer's)")
        if q.n_subspaces > P:
            raise ValueError(f"the fine quantizer's n_subspaces={q.n_subspaces} is larger than the dimension of X "
                             f"({P})")
        threads = self._threads()
        self._reset()
        centroids, history, labels = train_coarse(X, self.n_lists, self.n_iter, self._rng(), threads)
        residuals = X - centroids[labels]
        codes = q._fit_prepared(residuals, threads)
        del residuals
        self.dim = P
        self._set_learned(centroids, history, None)
        self._norm_levels = _read_only(fit_norm_levels(self._norm_terms(labels, codes, threads), q.n_codewords))
        self._set_value_ranges(ranges)
        return self

    def _set_learned(self, centroids, history, norm_levels):
        self._coarse = CoarseTables(centroids)
        self._coarse.centroids.flags.writeable = False
        self._history = _read_only(np.ascontiguousarray(history, dtype=np.float64))
        self._norm_levels = None if norm_levels is None else _read_only(
            np.ascontiguousarray(norm_levels, dtype=np.float32))
        self._rotated_centroids = None

    # ----------------------------------------------------------------------------------------- encode / decode
    def encode(self, X, *, n_threads=None):
        """The list and the code of each vector.

        ``X`` (shape (n, P) or (P,)) and ``n_threads`` (None: the IVF's own) as for ``Quantizer.encode``; X is
        converted to float32 ROWS_PER_STEP rows at a time.

        Returns
        -------
        list_ids : ndarray of shape (n,), dtype int64 (a scalar for one vector)
            The nearest centroid of each vector (ties: the smaller list id).
        codes : ndarray of shape (n, M*C) or (M*C,), dtype uint8
            The fine quantizer's code of each residual x - c_l.
        """
        self._check_fitted()
        X, was_1d = as_vectors(X, "X", self.dim, convert=False)
        lists, codes, _ = self._encode_rows(X, self._threads(n_threads), norms=False)
        lists = lists.astype(np.int64)
        return (lists[0], codes[0]) if was_1d else (lists, codes)

    def _encode_rows(self, X, n_threads, first_row=0, norms=True):
        """(lists int32 (n,), codes uint8 (n, M*C), norm terms float32 (n,) or None) of checked rows (any real dtype,
        right dimension; values are checked here; a bad row is named by its number plus ``first_row``)."""
        n = X.shape[0]
        lists = np.empty(n, dtype=np.int32)
        codes = np.empty((n, self.code_size), dtype=np.uint8)
        terms = np.empty(n, dtype=np.float32) if norms else None
        for start in range(0, n, ROWS_PER_STEP):
            rows = self._prepare(to_float32_rows(X[start:start + ROWS_PER_STEP], "X"), "X", first_row + start)
            stop = start + rows.shape[0]
            lists[start:stop], codes[start:stop] = self._encode_prepared(rows, n_threads)
            if norms:
                terms[start:stop] = self._norm_terms(lists[start:stop], codes[start:stop], n_threads)
        return lists, codes, terms

    def _encode_prepared(self, rows, n_threads):
        """(lists int32, codes uint8) of rows already checked and prepared (``_prepare``): float32, C-contiguous."""
        lists, _ = self._coarse.assign(rows, n_threads)
        residuals = rows - self._coarse.centroids[lists]
        return lists, self.quantizer._encode_prepared(residuals, n_threads)

    def _norm_terms(self, lists, codes, n_threads):
        """||c_l + R z_hat_b||^2 of each (list, code), float32, computed in float64 in the rotated space as
        ||R^T c_l + z_hat_b||^2 (R is orthogonal), ROWS_PER_STEP rows at a time."""
        rotated = self._rotated()
        tables = self.quantizer._tables
        out = np.empty(codes.shape[0], dtype=np.float32)
        for start in range(0, codes.shape[0], ROWS_PER_STEP):
            stop = min(codes.shape[0], start + ROWS_PER_STEP)
            v = rotated[lists[start:stop]]
            v += tables.decode_rotated(np.ascontiguousarray(codes[start:stop]), n_threads)
            out[start:stop] = np.einsum("ij,ij->i", v, v)
        return out

    def _rotated(self):
        """R^T c_l of every centroid in the fine quantizer's padded rotated space, (L, M*S) float64."""
        rotated = self._rotated_centroids
        if rotated is None:
            rot_pad = self.quantizer._tables.rot_pad.astype(np.float64)
            rotated = self._rotated_centroids = self._coarse.centroids.astype(np.float64) @ rot_pad
        return rotated

    def decode(self, list_ids, codes, *, n_threads=None):
        """Reconstruct vectors: c_l + R z_hat_b.

        Parameters
        ----------
        list_ids : array-like of shape (n,), integers in 0..n_lists-1 (a scalar with a 1-D code)
        codes : array-like of shape (n, M*C) or (M*C,), integers in 0..n_codewords-1

        Returns
        -------
        X_hat : ndarray of shape (n, P) or (P,), dtype float32 (the sum computed in float64, rounded once)
        """
        self._check_fitted()
        codes, was_1d = as_codes(codes, "codes", self.code_size, self.n_codewords)
        lists, _ = as_list_ids(list_ids, "list_ids", self.n_lists, n=codes.shape[0])
        threads = self._threads(n_threads)
        out = np.empty((codes.shape[0], self.dim), dtype=np.float32)
        for start in range(0, codes.shape[0], ROWS_PER_STEP):
            stop = min(codes.shape[0], start + ROWS_PER_STEP)
            out[start:stop] = self._reconstruct(lists[start:stop], codes[start:stop], threads)
        return out[0] if was_1d else out

    def _reconstruct(self, lists, codes, n_threads):
        residual = self.quantizer._tables.decode(codes, n_threads).astype(np.float64)
        return (residual + self._coarse.centroids[lists]).astype(np.float32)

    def _rows_per_step(self):
        return ROWS_PER_STEP

    def _reconstruct_prepared(self, rows, n_threads):
        """c_l + R z_hat of the encoding of rows already checked and prepared, (n, P) float32."""
        lists, codes = self._encode_prepared(rows, n_threads)
        return self._reconstruct(lists, codes, n_threads)

    # ------------------------------------------------------------------------------------------------------- search
    def _probe(self, Q, n_probe, n_threads=1):
        """(lists int32 (nq, n_probe), terms float32 (nq, n_probe)): the lists a search of prepared queries Q
        (float32, C-contiguous) probes, and their terms (``_probing`` says how; the search kernel runs the same
        coarse step), on n_threads threads (an int >= 1; the results do not depend on it). Tests and tools call it
        (a search probes inside ``_kernels.ivf_search``)."""
        panels, c_sqnorms, kind, term_factor = self._probing()
        lists = np.empty((Q.shape[0], n_probe), dtype=np.int32)
        terms = np.empty((Q.shape[0], n_probe), dtype=np.float32)
        _kernels.probe(Q, panels, c_sqnorms, kind, term_factor, lists, terms, n_threads, self._probing_alone())
        return lists, terms

    def _probing(self):
        """(panels (P * L,) float32: the centroids in the probe kernel's panels, c_sqnorms (L,) float32, kind,
        term_factor): what the search kernel probes with. Each
        query scans its n_probe best lists, best first (ties: the smaller list id), ranked by ||q - c_l|| (kind
        PROBE_L2: "l2"; "cosine" too, for unit vectors the nearest centroids hold the best cosines) or by q.c_l
        (PROBE_IP: "ip"); list l's term is term_factor * q.c_l: -2 q.c_l for "l2" (the distance's), -q.c_l for "ip"
        and "cosine" (minus the score's)."""
        kind = PROBE_IP if self.metric == "ip" else PROBE_L2
        return self._coarse.panels, self._coarse.sqnorms, kind, -2.0 if self.metric == "l2" else -1.0

    def _probing_alone(self):
        """The prefilter a query probing alone reads instead of every centroid (a _kernels.CoarseHalf for
        ``_probing``'s kind, or None): the same lists and terms, at about half the memory traffic (kernels/ivf.h, "A query
        alone")."""
        return self._coarse.prefilter(PROBE_IP if self.metric == "ip" else PROBE_L2)

    # ------------------------------------------------------------------------------------- what indexes ask of a model
    # The same methods as the flat quantizers' (quantizers.Quantizer): indexes, writers and collections call them,
    # never asking which kind of model they hold (docs/ARCHITECTURE.md, "Kinds of index").
    def _encode_for_index(self, X, n_threads, first_row=0, norm_terms=True):
        """(lists (n,) int32, codes (n, M*C) uint8, norm terms ||c_l + R z_hat||^2 (n,) float32 or None) of checked
        rows ``X`` (any real dtype, right dimension; values are checked here; a bad row is named by its number plus
        ``first_row``)."""
        return self._encode_rows(X, n_threads, first_row, norms=norm_terms)

    def _norm_term_need(self):
        """(needed, reason): with metric "l2" every distance needs the stored norm term of the whole reconstruction
        (whatever C is); "ip" and "cosine" need none."""
        return (self.metric == "l2", "an IVF with metric 'l2': its distances need the norm term of the whole "
                                     "reconstruction")

    def _check_n_probe(self, n_probe, what="index", n_rows=None):
        """The n_probe of a search of ``n_rows`` rows: None means ``default_n_probe(n_lists, n_rows)``, else an int in
        1..n_lists (ValueError or TypeError naming n_probe otherwise)."""
        if n_probe is None:
            return default_n_probe(self.n_lists, n_rows)
        return check_int(n_probe, "n_probe", min_value=1, max_value=self.n_lists)

    def _summary(self) -> dict:
        """The fine quantizer's P, method, metric, M, C, K, T, bits, then n_lists: what describes an IVF model."""
        return {**self.quantizer._summary(), "n_lists": int(self.n_lists)}

    def _file_summary(self) -> dict:
        """What file_info says of an IVF quantizer file's model: ``_summary``, default_n_probe, coarse_objective, then
        the fine quantizer's code_size, iterations and objective (on residuals)."""
        fine = self.quantizer._file_summary()
        return {**self._summary(), "default_n_probe": int(self.default_n_probe),
                "coarse_objective": float(self._history[-1]),
                **{key: fine[key] for key in ("code_size", "iterations", "objective")}}

    # ------------------------------------------------------------------------------------------------- state
    def _get_state(self):
        """(ivf params, arrays): the IVF's own parameters (with "dim") and learned arrays; the fine quantizer's state
        is ``self.quantizer._get_state()``."""
        self._check_fitted()
        params = {"dim": self.dim, **self._stored_params()}
        arrays = {"coarse_centroids": self._coarse.centroids, "coarse_objective_history": self._history,
                  "ivf_norm_levels": self._norm_levels}
        if self._value_ranges is not None:
            arrays["value_ranges"] = self._value_ranges
        return params, arrays


def _read_only(arr):
    arr.flags.writeable = False
    return arr


def ivf_from_state(params: dict, arrays: dict, quantizer) -> IVF:
    """Rebuild a fitted IVF from ``IVF._get_state()`` output and its fitted fine quantizer (as stored in a file).

    No validation of shapes here: the file layer checks the file."""
    ivf = IVF(params["n_lists"], quantizer, n_iter=params["n_iter"], seed=params["seed"])
    ivf.dim = params["dim"]
    ivf._set_learned(arrays["coarse_centroids"], arrays["coarse_objective_history"], arrays["ivf_norm_levels"])
    ivf._set_value_ranges(arrays.get("value_ranges"))
    return ivf
