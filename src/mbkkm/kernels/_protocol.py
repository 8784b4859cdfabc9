"""What the core needs of a resolved kernel, whatever it is built on.

Two kinds implement it: :class:`mbkkm.kernels.Kernel` (a kernel on points: named
or a user's callable, every parameter resolved) and
:class:`mbkkm.kernels._index.IndexKernel` (a stored kernel matrix whose items are
point indices: "precomputed" and the graph kernels). The core and the estimators
read only these members (the backends never call a kernel), so either can stand wherever a kernel is
passed, in the spirit of scipy's ``LinearOperator``: a small interface, not a
class hierarchy.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class ResolvedKernel(Protocol):
    """A kernel with every parameter resolved: blocks K(A, B) and diagonals K(a, a).

    Attributes
    ----------
    name : str
        Registry name, ``"callable"``, ``"precomputed"``, ``"knn"`` or ``"heat"``.
    params : dict
        The resolved parameters (for display, and ``gamma_`` for the estimators).
    is_callable : bool
        Whether the blocks come from a user's callable: it allocates its own
        result (no ``out=`` buffer is passed) and is checked for finite values.
    normalized : bool
        Whether K(x, x) = 1 for every x (rbf, laplacian, cosine), so the diagonal
        need not be computed.
    """

    name: str
    params: dict
    is_callable: bool
    normalized: bool

    def tile(self, X, Y, out=None):
        """K(X, Y), shape (len(X), len(Y)), into ``out`` when given; the library
        (numpy or torch) is X's."""

    def diag(self, X):
        """K(x, x) for each item of X, shape (len(X),)."""
