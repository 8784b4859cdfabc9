"""Dask benchmark: fit + labels of MiniBatchKernelKMeans through a LocalCluster.

The rows are k noisy concentric shells, float32, generated chunk by chunk (a seed
per chunk), either

* ``--from-npy PATH``: read from a ``.npy`` file by the workers
  (:func:`mbkkm._dask.read_npy`; the file is written first, chunk by chunk, when
  it does not exist), or
* by default: generated on the workers (``map_blocks``), never stored.

The client fits on the Dask array (the workers gather the batch rows), then
``predict`` labels it chunk by chunk and ``dask.array.to_npy_stack`` writes the
labels from the workers (they are never gathered on the client). The same model
is then fitted in process (on the memory-mapped file, or on the generated rows)
and its labels compared with the Dask ones: all of them when n <= --check-all,
else those of --check-chunks chunks spread over the array. Run from the
repository root:

    python benchmarks/bench_dask.py --n 10000000 --from-npy /tmp/X.npy
    python benchmarks/bench_dask.py --n 100000000 --from-npy /data/X.npy --workers 2

Prints the figures (fit time, labelling time, worker and client peak RSS, the
comparison); ``--kill-worker`` SIGKILLs one worker process when the first chunk
of labels is done (the pass goes on; the labels must still be equal);
``--out FILE`` appends the figures to FILE as a markdown section with the
command, machine and date (for ``benchmarks/README.md``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import shutil
import signal
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _rss import reset_peak, status_kb


def shells_block(block_id, rows, d, k, seed):
    """``rows`` points on k noisy concentric shells (radii 1..k), its own seed."""
    rng = np.random.default_rng([seed, block_id])
    u = rng.standard_normal((rows, d), dtype=np.float32)
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    r = rng.integers(1, k + 1, rows).astype(np.float32)
    return u * r[:, None] + np.float32(0.05) * rng.standard_normal((rows, d), dtype=np.float32)


def chunk_sizes(n, chunk):
    return [chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])


def dask_shells(n, d, k, chunk, seed):
    import dask.array as da

    def make(block_info=None):
        info = block_info[None]
        i = info["chunk-location"][0]
        return shells_block(i, info["chunk-shape"][0], d, k, seed)

    return da.map_blocks(
        make,
        chunks=(tuple(chunk_sizes(n, chunk)), (d,)),
        dtype=np.float32,
        meta=np.empty((0, 0), np.float32),
    )


def write_npy(path, n, d, k, chunk, seed):
    """The same rows as :func:`dask_shells`, written chunk by chunk into a .npy."""
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d))
    start = 0
    for i, rows in enumerate(chunk_sizes(n, chunk)):
        out[start : start + rows] = shells_block(i, rows, d, k, seed)
        start += rows
        if i % 16 == 15:
            out.flush()
    out.flush()
    del out


def peak_rss_mib():
    """This process's peak resident set (ru_maxrss), in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker_pids():
    return os.getpid()


def kill_plugin(scheduler, pids):
    """A scheduler plugin that SIGKILLs the worker finishing the first task of the
    labelling pass (to_npy_stack fuses predict into its tasks: any key but the
    model's and the file's)."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    class Kill(SchedulerPlugin):
        killed = None

        def transition(self, key, start, finish, *args, stimulus_id, **kwargs):
            name = str(key[0] if isinstance(key, tuple) else key)
            if self.killed or finish != "memory" or name.startswith(("mbkkm-model", "original-")):
                return
            worker = kwargs.get("worker")
            if worker in pids:
                left = sum(ts.state != "memory" for ts in scheduler.tasks.values())
                os.kill(pids[worker], signal.SIGKILL)
                self.killed = dict(worker=worker, pid=pids[worker], key=key, tasks_left=left)

    plugin = Kill()
    scheduler.add_plugin(plugin, name="bench-kill")
    return plugin


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=250_000, help="rows per Dask chunk")
    ap.add_argument("--workers", type=int, default=2, help="LocalCluster worker processes")
    ap.add_argument("--threads-per-worker", type=int, default=1)
    ap.add_argument("--from-npy", metavar="PATH", help="read the rows from this .npy file")
    ap.add_argument("--labels-out", metavar="DIR", help="to_npy_stack folder (default: a temp)")
    ap.add_argument(
        "--gamma", default="0.1", help="a float, or mean-distance (then equal to rounding)"
    )
    ap.add_argument("--max-iter", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--tau", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check-all", type=int, default=20_000_000, help="compare all labels up to n")
    ap.add_argument("--check-chunks", type=int, default=8, help="chunks compared above that")
    ap.add_argument("--no-memory", action="store_true", help="skip the in-process run")
    ap.add_argument("--kill-worker", action="store_true", help="SIGKILL a worker mid-labelling")
    ap.add_argument("--out", metavar="FILE", help="append a markdown section to FILE")
    args = ap.parse_args()

    import dask.array as da
    import distributed

    from mbkkm import MiniBatchKernelKMeans
    from mbkkm._dask import read_npy

    gamma = args.gamma if args.gamma == "mean-distance" else float(args.gamma)
    params = dict(
        n_clusters=args.k,
        gamma=gamma,
        batch_size=args.batch_size,
        tau=args.tau,
        max_iter=args.max_iter,
        random_state=args.seed,
    )
    print(f"uptime: {os.getloadavg()} (load 1, 5, 15 min), {os.cpu_count()} cores")
    if args.from_npy and not os.path.exists(args.from_npy):
        t0 = time.perf_counter()
        write_npy(args.from_npy, args.n, args.d, args.k, args.chunk, args.seed)
        print(
            f"wrote {args.from_npy} ({args.n:,} x {args.d} float32) in "
            f"{time.perf_counter() - t0:.1f}s"
        )
    peak_reset = reset_peak()  # the client's peak from here on
    labels_dir = args.labels_out or tempfile.mkdtemp(prefix="mbkkm-labels-")
    if os.path.exists(labels_dir):
        shutil.rmtree(labels_dir)
    row = {}
    with (
        distributed.LocalCluster(
            n_workers=args.workers,
            threads_per_worker=args.threads_per_worker,
            processes=True,
            dashboard_address=":0",
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        client.run(lambda: __import__("mbkkm.cluster"))  # the workers' imports, untimed
        if args.from_npy:
            X = read_npy(args.from_npy, chunk_rows=args.chunk)
            if X.shape != (args.n, args.d):
                raise SystemExit(f"{args.from_npy} has shape {X.shape}, not {(args.n, args.d)}")
        else:
            X = dask_shells(args.n, args.d, args.k, args.chunk, args.seed)
        t0 = time.perf_counter()
        km = MiniBatchKernelKMeans(**params, compute_labels=False).fit(X)
        row["fit_s"] = time.perf_counter() - t0
        plugin = (
            kill_plugin(cluster.scheduler, client.run(worker_pids)) if args.kill_worker else None
        )
        t0 = time.perf_counter()
        da.to_npy_stack(labels_dir, km.predict(X))  # the workers write the labels
        row["label_s"] = time.perf_counter() - t0
        if plugin is not None:
            row["killed"] = plugin.killed
            cluster.scheduler.remove_plugin(name="bench-kill")
        row["worker_peak_mib"] = client.run(peak_rss_mib)
        row["client_peak_mib"] = (status_kb("VmHWM") or 0) / 1024
    print(
        f"dask ({args.workers} workers x {args.threads_per_worker} thread): fit "
        f"{row['fit_s']:.2f}s, labels (predict + to_npy_stack) {row['label_s']:.2f}s; worker "
        f"peak RSS {sorted(round(v) for v in row['worker_peak_mib'].values())} MiB; client peak "
        f"RSS {row['client_peak_mib']:.0f} MiB"
        + ("" if peak_reset else " (since start: the peak could not be reset)")
    )
    if args.kill_worker:
        print(f"killed mid-labelling: {row.get('killed')}")
    labels = da.from_npy_stack(labels_dir, mmap_mode="r")
    if not args.no_memory:
        if args.from_npy:
            Xm = np.load(args.from_npy, mmap_mode="r")  # the fit reads the batch rows only
        else:
            Xm = np.concatenate(
                [shells_block(i, s, args.d, args.k, args.seed) for i, s in enumerate(X.chunks[0])]
            )
        t0 = time.perf_counter()
        ref = MiniBatchKernelKMeans(**params, compute_labels=False).fit(Xm)
        t_fit = time.perf_counter() - t0
        same_model = np.array_equal(ref.support_vectors_, km.support_vectors_) and np.array_equal(
            ref.dual_coef_, km.dual_coef_
        )
        bounds = np.concatenate([[0], np.cumsum(X.chunks[0])])
        if args.n <= args.check_all:
            t0 = time.perf_counter()
            expect = ref.predict(Xm)
            t_pred = time.perf_counter() - t0
            got = np.concatenate(
                [np.load(os.path.join(labels_dir, f"{i}.npy")) for i in range(len(X.chunks[0]))]
            )
            equal, checked = np.array_equal(expect, got), args.n
        else:  # a sample of whole chunks, spread over the array
            picks = np.unique(np.linspace(0, len(X.chunks[0]) - 1, args.check_chunks).astype(int))
            equal, checked, t_pred = True, 0, 0.0
            for i in picks:
                a, b = bounds[i], bounds[i + 1]
                t0 = time.perf_counter()
                expect = ref.predict(np.asarray(Xm[a:b]))
                t_pred += time.perf_counter() - t0
                got = np.load(os.path.join(labels_dir, f"{i}.npy"))
                equal &= bool(np.array_equal(expect, got))
                checked += b - a
        print(
            f"in process: fit {t_fit:.2f}s, predict {t_pred:.2f}s ({checked:,} rows); same model: "
            f"{same_model}; labels equal to the Dask labels: {equal} "
            f"({'all' if checked == args.n else 'sample of'} {checked:,} rows)"
        )
        row.update(same_model=same_model, equal=equal, checked=checked)
    counts = np.bincount(labels[: min(args.n, 1_000_000)].compute(), minlength=args.k)
    print(f"cluster sizes in the first {min(args.n, 1_000_000):,} labels: {counts.tolist()}")
    if not args.labels_out:
        shutil.rmtree(labels_dir)
    if args.out:
        cmd = "python benchmarks/bench_dask.py " + " ".join(sys.argv[1:])
        text = (
            f"\n\n## Dask: fit + labels on {args.n:,} x {args.d} float32 (issue 39)\n\n"
            f"Command: `{cmd}`  \nMachine: {platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}; LocalCluster {args.workers} worker processes "
            f"x {args.threads_per_worker} thread.  \nDate: {datetime.date.today()}.\n\n"
            f"| fit (s) | labels (s) | worker peak RSS (MiB) | client peak RSS (MiB) | "
            f"labels equal in process |\n|---|---|---|---|---|\n"
            f"| {row['fit_s']:.2f} | {row['label_s']:.2f} | "
            f"{max(row['worker_peak_mib'].values()):.0f} | {row['client_peak_mib']:.0f} | "
            f"{row.get('equal')} ({row.get('checked', 0):,} rows) |\n"
        )
        with open(args.out, "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
