"""Run a grid: one tidy row per run, appended to a CSV file as runs finish.

Every row holds the dataset, the algorithm and all its parameters, the seed,
the scores (ARI, NMI against the ground truth), the objective on all points,
the fit and kernel times, the iterations, the library versions, the machine,
a timestamp, a ``status`` (``ok``, ``skipped`` or ``error``) and a message.

* A kill at any moment loses at most the run in progress: each row is written
  whole (one ``write`` of a complete line, fsynced within
  :data:`FSYNC_SECONDS`); a row cut short by a kill is removed when the table
  is opened again, and its run is run again. A re-run skips the run ids already
  in the file with status ``ok`` or ``skipped`` (``error`` rows are retried; the
  newest row of a run id wins when the table is read with :func:`read_results`).
  One run at a time writes a table (an advisory lock; a second is refused).
* ``budget_seconds`` stops cleanly between runs.
* Runs that need an n x n kernel matrix (full-batch kernel k-means, graph
  kernels) are estimated before they start; when the estimate exceeds the
  memory budget (default: a fraction of the available RAM), the row is
  recorded as ``skipped`` with the estimate in ``memory_estimate_bytes``.

Objective column: ``objective = inertia / n`` where the inertia is the
algorithm's own, measured in the space named by ``objective_space``:
``kernel`` (the kernel k-means objective in feature space), ``input`` (k-means
in input space, non-kernel mini-batch k-means) or ``nystroem`` (k-means in the
Nyström feature space). Only ``kernel`` objectives are comparable with each other.

Kernel time: for runs that use a kernel matrix built by the runner (full-batch
with any kernel; every kernel algorithm with a graph kernel) ``kernel_seconds``
is the time to build it (built once per dataset and kernel, reported on every
row that uses it, as if each run built its own) and ``fit_seconds`` excludes it.
Mini-batch kernel algorithms with pairwise kernels evaluate kernel blocks
inside their fit, so their ``kernel_seconds`` is 0.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import os
import platform
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ._algorithms import GRAPH_KERNELS, FitOutput, KernelSetup, get_algorithm
from ._grid import Grid, RunSpec, expand

#: Columns of the result table, in order.
COLUMNS = [
    "run_id", "grid", "dataset", "n_samples", "n_features", "n_clusters", "algorithm",
    "kernel", "kernel_params", "batch_size", "tau", "learning_rate", "renormalize",
    "max_iter", "n_components", "seed", "status", "message", "ari", "nmi", "objective",
    "objective_space", "fit_seconds", "kernel_seconds", "total_seconds", "n_iter",
    "memory_estimate_bytes", "mbkkm", "numpy", "scipy", "sklearn", "python", "platform",
    "cpu", "n_cores", "timestamp",
]

_LEARNING_RATE = {
    "truncated": "adaptive", "truncated-literal": "adaptive", "untruncated": "adaptive",
    "untruncated-classic": "classic", "minibatch-adaptive": "adaptive",
    "minibatch-classic": "classic", "nystroem": "classic", "full-batch": "",
}
_RENORMALIZE = {"truncated": "True", "truncated-literal": "False"}

#: Fraction of the available RAM used as the default memory budget.
MEMORY_FRACTION = 0.7


def available_memory() -> int | None:
    """Bytes of RAM available now (``os.sysconf``), or None where unknown."""
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def default_memory_budget() -> int | None:
    """``MEMORY_FRACTION`` of :func:`available_memory` (None where unknown)."""
    avail = available_memory()
    return None if avail is None else int(MEMORY_FRACTION * avail)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict[str, Any]:
    """Library versions and machine description recorded on every row."""
    import scipy
    import sklearn

    from .. import __version__

    return {
        "mbkkm": __version__, "numpy": np.__version__, "scipy": scipy.__version__,
        "sklearn": sklearn.__version__, "python": platform.python_version(),
        "platform": platform.platform(), "cpu": _cpu_model(), "n_cores": os.cpu_count(),
    }


def format_bytes(n: float) -> str:
    """``n`` bytes as a short human string (``39.2 GB``)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000.0
    return f"{n:.1f} TB"  # pragma: no cover


def kernel_matrix_bytes(n: int, kernel: str, params: dict, *, dense: bool = False) -> int:
    """Estimated peak bytes to build and hold the kernel matrix of n points.

    ``dense=True`` (full-batch kernel k-means) adds the dense float64 copy,
    8 n^2, that a sparse or low-rank graph kernel is expanded into.

    Pairwise kernels: the dense float64 matrix, 8 n^2. k-NN kernel: the
    symmetrised sparse graph, at most 2 n k entries of 12 bytes, twice over
    while it is symmetrised. Heat kernel: exact (three dense n x n float64
    arrays) when 8 n^2 fits ``max_dense_bytes`` (default 2**30: n <= 11,585), else the
    graph plus the eigensolver's vectors and the rank-``max_components`` factor.
    """
    if kernel in GRAPH_KERNELS and dense:
        return kernel_matrix_bytes(n, kernel, params) + 8 * n * n
    if kernel == "knn":
        return 24 * n * int(params.get("n_neighbors", 10))
    if kernel == "heat":
        from ..kernels._spectral import (
            DEFAULT_MAX_COMPONENTS,
            DEFAULT_MAX_DENSE_BYTES,
            DEFAULT_N_NEIGHBORS,
        )

        graph = 24 * n * int(params.get("n_neighbors", DEFAULT_N_NEIGHBORS))
        if params.get("n_components") is None and \
                8 * n * n <= params.get("max_dense_bytes", DEFAULT_MAX_DENSE_BYTES):
            return graph + 3 * 8 * n * n
        pairs = (params.get("n_components") or params.get("max_components",
                                                          DEFAULT_MAX_COMPONENTS)) + 1
        return graph + 8 * n * 3 * (pairs + 1)
    return 8 * n * n


def needs_matrix(run: RunSpec) -> bool:
    """Whether the run uses a kernel matrix built by the runner."""
    algo = get_algorithm(run.algorithm)
    return algo.needs_kernel_matrix or (algo.uses_kernel and run.kernel in GRAPH_KERNELS)


def build_kernel(X: np.ndarray, kernel: str, params: dict, *, matrix: bool) -> KernelSetup:
    """Resolve a kernel for a dataset; build its n x n matrix when ``matrix``."""
    params = dict(params)
    if kernel not in GRAPH_KERNELS and kernel != "none":
        # Resolve data-driven defaults (e.g. gamma=None) once, so every algorithm
        # of the group uses the same value and the row records it.
        from ..kernels import resolve_kernel

        params = resolve_kernel(kernel, gamma=params.pop("gamma", None), X=X).params
    if not matrix:
        return KernelSetup(kernel, params)
    start = time.perf_counter()
    if kernel in GRAPH_KERNELS:
        from ..kernels import graph_kernel_matrix

        K = graph_kernel_matrix(kernel, X, **params)
    else:
        from sklearn.metrics.pairwise import pairwise_kernels

        K = pairwise_kernels(np.asarray(X, dtype=np.float64), metric=kernel, **params)
    return KernelSetup(kernel, dict(params), K, time.perf_counter() - start)


def load_data(run: RunSpec, *, data_home=None, download: bool = False):
    """``(X, y)`` of a run's dataset (synthetic sets with seed 0)."""
    from ..datasets import SYNTHETIC, load_dataset

    if run.dataset in SYNTHETIC:
        return SYNTHETIC[run.dataset](n_samples=run.synthetic_samples, random_state=0)
    return load_dataset(run.dataset, data_home=data_home, download=download)


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


@dataclass
class RunSummary:
    """What :func:`run_grid` did."""

    path: Path
    total: int = 0
    already_done: int = 0
    ok: int = 0
    skipped: int = 0
    error: int = 0
    not_run: int = 0
    stopped_by_budget: bool = False
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    #: Bytes of an incomplete last row (left by a killed run) removed from the table.
    removed_bytes: int = 0

    def __str__(self) -> str:
        s = (f"{self.total} runs: {self.already_done} already in {self.path}, {self.ok} ok, "
             f"{self.skipped} skipped, {self.error} errors, {self.not_run} not run "
             f"({self.seconds:.1f} s)")
        if self.removed_bytes:
            s += (f"; removed an incomplete last row ({self.removed_bytes} bytes) left by an "
                  "interrupted run, and ran that run again")
        if self.stopped_by_budget:
            s += "; stopped by the time budget"
        return s


def _complete_text(path: Path) -> str:
    """The text of a result table up to its last newline: a last line without
    one is a row whose writer was killed mid-write, and is not part of the table."""
    data = path.read_bytes()
    return data[: data.rfind(b"\n") + 1].decode("utf-8", errors="replace")


def done_run_ids(path: str | os.PathLike) -> set[str]:
    """Run ids with status ``ok`` or ``skipped`` in an existing result file.

    An incomplete last line (a run killed while its row was written) does not
    count: that run is run again.
    """
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return set()
    reader = csv.DictReader(io.StringIO(_complete_text(path), newline=""))
    if reader.fieldnames is None or "run_id" not in reader.fieldnames:
        raise ValueError(f"{path} is not a result table of mbkkm (no run_id column).")
    return {r["run_id"] for r in reader
            if r.get("status") in ("ok", "skipped") and None not in r.values()}


#: Seconds between two fsyncs of a result table (it is also fsynced when closed).
FSYNC_SECONDS = 2.0



def _line(cells) -> bytes:
    """One CSV line (the csv module's quoting and its ``\\r\\n`` ending), encoded."""
    buf = io.StringIO()
    csv.writer(buf).writerow(cells)
    return buf.getvalue().encode("utf-8")


_HEADER = _line(COLUMNS)


def _cell(value) -> str:
    """A value as written in the table; one row is always one physical line, which
    is what lets an interrupted write be found and removed."""
    if value is None:
        return ""
    return str(value).replace("\r", " ").replace("\n", " ")


def _write_all(fd: int, data: bytes) -> None:
    """Write ``data`` with as few ``write`` calls as the OS allows (one, for a row)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _lock(fd: int, path: Path) -> None:
    """An exclusive advisory lock on the table for the writer's lifetime (released
    by the OS when the process dies), so two runs never append to one table."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX: no lock
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise ValueError(f"{path} is being written by another running experiment; wait "
                         "for it to finish or write to another folder.") from None
    except OSError:  # pragma: no cover - file systems without locks
        pass


class _Writer:
    """Appends rows to a result table so that a kill at any byte loses at most the
    row being written.

    * On open, a last line without its newline (the process was killed while
      writing it) is cut off; its run is not in :func:`done_run_ids` and is run
      again. A header cut short is written again.
    * Each row is one ``write`` of a whole line on an ``O_APPEND`` descriptor
      (no user-space buffer to flush), fsynced at most ``fsync_seconds`` after
      it was written and when the table is closed.
    """

    def __init__(self, path: Path, *, fsync_seconds: float = FSYNC_SECONDS):
        self.path = path
        self.fsync_seconds = fsync_seconds
        #: Bytes of an incomplete last row removed on open.
        self.removed_bytes = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666)
        try:
            _lock(self._fd, path)
            self._repair()
        except BaseException:
            os.close(self._fd)
            raise
        self._synced = time.monotonic()

    def _repair(self) -> None:
        fd, path = self._fd, self.path
        size = os.fstat(fd).st_size
        head = os.pread(fd, min(size, 2 * len(_HEADER) + 1), 0)
        first = head.split(b"\n", 1)[0] + b"\n" if b"\n" in head else None
        if first is None and not _HEADER.startswith(head):
            raise ValueError(f"{path} is not a result table of mbkkm (no header line).")
        if first is not None and next(csv.reader([first.decode(errors="replace")]),
                                      []) != COLUMNS:
            raise ValueError(f"{path} has other columns than this version of mbkkm "
                             "writes; write to a new file.")
        end = self._last_newline(size) + 1
        if end < size:
            os.ftruncate(fd, end)
            self.removed_bytes = size - end
        if end == 0:  # empty, or only part of the header was written
            _write_all(fd, _HEADER)
        if end < size or end == 0:
            os.fsync(fd)

    def _last_newline(self, size: int) -> int:
        """Offset of the last newline of the file, -1 if none (read backwards)."""
        pos = size
        while pos > 0:
            start = max(0, pos - 65536)
            i = os.pread(self._fd, pos - start, start).rfind(b"\n")
            if i >= 0:
                return start + i
            pos = start
        return -1

    def write(self, row: dict) -> None:
        _write_all(self._fd, _line([_cell(row.get(k)) for k in COLUMNS]))
        now = time.monotonic()
        if now - self._synced >= self.fsync_seconds:
            os.fsync(self._fd)
            self._synced = now

    def close(self) -> None:
        if self._fd >= 0:
            try:
                os.fsync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = -1


def _base_row(run: RunSpec, env: dict) -> dict[str, Any]:
    return {
        "run_id": run.run_id, "grid": run.grid, "dataset": run.dataset,
        "n_clusters": run.n_clusters, "algorithm": run.algorithm, "kernel": run.kernel,
        "kernel_params": json.dumps(dict(run.kernel_params), sort_keys=True),
        "batch_size": run.batch_size, "tau": run.tau,
        "learning_rate": _LEARNING_RATE.get(run.algorithm, ""),
        "renormalize": _RENORMALIZE.get(run.algorithm, ""),
        "max_iter": run.max_iter, "n_components": run.n_components, "seed": run.seed,
        "objective_space": get_algorithm(run.algorithm).objective_space,
        "kernel_seconds": 0.0,
        **env,
    }


def execute_run(run: RunSpec, X, y, kernel: KernelSetup, env: dict) -> dict[str, Any]:
    """Fit one run and return its row (status ``ok`` or ``error``; never raises
    for errors of the algorithm itself)."""
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    row = _base_row(run, env)
    n_clusters = run.n_clusters or len(np.unique(y))
    row.update(n_samples=X.shape[0], n_features=X.shape[1], n_clusters=n_clusters)
    if kernel.matrix is not None:
        row["kernel_seconds"] = round(kernel.seconds, 6)
    effective = run if run.n_clusters else _with_clusters(run, n_clusters)
    algo = get_algorithm(run.algorithm)
    start = time.perf_counter()
    try:
        out: FitOutput = algo.fit(X, effective, kernel)
    except (Exception, MemoryError) as exc:
        row.update(status="skipped" if isinstance(exc, MemoryError) else "error",
                   message=_one_line(exc))
        row["timestamp"] = _now()
        return row
    fit_seconds = time.perf_counter() - start
    labels = np.asarray(out.labels)
    row.update(
        status="ok", message="",
        ari=adjusted_rand_score(y, labels), nmi=normalized_mutual_info_score(y, labels),
        objective=out.inertia / X.shape[0], fit_seconds=round(fit_seconds, 6),
        total_seconds=round(fit_seconds + float(row["kernel_seconds"]), 6),
        n_iter=out.n_iter, timestamp=_now(),
    )
    return row


def _with_clusters(run: RunSpec, k: int) -> RunSpec:
    from dataclasses import replace

    return replace(run, n_clusters=k)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def run_grid(
    grid: Grid | Iterable[RunSpec],
    out: str | os.PathLike,
    *,
    data_home=None,
    download: bool = False,
    budget_seconds: float | None = None,
    memory_budget: int | None = -1,
    progress: bool = True,
) -> RunSummary:
    """Run every run of a grid not already in ``out``, appending one row per run.

    Parameters
    ----------
    grid : Grid or iterable of RunSpec
        The grid (expanded with :func:`~mbkkm.experiments.expand`) or its runs.
    out : path
        The CSV result table (created with a header when missing).
    data_home : path, optional
        A folder searched first for the paper's datasets.
    download : bool, default=False
        Whether a missing dataset may be fetched from OpenML; when it is not
        found, its runs are recorded as ``skipped``.
    budget_seconds : float, optional
        Stop between runs once this much wall time has passed.
    memory_budget : int or None, default=-1
        Bytes a kernel matrix may take; -1: :func:`default_memory_budget`;
        None: no limit.
    progress : bool, default=True
        Show a tqdm progress bar (on stderr).

    Returns
    -------
    summary : RunSummary
    """
    runs = expand(grid) if isinstance(grid, Grid) else list(grid)
    out = Path(out)
    if budget_seconds is not None and not budget_seconds > 0:
        raise ValueError(f"budget_seconds must be positive, got {budget_seconds!r}.")
    if memory_budget == -1:
        memory_budget = default_memory_budget()
    summary = RunSummary(path=out, total=len(runs))
    # Open (and repair) the table before reading which runs it holds.
    writer = _Writer(out)
    try:
        summary.removed_bytes = writer.removed_bytes
        done = done_run_ids(out)
        todo = [r for r in runs if r.run_id not in done]
        summary.already_done = len(runs) - len(todo)
        env = environment()
    except BaseException:
        writer.close()
        raise
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), unit="run", dynamic_ncols=True)
    start = time.perf_counter()
    data_key, data, data_error = None, None, None
    kernel_key, kernel_setup, kernel_error = None, None, None
    try:
        for i, run in enumerate(todo):
            if budget_seconds is not None and time.perf_counter() - start >= budget_seconds:
                summary.stopped_by_budget = True
                summary.not_run = len(todo) - i
                break
            if bar is not None:
                bar.set_description(f"{run.dataset} {run.algorithm} {run.kernel}")
                bar.set_postfix_str(f"b={run.batch_size} tau={run.tau} seed={run.seed}")
            key = (run.dataset, run.synthetic_samples)
            if key != data_key:
                data_key, data, data_error = key, None, None
                kernel_key, kernel_setup = None, None
                try:
                    data = load_data(run, data_home=data_home, download=download)
                except (OSError, ValueError) as exc:
                    data_error = _one_line(exc)
            row = _base_row(run, env)
            if data_error is not None:
                row.update(status="skipped", message=f"dataset not available: {data_error}",
                           timestamp=_now())
            else:
                X, y = data
                matrix = needs_matrix(run)
                est = kernel_matrix_bytes(
                    X.shape[0], run.kernel, dict(run.kernel_params),
                    dense=get_algorithm(run.algorithm).needs_kernel_matrix) if matrix else None
                if matrix and memory_budget is not None and est > memory_budget:
                    row.update(
                        n_samples=X.shape[0], n_features=X.shape[1],
                        status="skipped", memory_estimate_bytes=est, timestamp=_now(),
                        message=(f"the {X.shape[0]} x {X.shape[0]} {run.kernel} kernel matrix "
                                 f"needs about {format_bytes(est)}, over the memory budget "
                                 f"of {format_bytes(memory_budget)}"),
                    )
                else:
                    kkey = (run.kernel, run.kernel_params, matrix)
                    if kkey != kernel_key:
                        kernel_key, kernel_setup, kernel_error = kkey, None, None
                        try:
                            kernel_setup = build_kernel(X, run.kernel,
                                                        dict(run.kernel_params), matrix=matrix)
                        except (Exception, MemoryError) as exc:
                            kernel_error = _one_line(exc)
                    if kernel_error is not None:
                        row.update(status="error", timestamp=_now(),
                                   message=f"building the kernel failed: {kernel_error}")
                    else:
                        row = execute_run(run, X, y, kernel_setup, env)
                        row["kernel_params"] = json.dumps(kernel_setup.params, sort_keys=True,
                                                          default=float)
                    row["memory_estimate_bytes"] = est
            writer.write(row)
            status = row["status"]
            setattr(summary, status, getattr(summary, status) + 1)
            if status == "error" and row["message"] not in summary.errors:
                summary.errors.append(row["message"])
            if bar is not None:
                bar.update(1)
    finally:
        writer.close()
        if bar is not None:
            bar.close()
        summary.seconds = time.perf_counter() - start
    return summary


def read_results(paths) -> Any:
    """Read one or more result tables into a pandas DataFrame (the newest row
    of each run id kept).

    Parameters
    ----------
    paths : path or list of paths
        CSV files written by :func:`run_grid`, or folders holding them.
    """
    import pandas as pd

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(p.glob("*.csv")))
        elif p.exists():
            files.append(p)
        else:
            raise FileNotFoundError(f"result table {p} not found.")
    if not files:
        raise FileNotFoundError(f"no result table (*.csv) in {', '.join(map(str, paths))}.")
    frames = []
    for f in files:
        try:
            df = pd.read_csv(io.StringIO(_complete_text(f)))
        except Exception as exc:
            raise ValueError(f"cannot read result table {f}: {_one_line(exc)}") from exc
        missing = {"run_id", "dataset", "algorithm", "status"} - set(df.columns)
        if missing:
            raise ValueError(f"{f} is not a result table of mbkkm (missing {sorted(missing)}).")
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    return df.drop_duplicates("run_id", keep="last").reset_index(drop=True)
