"""The kind of a kernel estimator's kernel, and what depends on it once fitted.

Three kinds, one class each; :func:`kernel_kind` is the only place that tells
them apart:

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

from dataclasses import dataclass

import numpy as np
from sklearn.utils.validation import _get_feature_names, check_array

from .._core import assign
from .._core._lloyd import KernelRun, MatrixOperator
from .._core._memory import label_chunk_rows
from .._core._windows import assign_parallel
from .._validation import check_sample_weight, short_input_errors
from ..backends import get_backend
from ..backends._numpy import to_dense
from ..backends._threads import one_thread_everywhere
from ..kernels import GRAPH_KERNELS, check_torch_kernel, get_spec
from ..kernels._index import IndexKernel, is_stored_kernel, validate_stored_kernel
from ..kernels._protocol import ResolvedKernel
from . import _device
from ._auto_gamma import resolve_auto_gamma
from ._graph_kernels import graph_assign, resolve_graph_kernel
from ._rows import GraphRows, PrecomputedRows, Rows, check_no_overflow, host_sample_weight, rows_of


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
    #: Whether the core's items are point indices (the kernel is a stored matrix).
    is_index = False
    #: Whether distances to new points need their K(x, x) passed in (``kernel_diag``).
    needs_kernel_diag = False

    def stored_matrix(self, X):
        """X taken as it is (a sparse or low-rank kernel matrix), or None: validate it."""
        return None

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
        check_no_overflow(X, kernel)  # finite data whose kernel arithmetic overflows
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
        check_no_overflow(X, estimator.kernel_)
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
    is_index = True
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
        X = rows.data
        dtype = rows.index_dtype or getattr(X, "dtype", np.float64)
        kernel = IndexKernel("precomputed", X, dtype=dtype, diag=rows.diag)
        itemsize = np.dtype(kernel.dtype).itemsize
        return Resolved(kernel, np.arange(rows.n_samples), None, itemsize, 0)

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
        # X is K(X_new, X_fit); the support items index X_fit.
        diag = self.kernel_diag(estimator, kernel_diag, X, method, needed=return_distances)

        def cross(support, K_rows):
            return to_dense(K_rows[:, support].T)  # (m, r); dense from a sparse K too

        return assign(
            X,
            state,
            estimator.kernel_,
            cross_kernel=cross,
            diag=lambda start, K_rows: diag[start : start + K_rows.shape[0]],
            chunk_rows=chunk_rows,
            return_distances=return_distances,
            progress=None if progress is None else progress.update,
        )

    @staticmethod
    def kernel_diag(estimator, kernel_diag, X, method, needed):
        """K(x, x) of the new points, checked (zeros where the result does not need it)."""
        if kernel_diag is None:
            if needed:
                raise ValueError(
                    f"{type(estimator).__name__}.{method} with kernel='precomputed' needs "
                    "kernel_diag=K(x, x) of the new points, shape (n_new,): the distances "
                    "depend on it, and K(X_new, X_fit) does not hold it (predict does not "
                    "need it)"
                )
            return np.zeros(X.shape[0], dtype=X.dtype)  # the argmin does not depend on it
        diag = check_array(kernel_diag, ensure_2d=False, dtype=X.dtype, input_name="kernel_diag")
        if diag.shape != (X.shape[0],):
            raise ValueError(
                f"kernel_diag should have shape (n_new,) = ({X.shape[0]},), got {diag.shape}"
            )
        return diag

    def fitted_distances(self, estimator, state, X):
        items = np.arange(estimator.kernel_.n_samples)
        m = state.support.shape[0]  # items are indices: 8 bytes a value
        chunk_rows = label_chunk_rows(estimator.working_memory, m, estimator.n_clusters, 8)
        return assign(
            items, state, estimator.kernel_, chunk_rows=chunk_rows, return_distances=True
        )[2]


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
        Host weights (they drive sampling on the host); None for unit weights.
    device : None, "cpu" or torch.device
        Where the fit runs (the estimator's ``device`` resolved for this X).
    tensor_io : bool
        Whether results go back to the user as tensors.
    n_samples, n_features_in : int
    feature_names_in : ndarray of str or None
        X's column names, when it has string ones.
    """

    rows: Rows
    sample_weight: np.ndarray | None
    device: object
    tensor_io: bool
    n_samples: int
    n_features_in: int
    feature_names_in: np.ndarray | None


def fit_input(
    X, sample_weight, estimator, *, tau=0, working_memory=None, accept_dask=True, index_dtype=None
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
        Its ``kernel`` and ``device`` are read (nothing is written), its name is in
        the messages.
    tau, working_memory
        The estimator's parameters (``tau=0``: an estimator without one).
    accept_dask : bool, default=True
        Whether a Dask array is read as Dask rows (else it is validated as an array).
    index_dtype : numpy dtype, optional
        dtype of the blocks of an index kernel (None: the matrix's own dtype).
    """
    kernel, device, owner = estimator.kernel, estimator.device, type(estimator).__name__
    kind = kernel_kind(kernel)
    given = rows_of(X)
    names = _get_feature_names(X)
    # the checks of X's kind (a sparse or low-rank kernel matrix taken as it is), and
    # where it runs (Dask: rows read lazily)
    X, dev = given.fit_data(
        device,
        lambda X: short_input_errors(
            check_array, X, owner, input_name="X", estimator=owner, accept_sparse="csr"
        ),
        kind=kind,
        kernel=kernel,
        tau=tau,
        working_memory=working_memory,
        accept_dask=accept_dask,
    )
    # what X's backend cannot do with the kernel refused; index kernels: the core works
    # on point indices
    rows = kind.fit_rows(X, kernel=kernel, tau=tau, device=dev, index_dtype=index_dtype)
    tensor_io = given.is_tensor
    w = None
    if sample_weight is not None:
        w = check_sample_weight(
            host_sample_weight(sample_weight, tensor_io), _device.host_shape(rows.data)
        )
    return FitInput(rows, w, dev, tensor_io, int(X.shape[0]), int(X.shape[1]), names)


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

    The kernel's kind resolves it (:meth:`._kinds.PointKernel.resolve`): a kernel on
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
