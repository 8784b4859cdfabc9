"""The criterion of gamma="auto": an unsupervised choice of the rbf / laplacian width.

Pure functions on a host sample of the data (the estimators' hook,
:mod:`mbkkm.cluster._auto_gamma`, draws it and publishes the choice as a
:class:`~mbkkm.cluster.GammaSelection`).

The criterion (see ``docs/gamma.md`` for the measurements behind it)
---------------------------------------------------------------------
For a grid of widths gamma_1 < ... < gamma_G (multiples of the mean-distance
width of the data, the fixed default), cluster a small random sample S of the
data with exact kernel k-means at each width, and score each partition with one
yardstick that does not depend on the width: its **normalised cut on the
k-nearest-neighbour graph of S**,

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
the rings); its cut, smoothed over neighbouring widths (weights 1/4, 1/2, 1/4),
is the width's score.

**The mean-distance width is kept unless another width is better, and a
narrower one clearly better**: a wider width (smaller gamma) replaces it when its
score is lower (``min_gain_wider``, 0) by more than ``noise_margin`` (0.25)
standard errors of the difference of the two scores, those errors estimated
from the spread of the cuts of each width's runs (:func:`score_noise`); a
narrower one (larger gamma) only when its score is at most ``1 - min_gain``
(0.8) times the mean-distance width's. The lowest score among the widths that
pass wins. (When the mean-distance width is kept, the estimators use that width
of all the data, which the sample's base width estimates: the fit is then the
``gamma="mean-distance"`` fit itself.) Why the asymmetry: the two
directions do not risk the same. A wider kernel moves kernel k-means towards
plain k-means (exp(-gamma d) ~ 1 - gamma d as gamma -> 0, and kernel k-means on
1 - gamma D is k-means on the points), a bounded, well-understood loss; a
narrower one moves it towards its collapse into one large cluster and a few
tiny ones. And the normalised cut prefers partitions into clusters of similar
volume: on unbalanced classes (one of 80 %, several below 1 %) its minimum was a
narrower width that splits the large class, worse than the default and than
k-means, while the widths it scored lower on the wider side were as good as
k-means or better (``docs/gamma.md``). Where the data have no structure that one
width separates much better than another (most real data sets measured), the
cut varies by 5-25 % between neighbouring widths and between kernel k-means'
local optima at one width; rings, moons and blobs of unequal spread lower it by
30-100 % at their narrower widths and pass the guard. On the wider side a lower
score within a quarter of that run-to-run noise says nothing either: there the
wider widths chosen did worse than the mean-distance width on average (digits,
Letter and blobs resampled to unequal classes; ``docs/gamma.md``). When the winning width
lies at an end of the grid, the grid is extended by up to ``extend`` steps on
that side; a choice still at an end is reported (the hook warns with a
:class:`~mbkkm.cluster.GammaGridWarning`). The estimators then start from the
winning solution (its clusters' feature-space means), because on non-convex
data the full fit from k-means++ can land in a bad local minimum even at a good
width.

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
start can be wrong. It assumes the clusters are regions of the k-NN graph (so it
favours connected, density-separated clusters); where no width is clearly
better it keeps the mean-distance width, which is no better than k-means on
strongly unbalanced classes. The sample holds 20 points per cluster, at least
500 and at most 1000 (500 up to k = 25): the selection costs (n_seeds + 1) * G
kernel k-means fits and G partial eigendecompositions on it, about 0.1-0.3 s
for small k.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import linalg, sparse
from scipy.spatial.distance import cdist
from sklearn.cluster import KMeans  # imported with the module, not inside the first fit
from sklearn.metrics.pairwise import euclidean_distances, manhattan_distances
from sklearn.neighbors import NearestNeighbors
from sklearn.utils import check_random_state
from threadpoolctl import threadpool_limits

from ..kernels._index import IndexKernel
from ._init import choice_without_replacement, kernel_kmeans_plusplus
from ._lloyd import relocate_empty

#: Kernels whose width gamma="auto" chooses, with the metric of their exponent.
AUTO_GAMMA_KERNELS = {"rbf": "sqeuclidean", "gaussian": "sqeuclidean", "laplacian": "cityblock"}

#: Default grid: multiples of the base width (1 / mean pairwise squared distance
#: for rbf, 1 / mean pairwise L1 distance for laplacian) from 1/8 to 32. (At 64x
#: kernel k-means on the sample is in its collapse regime on every real set
#: measured; the grid is extended when the choice lies at one of its ends.)
DEFAULT_MULTIPLIERS = tuple(2.0**e for e in range(-3, 6))

#: A narrower width (larger gamma) replaces the mean-distance one only when its
#: score is at most ``1 - MIN_GAIN`` times the mean-distance width's score.
MIN_GAIN = 0.2

#: A wider width (smaller gamma) replaces it when its score is at most
#: ``1 - MIN_GAIN_WIDER`` times that score (and lower).
MIN_GAIN_WIDER = 0.0

#: A wider width must also beat the mean-distance width's score by this many
#: standard errors of their difference (:func:`score_noise`): scores within their
#: own run-to-run noise keep the mean-distance width.
NOISE_MARGIN = 0.25

#: Grid steps added beyond an end of the grid when the choice lies there.
EXTEND = 2

#: ``gamma=None`` selects the width only with at least this many sample points per
#: cluster (:func:`default_selects_width`).
MIN_POINTS_PER_CLUSTER = 10

#: The default sample: this many points per cluster, within
#: [SAMPLE_MIN, SAMPLE_MAX] (:func:`default_sample_size`).
SAMPLE_PER_CLUSTER = 20
SAMPLE_MIN = 500
SAMPLE_MAX = 1000


class WidthSolution(NamedTuple):
    """Kernel k-means on the sample at one width (:func:`width_solution`)."""

    cuts: np.ndarray  # (R,) normalised k-NN cut of every run
    objectives: np.ndarray  # (R,) kernel k-means objective of every run
    chosen: int  # the run that is the solution
    labels: np.ndarray  # (m,) its labels


class WidthOptions(NamedTuple):
    """The checked options of one width search (see :func:`mbkkm.cluster.select_gamma`)."""

    multipliers: np.ndarray  # sorted, unique, positive
    n_neighbors: int
    max_iter: int
    min_gain: float
    min_gain_wider: float
    extend: int
    noise_margin: float = NOISE_MARGIN


class SampleDraw(NamedTuple):
    """The random draws of one selection, in the order they are made."""

    indices: np.ndarray  # (m,) rows of the sample, increasing
    seeds: np.ndarray  # (n_seeds,) k-means++ seeds
    spectral_seed: int


def default_sample_size(n_clusters):
    """Points of the sample ``select_gamma`` draws by default (before capping at n).

    20 per cluster, at least 500 and at most 1000: 500 up to k = 25, 1000 from
    k = 50 on (10 per cluster at k = 100, the most ``gamma=None`` selects for). The
    cost of the selection grows as the sample's square (kernel k-means) to cube
    (the eigendecompositions), so 500 points keep it cheap for small k; on the
    benchmark the choices at 500 and 1000 points were the same but on a few seeds
    (``docs/gamma.md``).
    """
    return int(min(SAMPLE_MAX, max(SAMPLE_MIN, SAMPLE_PER_CLUSTER * int(n_clusters))))


def normalized_cut(A, degrees, labels, n_clusters):
    """sum_j cut(C_j) / vol(C_j) of a partition of the nodes of a symmetric graph A.

    vol(C_j) = sum of the degrees in C_j, cut(C_j) = vol(C_j) - weight of the edges
    with both ends in C_j (self-loops count as inside). Empty clusters add nothing.
    Computed from A's edge list (bincounts over the edges), not with sparse
    products: a selection scores many partitions on one graph.
    """
    A = A.tocsr()
    rows = np.repeat(labels, np.diff(A.indptr))  # label of each edge's row
    same = rows == labels[A.indices]
    inside = np.bincount(rows[same], weights=A.data[same], minlength=n_clusters)
    vol = np.bincount(labels, weights=degrees, minlength=n_clusters)
    ok = vol > 0
    return float(np.sum((vol[ok] - inside[ok]) / vol[ok]))


def draw_sample(random_state, n, n_samples, n_seeds, sample_weight=None):
    """The sample's rows (with probability proportional to the weights, without
    replacement; all rows when n <= n_samples) and the seeds of the runs."""
    rng = check_random_state(random_state)
    w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    m = min(n_samples, n, n if w is None else int(np.count_nonzero(w)))
    if m >= n:
        idx = np.arange(n)
    elif w is None:  # rng.choice's rows, in O(m) draws at large n
        idx = np.sort(choice_without_replacement(rng, n, m))
    else:
        idx = np.sort(rng.choice(n, size=m, replace=False, p=w / w.sum()))
    seeds = rng.randint(np.iinfo(np.int32).max, size=n_seeds)
    spectral_seed = int(rng.randint(np.iinfo(np.int32).max))  # drawn last: the rest unchanged
    return SampleDraw(idx, seeds, spectral_seed)


def knn_graph(Xs, metric, n_neighbors):
    """The yardstick: the symmetrised k-NN graph A = (G + G^T > 0) of the sample,
    no self loops, CSR (m, m); the same for all widths."""
    m = Xs.shape[0]
    nn = min(n_neighbors, m - 1)
    if nn < 1:
        return sparse.csr_matrix((m, m))
    name = "euclidean" if metric == "sqeuclidean" else "manhattan"
    G = NearestNeighbors(n_neighbors=nn, metric=name).fit(Xs).kneighbors_graph(mode="connectivity")
    # duplicate rows may list a point as its own neighbour: those entries removed (not
    # G.setdiag(0), which warns on scipy < 1.13 where the diagonal has no entry)
    G.data[G.indices == np.repeat(np.arange(m), np.diff(G.indptr))] = 0
    G.eliminate_zeros()
    return ((G + G.T) > 0).astype(np.float64).tocsr()


def search_width(Xs, metric, n_clusters, draw, options):
    """Kernel k-means on the sample at every width of the grid, and the choice.

    The grid, then up to ``options.extend`` steps beyond whichever end the choice
    lies at (one step = the ratio of the two outermost multipliers on that side, x2
    for the default grid); a choice on a plateau of equal cuts at an end then
    steps inside it (:func:`_off_end_plateau`), and one still at an end is
    reported in ``at_edge``.

    Parameters
    ----------
    Xs : ndarray or CSR matrix of shape (m, d), float64
        The sample, on the host.
    metric : {"sqeuclidean", "cityblock"}
        The kernel's exponent (:data:`AUTO_GAMMA_KERNELS`).
    n_clusters : int
    draw : SampleDraw
        The seeds of the runs.
    options : WidthOptions

    Returns
    -------
    fields : dict
        The search's fields of :class:`~mbkkm.cluster.GammaSelection`: ``base_gamma``
        (the mean-distance width the grid multiplies), ``candidates`` (base_gamma
        times the multipliers tried, increasing), ``raw_scores`` (the cut of each
        width's solution), ``scores`` (raw_scores smoothed), ``reference`` (index
        of multiplier 1), ``at_edge`` ("widest" / "narrowest": the choice is still
        at an end), ``start_from_partition`` (:func:`trust_partition`), ``noise``
        (:func:`score_noise`), ``seed_scores``, ``seed_inertia`` and
        ``solution_runs`` (the cuts, objectives and chosen run of each width's
        :class:`WidthSolution`) and ``sample_labels`` (the chosen width's solution).
    best : int
        Index of the chosen width.
    added : int
        Grid steps added on the side of ``at_edge``.
    """
    # D: the (m, m) pairwise exponents of the kernel over gamma (squared Euclidean or
    # L1); base: 1 / their mean over the pairs of distinct points
    m = Xs.shape[0]
    if not sparse.issparse(Xs):
        D = cdist(Xs, Xs, metric)
    else:  # scikit-learn's sparse distances (cdist needs dense rows)
        sq = metric == "sqeuclidean"
        D = euclidean_distances(Xs, squared=True) if sq else manhattan_distances(Xs)
        np.fill_diagonal(D, 0.0)
    mean_d = D.sum() / max(m * (m - 1), 1)
    base = 1.0 / mean_d if mean_d > 0 else 1.0
    A = knn_graph(Xs, metric, options.n_neighbors)

    def solve(multiplier):
        K = np.exp(-(base * multiplier) * D)
        return width_solution(K, A, n_clusters, draw, options.max_iter)

    mult = options.multipliers
    solutions = {float(mu): solve(mu) for mu in mult}
    step_lo = mult[1] / mult[0] if mult.size > 1 else 2.0
    step_hi = mult[-1] / mult[-2] if mult.size > 1 else 2.0
    added = {"widest": 0, "narrowest": 0}
    while True:
        grid = np.array(sorted(solutions))
        runs = [solutions[mu] for mu in grid]
        ref = np.flatnonzero(np.isclose(grid, 1.0, rtol=1e-12, atol=0.0))
        ref = int(ref[0]) if ref.size else None
        raw = np.array([r.cuts[r.chosen] for r in runs])  # the cut of each solution
        scores = smooth_scores(raw)
        noise = score_noise([r.cuts for r in runs])
        best = choose_width(
            scores, ref, options.min_gain, options.min_gain_wider, noise, options.noise_margin
        )
        end = _grid_end(best, grid.size, ref)
        if end is None or added[end] >= options.extend:
            break
        added[end] += 1
        mu = grid[0] / step_lo if end == "widest" else grid[-1] * step_hi
        solutions[float(mu)] = solve(mu)
    best = _off_end_plateau(raw, best, ref)
    at_edge = _grid_end(best, grid.size, ref)
    fields = dict(
        base_gamma=float(base),
        candidates=base * grid,
        raw_scores=raw,
        scores=scores,
        reference=ref,
        at_edge=at_edge,
        start_from_partition=trust_partition(scores, best, ref, options.min_gain),
        noise=noise,
        seed_scores=np.array([r.cuts for r in runs]),
        seed_inertia=np.array([r.objectives for r in runs]),
        solution_runs=np.array([r.chosen for r in runs], dtype=np.intp),
        sample_labels=runs[best].labels,
    )
    return fields, best, 0 if at_edge is None else added[at_edge]


def trust_partition(scores, best, reference, min_gain):
    """Whether the fit starts from the chosen width's sample partition.

    Yes when the chosen width's smoothed score is at most ``1 - min_gain`` times
    the reference (mean-distance) width's -- the margin a narrower width needs to be
    chosen at all, so every narrower choice passes -- or when there is no
    reference (then the lowest score won outright); no when the reference is
    kept or a wider width won by less than that margin: the fit then starts from
    the estimator's ``init`` (k-means++), as a fit at that fixed width would.

    Why: the start from the partition is what separates non-convex clusters
    (rings, moons: k-means++ lands in a half-plane minimum even at the right
    width), and there the cut is 30-100 % lower than at the mean-distance width.
    Where no width is clearly better, the sample's lowest-objective partition is
    one of kernel k-means' many near-equal optima, and on unbalanced classes it
    splits the large class more evenly than the full fit from k-means++ does
    (measured: digits resampled to 80 % .. 0.2 %, ARI 0.116 from the partition,
    0.150 from k-means++ at the same widths; ``docs/gamma.md``).
    """
    if reference is None:
        return True
    if best == reference:
        return False
    return bool(scores[best] <= (1.0 - min_gain) * scores[reference])


def choose_width(scores, reference, min_gain, min_gain_wider=0.0, noise=None, noise_margin=0.0):
    """Index of the chosen candidate from the smoothed scores (lower is better).

    Candidates are sorted by increasing gamma, so those before ``reference`` (the
    mean-distance width) are wider and those after it narrower. A candidate
    passes when its score is lower than the reference's and at most
    ``(1 - min_gain_wider)`` (wider) or ``(1 - min_gain)`` (narrower) times it,
    and a wider one also by more than ``noise_margin`` standard errors of the
    difference, ``s_ref - s_i > noise_margin * sqrt(noise_i^2 + noise_ref^2)``
    (``noise``: (G,) standard errors of the scores, :func:`score_noise`; None:
    no such condition); the lowest score among those that pass wins (ties: the
    one nearest the reference, then the wider), else the reference. Without a
    reference the lowest score wins (ties: the widest).

    Why a margin on the narrower side: on data without a structure that one
    width separates much better, the scores of neighbouring widths differ by
    5-25 % (kernel k-means' local optima and the sample), and the cut's
    preference for clusters of similar volume picked narrower widths, worse than
    the default, on unbalanced data; rings, moons and blobs of unequal spread
    lower it by 30-100 %. Why none by default on the wider side: a wider width
    moves kernel k-means towards plain k-means, and where the cut preferred it
    the fits were as good as k-means or better (``docs/gamma.md``).
    """
    scores = np.asarray(scores, dtype=np.float64)
    if reference is None:
        return int(np.flatnonzero(np.isclose(scores, scores.min(), rtol=1e-9, atol=0.0))[0])
    s_ref = scores[reference]
    index = np.arange(scores.size)
    limit = np.where(index < reference, 1.0 - min_gain_wider, 1.0 - min_gain) * s_ref
    ok = (scores < s_ref) & (scores <= limit)
    if noise is not None and noise_margin > 0:
        noise = np.asarray(noise, dtype=np.float64)
        clear = s_ref - scores > noise_margin * np.sqrt(noise**2 + noise[reference] ** 2)
        ok &= (index > reference) | clear
    ok[reference] = False
    if not ok.any():
        return int(reference)
    low = np.flatnonzero(ok & np.isclose(scores, scores[ok].min(), rtol=1e-9, atol=0.0))
    return int(low[np.argmin(np.abs(low - reference))])  # equal distance: the wider first


def _grid_end(best, size, reference):
    """ "widest" / "narrowest" when candidate ``best`` is the first / last of
    ``size`` and not the reference; else None."""
    if size == 1 or best == reference:
        return None
    return "widest" if best == 0 else "narrowest" if best == size - 1 else None


def _off_end_plateau(raw, best, reference):
    """An end of the (extended) grid chosen on a plateau steps inside it.

    When the chosen candidate is the first or last and its inner neighbours have
    the same raw cut (the same partition quality at several widths, as a gap
    between clusters gives), the choice moves to the plateau's innermost width:
    the smoothing favours the end of such a plateau (its phantom neighbour beyond
    the grid repeats the end value), which says nothing about widths beyond it.
    """
    last = raw.size - 1
    if reference is None or best == reference or best not in (0, last):
        return best
    step = 1 if best == 0 else -1  # inwards: the reference is met before the other end
    while best + step != reference and np.isclose(raw[best + step], raw[best], rtol=1e-9, atol=0):
        best += step
    return best


def width_solution(K, A, n_clusters, draw, max_iter):
    """Kernel k-means on a sample's kernel matrix K and the cut of its solution.

    Runs kernel k-means from the ``draw.seeds`` kernel k-means++ initialisations
    (:class:`SampleDraw`) and, where 1 < k < m, once from the spectral partition of
    K (seeded by ``draw.spectral_seed``; last run). The
    solution is the run with the lowest objective (scikit-learn's ``n_init``
    rule; ties: the earlier run), or the spectral-start run when it cuts fewer
    edges of A. Returns a :class:`WidthSolution`.
    """
    labels, objective = kernel_kmeans_runs(K, n_clusters, draw.seeds, max_iter)
    spectral = 1 < n_clusters < K.shape[0]
    if spectral:
        sp_labels, sp_objective = lloyd_from_partition(
            K, spectral_partition(K, n_clusters, draw.spectral_seed), n_clusters, max_iter
        )
        labels = np.vstack([labels, sp_labels[None]])
        objective = np.append(objective, sp_objective)
    degrees = np.asarray(A.sum(axis=1)).ravel()
    cuts = np.array([normalized_cut(A, degrees, lab, n_clusters) for lab in labels])
    chosen = int(np.argmin(objective))
    if spectral and cuts[-1] < cuts[chosen]:
        chosen = labels.shape[0] - 1
    return WidthSolution(cuts, objective, chosen, labels[chosen])


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


def kernel_kmeans_runs(K, n_clusters, seeds, max_iter, tol=1e-4):
    """Kernel k-means from k-means++ on a kernel matrix K, once per seed.

    Run r is ``KernelKMeans(n_clusters, kernel="precomputed", max_iter=max_iter,
    tol=tol, random_state=seeds[r]).fit(K)``'s ``(labels_, inertia_)`` (== it,
    tested): kernel k-means++ on all points, then Lloyd; without the estimator's
    checks of K (a symmetric kernel matrix built here, once per width), and with
    the runs' Lloyd steps batched into one product with K per iteration
    (:func:`lloyd_runs`). Returns ``(labels (R, m), objectives (R,))``.
    """
    diag = np.diag(K).copy()
    index = IndexKernel("precomputed", K, diag=diag)
    items = np.arange(K.shape[0])
    rngs = [check_random_state(int(seed)) for seed in seeds]
    centers = [kernel_kmeans_plusplus(items, index, n_clusters, r, None, diag=diag) for r in rngs]
    P0 = np.stack([K[:, c] for c in centers])  # (R, m, k)
    c0 = np.stack([diag[c] for c in centers])  # (R, k)
    return lloyd_runs(K, diag, P0, c0, max_iter, tol)


def lloyd_from_partition(K, labels, n_clusters, max_iter, tol=1e-4):
    """Kernel k-means (KernelKMeans' Lloyd) on a kernel matrix K from a partition.

    The initial centers are the partition's cluster means in feature space:
    P0[x, j] = mean over s in C_j of K(x, s), c0[j] = ||C_j||^2 = mean of K over
    C_j x C_j. Returns ``(labels, objective)`` with objective = sum over points of
    the squared distance to their center (KernelKMeans' ``inertia_``). An empty
    cluster gets no point (c0 = inf) and is relocated by Lloyd as usual.
    """
    M = np.eye(n_clusters)[labels]  # (m, k) one-hot
    size = M.sum(axis=0)
    safe = np.where(size > 0, size, 1.0)
    KM = K @ M
    P0 = KM / safe
    c0 = np.where(size > 0, np.einsum("ij,ij->j", M, KM) / safe**2, np.inf)
    labels, objective = lloyd_runs(K, np.diag(K).copy(), P0[None], c0[None], max_iter, tol)
    return labels[0], float(objective[0])


def lloyd_runs(K, diag, P0, c0, max_iter, tol):
    """R runs of KernelKMeans' Lloyd (:func:`kernel_lloyd`) on one stored matrix K
    (unit weights), from the inner products P0 (R, m, k) and norms c0 (R, k) of
    their initial centers: ``(labels (R, m), objectives (R,))``.

    Each run follows kernel_lloyd step for step: E-step D = K(x, x) - 2 P + c
    (labels its argmin, the minima clipped at 0), stop when no label changed or
    the objective sum_x min_j D fell by less than ``tol`` times its previous value
    (0 <= fall < tol * objective: a rise is not convergence), else move points into
    empty clusters (farthest first) and take the clusters' means, P = K A, A the
    one-hot labels scaled by 1 / |C_j| (c_j = <A_j, P_j>, inf when empty); a last
    E-step after ``max_iter`` M-steps. The runs still moving share one product
    K @ [A_1 .. A_R] per iteration: K (m x m) is read once for all of them.
    """
    R, m, k = P0.shape
    labels_out = np.empty((R, m), dtype=np.intp)
    objective_out = np.empty(R)
    active = np.arange(R)
    P, c = P0, c0
    w = np.ones(m)
    labels_old = objective_old = None
    for it in range(max_iter + 1):
        D = P * -2.0  # (r, m, k)
        D += diag[None, :, None]
        D += c[:, None, :]
        labels = D.argmin(axis=2)  # (r, m)
        mind = D.min(axis=2)
        np.maximum(mind, 0.0, out=mind)  # rounding (as e_step)
        objective = mind.sum(axis=1)
        done = np.full(active.size, it == max_iter)
        if labels_old is not None:  # converged: no label changed, or a small fall
            decrease = objective_old - objective
            small_fall = (decrease >= 0) & (decrease < tol * objective_old)
            done |= (labels == labels_old).all(axis=1) | small_fall
        labels_out[active[done]] = labels[done]
        objective_out[active[done]] = objective[done]
        keep = ~done
        active, labels, mind, objective = active[keep], labels[keep], mind[keep], objective[keep]
        if active.size == 0:
            break
        r = active.size
        center_labels = labels.copy()
        for j in range(r):
            counts = np.bincount(center_labels[j], minlength=k).astype(np.float64)
            center_labels[j] = relocate_empty(center_labels[j], mind[j], w, k, counts)
        A = np.eye(k)[center_labels.T]  # (m, r, k) one-hot
        size = A.sum(axis=0)  # (r, k)
        A /= np.where(size > 0, size, 1.0)[None]
        P = (K @ A.reshape(m, r * k)).reshape(m, r, k).transpose(1, 0, 2)  # (r, m, k)
        c = np.einsum("mrk,rmk->rk", A, P)
        c[size <= 0] = np.inf
        labels_old, objective_old = labels, objective
    return labels_out, objective_out


def smooth_scores(scores):
    """Scores smoothed over the (log-spaced) width grid with weights 1/4, 1/2, 1/4.

    s~_i = (s_{i-1} + 2 s_i + s_{i+1}) / 4, the end values repeated beyond the
    ends. A width wins when its neighbourhood cuts few edges, not when one lucky
    partition does (measured: unsmoothed, moons picked 32-64x for partitions of
    ARI 0.4 on one seed in three); the centre weight 1/2 keeps an isolated good
    width (rings at 4x) ahead of its neighbours.
    """
    scores = np.asarray(scores, dtype=np.float64)
    padded = np.pad(scores, 1, mode="edge")
    return 0.25 * padded[:-2] + 0.5 * padded[1:-1] + 0.25 * padded[2:]


def score_noise(run_cuts):
    """Standard error of each smoothed score from the spread of its width's runs.

    The cut of width i's solution varies with kernel k-means' start: sd_i is the
    standard deviation (ddof 1) of the cuts of its runs (``run_cuts[i]``, the
    k-means++ runs and the spectral-start run; 0 with a single run). Smoothing
    (:func:`smooth_scores`) averages three widths' cuts with weights 1/4, 1/2, 1/4,
    so with independent noise the smoothed score's standard error is

        se_i = sqrt(sd_{i-1}^2 / 16 + sd_i^2 / 4 + sd_{i+1}^2 / 16),

    the end values repeated beyond the ends as in the smoothing.

    Why: on data where no width separates the clusters better (most real data,
    and the unbalanced sets), neighbouring widths' scores differ by less than
    this run-to-run noise, and a wider width chosen on such a difference did
    worse than the mean-distance width (``docs/gamma.md``).
    """
    sd = np.array([np.std(c, ddof=1) if np.size(c) > 1 else 0.0 for c in run_cuts])
    var = np.pad(sd, 1, mode="edge") ** 2
    return np.sqrt(var[:-2] / 16.0 + var[1:-1] / 4.0 + var[2:] / 16.0)


def selection_threads():
    """One BLAS / OpenMP thread for the whole selection.

    Its work is a few hundred small products and eigendecompositions on a
    500-1000 point matrix, where extra threads cost more than they give, and on
    a busy 2-core machine their spinning made it many times slower (the README
    example's fit with the width selection: 17 s with the default threads, 1.6 s
    with one). A user's tighter ``threadpool_limits`` stays in force (a limit of 1
    is the tightest).
    """
    return threadpool_limits(limits=1)
