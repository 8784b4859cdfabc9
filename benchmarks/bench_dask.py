"""Dask benchmark: fit + labels of MiniBatchKernelKMeans on 10M x 16 float32 shells.

The data is a chunked Dask array generated per block (a per-block seed), never
materialised in one process. Run from the repository root:

    .venv/bin/python benchmarks/bench_dask.py [--n 10000000] [--no-memory] [--out FILE]

Prints one summary row per run; ``--out FILE`` also appends them to FILE as a
markdown section with the command, machine and date (for ``benchmarks/README.md``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import time

import numpy as np


def shells_block(block_id, rows, d, k, seed):
    """``rows`` points on k noisy concentric shells (radii 1..k), its own seed."""
    rng = np.random.default_rng([seed, block_id])
    u = rng.standard_normal((rows, d), dtype=np.float32)
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    r = rng.integers(1, k + 1, rows).astype(np.float32)
    return u * r[:, None] + np.float32(0.05) * rng.standard_normal((rows, d), dtype=np.float32)


def dask_shells(n, d, k, chunk, seed):
    import dask.array as da

    sizes = [chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])

    def make(block_info=None):
        info = block_info[None]
        i = info["chunk-location"][0]
        return shells_block(i, info["chunk-shape"][0], d, k, seed)

    return da.map_blocks(
        make, chunks=(tuple(sizes), (d,)), dtype=np.float32, meta=np.empty((0, 0), np.float32)
    )


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=250_000)
    ap.add_argument("--max-iter", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--tau", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-memory", action="store_true", help="skip the in-memory run")
    ap.add_argument("--out", metavar="FILE", help="append a markdown section to FILE")
    args = ap.parse_args()

    import distributed

    from mbkkm import MiniBatchKernelKMeans

    params = dict(
        n_clusters=args.k,
        gamma="mean-distance",
        batch_size=args.batch_size,
        tau=args.tau,
        max_iter=args.max_iter,
        random_state=args.seed,
    )
    rows = []
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        X = dask_shells(args.n, args.d, args.k, args.chunk, args.seed)
        t0 = time.perf_counter()
        MiniBatchKernelKMeans(**params, compute_labels=False).fit(X)
        t_fit = time.perf_counter() - t0
        t0 = time.perf_counter()
        km_l = MiniBatchKernelKMeans(**params).fit(X)
        t_fit_labels = time.perf_counter() - t0
        labels = km_l.labels_
        counts = np.bincount(labels.compute(), minlength=args.k)
        worker_rss = client.run(peak_rss_mib)
        rows.append(
            dict(
                run="dask (2 workers)",
                fit_s=t_fit,
                fit_labels_s=t_fit_labels,
                inertia=km_l.inertia_,
                gamma=km_l.kernel_.params["gamma"],
                peak_mib=max(worker_rss.values()),
                counts=counts.tolist(),
            )
        )
        print(
            f"dask: fit {t_fit:.2f}s, fit+labels {t_fit_labels:.2f}s, "
            f"worker peak RSS {worker_rss} MiB, client peak RSS {peak_rss_mib():.0f} MiB"
        )
        dask_model = km_l
    if not args.no_memory:
        Xm = np.concatenate(
            [
                b
                for b in (
                    shells_block(i, s, args.d, args.k, args.seed) for i, s in enumerate(X.chunks[0])
                )
            ]
        )
        t0 = time.perf_counter()
        MiniBatchKernelKMeans(**params, compute_labels=False).fit(Xm)
        t_fit = time.perf_counter() - t0
        t0 = time.perf_counter()
        km_m = MiniBatchKernelKMeans(**params).fit(Xm)
        t_fit_labels = time.perf_counter() - t0
        same = np.array_equal(km_m.support_vectors_, dask_model.support_vectors_) and np.allclose(
            km_m.dual_coef_, dask_model.dual_coef_, rtol=1e-12
        )
        rows.append(
            dict(
                run="numpy in memory",
                fit_s=t_fit,
                fit_labels_s=t_fit_labels,
                inertia=km_m.inertia_,
                gamma=km_m.kernel_.params["gamma"],
                peak_mib=peak_rss_mib(),
                counts=np.bincount(km_m.labels_, minlength=args.k).tolist(),
            )
        )
        print(
            f"numpy: fit {t_fit:.2f}s, fit+labels {t_fit_labels:.2f}s, process peak RSS "
            f"{peak_rss_mib():.0f} MiB; same model as dask: {same}"
        )
    header = (
        "| run | fit (s) | fit + labels (s) | peak RSS (MiB) | inertia | gamma | cluster sizes |"
    )
    lines = [header, "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['run']} | {r['fit_s']:.2f} | {r['fit_labels_s']:.2f} | "
            f"{r['peak_mib']:.0f} | {r['inertia']:.6g} | {r['gamma']:.6g} | "
            f"{r['counts']} |"
        )
    table = "\n".join(lines)
    print(table)
    if args.out:
        cmd = "python benchmarks/bench_dask.py " + " ".join(
            f"--{k.replace('_', '-')} {v}"
            for k, v in vars(args).items()
            if k not in ("out", "no_memory")
        )
        text = (
            f"\n\n## Dask: fit + labels on {args.n:,} x {args.d} float32 (issue 6)\n\n"
            f"Command: `{cmd}`  \nMachine: {platform.machine()}, {os.cpu_count()} cores, "
            f"{platform.python_version()}; LocalCluster 2 worker processes x 1 thread.  \n"
            f"Date: {datetime.date.today()}.  \nData: {args.k} concentric shells, generated "
            f"per chunk ({args.chunk:,} rows) on the workers, never in one process for the "
            f"Dask run. MiniBatchKernelKMeans(k={args.k}, rbf, gamma='mean-distance', "
            f"b={args.batch_size}, tau={args.tau}, max_iter={args.max_iter}). Peak RSS: "
            "the largest worker for Dask, the whole process for numpy (which holds the "
            f"{args.n * args.d * 4 / 2**20:.0f} MiB array).\n\n{table}\n"
        )
        with open(args.out, "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
