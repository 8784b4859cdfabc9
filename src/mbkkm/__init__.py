"""mbkkm: mini-batch kernel k-means without the n x n kernel matrix.

Implements "Mini-batch kernel k-means" (Jourdan & Schwartzman): truncated
mini-batch kernel k-means, whose centers are sliding windows of batch points, and
the baselines it is measured against, with a scikit-learn API.
"""

from .cluster import (
    KernelKMeans,
    KernelMemoryError,
    MemoryPlan,
    MemoryPlanError,
    MiniBatchKernelKMeans,
    MiniBatchKMeans,
    measure_memory,
)

__version__ = "0.2.0.dev0"  # the next release's development number (CHANGELOG.md)

__all__ = [
    "KernelKMeans",
    "KernelMemoryError",
    "MemoryPlan",
    "MemoryPlanError",
    "MiniBatchKMeans",
    "MiniBatchKernelKMeans",
    "__version__",
    "measure_memory",
]
