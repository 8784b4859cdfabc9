"""Time of one mini-batch iteration against the GEMM it cannot avoid.

For each dataset, a steady-state :class:`mbkkm._core.WindowState` (k windows
warmed up by ``--warmup`` iterations, so every window has its steady length of
about tau + b/k points; m = number of support points) is advanced by
:func:`mbkkm._core.minibatch_step` on fresh batches, and each step is timed
together with, on the same batch and the same support (interleaved, so that the
noise of a shared machine hits all three alike):

* ``gemm``: one float32 GEMM ``Xb @ Y.T`` of shapes (b x d) by (d x (m + b)),
  ``Y = [support; Xb]``, into a preallocated output (the floor);
* ``limit``: the plain NumPy expression of the same kernel values,
  ``np.exp(-gamma * (|a|^2 + |b|^2 - 2 Xb @ Y.T))`` in float32 (GEMM + exp, written
  as a user would: the yardstick of issue 11, not mbkkm's own kernel function);
* ``kernel``: mbkkm's rbf kernel block ``kernel(Xb, Y)``, for information.

Then the labelling pass (:func:`mbkkm._core.assign` over all n points, with the
estimator's chunk size) is timed and its kernel GEMM rate (2 n m d flop) compared
with the plain GEMM's rate.

Targets (issue 11): iteration <= 1.3 x the limit at k = 10 on any data (MNIST,
PenDigits, uniform random data), <= 1.5 x at k = 1000 with tau = 2 (m held near
the k = 10 value); the labelling GEMM rate is reported against the plain GEMM's.

``--device-formulation`` (issue 18) also times, in the same interleaved rounds, the
device-resident iteration of :mod:`mbkkm._core._pool` on torch CPU tensors (one
eager iteration of the fit loop, from a state warmed up on the same batches): the
fixed-shape formulation the torch backend runs, measured on this CPU against the
numpy host step, and against torch's own GEMM + exp of the same shapes (m rows and
the padded M + 1 + b).

Usage::

    .venv/bin/python benchmarks/bench_iteration.py                  # both datasets
    .venv/bin/python benchmarks/bench_iteration.py --dataset mnist --repeats 30
    .venv/bin/python benchmarks/bench_iteration.py --profile        # + pyinstrument
    .venv/bin/python benchmarks/bench_iteration.py --dataset uniform --no-labels
    .venv/bin/python benchmarks/bench_iteration.py --dataset mnist --n-clusters 1000 --tau 2
    .venv/bin/python benchmarks/bench_iteration.py --device-formulation --no-labels
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from mbkkm._core import LEARNING_RATES, StepConfig, assign, init_state, minibatch_step
from mbkkm._core._memory import chunk_rows
from mbkkm._core._windows import assign_parallel
from mbkkm.backends._threads import effective_n_threads
from mbkkm.kernels import resolve_kernel

# ../shared/datasets beside the clone (or beside the folder of a git worktree)
SHARED = next(
    (
        p
        for p in (REPO.parent / "shared" / "datasets", REPO.parents[1] / "shared" / "datasets")
        if p.exists()
    ),
    REPO.parent / "shared" / "datasets",
)

# name -> (preprocessing, gamma)
SETTINGS = {
    "mnist": ("divide_255", 1.0 / (2 * 5.8301**2)),
    "pendigits": ("standardize", 0.1),
    "uniform": ("uniform", 1.0 / 784),  # 30,000 x 784 uniform [0, 1) points
}


def target(k):
    """Max iteration / limit (issue 11): 1.3 at k <= 10, 1.5 at k = 1000."""
    return 1.3 if k <= 10 else 1.5


def plain_limit(Xb, Y, gamma):
    """The plain float32 GEMM + exp of the iteration's shapes (the yardstick)."""
    G = Xb @ Y.T
    na = np.einsum("ij,ij->i", Xb, Xb)
    nb = np.einsum("ij,ij->i", Y, Y)
    return np.exp(np.float32(-gamma) * (na[:, None] + nb[None, :] - 2 * G))


def load(name):
    """(X float32, source) via mbkkm.datasets, else straight from the shared npz."""
    prep = SETTINGS[name][0]
    if prep == "uniform":
        X = np.random.default_rng(0).random((30000, 784), dtype=np.float32)
        return X, "numpy uniform [0, 1)"
    try:
        from mbkkm.datasets import load_dataset

        X, _ = load_dataset(
            name, data_home=SHARED, preprocess=prep, dtype=np.float32, download=False
        )
        return np.ascontiguousarray(X, dtype=np.float32), "mbkkm.datasets.load_dataset"
    except Exception as exc:  # pragma: no cover - fallback
        print(f"  (mbkkm.datasets failed: {exc}; reading the npz directly)")
    X = np.load(SHARED / f"{name}.npz")["X"].astype(np.float64)
    if prep == "divide_255":
        X /= 255.0
    else:
        sd = X.std(axis=0)
        sd[sd == 0] = 1
        X = (X - X.mean(axis=0)) / sd
    return np.ascontiguousarray(X, dtype=np.float32), "np.load"


def machine_info():
    lines = []
    model = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    lines.append(f"CPU: {model}, {os.cpu_count()} logical cores")
    lines.append(f"numpy {np.__version__}, python {platform.python_version()}")
    try:
        from threadpoolctl import threadpool_info

        for info in threadpool_info():
            if info.get("user_api") == "blas":
                lines.append(
                    f"BLAS: {info['internal_api']} {info.get('version')} "
                    f"({info.get('architecture')}, {info['num_threads']} threads, "
                    f"{Path(info['filepath']).name})"
                )
    except Exception:  # pragma: no cover
        pass
    return lines


def _timeit(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class DeviceFormulation:
    """The torch fit loop (mbkkm._core._loop) on CPU tensors, stepped one eager iteration
    at a time on given batches (the same the numpy state sees)."""

    def __init__(self, X, centers, kernel, batches, *, tau, rate):
        import torch

        from mbkkm._core import _loop

        self.torch = torch
        self.X = torch.from_numpy(X)
        cfg = StepConfig(kernel=kernel, rate=rate, tau=tau, renormalize=True)
        state = init_state(torch.from_numpy(centers), kernel)
        self.loop = _loop.fit_loop(state, self.X, batches, None, cfg)
        self.i = 0

    def step(self):
        self.loop.state.device._eager(self.i)
        self.i += 1

    def warm(self, n):
        """n iterations through the loop (read-backs, capacity growth), then steps."""
        self.loop.run_until(n)
        self.i = n

    @property
    def layout(self):
        return self.loop.state.layout

    def limit(self, Xb_idx, rows, gamma):
        """torch float32 GEMM + exp of the batch against ``rows`` rows of the pool."""
        torch = self.torch
        Xb = self.X[torch.from_numpy(Xb_idx)]
        Y = self.loop.state.pool.rows[:rows]
        na, nb = (Xb * Xb).sum(1), (Y * Y).sum(1)
        return torch.exp(-gamma * (na[:, None] + nb[None, :] - 2 * (Xb @ Y.T)))


def bench_dataset(
    name,
    *,
    b,
    tau,
    k,
    repeats,
    warmup,
    seed,
    profile,
    label,
    label_rows=None,
    device_formulation=False,
):
    X, source = load(name)
    n, d = X.shape
    gamma = SETTINGS[name][1]
    kernel = resolve_kernel("rbf", gamma=gamma)
    rng = np.random.default_rng(seed)
    rate = LEARNING_RATES["adaptive"]
    options = StepConfig(kernel, rate, tau=tau, renormalize=True)
    centers = X[rng.choice(n, k, replace=False)]
    state = init_state(centers, kernel)
    batches = rng.integers(0, n, size=(warmup + repeats, b))
    dev = (
        DeviceFormulation(X, centers, kernel, batches, tau=tau, rate=rate)
        if device_formulation
        else None
    )

    def step(Xb):
        return minibatch_step(state, Xb, options)

    for i in range(warmup):
        step(X[batches[i]])
    if dev is not None:
        dev.warm(warmup)
    sizes = np.bincount(state.labels, minlength=k)
    print(
        f"\n== {name}: n={n}, d={d}, k={k}, b={b}, tau={tau}, gamma={gamma:.6g} "
        f"(data from {source}, float32)"
    )
    print(
        f"   after {warmup} warm-up iterations: m = {state.support.shape[0]} support "
        f"points, window lengths {sizes.min()}..{sizes.max()}"
    )

    t_step, t_gemm, t_kern, t_lim, ms = [], [], [], [], []
    t_dev, t_tlim, t_tpad = [], [], []
    for r in range(repeats):
        Xb = X[batches[warmup + r]]
        m = state.support.shape[0]
        if dev is not None:
            idx = batches[warmup + r]
            t_tlim.append(_timeit(lambda idx=idx, m=m: dev.limit(idx, m + b, gamma)))
            t_tpad.append(_timeit(lambda idx=idx: dev.limit(idx, dev.layout.n_rows, gamma)))
            t_dev.append(_timeit(dev.step))
        Y = np.concatenate([state.support, Xb], axis=0)
        out = np.empty((b, m + b), dtype=np.float32)
        np.matmul(Xb, Y.T, out=out)  # touch the buffer once
        t_gemm.append(_timeit(lambda Xb=Xb, Y=Y, out=out: np.matmul(Xb, Y.T, out=out)))
        t_kern.append(_timeit(lambda Xb=Xb, Y=Y: kernel(Xb, Y)))
        t_lim.append(_timeit(lambda Xb=Xb, Y=Y: plain_limit(Xb, Y, gamma)))
        ms.append(m)
        t_step.append(_timeit(lambda Xb=Xb: step(Xb)))
    med = statistics.median
    m_med = int(med(ms))
    gemm, kern, it, lim = med(t_gemm), med(t_kern), med(t_step), med(t_lim)
    flops = 2.0 * b * (m_med + b) * d
    res = {
        "name": name,
        "n": n,
        "d": d,
        "m": m_med,
        "m_range": (min(ms), max(ms)),
        "gemm": gemm,
        "kernel": kern,
        "iter": it,
        "limit": lim,
        "k": k,
        "iter_over_limit": it / lim,
        "gemm_gflops": flops / gemm / 1e9,
        "iter_over_gemm": it / gemm,
        "iter_over_kernel": it / kern,
        "kernel_over_gemm": kern / gemm,
        "t_step": t_step,
        "t_gemm": t_gemm,
        "t_kern": t_kern,
    }
    print(f"   medians over {repeats} iterations (m = {min(ms)}..{max(ms)}):")
    print(
        f"     GEMM (b x d)(d x (m+b))     {gemm * 1e3:8.2f} ms  ({res['gemm_gflops']:.1f} GFLOP/s)"
    )
    print(f"     GEMM + rbf kernel function  {kern * 1e3:8.2f} ms  ({kern / gemm:.2f} x GEMM)")
    print(f"     limit: plain GEMM + np.exp     {lim * 1e3:8.2f} ms  ({lim / gemm:.2f} x GEMM)")
    print(f"     minibatch_step              {it * 1e3:8.2f} ms")
    print(
        f"     ratios: iteration / limit = {it / lim:.2f}, iteration / GEMM = "
        f"{it / gemm:.2f}, iteration / (GEMM + mbkkm kernel) = {it / kern:.2f}"
    )
    pr_g = med([s / g for s, g in zip(t_step, t_gemm)])
    pr_k = med([s / q for s, q in zip(t_step, t_kern)])
    print(
        f"     (median of per-iteration ratios: {pr_g:.2f} and {pr_k:.2f}; ratios of the "
        f"minima: {min(t_step) / min(t_gemm):.2f} and {min(t_step) / min(t_kern):.2f}; "
        f"minima {min(t_gemm) * 1e3:.2f} / {min(t_kern) * 1e3:.2f} / "
        f"{min(t_step) * 1e3:.2f} ms)"
    )
    res.update(
        iter_over_gemm_min=min(t_step) / min(t_gemm), iter_over_kernel_min=min(t_step) / min(t_kern)
    )
    pr_l = med([s / q for s, q in zip(t_step, t_lim)])
    res["iter_over_limit_paired"] = pr_l
    ok = it / lim <= target(k)
    verdicts = [ok]
    print(
        f"     target iteration <= {target(k)} x limit: {it / lim:.2f} (median of "
        f"per-iteration ratios {pr_l:.2f}) -> {'PASS' if ok else 'FAIL'}"
    )

    if label:
        rows = label_rows or chunk_rows(None, m_med + 3 * k + 2, X.dtype.itemsize)
        S = state.support
        ms_l = S.shape[0]
        # References, timed between the labelling runs (same machine load):
        # the iteration-shaped GEMM and a GEMM of one labelling chunk's shape.
        Xb = X[rng.integers(0, n, b)]
        Y = np.concatenate([S, Xb], axis=0)
        out_b = np.empty((b, Y.shape[0]), dtype=np.float32)
        c = min(rows, n)
        A = X[:c]
        out_c = np.empty((c, ms_l), dtype=np.float32)
        np.matmul(A, S.T, out=out_c)
        t_lab, r_b, r_c = [], [], []
        for _ in range(max(1, min(3, repeats))):
            tb = min(_timeit(lambda: np.matmul(Xb, Y.T, out=out_b)) for _ in range(5))
            tc = min(_timeit(lambda: np.matmul(A, S.T, out=out_c)) for _ in range(2))
            t_lab.append(_timeit(lambda: assign(X, state, kernel, chunk_rows=rows)))
            r_b.append(2.0 * b * Y.shape[0] * d / tb / 1e9)
            r_c.append(2.0 * c * ms_l * d / tc / 1e9)
        t_l = med(t_lab)
        lab_rate = 2.0 * n * ms_l * d / t_l / 1e9
        ref_rate, cg_rate = med(r_b), med(r_c)
        res.update(
            label_time=t_l,
            label_gflops=lab_rate,
            label_chunk=rows,
            chunk_gemm_gflops=cg_rate,
            label_ref_gflops=ref_rate,
            label_frac=lab_rate / ref_rate,
            label_frac_chunk=lab_rate / cg_rate,
        )
        t_par = med(
            [
                _timeit(lambda: assign_parallel(X, state, kernel, chunk_rows=rows))
                for _ in range(max(1, min(3, repeats)))
            ]
        )
        par_rate = 2.0 * n * ms_l * d / t_par / 1e9
        res.update(
            label_par_time=t_par, label_par_gflops=par_rate, label_par_frac=par_rate / ref_rate
        )
        print(
            f"   labelling: assign over n={n} points against m={ms_l}, "
            f"chunks of {rows} rows: {t_l:.3f} s (median of {len(t_lab)})"
        )
        print(
            f"     kernel GEMM rate (2 n m d / time) {lab_rate:.1f} GFLOP/s; plain GEMM "
            f"{ref_rate:.1f} GFLOP/s (iteration shape), {cg_rate:.1f} GFLOP/s "
            f"(one labelling chunk, {c} x {d} by {d} x {ms_l})"
        )
        print(
            f"     labelling at {res['label_frac']:.0%} of the iteration GEMM rate, "
            f"{res['label_frac_chunk']:.0%} of the chunk GEMM rate"
        )
        print(
            f"     threaded assign_parallel ({effective_n_threads()} threads, as "
            f"the estimator): {t_par:.3f} s, {par_rate:.1f} GFLOP/s = "
            f"{res['label_par_frac']:.0%} of the iteration GEMM rate"
        )
    if dev is not None:
        td, tl, tp = med(t_dev), med(t_tlim), med(t_tpad)
        lay = dev.layout
        res.update(
            device_iter=td,
            device_over_np=td / it,
            device_over_torch_limit=td / tl,
            device_over_padded_limit=td / tp,
        )
        print(
            f"   device formulation (torch CPU, eager, pool L={lay.L} slots, M={lay.M} rows, "
            f"{len(lay.chunks)} chunk(s)):"
        )
        print(
            f"     iteration {td * 1e3:8.2f} ms = {td / it:.2f} x the numpy step; torch "
            f"GEMM + exp {tl * 1e3:.2f} ms (m + b rows) / {tp * 1e3:.2f} ms (M + 1 + b "
            f"rows): {td / tl:.2f} / {td / tp:.2f} x"
        )
    res["pass"] = all(verdicts)

    if profile:
        try:
            from pyinstrument import Profiler
        except ImportError:
            print("   (--profile needs pyinstrument: .venv/bin/pip install pyinstrument)")
        else:
            batches = [X[rng.integers(0, n, b)] for _ in range(repeats)]
            prof = Profiler(interval=0.0005)
            prof.start()
            for Xb in batches:
                step(Xb)
            prof.stop()
            print(f"   pyinstrument profile of {repeats} iterations:")
            print(prof.output_text(unicode=False, color=False, show_all=False))
    return res


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=[*SETTINGS, "all"], default="all")
    parser.add_argument(
        "--repeats",
        type=int,
        default=20,
        help="timed iterations per dataset (default: %(default)s)",
    )
    parser.add_argument(
        "--warmup", type=int, default=30, help="iterations before timing (default: %(default)s)"
    )
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--tau", type=int, default=200)
    parser.add_argument("--n-clusters", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-labels", action="store_true", help="skip the labelling pass")
    parser.add_argument(
        "--profile", action="store_true", help="profile the iterations with pyinstrument"
    )
    parser.add_argument(
        "--device-formulation",
        action="store_true",
        help="also time the device-resident iteration on torch CPU tensors",
    )
    parser.add_argument(
        "--label-chunk-rows",
        type=int,
        default=None,
        help="rows per labelling chunk (default: the estimator's, from "
        "scikit-learn's working_memory)",
    )
    args = parser.parse_args(argv)
    print("bench_iteration: " + " ".join(sys.argv[1:] if argv is None else argv))
    print(time.strftime("%Y-%m-%d %H:%M:%S %Z"))
    for line in machine_info():
        print(line)
    names = list(SETTINGS) if args.dataset == "all" else [args.dataset]
    results = [
        bench_dataset(
            name,
            b=args.batch_size,
            tau=args.tau,
            k=args.n_clusters,
            repeats=args.repeats,
            warmup=args.warmup,
            seed=args.seed,
            profile=args.profile,
            label=not args.no_labels,
            label_rows=args.label_chunk_rows,
            device_formulation=args.device_formulation,
        )
        for name in names
    ]
    print("\nSummary")
    for r in results:
        extra = f", labelling {r['label_frac']:.0%} of GEMM rate" if "label_frac" in r else ""
        if "device_iter" in r:
            extra += (
                f"; device formulation {r['device_iter'] * 1e3:.2f} ms = "
                f"{r['device_over_np']:.2f} x numpy"
            )
        print(
            f"  {r['name']:9s} d={r['d']:3d} m={r['m']:5d}: iteration "
            f"{r['iter'] * 1e3:.2f} ms = {r['iter_over_limit']:.2f} x limit "
            f"(k = {r['k']}, target {target(r['k'])}) = {r['iter_over_gemm']:.2f} x GEMM"
            f"{extra}: "
            f"{'PASS' if r['pass'] else 'FAIL'}"
        )
    return 0 if all(r["pass"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
