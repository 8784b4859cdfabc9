"""One fit's input and kernel, checked and resolved once, returned as plain values.

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

from .. import _dask
from .._validation import check_sample_weight, short_input_errors
from ..backends import get_backend, resolve_device
from ..backends._threads import one_thread_everywhere
from ..kernels import resolve_kernel
from ..kernels._index import IndexKernel, is_stored_kernel, validate_stored_kernel
from ..kernels._protocol import ResolvedKernel
from . import _device
from ._auto_gamma import resolve_auto_gamma
from ._graph_kernels import resolve_graph_kernel
from ._kinds import kernel_kind
from ._overflow import check_no_overflow
from ._rows import DaskFitRows, Rows, host_sample_weight, rows_of


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
    X,
    sample_weight,
    *,
    kernel,
    device,
    owner,
    tau=0,
    working_memory=None,
    accept_dask=True,
    index_dtype=None,
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
    kernel, device, tau, working_memory
        The estimator's parameters (``tau=0``: an estimator without one).
    owner : str
        The estimator's name, for the messages.
    accept_dask : bool, default=True
        Whether a Dask array is read as Dask rows (else it is validated as an array).
    index_dtype : numpy dtype, optional
        dtype of the blocks of an index kernel (None: the matrix's own dtype).
    """
    kind = kernel_kind(kernel)
    given = rows_of(X)
    names = None
    if given.kind == "dask" and accept_dask:
        X, dev = _dask_fit_rows(X, kind, kernel, device, tau, working_memory), None
    else:
        if kind.name == "precomputed" and is_stored_kernel(X):
            # a sparse or low-rank kernel matrix, taken as it is, on the host
            X, dev = validate_stored_kernel(X), resolve_device(device)
            given = rows_of(X)
        else:
            # sparse X has numpy only: "auto" (the best backend for X) is the host
            auto = isinstance(device, str) and device == "auto"
            dev = "cpu" if auto and given.kind == "sparse" else resolve_device(device)
            names = _get_feature_names(X)
            X = given.validated(
                dev,
                device,
                lambda X: short_input_errors(
                    lambda X: check_array(
                        X,
                        input_name="X",
                        estimator=owner,
                        dtype=[np.float64, np.float32],
                        order="C",
                        accept_sparse="csr",
                        ensure_min_samples=1,
                    ),
                    X,
                    owner,
                ),
            )
    nx = get_backend(X)
    if kind.is_index or not nx.is_host:  # what the backend cannot do with the kernel
        kind.check_backend(nx, kernel=kernel, tau=tau, device=dev)
    # index kernels: the core works on point indices; else on the rows of X's kind
    rows = kind.fit_rows(X, index_dtype) if kind.is_index else rows_of(X)
    tensor_io = given.is_tensor
    w = None
    if sample_weight is not None:
        w = check_sample_weight(
            host_sample_weight(sample_weight, tensor_io), _device.host_shape(rows.data)
        )
    return FitInput(rows, w, dev, tensor_io, int(X.shape[0]), int(X.shape[1]), names)


def _dask_fit_rows(X, kind, kernel, device, tau, working_memory):
    """A Dask X checked: the :class:`mbkkm._dask.DaskRows` that gathers the rows the fit
    reads, the batches of the whole plan in few passes."""
    if resolve_device(device) not in (None, "cpu"):
        raise ValueError(f"device={device!r}: Dask input runs with numpy; use device=None or 'cpu'")
    if kind.is_index:
        raise ValueError(
            f"kernel={kernel!r} needs the whole kernel matrix and "
            "is not supported on a Dask array; pass a numpy array"
        )
    if tau is None:
        raise ValueError(
            "tau=None (untruncated, a dynamic program over all n points) "
            "is not supported on a Dask array; pass a numpy array or set tau"
        )
    return _dask.DaskRows(_dask.check_dask_array(X), working_memory)


@dataclass(frozen=True)
class FitProblem:
    """One fit's inputs with the kernel resolved (built by :func:`resolve_problem`).

    Attributes
    ----------
    rows : Rows
        The validated input in its adapter (``rows.data``: on the run's backend).
    items : ndarray, sparse matrix, tensor, DaskRows or ndarray of indices
        What the core iterates on: the rows, or point indices for index kernels.
    kernel : ResolvedKernel
    sample_weight : ndarray of shape (n_samples,) or None
        Host weights (they drive sampling on the host).
    nx : Backend
        The backend the rows live on.
    n_samples, n_features : int
        The input's shape (``n_features`` is 0 for index kernels).
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
    tensor_io : bool
        Whether results go back to the user as tensors.
    input : FitInput
        The checked input it was resolved from.
    """

    rows: Rows
    items: object
    kernel: ResolvedKernel
    sample_weight: np.ndarray | None
    nx: object
    n_samples: int
    n_features: int
    is_index: bool
    itemsize: int
    gamma: float | None = None
    gamma_selection: object = None
    t: float | None = None
    t_selection: object = None
    tensor_io: bool = False
    input: FitInput | None = None

    def output(self, x):
        """A result of the core in the user's array library (tensors in, tensors out)."""
        return _device.convert_output(self.tensor_io, x)


def resolve_problem(estimator, data, *, gamma_selection=None):
    """The :class:`FitProblem` of a checked :class:`FitInput`: ``gamma="auto"``'s
    selection (unless ``gamma_selection``, a width chosen before, is given), then the
    kernel (``estimator``: its kernel parameters are read, nothing is written).

    A kernel on points: scikit-learn's parameters resolved on the data, then the
    checks that need the kernel (overflow of its arithmetic, a callable called once
    on a few rows), before any real work. A stored matrix: the index kernel over
    it. A graph kernel: the k-NN graph of the points built and its kernel resolved.
    """
    rows, sample_weight = data.rows, data.sample_weight
    X, n, nx = rows.data, data.n_samples, get_backend(rows.data)
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
    t = t_selection = None
    if rows.kind == "graph":
        kernel, t, t_selection = resolve_graph_kernel(estimator, X, sample_weight)
        gamma, items = None, np.arange(n)
    elif rows.is_index:
        dtype = rows.index_dtype or getattr(X, "dtype", np.float64)
        kernel = IndexKernel("precomputed", X, dtype=dtype, diag=rows.diag)
        gamma, items = None, np.arange(n)
    else:
        # Dask rows: the data-driven gamma from one pass of Dask reductions
        resolve = X.resolve_kernel if isinstance(rows, DaskFitRows) else resolve_kernel
        kernel = resolve(
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
            nx.kernel_tile(kernel, X[: min(3, n)], X[: min(2, n)])
        gamma, items = kernel.params.get("gamma"), X
    if rows.is_index:  # the index kernel's blocks; items are indices, no features
        itemsize, n_features = np.dtype(kernel.dtype).itemsize, 0
    else:
        # numpy and torch (>= 2.1) dtypes both know their itemsize
        itemsize, n_features = X.dtype.itemsize, int(X.shape[1])
    return FitProblem(
        rows=rows,
        items=items,
        kernel=kernel,
        sample_weight=sample_weight,
        nx=nx,
        n_samples=n,
        n_features=n_features,
        is_index=rows.is_index,
        itemsize=itemsize,
        gamma=gamma,
        gamma_selection=selection,
        t=t,
        t_selection=t_selection,
        tensor_io=data.tensor_io,
        input=data,
    )
