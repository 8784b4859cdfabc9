"""Fast on a busy machine: default threads against one thread forced, quiet and busy.

Each case is timed with mbkkm's default threads and with one thread forced by
the user (``threadpoolctl.threadpool_limits(limits=1)``, the scikit-learn way),
on the machine as it is ("quiet": run it under ``/work/bin/quiet``) and with
``--busy`` other processes that this script starts and stops itself (pure-Python
spin loops, one core each). Rounds interleave the two thread settings; the best
of ``--rounds`` is reported, with the cores that other processes kept busy during
that round ("others", from ``/proc/stat``: the busy spin loops count, about 2; on
a shared machine a "quiet" round with others above 0.1 shared a core).

Cases (``--cases``):

* ``readme-auto``: the README example, 5,000 circles,
  ``MiniBatchKernelKMeans(2, batch_size=512, tau=100, max_iter=100)``, gamma=None
  (the width selection);
* ``readme-fixed``: the same with ``gamma="mean-distance"``;
* ``pendigits``: PenDigits (standardised, 10,992 x 16), k = 10, b = 1024,
  tau = 200, 100 iterations, gamma = 0.1, fit with ``labels_``;
* ``mnist``: the first 20,000 MNIST images (/ 255, float32), k = 10, b = 1024,
  tau = 200, 100 iterations, gamma = 1 / (2 * 5.8301**2), fit with ``labels_``;
* ``label``: the labelling pass (``predict``) of ``--label-rows`` x 16 Gaussian
  points (float32) against a model fitted on 20,000 of them (k = 10, tau = 200:
  about 2,300 support points);
* ``mnist-label``: ``predict`` of the 20,000 MNIST images with the mnist model;
* ``kkm-pendigits``: ``KernelKMeans(10, gamma=0.1, max_iter=30)`` on PenDigits
  (the 10,992^2 float32 kernel matrix stored).

Run (each run under ten minutes on the 2-core project machine with the
defaults)::

    /work/bin/quiet .venv/bin/python benchmarks/bench_threads.py
    /work/bin/quiet .venv/bin/python benchmarks/bench_threads.py --busy 0 --cases mnist
    # the code before the policy, for "nothing slower than today":
    PYTHONPATH=/tmp/old/src /work/bin/quiet .venv/bin/python benchmarks/bench_threads.py

``--tiles`` runs only the sweep behind the part threshold (``MIN_PART_WORK``):
an rbf tile in two row parts against one thread, at sizes around it.
``--json FILE`` appends one JSON line per (case, load, threads) with every round.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MBKKM_DATA", REPO.parent / "shared" / "datasets"))
if not SHARED.exists():
    SHARED = Path("/work/shared/datasets")

CASES = [
    "readme-auto",
    "readme-fixed",
    "pendigits",
    "mnist",
    "mnist-label",
    "label",
    "kkm-pendigits",
]
MNIST_GAMMA = 1.0 / (2 * 5.8301**2)


def _load(name, n=None):
    from mbkkm.datasets import load_dataset

    prep = "divide_255" if name == "mnist" else "standardize"
    X, _ = load_dataset(name, data_home=SHARED, preprocess=prep, dtype=np.float32, download=False)
    X = np.ascontiguousarray(X if n is None else X[:n], dtype=np.float32)
    return X


def setup(case, label_rows):
    """A ``run()`` closure for the case; the data are made or loaded here, untimed."""
    from mbkkm import KernelKMeans, MiniBatchKernelKMeans

    if case.startswith("readme"):
        from sklearn.datasets import make_circles

        X, _ = make_circles(n_samples=5000, factor=0.3, noise=0.05, random_state=0)
        gamma = None if case == "readme-auto" else "mean-distance"
        return lambda: MiniBatchKernelKMeans(
            2, batch_size=512, tau=100, max_iter=100, gamma=gamma, random_state=0
        ).fit(X)
    if case == "pendigits":
        X = _load("pendigits")
        return lambda: MiniBatchKernelKMeans(
            10, gamma=0.1, batch_size=1024, tau=200, max_iter=100, random_state=0
        ).fit(X)
    if case in ("mnist", "mnist-label"):
        X = _load("mnist", 20000)
        make = lambda: MiniBatchKernelKMeans(  # noqa: E731
            10,
            gamma=MNIST_GAMMA,
            batch_size=1024,
            tau=200,
            max_iter=100,
            random_state=0,
        )
        if case == "mnist":
            return lambda: make().fit(X)
        model = make().fit(X)
        return lambda: model.predict(X)
    if case == "label":
        X = np.random.default_rng(0).standard_normal((label_rows, 16), dtype=np.float32)
        model = MiniBatchKernelKMeans(
            10, gamma="mean-distance", batch_size=1024, tau=200, max_iter=50, random_state=0
        ).fit(X[:20000])
        return lambda: model.predict(X)
    if case == "kkm-pendigits":
        X = _load("pendigits")
        return lambda: KernelKMeans(10, gamma=0.1, max_iter=30, random_state=0).fit(X)
    raise ValueError(f"unknown case {case!r}; choose among {CASES}")


def tile_sweep(repeat=20):
    """The part threshold: an rbf tile K(S, X_b) (d = 16 and 784) computed in row parts
    on two threads (the policy) against one thread, at sizes around
    ``MIN_PART_WORK`` (work = m * b * (d + 16) multiply-adds)."""
    from unittest import mock

    from mbkkm.backends._threads import MIN_PART_WORK, thread_policy
    from mbkkm.kernels import _kernel, resolve_kernel

    kern = resolve_kernel("rbf", gamma=0.1)
    rng = np.random.default_rng(0)
    print(f"tile sweep (MIN_PART_WORK = {MIN_PART_WORK:.0e}; best of {repeat})")
    print(f"{'m x b x d':>18} {'work':>8} {'2 parts ms':>10} {'1 thread ms':>11} {'ratio':>6}")
    out = []
    for m, b, d in [
        (128, 128, 16),
        (256, 256, 16),
        (512, 512, 16),
        (1000, 1024, 16),
        (2300, 1024, 16),
        (64, 64, 784),
        (128, 128, 784),
        (256, 256, 784),
        (3000, 1024, 784),
    ]:
        S = rng.standard_normal((m, d), dtype=np.float32)
        Xb = rng.standard_normal((b, d), dtype=np.float32)
        work = m * b * (d + 16)
        res = {}
        for mode, limit in (("parts", None), ("one", 1)):
            best = np.inf
            for _ in range(repeat):
                with threadpool_limits(limits=limit) if limit else thread_policy():
                    # "parts": two row parts whatever the size; "one": one thread
                    threads = 2 if mode == "parts" else 1
                    with (
                        thread_policy(),
                        mock.patch.object(_kernel, "threads_for", return_value=threads),
                    ):
                        t0 = time.perf_counter()
                        kern(S, Xb)
                        best = min(best, time.perf_counter() - t0)
            res[mode] = best
        print(
            f"{f'{m} x {b} x {d}':>18} {work:8.1e} {1e3 * res['parts']:10.3f} "
            f"{1e3 * res['one']:11.3f} {res['parts'] / res['one']:6.2f}",
            flush=True,
        )
        out.append({"m": m, "b": b, "d": d, "work": work, **res})
    return out


def _fmt(x):
    return "-" if x is None else f"{x:.2f}"


def start_busy(n):
    """n pure-Python spin loops, one core each (stopped by :func:`stop_busy`)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    time.sleep(0.5)  # let them reach the run queue
    return procs


def stop_busy(procs):
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def _busy_seconds():
    """(CPU seconds the whole machine was busy, CPU seconds of this process) so far;
    (None, None) where /proc/stat is missing. Steal time counts as busy: the
    hypervisor gave the core to someone else."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:9]]
    except OSError:
        return None, None
    own = os.times()
    # user nice system idle iowait irq softirq steal: busy = all but idle and iowait
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK"), own.user + own.system


def time_once(run, one_thread):
    """(seconds, others): the wall time of run(), and the cores that other processes
    kept busy on average meanwhile (None where unknown): a timing with others > 0.1
    on a "quiet" machine shared a core with someone."""
    with threadpool_limits(limits=1) if one_thread else contextlib.nullcontext():
        machine0, own0 = _busy_seconds()
        t0 = time.perf_counter()
        run()
        t = time.perf_counter() - t0
        machine1, own1 = _busy_seconds()
    if machine0 is None:
        return t, None
    return t, max(0.0, (machine1 - machine0) - (own1 - own0)) / t


def measure(run, rounds):
    """({"default": [...], "one": [...]}, the same for others' cores): interleaved
    rounds after one warm-up."""
    times = {"default": [], "one": []}
    others = {"default": [], "one": []}
    time_once(run, False)  # warm-up: first-call imports and allocations
    for _ in range(rounds):
        for mode in times:
            t, o = time_once(run, mode == "one")
            times[mode].append(t)
            others[mode].append(o)
    return times, others


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--busy", type=int, default=2, help="spin loops for the busy load (0: quiet only)"
    )
    parser.add_argument("--loads", default="quiet,busy")
    parser.add_argument("--label-rows", type=int, default=2_000_000)
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--tiles", action="store_true", help="only the part-threshold sweep (quiet)"
    )
    args = parser.parse_args(argv)
    if args.tiles:
        return tile_sweep()
    warnings.simplefilter("ignore")
    import mbkkm

    loads = [x for x in args.loads.split(",") if x and (x == "quiet" or args.busy > 0)]
    print(
        f"mbkkm {mbkkm.__version__} from {Path(mbkkm.__file__).parent}; "
        f"cpus {os.cpu_count()}; load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'case':14} {'load':6} {'default s':>10} {'one thread s':>12} {'ratio':>6} "
        f"{'others':>8} {'others':>8}  (others: cores busy with other processes "
        "during the best round, default / one)"
    )
    rows = []
    for case in args.cases.split(","):
        run = setup(case, args.label_rows)
        for load in loads:
            procs = start_busy(args.busy) if load == "busy" else []
            try:
                times, others = measure(run, args.rounds)
            finally:
                stop_busy(procs)
            best = {m: min(t) for m, t in times.items()}
            at_best = {m: others[m][int(np.argmin(t))] for m, t in times.items()}
            ratio = best["default"] / best["one"]
            print(
                f"{case:14} {load:6} {best['default']:10.3f} {best['one']:12.3f} "
                f"{ratio:6.2f} {_fmt(at_best['default']):>8} {_fmt(at_best['one']):>8}",
                flush=True,
            )
            rows.append(
                {
                    "case": case,
                    "load": load,
                    "busy": args.busy if procs else 0,
                    "times": times,
                    "others": others,
                    "others_at_best": at_best,
                    "best": best,
                    "ratio": ratio,
                    "loadavg": os.getloadavg()[0],
                    "mbkkm": str(Path(mbkkm.__file__).parent),
                }
            )
    if args.json:
        with open(args.json, "a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    return rows


if __name__ == "__main__":
    main()
