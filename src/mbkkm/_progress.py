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
"""

from __future__ import annotations

import sys
import time


def format_seconds(seconds: float) -> str:
    """``'3 h 05 min'``, ``'9 min 46 s'``, ``'12.3 s'``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class Progress:
    """Report the progress of a pass of ``total`` units on ``stream``.

    Parameters
    ----------
    total : int
        Units of work of the whole pass (rows, iterations).
    desc : str
        What the pass is (``"labelling"``, ``"fit"``), the start of every line.
    unit : str, default="rows"
        The units' name, plural.
    stream : file-like, default=sys.stderr
        Where to write.
    interval : float, default=5.0
        Seconds between two lines (when ``stream`` is not a terminal).
    bar : bool, default=True
        Draw a tqdm bar when ``stream`` is a terminal and tqdm is installed; else
        (or with ``bar=False``) write lines.
    clock : callable, default=time.monotonic
        The clock (tests pass their own).

    Examples
    --------
    >>> import io
    >>> out = io.StringIO()
    >>> ticks = iter([0.0, 6.0, 6.0, 12.0, 12.0])
    >>> with Progress(100, "labelling", stream=out, clock=lambda: next(ticks)) as progress:
    ...     progress.update(25)
    ...     progress.update(75)
    >>> print(out.getvalue(), end="")
    labelling: 25 / 100 rows (25.0 %), 6.0 s, about 18.0 s left
    labelling: 100 rows in 12.0 s (8 rows/s)
    """

    def __init__(
        self, total, desc, *, unit="rows", stream=None, interval=5.0, bar=True, clock=None
    ):
        self.total, self.desc, self.unit = int(total), desc, unit
        self.stream = sys.stderr if stream is None else stream
        self.interval = interval
        self.clock = time.monotonic if clock is None else clock
        self.done = 0
        self.start = self.last = self.clock()
        self._bar = self._tqdm() if bar and _is_terminal(self.stream) else None

    def _tqdm(self):
        try:
            from tqdm import tqdm
        except ImportError:
            return None
        return tqdm(
            total=self.total,
            unit=self.unit.rstrip("s") or self.unit,
            unit_scale=True,
            desc=self.desc,
            delay=1.0,
            leave=False,
            file=self.stream,
            dynamic_ncols=True,
        )

    def update(self, n=1, note=""):
        """Count ``n`` more units done; ``note`` (an objective, say) ends the next line."""
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
            return
        now = self.clock()
        if now - self.last >= self.interval and self.done < self.total:
            self.last = now
            elapsed = now - self.start
            left = elapsed * (self.total - self.done) / max(self.done, 1)
            line = (
                f"{self.desc}: {self.done:,} / {self.total:,} {self.unit} "
                f"({100 * self.done / max(self.total, 1):.1f} %), {format_seconds(elapsed)}, "
                f"about {format_seconds(left)} left"
            )
            self._write(line + (f", {note}" if note else ""))

    def close(self):
        """The last line: units done, time and rate (nothing after a bar: it clears itself)."""
        if self._bar is not None:
            self._bar.close()
            return
        elapsed = self.clock() - self.start
        rate = self.done / elapsed if elapsed > 0 else float("inf")
        self._write(
            f"{self.desc}: {self.done:,} {self.unit} in {format_seconds(elapsed)} "
            f"({rate:,.0f} {self.unit}/s)"
        )

    def _write(self, line):
        self.stream.write(line + "\n")
        self.stream.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _is_terminal(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
