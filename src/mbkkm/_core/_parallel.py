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

from ._windows import assign

_MIN_ROWS_PER_THREAD = 4096


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
        so the memory budget is shared, not multiplied).
    n_threads : int, optional
        Default: :func:`blas_threads`.
    return_distances : bool
    """
    n = X.shape[0]
    n_threads = blas_threads() if n_threads is None else n_threads
    n_threads = max(1, min(n_threads, n // _MIN_ROWS_PER_THREAD))
    if n_threads == 1:
        return assign(X, state, kernel, chunk_rows=chunk_rows,
                      return_distances=return_distances)
    bounds = np.linspace(0, n, n_threads + 1).astype(np.intp)
    rows = max(1, chunk_rows // n_threads)

    def part(i):
        return assign(X[bounds[i]:bounds[i + 1]], state, kernel, chunk_rows=rows,
                      return_distances=return_distances)

    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(n_threads) as pool:
        results = list(pool.map(part, range(n_threads)))
    return tuple(np.concatenate([r[i] for r in results]) for i in range(len(results[0])))
