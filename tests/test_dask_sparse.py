"""Dask arrays whose chunks are scipy.sparse matrices are refused with a clear error."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

da = pytest.importorskip("dask.array")

from mbkkm import MiniBatchKernelKMeans  # noqa: E402
from mbkkm._dask import check_dask_array  # noqa: E402


def _sparse_dask():
    rng = np.random.default_rng(0)
    X = rng.random((40, 6)) * (rng.random((40, 6)) < 0.3)
    Xd = da.from_array(X, chunks=(10, 6))
    return X, Xd.map_blocks(sp.csr_matrix, dtype=X.dtype)


def test_check_dask_array_refuses_sparse_chunks():
    _, Xs = _sparse_dask()
    assert sp.issparse(Xs._meta)
    with pytest.raises(
        ValueError,
        match=r"scipy\.sparse chunks.*compute it into one "
        r"scipy\.sparse CSR.*densify its chunks",
    ):
        check_dask_array(Xs)
    with pytest.raises(ValueError, match="input_X"):
        check_dask_array(Xs, input_name="input_X")


def test_dense_dask_array_still_accepted():
    X, _ = _sparse_dask()
    out = check_dask_array(da.from_array(X, chunks=(10, 6)))
    np.testing.assert_array_equal(out.compute(), X)


def test_estimator_refuses_sparse_dask_in_fit_and_predict():
    X, Xs = _sparse_dask()
    km = MiniBatchKernelKMeans(n_clusters=2, batch_size=8, max_iter=2, gamma=1.0, random_state=0)
    with pytest.raises(ValueError, match=r"scipy\.sparse chunks"):
        km.fit(Xs)
    km.fit(X)
    with pytest.raises(ValueError, match=r"scipy\.sparse chunks"):
        km.predict(Xs)
