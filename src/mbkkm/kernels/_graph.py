"""Graph kernels on a k-nearest-neighbour graph (the paper's Appendix C).

Both kernels are matrices indexed by the training points, defined through the
graph built on those points; the estimators treat them like precomputed kernels
whose items are point indices. A new point has no value in the matrix itself: it
gets one by joining the graph (:meth:`KNNGraph.attach`), which is how the
estimators' ``predict`` extends them (:mod:`mbkkm.kernels._spectral` for the heat
kernel, :func:`knn_kernel_rows` for the k-NN kernel).

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

import copy
import functools
import numbers
import time

import numpy as np
import scipy.sparse as sp
from sklearn.decomposition import PCA
from sklearn.metrics import pairwise_distances
from sklearn.neighbors import NearestNeighbors
from sklearn.utils import check_array, check_random_state

# --- checks ---------------------------------------------------------------------------


def _check_data(X):
    return check_array(X, dtype=[np.float64, np.float32], ensure_min_samples=2, input_name="X")


def check_integer(value, name, or_none=False):
    """TypeError unless ``value`` is an integer (not a bool); ``or_none`` says, in the
    message, that None is accepted too (the caller lets it through)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        what = "an integer or None" if or_none else "an integer"
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}")


def _check_n_neighbors(n_neighbors, n_samples):
    check_integer(n_neighbors, "n_neighbors")
    if not 1 <= n_neighbors <= n_samples:
        raise ValueError(
            f"n_neighbors must be in [1, n_samples] = [1, {n_samples}] (it counts the "
            f"point itself), got {n_neighbors}"
        )
    return int(n_neighbors)


#: Relative slack of the distance comparisons of KNNGraph.attach (distances computed by
#: two routines differ in the last digits).
_TIE_RTOL = 1e-6


# --- the graph ------------------------------------------------------------------------


class KNNGraph:
    """The symmetrised k-NN graph of the fitted points, and how a new point joins it.

    Parameters
    ----------
    n_neighbors : int
        Neighbours per point, counting the point itself (see the module docstring).
    metric : str or callable, default="euclidean"
        Distance of :class:`sklearn.neighbors.NearestNeighbors`.
    pca_components : int or None, default=None
        When X has more features than this, the neighbours are searched among the
        rows of X projected on its first ``pca_components`` principal components
        (:class:`sklearn.decomposition.PCA`, randomised solver), as graph methods
        commonly do on images; None searches X itself (exact neighbours of X).
    random_state : int, RandomState instance or None, default=None
        Seed of the randomised PCA.
    n_jobs : int or None, default=None
        Parallel jobs of the neighbour search.

    Attributes
    ----------
    adjacency_ : scipy.sparse.csr_matrix of shape (n_samples, n_samples)
        A = max(A_dir, A_dir^T) with unit diagonal (see :func:`knn_adjacency`).
    degrees_ : ndarray of shape (n_samples,)
        d_i = sum_j A_ij (self-loop included).
    points_ : ndarray of shape (n_samples, n_dims)
        The fitted points as the search sees them (projected when ``pca_`` is set).
    radius_ : ndarray of shape (n_samples,)
        Distance from each fitted point to its ``n_neighbors - 1``-th nearest other
        point (0 when ``n_neighbors=1``): a new point within it would be among that
        point's neighbours.
    pca_ : sklearn.decomposition.PCA or None
        The projection used for the search (None: X itself).
    seconds_ : dict of str to float
        Wall-clock seconds of the projection and of the search.
    """

    def __init__(
        self,
        n_neighbors,
        *,
        metric="euclidean",
        pca_components=None,
        random_state=None,
        n_jobs=None,
    ):
        self.n_neighbors = n_neighbors
        self.metric = metric
        self.pca_components = pca_components
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _project(self, X):
        return X if self.pca_ is None else self.pca_.transform(X)

    def fit(self, X):
        """Build the graph of the rows of X (dense, float32 or float64)."""
        X = _check_data(X)
        n, d = X.shape
        _check_n_neighbors(self.n_neighbors, n)
        p = self.pca_components
        if p is not None:
            check_integer(p, "pca_components", or_none=True)
            if p < 1:
                raise ValueError(f"pca_components must be >= 1 or None, got {p}")
        self.n_features_in_ = d
        start = time.perf_counter()
        self.pca_ = None
        if p is not None and d > p and n > p:
            self.pca_ = PCA(
                int(p), svd_solver="randomized", random_state=check_random_state(self.random_state)
            ).fit(X)
        self.points_ = self._project(X)
        self.seconds_ = {"projection": time.perf_counter() - start}
        return self._link()

    def with_n_neighbors(self, n_neighbors):
        """The graph of the same (projected) points with another ``n_neighbors``."""
        return self._with(_check_n_neighbors(n_neighbors, self.n_samples))._link()

    def truncated(self, n_neighbors):
        """The graph of fewer neighbours read from this graph's own search (no new one).

        Each point keeps the first ``n_neighbors - 1`` of its ``self.n_neighbors - 1``
        nearest other points (nearest first), so the result is the graph a search for
        ``n_neighbors`` would build, up to which of several points at the same distance
        as the last neighbour is kept.
        """
        k = _check_n_neighbors(n_neighbors, self.n_samples)
        if k > self.n_neighbors:
            raise ValueError(
                f"n_neighbors must be at most the graph's {self.n_neighbors} to "
                f"truncate it, got {k}"
            )
        dist, ind = self._lists
        return self._with(k)._link((dist[:, : k - 1], ind[:, : k - 1]))

    def _with(self, n_neighbors):
        """A copy of this graph's points (projection included) to link with
        ``n_neighbors``."""
        other = copy.copy(self)
        other.n_neighbors = n_neighbors
        other.seconds_ = dict(self.seconds_)  # the search's time adds to this one's
        return other

    def _link(self, lists=None):
        """The neighbour search on ``points_`` (or the given ``(dist, ind)`` lists) and
        the symmetrised adjacency."""
        n, k = self.points_.shape[0], self.n_neighbors
        start = time.perf_counter()
        if k == 1:  # self-loops only: no search
            self.index_ = None
            lists = (np.zeros((n, 0)), np.zeros((n, 0), dtype=np.intp))
        elif lists is None:
            # kneighbors() with no query excludes each point by index (duplicates stay).
            self.index_ = None  # a copy's index has another n_neighbors
            lists = self._index().kneighbors()  # (n, k - 1), nearest first
        dist, ind = lists
        # Kept until the fitted graph is stored (for_new_points, pickling): the lists a
        # graph of fewer neighbours is read from (truncated).
        self._lists = lists
        self.radius_ = np.zeros(n) if k == 1 else dist[:, -1].astype(np.float64)
        indptr = np.arange(n + 1) * (k - 1)
        A = sp.csr_matrix((np.ones(ind.size), ind.ravel(), indptr), shape=(n, n))
        A = A.maximum(A.T) + sp.identity(n, dtype=np.float64, format="csr")  # CSR
        A.sort_indices()
        self.seconds_["neighbors"] = (
            self.seconds_.get("neighbors", 0.0) + time.perf_counter() - start
        )
        self.adjacency_ = A
        self.degrees_ = np.asarray(A.sum(axis=1)).ravel()
        return self

    @property
    def n_samples(self):
        return self.degrees_.shape[0]

    def _index(self):
        """The neighbour index of the fitted points (rebuilt after unpickling)."""
        if getattr(self, "index_", None) is None:
            self.index_ = NearestNeighbors(
                n_neighbors=self.n_neighbors - 1, metric=self.metric, n_jobs=self.n_jobs
            ).fit(self.points_)
        return self.index_

    def __getstate__(self):
        # The search index (a KD-tree, ball tree or the points themselves) is rebuilt
        # from points_ when first needed: smaller files, and no tree types to trust.
        return {k: v for k, v in self.__dict__.items() if k not in ("index_", "_lists")}

    def for_new_points(self):
        """A copy that keeps only what :meth:`attach` reads (no adjacency matrix)."""
        other = copy.copy(self)
        other.adjacency_ = None
        other._lists = None
        return other

    def attach(self, X):
        """How new points join the graph: their 0/1 links to the fitted points.

        A new point x is linked, as the symmetrised graph would link it, to its
        ``n_neighbors - 1`` nearest fitted points and to every fitted point j that
        would count x among its own ``n_neighbors - 1`` nearest (distance to x at
        most ``radius_[j]``). Exact: such a j is either among x's
        ``2 (n_neighbors - 1)`` nearest fitted points or farther, and then its radius
        is at least the distance to the last of those, which only a few fitted
        points have; they are checked directly. A copy of a fitted point i is a new
        point at distance 0 from i, so it is linked to i and to i's reverse
        neighbours.

        Parameters
        ----------
        X : array-like of shape (n_new, n_features)

        Returns
        -------
        B : scipy.sparse.csr_matrix of shape (n_new, n_samples)
            float64 entries in {0, 1}; row x holds the links of x (its own
            self-loop, A(x, x) = 1, is not stored).
        """
        X = check_array(X, dtype=[np.float64, np.float32], input_name="X")
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, but the graph was built on "
                f"{self.n_features_in_} features"
            )
        n, k = self.n_samples, self.n_neighbors
        if k == 1:
            raise ValueError(
                "n_neighbors=1: the graph has self-loops only, so a new point "
                "has no link to the fitted points"
            )
        Z = self._project(X)
        m = min(n, 2 * (k - 1))
        dist, ind = self._index().kneighbors(Z, n_neighbors=m)  # (n_new, m)
        # A tie with j's last neighbour counts as a link, through rounding too.
        reach_j = self.radius_ * (1.0 + _TIE_RTOL)
        keep = dist <= reach_j[ind]  # j would take x
        keep[:, : k - 1] = True  # x's own neighbours
        rows = [np.nonzero(keep)[0]]
        cols = [ind[keep]]
        # Fitted points beyond x's m nearest, with a radius reaching that far.
        by_radius = np.argsort(-self.radius_, kind="stable")
        reach = self.radius_[by_radius]
        # New points in decreasing order of their m-th distance, so that a chunk's
        # smallest one (which sets the candidates J) is close to all of its own.
        order = np.argsort(-dist[:, -1], kind="stable")
        step = 1024
        for s in range(0, Z.shape[0], step):
            idx = order[s : s + step]
            far = dist[idx, -1]  # (chunk,)
            J = by_radius[: np.searchsorted(-reach, -far.min(), side="right")]
            if J.size == 0:
                continue
            D = pairwise_distances(Z[idx], self.points_[J], metric=self.metric)
            r, c = np.nonzero((D <= reach_j[J]) & (D >= far[:, None]))
            rows.append(idx[r])
            cols.append(J[c])
        rows, cols = np.concatenate(rows), np.concatenate(cols)
        B = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(X.shape[0], n))
        B.data[:] = 1.0  # duplicates were summed
        return B


def fit_knn_graph(X, n_neighbors, metric, pca_components, random_state, n_jobs):
    """The :class:`KNNGraph` of X, fitted: what the graph kernel builders start from."""
    return KNNGraph(
        n_neighbors,
        metric=metric,
        pca_components=pca_components,
        random_state=random_state,
        n_jobs=n_jobs,
    ).fit(X)


def knn_adjacency(
    X, n_neighbors, *, metric="euclidean", pca_components=None, random_state=None, n_jobs=None
):
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
    pca_components : int or None, default=None
        Search the neighbours among the first ``pca_components`` principal
        components of X when it has more features (see :class:`KNNGraph`); None:
        exact neighbours in X.
    random_state : int, RandomState instance or None, default=None
        Seed of the randomised PCA.
    n_jobs : int or None, default=None
        Parallel jobs of the neighbour search.

    Returns
    -------
    A : scipy.sparse.csr_matrix of shape (n_samples, n_samples)
        float64 entries in {0, 1}, A = max(A_dir, A_dir^T) with unit diagonal,
        where A_dir[i, j] = 1 when j is among the neighbours of i.
        Every row has at least ``n_neighbors`` ones.
    """
    return fit_knn_graph(X, n_neighbors, metric, pca_components, random_state, n_jobs).adjacency_


def knn_kernel(
    X, n_neighbors, *, metric="euclidean", pca_components=None, random_state=None, n_jobs=None
):
    """The k-NN kernel matrix K = D^-1 A D^-1 of the paper.

    K[i, j] = A[i, j] / (d_i d_j), with A the symmetrised k-NN adjacency with
    self-loops (:func:`knn_adjacency`) and d its degrees. K = D^-1 A D^-1 is
    positive semi-definite when A is (it is congruent to A); in general A is
    not PSD, so this kernel need not be PSD either. K(x, x) = 1 / d_x^2, so the
    paper's gamma is 1 / min d.

    Defined on the rows of X; a new point gets its row by joining the graph
    (:func:`knn_kernel_rows`).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The data.
    n_neighbors : int
        Neighbours per point, counting the point itself, in ``[1, n_samples]``.
    metric : str or callable, default="euclidean"
        Distance of the neighbour search.
    pca_components : int or None, default=None
        Search the neighbours among the first ``pca_components`` principal
        components of X when it has more features (:class:`KNNGraph`); None (the
        paper's kernel): exact neighbours in X.
    random_state : int, RandomState instance or None, default=None
        Seed of the randomised PCA.
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
    graph = fit_knn_graph(X, n_neighbors, metric, pca_components, random_state, n_jobs)
    return knn_kernel_from_graph(graph)


def knn_kernel_from_graph(graph):
    """D^-1 A D^-1 of a fitted :class:`KNNGraph`, sparse (n, n)."""
    return scale_symmetric(graph.adjacency_, 1.0 / graph.degrees_)


def _pattern_product(M, left, right):
    """``left[i] * right[j]`` at each stored entry (i, j) of the CSR matrix M."""
    rows = np.repeat(np.arange(M.shape[0]), np.diff(M.indptr))
    return left[rows] * right[M.indices]


def scale_symmetric(A, s):
    """diag(s) A diag(s), a CSR copy of A with the same stored entries."""
    M = A.tocsr(copy=True)
    M.data = M.data * _pattern_product(M, s, s)
    return M


def knn_kernel_rows(graph, X):
    """The k-NN kernel between new points and the fitted ones, and K(x, x).

    A new point x joins the graph with the links b of :meth:`KNNGraph.attach` and
    its self-loop, so its degree is d_x = 1 + sum_j b_j; the fitted degrees are kept.
    Then K(x, j) = b_j / (d_x d_j) and K(x, x) = 1 / d_x^2, as in the training matrix.

    Parameters
    ----------
    graph : KNNGraph
        Fitted.
    X : array-like of shape (n_new, n_features)

    Returns
    -------
    K_rows : scipy.sparse.csr_matrix of shape (n_new, n_samples)
    diag : ndarray of shape (n_new,)
    """
    B = graph.attach(X)
    d_x = 1.0 + np.asarray(B.sum(axis=1)).ravel()
    B.data = B.data / _pattern_product(B, d_x, graph.degrees_)
    return B, 1.0 / d_x**2


# --- low-rank kernel matrices --------------------------------------------------------


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
    eigenvalues : ndarray of shape (rank,), default=None
        For a graph kernel, the eigenvalues of D^-1/2 A D^-1/2 the weights come
        from (the heat kernel: w = exp(-t (1 - eigenvalues))).
    row_scale : ndarray of shape (n_samples,), default=None
        Set when K is a normalised kernel diag(s) V diag(w) V^T diag(s) of
        orthonormal eigenvectors V: then ``U = diag(s) V`` (no longer orthonormal)
        and ``row_scale`` is s, so that V can be recovered (``eigenvectors``); the
        ``error`` then refers to V diag(w) V^T, before the scaling.

    Attributes
    ----------
    shape : tuple of int
        ``(n_samples, n_samples)``.
    rank : int
        Number of kept components.
    """

    def __init__(self, U, weights, error, description="", eigenvalues=None, row_scale=None):
        self.U = np.asarray(U, dtype=np.float64)
        self.weights = np.asarray(weights, dtype=np.float64)
        if self.U.ndim != 2 or self.weights.shape != (self.U.shape[1],):
            raise ValueError(
                f"U must have shape (n_samples, rank) and weights shape (rank,), got "
                f"{self.U.shape} and {self.weights.shape}"
            )
        self.error = float(error)
        self.description = description
        self.eigenvalues = (
            None if eigenvalues is None else np.asarray(eigenvalues, dtype=np.float64)
        )
        self.row_scale = None if row_scale is None else np.asarray(row_scale, dtype=np.float64)

    @property
    def eigenvectors(self):
        """The orthonormal V of K = diag(s) V diag(w) V^T diag(s) (``U`` itself when
        there is no ``row_scale``); a row whose scale is 0 comes back as 0."""
        if self.row_scale is None:
            return self.U
        s = self.row_scale
        inv = np.divide(1.0, s, out=np.zeros_like(s), where=s > 0)
        return self.U * inv[:, None]

    @property
    def shape(self):
        return (self.U.shape[0], self.U.shape[0])

    @property
    def rank(self):
        return self.U.shape[1]

    def __repr__(self):
        what = f"{self.description}, " if self.description else ""
        return (
            f"LowRankKernel({what}n_samples={self.shape[0]}, rank={self.rank}, "
            f"error={self.error:.3g})"
        )

    @functools.cached_property
    def features(self):
        """F = U diag(sqrt w), shape (n_samples, rank): K = F F^T (computed once)."""
        return self.U * np.sqrt(self.weights)

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("features", None)  # recomputed from U and the weights
        return state

    def block(self, rows, cols):
        """K[rows][:, cols], shape (len(rows), len(cols)), float64."""
        if self.weights.size and self.weights.min() < 0:  # not PSD: no real features
            return (self.U[rows] * self.weights) @ self.U[cols].T
        F = self.features
        return F[rows] @ F[cols].T

    def diagonal(self):
        """K(i, i) for every point, shape (n_samples,)."""
        return np.einsum("ij,ij,j->i", self.U, self.U, self.weights)

    def toarray(self):
        """The dense (n_samples, n_samples) approximation; only for small n."""
        return (self.U * self.weights) @ self.U.T


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
    rows = _as_index(rows, K.shape[0], "rows")
    cols = _as_index(cols, K.shape[1], "cols")
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
    return np.array(K.diagonal())  # a copy: an ndarray's diagonal() is a read-only view
