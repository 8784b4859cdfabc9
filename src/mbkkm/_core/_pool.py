"""The windows on a device in fixed shapes: one iteration, a fixed sequence of torch calls.

The host-planned step (:func:`mbkkm._core._windows.minibatch_step`) compacts the
support and plans the windows in numpy every iteration, so every tensor changes
shape and the host waits for each batch's labels. Here the same iteration runs on
device-resident state whose shapes never change, without reading anything back:
a GPU runs many iterations without the host, and one iteration is capturable as
one CUDA graph or one ``torch.compile(fullgraph=True)`` graph.

Layout (k clusters, L slots per window plus one spare column, M pool rows, batch b):

=========  ======================  ====================================================
``rows``   (M + 1 + b, d)          support rows [0, M); row M: the spare row (new points
                                   land there only when the pool is full); the batch
                                   [M + 1, M + 1 + b)
``block``  (M + 1 + b,) int64      slot j (L + 1) + p of each pool row; ``FREE`` = L
                                   (the spare column of cluster 0) for a free row
``coef``   (M + 1 + b, k) float64  u_s in column j = cluster of s, 0 elsewhere (u_s:
                                   the weight of s inside its block)
``lam``    (k, L + 1) float64      lambda of each slot (0: free)
``newer``  (k, L + 1) float64      points in strictly newer blocks of the window
                                   (inf: free slot)
``stamp``  (k, L + 1) int64        iteration at which the slot's block joined
``gram``   (k, L + 1, L + 1) f64   block Gram H_j (meaningful between occupied slots)
``norms``  (k, 1) float64          c_j = lambda_j^T H_j lambda_j
``counts`` (k, 1) float64          running counts N_j
``it``     (1,) int64              iterations done (the stamp of the next blocks)
``active`` (1,) bool               False once early stopping's rule is met
=========  ======================  ====================================================

A dropped block's slot and rows are marked free (lambda 0, ``newer`` inf, ``block``
FREE) rather than compacted away, so K(rows, batch) is always (M + 1 + b, b). The
capacities come from the parameters
(:func:`mbkkm._core._memory.pool_capacities`); when an iteration needs more (more
free rows than M holds for its new points, or a free slot in a full growing
window) it writes what does not fit to the spare row / spare column, which the
host sees at its next read-back (:func:`overflow_marks`) and answers by growing the
capacities and replaying the iterations since its last copy of the pool
(:mod:`mbkkm._core._loop`): the result is the same as with enough room.

One iteration (:func:`advance`), with the notation of :mod:`mbkkm._core._windows`:

1. The batch is written to the tail of ``rows``; one kernel block
   K = K(rows, X_B) (M + 1 + b, b): K(S, B) and K(B, B) in one call.
2. A[s, j] = lambda_{p(s)} u_s [j = cluster of s] (a gather and a product with
   ``coef``); D = c - 2 A^T K + K(x, x) (k, b): one GEMM; labels = argmin_j D.
3. Counts b_j from the one-hot labels, alpha_j from the rate (the same pure
   functions as the host, :data:`mbkkm._core.LEARNING_RATES`).
4. Windows, masked (k, L + 1) arithmetic: an old block stays iff
   newer + b_j < tau (and alpha_j < 1); lambda <- (1 - alpha_j) lambda; the new
   block takes the first free slot (an argmax over ``newer``, inf where free) with
   lambda = alpha_j; renormalisation divides by the window's sum.
5. Block Gram: with V[x, j] = u_x [x in the new block of j] (b, k),
   R = K V (M + 1 + b, k) gives H'[j, p, r] = sum_{s in p} u_s R[s, j] for every
   slot p at once (one product with ``coef``, then the sums by slot,
   :func:`slot_sums`: no atomic additions, the same bits on every run) and
   H'[j, r, r] = (V^T R_B)[j, j]; the new row and column are placed with two
   ``where``. c' = lambda'^T H' lambda' (two batched products), recomputed from H'
   every iteration (no drift).
6. Rows: dropped blocks' rows become free; the new points go to the first free
   rows (ranks by cumulative sums, matched with ``searchsorted``) with one
   ``index_copy_`` each for ``rows``, ``block`` and ``coef``.

:func:`advance` returns the batch objective as a device sum (and with early
stopping f_B(C_{i+1}), and the stopping flag in the pool); the fit loop writes
them to a device log that the host reads at a cadence. Nothing in :func:`advance`
reads a value back, warns, imports or branches on a tensor's value, so the
sequence of calls is the same every iteration.

References
----------
B. Jourdan and G. Schwartzman. "Mini-batch kernel k-means." (Algorithm 2.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from functools import partial
from typing import NamedTuple

import numpy as np
import torch

from ..kernels import KERNELS
from ._memory import DENSE_SLOT_SUMS_MAX, pool_buffers, pool_step_buffers
from ._memory import pool_capacities as capacities
from ._state import StepResult, WindowState, block_slots, rank_in_groups, tile_columns
from ._windows import newer_points

_F64 = torch.float64


@dataclass(frozen=True)
class Layout:
    """The fixed shapes of a pool: k clusters, L slots per window, M pool rows, batch b.

    ``cols``: batch columns per kernel chunk (b: K(rows, X_B) in one piece; fewer when
    it exceeds the memory budget, see :func:`tile_columns_for`).
    """

    k: int
    L: int
    M: int
    b: int
    cols: int = 0

    @property
    def chunks(self):
        """The batch column ranges of the kernel chunks, [(c0, c1), ...]."""
        cols = self.cols if 0 < self.cols < self.b else self.b
        return [(c0, min(self.b, c0 + cols)) for c0 in range(0, self.b, cols)]

    @property
    def free(self):
        """The ``block`` value of a free row: the spare column of cluster 0."""
        return self.L

    @property
    def n_rows(self):
        return self.M + 1 + self.b


class Pool(NamedTuple):
    """Device-resident windows in fixed shapes (see the module docstring)."""

    rows: torch.Tensor
    block: torch.Tensor
    coef: torch.Tensor
    lam: torch.Tensor
    newer: torch.Tensor
    stamp: torch.Tensor
    gram: torch.Tensor
    norms: torch.Tensor
    counts: torch.Tensor
    it: torch.Tensor
    active: torch.Tensor  # (1,) bool: False once early stopping's rule is met

    def clone(self):
        return Pool(*(t.clone() for t in self))

    def copy_(self, other):
        """Overwrite every tensor with ``other``'s (same shapes) where it is another, in place."""
        for mine, theirs in zip(self, other):
            if mine is not theirs:
                mine.copy_(theirs)
        return self


def _kernel_functions(kernel):
    """(tile, tail, diag, diag_is_one) of a kernel on torch, resolved once, outside the step.

    ``tile(X, Y) -> (n_x, n_y)``; ``tail(X, Y)`` the same when Y is X's last rows (rbf
    shares X's row norms with Y, :func:`mbkkm.kernels._torch_tiles.rbf_tail`);
    ``diag(X) -> (n,)``; ``diag_is_one`` for kernels with K(x, x) = 1 for every x (rbf,
    laplacian), whose diagonal is not computed.
    A callable is called without the per-tile finiteness check (a device sync): a
    non-finite value shows in the batch objectives the host reads back. By the names
    of the :class:`Constants` fields.
    """
    from ..kernels import _torch_tiles

    if kernel.is_callable:
        user = (kernel._user_func, kernel.params)
        tile = partial(_torch_tiles.call_user, *user, check_finite=False)
        diag = partial(_torch_tiles.call_user_diag, *user, check_finite=False)
        return dict(tile=tile, tile_tail=tile, diag=diag, diag_is_one=False)
    impl = KERNELS[kernel.name].implementation("torch")
    params = dict(kernel.params)
    tile = partial(impl.tile, **params)
    tail = partial(_torch_tiles.rbf_tail, **params) if impl.tile is _torch_tiles.rbf else tile
    if kernel.offset is not None:  # rbf on rows far from the origin: shifted rows
        tile = partial(_shifted_tile, kernel.shifted, tile)
        tail = partial(_shifted_tail, kernel.shifted, tail)
    return dict(
        tile=tile,
        tile_tail=tail,
        diag=partial(impl.diag, **params),
        diag_is_one=impl.diag is _torch_tiles.diag_ones,
    )


def _shifted_tile(shift, tile, X, Y, **kwargs):
    """``tile`` of the shifted rows (:meth:`mbkkm.kernels.Kernel.shifted`)."""
    return tile(shift(X), shift(Y), **kwargs)


def _shifted_tail(shift, tail, X, Y, **kwargs):
    """``tail`` of the shifted rows, Y still X's last rows."""
    X = shift(X)
    return tail(X, X[X.shape[0] - Y.shape[0] :], **kwargs)


class Constants(NamedTuple):
    """What an iteration uses besides its config, made once per layout: index and value
    tensors, one work buffer (``coef_out``, overwritten by every iteration) and the
    kernel's torch functions (:func:`_kernel_functions`)."""

    cluster_col: torch.Tensor  # (k, 1): j
    slot_ids: torch.Tensor  # (1, L + 1): p
    slot_base: torch.Tensor  # (k, 1): j (L + 1)
    tail: torch.Tensor  # (b,): M + 1 + x, the batch rows
    tau_row: torch.Tensor  # (1, L + 1): tau, and inf for the spare column
    zero: torch.Tensor  # 0-d float64
    inf: torch.Tensor  # 0-d float64
    free: torch.Tensor  # 0-d int64: the block of a free row
    tol: torch.Tensor  # 0-d float64
    slot_bounds: torch.Tensor  # (k (L + 1) + 1,) int64: 0, 1, ..., k (L + 1)
    ranks: torch.Tensor  # (b,) int64: 1, ..., b
    coef_out: torch.Tensor  # (k, M) in the rows' dtype: A of the distances, written each call
    tile: object  # tile(X, Y) -> K(X, Y)
    tile_tail: object  # the same when Y is X's last rows
    diag: object  # diag(X) -> K(x, x)
    diag_is_one: bool  # K(x, x) = 1 for every x: the diagonal is not computed


def make_constants(layout, cfg, rows):
    """The :class:`Constants` of ``layout`` and ``cfg`` (a :class:`StepConfig`) on the
    device (and in the dtype) of ``rows``."""
    k, L1, M, b = layout.k, layout.L + 1, layout.M, layout.b
    device = rows.device
    tau = math.inf if cfg.tau is None else float(cfg.tau)
    tau_row = torch.full((1, L1), tau, dtype=_F64, device=device)
    tau_row[0, -1] = math.inf  # a block in the spare column (an overflow) is never dropped
    coef_out, _ = pool_step_buffers(k, layout.L, M, b, layout.cols)["coef_out"]
    return Constants(
        cluster_col=torch.arange(k, device=device)[:, None],
        slot_ids=torch.arange(L1, device=device)[None, :],
        slot_base=torch.arange(k, device=device)[:, None] * L1,
        tail=torch.arange(M + 1, M + 1 + b, device=device),
        tau_row=tau_row,
        zero=torch.zeros((), dtype=_F64, device=device),
        inf=torch.full((), math.inf, dtype=_F64, device=device),
        free=torch.full((), layout.free, dtype=torch.int64, device=device),
        tol=torch.full((), 0.0 if cfg.tol is None else cfg.tol, dtype=_F64, device=device),
        slot_bounds=torch.arange(k * L1 + 1, device=device),
        ranks=torch.arange(1, b + 1, device=device),
        coef_out=torch.empty(coef_out, dtype=rows.dtype, device=device),
        **_kernel_functions(cfg.kernel),
    )


class StepOut(NamedTuple):
    """What an iteration returns besides the new pool (device tensors)."""

    labels: torch.Tensor  # (b,) int64: the assignment before the update
    objective: torch.Tensor  # (1,) float64: sum_x w_x min_j D[j, x] (f_B(C_i) times the total)
    after: torch.Tensor | None  # (1,) float64: the same after the update (early stopping)
    total: torch.Tensor | float  # b, or the sum of the batch weights
    alpha: torch.Tensor  # (k, 1) float64: the learning rates


def _plan_slots(pool, cfg, c, ns, alpha, grows):
    """Step 4 of :func:`advance`: the windows' slots, (k, L + 1), as tensor arithmetic.

    An old block stays iff newer + n_j < tau and alpha_j < 1, ``ns`` = n_j counted only
    for a cluster that grows (alpha_j > 0: rows of weight 0 alone add no block, as on
    the host; the caller masks it); lambda <- (1 - alpha_j) lambda; the new block
    takes the first free slot (newer = inf), the spare column when none is free (an
    overflow: a block there is never dropped). Returns the new ``lam``, ``newer``, the
    slot of each cluster's new block (k, 1), the mask of new blocks, their stamps and
    the rows' blocks (dropped rows: free).
    """
    tot = pool.newer + ns
    keep = (tot < c.tau_row) & (alpha < 1)
    lam = torch.where(keep, pool.lam * (1 - alpha), c.zero)
    newer = torch.where(keep, tot, c.inf)
    slot = newer.argmax(1, keepdim=True)  # (k, 1): the first free slot
    new = (c.slot_ids == slot) & grows  # (k, L + 1): where each new block goes
    lam = torch.where(new, alpha, lam)
    if cfg.renormalize:  # lambda / (sum over the window), for the growing clusters
        lam = torch.where(grows, lam / lam.sum(1, keepdim=True), lam)
    newer = torch.where(new, c.zero, newer)
    stamp = torch.where(new, pool.it, pool.stamp)
    block = torch.where(torch.take(keep, pool.block), pool.block, c.free)
    return lam, newer, slot, new, stamp, block


#: Device types on which :func:`slot_sums` sums small problems densely (of at most
#: :data:`mbkkm._core._memory.DENSE_SLOT_SUMS_MAX` (slot, row) pairs).
DENSE_SLOT_SUMS_DEVICES = ("cuda",)


def slot_sums(values, block, bounds):
    """sum_{s: block(s) = q} values[s] for every slot q < Q, shape (Q,).

    ``block`` (n,) int64 in [0, Q), ``bounds`` = 0, 1, ..., Q (int64).

    Two ways, each with the same sums on every run: ``index_add_`` (and
    ``scatter_add_``, ``index_put_`` with ``accumulate=True``) would add with atomics
    on CUDA, in an order that changes from run to run, and so would the last bits of
    the block Gram and of the centers' norms.

    - A stable sort of the rows by slot, then one sequential sum per slot
      (``segment_reduce``), in row order: on the CPU the sums ``index_add_`` makes,
      bit for bit.
    - On CUDA (:data:`DENSE_SLOT_SUMS_DEVICES`) for Q n <= ``DENSE_SLOT_SUMS_MAX``:
      the values masked to each slot, a (Q, n) row sum; three kernels where the radix
      sort of int64 keys takes about ten, on the small blocks of an iteration.
    """
    n, Q = block.shape[0], bounds.shape[0] - 1
    if values.device.type in DENSE_SLOT_SUMS_DEVICES and n * Q <= DENSE_SLOT_SUMS_MAX:
        return torch.where(bounds[:-1, None] == block[None, :], values[None, :], 0.0).sum(1)
    keys, order = torch.sort(block, stable=True)
    # The offsets are right by construction (nondecreasing, from 0 to n): ``unsafe``
    # leaves out any check of them, which would read them back to the host.
    return torch.segment_reduce(
        values.index_select(0, order),
        "sum",
        offsets=torch.searchsorted(keys, bounds),
        initial=0,
        unsafe=True,
    )


def advance(pool, Xb, cfg, layout, c, weight=None):
    """One truncated mini-batch iteration on the batch rows ``Xb`` (b, d).

    Returns the new :class:`Pool` (``rows``, ``block`` and ``coef`` are updated in
    place, the other tensors are new) and a :class:`StepOut`: a fixed sequence of torch
    calls, nothing read back, no shape that depends on the data. Per-cluster quantities
    are (k, 1) columns, so that they broadcast against the (k, L + 1) slots. With more
    than one kernel chunk (``layout.chunks``), the chunks are computed twice: for the
    distances, then (once the labels are known) for R = K V^T.
    """
    k, L1, M = layout.k, layout.L + 1, layout.M
    rows, coef = pool.rows, pool.coef
    chunks = layout.chunks
    # 1. The batch is written to the pool's tail; one kernel block K(rows, X_B)
    # (M + 1 + b, b): K(S, B), and K(B, B) in its tail.
    tail = rows[M + 1 :]
    tail.copy_(Xb)
    K = c.tile_tail(rows, tail) if len(chunks) == 1 else None
    dt = rows.dtype
    # 2. D[j, x] = c_j - 2 sum_s A[j, s] K[s, x] + K(x, x), A[j, s] = lambda_p(s) u_s in
    # the row of s's cluster: one GEMM; labels = argmin_j D.
    # (k, M), computed in float64 and rounded to the rows' dtype as it is written.
    A = torch.mul(coef[:M].T, torch.take(pool.lam, pool.block[:M]), out=c.coef_out)
    norms_dt = pool.norms.to(dt)
    if K is not None:
        D = torch.addmm(norms_dt, A, K[:M], alpha=-2)  # (k, b)
    else:
        D = torch.cat(
            [torch.addmm(norms_dt, A, c.tile(rows[:M], Xb[c0:c1]), alpha=-2) for c0, c1 in chunks],
            1,
        )
    diag = None if c.diag_is_one else c.diag(Xb)
    w64 = None if weight is None else weight.to(_F64)

    def batch_sum(D):
        """The labels, and sum_x w_x min_j D[j, x] with K(x, x) added and clipped at 0."""
        mind, labels = D.min(0)
        mind = (mind.add_(1) if diag is None else mind.add_(diag)).clamp_min_(0)
        if weight is None:
            return labels, mind.sum(0, keepdim=True, dtype=_F64)
        return labels, (mind.to(_F64) @ w64)[None]

    labels, objective = batch_sum(D)
    # 3. Counts and rates: b_j (weighted) and n_j (points, for the truncation), (k, 1).
    onehot = c.cluster_col == labels  # (k, b)
    ns = onehot.sum(1, keepdim=True, dtype=_F64)
    if weight is None:
        bc, total = ns, float(Xb.shape[0])
    else:
        bc, total = onehot.to(_F64) @ w64[:, None], w64.sum()
    if cfg.objective_after:  # once stopped: no counts, no growth, the state stays
        ns = ns * pool.active
        bc = ns if weight is None else bc * pool.active
    counts = pool.counts + bc
    # with weights, b as the sum of the b_j, as on the host (unweighted they are counts,
    # whose sum is b exactly: no operation added to the fit's iteration)
    alpha = cfg.rate(bc, total if weight is None else bc.sum(), counts)
    grows = alpha > 0
    # unweighted, a cluster grows iff it has rows: the mask is needed with weights only
    grown = ns if weight is None else ns * grows
    lam, newer, slot, new, stamp, block = _plan_slots(pool, cfg, c, grown, alpha, grows)
    # 5. Block Gram. V[j, x] = u_x on the new block of j (1 / n_j, or w_x / b_j);
    # R = K V^T; H'[j, p, r] = sum_{s in p} u_s R[s, j] (kept p: the rows of dropped
    # blocks are free now), H'[j, r, r] = (V R_B)[j, j]. The sums run over every row:
    # ``coef`` is 0 on the batch rows (and on the spare row but after an overflow, whose
    # iterations are replayed), so those add exact zeros at the end of a slot's sum.
    if weight is None:  # alpha_j > 0 exactly where n_j > 0 (every rate does so)
        V64 = onehot / ns.clamp_min(1)
    else:
        V64 = torch.where(onehot & grows, w64 / bc, c.zero)
    V = V64.to(dt)
    if cfg.objective_after:  # the coefficients after the update: kept rows, new blocks
        # A is not used any more: A2 takes its buffer.
        A2 = torch.mul(coef[:M].T, torch.take(lam, block[:M]), out=c.coef_out)
        Vb = V * lam.gather(1, slot).to(dt)
    if K is not None:
        R = K @ V.T  # (M + 1 + b, k)
    else:
        R, Q2 = 0, []
        for c0, c1 in chunks:
            Kc = c.tile(rows, Xb[c0:c1])
            R = R + Kc @ V[:, c0:c1].T
            if cfg.objective_after:
                Q2.append(torch.addmm(A2 @ Kc[:M], Vb, Kc[M + 1 :]))
    G = slot_sums((R * coef).sum(1), block, c.slot_bounds).view(k, L1)
    g = torch.where(new, torch.diagonal(V @ R[M + 1 :])[:, None], G)  # float64
    gram = torch.where(
        new[:, None, :], g[:, :, None], torch.where(new[:, :, None], g[:, None, :], pool.gram)
    )
    norms = torch.bmm(lam[:, None, :], torch.bmm(gram, lam[:, :, None])).view(k, 1)
    after = None
    active = pool.active
    if cfg.objective_after:
        # f_B(C_{i+1}) on the same batch: c' - 2 (A2 K(S, B) + Vb K(B, B)).
        if K is not None:
            D2 = torch.addmm(
                torch.addmm(norms.to(dt), A2, K[:M], alpha=-2), Vb, K[M + 1 :], alpha=-2
            )
        else:
            D2 = torch.cat(Q2, 1).mul_(-2).add_(norms.to(dt))
        after = batch_sum(D2)[1]
        active = active & (objective - after >= c.tol * total)
    # 6. Rows: a point that joins its cluster's new block goes to the first free row of
    # the pool in the batch's order (the spare row M when none is left: an overflow),
    # any other back to its own batch row. Unweighted, every point's cluster grows
    # (n_j >= 1 gives alpha_j > 0), unless early stopping has stopped the run; weighted,
    # a cluster whose points all weigh 0 does not grow.
    rank_rows = (block[:M] == c.free).cumsum(0)  # (M,): free rows up to each row
    if weight is None:
        dest = torch.searchsorted(rank_rows, c.ranks)
        if cfg.objective_after:
            dest = torch.where(pool.active, dest, c.tail)
    else:
        isnew = torch.take(grows, labels)
        dest = torch.where(isnew, torch.searchsorted(rank_rows, isnew.cumsum(0)), c.tail)
    rows.index_copy_(0, dest, Xb)
    block.index_copy_(0, dest, torch.take(c.slot_base + slot, labels))
    coef.index_copy_(0, dest, V64.T)
    it = pool.it + (pool.active if cfg.objective_after else 1)
    new_pool = Pool(rows, block, coef, lam, newer, stamp, gram, norms, counts, it, active)
    return new_pool, StepOut(labels, objective, after, total, alpha)


def tile_columns_for(layout, rows, max_tile_bytes):
    """Batch columns per kernel chunk so that K(rows, X_chunk) fits ``max_tile_bytes``."""
    # (M + 1 + b) rows: the pool's M + 1 besides the batch's b
    return tile_columns(layout.M + 1, layout.b, rows.element_size(), max_tile_bytes)


# ------------------------------------------------------------------ capacities


def grow(layout, *, rows, slots, tau):
    """A larger layout after an overflow of the rows and/or the slots."""
    L, M = layout.L, layout.M
    if slots:
        L = 2 * L if tau is None else min(max(2 * L, L + 1), max(tau, 1) + 1)
    if rows:
        M = M + max(layout.b, M // 2)
    return Layout(layout.k, L, M, layout.b, layout.cols)


def overflow_marks(pool, layout):
    """(2,) float64 on the device: 1 where an iteration lacked pool rows, a slot.

    Both marks are sticky: new points that found no free row were written to the
    spare row M (whose ``coef`` row is 0 until then), a new block that found no free
    slot went to the spare column (never dropped). The host reads them with the
    objectives, in one copy (:mod:`mbkkm._core._loop`).
    """
    return torch.cat(
        [
            (pool.coef[layout.M] != 0).any().view(1),
            torch.isfinite(pool.newer[:, layout.L]).any().view(1),
        ]
    ).to(_F64)


# ------------------------------------------------------------ to and from windows


def pack(state, layout, *, dtype=None):
    """A :class:`Pool` holding the windows of ``state`` (a :class:`WindowState` on torch).

    Slots keep the windows' age order (slot i = the i-th oldest block of its window).
    Requires ``layout.L`` >= the largest window's blocks and ``layout.M`` >= the support.
    """
    S = state.support
    dev = S.device
    dtype = S.dtype if dtype is None else dtype
    k, L1, M = layout.k, layout.L + 1, layout.M
    m = S.shape[0]
    bc = np.asarray(state.block_cluster, dtype=np.intp)
    slots = block_slots(bc, k)
    if bc.size and (slots.max() >= layout.L or m > M):
        raise ValueError(
            f"pack: the windows need {slots.max() + 1} slots and {m} rows, the "
            f"layout has {layout.L} and {M}"
        )
    sizes = state.block_size
    buffers = pool_buffers(k, layout.L, M, layout.b)
    # Every buffer but the rows on the host first, as declared, then filled.
    host = {
        name: np.full(shape, fill, dtype)
        for name, (shape, dtype, fill) in buffers.items()
        if dtype is not None
    }
    host["lam"][bc, slots] = state.lam
    host["newer"][bc, slots] = newer_points(bc, sizes, k)
    host["stamp"][bc, slots] = state.block_stamp
    host["block"][:m] = np.repeat(bc * L1 + slots, sizes)
    host["coef"][np.arange(m), np.repeat(bc, sizes)] = state.weight
    if state.gram is not None:
        H = np.asarray(state.backend.to_numpy(state.gram), dtype=np.float64)
        n = min(H.shape[1], L1)
        host["gram"][:, :n, :n] = H[:, :n, :n]
    host["counts"][:, 0] = state.counts
    host["it"][0] = state.n_steps
    tensors = {name: torch.from_numpy(a).to(dev) for name, a in host.items()}
    tensors["norms"] = state.norms.to(dtype=_F64, device=dev).reshape(k, 1).clone()
    (n_rows,), _, _ = buffers["rows"]
    rows = torch.zeros((n_rows, *S.shape[1:]), dtype=dtype, device=dev)
    rows[:m] = S
    return Pool(rows=rows, **tensors)


def unpack(pool, layout):
    """The :class:`WindowState` of a pool: the occupied rows grouped by cluster, blocks
    oldest first, points of a block in the order they joined; the block Gram in age order.

    One device-to-host copy of the bookkeeping (rows' slots and weights, the slots'
    coefficients, ages and stamps, the Gram) and one gather of the support rows.
    """
    k, L1, M = layout.k, layout.L + 1, layout.M
    row_block = pool.block[:M].cpu().numpy()
    weight = pool.coef[:M].sum(1).cpu().numpy()  # one non-zero per row: u_s
    lam, newer, stamp, gram = (
        t.cpu().numpy() for t in (pool.lam, pool.newer, pool.stamp, pool.gram)
    )
    occupied = np.flatnonzero(row_block != layout.free)
    cl, sl = np.divmod(row_block[occupied], L1)
    # Age of a slot: its newer count (strictly larger for older blocks of a window).
    rows_sorted = occupied[np.lexsort((occupied, -newer[cl, sl], cl))]
    key = row_block[rows_sorted]  # the rows' slots, j (L + 1) + p
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    sizes = np.diff(np.r_[starts, key.size])
    block_cluster, block_slot = np.divmod(key[starts], L1)
    n_blocks = np.bincount(block_cluster, minlength=k)
    Lp = max(1, int(n_blocks.max()))
    rank = rank_in_groups(n_blocks)
    perm = np.full((k, Lp), -1, dtype=np.intp)  # -1: no block
    perm[block_cluster, rank] = block_slot
    used = perm >= 0
    sub = np.take_along_axis(np.take_along_axis(gram, perm[:, :, None], 1), perm[:, None, :], 2)
    H = np.where(used[:, :, None] & used[:, None, :], sub, 0.0)
    idx = torch.from_numpy(rows_sorted).to(pool.rows.device)
    return WindowState(
        support=pool.rows.index_select(0, idx),
        weight=weight[rows_sorted],
        block_start=np.r_[0, np.cumsum(sizes)],
        block_cluster=block_cluster.astype(np.intp),
        block_stamp=stamp[block_cluster, block_slot].astype(np.int64),
        lam=lam[block_cluster, block_slot].astype(np.float64),
        gram=torch.from_numpy(H).to(pool.rows.device),
        norms=pool.norms.view(k).clone(),
        counts=pool.counts.view(k).cpu().numpy().astype(np.float64),
        n_steps=int(pool.it.item()),
    )


def layout_for(state, batch_size, tau):
    """A layout that holds ``state`` and rarely overflows with batches of ``batch_size``."""
    k = state.n_clusters
    bc = np.asarray(state.block_cluster, dtype=np.intp)
    blocks = int(np.bincount(bc, minlength=k).max()) if bc.size else 1
    L, M = capacities(k, batch_size, tau, blocks=blocks, support=int(state.support.shape[0]))
    return Layout(k, L, M, batch_size)


def step_windows(state, Xb, cfg, batch_weight=None):
    """One device iteration on a :class:`WindowState` (in place): pack, advance, unpack.

    What :func:`mbkkm._core.minibatch_step` does for a state on the host
    (``partial_fit``), with the same :class:`~mbkkm._core._state.StepConfig`. The layout holds the
    state and one batch (no overflow is possible); the results come back in one
    device-to-host copy.
    """
    layout = layout_for(state, Xb.shape[0], cfg.tau)
    layout = replace(layout, cols=tile_columns_for(layout, Xb, cfg.max_tile_bytes))
    pool = pack(state, layout)
    weight = None
    if batch_weight is not None:
        weight = torch.from_numpy(np.asarray(batch_weight, dtype=np.float64)).to(Xb.device)
    pool, out = advance(pool, Xb, cfg, layout, make_constants(layout, cfg, pool.rows), weight)
    total = torch.as_tensor(out.total, dtype=_F64, device=Xb.device).view(1)
    after = out.objective if out.after is None else out.after
    host = torch.cat([out.objective, after, total, out.alpha.view(-1), out.labels.to(_F64)])
    host = host.cpu().numpy()
    objective, after, total = host[:3]
    new = unpack(pool, layout)
    for f in fields(WindowState):
        if f.name != "workspace":
            setattr(state, f.name, getattr(new, f.name))
    return StepResult(
        labels=host[3 + layout.k :].astype(np.intp),
        objective=float(objective / total),
        objective_after=float(after / total) if cfg.objective_after else None,
        alpha=host[3 : 3 + layout.k].copy(),
    )
