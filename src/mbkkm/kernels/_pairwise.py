"""Pairwise kernel functions computed block by block, in the dtype of the input.

Every function here takes ready, validated 2-D arrays of the same floating dtype
(float32 or float64) and returns a dense ``(len(X), len(Y))`` block of that dtype.
Dot-product kernels are one GEMM plus an in-place elementwise map, so a block
costs what the GEMM costs; ``out`` lets the caller reuse a buffer across
iterations (no allocation in the hot loop).

The plain references these must equal are :mod:`sklearn.metrics.pairwise`
(tested in ``tests/kernels``).

Sparse data
-----------
X and/or Y may also be scipy.sparse matrices (CSR; other formats are converted
to CSR), for every kernel but chi2 (scikit-learn's ``chi2_kernel`` refuses sparse
data, and so do we). The tile is always a dense ``(n_x, n_y)`` array of dtype
``result_type(X.dtype, Y.dtype)``; the data are never densified. The dense paths
are untouched: each function tests ``issparse`` once and branches.

- Dot-product kernels: the product X Y^T is computed by scipy (sparse x sparse:
  one sparse product then one dense copy of the tile; sparse x dense: CSR times a
  dense matrix), then the same in-place elementwise map.
- rbf: -gamma ||x - y||^2 = 2 gamma <x, y> - gamma |x|^2 - gamma |y|^2, from the
  same product and the row norms (the augmented GEMM needs dense rows).
- cosine: the rows are scaled to unit norm (zero rows stay zero) before the product.
- laplacian: scikit-learn's ``laplacian_kernel``, which has a sparse path.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.metrics.pairwise import chi2_kernel, laplacian_kernel

from ..backends._numpy import as_csr, row_norms_sq, row_range


def _tile_dtype(X, Y):
    return np.result_type(X.dtype, Y.dtype, np.float32)


#: Entries of the sparse intermediate of one sparse x sparse product block.
_PRODUCT_ENTRIES = 2**18


def _sparse_product(X, Y, out):
    """Dense ``X @ Y.T`` when X or Y is sparse, into ``out`` when given.

    sparse x sparse: scipy's sparse product (the result's sparsity is that of the
    tile, which for text is far from empty: 99% non-zeros for TF-IDF rows with
    frequent terms) written into the dense tile, block of rows of X by block, so
    the sparse intermediate (8 to 16 bytes per entry) stays below
    ``_PRODUCT_ENTRIES`` entries instead of doubling or tripling the tile's memory.
    Y is transposed to CSR once for all blocks.
    sparse x dense: CSR times the dense (d, n_y) matrix, row by row of X.
    dense x sparse: the transpose of the previous case.
    """
    dt = _tile_dtype(X, Y)
    xs, ys = sp.issparse(X), sp.issparse(Y)
    X = as_csr(X).astype(dt, copy=False) if xs else np.asarray(X, dtype=dt)
    Y = as_csr(Y).astype(dt, copy=False) if ys else np.asarray(Y, dtype=dt)
    if xs and ys:
        n_x, n_y = X.shape[0], Y.shape[0]
        out = np.empty((n_x, n_y), dtype=dt) if out is None else out
        YT = Y.T.tocsr()  # (d, n_y)
        step = max(1, _PRODUCT_ENTRIES // max(1, n_y))
        for start in range(0, n_x, step):
            stop = min(n_x, start + step)
            P = row_range(X, start, stop) @ YT
            if out.dtype == dt:
                P.toarray(out=out[start:stop])
            else:  # rows of another dtype than the fitted model's buffer: cast into it
                out[start:stop] = P.toarray()
        return out
    P = X @ Y.T if xs else (Y @ X.T).T  # dense (n_x, n_y), C or F order
    return np.ascontiguousarray(P) if out is None else write_into(out, P)


def write_into(out, K):
    """``K``, or ``out`` with K copied into it when given (a tile computed elsewhere)."""
    if out is None:
        return K
    out[...] = K
    return out


def diag_of_tiles(tile, X, out, step=256):
    """K(x, x) for each row of X, into ``out``: the diagonals of the (step x step) tiles
    ``tile(chunk, chunk)`` (numpy arrays or torch tensors), for a callable kernel."""
    for start in range(0, X.shape[0], step):
        chunk = X[start : start + step]
        out[start : start + step] = tile(chunk, chunk).diagonal()
    return out


def check_callable_tile(K, X, Y, real):
    """Raise when a callable kernel's tile K (a numpy array or a torch tensor) is not of
    shape (len(X), len(Y)), or not ``real`` (its dtype is not a real number's)."""
    if tuple(K.shape) != (X.shape[0], Y.shape[0]):
        raise ValueError(
            f"kernel: the callable must return an array of shape (n_x, n_y) = "
            f"({X.shape[0]}, {Y.shape[0]}), got shape {tuple(K.shape)}"
        )
    if not real:
        raise TypeError(f"kernel: the callable returned non-real dtype {K.dtype}")


def _gemm(X, Y, out):
    """``out[:] = X @ Y.T`` without a temporary (shape (n_x, n_y))."""
    if sp.issparse(X) or sp.issparse(Y):
        return _sparse_product(X, Y, out)
    if out is None:
        return X @ Y.T
    np.matmul(X, Y.T, out=out)
    return out


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
    """What :func:`rbf` reuses for every tile against the same left operand ``X``.

    Dense X: its augmented rows (``X_aug``); sparse X: its squared row norms.
    """
    if X.dtype.kind != "f":
        return {}
    if sp.issparse(X):
        return {"X_norms_sq": row_norms_sq(X)}
    return {"X_aug": rbf_augment_left(X, gamma)}


def rbf(X, Y, *, gamma, out=None, X_norms_sq=None, Y_norms_sq=None, X_aug=None, Y_aug=None, **_):
    """K(x, y) = exp(-gamma ||x - y||^2).

    -gamma ||x - y||^2 = <[2 gamma x, -gamma |x|^2, 1], [y, 1, -gamma |y|^2]>: one GEMM
    on two extra columns yields the exponent, leaving two elementwise passes (clip
    at 0, so rounding never yields K > 1, and exp) instead of five; they run on row
    chunks that stay in cache. ``X_aug`` / ``Y_aug``: either side prepared once.
    """
    if sp.issparse(X) or sp.issparse(Y):
        return _rbf_sparse(X, Y, gamma, out, X_norms_sq, Y_norms_sq)
    Xa = rbf_augment_left(X, gamma) if X_aug is None else X_aug
    Ya = rbf_augment(Y, gamma, Y_norms_sq) if Y_aug is None else Y_aug
    K = _gemm(Xa, Ya, out)
    for rows in _row_chunks(K):
        Kc = K[rows]
        np.minimum(Kc, 0, out=Kc)
        np.exp(Kc, out=Kc)
    return K


def _rbf_sparse(X, Y, gamma, out, X_norms_sq, Y_norms_sq):
    """rbf when X or Y is sparse: exp(min(0, 2 gamma <x, y> - gamma |x|^2 - gamma |y|^2)).

    ``X_norms_sq`` / ``Y_norms_sq``: squared row norms prepared once (or None).
    """
    K = _gemm(X, Y, out)  # <x, y>, dense (n_x, n_y)
    dt = K.dtype.type
    g = dt(gamma)
    x_term = np.asarray(row_norms_sq(X) if X_norms_sq is None else X_norms_sq, dtype=K.dtype) * -g
    y_term = np.asarray(row_norms_sq(Y) if Y_norms_sq is None else Y_norms_sq, dtype=K.dtype) * -g
    for rows in _row_chunks(K):
        Kc = K[rows]
        Kc *= dt(2.0 * gamma)
        Kc += x_term[rows, None]
        Kc += y_term[None, :]
        np.minimum(Kc, 0, out=Kc)
        np.exp(Kc, out=Kc)
    return K


def _affine_map(X, Y, out, gamma, coef0, finish):
    """gamma <x, y> + coef0 in the dtype of the product, then ``finish(rows)`` in place,
    on row chunks that stay in cache."""
    K = _gemm(X, Y, out)
    dt = K.dtype.type
    g, c = dt(gamma), dt(coef0)
    for rows in _row_chunks(K):
        Kc = K[rows]
        Kc *= g
        Kc += c
        finish(Kc)
    return K


def polynomial(X, Y, *, gamma, degree, coef0, out=None, **_):
    """K(x, y) = (gamma <x, y> + coef0) ** degree."""

    def power(Kc):
        p = int(degree) if float(degree).is_integer() else Kc.dtype.type(degree)
        return np.power(Kc, p, out=Kc)

    return _affine_map(X, Y, out, gamma, coef0, power)


def sigmoid(X, Y, *, gamma, coef0, out=None, **_):
    """K(x, y) = tanh(gamma <x, y> + coef0)."""
    return _affine_map(X, Y, out, gamma, coef0, lambda Kc: np.tanh(Kc, out=Kc))


def _unit_rows(X):
    norms = np.sqrt(row_norms_sq(X))
    norms[norms == 0] = 1
    if sp.issparse(X):
        X = as_csr(X)
        # Scale each stored value by its row's norm (a copy; zero rows stay zero).
        scaled = X.copy()
        scaled.data = X.data / np.repeat(norms, np.diff(X.indptr)).astype(X.dtype, copy=False)
        return scaled
    return X / norms[:, None]


def cosine_prepare(X, **_):
    """What :func:`cosine` reuses for every tile against the same left operand ``X``:
    its rows scaled to unit length (``X_unit``; sparse X stays sparse)."""
    return {"X_unit": _unit_rows(X)} if X.dtype.kind == "f" else {}


def cosine(X, Y, *, out=None, X_unit=None, **_):
    """K(x, y) = <x, y> / (|x| |y|) (0 for a zero vector, as in scikit-learn).

    ``X_unit``: X's unit rows prepared once (:func:`cosine_prepare`).
    """
    return _gemm(_unit_rows(X) if X_unit is None else X_unit, _unit_rows(Y), out)


def laplacian(X, Y, *, gamma, out=None, **_):
    """K(x, y) = exp(-gamma ||x - y||_1).

    Sparse X or Y: scikit-learn's sparse L1 distances (it turns a dense operand into
    CSR and merges the sorted column indices of every pair of rows, O(n_x n_y
    (nnz_x + nnz_y)), in float64), never densified; the tile in
    ``result_type(X.dtype, Y.dtype)``.
    """
    dt = X.dtype
    if sp.issparse(X) or sp.issparse(Y):
        dt = _tile_dtype(X, Y)
        X, Y = (as_csr(A) if sp.issparse(A) else A for A in (X, Y))
    return write_into(out, laplacian_kernel(X, Y, gamma=gamma).astype(dt, copy=False))


def chi2(X, Y, *, gamma, out=None, **_):
    """K(x, y) = exp(-gamma sum_i (x_i - y_i)^2 / (x_i + y_i)); non-negative data only."""
    if sp.issparse(X) or sp.issparse(Y):
        raise ValueError(
            "kernel='chi2' does not support sparse data (scikit-learn's chi2_kernel needs "
            "dense arrays); densify X with X.toarray() if it fits in memory, or choose "
            "another kernel (for text: 'cosine' or 'rbf')"
        )
    # scikit-learn's compiled loop takes writable buffers only: a read-only block (a
    # memory map, the command line's blocks) is copied, which costs a tile's rows
    X, Y = np.require(X, requirements="W"), np.require(Y, requirements="W")
    return write_into(out, chi2_kernel(X, Y, gamma=gamma).astype(X.dtype, copy=False))


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
