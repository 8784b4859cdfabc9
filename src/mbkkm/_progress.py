"""How far a long pass is, and when it will end: a bar on a terminal, else a line every few seconds.

A fit of 10^8 points runs for minutes and its labelling pass for longer; a user
who sends the output to a file or a pipe (a batch job, ``nohup``, a notebook's
captured stdout) sees nothing from a terminal progress bar. :class:`Progress`
writes, when its stream is not a terminal, one line every ``interval`` seconds:

    labelling: 12,400,000 / 100,000,000 rows (12.4 %), 1 min 23 s, about 9 min 46 s left

and one line at the end with the rate. On a terminal it draws a tqdm bar instead
(when tqdm is installed: the ``cli`` extra), which also shows the time left.
The estimate is the elapsed time scaled by the work left: the passes it reports
(iterations of the same shapes, chunks of rows of the same size) run at a
steady rate.

Who reports: an estimator with ``verbose >= 1`` writes lines on stdout (as
scikit-learn's verbose output does); inside :func:`reporting` (the ``mbkkm``
command line) its fit's iterations go to the stream given there, a bar on a
terminal. :func:`progress_for` decides, where a pass starts.

The interval is ``MBKKM_PROGRESS_INTERVAL`` seconds (an environment variable,
read when a pass starts), 5 by default.
"""

from __future__ import annotations

import contextvars
import os
import sys
import threading
import time
from contextlib import AbstractContextManager, contextmanager

#: Seconds between two progress lines when MBKKM_PROGRESS_INTERVAL is not set.
DEFAULT_INTERVAL = 5.0
#: The shortest interval of a :class:`Waiting`'s lines (it has no update to wait for).
WAITING_MIN_INTERVAL = 1.0


def default_interval() -> float:
    """``MBKKM_PROGRESS_INTERVAL`` (seconds, >= 0), else :data:`DEFAULT_INTERVAL`."""
    try:
        return max(0.0, float(os.environ.get("MBKKM_PROGRESS_INTERVAL", "")))
    except ValueError:  # unset, empty or not a number
        return DEFAULT_INTERVAL


def format_seconds(seconds: float) -> str:
    """``'3 h 05 min'``, ``'9 min 46 s'``, ``'12.3 s'``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _format_amount(n: int, unit: str) -> str:
    """``'12,400,000 rows'``; bytes in MB (``'1,234.5 MB'``)."""
    if unit == "bytes":
        return f"{n / 1e6:,.1f} MB"
    return f"{n:,} {unit}"


class Progress(AbstractContextManager):
    """Report the progress of a pass of ``total`` units on ``stream``.

    Parameters
    ----------
    total : int
        Units of work of the whole pass (rows, iterations).
    desc : str
        What the pass is (``"labelling"``, ``"fit"``), the start of every line.
    unit : str, default="rows"
        The units' name, plural (``"bytes"`` are written in MB).
    stream : file-like, default=sys.stderr
        Where to write.
    interval : float, optional
        Seconds between two lines (when ``stream`` is not a terminal); default
        :func:`default_interval`.
    bar : bool, default=True
        Draw a tqdm bar when ``stream`` is a terminal and tqdm is installed; else
        (or with ``bar=False``) write lines.
    clock : callable, default=time.monotonic
        The clock (tests pass their own).
    first : bool, default=False
        Write a line at the first update too (a fit's first iteration: a sign of
        life before the interval has passed). That line gives no time left: one
        iteration says little of the others (a fresh fit's first ones are cheaper
        than the rest, a resumed fit's first one dearer); the lines after it do.
    initial : int, default=0
        Units already done when the pass starts (a resumed fit); the time left is
        estimated from the units done since.

    ``update`` may be called from several threads at once (the labelling pass's
    row parts): the count and the lines are kept under a lock.

    Examples
    --------
    >>> import io
    >>> out = io.StringIO()
    >>> ticks = iter([0.0, 6.0, 6.0, 12.0])
    >>> with Progress(100, "labelling", stream=out, clock=lambda: next(ticks)) as progress:
    ...     progress.update(25)
    ...     progress.update(75)
    >>> print(out.getvalue(), end="")
    labelling: 25 / 100 rows (25.0 %), 6.0 s, about 18.0 s left
    labelling: 100 rows in 12.0 s (8.33 rows/s)
    """

    def __init__(
        self,
        total,
        desc,
        *,
        unit="rows",
        stream=None,
        interval=None,
        bar=True,
        clock=None,
        first=False,
        initial=0,
    ):
        self.total, self.desc, self.unit = int(total), desc, unit
        self.stream = sys.stderr if stream is None else stream
        self.interval = default_interval() if interval is None else interval
        self.clock = time.monotonic if clock is None else clock
        self.done = self.initial = int(initial)
        self.start = self.clock()
        self.last = -float("inf") if first else self.start
        self.closed = False
        self._lock = threading.Lock()
        self._bar = self._tqdm() if bar and _is_terminal(self.stream) else None

    def _tqdm(self):
        try:
            from tqdm import tqdm
        except ImportError:
            return None
        byte = self.unit == "bytes"
        return tqdm(
            total=self.total,
            initial=self.initial,
            unit="B" if byte else self.unit.rstrip("s") or self.unit,
            unit_scale=True,
            unit_divisor=1024 if byte else 1000,
            desc=self.desc,
            delay=1.0,
            leave=False,
            file=self.stream,
            dynamic_ncols=True,
        )

    def update(self, n=1, note=""):
        """Count ``n`` more units done; ``note`` (an objective, say) ends the next line."""
        with self._lock:
            self.done += n
            if self._bar is not None:
                if note:
                    self._bar.set_postfix_str(note, refresh=False)
                self._bar.update(n)
                return
            now = self.clock()
            if now - self.last >= self.interval and self.done < self.total:
                first_line = self.last == -float("inf")
                self.last = now
                self._write(
                    self.status(now, estimate=not first_line) + (f", {note}" if note else "")
                )

    def status(self, now, estimate=True):
        """``'12,400,000 / 100,000,000 rows (12.4 %), 1 min 23 s, about 9 min 46 s left'``
        with ``desc`` in front, at time ``now`` (without the time left: ``estimate=False``)."""
        elapsed = now - self.start
        line = (
            f"{self.desc}: {_format_amount(self.done, self.unit).rsplit(' ', 1)[0]} / "
            f"{_format_amount(self.total, self.unit)} "
            f"({100 * self.done / max(self.total, 1):.1f} %), {format_seconds(elapsed)}"
        )
        if not estimate:
            return line
        left = elapsed * (self.total - self.done) / max(self.done - self.initial, 1)
        return f"{line}, about {format_seconds(left)} left"

    def write(self, line):
        """One line of its own (a convergence message), below a bar if one is drawn."""
        with self._lock:
            if self._bar is not None:
                self._bar.write(line, file=self.stream)
            else:
                self._write(line)

    def close(self, note=""):
        """The last line: units done, time and rate, then ``note`` (nothing after a bar:
        it clears itself). Once only: a second call does nothing."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            if self._bar is not None:
                self._bar.close()
                return
            elapsed = self.clock() - self.start
            scale, per = (1e6, "MB") if self.unit == "bytes" else (1, self.unit)
            rate = (self.done - self.initial) / elapsed / scale if elapsed > 0 else float("inf")
            rate_text = f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"
            self._write(
                f"{self.desc}: {_format_amount(self.done, self.unit)} in "
                f"{format_seconds(elapsed)} ({rate_text} {per}/s)" + (f", {note}" if note else "")
            )

    def _write(self, line):
        self.stream.write(line + "\n")
        self.stream.flush()

    def __exit__(self, exc_type, *exc):
        if exc_type is None or self._bar is not None:  # an error: no summary line
            self.close()


#: Inside :func:`reporting`: its (stream, bar, started), where ``started()`` is called as
#: a pass that follows it starts.
_REPORTING: contextvars.ContextVar[tuple | None] = contextvars.ContextVar(
    "mbkkm_progress_reporting", default=None
)


class Waiting:
    """While work that reports no progress of its own runs, a line every ``interval``
    seconds (at least :data:`WAITING_MIN_INTERVAL`) on ``stream`` from a thread of
    its own: ``desc``, the time so far (``'preparing the fit: 10.0 s'``), until
    :meth:`stop`.

    The work before a fit's first iteration (the checks of X, the width selection,
    the initialisation) reads all the rows a few times: tens of seconds for 10^8
    rows on disk, with nothing else to show in a log.
    """

    def __init__(self, desc, stream=None, *, interval=None, clock=None):
        self.desc = desc
        self.stream = sys.stderr if stream is None else stream
        interval = default_interval() if interval is None else interval
        self.interval = max(WAITING_MIN_INTERVAL, interval)
        self.clock = time.monotonic if clock is None else clock
        self.start = self.clock()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="mbkkm-waiting", daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stopped.wait(self.interval):
            with self._lock:
                if not self._stopped.is_set():
                    self.stream.write(f"{self.desc}: {format_seconds(self.clock() - self.start)}\n")
                    self.stream.flush()

    def stop(self):
        """No line after this returns (once or more)."""
        with self._lock:
            self._stopped.set()


@contextmanager
def reporting(stream=None, *, bar=True, on_start=None, waiting=None):
    """Within the block, passes that report (a fit's iterations) do so on ``stream``
    (default sys.stderr) whatever the estimator's ``verbose``: the command line's
    fit. ``on_start()`` is called where such a pass starts (the command line stops
    its spinner there). ``waiting``: what runs before that pass, reported by a
    :class:`Waiting` until it starts when ``stream`` is not a terminal (a terminal
    has the command line's spinner)."""
    waiter = None
    if waiting is not None and not _is_terminal(sys.stderr if stream is None else stream):
        waiter = Waiting(waiting, stream)

    def started():
        if waiter is not None:
            waiter.stop()
        if on_start is not None:
            on_start()

    token = _REPORTING.set((stream, bar, started))
    try:
        yield
    finally:
        if waiter is not None:
            waiter.stop()
        _REPORTING.reset(token)


def progress_for(verbose, total, desc, *, unit="rows", first=False, initial=0, follow=False):
    """The :class:`Progress` of a pass, or None where nobody asked for one.

    ``verbose``: the estimator's; lines on stdout (never a bar: the lines of a
    verbose fit, also in a terminal or a notebook). ``follow``: inside
    :func:`reporting`, report on its stream whatever ``verbose`` is (a fit's
    iterations; the command line reports its labelling itself).
    """
    context = _REPORTING.get() if follow else None
    if context is not None:
        stream, bar, started = context
        started()
    elif verbose:
        stream, bar = sys.stdout, False
    else:
        return None
    return Progress(total, desc, unit=unit, stream=stream, bar=bar, first=first, initial=initial)


def _is_terminal(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
