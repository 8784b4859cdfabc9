"""Peak memory (and time) of MiniBatchKernelKMeans.fit + labels on a large data set.

The fit runs in a fresh subprocess (``--child``), so nothing of this process's
heap counts. The child

1. imports numpy, scikit-learn and mbkkm and reads its RSS (the interpreter and
   import baseline),
2. creates the data (``mbkkm.datasets.make_shells``: concentric shells,
   float32, chunked; default 2,000,000 x 16 = 128 MB) and reads its RSS again,
3. resets the kernel's peak-RSS counter (``/proc/self/clear_refs``, value 5) when
   it can, fits ``MiniBatchKernelKMeans(batch_size=1024, tau=200, max_iter=200)``
   with ``compute_labels=True`` (the labelling pass over all n points included),
4. reports the peak RSS (``VmHWM``; without the reset, ``ru_maxrss``) and the
   times as JSON.

The parent also reads the child's ``ru_maxrss`` (``RUSAGE_CHILDREN``) as a
cross-check. Target (issue of the design notes): the process peak minus the
import baseline stays below the data's size plus 500 MB, i.e. the fit adds less
than 500 MB to what the data itself occupies.

Usage::

    .venv/bin/python benchmarks/bench_memory.py                   # 2,000,000 x 16
    .venv/bin/python benchmarks/bench_memory.py --n-samples 200000 --n-clusters 10
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from _rss import reset_peak, status_kb  # benchmarks/ is on sys.path (the script's folder)

REPO = Path(__file__).resolve().parents[1]
MB = 1e6
TARGET_MB = 500.0


def child(args):
    sys.path.insert(0, str(REPO / "src"))
    rss_start = status_kb("VmRSS")
    import numpy as np
    import sklearn  # noqa: F401
    from sklearn.metrics import adjusted_rand_score

    from mbkkm import MiniBatchKernelKMeans
    from mbkkm.datasets import make_shells

    rss_imports = status_kb("VmRSS")
    t0 = time.perf_counter()
    X, y = make_shells(
        args.n_samples,
        args.n_features,
        n_shells=args.n_shells,
        random_state=args.seed,
        dtype=np.float32,
    )
    t_data = time.perf_counter() - t0
    rss_data = status_kb("VmRSS")
    hwm_data = status_kb("VmHWM")
    reset = reset_peak()

    km = MiniBatchKernelKMeans(
        n_clusters=args.n_clusters,
        gamma=args.gamma,
        batch_size=args.batch_size,
        tau=args.tau,
        max_iter=args.max_iter,
        compute_labels=False,
        random_state=args.seed,
        working_memory=args.working_memory,
    )
    t0 = time.perf_counter()
    km.fit(X)
    t_fit = time.perf_counter() - t0
    hwm_fit = status_kb("VmHWM")
    t0 = time.perf_counter()
    labels, inertia = km._labels_inertia(X)  # what fit does when compute_labels=True
    t_labels = time.perf_counter() - t0
    hwm_total = status_kb("VmHWM")
    print(
        json.dumps(
            {
                "n_samples": args.n_samples,
                "n_features": args.n_features,
                "data_mb": X.nbytes / MB,
                "n_support": int(km.support_vectors_.shape[0]),
                "gamma": float(km.kernel_.params.get("gamma", float("nan"))),
                "chunk_rows": int(km._chunk_rows(X)),
                "rss_start_mb": rss_start * 1e3 / MB,
                "rss_imports_mb": rss_imports * 1e3 / MB,
                "rss_data_mb": rss_data * 1e3 / MB,
                "hwm_data_mb": hwm_data * 1e3 / MB,
                "peak_reset": reset,
                "hwm_fit_mb": hwm_fit * 1e3 / MB,
                "hwm_total_mb": hwm_total * 1e3 / MB,
                "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1e3 / MB,
                "t_data": t_data,
                "t_fit": t_fit,
                "t_labels": t_labels,
                "ari": float(adjusted_rand_score(y, labels)),
                "inertia": float(inertia),
            }
        )
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-samples", type=int, default=2_000_000)
    parser.add_argument("--n-features", type=int, default=16)
    parser.add_argument("--n-shells", type=int, default=3)
    parser.add_argument("--n-clusters", type=int, default=None, help="default: --n-shells")
    parser.add_argument(
        "--gamma",
        type=float,
        default=None,
        help="rbf gamma (default: the estimator's default, gamma=None)",
    )
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--tau", type=int, default=200)
    parser.add_argument("--max-iter", type=int, default=200)
    parser.add_argument(
        "--working-memory",
        type=float,
        default=None,
        help="MiB for the labelling chunks (default: scikit-learn's)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.n_clusters is None:
        args.n_clusters = args.n_shells
    if args.child:
        child(args)
        return 0

    print("bench_memory: " + " ".join(sys.argv[1:] if argv is None else argv))
    print(time.strftime("%Y-%m-%d %H:%M:%S %Z"))
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        *(sys.argv[1:] if argv is None else argv),
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        print(proc.stdout)
        print(proc.stderr, file=sys.stderr)
        return proc.returncode
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    children_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1e3 / MB

    print(
        f"data: make_shells {r['n_samples']} x {r['n_features']} float32 = "
        f"{r['data_mb']:.0f} MB; k={args.n_clusters}, b={args.batch_size}, tau={args.tau}, "
        f"max_iter={args.max_iter}, gamma={r['gamma']:.4g}"
    )
    print(
        f"fit: m = {r['n_support']} support points; labelling chunks of "
        f"{r['chunk_rows']} rows (working_memory={args.working_memory or 'default'})"
    )
    print(
        f"RSS at start {r['rss_start_mb']:.0f} MB, after imports {r['rss_imports_mb']:.0f} MB,"
        f" after data {r['rss_data_mb']:.0f} MB (peak so far {r['hwm_data_mb']:.0f} MB)"
    )
    if r["peak_reset"]:
        print(
            f"peak RSS (VmHWM, reset after the data): fit {r['hwm_fit_mb']:.0f} MB, "
            f"fit + labels {r['hwm_total_mb']:.0f} MB"
        )
    else:
        print(f"peak RSS (VmHWM, not resettable here): {r['hwm_total_mb']:.0f} MB")
    print(
        f"child ru_maxrss {r['ru_maxrss_mb']:.0f} MB; parent's RUSAGE_CHILDREN "
        f"ru_maxrss {children_peak:.0f} MB"
    )
    peak = r["hwm_total_mb"]
    over_imports = peak - r["rss_imports_mb"]
    over_data = peak - r["rss_data_mb"]
    limit = r["data_mb"] + TARGET_MB
    ok = over_imports <= limit
    print(
        f"increase over the data (peak - RSS after data): {over_data:.0f} MB "
        f"(fit alone {r['hwm_fit_mb'] - r['rss_data_mb']:.0f} MB)"
    )
    print(
        f"target: peak - import baseline = {over_imports:.0f} MB <= data {r['data_mb']:.0f} MB "
        f"+ {TARGET_MB:.0f} MB = {limit:.0f} MB ({over_imports / limit:.2f} of the limit) -> "
        f"{'PASS' if ok else 'FAIL'}"
    )
    print(
        f"time: data {r['t_data']:.2f} s, fit {r['t_fit']:.2f} s "
        f"({r['t_fit'] / args.max_iter * 1e3:.1f} ms / iteration incl. init), labels "
        f"{r['t_labels']:.2f} s; subprocess wall {wall:.1f} s"
    )
    print(f"ARI against the shells: {r['ari']:.3f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
