"""The numpy backend: host arrays, the reference every other backend must equal.

Every method here is the plain numpy operation the core used before there were
backends (same calls, same buffers), so going through the door costs one Python
attribute lookup per call and nothing else.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._sparse import row_norms_sq, take_rows, vstack_rows

_BLAS_CONTROLLER = None


class NumpyBackend:
    """Array operations of the core on numpy arrays (see :mod:`mbkkm.backends`)."""

    name = "numpy"
    device = "cpu"
    is_host = True

    def __repr__(self):
        return "NumpyBackend()"

    def __eq__(self, other):
        return isinstance(other, NumpyBackend)

    def __hash__(self):
        return hash("numpy")

    # ------------------------------------------------------------ conversions
    def is_array(self, x):
        return isinstance(x, np.ndarray)

    def asarray(self, a, dtype=None):
        """A host array -> an array of this backend (here: no copy when possible)."""
        return np.asarray(a, dtype=dtype)

    def to_numpy(self, x):
        """An array of this backend -> a host numpy array (here: itself)."""
        return np.asarray(x)

    def index(self, idx):
        """Host integer indices -> indices this backend can gather with."""
        return idx

    def float_dtype(self, x):
        """The floating dtype the core computes in for items ``x`` (None: not floats)."""
        return np.result_type(x.dtype, np.float32) if x.dtype.kind == "f" else None

    def empty(self, shape, dtype):
        return np.empty(shape, dtype=dtype)

    def copy(self, x):
        return x.copy()

    def small_ops(self):
        """Context for many tiny BLAS calls: single-threaded BLAS inside it.

        Waking BLAS threads for a 100 x 100 product costs more than the product, and
        when another process holds a core a multi-threaded call waits for a
        scheduler tick (measured: 16 ms instead of 0.14 ms for (100 x 784)(784 x 100)).
        The user's own thread limit is restored on exit.
        """
        global _BLAS_CONTROLLER
        if _BLAS_CONTROLLER is None:
            from threadpoolctl import ThreadpoolController

            _BLAS_CONTROLLER = ThreadpoolController()
        return _BLAS_CONTROLLER.limit(limits=1, user_api="blas")

    # ---------------------------------------------------------------- kernels
    def kernel_tile(self, kernel, X, Y, out=None):
        """K(X, Y), shape (len(X), len(Y)), into ``out`` when given (X's dtype)."""
        if out is not None and not getattr(kernel, "is_callable", False):
            return kernel(X, Y, out=out)
        return np.asarray(kernel(X, Y))

    def tile_dtype(self, kernel, X):
        """dtype of a reusable ``out`` buffer for :meth:`kernel_tile` (None: no buffer)."""
        if getattr(kernel, "is_callable", False):
            return None
        return self.float_dtype(X)

    def kernel_diag(self, kernel, X):
        """K(x, x) for each item of X, shape (n,)."""
        return np.asarray(kernel.diag(X))

    # --------------------------------------------------------------- products
    def segment_inner(self, K, coef, starts):
        """P[:, j] = sum_{s in segment j} K[:, s] coef[s], shape (n_rows, k).

        ``coef`` (host, float64) and ``starts`` (host) describe contiguous segments.
        One matrix-vector product per segment: together they read K exactly once (a
        skinny GEMM against the (m, k) block-diagonal coefficient matrix is 30x
        slower in OpenBLAS, and a segment reduction of K * coef makes two passes).
        """
        k = len(starts) - 1
        P = np.empty((K.shape[0], k), dtype=K.dtype)
        c = coef.astype(K.dtype, copy=False)
        for j in range(k):
            s0, s1 = starts[j], starts[j + 1]
            if s1 > s0:
                np.matmul(K[:, s0:s1], c[s0:s1], out=P[:, j])
            else:
                P[:, j] = 0
        return P

    def quad_forms(self, grams, coef, starts, which):
        """c_j = a_j^T G_j a_j in float64 for the clusters ``which``, host (len(which),)."""
        out = np.empty(len(which))
        for i, j in enumerate(which):
            a = coef[starts[j]:starts[j + 1]]
            G = grams[j]
            # G a in G's dtype (no float64 copy of G), the last dot in float64.
            out[i] = float(a @ (G @ a.astype(G.dtype, copy=False)).astype(np.float64))
        return out

    # ---------------------------------------------------------------- gathers
    def concatenate(self, arrays, axis=0):
        """Arrays joined along ``axis`` (a new array); sparse rows stay sparse (CSR)."""
        if axis == 0 and any(sp.issparse(a) for a in arrays):
            return vstack_rows(arrays)
        return np.concatenate(arrays, axis=axis)

    def take(self, x, idx, axis=0):
        """``x[idx]`` along ``axis`` (a copy); idx from :meth:`index`. CSR rows stay CSR."""
        if axis == 0:
            return take_rows(x, idx) if sp.issparse(x) else x[idx]
        return x[:, idx]

    def take_block(self, A, rows, cols):
        """``A[rows][:, cols]`` (a copy)."""
        return A[np.ix_(rows, cols)]

    def index_add(self, target, idx, values):
        """``target[idx] += values`` summing repeated indices (in place)."""
        np.add.at(target, idx, values)
        return target

    # ------------------------------------------------------------- reductions
    def clip_min_(self, x, value):
        np.maximum(x, value, out=x)
        return x

    def argmin_min(self, D):
        """Row argmin and row minimum of D, shapes (n,) and (n,)."""
        lab = np.argmin(D, axis=1)
        return lab, D[np.arange(len(lab)), lab]

    def sum64(self, x):
        """Sum in float64, as a Python float."""
        return float(np.sum(x, dtype=np.float64))

    def row_norms_sq(self, X):
        return row_norms_sq(X) if sp.issparse(X) else np.einsum("ij,ij->i", X, X)

    def mean_squared_pairwise_distance(self, X, sample_weight=None):
        from ..kernels import mean_squared_pairwise_distance

        return mean_squared_pairwise_distance(X, sample_weight)

    def random_indices(self, random_state, n, size):
        """Uniform indices in [0, n) drawn on the host from ``random_state``."""
        return random_state.randint(0, n, size=size).astype(np.intp, copy=False)
