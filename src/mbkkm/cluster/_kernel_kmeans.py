"""KernelKMeans: exact full-batch kernel k-means (Lloyd's algorithm in feature space).

The baseline of the paper: every iteration assigns all n points to the nearest
center in feature space, then moves every center to the (weighted) mean of its
points. Centers are never explicit; center j is the mean of the points
``A_j`` currently assigned to it,

    C_j = (1 / W_j) sum_{y in A_j} w_y phi(y),    W_j = sum_{y in A_j} w_y,

so the squared distance of a point x to C_j is

    ||phi(x) - C_j||^2 = K(x, x) - 2 sum_{y in A_j} w_y K(x, y) / W_j
                         + sum_{y, y' in A_j} w_y w_y' K(y, y') / W_j^2.

With the (n, k) coefficient matrix A[y, j] = w_y / W_j if y is in A_j, else 0
(a weighted one-hot matrix of the labels), one product gives every inner product

    P = K A,  P[x, j] = <phi(x), C_j> = sum_{y in A_j} w_y K(x, y) / W_j,

and the squared norms come from P for free:

    c_j = ||C_j||^2 = sum_{y in A_j} (w_y / W_j) sum_{y' in A_j} K(y, y') w_y' / W_j
        = sum_y A[y, j] P[y, j]  (column sums of A * P).

So an iteration is one (n x n) by (n x k) product, D = diag(K) - 2 P + c, and
an argmin. The product uses the stored n x n kernel matrix when it fits the
memory budget, else blocks of kernel rows recomputed each iteration.

References
----------
I. S. Dhillon, Y. Guan and B. Kulis. "Kernel k-means, spectral clustering and
normalized cuts." KDD 2004.
B. Jourdan and G. Schwartzman. "Mini-batch kernel k-means." 2024 (the full-batch
baseline of Section 5).
"""

from __future__ import annotations

import time
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn import get_config
from sklearn.base import _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_array, validate_data

from .._core import kernel_kmeans_plusplus, labelling_state, random_init
from ..backends._sparse import as_csr, is_sparse, take_rows
from ..kernels import (
    graph_kernel_matrix,
    kernel_block,
    kernel_diagonal,
    kernel_names,
    resolve_kernel,
)
from ..kernels._graph import LowRankKernel
from ..kernels._index import (
    IndexKernel,
    check_precomputed_matrix,
    is_stored_kernel,
    validate_stored_kernel,
)
from ._base import BaseKernelKMeans
from ._common import (
    COMMON_CONSTRAINTS,
    KERNEL_CONSTRAINTS,
    check_n_clusters_vs_samples,
    check_no_overflow,
    check_sample_weight,
    chunk_rows,
    draw_init_subsample,
    restore_on_error,
    warn_empty_clusters,
)

_MIB = 2**20
_GIB = 2**30


class KernelMemoryError(MemoryError, ValueError):
    """The kernel matrix fits neither the memory budget nor blocks of kernel rows.

    A subclass of both :class:`MemoryError` and :class:`ValueError`; raised before
    any kernel evaluation, with the estimated sizes in GiB.
    """


# ----------------------------------------------------------------------------- core
# Pure functions and small kernel operators: ready arrays in, no estimator, no checks.


class _MatrixOperator:
    """Products with a kernel matrix held in memory (dense, sparse or low-rank)."""

    def __init__(self, K):
        self.K = K
        self.n = K.shape[0]

    def product(self, A):
        """K @ A, shape (n, k), float64."""
        if isinstance(self.K, LowRankKernel):
            # K = U diag(w) U^T: (n, r) (r, r) (r, n) (n, k), never n x n.
            return self.K.U @ (self.K.weights[:, None] * (self.K.U.T @ A))
        A = A.astype(self.K.dtype, copy=False)
        return np.asarray(self.K @ A, dtype=np.float64)

    def columns(self, idx):
        """K[:, idx], shape (n, len(idx)), float64."""
        return np.asarray(kernel_block(self.K, np.arange(self.n), idx), dtype=np.float64)


class _BlockOperator:
    """Products with K(X, X) recomputed block of rows by block of rows (K never stored)."""

    def __init__(self, kernel, X, block_rows):
        self.kernel = kernel
        self.X = X
        self.n = X.shape[0]
        self.block_rows = block_rows

    def product(self, A):
        n, br = self.n, self.block_rows
        A = A.astype(self.X.dtype, copy=False)
        out = np.empty((n, A.shape[1]), dtype=np.float64)
        buf = np.empty((min(br, n), n), dtype=self.X.dtype)  # one block of kernel rows
        for r0 in range(0, n, br):
            r1 = min(r0 + br, n)
            Kb = self.kernel(self.X[r0:r1], self.X, out=buf[: r1 - r0])  # (r1 - r0, n)
            out[r0:r1] = Kb @ A
        return out


def _e_step(P, c, diag):
    """Squared distances D = diag - 2 P + c (clipped at 0), labels and row minima."""
    D = P * -2.0
    D += diag[:, None]
    D += c[None, :]
    np.maximum(D, 0.0, out=D)
    labels = np.argmin(D, axis=1)
    mind = D[np.arange(D.shape[0]), labels]
    return labels, mind, D


def _relocate_empty(labels, mind, w, k):
    """Move the points farthest from their centers into empty clusters (as scikit-learn).

    Only points of positive weight can fill a cluster; returns new labels (a copy when
    something moved).
    """
    W = np.bincount(labels, weights=w, minlength=k)
    empty = np.flatnonzero(W <= 0)
    if empty.size == 0:
        return labels
    score = np.where(w > 0, mind, -np.inf)
    n_move = min(empty.size, int(np.count_nonzero(w > 0)))
    if n_move == 0:
        return labels
    far = np.argpartition(score, -n_move)[-n_move:]
    far = far[np.argsort(-score[far], kind="stable")]
    labels = labels.copy()
    labels[far] = empty[:n_move]
    return labels


def _coefficients(labels, w, k):
    """Weighted one-hot matrix A[y, j] = w_y / W_j (y in A_j), shape (n, k), and W."""
    n = labels.shape[0]
    W = np.bincount(labels, weights=w, minlength=k)
    A = np.zeros((n, k))
    with np.errstate(divide="ignore", invalid="ignore"):
        A[np.arange(n), labels] = np.where(W[labels] > 0, w / W[labels], 0.0)
    return A, W


def _m_step(op, labels, w, k):
    """Inner products P = K A (n, k) and squared norms c (k,) of the cluster means."""
    A, W = _coefficients(labels, w, k)
    P = op.product(A)
    c = np.einsum("ij,ij->j", A, P)
    c[W <= 0] = np.inf  # a cluster with no weight attracts no point
    return P, c


def kernel_lloyd(op, diag, P0, c0, w, max_iter, tol, verbose=0):
    """Lloyd's algorithm in feature space from initial centers given by (P0, c0).

    Iteration i assigns every point to the nearest center (E-step against the
    centers C_i), then sets C_{i+1} to the weighted means of the clusters
    (M-step, one product with K). It stops after iteration i when the labels did
    not change (strict convergence: C_{i+1} = C_i), when the objective
    f_i = sum_x w_x min_j ||phi(x) - C_{i,j}||^2 improved by less than
    ``tol * f_{i-1}`` (then C_i and its labels are returned), or after
    ``max_iter`` iterations (then a last E-step against C_{max_iter} gives the
    labels). The returned labels are always the nearest centers of the returned
    centers, which is scikit-learn's KMeans(algorithm="lloyd") convention.

    Parameters
    ----------
    op : object with ``product(A) -> K @ A``
    diag : ndarray of shape (n,)
        K(x, x).
    P0 : ndarray of shape (n, k)
        <phi(x), C_0j> for the initial centers.
    c0 : ndarray of shape (k,)
        ||C_0j||^2.
    w : ndarray of shape (n,)
        Sample weights (ones when unweighted).
    max_iter : int
    tol : float
        Relative tolerance on the objective decrease.
    verbose : int

    Returns
    -------
    center_labels : ndarray of shape (n,) or None
        The clusters whose means are the returned centers (None: the initial
        centers, never the case with ``max_iter >= 1``).
    labels : ndarray of shape (n,)
    mind : ndarray of shape (n,)
        Squared distance of each point to its center.
    D : ndarray of shape (n, k)
        Squared distances to every center.
    n_iter : int
    c : ndarray of shape (k,)
        Squared norms of the returned centers (inf for an empty cluster).
    """
    k = P0.shape[1]
    diag = np.asarray(diag, dtype=np.float64)
    P, c = P0, np.asarray(c0, dtype=np.float64)
    center_labels = None
    labels_old, obj_old = None, None
    t0 = time.perf_counter()
    n_iter = 0
    for it in range(max_iter):
        labels, mind, D = _e_step(P, c, diag)
        obj = float(mind @ w)
        n_iter = it + 1
        if verbose:
            print(f"Iteration {it + 1}: objective {obj:.6g}, "
                  f"{time.perf_counter() - t0:.2f}s")
        if labels_old is not None:
            if np.array_equal(labels, labels_old):
                if verbose:
                    print(f"Converged at iteration {it + 1}: strict convergence.")
                return center_labels, labels, mind, D, n_iter, c
            if obj_old - obj < tol * obj_old:
                if verbose:
                    print(f"Converged at iteration {it + 1}: objective change "
                          f"{obj_old - obj:.3g} < tol * objective.")
                return center_labels, labels, mind, D, n_iter, c
        center_labels = _relocate_empty(labels, mind, w, k)
        P, c = _m_step(op, center_labels, w, k)
        labels_old, obj_old = labels, obj
    labels, mind, D = _e_step(P, c, diag)
    return center_labels, labels, mind, D, n_iter, c


# ------------------------------------------------------------------------- estimator


def _kernel_options():
    return set(kernel_names()) | {"precomputed"}


class KernelKMeans(BaseKernelKMeans):
    """Exact full-batch kernel k-means: Lloyd's algorithm in feature space.

    Every iteration assigns all points to the nearest center in the feature space
    of the kernel, then sets every center to the (weighted) mean of its points.
    One iteration is one product of the n x n kernel matrix with an (n, k)
    matrix: the matrix is computed once and stored when it fits
    ``max_kernel_memory``, otherwise its rows are recomputed block by block at
    every iteration (blocks sized from ``working_memory``).

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters.
    kernel : str or callable, default="rbf"
        Kernel name: "rbf" (alias "gaussian"), "laplacian", "polynomial" (alias
        "poly"), "linear", "cosine", "sigmoid", "chi2"; the graph kernels "knn"
        and "heat" (built on the training points, see Notes); "precomputed" (X is
        the kernel matrix); or a callable ``kernel(X, Y, **kernel_params)``
        returning the (n_x, n_y) kernel block.
    gamma : float, default=None
        Kernel coefficient of rbf, laplacian, polynomial, sigmoid and chi2, as in
        :class:`~mbkkm.cluster.MiniBatchKernelKMeans` (None: data-driven for rbf
        and laplacian, 1 / n_features for polynomial and sigmoid, 1 for chi2).
    degree : float, default=3
        Degree of the polynomial kernel.
    coef0 : float, default=1
        Constant term of the polynomial and sigmoid kernels.
    kernel_params : dict, default=None
        Extra keyword arguments of a callable kernel, or of the graph kernels
        (``n_neighbors``, required; ``t`` for "heat"; see
        :func:`mbkkm.kernels.knn_kernel` and :func:`mbkkm.kernels.heat_kernel`).
    init : {"k-means++", "random"} or array-like, default="k-means++"
        "k-means++": greedy kernel k-means++ in feature space on ``init_size``
        points (all points by default, as scikit-learn's KMeans); "random":
        ``n_clusters`` distinct random points. An array: the initial centers,
        of shape (n_clusters, n_features) as points in input space for point
        kernels, or of shape (n_clusters,) as integer indices of training points
        for "precomputed" and the graph kernels.
    n_init : int, default=1
        Number of runs from different initialisations; the run with the lowest
        final inertia is kept (as scikit-learn's KMeans).
    init_size : int, default=None
        Number of points, drawn without replacement, on which k-means++ or
        "random" choose the initial centers; None uses all points.
    max_iter : int, default=300
        Maximum number of Lloyd iterations of each run.
    tol : float, default=1e-4
        Relative tolerance: a run stops when the labels do not change (strict
        convergence), or when the objective (the weighted sum of squared
        distances of the points to the centers they are assigned to) decreases by
        less than ``tol`` times its previous value. 0 stops only at strict
        convergence (or when rounding makes the objective grow).
    max_kernel_memory : float, default=2048
        Budget in MiB for the stored n x n kernel matrix (``n**2 * itemsize``
        bytes, itemsize 4 for float32 data and 8 for float64). Above it, kernel
        rows are recomputed in blocks at every iteration. For the heat kernel it
        is the dense-matrix budget of :func:`mbkkm.kernels.heat_kernel` (beyond
        it, a low-rank approximation), unless ``kernel_params`` sets
        ``max_dense_bytes``.
    working_memory : float, default=None
        Budget in MiB for one block of kernel rows (blockwise path) and the
        temporaries of predict/transform/score; None uses scikit-learn's
        ``working_memory`` configuration (1024 MiB by default).
    random_state : int, RandomState instance or None, default=None
        Seed of the initialisation.
    verbose : int, default=0
        Print the objective at every iteration when > 0.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        Label of each training point (its nearest center).
    inertia_ : float
        Weighted sum of the squared feature-space distances of the training
        points to their centers.
    n_iter_ : int
        Number of iterations of the kept run.
    support_ : ndarray of shape (n_support,)
        Indices of the training points that define the centers (every point of
        positive weight in a non-empty cluster), grouped by cluster.
    support_vectors_ : ndarray of shape (n_support, n_features)
        The rows ``X[support_]`` (point kernels only: not set for "precomputed"
        and the graph kernels).
    dual_coef_ : ndarray of shape (n_support,)
        Coefficient w_y / W_j of each support point: center j is
        sum_{s : support_labels_[s] = j} dual_coef_[s] phi(x_{support_[s]}).
    support_labels_ : ndarray of shape (n_support,)
        Cluster of each support point.
    n_support_ : ndarray of shape (n_clusters,)
        Number of support points of each center.
    center_norms_ : ndarray of shape (n_clusters,)
        Squared feature-space norms <C_j, C_j> of the centers.
    kernel_ : mbkkm.kernels.Kernel or str
        The resolved kernel; the string "precomputed", "knn" or "heat" for the
        matrix kernels.
    n_features_in_ : int
        Number of features seen during fit (n_samples for "precomputed").
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen during fit, when X has string feature names.

    See Also
    --------
    mbkkm.cluster.MiniBatchKernelKMeans : Truncated mini-batch kernel k-means.
    sklearn.cluster.KMeans : k-means in input space (the linear kernel).

    Notes
    -----
    **Memory.** The stored path needs ``n**2 * itemsize`` bytes; the blockwise
    path needs one block of at least one kernel row, ``2 * (n + 3 k) * itemsize``
    bytes, within ``working_memory``. When neither fits, :class:`KernelMemoryError`
    (a MemoryError and a ValueError) is raised before any kernel evaluation, with
    the sizes in GiB. With ``kernel="precomputed"`` the matrix is the input, so no
    budget applies.

    **Precomputed kernels.** ``fit`` takes the (n, n) training kernel matrix
    (square, symmetric up to rounding, non-negative diagonal). ``predict`` takes
    K(X_new, X_fit) of shape (n_new, n_fit). ``transform`` and ``score`` need
    K(x, x) of the new points too: pass it as ``diag=``, else they raise.
    ``fit_transform`` and ``fit_predict`` need nothing more.

    **Graph kernels** ("knn", "heat") are transductive: defined on the training
    points only, through the k-NN graph built on them. ``fit``, ``fit_predict``
    and ``fit_transform`` work; ``predict``, ``transform`` and ``score`` on new
    points raise a ValueError.

    Empty clusters are refilled with the points farthest from their centers,
    as scikit-learn's KMeans does; when some remain empty at the end (for
    example ``n_clusters`` larger than the number of distinct points), an
    :class:`~mbkkm.cluster.EmptyClusterWarning` (a ConvergenceWarning) gives
    their number. ``fit`` is all-or-nothing: when it raises (KeyboardInterrupt
    included) the estimator is left as it was before the call.

    References
    ----------
    I. S. Dhillon, Y. Guan and B. Kulis. "Kernel k-means, spectral clustering and
    normalized cuts." KDD 2004.
    B. Jourdan and G. Schwartzman. "Mini-batch kernel k-means." 2024.

    Examples
    --------
    >>> from sklearn.datasets import make_circles
    >>> from sklearn.metrics import adjusted_rand_score
    >>> from mbkkm.cluster._kernel_kmeans import KernelKMeans
    >>> X, y = make_circles(n_samples=500, factor=0.3, noise=0.05, random_state=0)
    >>> km = KernelKMeans(n_clusters=2, gamma=5.0, random_state=0).fit(X)
    >>> adjusted_rand_score(y, km.labels_) > 0.9
    True
    >>> km.predict(X[:3]).shape
    (3,)
    """

    _parameter_constraints: dict = {
        **COMMON_CONSTRAINTS,
        **KERNEL_CONSTRAINTS,
        "kernel": [StrOptions(_kernel_options()), callable],
        "init_size": [Interval(Integral, 1, None, closed="left"), None],
        "max_kernel_memory": [Interval(Real, 0, None, closed="neither")],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1,
        kernel_params=None,
        init="k-means++",
        n_init=1,
        init_size=None,
        max_iter=300,
        tol=1e-4,
        max_kernel_memory=2048,
        working_memory=None,
        random_state=None,
        verbose=0,
    ):
        self.n_clusters = n_clusters
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.init = init
        self.n_init = n_init
        self.init_size = init_size
        self.max_iter = max_iter
        self.tol = tol
        self.max_kernel_memory = max_kernel_memory
        self.working_memory = working_memory
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ helpers
    def _validate_X(self, X, reset):
        if reset and self.kernel == "precomputed" and is_stored_kernel(X):
            X = validate_stored_kernel(X)  # a sparse or low-rank kernel matrix
            self.n_features_in_ = X.shape[1]
            return X
        X = validate_data(
            self, X, reset=reset, dtype=[np.float64, np.float32], order="C",
            accept_sparse="csr", ensure_min_samples=1,
        )
        return as_csr(X) if is_sparse(X) else X  # CSC etc. converted once

    def _working_bytes(self):
        wm = self.working_memory
        if wm is None:
            wm = get_config()["working_memory"]
        return wm * _MIB

    def _plan_memory(self, n, itemsize):
        """Stored matrix or rows per block; raise KernelMemoryError when neither fits."""
        k = self.n_clusters
        dense = n * n * itemsize
        if dense <= self.max_kernel_memory * _MIB:
            return None
        row = 2 * (n + 3 * k) * itemsize
        budget = self._working_bytes()
        if row > budget:
            raise KernelMemoryError(
                f"KernelKMeans: the {n} x {n} kernel matrix needs {dense / _GIB:.3g} GiB, "
                f"more than max_kernel_memory={self.max_kernel_memory} MiB "
                f"({self.max_kernel_memory * _MIB / _GIB:.3g} GiB), and one block of "
                f"kernel rows needs {row / _GIB:.3g} GiB, more than working_memory "
                f"({budget / _GIB:.3g} GiB). Raise max_kernel_memory or working_memory, "
                "or use MiniBatchKernelKMeans, which never builds the kernel matrix."
            )
        return max(1, int(budget // row))

    def _check_init(self, X, n):
        if isinstance(self.init, str):
            return self.init
        if self._kind == "point":
            init = check_array(self.init, dtype=X.dtype, copy=True, input_name="init")
            if init.shape != (self.n_clusters, X.shape[1]):
                raise ValueError(
                    f"init: the initial centers should have shape (n_clusters, "
                    f"n_features) = ({self.n_clusters}, {X.shape[1]}), got {init.shape}"
                )
            return init
        init = np.asarray(self.init)
        if init.shape != (self.n_clusters,) or not np.issubdtype(init.dtype, np.integer):
            raise ValueError(
                f"init: with kernel={self.kernel!r} the initial centers are indices of "
                f"training points, an integer array of shape (n_clusters,) = "
                f"({self.n_clusters},); got dtype {init.dtype} and shape {init.shape}"
            )
        if init.min() < 0 or init.max() >= n:
            raise ValueError(f"init: indices must be in [0, n_samples) = [0, {n})")
        return init.astype(np.intp)

    # --------------------------------------------------------------------- fit
    def _prepare(self, X, sample_weight):
        """Validate, plan memory, resolve the kernel; return the kernel operator."""
        kind = self._kind
        X = self._validate_X(X, reset=True)
        n = X.shape[0]
        if kind == "precomputed":
            diag = check_precomputed_matrix(X)
        sample_weight = check_sample_weight(sample_weight, X)
        check_n_clusters_vs_samples(self.n_clusters, n)
        if self.init_size is not None and self.init_size < self.n_clusters:
            raise ValueError(
                f"init_size={self.init_size} should be >= n_clusters={self.n_clusters}"
            )
        self._init = self._check_init(X, n)
        if kind == "precomputed":
            self.kernel_ = IndexKernel("precomputed", X, dtype=np.float64, diag=diag)
            return X, sample_weight, _MatrixOperator(X), diag, self.kernel_
        if kind == "graph":
            params = dict(self.kernel_params or {})
            if self.kernel == "heat":
                params.setdefault("max_dense_bytes", int(self.max_kernel_memory * _MIB))
            K = graph_kernel_matrix(self.kernel, X, **params)
            diag = np.asarray(kernel_diagonal(K), dtype=np.float64)
            self.kernel_ = IndexKernel(self.kernel, K, self.kernel_params, dtype=np.float64,
                                       diag=diag)
            return X, sample_weight, _MatrixOperator(K), diag, self.kernel_
        block_rows = self._plan_memory(n, X.dtype.itemsize)  # before any kernel work
        self.kernel_ = resolve_kernel(
            self.kernel, gamma=self.gamma, degree=self.degree, coef0=self.coef0,
            kernel_params=self.kernel_params, X=X, sample_weight=sample_weight,
        )
        check_no_overflow(X, self.kernel_)  # finite data whose kernel arithmetic overflows
        if self.kernel_.is_callable:
            self.kernel_(X[: min(3, n)], X[: min(2, n)])  # check the callable once
        diag = np.asarray(self.kernel_.diag(X), dtype=np.float64)
        if block_rows is None:
            K = self.kernel_(X, X)
            return (X, sample_weight, _MatrixOperator(K), diag,
                    IndexKernel("stored", K, dtype=np.float64, diag=diag))
        return X, sample_weight, _BlockOperator(self.kernel_, X, block_rows), diag, None

    def _initial_inner(self, X, op, diag, index_kernel, rng, sample_weight):
        """(P0, c0) of one initialisation: inner products with the initial centers."""
        n = X.shape[0]
        init = self._init
        if isinstance(init, np.ndarray) and self._kind == "point":
            # Explicit centers in input space: K(X, init) in blocks of rows.
            P0 = self._cross_point(X, init)
            return P0, np.asarray(self.kernel_.diag(init), dtype=np.float64)
        if isinstance(init, np.ndarray):
            idx = init
        else:
            if self.init_size is None:
                sub = np.arange(n)
            else:
                sub = draw_init_subsample(rng, n, min(self.init_size, n), self.n_clusters,
                                          sample_weight)
            wi = None if sample_weight is None else sample_weight[sub]
            if init == "k-means++":
                if index_kernel is not None:
                    local = kernel_kmeans_plusplus(sub, index_kernel, self.n_clusters, rng,
                                                   wi, diag=diag[sub])
                else:
                    local = kernel_kmeans_plusplus(X[sub], self.kernel_, self.n_clusters,
                                                   rng, wi, diag=diag[sub])
            else:
                local = random_init(sub.size, self.n_clusters, rng, wi)
            idx = sub[local]
        if index_kernel is not None:
            P0 = op.columns(idx)
        else:
            P0 = self._cross_point(X, X[idx])
        return P0, diag[idx].copy()

    def _cross_point(self, X, C):
        """K(X, C) for a point kernel, in chunks, float64 (n, len(C))."""
        rows = chunk_rows(self.working_memory, C.shape[0] + 2, X.dtype.itemsize)
        out = np.empty((X.shape[0], C.shape[0]), dtype=np.float64)
        for r0 in range(0, X.shape[0], rows):
            out[r0:r0 + rows] = self.kernel_(X[r0:r0 + rows], C)
        return out

    @restore_on_error
    def _fit(self, X, sample_weight):
        X, sample_weight, op, diag, index_kernel = self._prepare(X, sample_weight)
        n = X.shape[0]
        w = np.ones(n) if sample_weight is None else sample_weight
        rng = check_random_state(self.random_state)
        n_init = self.n_init
        if isinstance(self._init, np.ndarray) and n_init != 1:
            warnings.warn(
                f"Explicit initial center position passed: performing only one init in "
                f"{type(self).__name__} instead of n_init={n_init}.",
                RuntimeWarning, stacklevel=3,
            )
            n_init = 1
        best = None
        for _ in range(n_init):
            P0, c0 = self._initial_inner(X, op, diag, index_kernel, rng, sample_weight)
            run = kernel_lloyd(op, diag, P0, c0, w, self.max_iter, self.tol, self.verbose)
            inertia = float(run[2] @ w)
            if self.verbose:
                print(f"Run inertia: {inertia:.6g}")
            if best is None or inertia < best[0]:
                best = (inertia, run)
        inertia, (center_labels, labels, _, D, n_iter, c) = best
        self._store(X, center_labels, w, c)
        self.labels_ = labels
        self.inertia_ = inertia
        self.n_iter_ = n_iter
        warn_empty_clusters(labels, self.n_clusters, self)
        return D

    def _store(self, X, center_labels, w, norms):
        """Fitted centers as windows (one block per cluster) and public attributes.

        Center j is sum_{y in A_j} (w_y / W_j) phi(y): its support points are the
        training points of positive weight assigned to it (indices for index kernels).
        """
        k = self.n_clusters
        W = np.bincount(center_labels, weights=w, minlength=k)
        keep = np.flatnonzero(w > 0)
        items = take_rows(X, keep) if self._kind == "point" else keep.astype(np.intp)
        coef = w[keep] / W[center_labels[keep]]
        # c_j = sum_y A[y, j] P[y, j] from the last M-step (see kernel_lloyd).
        self._publish(labelling_state(items, coef, center_labels[keep], k,
                                      np.asarray(norms, dtype=np.float64)))
        # support_: the training indices of the support points, in the published order
        self.support_ = keep[np.argsort(center_labels[keep], kind="stable")].astype(np.intp)
        if self._kind != "point":
            del self.support_vectors_  # the items are indices: they are support_

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, sample_weight=None):
        """Run kernel k-means (``n_init`` runs of Lloyd's algorithm).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features) or \
(n_samples, n_samples)
            Training data; with ``kernel="precomputed"`` the kernel matrix. Sparse
            data (every named kernel but chi2, and callables) are converted to CSR
            once and never densified; only the kernel blocks are dense.
        y : Ignored
        sample_weight : array-like of shape (n_samples,), default=None
            Weight of each point in the cluster means and the inertia.

        Returns
        -------
        self : KernelKMeans
        """
        self._fit(X, sample_weight)
        return self

    @_fit_context(prefer_skip_nested_validation=True)
    def fit_transform(self, X, y=None, sample_weight=None):
        """Fit, then return the squared distances of the training points to the centers.

        Works for every kernel, the graph kernels and "precomputed" included.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, n_samples)
        y : Ignored
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        distances : ndarray of shape (n_samples, n_clusters)
        """
        return self._fit(X, sample_weight)

    # ------------------------------------------------------------- out of sample
    def transform(self, X, kernel_diag=None, diag="deprecated"):
        """Squared feature-space distances ||phi(x) - C_j||^2 to every center.

        Parameters
        ----------
        X : array-like of shape (n_new, n_features) or (n_new, n_fit)
            New points; with ``kernel="precomputed"``, K(X_new, X_fit).
        kernel_diag : array-like of shape (n_new,), default=None
            K(x, x) of the new points; required with ``kernel="precomputed"``,
            ignored otherwise.
        diag : array-like of shape (n_new,)
            Deprecated spelling of ``kernel_diag`` (the keyword of every mbkkm
            estimator); will be removed in 0.3.

        Returns
        -------
        distances : ndarray of shape (n_new, n_clusters)
            Non-negative (rounding below 0 is clipped).
        """
        return super().transform(X, kernel_diag=_deprecated_diag(diag, kernel_diag))

    def score(self, X, y=None, sample_weight=None, kernel_diag=None, diag="deprecated"):
        """Opposite of the (weighted) inertia of X on the fitted centers.

        Parameters
        ----------
        X : array-like of shape (n_new, n_features) or (n_new, n_fit)
        y : Ignored
        sample_weight : array-like of shape (n_new,), default=None
        kernel_diag : array-like of shape (n_new,), default=None
            K(x, x) of the new points; required with ``kernel="precomputed"``.
        diag : array-like of shape (n_new,)
            Deprecated spelling of ``kernel_diag``; will be removed in 0.3.

        Returns
        -------
        score : float
        """
        return super().score(X, sample_weight=sample_weight,
                             kernel_diag=_deprecated_diag(diag, kernel_diag))


def _deprecated_diag(diag, kernel_diag):
    if isinstance(diag, str) and diag == "deprecated":
        return kernel_diag
    warnings.warn("diag= was renamed kernel_diag= (the keyword of every mbkkm estimator) in "
                  "0.2 and will be removed in 0.3", FutureWarning, stacklevel=3)
    if kernel_diag is not None:
        raise ValueError("pass kernel_diag= only (diag= is its deprecated spelling)")
    return diag
