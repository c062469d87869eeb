"""The arrays of a fitted model in the layouts the kernels want.

``SubspaceLayout`` says how the P rotated dimensions are cut into M subspaces; ``CodecTables`` holds the rotation and
codebooks rearranged for the encoder, decoder and norm kernels (built once per model) (docs/ARCHITECTURE.md, "The
method"). The one-byte quantizer of the norm term is ``_norm_levels``.

No input validation here: callers pass C-contiguous float32 arrays without NaN/inf and codes < K.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _kernels
from .._blas import blas_single_thread

__all__ = ["SubspaceLayout", "CodecTables", "rotate"]


@dataclass(frozen=True)
class SubspaceLayout:
    """How the P rotated dimensions are split into M subspaces of at most S dimensions.

    Any P works: subspace m holds ``sizes[m]`` consecutive rotated dimensions (P // M or P // M + 1 of them, the
    larger ones first) and is zero-padded to S = ceil(P / M) dimensions, so every codebook is a K x S array whose
    padding columns are zero.
    """

    dim: int
    n_subspaces: int

    @property
    def sub_dim(self) -> int:
        return -(-self.dim // self.n_subspaces)

    @property
    def sizes(self) -> np.ndarray:
        base, extra = divmod(self.dim, self.n_subspaces)
        return np.array([base + (1 if m < extra else 0) for m in range(self.n_subspaces)], dtype=np.int64)

    @property
    def padded_columns(self) -> np.ndarray:
        """For each of the P rotated dims, its column in the padded M*S space."""
        S = self.sub_dim
        return np.concatenate([m * S + np.arange(size) for m, size in enumerate(self.sizes)])

    def pad_rotation(self, rotation) -> np.ndarray:
        """(P, M*S) float32: the rotation's columns placed in their subspace blocks, zero columns for padding."""
        out = np.zeros((self.dim, self.n_subspaces * self.sub_dim), dtype=np.float32)
        out[:, self.padded_columns] = np.eye(self.dim, dtype=np.float32) if rotation is None else rotation
        return out

    def unpad(self, Zp) -> np.ndarray:
        """(n, M*S) -> (n, P): drop the padding columns."""
        return Zp[:, self.padded_columns]




class CodecTables:
    """Arrays derived from a rotation and codebooks in the layouts the kernels want (computed once per model).

    rot_pad      (P, M*S) float32   rotation with padding columns
    words_t      (M, S, C*K) float32  words_t[m, s, c*K + k] = codebooks[m, c, k, s]
    word_sqnorms (M, C*K) float32   ||codebooks[m, c, k]||^2
    pair_tables  (M, C(C-1)/2 * K * K) float32  2 codebooks[m,c,k] . codebooks[m,c',k'] for c < c' (empty for C = 1)
    """

    def __init__(self, layout: SubspaceLayout, rotation, codebooks):
        M, C, K, S = codebooks.shape
        self.layout = layout
        self.n_codebooks = C
        self.n_codewords = K
        self.rot_pad = layout.pad_rotation(rotation)
        # Without a rotation and without padding, vectors are already in the kernel's layout: skip the product.
        identity = rotation is None and layout.dim == layout.n_subspaces * layout.sub_dim
        self._encode_rot = None if identity else self.rot_pad  # None: encode_beam's input is already rotated and padded
        self.words = np.ascontiguousarray(codebooks, dtype=np.float32)
        self.words_t = np.ascontiguousarray(self.words.transpose(0, 3, 1, 2).reshape(M, S, C * K))
        self.word_sqnorms = np.ascontiguousarray(np.einsum("mcks,mcks->mck", self.words, self.words).reshape(M, C * K))
        # On one BLAS thread, as every product of the encoder: a multi-threaded sgemm may round differently, and the
        # tables (hence norm terms) would then depend on the process's BLAS threads (a Dask worker runs with
        # OPENBLAS_NUM_THREADS=1, its client with every core), not only on the model.
        with blas_single_thread():
            pairs = [
                2.0 * (self.words[:, c] @ self.words[:, c2].transpose(0, 2, 1))
                for c in range(C)
                for c2 in range(c + 1, C)
            ]
        if pairs:
            stacked = np.stack(pairs, axis=1)  # (M, n_pairs, K, K)
            self.pair_tables = np.ascontiguousarray(stacked.reshape(M, -1), dtype=np.float32)
        else:
            self.pair_tables = np.zeros((M, 1), dtype=np.float32)

    def encode(self, X, beam_width, n_threads, prev_codes=None, rotated=False):
        """Beam-encode float32 rows; returns (codes uint8 (n, M*C), errors float32 (n,)).

        rotated=True: X is already X @ rot_pad, shape (n, M*S) (training computes it anyway), so it is used as is.
        """
        n = X.shape[0]
        M = self.words.shape[0]
        codes = np.empty((n, M * self.n_codebooks), dtype=np.uint8)
        errors = np.empty(n, dtype=np.float32)
        beam_width = min(beam_width, self.n_codewords)  # wider than K acts as K (and fits the kernel's int)
        with blas_single_thread():
            _kernels.encode_beam(X, None if rotated else self._encode_rot, self.words_t, self.word_sqnorms,
                                 self.pair_tables, self.n_codebooks, self.n_codewords, beam_width, prev_codes, codes,
                                 errors, n_threads)
        return codes, errors

    def decode_rotated(self, codes, n_threads):
        """(n, M*S) float32 reconstructions in the rotated, padded space."""
        out = np.empty((codes.shape[0], self.rot_pad.shape[1]), dtype=np.float32)
        _kernels.decode_rotated(codes, self.words, out, n_threads)
        return out

    def decode(self, codes, n_threads):
        """(n, P) float32 reconstructions in the input space: x_hat = R z_hat."""
        # In float64, rounded once: BLAS picks kernels by the number of rows, and float32 products would then
        # differ in their last bit between a block of rows and the same rows decoded in other blocks.
        rotated = self.decode_rotated(codes, n_threads).astype(np.float64)
        return (rotated @ self.rot_pad.T.astype(np.float64)).astype(np.float32)

    def code_sqnorms(self, codes, n_threads):
        out = np.empty(codes.shape[0], dtype=np.float32)
        _kernels.code_sqnorms(codes, self.word_sqnorms, self.pair_tables, self.n_codebooks, self.n_codewords,
                              out, n_threads)
        # ||z_hat||^2 is >= 0, but summed as words' squared norms plus pair products it can come out a hair below 0
        # when the words cancel (-8e-20 on degenerate data): files refuse negative norm levels (I6).
        np.maximum(out, 0, out=out)
        return out


def rotate(X, rot_pad, n_threads):
    """X @ rot_pad, (n, M*S) float32, by chunks of rows in parallel."""
    out = np.empty((X.shape[0], rot_pad.shape[1]), dtype=np.float32)
    with blas_single_thread():
        _kernels.matmul_rows(X, rot_pad, out, n_threads)
    return out
