"""Input checks shared by the estimators (:mod:`mbkkm.cluster`) and the Dask data
source (:mod:`mbkkm._dask`).

The lowest layer beside :mod:`mbkkm.backends`: it imports nothing from mbkkm, so
both can use it without importing each other.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils.validation import _check_sample_weight

__all__ = ["check_sample_weight"]


def check_sample_weight(sample_weight, X, dtype=np.float64):
    """Validated, non-negative weights with a positive sum (or None for unit weights)."""
    if sample_weight is None:
        return None
    try:
        sw = _check_sample_weight(sample_weight, X, dtype=dtype, ensure_non_negative=True)
    except ValueError as exc:
        msg = str(exc)
        if "sample_weight" not in msg:
            msg = f"sample_weight: {msg}"
        raise ValueError(msg) from exc
    if not np.all(np.isfinite(sw)):
        raise ValueError("sample_weight must be finite")
    if sw.sum() <= 0:
        raise ValueError("sample_weight must have a positive sum; got all zeros")
    return sw
