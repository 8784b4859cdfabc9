"""Rows chunked in a .npy file, labelled by a LocalCluster of worker processes.

The labels equal the in-process ones bit for bit, also when a worker process is
killed (SIGKILL) in the middle of a pass: Dask reruns the lost tasks on the other
worker and the nanny restarts the killed one. Also when every worker is killed at
once: the pass waits for the nannies' restarts, then reruns (no hang, no error).
"""

from __future__ import annotations

import os
import pickle
import signal
import threading

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

from distributed.diagnostics.plugin import SchedulerPlugin  # noqa: E402

from mbkkm import MiniBatchKernelKMeans  # noqa: E402
from mbkkm._dask import NpyFile, read_npy  # noqa: E402

N, D, CHUNK = 20_000, 8, 1_000  # 20 chunks: a pass is 20 tasks
PARAMS = dict(n_clusters=3, batch_size=256, tau=100, max_iter=30, gamma=0.5, random_state=0)


def shells(n=N, d=D, seed=0):
    """Three noisy concentric shells, float32."""
    rng = np.random.RandomState(seed)
    u = rng.normal(size=(n, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    r = rng.randint(1, 4, n)
    return (u * r[:, None] + 0.05 * rng.normal(size=(n, d))).astype(np.float32)


@pytest.fixture(scope="module")
def npy(tmp_path_factory):
    """(path, rows, the in-process model fitted on the rows)."""
    path = tmp_path_factory.mktemp("rows") / "X.npy"
    X = shells()
    np.save(path, X)
    return str(path), X, MiniBatchKernelKMeans(**PARAMS).fit(X)


def _local_cluster():
    cluster = distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0"
    )
    client = distributed.Client(cluster)
    client.wait_for_workers(2, timeout=300)
    return cluster, client


@pytest.fixture(scope="module")
def client():
    cluster, c = _local_cluster()
    with c:
        yield c
    cluster.close()


@pytest.fixture
def fresh_client():
    """A cluster of its own: a test that kills a worker leaves no restart behind."""
    cluster, c = _local_cluster()
    with c:
        yield c
    cluster.close()


# ------------------------------------------------------------------ read_npy
def test_read_npy_graph_holds_the_path_not_the_rows(tmp_path):
    X = np.random.RandomState(0).rand(10_000, 8)  # 640 kB
    path = tmp_path / "X.npy"
    np.save(path, X)
    Xd = read_npy(path, chunk_rows=1_000)
    assert Xd.shape == X.shape and Xd.dtype == X.dtype
    assert Xd.chunks == ((1_000,) * 10, (8,))
    assert len(pickle.dumps(dict(Xd.__dask_graph__()))) < 4_000
    # The pitfall read_npy avoids: from_array of a memory map pickles every row.
    mm = np.load(path, mmap_mode="r")
    assert len(pickle.dumps(dict(da.from_array(mm, chunks=1_000).__dask_graph__()))) > X.nbytes
    np.testing.assert_array_equal(Xd.compute(scheduler="sync"), X)
    np.testing.assert_array_equal(Xd[2_500:2_600].compute(scheduler="sync"), X[2_500:2_600])
    # The same file and chunks: the same keys (and different chunks, other keys).
    assert read_npy(path, chunk_rows=1_000).name == Xd.name
    assert read_npy(path, chunk_rows=500).name != Xd.name
    assert read_npy(path).chunks == ((10_000,), (8,))  # "auto": one chunk here


def test_read_npy_fortran_order_and_1d(tmp_path):
    X = np.asfortranarray(np.arange(60.0).reshape(20, 3))
    np.save(tmp_path / "f.npy", X)
    Xd = read_npy(tmp_path / "f.npy", chunk_rows=7)
    np.testing.assert_array_equal(Xd.compute(scheduler="sync"), X)
    np.save(tmp_path / "v.npy", np.arange(10))
    v = read_npy(tmp_path / "v.npy", chunk_rows=4)
    assert v.chunks == ((4, 4, 2),)
    np.testing.assert_array_equal(v.compute(scheduler="sync"), np.arange(10))


def test_read_npy_errors(tmp_path):
    np.save(tmp_path / "X.npy", np.zeros((10, 2)))
    with pytest.raises(ValueError, match="chunk_rows"):
        read_npy(tmp_path / "X.npy", chunk_rows=0)
    with pytest.raises(FileNotFoundError):
        read_npy(tmp_path / "missing.npy")
    Xd = read_npy(tmp_path / "X.npy", chunk_rows=5)
    np.save(tmp_path / "X.npy", np.zeros((12, 2)))  # replaced after it was opened
    with pytest.raises(RuntimeError, match=r"changed after it was opened.*read_npy_dask"):
        Xd.compute(scheduler="sync")
    (tmp_path / "d.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match=r"not a \.npy file"):
        read_npy(tmp_path / "d.csv")
    np.save(tmp_path / "s.npy", np.float64(1.0))
    with pytest.raises(ValueError, match="0-d"):
        read_npy(tmp_path / "s.npy")


# ------------------------------------------------------------------ LocalCluster
def _client_never_reads(monkeypatch):
    """The client process refuses to read the file: only the workers (processes that
    import mbkkm afresh) may."""

    def refuse(self, key):
        raise AssertionError("the client read rows of the .npy file")

    monkeypatch.setattr(NpyFile, "__getitem__", refuse)


def test_fit_predict_on_npy_through_local_cluster(client, npy, monkeypatch):
    path, X, ref = npy
    _client_never_reads(monkeypatch)
    Xd = read_npy(path, chunk_rows=CHUNK)
    km = MiniBatchKernelKMeans(**PARAMS).fit(Xd)
    # Explicit gamma: the same batch rows through the same calls, bit for bit.
    np.testing.assert_array_equal(km.support_vectors_, ref.support_vectors_)
    np.testing.assert_array_equal(km.dual_coef_, ref.dual_coef_)
    assert isinstance(km.labels_, da.Array)
    assert np.array_equal(km.labels_.compute(), ref.labels_)
    labels = km.predict(Xd)
    assert isinstance(labels, da.Array) and labels.chunks == (Xd.chunks[0],)
    assert np.array_equal(labels.compute(), ref.predict(X))
    assert km.inertia_ == pytest.approx(ref.inertia_, rel=1e-6)


class KillOnFirstResult(SchedulerPlugin):
    """SIGKILLs the worker process that has just finished the first task of a pass.

    Runs in the scheduler (in this process for a LocalCluster) at the transition
    processing -> memory of the first task whose key starts with ``prefix``: the
    worker dies holding that result, with the pass's other tasks still to run.
    With ``every_worker``, every worker process is killed at that moment.
    """

    def __init__(self, scheduler, prefix, pids, every_worker=False):
        self.scheduler, self.prefix, self.pids = scheduler, prefix, pids
        self.every_worker = every_worker
        self.killed = None
        self.removed = []
        self.finished = {}  # key -> times it reached memory
        self.done = threading.Event()

    def _ours(self, key):
        name = key[0] if isinstance(key, tuple) else key
        return str(name).startswith(self.prefix)

    def transition(self, key, start, finish, *args, stimulus_id, **kwargs):
        if finish != "memory" or not self._ours(key):
            return
        self.finished[key] = self.finished.get(key, 0) + 1
        if self.killed is not None:
            return
        worker = kwargs.get("worker")
        if worker not in self.pids:
            return
        left = sum(ts.state != "memory" for k, ts in self.scheduler.tasks.items() if self._ours(k))
        victims = list(self.pids) if self.every_worker else [worker]
        for victim in victims:
            os.kill(self.pids[victim], signal.SIGKILL)
        self.killed = dict(key=key, worker=worker, victims=victims, left=left)
        self.done.set()

    def remove_worker(self, scheduler, worker, *, stimulus_id, **kwargs):
        self.removed.append(worker)


def _with_killer(client, prefix, every_worker=False):
    pids = client.run(os.getpid)
    assert len(pids) == 2
    scheduler = client.cluster.scheduler
    plugin = KillOnFirstResult(scheduler, prefix, pids, every_worker)
    scheduler.add_plugin(plugin, name=f"kill-{prefix}")
    return plugin


def _check_killed(client, plugin):
    client.cluster.scheduler.remove_plugin(name=f"kill-{plugin.prefix}")
    assert plugin.killed is not None, "no worker was killed"
    # Killed mid-pass: tasks of the pass were still to run ...
    assert plugin.killed["left"] > 0
    # ... the scheduler lost the worker(s), and ran the result it held again.
    assert set(plugin.killed["victims"]) <= set(plugin.removed)
    assert plugin.finished[plugin.killed["key"]] >= 2
    alive = set(client.run(os.getpid).values())
    assert not alive & {plugin.pids[victim] for victim in plugin.killed["victims"]}


@pytest.mark.slow
def test_worker_killed_mid_predict_changes_nothing(fresh_client, npy):
    client = fresh_client
    path, X, ref = npy
    Xd = read_npy(path, chunk_rows=CHUNK)
    km = MiniBatchKernelKMeans(**PARAMS, compute_labels=False).fit(Xd)
    plugin = _with_killer(client, "_block_call")  # predict's per-chunk task
    labels = client.compute(km.predict(Xd)).result(timeout=300)
    _check_killed(client, plugin)
    assert np.array_equal(labels, ref.predict(X))


@pytest.mark.slow
def test_worker_killed_mid_fit_gather_changes_nothing(fresh_client, npy):
    client = fresh_client
    path, _, ref = npy
    Xd = read_npy(path, chunk_rows=CHUNK)
    plugin = _with_killer(client, "_take_rows")  # a pass gathering batch rows
    km = MiniBatchKernelKMeans(**PARAMS).fit(Xd)
    _check_killed(client, plugin)
    np.testing.assert_array_equal(km.support_vectors_, ref.support_vectors_)
    np.testing.assert_array_equal(km.dual_coef_, ref.dual_coef_)
    assert np.array_equal(km.labels_.compute(), ref.labels_)


@pytest.mark.slow
def test_worker_killed_mid_fit_labels_changes_nothing(fresh_client, npy):
    client = fresh_client
    path, _, ref = npy
    Xd = read_npy(path, chunk_rows=CHUNK)
    plugin = _with_killer(client, "_block_labels_inertia")  # the pass of labels_
    km = MiniBatchKernelKMeans(**PARAMS).fit(Xd)
    _check_killed(client, plugin)
    assert np.array_equal(km.labels_.compute(), ref.labels_)
    assert km.inertia_ == pytest.approx(ref.inertia_, rel=1e-6)


@pytest.mark.slow
def test_every_worker_killed_mid_predict_changes_nothing(fresh_client, npy):
    """Both worker processes SIGKILLed at once, mid-pass (issue 39: a hang was once
    seen, never reproduced): the pass waits for the nannies to restart the workers,
    reruns what was lost, and the labels do not change."""
    client = fresh_client
    path, X, ref = npy
    Xd = read_npy(path, chunk_rows=CHUNK)
    km = MiniBatchKernelKMeans(**PARAMS, compute_labels=False).fit(Xd)
    plugin = _with_killer(client, "_block_call", every_worker=True)
    labels = client.compute(km.predict(Xd)).result(timeout=300)
    _check_killed(client, plugin)
    assert len(plugin.killed["victims"]) == 2
    assert np.array_equal(labels, ref.predict(X))
