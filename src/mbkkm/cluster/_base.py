"""What the estimators share: every fit's scope and warnings, the mini-batch
estimators' sizes, initialisations and iteration loop, and what every kernel
estimator does once fitted: labelling, distances and scores.

A fitted kernel estimator holds its centers as windows of support points
(``self._state``, a :class:`mbkkm._core.WindowState`): the mini-batch estimator's
own windows, or for full-batch kernel k-means one block per cluster made of its
points with coefficients w_y / W_j. ``predict``, ``transform``, ``score`` and
``fit_transform`` are written here once, on one labelling pass
(:func:`mbkkm._core.assign`), with the same keywords in every estimator.

A subclass provides ``fit``, which resolves its problem with ``_resolve``: the
input's facts and ``kernel_`` (a :class:`~mbkkm.kernels.Kernel` for kernels on
points, an index kernel whose items are point indices for "precomputed" and the
graph kernels).
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import partial

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
)
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted, validate_data

from .._core._memory import label_chunk_rows, out_of_memory_error
from .._core._windows import assign_parallel
from .._progress import progress_for
from .._validation import (
    check_sample_weight,
    check_str_options,
    match_columns,
    short_input_errors,
)
from .._warn import warn
from ..backends import get_backend
from ..backends._threads import thread_policy
from . import _device
from ._kinds import kernel_kind, resolve_problem
from ._rows import X_MIXED, host_sample_weight, rows_of, same_library


class EmptyClusterWarning(ConvergenceWarning):
    """Some clusters hold no point of the fitted data at the end of fit.

    A subclass of :class:`sklearn.exceptions.ConvergenceWarning`, so
    ``warnings.simplefilter("ignore", ConvergenceWarning)`` silences it too.
    Typical causes: ``n_clusters`` larger than the number of distinct points,
    or duplicate points.
    """


class IndefiniteKernelWarning(UserWarning):
    """The kernel of a :class:`~mbkkm.KernelKMeans` fit is not positive semi-definite.

    Raised once per fit when some squared feature-space distances
    ||phi(x) - C_j||^2 = K(x, x) - 2 <phi(x), C_j> + ||C_j||^2 come out clearly
    negative (below -1e-3 times K(x, x) + ||C_j||^2, far beyond rounding): the
    kernel is indefinite (the k-NN graph kernel, the sigmoid kernel, many
    precomputed similarities). What it means: a cluster's mean no longer minimises
    its points' squared distances, so Lloyd's iterations are not monotone and the
    objective can rise. What the library does: the E-step still assigns each point
    to its smallest (possibly negative) distance, a rise of the objective never
    stops the run, and the run ends where the labels stop changing (or at
    ``max_iter``); ``inertia_`` and ``transform`` clip distances at 0. Silence it
    with ``warnings.simplefilter("ignore", IndefiniteKernelWarning)``.
    """


def warn_indefinite_kernel(n_negative, estimator):
    """Warn (IndefiniteKernelWarning) when a fit met negative squared distances."""
    if n_negative > 0:
        warn(
            f"{type(estimator).__name__}: the kernel is not positive semi-definite: "
            f"{n_negative} squared feature-space distances of one iteration were "
            f"negative. Lloyd's iterations are not monotone on such a kernel (the "
            f"objective can rise); a rise does not stop the run, which ends where the "
            f"labels stop changing or at max_iter (n_iter_={estimator.n_iter_}).",
            IndefiniteKernelWarning,
        )


def n_init_for(init, n_init, estimator):
    """``n_init``, or 1 for an explicit ``init`` (with scikit-learn's warning: the same
    centers would start every run)."""
    if isinstance(init, str) or n_init == 1:
        return n_init
    warn(
        f"Explicit initial center position passed: performing only one init in "
        f"{type(estimator).__name__} instead of n_init={n_init}.",
        RuntimeWarning,
    )
    return 1


def warn_empty_clusters(labels, n_clusters, estimator):
    """Warn (EmptyClusterWarning) when some of the n_clusters labels never occur."""
    if not isinstance(labels, np.ndarray) or labels.size == 0:
        return  # a Dask array: counting would compute it
    n_empty = n_clusters - np.unique(labels).size
    if n_empty > 0:
        warn(
            f"{type(estimator).__name__}: {n_empty} of the n_clusters={n_clusters} "
            f"clusters hold no point of the fitted data at the end of fit (empty "
            f"clusters); n_clusters may exceed the number of distinct points (duplicate "
            f"points in X?)",
            EmptyClusterWarning,
        )


@contextmanager
def all_or_nothing(estimator):
    """The scope of a fitting method: one phase of the thread policy
    (:func:`mbkkm.backends._threads.thread_policy`), and all-or-nothing attributes: on
    any exception (KeyboardInterrupt included) the estimator's attributes are restored
    to what they were before.

    The estimators never modify a fitted attribute in place (partial_fit works on
    copies), so a shallow copy of ``__dict__`` is a complete snapshot.
    """
    snapshot = dict(estimator.__dict__)
    try:
        with thread_policy():
            yield
    except BaseException:
        estimator.__dict__.clear()
        estimator.__dict__.update(snapshot)
        raise


def check_sizes_and_init(estimator, rows, kernel):
    """``n_clusters`` and ``init_size`` against the input; ``(n_samples, init)``, the
    init array checked (``rows``: the input's adapter, which checks it; ``kernel``: the
    kernel's name in its messages)."""
    n, k, init_size = int(rows.data.shape[0]), estimator.n_clusters, estimator.init_size
    if n < k:
        raise ValueError(f"n_samples={n} should be >= n_clusters={k}: fewer samples than clusters")
    if init_size is not None and init_size < k:
        raise ValueError(f"init_size={init_size} should be >= n_clusters={k}")
    init = estimator.init
    return n, init if isinstance(init, str) else rows.check_init(init, k, kernel)


def validated(estimator, X, reset=False, accept_sparse="csr"):
    """X checked by scikit-learn's ``validate_data`` as the estimators check it (float64
    or float32, C order, at least one row; CSR, or no sparse X), its errors short."""
    return short_input_errors(
        partial(validate_data, estimator),
        X,
        type(estimator).__name__,
        reset=reset,
        accept_sparse=accept_sparse,
    )


@contextmanager
def memory_guard(plan):
    """Re-raise an out-of-memory error met mid-fit with the memory plan's numbers.

    numpy's MemoryError and torch's OutOfMemoryError become a
    :class:`~mbkkm.MemoryPlanError` naming the planned peak (the fit methods are
    all-or-nothing, so the estimator is left as it was).
    """
    try:
        yield
    except Exception as exc:
        err = None if plan is None else out_of_memory_error(exc, plan)
        if err is None:
            raise
        raise err from exc


class ClusterEstimator(
    ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin, BaseEstimator
):
    """Base class of every estimator: scikit-learn's mixins, and an unknown option name
    refused with the nearest known one."""

    def _validate_params(self):
        check_str_options(self)  # an unknown name: the sorted options, the nearest first
        super()._validate_params()


class BaseKernelKMeans(ClusterEstimator):
    """Base class of the kernel estimators (see the module docstring)."""

    # ------------------------------------------------------------------ checks
    def _validate_X(self, X):
        """New X (predict, transform, score, a later partial_fit) checked as the fit's X
        was, on the fit's backend.

        The fitted columns are taken in any order, by name. X must come from the array
        library of the fit's X (unknown for a model saved before 0.2). The adapter of
        X's kind does the kind's own checks: ``validate_data`` for numpy and
        scipy.sparse (which comes out as canonical CSR and runs with numpy only), torch
        operations for a tensor, where it lives.
        """
        X = match_columns(self, X)  # the fitted columns in any order, by name
        tensor_io = getattr(self, "_tensor_io", None)  # None: a model saved before 0.2
        rows = rows_of(X) if tensor_io is None else same_library(X, tensor_io, X_MIXED)
        return rows.validated(
            getattr(self, "_device", None),
            self.device,
            lambda X: validated(self, X),
            self.n_features_in_,
            type(self).__name__,
        )

    def _chunk_rows(self, X, state=None):
        """Rows per labelling chunk within ``working_memory``."""
        state = self._state if state is None else state
        m = state.support.shape[0]
        return label_chunk_rows(self.working_memory, m, self.n_clusters, _device.itemsize(X))

    # -------------------------------------------------------------- labelling
    @contextmanager
    def _labelling(self, X):
        """The progress of a labelling pass over X with ``verbose`` (lines on stdout),
        else None; its last line counts every row, also where the pass did not."""
        progress = progress_for(getattr(self, "verbose", 0), X.shape[0], "labelling")
        if progress is None:
            yield None
            return
        with progress:
            yield progress
            progress.update(progress.total - progress.done)

    def _labels_inertia(self, X, sample_weight=None, labelled=None):
        """Labels and (weighted) inertia of validated items X (fitted rows or indices).

        ``labelled``: the labels and minimum distances of X that the fit already has
        (small n: read from the stored kernel's rows), or None to label X now.
        """
        if labelled is not None:
            labels, mind = labelled
        else:
            lazy = rows_of(X).lazy_labels_inertia(self, sample_weight)  # Dask: one pass
            if lazy is not None:
                return lazy
            with thread_policy(), self._labelling(X) as progress:
                labels, mind = assign_parallel(
                    X, self._state, self.kernel_, chunk_rows=self._chunk_rows(X), progress=progress
                )
            labels = _device.convert_output(self._tensor_io, labels)
            mind = get_backend(mind).to_numpy(mind)
        inertia = mind.sum(dtype=np.float64) if sample_weight is None else mind @ sample_weight
        return labels, float(inertia)

    def _assign_new(self, X, method, return_distances=False, kernel_diag=None):
        """Labels, minimum distances (and distances) of new data after the usual checks,
        in the library of the fit's input."""
        check_is_fitted(self)
        with thread_policy():
            kind = kernel_kind(self.kernel)
            kind.check_inductive(self, method)
            X = self._validate_X(X)
            chunk_rows = self._chunk_rows(X)
            with self._labelling(X) as progress:
                found = kind.assign_new(
                    self,
                    self._state,
                    chunk_rows,
                    X,
                    method,
                    return_distances,
                    kernel_diag,
                    progress,
                )
        tensor_io = getattr(self, "_tensor_io", False)
        return tuple(_device.convert_output(tensor_io, a) for a in found)

    # ------------------------------------------------------------- public API
    def predict(self, X):
        """Index of the nearest center in feature space for each row of X.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            With kernel="precomputed": K(X_new, X_fit), shape (n_samples, n_fit).

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            A Dask array (computed per chunk) when X is one; a tensor for a model
            fitted on tensors.
        """
        lazy = rows_of(X).lazy_predict(self)  # Dask: a Dask array, per chunk
        if lazy is not None:
            return lazy
        labels, _ = self._assign_new(X, "predict")
        return labels

    def transform(self, X, kernel_diag=None):
        """Squared feature-space distances ||phi(x) - C_j||^2 to every center.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            With kernel="precomputed": K(X_new, X_fit), shape (n_samples, n_fit).
        kernel_diag : array-like of shape (n_samples,), default=None
            Only with kernel="precomputed", where it is required: K(x, x) of the new
            points.

        Returns
        -------
        distances : ndarray of shape (n_samples, n_clusters)
            Non-negative (rounding below 0 is clipped). A Dask array when X is one.
        """
        lazy = rows_of(X).lazy_transform(self, kernel_diag)  # Dask: per chunk
        if lazy is not None:
            return lazy
        _, _, distances = self._assign_new(
            X, "transform", return_distances=True, kernel_diag=kernel_diag
        )
        return distances

    def fit_transform(self, X, y=None, sample_weight=None):
        """Fit, then the distances of the fitted points to the centers, (n, n_clusters).

        Works for every kernel, graph and precomputed kernels included.
        """
        self.fit(X, sample_weight=sample_weight)
        return kernel_kind(self.kernel).fitted_distances(self, self._state, X)

    def score(self, X, y=None, sample_weight=None, kernel_diag=None):
        """Opposite of the (weighted) inertia of X on the fitted centers.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : Ignored
        sample_weight : array-like of shape (n_samples,), default=None
        kernel_diag : array-like of shape (n_samples,), default=None
            K(x, x) of the new points; required with kernel="precomputed".

        Returns
        -------
        score : float
        """
        if kernel_diag is None:
            lazy = rows_of(X).lazy_score(self, sample_weight)  # Dask: one pass
            if lazy is not None:
                return lazy
        _, mind, *_ = self._assign_new(
            X,
            "score",
            kernel_diag=kernel_diag,
            return_distances=kernel_kind(self.kernel).needs_kernel_diag,
        )
        mind = get_backend(mind).to_numpy(mind)
        sample_weight = check_sample_weight(
            host_sample_weight(sample_weight, getattr(self, "_tensor_io", False)), mind[:, None]
        )
        return -float(mind.sum(dtype=np.float64) if sample_weight is None else mind @ sample_weight)

    # ------------------------------------------------------- fitted attributes
    def _resolve(self, data, gamma_selection=None):
        """The fit's problem (:func:`._kinds.resolve_problem`), and what the fit keeps of
        it: the input's columns, where it ran, whether results go back as tensors, and
        the resolved kernel."""
        problem = resolve_problem(self, data, gamma_selection=gamma_selection)
        self.n_features_in_ = problem.n_features_in
        if problem.feature_names_in is not None:
            self.feature_names_in_ = problem.feature_names_in
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_  # fitted again on data without column names
        self._device, self._tensor_io = problem.device, problem.tensor_io
        self.kernel_ = problem.kernel
        self.gamma_ = problem.gamma
        self.gamma_selection_ = problem.gamma_selection
        self.t_, self.t_selection_ = problem.t, problem.t_selection
        return problem

    def _publish(self, state):
        """The fitted centers as public attributes, support grouped by cluster.

        The state itself is put in cluster order (a valid layout: blocks stay
        contiguous and oldest first within each cluster), so ``support_vectors_`` is
        the state's own support, not a second copy of it.
        """
        state.workspace.clear()  # the iteration's reused buffers: not kept by the model
        state.group_by_cluster()
        self._state = state
        self.support_vectors_ = _device.convert_output(self._tensor_io, state.support)
        self.dual_coef_ = state.coef
        self.support_labels_ = state.labels
        self.n_support_ = np.bincount(state.labels, minlength=self.n_clusters)
        self._n_features_out = self.n_clusters

    @property
    def center_norms_(self):
        """Squared feature-space norms <C_j, C_j> of the centers, shape (n_clusters,)."""
        check_is_fitted(self, "_state")
        return self._state.host_norms()

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # fit takes scipy sparse X with the kernels defined on it, callables (which
        # receive CSR rows) and "precomputed" (a sparse kernel matrix)
        tags.input_tags.sparse = kernel_kind(self.kernel).accepts_sparse(self.kernel)
        tags.input_tags.pairwise = self.kernel == "precomputed"
        return tags


class MiniBatchMixin:
    """Shared steps of :class:`MiniBatchKernelKMeans` and :class:`MiniBatchKMeans`.

    A subclass provides ``_initial_centers(X, sample_weight, rng)`` (one
    initialisation, in the form ``fit`` iterates on) and
    ``_init_inertia(Xv, wv, candidate)`` (its inertia on a validation subsample).
    """

    def _check_sizes_and_init(self, rows, kernel):
        """Batch and init sizes (``_batch_size``, ``_init_size``) and ``init``
        (``_init``) against the input (:func:`check_sizes_and_init`)."""
        n, self._init = check_sizes_and_init(self, rows, kernel)
        self._batch_size = min(self.batch_size, n)
        init_size = self.init_size
        if init_size is None:
            init_size = 3 * self._batch_size
            if init_size < self.n_clusters:
                init_size = 3 * self.n_clusters
        self._init_size = min(init_size, n)

    def _record_step(self, first, objective, X, sample_weight):
        """A ``partial_fit`` step (the first one when ``first``), and with
        ``compute_labels`` the labels and inertia of its rows; returns the estimator."""
        self.n_steps_ = 1 if first else self.n_steps_ + 1
        self.n_iter_ = self.n_steps_
        previous = np.empty(0) if first else self.batch_objective_
        self.batch_objective_ = np.append(previous, objective)
        if self.compute_labels:
            self.labels_, self.inertia_ = self._labels_inertia(X, sample_weight)
        return self

    def _best_init(self, X, sample_weight, rng, start=None):
        """The initialisation with the lowest inertia on a validation subsample.

        As scikit-learn's MiniBatchKMeans: ``n_init`` candidates are scored on
        ``init_size`` points drawn with replacement; an explicit init runs once.
        ``start`` (a width selection's partition) is the first candidate.
        """
        n_init = n_init_for(self._init, self.n_init, self)
        if n_init == 1:
            return start if start is not None else self._initial_centers(X, sample_weight, rng)
        val_idx = rng.randint(0, X.shape[0], self._init_size)
        nx = get_backend(X)
        Xv = nx.take(X, nx.index(val_idx))
        wv = None if sample_weight is None else sample_weight[val_idx]
        best, best_inertia = None, np.inf
        for i in range(n_init):
            centers = start if i == 0 and start is not None else None
            if centers is None:
                centers = self._initial_centers(X, sample_weight, rng)
            inertia = self._init_inertia(Xv, wv, centers)
            if self.verbose:
                print(f"Init inertia on the validation subsample: {inertia:.6g}")
            if inertia < best_inertia:
                best, best_inertia = centers, inertia
        return best

    def _iterate(self, loop):
        """Run the iterations of ``loop`` (a :class:`mbkkm._core._loop.Loop`) up to
        ``max_iter``, or until early stopping meets its rule.

        With ``verbose`` (or inside :func:`mbkkm._progress.reporting`: the command
        line), a progress line after the first iteration, then at most one every
        few seconds (iterations done, elapsed time, time left, batch objective) and
        one at the end, from the loop's ``on_progress`` hook: the loop runs in its
        own blocks, with no read-back of its own for the lines. Sets the number of
        iterations run (``n_iter_``, ``n_steps_``) and the batch objectives
        (``batch_objective_``).
        """
        progress = progress_for(
            self.verbose,
            self.max_iter,
            "fit",
            unit="iterations",
            first=True,
            initial=loop.n_iter,
            follow=True,
        )
        if progress is None:
            loop.run_until(self.max_iter)
        else:
            with progress:

                def report(iteration, max_iter, objective):
                    progress.update(iteration - progress.done, f"batch objective {objective:.6g}")

                loop.on_progress.append(report)
                try:
                    loop.run_until(self.max_iter)
                finally:
                    loop.on_progress.remove(report)
                if loop.converged:
                    it = loop.n_iter - 1
                    gain = loop.objectives[it] - loop.objectives_after[it]
                    progress.write(
                        f"Converged at iteration {it + 1}: improvement {gain:.3g} < tol={self.tol}"
                    )
                if loop.objectives:
                    described = loop.describe()
                    progress.close(
                        f"batch objective {loop.objectives[-1]:.6g}"
                        + (f", {described}" if described else "")
                    )
        self.n_iter_ = loop.n_iter
        self.n_steps_ = loop.n_iter
        self.batch_objective_ = np.asarray(loop.objectives, dtype=np.float64)
