"""The check that finite data fit the kernel arithmetic of their dtype."""

from __future__ import annotations

import numpy as np
from scipy.sparse import issparse

from ..backends import _sparse

_OVERFLOW_CHUNK = 65536


def check_no_overflow(X, kernel=None, input_name="X"):
    """Raise a ValueError when X is finite but too large for the kernel arithmetic.

    The kernel blocks are computed in X's dtype from squared row norms and dot
    products (||x - y||^2 = ||x||^2 - 2 <x, y> + ||y||^2), so finite data whose
    squared norms overflow (|x| above about 1e154 in float64, 1e19 in float32)
    would silently give NaN distances. With a resolved point ``kernel``, K(x, x)
    must be finite too (for a positive semi-definite kernel that bounds every
    |K(x, y)| <= sqrt(K(x, x) K(y, y))). Read in row chunks (a memmap is never
    loaded whole, a scipy sparse X never densified: its rows are read in ranges of
    bounded stored values that share X's arrays). Dask inputs and non-arrays are
    skipped.
    """
    sparse = issparse(X)
    if sparse:
        X = _sparse.as_csr(X)
    elif not isinstance(X, np.ndarray) or X.ndim != 2:
        return
    if X.dtype.kind != "f":
        return
    check_diag = kernel is not None and not kernel.is_callable
    with np.errstate(over="ignore", invalid="ignore"):
        ranges = (
            _sparse.row_chunks(X)
            if sparse
            else ((s, s + _OVERFLOW_CHUNK) for s in range(0, X.shape[0], _OVERFLOW_CHUNK))
        )
        for start, stop in ranges:
            # a view (a CSR range shares X's arrays)
            chunk = _sparse.row_range(X, start, stop) if sparse else X[start:stop]
            sq = _sparse.row_norms_sq(chunk) if sparse else np.einsum("ij,ij->i", chunk, chunk)
            if not np.all(np.isfinite(sq)):
                big = float(np.max(np.abs(chunk.data if sparse else chunk)))
                scaler = "MaxAbsScaler" if sparse else "StandardScaler"
                raise ValueError(
                    f"{input_name} has values too large for {X.dtype} arithmetic: squared "
                    f"row norms overflow (max |{input_name}| = {big:.3g}). Rescale "
                    f"{input_name} (for example with sklearn.preprocessing.{scaler})"
                    + (" or use float64" if X.dtype != np.float64 else "")
                )
            if check_diag:
                diag = np.asarray(kernel.diag(chunk))
                if not np.all(np.isfinite(diag)):
                    raise ValueError(
                        f"{input_name}: the kernel {kernel!r} overflows in {X.dtype} on "
                        f"these values (K(x, x) is not finite). Rescale {input_name} or "
                        "change the kernel parameters"
                    )
