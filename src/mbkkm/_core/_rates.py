"""Learning-rate registry.

A learning rate maps the batch counts to the per-cluster step alpha_j in
C_j <- (1 - alpha_j) C_j + alpha_j cm(B_j).

- ``"adaptive"``: the paper's beta rate (Schwartzman 2023), alpha_j = sqrt(b_j / b).
- ``"classic"``: scikit-learn's MiniBatchKMeans rate, alpha_j = b_j / N_j with N_j the
  running count of points assigned to cluster j, this batch included (N_j starts at
  0, so the first update that reaches a cluster has alpha_j = 1).

Clusters with b_j = 0 get alpha_j = 0: their center is kept as it is.

A rate is a pure function ``rate(batch_counts, batch_total, running_counts) -> alpha``
of the batch counts b_j, their total b and the running counts N_j *after* this
batch (the caller adds b_j to N_j first), written with arithmetic operators only,
so the same function serves numpy arrays on the host and torch tensors on a device
(:mod:`mbkkm._core._pool`).

References
----------
G. Schwartzman. "Mini-batch k-means terminates within O(d/epsilon) iterations."
ICLR 2023.
D. Sculley. "Web-scale k-means clustering." WWW 2010.
"""

from __future__ import annotations

import numpy as np


def adaptive_rate(batch_counts, batch_total, running_counts):
    """alpha_j = sqrt(b_j / b) (the running counts are not used)."""
    return (batch_counts / batch_total) ** 0.5


def classic_rate(batch_counts, batch_total, running_counts):
    """alpha_j = b_j / N_j, N_j the running count including this batch (0 where N_j = 0).

    N_j = 0 implies b_j = 0, so ``b_j / (N_j + [N_j = 0])`` is b_j / N_j where N_j > 0
    and 0 elsewhere, written with operators only.
    """
    return batch_counts / (running_counts + (running_counts == 0))


LEARNING_RATES = {"adaptive": adaptive_rate, "classic": classic_rate}


def batch_rates(labels, min_dist, n_clusters, rate, running_counts, batch_weight=None):
    """What a batch's assignment gives every mini-batch step (kernel or not).

    Parameters
    ----------
    labels : ndarray of shape (b,)
        Nearest center of each batch point.
    min_dist : ndarray of shape (b,)
        Its squared distance to that center (>= 0).
    n_clusters : int
    rate : callable
        A learning rate of :data:`LEARNING_RATES`.
    running_counts : ndarray of shape (k,)
        N_j, updated in place: the batch counts are added before ``rate`` is called.
    batch_weight : ndarray of shape (b,) or None
        Weights of the batch points in the update (None: unit weights).

    Returns
    -------
    objective : float
        f_B(C_i), the (weighted) mean of ``min_dist``.
    counts : ndarray of shape (k,)
        b_j, the (weighted) number of batch points of each cluster.
    total : float
        b, their sum.
    alpha : ndarray of shape (k,)
        The learning rates, 0 where b_j = 0 (the center is kept).
    """
    if batch_weight is None:
        objective = float(min_dist.sum(dtype=np.float64) / min_dist.size)  # the mean
        counts = np.bincount(labels, minlength=n_clusters).astype(np.float64)
        total = float(labels.size)
    else:
        w = np.asarray(batch_weight, dtype=np.float64)
        total = float(w.sum())
        objective = float(min_dist @ w / total)
        counts = np.bincount(labels, weights=w, minlength=n_clusters)
    running_counts += counts
    # the rate's b as the sum of the b_j: a cluster that takes the whole batch gets
    # alpha = 1 exactly (w.sum() adds in another order and can be an ulp apart)
    alpha = rate(counts, counts.sum(), running_counts)
    return objective, counts, total, np.where(counts > 0, alpha, 0.0)
