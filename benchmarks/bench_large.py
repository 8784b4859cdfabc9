"""Large-data benchmark: 10,000,000 x 16 float32 concentric shells (issue 5, section 3).

Every measurement runs in a fresh subprocess (``--child ...``) so that peak RSS
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``) belongs to that measurement only.

* ``inmem``: data made in memory by ``make_shells``; fit (200 iterations, b = 1024,
  tau = 200, k = 3) + labels of all points, timed together; peak RSS minus the
  RSS right after data creation; ARI on all points and on a 100,000-point
  subsample (``predict``); then the labelling pass (``predict`` on all points)
  under ``threadpool_limits(1)`` and with the default thread count, alternated.
* ``memmap``: the same array written to a temporary ``.npy`` file by the parent,
  opened in the child with ``np.load(..., mmap_mode="r")``; fit
  (``compute_labels=False``) + ``predict`` on the memmap; peak RSS and
  ``/proc/self/status`` RssAnon / RssFile at the end (file-backed pages count in
  RSS, RssAnon is what was really allocated).
* ``profile``: pyinstrument profile of the labelling pass on the first
  ``--profile-rows`` rows under ``threadpool_limits(1)`` (serial path: the
  profiler samples the main thread only).
* ``tile`` (not run by default): one-thread cost of each elementwise pass of the
  rbf tile, and of a variant that folds them into the GEMM.

Usage::

    .venv/bin/python benchmarks/bench_large.py [--n 10000000] [--gamma 0.125]
        [--parts inmem memmap profile tile] [--json out.json]

Record ``os.getloadavg()`` with each figure: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

TARGET_S = 180.0  # fit + labels within 3 minutes
GIB = 2**30


def proc_status():
    """VmRSS, RssAnon, RssFile, VmHWM of this process, bytes."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM"):
                out[key] = int(rest.split()[0]) * 1024
    return out


def peak_rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def load():
    return [round(v, 2) for v in os.getloadavg()]


def estimator(args):
    from mbkkm import MiniBatchKernelKMeans

    return MiniBatchKernelKMeans(
        n_clusters=3,
        gamma=args.gamma,
        batch_size=1024,
        tau=200,
        max_iter=200,
        random_state=args.seed,
    )


def subsample_ari(km, X, y, rng_seed=0, size=100_000):
    from sklearn.metrics import adjusted_rand_score

    idx = np.sort(np.random.default_rng(rng_seed).choice(X.shape[0], size, replace=False))
    return float(adjusted_rand_score(y[idx], km.predict(np.asarray(X[idx]))))


def child_inmem(args):
    from sklearn.metrics import adjusted_rand_score
    from threadpoolctl import threadpool_info, threadpool_limits

    from mbkkm.datasets import make_shells

    res = {"part": "inmem", "n": args.n, "gamma": args.gamma}
    t = time.perf_counter()
    X, y = make_shells(args.n, 16, n_shells=3, random_state=0)
    res["make_shells_s"] = time.perf_counter() - t
    res["data_bytes"] = X.nbytes + y.nbytes
    res["X_bytes"] = X.nbytes
    res["rss_after_data"] = proc_status()["VmRSS"]
    res["peak_rss_after_data"] = peak_rss()
    res["load_before"] = load()
    km = estimator(args)
    t, c = time.perf_counter(), time.process_time()
    km.fit(X)  # compute_labels=True: labels_ of all points
    res["fit_labels_s"] = time.perf_counter() - t
    res["fit_labels_cpu_s"] = time.process_time() - c
    res["load_after"] = load()
    res["peak_rss"] = peak_rss()
    res["status_end"] = proc_status()
    res["n_support"] = int(km.support_vectors_.shape[0])
    res["ari_all"] = float(adjusted_rand_score(y, km.labels_))
    res["ari_sub100k"] = subsample_ari(km, X, y)
    # fit alone (no labels) for the split
    km2 = estimator(args).set_params(compute_labels=False)
    t = time.perf_counter()
    km2.fit(X)
    res["fit_only_s"] = time.perf_counter() - t
    res["blas_threads_default"] = [
        p.get("num_threads") for p in threadpool_info() if p.get("user_api") == "blas"
    ]
    times = {"default": [], "limit1": []}
    loads = {"default": [], "limit1": []}
    for _ in range(args.label_repeats):
        for mode in ("default", "limit1"):
            loads[mode].append(load()[0])
            t = time.perf_counter()
            if mode == "limit1":
                with threadpool_limits(1):
                    lab = km.predict(X)
            else:
                lab = km.predict(X)
            times[mode].append(time.perf_counter() - t)
            assert np.array_equal(lab, km.labels_)
    res["label_times"] = times
    res["label_loads"] = loads
    return res


def child_memmap(args):
    from mbkkm.datasets import make_shells  # noqa: F401  (same import cost as inmem)

    res = {"part": "memmap", "n": args.n, "gamma": args.gamma, "path": args.path}
    X = np.load(args.path, mmap_mode="r")
    y = np.load(args.path + ".y.npy")
    res["is_memmap"] = isinstance(X, np.memmap)
    res["status_after_open"] = proc_status()
    res["peak_rss_after_open"] = peak_rss()
    res["load_before"] = load()
    km = estimator(args).set_params(compute_labels=False)
    t = time.perf_counter()
    km.fit(X)
    res["fit_s"] = time.perf_counter() - t
    res["status_after_fit"] = proc_status()
    t = time.perf_counter()
    lab = km.predict(X)
    res["predict_s"] = time.perf_counter() - t
    res["load_after"] = load()
    res["peak_rss"] = peak_rss()
    res["status_end"] = proc_status()
    from sklearn.metrics import adjusted_rand_score

    res["ari_all"] = float(adjusted_rand_score(y, lab))
    return res


def child_profile(args):
    from pyinstrument import Profiler
    from threadpoolctl import threadpool_limits

    from mbkkm.datasets import make_shells

    X, _ = make_shells(args.profile_rows, 16, n_shells=3, random_state=0)
    km = estimator(args).set_params(compute_labels=False).fit(X)
    res = {
        "part": "profile",
        "rows": args.profile_rows,
        "n_support": int(km.support_vectors_.shape[0]),
        "load_before": load(),
    }
    prof = Profiler(interval=0.001)
    with threadpool_limits(1):
        km.predict(X[:10_000])  # warm up
        t = time.perf_counter()
        prof.start()
        km.predict(X)
        prof.stop()
        res["predict_1thread_s"] = time.perf_counter() - t
    res["load_after"] = load()
    res["profile"] = prof.output_text(unicode=False, color=False)
    return res


def _best(fn, repeats=7):
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def _tile_costs(kern, g, R, m, d, rng):
    Y = rng.standard_normal((m, d), dtype=np.float32)
    # rows near support points, so that the rounding of small distances shows
    X = Y[rng.integers(0, m, R)] + 0.05 * rng.standard_normal((R, d), dtype=np.float32)
    K = np.empty((R, m), np.float32)
    yn = np.einsum("ij,ij->i", Y, Y)
    xn = np.einsum("ij,ij->i", X, X)
    r = {}
    r["kernel (as now)"] = _best(lambda: kern(X, Y, out=K, Y_norms_sq=yn))
    r["GEMM X @ Y.T"] = _best(lambda: np.matmul(X, Y.T, out=K))
    r["K *= 2g"] = _best(lambda: np.multiply(K, 2 * g, out=K))
    r["K -= g|y|^2"] = _best(lambda: np.subtract(K, g * yn[None, :], out=K))
    r["K -= g|x|^2"] = _best(lambda: np.subtract(K, g * xn[:, None], out=K))
    r["minimum(K, 0)"] = _best(lambda: np.minimum(K, 0, out=K))
    K.fill(-1.0)
    r["exp(K)"] = _best(lambda: np.exp(K, out=K))
    Xa = np.empty((R, d + 2), np.float32)
    Ya = np.empty((m, d + 2), np.float32)
    Ya[:, :d], Ya[:, d], Ya[:, d + 1] = Y, -g * yn, 1.0

    def fused():
        Xa[:, :d] = X
        Xa[:, :d] *= 2 * g
        Xa[:, d] = 1.0
        Xa[:, d + 1] = -g * np.einsum("ij,ij->i", X, X)
        np.matmul(Xa, Ya.T, out=K)
        np.minimum(K, 0, out=K)
        np.exp(K, out=K)

    r["fused (augmented GEMM, clip, exp)"] = _best(fused)
    ref = kern(X, Y, Y_norms_sq=yn)
    fused()
    r["fused max abs diff"] = float(np.abs(K - ref).max())
    r["fused max rel diff"] = float((np.abs(K - ref) / np.maximum(ref, 1e-30)).max())
    return r


def child_tile(args):
    """Cost of each pass of the rbf kernel tile, one thread, and of a fused variant.

    Shapes: the labelling tile of ``assign_fused`` (R x m, about 512 KiB) and the
    step's block (b x m). The fused variant folds 2 gamma, -gamma |y|^2 and
    -gamma |x|^2 into one GEMM with two extra columns (x' = [2 gamma x, 1,
    -gamma |x|^2], y' = [y, -gamma |y|^2, 1]), leaving two elementwise passes
    (clip, exp) instead of five.
    """
    from threadpoolctl import threadpool_limits

    from mbkkm.kernels import resolve_kernel

    rng = np.random.default_rng(0)
    g = np.float32(args.gamma)
    kern = resolve_kernel("rbf", gamma=float(g))
    res = {"part": "tile", "load_before": load(), "shapes": {}}
    with threadpool_limits(1):
        for label, (R, m) in {"labelling tile": (128, 1024), "step block": (1024, 3600)}.items():
            res["shapes"][f"{label} {R} x {m}"] = _tile_costs(kern, g, R, m, 16, rng)
    res["load_after"] = load()
    return res


def run_child(part, args, extra=()):
    cmd = [
        sys.executable,
        __file__,
        "--child",
        part,
        "--n",
        str(args.n),
        "--gamma",
        str(args.gamma),
        "--seed",
        str(args.seed),
        "--label-repeats",
        str(args.label_repeats),
        "--profile-rows",
        str(args.profile_rows),
        *extra,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        print(out.stdout, out.stderr, file=sys.stderr)
        raise RuntimeError(f"child {part} failed ({out.returncode})")
    return json.loads(out.stdout.strip().splitlines()[-1])


def write_memmap_file(args, directory):
    """Write X (and y) to .npy files in a subprocess-free way, chunk by chunk."""
    from mbkkm.datasets import make_shells

    X, y = make_shells(args.n, 16, n_shells=3, random_state=0)
    path = os.path.join(directory, "shells.npy")
    np.save(path, X)
    np.save(path + ".y.npy", y)
    del X, y
    return path


def fmt_gib(b):
    return f"{b / GIB:.3f} GiB"


def report(results):
    for r in results:
        part = r["part"]
        print(f"\n== {part} (n = {r.get('n', r.get('rows'))}) ==")
        if part == "inmem":
            extra = r["peak_rss"] - r["rss_after_data"]
            print(
                f"make_shells {r['make_shells_s']:.1f} s; X {fmt_gib(r['X_bytes'])}, "
                f"X + y {fmt_gib(r['data_bytes'])}"
            )
            print(
                f"fit + labels: {r['fit_labels_s']:.1f} s (cpu {r['fit_labels_cpu_s']:.1f} s), "
                f"target {TARGET_S:.0f} s, ratio {r['fit_labels_s'] / TARGET_S:.2f}; "
                f"fit alone {r['fit_only_s']:.1f} s; load {r['load_before']} -> "
                f"{r['load_after']}"
            )
            print(
                f"RSS after data {fmt_gib(r['rss_after_data'])}, peak "
                f"{fmt_gib(r['peak_rss'])}, peak - after data {fmt_gib(extra)} "
                f"(target < 1 GiB above the data: ratio {extra / GIB:.2f})"
            )
            print(
                "end status: " + ", ".join(f"{k} {fmt_gib(v)}" for k, v in r["status_end"].items())
            )
            print(
                f"ARI all points {r['ari_all']:.4f}, 100k subsample {r['ari_sub100k']:.4f}; "
                f"support m = {r['n_support']}"
            )
            for mode, ts in r["label_times"].items():
                print(
                    f"labelling pass ({mode}): median {np.median(ts):.2f} s "
                    f"of {[round(t, 2) for t in ts]}, load {r['label_loads'][mode]}"
                )
            print(f"BLAS threads by default: {r['blas_threads_default']}")
        elif part == "memmap":
            extra = r["peak_rss"] - r["status_after_open"]["VmRSS"]
            print(
                f"memmap: {r['is_memmap']}; fit {r['fit_s']:.1f} s, predict "
                f"{r['predict_s']:.1f} s, total {r['fit_s'] + r['predict_s']:.1f} s; "
                f"load {r['load_before']} -> {r['load_after']}"
            )
            print(
                f"peak RSS {fmt_gib(r['peak_rss'])} (after open "
                f"{fmt_gib(r['status_after_open']['VmRSS'])}, peak - open {fmt_gib(extra)})"
            )
            for key in ("status_after_fit", "status_end"):
                print(f"{key}: " + ", ".join(f"{k} {fmt_gib(v)}" for k, v in r[key].items()))
            print(f"ARI all points {r['ari_all']:.4f}")
        elif part == "tile":
            print(f"one thread; load {r['load_before']} -> {r['load_after']}")
            for shape, rr in r["shapes"].items():
                base = rr["kernel (as now)"]
                print(f"{shape}:")
                for key, v in rr.items():
                    if "diff" in key:
                        print(f"  {key}: {v:.3g}")
                    else:
                        print(f"  {key}: {v * 1e6:.0f} us ({v / base:.2f} of the kernel)")
        elif part == "profile":
            print(
                f"predict on {r['rows']} rows, 1 thread: {r['predict_1thread_s']:.2f} s "
                f"(m = {r['n_support']}), load {r['load_before']} -> {r['load_after']}"
            )
            print(r["profile"])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=10_000_000)
    p.add_argument("--gamma", type=float, default=0.125)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--label-repeats", type=int, default=2)
    p.add_argument("--profile-rows", type=int, default=2_000_000)
    p.add_argument(
        "--parts",
        nargs="+",
        default=["inmem", "memmap", "profile"],
        choices=["inmem", "memmap", "profile", "tile"],
    )
    p.add_argument("--json", help="write the raw results here")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        fn = {
            "inmem": child_inmem,
            "memmap": child_memmap,
            "profile": child_profile,
            "tile": child_tile,
        }
        print(json.dumps(fn[args.child](args)))
        return
    results = []
    for part in args.parts:
        print(f"[{time.strftime('%H:%M:%S')}] {part} ... load {load()}", flush=True)
        if part == "memmap":
            with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as d:
                path = write_memmap_file(args, d)
                results.append(run_child(part, args, ["--path", path]))
        else:
            results.append(run_child(part, args))
        report(results[-1:])
        sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
