"""The kernel registry: one place that names every kernel mbkkm knows.

The lookup, the list of allowed names in error messages and docstrings, and the
test parametrisation all come from :data:`KERNELS` (see STYLE.md, 3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from . import _pairwise as pw


@dataclass(frozen=True)
class KernelSpec:
    """Description of a named kernel.

    Attributes
    ----------
    name : str
        Registry name.
    func : callable
        ``func(X, Y, *, out=None, **params) -> (n_x, n_y)`` block.
    diag : callable
        ``diag(X, **params) -> (n,)``, the values K(x, x).
    params : tuple of str
        The parameters among ``gamma``, ``degree``, ``coef0`` that it uses.
    default_gamma : {"data", "n_features", "one", None}
        What ``gamma=None`` means: ``"data"`` is 1 / (mean squared pairwise
        distance) of the fitted data, ``"n_features"`` is 1 / n_features (as in
        scikit-learn), ``"one"`` is 1.0.
    normalized : bool
        Whether K(x, x) = 1 for every x (then the paper's gamma is 1); for cosine this
        holds for every non-zero x (a zero row has K(x, x) = 0, as in scikit-learn).
    nonnegative_data : bool
        Whether the kernel is only defined for non-negative data.
    accepts_sparse : bool
        Whether ``func`` and ``diag`` take scipy.sparse (CSR) rows.
    formula : str
        The formula, for docs and error messages.
    sklearn_name : str or None
        The name of the same kernel in :func:`sklearn.metrics.pairwise.pairwise_kernels`.
    """

    name: str
    func: Callable | None
    diag: Callable | None
    params: tuple[str, ...] = ()
    default_gamma: str | None = None
    normalized: bool = False
    nonnegative_data: bool = False
    accepts_sparse: bool = True
    formula: str = ""
    sklearn_name: str | None = None
    aliases: tuple[str, ...] = field(default=())


KERNELS: dict[str, KernelSpec] = {}
ALIASES: dict[str, str] = {}


def register(spec: KernelSpec) -> KernelSpec:
    """Add a kernel (and its aliases) to the registry."""
    KERNELS[spec.name] = spec
    for alias in spec.aliases:
        ALIASES[alias] = spec.name
    return spec


def canonical_name(name: str) -> str:
    return ALIASES.get(name, name)


def kernel_names(include_aliases: bool = True) -> list[str]:
    names = list(KERNELS)
    if include_aliases:
        names += list(ALIASES)
    return sorted(names)


register(KernelSpec(
    "rbf", pw.rbf, pw.diag_ones, ("gamma",), "data", normalized=True,
    formula="exp(-gamma ||x - y||^2)", sklearn_name="rbf", aliases=("gaussian",),
))
register(KernelSpec(
    "laplacian", pw.laplacian, pw.diag_ones, ("gamma",), "data", normalized=True,
    formula="exp(-gamma ||x - y||_1)", sklearn_name="laplacian",
))
register(KernelSpec(
    "polynomial", pw.polynomial, pw.diag_polynomial, ("gamma", "degree", "coef0"),
    "n_features", formula="(gamma <x, y> + coef0)^degree", sklearn_name="polynomial",
    aliases=("poly",),
))
register(KernelSpec(
    "linear", pw.linear, pw.diag_linear, (), None, formula="<x, y>", sklearn_name="linear",
))
register(KernelSpec(
    "cosine", pw.cosine, pw.diag_cosine, (), None, normalized=True,
    formula="<x, y> / (||x|| ||y||)", sklearn_name="cosine",
))
register(KernelSpec(
    "sigmoid", pw.sigmoid, pw.diag_sigmoid, ("gamma", "coef0"), "n_features",
    formula="tanh(gamma <x, y> + coef0)", sklearn_name="sigmoid",
))
register(KernelSpec(
    "chi2", pw.chi2, pw.diag_ones, ("gamma",), "one", normalized=True, nonnegative_data=True,
    accepts_sparse=False, formula="exp(-gamma sum_i (x_i - y_i)^2 / (x_i + y_i))",
    sklearn_name="chi2",
))
