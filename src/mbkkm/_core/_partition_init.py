"""Initial centers from a partition: each center is the mean, in feature space,
of the points of one cluster.

Center j of the partition (C_1, ..., C_k) of the support points s:

    C_j = (1 / |C_j|) sum_{s in C_j} phi(s),
    c_j = ||C_j||^2 = (1 / |C_j|^2) sum_{s, t in C_j} K(s, t).

As windows (see :mod:`mbkkm._core._windows`): one block per cluster holding its
points, weights u_s = 1 / |C_j|, block coefficient lambda = 1, and the block
Gram H_j = [[u^T K(C_j, C_j) u]] = [[c_j]]. The first mini-batch iteration
treats the block like any other (it is dropped once the newer blocks of its
cluster hold ``tau`` points).
"""

from __future__ import annotations

import numpy as np

from ..backends import get_backend
from ._state import group_by, labelling_state


def partition_norms(support, labels, n_clusters, kernel):
    """c_j = mean of K(s, t) over s, t in C_j, shape (k,) float64 (0 for an empty C_j).

    One kernel tile per cluster on the backend of ``support``.
    """
    nx = get_backend(support)
    order, ptr = group_by(np.asarray(labels, dtype=np.intp), n_clusters)
    norms = np.zeros(n_clusters)
    for j in range(n_clusters):
        members = order[ptr[j] : ptr[j + 1]]
        if members.size:
            S = nx.take(support, nx.index(members))
            norms[j] = float(nx.to_numpy(kernel.tile(S, S)).mean())
    return norms


def partition_state(support, labels, n_clusters, kernel):
    """A mini-batch state whose centers are the feature-space means of a partition.

    Parameters
    ----------
    support : ndarray or tensor of shape (m, n_features)
        The points of the partition (the state lives on their backend).
    labels : ndarray of shape (m,)
        Cluster of each point; every cluster must be non-empty.
    n_clusters : int
    kernel : Kernel

    Returns
    -------
    state : WindowState
        One block per cluster (weights 1 / |C_j|), its 1 x 1 block Gram c_j.
    """
    labels = np.asarray(labels, dtype=np.intp)
    sizes = np.bincount(labels, minlength=n_clusters)
    if sizes.min() == 0:
        raise ValueError("partition_state: every cluster needs at least one point")
    norms = partition_norms(support, labels, n_clusters, kernel)
    state = labelling_state(support, 1.0 / sizes[labels], labels, n_clusters, norms)
    nx = state.backend
    state.gram = nx.reshape(nx.copy(state.norms), (n_clusters, 1, 1))  # H_j = [[c_j]]
    return state
