"""gamma="auto": an unsupervised choice of the rbf / laplacian kernel width.

The criterion (see ``docs/gamma.md`` for the measurements behind it)
---------------------------------------------------------------------
For a grid of widths gamma_1 < ... < gamma_G (multiples of a base width of the
data), cluster a small random sample S of the data with exact kernel k-means at
each width, and score each partition with one yardstick that does not depend
on the width: its **normalised cut on the k-nearest-neighbour graph of S**,

    ncut(C_1..C_k) = sum_j cut(C_j) / vol(C_j),
    cut(C_j) = #{kNN edges (x, y): x in C_j, y not in C_j},
    vol(C_j) = #{kNN edges with an end point in C_j} (degree sum),

on the symmetrised graph A = (G + G^T > 0) of the ``n_neighbors`` nearest
neighbours (Euclidean for rbf, L1 for laplacian; no self loops). At each width
the solution is the lowest-objective of ``n_seeds`` kernel k-means runs from
k-means++ and one from the spectral partition of the sample's kernel matrix
(Dhillon, Guan & Kulis' start for kernel k-means) -- or that spectral-start
run when it cuts fewer k-NN edges (on rings a k-means++ run through both rings
can have the lower objective at the widths where the spectral-start run keeps
the rings; docs/gamma.md, fourth round); its cut, smoothed over
neighbouring widths (weights 1/4, 1/2, 1/4), is the width's score, and the
lowest score wins. The estimators then start from the winning solution (its
clusters' feature-space means), because on non-convex data the full fit from
k-means++ can land in a bad local minimum even at a good width.

Why a cut, and why on a fixed graph: the width changes the geometry that kernel
k-means sees, so a score computed *in* feature space (silhouette, variance
ratio, kernel k-means objective) has a different scale at every width and is
monotone in it (wider always looks more compact; measured). The kNN graph is
the same for every candidate, so the scores are comparable. A low normalised
cut means that few neighbourhoods are split between clusters and that no
cluster is a handful of outliers (their few edges all leave the cluster, which
costs about 1 each): exactly the failures of a width that is too wide (clusters
cut through dense regions, as plain k-means does on moons) or too narrow
(kernel k-means collapses into one big cluster and a few tiny ones). It is the
objective of spectral clustering (Shi & Malik 2000), which kernel k-means
approximates with the right width (Dhillon, Guan & Kulis 2004), used here only
to *rank* the partitions kernel k-means actually finds.

What it does not handle: it judges the partitions kernel k-means finds on the
sample; where those are bad local minima at every width, the choice and the
start can be wrong (moons: from k-means++ only, the runs at 16-32x cut through
the thin arcs at a higher objective than the true split, with small cuts too;
the spectral start finds the true split there). It assumes the clusters are
regions of the k-NN graph (so it favours connected, density-separated
clusters), and it costs (n_seeds + 1) * G exact kernel k-means fits and G
partial eigendecompositions on ``n_samples`` points (about 1000, a few seconds).
"""

from __future__ import annotations

import itertools
import numbers
import time
from dataclasses import dataclass, field

import numpy as np
from scipy import linalg, sparse
from scipy.spatial.distance import cdist
from sklearn.cluster import KMeans  # at import (17 ms), not in the first fit (2-3 MiB)
from sklearn.metrics.pairwise import euclidean_distances, manhattan_distances
from sklearn.neighbors import NearestNeighbors
from sklearn.utils import check_random_state

from ._common import check_no_overflow

#: Kernels whose width gamma="auto" chooses, with the metric of their exponent.
AUTO_GAMMA_KERNELS = {"rbf": "sqeuclidean", "gaussian": "sqeuclidean", "laplacian": "cityblock"}

#: Default grid: multiples of the base width (1 / mean pairwise squared distance
#: for rbf, 1 / mean pairwise L1 distance for laplacian) from 1/8 to 32. (At 64x
#: kernel k-means on a 1000-point sample is in its collapse regime on every real
#: set measured, and its low cuts on moons there came from bad partitions.)
DEFAULT_MULTIPLIERS = tuple(2.0 ** e for e in range(-3, 6))

#: ``gamma=None`` selects the width only with at least this many sample points per
#: cluster (:func:`default_selects_width`).
MIN_POINTS_PER_CLUSTER = 10


@dataclass(frozen=True)
class GammaSelection:
    """What ``gamma="auto"`` tried and why it chose its width.

    Attributes
    ----------
    gamma : float
        The chosen width.
    candidates : ndarray of shape (n_candidates,)
        The widths tried, increasing.
    scores : ndarray of shape (n_candidates,)
        The criterion of each candidate (lower is better).
    criterion : str
        Name of the criterion (``"knn-normalized-cut"``).
    base_gamma : float
        The base width the candidates are multiples of.
    n_samples : int
        Size of the sample the criterion was computed on.
    seed_scores : ndarray of shape (n_candidates, n_seeds + 1)
        The normalised cut of the partition of each candidate and run: the
        ``n_seeds`` kernel k-means runs from k-means++, then the kernel k-means run
        from the spectral partition (:func:`spectral_partition`; the column is
        absent when k = 1 or k = n_samples).
    sample_indices : ndarray of shape (n_samples,)
        The rows of X in the sample, increasing.
    sample_labels : ndarray of shape (n_samples,)
        The chosen width's solution on the sample (see ``raw_scores``): the
        estimators start from it.
    seed_inertia : ndarray of shape (n_candidates, n_seeds + 1)
        The kernel k-means objective of each run on the sample (columns as
        ``seed_scores``).
    raw_scores : ndarray of shape (n_candidates,)
        The cut of each candidate's solution: its lowest-objective run, or the run
        from the spectral start when that one's cut is lower (``solution_runs``);
        ``scores`` is ``raw_scores`` smoothed over the grid (:func:`smooth_scores`).
    solution_runs : ndarray of shape (n_candidates,)
        The column of ``seed_scores`` that is each candidate's solution.
    seconds : float
        Wall-clock time of the selection.
    """

    gamma: float
    candidates: np.ndarray
    scores: np.ndarray
    criterion: str
    base_gamma: float
    n_samples: int
    seed_scores: np.ndarray = field(repr=False, default=None)
    sample_indices: np.ndarray = field(repr=False, default=None)
    sample_labels: np.ndarray = field(repr=False, default=None)
    seed_inertia: np.ndarray = field(repr=False, default=None)
    seconds: float = field(repr=False, default=None)
    raw_scores: np.ndarray = field(repr=False, default=None)
    solution_runs: np.ndarray = field(repr=False, default=None)

    @property
    def multipliers(self):
        """candidates / base_gamma."""
        return self.candidates / self.base_gamma

    def table(self):
        """A text table of the candidates and their scores, the choice marked."""
        lines = [f"gamma=auto ({self.criterion}, lower is better; sample of "
                 f"{self.n_samples} points, base width {self.base_gamma:.4g})",
                 f"{'gamma':>12} {'x base':>8} {'score':>9}"]
        for g, m, s in zip(self.candidates, self.multipliers, self.scores):
            mark = "  <- chosen" if g == self.gamma else ""
            lines.append(f"{g:12.5g} {m:8.3g} {s:9.4f}{mark}")
        return "\n".join(lines)

    def plot(self, ax=None):
        """The criterion against gamma (log axis), the choice marked. Returns the Axes."""
        if ax is None:
            import matplotlib.pyplot as plt

            _, ax = plt.subplots(figsize=(5, 3.2))
        ax.semilogx(self.candidates, self.scores, "o-", color="C0", label=self.criterion)
        best = int(np.flatnonzero(self.candidates == self.gamma)[0])
        ax.semilogx([self.gamma], [self.scores[best]], "o", ms=12, mfc="none",
                    color="C3", label=f"chosen gamma = {self.gamma:.3g}")
        ax.axvline(self.base_gamma, color="0.6", ls=":", label="base width")
        ax.set_xlabel("gamma")
        ax.set_ylabel("normalised k-NN cut (lower is better)")
        ax.legend(fontsize="small")
        return ax


def _check_int(value, name, minimum):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _host_rows(X, idx):
    """Rows idx of X as a host float64 array (numpy, memmap, tensor or DaskRows).

    Sparse X gives a float64 CSR matrix (the sample stays sparse).
    """
    from ..backends import get_backend, is_tensor

    if sparse.issparse(X):
        return sparse.csr_matrix(X[idx], dtype=np.float64)

    if is_tensor(X):
        nx = get_backend(X)
        return np.asarray(nx.to_numpy(nx.take(X, nx.index(idx))), dtype=np.float64)
    if hasattr(X, "compute") and hasattr(X, "chunks"):  # a dask.array
        from .._dask import gather_rows

        return np.asarray(gather_rows(X, idx), dtype=np.float64)
    return np.asarray(X[idx], dtype=np.float64)


def knn_normalized_cut(A, labels, n_clusters):
    """sum_j cut(C_j) / vol(C_j) of a partition on a symmetric graph A (sparse).

    vol(C_j) = sum of the degrees of C_j's points; cut(C_j) = vol(C_j) minus the
    weight of the edges inside C_j. An empty cluster adds nothing.
    """
    n = labels.shape[0]
    onehot = sparse.csr_matrix((np.ones(n), (np.arange(n), labels)), shape=(n, n_clusters))
    deg = np.asarray(A.sum(axis=1)).ravel()
    vol = onehot.T @ deg                                   # (k,)
    inside = (onehot.T @ (A @ onehot)).diagonal()          # (k,)
    ok = vol > 0
    return float(np.sum((vol[ok] - inside[ok]) / vol[ok]))


def select_gamma(X, n_clusters, *, kernel="rbf", sample_weight=None, random_state=None,
                 n_samples=1000, multipliers=DEFAULT_MULTIPLIERS, n_neighbors=10,
                 n_seeds=4, max_iter=100):
    """Choose the width of an rbf or laplacian kernel without labels.

    Clusters a random sample of X with exact kernel k-means at each candidate
    width and keeps the width whose partition has the smallest normalised cut on
    the sample's k-nearest-neighbour graph (see :doc:`/gamma`). Never sees
    labels; the same ``random_state`` gives the same choice.

    Parameters
    ----------
    X : array-like, memmap, torch tensor or dask array of shape (n, n_features)
        The data; only ``n_samples`` rows are read (a host copy of them).
    n_clusters : int
        Number of clusters of the fit the width is for.
    kernel : {"rbf", "gaussian", "laplacian"}, default="rbf"
        The kernel; others raise a ValueError.
    sample_weight : array-like of shape (n,), default=None
        The sample is drawn with probability proportional to the weights.
    random_state : int, RandomState instance or None, default=None
        Seeds the sample and the kernel k-means initialisations.
    n_samples : int, default=1000
        Size of the sample (capped at n).
    multipliers : sequence of float, default=2**-3, ..., 2**5
        The candidates are ``multipliers * base``, base = 1 / (mean pairwise
        squared distance) of the sample for rbf (the ``gamma=None`` default),
        1 / (mean pairwise L1 distance) for laplacian.
    n_neighbors : int, default=10
        Neighbours of the k-NN graph the partitions are scored on.
    n_seeds : int, default=4
        Kernel k-means++ initialisations per candidate, plus one run from the
        spectral partition of the candidate's kernel matrix
        (:func:`spectral_partition`); the run with the lowest kernel k-means
        objective is the candidate's solution, unless the spectral-start run
        has a lower cut (then it is); the candidate's
        score is the cut of its solution smoothed over the grid
        (:func:`smooth_scores`); the chosen width's solution is ``sample_labels``.
    max_iter : int, default=100
        Lloyd iterations of each kernel k-means fit on the sample.

    Returns
    -------
    selection : GammaSelection
        ``selection.gamma`` is the chosen width; candidates and scores explain it.

    References
    ----------
    J. Shi and J. Malik. "Normalized cuts and image segmentation." IEEE TPAMI, 2000.
    I. Dhillon, Y. Guan and B. Kulis. "Kernel k-means, spectral clustering and
    normalized cuts." KDD 2004.

    Examples
    --------
    >>> from sklearn.datasets import make_moons
    >>> X, _ = make_moons(2000, noise=0.05, random_state=0)
    >>> sel = select_gamma(X, 2, random_state=0)
    >>> bool(sel.gamma == sel.candidates[sel.scores.argmin()])
    True
    """
    if not isinstance(kernel, str) or kernel not in AUTO_GAMMA_KERNELS:
        raise ValueError(
            f"gamma='auto' chooses the width of the kernels {sorted(AUTO_GAMMA_KERNELS)}; "
            f"kernel={kernel!r} has no width to choose (pass gamma as a number or None)"
        )
    n_clusters = _check_int(n_clusters, "n_clusters", 1)
    n_samples = _check_int(n_samples, "n_samples", 2)
    n_neighbors = _check_int(n_neighbors, "n_neighbors", 1)
    n_seeds = _check_int(n_seeds, "n_seeds", 1)
    mult = np.sort(np.asarray(multipliers, dtype=np.float64).ravel())
    if mult.size == 0 or not np.all(np.isfinite(mult)) or mult[0] <= 0:
        raise ValueError(f"multipliers must be positive finite numbers, got {multipliers!r}")
    n = int(X.shape[0])
    if n < n_clusters:
        raise ValueError(f"n_samples={n} should be >= n_clusters={n_clusters}")
    start = time.perf_counter()
    rng = check_random_state(random_state)
    m = min(n_samples, n)
    if sample_weight is None:
        p = None
    else:
        w = np.asarray(sample_weight, dtype=np.float64)
        p = w / w.sum()
        m = min(m, int(np.count_nonzero(w)))
    idx = np.sort(rng.choice(n, size=m, replace=False, p=p)) if m < n else np.arange(n)
    seeds = rng.randint(np.iinfo(np.int32).max, size=n_seeds)
    spectral_seed = int(rng.randint(np.iinfo(np.int32).max))  # drawn last: the rest unchanged
    Xs = _host_rows(X, idx)                                    # (m, d) on the host
    # Finite rows too large for distances: the estimators' overflow message, on the
    # sample this works on (the estimators check all of X once the width is known).
    check_no_overflow(Xs)

    metric = AUTO_GAMMA_KERNELS[kernel]
    if sparse.issparse(Xs):  # scikit-learn's sparse distances (cdist needs dense rows)
        D = (euclidean_distances(Xs, squared=True) if metric == "sqeuclidean"
             else manhattan_distances(Xs))
        np.fill_diagonal(D, 0.0)
    else:
        D = cdist(Xs, Xs, metric)                              # (m, m) exponents / gamma
    mean_d = D.sum() / max(m * (m - 1), 1)
    base = 1.0 / mean_d if mean_d > 0 else 1.0
    candidates = base * mult

    # The yardstick: the symmetrised k-NN graph of the sample, the same for all widths.
    nn = min(n_neighbors, m - 1)
    if nn >= 1:
        G = NearestNeighbors(n_neighbors=nn, metric="euclidean" if metric == "sqeuclidean"
                             else "manhattan").fit(Xs).kneighbors_graph(mode="connectivity")
        G.setdiag(0)  # duplicate rows may list a point as its own neighbour
        G.eliminate_zeros()
        A = ((G + G.T) > 0).astype(np.float64).tocsr()
    else:
        A = sparse.csr_matrix((m, m))

    # At each width: kernel k-means from n_seeds k-means++ initialisations and, where
    # 1 < k < m, one more run from the spectral partition of K (last column); the
    # width's solution is the run with the lowest kernel k-means objective
    # (scikit-learn's n_init rule; ties: the earlier run), and its raw score is the
    # cut of that solution.
    spectral = 1 < n_clusters < m
    n_runs = n_seeds + spectral
    seed_scores = np.empty((mult.size, n_runs))
    seed_inertia = np.empty((mult.size, n_runs))
    chosen = np.empty(mult.size, dtype=np.intp)
    width_labels = np.empty((mult.size, m), dtype=np.intp)
    for i, g in enumerate(candidates):
        K = np.exp(-g * D)
        runs = (kernel_kmeans_run(K, n_clusters, int(seed), max_iter) for seed in seeds)
        if spectral:
            runs = itertools.chain(runs, [lloyd_from_partition(
                K, spectral_partition(K, n_clusters, spectral_seed), n_clusters, max_iter)])
        run_labels = []
        for s, (labels, inertia) in enumerate(runs):
            seed_scores[i, s] = knn_normalized_cut(A, labels, n_clusters)
            seed_inertia[i, s] = inertia
            run_labels.append(labels)
        # The width's solution: kernel k-means' lowest-objective run (first on ties),
        # or the run from the spectral start when that one cuts fewer k-NN edges.
        chosen[i] = int(np.argmin(seed_inertia[i]))
        if spectral and seed_scores[i, -1] < seed_scores[i, chosen[i]]:
            chosen[i] = n_runs - 1
        width_labels[i] = run_labels[chosen[i]]
    raw = seed_scores[np.arange(mult.size), chosen]
    scores = smooth_scores(raw)
    best = int(np.argmin(scores))  # ties: the widest kernel (smallest gamma)
    return GammaSelection(gamma=float(candidates[best]), candidates=candidates,
                          scores=scores, criterion="knn-normalized-cut",
                          base_gamma=float(base), n_samples=m, seed_scores=seed_scores,
                          sample_indices=idx, sample_labels=width_labels[best],
                          seed_inertia=seed_inertia, seconds=time.perf_counter() - start,
                          raw_scores=raw, solution_runs=chosen)



def spectral_partition(K, n_clusters, random_state):
    """The spectral start of kernel k-means on a kernel matrix K (Dhillon, Guan & Kulis 2004).

    Rows of the top ``n_clusters`` eigenvectors of D^-1/2 K D^-1/2 (D = diag of
    K's row sums), each scaled to unit length, clustered by k-means (4 seeds):
    Ng, Jordan & Weiss' spectral clustering of K. Why it is a start for kernel
    k-means: with H the (m, k) normalised cluster indicator, the kernel k-means
    objective is trace(K) - trace(H^T K H); dropping the constraint that H be an
    indicator leaves max trace(H^T K H) over orthonormal H, whose solution is the
    top eigenvectors (Ky Fan), and the degree-normalised form is the relaxation of
    the normalised cut (the weighted kernel k-means objective with weights D).
    Rounding them gives a partition near the global optimum of the relaxation,
    where k-means++ seeds start Lloyd in a local minimum (moons at 16-32x: the
    arcs cut in two, a higher objective than the true split; docs/gamma.md).
    """
    m = K.shape[0]
    deg = K.sum(axis=1)
    inv = 1.0 / np.sqrt(np.maximum(deg, np.finfo(np.float64).tiny))
    _, V = linalg.eigh(inv[:, None] * K * inv[None, :], subset_by_index=[m - n_clusters, m - 1])
    norms = np.linalg.norm(V, axis=1, keepdims=True)
    V = V / np.where(norms > 0, norms, 1.0)
    return KMeans(n_clusters, n_init=4, random_state=random_state).fit(V).labels_


def kernel_kmeans_run(K, n_clusters, random_state, max_iter, tol=1e-4):
    """``KernelKMeans(n_clusters, kernel="precomputed", max_iter=max_iter, tol=tol,
    random_state=random_state).fit(K)``'s ``(labels_, inertia_)``, without the
    estimator's checks of K (a symmetric kernel matrix built here, once per width:
    the checks cost 7x the run on 1000 points). Kernel k-means++ on all points, then
    Lloyd, as the estimator does (== it, tested).
    """
    from .._core import kernel_kmeans_plusplus
    from ..kernels._index import IndexKernel

    diag = np.diag(K).copy()
    idx = kernel_kmeans_plusplus(np.arange(K.shape[0]), IndexKernel("precomputed", K, diag=diag),
                                 n_clusters, check_random_state(random_state), None, diag=diag)
    return _lloyd_on_matrix(K, diag, K[:, idx], diag[idx], max_iter, tol)


def lloyd_from_partition(K, labels, n_clusters, max_iter, tol=1e-4):
    """Kernel k-means (KernelKMeans' Lloyd) on a kernel matrix K from a partition.

    The initial centers are the partition's cluster means in feature space:
    P0[x, j] = mean over s in C_j of K(x, s), c0[j] = ||C_j||^2 = mean of K over
    C_j x C_j. Returns ``(labels, objective)`` with objective = sum over points of
    the squared distance to their center (KernelKMeans' ``inertia_``). An empty
    cluster gets no point (c0 = inf) and is relocated by Lloyd as usual.
    """
    m = K.shape[0]
    M = np.zeros((m, n_clusters))
    M[np.arange(m), labels] = 1.0
    size = M.sum(axis=0)
    safe = np.where(size > 0, size, 1.0)
    KM = K @ M
    P0 = KM / safe
    c0 = np.where(size > 0, np.einsum("ij,ij->j", M, KM) / safe ** 2, np.inf)
    return _lloyd_on_matrix(K, np.diag(K).copy(), P0, c0, max_iter, tol)


def _lloyd_on_matrix(K, diag, P0, c0, max_iter, tol):
    """KernelKMeans' Lloyd (:func:`kernel_lloyd`) on a stored matrix K with unit
    weights, from the inner products P0 and norms c0 of the initial centers:
    ``(labels, objective)``, the objective summed as the estimator's ``inertia_``."""
    from ._kernel_kmeans import _MatrixOperator, kernel_lloyd

    w = np.ones(K.shape[0])
    _, labels, mind, _, _, _ = kernel_lloyd(_MatrixOperator(K), diag, P0, c0, w, max_iter, tol)
    return np.asarray(labels, dtype=np.intp), float(mind @ w)


def smooth_scores(scores):
    """Scores smoothed over the (log-spaced) width grid with weights 1/4, 1/2, 1/4.

    s~_i = (s_{i-1} + 2 s_i + s_{i+1}) / 4, the end values repeated beyond the
    ends. A width wins when its neighbourhood cuts few edges, not when one lucky
    partition does (measured: unsmoothed, moons picked 32-64x for partitions of
    ARI 0.4 on one seed in three); the centre weight 1/2 keeps an isolated good
    width (rings at 4x) ahead of its neighbours.
    """
    scores = np.asarray(scores, dtype=np.float64)
    padded = np.concatenate([scores[:1], scores, scores[-1:]])
    return 0.25 * padded[:-2] + 0.5 * padded[1:-1] + 0.25 * padded[2:]


def default_selects_width(kernel, kernel_params, n, n_clusters, n_samples=1000,
                          sample_weight=None):
    """Whether ``gamma=None`` chooses the width as ``gamma="auto"`` does.

    Yes for the rbf and laplacian kernels (named) when ``kernel_params`` gives no
    gamma and the selection's sample holds at least
    :data:`MIN_POINTS_PER_CLUSTER` points per cluster (``min(n, n_samples) >=
    10 * n_clusters``: up to k = 100 with the 1000-point sample; with
    ``sample_weight``, n counts the points of positive weight). Otherwise
    ``gamma=None`` is the kernel's fixed default ("mean-distance" for rbf and
    laplacian): with fewer points per cluster the sample's k-NN cut no longer
    describes the clusters, and exact kernel k-means on it grows with k.
    """
    if not isinstance(kernel, str) or kernel not in AUTO_GAMMA_KERNELS:
        return False
    if kernel_params and kernel_params.get("gamma") is not None:
        return False
    if sample_weight is not None:
        n = int(np.count_nonzero(np.asarray(sample_weight)))
    return min(int(n), n_samples) >= MIN_POINTS_PER_CLUSTER * int(n_clusters)


def resolve_auto_gamma(gamma, kernel, X, n_clusters, sample_weight, random_state,
                       kernel_params=None):
    """The estimators' hook: ``(gamma to pass to the kernel, GammaSelection or None)``.

    - ``"auto"``: :func:`select_gamma` (refuses kernels without a width);
    - ``None``: the same selection where :func:`default_selects_width` says so,
      else None (the kernel's fixed default);
    - ``"mean-distance"``: None for rbf / laplacian (their fixed data-driven default,
      1 / mean pairwise squared distance), a ValueError for other kernels;
    - a number: returned unchanged.
    """
    if gamma is None:
        if not default_selects_width(kernel, kernel_params, X.shape[0], n_clusters,
                                     sample_weight=sample_weight):
            return None, None
        gamma = "auto"
    if not isinstance(gamma, str):
        return gamma, None
    if not isinstance(kernel, str) or kernel not in AUTO_GAMMA_KERNELS:
        raise ValueError(
            f"gamma={gamma!r} sets the width of the kernels {sorted(AUTO_GAMMA_KERNELS)}; "
            f"kernel={kernel!r} has no width to choose (pass gamma as a number or None)"
        )
    if gamma == "mean-distance":
        return None, None
    selection = select_gamma(X, n_clusters, kernel=kernel, sample_weight=sample_weight,
                             random_state=random_state)
    return selection.gamma, selection


def _start_partition(selection, n_clusters):
    """The selection's sample partition, or None when it has an empty cluster."""
    if selection is None or selection.sample_labels is None:
        return None
    labels = np.asarray(selection.sample_labels, dtype=np.intp)
    if np.bincount(labels, minlength=n_clusters).min() == 0:
        return None
    return labels


def auto_start_state(X, selection, kernel, n_clusters):
    """Mini-batch start for ``gamma="auto"``: centers = the sample partition's means.

    Center j is the mean in feature space of the sample points that the chosen
    width's best sample partition puts in cluster j (see
    :func:`mbkkm._core._partition_init.partition_state`). Returns None (use the
    estimator's ``init``) without a selection or when that partition has an empty
    cluster.
    """
    from .._core._partition_init import partition_state
    from ..backends import get_backend

    labels = _start_partition(selection, n_clusters)
    if labels is None:
        return None
    nx = get_backend(X)
    support = nx.take(X, nx.index(selection.sample_indices))
    return partition_state(support, labels, n_clusters, kernel)


def auto_start_inner(X, selection, kernel, n_clusters, chunk_rows):
    """Kernel k-means start for ``gamma="auto"``: (P0, c0) of the partition's means.

    P0[x, j] = <phi(x), C_j> = mean over s in C_j of K(x, s), computed in blocks
    of ``chunk_rows`` rows of X against the sample; c0[j] = ||C_j||^2. None as in
    :func:`auto_start_state`.
    """
    from .._core._partition_init import partition_norms

    labels = _start_partition(selection, n_clusters)
    if labels is None:
        return None
    from ..backends import get_backend

    nx = get_backend(X)  # on X's backend: numpy, or torch on its device
    S = nx.take(X, nx.index(selection.sample_indices))
    W = np.zeros((labels.size, n_clusters))                    # (m, k): 1 / |C_j| on C_j
    W[np.arange(labels.size), labels] = 1.0 / np.bincount(labels, minlength=n_clusters)[labels]
    W = nx.asarray(W, dtype=np.float64)
    P0 = nx.empty((X.shape[0], n_clusters), np.float64)
    for r0 in range(0, X.shape[0], chunk_rows):
        P0[r0:r0 + chunk_rows] = nx.astype(nx.kernel_tile(kernel, X[r0:r0 + chunk_rows], S),
                                           np.float64) @ W
    return P0, nx.asarray(partition_norms(S, labels, n_clusters, kernel), dtype=np.float64)
