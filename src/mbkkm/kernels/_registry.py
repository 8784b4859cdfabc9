"""The kernel registry: one :class:`KernelSpec` per kernel mbkkm knows.

A spec holds everything about one kernel: its names, parameters and default-gamma
rule, its formula and scikit-learn name, whether it is normalised or needs
non-negative data, and either

* its **tiles** (pairwise kernels): per backend, the functions computing a block
  K(X, Y), the diagonal K(x, x) and, optionally, what a block can reuse of a fixed
  support Y (:class:`Tiles`); a backend without an entry cannot run the kernel, or
* its **builder** (transductive graph kernels): the function building the n x n
  matrix over the training points; there is no K(x, y) for a new point.

Everything that lists or dispatches kernels reads :data:`KERNELS`:
:func:`~mbkkm.kernels.resolve_kernel` and :func:`~mbkkm.kernels.graph_kernel_matrix`
(lookup, parameters, defaults and error messages), :meth:`Kernel.tile` (the
backend's implementation), the estimators' parameter constraints, the CLI choices,
the device checks, and the tests' parametrisation: one registry per option set.

Tiles are named by module and function (:class:`Tiles`) and imported on first use,
so the torch tiles (:mod:`mbkkm.kernels._torch_tiles`) load only when a torch
backend asks for them: ``import mbkkm`` never imports torch.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from ._graph import knn_kernel
from ._spectral import heat_kernel

#: What ``gamma=None`` may mean (see :attr:`KernelSpec.default_gamma`).
DEFAULT_GAMMA_RULES = ("data", "n_features", "one", None)

#: The parameters a pairwise kernel may take (scikit-learn's names).
PAIRWISE_PARAMS = ("gamma", "degree", "coef0")


class Implementation(NamedTuple):
    """A kernel's functions on one backend, loaded (see :class:`Tiles`)."""

    tile: Callable
    diag: Callable
    prepare: Callable | None


@dataclass(frozen=True)
class Tiles:
    """Where a pairwise kernel's functions for one backend live.

    Attributes
    ----------
    module : str
        Module name, relative to :mod:`mbkkm.kernels` (``"._pairwise"``) or absolute.
    tile : str
        ``tile(X, Y, *, out=None, **cache, **params) -> (n_x, n_y)``, in X's dtype,
        written into ``out`` when given.
    diag : str
        ``diag(X, **params) -> (n,)``, the values K(x, x).
    prepare : str or None
        ``prepare(Y, **params) -> dict``: what ``tile`` can reuse for every row tile
        against the same ``Y`` (passed back as keyword arguments); None: nothing.
    """

    module: str
    tile: str
    diag: str
    prepare: str | None = None


@functools.cache
def _load(tiles: Tiles) -> Implementation:
    """The functions of ``tiles`` (the module is imported on the first call)."""
    module = importlib.import_module(tiles.module, package=__package__)
    prepare = getattr(module, tiles.prepare) if tiles.prepare else None
    return Implementation(getattr(module, tiles.tile), getattr(module, tiles.diag), prepare)


@dataclass(frozen=True)
class KernelSpec:
    """Everything about one named kernel.

    Attributes
    ----------
    name : str
        Registry name.
    params : tuple of str
        Pairwise kernels: the parameters among ``gamma``, ``degree``, ``coef0`` that
        it uses. Graph kernels: the keyword parameters of the builder (filled in from
        its signature when left empty).
    default_gamma : {"data", "n_features", "one", None}
        What ``gamma=None`` means: ``"data"`` is 1 / (mean squared pairwise
        distance) of the fitted data, ``"n_features"`` is 1 / n_features (as in
        scikit-learn), ``"one"`` is 1.0; None for kernels without gamma.
    formula : str
        The formula, for docs and error messages.
    sklearn_name : str or None
        The name of the same kernel in :func:`sklearn.metrics.pairwise.pairwise_kernels`.
    aliases : tuple of str
        Other names that resolve to this kernel.
    normalized : bool
        Whether K(x, x) = 1 for every x (then the paper's gamma is 1); for cosine this
        holds for every non-zero x (a zero row has K(x, x) = 0, as in scikit-learn).
    nonnegative_data : bool
        Whether the kernel is only defined for non-negative data.
    transductive : bool
        Whether the kernel is a matrix over the training points only (graph kernels),
        built by ``builder``; it has no tiles and no value for a new point.
    builder : callable or None
        Transductive kernels: ``builder(X, **params) -> (n, n)`` kernel matrix
        (sparse, dense or :class:`~mbkkm.kernels.LowRankKernel`).
    tiles : mapping of str to Tiles
        Pairwise kernels: backend name (``"numpy"``, ``"torch"``) -> its functions.
        ``"numpy"`` is required; a backend missing here cannot run the kernel.
    accepts_sparse : bool
        Whether its tile and diagonal take scipy.sparse (CSR) rows.
    """

    name: str
    params: tuple[str, ...] = ()
    default_gamma: str | None = None
    formula: str = ""
    sklearn_name: str | None = None
    aliases: tuple[str, ...] = ()
    normalized: bool = False
    accepts_sparse: bool = True
    nonnegative_data: bool = False
    transductive: bool = False
    builder: Callable | None = None
    tiles: Mapping[str, Tiles] = field(default_factory=dict)

    def __post_init__(self):
        if self.default_gamma not in DEFAULT_GAMMA_RULES:
            raise ValueError(
                f"KernelSpec {self.name!r}: default_gamma must be one of "
                f"{list(DEFAULT_GAMMA_RULES)}, got {self.default_gamma!r}"
            )
        if self.transductive:
            if self.builder is None or self.tiles:
                raise ValueError(
                    f"KernelSpec {self.name!r}: a transductive kernel has a builder and no tiles"
                )
            if not self.params:
                object.__setattr__(self, "params", tuple(_builder_params(self.builder)))
        else:
            if self.builder is not None or "numpy" not in self.tiles:
                raise ValueError(
                    f"KernelSpec {self.name!r}: a pairwise kernel has numpy tiles and no builder"
                )
            unknown = set(self.params) - set(PAIRWISE_PARAMS)
            if unknown:
                raise ValueError(
                    f"KernelSpec {self.name!r}: unknown parameters "
                    f"{sorted(unknown)}; expected some of {list(PAIRWISE_PARAMS)}"
                )
        object.__setattr__(self, "tiles", dict(self.tiles))

    @property
    def backends(self) -> tuple[str, ...]:
        """Names of the backends that have this kernel's tiles."""
        return tuple(self.tiles)

    @property
    def required_params(self) -> tuple[str, ...]:
        """Graph kernels: the builder's parameters without a default."""
        return () if self.builder is None else tuple(_builder_params(self.builder, required=True))

    def check_params(self, names) -> None:
        """Raise a ValueError at the first of ``names`` that is not one of :attr:`params`."""
        for key in names:
            if key not in self.params:
                raise ValueError(
                    f"kernel_params: {key!r} is not a parameter of kernel {self.name!r} "
                    f"(its parameters: {list(self.params)})"
                )

    def implementation(self, backend: str = "numpy") -> Implementation:
        """The tile, diagonal and prepare functions on ``backend``.

        Raises
        ------
        ValueError
            When the kernel has none there (a graph kernel, or a backend without
            this kernel), naming what is available.
        """
        tiles = self.tiles.get(backend)
        if tiles is None:
            raise ValueError(self._unavailable(backend))
        return _load(tiles)

    def _unavailable(self, backend):
        if self.transductive:
            return (
                f"kernel={self.name!r} is a graph (transductive) kernel: it is a matrix "
                "over the fitted points, not a function of two points. Pass it to an "
                "estimator's kernel= parameter, or build it with "
                "mbkkm.kernels.graph_kernel_matrix"
            )
        return (
            f"kernel={self.name!r} is not available on the {backend} backend; it "
            f"supports {kernel_names(include_aliases=False, backend=backend)} and "
            "callables. Use device=None or 'cpu' (numpy)"
        )

    # Compatibility: the numpy functions under their former names.
    @property
    def func(self) -> Callable | None:
        """The numpy tile (None for a graph kernel)."""
        return None if self.transductive else self.implementation("numpy").tile

    @property
    def diag(self) -> Callable | None:
        """The numpy diagonal (None for a graph kernel)."""
        return None if self.transductive else self.implementation("numpy").diag


def _builder_params(builder, required=False):
    """Keyword parameters of a graph kernel builder (after X)."""
    params = list(inspect.signature(builder).parameters.values())[1:]
    return [p.name for p in params if not required or p.default is inspect.Parameter.empty]


#: name -> spec of every registered kernel.
KERNELS: dict[str, KernelSpec] = {}

#: alias -> registry name.
ALIASES: dict[str, str] = {}


def register(spec: KernelSpec) -> KernelSpec:
    """Add a kernel (and its aliases) to the registry.

    Raises
    ------
    ValueError
        When the name or an alias is already taken by another kernel.
    """
    for name in (spec.name, *spec.aliases):
        owner = ALIASES.get(name, name if name in KERNELS else None)
        if owner is not None and owner != spec.name:
            raise ValueError(f"kernel name {name!r} is already registered for {owner!r}")
    KERNELS[spec.name] = spec
    ALIASES.update(dict.fromkeys(spec.aliases, spec.name))
    return spec


def canonical_name(name: str) -> str:
    """The registry name of ``name`` (itself unless it is an alias)."""
    return ALIASES.get(name, name)


def get_spec(name: str) -> KernelSpec | None:
    """The spec of a registry name or alias; None for anything else (a callable...)."""
    return KERNELS.get(ALIASES.get(name, name)) if isinstance(name, str) else None


def kernel_names(
    include_aliases: bool = True, *, transductive: bool | None = None, backend: str | None = None
) -> list[str]:
    """Sorted names of the registered kernels.

    Parameters
    ----------
    include_aliases : bool, default=True
        Include the aliases (``"gaussian"``, ``"poly"``).
    transductive : bool or None, default=None
        True: only graph kernels; False: only pairwise kernels; None: all.
    backend : str or None, default=None
        Only the kernels with tiles on this backend (``"numpy"``, ``"torch"``).
    """

    def keep(spec):
        return transductive in (None, spec.transductive) and backend in (None, *spec.tiles)

    names = [n for n, s in KERNELS.items() if keep(s)]
    if include_aliases:
        names += [a for a, n in ALIASES.items() if keep(KERNELS[n])]
    return sorted(names)


def describe_kernels() -> str:
    """A reST bullet list of the registered kernels (for docstrings and docs)."""
    lines = []
    for name in sorted(KERNELS, key=lambda n: (KERNELS[n].transductive, n)):
        spec = KERNELS[name]
        aliases = [a for a, n in ALIASES.items() if n == name]
        alias = f" (alias {', '.join(f'``{a}``' for a in aliases)})" if aliases else ""
        if spec.transductive:
            where = "graph kernel, fitted points only"
        else:
            where = "backends: " + ", ".join(spec.backends)
        params = ", ".join(spec.params) or "no parameters"
        lines.append(f"- ``{name}``{alias}: {spec.formula}; {params}; {where}")
    return "\n".join(lines)


class _GraphKernelNames(Sequence):
    """The names of the registered graph kernels, read from :data:`KERNELS` when
    used (a kernel registered later is included); ``x in GRAPH_KERNELS`` is False
    for anything that is not a graph kernel's name or alias."""

    def _names(self):
        return tuple(n for n, s in KERNELS.items() if s.transductive)

    def __getitem__(self, i):
        return self._names()[i]

    def __len__(self):
        return len(self._names())

    def __contains__(self, name):
        return getattr(get_spec(name), "transductive", False)

    def __eq__(self, other):
        return tuple(self) == tuple(other) if isinstance(other, Sequence) else NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-style equality: unhashable

    def __repr__(self):
        return repr(self._names())


#: Names of the graph (transductive) kernels.
GRAPH_KERNELS = _GraphKernelNames()


def check_backend_kernel(kernel, backend: str) -> None:
    """Raise the registry's ValueError when ``backend`` cannot evaluate ``kernel``.

    ``kernel`` is a name (alias or registry name), a resolved
    :class:`~mbkkm.kernels.Kernel`, or a callable; callables run on every backend,
    and a name the registry does not know is left to the parameter validation.
    """
    if (callable(kernel) and not hasattr(kernel, "name")) or getattr(kernel, "is_callable", False):
        return
    spec = get_spec(getattr(kernel, "name", kernel))
    if spec is not None and backend not in spec.tiles:
        raise ValueError(spec._unavailable(backend))


def check_torch_kernel(kernel) -> None:
    """:func:`check_backend_kernel` for the torch backend."""
    check_backend_kernel(kernel, "torch")


# --- the kernels ------------------------------------------------------------------------


def _tiles(tile, diag, prepare=None, *, torch=True):
    """numpy tiles from :mod:`._pairwise` and, when ``torch``, the same-named ones
    from :mod:`._torch_tiles`."""
    out = {"numpy": Tiles("._pairwise", tile, diag, prepare)}
    if torch:
        out["torch"] = Tiles("._torch_tiles", tile, diag)
    return out


for _spec in (
    KernelSpec(
        "rbf",
        ("gamma",),
        "data",
        normalized=True,
        aliases=("gaussian",),
        formula="exp(-gamma ||x - y||^2)",
        sklearn_name="rbf",
        tiles=_tiles("rbf", "diag_ones", prepare="rbf_prepare"),
    ),
    KernelSpec(
        "laplacian",
        ("gamma",),
        "data",
        normalized=True,
        formula="exp(-gamma ||x - y||_1)",
        sklearn_name="laplacian",
        tiles=_tiles("laplacian", "diag_ones"),
    ),
    KernelSpec(
        "polynomial",
        ("gamma", "degree", "coef0"),
        "n_features",
        aliases=("poly",),
        formula="(gamma <x, y> + coef0)^degree",
        sklearn_name="polynomial",
        tiles=_tiles("polynomial", "diag_polynomial"),
    ),
    KernelSpec(
        "linear",
        (),
        None,
        formula="<x, y>",
        sklearn_name="linear",
        tiles=_tiles("linear", "diag_linear"),
    ),
    KernelSpec(
        "cosine",
        (),
        None,
        normalized=True,
        formula="<x, y> / (||x|| ||y||)",
        sklearn_name="cosine",
        tiles=_tiles("cosine", "diag_cosine", prepare="cosine_prepare"),
    ),
    KernelSpec(
        "sigmoid",
        ("gamma", "coef0"),
        "n_features",
        formula="tanh(gamma <x, y> + coef0)",
        sklearn_name="sigmoid",
        tiles=_tiles("sigmoid", "diag_sigmoid"),
    ),
    KernelSpec(
        # No torch tiles: sum_i (x_i - y_i)^2 / (x_i + y_i) has no GEMM form.
        "chi2",
        ("gamma",),
        "one",
        normalized=True,
        nonnegative_data=True,
        accepts_sparse=False,
        formula="exp(-gamma sum_i (x_i - y_i)^2 / (x_i + y_i))",
        sklearn_name="chi2",
        tiles=_tiles("chi2", "diag_ones", torch=False),
    ),
    KernelSpec(
        "knn",
        transductive=True,
        builder=knn_kernel,
        formula="D^-1 A D^-1, A the symmetrised k-NN adjacency with self-loops",
    ),
    KernelSpec(
        "heat",
        transductive=True,
        builder=heat_kernel,
        formula="exp(-t (I - D^-1/2 A D^-1/2)) on the k-NN graph",
    ),
):
    register(_spec)
