"""The labelling pass on every core the user allows.

NumPy's elementwise functions (the kernel's exp, the distances) run on one core,
and a BLAS call on a thin chunk scales poorly; labelling n points is
embarrassingly parallel, so the rows are split into as many contiguous parts as
BLAS may use threads, each part labelled by :func:`assign` in its own thread
with single-threaded BLAS (NumPy and BLAS release the GIL). The thread count is
read from threadpoolctl, so a user's ``threadpool_limits(1)`` gives one thread.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from ..kernels._kernel import Kernel
from ._windows import assign

_MIN_ROWS_PER_THREAD = 4096
_BLOCK_BYTES = 2 * 1024 * 1024  # one kernel tile: fewer Python calls per row, still in L2/L3


def assign_fused(X, state, kernel, *, return_distances=False, max_rows=None):
    """:func:`assign` for NumPy data, with every step of a row tile done in cache.

    For each tile of R rows (R x m values, about 2 MiB): the kernel tile (one
    GEMM into a reused buffer, then its elementwise map), the inner products with
    the centers (one GEMV per center's segment), the distances and their argmin.
    The tile never leaves the cache, so the pass costs the GEMM plus the kernel
    function, not five more memory passes over an (n, m) block. What the kernel can
    reuse for the support (:meth:`Kernel.prepare`) is computed once.

    ``max_rows`` caps the tile (a memory budget smaller than one tile).

    Returns the same as :func:`assign`.
    """
    n = X.shape[0]
    S = state.support
    m = S.shape[0]
    k = state.n_clusters
    dtype = np.result_type(S.dtype, np.float32)
    R = max(16, _BLOCK_BYTES // max(1, m * dtype.itemsize))
    R = min(R, max(1, n), max_rows or R)
    buf = np.empty((R, m), dtype=dtype)
    P = np.empty((R, k), dtype=dtype)
    coef = state.coef.astype(dtype)
    norms = state.norms.astype(dtype)
    starts = state.starts
    cache = kernel.prepare(S)  # e.g. rbf's augmented support, built once per pass
    labels = np.empty(n, dtype=np.intp)
    mind = np.empty(n, dtype=dtype)
    dist = np.empty((n, k), dtype=dtype) if return_distances else None
    for r0 in range(0, n, R):
        r1 = min(n, r0 + R)
        nr = r1 - r0
        Xr = np.asarray(X[r0:r1])
        K = kernel(Xr, S, out=buf[:nr], **cache)
        D = P[:nr]
        for j in range(k):
            a, b = starts[j], starts[j + 1]
            if b > a:
                np.matmul(K[:, a:b], coef[a:b], out=D[:, j])
            else:
                D[:, j] = 0
        D *= -2
        D += np.asarray(kernel.diag(Xr), dtype=dtype)[:, None]
        D += norms[None, :]
        np.maximum(D, 0, out=D)
        lab = np.argmin(D, axis=1)
        labels[r0:r1] = lab
        mind[r0:r1] = D[np.arange(nr), lab]
        if return_distances:
            dist[r0:r1] = D
    if return_distances:
        return labels, mind, dist
    return labels, mind


def blas_threads():
    """The number of threads BLAS may use now (1 when unknown)."""
    counts = [p.get("num_threads", 1) for p in threadpool_info() if p.get("user_api") == "blas"]
    return max(1, min(counts)) if counts else 1


def assign_parallel(X, state, kernel, *, chunk_rows, n_threads=None, return_distances=False):
    """:func:`assign` over row parts in threads; same results as the serial pass.

    Parameters
    ----------
    X : ndarray of shape (n, ...)
    state : WindowState
    kernel : Kernel-like
    chunk_rows : int
        Rows per chunk for the whole pass (each thread gets ``chunk_rows // n_threads``,
        so the memory budget is shared, not multiplied). Pairwise kernels on NumPy
        data use :func:`assign_fused`, whose tiles are far smaller than any budget.
    n_threads : int, optional
        Default: :func:`blas_threads`.
    return_distances : bool
    """
    if not isinstance(state.support, np.ndarray):  # another backend: its own parallelism
        return assign(X, state, kernel, chunk_rows=chunk_rows,
                      return_distances=return_distances)
    n = X.shape[0]
    n_threads = blas_threads() if n_threads is None else n_threads
    n_threads = max(1, min(n_threads, n // _MIN_ROWS_PER_THREAD))
    fused = (isinstance(kernel, Kernel) and isinstance(state.support, np.ndarray)
             and state.support.dtype.kind == "f")

    def label(rows):
        if fused:
            return assign_fused(rows, state, kernel, return_distances=return_distances,
                                max_rows=max(1, chunk_rows // n_threads))
        return assign(rows, state, kernel, chunk_rows=max(1, chunk_rows // n_threads),
                      return_distances=return_distances)

    if n_threads == 1:
        return label(X)
    bounds = np.linspace(0, n, n_threads + 1).astype(np.intp)

    def part(i):
        return label(X[bounds[i]:bounds[i + 1]])

    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(n_threads) as pool:
        results = list(pool.map(part, range(n_threads)))
    return tuple(np.concatenate([r[i] for r in results]) for i in range(len(results[0])))
