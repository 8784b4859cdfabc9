"""What every fit does around its core: all-or-nothing attributes, and the warning
when clusters end empty."""

from __future__ import annotations

import functools

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from .._warn import warn


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
        warn(
            f"{type(estimator).__name__}: {n_empty} of the n_clusters={n_clusters} "
            f"clusters hold no point of the fitted data at the end of fit (empty "
            f"clusters); n_clusters may exceed the number of distinct points (duplicate "
            f"points in X?)",
            EmptyClusterWarning)


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
