"""The paper's speed-up, measured on MNIST on this machine: full batch against mini-batch.

One run of each on all 70,000 MNIST images (X / 255 in float32, rbf with the
paper's gamma = 1 / (2 * 5.8301^2), k = 10, seed 0), every time from the raw X to
the labels of all points:

* ``MiniBatchKernelKMeans(batch_size=1024, tau=200, max_iter=200)``;
* ``KernelKMeans`` (full-batch Lloyd, k-means++ on all points, default tol 1e-4 /
  max_iter 300) with the float32 kernel matrix *stored* (19.6 GB) when the memory
  plan of the machine allows it (``--max-kernel-gib``, default: what is available
  less 2 GiB), else recomputed block by block every iteration (``--blockwise``
  forces that path; ``--full-iters`` caps its iterations, and the time is then
  reported per iteration too).

Prints both times, the ratio, iterations and ARIs against the true digits, and
appends a markdown section to ``--out`` (default: print only).

Usage::

    .venv/bin/python benchmarks/bench_mnist_full.py --out mnist_full.md
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from sklearn.metrics import adjusted_rand_score

from mbkkm import KernelKMeans, MiniBatchKernelKMeans
from mbkkm._core._memory import available_host_memory

DATA = REPO.parent / "shared" / "datasets" / "mnist.npz"
GAMMA = 1.0 / (2 * 5.8301**2)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(DATA))
    p.add_argument("--n", type=int, default=None, help="first n images only (smoke runs)")
    p.add_argument("--max-kernel-gib", type=float, default=None)
    p.add_argument("--blockwise", action="store_true")
    p.add_argument("--full-iters", type=int, default=300)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)

    with np.load(args.data, allow_pickle=False) as f:
        X, y = f["X"], f["y"]
    if args.n:
        X, y = X[: args.n], y[: args.n]
    X = np.ascontiguousarray(X, dtype=np.float32) / np.float32(255)
    n = X.shape[0]
    lines = [
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"date {time.strftime('%Y-%m-%d %H:%M')}; n = {n}, d = {X.shape[1]}"
    ]

    t0 = time.perf_counter()
    mb = MiniBatchKernelKMeans(
        10, gamma=GAMMA, batch_size=1024, tau=200, max_iter=200, random_state=0
    ).fit(X)
    t_mb = time.perf_counter() - t0
    ari_mb = adjusted_rand_score(y, mb.labels_)
    lines.append(
        f"mini-batch (b = 1024, tau = 200, 200 iterations): {t_mb:.2f} s, ARI {ari_mb:.3f}"
    )
    print(lines[-1], flush=True)

    need = n * n * 4
    avail = available_host_memory() or 0
    budget = (
        args.max_kernel_gib * 2**30
        if args.max_kernel_gib is not None
        else max(0, avail - 2 * 2**30)
    )
    stored = not args.blockwise and need <= budget
    print(
        f"full batch: kernel matrix {need / 2**30:.1f} GiB, available "
        f"{avail / 2**30:.1f} GiB -> {'stored' if stored else 'blockwise'}",
        flush=True,
    )
    full = KernelKMeans(
        10,
        gamma=GAMMA,
        random_state=0,
        max_iter=args.full_iters,
        max_kernel_memory=(need / 2**20 + 1) if stored else 1,
        working_memory=1024,
    )
    t0 = time.perf_counter()
    full.fit(X)
    t_full = time.perf_counter() - t0
    ari_full = adjusted_rand_score(y, full.labels_)
    lines.append(
        f"full batch ({'stored float32 kernel' if stored else 'blockwise'}, "
        f"{full.n_iter_} Lloyd iterations): {t_full:.1f} s "
        f"({t_full / full.n_iter_:.2f} s per iteration), ARI {ari_full:.3f}"
    )
    print(lines[-1], flush=True)
    lines.append(
        f"speed-up full batch / mini-batch: {t_full / t_mb:.1f}x "
        f"(ARI {ari_full:.3f} vs {ari_mb:.3f})"
    )
    print(lines[-1], flush=True)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(
                "\n## MNIST: full batch against mini-batch on this machine (issue 11)\n\n"
                "`.venv/bin/python benchmarks/bench_mnist_full.py`\n\n"
                + "\n".join(f"- {line}" for line in lines)
                + "\n"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
