"""Checks and resolution shared by the estimators (validate -> resolve -> core)."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn import get_config
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import _check_sample_weight

from ..kernels import kernel_names

#: Parameter constraints shared by every kernel estimator (scikit-learn's format).
KERNEL_CONSTRAINTS = {
    "kernel": [StrOptions(set(kernel_names())), callable],
    "gamma": [Interval(Real, 0, None, closed="neither"), None],
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


def check_sample_weight(sample_weight, X, dtype=np.float64):
    """Validated, non-negative weights with a positive sum (or None for unit weights)."""
    if sample_weight is None:
        return None
    try:
        sw = _check_sample_weight(sample_weight, X, dtype=dtype, ensure_non_negative=True)
    except ValueError as exc:
        msg = str(exc)
        if "sample_weight" not in msg:
            msg = f"sample_weight: {msg}"
        raise ValueError(msg) from exc
    if not np.all(np.isfinite(sw)):
        raise ValueError("sample_weight must be finite")
    if sw.sum() <= 0:
        raise ValueError("sample_weight must have a positive sum; got all zeros")
    return sw


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
