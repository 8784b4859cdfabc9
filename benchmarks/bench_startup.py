"""Start-up cost of the library and the command line (issue 40).

One run times, in fresh interpreters, interleaved round by round (best and median
of ``--rounds``):

* ``python -c pass``: the interpreter alone;
* ``python -c "import mbkkm"``: the package;
* ``python -c "from mbkkm import MiniBatchKernelKMeans"``: the estimators (what
  ``import mbkkm`` loaded before it became lazy: scikit-learn);
* ``mbkkm --help`` (target: <= 0.5 s);
* ``mbkkm predict MODEL new.csv`` on 100 rows x 16 columns, labels to a file
  (target: <= 1.3x ``import mbkkm`` and, the stricter yardstick once ``import
  mbkkm`` is lazy, <= 1.3x the estimators' import).

The commands run as the console script does (``from mbkkm.cli import main``); the
model is fitted once beforehand with ``mbkkm fit --model-out``. After the timings,
each command runs once more reporting which of scikit-learn, torch, dask and pytest
it imported. ``--src`` names the trees measured (their ``src`` folders; default this
one): several trees are timed in the same interleaved rounds (before and after a
change, on the same load).

Usage::

    .venv/bin/python benchmarks/bench_startup.py [--rounds 7] [--src OLD/src src]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
WATCHED = ("sklearn", "torch", "dask", "pytest", "skops")
CLI = "import sys; from mbkkm.cli import main; sys.exit(main(prog_name='mbkkm'))"
REPORT = (
    "import atexit, sys\n"
    "atexit.register(lambda: sys.stderr.write('IMPORTED ' + ' '.join("
    f"m for m in {WATCHED!r} if m in sys.modules) + '\\n'))\n"
)


def _commands(work: Path) -> dict[str, list[str]]:
    model, data, labels = work / "m.skops", work / "new.csv", work / "labels.txt"
    return {
        "python -c pass": ["-c", "pass"],
        "import mbkkm": ["-c", "import mbkkm"],
        "from mbkkm import MiniBatchKernelKMeans": [
            "-c",
            "from mbkkm import MiniBatchKernelKMeans",
        ],
        "mbkkm --help": ["-c", CLI, "--help"],
        "mbkkm predict (100 rows)": [
            "-c",
            CLI,
            "predict",
            str(model),
            str(data),
            "--labels-out",
            str(labels),
        ],
    }


def _run(args, env, check=True):
    proc = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{args} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc


def _prepare(work: Path, env) -> None:
    rng = np.random.default_rng(0)
    header = ",".join(f"x{j}" for j in range(16))
    np.savetxt(
        work / "train.csv",
        rng.normal(size=(2000, 16)),
        delimiter=",",
        fmt="%.5f",
        header=header,
        comments="",
    )
    np.savetxt(
        work / "new.csv",
        rng.normal(size=(100, 16)),
        delimiter=",",
        fmt="%.5f",
        header=header,
        comments="",
    )
    _run(
        [
            "-c",
            CLI,
            "fit",
            str(work / "train.csv"),
            "-k",
            "8",
            "--max-iter",
            "20",
            "--gamma",
            "0.05",
            "--model-out",
            str(work / "m.skops"),
            "-q",
        ],
        env,
    )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument(
        "--src",
        type=Path,
        nargs="+",
        default=[REPO / "src"],
        help="the src folders of the trees to measure",
    )
    a = p.parse_args(argv)
    base = {k: v for k, v in os.environ.items() if k != "PYTHONHOME"}
    base.setdefault("MBKKM_NO_MALLOPT", "1")
    envs = [{**base, "PYTHONPATH": str(src.resolve())} for src in a.src]
    with tempfile.TemporaryDirectory() as tmp:
        works = [Path(tmp) / str(i) for i in range(len(a.src))]
        for work, env in zip(works, envs):
            work.mkdir()
            _prepare(work, env)
        commands = [_commands(work) for work in works]
        load_before = os.getloadavg()
        times = [{name: [] for name in c} for c in commands]
        for _ in range(a.rounds):
            for name in commands[0]:
                for tree, env in enumerate(envs):
                    start = time.perf_counter()
                    _run(commands[tree][name], env)
                    times[tree][name].append(time.perf_counter() - start)
        load_after = os.getloadavg()
        imported = [{} for _ in envs]
        for tree, env in enumerate(envs):
            for name, args in commands[tree].items():
                proc = _run([args[0], REPORT + args[1], *args[2:]], env)
                line = [x for x in proc.stderr.splitlines() if x.startswith("IMPORTED")][-1]
                imported[tree][name] = line.split()[1:]

    print(
        f"date {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; {platform.node()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(
        f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}; "
        f"{a.rounds} interleaved rounds"
    )
    for tree, src in enumerate(a.src):
        _report(src, times[tree], imported[tree])


def _report(src, times, imported) -> None:
    best = {name: min(t) for name, t in times.items()}
    print(f"\nsrc {src}\n")
    print("| command | best s | median s | imports (of " + ", ".join(WATCHED) + ") |")
    print("| --- | --- | --- | --- |")
    for name, t in times.items():
        print(
            f"| `{name}` | {min(t):.3f} | {statistics.median(t):.3f} | "
            f"{' '.join(imported[name]) or '-'} |"
        )
    predict = best["mbkkm predict (100 rows)"]
    ref, estimators = best["import mbkkm"], best["from mbkkm import MiniBatchKernelKMeans"]
    help_ok = "PASS" if best["mbkkm --help"] <= 0.5 else "FAIL"
    print(f"\nmbkkm --help {best['mbkkm --help']:.3f} s (target <= 0.5 s: {help_ok})")
    print(
        f"predict / import mbkkm = {predict / ref:.2f} (target <= 1.3: "
        f"{'PASS' if predict <= 1.3 * ref else 'FAIL'})"
    )
    print(
        f"predict / import of the estimators = {predict / estimators:.2f} "
        f"(<= 1.3: {'PASS' if predict <= 1.3 * estimators else 'FAIL'})"
    )


if __name__ == "__main__":
    main()
