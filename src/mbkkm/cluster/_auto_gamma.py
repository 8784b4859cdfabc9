"""gamma="auto": an unsupervised choice of the rbf / laplacian kernel width.

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
score is lower (``min_gain_wider``, 0), a narrower one (larger gamma) only when
its score is at most ``1 - min_gain`` (0.8) times the mean-distance width's. The
lowest score among the widths that pass wins. Why the asymmetry: the two
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
30-100 % at their narrower widths and pass the guard. When the winning width lies at an end of the
grid, the grid is extended by up to ``extend`` steps on that side; a choice still
at an end raises a :class:`GammaGridWarning`. The estimators then start from the
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

import dataclasses
import numbers
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy import linalg, sparse
from scipy.spatial.distance import cdist
from sklearn.cluster import KMeans  # at import (17 ms), not in the first fit (2-3 MiB)
from sklearn.metrics.pairwise import euclidean_distances, manhattan_distances
from sklearn.neighbors import NearestNeighbors
from sklearn.utils import check_random_state
from threadpoolctl import threadpool_limits

from .._core._lloyd import relocate_empty
from ._common import check_no_overflow

#: Kernels whose width gamma="auto" chooses, with the metric of their exponent.
AUTO_GAMMA_KERNELS = {"rbf": "sqeuclidean", "gaussian": "sqeuclidean", "laplacian": "cityblock"}

#: Default grid: multiples of the base width (1 / mean pairwise squared distance
#: for rbf, 1 / mean pairwise L1 distance for laplacian) from 1/8 to 32. (At 64x
#: kernel k-means on the sample is in its collapse regime on every real set
#: measured; the grid is extended when the choice lies at one of its ends.)
DEFAULT_MULTIPLIERS = tuple(2.0 ** e for e in range(-3, 6))

#: A narrower width (larger gamma) replaces the mean-distance one only when its
#: score is at most ``1 - MIN_GAIN`` times the mean-distance width's score.
MIN_GAIN = 0.2

#: A wider width (smaller gamma) replaces it when its score is at most
#: ``1 - MIN_GAIN_WIDER`` times that score (and lower).
MIN_GAIN_WIDER = 0.0

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


class GammaGridWarning(UserWarning):
    """gamma="auto" chose a width at an end of its (extended) candidate grid.

    The criterion may keep decreasing beyond the widths tried: pass the width as
    a number, or explore further with :func:`mbkkm.cluster.select_gamma`'s
    ``multipliers``.
    """


def default_sample_size(n_clusters):
    """Points of the sample ``select_gamma`` draws by default (before capping at n).

    20 per cluster, at least 500 and at most 1000: 500 up to k = 25, 1000 from
    k = 50 on (10 per cluster at k = 100, the most ``gamma=None`` selects for). The
    cost of the selection grows as the sample's square (kernel k-means) to cube
    (the eigendecompositions); 500 points keep it near 0.1 s for small k, and on
    the benchmark the choices at 500 and 1000 points were the same but on a few
    seeds (``docs/gamma.md``).
    """
    return int(min(SAMPLE_MAX, max(SAMPLE_MIN, SAMPLE_PER_CLUSTER * int(n_clusters))))


@dataclass(frozen=True)
class GammaSelection:
    """What ``gamma="auto"`` tried and why it chose its width.

    Attributes
    ----------
    gamma : float
        The chosen width.
    candidates : ndarray of shape (n_candidates,)
        The widths tried, increasing (the grid, extended where the choice lay at
        one of its ends).
    scores : ndarray of shape (n_candidates,)
        The criterion of each candidate (lower is better).
    criterion : str
        Name of the criterion (``"knn-normalized-cut"``).
    base_gamma : float
        The base width the candidates are multiples of (the mean-distance width
        of the sample).
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
    reference : int or None
        Index in ``candidates`` of the mean-distance width (multiplier 1), which
        is kept unless another candidate is better (a narrower one: clearly
        better); None when the grid does not hold it (then the lowest score wins).
    min_gain : float
        The relative margin of that guard for the narrower candidates (larger
        gamma): one wins only when its score is at most
        ``(1 - min_gain) * scores[reference]`` (:attr:`threshold`).
    min_gain_wider : float
        The same margin for the wider candidates (smaller gamma; 0: a lower score
        suffices; :attr:`threshold_wider`).
    at_edge : {"narrowest", "widest"} or None
        Set when the chosen width is the narrowest or the widest candidate even
        after the grid was extended (a :class:`GammaGridWarning` said so).
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
    reference: int | None = field(repr=False, default=None)
    min_gain: float = field(repr=False, default=MIN_GAIN)
    min_gain_wider: float = field(repr=False, default=MIN_GAIN_WIDER)
    at_edge: str | None = field(repr=False, default=None)

    @property
    def multipliers(self):
        """candidates / base_gamma."""
        return self.candidates / self.base_gamma

    @property
    def threshold(self):
        """The score a narrower candidate (larger gamma) must reach to replace the
        reference width (``(1 - min_gain) * scores[reference]``; None without a
        reference)."""
        if self.reference is None:
            return None
        return (1.0 - self.min_gain) * float(self.scores[self.reference])

    @property
    def threshold_wider(self):
        """The same for a wider candidate (smaller gamma): ``(1 - min_gain_wider) *
        scores[reference]``, and strictly below ``scores[reference]``."""
        if self.reference is None:
            return None
        return (1.0 - self.min_gain_wider) * float(self.scores[self.reference])

    def table(self):
        """A text table of the candidates and their scores, the choice marked."""
        lines = [f"gamma=auto ({self.criterion}, lower is better; sample of "
                 f"{self.n_samples} points, base width {self.base_gamma:.4g})",
                 f"{'gamma':>12} {'x base':>8} {'score':>9}"]
        for i, (g, m, s) in enumerate(zip(self.candidates, self.multipliers, self.scores)):
            marks = []
            if i == self.reference:
                marks.append("mean-distance width")
            if g == self.gamma:
                marks.append("<- chosen")
            lines.append(f"{g:12.5g} {m:8.3g} {s:9.4f}" + ("  " + ", ".join(marks) if marks
                                                             else ""))
        if self.reference is not None:
            s_ref = self.scores[self.reference]
            lines.append(f"a wider width (smaller gamma) replaces the mean-distance width with "
                         f"a score < {s_ref:.4g}" + (
                             f" and <= {1 - self.min_gain_wider:g} x it = "
                             f"{self.threshold_wider:.4g}" if self.min_gain_wider > 0 else ""))
            lines.append(f"a narrower width (larger gamma) only with a score "
                         f"<= {1 - self.min_gain:g} x {s_ref:.4g} = {self.threshold:.4g}")
        best = int(np.flatnonzero(self.candidates == self.gamma)[0])
        if (self.raw_scores is not None and best != self.reference
                and best != choose_width(self.scores, self.reference, self.min_gain,
                                         self.min_gain_wider)):
            lines.append("the lowest scores lie on a plateau of equal cuts at the end of the "
                         "grid: its innermost width is chosen")
        if self.at_edge is not None:
            lines.append(f"the choice is the {self.at_edge} width tried: the best width may "
                         f"lie beyond the grid")
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
        ax.axvline(self.base_gamma, color="0.6", ls=":", label="mean-distance width")
        if self.reference is not None:
            lo, hi = self.candidates[0], self.candidates[-1]
            ax.hlines(self.threshold_wider, lo, self.base_gamma, color="0.6", ls="-.", lw=0.8,
                      label=f"{1 - self.min_gain_wider:g} x its score (wider widths)")
            ax.hlines(self.threshold, self.base_gamma, hi, color="0.6", ls="--", lw=0.8,
                      label=f"{1 - self.min_gain:g} x its score (narrower widths)")
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
    weight of the edges inside C_j. An empty cluster adds nothing. Computed from
    A's edge list (bincounts over the edges), not with sparse products: the
    selection scores about 45 partitions on one graph.
    """
    A = sparse.csr_matrix(A)
    n = labels.shape[0]
    rows = np.repeat(np.arange(n), np.diff(A.indptr))             # edge (rows[e], A.indices[e])
    deg = np.bincount(rows, weights=A.data, minlength=n)
    vol = np.bincount(labels, weights=deg, minlength=n_clusters)   # (k,)
    same = labels[rows] == labels[A.indices]
    inside = np.bincount(labels[rows[same]], weights=A.data[same], minlength=n_clusters)
    ok = vol > 0
    return float(np.sum((vol[ok] - inside[ok]) / vol[ok]))


def select_gamma(X, n_clusters, *, kernel="rbf", sample_weight=None, random_state=None,
                 n_samples=None, multipliers=DEFAULT_MULTIPLIERS, n_neighbors=10,
                 n_seeds=4, max_iter=100, min_gain=MIN_GAIN, min_gain_wider=MIN_GAIN_WIDER,
                 extend=EXTEND):
    """Choose the width of an rbf or laplacian kernel without labels.

    Clusters a random sample of X with exact kernel k-means at each candidate
    width, scores each partition by its normalised cut on the sample's
    k-nearest-neighbour graph, and keeps the mean-distance width unless a wider
    width's score is lower or a narrower width's clearly lower (see the module
    docstring and :doc:`/gamma`). Never sees labels; the same ``random_state``
    gives the same choice.

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
    n_samples : int or None, default=None
        Size of the sample (capped at n); None: 20 points per cluster, at least
        500 and at most 1000 (:func:`default_sample_size`).
    multipliers : sequence of float, default=2**-3, ..., 2**5
        The candidates are ``multipliers * base``, base = 1 / (mean pairwise
        squared distance) of the sample for rbf (the mean-distance width),
        1 / (mean pairwise L1 distance) for laplacian. When they include 1, that
        width is the reference the others must beat (``min_gain``,
        ``min_gain_wider``).
    n_neighbors : int, default=10
        Neighbours of the k-NN graph the partitions are scored on.
    n_seeds : int, default=4
        Kernel k-means++ initialisations per candidate, plus one run from the
        spectral partition of the candidate's kernel matrix
        (:func:`spectral_partition`); the run with the lowest kernel k-means
        objective is the candidate's solution, unless the spectral-start run
        has a lower cut (then it is); the candidate's score is the cut of its
        solution smoothed over the grid (:func:`smooth_scores`); the chosen
        width's solution is ``sample_labels``.
    max_iter : int, default=100
        Lloyd iterations of each kernel k-means fit on the sample.
    min_gain : float in [0, 1), default=0.2
        A narrower candidate (larger gamma) replaces the reference (mean-distance)
        width only when its score is at most ``1 - min_gain`` times the
        reference's score (:func:`choose_width`).
    min_gain_wider : float in [0, 1), default=0.0
        The same margin for a wider candidate (smaller gamma): 0, a lower score
        suffices (a wider kernel moves kernel k-means towards plain k-means).
        ``min_gain=0, min_gain_wider=0`` keeps the plain lowest score.
    extend : int, default=2
        When the chosen width is the narrowest or the widest candidate, up to
        ``extend`` more candidates are tried beyond it, one grid step at a time;
        a choice still at an end warns (:class:`GammaGridWarning`).

    Returns
    -------
    selection : GammaSelection
        ``selection.gamma`` is the chosen width; candidates and scores explain it.

    Warns
    -----
    GammaGridWarning
        When the chosen width is still at an end of the extended grid.

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
    >>> bool(sel.scores[sel.candidates == sel.gamma][0] <= sel.threshold)
    True
    """
    if not isinstance(kernel, str) or kernel not in AUTO_GAMMA_KERNELS:
        raise ValueError(
            f"gamma='auto' chooses the width of the kernels {sorted(AUTO_GAMMA_KERNELS)}; "
            f"kernel={kernel!r} has no width to choose (pass gamma as a number or None)"
        )
    n_clusters = _check_int(n_clusters, "n_clusters", 1)
    if n_samples is None:
        n_samples = default_sample_size(n_clusters)
    n_samples = _check_int(n_samples, "n_samples", 2)
    n_neighbors = _check_int(n_neighbors, "n_neighbors", 1)
    n_seeds = _check_int(n_seeds, "n_seeds", 1)
    extend = _check_int(extend, "extend", 0)
    for name, gain in (("min_gain", min_gain), ("min_gain_wider", min_gain_wider)):
        if (isinstance(gain, bool) or not isinstance(gain, numbers.Real)
                or not 0 <= gain < 1):
            raise ValueError(f"{name} must be a number in [0, 1), got {gain!r}")
    mult = np.sort(np.asarray(multipliers, dtype=np.float64).ravel())
    if mult.size == 0 or not np.all(np.isfinite(mult)) or mult[0] <= 0:
        raise ValueError(f"multipliers must be positive finite numbers, got {multipliers!r}")
    mult = np.unique(mult)
    n = int(X.shape[0])
    if n < n_clusters:
        raise ValueError(f"n_samples={n} should be >= n_clusters={n_clusters}")
    start = time.perf_counter()
    with _selection_threads():
        selection = _select(X, n, n_clusters, kernel, sample_weight, random_state, n_samples,
                            mult, n_neighbors, n_seeds, max_iter, min_gain, min_gain_wider,
                            extend)
    return dataclasses.replace(selection, seconds=time.perf_counter() - start)


def _selection_threads():
    """One BLAS / OpenMP thread for the whole selection.

    Its work is a few hundred small products and eigendecompositions on a
    500-1000 point matrix, where extra threads cost more than they give, and on
    a busy machine their spinning made it 10-15x slower (README example, sample
    of 500: 0.35 s of CPU with one thread, 5.6 s with two, load average 7;
    ``benchmarks/RESULTS.md``). A user's tighter ``threadpool_limits`` stays in
    force (a limit of 1 is the tightest).
    """
    return threadpool_limits(limits=1)


def _select(X, n, n_clusters, kernel, sample_weight, random_state, n_samples, mult,
            n_neighbors, n_seeds, max_iter, min_gain, min_gain_wider, extend):
    """select_gamma's work on checked arguments (``seconds`` left to the caller)."""
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

    def solve(multiplier):
        return width_solution(np.exp(-(base * multiplier) * D), A, n_clusters, seeds,
                              spectral_seed, max_iter)

    # The grid, then up to `extend` steps beyond whichever end the choice lies at
    # (one step = the ratio of the two outermost multipliers on that side, x2 for
    # the default grid); a choice on a plateau of equal cuts at an end then steps
    # inside it (_off_end_plateau), and one still at an end is warned about.
    solutions = {float(mu): solve(mu) for mu in mult}
    step_lo = mult[1] / mult[0] if mult.size > 1 else 2.0
    step_hi = mult[-1] / mult[-2] if mult.size > 1 else 2.0
    added = {"widest": 0, "narrowest": 0}
    while True:
        grid = np.array(sorted(solutions))
        ref = np.flatnonzero(np.isclose(grid, 1.0, rtol=1e-12, atol=0.0))
        ref = int(ref[0]) if ref.size else None
        raw = np.array([solutions[mu][0] for mu in grid])
        scores = smooth_scores(raw)
        best = choose_width(scores, ref, min_gain, min_gain_wider)
        end = _grid_end(best, grid.size, ref)
        if end is None or added[end] >= extend:
            break
        added[end] += 1
        mu = grid[0] / step_lo if end == "widest" else grid[-1] * step_hi
        solutions[float(mu)] = solve(mu)
    best = _off_end_plateau(raw, best, ref)
    at_edge = _grid_end(best, grid.size, ref)
    candidates = base * grid
    if at_edge is not None:
        note = (" (wider still, kernel k-means approaches plain k-means)"
                if at_edge == "widest" else "")
        warnings.warn(
            f"gamma='auto': the criterion is lowest at the {at_edge} width tried, "
            f"{candidates[best]:.4g} ({grid[best]:.4g} x the mean-distance width), after "
            f"extending the grid by {added[at_edge]} step(s); a better width may lie beyond "
            f"it{note}: pass gamma as a number, or explore with "
            f"mbkkm.cluster.select_gamma(multipliers=...)",
            GammaGridWarning, stacklevel=3,
        )
    runs = [solutions[mu] for mu in grid]
    return GammaSelection(
        gamma=float(candidates[best]), candidates=candidates, scores=scores,
        criterion="knn-normalized-cut", base_gamma=float(base), n_samples=m,
        seed_scores=np.array([r[1] for r in runs]), sample_indices=idx,
        sample_labels=runs[best][4], seed_inertia=np.array([r[2] for r in runs]),
        seconds=None, raw_scores=raw,
        solution_runs=np.array([r[3] for r in runs], dtype=np.intp), reference=ref,
        min_gain=float(min_gain), min_gain_wider=float(min_gain_wider), at_edge=at_edge)


def choose_width(scores, reference, min_gain, min_gain_wider=0.0):
    """Index of the chosen candidate from the smoothed scores (lower is better).

    Candidates are sorted by increasing gamma, so those before ``reference`` (the
    mean-distance width) are wider and those after it narrower. A candidate
    passes when its score is lower than the reference's and at most
    ``(1 - min_gain_wider)`` (wider) or ``(1 - min_gain)`` (narrower) times it;
    the lowest score among those that pass wins (ties: the one nearest the
    reference, then the wider), else the reference. Without a reference the
    lowest score wins (ties: the widest).

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
    ok[reference] = False
    if not ok.any():
        return int(reference)
    low = np.flatnonzero(ok & np.isclose(scores, scores[ok].min(), rtol=1e-9, atol=0.0))
    return int(low[np.argmin(np.abs(low - reference))])  # equal distance: the wider first


def _grid_end(best, size, reference):
    """"widest" / "narrowest" when candidate ``best`` is the first / last of
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
    step = 1 if best == 0 else -1
    while (best + step != reference and 0 <= best + step <= last
           and np.isclose(raw[best + step], raw[best], rtol=1e-9, atol=0.0)):
        best += step
    return best


def width_solution(K, A, n_clusters, seeds, spectral_seed, max_iter):
    """Kernel k-means on a sample's kernel matrix K and the cut of its solution.

    Runs kernel k-means from ``len(seeds)`` kernel k-means++ initialisations and,
    where 1 < k < m, once from the spectral partition of K (last run). The
    solution is the run with the lowest objective (scikit-learn's ``n_init``
    rule; ties: the earlier run), or the spectral-start run when it cuts fewer
    edges of A. Returns ``(cut of the solution, cuts of all runs (R,), objectives
    (R,), index of the solution, its labels (m,))``.
    """
    m = K.shape[0]
    labels, objective = kernel_kmeans_runs(K, n_clusters, seeds, max_iter)
    spectral = 1 < n_clusters < m
    if spectral:
        sp_labels, sp_objective = lloyd_from_partition(
            K, spectral_partition(K, n_clusters, spectral_seed), n_clusters, max_iter)
        labels = np.vstack([labels, sp_labels[None]])
        objective = np.append(objective, sp_objective)
    cuts = np.array([knn_normalized_cut(A, lab, n_clusters) for lab in labels])
    chosen = int(np.argmin(objective))
    if spectral and cuts[-1] < cuts[chosen]:
        chosen = labels.shape[0] - 1
    return float(cuts[chosen]), cuts, objective, chosen, labels[chosen]


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
    from .._core import kernel_kmeans_plusplus
    from ..kernels._index import IndexKernel

    diag = np.diag(K).copy()
    index = IndexKernel("precomputed", K, diag=diag)
    items = np.arange(K.shape[0])
    centers = [kernel_kmeans_plusplus(items, index, n_clusters, check_random_state(int(seed)),
                                      None, diag=diag) for seed in seeds]
    P0 = np.stack([K[:, c] for c in centers])                 # (R, m, k)
    c0 = np.stack([diag[c] for c in centers])                 # (R, k)
    return lloyd_runs(K, diag, P0, c0, max_iter, tol)


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
    labels, objective = lloyd_runs(K, np.diag(K).copy(), P0[None], c0[None], max_iter, tol)
    return labels[0], float(objective[0])


def lloyd_runs(K, diag, P0, c0, max_iter, tol):
    """R runs of KernelKMeans' Lloyd (:func:`kernel_lloyd`) on one stored matrix K
    (unit weights), from the inner products P0 (R, m, k) and norms c0 (R, k) of
    their initial centers: ``(labels (R, m), objectives (R,))``.

    Each run follows kernel_lloyd step for step: E-step D = K(x, x) - 2 P + c
    (clipped at 0), stop when no label changed or the objective sum_x min_j D
    fell by less than ``tol`` times its previous value, else move points into
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
    rows = np.arange(m)
    w = np.ones(m)
    labels_old = objective_old = None
    for it in range(max_iter + 1):
        D = P * -2.0                                           # (r, m, k)
        D += diag[None, :, None]
        D += c[:, None, :]
        np.maximum(D, 0.0, out=D)
        labels = D.argmin(axis=2)                              # (r, m)
        mind = np.take_along_axis(D, labels[:, :, None], axis=2)[:, :, 0]
        objective = mind.sum(axis=1)
        if it == max_iter:
            done = np.ones(active.size, dtype=bool)
        elif labels_old is None:
            done = np.zeros(active.size, dtype=bool)
        else:
            done = ((labels != labels_old).sum(axis=1) == 0) | (
                objective_old - objective < tol * objective_old)
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
            if counts.min() <= 0:
                center_labels[j] = relocate_empty(center_labels[j], mind[j], w, k, counts)
        A = np.zeros((m, r, k))
        A[rows[:, None], np.arange(r)[None, :], center_labels.T] = 1.0
        size = A.sum(axis=0)                                   # (r, k)
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
    padded = np.concatenate([scores[:1], scores, scores[-1:]])
    return 0.25 * padded[:-2] + 0.5 * padded[1:-1] + 0.25 * padded[2:]


def default_selects_width(kernel, kernel_params, n, n_clusters, n_samples=SAMPLE_MAX,
                          sample_weight=None):
    """Whether ``gamma=None`` chooses the width as ``gamma="auto"`` does.

    Yes for the rbf and laplacian kernels (named) when ``kernel_params`` gives no
    gamma and the selection's sample holds at least
    :data:`MIN_POINTS_PER_CLUSTER` points per cluster (``min(n, 1000) >=
    10 * n_clusters``: up to k = 100, whose default sample holds 1000 points; with
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
