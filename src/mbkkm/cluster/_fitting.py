"""What every fit does around its core: all-or-nothing attributes, and the warnings
when clusters end empty or the kernel is indefinite."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from .._warn import warn
from ..backends._threads import thread_policy


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
