"""The kernel registry, one :class:`KernelSpec` per kernel mbkkm knows, and the
resolved :class:`Kernel` that uses it.

A spec holds everything about one kernel: its names, parameters and default-gamma
rule, its formula and scikit-learn name, whether it is normalised or needs
non-negative data, and either

* its **tiles** (pairwise kernels): per backend, the functions computing a block
  K(X, Y), the diagonal K(x, x) and, optionally, what a block can reuse of a fixed
  support Y (:class:`Tiles`); a backend without an entry cannot run the kernel, or
* its **builder** (transductive graph kernels): the function building the n x n
  matrix over the training points; there is no K(x, y) for a new point.

Everything that lists or dispatches kernels reads :data:`KERNELS`:
:func:`resolve_kernel` and :func:`graph_kernel_matrix` (lookup, parameters,
defaults and error messages), :meth:`Kernel.tile` (the backend's implementation),
the estimators' parameter constraints, the CLI choices, the device checks, and the
tests' parametrisation: one registry per option set.

Tiles are named by module and function (:class:`Tiles`) and imported on first use,
so the torch tiles (:mod:`mbkkm.kernels._torch_tiles`) load only when a torch
backend asks for them: ``import mbkkm`` never imports torch.

:func:`resolve_kernel` is the boundary: it checks the user's kernel arguments
against the registry and the data, computes data-driven defaults, and returns a
:class:`Kernel` (a named or callable kernel with all parameters fixed) that the
core calls without further checks. :func:`graph_kernel_matrix` is the same
boundary for the graph kernels.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from .._validation import unknown_name_message
from ..backends import get_backend, is_tensor
from ..backends._numpy import as_csr, row_chunks, row_range
from ..backends._threads import parallel_parts, threads_for
from ._graph import knn_kernel
from ._pairwise import check_callable_tile, diag_of_tiles, rbf_augment, write_into
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
    for spec in sorted(KERNELS.values(), key=lambda s: (s.transductive, s.name)):
        aliases = [a for a, n in ALIASES.items() if n == spec.name]
        alias = f" (alias {', '.join(f'``{a}``' for a in aliases)})" if aliases else ""
        where = "backends: " + ", ".join(spec.backends)
        if spec.transductive:
            where = "graph kernel, fitted points only"
        params = ", ".join(spec.params) or "no parameters"
        lines.append(f"- ``{spec.name}``{alias}: {spec.formula}; {params}; {where}")
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
        formula="<x, y>",
        sklearn_name="linear",
        tiles=_tiles("linear", "diag_linear"),
    ),
    KernelSpec(
        "cosine",
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


# --- the resolved kernel ----------------------------------------------------------------

_CHUNK_ROWS = 65536

#: Named kernels whose numpy tile is one GEMM and an elementwise map (both release
#: the GIL), computed in row parts on the policy's threads when large enough.
_ROW_PARALLEL = frozenset({"rbf", "linear", "polynomial", "sigmoid", "cosine"})
#: The elementwise map (clip and exp for rbf) per tile entry, counted as this many
#: multiply-adds of the GEMM when sizing the parts.
_MAP_WORK = 16


#: rbf's tiles compute ||x - y||^2 as |x|^2 - 2 <x, y> + |y|^2, which cancels the
#: digits of the distance when the rows sit far from the origin: float32 rows at
#: latitude 48.85 spread over 0.01 lose all of them. Where the centre of a sample of
#: rows is this many times its spread away (squared: |mu|^2 > ratio * mean |x - mu|^2),
#: the kernel subtracts it from both sides of every tile (:attr:`Kernel.offset`): the
#: same function, its distances computed near the origin. Below, the loss is at most
#: a few bits, and the tiles are left as they are.
OFFSET_RATIO = 64.0
#: Rows (evenly spaced) whose centre and spread decide the offset.
OFFSET_SAMPLE = 1024


def origin_offset(sample):
    """The point to subtract from rows before |x|^2 - 2 <x, y> + |y|^2 (float64, shape
    (d,)): the centre of the rows of ``sample`` (a host array), or None where they
    sit near the origin (:data:`OFFSET_RATIO`) or are sparse (kept sparse: a shift
    would densify them). rbf's tiles, and mini-batch k-means' distances to centers
    that sit far from the origin."""
    if sp.issparse(sample):
        return None
    sample = np.asarray(sample, dtype=np.float64)
    mu = sample.mean(axis=0)
    spread = float(np.mean(np.sum((sample - mu) ** 2, axis=1)))
    return mu if float(mu @ mu) > OFFSET_RATIO * spread else None


def _dense_float(A):
    """Whether A is a 2-D numpy array of floats (not a subclass, sparse or a tensor)."""
    return type(A) is np.ndarray and A.ndim == 2 and A.dtype.kind == "f"


def mean_squared_pairwise_distance(X, sample_weight=None):
    """Mean of ||x - y||^2 over all ordered pairs (x, y) of rows of X, in O(n d).

    mean_{x,y} ||x - y||^2 = 2 mean_x ||x||^2 - 2 ||mean_x x||^2 = 2 sum_f Var(X[:, f]),
    weighted by ``sample_weight`` when given. Computed by X's backend
    (:meth:`mbkkm.backends.NumpyBackend.mean_squared_pairwise_distance`): in float64
    over row chunks, so a float32 memmap is never copied whole, and a torch tensor is
    reduced on its device; a scipy sparse X is never densified (:func:`_msd_sparse`).
    """
    if sp.issparse(X):
        return _msd_sparse(X, sample_weight)
    return get_backend(X).mean_squared_pairwise_distance(X, sample_weight)


def _msd_sparse(X, sample_weight=None):
    """:func:`mean_squared_pairwise_distance` of a sparse X, without densifying it.

    The same two passes (mean, then centred squares), the centred squares split
    into stored and implicit zeros: with W = sum_x w_x, mu = sum_x w_x x / W and
    W_f = sum of w_x over the rows x that store feature f,

        sum_x w_x (x_f - mu_f)^2 = sum_{stored (x, f)} w_x (x_f - mu_f)^2 + (W - W_f) mu_f^2.

    O(nnz + d) work in float64, over row chunks of the CSR that hold a bounded
    number of stored values (views, never copies: temporaries of a few MB).
    """
    X = as_csr(X)
    n, d = X.shape
    w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    total = float(n) if w is None else float(w.sum())

    def chunks():  # each row chunk, with the weight of its row for each stored value
        for start, stop in row_chunks(X):
            chunk = row_range(X, start, stop)
            wc = np.ones(chunk.shape[0]) if w is None else w[start:stop]  # no (n,) array
            yield chunk, np.repeat(wc, np.diff(chunk.indptr))

    s = np.zeros(d)
    for chunk, we in chunks():  # w^T chunk as a (d,) vector
        s += np.bincount(chunk.indices, weights=we * chunk.data, minlength=d)
    mean = s / total
    ss = 0.0
    w_stored = np.zeros(d)
    for chunk, we in chunks():
        dc = chunk.data.astype(np.float64) - mean[chunk.indices]
        ss += float(we @ (dc * dc))
        w_stored += np.bincount(chunk.indices, weights=we, minlength=d)
    ss += float((total - w_stored) @ (mean * mean))
    return 2.0 * ss / total


class Kernel:
    """A kernel with every parameter resolved.

    ``kernel.tile(X, Y, out=None)`` returns the ``(len(X), len(Y))`` block in X's
    dtype and ``kernel.diag(X)`` K(x, x) for each row, of numpy arrays or torch
    tensors (the registry's function for X's library); no backend is passed, and
    no backend calls the kernel. ``kernel(X, Y, out=None, **cache)`` is the numpy
    tile with what :meth:`prepare` computed for X.

    Parameters
    ----------
    name : str
        Registry name, or ``"callable"``.
    params : dict
        Resolved parameters (for a named kernel: those among gamma, degree,
        coef0 that it uses; for a callable: ``kernel_params``).
    func : callable, optional
        The user's callable ``func(X, Y, **params) -> (n_x, n_y)``.
    """

    #: Whether the kernel is a user's callable (also read from models saved before it
    #: was an attribute, which could not hold a callable).
    is_callable = False
    #: A point near the data, subtracted from the rows of every tile and diagonal
    #: where the data sit far from the origin (:func:`origin_offset`), else None (also
    #: for models saved before it existed). Set by the estimators for rbf (whose
    #: values it leaves as they are) and for the linear kernel of mini-batch k-means'
    #: k-means++ (whose distances it leaves as they are).
    offset = None
    #: Whether a callable is called with torch tensors also where the work is on the
    #: host (numpy rows: k-means++ on a host copy of its points), as it is everywhere
    #: else in a fit on torch (:func:`resolve_kernel` with X a tensor).
    tensor_calls = False

    def __init__(self, name, params, func=None):
        self.name = name
        self.params = dict(params)
        self._user_func = func
        self.is_callable = func is not None
        self._func = self._diag = None
        self.normalized = func is None and KERNELS[name].normalized
        if func is None:
            self._func, self._diag, _ = KERNELS[name].implementation("numpy")

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"Kernel({self.name!r}{', ' if args else ''}{args})"

    def prepare(self, X):
        """What :meth:`__call__` can reuse across calls with the same numpy left operand ``X``.

        A dict from the spec's numpy ``prepare`` (for rbf the left side of the GEMM,
        ``X_aug``); nothing for other kernels. The labelling pass computes
        K(S, X_chunk) tiles against one support S.
        """
        if self._user_func is not None:
            return {}
        prepare = KERNELS[self.name].implementation("numpy").prepare
        if self.offset is not None:
            X = self.shifted(X)
        return {} if prepare is None else prepare(X, **self.params)

    def prepare_right(self, Y, Y_norms_sq=None):
        """What :meth:`__call__` can reuse across calls with the same right operand ``Y``.

        For rbf on dense float rows, the right side of the GEMM (``Y_aug``, exactly what
        each call would compute, from ``Y_norms_sq`` when given); nothing otherwise.
        Kernel k-means++ computes K(candidates, X) against one X at every step, and a
        tile in row parts each part against the same Y.
        """
        if self._user_func is not None or self.name != "rbf":
            return {}
        if self.offset is not None:  # the norms of the shifted rows, not those given
            Y, Y_norms_sq = self.shifted(Y), None
        return (
            {"Y_aug": rbf_augment(Y, self.params["gamma"], Y_norms_sq)} if _dense_float(Y) else {}
        )

    def shifted(self, Z):
        """Rows Z less :attr:`offset` (numpy, CSR made dense, or a tensor), or Z itself
        without an offset."""
        if self.offset is None:
            return Z
        if is_tensor(Z):
            import torch

            return Z - torch.as_tensor(self.offset, dtype=Z.dtype, device=Z.device)
        Z = Z.toarray() if sp.issparse(Z) else np.asarray(Z)
        return Z - self.offset.astype(Z.dtype, copy=False)

    def __call__(self, X, Y, out=None, **cache):
        """The (len(X), len(Y)) block; ``cache`` from :meth:`prepare` for this ``X``.

        A large dense tile of a GEMM kernel is computed in row parts of X on the
        threads of the threading policy (:mod:`mbkkm.backends._threads`), each
        with one BLAS thread: the same numbers up to rounding (a GEMM may round a
        row according to its place in the call), in less time where it pays: one
        thread unless a large dense float tile of a GEMM kernel (:data:`_ROW_PARALLEL`).
        The parts are written into one (len(X), len(Y)) array; the left side's prepared
        values (``cache``: rows of X) are cut with them.
        """
        if self._user_func is not None:
            return write_into(out, self._call_user(X, Y))
        if self.offset is not None:  # a side prepared from its shifted rows is left alone
            X = X if "X_aug" in cache else self.shifted(X)
            Y = Y if "Y_aug" in cache else self.shifted(Y)
            cache = {key: value for key, value in cache.items() if not key.endswith("norms_sq")}
        n_threads = 1
        if self.name in _ROW_PARALLEL and _dense_float(X) and _dense_float(Y):
            n_threads = threads_for(X.shape[0] * Y.shape[0] * (X.shape[1] + _MAP_WORK))
        if n_threads == 1:
            return self._func(X, Y, out=out, **cache, **self.params)
        if out is None:
            out = np.empty((X.shape[0], Y.shape[0]), dtype=np.result_type(X.dtype, Y.dtype))

        shared = {key: value for key, value in cache.items() if not key.startswith("X_")}
        if "Y_aug" not in shared and self.name == "rbf":  # Y's side once, not per part
            shared["Y_aug"] = rbf_augment(Y, self.params["gamma"], shared.pop("Y_norms_sq", None))

        def part(r0, r1):
            rows = {key: value[r0:r1] for key, value in cache.items() if key.startswith("X_")}
            self._func(X[r0:r1], Y, out=out[r0:r1], **rows, **shared, **self.params)

        parallel_parts(part, X.shape[0], n_threads)
        return out

    def tile(self, X, Y, out=None):
        """K(X, Y), shape (len(X), len(Y)), into ``out`` when given (a callable's
        tile is copied into it): numpy arrays (dense or CSR) or torch tensors, the
        implementation inferred from X.

        Raises
        ------
        ValueError
            When the registry has no tile of this kernel for torch (chi2).
        """
        if not is_tensor(X):
            return self(X, Y, out=out)
        if self._user_func is None:
            X, Y = self.shifted(X), self.shifted(Y)
            return KERNELS[self.name].implementation("torch").tile(X, Y, out=out, **self.params)
        from . import _torch_tiles  # imports torch: only for tensors

        return write_into(out, _torch_tiles.call_user(self._user_func, self.params, X, Y))

    def _call_user(self, X, Y):
        if self.tensor_calls:  # host rows of a fit on torch: called with CPU tensors
            from . import _torch_tiles

            Xt, Yt = _torch_tiles.cpu_tensor(X), _torch_tiles.cpu_tensor(Y)
            return _torch_tiles.call_user(self._user_func, self.params, Xt, Yt).numpy()
        try:
            K = self._user_func(X, Y, **self.params)
        except Exception as exc:
            raise RuntimeError(f"the callable kernel raised {type(exc).__name__}: {exc}") from exc
        K = K.toarray() if sp.issparse(K) else np.asarray(K)
        check_callable_tile(K, X, Y, np.issubdtype(K.dtype, np.number) and not np.iscomplexobj(K))
        K = K.astype(X.dtype, copy=False)
        if not np.all(np.isfinite(K)):
            raise ValueError("kernel: the callable returned non-finite values (NaN or inf)")
        return K

    def diag(self, X):
        """K(x, x) for each row of X, shape (n,): numpy arrays or torch tensors."""
        if is_tensor(X):
            if self._user_func is None:
                X = self.shifted(X)
                return KERNELS[self.name].implementation("torch").diag(X, **self.params)
            from . import _torch_tiles

            return _torch_tiles.call_user_diag(self._user_func, self.params, X)
        if self._user_func is None:
            return self._diag(X if self.offset is None else self.shifted(X), **self.params)
        return diag_of_tiles(self._call_user, X, np.empty(X.shape[0], dtype=X.dtype))


def _check_number(value, name, bound=None):
    """A finite real number (and ``"> 0"`` or ``">= 0"`` when ``bound`` says so)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    if bound is None and not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if bound and not (np.isfinite(value) and (value > 0 or (value == 0 and bound == ">= 0"))):
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return value


def resolve_kernel(
    kernel, *, gamma=None, degree=3, coef0=1, kernel_params=None, X=None, sample_weight=None
):
    """Check the kernel arguments and return a :class:`Kernel`.

    Parameters
    ----------
    kernel : str or callable
        A registry name (see :data:`mbkkm.kernels.KERNELS`) or a callable
        ``k(X, Y, **kernel_params) -> (n_x, n_y)``.
    gamma, degree, coef0 : float or None
        Kernel parameters, with scikit-learn's meaning. ``gamma=None``: for rbf and
        laplacian 1 / (mean squared pairwise distance of X) (the estimators'
        ``gamma="mean-distance"``; their ``gamma=None`` chooses the width on a
        sample first, see :func:`mbkkm.cluster.select_gamma`), for polynomial and
        sigmoid 1 / n_features, for chi2 1.
    kernel_params : dict or None
        Extra keyword arguments of a callable kernel; for a named kernel, an
        alternative way to give gamma, degree or coef0.
    X : ndarray or scipy.sparse matrix of shape (n_samples, n_features), optional
        The data, for data-driven defaults and domain checks. Sparse data are
        accepted by every named kernel whose spec has ``accepts_sparse`` (all but
        chi2, which raises a ValueError).
    sample_weight : ndarray, optional
        Weights used by the data-driven gamma.
    """
    if kernel_params is not None and not isinstance(kernel_params, dict):
        raise TypeError(f"kernel_params must be a dict or None, got {type(kernel_params).__name__}")
    kernel_params = dict(kernel_params or {})
    if callable(kernel):
        resolved = Kernel("callable", kernel_params, func=kernel)
        resolved.tensor_calls = is_tensor(X)  # a fit on torch: tensors in every call
        return resolved
    if not isinstance(kernel, str):
        raise TypeError(f"kernel must be a string or a callable, got {type(kernel).__name__}")
    spec = get_spec(kernel)
    if spec is None:
        raise ValueError(
            unknown_name_message(
                "kernel", kernel, kernel_names(transductive=False), also=["a callable"]
            )
        )
    if spec.transductive:
        spec.implementation("numpy")  # raises the registry's "graph kernel" ValueError
    if X is not None and sp.issparse(X) and not spec.accepts_sparse:
        raise ValueError(
            f"kernel={kernel!r} does not support sparse X (scikit-learn's "
            f"{spec.sklearn_name}_kernel needs dense arrays); densify X with X.toarray() "
            "if it fits in memory, or choose one of the kernels that take sparse data: "
            f"{sorted(n for n, o in KERNELS.items() if not o.transductive and o.accepts_sparse)}"
        )
    spec.check_params(kernel_params)
    values = {"gamma": gamma, "degree": degree, "coef0": coef0, **kernel_params}
    params = {}
    if "gamma" in spec.params:
        g = values["gamma"]
        if g is not None:
            _check_number(g, "gamma", "> 0")
        elif spec.default_gamma == "data":
            if X is None:
                raise ValueError("gamma=None needs the data to choose a default")
            msd = mean_squared_pairwise_distance(X, sample_weight)
            g = 1.0 / msd if msd > 0 else 1.0
        elif spec.default_gamma == "n_features":
            g = None if X is None else 1.0 / X.shape[1]  # scikit-learn's: only X tells
        else:
            g = 1.0
        params["gamma"] = g
    if "degree" in spec.params:
        params["degree"] = _check_number(values["degree"], "degree", ">= 0")
    if "coef0" in spec.params:
        params["coef0"] = float(_check_number(values["coef0"], "coef0"))
    if "gamma" in params:
        if params["gamma"] is None:  # the other parameters' errors first
            raise ValueError(
                f"gamma=None needs the data (X) for kernel={spec.name!r}: its default "
                "is 1 / n_features; pass X or a gamma"
            )
        params["gamma"] = float(params["gamma"])
    if spec.nonnegative_data and X is not None:
        check_nonnegative(X, spec.name)
    return Kernel(spec.name, params)


def check_nonnegative(X, name):
    """Raise when X has a negative entry (chunked, so a memmap is not read at once)."""
    if sp.issparse(X):
        parts = [as_csr(X).data]
    else:
        parts = (X[start : start + _CHUNK_ROWS] for start in range(0, X.shape[0], _CHUNK_ROWS))
    if any(np.min(part, initial=0) < 0 for part in parts):
        raise ValueError(
            f"kernel={name!r} is only defined for non-negative data, but X has negative values"
        )


def graph_kernel_matrix(name, X, **params):
    """Build a graph kernel matrix by name.

    Parameters
    ----------
    name : str
        A graph kernel of the registry (see :data:`mbkkm.kernels.GRAPH_KERNELS`:
        ``"knn"``, ``"heat"``).
    X : array-like of shape (n_samples, n_features)
        The data (the kernel is defined on these points only).
    **params
        Keyword arguments of its builder (:func:`~mbkkm.kernels.knn_kernel`,
        :func:`~mbkkm.kernels.heat_kernel`; ``n_neighbors`` is required).

    Returns
    -------
    K : scipy.sparse.csr_matrix, ndarray or LowRankKernel, shape (n_samples, n_samples)
        Read it with :func:`~mbkkm.kernels.kernel_block` and
        :func:`~mbkkm.kernels.kernel_diagonal`.
    """
    spec = get_spec(name)
    if spec is None or not spec.transductive:
        raise ValueError(
            f"kernel={name!r} is not a graph kernel; expected one of "
            f"{kernel_names(transductive=True)}"
        )
    spec.check_params(params)
    for key in spec.required_params:
        if key not in params:
            raise ValueError(f"kernel={spec.name!r} needs the parameter {key!r}")
    return spec.builder(X, **params)
