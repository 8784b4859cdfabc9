"""KernelKMeans(device=...): torch runs equal numpy runs; tensors in, tensors out.

The oracle is the numpy estimator (itself tested against scikit-learn's KMeans and
a plain kernel Lloyd loop in tests/cluster/test_kernel_kmeans.py): on float64 data
the torch backends must give the same labels and the same inertia, distances and
norms within 1e-10, on the stored and on the blockwise path.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from _backend_params import BACKEND_PARAMS, needs_torch, nx_fixture  # noqa: F401 (nx)
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

from mbkkm import KernelKMeans
from mbkkm._core._lloyd import kernel_lloyd
from mbkkm._core._lloyd import relocate_empty as _relocate_empty
from mbkkm.cluster._kernel_kmeans import KernelMemoryError

PARAMS = dict(n_clusters=4, random_state=0, tol=0, max_iter=50)
STORED = dict(max_kernel_memory=2048)
BLOCKS = dict(max_kernel_memory=0.1, working_memory=0.5)  # 300^2 * 8 B > 0.1 MiB:
# blocks of 105 rows


@pytest.fixture(scope="module")
def blobs():
    X, _ = make_blobs(300, centers=4, n_features=5, cluster_std=1.5, random_state=0)
    return X


def on(device, a):
    """``a`` (numpy) as the input of a run on ``device`` (a BACKEND_PARAMS value)."""
    if device == "cpu":
        return a
    import torch

    return torch.from_numpy(np.ascontiguousarray(a)).to("cuda" if device == "cuda" else "cpu")


def host(a):
    return a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a)


def assert_same_fit(est, ref, X, device, tol=1e-10):
    Xd = on(device, X)
    assert type(est.labels_) is type(Xd) or device == "cpu"
    np.testing.assert_array_equal(host(est.labels_), ref.labels_)
    assert est.inertia_ == pytest.approx(ref.inertia_, rel=tol)
    assert est.n_iter_ == ref.n_iter_
    np.testing.assert_allclose(est.center_norms_, ref.center_norms_, rtol=tol)
    np.testing.assert_allclose(host(est.transform(Xd)), ref.transform(X), rtol=tol, atol=tol)
    np.testing.assert_array_equal(host(est.predict(Xd)), ref.predict(X))
    np.testing.assert_array_equal(est.support_, ref.support_)
    np.testing.assert_allclose(est.dual_coef_, ref.dual_coef_, rtol=1e-12)
    np.testing.assert_allclose(host(est.support_vectors_), ref.support_vectors_)
    assert est.score(Xd) == pytest.approx(ref.score(X), rel=tol)


@pytest.mark.parametrize("device", BACKEND_PARAMS)
@pytest.mark.parametrize("path", ["stored", "blocks"])
@pytest.mark.parametrize("kernel", ["rbf", "linear", "polynomial", "laplacian"])
def test_equals_numpy(blobs, device, path, kernel):
    mem = STORED if path == "stored" else BLOCKS
    extra = {"gamma": 0.05} if kernel == "polynomial" else {}
    ref = KernelKMeans(kernel=kernel, **extra, **PARAMS, **mem).fit(blobs)
    est = KernelKMeans(kernel=kernel, **extra, **PARAMS, **mem).fit(on(device, blobs))
    assert est._kernel_storage.startswith("stored" if path == "stored" else "blocks")
    assert ref._kernel_storage == est._kernel_storage
    assert_same_fit(est, ref, blobs, device)


@pytest.mark.parametrize("device", BACKEND_PARAMS)
@pytest.mark.parametrize("path", ["stored", "blocks"])
def test_weights_n_init_and_init_options(blobs, device, path):
    mem = STORED if path == "stored" else BLOCKS
    w = np.random.RandomState(1).uniform(0, 2, blobs.shape[0])
    w[::7] = 0  # zero-weight points: not support points, cannot fill empty clusters
    Xd, wd = on(device, blobs), on(device, w)
    for kw in (
        dict(n_init=3),
        dict(init="random", n_init=2),
        dict(init_size=100),
        dict(init=blobs[[0, 75, 150, 225]]),
    ):
        # the fixed width: gamma=None would start the first run from the width
        # selection's partition instead of the init options tested here
        kw["gamma"] = "mean-distance"
        ref = KernelKMeans(**{**PARAMS, **kw}, **mem).fit(blobs, sample_weight=w)
        est = KernelKMeans(**{**PARAMS, **kw}, **mem).fit(Xd, sample_weight=wd)
        assert_same_fit(est, ref, blobs, device)
        assert est.score(Xd, sample_weight=wd) == pytest.approx(
            ref.score(blobs, sample_weight=w), rel=1e-10
        )


@pytest.mark.parametrize("device", BACKEND_PARAMS)
def test_callable_kernel_fit_transform_and_empty_clusters(blobs, device):
    Xd = on(device, blobs)
    ref = KernelKMeans(kernel=_dot, **PARAMS).fit(blobs)
    est = KernelKMeans(kernel=_dot, **PARAMS).fit(Xd)
    assert_same_fit(est, ref, blobs, device)
    # Duplicate points and more clusters than distinct points: relocation runs,
    # clusters stay empty, the warning is the same. Every distance ties here, and
    # ties may be broken differently: the partitions agree, not the cluster names.
    Xdup = np.repeat(blobs[:3], 20, axis=0)
    with pytest.warns(UserWarning, match="empty"):
        ref = KernelKMeans(5, random_state=0, init="random", gamma="mean-distance").fit(Xdup)
    with pytest.warns(UserWarning, match="empty"):
        est = KernelKMeans(5, random_state=0, init="random", gamma="mean-distance").fit(
            on(device, Xdup)
        )
    assert adjusted_rand_score(host(est.labels_), ref.labels_) == 1.0
    assert est.inertia_ == pytest.approx(ref.inertia_, abs=1e-10)
    D = KernelKMeans(**PARAMS).fit_transform(Xd)
    assert type(D) is type(Xd)
    np.testing.assert_allclose(
        host(D), KernelKMeans(**PARAMS).fit_transform(blobs), rtol=1e-10, atol=1e-10
    )


def _dot(A, B):
    return A @ B.T


@pytest.mark.parametrize("device", BACKEND_PARAMS)
def test_float32_stays_float32(blobs, device):
    X32 = blobs.astype(np.float32)
    ref = KernelKMeans(**PARAMS).fit(X32)
    est = KernelKMeans(**PARAMS).fit(on(device, X32))
    assert host(est.support_vectors_).dtype == np.float32
    np.testing.assert_array_equal(host(est.labels_), ref.labels_)
    assert est.inertia_ == pytest.approx(ref.inertia_, rel=1e-4)


def test_lloyd_backend_ops_equal_plain_numpy(nx):
    """The backend operations of the Lloyd loop against plain loops."""
    rng = np.random.RandomState(0)
    labels = rng.randint(0, 4, 30)
    values = rng.rand(30)
    got = host(nx.one_hot(nx.index(labels), nx.asarray(values), 5))
    ref = np.zeros((30, 5))
    for i in range(30):
        ref[i, labels[i]] = values[i]
    np.testing.assert_array_equal(got, ref)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(
        host(nx.flatnonzero(nx.asarray(values > 0.5))), [i for i in range(30) if values[i] > 0.5]
    )
    score = nx.asarray(values)
    np.testing.assert_array_equal(
        host(nx.largest(score, 4)), sorted(range(30), key=lambda i: -values[i])[:4]
    )
    a, b, c = nx.scalars_to_host(score.sum(), (score > 0.5).sum(), score[3])
    assert (a, b, c) == (
        pytest.approx(values.sum(), rel=1e-14),
        float((values > 0.5).sum()),
        values[3],
    )
    assert all(type(v) is float for v in (a, b, c))
    free = nx.free_memory()
    assert free is None if str(nx.device) == "cpu" else free > 0


@needs_torch
@pytest.mark.parametrize("moved", [True, False])
def test_relocate_empty_on_torch_equals_numpy(moved):
    import torch

    rng = np.random.RandomState(0)
    labels = rng.randint(0, 3, 50) if moved else np.arange(50) % 5
    mind = rng.rand(50)
    w = rng.rand(50)
    w[:5] = 0
    ref = _relocate_empty(labels, mind, w, 5)
    got = _relocate_empty(torch.from_numpy(labels), torch.from_numpy(mind), torch.from_numpy(w), 5)
    np.testing.assert_array_equal(got.numpy(), ref)
    assert (ref is labels) != moved


@needs_torch
def test_one_host_transfer_per_iteration(blobs, monkeypatch):
    """The loop on torch brings only its three scalars to the host, once per iteration."""
    import torch

    from mbkkm.backends._torch import TorchBackend
    from mbkkm.cluster._base import fit_input, resolve_problem

    calls = {"scalars": 0, "to_numpy": 0}
    scalars, to_numpy = TorchBackend.scalars_to_host, TorchBackend.to_numpy

    def count_scalars(self, *v):
        calls["scalars"] += 1
        return scalars(self, *v)

    def count_to_numpy(self, x):
        calls["to_numpy"] += 1
        return to_numpy(self, x)

    X = torch.from_numpy(blobs)
    est = KernelKMeans(**PARAMS)
    est.fit(X)  # resolves the kernel
    data = fit_input(X, None, est, accept_dask=False, index_dtype=np.float64)
    problem = resolve_problem(est, data)
    kernel_run = est._point_operator(problem, None)  # K(X, X) stored on the device
    op, diag, _ = kernel_run
    rng = np.random.RandomState(0)
    P0, c0 = est._initial_inner(problem.rows, kernel_run, rng, None)
    w = torch.ones(X.shape[0], dtype=torch.float64)
    monkeypatch.setattr(TorchBackend, "scalars_to_host", count_scalars)
    monkeypatch.setattr(TorchBackend, "to_numpy", count_to_numpy)
    run = kernel_lloyd(op, diag, P0, c0, w, 50, 0.0)
    assert calls == {"scalars": run[4], "to_numpy": 0}
    assert isinstance(run[1], torch.Tensor)


@needs_torch
def test_device_memory_decides_the_path(blobs, monkeypatch):
    """On a device, the stored kernel also needs the free memory: else blocks."""
    import torch

    from mbkkm.backends._torch import TorchBackend

    X = torch.from_numpy(blobs)
    ref = KernelKMeans(**PARAMS).fit(blobs)
    monkeypatch.setattr(TorchBackend, "free_memory", lambda self: 600 * 2**20)
    est = KernelKMeans(**PARAMS, working_memory=1).fit(X)  # 600 MiB - 513 MiB > 0.7 MiB
    assert est._kernel_storage == "stored"
    monkeypatch.setattr(TorchBackend, "free_memory", lambda self: 400 * 2**20)
    est = KernelKMeans(**PARAMS, working_memory=1).fit(X)  # less than the margin
    assert est._kernel_storage.startswith("blocks")
    np.testing.assert_array_equal(est.labels_.numpy(), ref.labels_)
    with pytest.raises(KernelMemoryError, match=r"GiB free"):
        KernelKMeans(**PARAMS, working_memory=0.001).fit(X)


# --------------------------------------------------------------------- bad input


@needs_torch
def test_hostile_inputs_raise(blobs):
    import torch

    Xt = torch.from_numpy(blobs)
    on_tensor = KernelKMeans(**PARAMS).fit(Xt)
    on_numpy = KernelKMeans(**PARAMS).fit(blobs)
    with pytest.raises(ValueError, match="NaN or infinity"):
        KernelKMeans(**PARAMS).fit(Xt * float("nan"))
    with pytest.raises(ValueError, match="2D"):
        KernelKMeans(**PARAMS).fit(Xt[:, :, None])
    with pytest.raises(ValueError, match="mixed array libraries"):
        on_tensor.predict(blobs)
    with pytest.raises(ValueError, match="mixed array libraries"):
        on_numpy.transform(Xt)
    with pytest.raises(ValueError, match="sample_weight and X"):
        KernelKMeans(**PARAMS).fit(Xt, sample_weight=np.ones(len(blobs)))
    with pytest.raises(ValueError, match="sample_weight and X"):
        KernelKMeans(**PARAMS).fit(blobs, sample_weight=torch.ones(len(blobs)))
    with pytest.raises(ValueError, match="device='cpu'"):
        KernelKMeans(device="cpu", **PARAMS).fit(Xt)
    with pytest.raises(ValueError, match="features"):
        on_tensor.predict(Xt[:, :3])
    with pytest.raises(ValueError, match="not available on the torch backend"):
        KernelKMeans(kernel="chi2", **PARAMS).fit(Xt.abs())
    with pytest.raises(ValueError, match="numpy only"):
        KernelKMeans(kernel="precomputed", **PARAMS).fit(Xt @ Xt.T)
    with pytest.raises(ValueError, match="numpy only"):
        KernelKMeans(kernel="knn", kernel_params={"n_neighbors": 5}, **PARAMS).fit(Xt)
    with pytest.raises(ValueError, match="numpy only"):
        KernelKMeans(kernel="precomputed", device="torch", **PARAMS).fit(blobs @ blobs.T)
    # a sparse kernel matrix stays on the host: the torch device is refused too
    with pytest.raises(ValueError, match="numpy only"):
        KernelKMeans(kernel="precomputed", device="torch", **PARAMS).fit(
            sp.csr_matrix(blobs @ blobs.T)
        )
    with pytest.raises(ValueError, match="not a known device"):
        KernelKMeans(device="gpu", **PARAMS).fit(blobs)
    # A failed fit leaves a fitted estimator as it was.
    labels = on_tensor.labels_
    with pytest.raises(ValueError):
        on_tensor.fit(Xt * float("nan"))
    assert on_tensor.labels_ is labels


@pytest.mark.parametrize("Est", ["KernelKMeans", "MiniBatchKernelKMeans"])
def test_refit_on_a_stored_kernel_after_a_tensor_fit_gives_numpy_out(Est):
    """A sparse precomputed kernel matrix is a host input: after an earlier fit on
    tensors, the refitted model predicts on numpy and returns numpy."""
    torch = pytest.importorskip("torch")
    import scipy.sparse as sp

    import mbkkm

    X = np.random.RandomState(0).rand(60, 3)
    est = getattr(mbkkm, Est)(2, random_state=0)
    if Est == "MiniBatchKernelKMeans":
        est.set_params(batch_size=20, tau=10, max_iter=3)
    est.fit(torch.from_numpy(X))
    K = sp.csr_matrix(X @ X.T)
    est.set_params(kernel="precomputed").fit(K)
    labels = est.predict(X[:5] @ X.T)
    assert isinstance(labels, np.ndarray) and labels.shape == (5,)
    assert isinstance(est.labels_, np.ndarray)
