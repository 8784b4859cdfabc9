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

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_array

from ._graph import LowRankKernel, kernel_diagonal
from ._kernel import Kernel, graph_kernel_matrix, resolve_kernel
from ._registry import get_spec

__all__ = ["HeatDiagonalMax", "heat_diagonal_max", "kernel_gamma"]

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
        K = X
        if not (isinstance(K, LowRankKernel) or sp.issparse(K)):
            K = check_array(K, dtype=[np.float64, np.float32], input_name="X")
        return _gamma_from_diagonal(kernel_diagonal(K), "kernel='precomputed'")
    spec = get_spec(kernel)
    if spec is not None and spec.transductive:
        K = graph_kernel_matrix(spec.name, X, **kernel_params)
        return _gamma_from_diagonal(kernel_diagonal(K), f"kernel={kernel!r}")

    X = check_array(X, dtype=[np.float64, np.float32], accept_sparse="csr", input_name="X")
    if isinstance(kernel, Kernel):
        if kernel_params:
            raise ValueError("kernel_params must be empty when kernel is a resolved Kernel")
        resolved = kernel
    else:
        resolved = resolve_kernel(kernel, kernel_params=kernel_params, X=X)
    top = -np.inf
    for start in range(0, X.shape[0], _CHUNK_ROWS):
        diag = resolved.diag(X[start:start + _CHUNK_ROWS])
        _gamma_from_diagonal(diag, f"kernel={resolved.name!r}")  # checks sign, finiteness
        top = max(top, float(np.max(diag)))
    return float(np.sqrt(max(top, 0.0)))


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


def _heat_operator(A):
    """L = I - D^-1/2 A D^-1/2 (CSR) and N = D^-1/2 A D^-1/2 of a symmetric adjacency."""
    A = sp.csr_matrix(A, dtype=np.float64)
    d = np.asarray(A.sum(axis=1)).ravel()
    if np.any(d <= 0):
        raise ValueError("the graph has a point without links (degree 0); the normalised "
                         "Laplacian is undefined there")
    s = 1.0 / np.sqrt(d)
    N = sp.diags(s) @ A @ sp.diags(s)
    N = sp.csr_matrix(N)
    return (sp.identity(A.shape[0], format="csr") - N).tocsr(), N


def heat_diagonal_max(A, t, *, n_components=100, n_probes=32, margin=4.0, batch=64,
                      max_exact=4096, dense_limit=3000, eigenpairs=None, random_state=None):
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
    import scipy.linalg as sla
    import scipy.sparse.linalg as spla
    from sklearn.utils import check_random_state

    if isinstance(t, bool) or not isinstance(t, (int, float, np.floating)) or not t > 0:
        raise ValueError(f"t must be a number > 0, got {t!r}")
    for name, value, low in (("n_components", n_components, 1), ("n_probes", n_probes, 2),
                             ("batch", batch, 1), ("max_exact", max_exact, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    n = A.shape[0]
    if A.ndim != 2 or A.shape[1] != n:
        raise ValueError(f"A must be a square adjacency matrix, got shape {A.shape}")
    L, N = _heat_operator(A)
    t = float(t)
    if n <= max(dense_limit, n_components + 2):
        lam, V = sla.eigh(N.toarray())
        diag = (V**2) @ np.exp(-t * (1.0 - lam))
        i = int(np.argmax(diag))
        return HeatDiagonalMax(float(np.sqrt(diag[i])), i, float(diag[i]), n, True, True)
    rng = check_random_state(random_state)
    if eigenpairs is None:
        lam, U = spla.eigsh(N, k=n_components, which="LA", v0=rng.uniform(-1, 1, n))
    else:
        lam, U = (np.asarray(a, dtype=np.float64) for a in eigenpairs)
        if U.shape[0] != n or lam.shape != (U.shape[1],):
            raise ValueError(f"eigenpairs must be (lam (r,), U (n, r)) with n = {n}, got "
                             f"shapes {lam.shape} and {U.shape}")
    w = np.exp(-t * (1.0 - lam))
    low = (U**2) @ w
    Z = rng.choice([-1.0, 1.0], size=(n, n_probes))
    S = Z * (spla.expm_multiply(-t * L, Z) - U @ (w[:, None] * (U.T @ Z)))
    upper = low + S.mean(axis=1) + margin * S.std(axis=1) / np.sqrt(n_probes)
    order = np.argsort(upper)[::-1]
    best, arg, done = -np.inf, -1, 0
    while done < min(n, max_exact) and upper[order[done]] > best:
        idx = order[done:min(done + batch, n, max_exact)]
        E = np.zeros((n, idx.size))
        E[idx, np.arange(idx.size)] = 1.0
        vals = spla.expm_multiply(-t * L, E)[idx, np.arange(idx.size)]
        j = int(np.argmax(vals))
        if vals[j] > best:
            best, arg = float(vals[j]), int(idx[j])
        done += idx.size
    certified = done >= n or upper[order[done]] <= best
    return HeatDiagonalMax(float(np.sqrt(best)), arg, best, done, bool(certified), False)
