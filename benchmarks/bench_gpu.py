"""GPU benchmark of issue 11: mini-batch and full-batch kernel k-means on one GPU.

How to run on a GPU (H100 or H200; about 1-3 minutes, 8 at most)
-----------------------------------------------------------------
From the repository root, with the torch extra installed (``make venv``, or
``pip install -e ".[torch]"`` with a CUDA build of torch) and MNIST at
``../shared/datasets/mnist.npz`` (an npz with ``X`` uint8 70000 x 784 and ``y``;
``--data`` names another path)::

    timeout 480 .venv/bin/python benchmarks/bench_gpu.py --out gpu_results.md

``timeout 480`` stops it after 8 minutes whatever happens; every section is
written to ``--out`` as soon as it is measured, so a run stopped early keeps
what it measured. ``--skip-numpy`` skips the numpy CPU baseline of (b) (the
slowest part on a machine with few cores). Smoke test of every section on
torch CPU tensors, small sizes (about 10-20 s; what ``tests/test_bench_gpu.py``
runs; without the MNIST file, synthetic data of MNIST's shape are used)::

    .venv/bin/python benchmarks/bench_gpu.py --device cpu --quick --out /tmp/gpu.md

What it measures (float32, rbf with the paper's MNIST gamma = 1 / (2 * 5.8301^2),
seed 0; every time on the device is bracketed by ``torch.cuda.synchronize()``,
after warm-up runs that are not counted):

(a) One MNIST iteration in steady state (b = 1024, tau = 200, k = 10; windows
    grown by warm-up iterations, m support points) against the plain float32
    GEMM + exp of the same shapes, ``(b x d)(d x (m + b))`` and
    ``torch.exp(-g * (|a|^2 + |b|^2 - 2 a b^T))``, timed in the same run.
    Target: iteration <= 3 x (GEMM + exp).
(b) MNIST fit + labels of all points (``MiniBatchKernelKMeans(...).fit(X)`` on
    a tensor on the device, 200 iterations, ``labels_`` included), against
    numpy on the machine's CPU. Target: <= 0.2 s.
(c) The same with b = 16,384 and tau = 4,000. Target: <= 3 s. The GEMM floor
    (iterations x one steady-state GEMM of that shape) is printed beside it.
(d) k = 100 against k = 10 with m held equal (tau = 2000 / k), one steady-state
    iteration each. Target: ratio <= 1.5.
(e) Full-batch ``KernelKMeans`` on MNIST on the GPU (the 70,000^2 float32
    kernel, 19.6 GB, stored on the card when it fits its free memory, else
    recomputed in blocks each iteration) against the mini-batch fit of (b):
    times, iterations and ARIs against the true digits.
(f) A torch-profiler count of kernel launches (and host copies and
    synchronisations) per steady-state iteration of (a); on the CPU, the aten
    operators per iteration instead.

Every ratio is printed, with PASS/FAIL against the targets on a CUDA device
(the smoke run on the CPU is not judged).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import traceback
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from sklearn.metrics import adjusted_rand_score

from mbkkm import KernelKMeans, MiniBatchKernelKMeans
from mbkkm._core import LEARNING_RATES, init_state, minibatch_step
from mbkkm.backends import get_backend
from mbkkm.kernels import resolve_kernel

DEFAULT_DATA = REPO.parent / "shared" / "datasets" / "mnist.npz"
GAMMA = 1.0 / (2 * 5.8301**2)

#: name -> (target, what the measured value is)
TARGETS = {
    "a": (3.0, "iteration / (GEMM + exp)"),
    "b": (0.2, "MNIST fit + labels (s)"),
    "c": (3.0, "b = 16384, tau = 4000 fit + labels (s)"),
    "d": (1.5, "iteration k = 100 / k = 10 (m held equal)"),
}

# Full-size settings and the --quick ones (CPU smoke test).
FULL = dict(n=None, b=1024, tau=200, k=10, iters=200, warmup=40, repeats=50, fits=3,
            big_b=16384, big_tau=4000, m_total=2000, prof_iters=5, full_max_iter=300)
QUICK = dict(n=600, b=64, tau=20, k=10, iters=5, warmup=3, repeats=3, fits=1,
             big_b=256, big_tau=50, m_total=200, prof_iters=1, full_max_iter=10)


# ----------------------------------------------------------------------- report


class Report:
    """Lines printed as they come and rewritten to the markdown file after each one."""

    def __init__(self, path):
        self.path = path
        self.lines = []
        self.verdicts = []

    def add(self, *lines):
        for line in lines:
            print(line, flush=True)
            self.lines.append(line)
        self.flush()

    def table(self, header, rows):
        blank = [""] if self.lines and self.lines[-1] else []
        self.add(*blank, "| " + " | ".join(header) + " |",
                 "|" + "---|" * len(header),
                 *("| " + " | ".join(str(c) for c in row) + " |" for row in rows), "")

    def flush(self):
        if self.path is not None:
            Path(self.path).write_text("\n".join(self.lines) + "\n")


def verdict(rep, key, value, judged):
    target, what = TARGETS[key]
    ratio = value / target
    word = ("PASS" if value <= target else "FAIL") if judged else "not judged (CPU smoke run)"
    rep.verdicts.append((key, what, target, value, ratio, word))
    rep.add(f"**Target ({key})** {what} <= {target:g}: measured {value:.4g} "
            f"({ratio:.2f} x the target) -> {word}")


# ------------------------------------------------------------------------- data


def load(path, n, quick):
    """(X float32 in [0, 1], y, source): MNIST from ``path``, else synthetic data of its
    shape (784 features, 10 classes) when the file is missing."""
    if Path(path).exists():
        with np.load(path, allow_pickle=False) as f:
            X, y = f["X"], f["y"]
        if n is not None:
            X, y = X[:n], y[:n]
        return X.astype(np.float32) / np.float32(255.0), np.asarray(y), str(path)
    n = n or 70000
    rng = np.random.RandomState(0)
    centers = rng.rand(10, 784).astype(np.float32)
    y = rng.randint(0, 10, n)
    X = np.clip(centers[y] + 0.3 * rng.randn(n, 784).astype(np.float32), 0, 1)
    return X.astype(np.float32), y, f"synthetic ({path} not found)"


def cpu_name():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


# -------------------------------------------------------------------- harnesses


class Device:
    def __init__(self, name):
        import torch

        self.torch = torch
        self.dev = torch.device(name)
        self.cuda = self.dev.type == "cuda"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize(self.dev)

    def timed(self, fn):
        self.sync()
        t0 = time.perf_counter()
        out = fn()
        self.sync()
        return time.perf_counter() - t0, out

    def label(self):
        torch = self.torch
        if self.cuda:
            props = torch.cuda.get_device_properties(self.dev)
            return (f"{props.name} ({props.total_memory / 2**30:.0f} GiB), torch "
                    f"{torch.__version__}, CUDA {torch.version.cuda}")
        return f"{cpu_name()} (torch {torch.__version__} on the CPU, {os.cpu_count()} cores)"


class SteadyState:
    """A mini-batch state grown to its steady window lengths, stepped on fresh batches."""

    def __init__(self, dev, X, *, k, b, tau, warmup, n_batches, seed=0):
        nx = get_backend(X)
        self.dev, self.X, self.nx = dev, X, nx
        self.kernel = resolve_kernel("rbf", gamma=GAMMA)
        self.rate = LEARNING_RATES["adaptive"]
        self.tau = tau
        rng = np.random.RandomState(seed)
        n = X.shape[0]
        self.state = init_state(nx.take(X, nx.index(rng.choice(n, k, replace=False))),
                                self.kernel)
        self.batches = nx.index(rng.randint(0, n, size=(warmup + n_batches, b)))
        self.i = 0
        for _ in range(warmup):
            self.step()
        dev.sync()

    def step(self):
        Xb = self.nx.take(self.X, self.batches[self.i % self.batches.shape[0]])
        self.i += 1
        minibatch_step(self.state, Xb, self.kernel, self.rate, tau=self.tau,
                       renormalize=True)

    @property
    def m(self):
        return int(self.state.support.shape[0])

    def time_steps(self, repeats):
        t, _ = self.dev.timed(lambda: [self.step() for _ in range(repeats)])
        return t / repeats

    def yardsticks(self, repeats):
        """Mean times of the plain GEMM and of GEMM + exp of this iteration's shapes."""
        torch = self.dev.torch
        Xb = self.nx.take(self.X, self.batches[self.i % self.batches.shape[0]])
        Y = torch.cat([self.state.support, Xb])  # (m + b, d)
        g = GAMMA

        def gemm():
            return Xb @ Y.T

        def gemm_exp():
            a2 = (Xb * Xb).sum(1)
            b2 = (Y * Y).sum(1)
            return torch.exp(-g * (a2[:, None] + b2[None, :] - 2 * (Xb @ Y.T)))

        out = {}
        for name, fn in (("gemm", gemm), ("gemm_exp", gemm_exp)):
            fn()  # warm-up
            t, _ = self.dev.timed(lambda fn=fn: [fn() for _ in range(repeats)])
            out[name] = t / repeats
        return out, tuple(Xb.shape), tuple(Y.shape)


def profile_counts(ss, iters):
    """Kernel launches, host copies and synchronisations per iteration (CUDA), or aten
    operators per iteration (CPU), from torch.profiler over ``iters`` iterations."""
    from torch.profiler import ProfilerActivity, profile

    dev = ss.dev
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.cuda else [])
    with profile(activities=acts) as prof:
        for _ in range(iters):
            ss.step()
        dev.sync()
    events = list(prof.events())
    names = [e.name for e in events]
    out = {}
    if dev.cuda:
        from torch.autograd import DeviceType

        on_gpu = [e.name for e in events if e.device_type == DeviceType.CUDA]
        copies = [nm for nm in on_gpu if nm.startswith(("Memcpy", "Memset"))]
        out["GPU kernels"] = (len(on_gpu) - len(copies)) / iters
        out["GPU memcpy/memset"] = len(copies) / iters
        out["cudaLaunchKernel calls"] = sum(
            nm in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC",
                   "cuLaunchKernelEx") for nm in names) / iters
        out["cudaMemcpyAsync calls"] = sum(nm == "cudaMemcpyAsync" for nm in names) / iters
        out["synchronisations"] = sum(
            nm in ("cudaStreamSynchronize", "cudaDeviceSynchronize") for nm in names) / iters
    else:
        top = [e for e in events if e.name.startswith("aten::") and e.cpu_parent is None]
        out["aten operators (top level)"] = len(top) / iters
        out["aten operators (all levels)"] = sum(nm.startswith("aten::")
                                                 for nm in names) / iters
    return out


def minibatch(args_k, b, tau, iters, seed=0):
    return MiniBatchKernelKMeans(n_clusters=args_k, kernel="rbf", gamma=GAMMA, batch_size=b,
                                 tau=tau, max_iter=iters, random_state=seed)


# --------------------------------------------------------------------- sections


def section_a_f(rep, dev, Xd, P, judged):
    rep.add("## (a) One steady-state iteration against GEMM + exp", "")
    ss = SteadyState(dev, Xd, k=P["k"], b=P["b"], tau=P["tau"], warmup=P["warmup"],
                     n_batches=P["repeats"])
    t_it = ss.time_steps(P["repeats"])
    ys, xs, yshape = ss.yardsticks(P["repeats"])
    ratio = t_it / ys["gemm_exp"]
    rep.table(["what", "time (ms)", "iteration / this"], [
        [f"iteration (k={P['k']}, b={P['b']}, tau={P['tau']}, m={ss.m})",
         f"{t_it * 1e3:.3f}", "1.00"],
        [f"plain GEMM {xs} x {yshape[::-1]}", f"{ys['gemm'] * 1e3:.3f}",
         f"{t_it / ys['gemm']:.2f}"],
        ["plain GEMM + exp(-g (|a|^2 + |b|^2 - 2ab^T))", f"{ys['gemm_exp'] * 1e3:.3f}",
         f"{ratio:.2f}"],
    ])
    rep.add(f"Means over {P['repeats']} iterations after {P['warmup']} warm-up iterations.")
    verdict(rep, "a", ratio, judged)

    rep.add("", "## (f) Launches per iteration (torch.profiler)", "")
    counts = profile_counts(ss, P["prof_iters"])
    rep.table(["count per iteration", "value"], [[k, f"{v:.1f}"] for k, v in counts.items()])


def section_b(rep, dev, X, Xd, y, P, judged, skip_numpy):
    rep.add("## (b) MNIST fit + labels", "")
    k, b, tau, iters = P["k"], P["b"], P["tau"], P["iters"]
    warm = minibatch(k, b, tau, min(5, iters))
    dev.timed(lambda: warm.fit(Xd).labels_)  # CUDA context, kernels, allocator
    times, est = [], None
    for _ in range(P["fits"]):
        t, est = dev.timed(lambda: minibatch(k, b, tau, iters).fit(Xd))
        times.append(t)
    t_dev = min(times)
    lab = est.labels_.cpu().numpy()
    ari = adjusted_rand_score(y, lab)
    rows = [[f"torch ({dev.dev})", f"{t_dev:.3f}", ", ".join(f"{t:.3f}" for t in times),
             f"{ari:.3f}", f"{est.inertia_ / len(y):.4f}"]]
    t_np = None
    if not skip_numpy:
        t0 = time.perf_counter()
        ref = minibatch(k, b, tau, iters).fit(X)
        t_np = time.perf_counter() - t0
        rows.append([f"numpy ({os.cpu_count()} cores)", f"{t_np:.3f}", "1 run",
                     f"{adjusted_rand_score(y, ref.labels_):.3f}",
                     f"{ref.inertia_ / len(y):.4f}"])
    rep.table(["backend", "fit + labels (s, best)", "runs (s)", "ARI vs digits",
               "inertia / n"], rows)
    rep.add(f"k={k}, b={b}, tau={tau}, {iters} iterations, n={len(y)}, labels_ of all points "
            "included.")
    if t_np is not None:
        rep.add(f"Speed-up torch ({dev.dev}) over numpy (CPU): {t_np / t_dev:.1f}x; ARI "
                f"between the two labelings {adjusted_rand_score(ref.labels_, lab):.4f}.")
    verdict(rep, "b", t_dev, judged)
    return t_dev, ari, est.inertia_ / len(y)


def section_c(rep, dev, Xd, y, P, judged):
    rep.add("## (c) Large batches: b = {big_b}, tau = {big_tau}".format(**P), "")
    k, b, tau, iters = P["k"], P["big_b"], P["big_tau"], P["iters"]
    warm = minibatch(k, b, tau, 3)
    dev.timed(lambda: warm.fit(Xd).labels_)
    t, est = dev.timed(lambda: minibatch(k, b, tau, iters).fit(Xd))
    m = int(est.support_vectors_.shape[0])
    # The floor: one steady-state GEMM of this shape, times the iterations.
    ss = SteadyState(dev, Xd, k=k, b=b, tau=tau, warmup=min(P["warmup"], 10), n_batches=3)
    ys, _, _ = ss.yardsticks(3)
    rep.table(["what", "value"], [
        ["fit + labels (s)", f"{t:.3f}"],
        ["support points m at the end", m],
        ["ARI vs digits", f"{adjusted_rand_score(y, est.labels_.cpu().numpy()):.3f}"],
        [f"one GEMM (b x d)(d x (m + b)), m = {ss.m} (ms)", f"{ys['gemm'] * 1e3:.2f}"],
        [f"GEMM floor: {iters} x GEMM (s)", f"{iters * ys['gemm']:.3f}"],
        ["fit / GEMM floor", f"{t / (iters * ys['gemm']):.2f}"],
    ])
    verdict(rep, "c", t, judged)


def section_d(rep, dev, Xd, P, judged):
    rep.add("## (d) k = 100 against k = 10 with m held equal", "")
    res = {}
    for k in (10, 100):
        tau = max(1, P["m_total"] // k)
        ss = SteadyState(dev, Xd, k=k, b=P["b"], tau=tau, warmup=P["warmup"],
                         n_batches=P["repeats"])
        res[k] = (ss.time_steps(P["repeats"]), ss.m, tau)
    rep.table(["k", "tau", "m", "iteration (ms)"],
              [[k, tau, m, f"{t * 1e3:.3f}"] for k, (t, m, tau) in res.items()])
    ratio = res[100][0] / res[10][0]
    rep.add(f"Ratio k = 100 / k = 10: {ratio:.2f}")
    verdict(rep, "d", ratio, judged)


def section_e(rep, dev, Xd, y, P, t_mb, ari_mb, inertia_mb):
    rep.add("## (e) Full-batch KernelKMeans on the device against mini-batch", "")
    torch = dev.torch
    n = Xd.shape[0]
    need = n * n * 4
    max_iter = P["full_max_iter"]
    if dev.cuda:
        torch.cuda.empty_cache()
        free = torch.cuda.mem_get_info(dev.dev)[0]
        rep.add(f"Kernel matrix {need / 1e9:.1f} GB float32; free on the device "
                f"{free / 1e9:.1f} GB.")
        if need + 3 * 2**30 > free:
            max_iter = min(max_iter, 20)
            rep.add(f"It will not be stored: blocks of rows recomputed every iteration; "
                    f"max_iter capped at {max_iter} to bound the run time.")

    def full(iters):
        return KernelKMeans(P["k"], kernel="rbf", gamma=GAMMA, max_iter=iters,
                            max_kernel_memory=10**7, random_state=0)

    t1, one = dev.timed(lambda: full(1).fit(Xd))  # fixed costs: kernel matrix, k-means++
    t_full, est = dev.timed(lambda: full(max_iter).fit(Xd))
    ari = adjusted_rand_score(y, est.labels_.cpu().numpy())
    per_iter = (t_full - t1) / max(1, est.n_iter_ - 1)
    rep.table(["method", "fit + labels (s)", "iterations", "ARI vs digits", "inertia / n"], [
        [f"full batch ({est._kernel_storage} kernel, tol=1e-4)", f"{t_full:.3f}",
         est.n_iter_, f"{ari:.3f}", f"{est.inertia_ / n:.4f}"],
        [f"mini-batch (b={P['b']}, tau={P['tau']}, (b))", f"{t_mb:.3f}", P["iters"],
         f"{ari_mb:.3f}", f"{inertia_mb:.4f}"],
    ])
    rep.add(f"Full batch with max_iter=1 (kernel matrix + k-means++ + 1 iteration): "
            f"{t1:.3f} s; about {per_iter * 1e3:.2f} ms per further Lloyd iteration, so "
            f"200 iterations would take about {t1 + 199 * per_iter:.2f} s.",
            f"Ratio full batch / mini-batch: {t_full / t_mb:.1f}x "
            f"(200 full-batch iterations: {(t1 + 199 * per_iter) / t_mb:.1f}x); "
            f"ARI {ari:.3f} against {ari_mb:.3f}.")
    del est, one
    if dev.cuda:
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------- main


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA,
                   help="mnist.npz with X (uint8, 70000 x 784) and y (default: %(default)s)")
    p.add_argument("--device", default="cuda",
                   help="torch device: cuda, cuda:N, or cpu for a smoke run on CPU tensors "
                        "(default: %(default)s)")
    p.add_argument("--quick", action="store_true",
                   help="small sizes everywhere (the CPU smoke test)")
    p.add_argument("--skip-numpy", action="store_true",
                   help="skip the numpy CPU baseline of (b)")
    p.add_argument("--sections", default="abcdef",
                   help="which sections to run (default: %(default)s)")
    p.add_argument("--out", type=Path, default=None,
                   help="markdown file the report is written to (rewritten after each "
                        "section)")
    args = p.parse_args(argv)

    import torch

    dev_name = args.device
    if torch.device(dev_name).type == "cuda" and not torch.cuda.is_available():
        print(f"--device {dev_name}: torch sees no CUDA device; use --device cpu --quick "
              "for a smoke run")
        return 2
    dev = Device(dev_name)
    P = QUICK if args.quick else FULL
    judged = dev.cuda and not args.quick
    rep = Report(args.out)
    X, y, source = load(args.data, P["n"], args.quick)
    rep.add(f"# bench_gpu, {time.strftime('%Y-%m-%d %H:%M %Z')}", "",
            f"Device: {dev.label()}", f"CPU: {cpu_name()}, {os.cpu_count()} cores",
            f"Data: {source}, n={X.shape[0]}, d={X.shape[1]}, float32, rbf gamma="
            f"{GAMMA:.6g}", f"Command: bench_gpu.py {' '.join(argv or sys.argv[1:])}",
            "" if judged else "(quick or CPU run: sizes and times are a smoke test, not "
            "judged against the targets)", "")
    t_copy, Xd = dev.timed(lambda: torch.from_numpy(X).to(dev.dev))
    rep.add(f"Copy of X to the device: {t_copy:.3f} s", "")

    t_mb = ari_mb = inertia_mb = None
    sections = [
        ("af", lambda: section_a_f(rep, dev, Xd, P, judged)),
        ("b", lambda: section_b(rep, dev, X, Xd, y, P, judged, args.skip_numpy)),
        ("c", lambda: section_c(rep, dev, Xd, y, P, judged)),
        ("d", lambda: section_d(rep, dev, Xd, P, judged)),
    ]
    failed = []
    for keys, run in sections:
        if not any(c in args.sections for c in keys):
            continue
        t0 = time.perf_counter()
        try:
            out = run()
            if keys == "b":
                t_mb, ari_mb, inertia_mb = out
        except Exception as exc:  # report and go on with the other sections
            failed.append(keys)
            rep.add(f"**Section ({keys}) failed**: {type(exc).__name__}: {exc}", "",
                    "```", traceback.format_exc().rstrip(), "```")
            if dev.cuda:
                torch.cuda.empty_cache()
        rep.add(f"(section {keys}: {time.perf_counter() - t0:.1f} s)", "")
    if "e" in args.sections:
        t0 = time.perf_counter()
        try:
            if t_mb is None:  # (b) skipped or failed: one mini-batch fit for (e)
                t_mb, est = dev.timed(lambda: minibatch(P["k"], P["b"], P["tau"],
                                                        P["iters"]).fit(Xd))
                ari_mb = adjusted_rand_score(y, est.labels_.cpu().numpy())
                inertia_mb = est.inertia_ / len(y)
            section_e(rep, dev, Xd, y, P, t_mb, ari_mb, inertia_mb)
        except Exception as exc:
            failed.append("e")
            rep.add(f"**Section (e) failed**: {type(exc).__name__}: {exc}", "",
                    "```", traceback.format_exc().rstrip(), "```")
        rep.add(f"(section e: {time.perf_counter() - t0:.1f} s)", "")

    rep.add("## Summary", "")
    rep.table(["target", "what", "limit", "measured", "measured / limit", "verdict"],
              [[k, what, f"{lim:g}", f"{v:.4g}", f"{r:.2f}", w]
               for k, what, lim, v, r, w in rep.verdicts])
    if failed:
        rep.add(f"Sections that failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
