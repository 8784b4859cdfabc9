"""Rows of scipy.sparse data: the gathers and sizes the core needs for sparse items.

The core holds its items (the data X, a batch, the support rows S) either as
dense arrays or as scipy.sparse CSR matrices. The functions here take rows,
stack rows and measure rows the same way for both, so the core calls one
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

import numpy as np
import scipy.sparse as sp

__all__ = [
    "as_csr",
    "is_sparse",
    "row_chunks",
    "row_norms_sq",
    "row_range",
    "take_rows",
    "vstack_rows",
]

#: Stored values per chunk of the passes over all of X (overflow check, data-driven
#: gamma): their float64 temporaries then hold a few MB, whatever X's size.
CHUNK_NNZ = 2**19


#: Whether X is a scipy.sparse matrix or array (any format).
is_sparse = sp.issparse


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
    dtype = np.result_type(*[p.dtype for p in parts])
    stacked = sp.vstack(parts, format="csr", dtype=dtype)
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
