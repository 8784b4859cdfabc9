"""The numbers of docs/results/README.md, from the result tables only.

Run from the repository root::

    python docs/results/report.py [TABLE_OR_FOLDER ...]   # default: docs/results/tables

It prints one Markdown table per claim of the paper (and writes the summary,
mean and standard deviation over seeds, to ``docs/results/summary.csv``). Times
are CPU seconds of the run's process (``fit_cpu_seconds`` plus
``kernel_cpu_seconds``): the tables were written on a shared 2-core machine,
where the wall time also counts the waits for a core.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from mbkkm.experiments import label_kernel_variants, read_results, summarize

HERE = Path(__file__).resolve().parent
DATASETS = ["pendigits", "letter", "mnist", "har"]
KERNELS = {"rbf": "Gaussian", "knn": "k-NN", "heat": "heat"}
#: The non-kernel mini-batch k-means baselines of every grid.
NO_KERNEL = "none (mini-batch k-means)"
MAIN_B, MAIN_TAU = 1024, 200


def _fmt(x, digits=3):
    """x with ``digits`` decimals, or 4 significant digits where ``digits`` is None."""
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "-"
    return f"{x:.4g}" if digits is None else f"{x:.{digits}f}"


def _table(header, rows):
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _pick(s, dataset, kernel, algorithm, b=None, tau=None):
    """The summary row of one setting (kernel "none" for the non-kernel baselines)."""
    m = (s["dataset"] == dataset) & (s["algorithm"] == algorithm)
    m &= s["kernel"] == ("none" if algorithm.startswith("minibatch-") else kernel)
    if b is not None:
        m &= s["batch_size"] == b
    if tau is not None:
        m &= s["tau"] == tau
    sub = s[m]
    return None if sub.empty else sub.iloc[0]


def _cell(r, what="ari"):
    if r is None:
        return "-"
    sd = r.get(f"{what}_std")
    return f"{r[f'{what}_mean']:.3f} ± {sd:.3f}" if sd == sd else f"{r[f'{what}_mean']:.3f}"


def _secs(r):
    """CPU seconds of the run (fit + kernel), or wall seconds for a table without them."""
    v = r.get("total_cpu_seconds_mean", np.nan)
    return float(v) if v == v else float(r["total_seconds_mean"])


def _tcell(r):
    wall = r.get("total_cpu_seconds_mean", np.nan) != r.get("total_cpu_seconds_mean", np.nan)
    return f"{_secs(r):.2f} s{' wall' if wall else ''}"


def _base(kernel):
    """The kernel's name without the parameters that tell its variants apart."""
    return str(kernel).split(" (")[0]


def _name(kernel):
    """The kernel as the tables name it: "k-NN", "k-NN (n_neighbors=2000)", ..."""
    base = _base(kernel)
    return KERNELS.get(base, NO_KERNEL) + str(kernel)[len(base):]


def _pairs(s):
    kernels = [k for base in KERNELS for k in dict.fromkeys(s["kernel"]) if _base(k) == base]
    return [(d, k) for k in kernels for d in DATASETS
            if ((s["dataset"] == d) & (s["kernel"] == k)).any()]


def seeds(df):
    df = label_kernel_variants(df)
    ok = df[df["status"] == "ok"]
    rows = []
    for (d, k), g in ok.groupby(["dataset", "kernel"], sort=False):
        per = g.groupby(["algorithm", "batch_size", "tau"], dropna=False).size()
        skipped = df[(df["dataset"] == d) & (df["kernel"] == k) & (df["status"] == "skipped")]
        rows.append([d, _name(k), len(g), f"{per.min()}-{per.max()}" if per.min()
                     != per.max() else str(per.min()), len(skipped),
                     ", ".join(sorted(set(g["commit"].dropna().astype(str)))) or "-"])
    return _table(["dataset", "kernel", "runs ok", "seeds per setting", "skipped",
                   "commit"], rows)


def speedup(s):
    rows = []
    for d, k in _pairs(s):
        full = _pick(s, d, k, "full-batch")
        tr = _pick(s, d, k, "truncated", MAIN_B, MAIN_TAU)
        if tr is None:
            continue
        best = s[(s["dataset"] == d) & (s["kernel"] == k) & (s["algorithm"] == "truncated")]
        fast = best.loc[best.apply(_secs, axis=1).idxmin()]
        tr_cell = f"{_cell(tr)} / {tr['objective_mean']:.4g} / {_tcell(tr)}"
        if full is None:
            rows.append([d, _name(k), "skipped", tr_cell, "-", "-"])
            continue
        rows.append([
            d, _name(k),
            f"{_cell(full)} / {full['objective_mean']:.4g} / {_tcell(full)}", tr_cell,
            f"{_secs(full) / _secs(tr):.1f}x "
            f"(b={int(fast['batch_size'])}, tau={int(fast['tau'])}: "
            f"{_secs(full) / _secs(fast):.0f}x, "
            f"ARI {fast['ari_mean']:.3f})",
            f"{tr['ari_mean'] - full['ari_mean']:+.3f}",
        ])
    return _table(["dataset", "kernel", "full batch: ARI / objective / CPU",
                   f"truncated b={MAIN_B}, tau={MAIN_TAU}: ARI / objective / CPU",
                   "speed-up (fastest truncated)", "ARI difference"], rows)


def truncation(s):
    rows = []
    for d, k in _pairs(s):
        unt = _pick(s, d, k, "untruncated", MAIN_B)
        if unt is None:
            continue
        cells = [d, _name(k), f"{unt['ari_mean']:.3f} ({unt['objective_mean']:.4g})"]
        for tau in (50, 100, 200, 300):
            r = _pick(s, d, k, "truncated", MAIN_B, tau)
            cells.append("-" if r is None else f"{r['ari_mean']:.3f} ({r['objective_mean']:.4g})")
        tr = _pick(s, d, k, "truncated", MAIN_B, MAIN_TAU)
        cells.append("-" if tr is None else f"{_secs(unt) / _secs(tr):.0f}x")
        # Over every b: the largest ARI gap between tau = 50 and untruncated.
        gaps = []
        for b in (256, 512, 1024, 2048):
            u, t50 = _pick(s, d, k, "untruncated", b), _pick(s, d, k, "truncated", b, 50)
            if u is not None and t50 is not None:
                gaps.append(t50["ari_mean"] - u["ari_mean"])
        cells.append(f"{min(gaps):+.3f} .. {max(gaps):+.3f}" if gaps else "-")
        rows.append(cells)
    return _table(["dataset", "kernel", "untruncated", "tau = 50", "100", "200", "300",
                   "CPU untruncated / tau = 200", "ARI(tau=50) - ARI(untruncated), every b"],
                  rows)


def literal(s):
    rows = []
    for d, k in _pairs(s):
        cells = [d, _name(k)]
        for tau in (50, 100, 200, 300):
            r = _pick(s, d, k, "truncated", MAIN_B, tau)
            lit = _pick(s, d, k, "truncated-literal", MAIN_B, tau)
            cells.append("-" if r is None or lit is None else
                         f"{r['ari_mean']:.3f} / {r['objective_mean']:.4g} vs "
                         f"{lit['ari_mean']:.3f} / {lit['objective_mean']:.4g}")
        rows.append(cells)
    return _table(["dataset", "kernel", "tau = 50", "100", "200", "300"], rows)


def _mean_over_b(s, d, k, algo, col="ari_mean"):
    vals = [_pick(s, d, k, algo, b) for b in (256, 512, 1024, 2048)]
    vals = [v[col] for v in vals if v is not None]
    return (float(np.mean(vals)), len(vals)) if vals else (np.nan, 0)


def _wins(s, d, k, a, c):
    """'w/n': of the n batch sizes where both ran, w where a has the higher mean ARI."""
    w = n = 0
    for b in (256, 512, 1024, 2048):
        ra, rc = _pick(s, d, k, a, b), _pick(s, d, k, c, b)
        if ra is not None and rc is not None:
            n += 1
            w += ra["ari_mean"] > rc["ari_mean"]
    return f"{w}/{n}"


def rates(s):
    rows = []
    for d, k in _pairs(s):
        ua, nb = _mean_over_b(s, d, k, "untruncated")
        uc, _ = _mean_over_b(s, d, k, "untruncated-classic")
        oa, _ = _mean_over_b(s, d, k, "untruncated", "objective_mean")
        oc, _ = _mean_over_b(s, d, k, "untruncated-classic", "objective_mean")
        ma, _ = _mean_over_b(s, d, k, "minibatch-adaptive")
        mc, _ = _mean_over_b(s, d, k, "minibatch-classic")
        rows.append([d, _name(k), nb, f"{_fmt(ua)} ({_fmt(oa, None)})",
                     f"{_fmt(uc)} ({_fmt(oc, None)})",
                     _wins(s, d, k, "untruncated", "untruncated-classic"), _fmt(ma),
                     _fmt(mc), _wins(s, d, k, "minibatch-adaptive", "minibatch-classic")])
    return _table(["dataset", "kernel", "batch sizes", "untruncated, β rate",
                   "untruncated, sklearn rate", "β ahead (b)", "mini-batch k-means, β",
                   "mini-batch k-means, sklearn", "β ahead (b)"], rows)


def kernel_vs_plain(s):
    rows = []
    for d, k in _pairs(s):
        tr = _pick(s, d, k, "truncated", MAIN_B, MAIN_TAU)
        ma = _pick(s, d, k, "minibatch-adaptive", MAIN_B)
        mc = _pick(s, d, k, "minibatch-classic", MAIN_B)
        ny = _pick(s, d, k, "nystroem", MAIN_B)
        rows.append([d, _name(k), _cell(tr), _cell(tr, "nmi"), _cell(ma), _cell(mc),
                     "-" if ny is None else f"{_cell(ny)} ({_tcell(ny)})"])
    return _table(["dataset", "kernel", f"truncated (b={MAIN_B}, tau={MAIN_TAU}) ARI",
                   "its NMI", "mini-batch k-means β", "mini-batch k-means sklearn",
                   "Nyström 1000 + MiniBatchKMeans (CPU)"], rows)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    df = read_results([Path(a) for a in argv] if argv else HERE / "tables")
    s = summarize(df)
    s.to_csv(HERE / "summary.csv", index=False, float_format="%.6g")
    for title, text in (("Seeds and runs", seeds(df)), ("Speed-up", speedup(s)),
                        ("Truncation", truncation(s)), ("Literal truncation", literal(s)),
                        ("Learning rates", rates(s)), ("Kernel vs non-kernel", kernel_vs_plain(s))):
        print(f"### {title}\n\n{text}\n")


if __name__ == "__main__":
    main()
