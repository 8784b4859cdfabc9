"""Every command of the mbkkm CLI through click's CliRunner: exit codes and messages."""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from _agreement import assert_same_labels
from mbkkm.cli import load_model, main, read_data

SHARED_DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def blobs(tmp_path):
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, 0.3, size=(40, 2)) for c in (0.0, 5.0)])
    return X


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.delenv("MBKKM_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_help(runner):
    for args in ([], ["fit"], ["datasets"], ["experiment"], ["plot"], ["kernel-scale"]):
        r = runner.invoke(main, [*args, "--help"])
        assert r.exit_code == 0 and "Usage:" in r.output


def _fit_args(path, out):
    return [
        "fit",
        str(path),
        "-k",
        "2",
        "--batch-size",
        "32",
        "--tau",
        "10",
        "--max-iter",
        "10",
        "--labels-out",
        str(out),
    ]


@pytest.mark.slow
def test_fit_csv_with_header(runner, blobs, tmp_path):
    p = tmp_path / "d.csv"
    np.savetxt(p, blobs, delimiter=",", header="x,y", comments="")
    out = tmp_path / "labels.txt"
    model = tmp_path / "m.skops"
    r = runner.invoke(main, [*_fit_args(p, out), "--model-out", str(model)])
    assert r.exit_code == 0, r.output
    labels = np.loadtxt(out, dtype=int)
    assert labels.shape == (80,) and len(set(labels[:40])) == 1 != len(set(labels))
    assert "80 points x 2 features" in r.output and "cluster sizes: 40 40" in r.output
    assert "inertia" in r.output and "time" in r.output
    est = load_model(model)
    np.testing.assert_array_equal(est.feature_names_in_, ["x", "y"])  # the header's
    pd = pytest.importorskip("pandas")
    np.testing.assert_array_equal(est.predict(pd.DataFrame(blobs, columns=["x", "y"])), labels)


def test_a_pandas_index_column_is_refused_until_chosen(runner, blobs, tmp_path):
    """df.to_csv(path) writes the index as a first column without a name: clustered,
    its row numbers outweigh every feature. fit refuses it (exit 2) until --drop or
    --columns says what to use; predict's message names it by index."""
    header = "x,y\n"
    plain, indexed = tmp_path / "plain.csv", tmp_path / "indexed.csv"
    plain.write_text(header + "".join(f"{a!r},{b!r}\n" for a, b in blobs.tolist()))
    indexed.write_text(
        "," + header + "".join(f"{i},{a!r},{b!r}\n" for i, (a, b) in enumerate(blobs.tolist()))
    )
    r = runner.invoke(main, ["fit", str(indexed), "-k", "2"])
    assert r.exit_code == 2 and "column 0 (0-based) has no name" in r.output
    assert "--drop 0" in r.output
    model, lp, li = tmp_path / "m.skops", tmp_path / "lp.txt", tmp_path / "li.txt"
    r = runner.invoke(
        main, ["fit", str(plain), "-k", "2", "--labels-out", str(lp), "--model-out", str(model)]
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        main, ["fit", str(indexed), "-k", "2", "--drop", "0", "--labels-out", str(li)]
    )
    assert r.exit_code == 0, r.output
    assert li.read_text() == lp.read_text()
    r = runner.invoke(main, ["predict", str(model), str(indexed)])
    assert r.exit_code == 2 and "'' (leave it out with --drop 0)" in r.output


@pytest.mark.parametrize("kind", ["npy", "npz", "csv-noheader", "tsv"])
def test_fit_formats(runner, blobs, tmp_path, kind):
    if kind == "npy":
        p = tmp_path / "d.npy"
        np.save(p, blobs)
    elif kind == "npz":
        p = tmp_path / "d.npz"
        np.savez(p, X=blobs)
    elif kind == "tsv":
        p = tmp_path / "d.tsv"
        np.savetxt(p, blobs, delimiter="\t")
    else:
        p = tmp_path / "d.csv"
        np.savetxt(p, blobs, delimiter=",")
    np.testing.assert_allclose(read_data(p), blobs)
    r = runner.invoke(main, _fit_args(p, tmp_path / "l.txt"))
    assert r.exit_code == 0, r.output


def test_fit_labels_to_stdout(runner, blobs, tmp_path):
    p = tmp_path / "d.npy"
    np.save(p, blobs)
    r = runner.invoke(main, _fit_args(p, "-"))
    assert r.exit_code == 0
    assert len(r.stdout.split()) == 80


def test_fit_bad_data(runner, tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("a,name\n1,x\n2,y\n")
    r = runner.invoke(main, ["fit", str(p), "-k", "2"])
    assert r.exit_code == 1
    assert "column 'name' is not numeric" in r.output and "Traceback" not in r.output
    q = tmp_path / "d.npz"
    np.savez(q, data=np.ones((3, 2)))
    r = runner.invoke(main, ["fit", str(q), "-k", "2"])  # a usage error: --key names it
    assert r.exit_code == 2 and "--key: " in r.output and "has no array 'X'" in r.output
    g = tmp_path / "garbage.npy"
    g.write_bytes(b"not numpy")
    r = runner.invoke(main, ["fit", str(g), "-k", "2"])
    assert r.exit_code == 1 and "garbage.npy" in r.output
    e = tmp_path / "ragged.csv"
    e.write_text("1,2\n3\n")
    r = runner.invoke(main, ["fit", str(e), "-k", "1"])
    assert r.exit_code == 1 and "line 2" in r.output


def test_fit_usage_errors(runner, blobs, tmp_path):
    r = runner.invoke(main, ["fit", str(tmp_path / "none.csv"), "-k", "2"])
    assert r.exit_code == 2 and "does not exist" in r.output
    p = tmp_path / "d.npy"
    np.save(p, blobs)
    r = runner.invoke(main, ["fit", str(p), "-k", "500"])
    assert r.exit_code == 2 and "larger than the 80 rows" in r.output
    for k in ("81", "200"):  # a graph of more neighbours than points
        r = runner.invoke(main, ["fit", str(p), "-k", "2", "--kernel", "heat", "--n-neighbors", k])
        assert r.exit_code == 2 and f"--n-neighbors {k} is larger than the 80 rows" in r.output
    r = runner.invoke(main, ["fit", str(p), "-k", "2", "--kernel", "knn", "--n-neighbors", "80"])
    assert r.exit_code == 2 and "--n-neighbors 80 is all the 80 rows" in r.output  # complete
    r = runner.invoke(main, ["fit", str(p), "-k", "2", "--kernel", "nope"])
    assert r.exit_code == 2
    r = runner.invoke(main, ["fit", str(p)])
    assert r.exit_code == 2 and "--n-clusters" in r.output


def test_fit_on_a_torch_device(runner, tmp_path):
    """--device runs the fit where the estimator's device parameter would: the labels
    are those of MiniBatchKernelKMeans(device=...) on the same (memory-mapped) rows,
    and torch's warning about the read-only map stays out of the output."""
    pytest.importorskip("torch")
    from mbkkm import MiniBatchKernelKMeans

    rng = np.random.default_rng(1)
    X = np.concatenate([rng.normal(c, 0.5, size=(300, 3)) for c in (0.0, 4.0, 8.0)])
    p = tmp_path / "d.npy"
    np.save(p, X.astype(np.float32))
    out = tmp_path / "labels.npy"
    r = runner.invoke(
        main, ["fit", str(p), "-k", "3", "--device", "torch-cpu", "--labels-out", str(out)]
    )
    assert r.exit_code == 0, r.output
    assert "device torch-cpu" in r.output and "not writable" not in r.output
    expected = MiniBatchKernelKMeans(3, random_state=0, device="torch-cpu").fit(
        np.load(p, mmap_mode="r")
    )
    np.testing.assert_array_equal(np.load(out), expected.labels_)


def test_fit_width_and_seed_usage_errors(runner, blobs, tmp_path):
    p = tmp_path / "d.npy"
    np.save(p, blobs)
    g = str(tmp_path / "g.png")
    for extra, match in [
        (["--kernel", "linear", "--gamma-plot", g], "(--kernel linear has none)"),
        (["--gamma", "0.5", "--gamma-plot", g], "(--gamma 0.5 gives it)"),
        (["--seed", "-1"], "Invalid value for '--seed'"),
    ]:
        r = runner.invoke(main, ["fit", str(p), "-k", "2", *extra])
        assert r.exit_code == 2 and match in r.output, r.output
    assert not Path(g).exists()


def test_fit_device_usage_errors(runner, blobs, tmp_path):
    p = tmp_path / "d.npy"
    np.save(p, blobs)
    for extra, match in [
        (["--device", "mps"], "--device: device='mps' is not a known device"),
        (["--device", "torch-cpu", "--kernel", "heat"], "--kernel heat runs with numpy only"),
        (["--device", "torch-cpu", "--tau", "none"], "--tau none runs with numpy only"),
        (["--device", "torch-cpu", "--kernel", "chi2"], "kernel='chi2' is not available on"),
        (
            ["--device", "torch-cpu", "--model-out", str(tmp_path / "m.skops")],
            "--model-out: a model",
        ),
    ]:
        if "mps" not in extra:
            pytest.importorskip("torch")
        r = runner.invoke(main, ["fit", str(p), "-k", "2", *extra])
        assert r.exit_code == 2 and match in r.output, r.output
    assert not (tmp_path / "m.skops").exists()


def test_datasets(runner, tmp_path):
    r = runner.invoke(main, ["datasets", "--data-home", str(tmp_path)])
    assert r.exit_code == 0
    for name in ("pendigits", "har", "mnist", "letter"):
        assert name in r.output
    assert "not found" in r.output and str(tmp_path) in r.output
    assert f"  {tmp_path}\n" in r.stdout and "note:" not in r.stderr


def test_datasets_notes_a_data_home_that_does_not_exist(runner, tmp_path):
    missing = tmp_path / "nonexistent"
    r = runner.invoke(main, ["datasets", "--data-home", str(missing)])
    assert r.exit_code == 0, r.output  # as the other --data-home options: accepted
    assert f"note: --data-home {missing}: the folder does not exist." in r.stderr
    assert f"  {missing} (folder does not exist)" in r.stdout


@pytest.mark.slow
def test_experiment_quick_and_plot(runner, tmp_path):
    grid = tmp_path / "g.toml"
    grid.write_text(
        'name = "g"\ndatasets = ["blobs"]\n'
        'algorithms = ["truncated", "minibatch-classic", "full-batch"]\n'
        "batch_sizes = [32]\ntaus = [10, 20]\nseeds = 1\nmax_iter = 3\n"
        "synthetic_samples = 90\n"
    )
    out = tmp_path / "res"
    r = runner.invoke(main, ["experiment", str(grid), "--out", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "4 runs" in r.output and "4 ok" in r.output
    r = runner.invoke(
        main, ["experiment", str(grid), "--out", str(out), "--no-progress", "--jobs", "2"]
    )
    assert r.exit_code == 0 and "4 already in" in r.output
    # --dry-run marks the runs the table already holds
    r = runner.invoke(main, ["experiment", str(grid), "--out", str(out), "--dry-run"])
    assert r.exit_code == 0, r.output
    assert r.output.count("(done)") == 4 and "4 already in it, 0 to run" in r.output
    r = runner.invoke(
        main, ["experiment", str(grid), "--out", str(out), "--dry-run", "--seeds", "2"]
    )
    assert r.exit_code == 0, r.output
    assert r.output.count("(done)") == 4 and "8 runs" in r.output
    assert "4 already in it, 4 to run" in r.output
    assert all(
        line.endswith("(done)") == ("seed=0" in line)
        for line in r.output.splitlines()
        if "seed=" in line
    )
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "g.csv").write_text("a,b\n1,2\n")
    r = runner.invoke(
        main, ["experiment", str(grid), "--out", str(tmp_path / "other"), "--dry-run"]
    )
    assert r.exit_code == 1 and "no run_id column" in r.output
    r = runner.invoke(
        main,
        [
            "experiment",
            "quick",
            "--out",
            str(out),
            "--dry-run",
            "--datasets",
            "blobs",
            "--seeds",
            "1",
        ],
    )
    assert r.exit_code == 0 and "runs ->" in r.output
    r = runner.invoke(main, ["plot", str(out / "g.csv"), "--out", str(tmp_path / "fig")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "fig" / "blobs-rbf-panels.png").stat().st_size > 0


def test_experiment_errors(runner, tmp_path):
    r = runner.invoke(main, ["experiment", "nope", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "neither a preset" in r.output
    r = runner.invoke(
        main, ["experiment", "quick", "--out", str(tmp_path), "--datasets", "iris", "--dry-run"]
    )
    assert r.exit_code == 2 and "Unknown dataset 'iris'" in r.output
    r = runner.invoke(
        main, ["experiment", "quick", "--out", str(tmp_path), "--algorithms", "kmeans", "--dry-run"]
    )
    assert r.exit_code == 2 and "Unknown algorithm 'kmeans'" in r.output
    bad = tmp_path / "bad.toml"
    bad.write_text("datasets = [")
    r = runner.invoke(main, ["experiment", str(bad), "--out", str(tmp_path)])
    assert r.exit_code == 2 and "not valid TOML" in r.output
    r = runner.invoke(main, ["experiment", "quick", "--out", str(tmp_path), "--budget", "-1"])
    assert r.exit_code == 2
    r = runner.invoke(main, ["experiment", "quick", "--out", str(tmp_path), "--jobs", "0"])
    assert r.exit_code == 2 and "--jobs" in r.output


def test_experiment_with_a_missing_dataset_fails_and_runs_again(runner, tmp_path, monkeypatch):
    """Runs whose dataset is not found are failures (exit 1, named), and a re-run
    with the dataset in place runs them instead of calling them done."""
    monkeypatch.delenv("MBKKM_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    grid = tmp_path / "g.toml"
    grid.write_text(
        'name = "g"\ndatasets = ["har"]\nalgorithms = ["minibatch-classic"]\n'
        "batch_sizes = [32]\nseeds = 1\nmax_iter = 3\n"
    )
    args = ["experiment", str(grid), "--out", str(tmp_path / "res"), "--no-progress"]
    r = runner.invoke(main, [*args, "--data-home", str(tmp_path)])
    assert r.exit_code == 1, r.output
    assert "dataset not available" in r.output and "1 of the 1 runs failed" in r.output
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(6), 20)
    np.savez(tmp_path / "har.npz", X=rng.normal(size=(120, 561)) + labels[:, None], y=labels)
    r = runner.invoke(main, [*args, "--data-home", str(tmp_path)])
    assert r.exit_code == 0 and "1 ok" in r.output, r.output


def test_plot_errors(runner, tmp_path):
    r = runner.invoke(main, ["plot", str(tmp_path / "none.csv"), "--out", str(tmp_path)])
    assert r.exit_code == 2
    p = tmp_path / "x.csv"
    p.write_text("a,b\n1,2\n")
    r = runner.invoke(main, ["plot", str(p), "--out", str(tmp_path / "f")])
    assert r.exit_code == 1 and "not a result table" in r.output


def test_kernel_scale(runner, tmp_path):
    r = runner.invoke(main, ["kernel-scale", "iris"])
    assert r.exit_code == 2 and "Unknown dataset 'iris'" in r.output
    r = runner.invoke(main, ["kernel-scale", "pendigits", "--data-home", str(tmp_path)])
    assert r.exit_code == 1 and "not available locally" in r.output
    r = runner.invoke(main, ["kernel-scale", "pendigits", "--kernel", "cosine"])
    assert r.exit_code == 2


@pytest.mark.parametrize(
    ("opts", "match"),
    [
        (["--kernel", "knn", "--n-neighbors", "20", "--gamma", "5"], "--gamma: --kernel knn has"),
        (["--kernel", "knn", "--n-neighbors", "20", "--t", "3"], "--t: --kernel knn has no diff"),
        (["--kernel", "heat", "--gamma", "5"], "--gamma: --kernel heat has no gamma"),
        (["--kernel", "rbf", "--n-neighbors", "20"], "--n-neighbors: --kernel rbf has no"),
        (["--t", "3"], "--t: --kernel rbf has no diffusion time (it would be ignored)"),
    ],
)
def test_kernel_scale_refuses_options_its_kernel_ignores(runner, tmp_path, opts, match):
    """Before, ``kernel-scale --kernel knn --n-neighbors 20 --gamma 5 --t 3`` exited 0,
    silently ignoring --gamma and --t (and rbf ignored --n-neighbors and --t); they
    are refused as ``fit`` refuses them, before the dataset is read."""
    r = runner.invoke(main, ["kernel-scale", "pendigits", *opts, "--data-home", str(tmp_path)])
    assert r.exit_code == 2 and match in r.output, r.output
    assert "not available locally" not in r.output


def test_kernel_scale_heat_is_seeded(runner, monkeypatch):
    """The heat kernel's eigensolver started from a random vector: kernel-scale gave
    another gamma on every run (letter: 0.2692 to 0.3101; a regression review). It
    passes a fixed seed; oracle: the value twice, and the seed handed over."""
    import mbkkm.datasets
    import mbkkm.kernels

    X = np.random.default_rng(0).normal(size=(300, 4))
    monkeypatch.setattr(mbkkm.datasets, "load_dataset", lambda *a, **k: (X, None))
    seen = []
    kernel_gamma = mbkkm.kernels.kernel_gamma
    monkeypatch.setattr(
        mbkkm.kernels,
        "kernel_gamma",
        lambda *a, **k: seen.append(k.get("random_state")) or kernel_gamma(*a, **k),
    )
    args = ["kernel-scale", "pendigits", "--kernel", "heat", "--n-neighbors", "10"]
    first, second = runner.invoke(main, args), runner.invoke(main, args)
    assert first.exit_code == 0 and seen == [0, 0], first.output
    assert first.output.split("(")[:2] == second.output.split("(")[:2]  # time aside


def test_kernel_scale_shared_pendigits(runner):
    if not (SHARED_DATASETS / "pendigits.npz").exists():
        pytest.skip("shared pendigits.npz not found")
    r = runner.invoke(main, ["kernel-scale", "pendigits", "--data-home", str(SHARED_DATASETS)])
    assert r.exit_code == 0 and "gamma = 1" in r.output


def test_the_deprecated_gamma_command_is_gone(runner):
    r = runner.invoke(main, ["gamma", "pendigits"])
    assert r.exit_code == 2 and "No such command 'gamma'" in r.output


def test_fit_gamma_auto_prints_candidates_and_plots(runner, blobs, tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, blobs)
    png = tmp_path / "gamma.png"
    r = runner.invoke(
        main,
        [
            "fit",
            str(path),
            "-k",
            "2",
            "--gamma",
            "auto",
            "--max-iter",
            "5",
            "--gamma-plot",
            str(png),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "gamma=auto (knn-normalized-cut" in r.output and "<- chosen" in r.output
    assert png.stat().st_size > 0 and f"gamma plot written to {png}" in r.output
    for bad in ("-1", "scale", "nan"):
        r = runner.invoke(main, ["fit", str(path), "-k", "2", "--gamma", bad])
        assert r.exit_code == 2 and "--gamma" in r.output
    # the default chooses the width too, and says so in one line (the table: --verbose);
    # "mean-distance" is the fixed width (no table)
    r = runner.invoke(main, ["fit", str(path), "-k", "2", "--max-iter", "5"])
    assert r.exit_code == 0 and "<- chosen" not in r.output
    (line,) = [x for x in r.output.splitlines() if x.startswith("gamma=auto")]
    assert line.endswith("(--verbose: the table)")
    r = runner.invoke(main, ["fit", str(path), "-k", "2", "--max-iter", "5", "--verbose"])
    assert r.exit_code == 0 and "<- chosen" in r.output
    png.unlink()
    r = runner.invoke(
        main,
        [
            "fit",
            str(path),
            "-k",
            "2",
            "--gamma",
            "Mean-Distance",
            "--max-iter",
            "5",
            "--gamma-plot",
            str(png),
        ],
    )
    assert r.exit_code == 0 and "<- chosen" not in r.output
    assert "--gamma-plot: nothing written" in r.output and not png.exists()


# tau=None with the default width (gamma="auto") starts the untruncated table from
# the sample partition's support points as if each were a center: labels run past
# k and transform has one column per support point (a bug of the untruncated fit,
# MiniBatchKernelKMeans(tau=None)._fit_untruncated, left to the core's owner).
@pytest.mark.parametrize(("tau", "code"), [("none", 0), ("50", 0), ("0", 2), ("x", 2)])
def test_fit_tau_accepts_none(tmp_path, tau, code):
    path = tmp_path / "x.npy"
    np.save(path, np.random.RandomState(0).normal(size=(200, 3)))
    out = tmp_path / "l.txt"
    result = CliRunner().invoke(
        main,
        [
            "fit",
            str(path),
            "-k",
            "2",
            "--batch-size",
            "32",
            "--max-iter",
            "5",
            "--tau",
            tau,
            "-q",
            "--labels-out",
            str(out),
        ],
    )
    assert result.exit_code == code, result.output
    if code == 0:  # the default width (gamma="auto") too: labels are clusters 0 and 1
        assert set(np.loadtxt(out, dtype=int)) <= {0, 1}


def test_fit_untruncated_with_a_fixed_width(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.random.RandomState(0).normal(size=(200, 3)))
    out = tmp_path / "l.txt"
    r = CliRunner().invoke(
        main,
        [
            "fit",
            str(path),
            "-k",
            "2",
            "--batch-size",
            "32",
            "--max-iter",
            "5",
            "--tau",
            "none",
            "--gamma",
            "1.0",
            "--labels-out",
            str(out),
            "-q",
        ],
    )
    assert r.exit_code == 0, r.output
    assert set(np.loadtxt(out, dtype=int)) <= {0, 1}


# ------------------------------------------------------------ columns, outputs, plots
def _fast_args(path, out):
    """As _fit_args, with a fixed width (choosing it is not what these tests test)."""
    return [*_fit_args(path, out), "--gamma", "0.5"]


def _table(tmp_path, blobs):
    """blobs with an id column first and a text column last."""
    p = tmp_path / "t.csv"
    lines = ["id,x,y,name"] + [f"{i},{a!r},{b!r},p{i}" for i, (a, b) in enumerate(blobs.tolist())]
    p.write_text("\n".join(lines) + "\n")
    return p


def test_fit_columns_and_drop(runner, blobs, tmp_path):
    p = _table(tmp_path, blobs)
    ref = tmp_path / "ref.npy"
    np.save(ref, blobs.astype(np.float32))
    want = runner.invoke(main, [*_fast_args(ref, tmp_path / "ref.txt"), "-q"])
    assert want.exit_code == 0, want.output
    for opts in (
        ["--columns", "x,y"],
        ["--columns", "1", "--columns", "2"],
        ["--drop", "id,name"],
        ["--drop", "0", "--drop", "-1"],
    ):
        out = tmp_path / "l.txt"
        r = runner.invoke(main, [*_fast_args(p, out), "-q", *opts])
        assert r.exit_code == 0, (opts, r.output)
        np.testing.assert_array_equal(np.loadtxt(out), np.loadtxt(tmp_path / "ref.txt"))
    r = runner.invoke(main, [*_fast_args(p, tmp_path / "l.txt"), "--drop", "id"])
    assert r.exit_code == 1 and "column 'name' is not numeric (line 2 holds 'p0')" in r.output
    for opts, match in (
        (
            ["--columns", "x,z"],
            "--columns: no column named 'z'; the columns are 'id', 'x', 'y', 'name'",
        ),
        (["--drop", "7"], "--drop: column index 7 is out of range"),
        (["--drop", "id,x,y,name"], "--drop: no column is left"),
    ):
        r = runner.invoke(main, [*_fast_args(p, tmp_path / "l.txt"), *opts])
        assert r.exit_code == 2 and match in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("d", [1, 2, 5])
def test_fit_plot_written(runner, tmp_path, d):
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, 0.3, size=(60, d)) for c in (0.0, 4.0, 8.0)])
    p = tmp_path / "d.npy"
    np.save(p, X)
    png = tmp_path / "clusters.png"
    r = runner.invoke(
        main, ["fit", str(p), "-k", "3", "--max-iter", "5", "--gamma", "0.5", "--plot", str(png)]
    )
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 5000
    assert f"plot written to {png}" in r.output


def test_cluster_figure_axes_and_sampling():
    from mbkkm.cli import cluster_figure

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 2))
    labels = (X[:, 0] > 0).astype(int)
    fig = cluster_figure(X, labels, 2, names=["width", "height"], n_total=10_000)
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("width", "height")
    assert "10,000 points, 300 drawn at random" in ax.get_title()
    assert sum(len(c.get_offsets()) for c in ax.collections) == 300
    fig = cluster_figure(rng.normal(size=(300, 6)), labels, 2)
    assert fig.axes[0].get_xlabel().startswith("PC 1") and "PCA" in fig.axes[0].get_title()
    fig = cluster_figure(rng.normal(size=(300, 3)), np.arange(300) % 30, 30)
    assert len(fig.axes) == 2  # many clusters: a colour bar instead of a legend


def test_legends_beside_the_axes(blobs):
    """The legend never covers the curve or the points: it is right of the axes."""
    from mbkkm import MiniBatchKernelKMeans
    from mbkkm.cli import cluster_figure, gamma_figure

    est = MiniBatchKernelKMeans(n_clusters=2, gamma="auto", max_iter=5, random_state=0)
    est.fit(blobs)
    for fig in (gamma_figure(est.gamma_selection_), cluster_figure(blobs, est.labels_, 2)):
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.draw(renderer)
        ax = fig.axes[0]
        legend = ax.get_legend().get_window_extent(renderer)
        assert legend.x0 >= ax.get_window_extent(renderer).x1


def test_fit_output_errors_before_the_fit(runner, blobs, tmp_path):
    p = tmp_path / "d.npy"
    np.save(p, blobs)
    for opts, match in (
        (["--plot", str(tmp_path / "c.xyz")], "--plot: cannot draw 'xyz'"),
        (["--gamma-plot", str(tmp_path / "g")], "--gamma-plot: cannot draw"),
        (["--labels-out", str(tmp_path / "no" / "l.txt")], "--labels-out: the folder"),
    ):
        r = runner.invoke(main, ["fit", str(p), "-k", "2", "--gamma", "0.5", *opts])
        assert r.exit_code == 2 and match in r.output, r.output
        assert "inertia" not in r.output  # refused before any work


def test_fit_note_when_batch_larger_than_rows(runner, blobs, tmp_path):
    p = tmp_path / "d.npy"
    np.save(p, blobs)
    r = runner.invoke(main, ["fit", str(p), "-k", "2", "--max-iter", "3", "--gamma", "0.5"])
    assert r.exit_code == 0
    assert "note: --batch-size 1024 is larger than the 80 rows" in r.output
    assert "batch size 80, tau" in r.output  # the summary says what ran
    r = runner.invoke(
        main, ["fit", str(p), "-k", "2", "--max-iter", "3", "--gamma", "0.5", "--batch-size", "16"]
    )
    assert "note:" not in r.output


@pytest.mark.parametrize("suffix", [".npy", ".parquet", ".txt"])
def test_fit_and_predict_outputs(runner, blobs, tmp_path, suffix):
    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    import pandas as pd

    data = tmp_path / "d.csv"
    np.savetxt(data, blobs, delimiter=",", fmt="%.9g")
    model, labels, dist = tmp_path / "m.skops", tmp_path / f"l{suffix}", tmp_path / f"t{suffix}"
    r = runner.invoke(
        main, [*_fast_args(data, labels), "--model-out", str(model), "--transform-out", str(dist)]
    )
    assert r.exit_code == 0, r.output

    def load(path, column=None):
        if suffix == ".npy":
            return np.load(path)
        if suffix == ".parquet":
            df = pd.read_parquet(path)
            return df[column].to_numpy() if column else df.to_numpy()
        return np.loadtxt(path, delimiter=",")

    est = load_model(model)
    X = blobs.astype(np.float32)
    np.testing.assert_array_equal(load(labels, "label"), est.predict(X))
    np.testing.assert_allclose(load(dist), est.transform(X), rtol=1e-5, atol=1e-5)
    # predict: the same labels, streamed from the text file
    labels2, dist2 = tmp_path / f"l2{suffix}", tmp_path / f"t2{suffix}"
    r = runner.invoke(
        main,
        [
            "predict",
            str(model),
            str(data),
            "--labels-out",
            str(labels2),
            "--transform-out",
            str(dist2),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "labelled 80 points x 2 features" in r.output and "cluster sizes: 40 40" in r.output
    # in blocks of rows, not the whole file: float32 distances rounded in another order
    assert_same_labels(load(labels2, "label"), load(labels, "label"), load(dist), 1e-4)
    np.testing.assert_allclose(load(dist2), load(dist), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("block_bytes", [37, 100])
def test_predict_streams_blocks_in_threads(runner, tmp_path, monkeypatch, block_bytes):
    # oracle: fit's own labels and distances of the same rows (read whole), and the
    # model's predict on the array; the text is cut into pieces of a few lines, some
    # lines longer than a piece, parsed by 3 threads
    from mbkkm._files import _read
    from mbkkm.backends import _threads

    rng = np.random.default_rng(1)
    X = np.concatenate([rng.normal(c, 0.5, size=(150, 3)) for c in (0.0, 4.0, 8.0)])
    data = tmp_path / "d.csv"
    np.savetxt(data, X, delimiter=",", fmt="%.9g", header="a,b,c", comments="")
    model, labels, dist = tmp_path / "m.skops", tmp_path / "l.txt", tmp_path / "t.npy"
    r = runner.invoke(
        main,
        [
            *_fast_args(data, labels),
            "-k",
            "3",
            "--model-out",
            str(model),
            "--transform-out",
            str(dist),
        ],
    )
    assert r.exit_code == 0, r.output
    monkeypatch.setattr(_read, "BLOCK_BYTES", block_bytes)
    monkeypatch.setattr(_threads, "effective_n_threads", lambda: 3)
    parsed_by = set()
    parse = _read._parse_text_block

    def spy(piece, table):
        parsed_by.add(threading.current_thread().name.split("_")[0])
        return parse(piece, table)

    monkeypatch.setattr(_read, "_parse_text_block", spy)
    labels2, dist2 = tmp_path / "l2.npy", tmp_path / "t2.npy"
    r = runner.invoke(
        main,
        [
            "predict",
            str(model),
            str(data),
            "--labels-out",
            str(labels2),
            "--transform-out",
            str(dist2),
            "-q",
        ],
    )
    assert r.exit_code == 0, r.output
    assert parsed_by == {"mbkkm-read"}
    fitted = np.loadtxt(labels, dtype=np.int32)
    np.testing.assert_array_equal(np.load(labels2), fitted)
    # the distances of rows in other blocks: equal up to the summation order
    np.testing.assert_allclose(np.load(dist2), np.load(dist), rtol=1e-5, atol=1e-5)
    pd = pytest.importorskip("pandas")
    np.testing.assert_array_equal(
        fitted, load_model(model).predict(pd.DataFrame(X.astype(np.float32), columns=list("abc")))
    )
    assert len(np.unique(fitted)) == 3
    # standard output, one label a line
    r = runner.invoke(main, ["predict", str(model), str(data), "-q"])
    assert r.exit_code == 0, r.output
    np.testing.assert_array_equal(np.array(r.stdout.split(), dtype=int), fitted)


def test_predict_stops_its_readers_on_an_error(runner, tmp_path, monkeypatch):
    from mbkkm._files import _read
    from mbkkm.backends import _threads

    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 2))
    data = tmp_path / "d.csv"
    np.savetxt(data, X, delimiter=",", fmt="%.6f")
    model = tmp_path / "m.skops"
    r = runner.invoke(main, [*_fast_args(data, tmp_path / "l.txt"), "--model-out", str(model)])
    assert r.exit_code == 0, r.output
    lines = data.read_text().splitlines()
    lines[250] = "1.0,oops"
    data.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(_read, "BLOCK_BYTES", 64)
    monkeypatch.setattr(_threads, "effective_n_threads", lambda: 2)
    out = tmp_path / "l2.txt"
    r = runner.invoke(main, ["predict", str(model), str(data), "--labels-out", str(out)])
    assert r.exit_code == 1
    assert "column 1 (0-based) is not numeric (line 251 holds 'oops')" in r.output
    assert not out.exists()  # nothing half-written
    assert not [t for t in threading.enumerate() if t.name.startswith("mbkkm-read")]


def test_predict_errors(runner, blobs, tmp_path):
    data = tmp_path / "d.npy"
    np.save(data, blobs)
    model = tmp_path / "m.skops"
    r = runner.invoke(main, [*_fast_args(data, tmp_path / "l.txt"), "--model-out", str(model)])
    assert r.exit_code == 0
    wide = tmp_path / "w.npy"
    np.save(wide, np.ones((5, 3)))
    r = runner.invoke(main, ["predict", str(model), str(wide)])
    assert r.exit_code == 2 and "has 3 columns to use, the model expects 2" in r.output
    bad = tmp_path / "bad.skops"
    bad.write_bytes(b"not a zip")
    r = runner.invoke(main, ["predict", str(bad), str(data)])
    assert r.exit_code == 1 and "cannot load the model" in r.output
    assert "Traceback" not in r.output
    r = runner.invoke(main, ["predict", str(model), str(data), "--columns", "5"])
    assert r.exit_code == 2 and "--columns: column index 5 is out of range" in r.output


def test_fit_dtype(runner, blobs, tmp_path):
    p = tmp_path / "d.csv"
    np.savetxt(p, blobs, delimiter=",")
    for dtype in ("float32", "float64"):
        model = tmp_path / f"{dtype}.skops"
        r = runner.invoke(
            main, [*_fast_args(p, tmp_path / "l.txt"), "--dtype", dtype, "--model-out", str(model)]
        )
        assert r.exit_code == 0, r.output
        assert load_model(model).support_vectors_.dtype == dtype
    r = runner.invoke(main, [*_fast_args(p, tmp_path / "l.txt"), "--dtype", "int8"])
    assert r.exit_code == 2


# ---------------------------------------------- every data and output option's bad input
@pytest.mark.parametrize(
    ("opts", "match"),
    [
        (["--dtype", "int8"], "'--dtype': 'int8' is not one of"),
        (["--columns", ""], "--columns: no column named (an empty list)"),
        (["--drop", " , "], "--drop: no column named (an empty list)"),
        (["--columns", "0,0"], "--columns: column 0 (0-based) is selected more than once"),
        (["--columns", "x"], "--columns: no column named 'x'; the file has no header"),
        (
            ["--columns", "-3"],
            "--columns: column index -3 is out of range: the table has 2 columns",
        ),
        (["--drop", "0,1"], "--drop: no column is left to read"),
        (["--transform-out", "{tmp}/no/t.npy"], "--transform-out: the folder"),
        (["--model-out", "{tmp}/no/m.skops"], "--model-out: the folder"),
        (["--model-out", "-"], "--model-out: cannot write to standard output"),
        (["--plot", "-"], "--plot: cannot write to standard output"),
        (["--plot", "{tmp}/c"], "--plot: cannot draw 'a file without suffix'"),
        (
            ["--labels-out", "-", "--transform-out", "-"],
            "--transform-out: standard output already takes the labels",
        ),
    ],
)
def test_fit_bad_option_is_named_before_any_work(runner, blobs, tmp_path, opts, match):
    p = tmp_path / "d.csv"
    np.savetxt(p, blobs, delimiter=",")  # no header: columns by index only
    opts = [o.format(tmp=tmp_path) for o in opts]
    r = runner.invoke(main, ["fit", str(p), "-k", "2", "--gamma", "0.5", *opts])
    assert r.exit_code == 2, r.output
    assert match in r.output, r.output
    assert "Traceback" not in r.output and "inertia" not in r.output


@pytest.mark.parametrize(
    ("opts", "match"),
    [
        (["--dtype", "float16"], "'--dtype': 'float16' is not one of"),
        (["--drop", "a,b"], "--drop: no column is left to read"),
        (["--columns", "c"], "--columns: no column named 'c'; the columns are 'a', 'b'"),
        (["--labels-out", "{tmp}/no/l.txt"], "--labels-out: the folder"),
        (["--transform-out", "{tmp}/no/t.txt"], "--transform-out: the folder"),
        (["--transform-out", "-"], "--transform-out: standard output already takes the labels"),
    ],
)
def test_predict_bad_option_is_named(runner, blobs, tmp_path, opts, match):
    data = tmp_path / "d.csv"
    np.savetxt(data, blobs, delimiter=",", header="a,b", comments="")
    model = tmp_path / "m.skops"
    r = runner.invoke(main, [*_fast_args(data, tmp_path / "l.txt"), "--model-out", str(model)])
    assert r.exit_code == 0, r.output
    opts = [o.format(tmp=tmp_path) for o in opts]
    r = runner.invoke(main, ["predict", str(model), str(data), *opts])
    assert r.exit_code == 2, r.output
    assert match in r.output and "Traceback" not in r.output, r.output


def test_predict_refuses_a_file_that_is_not_a_model(runner, blobs, tmp_path):
    import skops.io as sio

    data = tmp_path / "d.npy"
    np.save(data, blobs)
    model = tmp_path / "list.skops"
    sio.dump([1, 2, 3], model)
    r = runner.invoke(main, ["predict", str(model), str(data)])
    assert r.exit_code == 1 and "is a skops file holding a list, not one of mbkkm's" in r.output


def test_distances_to_stdout(runner, blobs, tmp_path):
    data = tmp_path / "d.npy"
    np.save(data, blobs)
    labels, model = tmp_path / "l.txt", tmp_path / "m.skops"
    r = runner.invoke(
        main, [*_fast_args(data, labels), "--transform-out", "-", "--model-out", str(model)]
    )
    assert r.exit_code == 0, r.output
    D = np.loadtxt(r.stdout.splitlines(), delimiter=",")  # the summary went to stderr
    est = load_model(model)
    np.testing.assert_allclose(D, est.transform(blobs), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(D.argmin(axis=1), np.loadtxt(labels, dtype=int))
    assert "inertia" in r.stderr
    r = runner.invoke(
        main,
        [
            "predict",
            str(model),
            str(data),
            "--labels-out",
            str(tmp_path / "l2.txt"),
            "--transform-out",
            "-",
            "-q",
        ],
    )
    assert r.exit_code == 0, r.output
    np.testing.assert_array_equal(np.loadtxt(r.stdout.splitlines(), delimiter=","), D)


def test_fit_dtype_of_npy(runner, blobs, tmp_path):
    """A float64 .npy stays float64 unless --dtype float32; a float32 one stays float32."""
    for file_dtype, opts, want in (
        ("float64", [], "float64"),
        ("float64", ["--dtype", "float32"], "float32"),
        ("float32", [], "float32"),
        ("float32", ["--dtype", "float64"], "float64"),
    ):
        p = tmp_path / f"{file_dtype}.npy"
        np.save(p, blobs.astype(file_dtype))
        model = tmp_path / "m.skops"
        r = runner.invoke(
            main, [*_fast_args(p, tmp_path / "l.txt"), *opts, "--model-out", str(model)]
        )
        assert r.exit_code == 0, r.output
        assert load_model(model).support_vectors_.dtype == want, (file_dtype, opts)


@pytest.mark.parametrize("suffix", [".parquet", ".feather"])
def test_fit_arrow_input_with_columns(runner, blobs, tmp_path, suffix):
    pytest.importorskip("pyarrow")
    import pandas as pd

    df = pd.DataFrame({"id": np.arange(80), "x": blobs[:, 0], "y": blobs[:, 1]})
    p = tmp_path / f"d{suffix}"
    (df.to_parquet if suffix == ".parquet" else df.to_feather)(p)
    ref = tmp_path / "ref.npy"
    np.save(ref, blobs.astype(np.float32))
    r = runner.invoke(main, [*_fast_args(ref, tmp_path / "ref.txt"), "-q"])
    assert r.exit_code == 0, r.output
    for opts in (["--drop", "id"], ["--columns", "x,y"], ["--columns", "1,2"]):
        r = runner.invoke(main, [*_fast_args(p, tmp_path / "l.txt"), "-q", *opts])
        assert r.exit_code == 0, (opts, r.output)
        np.testing.assert_array_equal(
            np.loadtxt(tmp_path / "l.txt"), np.loadtxt(tmp_path / "ref.txt")
        )
    r = runner.invoke(main, [*_fast_args(p, tmp_path / "l.txt"), "--columns", "z"])
    assert (
        r.exit_code == 2
        and "--columns: no column named 'z'; the columns are 'id', 'x', 'y'" in r.output
    )


@pytest.mark.parametrize("suffix", [".parquet", ".feather"])
def test_fit_arrow_leaves_pandas_index_out(runner, blobs, tmp_path, suffix):
    """A filtered or shuffled data frame saved by pandas stores its index as a column
    (``__index_level_0__``, or the index's name), which pandas reads back as the
    index: it is not a feature, and is left out unless --columns names it."""
    pytest.importorskip("pyarrow")
    import pandas as pd

    order = np.random.default_rng(1).permutation(80)  # a shuffled frame: index 0..79 mixed
    frames = {
        "level": pd.DataFrame({"x": blobs[order, 0], "y": blobs[order, 1]}, index=order * 1000),
        "named": pd.DataFrame(
            {"id": order * 1000, "x": blobs[order, 0], "y": blobs[order, 1]}
        ).set_index("id"),
    }
    ref = tmp_path / "ref.npy"
    np.save(ref, blobs[order].astype(np.float32))
    r = runner.invoke(main, [*_fast_args(ref, tmp_path / "ref.txt"), "-q"])
    assert r.exit_code == 0, r.output
    for name, df in frames.items():
        p = tmp_path / f"{name}{suffix}"
        (df.to_parquet if suffix == ".parquet" else df.to_feather)(p)
        model = tmp_path / f"{name}.skops"
        r = runner.invoke(main, [*_fast_args(p, tmp_path / "l.txt"), "--model-out", str(model)])
        assert r.exit_code == 0, (name, r.output)
        assert "80 points x 2 features" in r.output, r.output
        want = np.loadtxt(tmp_path / "ref.txt")
        np.testing.assert_array_equal(np.loadtxt(tmp_path / "l.txt"), want)
        # new rows without the index, and the same file: the model's two features
        clean = tmp_path / f"clean{suffix}"
        df.reset_index(drop=True).to_parquet(clean) if suffix == ".parquet" else (
            df.reset_index(drop=True).to_feather(clean)
        )
        for new in (clean, p):
            r = runner.invoke(
                main, ["predict", str(model), str(new), "--labels-out", str(tmp_path / "p.txt")]
            )
            assert r.exit_code == 0, (name, new, r.output)
            np.testing.assert_array_equal(np.loadtxt(tmp_path / "p.txt"), want)
    # named explicitly, the index column is read
    p = tmp_path / f"level{suffix}"
    args = [*_fast_args(p, tmp_path / "l.txt"), "--columns", "__index_level_0__,x"]
    r = runner.invoke(main, args)
    assert r.exit_code == 0 and "80 points x 2 features" in r.output, r.output


@pytest.mark.parametrize("suffix", [".npy", ".parquet"])
def test_predict_counts_rows_once_labelled(runner, tmp_path, monkeypatch, suffix):
    """mbkkm predict's progress counts the rows it has labelled, not those read (the
    reader runs a block ahead: the time left came out about 40 % short on a .npy)."""
    from mbkkm import _files, cli

    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 2)).astype(np.float32)
    data = tmp_path / f"X{suffix}"
    if suffix == ".npy":
        np.save(data, X)
    else:
        import pandas as pd

        pd.DataFrame(X, columns=["a", "b"]).to_parquet(data, row_group_size=500)
    model = tmp_path / "m.skops"
    r = runner.invoke(main, [*_fast_args(data, tmp_path / "l.txt"), "--model-out", str(model)])
    assert r.exit_code == 0, r.output
    monkeypatch.setattr(_files._read, "BLOCK_ROWS", 500)  # 6 blocks
    events = []
    distances = cli._distances

    def logged_distances(est, blocks):
        for D in distances(est, blocks):
            events.append(("labelled", D.shape[0]))
            yield D

    @contextlib.contextmanager
    def logged_progress(total, unit, desc, enabled):
        yield lambda n: events.append(("counted", n))

    monkeypatch.setattr(cli, "_distances", logged_distances)
    monkeypatch.setattr(cli, "_progress", logged_progress)
    r = runner.invoke(main, ["predict", str(model), str(data), "--labels-out", str(tmp_path / "p")])
    assert r.exit_code == 0, r.output
    labelled = counted = 0
    for what, n in events:
        if what == "labelled":
            labelled += n
        else:
            counted += n
            assert counted <= labelled, events
    assert counted == labelled == 3000, events


class _HidePyarrow(importlib.abc.MetaPathFinder):
    """``import pyarrow`` fails as where it is not installed."""

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "pyarrow":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


@pytest.fixture
def no_pyarrow(monkeypatch):
    for name in [m for m in sys.modules if m.split(".")[0] == "pyarrow"]:
        monkeypatch.delitem(sys.modules, name)  # put back at the end
    monkeypatch.setattr(sys, "meta_path", [_HidePyarrow(), *sys.meta_path])


def test_parquet_without_pyarrow(runner, blobs, tmp_path, no_pyarrow):
    """Parquet and Feather are optional (the parquet extra): without pyarrow an
    output is refused before the fit, an input with the way to install it."""
    p = tmp_path / "d.npy"
    np.save(p, blobs)
    for opt, suffix in (("--labels-out", ".parquet"), ("--transform-out", ".feather")):
        r = runner.invoke(
            main, ["fit", str(p), "-k", "2", "--gamma", "0.5", opt, str(tmp_path / f"o{suffix}")]
        )
        assert r.exit_code == 2 and f"{opt}: writing {suffix} needs pyarrow" in r.output
        assert "inertia" not in r.output
    for suffix in (".parquet", ".feather"):
        q = tmp_path / f"d{suffix}"
        q.write_bytes(b"PAR1")
        r = runner.invoke(main, ["fit", str(q), "-k", "2"])
        assert r.exit_code == 1, r.output
        assert f"reading {suffix} files needs pyarrow: pip install 'mbkkm[parquet]'" in r.output


def test_fit_heat_kernel(runner, tmp_path):
    from sklearn.datasets import make_moons

    X, y = make_moons(400, noise=0.05, random_state=0)
    path = tmp_path / "moons.npy"
    np.save(path, X)
    out, model = tmp_path / "labels.txt", tmp_path / "model.skops"
    r = runner.invoke(
        main,
        [
            "fit",
            str(path),
            "-k",
            "2",
            "--kernel",
            "heat",
            "--max-iter",
            "20",
            "--labels-out",
            str(out),
            "--model-out",
            str(model),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "t=auto chose t = " in r.output and "<- chosen" not in r.output
    labels = np.loadtxt(out, dtype=int)
    from sklearn.metrics import adjusted_rand_score

    assert adjusted_rand_score(y, labels) > 0.95
    est = load_model(model)  # the graph travels with the model: predict works
    np.testing.assert_array_equal(est.predict(X), labels)
    r = runner.invoke(
        main,
        [
            "fit",
            str(path),
            "-k",
            "2",
            "--kernel",
            "heat",
            "--t",
            "30",
            "--n-neighbors",
            "8",
            "--max-iter",
            "5",
            "-q",
        ],
    )
    assert r.exit_code == 0, r.output
    for args, message in (
        (["--kernel", "knn"], "--n-neighbors"),
        (["--t", "5"], "graph kernels"),
        (["--t", "auto"], "graph kernels"),  # given, for a kernel without one
        (["--kernel", "heat", "--t", "-1"], "--t"),
    ):
        r = runner.invoke(main, ["fit", str(path), "-k", "2", *args])
        assert r.exit_code == 2 and message in r.output, r.output


def test_fit_checkpoint_errors_resume_note_and_refusal(runner, blobs, tmp_path):
    p = tmp_path / "d.npy"
    np.save(p, blobs)
    ck = tmp_path / "fit.ckpt"
    base = [
        "fit",
        str(p),
        "-k",
        "2",
        "--gamma",
        "0.5",
        "--batch-size",
        "16",
        "--tau",
        "10",
        "--max-iter",
        "12",
    ]
    for extra, message in (
        (["--checkpoint-every", "3"], "--checkpoint-every needs --checkpoint"),
        (["--checkpoint", str(tmp_path / "no" / "ck")], "does not exist"),
        (["--checkpoint", str(ck), "--tau", "none"], "integer --tau"),
        (["--checkpoint", str(ck), "--kernel", "knn", "--n-neighbors", "5"], "graph kernel"),
        (["--checkpoint", str(ck), "--checkpoint-every", "0"], "--checkpoint-every"),
    ):
        r = runner.invoke(main, base + extra)
        assert r.exit_code == 2 and message in r.output, (extra, r.output)
    # a saved fit of this command (12 iterations, finished) is resumed with a note ...
    from mbkkm import MiniBatchKernelKMeans

    X = np.load(p)
    MiniBatchKernelKMeans(
        n_clusters=2, gamma=0.5, batch_size=16, tau=10, max_iter=12, random_state=0
    ).fit(X, checkpoint=ck)
    out = tmp_path / "labels.txt"
    r = runner.invoke(main, [*base, "--checkpoint", str(ck), "--labels-out", str(out)])
    assert r.exit_code == 0, r.output
    assert f"resuming the fit saved in {ck} at iteration 12 of 12" in r.output
    assert out.exists() and not ck.exists()  # removed once the outputs are written
    # ... one of another command is refused, and left as it was
    MiniBatchKernelKMeans(
        n_clusters=2, gamma=0.5, batch_size=16, tau=10, max_iter=12, random_state=1
    ).fit(X, checkpoint=ck)
    saved = ck.read_bytes()
    r = runner.invoke(main, [*base, "--checkpoint", str(ck), "--labels-out", str(out)])
    assert r.exit_code == 1
    assert "written by another fit (params.random_state 1 there, 0 here)" in r.output
    assert ck.read_bytes() == saved


def test_an_output_that_is_an_input_or_another_output_is_refused(runner, blobs, tmp_path):
    data = tmp_path / "d.csv"
    np.savetxt(data, blobs, delimiter=",")
    before = data.read_bytes()
    model = tmp_path / "m.skops"
    r = runner.invoke(main, [*_fast_args(data, tmp_path / "l.txt"), "--model-out", str(model)])
    assert r.exit_code == 0, r.output
    model_bytes = model.read_bytes()
    same = tmp_path / "same.out"
    other_spelling = tmp_path / "sub" / ".." / "d.csv"
    (tmp_path / "sub").mkdir()
    for args, match in (
        (["fit", str(data), "-k", "2", "--labels-out", str(data)], "--labels-out and DATA"),
        (["fit", str(data), "-k", "2", "--model-out", str(other_spelling)], "--model-out and DATA"),
        (
            ["predict", str(model), str(data), "--labels-out", str(model)],
            "--labels-out and MODEL",
        ),
        (
            ["predict", str(model), str(data), "--labels-out", "-", "--transform-out", str(data)],
            "--transform-out and DATA",
        ),
        (
            ["fit", str(data), "-k", "2", "--labels-out", str(same), "--model-out", str(same)],
            "--model-out and --labels-out",
        ),
        (
            ["fit", str(data), "-k", "2", "--transform-out", str(same), "--plot", str(same)],
            "--plot and --transform-out",
        ),
    ):
        r = runner.invoke(main, args)
        assert r.exit_code == 2 and match in r.output and "same file" in r.output, r.output
        assert "inertia" not in r.output  # refused before any work
    assert data.read_bytes() == before and model.read_bytes() == model_bytes
    assert not same.exists()


def test_a_one_dimensional_array_is_one_column_with_a_note(runner, blobs, tmp_path):
    """An .npz's label vector (--key y) is 1-d: read as one feature, and said so."""
    p = tmp_path / "d.npz"
    np.savez(p, X=blobs, y=np.repeat([0.0, 1.0], 40))
    out = tmp_path / "l.txt"
    r = runner.invoke(main, [*_fast_args(p, out), "--key", "y"])
    assert r.exit_code == 0, r.output
    assert "note: the array of" in r.output and "is 1-d (80 values): read as one column" in r.output
    assert "80 points x 1 features" in r.output
    r = runner.invoke(main, _fast_args(p, out))  # the 2-d X: no note
    assert r.exit_code == 0 and "1-d" not in r.output


def test_pandas_index_header_read_as_a_header_with_a_note(runner, blobs, tmp_path):
    pd = pytest.importorskip("pandas")
    p = tmp_path / "b.csv"
    pd.DataFrame(blobs).to_csv(p, index=False)  # the header 0,1
    out, model = tmp_path / "l.txt", tmp_path / "m.skops"
    r = runner.invoke(main, [*_fast_args(p, out), "--model-out", str(model)])
    assert r.exit_code == 0, r.output
    note = "(0, 1: the names pandas gives unnamed columns) is read as a header; --no-header"
    assert note in r.output
    labels = np.loadtxt(out, dtype=int)
    assert labels.shape == (80,) and len(set(labels[:40])) == 1 != len(set(labels))
    np.testing.assert_array_equal(load_model(model).feature_names_in_, ["0", "1"])
    # predict reads the file the same way, and finds the columns by name
    r = runner.invoke(main, ["predict", str(model), str(p)])
    assert r.exit_code == 0 and note in r.stderr and "Warning" not in r.stderr, r.output
    np.testing.assert_array_equal(np.array(r.stdout.split(), dtype=int), labels)
    r = runner.invoke(main, ["predict", str(model), str(p), "-q", "--drop", "0"])
    assert r.exit_code == 2 and "lacks the column the model was fitted on: '0'" in r.output
    r = runner.invoke(main, [*_fast_args(p, out), "--no-header", "-q"])  # read as data
    assert r.exit_code == 0 and r.output == "" and np.loadtxt(out).shape == (81,)


def test_utf8_byte_order_mark_is_not_in_the_names(runner, blobs, tmp_path):
    p = tmp_path / "bom.csv"
    rows = "".join(f"{a!r},{b!r}\n" for a, b in blobs.tolist())
    p.write_text("a,b\n" + rows, encoding="utf-8-sig")
    model = tmp_path / "m.skops"
    r = runner.invoke(main, [*_fast_args(p, tmp_path / "l.txt"), "--model-out", str(model)])
    assert r.exit_code == 0, r.output
    np.testing.assert_array_equal(load_model(model).feature_names_in_, ["a", "b"])
    plain = tmp_path / "plain.csv"
    plain.write_text("b,a\n" + "".join(f"{b!r},{a!r}\n" for a, b in blobs.tolist()))
    for data in (p, plain):  # found by name with or without the mark
        r = runner.invoke(main, ["predict", str(model), str(data), "-q"])
        assert r.exit_code == 0 and len(r.stdout.split()) == 80, r.output
    r = runner.invoke(main, ["predict", str(model), str(p), "--columns", "b", "-q"])
    assert r.exit_code == 2 and "'a'" in r.output  # the name 'a', not '\ufeffa'


def test_fit_refuses_a_header_name_held_twice_before_any_work(runner, blobs, tmp_path):
    p = tmp_path / "dup.csv"
    p.write_text("a,a\n" + "".join(f"{a!r},{b!r}\n" for a, b in blobs.tolist()))
    out, model = tmp_path / "l.txt", tmp_path / "m.skops"
    r = runner.invoke(main, [*_fast_args(p, out), "--model-out", str(model)])
    assert r.exit_code == 2, r.output
    assert f"{p}: the header holds 'a' more than once" in r.output
    assert "fit:" not in r.output and not out.exists() and not model.exists()
    r = runner.invoke(main, [*_fast_args(p, out), "--drop", "1", "--model-out", str(model)])
    assert r.exit_code == 0, r.output
    np.testing.assert_array_equal(load_model(model).feature_names_in_, ["a"])


@pytest.mark.parametrize(
    ("opts", "match"),
    [
        (["--kernel", "cosine", "--gamma", "0.5"], "--kernel cosine has no gamma"),
        (["--kernel", "polynomial", "--gamma", "auto"], "--kernel polynomial has no width"),
        (["--kernel", "laplacian", "--gamma", "mean-distance", "--key", "Y"], "no array 'Y'"),
        (["--kernel", "knn", "--n-neighbors", "5", "--gamma", "0.1"], "--kernel knn has no"),
        (["--key", "nokey"], "--key: {data} has no array 'nokey' (arrays: X)"),
    ],
)
def test_fit_parameter_errors_are_usage_errors(runner, blobs, tmp_path, opts, match):
    data = tmp_path / "d.npz"
    np.savez(data, X=blobs)
    r = runner.invoke(main, ["fit", str(data), "-k", "2", *opts])
    assert r.exit_code == 2, r.output
    assert match.format(data=data) in r.output and "fit failed" not in r.output, r.output


def test_fit_width_error_before_the_data_is_read(runner, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,name\n1,x\n")  # a runtime failure, once read
    r = runner.invoke(main, ["fit", str(bad), "-k", "1", "--kernel", "sigmoid", "--gamma", "auto"])
    assert r.exit_code == 2 and "no width to choose" in r.output and "name" not in r.output


def test_predict_missing_npz_key_is_a_usage_error(runner, blobs, tmp_path):
    data = tmp_path / "d.npz"
    np.savez(data, X=blobs)
    model = tmp_path / "m.skops"
    r = runner.invoke(main, [*_fast_args(data, tmp_path / "l.txt"), "--model-out", str(model)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["predict", str(model), str(data), "--key", "nokey"])
    assert r.exit_code == 2 and f"--key: {data} has no array 'nokey'" in r.output, r.output


def test_an_interrupted_checkpointed_fit_says_how_to_resume(runner, blobs, tmp_path, monkeypatch):
    """Ctrl-C during a fit with --checkpoint: a line says the file keeps the last save
    and that the same command resumes; then 'Aborted!' and exit code 130 (an
    interrupt, told apart from a failure's 1)."""
    pytest.importorskip("skops")
    from mbkkm import MiniBatchKernelKMeans

    data, ckpt = tmp_path / "d.npy", tmp_path / "f.ckpt"
    np.save(data, blobs)

    def interrupted(self, X, *args, checkpoint=None, **kwargs):
        Path(checkpoint).write_bytes(b"saved")  # a save was made, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(MiniBatchKernelKMeans, "fit", interrupted)
    r = runner.invoke(main, [*_fast_args(data, tmp_path / "l.txt"), "--checkpoint", str(ckpt)])
    assert r.exit_code == 130 and r.output.rstrip().endswith("Aborted!"), r.output
    assert f"interrupted: {ckpt} keeps the fit's last save" in r.output
    assert "run the same command again to resume" in r.output


def test_a_closed_standard_output_ends_the_command_quietly(tmp_path):
    """``mbkkm fit ... --transform-out - | head -1``: the reader goes after one line;
    the command stops with exit code 1 and no 'Broken pipe' error or traceback (it
    named 'the labels' while writing distances)."""
    import os
    import subprocess

    import mbkkm

    rng = np.random.default_rng(0)
    p = tmp_path / "d.npy"
    np.save(p, rng.normal(size=(20_000, 2)))  # distances: about 700 kB, beyond a pipe's buffer
    src = str(Path(mbkkm.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    args = [sys.executable, "-m", "mbkkm", "fit", str(p), "-k", "3", "-q", "--max-iter", "5"]
    proc = subprocess.Popen(
        [*args, "--transform-out", "-"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdout.readline().count(b",") == 2
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1
    assert "Broken pipe" not in stderr and "Traceback" not in stderr and "Error" not in stderr


def test_a_scipy_sparse_npz_is_clustered_as_sparse_rows(runner, tmp_path):
    """A scipy.sparse.save_npz file: fit labels it as the estimator does on the same
    CSR matrix (the kernel on sparse rows, never densified), predict agrees with
    the saved model, and the plot projects the rows with a truncated SVD; the graph
    kernels, which need dense rows, are a usage error."""
    import scipy.sparse as sp

    from mbkkm import MiniBatchKernelKMeans

    X = sp.random(90, 30, density=0.2, format="csr", random_state=0)
    p = tmp_path / "tfidf.npz"
    sp.save_npz(p, X)
    out, model, plot = tmp_path / "l.npy", tmp_path / "m.skops", tmp_path / "p.png"
    args = ["fit", str(p), "-k", "3", "--kernel", "cosine", "--batch-size", "32"]
    args += ["--tau", "10", "--max-iter", "20", "--seed", "0"]
    r = runner.invoke(main, [*args, "--labels-out", str(out), "--model-out", str(model)])
    assert r.exit_code == 0, r.output
    expected = MiniBatchKernelKMeans(
        3, kernel="cosine", batch_size=32, tau=10, max_iter=20, random_state=0
    ).fit(X)
    np.testing.assert_array_equal(np.load(out), expected.predict(X))
    assert sp.issparse(load_model(model).support_vectors_)
    r = runner.invoke(main, ["predict", str(model), str(p), "-q"])
    assert r.exit_code == 0, r.output
    np.testing.assert_array_equal(np.array(r.stdout.split(), dtype=int), np.load(out))
    pytest.importorskip("matplotlib")
    r = runner.invoke(main, [*args, "-q", "--plot", str(plot)])
    assert r.exit_code == 0 and plot.stat().st_size > 0, r.output
    r = runner.invoke(main, [*args[:4], "--kernel", "knn", "--n-neighbors", "5"])
    assert r.exit_code == 2 and "--kernel knn builds its graph from dense rows" in r.output


def test_predict_sparse_npz_with_a_model_of_named_columns(runner, blobs, tmp_path):
    """A model fitted on a CSV with a header (feature names a, b) labels a
    scipy.sparse .npz of the same points as the CSV. Before, predict wrapped the CSR
    rows in a DataFrame with the model's names and failed with pandas' 'Shape of
    passed values is (n, 1), indices imply (n, 2)' (exit 1)."""
    import scipy.sparse as sp

    csv = tmp_path / "d.csv"
    csv.write_text("a,b\n" + "".join(f"{a!r},{b!r}\n" for a, b in blobs.tolist()))
    npz, model = tmp_path / "s.npz", tmp_path / "m.skops"
    sp.save_npz(npz, sp.csr_matrix(blobs))
    r = runner.invoke(main, [*_fast_args(csv, tmp_path / "l.txt"), "--model-out", str(model)])
    assert r.exit_code == 0, r.output
    dense = runner.invoke(main, ["predict", str(model), str(csv), "-q"])
    r = runner.invoke(main, ["predict", str(model), str(npz), "-q"])
    assert r.exit_code == 0, r.output
    assert r.stdout == dense.stdout and len(r.stdout.split()) == len(blobs)
    # the columns taken by position: said once, not again by scikit-learn
    assert "has no column names" in r.stderr and "valid feature names" not in r.stderr


@pytest.mark.parametrize("option", ["--labels-out", "--transform-out"])
def test_outputs_to_a_suffix_not_written_are_usage_errors(runner, blobs, tmp_path, option):
    """Before, ``--labels-out x.npz`` wrote one label per line of text into x.npz; an
    output whose suffix names a format not written (.npz, .gz) is refused before the
    data is read, naming the option and the formats written."""
    data = tmp_path / "d.npy"
    np.save(data, blobs)
    out = tmp_path / "x.npz"
    r = runner.invoke(main, ["fit", str(data), "-k", "2", option, str(out)])
    assert r.exit_code == 2, r.output
    assert f"{option}: cannot write an .npz archive (x.npz): the formats written are" in r.output
    assert ".npy, .parquet" in r.output and not out.exists()
    model = tmp_path / "m.skops"
    r = runner.invoke(main, [*_fast_args(data, tmp_path / "l.txt"), "--model-out", str(model)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["predict", str(model), str(data), option, str(tmp_path / "y.gz")])
    assert r.exit_code == 2 and "cannot write a gzip-compressed file (y.gz)" in r.output


def test_fit_writes_all_of_its_outputs_or_none(runner, blobs, tmp_path, monkeypatch):
    """Before, fit wrote the labels, then drew the plot and saved the model: a
    one-row, 3-column CSV with --plot ended with PCA's traceback and left the labels
    file. The figures are now drawn before any output is written (a failure is the
    usual one-line error, exit 1), and the labels are put in place only once the
    model and figures are written."""
    import mbkkm.cli as cli

    pytest.importorskip("matplotlib")
    tmp_path = tmp_path / "out"  # (the test's own folder: only what fit writes)
    tmp_path.mkdir()
    one = tmp_path / "one.csv"
    one.write_text("a,b,c\n1,2,3\n")
    labels, model, plot = tmp_path / "l.csv", tmp_path / "m.skops", tmp_path / "p.png"
    outs = ["--labels-out", str(labels), "--model-out", str(model), "--plot", str(plot)]
    r = runner.invoke(main, ["fit", str(one), "-k", "1", "-q", *outs])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert r.output.startswith("Error: cannot draw the --plot figure (no output was written): ")
    assert "needs at least 2 points, got 1" in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.csv"]  # no temporary file left

    data = tmp_path / "d.npy"
    np.save(data, blobs)
    fit = [*_fast_args(data, labels), "--model-out", str(model)]
    distances = tmp_path / "t.npy"

    def no_disk(est, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("mbkkm.cluster.save_model", no_disk)
    r = runner.invoke(main, [*fit, "--transform-out", str(distances), "--plot", str(plot)])
    assert r.exit_code == 1 and f"cannot write {model}: No space left" in r.output, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.npy", "one.csv"]
    monkeypatch.undo()

    def broken(*args, **kwargs):
        raise ValueError("the figure failed")

    monkeypatch.setattr(cli, "cluster_figure", broken)
    r = runner.invoke(main, [*fit, "--plot", str(plot)])
    assert r.exit_code == 1 and "the figure failed" in r.output, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.npy", "one.csv"]
    monkeypatch.undo()
    r = runner.invoke(main, [*fit, "--plot", str(plot)])  # the same outputs, all written
    assert r.exit_code == 0, r.output
    assert labels.exists() and model.exists() and plot.read_bytes()[:4] == b"\x89PNG"


def test_warnings_are_one_line_naming_no_source_line(runner, blobs, tmp_path, monkeypatch):
    """A warning of the fit reaches stderr as 'warning: <message>' on one line, not as
    Python's 'file:line: Category: message' pointing into click."""
    import warnings

    from mbkkm import MiniBatchKernelKMeans
    from mbkkm.cluster import GammaGridWarning

    fit = MiniBatchKernelKMeans.fit

    def warning_fit(self, *args, **kwargs):
        warnings.warn("the width is at the\n  edge of the grid", GammaGridWarning, stacklevel=2)
        return fit(self, *args, **kwargs)

    monkeypatch.setattr(MiniBatchKernelKMeans, "fit", warning_fit)
    p = tmp_path / "b.npy"
    np.save(p, blobs)
    r = runner.invoke(main, [*_fast_args(p, tmp_path / "l.txt"), "-q"])
    assert r.exit_code == 0, r.output
    assert r.stderr == "warning: the width is at the edge of the grid\n"


def test_a_trailing_delimiter_is_named_as_such(runner, tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("a,b,\n1,2,\n3,4,\n5,7,\n")
    r = runner.invoke(main, ["fit", str(p), "-k", "2", "-q"])
    assert r.exit_code == 2 and "a delimiter at the end of every line" in r.output
    r = runner.invoke(main, ["fit", str(p), "-k", "2", "-q", "--drop", "2", "--gamma", "0.5"])
    assert r.exit_code == 0, r.output


def test_os_errors_in_one_line_without_their_number():
    from mbkkm._warn import one_line

    assert one_line(OSError(28, "checkpoint: cannot write 'c': No space left")) == (
        "checkpoint: cannot write 'c': No space left"
    )
    assert one_line(FileNotFoundError(2, "No such file", "/x")) == "No such file: '/x'"
