"""Result tables survive SIGKILL at any moment (docs/reliability.md).

A child process runs a small grid and is killed with SIGKILL after a random
delay, again and again; half of the children write their rows a few bytes at a
time, so that many kills land inside a row. After every kill the table must
parse; the next child resumes it. At the end every run id is in the table
exactly once, with status ``ok``, and the results equal those of the same grid
run without interruption.
"""

from __future__ import annotations

import csv
import io
import multiprocessing
import os
import sys

import numpy as np
import pytest

from mbkkm.experiments import COLUMNS, Grid, expand, read_results, run_grid
from mbkkm.experiments._runner import _Writer

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and fork")

#: Columns that must equal those of an uninterrupted run (not times, not dates).
SAME = [
    "run_id",
    "dataset",
    "n_samples",
    "n_features",
    "n_clusters",
    "algorithm",
    "kernel",
    "kernel_params",
    "batch_size",
    "tau",
    "seed",
    "status",
    "ari",
    "nmi",
    "objective",
    "n_iter",
]


def _grid(seeds):
    return Grid(
        name="kill",
        datasets=("blobs",),
        algorithms=("truncated", "minibatch-classic", "full-batch"),
        kernels=("rbf",),
        batch_sizes=(32,),
        taus=(10, 20),
        seeds=tuple(range(seeds)),
        max_iter=5,
        synthetic_samples=150,
    )


def _tiny_grid(seeds):
    """Three iterations of non-kernel mini-batch k-means on 100 points, per seed."""
    return Grid(
        name="die",
        datasets=("blobs",),
        algorithms=("minibatch-classic",),
        batch_sizes=(32,),
        seeds=seeds,
        max_iter=3,
        synthetic_samples=100,
    )


def _lines(path):
    """(complete lines, trailing partial line) of a table."""
    data = path.read_bytes() if path.exists() else b""
    end = data.rfind(b"\n") + 1
    return data[:end].decode(), data[end:]


def _check_parses(path):
    """Every complete line is a row of the right width, no run id twice."""
    text, _ = _lines(path)
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if rows:
        assert rows[0] == COLUMNS
    assert all(len(r) == len(COLUMNS) for r in rows[1:])
    ids = [r[0] for r in rows[1:]]
    assert len(ids) == len(set(ids))
    if ids:
        assert len(read_results(path)) == len(ids)
    return len(ids)


@pytest.mark.slow
def test_grid_killed_at_random_moments(tmp_path):
    runs = expand(_grid(seeds=60))  # 240 runs, about 12 ms each
    ctx = multiprocessing.get_context("forkserver")
    # Python < 3.13 preloads from the server's default sys.path only: mbkkm is
    # importable there, the tests' folder is not.
    ctx.set_forkserver_preload(
        [
            "mbkkm.experiments._runner",
            "mbkkm.experiments._algorithms",
            "mbkkm.cluster",
            "sklearn.metrics",
        ]
    )
    import _kill_child

    out = tmp_path / "kill.csv"
    rng = np.random.default_rng(0)
    kills = cut_rows = 0
    attempts = 0
    # 24 kills, and more (up to 60) while fewer than 4 landed inside a row: on a
    # loaded machine the compute between writes takes longer, and fewer kills cut one.
    while kills < 24 or (cut_rows < 4 and kills < 60):
        attempts += 1
        assert attempts < 400, "the children end before they can be killed"
        slow = kills % 2 == 0
        started = ctx.Event()
        child = ctx.Process(target=_kill_child.run_grid, args=(runs, out, slow, started))
        child.start()
        assert started.wait(60)
        child.join(rng.uniform(0.02, 0.15) if not slow else rng.uniform(0.1, 0.4))
        if child.exitcode is None:
            os.kill(child.pid, 9)  # SIGKILL
            child.join()
            assert child.exitcode == -9
            kills += 1
            cut_rows += bool(_lines(out)[1])
        else:
            assert child.exitcode == 0
        done = _check_parses(out)
        assert done < len(runs), "the grid finished before the kills were done"
    assert cut_rows >= 4, f"only {cut_rows} of {kills} kills landed inside a row"

    started = ctx.Event()
    child = ctx.Process(target=_kill_child.run_grid, args=(runs, out, False, started))
    child.start()
    child.join(120)
    assert child.exitcode == 0
    assert _check_parses(out) == len(runs)
    assert _lines(out)[1] == b""

    ref = tmp_path / "ref.csv"
    run_grid(runs, ref, progress=False)
    got = read_results(out).set_index("run_id").sort_index()
    want = read_results(ref).set_index("run_id").sort_index()
    assert (got["status"] == "ok").all() and sorted(got.index) == sorted(r.run_id for r in runs)
    cols = [c for c in SAME if c != "run_id"]
    assert got[cols].astype(str).equals(want[cols].astype(str))


def test_partial_last_row_is_removed_and_its_run_run_again(tmp_path):
    """The issue's reproduction: header, a row, a row cut short, then a resume."""
    runs = expand(_grid(seeds=1))
    out = tmp_path / "r.csv"
    run_grid(runs[:1], out, progress=False)
    first = out.read_bytes()
    # The second run's row, killed after its first 40 bytes.
    run_grid(runs[1:2], tmp_path / "full.csv", progress=False)
    second = (tmp_path / "full.csv").read_bytes().split(b"\n", 1)[1]
    out.write_bytes(first + second[:40])
    s = run_grid(runs[:3], out, progress=False)
    assert s.already_done == 1 and s.ok == 2 and s.removed_bytes == 40
    assert "removed an incomplete last row (40 bytes)" in str(s)
    assert out.read_bytes().startswith(first)
    rows = list(csv.DictReader(io.StringIO(out.read_text(), newline="")))
    assert [r["run_id"] for r in rows] == [r.run_id for r in runs[:3]]
    assert all(r["status"] == "ok" for r in rows)


@pytest.mark.parametrize("cut", [0, 1, 10, "header"])
def test_cut_header_is_written_again(tmp_path, cut):
    out = tmp_path / "r.csv"
    header = (",".join(COLUMNS) + "\r\n").encode()
    out.write_bytes(header[: len(header) - 2 if cut == "header" else cut])
    runs = expand(_grid(seeds=1))[:1]
    run_grid(runs, out, progress=False)
    assert out.read_bytes().startswith(header)
    assert [r["run_id"] for r in csv.DictReader(open(out, newline=""))] == [runs[0].run_id]


def test_reading_ignores_a_row_being_written(tmp_path):
    from mbkkm.experiments._runner import done_run_ids

    runs = expand(_grid(seeds=1))[:2]
    out = tmp_path / "r.csv"
    run_grid(runs, out, progress=False)
    whole = out.read_bytes()
    out.write_bytes(whole[:-5])  # the last row without its end
    assert done_run_ids(out) == {runs[0].run_id}
    assert list(read_results(out)["run_id"]) == [runs[0].run_id]


def test_a_table_is_written_by_one_run_at_a_time(tmp_path):
    out = tmp_path / "r.csv"
    w = _Writer(out)
    try:
        with pytest.raises(ValueError, match="being written by another running experiment"):
            run_grid(expand(_grid(seeds=1)), out, progress=False)
    finally:
        w.close()
    assert run_grid(expand(_grid(seeds=1))[:1], out, progress=False).ok == 1


def test_not_a_table_is_left_alone(tmp_path):
    out = tmp_path / "notes.csv"
    out.write_bytes(b"some text without a newline")
    with pytest.raises(ValueError, match="not a result table"):
        run_grid(expand(_grid(seeds=1)), out, progress=False)
    assert out.read_bytes() == b"some text without a newline"


def test_rows_are_one_line_each(tmp_path):
    out = tmp_path / "r.csv"
    w = _Writer(out)
    w.write({"run_id": "a", "message": "two\nlines\r\nhere", "status": "error"})
    w.close()
    text = out.read_text()
    assert text.count("\n") == 2 and "two lines  here" in text


_PARALLEL_CHILD = """
import sys
from mbkkm.experiments import Grid, run_grid

if __name__ == "__main__":
    g = Grid(name="kill", datasets=("blobs",), algorithms=("truncated", "untruncated"),
             kernels=("rbf",), batch_sizes=(32,), taus=(10, 20), seeds=tuple(range(6)),
             max_iter=300, synthetic_samples=400)
    run_grid(g, sys.argv[1], progress=False, jobs=2)
"""


def _descendants(pid):
    """Process ids below ``pid`` (Linux /proc)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in os.listdir(f"/proc/{p}/task") if os.path.isdir(f"/proc/{p}/task") else []:
            try:
                with open(f"/proc/{p}/task/{task}/children") as f:
                    kids = [int(c) for c in f.read().split()]
            except OSError:
                kids = []
            out += kids
            todo += kids
    return out


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class _FakeProcess:
    def __init__(self, pid):
        self.pid, self.exitcode = pid, None

    def is_alive(self):
        return False

    def terminate(self):
        pass

    def join(self, timeout=None):
        pass


class _FakePool:
    """A process pool without processes: a run of seed 0 kills its worker
    (SIGKILL), which breaks the pool; the pool's other workers end by SIGTERM."""

    pids = iter(range(10_000, 20_000))

    def __init__(self, jobs, initargs):
        self.env, self.folder = initargs[0], initargs[-1]
        self._processes, self.runs = {}, {}

    def submit(self, fn, run):
        from concurrent.futures import Future

        future, pid = Future(), next(self.pids)
        self._processes[pid] = _FakeProcess(pid)
        self.runs[future] = (run, pid)
        if isinstance(self.folder, str):  # the runner's folder of running runs
            with open(os.path.join(self.folder, str(pid)), "w") as f:
                f.write(run.run_id)
        return future

    def finish(self):
        """Every run in flight ends, or the pool breaks if one is of seed 0."""
        from concurrent.futures.process import BrokenProcessPool

        from mbkkm.experiments._runner import _base_row, _finish

        broken = any(run.seed == 0 for run, _ in self.runs.values())
        for future, (run, pid) in self.runs.items():
            if broken:
                self._processes[pid].exitcode = -9 if run.seed == 0 else -15
                future.set_exception(BrokenProcessPool("a worker died"))
            else:
                future.set_result(_finish(_base_row(run, self.env), "ok", ""))
        self.runs = {}

    def shutdown(self, wait=True, cancel_futures=False):
        pass


def test_only_the_dead_workers_run_counts_its_death(tmp_path, monkeypatch):
    """Before, every run in flight when a worker died was marked as having met a
    dying worker, and a run beside one that kills its worker twice was recorded as
    an error with it; now only the run of the worker that died by itself (not one
    ended with the broken pool) counts it. Deterministic: a pool without processes."""
    import concurrent.futures

    from mbkkm.experiments import _runner

    pools = []

    def pool(jobs, initargs):
        pools.append(_FakePool(jobs, initargs))
        return pools[-1]

    def wait(fs, timeout=None, return_when=None):
        pools[-1].finish()
        return set(fs), set()

    monkeypatch.setattr(_runner, "_pool", pool)
    monkeypatch.setattr(concurrent.futures, "wait", wait)
    g = _tiny_grid(seeds=(0, 1, 2))
    out = tmp_path / "die.csv"
    s = run_grid(g, out, progress=False, jobs=2)
    df = read_results(out).set_index("seed")
    assert (s.ok, s.error) == (2, 1), s.errors
    assert (df.loc[[1, 2], "status"] == "ok").all()
    assert df.loc[0, "status"] == "error" and "died twice" in df.loc[0, "message"]
    assert len(pools) == 3  # broken twice by the run of seed 0


@pytest.mark.slow
def test_only_the_run_of_a_dying_worker_counts_its_death(tmp_path, monkeypatch):
    """Before, every run in flight when a worker died was marked as having met a
    dying worker: a run beside one that kills its worker twice (out of memory, say)
    was recorded as an error with it. Now only the dead worker's run counts it; the
    run beside it is run again and ends ok."""
    import concurrent.futures
    import time

    import _kill_child

    from mbkkm.experiments import _runner

    real_wait = concurrent.futures.wait

    def wait(fs, timeout=None, return_when=concurrent.futures.ALL_COMPLETED):
        """As a busy grid process: it looks at its runs a little after the first
        one ends, when a broken pool has failed every future it held."""
        real_wait(fs, timeout, return_when)
        time.sleep(0.3)
        return real_wait(fs, 0, return_when)

    monkeypatch.setattr(concurrent.futures, "wait", wait)
    monkeypatch.setenv("MBKKM_TEST_MARKERS", str(tmp_path))
    monkeypatch.setattr(_runner, "_worker_run", _kill_child.worker_run_seed0_dies)
    g = _tiny_grid(seeds=(0, 1))
    out = tmp_path / "die.csv"
    s = run_grid(g, out, progress=False, jobs=2)
    df = read_results(out).set_index("seed")
    assert (s.ok, s.error) == (1, 1), s.errors
    assert df.loc[1, "status"] == "ok"
    assert df.loc[0, "status"] == "error" and "died twice" in df.loc[0, "message"]
    assert not list(tmp_path.glob("mbkkm-workers-*"))


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux /proc")
def test_parallel_grid_killed_leaves_no_worker_and_resumes(tmp_path):
    import subprocess
    import time

    script = tmp_path / "child.py"
    script.write_text(_PARALLEL_CHILD)
    out = tmp_path / "kill.csv"
    for _ in range(2):
        child = subprocess.Popen([sys.executable, str(script), str(out)])
        deadline = time.monotonic() + 60
        workers = []
        while time.monotonic() < deadline and len(workers) < 2:
            time.sleep(0.1)
            workers = [p for p in _descendants(child.pid) if _alive(p)]
        time.sleep(0.5)
        workers = [p for p in _descendants(child.pid) if _alive(p)]
        assert child.poll() is None and len(workers) >= 2
        child.kill()
        child.wait()
        # A started worker dies with the grid at once (test_worker_dies_with_its_parent);
        # one still starting (its imports: 8 to 31 s seen on a loaded 2-core machine)
        # lives until its start-up ends, then exits before taking a run: wait for that,
        # within a bound (_die_with_parent). The resource tracker goes with the last.
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and any(map(_alive, workers)):
            time.sleep(0.05)
        assert not any(map(_alive, workers)), "a worker outlived its killed grid by 180 s"
        _check_parses(out)
    child = subprocess.run([sys.executable, str(script), str(out)], timeout=300)
    assert child.returncode == 0
    runs = expand(
        Grid(
            name="kill",
            datasets=("blobs",),
            algorithms=("truncated", "untruncated"),
            kernels=("rbf",),
            batch_sizes=(32,),
            taus=(10, 20),
            seeds=tuple(range(6)),
            max_iter=300,
            synthetic_samples=400,
        )
    )
    assert _check_parses(out) == len(runs)
    got = read_results(out).set_index("run_id").sort_index()
    assert (got["status"] == "ok").all() and sorted(got.index) == sorted(r.run_id for r in runs)
    some = runs[::7]
    ref = tmp_path / "ref.csv"
    run_grid(some, ref, progress=False)
    want = read_results(ref).set_index("run_id").sort_index()
    cols = [c for c in SAME if c != "run_id"]
    assert got.loc[want.index, cols].astype(str).equals(want[cols].astype(str))


_ORPHAN = """
import os, sys, time
from mbkkm.experiments._runner import _die_with_parent
_die_with_parent(os.getppid(), prctl=sys.argv[1] == "prctl")
print("armed", flush=True)
time.sleep(600)
"""

_PARENT = """
import subprocess, sys, time
kids = [subprocess.Popen([sys.executable, "-c", sys.argv[1], how], stdout=subprocess.PIPE,
                         text=True) for how in ("prctl", "poll")]
for kid in kids:
    assert kid.stdout.readline().strip() == "armed"
print(*(kid.pid for kid in kids), flush=True)
time.sleep(600)
"""


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux /proc")
def test_worker_dies_with_its_parent():
    """A worker past its initializer dies when its parent is SIGKILLed: by the kernel's
    parent-death signal, and by the polling thread where that is not available
    (forced here): within PARENT_POLL_S and scheduling, 10 s allowed under load."""
    import subprocess
    import time

    from mbkkm.experiments._runner import PARENT_POLL_S

    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, _ORPHAN], stdout=subprocess.PIPE, text=True
    )
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]  # both armed (imports)
        assert len(pids) == 2 and all(map(_alive, pids))
        time.sleep(3 * PARENT_POLL_S)
        assert all(map(_alive, pids))  # the parent alive: neither ends
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(map(_alive, pids)):
        time.sleep(0.02)
    alive = [how for how, pid in zip(("prctl", "poll"), pids) if _alive(pid)]
    for pid in pids:
        if _alive(pid):
            os.kill(pid, 9)
    assert not alive, f"a worker outlived its parent ({alive})"
