"""Fit times of MiniBatchKernelKMeans with and without early stopping, numpy and torch.

The cost of ``tol`` (f_B(C_{i+1}) on every batch) and of the fit loop on each
backend, on this machine: fits of the same model (fixed gamma, so that the width
selection does not count) with ``tol=None`` and with a ``tol`` too small to stop
the run (the same iterations, so the difference is the rule's own cost), on numpy
arrays and on torch CPU tensors, interleaved, best of ``--rounds``.

Usage::

    .venv/bin/python benchmarks/bench_fit_loop.py                       # PenDigits
    .venv/bin/python benchmarks/bench_fit_loop.py --dataset mnist --n 20000 --rounds 3
    PYTHONPATH=../main/src .venv/bin/python benchmarks/bench_fit_loop.py  # another tree
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
try:  # the installed mbkkm, or the one PYTHONPATH names (to measure another tree)
    import mbkkm
except ImportError:
    sys.path.insert(0, str(REPO / "src"))
    import mbkkm

from bench_iteration import SETTINGS, load, machine_info


def fit_time(X, **params):
    from mbkkm import MiniBatchKernelKMeans

    t0 = time.perf_counter()
    km = MiniBatchKernelKMeans(**params).fit(X)
    return time.perf_counter() - t0, km


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", choices=list(SETTINGS), default="pendigits")
    p.add_argument("--n", type=int, default=None, help="first n points (default: all)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-iter", type=int, default=100)
    p.add_argument("--backends", default="numpy,torch")
    args = p.parse_args(argv)
    print("bench_fit_loop: " + " ".join(sys.argv[1:] if argv is None else argv))
    print(time.strftime("%Y-%m-%d %H:%M:%S %Z"), f"mbkkm from {Path(mbkkm.__file__).parent}")
    for line in machine_info():
        print(line)
    X, source = load(args.dataset)
    if args.n:
        X = X[: args.n]
    gamma = SETTINGS[args.dataset][1]
    params = dict(
        n_clusters=10, gamma=gamma, batch_size=1024, tau=200, max_iter=args.max_iter, random_state=0
    )
    inputs = {"numpy": X}
    if "torch" in args.backends:
        import torch

        inputs["torch"] = torch.from_numpy(X)
    inputs = {name: inputs[name] for name in args.backends.split(",")}
    print(
        f"{args.dataset}: n={X.shape[0]}, d={X.shape[1]} ({source}), k=10, b=1024, "
        f"tau=200, gamma={gamma:.6g}, {args.max_iter} iterations, best of {args.rounds}"
    )
    times = {(name, tol): [] for name in inputs for tol in (None, 1e-12)}
    iters = {}
    for _ in range(args.rounds):
        for name, Xi in inputs.items():
            for tol in (None, 1e-12):
                t, km = fit_time(Xi, tol=tol, **params)
                times[name, tol].append(t)
                iters[name, tol] = km.n_iter_
    print(f"{'backend':8s} {'tol=None (s)':>13s} {'tol=1e-12 (s)':>14s} {'ratio':>6s}")
    for name in inputs:
        a, b = min(times[name, None]), min(times[name, 1e-12])
        print(
            f"{name:8s} {a:13.3f} {b:14.3f} {b / a:6.2f}   (iterations {iters[name, None]}, "
            f"{iters[name, 1e-12]}; all rounds: "
            f"{', '.join(f'{t:.2f}' for t in times[name, None])} / "
            f"{', '.join(f'{t:.2f}' for t in times[name, 1e-12])})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
