"""Mini-batch kernel k-means against its alternatives, same data, one process (issue 5, section 2).

For each dataset (paper preprocessing and Gaussian widths: PenDigits sigma = sqrt(5),
Letter 3.0, MNIST 5.8301, gamma = 1 / (2 sigma^2)), every timing covers everything
from the raw X to the labels of all points; quality is the ARI against the true
classes, mean and std over ``--seeds`` seeds. Wall and process CPU time are both
recorded, with ``os.getloadavg()`` (the machine is shared: under load the wall
times are inflated, CPU time much less so).

1. ``MiniBatchKernelKMeans`` (b = 1024, tau = 200, 200 iterations, k-means++ on
   3 b points) vs ``KernelKMeans`` (full batch, same gamma, k-means++ on all
   points, default tol = 1e-4 / max_iter = 300), with its iteration count and
   time split (kernel matrix / k-means++ init / Lloyd iterations); second line:
   ``KernelKMeans(tol=0, max_iter=200)`` (the paper's 200 iterations; tol = 0
   still stops at strict convergence, after which further iterations change
   nothing, so the time of literally 200 iterations is also extrapolated as
   kernel + init + 200 x measured time per Lloyd iteration).
2. Nystroem feature map + scikit-learn ``MiniBatchKMeans`` (b = 1024, as many
   epochs as 200 batches, ``max_no_improvement=None``, ``tol=0``) over a range of
   ``n_components``; the size whose total time matches ours gives the equal-time
   comparison.
3. Non-kernel mini-batch k-means: scikit-learn ``MiniBatchKMeans`` (same
   settings, time per step = fit time / ``n_steps_``; also ``partial_fit`` per
   batch) and ``mbkkm.MiniBatchKMeans`` (200 iterations), vs the kernel
   version's time per iteration ((fit + labels - labelling pass) / 200, init
   included).

MNIST (70,000 points): the full-batch kernel matrix (19.6 GB float32) is not
built here; its cost is extrapolated from measured K(X[:r], X) blocks (kernel
rows) and their products with an (n, k) coefficient matrix (one Lloyd iteration
is K @ A): stored-matrix path = kernel once + iterations x product, blockwise
path (what KernelKMeans does beyond ``max_kernel_memory``) = iterations x
(kernel + product).

Usage::

    .venv/bin/python benchmarks/bench_vs_alternatives.py [--datasets pendigits letter mnist]
        [--seeds 3] [--nystroem-sizes 100 200 400 800 1600] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import numpy as np
from sklearn.metrics import adjusted_rand_score

import mbkkm.cluster._kernel_kmeans as kk_mod
from mbkkm import KernelKMeans, MiniBatchKernelKMeans, MiniBatchKMeans
from mbkkm.datasets import load_dataset
from mbkkm.kernels import resolve_kernel

DATA_HOME = Path(__file__).resolve().parents[1] / ".." / "shared" / "datasets"
SIGMA = {"pendigits": math.sqrt(5.0), "letter": 3.0, "mnist": 5.8301}
K_CLUSTERS = {"pendigits": 10, "letter": 26, "mnist": 10}
B, TAU, ITERS = 1024, 200, 200
SPEEDUP_TARGET = 50.0
ARI_MARGIN = 0.01


def load():
    return round(os.getloadavg()[0], 2)


class Timer:
    def __enter__(self):
        self.load0 = load()
        self.t0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t0
        self.cpu = time.process_time() - self.c0
        self.load1 = load()


def stats(values):
    a = np.asarray(values, dtype=float)
    return {
        "mean": float(a.mean()),
        "std": float(a.std()),
        "median": float(np.median(a)),
        "values": [float(v) for v in a],
    }


# ------------------------------------------------------------------ algorithms
def run_minibatch_kernel(X, y, k, gamma, seed):
    km = MiniBatchKernelKMeans(
        k, gamma=gamma, batch_size=B, tau=TAU, max_iter=ITERS, random_state=seed
    )
    with Timer() as t:
        km.fit(X)
    with Timer() as tl:
        lab = km.predict(X)
    assert np.array_equal(lab, km.labels_)
    return {
        "wall": t.wall,
        "cpu": t.cpu,
        "load": [t.load0, t.load1],
        "label_pass": tl.wall,
        "ari": adjusted_rand_score(y, km.labels_),
        "n_support": int(km.support_vectors_.shape[0]),
        "per_iter": (t.wall - tl.wall) / ITERS,
    }


class _TimedKernelKMeans(KernelKMeans):
    """KernelKMeans with its phases timed (kernel matrix, init, Lloyd)."""

    def _prepare(self, X, sample_weight):
        t = time.perf_counter()
        out = super()._prepare(X, sample_weight)
        self._t_prepare = time.perf_counter() - t
        return out

    def _initial_inner(self, *args, **kwargs):
        t = time.perf_counter()
        out = super()._initial_inner(*args, **kwargs)
        self._t_init = time.perf_counter() - t
        return out


_lloyd_times = []
_orig_lloyd = kk_mod.kernel_lloyd


def _timed_lloyd(*args, **kwargs):
    t = time.perf_counter()
    out = _orig_lloyd(*args, **kwargs)
    _lloyd_times.append(time.perf_counter() - t)
    return out


kk_mod.kernel_lloyd = _timed_lloyd  # the estimator looks it up in its module


def run_full_batch(X, y, k, gamma, seed, **params):
    km = _TimedKernelKMeans(k, gamma=gamma, random_state=seed, **params)
    _lloyd_times.clear()
    with Timer() as t:
        km.fit(X)
    lloyd = _lloyd_times[-1]
    return {
        "wall": t.wall,
        "cpu": t.cpu,
        "load": [t.load0, t.load1],
        "ari": adjusted_rand_score(y, km.labels_),
        "n_iter": int(km.n_iter_),
        "kernel": km._t_prepare,
        "init": km._t_init,
        "lloyd": lloyd,
        "per_lloyd_iter": lloyd / max(1, km.n_iter_),
        "other": t.wall - km._t_prepare - km._t_init - lloyd,
    }


def sk_epochs(n):
    """scikit-learn epochs giving at least 200 batches of 1024."""
    return max(1, math.ceil(ITERS * B / n))


def run_nystroem(X, y, k, gamma, seed, n_components):
    from sklearn.cluster import MiniBatchKMeans as SkMBKM
    from sklearn.kernel_approximation import Nystroem

    with Timer() as t:
        Z = Nystroem(
            kernel="rbf", gamma=gamma, n_components=n_components, random_state=seed
        ).fit_transform(X)
        t_map = time.perf_counter() - t.t0
        km = SkMBKM(
            k,
            batch_size=B,
            max_iter=sk_epochs(X.shape[0]),
            max_no_improvement=None,
            tol=0.0,
            n_init=1,
            random_state=seed,
        ).fit(Z)
    return {
        "wall": t.wall,
        "cpu": t.cpu,
        "load": [t.load0, t.load1],
        "ari": adjusted_rand_score(y, km.labels_),
        "n_steps": int(km.n_steps_),
        "dtype": str(Z.dtype),
        "map": t_map,
    }


def run_sklearn_mbkm(X, y, k, seed):
    from sklearn.cluster import MiniBatchKMeans as SkMBKM

    km = SkMBKM(
        k,
        batch_size=B,
        max_iter=sk_epochs(X.shape[0]),
        max_no_improvement=None,
        tol=0.0,
        n_init=1,
        random_state=seed,
    )
    with Timer() as t:
        km.fit(X)
    # partial_fit per batch (init on the first call excluded)
    rng = np.random.default_rng(seed)
    pk = SkMBKM(k, batch_size=B, n_init=1, random_state=seed)
    pk.partial_fit(X[rng.integers(0, X.shape[0], B)])
    per = []
    for _ in range(50):
        Xb = X[rng.integers(0, X.shape[0], B)]
        t0 = time.perf_counter()
        pk.partial_fit(Xb)
        per.append(time.perf_counter() - t0)
    return {
        "wall": t.wall,
        "cpu": t.cpu,
        "load": [t.load0, t.load1],
        "ari": adjusted_rand_score(y, km.labels_),
        "n_steps": int(km.n_steps_),
        "per_iter": t.wall / km.n_steps_,
        "partial_fit_median": float(np.median(per)),
    }


def run_mbkkm_mbkm(X, y, k, seed):
    km = MiniBatchKMeans(k, batch_size=B, max_iter=ITERS, random_state=seed)
    with Timer() as t:
        km.fit(X)
    return {
        "wall": t.wall,
        "cpu": t.cpu,
        "load": [t.load0, t.load1],
        "ari": adjusted_rand_score(y, km.labels_),
        "per_iter": t.wall / ITERS,
    }


def estimate_full_batch(X, k, gamma, rows, repeats=3, iters=ITERS):
    """Extrapolated full-batch cost from K(X[:rows], X) and its product with A (n, k)."""
    n = X.shape[0]
    kern = resolve_kernel("rbf", gamma=gamma)
    buf = np.empty((rows, n), dtype=X.dtype)
    A = np.zeros((n, k), dtype=X.dtype)
    A[np.arange(n), np.random.default_rng(0).integers(0, k, n)] = 1.0 / (n / k)
    tk, tp, loads = [], [], []
    for _ in range(repeats):
        loads.append(load())
        t0 = time.perf_counter()
        kern(X[:rows], X, out=buf)
        tk.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        buf @ A
        tp.append(time.perf_counter() - t0)
    kernel_full = float(np.median(tk)) * n / rows
    product_full = float(np.median(tp)) * n / rows
    return {
        "rows": rows,
        "kernel_block_s": float(np.median(tk)),
        "product_block_s": float(np.median(tp)),
        "loads": loads,
        "kernel_matrix_s": kernel_full,
        "product_per_iter_s": product_full,
        "matrix_gb": n * n * X.dtype.itemsize / 1e9,
        "stored_total_s": kernel_full + iters * product_full,
        "blockwise_total_s": iters * (kernel_full + product_full),
        "iters": iters,
    }


# ---------------------------------------------------------------------- driver
def bench_dataset(name, args):
    X, y = load_dataset(name, data_home=args.data_home)
    X = np.ascontiguousarray(X, dtype=np.float32)
    gamma = 1.0 / (2.0 * SIGMA[name] ** 2)
    k = K_CLUSTERS[name]
    n = X.shape[0]
    seeds = list(range(args.seeds))
    out = {"dataset": name, "n": n, "d": X.shape[1], "k": k, "gamma": gamma}
    print(
        f"\n## {name}: n = {n}, d = {X.shape[1]}, k = {k}, gamma = {gamma:.5g}, load {load()}",
        flush=True,
    )

    mb = [run_minibatch_kernel(X, y, k, gamma, s) for s in seeds]
    out["minibatch_kernel"] = mb
    mb_wall = stats([r["wall"] for r in mb])
    mb_ari = stats([r["ari"] for r in mb])
    print(
        f"MiniBatchKernelKMeans: fit+labels {mb_wall['median']:.2f} s (median; "
        f"{[round(v, 2) for v in mb_wall['values']]}), cpu "
        f"{np.median([r['cpu'] for r in mb]):.2f} s, labelling pass "
        f"{np.median([r['label_pass'] for r in mb]):.2f} s, ARI {mb_ari['mean']:.4f} +- "
        f"{mb_ari['std']:.4f}, m = {[r['n_support'] for r in mb]}, loads "
        f"{[r['load'] for r in mb]}",
        flush=True,
    )

    if name == "mnist" or args.skip_full:
        out["full_batch_estimate"] = est = estimate_full_batch(X, k, gamma, args.estimate_rows)
        print(
            f"Full batch (estimated from {est['rows']} kernel rows, loads {est['loads']}): "
            f"kernel matrix {est['kernel_matrix_s']:.1f} s ({est['matrix_gb']:.1f} GB), "
            f"K @ A per iteration {est['product_per_iter_s']:.2f} s; "
            f"{est['iters']} iterations stored {est['stored_total_s']:.0f} s "
            f"(x{est['stored_total_s'] / mb_wall['median']:.0f} of mini-batch), blockwise "
            f"{est['blockwise_total_s']:.0f} s "
            f"(x{est['blockwise_total_s'] / mb_wall['median']:.0f})",
            flush=True,
        )
        for fb_iters in (20, 50):
            s = est["kernel_matrix_s"] + fb_iters * est["product_per_iter_s"]
            print(f"  stored path, {fb_iters} iterations: {s:.0f} s (x{s / mb_wall['median']:.1f})")
    else:
        for label, params in (
            ("default tol=1e-4", {}),
            ("tol=0, max_iter=200", {"tol": 0.0, "max_iter": ITERS}),
        ):
            fb = [run_full_batch(X, y, k, gamma, s, **params) for s in seeds]
            out[f"full_batch {label}"] = fb
            fw = stats([r["wall"] for r in fb])
            fa = stats([r["ari"] for r in fb])
            med = {
                key: float(np.median([r[key] for r in fb]))
                for key in ("kernel", "init", "lloyd", "other", "per_lloyd_iter", "cpu")
            }
            speedup = fw["median"] / mb_wall["median"]
            print(
                f"KernelKMeans ({label}): {fw['median']:.2f} s (median; "
                f"{[round(v, 2) for v in fw['values']]}), cpu {med['cpu']:.2f} s, ARI "
                f"{fa['mean']:.4f} +- {fa['std']:.4f}, iterations "
                f"{[r['n_iter'] for r in fb]}; split: kernel matrix {med['kernel']:.2f} s, "
                f"k-means++ init {med['init']:.2f} s, Lloyd {med['lloyd']:.2f} s "
                f"({med['per_lloyd_iter'] * 1e3:.1f} ms / iteration), other "
                f"{med['other']:.2f} s; loads {[r['load'] for r in fb]}"
            )
            print(
                f"  speed-up of mini-batch: {speedup:.2f}x (target {SPEEDUP_TARGET:.0f}x, "
                f"ratio to target {speedup / SPEEDUP_TARGET:.3f}); ARI difference "
                f"{mb_ari['mean'] - fa['mean']:+.4f} (allowed >= -{ARI_MARGIN})",
                flush=True,
            )
            if params:
                lit = med["kernel"] + med["init"] + ITERS * med["per_lloyd_iter"]
                print(
                    f"  literally {ITERS} Lloyd iterations (extrapolated): {lit:.2f} s, "
                    f"speed-up {lit / mb_wall['median']:.2f}x",
                    flush=True,
                )

    # Nystroem + MiniBatchKMeans over sizes
    if name != "mnist" or args.mnist_nystroem:
        ny = {}
        for nc in args.nystroem_sizes:
            if nc > n:
                continue
            rs = [run_nystroem(X, y, k, gamma, s, nc) for s in seeds]
            ny[nc] = rs
            w = stats([r["wall"] for r in rs])
            a = stats([r["ari"] for r in rs])
            print(
                f"Nystroem({nc}) + sklearn MiniBatchKMeans ({rs[0]['n_steps']} steps): "
                f"{w['median']:.2f} s (x{w['median'] / mb_wall['median']:.2f} of ours; "
                f"feature map {np.median([r['map'] for r in rs]):.2f} s), ARI "
                f"{a['mean']:.4f} +- {a['std']:.4f}, loads {[r['load'] for r in rs]}",
                flush=True,
            )
        out["nystroem"] = ny
        fits = [
            nc for nc, rs in ny.items() if np.median([r["wall"] for r in rs]) <= mb_wall["median"]
        ]
        if fits:
            nc = max(fits)
            a = np.mean([r["ari"] for r in ny[nc]])
            print(
                f"  equal wall time: Nystroem n_components = {nc} (largest within our "
                f"{mb_wall['median']:.2f} s): ARI {a:.4f} vs ours {mb_ari['mean']:.4f} -> "
                f"{'mbkkm' if mb_ari['mean'] > a else 'Nystroem'} better"
            )
        else:
            print("  every Nystroem size took longer than ours")

    # non-kernel mini-batch k-means
    sk = [run_sklearn_mbkm(X, y, k, s) for s in seeds]
    mk = [run_mbkkm_mbkm(X, y, k, s) for s in seeds]
    out["sklearn_mbkm"], out["mbkkm_mbkm"] = sk, mk
    mb_it = float(np.median([r["per_iter"] for r in mb]))
    sk_it = float(np.median([r["per_iter"] for r in sk]))
    sk_pf = float(np.median([r["partial_fit_median"] for r in sk]))
    mk_it = float(np.median([r["per_iter"] for r in mk]))
    print(
        f"sklearn MiniBatchKMeans (non-kernel, {sk[0]['n_steps']} steps): fit "
        f"{np.median([r['wall'] for r in sk]):.3f} s, {sk_it * 1e3:.2f} ms / step "
        f"(partial_fit {sk_pf * 1e3:.2f} ms / batch), ARI "
        f"{np.mean([r['ari'] for r in sk]):.4f} +- {np.std([r['ari'] for r in sk]):.4f}"
    )
    print(
        f"mbkkm MiniBatchKMeans (non-kernel): fit {np.median([r['wall'] for r in mk]):.3f} s, "
        f"{mk_it * 1e3:.2f} ms / iteration, ARI {np.mean([r['ari'] for r in mk]):.4f} +- "
        f"{np.std([r['ari'] for r in mk]):.4f}"
    )
    print(
        f"kernel mini-batch: {mb_it * 1e3:.2f} ms / iteration = x{mb_it / sk_it:.1f} sklearn "
        f"step, x{mb_it / sk_pf:.1f} sklearn partial_fit, x{mb_it / mk_it:.1f} mbkkm "
        f"MiniBatchKMeans; load {load()}",
        flush=True,
    )
    return out


def profile_fit(name, args):
    from pyinstrument import Profiler
    from threadpoolctl import threadpool_limits

    X, _ = load_dataset(name, data_home=args.data_home)
    X = np.ascontiguousarray(X, dtype=np.float32)
    gamma = 1.0 / (2.0 * SIGMA[name] ** 2)
    km = MiniBatchKernelKMeans(
        K_CLUSTERS[name], gamma=gamma, batch_size=B, tau=TAU, max_iter=ITERS, random_state=0
    )
    prof = Profiler(interval=0.0005)
    with threadpool_limits(args.profile_threads):
        l0 = load()
        t, c = time.perf_counter(), time.process_time()
        prof.start()
        km.fit(X)
        prof.stop()
        wall, cpu = time.perf_counter() - t, time.process_time() - c
    print(
        f"\n## profile {name}: fit + labels {wall:.2f} s wall, {cpu:.2f} s cpu, BLAS "
        f"threads {args.profile_threads or 'default'}, load {l0} -> {load()}"
    )
    print(prof.output_text(unicode=False, color=False))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--datasets", nargs="+", default=["pendigits", "letter", "mnist"], choices=sorted(SIGMA)
    )
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--data-home", default=str(DATA_HOME))
    p.add_argument(
        "--nystroem-sizes", type=int, nargs="+", default=[100, 200, 400, 800, 1600, 3200]
    )
    p.add_argument(
        "--estimate-rows",
        type=int,
        default=2000,
        help="kernel rows timed for the MNIST full-batch estimate",
    )
    p.add_argument(
        "--skip-full",
        action="store_true",
        help="estimate full batch instead of running it (all datasets)",
    )
    p.add_argument("--mnist-nystroem", action="store_true")
    p.add_argument(
        "--profile",
        action="store_true",
        help="only profile one MiniBatchKernelKMeans fit (+ labels) per dataset "
        "with pyinstrument (--profile-threads 1: BLAS limited to one thread)",
    )
    p.add_argument("--profile-threads", type=int, default=None)
    p.add_argument("--json", help="write the raw results here")
    args = p.parse_args()
    print(f"load {os.getloadavg()}, cpus {os.cpu_count()}")
    if args.profile:
        for name in args.datasets:
            profile_fit(name, args)
        return
    results = [bench_dataset(name, args) for name in args.datasets]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main()
