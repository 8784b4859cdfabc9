"""Batch sampling: the plan of every batch, drawn up front from one random state.

Batches are drawn uniformly with replacement (with ``sample_weight``: with
probability proportional to the weight, and unit weights in the update, as
scikit-learn >= 1.6 does). The plan is independent of the model, so it can be
drawn once for all iterations: the Dask path gathers all its rows in one pass.

The subsamples drawn without replacement (the initialisation's, the width
selection's) take the first rows of a permutation of all n rows, as
``RandomState.choice`` does: O(n) draws, seconds at n = 10^8. A fit with an
integer seed draws that same permutation twice (the width selection and the
initialisation each start from a new ``RandomState(seed)``), so the last large
permutation's first rows are remembered with the random state before and after
it (:func:`choice_without_replacement`).
"""

from __future__ import annotations

import threading

import numpy as np

#: Permutations of at least this many rows are remembered (smaller ones are cheap).
MEMO_MIN_ROWS = 2**20
#: The first rows of a remembered permutation (the largest subsample served from it).
MEMO_PREFIX = 2**16

_memo = None  # (n, state before, first MEMO_PREFIX rows, state after) of the last one
_memo_lock = threading.Lock()


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


def _state_key(random_state):
    """A hashable copy of a ``RandomState``'s MT19937 state (None for other generators)."""
    state = random_state.get_state(legacy=False)
    if state["bit_generator"] != "MT19937":
        return None
    inner = state["state"]
    return (inner["key"].tobytes(), inner["pos"], state["has_gauss"], state["gauss"])


def choice_without_replacement(random_state, n, size):
    """``random_state.choice(n, size, replace=False)``: the same rows in the same order,
    and ``random_state`` left in the same state.

    ``choice`` takes the first ``size`` entries of ``permutation(n)``. For
    n >= :data:`MEMO_MIN_ROWS` the permutation's first :data:`MEMO_PREFIX` entries
    are kept with the states before and after it, so that a second draw from the
    same state and n (the same seed) is served without drawing n numbers again.
    """
    small = n < MEMO_MIN_ROWS or size > n  # (choice refuses size > n)
    if small or not isinstance(random_state, np.random.RandomState):
        return random_state.choice(n, size=size, replace=False)
    global _memo
    before = _state_key(random_state)
    memo = _memo
    if before is not None and memo is not None and memo[:2] == (n, before):
        if size <= memo[2].shape[0]:
            random_state.set_state(memo[3])
            return memo[2][:size].copy()
    perm = _permutation(random_state, n)
    if before is not None:
        with _memo_lock:
            _memo = (n, before, perm[:MEMO_PREFIX].copy(), random_state.get_state(legacy=False))
    return perm[:size]


def _permutation(random_state, n):
    """``random_state.permutation(n)``: the O(n) draws ``choice`` makes."""
    return random_state.permutation(n)


def draw_init_subsample(random_state, n_samples, init_size, n_clusters, sample_weight=None):
    """Indices of the initialisation subsample (without replacement), sorted; with
    weights, of positive weight.

    k-means++ and "random" draw centers with probability proportional to the weights,
    so a subsample made only of zero-weight points has no valid draw (0 / 0). With
    weights the subsample is drawn among the positive-weight points; when they are
    fewer than ``n_clusters``, it is all of them plus zero-weight points up to
    ``init_size``. Without zero weights the draws are those of no weights: the first
    ``init_size`` rows of a permutation (:func:`choice_without_replacement`), or all
    rows when ``init_size >= n_samples``.
    """
    if sample_weight is None or np.all(sample_weight > 0):
        if init_size >= n_samples:
            return np.arange(n_samples)
        return np.sort(choice_without_replacement(random_state, n_samples, init_size))
    pos = np.flatnonzero(sample_weight > 0)
    if pos.size >= n_clusters:
        size = min(init_size, pos.size)
        return pos[draw_init_subsample(random_state, pos.size, size, n_clusters)]
    zero = np.flatnonzero(sample_weight <= 0)
    size = max(0, init_size - pos.size)
    fill = zero[draw_init_subsample(random_state, zero.size, size, n_clusters)]
    return np.sort(np.concatenate([pos, fill]))
