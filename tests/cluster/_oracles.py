"""Plain, obviously right versions used as oracles by the cluster tests."""

from __future__ import annotations

import numpy as np


def blobs(n=300, d=4, k=3, seed=0, dtype=np.float64):
    rng = np.random.RandomState(seed)
    centers = rng.normal(scale=4, size=(k, d))
    X = centers[rng.randint(k, size=n)] + rng.normal(size=(n, d))
    return X.astype(dtype)


def implied_centers(km):
    """Explicit centers sum_s a_s x_s (meaningful for the linear kernel)."""
    k = km.n_clusters
    return np.stack(
        [
            (
                km.dual_coef_[km.support_labels_ == j, None]
                * km.support_vectors_[km.support_labels_ == j]
            ).sum(0)
            for j in range(k)
        ]
    )


def plain_minibatch_kmeans(X, init, plan, learning_rate):
    """A plain mini-batch k-means loop in input space (the oracle)."""
    C = np.array(init, dtype=np.float64)
    k = C.shape[0]
    N = np.zeros(k)
    for idx in plan:
        B = X[idx]
        d2 = ((B[:, None, :] - C[None, :, :]) ** 2).sum(-1)
        lab = d2.argmin(1)
        for j in range(k):
            pts = B[lab == j]
            if len(pts) == 0:
                continue
            N[j] += len(pts)
            if learning_rate == "adaptive":
                alpha = np.sqrt(len(pts) / len(B))
            else:
                alpha = len(pts) / N[j]
            C[j] = (1 - alpha) * C[j] + alpha * pts.mean(0)
    return C
