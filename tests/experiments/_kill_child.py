"""The child process of the kill tests: runs a grid until the test kills it.

A plain module beside the tests (imported as ``_kill_child``), started through
multiprocessing's forkserver with mbkkm preloaded: each child is a fork of that
server, started in milliseconds, and killed with SIGKILL.
"""

from __future__ import annotations

import os
import time

from mbkkm.experiments import _runner


def _write_in_pieces(fd: int, data: bytes) -> None:
    # A few bytes per write() with a pause between them: the row is on the disk
    # in pieces for most of the child's life, so a kill often cuts one short
    # (as a kill inside a long write, or a full disk, would).
    for i in range(0, len(data), 7):
        os.write(fd, data[i : i + 7])
        time.sleep(0.0005)


def run_grid(runs, out, slow_writes: bool, started) -> None:
    """Run ``runs`` into the table ``out``; ``slow_writes``: rows written in pieces;
    ``started`` (an Event) is set when the grid starts, so that the delay before
    the kill does not depend on how long the child took to start."""
    if slow_writes:
        _runner._write_all = _write_in_pieces
    started.set()
    _runner.run_grid(runs, out, progress=False)


def _alive_pid(path):
    """The process id written in ``path`` when that process is alive, else None."""
    try:
        with open(path) as f:
            pid = int(f.read())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def _name(path):
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)


class _SeedZeroDies:
    """A worker's executor whose run of seed 0 kills its process (SIGKILL, as the
    out-of-memory killer) once the run of seed 1 runs beside it in another worker;
    the run of seed 1 lasts until then (at most 10 s). The two name their processes
    in the folder ``MBKKM_TEST_MARKERS``."""

    def __init__(self, executor):
        self.executor = executor

    def __call__(self, run):
        import signal

        markers = os.environ["MBKKM_TEST_MARKERS"]
        seed0, seed1 = os.path.join(markers, "seed0"), os.path.join(markers, "seed1")
        if run.seed == 0:
            _name(seed0)
            deadline = time.monotonic() + 20
            while _alive_pid(seed1) is None and time.monotonic() < deadline:
                time.sleep(0.02)
            os.kill(os.getpid(), signal.SIGKILL)
        if run.seed == 1:
            _name(seed1)
            deadline, seen = time.monotonic() + 10, None
            while time.monotonic() < deadline:  # in flight until seed 0's worker dies
                seen = _alive_pid(seed0) or seen
                if seen is not None and _alive_pid(seed0) != seen:
                    break
                time.sleep(0.02)
        return self.executor(run)


def worker_run_seed0_dies(run):
    """The runner's ``_worker_run`` with a :class:`_SeedZeroDies` executor: the
    worker's death comes inside the run, as a real one would."""
    if not isinstance(_runner._WORKER, _SeedZeroDies):
        _runner._WORKER = _SeedZeroDies(_runner._WORKER)
    return _runner._worker_run(run)
