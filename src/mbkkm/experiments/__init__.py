"""Experiments: declarative grids -> tidy result tables -> figures.

* :mod:`~mbkkm.experiments._grid`: :class:`Grid`, the presets (:data:`PRESETS`:
  ``gaussian``, ``knn``, ``heat`` — one per figure of the paper — and ``quick``),
  TOML grid files (:func:`load_grid`) and :func:`expand` into :class:`RunSpec`.
* :mod:`~mbkkm.experiments._algorithms`: the registry :data:`ALGORITHMS`.
* :mod:`~mbkkm.experiments._runner`: :func:`run_grid` appends one row per run
  to a CSV table (resumable, time and memory budgets); :func:`read_results`.
* :mod:`~mbkkm.experiments._plots`: :func:`plot_results` draws the paper's
  panels from saved tables only.

Examples
--------
>>> from mbkkm.experiments import expand, get_preset
>>> len(expand(get_preset("quick").with_options(datasets=["circles"], seeds=1)))
23
"""

from ._algorithms import ALGORITHMS, AlgorithmSpec, algorithm_names, get_algorithm
from ._grid import (
    PRESETS,
    Grid,
    GridError,
    RunSpec,
    expand,
    get_preset,
    grid_from_dict,
    load_grid,
    resolve_grid,
)

# matplotlib and pandas: imported when the plotting functions are called
from ._plots import label_kernel_variants, plot_results, summarize
from ._runner import (
    COLUMNS,
    RunSummary,
    available_memory,
    default_memory_budget,
    done_run_ids,
    environment,
    kernel_matrix_bytes,
    read_results,
    run_grid,
)

__all__ = [
    "ALGORITHMS",
    "COLUMNS",
    "PRESETS",
    "AlgorithmSpec",
    "Grid",
    "GridError",
    "RunSpec",
    "RunSummary",
    "algorithm_names",
    "available_memory",
    "default_memory_budget",
    "done_run_ids",
    "environment",
    "expand",
    "get_algorithm",
    "get_preset",
    "grid_from_dict",
    "kernel_matrix_bytes",
    "label_kernel_variants",
    "load_grid",
    "plot_results",
    "read_results",
    "resolve_grid",
    "run_grid",
    "summarize",
]
