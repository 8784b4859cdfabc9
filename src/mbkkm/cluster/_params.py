"""The parameters every kernel estimator shares: their constraints (scikit-learn's
``_parameter_constraints`` format) and the checks of parameters against the data."""

from __future__ import annotations

from numbers import Integral, Real

from sklearn.utils._param_validation import Interval, StrOptions

from ..kernels import kernel_names

#: Parameter constraints shared by every kernel estimator (scikit-learn's format).
KERNEL_CONSTRAINTS = {
    "kernel": [StrOptions(set(kernel_names()) | {"precomputed"}), callable],
    "gamma": [
        Interval(Real, 0, None, closed="neither"),
        StrOptions({"auto", "mean-distance"}),
        None,
    ],
    "degree": [Interval(Real, 0, None, closed="left")],
    "coef0": [Interval(Real, None, None, closed="neither")],
    "kernel_params": [dict, None],
    "device": "no_validation",  # checked by mbkkm.backends.resolve_device
}

COMMON_CONSTRAINTS = {
    "n_clusters": [Interval(Integral, 1, None, closed="left")],
    "init": [StrOptions({"k-means++", "random"}), "array-like", callable],
    "n_init": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
    "init_size": [Interval(Integral, 1, None, closed="left"), None],
    "max_iter": [Interval(Integral, 1, None, closed="left")],
    "tol": [Interval(Real, 0, None, closed="left"), None],
    "random_state": ["random_state"],
    "verbose": ["verbose"],
    "working_memory": [Interval(Real, 0, None, closed="neither"), None],
}


#: The fitted attributes of the resolved kernel, the same in every kernel estimator's
#: docstring (where ``%(resolved_kernel_attributes)s`` stands); see :func:`shared_doc`.
RESOLVED_KERNEL_ATTRIBUTES = """\
    kernel_ : mbkkm.kernels.Kernel or index kernel
        The kernel with every parameter resolved (for example the data-driven
        gamma). For "precomputed" and the graph kernels, an index kernel: the
        stored kernel matrix, whose items are point indices (``kernel_.name`` is
        "precomputed", "knn" or "heat"; ``kernel_.params`` the resolved parameters).
    gamma_ : float or None
        The width the fit used (rbf, laplacian, polynomial, sigmoid, chi2); None for
        kernels without one.
    gamma_selection_ : GammaSelection or None
        With ``gamma="auto"``: the candidates, their scores and the choice
        (``.table()``, ``.plot()``); None otherwise.
    t_ : float or None
        ``kernel="heat"``: the diffusion time used (chosen with ``t="auto"``, the
        default); None for other kernels.
    t_selection_ : TSelection or None
        ``kernel="heat"`` with ``form="laplacian"``: the candidate times, the
        rank and error bound at each, their normalised-cut scores and the choice
        (``.table()``, ``.plot()``); None otherwise.
"""


def shared_doc(cls):
    """Class decorator: the shared attribute descriptions put into ``cls.__doc__``."""
    if cls.__doc__ is not None:  # None under python -OO
        cls.__doc__ = cls.__doc__.replace(
            "    %(resolved_kernel_attributes)s\n", RESOLVED_KERNEL_ATTRIBUTES
        )
    return cls
