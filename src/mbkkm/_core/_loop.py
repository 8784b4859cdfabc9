"""The mini-batch loop: one loop, one stopping rule, for every step.

:class:`Loop` runs iterations of a step until ``max_iter`` or until early stopping
meets its rule (the paper's Algorithm 1: f_B(C_i) - f_B(C_{i+1}) < tol on the same
batch), in blocks that end on a *read-back*: the moment the host knows the
objectives of the iterations done. After every read-back it calls its hooks:
``on_progress(iteration, max_iter, objective)`` and ``on_read_back(state)`` (a
checkpoint saves there). The steps are one of two kinds:

* a host function of the iteration, ``step(i) -> (f_B(C_i), f_B(C_{i+1}) or
  None)`` (the host-planned windows step, the untruncated table step,
  MiniBatchKMeans' explicit centers): one iteration per block, its objectives host
  floats read back as they come, the rule applied by the loop;
* :class:`DeviceSteps`, which gives the loop ``block(n_iter)``, the iterations of
  the next block, and ``run(start, stop)``, which runs them and returns their
  objectives f_B(C_i), f_B(C_{i+1}) and whether the run stopped early: the
  device-resident step (:func:`mbkkm._core._pool.advance`)
  in blocks of 1, 2, 4, ... ``read_every`` iterations without a host round trip (on
  CUDA, replays of one captured CUDA graph), then one read-back of the objectives,
  the iteration counter and the overflow marks. Early stopping is decided on the
  device by the same rule: the iteration that meets it is the last one that changes
  the state, the following ones of the block leave it as it is (at most
  ``read_every - 1`` wasted iterations). When a block overflowed the pool's
  capacities, the state of the block's start (a device copy) is repacked into a
  larger layout and the block is run again: the result is the same as with enough
  room from the start.

:func:`fit_loop` chooses between the two once, where a kernel fit's loop starts,
from the backend of the data (:func:`step_for` does the same for one step).

:class:`FitState` is everything a truncated mini-batch fit holds between two
iterations: the centers (host windows, or the device :class:`~mbkkm._core._pool.Pool`
with its layout), the iteration counter, the batch plan and the random generator
it was drawn from (its state after the draw), and what the host has read back
(the batch objectives, whether early stopping has stopped the run). The running
counts N_j and the iteration stamp live inside the centers. Saving a FitState and
the data is enough to resume a fit to the same model: :func:`snapshot` gives its
host values (what a checkpoint saves, :mod:`mbkkm.cluster._checkpoint`) and
:func:`fit_loop` continues from them.
"""

from __future__ import annotations

import threading
from dataclasses import astuple, dataclass, field, replace
from typing import Any

import numpy as np

from .._warn import warn
from ..backends import get_backend
from ._state import NON_FINITE, READ_EVERY, WindowState  # noqa: F401 (READ_EVERY re-exported)
from ._stored import stored_kernel_for, stored_step, to_rows, training_labels
from ._windows import minibatch_step

#: Replay device iterations from one captured CUDA graph (False: eager calls).
CUDA_GRAPHS = True


def step_for(backend):
    """The one-iteration step of a :class:`WindowState` on ``backend``:
    ``step(state, Xb, cfg, batch_weight=None) -> StepResult``, in place on state.

    The host-planned step on the host; on torch the device step in fixed shapes
    (pack, advance, unpack). Both are kept: the fixed-shape formulation on CPU
    tensors takes about 1.7 times the host step's time per iteration.
    """
    if backend.is_host:
        return minibatch_step
    from ._pool import step_windows

    return step_windows


@dataclass(kw_only=True)
class Progress:
    """What the host has read back of a run: iterations done, their objectives
    f_B(C_i) (and f_B(C_{i+1}) with early stopping), whether it stopped early."""

    n_iter: int = 0
    objectives: list = field(default_factory=list)
    objectives_after: list = field(default_factory=list)
    converged: bool = False


class Loop:
    """Iterations of one step implementation, up to ``max_iter`` or early stopping.

    Parameters
    ----------
    steps : callable or DeviceSteps
        A host function ``step(i) -> (f_B(C_i), f_B(C_{i+1}) or None)``, or the device
        steps' ``block(n_iter) -> int`` and ``run(start, stop) -> (objectives, afters,
        stopped)`` (see the module docstring).
    state : Progress
        What the loop advances (a :class:`FitState` for a kernel fit).
    max_iter : int
    tol : float or None
        Early stopping threshold (None: every iteration runs).
    describe : callable, optional
        ``describe() -> str``, a few words on the state for progress lines (default:
        none).
    items : array or tensor, optional
        A kernel fit's items (its loop's :meth:`finish` turns stored-kernel items into
        their rows).

    Attributes
    ----------
    on_progress : list of callables
        ``callback(iteration, max_iter, objective)`` after every read-back:
        iterations done, and the last one's batch objective.
    on_read_back : list of callables
        ``callback(state)`` after every read-back, ``state`` complete (checkpoints).
    """

    def __init__(self, steps, state, *, max_iter, tol, describe=str, items=None):
        self.steps, self.state = steps, state
        self.max_iter, self.tol = max_iter, tol
        self.describe, self.items = describe, items
        self.on_progress, self.on_read_back = [], []

    n_iter = property(lambda self: self.state.n_iter)
    converged = property(lambda self: self.state.converged)
    objectives = property(lambda self: self.state.objectives)
    objectives_after = property(lambda self: self.state.objectives_after)

    def finish(self):
        """A kernel fit's centers as a :class:`WindowState` (the device pool unpacked, or
        the stored kernel's items turned into data rows with their block Gram).

        The steps and the device side are let go at once (the pool, its constants and
        a captured CUDA graph with its private memory), before the labelling that
        follows a fit: the FitState and its device steps refer to each other, so
        dropping the loop alone would wait for the garbage collector.
        """
        fs, self.steps = self.state, None
        if fs.device is not None:
            fs.windows = fs.device.P.unpack(fs.pool, fs.layout)
            fs.device = fs.pool = None
        if fs.stored is not None:
            fs.labelled = training_labels(fs.windows, fs.stored)
            fs.windows = to_rows(fs.windows, self.items, fs.stored)
            fs.stored = None
        if not np.all(np.isfinite(fs.windows.host_norms())):  # the last update's values
            raise ValueError(NON_FINITE)
        return fs.windows

    def run_until(self, until):
        """Advance to ``min(until, max_iter)`` iterations, or until early stopping."""
        state = self.state
        until = min(until, self.max_iter)
        while state.n_iter < until and not state.converged:
            start = state.n_iter
            if isinstance(self.steps, DeviceSteps):
                stop = min(until, start + self.steps.block(start))
                objectives, afters, stopped = self.steps.run(start, stop)
                if not objectives:  # a device block that overflowed: run again
                    continue
            else:  # a host function: one iteration, and the early stopping rule
                objective, after = self.steps(start)
                if not np.isfinite(objective):
                    raise ValueError(NON_FINITE)
                objectives, afters = [objective], [after]
                stopped = self.tol is not None and objective - after < self.tol
            state.objectives.extend(objectives)
            if self.tol is not None:
                state.objectives_after.extend(afters)
            state.n_iter += len(objectives)
            state.converged = stopped
            for callback in self.on_progress:
                callback(state.n_iter, self.max_iter, objectives[-1])
            for callback in self.on_read_back:
                callback(state)
        return state


@dataclass(kw_only=True)
class FitState(Progress):
    """Everything a mini-batch fit holds between two iterations (see the module docstring).

    Attributes
    ----------
    windows : WindowState or None
        The centers on the host path (None on a device, see ``pool``).
    pool : Pool or None
        The device-resident centers (torch), with ``layout`` its shapes.
    layout : Layout or None
    plan : BatchPlan or ndarray of shape (max_iter, batch_size)
        Indices of every batch, from ``random_state`` (a :class:`BatchPlan` draws
        them as the iterations reach them; a device copies the whole plan).
    random_state : numpy.random.RandomState
        The fit's generator (the plan draws from it).
    device : DeviceSteps or None
        On a device, the running steps (their copies of the plan and of the log, a
        captured CUDA graph): derived from the fields above and rebuilt from them.
    stored : StoredKernel or None
        Small n on the host: the kernel matrix the iterations index
        (:mod:`mbkkm._core._stored`); ``windows`` then holds items, not rows.
    labelled : tuple of ndarray or None
        With a stored kernel, once finished: the labels and minimum distances of the
        training points, read from the rows the iterations kept.

    and the fields of :class:`Progress`. They are complete whenever the loop has
    returned (it ends on a read-back); in between, the device is ahead of ``n_iter``.
    """

    windows: WindowState | None
    pool: object
    layout: object
    plan: np.ndarray
    random_state: object
    device: object = field(default=None, repr=False, compare=False)
    stored: object = field(default=None, repr=False, compare=False)
    labelled: object = field(default=None, repr=False, compare=False)

    @property
    def max_iter(self):
        return self.plan.shape[0]

    @property
    def done(self):
        return self.converged or self.n_iter >= self.max_iter

    def support_size(self):
        """Support points of the current centers (on a device: one small read-back)."""
        if self.windows is not None:
            return int(self.windows.support.shape[0])
        return int((self.pool.block[: self.layout.M] != self.layout.free).sum())

    def describe(self):
        """A few words on the centers, for progress lines."""
        return f"{self.support_size()} support points"


def function_loop(step, max_iter, tol):
    """The :class:`Loop` of a host step function ``step(i) -> (f_B(C_i), f_B(C_{i+1})
    or None)`` (the untruncated table step, MiniBatchKMeans' explicit centers)."""
    return Loop(step, Progress(), max_iter=max_iter, tol=tol)


def fit_loop(windows, items, plan, random_state, cfg, saved=None):
    """The :class:`Loop` of a kernel fit, from its initial windows or the FitState
    that :func:`snapshot` saved (``saved``), on the backend of ``items``.

    The step is chosen here, once, from the backend of ``items``: the host-planned
    step one iteration at a time, or the device steps.
    """
    fs = FitState(windows=windows, pool=None, layout=None, plan=plan, random_state=random_state)
    if saved is None:
        on_device = not get_backend(windows.support).is_host
    else:
        fs.windows = saved.get("windows")
        fs.n_iter, fs.converged = int(saved["n_iter"]), bool(saved["converged"])
        fs.objectives = list(saved["objectives"])
        fs.objectives_after = list(saved["objectives_after"])
        on_device = not get_backend(items).is_host
        if ("pool" in saved) != on_device:
            raise ValueError(
                "the saved fit state ran on "
                f"{'a device' if 'pool' in saved else 'the host'}, this fit does not"
            )
    if on_device:
        fs.device = DeviceSteps(fs, items, cfg, saved=saved)
    elif saved is None:
        stored = stored_kernel_for(items, windows, cfg.kernel)
        if stored is not None:
            fs.stored, fs.windows = stored
    elif saved.get("stored", False):
        fs.stored, _ = stored_kernel_for(items, None, cfg.kernel, extra=saved.get("stored_extra"))
    steps = fs.device
    if steps is None:
        nx = get_backend(items)

        def step(i):
            """One host iteration (the host-planned step, or the stored kernel's)."""
            if fs.stored is not None:
                res = stored_step(fs.windows, fs.plan[i], fs.stored, cfg)
            else:
                res = minibatch_step(fs.windows, nx.take(items, nx.index(fs.plan[i])), cfg)
            return res.objective, res.objective_after

        steps = step
    return Loop(steps, fs, max_iter=plan.shape[0], tol=cfg.tol, describe=fs.describe, items=items)


def snapshot(fs):
    """A complete FitState as host values, without the plan and the generator.

    What a checkpoint saves (:mod:`mbkkm.cluster._checkpoint`): the centers (host
    windows; on a device, every pool buffer copied to numpy as it is, its layout and
    the read-back cadence, so that :func:`fit_loop` continues with the same shapes and
    the same blocks of iterations), the counter and what the host has read back.
    The plan is left out: it is drawn again from the generator.
    """
    out = {
        "n_iter": int(fs.n_iter),
        "objectives": [float(v) for v in fs.objectives],
        "objectives_after": [float(v) for v in fs.objectives_after],
        "converged": bool(fs.converged),
    }
    if fs.device is None:
        out["windows"] = fs.windows
        if fs.stored is not None:  # items: E, to compute the same matrix on resume
            out["stored"] = True
            if fs.stored.extra is not None:
                out["stored_extra"] = fs.stored.extra
        return out
    out["pool"] = {name: t.detach().cpu().numpy() for name, t in zip(fs.pool._fields, fs.pool)}
    out["layout"] = [int(value) for value in astuple(fs.layout)]  # k, L, M, b, cols
    out["first_it"], out["blocks"] = int(fs.device.first_it), int(fs.device.blocks)
    return out


#: The side stream of the captures, one per (thread, device): see :func:`capture_stream`.
_CAPTURE_STREAMS: dict[tuple[Any, ...], Any] = {}


def capture_stream(device):
    """The stream on which this thread captures its CUDA graphs on ``device``, made
    once. cuBLAS keeps a workspace (32 MiB with torch's default on an H100) for every
    stream it has run a product on, for the life of the process: a new stream per
    capture would keep one more workspace after every fit (measured: 32 MiB retained
    per fit). One stream per thread, so that two threads never capture on the same
    stream at once."""
    import torch

    device = torch.device(device)
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    key = (threading.get_ident(), device)
    if key not in _CAPTURE_STREAMS:
        _CAPTURE_STREAMS[key] = torch.cuda.Stream(device)
    return _CAPTURE_STREAMS[key]


class DeviceSteps:
    """The device side of a FitState: the pool, its iteration and its read-backs
    (the steps of a :class:`Loop` on torch, see the module docstring)."""

    def __init__(self, fs, items, cfg, saved=None):
        import torch

        from . import _pool

        self.torch, self.P = torch, _pool
        self.fs, self.items, self.cfg = fs, items, cfg
        windows = fs.windows
        dev = items.device
        self.first_it = windows.n_steps if saved is None else saved["first_it"]
        self.plan = torch.from_numpy(np.ascontiguousarray(fs.plan, dtype=np.int64)).to(dev)
        self.log = torch.zeros((2, self.first_it + fs.max_iter), dtype=torch.float64, device=dev)
        # Views made once: the plan's rows, the log's two lines (not one view a call).
        self.plan_rows = self.plan.unbind(0)
        self.log_before, self.log_after = self.log.unbind(0)
        self.graph = self.graph_error = None
        self.blocks = 0 if saved is None else saved["blocks"]
        if saved is None:
            self.set_layout(_pool.layout_for(windows, fs.plan.shape[1], cfg.tau), windows)
        else:  # a snapshot: its buffers as they were, so the iterations go on unchanged
            fs.layout = _pool.Layout(*saved["layout"])
            fs.pool = _pool.Pool(
                *(torch.tensor(saved["pool"][f], device=dev) for f in _pool.Pool._fields)
            )
            self.consts = _pool.make_constants(fs.layout, cfg, fs.pool.rows)
        fs.windows = None

    # --------------------------------------------------------------- layout
    def set_layout(self, layout, windows):
        """Pack ``windows`` into a pool of ``layout`` (its kernel chunks from the budget)."""
        P = self.P
        cols = P.tile_columns_for(layout, self.items, self.cfg.max_tile_bytes)
        layout = replace(layout, cols=cols)
        self.fs.layout = layout
        self.fs.pool = P.pack(windows, layout)
        self.consts = P.make_constants(layout, self.cfg, self.fs.pool.rows)
        self.graph = None

    # ------------------------------------------------------------ iterations
    def iteration(self, pool, idx):
        """One iteration on the batch of indices ``idx`` (b,): the new pool and its
        :class:`~mbkkm._core._pool.StepOut`; the objectives go to the device log.

        What the eager loop runs, what a CUDA graph captures and what
        ``torch.compile(fullgraph=True)`` compiles into one graph.
        """
        new, out = self.P.advance(
            pool, self.items.index_select(0, idx), self.cfg, self.fs.layout, self.consts
        )
        self.log_before.index_copy_(0, pool.it, out.objective)
        if out.after is not None:
            self.log_after.index_copy_(0, pool.it, out.after)
        return new, out

    def _eager(self, i):
        """Iteration i of the plan (i: a host int)."""
        self.fs.pool, _ = self.iteration(self.fs.pool, self.plan_rows[i])

    def _graph_body(self):
        """One iteration on the static pool, the batch chosen by the device counter."""
        static = self.static
        idx = self.plan.index_select(0, static.it - self.first_it).view(-1)
        static.copy_(self.iteration(static, idx)[0])

    def _capture(self):
        """Capture one iteration as a CUDA graph (after warm-up iterations done by the
        caller); None when capture fails (the iterations then run eagerly)."""
        torch = self.torch
        self.static = self.fs.pool
        try:
            graph = torch.cuda.CUDAGraph()
            stream = capture_stream(self.items.device)
            stream.wait_stream(torch.cuda.current_stream(self.items.device))
            with torch.cuda.stream(stream):
                # The capture records the iteration without running it; the allocator
                # warm-up needs one real run first, on the capture stream.
                saved = self.static.clone()
                self._graph_body()
                self.static.copy_(saved)
                del saved
                with torch.cuda.graph(graph, stream=stream):
                    self._graph_body()
            torch.cuda.current_stream(self.items.device).wait_stream(stream)
            return graph
        except Exception as exc:  # a kernel or driver that cannot be captured: run eagerly
            self.graph_error = exc
            warn(
                f"CUDA graph capture failed ({type(exc).__name__}: {exc}); the "
                "iterations run without it",
                RuntimeWarning,
            )
            return None

    def _run_block(self, start, stop):
        cuda = self.items.device.type == "cuda"
        if CUDA_GRAPHS and cuda and self.graph_error is None and not self.cfg.kernel.is_callable:
            if self.graph is None and stop - start > 1:
                self._eager(start)  # warm-up: the allocator and the kernels' first call
                start += 1
                self.graph = self._capture()
            if self.graph is not None:
                for _ in range(start, stop):
                    self.graph.replay()
                self.fs.pool = self.static
                return
        for i in range(start, stop):
            self._eager(i)

    def block(self, n_iter):
        """Blocks of 1, 2, 4, ... read_every iterations: the capacities overflow (if at
        all) in the first iterations, where a replay is then short."""
        return min(self.cfg.read_every, 1 << self.blocks)

    def run(self, start, stop):
        """Iterations [start, stop) and one read-back: their objectives (the ones done
        before early stopping), and whether it stopped. Nothing when the block
        overflowed the capacities: the pool is then the block's start in a larger
        layout, and the next block is short again (another overflow replays little)."""
        torch, fs = self.torch, self.fs
        self.blocks += 1
        snapshot = fs.pool.clone()
        self._run_block(start, stop)
        # One device-to-host copy: iterations done, overflow marks, stop flag, the log.
        pool, a, z = fs.pool, self.first_it + start, self.first_it + stop
        head = torch.cat(
            [
                (pool.it - self.first_it).to(torch.float64),
                self.P.overflow_marks(pool, fs.layout),
                (~pool.active).to(torch.float64),
                self.log[:, a:z].reshape(-1),
            ]
        )
        head = head.cpu().numpy()
        done, rows, slots, stopped = int(head[0]), bool(head[1]), bool(head[2]), bool(head[3])
        if rows or slots:
            layout = self.P.grow(fs.layout, rows=rows, slots=slots, tau=self.cfg.tau)
            fs.pool = snapshot
            self.set_layout(layout, self.P.unpack(snapshot, fs.layout))
            self.blocks = 0
            return [], [], False
        n = done - start
        logged = (head[4:].reshape(2, z - a) / float(fs.plan.shape[1])).tolist()
        if not np.all(np.isfinite(logged[0][:n])):
            raise ValueError(NON_FINITE)
        return logged[0][:n], logged[1][:n], stopped
