"""The mini-batch fit loop: the state between two iterations, and the iterations.

:class:`FitState` is everything a truncated mini-batch fit holds between two
iterations: the centers (host windows, or the device :class:`~mbkkm._core._pool.Pool`
with its layout), the iteration counter, the batch plan and the random generator
it was drawn from (its state after the draw), and what the host has read back
(the batch objectives, whether early stopping has stopped the run). The running
counts N_j and the iteration stamp live inside the centers. Saving a FitState and
the data is enough to resume a fit to the same model: :func:`snapshot` gives its
host values (what a checkpoint saves, :mod:`mbkkm.cluster._checkpoint`) and
:func:`restore` continues from them.

:func:`run_until` advances a FitState:

* numpy (and scipy sparse, index kernels, Dask rows): the host-planned step
  (:func:`mbkkm._core.minibatch_step`) one iteration at a time; the objectives are
  host floats, early stopping is decided after each iteration.
* torch: the device-resident step (:func:`mbkkm._core._pool.advance`), blocks of
  ``read_every`` iterations without a host round trip (on CUDA, replays of one
  captured CUDA graph), then one read-back of the objectives, the iteration
  counter and the overflow marks. Early stopping is decided on the device: the
  iteration that meets the rule is the last one that changes the state, the
  following ones of the block leave it as it is (at most ``read_every - 1``
  wasted iterations). When a block overflowed the pool's capacities, the state of
  the block's start (a device copy) is repacked into a larger layout and the
  block is run again: the result is the same as with enough room from the start.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._warn import warn
from ..backends import get_backend
from ._windows import StepOptions, WindowState, minibatch_step

#: Iterations between two read-backs of a device run (objectives, counter, overflow).
READ_EVERY = 16

#: Replay device iterations from one captured CUDA graph (False: eager calls).
CUDA_GRAPHS = True


@dataclass(frozen=True)
class LoopConfig:
    """What every iteration of a fit does.

    Attributes
    ----------
    kernel : Kernel or IndexKernel
    rate : callable
        A rate of :data:`mbkkm._core.LEARNING_RATES`.
    tau : int
    renormalize : bool
    tol : float or None
        Early stopping threshold (None: run every iteration of the plan).
    max_tile_bytes : int or None
        Memory for an iteration's kernel blocks (column chunks above it).
    read_every : int
        Device runs: iterations between two read-backs.
    """

    kernel: object
    rate: object
    tau: int
    renormalize: bool
    tol: float | None = None
    max_tile_bytes: int | None = None
    read_every: int = READ_EVERY


@dataclass
class FitState:
    """Everything a mini-batch fit holds between two iterations (see the module docstring).

    Attributes
    ----------
    windows : WindowState or None
        The centers on the host path (None on a device, see ``pool``).
    pool : Pool or None
        The device-resident centers (torch), with ``layout`` its shapes.
    layout : Layout or None
    plan : ndarray of shape (max_iter, batch_size)
        Indices of every batch, drawn up front from ``random_state``.
    random_state : numpy.random.RandomState
        The fit's generator, in its state after the plan was drawn.
    n_iter : int
        Iterations done.
    objectives : list of float
        f_B(C_i) of every iteration done.
    objectives_after : list of float
        f_B(C_{i+1}) on the same batch (with early stopping).
    converged : bool
        Early stopping met its rule at iteration ``n_iter``.
    device : object
        On a device, the running loop (its copies of the plan and of the log, a
        captured CUDA graph): derived from the fields above and rebuilt from them.

    The fields are complete whenever :func:`run_until` has returned (it ends on a
    read-back); in between, the device is ahead of ``n_iter``.
    """

    windows: WindowState | None
    pool: object
    layout: object
    plan: np.ndarray
    random_state: object
    n_iter: int = 0
    objectives: list = field(default_factory=list)
    objectives_after: list = field(default_factory=list)
    converged: bool = False
    device: object = field(default=None, repr=False, compare=False)

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


class MiniBatchLoop:
    """A fit between iterations: its :class:`FitState`, the data and the config.

    What :meth:`mbkkm.cluster._minibatch_base.MiniBatchMixin._iterate` drives:
    ``run_until(until)``, ``n_iter``, ``converged``, ``objectives``,
    ``objectives_after``.
    """

    def __init__(self, windows, items, plan, random_state, cfg, snapshot=None):
        self.state = (
            start(windows, items, plan, random_state, cfg)
            if snapshot is None
            else restore(snapshot, items, plan, random_state, cfg)
        )
        self.items, self.cfg = items, cfg
        #: Called with the FitState whenever it is complete between iterations (after
        #: every host iteration, after every device read-back): checkpoints hook here.
        self.on_advance = None

    n_iter = property(lambda self: self.state.n_iter)
    converged = property(lambda self: self.state.converged)
    objectives = property(lambda self: self.state.objectives)
    objectives_after = property(lambda self: self.state.objectives_after)

    def run_until(self, until):
        run_until(self.state, self.items, self.cfg, until, self.on_advance)

    def describe(self):
        return f"{self.state.support_size()} support points"

    def finish(self):
        return finish(self.state)


def start(windows, items, plan, random_state, cfg):
    """The FitState before the first iteration, from the initial windows."""
    nx = get_backend(windows.support)
    fs = FitState(windows=windows, pool=None, layout=None, plan=plan, random_state=random_state)
    if not nx.is_host:
        fs.device = _DeviceLoop(fs, items, cfg)
    return fs


def run_until(fs, items, cfg, until, on_advance=None):
    """Advance ``fs`` to ``min(until, max_iter)`` iterations, or until it converges.

    ``on_advance(fs)``, when given, is called whenever ``fs`` is complete: after every
    host iteration, after every device read-back.
    """
    until = min(until, fs.max_iter)
    if fs.device is not None:
        fs.device.run_until(until, on_advance)
        return fs
    nx = get_backend(items)
    options = StepOptions(
        cfg.kernel,
        cfg.rate,
        tau=cfg.tau,
        renormalize=cfg.renormalize,
        objective_after=cfg.tol is not None,
        max_tile_bytes=cfg.max_tile_bytes,
    )
    while fs.n_iter < until and not fs.converged:
        Xb = nx.take(items, nx.index(fs.plan[fs.n_iter]))
        res = minibatch_step(fs.windows, Xb, options)
        fs.objectives.append(res.objective)
        fs.n_iter += 1
        if cfg.tol is not None:
            fs.objectives_after.append(res.objective_after)
            fs.converged = res.objective - res.objective_after < cfg.tol
        if on_advance is not None:
            on_advance(fs)
    return fs


def snapshot(fs):
    """A complete FitState as host values, without the plan and the generator.

    What a checkpoint saves (:mod:`mbkkm.cluster._checkpoint`): the centers (host
    windows; on a device, every pool buffer copied to numpy as it is, its layout and
    the read-back cadence, so that :func:`restore` continues with the same shapes and
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
        return out
    out["pool"] = {name: t.detach().cpu().numpy() for name, t in zip(fs.pool._fields, fs.pool)}
    out["layout"] = [
        int(fs.layout.k),
        int(fs.layout.L),
        int(fs.layout.M),
        int(fs.layout.b),
        int(fs.layout.cols),
    ]
    out["first_it"], out["blocks"] = int(fs.device.first_it), int(fs.device.blocks)
    return out


def restore(saved, items, plan, random_state, cfg):
    """The FitState that :func:`snapshot` saved, on the backend of ``items``."""
    fs = FitState(
        windows=saved.get("windows"),
        pool=None,
        layout=None,
        plan=plan,
        random_state=random_state,
        n_iter=int(saved["n_iter"]),
        objectives=list(saved["objectives"]),
        objectives_after=list(saved["objectives_after"]),
        converged=bool(saved["converged"]),
    )
    on_device = not get_backend(items).is_host
    if ("pool" in saved) != on_device:
        raise ValueError(
            "the saved fit state ran on "
            f"{'a device' if 'pool' in saved else 'the host'}, this fit does not"
        )
    if on_device:
        fs.device = _DeviceLoop(fs, items, cfg, saved=saved)
    return fs


def finish(fs):
    """The centers as a :class:`WindowState` (the device pool unpacked). The device
    side is let go at once (the pool, its constants and a captured CUDA graph with
    its private memory), before the labelling that follows a fit: ``fs`` and its
    device loop refer to each other, so dropping the loop alone would wait for the
    garbage collector."""
    if fs.device is not None:
        fs.windows = fs.device.windows()
        fs.device = fs.pool = None
    return fs.windows


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
    stream = _CAPTURE_STREAMS.get(key)
    if stream is None:
        stream = _CAPTURE_STREAMS[key] = torch.cuda.Stream(device)
    return stream


class _DeviceLoop:
    """The device side of a FitState: the pool, its iteration and its read-backs."""

    def __init__(self, fs, items, cfg, saved=None):
        import torch

        from . import _pool

        self.torch, self.P = torch, _pool
        self.fs, self.items, self.cfg = fs, items, cfg
        windows = fs.windows
        self.spec = _pool.StepSpec(
            cfg.kernel,
            cfg.rate,
            tau=cfg.tau,
            renormalize=cfg.renormalize,
            objective_after=cfg.tol is not None,
            tol=0.0 if cfg.tol is None else cfg.tol,
        )
        b = fs.plan.shape[1]
        self.first_it = windows.n_steps if saved is None else saved["first_it"]
        self.plan = torch.from_numpy(np.ascontiguousarray(fs.plan, dtype=np.int64)).to(items.device)
        self.log = torch.zeros(
            (2, self.first_it + fs.max_iter), dtype=torch.float64, device=items.device
        )
        # Views made once: the plan's rows, the log's two lines (not one view a call).
        self.plan_rows = self.plan.unbind(0)
        self.log_before, self.log_after = self.log.unbind(0)
        self.graph = None
        self.graph_error = None
        self.blocks = 0 if saved is None else saved["blocks"]
        if saved is None:
            self._set_layout(_pool.layout_for(windows, b, cfg.tau), windows)
        else:  # a snapshot: its buffers as they were, so the iterations go on unchanged
            fs.layout = _pool.Layout(*saved["layout"])
            fs.pool = _pool.Pool(
                *(
                    torch.tensor(saved["pool"][name], device=items.device)
                    for name in _pool.Pool._fields
                )
            )
            self.consts = _pool.make_constants(fs.layout, self.spec, fs.pool.rows)
        fs.windows = None

    # --------------------------------------------------------------- layout
    def relayout(self, slots, rows):
        """Move the pool to ``slots`` slots per window and ``rows`` pool rows (at least
        what it holds), between two iterations."""
        fs = self.fs
        windows = self.P.unpack(fs.pool, fs.layout)
        self._set_layout(self.P.Layout(fs.layout.k, slots, rows, fs.layout.b), windows)

    def _set_layout(self, layout, windows):
        P = self.P
        layout = P.Layout(
            layout.k,
            layout.L,
            layout.M,
            layout.b,
            cols=P.tile_columns_for(layout, self.items, self.cfg.max_tile_bytes),
        )
        self.fs.layout = layout
        self.fs.pool = P.pack(windows, layout)
        self.consts = P.make_constants(layout, self.spec, self.fs.pool.rows)
        self.graph = None

    # ------------------------------------------------------------ iterations
    def iteration(self, pool, idx):
        """One iteration on the batch of indices ``idx`` (b,): the new pool and its
        :class:`~mbkkm._core._pool.StepOut`; the objectives go to the device log.

        What the eager loop runs, what a CUDA graph captures and what
        ``torch.compile(fullgraph=True)`` compiles into one graph.
        """
        new, out = self.P.advance(
            pool, self.items.index_select(0, idx), self.spec, self.fs.layout, self.consts
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
        new, _ = self.iteration(static, idx)
        for dst, src in zip(static, new):
            if dst is not src:
                dst.copy_(src)

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

    def _use_graph(self):
        dev = self.items.device
        return (
            CUDA_GRAPHS
            and dev.type == "cuda"
            and self.graph_error is None
            and not self.cfg.kernel.is_callable
        )

    def _run_block(self, start, stop):
        fs = self.fs
        if self._use_graph():
            if self.graph is None and stop - start > 1:
                self._eager(start)  # warm-up: the allocator and the kernels' first call
                start += 1
                self.graph = self._capture()
            if self.graph is not None:
                for _ in range(start, stop):
                    self.graph.replay()
                fs.pool = self.static
                return
        for i in range(start, stop):
            self._eager(i)

    def run_until(self, until, on_advance=None):
        fs = self.fs
        while fs.n_iter < until and not fs.converged:
            start = fs.n_iter
            # Blocks of 1, 2, 4, ... read_every iterations: the capacities overflow (if at
            # all) in the first iterations, where a replay is then short.
            stop = min(until, start + min(self.cfg.read_every, 1 << self.blocks))
            self.blocks += 1
            snapshot = fs.pool.clone()
            self._run_block(start, stop)
            done, rows, slots, stopped, logged = self._read_back(start, stop)
            if rows or slots:
                layout = self.P.grow(fs.layout, rows=rows, slots=slots, tau=self.cfg.tau)
                fs.pool = snapshot
                self._set_layout(layout, self.P.unpack(snapshot, fs.layout))
                self.blocks = 0  # short blocks again: another overflow replays little
                continue
            n = done - start
            fs.objectives.extend(logged[0][:n])
            if self.spec.objective_after:
                fs.objectives_after.extend(logged[1][:n])
            fs.n_iter = done
            fs.converged = stopped
            del snapshot
            if on_advance is not None:
                on_advance(fs)

    def _read_back(self, start, stop):
        """One device-to-host copy: iterations done, overflow marks, stop flag, the log."""
        torch = self.torch
        fs = self.fs
        lay = fs.layout
        pool = fs.pool
        a, z = self.first_it + start, self.first_it + stop
        head = (
            torch.cat(
                [
                    (pool.it - self.first_it).to(torch.float64),
                    (pool.coef[lay.M] != 0).any().view(1).to(torch.float64),
                    torch.isfinite(pool.newer[:, lay.L]).any().view(1).to(torch.float64),
                    (~pool.active).to(torch.float64),
                    self.log[:, a:z].reshape(-1),
                ]
            )
            .cpu()
            .numpy()
        )
        done, rows, slots, stopped = int(head[0]), bool(head[1]), bool(head[2]), bool(head[3])
        logged = head[4:].reshape(2, z - a)
        total = float(fs.plan.shape[1])
        logged = (logged / total).tolist()
        if not (rows or slots) and not np.all(np.isfinite(logged[0][: done - start])):
            raise ValueError(
                "kernel: the iteration met non-finite values (NaN or inf): the "
                "kernel returned them, or the data overflow its arithmetic"
            )
        return done, rows, slots, stopped, logged

    def windows(self):
        return self.P.unpack(self.fs.pool, self.fs.layout)
