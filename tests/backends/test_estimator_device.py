"""MiniBatchKernelKMeans(device=...): numpy and torch agree; tensors in, tensors out."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from _backend_params import HAS_TORCH, needs_cuda, needs_torch
from sklearn.datasets import make_blobs

from _agreement import assert_no_near_tie, assert_same_labels
from mbkkm import KernelKMeans, MiniBatchKernelKMeans
from mbkkm.cluster import EmptyClusterWarning

PARAMS = dict(n_clusters=4, batch_size=128, tau=40, max_iter=20, random_state=0)


@pytest.fixture(scope="module")
def blobs64():
    X, _ = make_blobs(1500, centers=4, n_features=6, cluster_std=0.6, random_state=0)
    return X


def _torch():
    import torch

    return torch


@needs_torch
@pytest.mark.parametrize("kernel", ["rbf", "linear", "laplacian", "polynomial"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_numpy_and_torch_cpu_agree(blobs64, kernel, dtype):
    torch = _torch()
    X = blobs64.astype(dtype)
    extra = {"gamma": 0.01} if kernel == "polynomial" else {}
    ref = MiniBatchKernelKMeans(kernel=kernel, **extra, **PARAMS).fit(X)
    est = MiniBatchKernelKMeans(kernel=kernel, **extra, **PARAMS).fit(torch.from_numpy(X))
    Xt = torch.from_numpy(X)
    # Same sampling plan and init (drawn on the host); torch's and numpy's products
    # round differently, so the labels of every step agree exactly only where no point
    # is within rounding of a tie: checked on the final distances (blobs: far from it).
    assert isinstance(est.labels_, torch.Tensor)
    D = ref.transform(X)
    assert_no_near_tie(D, rtol=1e-9 if dtype == np.float64 else 1e-4)
    np.testing.assert_array_equal(est.labels_.numpy(), ref.labels_)
    np.testing.assert_array_equal(est.predict(Xt).numpy(), ref.predict(X))
    rtol = 1e-9 if dtype == np.float64 else 1e-4
    atol = 1e-9 if dtype == np.float64 else 1e-4 * np.abs(ref.transform(X)).max()
    np.testing.assert_allclose(est.transform(Xt).numpy(), ref.transform(X), rtol=rtol, atol=atol)
    np.testing.assert_allclose(est.center_norms_, ref.center_norms_, rtol=rtol, atol=atol)
    np.testing.assert_array_equal(est.n_support_, ref.n_support_)
    np.testing.assert_allclose(est.support_vectors_.numpy(), ref.support_vectors_)
    assert est.inertia_ == pytest.approx(ref.inertia_, rel=rtol * 10)
    assert est.score(Xt) == pytest.approx(ref.score(X), rel=rtol * 10)
    assert est.support_vectors_.dtype == torch.from_numpy(X).dtype


@needs_torch
def test_numpy_input_on_torch_device_gives_numpy(blobs64):
    ref = MiniBatchKernelKMeans(**PARAMS).fit(blobs64)
    est = MiniBatchKernelKMeans(device="torch", **PARAMS).fit(blobs64)
    for attr in ("labels_", "support_vectors_"):
        assert isinstance(getattr(est, attr), np.ndarray)
    assert_no_near_tie(ref.transform(blobs64), rtol=1e-9)  # as above: labels determined
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    assert isinstance(est.predict(blobs64), np.ndarray)
    np.testing.assert_allclose(est.transform(blobs64), ref.transform(blobs64), rtol=1e-9)
    assert est._state.backend.name == "torch"


@needs_torch
def test_weights_n_init_partial_fit_callable_pickle(blobs64):
    torch = _torch()
    Xt = torch.from_numpy(blobs64)
    w = np.random.RandomState(0).rand(blobs64.shape[0]) + 0.5
    # the fixed width: the n_init draws themselves, not the width selection's start
    fixed = dict(n_init=3, gamma="mean-distance")
    ref = MiniBatchKernelKMeans(**fixed, **PARAMS).fit(blobs64, sample_weight=w)
    est = MiniBatchKernelKMeans(**fixed, **PARAMS).fit(Xt, sample_weight=torch.from_numpy(w))
    assert_no_near_tie(ref.transform(blobs64), rtol=1e-9)  # labels determined, as above
    np.testing.assert_array_equal(est.labels_.numpy(), ref.labels_)
    assert est.inertia_ == pytest.approx(ref.inertia_, rel=1e-9)
    for _ in range(3):
        ref.partial_fit(blobs64[:300])
        est.partial_fit(Xt[:300])
    np.testing.assert_array_equal(est.labels_.numpy(), ref.labels_)
    np.testing.assert_allclose(est.center_norms_, ref.center_norms_, rtol=1e-9)
    back = pickle.loads(pickle.dumps(est))
    assert_same_labels(
        back.predict(Xt).numpy(), ref.predict(blobs64), ref.transform(blobs64), rtol=1e-9
    )

    ref = MiniBatchKernelKMeans(kernel=_dot, **PARAMS).fit(blobs64)
    est = MiniBatchKernelKMeans(kernel=_dot, **PARAMS).fit(Xt)
    assert_no_near_tie(ref.transform(blobs64), rtol=1e-9)
    np.testing.assert_array_equal(est.labels_.numpy(), ref.labels_)


def _dot(A, B):
    return A @ B.T


@needs_torch
def test_mixed_and_unsupported_inputs_raise(blobs64):
    torch = _torch()
    Xt = torch.from_numpy(blobs64)
    on_tensor = MiniBatchKernelKMeans(**PARAMS).fit(Xt)
    on_numpy = MiniBatchKernelKMeans(**PARAMS).fit(blobs64)
    with pytest.raises(ValueError, match="mixed array libraries"):
        on_tensor.predict(blobs64)
    with pytest.raises(ValueError, match="mixed array libraries"):
        on_numpy.transform(Xt)
    with pytest.raises(ValueError, match="sample_weight and X"):
        MiniBatchKernelKMeans(**PARAMS).fit(Xt, sample_weight=np.ones(len(blobs64)))
    with pytest.raises(ValueError, match="sample_weight and X"):
        MiniBatchKernelKMeans(**PARAMS).fit(blobs64, sample_weight=torch.ones(len(blobs64)))
    with pytest.raises(ValueError, match="device='cpu' runs on numpy arrays; leave device=None"):
        MiniBatchKernelKMeans(device="cpu", **PARAMS).fit(Xt)
    with pytest.raises(ValueError, match="not available on the torch backend"):
        MiniBatchKernelKMeans(kernel="chi2", **PARAMS).fit(Xt.abs())
    with pytest.raises(ValueError, match="tau=None"):
        MiniBatchKernelKMeans(**{**PARAMS, "tau": None}).fit(Xt)
    with pytest.raises(ValueError, match="numpy only"):
        MiniBatchKernelKMeans(kernel="precomputed", **PARAMS).fit(Xt @ Xt.T)
    with pytest.raises(ValueError, match="NaN or infinity"):
        MiniBatchKernelKMeans(**PARAMS).fit(Xt * float("nan"))
    for bad in (float("nan"), float("inf"), -float("inf")):  # one bad value anywhere
        Xb = Xt.clone()
        Xb[len(Xb) // 2, 1] = bad
        with pytest.raises(ValueError, match="NaN or infinity"):
            MiniBatchKernelKMeans(**PARAMS).fit(Xb)
    with pytest.raises(ValueError, match="features"):
        on_tensor.predict(Xt[:, :3])
    with pytest.raises(ValueError, match="2D"):
        MiniBatchKernelKMeans(**PARAMS).fit(Xt[:, 0])
    with pytest.raises(TypeError, match="must return a torch tensor"):
        MiniBatchKernelKMeans(kernel=lambda A, B: np.ones((len(A), len(B))), **PARAMS).fit(Xt)


def test_device_values():
    X, _ = make_blobs(200, centers=3, random_state=0)
    with pytest.raises(ValueError, match="not a known device"):
        MiniBatchKernelKMeans(3, device="gpu").fit(X)
    est = MiniBatchKernelKMeans(3, device="auto", max_iter=3, batch_size=50).fit(X)
    assert isinstance(est.labels_, np.ndarray)
    if not HAS_TORCH:
        with pytest.raises(ValueError, match="PyTorch"):
            MiniBatchKernelKMeans(3, device="torch").fit(X)


# --- on a GPU ---------------------------------------------------------------------


@pytest.mark.gpu
@needs_cuda
def test_cuda_tensor_in_tensor_out(blobs64):
    torch = _torch()
    X32 = blobs64.astype(np.float32)
    Xc = torch.from_numpy(X32).cuda()
    ref = MiniBatchKernelKMeans(**PARAMS).fit(X32)
    est = MiniBatchKernelKMeans(**PARAMS).fit(Xc)
    for out in (est.labels_, est.support_vectors_, est.predict(Xc), est.transform(Xc)):
        assert isinstance(out, torch.Tensor) and out.device.type == "cuda"
    np.testing.assert_array_equal(est.labels_.cpu().numpy(), ref.labels_)
    np.testing.assert_allclose(
        est.transform(Xc).cpu().numpy(), ref.transform(X32), rtol=1e-3, atol=1e-3
    )


@pytest.mark.gpu
@needs_cuda
def test_numpy_on_cuda_device(blobs64):
    ref = MiniBatchKernelKMeans(**PARAMS).fit(blobs64.astype(np.float32))
    est = MiniBatchKernelKMeans(device="cuda", **PARAMS).fit(blobs64)
    assert isinstance(est.labels_, np.ndarray)
    assert est.support_vectors_.dtype == np.float32
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    assert isinstance(est.predict(blobs64), np.ndarray)


@pytest.mark.gpu
@needs_cuda
def test_repeated_cuda_fits_keep_no_device_memory(blobs64):
    # Every fit captures a CUDA graph on a side stream; cuBLAS keeps a workspace per
    # stream it has seen, so the stream is made once per thread and device: after the
    # first fit, another fit (its model freed) leaves the device memory as it was.
    torch = _torch()
    Xc = torch.from_numpy(blobs64.astype(np.float32)).cuda()
    import gc

    MiniBatchKernelKMeans(**PARAMS).fit(Xc)
    gc.collect()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for _ in range(3):
        MiniBatchKernelKMeans(**PARAMS).fit(Xc)
    gc.collect()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == before


@needs_torch
def test_partial_fit_rows_of_weight_zero_keep_a_window_on_torch(blobs64):
    """A cluster whose rows of a partial_fit chunk all weigh 0 does not grow; on torch
    their count still pushed its blocks past tau and the window was emptied (no support,
    norm 0: a user's code review), where numpy keeps it. Oracle: the numpy fit."""
    torch = _torch()
    X = blobs64[:300]
    params = dict(n_clusters=3, gamma=0.1, tau=10, learning_rate="classic", random_state=0)
    ref, est = MiniBatchKernelKMeans(**params), MiniBatchKernelKMeans(**params)
    ref.partial_fit(X)
    est.partial_fit(torch.from_numpy(X))
    w = (ref.predict(X) != 0).astype(float)  # cluster 0's rows weigh 0
    for _ in range(3):
        ref.partial_fit(X, sample_weight=w)
        est.partial_fit(torch.from_numpy(X), sample_weight=torch.from_numpy(w))
    assert ref.n_support_.min() > 0
    np.testing.assert_array_equal(est.n_support_, ref.n_support_)
    np.testing.assert_allclose(est.center_norms_, ref.center_norms_, rtol=1e-9)
    assert_same_labels(
        est.predict(torch.from_numpy(X)).numpy(), ref.predict(X), ref.transform(X), rtol=1e-9
    )


@needs_torch
@pytest.mark.parametrize("Est", [MiniBatchKernelKMeans, KernelKMeans])
def test_empty_clusters_warn_on_tensors(Est):
    """Fewer distinct points than clusters: an empty cluster warns. On tensors the
    mini-batch fit skipped the count (it was meant to skip Dask arrays only)."""
    torch = _torch()
    X = np.repeat(np.eye(3), 4, axis=0)  # 3 distinct points, k = 5
    for data in (X, torch.from_numpy(X)):
        with pytest.warns(EmptyClusterWarning, match="2 of the n_clusters=5"):
            Est(5, gamma=1.0, random_state=0).fit(data)


@needs_torch
def test_tensor_rows_too_large_for_float32_are_refused():
    """numpy rows too large for the kernel arithmetic are refused before any work; a
    tensor's were not checked at all, and a fit ended with NaN norms and inertia_ nan
    (a code review). Checked on the tensor's device now, with the numpy message."""
    torch = _torch()
    X = np.random.RandomState(0).rand(300, 3).astype(np.float32)
    bad = X.copy()
    bad[7] = 1e20
    est = MiniBatchKernelKMeans(2, gamma=0.5, max_iter=2, random_state=0)
    for data in (bad, torch.from_numpy(bad)):
        with pytest.raises(ValueError, match="too large for float32 arithmetic"):
            est.fit(data)
    est.fit(torch.from_numpy(X))
    with pytest.raises(ValueError, match="too large for float32 arithmetic"):
        est.partial_fit(torch.from_numpy(bad))
    tiny = torch.from_numpy(X * np.float32(1e-30))
    with pytest.raises(ValueError, match="too small for float32 arithmetic"):
        MiniBatchKernelKMeans(2, gamma=0.5, max_iter=2, random_state=0).fit(tiny)
