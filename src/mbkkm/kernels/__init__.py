"""Kernels: the registry, pairwise kernel blocks, graph kernels and resolution of parameters.

Every kernel is one :class:`KernelSpec` in :data:`KERNELS` (this list is
generated from it):

{kernel_list}

Any callable ``k(X, Y) -> (n_x, n_y)`` is accepted too (on every backend), and the
estimators take ``kernel="precomputed"``.
"""

from ._gamma import kernel_gamma
from ._graph import (
    KNNGraph,
    LowRankKernel,
    kernel_block,
    kernel_diagonal,
    knn_adjacency,
    knn_kernel,
)
from ._kernel import (
    ALIASES,
    GRAPH_KERNELS,
    KERNELS,
    Kernel,
    KernelSpec,
    Tiles,
    canonical_name,
    check_backend_kernel,
    check_torch_kernel,
    describe_kernels,
    get_spec,
    graph_kernel_matrix,
    kernel_names,
    mean_squared_pairwise_distance,
    register,
    resolve_kernel,
)
from ._spectral import heat_kernel

__all__ = [
    "ALIASES",
    "GRAPH_KERNELS",
    "KERNELS",
    "KNNGraph",
    "Kernel",
    "KernelSpec",
    "LowRankKernel",
    "Tiles",
    "canonical_name",
    "check_backend_kernel",
    "check_torch_kernel",
    "describe_kernels",
    "get_spec",
    "graph_kernel_matrix",
    "heat_kernel",
    "kernel_block",
    "kernel_diagonal",
    "kernel_gamma",
    "kernel_names",
    "knn_adjacency",
    "knn_kernel",
    "mean_squared_pairwise_distance",
    "register",
    "resolve_kernel",
]

if __doc__ is not None:  # None under python -OO
    __doc__ = __doc__.format(kernel_list=describe_kernels())
