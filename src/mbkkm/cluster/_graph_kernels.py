"""Graph kernels in the estimators: the k-NN graph, the heat kernel's time t, new points.

``kernel="heat"`` and ``kernel="knn"`` are resolved here, once per fit
(:func:`resolve_graph_kernel`): the k-NN graph of the fitted points
(:class:`~mbkkm.kernels.KNNGraph`), for the heat kernel the top eigenpairs of its
normalised adjacency (:class:`~mbkkm.kernels._spectral.GraphSpectrum`), the
diffusion time t (``t="auto"``: :func:`select_t`) and the rank, and an index
kernel that knows how a new point joins the graph, so that ``predict``,
``transform`` and ``score`` work on new data (:func:`graph_rows`).

t="auto": the normalised cut of the k-NN graph, as for the rbf width
--------------------------------------------------------------------
The heat kernel K_t = U diag(w_t) U^T, w_t = exp(-t (1 - lam)), is the Gram matrix of
the features F_t = U diag(sqrt w_t), so kernel k-means with it is k-means on the
rows of F_t. Small t keeps many eigenvectors with similar weights (clusters blur
into the graph's local noise), large t keeps only the first few (k-means then cuts
through dense regions, and at the limit only the degree survives). For each
candidate t, k-means (scikit-learn's, ``n_runs`` k-means++ starts) runs on the
features of a random sample of the fitted points, every fitted point is labelled
by its nearest center, and the partition is scored by its **normalised cut on the
k-NN graph itself**,

    ncut(C_1..C_k) = sum_j cut(C_j) / vol(C_j),   vol(C_j) = sum_{i in C_j} d_i,

the same yardstick for every t (the graph does not depend on t), and the objective
that spectral clustering relaxes (Shi & Malik 2000). A candidate's solution is the
run with the lowest cut; its cut, smoothed over neighbouring candidates (weights
1/4, 1/2, 1/4 on the log-spaced grid), is its score, and the lowest score wins. The
eigenpairs are computed once for all candidates; each candidate costs ``n_runs``
k-means runs on the sample and one labelling pass. The estimators then start from
the winning partition (its clusters' means in feature space), as ``gamma="auto"``
does for the rbf kernel.

n_neighbors="auto": the eigengap ratio of each candidate graph
----------------------------------------------------------------
One neighbour search for the largest candidate (10, 20 and 40 neighbours, each at
most n) gives the three graphs (:meth:`KNNGraph.truncated`), and the one with the
largest mu_{k+1} / mu_k of its normalised Laplacian is kept, more neighbours only
for a ratio more than 10 % larger (:func:`select_n_neighbors`): k groups joined by
few edges and no finer structure.
Unlike the normalised cut, which grows with the neighbours for any partition, the
ratio has no unit, so it compares graphs. A 10-NN graph that falls apart is left
to the rebuild rule (:func:`~mbkkm.kernels._spectral.connect_graph`).

The candidates are spread over the spectrum rather than over a fixed scale: the
candidate of rank r is the time at which the r-th eigenvector's weight falls to
1 / 100, t_r = ln(100) / (1 - lam_r) (with the default ``rank_tol=0.01`` the heat
kernel at t_r has rank r exactly), for ranks r = k, k sqrt 2, 2 k, ... up to
``max_components`` (k = n_clusters). The smallest candidate is thus the shortest
time the computed eigenpairs describe within the tolerance, and the largest keeps
about k eigenvectors, the regime of spectral clustering.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from threadpoolctl import threadpool_limits

from .._core._memory import (
    MemoryPlan,
    MemoryPlanError,
    available_host_memory,
    gib,
    label_chunk_rows,
)
from .._core._width import normalized_cut, smooth_scores
from .._validation import check_sample_weight
from .._warn import warn
from ..backends._numpy import to_dense
from ..kernels import get_spec
from ..kernels._gamma import top_heat_eigenpairs
from ..kernels._graph import (
    _check_data,
    _check_n_neighbors,
    fit_knn_graph,
    knn_kernel_from_graph,
    knn_kernel_rows,
)
from ..kernels._index import IndexKernel
from ..kernels._spectral import (
    CONNECT_MARGIN,
    DEFAULT_MAX_COMPONENTS,
    DEFAULT_PCA_COMPONENTS,
    DEFAULT_RANK_TOL,
    DENSE_MAX_SAMPLES,
    GraphSpectrum,
    check_heat_params,
    check_t,
    component_sizes,
    connect_graph,
    extend_eigenvectors,
    n_pairs_needed,
    normalized_adjacency,
    split_is_harmful,
    top_eigenpairs,
    unit_rows,
)
from . import _device
from ._auto_gamma import start_partition
from ._gamma_selection import plot_criterion

#: The weight at which the candidate of rank r leaves the r-th eigenvector (1 / 100).
_CANDIDATE_WEIGHT = 0.01

#: Eigenvalues of N within this of 1 count as 1 (a connected component each).
_ONE_TOL = 1e-9

#: Relative tolerance of the estimators' sparse eigensolver (kernel_params "tol").
EIGSH_TOL = 1e-4

#: The estimators' heat kernel is the normalised one (K(x, y) / sqrt(K(x, x) K(y, y)):
#: unit-length diffusion features): it clustered PenDigits and Letter better than the
#: plain form (mean NMI 0.84 against 0.82, 0.45 against 0.42) and MNIST as well.
DEFAULT_NORMALIZE = True

#: k-means runs per candidate, and the size of the sample they run on.
DEFAULT_T_RUNS = 3
DEFAULT_T_SAMPLE = 10000


class GraphSplitWarning(UserWarning):
    """The k-NN graph falls apart into connected components that are not clusters.

    Each component carries its own eigenvalue 1 of D^-1/2 A D^-1/2, and the graph
    kernels (the heat kernel at every t) separate the components before anything
    else: kernel k-means spends a cluster on each. That is harmful with more
    components than clusters or with small components (fewer than n / (2
    n_clusters) points). The heat kernel then rebuilds the graph with twice the
    neighbours, up to three times, and once more after a rebuild has joined the
    pieces (``kernel_params={"connect": False}`` keeps it); the warning says what
    was done. More neighbours
    (``kernel_params={"n_neighbors": ...}``) or ``kernel="rbf"`` are the remedies.
    """


# --------------------------------------------------------------------------- selection


def _nearest_center(F, C, chunk=65536):
    """Labels and squared distances of the rows of F to the centers C, in chunks."""
    labels = np.empty(F.shape[0], dtype=np.intp)
    dist = np.empty(F.shape[0])
    cc = np.einsum("ij,ij->i", C, C)
    for s in range(0, F.shape[0], chunk):
        Fc = F[s : s + chunk]
        D = cc[None, :] - 2.0 * (Fc @ C.T)  # ||f - c||^2 - ||f||^2
        labels[s : s + chunk] = D.argmin(axis=1)
        dist[s : s + chunk] = D.min(axis=1) + np.einsum("ij,ij->i", Fc, Fc)
    return labels, np.maximum(dist, 0.0)


@dataclass(frozen=True)
class TSelection:
    """What ``t="auto"`` tried and why it chose its diffusion time.

    Attributes
    ----------
    t : float
        The chosen diffusion time.
    candidates : ndarray of shape (n_candidates,)
        The times tried, increasing.
    scores : ndarray of shape (n_candidates,)
        The criterion of each candidate (lower is better): ``raw_scores`` smoothed.
    raw_scores : ndarray of shape (n_candidates,)
        The normalised k-NN cut of each candidate's solution (its lowest-cut run).
    criterion : str
        ``"knn-normalized-cut"``.
    ranks : ndarray of shape (n_candidates,)
        The heat kernel's rank at each candidate.
    errors : ndarray of shape (n_candidates,)
        The rank's error bound (first dropped weight) at each candidate.
    run_scores : ndarray of shape (n_candidates, n_runs)
        The cut of every k-means run.
    run_inertia : ndarray of shape (n_candidates, n_runs)
        The k-means objective of every run on all fitted points.
    labels : ndarray of shape (n_samples,)
        The chosen candidate's partition of the fitted points.
    sample_indices : ndarray of shape (n_sample,)
        The fitted points the k-means runs were fitted on, increasing.
    n_samples : int
        Size of that sample.
    seconds : float
        Wall-clock time of the selection (the eigenpairs excluded).
    """

    t: float
    candidates: np.ndarray
    scores: np.ndarray
    raw_scores: np.ndarray
    criterion: str
    ranks: np.ndarray
    errors: np.ndarray
    run_scores: np.ndarray | None = field(repr=False, default=None)
    run_inertia: np.ndarray | None = field(repr=False, default=None)
    labels: np.ndarray | None = field(repr=False, default=None)
    sample_indices: np.ndarray | None = field(repr=False, default=None)
    n_samples: int = 0
    seconds: float | None = field(repr=False, default=None)

    #: The fits start from the chosen partition (:func:`._auto_gamma.start_partition`).
    start_from_partition = True

    @property
    def sample_labels(self):
        """The chosen partition's labels of the sample points (None without a sample)."""
        return None if self.sample_indices is None else self.labels[self.sample_indices]

    def table(self):
        """A text table of the candidates, their ranks and scores, the choice marked."""
        lines = [
            f"t=auto ({self.criterion}, lower is better; k-means on {self.n_samples} points)",
            f"{'t':>10} {'rank':>5} {'error':>9} {'score':>8}",
        ]
        for t, r, e, s in zip(self.candidates, self.ranks, self.errors, self.scores):
            mark = "  <- chosen" if t == self.t else ""
            lines.append(f"{t:10.4g} {r:5d} {e:9.2g} {s:8.4f}{mark}")
        return "\n".join(lines)

    def summary(self):
        """The choice in one line (:meth:`table` has every candidate)."""
        n, scores = len(self.candidates), np.asarray(self.scores, dtype=np.float64)
        best = int(np.flatnonzero(self.candidates == self.t)[0])
        if np.isclose(scores, scores[best], rtol=1e-9, atol=1e-12).all():
            return (
                f"t=auto: all {n} diffusion times tried tie ({self.criterion} "
                f"{scores[best]:.4g} each): no time separates the clusters better than another; "
                f"kept t = {self.t:.4g} (rank {self.ranks[best]})"
            )
        return (
            f"t=auto chose t = {self.t:.4g} (rank {self.ranks[best]}): "
            f"{self.criterion} {scores[best]:.4g}, lowest of the {n} times tried"
        )

    def plot(self, ax=None):
        """The criterion against t (log axis), the choice marked. Returns the Axes."""
        ax = plot_criterion(self.candidates, self.scores, self.t, "t", self.criterion, ax)
        ax.set_xlabel("diffusion time t")
        ax.legend(fontsize="small")
        return ax


def candidate_times(spectrum, n_clusters, max_components=DEFAULT_MAX_COMPONENTS):
    """t="auto"'s candidates: ``(times, ranks)``, increasing times (decreasing ranks).

    For ranks r = k, k sqrt 2, 2 k, ... and ``max_components`` (k = n_clusters, at
    least 2), t_r = ln(100) / (1 - lam_r), lam_r the (r+1)-th largest eigenvalue of
    N: the time at which the first dropped eigenpair's weight exp(-t (1 - lam_r))
    is 1 / 100. Eigenvalues equal to 1 (one per connected component) have no such
    time and are skipped.
    """
    lam = np.sort(spectrum.eigenvalues)[::-1]
    cap = min(int(max_components), lam.size - 1)
    k = min(max(int(n_clusters), 2), cap)
    ranks = np.unique(np.r_[np.round(k * np.sqrt(2.0) ** np.arange(0, 40)), cap])
    ranks = ranks[ranks <= cap].astype(np.intp)
    gaps = 1.0 - lam[ranks]
    keep = gaps > _ONE_TOL
    if not np.any(keep):  # every computed eigenvalue is 1: t does not matter
        return np.array([1.0]), ranks[-1:]
    times = np.log(1.0 / _CANDIDATE_WEIGHT) / gaps[keep]
    order = np.argsort(times)
    return times[order], ranks[keep][order]


def select_t(
    spectrum,
    n_clusters,
    *,
    candidates=None,
    rank_tol=DEFAULT_RANK_TOL,
    max_components=DEFAULT_MAX_COMPONENTS,
    n_runs=DEFAULT_T_RUNS,
    sample_size=DEFAULT_T_SAMPLE,
    sample_weight=None,
    random_state=None,
    max_iter=100,
    normalize=False,
):
    """Choose the heat kernel's diffusion time t without labels.

    See the module docstring. Never sees labels; the same ``random_state`` gives the
    same choice.

    Parameters
    ----------
    spectrum : GraphSpectrum
        Eigenpairs of the fitted graph (``form="laplacian"``).
    n_clusters : int
    candidates : sequence of float, optional
        The times to try; default :func:`candidate_times`.
    rank_tol, max_components : float, int
        The rank rule of the heat kernel at each candidate.
    n_runs : int, default=3
        k-means++ starts per candidate.
    sample_size : int, default=10000
        Points the k-means runs are fitted on (all points are labelled and scored).
    sample_weight : ndarray of shape (n_samples,), optional
        Weights of the k-means runs and the sample's draw (proportional).
        All ones: the same as None.
    random_state : int, RandomState instance or None
    max_iter : int, default=100
        Lloyd iterations of each run.
    normalize : bool, default=False
        Cluster the unit-length feature rows (the normalised heat kernel), as the
        estimators then do.

    Returns
    -------
    selection : TSelection
    """
    start = time.perf_counter()
    rng = check_random_state(random_state)
    n = spectrum.graph.n_samples
    A, degrees = spectrum.graph.adjacency_, spectrum.graph.degrees_
    if candidates is None:
        candidates, _ = candidate_times(spectrum, n_clusters, max_components)
    candidates = np.sort(np.asarray([check_t(float(c)) for c in candidates]))
    p = None
    m = min(int(sample_size), n)
    # checked; unit weights are no weights (None)
    sample_weight = check_sample_weight(sample_weight, np.empty((n, 0)))
    if sample_weight is not None:
        p = sample_weight / sample_weight.sum()
        m = min(m, int(np.count_nonzero(sample_weight)))
    idx = np.sort(rng.choice(n, size=m, replace=False, p=p)) if m < n else np.arange(n)
    w_sample = None if sample_weight is None else sample_weight[idx]
    seeds = rng.randint(np.iinfo(np.int32).max, size=n_runs)
    run_scores = np.empty((candidates.size, n_runs))
    run_inertia = np.empty((candidates.size, n_runs))
    ranks = np.empty(candidates.size, dtype=np.intp)
    errors = np.empty(candidates.size)
    solutions = []
    for i, t in enumerate(candidates):
        ranks[i], errors[i] = spectrum.rank(t, rank_tol, max_components)
        F = spectrum.features(t, ranks[i], normalize)  # (n, r): K_t ~= F F^T
        runs = []
        for s, seed in enumerate(seeds):
            # One OpenMP thread: these are many short Lloyd runs on (m, r) features, and
            # their per-iteration thread synchronisation dominates; with other work on
            # the cores, one thread was 5x (10,000 x 64) to 40x (1,797 x 20) faster.
            with warnings.catch_warnings(), threadpool_limits(1, user_api="openmp"):
                warnings.simplefilter("ignore", ConvergenceWarning)  # duplicate points
                km = KMeans(n_clusters, n_init=1, max_iter=max_iter, random_state=int(seed)).fit(
                    F[idx], sample_weight=w_sample
                )
            labels, dist = _nearest_center(F, km.cluster_centers_)
            run_scores[i, s] = normalized_cut(A, degrees, labels, n_clusters)
            run_inertia[i, s] = float(dist.sum() if sample_weight is None else dist @ sample_weight)
            runs.append(labels)
        solutions.append(runs[int(np.argmin(run_scores[i]))])  # ties: the first run
    raw = run_scores.min(axis=1)
    scores = smooth_scores(raw)  # (s_{i-1} + 2 s_i + s_{i+1}) / 4 over the grid
    chosen = int(np.argmin(scores))  # ties: the shortest time
    return TSelection(
        t=float(candidates[chosen]),
        candidates=candidates,
        scores=scores,
        raw_scores=raw,
        criterion="knn-normalized-cut",
        ranks=ranks,
        errors=errors,
        run_scores=run_scores,
        run_inertia=run_inertia,
        labels=solutions[chosen],
        sample_indices=idx,
        n_samples=m,
        seconds=time.perf_counter() - start,
    )


# ------------------------------------------------------------- the number of neighbours

#: The neighbour counts ``n_neighbors="auto"`` chooses from (each at most n).
AUTO_NEIGHBORS = (10, 20, 40)

#: Seed of the start vector of the eigengaps' eigensolver: the eigenvalues do not
#: depend on it (to the solver's tolerance), and a fixed one leaves the fit's random
#: stream (the spectrum's start vector, the selection of t) as it is.
_GAP_START_SEED = 0


#: How much larger (relatively) a candidate's eigengap ratio must be than the one of
#: the fewer neighbours chosen so far to be taken instead.
NEIGHBOR_MARGIN = 0.1


def neighbor_candidates(n_samples):
    """The counts ``n_neighbors="auto"`` tries on n points: those of
    :data:`AUTO_NEIGHBORS` below n (n neighbours, the point included, make the graph
    complete: no cluster structure, refused when asked for), increasing; on fewer
    points than the smallest, half of them."""
    below = [c for c in AUTO_NEIGHBORS if c < n_samples]
    return below or [max(1, int(n_samples) // 2)]


def eigengap_ratio(graph, n_clusters, tol=EIGSH_TOL):
    """mu_{k+1} / mu_k of the normalised Laplacian L = I - D^-1/2 A D^-1/2 of a graph.

    mu_1 = 0 <= mu_2 <= ... are the eigenvalues of L (1 - lam for the eigenvalues lam
    of N = D^-1/2 A D^-1/2, from the k + 1 largest), k = n_clusters. The ratio is
    large when the graph has k groups joined by few edges (mu_k small: k-way cut
    cheap, Lee, Oveis Gharan & Trevisan 2014) and no finer ones (mu_{k+1} large), the
    condition under which spectral clustering finds them (Peng, Sun & Zanetti 2015);
    it has no unit, so graphs of different neighbour counts compare by it. ``inf``
    when the graph has k connected components (mu_k = 0: they are the clusters), 0
    with more.

    Each of the c connected components carries an eigenvalue 1 of N, with eigenvector
    sqrt(d) on the component. Lanczos finds repeated eigenvalues unreliably (one copy
    in exact arithmetic), so those c are written down and the solver asks for the
    next k + 1 - c on N with them projected out (:func:`top_heat_eigenpairs`).
    """
    n, k = graph.n_samples, int(n_clusters)
    c = component_sizes(graph).size  # connected components
    if c >= k:
        return np.inf if c == k else 0.0
    if n <= DENSE_MAX_SAMPLES or k + 1 >= n - 1:
        N = normalized_adjacency(graph.adjacency_, graph.degrees_)
        lam = top_eigenpairs(N, min(k + 1, n), tol=tol)[0]
    else:
        lam = top_heat_eigenpairs(graph.adjacency_, k + 1, tol=tol, random_state=_GAP_START_SEED)[0]
    mu = 1.0 - np.sort(lam)[::-1]
    return float(mu[k] / mu[k - 1])


@dataclass(frozen=True)
class NeighborSelection:
    """What ``n_neighbors="auto"`` tried and why it chose its count.

    Attributes
    ----------
    n_neighbors : int
        The chosen count (before any rebuild of a split graph).
    candidates : ndarray of shape (n_candidates,)
        The counts tried, increasing.
    ratios : ndarray of shape (n_candidates,)
        The eigengap ratio mu_{k+1} / mu_k of each candidate's graph (higher is
        better; :func:`eigengap_ratio`); NaN when not computed (the smallest
        candidate's graph falls apart, and the rebuild rule decides).
    """

    n_neighbors: int
    candidates: np.ndarray
    ratios: np.ndarray

    def table(self):
        """A text table of the candidates and their ratios, the choice marked."""
        lines = [
            "n_neighbors=auto (eigengap ratio mu_{k+1} / mu_k, higher is better)",
            f"{'n_neighbors':>11} {'ratio':>8}",
        ]
        for c, r in zip(self.candidates, self.ratios):
            mark = "  <- chosen" if c == self.n_neighbors else ""
            lines.append(f"{c:11d} {r:8.4g}{mark}")
        return "\n".join(lines)


def select_n_neighbors(graph, n_clusters, candidates, tol=EIGSH_TOL):
    """Choose the neighbour count of the heat kernel's graph without labels.

    The graphs of the ``candidates`` are read from ``graph``'s own search (built with
    the largest, :meth:`KNNGraph.truncated`). When the smallest one falls apart
    harmfully (:func:`split_is_harmful`) it is returned as it is, for the rebuild
    rule (:func:`connect_graph`) to repair. Otherwise the candidates are taken in
    increasing order, and one replaces the choice so far when its eigengap ratio
    mu_{k+1} / mu_k (:func:`eigengap_ratio`) is more than :data:`NEIGHBOR_MARGIN`
    (10 %) larger.

    Returns
    -------
    graph : KNNGraph
        The chosen candidate's graph.
    selection : NeighborSelection
    """
    candidates = np.asarray(candidates, dtype=np.intp)
    ratios = np.full(candidates.size, np.nan)
    first = graph.truncated(int(candidates[0]))
    if split_is_harmful(component_sizes(first), n_clusters) or graph.n_samples <= n_clusters + 1:
        return first, NeighborSelection(int(candidates[0]), candidates, ratios)
    best, best_graph = 0, None
    for i, c in enumerate(candidates):
        g = graph if c == graph.n_neighbors else first if i == 0 else graph.truncated(int(c))
        ratios[i] = eigengap_ratio(g, n_clusters, tol)
        # More neighbours only for a clearly larger ratio: between close ratios the
        # order is noise (MNIST: 10 first on a 20,000-image sample, 20 first by 1.7 %
        # on all 70,000), and the sparser graph is the cheaper one.
        if best_graph is None or ratios[i] > (1.0 + NEIGHBOR_MARGIN) * ratios[best]:
            best, best_graph = i, g
    best_graph.seconds_ = dict(graph.seconds_)  # the one search's
    return best_graph, NeighborSelection(int(candidates[best]), candidates, ratios)


# ------------------------------------------------------------------- the estimators' hook


def _graph_params(name, kernel_params, random_state):
    """The graph kernel's parameters, checked, with the estimator's defaults filled in."""
    spec = get_spec(name)
    params = dict(kernel_params or {})
    spec.check_params(params)
    if spec.name == "heat" and "max_dense_bytes" in params:
        raise ValueError(
            "kernel_params: 'max_dense_bytes' sets heat_kernel's dense output; the "
            "estimators keep the heat kernel as eigenpairs (its rank is set by "
            "'n_components', or chosen with 'rank_tol' up to 'max_components')"
        )
    if spec.name == "knn" and "n_neighbors" not in params:
        raise ValueError("kernel='knn' needs the parameter 'n_neighbors' (in kernel_params)")
    params.setdefault("random_state", random_state)
    for key, value in _HEAT_DEFAULTS.items() if spec.name == "heat" else ():
        params.setdefault(key, value)
    return spec.name, params


#: The estimators' defaults of the heat kernel's parameters. ``tol`` is ARPACK's
#: relative tolerance: on the MNIST 10-NN graph, 1e-4 gave the top 61 eigenvalues
#: within 4e-11 of a 1e-6 solve, in 6.5 s.
_HEAT_DEFAULTS = {
    "n_neighbors": "auto",
    "pca_components": DEFAULT_PCA_COMPONENTS,
    "t": "auto",
    "form": "laplacian",
    "n_components": None,
    "max_components": DEFAULT_MAX_COMPONENTS,
    "rank_tol": DEFAULT_RANK_TOL,
    "tol": EIGSH_TOL,
    "connect": True,
    "normalize": DEFAULT_NORMALIZE,
}


def plan_graph(name, n, n_features, itemsize, params):
    """The memory plan of building a graph kernel on n points (bytes, before any work).

    Terms: the projected copy of X and the randomised PCA's centred copy, the
    neighbour search's (n, n_neighbors - 1) indices and distances, the sparse
    adjacency (at most n (2 n_neighbors - 1) entries of 12 bytes, about four copies
    while it is symmetrised and normalised); for the heat kernel the eigensolver
    (ARPACK keeps max(2 p + 1, 20) Lanczos vectors of n floats for p pairs, or the
    dense n x n decomposition up to 500 points), the eigenvectors, and the features
    the selection of t clusters (n x rank).
    """
    k = params["n_neighbors"]
    # "auto": one search for the largest candidate, whose lists the others are read from
    k = max(neighbor_candidates(n)) if isinstance(k, str) else int(k)
    pca = params.get("pca_components")
    p = n_features if pca is None or n_features <= pca or n <= pca else int(pca)
    terms = {}
    if p < n_features:
        terms["PCA: centred copy of X and the projection (n, pca_components)"] = (
            n * n_features * itemsize + n * p * itemsize
        )
    terms["neighbour indices and distances (n, n_neighbors - 1)"] = 16 * n * max(k - 1, 0)
    terms["sparse adjacency while symmetrised (4 copies)"] = 4 * 12 * n * (2 * max(k - 1, 0) + 1)
    if name == "heat":
        pairs = n_pairs_needed(n, params["n_components"], params["max_components"])
        if n <= DENSE_MAX_SAMPLES or pairs >= n - 1:  # as GraphSpectrum decides
            terms["dense eigendecomposition (3 n x n)"] = 3 * 8 * n * n
        else:
            terms["eigensolver: Lanczos vectors (n, max(2 p + 1, 20))"] = (
                8 * n * min(n, max(2 * pairs + 1, 20))
            )
        terms["eigenvectors (n, p)"] = 8 * n * pairs
        terms["features of the selection of t and the kernel (2 x (n, rank))"] = 2 * 8 * n * pairs
    return MemoryPlan(
        where="host",
        terms={a: int(b) for a, b in terms.items()},
        peaks={"graph": int(sum(terms.values()))},
        checked=("graph",),
        shapes={"n": n, "n_neighbors": k, "dims": p},
        hints={
            "graph": "n_neighbors or max_components (kernel_params), use fewer points, or use "
            "kernel='rbf' (the mini-batch estimator never builds a graph or an n x n matrix)"
        },
    )


class GraphExtension:
    """How a new point gets its kernel values against the fitted points.

    For the heat kernel, its features f(x) = v(x) diag(sqrt w) from the Nystroem
    extension of the kept eigenvectors
    (:func:`~mbkkm.kernels._spectral.extend_eigenvectors`), divided by its
    length for the normalised kernel: K(x, y) = <f(x), f(y)>, K(x, x) = ||f(x)||^2.
    For the k-NN kernel, its row
    K(x, j) = b_j / (d_x d_j) and K(x, x) = 1 / d_x^2 (:func:`knn_kernel_rows`).
    """

    def __init__(self, name, graph, matrix):
        self.name = name
        self.graph = graph
        self.matrix = matrix

    def rows(self, X):
        """``(items, diag)``: what :meth:`cross` reads for each new point, and K(x, x)."""
        if self.name == "knn":
            return knn_kernel_rows(self.graph, X)
        K = self.matrix  # LowRankKernel: U diag(w) U^T, U = diag(s) V when normalised
        F = extend_eigenvectors(self.graph, K.eigenvalues, K.eigenvectors, X) * np.sqrt(K.weights)
        F = F if K.row_scale is None else unit_rows(F)[0]  # normalised: unit-length rows
        return F, np.einsum("ij,ij->i", F, F)

    def cross(self, support, rows):
        """K(support, new points), shape (m, len(rows)), float64."""
        support = np.asarray(support, dtype=np.intp)
        if self.name == "knn":
            return to_dense(rows[:, support].T)
        return self.matrix.features[support] @ rows.T


def resolve_graph_kernel(estimator, X, sample_weight):
    """The estimators' graph-kernel hook: ``(IndexKernel, t_, t_selection_)``.

    Builds the k-NN graph of X (after checking the memory plan), then for "knn" the
    sparse D^-1 A D^-1 and for "heat" its eigenpairs, t (``t="auto"``:
    :func:`select_t`; a number: the same runs at that t alone, whose best
    partition the fit starts from) and the low-rank kernel. The index kernel's
    ``params`` record every resolved parameter (``t``, ``rank``, ``error``, the
    graph's), and its ``extension`` gives new points their kernel values.
    """
    name, params = _graph_params(estimator.kernel, estimator.kernel_params, estimator.random_state)
    X = _check_data(X)  # dense only: "dense data is required" for sparse X
    n = X.shape[0]
    n_clusters = estimator.n_clusters
    auto = _check_graph_params(name, params, n)
    t = params.get("t")
    rng = check_random_state(params["random_state"])
    _printed_plan(estimator, name, X, params).check(
        available_host_memory(),
        what=f"{type(estimator).__name__}.fit (kernel={name!r}: the k-NN graph and its eigenpairs)",
    )
    # n_neighbors="auto": one search for the largest candidate, the others read from it
    candidates = neighbor_candidates(n) if auto else [params["n_neighbors"]]
    metric, pca = params.get("metric", "euclidean"), params.get("pca_components")
    graph = fit_knn_graph(X, candidates[-1], metric, pca, rng, params.get("n_jobs"))
    neighbors = None  # the NeighborSelection of "auto"
    if auto:
        graph, neighbors = select_n_neighbors(graph, n_clusters, candidates, params["tol"])
        if estimator.verbose:
            print(neighbors.table())
    tried, asked = [component_sizes(graph)], graph.n_neighbors
    if name == "heat" and params["connect"]:
        graph, tried = connect_graph(
            graph,
            n_clusters,
            margin=CONNECT_MARGIN,
            before_rebuild=lambda g, k: _check_rebuild(estimator, name, g, k, asked, params),
        )
    _warn_split(estimator, graph, tried, asked)
    if name == "knn":
        return _index_kernel("knn", knn_kernel_from_graph(graph), params, graph, X), None, None
    spectrum = GraphSpectrum(
        graph,
        n_pairs_needed(n, params["n_components"], params["max_components"]),
        form=params["form"],
        tol=params["tol"],
        random_state=rng,
    )
    selection = None
    if params["form"] == "laplacian" and n > n_clusters:
        selection = select_t(
            spectrum,
            n_clusters,
            candidates=None if isinstance(t, str) else [t],
            rank_tol=params["rank_tol"],
            max_components=params["max_components"],
            sample_weight=sample_weight,
            random_state=rng,
            normalize=params["normalize"],
        )
        t = selection.t
    elif isinstance(t, str):  # "auto" on as many points as clusters: t cannot matter
        t = float(candidate_times(spectrum, n_clusters, params["max_components"])[0][-1])
    K = spectrum.kernel(
        t, params["n_components"], params["rank_tol"], params["max_components"], params["normalize"]
    )
    resolved = dict(
        params,
        n_neighbors=graph.n_neighbors,
        t=t,
        rank=K.rank,
        error=K.error,
        components=int(tried[-1].size),
        eigensolver_seconds=spectrum.seconds,
        **graph.seconds_,
    )
    if graph.n_neighbors != params["n_neighbors"]:
        resolved["n_neighbors_asked"] = params["n_neighbors"]
    if neighbors is not None:
        resolved["n_neighbors_candidates"] = neighbors.candidates.tolist()
        resolved["eigengap_ratios"] = neighbors.ratios.tolist()
    return _index_kernel("heat", K, resolved, graph, X), t, selection


def _check_graph_params(name, params, n):
    """Check the graph kernel's parameters on n points before any work; returns whether
    the neighbours are chosen (``n_neighbors="auto"``)."""
    k = params["n_neighbors"]
    auto = name == "heat" and isinstance(k, str) and k == "auto"
    if not auto:
        if name == "heat" and isinstance(k, str):
            raise ValueError(f"n_neighbors must be an integer or 'auto', got {k!r}")
        _check_n_neighbors(k, n)
        if k == n and n > 1:  # every point every point's neighbour: nothing to cluster
            raise ValueError(
                f"kernel={name!r} with n_neighbors={k}, the number of points: the k-NN graph "
                "is complete (every point a neighbour of every other), and its kernel holds "
                "no cluster structure; use fewer neighbours (10-30, or the dataset's "
                "n_neighbors in mbkkm.datasets)"
            )
    if name == "heat":
        t = params["t"]
        keys = ("form", "n_components", "max_components", "rank_tol", "normalize", "connect")
        check_heat_params(n, *(params[key] for key in keys))
        if not (isinstance(t, str) and t == "auto"):
            check_t(t)
        if params["form"] != "laplacian" and isinstance(t, str):
            raise ValueError(
                "t='auto' is defined for form='laplacian'; pass a number t with form='adjacency'"
            )
    return auto


def _printed_plan(estimator, name, points, params):
    """:func:`plan_graph` of a graph on the rows of ``points`` (n, dims), printed when
    the estimator is verbose."""
    plan = plan_graph(name, *points.shape, points.dtype.itemsize, params)
    if estimator.verbose:
        print(plan.report())
    return plan


def _index_kernel(name, K, params, graph, X):
    """The fitted graph kernel as the estimators hold it: its matrix over the fitted
    points, and the graph new points join (:class:`GraphExtension`)."""
    extension = GraphExtension(name, graph.for_new_points(), K)
    return IndexKernel(name, K, params, dtype=X.dtype, extension=extension)


def _check_rebuild(estimator, name, graph, n_neighbors, asked, params):
    """The memory plan of rebuilding ``graph`` with ``n_neighbors``, checked before the
    rebuild allocates anything.

    The projection is done (the search runs on ``graph.points_``) and the current
    graph is already held, so it is in the memory no longer available; the plan counts
    what comes next: the new graph's search and adjacency, then the eigensolver.
    """
    params = dict(params, n_neighbors=n_neighbors, pca_components=None)
    plan = _printed_plan(estimator, name, graph.points_, params)
    available = available_host_memory()
    if available is None or plan.peak <= available:
        return
    big = sorted(plan.terms.items(), key=lambda t: -t[1])[:2]
    raise MemoryPlanError(
        f"{type(estimator).__name__}.fit (kernel={name!r}): the {asked}-NN graph falls "
        f"apart, and rebuilding it with n_neighbors={n_neighbors} would need about "
        f"{gib(plan.peak)}, but {gib(available)} is available (largest parts: "
        + ", ".join(f"{part} {gib(b)}" for part, b in big)
        + f"). Pass kernel_params={{'connect': False}} to keep the {asked}-NN "
        "graph as it is (split, with a GraphSplitWarning), fewer points, or use "
        "kernel='rbf' (the mini-batch estimator never builds a graph or an n x n matrix)."
    )


def _warn_split(estimator, graph, tried, asked):
    """GraphSplitWarning when the graph of ``asked`` neighbours has a harmful split
    (:func:`~mbkkm.kernels._spectral.split_is_harmful`), saying what was done: rebuilt
    with more neighbours (``tried`` lists the component sizes of each graph built), or
    kept."""
    first, last = tried[0], tried[-1]
    if not split_is_harmful(first, estimator.n_clusters):
        return

    def listed(sizes):
        return ", ".join(map(str, sizes[:5])) + (", ..." if sizes.size > 5 else "")

    if len(tried) > 1:
        what = f"Rebuilt with n_neighbors={graph.n_neighbors}: " + (
            "connected." if last.size == 1 else f"{last.size} components (sizes {listed(last)})."
        )
        if len(tried) > 2 and not split_is_harmful(tried[-2], estimator.n_clusters):
            what += (
                f" (twice the {graph.n_neighbors // 2} neighbours that first joined "
                "the pieces, whose joins are bottlenecks.)"
            )
    else:
        what = "Kept as it is."
    warn(
        f"{type(estimator).__name__}: the {asked}-NN graph of the data falls apart into "
        f"{first.size} connected components (sizes {listed(first)}); the kernel="
        f"{estimator.kernel!r} cannot relate points of different components, and kernel k-means "
        f"spends a cluster on each. {what} Pass more neighbours (kernel_params={{'n_neighbors': "
        "...}) or use kernel='rbf'.",
        GraphSplitWarning,
    )


def graph_assign(estimator, state, X, return_distances):
    """Labels (and distances) of new points for a graph kernel (``predict``...) on the
    fitted windows ``state``, once the model is known to have an extension to new
    points (:meth:`._base.GraphKernel.check_inductive`)."""
    from .._core import assign

    ext = estimator.kernel_.extension
    items, diag = ext.rows(X)
    if ext.name == "heat" and isinstance(state.support, np.ndarray):
        # The low-rank heat kernel K = F F^T, through the centers: center j is the
        # feature vector C_j = sum_s a_s F[S_s] over its support points (coefficients
        # a_s), so D[x, j] = K(x, x) - 2 <f(x), C_j> + c_j costs O(n_new k r) once the
        # (k, r) centers are formed, instead of the (m, n_new) kernel tile of every
        # support point against every new point (m is all n fitted points for
        # KernelKMeans).
        support = np.asarray(state.support, dtype=np.intp)
        A = sp.csr_matrix(
            (state.coef, (state.labels, np.arange(support.size))),
            shape=(state.n_clusters, support.size),
        )
        C = A @ ext.matrix.features[support]  # (k, r)
        D = diag[:, None] - 2.0 * (items @ C.T) + state.host_norms()[None, :]
        labels = D.argmin(axis=1).astype(np.int64)  # before the clip, as the fit labels
        np.maximum(D, 0.0, out=D)
        mind = D[np.arange(D.shape[0]), labels]
        return (labels, mind, D.astype(X.dtype, copy=False)) if return_distances else (labels, mind)
    m = state.support.shape[0]
    rows = label_chunk_rows(
        estimator.working_memory, m, estimator.n_clusters, _device.itemsize(items)
    )
    found = assign(
        items,
        state,
        estimator.kernel_,
        cross_kernel=ext.cross,
        diag=lambda start, chunk: diag[start : start + chunk.shape[0]],
        chunk_rows=rows,
        return_distances=return_distances,
    )
    if return_distances:  # in the dtype of the rows, as for the other kernels
        found = (*found[:2], found[2].astype(X.dtype, copy=False))
    return found


def graph_start_inner(selection, kernel, n_clusters):
    """Kernel k-means start from the selection of t: ``(P0, c0)`` of its clusters' means.

    With K = U diag(w) U^T and the sample's (m, k) averaging matrix W
    (1 / |C_j| on C_j): P0 = K[:, S] W = U (w * (U_S^T W)), c0_j = ||diag(sqrt w) U_S^T
    W_j||^2; never an n x m block.
    """
    found = start_partition(selection, n_clusters)
    if found is None:
        return None
    S, labels = found
    K = kernel.matrix
    W = np.eye(n_clusters)[labels] / np.bincount(labels, minlength=n_clusters)
    G = K.U[S].T @ W  # (r, k)
    P0 = K.U @ (K.weights[:, None] * G)  # (n, k)
    c0 = np.einsum("rk,rk,r->k", G, G, K.weights)
    return P0, c0
