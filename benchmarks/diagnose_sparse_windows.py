"""Why mini-batch kernel k-means collapses on a very sparse k-NN kernel (MNIST, 455 NN).

`docs/results/README.md` ("The k-NN kernel") reports that on MNIST's k-NN kernel
with 455 neighbours (0.92 % of the entries non-zero) the renormalised truncation
puts most points into one cluster, while the paper's literal truncation does not.
This fits both on the same kernel and prints, for each cluster (largest first):
its size, the support points of its center, their coefficient mass (1 when
renormalised), the center's norm <C, C>, the share of the center's support in its
most frequent class, and the share of that class's points adjacent to none of the
center's support points (for those K(x, C) = 0, so ||phi(x) - C||^2 = K(x, x) +
<C, C>: they go to the center of smallest norm).

    .venv/bin/python benchmarks/diagnose_sparse_windows.py --data-home ../shared/datasets
    .venv/bin/python benchmarks/diagnose_sparse_windows.py --n-neighbors 2000 --tau 50

The kernel is built as the experiment runner builds it (``knn_kernel``: 146 CPU s
for 455 neighbours on MNIST, about 0.6 GB); ``--kernel-cache DIR`` reads or stores
it in the runner's kernel cache format under a key of its own.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def _kernel(args, X):
    from mbkkm.kernels import graph_kernel_matrix

    def build():
        start, cpu = time.perf_counter(), time.process_time()
        K = graph_kernel_matrix("knn", X, n_neighbors=args.n_neighbors)
        return K, time.perf_counter() - start, time.process_time() - cpu

    if args.kernel_cache is None:
        K, seconds, cpu = build()
    else:
        from mbkkm.experiments._kernel_cache import cache_key, cached_matrix

        key = cache_key(
            dataset=args.dataset,
            synthetic_samples=None,
            n_samples=X.shape[0],
            kernel="knn",
            params={"n_neighbors": args.n_neighbors},
            source="diagnose_sparse_windows",
        )
        K, seconds, cpu = cached_matrix(args.kernel_cache, key, build)
    import scipy.sparse as sp

    K = sp.csr_matrix(K)
    print(
        f"{args.dataset}: {X.shape[0]} points, {args.n_neighbors} neighbours, "
        f"{K.nnz / X.shape[0] ** 2:.2%} non-zero, built in {seconds:.0f} s "
        f"({cpu:.0f} CPU s)",
        flush=True,
    )
    return K


def describe(K, y, labels, est):
    """One row per cluster, largest first (see the module docstring)."""
    adjacent = (K != 0).tocsr()
    sv, owner, coef = est.support_vectors_, est.support_labels_, est.dual_coef_
    k = est.n_clusters
    sizes = np.bincount(labels, minlength=k)
    mass = np.bincount(owner, weights=coef, minlength=k)
    rows = []
    for j in np.argsort(-sizes):
        support = sv[owner == j]
        counts = np.bincount(y[support])
        cls = int(counts.argmax())
        members = np.flatnonzero(y == cls)
        seen = np.asarray(adjacent[members][:, support].sum(axis=1)).ravel()
        rows.append(
            (
                int(j),
                int(sizes[j]),
                len(support),
                float(mass[j]),
                float(est.center_norms_[j]),
                cls,
                counts.max() / len(support),
                float(np.mean(seen == 0)),
            )
        )
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="mnist")
    p.add_argument("--data-home", default=None)
    p.add_argument("--n-neighbors", type=int, default=455)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--tau", type=int, default=50)
    p.add_argument("--max-iter", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kernel-cache", default=None)
    args = p.parse_args(argv)

    from sklearn.metrics import adjusted_rand_score

    from mbkkm import MiniBatchKernelKMeans
    from mbkkm.datasets import load_dataset

    X, y = load_dataset(args.dataset, data_home=args.data_home)
    y = np.unique(np.asarray(y), return_inverse=True)[1]
    K = _kernel(args, X)
    n_clusters = int(y.max()) + 1
    for renormalize in (True, False):
        est = MiniBatchKernelKMeans(
            n_clusters=n_clusters,
            batch_size=args.batch_size,
            tau=args.tau,
            learning_rate="adaptive",
            renormalize=renormalize,
            max_iter=args.max_iter,
            tol=None,
            random_state=args.seed,
            kernel="precomputed",
        ).fit(K)
        ari = adjusted_rand_score(y, est.labels_)
        print(
            f"\nrenormalize={renormalize}: ARI {ari:.3f} (b = {args.batch_size}, "
            f"tau = {args.tau}, seed {args.seed})"
        )
        print("cluster  points  support  mass   <C,C>     class  purity  class unseen")
        for j, size, m, mass, norm, cls, purity, unseen in describe(K, y, est.labels_, est):
            print(
                f"{j:7d} {size:7d} {m:8d} {mass:6.3f} {norm:9.2e} {cls:6d} {purity:7.0%} "
                f"{unseen:12.0%}"
            )


if __name__ == "__main__":
    main()
