"""Batch sampling: the plan of every batch, drawn up front from one random state.

Batches are drawn uniformly with replacement (with ``sample_weight``: with
probability proportional to the weight, and unit weights in the update, as
scikit-learn >= 1.6 does). The plan is independent of the model, so it can be
drawn once for all iterations: the Dask path gathers all its rows in one pass.
"""

from __future__ import annotations

import numpy as np


def draw_batch_plan(random_state, n_samples, batch_size, n_batches, sample_weight=None):
    """Indices of every batch, shape (n_batches, batch_size), dtype intp.

    Parameters
    ----------
    random_state : numpy.random.RandomState
        Consumed in a fixed way, so the same seed gives the same plan on every backend.
    n_samples, batch_size, n_batches : int
    sample_weight : ndarray of shape (n_samples,) or None
        Non-negative weights with a positive sum; None means uniform.
    """
    size = (n_batches, batch_size)
    if sample_weight is None:
        return random_state.randint(0, n_samples, size=size).astype(np.intp, copy=False)
    w = np.asarray(sample_weight, dtype=np.float64)
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    u = random_state.uniform(size=size)
    idx = np.searchsorted(cdf, u, side="right")
    np.minimum(idx, n_samples - 1, out=idx)
    return idx.astype(np.intp, copy=False)


def draw_init_indices(random_state, n_samples, init_size):
    """Indices of the subsample used by the initialisation (without replacement)."""
    if init_size >= n_samples:
        return np.arange(n_samples)
    return np.sort(random_state.choice(n_samples, size=init_size, replace=False))


def draw_init_subsample(random_state, n_samples, init_size, n_clusters, sample_weight=None):
    """Indices of the initialisation subsample, sorted; with weights, of positive weight.

    k-means++ and "random" draw centers with probability proportional to the weights,
    so a subsample made only of zero-weight points has no valid draw (0 / 0). With
    weights the subsample is drawn among the positive-weight points; when they are
    fewer than ``n_clusters``, it is all of them plus zero-weight points up to
    ``init_size``. Without zero weights the draws are exactly those of
    :func:`mbkkm._core.draw_init_indices`.
    """
    if sample_weight is None or np.all(sample_weight > 0):
        return draw_init_indices(random_state, n_samples, init_size)
    pos = np.flatnonzero(sample_weight > 0)
    if pos.size >= n_clusters:
        return pos[draw_init_indices(random_state, pos.size, min(init_size, pos.size))]
    zero = np.flatnonzero(sample_weight <= 0)
    fill = zero[draw_init_indices(random_state, zero.size, max(0, init_size - pos.size))]
    return np.sort(np.concatenate([pos, fill]))
