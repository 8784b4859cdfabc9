"""The labelling pass (:func:`mbkkm._core.assign`) on every thread the policy allows.

NumPy's elementwise functions (the kernel's exp, the distances) run on one core,
and a BLAS call on a thin chunk scales poorly; labelling n points is
embarrassingly parallel, so the rows are split into as many contiguous parts as
the threading policy gives threads (:mod:`mbkkm.backends._threads`: a user's
``threadpool_limits(1)`` or ``OMP_NUM_THREADS=1`` gives one), each part labelled
by :func:`assign` in its own thread, in cache-sized tiles, with single-threaded
BLAS (NumPy and BLAS release the GIL).
"""

from __future__ import annotations

import numpy as np

from ..backends._sparse import is_sparse, row_range
from ..backends._threads import effective_n_threads, parallel_parts
from ._windows import assign

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


def tile_rows(m, itemsize, max_rows=None, sparse=False):
    """Rows of one labelling tile K(S, X_chunk) of about 2 MiB (m support points).

    The tile, its products and its distances then stay in cache, so the pass costs
    the GEMM plus the kernel's elementwise map, not more memory passes.
    ``max_rows`` caps it (a memory budget smaller than one tile). ``sparse``: scipy
    sparse rows, whose tiles are about 4 MiB (see ``_SPARSE_TILE_BYTES``).
    """
    rows = max(16, (_SPARSE_TILE_BYTES if sparse else _TILE_BYTES) // max(1, m * itemsize))
    return rows if max_rows is None else max(1, min(rows, max_rows))


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
        use cache-sized tiles (:func:`tile_rows`), far smaller than any budget.
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
    host = isinstance(state.support, np.ndarray) or is_sparse(state.support)
    if host:
        n_threads = effective_n_threads() if n_threads is None else n_threads
        n_threads = max(1, min(n_threads, n // MIN_ROWS_PER_THREAD))
        rows = max(1, chunk_rows // n_threads)  # the memory budget is shared, not multiplied
        if not kernel.is_callable and state.support.dtype.kind == "f":
            rows = tile_rows(
                state.support.shape[0],
                state.support.dtype.itemsize,
                rows,
                sparse=is_sparse(X) or is_sparse(state.support),
            )

    def label(r0, r1):
        part = X if (r0, r1) == (0, n) else row_range(X, r0, r1)  # a view, also for CSR
        return assign(
            part,
            state,
            kernel,
            chunk_rows=rows,
            return_distances=return_distances,
            progress=count,
        )

    if not host:  # another backend (torch): its own parallelism
        return label(0, n)
    results = parallel_parts(label, n, n_threads)  # one BLAS thread in every part
    if len(results) == 1:
        return results[0]
    return tuple(np.concatenate([r[i] for r in results]) for i in range(len(results[0])))
