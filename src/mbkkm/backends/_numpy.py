"""The numpy backend: host arrays, the reference every other backend must equal, and
the rows of scipy.sparse data that the host holds beside them.

Every method of :class:`NumpyBackend` is the plain numpy operation the core would
call directly (same calls, same buffers), so going through the door costs one
Python attribute lookup per call and nothing else.

The core holds its host items (the data X, a batch, the support rows S) either as
dense arrays or as scipy.sparse CSR matrices. The functions of this module take
rows, stack rows and measure rows the same way for both, so the core calls one
function whatever the input is:

=====================  ======================================================
``is_sparse``          whether X is a scipy.sparse matrix or array
``as_csr``             CSR with sorted indices and no duplicates (CSC -> CSR)
``take_rows``          ``X[idx]`` (repeats allowed), CSR stays CSR
``row_range``          ``X[start:stop]`` without copying the stored values
``row_chunks``         row ranges of at most a given number of stored values
``vstack_rows``        rows of several matrices, one under the other
``row_norms_sq``       ||x||^2 of each row, never densifying
=====================  ======================================================

A sparse result always has sorted column indices (scipy's canonical format), the
dtype of its input and the container kind of its input (``csr_matrix`` or
``csr_array``). Nothing here densifies a sparse input.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ._threads import parallel_parts, threads_for


def _scipy_csr_loop():
    """scipy's compiled loop of ``csr_matrix @ A`` (private: called without building a
    matrix object), or None where this scipy lacks it or calls it otherwise (checked
    on a 2 x 3 product here, once): the public product is used then."""
    try:
        from scipy.sparse._sparsetools import csr_matvecs

        ptr, cols, vals = np.array([0, 2, 3]), np.array([0, 2, 1]), np.array([1.0, 2.0, 3.0])
        A, out = np.arange(6.0).reshape(3, 2), np.zeros((2, 2))
        csr_matvecs(2, 3, 2, ptr, cols, vals, A.ravel(), out.reshape(-1))
        expected = sp.csr_matrix((vals, cols, ptr), shape=(2, 3)) @ A
        return csr_matvecs if np.array_equal(out, expected) else None
    except Exception:  # pragma: no cover - another scipy
        return None


_csr_matvecs = _scipy_csr_loop()

#: Values of A a part of a CSR-times-dense product reads at least (2 MB of float64):
#: below it one thread is faster. Measured on the project's 2-core machine (rows of a
#: 1,797 x 1,797 float64 matrix, 10 rows of M): 5.4e5 values read in all, one thread
#: 0.33 ms, two 0.26 ms; 1.8e6, 1.27 ms against 0.69 ms; 1.8e5, 0.10 ms against 0.18.
MIN_PART_READS = 250_000

#: float64 bytes of one row chunk of the data-driven width (whatever the width of X).
_MSD_CHUNK_BYTES = 64 * 2**20
#: Rows of the blocks in which a chunk is converted to float64 (in cache; same sums).
_MSD_BLOCK_ROWS = 8192


# ------------------------------------------------------------------ scipy sparse rows

#: Stored values per chunk of the passes over all of X (overflow check, data-driven
#: gamma): their float64 temporaries then hold a few MB, whatever X's size.
CHUNK_NNZ = 2**19


#: Whether X is a scipy.sparse matrix or array (any format).
is_sparse = sp.issparse


def _csr_times_dense(indptr, indices, data, A, out):
    """``out += M A`` for the CSR rows of M given by ``indptr`` (which may start past 0:
    a slice of a larger matrix's) into ``indices`` and ``data``; A and ``out`` C order.

    scipy's own loop (``csr_matvecs``, what ``csr_matrix @ A`` runs after checking the
    matrix and allocating the result); the public product where it is missing.
    """
    lo, hi = int(indptr[0]), int(indptr[-1])
    ptr, cols, vals = indptr - lo, indices[lo:hi], data[lo:hi]
    n_rows, (n, n_vecs) = len(ptr) - 1, A.shape
    if _csr_matvecs is None:
        out += sp.csr_matrix((vals, cols, ptr), shape=(n_rows, n)) @ A
    else:
        _csr_matvecs(n_rows, n, n_vecs, ptr, cols, vals, A.ravel(), out.reshape(-1))


def to_dense(X):
    """X as a C-contiguous numpy array (a scipy sparse matrix densified)."""
    return X.toarray() if is_sparse(X) else np.ascontiguousarray(X)


def as_csr(X):
    """X as CSR in canonical form (sorted indices, no duplicate entries).

    CSC, COO and the other formats are converted once; a CSR input that is
    already canonical is returned as is (no copy), one with unsorted indices or
    duplicates is copied, never modified in place.

    Parameters
    ----------
    X : scipy.sparse matrix or array of shape (n, d)

    Returns
    -------
    csr : the same container kind (``csr_matrix`` or ``csr_array``)
    """
    if not sp.issparse(X):
        raise TypeError(f"expected a scipy.sparse matrix, got {type(X).__name__}")
    if X.format != "csr" or not X.has_canonical_format:
        # a new object (converted, or copied): canonicalising it in place is safe
        X = X.tocsr() if X.format != "csr" else X.copy()
        X.sum_duplicates()
    return X


def take_rows(X, idx):
    """``X[idx]``: the rows ``idx`` (repeats allowed), in that order, as a copy.

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix of shape (n, ...)
    idx : array of int of shape (b,)

    Returns
    -------
    rows : ndarray, or CSR with sorted indices, of shape (b, ...) and X's dtype
    """
    if not sp.issparse(X):
        return X[idx]
    if X.format != "csr":
        X = as_csr(X)
    rows = X[np.asarray(idx, dtype=np.intp)]
    rows.sort_indices()  # a no-op when scipy kept them sorted
    return rows


def row_range(X, start, stop):
    """``X[start:stop]``: a view for dense X, and for CSR a matrix sharing X's values.

    scipy's ``X[start:stop]`` copies the stored values and indices of the rows; the
    labelling pass reads every row of X once in such ranges (and splits X into
    per-thread parts), so copies would add the size of X to the peak memory. Here
    the result's ``data`` and ``indices`` are views into X's; only the
    ``stop - start + 1`` row pointers are new. A CSR X is assumed canonical (as
    :func:`as_csr` returns it): so is the result, and it is marked so.

    Parameters
    ----------
    X : ndarray or CSR matrix of shape (n, ...)
    start, stop : int
        Clipped to [0, n] as Python slices are (no step).
    """
    if not sp.issparse(X):
        return X[start:stop]
    if X.format != "csr":
        raise TypeError(f"row_range needs CSR rows, got format {X.format!r}")
    start, stop, _ = slice(start, stop).indices(X.shape[0])
    stop = max(start, stop)
    lo, hi = int(X.indptr[start]), int(X.indptr[stop])
    indptr = X.indptr[start : stop + 1] - X.indptr[start]
    # Built empty, then given the views: the (data, indices, indptr) constructor
    # "prunes" views of larger arrays, that is, copies them.
    out = type(X)((stop - start, X.shape[1]), dtype=X.dtype)
    out.indptr, out.indices, out.data = indptr, X.indices[lo:hi], X.data[lo:hi]
    if X.has_canonical_format:
        out.has_canonical_format = True  # a range of canonical rows is canonical
    return out


def row_chunks(X, max_nnz=CHUNK_NNZ):
    """Consecutive row ranges ``(start, stop)`` covering the rows of a CSR X, each with
    at most ``max_nnz`` stored values (or one row when a row alone holds more).

    A pass over X in these ranges (with :func:`row_range`) needs temporaries of
    O(max_nnz) values, where fixed row counts would need O(rows x longest rows).
    """
    n = X.shape[0]
    start = 0
    while start < n:
        # the last row whose end pointer stays within max_nnz of this range's start
        stop = int(np.searchsorted(X.indptr, X.indptr[start] + max_nnz, side="right")) - 1
        stop = min(n, max(stop, start + 1))
        yield start, stop
        start = stop


def vstack_rows(parts):
    """The rows of ``parts`` one under the other (a new matrix).

    Dense parts are joined with :func:`numpy.concatenate`; sparse parts (any
    format) with :func:`scipy.sparse.vstack` into CSR. Mixing dense and sparse
    parts is refused (it would densify or hide a bug).

    Parameters
    ----------
    parts : sequence of ndarray, or of scipy.sparse matrices, with equal numbers of columns

    Returns
    -------
    stacked : ndarray, or CSR with sorted indices, of shape (sum of rows, d)
        For sparse parts the dtype is the common dtype of the parts; with no
        rows at all, an empty (0, d) CSR of that dtype.
    """
    parts = list(parts)
    if not parts:
        raise ValueError("vstack_rows needs at least one part")
    n_sparse = sum(sp.issparse(p) for p in parts)
    if n_sparse == 0:
        return np.concatenate(parts, axis=0)
    if n_sparse != len(parts):
        raise TypeError("vstack_rows: cannot stack dense and sparse rows together")
    d = {p.shape[1] for p in parts}
    if len(d) != 1:
        raise ValueError(f"vstack_rows: the parts have different numbers of columns {sorted(d)}")
    stacked = sp.vstack(parts, format="csr")  # in the parts' common dtype
    stacked.sort_indices()
    return stacked


def row_norms_sq(X):
    """||x||^2 for each row, shape (n,), in X's dtype; a sparse X is not densified.

    For CSR the squares of the stored values are summed per row (duplicates are
    summed first, so a non-canonical matrix gives the norms of the matrix it
    represents); empty rows have norm 0.
    """
    if not sp.issparse(X):
        return np.einsum("ij,ij->i", X, X)
    X = as_csr(X)
    data = X.data[: X.indptr[-1]]
    sq = data * data
    out = np.zeros(X.shape[0], dtype=sq.dtype)
    starts = X.indptr[:-1]
    nonempty = X.indptr[1:] > starts
    if sq.size:
        # reduceat sums sq[starts[i]:starts[next nonempty]]; the empty rows in
        # between own no entries, so that is exactly row i.
        out[nonempty] = np.add.reduceat(sq, starts[nonempty])
    return out


# ------------------------------------------------------------------ the backend


@dataclass(frozen=True)
class NumpyBackend:
    """Array operations of the core on numpy arrays (see :mod:`mbkkm.backends`); every
    instance is the same backend (no fields: equal, one hash, ``NumpyBackend()``)."""

    name = "numpy"
    device = "cpu"
    is_host = True

    # ------------------------------------------------------------ conversions
    def asarray(self, a, dtype=None):
        """A host array -> an array of this backend (here: no copy when possible)."""
        return np.asarray(a, dtype=dtype)

    def to_numpy(self, x):
        """An array of this backend -> a host numpy array (here: itself)."""
        return np.asarray(x)

    def index(self, idx):
        """Host integer indices -> indices this backend can gather with."""
        return idx

    def float_dtype(self, x):
        """The floating dtype the core computes in for items ``x`` (None: not floats)."""
        return np.result_type(x.dtype, np.float32) if x.dtype.kind == "f" else None

    def empty(self, shape, dtype):
        return np.empty(shape, dtype=dtype)

    def copy(self, x):
        return x.copy()

    # --------------------------------------------------------------- products
    def csr_matmul(self, indptr, indices, data, A):
        """R = M A with M the CSR matrix (indptr, indices, data) and A of shape (n, p):
        R has shape (len(indptr) - 1, p).

        ``indices=None`` means contiguous segments (row q of M covers columns
        ``indptr[q]:indptr[q + 1]``). scipy's CSR-times-dense product reads each row
        of A once per non-zero, in one compiled loop whatever the number of rows of
        M (measured: as fast as one matrix-vector product per segment at k = 10,
        10x faster at k = 1000, where a dense block-diagonal GEMM is 100x slower).

        The product reads rows of A scattered in memory, so it is bound by memory,
        not by arithmetic: the rows of M are cut into parts of about equal non-zeros,
        one part a thread, where each part reads at least :data:`MIN_PART_READS`
        values of A. Every row of R is the same loop over the same non-zeros in
        either case, so R is the same to the bit with one thread or several.
        """
        n_rows = len(indptr) - 1
        if indices is None:
            indices = np.arange(A.shape[0])
        A = np.ascontiguousarray(A)
        indptr = np.asarray(indptr, dtype=np.intp)
        indices = np.asarray(indices, dtype=np.intp)
        data = np.asarray(data, dtype=A.dtype)
        out = np.zeros((n_rows, *A.shape[1:]), dtype=A.dtype)
        nnz = int(indptr[-1])
        n_threads = threads_for(nnz * A.shape[1], min_part=MIN_PART_READS)

        def part(start, stop):
            # the rows whose non-zeros start in [start, stop) (empty rows stay 0)
            r0, r1 = np.searchsorted(indptr[:-1], [start, stop])
            if stop == nnz:
                r1 = n_rows
            if r1 > r0:
                _csr_times_dense(indptr[r0 : r1 + 1], indices, data, A, out[r0:r1])

        if n_threads > 1:
            parallel_parts(part, nnz, n_threads)
        else:
            _csr_times_dense(indptr, indices, data, A, out)
        return out

    def distances_T(self, P, diag, norms):
        """D[j, x] = K(x, x) - 2 P[j, x] + c_j, in place in P, shape (k, n)."""
        P *= -2
        P += np.asarray(diag, dtype=P.dtype)[None, :]
        P += np.asarray(norms, dtype=P.dtype)[:, None]
        return P

    # ---------------------------------------------------------------- uploads
    def upload_indices(self, *arrays):
        """Host integer arrays -> flat index arrays of this backend (here: the arrays)."""
        return tuple(np.asarray(a, dtype=np.intp).ravel() for a in arrays)

    def upload_floats(self, *arrays):
        """Host float arrays -> flat float64 arrays of this backend (here: the arrays)."""
        return tuple(np.asarray(a, dtype=np.float64).ravel() for a in arrays)

    # ---------------------------------------------------------------- gathers
    def take(self, x, idx, axis=0):
        """``x[idx]`` along ``axis`` (a copy); idx from :meth:`index`. CSR rows stay CSR."""
        if axis == 0:
            return take_rows(x, idx) if sp.issparse(x) else x[idx]
        return x[:, idx]

    def new_support(self, S, rows_kept, Xb, new_pos):
        """The support after an iteration: ``S[rows_kept]`` then ``Xb[new_pos]``, one array.

        Dense rows: one buffer filled by two gathers (no temporary). CSR rows: the
        two row gathers stacked, still CSR, never densified. The support keeps its
        kind (that of the data it was initialised from): with ``partial_fit`` batches
        of the other kind, the new rows are converted (sparse rows joining a dense
        support are densified, dense rows joining a CSR support become CSR).
        """
        if isinstance(S, np.ndarray) and isinstance(Xb, np.ndarray):
            m_kept = rows_kept.shape[0]
            support = np.empty((m_kept + new_pos.shape[0], *Xb.shape[1:]), S.dtype)
            np.take(S, rows_kept, axis=0, out=support[:m_kept])
            if Xb.dtype == S.dtype:
                np.take(Xb, new_pos, axis=0, out=support[m_kept:])
            else:  # a partial_fit batch of another dtype: take's cast into out reads
                support[m_kept:] = Xb[new_pos]  # its buffer before writing it (a warning)
            return support
        new = take_rows(Xb, new_pos)
        if not sp.issparse(S):  # dense support, sparse batch
            return np.concatenate([S[rows_kept], new.toarray()]).astype(S.dtype, copy=False)
        if not sp.issparse(new):  # CSR support, dense batch
            new = type(S)(new)
        return vstack_rows([take_rows(S, rows_kept), new]).astype(S.dtype, copy=False)

    def reshape(self, x, shape):
        return x.reshape(shape)

    def astype(self, x, dtype):
        return np.asarray(x).astype(dtype, copy=False)

    # ------------------------------------------------------------- reductions
    def clip_min_(self, x, value):
        np.maximum(x, value, out=x)
        return x

    def argmin_min(self, D, axis=1):
        """Argmin and minimum of D along ``axis`` (rows: 1, columns: 0)."""
        lab = np.argmin(D, axis=axis)
        other = np.arange(len(lab))
        return lab, (D[other, lab] if axis == 1 else D[lab, other])

    def mean_squared_pairwise_distance(self, X, sample_weight=None):
        """mean_{x,y} ||x - y||^2 over the ordered pairs of rows of X (weighted), a float.

        mean_{x,y} ||x - y||^2 = 2 mean_x ||x||^2 - 2 ||mean_x x||^2 = 2 sum_f Var(X[:, f]).
        Two passes (mean, then centred squares) for accuracy on data far from 0,
        accumulated in float64 over row chunks, so a float32 memmap is never copied
        whole.
        """
        n, d = X.shape
        w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        total = float(n) if w is None else float(w.sum())
        step = max(1, _MSD_CHUNK_BYTES // (8 * max(1, d)))  # rows of one float64 chunk
        if w is None:
            return 2.0 * _centred_squares(X, step) / total
        s = np.zeros(d)
        # One float64 chunk alive at a time (a temporary, or ``del`` before the next).
        for start in range(0, n, step):
            s += w[start : start + step] @ np.asarray(X[start : start + step], dtype=np.float64)
        mean = s / total
        ss = 0.0
        for start in range(0, n, step):
            chunk = np.array(X[start : start + step], dtype=np.float64)
            chunk -= mean
            ss += float(w[start : start + step] @ np.einsum("ij,ij->i", chunk, chunk))
            del chunk
        return 2.0 * ss / total

    # ---------------------------------------------- full-batch Lloyd (KernelKMeans)
    def one_hot(self, labels, values, n_columns):
        """(n, n_columns) float64 matrix with ``values[i]`` at (i, labels[i]), 0 elsewhere."""
        A = np.zeros((labels.shape[0], n_columns))
        A[np.arange(labels.shape[0]), labels] = values
        return A

    def flatnonzero(self, mask):
        """Positions of the true entries of a 1-D mask."""
        return np.flatnonzero(mask)

    def largest(self, score, n):
        """Positions of the ``n`` largest entries of ``score``, largest first."""
        top = np.argpartition(score, -n)[-n:]
        return top[np.argsort(-score[top], kind="stable")]

    def scalars_to_host(self, *values):
        """0-d arrays of this backend -> Python floats (on a device: one copy for all)."""
        return tuple(float(v) for v in values)

    def free_memory(self):
        """Free bytes on this backend's device (None: the host, not measured)."""
        return None


def _centred_squares(X, step):
    """sum_x ||x - mean||^2 over the rows of X in float64, as two passes over chunks of
    ``step`` rows compute it: the column sums of each chunk (down each column, row
    after row) added chunk after chunk, then each chunk's squared norms of its
    centred rows summed, those sums added chunk after chunk.

    The same numbers, faster: a chunk is converted to float64 in blocks of
    :data:`_MSD_BLOCK_ROWS` rows that stay in cache (a block's column sums start
    from the chunk's running sums, its squared norms go into the chunk's), and the
    chunks are computed in row parts on the thread policy's threads, their results
    added in chunk order.
    """
    n, d = X.shape
    starts = range(0, n, step)

    def column_sums(start):
        block = np.empty((min(_MSD_BLOCK_ROWS, step) + 1, d))
        sums = np.zeros(d)
        for a in range(start, min(n, start + step), _MSD_BLOCK_ROWS):
            rows = X[a : min(n, start + step, a + _MSD_BLOCK_ROWS)]
            block[0] = sums
            block[1 : rows.shape[0] + 1] = rows
            sums = block[: rows.shape[0] + 1].sum(0)
        return sums

    def squares(start):
        sq = np.empty(min(n, start + step) - start)
        block = np.empty((min(_MSD_BLOCK_ROWS, step), d))
        for a in range(0, sq.shape[0], _MSD_BLOCK_ROWS):
            part = block[: min(sq.shape[0] - a, _MSD_BLOCK_ROWS)]
            part[...] = X[start + a : start + a + part.shape[0]]
            part -= mean
            np.einsum("ij,ij->i", part, part, out=sq[a : a + part.shape[0]])
        return sq.sum()

    def in_parts(per_chunk):
        parts = parallel_parts(
            lambda i, j: [per_chunk(start) for start in starts[i:j]],
            len(starts),
            threads_for(n * d),
        )
        return [value for part in parts for value in part]

    # the chunks' results added in chunk order, from zeros (sum: left to right)
    mean = sum(in_parts(column_sums), np.zeros(d)) / n
    return sum(in_parts(squares), 0.0)
