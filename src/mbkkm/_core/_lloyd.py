"""Full-batch kernel k-means (Lloyd's algorithm in feature space): the core.

Centers are never explicit; center j is the mean of the points ``A_j``
currently assigned to it,

    C_j = (1 / W_j) sum_{y in A_j} w_y phi(y),    W_j = sum_{y in A_j} w_y,

so the squared distance of a point x to C_j is

    ||phi(x) - C_j||^2 = K(x, x) - 2 sum_{y in A_j} w_y K(x, y) / W_j
                         + sum_{y, y' in A_j} w_y w_y' K(y, y') / W_j^2.

With the (n, k) coefficient matrix A[y, j] = w_y / W_j if y is in A_j, else 0
(a weighted one-hot matrix of the labels), one product gives every inner product

    P = K A,  P[x, j] = <phi(x), C_j> = sum_{y in A_j} w_y K(x, y) / W_j,

and the squared norms come from P for free:

    c_j = ||C_j||^2 = sum_{y in A_j} (w_y / W_j) sum_{y' in A_j} K(y, y') w_y' / W_j
        = sum_y A[y, j] P[y, j]  (column sums of A * P).

So an iteration is one (n x n) by (n x k) product, D = diag(K) - 2 P + c, and
an argmin. The product goes through a kernel operator: :class:`MatrixOperator`
(the stored matrix) or :class:`BlockOperator` (blocks of kernel rows recomputed
at every iteration). Pure functions: ready arrays in, no estimator, no checks.
Every array of one run lives on one backend (numpy, or torch on a device: see
mbkkm.backends); the loop brings a few scalars per iteration to the host.

Indefinite kernels. When K is not positive semi-definite (the k-NN graph kernel,
the sigmoid kernel, many precomputed similarities), ||phi(x) - C_j||^2 above is an
indefinite quadratic form: it can be negative, and the mean of a cluster no longer
minimises the sum of its points' "squared distances", so the M-step can raise the
objective and Lloyd's iterations are not monotone. The E-step still minimises the
objective for fixed centers, so it takes the argmin of D as computed (negative
entries included); only the distances it returns are clipped at 0. The stopping
rule never reads a rise as convergence (see :func:`kernel_lloyd`), and the number
of clearly negative entries is counted so that the estimator can warn.

References
----------
I. S. Dhillon, Y. Guan and B. Kulis. "Kernel k-means, spectral clustering and
normalized cuts." KDD 2004.
B. Jourdan and G. Schwartzman. "Mini-batch kernel k-means." 2024 (the full-batch
baseline of Section 5).
"""

from __future__ import annotations

import time
from typing import NamedTuple, Protocol

import numpy as np

from ..backends import get_backend
from ..backends._threads import parallel_matmul
from ..kernels import kernel_block
from ..kernels._graph import LowRankKernel
from ._state import NON_FINITE


class KernelOperator(Protocol):
    """What Lloyd's iterations need of the kernel: products K @ A with the (n, n)
    kernel matrix of the training points, however it is held."""

    n: int

    def product(self, A):
        """K @ A, shape (n, k), float64, on the run's backend."""


class KernelRun(NamedTuple):
    """What Lloyd's iterations of one fit work with (built by the estimator)."""

    op: KernelOperator  # products with the kernel matrix
    diag: object  # (n,) float64 K(x, x), on the run's backend
    index_kernel: object  # the stored matrix as an index kernel (k-means++), or None


class LloydResult(NamedTuple):
    """One run of :func:`kernel_lloyd`."""

    #: ndarray (n,) or None: the clusters whose means are the returned centers (None:
    #: the initial centers, never the case with ``max_iter >= 1``).
    center_labels: object
    #: ndarray (n,): nearest center of each point (the labels of the returned centers).
    labels: object
    #: ndarray (n,): squared distance of each point to its center.
    mind: object
    #: ndarray (n, k): squared distances to every center.
    distances: object
    n_iter: int
    #: ndarray (k,): squared norms of the returned centers (inf for an empty cluster).
    norms: object
    #: int: the largest number of clearly negative squared distances (see
    #: :func:`e_step`) in one iteration; > 0 only when the kernel is indefinite.
    n_negative: int = 0


class MatrixOperator:
    """Products with a kernel matrix held in memory: a dense array or tensor (on the
    host or on a device), or on the host a sparse or low-rank matrix."""

    def __init__(self, K):
        self.K = K
        self.n = K.shape[0]
        self.nx = get_backend(K)  # numpy for sparse and low-rank matrices

    def product(self, A):
        """K @ A, shape (n, k), float64, on the backend of K (computed in K's dtype)."""
        if isinstance(self.K, LowRankKernel):
            # K = U diag(w) U^T: (n, r) (r, r) (r, n) (n, k), never n x n.
            return self.K.U @ (self.K.weights[:, None] * (self.K.U.T @ A))
        A = self.nx.astype(A, self.K.dtype)
        dense = type(self.K) in (np.ndarray, np.memmap)  # row parts on the policy's threads
        return self.nx.astype(parallel_matmul(self.K, A) if dense else self.K @ A, np.float64)

    def columns(self, idx):
        """K[:, idx], shape (n, len(idx)), float64 (host index kernels)."""
        return np.asarray(kernel_block(self.K, np.arange(self.n), idx), dtype=np.float64)


class BlockOperator:
    """Products with K(X, X) recomputed block of rows by block of rows (K never stored),
    on the backend of X."""

    def __init__(self, kernel, X, block_rows):
        self.kernel = kernel
        self.X = X
        self.n = X.shape[0]
        self.block_rows = block_rows
        self.nx = get_backend(X)

    def product(self, A):
        n, br, nx = self.n, self.block_rows, self.nx
        A = nx.astype(A, self.X.dtype)
        out = nx.empty((n, A.shape[1]), np.float64)
        buf = nx.empty((min(br, n), n), self.X.dtype)  # one block of kernel rows
        for r0 in range(0, n, br):
            r1 = min(r0 + br, n)
            Kb = self.kernel.tile(self.X[r0:r1], self.X, out=buf[: r1 - r0])  # (r1 - r0, n)
            out[r0:r1] = parallel_matmul(Kb, A) if nx.is_host else Kb @ A
        return out


#: An entry of D below -NEGATIVE_RTOL (K(x, x) + ||C_j||^2) is not rounding: for a
#: positive semi-definite kernel |<phi(x), C_j>| <= (K(x, x) + ||C_j||^2) / 2, so D is
#: a sum of terms of that size and float64 (or float32: relative errors ~1e-6 at the
#: sizes used) rounds it by orders of magnitude less. Such entries prove the kernel
#: indefinite (PenDigits' k-NN kernel: about 2,500 entries, down to -0.27 times the scale).
NEGATIVE_RTOL = 1e-3


def e_step(P, c, diag):
    """Labels, row minima, squared distances and the count of negative distances.

    D = diag - 2 P + c, shape (n, k). The labels are the argmin of D as computed
    (on an indefinite kernel negative entries are real, and the most negative is the
    nearest center); the returned minima and D are then clipped at 0 (rounding, or
    an indefinite kernel). ``n_negative`` (a 0-d array of the backend) counts the
    entries below ``-NEGATIVE_RTOL * (diag + c)``: 0 for a positive semi-definite
    kernel.
    """
    nx = get_backend(P)
    D = P * -2.0
    D += diag[:, None]
    D += c[None, :]
    labels, mind = nx.argmin_min(D, axis=1)
    # c_j = inf (an empty cluster): D = inf is never below -inf.
    n_negative = (D < (diag[:, None] + c[None, :]) * -NEGATIVE_RTOL).sum()
    nx.clip_min_(D, 0.0)
    nx.clip_min_(mind, 0.0)
    return labels, mind, D, n_negative


def relocate_empty(labels, mind, w, k, W=None):
    """Move the points farthest from their centers into empty clusters (as scikit-learn).

    Only points of positive weight can fill a cluster; returns new labels (a copy when
    something moved). ``W``: the cluster weights of ``labels`` when already known.
    All arrays on one backend; on a device nothing comes to the host but counts.
    """
    nx = get_backend(labels)
    if W is None:
        W = nx.one_hot(labels, w, k).sum(0)
    empty = nx.flatnonzero(W <= 0)
    positive = w > 0
    n_move = min(int(empty.shape[0]), int(positive.sum()))
    if n_move == 0:
        return labels
    score = nx.copy(mind)
    score[~positive] = -np.inf
    far = nx.largest(score, n_move)  # the n_move farthest points, farthest first
    labels = nx.copy(labels)
    labels[far] = empty[:n_move]
    return labels


def m_step(op, labels, w, k, M=None):
    """Inner products P = K A (n, k) and squared norms c (k,) of the cluster means.

    A[y, j] = w_y / W_j for y in A_j (the weighted one-hot matrix M scaled by
    column); ``M = one_hot(labels, w)`` when already computed. A cluster of zero
    weight has a zero column (its points, if any, all weigh 0) and c_j = inf.
    """
    nx = get_backend(labels)
    if M is None:
        M = nx.one_hot(labels, w, k)  # (n, k), M[y, label_y] = w_y
    W = M.sum(0)  # (k,) cluster weights W_j
    none = W <= 0
    scale = nx.copy(W)
    scale[none] = 1.0
    M /= scale[None, :]  # A, in place
    P = op.product(M)
    c = (M * P).sum(0)
    c[none] = np.inf  # a cluster with no weight attracts no point
    return P, c


def kernel_lloyd(op, diag, P0, c0, w, max_iter, tol, verbose=0):
    """Lloyd's algorithm in feature space from initial centers given by (P0, c0).

    Iteration i assigns every point to the nearest center (E-step against the
    centers C_i), then sets C_{i+1} to the weighted means of the clusters
    (M-step, one product with K). With f_i = sum_x w_x min_j ||phi(x) - C_{i,j}||^2
    the objective of iteration i, it stops after iteration i when

    - the labels did not change (strict convergence: C_{i+1} = C_i), or
    - the objective decreased, by less than ``tol`` times itself:
      0 <= f_{i-1} - f_i < ``tol * f_{i-1}`` (never with ``tol=0``),

    (then C_i and its labels are returned), or after ``max_iter`` iterations (then
    a last E-step against C_{max_iter} gives the labels). A rise of the objective
    (f_i > f_{i-1}) is not convergence: on a positive semi-definite kernel Lloyd is
    monotone and a rise is rounding, but on an indefinite kernel the M-step can
    raise the objective for real and the labels go on moving (PenDigits' k-NN
    kernel: the objective rises at iteration 2 on every seed, then Lloyd reaches a
    fixed point after 14-29 iterations with ARI 0.571 on average over 10 seeds,
    where stopping at the rise gave 0.483). The returned labels are always the
    nearest centers of the returned centers, which is scikit-learn's
    KMeans(algorithm="lloyd") convention.

    Why neither the best labels seen nor a diagonal shift: on an indefinite kernel
    f_i is not comparable across iterations (the best f_i on PenDigits' k-NN kernel
    is iteration 1's, against single-point centers, ARI 0.34); and Lloyd on
    K + sigma I with sigma = -lambda_min(K) (Dhillon, Guan and Kulis 2004: the same
    minimising partitions, monotone iterations) reached fixed points of higher
    objective and ARI 0.501 on the same 10 seeds, because the shift makes every
    point favour its current cluster, besides needing lambda_min of an n x n
    matrix. Lloyd stopped at a fixed point on every one of those runs; a cycle
    would run to ``max_iter``.

    Every array lives on one backend (numpy, or torch on a device); the products,
    distances, argmins, relocations and objectives run there, and each iteration
    brings four scalars to the host (objective, number of changed labels, number
    of empty clusters, number of negative squared distances) for the tests above.

    Parameters
    ----------
    op : KernelOperator
    diag : ndarray or tensor of shape (n,), float64
        K(x, x).
    P0 : ndarray or tensor of shape (n, k), float64
        <phi(x), C_0j> for the initial centers.
    c0 : ndarray or tensor of shape (k,), float64
        ||C_0j||^2.
    w : ndarray or tensor of shape (n,), float64
        Sample weights (ones when unweighted).
    max_iter : int
    tol : float
        Relative tolerance on the objective decrease (a rise never stops the run).
    verbose : int

    Returns
    -------
    LloydResult
        ``(center_labels, labels, mind, distances, n_iter, norms, n_negative)``.
    """
    nx = get_backend(P0)
    if nx.is_host:
        diag, c0 = np.asarray(diag, dtype=np.float64), np.asarray(c0, dtype=np.float64)
    k = P0.shape[1]
    P, c = P0, c0
    center_labels = labels_old = obj_old = None
    t0 = time.perf_counter()
    n_iter = n_negative = 0
    for n_iter in range(1, max_iter + 1):
        labels, mind, D, neg = e_step(P, c, diag)
        M = nx.one_hot(labels, w, k)  # (n, k) weighted one-hot of the labels
        W = M.sum(0)
        changed = 0 if labels_old is None else (labels != labels_old).sum()
        # The only device-to-host traffic of an iteration: four scalars, one copy.
        obj, changed, n_empty, neg = nx.scalars_to_host(mind @ w, changed, (W <= 0).sum(), neg)
        if not np.isfinite(obj):
            raise ValueError(NON_FINITE)
        n_negative = max(n_negative, int(neg))
        if verbose:
            print(f"Iteration {n_iter}: objective {obj:.6g}, {time.perf_counter() - t0:.2f}s")
        if labels_old is not None:
            decrease = obj_old - obj
            converged = "strict convergence" if changed == 0 else None
            if not converged and 0 <= decrease < tol * obj_old:
                converged = f"objective decrease {decrease:.3g} < tol * objective"
            if converged:
                if verbose:
                    print(f"Converged at iteration {n_iter}: {converged}.")
                return LloydResult(center_labels, labels, mind, D, n_iter, c, n_negative)
            if decrease < 0 and verbose:
                print(
                    f"Iteration {n_iter}: objective rose by {-decrease:.3g} "
                    f"({int(changed)} labels changed; an indefinite kernel?): going on."
                )
        center_labels = relocate_empty(labels, mind, w, k, W) if n_empty > 0 else labels
        M = None if center_labels is not labels else M  # relocated: a new one-hot
        P, c = m_step(op, center_labels, w, k, M)
        labels_old, obj_old = labels, obj
    labels, mind, D, _ = e_step(P, c, diag)  # its negatives uncounted: no more traffic
    if verbose and max_iter > 0:
        print(f"Stopped after max_iter={max_iter} iterations (not converged).")
    return LloydResult(center_labels, labels, mind, D, n_iter, c, n_negative)
