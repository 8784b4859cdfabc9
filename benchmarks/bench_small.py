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
against the classes, and the load. ``--fixed-gamma`` also times both estimators,
in the same interleaved rounds, with ``gamma`` fixed to the width the default
selection chose (``gamma_``): what each costs without the ``gamma="auto"``
selection, which both run on the same data.

Usage::

    .venv/bin/python benchmarks/bench_small.py [--rounds 5]
        [--datasets digits iris wine breast_cancer] [--fixed-gamma]
"""

from __future__ import annotations

import argparse
import os
import time
from functools import partial

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


def run(name, rounds, fixed_gamma=False):
    X, y = LOADERS[name](return_X_y=True)
    X = StandardScaler().fit_transform(X)
    k = len(np.unique(y))
    load_before = os.getloadavg()[0]
    times = {"minibatch": [], "full batch": [], "minibatch, fixed": [], "full batch, fixed": []}
    gamma = None  # the width the default selection chose (the first fit's)
    for _ in range(rounds):
        t, mb = _timed(lambda: MiniBatchKernelKMeans(k, random_state=0), X)
        times["minibatch"].append(t)
        t, _ = _timed(lambda: KernelKMeans(k, random_state=0), X)
        times["full batch"].append(t)
        if fixed_gamma:
            gamma = mb.gamma_ if gamma is None else gamma
            t, _ = _timed(partial(MiniBatchKernelKMeans, k, gamma=gamma, random_state=0), X)
            times["minibatch, fixed"].append(t)
            t, _ = _timed(partial(KernelKMeans, k, gamma=gamma, random_state=0), X)
            times["full batch, fixed"].append(t)
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
    if fixed_gamma:
        mb_fixed, full_fixed = min(times["minibatch, fixed"]), min(times["full batch, fixed"])
        print(
            f"{'':14s} gamma fixed to {gamma:.4g} (no selection): minibatch {mb_fixed:.3f} s  "
            f"full batch {full_fixed:.3f} s  ratio {mb_fixed / full_fixed:.2f}; the selection "
            f"{best_mb - mb_fixed:.3f} s of the minibatch fit, "
            f"{best_full - full_fixed:.3f} s of the full batch's",
            flush=True,
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--datasets", nargs="+", default=list(LOADERS), choices=list(LOADERS))
    parser.add_argument(
        "--fixed-gamma", action="store_true", help="also time both with gamma fixed to gamma_"
    )
    args = parser.parse_args()
    for name in args.datasets:
        run(name, args.rounds, args.fixed_gamma)


if __name__ == "__main__":
    main()
