"""The numbers of docs/results/README.md, from the result tables only.

Run from the repository root::

    python docs/results/report.py [TABLE_OR_FOLDER ...]   # default: docs/results/tables
    python docs/results/report.py --write                 # also rewrite the anchored numbers

It prints one Markdown table per claim of the paper (and writes the summary,
mean and standard deviation over seeds, to ``docs/results/summary.csv``). Times
are CPU seconds of the run's process (``fit_cpu_seconds`` plus
``kernel_cpu_seconds``): the tables were written on a shared 2-core machine,
where the wall time also counts the waits for a core.

The numbers the pages of :data:`PAGES` quote are anchored to their sources:

* a table printed here sits between ``<!-- report: NAME -->`` and
  ``<!-- /report -->`` (NAME one of :data:`REPORTS`);
* a number in the text is written ``<!-- claim: KEY ARG ... -->VALUE<!-- /claim -->``
  in Markdown, or as the substitution ``.. |claim: KEY ARG ...| replace:: VALUE``
  in reStructuredText, where ``KEY`` names a function of :data:`CLAIMS` that
  computes VALUE, at its stated rounding, from a results file of the repository
  (the tables, ``docs/results/*.csv``, ``benchmarks/headline.csv``).

``--write`` replaces every anchored table and number by its recomputed value;
``tests/test_claims.py`` fails while a page differs from what this script computes.
"""

from __future__ import annotations

import re
import sys
from functools import cached_property
from pathlib import Path

import numpy as np

from mbkkm.experiments import label_kernel_variants, read_results, summarize

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
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
    return KERNELS.get(base, NO_KERNEL) + str(kernel)[len(base) :]


def _pairs(s):
    kernels = [k for base in KERNELS for k in dict.fromkeys(s["kernel"]) if _base(k) == base]
    return [
        (d, k)
        for k in kernels
        for d in DATASETS
        if ((s["dataset"] == d) & (s["kernel"] == k)).any()
    ]


def seeds(df):
    df = label_kernel_variants(df)
    ok = df[df["status"] == "ok"]
    rows = []
    for (d, k), g in ok.groupby(["dataset", "kernel"], sort=False):
        per = g.groupby(["algorithm", "batch_size", "tau"], dropna=False).size()
        skipped = df[(df["dataset"] == d) & (df["kernel"] == k) & (df["status"] == "skipped")]
        rows.append(
            [
                d,
                _name(k),
                len(g),
                f"{per.min()}-{per.max()}" if per.min() != per.max() else str(per.min()),
                len(skipped),
                ", ".join(sorted(set(g["commit"].dropna().astype(str)))) or "-",
            ]
        )
    return _table(["dataset", "kernel", "runs ok", "seeds per setting", "skipped", "commit"], rows)


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
        rows.append(
            [
                d,
                _name(k),
                f"{_cell(full)} / {full['objective_mean']:.4g} / {_tcell(full)}",
                tr_cell,
                f"{_secs(full) / _secs(tr):.1f}x "
                f"(b={int(fast['batch_size'])}, tau={int(fast['tau'])}: "
                f"{_secs(full) / _secs(fast):.0f}x, "
                f"ARI {fast['ari_mean']:.3f})",
                f"{tr['ari_mean'] - full['ari_mean']:+.3f}",
            ]
        )
    return _table(
        [
            "dataset",
            "kernel",
            "full batch: ARI / objective / CPU",
            f"truncated b={MAIN_B}, tau={MAIN_TAU}: ARI / objective / CPU",
            "speed-up (fastest truncated)",
            "ARI difference",
        ],
        rows,
    )


def _gap(s, d, k):
    """Over every b: the range of the ARI gap between tau = 50 and untruncated."""
    gaps = []
    for b in (256, 512, 1024, 2048):
        u, t50 = _pick(s, d, k, "untruncated", b), _pick(s, d, k, "truncated", b, 50)
        if u is not None and t50 is not None:
            gaps.append(t50["ari_mean"] - u["ari_mean"])
    return f"{min(gaps):+.3f} .. {max(gaps):+.3f}" if gaps else "-"


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
        cells.append(_gap(s, d, k))
        rows.append(cells)
    return _table(
        [
            "dataset",
            "kernel",
            "untruncated",
            "tau = 50",
            "100",
            "200",
            "300",
            "CPU untruncated / tau = 200",
            "ARI(tau=50) - ARI(untruncated), every b",
        ],
        rows,
    )


def literal(s):
    rows = []
    for d, k in _pairs(s):
        cells = [d, _name(k)]
        for tau in (50, 100, 200, 300):
            r = _pick(s, d, k, "truncated", MAIN_B, tau)
            lit = _pick(s, d, k, "truncated-literal", MAIN_B, tau)
            cells.append(
                "-"
                if r is None or lit is None
                else f"{r['ari_mean']:.3f} / {r['objective_mean']:.4g} vs "
                f"{lit['ari_mean']:.3f} / {lit['objective_mean']:.4g}"
            )
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


def _ok(df):
    """The successful runs, kernel variants told apart (as in the summary)."""
    return label_kernel_variants(df[df["status"] == "ok"])


def paired_p(ok, d, k, a, c, b=None):
    """Wilcoxon signed-rank p-value of the ARI of algorithms a and c, paired by
    (batch size, seed), or None with fewer than 5 pairs or none that differ."""
    from scipy.stats import wilcoxon

    def ari(algo):
        kern = "none" if algo.startswith("minibatch-") else k
        m = (ok["dataset"] == d) & (ok["kernel"] == kern) & (ok["algorithm"] == algo)
        if b is not None:
            m &= ok["batch_size"] == b
        return ok[m].set_index(["batch_size", "seed"])["ari"]

    j = ari(a).to_frame("a").join(ari(c).to_frame("c"), how="inner")
    if len(j) < 5 or (j["a"] == j["c"]).all():
        return None
    return float(wilcoxon(j["a"], j["c"]).pvalue)


def _fmt_p(p):
    return "-" if p is None else ("< 0.001" if p < 0.001 else f"{p:.2g}")


def rates(s, df):
    ok = _ok(df)
    rows = []
    for d, k in _pairs(s):
        ua, nb = _mean_over_b(s, d, k, "untruncated")
        uc, _ = _mean_over_b(s, d, k, "untruncated-classic")
        oa, _ = _mean_over_b(s, d, k, "untruncated", "objective_mean")
        oc, _ = _mean_over_b(s, d, k, "untruncated-classic", "objective_mean")
        ma, _ = _mean_over_b(s, d, k, "minibatch-adaptive")
        mc, _ = _mean_over_b(s, d, k, "minibatch-classic")
        rows.append(
            [
                d,
                _name(k),
                nb,
                f"{_fmt(ua)} ({_fmt(oa, None)})",
                f"{_fmt(uc)} ({_fmt(oc, None)})",
                _wins(s, d, k, "untruncated", "untruncated-classic"),
                _fmt_p(paired_p(ok, d, k, "untruncated", "untruncated-classic")),
                _fmt(ma),
                _fmt(mc),
                _wins(s, d, k, "minibatch-adaptive", "minibatch-classic"),
                _fmt_p(paired_p(ok, d, k, "minibatch-adaptive", "minibatch-classic")),
            ]
        )
    return _table(
        [
            "dataset",
            "kernel",
            "batch sizes",
            "untruncated, β rate",
            "untruncated, sklearn rate",
            "β ahead (b)",
            "p",
            "mini-batch k-means, β",
            "mini-batch k-means, sklearn",
            "β ahead (b)",
            "p",
        ],
        rows,
    )


def _truncated_rates(ok, d, k, tau=MAIN_TAU):
    """ARI of truncated (β) and truncated-classic paired by (b, tau, seed): a DataFrame
    with columns a, c (every tau when ``tau`` is None)."""

    def ari(algo):
        m = (ok["dataset"] == d) & (ok["kernel"] == k) & (ok["algorithm"] == algo)
        if tau is not None:
            m &= ok["tau"] == tau
        return ok[m].set_index(["batch_size", "tau", "seed"])["ari"]

    return ari("truncated").to_frame("a").join(ari("truncated-classic").to_frame("c"), how="inner")


def _wilcoxon(j):
    from scipy.stats import wilcoxon

    if len(j) < 5 or (j["a"] == j["c"]).all():
        return None
    return float(wilcoxon(j["a"], j["c"]).pvalue)


def rates_truncated(s, df):
    """β against scikit-learn's rate on the truncated algorithm, where a grid ran both."""
    ok = _ok(df)
    rows = []
    for d, k in _pairs(s):
        j = _truncated_rates(ok, d, k)
        if j.empty:
            continue
        every = _truncated_rates(ok, d, k, None)
        mean = every.groupby(level=["batch_size", "tau"]).mean()
        rows.append(
            [
                d,
                _name(k),
                j.index.get_level_values("batch_size").nunique(),
                _fmt(j["a"].mean()),
                _fmt(j["c"].mean()),
                f"{int((j.groupby(level='batch_size').mean().eval('a > c')).sum())}"
                f"/{j.index.get_level_values('batch_size').nunique()}",
                _fmt_p(_wilcoxon(j)),
                f"{int((mean['a'] > mean['c']).sum())}/{len(mean)}",
                _fmt_p(_wilcoxon(every)),
            ]
        )
    return _table(
        [
            "dataset",
            "kernel",
            "batch sizes",
            f"truncated, β rate (tau={MAIN_TAU})",
            "truncated, sklearn rate",
            "β ahead (b)",
            "p",
            "β ahead (b, tau)",
            "p, every (b, tau)",
        ],
        rows,
    )


def _p_vs_plain(ok, d, k):
    """Paired p of the truncated algorithm (MAIN_B, MAIN_TAU) against β mini-batch k-means."""
    sub = ok[(ok["tau"] == MAIN_TAU) | (ok["algorithm"] != "truncated")]
    return paired_p(sub, d, k, "truncated", "minibatch-adaptive", MAIN_B)


def kernel_vs_plain(s, df):
    ok = _ok(df)
    rows = []
    for d, k in _pairs(s):
        tr = _pick(s, d, k, "truncated", MAIN_B, MAIN_TAU)
        ma = _pick(s, d, k, "minibatch-adaptive", MAIN_B)
        mc = _pick(s, d, k, "minibatch-classic", MAIN_B)
        ny = _pick(s, d, k, "nystroem", MAIN_B)
        rows.append(
            [
                d,
                _name(k),
                _cell(tr),
                _cell(tr, "nmi"),
                _cell(ma),
                _fmt_p(_p_vs_plain(ok, d, k)),
                _cell(mc),
                "-" if ny is None else f"{_cell(ny)} ({_tcell(ny)})",
            ]
        )
    return _table(
        [
            "dataset",
            "kernel",
            f"truncated (b={MAIN_B}, tau={MAIN_TAU}) ARI",
            "its NMI",
            "mini-batch k-means β",
            "p",
            "mini-batch k-means sklearn",
            "Nyström 1000 + MiniBatchKMeans (CPU)",
        ],
        rows,
    )


# ------------------------------------------------------------------ anchored numbers
#: The pages whose tables and numbers are anchored to their sources.
PAGES = [
    ROOT / "README.md",
    HERE / "README.md",
    ROOT / "docs" / "reproduction.rst",
    ROOT / "docs" / "gamma.md",
    *(
        ROOT / "docs" / "user_guide" / f"{page}.rst"
        for page in ("performance", "kernels", "algorithm")
    ),
]
#: The figures of the benchmarks that the pages quote (one row per measurement,
#: each with the section of benchmarks/README.md that quotes it).
HEADLINE = ROOT / "benchmarks" / "headline.csv"

# A table's block holds no other HTML comment (an empty block holds one line).
_BLOCK = re.compile(r"(<!-- report: (\w+) -->\n)((?:(?!<!--).)*?)(\n<!-- /report -->)", re.S)
_CLAIM = re.compile(r"(<!-- claim: ([^>\n]*?) -->)([^\n]*?)(<!-- /claim -->)")
_RST_CLAIM = re.compile(r"^(\.\. \|claim: ([^|]*)\| replace:: )(.*)$", re.M)


class Results:
    """The results files, read once, as the claims need them."""

    def __init__(self, tables=None):
        self.tables = [Path(a) for a in tables] if tables else [HERE / "tables"]
        self.memo = {}  # {anchor: its computed text}

    @cached_property
    def df(self):
        return read_results(self.tables)

    @cached_property
    def ok(self):
        return _ok(self.df)

    @cached_property
    def s(self):
        return summarize(self.df)

    @cached_property
    def raw(self):
        """{table stem: its runs}: each table's rows, the newest row of a run id kept (as
        :func:`read_results` keeps it), whatever the other tables hold."""
        files = [f for p in self.tables for f in (sorted(p.glob("*.csv")) if p.is_dir() else [p])]
        return {f.stem: read_results(f) for f in files} if files else {}

    @cached_property
    def headline(self):
        import pandas as pd

        return pd.read_csv(HEADLINE, dtype=str).set_index("key")

    def csv(self, name):
        import pandas as pd

        return pd.read_csv(HERE / f"{name}.csv")


#: Tables this script prints, by the name of their ``<!-- report: NAME -->`` anchor.
REPORTS = {
    "seeds": lambda r: seeds(r.df),
    "speedup": lambda r: speedup(r.s),
    "truncation": lambda r: truncation(r.s),
    "literal": lambda r: literal(r.s),
    "rates": lambda r: rates(r.s, r.df),
    "rates_truncated": lambda r: rates_truncated(r.s, r.df),
    "kernel_vs_plain": lambda r: kernel_vs_plain(r.s, r.df),
}
#: Numbers quoted in the text: KEY -> function(results, *args) -> the text of the number.
CLAIMS = {}


def claim(func):
    CLAIMS[func.__name__.removeprefix("c_")] = func
    return func


def _setting(r, d, k, algo, b=None, tau=None):
    row = _pick(
        r.s, d, _kernel(k), algo, None if b is None else int(b), None if tau is None else int(tau)
    )
    if row is None:
        raise KeyError(f"no runs of {algo} on {d}, {k}, b={b}, tau={tau}")
    return row


def _x(v):
    """A ratio as the text gives it: one decimal below 10, none above."""
    return f"{v:.1f}" if v < 9.95 else f"{v:.0f}"


@claim
def c_ari(r, d, k, algo, b=None, tau=None):
    """Mean ARI over seeds of one setting, 3 decimals."""
    return f"{_setting(r, d, k, algo, b, tau)['ari_mean']:.3f}"


@claim
def c_ari_sd(r, d, k, algo, b=None, tau=None):
    """'mean ± std' ARI over seeds of one setting."""
    return _cell(_setting(r, d, k, algo, b, tau))


@claim
def c_cpu(r, d, k, algo, b=None, tau=None):
    """Mean CPU seconds (fit + kernel) of one setting, 1 decimal."""
    return f"{_secs(_setting(r, d, k, algo, b, tau)):.1f}"


@claim
def c_speedup(r, d, k, b=MAIN_B, tau=MAIN_TAU):
    """Full batch's CPU time over the truncated algorithm's at (b, tau)."""
    full, tr = _setting(r, d, k, "full-batch"), _setting(r, d, k, "truncated", b, tau)
    return _x(_secs(full) / _secs(tr))


@claim
def c_ari_diff(r, d, k, b=MAIN_B, tau=MAIN_TAU):
    """Truncated (b, tau) minus full batch, mean ARI, signed, 3 decimals."""
    full, tr = _setting(r, d, k, "full-batch"), _setting(r, d, k, "truncated", b, tau)
    return f"{tr['ari_mean'] - full['ari_mean']:+.3f}"


@claim
def c_gap(r, d, k):
    """Range over b of ARI(truncated, tau = 50) - ARI(untruncated)."""
    return _gap(r.s, d, _kernel(k))


@claim
def c_untruncated_ratio(r, d, k):
    """CPU time of the untruncated algorithm over the truncated one's, b = 1024, tau = 200."""
    unt, tr = (
        _setting(r, d, k, "untruncated", MAIN_B),
        _setting(r, d, k, "truncated", MAIN_B, MAIN_TAU),
    )
    return f"{_secs(unt) / _secs(tr):.0f}"


@claim
def c_mean_over_b(r, d, k, algo):
    """Mean ARI of an algorithm over the batch sizes run, 3 decimals."""
    return _fmt(_mean_over_b(r.s, d, _kernel(k), algo)[0])


@claim
def c_ahead(r, d, k, a, c):
    """'w of n': the batch sizes where a has the higher mean ARI than c."""
    return _wins(r.s, d, _kernel(k), a, c).replace("/", " of ")


@claim
def c_p(r, d, k, a, c):
    """Wilcoxon signed-rank p of a vs c, paired by (batch size, seed)."""
    return _fmt_p(paired_p(r.ok, d, _kernel(k), a, c))


@claim
def c_p_truncated(r, d, k, tau=None):
    """Paired p of truncated against truncated-classic: at one tau, or over every tau."""
    return _fmt_p(_wilcoxon(_truncated_rates(r.ok, d, k, None if tau is None else int(tau))))


@claim
def c_mean_truncated(r, d, k, which):
    """Mean ARI of truncated ("beta") or truncated-classic ("sklearn") at tau = 200, over
    the (b, seed) pairs both ran."""
    return _fmt(_truncated_rates(r.ok, d, k)[{"beta": "a", "sklearn": "c"}[which]].mean())


@claim
def c_ahead_truncated(r, d, k):
    """'w of n': the (b, tau) settings where truncated beats truncated-classic's mean ARI."""
    mean = _truncated_rates(r.ok, d, k, None).groupby(level=["batch_size", "tau"]).mean()
    return f"{int((mean['a'] > mean['c']).sum())} of {len(mean)}"


@claim
def c_p_vs_plain(r, d, k):
    """Paired p of truncated (b = 1024, tau = 200) against β mini-batch k-means."""
    return _fmt_p(_p_vs_plain(r.ok, d, _kernel(k)))


@claim
def c_rows(r, table=None):
    """Runs in one table (in every table without an argument)."""
    return f"{sum(len(t) for n, t in r.raw.items() if table in (None, n)):,}"


@claim
def c_blas2(r, table=None):
    """Rows of one table (or of all) that ran with two BLAS threads."""
    tables = [t for n, t in r.raw.items() if table in (None, n)]
    return f"{sum(int((t['blas_threads'] == 2).sum()) for t in tables):,}"


@claim
def c_skipped(r, table):
    """Runs of one table recorded as skipped."""
    return str(int((r.raw[table]["status"] == "skipped").sum()))


@claim
def c_seeds(r, d, k):
    """Seeds per setting of one data set and kernel: '10', or '3-10' where they differ."""
    ok = r.ok[(r.ok["dataset"] == d) & (r.ok["kernel"] == _kernel(k))]
    per = ok.groupby(["algorithm", "batch_size", "tau"], dropna=False).size()
    lo, hi = int(per.min()), int(per.max())
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _gamma_sets(r, which):
    """The rows of gamma-summary.csv: "balanced", "unbalanced" (``*_unbal*``) or "all"."""
    g = r.csv("gamma-summary")
    unbal = g["dataset"].str.contains("_unbal")
    return {"balanced": g[~unbal], "unbalanced": g[unbal], "all": g}[which]


@claim
def c_gamma_mean(r, column, which="balanced", digits="2"):
    """Mean of a column of gamma-summary.csv over a group of its sets."""
    return f"{_gamma_sets(r, which)[column].mean():.{int(digits)}f}"


@claim
def c_gamma_sets(r, which="balanced"):
    """How many sets of gamma-summary.csv a group holds."""
    return str(len(_gamma_sets(r, which)))


@claim
def c_gamma_auto(r, dataset, column, digits="2"):
    """Mean ``column`` (ari, nmi) of the ``gamma="auto"`` runs of gamma.csv on a data set."""
    g = r.csv("gamma")
    g = g[(g["dataset"] == dataset) & (g["method"] == "auto")]
    return f"{g[column].mean():.{int(digits)}f}"


@claim
def c_graph(r, rows, column, stat="mean", digits="2"):
    """A statistic of one run of graph.csv: its data rows ``first-last`` (0-based).

    ``stat`` is mean, min, max or range ("min-max"), at ``digits`` decimals.
    """
    first, last = map(int, rows.split("-"))
    v = r.csv("graph").loc[first:last, column]
    f = f"{{:.{int(digits)}f}}".format
    return f"{f(v.min())}-{f(v.max())}" if stat == "range" else f(getattr(v, stat)())


#: Columns of the result tables by the short names the claims use.
_COLUMNS = {"cpu": "total_cpu_seconds", "fit": "fit_cpu_seconds", "kernel": "kernel_cpu_seconds"}


def _kernel(k):
    """A kernel as a claim names it, without spaces: "knn:455" is "knn (n_neighbors=455)"."""
    base, _, n = k.partition(":")
    return f"{base} (n_neighbors={n})" if n else k


def _options(opts):
    """{name: value} of a claim's ``name=value`` arguments."""
    return dict(o.split("=", 1) for o in opts)


def _runs_of(r, d, k, algo, o):
    """The successful runs of one algorithm (several, comma-separated; "any": every
    algorithm of the kernel), of
    batch size o["b"] and tau o["tau"] if given."""
    ok = r.ok
    m = (ok["dataset"] == d) & (ok["algorithm"].isin(algo.split(",")) | (algo == "any"))
    m &= ok["kernel"] == ("none" if algo.startswith("minibatch-") else _kernel(k))
    for key, col in (("b", "batch_size"), ("tau", "tau")):
        if key in o:
            m &= ok[col].isin([int(v) for v in o[key].split(",")])
    runs = ok[m].assign(
        total_cpu_seconds=ok["fit_cpu_seconds"] + ok["kernel_cpu_seconds"].fillna(0)
    )
    if runs.empty:
        raise KeyError(f"no runs of {algo} on {d}, {k}, {o}")
    return runs


def _stat(v, o, default_digits=3):
    """``v`` (a Series) reduced as o["stat"] says (range, mean, min, max, list, count), at
    o["digits"] decimals (thousands separated where o["comma"]). A range whose ends round
    alike is one number."""
    digits = int(o.get("digits", default_digits))
    f = f"{{:{',' if o.get('comma') else ''}.{digits}f}}".format
    stat = o.get("stat", "range")
    if stat == "count":
        return str(len(v))
    if stat == "range":
        lo, hi = f(v.min()), f(v.max())
        return lo if lo == hi else f"{lo}-{hi}"
    if stat == "list":
        return " / ".join(f(x) for x in v)
    return f(getattr(v, stat)())


@claim
def c_runs(r, column, d, k, algo, *opts):
    """A statistic of ``column`` (ari, nmi, n_iter, cpu, fit, kernel, ...) over the runs
    of one algorithm; options ``b=``, ``tau=`` (comma-separated), ``stat=`` (range, mean,
    min, max), ``digits=``."""
    o = _options(opts)
    return _stat(_runs_of(r, d, k, algo, o)[_COLUMNS.get(column, column)], o)


@claim
def c_means(r, column, d, k, algo, *opts):
    """A statistic over the settings (algorithm, b, tau) of their mean ``column``
    over seeds (``agg=std``: their standard deviation); options as :func:`c_runs`, and
    ``stat=list``: the settings' values in order of b, then tau, joined by " / "."""
    o = _options(opts)
    runs = _runs_of(r, d, k, algo, o)
    g = runs.groupby(["algorithm", "batch_size", "tau"], dropna=False)[_COLUMNS.get(column, column)]
    return _stat(g.agg(o.get("agg", "mean")).sort_index(), o)


@claim
def c_diff(r, d, k, a, c, b=None, tau=None):
    """Mean ARI of algorithm a minus c's at one setting, 3 decimals."""
    ra, rc = _setting(r, d, k, a, b, tau), _setting(r, d, k, c, b, tau)
    return f"{ra['ari_mean'] - rc['ari_mean']:.3f}"


@claim
def c_obj_diff(r, d, k, b=MAIN_B, tau=MAIN_TAU):
    """Truncated (b, tau) minus full batch, mean objective, 3 decimals."""
    full, tr = _setting(r, d, k, "full-batch"), _setting(r, d, k, "truncated", b, tau)
    return f"{tr['objective_mean'] - full['objective_mean']:.3f}"


@claim
def c_cpu_ratio(r, d1, d2, k, algo):
    """Mean CPU time of one algorithm on data set d1 over d2's, no decimals."""
    return f"{_secs(_setting(r, d1, k, algo)) / _secs(_setting(r, d2, k, algo)):.0f}"


@claim
def c_over_b_diff(r, d, k, a, c, digits="3"):
    """Mean ARI over the batch sizes of algorithm a minus c's."""
    k = _kernel(k)
    return f"{_mean_over_b(r.s, d, k, a)[0] - _mean_over_b(r.s, d, k, c)[0]:.{int(digits)}f}"


@claim
def c_obj_over_b(r, d, k, algo, digits=None):
    """Mean objective of an algorithm over the batch sizes run (4 significant digits, or
    ``digits`` decimals)."""
    v = _mean_over_b(r.s, d, _kernel(k), algo, "objective_mean")[0]
    return _fmt(v, None if digits is None else int(digits))


@claim
def c_vs_plain(r, d, k, digits="3"):
    """Truncated (b = 1024, tau = 200) minus β mini-batch k-means (b = 1024), mean ARI."""
    tr = _setting(r, d, k, "truncated", MAIN_B, MAIN_TAU)
    ma = _setting(r, d, k, "minibatch-adaptive", MAIN_B)
    return f"{tr['ari_mean'] - ma['ari_mean']:.{int(digits)}f}"


@claim
def c_literal_obj(r, d, k, tau, b=MAIN_B):
    """Literal minus renormalised truncation, mean objective at (b, tau), 2 decimals."""
    lit, tr = (_setting(r, d, k, a, b, tau) for a in ("truncated-literal", "truncated"))
    return f"{lit['objective_mean'] - tr['objective_mean']:.2f}"


@claim
def c_column(r, column, digits="1"):
    """Range of a column over every row of the tables (say the load average)."""
    return _stat(r.df[column].astype(float), {"digits": digits})


@claim
def c_versions(r, column):
    """The versions a column of the tables records (mbkkm, numpy, sklearn), " / "-joined."""
    return " / ".join(sorted(r.df[column].dropna().astype(str).unique()))


def _by_seed(r, d, k, algo, b):
    """ARI of one algorithm's runs at batch size b, indexed by seed."""
    return _runs_of(r, d, k, algo, {"b": b}).set_index("seed")["ari"]


@claim
def c_seed_ari(r, d, k, algo, b, seed):
    """ARI of one run (the untruncated algorithms, or one b of another), 3 decimals."""
    return f"{_by_seed(r, d, k, algo, b)[int(seed)]:.3f}"


@claim
def c_seed_gap(r, d, k, a, c, b, *skip):
    """Largest |ARI(a) - ARI(c)| over the seeds both ran at batch size b, the seeds
    ``skip`` left out, 2 decimals."""
    gap = (_by_seed(r, d, k, a, b) - _by_seed(r, d, k, c, b)).abs().dropna()
    return f"{gap.drop([int(x) for x in skip]).max():.2f}"


@claim
def c_fit_ratio(r, d, k, a, c, *opts):
    """Range over b of the mean fit CPU time of algorithm a over c's at each b (c's
    settings filtered by ``tau=``), no decimals."""
    o = _options(opts)
    fa = _runs_of(r, d, k, a, {})["fit_cpu_seconds"].mean()
    fc = _runs_of(r, d, k, c, o).groupby("batch_size")["fit_cpu_seconds"].mean()
    return _stat(fa / fc, {"digits": "0"})


@claim
def c_bench(r, key):
    """A benchmark figure of benchmarks/headline.csv, as it is written there."""
    return r.headline.loc[key, "value"]


@claim
def c_scale(r, n, column, digits="1", device="cpu", commit=None):
    """``column`` of benchmarks/scale.csv's latest row for ``n`` points on ``device``
    (``bench_scale.py``), of the runs at ``commit`` when given (an earlier round);
    ``digits`` decimals, or ``int`` with thousands separators."""
    import pandas as pd

    t = pd.read_csv(ROOT / "benchmarks" / "scale.csv", dtype={"commit": str})
    rows = t[(t["n"] == int(float(n))) & (t["device"] == device)]
    row = (rows if commit is None else rows[rows["commit"] == commit]).iloc[-1]
    value = float(row[column])
    return f"{value:,.0f}" if digits == "int" else f"{value:.{int(digits)}f}"


def _run(r, spec):
    """The text of the claim ``spec`` ("KEY ARG ..."), computed once per Results."""
    if spec not in r.memo:
        key, *args = spec.split()
        if key not in CLAIMS:
            raise KeyError(f"unknown claim {key!r} (known: {', '.join(sorted(CLAIMS))})")
        r.memo[spec] = CLAIMS[key](r, *args)
    return r.memo[spec]


def _report(r, name):
    """The table ``name`` of :data:`REPORTS`, computed once per Results."""
    if ("report", name) not in r.memo:
        r.memo["report", name] = REPORTS[name](r)
    return r.memo["report", name]


def render(text, r):
    """``text`` with every anchored table and number recomputed from the results."""
    text = _BLOCK.sub(lambda m: m[1] + _report(r, m[2]) + m[4], text)
    text = _CLAIM.sub(lambda m: m[1] + _run(r, m[2]) + m[4], text)
    return _RST_CLAIM.sub(lambda m: m[1] + _run(r, m[2]), text)


def differences(text, r):
    """[(anchor, written, computed)] for every anchored table and number that differs."""
    out = [(f"report: {m[2]}", m[3], _report(r, m[2])) for m in _BLOCK.finditer(text)]
    out += [(f"claim: {m[2]}", m[3], _run(r, m[2])) for m in _CLAIM.finditer(text)]
    out += [(f"claim: {m[2]}", m[3], _run(r, m[2])) for m in _RST_CLAIM.finditer(text)]
    return [d for d in out if d[1] != d[2]]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    write = "--write" in argv
    argv = [a for a in argv if a != "--write"]
    r = Results(argv)
    r.s.to_csv(HERE / "summary.csv", index=False, float_format="%.6g")
    for title, name in (
        ("Seeds and runs", "seeds"),
        ("Speed-up", "speedup"),
        ("Truncation", "truncation"),
        ("Literal truncation", "literal"),
        ("Learning rates", "rates"),
        ("Learning rates, truncated", "rates_truncated"),
        ("Kernel vs non-kernel", "kernel_vs_plain"),
    ):
        print(f"### {title}\n\n{_report(r, name)}\n")
    if write:
        for page in PAGES:
            text = page.read_text(encoding="utf-8")
            new = render(text, r)
            if new != text:
                page.write_text(new, encoding="utf-8")
                print(f"rewrote {page.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
