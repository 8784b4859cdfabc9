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


def label_tiles(n, m, itemsize, chunk_rows, n_threads=None, tiled=True, sparse=False):
    """(rows per tile, threads) of the host labelling pass of n points against m
    support points: :func:`assign_parallel`'s sizing, which the memory plan reads.

    At most one thread per ``MIN_ROWS_PER_THREAD`` points (``n_threads`` None: the
    threading policy's count), which share the ``chunk_rows`` budget. ``tiled``:
    tiles of about 2 MiB (4 MiB for scipy sparse rows, ``sparse``, see
    ``_SPARSE_TILE_BYTES``), so that the tile, its products and its distances stay
    in cache and the pass costs the GEMM plus the kernel's elementwise map, not more
    memory passes; the budget caps them (a budget smaller than one tile).
    """
    n_threads = effective_n_threads() if n_threads is None else n_threads
    n_threads = max(1, min(n_threads, n // MIN_ROWS_PER_THREAD))
    rows = max(1, chunk_rows // n_threads)  # the memory budget is shared, not multiplied
    if tiled:
        tile = max(16, (_SPARSE_TILE_BYTES if sparse else _TILE_BYTES) // max(1, m * itemsize))
        rows = max(1, min(tile, rows))
    return rows, n_threads


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
        use cache-sized tiles (:func:`label_tiles`), far smaller than any budget.
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
        rows, n_threads = label_tiles(
            n,
            state.support.shape[0],
            state.support.dtype.itemsize,
            chunk_rows,
            n_threads,
            tiled=not kernel.is_callable and state.support.dtype.kind == "f",
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
