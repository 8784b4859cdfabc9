"""Dask arrays: the same seed gives the same model as numpy; chunks are read one per task."""

from __future__ import annotations

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

import dask  # noqa: E402
from dask.core import get_dependencies  # noqa: E402

from _agreement import assert_same_labels  # noqa: E402
from mbkkm import MiniBatchKernelKMeans  # noqa: E402
from mbkkm._core import _stored  # noqa: E402
from mbkkm._dask import DaskRows, _gather_tasks, check_dask_array, is_dask_array  # noqa: E402

try:
    from mbkkm.cluster._minibatch_kmeans import MiniBatchKMeans
except ImportError:  # pragma: no cover - written by another issue
    MiniBatchKMeans = None


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
    )
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def shells(n=4000, d=3, seed=0, dtype=np.float64):
    """Two noisy concentric shells (kernel k-means separates them, k-means does not)."""
    rng = np.random.RandomState(seed)
    u = rng.normal(size=(n, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    r = np.where(np.arange(n) % 2 == 0, 1.0, 4.0)
    return (u * r[:, None] + 0.1 * rng.normal(size=(n, d))).astype(dtype)


def kernel_kmeans(**kw):
    base = dict(n_clusters=2, batch_size=256, tau=100, max_iter=25, random_state=0)
    return MiniBatchKernelKMeans(**{**base, **kw})


def test_is_dask_array_does_not_import_dask():
    assert not is_dask_array(np.zeros((2, 2)))
    assert is_dask_array(da.zeros((2, 2)))


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_kernel_fit_same_as_numpy(client, seed, dtype, monkeypatch):
    # the host step on both sides (in memory, 4,000 points would take the stored
    # kernel's step, the same model up to rounding: tests/core/test_stored.py)
    monkeypatch.setattr(_stored, "STORED_KERNEL_BYTES", 0)
    X = shells(seed=seed, dtype=dtype)
    Xd = da.from_array(X, chunks=(500, 3))  # 8 chunks
    a = kernel_kmeans(gamma=0.5, random_state=seed).fit(X)
    b = kernel_kmeans(gamma=0.5, random_state=seed).fit(Xd)
    # Explicit gamma: the same rows in the same order through the same calls, so the
    # model is the same bit for bit.
    np.testing.assert_array_equal(a.support_vectors_, b.support_vectors_)
    np.testing.assert_array_equal(a.dual_coef_, b.dual_coef_)
    np.testing.assert_array_equal(a.center_norms_, b.center_norms_)
    np.testing.assert_array_equal(a.batch_objective_, b.batch_objective_)
    assert isinstance(b.labels_, da.Array)
    # The labels come from kernel blocks of another row count (one per Dask chunk), so
    # their distances are rounded differently: equal except within rounding of a tie.
    D, rtol = a.transform(X), 1e-4 if dtype == np.float32 else 1e-9
    assert_same_labels(a.labels_, b.labels_.compute(), D, rtol)
    # inertia_ is summed per chunk: equal to rounding.
    assert b.inertia_ == pytest.approx(a.inertia_, rel=1e-6 if dtype == np.float32 else 1e-12)
    assert b.n_features_in_ == 3

    pred = b.predict(Xd)
    assert isinstance(pred, da.Array)
    assert_same_labels(a.predict(X), pred.compute(), D, rtol)
    dist = b.transform(Xd)
    assert dist.chunks == (Xd.chunks[0], (2,))
    # Kernel blocks of another row count (BLAS blocking, threads): equal to rounding.
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(dist.compute(), a.transform(X), rtol=rtol, atol=rtol)
    assert b.score(Xd) == pytest.approx(a.score(X), rel=rtol)


def test_data_driven_gamma_within_rounding(client):
    X = shells(seed=3)
    Xd = da.from_array(X, chunks=(400, 3))
    w = np.random.RandomState(0).uniform(0.5, 2.0, X.shape[0])
    # gamma="mean-distance": the width from Dask reductions over the chunks
    a = kernel_kmeans(gamma="mean-distance").fit(X, sample_weight=w)
    b = kernel_kmeans(gamma="mean-distance").fit(Xd, sample_weight=w)
    assert b.gamma_selection_ is None
    assert b.kernel_.params["gamma"] == pytest.approx(a.kernel_.params["gamma"], rel=1e-13)
    assert_same_labels(a.labels_, b.labels_.compute(), a.transform(X), 1e-9)
    np.testing.assert_array_equal(a.support_vectors_, b.support_vectors_)
    np.testing.assert_allclose(a.center_norms_, b.center_norms_, rtol=1e-12)
    assert b.inertia_ == pytest.approx(a.inertia_, rel=1e-12)
    assert b.score(Xd, sample_weight=w) == pytest.approx(a.score(X, sample_weight=w), rel=1e-12)


def test_auto_gamma_keeping_the_mean_distance_width_uses_all_the_data(client):
    # A cloud without clusters: gamma="auto" keeps the mean-distance width, and that
    # is the width of all of X (from the Dask reductions), as gamma="mean-distance".
    X = np.random.RandomState(0).randn(1200, 3)
    Xd = da.from_array(X, chunks=(400, 3))
    w = np.random.RandomState(0).uniform(0.5, 2.0, X.shape[0])
    a = kernel_kmeans(n_clusters=3, gamma="auto").fit(X, sample_weight=w)
    b = kernel_kmeans(n_clusters=3, gamma="auto").fit(Xd, sample_weight=w)
    fixed = kernel_kmeans(n_clusters=3, gamma="mean-distance").fit(X, sample_weight=w)
    assert a.gamma_selection_.data_width and b.gamma_selection_.data_width
    assert a.gamma_ == fixed.gamma_
    assert b.gamma_ == pytest.approx(a.gamma_, rel=1e-13)
    assert b.gamma_selection_.gamma == b.gamma_
    np.testing.assert_array_equal(a.labels_, fixed.labels_)
    assert_same_labels(a.labels_, b.labels_.compute(), a.transform(X), 1e-9)


@pytest.mark.skipif(MiniBatchKMeans is None, reason="MiniBatchKMeans not available")
@pytest.mark.parametrize("n_init", [1, 3])
def test_minibatch_kmeans_same_as_numpy(client, n_init):
    X = shells(seed=4, dtype=np.float32)
    Xd = da.from_array(X, chunks=(500, 3))
    kw = dict(n_clusters=4, batch_size=128, max_iter=20, random_state=0, n_init=n_init)
    a = MiniBatchKMeans(**kw).fit(X)
    b = MiniBatchKMeans(**kw).fit(Xd)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    D = a.transform(X)  # labels from blocks of another row count: equal off ties
    assert_same_labels(a.labels_, b.labels_.compute(), D, 1e-4)
    assert_same_labels(a.predict(X), b.predict(Xd).compute(), D, 1e-4)
    np.testing.assert_allclose(b.transform(Xd).compute(), a.transform(X), rtol=1e-5, atol=1e-5)
    assert b.inertia_ == pytest.approx(a.inertia_, rel=1e-6)


def test_batch_rows_gathered_in_one_pass(client):
    X = shells()
    rows = DaskRows(check_dask_array(da.from_array(X, chunks=(500, 3))))
    plan = np.random.RandomState(0).randint(0, X.shape[0], size=(30, 64))
    rows.prefetch(plan)
    assert rows.n_passes == 1
    for it in range(plan.shape[0]):
        np.testing.assert_array_equal(rows[plan[it]], X[plan[it]])
    assert rows.n_passes == 1
    assert rows.n_rows_gathered == np.unique(plan).size


def test_batch_rows_in_groups_under_a_budget(client):
    X = shells()
    # 64 rows x 3 features x 8 bytes = 1536 bytes per iteration; 0.01 MiB -> 6 per group.
    rows = DaskRows(check_dask_array(da.from_array(X, chunks=(500, 3))), working_memory=0.01)
    plan = np.random.RandomState(0).randint(0, X.shape[0], size=(30, 64))
    rows.prefetch(plan)
    for it in range(plan.shape[0]):
        np.testing.assert_array_equal(rows[plan[it]], X[plan[it]])
    assert rows.n_passes == 5


def _block_keys(graph, X):
    return {k for k in graph if isinstance(k, tuple) and k[0] == X.name}


def test_every_task_reads_one_chunk(client):
    X = shells()
    Xd = da.from_array(X, chunks=(500, 3))
    rows = DaskRows(check_dask_array(Xd))
    idx = np.unique(np.random.RandomState(0).randint(0, X.shape[0], 300))
    tasks = _gather_tasks(rows._blocks, rows._bounds, idx)
    assert len(tasks) == 8
    for task in tasks:
        graph = dict(task.__dask_graph__())
        deps = get_dependencies(graph, task.key)
        # One block of X (through its delayed wrapper), nothing else.
        assert len(deps) == 1
        (dep,) = deps
        assert len(_block_keys(graph, Xd) & (get_dependencies(graph, dep) | {dep})) <= 1

    # predict: blockwise, one input chunk per output chunk, the model one key.
    km = kernel_kmeans(gamma=0.5).fit(X)
    pred = km.predict(Xd)
    graph = dict(pred.__dask_graph__())
    out_keys = [k for k in graph if isinstance(k, tuple) and k[0] == pred.name]
    assert len(out_keys) == 8
    model_keys = set()
    for key in out_keys:
        deps = set(graph[key].dependencies)  # includes the model's key
        assert len(_block_keys(graph, Xd) & deps) == 1
        model_keys |= deps - _block_keys(graph, Xd)
    assert len(model_keys) == 1  # the model, one key shared by every task
    # A key of the graph (run again if lost), not scattered data (a Future): with a
    # distributed client too.
    (model_key,) = model_keys
    assert str(model_key).startswith("mbkkm-model-") and model_key in graph


def test_model_shipped_once_without_client(monkeypatch):
    X = shells(n=600)
    Xd = da.from_array(X, chunks=(100, 3))
    km = kernel_kmeans(gamma=0.5, batch_size=64, max_iter=5).fit(X)

    def no_client():
        raise ValueError("No clients found")

    monkeypatch.setattr(distributed, "default_client", no_client)
    pred = km.predict(Xd)
    graph = dict(pred.__dask_graph__())
    model_keys = [k for k in graph if isinstance(k, str) and k.startswith("mbkkm-model-")]
    assert len(model_keys) == 1
    with dask.config.set(scheduler="sync"):
        assert_same_labels(pred.compute(), km.predict(X), km.transform(X), 1e-9)


def test_fit_labels_each_chunk_once(monkeypatch):
    """The labelling pass at the end of a fit on a Dask array: one task per chunk for
    both labels_ and inertia_ (the labels' array was fused into tasks of its own,
    which labelled every chunk a second time)."""
    from mbkkm import _dask

    X = shells(n=800)
    Xd = da.from_array(X, chunks=(200, 3))
    calls = []
    block_labels_inertia = _dask._block_labels_inertia

    def counted(model, block, w, check_rows=None):
        calls.append(block.shape[0])
        return block_labels_inertia(model, block, w, check_rows)

    def no_client():
        raise ValueError("No clients found")

    monkeypatch.setattr(_dask, "_block_labels_inertia", counted)
    monkeypatch.setattr(distributed, "default_client", no_client)
    with dask.config.set(scheduler="sync"):
        km = kernel_kmeans(gamma=0.5, batch_size=64, max_iter=5).fit(Xd)
        labels = km.labels_.compute()
    assert calls == [200, 200, 200, 200]
    ref = kernel_kmeans(gamma=0.5, batch_size=64, max_iter=5).fit(X)
    np.testing.assert_array_equal(labels, ref.labels_)
    assert km.inertia_ == pytest.approx(ref.inertia_, rel=1e-12)


def test_unknown_chunks_error(client):
    X = shells(n=400)
    Xd = da.from_array(X, chunks=(100, 3))
    Xu = Xd[Xd[:, 0] > -np.inf]  # boolean mask: chunk sizes unknown
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        kernel_kmeans(gamma=0.5).fit(Xu)
    km = kernel_kmeans(gamma=0.5, batch_size=64, max_iter=3).fit(X)
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        km.predict(Xu)


def test_bad_dask_input(client):
    km = kernel_kmeans(gamma=0.5)
    with pytest.raises(TypeError, match="dtype object"):
        km.fit(da.from_array(np.array([[1, 2], [3, 4]], dtype=object), chunks=1))
    with pytest.raises(ValueError, match="2-D"):
        km.fit(da.zeros((10, 2, 2), chunks=5))
    with pytest.raises(ValueError, match="2-D"):
        km.fit(da.zeros(10, chunks=5))
    with pytest.raises(ValueError, match="NaN or infinity"):
        kernel_kmeans(batch_size=4, max_iter=2).fit(
            da.from_array(np.full((20, 2), np.nan), chunks=5)
        )
    fitted = kernel_kmeans(gamma=0.5, batch_size=64, max_iter=3).fit(shells(n=400))
    with pytest.raises(ValueError, match="features"):
        fitted.predict(da.zeros((10, 2), chunks=5))


def test_dask_dataframe_refused(client):
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    df = dd.from_pandas(pd.DataFrame(shells(n=200), columns=list("abc")), npartitions=4)
    with pytest.raises(TypeError, match=r"to_dask_array\(lengths=True\)"):
        kernel_kmeans(gamma=0.5).fit(df)
    X = df.to_dask_array(lengths=True)
    km = kernel_kmeans(gamma=0.5, batch_size=32, max_iter=3).fit(X)
    assert km.labels_.shape == (200,)


def test_integer_dask_array_becomes_float64(client):
    X = np.random.RandomState(0).randint(0, 5, size=(300, 2))
    a = kernel_kmeans(gamma=0.5, batch_size=32, max_iter=5).fit(X)
    b = kernel_kmeans(gamma=0.5, batch_size=32, max_iter=5).fit(da.from_array(X, chunks=50))
    assert b.support_vectors_.dtype == np.float64
    np.testing.assert_array_equal(a.support_vectors_, b.support_vectors_)


def test_unsupported_kernels_and_tau_none(client):
    Xd = da.from_array(shells(n=200), chunks=50)
    with pytest.raises(ValueError, match="tau=None"):
        kernel_kmeans(gamma=0.5, tau=None).fit(Xd)
    with pytest.raises(ValueError, match="not supported on a Dask array"):
        kernel_kmeans(kernel="knn", kernel_params={"n_neighbors": 5}).fit(Xd)


def test_import_mbkkm_does_not_import_dask():
    import subprocess
    import sys

    code = "import sys, mbkkm; assert 'dask' not in sys.modules, 'dask imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_other_dask_collections_refused():
    with pytest.raises(TypeError, match="only a Dask array"):
        kernel_kmeans(gamma=0.5).fit(dask.delayed(np.zeros((10, 2))))


def test_kernel_kmeans_results_follow_a_dask_input():
    """KernelKMeans computes a Dask X (the full batch holds the data); its labels_,
    fit_predict and fit_transform come back as Dask arrays chunked as X's rows, as
    its predict and transform and the mini-batch estimators' results do (labels_ was
    numpy), with the values of the same fit on the computed array."""
    from mbkkm import KernelKMeans

    X = shells(600)
    Xd = da.from_array(X, chunks=(150, 3))
    est = KernelKMeans(n_clusters=3, gamma=1.0, random_state=0).fit(Xd)
    plain = KernelKMeans(n_clusters=3, gamma=1.0, random_state=0).fit(X)
    assert is_dask_array(est.labels_) and est.labels_.chunks == ((150,) * 4,)
    np.testing.assert_array_equal(est.labels_.compute(), plain.labels_)
    labels = KernelKMeans(n_clusters=3, gamma=1.0, random_state=0).fit_predict(Xd)
    np.testing.assert_array_equal(labels.compute(), plain.labels_)
    D = KernelKMeans(n_clusters=3, gamma=1.0, random_state=0).fit_transform(Xd)
    assert is_dask_array(D) and D.chunks == ((150,) * 4, (3,))
    expected = KernelKMeans(n_clusters=3, gamma=1.0, random_state=0).fit_transform(X)
    np.testing.assert_array_equal(D.compute(), expected)


@pytest.mark.parametrize("Est", [MiniBatchKMeans, MiniBatchKernelKMeans])
@pytest.mark.parametrize("max_iter", [1, 20])  # the row maybe never in a batch: labelled
def test_dask_rows_too_large_for_float32_are_refused(Est, max_iter):
    """numpy rows too large for the arithmetic are refused; a Dask array's were never
    checked (only NaN and infinity), and the fit ended with inertia_ nan or one point
    alone (a code review). Checked where the fit reads them: the gathered batches and
    the chunks it labels."""
    X = np.random.RandomState(0).rand(400, 3).astype(np.float32)
    X[7] = 3e19
    params = {"gamma": 0.5} if Est is MiniBatchKernelKMeans else {}
    est = Est(3, batch_size=16, max_iter=max_iter, random_state=0, **params)
    with pytest.raises(ValueError, match="too large for float32 arithmetic"):
        est.fit(da.from_array(X, chunks=100))
