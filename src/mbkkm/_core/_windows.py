"""Truncated centers stored as sliding windows of support points, all clusters at once.

Center j is an explicit sparse combination of support points
    C_j = sum_{s in W_j} a_s phi(s),
stored as its window W_j: the *blocks* of points that the last batches assigned to
it, oldest first. A block q (the b_j points one batch gave cluster j, or an
initial center) has one coefficient lambda_q and fixed weights u_s inside it
(sum_{s in q} u_s = 1: 1 / b_j each, or w_s / sum w with batch weights), so
a_s = lambda_q u_s. Every update of a window scales all its old coefficients by
the same factor (1 - alpha_j, then the renormalisation), so only lambda changes.

The norms c_j = <C_j, C_j> come from a per-cluster *block Gram* matrix

    H_j[p, q] = sum_{s in p, t in q} u_s u_t K(s, t),   c_j = lambda_j^T H_j lambda_j,

L_j x L_j for the L_j blocks of window j (a handful: tau / (b / k) + 1), stored
padded as one (k, L, L) array in float64. Its new entries need no kernel work
beyond the iteration's own block.

Layout: all support points live in one array ``support`` (m rows) in *time*
order of their blocks (the kept old blocks as they were, then the new blocks,
one per growing cluster), each block contiguous. One kernel block K(S, B)
serves every cluster, and the update is one gather of the kept rows plus one of
the batch rows: nothing is done cluster by cluster.

One iteration (:func:`minibatch_step`), with b batch points x and k clusters:

1. K_SB = K(S, X_B) (m, b), and in step 5 the same-cluster part of
   K_BB = K(X_B, X_B): the iteration's only kernel work, at most b (m + b) values
   (one GEMM of (b x d) by (d x (m + b)) for dot-product kernels), plus K(x, x).
2. Block sums Q[q, x] = sum_{s in q} u_s K(s, x) (nb, b): one sparse-times-dense
   product that reads K_SB once. Inner products with the centers
   P[j, x] = <C_j, phi(x)> = sum_{q in W_j} lambda_q Q[q, x] (k, b), a second,
   tiny sparse product. D[j, x] = K(x, x) - 2 P[j, x] + c_j; labels = argmin_j.
   Labels and minimum distances are host arrays from here on.
3. alpha_j from the learning rate (0 when b_j = 0: the center is kept).
4. Window planning (:func:`plan_windows`, host, vectorised over blocks):
   lambda_q <- (1 - alpha_j) lambda_q on W_j; the new block B_j joins with
   lambda = alpha_j; truncation keeps an old block iff the points in strictly
   newer blocks (the new one included) number < tau; optional renormalisation
   lambda <- lambda / sum_{W_j} lambda (a convex combination again).
5. Block Gram: kept entries are a gather of H; the new block r of cluster j
   gets H[p, r] = sum_{x in r} u_x Q[p, x] for its kept blocks p (Q already
   computed) and H[r, r] = sum_{x in r} u_x (sum_{y in r} u_y K(y, x)), from
   K(part, part) of p = max(2, b / 256) parts of the label-sorted batch (split
   at block boundaries: about b^2 / p values), or from the whole K_BB when early
   stopping needs f_B(C_{i+1}). c = lambda^T H lambda for every cluster in one
   batched product, recomputed from H each iteration (no drift).

The number of array-library calls does not depend on k. This host-planned step
is what the numpy backend runs (dense rows, scipy CSR rows, point indices of the
index kernels, Dask rows): the windows' bookkeeping is planned in numpy on the host
every iteration. On torch the device-resident iteration of :mod:`mbkkm._core._pool`
runs instead, chosen once where a run starts (:func:`mbkkm._core._loop.step_for`):
the fixed-shape formulation on CPU tensors takes about 1.7 times the time of this
step per iteration (MNIST, k = 10, b = 1024, tau = 200) and rounds differently, so
the host keeps this one.

The labelling pass (:func:`assign`) labels many points against the centers in
chunks; :func:`assign_parallel` runs it on every thread the policy allows.
NumPy's elementwise functions (the kernel's exp, the distances) run on one core,
and a BLAS call on a thin chunk scales poorly; labelling n points is
embarrassingly parallel, so the rows are split into as many contiguous parts as
the threading policy gives threads (:mod:`mbkkm.backends._threads`: a user's
``threadpool_limits(1)`` or ``OMP_NUM_THREADS=1`` gives one), each part labelled
by :func:`assign` in its own thread, in cache-sized tiles, with single-threaded
BLAS (NumPy and BLAS release the GIL).

References
----------
B. Jourdan and G. Schwartzman. "Mini-batch kernel k-means." (Algorithm 2.)
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from ..backends import get_backend
from ..backends._numpy import is_sparse, row_range
from ..backends._threads import parallel_parts
from ._rates import batch_rates
from ._state import (
    WORKSPACE_HEADROOM,
    StepResult,
    group_by,
    label_tiles,
    rank_in_groups,
    stable_order,
    tile_columns,
)

# ------------------------------------------------------------------ window planning


@dataclass
class WindowPlan:
    """What one iteration does to the windows (see :func:`plan_windows`).

    Attributes
    ----------
    keep : ndarray of shape (nb,), bool
        Old blocks that stay.
    lam_kept : ndarray of shape (keep.sum(),)
        Their new coefficients, in layout order.
    grows : ndarray of shape (k,), bool
        Clusters that receive a new block.
    lam_new : ndarray of shape (grows.sum(),)
        The coefficients of the new blocks, in cluster order.
    """

    keep: np.ndarray
    lam_kept: np.ndarray
    grows: np.ndarray
    lam_new: np.ndarray


def plan_windows(block_cluster, block_size, lam, new_size, alpha, tau, renormalize):
    """The windows after one iteration, for every cluster at once (host, O(nb + k)).

    Parameters
    ----------
    block_cluster : ndarray of shape (nb,)
        Cluster of each old block; within a cluster, blocks are oldest first.
    block_size : ndarray of shape (nb,)
        Points in each old block.
    lam : ndarray of shape (nb,)
        Old block coefficients.
    new_size : ndarray of shape (k,)
        b_j, batch points assigned to each cluster.
    alpha : ndarray of shape (k,)
        Learning rates; a cluster with alpha_j = 0 (or b_j = 0) is left unchanged.
    tau : int or None
        Window length (None: no truncation).
    renormalize : bool

    Returns
    -------
    WindowPlan

    Notes
    -----
    For a cluster j with alpha_j > 0: lambda_q <- (1 - alpha_j) lambda_q for its
    old blocks, a new block of b_j points with lambda = alpha_j, and an old block
    stays iff b_j + (points in its strictly newer old blocks) < tau; with
    alpha_j >= 1 the old coefficients are exactly zero and every old block goes.
    The newer-points count of a block is :func:`newer_points`.
    """
    k = alpha.shape[0]
    block_cluster = np.asarray(block_cluster, dtype=np.intp)
    grows = (alpha > 0) & (new_size > 0)
    g_b = grows[block_cluster]
    a_b = alpha[block_cluster]
    lam_scaled = np.where(g_b, lam * (1.0 - a_b), lam)
    keep = ~(g_b & (a_b >= 1.0))
    if tau is not None:
        newer = newer_points(block_cluster, block_size, k)
        keep &= ~g_b | (newer + new_size[block_cluster] < tau)
    lam_kept = lam_scaled[keep]
    lam_new = alpha[grows].astype(np.float64)
    if renormalize:
        sums = np.bincount(block_cluster[keep], weights=lam_kept, minlength=k).astype(float)
        sums[grows] += lam_new
        scale = np.where(grows, 1.0 / np.where(grows, sums, 1.0), 1.0)
        lam_kept = lam_kept * scale[block_cluster[keep]]
        lam_new = lam_new * scale[grows]
    return WindowPlan(keep=keep, lam_kept=lam_kept, grows=grows, lam_new=lam_new)


def newer_points(block_cluster, block_size, k):
    """Points in the strictly newer blocks of each block's window, shape (nb,) int64.

    Within a cluster, blocks are oldest first: the count is the suffix sum of the
    sizes in the block's cluster, for all blocks with one cumulative sum over the
    blocks grouped by cluster.
    """
    order, ptr = group_by(block_cluster, k)
    csum = np.cumsum(np.asarray(block_size, dtype=np.int64)[order])  # inclusive
    newer = np.empty(block_cluster.size, dtype=np.int64)
    newer[order] = csum[ptr[1:][block_cluster[order]] - 1] - csum
    return newer


# ---------------------------------------------------------------------- the step


def new_gram(state, plan, Q, self_vals, new_pos, pt_block, grow_ids, u_new):
    """The block Gram H' (k, L, L) after one step and the norms c_j = lambda_j^T H'_j
    lambda_j, for all clusters at once (host index arithmetic, then three scatters).

    Parameters
    ----------
    state : WindowState
        The windows before the step (their blocks and Gram H (k, L_old, L_old)).
    plan : WindowPlan
        What the step does to them (:func:`plan_windows`).
    Q : ndarray of shape (nb, b)
        Block sums Q[q, x] = sum_{s in q} u_s K(s, x) of the old blocks.
    self_vals : ndarray of shape (new_pos.size,)
        v[x] = sum_{y in r(x)} u_y K(y, x) for every new point x (r(x): its new block).
    new_pos : ndarray of shape (p,)
        Batch positions of the new points, grouped by new block.
    pt_block : ndarray of shape (p,)
        The new block of each new point (its rank among the growing clusters).
    grow_ids : ndarray of shape (n_grow,)
        Clusters that receive a new block.
    u_new : ndarray of shape (p,)
        The weight of each new point in its block.

    Returns
    -------
    gram : ndarray of shape (k, L, L)
    norms : ndarray of shape (k,)

    Notes
    -----
    The new layout is the kept old blocks as they were, then one block per growing
    cluster. (a) Kept entries: H'[j, i, i'] = H[j, i + d_j, i' + d_j] for the kept
    slots i, i' < n_kept[j] (d_j: dropped blocks of j). (b) New block r of cluster j
    and a partner block p of its window (its kept blocks, and r itself):
    H'[j, p, r] = sum_{x in r} u_x Q'[p, x], with Q' = Q for a kept block and v for
    r: one (new point, partner) pair per term, O(b L) in all (repeated destinations
    add up: one bincount each); then the mirror H'[j, r, p]. Every index here is a
    vectorised expression over all clusters.
    """
    k, b = state.n_clusters, Q.shape[1]
    keep, grows = plan.keep, plan.grows
    block_cluster = np.asarray(state.block_cluster, dtype=np.intp)
    kept_cluster = block_cluster[keep]
    dropped = np.bincount(block_cluster[~keep], minlength=k)
    n_kept = np.bincount(kept_cluster, minlength=k)  # kept blocks per cluster
    L = max(1, int((n_kept + grows).max()))
    # the kept blocks by cluster: the t-th is in slot t - kptr[j] of its window j
    korder, kptr = group_by(kept_cluster, k)

    # (a) Kept entries: H'[j, i, i'] = H[j, i + d_j, i' + d_j].
    cl = np.repeat(np.arange(k), n_kept**2)
    i, i2 = np.divmod(rank_in_groups(n_kept**2), n_kept[cl])
    # (b) (new point, kept partner) pairs: H'[j, p, r] = sum_{x in r} u_x Q[p, x].
    pt_cluster = grow_ids[pt_block]
    n_partners = n_kept[pt_cluster]  # kept partners of each new point
    pair_pt = np.repeat(np.arange(new_pos.size), n_partners)
    pair_i = rank_in_groups(n_partners)  # slot of the partner in its window
    pair_c = pt_cluster[pair_pt]
    pair_q = np.flatnonzero(keep)[korder[kptr[pair_c] + pair_i]]  # its old block index
    pair_flat = pair_q * b + new_pos[pair_pt]  # into Q (nb, b)
    pair_dst = (pair_c * L + pair_i) * L + n_kept[pair_c]
    self_dst = (pt_cluster * L + n_kept[pt_cluster]) * L + n_kept[pt_cluster]
    lam_pad = np.zeros((k, L))  # Lambda' padded
    lam_pad[kept_cluster[korder], rank_in_groups(n_kept)] = plan.lam_kept[korder]
    lam_pad[grow_ids, n_kept[grows]] = plan.lam_new

    gram = np.zeros((k, L, L))
    gram[cl, i, i2] = state.gram[cl, i + dropped[cl], i2 + dropped[cl]]
    flat = gram.reshape(-1)  # a view: the sums below add into gram
    pair_vals = Q.reshape(-1)[pair_flat].astype(np.float64, copy=False) * u_new[pair_pt]
    flat += np.bincount(pair_dst, weights=pair_vals, minlength=flat.size)
    self_vals = self_vals.astype(np.float64, copy=False) * u_new
    flat += np.bincount(self_dst, weights=self_vals, minlength=flat.size)
    # the mirror H'[j, r, p] = H'[j, p, r]: the new block's column, copied to its row
    gram[grow_ids, n_kept[grows]] = gram[grow_ids, :, n_kept[grows]]
    return gram, np.einsum("cl,clm,cm->c", lam_pad, gram, lam_pad)


def _tile(state, name, kernel, A, B, nx):
    """K(A, B), into a reused buffer of the state when the kernel writes in place.

    The buffer (no fresh pages, hence no page faults, per step) is one of the kernel
    buffers of :func:`mbkkm._core._memory.host_step_buffers`.
    """
    dtype = _out_dtype(kernel, B, nx)
    if dtype is None:
        return kernel.tile(A, B)
    shape = (A.shape[0], B.shape[0])
    size = shape[0] * shape[1]
    buf = state.workspace.get(name)
    if buf is None or buf.shape[0] < size or buf.dtype != dtype:
        del buf
        state.workspace.pop(name, None)  # freed before its successor is allocated
        buf = nx.empty(int(size * WORKSPACE_HEADROOM) + 1, dtype)
        state.workspace[name] = buf
    return kernel.tile(A, B, out=buf[:size].reshape(shape))


def _out_dtype(kernel, X, nx):
    """dtype of a reusable ``out`` buffer for ``kernel.tile(., X)`` (None: a callable,
    which makes its own result, or items that are not floats)."""
    return None if kernel.is_callable else nx.float_dtype(X)


#: Rows per part of the label-sorted batch for the new blocks' own kernel values
#: (:func:`_self_sums_in_parts`): b / 256 parts, at least 2.
SELF_PART_ROWS = 256


def _self_sums_in_parts(state, kernel, nx, Xb, new_pos, new_ptr, u_new, cols):
    """v[x] = sum_{y in r(x)} u_y K(y, x) for every new point x, in new-point order.

    H'[r, r] = sum_{x in r} u_x v[x] needs only the same-block values of K(B, B).
    The new points (grouped by block) are split into p = max(2, b / SELF_PART_ROWS)
    parts at the block boundaries nearest to multiples of b / p, and each part gets
    its own K(part, part): about b^2 / p kernel values instead of b^2, in p GEMMs
    whose number depends on b only, not on k.
    """
    n_new = int(new_ptr[-1])
    p = max(2, round(n_new / SELF_PART_ROWS))
    near = [int(new_ptr[np.argmin(np.abs(new_ptr - n_new * j / p))]) for j in range(1, p)]
    cuts = [0, *near, n_new]  # block boundaries, non-decreasing
    parts = []
    for lo, hi in pairwise(cuts):
        if hi == lo:
            continue
        b0, b1 = np.searchsorted(new_ptr, [lo, hi])  # the blocks of this part
        ptr = new_ptr[b0 : b1 + 1] - lo
        local_block = np.repeat(np.arange(b1 - b0), np.diff(ptr))
        Xh = nx.take(Xb, new_pos[lo:hi])
        # (blocks of the part, hi - lo)
        Qh = _chunked_products(state, kernel, nx, Xh, Xh, (ptr, None, u_new[lo:hi]), cols, "K_BB")
        flat = local_block * (hi - lo) + np.arange(hi - lo)
        parts.append(Qh.reshape(-1)[flat])
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _chunked_products(state, kernel, nx, A, Xb, M, cols, name):
    """M K(A, Xb) for the CSR matrix M = (indptr, indices, data), in column chunks of Xb."""
    b = Xb.shape[0]
    if cols >= b:  # one chunk: no copy
        return nx.csr_matmul(*M, _tile(state, name, kernel, A, Xb, nx))
    out = None
    for c0 in range(0, b, cols):
        part = nx.csr_matmul(*M, _tile(state, name, kernel, A, Xb[c0 : c0 + cols], nx))
        if out is None:
            out = nx.empty((part.shape[0], b), part.dtype)
        out[:, c0 : c0 + cols] = part
    return out


def support_layout(state, labels, alpha, bcounts, cfg, batch_weight):
    """The windows' plan (:func:`plan_windows`) after a step and where the support goes:
    the kept old blocks (as they were), then one block per growing cluster (cluster
    order), each contiguous.

    Returns ``(plan, new_pos, grow_ids, new_sizes, new_ptr, u_new, kept_sizes,
    rows_kept)``: the :class:`WindowPlan`, the batch positions of the new blocks'
    points (by cluster), the clusters that get a new block, the new blocks' sizes and
    starts in ``new_pos`` (n_grow + 1,), the weight of each new point in its block,
    the kept old blocks' sizes and their support rows.
    """
    new_size = np.bincount(labels, minlength=state.n_clusters)
    sizes = state.block_size
    plan = plan_windows(
        state.block_cluster, sizes, state.lam, new_size, alpha, cfg.tau, cfg.renormalize
    )
    keep, grows = plan.keep, plan.grows
    order = stable_order(labels, state.n_clusters)
    new_pos = order[grows[labels[order]]]  # batch positions of the new blocks, by cluster
    grow_ids = np.flatnonzero(grows)
    new_sizes = new_size[grows]
    new_ptr = np.zeros(grow_ids.size + 1, dtype=np.intp)
    np.cumsum(new_sizes, out=new_ptr[1:])
    if batch_weight is None:
        u_new = 1.0 / new_size[labels[new_pos]]  # u_x = 1 / b_j
    else:
        u_new = np.asarray(batch_weight, dtype=np.float64)[new_pos] / bcounts[labels[new_pos]]
    kept_sizes = sizes[keep]
    rows_kept = np.flatnonzero(np.repeat(keep, sizes))
    return plan, new_pos, grow_ids, new_sizes, new_ptr, u_new, kept_sizes, rows_kept


def advance_blocks(state, plan, kept_sizes, new_sizes, grow_ids):
    """The block arrays after a step: the kept old blocks, then the new ones."""
    state.block_start = np.zeros(kept_sizes.size + new_sizes.size + 1, dtype=np.intp)
    np.cumsum(np.concatenate([kept_sizes, new_sizes]), out=state.block_start[1:])
    state.block_cluster = np.concatenate(
        [np.asarray(state.block_cluster, dtype=np.intp)[plan.keep], grow_ids]
    )
    state.block_stamp = np.concatenate(
        [state.block_stamp[plan.keep], np.full(grow_ids.size, state.n_steps, dtype=np.int64)]
    )
    state.lam = np.concatenate([plan.lam_kept, plan.lam_new])
    state.n_steps += 1


def minibatch_step(state, Xb, cfg, batch_weight=None):
    """One truncated mini-batch iteration on the host batch items ``Xb`` (in place on state).

    Parameters
    ----------
    state : WindowState
    Xb : ndarray of shape (b, ...)
        Batch items (rows or indices), on the backend of the state.
    cfg : StepConfig
        The kernel, the rate, tau, renormalisation, f_B(C_{i+1}) and the tile budget.
    batch_weight : ndarray of shape (b,) or None
        Weights of the batch points in the update (None: unit weights).

    Returns
    -------
    StepResult
    """
    nx = get_backend(state.support, Xb)
    kernel = cfg.kernel
    k, b = state.n_clusters, Xb.shape[0]

    # 1. The iteration's kernel work, K(S, B) (m, b), reduced at once to the block
    # sums Q[q, x] = sum_{s in q} u_s K(s, x) (nb, b). (K(B, B) (b, b) comes in step 5,
    # reduced the same way.)
    dtype = _out_dtype(kernel, Xb, nx)
    itemsize = 8 if dtype is None else dtype.itemsize
    cols = tile_columns(state.support.shape[0], b, itemsize, cfg.max_tile_bytes)
    diag = kernel.diag(Xb)
    Q = _chunked_products(
        state, kernel, nx, state.support, Xb, (state.block_start, None, state.weight), cols, "K_SB"
    )

    # 2. P[j, x] = sum_{q in W_j} lambda_q Q[q, x] (k, b), one sparse product with the
    # blocks grouped by cluster; distances; labels.
    order, ptr = group_by(state.block_cluster, k)
    P = nx.csr_matmul(ptr, order, state.lam[order], Q)
    labels, mind = labels_and_minima(nx.distances_T(P, diag, state.norms))

    # 3. Batch objective, counts and learning rates.
    objective, bcounts, btotal, alpha = batch_rates(
        labels, mind, k, cfg.rate, state.counts, batch_weight
    )

    # 4. Window planning (vectorised over blocks) and the new layout.
    plan, new_pos, grow_ids, new_sizes, new_ptr, u_new, kept_sizes, rows_kept = support_layout(
        state, labels, alpha, bcounts, cfg, batch_weight
    )
    pt_block = np.repeat(np.arange(grow_ids.size), new_sizes)  # new block of each new point

    # 5. The new blocks' own kernel sums, v[x] = sum_{y in r(x)} u_y K(y, x) for every
    # new point x: only the same-block values of K(B, B) (about 1 / p of it), or with
    # early stopping the whole QB[r, x] = sum_{y in r} u_y K(y, x) (n_grow, b) for every
    # batch point x (the centres after the update, for f_B(C_{i+1})), from K(B, B)
    # (symmetric). Then the new block Gram and the norms.
    if cfg.objective_after:
        QB = _chunked_products(state, kernel, nx, Xb, Xb, (new_ptr, new_pos, u_new), cols, "K_BB")
        self_vals = QB.reshape(-1)[pt_block * b + new_pos]
    else:
        self_vals = _self_sums_in_parts(state, kernel, nx, Xb, new_pos, new_ptr, u_new, cols)
    gram, norms = new_gram(state, plan, Q, self_vals, new_pos, pt_block, grow_ids, u_new)

    after = None
    if cfg.objective_after:
        # f_B(C_{i+1}) on the same batch from Q and QB: no new kernel work.
        lam_old = np.zeros(state.lam.size)
        lam_old[plan.keep] = plan.lam_kept
        P2 = nx.csr_matmul(ptr, order, lam_old[order], Q)
        P2[grow_ids] += QB * plan.lam_new.astype(QB.dtype)[:, None]
        _, mind2 = labels_and_minima(nx.distances_T(P2, diag, norms))
        after = batch_mean(mind2, batch_weight, btotal)

    # The kept rows, then the batch rows of the new blocks (dense: one buffer and two
    # gathers; CSR rows stay CSR).
    state.support = nx.new_support(state.support, rows_kept, Xb, new_pos)
    state.weight = np.concatenate([state.weight[rows_kept], u_new])
    advance_blocks(state, plan, kept_sizes, new_sizes, grow_ids)
    state.gram, state.norms = gram, norms
    return StepResult(labels=labels, objective=objective, objective_after=after, alpha=alpha)


def batch_mean(mind, batch_weight, total):
    """The (weighted) mean of a batch's minimum distances, f_B, as a float."""
    mind = np.asarray(mind, dtype=np.float64)
    if batch_weight is None:
        return float(mind.mean())
    return float(mind @ np.asarray(batch_weight, dtype=np.float64) / total)


def labels_and_minima(D):
    """Column argmin and minimum of the distances D (k, n): labels, minima >= 0."""
    labels = np.argmin(D, axis=0)
    return labels, np.maximum(D[labels, np.arange(D.shape[1])], 0)


# ------------------------------------------------------------------ labelling pass


def assign(
    X_items,
    state,
    kernel,
    *,
    chunk_rows=4096,
    cross_kernel=None,
    diag=None,
    return_distances=False,
    progress=None,
):
    """Labels (and minimum distances) of many points against the centers, in chunks.

    Every kernel estimator and backend labels through this pass: for each chunk of
    rows, one kernel tile T = K(S, X_chunk) (m, r), the inner products
    P = A^T T (k, r) with A the (m, k) coefficient matrix as one sparse product,
    D[j, x] = K(x, x) - 2 P[j, x] + c_j, and the argmin.

    Parameters
    ----------
    X_items : ndarray or tensor of shape (n, ...)
    state : WindowState
    kernel : Kernel or IndexKernel
        As in :func:`minibatch_step` (NumPy named kernels: ``kernel(S, X, out=,
        **kernel.prepare(S))`` with the support side prepared once).
    chunk_rows : int
        Rows per chunk (from the memory budget).
    cross_kernel : callable, optional
        ``cross_kernel(support, X_chunk) -> (m, len(chunk))``; default the kernel.
    diag : callable, optional
        ``diag(start, X_chunk) -> (len(chunk),)``; default ``kernel.diag``.
    return_distances : bool
        Also return the full (n, k) distance matrix.
    progress : callable, optional
        ``progress(rows)`` after every chunk (:meth:`mbkkm._progress.Progress.update`;
        on a device, the rows whose work has been queued).

    Returns
    -------
    labels : ndarray of shape (n,)
    min_dist : ndarray of shape (n,)
        Squared feature-space distance to the assigned center (>= 0).
    distances : ndarray of shape (n, k), only when ``return_distances``.

    On the backend of ``state.support``. Items on a device: the whole pass runs
    there and nothing comes back to the host. Dense host rows with a support on a
    device: the rows go there chunk by chunk and the results come back as numpy
    arrays (:class:`mbkkm.backends._torch.HostRowStream`: on CUDA through pinned
    buffers, the copies overlapped with the work), so that the device holds two
    chunks whatever n. Host items and support may be scipy CSR rows (in any mix
    with dense rows): the chunks are then views of X's rows
    (:func:`mbkkm.backends._numpy.row_range`), never copies or dense arrays; only
    the tiles are dense.
    """
    S = state.support
    streamed = isinstance(X_items, np.ndarray) and not get_backend(S).is_host
    nx = get_backend(S) if streamed else get_backend(X_items, S)
    n, k = X_items.shape[0], state.n_clusters
    stream = None
    if streamed:  # S is a tensor: torch is imported
        from ..backends._torch import HostRowStream

        stream = HostRowStream(nx.device, X_items, chunk_rows, S.dtype)
    # The (k, m) coefficient matrix, built and uploaded once per pass.
    order, ptr = group_by(state.labels, k)
    ptr_d, order_d = nx.upload_indices(ptr, order)
    (coef_d,) = nx.upload_floats(state.coef[order])
    # NumPy with a named kernel: each tile goes into one reused buffer, with what the
    # kernel can prepare for the support side computed once (rbf's augmented rows).
    fused = (
        nx.is_host
        and cross_kernel is None
        and hasattr(kernel, "prepare")
        and not kernel.is_callable
        and S.dtype.kind == "f"
    )
    cache = kernel.prepare(S) if fused else {}
    # A device: every tile into one buffer too, so that a chunk's tile never coexists
    # with the last one's (the allocator would not reuse it before the old one is
    # released).
    if fused:
        buf_dtype = S.dtype
    elif not nx.is_host and cross_kernel is None and not is_sparse(X_items):
        buf_dtype = _out_dtype(kernel, S, nx)
    else:
        buf_dtype = None
    labels = np.empty(0, np.int64) if streamed else nx.empty(n, np.int64)
    mind = dist = buf = None
    for start in range(0, n, chunk_rows):
        if streamed:
            Xc = stream.rows(start, start + chunk_rows)
        else:
            Xc = row_range(X_items, start, start + chunk_rows)  # CSR rows: a view
        if nx.is_host and not is_sparse(Xc):
            Xc = np.asarray(Xc)
        r = Xc.shape[0]
        if cross_kernel is not None:
            T = cross_kernel(S, Xc)
        elif buf_dtype is not None:
            if buf is None:
                buf = nx.empty(S.shape[0] * min(chunk_rows, n), buf_dtype)
            out = buf[: S.shape[0] * r].reshape(S.shape[0], r)
            T = kernel(S, Xc, out=out, **cache) if fused else kernel.tile(S, Xc, out=out)
        else:
            T = kernel.tile(S, Xc)
        dvals = kernel.diag(Xc) if diag is None else diag(start, Xc)
        P = nx.csr_matmul(ptr_d, order_d, coef_d, T)  # (k, r)
        D = nx.distances_T(P, dvals, state.norms)  # (k, r)
        # the argmin of the distances as computed (negative ones included, as the fit
        # labels its points); only the distances reported are clipped at 0
        lab, mc = nx.argmin_min(D, axis=0)
        mc = nx.clip_min_(mc, 0)
        if return_distances:
            nx.clip_min_(D, 0)
        if streamed:  # into the host arrays
            stream.results(start, lab, mc, *((D.T,) if return_distances else ()))
        else:
            if mind is None:
                mind = nx.empty(n, D.dtype)
                if return_distances:
                    dist = nx.empty((n, k), D.dtype)
            labels[start : start + r] = lab
            mind[start : start + r] = mc
            if return_distances:
                dist[start : start + r] = D.T
        if progress is not None:
            progress(r)
    if streamed and n:
        labels, mind, *rest = stream.finish()
        dist = rest[0] if return_distances else None
    if mind is None:
        mind = nx.empty(0, np.float64)
        dist = nx.empty((0, k), np.float64) if return_distances else None
    return (labels, mind, dist) if return_distances else (labels, mind)


# ------------------------------------------------------------------ on every thread


def assign_parallel(
    X, state, kernel, *, chunk_rows, n_threads=None, return_distances=False, progress=None
):
    """:func:`assign` over row parts in threads; same results as the serial pass.

    Parameters
    ----------
    X : ndarray of shape (n, ...)
    state : WindowState
    kernel : Kernel-like
    chunk_rows : int
        Rows per chunk for the whole pass (each thread gets ``chunk_rows // n_threads``,
        so the memory budget is shared, not multiplied). Named kernels on float data
        use cache-sized tiles (:func:`~mbkkm._core._state.label_tiles`), far smaller
        than any budget.
    n_threads : int, optional
        Default: the threading policy's count
        (:func:`~mbkkm.backends._threads.effective_n_threads`).
    return_distances : bool
    progress : Progress, optional
        Counts the rows labelled (:class:`mbkkm._progress.Progress`, whose ``update``
        the threads may call at once), tile by tile, over all the parts.
    """
    count = None if progress is None else progress.update
    n, rows = X.shape[0], chunk_rows
    S = state.support
    host = isinstance(S, np.ndarray) or is_sparse(S)
    if host:
        tiled = not kernel.is_callable and S.dtype.kind == "f"
        sparse = is_sparse(X) or is_sparse(S)
        rows, n_threads = label_tiles(
            n, S.shape[0], S.dtype.itemsize, chunk_rows, n_threads, tiled=tiled, sparse=sparse
        )

    def label(r0, r1):
        part = X if (r0, r1) == (0, n) else row_range(X, r0, r1)  # a view, also for CSR
        return assign(
            part, state, kernel, chunk_rows=rows, return_distances=return_distances, progress=count
        )

    if not host:  # another backend (torch): its own parallelism
        return label(0, n)
    results = parallel_parts(label, n, n_threads)  # one BLAS thread in every part
    if len(results) == 1:
        return results[0]
    return tuple(np.concatenate([r[i] for r in results]) for i in range(len(results[0])))
