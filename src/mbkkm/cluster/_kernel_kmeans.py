"""KernelKMeans: exact full-batch kernel k-means (Lloyd's algorithm in feature space).

The baseline of the paper: every iteration assigns all n points to the nearest
center in feature space, then moves every center to the (weighted) mean of its
points. The iterations and their derivation are in :mod:`mbkkm._core._lloyd`;
this module checks the parameters, builds the kernel operator (the stored
matrix when it fits the memory budget, else blocks of kernel rows), draws the
initial centers and publishes the fitted attributes.
"""

from __future__ import annotations

from numbers import Real

import numpy as np
from sklearn.base import _fit_context
from sklearn.exceptions import EfficiencyWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval

from .._core import _memory, kernel_kmeans_plusplus, labelling_state, random_init
from .._core._init import draw_init_subsample
from .._core._lloyd import BlockOperator, KernelRun, MatrixOperator, kernel_lloyd
from .._core._memory import chunk_rows, working_memory_bytes
from .._warn import warn
from ..backends import get_backend
from ..kernels._index import IndexKernel
from . import _device  # device=: numpy or torch backend, tensors in -> tensors out
from ._auto_gamma import auto_start_inner
from ._base import (
    BaseKernelKMeans,
    IndefiniteKernelWarning,
    fit_input,
    kernel_kind,
)
from ._graph_kernels import graph_start_inner
from ._params import COMMON_CONSTRAINTS, KERNEL_CONSTRAINTS, shared_doc

_MIB = 2**20
_GIB = 2**30
#: Free device memory left aside when storing the kernel matrix on a GPU (allocator
#: fragmentation, cuBLAS workspaces, the CUDA context's growth).
_DEVICE_MARGIN = 512 * _MIB


class KernelMemoryError(MemoryError, ValueError):
    """The kernel matrix fits neither the memory budget nor blocks of kernel rows.

    A subclass of both :class:`MemoryError` and :class:`ValueError`; raised before
    any kernel evaluation, with the estimated sizes in GiB.
    """


# ------------------------------------------------------------------------- estimator


@shared_doc
class KernelKMeans(BaseKernelKMeans):
    """Exact full-batch kernel k-means: Lloyd's algorithm in feature space.

    Every iteration assigns all points to the nearest center in the feature space
    of the kernel, then sets every center to the (weighted) mean of its points.
    One iteration is one product of the n x n kernel matrix with an (n, k)
    matrix: the matrix is computed once and stored when it fits
    ``max_kernel_memory``, otherwise its rows are recomputed block by block at
    every iteration (blocks sized from ``working_memory``).

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters.
    kernel : str or callable, default="rbf"
        Kernel name: "rbf" (alias "gaussian"), "laplacian", "polynomial" (alias
        "poly"), "linear", "cosine", "sigmoid", "chi2"; the graph kernels "knn"
        and "heat" (built on the training points, see Notes); "precomputed" (X is
        the kernel matrix); or a callable ``kernel(X, Y, **kernel_params)``
        returning the (n_x, n_y) kernel block.
    gamma : float, "auto", "mean-distance" or None, default=None
        Kernel coefficient of rbf, laplacian, polynomial, sigmoid and chi2, as in
        :class:`~mbkkm.cluster.MiniBatchKernelKMeans`: "auto" chosen without labels
        by :func:`mbkkm.cluster.select_gamma` (with a named ``init`` the first run
        then starts from the selection's sample partition where it trusts it, see
        ``init``);
        "mean-distance" the fixed 1 / (mean squared pairwise distance); None
        (default) "auto" for rbf and laplacian when ``min(n, 1000) >= 10
        n_clusters``, else "mean-distance", 1 / n_features for polynomial and
        sigmoid, 1 for chi2.
    degree : float, default=3
        Degree of the polynomial kernel.
    coef0 : float, default=1
        Constant term of the polynomial and sigmoid kernels.
    kernel_params : dict, default=None
        Extra keyword arguments of a callable kernel, or of the graph kernels
        (``n_neighbors``: required for "knn", "auto" by default for "heat"; ``t``
        for "heat"; see
        :func:`mbkkm.kernels.knn_kernel` and :func:`mbkkm.kernels.heat_kernel`).
    init : {"k-means++", "random"}, callable or array-like, default="k-means++"
        "k-means++": greedy kernel k-means++ in feature space on ``init_size``
        points (all points by default, as scikit-learn's KMeans); "random":
        ``n_clusters`` distinct random points. An array: the initial centers,
        of shape (n_clusters, n_features) as points in input space for point
        kernels, or of shape (n_clusters,) as integer indices of training points
        for "precomputed" and the graph kernels. With ``gamma="auto"`` and a
        named init, the first run starts from the centers C_j = mean of phi over
        the sample points of cluster j of the selection's partition, where the
        selection trusts it (``gamma_selection_.start_from_partition``) (P0[x, j] =
        mean of K(x, s) over them); the other ``n_init - 1`` runs use the named
        init, and the lowest final inertia wins as usual. An array always wins.
        A callable ``init(X, n_clusters, random_state=RandomState)`` (scikit-learn's
        signature) returns such an array.
    n_init : int or "auto", default=1
        Number of runs from different initialisations; the run with the lowest
        final inertia is kept (as scikit-learn's KMeans).
        "auto" is scikit-learn's: 10 with ``init="random"``, else 1.
    init_size : int, default=None
        Number of points, drawn without replacement, on which k-means++ or
        "random" choose the initial centers; None uses all points.
    max_iter : int, default=300
        Maximum number of Lloyd iterations of each run.
    tol : float, default=1e-4
        Relative tolerance: a run stops when the labels do not change (strict
        convergence), or when the objective (the weighted sum of squared
        distances of the points to the centers they are assigned to) decreases by
        less than ``tol`` times its previous value (0 <= decrease < ``tol`` *
        objective). A rise of the objective is not convergence (it happens on
        indefinite kernels, see Notes). 0 stops only at strict convergence.
    max_kernel_memory : float, default=2048
        Budget in MiB for the stored n x n kernel matrix (``n**2 * itemsize``
        bytes, itemsize 4 for float32 data and 8 for float64). Above it, kernel
        rows are recomputed in blocks at every iteration. On a CUDA device the
        matrix is stored there, and only when it also fits the device's free
        memory (``torch.cuda.mem_get_info``) less a headroom for the run's
        other arrays; else the blocks are recomputed on the device. For the heat kernel it
        is the dense-matrix budget of :func:`mbkkm.kernels.heat_kernel` (beyond
        it, a low-rank approximation), unless ``kernel_params`` sets
        ``max_dense_bytes``.
    working_memory : float, default=None
        Budget in MiB for one block of kernel rows (blockwise path) and the
        temporaries of predict/transform/score; None uses scikit-learn's
        ``working_memory`` configuration (1024 MiB by default).
    random_state : int, RandomState instance or None, default=None
        Seed of the initialisation.
    verbose : int, default=0
        Print the objective at every iteration when > 0, and progress lines of
        the labelling passes of ``predict`` and ``transform`` (see
        :ref:`progress`).
    device : {None, "cpu", "auto", "cuda", "torch", "torch-cpu"}, "cuda:N" or \
torch.device, default=None
        Where the kernel matrix (or its blocks) and the iterations live
        (:mod:`mbkkm.backends`), with the same rules as
        :class:`~mbkkm.cluster.MiniBatchKernelKMeans`: None follows the input (numpy arrays
        run with numpy, torch tensors with torch on the device they live on); "cpu": numpy;
        "cuda", "cuda:N" or a ``torch.device``: PyTorch on that device (numpy input to
        ``fit`` is copied there, as float32 on a CUDA device; to ``predict``, ``transform``
        and ``score`` it is streamed there); "torch" / "torch-cpu": PyTorch on the CPU;
        "auto": "cuda" when PyTorch sees a GPU, else "cpu" (a tensor runs where it lives).
        Results follow the input's library: tensors in, tensors out on their device
        (``labels_``, ``predict``, ``transform``, ``fit_transform``, ``support_vectors_``);
        numpy in, numpy out. A tensor keeps its dtype (float32 or float64). Mixing numpy
        arrays and tensors (X and sample_weight, or fit and predict) raises a ValueError. On
        torch the kernels rbf, linear, polynomial, sigmoid, cosine, laplacian and callables
        (called with tensors) are available; chi2, "precomputed" and the graph kernels need
        numpy. The initialisation is drawn on the host from ``random_state`` (k-means++ on a
        host copy of its points), so numpy and torch runs with one seed agree up to
        rounding. Each iteration brings three numbers to the host. Needs
        ``mbkkm[torch]``.

    Attributes
    ----------
    labels_ : ndarray or tensor of shape (n_samples,)
        Label of each training point (its nearest center); a tensor on the
        input's device for tensor input.
    inertia_ : float
        Weighted sum of the squared feature-space distances of the training
        points to their centers.
    n_iter_ : int
        Number of iterations (E-steps before the stop) of the kept run: the
        iteration at which its labels stopped changing or its objective decreased
        by less than ``tol`` times itself, else ``max_iter``.
    support_ : ndarray of shape (n_support,)
        Indices of the training points that define the centers (every point of
        positive weight in a non-empty cluster), grouped by cluster.
    support_vectors_ : ndarray or tensor of shape (n_support, n_features)
        The rows ``X[support_]`` (point kernels only: not set for "precomputed"
        and the graph kernels); a tensor on the input's device for tensor input.
    dual_coef_ : ndarray of shape (n_support,)
        Coefficient w_y / W_j of each support point: center j is
        ``sum_{s : support_labels_[s] = j} dual_coef_[s] phi(x_{support_[s]})``.
    support_labels_ : ndarray of shape (n_support,)
        Cluster of each support point.
    n_support_ : ndarray of shape (n_clusters,)
        Number of support points of each center.
    center_norms_ : ndarray of shape (n_clusters,)
        Squared feature-space norms <C_j, C_j> of the centers.
    %(resolved_kernel_attributes)s
    n_features_in_ : int
        Number of features seen during fit (n_samples for "precomputed").
    feature_names_in_ : ndarray of shape (``n_features_in_``,)
        Names of features seen during fit, when X has string feature names.

    See Also
    --------
    mbkkm.cluster.MiniBatchKernelKMeans : Truncated mini-batch kernel k-means.
    sklearn.cluster.KMeans : k-means in input space (the linear kernel).

    Notes
    -----
    **Memory.** The stored path needs ``n**2 * itemsize`` bytes; the blockwise
    path needs one block of at least one kernel row, ``2 * (n + 3 k) * itemsize``
    bytes, within ``working_memory``. When neither fits, :class:`KernelMemoryError`
    (a MemoryError and a ValueError) is raised before any kernel evaluation, with
    the sizes in GiB. With ``kernel="precomputed"`` the matrix is the input, so no
    budget applies.

    **Precomputed kernels.** ``fit`` takes the (n, n) training kernel matrix
    (square, symmetric up to rounding, non-negative diagonal). ``predict`` takes
    K(X_new, X_fit) of shape (n_new, n_fit). ``transform`` and ``score`` need
    K(x, x) of the new points too: pass it as ``kernel_diag=``, else they raise.
    ``fit_transform`` and ``fit_predict`` need nothing more.

    **Graph kernels** ("knn", "heat") are transductive: defined on the training
    points only, through the k-NN graph built on them. ``fit``, ``fit_predict``
    and ``fit_transform`` work; ``predict``, ``transform`` and ``score`` on new
    points raise a ValueError.

    **Indefinite kernels** (not positive semi-definite: the "knn" graph kernel,
    "sigmoid", many precomputed similarities). Squared feature-space distances
    can be negative there and a cluster's mean no longer minimises its points'
    distances, so Lloyd's iterations are not monotone: the objective can rise. A
    rise never stops a run; each point goes to its smallest (possibly negative)
    distance, and the run ends where the labels stop changing (or at
    ``max_iter``). Negative distances raise one
    :class:`~mbkkm.cluster.IndefiniteKernelWarning` per fit; ``inertia_`` and
    ``transform`` clip them at 0. Measured on PenDigits' k-NN kernel (the paper's
    1000 neighbours, 10 seeds): the objective rises at iteration 2, then Lloyd
    reaches a fixed point after 14-29 iterations, ARI 0.571 on average (0.483 when
    it stopped at the rise, as before 0.2). Two alternatives were measured and
    not taken: keeping the labels of the lowest objective seen (on an indefinite
    kernel the objectives of different iterations do not compare: the lowest is
    iteration 1's, ARI 0.34), and Lloyd on the shifted kernel K + sigma I with
    sigma = -lambda_min(K) (Dhillon, Guan and Kulis 2004: the same minimising
    partitions and monotone iterations, but every point then favours its current
    cluster; fixed points of higher objective, ARI 0.501, and lambda_min of an
    n x n matrix to compute); :doc:`/user_guide/algorithm` has the details.

    Empty clusters are refilled with the points farthest from their centers,
    as scikit-learn's KMeans does; when some remain empty at the end (for
    example ``n_clusters`` larger than the number of distinct points), an
    :class:`~mbkkm.cluster.EmptyClusterWarning` (a ConvergenceWarning) gives
    their number. ``fit`` is all-or-nothing: when it raises (KeyboardInterrupt
    included) the estimator is left as it was before the call.

    References
    ----------
    I. S. Dhillon, Y. Guan and B. Kulis. "Kernel k-means, spectral clustering and
    normalized cuts." KDD 2004.
    B. Jourdan and G. Schwartzman. "Mini-batch kernel k-means." 2024.

    Examples
    --------
    >>> from sklearn.datasets import make_circles
    >>> from sklearn.metrics import adjusted_rand_score
    >>> from mbkkm import KernelKMeans
    >>> X, y = make_circles(n_samples=500, factor=0.3, noise=0.05, random_state=0)
    >>> km = KernelKMeans(n_clusters=2, random_state=0).fit(X)
    >>> adjusted_rand_score(y, km.labels_) > 0.9
    True
    >>> km.predict(X[:3]).shape
    (3,)
    """

    _parameter_constraints: dict = {
        **COMMON_CONSTRAINTS,
        **KERNEL_CONSTRAINTS,
        "max_kernel_memory": [Interval(Real, 0, None, closed="neither")],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1,
        kernel_params=None,
        init="k-means++",
        n_init=1,
        init_size=None,
        max_iter=300,
        tol=1e-4,
        max_kernel_memory=2048,
        working_memory=None,
        random_state=None,
        verbose=0,
        device=None,
    ):
        self.n_clusters = n_clusters
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.init = init
        self.n_init = n_init
        self.init_size = init_size
        self.max_iter = max_iter
        self.tol = tol
        self.max_kernel_memory = max_kernel_memory
        self.working_memory = working_memory
        self.random_state = random_state
        self.verbose = verbose
        self.device = device

    # ------------------------------------------------------------------ helpers
    def _plan_memory(self, n, itemsize, nx):
        """Stored matrix (None) or rows per block; KernelMemoryError when neither fits.

        The stored matrix needs n^2 itemsize bytes within ``max_kernel_memory``, and
        on a device also within its free memory less a headroom: the run's other
        arrays (about 6 (n, k) float64 matrices), one block of kernel rows while the
        matrix is built, and a fixed margin for the allocator and library workspaces.
        The plan (``memory_plan_``) is checked against the memory available.
        """
        k = self.n_clusters
        dense = n * n * itemsize
        budget = self.max_kernel_memory * _MIB
        working = working_memory_bytes(self.working_memory)
        free = None if nx.is_host else nx.free_memory()  # None for torch on the CPU
        available = _memory.available_host_memory() if free is None else free
        others = 6 * n * (k + 1) * 8  # the run's (n, k) float64 matrices
        # the memory left must also hold the run's other arrays (on a device: a margin)
        headroom = (0 if free is None else _DEVICE_MARGIN) + others + working
        if available is not None:
            budget = min(budget, available - headroom)
        if dense <= budget:
            rows, kernel_terms = None, {"kernel matrix (stored)": dense}
        else:
            row = 2 * (n + 3 * k) * itemsize
            if row > working:
                device = ""
                if free is not None:
                    device = (
                        f" (on {nx.device}: {free / _GIB:.3g} GiB free, less a headroom of "
                        f"{headroom / _GIB:.3g} GiB)"
                    )
                raise KernelMemoryError(
                    f"KernelKMeans: the {n} x {n} kernel matrix needs {dense / _GIB:.3g} GiB, "
                    f"more than max_kernel_memory={self.max_kernel_memory} MiB "
                    f"({self.max_kernel_memory * _MIB / _GIB:.3g} GiB){device}, and one block "
                    f"of kernel rows needs {row / _GIB:.3g} GiB, more than working_memory "
                    f"({working / _GIB:.3g} GiB). Raise max_kernel_memory or working_memory, "
                    "or use MiniBatchKernelKMeans, which never builds the kernel matrix."
                )
            rows = max(1, min(n, int(working // row)))  # a block holds at most all n rows
            kernel_terms = {f"kernel rows ({rows} per block)": rows * row}
        terms = {**kernel_terms, "(n, k) matrices: products, coefficients, distances": others}
        plan = _memory.MemoryPlan(
            where="host" if nx.is_host else str(nx.device),
            terms=terms,
            peaks={"fit": sum(terms.values())},
            checked=("fit",),
            hints={"fit": "max_kernel_memory or working_memory"},
        )
        self.memory_plan_ = plan
        if self.verbose:
            print(plan.report())
        plan.check(available, what=f"{type(self).__name__}.fit")
        return rows

    # --------------------------------------------------------------------- fit
    def _point_operator(self, problem, block_rows):
        """A kernel on points: K(X, X) stored, or recomputed ``block_rows`` rows at a time.

        Everything in it lives on the backend the run uses (numpy, or torch on the
        device of ``self._device`` / of X).
        """
        X, kernel, nx = problem.rows.data, problem.kernel, problem.nx
        diag = nx.astype(kernel.diag(X), np.float64)
        if block_rows is None:
            self._kernel_storage = "stored"
            if nx.is_host:
                K = kernel(X, X)
                return KernelRun(
                    MatrixOperator(K), diag, IndexKernel("stored", K, dtype=np.float64, diag=diag)
                )
            # K(X, X) on X's device, written block of rows by block of rows (the blocks'
            # temporaries within working_memory; the rbf tile has none)
            n = X.shape[0]
            K = nx.empty((n, n), X.dtype)
            step = chunk_rows(self.working_memory, n, np.dtype(_device.host_dtype(X)).itemsize)
            for r0 in range(0, n, step):
                kernel.tile(X[r0 : r0 + step], X, out=K[r0 : r0 + step])
            return KernelRun(MatrixOperator(K), diag, None)
        self._kernel_storage = f"blocks of {block_rows} rows"
        return KernelRun(BlockOperator(kernel, X, block_rows), diag, None)

    def _initial_inner(self, rows, kernel_run, rng, sample_weight):
        """(P0, c0) of one initialisation: inner products with the initial centers.

        The centers are chosen on the host (k-means++ on a host copy of its points),
        so every backend draws the same ones; P0 and c0 are on the backend of X.
        """
        X = rows.data
        op, diag, index_kernel = kernel_run
        nx = get_backend(diag)
        n = X.shape[0]
        init = self._init
        C = None if isinstance(init, str) else rows.init_points(init)
        if C is not None:  # explicit centers in input space: K(X, init) in blocks of rows
            return self._cross_point(X, C), nx.astype(self.kernel_.diag(C), np.float64)
        if not isinstance(init, str):  # explicit centers as point indices
            idx = init
        else:
            if self.init_size is None:
                sub = np.arange(n)
            else:
                sub = draw_init_subsample(
                    rng, n, min(self.init_size, n), self.n_clusters, sample_weight
                )
            wi = None if sample_weight is None else sample_weight[sub]
            if init == "k-means++":
                diag_sub = nx.to_numpy(nx.take(diag, nx.index(sub)))
                if index_kernel is not None:  # the subsample's indices, on the stored matrix
                    points, kernel = sub, index_kernel
                else:  # a host copy of the subsample's rows
                    points, kernel = nx.to_numpy(nx.take(X, nx.index(sub))), self.kernel_
                local = kernel_kmeans_plusplus(
                    points, kernel, self.n_clusters, rng, wi, diag=diag_sub
                )
            else:
                local = random_init(sub.size, self.n_clusters, rng, wi)
            idx = sub[local]
        if index_kernel is not None:
            P0 = op.columns(idx)
        else:
            P0 = self._cross_point(X, nx.take(X, nx.index(idx)))
        return P0, nx.take(diag, nx.index(idx))

    def _cross_point(self, X, C):
        """K(X, C) for a point kernel, in chunks, float64 (n, len(C)), on X's backend."""
        nx = get_backend(X)
        itemsize = np.dtype(_device.host_dtype(X)).itemsize
        rows = chunk_rows(self.working_memory, C.shape[0] + 2, itemsize)
        out = nx.empty((X.shape[0], C.shape[0]), np.float64)
        for r0 in range(0, X.shape[0], rows):
            out[r0 : r0 + rows] = self.kernel_.tile(X[r0 : r0 + rows], C)
        return out

    def _fit(self, X, sample_weight):
        """``fit`` top to bottom: check, resolve the kernel, plan, initialise, run Lloyd,
        publish; returns the training points' distances (what ``fit_transform`` gives)."""
        data = fit_input(
            X, sample_weight, self, accept_dask=False, index_dtype=np.float64, relative_weights=True
        )
        rows = data.rows
        self._check_sizes_and_init(rows, self.kernel, batch_size=None)  # before kernel work
        # A kernel on points: the stored matrix (None) or rows per block, planned
        # before any kernel work; an index kernel's matrix is its own storage (no plan,
        # not an earlier fit's either).
        self.__dict__.pop("memory_plan_", None)
        block_rows = (
            None if rows.is_index else self._plan_memory(data.n_samples, rows.itemsize, rows.nx)
        )
        if block_rows is not None:  # said before the hours it may take, not after
            n = data.n_samples
            warn(
                f"{type(self).__name__}: the {n} x {n} kernel matrix "
                f"({n * n * rows.itemsize / 2**30:.3g} GiB) is not stored (max_kernel_memory="
                f"{self.max_kernel_memory} MiB, or the memory available), so each Lloyd "
                f"iteration computes all of it again, {block_rows} rows at a time (up to "
                f"max_iter={self.max_iter} times); MiniBatchKernelKMeans never computes it.",
                EfficiencyWarning,
            )
        problem = self._resolve(data)
        # a numerically constant kernel, before the work (an indefinite one: Lloyd sees it)
        self._check_kernel_sample(problem, indefinite=False)
        # an index kernel: Lloyd's iterations on its stored matrix
        kind = kernel_kind(self.kernel)
        kernel_run = kind.matrix_run(problem.kernel)
        if kernel_run is not None:
            self._kernel_storage = kind.name
        else:  # a kernel on points: K(X, X) stored, or rows per block
            kernel_run = self._point_operator(problem, block_rows)
        X, sample_weight = problem.rows.data, problem.sample_weight
        op, diag, _ = kernel_run
        nx = get_backend(diag)
        w = np.ones(X.shape[0]) if sample_weight is None else sample_weight
        w_run = nx.asarray(w, dtype=np.float64)  # on the run's backend
        rng = check_random_state(self.random_state)
        n_init = self._n_init()
        inertia, run = np.inf, None
        n_negative = 0  # negative squared distances met by any run: one warning per fit
        # gamma="auto" or the heat kernel's t="auto" with a named init: the first run
        # starts from the selection's sample partition, where the selection trusts it
        start = None
        if isinstance(self._init, str) and self.t_selection_ is not None:
            start = graph_start_inner(self.t_selection_, self.kernel_, self.n_clusters)
        elif isinstance(self._init, str) and self.gamma_selection_ is not None:
            block = chunk_rows(self.working_memory, 1000, X.dtype.itemsize)
            start = auto_start_inner(X, self.gamma_selection_, self.kernel_, self.n_clusters, block)
        for i in range(n_init):
            if i == 0 and start is not None:
                P0, c0 = start
            else:
                P0, c0 = self._initial_inner(problem.rows, kernel_run, rng, sample_weight)
            candidate = kernel_lloyd(op, diag, P0, c0, w_run, self.max_iter, self.tol, self.verbose)
            n_negative = max(n_negative, candidate.n_negative)
            candidate_inertia = float(candidate.mind @ w_run)
            if self.verbose:
                print(f"Run inertia: {candidate_inertia:.6g}")
            if run is None or candidate_inertia < inertia:
                inertia, run = candidate_inertia, candidate
        # The fitted centers as windows, one block per cluster: center j is
        # sum_{y in A_j} (w_y / W_j) phi(y), its support points the training points of
        # positive weight assigned to it (indices for index kernels).
        center_labels = nx.to_numpy(run.center_labels)
        W = np.bincount(center_labels, weights=w, minlength=self.n_clusters)
        keep = np.flatnonzero(w > 0)
        items = problem.rows.support_items(keep)
        coef = w[keep] / W[center_labels[keep]]
        norms = np.asarray(nx.to_numpy(run.norms), dtype=np.float64)  # of the last M-step
        self._publish(labelling_state(items, coef, center_labels[keep], self.n_clusters, norms))
        # support_: the training indices of the support points, in the published order
        self.support_ = keep[np.argsort(center_labels[keep], kind="stable")].astype(np.intp)
        for name in kind.lloyd_dropped:
            delattr(self, name)  # index kernels: the items are indices, they are support_
        self.labels_ = data.output(_device.convert_output(self._tensor_io, run.labels))
        self.inertia_ = inertia * data.weight_scale
        self.n_iter_ = run.n_iter
        self._warn_empty_clusters(nx.to_numpy(run.labels))
        if n_negative > 0:
            warn(
                f"{type(self).__name__}: the kernel is not positive semi-definite: "
                f"{n_negative} squared feature-space distances of one iteration were "
                f"negative. Lloyd's iterations are not monotone on such a kernel (the "
                f"objective can rise); a rise does not stop the run, which ends where the "
                f"labels stop changing or at max_iter (n_iter_={self.n_iter_}).",
                IndefiniteKernelWarning,
            )
        distances = rows.in_rows_dtype(run.distances)  # as transform gives them
        return data.output(_device.convert_output(self._tensor_io, distances))

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, sample_weight=None):
        """Run kernel k-means (``n_init`` runs of Lloyd's algorithm).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features) or \
(n_samples, n_samples)
            Training data; with ``kernel="precomputed"`` the kernel matrix. Sparse
            data (every named kernel but chi2, and callables) are converted to CSR
            once and never densified; only the kernel blocks are dense.
        y : Ignored
        sample_weight : array-like of shape (n_samples,), default=None
            Weight of each point in the cluster means, the k-means++ draws and the
            inertia (constant weights c: exactly the model of None, ``inertia_`` times c).

        Returns
        -------
        self : KernelKMeans
        """
        with self._all_or_nothing():  # one thread policy; on an error, the model as it was
            self._fit(X, sample_weight)
        return self

    @_fit_context(prefer_skip_nested_validation=True)
    def fit_transform(self, X, y=None, sample_weight=None):
        """Fit, then return the squared distances of the training points to the centers.

        Works for every kernel, the graph kernels and "precomputed" included.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, n_samples)
        y : Ignored
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        distances : ndarray of shape (n_samples, n_clusters)
        """
        with self._all_or_nothing():
            return self._fit(X, sample_weight)
