"""Small n: MiniBatchKernelKMeans with its defaults against KernelKMeans, same run.

Below :data:`mbkkm._core._stored.STORED_KERNEL_BYTES` the mini-batch fit computes
the kernel matrix once and its iterations index it (:mod:`mbkkm._core._stored`).
For each dataset (standardised, k = the number of classes, ``random_state=0``,
every other parameter at its default), ``--rounds`` interleaved rounds time

- ``MiniBatchKernelKMeans(k).fit(X)`` (the stored-kernel step),
- ``KernelKMeans(k).fit(X)`` (full batch),

and once, for the model check, the same mini-batch fit with the host step forced
(``STORED_KERNEL_BYTES = 0``: the step that ran before the stored step existed).
It prints the best time of each, their ratio, whether the labels are the same, the
largest relative difference of the batch objectives and of the inertia, the ARI
against the classes, and the load.

Usage::

    .venv/bin/python benchmarks/bench_small.py [--rounds 5]
        [--datasets digits iris wine breast_cancer]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from sklearn import datasets
from sklearn.metrics import adjusted_rand_score
from sklearn.preprocessing import StandardScaler

from mbkkm import KernelKMeans, MiniBatchKernelKMeans
from mbkkm._core import _stored

LOADERS = {
    "digits": datasets.load_digits,
    "iris": datasets.load_iris,
    "wine": datasets.load_wine,
    "breast_cancer": datasets.load_breast_cancer,
}


def _timed(make, X):
    t0 = time.perf_counter()
    est = make().fit(X)
    return time.perf_counter() - t0, est


def run(name, rounds):
    X, y = LOADERS[name](return_X_y=True)
    X = StandardScaler().fit_transform(X)
    k = len(np.unique(y))
    load_before = os.getloadavg()[0]
    times = {"minibatch": [], "full batch": []}
    for _ in range(rounds):
        t, mb = _timed(lambda: MiniBatchKernelKMeans(k, random_state=0), X)
        times["minibatch"].append(t)
        t, _ = _timed(lambda: KernelKMeans(k, random_state=0), X)
        times["full batch"].append(t)
    budget = _stored.STORED_KERNEL_BYTES
    _stored.STORED_KERNEL_BYTES = 0
    try:
        t_host, host = _timed(lambda: MiniBatchKernelKMeans(k, random_state=0), X)
    finally:
        _stored.STORED_KERNEL_BYTES = budget
    objective = np.max(
        np.abs(mb.batch_objective_ - host.batch_objective_) / np.abs(host.batch_objective_)
    )
    best_mb, best_full = min(times["minibatch"]), min(times["full batch"])
    print(
        f"{name:14s} n={X.shape[0]:5d} k={k:2d}  minibatch {best_mb:.3f} s  "
        f"full batch {best_full:.3f} s  ratio {best_mb / best_full:.2f}  "
        f"host step {t_host:.3f} s  labels same {bool(np.all(mb.labels_ == host.labels_))}  "
        f"objective rel diff {objective:.1e}  "
        f"inertia rel diff {abs(mb.inertia_ - host.inertia_) / host.inertia_:.1e}  "
        f"ARI {adjusted_rand_score(y, mb.labels_):.3f}  "
        f"load {load_before:.2f}-{os.getloadavg()[0]:.2f}",
        flush=True,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--datasets", nargs="+", default=list(LOADERS), choices=list(LOADERS))
    args = parser.parse_args()
    for name in args.datasets:
        run(name, args.rounds)


if __name__ == "__main__":
    main()
