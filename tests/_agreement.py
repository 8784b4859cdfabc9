"""Labels from distances that were rounded differently (another backend, another
row partition, another CPU's BLAS kernels): what may be compared exactly.

A label is the argmin of a row of distances. Two computations of the same distances
that differ by rounding give the same label wherever the two nearest centers are
farther apart than the rounding, and may give either of them at a (near) tie. So:

* :func:`assert_nearest`: every label names a nearest center, to rounding (the check
  that holds whatever the ties);
* :func:`assert_same_labels`: two labellings agree wherever the point is not within
  rounding of a tie, and are both nearest where it is;
* :func:`assert_no_near_tie`: no point is within rounding of a tie, which makes the
  labels (and everything a fit computes from them) determined: two fits that should
  agree may then be compared exactly, and a difference is a bug, not rounding.

``rtol`` is relative to the scale of the distances (``1 + max |D|``): use about 1e-9
for float64 computations and 1e-4 for float32 (a kernel distance
k(x, x) - 2 <phi(x), c> + ||c||^2 cancels terms of that scale).
"""

from __future__ import annotations

import numpy as np


def _slack(D, rtol):
    finite = np.abs(D[np.isfinite(D)])  # an empty center's distances may be inf
    return rtol * (1.0 + (float(finite.max()) if finite.size else 0.0))


def tie_gap(D):
    """Per row of D (n, k), the second smallest entry minus the smallest."""
    D = np.asarray(D, dtype=np.float64)
    if D.shape[1] < 2:
        return np.full(D.shape[0], np.inf)
    two = np.partition(D, 1, axis=1)[:, :2]
    return two[:, 1] - two[:, 0]


def assert_nearest(labels, D, rtol):
    """Every ``labels[i]`` is a nearest center of ``D[i]`` to within rounding."""
    labels, D = np.asarray(labels).astype(np.intp), np.asarray(D, dtype=np.float64)
    excess = D[np.arange(D.shape[0]), labels] - D.min(axis=1)
    bad = np.flatnonzero(excess > _slack(D, rtol))
    assert bad.size == 0, (
        f"{bad.size} labels are not a nearest center (first at "
        f"{bad[0]}: {excess[bad[0]]:.3g} above the minimum)"
    )


def assert_same_labels(a, b, D, rtol):
    """``a`` and ``b`` agree at every point not within rounding of a tie of ``D``; where
    they differ, both name a nearest center. Returns the number of differences."""
    a, b = np.asarray(a), np.asarray(b)
    differ = np.flatnonzero(a != b)
    near = tie_gap(D[differ]) <= _slack(D, rtol) if differ.size else np.zeros(0, bool)
    assert near.all(), (
        f"{int((~near).sum())} labels differ away from any tie (first at {differ[~near][0]})"
    )
    assert_nearest(a, D, rtol)
    assert_nearest(b, D, rtol)
    return differ.size


def assert_no_near_tie(D, rtol):
    """No point of ``D`` has two centers within rounding of each other."""
    gap = tie_gap(D)
    assert gap.min() > _slack(D, rtol), (
        f"point {int(gap.argmin())} is within rounding of a tie ({gap.min():.3g}): "
        "its label is not determined by the data"
    )
