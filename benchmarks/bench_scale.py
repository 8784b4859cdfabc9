"""Fit time, labelling time and peak memory against n, from 10^3 to 10^9 points.

``python benchmarks/bench_scale.py`` fits and labels 20 Gaussian blobs in 16
dimensions (float32) at each n of ``--n`` (default 10^3 ... 10^7; add 1e8 for the
issue's case: 6.4 GB of data on disk, about 10 minutes on 2 cores) the way a user
would: one command, ``mbkkm fit X.npy -k 20 --labels-out labels.npy`` with its
defaults, the rows memory-mapped from a ``.npy`` file. Each run is a fresh process,
so that its memory is its own. For each n it records:

- ``fit_s`` and ``label_s``: the times the command prints (``time: fit ... s,
  labelling ... s``); ``wall_s``: the whole command, start-up and I/O included;
- ``rss_anon_mb``: the peak of the command's anonymous resident memory
  (``RssAnon`` of ``/proc/<pid>/status``, sampled every 50 ms): what it allocated,
  the memory-mapped file aside;
- ``limit_label_s``: the limit of the labelling pass, the plain float32 GEMM +
  ``np.exp`` of its shapes (n x 16 rows against the m x 16 support, in chunks
  of 8192 rows, with every core's BLAS threads), timed in this process after the
  command on ``min(n, --limit-rows)`` rows and scaled linearly to n; ``m`` is the
  fitted model's support size;
- ``ari``: adjusted Rand index of the labels against the blobs (on at most 10^6
  points drawn at random);
- ``full_batch_s``: ``KernelKMeans(20)`` on the same data where n <= ``--full-batch-max``
  (its n x n kernel: beyond that, the memory wall drawn on the figure);
- the load average before and after, the machine, the date and the commit.

Rows are appended to ``--out`` (CSV, default ``benchmarks/scale.csv``);
``--plot FILE`` draws the figure (log-log: fit, labelling and the limit against n,
peak memory on a second axis, the full batch's n x n float32 kernel against the
machine's memory) from that file alone, so the figure always shows saved numbers.

``--device cuda`` (or another torch device: ``cuda:1``; ``torch-cpu`` is the
smoke test of this path on the CPU) runs the estimators in Python instead of the
command line, the user's way for data in host memory: ``MiniBatchKernelKMeans(20,
device="cuda", compute_labels=False).fit(X)`` then ``predict(X)``, X a float32
numpy array in host memory (numpy in, numpy labels out). The rows are not written
to disk (10^9 x 16 float32 is 64 GB, more than a lent GPU machine's disk): the
child process generates the same kind of blobs on the device, block by block, into
host memory (``gen_s``). For these rows ``limit_label_s`` is the device's limit:
the host-to-device copy of X plus the device's float32 GEMM + exp of the
labelling's shapes (chunks of 65,536 rows, on ``min(n, --limit-rows)`` rows,
scaled to n), and ``device_peak_mb`` is the device's peak allocated memory during
the fit and the labelling. The full batch is not run there. ``--fold-ab`` labels
the rows a second time with the rbf tiles' fold switched (off on CUDA, where it is
the default; on elsewhere) and prints both times. The device run passes
``verbose=1`` (the memory plan and the progress lines are in its log). For 10^9
on one H100/H200 (host memory >= 100 GB; about 2.5 minutes on an H200, half of it
generating the rows)::

    timeout 400 python benchmarks/bench_scale.py --device cuda --n 1e9 --out gpu_scale.csv

The data files are kept in ``--data-dir`` (default: a folder under the system's
temporary directory) and reused by later runs.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
K, D = 20, 16
COLUMNS = [
    "n", "d", "k", "device", "m", "fit_s", "label_s", "wall_s", "limit_label_s",
    "label_vs_limit", "rss_anon_mb", "ari", "full_batch_s", "load_before",
    "load_after", "cores", "machine", "date", "commit", "gen_s", "device_peak_mb",
]  # fmt: skip
GEN_ROWS = 1_000_000  # rows generated per block


def blobs(n, data_dir, seed=0):
    """Paths of the rows (n x 16 float32) and labels (int8) of 20 blobs, written once."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path, truth = data_dir / f"blobs_{n}.npy", data_dir / f"blobs_{n}_labels.npy"
    if path.exists() and truth.exists():
        return path, truth
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-10.0, 10.0, size=(K, D)).astype(np.float32)
    X = np.lib.format.open_memmap(path.with_suffix(".tmp.npy"), "w+", np.float32, (n, D))
    y = np.lib.format.open_memmap(truth.with_suffix(".tmp.npy"), "w+", np.int8, (n,))
    for start in range(0, n, GEN_ROWS):
        stop = min(n, start + GEN_ROWS)
        labels = rng.integers(0, K, size=stop - start)
        X[start:stop] = centers[labels] + rng.standard_normal((stop - start, D), np.float32)
        y[start:stop] = labels
    X.flush(), y.flush()
    del X, y
    path.with_suffix(".tmp.npy").replace(path)
    truth.with_suffix(".tmp.npy").replace(truth)
    return path, truth


def _rss_anon_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_watched(cmd, log):
    """Run ``cmd`` with its output into ``log``; (wall seconds, peak RssAnon in MiB, output)."""
    peak = [0]
    with open(log, "w") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)

        def watch():
            while proc.poll() is None:
                peak[0] = max(peak[0], _rss_anon_kb(proc.pid))
                time.sleep(0.05)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        rc = proc.wait()
        wall = time.perf_counter() - t0
        watcher.join()
    text = Path(log).read_text()
    if rc != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({rc}):\n{text[-2000:]}")
    return wall, peak[0] / 1024, text


def limit_seconds(X, m, rows, chunk=8192, seed=0):
    """Seconds of the plain float32 GEMM + np.exp over ``rows`` rows of X against m points."""
    # small values: exp of the products stays finite, as exp(-gamma d^2) does
    S = 1e-3 * np.random.default_rng(seed).standard_normal((m, X.shape[1]), np.float32)
    out = np.empty((chunk, m), np.float32)
    out.fill(0.0)  # its pages touched before the clock starts
    t0 = time.perf_counter()
    for start in range(0, rows, chunk):
        block = np.asarray(X[start : start + chunk], dtype=np.float32)
        G = out[: block.shape[0]]
        np.matmul(block, S.T, out=G)
        np.exp(G, out=G)
    return time.perf_counter() - t0


def ari_on_sample(labels_path, truth_path, size=1_000_000, seed=0):
    from sklearn.metrics import adjusted_rand_score

    labels = np.load(labels_path, mmap_mode="r")
    truth = np.load(truth_path, mmap_mode="r")
    n = labels.shape[0]
    idx = np.arange(n) if n <= size else np.sort(np.random.default_rng(seed).choice(n, size))
    return adjusted_rand_score(np.asarray(truth[idx]), np.asarray(labels[idx]))


FULL_BATCH = """
import sys, time, numpy as np
from mbkkm import KernelKMeans
X = np.load(sys.argv[1])
t0 = time.perf_counter()
KernelKMeans(20, random_state=0).fit(X)
print(time.perf_counter() - t0)
"""

ON_DEVICE = """
import sys, time, numpy as np, torch
from sklearn.metrics import adjusted_rand_score
from mbkkm import MiniBatchKernelKMeans
n, device, k, d, limit_rows, fold_ab = int(sys.argv[1]), sys.argv[2], *map(int, sys.argv[3:7])
dev = torch.device("cpu" if device.startswith("torch") else device)
cuda = dev.type == "cuda"
sync = (lambda: torch.cuda.synchronize(dev)) if cuda else (lambda: None)

# k blobs in d dimensions (centers uniform in [-10, 10], unit noise), generated on the
# device block by block into host memory
t0 = time.perf_counter()
gen = torch.Generator(device=dev).manual_seed(0)
centers = torch.rand((k, d), generator=gen, device=dev) * 20 - 10
X, y = np.empty((n, d), np.float32), np.empty(n, np.int8)
block = 1 << 24
for start in range(0, n, block):
    r = min(block, n - start)
    lab = torch.randint(0, k, (r,), generator=gen, device=dev)
    rows = centers[lab] + torch.randn((r, d), generator=gen, device=dev)
    X[start : start + r] = rows.cpu().numpy()
    y[start : start + r] = lab.to(torch.int8).cpu().numpy()
    del lab, rows
print(f"generated: {time.perf_counter() - t0:.2f} s", flush=True)

if cuda:
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(dev)
t0 = time.perf_counter()
est = MiniBatchKernelKMeans(k, random_state=0, device=device, compute_labels=False, verbose=1)
est.fit(X)
sync()
t1 = time.perf_counter()
labels = est.predict(X)
sync()
t2 = time.perf_counter()
peak = torch.cuda.max_memory_allocated(dev) / 2**20 if cuda else 0.0
m = est.support_vectors_.shape[0]
print(f"time: fit {t1 - t0:.2f} s, labelling {t2 - t1:.2f} s", flush=True)
print(f"support: {m}")
print(f"device peak: {peak:.1f} MiB")
print(f"device name: {torch.cuda.get_device_name(dev) if cuda else 'cpu'}")
idx = np.sort(np.random.default_rng(0).choice(n, min(n, 1_000_000), replace=False))
print(f"ari: {adjusted_rand_score(y[idx], labels[idx]):.4f}", flush=True)
if fold_ab:  # the labelling again with the rbf tiles' fold switched (off on CUDA, else on)
    from mbkkm.kernels import _torch_tiles

    saved = _torch_tiles.FOLD_DEVICES
    was = dev.type in saved
    _torch_tiles.FOLD_DEVICES = tuple(t for t in saved if t != dev.type) if was else (dev.type,)
    try:
        t0 = time.perf_counter()
        other = est.predict(X)
        sync()
        seconds = time.perf_counter() - t0
    finally:
        _torch_tiles.FOLD_DEVICES = saved
    same = np.array_equal(other, labels)
    print(f"labelling with the fold {'off' if was else 'on'}: {seconds:.2f} s, same labels: {same}")
    del other
del est, labels

# the limit: X copied to the device (as fit and predict copy it), then the plain
# float32 GEMM + exp of the labelling's shapes, (chunk x d)(d x m), in chunks
if cuda:
    torch.cuda.empty_cache()
piece = 1 << 24
dest = torch.empty((min(n, piece), d), dtype=torch.float32, device=dev)
sync()
t0 = time.perf_counter()
for start in range(0, n, piece):
    part = torch.from_numpy(X[start : start + piece])
    dest[: part.shape[0]].copy_(part)
sync()
copy_s = time.perf_counter() - t0
S = 1e-3 * torch.randn((m, d), generator=gen, device=dev)  # exp stays finite
chunk, rows = 65536, min(n, limit_rows)
Xd = torch.from_numpy(X[:rows]).to(dev)
G = torch.empty((chunk, m), dtype=torch.float32, device=dev)
torch.matmul(Xd[:chunk], S.T, out=G[: min(chunk, rows)])  # warm-up
sync()
t0 = time.perf_counter()
for start in range(0, rows, chunk):
    part = Xd[start : start + chunk]
    out = G[: part.shape[0]]
    torch.matmul(part, S.T, out=out)
    out.exp_()
sync()
gemm_s = (time.perf_counter() - t0) * n / rows
print(f"limit: {copy_s + gemm_s:.6f} s (copy {copy_s:.6f} s, gemm + exp {gemm_s:.6f} s)")
"""


def _context(load_before):
    """The columns that say where and when a row was measured."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return {
        "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
        "cores": os.cpu_count(),
        "machine": f"{platform.machine()} {platform.processor() or platform.node()}",
        "date": datetime.date.today().isoformat(), "commit": commit,
    }  # fmt: skip


def _times(text):
    """(fit seconds, labelling seconds) from the line a run prints."""
    found = re.search(r"time: fit ([\d.]+) s, labelling ([\d.]+) s", text)
    return float(found.group(1)), float(found.group(2))


def measure(n, args, out_dir):
    """One row of the table: the command line on a ``.npy`` file (``--device cpu``)."""
    if args.device != "cpu":
        return measure_device(n, args, out_dir)
    path, truth = blobs(n, args.data_dir)
    labels_path = out_dir / f"labels_{n}.npy"
    load_before = os.getloadavg()[0]
    model = out_dir / f"model_{n}.skops"
    cmd = [sys.executable, "-m", "mbkkm", "fit", str(path), "-k", str(K)]
    cmd += ["--labels-out", str(labels_path), "--model-out", str(model), "--seed", "0"]
    log = (args.log_dir or out_dir) / f"log_{n}.txt"
    wall, rss, text = run_watched(cmd, log)
    fit_s, label_s = _times(text)
    from mbkkm import load_model

    m = load_model(model).support_vectors_.shape[0]
    X = np.load(path, mmap_mode="r")
    rows = min(n, args.limit_rows)
    limit = limit_seconds(X, m, rows) * n / rows
    full_batch = ""
    if n <= args.full_batch_max:
        fb = subprocess.run(
            [sys.executable, "-c", FULL_BATCH, str(path)],
            capture_output=True,
            text=True,
            check=True,
        )
        full_batch = round(float(fb.stdout.split()[-1]), 3)
    return {
        "n": n, "d": D, "k": K, "device": args.device, "m": m,
        "fit_s": fit_s, "label_s": label_s, "wall_s": round(wall, 2),
        "limit_label_s": round(limit, 2), "label_vs_limit": round(label_s / limit, 2),
        "rss_anon_mb": round(rss, 1), "ari": round(ari_on_sample(labels_path, truth), 4),
        "full_batch_s": full_batch, **_context(load_before), "gen_s": "", "device_peak_mb": "",
    }  # fmt: skip


def measure_device(n, args, out_dir):
    """One row on a torch device: the rows generated in host memory by the child."""
    load_before = os.getloadavg()[0]
    cmd = [sys.executable, "-c", ON_DEVICE, str(n), args.device, str(K), str(D)]
    cmd += [str(args.limit_rows), str(int(args.fold_ab))]
    log = (args.log_dir or out_dir) / f"log_{n}.txt"
    wall, rss, text = run_watched(cmd, log)
    fold = re.search(r"labelling with the fold .*", text)
    if fold:
        print(f"n {n}: {fold.group(0)}", flush=True)
    fit_s, label_s = _times(text)
    limit = float(re.search(r"limit: ([\d.]+) s", text).group(1))
    return {
        "n": n, "d": D, "k": K, "device": args.device,
        "m": int(re.search(r"support: (\d+)", text).group(1)),
        "fit_s": fit_s, "label_s": label_s, "wall_s": round(wall, 2),
        "limit_label_s": round(limit, 4), "label_vs_limit": round(label_s / limit, 2),
        "rss_anon_mb": round(rss, 1),
        "ari": float(re.search(r"ari: ([\d.]+)", text).group(1)), "full_batch_s": "",
        **_context(load_before),
        "machine": f"{platform.machine()} {re.search(r'device name: (.*)', text).group(1)}",
        "gen_s": float(re.search(r"generated: ([\d.]+) s", text).group(1)),
        "device_peak_mb": float(re.search(r"device peak: ([\d.]+) MiB", text).group(1)),
    }  # fmt: skip


def read_rows(path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


def append_row(path, row):
    """Append ``row`` to the CSV at ``path``; a file written with fewer columns is
    rewritten first with today's header (its rows keep their values)."""
    if path.exists():
        with open(path) as fh:
            header = next(csv.reader(fh), None)
        if header != COLUMNS:
            old = read_rows(path)
            with open(path, "w", newline="") as fh:
                writer = csv.DictWriter(fh, COLUMNS, restval="")
                writer.writeheader()
                writer.writerows(old)
    new = not path.exists()
    with open(path, "a", newline="") as fh:
        writer = csv.DictWriter(fh, COLUMNS)
        if new:
            writer.writeheader()
        writer.writerow(row)


def plot(rows, image, memory_bytes):
    """The figure, from the saved rows only: the latest row of each (n, device)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    latest = {}
    for row in rows:
        latest[(row["device"], int(row["n"]))] = row
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    mem = ax.twinx()
    for device, marker in (("cpu", "o"), ("cuda", "s")):
        pts = sorted((n, r) for (dev, n), r in latest.items() if dev == device)
        if not pts:
            continue
        n = np.array([p[0] for p in pts], float)
        get = lambda key, pts=pts: np.array([float(p[1][key]) for p in pts])  # noqa: E731
        ax.loglog(n, get("fit_s"), marker + "-", label=f"fit ({device})")
        ax.loglog(n, get("label_s"), marker + "-", label=f"labelling ({device})")
        ax.loglog(
            n,
            get("limit_label_s"),
            marker + ":",
            color="grey",
            label=f"GEMM + exp limit ({device})",
        )
        # cpu: the process's anonymous memory (the mapped file aside); cuda: the GPU's
        # peak (the host holds X itself there)
        peak, what = ("rss_anon_mb", "anonymous") if device == "cpu" else ("device_peak_mb", "GPU")
        mem.loglog(
            n,
            get(peak) * 2**20,
            marker + "--",
            color="tab:purple",
            alpha=0.6,
            label=f"peak {what} memory ({device})",
        )
        fb = [(x, float(p[1]["full_batch_s"])) for x, p in zip(n, pts) if p[1]["full_batch_s"]]
        if fb:
            ax.loglog(*zip(*fb), "^-", color="tab:red", label="full batch KernelKMeans")
    lo, hi = ax.get_xlim()
    grid = np.logspace(np.log10(lo), np.log10(hi), 50)
    mem.loglog(
        grid,
        4.0 * grid**2,
        "-",
        color="tab:red",
        alpha=0.35,
        label="full batch: n x n float32 kernel",
    )
    mem.axhline(memory_bytes, color="black", lw=0.8, ls="-.", label="the CPU machine's memory")
    wall = np.sqrt(memory_bytes / 4.0)
    ax.axvline(wall, color="tab:red", lw=0.8, ls="--")
    ax.text(
        wall,
        ax.get_ylim()[1],
        f" n x n wall\n n = {wall:,.0f}",
        va="top",
        fontsize=8,
        color="tab:red",
    )
    mem.set_ylim(1e5, 1e13)
    ax.set_xlabel("n (points, 16 features, 20 clusters)")
    ax.set_ylabel("seconds")
    mem.set_ylabel("bytes")
    lines = ax.get_legend_handles_labels()
    more = mem.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="upper left")
    ax.set_title(
        "MiniBatchKernelKMeans at scale\n"
        "cpu: mbkkm fit X.npy -k 20 --labels-out; cuda: fit and predict on host rows",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(image, dpi=120)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=float, nargs="+", default=[1e3, 1e4, 1e5, 1e6, 1e7])
    parser.add_argument("--device", default="cpu", help="cpu (the command line) or cuda")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "scale.csv")
    parser.add_argument(
        "--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "mbkkm_scale"
    )
    parser.add_argument("--limit-rows", type=int, default=2_000_000)
    parser.add_argument("--full-batch-max", type=int, default=20_000)
    parser.add_argument("--log-dir", type=Path, help="keep each run's output (log_N.txt) here")
    parser.add_argument("--plot", type=Path, help="draw the figure from --out into this image")
    parser.add_argument("--plot-only", action="store_true", help="only draw the figure")
    parser.add_argument(
        "--fold-ab",
        action="store_true",
        help="a torch device: label again with the rbf tiles' fold switched (off on CUDA, "
        "else on) and print both times",
    )
    args = parser.parse_args(argv)
    if not args.plot_only:
        if args.log_dir is not None:  # before any data is written
            args.log_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            for n in map(int, args.n):
                row = measure(n, args, Path(tmp))
                print(", ".join(f"{key} {row[key]}" for key in COLUMNS[:13]), flush=True)
                append_row(args.out, row)
    if args.plot:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        plot(read_rows(args.out), args.plot, memory)


if __name__ == "__main__":
    main()
