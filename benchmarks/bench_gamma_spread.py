"""Seed-to-seed spread of gamma="auto" on standardised digits (issue 40).

For random_state 0..9: the width ``select_gamma`` chooses (what ``gamma=None``
and ``gamma="auto"`` use with that seed), as a multiple of the mean-distance
width of all the data, its ``plausible_range``, the selection's time, and the ARI
of the default fits at that seed: ``KernelKMeans(10)`` and, with
``--minibatch``, ``MiniBatchKernelKMeans(10)`` (b = 1024, tau = 200, 200
iterations; about 7 s each on the 2-core reference machine). ``--n-samples``
sets the selection's sample size (default: the library's, 500 points for k = 10).

    PYTHONPATH=src .venv/bin/python benchmarks/bench_gamma_spread.py --minibatch
    PYTHONPATH=src .venv/bin/python benchmarks/bench_gamma_spread.py --n-samples 1000
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.datasets import load_digits
from sklearn.metrics import adjusted_rand_score
from sklearn.preprocessing import StandardScaler

from mbkkm import KernelKMeans, MiniBatchKernelKMeans
from mbkkm.cluster import select_gamma


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--n-samples", type=int, default=None)
    parser.add_argument(
        "--minibatch",
        action="store_true",
        help="also fit MiniBatchKernelKMeans (default parameters)",
    )
    args = parser.parse_args(argv)
    digits = load_digits()
    X, y = StandardScaler().fit_transform(digits.data), digits.target
    k = 10
    data_width = 1.0 / (2.0 * X.var(axis=0).sum())  # gamma="mean-distance"
    print(
        "| seed | gamma | x mean-distance | plausible range (x) | selection s | "
        "KernelKMeans ARI | MiniBatchKernelKMeans ARI |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    gammas, ari_kkm, ari_mb, seconds = [], [], [], []
    for seed in range(args.seeds):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # GammaGridWarning at the grid's end
            t0 = time.perf_counter()
            sel = select_gamma(X, k, random_state=seed, n_samples=args.n_samples)
            seconds.append(time.perf_counter() - t0)
            if args.n_samples is None:  # the fits choose with the library's sample
                ari_kkm.append(
                    adjusted_rand_score(y, KernelKMeans(k, random_state=seed).fit(X).labels_)
                )
                if args.minibatch:
                    ari_mb.append(
                        adjusted_rand_score(
                            y, MiniBatchKernelKMeans(k, random_state=seed).fit(X).labels_
                        )
                    )
        gammas.append(sel.gamma)
        lo, hi = sel.plausible_range
        print(
            f"| {seed} | {sel.gamma:.4g} | {sel.gamma / data_width:.3g} | "
            f"{lo / data_width:.3g}-{hi / data_width:.3g} | {seconds[-1]:.2f} | "
            f"{ari_kkm[-1] if ari_kkm else float('nan'):.3f} | "
            f"{ari_mb[-1] if ari_mb else float('nan'):.3f} |",
            flush=True,
        )
    g = np.asarray(gammas)
    print(
        f"\ngamma {g.min():.4g} .. {g.max():.4g} ({g.max() / g.min():.1f}x); "
        f"{np.sum(np.isclose(g, data_width))} of {g.size} seeds keep the mean-distance "
        f"width; selection {np.mean(seconds):.2f} s on average"
    )
    for name, values in (("KernelKMeans", ari_kkm), ("MiniBatchKernelKMeans", ari_mb)):
        if values:
            print(f"{name} ARI {min(values):.3f} .. {max(values):.3f}, mean {np.mean(values):.3f}")


if __name__ == "__main__":
    main()
