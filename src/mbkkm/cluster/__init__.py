"""Estimators with a scikit-learn API.

- :class:`MiniBatchKernelKMeans`: truncated (and, with ``tau=None``, untruncated)
  mini-batch kernel k-means.
- :class:`KernelKMeans`: full-batch kernel k-means (Lloyd in feature space).
- :class:`MiniBatchKMeans`: non-kernel mini-batch k-means with both learning rates.
- :func:`measure_memory`: a fit's memory plan next to the peaks it really used.
- :func:`save_model`, :func:`load_model`: model files (skops format) that hold one
  of these estimators, and nothing else.
- :func:`select_gamma`: the unsupervised rbf / laplacian width behind ``gamma="auto"``.
- :func:`select_t`: the unsupervised diffusion time of the heat kernel behind
  ``kernel="heat"`` (``t="auto"``).
- :func:`expected_failed_checks`: the scikit-learn checks each estimator fails by
  design, with the reason (for ``check_estimator``).
"""

from .._core._memory import MemoryPlan, MemoryPlanError
from ._auto_gamma import select_gamma
from ._base import EmptyClusterWarning, IndefiniteKernelWarning
from ._checks import expected_failed_checks
from ._gamma_selection import GammaGridWarning, GammaSelection
from ._graph_kernels import GraphSplitWarning, TSelection, select_t
from ._kernel_kmeans import KernelKMeans, KernelMemoryError
from ._measure import measure_memory
from ._minibatch_kernel import MiniBatchKernelKMeans
from ._minibatch_kmeans import MiniBatchKMeans
from ._model_files import load_model, save_model

__all__ = [
    "EmptyClusterWarning",
    "GammaGridWarning",
    "GammaSelection",
    "GraphSplitWarning",
    "IndefiniteKernelWarning",
    "KernelKMeans",
    "KernelMemoryError",
    "MemoryPlan",
    "MemoryPlanError",
    "MiniBatchKMeans",
    "MiniBatchKernelKMeans",
    "TSelection",
    "expected_failed_checks",
    "load_model",
    "measure_memory",
    "save_model",
    "select_gamma",
    "select_t",
]
