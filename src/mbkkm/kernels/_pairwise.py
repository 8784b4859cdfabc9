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


def _row_chunks(K):
    """Row slices of K of about 256 KiB each, so elementwise passes run in cache."""
    n, m = K.shape
    rows = max(8, (256 * 1024) // max(1, m * K.itemsize))
    for start in range(0, n, rows):
        yield slice(start, min(n, start + rows))


def linear(X, Y, *, out=None, Y_norms_sq=None, **_):
    """K(x, y) = <x, y>."""
    return _gemm(X, Y, out)


def rbf_augment(Y, gamma, Y_norms_sq=None):
    """[Y, 1, -gamma |y|^2], shape (m, d + 2): the support side of :func:`rbf`'s GEMM.

    Computed once per support set and reused for every row tile (``Y_aug=``).
    """
    m, d = Y.shape
    dt = Y.dtype.type
    Ya = np.empty((m, d + 2), dtype=Y.dtype)
    Ya[:, :d] = Y
    Ya[:, d] = 1
    Ya[:, d + 1] = (row_norms_sq(Y) if Y_norms_sq is None else Y_norms_sq) * dt(-gamma)
    return Ya


def rbf_augment_left(X, gamma):
    """[2 gamma x, -gamma |x|^2, 1], shape (n, d + 2): the left side of :func:`rbf`'s GEMM.

    Computed once per support set when the support is the left operand (the
    labelling pass's K(S, X_chunk) tiles) and reused for every tile (``X_aug=``).
    """
    n, d = X.shape
    dt = X.dtype.type
    Xa = np.empty((n, d + 2), dtype=X.dtype)
    np.multiply(X, dt(2.0 * gamma), out=Xa[:, :d])
    Xa[:, d] = row_norms_sq(X) * dt(-gamma)
    Xa[:, d + 1] = 1
    return Xa


def rbf_prepare(X, *, gamma, **_):
    """What :func:`rbf` reuses for every tile against the same left operand ``X``."""
    if X.dtype.kind != "f":
        return {}
    return {"X_aug": rbf_augment_left(X, gamma)}


def rbf(X, Y, *, gamma, out=None, Y_norms_sq=None, X_aug=None, Y_aug=None, **_):
    """K(x, y) = exp(-gamma ||x - y||^2).

    -gamma ||x - y||^2 = <[2 gamma x, -gamma |x|^2, 1], [y, 1, -gamma |y|^2]>: one GEMM
    on two extra columns yields the exponent, leaving two elementwise passes (clip
    at 0, so rounding never yields K > 1, and exp) instead of five; they run on row
    chunks that stay in cache. ``X_aug`` / ``Y_aug``: either side prepared once.
    """
    Xa = rbf_augment_left(X, gamma) if X_aug is None else X_aug
    Ya = rbf_augment(Y, gamma, Y_norms_sq) if Y_aug is None else Y_aug
    K = _gemm(Xa, Ya, out)
    for rows in _row_chunks(K):
        Kc = K[rows]
        np.minimum(Kc, 0, out=Kc)
        np.exp(Kc, out=Kc)
    return K


def polynomial(X, Y, *, gamma, degree, coef0, out=None, **_):
    """K(x, y) = (gamma <x, y> + coef0) ** degree."""
    K = _gemm(X, Y, out)
    dt = K.dtype.type
    g, c = dt(gamma), dt(coef0)
    p = int(degree) if float(degree).is_integer() else dt(degree)
    for rows in _row_chunks(K):
        Kc = K[rows]
        Kc *= g
        Kc += c
        np.power(Kc, p, out=Kc)
    return K


def sigmoid(X, Y, *, gamma, coef0, out=None, **_):
    """K(x, y) = tanh(gamma <x, y> + coef0)."""
    K = _gemm(X, Y, out)
    dt = K.dtype.type
    g, c = dt(gamma), dt(coef0)
    for rows in _row_chunks(K):
        Kc = K[rows]
        Kc *= g
        Kc += c
        np.tanh(Kc, out=Kc)
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
