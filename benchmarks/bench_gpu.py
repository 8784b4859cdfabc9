"""MNIST fit + labels of all 70,000 points on a GPU, against numpy on the CPU.

The paper's MNIST setting: b = 1024, tau = 200, 200 iterations, k = 10,
gamma = 1 / (2 * 5.8301^2) (rbf), X uint8 / 255 in float32. One run of
``MiniBatchKernelKMeans(...).fit(X)`` with ``compute_labels=True`` (labels of every
point included) is timed on each backend from the same seed:

* ``numpy``: numpy arrays on the CPU (the library's default path);
* ``torch-<device>``: a float32 tensor already on the device (the copy of X to the
  device is timed apart), bracketed by ``torch.cuda.synchronize()``; one short
  warm-up fit first (CUDA context, kernels, allocator), not counted.

Prints a table (times, speed-up, ARI against the true digits, agreement of the
two labelings) and appends it to ``benchmarks/RESULTS.md`` with the card name and
the date. Target: fit + labels under 1 second on an H100.

Usage (the data file must be copied along on a GPU machine: ``--data``)::

    .venv/bin/python benchmarks/bench_gpu.py                      # cuda vs numpy
    .venv/bin/python benchmarks/bench_gpu.py --data /path/mnist.npz
    .venv/bin/python benchmarks/bench_gpu.py --device cpu --iters 10   # smoke check
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

from mbkkm import MiniBatchKernelKMeans

DEFAULT_DATA = REPO.parent / "shared" / "datasets" / "mnist.npz"
GAMMA = 1.0 / (2 * 5.8301**2)


def load(path, n=None):
    with np.load(path, allow_pickle=False) as f:
        X, y = f["X"], f["y"]
    if n is not None:
        X, y = X[:n], y[:n]
    return (X.astype(np.float32) / np.float32(255.0)), y


def cpu_name():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def make(args, device):
    return MiniBatchKernelKMeans(
        n_clusters=args.k, kernel="rbf", gamma=GAMMA, batch_size=args.batch_size,
        tau=args.tau, max_iter=args.iters, random_state=args.seed, device=device,
    )


def time_numpy(args, X):
    t0 = time.perf_counter()
    est = make(args, None).fit(X)
    return time.perf_counter() - t0, est


def time_torch(args, X, device):
    import torch

    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    Xd = torch.from_numpy(X).to(dev)
    sync()
    t_copy = time.perf_counter() - t0
    # Warm-up (CUDA context, cuBLAS handles, caching allocator): a short fit.
    warm = make(args, None).set_params(max_iter=min(5, args.iters))
    warm.fit(Xd[: min(len(X), 8192)])
    sync()
    times = []
    est = None
    for _ in range(args.repeats):
        sync()
        t0 = time.perf_counter()
        est = make(args, None).fit(Xd)  # device=None: runs where the tensor lives
        labels = est.labels_
        sync()
        times.append(time.perf_counter() - t0)
    return min(times), times, t_copy, est, labels.cpu().numpy()


def device_label(device):
    import torch

    if torch.device(device).type == "cuda":
        return f"{torch.cuda.get_device_name(torch.device(device))} (torch {torch.__version__})"
    return f"{cpu_name()} (torch {torch.__version__}, CPU)"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA,
                   help="mnist.npz with X (uint8, 70000 x 784) and y (default: %(default)s)")
    p.add_argument("--device", default="cuda",
                   help="torch device of the accelerated run: cuda, cuda:N or cpu "
                        "(cpu: a smoke check of the torch path; default: %(default)s)")
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--tau", type=int, default=200)
    p.add_argument("-k", type=int, default=10)
    p.add_argument("--n", type=int, default=None, help="use the first n points only")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=3,
                   help="timed torch fits (the minimum is reported; default: %(default)s)")
    p.add_argument("--skip-numpy", action="store_true", help="skip the numpy CPU baseline")
    p.add_argument("--results", type=Path, default=REPO / "benchmarks" / "RESULTS.md",
                   help="file the table is appended to ('-' for none)")
    args = p.parse_args(argv)

    import torch

    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        print(f"--device {args.device}: torch sees no CUDA device; use --device cpu for a "
              "smoke check")
        return 2
    X, y = load(args.data, args.n)
    n, d = X.shape
    date = time.strftime("%Y-%m-%d %H:%M %Z")
    title = (f"MNIST n={n}, d={d}, k={args.k}, b={args.batch_size}, tau={args.tau}, "
             f"{args.iters} iterations, rbf gamma={GAMMA:.6g}, float32, seed {args.seed}")
    print(f"bench_gpu {date}\n{title}")
    print(f"accelerated run: {device_label(args.device)}")

    rows = []
    ref_labels = None
    if not args.skip_numpy:
        t_np, est_np = time_numpy(args, X)
        ref_labels = est_np.labels_
        rows.append(("numpy (CPU)", f"{cpu_name()}, {os.cpu_count()} cores", t_np, None,
                     adjusted_rand_score(y, est_np.labels_), est_np.inertia_ / n))
        print(f"  numpy: {t_np:.3f} s")
    t_best, t_all, t_copy, est_t, lab_t = time_torch(args, X, args.device)
    print(f"  torch-{args.device}: {t_best:.3f} s (runs: "
          f"{', '.join(f'{t:.3f}' for t in t_all)}); copy of X to the device {t_copy:.3f} s")
    rows.append((f"torch ({args.device})", device_label(args.device), t_best, t_copy,
                 adjusted_rand_score(y, lab_t), est_t.inertia_ / n))

    lines = [f"### bench_gpu, {date}", "", title, "",
             "| backend | hardware | fit + labels (s) | copy X to device (s) | speed-up "
             "| ARI vs digits | inertia / n |",
             "|---|---|---|---|---|---|---|"]
    t_ref = rows[0][2] if not args.skip_numpy else None
    for name, hw, t, tc, ari, inert in rows:
        speed = f"{t_ref / t:.1f}x" if t_ref else "-"
        lines.append(f"| {name} | {hw} | {t:.3f} | {'-' if tc is None else f'{tc:.3f}'} "
                     f"| {speed} | {ari:.3f} | {inert:.4f} |")
    if ref_labels is not None:
        agree = adjusted_rand_score(ref_labels, lab_t)
        lines += ["", f"ARI between the numpy and torch labelings: {agree:.4f} "
                      "(same seed, same sampling plan and init; float32 rounding differs)."]
    if torch.device(args.device).type == "cuda":
        ok = t_best < 1.0
        lines += [f"Target fit + labels < 1 s on the GPU: {t_best:.3f} s -> "
                  f"{'PASS' if ok else 'FAIL'}"]
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    if str(args.results) != "-":
        new = not args.results.exists()
        with open(args.results, "a") as fh:
            if new:
                fh.write("# Benchmark results\n\nAppended by the scripts in benchmarks/.\n\n")
            fh.write(text + "\n")
        print(f"appended to {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
