"""Checks and resolution shared by the estimators (validate -> resolve -> core)."""

from __future__ import annotations

import functools
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn import get_config
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions

from .._core import draw_init_indices
from .._validation import check_sample_weight  # noqa: F401 (shared with mbkkm._dask)
from ..backends import _sparse
from ..kernels import kernel_names

#: Parameter constraints shared by every kernel estimator (scikit-learn's format).
KERNEL_CONSTRAINTS = {
    "kernel": [StrOptions(set(kernel_names())), callable],
    "gamma": [Interval(Real, 0, None, closed="neither"),
              StrOptions({"auto", "mean-distance"}), None],
    "degree": [Interval(Real, 0, None, closed="left")],
    "coef0": [Interval(Real, None, None, closed="neither")],
    "kernel_params": [dict, None],
}

COMMON_CONSTRAINTS = {
    "n_clusters": [Interval(Integral, 1, None, closed="left")],
    "init": [StrOptions({"k-means++", "random"}), "array-like"],
    "n_init": [Interval(Integral, 1, None, closed="left")],
    "max_iter": [Interval(Integral, 1, None, closed="left")],
    "tol": [Interval(Real, 0, None, closed="left"), None],
    "random_state": ["random_state"],
    "verbose": ["verbose"],
    "working_memory": [Interval(Real, 0, None, closed="neither"), None],
}


def check_n_clusters_vs_samples(n_clusters, n_samples):
    if n_samples < n_clusters:
        raise ValueError(
            f"n_samples={n_samples} should be >= n_clusters={n_clusters}: fewer samples "
            "than clusters"
        )


def chunk_rows(working_memory, row_floats, itemsize):
    """Rows per chunk so that one chunk's temporaries fit ``working_memory`` MiB.

    ``row_floats`` is the number of values one row needs in the chunk's temporaries
    (kernel row against the support, distances, ...). ``working_memory=None`` uses
    scikit-learn's global ``working_memory`` setting (default 1024 MiB).
    """
    if working_memory is None:
        working_memory = get_config()["working_memory"]
    budget = working_memory * 2**20
    rows = int(budget // max(1, 2 * row_floats * itemsize))
    return max(1, rows)


def label_chunk_rows(working_memory, n_support, n_clusters, itemsize):
    """Rows per chunk of the labelling pass: a kernel tile against ``n_support``
    support points plus about 3 k + 2 values per row (block sums, distances,
    minima) within ``working_memory`` (:func:`chunk_rows`). The memory plan and the
    labelling pass both size their chunks here."""
    return chunk_rows(working_memory, n_support + 3 * n_clusters + 2, itemsize)


class EmptyClusterWarning(ConvergenceWarning):
    """Some clusters hold no point of the fitted data at the end of fit.

    A subclass of :class:`sklearn.exceptions.ConvergenceWarning`, so
    ``warnings.simplefilter("ignore", ConvergenceWarning)`` silences it too.
    Typical causes: ``n_clusters`` larger than the number of distinct points,
    or duplicate points.
    """


def warn_empty_clusters(labels, n_clusters, estimator):
    """Warn (EmptyClusterWarning) when some of the n_clusters labels never occur."""
    if not isinstance(labels, np.ndarray) or labels.size == 0:
        return  # a Dask array: counting would compute it
    n_empty = n_clusters - np.unique(labels).size
    if n_empty > 0:
        warnings.warn(
            f"{type(estimator).__name__}: {n_empty} of the n_clusters={n_clusters} "
            f"clusters hold no point of the fitted data at the end of fit (empty "
            f"clusters); n_clusters may exceed the number of distinct points (duplicate "
            f"points in X?)",
            EmptyClusterWarning, stacklevel=3,
        )


def restore_on_error(method):
    """Make a fitting method all-or-nothing: on any exception (KeyboardInterrupt
    included) the estimator's attributes are restored to what they were before.

    The estimators never modify a fitted attribute in place (partial_fit works
    on copies), so a shallow copy of ``__dict__`` is a complete snapshot.
    """

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        snapshot = dict(self.__dict__)
        try:
            return method(self, *args, **kwargs)
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(snapshot)
            raise

    return wrapper


_OVERFLOW_CHUNK = 65536


def check_no_overflow(X, kernel=None, input_name="X"):
    """Raise a ValueError when X is finite but too large for the kernel arithmetic.

    The kernel blocks are computed in X's dtype from squared row norms and dot
    products (||x - y||^2 = ||x||^2 - 2 <x, y> + ||y||^2), so finite data whose
    squared norms overflow (|x| above about 1e154 in float64, 1e19 in float32)
    would silently give NaN distances. With a resolved point ``kernel``, K(x, x)
    must be finite too (for a positive semi-definite kernel that bounds every
    |K(x, y)| <= sqrt(K(x, x) K(y, y))). Read in row chunks (a memmap is never
    loaded whole, a scipy sparse X never densified: its rows are read in ranges of
    bounded stored values that share X's arrays). Dask inputs and non-arrays are
    skipped.
    """
    sparse = _sparse.is_sparse(X)
    if sparse:
        X = _sparse.as_csr(X)
    elif not isinstance(X, np.ndarray) or X.ndim != 2:
        return
    if X.dtype.kind != "f":
        return
    check_diag = kernel is not None and not getattr(kernel, "is_callable", True)
    with np.errstate(over="ignore", invalid="ignore"):
        ranges = (_sparse.row_chunks(X) if sparse else
                  ((s, s + _OVERFLOW_CHUNK) for s in range(0, X.shape[0], _OVERFLOW_CHUNK)))
        for start, stop in ranges:
            chunk = _sparse.row_range(X, start, stop)  # a view (shares X's arrays)
            sq = (_sparse.row_norms_sq(chunk) if sparse
                  else np.einsum("ij,ij->i", chunk, chunk))
            if not np.all(np.isfinite(sq)):
                big = float(np.max(np.abs(chunk.data if sparse else chunk)))
                scaler = "MaxAbsScaler" if sparse else "StandardScaler"
                raise ValueError(
                    f"{input_name} has values too large for {X.dtype} arithmetic: squared "
                    f"row norms overflow (max |{input_name}| = {big:.3g}). Rescale "
                    f"{input_name} (for example with sklearn.preprocessing.{scaler})"
                    + (" or use float64" if X.dtype != np.float64 else "")
                )
            if check_diag:
                diag = np.asarray(kernel.diag(chunk))
                if not np.all(np.isfinite(diag)):
                    raise ValueError(
                        f"{input_name}: the kernel {kernel!r} overflows in {X.dtype} on "
                        f"these values (K(x, x) is not finite). Rescale {input_name} or "
                        "change the kernel parameters"
                    )


def draw_init_subsample(random_state, n_samples, init_size, n_clusters, sample_weight=None):
    """Indices of the initialisation subsample, sorted; with weights, of positive weight.

    k-means++ and "random" draw centers with probability proportional to the weights,
    so a subsample made only of zero-weight points has no valid draw (0 / 0). With
    weights the subsample is drawn among the positive-weight points; when they are
    fewer than ``n_clusters``, it is all of them plus zero-weight points up to
    ``init_size``. Without zero weights the draws are exactly those of
    :func:`mbkkm._core.draw_init_indices`.
    """
    if sample_weight is None or np.all(sample_weight > 0):
        return draw_init_indices(random_state, n_samples, init_size)
    pos = np.flatnonzero(sample_weight > 0)
    if pos.size >= n_clusters:
        return pos[draw_init_indices(random_state, pos.size, min(init_size, pos.size))]
    zero = np.flatnonzero(sample_weight <= 0)
    fill = zero[draw_init_indices(random_state, zero.size, max(0, init_size - pos.size))]
    return np.sort(np.concatenate([pos, fill]))
