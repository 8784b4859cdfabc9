"""Why the beta learning rate loses to scikit-learn's on Letter's exact heat kernel.

`docs/results/README.md` ("The heat kernel", claim 4) reports that on Letter's
exact heat kernel (t = 7.16) the untruncated mini-batch kernel k-means with the
paper's beta rate, alpha_j = sqrt(b_j / b), ends at about half of full batch's ARI,
while scikit-learn's rate, alpha_j = b_j / N_j, is level with full batch; with the
Gaussian kernel on the same data the beta rate is ahead. This runs the untruncated
algorithm with both rates, and with the beta rate whose first step per center is 1
("adaptive-first", a test of the diagnosis, not the paper's rate), from the same
kernel k-means++ seeding and the same batches, on a dense precomputed kernel, and
prints every ``--every`` iterations:

- the full objective, mean over all n points of min_j ||phi(x) - C_j||^2;
- the churn: the share of all n points whose nearest center changed since the last
  report (the labelling the fit would return if stopped there);
- the number of non-empty clusters in that labelling and the largest one's share;
- the median over centers of the weight the seed point (kernel k-means++) still has
  in its center, the number of centers whose effective window 1 / sum_i w_ij^2
  (w_ij the weight of point i in C_j: how many points a center averages) is below 10
  points, the median step alpha_j of the last update and the median window;
- the ARI of that labelling.

It runs the library's untruncated step (``table_step``: the table P[x, j] =
<phi(x), C_j> for all points, updated per batch from the batch's kernel rows, the
center norms <C_j, C_j> from their recursion, and the weight of every point in
every center) with each rate, and reads those weights. At the end it
prints the final center norms and the kernel's scale: the mean of K(x, x) against
the mean K(x, y) within and between classes on 2,000 sampled points. A seed point's
center has norm K(x0, x0); a center averaging m points about K(x, x) / m plus the
mean off-diagonal value, so where the diagonal dominates, a center keeps a large
norm (and wins few points) until its seed weight has decayed.

    # the runner's cached exact heat kernel of Letter (heat-letter grid):
    .venv/bin/python benchmarks/diagnose_learning_rate.py --dataset letter \\
        --data-home ../shared/datasets --kernel-file ~/.cache/mbkkm/kernels/KEY/K.npy
    # the Gaussian kernel of the gaussian-letter grid, for comparison:
    .venv/bin/python benchmarks/diagnose_learning_rate.py --dataset letter \\
        --data-home ../shared/datasets --gamma 0.05555555555555555
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mbkkm._core._init import kernel_kmeans_plusplus
from mbkkm._core._rates import LEARNING_RATES, adaptive_rate
from mbkkm._core._state import init_state
from mbkkm._core._untruncated import init_table, table_step
from mbkkm.kernels._index import IndexKernel

# "adaptive-first": the beta rate except that a center's first update has alpha = 1
# (as the classic rate's has), which replaces the seed point by its first batch mean.
RATES = ("adaptive", "classic", "adaptive-first")
FEW = 10  # a center averaging fewer points than this is counted as "few-point"


def _adaptive_first(batch_counts, batch_total, running_counts):
    """The beta rate, except alpha_j = 1 at center j's first update (N_j = b_j)."""
    first = (batch_counts > 0) & (running_counts == batch_counts)
    return np.where(first, 1.0, adaptive_rate(batch_counts, batch_total, running_counts))


_RATE_FUNCS = {**LEARNING_RATES, "adaptive-first": _adaptive_first}


def run(K, diag, y, init, batches, rate, every=10):
    """Untruncated mini-batch kernel k-means on the dense kernel ``K``: the library's
    own step (``mbkkm._core._untruncated.table_step``), observed every ``every``
    iterations.

    Parameters
    ----------
    K : ndarray of shape (n, n)
        Dense, symmetric (may be memory-mapped: only batch rows are read).
    diag : ndarray of shape (n,)
        K(x, x).
    y : ndarray of shape (n,) or None
        True classes, for the ARI.
    init : ndarray of shape (k,)
        Indices of the initial centers (each a single point).
    batches : sequence of ndarray
        The batch indices of each iteration.
    rate : {"adaptive", "classic", "adaptive-first"}
    every : int
        Report every this many iterations (and after the last one).

    Returns
    -------
    rows : list of tuple
        (iteration, objective, churn, non-empty clusters, largest cluster's share of
        the points, median seed weight W[init_j, j], number of centers whose
        effective window is below ``FEW`` points, median alpha, median effective
        window, ARI).
    state : dict
        ``P`` (n, k), ``norms`` (k,), ``sumsq`` (k,) (sum of squared weights),
        ``labels`` (n,).
    """
    from sklearn.metrics import adjusted_rand_score

    n = K.shape[0]
    items = np.arange(n)
    init = np.asarray(init)
    k = len(init)
    kernel = IndexKernel("precomputed", K, diag=diag)
    state = init_table(items, init_state(init, kernel), kernel)
    alphas = np.zeros(k)

    def weights():
        """W (n, k): C_j = sum_i W_ij phi(x_i), the seeds' remaining weight included."""
        W = state.coef.copy()
        np.add.at(W, (state.init_items, state.init_labels), state.init_coef)
        return W

    def labelling():
        D = diag[:, None] - 2.0 * state.table + state.norms[None, :]
        lab = D.argmin(axis=1)
        return lab, float(np.maximum(D[np.arange(n), lab], 0.0).mean())

    rows = []
    labels, _ = labelling()
    for it, B in enumerate(batches, start=1):
        _, _, alpha = table_step(state, items, np.asarray(B), diag, kernel, _RATE_FUNCS[rate])
        alphas = np.where(alpha > 0, alpha, alphas)
        if it % every == 0 or it == len(batches):
            new, objective = labelling()
            churn = float(np.mean(new != labels))
            labels = new
            ari = adjusted_rand_score(y, labels) if y is not None else float("nan")
            sizes = np.bincount(labels, minlength=k)
            W = weights()
            windows = 1.0 / (W**2).sum(axis=0)
            rows.append(
                (
                    it,
                    objective,
                    churn,
                    int(np.count_nonzero(sizes)),
                    float(sizes.max() / n),
                    float(np.median(W[init, np.arange(k)])),
                    int(np.count_nonzero(windows < FEW)),
                    float(np.median(alphas)),
                    float(np.median(windows)),
                    ari,
                )
            )
    return rows, {
        "P": state.table,
        "norms": state.norms,
        "sumsq": (weights() ** 2).sum(axis=0),
        "labels": labels,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="letter")
    p.add_argument("--data-home", default=None)
    p.add_argument(
        "--kernel-file",
        default=None,
        help="a dense .npy kernel matrix (memory-mapped), e.g. the runner's cache",
    )
    p.add_argument(
        "--gamma",
        type=float,
        default=None,
        help="without --kernel-file: the Gaussian kernel exp(-gamma ||x - y||^2)",
    )
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--max-iter", type=int, default=200)
    p.add_argument("--every", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if (args.kernel_file is None) == (args.gamma is None):
        p.error("give exactly one of --kernel-file and --gamma")

    from mbkkm.datasets import load_dataset

    X, y = load_dataset(args.dataset, data_home=args.data_home)
    y = np.unique(np.asarray(y), return_inverse=True)[1]
    n, k = X.shape[0], int(y.max()) + 1
    start = time.perf_counter()
    if args.kernel_file is not None:
        K = np.load(args.kernel_file, mmap_mode="r")
        if K.shape != (n, n):
            p.error(f"--kernel-file is {K.shape}, expected ({n}, {n}) for {args.dataset}")
        what = f"kernel {args.kernel_file}"
    else:
        from sklearn.metrics.pairwise import rbf_kernel

        K = rbf_kernel(np.asarray(X, dtype=np.float64), gamma=args.gamma)
        what = f"Gaussian kernel, gamma = {args.gamma:g}"
    diag = np.array(K[np.arange(n), np.arange(n)], dtype=np.float64)
    print(
        f"{args.dataset}: n = {n}, k = {k}, {what} ({time.perf_counter() - start:.0f} s); "
        f"b = {args.batch_size}, seed {args.seed}",
        flush=True,
    )

    rng = np.random.RandomState(args.seed)
    init = kernel_kmeans_plusplus(
        np.arange(n), IndexKernel("precomputed", K, diag=diag), k, rng, diag=diag
    )
    batches = [rng.choice(n, size=args.batch_size, replace=False) for _ in range(args.max_iter)]
    states = {}
    for rate in RATES:
        rows, states[rate] = run(K, diag, y, init, batches, rate, every=args.every)
        print(f"\nlearning_rate={rate!r}")
        print(
            f"  iter  objective   churn  clusters  largest  seed weight  <{FEW} pts  alpha  "
            "window    ARI"
        )
        for it, obj, churn, live, largest, seed_w, few, alpha, window, ari in rows:
            print(
                f"{it:6d} {obj:10.4e} {churn:7.1%} {live:9d} {largest:8.1%} {seed_w:12.3f} "
                f"{few:8d} {alpha:6.3f} {window:7.0f} {ari:6.3f}"
            )
        norms = states[rate]["norms"]
        print(
            f"  final <C_j, C_j>: median {np.median(norms):.3e}, "
            f"range {norms.min():.3e} .. {norms.max():.3e}"
        )
    sample = rng.choice(n, size=min(n, 2000), replace=False)
    block = np.asarray(K[sample][:, sample], dtype=np.float64)
    same = y[sample][:, None] == y[sample][None, :]
    off = ~np.eye(len(sample), dtype=bool)
    print(
        f"\nK(x, x): mean {diag.mean():.3e}; K(x, y), {len(sample)} sampled points: "
        f"same class {block[same & off].mean():.3e}, different classes "
        f"{block[~same].mean():.3e}"
    )


if __name__ == "__main__":
    main()
