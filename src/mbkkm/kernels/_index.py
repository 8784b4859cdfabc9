"""Kernels on point indices: precomputed kernel matrices and graph kernels.

The estimators treat a stored kernel matrix (a precomputed array or memmap, a
sparse k-NN kernel, a low-rank heat kernel) as a kernel whose *items* are point
indices: a window holds indices, and a kernel block is a gather from the matrix.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._graph import LowRankKernel, kernel_block, kernel_diagonal

_CHUNK = 2048


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
    """

    is_callable = False
    normalized = False

    def __init__(self, name, matrix, params=None, dtype=np.float64):
        self.name = name
        self.matrix = matrix
        self.params = dict(params or {})
        self._dtype_name = np.dtype(dtype).name  # a string: safe for skops files
        self._diag = np.asarray(kernel_diagonal(matrix), dtype=self.dtype)

    def __repr__(self):
        return f"IndexKernel({self.name!r}, n={self.matrix.shape[0]}, {self.params})"

    @property
    def dtype(self):
        return np.dtype(self._dtype_name)

    @property
    def n_samples(self):
        return self.matrix.shape[0]

    def __call__(self, rows, cols, out=None):
        block = np.asarray(kernel_block(self.matrix, rows, cols), dtype=self.dtype)
        if out is not None:
            out[...] = block
            return out
        return block

    def diag(self, rows):
        return self._diag[np.asarray(rows, dtype=np.intp)]

    def full_diagonal(self):
        return self._diag


def check_precomputed_matrix(K, *, atol=1e-6, rtol=1e-5):
    """Check that a precomputed kernel matrix is square, symmetric and has K(x, x) >= 0.

    Symmetry is checked in row blocks (a memmap is never read whole at once),
    within ``atol + rtol * |K|``.
    """
    if len(K.shape) != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(
            f"kernel='precomputed' needs X to be the square n x n kernel matrix, got shape "
            f"{K.shape}"
        )
    n = K.shape[0]
    diag = np.diagonal(K) if isinstance(K, np.ndarray) else kernel_diagonal(K)
    if np.any(diag < 0):
        i = int(np.flatnonzero(diag < 0)[0])
        raise ValueError(
            f"kernel='precomputed': the kernel matrix has a negative diagonal entry "
            f"K[{i}, {i}] = {diag[i]:.3g}; a kernel has K(x, x) = ||phi(x)||^2 >= 0"
        )
    if isinstance(K, (LowRankKernel,)) or sp.issparse(K):
        return
    for start in range(0, n, _CHUNK):
        rows = np.asarray(K[start:start + _CHUNK], dtype=np.float64)
        cols = np.asarray(K[:, start:start + _CHUNK], dtype=np.float64).T
        if not np.allclose(rows, cols, atol=atol, rtol=rtol):
            bad = np.argwhere(~np.isclose(rows, cols, atol=atol, rtol=rtol))[0]
            i, j = start + int(bad[0]), int(bad[1])
            raise ValueError(
                f"kernel='precomputed': the kernel matrix is not symmetric "
                f"(K[{i}, {j}] = {K[i, j]:.6g} but K[{j}, {i}] = {K[j, i]:.6g})"
            )
