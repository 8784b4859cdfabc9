"""Figures from a small saved table."""

from __future__ import annotations

import pytest

from mbkkm.experiments import Grid, plot_results, run_grid


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    out = tmp_path_factory.mktemp("res") / "r.csv"
    g = Grid(
        name="p",
        datasets=("blobs",),
        algorithms=(
            "full-batch",
            "truncated",
            "truncated-literal",
            "untruncated",
            "minibatch-adaptive",
        ),
        batch_sizes=(32, 64),
        taus=(10, 20),
        seeds=(0, 1),
        max_iter=4,
        synthetic_samples=120,
    )
    run_grid(g, out, progress=False)
    return out


@pytest.mark.slow
def test_plot_png_svg(table, tmp_path):
    import matplotlib.image as mpimg

    paths = plot_results(table, tmp_path / "fig")
    names = sorted(p.name for p in paths)
    assert names == [
        "blobs-rbf-panels.png",
        "blobs-rbf-panels.svg",
        "blobs-rbf-tau.png",
        "blobs-rbf-tau.svg",
    ]
    for p in paths:
        assert p.stat().st_size > 1000
        if p.suffix == ".png":
            img = mpimg.imread(p)
            assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
        else:
            assert p.read_text().lstrip().startswith("<?xml")


def test_plot_without_ok_rows(tmp_path):
    import pandas as pd

    from mbkkm.experiments._runner import COLUMNS

    row = dict.fromkeys(COLUMNS, float("nan"))
    row.update(run_id="a", dataset="x", algorithm="truncated", status="error")
    with pytest.raises(ValueError, match="no successful run"):
        plot_results(pd.DataFrame([row]), tmp_path)


@pytest.mark.parametrize("column", ["ari", "objective", "kernel_cpu_seconds"])
def test_a_table_without_a_read_column_is_refused_by_name(table, tmp_path, column):
    """A table missing a metric the figures or the summary read: a ValueError naming
    it (a KeyError traceback before)."""
    from mbkkm.experiments import read_results, summarize

    df = read_results(table).drop(columns=[column])
    for draw in (lambda: plot_results(df, tmp_path), lambda: summarize(df)):
        with pytest.raises(ValueError, match=rf"lacks the columns \['{column}'\]"):
            draw()


def test_summary_has_wall_and_cpu_seconds(table):
    from mbkkm.experiments import read_results, summarize

    s = summarize(read_results(table))
    assert {"fit_seconds_mean", "fit_cpu_seconds_mean", "total_cpu_seconds_mean"} <= set(s.columns)
    full = s[s["algorithm"] == "full-batch"].iloc[0]
    assert full["total_cpu_seconds_mean"] >= full["kernel_cpu_seconds_mean"] > 0


def test_seed_note_counts_runs_per_setting(table):
    from mbkkm.experiments import read_results
    from mbkkm.experiments._plots import _seed_note

    df = read_results(table)
    df = df[df["algorithm"] == "truncated"]
    by = ["algorithm", "batch_size", "tau"]
    assert _seed_note(df, by) == "2 seeds"
    # One seed missing at one setting (a grid cut short): the range is shown.
    assert _seed_note(df.iloc[1:], by) == "1-2 seeds"


def test_each_algorithm_keeps_its_colour_across_figures(table, tmp_path, monkeypatch):
    """A figure without full batch colours the other algorithms as one with it does."""
    import matplotlib.colors as mcolors

    from mbkkm.experiments import _plots, read_results
    from mbkkm.experiments._algorithms import ALGORITHMS

    colours = [_plots.algorithm_color(a) for a in ALGORITHMS]
    assert len(set(colours)) == len(ALGORITHMS)  # distinct
    assert all(mcolors.to_hex(c) != "#000000" for c in colours)  # black is the kernel's

    seen = []

    def capture(fig, out, stem, formats):
        if stem.endswith("-panels"):
            legend = {}
            for ax in fig.axes:
                for h, lab in zip(*ax.get_legend_handles_labels()):
                    legend[lab] = mcolors.to_hex(
                        h.patches[0].get_facecolor() if hasattr(h, "patches") else h.get_facecolor()
                    )
            seen.append(legend)
        return []

    monkeypatch.setattr(_plots, "_save", capture)
    df = read_results(table)
    plot_results(df, tmp_path, formats=("png",))
    plot_results(df[df["algorithm"] != "full-batch"], tmp_path, formats=("png",))
    with_full, without = seen
    assert ALGORITHMS["full-batch"].label in with_full
    assert ALGORITHMS["full-batch"].label not in without
    for name in ("truncated", "truncated-literal", "untruncated", "minibatch-adaptive"):
        label = ALGORITHMS[name].label
        assert with_full[label] == without[label] == mcolors.to_hex(_plots.algorithm_color(name))


def _variant_rows():
    """k-NN at 455 and at 2000 neighbours on one data set, plus a baseline row."""
    import pandas as pd

    rows = []
    for n_neighbors, aris in ((455, [0.1, 0.3]), (2000, [0.5, 0.7])):
        for seed, ari in enumerate(aris):
            rows.append(
                {
                    "run_id": f"{n_neighbors}-{seed}",
                    "dataset": "mnist",
                    "algorithm": "truncated",
                    "kernel": "knn",
                    "kernel_params": f'{{"n_neighbors": {n_neighbors}}}',
                    "objective_space": "kernel",
                    "batch_size": 64,
                    "tau": 20,
                    "seed": seed,
                    "status": "ok",
                    "ari": ari,
                    "nmi": ari,
                    "objective": 1.0,
                    "fit_seconds": 1.0,
                    "kernel_seconds": 2.0,
                    "fit_cpu_seconds": 1.0,
                    "kernel_cpu_seconds": 2.0,
                }
            )
    rows.append(
        {
            **rows[0],
            "run_id": "mb",
            "algorithm": "minibatch-adaptive",
            "kernel": "none",
            "kernel_params": "{}",
            "objective_space": "input",
            "tau": None,
        }
    )
    return pd.DataFrame(rows)


def test_kernel_variants_are_never_averaged_together(tmp_path):
    from mbkkm.experiments import label_kernel_variants, summarize

    df = _variant_rows()
    labelled = label_kernel_variants(df)
    assert labelled["kernel"].tolist() == ["knn (n_neighbors=455)"] * 2 + [
        "knn (n_neighbors=2000)"
    ] * 2 + ["none"]
    assert df["kernel"].tolist()[:4] == ["knn"] * 4  # the input is left alone
    s = summarize(df).set_index("kernel")
    assert s.loc["knn (n_neighbors=455)", "ari_mean"] == pytest.approx(0.2)
    assert s.loc["knn (n_neighbors=2000)", "ari_mean"] == pytest.approx(0.6)
    assert s.loc["knn (n_neighbors=455)", "n_seeds"] == 2
    # one parameterisation alone keeps the plain name
    one = df[df["kernel_params"] != '{"n_neighbors": 2000}']
    assert set(label_kernel_variants(one)["kernel"]) == {"knn", "none"}


def test_runs_of_another_max_iter_are_not_seeds_of_the_same_setting():
    """A quick --max-iter 3 run appended to the table of the real one: the two are
    told apart, not averaged as four seeds; n_components, set for the Nystroem
    algorithm alone, is not a difference."""
    import pandas as pd

    from mbkkm.experiments import label_kernel_variants, summarize

    df = _variant_rows()
    df = df[df["kernel_params"] == '{"n_neighbors": 455}'].assign(max_iter=20.0)
    quick = df.assign(max_iter=3.0, ari=[0.0, 0.0], run_id=["q0", "q1"])
    nystroem = df.iloc[:1].assign(algorithm="nystroem", n_components=100.0, run_id="n")
    both = pd.concat([df, quick, nystroem], ignore_index=True)
    labelled = label_kernel_variants(both)
    assert labelled["kernel"].tolist() == ["knn (max_iter=20)"] * 2 + ["knn (max_iter=3)"] * 2 + [
        "knn (max_iter=20)"
    ]
    s = summarize(both).set_index(["kernel", "algorithm"])
    assert s.loc[("knn (max_iter=20)", "truncated"), "n_seeds"] == 2
    assert s.loc[("knn (max_iter=3)", "truncated"), "ari_mean"] == 0.0
    # one max_iter throughout: the plain name, n_components notwithstanding
    assert set(label_kernel_variants(pd.concat([df, nystroem]))["kernel"]) == {"knn"}


@pytest.mark.slow
def test_kernel_variants_get_their_own_figures(tmp_path):
    names = sorted(p.name for p in plot_results(_variant_rows(), tmp_path, formats=("png",)))
    assert names == [
        "mnist-knn-n_neighbors-2000-panels.png",
        "mnist-knn-n_neighbors-2000-tau.png",
        "mnist-knn-n_neighbors-455-panels.png",
        "mnist-knn-n_neighbors-455-tau.png",
    ]


def test_a_tau_the_table_lacks_is_refused_with_the_taus_it_has(table, tmp_path):
    with pytest.raises(ValueError, match=r"tau=999: no truncated run .* taus are 10, 20"):
        plot_results(table, tmp_path / "fig", tau=999)


@pytest.mark.slow
def test_error_bars_are_the_summary_std(table, tmp_path, monkeypatch):
    """The figures' error bars and summarize() give the same std over seeds (the
    sample std, ddof=1; the bars used ddof=0, 1/sqrt(2) of it at 2 seeds)."""
    import matplotlib.axes
    import numpy as np

    from mbkkm.experiments import summarize

    bars = []
    bar = matplotlib.axes.Axes.bar

    def recorded(self, *args, **kwargs):
        bars.extend(np.atleast_1d(kwargs.get("yerr", [])).tolist())
        return bar(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "bar", recorded)
    plot_results(table, tmp_path / "fig", formats=("png",))
    s = summarize(table)
    stds = np.concatenate([s[c].dropna().to_numpy() for c in s.columns if c.endswith("_std")])
    drawn = [e for e in bars if e > 0]
    assert drawn and all(np.isclose(stds, e, rtol=1e-9, atol=0).any() for e in drawn), drawn


def test_baselines_of_other_settings_join_the_kernel_of_their_settings(tmp_path, monkeypatch):
    """A table mixing max_iter 20 and 200: the kernel's runs are labelled
    'rbf (max_iter=20)' / 'rbf (max_iter=200)', the baseline's 'none (max_iter=20)' /
    'none (max_iter=200)'. Before, the panels of 'rbf (max_iter=20)' held the
    truncated algorithm alone and 'none (max_iter=20)' got panels of its own; each
    baseline now joins the kernel panel of its own settings, and no other."""
    import pandas as pd

    from mbkkm.experiments import _plots

    rows = _variant_rows()
    rows = rows[rows["kernel_params"] != '{"n_neighbors": 2000}']
    both = pd.concat(
        [rows.assign(max_iter=20.0), rows.assign(max_iter=200.0, ari=0.9, nmi=0.9)],
        ignore_index=True,
    )
    drawn = {}

    def panels(plt, df, dataset, kernel, tau, out, formats):
        drawn[kernel] = sorted(zip(df["algorithm"], df["max_iter"]))
        return []

    monkeypatch.setattr(_plots, "_panels", panels)
    monkeypatch.setattr(_plots, "_tau_figure", lambda *args: [])
    plot_results(both, tmp_path)
    assert drawn == {
        f"knn (max_iter={m})": [("minibatch-adaptive", m), ("truncated", m), ("truncated", m)]
        for m in (20, 200)
    }
    # the baseline alone (no kernel run): one panel per setting, as before
    drawn.clear()
    plot_results(both[both["kernel"] == "none"], tmp_path)
    assert sorted(drawn) == ["none (max_iter=20)", "none (max_iter=200)"]
