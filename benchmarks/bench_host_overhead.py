"""Host cost of one torch iteration of the fit loop: time, uploads and read-backs.

What the device cannot hide: per iteration of ``MiniBatchKernelKMeans.fit`` on torch
tensors, from fits of ``--many`` and ``--few`` iterations (the difference, so that the
set-up, the width and the labels do not count; ``compute_labels=False``, fixed gamma):

* host time: the fit on tiny shapes (d = 2, b = 64, k = 10, tau = 8), where every
  torch call computes almost nothing, so the time is the host's (Python, the
  dispatcher, numpy planning between calls): an upper bound of what the host adds
  to each iteration on a GPU, where the calls are launches;
* uploads: host arrays turned into tensors inside the loop (``torch.from_numpy``,
  ``torch.as_tensor``, ``torch.tensor`` of an array; the ``lift_fresh`` a
  ``TorchDispatchMode`` sees is printed too): on a GPU each is a host-to-device copy;
* read-backs: tensors turned into host values (``Tensor.numpy``, ``.tolist``,
  ``.item`` and ``_local_scalar_dense``): on a GPU each is a device-to-host copy
  that waits for the device (a synchronisation).

The counts are the same on every device (the code path does not depend on it). To
measure another tree, run its copy of this file or set PYTHONPATH to its ``src``.

Usage::

    .venv/bin/python benchmarks/bench_host_overhead.py --rounds 5
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
try:  # the installed mbkkm, or the one PYTHONPATH names (to measure another tree)
    import mbkkm
except ImportError:
    sys.path.insert(0, str(REPO / "src"))
    import mbkkm

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class Counter(TorchDispatchMode):
    """Counts host-array uploads and host reads during a fit (see the module docstring)."""

    UPLOADS = (("torch", "from_numpy"), ("torch", "as_tensor"), ("torch", "tensor"))
    READS = (("Tensor", "numpy"), ("Tensor", "tolist"), ("Tensor", "item"))

    def __init__(self):
        super().__init__()
        self.counts = collections.Counter()
        self._saved = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name in ("aten.lift_fresh.default", "aten._local_scalar_dense.default"):
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))

    def _wrap(self, owner, name):
        target = torch if owner == "torch" else torch.Tensor
        orig = getattr(target, name)
        key = f"{owner}.{name}"

        def wrapped(*args, **kwargs):
            if key != "torch.tensor" or isinstance(args[0] if args else None, np.ndarray):
                self.counts[key] += 1
            return orig(*args, **kwargs)

        setattr(target, name, wrapped)
        self._saved.append((target, name, orig))

    def __enter__(self):
        for owner, name in self.UPLOADS + self.READS:
            self._wrap(owner, name)
        return super().__enter__()

    def __exit__(self, *exc):
        for target, name, orig in reversed(self._saved):
            setattr(target, name, orig)
        self._saved.clear()
        return super().__exit__(*exc)


def fit(X, iters, **params):
    from mbkkm import MiniBatchKernelKMeans

    return MiniBatchKernelKMeans(
        max_iter=iters, compute_labels=False, random_state=0, **params
    ).fit(X)


def counts_per_iteration(X, many, few, params):
    out = []
    for iters in (many, few):
        c = Counter()
        with c:
            fit(X, iters, **params)
        out.append(c.counts)
    diff = collections.Counter(out[0])
    diff.subtract(out[1])
    # torch.from_numpy also dispatches a lift_fresh: uploads are the Python-level calls.
    ups = ("torch.from_numpy", "torch.as_tensor", "torch.tensor")
    reads = ("aten._local_scalar_dense.default", "Tensor.numpy", "Tensor.tolist", "Tensor.item")
    per = {key: diff[key] / (many - few) for key in ("aten.lift_fresh.default", *ups, *reads)}
    return per, sum(per[k] for k in ups), sum(per[k] for k in reads)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--many", type=int, default=110)
    p.add_argument("--few", type=int, default=10)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    print(
        f"bench_host_overhead: mbkkm from {Path(mbkkm.__file__).parent}, torch "
        f"{torch.__version__}, 1 torch thread, {time.strftime('%Y-%m-%d %H:%M:%S')}"
    )
    rng = np.random.RandomState(0)
    X = torch.from_numpy(rng.rand(4000, 2).astype(np.float32))
    params = dict(n_clusters=10, gamma=1.0, batch_size=64, tau=8)
    for tol in (None, 1e-12):
        fit(X, args.few, tol=tol, **params)  # warm-up (imports, first calls)
        per_round = []
        for _ in range(args.rounds):
            t = []
            for iters in (args.many, args.few):
                t0 = time.perf_counter()
                fit(X, iters, tol=tol, **params)
                t.append(time.perf_counter() - t0)
            per_round.append((t[0] - t[1]) / (args.many - args.few))
        per, ups, reads = counts_per_iteration(X, args.many, args.few, dict(tol=tol, **params))
        print(
            f"tol={tol}: host time per iteration {1e3 * min(per_round):.3f} ms (best of "
            f"{args.rounds}; all: {', '.join(f'{1e3 * t:.3f}' for t in per_round)}); "
            f"uploads {ups:.2f}, read-backs {reads:.2f} per iteration"
        )
        print("   " + ", ".join(f"{k} {v:.2f}" for k, v in per.items() if v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
