"""Memory known before the work: what a fit will hold, on the host and on a device.

:func:`plan_minibatch` computes, from the parameters and the data's shape alone,
the bytes of every array one fit of :class:`~mbkkm.MiniBatchKernelKMeans` holds at
its peaks (the windows, the iteration's kernel blocks and products, the
labelling pass's tiles and outputs), and :meth:`MemoryPlan.check` compares them
with what is available before any kernel work. The kernel blocks of an
iteration are computed in column chunks of the batch when they exceed the
``working_memory`` budget (:func:`mbkkm._core._state.tile_columns`), so they are
planned at their chunked size; what cannot be chunked (the windows, the block
sums, the outputs) is refused with the numbers when it cannot fit.

Sizes, with k clusters, batch b, window tau, d features of ``row_bytes`` bytes:

* support points m ~ max(k tau + b / 2, b) (each window keeps its newest tau
  points and about half a block more, or its newest block alone when that holds
  more than tau points; at most k (tau - 1 + b));
* the kernel blocks K(S, B_c), K(B, B_c): (m + b) c values for c batch columns
  (c = b unless chunked), in buffers reused across iterations (25 % headroom);
* block sums Q (nb, b), centre products P (k, b), new-block sums (k, b), with
  nb ~ k (tau / (b / k) + 2) blocks;
* the new support next to the old one while the windows are updated: 2 m rows;
* labelling: one tile of m x r values per thread, the support prepared once per
  thread (rbf: m (d + 2) values), the outputs (labels, distances).

On torch (``device_resident``), the iterations run on the fixed-capacity pool of
:mod:`mbkkm._core._pool` instead: M + 1 + b rows (:func:`pool_capacities`), their
weights (M + 1 + b, k) and slots, the windows' (k, L + 1) slots and (k, L + 1, L + 1)
block Gram, a copy of all of it (the fit loop replays a block of iterations from it
after a capacity overflow), the batch plan and the objective log on the device, and
per iteration the kernel block K(rows, X_B) ((M + 1 + b) x c values) with the
products A (M, k), R (M + 1 + b, k) and the (k, b) distances. The capacities are the
initial ones; a fit that outgrows them (rare, in its first iterations) holds more.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from sklearn import get_config

from ._init import PLAN_BLOCK
from ._state import WORKSPACE_HEADROOM, label_tiles, tile_columns
from ._stored import STORED_KERNEL_BYTES

_GIB = 2.0**30
_MIB = 2.0**20
#: Kernels whose numpy tiles build an augmented or normalised copy of both operands.
_COPYING_KERNELS = ("rbf", "cosine")
#: The dtypes of the buffers' declarations (besides the data's).
_F64, _I64, _BOOL = np.dtype(np.float64), np.dtype(np.int64), np.dtype(bool)


class MemoryPlanError(MemoryError, ValueError):
    """A fit cannot fit the memory available; raised before any kernel work.

    A subclass of both :class:`MemoryError` and :class:`ValueError`. The message names
    the parameters to lower, the GiB needed and the GiB available.
    """


def gib(nbytes):
    return f"{nbytes / _GIB:.3g} GiB"


def working_memory_bytes(working_memory):
    """``working_memory`` (MiB, None: scikit-learn's ``working_memory`` setting) in
    bytes: the one conversion every budget of the estimators goes through."""
    if working_memory is None:
        working_memory = get_config()["working_memory"]
    return float(working_memory) * 2**20  # a numpy integer would overflow in its own type


def chunk_rows(working_memory, row_floats, itemsize):
    """Rows per chunk so that one chunk's temporaries fit ``working_memory`` MiB.

    ``row_floats`` is the number of values one row needs in the chunk's temporaries
    (kernel row against the support, distances, ...). ``working_memory=None`` uses
    scikit-learn's global ``working_memory`` setting (default 1024 MiB).
    """
    return max(1, int(working_memory_bytes(working_memory) // max(1, 2 * row_floats * itemsize)))


def label_chunk_rows(working_memory, n_support, n_clusters, itemsize, row_copies=0):
    """Rows per chunk of the labelling pass: a kernel tile against ``n_support``
    support points plus about 3 k + 2 values per row (block sums, distances,
    minima) and the ``row_copies`` values of a row the kernel copies
    (:func:`label_row_copies`), within ``working_memory`` (:func:`chunk_rows`).
    The memory plan and the labelling pass both size their chunks here."""
    return chunk_rows(working_memory, n_support + 3 * n_clusters + 2 + row_copies, itemsize)


def label_row_copies(kernel_name, where, n_features, n_support):
    """Values per row (of the chunk, and of the support) that a labelling tile's
    kernel copies beyond what the plan counts: where rbf tiles fold the row norms
    into the GEMM (:func:`mbkkm.kernels._torch_tiles.rbf`: CUDA, when a row's copy
    is at most an eighth of its tile row), the row with two more columns, 4-aligned,
    and its norm; else none."""
    device_type = str(where).split(":")[0]
    if kernel_name != "rbf" or device_type in ("host", "cpu"):
        return 0
    from ..kernels._torch_tiles import FOLD_DEVICES, folded_width  # a device: torch is there

    width = folded_width(n_features)
    return width if device_type in FOLD_DEVICES and 8 * width <= n_support else 0


@dataclass
class MemoryPlan:
    """The bytes a fit holds at its peaks, term by term.

    Attributes
    ----------
    where : str, default="host"
        "host" or the device (for example "cuda:0").
    terms : dict of str to int
        Named arrays and their bytes (see :func:`plan_minibatch`).
    peaks : dict of str to int
        Bytes held at each phase's peak: "fit" (the setup -- width, k-means++ -- and
        the iterations) and "labelling" (the labels of the fitted points at the end of
        fit, or predict on as many points).
    checked : tuple of str
        The phases the fit itself runs, compared with the memory available.
    shapes : dict
        The sizes the plan assumed (batch, iterations, m, nb, chunk columns, tile rows,
        threads).
    hints : dict of str to str
        For each phase, the parameters that lower it.
    measured : dict of str to int
        Filled by :func:`mbkkm.measure_memory`: the peaks measured.
    """

    where: str = "host"
    terms: dict = field(default_factory=dict)
    peaks: dict = field(default_factory=dict)
    checked: tuple = ("fit", "labelling")
    shapes: dict = field(default_factory=dict)
    hints: dict = field(default_factory=dict)
    measured: dict = field(default_factory=dict)

    @property
    def peak(self):
        """The largest peak of the phases the fit runs, in bytes."""
        return max((self.peaks[p] for p in self.checked if p in self.peaks), default=0)

    def check(self, available, *, what="the fit"):
        """Raise :class:`MemoryPlanError` when the peak exceeds ``available`` bytes.

        ``available=None`` (unknown) checks nothing.
        """
        phase = max((p for p in self.checked if p in self.peaks), key=self.peaks.get, default=None)
        if available is None or self.peaks.get(phase, 0) <= available:  # the peak
            return
        big = sorted(self.terms.items(), key=lambda t: -t[1])[:3]
        lower = self.hints.get(phase, "the batch size")
        if phase == "fit":
            lower += ", or set working_memory lower (kernel blocks are then computed in chunks)"
        raise MemoryPlanError(
            f"{what} needs about {gib(self.peaks[phase])} on {self.where} at its {phase} peak, "
            f"but {gib(available)} is available there. Largest parts: "
            + ", ".join(f"{name} {gib(b)}" for name, b in big)
            + f". Lower {lower}."
        )

    def report(self):
        """The plan as text: one line per term, the peaks, and what was measured."""
        shapes = ", ".join(f"{k}={v}" for k, v in self.shapes.items())
        lines = [f"Memory plan on {self.where} ({shapes}):"]
        width = max(map(len, self.terms), default=0)
        lines += [f"  {name:<{width}}  {b / _MIB:12.1f} MiB" for name, b in self.terms.items()]
        for phase, b in self.peaks.items():
            lines.append(f"  peak of {phase:<{width - 8}}  {b / _MIB:12.1f} MiB")
            got = self.measured.get(phase)
            if got is not None and b:
                lines[-1] += f"   measured {got / _MIB:.1f} MiB ({got / b:.2f} x plan)"
        return "\n".join(lines)

    __str__ = report


def pool_capacities(n_clusters, batch_size, tau, *, blocks=1, support=0):
    """(L, M): slots per window and rows of the device pool that a fit rarely outgrows.

    A window holds about tau / (b / k) + 2 blocks in steady state, and tau at most
    (blocks of one point); a cluster that receives few points per batch holds many
    more (measured on MNIST, k = 10, b = 1024, tau = 200: up to 36 blocks at
    iteration 79 for seed 0, 8-16 for others), and an overflow costs a replay and a
    new CUDA graph, while a slot costs k (L + 1) floats: L = max(2 ceil(tau k / b) + 4,
    64), at most tau. The
    support holds about k tau + b / 2 points, at most k (tau - 1) plus
    the sizes of the windows' oldest blocks (about b in all): M = k tau + 5 b / 4 + 16.
    ``blocks`` and ``support``: the current windows' largest block count and support
    size (the capacities hold them and one more batch). ``tau=None`` (no truncation):
    twice the current blocks, the support and two batches.
    """
    k, b = n_clusters, batch_size
    if tau is None:
        L, M = max(2 * blocks, 8), support + 2 * b
    else:
        L = min(max(tau, 1), max(2 * -(-tau * k // b) + 4, 64))
        M = k * tau + b + b // 4 + 16
    return max(L, blocks + 1), max(M, support + b)


def pool_buffers(n_clusters, L, M, batch_size):
    """Every tensor of the device pool (:class:`mbkkm._core._pool.Pool`), declared once:
    name -> (shape, dtype, initial value), in the pool's field order.

    ``dtype`` None is the data's: ``rows`` holds one data item per entry of its shape
    (a row of d values, or a point index). :func:`mbkkm._core._pool.pack` allocates
    the pool from here and the memory plan counts its bytes from here
    (:func:`term_bytes`), so that the two cannot differ. See the table of
    :mod:`mbkkm._core._pool` for what each holds.
    """
    k, n_rows, L1 = n_clusters, M + 1 + batch_size, L + 1
    return {
        "rows": ((n_rows,), None, 0),
        "block": ((n_rows,), _I64, L),  # L: the slot of a free row
        "coef": ((n_rows, k), _F64, 0.0),
        "lam": ((k, L1), _F64, 0.0),
        "newer": ((k, L1), _F64, np.inf),  # inf: a free slot
        "stamp": ((k, L1), _I64, -1),
        "gram": ((k, L1, L1), _F64, 0.0),
        "norms": ((k, 1), _F64, 0.0),
        "counts": ((k, 1), _F64, 0.0),
        "it": ((1,), _I64, 0),
        "active": ((1,), _BOOL, True),
    }


def pool_step_buffers(n_clusters, L, M, batch_size, cols, operands=(0,), dense=0):
    """The device iteration's arrays besides the pool, declared once: name -> (shape,
    dtype); ``dtype`` None is one data item, ``"values"`` the data's float dtype.

    ``coef_out`` is the one work buffer the step keeps (allocated from here by
    :func:`mbkkm._core._pool.make_constants`); the others are the iteration's
    temporaries: the batch rows, the kernel block, its operands' copies
    (``operands``: their shape, as :func:`_pool_terms` sizes them), the products A (M, k) in
    float64 and in the data's dtype, R and R * weights (M + 1 + b, k), D, V, the
    one-hot and its mask (k, b), the block Gram's two new versions, and the dense
    slot sums with their mask when k (L + 1) (M + 1 + b) <= ``dense`` (CUDA).
    """
    k, b, n_rows, L1 = n_clusters, batch_size, M + 1 + batch_size, L + 1
    slot_sums = (k * L1, n_rows) if k * L1 * n_rows <= dense else (0,)
    return {
        "batch rows": ((b,), None),
        "kernel block": ((n_rows, cols), "values"),
        "kernel operands": (operands, "values"),
        "coef_out": ((k, M), "values"),
        "A": ((M, k), _F64),
        "R": ((n_rows, k), "values"),
        "R * weights": ((n_rows, k), _F64),
        "D, V": ((2, k, b), "values"),
        "one-hot": ((k, b), _F64),
        "one-hot mask": ((k, b), _BOOL),
        "new block Grams": ((2, k, L1, L1), _F64),
        "dense slot sums": (slot_sums, _F64),
        "dense slot sums mask": (slot_sums, _BOOL),
    }


def host_step_buffers(m, nb, n_clusters, L, batch_size, cols, whole_batch, operands=(0,)):
    """The host step's arrays (:mod:`mbkkm._core._windows`), declared once: name ->
    (shape, dtype), ``dtype`` None one data item and ``"values"`` the data's float
    dtype; m support points in nb blocks, L blocks per window, ``cols`` batch
    columns per kernel chunk.

    The windows (support rows, per-row and per-block bookkeeping, the block Gram
    and its update); the iteration's batch rows, kernel buffers, the rows of a
    part of the batch (without early stopping), the kernel's operand copies
    (``operands``), the block sums Q, P and QB, the pair indices and the new
    support.

    The kernel buffers are reused across iterations (``WindowState.workspace``,
    by these names, with :data:`~mbkkm._core._state.WORKSPACE_HEADROOM`):
    ``K_SB`` holds K(S, B_c); ``K_BB`` holds K(B, B_c) whole when early stopping
    needs f_B(C_{i+1}) (``whole_batch``), else K(part, part_c) for each part of the
    label-sorted batch (at most about half of it).
    """
    k, b, half = n_clusters, batch_size, -(-batch_size // 2)
    return {
        "support": ((m,), None),
        "support bookkeeping": ((4, m), _I64),
        "block bookkeeping": ((6, nb), _I64),
        "block Gram": ((2, k, L, L), _F64),
        "batch rows": ((b,), None),
        "K_SB": ((m, cols), "values"),
        "K_BB": ((b, cols) if whole_batch else (half, min(cols, half)), "values"),
        "half-batch rows": ((0 if whole_batch else half,), None),
        "kernel operands": (operands, "values"),
        "block sums Q, P, QB": ((nb + 2 * k, b), "values"),
        "pair indices": ((9, L + 1, b), _I64),
        "new support": ((m,), None),
    }


def term_bytes(buffers, terms, row_bytes, itemsize=0):
    """Bytes of each term from the buffers' declarations ``buffers``, in the order of
    their first buffer: ``terms`` names the term that sums a buffer (None: no term; a
    buffer it leaves out is a term of its own); ``row_bytes``: one data item (dtype
    None), ``itemsize``: one value of the data's float dtype (dtype ``"values"``)."""
    sizes = {None: row_bytes, "values": itemsize}
    out = {}
    for name, (shape, dtype, *_) in buffers.items():
        term = terms.get(name, name)
        if term is not None:
            size = dtype.itemsize if isinstance(dtype, np.dtype) else sizes[dtype]
            out[term] = out.get(term, 0) + int(np.prod(shape)) * size
    return out


#: The device pool's term for a captured CUDA graph: it keeps its own copy of an
#: iteration's buffers for as long as it lives, and its capture one more copy of the pool.
_CUDA_GRAPH = "CUDA graph: its iteration's buffers, the pool copy of the capture"
#: The device step (:func:`mbkkm._core._pool.slot_sums`) sums the block Gram densely
#: on CUDA for at most this many (slot, row) pairs (a (Q, n) float64 temporary of
#: 128 MiB); here, so that the plan and the step share it.
DENSE_SLOT_SUMS_MAX = 1 << 24
#: cuBLAS keeps a workspace for each stream it runs a product on (torch's default:
#: 32 MiB on an H100, measured), allocated at the first product and kept: the
#: current stream's and the capture stream's (``_loop.capture_stream``).
_CUBLAS = "cuBLAS workspaces (the current and the capture stream)"
CUBLAS_WORKSPACE_BYTES = 32 * 2**20


@dataclass(frozen=True, kw_only=True)
class MiniBatchPlanRequest:
    """What the memory plan of one MiniBatchKernelKMeans fit is computed from.

    Attributes
    ----------
    n : int
        Points to fit (and to label).
    row_bytes : int
        Bytes of one item (d * itemsize for dense rows, 8 for point indices).
    n_features : int
        d (0 for point indices).
    itemsize : int
        Bytes of one kernel value (the data's float size).
    n_clusters, batch_size, tau : int
    kernel_name : str
        The resolved kernel's name (its tiles' temporaries depend on it).
    max_tile_bytes : int or None
        Budget of the iteration's kernel blocks (column chunks above it).
    label_rows : int, None or "auto"
        Rows per labelling tile per thread (None: the whole of n). "auto": the
        labelling pass's own (:func:`mbkkm._core._windows.assign_parallel`): its
        ``working_memory`` rows (:func:`label_chunk_rows`) shared by its threads, in
        cache tiles when ``tiled_labels``, and ``n_threads`` its threads (the
        threading policy's, one per 4096 points at most; one on a device).
    n_threads : int
        Threads of the labelling pass (unless ``label_rows="auto"``).
    working_memory : float or None
        The fit's ``working_memory`` (MiB; None: scikit-learn's), for
        ``label_rows="auto"``.
    tiled_labels : bool
        Whether the labelling pass cuts its rows in cache tiles (a named kernel on
        float rows on the host; :func:`mbkkm._core._state.label_tiles`).
    compute_labels : bool
        Whether the fit labels the n points at the end.
    where : str
        "host" or a device name.
    data_on_device : int
        Bytes of the data copied to the device by the fit (0 on the host, or for
        data already there).
    max_iter : int, optional
        Caps the support by the points the iterations can bring; sizes the batch plan.
    init_size : int, optional
        Points of the k-means++ subsample (default 3 b).
    data_gamma : bool
        Whether the width is computed from the data (two float64 row chunks).
    width_sample : int
        Points of the sample the width is chosen on (``gamma="auto"``; 0: none):
        its host copy and about 4.5 (sample x sample) float64 matrices (distances,
        kernel, the normalised kernel and its eigendecomposition; measured 4.4).
    early_stopping : bool
        Whether f_B(C_{i+1}) is computed (the host step then needs all of K(B, B)).
    device_resident : bool
        The iterations run on the device pool (torch, see the module docstring).
    partial : bool
        A ``partial_fit`` call, whose batch is its rows: no batch plan and no stored
        kernel matrix of small n (its step computes its kernel blocks); ``max_iter``
        then caps the support as the number of calls planned for.
    """

    n: int
    row_bytes: int
    n_features: int
    itemsize: int
    n_clusters: int
    batch_size: int
    tau: int
    kernel_name: str
    max_tile_bytes: int | None = None
    label_rows: int | str | None = None
    n_threads: int = 1
    working_memory: float | None = None
    tiled_labels: bool = False
    compute_labels: bool = True
    where: str = "host"
    data_on_device: int = 0
    max_iter: int | None = None
    init_size: int | None = None
    data_gamma: bool = False
    width_sample: int = 0
    early_stopping: bool = False
    device_resident: bool = False
    partial: bool = False


#: The plan's terms of the host step (:func:`host_step_buffers`, :func:`term_bytes`):
#: the buffers summed or renamed; the kernel blocks with the workspace's headroom.
_HOST_TERMS = {
    "support": "support (windows)",
    "block bookkeeping": "support bookkeeping",
    "K_SB": "kernel blocks",
    "K_BB": "kernel blocks",
    "kernel operands": "kernel operand copies",
}
_WINDOWS = "windows: slots (k, L + 1), block Gram (k, L + 1, L + 1)"
_WEIGHTS = "pool weights and slots of the rows"
#: The device pool's persistent terms (:func:`pool_buffers`; ``it`` and ``active`` in
#: none); the fit holds a copy of the whole pool besides (a replay after a capacity
#: overflow starts from it).
_POOL_TERMS = {
    "rows": "support pool (M + 1 + b rows)",
    "block": _WEIGHTS,
    "coef": _WEIGHTS,
    **dict.fromkeys(("lam", "newer", "stamp", "gram", "norms", "counts"), _WINDOWS),
    "it": None,
    "active": None,
}
_POOL_COPY = "copy of the pool (replay after an overflow)"
_POOL_LOG = "batch plan and log on the device"
_PRODUCTS = "iteration products"


def plan_minibatch(request):
    """The memory plan of one MiniBatchKernelKMeans fit (see the module docstring).

    Every term of the iterations is a sum of declared buffers (:func:`pool_buffers`
    and :func:`pool_step_buffers` on the device pool, :func:`host_step_buffers` on
    the host); the peaks add what lives together.

    Parameters
    ----------
    request : MiniBatchPlanRequest
        The data's shape, the fit's parameters and where it runs.

    Returns
    -------
    MemoryPlan
    """
    r = request
    n, d, k, b, tau, itemsize = r.n, r.n_features, r.n_clusters, r.batch_size, r.tau, r.itemsize
    iters = (r.max_iter or 0) if r.device_resident else min(r.max_iter or 0, 2 * PLAN_BLOCK)
    # Support points in steady state: each window keeps its newest tau points and about
    # half a block more, or, when one batch brings a cluster more than tau points
    # (b / k > tau), its newest block alone: m ~ max(k tau + b / 2, b); at most what
    # the iterations can bring.
    m = min(max(k * tau + b // 2, b), k * (tau - 1 + b))
    blocks_per_window = max(1.0, tau / max(1.0, b / k)) + 2
    if r.max_iter is not None:  # a window holds at most one block per iteration, + the first
        m = min(m, k + b * r.max_iter)
        blocks_per_window = min(blocks_per_window, r.max_iter + 1.0)
    m = max(m, k)
    nb = int(np.ceil(k * blocks_per_window))
    copies = r.kernel_name in _COPYING_KERNELS
    # Setup: the data-driven width (float64 row chunks), the width's selection sample,
    # k-means++ on its subsample (the rows, their host copy, and 2 + log k candidate
    # kernel rows in float64), the batch plan, the data copied to the device.
    setup_terms = {  # the setup's phases, one after the other
        "width from the data (row chunks)": min(n * d * 8, 64 * 2**20) if r.data_gamma else 0,
        "width selection (sample)": (
            # on the host (a host copy of the sample), so counted where the plan is
            # of host memory: numpy, or torch on the CPU
            int(r.width_sample * (d * 8 + 4.5 * r.width_sample * 8))
            if r.where in ("host", "cpu")
            else 0
        ),
        "k-means++ subsample and candidates": _kmeanspp_bytes(r, r.row_bytes),
    }
    t = {
        **setup_terms,
        # drawn a block of iterations at a time, two held (BatchPlan); a device holds all
        "batch plan": 0 if r.partial else iters * b * 8,
        "data copied to the device": int(r.data_on_device),
    }
    held = t["batch plan"] + t["data copied to the device"]  # from the setup to the end
    if r.device_resident:
        step, state, iteration, cols, shapes = _pool_terms(r, copies)
    else:
        # The host step's terms, the bytes of its state and of one iteration besides
        L = int(np.ceil(blocks_per_window)) + 1
        cols = tile_columns(m, b, itemsize, r.max_tile_bytes)  # the step's own chunking
        operands = (m + cols, d + 2) if copies else (0,)
        buffers = host_step_buffers(m, nb, k, L, b, cols, r.early_stopping, operands)
        step = term_bytes(buffers, _HOST_TERMS, r.row_bytes, itemsize)
        step["kernel blocks"] = int(step["kernel blocks"] * WORKSPACE_HEADROOM)
        # Small n (:mod:`mbkkm._core._stored`, which stores the matrix when the n x n
        # one fits its budget): on dense rows the kernel matrix of the rows and of
        # initial centers outside them (at most k); the blocks' rows and, each
        # iteration, the centers' rows and the new blocks' rows over it, also with a
        # stored kernel matrix (d = 0), whose matrix is the data. The blocks' rows are
        # in a buffer grown by a quarter when full, which holds its old and new rows as
        # it grows. Where the stored step is certain (dense rows, all of [X; E] within
        # the budget) the host step's kernel blocks are never computed.
        N = n + k
        if not r.partial and (r.tiled_labels or d == 0) and n * n * itemsize <= STORED_KERNEL_BYTES:
            matrix = N * N * itemsize if d else 0
            step["kernel matrix (small n)"] = matrix + (int(2.25 * nb) + 3 * k) * N * itemsize
            if d and N * N * itemsize <= STORED_KERNEL_BYTES:
                for name in ("kernel blocks", "half-batch rows", "kernel operand copies"):
                    step[name] = 0
        state = step["support (windows)"] + step["support bookkeeping"] + step["block Gram"]
        products = step["block sums Q, P, QB"] + step["pair indices"] + step["new support"]
        iteration = step["batch rows"] + step["kernel blocks"] + step["half-batch rows"]
        iteration += max(step["kernel operand copies"], products)
        iteration += step.get("kernel matrix (small n)", 0)
        shapes = {}
    t.update(step)
    state += held
    iteration += state
    setup = held + t.get(_CUBLAS, 0) + max(setup_terms.values())
    rows, threads = r.label_rows, r.n_threads
    # a device's labelling tiles may copy their rows (the host's never do)
    folded = label_row_copies(r.kernel_name, r.where, d, m) if r.device_resident else 0
    if rows == "auto":  # as assign_parallel sizes them (one thread on a device)
        budget = label_chunk_rows(r.working_memory, m, k, itemsize, folded)
        threads = 1 if r.device_resident else None
        rows, threads = label_tiles(n, m, itemsize, budget, threads, r.tiled_labels)
    rows = n if rows is None else max(1, min(rows, n))
    threads = max(1, threads)
    # Labelling: per thread a tile of ``rows`` rows against the m support points and
    # the k centers' sums, the support rows copied by the kernel, the coefficients;
    # the labels and distances of the n points.
    labelling_terms = {
        "labelling tiles": threads * rows * (m + 3 * k) * itemsize,
        "labelling support copies": threads * m * (folded or (d + 2 if copies else 0)) * itemsize,
        "labelling row copies": threads * rows * folded * itemsize,
        "labelling coefficients": threads * m * 8 * 3,
        "labels and distances out": n * (8 + itemsize),
    }
    t.update(labelling_terms)
    labelling = state + sum(labelling_terms.values()) + t.get(_CUBLAS, 0)
    return MemoryPlan(
        where=r.where,
        terms={name: int(v) for name, v in t.items() if v},
        peaks={"fit": int(max(setup, iteration)), "labelling": int(labelling)},
        checked=("fit", "labelling") if r.compute_labels else ("fit",),
        shapes=dict(
            batch=b,
            iterations=r.max_iter,
            m=m,
            blocks=nb,
            chunk_columns=cols,
            tile_rows=rows,
            threads=threads,
            **shapes,
        ),
        hints={"fit": "batch_size or tau", "labelling": "working_memory or tau"},
    )


def _pool_terms(r, copies):
    """The device pool's terms (request ``r``), the bytes of its state and of one
    iteration besides, and its shapes: the pool and the iteration at the capacities
    a fit starts with (:func:`pool_capacities`)."""
    k, b = r.n_clusters, r.batch_size
    L, M = pool_capacities(k, b, r.tau, support=max(k, r.width_sample))
    n_rows = M + 1 + b
    cols = tile_columns(M + 1, b, r.itemsize, r.max_tile_bytes)  # as tile_columns_for
    # The copies a kernel makes of its operands: rbf and cosine square (or normalise) a
    # copy of the rows for their norms.
    operands = (n_rows, r.n_features) if copies else (0,)
    cuda = r.where.startswith("cuda")
    if cuda:
        # On CUDA a large rbf block in one chunk folds the row norms into its
        # operands (_torch_tiles.rbf_tail): it copies the rows and the batch, 4-aligned
        # with two more columns
        from ..kernels._torch_tiles import FOLD_MIN_VALUES, folded_width  # torch is there

        if r.kernel_name == "rbf" and cols == b and n_rows * b >= FOLD_MIN_VALUES:
            operands = (n_rows + b, folded_width(r.n_features))
    pool = pool_buffers(k, L, M, b)
    t = term_bytes(pool, _POOL_TERMS, r.row_bytes)
    t.update(term_bytes(pool, dict.fromkeys(pool, _POOL_COPY), r.row_bytes))
    t[_POOL_LOG] = (r.max_iter or 0) * (b + 2) * 8
    state = sum(t.values())  # the pool's terms, its copy and the log
    # on CUDA, small pools sum their blocks densely (_pool.slot_sums)
    step = pool_step_buffers(k, L, M, b, cols, operands, DENSE_SLOT_SUMS_MAX if cuda else 0)
    # The device iteration's terms: its batch rows, kernel block and operand copies;
    # every other buffer is one of its products
    terms = dict.fromkeys(step, _PRODUCTS) | {
        "batch rows": "batch rows",
        "kernel block": "kernel block K(rows, X_B)",
        "kernel operands": "kernel operand temporaries",
    }
    t.update(term_bytes(step, terms, r.row_bytes, r.itemsize))
    iteration = t["batch rows"] + t["kernel block K(rows, X_B)"]
    iteration += max(t["kernel operand temporaries"], t[_PRODUCTS])
    if cuda:
        t[_CUDA_GRAPH] = iteration + t[_POOL_COPY]
        t[_CUBLAS] = 2 * CUBLAS_WORKSPACE_BYTES
        iteration += t[_CUDA_GRAPH] + t[_CUBLAS]
    return t, state, iteration, cols, {"pool_rows": M, "slots": L}


# ------------------------------------------------------------------ availability


def available_host_memory():
    """Bytes this process can still allocate on the host (None when unknown).

    The smallest of the machine's available memory (``MemAvailable``), the cgroup
    limit less what the cgroup uses (containers, ``systemd-run -p MemoryMax``) and
    the address-space limit (``ulimit -v``) less what the process maps.
    """
    texts = []  # each file's text, "" when unreadable
    for path in ("/proc/meminfo", "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"):
        try:
            texts.append(Path(path).read_text())
        except OSError:
            texts.append("")
    meminfo, limit, used = texts
    available = [line for line in meminfo.splitlines() if line.startswith("MemAvailable:")]
    candidates = [int(available[0].split()[1]) * 1024] if available else []
    # the cgroup files' first numbers (None: none, or "max")
    limit, used = (None if t.strip() in ("", "max") else int(t.split()[0]) for t in (limit, used))
    if limit is not None:
        candidates.append(max(0, limit - (used or 0)))
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft not in (resource.RLIM_INFINITY, -1):
            statm = Path(f"/proc/{os.getpid()}/statm").read_text()
            vm = int(statm.split()[0]) * os.sysconf("SC_PAGE_SIZE")
            candidates.append(max(0, soft - vm))
    except (ImportError, OSError, IndexError, ValueError):
        pass
    return min(candidates) if candidates else None


def plan_untruncated(
    *, n, row_bytes, n_clusters, batch_size, chunk_rows, max_iter, compute_labels=True
):
    """The memory plan of a ``tau=None`` fit: the dynamic program's (n, k) tables.

    The support view at the end has a row per (point, cluster) pair with a non-zero
    coefficient and per initial center still in use: a pair becomes non-zero when the
    point is assigned to the cluster, so at most min(n k, max_iter b) + k rows.
    """
    k, b = n_clusters, batch_size
    support_rows = min(n * k, max_iter * b) + k
    t = {
        "table T and coefficients A (n, k)": 2 * n * k * 8,
        "K(x, x) of the points": n * 8,
        "kernel rows K(X_chunk, X_B)": min(chunk_rows, n) * b * 8 * 2,
        "K(X_B, X_B) and batch weights": b * b * 8 + b * k * 8 * 2,
        "batch rows": b * row_bytes,
        "support view at the end": support_rows * (row_bytes + 8 * 3),
    }
    fit = sum(v for name, v in t.items() if name != "support view at the end")
    t["distances of the points (n, k)"] = n * k * 8 * 2
    labelling = t["table T and coefficients A (n, k)"] + t["support view at the end"]
    labelling += t["distances of the points (n, k)"]
    return MemoryPlan(
        terms={k_: int(v) for k_, v in t.items()},
        peaks={"fit": int(fit), "labelling": int(labelling)},
        checked=("fit", "labelling") if compute_labels else ("fit",),
        shapes={"n": n, "k": k, "chunk_rows": chunk_rows},
        hints={
            "fit": "batch_size, or use an integer tau (windows)",
            "labelling": "n_clusters, or use an integer tau (windows)",
        },
    )


def out_of_memory_error(exc, plan, available=None):
    """A :class:`MemoryPlanError` for an out-of-memory error met mid-fit, or None.

    ``exc`` is recognised as numpy's ``MemoryError`` or torch's ``OutOfMemoryError``
    (another process took the memory after the plan was checked, or a part the plan
    does not model). The message adds the plan's numbers.
    """
    torch_oom = type(exc).__name__ == "OutOfMemoryError" or (
        isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()
    )
    if not (isinstance(exc, MemoryError) or torch_oom) or isinstance(exc, MemoryPlanError):
        return None
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return MemoryPlanError(
        f"out of memory on {plan.where} during the fit ({first}). The memory plan expected "
        f"a peak of {gib(plan.peak)}"
        + (f" with {gib(available)} available when the fit started" if available else "")
        + "; another process may have taken memory since. The estimator is left as it "
        f"was. Plan:\n{plan.report()}"
    )


@dataclass(frozen=True, kw_only=True)
class ExplicitPlanRequest:
    """What the memory plan of a MiniBatchKMeans fit (explicit centers) is computed from.

    Attributes
    ----------
    n, n_features, itemsize : int
        The data's shape and the bytes of one value.
    n_clusters, batch_size, max_iter : int
    chunk_rows : int
        Rows per labelling chunk.
    init_size : int, optional
        Points of the k-means++ subsample (default 3 b).
    compute_labels : bool
        Whether the fit labels the n points at the end.
    """

    n: int
    n_features: int
    itemsize: int
    n_clusters: int
    batch_size: int
    max_iter: int
    chunk_rows: int
    init_size: int | None = None
    compute_labels: bool = True


def _kmeanspp_bytes(r, row_bytes):
    """k-means++ on its subsample (request ``r``): the rows of ``row_bytes`` bytes, their
    host copy, and 2 + log k candidate kernel rows in float64."""
    n_init = min(r.n, 3 * r.batch_size if r.init_size is None else r.init_size)
    trials = 2 + int(np.log(r.n_clusters))
    return 2 * n_init * row_bytes + 3 * trials * n_init * 8 + 4 * n_init * 8


def plan_explicit(request):
    """The memory plan of a non-kernel MiniBatchKMeans fit (explicit centers), from an
    :class:`ExplicitPlanRequest`."""
    r = request
    n, k, b, d, s = r.n, r.n_clusters, r.batch_size, r.n_features, r.itemsize
    rows = min(r.chunk_rows, n)
    t = {
        "centers and counts": k * d * s * 2 + k * 8,
        "batch plan": min(r.max_iter, 2 * PLAN_BLOCK) * b * 8,  # two blocks held
        "k-means++ subsample and candidates": _kmeanspp_bytes(r, d * s),
        "batch rows and their distances": b * d * s + 2 * b * k * s + 4 * b * 8,
        "labelling chunk (distances, norms)": rows * (k + 1) * s,
        "labels and minima out": n * (16 + s),
    }
    state = t["centers and counts"] + t["batch plan"]
    fit = max(t["k-means++ subsample and candidates"], t["batch rows and their distances"])
    labelling = t["labelling chunk (distances, norms)"]
    return MemoryPlan(
        terms=t,
        peaks={"fit": state + fit, "labelling": state + labelling + t["labels and minima out"]},
        checked=("fit", "labelling") if r.compute_labels else ("fit",),
        shapes={"n": n, "k": k, "chunk_rows": rows},
        hints={"fit": "batch_size", "labelling": "working_memory"},
    )
