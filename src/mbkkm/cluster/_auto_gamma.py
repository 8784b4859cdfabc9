"""gamma="auto" in the estimators: draw the sample, run the criterion, publish it.

The criterion itself (the normalised k-NN cut of kernel k-means' partitions of
a sample over a grid of widths, and why) is :mod:`mbkkm._core._width`; what it
returns to the user is :class:`~mbkkm.cluster.GammaSelection`. This module is
the estimators' side: :func:`select_gamma` (the public function: checks, the
sample's rows on the host, the warning), :func:`resolve_auto_gamma` (what
``gamma`` means for one fit) and the start of a fit from the chosen partition.
"""

from __future__ import annotations

import numbers
import time

import numpy as np

from .._core._partition_init import partition_norms, partition_state
from .._core._width import (
    AUTO_GAMMA_KERNELS,
    DEFAULT_MULTIPLIERS,
    EXTEND,
    MIN_GAIN,
    MIN_GAIN_WIDER,
    MIN_POINTS_PER_CLUSTER,
    NOISE_MARGIN,
    SAMPLE_MAX,
    WidthOptions,
    default_sample_size,
    draw_sample,
    search_width,
    selection_threads,
)
from .._validation import as_rows, check_sample_weight, check_sampled_rows_finite
from .._warn import warn
from ..backends import get_backend
from ..kernels._gamma import check_int
from ._gamma_selection import GammaGridWarning, GammaSelection
from ._rows import check_no_overflow, rows_of


def _check_kernel(kernel, says):
    """A ValueError unless gamma="auto" chooses the width of ``kernel``."""
    if not isinstance(kernel, str) or kernel not in AUTO_GAMMA_KERNELS:
        raise ValueError(
            f"{says} the width of the kernels {sorted(AUTO_GAMMA_KERNELS)}; "
            f"kernel={kernel!r} has no width to choose (pass gamma as a number or None)"
        )


def select_gamma(
    X,
    n_clusters,
    *,
    kernel="rbf",
    sample_weight=None,
    random_state=None,
    n_samples=None,
    multipliers=DEFAULT_MULTIPLIERS,
    n_neighbors=10,
    n_seeds=4,
    max_iter=100,
    min_gain=MIN_GAIN,
    min_gain_wider=MIN_GAIN_WIDER,
    noise_margin=NOISE_MARGIN,
    extend=EXTEND,
):
    """Choose the width of an rbf or laplacian kernel without labels.

    Clusters a random sample of X with exact kernel k-means at each candidate
    width, scores each partition by its normalised cut on the sample's
    k-nearest-neighbour graph, and keeps the mean-distance width unless a wider
    width's score is lower by more than the scores' run-to-run noise or a
    narrower width's clearly lower (see the module docstring and :doc:`/gamma`).
    Never sees labels; the same ``random_state`` gives the same choice.

    When the mean-distance width is kept (rbf), the chosen ``gamma`` is that width
    of all of X, 1 / (mean squared pairwise distance), exactly what
    ``gamma="mean-distance"`` uses (the candidates around it are multiples of
    its estimate on the sample, ``base_gamma``): a fit that keeps it is the
    ``gamma="mean-distance"`` fit (one more pass over the data, O(n d)).

    Parameters
    ----------
    X : array-like, memmap, torch tensor or dask array of shape (n, n_features)
        The data; only ``n_samples`` rows are read (a host copy of them).
    n_clusters : int
        Number of clusters of the fit the width is for.
    kernel : {"rbf", "gaussian", "laplacian"}, default="rbf"
        The kernel; others raise a ValueError.
    sample_weight : array-like of shape (n,), default=None
        The sample is drawn with probability proportional to the weights (without
        replacement); unit weights are the same as None.
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
        solution smoothed over the grid (:func:`mbkkm._core._width.smooth_scores`); the chosen
        width's solution is ``sample_labels``.
    max_iter : int, default=100
        Lloyd iterations of each kernel k-means fit on the sample.
    min_gain : float in [0, 1), default=0.2
        A narrower candidate (larger gamma) replaces the reference (mean-distance)
        width only when its score is at most ``1 - min_gain`` times the
        reference's score (:func:`mbkkm._core._width.choose_width`).
    min_gain_wider : float in [0, 1), default=0.0
        The same margin for a wider candidate (smaller gamma): 0, a lower score
        suffices (a wider kernel moves kernel k-means towards plain k-means).
        ``min_gain=0, min_gain_wider=0, noise_margin=0`` keeps the plain lowest
        score.
    noise_margin : float >= 0, default=0.25
        A wider candidate must also lie below the reference's score by more than
        ``noise_margin`` standard errors of the difference of the two scores,
        estimated from the spread of the cuts of each width's kernel k-means runs
        (:func:`mbkkm._core._width.score_noise`; ``noise``). 0: no such condition.
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
    _check_kernel(kernel, "gamma='auto' chooses")
    X = as_rows(X, "select_gamma")
    n_clusters = check_int(n_clusters, "n_clusters", 1)
    max_iter = check_int(max_iter, "max_iter", 1)
    if n_samples is None:
        n_samples = default_sample_size(n_clusters)
    n_samples = check_int(n_samples, "n_samples", 2)
    n_neighbors = check_int(n_neighbors, "n_neighbors", 1)
    n_seeds = check_int(n_seeds, "n_seeds", 1)
    extend = check_int(extend, "extend", 0)
    for name, value, high, what in (
        ("min_gain", min_gain, 1, "a number in [0, 1)"),
        ("min_gain_wider", min_gain_wider, 1, "a number in [0, 1)"),
        ("noise_margin", noise_margin, np.inf, "a finite number >= 0"),
    ):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < high:
            raise ValueError(f"{name} must be {what}, got {value!r}")
    mult = np.unique(np.asarray(multipliers, dtype=np.float64))  # sorted
    if mult.size == 0 or not np.all(np.isfinite(mult)) or mult[0] <= 0:
        raise ValueError(f"multipliers must be positive finite numbers, got {multipliers!r}")
    n = int(X.shape[0])
    if n < n_clusters:
        raise ValueError(f"n_samples={n} should be >= n_clusters={n_clusters}")
    if sample_weight is not None:  # checked; unit weights are no weights (None)
        sample_weight = check_sample_weight(rows_of(sample_weight).host_values(), np.empty((n, 0)))
    start = time.perf_counter()
    draw = draw_sample(random_state, n, n_samples, n_seeds, sample_weight)
    Xs = rows_of(X).host_rows(draw.indices)  # (m, d) on the host
    check_sampled_rows_finite(Xs, "select_gamma", n)
    # Finite rows too large for distances: the estimators' overflow message, on the
    # sample this works on (the estimators check all of X once the width is known).
    check_no_overflow(Xs, underflow=True)
    options = WidthOptions(
        multipliers=mult,
        n_neighbors=n_neighbors,
        max_iter=max_iter,
        min_gain=float(min_gain),
        min_gain_wider=float(min_gain_wider),
        extend=extend,
        noise_margin=float(noise_margin),
    )
    metric = AUTO_GAMMA_KERNELS[kernel]
    with selection_threads():
        fields, best, added = search_width(Xs, metric, n_clusters, draw, options)
    if fields["at_edge"] is not None:
        _warn_at_edge(fields, best, added)
    data_width = fields["reference"] == best and metric == "sqeuclidean"
    if data_width:
        # the gamma="mean-distance" width of all of X, computed as a fit computes it,
        # by the kernel resolution of X's kind (a Dask fit's rows: one pass of Dask
        # reductions); it replaces its sample estimate, the candidate base_gamma * 1
        resolved = rows_of(X).resolve_kernel(kernel, gamma=None, X=X, sample_weight=sample_weight)
        fields["candidates"][best] = resolved.params["gamma"]
    return GammaSelection(
        gamma=float(fields["candidates"][best]),
        criterion="knn-normalized-cut",
        n_samples=draw.indices.size,
        sample_indices=draw.indices,
        seconds=time.perf_counter() - start,
        min_gain=options.min_gain,
        min_gain_wider=options.min_gain_wider,
        noise_margin=options.noise_margin,
        data_width=data_width,
        **fields,
    )


def _warn_at_edge(fields, best, added):
    """GammaGridWarning: the choice is still at an end of the extended grid."""
    side, gamma = fields["at_edge"], fields["candidates"][best]
    note = " (wider still, kernel k-means approaches plain k-means)" if side == "widest" else ""
    warn(
        f"gamma='auto': the criterion is lowest at the {side} width tried, {gamma:.4g} "
        f"({gamma / fields['base_gamma']:.4g} x the mean-distance width), after extending "
        f"the grid by {added} step(s); a better width may lie beyond it{note}: pass gamma "
        f"as a number, or explore with mbkkm.cluster.select_gamma(multipliers=...)",
        GammaGridWarning,
    )


def default_selects_width(kernel, kernel_params, n, n_clusters, sample_weight=None):
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
    named = isinstance(kernel, str) and kernel in AUTO_GAMMA_KERNELS
    if not named or (kernel_params or {}).get("gamma") is not None:
        return False
    if sample_weight is not None:
        n = int(np.count_nonzero(np.asarray(sample_weight)))
    return min(int(n), SAMPLE_MAX) >= MIN_POINTS_PER_CLUSTER * int(n_clusters)


def resolve_auto_gamma(gamma, kernel, X, n_clusters, sample_weight, random_state, kernel_params):
    """The estimators' hook: ``(gamma to pass to the kernel, GammaSelection or None)``.

    - ``"auto"``: :func:`select_gamma` (refuses kernels without a width);
    - ``None``: the same selection where :func:`default_selects_width` says so,
      else None (the kernel's fixed default);
    - ``"mean-distance"``: None for rbf / laplacian (their fixed data-driven default,
      1 / mean pairwise squared distance), a ValueError for other kernels;
    - a number: returned unchanged.
    """
    if gamma is None:
        if not default_selects_width(kernel, kernel_params, X.shape[0], n_clusters, sample_weight):
            return None, None
        gamma = "auto"
    if not isinstance(gamma, str):
        return gamma, None
    _check_kernel(kernel, f"gamma={gamma!r} sets")
    if gamma == "mean-distance":
        return None, None
    selection = select_gamma(
        X, n_clusters, kernel=kernel, sample_weight=sample_weight, random_state=random_state
    )
    return selection.gamma, selection


def start_partition(selection, n_clusters):
    """``(sample indices, labels)``: the sample partition of a width or time selection
    (``gamma="auto"``, the heat kernel's ``t``), or None without a selection, when the
    selection does not trust its partition (``start_from_partition``: its width is not
    clearly better than the mean-distance width) or when it has an empty cluster."""
    if selection is None or selection.sample_labels is None or not selection.start_from_partition:
        return None
    labels = np.asarray(selection.sample_labels, dtype=np.intp)
    if np.bincount(labels, minlength=n_clusters).min() == 0:
        return None
    return selection.sample_indices, labels


#: Sample points the mini-batch start from a selection's partition keeps at most.
START_POINTS = 2048


def start_state(items, selection, kernel, n_clusters):
    """Mini-batch start from a width or time selection: centers = its sample
    partition's means.

    Center j is the mean in feature space of the sample points that the selection's
    partition puts in cluster j (see
    :func:`mbkkm._core._partition_init.partition_state`; ``items``: the fit's rows, or
    point indices). None (use the estimator's ``init``) as :func:`start_partition`.
    """
    found = start_partition(selection, n_clusters)
    if found is None:
        return None
    indices, labels = found
    # At most START_POINTS of the sample (evenly spaced in it): the means hardly move,
    # and the first iterations' kernel blocks stay small.
    m = labels.size
    keep = np.unique(np.linspace(0, m - 1, min(m, START_POINTS)).astype(np.intp))
    if np.bincount(labels[keep], minlength=n_clusters).min() == 0:
        keep = np.arange(m)
    nx = get_backend(items)
    support = nx.take(items, nx.index(indices[keep]))
    return partition_state(support, labels[keep], n_clusters, kernel)


def auto_start_inner(X, selection, kernel, n_clusters, chunk_rows):
    """Kernel k-means start for ``gamma="auto"``: (P0, c0) of the partition's means.

    P0[x, j] = <phi(x), C_j> = mean over s in C_j of K(x, s), computed in blocks
    of ``chunk_rows`` rows of X against the sample; c0[j] = ||C_j||^2. None as in
    :func:`start_partition`.
    """
    found = start_partition(selection, n_clusters)
    if found is None:
        return None
    indices, labels = found
    nx = get_backend(X)  # on X's backend: numpy, or torch on its device
    S = nx.take(X, nx.index(indices))
    # (m, k): 1 / |C_j| on C_j (no cluster is empty)
    W = np.eye(n_clusters)[labels] / np.bincount(labels, minlength=n_clusters)
    W = nx.asarray(W, dtype=np.float64)
    P0 = nx.empty((X.shape[0], n_clusters), np.float64)
    for r0 in range(0, X.shape[0], chunk_rows):
        rows = slice(r0, r0 + chunk_rows)
        P0[rows] = nx.astype(kernel.tile(X[rows], S), np.float64) @ W
    return P0, nx.asarray(partition_norms(S, labels, n_clusters, kernel), dtype=np.float64)
