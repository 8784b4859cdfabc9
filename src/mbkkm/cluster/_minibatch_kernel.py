"""MiniBatchKernelKMeans: truncated mini-batch kernel k-means (the paper's Algorithm 2)."""

from __future__ import annotations

from numbers import Integral
from types import SimpleNamespace

import numpy as np
from sklearn.base import _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions

from .._core import (
    LEARNING_RATES,
    BatchPlan,
    StepConfig,
    _memory,
    assign,
    init_state,
)
from .._core._loop import fit_loop, function_loop, step_for
from .._core._memory import (
    MiniBatchPlanRequest,
    chunk_rows,
    plan_minibatch,
    plan_untruncated,
    working_memory_bytes,
)
from .._core._state import NON_FINITE
from .._core._untruncated import init_table, table_step, table_to_windows
from .._validation import check_sample_weight
from ..backends import get_backend
from . import _device  # device=: numpy or torch backend, tensors in -> tensors out
from ._auto_gamma import start_state
from ._base import (
    BaseKernelKMeans,
    MiniBatchMixin,
    fit_input,
    kernel_kind,
    memory_guard,
)
from ._checkpoint import check_checkpoint
from ._params import COMMON_CONSTRAINTS, KERNEL_CONSTRAINTS, shared_doc
from ._rows import host_sample_weight, rows_of


@shared_doc
class MiniBatchKernelKMeans(MiniBatchMixin, BaseKernelKMeans):
    """Truncated mini-batch kernel k-means, without the n x n kernel matrix.

    Each center is an explicit combination of at most about ``tau + batch_size``
    data points (a sliding *window* of the batch points recently assigned to it).
    An iteration samples ``batch_size`` points uniformly with replacement, computes
    one kernel block between the batch and the support points of all windows,
    assigns the batch to the nearest centers in feature space, moves each center
    towards the mean of its batch points with a learning rate, and truncates the
    windows to the newest ``tau`` points. Nothing in an iteration depends on the
    number of samples: an iteration costs O(b (m + b) d) kernel work, m being the
    number of support points (about k (tau + b / k)).

    Sparse X (scipy.sparse, converted to CSR once) is accepted with every named
    kernel but chi2 and with callables (which then receive CSR rows): batches and
    support points stay CSR (``support_vectors_`` too), only the kernel blocks are
    dense. Sparse X runs with numpy (a torch ``device`` raises a ValueError).

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters.
    kernel : str or callable, default="rbf"
        Kernel name: "rbf" (alias "gaussian"), "laplacian", "polynomial" (alias
        "poly"), "linear", "cosine", "sigmoid", "chi2"; or a callable
        ``kernel(X, Y, **kernel_params)`` returning the (n_x, n_y) kernel block.
        "precomputed": X is the n x n kernel matrix (an array, a memmap, a scipy
        sparse matrix or a :class:`~mbkkm.kernels.LowRankKernel`; windows then hold
        point indices) and predict takes K(X_new, X_fit).
        The graph kernels "knn" (D^-1 A D^-1 on the symmetrised k-NN graph with
        self-loops) and "heat" (exp(-t L)) are built on the fitted points from
        ``kernel_params`` (``n_neighbors``, ``t``, ...; see
        :func:`mbkkm.kernels.graph_kernel_matrix`); new points in predict and
        transform join the fitted graph with the links the symmetrised graph would
        give them (:meth:`mbkkm.kernels.KNNGraph.attach`; for heat, the Nystroem
        extension of the eigenvectors); the fitted graph stays as it is.
    gamma : float, "auto", "mean-distance" or None, default=None
        Kernel coefficient of rbf, laplacian, polynomial, sigmoid and chi2, with
        scikit-learn's meaning (rbf: exp(-gamma ||x - y||^2); the paper's kappa is
        1 / gamma).
        "auto" (rbf and laplacian only): chosen without labels by
        :func:`mbkkm.cluster.select_gamma`: exact kernel k-means on a sample (20
        points per cluster, 500 to 1000; 4 k-means++ runs and one spectral-start
        run per width, the lowest-objective one kept) at widths 2**-3 .. 2**5
        times the mean-distance width (extended at an end when the choice lies
        there), scoring each partition by the edges it cuts of the sample's
        10-nearest-neighbour graph (normalised cut, smoothed over neighbouring
        widths); the mean-distance width is kept unless a wider width's score is
        lower or a narrower width's at most 0.8 times its score. With a named
        ``init`` the fit then **starts from the chosen width's partition** when
        that width's score is at most 0.8 times the mean-distance width's (every
        narrower choice; else from ``init``, as at a fixed width): initial center j
        is the mean in feature space of the sample points in cluster j (see
        ``init``). ``gamma_selection_`` shows the candidates and
        their scores. See :doc:`/gamma` and :doc:`/results/gamma`.
        "mean-distance" (rbf and laplacian only): the fixed data-driven
        1 / (mean squared pairwise distance) = 1 / (2 sum of feature variances),
        computed in O(n d) (the default of version 0.1).
        None (default): for rbf and laplacian, "auto" when the sample holds at
        least 10 points per cluster (``min(n, 1000) >= 10 n_clusters``: k <= 100
        from 1000 points on; positive-weight points with ``sample_weight``) and
        ``kernel_params`` gives no gamma, else "mean-distance"; for polynomial and
        sigmoid 1 / n_features; for chi2 1.
    degree : float, default=3
        Degree of the polynomial kernel.
    coef0 : float, default=1
        Constant term of the polynomial and sigmoid kernels.
    kernel_params : dict, default=None
        Extra keyword arguments of a callable kernel, or the parameters of a graph
        kernel.
    batch_size : int, default=1024
        Points per mini-batch (sampled with replacement); capped at n_samples.
    tau : int or None, default=200
        Window length: each center keeps the shortest run of its newest batch
        blocks that holds at least ``tau`` points. None: no truncation, the
        paper's untruncated Algorithm 1, run with its dynamic program over all n
        fitted points (O(n (b + k)) kernel work per iteration, O(n k) memory; no
        ``partial_fit``).
    learning_rate : {"adaptive", "classic"}, default="adaptive"
        "adaptive": the paper's rate alpha_j = sqrt(b_j / b) (Schwartzman 2023), with
        b_j the batch points assigned to cluster j. "classic": scikit-learn's
        MiniBatchKMeans rate alpha_j = b_j / N_j, N_j the running count of points
        assigned to j. On kernels whose diagonal dominates (e.g. a heat kernel with
        many clusters, or cosine on sparse documents) "adaptive" can leave centers
        stuck at their k-means++ seed points, and the fit then warns
        (ConvergenceWarning) about clusters of a few points; see the user guide's
        note on learning rates. On a TF-IDF corpus of 20,000 documents and 5 topics
        (``make_topic_corpus(20000, 20000, n_topics=5)``, cosine): ARI 0.14-0.15
        with three clusters of one document against 0.99 with "classic".
    renormalize : bool, default=True
        After truncation, divide each center's coefficients by their sum so every
        center stays a convex combination of data points. False reproduces the
        paper's literal truncation (coefficient sums 1 - prod(1 - alpha)).
    max_iter : int, default=200
        Number of mini-batch **iterations** (batches), not epochs: scikit-learn's
        MiniBatchKMeans counts passes over the data instead.
    tol : float, default=None
        Early stopping threshold epsilon of the paper: stop when the batch objective
        improves by less than ``tol`` on the same batch,
        f_B(C_i) - f_B(C_{i+1}) < tol. f_B is the (weighted) mean over the batch of
        the squared feature-space distance to the nearest center, the "batch
        objective" ``verbose`` prints, and ``tol`` an absolute change of it: its
        scale is the kernel's (with rbf, K(x, x) = 1, f_B lies in [0, 2], and
        ``tol=1e-2`` can stop within a few iterations while f_B still falls). None
        runs ``max_iter`` iterations. With the adaptive rate, which does not decay,
        the improvement levels off above 0 (about 1 % of f_B on blobs), and a
        ``tol`` below that runs all ``max_iter`` iterations (see the user guide's
        performance page); a large ``max_iter`` costs no memory until reached.
    init : {"k-means++", "random"}, callable or array-like of shape \
(n_clusters, n_features), default="k-means++"
        "k-means++": greedy kernel k-means++ in feature space on ``init_size``
        points; "random": ``n_clusters`` distinct random points; an array: the
        initial centers as points in input space. With ``gamma="auto"`` and a
        named init, the first initialisation is instead the selection's sample
        partition where the selection trusts it (``gamma_selection_.
        start_from_partition``; center j = mean of phi over its sample points, one window
        block of weights ``1 / |C_j|``; deterministic per ``random_state``); the
        others (``n_init > 1``) use the named init. An array always wins.
        A callable ``init(X, n_clusters, random_state=RandomState)`` (scikit-learn's
        signature) returns such an array.
    n_init : int or "auto", default=1
        Number of initialisations; the one with the lowest inertia on a random
        validation subsample of ``init_size`` points is kept (in ``fit``; the
        first ``partial_fit`` initialises once, from its chunk, as scikit-learn's).
        "auto" is scikit-learn's: 10 with ``init="random"``, else 1.
    init_size : int, default=None
        Points used by the initialisation; None: 3 * batch_size (at least
        3 * n_clusters), capped at n_samples. Smaller than ``n_clusters``: a
        ValueError (scikit-learn's MiniBatchKMeans warns and uses 3 * n_clusters).
    compute_labels : bool, default=True
        Label all fitted points after the last iteration (``labels_``, ``inertia_``).
        Costs one chunked pass of n kernel rows against the support points.
    working_memory : float, default=None
        Memory budget in MiB for the temporaries of the labelling pass (predict,
        transform, score, ``labels_``); None uses scikit-learn's ``working_memory``
        configuration (1024 MiB by default).
    random_state : int, RandomState instance or None, default=None
        Seed of the initialisation and of the batch sampling.
    verbose : int, default=0
        When > 0, progress lines on stdout: the memory plan, then the
        iterations done with the elapsed time, the time left and the batch
        objective (after the first iteration, then at most one line every 5
        seconds, ``MBKKM_PROGRESS_INTERVAL``, and one at the end), and the
        labelling passes of ``fit``, ``predict`` and ``transform`` the same way
        (see :ref:`progress`). The model does not depend on it.
    device : {None, "cpu", "auto", "cuda", "torch", "torch-cpu"}, "cuda:N" or \
torch.device, default=None
        Where the iterations and the labelling run (:mod:`mbkkm.backends`). None follows the
        input: numpy arrays run with numpy, torch tensors with torch on the device they live
        on. "cpu": numpy. "cuda", "cuda:N" or a ``torch.device``: PyTorch on that device
        (numpy input to ``fit`` is copied there, as float32 on a CUDA device; to
        ``predict``, ``transform`` and ``score`` it is streamed there chunk by chunk, so the
        device never holds it). "torch" / "torch-cpu": PyTorch on the CPU. "auto": "cuda"
        when PyTorch sees a GPU, else "cpu" (a tensor runs where it lives). Results follow
        the input's library: tensors in, tensors out on their device (``labels_``,
        ``predict``, ``transform``, ``support_vectors_``); numpy in, numpy out. A tensor
        keeps its dtype (float32 or float64). Mixing numpy arrays and tensors (X and
        sample_weight, or fit and predict) raises a ValueError. On torch the kernels rbf,
        linear, polynomial, sigmoid, cosine, laplacian and callables (called with tensors)
        are available; chi2, "precomputed", the graph kernels and ``tau=None`` need numpy.
        The sampling plan and the initialisation are drawn on the host from
        ``random_state``, so numpy and torch runs with one seed agree up to rounding. Needs
        ``mbkkm[torch]``.

    Attributes
    ----------
    support_vectors_ : ndarray, CSR matrix or tensor of shape (n_support, n_features)
        The support points of all centers, grouped by cluster (a tensor on the
        input's device for tensor input, CSR rows for sparse input).
    dual_coef_ : ndarray of shape (n_support,)
        Coefficient of each support point: center j is
        ``sum_{s : support_labels_[s] = j} dual_coef_[s] phi(support_vectors_[s])``.
    support_labels_ : ndarray of shape (n_support,)
        Cluster of each support point.
    n_support_ : ndarray of shape (n_clusters,)
        Number of support points of each center.
    center_norms_ : ndarray of shape (n_clusters,)
        Squared feature-space norms <C_j, C_j> of the centers.
    labels_ : ndarray of shape (n_samples,)
        Label of each fitted point (when ``compute_labels``).
    inertia_ : float
        Sum of the (weighted) squared feature-space distances of the fitted points
        to their nearest center (when ``compute_labels``).
    batch_objective_ : ndarray of shape (``n_iter_``,)
        The batch objective f_B(C_i), the mean squared distance of the batch points
        to their nearest center before each update.
    n_iter_ : int
        Number of iterations run.
    n_steps_ : int
        Number of iterations (batches) processed since the first fit or partial_fit.
    %(resolved_kernel_attributes)s
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (``n_features_in_``,)
        Names of features seen during fit, when X has string feature names.

    See Also
    --------
    sklearn.cluster.MiniBatchKMeans : Mini-batch k-means in input space.

    Notes
    -----
    A cluster that receives no batch point in an iteration keeps its center
    unchanged (alpha_j = 0). The cached norms are recomputed from the cached window
    Gram matrices at every iteration, so they do not drift. When a cluster holds no
    point of ``labels_`` at the end of ``fit`` (for example ``n_clusters`` larger
    than the number of distinct points), an
    :class:`~mbkkm.cluster.EmptyClusterWarning` (a ConvergenceWarning) gives
    their number.

    ``fit`` and ``partial_fit`` are all-or-nothing: when they raise (a bad input,
    a callable kernel that fails, a KeyboardInterrupt), the estimator is left as it
    was before the call (still fitted with its previous attributes, or not fitted).
    A fitted model pickles (and saves with ``skops.io``) with its windows, so
    ``partial_fit`` can resume after reloading; a callable kernel must itself be
    picklable (a module-level function, not a lambda).

    References
    ----------
    B. Jourdan and G. Schwartzman. "Mini-batch kernel k-means." 2024.
    G. Schwartzman. "Mini-batch k-means terminates within O(d/epsilon) iterations."
    ICLR 2023.

    Examples
    --------
    >>> from sklearn.datasets import make_circles
    >>> from mbkkm import MiniBatchKernelKMeans
    >>> X, y = make_circles(n_samples=2000, factor=0.3, noise=0.05, random_state=0)
    >>> km = MiniBatchKernelKMeans(n_clusters=2, batch_size=256, tau=100, max_iter=50,
    ...                            random_state=0).fit(X)
    >>> km.labels_.shape
    (2000,)
    >>> from sklearn.metrics import adjusted_rand_score
    >>> adjusted_rand_score(y, km.labels_) > 0.9
    True
    """

    _parameter_constraints: dict = {
        **COMMON_CONSTRAINTS,
        **KERNEL_CONSTRAINTS,
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "tau": [Interval(Integral, 1, None, closed="left"), None],
        "learning_rate": [StrOptions(set(LEARNING_RATES))],
        "renormalize": ["boolean"],
        "compute_labels": ["boolean"],
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
        batch_size=1024,
        tau=200,
        learning_rate="adaptive",
        renormalize=True,
        max_iter=200,
        tol=None,
        init="k-means++",
        n_init=1,
        init_size=None,
        compute_labels=True,
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
        self.batch_size = batch_size
        self.tau = tau
        self.learning_rate = learning_rate
        self.renormalize = renormalize
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.n_init = n_init
        self.init_size = init_size
        self.compute_labels = compute_labels
        self.working_memory = working_memory
        self.random_state = random_state
        self.verbose = verbose
        self.device = device

    # -------------------------------------------------------------- memory
    def _tile_budget(self, nx):
        """Bytes for an iteration's kernel blocks (above it: column chunks).

        ``working_memory`` when set; else scikit-learn's working_memory on the host,
        and a quarter of the free memory on a device that reports it.
        """
        if self.working_memory is None and not nx.is_host:
            free = nx.free_memory()  # None for torch on the CPU
            if free is not None:
                return int(free // 4)
        return int(working_memory_bytes(self.working_memory))

    def _plan_memory(self, problem, partial=False, iterations=1, batch=None, grow_only=False):
        """Set the fit's memory plan (``memory_plan_``), checked against what is available.

        Computed from the parameters and the data's shape, before any kernel work;
        raises :class:`~mbkkm.MemoryPlanError` with the numbers when it cannot fit.
        ``partial``: a ``partial_fit``, whose batch is the whole of its rows and which
        has no batch plan (``batch``: the largest chunk, when not this one); its support
        is that of ``iterations`` calls (the calls are not counted against ``max_iter``).
        ``grow_only``: keep the plan in use unless the new one holds more points.
        """
        nx, n, index = problem.nx, problem.n_samples, problem.is_index
        row_bytes = 8 if index else problem.n_features * problem.itemsize
        nnz = getattr(problem.items, "nnz", None)  # CSR rows: their stored values, not d each
        if nnz is not None:
            indices, ptr = problem.items.indices.itemsize, problem.items.indptr.itemsize
            row_bytes = -(-nnz * (problem.itemsize + indices) // max(1, n)) + ptr
        k, b = self.n_clusters, (batch or n) if partial else self._batch_size
        if self.tau is None:
            plan = plan_untruncated(
                n=n,
                row_bytes=row_bytes,
                n_clusters=k,
                batch_size=b,
                chunk_rows=chunk_rows(self.working_memory, b + k, 8),
                max_iter=self.max_iter,
                compute_labels=self.compute_labels,
            )
        else:
            plan = plan_minibatch(
                MiniBatchPlanRequest(
                    n=n,
                    row_bytes=row_bytes,
                    n_features=problem.n_features,
                    itemsize=problem.itemsize,
                    n_clusters=k,
                    batch_size=b,
                    tau=self.tau,
                    kernel_name=getattr(self.kernel_, "name", ""),
                    max_tile_bytes=self._tile_budget(nx),
                    label_rows="auto",
                    working_memory=self.working_memory,
                    tiled_labels=nx.is_host and not index and not self.kernel_.is_callable,
                    compute_labels=self.compute_labels,
                    where="host" if nx.is_host else str(nx.device),
                    data_on_device=n * row_bytes if not nx.is_host and not problem.tensor_io else 0,
                    max_iter=iterations if partial else self.max_iter,
                    init_size=self._init_size,
                    data_gamma=self.gamma_selection_ is None
                    and not index
                    and self.gamma in (None, "mean-distance")
                    and self.kernel_.name in ("rbf", "laplacian"),
                    width_sample=(
                        0 if self.gamma_selection_ is None else self.gamma_selection_.n_samples
                    ),
                    early_stopping=self.tol is not None,
                    device_resident=not nx.is_host,
                    partial=partial,
                )
            )
        if grow_only and all(
            plan.shapes[name] <= self.memory_plan_.shapes.get(name, 0) for name in ("batch", "m")
        ):
            return  # the plan in use covers this call (a support at its steady state)
        free = None if nx.is_host else nx.free_memory()  # None for torch on the CPU
        available = _memory.available_host_memory() if free is None else int(free)
        self.memory_plan_ = plan
        if self.verbose:
            print(plan.report())
            if available is not None:
                print(f"  available on {plan.where}: {available / 2**20:.1f} MiB")
        if partial:  # its batch is the call's rows
            plan.hints["fit"] = "the rows per partial_fit call, or tau"
        plan.check(available, what=f"{type(self).__name__}.{'partial_fit' if partial else 'fit'}")

    # ---------------------------------------------------------------- init
    def _initial_centers(self, X, sample_weight, rng, init_idx=None):
        """One initialisation: the windows of k initial center points (rows of X or the
        init array)."""
        if isinstance(self._init, str):
            points = self._init_points(X, sample_weight, rng, init_idx, self.kernel_)
        else:
            points = rows_of(X).centers(self._init)  # CSR data: CSR support rows
        return init_state(points, self.kernel_)

    def _init_inertia(self, Xv, wv, state):
        _, mind = assign(Xv, state, self.kernel_, chunk_rows=self._chunk_rows(Xv, state))
        mind = get_backend(mind).to_numpy(mind)
        return float(mind.sum() if wv is None else mind @ wv)

    # ----------------------------------------------------------------- fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, sample_weight=None, *, checkpoint=None, checkpoint_every=None):
        """Compute the clustering with ``max_iter`` mini-batch iterations.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data (float32 data stays float32). A numpy memmap is read
            batch by batch, never copied whole; sparse data are converted to CSR
            once and never densified.
        y : Ignored
        sample_weight : array-like of shape (n_samples,), default=None
            Batches are drawn with probability proportional to the weights (unit
            weights in the update); ``labels_`` and ``inertia_`` use the weights.
            Integer weights and repeated rows give the same distribution of models;
            constant weights c give exactly the model of None (``inertia_`` times c).
        checkpoint : str or os.PathLike, default=None
            Save the fit's state to this file (skops format, written atomically)
            after the initialisation, every ``checkpoint_every`` iterations and at
            the end, and resume from it when it exists: a fit killed part way and
            run again with the same file, parameters and data continues from the
            last save and ends with exactly the model of an uninterrupted fit (the
            width selection and the initialisation are not run again). A file
            written by another fit (other parameters or data) is refused with a
            ValueError. The file is kept after the fit (it then holds the finished
            fit, which a new fit with the same file returns without iterating):
            delete it to fit again from scratch. Needs skops (``mbkkm[cli]``); not
            available with ``tau=None`` or the graph kernels. See
            :doc:`/reliability`.
        checkpoint_every : int, default=None
            Iterations between two saves (None: ``max(1, max_iter // 10)``). On a
            torch device a save waits for the next read-back of the device (at most
            16 iterations later).

        Returns
        -------
        self : MiniBatchKernelKMeans
        """
        with self._all_or_nothing():  # one thread policy; on an error, the model as it was
            if checkpoint is not None or checkpoint_every is not None:
                checkpoint = check_checkpoint(checkpoint, checkpoint_every, self)
            data = fit_input(X, sample_weight, self, relative_weights=True)
            if checkpoint is not None:  # the file's fit must be this one (else a ValueError)
                checkpoint.open(self, data.rows, data.sample_weight)
            self._check_sizes_and_init(data.rows, self.kernel, self.batch_size)
            # the width: chosen now (gamma="auto"), or the one a resumed checkpoint chose
            selection = None if checkpoint is None else checkpoint.gamma_selection
            problem = self._resolve(data, gamma_selection=selection)
            items, sample_weight = problem.items, problem.sample_weight
            # gamma="auto" or t="auto" with a named init: the first start is the
            # selection's sample partition, where the selection trusts it
            start = None
            resuming = checkpoint is not None and checkpoint.resuming
            selection = problem.t_selection or problem.gamma_selection
            if selection is not None and isinstance(self._init, str) and not resuming:
                start = start_state(problem.items, selection, problem.kernel, self.n_clusters)
            self._plan_memory(problem)  # refuses, with numbers, what cannot fit
            self._check_kernel_sample(problem, indefinite=True)
            with memory_guard(self.memory_plan_):
                self._random_state = rng = check_random_state(self.random_state)
                state = None if resuming else self._best_init(items, sample_weight, rng, start)
                if checkpoint is not None:  # resuming: rng set to its state after the init
                    checkpoint.record_random_state(rng)
                batches = BatchPlan(  # drawn block by block as the iterations reach it
                    rng, data.n_samples, self._batch_size, self.max_iter, sample_weight
                )
                problem.rows.prefetch(batches)  # Dask: the rows of every batch in few passes
                if self.tau is None:
                    labelled = self._fit_untruncated(items, state, batches)
                else:
                    cfg = StepConfig(
                        kernel=self.kernel_,
                        rate=LEARNING_RATES[self.learning_rate],
                        tau=self.tau,
                        renormalize=self.renormalize,
                        tol=self.tol,
                        max_tile_bytes=self._tile_budget(problem.nx),
                    )
                    # Everything between two iterations (centers, counter, plan, random
                    # state) is loop.state; on torch the iterations run on the device,
                    # read back in blocks.
                    if checkpoint is None:
                        loop = fit_loop(state, items, batches, rng, cfg)
                    else:
                        loop = checkpoint.loop(self, state, items, batches, rng, cfg)
                    self._iterate(loop)
                    self._publish(loop.finish())
                    labelled = loop.state.labelled
                if self.compute_labels:
                    self.labels_, inertia = self._labels_inertia(items, sample_weight, labelled)
                    self.inertia_ = inertia * data.weight_scale
                    self._warn_empty_clusters(self.labels_)
                else:
                    self._forget_labels()
                return self

    def _fit_untruncated(self, items, state, plan):
        """tau=None: the paper's Algorithm 1 with its dynamic program over all points;
        returns the labels and minimum distances of all points from the final table
        (with ``compute_labels``)."""
        kernel = self.kernel_
        n = items.shape[0]
        rows = chunk_rows(self.working_memory, self._batch_size + self.n_clusters, 8)  # float64
        table = init_table(items, state, kernel, chunk_rows=rows)
        diag_all = np.empty(n, dtype=np.float64)
        for start in range(0, n, rows):
            diag_all[start : start + rows] = kernel.diag(items[start : start + rows])
        rate = LEARNING_RATES[self.learning_rate]

        def step(it):
            B = plan[it]
            _, objective, _ = table_step(table, items, B, diag_all, kernel, rate, chunk_rows=rows)
            after = None
            if self.tol is not None:  # f_B(C_{i+1}) from the updated table
                D = diag_all[B][:, None] - 2 * table.table[B] + table.norms[None, :]
                after = float(np.maximum(D.min(axis=1), 0).mean())
            return objective, after

        self._iterate(function_loop(step, self.max_iter, self.tol))
        self._publish(table_to_windows(table, items))
        if not self.compute_labels:
            return None
        D = diag_all[:, None] - 2 * table.table + table.norms[None, :]
        labels = np.argmin(D, axis=1)
        return labels, np.maximum(D[np.arange(n), labels], 0)

    def _fitted_labels(self, X):
        # an index kernel labels its fitted points, not new ones (a graph kernel's
        # predict would go through its extension)
        return kernel_kind(self.kernel).fitted_labels(self, self._state, X)

    def partial_fit(self, X, y=None, sample_weight=None):
        """One iteration with exactly the rows of X as the batch.

        The first call initialises the centers (from ``init``; k-means++ and
        "random" draw them from this batch, and the data-driven gamma comes from
        this batch), then performs the iteration on the same rows, as
        scikit-learn's ``MiniBatchKMeans.partial_fit`` does.

        With chunks of a few rows use ``learning_rate="classic"``: the adaptive rate
        sqrt(b_j / b) is 1 for a one-row chunk, which moves the center onto that row
        (blobs fed one row at a time: ARI 0.53 with "adaptive", 0.95 with "classic",
        the rate scikit-learn's ``partial_fit`` uses). The first call plans the memory
        (``memory_plan_``) for chunks of its size; a larger chunk, or a support that
        outgrows the calls planned for, plans it again, before any work.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : Ignored
        sample_weight : array-like of shape (n_samples,), default=None
            Weights of the rows in the update (all ones: the same as None).

        Returns
        -------
        self : MiniBatchKernelKMeans
        """
        with self._all_or_nothing():  # one thread policy; on an error, the model as it was
            first = not hasattr(self, "_state")
            if first:
                self._validate_params()
            if self.tau is None:
                raise ValueError(
                    "partial_fit needs an integer tau: tau=None keeps a table over a fixed "
                    "training set, which only fit has"
                )
            kernel_kind(self.kernel).check_new_rows(self, "partial_fit")
            if first:
                data = fit_input(X, sample_weight, self, accept_dask=False)
                self._check_sizes_and_init(data.rows, self.kernel, self.batch_size)
                problem = self._resolve(data)
                X, sample_weight = problem.items, problem.sample_weight
                self._plan_memory(problem, partial=True)  # this call's rows are the batch
                self._check_kernel_sample(problem, indefinite=True)
                self._random_state = check_random_state(self.random_state)
                state = None
                if isinstance(self._init, str):  # gamma="auto": the selection's partition
                    selection = problem.t_selection or problem.gamma_selection
                    state = start_state(problem.items, selection, problem.kernel, self.n_clusters)
                if state is None:
                    state = self._initial_centers(
                        X, sample_weight, self._random_state, init_idx=np.arange(X.shape[0])
                    )
            else:
                if self._state.gram is None:  # a tau=None fit: windows for labelling only
                    raise ValueError(
                        "partial_fit cannot continue a model fitted with tau=None: its "
                        "centers are combinations of all the fitted points, kept for "
                        "labelling only; fit with an integer tau, or call partial_fit on "
                        "an unfitted estimator"
                    )
                X = self._validate_X(X)
                rows_of(X).check_no_overflow(self.kernel_)  # as the first call's rows were
                sample_weight = check_sample_weight(
                    host_sample_weight(sample_weight, self._tensor_io), _device.host_shape(X)
                )
                planned = self.memory_plan_.shapes
                # (a model of an earlier version, whose plan lacks these, plans again once)
                batch, iterations = planned.get("batch", 0), planned.get("iterations") or 0
                rows = max(X.shape[0], batch)
                # the plan's support was capped by its calls (not yet at its steady state)
                capped = planned.get("m", 0) >= self.n_clusters + rows * iterations
                if rows > batch or (self.n_steps_ >= iterations and capped):
                    # a larger chunk, or more calls than planned for: planned again,
                    # before any work, for twice the calls made so far (a support that
                    # keeps growing is planned again a few times only)
                    chunk = SimpleNamespace(
                        nx=get_backend(X),
                        items=X,
                        n_samples=X.shape[0],
                        n_features=X.shape[1],
                        itemsize=_device.itemsize(X),
                        is_index=False,  # index kernels refuse new rows (check_new_rows)
                        tensor_io=self._tensor_io,
                    )
                    self._plan_memory(
                        chunk,
                        partial=True,
                        iterations=2 * (self.n_steps_ + 1),
                        batch=rows,
                        grow_only=True,
                    )
                state = self._state.copy()
            with memory_guard(self.memory_plan_):
                nx = get_backend(X)
                cfg = StepConfig(
                    self.kernel_,
                    LEARNING_RATES[self.learning_rate],
                    tau=self.tau,
                    renormalize=self.renormalize,
                    max_tile_bytes=self._tile_budget(nx),
                )
                res = step_for(nx)(state, X, cfg, batch_weight=sample_weight)
            # as the fit's loop checks it, and the update's own values
            if not (np.isfinite(res.objective) and np.all(np.isfinite(state.host_norms()))):
                raise ValueError(NON_FINITE)
            self._publish(state)
            return self._record_step(first, res.objective, X, sample_weight)
