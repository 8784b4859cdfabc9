"""The state of mini-batch kernel k-means: every center as a window of blocks.

The data both steps share (the host step of :mod:`mbkkm._core._windows` and
the fixed-shape device step of :mod:`mbkkm._core._pool`): the window state, its
constructors, the result of one step, the index helpers, and the size of the
iteration's kernel tiles and of the labelling pass's (which the memory plan reads).
Kept apart from both steps so that neither imports the other's module for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from ..backends import get_backend
from ..backends._numpy import is_sparse
from ..backends._threads import threads_for

# ----------------------------------------------------------------- index helpers


def rank_in_groups(counts):
    """0, 1, ..., c_0 - 1, 0, 1, ..., c_1 - 1, ...: each position's rank in its group."""
    counts = np.asarray(counts, dtype=np.intp)
    return np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)


def stable_order(labels, n_groups):
    """``np.argsort(labels, kind="stable")`` for labels in ``range(n_groups)``: sorted as
    16-bit integers where they fit, which numpy sorts by radix (the same order; about
    3x faster on a batch's labels)."""
    if n_groups <= 2**16:
        labels = labels.astype(np.uint16)
    return np.argsort(labels, kind="stable")


def group_by(labels, n_groups):
    """Positions grouped by label (stable) and the group pointers, (n,) and (n_groups + 1,)."""
    order = stable_order(labels, n_groups)
    ptr = np.zeros(n_groups + 1, dtype=np.intp)
    np.cumsum(np.bincount(labels, minlength=n_groups), out=ptr[1:])
    return order, ptr


def block_slots(block_cluster, n_clusters):
    """Rank of each block inside its cluster (oldest first), shape (nb,)."""
    order, ptr = group_by(block_cluster, n_clusters)
    slots = np.empty(block_cluster.size, dtype=np.intp)
    slots[order] = rank_in_groups(np.diff(ptr))
    return slots


# -------------------------------------------------------------------------- state


@dataclass
class WindowState:
    """Every center as a window of blocks of support points (see the module docstring).

    Attributes
    ----------
    support : ndarray or tensor of shape (m, ...)
        Support items (data rows, or point indices for index kernels), block by
        block in time order. Its backend (numpy, or torch on a device) is the
        backend of the state.
    weight : ndarray of shape (m,), float64
        u_s, the weight of each support point inside its block.
    block_start : ndarray of shape (nb + 1,)
        Block q is ``support[block_start[q]:block_start[q + 1]]``.
    block_cluster : ndarray of shape (nb,)
        The cluster of each block.
    block_stamp : ndarray of shape (nb,), int64
        Iteration at which the block joined (-1 for an initial center).
    lam : ndarray of shape (nb,), float64
        lambda_q, the coefficient of each block: a_s = lam[q] * weight[s].
    gram : ndarray or tensor of shape (k, L, L), float64, or None
        Block Gram matrices H_j, slot i = the i-th oldest block of cluster j,
        zero-padded; on the backend of ``support``. None for a labelling-only state.
    norms : ndarray or tensor of shape (k,), float64
        c_j = ||C_j||^2, on the backend of ``support``.
    counts : ndarray of shape (k,), float64
        Running (weighted) number of batch points assigned to each cluster.
    n_steps : int
        Iterations performed so far.
    """

    support: np.ndarray
    weight: np.ndarray
    block_start: np.ndarray
    block_cluster: np.ndarray
    block_stamp: np.ndarray
    lam: np.ndarray
    gram: object
    norms: object
    counts: np.ndarray
    n_steps: int = 0
    workspace: dict = field(default_factory=dict, repr=False, compare=False)

    def __getstate__(self):
        return {**self.__dict__, "workspace": {}}  # buffers are scratch space: never pickled

    @property
    def n_clusters(self):
        return self.counts.shape[0]

    @property
    def backend(self):
        """The array backend of the support (see :mod:`mbkkm.backends`)."""
        return get_backend(self.support)

    @property
    def block_size(self):
        return np.diff(self.block_start)

    @property
    def labels(self):
        """Cluster of each support point, shape (m,) (in the state's layout)."""
        return np.repeat(self.block_cluster, self.block_size)

    @property
    def coef(self):
        """a_s = lambda_q u_s, the coefficient of each support point, shape (m,)."""
        return np.repeat(self.lam, self.block_size) * self.weight

    def host_norms(self):
        """c_j as a host float64 array."""
        return np.asarray(get_backend(self.support).to_numpy(self.norms), dtype=np.float64)

    def group_by_cluster(self):
        """Reorder the support (and the blocks) by cluster, in place (stable).

        Blocks stay contiguous and, within each cluster, oldest first, which is all
        the iteration needs of the layout; the Gram slots do not change.
        """
        # support positions by cluster (always a gather: the same calls whatever the order)
        order, _ = group_by(self.labels, self.n_clusters)
        border = np.argsort(self.block_cluster, kind="stable")
        nx = get_backend(self.support)
        self.support = nx.take(self.support, nx.index(order))
        self.weight = self.weight[order]
        self.block_start = np.r_[0, np.cumsum(self.block_size[border])]
        self.block_cluster = self.block_cluster[border]
        self.block_stamp = self.block_stamp[border]
        self.lam = self.lam[border]
        return self

    def copy(self):
        """A copy of every array (each with its own backend's copy), without the workspace."""
        copies = {}
        for f in fields(self):
            if f.name not in ("n_steps", "workspace"):
                a = getattr(self, f.name)
                copies[f.name] = None if a is None else get_backend(a).copy(a)
        return WindowState(**copies, n_steps=self.n_steps)


def init_state(centers, kernel):
    """Windows of one point each (coefficient 1) from k initial center items.

    The state lives on the backend of ``centers`` (numpy array, scipy CSR rows or
    torch tensor).
    """
    nx = get_backend(centers)
    k = centers.shape[0]
    diag = nx.astype(kernel.diag(centers), np.float64)  # (k,) K(c_j, c_j)
    return WindowState(
        support=(
            nx.copy(centers)
            if not nx.is_host or is_sparse(centers)
            else np.array(centers, copy=True)
        ),
        weight=np.ones(k),
        block_start=np.arange(k + 1),
        block_cluster=np.arange(k),
        block_stamp=np.full(k, -1, dtype=np.int64),
        lam=np.ones(k),
        gram=diag.reshape(k, 1, 1),  # H_j = [[K(c_j, c_j)]]
        norms=nx.copy(diag),
        counts=np.zeros(k),
    )


def labelling_state(support, coef, cluster, n_clusters, norms):
    """A state for labelling only (no Gram): one block per cluster.

    Parameters
    ----------
    support : ndarray or tensor of shape (m, ...)
    coef : ndarray of shape (m,)
        a_s, the coefficient of each support point in its center.
    cluster : ndarray of shape (m,)
        The center of each support point.
    n_clusters : int
    norms : ndarray of shape (k,)
        c_j (host or on the backend of ``support``).
    """
    nx = get_backend(support)
    cluster = np.asarray(cluster, dtype=np.intp)
    order, ptr = group_by(cluster, n_clusters)
    lam = np.bincount(cluster, weights=coef, minlength=n_clusters).astype(np.float64)
    lam[lam == 0] = 1.0  # empty (or zero) centers: any block coefficient will do
    return WindowState(
        support=support
        if np.all(order == np.arange(order.size))  # in order already (or empty)
        else nx.take(support, nx.index(order)),
        weight=np.asarray(coef, dtype=np.float64)[order] / np.repeat(lam, np.diff(ptr)),
        block_start=ptr,
        block_cluster=np.arange(n_clusters),
        block_stamp=np.full(n_clusters, -1, dtype=np.int64),
        lam=lam,
        gram=None,
        norms=nx.asarray(norms, dtype=np.float64),
        counts=np.zeros(n_clusters),
    )


#: The error of an iteration whose objective is not finite (every loop checks it: the
#: host step, the device blocks' read-back, the full batch's Lloyd).
NON_FINITE = (
    "kernel: the iteration met non-finite values (NaN or inf): the kernel returned "
    "them (a polynomial kernel of non-integer degree on a negative gamma <x, y> + "
    "coef0, say), the data overflow its arithmetic, or X holds NaN or infinity "
    "(unchecked under scikit-learn's assume_finite=True)"
)
#: Iterations between two read-backs of a device run (objectives, counter, overflow).
READ_EVERY = 16


@dataclass(frozen=True)
class StepConfig:
    """What every iteration of a run does, whichever step runs it (host or device).

    Attributes
    ----------
    kernel : Kernel or IndexKernel
    rate : callable
        ``rate(batch_counts, batch_total, running_counts) -> alpha``, a pure rate of
        :data:`mbkkm._core.LEARNING_RATES`.
    tau : int or None
        Window length; None keeps every block (no truncation).
    renormalize : bool
        Divide the kept coefficients by their sum after truncation.
    tol : float or None
        Early stopping threshold: f_B(C_{i+1}) is computed on the same batch and a run
        stops at the first iteration with f_B(C_i) - f_B(C_{i+1}) < tol. None: neither
        (``-inf``: f_B(C_{i+1}) computed, never stops).
    max_tile_bytes : int or None
        Memory for an iteration's kernel blocks; above it they are computed in column
        chunks of the batch (:func:`tile_columns`). None: in one piece.
    read_every : int
        Device runs: iterations between two read-backs.
    """

    kernel: object
    rate: object
    tau: int | None
    renormalize: bool
    tol: float | None = None
    max_tile_bytes: int | None = None
    read_every: int = READ_EVERY

    @property
    def objective_after(self):
        """Whether an iteration also computes f_B(C_{i+1}) (for early stopping)."""
        return self.tol is not None


@dataclass
class StepResult:
    labels: np.ndarray  # (b,) assignment of the batch before the update
    objective: float  # f_B(C_i): weighted mean of the minimum distances
    objective_after: float | None  # f_B(C_{i+1}) on the same batch (when asked)
    alpha: np.ndarray  # (k,) learning rates used


#: The host step's reused buffers are allocated a quarter larger than asked, so that
#: the support's small changes from one iteration to the next reuse them.
WORKSPACE_HEADROOM = 1.25


def tile_columns(m, b, itemsize, max_tile_bytes):
    """Batch columns per kernel chunk so that K(S, B_c) and K(B, B_c) fit the budget.

    The iteration's kernel blocks are (m, b) and (b, b); when together they exceed
    ``max_tile_bytes`` (None: no limit) they are computed in column chunks of the
    batch: the same kernel work, in pieces, with the same results.
    """
    if max_tile_bytes is None:
        return b
    per_column = (m + b) * itemsize * WORKSPACE_HEADROOM
    return int(max(1, min(b, max_tile_bytes // max(1, per_column))))


MIN_ROWS_PER_THREAD = 4096
_TILE_BYTES = 2 * 1024 * 1024  # one kernel tile: fewer Python calls per row, still in L2/L3
# Sparse rows: the tile is a sparse-times-sparse product (scipy's, with a sparse result
# as large as the tile before it is written out dense), whose cost per tile row does
# not depend on the tile size (measured on TF-IDF rows, 200k x 50k at density 0.001,
# m = 2300 support rows: 81, 75 and 79 us per row at 256, 1024 and 4096 rows); larger
# tiles only amortise the per-tile work on the support (cosine rescales its rows).
# Each thread holds the tile and the sparse product (12 bytes per entry in float32):
# 4 MiB tiles keep the pass within about 15 MB per thread.
_SPARSE_TILE_BYTES = 4 * 1024 * 1024


def label_tiles(n, m, itemsize, chunk_rows, n_threads=None, tiled=True, sparse=False):
    """(rows per tile, threads) of the host labelling pass of n points against m
    support points: the sizing of :func:`mbkkm._core._windows.assign_parallel`,
    which the memory plan reads.

    At most one thread per ``MIN_ROWS_PER_THREAD`` points (``n_threads`` None: the
    threading policy's count), which share the ``chunk_rows`` budget. ``tiled``:
    tiles of about 2 MiB (4 MiB for scipy sparse rows, ``sparse``, see
    ``_SPARSE_TILE_BYTES``), so that the tile, its products and its distances stay
    in cache and the pass costs the GEMM plus the kernel's elementwise map, not more
    memory passes; the budget caps them (a budget smaller than one tile).
    """
    n_threads = threads_for(n, n_threads, min_part=MIN_ROWS_PER_THREAD)
    rows = max(1, chunk_rows // n_threads)  # the memory budget is shared, not multiplied
    if tiled:
        tile = max(16, (_SPARSE_TILE_BYTES if sparse else _TILE_BYTES) // max(1, m * itemsize))
        rows = max(1, min(tile, rows))
    return rows, n_threads
