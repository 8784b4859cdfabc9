"""Rows far from the origin: the kernel's offset (:func:`origin_offset`).

The oracle is the kernel of float64 rows, centred before the products, against
which the float32 tiles of far-off rows lose every digit without the offset.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_blobs, make_circles
from sklearn.metrics import adjusted_rand_score
from sklearn.metrics.pairwise import euclidean_distances

from mbkkm import KernelKMeans, MiniBatchKernelKMeans, MiniBatchKMeans
from mbkkm.kernels import resolve_kernel
from mbkkm.kernels._kernel import OFFSET_RATIO, origin_offset


def _far(n=300, d=3, seed=0, centre=3000.0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return (centre + rng.normal(size=(n, d))).astype(dtype)


def _rbf_oracle(X, Y, gamma):
    """exp(-gamma ||x - y||^2) from float64 rows centred first: exact to rounding."""
    mu = np.asarray(X, dtype=np.float64).mean(axis=0)
    X64, Y64 = np.asarray(X, np.float64) - mu, np.asarray(Y, np.float64) - mu
    return np.exp(-gamma * euclidean_distances(X64, Y64, squared=True))


def test_origin_offset_rule():
    near = np.random.default_rng(0).normal(size=(500, 4))
    assert origin_offset(near) is None
    assert origin_offset(near + 1.0) is None  # |mu|^2 = 4 < 64 x spread 4
    far = near + 100.0
    np.testing.assert_allclose(origin_offset(far), far.mean(axis=0))
    # the threshold: |mu|^2 against OFFSET_RATIO x the mean squared spread
    spread = np.mean(np.sum((near - near.mean(0)) ** 2, axis=1))
    shift = np.sqrt(OFFSET_RATIO * spread / 4) * 1.01  # along the four axes
    assert origin_offset(near - near.mean(0) + shift) is not None
    assert origin_offset(sp.csr_matrix(far)) is None  # sparse rows stay sparse


def test_rbf_tiles_of_far_rows_equal_the_centred_oracle():
    X, Y = _far(300), _far(170, seed=1)
    kernel = resolve_kernel("rbf", gamma=0.5)
    oracle = _rbf_oracle(X, Y, 0.5)
    assert np.abs(kernel(X, Y) - oracle).max() > 0.1  # without the offset: no digit left
    kernel.offset = origin_offset(X)
    np.testing.assert_allclose(kernel(X, Y), oracle, atol=1e-5)
    np.testing.assert_allclose(kernel(X, Y, **kernel.prepare(X)), oracle, atol=1e-5)
    np.testing.assert_allclose(kernel(X, Y, **kernel.prepare_right(Y)), oracle, atol=1e-5)
    np.testing.assert_allclose(kernel.tile(X[:7], Y), oracle[:7], atol=1e-5)
    np.testing.assert_array_equal(kernel.diag(X), np.ones(300, dtype=np.float32))
    # a memory map (read-only, an ndarray subclass) and CSR rows: the same values
    Xr = X.copy()
    Xr.flags.writeable = False
    np.testing.assert_allclose(kernel(Xr, sp.csr_matrix(Y)), oracle, atol=1e-5)


def test_rbf_tiles_of_far_rows_in_row_parts(monkeypatch):
    """A tile large enough for row parts on threads: the parts shift as one call does."""
    from mbkkm.kernels import _kernel

    monkeypatch.setattr(_kernel, "threads_for", lambda *a, **k: 2)
    X, Y = _far(400), _far(90, seed=1)
    kernel = resolve_kernel("rbf", gamma=0.5)
    kernel.offset = origin_offset(X)
    np.testing.assert_allclose(kernel(X, Y), _rbf_oracle(X, Y, 0.5), atol=1e-5)


def test_rbf_torch_tiles_of_far_rows():
    torch = pytest.importorskip("torch")
    X, Y = _far(200), _far(60, seed=1)
    kernel = resolve_kernel("rbf", gamma=0.5)
    kernel.offset = origin_offset(X)
    got = kernel.tile(torch.as_tensor(X), torch.as_tensor(Y)).numpy()
    np.testing.assert_allclose(got, _rbf_oracle(X, Y, 0.5), atol=1e-5)


def test_linear_kernel_with_an_offset_keeps_euclidean_distances():
    """The linear kernel of shifted rows: its K(x,x) - 2 K(x,y) + K(y,y) are the
    squared distances of the rows, their digits kept."""
    X = _far(100)
    kernel = resolve_kernel("linear")
    kernel.offset = origin_offset(X)
    D = kernel.diag(X)[:, None] - 2 * kernel(X, X) + kernel.diag(X)[None, :]
    exact = euclidean_distances(X.astype(np.float64), squared=True)
    np.testing.assert_allclose(D, exact, atol=1e-3 * exact.max())


def _latlon():
    X, y = make_blobs(3000, n_features=2, centers=5, cluster_std=0.5, random_state=0)
    return (np.array([48.85, 2.35]) + X * 0.002).astype(np.float32), y


@pytest.mark.parametrize("cls", [KernelKMeans, MiniBatchKernelKMeans, MiniBatchKMeans])
def test_float32_coordinates_far_from_the_origin_cluster_as_float64(cls):
    """Latitude and longitude in float32 (spread 0.01 around 48.85, 2.35): ARI 0.25
    (0.13 for MiniBatchKMeans) before the offset, against 1.00 in float64."""
    X, y = _latlon()
    est = cls(5, random_state=0).fit(X)
    ref = cls(5, random_state=0).fit(X.astype(np.float64))
    assert adjusted_rand_score(y, est.labels_) > 0.99
    assert adjusted_rand_score(ref.labels_, est.labels_) > 0.99
    np.testing.assert_array_equal(est.predict(X), est.labels_)


@pytest.mark.parametrize("cls", [KernelKMeans, MiniBatchKernelKMeans])
@pytest.mark.parametrize(("shift", "dtype"), [(3000.0, np.float32), (1e8, np.float64)])
def test_shifted_circles_cluster_as_centred_ones(cls, shift, dtype):
    X, y = make_circles(1500, factor=0.5, noise=0.05, random_state=0)
    est = cls(2, random_state=0).fit((X + shift).astype(dtype))
    assert adjusted_rand_score(y, est.labels_) > 0.99
    assert est.kernel_.offset is not None


def test_data_near_the_origin_get_no_offset():
    X, _ = make_blobs(500, n_features=3, random_state=0)
    assert MiniBatchKernelKMeans(3, random_state=0, max_iter=5).fit(X).kernel_.offset is None
