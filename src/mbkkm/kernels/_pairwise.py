"""Pairwise kernel functions computed block by block, in the dtype of the input.

Every function here takes ready, validated 2-D arrays of the same floating dtype
(float32 or float64) and returns a dense ``(len(X), len(Y))`` block of that dtype.
Dot-product kernels are one GEMM plus an in-place elementwise map, so a block
costs what the GEMM costs; ``out`` lets the caller reuse a buffer across
iterations (no allocation in the hot loop).

The plain references these must equal are :mod:`sklearn.metrics.pairwise`
(tested in ``tests/kernels``).
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics.pairwise import chi2_kernel, laplacian_kernel


def _gemm(X, Y, out):
    """``out[:] = X @ Y.T`` without a temporary (shape (n_x, n_y))."""
    if out is None:
        return X @ Y.T
    np.matmul(X, Y.T, out=out)
    return out


def row_norms_sq(X):
    """Squared Euclidean norm of each row, shape (n,), in X's dtype."""
    return np.einsum("ij,ij->i", X, X)


def linear(X, Y, *, out=None, Y_norms_sq=None, **_):
    """K(x, y) = <x, y>."""
    return _gemm(X, Y, out)


def rbf(X, Y, *, gamma, out=None, Y_norms_sq=None, **_):
    """K(x, y) = exp(-gamma ||x - y||^2).

    Rearranged for one GEMM: -gamma ||x-y||^2 = 2 gamma <x,y> - gamma |x|^2 - gamma |y|^2;
    the exponent is clipped at 0 so rounding never yields K > 1.
    """
    K = _gemm(X, Y, out)
    dt = K.dtype.type
    xx = row_norms_sq(X)
    yy = row_norms_sq(Y) if Y_norms_sq is None else Y_norms_sq
    K *= dt(2.0 * gamma)
    K -= (dt(gamma) * xx)[:, None]
    K -= (dt(gamma) * yy)[None, :]
    np.minimum(K, 0, out=K)
    np.exp(K, out=K)
    return K


def polynomial(X, Y, *, gamma, degree, coef0, out=None, **_):
    """K(x, y) = (gamma <x, y> + coef0) ** degree."""
    K = _gemm(X, Y, out)
    dt = K.dtype.type
    K *= dt(gamma)
    K += dt(coef0)
    if float(degree).is_integer():
        np.power(K, int(degree), out=K)
    else:
        np.power(K, dt(degree), out=K)
    return K


def sigmoid(X, Y, *, gamma, coef0, out=None, **_):
    """K(x, y) = tanh(gamma <x, y> + coef0)."""
    K = _gemm(X, Y, out)
    dt = K.dtype.type
    K *= dt(gamma)
    K += dt(coef0)
    np.tanh(K, out=K)
    return K


def _unit_rows(X):
    norms = np.sqrt(row_norms_sq(X))
    norms[norms == 0] = 1
    return X / norms[:, None]


def cosine(X, Y, *, out=None, **_):
    """K(x, y) = <x, y> / (|x| |y|) (0 for a zero vector, as in scikit-learn)."""
    return _gemm(_unit_rows(X), _unit_rows(Y), out)


def laplacian(X, Y, *, gamma, out=None, **_):
    """K(x, y) = exp(-gamma ||x - y||_1)."""
    K = laplacian_kernel(X, Y, gamma=gamma).astype(X.dtype, copy=False)
    if out is not None:
        out[...] = K
        return out
    return K


def chi2(X, Y, *, gamma, out=None, **_):
    """K(x, y) = exp(-gamma sum_i (x_i - y_i)^2 / (x_i + y_i)); non-negative data only."""
    K = chi2_kernel(X, Y, gamma=gamma).astype(X.dtype, copy=False)
    if out is not None:
        out[...] = K
        return out
    return K


# --- diagonals K(x, x), shape (n,) -------------------------------------------------


def diag_ones(X, **_):
    return np.ones(X.shape[0], dtype=X.dtype)


def diag_linear(X, **_):
    return row_norms_sq(X)


def diag_polynomial(X, *, gamma, degree, coef0, **_):
    d = row_norms_sq(X) * X.dtype.type(gamma) + X.dtype.type(coef0)
    return np.power(d, degree).astype(X.dtype, copy=False)


def diag_sigmoid(X, *, gamma, coef0, **_):
    return np.tanh(row_norms_sq(X) * X.dtype.type(gamma) + X.dtype.type(coef0))


def diag_cosine(X, **_):
    return (row_norms_sq(X) > 0).astype(X.dtype)
