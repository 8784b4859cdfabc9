"""The fit problem: one fit's inputs, checked and resolved once.

Every kernel estimator's ``fit`` is *check -> prepare -> core -> publish*.
:func:`prepare` builds a frozen :class:`FitProblem` from the user's X and
``sample_weight``: the validated rows in the adapter of their kind
(:mod:`._rows`), the backend they run on, the resolved kernel, the host weights,
and how results go back to the user's array library.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._validation import check_sample_weight
from ..backends import get_backend
from ..backends._threads import one_thread_everywhere
from ..kernels._protocol import ResolvedKernel
from . import _device
from ._auto_gamma import resolve_auto_gamma
from ._kinds import kernel_kind
from ._rows import Rows, host_sample_weight, rows_of

# -------------------------------------------------------------------------- problem


@dataclass(frozen=True)
class FitProblem:
    """One fit's inputs, checked and resolved once (built by :func:`prepare`).

    Attributes
    ----------
    rows : Rows
        The validated input in its adapter (``rows.data``: on the run's backend).
    items : ndarray, sparse matrix, tensor, DaskRows or ndarray of indices
        What the core iterates on: the rows, or point indices for index kernels.
    kernel : ResolvedKernel
    sample_weight : ndarray of shape (n_samples,) or None
        Host weights (they drive sampling on the host).
    gamma_selection : GammaSelection or None
        ``gamma="auto"``'s record (None when no width was chosen).
    t, t_selection : float or None, TSelection or None
        The heat kernel's time and its record.
    tensor_io : bool
        Whether results go back to the user as tensors.
    """

    rows: Rows
    items: object
    kernel: ResolvedKernel
    sample_weight: np.ndarray | None
    gamma_selection: object = None
    t: float | None = None
    t_selection: object = None
    tensor_io: bool = False

    @property
    def nx(self):
        return self.rows.nx

    @property
    def n_samples(self):
        return self.rows.n_samples

    @property
    def itemsize(self):
        """Bytes of one value the core computes with."""
        return self.rows.compute_itemsize(self.kernel)

    @property
    def gamma(self):
        """The width the kernel uses (None for kernels without one, index kernels)."""
        return self.rows.kernel_width(self.kernel)

    def output(self, x):
        """A result of the core in the user's array library (tensors in, tensors out)."""
        return _device.convert_output(self.tensor_io, x)


def prepare(
    estimator, X, sample_weight, *, accept_dask=True, index_dtype=None, gamma_selection=None
):
    """Check the input, resolve the kernel: the :class:`FitProblem` of one fit.

    :func:`prepare_input`, then :func:`resolve_problem`; a fit that has something
    to do between the two (open a checkpoint on the checked input) calls them
    itself. Every check comes before any kernel work.

    Parameters
    ----------
    estimator : BaseKernelKMeans
    X : array-like, sparse matrix, tensor or Dask array
    sample_weight : array-like of shape (n_samples,) or None
    accept_dask : bool, default=True
        Whether a Dask array is read as Dask rows (else it is validated as an array).
    index_dtype : numpy dtype, optional
        dtype of the blocks of an index kernel (None: the matrix's own dtype).
    gamma_selection : GammaSelection, optional
        A width chosen before (a resumed checkpoint's): used instead of choosing again.
    """
    rows, w = prepare_input(
        estimator, X, sample_weight, accept_dask=accept_dask, index_dtype=index_dtype
    )
    return resolve_problem(estimator, rows, w, gamma_selection=gamma_selection)


def prepare_input(estimator, X, sample_weight, *, accept_dask=True, index_dtype=None):
    """The checked input of a fit: ``(rows, host sample_weight)``.

    In order: X validated, what the backend cannot do with the kernel's kind refused
    (:meth:`._kinds.PointKernel.check_backend`), X wrapped in the adapter of its kind
    (:meth:`._kinds.PointKernel.fit_rows`), the host weights checked.
    """
    X = rows_of(X).fit_input(estimator, accept_dask)  # Dask: the rows the fit gathers
    kind = kernel_kind(estimator.kernel)
    kind.check_backend(estimator, get_backend(X))  # what the torch backend does not do
    rows = kind.fit_rows(X, index_dtype)
    w = check_sample_weight(
        host_sample_weight(estimator, sample_weight), _device.host_shape(rows.data)
    )
    return rows, w


def resolve_problem(estimator, rows, sample_weight, *, gamma_selection=None):
    """The :class:`FitProblem` of checked input: the estimator's own checks of its
    parameters against it (``estimator._check_params_vs_input(rows)``: sizes,
    ``init``, memory), then ``gamma="auto"``'s selection (unless ``gamma_selection``
    is given) and the kernel."""
    estimator._check_params_vs_input(rows)
    if gamma_selection is not None:
        gamma, selection = gamma_selection.gamma, gamma_selection
    else:
        # gamma="auto" (and None for rbf / laplacian, see default_selects_width):
        # choose the width on a sample (refuses kernels without one).
        with one_thread_everywhere():  # small calls: no thread pays (see _threads)
            gamma, selection = resolve_auto_gamma(
                estimator.gamma,
                estimator.kernel,
                rows.data,
                estimator.n_clusters,
                sample_weight,
                estimator.random_state,
                estimator.kernel_params,
            )
    resolved = rows.resolve(estimator, gamma, sample_weight)
    return FitProblem(
        rows=rows,
        items=resolved.items,
        kernel=resolved.kernel,
        sample_weight=sample_weight,
        gamma_selection=selection,
        t=resolved.t,
        t_selection=resolved.t_selection,
        tensor_io=getattr(estimator, "_tensor_io", False),
    )
