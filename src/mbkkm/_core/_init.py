"""Initialisation in feature space: kernel k-means++ and random points.

Initial centers are single data points, so each is a window of one support point
with coefficient 1.
"""

from __future__ import annotations

import numpy as np


def kernel_kmeans_plusplus(X, kernel, n_clusters, random_state, sample_weight=None, diag=None):
    """Greedy kernel k-means++ (Arthur & Vassilvitskii 2007) in feature space.

    D^2(x) = K(x, x) - 2 K(x, c) + K(c, c), the squared feature-space distance to the
    nearest chosen center. Each step draws 2 + log k candidates (as scikit-learn) with
    probability proportional to w(x) D^2(x) and keeps the one that lowers the potential
    sum_x w(x) D^2(x) most.

    Parameters
    ----------
    X : ndarray of shape (n, d)
        Items the kernel accepts (rows of data, or indices for index kernels).
    kernel : callable
        ``kernel(A, B) -> (len(A), len(B))``.
    n_clusters : int
    random_state : numpy.random.RandomState
    sample_weight : ndarray of shape (n,), optional
    diag : ndarray of shape (n,), optional
        K(x, x), computed when not given.

    Returns
    -------
    indices : ndarray of shape (n_clusters,)
        Positions in X of the chosen centers.

    References
    ----------
    D. Arthur and S. Vassilvitskii. "k-means++: the advantages of careful seeding."
    SODA 2007.
    """
    n = X.shape[0]
    w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    diag = np.asarray(kernel.diag(X) if diag is None else diag, dtype=np.float64)
    n_local_trials = 2 + int(np.log(n_clusters))

    # X's side of every K(candidates, X), prepared once (rbf: the augmented GEMM
    # operand, which otherwise costs more than the small GEMM itself).
    prepared = kernel.prepare_right(X) if hasattr(kernel, "prepare_right") else {}

    def sq_dist_to(idx):
        # (len(idx), n): K(c, c) - 2 K(c, x) + K(x, x), clipped at 0 against rounding
        # and non-PSD callables.
        Kc = np.asarray(kernel(X[idx], X, **prepared), dtype=np.float64)
        D = diag[idx][:, None] - 2.0 * Kc + diag[None, :]
        np.maximum(D, 0.0, out=D)
        return D

    centers = np.empty(n_clusters, dtype=np.intp)
    total = w.sum()
    p = w / total if total > 0 else None  # all-zero weights: uniform first draw
    centers[0] = random_state.choice(n, p=p)
    closest = sq_dist_to(centers[:1])[0]
    pot = float(closest @ w)
    for c in range(1, n_clusters):
        if pot <= 0:
            # Every point coincides with a chosen center: fall back to uniform draws
            # among points not chosen yet (keeps k distinct indices where possible).
            rest = np.setdiff1d(np.arange(n), centers[:c])
            pool = rest if rest.size else np.arange(n)
            centers[c] = random_state.choice(pool)
            continue
        r = random_state.uniform(size=n_local_trials) * pot
        cand = np.searchsorted(np.cumsum(w * closest), r)
        np.minimum(cand, n - 1, out=cand)
        D = sq_dist_to(cand)
        np.minimum(closest[None, :], D, out=D)
        cand_pot = D @ w
        best = int(np.argmin(cand_pot))
        pot = float(cand_pot[best])
        closest = D[best]
        centers[c] = cand[best]
    return centers


def random_init(n, n_clusters, random_state, sample_weight=None):
    """k distinct points chosen uniformly at random (with weights: proportionally)."""
    p = None
    if sample_weight is not None:
        w = np.asarray(sample_weight, dtype=np.float64)
        if np.count_nonzero(w) >= n_clusters:
            p = w / w.sum()
    return random_state.choice(n, size=n_clusters, replace=False, p=p)
