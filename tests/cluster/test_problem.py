"""The fit problem and the input adapters (mbkkm.cluster._base, _rows)."""

from __future__ import annotations

import dataclasses
import importlib.util

import numpy as np
import pytest
import scipy.sparse as sp

from mbkkm import KernelKMeans, MiniBatchKernelKMeans
from mbkkm.cluster._base import (
    GraphKernel,
    PointKernel,
    PrecomputedKernel,
    fit_input,
    kernel_kind,
    resolve_problem,
)
from mbkkm.cluster._rows import (
    DaskArrayRows,
    GraphRows,
    PrecomputedRows,
    Rows,
    SparseRows,
    TensorRows,
    rows_of,
)
from mbkkm.kernels import resolve_kernel
from mbkkm.kernels._index import IndexKernel
from mbkkm.kernels._protocol import ResolvedKernel

X = np.random.RandomState(0).rand(60, 4)
IDX = np.array([3, 0, 17, 59])


def _kinds_of_x(tmp_path):
    memmap = np.lib.format.open_memmap(
        tmp_path / "x.npy", mode="w+", dtype=np.float32, shape=X.shape
    )
    memmap[:] = X
    yield "ndarray", X, Rows
    yield "memmap", memmap, Rows
    yield "csr", sp.csr_matrix(X), SparseRows
    yield "csc", sp.csc_matrix(X), SparseRows
    if importlib.util.find_spec("torch") is not None:
        import torch

        yield "tensor", torch.from_numpy(X), TensorRows
    if importlib.util.find_spec("dask") is not None:
        import dask.array as da

        yield "dask", da.from_array(X, chunks=16), DaskArrayRows


def test_one_adapter_per_kind_and_the_same_host_rows(tmp_path):
    for name, data, adapter in _kinds_of_x(tmp_path):
        rows = rows_of(data)
        assert type(rows) is adapter, name
        host = rows.host_rows(IDX)
        host = host.toarray() if sp.issparse(host) else host
        assert host.dtype == np.float64, name
        # the oracle: the rows, read the plainest way
        np.testing.assert_allclose(
            host,
            np.asarray(X[IDX], dtype=np.float64),
            rtol=1e-6 if name == "memmap" else 0,
            err_msg=name,
        )


def test_the_kernel_kind_decides_the_fit_adapter():
    assert isinstance(kernel_kind("rbf"), PointKernel)
    assert isinstance(kernel_kind(lambda a, b: a @ b.T), PointKernel)
    assert type(kernel_kind("precomputed")) is PrecomputedKernel
    assert type(kernel_kind("knn")) is GraphKernel
    facts = {"kernel": "precomputed", "tau": 10, "device": None}
    assert type(kernel_kind("precomputed").fit_rows(X @ X.T, **facts)) is PrecomputedRows
    assert type(kernel_kind("heat").fit_rows(X, **facts)) is GraphRows
    assert type(kernel_kind("rbf").fit_rows(sp.csr_matrix(X), **facts)) is SparseRows


def _problem(est, X, w):
    data = fit_input(X, w, est)
    return data, resolve_problem(est, data)


@pytest.mark.parametrize("Est", [KernelKMeans, MiniBatchKernelKMeans])
def test_fit_input_and_the_problem_are_frozen_values(Est):
    est = Est(3, gamma=0.5, random_state=0)
    w = np.arange(1.0, 61.0)
    data, problem = _problem(est, X, w)
    assert data.n_features_in == 4 and data.feature_names_in is None and not data.tensor_io
    assert type(problem.rows) is Rows and problem.items is problem.rows.data
    assert problem.n_samples == 60 and problem.gamma == 0.5 and problem.itemsize == 8
    np.testing.assert_array_equal(problem.sample_weight, w)
    assert isinstance(problem.kernel, ResolvedKernel)
    with pytest.raises(dataclasses.FrozenInstanceError):
        problem.kernel = None
    with pytest.raises(dataclasses.FrozenInstanceError):
        data.rows = None
    _, pre = _problem(Est(3, kernel="precomputed"), X @ X.T, None)
    assert pre.rows.is_index and pre.is_index and pre.gamma is None
    np.testing.assert_array_equal(pre.items, np.arange(60))
    # the estimator is read, never written: nothing fitted appears on it
    assert not [name for name in vars(est) if name.endswith("_") or name.startswith("_")]


def test_resolved_kernels_share_the_protocol():
    assert isinstance(resolve_kernel("rbf", gamma=1.0), ResolvedKernel)
    assert isinstance(resolve_kernel(lambda a, b: a @ b.T), ResolvedKernel)
    assert isinstance(IndexKernel("precomputed", X @ X.T), ResolvedKernel)
    assert not isinstance(object(), ResolvedKernel)


def test_init_is_checked_by_the_adapter_of_its_kind():
    with pytest.raises(ValueError, match="init: the initial centers should have shape"):
        KernelKMeans(3, init=X[:2]).fit(X)
    with pytest.raises(ValueError, match="point indices in"):
        MiniBatchKernelKMeans(3, kernel="precomputed", init=np.array([0, 1, 60])).fit(X @ X.T)
