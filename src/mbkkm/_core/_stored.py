"""The truncated step for small n: the kernel matrix computed once, iterations index it.

Where the kernel matrix of every point a fit can meet fits a small budget
(:data:`STORED_KERNEL_BYTES`), the kernel work of an iteration reads rows of that
matrix. Every block q of the windows keeps its row of sums over all N points,

    R[q, i] = sum_{s in q} u_s K(s, i)   (nb, N),

computed once, when the block joins (the repeated points of a block merged: one
sparse (n_grow, N) product with at most b non-zeros), and kept while the block is.
Then, for the k centers and all N points at once,

    PA = Lambda R (k, N),   c_j = sum_{s in W_j} a_s PA[j, s],

and an iteration reads its inner products P = PA[:, B]: b N products a step, where
the host step (:mod:`mbkkm._core._windows`) evaluates b (m + b) kernel values. The
windows are planned by the same :func:`~mbkkm._core._windows.plan_windows` and laid
out by the same :func:`~mbkkm._core._windows.support_layout`, so the centers are
the host step's up to rounding.

The points are *items*: indices into ``Xa = [X; E]``, the training rows followed by
the initial support rows that are not training rows (an explicit init; k-means++
centers and a width selection's sample are found among the rows of X). K is
assembled from K(X, X), K(X, E) and K(E, E), each one kernel call of a shape that
depends only on X and E, so that a fit resumed from a checkpoint (which saves E
with the windows) computes the same matrix and continues exactly. With a stored
kernel matrix (``kernel="precomputed"``, the graph kernels) the items are already
indices and E is empty. :func:`to_rows` turns the items back into data rows, with
their block Gram, when the loop ends.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..backends import get_backend
from ..backends._numpy import is_sparse
from ._rates import batch_rates
from ._state import StepResult, block_slots, group_by
from ._windows import advance_blocks, batch_mean, labels_and_minima, support_layout

#: The largest kernel matrix a mini-batch fit stores to index instead of computing
#: kernel blocks: 128 MiB, 4,096 float64 points (5,792 float32). Up to about this n
#: an iteration's reads of the matrix (the rows of the batch's distinct points, at most
#: b N values) cost less than its kernel blocks (b (m + b) values with m ~ k (tau +
#: b / k)); measured on digits (n = 1,797, k = 10): about 1 ms against 15 ms an
#: iteration.
STORED_KERNEL_BYTES = 128 * 2**20


@dataclass
class StoredKernel:
    """The kernel matrix of the items ``[X; E]`` and what the step needs of it.

    Attributes
    ----------
    matrix : ndarray of shape (N, N)
        K over the N = n + len(E) items (float64, or float32 for float32 data).
    diag : ndarray of shape (N,)
        K(x, x) from the kernel's own diagonal (exact where the kernel knows it).
    extra : ndarray of shape (len(E), d) or None
        E, the initial support rows that are not rows of X (None with a stored
        kernel matrix).
    n : int
        Training points; item i >= n is row i - n of E.
    """

    matrix: np.ndarray
    diag: np.ndarray
    extra: np.ndarray | None
    n: int


def _find_rows(X, E):
    """For each row of E, the index of an equal row of X, or -1 (exact equality)."""
    X = np.ascontiguousarray(X)
    E = np.ascontiguousarray(E, dtype=X.dtype)
    where = {X[i].tobytes(): i for i in range(X.shape[0] - 1, -1, -1)}  # the first one
    return np.array([where.get(row.tobytes(), -1) for row in E], dtype=np.intp)


def stored_kernel_for(items, windows, kernel, extra=None):
    """The :class:`StoredKernel` of a fit and its initial windows as items, or None
    where the host step does the work.

    Used on the host for dense float rows with a named kernel and for a dense stored
    kernel matrix (``kernel.matrix``), when the N x N matrix fits
    :data:`STORED_KERNEL_BYTES`. ``windows`` is the initial state (its support rows
    are found among the rows of X, the others become E), or None when resuming with
    the saved ``extra`` (E).
    """
    budget = STORED_KERNEL_BYTES
    if isinstance(items, np.ndarray) and items.ndim == 1 and hasattr(kernel, "matrix"):
        M = kernel.matrix
        if type(M) is not np.ndarray or M.nbytes > budget:  # a memmap, sparse, low rank
            return None
        n = M.shape[0]
        return StoredKernel(matrix=M, diag=kernel.diag(np.arange(n)), extra=None, n=n), windows
    if (
        type(items) is not np.ndarray
        or items.ndim != 2
        or items.dtype.kind != "f"
        or kernel.is_callable
        or hasattr(kernel, "matrix")
        or (windows is not None and type(windows.support) is not np.ndarray)
        or items.shape[0] ** 2 * items.dtype.itemsize > budget  # before any work over the rows
    ):
        return None
    n = items.shape[0]
    if extra is None:
        found = _find_rows(items, windows.support)
        extra = windows.support[found < 0]
        found[found < 0] = n + np.arange(extra.shape[0])
    if is_sparse(extra) or (n + extra.shape[0]) ** 2 * items.dtype.itemsize > budget:
        return None
    E = np.asarray(extra, dtype=items.dtype)
    if E.shape[0] == 0:  # the usual case: the initial centers are rows of X
        K = np.asarray(kernel.tile(items, items), dtype=items.dtype)
    else:  # the three tiles written into one matrix: N x N held once
        N = n + E.shape[0]
        K = np.empty((N, N), dtype=items.dtype)
        kernel.tile(items, items, out=K[:n, :n])
        kernel.tile(items, E, out=K[:n, n:])
        K[n:, :n] = K[:n, n:].T
        kernel.tile(E, E, out=K[n:, n:])
    diag = np.concatenate([kernel.diag(items), kernel.diag(E)]).astype(items.dtype, copy=False)
    # K(x, x) as the kernel's own diagonal, the one the points' distances use and the
    # host step's initial centers have (exact where the kernel knows it: 1 for rbf):
    # a tile's rounding there (1 - 4e-15) decided exact ties between initial centers.
    np.fill_diagonal(K, diag)
    if windows is not None:
        windows = windows.copy()
        windows.support = found
        windows.gram = None
    return StoredKernel(matrix=K, diag=diag, extra=E, n=n), windows


def block_sums(ptr, items, weights, K):
    """R[q] = sum_{s in q} u_s K(s, .) for the blocks ``ptr`` of ``items`` (rows of the
    symmetric K): the repeated items of a block merged (their weights added) first,
    so that a block's row is the same whenever it is computed."""
    n_blocks, N = ptr.size - 1, K.shape[0]
    key = np.repeat(np.arange(n_blocks) * N, np.diff(ptr)) + items
    order = np.argsort(key, kind="stable")  # the repeats of an item in their order
    key = key[order]
    first = np.ones(key.size, dtype=bool)  # the first of each run of equal keys
    np.not_equal(key[1:], key[:-1], out=first[1:])
    merged = np.bincount(np.cumsum(first) - 1, weights=weights[order])
    block, item = np.divmod(key[first], N)
    indptr = np.searchsorted(block, np.arange(n_blocks + 1))
    return get_backend(K).csr_matmul(indptr, item, merged, K)


def center_rows(state, R, rows):
    """PA = Lambda R (k, N), the inner products of the centers with every point, and
    the norms c_j = sum_{s in W_j} a_s PA[j, s]; block q's sums are row ``rows[q]`` of R."""
    k = state.n_clusters
    order, ptr = group_by(state.block_cluster, k)  # one sparse row per center
    PA = get_backend(R).csr_matmul(ptr, rows[order], state.lam[order], R)
    labels = state.labels
    weights = state.coef * PA.take(labels * PA.shape[1] + state.support)  # PA[labels, support]
    norms = np.bincount(labels, weights=weights, minlength=k).astype(np.float64)
    return PA, norms


def _rows_of(state, stored):
    """(R, rows, PA, norms) of the state, block q's sums in row ``rows[q]`` of R, kept in
    its workspace from one iteration to the next (computed here at the start, or when
    resuming: the same values)."""
    cached = state.workspace.get("stored_rows")
    if cached is not None and cached[0] == state.n_steps:
        return cached[1:]
    R = block_sums(state.block_start, state.support, state.weight, stored.matrix)
    rows = np.arange(R.shape[0])
    return (R, rows, *center_rows(state, R, rows))


def _store_rows(R, kept, new):
    """R with the sums of the new blocks ``new`` written over rows of dropped blocks
    (R grown when too few are free), and the row of every block: those of the kept
    blocks (``kept``), then the new ones. The kept rows stay where they are, so an
    iteration copies no row of R but its new ones."""
    free = np.ones(R.shape[0], dtype=bool)
    free[kept] = False
    rows = np.flatnonzero(free)[: len(new)]
    if rows.size < len(new):  # R grown by a quarter (at least), the new rows past its end
        rows = np.concatenate([rows, R.shape[0] + np.arange(len(new) - rows.size)])
        room = np.empty((max(R.shape[0] // 4, len(new)), R.shape[1]), R.dtype)
        R = np.concatenate([R, room])
    R[rows] = new
    return R, np.concatenate([kept, rows])


def stored_step(state, batch, stored, cfg, batch_weight=None):
    """One truncated iteration with the stored kernel (in place on ``state``).

    Parameters
    ----------
    state : WindowState
        Windows whose support are items (indices into the stored matrix).
    batch : ndarray of shape (b,)
        Items of the batch.
    stored : StoredKernel
    cfg : StepConfig
    batch_weight : ndarray of shape (b,) or None

    Returns
    -------
    StepResult
    """
    R, rows, PA, norms = _rows_of(state, stored)
    diag = stored.diag[batch]
    nx = get_backend(R)
    labels, mind = labels_and_minima(nx.distances_T(PA.take(batch, axis=1), diag, norms))
    objective, bcounts, btotal, alpha = batch_rates(
        labels, mind, state.n_clusters, cfg.rate, state.counts, batch_weight
    )
    plan, new_pos, grow_ids, new_sizes, new_ptr, u_new, kept_sizes, rows_kept = support_layout(
        state, labels, alpha, bcounts, cfg, batch_weight
    )
    new_items = batch[new_pos]
    new_rows = block_sums(new_ptr, new_items, u_new, stored.matrix)
    R, rows = _store_rows(R, rows[plan.keep], new_rows)
    state.support = np.concatenate([state.support[rows_kept], new_items])
    state.weight = np.concatenate([state.weight[rows_kept], u_new])
    advance_blocks(state, plan, kept_sizes, new_sizes, grow_ids)
    PA, state.norms = center_rows(state, R, rows)
    state.workspace["stored_rows"] = (state.n_steps, R, rows, PA, state.norms)
    after = None
    if cfg.objective_after:  # f_B(C_{i+1}) on the same batch: no new work
        _, mind2 = labels_and_minima(nx.distances_T(PA.take(batch, axis=1), diag, state.norms))
        after = batch_mean(mind2, batch_weight, btotal)
    return StepResult(labels=labels, objective=objective, objective_after=after, alpha=alpha)


def training_labels(state, stored):
    """Labels and minimum distances of the n training items against the final centers,
    from the center rows the loop keeps (PA): no kernel work, where the labelling pass
    over the fitted model would compute K(S, X) again."""
    *_, PA, norms = _rows_of(state, stored)
    n = stored.n
    D = get_backend(PA).distances_T(PA[:, :n].copy(), stored.diag[:n], norms)
    return labels_and_minima(D)


def to_rows(state, X, stored):
    """The windows with data rows as support and their block Gram (the host step's
    form), c_j = lambda_j^T H_j lambda_j:

        H_j[p, q] = sum_{t in q} u_t R[p, t]   for the blocks p, q of window j.
    """
    R, rows, _, _ = _rows_of(state, stored)
    R = R[rows]  # block q's sums in row q
    k = state.n_clusters
    slot = block_slots(state.block_cluster, k)
    L = int(slot.max(initial=0)) + 1
    entry_block = np.repeat(np.arange(slot.size), state.block_size)
    gram = np.zeros((k, L, L))
    for j in range(k):
        blocks = np.flatnonzero(state.block_cluster == j)
        entries = np.flatnonzero(state.block_cluster[entry_block] == j)
        onehot = np.zeros((entries.size, L))
        onehot[np.arange(entries.size), slot[entry_block[entries]]] = state.weight[entries]
        gram[j, slot[blocks]] = R[blocks][:, state.support[entries]].astype(np.float64) @ onehot
    lam = np.zeros((k, L))
    lam[state.block_cluster, slot] = state.lam
    state.gram = gram
    state.norms = np.einsum("cl,clm,cm->c", lam, gram, lam)
    if stored.extra is not None:  # the data rows of the items: X's, then E's
        items = state.support
        state.support = np.empty((items.size, X.shape[1]), dtype=X.dtype)
        mine = items < stored.n
        state.support[mine] = X[items[mine]]
        state.support[~mine] = stored.extra[items[~mine] - stored.n]
    state.workspace.clear()
    return state
