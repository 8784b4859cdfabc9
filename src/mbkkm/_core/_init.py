"""Drawing the initial sample, the batches and kernel k-means++: every random draw
of a fit.

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

Initialisation in feature space (kernel k-means++ and random points) picks
single data points as the initial centers, so each is a window of one support
point with coefficient 1.
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
    cdf = np.cumsum(np.asarray(sample_weight, dtype=np.float64))
    cdf /= cdf[-1]
    idx = np.searchsorted(cdf, random_state.uniform(size=size), side="right")
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


# ------------------------------------------------------------------ initial centers


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
