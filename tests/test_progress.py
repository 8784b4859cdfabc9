"""Progress lines with a time left, for output that is not a terminal (mbkkm._progress)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import mbkkm
from mbkkm import KernelKMeans, MiniBatchKernelKMeans, MiniBatchKMeans
from mbkkm._progress import DEFAULT_INTERVAL, Progress, default_interval, format_seconds


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


def test_updates_from_threads_are_all_counted():
    clock, out = Clock(), io.StringIO()
    progress = Progress(8 * 1000, "labelling", stream=out, interval=0.0, clock=clock)

    def part():
        for _ in range(1000):
            clock.now += 0.001
            progress.update(1)

    threads = [threading.Thread(target=part) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    progress.close()
    assert progress.done == 8000
    lines = out.getvalue().splitlines()
    assert all(LINE.fullmatch(line) for line in lines[:-1]), lines[:3]  # none interleaved
    assert lines[-1].startswith("labelling: 8,000 rows in ")


def test_the_interval_from_the_environment(monkeypatch):
    monkeypatch.setenv("MBKKM_PROGRESS_INTERVAL", "0.25")
    assert default_interval() == 0.25
    assert Progress(1, "x", stream=io.StringIO()).interval == 0.25
    monkeypatch.setenv("MBKKM_PROGRESS_INTERVAL", "soon")
    assert default_interval() == DEFAULT_INTERVAL
    monkeypatch.delenv("MBKKM_PROGRESS_INTERVAL")
    assert default_interval() == DEFAULT_INTERVAL


def test_the_first_line_at_once_and_the_estimate_from_a_resumed_start():
    clock, out = Clock(), io.StringIO()
    progress = Progress(
        100, "fit", unit="iterations", stream=out, interval=50, clock=clock, first=True, initial=50
    )
    clock.now += 1.0
    progress.update(10)  # the first line at once, without an estimate from one update
    progress.update(10)  # within the interval: no line
    clock.now += 59.0
    progress.update(10)  # 30 in 60 s since the resume: 20 left take 40 s
    progress.close("batch objective 0.5")
    progress.close()  # once only
    first, second, last = out.getvalue().splitlines()
    assert first == "fit: 60 / 100 iterations (60.0 %), 1.0 s"
    assert second == "fit: 80 / 100 iterations (80.0 %), 1 min 00 s, about 40.0 s left"
    assert last == "fit: 80 iterations in 1 min 00 s (0.5 iterations/s), batch objective 0.5"


def test_nothing_but_the_bar_closing_after_an_error():
    out = io.StringIO()
    with pytest.raises(RuntimeError), Progress(10, "labelling", stream=out, interval=0) as p:
        p.update(1)
        raise RuntimeError
    assert "rows/s" not in out.getvalue()


LINE = re.compile(
    r"(fit|labelling): [\d,]+ / [\d,]+ (rows|iterations) \([\d.]+ %\), "
    r"(?:[\d.]+ s|\d+ min \d+ s|\d+ h \d+ min), about .* left(, .*)?"
)

# ----------------------------------------------------------- estimators, verbose


@pytest.fixture
def X():
    rng = np.random.RandomState(0)
    centers = rng.uniform(-10, 10, size=(4, 3))
    return (centers[rng.randint(4, size=6000)] + rng.randn(6000, 3)).astype(np.float64)


ESTIMATORS = {
    "kernel": lambda **kw: MiniBatchKernelKMeans(
        4, gamma=0.1, batch_size=256, tau=40, max_iter=60, random_state=0, **kw
    ),
    "kernel-tol": lambda **kw: MiniBatchKernelKMeans(
        4, gamma=0.1, batch_size=256, tau=40, max_iter=60, tol=1e-2, random_state=0, **kw
    ),
    "kmeans": lambda **kw: MiniBatchKMeans(4, batch_size=256, max_iter=60, random_state=0, **kw),
}


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_verbose_fit_reports_its_progress_and_not_a_different_model(name, X, capsys, monkeypatch):
    monkeypatch.setenv("MBKKM_PROGRESS_INTERVAL", "0")  # a line at every read-back
    quiet = ESTIMATORS[name]().fit(X)
    assert capsys.readouterr().out == ""  # verbose=0: nothing
    loud = ESTIMATORS[name](verbose=1).fit(X)
    out = capsys.readouterr().out.splitlines()
    fit = [line for line in out if line.startswith("fit: ")]
    # the first line at once, its time left from the lines after it
    assert re.fullmatch(r"fit: 1 / 60 iterations \(1.7 %\), [\d.]+ s, batch objective .*", fit[0])
    assert len(fit) > 2
    assert all(re.search(r"about .* left, batch objective [\d.e+-]+", s) for s in fit[1:-1])
    assert re.fullmatch(
        rf"fit: {loud.n_iter_} iterations in .* iterations/s\), batch objective .*", fit[-1]
    )
    if loud.n_iter_ < 60:
        assert any(line.startswith(f"Converged at iteration {loud.n_iter_}") for line in out)
    labelling = [line for line in out if line.startswith("labelling: ")]
    assert labelling and re.match(r"labelling: 6,000 rows in .* rows/s\)$", labelling[-1])
    # the same model, verbose or not
    for attr in ("labels_", "inertia_", "n_iter_", "batch_objective_"):
        np.testing.assert_array_equal(getattr(loud, attr), getattr(quiet, attr))
    if name == "kmeans":
        np.testing.assert_array_equal(loud.cluster_centers_, quiet.cluster_centers_)
    else:
        np.testing.assert_array_equal(loud.support_vectors_, quiet.support_vectors_)
        np.testing.assert_array_equal(loud.dual_coef_, quiet.dual_coef_)
    # predict and transform report their labelling pass; the results are the same
    np.testing.assert_array_equal(loud.predict(X), quiet.predict(X))
    np.testing.assert_array_equal(loud.transform(X), quiet.transform(X))
    out = capsys.readouterr().out
    assert out.count("labelling: 6,000 rows in ") == 2


@pytest.mark.parametrize("name", ["kernel", "kmeans"])
def test_partial_fit_prints_no_line_per_call(name, X, capsys, monkeypatch):
    # scikit-learn's partial_fit prints nothing per call: a stream of thousands of
    # batches with verbose=1 must not print a labelling line for each; the batch's
    # labels_ are computed as before, and predict still reports its pass.
    monkeypatch.setenv("MBKKM_PROGRESS_INTERVAL", "0")
    loud, quiet = ESTIMATORS[name](verbose=1), ESTIMATORS[name]()
    for est in (loud, quiet):
        for batch in np.array_split(X, 6):
            est.partial_fit(batch)
    out = capsys.readouterr().out  # (the first call prints the memory plan, once)
    assert "labelling:" not in out and "fit:" not in out
    np.testing.assert_array_equal(loud.labels_, quiet.labels_)
    assert loud.inertia_ == quiet.inertia_
    loud.predict(X)
    assert capsys.readouterr().out.count("labelling: 6,000 rows in ") == 1


def test_a_labelling_pass_in_threads_counts_every_row(X, capsys, monkeypatch):
    monkeypatch.setenv("MBKKM_PROGRESS_INTERVAL", "0")
    est = ESTIMATORS["kernel"]().fit(X)
    est.verbose = 1
    big = np.repeat(X, 4, axis=0)  # 24,000 rows: several parts and tiles
    est.predict(big)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 2 and lines[-1].startswith("labelling: 24,000 rows in ")
    done = [int(line.split()[1].replace(",", "")) for line in lines[:-1]]
    assert done == sorted(done) and all(0 < d < 24000 for d in done)


def test_one_labelling_report_per_pass_and_none_for_the_inits(X, capsys):
    # MiniBatchKMeans scores its n_init candidates on a subsample: not a pass to report
    MiniBatchKMeans(4, n_init=3, batch_size=256, max_iter=5, random_state=0, verbose=1).fit(X)
    out = capsys.readouterr().out
    assert out.count("Init inertia") == 3 and out.count("labelling: ") == 1
    # KernelKMeans labels new points through the same pass
    est = KernelKMeans(3, gamma=0.1, random_state=0).fit(X[:500])
    est.verbose = 1
    est.predict(X)
    assert capsys.readouterr().out.startswith("labelling: 6,000 rows in ")


# -------------------------------------------------------------- the command line


def run_cli(*args, interval="0"):
    env = {
        **os.environ,
        "MBKKM_PROGRESS_INTERVAL": interval,
        "PYTHONPATH": os.pathsep.join(
            [str(Path(mbkkm.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]
        ),
    }
    return subprocess.run(
        [sys.executable, "-m", "mbkkm", *args],
        capture_output=True,  # stderr a pipe, as in a batch job's log
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.fixture
def data_npy(tmp_path):
    pytest.importorskip("click")
    rng = np.random.RandomState(0)
    X = (rng.randint(3, size=140_000)[:, None] * 5 + rng.randn(140_000, 2)).astype(np.float32)
    path = tmp_path / "X.npy"
    np.save(path, X)
    return path


def test_a_piped_fit_logs_its_progress_with_the_time_left(data_npy, tmp_path):
    labels = tmp_path / "labels.npy"
    fit = [
        "fit",
        str(data_npy),
        "-k",
        "3",
        "--gamma",
        "0.5",
        "--max-iter",
        "20",
        "--batch-size",
        "256",
    ]
    r = run_cli(*fit, "--labels-out", str(labels))
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    fit_lines = [line for line in lines if line.startswith("fit: ")]
    assert fit_lines[0].startswith("fit: 1 / 20 iterations") and "left" not in fit_lines[0]
    assert any(re.search(r"iterations \(.* %\), .*, about .* left, batch", s) for s in fit_lines)
    assert re.fullmatch(
        r"fit: 20 iterations in .* iterations/s\), batch objective .*", fit_lines[-1]
    )
    labelling = [line for line in lines if line.startswith("labelling: ")]
    assert any(re.search(r"rows \(.* %\), .*, about .* left$", s) for s in labelling)
    assert re.fullmatch(r"labelling: 140,000 rows in .* rows/s\)", labelling[-1])
    assert "cluster sizes" in r.stdout and "left" not in r.stdout  # the summary only


def test_the_progress_stays_off_stdout_and_quiet_has_none(data_npy, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from mbkkm.cli import main

    monkeypatch.setenv("MBKKM_PROGRESS_INTERVAL", "0")
    runner = CliRunner()  # its stderr is not a terminal either: lines
    fit = ["fit", str(data_npy), "-k", "3", "--gamma", "0.5", "--max-iter", "5"]
    r = runner.invoke(main, [*fit, "--batch-size", "256", "--labels-out", "-"])
    assert r.exit_code == 0, r.output
    # the labels go to stdout, alone; the progress and the summary to stderr
    assert len(r.stdout.split()) == 140_000 and set(r.stdout.split()) <= {"0", "1", "2"}
    assert "left" in r.stderr and "labelling: 140,000 rows in" in r.stderr
    r = runner.invoke(main, [*fit, "--labels-out", str(tmp_path / "l.npy"), "-q"])
    assert r.exit_code == 0 and r.stdout == "" and r.stderr == ""


# ---------------------------------------------------- before the first iteration


class Lines(io.StringIO):
    """A stream that wakes a test up at its n-th line."""

    def __init__(self, n, tty=False):
        super().__init__()
        self.n, self.tty, self.enough = n, tty, threading.Event()

    def write(self, text):
        out = super().write(text)
        if self.getvalue().count("\n") >= self.n:
            self.enough.set()
        return out

    def isatty(self):
        return self.tty


@pytest.fixture
def fast_waiting(monkeypatch):
    import mbkkm._progress as progress

    monkeypatch.setattr(progress, "WAITING_MIN_INTERVAL", 0.01)
    monkeypatch.setenv("MBKKM_PROGRESS_INTERVAL", "0")


def test_waiting_writes_the_time_so_far_until_stopped(fast_waiting):
    from mbkkm._progress import Waiting

    out, clock = Lines(3), Clock()

    def tick():
        clock.now += 5.0
        return clock.now

    waiting = Waiting("preparing the fit", out, clock=tick)
    assert out.enough.wait(10)
    waiting.stop()
    lines = out.getvalue().splitlines()
    assert lines[:3] == [f"preparing the fit: {s:.1f} s" for s in (5.0, 10.0, 15.0)]
    stopped = out.getvalue()
    waiting._thread.join(10)
    assert out.getvalue() == stopped  # nothing after stop()
    assert Waiting("x", io.StringIO(), interval=0.0).interval == 0.01


def test_reporting_waits_until_the_first_pass_starts(fast_waiting):
    from mbkkm._progress import progress_for, reporting

    out, started = Lines(2), []
    with reporting(out, on_start=lambda: started.append(True), waiting="preparing"):
        assert out.enough.wait(10)
        progress = progress_for(0, 10, "fit", unit="iterations", follow=True)
        after = out.getvalue()
        progress.update(10)
        progress.close()
    assert started == [True]
    assert all(re.fullmatch(r"preparing: [\d.]+ s", s) for s in after.splitlines())
    assert out.getvalue()[len(after) :].splitlines()[-1].startswith("fit: 10 iterations in ")
    assert "preparing" not in out.getvalue()[len(after) :]


def test_reporting_on_a_terminal_or_without_waiting_writes_no_waiting_line(fast_waiting):
    from mbkkm._progress import reporting

    for stream, waiting in ((Lines(1, tty=True), "preparing"), (Lines(1), None)):
        with reporting(stream, bar=False, waiting=waiting):
            assert not stream.enough.wait(0.2)
        assert stream.getvalue() == ""
