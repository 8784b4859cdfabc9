"""mbkkm: mini-batch kernel k-means without the n x n kernel matrix.

Implements "Mini-batch kernel k-means" (Jourdan & Schwartzman): truncated
mini-batch kernel k-means, whose centers are sliding windows of batch points, and
the baselines it is measured against, with a scikit-learn API.

The names below are imported on first use (PEP 562), so that ``import mbkkm`` and
the ``mbkkm`` command's ``--help`` do not import scikit-learn.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.2.0.dev0"  # the next release's development number (CHANGELOG.md)

#: subpackages reachable as attributes (``mbkkm.cluster``) without their own import
_SUBMODULES = ("backends", "cluster", "datasets", "experiments", "kernels")

__all__ = [
    "KernelKMeans",
    "KernelMemoryError",
    "MemoryPlan",
    "MemoryPlanError",
    "MiniBatchKMeans",
    "MiniBatchKernelKMeans",
    "__version__",
    "load_model",
    "measure_memory",
    "read_npy_dask",
    "save_model",
]

#: public names defined elsewhere than :mod:`mbkkm.cluster`: (module, name there)
_ELSEWHERE = {"read_npy_dask": ("._dask", "read_npy")}
#: the public names other than ``__version__``, imported on first use
_LAZY = frozenset(__all__) - {"__version__"}

if TYPE_CHECKING:
    from ._dask import read_npy as read_npy_dask
    from .cluster import (
        KernelKMeans,
        KernelMemoryError,
        MemoryPlan,
        MemoryPlanError,
        MiniBatchKernelKMeans,
        MiniBatchKMeans,
        load_model,
        measure_memory,
        save_model,
    )


def __getattr__(name: str):
    if name in _LAZY:
        module, attr = _ELSEWHERE.get(name, (".cluster", name))
        value = getattr(importlib.import_module(module, __name__), attr)
        globals()[name] = value  # the next access does not come here
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *__all__, *_SUBMODULES})
