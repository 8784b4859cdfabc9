"""Truncated centers stored as sliding windows of support points.

Center j is an explicit sparse combination of support points
    C_j = sum_{s in W_j} a_s phi(s),
stored as its window W_j: the blocks of points that the last batches assigned to
it, oldest first, one coefficient per point, the cached Gram matrix
G_j = K(W_j, W_j) and the squared norm c_j = <C_j, C_j> = a_j^T G_j a_j.

All windows live in one array ``support`` (m rows), grouped by cluster
(``starts[j]:starts[j+1]`` is W_j), so one kernel block K(batch, support) serves
every cluster.

One iteration (:func:`minibatch_step`), with b batch points x and k clusters:

1. K_BS = K(X_B, S), shape (b, m): the kernel work of the assignment (plus, in
   step 7, the diagonal blocks K(B_j, B_j) of the batch's own block, about b^2 / k
   values; the whole K(B, B) only when early stopping needs f_B(C_{i+1})).
2. P[x, j] = <phi(x), C_j> = sum_{s in W_j} a_s K(x, s)   (segment sums, (b, k))
   D[x, j] = K(x, x) - 2 P[x, j] + c_j,  labels = argmin_j D,  f_B = mean_x min_j D.
3. alpha_j from the learning rate (0 when b_j = 0: the center is kept).
4. a_s <- (1 - alpha_j) a_s on W_j, and the b_j new points join as one block with
   coefficient alpha_j / b_j each (with batch weights w: alpha_j w_x / sum w over B_j).
5. Truncation: keep the shortest suffix of blocks whose sizes sum to >= tau
   (a block is kept iff the points in strictly newer blocks number < tau).
6. Optionally renormalise: a_s <- a_s / sum_{W_j} a (a convex combination again).
7. G_j for the new window from G_j (kept part), K_BS (cross terms) and K(B_j, B_j)
   (new block): c_j = a^T G_j a recomputed (no drift).

Backends: every array operation that depends on the array library goes through
the backend ``nx`` of the items (:mod:`mbkkm.backends`). On a device, the support
rows, the batch, the kernel tile K_BS and the Gram caches G_j live there; the
products over them (segment sums P, norms c_j, gathers) run there; P (b x k) and
K(x, x) of the batch come back to the host once per iteration, and the small
bookkeeping (argmin of the batch, rates, coefficients, block stamps, window
starts, norms) is numpy on the host on every backend.

References
----------
B. Jourdan and G. Schwartzman. "Mini-batch kernel k-means." (Algorithm 2.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..backends import get_backend
from ._rates import batch_rates


@dataclass
class WindowState:
    """Every center as a window of support points (see the module docstring).

    Attributes
    ----------
    support : ndarray or tensor of shape (m, ...)
        Support items (data rows, or point indices for index kernels), grouped by
        cluster, oldest block first inside each cluster. Its backend (numpy, or
        torch on a device) is the backend of the state.
    coef : ndarray of shape (m,), float64
        Coefficient of each support point in its center.
    block : ndarray of shape (m,), int64
        Iteration at which the point joined (-1 for the initial center).
    starts : ndarray of shape (k + 1,)
        W_j is ``support[starts[j]:starts[j + 1]]``.
    grams : list of k arrays of shape (w_j, w_j)
        G_j = K(W_j, W_j), on the backend of ``support``.
    norms : ndarray of shape (k,), float64
        c_j = ||C_j||^2 = a_j^T G_j a_j.
    counts : ndarray of shape (k,), float64
        Running (weighted) number of batch points assigned to each cluster.
    n_steps : int
        Iterations performed so far.
    """

    support: np.ndarray
    coef: np.ndarray
    block: np.ndarray
    starts: np.ndarray
    grams: list
    norms: np.ndarray
    counts: np.ndarray
    n_steps: int = 0
    workspace: dict = field(default_factory=dict, repr=False, compare=False)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["workspace"] = {}  # buffers are scratch space: never pickled
        return state

    @property
    def n_clusters(self):
        return len(self.starts) - 1

    @property
    def labels(self):
        """Cluster of each support point, shape (m,)."""
        return np.repeat(np.arange(self.n_clusters), np.diff(self.starts))

    @property
    def backend(self):
        """The array backend of the support (see :mod:`mbkkm.backends`)."""
        return get_backend(self.support)

    def copy(self):
        nx = self.backend
        return WindowState(
            nx.copy(self.support), self.coef.copy(), self.block.copy(), self.starts.copy(),
            None if self.grams is None else [nx.copy(g) for g in self.grams],
            self.norms.copy(), self.counts.copy(), self.n_steps,
        )


def init_state(centers, kernel):
    """Windows of one point each (coefficient 1) from k initial center items.

    The state lives on the backend of ``centers`` (numpy array or torch tensor).
    """
    nx = get_backend(centers)
    k = centers.shape[0]
    diag = nx.kernel_diag(kernel, centers)
    return WindowState(
        support=nx.copy(centers) if not nx.is_host else np.array(centers, copy=True),
        coef=np.ones(k),
        block=np.full(k, -1, dtype=np.int64),
        starts=np.arange(k + 1),
        grams=[nx.copy(diag[j:j + 1].reshape(1, 1)) for j in range(k)],
        norms=nx.to_numpy(diag).astype(np.float64),
        counts=np.zeros(k),
    )


def segment_inner(K, coef, starts):
    """P[:, j] = sum_{s in segment j} K[:, s] coef[s], shape (n_rows, k).

    Segments are contiguous (host ``coef`` and ``starts``); K on any backend. See
    ``NumpyBackend.segment_inner`` for why it is one matrix-vector product per
    segment.
    """
    return get_backend(K).segment_inner(K, coef, starts)


def _workspace(state, name, shape, dtype, nx):
    """A reusable buffer of the state (no fresh pages, hence no page faults, per step)."""
    size = int(np.prod(shape))
    buf = state.workspace.get(name)
    if buf is None or buf.shape[0] < size or buf.dtype != dtype:
        buf = nx.empty(int(size * 1.25) + 1, dtype)
        state.workspace[name] = buf
    return buf[:size].reshape(shape)


def sq_distances(K_XS, diag_X, state, nx=None):
    """Squared feature-space distances D[x, j] = K(x,x) - 2 <phi(x), C_j> + c_j, (n, k).

    On the backend of ``K_XS`` (``diag_X`` on the same one).
    """
    nx = get_backend(K_XS) if nx is None else nx
    P = nx.segment_inner(K_XS, state.coef, state.starts)
    D = P
    D *= -2
    D += diag_X[:, None]
    D += nx.asarray(state.norms, dtype=D.dtype)[None, :]
    return D


@dataclass
class StepResult:
    labels: np.ndarray  # (b,) assignment of the batch before the update
    objective: float  # f_B(C_i): weighted mean of the minimum distances
    objective_after: float | None  # f_B(C_{i+1}) on the same batch (when asked)
    alpha: np.ndarray  # (k,) learning rates used


def minibatch_step(state, Xb, kernel, rate, *, tau, renormalize, batch_weight=None,
                   objective_after=False, stamp=None):
    """One truncated mini-batch iteration on the batch items ``Xb`` (in place on state).

    Parameters
    ----------
    state : WindowState
    Xb : ndarray of shape (b, ...)
        Batch items (rows or indices).
    kernel : Kernel-like
        ``kernel(A, B)`` and ``kernel.diag(A)``.
    rate : callable
        ``rate(batch_counts, batch_total, running_counts) -> alpha`` (see _rates).
    tau : int or None
        Window length; None keeps every block (no truncation).
    renormalize : bool
        Divide the kept coefficients by their sum after truncation.
    batch_weight : ndarray of shape (b,) or None
        Weights of the batch points in the update (None: unit weights).
    objective_after : bool
        Also compute f_B(C_{i+1}) on the same batch (for early stopping).
    stamp : int, optional
        Block label of the new points (default: ``state.n_steps``).

    Returns
    -------
    StepResult
    """
    nx = get_backend(state.support, Xb)
    b = Xb.shape[0]
    k = state.n_clusters
    m = state.support.shape[0]
    starts = state.starts
    stamp = state.n_steps if stamp is None else stamp

    # 1. The kernel block between the batch and every support point (device). Of the
    # batch's own block K(B, B) only the diagonal blocks K(B_j, B_j) are needed (the
    # new Gram blocks, about b^2 / k values, computed per cluster below); all of it
    # only when f_B(C_{i+1}) is asked for (early stopping).
    dtype = nx.tile_dtype(kernel, Xb)
    out = None if dtype is None else _workspace(state, "K", (b, m), dtype, nx)
    K_BS = nx.kernel_tile(kernel, Xb, state.support, out=out)  # (b, m)
    K_BB = nx.kernel_tile(kernel, Xb, Xb) if objective_after else None  # (b, b)
    diag_dev = nx.kernel_diag(kernel, Xb)  # (b,)

    # 2. Assignment of the batch to the current centers: D (b, k) and K(x, x) come to
    # the host (tiny); everything below up to the gathers is host bookkeeping.
    D = nx.to_numpy(sq_distances(K_BS, diag_dev, state, nx))  # (b, k)
    diag_B = nx.to_numpy(diag_dev)
    labels = np.argmin(D, axis=1)
    mind = np.maximum(D[np.arange(b), labels], 0)
    # 3. Batch objective, counts and learning rates (0 where no point arrived).
    objective, bcounts, btotal, alpha = batch_rates(labels, mind, k, rate, state.counts,
                                                    batch_weight)
    w = None if batch_weight is None else np.asarray(batch_weight, dtype=np.float64)

    # 4-7. New windows, cluster by cluster (k small loops of vector operations).
    order = np.argsort(labels, kind="stable")  # batch positions grouped by cluster
    order_dev = nx.index(order)  # the same positions, for gathers on the device
    bstarts = np.concatenate([[0], np.cumsum(np.bincount(labels, minlength=k))])
    src_parts = []  # positions in [support; batch] of the new support, cluster by cluster
    support_parts = []  # the new support items themselves (device)
    coef_parts = []
    block_parts = []
    new_starts = np.zeros(k + 1, dtype=np.intp)
    grams = list(state.grams)
    norms = state.norms.copy()
    changed = []  # clusters whose window changed: their norms are recomputed below
    with nx.small_ops():  # k small tiles and gathers: single-threaded BLAS
        for j in range(k):
            s0, s1 = starts[j], starts[j + 1]
            new = order[bstarts[j]:bstarts[j + 1]]  # batch positions assigned to j
            if new.size == 0 or alpha[j] == 0:
                src_parts.append(np.arange(s0, s1))
                support_parts.append(state.support[s0:s1])
                coef_parts.append(state.coef[s0:s1])
                block_parts.append(state.block[s0:s1])
                new_starts[j + 1] = new_starts[j] + (s1 - s0)
                continue
            a_old = state.coef[s0:s1] * (1.0 - alpha[j])
            if w is None:
                a_new = np.full(new.size, alpha[j] / new.size)
            else:
                a_new = alpha[j] * w[new] / bcounts[j]
            # 5. Truncation: old point kept iff the points in strictly newer blocks
            # (the new block included) number < tau. Blocks are sorted ascending.
            blk = state.block[s0:s1]
            if tau is None:
                keep_from = 0
            else:
                newer = new.size + (s1 - s0) - np.searchsorted(blk, blk, side="right")
                kept = newer < tau
                keep_from = int(np.argmax(kept)) if kept.any() else s1 - s0
            if alpha[j] >= 1.0:
                keep_from = s1 - s0  # old coefficients are exactly zero
            a_old = a_old[keep_from:]
            coef_j = np.concatenate([a_old, a_new])
            if renormalize:
                coef_j /= coef_j.sum()
            # 7. Gram of the new window from cached blocks (on the device).
            n_old = a_old.size
            new_dev = order_dev[bstarts[j]:bstarts[j + 1]]
            G_old = state.grams[j][keep_from:, keep_from:]
            cross = nx.take(K_BS[:, s0 + keep_from:s1], new_dev)  # (b_j, n_old)
            X_new = nx.take(Xb, new_dev)  # (b_j, ...)
            G = nx.empty((n_old + new.size, n_old + new.size), K_BS.dtype)
            G[:n_old, :n_old] = G_old
            G[n_old:, :n_old] = cross
            G[:n_old, n_old:] = cross.T
            G[n_old:, n_old:] = (nx.kernel_tile(kernel, X_new, X_new) if K_BB is None
                                 else nx.take_block(K_BB, new_dev, new_dev))
            grams[j] = G
            changed.append(j)
            src_parts.append(np.concatenate([np.arange(s0 + keep_from, s1), m + new]))
            support_parts.append(state.support[s0 + keep_from:s1])
            support_parts.append(X_new)
            coef_parts.append(coef_j)
            block_parts.append(np.concatenate([blk[keep_from:], np.full(new.size, stamp)]))
            new_starts[j + 1] = new_starts[j] + coef_j.size

        coef = np.concatenate(coef_parts)
        # c_j = a_j^T G_j a_j (float64), recomputed from G_j: no drift.
        norms[changed] = nx.quad_forms(grams, coef, new_starts, changed)

    after = None
    if objective_after:
        # f_B(C_{i+1}) on the same batch, from K(B, [S; B]): no new kernel work.
        src_dev = nx.index(np.concatenate(src_parts))
        K_BY = nx.concatenate([K_BS, K_BB], axis=1)
        P = nx.to_numpy(nx.segment_inner(nx.take(K_BY, src_dev, axis=1), coef, new_starts))
        D2 = diag_B[:, None] - 2 * P + norms.astype(P.dtype)[None, :]
        mind2 = np.maximum(D2.min(axis=1), 0)
        after = float(mind2.mean(dtype=np.float64)) if w is None else float(mind2 @ w / btotal)

    state.support = nx.concatenate(support_parts)  # one copy of the kept rows
    state.coef = coef
    state.block = np.concatenate(block_parts).astype(np.int64, copy=False)
    state.starts = new_starts
    state.grams = grams
    state.norms = norms
    state.n_steps += 1
    return StepResult(labels=labels, objective=objective, objective_after=after, alpha=alpha)


def assign(X_items, state, kernel, cross_kernel=None, diag=None, chunk_rows=4096,
           sample_weight=None, return_distances=False):
    """Labels (and minimum distances) of many points against the centers, in chunks.

    Parameters
    ----------
    X_items : ndarray of shape (n, ...)
    state : WindowState
    kernel : Kernel-like
    cross_kernel : callable, optional
        ``cross_kernel(X_chunk, support) -> (len(chunk), m)``; default ``kernel``.
    diag : callable, optional
        ``diag(X_chunk) -> (len(chunk),)``; default ``kernel.diag``.
    chunk_rows : int
        Rows per chunk (from the memory budget).
    return_distances : bool
        Also return the full (n, k) distance matrix.

    Returns
    -------
    labels : ndarray of shape (n,)
    min_dist : ndarray of shape (n,)
        Squared feature-space distance to the assigned center (>= 0).
    distances : ndarray of shape (n, k), only when ``return_distances``.

    All three on the backend of ``X_items`` and ``state.support`` (which must agree):
    on a device the whole pass runs there and nothing comes back to the host.
    """
    nx = get_backend(X_items, state.support)
    n = X_items.shape[0]
    if cross_kernel is None:
        def cross_kernel(Xc, S):
            return nx.kernel_tile(kernel, Xc, S)
    if diag is None:
        def diag(Xc):
            return nx.kernel_diag(kernel, Xc)
    labels = nx.empty(n, np.intp if nx.is_host else np.int64)
    mind = None
    dist = None
    for start in range(0, n, chunk_rows):
        Xc = X_items[start:start + chunk_rows]
        if nx.is_host:
            Xc = np.asarray(Xc)
        Kc = nx.asarray(cross_kernel(Xc, state.support)) if nx.is_host else \
            cross_kernel(Xc, state.support)
        D = sq_distances(Kc, diag(Xc), state, nx)
        nx.clip_min_(D, 0)
        if mind is None:
            mind = nx.empty(n, D.dtype)
            if return_distances:
                dist = nx.empty((n, state.n_clusters), D.dtype)
        lab, mc = nx.argmin_min(D)
        labels[start:start + chunk_rows] = lab
        mind[start:start + chunk_rows] = mc
        if return_distances:
            dist[start:start + chunk_rows] = D
    if mind is None:
        mind = nx.empty(0, np.float64)
        dist = nx.empty((0, state.n_clusters), np.float64) if return_distances else None
    if return_distances:
        return labels, mind, dist
    return labels, mind
