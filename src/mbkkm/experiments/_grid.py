"""Declarative experiment grids and their expansion into runs.

A :class:`Grid` is datasets x kernels x algorithms x batch sizes x tau x seeds,
plus the number of iterations (early stopping is always off, as in the paper's
experiments). It comes from a preset (:data:`PRESETS`, one per figure of the
paper, plus ``quick``) or a TOML file (:func:`load_grid`)::

    name = "my-grid"
    datasets = ["pendigits", "circles"]     # registry or synthetic names
    kernels = ["rbf", "knn"]
    algorithms = ["full-batch", "truncated", "minibatch-adaptive"]
    batch_sizes = [256, 1024]
    taus = [50, 200]
    seeds = 3                                # or a list of seeds
    max_iter = 200                           # iterations (batches)
    # optional: gamma = 0.1, n_neighbors = 50, heat_t = 1.0, n_components = 1000,
    #           heat_max_dense_bytes = 4_000_000_000, synthetic_samples = 2000,
    #           n_clusters = 10

:func:`expand` turns a grid into :class:`RunSpec` objects, each with a stable
``run_id`` (a hash of its parameters) so that a re-run skips rows already in
the result table. A value listed twice in one axis (a dataset, an algorithm,
a kernel, a batch size, a tau or a seed) is refused with a :class:`GridError` that
names it; two aliases of one kernel (``gaussian`` and ``rbf``) are one kernel. An
algorithm is not repeated over an axis it does not depend on: tau only multiplies
the truncated algorithms, the kernel axis does not multiply non-kernel mini-batch
k-means (its rows have ``kernel = "none"``), and full-batch kernel k-means ignores
the batch size.

Kernel parameters come from the dataset registry (:data:`mbkkm.datasets.DATASETS`):
the paper writes the Gaussian kernel exp(-||x - y||^2 / kappa) with a width
sigma per dataset; we read kappa = 2 sigma^2, so ``gamma = 1 / (2 sigma^2)``
(:attr:`~mbkkm.datasets.DatasetSpec.rbf_gamma`). Where a grid sets no ``gamma`` and
the dataset has no paper width (the synthetic sets), the kernel's fixed data-driven
width is used, computed once for every algorithm of a group (rbf: the
``"mean-distance"`` width, 1 / (mean squared pairwise distance)); not the
estimators' default ``gamma=None``, which chooses the rbf width by ``"auto"``
(:func:`mbkkm.cluster.select_gamma`) and separates, for example, the moons that the
mean-distance width does not. Set ``gamma`` in the grid to compare at another width.
The k-NN kernel uses
``knn_neighbors`` (pendigits 1000, har 2000, mnist 2000, letter 1000) and the
heat kernel ``heat_neighbors`` (500, 500, 200, 500) with diffusion time
``heat_t`` (the paper does not state its t; default 1). The heat kernel is exact (a
dense n x n matrix) when its 8 n^2 bytes fit ``heat_max_dense_bytes`` (default: the
builder's 2**30, n <= 11,585), else low-rank (:func:`mbkkm.kernels.heat_kernel`); a
value set in the grid is passed on as the kernel parameter ``max_dense_bytes``, so the
result rows record it and the runner's memory plan counts the exact build (about
three n x n float64 arrays).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from ..datasets import DATASETS, SYNTHETIC
from ..kernels import canonical_name, kernel_names
from ._algorithms import ALGORITHMS, GRAPH_KERNELS, get_algorithm

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    try:
        import tomli as tomllib
    except ImportError:
        tomllib = None


class GridError(ValueError):
    """A grid (preset or file) is malformed or names unknown things."""


@dataclass(frozen=True)
class RunSpec:
    """One run of an experiment: one row of the result table.

    ``batch_size``, ``tau`` and ``n_components`` are None where the algorithm
    does not use them; ``kernel`` is ``"none"`` for non-kernel algorithms.
    ``kernel_params`` is a sorted tuple of (name, value) pairs.
    """

    grid: str
    dataset: str
    algorithm: str
    kernel: str
    kernel_params: tuple
    batch_size: int | None
    tau: int | None
    max_iter: int
    n_clusters: int | None
    n_components: int | None
    seed: int
    synthetic_samples: int | None = None

    def params(self) -> dict[str, Any]:
        """The parameters that define the run (everything except the grid name)."""
        params = {key: value for key, value in asdict(self).items() if key != "grid"}
        return {**params, "kernel_params": dict(self.kernel_params)}

    @property
    def run_id(self) -> str:
        """16 hex digits of the SHA-1 of the parameters (stable across runs and grids)."""
        blob = json.dumps(self.params(), sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Grid:
    """A declarative grid of runs (see the module docstring for the fields)."""

    name: str
    datasets: tuple[str, ...]
    algorithms: tuple[str, ...]
    kernels: tuple[str, ...] = ("rbf",)
    batch_sizes: tuple[int, ...] = (1024,)
    taus: tuple[int, ...] = (200,)
    seeds: tuple[int, ...] = (0,)
    max_iter: int = 200
    n_clusters: int | None = None
    gamma: float | None = None
    n_neighbors: int | None = None
    heat_t: float = 1.0
    heat_max_dense_bytes: int | None = None
    n_components: int = 1000
    synthetic_samples: int = 2000
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise GridError(f"name must be a non-empty string, got {self.name!r}.")
        # as in a TOML grid: one name for a list of one, a count N of seeds for 0..N-1
        for field in ("datasets", "algorithms", "kernels"):
            object.__setattr__(self, field, _str_tuple(getattr(self, field), field))
        for field in ("batch_sizes", "taus"):
            object.__setattr__(self, field, _int_tuple(getattr(self, field), field))
        object.__setattr__(self, "seeds", _seeds(self.seeds))
        listed = f"{', '.join(DATASETS)} (the paper's) and {', '.join(SYNTHETIC)} (synthetic)"
        _check_known(self.datasets, "dataset", {**DATASETS, **SYNTHETIC}, listed)
        _check_known(self.algorithms, "algorithm", ALGORITHMS)
        _check_known(self.kernels, "kernel", kernel_names())
        _check_int(self.max_iter, "max_iter")
        _check_int(self.n_clusters, "n_clusters", allow_none=True)
        _check_number(self.gamma, "gamma", allow_none=True)
        _check_int(self.n_neighbors, "n_neighbors", allow_none=True)
        _check_number(self.heat_t, "heat_t")
        _check_int(self.heat_max_dense_bytes, "heat_max_dense_bytes", minimum=0, allow_none=True)
        _check_int(self.n_components, "n_components")
        _check_int(self.synthetic_samples, "synthetic_samples", minimum=2)
        if not isinstance(self.description, str):
            raise GridError(f"description must be a string, got {self.description!r}.")

    def with_options(self, *, datasets=None, seeds=None, max_iter=None) -> Grid:
        """A copy with some datasets, a number (or list) of seeds, or max_iter replaced."""
        # replace runs __post_init__, which checks the new values (a count of seeds too)
        return replace(
            self,
            datasets=self.datasets if datasets is None else _str_tuple(list(datasets), "datasets"),
            seeds=self.seeds if seeds is None else seeds,
            max_iter=self.max_iter if max_iter is None else max_iter,
        )

    def kernel_params(self, dataset: str, kernel: str) -> dict[str, Any]:
        """The kernel parameters of one dataset (registry values unless overridden)."""
        spec = DATASETS.get(dataset)
        if kernel in GRAPH_KERNELS:
            k = self.n_neighbors or 10
            if self.n_neighbors is None and spec is not None:
                k = spec.knn_neighbors if kernel == "knn" else spec.heat_neighbors
            out: dict[str, Any] = {"n_neighbors": int(k)}
            if kernel == "heat":
                out["t"] = float(self.heat_t)
                if self.heat_max_dense_bytes is not None:
                    out["max_dense_bytes"] = int(self.heat_max_dense_bytes)
            return out
        gamma = self.gamma
        if kernel == "rbf" and gamma is None and spec is not None:
            gamma = spec.rbf_gamma
        return {} if gamma is None else {"gamma": float(gamma)}

    def as_dict(self) -> dict[str, Any]:
        """Plain values (lists), as a TOML file would hold them."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def _str_tuple(value, name) -> tuple[str, ...]:
    value = _listed(value)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise GridError(f"{name} must be a non-empty list of names, got {value!r}.")
    for v in value:
        if not isinstance(v, str):
            raise GridError(f"{name} must hold strings, got {v!r} ({type(v).__name__}).")
    _check_unique(value, name)
    return tuple(value)


def _check_unique(values, name) -> None:
    """Refuse a value listed twice: each combination of a grid is one run, so a
    repeated name, size or seed would run the same runs twice in one invocation."""
    seen = set()
    for v in values:
        if v in seen:
            raise GridError(
                f"{name} lists {v!r} more than once; list each value once (a grid runs "
                "each combination of its values once)."
            )
        seen.add(v)


def _listed(value):
    """A grid field's values: another iterable than a list, a tuple or a string (a
    range, a generator) as a list, as the fields were read before they were checked;
    anything else as it is (for the caller to refuse)."""
    if isinstance(value, (list, tuple, str, bytes, dict)) or not isinstance(value, Iterable):
        return value
    return list(value)


def _int_tuple(value, name, minimum=1) -> tuple[int, ...]:
    value = _listed(value)
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise GridError(f"{name} must be a non-empty list of integers, got {value!r}.")
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise GridError(f"{name} must hold integers >= {minimum}, got {v!r}.")
    _check_unique(value, name)
    return tuple(value)


def _seeds(value) -> tuple[int, ...]:
    """An int N means seeds 0..N-1; a list is taken as is."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise GridError(f"seeds must be a positive count or a list of seeds, got {value}.")
        return tuple(range(value))
    return _int_tuple(value, "seeds", minimum=0)


def _check_known(names, what, known, listed=None) -> None:
    """Each of ``names`` (a checked tuple of strings) one of ``known``, else a GridError
    that lists them, or says ``listed``."""
    for name in names:
        if name not in known:
            raise GridError(
                f"Unknown {what} {name!r}; known {what}s: {listed or ', '.join(known)}."
            )


def _check_int(value, name, minimum=1, allow_none=False):
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise GridError(f"{name} must be an integer >= {minimum}, got {value!r}.")


def _check_number(value, name, allow_none=False):
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise GridError(f"{name} must be a positive number, got {value!r}.")


def grid_from_dict(data: dict[str, Any], *, default_name: str = "grid") -> Grid:
    """Build a :class:`Grid` from plain values (a parsed TOML table).

    Raises
    ------
    GridError
        On unknown keys, missing required keys, wrong types or unknown names.
    """
    if not isinstance(data, dict):
        raise GridError(f"a grid must be a table of keys, got {type(data).__name__}.")
    allowed = {f.name for f in fields(Grid)}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise GridError(
            f"unknown grid key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}."
        )
    for key in ("datasets", "algorithms"):
        if key not in data:
            raise GridError(f"the grid lacks the required key {key!r}.")
    # Grid checks and converts the values, naming the first fault in its field order;
    # kernel aliases name one kernel once (an unknown name, or a value that is no list
    # of names, is left as it is, for Grid to refuse).
    kwargs: dict[str, Any] = {**data, "name": data.get("name", default_name)}
    if "kernels" in data:
        kwargs["kernels"] = _listed(data["kernels"])  # a generator is read once
        try:
            kernels = _str_tuple(kwargs["kernels"], "kernels")
        except GridError:
            pass
        else:
            kwargs["kernels"] = tuple(dict.fromkeys(map(canonical_name, kernels)))
    return Grid(**kwargs)


def load_grid(path: str | os.PathLike) -> Grid:
    """Read a grid from a TOML file (see the module docstring for its keys).

    Raises
    ------
    GridError
        If the file cannot be read, is not valid TOML, or the grid is malformed;
        the message names the file.
    """
    path = Path(path)
    if tomllib is None:  # pragma: no cover - Python 3.10 without tomli
        raise GridError("reading grid files needs Python >= 3.11 or the package 'tomli'.")
    try:
        data = tomllib.loads(path.read_bytes().decode())  # as tomllib.load does
    except OSError as exc:
        raise GridError(f"cannot read grid file {path}: {exc.strerror or exc}.") from exc
    except tomllib.TOMLDecodeError as exc:
        raise GridError(f"grid file {path} is not valid TOML: {exc}.") from exc
    try:
        return grid_from_dict(data, default_name=path.stem)
    except GridError as exc:
        raise GridError(f"grid file {path}: {exc}") from exc


#: The paper's algorithms: the registry's, but for the Nyström baseline and truncated-classic.
_PAPER_ALGORITHMS = tuple(a for a in ALGORITHMS if a not in ("nystroem", "truncated-classic"))

#: The kernel and description of the preset of each of the paper's figures.
_PAPER_FIGURES = {
    "gaussian": ("rbf", "The paper's Gaussian-kernel figures: gamma = 1/(2 sigma^2) per dataset."),
    "knn": ("knn", "The paper's k-NN-kernel figures (neighbours 1000/2000/2000/1000)."),
    "heat": ("heat", "The paper's heat-kernel figures (neighbours 500/500/200/500, t = 1)."),
}

#: The presets: one per figure of the paper (Gaussian, k-NN and heat kernel), and ``quick``.
PRESETS: dict[str, Grid] = {
    name: Grid(
        name=name,
        datasets=("pendigits", "har", "mnist", "letter"),
        algorithms=_PAPER_ALGORITHMS,
        kernels=(kernel,),
        batch_sizes=(256, 512, 1024, 2048),
        taus=(50, 100, 200, 300),
        seeds=tuple(range(10)),
        max_iter=200,
        description=description,
    )
    for name, (kernel, description) in _PAPER_FIGURES.items()
}
PRESETS["quick"] = Grid(
    name="quick",
    datasets=("blobs", "moons"),
    algorithms=tuple(ALGORITHMS),
    kernels=("rbf",),
    batch_sizes=(64, 128),
    taus=(20, 50),
    seeds=(0, 1),
    max_iter=20,
    n_components=100,
    synthetic_samples=600,
    description="A small demo grid on synthetic data (seconds).",
)


def get_preset(name: str) -> Grid:
    """The preset grid named ``name``.

    Raises
    ------
    GridError
        If there is no such preset; the message lists them.
    """
    if not isinstance(name, str) or name not in PRESETS:
        raise GridError(f"Unknown preset {name!r}; presets: {', '.join(PRESETS)}.")
    return PRESETS[name]


def resolve_grid(preset_or_path: str | os.PathLike) -> Grid:
    """A preset name, or the path of a TOML grid file."""
    s = str(preset_or_path)
    if s in PRESETS:
        return PRESETS[s]
    if s.endswith(".toml") or os.sep in s or Path(s).exists():
        return load_grid(s)
    raise GridError(
        f"{s!r} is neither a preset ({', '.join(PRESETS)}) nor an existing .toml grid file."
    )


def expand(grid: Grid) -> list[RunSpec]:
    """The runs of a grid, grouped by dataset then kernel (so data and kernel
    matrices are built once per group).

    Each algorithm is crossed only with the axes it uses: ``tau`` only for the
    truncated ones, batch sizes not for full-batch, kernels not for non-kernel
    mini-batch k-means (emitted once per dataset, ``kernel="none"``), and the
    graph kernels only for algorithms that can use them.

    Returns
    -------
    runs : list of RunSpec
    """
    runs: list[RunSpec] = []
    kparams: tuple[tuple[str, Any], ...]
    kernels = dict.fromkeys(canonical_name(k) for k in grid.kernels)
    axes = itertools.product(grid.datasets, enumerate(kernels), grid.algorithms)
    for ds, (i, kernel), name in axes:
        algo = get_algorithm(name)
        if not algo.uses_kernel:
            if i > 0:  # once per dataset, with the first kernel
                continue
            k, kparams = "none", ()
        elif kernel in GRAPH_KERNELS and not algo.graph_kernels:
            continue
        else:
            k, kparams = kernel, tuple(sorted(grid.kernel_params(ds, kernel).items()))
        batches = grid.batch_sizes if algo.uses_batch_size else (None,)
        taus = grid.taus if algo.uses_tau else (None,)
        runs += [
            RunSpec(
                grid=grid.name,
                dataset=ds,
                algorithm=name,
                kernel=k,
                kernel_params=kparams,
                batch_size=b,
                tau=tau,
                max_iter=grid.max_iter,
                n_clusters=grid.n_clusters,
                n_components=grid.n_components if name == "nystroem" else None,
                seed=seed,
                synthetic_samples=grid.synthetic_samples if ds in SYNTHETIC else None,
            )
            for b, tau, seed in itertools.product(batches, taus, grid.seeds)
        ]
    return runs
