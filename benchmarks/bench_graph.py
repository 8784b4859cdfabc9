"""The heat kernel at full scale: quality, time, memory, predict, and where graphs split.

Parts (each appends tidy rows to ``--out``, a CSV; ``--report`` draws the markdown
tables from the CSV only):

``mnist``
    All 70,000 MNIST images (X / 255, float32), ``kernel="heat"`` and nothing else
    (n_clusters=10), 5 seeds, for MiniBatchKernelKMeans and KernelKMeans: fit (with
    the labels of all points) in a fresh process each, wall-clock seconds, the
    process's peak resident memory, ARI / NMI against the digits, the chosen t, rank
    and error bound, and the phases (projection, neighbours, eigenpairs, t).
``predict``
    MNIST, seed 0: the training points predicted again (agreement with ``labels_``),
    and a fit on the even-indexed half predicting the odd half, against the labels of
    a fit on all 70,000 (ARI, NMI), for both estimators and the heat and k-NN
    kernels.
``consistency``
    MNIST, ``--seeds`` seeds (default 3), KernelKMeans: fits on all images, on the
    even and on the odd half, each half predicting the other; the ARI between every
    pair of labellings of the same points (see :func:`part_consistency`).
``grid``
    MNIST, seed 0: the selection's candidates with their cut and, for reference
    only, the ARI / NMI of each candidate's partition (labels are never used to
    choose).
``sets``
    The data sets of ``bench_gamma.py`` (rings, moons, blobs, iris, wine,
    breast-cancer, digits, PenDigits, Letter, a 20,000-image MNIST sample),
    MiniBatchKernelKMeans with ``kernel="heat"`` (defaults), 10 seeds (MNIST 3):
    ARI / NMI, the points misassigned under the best one-to-one matching of clusters
    to classes, the number of connected components of the 10-NN graph and what the
    estimator did. With ``--rbf`` the same estimator with ``kernel="rbf"``,
    ``gamma="auto"`` is fitted on the same data and seeds (rows with kernel "rbf
    auto") and is the report's reference; without such rows the rbf kernel with
    ``gamma="auto"`` is read from ``docs/results/gamma.csv`` (MiniBatchKernelKMeans).
``spectral``
    scikit-learn's SpectralClustering on the same data sets (10-NN graph,
    ``affinity="nearest_neighbors"``), ``--seeds`` seeds (default 2): ARI / NMI and
    seconds, the reference the heat kernel is measured against.
``large``
    10,000,000 x 16 (float32 uniform, a memmap): the memory plan's answer.

Usage::

    .venv/bin/python benchmarks/bench_graph.py --part mnist --out docs/results/graph.csv
    .venv/bin/python benchmarks/bench_graph.py --report --out docs/results/graph.csv
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

DATA_HOME = REPO.parent / "shared" / "datasets"
FIELDS = [
    "part",
    "dataset",
    "n",
    "estimator",
    "kernel",
    "seed",
    "what",
    "value",
    "ari",
    "nmi",
    "seconds",
    "peak_mb",
    "t",
    "rank",
    "error",
    "components",
    "note",
]


def _mnist(data_home):
    with np.load(Path(data_home) / "mnist.npz", allow_pickle=False) as f:
        X, y = f["X"], f["y"]
    return np.ascontiguousarray(X, dtype=np.float32) / np.float32(255), y


def _scores(y, labels):
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    return (
        f"{adjusted_rand_score(y, labels):.4f}",
        f"{normalized_mutual_info_score(y, labels):.4f}",
    )


def _misassigned(y, labels):
    """Points outside the best one-to-one matching of clusters to classes."""
    from scipy.optimize import linear_sum_assignment
    from sklearn.metrics import confusion_matrix

    c = confusion_matrix(y, labels)
    rows, cols = linear_sum_assignment(-c)
    return int(len(y) - c[rows, cols].sum())


def _estimator(name, kernel, seed, k, params=None, **extra):
    from mbkkm import KernelKMeans, MiniBatchKernelKMeans

    cls = MiniBatchKernelKMeans if name == "minibatch" else KernelKMeans
    return cls(k, kernel=kernel, kernel_params=params, random_state=seed, **extra)


# --------------------------------------------------------------------------- one run


def one_mnist_run(estimator, seed, data_home, params=None):
    """One timed fit in this process (a fresh one): the row as a dict."""
    from _rss import reset_peak, status_kb

    X, y = _mnist(data_home)
    reset_peak()
    base = status_kb("VmRSS")
    est = _estimator(estimator, "heat", seed, 10, params)
    start = time.perf_counter()
    est.fit(X)
    labels = est.labels_
    seconds = time.perf_counter() - start
    peak = status_kb("VmHWM")
    ari, nmi = _scores(y, labels)
    p = est.kernel_.params
    phases = {key: round(p[key], 2) for key in ("projection", "neighbors", "eigensolver_seconds")}
    phases["t_selection"] = round(est.t_selection_.seconds, 2)
    phases["n_neighbors"] = p["n_neighbors"]
    phases.update(_neighbor_note(p))
    return dict(
        part="mnist",
        dataset="mnist",
        n=X.shape[0],
        estimator=estimator,
        kernel="heat, normalized" if p["normalize"] else "heat",
        seed=seed,
        what="fit+labels" + (f" {json.dumps(params)}" if params else ""),
        ari=ari,
        nmi=nmi,
        seconds=f"{seconds:.2f}",
        peak_mb=f"{peak / 1024:.0f}",
        t=f"{est.t_:.4g}",
        rank=p["rank"],
        error=f"{p['error']:.3g}",
        note=json.dumps({"rss_before_mb": round(base / 1024), **phases}),
    )


def _child(args):
    row = one_mnist_run(args.estimator, args.seed, args.data_home, args.kernel_params)
    print("ROW " + json.dumps(row), flush=True)


def _spawn(estimator, seed, data_home, params=None):
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--estimator",
        estimator,
        "--seed",
        str(seed),
        "--data-home",
        str(data_home),
    ]
    if params:
        cmd += ["--kernel-params", json.dumps(params)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(next(ln for ln in out.splitlines() if ln.startswith("ROW "))[4:])


# ----------------------------------------------------------------------------- parts


def part_mnist(args, write):
    for seed in range(args.first_seed, args.first_seed + (args.seeds or 5)):
        for estimator in args.estimators:
            write(_spawn(estimator, seed, args.data_home, args.kernel_params))


def part_predict(args, write):
    from sklearn.metrics import adjusted_rand_score

    X, y = _mnist(args.data_home)
    half = np.arange(X.shape[0]) % 2 == 0
    kernels = {"heat": None, "knn": {"n_neighbors": 10, "pca_components": 50}}
    for kernel in args.kernels:
        params = kernels[kernel]
        for estimator in args.estimators:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                on_all = _estimator(estimator, kernel, 0, 10, params).fit(X)
                start = time.perf_counter()
                again = on_all.predict(X)
                seconds = time.perf_counter() - start
                agree = float(np.mean(again == on_all.labels_))
                write(
                    dict(
                        part="predict",
                        dataset="mnist",
                        n=X.shape[0],
                        estimator=estimator,
                        kernel=kernel,
                        seed=0,
                        what="predict fitted points",
                        value=f"{agree:.4f}",
                        seconds=f"{seconds:.2f}",
                        ari=_scores(y, on_all.labels_)[0],
                        nmi=_scores(y, on_all.labels_)[1],
                    )
                )
                on_half = _estimator(estimator, kernel, 0, 10, params).fit(X[half])
                pred = on_half.predict(X[~half])
                write(
                    dict(
                        part="predict",
                        dataset="mnist",
                        n=int(half.sum()),
                        estimator=estimator,
                        kernel=kernel,
                        seed=0,
                        what="held-out half vs fit on all",
                        value=f"{adjusted_rand_score(on_all.labels_[~half], pred):.4f}",
                        note="NMI " + _scores(on_all.labels_[~half], pred)[1],
                        ari=_scores(y[~half], pred)[0],
                        nmi=_scores(y[~half], pred)[1],
                    )
                )


def part_consistency(args, write):
    """What the held-out agreement is made of (MNIST, KernelKMeans, defaults).

    For each seed: a fit on all 70,000 images, a fit on the even-indexed half and
    one on the odd-indexed half, each half-fit predicting the other half. Rows: the
    ARI between two fits on all the data with different seeds (the floor any
    "agrees with a fit on all" target meets); between the half-fit's own labels and
    the fit on all on the same (fitted) half (the fits differ, no extension); between
    the half-fit's predictions and the fit on all on the other half (fits differ and
    the extension); and between the half-fit's predictions and the labels the
    *other* half-fit gave the same points (two fits on disjoint halves, each point
    labelled once by a fit and once by an extension).
    """
    from sklearn.metrics import adjusted_rand_score

    X, y = _mnist(args.data_home)
    n = X.shape[0]
    even = np.arange(n) % 2 == 0
    seeds = list(range(args.first_seed, args.first_seed + (args.seeds or 3)))
    on_all, halves = {}, {}
    for seed in seeds:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = _estimator("full", "heat", seed, 10).fit(X)
            on_all[seed] = est.labels_
            kernel = "heat, normalized" if est.kernel_.params["normalize"] else "heat"
            write(
                dict(
                    part="consistency",
                    dataset="mnist",
                    n=n,
                    estimator="full",
                    kernel=kernel,
                    seed=seed,
                    what="fit on all vs digits",
                    ari=_scores(y, est.labels_)[0],
                    nmi=_scores(y, est.labels_)[1],
                    t=f"{est.t_:.4g}",
                    rank=est.kernel_.params["rank"],
                )
            )
            for side, mask in (("even", even), ("odd", ~even)):
                half = _estimator("full", "heat", seed, 10).fit(X[mask])
                start = time.perf_counter()
                pred = half.predict(X[~mask])
                seconds = time.perf_counter() - start
                lab = np.empty(n, dtype=np.intp)
                lab[mask], lab[~mask] = half.labels_, pred
                halves[seed, side] = lab
                write(
                    dict(
                        part="consistency",
                        dataset="mnist",
                        n=int(mask.sum()),
                        estimator="full",
                        kernel=kernel,
                        seed=seed,
                        what=f"fit on {side} half vs digits (fitted half)",
                        ari=_scores(y[mask], half.labels_)[0],
                        nmi=_scores(y[mask], half.labels_)[1],
                        t=f"{half.t_:.4g}",
                        rank=half.kernel_.params["rank"],
                    )
                )
                write(
                    dict(
                        part="consistency",
                        dataset="mnist",
                        n=int((~mask).sum()),
                        estimator="full",
                        kernel=kernel,
                        seed=seed,
                        what=f"fit on {side} half: predictions vs digits",
                        ari=_scores(y[~mask], pred)[0],
                        nmi=_scores(y[~mask], pred)[1],
                        seconds=f"{seconds:.2f}",
                    )
                )
                for what, m in (("fitted half", mask), ("predicted half", ~mask)):
                    write(
                        dict(
                            part="consistency",
                            dataset="mnist",
                            n=int(m.sum()),
                            estimator="full",
                            kernel=kernel,
                            seed=seed,
                            what=f"fit on {side} half vs fit on all, {what}",
                            value=f"{adjusted_rand_score(on_all[seed][m], lab[m]):.4f}",
                        )
                    )
        both = halves[seed, "even"], halves[seed, "odd"]
        for what, m in (("even points", even), ("odd points", ~even)):
            write(
                dict(
                    part="consistency",
                    dataset="mnist",
                    n=int(m.sum()),
                    estimator="full",
                    kernel=kernel,
                    seed=seed,
                    what=f"even-half fit vs odd-half fit, {what}",
                    value=f"{adjusted_rand_score(both[0][m], both[1][m]):.4f}",
                )
            )
    for i, a in enumerate(seeds):
        for b in seeds[i + 1 :]:
            write(
                dict(
                    part="consistency",
                    dataset="mnist",
                    n=n,
                    estimator="full",
                    kernel=kernel,
                    seed=f"{a}-{b}",
                    what="fit on all vs fit on all",
                    value=f"{adjusted_rand_score(on_all[a], on_all[b]):.4f}",
                    note="NMI " + _scores(on_all[a], on_all[b])[1],
                )
            )
            write(
                dict(
                    part="consistency",
                    dataset="mnist",
                    n=n // 2,
                    estimator="full",
                    kernel=kernel,
                    seed=f"{a}-{b}",
                    what="fit on all vs fit on all, odd points",
                    value=f"{adjusted_rand_score(on_all[a][~even], on_all[b][~even]):.4f}",
                )
            )


def part_grid(args, write):
    """Each candidate's solution is the selection run at that t alone with the same
    seed (the sample and the k-means seeds are drawn before the candidates, so the
    runs are the same); the graph and eigenpairs are those of the estimator."""
    from mbkkm.cluster._graph_kernels import select_t
    from mbkkm.kernels import KNNGraph
    from mbkkm.kernels._spectral import GraphSpectrum

    X, y = _mnist(args.data_home)
    rng = np.random.RandomState(0)  # as the estimator: one stream for PCA, solver, t
    graph = KNNGraph(10, pca_components=50, random_state=rng).fit(X)
    spectrum = GraphSpectrum(graph, 101, random_state=rng)
    state = rng.get_state()
    sel = select_t(spectrum, 10, random_state=rng)
    for t in sel.candidates:
        rng.set_state(state)
        one = select_t(spectrum, 10, candidates=[t], random_state=rng)
        ari, nmi = _scores(y, one.labels)
        write(
            dict(
                part="grid",
                dataset="mnist",
                n=X.shape[0],
                estimator="selection",
                kernel="heat",
                seed=0,
                what="candidate",
                value=f"{one.raw_scores[0]:.4f}",
                ari=ari,
                nmi=nmi,
                t=f"{t:.4g}",
                rank=int(one.ranks[0]),
                error=f"{one.errors[0]:.3g}",
                note="chosen" if t == sel.t else "",
            )
        )


def _gamma_auto_rows():
    path = REPO / "docs" / "results" / "gamma.csv"
    with path.open() as f:
        return [r for r in csv.DictReader(f) if r["method"] == "auto"]


def part_sets(args, write):
    import scipy.sparse.csgraph as csgraph
    from bench_gamma import load

    from mbkkm.cluster._graph_kernels import GraphSplitWarning

    for name in args.datasets:
        X, y, k = load(name, args.data_home)
        from mbkkm.kernels import KNNGraph

        graph = KNNGraph(10, pca_components=50, random_state=0).fit(X)
        n_comp, comp = csgraph.connected_components(graph.adjacency_, directed=False)
        sizes = np.sort(np.bincount(comp))[::-1]
        for seed, estimator in itertools.product(
            range(
                args.first_seed, args.first_seed + (args.seeds or (3 if name == "mnist" else 10))
            ),
            args.estimators,
        ):
            start = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                est = _estimator(estimator, "heat", seed, k, args.kernel_params).fit(X)
            seconds = time.perf_counter() - start
            split = [str(w.message) for w in caught if issubclass(w.category, GraphSplitWarning)]
            ari, nmi = _scores(y, est.labels_)
            write(
                dict(
                    part="sets",
                    dataset=name,
                    n=X.shape[0],
                    estimator=estimator,
                    kernel="heat",
                    seed=seed,
                    what=json.dumps(args.kernel_params) if args.kernel_params else "defaults",
                    ari=ari,
                    nmi=nmi,
                    seconds=f"{seconds:.2f}",
                    t=f"{est.t_:.4g}",
                    rank=est.kernel_.params["rank"],
                    error=f"{est.kernel_.params['error']:.3g}",
                    components=n_comp,
                    note=json.dumps(
                        {
                            "largest": sizes[:3].tolist(),
                            "n_neighbors": est.kernel_.params["n_neighbors"],
                            **_neighbor_note(est.kernel_.params),
                            "warned": bool(split),
                            "misassigned": _misassigned(y, est.labels_),
                        }
                    ),
                )
            )
            if args.rbf:
                start = time.perf_counter()
                est = _estimator(estimator, "rbf", seed, k, gamma="auto").fit(X)
                seconds = time.perf_counter() - start
                ari, nmi = _scores(y, est.labels_)
                write(
                    dict(
                        part="sets",
                        dataset=name,
                        n=X.shape[0],
                        estimator=estimator,
                        kernel="rbf auto",
                        seed=seed,
                        what="defaults",
                        ari=ari,
                        nmi=nmi,
                        seconds=f"{seconds:.2f}",
                        note=json.dumps(
                            {
                                "gamma": float(est.gamma_),
                                "misassigned": _misassigned(y, est.labels_),
                            }
                        ),
                    )
                )


def _neighbor_note(params):
    """What n_neighbors="auto" tried (nothing for a given count)."""
    if params.get("n_neighbors_asked") != "auto":
        return {}
    return {"asked": "auto", "ratios": [round(r, 4) for r in params["eigengap_ratios"]]}


def part_spectral(args, write):
    from bench_gamma import load
    from sklearn.cluster import SpectralClustering

    for name in args.datasets:
        X, y, k = load(name, args.data_home)
        for seed in range(args.first_seed, args.first_seed + (args.seeds or 2)):
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "graph is not fully connected"
                labels = SpectralClustering(
                    k, affinity="nearest_neighbors", n_neighbors=10, random_state=seed, n_jobs=1
                ).fit_predict(X)
            seconds = time.perf_counter() - start
            ari, nmi = _scores(y, labels)
            write(
                dict(
                    part="spectral",
                    dataset=name,
                    n=X.shape[0],
                    estimator="sklearn",
                    kernel="spectral",
                    seed=seed,
                    what="SpectralClustering 10-NN",
                    ari=ari,
                    nmi=nmi,
                    seconds=f"{seconds:.2f}",
                )
            )


def part_large(args, write):
    from mbkkm import MemoryPlanError, MiniBatchKernelKMeans

    n, d = 10_000_000, 16
    with tempfile.TemporaryDirectory() as tmp:
        X = np.lib.format.open_memmap(
            os.path.join(tmp, "x.npy"), mode="w+", dtype=np.float32, shape=(n, d)
        )
        rng = np.random.default_rng(0)
        for s in range(0, n, 1_000_000):
            X[s : s + 1_000_000] = rng.random((min(1_000_000, n - s), d), dtype=np.float32)
        X.flush()
        start = time.perf_counter()
        try:
            MiniBatchKernelKMeans(10, kernel="heat", random_state=0).fit(X)
            what, note = "ran", ""
        except MemoryPlanError as exc:
            what, note = "refused", " ".join(str(exc).split())
        write(
            dict(
                part="large",
                dataset="uniform",
                n=n,
                estimator="minibatch",
                kernel="heat",
                seed=0,
                what=what,
                seconds=f"{time.perf_counter() - start:.2f}",
                note=note,
            )
        )


PARTS = {
    "mnist": part_mnist,
    "predict": part_predict,
    "consistency": part_consistency,
    "grid": part_grid,
    "sets": part_sets,
    "spectral": part_spectral,
    "large": part_large,
}


# ---------------------------------------------------------------------------- report


#: The held-out target: the half-fits' predictions agree with the fit on all at least
#: as well as their own labels do on the points they fitted, within this much ARI.
HELD_OUT_SLACK = 0.03


def consistency_summary(cons):
    """Lines of the held-out target's verdict per kernel, from ``--part consistency``.

    Means over seeds and both halves: the half-fits' predictions against the fit on all
    (fits differ and the extension) and the half-fits' own labels against it (fits
    differ, no extension); PASS when the first is at most ``HELD_OUT_SLACK`` below
    the second. Two fits on all with different seeds give the floor of either.
    """
    out = [
        "| kernel | half-fits | predicted half vs fit on all (mean ARI) | fitted half vs "
        "fit on all (mean ARI) | difference | two fits on all (ARI) | held-out target |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kernel in dict.fromkeys(r["kernel"] for r in cons):
        rows = [r for r in cons if r["kernel"] == kernel]
        pred = [float(r["value"]) for r in rows if r["what"].endswith("fit on all, predicted half")]
        fit = [float(r["value"]) for r in rows if r["what"].endswith("fit on all, fitted half")]
        pairs = [float(r["value"]) for r in rows if r["what"] == "fit on all vs fit on all"]
        if not pred or not fit:
            continue
        diff = np.mean(pred) - np.mean(fit)
        verdict = "PASS" if diff >= -HELD_OUT_SLACK else "FAIL"
        out.append(
            f"| {kernel} | {len(pred)} | {np.mean(pred):.3f} | {np.mean(fit):.3f} | "
            f"{diff:+.3f} | {', '.join(f'{v:.3f}' for v in pairs)} | {verdict} "
            f"(>= -{HELD_OUT_SLACK}) |"
        )
    return [*out, ""]


def report(path):
    rows = list(csv.DictReader(Path(path).open()))
    out = []
    mnist = [r for r in rows if r["part"] == "mnist"]
    if mnist:
        out += [
            "| estimator, kernel | seed | ARI | NMI | fit + labels s | peak RSS MB | t "
            "| rank | error | phases s (PCA, k-NN, eigenpairs, t) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in mnist:
            ph = json.loads(r["note"])
            out.append(
                f"| {r['estimator']}, {r['kernel']} | {r['seed']} | {r['ari']} | "
                f"{r['nmi']} | {r['seconds']} | {r['peak_mb']} | {r['t']} | "
                f"{r['rank']} | {r['error']} | {ph['projection']}, {ph['neighbors']}, "
                f"{ph['eigensolver_seconds']}, {ph['t_selection']} |"
            )

        def key(r):  # rows before the n_neighbors was recorded form their own group
            note = json.loads(r["note"])
            return (
                r["estimator"],
                r["kernel"],
                r["what"],
                note.get("n_neighbors", "-") if "asked" not in note else "auto",
            )

        for est, kernel, what, used in dict.fromkeys(key(r) for r in mnist):
            sel = [r for r in mnist if key(r) == (est, kernel, what, used)]
            if used == "auto":
                used = "auto: " + ", ".join(
                    str(k) for k in sorted({json.loads(r["note"])["n_neighbors"] for r in sel})
                )
            a = np.array([float(r["ari"]) for r in sel])
            m = np.array([float(r["nmi"]) for r in sel])
            s = np.array([float(r["seconds"]) for r in sel])
            p = np.array([float(r["peak_mb"]) for r in sel])
            name = ", ".join(
                filter(
                    None,
                    (est, kernel, what.replace("fit+labels", "").strip(), f"{used} neighbours"),
                )
            )
            out.append(
                f"| **{name}: mean** | {len(sel)} | **{a.mean():.3f}** | "
                f"**{m.mean():.3f}** (min {m.min():.3f}) | {s.mean():.1f} "
                f"(max {s.max():.1f}) | {p.max():.0f} (max) | | | | |"
            )
        out.append("")
    pred = [r for r in rows if r["part"] == "predict"]
    if pred:
        out += [
            "| kernel | estimator | what | agreement / ARI | labels vs digits ARI / NMI |",
            "| --- | --- | --- | --- | --- |",
        ]
        for r in pred:
            out.append(
                f"| {r['kernel']} | {r['estimator']} | {r['what']} | {r['value']} "
                f"{r['note']} | {r['ari']} / {r['nmi']} |"
            )
        out.append("")
    cons = [r for r in rows if r["part"] == "consistency"]
    if cons:
        out += [
            "| kernel | seed | what | n | ARI between the two labellings | vs digits ARI / NMI |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for r in cons:
            truth = f"{r['ari']} / {r['nmi']}" if r["ari"] else ""
            out.append(
                f"| {r['kernel']} | {r['seed']} | {r['what']} | {r['n']} | {r['value']} "
                f"{r['note']} | {truth} |"
            )
        out.append("")
        out += consistency_summary(cons)
    grid = [r for r in rows if r["part"] == "grid"]
    if grid:
        out += [
            "| t | rank | error bound | cut (criterion) | ARI | NMI | |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in grid:
            out.append(
                f"| {r['t']} | {r['rank']} | {r['error']} | {r['value']} | {r['ari']} "
                f"| {r['nmi']} | {r['note']} |"
            )
        out.append("")
    sets = [r for r in rows if r["part"] == "sets" and r["kernel"] != "rbf auto"]
    if sets:
        same_bench = [r for r in rows if r["part"] == "sets" and r["kernel"] == "rbf auto"]
        auto = _gamma_auto_rows()
        spectral = [r for r in rows if r["part"] == "spectral"]
        out += [
            "| data | estimator, kernel_params | seeds | heat ARI (std) | heat NMI | heat s "
            "| rbf auto ARI (std) | rbf auto NMI "
            "| misassigned heat / rbf (mean) "
            "| SpectralClustering ARI / NMI / s (seeds) | components of the 10-NN graph "
            "(largest) | n_neighbors used | median t | warned |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]

        def key(r):  # the neighbours used: the rule of the code that measured the row
            note = json.loads(r["note"])
            return (
                r["dataset"],
                r["estimator"],
                r["what"],
                note["n_neighbors"] if "asked" not in note else "auto",
            )

        for name, est, what, used in dict.fromkeys(key(r) for r in sets):
            sel = [r for r in sets if key(r)[:3] == (name, est, what) and key(r)[3] == used]
            seeds = {r["seed"] for r in sel}
            # The reference: rbf auto fitted by this bench with the same estimator and
            # seeds where it was (--rbf), else bench_gamma's MiniBatchKernelKMeans rows.
            ref = [
                r
                for r in same_bench
                if r["dataset"] == name and r["estimator"] == est and r["seed"] in seeds
            ] or [r for r in auto if r["dataset"] == name and r["seed"] in seeds]
            wrong = [json.loads(r["note"]).get("misassigned") for r in sel]
            ref_wrong = [json.loads(r.get("note") or "{}").get("misassigned") for r in ref]
            wrong_text = (
                f"{np.mean(wrong):.1f} / {np.mean(ref_wrong):.1f}"
                if None not in wrong + ref_wrong and ref
                else ""
            )
            a = np.mean([float(r["ari"]) for r in sel])
            a_sd = np.std([float(r["ari"]) for r in sel], ddof=1) if len(sel) > 1 else 0.0
            m = np.mean([float(r["nmi"]) for r in sel])
            ra = np.mean([float(r["ari"]) for r in ref]) if ref else float("nan")
            ra_sd = np.std([float(r["ari"]) for r in ref], ddof=1) if len(ref) > 1 else 0.0
            rm = np.mean([float(r["nmi"]) for r in ref]) if ref else float("nan")
            note = json.loads(sel[0]["note"])
            sc = [r for r in spectral if r["dataset"] == name]
            sc_text = (
                f"{np.mean([float(r['ari']) for r in sc]):.3f} / "
                f"{np.mean([float(r['nmi']) for r in sc]):.3f} / "
                f"{np.mean([float(r['seconds']) for r in sc]):.1f} ({len(sc)})"
                if sc
                else ""
            )
            sec = np.mean([float(r["seconds"]) for r in sel])
            used = sorted({json.loads(r["note"])["n_neighbors"] for r in sel})
            out.append(
                f"| {name} | {est}, {what} | {len(sel)} | {a:.3f} ({a_sd:.3f}) | "
                f"{m:.3f} | {sec:.1f} | {ra:.3f} ({ra_sd:.3f}) | "
                f"{rm:.3f} | {wrong_text} | {sc_text} | "
                f"{sel[0]['components']} ({', '.join(map(str, note['largest']))}) | "
                f"{', '.join(map(str, used))} | "
                f"{np.median([float(r['t']) for r in sel]):.3g} | "
                f"{'yes' if note['warned'] else 'no'} |"
            )
        out.append("")
    for r in (r for r in rows if r["part"] == "large"):
        out.append(f"10,000,000 x 16: {r['what']} in {r['seconds']} s: {r['note']}")
    text = "\n".join(out)
    print(text)
    return text


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=sorted(PARTS), action="append")
    p.add_argument("--out", default=str(REPO / "docs" / "results" / "graph.csv"))
    p.add_argument("--report", action="store_true")
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--estimators", default="minibatch,full")
    p.add_argument("--kernels", default="heat,knn")
    p.add_argument(
        "--datasets",
        default="rings,moons,blobs,iris,wine,breast_cancer,digits,pendigits,letter,mnist",
    )
    p.add_argument(
        "--rbf",
        action="store_true",
        help="--part sets: also fit kernel='rbf', gamma='auto' (same estimator, "
        "data and seeds), the report's reference",
    )
    p.add_argument(
        "--kernel-params",
        type=json.loads,
        default=None,
        help="kernel_params of the heat kernel in --part sets and mnist, as JSON",
    )
    p.add_argument("--data-home", default=str(DATA_HOME))
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--estimator", default="minibatch", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.datasets = args.datasets.split(",")
    args.estimators = args.estimators.split(",")
    args.kernels = args.kernels.split(",")
    if args.child:
        return _child(args)
    if args.report:
        return report(args.out)
    out = Path(args.out)
    new = not out.exists()
    out.parent.mkdir(parents=True, exist_ok=True)
    print(
        f"# {platform.node()} {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}",
        flush=True,
    )
    with out.open("a", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        if new:
            writer.writeheader()

        def write(row):
            writer.writerow(row)
            f.flush()
            print(
                " ".join(f"{c}={row[c]}" for c in FIELDS if row.get(c) not in (None, "")),
                flush=True,
            )

        for part in args.part or []:
            PARTS[part](args, write)


if __name__ == "__main__":
    main()
