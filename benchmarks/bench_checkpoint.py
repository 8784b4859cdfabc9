"""Cost of checkpointed fits: the fit's time with and without ``checkpoint=``, and the
size of a checkpoint file.

MiniBatchKernelKMeans on PenDigits (10,992 x 16, k = 10, fixed gamma,
``compute_labels=False``), numpy and torch CPU: a plain fit, and fits that save every
``N`` iterations (one save = snapshot, skops dump, atomic write with fsyncs). The
rounds interleave the variants; the best of ``--rounds`` is reported. skops is
imported before timing (its first import, which imports scikit-learn's estimators,
takes seconds once per process and is not a cost of a save).

Usage (timed: through the CPU lock that quiets the machine)::

    /work/bin/quiet .venv/bin/python benchmarks/bench_checkpoint.py --rounds 3
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from mbkkm import MiniBatchKernelKMeans
from mbkkm.cluster import _checkpoint

DATA = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "pendigits.npz"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-iter", type=int, default=200)
    ap.add_argument(
        "--torch-max-iter",
        type=int,
        default=40,
        help="max_iter of the torch CPU fits (their iterations are slower)",
    )
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--tau", type=int, default=200)
    ap.add_argument("--data", default=str(DATA))
    args = ap.parse_args()
    import skops.io  # noqa: F401  (once per process, not a cost of a save)

    X = np.load(args.data)["X"].astype(np.float64)
    X = (X - X.mean(0)) / X.std(0)
    backends = {"numpy": X}
    try:
        import torch

        backends["torch-cpu"] = torch.from_numpy(X)
    except ImportError:
        pass
    saves = {"n": 0}
    save = _checkpoint.FitCheckpoint.save

    def counted(self, fs):  # on a device the saves follow the read-backs: count them
        saves["n"] += 1
        save(self, fs)

    _checkpoint.FitCheckpoint.save = counted
    folder = tempfile.mkdtemp()
    every = (None, 50, 20, 5)
    print(
        f"PenDigits {X.shape}, k=10, b={args.batch_size}, tau={args.tau}; "
        f"load {os.getloadavg()[0]:.2f}"
    )
    for name, data in backends.items():
        max_iter = args.max_iter if name == "numpy" else args.torch_max_iter
        best = {e: np.inf for e in every}
        size, n_saves = {}, {}
        for _ in range(args.rounds):
            for e in every:
                est = MiniBatchKernelKMeans(
                    n_clusters=10,
                    gamma=0.05,
                    batch_size=args.batch_size,
                    tau=args.tau,
                    max_iter=max_iter,
                    random_state=0,
                    compute_labels=False,
                )
                path = os.path.join(folder, f"{name}-{e}.ckpt")
                saves["n"] = 0
                t = time.perf_counter()
                if e is None:
                    est.fit(data)
                else:
                    est.fit(data, checkpoint=path, checkpoint_every=e)
                best[e] = min(best[e], time.perf_counter() - t)
                if e is not None:
                    size[e], n_saves[e] = os.path.getsize(path), saves["n"]
                    os.unlink(path)
        base = best[None]
        print(f"{name}: plain fit of {max_iter} iterations {base:.3f} s")
        for e in every[1:]:
            print(
                f"  every {e:>3}: {best[e]:.3f} s (+{100 * (best[e] / base - 1):.1f} %, "
                f"{n_saves[e]} saves, {1000 * (best[e] - base) / n_saves[e]:.1f} ms a save), "
                f"file {size[e] / 2**20:.2f} MiB"
            )


if __name__ == "__main__":
    main()
