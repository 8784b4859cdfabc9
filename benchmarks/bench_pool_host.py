"""The device step's formulation on the CPU against the host step: one fit, two steps.

``MiniBatchKernelKMeans.fit`` runs the host step (:mod:`mbkkm._core._windows`: the
support compacted and the windows planned in numpy every iteration) on numpy
arrays, and the device step (:mod:`mbkkm._core._pool`: fixed shapes, free rows
kept, no read-back) on torch tensors. Issue 38 asks whether one formulation could
serve both; this measures the device formulation where the host step runs, on the
CPU, as torch CPU tensors (the pool is written in torch).

The same fit (MNIST's first ``--n`` rows scaled to [0, 1], float32, k = 10,
b = 1024, tau = 200, ``--iters`` iterations, a fixed gamma, ``compute_labels=False``)
on the numpy array and on the torch CPU tensor of it, ``--rounds`` interleaved rounds
after one warm-up fit of each; it prints the best time of each, their ratio, the
ARI between the two fits' labellings of the rows, and the load.

Usage::

    .venv/bin/python benchmarks/bench_pool_host.py [--rounds 4] [--n 20000] [--iters 60]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from sklearn.metrics import adjusted_rand_score

from mbkkm import MiniBatchKernelKMeans

MNIST = "/work/shared/datasets/mnist.npz"


def _fit(X, iters):
    est = MiniBatchKernelKMeans(
        10,
        batch_size=1024,
        tau=200,
        max_iter=iters,
        gamma=0.02,
        random_state=0,
        compute_labels=False,
    )
    start = time.perf_counter()
    est.fit(X)
    return time.perf_counter() - start, est


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--iters", type=int, default=60)
    parser.add_argument("--data", default=MNIST)
    args = parser.parse_args()

    import torch

    X = (np.load(args.data)["X"][: args.n] / 255.0).astype(np.float32)
    Xt = torch.from_numpy(X)
    load_before = os.getloadavg()[0]
    _fit(X, args.iters)  # warm-up: imports, BLAS and torch threads
    _fit(Xt, args.iters)
    times = {"host step (numpy)": [], "device step (torch CPU)": []}
    for _ in range(args.rounds):
        t, host = _fit(X, args.iters)
        times["host step (numpy)"].append(t)
        t, pool = _fit(Xt, args.iters)
        times["device step (torch CPU)"].append(t)
    for name, ts in times.items():
        print(f"{name:24s} best {min(ts):.3f} s  ({', '.join(f'{t:.3f}' for t in ts)})")
    ratio = min(times["device step (torch CPU)"]) / min(times["host step (numpy)"])
    pool_labels = pool.predict(Xt)  # a tensor, as the fit's input
    agreement = adjusted_rand_score(host.predict(X), pool_labels.numpy())
    print(
        f"device / host: {ratio:.2f}  ARI between the two fits' labels {agreement:.4f}  "
        f"n={args.n} iterations={args.iters} torch threads {torch.get_num_threads()}  "
        f"load {load_before:.2f}-{os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
