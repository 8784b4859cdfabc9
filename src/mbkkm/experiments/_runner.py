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
* A dataset that cannot be loaded (missing, no download, out of memory) makes its
  runs ``error`` rows, so that a re-run with the dataset in place runs them.
* Runs that need an n x n kernel matrix (full-batch kernel k-means, graph
  kernels) are estimated before they start; when the estimate exceeds the
  memory budget (default: a fraction of the available RAM), the row is
  recorded as ``skipped`` with the estimate in ``memory_estimate_bytes``.
* On a scipy.sparse dataset (the synthetic corpus ``topics``) the kernels on
  points take the rows as they are; the runs that need dense rows (non-kernel
  mini-batch k-means, the graph kernels) are recorded as ``skipped``, saying
  why: the rows are never made dense.

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
import mmap
import os
import platform
import sys
import time
import warnings
from collections.abc import Iterable
from contextlib import closing, nullcontext, suppress
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from .._progress import Progress
from .._validation import require
from .._warn import one_line
from ..backends._threads import effective_n_threads
from ._algorithms import GRAPH_KERNELS, FitOutput, KernelSetup, get_algorithm
from ._grid import Grid, RunSpec, expand

#: Columns of the result table, in order: the run, its outcome and times, the
#: machine's state, then the library versions and the machine.
COLUMNS = """
    run_id grid dataset n_samples n_features n_clusters algorithm kernel kernel_params
    batch_size tau learning_rate renormalize max_iter n_components seed
    status message ari nmi objective objective_space fit_seconds kernel_seconds
    total_seconds fit_cpu_seconds kernel_cpu_seconds n_iter memory_estimate_bytes
    load_average jobs blas_threads
    mbkkm commit numpy scipy sklearn python platform cpu n_cores timestamp
""".split()

#: Fraction of the available RAM used as the default memory budget.
MEMORY_FRACTION = 0.7


def available_memory() -> int | None:
    """Bytes of RAM available now (``os.sysconf``), or None where unknown."""
    with suppress(ValueError, OSError, AttributeError):
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    return None


def default_memory_budget() -> int | None:
    """``MEMORY_FRACTION`` of :func:`available_memory` (None where unknown)."""
    avail = available_memory()
    return None if avail is None else int(MEMORY_FRACTION * avail)


def _cpu_model() -> str:
    with suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def source_commit() -> str:
    """The git commit of the mbkkm source that runs, or ``""`` where unknown.

    Read with ``git`` from the package's folder, when that folder's files are
    tracked there: an installed wheel has no commit (``""``), also when its
    environment lies inside another project's repository. ``"+dirty"`` is appended
    when the package's own files differ from that commit (changes elsewhere in the
    checkout, such as result tables being written, do not count).
    """
    import subprocess

    def git(*args):
        here = Path(__file__).resolve().parent.parent
        return subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=10)

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        # an installed copy inside someone else's repository: not tracked there
        tracked = git("ls-files", "--error-unmatch", "--", "__init__.py")
        if head.returncode != 0 or tracked.returncode != 0:
            return ""
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".")
    except (OSError, subprocess.SubprocessError):
        return ""
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def environment() -> dict[str, Any]:
    """Library versions, source commit and machine description recorded on every row."""
    import scipy
    import sklearn

    from .. import __version__

    return {
        "mbkkm": __version__,
        "commit": source_commit(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "sklearn": sklearn.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "n_cores": os.cpu_count(),
    }


def load_average() -> float | None:
    """The machine's 1-minute load average now (None where unknown)."""
    with suppress(OSError, AttributeError):  # not on POSIX: None
        return round(os.getloadavg()[0], 2)
    return None  # pragma: no cover


def format_bytes(n: float) -> str:
    """``n`` bytes as a short human string (``39.2 GB``)."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000.0
    return f"{n:.1f} TB"


def kernel_matrix_bytes(
    n: int, kernel: str, params: dict, *, dense: bool = False, n_clusters: int = 10
) -> int:
    """Estimated peak bytes to build and hold the kernel matrix of n points.

    Pairwise kernels: the dense float64 matrix, 8 n^2. The graph kernels start
    from the symmetrised k-NN graph, whose E stored entries are n k to
    2 n (k - 1) + n (every link held both ways, and the self-loops), 1 to 1.7 n k
    on real data (MNIST's 2,000-NN graph: 1.41 n k); 1.5 n k is assumed
    (:func:`_graph_entries`). k-NN kernel: 20 n k + 48 E, measured with tracemalloc
    (the neighbour lists, 16 n k; the graph and its symmetrised copy; the scaled
    copy D^-1 A D^-1 and its temporaries): 92 n k. Heat kernel: the
    graph, 56 n k + 12 E (measured likewise), plus, exact (three dense n x n float64
    arrays) when 8 n^2 fits ``max_dense_bytes`` (default 2**30: n <= 11,585), else
    the eigensolver's vectors and the rank-``max_components`` factor.

    ``dense=True`` (full-batch kernel k-means) adds what Lloyd's iterations
    hold beside the matrix: the (n, ``n_clusters``) product K A in float64
    and its one-hot operand (a sparse or low-rank graph kernel is multiplied
    as it is stored, never expanded to n x n).
    """
    if kernel in GRAPH_KERNELS and dense:
        return kernel_matrix_bytes(n, kernel, params) + 2 * 8 * n * n_clusters
    if kernel == "knn":
        k = int(params.get("n_neighbors", 10))
        return 20 * n * k + 48 * _graph_entries(n, k)
    if kernel == "heat":
        from ..kernels import _spectral

        k = int(params.get("n_neighbors", _spectral.DEFAULT_N_NEIGHBORS))
        graph = 56 * n * k + 12 * _graph_entries(n, k)
        max_dense = params.get("max_dense_bytes", _spectral.DEFAULT_MAX_DENSE_BYTES)
        components = params.get("n_components")
        if components is None and 8 * n * n <= max_dense:
            return graph + 3 * 8 * n * n
        pairs = (components or params.get("max_components", _spectral.DEFAULT_MAX_COMPONENTS)) + 1
        return graph + 8 * n * 3 * (pairs + 1)
    return 8 * n * n


def _graph_entries(n: int, k: int) -> int:
    """The entries assumed of the symmetrised k-NN graph of n points: 1.5 n k, within
    its most (each point's k - 1 links both ways, and its self-loop). The most would
    skip the paper's 2,000-NN MNIST grid, which runs on 24 GiB (its graph holds
    1.41 n k); a high-dimensional Gaussian cloud (1.63 n k) peaks about 6 % above."""
    return min(int(1.5 * n * k), 2 * n * max(k - 1, 0) + n)


def build_kernel(X: np.ndarray, run: RunSpec, *, matrix: bool, cache_dir=None, source=None):
    """Resolve a run's kernel for its dataset ``X``; build its n x n matrix when ``matrix``.

    With ``cache_dir``, the matrix is read from (or built into) that kernel cache
    (:mod:`._kernel_cache`) under a key made of the run's dataset (and synthetic
    size), a fingerprint of ``X`` itself, the ``source`` (commit or version) with a
    hash of the package's files, and the kernel with its resolved parameters.
    """
    kernel, params = run.kernel, dict(run.kernel_params)
    if kernel not in GRAPH_KERNELS and kernel != "none":
        # Resolve data-driven defaults (e.g. gamma=None) once, so every algorithm
        # of the group uses the same value and the row records it.
        from ..kernels import resolve_kernel

        params = resolve_kernel(kernel, gamma=params.pop("gamma", None), X=X).params
    if not matrix:
        return KernelSetup(kernel, params)

    def build():
        start, cpu_start = time.perf_counter(), time.process_time()
        if kernel in GRAPH_KERNELS:
            from ..kernels import graph_kernel_matrix

            K = graph_kernel_matrix(kernel, X, **params)
        else:
            import scipy.sparse as sp
            from sklearn.metrics.pairwise import pairwise_kernels

            # sparse rows (the topics corpus) as they are: the matrix is dense anyway
            X64 = X.astype(np.float64) if sp.issparse(X) else np.asarray(X, dtype=np.float64)
            K = pairwise_kernels(X64, metric=kernel, **params)
        return K, time.perf_counter() - start, time.process_time() - cpu_start

    if cache_dir is None:
        return KernelSetup(kernel, dict(params), *build())
    from ._kernel_cache import cache_key, cached_matrix, data_fingerprint, source_fingerprint

    # the points themselves and the code's files, not only their names: a dataset
    # file replaced, or edited code (a +dirty commit), never reuses an older matrix
    key = cache_key(
        dataset=run.dataset,
        synthetic_samples=run.synthetic_samples,
        n_samples=X.shape[0],
        kernel=kernel,
        params=params,
        source=source_fingerprint(source),
        data=data_fingerprint(X),
    )
    return KernelSetup(kernel, dict(params), *cached_matrix(cache_dir, key, build))


def load_data(run: RunSpec, *, data_home=None, download: bool = False):
    """``(X, y)`` of a run's dataset (synthetic sets with seed 0)."""
    from ..datasets import SYNTHETIC, load_dataset

    if run.dataset in SYNTHETIC:
        return SYNTHETIC[run.dataset](n_samples=run.synthetic_samples, random_state=0)
    return load_dataset(run.dataset, data_home=data_home, download=download)


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
        s = (
            f"{self.total} runs: {self.already_done} already in {self.path}, {self.ok} ok, "
            f"{self.skipped} skipped, {self.error} errors, {self.not_run} not run "
            f"({self.seconds:.1f} s)"
        )
        if self.removed_bytes:
            s += (
                f"; removed an incomplete last row ({self.removed_bytes} bytes) left by an "
                "interrupted run, and ran that run again"
            )
        if self.stopped_by_budget:
            s += "; stopped by the time budget"
        return s


def _complete_text(path: Path) -> str:
    """The text of a result table up to its last newline: a last line without
    one is a row whose writer was killed mid-write, and is not part of the table."""
    data = path.read_bytes()
    return data[: data.rfind(b"\n") + 1].decode("utf-8", errors="replace")


def done_run_ids(path: str | os.PathLike) -> set[str]:
    """Run ids with status ``ok`` or ``skipped`` in a result table: the runs a
    re-run of its grid skips.

    An incomplete last line (a run killed while its row was written) does not
    count, nor does a run with status ``error``: those runs are run again.

    Parameters
    ----------
    path : str or path-like
        A result table written by :func:`run_grid`; a missing or empty file holds
        no run.

    Returns
    -------
    run_ids : set of str

    Raises
    ------
    ValueError
        If the file has no ``run_id`` column (not a result table of mbkkm).

    Examples
    --------
    >>> from mbkkm.experiments import done_run_ids, expand, get_preset
    >>> runs = expand(get_preset("quick"))
    >>> done = done_run_ids("no-such-table.csv")
    >>> sum(r.run_id not in done for r in runs) == len(runs)
    True
    """
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return set()
    reader = csv.DictReader(io.StringIO(_complete_text(path), newline=""))
    if reader.fieldnames is None or "run_id" not in reader.fieldnames:
        raise ValueError(f"{path} is not a result table of mbkkm (no run_id column).")
    return {
        r["run_id"]
        for r in reader
        if r.get("status") in ("ok", "skipped") and None not in r.values()
    }


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
    return "" if value is None else str(value).replace("\r", " ").replace("\n", " ")


def _write_all(fd: int, data: bytes) -> None:
    """Write ``data`` with as few ``write`` calls as the OS allows (one, for a row)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


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
        raise ValueError(
            f"{path} is being written by another running experiment; wait "
            "for it to finish or write to another folder."
        ) from None
    except OSError:  # pragma: no cover - file systems without locks
        pass


def _repair(fd: int, path: Path) -> int:
    """Make the table open on ``fd`` whole: cut off a last line without its newline,
    write the header where it is missing or cut short, and return the bytes removed.
    Raises ValueError for a file that is not a result table of this version."""
    size = os.fstat(fd).st_size
    with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if size else nullcontext(b"") as data:
        head = data[: 2 * len(_HEADER) + 1]
        end = data.rfind(b"\n") + 1  # after the last complete line
    first = head.split(b"\n", 1)[0] + b"\n" if b"\n" in head else None
    if first is None and not _HEADER.startswith(head):
        raise ValueError(f"{path} is not a result table of mbkkm (no header line).")
    if first is not None and next(csv.reader([first.decode(errors="replace")]), []) != COLUMNS:
        raise ValueError(
            f"{path} has other columns than this version of mbkkm writes; write to a new file."
        )
    if end < size:
        os.ftruncate(fd, end)
    if end == 0:  # empty, or only part of the header was written
        _write_all(fd, _HEADER)
    if end < size or end == 0:
        os.fsync(fd)
    return size - end


class _Writer:
    """Appends rows to a result table so that a kill at any byte loses at most the
    row being written.

    * On open, a last line without its newline (the process was killed while
      writing it) is cut off; its run is not in :func:`done_run_ids` and is run
      again. A header cut short is written again.
    * Each row is one ``write`` of a whole line on an ``O_APPEND`` descriptor
      (no user-space buffer to flush), fsynced at most :data:`FSYNC_SECONDS` after
      it was written and when the table is closed.
    """

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666)
        try:
            _lock(self._fd, path)
            #: Bytes of an incomplete last row removed on open.
            self.removed_bytes = _repair(self._fd, path)
        except BaseException:
            os.close(self._fd)
            raise
        self._synced = time.monotonic()

    def write(self, row: dict) -> None:
        _write_all(self._fd, _line([_cell(row.get(k)) for k in COLUMNS]))
        now = time.monotonic()
        if now - self._synced >= FSYNC_SECONDS:
            os.fsync(self._fd)
            self._synced = now

    def close(self) -> None:
        try:
            os.fsync(self._fd)
        finally:
            os.close(self._fd)


def _base_row(run: RunSpec, env: dict) -> dict[str, Any]:
    algo = get_algorithm(run.algorithm)
    # The mini-batch algorithms' rate and renormalisation, as their fit is called with;
    # the Nystroem baseline's scikit-learn MiniBatchKMeans has the classic rate.
    options = getattr(algo.fit, "keywords", {})
    return {
        **asdict(run),  # its synthetic_samples is no column: not written
        "run_id": run.run_id,
        "kernel_params": json.dumps(dict(run.kernel_params), sort_keys=True),
        "learning_rate": options.get(
            "learning_rate", "classic" if algo.objective_space == "nystroem" else ""
        ),
        "renormalize": str(options.get("renormalize", True)) if algo.uses_tau else "",
        "objective_space": algo.objective_space,
        "kernel_seconds": 0.0,
        "kernel_cpu_seconds": 0.0,
        **env,
    }


def execute_run(run: RunSpec, X, y, kernel: KernelSetup, row: dict) -> dict[str, Any]:
    """Fit one run and complete its ``row`` (from :func:`_base_row`), returned:
    status ``ok``, ``error``, or ``skipped`` when the fit runs out of memory; never
    raises for errors of the algorithm itself.

    The row records the kernel's resolved parameters (``gamma`` of the data, say).

    ``fit_seconds`` is wall time; ``fit_cpu_seconds`` the CPU time of this
    process (all its threads) over the same interval, which a busy machine
    inflates much less than the wall time.
    """
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    row["kernel_params"] = json.dumps(kernel.params, sort_keys=True, default=float)
    n_clusters = run.n_clusters or len(np.unique(y))
    row.update(n_samples=X.shape[0], n_features=X.shape[1], n_clusters=n_clusters)
    # 0 where the runner built no matrix (KernelSetup's default)
    row["kernel_seconds"] = round(kernel.seconds, 6)
    row["kernel_cpu_seconds"] = round(kernel.cpu_seconds, 6)
    effective = run if run.n_clusters else replace(run, n_clusters=n_clusters)
    algo = get_algorithm(run.algorithm)
    start, cpu_start = time.perf_counter(), time.process_time()
    try:
        # A fit's warnings (an indefinite kernel, empty clusters...) go into its
        # row's message, once each, instead of onto the terminal of a long grid.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out: FitOutput = algo.fit(X, effective, kernel)
    except (Exception, MemoryError) as exc:
        return _finish(
            row,
            "skipped" if isinstance(exc, MemoryError) else "error",
            one_line(exc, with_type=True),
        )
    fit_seconds = time.perf_counter() - start
    fit_cpu = time.process_time() - cpu_start
    labels = np.asarray(out.labels)
    warned = (f"{w.category.__name__}: {' '.join(str(w.message).split())}" for w in caught)
    return _finish(
        row,
        "ok",
        " | ".join(dict.fromkeys(warned)),  # the distinct warnings, one line each
        ari=adjusted_rand_score(y, labels),
        nmi=normalized_mutual_info_score(y, labels),
        objective=out.inertia / X.shape[0],
        fit_seconds=round(fit_seconds, 6),
        total_seconds=round(fit_seconds + float(row["kernel_seconds"]), 6),
        fit_cpu_seconds=round(fit_cpu, 6),
        n_iter=out.n_iter,
    )


def _dense_only(run: RunSpec, algo, X) -> str | None:
    """Why ``run`` is not run on the rows of ``X`` when they are scipy.sparse and it
    needs dense ones (None: it runs): an algorithm without a sparse path, or a graph
    kernel (its k-NN graph is searched among dense rows). They are not expanded to
    dense rows: a sparse dataset is one that would not fit in memory so."""
    import scipy.sparse as sp

    if not sp.issparse(X):
        return None
    if not algo.sparse_input:
        why = f"{run.algorithm} (k-means in the input space, MiniBatchKMeans) takes dense rows only"
    elif run.kernel in GRAPH_KERNELS:
        why = f"the {run.kernel} kernel builds its k-NN graph from dense rows"
    else:
        return None
    return (
        f"not run: {why}, and dataset {run.dataset!r} is a scipy.sparse matrix "
        f"({X.shape[0]} x {X.shape[1]}, {X.nnz} stored values), which is not made dense; "
        "the kernel algorithms with a kernel on points (rbf, cosine, ...) take its rows "
        "as they are."
    )


def _finish(row: dict, status: str, message: str, **cells) -> dict[str, Any]:
    """``row`` with its status, message and other ``cells``, the load average and the
    time of now."""
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    row.update(status=status, message=message, load_average=load_average(), timestamp=now, **cells)
    return row


def _attempt(make, errors=(Exception, MemoryError)) -> tuple[Any, str | None]:
    """``(make(), None)``, or ``(None, the error on one line)`` for ``errors``."""
    try:
        return make(), None
    except errors as exc:
        return None, one_line(exc, with_type=True)


class _Executor:
    """Runs one run after another in one process, keeping the last dataset and the
    last kernel (matrix) it built, so that a group of runs on the same dataset and
    kernel loads and builds them once."""

    def __init__(
        self, env: dict, *, data_home, download: bool, memory_budget: int | None, kernel_cache=None
    ):
        self.env = env
        self.kernel_cache = kernel_cache
        self.load_data = partial(load_data, data_home=data_home, download=download)
        self.memory_budget = memory_budget
        # the key of the last dataset and of the last kernel, and (value, error message)
        self._data_key: Any = None
        self._kernel_key: Any = None
        self._data: tuple[Any, str | None] = (None, None)
        self._kernel: tuple[Any, str | None] = (None, None)

    def __call__(self, run: RunSpec) -> dict[str, Any]:
        """The row of one run (never raises for the run's own errors)."""
        key = (run.dataset, run.synthetic_samples)
        if key != self._data_key:
            self._kernel_key, self._kernel = None, (None, None)  # free the old matrix first
            self._data_key, self._data = key, (None, None)
            # MemoryError too: one dataset too large to load is that dataset's runs'
            # error, not the end of the grid (as a kernel or a fit out of memory)
            self._data = _attempt(partial(self.load_data, run), (OSError, ValueError, MemoryError))
        row = _base_row(run, self.env)
        data, error = self._data
        if error is not None:
            # an error, not a skip: a re-run with the dataset in place (or more memory)
            # runs it
            return _finish(row, "error", f"dataset not available: {error}")
        X, y = data
        algo = get_algorithm(run.algorithm)
        dense_only = _dense_only(run, algo, X)
        if dense_only is not None:  # skipped, not failed: a re-run does not retry it
            shape = {"n_samples": X.shape[0], "n_features": X.shape[1]}
            return _finish(row, "skipped", dense_only, **shape)
        # Does the run use a kernel matrix built here (full batch, or a graph kernel)?
        matrix = algo.needs_kernel_matrix or (algo.uses_kernel and run.kernel in GRAPH_KERNELS)
        est = None
        if matrix:
            est = kernel_matrix_bytes(
                X.shape[0],
                run.kernel,
                dict(run.kernel_params),
                dense=algo.needs_kernel_matrix,
                n_clusters=run.n_clusters or len(np.unique(y)),
            )
        if est is not None and self.memory_budget is not None and est > self.memory_budget:
            message = (
                f"the {X.shape[0]} x {X.shape[0]} {run.kernel} kernel matrix "
                f"needs about {format_bytes(est)}, over the memory budget "
                f"of {format_bytes(self.memory_budget)}"
            )
            shape = {"n_samples": X.shape[0], "n_features": X.shape[1]}
            return _finish(row, "skipped", message, memory_estimate_bytes=est, **shape)
        kernel_key = (run.dataset, run.synthetic_samples, run.kernel, run.kernel_params, matrix)
        if kernel_key != self._kernel_key:
            source = self.env.get("commit") or self.env.get("mbkkm")
            options = dict(matrix=matrix, cache_dir=self.kernel_cache, source=source)
            self._kernel_key, self._kernel = kernel_key, (None, None)  # free the old matrix first
            self._kernel = _attempt(lambda: build_kernel(X, run, **options))
        kernel, error = self._kernel
        if error is not None:
            _finish(row, "error", f"building the kernel failed: {error}")
        else:
            execute_run(run, X, y, kernel, row)
        row["memory_estimate_bytes"] = est
        return row


# --- worker processes (run_grid with jobs > 1) -----------------------------------------

_WORKER: _Executor | None = None
#: The folder where each worker names the run it is running (a file per process id).
_RUNNING_DIR: str | None = None


#: Seconds between two looks at the parent by a worker that the kernel cannot kill
#: with it (not Linux): how long such a worker may compute on after its grid died.
PARENT_POLL_S = 0.5


def _die_with_parent(parent: int, prctl: bool = True) -> None:
    """End this worker when its parent (the grid) dies, so that killing a grid (even
    with SIGKILL) leaves no worker computing on.

    On Linux the kernel SIGKILLs the worker with its parent (``PR_SET_PDEATHSIG``;
    0.2 s measured under a load average of 6 on 2 cores). Elsewhere, or when that
    call fails (``prctl=False`` forces it, for the tests), a daemon thread looks at
    ``os.getppid()`` every :data:`PARENT_POLL_S` seconds and ends the process when
    the parent has changed. A parent that died before either was armed is noticed
    here. Both act only once this initializer runs: a worker whose grid is killed
    while it starts (Python, then the grid's main module and mbkkm imported: 3 s of
    CPU time, 8 to 31 s measured under load averages of 6 to 8 on 2 cores) lives on
    until its start-up ends and then exits here, before it takes a run.
    """
    armed = False
    if prctl and sys.platform.startswith("linux"):
        with suppress(OSError, AttributeError):  # else not armed
            import ctypes
            import signal

            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(1, int(signal.SIGKILL)) == 0  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)
    if not armed:
        import threading

        def watch_parent() -> None:
            """Poll the parent id; a new one (the parent died, the worker was adopted): exit."""
            while os.getppid() == parent:
                time.sleep(PARENT_POLL_S)
            os._exit(1)

        threading.Thread(target=watch_parent, daemon=True, name="mbkkm-parent-watch").start()


def _init_worker(
    env: dict, options: dict, blas_threads: int | None, parent: int, running_dir: str | None = None
) -> None:
    global _WORKER, _RUNNING_DIR
    _die_with_parent(parent)
    _RUNNING_DIR = running_dir
    from threadpoolctl import threadpool_limits

    threadpool_limits(blas_threads)  # None: unchanged
    _WORKER = _Executor(env, **options)


def _worker_run(run: RunSpec) -> dict[str, Any]:
    """A run's row in a worker process, with the worker's BLAS threads."""
    assert _WORKER is not None, "worker not initialised"
    if _RUNNING_DIR is not None:  # so that the grid knows which run a dead worker held
        with suppress(OSError):
            Path(_RUNNING_DIR, str(os.getpid())).write_text(run.run_id)
    row = _WORKER(run)
    row["blas_threads"] = effective_n_threads()  # BLAS threads of this process
    return row


def _pool(jobs: int, initargs: tuple):
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # spawn: each worker is a fresh child of this process (no inherited threads or
    # locks, and the parent-death signal reaches it; a forkserver's children would
    # keep the server, and so themselves, alive).
    return ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_init_worker,
        initargs=initargs,
    )


def _check_positive_int(value, name) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}.")


def run_grid(
    grid: Grid | Iterable[RunSpec],
    out: str | os.PathLike,
    *,
    data_home=None,
    download: bool = False,
    budget_seconds: float | None = None,
    memory_budget: int | None = -1,
    progress: bool = True,
    jobs: int = 1,
    blas_threads: int | None = None,
    kernel_cache: str | os.PathLike | None = None,
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
        found, its runs are recorded as ``error`` (run again by a re-run, once
        the dataset is in place).
    budget_seconds : float, optional
        Stop starting runs once this much wall time has passed (runs in
        progress finish and are recorded).
    memory_budget : int or None, default=-1
        Bytes the kernel matrices may take, shared by the ``jobs`` processes
        (each gets ``memory_budget / jobs``); -1: :func:`default_memory_budget`;
        None: no limit.
    progress : bool, default=True
        Report the progress on stderr: a tqdm bar on a terminal, else a line every
        few seconds with the time left (``MBKKM_PROGRESS_INTERVAL`` sets it).
    jobs : int, default=1
        Runs side by side in this many worker processes (1: in this process).
        Each worker keeps its last dataset and kernel matrix; this process
        writes every row, as each run finishes. A worker dies with this process.
    blas_threads : int, optional
        BLAS threads per process (threadpoolctl). Default: 1 when ``jobs > 1``
        (``jobs`` processes share the cores), else unchanged.
    kernel_cache : path, optional
        A folder where the kernel matrices the runner builds (graph kernels,
        full batch) are saved once and memory-mapped by every process and every
        resume (:mod:`mbkkm.experiments._kernel_cache`): side-by-side workers
        then share one copy, and a resumed grid does not build it again.
        Default: each process builds and holds its own.

    Returns
    -------
    summary : RunSummary
    """
    runs = expand(grid) if isinstance(grid, Grid) else list(grid)
    out = Path(out)
    if budget_seconds is not None and not budget_seconds > 0:
        raise ValueError(f"budget_seconds must be positive, got {budget_seconds!r}.")
    _check_positive_int(jobs, "jobs")
    if blas_threads is not None:
        _check_positive_int(blas_threads, "blas_threads")
    elif jobs > 1:
        blas_threads = 1  # jobs processes share the cores
    if memory_budget == -1:
        memory_budget = default_memory_budget()
    if out.is_dir():
        raise ValueError(
            f"out={str(out)!r} is a folder; run_grid writes one CSV table: give its path "
            f"(as {str(out / 'results.csv')!r}; the command line's --out is a folder)"
        )
    summary = RunSummary(path=out, total=len(runs))

    # Open (and repair) the table before reading which runs it holds.
    with closing(_Writer(out)) as writer:
        summary.removed_bytes = writer.removed_bytes
        done = done_run_ids(out)
        todo = [r for r in runs if r.run_id not in done]
        summary.already_done = len(runs) - len(todo)
        jobs = max(1, min(jobs, len(todo)))
        env = {**environment(), "jobs": jobs}
        # progress on stderr: a tqdm bar on a terminal, else a line every few seconds
        # (a pipe, a log file), as the fit's and the labelling's
        bar = Progress(len(todo), "experiment", unit="runs") if progress else None
        start = time.perf_counter()

        def over_budget() -> bool:
            return budget_seconds is not None and time.perf_counter() - start >= budget_seconds

        def record(row: dict) -> None:
            """Write a finished run's row, count it in the summary, move the bar."""
            writer.write(row)
            status = row["status"]
            setattr(summary, status, getattr(summary, status) + 1)
            if status == "error" and row["message"] not in summary.errors:
                summary.errors.append(row["message"])
            if bar is not None:
                bar.update(
                    1,
                    note=f"last: {row['dataset']} {row['algorithm']} {row['kernel']} "
                    f"b={row['batch_size']} tau={row['tau']} seed={row['seed']}",
                )

        options = dict(
            data_home=data_home,
            download=download,
            memory_budget=memory_budget if memory_budget is None else memory_budget // jobs,
            kernel_cache=kernel_cache,
        )
        with bar or nullcontext():
            if jobs == 1:
                executor = _Executor(env, **options)
                summary.not_run = _run_serial(todo, executor, blas_threads, record, over_budget)
            else:
                initargs = (env, options, blas_threads, os.getpid())
                summary.not_run = _run_parallel(todo, jobs, initargs, record, over_budget)
    summary.stopped_by_budget = summary.not_run > 0
    summary.seconds = time.perf_counter() - start
    return summary


def _run_serial(todo, executor, blas_threads, record, over_budget) -> int:
    """Runs one after the other in this process (with ``blas_threads`` BLAS threads
    when given), until done or over the time budget; returns the runs not run."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(blas_threads):  # None: unchanged
        for i, run in enumerate(todo):
            if over_budget():
                return len(todo) - i
            row = executor(run)
            row["blas_threads"] = effective_n_threads()  # BLAS threads of this process
            record(row)
    return 0


def _run_parallel(todo, jobs, initargs, record, over_budget) -> int:
    """Runs in ``jobs`` worker processes, at most ``jobs`` at a time and in the
    grid's order (so a worker mostly meets the dataset and kernel it holds);
    rows recorded as they come. Returns the runs not run (over the time budget).

    A worker that dies (killed, out of memory) breaks the pool: every run in
    flight is queued again on a new pool. Each worker names the run it starts in
    a file of its process id, so the run of the worker that died by itself (not
    one terminated with the pool) is known: only that run counts the death; one
    that meets it twice is recorded as ``error`` (retried by the next resume).
    Where that run is not known (a worker died before it named one, or was ended
    by SIGTERM from outside), every run in flight counts it, so the grid always
    ends. On an exception here (Ctrl-C) the workers are stopped at once.
    """
    import shutil
    import tempfile
    from concurrent.futures import FIRST_COMPLETED, wait
    from concurrent.futures.process import BrokenProcessPool

    queue = list(reversed(todo))
    running_dir = tempfile.mkdtemp(prefix="mbkkm-workers-")
    initargs = (*initargs, running_dir)
    pool = _pool(jobs, initargs)
    pending: dict[Any, RunSpec] = {}
    died: set[str] = set()  # the runs whose worker died while running them, once
    try:
        while queue or pending:
            while queue and len(pending) < jobs and not over_budget():
                run = queue.pop()
                pending[pool.submit(_worker_run, run)] = run
            if not pending:  # the budget stopped the grid
                break
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            in_flight: list[RunSpec] = []  # the runs the broken pool held
            for fut in finished:
                run = pending.pop(fut)
                try:
                    row = fut.result()
                except BrokenProcessPool:
                    in_flight.append(run)
                    continue
                record(row)
            if not in_flight:
                continue
            in_flight += pending.values()
            pending.clear()
            processes = list((getattr(pool, "_processes", None) or {}).values())
            _stop(pool)  # the others are terminated: exit code -SIGTERM
            culprits = _runs_of_dead_workers(processes, running_dir)
            suspects = [r for r in in_flight if r.run_id in culprits] or in_flight
            for run in in_flight:
                if run in suspects and run.run_id in died:
                    message = (
                        "the worker process running this run died twice (killed, or out of memory)"
                    )
                    record(_finish(_base_row(run, initargs[0]), "error", message))
                    continue
                if run in suspects:
                    died.add(run.run_id)
                queue.append(run)
            with suppress(OSError):  # the new pool's workers name their runs afresh
                for f in os.listdir(running_dir):
                    os.unlink(os.path.join(running_dir, f))
            pool = _pool(jobs, initargs)
    except BaseException:
        _stop(pool)
        raise
    finally:
        shutil.rmtree(running_dir, ignore_errors=True)
    pool.shutdown(wait=True)
    return len(queue)


def _runs_of_dead_workers(processes, running_dir: str) -> set[str]:
    """The run ids held by the ``processes`` (stopped) that died by themselves: by
    another end than the SIGTERM with which a broken pool and :func:`_stop` end the
    others (the out-of-memory killer's SIGKILL, a crash, an exit)."""
    import signal

    culprits = set()
    for p in processes:
        if p.exitcode in (None, 0, -signal.SIGTERM):
            continue
        with suppress(OSError):
            culprits.add(Path(running_dir, str(p.pid)).read_text())
    return culprits


def _stop(pool) -> None:
    """Shut a process pool down without waiting for the runs in progress: its
    worker processes are terminated."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(timeout=10)


def read_results(paths) -> Any:
    """Read one or more result tables into a pandas DataFrame (the newest row
    of each run id kept).

    Parameters
    ----------
    paths : path or list of paths
        CSV files written by :func:`run_grid`, or folders holding them.
    """
    pd = require("pandas", "cli", "read_results")

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(f for f in p.glob("*.csv") if f.is_file()))
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
            raise ValueError(
                f"cannot read result table {f}: {one_line(exc, with_type=True)}"
            ) from exc
        missing = {"run_id", "dataset", "algorithm", "status"} - set(df.columns)
        if missing:
            raise ValueError(f"{f} is not a result table of mbkkm (missing {sorted(missing)}).")
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    if "timestamp" in df.columns:
        # The same run id in two tables (an earlier run of a grid kept in another
        # folder) must resolve to the newer row whatever order the paths come in;
        # rows without a time count as oldest, ties keep the table order.
        when = pd.to_datetime(df["timestamp"], utc=True, errors="coerce", format="ISO8601")
        df = df.loc[when.sort_values(kind="stable", na_position="first").index]
    return df.drop_duplicates("run_id", keep="last").reset_index(drop=True)
