"""The parameters every kernel estimator shares: their constraints (scikit-learn's
``_parameter_constraints`` format) and the checks of parameters against the data."""

from __future__ import annotations

from numbers import Integral, Real

from sklearn.utils._param_validation import Interval, StrOptions

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
