"""Kernels on point indices: precomputed kernel matrices and graph kernels.

The estimators treat a stored kernel matrix (a precomputed array or memmap, a
sparse k-NN kernel, a low-rank heat kernel) as a kernel whose *items* are point
indices: a window holds indices, and a kernel block is a gather from the matrix.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._graph import LowRankKernel, kernel_block, kernel_diagonal
from ._pairwise import write_into


class IndexKernel:
    """K(i, j) read from a stored n x n kernel matrix; items are indices in [0, n).

    Parameters
    ----------
    name : str
        "precomputed", "knn" or "heat".
    matrix : ndarray, memmap, scipy sparse matrix or LowRankKernel of shape (n, n)
    params : dict
        The parameters it was built with (for display).
    dtype : numpy dtype
        dtype of the blocks it returns.
    diag : ndarray of shape (n,), optional
        K(i, i) when already known.
    extension : object, optional
        For a graph kernel, how new points get their kernel values against the fitted
        ones (``rows(X) -> (items, diag)`` and ``cross(support, items)``); None: the
        kernel has no value at new points.
    """

    is_callable = False
    normalized = False

    def __init__(self, name, matrix, params=None, dtype=np.float64, diag=None, extension=None):
        self.name = name
        self.extension = extension
        self.matrix = matrix
        self.params = dict(params or {})
        self._dtype_name = np.dtype(dtype).name  # a string: safe for skops files
        self._diag = np.asarray(kernel_diagonal(matrix) if diag is None else diag, dtype=self.dtype)

    def __repr__(self):
        return f"IndexKernel({self.name!r}, n={self.matrix.shape[0]}, {self.params})"

    @property
    def dtype(self):
        return np.dtype(self._dtype_name)

    @property
    def n_samples(self):
        return self.matrix.shape[0]

    def __call__(self, rows, cols, out=None):
        return write_into(out, np.asarray(kernel_block(self.matrix, rows, cols), dtype=self.dtype))

    def stored_rows(self, rows):
        """The rows ``K[rows]`` of the stored matrix, shape (len(rows), n).

        A stored kernel is symmetric (a precomputed matrix is checked to be so within
        rounding, a graph kernel is by construction), so these are also the columns
        ``K[:, rows]``: reading whole rows is one contiguous copy each, where a
        block against all points gathers from every row. CSR for a sparse matrix,
        dense float64 otherwise.
        """
        rows = np.asarray(rows, dtype=np.intp)
        M = self.matrix
        if sp.issparse(M):
            return M.tocsr()[rows].astype(np.float64)
        if isinstance(M, LowRankKernel):
            return M.block(rows, np.arange(M.shape[0]))
        return np.asarray(np.take(M, rows, axis=0), dtype=np.float64)

    #: The block K[rows][:, cols] (host index arrays: a stored kernel is numpy only,
    #: which the estimators check before a fit).
    tile = __call__

    def diag(self, rows):
        return self._diag[np.asarray(rows, dtype=np.intp)]

    def full_diagonal(self):
        return self._diag


def is_stored_kernel(K):
    """Whether K is a sparse or low-rank kernel matrix (not an array to validate)."""
    return sp.issparse(K) or isinstance(K, LowRankKernel)


def validate_stored_kernel(K):
    """A sparse (as CSR) or low-rank precomputed kernel matrix, checked for shape and
    finite values: what ``validate_data`` does for dense ones."""
    if len(K.shape) != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(
            f"kernel='precomputed' needs X to be the square n x n kernel matrix, got "
            f"shape {K.shape}"
        )
    if sp.issparse(K):
        K = K.tocsr()
        values = [K.data]
    else:  # a low-rank matrix U diag(w) U^T: its factors
        values = [K.U, np.asarray(K.weights)]
    if not all(np.all(np.isfinite(v)) for v in values):
        raise ValueError("kernel='precomputed': the kernel matrix has NaN or inf")
    return K


def check_precomputed_matrix(K, what="X", tile=256):
    """Check a precomputed kernel matrix: square, K(x, x) >= 0, symmetric within rounding.

    Symmetry is checked tile by tile over the upper triangle, each ``tile`` x ``tile``
    block against the transpose of its mirror block: the matrix is read once, never
    whole at once, and both blocks of a pair stay in cache (reading whole columns
    instead touches every page of a large memmap once per block of rows: 14-18 s
    against about 2 s in tiles on a memory-mapped 20,000^2 kernel). The tolerance
    is sqrt(eps) of the dtype times the largest |K| entry read so far; sparse and
    low-rank matrices (symmetric by construction) are checked for shape and
    diagonal only.

    Returns
    -------
    diag : ndarray of shape (n,), float64
        K(x, x).
    """
    if len(K.shape) != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(
            f"kernel='precomputed' needs {what} to be the square (n_samples, n_samples) "
            f"kernel matrix, got shape {K.shape}"
        )
    n = K.shape[0]
    diag = np.asarray(kernel_diagonal(K), dtype=np.float64)
    if np.any(diag < 0):
        i = int(np.flatnonzero(diag < 0)[0])
        raise ValueError(
            f"kernel='precomputed': {what} has a negative diagonal entry "
            f"K[{i}, {i}] = {diag[i]:.3g}; a kernel has K(x, x) = ||phi(x)||^2 >= 0"
        )
    if isinstance(K, LowRankKernel) or sp.issparse(K):
        return diag
    scale = float(np.max(np.abs(diag), initial=0.0))
    rtol = float(np.sqrt(np.finfo(np.result_type(K.dtype, np.float32)).eps))
    for r0 in range(0, n, tile):
        for c0 in range(r0, n, tile):
            upper = np.asarray(K[r0 : r0 + tile, c0 : c0 + tile], dtype=np.float64)
            mirror = np.asarray(K[c0 : c0 + tile, r0 : r0 + tile], dtype=np.float64).T
            for block in (upper, mirror):
                scale = max(scale, float(np.max(np.abs(block), initial=0.0)))
            gap = np.abs(upper - mirror)
            if np.max(gap, initial=0.0) > rtol * max(scale, np.finfo(np.float64).tiny):
                i, j = np.unravel_index(int(np.argmax(gap)), gap.shape)
                i, j = i + r0, j + c0
                raise ValueError(
                    f"kernel='precomputed': {what} is not a symmetric kernel matrix "
                    f"(K[{i}, {j}] = {K[i, j]:.6g} but K[{j}, {i}] = {K[j, i]:.6g})"
                )
    return diag
