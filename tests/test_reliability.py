"""Reliability: empty clusters, persistence and resumption, interrupted fits,
determinism across BLAS thread counts, and memory budgets (docs/reliability.md)."""

from __future__ import annotations

import pickle
import tracemalloc
import warnings

import numpy as np
import pytest
import skops.io as sio
from sklearn import config_context
from sklearn.datasets import make_blobs
from threadpoolctl import threadpool_limits

from _agreement import assert_no_near_tie
from mbkkm import KernelKMeans, KernelMemoryError, MiniBatchKernelKMeans, MiniBatchKMeans
from mbkkm.cluster import EmptyClusterWarning
from mbkkm.kernels import LowRankKernel, heat_kernel


def _blobs(n=300, d=2, seed=0):
    rng = np.random.RandomState(seed)
    centers = np.array([[0.0] * d, [6.0] * d, [-6.0] + [6.0] * (d - 1)])
    return centers[rng.randint(0, 3, n)] + rng.randn(n, d)


def _gram(X, gamma=0.1):
    return np.exp(-gamma * ((X[:, None] - X[None]) ** 2).sum(-1))


# --------------------------------------------------------------- empty clusters
def test_cluster_without_batch_points_keeps_its_center():
    """alpha_j = 0 for a cluster that no batch point joins (estimator Notes)."""
    init = np.array([[0.0, 0.0], [100.0, 100.0]])
    est = MiniBatchKernelKMeans(n_clusters=2, kernel="linear", init=init, tau=5)
    batch = np.random.RandomState(0).randn(16, 2)  # all nearer to center 0
    est.partial_fit(batch)
    est.partial_fit(batch + 0.1)
    far = est.support_labels_ == 1
    np.testing.assert_array_equal(est.support_vectors_[far], [[100.0, 100.0]])
    np.testing.assert_array_equal(est.dual_coef_[far], [1.0])
    assert est.center_norms_[1] == 20000.0
    mk = MiniBatchKMeans(n_clusters=2, init=init).partial_fit(batch)
    np.testing.assert_array_equal(mk.cluster_centers_[1], [100.0, 100.0])


@pytest.mark.parametrize("Est", [MiniBatchKernelKMeans, MiniBatchKMeans, KernelKMeans])
def test_empty_cluster_warning_is_a_convergence_warning(Est):
    from sklearn.exceptions import ConvergenceWarning

    X = np.repeat([[0.0, 0.0], [1.0, 1.0]], 10, axis=0)
    with pytest.warns(ConvergenceWarning, match="2 of the n_clusters=4"):
        Est(n_clusters=4, random_state=0, max_iter=5).fit(X)
    assert issubclass(EmptyClusterWarning, ConvergenceWarning)


# ------------------------------------------------------------------ persistence
def _models():
    X = _blobs()
    G = _gram(X)
    mb = dict(n_clusters=3, batch_size=32, tau=20, max_iter=10, random_state=0)
    return [
        ("mbkkm-rbf", MiniBatchKernelKMeans(**mb), X, X),
        ("mbkkm-poly", MiniBatchKernelKMeans(kernel="poly", **mb), X, X),
        ("mbkkm-untruncated", MiniBatchKernelKMeans(**{**mb, "tau": None}), X, X),
        ("mbkkm-precomputed", MiniBatchKernelKMeans(kernel="precomputed", **mb), G, G),
        ("kkm-rbf", KernelKMeans(n_clusters=3, random_state=0), X, X),
        ("kkm-precomputed", KernelKMeans(n_clusters=3, kernel="precomputed", random_state=0), G, G),
        ("mbkm", MiniBatchKMeans(n_clusters=3, batch_size=32, max_iter=10, random_state=0), X, X),
    ]


def _same_outputs(a, b, X):
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    np.testing.assert_array_equal(a.labels_, b.labels_)
    if not (getattr(a, "kernel", None) == "precomputed"):
        np.testing.assert_array_equal(a.transform(X), b.transform(X))
        assert a.score(X) == b.score(X)


@pytest.mark.parametrize("case", range(7), ids=[m[0] for m in _models()])
def test_pickle_round_trip(case):
    _, est, X, Xp = _models()[case]
    est.fit(X)
    _same_outputs(est, pickle.loads(pickle.dumps(est)), Xp)


@pytest.mark.parametrize("case", range(7), ids=[m[0] for m in _models()])
def test_skops_round_trip(case, tmp_path):
    _, est, X, Xp = _models()[case]
    est.fit(X)
    path = tmp_path / "model.skops"
    sio.dump(est, path)
    untrusted = sio.get_untrusted_types(file=path)
    # only mbkkm's own types, and numpy.dtype (IndexKernel.dtype) for precomputed
    assert all(t.startswith("mbkkm.") or t == "numpy.dtype" for t in untrusted), untrusted
    loaded = sio.load(path, trusted=untrusted)
    _same_outputs(est, loaded, Xp)


def test_cli_load_model_trusts_only_mbkkm_types(tmp_path):
    from mbkkm.cli import load_model

    X = _blobs()
    est = MiniBatchKernelKMeans(
        n_clusters=3, batch_size=32, tau=20, max_iter=5, random_state=0
    ).fit(X)
    path = tmp_path / "m.skops"
    sio.dump(est, path)
    _same_outputs(est, load_model(path), X)
    from fractions import Fraction

    est.bad_ = Fraction(1, 3)  # a foreign type inside an mbkkm estimator: named
    sio.dump(est, tmp_path / "bad.skops")
    with pytest.raises(ValueError, match=r"types mbkkm does not trust: fractions\.Fraction"):
        load_model(tmp_path / "bad.skops")
    sio.dump({"model": est}, tmp_path / "dict.skops")  # not an estimator at the top
    with pytest.raises(ValueError, match="is a skops file holding a dict, not one of mbkkm's"):
        load_model(tmp_path / "dict.skops")


@pytest.mark.parametrize("fmt", ["pickle", "skops"])
@pytest.mark.parametrize("Est", [MiniBatchKernelKMeans, MiniBatchKMeans])
def test_partial_fit_resumes_after_reload(Est, fmt, tmp_path):
    X = _blobs()
    batches = [X[i::6] for i in range(6)]
    kw = dict(n_clusters=3, random_state=0)
    if Est is MiniBatchKernelKMeans:
        kw["tau"] = 30
    ref = Est(**kw)
    for b in batches:
        ref.partial_fit(b)
    est = Est(**kw)
    for b in batches[:3]:
        est.partial_fit(b)
    if fmt == "pickle":
        est = pickle.loads(pickle.dumps(est))
    else:
        path = tmp_path / "m.skops"
        sio.dump(est, path)
        est = sio.load(path, trusted=sio.get_untrusted_types(file=path))
    for b in batches[3:]:
        est.partial_fit(b)
    if Est is MiniBatchKernelKMeans:
        np.testing.assert_array_equal(est.support_vectors_, ref.support_vectors_)
        np.testing.assert_array_equal(est.dual_coef_, ref.dual_coef_)
        np.testing.assert_array_equal(est.center_norms_, ref.center_norms_)
    else:
        np.testing.assert_array_equal(est.cluster_centers_, ref.cluster_centers_)
    np.testing.assert_array_equal(est.batch_objective_, ref.batch_objective_)


# ------------------------------------------------------------ interrupted fits
class _Linear:
    """A linear kernel that raises KeyboardInterrupt from call ``at`` on."""

    def __init__(self, at=None):
        self.at = at
        self.calls = 0

    def __call__(self, A, B):
        self.calls += 1
        if self.at is not None and self.calls >= self.at:
            raise KeyboardInterrupt
        return A @ B.T


def _snapshot(est):
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in vars(est).items()}


def _assert_same_state(est, snap):
    assert set(vars(est)) == set(snap)
    for k, v in snap.items():
        if isinstance(v, np.ndarray):
            np.testing.assert_array_equal(getattr(est, k), v)
        else:
            assert getattr(est, k) is v, k


@pytest.mark.parametrize(
    "Est, at",
    [
        (MiniBatchKernelKMeans, 3),  # the initialisation
        (MiniBatchKernelKMeans, 12),  # a mini-batch iteration
        (KernelKMeans, 2),  # the diagonal
        (KernelKMeans, 3),  # the kernel matrix
    ],
)
def test_interrupted_refit_leaves_previous_model(Est, at):
    X = _blobs()
    est = Est(n_clusters=3, kernel="linear", random_state=0, max_iter=10).fit(X)
    snap = _snapshot(est)
    labels = est.predict(X)
    est.set_params(kernel=_Linear(at))
    with pytest.raises(KeyboardInterrupt):
        est.fit(X[:, :1])  # other data, other n_features_in_
    est.set_params(kernel="linear")
    _assert_same_state(est, snap)
    np.testing.assert_array_equal(est.predict(X), labels)


def test_interrupted_partial_fit_leaves_previous_model():
    X = _blobs()
    kernel = _Linear()
    est = MiniBatchKernelKMeans(n_clusters=3, kernel=kernel, tau=20, random_state=0)
    est.partial_fit(X[:100]).partial_fit(X[100:200])
    snap = _snapshot(est)
    kernel.at = kernel.calls + 1
    with pytest.raises(KeyboardInterrupt):
        est.partial_fit(X[200:])
    _assert_same_state(est, snap)
    kernel.at = None  # resumed: the same result as an uninterrupted run
    est.partial_fit(X[200:])
    ref = MiniBatchKernelKMeans(n_clusters=3, kernel=_Linear(), tau=20, random_state=0)
    ref.partial_fit(X[:100]).partial_fit(X[100:200]).partial_fit(X[200:])
    np.testing.assert_array_equal(est.dual_coef_, ref.dual_coef_)


def test_interrupted_first_fit_leaves_estimator_unfitted():
    est = MiniBatchKMeans(n_clusters=3, random_state=0)
    snap = _snapshot(est)
    with pytest.raises(ValueError):
        est.fit(np.full((10, 2), np.nan))
    _assert_same_state(est, snap)
    with pytest.raises(KeyboardInterrupt):
        MiniBatchKernelKMeans(n_clusters=3, kernel=_Linear(4)).fit(_blobs())


# ------------------------------------------------------------------- determinism
@pytest.mark.parametrize(
    "make",
    [
        lambda: MiniBatchKernelKMeans(
            n_clusters=3, batch_size=64, tau=30, max_iter=20, random_state=0
        ),
        lambda: KernelKMeans(n_clusters=3, random_state=0),
        lambda: MiniBatchKMeans(n_clusters=3, batch_size=64, max_iter=20, random_state=0),
    ],
    ids=["MiniBatchKernelKMeans", "KernelKMeans", "MiniBatchKMeans"],
)
def test_same_seed_same_labels_across_runs_and_blas_threads(make):
    X = _blobs(n=600, d=8)
    runs = []
    for threads in (1, 2, 1):
        with threadpool_limits(limits=threads, user_api="blas"):
            runs.append(make().fit(X))
    # Across thread counts the row parts round differently (docs/reliability.md,
    # Determinism), so the labels agree exactly because no point is within rounding
    # of a tie (checked); with the same thread count, bit for bit whatever the data.
    assert_no_near_tie(runs[0].transform(X), rtol=1e-9)
    for est in runs[1:]:
        np.testing.assert_array_equal(est.labels_, runs[0].labels_)
    # bit for bit with the same thread count
    assert runs[2].inertia_ == runs[0].inertia_
    # across thread counts, BLAS may sum in another order: equal up to rounding
    np.testing.assert_allclose(runs[1].inertia_, runs[0].inertia_, rtol=1e-12)


# ---------------------------------------------------------------- memory budgets
def test_kernel_kmeans_refuses_before_any_kernel_evaluation():
    calls = []

    def kernel(A, B):
        calls.append(1)
        return A @ B.T

    X = np.random.RandomState(0).randn(3000, 2)
    est = KernelKMeans(n_clusters=2, kernel=kernel, max_kernel_memory=1, working_memory=0.01)
    with pytest.raises(KernelMemoryError, match="max_kernel_memory"):
        est.fit(X)
    assert calls == [] and not hasattr(est, "kernel_")
    with config_context(working_memory=0.01), pytest.raises(MemoryError, match="GiB"):
        KernelKMeans(n_clusters=2, kernel="rbf", max_kernel_memory=1).fit(X)


def test_heat_kernel_respects_dense_budget():
    X = _blobs(n=400)
    K = heat_kernel(X, 10, t=1.0, max_dense_bytes=400 * 400 * 8 - 1, n_components=None)
    assert isinstance(K, LowRankKernel)
    dense = heat_kernel(X, 10, t=1.0, max_dense_bytes=400 * 400 * 8)
    assert isinstance(dense, np.ndarray)


def _peak_bytes(func):
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        func()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "make",
    [
        lambda: MiniBatchKernelKMeans(
            n_clusters=8, batch_size=256, tau=100, max_iter=3, random_state=0, compute_labels=False
        ),
        lambda: MiniBatchKMeans(
            n_clusters=8, batch_size=256, max_iter=3, random_state=0, compute_labels=False
        ),
    ],
    ids=["MiniBatchKernelKMeans", "MiniBatchKMeans"],
)
def test_predict_peak_memory_within_working_memory(make):
    """The labelling pass works in chunks of rows sized from working_memory."""
    rng = np.random.RandomState(0)
    X = rng.randn(20_000, 16)
    est = make().fit(X[:2000])
    n = X.shape[0]
    outputs = 3 * n * 8  # labels, min distances (and one row-sized temporary)
    with config_context(working_memory=1):  # 1 MiB
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", EmptyClusterWarning)
            peak = _peak_bytes(lambda: est.predict(X))
    assert peak <= 3 * 2**20 + outputs, peak / 2**20
    # without the budget, one chunk (all rows x all support points) is far larger
    m = getattr(est, "support_vectors_", np.empty((8, 1))).shape[0]
    assert n * m * 8 > 10 * (3 * 2**20 + outputs) or m == 8


@pytest.mark.parametrize("Est", [KernelKMeans, MiniBatchKernelKMeans])
@pytest.mark.parametrize("kernel", ["rbf", "precomputed", "heat", "knn"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_distances_come_in_the_dtype_of_the_rows(Est, kernel, dtype):
    """reliability.md: float32 rows give float32 ``transform`` and ``fit_transform``.
    With a float32 kernel matrix, and with the graph kernels, one or both returned
    float64 (KernelKMeans' fit_transform, the graph kernels' transform)."""
    X, _ = make_blobs(300, 4, centers=3, random_state=0)
    X = X.astype(dtype)
    params = {"kernel_params": {"n_neighbors": 10}} if kernel == "knn" else {}
    data, kernel_diag = X, None
    if kernel == "precomputed":
        data = np.exp(-0.1 * ((X[:, None] - X[None]) ** 2).sum(-1)).astype(dtype)
        kernel_diag = np.diag(data)
    elif kernel == "rbf":
        params = {"gamma": 0.1}
    est = Est(3, kernel=kernel, random_state=0, **params)
    fitted = est.fit_transform(data)
    extra = {} if kernel_diag is None else {"kernel_diag": kernel_diag[:50]}
    new = est.transform(data[:50], **extra)
    assert fitted.dtype == dtype and new.dtype == dtype
    np.testing.assert_array_equal(new.argmin(1), est.predict(data[:50]))
