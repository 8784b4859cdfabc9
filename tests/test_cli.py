"""Every command of the mbkkm CLI through click's CliRunner: exit codes and messages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

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
    for args in ([], ["fit"], ["datasets"], ["experiment"], ["plot"], ["gamma"]):
        r = runner.invoke(main, [*args, "--help"])
        assert r.exit_code == 0 and "Usage:" in r.output


def _fit_args(path, out):
    return ["fit", str(path), "-k", "2", "--batch-size", "32", "--tau", "10", "--max-iter",
            "10", "--labels-out", str(out)]


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
    np.testing.assert_array_equal(est.predict(blobs), labels)


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
    r = runner.invoke(main, ["fit", str(q), "-k", "2"])
    assert r.exit_code == 1 and "has no array 'X'" in r.output
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
    r = runner.invoke(main, ["fit", str(p), "-k", "2", "--kernel", "nope"])
    assert r.exit_code == 2
    r = runner.invoke(main, ["fit", str(p)])
    assert r.exit_code == 2 and "--n-clusters" in r.output


def test_datasets(runner, tmp_path):
    r = runner.invoke(main, ["datasets", "--data-home", str(tmp_path)])
    assert r.exit_code == 0
    for name in ("pendigits", "har", "mnist", "letter"):
        assert name in r.output
    assert "not found" in r.output and str(tmp_path) in r.output


@pytest.mark.slow
def test_experiment_quick_and_plot(runner, tmp_path):
    grid = tmp_path / "g.toml"
    grid.write_text('name = "g"\ndatasets = ["blobs"]\n'
                    'algorithms = ["truncated", "minibatch-classic", "full-batch"]\n'
                    'batch_sizes = [32]\ntaus = [10, 20]\nseeds = 1\nmax_iter = 3\n'
                    'synthetic_samples = 90\n')
    out = tmp_path / "res"
    r = runner.invoke(main, ["experiment", str(grid), "--out", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "4 runs" in r.output and "4 ok" in r.output
    r = runner.invoke(main, ["experiment", str(grid), "--out", str(out), "--no-progress",
                             "--jobs", "2"])
    assert r.exit_code == 0 and "4 already in" in r.output
    r = runner.invoke(main, ["experiment", "quick", "--out", str(out), "--dry-run",
                             "--datasets", "blobs", "--seeds", "1"])
    assert r.exit_code == 0 and "runs ->" in r.output
    r = runner.invoke(main, ["plot", str(out / "g.csv"), "--out", str(tmp_path / "fig")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "fig" / "blobs-rbf-panels.png").stat().st_size > 0


def test_experiment_errors(runner, tmp_path):
    r = runner.invoke(main, ["experiment", "nope", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "neither a preset" in r.output
    r = runner.invoke(main, ["experiment", "quick", "--out", str(tmp_path),
                             "--datasets", "iris", "--dry-run"])
    assert r.exit_code == 2 and "Unknown dataset 'iris'" in r.output
    r = runner.invoke(main, ["experiment", "quick", "--out", str(tmp_path),
                             "--algorithms", "kmeans", "--dry-run"])
    assert r.exit_code == 2 and "Unknown algorithm 'kmeans'" in r.output
    bad = tmp_path / "bad.toml"
    bad.write_text("datasets = [")
    r = runner.invoke(main, ["experiment", str(bad), "--out", str(tmp_path)])
    assert r.exit_code == 2 and "not valid TOML" in r.output
    r = runner.invoke(main, ["experiment", "quick", "--out", str(tmp_path), "--budget", "-1"])
    assert r.exit_code == 2
    r = runner.invoke(main, ["experiment", "quick", "--out", str(tmp_path), "--jobs", "0"])
    assert r.exit_code == 2 and "--jobs" in r.output


def test_plot_errors(runner, tmp_path):
    r = runner.invoke(main, ["plot", str(tmp_path / "none.csv"), "--out", str(tmp_path)])
    assert r.exit_code == 2
    p = tmp_path / "x.csv"
    p.write_text("a,b\n1,2\n")
    r = runner.invoke(main, ["plot", str(p), "--out", str(tmp_path / "f")])
    assert r.exit_code == 1 and "not a result table" in r.output


def test_gamma(runner, tmp_path):
    r = runner.invoke(main, ["gamma", "iris"])
    assert r.exit_code == 2 and "Unknown dataset 'iris'" in r.output
    r = runner.invoke(main, ["gamma", "pendigits", "--data-home", str(tmp_path)])
    assert r.exit_code == 1 and "not available locally" in r.output
    r = runner.invoke(main, ["gamma", "pendigits", "--kernel", "cosine"])
    assert r.exit_code == 2


def test_gamma_shared_pendigits(runner):
    if not (SHARED_DATASETS / "pendigits.npz").exists():
        pytest.skip("shared pendigits.npz not found")
    r = runner.invoke(main, ["gamma", "pendigits", "--data-home", str(SHARED_DATASETS)])
    assert r.exit_code == 0 and "gamma = 1" in r.output


def test_kernel_scale_and_deprecated_gamma_spelling(runner):
    if not (SHARED_DATASETS / "pendigits.npz").exists():
        pytest.skip("shared pendigits.npz not found")
    args = ["pendigits", "--data-home", str(SHARED_DATASETS)]
    new = runner.invoke(main, ["kernel-scale", *args])
    old = runner.invoke(main, ["gamma", *args])
    assert new.exit_code == old.exit_code == 0
    assert "deprecated" not in new.output and "use 'mbkkm kernel-scale'" in old.output

    def value(out):  # the result line without its timing
        return next(ln for ln in out.splitlines() if ": gamma = " in ln).rsplit(" (", 1)[0]

    assert value(new.output) == value(old.output)


def test_fit_gamma_auto_prints_candidates_and_plots(runner, blobs, tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, blobs)
    png = tmp_path / "gamma.png"
    r = runner.invoke(main, ["fit", str(path), "-k", "2", "--gamma", "auto", "--max-iter", "5",
                             "--gamma-plot", str(png)])
    assert r.exit_code == 0, r.output
    assert "gamma=auto (knn-normalized-cut" in r.output and "<- chosen" in r.output
    assert png.stat().st_size > 0
    for bad in ("-1", "scale", "nan"):
        r = runner.invoke(main, ["fit", str(path), "-k", "2", "--gamma", bad])
        assert r.exit_code == 2 and "--gamma" in r.output
    # the default chooses the width too; "mean-distance" is the fixed width (no table)
    r = runner.invoke(main, ["fit", str(path), "-k", "2", "--max-iter", "5"])
    assert r.exit_code == 0 and "<- chosen" in r.output
    png.unlink()
    r = runner.invoke(main, ["fit", str(path), "-k", "2", "--gamma", "Mean-Distance",
                             "--max-iter", "5", "--gamma-plot", str(png)])
    assert r.exit_code == 0 and "<- chosen" not in r.output
    assert "--gamma-plot: nothing written" in r.output and not png.exists()


@pytest.mark.parametrize(("tau", "code"), [("none", 0), ("50", 0), ("0", 2), ("x", 2)])
def test_fit_tau_accepts_none(tmp_path, tau, code):
    path = tmp_path / "x.npy"
    np.save(path, np.random.RandomState(0).normal(size=(200, 3)))
    result = CliRunner().invoke(main, ["fit", str(path), "-k", "2", "--batch-size", "32",
                                       "--max-iter", "5", "--tau", tau, "-q"])
    assert result.exit_code == code, result.output
