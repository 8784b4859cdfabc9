"""What every kernel estimator shares once fitted: labelling, distances and scores.

A fitted kernel estimator holds its centers as windows of support points
(``self._state``, a :class:`mbkkm._core.WindowState`): the mini-batch estimator's
own windows, or for full-batch kernel k-means one block per cluster made of its
points with coefficients w_y / W_j. ``predict``, ``transform``, ``score`` and
``fit_transform`` are written here once, on one labelling pass
(:func:`mbkkm._core.assign`), with the same keywords in every estimator.

A subclass provides ``_validate_X(X, reset)``, ``fit`` and sets ``kernel_`` (a
:class:`~mbkkm.kernels.Kernel` for kernels on points, an index kernel whose items
are point indices for "precomputed" and the graph kernels).
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
)
from sklearn.utils.validation import check_is_fitted, validate_data

from .._core._memory import label_chunk_rows, out_of_memory_error
from .._core._parallel import assign_parallel
from .._validation import (
    check_sample_weight,
    check_str_options,
    match_columns,
    short_input_errors,
)
from ..backends import get_backend, resolve_device
from ..backends._threads import with_thread_policy
from . import _device
from ._kinds import kernel_kind
from ._rows import host_sample_weight, rows_of, validate_X


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


class BaseKernelKMeans(
    ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin, BaseEstimator
):
    """Base class of the kernel estimators (see the module docstring)."""

    # ------------------------------------------------------------------ checks
    def _validate_params(self):
        check_str_options(self)  # an unknown name: the sorted options, the nearest first
        super()._validate_params()

    def _validate_X(self, X, reset):
        """X checked on the backend the estimator runs on (:mod:`._device`).

        A sparse or low-rank kernel matrix (``kernel="precomputed"``) is taken as it
        is, on the host; numpy arrays and CSR go through ``validate_data`` (a sparse
        X becomes canonical CSR once); tensors are checked with torch operations; all
        are moved to ``device``.
        """
        if not reset:
            X = match_columns(self, X)  # the fitted columns in any order, by name
        stored = self._kernel_kind.stored_matrix(self, X) if reset else None
        if stored is not None:
            X = stored
            self.n_features_in_ = X.shape[1]
            # a host matrix: results go out as numpy, whatever an earlier fit saw
            self._device, self._tensor_io = resolve_device(self.device), False
            return X
        return validate_X(
            self,
            X,
            reset,
            lambda X: short_input_errors(
                lambda X: validate_data(
                    self,
                    X,
                    reset=reset,
                    dtype=[np.float64, np.float32],
                    order="C",
                    accept_sparse="csr",
                    ensure_min_samples=1,
                ),
                X,
                type(self).__name__,
            ),
        )

    # ------------------------------------------------------------------ kinds
    @property
    def _kernel_kind(self):
        """What depends on the kind of ``kernel``: on points, precomputed or graph
        (:mod:`._kinds`)."""
        return kernel_kind(self.kernel)

    @property
    def _index_kernel(self):
        """Whether the kernel is a stored matrix whose items are point indices."""
        return self._kernel_kind.is_index

    def _chunk_rows(self, X, state=None):
        """Rows per labelling chunk within ``working_memory``."""
        state = self._state if state is None else state
        m = state.support.shape[0]
        itemsize = np.dtype(_device.host_dtype(X)).itemsize if hasattr(X, "dtype") else 8
        return label_chunk_rows(self.working_memory, m, self.n_clusters, itemsize)

    # -------------------------------------------------------------- labelling
    @with_thread_policy
    def _labels_inertia(self, X, sample_weight=None):
        """Labels and (weighted) inertia of validated items X (fitted rows or indices)."""
        return rows_of(X).labels_inertia(self, sample_weight)

    def _labels_inertia_of(self, X, sample_weight=None):
        labels, mind = assign_parallel(X, self._state, self.kernel_, chunk_rows=self._chunk_rows(X))
        labels, mind = _device.to_output(self, labels), get_backend(mind).to_numpy(mind)
        inertia = float(
            mind.sum(dtype=np.float64) if sample_weight is None else mind @ sample_weight
        )
        return labels, inertia

    @with_thread_policy
    def _assign_new(self, X, method, return_distances=False, kernel_diag=None):
        """Labels, minimum distances (and distances) of new data after the usual checks."""
        check_is_fitted(self)
        kind = self._kernel_kind
        kind.check_inductive(self, method)
        X = self._validate_X(X, reset=False)
        return kind.assign_new(self, X, method, return_distances, kernel_diag)

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
        return rows_of(X).predict(self)

    def _predict(self, X):
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
        return rows_of(X).transform(self, kernel_diag=kernel_diag)

    def _transform(self, X, kernel_diag=None):
        _, _, distances = self._assign_new(
            X, "transform", return_distances=True, kernel_diag=kernel_diag
        )
        return distances

    def fit_transform(self, X, y=None, sample_weight=None):
        """Fit, then the distances of the fitted points to the centers, (n, n_clusters).

        Works for every kernel, graph and precomputed kernels included.
        """
        self.fit(X, sample_weight=sample_weight)
        return self._kernel_kind.fitted_distances(self, X)

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
        return rows_of(X).score(self, sample_weight, kernel_diag=kernel_diag)

    def _score(self, X, sample_weight=None, kernel_diag=None):
        _, mind, *_ = self._assign_new(
            X,
            "score",
            kernel_diag=kernel_diag,
            return_distances=self._kernel_kind.needs_kernel_diag,
        )
        mind = get_backend(mind).to_numpy(mind)
        sample_weight = check_sample_weight(host_sample_weight(self, sample_weight), mind[:, None])
        return -float(mind.sum(dtype=np.float64) if sample_weight is None else mind @ sample_weight)

    # ------------------------------------------------------- fitted attributes
    def _set_problem(self, problem):
        """The resolved kernel of a fit problem (:mod:`._problem`) as fitted attributes."""
        self.kernel_ = problem.kernel
        self.gamma_ = problem.gamma
        self.gamma_selection_ = problem.gamma_selection
        self.t_, self.t_selection_ = problem.t, problem.t_selection

    def _publish(self, state):
        """The fitted centers as public attributes, support grouped by cluster.

        The state itself is put in cluster order (a valid layout: blocks stay
        contiguous and oldest first within each cluster), so ``support_vectors_`` is
        the state's own support, not a second copy of it.
        """
        state.workspace.clear()  # the iteration's reused buffers: not kept by the model
        state.group_by_cluster()
        self._state = state
        self.support_vectors_ = _device.to_output(self, state.support)
        self.dual_coef_ = state.coef
        self.support_labels_ = state.labels
        self.n_support_ = np.bincount(state.labels, minlength=self.n_clusters)
        self._n_features_out = self.n_clusters

    @property
    def center_norms_(self):
        """Squared feature-space norms <C_j, C_j> of the centers, shape (n_clusters,)."""
        check_is_fitted(self, "_state")
        return self._state.host_norms()

    def _accepts_sparse(self):
        """Whether fit takes scipy sparse X: the kernels defined on it, callables
        (which receive CSR rows), and "precomputed" (a sparse kernel matrix)."""
        return self._kernel_kind.accepts_sparse(self)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = self._accepts_sparse()
        tags.input_tags.pairwise = self.kernel == "precomputed"
        return tags
