"""Device check of checkpointed fits: on CUDA (CUDA graphs on), a fit interrupted
between two read-backs and resumed from its checkpoint equals the uninterrupted fit
bit for bit, and so do a checkpointed fit that is never interrupted and a second
plain fit with the same seed (no sum in the iteration depends on the order of atomic
additions).

How to run on a GPU (about a minute), from the repository root, with torch, skops
and scikit-learn >= 1.6 importable::

    PYTHONPATH=src timeout 400 python3 benchmarks/check_checkpoint_gpu.py

Without a GPU it runs the same check on torch CPU tensors (what
``tests/cluster/test_checkpoint.py`` checks at small sizes). The interruption is an
exception raised by the checkpoint hook once the fit has run a given number of
iterations (before that read-back's save), so the process state is lost and only
the file remains, as after a kill. Prints one line per case: (case, second plain
fit == plain fit, checkpointed fit == plain fit, resumed fit == plain fit,
iterations, iterations saved at each interruption, seconds plain, seconds
checkpointed) and ``ALL PASS`` or ``SOME FAIL``.
``MAXIT`` (environment) sets max_iter (default 120).
"""

import os
import tempfile
import time

import numpy as np
import torch

from mbkkm import MiniBatchKernelKMeans
from mbkkm.cluster import _checkpoint

ARRAYS = (
    "labels_",
    "support_vectors_",
    "dual_coef_",
    "support_labels_",
    "center_norms_",
    "batch_objective_",
)


class Killed(Exception):
    """Stands for the end of the process."""


def _killer(at, save):
    def on_advance(self, fs):
        if fs.n_iter >= at and not fs.done:
            raise Killed
        save(self, fs)

    return on_advance


def _host(a):
    return a.cpu().numpy() if hasattr(a, "cpu") else np.asarray(a)


def _same(a, b):
    ok = a.n_iter_ == b.n_iter_
    for name in ARRAYS:
        x, y = _host(getattr(a, name)), _host(getattr(b, name))
        if x.shape != y.shape or not np.array_equal(x, y):
            print(f"  differs: {name}", flush=True)
            ok = False
    return ok


def main():
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    print(
        torch.__version__, dev, torch.cuda.get_device_name(0) if dev == "cuda" else "", flush=True
    )
    rng = np.random.default_rng(0)
    Xn = rng.normal(size=(20000, 16)) + rng.integers(0, 8, (20000, 1)) * 2.0
    X = torch.from_numpy(Xn.astype(np.float32)).to(dev)
    max_iter = int(os.environ.get("MAXIT", 120))
    MiniBatchKernelKMeans(n_clusters=8, batch_size=512, tau=200, max_iter=20, gamma=0.05).fit(
        X
    )  # warm-up
    save = _checkpoint.FitCheckpoint._on_advance
    results = []
    for name, kw, kills in (
        ("plain", {}, (5, 20, 47, 90)),
        ("tol", {"tol": 1e-4}, (3, 10, 30)),
        ("auto-gamma", {"gamma": None}, (2, 40, 100)),
    ):
        params = {
            **dict(
                n_clusters=8, batch_size=512, tau=200, max_iter=max_iter, random_state=1, gamma=0.05
            ),
            **kw,
        }
        sync()
        t = time.perf_counter()
        ref = MiniBatchKernelKMeans(**params).fit(X)
        sync()
        t_ref = time.perf_counter() - t
        again = MiniBatchKernelKMeans(**params).fit(X)
        path = os.path.join(tempfile.mkdtemp(), "fit.ckpt")
        t = time.perf_counter()
        full = MiniBatchKernelKMeans(**params).fit(X, checkpoint=path, checkpoint_every=10)
        sync()
        t_ck = time.perf_counter() - t
        os.unlink(path)
        saved_at = []
        for at in kills:
            _checkpoint.FitCheckpoint._on_advance = _killer(at, save)
            try:
                MiniBatchKernelKMeans(**params).fit(X, checkpoint=path, checkpoint_every=10)
                saved_at.append("done")
            except Killed:
                saved_at.append(int(_checkpoint.read_checkpoint(path)["fit"]["n_iter"]))
        _checkpoint.FitCheckpoint._on_advance = save
        got = MiniBatchKernelKMeans(**params).fit(X, checkpoint=path, checkpoint_every=10)
        row = (
            name,
            _same(again, ref),
            _same(full, ref),
            _same(got, ref),
            ref.n_iter_,
            saved_at,
            round(t_ref, 3),
            round(t_ck, 3),
        )
        print(row, flush=True)
        results.append(row)
    print("ALL PASS" if all(r[1] and r[2] and r[3] for r in results) else "SOME FAIL")


if __name__ == "__main__":
    main()
