"""One threading policy for every phase: small BLAS calls on one thread, our own
threads over independent work, and no thread that waits for a busy core.

Why. An mbkkm fit is a long sequence of small products (the iteration's kernel
block, the Lloyd steps of the width selection, k-means++). A multi-threaded BLAS
splits each of them across its pool and its threads spin while they wait for one
another; when other programs hold the cores, every call waits for a thread that
is not running, so a fit of a fraction of a second can take many seconds.
scikit-learn's ``KMeans`` shows the way out, and this module follows it:

* inside a *phase* (a fit, a labelling pass, predict, a Dask task) BLAS runs with
  **one thread** (``threadpoolctl``, as ``threadpool_limits(1, "blas")`` in
  scikit-learn's k-means loops);
* the parallelism is **our own**: independent work (row parts of a large kernel
  tile or of a product with a stored kernel matrix, the sparse sums of kernel rows,
  the labelling chunks) is cut
  into as many parts as there are threads, each part computed by one Python
  thread (NumPy and BLAS release the GIL), and only where a part is large enough
  to pay for the hand-over (:data:`MIN_PART_WORK`). A waiting Python thread
  sleeps instead of spinning, so a busy core costs time, never a spin;
* the number of threads is **scikit-learn's**: OpenMP's maximum (which
  ``OMP_NUM_THREADS`` and ``threadpoolctl.threadpool_limits`` set), capped by the
  BLAS limit in force and, unless ``OMP_NUM_THREADS`` asks for more, by the
  physical cores the process may use (:func:`effective_n_threads`). A user who
  writes ``with threadpool_limits(1):`` around a fit gets one thread everywhere;
* torch's own pool of threads gets **one thread**, as BLAS does, through a
  ``torch.set_num_threads(1)`` scope, from the phase's start when torch is
  imported, else from the moment the phase starts using it (:func:`torch_joins`;
  this module never imports torch). Its OpenMP threads spin at every operation's
  end like BLAS's: a torch CPU fit of PenDigits (defaults, a fixed width) took
  6.2-6.8 s with two threads and 3.1-3.4 s with one on the project's 2-core
  machine beside one other job, and 25.8-50.0 s against 6.8 s with one more busy
  process;
* a Dask task runs with one thread (:func:`single_thread`): the scheduler's own
  workers are the parallelism there.

Phases nest: the innermost one inherits the outer thread count, and the BLAS
limit is taken once per process however many phases (threads of a user, Dask
tasks) run at the same time, and released by the last one out.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np

#: Work (multiply-adds, or elementwise operations) below which a part is not worth
#: a thread. Handing a part to a worker thread and waiting for it costs about
#: 0.25 ms on the project's 2-core machine; an rbf tile in two parts against one
#: thread (``benchmarks/bench_threads.py --tiles``): 2.1e6 multiply-adds in all
#: 2.1x slower, 8.4e6 0.91x, 3.3e7 0.74x (d = 16); 1.3e7 1.14x, 5.2e7 0.87x
#: (d = 784). Parts of at least 1e7 stay on the right side of both.
MIN_PART_WORK = 10_000_000

_lock = threading.RLock()
_state = {
    "controller": None,
    "with_torch": False,
    "holders": 0,
    "limiter": None,
    "saved_blas": None,
    "pool": None,
    "pool_size": 0,
}
_local = threading.local()  # .budget: the thread count of this thread's current phase


# ----------------------------------------------------------------- thread counts
@functools.lru_cache(maxsize=1)
def _physical_cpus():
    """Physical cores this process may use (affinity and cgroup quota included)."""
    from joblib import cpu_count  # scikit-learn's own choice (a dependency of it)

    return max(1, int(cpu_count(only_physical_cores=True)))


def _pools():
    """threadpoolctl's view of the loaded thread pools, built once (12 ms) and again
    when torch has been imported since (its OpenMP runtime is then loaded), and the
    smallest thread count among its loaded pools of each API (``{"openmp": ...,
    "blas": ...}``; None: no pool of that API)."""
    with _lock:
        torch_loaded = "torch" in sys.modules
        if _state["controller"] is None or (torch_loaded and not _state["with_torch"]):
            from threadpoolctl import ThreadpoolController

            _state["controller"] = ThreadpoolController()
            _state["with_torch"] = torch_loaded
        controller = _state["controller"]
    counts = {"openmp": None, "blas": None}
    for lib in controller.lib_controllers:
        if lib.user_api in counts and lib.num_threads:  # the smallest of the API's pools
            counts[lib.user_api] = min(lib.num_threads, counts[lib.user_api] or lib.num_threads)
    return controller, counts


def effective_n_threads():
    """The number of threads mbkkm may use now (at least 1).

    Inside a phase (:func:`thread_policy`), the phase's number. Otherwise
    scikit-learn's rule (``sklearn.utils._openmp_helpers``): OpenMP's maximum
    number of threads, which ``OMP_NUM_THREADS`` and ``threadpool_limits`` set,
    capped by the physical cores unless ``OMP_NUM_THREADS`` is set; and, because
    our parts call BLAS, capped by the BLAS limit in force (a user's
    ``threadpool_limits(1, "blas")`` or ``OPENBLAS_NUM_THREADS=1`` gives one
    thread).
    """
    budget = getattr(_local, "budget", None)
    if budget is not None:
        return budget
    # OMP_NUM_THREADS as an int (its first level), or None when unset or unreadable
    try:
        env = max(1, int(os.environ.get("OMP_NUM_THREADS", "").split(",")[0]))
    except ValueError:
        env = None
    with _lock:  # while a phase holds BLAS at one thread, the limit before it counts
        counts = _pools()[1]
        blas = _state["saved_blas"] if _state["holders"] else counts["blas"]
    n = counts["openmp"] or env or _physical_cpus()  # counts and env: None or >= 1
    cores = _physical_cpus() if env is None else n  # a cap unless OMP_NUM_THREADS is set
    return max(1, int(min(n, cores, blas or n)))


def threads_for(work, n_threads=None, min_part=MIN_PART_WORK):
    """Threads worth using on ``work`` operations split in equal parts: at most
    ``n_threads`` (default :func:`effective_n_threads`), each part at least
    ``min_part`` operations (default :data:`MIN_PART_WORK`)."""
    n = effective_n_threads() if n_threads is None else n_threads
    return int(max(1, min(n, work // min_part)))


# ------------------------------------------------------------------------ phases
@contextmanager
def _in_control_of_openblas():
    """Let the calling thread set OpenBLAS's thread count, and give the control back.

    OpenBLAS's count (on its pthreads layer) is process-wide, and threadpoolctl >= 3.8
    lets one thread set it: the first to do so, until that thread clears its control
    (which ``with threadpool_limits(...)`` does on exit, and a bare limit does not), the
    others' calls silently doing nothing. The phases take and restore the count under
    :data:`_lock`, from whichever thread opens the first phase or closes the last: a
    worker thread of the user's (joblib's threading backend, Dask's threads) fitted
    with BLAS's full pool once the main thread had fitted, and a restore from another
    thread than the one that limited left BLAS at one thread.
    """
    import threadpoolctl

    openblas = getattr(threadpoolctl, "OpenBLASController", None)
    clear = getattr(openblas, "clear_controlling_thread", None)  # threadpoolctl >= 3.8
    if clear is not None:
        clear(force=True)
    try:
        yield
    finally:
        if clear is not None:
            clear()  # only where this thread took the control


@contextmanager
def _one_blas_thread():
    """BLAS limited to one thread for the process inside: the first holder takes the
    limit, the last one out restores it (whichever threads they are), unless the
    count was set again meanwhile (a ``threadpool_limits`` of the user's in another
    thread, entered or left while the phases ran): that setting then stays."""
    with _lock:
        if _state["holders"] == 0:
            controller, counts = _pools()
            _state["saved_blas"] = counts["blas"]
            with _in_control_of_openblas():
                _state["limiter"] = controller.limit(limits=1, user_api="blas")
        _state["holders"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["holders"] -= 1
            if _state["holders"] == 0:
                _release_blas()


def _release_blas():
    """The BLAS count put back as the first phase found it, unless another thread set
    it meanwhile (to another count than the phases' one thread, the only sign of it).
    The phases' state is cleared first, and the count put back even where reading it
    is interrupted (a KeyboardInterrupt left BLAS at one thread for good)."""
    limiter, restore = _state["limiter"], True
    try:
        restore = _pools()[1]["blas"] in (None, 1)
    finally:
        _state["limiter"] = None
        _state["saved_blas"] = None
        if limiter is not None and restore:
            with _in_control_of_openblas():
                limiter.restore_original_limits()


def torch_joins():
    """Give torch one thread for the current phase (see the module docstring), once
    per phase, when torch is imported: called where every torch computation of mbkkm
    starts (the torch backend's constructor, behind :func:`mbkkm.backends.get_backend` and
    :func:`mbkkm.backends.backend_for`), so a phase that imports torch itself
    (``device="torch"`` on numpy data) gets the scope too. Cheap and idempotent;
    outside a phase, or in one of our worker threads, it does nothing."""
    phase = getattr(_local, "torch_phase", None)
    torch = sys.modules.get("torch")
    if phase is None or phase["old"] is not None or not hasattr(torch, "get_num_threads"):
        return
    phase["old"] = torch.get_num_threads()
    if phase["old"] != phase["n"]:
        torch.set_num_threads(phase["n"])


@contextmanager
def thread_policy(n_threads=None):
    """Run a phase under the policy; yields its number of threads.

    BLAS runs with one thread inside (process-wide, restored by the last phase
    out), and so does torch's pool when torch is imported (``torch.set_num_threads``);
    our own parallel parts (:func:`parallel_parts`) use the yielded number. Nested
    phases inherit the outer number.

    Parameters
    ----------
    n_threads : int, optional
        An upper bound (1: :func:`single_thread`); default
        :func:`effective_n_threads`.
    """
    outer = getattr(_local, "budget", None)
    n = effective_n_threads()  # the outer phase's, if any
    if n_threads is not None:
        n = max(1, min(n, int(n_threads)))
    # torch's pool: set for the outermost phase only (a call costs a pool resize), now
    # if torch is imported, else when the phase starts using it (torch_joins)
    phase = {"n": 1, "old": None}  # torch's spinning pool: one thread, as BLAS
    with _one_blas_thread():
        _local.budget = n
        try:
            if outer is None:
                _local.torch_phase = phase
                if "torch" in sys.modules:
                    torch_joins()
            yield n
        finally:
            if outer is None:
                _local.torch_phase = None
            if phase["old"] not in (None, 1):  # torch joined (it is imported): restored
                sys.modules["torch"].set_num_threads(phase["old"])
            _local.budget = outer


def single_thread():
    """A phase on one thread (a Dask task: the scheduler's workers are the parallelism)."""
    return thread_policy(1)


@contextmanager
def one_thread_everywhere():
    """One thread for mbkkm, BLAS **and OpenMP** (scikit-learn's own loops) for the
    scope: for a sequence of small calls into scikit-learn (the width selection's
    k-means and neighbour searches on a 1000-point sample), whose OpenMP threads
    spin as BLAS's do."""
    with thread_policy(1), _pools()[0].limit(limits=1):
        yield


# ------------------------------------------------------------- our own threads
def _forget_the_pool():
    """After a fork, in the child: only the forking thread was copied, so the pool's
    worker threads do not exist there, and a part handed to them would be waited for
    forever (``multiprocessing``'s fork start method hung on the first fit in a child
    whose parent had fitted). The next parallel phase starts a new pool; the lock is
    new too (another thread of the parent may have held it at the fork)."""
    global _lock
    _lock = threading.RLock()
    _state["pool"] = None
    _state["pool_size"] = 0


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_forget_the_pool)


def _init_worker():
    _local.budget = 1  # a part never splits again


def parallel_parts(func, n, n_threads):
    """``[func(start, stop) for each part]`` over ``n_threads`` row parts of ``range(n)``.

    Parts run in the pool's threads, under the BLAS limit of one thread (taken
    here when no phase holds it); with one thread, ``func(0, n)`` runs in the
    caller. The results come in part order.
    """
    n_threads = max(1, min(int(n_threads), n))
    bounds = np.linspace(0, n, n_threads + 1).astype(np.intp).tolist()  # near-equal parts
    outer = getattr(_local, "budget", None)
    with _one_blas_thread():
        _local.budget = 1  # the caller computes the first part, and a part never splits again
        futures = []
        try:
            if n_threads > 1:
                # a process-wide pool, created once (grown when a larger phase asks): no
                # thread start per call. The parts are submitted under the lock: a larger
                # phase in another thread shuts the old pool down (its queued parts still
                # run), which then refuses new ones.
                with _lock:
                    if _state["pool_size"] < n_threads:
                        old = _state["pool"]
                        _state["pool"] = ThreadPoolExecutor(
                            n_threads, thread_name_prefix="mbkkm", initializer=_init_worker
                        )
                        _state["pool_size"] = n_threads
                        if old is not None:
                            old.shutdown(wait=False)
                    pool = _state["pool"]
                    futures = [
                        pool.submit(func, bounds[i], bounds[i + 1]) for i in range(1, n_threads)
                    ]
            return [func(bounds[0], bounds[1]), *(f.result() for f in futures)]
        finally:
            for f in futures:  # on an error: no part left running outside the BLAS limit
                f.cancel() or f.exception()
            _local.budget = outer


def parallel_matmul(K, A):
    """``K @ A`` for a large dense K (n, p) and a thin A (p, k), in row parts.

    With one BLAS thread per part the product of a stored kernel matrix with the
    Lloyd step's (n, k) matrix uses every thread the policy allows, and only where
    each part has :data:`MIN_PART_WORK` multiply-adds.
    """
    n = K.shape[0]
    out = np.empty((n, A.shape[1]), dtype=np.result_type(K.dtype, A.dtype))

    def part(r0, r1):
        np.matmul(K[r0:r1], A, out=out[r0:r1])

    parallel_parts(part, n, threads_for(n * K.shape[1] * A.shape[1]))
    return out
