"""The backend door: every backend equals the numpy reference (the numpy backend is
the oracle of the others)."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from _backend_params import HAS_TORCH, needs_torch, nx_fixture  # noqa: F401 (fixture nx)

from _agreement import assert_no_near_tie
from mbkkm._core import LEARNING_RATES, StepConfig, assign, init_state, minibatch_step
from mbkkm._core._loop import step_for
from mbkkm.backends import backend_for, get_backend, numpy_backend, resolve_device
from mbkkm.kernels import kernel_names, resolve_kernel

NAMED = kernel_names(include_aliases=False, transductive=False)
TORCH_NAMES = set(kernel_names(include_aliases=False, backend="torch"))


def _tol(dtype, nx):
    if dtype == np.float32:
        return {"rtol": 2e-4, "atol": 2e-5}
    return {"rtol": 1e-10, "atol": 1e-10}


def _data(seed, n, d, dtype, nonneg=False):
    rng = np.random.RandomState(seed)
    X = rng.rand(n, d) if nonneg else rng.randn(n, d) * 0.5
    X[0] = 0  # a zero row (cosine's special case)
    return X.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", NAMED)
def test_kernel_tile_and_diag_equal_numpy(nx, name, dtype):
    X = _data(0, 40, 6, dtype, nonneg=name == "chi2")
    Y = _data(1, 30, 6, dtype, nonneg=name == "chi2")
    kernel = resolve_kernel(name, gamma=0.3 if name != "linear" else None, X=X)
    ref = kernel(X, Y)
    if nx.name == "torch" and name not in TORCH_NAMES:
        with pytest.raises(ValueError, match="not available on the torch backend"):
            kernel.tile(nx.asarray(X), nx.asarray(Y))
        return
    Xd, Yd = nx.asarray(X), nx.asarray(Y)
    K = nx.to_numpy(kernel.tile(Xd, Yd))
    assert K.dtype == dtype
    np.testing.assert_allclose(K, ref, **_tol(dtype, nx))
    out = nx.empty((40, 30), nx.float_dtype(Xd))
    K2 = kernel.tile(Xd, Yd, out=out)
    assert K2 is out
    np.testing.assert_allclose(nx.to_numpy(out), ref, **_tol(dtype, nx))
    np.testing.assert_allclose(nx.to_numpy(kernel.diag(Xd)), kernel.diag(X), **_tol(dtype, nx))


def test_callable_kernel(nx):
    X = _data(0, 20, 4, np.float64)
    kernel = resolve_kernel(lambda A, B: A @ B.T)
    K = nx.to_numpy(kernel.tile(nx.asarray(X), nx.asarray(X)))
    np.testing.assert_allclose(K, X @ X.T, rtol=1e-12)
    np.testing.assert_allclose(nx.to_numpy(kernel.diag(nx.asarray(X))), (X * X).sum(1), rtol=1e-12)


@needs_torch
def test_torch_callable_kernel_must_return_a_tensor():
    import torch

    X = torch.ones(3, 2, dtype=torch.float64)
    with pytest.raises(TypeError, match="must return a torch tensor"):
        resolve_kernel(lambda A, B: np.ones((3, 3))).tile(X, X)
    with pytest.raises(ValueError, match="shape"):
        resolve_kernel(lambda A, B: torch.ones(2, 2)).tile(X, X)
    with pytest.raises(ValueError, match="non-finite"):
        resolve_kernel(lambda A, B: A @ B.T * float("nan")).tile(X, X)


def test_products_gathers_reductions(nx):
    rng = np.random.RandomState(0)
    K = rng.randn(7, 12)
    # CSR (indptr, indices, data) times dense, with an empty row in the middle.
    indptr = np.array([0, 3, 3, 7])
    indices = np.array([0, 5, 2, 6, 6, 1, 3])  # unsorted, with a repeat
    data = rng.rand(7)
    A = rng.randn(7, 5)
    M = np.zeros((3, 7))
    for q in range(3):
        for p in range(indptr[q], indptr[q + 1]):
            M[q, indices[p]] += data[p]
    R = nx.to_numpy(nx.csr_matmul(indptr, indices, data, nx.asarray(A)))
    np.testing.assert_allclose(R, M @ A, rtol=1e-12, atol=1e-14)
    seg = nx.to_numpy(nx.csr_matmul(np.array([0, 2, 7]), None, data, nx.asarray(A)))
    np.testing.assert_allclose(seg, [data[:2] @ A[:2], data[2:] @ A[2:]], rtol=1e-12)

    i1, i2 = nx.upload_indices(np.array([3, 1]), np.array([[0, 2]]))
    (f1,) = nx.upload_floats(np.array([0.5, 1.5]))
    np.testing.assert_array_equal(nx.to_numpy(i1), [3, 1])
    np.testing.assert_array_equal(nx.to_numpy(i2), [0, 2])
    np.testing.assert_array_equal(nx.to_numpy(f1), [0.5, 1.5])

    idx = np.array([4, 0, 4, 2])
    np.testing.assert_array_equal(nx.to_numpy(nx.take(nx.asarray(K), nx.index(idx))), K[idx])
    np.testing.assert_array_equal(
        nx.to_numpy(nx.take(nx.asarray(K), nx.index(idx), axis=1)), K[:, idx]
    )

    D = nx.asarray(rng.randn(6, 3))
    lab, mind = nx.argmin_min(D)
    Dh = nx.to_numpy(D)
    np.testing.assert_array_equal(nx.to_numpy(lab), Dh.argmin(1))
    np.testing.assert_array_equal(nx.to_numpy(mind), Dh.min(1))

    X = rng.randn(50, 4) * 3 + 1
    w = rng.rand(50)
    # Oracle: the weighted mean of ||x - y||^2 over all ordered pairs, from the n x n
    # squared distances.
    D2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    for sw in (None, w):
        ww = np.ones(50) if sw is None else sw
        expected = ww @ D2 @ ww / ww.sum() ** 2
        assert nx.mean_squared_pairwise_distance(nx.asarray(X), sw) == pytest.approx(
            expected, rel=1e-12
        )


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("name", ["rbf", "polynomial", "laplacian"])
def test_minibatch_step_and_assign_equal_numpy(nx, name, weighted):
    X = _data(3, 600, 5, np.float64)
    kernel = resolve_kernel(name, gamma=0.2, X=X)
    rng = np.random.RandomState(1)
    centers = X[rng.choice(600, 4, replace=False)]
    ref, dev = init_state(centers, kernel), init_state(nx.asarray(centers), kernel)
    assert get_backend(dev.support) == nx
    rate = LEARNING_RATES["adaptive"]
    for _ in range(8):
        idx = rng.randint(0, 600, 64)
        w = rng.rand(64) + 0.5 if weighted else None
        opts = StepConfig(kernel, rate, tau=30, renormalize=True, tol=-np.inf)
        r1 = minibatch_step(ref, X[idx], opts, batch_weight=w)
        r2 = step_for(nx)(dev, nx.asarray(X[idx]), opts, batch_weight=w)
        np.testing.assert_array_equal(r1.labels, r2.labels)
        assert r1.objective == pytest.approx(r2.objective, rel=1e-10)
        assert r1.objective_after == pytest.approx(r2.objective_after, rel=1e-10)
        np.testing.assert_allclose(r1.alpha, r2.alpha, rtol=1e-12)
    # The same windows; the layouts may order the blocks differently (numpy keeps time
    # order, torch comes back grouped by cluster): compare both grouped by cluster.
    ref.group_by_cluster()
    dev.group_by_cluster()
    np.testing.assert_array_equal(ref.block_start, dev.block_start)
    np.testing.assert_array_equal(ref.block_cluster, dev.block_cluster)
    np.testing.assert_allclose(ref.coef, dev.coef, rtol=1e-12)
    np.testing.assert_allclose(ref.host_norms(), dev.host_norms(), rtol=1e-10)
    np.testing.assert_allclose(nx.to_numpy(dev.support), ref.support)
    np.testing.assert_allclose(nx.to_numpy(dev.gram), ref.gram, rtol=1e-10, atol=1e-12)
    l1, m1, d1 = assign(X, ref, kernel, chunk_rows=128, return_distances=True)
    l2, m2, d2 = assign(nx.asarray(X), dev, kernel, chunk_rows=128, return_distances=True)
    assert get_backend(l2) == nx
    np.testing.assert_array_equal(l1, nx.to_numpy(l2))
    np.testing.assert_allclose(nx.to_numpy(m2), m1, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(nx.to_numpy(d2), d1, rtol=1e-9, atol=1e-12)
    copy = dev.copy()
    assert get_backend(copy.support) == nx and copy.support is not dev.support


def test_get_backend_numpy_and_mixed():
    assert get_backend(np.zeros(2), None, [1, 2]) is numpy_backend()
    assert get_backend() is numpy_backend()
    if HAS_TORCH:
        import torch

        assert get_backend(torch.zeros(2)).name == "torch"
        with pytest.raises(ValueError, match="mixed array libraries"):
            get_backend(torch.zeros(2), np.zeros(2))


def test_resolve_device():
    assert resolve_device(None) is None
    assert resolve_device("cpu") == "cpu"
    assert backend_for("cpu") is numpy_backend()
    with pytest.raises(ValueError, match="not a known device"):
        resolve_device("gpu")
    with pytest.raises(TypeError, match="device must be"):
        resolve_device(3)
    auto = resolve_device("auto")
    assert auto == "cpu" or auto.type == "cuda"
    if HAS_TORCH:
        import torch

        assert resolve_device("torch") == torch.device("cpu")
        assert resolve_device("torch-cpu") == torch.device("cpu")
        if not torch.cuda.is_available():
            with pytest.raises(ValueError, match="no CUDA device"):
                resolve_device("cuda")


def test_import_mbkkm_does_not_import_torch():
    code = (
        "import sys, numpy as np\n"
        "import mbkkm, mbkkm.backends, mbkkm.cluster, mbkkm._core\n"
        "from mbkkm import MiniBatchKernelKMeans\n"
        "X = np.random.RandomState(0).randn(200, 3)\n"
        "MiniBatchKernelKMeans(3, batch_size=50, max_iter=3, random_state=0).fit(X).predict(X)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


@needs_torch
def test_torch_row_norms_in_blocks_equal_the_plain_sums():
    import torch

    from mbkkm.kernels import _torch_tiles

    rng = np.random.RandomState(0)
    for shape in ((3, 5), (5000, 1000), (70001, 61)):  # one call; blocks (one ragged)
        X = torch.from_numpy(rng.rand(*shape).astype(np.float32))
        torch.testing.assert_close(_torch_tiles.row_norms_sq(X), (X * X).sum(1), rtol=1e-6, atol=0)


@needs_torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [1, 3, 6, 37])
@pytest.mark.parametrize("tile", ["pool tail", "labelling chunk"])
def test_torch_rbf_folded_and_plain_equal_the_oracle(tile, dtype, d):
    # rbf_tail: the pool's rows against the batch at their tail (Y = X[-50:]);
    # rbf: the labelling pass's tile, the support X against a chunk of other rows Y.
    import torch

    from mbkkm.kernels import _torch_tiles

    if tile == "pool tail":
        X = _data(4, 203, d, dtype)
        X[-1] = X[5]  # a batch row equal to a pool row: K = 1, the clip's case
        Y, func = X[-50:], _torch_tiles.rbf_tail
    else:
        X, Y = _data(6, 203, d, dtype), _data(7, 61, d, dtype)
        Y[-1] = X[5]  # a chunk row equal to a support row: K = 1, the clip's case
        func = _torch_tiles.rbf
    gamma = 0.7 / d
    # Oracle: exp(-gamma ||x - y||^2) from the differences, in float64.
    diff = X[:, None, :].astype(np.float64) - Y[None, :, :]
    expected = np.exp(-gamma * (diff**2).sum(-1))
    Xt = torch.from_numpy(X)
    Yt = Xt[-50:] if tile == "pool tail" else torch.from_numpy(Y)
    # Deterministic mode fills new buffers with NaN: the operands' padding must be
    # written, not found zero by chance.
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        for fold in (False, True):
            K = func(Xt, Yt, gamma=gamma, fold=fold)
            assert K.shape == expected.shape and K.dtype == Xt.dtype
            np.testing.assert_allclose(K.numpy(), expected, **_tol(dtype, None))
            assert float(K.max()) <= 1.0
    finally:
        torch.use_deterministic_algorithms(was)
    out = torch.full(expected.shape, np.nan, dtype=Xt.dtype)  # beta = 0: never read
    K = func(Xt, Yt, gamma=gamma, fold=True, out=out)
    assert K.data_ptr() == out.data_ptr()
    np.testing.assert_allclose(out.numpy(), expected, **_tol(dtype, None))
    # The default: folded only where FOLD_DEVICES says (the CPU is not in it).
    assert not _torch_tiles._folds(Xt, Yt, None)


@needs_torch
def test_torch_fit_with_folded_rbf_tail_equals_the_plain_one(monkeypatch):
    # The folded tile is the CUDA default; here it is switched on for CPU tensors.
    import torch

    from mbkkm import MiniBatchKernelKMeans
    from mbkkm.kernels import _torch_tiles

    X = torch.from_numpy(
        _data(5, 2000, 8, np.float32) + np.repeat(np.eye(8, dtype=np.float32) * 3, 250, 0)
    )
    params = dict(n_clusters=8, batch_size=256, tau=30, max_iter=40, random_state=0)
    plain = MiniBatchKernelKMeans(**params).fit(X)
    plain_labels = plain.predict(X).numpy()
    monkeypatch.setattr(_torch_tiles, "FOLD_DEVICES", ("cpu", "cuda"))
    monkeypatch.setattr(_torch_tiles, "FOLD_MIN_VALUES", 0)
    calls = []
    fold = _torch_tiles._folded
    monkeypatch.setattr(_torch_tiles, "_folded", lambda *a: calls.append(1) or fold(*a))
    folded = MiniBatchKernelKMeans(**params).fit(X)
    assert len(calls) >= 40  # every iteration's block was folded
    # The folded exponent rounds otherwise (float32): the labels of every step agree
    # exactly because no point is within rounding of a tie (checked at the end).
    assert_no_near_tie(plain.transform(X).numpy(), rtol=1e-4)
    np.testing.assert_array_equal(folded.labels_.numpy(), plain.labels_.numpy())
    np.testing.assert_allclose(folded.center_norms_, plain.center_norms_, rtol=1e-4)
    np.testing.assert_allclose(folded.batch_objective_, plain.batch_objective_, rtol=1e-4)
    # The labelling pass's tiles (support against a chunk of rows) fold too.
    calls.clear()
    np.testing.assert_array_equal(folded.predict(X).numpy(), plain_labels)
    assert calls


@pytest.mark.parametrize("fallback", [False, True])
def test_csr_matmul_in_parts_is_scipys_product(monkeypatch, fallback):
    """The host CSR product, cut in row parts over three threads and with scipy's
    public product in place of its compiled loop, is scipy's ``csr_matrix @ A`` to
    the bit: empty rows first, inside and last, repeated and unsorted columns, C and
    Fortran order A."""
    from mbkkm.backends import _numpy

    rng = np.random.RandomState(1)
    counts = np.array([0, 5, 0, 40, 1, 17, 0, 30, 0])
    indptr = np.concatenate([[0], np.cumsum(counts)])
    indices = rng.randint(0, 60, indptr[-1])
    data = rng.randn(indptr[-1])
    A = rng.randn(60, 33)
    expected = sp.csr_matrix((data, indices, indptr), shape=(counts.size, 60)) @ A
    parts = []

    def recorded(indptr, *args):
        parts.append((int(indptr[0]), int(indptr[-1])))
        return times_dense(indptr, *args)

    times_dense = _numpy._csr_times_dense
    monkeypatch.setattr(_numpy, "_csr_times_dense", recorded)
    monkeypatch.setattr(_numpy, "threads_for", lambda work, min_part: 3)
    if fallback:
        monkeypatch.setattr(_numpy, "_csr_matvecs", None)
    for a in (A, np.asfortranarray(A)):
        parts.clear()
        got = _numpy.NumpyBackend().csr_matmul(indptr, indices, data, a)
        assert got.flags.c_contiguous
        np.testing.assert_array_equal(got, expected)
        assert sorted(parts) == [(0, 45), (45, 63), (63, 93)]  # rows whole, by non-zeros


@pytest.mark.parametrize("batch_dtype", [np.float32, np.float64])
def test_new_support_is_the_kept_rows_then_the_new_rows_in_the_support_dtype(batch_dtype):
    """The oracle: S[rows_kept] then Xb[new_pos] cast to S's dtype, concatenated. A
    float64 partial_fit batch joining a float32 support was gathered by np.take with
    a casting out=, which read the buffer first (a RuntimeWarning on its garbage)."""
    from mbkkm.backends._numpy import NumpyBackend

    rng = np.random.default_rng(0)
    S = rng.normal(size=(50, 4)).astype(np.float32)
    Xb = rng.normal(size=(30, 4)).astype(batch_dtype)
    rows_kept, new_pos = rng.choice(50, 20, replace=False), rng.choice(30, 12, replace=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = NumpyBackend().new_support(S, rows_kept, Xb, new_pos)
    expected = np.concatenate([S[rows_kept], Xb[new_pos].astype(np.float32)])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected)


@needs_torch
@pytest.mark.parametrize("fit_dtype", ["float32", "float64"])
def test_tensors_of_another_dtype_are_cast_to_the_fitted_model(fit_dtype):
    """A torch model given tensors of another dtype (float32 / float64 / int) in
    predict, transform, score and partial_fit: cast to the model's dtype as torch does
    not mix dtypes (a raw 'mat1 and mat2 must have the same dtype' before); the
    results equal those of the tensor in the model's dtype."""
    import torch

    from mbkkm import KernelKMeans, MiniBatchKernelKMeans

    rng = np.random.RandomState(0)
    X = torch.as_tensor(rng.normal(size=(300, 3)).round(1), dtype=getattr(torch, fit_dtype))
    other = torch.float64 if fit_dtype == "float32" else torch.float32
    for est in (
        MiniBatchKernelKMeans(3, gamma=0.5, batch_size=64, max_iter=5, random_state=0),
        KernelKMeans(3, gamma=0.5, random_state=0),
    ):
        est.fit(X)
        for Xo in (X.to(other), (X * 10).to(torch.int64)):
            same = Xo.to(X.dtype)
            assert torch.equal(est.predict(Xo), est.predict(same))
            assert torch.equal(est.transform(Xo), est.transform(same))
            assert est.score(Xo) == est.score(same)
    est = MiniBatchKernelKMeans(3, gamma=0.5, batch_size=64, random_state=0)
    est.partial_fit(X).partial_fit(X.to(other))
    ref = MiniBatchKernelKMeans(3, gamma=0.5, batch_size=64, random_state=0)
    ref.partial_fit(X).partial_fit(X.to(other).to(X.dtype))
    assert torch.equal(est.support_vectors_, ref.support_vectors_)


@needs_torch
def test_a_meta_tensor_is_refused_by_name():
    import torch

    from mbkkm import MiniBatchKernelKMeans

    with pytest.raises(ValueError, match="'meta' device, which holds no values"):
        MiniBatchKernelKMeans(3).fit(torch.empty(100, 3, device="meta"))


@needs_torch
def test_a_callable_written_for_tensors_runs_a_whole_torch_fit():
    """The docs say callables are called with tensors on torch: also where the fit
    works on the host (k-means++ on a host copy of its points, the diagonal), which
    called them with numpy arrays (a tensor-only callable raised). Oracle: the same
    kernel written for numpy, fitted with numpy, gives the same labels."""
    import torch

    from mbkkm import KernelKMeans, MiniBatchKernelKMeans

    def on_tensors(A, B):
        assert torch.is_tensor(A) and torch.is_tensor(B)
        return torch.exp(-0.5 * torch.cdist(A, B) ** 2)

    def on_arrays(A, B):
        return np.exp(-0.5 * ((A[:, None] - B[None]) ** 2).sum(-1))

    X = np.random.RandomState(0).normal(size=(400, 3))
    for cls, params in (
        (MiniBatchKernelKMeans, {"batch_size": 64, "max_iter": 10}),
        (KernelKMeans, {}),
    ):
        ref = cls(4, kernel=on_arrays, random_state=0, **params).fit(X)
        for Xin, device in ((torch.as_tensor(X), None), (X, "torch-cpu")):
            est = cls(4, kernel=on_tensors, random_state=0, device=device, **params).fit(Xin)
            labels = est.labels_.numpy() if torch.is_tensor(est.labels_) else est.labels_
            assert np.mean(labels == ref.labels_) > 0.99, (cls.__name__, device)


@needs_torch
def test_device_auto_runs_a_tensor_where_it_lives():
    """device="auto" picks a backend for arrays; a CPU tensor was refused with it
    ('runs on numpy arrays') on a machine without a GPU, and would be refused as on
    another device on one with a GPU. It now runs where it lives, as device=None."""
    import torch

    from mbkkm import KernelKMeans, MiniBatchKernelKMeans

    X = torch.as_tensor(np.random.RandomState(0).normal(size=(300, 3)))
    for cls, params in ((MiniBatchKernelKMeans, {"max_iter": 5}), (KernelKMeans, {})):
        auto = cls(3, gamma=0.5, device="auto", random_state=0, **params).fit(X)
        ref = cls(3, gamma=0.5, random_state=0, **params).fit(X)
        assert torch.equal(auto.labels_, ref.labels_)
        assert torch.equal(auto.predict(X), ref.predict(X))
