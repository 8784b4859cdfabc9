"""Progress lines with a time left, for output that is not a terminal (mbkkm._progress)."""

from __future__ import annotations

import io
import re

import pytest

from mbkkm._progress import Progress, format_seconds


class Clock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.04, "0.0 s"),
        (59.94, "59.9 s"),
        (61, "1 min 01 s"),
        (586, "9 min 46 s"),
        (3 * 3600 + 300, "3 h 05 min"),
    ],
)
def test_format_seconds(seconds, text):
    assert format_seconds(seconds) == text


def test_a_line_every_interval_with_the_time_left():
    clock, out = Clock(), io.StringIO()
    progress = Progress(1000, "labelling", stream=out, interval=5.0, clock=clock)
    for _ in range(10):  # 100 rows every 2 s: a line at 6 s, 12 s, 18 s (then done)
        clock.now += 2.0
        progress.update(100)
    progress.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 4
    for line, (rows, elapsed) in zip(lines, [(300, 6.0), (600, 12.0), (900, 18.0)]):
        left = elapsed / rows * (1000 - rows)  # the plain estimate: the rate so far
        assert line.startswith(f"labelling: {rows:,} / 1,000 rows ({rows / 10:.1f} %)")
        assert line.endswith(f"about {format_seconds(left)} left")
    assert lines[-1] == "labelling: 1,000 rows in 20.0 s (50 rows/s)"


def test_a_note_ends_the_line():
    clock, out = Clock(), io.StringIO()
    progress = Progress(10, "fit", unit="iterations", stream=out, interval=1.0, clock=clock)
    clock.now += 2.0
    progress.update(1, note="objective 0.25")
    assert out.getvalue().startswith("fit: 1 / 10 iterations (10.0 %)")
    assert out.getvalue().rstrip().endswith(", objective 0.25")


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_bar_on_a_terminal_and_no_lines():
    pytest.importorskip("tqdm")
    clock, out = Clock(), Terminal()
    progress = Progress(10, "fit", unit="iterations", stream=out, interval=0.0, clock=clock)
    assert progress._bar is not None
    clock.now += 10.0
    progress.update(5)
    progress.close()
    assert not re.search(r"about .* left", out.getvalue())


def test_lines_on_a_terminal_without_the_bar():
    clock, out = Clock(), Terminal()
    progress = Progress(10, "fit", stream=out, interval=1.0, bar=False, clock=clock)
    clock.now += 2.0
    progress.update(5)
    assert "about 2.0 s left" in out.getvalue()
