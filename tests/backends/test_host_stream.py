"""A labelling pass over host rows on a torch device (:class:`HostRowStream`).

The oracles: the same per-row computation in numpy (for the stream alone), and the
pass over the same rows as a tensor on the device, where nothing streams (for the
estimators' predict, transform and score).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from _backend_params import HAS_TORCH, needs_cuda, needs_torch
from sklearn.datasets import make_blobs

from mbkkm import MiniBatchKernelKMeans

DEVICES = [
    pytest.param("cpu", id="torch-cpu", marks=needs_torch),
    pytest.param("cuda", id="torch-cuda", marks=[pytest.mark.gpu, needs_cuda]),
]
PARAMS = dict(n_clusters=5, batch_size=256, tau=50, max_iter=30, random_state=0)


@pytest.fixture(scope="module")
def blobs():
    X, _ = make_blobs(3001, centers=5, n_features=7, cluster_std=0.8, random_state=1)
    return X


def _stream_pass(device, X, chunk_rows, dtype):
    """Per row: its sum, the index of its largest value and the row doubled, through
    the stream."""
    import torch

    from mbkkm.backends._torch import HostRowStream

    stream = HostRowStream(device, X, chunk_rows, dtype)
    for start in range(0, X.shape[0], chunk_rows):
        rows = stream.rows(start, start + chunk_rows)
        assert rows.device.type == torch.device(device).type and rows.dtype == dtype
        stream.results(start, rows.sum(1), rows.argmax(1), (2 * rows).T.T)
    return stream.finish()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("chunk_rows", [1, 7, 1000, 3001, 5000])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_stream_is_the_rowwise_oracle(blobs, device, chunk_rows, dtype):
    import torch

    X = blobs[:, ::-1]  # not contiguous, float64: cast or copied into the buffers
    if chunk_rows == 1:
        X = X[:50]
    sums, argmax, doubled = _stream_pass(device, X, chunk_rows, getattr(torch, dtype))
    Xd = np.ascontiguousarray(X, dtype=dtype)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(sums, Xd.sum(1), rtol=tol, atol=tol)
    np.testing.assert_array_equal(argmax, Xd.argmax(1))
    np.testing.assert_array_equal(doubled, 2 * Xd)
    assert sums.dtype == dtype and argmax.dtype == np.int64 and doubled.shape == X.shape


@pytest.mark.parametrize("device", DEVICES)
def test_stream_reads_a_read_only_memmap_without_warnings(blobs, device, tmp_path):
    import torch

    np.save(tmp_path / "X.npy", blobs.astype(np.float32))
    X = np.load(tmp_path / "X.npy", mmap_mode="r")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns on arrays that are not writable
        sums, *_ = _stream_pass(device, X, 500, torch.float32)
    np.testing.assert_allclose(sums, blobs.astype(np.float32).sum(1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", ["torch-cpu", pytest.param("cuda", marks=DEVICES[1].marks)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_host_rows_label_as_the_tensor(blobs, device, dtype):
    # numpy X on a model fitted on a torch device streams; the same rows as a tensor
    # on the device do not: the same labels, distances and score, in numpy.
    if not HAS_TORCH:
        pytest.skip("torch is not installed")
    import torch

    X = blobs.astype(dtype)
    dev = "cpu" if device == "torch-cpu" else device
    # working_memory small enough for several chunks
    est = MiniBatchKernelKMeans(device=device, working_memory=0.05, **PARAMS).fit(X)
    ref = MiniBatchKernelKMeans(device=device, working_memory=0.05, **PARAMS)
    Xt = torch.from_numpy(X).to(dev, dtype=torch.float32 if dev == "cuda" else None)
    ref.fit(Xt)
    assert est._chunk_rows(X) < X.shape[0]
    labels = est.predict(X)
    assert isinstance(labels, np.ndarray) and labels.dtype == np.int64
    np.testing.assert_array_equal(labels, ref.predict(Xt).cpu().numpy())
    np.testing.assert_array_equal(labels, est.labels_)
    distances = est.transform(X)
    assert isinstance(distances, np.ndarray) and distances.shape == (X.shape[0], 5)
    expected = ref.transform(Xt).cpu().numpy()
    if dev == "cuda":
        # cuBLAS may take another kernel for a chunk that starts in its own buffer than
        # for a view at row ``start`` of the tensor (another alignment): the products
        # agree to rounding (seen on an H200: 2.4e-7 at most, 1 float32 ulp)
        np.testing.assert_allclose(distances, expected, rtol=1e-5, atol=1e-6)
        assert est.score(X) == pytest.approx(ref.score(Xt), rel=1e-6)
    else:
        np.testing.assert_array_equal(distances, expected)
        assert est.score(X) == ref.score(Xt)
