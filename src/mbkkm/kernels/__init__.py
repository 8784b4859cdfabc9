"""Kernels: the registry, pairwise kernel blocks and resolution of parameters.

Named kernels (see :data:`KERNELS`): ``rbf`` (alias ``gaussian``), ``laplacian``,
``polynomial`` (alias ``poly``), ``linear``, ``cosine``, ``sigmoid``, ``chi2``;
any callable ``k(X, Y) -> (n_x, n_y)`` is accepted too.
"""

from ._kernel import Kernel, mean_squared_pairwise_distance, resolve_kernel
from ._registry import ALIASES, KERNELS, KernelSpec, canonical_name, kernel_names, register

__all__ = [
    "ALIASES",
    "KERNELS",
    "Kernel",
    "KernelSpec",
    "canonical_name",
    "kernel_names",
    "mean_squared_pairwise_distance",
    "register",
    "resolve_kernel",
]

from ._gamma import kernel_gamma
from ._graph import (  # importing _graph registers "knn" and "heat"
    GRAPH_KERNELS,
    LowRankKernel,
    graph_kernel_matrix,
    heat_kernel,
    kernel_block,
    kernel_diagonal,
    knn_adjacency,
    knn_kernel,
)

__all__ += [
    "GRAPH_KERNELS",
    "LowRankKernel",
    "graph_kernel_matrix",
    "heat_kernel",
    "kernel_block",
    "kernel_diagonal",
    "kernel_gamma",
    "knn_adjacency",
    "knn_kernel",
]
