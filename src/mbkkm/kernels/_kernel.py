"""Resolved kernels: a named or callable kernel with all parameters fixed.

:func:`resolve_kernel` is the boundary: it checks the user's kernel arguments
against the registry and the data, computes data-driven defaults, and returns a
:class:`Kernel` that the core calls without further checks.
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp

from ..backends import _sparse
from . import _pairwise as _pw
from ._registry import KERNELS, canonical_name, kernel_names

_CHUNK_ROWS = 65536


def mean_squared_pairwise_distance(X, sample_weight=None):
    """Mean of ||x - y||^2 over all ordered pairs (x, y) of rows of X, in O(n d).

    mean_{x,y} ||x - y||^2 = 2 mean_x ||x||^2 - 2 ||mean_x x||^2 = 2 sum_f Var(X[:, f]).
    Accumulated in float64 over row chunks, so a float32 memmap is never copied whole.
    A torch tensor is reduced on its device (see :mod:`mbkkm.backends`); a scipy
    sparse X is never densified (see :func:`_msd_sparse`).
    """
    from ..backends import get_backend, is_tensor

    if is_tensor(X):
        return get_backend(X).mean_squared_pairwise_distance(X, sample_weight)
    if sp.issparse(X):
        return _msd_sparse(X, sample_weight)
    n, d = X.shape
    w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    total = 0.0 if w is None else float(w.sum())
    if w is None:
        total = float(n)
    # Two-pass (mean, then centred squares) for accuracy on data far from 0.
    s = np.zeros(d)
    for start in range(0, n, _CHUNK_ROWS):
        chunk = np.asarray(X[start:start + _CHUNK_ROWS], dtype=np.float64)
        s += chunk.sum(0) if w is None else w[start:start + _CHUNK_ROWS] @ chunk
    mean = s / total
    ss = 0.0
    for start in range(0, n, _CHUNK_ROWS):
        chunk = np.asarray(X[start:start + _CHUNK_ROWS], dtype=np.float64) - mean
        sq = np.einsum("ij,ij->i", chunk, chunk)
        ss += sq.sum() if w is None else float(w[start:start + _CHUNK_ROWS] @ sq)
    return 2.0 * ss / total


def _msd_sparse(X, sample_weight=None):
    """:func:`mean_squared_pairwise_distance` of a sparse X, without densifying it.

    The same two passes (mean, then centred squares), the centred squares split
    into stored and implicit zeros: with W = sum_x w_x, mu = sum_x w_x x / W and
    W_f = sum of w_x over the rows x that store feature f,

        sum_x w_x (x_f - mu_f)^2 = sum_{stored (x, f)} w_x (x_f - mu_f)^2 + (W - W_f) mu_f^2.

    O(nnz + d) work in float64, over row chunks of the CSR.
    """
    X = _sparse.as_csr(X)
    n, d = X.shape
    w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    total = float(n) if w is None else float(w.sum())
    s = np.zeros(d)
    for start in range(0, n, _CHUNK_ROWS):
        chunk = X[start:start + _CHUNK_ROWS]
        wc = np.ones(chunk.shape[0]) if w is None else w[start:start + _CHUNK_ROWS]
        # w^T chunk as a (d,) vector: stored values times their row's weight.
        we = np.repeat(wc, np.diff(chunk.indptr))
        s += np.bincount(chunk.indices, weights=we * chunk.data, minlength=d)
    mean = s / total
    ss = 0.0
    w_stored = np.zeros(d)
    for start in range(0, n, _CHUNK_ROWS):
        chunk = X[start:start + _CHUNK_ROWS]
        wc = np.ones(chunk.shape[0]) if w is None else w[start:start + _CHUNK_ROWS]
        we = np.repeat(wc, np.diff(chunk.indptr))
        dc = chunk.data.astype(np.float64) - mean[chunk.indices]
        ss += float(we @ (dc * dc))
        w_stored += np.bincount(chunk.indices, weights=we, minlength=d)
    ss += float((total - w_stored) @ (mean * mean))
    return 2.0 * ss / total


class Kernel:
    """A kernel with every parameter resolved.

    ``kernel(X, Y, out=None)`` returns the ``(len(X), len(Y))`` block in X's
    dtype; ``kernel.diag(X)`` returns K(x, x) for each row.

    Parameters
    ----------
    name : str
        Registry name, or ``"callable"``.
    params : dict
        Resolved parameters (for a named kernel: those among gamma, degree,
        coef0 that it uses; for a callable: ``kernel_params``).
    func : callable, optional
        The user's callable ``func(X, Y, **params) -> (n_x, n_y)``.
    """

    def __init__(self, name, params, func=None):
        self.name = name
        self.params = dict(params)
        self._user_func = func
        if func is None:
            spec = KERNELS[name]
            self._func = spec.func
            self._diag = spec.diag
            self.normalized = spec.normalized
        else:
            self._func = None
            self._diag = None
            self.normalized = False

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"Kernel({self.name!r}{', ' if args else ''}{args})"

    @property
    def is_callable(self):
        return self._user_func is not None

    def prepare(self, Y):
        """What :meth:`__call__` can reuse across calls with the same ``Y`` (a dict).

        For rbf, the support side of the GEMM (``Y_aug``), or for a sparse ``Y`` its
        squared row norms (``Y_norms_sq``); nothing for other kernels.
        """
        if self.name == "rbf" and Y.dtype.kind == "f":
            if sp.issparse(Y):
                return {"Y_norms_sq": _pw.row_norms_sq(Y)}
            return {"Y_aug": _pw.rbf_augment(Y, self.params["gamma"])}
        return {}

    def __call__(self, X, Y, out=None, **cache):
        """The (len(X), len(Y)) block; ``cache`` from :meth:`prepare` for this ``Y``."""
        if self._user_func is None:
            return self._func(X, Y, out=out, **cache, **self.params)
        K = self._call_user(X, Y)
        if out is not None:
            out[...] = K
            return out
        return K

    def _call_user(self, X, Y):
        try:
            K = self._user_func(X, Y, **self.params)
        except Exception as exc:
            raise RuntimeError(
                f"the callable kernel raised {type(exc).__name__}: {exc}"
            ) from exc
        K = K.toarray() if sp.issparse(K) else np.asarray(K)
        if K.shape != (X.shape[0], Y.shape[0]):
            raise ValueError(
                f"kernel: the callable must return an array of shape (n_x, n_y) = "
                f"({X.shape[0]}, {Y.shape[0]}), got shape {K.shape}"
            )
        if not np.issubdtype(K.dtype, np.number) or np.iscomplexobj(K):
            raise TypeError(f"kernel: the callable returned non-real dtype {K.dtype}")
        K = K.astype(X.dtype, copy=False)
        if not np.all(np.isfinite(K)):
            raise ValueError("kernel: the callable returned non-finite values (NaN or inf)")
        return K

    def diag(self, X):
        """K(x, x) for each row of X, shape (n,)."""
        if self._user_func is None:
            return self._diag(X, **self.params)
        out = np.empty(X.shape[0], dtype=X.dtype)
        step = 256
        for start in range(0, X.shape[0], step):
            chunk = X[start:start + step]
            out[start:start + step] = np.diagonal(self._call_user(chunk, chunk))
        return out


def _check_positive_number(value, name, allow_zero=False):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    if not np.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")


def resolve_kernel(kernel, *, gamma=None, degree=3, coef0=1, kernel_params=None, X=None,
                   sample_weight=None):
    """Check the kernel arguments and return a :class:`Kernel`.

    Parameters
    ----------
    kernel : str or callable
        A registry name (see :data:`mbkkm.kernels.KERNELS`) or a callable
        ``k(X, Y, **kernel_params) -> (n_x, n_y)``.
    gamma, degree, coef0 : float or None
        Kernel parameters, with scikit-learn's meaning. ``gamma=None``: for rbf and
        laplacian 1 / (mean squared pairwise distance of X), for polynomial and
        sigmoid 1 / n_features, for chi2 1.
    kernel_params : dict or None
        Extra keyword arguments of a callable kernel; for a named kernel, an
        alternative way to give gamma, degree or coef0.
    X : ndarray or scipy.sparse matrix of shape (n_samples, n_features), optional
        The data, for data-driven defaults and domain checks. Sparse data are
        accepted by every named kernel whose spec has ``accepts_sparse`` (all but
        chi2, which raises a ValueError).
    sample_weight : ndarray, optional
        Weights used by the data-driven gamma.
    """
    if kernel_params is not None and not isinstance(kernel_params, dict):
        raise TypeError(
            f"kernel_params must be a dict or None, got {type(kernel_params).__name__}"
        )
    kernel_params = dict(kernel_params or {})
    if callable(kernel):
        return Kernel("callable", kernel_params, func=kernel)
    if not isinstance(kernel, str):
        raise TypeError(
            f"kernel must be a string or a callable, got {type(kernel).__name__}"
        )
    name = canonical_name(kernel)
    if name in KERNELS and KERNELS[name].func is None:
        raise ValueError(
            f"kernel={kernel!r} is a graph (transductive) kernel: it is a matrix over the "
            "fitted points, not a function of two points. Pass it to an estimator's kernel= "
            "parameter, or build it with mbkkm.kernels.graph_kernel_matrix"
        )
    if name not in KERNELS:
        allowed = [n for n in kernel_names() if n in ALLOWED_HERE()]
        raise ValueError(f"kernel={kernel!r} is not a known kernel; expected one of "
                         f"{allowed} or a callable")
    spec = KERNELS[name]
    if X is not None and sp.issparse(X) and not spec.accepts_sparse:
        raise ValueError(
            f"kernel={kernel!r} does not support sparse X (scikit-learn's "
            f"{spec.sklearn_name}_kernel needs dense arrays); densify X with X.toarray() "
            "if it fits in memory, or choose one of the kernels that take sparse data: "
            f"{sorted(n for n, s in KERNELS.items() if s.func is not None and s.accepts_sparse)}"
        )
    values = {"gamma": gamma, "degree": degree, "coef0": coef0}
    for key, value in kernel_params.items():
        if key not in spec.params:
            raise ValueError(
                f"kernel_params: {key!r} is not a parameter of kernel {name!r} "
                f"(its parameters: {list(spec.params)})"
            )
        values[key] = value
    params = {}
    if "gamma" in spec.params:
        g = values["gamma"]
        if g is None:
            if spec.default_gamma == "data":
                if X is None:
                    raise ValueError("gamma=None needs the data to choose a default")
                msd = mean_squared_pairwise_distance(X, sample_weight)
                g = 1.0 / msd if msd > 0 else 1.0
            elif spec.default_gamma == "n_features":
                g = 1.0 / X.shape[1] if X is not None else 1.0
            else:
                g = 1.0
        else:
            _check_positive_number(g, "gamma")
        params["gamma"] = float(g)
    if "degree" in spec.params:
        d = values["degree"]
        _check_positive_number(d, "degree", allow_zero=True)
        params["degree"] = d
    if "coef0" in spec.params:
        c = values["coef0"]
        if isinstance(c, bool) or not isinstance(c, numbers.Real):
            raise TypeError(f"coef0 must be a real number, got {type(c).__name__}")
        if not np.isfinite(c):
            raise ValueError(f"coef0 must be finite, got {c!r}")
        params["coef0"] = float(c)
    if spec.nonnegative_data and X is not None:
        check_nonnegative(X, name)
    return Kernel(name, params)


def check_nonnegative(X, name):
    """Raise when X has a negative entry (chunked, so a memmap is not read at once)."""
    if sp.issparse(X):
        X = _sparse.as_csr(X)
        if np.min(X.data, initial=0) < 0:
            raise ValueError(
                f"kernel={name!r} is only defined for non-negative data, but X has "
                "negative values"
            )
        return
    for start in range(0, X.shape[0], _CHUNK_ROWS):
        if np.min(X[start:start + _CHUNK_ROWS], initial=0) < 0:
            raise ValueError(
                f"kernel={name!r} is only defined for non-negative data, but X has "
                "negative values"
            )


def ALLOWED_HERE():
    """Names accepted by :func:`resolve_kernel` (pairwise kernels and aliases)."""
    return [n for n in kernel_names() if KERNELS[canonical_name(n)].func is not None]
