"""MiniBatchKMeans: mini-batch k-means in input space, with explicit centers.

The non-kernel baseline of the paper, with the same learning rates, batch
sampling, initialisation and stopping rule as
:class:`~mbkkm.cluster.MiniBatchKernelKMeans`: with the linear kernel and no
truncation, both estimators compute the same centers from the same seed.

One iteration on a batch B (b points x with update weights w_x, 1 by default):

    labels: l(x) = argmin_j ||x - C_j||^2,  B_j = {x in B : l(x) = j},
    b_j = sum_{x in B_j} w_x,  alpha_j = rate(b_j, b, N_j)  (0 when b_j = 0),
    C_j <- (1 - alpha_j) C_j + alpha_j cm(B_j),  cm(B_j) = sum_{x in B_j} w_x x / b_j.

With ``learning_rate="classic"`` (alpha_j = b_j / N_j, N_j the running count
including this batch) this is scikit-learn's rule
C_j <- (C_j N_j^old + sum_{x in B_j} w_x x) / (N_j^old + b_j).

References
----------
D. Sculley. "Web-scale k-means clustering." WWW 2010.
G. Schwartzman. "Mini-batch k-means terminates within O(d/epsilon) iterations."
ICLR 2023.
B. Jourdan and G. Schwartzman. "Mini-batch kernel k-means." 2024.
"""

from __future__ import annotations

from contextlib import nullcontext
from numbers import Integral

import numpy as np
import scipy.sparse as sp
from sklearn.base import _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from .._core import (
    LEARNING_RATES,
    BatchPlan,
    _memory,
    batch_rates,
)
from .._core._loop import function_loop
from .._core._memory import chunk_rows
from .._core._state import StepResult  # the same record as the kernel step
from .._progress import progress_for
from .._validation import check_sample_weight, constant_as_scale, match_columns
from ..backends._threads import parallel_parts, thread_policy, threads_for
from ..kernels import resolve_kernel
from ..kernels._kernel import OFFSET_SAMPLE, origin_offset
from ._base import (
    ClusterEstimator,
    MiniBatchMixin,
)
from ._params import COMMON_CONSTRAINTS
from ._rows import check_no_overflow, rows_of

# ----------------------------------------------------------------------------- core


def sq_euclidean(X, centers, center_sq_norms, offset=None):
    """Squared distances ||x - c_j||^2 = ||x||^2 - 2 <x, c_j> + ||c_j||^2, (n, k), >= 0.

    ``offset``: the point subtracted from the rows first, where the centers sit far
    from the origin (:func:`shifted_centers`: ``centers`` and their norms are then
    the shifted ones), so that the cancellation keeps the distances' digits.
    """
    if offset is not None:
        X = X - offset.astype(X.dtype, copy=False)
    D = X @ centers.T  # (n, k)
    D *= -2
    D += np.einsum("ij,ij->i", X, X)[:, None]
    D += center_sq_norms[None, :]
    np.maximum(D, 0, out=D)
    return D


def shifted_centers(centers):
    """(centers, their squared norms, offset) for :func:`sq_euclidean`: the centers
    less their mean where they sit far from the origin
    (:func:`mbkkm.kernels._kernel.origin_offset`: latitudes spread over 0.01 lose
    every digit of their distances in float32), else as they are, offset None."""
    offset = origin_offset(centers)
    if offset is not None:
        centers = centers - offset.astype(centers.dtype, copy=False)
    return centers, np.einsum("ij,ij->i", centers, centers), offset


def minibatch_kmeans_step(centers, counts, Xb, rate, batch_weight=None, objective_after=False):
    """One mini-batch k-means iteration on ``Xb`` (``centers`` and ``counts`` in place).

    Parameters
    ----------
    centers : ndarray of shape (k, d)
        Current centers, updated in place.
    counts : ndarray of shape (k,), float64
        Running (weighted) counts N_j, updated in place by ``rate``.
    Xb : ndarray of shape (b, d)
        The batch.
    rate : callable
        ``rate(batch_counts, batch_total, running_counts) -> alpha``.
    batch_weight : ndarray of shape (b,), optional
        Weights of the batch points in the update (None: unit weights).
    objective_after : bool
        Also compute f_B(C_{i+1}) on the same batch.

    Returns
    -------
    StepResult
    """
    k, b = centers.shape[0], Xb.shape[0]
    D = sq_euclidean(Xb, *shifted_centers(centers))
    labels = np.argmin(D, axis=1)
    mind = D[np.arange(b), labels]
    objective, bcounts, btotal, alpha = batch_rates(labels, mind, k, rate, counts, batch_weight)
    w = np.ones(b) if batch_weight is None else np.asarray(batch_weight, dtype=np.float64)
    # Weighted batch sums per cluster, (k, d): S_j = sum_{x in B_j} w_x x.
    # As a sparse one-hot product (np.add.at is 8x slower).
    onehot = sp.csr_matrix((w, (labels, np.arange(b))), shape=(k, b))
    S = np.asarray(onehot @ Xb, dtype=np.float64)
    moved = np.flatnonzero(alpha > 0)
    # C_j <- (1 - alpha_j) C_j + alpha_j S_j / b_j
    kept = (1.0 - alpha[moved])[:, None] * centers[moved]
    step = (alpha[moved] / bcounts[moved])[:, None] * S[moved]
    centers[moved] = (kept + step).astype(centers.dtype, copy=False)
    after = None
    if objective_after:
        D2 = sq_euclidean(Xb, *shifted_centers(centers))
        after = float(D2.min(axis=1) @ w / btotal)
    return StepResult(labels=labels, objective=objective, objective_after=after, alpha=alpha)


# ------------------------------------------------------------------------- estimator


class MiniBatchKMeans(MiniBatchMixin, ClusterEstimator):
    """Mini-batch k-means in input space (explicit centers), the paper's baseline.

    The same algorithm as :class:`~mbkkm.cluster.MiniBatchKernelKMeans` with the
    linear kernel and no truncation, with centers stored as points: an iteration
    samples ``batch_size`` points uniformly with replacement, assigns them to the
    nearest center, and moves each center towards the mean of its batch points
    with the learning rate, C_j <- (1 - alpha_j) C_j + alpha_j cm(B_j).
    Initialisation, batch sampling and random draws are those of
    MiniBatchKernelKMeans(kernel="linear"), so both give the same result from
    the same seed.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters.
    batch_size : int, default=1024
        Points per mini-batch (sampled with replacement); capped at n_samples.
    learning_rate : {"adaptive", "classic"}, default="adaptive"
        "adaptive": alpha_j = sqrt(b_j / b) (Schwartzman 2023), with b_j the batch
        points assigned to cluster j. "classic": scikit-learn's rate
        alpha_j = b_j / N_j, N_j the running count of points assigned to j.
    max_iter : int, default=200
        Number of mini-batch **iterations** (batches), as in
        MiniBatchKernelKMeans, not epochs: scikit-learn's MiniBatchKMeans counts
        passes over the data instead.
    tol : float, default=None
        Early stopping threshold epsilon: stop when the batch objective improves
        by less than ``tol`` on the same batch, f_B(C_i) - f_B(C_{i+1}) < tol.
        f_B is the (weighted) mean over the batch of the squared Euclidean
        distance to the nearest center, and ``tol`` an absolute change of it, on
        the scale of the data's variance (not the kernel estimator's: the same
        ``tol`` means something else there). None runs ``max_iter`` iterations.
    init : {"k-means++", "random"}, callable or array-like of shape \
(n_clusters, n_features), default="k-means++"
        "k-means++": greedy k-means++ (the kernel k-means++ of the package with the
        linear kernel) on ``init_size`` points; "random": ``n_clusters`` distinct
        random points; an array: the initial centers.
        A callable ``init(X, n_clusters, random_state=RandomState)`` (scikit-learn's
        signature) returns such an array.
    n_init : int or "auto", default=1
        Number of initialisations; the one with the lowest inertia on a random
        validation subsample of ``init_size`` points is kept (in ``fit``; the
        first ``partial_fit`` initialises once, from its chunk, as scikit-learn's).
        "auto" is scikit-learn's: 10 with ``init="random"``, else 1.
    init_size : int, default=None
        Points used by the initialisation; None: 3 * batch_size (at least
        3 * n_clusters), capped at n_samples. Smaller than ``n_clusters``: a
        ValueError (scikit-learn's MiniBatchKMeans warns and uses 3 * n_clusters).
    compute_labels : bool, default=True
        Label all fitted points after the last iteration (``labels_``, ``inertia_``).
    working_memory : float, default=None
        Memory budget in MiB for the temporaries of the labelling pass; None uses
        scikit-learn's ``working_memory`` configuration.
    random_state : int, RandomState instance or None, default=None
        Seed of the initialisation and of the batch sampling.
    verbose : int, default=0
        When > 0, progress lines on stdout: the iterations done with the
        elapsed time, the time left and the batch objective (after the first
        iteration, then at most one line every 5 seconds,
        ``MBKKM_PROGRESS_INTERVAL``, and one at the end), and the labelling
        passes of ``fit``, ``predict`` and ``transform`` the same way (see
        :ref:`progress`). The model does not depend on it.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        The centers.
    labels_ : ndarray of shape (n_samples,)
        Label of each fitted point (when ``compute_labels``).
    inertia_ : float
        Sum of the (weighted) squared distances of the fitted points to their
        nearest center (when ``compute_labels``).
    batch_objective_ : ndarray of shape (``n_iter_``,)
        The batch objective f_B(C_i) before each update.
    n_iter_ : int
        Number of iterations run.
    n_steps_ : int
        Number of iterations since the first fit or partial_fit.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (``n_features_in_``,)
        Names of features seen during fit, when X has string feature names.

    See Also
    --------
    mbkkm.cluster.MiniBatchKernelKMeans : The kernel version.
    sklearn.cluster.MiniBatchKMeans : scikit-learn's version (epochs, center
        reassignment, early stopping on the smoothed objective).

    Notes
    -----
    Unlike scikit-learn's MiniBatchKMeans there is no random reassignment of
    small clusters. A cluster that receives no batch point keeps its center
    (alpha_j = 0). When a cluster holds no point of ``labels_`` at the end of
    ``fit``, an :class:`~mbkkm.cluster.EmptyClusterWarning` (a
    ConvergenceWarning) gives their number. ``fit`` and ``partial_fit`` are
    all-or-nothing: when they raise (KeyboardInterrupt included) the estimator
    is left as it was before the call. With ``sample_weight``, batches are drawn with probability
    proportional to the weights and the update uses unit weights (as
    scikit-learn >= 1.6); ``partial_fit`` uses the weights in the update.
    It runs with numpy only (no ``device``; a CPU tensor is read as an array-like,
    results are numpy): for PyTorch or a GPU use
    ``MiniBatchKernelKMeans(kernel="linear", device=...)``.

    References
    ----------
    D. Sculley. "Web-scale k-means clustering." WWW 2010.
    G. Schwartzman. "Mini-batch k-means terminates within O(d/epsilon) iterations."
    ICLR 2023.

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from mbkkm.cluster._minibatch_kmeans import MiniBatchKMeans
    >>> X, y = make_blobs(n_samples=2000, centers=3, cluster_std=0.6, random_state=0)
    >>> km = MiniBatchKMeans(n_clusters=3, batch_size=256, max_iter=50,
    ...                      random_state=0).fit(X)
    >>> km.cluster_centers_.shape
    (3, 2)
    >>> from sklearn.metrics import adjusted_rand_score
    >>> adjusted_rand_score(y, km.labels_) > 0.9
    True
    """

    _parameter_constraints: dict = {
        **COMMON_CONSTRAINTS,
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [StrOptions(set(LEARNING_RATES))],
        "compute_labels": ["boolean"],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        batch_size=1024,
        learning_rate="adaptive",
        max_iter=200,
        tol=None,
        init="k-means++",
        n_init=1,
        init_size=None,
        compute_labels=True,
        working_memory=None,
        random_state=None,
        verbose=0,
    ):
        self.n_clusters = n_clusters
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.n_init = n_init
        self.init_size = init_size
        self.compute_labels = compute_labels
        self.working_memory = working_memory
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ checks
    def _validate_X(self, X, reset):
        if not reset:
            X = match_columns(self, X)  # the fitted columns in any order, by name
        try:
            X = self._validated(X, reset=reset, accept_sparse=False)
        except TypeError as exc:
            if "Sparse data" not in str(exc):
                raise
            raise TypeError(
                f"{exc} For sparse rows, MiniBatchKernelKMeans(kernel='linear', tau=None) "
                "is this algorithm on CSR rows, never densified (and kernel='cosine' "
                "clusters documents by their angle)."
            ) from None
        # finite data whose squared norms overflow, or (data to learn from) underflow
        check_no_overflow(X, underflow=reset)
        return X

    # ---------------------------------------------------------------- init
    def _initial_centers(self, X, sample_weight, rng, init_idx=None):
        """(k, d) initial centers: rows of X, or the init array (a copy)."""
        if not isinstance(self._init, str):
            return self._init.copy()
        # the package's kernel k-means++ with the linear kernel: the random draws are
        # those of MiniBatchKernelKMeans(kernel="linear"); on rows far from the origin,
        # the linear kernel of the shifted rows (the same Euclidean distances, their
        # digits kept; a k-means++ center is one point, so the shift is exact)
        kernel = resolve_kernel("linear")
        rows = rows_of(X)
        kernel.offset = origin_offset(rows.host_rows(rows.fingerprint_index(OFFSET_SAMPLE)))
        return self._init_points(X, sample_weight, rng, init_idx, kernel)

    def _init_inertia(self, Xv, wv, centers):
        return self._labels_inertia(Xv, wv, centers)[1]

    # ----------------------------------------------------------------- fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, sample_weight=None):
        """Compute the clustering with ``max_iter`` mini-batch iterations.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data (float32 data stays float32); dense (a sparse matrix is
            refused: ``MiniBatchKernelKMeans(kernel="linear", tau=None)`` runs the
            same algorithm on CSR rows).
        y : Ignored
        sample_weight : array-like of shape (n_samples,), default=None
            Batches are drawn with probability proportional to the weights (unit
            weights in the update); ``labels_`` and ``inertia_`` use the weights.
            Integer weights and repeated rows give the same distribution of models;
            constant weights c give exactly the model of None (``inertia_`` times c).

        Returns
        -------
        self : MiniBatchKMeans
        """
        with self._all_or_nothing():  # one thread policy; on an error, the model as it was
            lazy = rows_of(X).lazy_fit_rows(self.working_memory)  # Dask: rows read lazily
            if lazy is None:
                X = self._validate_X(X, reset=True)
            else:  # what validate_data(reset=True) sets
                X = lazy
                self.n_features_in_ = X.shape[1]
                if hasattr(self, "feature_names_in_"):
                    del self.feature_names_in_
            # constant weights: the unweighted model, its inertia scaled
            sample_weight, scale = constant_as_scale(check_sample_weight(sample_weight, X))
            self._check_sizes_and_init(rows_of(X), "linear", self.batch_size)  # init: points
            self.memory_plan_ = _memory.plan_explicit(
                _memory.ExplicitPlanRequest(
                    n=X.shape[0],
                    n_features=X.shape[1],
                    itemsize=X.dtype.itemsize,
                    n_clusters=self.n_clusters,
                    batch_size=self._batch_size,
                    max_iter=self.max_iter,
                    chunk_rows=chunk_rows(
                        self.working_memory, self.n_clusters + 2, X.dtype.itemsize
                    ),
                    init_size=self._init_size,
                    compute_labels=self.compute_labels,
                )
            )
            self.memory_plan_.check(
                _memory.available_host_memory(), what=f"{type(self).__name__}.fit"
            )
            self._random_state = rng = check_random_state(self.random_state)
            centers = self._best_init(X, sample_weight, rng)
            counts = np.zeros(self.n_clusters)
            plan = BatchPlan(rng, X.shape[0], self._batch_size, self.max_iter, sample_weight)
            rows_of(X).prefetch(plan)  # Dask: gather the rows of every batch in few passes
            rate = LEARNING_RATES[self.learning_rate]

            def step(it):
                res = minibatch_kmeans_step(
                    centers, counts, X[plan[it]], rate, objective_after=self.tol is not None
                )
                return res.objective, res.objective_after

            self._iterate(function_loop(step, self.max_iter, self.tol))
            self.cluster_centers_ = centers
            self._counts = counts
            self._n_features_out = self.n_clusters
            if self.compute_labels:
                self.labels_, inertia = self._labels_inertia(X, sample_weight)
                self.inertia_ = inertia * scale
                self._warn_empty_clusters(self.labels_)
            else:
                self._forget_labels()
            return self

    def partial_fit(self, X, y=None, sample_weight=None):
        """One iteration with exactly the rows of X as the batch.

        The first call initialises the centers (from ``init``; k-means++ and
        "random" draw them from this batch), then performs the iteration on the
        same rows, as scikit-learn's ``MiniBatchKMeans.partial_fit`` does.

        With chunks of a few rows use ``learning_rate="classic"``: the adaptive rate
        sqrt(b_j / b) is 1 for a one-row chunk, which moves the center onto that row
        (blobs fed one row at a time: ARI 0.53 with "adaptive", 0.95 with "classic",
        the rate scikit-learn's ``partial_fit`` uses).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : Ignored
        sample_weight : array-like of shape (n_samples,), default=None
            Weights of the rows in the update (all ones: the same as None).

        Returns
        -------
        self : MiniBatchKMeans
        """
        with self._all_or_nothing():  # one thread policy; on an error, the model as it was
            first = not hasattr(self, "cluster_centers_")
            if first:
                self._validate_params()
            X = self._validate_X(X, reset=first)
            sample_weight = check_sample_weight(sample_weight, X)
            if first:
                self._check_sizes_and_init(rows_of(X), "linear", self.batch_size)  # init: points
                self._random_state = check_random_state(self.random_state)
                centers = self._initial_centers(
                    X, sample_weight, self._random_state, init_idx=np.arange(X.shape[0])
                )
                counts = np.zeros(self.n_clusters)
            else:
                centers = self.cluster_centers_.copy()
                counts = self._counts.copy()
            res = minibatch_kmeans_step(
                centers, counts, X, LEARNING_RATES[self.learning_rate], batch_weight=sample_weight
            )
            self.cluster_centers_ = centers
            self._counts = counts
            self._n_features_out = self.n_clusters
            return self._record_step(first, res.objective, X, sample_weight)

    # -------------------------------------------------------------- predict
    def _distances(self, X, centers=None, quiet=False, nearest=False):
        """Squared distances to the centers, (n, k), computed in chunks of rows; with
        ``nearest``, only each row's nearest center and its distance, ``(labels,
        minima)``, taken chunk by chunk (O(n) memory, not O(n k)).

        On the fitted centers (``centers`` None: predict, transform, score, the fit's
        labels), with ``verbose`` and not ``quiet``, progress lines of the pass on stdout.
        """
        progress = None
        if centers is None and not quiet:
            progress = progress_for(self.verbose, X.shape[0], "labelling")
        centers = self.cluster_centers_ if centers is None else centers
        n, k = X.shape[0], centers.shape[0]
        rows = chunk_rows(self.working_memory, k + 2, X.dtype.itemsize)
        dtype = np.result_type(X.dtype, centers.dtype)
        if nearest:
            labels, minima = np.empty(n, dtype=np.intp), np.empty(n, dtype=dtype)
        else:
            out = np.empty((n, k), dtype=dtype)
        shifted = shifted_centers(centers)

        def part(p0, p1):
            for r0 in range(p0, p1, rows):
                r1 = min(r0 + rows, p1)
                D = sq_euclidean(X[r0:r1], *shifted).astype(dtype, copy=False)
                if nearest:
                    labels[r0:r1] = np.argmin(D, axis=1)
                    minima[r0:r1] = D[np.arange(r1 - r0), labels[r0:r1]]
                else:
                    out[r0:r1] = D
                if progress is not None:
                    progress.update(r1 - r0)

        with thread_policy(), progress or nullcontext():
            # row parts on the policy's threads, BLAS on one each
            n_threads = threads_for(n * k * (X.shape[1] + 4))
            rows = max(1, rows // n_threads)  # the memory budget is shared, not multiplied
            parallel_parts(part, n, n_threads)
        return (labels, minima) if nearest else out

    def _labels_inertia(self, X, sample_weight=None, centers=None, quiet=False):
        lazy = rows_of(X).lazy_labels_inertia(self, sample_weight)  # Dask: one pass
        if lazy is not None:
            return lazy
        labels, minima = self._distances(X, centers, quiet, nearest=True)
        mind = minima.astype(np.float64)
        return labels, float(mind.sum() if sample_weight is None else mind @ sample_weight)

    def predict(self, X):
        """Index of the nearest center for each row of X.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        labels : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        lazy = rows_of(X).lazy_predict(self)  # Dask: a Dask array, computed per chunk
        if lazy is not None:
            return lazy
        return self._distances(self._validate_X(X, reset=False), nearest=True)[0]

    def transform(self, X):
        """Squared Euclidean distances ||x - C_j||^2 to every center.

        Squared, to match the kernel estimators' ``transform`` (scikit-learn's
        MiniBatchKMeans returns the distances themselves).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        distances : ndarray of shape (n_samples, n_clusters)
        """
        check_is_fitted(self)
        lazy = rows_of(X).lazy_transform(self)  # Dask: a Dask array, computed per chunk
        if lazy is not None:
            return lazy
        return self._distances(self._validate_X(X, reset=False))

    def score(self, X, y=None, sample_weight=None):
        """Opposite of the (weighted) inertia of X on the fitted centers.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : Ignored
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        score : float
        """
        check_is_fitted(self)
        lazy = rows_of(X).lazy_score(self, sample_weight)  # Dask: summed over the chunks
        if lazy is not None:
            return lazy
        X = self._validate_X(X, reset=False)
        sample_weight = check_sample_weight(sample_weight, X)
        return -self._labels_inertia(X, sample_weight)[1]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags
