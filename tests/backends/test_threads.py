"""The threading policy: one BLAS thread inside every phase, our own threads over
independent parts, a user's limits respected, the same results on 1 and 2 threads.

What "the same" means here (docs/reliability.md, Determinism). A row part is one BLAS
call on fewer rows, and an optimised GEMM may round a row differently depending on
where it falls in the call: with OpenBLAS's AVX2 (Haswell) kernels a tile cut in two
differs from the one-piece tile in the last bit of 0.2-2.5 % of the entries, from row
744 of a 750-row part on (the rows past the kernel's last whole block of rows), while
its AVX-512 (SkylakeX) kernels happen to agree. So the tests compare

* exactly, what the code computes by the same calls in the same order: each part with
  the one-thread product of the same rows, a computation with itself;
* to rounding (a tolerance derived below), one thread against two;
* labels exactly, where every point's two nearest centers are farther apart than
  rounding can move them (checked on the data), so only a bug can change them.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
import threading
from unittest import mock

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from _agreement import assert_no_near_tie
from mbkkm import KernelKMeans, MiniBatchKernelKMeans
from mbkkm.backends import _threads
from mbkkm.backends._threads import (
    effective_n_threads,
    parallel_matmul,
    parallel_parts,
    single_thread,
    thread_policy,
)
from mbkkm.cluster import MiniBatchKMeans
from mbkkm.kernels import _kernel, resolve_kernel


def blas_counts():
    return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]


@pytest.fixture
def two_threads(monkeypatch):
    """The policy sees two threads whatever the machine (its other inputs are tested
    below): the parallel paths run even on a one-core runner."""
    monkeypatch.setattr(_threads, "_physical_cpus", lambda: 2)
    with threadpool_limits(limits=2):
        yield


def test_phase_limits_blas_to_one_and_restores(two_threads):
    before = blas_counts()
    with thread_policy() as n:
        assert n == 2
        assert set(blas_counts()) == {1}
        with thread_policy() as inner:  # nested: inherits the outer count
            assert inner == 2
            assert set(blas_counts()) == {1}
        assert set(blas_counts()) == {1}
    assert blas_counts() == before


def test_user_limits_are_respected(two_threads):
    with threadpool_limits(limits=1):
        assert effective_n_threads() == 1
        with thread_policy() as n:
            assert n == 1
    with threadpool_limits(limits=1, user_api="blas"):  # BLAS only: our parts call BLAS
        assert effective_n_threads() == 1
    with threadpool_limits(limits=1, user_api="openmp"):  # scikit-learn's OpenMP count
        assert effective_n_threads() == 1
    assert effective_n_threads() == 2
    with single_thread() as n:
        assert n == 1 and effective_n_threads() == 1


_OMP_CODE = textwrap.dedent("""
    import sys, threading
    import numpy as np
    from threadpoolctl import threadpool_info
    from mbkkm import KernelKMeans, MiniBatchKernelKMeans
    from mbkkm.backends import _threads
    _threads._physical_cpus = lambda: int(sys.argv[1])  # the machine, as the test wants it
    names = set()
    def kernel(A, B):
        names.add(threading.current_thread().name)
        assert {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"} == {1}
        return A @ B.T
    X = np.random.default_rng(0).standard_normal((9000, 3))
    n = _threads.effective_n_threads()
    km = MiniBatchKernelKMeans(3, kernel=kernel, batch_size=64, tau=20, max_iter=3,
                               random_state=0).fit(X)
    km.predict(X)
    KernelKMeans(3, gamma=0.1, max_iter=3, random_state=0).fit(X[:3000])
    print(n, any(name.startswith("mbkkm") for name in names))
""")


def _run_omp(value, cores):
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    if value is not None:
        env["OMP_NUM_THREADS"] = value
    out = subprocess.run(
        [sys.executable, "-c", _OMP_CODE, str(cores)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    n, parts = out.stdout.split()
    return int(n), parts == "True"


@pytest.mark.slow
def test_omp_num_threads_is_respected():
    """OMP_NUM_THREADS (read by the runtimes at start-up) sets the count, as in
    scikit-learn: =1 gives one thread (a fit and predict never hand a part to a
    worker thread), and it may ask for more threads than physical cores."""
    assert _run_omp("1", cores=2) == (1, False)
    assert _run_omp("2", cores=1) == (2, True)  # more than the physical cores: asked for
    if (os.cpu_count() or 1) >= 2:  # OpenMP's default is the CPU count
        assert _run_omp(None, cores=1)[0] == 1  # unset: the physical cores cap it


def test_fit_keeps_a_user_limit(two_threads):
    """Under a user's threadpool_limits a fit runs on one thread, and the user's
    limits are still in force after it (not reset to the policy's or the default)."""
    X = np.random.default_rng(5).standard_normal((9000, 3))
    record = set()
    with threadpool_limits(limits=1):
        km = MiniBatchKernelKMeans(
            3, kernel=_record_kernel(record), batch_size=64, tau=20, max_iter=3, random_state=0
        ).fit(X)
        KernelKMeans(3, gamma=0.1, max_iter=3, random_state=0).fit(X[:3000])
        assert {p["num_threads"] for p in threadpool_info()} == {1}
    assert {name for name, _ in record} == {threading.current_thread().name}
    with threadpool_limits(limits=1, user_api="blas"):
        km.predict(X)
        assert set(blas_counts()) == {1}
    assert set(blas_counts()) == {2}


def test_concurrent_phases_release_blas_once(two_threads):
    """Phases in several threads (a user's threads, Dask tasks) share one BLAS limit,
    released by the last one out; each has its own thread count."""
    before = blas_counts()
    inside, go = threading.Barrier(3), threading.Event()
    seen = []

    def phase():
        with single_thread():
            inside.wait()
            go.wait()
            seen.append(effective_n_threads())

    workers = [threading.Thread(target=phase) for _ in range(2)]
    for w in workers:
        w.start()
    inside.wait()
    assert _threads._state["holders"] == 2
    assert effective_n_threads() == 2  # the main thread's count: the limit before them
    go.set()
    for w in workers:
        w.join()
    assert seen == [1, 1]
    assert _threads._state["holders"] == 0
    assert blas_counts() == before


def _in_thread(func):
    out = []
    worker = threading.Thread(target=lambda: out.append(func()))
    worker.start()
    worker.join()
    return out[0]


def test_a_phase_in_another_thread_limits_blas(two_threads):
    """threadpoolctl >= 3.8 lets one thread set OpenBLAS's process-wide count (the
    first to set it, until it gives the control back): once the main thread had run a
    phase, a phase in a user's worker thread ran with BLAS's full pool."""
    before = blas_counts()
    with thread_policy():
        assert set(blas_counts()) == {1}

    def phase():
        with thread_policy():
            return set(blas_counts())

    assert _in_thread(phase) == {1}
    assert blas_counts() == before


def test_the_last_phase_out_restores_blas_from_any_thread(two_threads):
    """The first phase in (thread A) limits BLAS, the last one out (thread B) restores
    it: B's restore did nothing where A held threadpoolctl's control, and BLAS stayed
    at one thread for the rest of the process."""
    before = blas_counts()
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = []

    def a():
        with single_thread():
            a_in.set()
            b_in.wait()
        a_out.set()

    def b():
        a_in.wait()
        with single_thread():
            b_in.set()
            a_out.wait()
            seen.append(set(blas_counts()))

    workers = [threading.Thread(target=a), threading.Thread(target=b)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert seen == [{1}]
    assert _threads._state["holders"] == 0
    assert blas_counts() == before


def test_parallel_parts_runs_parts_in_threads(two_threads):
    seen = []

    def part(r0, r1):
        seen.append(
            (r0, r1, threading.current_thread().name, effective_n_threads(), set(blas_counts()))
        )
        return r1 - r0

    assert parallel_parts(part, 10, 2) == [5, 5]
    assert sorted(s[:2] for s in seen) == [(0, 5), (5, 10)]
    assert {s[2].startswith("mbkkm") for s in seen} == {True, False}  # caller + a worker
    assert all(s[3] == 1 and s[4] == {1} for s in seen)  # no nested split, one BLAS thread


def test_parallel_parts_error_propagates(two_threads):
    def part(r0, r1):
        if r0 > 0:
            raise RuntimeError("boom")
        return 0

    before = blas_counts()
    with pytest.raises(RuntimeError, match="boom"):
        parallel_parts(part, 10, 2)
    assert blas_counts() == before


def test_parallel_matmul_equals_matmul(two_threads):
    rng = np.random.default_rng(0)
    K = rng.random((3000, 2000))
    A = rng.random((2000, 5))
    assert _threads.threads_for(3000 * 2000 * 5) == 2
    out = parallel_matmul(K, A)
    with threadpool_limits(limits=1):
        ref = K @ A
        # each part is the one-thread product of its rows: the same call, exactly
        bounds = np.linspace(0, 3000, 3).astype(np.intp)  # parallel_parts' parts
        for r0, r1 in itertools.pairwise(bounds):
            np.testing.assert_array_equal(out[r0:r1], K[r0:r1] @ A)
    # The whole product in one call sums each entry's 2000 terms in the kernel's
    # order for its row position: all terms are positive, so both orders are within
    # 2000 * 2**-53 = 2.2e-13 of the exact sum, relatively (Higham, Accuracy and
    # Stability of Numerical Algorithms, section 3.1).
    np.testing.assert_allclose(out, ref, rtol=5e-13, atol=0)


def tile_threads(kern, X, Y):
    """The threads the tile K(X, Y) runs on (1: in one piece, no parallel parts)."""
    with mock.patch.object(_kernel, "parallel_parts", wraps=_kernel.parallel_parts) as parts:
        kern(X, Y)
    return parts.call_args.args[2] if parts.called else 1


@pytest.mark.parametrize("name", ["rbf", "linear", "polynomial", "sigmoid", "cosine"])
def test_tile_in_parts_equals_one_piece(two_threads, name):
    """A large tile computed in row parts on two threads: each part is exactly the
    one-thread tile of its rows, and the whole equals the one-piece tile to rounding,
    with and without the left side prepared (rbf's augmented rows)."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((1500, 40)).astype(np.float32)
    Y = rng.standard_normal((1200, 40)).astype(np.float32)
    kern = resolve_kernel(name, gamma=0.01)
    assert tile_threads(kern, X, Y) == 2
    tile = kern(X, Y)
    out = np.empty_like(tile)
    prepared = kern(X, Y, out=out, **kern.prepare(X))
    bounds = np.linspace(0, X.shape[0], 3).astype(np.intp)  # parallel_parts' parts
    with threadpool_limits(limits=1):
        assert tile_threads(kern, X, Y) == 1
        ref = kern(X, Y)
        for r0, r1 in itertools.pairwise(bounds):
            assert tile_threads(kern, X[r0:r1], Y) == 1
            np.testing.assert_array_equal(tile[r0:r1], kern(X[r0:r1], Y))
    np.testing.assert_array_equal(prepared, tile)  # the same parts, prepared once
    # One piece against parts: an inner product of d float32 terms summed in another
    # order moves by at most 2 d u |x| |y| (u = 2**-24; rbf's augmented rows have
    # d + 2 terms, products up to |x|**2 + |y|**2 <= 2 r**2), 8e-4 here; every kernel maps
    # it with a gain of at most 1 at gamma = 0.01 (polynomial 3 gamma (1 + gamma
    # <x, y>)**2 < 0.1, rbf 4 gamma, sigmoid gamma, cosine on unit rows). Observed:
    # 8e-6 (OpenBLAS Haswell, linear). A wrong row or part moves entries by O(1).
    r = max(np.linalg.norm(X, axis=1).max(), np.linalg.norm(Y, axis=1).max())
    bound = 2 * (X.shape[1] + 2) * 2.0**-24 * 2 * r**2
    np.testing.assert_allclose(tile, ref, rtol=0, atol=bound)


def _record_kernel(record):
    def kernel(A, B, gamma=0.5):
        record.add((threading.current_thread().name, tuple(blas_counts())))
        d = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2 * A @ B.T
        return np.exp(-gamma * np.maximum(d, 0))

    return kernel


def test_fit_and_predict_run_under_the_policy(two_threads):
    """Every kernel call of a fit and of predict sees one BLAS thread; the labelling
    uses our threads, and none under a user's threadpool_limits(1)."""
    X = np.random.default_rng(2).standard_normal((9000, 3))
    record = set()
    km = MiniBatchKernelKMeans(
        3, kernel=_record_kernel(record), batch_size=64, tau=20, max_iter=3, random_state=0
    ).fit(X)
    assert {blas for _, blas in record} == {(1,) * len(blas_counts())}
    assert any(name.startswith("mbkkm") for name, _ in record)  # the labelling parts
    record.clear()
    with threadpool_limits(limits=1):
        km.predict(X)
    assert {name for name, _ in record} == {threading.current_thread().name}
    assert set(blas_counts()) == {2}  # restored after the calls


def _fit_all(X):
    mb = MiniBatchKernelKMeans(
        5, gamma=0.05, batch_size=512, tau=100, max_iter=5, random_state=0
    ).fit(X)
    kk = KernelKMeans(5, gamma=0.05, max_iter=5, random_state=0).fit(X[:3000])
    mk = MiniBatchKMeans(5, batch_size=512, max_iter=5, random_state=0).fit(X)
    return mb, kk, mk


def test_same_results_with_one_and_two_threads(two_threads):
    """Fits and labels agree on one and on two threads. The parts split rows only, but
    a row part may round differently from the whole (see the module docstring): the
    distances agree to rounding, and the labels exactly, because no point here has two
    centers within rounding (1e-15 relative in float64) of each other; so do the
    coefficients and centers, which the steps compute on one thread from the labels,
    the random draws and the rows. A flip in any step of a fit changes every later
    step, so a wrong part is caught too."""
    X = np.random.default_rng(3).standard_normal((20000, 64))
    mb2, kk2, mk2 = _fit_all(X)
    with threadpool_limits(limits=1):
        mb1, kk1, mk1 = _fit_all(X)
        labels1 = mb2.predict(X)
        D1 = mb2.transform(X)
    np.testing.assert_allclose(mb2.transform(X), D1, rtol=1e-12, atol=1e-12)
    assert_no_near_tie(D1, rtol=1e-9)  # far from any tie: the labels are determined
    np.testing.assert_array_equal(mb2.predict(X), labels1)
    for a, b in [(mb1, mb2), (kk1, kk2), (mk1, mk2)]:
        assert_no_near_tie(a.transform(X[:3000]), rtol=1e-9)
        np.testing.assert_array_equal(a.labels_, b.labels_)
        assert a.inertia_ == pytest.approx(b.inertia_, rel=1e-12)
    # computed in one thread from the labels, the draws and the rows: equal exactly
    np.testing.assert_array_equal(mb1.dual_coef_, mb2.dual_coef_)
    np.testing.assert_array_equal(mk1.cluster_centers_, mk2.cluster_centers_)


def test_torch_threads_follow_the_policy(two_threads):
    torch = pytest.importorskip("torch")
    old = torch.get_num_threads()
    with threadpool_limits(limits=1), thread_policy() as n:
        assert n == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == old


def test_torch_runs_on_one_thread_in_a_phase_of_two(two_threads):
    """torch's pool spins like BLAS's: one thread inside a phase, whatever the
    phase's count for our own parts; its count back after."""
    torch = pytest.importorskip("torch")
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with thread_policy() as n:
            assert n == 2 and torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(old)


class _FakeTorch:
    """torch's thread-count calls, recorded (a stand-in imported in mid-phase)."""

    def __init__(self, n):
        self.n, self.calls = n, []

    def get_num_threads(self):
        return self.n

    def set_num_threads(self, n):
        self.calls.append(n)
        self.n = n


def test_torch_imported_in_a_phase_joins_it(two_threads, monkeypatch):
    """torch imported after the phase started (a fit with device="torch") gets the
    phase's count when mbkkm starts using it, once, and its own count back at the
    end of the outermost phase; outside a phase nothing is set."""
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    fake = _FakeTorch(8)
    _threads.torch_joins()  # no phase: nothing
    with threadpool_limits(limits=1), thread_policy() as n:
        assert n == 1
        monkeypatch.setitem(sys.modules, "torch", fake)
        assert fake.calls == []
        _threads.torch_joins()
        assert fake.calls == [1]
        with thread_policy():  # nested: the outer phase's scope stands
            _threads.torch_joins()
        _threads.torch_joins()
        assert fake.calls == [1]
    assert fake.calls == [1, 8] and fake.n == 8
    _threads.torch_joins()
    assert fake.calls == [1, 8]


def test_the_torch_backend_door_joins_the_phase(two_threads, monkeypatch):
    """Every torch computation starts at the torch backend's door, which joins the
    phase (torch's count set there, once)."""
    pytest.importorskip("torch")
    from mbkkm.backends import _torch_backend
    from mbkkm.backends._torch import TorchBackend  # imports the real torch first

    monkeypatch.delitem(sys.modules, "torch")
    fake = _FakeTorch(8)
    with threadpool_limits(limits=1), thread_policy():
        monkeypatch.setitem(sys.modules, "torch", fake)  # "imported" in mid-phase
        assert isinstance(_torch_backend("cpu"), TorchBackend)
        assert fake.calls == [1]
        _torch_backend("cpu")
    assert fake.calls == [1, 8]


@pytest.mark.slow
def test_fit_that_imports_torch_follows_the_policy():
    """End to end in a fresh process: torch is first imported inside fit
    (device="torch" on numpy data); every kernel call sees the phase's one thread
    (the user's threadpool_limits(1)), and torch's own count is back after."""
    pytest.importorskip("torch")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("torch's default is one thread here: nothing to tell apart")
    code = textwrap.dedent("""
        import sys
        import numpy as np
        from threadpoolctl import threadpool_limits
        from mbkkm import KernelKMeans, MiniBatchKernelKMeans
        seen = set()
        def kernel(A, B):
            seen.add(sys.modules["torch"].get_num_threads())
            return A @ B.T
        X = np.random.default_rng(0).standard_normal((400, 3))
        assert "torch" not in sys.modules
        with threadpool_limits(limits=1):
            MiniBatchKernelKMeans(3, kernel=kernel, batch_size=64, tau=20, max_iter=3,
                                  device="torch", random_state=0).fit(X)
            KernelKMeans(3, kernel=kernel, max_iter=3, device="torch",
                         random_state=0).fit(X)
        print(sorted(seen), sys.modules["torch"].get_num_threads())
    """)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    seen, after = out.stdout.strip().rsplit(" ", 1)
    assert seen == "[1]"
    assert int(after) > 1  # restored: torch's own default on this multi-core machine


def test_dask_tasks_run_on_one_thread(two_threads):
    da = pytest.importorskip("dask.array")
    X = np.random.default_rng(4).standard_normal((9000, 3))
    record = set()
    km = MiniBatchKernelKMeans(
        3,
        kernel=_record_kernel(record),
        batch_size=64,
        tau=20,
        max_iter=2,
        compute_labels=False,
        random_state=0,
    ).fit(X)
    record.clear()
    km.predict(da.from_array(X, chunks=9000)).compute(scheduler="threads")
    assert not any(name.startswith("mbkkm") for name, _ in record)


def test_one_thread_everywhere_limits_openmp_too(two_threads):
    before = threadpool_info()
    with _threads.one_thread_everywhere():
        assert effective_n_threads() == 1
        assert {p["num_threads"] for p in threadpool_info()} == {1}
    assert [p["num_threads"] for p in threadpool_info()] == [p["num_threads"] for p in before]


def _parts_in_a_child(n):
    return _threads.parallel_parts(lambda start, stop: (start, stop), n, 2)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_runs_parallel_parts():
    """The pool's worker threads are not copied into a forked child: a part handed to
    them there was waited for forever (a fit in a ``multiprocessing`` worker with the
    fork start method hung once its parent had fitted). The child starts a pool."""
    import multiprocessing

    assert _threads.parallel_parts(lambda start, stop: stop - start, 10, 2) == [5, 5]
    assert _threads._state["pool"] is not None  # the parent's pool, with its threads
    with multiprocessing.get_context("fork").Pool(1) as pool:
        got = pool.apply_async(_parts_in_a_child, (10,)).get(timeout=60)
    assert got == [(0, 5), (5, 10)]


def test_parts_are_taken_while_other_threads_grow_the_pool():
    """A phase asking for more threads than the pool has replaces it and shuts the old
    one down; a part submitted to the old pool after that was refused ("cannot
    schedule new futures after shutdown") where phases of other sizes ran in other
    threads. Here the pool is made to grow again and again under four threads."""
    errors = []

    def phases(seed):
        for i in range(300):
            try:
                assert _threads.parallel_parts(lambda a, b: b - a, 64, 2 + (i + seed) % 6)
            except Exception as exc:  # the error is the finding
                errors.append(exc)
                return
            if (i + seed) % 7 == 0:  # the next larger phase grows the pool again
                with _threads._lock:
                    _threads._state["pool_size"] = 0

    workers = [threading.Thread(target=phases, args=(seed,)) for seed in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []


def test_a_limit_the_user_sets_in_another_thread_meanwhile_stays(two_threads):
    """A user's ``threadpool_limits`` block left in one thread while a phase runs in
    another: BLAS's count is the user's once both are done (the last phase out put
    back the count it had found, inside the user's block: one thread for good)."""
    before = blas_counts()
    in_phase, user_done = threading.Event(), threading.Event()

    def phase():
        with single_thread():
            in_phase.set()
            user_done.wait()

    worker = threading.Thread(target=phase)
    with threadpool_limits(limits=1, user_api="blas"):
        worker.start()
        in_phase.wait()
    user_done.set()
    worker.join()
    assert blas_counts() == before


def test_an_interrupt_as_the_last_phase_closes_still_puts_blas_back(two_threads, monkeypatch):
    """A KeyboardInterrupt while the last phase out reads BLAS's count (to see whether
    another thread set it) left BLAS at one thread for the rest of the process."""
    before, real = blas_counts(), _threads._pools

    def pools():
        state = _threads._state
        if state["holders"] == 0 and state["limiter"] is not None:  # the last one out
            raise KeyboardInterrupt
        return real()

    monkeypatch.setattr(_threads, "_pools", pools)
    with pytest.raises(KeyboardInterrupt), single_thread():
        assert set(blas_counts()) == {1}
    monkeypatch.setattr(_threads, "_pools", real)
    assert _threads._state["holders"] == 0 and _threads._state["limiter"] is None
    assert blas_counts() == before
