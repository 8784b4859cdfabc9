"""Graph kernels on a k-nearest-neighbour graph (the paper's Appendix C).

Both kernels are **transductive**: they are matrices indexed by the training
points, defined through the graph built on those points. There is no formula
K(x, y) for a new point y, so out-of-sample use (``predict`` on unseen data) is
impossible; the estimators treat them like precomputed kernels whose items are
point indices.

Graph convention (used by both kernels)
---------------------------------------
``n_neighbors`` **counts the point itself**: point i is joined to itself (a
self-loop) and to its ``n_neighbors - 1`` nearest *other* points (by index, so
an exact duplicate of i counts as another point). The directed 0/1 graph is
symmetrised, A = max(A, A^T), so every degree d_i = sum_j A_ij is at least
``n_neighbors``, and D = diag(d). With this convention the k-NN kernel has
K(x, x) = 1 / d_x^2, so the paper's gamma = max_x sqrt(K(x, x)) = 1 / min d,
which is at most 1 / n_neighbors; on PenDigits (standardised, 1000 neighbours)
min d = 1000 exactly and gamma = 0.00100 as in the paper's Table 1 (see
:func:`mbkkm.kernels.kernel_gamma`). Not counting the point itself would give
min d >= 1001 and gamma <= 0.000999.

References
----------
.. [1] B. Jourdan and G. Schwartzman, "Mini-batch kernel k-means", Appendix C
   (k-NN kernel D^-1 A D^-1 and heat kernel on a k-NN graph, Table 1).
.. [2] F. R. K. Chung, "Spectral Graph Theory", AMS, 1997, chapter 10 (heat
   kernel exp(-t L) of the normalised Laplacian L = I - D^-1/2 A D^-1/2).
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from sklearn.neighbors import NearestNeighbors
from sklearn.utils import check_array, check_random_state

__all__ = [
    "LowRankKernel",
    "heat_kernel",
    "kernel_block",
    "kernel_diagonal",
    "knn_adjacency",
    "knn_kernel",
]

#: Default memory budget (bytes) of the dense n x n heat kernel (float64).
DEFAULT_MAX_DENSE_BYTES = 2**30

#: Default rank of the low-rank heat kernel when the dense one does not fit.
DEFAULT_N_COMPONENTS = 200

_HEAT_FORMS = ("laplacian", "adjacency")


# --- checks ---------------------------------------------------------------------------


def _check_data(X):
    return check_array(X, dtype=[np.float64, np.float32], ensure_min_samples=2,
                       input_name="X")


def _check_n_neighbors(n_neighbors, n_samples):
    if isinstance(n_neighbors, bool) or not isinstance(n_neighbors, numbers.Integral):
        raise TypeError(
            f"n_neighbors must be an integer, got {type(n_neighbors).__name__}"
        )
    if not 1 <= n_neighbors <= n_samples:
        raise ValueError(
            f"n_neighbors must be in [1, n_samples] = [1, {n_samples}] (it counts the "
            f"point itself), got {n_neighbors}"
        )
    return int(n_neighbors)


def _check_t(t):
    if isinstance(t, bool) or not isinstance(t, numbers.Real):
        raise TypeError(f"t must be a real number, got {type(t).__name__}")
    if not (np.isfinite(t) and t > 0):
        raise ValueError(f"t must be a finite number > 0, got {t!r}")
    return float(t)


# --- the graph ------------------------------------------------------------------------


def knn_adjacency(X, n_neighbors, *, metric="euclidean", n_jobs=None):
    """Symmetrised 0/1 k-NN adjacency matrix with self-loops.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The data.
    n_neighbors : int
        Neighbours per point, **counting the point itself**: point i is joined
        to itself and to its ``n_neighbors - 1`` nearest other points. In
        ``[1, n_samples]``; 1 gives the identity (self-loops only).
    metric : str or callable, default="euclidean"
        Distance of :class:`sklearn.neighbors.NearestNeighbors`.
    n_jobs : int or None, default=None
        Parallel jobs of the neighbour search.

    Returns
    -------
    A : scipy.sparse.csr_matrix of shape (n_samples, n_samples)
        float64 entries in {0, 1}, A = max(A_dir, A_dir^T) with unit diagonal,
        where A_dir[i, j] = 1 when j is among the neighbours of i.
        Every row has at least ``n_neighbors`` ones.
    """
    X = _check_data(X)
    n = X.shape[0]
    k = _check_n_neighbors(n_neighbors, n)
    if k == 1:
        return sp.identity(n, dtype=np.float64, format="csr")
    # kneighbors() with no query excludes each point by index (duplicates stay).
    nn = NearestNeighbors(n_neighbors=k - 1, metric=metric, n_jobs=n_jobs).fit(X)
    ind = nn.kneighbors(return_distance=False)  # (n, k - 1)
    indptr = np.arange(0, n * (k - 1) + 1, k - 1)
    A = sp.csr_matrix((np.ones(ind.size), ind.ravel(), indptr), shape=(n, n))
    A = A.maximum(A.T) + sp.identity(n, dtype=np.float64, format="csr")
    A.sort_indices()
    return A.tocsr()


def _degrees(A):
    return np.asarray(A.sum(axis=1)).ravel()


def knn_kernel(X, n_neighbors, *, metric="euclidean", n_jobs=None):
    """The k-NN kernel matrix K = D^-1 A D^-1 of the paper (transductive).

    K[i, j] = A[i, j] / (d_i d_j), with A the symmetrised k-NN adjacency with
    self-loops (:func:`knn_adjacency`) and d its degrees. K = D^-1 A D^-1 is
    positive semi-definite when A is (it is congruent to A); in general A is
    not PSD, so this kernel need not be PSD either. K(x, x) = 1 / d_x^2, so the
    paper's gamma is 1 / min d.

    Defined on the rows of X only: there is no value for a new point.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The data.
    n_neighbors : int
        Neighbours per point, counting the point itself, in ``[1, n_samples]``.
    metric : str or callable, default="euclidean"
        Distance of the neighbour search.
    n_jobs : int or None, default=None
        Parallel jobs of the neighbour search.

    Returns
    -------
    K : scipy.sparse.csr_matrix of shape (n_samples, n_samples)
        float64, symmetric, with as many stored entries as A (about
        ``n_samples * n_neighbors`` to twice that); never dense.

    References
    ----------
    .. [1] B. Jourdan and G. Schwartzman, "Mini-batch kernel k-means",
       Appendix C.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [1.0], [3.0]])
    >>> K = knn_kernel(X, n_neighbors=2)
    >>> K.toarray().round(3)
    array([[0.25 , 0.167, 0.   ],
           [0.167, 0.111, 0.167],
           [0.   , 0.167, 0.25 ]])
    """
    A = knn_adjacency(X, n_neighbors, metric=metric, n_jobs=n_jobs)
    inv = 1.0 / _degrees(A)
    # D^-1 A D^-1 on the stored entries: K_ij = A_ij * inv_i * inv_j.
    K = A.copy()
    rows = np.repeat(np.arange(K.shape[0]), np.diff(K.indptr))
    K.data *= inv[rows] * inv[K.indices]
    return K


# --- heat kernel ----------------------------------------------------------------------


class LowRankKernel:
    """A symmetric kernel matrix stored as K ~= U diag(w) U^T.

    Parameters
    ----------
    U : ndarray of shape (n_samples, rank)
        Orthonormal columns (eigenvectors).
    weights : ndarray of shape (rank,)
        Non-negative eigen-weights, in decreasing order.
    error : float
        The largest dropped weight w_{rank+1}: the spectral-norm error
        ||K - U diag(w) U^T||_2 when the dropped weights are all smaller (as for
        the heat kernel), and then also a bound on every entry's error
        ``|K_ij - (U diag(w) U^T)_ij| <= error`` (the remainder is PSD with
        diagonal entries <= error).
    description : str, default=""
        What K is, for ``repr``.

    Attributes
    ----------
    shape : tuple of int
        ``(n_samples, n_samples)``.
    rank : int
        Number of kept components.
    """

    def __init__(self, U, weights, error, description=""):
        U = np.asarray(U, dtype=np.float64)
        weights = np.asarray(weights, dtype=np.float64)
        if U.ndim != 2 or weights.shape != (U.shape[1],):
            raise ValueError(
                f"U must have shape (n_samples, rank) and weights shape (rank,), got "
                f"{U.shape} and {weights.shape}"
            )
        self.U = U
        self.weights = weights
        self.error = float(error)
        self.description = description

    @property
    def shape(self):
        return (self.U.shape[0], self.U.shape[0])

    @property
    def rank(self):
        return self.U.shape[1]

    def __repr__(self):
        what = f"{self.description}, " if self.description else ""
        return (f"LowRankKernel({what}n_samples={self.shape[0]}, rank={self.rank}, "
                f"error={self.error:.3g})")

    def block(self, rows, cols):
        """K[rows][:, cols], shape (len(rows), len(cols)), float64."""
        return (self.U[rows] * self.weights) @ self.U[cols].T

    def diagonal(self):
        """K(i, i) for every point, shape (n_samples,)."""
        return np.einsum("ij,ij,j->i", self.U, self.U, self.weights)

    def toarray(self):
        """The dense (n_samples, n_samples) approximation; only for small n."""
        return (self.U * self.weights) @ self.U.T


def _normalized_adjacency(A):
    """N = D^-1/2 A D^-1/2, sparse (n, n), eigenvalues in [-1, 1], top one 1."""
    s = 1.0 / np.sqrt(_degrees(A))
    N = A.copy()
    rows = np.repeat(np.arange(N.shape[0]), np.diff(N.indptr))
    N.data *= s[rows] * s[N.indices]
    return N


def _heat_weights(lam, t, form):
    # eigenvalue lam of N  ->  eigen-weight of K:
    #   laplacian: exp(-t L) = exp(-t (I - N))  ->  exp(-t (1 - lam))
    #   adjacency: exp(-t N)                    ->  exp(-t lam)
    return np.exp(-t * (1.0 - lam)) if form == "laplacian" else np.exp(-t * lam)


def heat_kernel(X, n_neighbors, t=1.0, *, form="laplacian", n_components=None,
                max_dense_bytes=DEFAULT_MAX_DENSE_BYTES, metric="euclidean", n_jobs=None,
                tol=0.0, random_state=None):
    """Heat kernel on the k-NN graph of X (transductive).

    With A the symmetrised k-NN adjacency with self-loops (:func:`knn_adjacency`),
    D its degrees, N = D^-1/2 A D^-1/2 and L = I - N the normalised Laplacian:

    - ``form="laplacian"`` (default, Chung's heat kernel): K = exp(-t L);
    - ``form="adjacency"`` (the formula printed in the paper's Appendix C):
      K = exp(-t N).

    They are related exactly by exp(-t L) = e^{-t} exp(t N), so
    exp(-t N) = e^{-t} exp(t L): the printed form is the Laplacian form at time
    -t, scaled by e^{-t}. Both are symmetric positive definite. The Laplacian
    form weighs the smooth (cluster) eigenvectors of N most; the printed form
    with t > 0 weighs the least smooth ones most.

    Defined on the rows of X only: there is no value for a new point.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The data.
    n_neighbors : int
        Neighbours per point, counting the point itself, in ``[1, n_samples]``.
    t : float, default=1.0
        Diffusion time, > 0. The paper does not state the value it used.
    form : {"laplacian", "adjacency"}, default="laplacian"
        Which matrix is exponentiated (see above).
    n_components : int or None, default=None
        None: exact when the dense float64 n x n result fits ``max_dense_bytes``,
        else a low-rank approximation of rank ``min(200, n_samples - 2)``. An
        int r in ``[1, n_samples - 2]``: always the rank-r approximation.
    max_dense_bytes : int, default=2**30
        Budget for the dense result (8 n^2 bytes); the exact computation needs
        about three times that while it runs.
    metric : str or callable, default="euclidean"
        Distance of the neighbour search.
    n_jobs : int or None, default=None
        Parallel jobs of the neighbour search.
    tol : float, default=0.0
        Relative tolerance of :func:`scipy.sparse.linalg.eigsh` (0: machine
        precision). Low-rank path only.
    random_state : int, RandomState instance or None, default=None
        Start vector of ``eigsh``. Low-rank path only.

    Returns
    -------
    K : ndarray of shape (n_samples, n_samples) or LowRankKernel
        Exact path: the dense float64 matrix, from the full eigendecomposition
        N = V diag(lam) V^T (:func:`scipy.linalg.eigh`), K = V diag(w) V^T with
        w = exp(-t (1 - lam)) or exp(-t lam); exact up to rounding.
        Low-rank path: :class:`LowRankKernel` with the r eigenpairs of N of
        largest weight (largest lam for the Laplacian form, smallest for the
        printed form, from :func:`scipy.sparse.linalg.eigsh`); its ``error`` is
        the (r+1)-th weight, which equals the spectral-norm error and bounds
        every entry's error. The kept part underestimates each K(x, x).

    References
    ----------
    .. [1] B. Jourdan and G. Schwartzman, "Mini-batch kernel k-means",
       Appendix C.
    .. [2] F. R. K. Chung, "Spectral Graph Theory", AMS, 1997, chapter 10.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [1.0], [3.0], [7.0]])
    >>> K = heat_kernel(X, n_neighbors=2, t=1.0)
    >>> K.shape, bool(np.allclose(K, K.T))
    ((4, 4), True)
    """
    X = _check_data(X)
    n = X.shape[0]
    _check_n_neighbors(n_neighbors, n)
    t = _check_t(t)
    if form not in _HEAT_FORMS:
        raise ValueError(f"form must be one of {list(_HEAT_FORMS)}, got {form!r}")
    if n_components is not None:
        if isinstance(n_components, bool) or not isinstance(n_components, numbers.Integral):
            raise TypeError(
                f"n_components must be an integer or None, got {type(n_components).__name__}"
            )
        if not 1 <= n_components <= n - 2:
            raise ValueError(
                f"n_components must be in [1, n_samples - 2] = [1, {n - 2}], "
                f"got {n_components}"
            )
    if isinstance(max_dense_bytes, bool) or not isinstance(max_dense_bytes, numbers.Real) \
            or not max_dense_bytes >= 0:
        raise ValueError(f"max_dense_bytes must be a number >= 0, got {max_dense_bytes!r}")

    A = knn_adjacency(X, n_neighbors, metric=metric, n_jobs=n_jobs)
    N = _normalized_adjacency(A)
    if n_components is None and 8 * n * n <= max_dense_bytes:
        # Exact: N = V diag(lam) V^T, f(N) = V diag(f(lam)) V^T.
        lam, V = sla.eigh(N.toarray(), overwrite_a=True)
        w = _heat_weights(lam, t, form)
        V *= np.sqrt(w)  # V diag(sqrt w): K = (V sqrt w)(V sqrt w)^T, symmetric by construction
        return V @ V.T
    r = DEFAULT_N_COMPONENTS if n_components is None else int(n_components)
    r = min(r, n - 2)
    # The weight is increasing in lam (laplacian) or decreasing (adjacency), so the
    # r + 1 largest weights come from the r + 1 largest / smallest eigenvalues of N.
    which = "LA" if form == "laplacian" else "SA"
    v0 = check_random_state(random_state).uniform(-1, 1, n)
    lam, V = spla.eigsh(N, k=r + 1, which=which, tol=tol, v0=v0)
    w = _heat_weights(lam, t, form)
    order = np.argsort(w)[::-1]
    lam, V, w = lam[order], V[:, order], w[order]
    return LowRankKernel(V[:, :r], w[:r], error=w[r],
                         description=f"heat, form={form!r}, t={t:g}")


# --- uniform access for the estimators ------------------------------------------------


def _as_index(idx, n, what):
    if isinstance(idx, slice):
        return np.arange(n)[idx]
    idx = np.asarray(idx)
    if idx.ndim != 1 or not (np.issubdtype(idx.dtype, np.integer) or idx.size == 0):
        raise TypeError(f"{what} must be a 1-D array of integer indices")
    return idx.astype(np.intp, copy=False)


def _check_kernel_matrix(K):
    if not (isinstance(K, (np.ndarray, LowRankKernel)) or sp.issparse(K)):
        raise TypeError(
            "K must be a scipy sparse matrix, a numpy array or a LowRankKernel, got "
            f"{type(K).__name__}"
        )
    if len(K.shape) != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(f"K must be a square matrix, got shape {K.shape}")


def kernel_block(K, rows, cols):
    """Dense block ``K[rows][:, cols]`` of a kernel matrix in any representation.

    Parameters
    ----------
    K : scipy.sparse matrix, ndarray or LowRankKernel of shape (n, n)
        A kernel matrix (e.g. from :func:`graph_kernel_matrix`, or precomputed).
    rows : array-like of int of shape (n_rows,) or slice
        Point indices (repeats allowed).
    cols : array-like of int of shape (n_cols,) or slice
        Point indices (repeats allowed).

    Returns
    -------
    block : ndarray of shape (n_rows, n_cols)
        In K's dtype (float64 for a LowRankKernel).
    """
    _check_kernel_matrix(K)
    n_rows, n_cols = K.shape
    rows = _as_index(rows, n_rows, "rows")
    cols = _as_index(cols, n_cols, "cols")
    if isinstance(K, LowRankKernel):
        return K.block(rows, cols)
    if sp.issparse(K):
        return K.tocsr()[rows][:, cols].toarray()
    return K[np.ix_(rows, cols)]


def kernel_diagonal(K):
    """The diagonal K(i, i) of a kernel matrix in any representation.

    Parameters
    ----------
    K : scipy.sparse matrix, ndarray or LowRankKernel of shape (n, n)
        A kernel matrix.

    Returns
    -------
    diag : ndarray of shape (n,)
        A new array.
    """
    _check_kernel_matrix(K)
    if isinstance(K, LowRankKernel):
        return K.diagonal()
    if sp.issparse(K):
        return np.asarray(K.diagonal())
    return np.diagonal(K).copy()
