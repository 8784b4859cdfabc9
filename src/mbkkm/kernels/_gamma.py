"""The paper's gamma: the largest feature-space norm of a data point.

gamma = max_{x in X} ||phi(x)|| = max_{x in X} sqrt(K(x, x)). It is a property
of the kernel *and* the data; the paper's batch size and iteration bounds
depend on it (b = Omega(max(gamma^4, gamma^2) / eps^2 ...), O(gamma^2 / eps)
iterations). For normalised kernels (Gaussian, Laplacian) gamma = 1.

References
----------
.. [1] B. Jourdan and G. Schwartzman, "Mini-batch kernel k-means", Section 2
   (definition of gamma) and Appendix C, Table 1 (empirical gamma of the k-NN
   and heat kernels).
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from sklearn.utils import check_array, check_random_state

from ._graph import LowRankKernel, kernel_diagonal
from ._kernel import GRAPH_KERNELS, Kernel, graph_kernel_matrix, resolve_kernel
from ._spectral import heat_weights, normalized_adjacency

_CHUNK_ROWS = 4096


def _gamma_from_diagonal(diag, what):
    diag = np.asarray(diag, dtype=np.float64)
    if diag.size == 0:
        raise ValueError("X must have at least one sample")
    if not np.all(np.isfinite(diag)):
        raise ValueError(f"{what}: K(x, x) is not finite for some x")
    top = float(diag.max())
    # Rounding may leave a tiny negative K(x, x) in an otherwise PSD kernel.
    if diag.min() < -1e-12 * max(abs(top), 1.0):
        raise ValueError(
            f"{what}: K(x, x) = {diag.min():.3g} < 0 for some x, so the kernel is not "
            "positive semi-definite on X and gamma = max_x sqrt(K(x, x)) is undefined"
        )
    return float(np.sqrt(max(top, 0.0)))


def kernel_gamma(X, kernel="rbf", **kernel_params):
    """The paper's gamma = max_x sqrt(K(x, x)) over the rows of X.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features), or (n_samples, n_samples)
        The data (dense, or scipy.sparse for the kernels that take sparse data);
        for ``kernel="precomputed"`` the kernel matrix itself (ndarray, scipy
        sparse matrix or :class:`~mbkkm.kernels.LowRankKernel`).
    kernel : str, callable or Kernel, default="rbf"
        A pairwise registry name (its diagonal is evaluated in row chunks, so a
        memmap is never read at once), a callable ``k(X, Y, **kernel_params)``,
        a resolved :class:`~mbkkm.kernels.Kernel`, a graph kernel name
        (``"knn"``, ``"heat"``: the matrix is built with
        :func:`~mbkkm.kernels.graph_kernel_matrix`), or ``"precomputed"``.
    **kernel_params
        For a named pairwise kernel: ``gamma``, ``degree``, ``coef0`` (defaults
        as in :func:`~mbkkm.kernels.resolve_kernel`); for a callable: its extra
        keyword arguments; for a graph kernel: the builder's parameters
        (``n_neighbors``, ``t``, ...).

    Returns
    -------
    gamma : float
        max_x sqrt(K(x, x)). For a low-rank heat kernel (large n) it is computed
        from the approximation, whose diagonal underestimates the exact one by at
        most the reported ``error``.

    Raises
    ------
    ValueError
        If some K(x, x) is negative (beyond rounding) or not finite.

    Notes
    -----
    For the k-NN kernel D^-1 A D^-1 (self-loops included), K(x, x) = 1 / d_x^2,
    so gamma = 1 / min degree (PenDigits standardised, 1000 neighbours counting
    the point itself: 0.00100, as in the paper's Table 1).

    References
    ----------
    .. [1] B. Jourdan and G. Schwartzman, "Mini-batch kernel k-means",
       Section 2 and Appendix C, Table 1.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[3.0, 4.0], [1.0, 0.0]])
    >>> kernel_gamma(X, "linear")
    5.0
    >>> kernel_gamma(X, "rbf")
    1.0
    """
    if isinstance(kernel, str) and kernel == "precomputed":
        if kernel_params:
            raise ValueError(
                f"kernel='precomputed' takes no parameters, got {sorted(kernel_params)}"
            )
        if not (isinstance(X, LowRankKernel) or sp.issparse(X)):
            X = check_array(X, dtype=[np.float64, np.float32], input_name="X")
        return _gamma_from_diagonal(kernel_diagonal(X), "kernel='precomputed'")
    if kernel in GRAPH_KERNELS:
        K = graph_kernel_matrix(kernel, X, **kernel_params)
        return _gamma_from_diagonal(kernel_diagonal(K), f"kernel={kernel!r}")

    X = check_array(X, dtype=[np.float64, np.float32], accept_sparse="csr", input_name="X")
    if isinstance(kernel, Kernel) and kernel_params:
        raise ValueError("kernel_params must be empty when kernel is a resolved Kernel")
    if not isinstance(kernel, Kernel):
        kernel = resolve_kernel(kernel, kernel_params=kernel_params, X=X)
    # Chunk by chunk (each checked for sign and finiteness); sqrt keeps the order.
    what = f"kernel={kernel.name!r}"
    starts = range(0, X.shape[0], _CHUNK_ROWS)
    return max(_gamma_from_diagonal(kernel.diag(X[s : s + _CHUNK_ROWS]), what) for s in starts)


@dataclass
class HeatDiagonalMax:
    """The largest diagonal entry of a heat kernel exp(-t L), found without the matrix.

    Attributes
    ----------
    gamma : float
        sqrt of the largest entry found: the paper's gamma = max_x sqrt(K(x, x)).
    argmax : int
        The point x where it is reached.
    value : float
        K(x, x) at that point (exact up to ``expm_multiply``'s tolerance).
    n_exact : int
        Points whose K(x, x) was computed exactly.
    certified : bool
        Whether every other point's probe estimate, plus ``margin`` standard
        errors, stays below ``value`` (a statistical certificate; True on the
        exact path).
    exact_path : bool
        Whether the whole diagonal was computed (small graphs).
    """

    gamma: float
    argmax: int
    value: float
    n_exact: int
    certified: bool
    exact_path: bool


def check_int(value, name, low):
    """``int(value)``, or a ValueError when it is not an integer >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _check_square(A):
    """n of an (n, n) adjacency matrix."""
    n = A.shape[0]
    if A.ndim != 2 or A.shape[1] != n:
        raise ValueError(f"A must be a square adjacency matrix, got shape {A.shape}")
    return n


def _heat_operator(A):
    """L = I - D^-1/2 A D^-1/2 (CSR) and N = D^-1/2 A D^-1/2 of a symmetric adjacency."""
    A = sp.csr_matrix(A, dtype=np.float64)
    d = np.asarray(A.sum(axis=1)).ravel()
    if np.any(d <= 0):
        raise ValueError(
            "the graph has a point without links (degree 0); the normalised "
            "Laplacian is undefined there"
        )
    N = normalized_adjacency(A, d)
    return (sp.identity(A.shape[0], format="csr") - N).tocsr(), N


def heat_diagonal_max(
    A,
    t,
    *,
    n_components=100,
    n_probes=32,
    margin=4.0,
    batch=64,
    max_exact=4096,
    dense_limit=3000,
    eigenpairs=None,
    random_state=None,
):
    """Largest diagonal entry of the heat kernel exp(-t L) of a graph, at any size.

    L = I - D^-1/2 A D^-1/2 is the normalised Laplacian of the graph A. The
    low-rank heat kernel keeps the top eigenpairs of D^-1/2 A D^-1/2 and so
    *underestimates* every K(x, x) by the dropped part, which at the diffusion
    times of the paper's Table 1 is of the same size as K(x, x) itself (the bulk
    of the spectrum has weight about e^-t). This routine finds the exact maximum:

    1. the top ``n_components`` eigenpairs (U, lambda) give diag(U W U^T),
       W = exp(-t (1 - lambda)), exactly;
    2. the rest R = exp(-t L) - U W U^T has its diagonal estimated with
       ``n_probes`` Rademacher vectors z: diag R ~ mean(z * R z), with
       R z = expm_multiply(-t L, z) - U W U^T z (Hutchinson's estimator, unbiased);
    3. the points whose estimate plus ``margin`` standard errors can reach the
       largest value found are computed exactly, e_x^T exp(-t L) e_x with
       ``expm_multiply`` on their unit vectors, ``batch`` at a time, until no
       other point can (or ``max_exact`` points were computed).

    Graphs of at most ``dense_limit`` points are decomposed exactly instead.

    Parameters
    ----------
    A : scipy sparse matrix or ndarray of shape (n, n)
        Symmetric non-negative adjacency, every degree > 0 (e.g.
        :func:`~mbkkm.kernels.knn_adjacency`).
    t : float
        Diffusion time, > 0.
    n_components : int, default=100
        Eigenpairs computed exactly (fewer: larger probe variance, more exact points).
    n_probes : int, default=32
        Rademacher vectors of the estimate.
    margin : float, default=4.0
        Standard errors a probe estimate may be off.
    batch : int, default=64
        Points computed exactly per ``expm_multiply`` call.
    max_exact : int, default=4096
        At most this many points computed exactly (then ``certified`` may be False).
    dense_limit : int, default=3000
        Up to this many points: the dense eigendecomposition, every entry exact.
    eigenpairs : tuple (lam, U), optional
        The top eigenpairs of D^-1/2 A D^-1/2 when already computed (they do not
        depend on t: a search over t computes them once); ``n_components`` is then
        ``len(lam)``.
    random_state : int, RandomState instance or None, default=None
        Start vector of ``eigsh`` and the probes.

    Returns
    -------
    HeatDiagonalMax
    """
    if isinstance(t, bool) or not isinstance(t, (int, float, np.floating)) or not t > 0:
        raise ValueError(f"t must be a number > 0, got {t!r}")
    check_int(n_components, "n_components", 1)
    check_int(n_probes, "n_probes", 2)
    check_int(batch, "batch", 1)
    check_int(max_exact, "max_exact", 1)
    n = _check_square(A)
    L, N = _heat_operator(A)
    t = float(t)
    if n <= max(dense_limit, n_components + 2):
        lam, V = sla.eigh(N.toarray())
        diag = (V**2) @ heat_weights(lam, t)
        i = int(np.argmax(diag))
        return HeatDiagonalMax(float(np.sqrt(diag[i])), i, float(diag[i]), n, True, True)
    rng = check_random_state(random_state)
    if eigenpairs is None:
        lam, U = spla.eigsh(N, k=n_components, which="LA", v0=rng.uniform(-1, 1, n))
    else:
        lam, U = _check_eigenpairs(eigenpairs, n)
    w = heat_weights(lam, t)
    low = (U**2) @ w
    Z = rng.choice([-1.0, 1.0], size=(n, n_probes))
    S = Z * (spla.expm_multiply(-t * L, Z) - U @ (w[:, None] * (U.T @ Z)))
    upper = low + S.mean(axis=1) + margin * S.std(axis=1) / np.sqrt(n_probes)
    order = np.argsort(upper)[::-1]
    best, arg, done = -np.inf, -1, 0
    while done < min(n, max_exact) and upper[order[done]] > best:
        idx = order[done : min(done + batch, n, max_exact)]
        vals = spla.expm_multiply(-t * L, _unit_columns(n, idx))[idx, np.arange(idx.size)]
        j = int(np.argmax(vals))
        if vals[j] > best:
            best, arg = float(vals[j]), int(idx[j])
        done += idx.size
    certified = done >= n or upper[order[done]] <= best
    return HeatDiagonalMax(float(np.sqrt(best)), arg, best, done, bool(certified), False)


def _diagonal_bounds(N, lam, U):
    """The function t -> (lower, upper), each of shape (n,), bounding every K_t(x, x)
    (see :func:`heat_diagonal_bounds`) from the kept pairs (lam, U) of N.

    The kept pairs give sum_{i kept} v_i(x)^2 f(lam_i) exactly; the dropped spectrum
    of each point enters through its first three moments
    m_k(x) = sum_{i dropped} lam_i^k v_i(x)^2, computed once here: N_xx and
    (N^2)_xx = sum_j N_xj^2 are read off the sparse N, so
    m_k(x) = (N^k)_xx - sum_{i kept} lam_i^k v_i(x)^2 costs O(nnz + n r).
    """
    N = sp.csr_matrix(N)
    kept = U**2
    m0 = 1.0 - kept.sum(axis=1)
    m1 = np.asarray(N.diagonal()).ravel() - kept @ lam
    m2 = np.asarray(N.multiply(N).sum(axis=1)).ravel() - kept @ lam**2
    b = float(lam.min())

    def bounds(t):
        f = functools.partial(heat_weights, t=t)
        part = kept @ f(lam)
        lower = part + _radau(m0, m1, m2, -1.0, b, f, -1)
        upper = part + _radau(m0, m1, m2, -1.0, b, f, +1)
        return lower, upper

    return bounds


def _radau(m0, m1, m2, low, high, f, side):
    """Two-node quadrature of f against a measure on [low, high] of mass m0 and first
    and second moments m1, m2, with one node fixed at an end: at ``high``
    (``side=+1``) it bounds the integral from above when f''' >= 0, at ``low``
    (``side=-1``) from below.

    With mean c and variance s2, the free node is tau = c - side * s2 / g, g the
    distance from c to the fixed node, with weight m0 g^2 / (g^2 + s2); the fixed node
    takes the rest. Why it bounds: the quadratic p that interpolates f at tau (twice)
    and at the fixed node is integrated exactly (the rule matches m0, m1, m2), and
    f - p = f'''(eta) / 6 (x - tau)^2 (x - node) has the sign of -side on [low, high].
    Moments spoilt by rounding are clipped to what a measure on [low, high] can have.
    """
    m0 = np.maximum(m0, 0.0)
    c = np.clip(np.divide(m1, m0, out=np.zeros_like(m0), where=m0 > 0), low, high)
    s2 = np.divide(m2, m0, out=np.zeros_like(m0), where=m0 > 0) - c**2
    s2 = np.clip(s2, 0.0, (high - c) * (c - low))
    node = high if side > 0 else low
    gap = np.abs(node - c)
    denom = gap**2 + s2
    # No spread (denom = 0): the whole mass sits at c = node.
    w_free = np.divide(gap**2, denom, out=np.zeros_like(denom), where=denom > 0)
    tau = c - side * np.divide(s2, gap, out=np.zeros_like(s2), where=gap > 0)
    return m0 * (w_free * f(tau) + (1.0 - w_free) * f(node))


def heat_diagonal_bounds(A, t, eigenpairs):
    """Lower and upper bounds on every diagonal entry of the heat kernel exp(-t L).

    With N = D^-1/2 A D^-1/2 = sum_i lam_i v_i v_i^T and L = I - N,

        K_t(x, x) = sum_i v_i(x)^2 f(lam_i),    f(lam) = exp(-t (1 - lam)).

    The given top eigenpairs contribute exactly. The rest is the integral of f
    against the measure mu_x = sum_{i dropped} v_i(x)^2 delta(lam_i), whose mass,
    mean and second moment are known without the dropped pairs (the diagonals of I,
    N and N^2 less the kept part) and whose support lies in [-1, b], b the smallest
    kept eigenvalue. As every derivative of f is positive, the two-node Gauss-Radau
    rules with a node fixed at b and at -1 bound that integral from above and below
    (Golub and Meurant); the bounds tighten as the dropped spectrum narrows, and meet
    when every pair is given.

    Parameters
    ----------
    A : scipy sparse matrix or ndarray of shape (n, n)
        Symmetric non-negative adjacency, every degree > 0.
    t : float or array-like of shape (m,)
        Diffusion times, > 0.
    eigenpairs : tuple (lam, U)
        The r largest eigenvalues of D^-1/2 A D^-1/2, shape (r,), and their
        orthonormal eigenvectors, shape (n, r). They must be the top ones (the bound
        assumes every other eigenvalue is at most ``lam.min()``); their accuracy is
        the bounds' accuracy.

    Returns
    -------
    lower, upper : ndarray of shape (n,), or (n, m) for an array t
        lower <= K_t(x, x) <= upper for every point x.

    References
    ----------
    .. [1] G. H. Golub and G. Meurant, "Matrices, Moments and Quadrature with
       Applications", Princeton University Press, 2010, chapter 6.
    """
    scalar = np.ndim(t) == 0
    ts = np.atleast_1d(np.asarray(t, dtype=np.float64))
    if ts.ndim != 1 or not np.all(np.isfinite(ts)) or not np.all(ts > 0):
        raise ValueError(f"t must be a number > 0 or a 1-D array of them, got {t!r}")
    n = _check_square(A)
    lam, U = _check_eigenpairs(eigenpairs, n)
    _, N = _heat_operator(A)
    bounds = _diagonal_bounds(N, lam, U)
    lower = np.empty((n, ts.size))
    upper = np.empty_like(lower)
    for j, tj in enumerate(ts):
        lower[:, j], upper[:, j] = bounds(tj)
    return (lower[:, 0], upper[:, 0]) if scalar else (lower, upper)


def _check_eigenpairs(eigenpairs, n):
    try:
        lam, U = (np.asarray(a, dtype=np.float64) for a in eigenpairs)
    except (TypeError, ValueError):
        raise ValueError("eigenpairs must be a tuple (lam, U) of arrays") from None
    if U.ndim != 2 or U.shape[0] != n or lam.shape != (U.shape[1],) or lam.size == 0:
        raise ValueError(
            f"eigenpairs must be (lam (r,), U (n, r)) with n = {n} and r >= 1, "
            f"got shapes {lam.shape} and {U.shape}"
        )
    return lam, U


def top_heat_eigenpairs(A, n_components, *, tol=0.0, random_state=None):
    """The ``n_components`` largest eigenpairs of N = D^-1/2 A D^-1/2, multiplicities kept.

    Eigenvalue 1 has one eigenvector per connected component c of the graph,
    sqrt(d) on c and 0 elsewhere, and a Lanczos solver finds only some copies of a
    repeated eigenvalue; so those are written down, and ``eigsh`` computes the rest
    on N with them projected out.

    Parameters
    ----------
    A : scipy sparse matrix or ndarray of shape (n, n)
        Symmetric non-negative adjacency, every degree > 0.
    n_components : int
        Pairs wanted, >= 1.
    tol : float, default=0.0
        Relative accuracy of ``eigsh``'s eigenvalues (0: machine precision).
    random_state : int, RandomState instance or None, default=None
        Start vector of ``eigsh``.

    Returns
    -------
    lam : ndarray of shape (n_components,)
        Largest first.
    U : ndarray of shape (n, n_components)
        Orthonormal eigenvectors.
    """
    from scipy.sparse.csgraph import connected_components

    _, N = _heat_operator(A)
    n, k = N.shape[0], int(n_components)
    if k >= n - 1:
        lam, V = sla.eigh(N.toarray())
        return lam[::-1][:k], np.ascontiguousarray(V[:, ::-1][:, :k])
    n_comp, labels = connected_components(A, directed=False)
    d = np.asarray(sp.csr_matrix(A).sum(axis=1)).ravel()
    Z = np.zeros((n, n_comp))
    Z[np.arange(n), labels] = np.sqrt(d)
    Z /= np.linalg.norm(Z, axis=0)
    Z = Z[:, np.argsort(-np.bincount(labels), kind="stable")]
    if k <= n_comp:
        return np.ones(k), Z[:, :k]
    op = spla.LinearOperator((n, n), dtype=np.float64, matvec=lambda x: N @ x - Z @ (Z.T @ x))
    v0 = check_random_state(random_state).uniform(-1, 1, n)
    lam, V = spla.eigsh(op, k=k - n_comp, which="LA", tol=tol, v0=v0 - Z @ (Z.T @ v0))
    order = np.argsort(lam)[::-1]
    return (np.concatenate([np.ones(n_comp), lam[order]]), np.hstack([Z, V[:, order]]))


@dataclass
class HeatTime:
    """The diffusion time t at which a heat kernel's gamma reaches a target.

    Attributes
    ----------
    t : float
        The time: the midpoint of ``[t_low, t_high]``.
    t_low, t_high : float
        A certified bracket: max_x sqrt(K_t(x, x)) reaches the target at a time in
        it (up to the eigensolver's and root finder's accuracy). Equal (to
        ``xtol``) when the largest diagonal entry was found exactly.
    bounds_bracket : tuple of float
        The bracket from :func:`heat_diagonal_bounds` alone, before the exact values.
    n_components : int
        Eigenpairs used.
    n_exact : int
        Points whose K_t(x, x) was computed exactly (``expm_multiply``).
    argmax : int
        A point where the largest K(x, x) is reached at ``t_low`` (among the exact ones
        when any was computed, else by the lower bound).
    """

    t: float
    t_low: float
    t_high: float
    bounds_bracket: tuple
    n_components: int
    n_exact: int
    argmax: int


def _decreasing_root(g, lo=1e-6, hi=1.0, xtol=1e-4):
    """The t > 0 where the decreasing g(t) crosses 0 (None if g stays > 0 up to 1e6)."""
    from scipy.optimize import brentq

    while g(hi) > 0:
        lo, hi = hi, 4.0 * hi
        if hi > 1e6:
            return None
    if g(lo) <= 0:
        return lo
    return float(brentq(g, lo, hi, xtol=xtol))


def heat_time_for_gamma(
    A, gamma, *, n_components=64, eigenpairs=None, n_exact=64, xtol=1e-4, random_state=None
):
    """The diffusion time t at which max_x sqrt(K(x, x)) of exp(-t L) equals ``gamma``.

    Each K_t(x, x) = sum_i v_i(x)^2 exp(-t (1 - lam_i)) decreases with t, so the
    time is a 1-D root. It is bracketed in two steps, without the n x n matrix:

    1. the bounds of :func:`heat_diagonal_bounds` on every point, from the top
       ``n_components`` eigenpairs: the root of their largest lower bound is below
       the time, the root of their largest upper bound above it;
    2. the ``n_exact`` points of largest upper bound are computed exactly
       (``expm_multiply`` on their unit vectors, on a grid of times across the
       bracket): the last grid time where the largest exact value is still above
       gamma^2 is a new lower end, the first where it and every other point's upper
       bound are below a new upper end; repeated on the new bracket while it shrinks.
       When no other point's bound reaches the target there, the ends close in on t.

    Given every eigenpair (a dense decomposition), the bounds are exact and so is t.

    Parameters
    ----------
    A : scipy sparse matrix or ndarray of shape (n, n)
        Symmetric non-negative adjacency, every degree > 0 (e.g.
        :func:`~mbkkm.kernels.knn_adjacency`).
    gamma : float
        The target, in (0, 1): the heat kernel's diagonal is 1 at t = 0 and falls.
    n_components : int, default=64
        Top eigenpairs of D^-1/2 A D^-1/2 computed (:func:`top_heat_eigenpairs`;
        more: tighter bounds).
    eigenpairs : tuple (lam, U), optional
        The top eigenpairs when already computed (``n_components`` is then ``len(lam)``).
    n_exact : int, default=64
        Points computed exactly in step 2 (0: the bounds' bracket only).
    xtol : float, default=1e-4
        Absolute tolerance of the root finder.
    random_state : int, RandomState instance or None, default=None
        Start vector of ``eigsh``.

    Returns
    -------
    HeatTime

    Raises
    ------
    ValueError
        If ``gamma`` is not in (0, 1), or no t reaches it (the diagonal's limit at
        t -> infinity, d_x / vol of x's connected component, is above gamma^2).
    """

    number = isinstance(gamma, (int, float, np.floating)) and not isinstance(gamma, bool)
    if not (number and 0 < gamma < 1):
        raise ValueError(f"gamma must be a number in (0, 1), got {gamma!r}")
    check_int(n_exact, "n_exact", 0)
    n = _check_square(A)
    L, N = _heat_operator(A)
    if eigenpairs is None:
        check_int(n_components, "n_components", 1)
        eigenpairs = top_heat_eigenpairs(A, int(n_components), random_state=random_state)
    lam, U = _check_eigenpairs(eigenpairs, n)
    bounds = _diagonal_bounds(N, lam, U)
    target = float(gamma) ** 2
    t_lo = _decreasing_root(lambda t: bounds(t)[0].max() - target, xtol=xtol)
    t_hi = _decreasing_root(lambda t: bounds(t)[1].max() - target, xtol=xtol)
    if t_lo is None or t_hi is None:
        raise ValueError(
            f"no diffusion time t gives gamma = {gamma}: the heat kernel's "
            "diagonal stays above gamma^2 as t grows (a small connected "
            "component of the graph keeps d_x / vol of it)"
        )
    t_lo = min(t_lo, t_hi)
    low, high, argmax = t_lo, t_hi, int(np.argmax(bounds(t_lo)[0]))
    k = min(int(n_exact), n)
    if k and t_hi - t_lo > xtol:
        cand = np.argsort(bounds(t_hi)[1])[::-1][:k]
        rest = ~np.isin(np.arange(n), cand)  # the points not computed exactly
        for _ in range(_REFINE_PASSES):
            # One expm_multiply per pass gives the candidates' exact K_t(x, x) on a grid
            # of times (its cost is about that of the last time alone).
            ts = np.linspace(low, high, _REFINE_GRID)
            exact = _exact_diagonal_on_grid(L, cand, low, high, _REFINE_GRID)
            H = exact.max(axis=1)
            lo_curve = np.maximum(H, [bounds(t)[0].max() for t in ts])
            up_curve = np.maximum(H, [bounds(t)[1][rest].max() if rest.any() else 0.0 for t in ts])
            # Every curve falls with t: the time lies between the last grid time where
            # a lower curve is still >= gamma^2 and the first where an upper one is below.
            above = np.flatnonzero(lo_curve >= target)
            below = np.flatnonzero(up_curve <= target)
            new_low = ts[above[-1]] if above.size else low
            if above.size:
                argmax = int(cand[np.argmax(exact[above[-1]])])
            new_high = ts[below[0]] if below.size else high
            shrunk = new_high - new_low < 0.5 * (high - low)
            low, high = new_low, max(new_high, new_low)
            if not shrunk or high - low <= xtol:
                break
    bracket = (float(t_lo), float(t_hi))
    return HeatTime(
        float(0.5 * (low + high)), float(low), float(high), bracket, lam.size, k, argmax
    )


#: Passes and grid points of heat_time_for_gamma's exact refinement (each pass divides
#: the bracket by up to _REFINE_GRID - 1).
_REFINE_PASSES = 4
_REFINE_GRID = 17

#: Unit vectors per expm_multiply call (its (grid, n, batch) result is held at once).
_EXACT_BATCH = 16


def _unit_columns(n, idx):
    """The (n, len(idx)) matrix of the unit vectors e_i, i in idx."""
    E = np.zeros((n, idx.size))
    E[idx, np.arange(idx.size)] = 1.0
    return E


def _exact_diagonal_on_grid(L, points, start, stop, num):
    """K_t(x, x) = e_x^T exp(-t L) e_x for the given points at ``num`` times from
    ``start`` to ``stop``, shape (num, len(points))."""
    out = np.empty((num, len(points)))
    for s in range(0, len(points), _EXACT_BATCH):
        idx = np.asarray(points[s : s + _EXACT_BATCH])
        # exp(-t L) E = exp(-(t - start) L) exp(-start L) E, the interval from 0:
        # expm_multiply over an interval that starts elsewhere steps with the whole
        # interval's scaling (scipy issue 16363, open in 1.17: relative errors of 3e-3
        # here); the short interval is cheap.
        E = spla.expm_multiply(-start * L, _unit_columns(L.shape[0], idx))
        vals = spla.expm_multiply(-L, E, start=0.0, stop=stop - start, num=num, endpoint=True)
        out[:, s : s + idx.size] = vals[:, idx, np.arange(idx.size)]
    return out
