"""tau=None (the paper's Algorithm 1 with its dynamic program), precomputed and graph kernels."""

from __future__ import annotations

import numpy as np
import pytest
from _oracles import blobs, implied_centers, plain_minibatch_kmeans
from sklearn.metrics.pairwise import rbf_kernel

from mbkkm import KernelKMeans, MiniBatchKernelKMeans
from mbkkm._core import LEARNING_RATES


@pytest.mark.parametrize("learning_rate", sorted(LEARNING_RATES))
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("gamma", [0.05, "auto"])
def test_untruncated_equals_truncated_with_huge_tau(learning_rate, seed, gamma):
    # gamma="auto" starts from the selection's partition: windows of many points
    X = blobs(n=300, seed=seed)
    params = dict(
        gamma=gamma, batch_size=40, max_iter=15, learning_rate=learning_rate, random_state=seed
    )
    dp = MiniBatchKernelKMeans(3, tau=None, **params).fit(X)
    win = MiniBatchKernelKMeans(3, tau=10**9, **params).fit(X)
    np.testing.assert_allclose(dp.batch_objective_, win.batch_objective_, rtol=1e-9)
    np.testing.assert_array_equal(dp.labels_, win.labels_)
    assert dp.inertia_ == pytest.approx(win.inertia_, rel=1e-9)
    np.testing.assert_allclose(dp.center_norms_, win.center_norms_, rtol=1e-9)
    Xn = blobs(n=40, seed=seed + 10)
    np.testing.assert_allclose(dp.transform(Xn), win.transform(Xn), rtol=1e-8, atol=1e-10)
    np.testing.assert_array_equal(dp.predict(Xn), win.predict(Xn))


@pytest.mark.parametrize("learning_rate", sorted(LEARNING_RATES))
def test_untruncated_linear_equals_plain_minibatch_kmeans(learning_rate):
    X = blobs(n=300, seed=5)
    init, b, iters, seed = X[[0, 1, 2]], 40, 12, 7
    km = MiniBatchKernelKMeans(
        3,
        kernel="linear",
        tau=None,
        init=init,
        batch_size=b,
        max_iter=iters,
        learning_rate=learning_rate,
        random_state=seed,
    ).fit(X)
    plan = np.random.RandomState(seed).randint(0, X.shape[0], size=(iters, b))
    expected = plain_minibatch_kmeans(X, init, plan, learning_rate)
    np.testing.assert_allclose(implied_centers(km), expected, rtol=1e-9, atol=1e-9)
    d2 = ((X[:, None, :] - expected[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(km.labels_, d2.argmin(1))


def test_untruncated_early_stopping_and_partial_fit_refused():
    X = blobs(n=300, seed=6)
    km = MiniBatchKernelKMeans(
        3, tau=None, batch_size=60, max_iter=100, tol=1e-2, random_state=0
    ).fit(X)
    assert km.n_iter_ < 100
    with pytest.raises(ValueError, match="tau"):
        MiniBatchKernelKMeans(3, tau=None).partial_fit(X)


def test_precomputed_equals_rbf_path():
    X = blobs(n=300, seed=8)
    Xn = blobs(n=50, seed=9)
    params = dict(batch_size=50, tau=40, max_iter=15, random_state=0)
    ref = MiniBatchKernelKMeans(3, gamma=0.05, **params).fit(X)
    K = rbf_kernel(X, gamma=0.05)
    pre = MiniBatchKernelKMeans(3, kernel="precomputed", **params).fit(K)
    np.testing.assert_array_equal(pre.labels_, ref.labels_)
    assert pre.inertia_ == pytest.approx(ref.inertia_, rel=1e-9)
    # windows hold point indices
    assert pre.support_vectors_.ndim == 1
    np.testing.assert_allclose(X[pre.support_vectors_], ref.support_vectors_)
    K_new = rbf_kernel(Xn, X, gamma=0.05)
    np.testing.assert_array_equal(pre.predict(K_new), ref.predict(Xn))
    np.testing.assert_allclose(
        pre.transform(K_new, kernel_diag=np.ones(50)), ref.transform(Xn), rtol=1e-8, atol=1e-10
    )
    with pytest.raises(ValueError, match="kernel_diag"):
        pre.transform(K_new)
    # K(x, x) < 0 is no kernel's: refused as the fit refuses a negative diagonal
    bad = np.ones(50)
    bad[7] = -1.0
    for call in (pre.transform, pre.score):
        with pytest.raises(ValueError, match=r"kernel_diag\[7\] = -1 is negative"):
            call(K_new, kernel_diag=bad)
    assert pre.score(K_new, kernel_diag=np.ones(50)) == pytest.approx(ref.score(Xn), rel=1e-8)
    # untruncated on the precomputed matrix too
    a = MiniBatchKernelKMeans(
        3, kernel="precomputed", tau=None, **{k: v for k, v in params.items() if k != "tau"}
    ).fit(K)
    b = MiniBatchKernelKMeans(
        3, gamma=0.05, tau=None, **{k: v for k, v in params.items() if k != "tau"}
    ).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)


def test_precomputed_memmap(tmp_path):
    X = blobs(n=200, seed=10)
    K = rbf_kernel(X, gamma=0.05).astype(np.float32)
    path = tmp_path / "K.dat"
    mm = np.memmap(path, dtype=np.float32, mode="w+", shape=K.shape)
    mm[:] = K
    mm.flush()
    ro = np.memmap(path, dtype=np.float32, mode="r", shape=K.shape)
    a = MiniBatchKernelKMeans(
        3, kernel="precomputed", batch_size=40, tau=30, max_iter=10, random_state=0
    ).fit(ro)
    b = MiniBatchKernelKMeans(
        3, kernel="precomputed", batch_size=40, tau=30, max_iter=10, random_state=0
    ).fit(K)
    np.testing.assert_array_equal(a.labels_, b.labels_)


def test_precomputed_init_indices():
    X = blobs(n=200, seed=11)
    K = rbf_kernel(X, gamma=0.05)
    a = MiniBatchKernelKMeans(
        3,
        kernel="precomputed",
        init=np.array([0, 5, 9]),
        batch_size=40,
        tau=30,
        max_iter=5,
        random_state=0,
    ).fit(K)
    b = MiniBatchKernelKMeans(
        3, gamma=0.05, init=X[[0, 5, 9]], batch_size=40, tau=30, max_iter=5, random_state=0
    ).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    with pytest.raises(ValueError, match="init"):
        MiniBatchKernelKMeans(3, kernel="precomputed", init=X[:3]).fit(K)


@pytest.mark.parametrize(
    ("K", "match"),
    [
        (np.ones((5, 4)), "square"),
        (np.array([[1.0, 0.2, 0.0], [0.9, 1.0, 0.1], [0.0, 0.1, 1.0]] * 1), "symmetric"),
        (np.diag([1.0, -1.0, 1.0]), "negative diagonal"),
    ],
)
def test_precomputed_bad_matrix(K, match):
    with pytest.raises(ValueError, match=match):
        MiniBatchKernelKMeans(2, kernel="precomputed", batch_size=2, max_iter=2).fit(K)


def test_precomputed_partial_fit_refused():
    K = rbf_kernel(blobs(n=20, seed=0))
    with pytest.raises(ValueError, match="partial_fit"):
        MiniBatchKernelKMeans(2, kernel="precomputed").partial_fit(K)


@pytest.mark.parametrize("kernel", ["knn", "heat"])
@pytest.mark.parametrize("tau", [30, None])
def test_graph_kernels_fit_and_predict(kernel, tau):
    from sklearn.datasets import make_moons

    from mbkkm.kernels import heat_kernel, kernel_block, knn_kernel

    X, _ = make_moons(400, noise=0.05, random_state=0)
    # The plain heat kernel: the moons' 10-NN graph has two components, and with the
    # normalised one (unit diagonal) the points of the component without a starting
    # center are at distance exactly 2 from both, a tie that rounding decides.
    params = (
        {"n_neighbors": 10}
        if kernel == "knn"
        else {"n_neighbors": 10, "t": 5.0, "normalize": False}
    )
    init = np.array([7, 300])  # the same start for both (no start from the selection of t)
    km = MiniBatchKernelKMeans(
        2,
        kernel=kernel,
        kernel_params=params,
        batch_size=64,
        tau=tau,
        max_iter=30,
        init=init,
        random_state=0,
    ).fit(X)
    assert km.labels_.shape == (400,)
    # oracle: the same run on the dense matrix of the same graph kernel
    K = knn_kernel(X, 10) if kernel == "knn" else heat_kernel(X, 10, 5.0, max_dense_bytes=0)
    K = kernel_block(K, np.arange(400), np.arange(400))
    ref = MiniBatchKernelKMeans(
        2, kernel="precomputed", batch_size=64, tau=tau, max_iter=30, init=init, random_state=0
    ).fit(K)
    np.testing.assert_array_equal(km.labels_, ref.labels_)
    assert km.inertia_ == pytest.approx(ref.inertia_, rel=1e-9)
    D = km.fit_transform(X)
    np.testing.assert_array_equal(D.argmin(1), km.labels_)
    # new points join the fitted graph
    X_new, _ = make_moons(100, noise=0.05, random_state=1)
    assert km.predict(X_new).shape == (100,)
    with pytest.raises(ValueError, match="n_neighbors"):
        MiniBatchKernelKMeans(2, kernel="knn", kernel_params={}).fit(X)


@pytest.mark.parametrize("form", ["sparse", "lowrank"])
def test_full_batch_precomputed_sparse_and_low_rank_matrices(form):
    from sklearn.datasets import make_moons

    from mbkkm import KernelKMeans
    from mbkkm.kernels import heat_kernel, kernel_block, knn_kernel

    X, _ = make_moons(300, noise=0.05, random_state=0)
    K = knn_kernel(X, 10) if form == "sparse" else heat_kernel(X, 10, t=3.0, n_components=20)
    dense = kernel_block(K, np.arange(300), np.arange(300))
    a = KernelKMeans(2, kernel="precomputed", random_state=0).fit(K)
    b = KernelKMeans(2, kernel="precomputed", random_state=0).fit(dense)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert a.inertia_ == pytest.approx(b.inertia_, rel=1e-9)
    np.testing.assert_array_equal(a.predict(dense[:20]), b.predict(dense[:20]))


@pytest.mark.parametrize("form", ["sparse", "lowrank"])
def test_precomputed_sparse_and_low_rank_matrices(form):
    """A graph kernel built once can be passed as kernel='precomputed' in its own format."""
    from sklearn.datasets import make_moons

    from mbkkm.kernels import heat_kernel, kernel_block, knn_kernel

    X, _ = make_moons(300, noise=0.05, random_state=0)
    K = knn_kernel(X, 10) if form == "sparse" else heat_kernel(X, 10, t=3.0, n_components=20)
    dense = kernel_block(K, np.arange(300), np.arange(300))
    params = dict(kernel="precomputed", batch_size=64, tau=30, max_iter=20, random_state=0)
    a = MiniBatchKernelKMeans(2, **params).fit(K)
    b = MiniBatchKernelKMeans(2, **params).fit(dense)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert a.inertia_ == pytest.approx(b.inertia_, rel=1e-9)
    with pytest.raises(ValueError, match="square"):
        import scipy.sparse as sp

        MiniBatchKernelKMeans(2, kernel="precomputed").fit(sp.csr_matrix(np.ones((4, 3))))


@pytest.mark.parametrize("estimator", ["minibatch", "full"])
@pytest.mark.parametrize(
    ("kernel", "params", "match"),
    [
        ("knn", {"n_neighbors": 0}, "n_neighbors"),
        ("knn", {"n_neighbors": 500}, "n_neighbors"),
        ("heat", {"n_neighbors": 5, "t": 0.0}, "t"),
        ("heat", {"n_neighbors": 5, "t": -1.0}, "t"),
        ("knn", {"n_neighbors": 5, "bogus": 1}, "bogus"),
    ],
)
def test_graph_kernel_bad_parameters(estimator, kernel, params, match):
    from mbkkm import KernelKMeans

    X = blobs(n=100, seed=0)
    est = (
        MiniBatchKernelKMeans(2, batch_size=20, max_iter=2)
        if estimator == "minibatch"
        else KernelKMeans(2, max_iter=2)
    )
    with pytest.raises(ValueError, match=match):
        est.set_params(kernel=kernel, kernel_params=params).fit(X)


@pytest.mark.parametrize("budget", [0, -1.0])
def test_memory_budgets_must_be_positive(budget):
    from mbkkm import KernelKMeans

    X = blobs(n=50, seed=0)
    with pytest.raises(ValueError, match="max_kernel_memory"):
        KernelKMeans(2, max_kernel_memory=budget).fit(X)
    with pytest.raises(ValueError, match="working_memory"):
        MiniBatchKernelKMeans(2, working_memory=budget).fit(X)


@pytest.mark.parametrize("form", ["dense", "float32", "sparse", "lowrank"])
@pytest.mark.parametrize("learning_rate", sorted(LEARNING_RATES))
@pytest.mark.parametrize("working_memory", [None, 0.05])
def test_untruncated_stored_rows_equal_kernel_blocks(
    monkeypatch, form, learning_rate, working_memory
):
    """The untruncated step reads a stored kernel's batch rows (K is symmetric); the
    generic path gathers K(X, X_B) in row chunks. Same fit within rounding."""
    from sklearn.datasets import make_moons

    import mbkkm._core._untruncated as untruncated
    from mbkkm.kernels import heat_kernel, knn_kernel

    X, _ = make_moons(300, noise=0.05, random_state=0)
    K = {
        "dense": lambda: rbf_kernel(X, gamma=2.0),
        "float32": lambda: rbf_kernel(X, gamma=2.0).astype(np.float32),
        "sparse": lambda: knn_kernel(X, 10),
        "lowrank": lambda: heat_kernel(X, 10, t=3.0, n_components=20),
    }[form]()
    params = dict(
        kernel="precomputed",
        batch_size=64,
        tau=None,
        max_iter=12,
        learning_rate=learning_rate,
        working_memory=working_memory,
        random_state=0,
    )
    calls = []
    real = untruncated._reads_stored_rows
    monkeypatch.setattr(
        untruncated, "_reads_stored_rows", lambda *a: calls.append(real(*a)) or calls[-1]
    )
    fast = MiniBatchKernelKMeans(2, **params).fit(K)
    assert calls and all(calls)
    monkeypatch.setattr(untruncated, "_reads_stored_rows", lambda *a: False)
    slow = MiniBatchKernelKMeans(2, **params).fit(K)
    np.testing.assert_array_equal(fast.labels_, slow.labels_)
    np.testing.assert_allclose(fast.batch_objective_, slow.batch_objective_, rtol=1e-10)
    np.testing.assert_allclose(fast.center_norms_, slow.center_norms_, rtol=1e-10)
    np.testing.assert_allclose(fast.dual_coef_, slow.dual_coef_, rtol=1e-10, atol=1e-15)
    assert fast.inertia_ == pytest.approx(slow.inertia_, rel=1e-10)


def test_untruncated_reads_rows_only_for_the_stored_points_in_order():
    from mbkkm._core._untruncated import _reads_stored_rows
    from mbkkm.kernels._index import IndexKernel

    K = IndexKernel("precomputed", np.eye(5))
    assert _reads_stored_rows(K, np.arange(5))
    assert not _reads_stored_rows(K, np.arange(4))  # a subset
    assert not _reads_stored_rows(K, np.array([1, 0, 2, 3, 4]))  # another order
    assert not _reads_stored_rows(K, np.arange(5)[:, None])  # not indices
    assert not _reads_stored_rows(lambda A, B: A @ B.T, np.arange(5))  # not stored


def test_partial_fit_after_an_untruncated_fit_is_refused_by_name():
    """A tau=None fit keeps its centers as windows for labelling only; partial_fit
    after it (set_params(tau=50)) crashed with a TypeError inside the step (a code
    review). A ValueError now says why, the model as it was."""
    X = np.random.RandomState(0).normal(size=(200, 3))
    est = MiniBatchKernelKMeans(3, tau=None, gamma=0.5, max_iter=5, random_state=0).fit(X)
    labels = est.labels_.copy()
    est.set_params(tau=50)
    with pytest.raises(ValueError, match="cannot continue a model fitted with tau=None"):
        est.partial_fit(X[:50])
    np.testing.assert_array_equal(est.predict(X), labels)


@pytest.mark.parametrize("Est", [KernelKMeans, MiniBatchKernelKMeans])
def test_low_rank_matrix_with_nan_is_refused_by_name(Est):
    """A sparse kernel matrix with NaN is refused before any work; a low-rank one's
    factors were not checked, and the fit failed later blaming the kernel's values
    (a code review)."""
    from mbkkm.kernels import LowRankKernel

    U = np.linalg.qr(np.random.RandomState(0).randn(300, 5))[0]
    U[3, 1] = np.nan
    K = LowRankKernel(U, np.array([1.0, 0.8, 0.6, 0.4, 0.2]), 0.0)
    with pytest.raises(ValueError, match="kernel matrix has NaN or inf"):
        Est(3, kernel="precomputed", random_state=0).fit(K)
