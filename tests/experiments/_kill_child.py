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
