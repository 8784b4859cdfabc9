"""Drawing the initial sample, the batches and kernel k-means++: every random draw
of a fit.

Batches are drawn uniformly with replacement (with ``sample_weight``: with
probability proportional to the weight, and unit weights in the update, as
scikit-learn >= 1.6 does). The plan is independent of the model: the same draws
whether it is drawn at once (a device copies it whole; the Dask path gathers the
rows of many iterations in one pass) or block by block as the iterations reach it
(:class:`BatchPlan`, which a host fit holds a few blocks of).

The subsamples drawn without replacement (the initialisation's, the width
selection's) are ``RandomState.choice``'s below :data:`EXACT_CHOICE_MAX_ROWS`
rows. ``choice`` takes the first rows of a permutation of all n rows, O(n)
draws and memory (seconds and 8 GB at n = 10^9); from that n up they are drawn
in O(size) by numpy's ``Generator.choice``, seeded from the random state
(:func:`choice_without_replacement`), so that a fit's cost does not grow with n.

Initialisation in feature space (kernel k-means++ and random points) picks
single data points as the initial centers, so each is a window of one support
point with coefficient 1.
"""

from __future__ import annotations

import numpy as np

#: Below this many rows, a subsample is ``RandomState.choice``'s (its permutation of
#: all n rows costs at most tens of milliseconds there); from it up, O(size) draws.
EXACT_CHOICE_MAX_ROWS = 2**22


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
    return np.asarray(BatchPlan(random_state, n_samples, batch_size, n_batches, sample_weight))


#: Iterations of a :class:`BatchPlan` drawn at a time.
PLAN_BLOCK = 256


class BatchPlan:
    """The indices of every batch, shape (n_batches, batch_size), drawn from
    ``random_state`` block by block (:data:`PLAN_BLOCK` iterations) as the fit reaches
    them: the rows of one draw of the whole plan, in memory a few blocks at a time.

    ``random_state.randint`` (or ``uniform``, with weights) takes its values from the
    generator's stream in order, so rows drawn in blocks are those of one draw, and
    the generator ends in the same state once all are drawn. A fit whose ``tol``
    stops it early never draws the rest; one of 10^6 iterations holds a few blocks,
    not 8 GB. ``plan[i]`` is row i (an array), ``plan[a:b]`` rows a to b; rows are
    asked for forwards: those below the lowest index asked for since the last block
    was drawn are let go, and asking for one of them again raises. ``np.asarray(plan)``
    is the whole plan (a device copies it at the start).
    """

    def __init__(self, random_state, n_samples, batch_size, n_batches, sample_weight=None):
        self.shape = (int(n_batches), int(batch_size))
        self._rng, self._n = random_state, int(n_samples)
        self._cdf = None
        if sample_weight is not None:
            self._cdf = np.cumsum(np.asarray(sample_weight, dtype=np.float64))
            self._cdf /= self._cdf[-1]
        self._rows = np.empty((0, self.shape[1]), dtype=np.intp)  # rows start, start + 1, ...
        self._start = 0
        self._low = 0  # the lowest row asked for since the last block was drawn

    def __len__(self):
        return self.shape[0]

    def _reach(self, lo, hi):
        """Rows [lo, hi) held (hi <= n_batches)."""
        if lo < self._start:
            raise IndexError(
                f"batch plan row {lo} was let go (rows are drawn forwards; held from "
                f"row {self._start})"
            )
        self._low = min(self._low, lo)
        drawn = self._start + self._rows.shape[0]
        if hi <= drawn:
            return
        keep = max(self._low, self._start) - self._start  # rows below the low mark go
        count = min(-(-(hi - drawn) // PLAN_BLOCK) * PLAN_BLOCK, self.shape[0] - drawn)
        size = (count, self.shape[1])
        if self._cdf is None:  # uniform draws
            rows = self._rng.randint(0, self._n, size=size)
        else:  # with probability proportional to the weights
            rows = np.searchsorted(self._cdf, self._rng.uniform(size=size), side="right")
            np.minimum(rows, self._n - 1, out=rows)
        self._rows = np.concatenate([self._rows[keep:], rows.astype(np.intp, copy=False)])
        self._start += keep
        self._low = lo

    def __getitem__(self, key):
        if isinstance(key, slice):
            lo, hi, step = key.indices(self.shape[0])
            if step != 1:
                raise IndexError("a batch plan is read in steps of 1")
            self._reach(lo, max(lo, hi))
            return self._rows[lo - self._start : hi - self._start]
        i = int(key)
        if not 0 <= i < self.shape[0]:
            raise IndexError(f"batch plan row {i} out of range (0..{self.shape[0] - 1})")
        self._reach(i, i + 1)
        return self._rows[i - self._start]

    def __array__(self, dtype=None, copy=None):
        rows = self[0 : self.shape[0]]
        return rows if dtype is None else rows.astype(dtype, copy=False)


def choice_without_replacement(random_state, n, size):
    """``size`` distinct indices of ``range(n)``, uniformly at random.

    Below :data:`EXACT_CHOICE_MAX_ROWS` rows (or for ``size > n``, which ``choice``
    refuses, or a random state that is not a ``RandomState``):
    ``random_state.choice(n, size, replace=False)``, the same rows in the same
    order. From that n up, one seed drawn from ``random_state`` starts numpy's
    ``Generator.choice``, which draws ``size`` rows by Floyd's algorithm in
    O(size) time and memory when ``size`` is small against n, where ``choice``
    permutes all n rows.
    """
    exact = n < EXACT_CHOICE_MAX_ROWS or size > n
    if exact or not isinstance(random_state, np.random.RandomState):
        return random_state.choice(n, size=size, replace=False)
    seed = random_state.randint(np.iinfo(np.int64).max, dtype=np.int64)
    return np.random.default_rng(seed).choice(n, size=size, replace=False)


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
    if pos.size >= n_clusters:  # (all of them when init_size >= pos.size)
        return pos[draw_init_subsample(random_state, pos.size, init_size, n_clusters)]
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
        return np.maximum(D, 0.0, out=D)

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
        cand = np.minimum(np.searchsorted(np.cumsum(w * closest), r), n - 1)
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
