"""Figures drawn from saved result tables only (matplotlib, Agg backend).

For each dataset and kernel of the table:

* ``<dataset>-<kernel>-panels.{png,svg}``: the paper's panels — ARI, NMI and
  time per algorithm and batch size (mean over seeds, error bars one standard
  deviation); the truncated algorithms at one tau (default 200, else the
  largest run); full-batch kernel k-means, which has no batch size, is its own
  group; the time bar stacks the kernel-matrix time (black) under the fit time.
  Times are CPU seconds of the run's process (``fit_cpu_seconds``,
  ``kernel_cpu_seconds``: on a shared machine the wall time also counts the
  waits for a core). The title gives
  the number of seeds behind each bar (a range where they differ).
  Non-kernel algorithms (kernel ``"none"``) appear in every kernel's panel whose
  runs have their settings (``max_iter``, ``n_clusters``, ``n_samples``).
* ``<dataset>-<kernel>-tau.{png,svg}``: the effect of tau on the truncated
  algorithms — ARI and objective against tau, one colour per batch size,
  solid for renormalised windows, dashed for the paper's literal truncation,
  with the untruncated run at the same batch size as a dotted line; the title
  gives the number of seeds per point.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .._files import save_figure
from .._validation import require
from ._algorithms import ALGORITHMS

FORMATS = ("png", "svg")


def _seed_note(df, by) -> str:
    """'10 seeds', or '3-10 seeds' where the settings grouped by ``by`` differ."""
    counts = df.groupby(by).size()
    lo, hi = int(counts.min()), int(counts.max())
    return f"{lo} seeds" if lo == hi else f"{lo}-{hi} seeds"


#: Settings of a run besides the grouping keys (dataset, kernel, algorithm, batch
#: size, tau) and the seed: rows that differ in one of them are not seeds of one
#: setting (a quick ``--max-iter 20`` run and the real one in the same table).
_SETTINGS = ("max_iter", "n_clusters", "n_components", "n_samples")


def label_kernel_variants(df):
    """Tell apart the parameterisations of one kernel on one data set, and runs of
    other settings.

    Where the successful rows of a data set and kernel hold more than one
    ``kernel_params`` (say k-NN with 455 and with 2000 neighbours), each such row's
    ``kernel`` becomes the kernel followed by the parameters that differ, e.g.
    ``"knn (n_neighbors=2000)"``, so that no mean, figure or summary mixes them.
    The same holds for the settings ``max_iter``, ``n_clusters``, ``n_components``
    and ``n_samples`` where the rows of one algorithm differ in them:
    ``"rbf (max_iter=3)"``. Other rows are returned unchanged.

    Parameters
    ----------
    df : pandas.DataFrame
        A result table (:func:`~mbkkm.experiments.read_results`).

    Returns
    -------
    df : pandas.DataFrame
        A copy, relabelled where needed.
    """
    import json

    df = df.copy()
    ok = df["status"] == "ok" if "status" in df.columns else np.ones(len(df), dtype=bool)
    has_params = "kernel_params" in df.columns
    settings = [c for c in _SETTINGS if c in df.columns]
    labels = {}  # row index -> the differing parameters and settings of its row
    for (dataset, kernel), group in df[ok].groupby(["dataset", "kernel"], sort=False):
        parsed = {}
        if has_params:
            texts = group["kernel_params"].dropna().astype(str).unique()
            parsed = {t: json.loads(t) for t in texts} if len(texts) > 1 else {}
        keys = sorted({k for p in parsed.values() for k in p})
        differ = [k for k in keys if len({json.dumps(p.get(k)) for p in parsed.values()}) > 1]
        # a setting differs when one algorithm's rows hold two values of it (n_components
        # is set for the Nystroem algorithm only: not a difference between algorithms)
        varying = [c for c in settings if (group.groupby("algorithm")[c].nunique() > 1).any()]
        if not differ and not varying:
            continue
        rows = df.index[(df["dataset"] == dataset) & (df["kernel"] == kernel)]
        for i in rows:
            text = str(df.at[i, "kernel_params"]) if has_params else None
            parts = [f"{k}={parsed[text].get(k)}" for k in differ] if text in parsed else []
            parts += [f"{c}={_plain(df.at[i, c])}" for c in varying if not _missing(df.at[i, c])]
            if parts:
                labels[i] = f"{kernel} ({', '.join(parts)})"
    for i, label in labels.items():
        df.at[i, "kernel"] = label
    return df


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def _plain(value):
    """A setting as written in a label: 20, not 20.0 (a column with gaps is float)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


#: The columns of a result table that :func:`plot_results` and :func:`summarize` read.
_READ_COLUMNS = (
    "dataset",
    "algorithm",
    "kernel",
    "status",
    "batch_size",
    "tau",
    "ari",
    "nmi",
    "objective",
    "objective_space",
    "fit_seconds",
    "kernel_seconds",
    "fit_cpu_seconds",
    "kernel_cpu_seconds",
)


def _successful(results):
    """The rows with status ``ok`` of result tables (paths, or a DataFrame), kernel
    variants labelled (:func:`label_kernel_variants`)."""
    pd = require("pandas", "cli", "the result tables")

    from ._runner import read_results

    df = results if isinstance(results, pd.DataFrame) else read_results(results)
    missing = [c for c in _READ_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(
            f"the result table lacks the columns {missing}, which the figures and the "
            "summary read (run_grid writes them all)."
        )
    return label_kernel_variants(df[df["status"] == "ok"])


def _slug(text: str) -> str:
    """``text`` as a file-name part: letters, digits, ".", "_" and single dashes."""
    import re

    return re.sub(r"[^A-Za-z0-9._]+", "-", text).strip("-")


def _save(fig, out: Path, stem: str, formats) -> list[Path]:
    """``fig`` saved as ``<out>/<stem>.<format>`` in each format, then closed: the paths."""
    import matplotlib.pyplot as plt

    paths = [out / f"{stem}.{fmt}" for fmt in formats]
    for p in paths:
        save_figure(fig, p, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return paths


def algorithm_color(name: str):
    """The colour of an algorithm, the same in every figure (its place in ``ALGORITHMS``)."""
    import matplotlib

    return matplotlib.colormaps["tab10"](list(ALGORITHMS).index(name) % 10)


def _panels(plt, df, dataset, kernel, tau, out, formats):
    import pandas as pd

    trunc = df["algorithm"].isin([a for a, spec in ALGORITHMS.items() if spec.uses_tau])
    df = df[~trunc | (df["tau"] == tau)].copy()
    if df.empty:
        return []
    df["group"] = df["batch_size"].map(lambda b: "full" if pd.isna(b) else str(int(b)))
    groups = sorted(set(df["group"]), key=lambda g: np.inf if g == "full" else int(g))  # full last
    algos = [a for a in ALGORITHMS if a in set(df["algorithm"])]
    df["kernel_time"] = df["kernel_cpu_seconds"].fillna(0.0)
    df["time"] = df["fit_cpu_seconds"] + df["kernel_time"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    width = 0.8 / max(1, len(algos))
    x = np.arange(len(groups))
    for metric, ax in zip(("ari", "nmi", "time"), axes):
        for i, algo in enumerate(algos):
            xs, means, errs, kern = [], [], [], []
            for j, grp in enumerate(groups):
                sub = df[(df["algorithm"] == algo) & (df["group"] == grp)]
                if sub.empty:
                    continue
                vals = sub[metric]
                kern.append(float(sub["kernel_time"].mean()))  # drawn on the time panel
                xs.append(x[j] + (i - (len(algos) - 1) / 2) * width)
                means.append(float(vals.mean()))
                errs.append(float(vals.std(ddof=1)) if len(vals) > 1 else 0.0)
            ax.bar(
                xs,
                means,
                width,
                yerr=errs,
                color=algorithm_color(algo),
                label=ALGORITHMS[algo].label if metric == "ari" else None,
                capsize=2,
                edgecolor="none",
            )
            if metric == "time" and any(k > 0 for k in kern):
                ax.bar(xs, kern, width, color="black", label="kernel matrix" if i == 0 else None)
        ax.set_xticks(x, [f"b={g}" if g != "full" else "full batch" for g in groups])
        ax.set_title({"ari": "ARI", "nmi": "NMI", "time": "CPU time (s)"}[metric])
        if metric == "time":
            ax.set_yscale("log")
    n_labels = sum(len(ax.get_legend_handles_labels()[1]) for ax in axes)
    fig.legend(  # the labelled bars of every panel
        loc="lower center",
        ncol=min(5, n_labels),
        bbox_to_anchor=(0.5, -0.12),
        frameon=False,
    )
    note = _seed_note(df, ["algorithm", "group"])
    fig.suptitle(f"{dataset}, {kernel} kernel (truncated at tau = {tau}; mean ± std over {note})")
    return _save(fig, out, f"{dataset}-{_slug(kernel)}-panels", formats)


def _tau_figure(plt, df, dataset, kernel, out, formats):
    sub = df[df["algorithm"].isin(["truncated", "truncated-literal"])]
    if sub.empty or sub["tau"].nunique() < 1:
        return []
    unt = df[df["algorithm"] == "untruncated"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors = plt.get_cmap("viridis")
    batches = sorted(sub["batch_size"].dropna().unique())
    for metric, ax in zip(("ari", "objective"), axes):
        for i, b in enumerate(batches):
            c = colors(i / max(1, len(batches) - 1) * 0.9)
            for algo, style in (("truncated", "-"), ("truncated-literal", "--")):
                s = sub[(sub["algorithm"] == algo) & (sub["batch_size"] == b)]
                if s.empty:
                    continue
                g = s.groupby("tau")[metric]
                m, e = g.mean(), g.std(ddof=1).fillna(0.0)
                ax.errorbar(
                    m.index,
                    m.values,
                    yerr=e.values,
                    linestyle=style,
                    color=c,
                    marker="o",
                    capsize=2,
                    label=f"b={int(b)} {'renormalised' if style == '-' else 'literal'}",
                )
            u = unt[unt["batch_size"] == b][metric]
            if len(u):
                ax.axhline(float(u.mean()), color=c, linestyle=":", linewidth=1)
        ax.set_xlabel("tau")
        ax.set_title("ARI" if metric == "ari" else "objective (inertia / n, feature space)")
    axes[0].legend(fontsize=7, ncol=2)
    note = _seed_note(sub, ["algorithm", "batch_size", "tau"])
    fig.suptitle(
        f"{dataset}, {kernel} kernel: effect of tau (mean ± std over {note}; dotted: untruncated)"
    )
    return _save(fig, out, f"{dataset}-{_slug(kernel)}-tau", formats)


def plot_results(
    results, out: str | os.PathLike, *, tau: int | None = None, formats=FORMATS
) -> list[Path]:
    """Draw the figures of saved result tables.

    Parameters
    ----------
    results : path, list of paths, or pandas.DataFrame
        CSV tables written by :func:`~mbkkm.experiments.run_grid` (or folders
        holding them), or such a table already read.
    out : path
        Folder for the figures (created).
    tau : int, optional
        tau of the truncated algorithms in the panels; default 200 when run,
        else the largest.
    formats : sequence of {"png", "svg", "pdf"}, default=("png", "svg")

    Returns
    -------
    paths : list of pathlib.Path
        The files written.

    Raises
    ------
    ValueError
        If the table holds no successful run, or ``tau`` is given and no truncated
        run of the table has it.
    """
    require("matplotlib", "plot", "plot_results")
    pd = require("pandas", "cli", "plot_results")

    df = _successful(results)
    if df.empty:
        raise ValueError("the result table holds no successful run (status 'ok') to plot.")
    for col in ("batch_size", "tau", "fit_cpu_seconds", "kernel_cpu_seconds"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    taus = sorted({int(t) for t in df["tau"].dropna()})
    if tau is not None and taus and tau not in taus:
        raise ValueError(
            f"tau={tau}: no truncated run of the table has it; the table's taus are "
            f"{', '.join(map(str, taus))}"
        )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    paths: list[Path] = []
    for dataset in dict.fromkeys(df["dataset"]):
        dsub = df[df["dataset"] == dataset]
        baseline = _is_baseline(dsub["kernel"])
        kernels = list(dict.fromkeys(dsub.loc[~baseline, "kernel"]))
        if not kernels:  # non-kernel algorithms only: each setting its own panels
            kernels, baseline = list(dict.fromkeys(dsub["kernel"])), baseline & False
        for kernel in kernels:
            ksub = dsub[(dsub["kernel"] == kernel) | _baselines_of(dsub, baseline, kernel)]
            taus = sorted(ksub["tau"].dropna().unique())
            t = tau if tau is not None else (200 if 200 in taus else (taus[-1] if taus else None))
            t = None if t is None else int(t)
            paths += _panels(plt, ksub, dataset, kernel, t, out, formats)
            paths += _tau_figure(plt, dsub[dsub["kernel"] == kernel], dataset, kernel, out, formats)
    return paths


def _is_baseline(kernels):
    """Which rows are of a non-kernel algorithm: kernel ``"none"``, or ``"none (...)"``
    where :func:`label_kernel_variants` told settings apart."""
    return (kernels == "none") | kernels.str.startswith("none (")


def _baselines_of(dsub, baseline, kernel):
    """The rows of the non-kernel algorithms (``baseline``) drawn in the panels of
    ``kernel`` (a label): those whose settings (max_iter, n_clusters, n_samples) are
    the kernel's. When the kernel's runs were told apart by a setting, ``"rbf
    (max_iter=20)"``, the baselines were too, ``"none (max_iter=20)"``: each goes
    with the kernel label of its own settings, in whatever label it was put."""
    own = dsub[dsub["kernel"] == kernel]
    match = baseline.copy()
    for c in ("max_iter", "n_clusters", "n_samples"):
        if c in dsub.columns and own[c].notna().any():
            match &= dsub[c].isin(set(own[c].dropna())) | dsub[c].isna()
    return match


def summarize(results):
    """Mean and standard deviation over seeds of the successful runs.

    Parameters
    ----------
    results : path, list of paths, or pandas.DataFrame
        Result tables (see :func:`plot_results`).

    Returns
    -------
    table : pandas.DataFrame
        One row per dataset, kernel, algorithm, batch size and tau, with
        ``n_seeds`` and the mean and std of ARI, NMI, objective, fit, kernel and
        total seconds (wall and CPU).
    """
    pd = require("pandas", "cli", "summarize")

    df = _successful(results)
    keys = ["dataset", "kernel", "algorithm", "objective_space", "batch_size", "tau"]
    for k in ("batch_size", "tau"):
        df[k] = pd.to_numeric(df[k], errors="coerce").fillna(-1).astype(int)
    metrics = ["ari", "nmi", "objective"]
    for kind in ("", "_cpu"):  # wall and CPU seconds
        fit, kernel = f"fit{kind}_seconds", f"kernel{kind}_seconds"
        df[f"total{kind}_seconds"] = df[fit] + df[kernel].fillna(0.0)
        metrics += [fit, kernel, f"total{kind}_seconds"]
    g = df.groupby(keys, sort=False)
    out = g[metrics].agg(["mean", "std"])
    out.columns = [f"{a}_{b}" for a, b in out.columns]
    out.insert(0, "n_seeds", g.size())
    out = out.reset_index()
    for k in ("batch_size", "tau"):
        out[k] = out[k].astype(object).where(out[k] >= 0, "")
    return out
