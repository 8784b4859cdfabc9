"""Fitted models of a fixed set of fits, to compare two versions of the code bit for bit.

``python benchmarks/fitted_models.py --out A.pkl`` fits every estimator on small
data of every input kind (dense, sample weights, kernel rows in blocks,
precomputed, CSR, k-NN graph, an explicit init, untruncated, Dask and torch when
installed, partial_fit) and saves their fitted attributes and predictions;
``python benchmarks/fitted_models.py --compare A.pkl B.pkl`` lists every attribute
that differs. Run the first command once per version (``PYTHONPATH=<its src>``):
a refactoring that keeps every model prints "0 differences".
"""

from __future__ import annotations

import argparse
import pickle
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import make_blobs, make_moons


def _record(est, X, predict_on=None, **fit_params):
    est.fit(X, **fit_params)
    out = {}
    for name, value in vars(est).items():
        if not name.endswith("_") or name.startswith("_"):
            continue
        if hasattr(value, "compute"):  # Dask
            value = np.asarray(value)
        if hasattr(value, "numpy"):  # torch
            value = value.numpy()
        if sp.issparse(value):
            value = value.toarray()
        if value is None or isinstance(value, (np.ndarray, float, int)):
            out[name] = value
    if predict_on is not None:
        out["predict"] = est.predict(predict_on)
    return out


def fits():
    from mbkkm import KernelKMeans, MiniBatchKernelKMeans, MiniBatchKMeans

    X, _ = make_moons(600, noise=0.06, random_state=0)
    Xb, _ = make_blobs(500, centers=4, n_features=5, random_state=1)
    w = np.random.RandomState(0).rand(500)
    Xs = sp.random(400, 50, density=0.1, random_state=0, format="csr")
    K = Xb @ Xb.T
    mb = dict(batch_size=100, tau=40, max_iter=20, random_state=0)
    out = {
        "kk_auto": _record(KernelKMeans(2, random_state=0), X, X[:50]),
        "kk_weights": _record(
            KernelKMeans(4, gamma=0.1, n_init=3, random_state=0), Xb, Xb[:50], sample_weight=w
        ),
        "kk_blocks": _record(
            KernelKMeans(4, gamma=0.1, max_kernel_memory=0.5, random_state=0), Xb, Xb[:50]
        ),
        "kk_precomputed": _record(KernelKMeans(4, kernel="precomputed", random_state=0), K, K[:50]),
        "kk_sparse": _record(KernelKMeans(3, kernel="cosine", random_state=0), Xs, Xs[:50]),
        "kk_knn": _record(
            KernelKMeans(2, kernel="knn", kernel_params={"n_neighbors": 10}, random_state=0), X
        ),
        "kk_init": _record(KernelKMeans(4, gamma=0.1, init=Xb[:4], random_state=0), Xb),
        "mb_auto": _record(
            MiniBatchKernelKMeans(2, batch_size=128, tau=50, max_iter=30, random_state=0), X, X[:50]
        ),
        "mb_weights": _record(
            MiniBatchKernelKMeans(4, gamma=0.1, n_init=3, **mb), Xb, Xb[:50], sample_weight=w
        ),
        "mb_precomputed": _record(MiniBatchKernelKMeans(4, kernel="precomputed", **mb), K, K[:50]),
        "mb_sparse": _record(MiniBatchKernelKMeans(3, kernel="cosine", **mb), Xs, Xs[:50]),
        "mb_untruncated": _record(MiniBatchKernelKMeans(4, gamma=0.1, **{**mb, "tau": None}), Xb),
        "mb_knn": _record(
            MiniBatchKernelKMeans(2, kernel="knn", kernel_params={"n_neighbors": 10}, **mb), X
        ),
        "mbk": _record(
            MiniBatchKMeans(4, batch_size=100, max_iter=20, random_state=0), Xb, Xb[:50]
        ),
    }
    try:
        import dask.array as da

        out["mb_dask"] = _record(
            MiniBatchKernelKMeans(4, gamma=0.1, **mb), da.from_array(Xb, chunks=100)
        )
    except ImportError:
        pass
    try:
        import torch

        out["mb_torch"] = _record(MiniBatchKernelKMeans(4, gamma=0.1, **mb), torch.from_numpy(Xb))
        out["kk_torch"] = _record(KernelKMeans(4, gamma=0.1, random_state=0), torch.from_numpy(Xb))
    except ImportError:
        pass
    est = MiniBatchKernelKMeans(4, gamma=0.1, random_state=0)
    for i in range(3):
        est.partial_fit(Xb[i * 100 : (i + 1) * 100])
    out["partial_fit"] = {
        "dual_coef_": est.dual_coef_,
        "labels_": est.labels_,
        "center_norms_": est.center_norms_,
    }
    return out


def differences(a, b):
    """(fit, attribute) pairs that differ between two saved sets of fits."""
    diff = sorted(set(a) ^ set(b))
    for fit in sorted(set(a) & set(b)):
        for name in sorted(set(a[fit]) | set(b[fit])):
            x, y = a[fit].get(name, "missing"), b[fit].get(name, "missing")
            same = (
                (x is y)
                if x is None or y is None
                else (
                    x == y
                    if isinstance(x, str) or isinstance(y, str)
                    else np.array_equal(np.asarray(x), np.asarray(y))
                )
            )
            if not same:
                diff.append((fit, name))
    return diff


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    parser.add_argument("--compare", nargs=2)
    args = parser.parse_args()
    if args.out:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            saved = fits()
        with open(args.out, "wb") as fh:
            pickle.dump(saved, fh)
        print(f"{len(saved)} fits saved to {args.out}")
    if args.compare:
        with open(args.compare[0], "rb") as fa, open(args.compare[1], "rb") as fb:
            a, b = pickle.load(fa), pickle.load(fb)
        diff = differences(a, b)
        for item in diff:
            print("differs:", item)
        print(f"{len(a)} fits compared, {len(diff)} differences")


if __name__ == "__main__":
    main()
