"""Untruncated mini-batch kernel k-means: the paper's Algorithm 1 and its dynamic program.

Centers are combinations of every point ever assigned to them. Instead of windows
that grow without bound, the dynamic program keeps, for all n fitted points,
the table T[x, j] = <phi(x), C_j> and the center norms c_j = <C_j, C_j>.
With W[y, j] = alpha_j / b_j for the batch points y in B_j (0 elsewhere, (b, k)):

    C_j'       = (1 - alpha_j) C_j + sum_{y in B} W[y, j] phi(y)
    T'[x, j]   = (1 - alpha_j) T[x, j] + (K(X, X_B) W)[x, j]                  (n, k)
    c_j'       = (1 - alpha_j)^2 c_j + 2 (1 - alpha_j) sum_y W[y, j] T[y, j]
                 + (W^T K(X_B, X_B) W)[j, j]

so one iteration costs one kernel block K(X, X_B) (n x b) and O(n (b + k)) work,
with O(n k) memory. The coefficients of the centers on the fitted points are kept
too (A, (n, k), plus the initial centers' own coefficients), so new points can
be labelled after fit.

numpy only: the table is O(n k) over all fitted points and each step is dominated
by host bookkeeping, so MiniBatchKernelKMeans refuses ``tau=None`` on the torch
backend with a ValueError (use an integer tau there).

References
----------
B. Jourdan and G. Schwartzman. "Mini-batch kernel k-means." (Algorithm 1.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..backends import numpy_backend
from ..backends._numpy import is_sparse, vstack_rows
from ._rates import batch_rates
from ._state import labelling_state
from ._windows import labels_and_minima


@dataclass
class TableState:
    """State of the untruncated algorithm over a fixed training set of n items.

    Attributes
    ----------
    table : ndarray of shape (n, k)
        T[x, j] = <phi(x), C_j>.
    norms : ndarray of shape (k,)
        c_j = <C_j, C_j>.
    coef : ndarray of shape (n, k)
        A[x, j], coefficient of fitted point x in center j.
    init_items : ndarray of shape (m0, ...)
        The support points of the initial centers (items outside or inside the
        data): one point per center for k-means++, a whole partition for the
        start of ``gamma="auto"``.
    init_coef : ndarray of shape (m0,)
        Remaining coefficient of each initial support point in its center.
    init_labels : ndarray of shape (m0,)
        The center of each initial support point.
    counts : ndarray of shape (k,)
        Running counts for the learning rate.
    n_steps : int
    """

    table: np.ndarray
    norms: np.ndarray
    coef: np.ndarray
    init_items: np.ndarray
    init_coef: np.ndarray
    init_labels: np.ndarray
    counts: np.ndarray
    n_steps: int = 0


def init_table(items, start, kernel, chunk_rows=4096):
    """The table of a starting state: T[x, j] = <phi(x), C_j> = sum_s a_s K(x, s).

    Parameters
    ----------
    items : ndarray or sparse matrix of shape (n, ...)
        The fitted points.
    start : WindowState
        The initial centers as windows (host): single points (k-means++, random,
        an init array) or a partition's means (``gamma="auto"``).
    kernel : Kernel
    chunk_rows : int
        Rows of ``items`` per kernel block.
    """
    n, k = items.shape[0], start.n_clusters
    support, coef, labels = start.support, start.coef, start.labels
    A = numpy_backend().one_hot(labels, coef, k)  # (m0, k): a_s on its center's column
    table = np.empty((n, k), dtype=np.float64)
    for r0 in range(0, n, chunk_rows):
        table[r0 : r0 + chunk_rows] = (
            np.asarray(kernel(items[r0 : r0 + chunk_rows], support), dtype=np.float64) @ A
        )
    return TableState(
        table=table,
        norms=start.host_norms().copy(),
        coef=np.zeros((n, k)),
        init_items=support.copy() if is_sparse(support) else np.array(support, copy=True),
        init_coef=np.array(coef, dtype=np.float64),
        init_labels=labels.copy(),
        counts=np.zeros(k),
    )


def table_step(state, items, batch_idx, diag_all, kernel, rate, *, chunk_rows=4096):
    """One untruncated iteration on the batch ``batch_idx`` (indices into ``items``).

    Returns
    -------
    labels : ndarray of shape (b,)
    objective : float
        f_B(C_i), the mean squared distance of the batch to its nearest center.
    alpha : ndarray of shape (k,)
    """
    T = state.table
    n, k = T.shape
    b = batch_idx.size
    D = diag_all[batch_idx][:, None] - 2.0 * T[batch_idx] + state.norms[None, :]
    labels, mind = labels_and_minima(D.T)
    objective, bcounts, _, alpha = batch_rates(labels, mind, k, rate, state.counts)
    u = (alpha / np.maximum(bcounts, 1))[labels]  # the weight of each batch point
    W = numpy_backend().one_hot(labels, u, k)
    keep = 1.0 - alpha
    XB = items[batch_idx]
    # c' from the old table (before T is overwritten).
    s1 = np.einsum("ij,ij->j", W, T[batch_idx])
    if _reads_stored_rows(kernel, items):
        # T' = (1 - alpha) T + K(X_B, X)^T W: the batch's rows of the stored matrix
        # (K is symmetric), in chunks of about chunk_rows * b entries.
        T *= keep[None, :]
        K_BB = np.empty((b, b))
        step = max(1, chunk_rows * b // max(n, 1))
        for start in range(0, b, step):
            R = kernel.stored_rows(XB[start : start + step])
            T += R.T @ W[start : start + step]
            K_BB[start : start + step] = R[:, XB].toarray() if is_sparse(R) else R[:, XB]
    else:
        K_BB = np.asarray(kernel(XB, XB), dtype=np.float64)
        # T' = (1 - alpha) T + K(X, X_B) W, in row chunks.
        for start in range(0, n, chunk_rows):
            K = np.asarray(kernel(items[start : start + chunk_rows], XB), dtype=np.float64)
            Tc = T[start : start + chunk_rows]
            Tc *= keep[None, :]
            Tc += K @ W
    s2 = np.einsum("ij,ik,kj->j", W, K_BB, W)
    state.norms = keep**2 * state.norms + 2.0 * keep * s1 + s2
    state.coef *= keep[None, :]
    np.add.at(state.coef, (batch_idx, labels), u)
    state.init_coef *= keep[state.init_labels]
    state.n_steps += 1
    return labels, objective, alpha


def _reads_stored_rows(kernel, items):
    """Whether ``kernel`` is a stored matrix whose points are ``items``, in order.

    Then K(X, X_B) is the transpose of the batch's rows of the matrix.
    """
    if not hasattr(kernel, "stored_rows") or getattr(items, "ndim", 0) != 1:
        return False
    n = items.shape[0]
    return n == kernel.n_samples and bool(np.array_equal(items, np.arange(n)))


def table_to_windows(state, items):
    """Support-point view of the centers (for predict and the public attributes).

    Point x is a support point of center j when A[x, j] != 0; the initial centers
    are support points while their coefficient is non-zero. The returned state has
    no Gram caches (``gram`` is None): it is for labelling only.
    """
    k = state.table.shape[1]
    rows, cols = np.nonzero(state.coef)
    live = np.flatnonzero(state.init_coef)  # initial support points still in a center
    support = vstack_rows([state.init_items[live], items[rows]])  # CSR rows stay CSR
    coef = np.concatenate([state.init_coef[live], state.coef[rows, cols]])
    cluster = np.concatenate([state.init_labels[live], cols])
    windows = labelling_state(support, coef, cluster, k, state.norms.copy())
    windows.counts = state.counts.copy()
    windows.n_steps = state.n_steps
    return windows
