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

from .._validation import check_sample_weight, short_input_errors
from ..backends import get_backend, resolve_device
from ..backends._threads import one_thread_everywhere
from ..kernels._protocol import ResolvedKernel
from . import _device
from ._auto_gamma import resolve_auto_gamma
from ._kinds import kernel_kind
from ._rows import Rows, host_sample_weight, rows_of


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
    stored = kind.stored_matrix(X)
    if stored is not None:  # a sparse or low-rank kernel matrix, taken as it is (host)
        X, dev, given, names = stored, resolve_device(device), rows_of(stored), None
    else:
        given = rows_of(X)
        names = _get_feature_names(X)
        # the checks of X's kind, and where it runs (Dask: rows read lazily)
        X, dev = given.fit_data(
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


def resolve_problem(estimator, data, *, gamma_selection=None):
    """The :class:`FitProblem` of a checked :class:`FitInput`: ``gamma="auto"``'s
    selection (unless ``gamma_selection``, a width chosen before, is given), then the
    kernel (``estimator``: its kernel parameters are read, nothing is written).

    The kernel's kind resolves it (:meth:`._kinds.PointKernel.resolve`): a kernel on
    points with its checks, the index kernel of a stored matrix, or a graph kernel
    built on the k-NN graph of the points.
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
    resolved = kernel_kind(estimator.kernel).resolve(estimator, rows, gamma, sample_weight)
    return FitProblem(
        rows=rows,
        items=resolved.items,
        kernel=resolved.kernel,
        sample_weight=sample_weight,
        nx=nx,
        n_samples=n,
        n_features=resolved.n_features,
        is_index=rows.is_index,
        itemsize=resolved.itemsize,
        gamma=resolved.gamma,
        gamma_selection=selection,
        t=resolved.t,
        t_selection=resolved.t_selection,
        tensor_io=data.tensor_io,
        input=data,
    )
