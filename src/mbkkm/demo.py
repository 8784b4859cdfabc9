"""A one-minute demonstration of MiniBatchKernelKMeans (``make demo``).

Runs on data that ships with the dependencies, so it needs no download:

* **circles**: two concentric circles (``sklearn.datasets.make_circles``), where
  k-means in input space cannot succeed (the circles share their mean);
* **moons**: two interleaving half circles (``sklearn.datasets.make_moons``);
* **digits**: scikit-learn's 8 x 8 handwritten digits (``load_digits``, 1797 x 64),
  standardised per feature.

Each set is clustered by :class:`mbkkm.MiniBatchKernelKMeans` (Gaussian / rbf
kernel, its width chosen from the data by the default ``gamma=None``) and by
scikit-learn's :class:`~sklearn.cluster.KMeans` and
:class:`~sklearn.cluster.MiniBatchKMeans`, with the true number of clusters. The
script prints the width each fit chose (``gamma_``), a table of the adjusted Rand
index (ARI) and normalised mutual information (NMI) against the true labels, and
the fit time (fit plus labels of every point; for the kernel estimator it includes
choosing the width), writes the same table to ``<out>/results.csv`` and draws the
clusters found on circles and moons side by side in ``<out>/circles.png``.

Usage::

    python -m mbkkm.demo --out demo_output            # a few seconds on 2 cores
    python -m mbkkm.demo --out /tmp/demo --quick      # smaller sets, a few seconds
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from dataclasses import dataclass

import numpy as np

from ._files import atomic_write, save_figure
from ._validation import require

__all__ = ["DemoSet", "main", "make_sets", "run_demo"]


@dataclass
class DemoSet:
    """One demonstration data set."""

    name: str
    X: np.ndarray
    y: np.ndarray
    n_clusters: int
    plot: bool  # 2-d: drawn in circles.png


def make_sets(quick=False, seed=0):
    """The demo's data sets (float32), smaller with ``quick``."""
    from sklearn.datasets import load_digits, make_circles, make_moons
    from sklearn.preprocessing import StandardScaler

    # quick: sets smaller than the 1000 points on which the width is chosen, so
    # that the choice (an eigendecomposition of the sample's kernel per width
    # tried) costs a few times less
    n = 500 if quick else 3000
    Xc, yc = make_circles(n_samples=n, factor=0.3, noise=0.05, random_state=seed)
    Xm, ym = make_moons(n_samples=n, noise=0.05, random_state=seed)
    digits = load_digits()
    m = 500 if quick else None  # the first rows, standardised as in the whole set
    Xd, yd = StandardScaler().fit_transform(digits.data)[:m], digits.target[:m]
    return [
        DemoSet("circles", Xc.astype(np.float32), yc, 2, True),
        DemoSet("moons", Xm.astype(np.float32), ym, 2, True),
        DemoSet("digits", Xd.astype(np.float32), yd, 10, False),
    ]


def _methods(ds, quick, seed):
    """(name, estimator) pairs for one data set."""
    from sklearn.cluster import KMeans, MiniBatchKMeans

    from mbkkm import MiniBatchKernelKMeans

    common = {"n_clusters": ds.n_clusters, "n_init": 3, "random_state": seed}
    kernel = {"kernel": "rbf", "tau": 200, "max_iter": 40 if quick else 100}
    return [
        ("KMeans", KMeans(**common)),
        ("MiniBatchKMeans", MiniBatchKMeans(batch_size=256, **common)),
        ("MiniBatchKernelKMeans", MiniBatchKernelKMeans(batch_size=256, **kernel, **common)),
    ]


def run_demo(quick=False, seed=0):
    """Cluster every set with every method.

    Returns
    -------
    rows : list of dict
        One per (dataset, method): ``dataset``, ``method``, ``ari``, ``nmi``,
        ``seconds``, ``labels`` and ``gamma`` (the kernel width the fit chose; None
        for the methods without a kernel).
    sets : list of DemoSet
    """
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    sets = make_sets(quick=quick, seed=seed)
    rows = []
    for ds in sets:
        for name, est in _methods(ds, quick, seed):
            t0 = time.perf_counter()
            labels = est.fit(ds.X).labels_
            seconds = time.perf_counter() - t0
            rows.append(
                {
                    "dataset": ds.name,
                    "method": name,
                    "ari": float(adjusted_rand_score(ds.y, labels)),
                    "nmi": float(normalized_mutual_info_score(ds.y, labels)),
                    "seconds": seconds,
                    "labels": labels,
                    "gamma": getattr(est, "gamma_", None),
                }
            )
    return rows, sets


def format_table(rows):
    """The results as an aligned text table."""
    header = ("dataset", "method", "ARI", "NMI", "seconds")
    body = [
        (r["dataset"], r["method"], f"{r['ari']:.3f}", f"{r['nmi']:.3f}", f"{r['seconds']:.2f}")
        for r in rows
    ]
    widths = [max(len(str(c)) for c in col) for col in zip(header, *body)]

    def fmt(cells):  # the names to the left, the numbers to the right
        return "  ".join(
            c.rjust(w) if j >= 2 else c.ljust(w) for j, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    lines = [fmt(header), fmt(["-" * w for w in widths])]
    for i, cells in enumerate(body):
        if i and cells[0] != body[i - 1][0]:  # a blank line between data sets
            lines.append("")
        lines.append(fmt(cells))
    return "\n".join(lines)


def write_csv(rows, path):
    with atomic_write(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["dataset", "method", "ari", "nmi", "seconds"])
        writer.writerows(
            [r["dataset"], r["method"], f"{r['ari']:.6f}", f"{r['nmi']:.6f}", f"{r['seconds']:.4f}"]
            for r in rows
        )


def plot_clusters(rows, sets, path):
    """Clusters found on the 2-d sets: one row per set, one column per method."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    flat = [ds for ds in sets if ds.plot]
    ncols = 1 + len({r["method"] for r in rows})  # the true labels, then each method
    fig = Figure(figsize=(3.2 * ncols, 3.2 * len(flat)))
    axes = fig.subplots(len(flat), ncols, squeeze=False)
    for i, ds in enumerate(flat):
        panels = [(f"{ds.name}: true labels", ds.y, None)]
        panels += [(r["method"], r["labels"], r) for r in rows if r["dataset"] == ds.name]
        for ax, (title, labels, r) in zip(axes[i], panels):
            ax.scatter(*ds.X.T, c=labels, s=3, cmap="coolwarm", linewidths=0, rasterized=True)
            if r is not None:
                title = f"{title}\nARI {r['ari']:.2f}, {r['seconds']:.2f} s"
            ax.set_title(title, fontsize=9)
            ax.set(xticks=[], yticks=[])
            ax.set_aspect("equal", adjustable="datalim")
    fig.suptitle("MiniBatchKernelKMeans (rbf) against k-means in input space", fontsize=11)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def main(argv=None):
    """Run the demo; returns the result rows (see :func:`run_demo`)."""
    parser = argparse.ArgumentParser(
        prog="python -m mbkkm.demo",
        description="Compare MiniBatchKernelKMeans with KMeans and MiniBatchKMeans on "
        "circles, moons and digits; print a table and save a picture.",
    )
    parser.add_argument(
        "--out",
        default="demo_output",
        help="output folder (created): circles.png, results.csv (default: %(default)s)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smaller sets and fewer iterations (for tests)"
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument("--no-plot", action="store_true", help="skip the picture")
    args = parser.parse_args(argv)
    if not args.no_plot:  # before the work: the picture is drawn last
        require("matplotlib", "plot", "the demo's picture (skip it with --no-plot)")
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    rows, sets = run_demo(quick=args.quick, seed=args.seed)
    chosen = {r["dataset"]: r["gamma"] for r in rows if r["gamma"] is not None}
    print(
        "Data sets, and the rbf kernel width K(x, y) = exp(-gamma ||x - y||^2) that "
        "MiniBatchKernelKMeans chose\n(the default gamma=None: chosen from the data, "
        "without labels):"
    )
    for ds in sets:
        print(
            f"  {ds.name:8s} n={ds.X.shape[0]:5d} d={ds.X.shape[1]:2d} "
            f"k={ds.n_clusters:2d}  gamma={chosen[ds.name]:.4g}"
        )
    print(
        "MiniBatchKernelKMeans: batch_size=256, tau=200, "
        f"max_iter={40 if args.quick else 100}, n_init=3; seconds = fit + labels "
        "(+ the choice of the width).\n"
    )
    print(format_table(rows))
    write_csv(rows, os.path.join(args.out, "results.csv"))
    if not args.no_plot:
        png = os.path.join(args.out, "circles.png")
        plot_clusters(rows, sets, png)
        print(f"\nPicture of the clusters: {png}")
    print(f"Results table: {os.path.join(args.out, 'results.csv')}")
    print(f"Total time: {time.perf_counter() - t0:.1f} s")
    return rows


if __name__ == "__main__":
    main()
