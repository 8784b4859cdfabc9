"""The algorithms an experiment grid can run, as a registry.

Each :class:`AlgorithmSpec` says which grid axes the algorithm depends on
(kernel, batch size, tau), so grid expansion never repeats an algorithm over an
axis it ignores, and holds the function that fits it. Estimators are imported
lazily inside those functions: a grid that does not use an algorithm does not
need its module.

Graph kernels (``"knn"``, ``"heat"``) are transductive: their matrix exists on
the training points only. The runner builds the matrix once per dataset and
kernel; full-batch kernel k-means receives it as ``kernel="precomputed"`` and
so do the mini-batch kernel algorithms, whose windows then hold point indices.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from ..kernels import GRAPH_KERNELS  # kernels whose matrix is defined on the training points only


@dataclass
class KernelSetup:
    """A kernel resolved for one dataset.

    Attributes
    ----------
    name : str
        Kernel name (``"rbf"``, ``"knn"``, ``"heat"``, any pairwise name), or
        ``"none"`` for algorithms that use no kernel.
    params : dict
        Its parameters (``gamma`` for rbf; ``n_neighbors`` and ``t`` for graph kernels).
    matrix : ndarray, scipy.sparse matrix, LowRankKernel or None
        The n x n kernel matrix when the runner built one (graph kernels,
        full-batch), else None.
    seconds : float
        Wall time spent building ``matrix`` (0 when none was built).
    cpu_seconds : float
        CPU time of the building process (all its threads) in that time.
    """

    name: str
    params: dict
    matrix: Any = None
    seconds: float = 0.0
    cpu_seconds: float = 0.0


@dataclass
class FitOutput:
    """What an algorithm's fit returns to the runner."""

    labels: np.ndarray
    inertia: float
    n_iter: int


def _fit_mbkkm(X, run, kernel, **options):
    """One of mbkkm's estimators, with ``options`` (the rate, the renormalisation) and
    early stopping off: KernelKMeans for full batch, on the n x n kernel matrix the
    runner built; MiniBatchKMeans for the algorithms without a kernel; else
    MiniBatchKernelKMeans, truncated at the run's tau where the algorithm uses tau."""
    from ..cluster import KernelKMeans, MiniBatchKernelKMeans, MiniBatchKMeans

    algo = get_algorithm(run.algorithm)
    options.update(n_clusters=run.n_clusters, max_iter=run.max_iter, random_state=run.seed)
    if algo.needs_kernel_matrix:  # dense, or sparse / low-rank for the graph kernels
        est = KernelKMeans(kernel="precomputed", tol=0.0, **options).fit(kernel.matrix)
    elif not algo.uses_kernel:
        est = MiniBatchKMeans(batch_size=run.batch_size, tol=None, **options).fit(X)
    else:
        tau = run.tau if algo.uses_tau else None
        options.update(batch_size=run.batch_size, tol=None, tau=tau, kernel=kernel.name)
        if kernel.name in GRAPH_KERNELS:
            # The graph kernel's matrix, built once per dataset by the runner.
            X, options["kernel"] = kernel.matrix, "precomputed"
        else:
            params = dict(kernel.params)
            named = {key: params.pop(key) for key in ("gamma", "degree", "coef0") if key in params}
            options.update(named, kernel_params=params or None)
        est = MiniBatchKernelKMeans(**options).fit(X)
    return FitOutput(est.labels_, float(est.inertia_), int(est.n_iter_))


def _fit_nystroem(X, run, kernel):
    from sklearn.cluster import MiniBatchKMeans
    from sklearn.kernel_approximation import Nystroem

    n_components = min(run.n_components, X.shape[0])
    features = Nystroem(
        kernel=kernel.name, n_components=n_components, random_state=run.seed, **kernel.params
    ).fit_transform(X)
    # scikit-learn's max_iter counts epochs; run.max_iter counts batches.
    epochs = max(1, int(np.ceil(run.max_iter * run.batch_size / X.shape[0])))
    est = MiniBatchKMeans(
        n_clusters=run.n_clusters,
        batch_size=run.batch_size,
        max_iter=epochs,
        max_no_improvement=None,
        tol=0.0,
        n_init=1,
        random_state=run.seed,
    ).fit(features)
    return FitOutput(est.labels_, float(est.inertia_), int(est.n_steps_))


@dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm of the experiments.

    The defaults describe what most algorithms are: mini-batch kernel k-means, on
    every kernel and batch size, not on tau.

    Attributes
    ----------
    name : str
        Registry name, used in grids and result tables.
    label : str
        Short label in figures (the paper's beta prefix marks the adaptive rate).
    description : str
        One line: what runs.
    fit : callable
        ``fit(X, run, kernel) -> FitOutput``.
    uses_kernel : bool, default=True
        Whether it depends on the kernel axis (False: run once per dataset,
        with ``kernel = "none"``).
    uses_batch_size : bool, default=True
        Whether it depends on the batch size axis.
    uses_tau : bool, default=False
        Whether it depends on the tau axis.
    graph_kernels : bool, default=True
        Whether it can run with the transductive graph kernels.
    needs_kernel_matrix : bool, default=False
        Whether it needs the n x n kernel matrix (the runner estimates its
        memory and skips the run when it does not fit the memory budget).
    sparse_input : bool, default=True
        Whether it takes the rows of a scipy.sparse dataset (``"topics"``) as they
        are; False: the runner skips it on such a dataset, saying why, rather than
        expand the rows to dense ones.
    objective_space : str, default="kernel"
        Where its own objective (``inertia / n``) is measured: ``"kernel"``
        (kernel k-means objective in feature space), ``"input"`` (k-means in the
        input space) or ``"nystroem"`` (k-means in the Nyström feature space).
    """

    name: str
    label: str
    description: str
    fit: Callable[..., FitOutput]
    uses_kernel: bool = True
    uses_batch_size: bool = True
    uses_tau: bool = False
    graph_kernels: bool = True
    needs_kernel_matrix: bool = False
    sparse_input: bool = True
    objective_space: str = "kernel"


#: Non-kernel mini-batch k-means: once per dataset, k-means in the input space (dense
#: rows only: mbkkm's MiniBatchKMeans refuses sparse ones).
_MINIBATCH: dict[str, Any] = dict(
    uses_kernel=False, graph_kernels=False, sparse_input=False, objective_space="input"
)


#: The algorithms, by name.
ALGORITHMS: dict[str, AlgorithmSpec] = {
    spec.name: spec
    for spec in (
        AlgorithmSpec(
            "full-batch",
            "full-batch",
            "full-batch kernel k-means (Lloyd in feature space) on the n x n "
            "kernel matrix (mbkkm KernelKMeans, kernel='precomputed')",
            _fit_mbkkm,
            uses_batch_size=False,
            needs_kernel_matrix=True,
        ),
        AlgorithmSpec(
            "truncated",
            "β-truncated",
            "truncated mini-batch kernel k-means, adaptive rate, renormalised "
            "windows (MiniBatchKernelKMeans)",
            partial(_fit_mbkkm, learning_rate="adaptive"),
            uses_tau=True,
        ),
        AlgorithmSpec(
            "truncated-literal",
            "β-truncated (literal)",
            "truncated mini-batch kernel k-means, adaptive rate, the paper's "
            "literal truncation (renormalize=False)",
            partial(_fit_mbkkm, learning_rate="adaptive", renormalize=False),
            uses_tau=True,
        ),
        AlgorithmSpec(
            "untruncated",
            "β-untruncated",
            "untruncated mini-batch kernel k-means (tau=None), adaptive rate",
            partial(_fit_mbkkm, learning_rate="adaptive"),
        ),
        AlgorithmSpec(
            "untruncated-classic",
            "untruncated (sklearn rate)",
            "untruncated mini-batch kernel k-means (tau=None), scikit-learn's rate",
            partial(_fit_mbkkm, learning_rate="classic"),
        ),
        AlgorithmSpec(
            "minibatch-adaptive",
            "β-mini-batch k-means",
            "non-kernel mini-batch k-means, adaptive rate (mbkkm MiniBatchKMeans)",
            partial(_fit_mbkkm, learning_rate="adaptive"),
            **_MINIBATCH,
        ),
        AlgorithmSpec(
            "minibatch-classic",
            "mini-batch k-means",
            "non-kernel mini-batch k-means, scikit-learn's rate (mbkkm MiniBatchKMeans)",
            partial(_fit_mbkkm, learning_rate="classic"),
            **_MINIBATCH,
        ),
        AlgorithmSpec(
            "nystroem",
            "Nyström + mini-batch k-means",
            "scikit-learn Nystroem features (n_components) + scikit-learn "
            "MiniBatchKMeans for about max_iter batches",
            _fit_nystroem,
            graph_kernels=False,
            objective_space="nystroem",
        ),
        AlgorithmSpec(
            "truncated-classic",
            "truncated (sklearn rate)",
            "truncated mini-batch kernel k-means, scikit-learn's rate, renormalised "
            "windows (MiniBatchKernelKMeans; not in the paper's presets)",
            partial(_fit_mbkkm, learning_rate="classic"),
            uses_tau=True,
        ),
    )
}


def algorithm_names() -> list[str]:
    """Names of the registered algorithms, in registry order."""
    return list(ALGORITHMS)


def get_algorithm(name: str) -> AlgorithmSpec:
    """The :class:`AlgorithmSpec` named ``name``.

    Raises
    ------
    ValueError
        If ``name`` is not registered; the message lists the known names.
    """
    if not isinstance(name, str) or name not in ALGORITHMS:
        raise ValueError(f"Unknown algorithm {name!r}; known algorithms: {', '.join(ALGORITHMS)}.")
    return ALGORITHMS[name]
