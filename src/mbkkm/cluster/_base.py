"""What the estimators share: every fit's scope and warnings, the kinds of a kernel
estimator's kernel, the mini-batch estimators' sizes, initialisations and iteration
loop, and what every kernel estimator does once fitted: labelling, distances and
scores.

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

The kernel has one of three kinds, one class each; :func:`kernel_kind` is the
only place that tells them apart:

- :class:`PointKernel`: a kernel on points (named, or a user's callable); the
  core works on rows, and new points are rows too;
- :class:`PrecomputedKernel`: ``kernel="precomputed"``; X is the kernel matrix,
  the core works on point indices, and new points come as K(X_new, X_fit)
  (their K(x, x) as ``kernel_diag``);
- :class:`GraphKernel`: "knn" and "heat", built on the k-NN graph of the
  training points (transductive: new points only through the kernel's
  extension, where it has one).

A kernel estimator's ``fit`` reads top to bottom: :func:`fit_input` returns in
one call everything the kind of X decides (the validated rows in the adapter of
their kind, where the fit runs, whether results go back as tensors, the host
weights, the feature names); the estimator checks its own parameters against
it; :func:`resolve_problem` chooses the width and resolves the kernel. Neither
calls back into the estimator nor writes to it: the estimator stores what it
keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
)
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import (
    _get_feature_names,
    check_array,
    check_is_fitted,
    check_random_state,
    validate_data,
)

from .._core import assign, kernel_kmeans_plusplus, random_init
from .._core._init import draw_init_subsample
from .._core._lloyd import KernelRun, MatrixOperator
from .._core._memory import label_chunk_rows, label_row_copies, out_of_memory_error
from .._core._windows import assign_parallel
from .._dask import is_dask_array
from .._progress import progress_for
from .._validation import (
    check_param_values,
    check_sample_weight,
    constant_as_scale,
    match_columns,
    numpy_scalar_params,
    short_input_errors,
)
from .._warn import warn
from ..backends import get_backend
from ..backends._numpy import to_dense
from ..backends._threads import (
    effective_n_threads,
    one_thread_everywhere,
    parallel_parts,
    thread_policy,
)
from ..kernels import GRAPH_KERNELS, check_torch_kernel, get_spec
from ..kernels._index import IndexKernel, is_stored_kernel, validate_stored_kernel
from ..kernels._kernel import OFFSET_SAMPLE, origin_offset
from ..kernels._protocol import ResolvedKernel
from . import _device
from ._auto_gamma import resolve_auto_gamma
from ._graph_kernels import graph_assign, resolve_graph_kernel
from ._rows import (
    X_MIXED,
    GraphRows,
    PrecomputedRows,
    Rows,
    check_no_overflow,
    host_sample_weight,
    rows_of,
    same_library,
)


def _on_every_thread(func, n):
    """``func(start, stop)`` over row parts of ``range(n)``, one per thread of the
    threading policy (the large inputs' finite check)."""
    parallel_parts(func, n, effective_n_threads())


class EmptyClusterWarning(ConvergenceWarning):
    """Some clusters hold no point of the fitted data at the end of fit.

    A subclass of :class:`sklearn.exceptions.ConvergenceWarning`, so
    ``warnings.simplefilter("ignore", ConvergenceWarning)`` silences it too.
    Typical causes: ``n_clusters`` larger than the number of distinct points,
    or duplicate points.
    """


#: Rows of the sample on which :meth:`ClusterEstimator._check_kernel_sample` looks at
#: the kernel: a 128 x 128 tile, and its eigenvalues for a kernel not known to be
#: positive semi-definite (about 1 ms).
KERNEL_SAMPLE = 128
#: Named kernels positive semi-definite for every parameter and data they accept.
PSD_KERNELS = ("rbf", "laplacian", "linear", "cosine", "chi2")


class IndefiniteKernelWarning(UserWarning):
    """The kernel of a fit is not positive semi-definite.

    :class:`~mbkkm.MiniBatchKernelKMeans` raises it before the work when the kernel
    matrix of up to 128 evenly spaced rows of X (or points of a precomputed matrix)
    has an eigenvalue below -1e-3 times its largest (a sigmoid kernel, a polynomial
    kernel with coef0 < 0 or a fractional degree, a callable, a similarity matrix):
    the windows' centers are then no means in a feature space, their distances can
    be negative, and the fit is not kernel k-means' (the named kernels rbf,
    laplacian, linear, cosine and chi2 are positive semi-definite and not checked).
    :class:`~mbkkm.KernelKMeans` raises it once per fit when some squared
    feature-space distances
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
        check_param_values(self)  # an unknown name: the options, the nearest first; bools
        super()._validate_params()
        # a named kernel's width given twice: which one is meant cannot be guessed
        gamma, params = getattr(self, "gamma", None), getattr(self, "kernel_params", None)
        if gamma is not None and isinstance(self.kernel, str) and (params or {}).get("gamma"):
            raise ValueError(
                f"gamma={gamma!r} and kernel_params={{'gamma': {params['gamma']!r}}} both give "
                "the kernel's width: give it once (gamma=None with kernel_params, or gamma "
                "without a 'gamma' in kernel_params)"
            )
        # degree and coef0 have defaults: given in kernel_params too, and not the same
        for name, default in {"degree": 3, "coef0": 1}.items():
            value = getattr(self, name, default)
            other = (params or {}).get(name, value)
            if value != default and other != value and isinstance(self.kernel, str):
                raise ValueError(
                    f"{name}={value!r} and kernel_params={{{name!r}: {other!r}}} both give the "
                    f"kernel's {name}: give it once"
                )

    @contextmanager
    def _all_or_nothing(self):
        """The scope of a fitting method: one phase of the thread policy
        (:func:`mbkkm.backends._threads.thread_policy`), and all-or-nothing attributes:
        on any exception (KeyboardInterrupt included) the estimator's attributes are
        restored to what they were before, and so is a ``random_state`` given as a
        ``RandomState`` (the fit draws from it): the same call again draws the same, and
        resumes from its checkpoint.

        The estimators never modify a fitted attribute in place (partial_fit works on
        copies), so a shallow copy of ``__dict__`` is a complete snapshot.

        Parameters given as numpy scalars (``n_clusters=np.int32(10)``, read from an
        array) are Python numbers inside: numpy would do the fit's arithmetic with
        them (a memory plan's products) in their own type, and overflow. The given
        objects are put back at the end, so ``get_params`` returns them.
        """
        snapshot = dict(self.__dict__)
        rng = getattr(self, "random_state", None)
        drawn = rng.get_state() if isinstance(rng, np.random.RandomState) else None
        given = numpy_scalar_params(self)
        self.__dict__.update({name: value.item() for name, value in given.items()})
        try:
            with thread_policy():
                yield
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(snapshot)
            if drawn is not None:
                rng.set_state(drawn)
            raise
        self.__dict__.update(given)

    def _validated(self, X, reset=False, accept_sparse="csr"):
        """X checked by scikit-learn's ``validate_data`` as the estimators check it
        (float64 or float32, C order, at least one row; CSR, or no sparse X), its errors
        short."""
        return short_input_errors(
            partial(validate_data, self),
            X,
            type(self).__name__,
            parallel=_on_every_thread,
            reset=reset,
            accept_sparse=accept_sparse,
        )

    def _n_init(self):
        """``n_init``, or 1 for an explicit ``init`` (with scikit-learn's warning: the
        same centers would start every run)."""
        n_init = self.n_init
        if n_init == "auto":  # scikit-learn's: 10 runs from random centers, else 1
            n_init = 10 if isinstance(self._init, str) and self._init == "random" else 1
        if isinstance(self._init, str) or n_init == 1:
            return n_init
        warn(
            f"Explicit initial center position passed: performing only one init in "
            f"{type(self).__name__} instead of n_init={self.n_init}.",
            RuntimeWarning,
        )
        return 1

    def _warn_empty_clusters(self, labels):
        """Warn (EmptyClusterWarning) when some of the n_clusters labels never occur,
        and (ConvergenceWarning) when, with the adaptive rate, some clusters hold only a
        few of many points: centers stuck at their initial point."""
        if is_dask_array(labels) or labels.shape[0] == 0:
            return  # a Dask array: counting would compute it
        labels = get_backend(labels).to_numpy(labels)  # a tensor's labels: counted here
        k, n = self.n_clusters, labels.size
        sizes = np.bincount(labels, minlength=k)
        n_empty = int(np.count_nonzero(sizes == 0))
        if n_empty > 0:
            remedies = "another random_state or n_init > 1"
            if str(self.init) != "k-means++":  # an array or a callable: not that string
                remedies += " or init='k-means++'"
            warn(
                f"{type(self).__name__}: {n_empty} of the n_clusters={k} "
                f"clusters hold no point of the fitted data at the end of fit (empty "
                f"clusters): an initial center that no point came nearest to (these "
                f"estimators do not move such a center; {remedies} may help), or fewer "
                f"distinct points than clusters",
                EmptyClusterWarning,
            )
        few = max(2, n // (1000 * k))  # points, where a cluster averages n / k >= 100
        starved = sizes[(sizes > 0) & (sizes <= few)]
        if getattr(self, "learning_rate", None) == "adaptive" and n >= 100 * k and starved.size:
            warn(
                f"{type(self).__name__}: {starved.size} of the n_clusters={k} clusters "
                f"hold at most {few} of the {n} fitted points (sizes "
                f"{', '.join(map(str, starved[:8]))}): outliers, which any rate keeps "
                f"apart, or centers still at their initial point: with "
                f"learning_rate='adaptive' (the paper's rate) such a center that wins "
                f"almost no point of a batch keeps that point (where the kernel's "
                f"diagonal dominates: cosine on sparse documents, heat kernels). If they "
                f"are not outliers, learning_rate='classic' replaces the point at the "
                f"center's first update; see the user guide, 'When the adaptive rate "
                f"starves centers'",
                ConvergenceWarning,
            )

    def _check_kernel_sample(self, problem, indefinite):
        """Warn, before the work, where the kernel on a sample of the rows
        (:meth:`Rows.kernel_sample`, :data:`KERNEL_SAMPLE` of them) is numerically
        constant (every value the same to within rounding, on rows not all equal: one
        cluster, whatever the data), or, with ``indefinite``, not positive
        semi-definite (a kernel not known to be: :class:`IndefiniteKernelWarning`)."""
        kernel = problem.kernel
        sample = problem.rows.kernel_sample(kernel, KERNEL_SAMPLE, problem.itemsize)
        if sample is None:
            return
        K, varied, dtype = sample
        if not np.isfinite(K).all():
            return  # non-finite kernel values: the fit refuses them, naming them
        scale = float(np.abs(K).max(initial=0.0))
        eps = np.finfo(dtype).eps
        name = type(self).__name__
        if varied and scale > 0 and np.ptp(K) <= 64 * eps * scale:
            warn(
                f"{name}: the kernel {kernel!r} is numerically constant on "
                f"{K.shape[0]} evenly spaced rows of X (not all equal): every value "
                f"is {K.flat[0]:.6g} to within rounding, so no point is nearer one center "
                f"than another and the fit finds one cluster. Its parameters do not suit "
                f"the data's scale (gamma too small, or coef0 too large): rescale X or "
                f"change them (gamma=None chooses a width from the data)",
                UserWarning,
            )
        elif indefinite and kernel.name not in PSD_KERNELS:
            lam = np.linalg.eigvalsh((K + K.T) / 2)
            if lam[0] < -1e-3 * max(lam[-1], 0.0):
                warn(
                    f"{name}: the kernel {kernel!r} is not positive semi-definite: its "
                    f"matrix on {K.shape[0]} evenly spaced points of X has the eigenvalue "
                    f"{lam[0]:.3g} (the largest is {lam[-1]:.3g}). The windows' centers "
                    f"are then no means in a feature space and their distances can be "
                    f"negative: the fit is not kernel k-means' (see "
                    f"IndefiniteKernelWarning)",
                    IndefiniteKernelWarning,
                )

    def _check_sizes_and_init(self, rows, kernel, batch_size):
        """``n_clusters`` and ``init_size`` against the input, and ``init`` checked
        (``_init``; ``rows``: the input's adapter, which checks an init array;
        ``kernel``: the kernel's name in its messages).

        ``batch_size``: a mini-batch estimator's, whose batch and init sizes are then
        set too (``_batch_size``, ``_init_size``), capped at n_samples; None for the
        full batch (required, so that a mini-batch caller cannot skip it by omission).
        """
        n, k, init_size = int(rows.data.shape[0]), self.n_clusters, self.init_size
        if n < k:
            raise ValueError(
                f"n_samples={n} should be >= n_clusters={k}: fewer samples than clusters"
            )
        if init_size is not None and init_size < k:
            raise ValueError(f"init_size={init_size} should be >= n_clusters={k}")
        init = self.init
        if callable(init):  # scikit-learn's signature; what it returns is checked as an array
            init = init(rows.data, k, random_state=check_random_state(self.random_state))
        self._init = init if isinstance(init, str) else rows.check_init(init, k, kernel)
        if batch_size is not None:
            self._batch_size = min(batch_size, n)
            if init_size is None:
                init_size = 3 * self._batch_size
                if init_size < k:
                    init_size = 3 * k
            self._init_size = min(init_size, n)


class BaseKernelKMeans(ClusterEstimator):
    """Base class of the kernel estimators (see the module docstring)."""

    # ------------------------------------------------------------------ checks
    def _validate_X(self, X, keep_host=False):
        """New X (predict, transform, score, a later partial_fit) checked as the fit's X
        was, on the fit's backend (``keep_host``: dense host rows stay on the host, for
        a labelling pass that streams them to the fit's device).

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
            self._validated,
            self.n_features_in_,
            type(self).__name__,
            keep_host=keep_host,
            dtype=getattr(self._state.support, "dtype", None),
        )

    def _chunk_rows(self, X, state=None):
        """Rows per labelling chunk within ``working_memory``."""
        state = self._state if state is None else state
        m = state.support.shape[0]
        nx = get_backend(state.support)  # where the pass runs (host rows may stream there)
        copies = 0  # the rows a device's tiles copy (the host's never do)
        itemsize = _device.itemsize(X)
        if not nx.is_host:  # the support's rows, in the dtype the rows are computed in
            name = getattr(self.kernel_, "name", "")
            copies = label_row_copies(name, str(nx.device), X.shape[-1], m)
            itemsize = state.support.element_size()
        # int(): a numpy integer parameter would overflow in its own type
        return label_chunk_rows(self.working_memory, m, int(self.n_clusters), itemsize, copies)

    # -------------------------------------------------------------- labelling
    @contextmanager
    def _labelling(self, X, quiet=False):
        """The progress of a labelling pass over X with ``verbose`` (lines on stdout),
        else (or ``quiet``) None; its last line counts every row, also where the pass
        did not."""
        verbose = 0 if quiet else getattr(self, "verbose", 0)
        progress = progress_for(verbose, X.shape[0], "labelling")
        if progress is None:
            yield None
            return
        with progress:
            yield progress
            progress.update(progress.total - progress.done)

    def _labels_inertia(self, X, sample_weight=None, labelled=None, quiet=False):
        """Labels and (weighted) inertia of validated items X (fitted rows or indices).

        ``labelled``: the labels and minimum distances of X that the fit already has
        (small n: read from the stored kernel's rows), or None to label X now;
        ``quiet``: no progress lines, whatever ``verbose``.
        """
        if labelled is not None:
            labels, mind = labelled
        else:
            lazy = rows_of(X).lazy_labels_inertia(self, sample_weight)  # Dask: one pass
            if lazy is not None:
                return lazy
            with thread_policy(), self._labelling(X, quiet) as progress:
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
            X = self._validate_X(X, keep_host=True)
            with self._labelling(X) as progress:
                found = kind.assign_new(
                    self,
                    self._state,
                    self._chunk_rows(X),
                    X,
                    method,
                    return_distances,
                    kernel_diag,
                    progress,
                )
        return tuple(_device.convert_output(getattr(self, "_tensor_io", False), a) for a in found)

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
        return self._assign_new(X, "predict")[0]

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
        return self._assign_new(X, "transform", return_distances=True, kernel_diag=kernel_diag)[2]

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
        """The fit's problem (:func:`resolve_problem`), and what the fit keeps of
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
    initialisation, in the form ``fit`` iterates on; a named init's points from
    ``_init_points``) and
    ``_init_inertia(Xv, wv, candidate)`` (its inertia on a validation subsample).
    """

    def _init_points(self, X, sample_weight, rng, init_idx, kernel):
        """The k initial center points of a named ``init`` ("k-means++" with ``kernel``,
        or "random"), rows of X drawn among its rows ``init_idx`` (None: an init
        subsample of ``_init_size`` rows)."""
        positive = self.n_clusters if sample_weight is None else np.count_nonzero(sample_weight)
        if positive < self.n_clusters:  # weights are checked non-negative
            warn(
                f"{type(self).__name__}: sample_weight gives {positive} points a positive "
                f"weight, fewer than n_clusters={self.n_clusters}: the other centers start "
                f"at points of zero weight (which no batch draws, so they stay there, and "
                f"repeat or lie beside the weighted ones); lower n_clusters",
                UserWarning,
            )
        if init_idx is None:
            init_idx = draw_init_subsample(
                rng, X.shape[0], self._init_size, self.n_clusters, sample_weight
            )
        nx = get_backend(X)
        dense = isinstance(X, np.ndarray)  # numpy rows: numpy's own gathers
        Xi = X[init_idx] if dense else nx.take(X, nx.index(init_idx))
        wi = None if sample_weight is None else sample_weight[init_idx]
        if self._init == "k-means++":
            # On the host, on a host copy of the (small) subsample (host rows, CSR
            # included, as they are): the same draws on every backend.
            Xh = Xi if nx.is_host else nx.to_numpy(Xi)
            idx = kernel_kmeans_plusplus(Xh, kernel, self.n_clusters, rng, wi)
        else:
            idx = random_init(Xi.shape[0], self.n_clusters, rng, wi)
        return Xi[idx] if dense else nx.take(Xi, nx.index(idx))

    def _record_step(self, first, objective, X, sample_weight):
        """A ``partial_fit`` step (the first one when ``first``), and with
        ``compute_labels`` the labels and inertia of its rows; returns the estimator."""
        self.n_iter_ = self.n_steps_ = 1 if first else self.n_steps_ + 1
        previous = np.empty(0) if first else self.batch_objective_
        self.batch_objective_ = np.append(previous, objective)
        if self.compute_labels:  # no progress line per call (scikit-learn's prints none)
            self.labels_, self.inertia_ = self._labels_inertia(X, sample_weight, quiet=True)
        else:
            self._forget_labels()
        return self

    def _forget_labels(self):
        """Without ``compute_labels``: no ``labels_`` or ``inertia_`` of an earlier fit,
        whose points they describe (a refit kept them, of another length)."""
        for name in ("labels_", "inertia_"):
            self.__dict__.pop(name, None)

    def fit_predict(self, X, y=None, **kwargs):
        """Fit, then the label of each row of X: ``labels_``, or with
        ``compute_labels=False`` a labelling pass over the fitted points (the same
        labels).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : Ignored
        **kwargs
            Passed to ``fit`` (``sample_weight``).

        Returns
        -------
        labels : ndarray of shape (n_samples,)
        """
        self.fit(X, **kwargs)
        return self.labels_ if self.compute_labels else self._fitted_labels(X)

    def _fitted_labels(self, X):
        """The labels of the fitted points X, by a labelling pass."""
        return self.predict(X)

    def _best_init(self, X, sample_weight, rng, start=None):
        """The initialisation with the lowest inertia on a validation subsample.

        As scikit-learn's MiniBatchKMeans: ``n_init`` candidates are scored on
        ``init_size`` points drawn with replacement; an explicit init runs once.
        ``start`` (a width selection's partition) is the first candidate.
        """
        n_init = self._n_init()
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
        self.n_iter_ = self.n_steps_ = loop.n_iter
        self.batch_objective_ = np.asarray(loop.objectives, dtype=np.float64)


# ------------------------------------------------------------------ kernel kinds


@dataclass(frozen=True)
class Resolved:
    """The kernel of one fit and what it works on (:meth:`PointKernel.resolve`)."""

    kernel: ResolvedKernel
    items: object
    gamma: float | None
    itemsize: int  # bytes of one value the core computes with
    n_features: int  # 0 where items are point indices
    t: float | None = None
    t_selection: object = None


class PointKernel:
    """A kernel on points: rows in, rows of new points out."""

    name = "point"
    #: Whether distances to new points need their K(x, x) passed in (``kernel_diag``).
    needs_kernel_diag = False

    def stored_matrix(self, X):
        """X taken as it is (a sparse or low-rank kernel matrix), or None: validate it."""
        return None

    def training_items(self, X):
        """What the core labels for the fitted points, from their validated X: the rows
        themselves (index kinds: the points' indices)."""
        return X

    def fit_rows(self, X, *, kernel, tau, device, index_dtype=None):
        """The adapter of a fit's validated X (:mod:`._rows`), after refusing what X's
        backend does not do with ``kernel``, ``tau`` and the resolved ``device``,
        before any work."""
        if not get_backend(X).is_host:
            if tau is None:
                raise ValueError(
                    "tau=None (the untruncated dynamic program) is available with numpy "
                    "only; use an integer tau on the torch backend, or device=None / 'cpu' "
                    "with numpy arrays"
                )
            check_torch_kernel(kernel)  # the registry: a ValueError for chi2
        return rows_of(X)

    def resolve(self, estimator, rows, gamma, sample_weight):
        """The :class:`Resolved` kernel of checked ``rows`` (``estimator``: its kernel
        parameters are read, nothing is written; ``gamma``: the width to use).

        scikit-learn's parameters resolved on the data, then the checks that need the
        kernel (overflow of its arithmetic, a callable called once on a few rows),
        before any real work.
        """
        X = rows.data
        n = X.shape[0]
        kernel = rows.resolve_kernel(
            estimator.kernel,
            gamma=gamma,
            degree=estimator.degree,
            coef0=estimator.coef0,
            kernel_params=estimator.kernel_params,
            X=X,
            sample_weight=sample_weight,
        )
        if kernel.name == "rbf":  # rows far from the origin: their centre leaves the tiles
            kernel.offset = origin_offset(rows.host_rows(rows.fingerprint_index(OFFSET_SAMPLE)))
        # finite data whose kernel arithmetic overflows, or whose distances underflow
        # (a callable computes its own values)
        rows.check_no_overflow(kernel, underflow=not kernel.is_callable)
        if kernel.is_callable:  # called once on a few rows: its errors before any work
            kernel.tile(X[: min(3, n)], X[: min(2, n)])
        # numpy and torch (>= 2.1) dtypes both know their itemsize
        return Resolved(kernel, X, kernel.params.get("gamma"), X.dtype.itemsize, int(X.shape[1]))

    def accepts_sparse(self, kernel):
        """Whether ``fit`` takes scipy sparse X (``kernel``: the estimator's parameter)."""
        if callable(kernel):
            return True  # a callable receives CSR rows
        spec = get_spec(kernel)
        return spec is not None and spec.accepts_sparse  # chi2: no

    def check_checkpoint(self, kernel):
        """Refuse a checkpoint where the fit's state is not checkpointed (graph kernels)."""

    def check_inductive(self, estimator, method):
        """Refuse new points where the kernel has no value at them (graph kernels)."""

    def check_new_rows(self, estimator, method):
        """Refuse training on new rows where the kernel is a matrix over fixed points."""

    def assign_new(
        self, estimator, state, chunk_rows, X, method, return_distances, kernel_diag, progress=None
    ):
        """Labels, minimum distances (and distances) of validated new rows X on the
        fitted ``state`` (``chunk_rows``: rows per labelling chunk), on X's backend;
        ``progress`` (a :class:`~mbkkm._progress.Progress`) counts the rows done."""
        if get_backend(state.support).is_host:  # as tensors, rows streamed to a device
            check_no_overflow(X, estimator.kernel_)  # are not read on the host first
        return assign_parallel(
            X,
            state,
            estimator.kernel_,
            chunk_rows=chunk_rows,
            return_distances=return_distances,
            progress=progress,
        )

    def fitted_distances(self, estimator, state, X):
        """Distances of the fitted points to the centers, (n, n_clusters)."""
        return estimator.transform(X)

    def fitted_labels(self, estimator, state, X):
        """Labels of the fitted points X (``fit_predict`` without ``labels_``)."""
        return estimator.predict(X)

    #: The fitted attributes KernelKMeans does not keep with this kind of kernel.
    lloyd_dropped: tuple[str, ...] = ()

    def matrix_run(self, kernel):
        """KernelKMeans: the :class:`~mbkkm._core._lloyd.KernelRun` over the kernel's
        stored matrix, or None (a kernel on points: K(X, X) is computed)."""

    def check_lazy_rows(self, kernel):
        """Refuse a Dask X where the kernel needs its whole matrix."""


class PrecomputedKernel(PointKernel):
    """``kernel="precomputed"``: the kernel matrix in, point indices in the core."""

    name = "precomputed"
    needs_kernel_diag = True

    #: The adapter of a fit's X: the core works on point indices.
    rows_class = PrecomputedRows

    def fit_rows(self, X, *, kernel, tau, device, index_dtype=None):
        # a stored matrix stays on the host even when device= names a torch device
        if not get_backend(X).is_host or device not in (None, "cpu"):
            raise ValueError(
                f"kernel={kernel!r} is available with numpy only (its kernel is a "
                "stored matrix); pass numpy arrays with device=None or 'cpu'"
            )
        return self.rows_class(X, index_dtype)

    def stored_matrix(self, X):
        return validate_stored_kernel(X) if is_stored_kernel(X) else None

    def training_items(self, X):
        return np.arange(X.shape[0])

    lloyd_dropped = ("support_vectors_",)  # the items are indices: they are support_

    def matrix_run(self, kernel):
        return KernelRun(
            MatrixOperator(kernel.matrix),
            np.asarray(kernel.full_diagonal(), dtype=np.float64),
            kernel,
        )

    def check_lazy_rows(self, kernel):
        raise ValueError(
            f"kernel={kernel!r} needs the whole kernel matrix and "
            "is not supported on a Dask array; pass a numpy array"
        )

    def resolve(self, estimator, rows, gamma, sample_weight):
        dtype = rows.index_dtype or getattr(rows.data, "dtype", np.float64)
        kernel = IndexKernel("precomputed", rows.data, dtype=dtype, diag=rows.diag)
        return Resolved(kernel, np.arange(rows.n_samples), None, np.dtype(kernel.dtype).itemsize, 0)

    def check_new_rows(self, estimator, method):
        raise ValueError(
            f"{method} is not available with kernel={estimator.kernel!r}: the kernel is "
            f"a matrix over a fixed set of points, and {method} sees new rows"
        )

    def accepts_sparse(self, kernel):
        return True  # a sparse kernel matrix

    def assign_new(
        self, estimator, state, chunk_rows, X, method, return_distances, kernel_diag, progress=None
    ):
        # X is K(X_new, X_fit); the support items index X_fit. K(x, x) of the new
        # points, checked (zeros where the result does not need it: the argmin does
        # not depend on it)
        if kernel_diag is None:
            if return_distances:
                raise ValueError(
                    f"{type(estimator).__name__}.{method} with kernel='precomputed' needs "
                    "kernel_diag=K(x, x) of the new points, shape (n_new,): the distances "
                    "depend on it, and K(X_new, X_fit) does not hold it (predict does not "
                    "need it)"
                )
            diag = np.zeros(X.shape[0], dtype=X.dtype)
        else:
            diag = check_array(
                kernel_diag, ensure_2d=False, dtype=X.dtype, input_name="kernel_diag"
            )
            if diag.shape != (X.shape[0],):
                raise ValueError(
                    f"kernel_diag should have shape (n_new,) = ({X.shape[0]},), got {diag.shape}"
                )
            if np.any(diag < 0):
                i = int(np.flatnonzero(diag < 0)[0])
                raise ValueError(
                    f"kernel_diag[{i}] = {diag[i]:.3g} is negative; a kernel has "
                    "K(x, x) = ||phi(x)||^2 >= 0"
                )

        return assign(
            X,
            state,
            estimator.kernel_,
            # (m, r); dense from a sparse K too
            cross_kernel=lambda support, K_rows: to_dense(K_rows[:, support].T),
            diag=lambda start, K_rows: diag[start : start + K_rows.shape[0]],
            chunk_rows=chunk_rows,
            return_distances=return_distances,
            progress=None if progress is None else progress.update,
        )

    def fitted_distances(self, estimator, state, X):
        return self._assign_fitted(estimator, state, return_distances=True)[2]

    def fitted_labels(self, estimator, state, X):
        # the fitted points themselves: a graph kernel's predict would label them as
        # new points, through its extension
        return self._assign_fitted(estimator, state, return_distances=False)[0]

    def _assign_fitted(self, estimator, state, return_distances):
        items = np.arange(estimator.kernel_.n_samples)
        m = state.support.shape[0]  # items are indices: 8 bytes a value
        chunk_rows = label_chunk_rows(estimator.working_memory, m, estimator.n_clusters, 8)
        return assign(
            items,
            state,
            estimator.kernel_,
            chunk_rows=chunk_rows,
            return_distances=return_distances,
        )


class GraphKernel(PrecomputedKernel):
    """A graph kernel ("knn", "heat"): the points in, point indices in the core."""

    name = "graph"
    needs_kernel_diag = False

    rows_class = GraphRows

    def stored_matrix(self, X):
        return None

    def resolve(self, estimator, rows, gamma, sample_weight):
        kernel, t, t_selection = resolve_graph_kernel(estimator, rows.data, sample_weight)
        items = np.arange(rows.n_samples)
        return Resolved(kernel, items, None, np.dtype(kernel.dtype).itemsize, 0, t, t_selection)

    def accepts_sparse(self, kernel):
        return False  # the k-NN graph builders take dense X

    def check_checkpoint(self, kernel):
        raise ValueError(
            f"checkpoint is not available with kernel={kernel!r}: a "
            "graph kernel's graph and eigenpairs are not checkpointed"
        )

    def check_inductive(self, estimator, method):
        if getattr(estimator.kernel_, "extension", None) is None:
            raise ValueError(
                f"{type(estimator).__name__}.{method}: kernel={estimator.kernel!r} is a "
                "graph kernel, defined on the fitted points only (transductive): it has no "
                "value between new points and the fitted ones. Use labels_ (fit_predict) or "
                "fit_transform on the fitted points, or refit on all the points"
            )

    def assign_new(
        self, estimator, state, chunk_rows, X, method, return_distances, kernel_diag, progress=None
    ):
        return graph_assign(estimator, state, X, return_distances)  # X joins the graph


_POINT = PointKernel()
#: The kernels that are not on points, by name; every other name is a kernel on points.
_KINDS = {"precomputed": PrecomputedKernel(), **dict.fromkeys(GRAPH_KERNELS, GraphKernel())}


def kernel_kind(kernel):
    """The kind of an estimator's ``kernel`` parameter (a name or a callable)."""
    return _KINDS.get(kernel, _POINT) if isinstance(kernel, str) else _POINT  # a callable


@dataclass(frozen=True)
class FitInput:
    """What the kind of a fit's X decides (built by :func:`fit_input`).

    Attributes
    ----------
    rows : Rows
        The validated X in the adapter of its kind and of the kernel's kind
        (``rows.data``: on the run's backend; index adapters for stored and graph
        kernels).
    sample_weight : ndarray of shape (n_samples,) or None
        Host weights (they drive sampling on the host); None for unit weights, and
        for constant ones in a whole fit (``relative_weights``).
    weight_scale : float
        The constant that ``sample_weight=None`` stands for there (else 1): what
        ``inertia_`` is multiplied by.
    device : None, "cpu" or torch.device
        Where the fit runs (the estimator's ``device`` resolved for this X).
    tensor_io : bool
        Whether results go back to the user as tensors.
    n_samples, n_features_in : int
    feature_names_in : ndarray of str or None
        X's column names, when it has string ones.
    output : callable
        ``output(values)``: per-row results of the fit (labels, distances; numpy or
        tensors) in X's kind where it differs (a Dask array computed for a whole-data
        fit: a Dask array chunked as X); others as they are.
    """

    rows: Rows
    sample_weight: np.ndarray | None
    weight_scale: float
    device: object
    tensor_io: bool
    n_samples: int
    n_features_in: int
    feature_names_in: np.ndarray | None
    output: Callable


def fit_input(
    X,
    sample_weight,
    estimator,
    *,
    accept_dask=True,
    index_dtype=None,
    relative_weights=False,
):
    """Check a fit's X and ``sample_weight``: the :class:`FitInput`, before any work.

    In order: X validated as its kind is (scikit-learn's ``check_array`` for numpy
    and scipy.sparse, torch operations for a tensor, a stored kernel matrix taken as
    it is, a Dask array read lazily), what the backend cannot do with the kernel's
    kind refused, X wrapped in the adapter of the kernel's kind, the weights checked.

    Parameters
    ----------
    X : array-like, sparse matrix, tensor or Dask array
    sample_weight : array-like of shape (n_samples,) or None
    estimator : BaseKernelKMeans
        Its ``kernel``, ``device``, ``tau`` (0 for an estimator without one) and
        ``working_memory`` are read (nothing is written), its name is in the messages.
    accept_dask : bool, default=True
        Whether a Dask array is read as Dask rows (else it is validated as an array).
    index_dtype : numpy dtype, optional
        dtype of the blocks of an index kernel (None: the matrix's own dtype).
    relative_weights : bool, default=False
        A whole fit, whose model depends on the weights only relative to one
        another: constant weights are no weights and a ``weight_scale``
        (:func:`~mbkkm._validation.constant_as_scale`).
    """
    kernel, device, owner = estimator.kernel, estimator.device, type(estimator).__name__
    tau = getattr(estimator, "tau", 0)  # 0: an estimator without one (KernelKMeans)
    kind = kernel_kind(kernel)
    given = rows_of(X)
    names = _get_feature_names(X)
    # the checks of X's kind (a sparse or low-rank kernel matrix taken as it is), and
    # where it runs (Dask: rows read lazily)
    X, dev = given.fit_data(
        device,
        lambda X: short_input_errors(
            check_array,
            X,
            owner,
            parallel=_on_every_thread,
            input_name="X",
            estimator=owner,
            accept_sparse="csr",
        ),
        kind=kind,
        kernel=kernel,
        tau=tau,
        working_memory=estimator.working_memory,
        accept_dask=accept_dask,
    )
    # what X's backend cannot do with the kernel refused; index kernels: the core works
    # on point indices
    rows = kind.fit_rows(X, kernel=kernel, tau=tau, device=dev, index_dtype=index_dtype)
    w, scale = None, 1.0
    if sample_weight is not None:
        w = check_sample_weight(
            host_sample_weight(sample_weight, given.is_tensor), _device.host_shape(rows.data)
        )
        if relative_weights:
            w, scale = constant_as_scale(w)
    n, d = int(X.shape[0]), int(X.shape[1])
    return FitInput(rows, w, scale, dev, given.is_tensor, n, d, names, given.as_given)


@dataclass(frozen=True)
class FitProblem(Resolved, FitInput):
    """One fit's checked input (the fields of :class:`FitInput`) with the kernel
    resolved (those of :class:`Resolved`), built by :func:`resolve_problem`.

    Attributes
    ----------
    items : ndarray, sparse matrix, tensor, DaskRows or ndarray of indices
        What the core iterates on: the rows, or point indices for index kernels.
    kernel : ResolvedKernel
    nx : Backend
        The backend the rows live on.
    n_features : int
        The number of columns the core sees (0 for index kernels).
    is_index : bool
        Whether the items are point indices (a stored or graph kernel).
    itemsize : int
        Bytes of one value the core computes with.
    gamma : float or None
        The width the kernel uses (None for kernels without one, index kernels).
    gamma_selection : GammaSelection or None
        ``gamma="auto"``'s record (None when no width was chosen).
    t, t_selection : float or None, TSelection or None
        The heat kernel's time and its record.
    """

    nx: object = None  # (always given: fields with defaults follow Resolved's)
    is_index: bool = False
    gamma_selection: object = None


def resolve_problem(estimator, data, *, gamma_selection=None):
    """The :class:`FitProblem` of a checked :class:`FitInput`: ``gamma="auto"``'s
    selection (unless ``gamma_selection``, a width chosen before, is given), then the
    kernel (``estimator``: its kernel parameters are read, nothing is written).

    The kernel's kind resolves it (:meth:`PointKernel.resolve`): a kernel on
    points with its checks, the index kernel of a stored matrix, or a graph kernel
    built on the k-NN graph of the points.
    """
    rows, sample_weight = data.rows, data.sample_weight
    X, nx = rows.data, get_backend(rows.data)
    gamma, selection = estimator.gamma, gamma_selection
    if selection is not None:
        gamma = selection.gamma  # chosen before (a resumed checkpoint's)
    elif gamma is None or isinstance(gamma, str):
        # gamma="auto" (and None for rbf / laplacian, see default_selects_width):
        # choose the width on a sample (refuses kernels without one). Small calls
        # into scikit-learn: one thread everywhere (see _threads).
        with one_thread_everywhere():
            gamma, selection = resolve_auto_gamma(
                gamma,
                estimator.kernel,
                X,
                estimator.n_clusters,
                sample_weight,
                estimator.random_state,
                estimator.kernel_params,
            )
    resolved = kernel_kind(estimator.kernel).resolve(estimator, rows, gamma, sample_weight)
    return FitProblem(
        **vars(data), **vars(resolved), nx=nx, is_index=rows.is_index, gamma_selection=selection
    )
