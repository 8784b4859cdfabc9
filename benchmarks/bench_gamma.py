"""gamma="auto" against the default width, plain k-means and a grid of widths.

For each data set and seed: ARI and NMI of scikit-learn's KMeans, of
MiniBatchKernelKMeans (rbf, b = 1024, tau = 200, 200 iterations) with
gamma="auto" (what gamma=None, the default, does here), and at multiples
2**-2 .. 2**5 of the mean-distance width (the grid; 1x is gamma="mean-distance",
the default of version 0.1; the grid's best point, found with the labels, is the
ceiling reported for reference only). 10 seeds per data set, 3 for MNIST (its
fits take about a minute each; 5 for its unbalanced resampling). Rows are appended
to a tidy CSV as they finish (a re-run skips the rows already there); ``--report``
draws the table (``docs/results/gamma.md`` section) and the figure from the CSV
only.

    .venv/bin/python benchmarks/bench_gamma.py --out docs/results/gamma.csv
    .venv/bin/python benchmarks/bench_gamma.py --out docs/results/gamma.csv --report

Data: rings (make_circles(20000, factor=0.4, noise=0.05)), moons
(make_moons(20000, noise=0.05)), blobs of unequal widths (make_blobs(20000,
cluster_std=[1, 2.5, 0.5], random_state=170)), scikit-learn's iris, wine,
breast-cancer and digits (standardised), PenDigits and Letter (standardised, as
mbkkm.datasets does), MNIST (a 20,000-image sample, divided by 255), read from
``--data-home`` (default ../shared/datasets); and unbalanced sets: digits, Letter
(10 classes of 80 % down to 0.2 %), PenDigits and MNIST (7 classes of 78, 15, 6,
0.4, 0.1, 0.02 and 0.01 %: a held-out set's proportions) resampled without
replacement (``unbalanced_indices``, seed 0), and blobs of unequal weights and
spreads (2-d, 80 % .. 1 %; 9-d, the 7 proportions).

    .venv/bin/python benchmarks/bench_gamma.py --cost    # the README example's cost
    .venv/bin/python benchmarks/bench_gamma.py --starts --out docs/results/gamma-starts.csv
    .venv/bin/python benchmarks/bench_gamma.py --margins 0,0.1,0.25,0.5,1 \
        --out docs/results/gamma-margins.csv   # the noise margin, screened
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import time
import warnings
from pathlib import Path

import numpy as np

DATASETS = [
    "rings",
    "moons",
    "blobs",
    "iris",
    "wine",
    "breast_cancer",
    "digits",
    "pendigits",
    "letter",
    "mnist",
    "blobs_unbal",
    "blobs_unbal9",
    "digits_unbal",
    "pendigits_unbal",
    "letter_unbal",
    "mnist_unbal",
]
#: Synthetic sets (the others are real data, resampled or not).
SYNTHETIC = {"rings", "moons", "blobs", "blobs_unbal", "blobs_unbal9"}
#: Class proportions of the unbalanced sets: one class of about 80 %, several below 1 %.
#: "c7": those of a 7-class held-out set where the normalised cut chose badly (78, 15,
#: 6, 0.4, 0.1, 0.02, 0.01 %); "p10": ten classes, 80 % down to 0.2 %.
PROPORTIONS = {
    "c7": (0.78, 0.15, 0.06, 0.004, 0.001, 0.0002, 0.0001),
    "p10": (0.80, 0.10, 0.05, 0.02, 0.01, 0.008, 0.005, 0.003, 0.002, 0.002),
}
#: The unbalanced resamplings: base set and proportions.
UNBALANCED = {
    "digits_unbal": ("digits", "p10"),
    "pendigits_unbal": ("pendigits", "c7"),
    "letter_unbal": ("letter", "p10"),
    "mnist_unbal": ("mnist", "c7"),
}
GRID = [2.0**e for e in range(-2, 6)]
SEEDS = {"mnist": 3, "mnist_unbal": 5}  # seeds per data set where not 10 (fits of a minute, 25 s)
FIELDS = [
    "dataset",
    "n",
    "d",
    "k",
    "seed",
    "method",
    "multiplier",
    "gamma",
    "ari",
    "nmi",
    "seconds",
    "select_seconds",
]


def load(name, data_home):
    """(X float64, y, k) of one benchmark data set."""
    from sklearn import datasets as skd
    from sklearn.preprocessing import StandardScaler

    if name in UNBALANCED:
        base, profile = UNBALANCED[name]
        X, y = _raw(base, data_home)
        idx = unbalanced_indices(y, PROPORTIONS[profile], np.random.default_rng(0))
        X, y = X[idx], y[idx]
        X = X / 255.0 if base == "mnist" else StandardScaler().fit_transform(X)
        return np.asarray(X, dtype=np.float64), np.asarray(y), int(np.unique(y).size)
    if name == "blobs_unbal":  # 2-d: five blobs of 80 % .. 1 %, spreads 0.3 .. 2
        sizes = np.round(20000 * np.array([0.80, 0.12, 0.05, 0.02, 0.01])).astype(int)
        X, y = skd.make_blobs(
            sizes, cluster_std=[2.0, 1.0, 0.5, 0.3, 1.5], center_box=(-12, 12), random_state=3
        )
        return np.asarray(X, dtype=np.float64), np.asarray(y), 5
    if name == "blobs_unbal9":  # 9-d: seven blobs in the "c7" proportions, spreads 0.5 .. 3
        sizes = np.maximum(2, np.round(20000 * np.array(PROPORTIONS["c7"]))).astype(int)
        X, y = skd.make_blobs(
            sizes,
            n_features=9,
            cluster_std=[3.0, 1.0, 2.0, 0.5, 1.0, 0.5, 1.0],
            center_box=(-8, 8),
            random_state=7,
        )
        return StandardScaler().fit_transform(X), np.asarray(y), 7
    if name == "rings":
        X, y = skd.make_circles(20000, factor=0.4, noise=0.05, random_state=0)
    elif name == "moons":
        X, y = skd.make_moons(20000, noise=0.05, random_state=0)
    elif name == "blobs":
        X, y = skd.make_blobs(20000, centers=3, cluster_std=[1.0, 2.5, 0.5], random_state=170)
    elif name in ("iris", "wine", "breast_cancer", "digits"):
        X, y = getattr(skd, f"load_{name}")(return_X_y=True)
        X = StandardScaler().fit_transform(X)
    else:
        from mbkkm.datasets import load_dataset

        X, y = load_dataset(name, data_home=data_home, download=False)  # paper's preprocessing
        if name == "mnist":
            idx = np.random.default_rng(0).choice(X.shape[0], 20000, replace=False)
            X, y = X[idx], y[idx]
    return np.asarray(X, dtype=np.float64), np.asarray(y), int(np.unique(y).size)


def _raw(name, data_home):
    """(X, y) of a base set as stored (scikit-learn's bundled or ``--data-home``'s)."""
    from sklearn import datasets as skd

    if name == "digits":
        return skd.load_digits(return_X_y=True)
    data = np.load(Path(data_home) / f"{name}.npz", allow_pickle=False)
    return data["X"].astype(np.float64), data["y"]


def unbalanced_indices(y, proportions, rng):
    """Rows of a resampling of (., y) to the given class proportions.

    The classes are taken in a random order; the first (the largest share) keeps all
    its points, which fixes the size n = its count / its share; class i then gets
    max(2, round(share_i * n)) of its points, drawn without replacement. Returns
    sorted indices.
    """
    classes = rng.permutation(np.unique(y))[: len(proportions)]
    n = int(np.sum(y == classes[0]) / proportions[0])
    idx = []
    for c, share in zip(classes, proportions):
        rows = np.flatnonzero(y == c)
        idx.append(rng.choice(rows, size=min(rows.size, max(2, round(share * n))), replace=False))
    return np.sort(np.concatenate(idx))


def _rows_done(out, keys):
    """The ``keys`` tuples of the rows already in the CSV ``out`` (a re-run skips them)."""
    if not out.exists():
        return set()
    with out.open() as f:
        return {tuple(r[key] for key in keys) for r in csv.DictReader(f)}


@contextlib.contextmanager
def _appending(out, fields):
    """``(file, DictWriter)`` appending to the CSV ``out``, its header written when new."""
    new = not out.exists()
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a", newline="") as f:
        writer = csv.DictWriter(f, fields)
        if new:
            writer.writeheader()
        yield f, writer


def run(args):
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    from mbkkm import MiniBatchKernelKMeans
    from mbkkm.kernels import mean_squared_pairwise_distance

    out = Path(args.out)
    done = _rows_done(out, ("dataset", "seed", "method", "multiplier"))
    with _appending(out, FIELDS) as (f, writer):
        for name in args.datasets:
            X, y, k = load(name, args.data_home)
            g0 = 1.0 / mean_squared_pairwise_distance(X)
            n_seeds = args.seeds if args.seeds is not None else SEEDS.get(name, 10)
            for seed in range(n_seeds):
                jobs = [("kmeans", "", None)] + [("grid", f"{m:g}", g0 * m) for m in args.grid]
                jobs.append(("auto", "", "auto"))
                jobs = [j for j in jobs if j[0] in args.methods]
                for method, mult, gamma in jobs:
                    if (name, str(seed), method, mult) in done:
                        continue
                    start = time.perf_counter()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        if method == "kmeans":
                            est = KMeans(k, n_init=1, random_state=seed).fit(X)
                        else:
                            est = MiniBatchKernelKMeans(
                                k,
                                gamma=gamma,
                                batch_size=1024,
                                tau=200,
                                max_iter=200,
                                random_state=seed,
                            ).fit(X)
                    seconds = time.perf_counter() - start
                    row = dict(
                        dataset=name,
                        n=X.shape[0],
                        d=X.shape[1],
                        k=k,
                        seed=seed,
                        method=method,
                        multiplier=mult,
                        gamma="" if method == "kmeans" else f"{est.gamma_:.6g}",
                        ari=f"{adjusted_rand_score(y, est.labels_):.4f}",
                        nmi=f"{normalized_mutual_info_score(y, est.labels_):.4f}",
                        seconds=f"{seconds:.3f}",
                    )
                    if method == "auto":
                        row["gamma"] = f"{est.gamma_:.6g}"
                        row["select_seconds"] = f"{est.gamma_selection_.seconds:.3f}"
                    writer.writerow(row)
                    f.flush()
                    print(" ".join(f"{row.get(c, '')}" for c in FIELDS), flush=True)


def summarise(path):
    """Per data set: mean ARI / NMI of k-means, default, auto and the grid ceiling."""
    import pandas as pd

    df = pd.read_csv(path, keep_default_na=False)
    rows = []
    for name in [d for d in DATASETS if d in set(df.dataset)]:
        part = df[df.dataset == name]
        grid = part[part.method == "grid"]
        means = grid.groupby("multiplier")[["ari", "nmi"]].mean()
        best = means["ari"].idxmax()
        auto = part[part.method == "auto"]
        fit1 = grid[grid.multiplier.astype(str) == "1"]
        km = part[part.method == "kmeans"]
        rows.append(
            {
                "dataset": name,
                "seeds": auto.seed.nunique(),
                "kmeans_se": km.ari.std() / np.sqrt(len(km)),
                "auto_se": auto.ari.std() / np.sqrt(len(auto)),
                "kmeans_ari": part[part.method == "kmeans"].ari.mean(),
                "default_ari": fit1.ari.mean(),
                "auto_ari": auto.ari.mean(),
                "auto_min_ari": auto.ari.min(),
                "ceiling_ari": means.loc[best, "ari"],
                "kmeans_nmi": part[part.method == "kmeans"].nmi.mean(),
                "default_nmi": fit1.nmi.mean(),
                "auto_nmi": auto.nmi.mean(),
                "ceiling_nmi": means.loc[best, "nmi"],
                "best_multiplier": best,
                "auto_multiplier": float(
                    np.median(auto.gamma.astype(float) / (fit1.gamma.astype(float).mean()))
                ),
                # (selection + fit) / the fit alone, both from the auto rows: the cost of
                # the selection relative to a fixed-width fit, timed in the same runs.
                "auto_time_ratio": auto.seconds.mean()
                / (auto.seconds - auto.select_seconds.astype(float)).mean(),
            }
        )
    return pd.DataFrame(rows)


def report(args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    s = summarise(args.out)
    s.to_csv(Path(args.out).with_name("gamma-summary.csv"), index=False, float_format="%.4f")
    lines = [
        "| data | seeds | k-means | mean-distance (0.1 default) | auto (default) | "
        "ceiling (grid) | best x | auto x | auto time / its fit alone |",
        "| --- " * 9 + "|",
    ]
    for r in s.itertuples():
        lines.append(
            f"| {r.dataset} | {r.seeds} | {r.kmeans_ari:.3f} ± {r.kmeans_se:.3f} / "
            f"{r.kmeans_nmi:.3f} | {r.default_ari:.3f} / {r.default_nmi:.3f} | "
            f"**{r.auto_ari:.3f}** ± {r.auto_se:.3f} / {r.auto_nmi:.3f} | "
            f"{r.ceiling_ari:.3f} / {r.ceiling_nmi:.3f} | "
            f"{r.best_multiplier} | {r.auto_multiplier:.3g} | {r.auto_time_ratio:.2f} |"
        )
    groups = [
        ("mean", np.ones(len(s), dtype=bool)),
        ("mean, real sets", ~s.dataset.isin(SYNTHETIC).to_numpy()),
        (
            "mean, unbalanced sets",
            s.dataset.str.endswith("_unbal").to_numpy() | (s.dataset == "blobs_unbal9").to_numpy(),
        ),
    ]
    for label, mask in groups:
        g = s[mask]
        lines.append(
            f"| **{label}** ({len(g)}) | | {g.kmeans_ari.mean():.3f} / "
            f"{g.kmeans_nmi.mean():.3f} | {g.default_ari.mean():.3f} / "
            f"{g.default_nmi.mean():.3f} | **{g.auto_ari.mean():.3f}** / "
            f"{g.auto_nmi.mean():.3f} | {g.ceiling_ari.mean():.3f} / "
            f"{g.ceiling_nmi.mean():.3f} | | | |"
        )
    print("\n".join(lines))
    df = pd.read_csv(args.out, keep_default_na=False)
    names = list(s.dataset)
    fig, axes = plt.subplots(
        2, (len(names) + 1) // 2, figsize=(3.2 * ((len(names) + 1) // 2), 6), squeeze=False
    )
    for ax, name in zip(axes.ravel(), names):
        part = df[df.dataset == name]
        grid = part[part.method == "grid"].copy()
        grid["m"] = grid.multiplier.astype(float)
        means = grid.groupby("m").ari.mean()
        ax.semilogx(means.index, means.values, "o-", color="0.4", label="grid (mean ARI)")
        g1 = grid[grid.m == 1].gamma.astype(float).mean()
        auto = part[part.method == "auto"]
        ax.semilogx(
            auto.gamma.astype(float) / g1, auto.ari, "*", ms=12, color="C3", label="auto (per seed)"
        )
        ax.axhline(part[part.method == "kmeans"].ari.mean(), color="C0", ls="--", label="k-means")
        ax.set_title(name)
        ax.set_xlabel("gamma / mean-distance width")
        ax.set_ylim(-0.05, 1.05)
    axes.ravel()[0].set_ylabel("ARI")
    axes.ravel()[0].legend(fontsize="x-small")
    for ax in axes.ravel()[len(names) :]:
        ax.axis("off")
    fig.tight_layout()
    fig_path = Path(args.out).with_name("figures") / "gamma-auto.png"
    fig_path.parent.mkdir(exist_ok=True)
    fig.savefig(fig_path, dpi=110)
    print(fig_path)


def cost(args):
    """The README example (5,000 circles, b = 512, tau = 100, 100 iterations): fit with
    gamma=None (the selection) and gamma="mean-distance", interleaved, best of
    ``--rounds``; run it under /work/bin/quiet (one process on the machine)."""
    import os as _os

    from sklearn.datasets import make_circles
    from sklearn.metrics import adjusted_rand_score

    from mbkkm import MiniBatchKernelKMeans

    X, y = make_circles(n_samples=5000, factor=0.3, noise=0.05, random_state=0)
    params = dict(n_clusters=2, batch_size=512, tau=100, max_iter=100, random_state=0)
    MiniBatchKernelKMeans(**params).fit(X)  # imports, caches
    times = {"auto (gamma=None)": [], "mean-distance": []}
    select = []
    for _ in range(args.rounds):
        for label, gamma in (("auto (gamma=None)", None), ("mean-distance", "mean-distance")):
            start = time.perf_counter()
            km = MiniBatchKernelKMeans(gamma=gamma, **params).fit(X)
            times[label].append(time.perf_counter() - start)
            if gamma is None:
                select.append(km.gamma_selection_.seconds)
                auto = km
    print(f"load average before: {_os.getloadavg()}")
    for label, t in times.items():
        print(
            f"{label:18s} best {min(t):.3f} s  median {np.median(t):.3f} s  "
            f"({' '.join(f'{v:.3f}' for v in t)})"
        )
    print(
        f"selection alone    best {min(select):.3f} s  median {np.median(select):.3f} s; "
        f"auto ARI {adjusted_rand_score(y, auto.labels_):.3f}, chosen "
        f"{auto.gamma_ / auto.gamma_selection_.base_gamma:.3g} x the mean-distance width"
    )


def starts(args):
    """Per data set and seed, the start of the fit at the width "auto" chooses: the
    choice, its margin (its smoothed score / the mean-distance width's), whether the
    selection trusts its partition, and two full fits at that width: from the
    selection's sample partition and from k-means++ (== a fit at that fixed width).
    Rows appended to ``--out`` (resumable)."""
    import dataclasses
    from unittest import mock

    from sklearn.metrics import adjusted_rand_score

    from mbkkm import MiniBatchKernelKMeans
    from mbkkm.cluster import _base, select_gamma

    fields = ["dataset", "seed", "mult", "ratio", "trusted", "ari_partition", "ari_kmeanspp"]
    out = Path(args.out)
    done = _rows_done(out, ("dataset", "seed"))
    with _appending(out, fields) as (f, writer):
        for name in args.datasets:
            X, y, k = load(name, args.data_home)
            for seed in range(args.seeds if args.seeds is not None else SEEDS.get(name, 10)):
                if (name, str(seed)) in done:
                    continue
                ari = {}
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    sel = select_gamma(X, k, random_state=seed)
                    for start, trusted in (("partition", True), ("kmeanspp", False)):
                        # the fit of gamma="auto" with the start forced one way or the other
                        forced = dataclasses.replace(sel, start_from_partition=trusted)
                        with mock.patch.object(
                            _base, "resolve_auto_gamma", return_value=(sel.gamma, forced)
                        ):
                            est = MiniBatchKernelKMeans(
                                k,
                                gamma="auto",
                                batch_size=1024,
                                tau=200,
                                max_iter=200,
                                random_state=seed,
                            ).fit(X)
                        ari[start] = adjusted_rand_score(y, est.labels_)
                best = int(np.flatnonzero(sel.candidates == sel.gamma)[0])
                row = dict(
                    dataset=name,
                    seed=seed,
                    mult=f"{sel.gamma / sel.base_gamma:.4g}",
                    ratio=f"{sel.scores[best] / sel.scores[sel.reference]:.4f}",
                    trusted=int(sel.start_from_partition),
                    ari_partition=f"{ari['partition']:.4f}",
                    ari_kmeanspp=f"{ari['kmeanspp']:.4f}",
                )
                writer.writerow(row)
                f.flush()
                print(row, flush=True)


def margins(args):
    """The noise margin of the wider widths, screened without new fits.

    Per data set and seed, one search of "auto" (its default options), then the
    choice re-made on the same scores and noise for each margin of ``--margins``
    (:func:`mbkkm._core._width.choose_width`; the grid is not re-extended, and the
    start rule is the selection's, :func:`mbkkm._core._width.trust_partition`). The
    ARI of each choice comes from the fits in ``docs/results/gamma.csv``: the
    mean-distance width's fit (the grid's 1x row of the seed: exactly the fit of
    gamma="auto" when it keeps that width) when the reference is kept; the
    "auto" row when the choice is the default margin's; else the grid row of the
    seed at the nearest multiplier ("how" = "grid", an estimate: another width,
    and the start may differ). Rows written to ``--out``; a summary printed.
    """
    import pandas as pd

    from mbkkm._core._width import (
        DEFAULT_MULTIPLIERS,
        EXTEND,
        MIN_GAIN,
        MIN_GAIN_WIDER,
        NOISE_MARGIN,
        WidthOptions,
        choose_width,
        default_sample_size,
        draw_sample,
        search_width,
        selection_threads,
        trust_partition,
    )

    fits = pd.read_csv(Path(args.out).with_name("gamma.csv"), keep_default_na=False)
    grid = fits[fits.method == "grid"]
    grid_ari = {(r.dataset, int(r.seed), float(r.multiplier)): r.ari for r in grid.itertuples()}
    auto_ari = {(r.dataset, int(r.seed)): r.ari for r in fits[fits.method == "auto"].itertuples()}
    grid_m = np.array(sorted({float(m) for m in grid.multiplier}))
    rows = []
    for name in args.datasets:
        X, _, k = load(name, args.data_home)
        for seed in range(args.seeds if args.seeds is not None else SEEDS.get(name, 10)):
            draw = draw_sample(seed, X.shape[0], default_sample_size(k), 4)
            options = WidthOptions(
                np.array(DEFAULT_MULTIPLIERS),
                10,
                100,
                MIN_GAIN,
                MIN_GAIN_WIDER,
                EXTEND,
                NOISE_MARGIN,
            )
            with selection_threads(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                s, s_best, _ = search_width(X[draw.indices], "sqeuclidean", k, draw, options)
            mult = s["candidates"] / s["base_gamma"]
            for z in args.margins:
                best = choose_width(
                    s["scores"], s["reference"], MIN_GAIN, MIN_GAIN_WIDER, s["noise"], z
                )
                if best == s["reference"]:
                    how, ari = "mean-distance", grid_ari[(name, seed, 1.0)]
                elif best == s_best:
                    how, ari = "auto", auto_ari[(name, seed)]
                else:
                    near = grid_m[np.argmin(np.abs(np.log(grid_m / mult[best])))]
                    how, ari = "grid", grid_ari[(name, seed, float(near))]
                rows.append(
                    dict(
                        dataset=name,
                        seed=seed,
                        margin=z,
                        mult=f"{mult[best]:.4g}",
                        trusted=int(trust_partition(s["scores"], best, s["reference"], MIN_GAIN)),
                        how=how,
                        ari=f"{ari:.4f}",
                    )
                )
            print(name, seed, flush=True)
    df = pd.DataFrame(rows)
    df.to_csv(args.out, index=False)
    table = df.astype({"ari": float}).pivot_table(
        index="dataset", columns="margin", values="ari", aggfunc="mean"
    )
    print(table.round(3).to_string())
    print(
        "rows estimated from another width's grid fit:",
        df[df.how == "grid"].groupby("margin").size().to_dict(),
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="docs/results/gamma.csv")
    p.add_argument("--datasets", type=lambda s: s.split(","), default=DATASETS)
    p.add_argument(
        "--seeds", type=int, default=None, help="seeds per data set (default 10, MNIST 3)"
    )
    p.add_argument(
        "--grid",
        type=lambda s: [float(v) for v in s.split(",")],
        default=GRID,
        help="multiples of the default width (default 2**-2 .. 2**5)",
    )
    p.add_argument(
        "--methods",
        type=lambda s: s.split(","),
        default=["kmeans", "grid", "auto"],
        help="which rows to run (default kmeans,grid,auto)",
    )
    p.add_argument("--data-home", default=os.environ.get("MBKKM_DATA", "../shared/datasets"))
    p.add_argument("--report", action="store_true", help="table and figure from --out only")
    p.add_argument(
        "--cost",
        action="store_true",
        help="time the README example's fit with and without the selection",
    )
    p.add_argument("--rounds", type=int, default=7, help="--cost: interleaved rounds")
    p.add_argument(
        "--starts",
        action="store_true",
        help="the fit at auto's width from its sample partition and from "
        "k-means++ (rows to --out, e.g. docs/results/gamma-starts.csv)",
    )
    p.add_argument(
        "--margins",
        type=lambda s: [float(v) for v in s.split(",")],
        default=None,
        help="screen these noise margins on one search per seed (rows to --out, "
        "e.g. docs/results/gamma-margins.csv; ARI from gamma.csv's fits)",
    )
    args = p.parse_args()
    if args.margins is not None:
        margins(args)
    elif args.cost:
        cost(args)
    elif args.starts:
        starts(args)
    elif args.report:
        report(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
