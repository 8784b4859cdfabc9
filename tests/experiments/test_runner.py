"""The runner on tiny grids of synthetic data: rows, resume, budgets, skips."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mbkkm.experiments import (
    COLUMNS,
    Grid,
    done_run_ids,
    expand,
    kernel_matrix_bytes,
    read_results,
    run_grid,
)

ALGOS = ("full-batch", "truncated", "truncated-literal", "minibatch-adaptive", "minibatch-classic")


def tiny(**kw):
    base = dict(
        name="tiny",
        datasets=("blobs",),
        algorithms=ALGOS,
        kernels=("rbf",),
        batch_sizes=(32,),
        taus=(10, 20),
        seeds=(0, 1),
        max_iter=5,
        synthetic_samples=150,
    )
    base.update(kw)
    return Grid(**base)


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_progress_in_a_pipe_is_plain_lines(tmp_path, capsys, monkeypatch):
    """Outside a terminal (a pipe, a log file) the runs' progress is a line per
    interval and a last line, not a bar redrawn with carriage returns."""
    monkeypatch.setenv("MBKKM_PROGRESS_INTERVAL", "0")
    s = run_grid(tiny(seeds=(0,)), tmp_path / "r.csv", progress=True)
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = [line for line in err.splitlines() if line.startswith("experiment: ")]
    assert lines[-1].startswith(f"experiment: {s.ok} runs in ")
    assert any("runs (" in line and "left, last: " in line for line in lines[:-1])


def test_rows_complete(tmp_path):
    out = tmp_path / "r.csv"
    s = run_grid(tiny(), out, progress=False)
    assert s.ok == len(expand(tiny())) == 2 + 4 + 4 + 2 + 2
    r = rows(out)
    assert list(r[0]) == COLUMNS
    for row in r:
        assert row["status"] == "ok", row["message"]
        assert 0.0 <= float(row["nmi"]) <= 1.0 and float(row["ari"]) <= 1.0
        assert float(row["objective"]) >= 0 and float(row["fit_seconds"]) >= 0
        assert row["numpy"] == np.__version__ and row["n_cores"] and row["timestamp"]
        assert row["n_samples"] == "150" and row["n_clusters"] == "3"
    by_algo = {row["algorithm"]: row for row in r}
    assert float(by_algo["full-batch"]["kernel_seconds"]) > 0
    assert by_algo["full-batch"]["objective_space"] == "kernel"
    assert by_algo["minibatch-classic"]["objective_space"] == "input"
    assert by_algo["minibatch-classic"]["kernel"] == "none"
    assert by_algo["truncated-literal"]["renormalize"] == "False"
    # gamma=None resolved once per dataset and recorded.
    assert "gamma" in by_algo["truncated"]["kernel_params"]


def test_resume_skips_done_rows(tmp_path):
    out = tmp_path / "r.csv"
    first = run_grid(tiny(seeds=(0,)), out, progress=False)
    second = run_grid(tiny(), out, progress=False)
    assert second.already_done == first.ok
    assert second.ok == len(expand(tiny())) - first.ok
    ids = [row["run_id"] for row in rows(out)]
    assert len(ids) == len(set(ids)) == len(expand(tiny()))
    third = run_grid(tiny(), out, progress=False)
    assert third.ok == 0 and third.already_done == len(ids)


def test_read_results_keeps_the_newest_row_in_any_path_order(tmp_path):
    """The same run in two tables (an earlier run of a grid kept in another folder):
    the newer row wins whichever table is named first; within one table the last."""
    out = tmp_path / "r.csv"
    run_grid(tiny(seeds=(0,), algorithms=("minibatch-classic",)), out, progress=False)
    df = pd.read_csv(out)
    old, new = df.copy(), df.copy()
    old["timestamp"], old["ari"] = "2026-01-01T00:00:00+00:00", -1.0
    new["timestamp"], new["ari"] = "2026-06-01T00:00:00+00:00", 0.5
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    new.to_csv(tmp_path / "a" / "t.csv", index=False)
    old.to_csv(tmp_path / "b" / "t.csv", index=False)
    for order in (["a", "b"], ["b", "a"]):
        got = read_results([tmp_path / d for d in order])
        assert list(got["run_id"]) == list(df["run_id"]) and (got["ari"] == 0.5).all()
    # Without a time (rows of an older table format) a row counts as oldest.
    old.drop(columns="timestamp").to_csv(tmp_path / "b" / "t.csv", index=False)
    for order in (["a", "b"], ["b", "a"]):
        assert (read_results([tmp_path / d for d in order])["ari"] == 0.5).all()
    # Same time: the table named last wins, as within one table the last row does.
    twin = new.assign(ari=0.25)
    twin.to_csv(tmp_path / "b" / "t.csv", index=False)
    assert (read_results([tmp_path / "a", tmp_path / "b"])["ari"] == 0.25).all()
    assert (read_results([tmp_path / "b", tmp_path / "a"])["ari"] == 0.5).all()
    pd.concat([new, twin]).to_csv(tmp_path / "one.csv", index=False)
    assert (read_results(tmp_path / "one.csv")["ari"] == 0.25).all()


def test_budget_stops_between_runs(tmp_path):
    out = tmp_path / "r.csv"
    s = run_grid(tiny(), out, budget_seconds=1e-9, progress=False)
    assert s.stopped_by_budget
    assert s.not_run == len(expand(tiny())) and s.ok == 0
    assert rows(out) == []  # header only
    with pytest.raises(ValueError, match="budget_seconds"):
        run_grid(tiny(), out, budget_seconds=0, progress=False)


def test_a_folder_as_the_table_is_refused_before_any_run(tmp_path):
    """run_grid's out is the CSV table (the CLI's --out is a folder): a folder there
    is a ValueError that says so, not an IsADirectoryError from the writer."""
    with pytest.raises(ValueError, match="is a folder; run_grid writes one CSV table"):
        run_grid(tiny(), tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_kernel_matrix_skipped_with_estimate(tmp_path):
    out = tmp_path / "r.csv"
    s = run_grid(
        tiny(algorithms=("full-batch", "truncated"), taus=(10,)),
        out,
        memory_budget=1000,
        progress=False,
    )
    r = {row["algorithm"]: row for row in rows(out)}
    assert r["full-batch"]["status"] == "skipped"
    assert int(r["full-batch"]["memory_estimate_bytes"]) == 8 * 150**2
    msg = r["full-batch"]["message"]
    assert "180.0 kB" in msg and "memory budget" in msg
    assert r["truncated"]["status"] == "ok"
    assert s.skipped == 2


def test_mnist_full_batch_estimate():
    assert kernel_matrix_bytes(70000, "rbf", {}) == 70000**2 * 8  # 39.2 GB
    # A sparse graph kernel is multiplied as stored: full batch needs no n x n copy.
    knn = kernel_matrix_bytes(70000, "knn", {"n_neighbors": 2000})
    # the graph at 1.5 n k entries (MNIST's holds 1.41 n k): 12.9 GB
    assert knn == 20 * 70000 * 2000 + 48 * int(1.5 * 70000 * 2000)
    assert (
        kernel_matrix_bytes(70000, "knn", {"n_neighbors": 2000}, dense=True, n_clusters=10)
        == knn + 16 * 70000 * 10
    )


def test_heat_memory_plan_follows_max_dense_bytes():
    # Letter (20,000 points, 500 neighbours): low-rank by default (8 n^2 = 3.2 GB > 2**30),
    # exact when the grid allows the dense matrix: three n x n float64 arrays and the graph.
    graph = 56 * 20000 * 500 + 12 * int(1.5 * 20000 * 500)
    low = kernel_matrix_bytes(20000, "heat", {"n_neighbors": 500, "t": 7.0})
    assert low == graph + 8 * 20000 * 3 * (64 + 2)
    exact = kernel_matrix_bytes(
        20000, "heat", {"n_neighbors": 500, "t": 7.0, "max_dense_bytes": 4_000_000_000}
    )
    assert exact == graph + 3 * 8 * 20000**2
    assert (
        kernel_matrix_bytes(
            20000, "heat", {"n_neighbors": 500, "t": 7.0, "max_dense_bytes": 3_199_999_999}
        )
        == low
    )


@pytest.mark.parametrize("data", ["groups", "gaussian"])
def test_knn_estimate_bounds_the_measured_peak(data):
    """The k-NN kernel's estimate against the peak tracemalloc measures while it is
    built. Before, it was 24 n k: 3.3 times too low (n=6000, k=100: 14.4 MB
    estimated, 47.9 MB measured), so runs over the memory budget were not skipped.
    The graph (and its heat-kernel share) is now estimated at a typical fill (1.5 n k
    entries, where the most, 2 n k, skipped the paper's MNIST grid): from mutual
    neighbours (groups of k points, E = n k stored entries) to high-dimensional
    Gaussian data (E about 1.63 n k, up to 10 % above the estimate)."""
    import tracemalloc

    from mbkkm.kernels import graph_kernel_matrix
    from mbkkm.kernels._graph import fit_knn_graph

    n, k = 2000, 40
    rng = np.random.default_rng(0)
    if data == "groups":
        X = np.repeat(np.arange(n // k), k)[:, None] * 100.0 + rng.random((n, 3))
    else:
        X = rng.standard_normal((n, 100))
    X = X.astype(np.float32)
    for build, kernel in (
        (lambda: graph_kernel_matrix("knn", X, n_neighbors=k), "knn"),
        (lambda: fit_knn_graph(X, k, "euclidean", None, None, None), "graph"),
    ):
        tracemalloc.start()
        try:
            build()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        if kernel == "knn":
            estimate = kernel_matrix_bytes(n, "knn", {"n_neighbors": k})
        else:  # the heat kernel's graph: its low-rank estimate less the eigenvectors
            params = {"n_neighbors": k, "n_components": 1}
            estimate = kernel_matrix_bytes(n, "heat", params) - 8 * n * 3 * 3
        assert 0.9 * peak <= estimate <= 2 * peak, (kernel, peak, estimate)


def test_heat_max_dense_bytes_reaches_the_kernel(tmp_path):
    # 0 forces the low-rank heat kernel on 150 points; the rows record the parameter.
    out = tmp_path / "r.csv"
    g = tiny(
        kernels=("heat",),
        algorithms=("full-batch",),
        heat_t=2.0,
        n_neighbors=10,
        seeds=(0,),
        heat_max_dense_bytes=0,
    )
    s = run_grid(g, out, progress=False, kernel_cache=tmp_path / "cache")
    assert s.ok == 1
    (row,) = rows(out)
    assert '"max_dense_bytes": 0' in row["kernel_params"]
    (meta,) = (tmp_path / "cache").glob("*/meta.json")
    assert '"lowrank"' in meta.read_text()
    exact = run_grid(
        tiny(kernels=("heat",), algorithms=("full-batch",), heat_t=2.0, n_neighbors=10, seeds=(0,)),
        tmp_path / "e.csv",
        progress=False,
        kernel_cache=tmp_path / "cache",
    )
    assert exact.ok == 1
    kinds = sorted(m.read_text().count('"dense"') for m in (tmp_path / "cache").glob("*/meta.json"))
    assert kinds == [0, 1]


def test_missing_dataset_recorded_as_an_error_and_run_again(tmp_path, monkeypatch):
    """A dataset not found is an error row, not a skip: once it is in place, the
    same grid runs its runs (a skip would be final)."""
    monkeypatch.delenv("MBKKM_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "r.csv"
    g = tiny(datasets=("har",), algorithms=("minibatch-classic",), batch_sizes=(32,))
    s = run_grid(g, out, progress=False, download=False)
    assert s.error == 2 and s.skipped == 0
    assert all(r["status"] == "error" and "har" in r["message"] for r in rows(out))
    assert done_run_ids(out) == set()
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(6), 20)
    X = rng.normal(size=(6, 561))[labels] + 0.1 * rng.normal(size=(120, 561))
    np.savez(tmp_path / "har.npz", X=X, y=labels)
    s = run_grid(g, out, progress=False, data_home=tmp_path)
    assert s.ok == 2 and s.already_done == 0, s.errors


def test_a_dataset_out_of_memory_is_an_error_row_not_the_end_of_the_grid(tmp_path, monkeypatch):
    """Before, only OSError and ValueError from loading a dataset were recorded: a
    MemoryError (a dataset too large for the machine) escaped run_grid and stopped
    the whole grid, the other datasets' runs not run."""
    from mbkkm.experiments import _runner

    real = _runner.load_data

    def load(run, **kwargs):
        if run.dataset == "moons":
            raise MemoryError("Unable to allocate 40.0 GiB for an array")
        return real(run, **kwargs)

    monkeypatch.setattr(_runner, "load_data", load)
    out = tmp_path / "r.csv"
    g = tiny(datasets=("moons", "blobs"), algorithms=("minibatch-classic",))
    s = run_grid(g, out, progress=False)
    assert s.error == 2 and s.ok == 2
    assert s.errors == [
        "dataset not available: MemoryError: Unable to allocate 40.0 GiB for an array"
    ]
    monkeypatch.setattr(_runner, "load_data", real)
    s = run_grid(g, out, progress=False)  # retried, as any error row
    assert s.ok == 2 and s.already_done == 2


def test_errors_recorded_and_retried(tmp_path, monkeypatch):
    from mbkkm.experiments import _algorithms

    def broken(X, run, kernel):
        raise RuntimeError("boom\nsecond line")

    spec = _algorithms.ALGORITHMS["minibatch-classic"]
    monkeypatch.setitem(
        _algorithms.ALGORITHMS, "minibatch-classic", type(spec)(**{**spec.__dict__, "fit": broken})
    )
    out = tmp_path / "r.csv"
    g = tiny(algorithms=("minibatch-classic",))
    s = run_grid(g, out, progress=False)
    assert s.error == 2 and s.errors == ["RuntimeError: boom second line"]
    monkeypatch.setitem(_algorithms.ALGORITHMS, "minibatch-classic", spec)
    s2 = run_grid(g, out, progress=False)
    assert s2.ok == 2 and s2.already_done == 0
    df = read_results(out)
    assert (df["status"] == "ok").all() and len(df) == 2


def test_graph_kernel_runs(tmp_path):
    out = tmp_path / "r.csv"
    g = tiny(
        kernels=("knn",),
        algorithms=("full-batch", "truncated"),
        taus=(10,),
        n_neighbors=15,
        seeds=(0,),
    )
    run_grid(g, out, progress=False)
    r = {row["algorithm"]: row for row in rows(out)}
    for row in r.values():
        assert row["status"] == "ok", row["message"]
        assert float(row["kernel_seconds"]) > 0
    assert float(r["truncated"]["ari"]) > 0.3


def test_a_fits_warnings_go_into_its_row(tmp_path, recwarn):
    # The k-NN kernel is indefinite: full batch warns (IndefiniteKernelWarning);
    # in a grid the warning is written into the run's message, not shown.
    out = tmp_path / "r.csv"
    g = tiny(kernels=("knn",), algorithms=("full-batch",), n_neighbors=15, seeds=(0,))
    run_grid(g, out, progress=False)
    (row,) = rows(out)
    assert row["status"] == "ok"
    assert row["message"].startswith("IndefiniteKernelWarning: KernelKMeans: the kernel")
    assert row["message"].count("IndefiniteKernelWarning") == 1
    assert not [w for w in recwarn if "positive semi-definite" in str(w.message)]


def test_existing_file_with_other_columns(tmp_path):
    out = tmp_path / "r.csv"
    pd.DataFrame({"run_id": ["x"], "status": ["ok"]}).to_csv(out, index=False)
    with pytest.raises(ValueError, match="other columns"):
        run_grid(tiny(), out, progress=False)
    with pytest.raises(FileNotFoundError):
        read_results(tmp_path / "none.csv")


def test_jobs_give_the_rows_of_one_process(tmp_path):
    g = tiny(
        datasets=("blobs", "moons"),
        kernels=("rbf", "knn"),
        n_neighbors=15,
        algorithms=("full-batch", "truncated", "untruncated", "minibatch-classic"),
    )
    one = run_grid(g, tmp_path / "one.csv", progress=False)
    two = run_grid(g, tmp_path / "two.csv", progress=False, jobs=2)
    assert one.ok == two.ok == len(expand(g)) and two.error == 0
    a = read_results(tmp_path / "one.csv").set_index("run_id").sort_index()
    b = read_results(tmp_path / "two.csv").set_index("run_id").sort_index()
    same = ["status", "ari", "nmi", "objective", "n_iter", "kernel_params"]
    assert a.index.equals(b.index) and a[same].equals(b[same])
    assert (a["jobs"] == 1).all() and (b["jobs"] == 2).all()
    assert (b["blas_threads"] == 1).all()  # jobs > 1: one BLAS thread per process
    for df in (a, b):
        assert (df["fit_cpu_seconds"] > 0).all() and (df["load_average"] >= 0).all()
        assert df["commit"].nunique() == 1
    graph = b[(b["kernel"] == "knn") & (b["algorithm"] == "truncated")]
    assert (graph["kernel_cpu_seconds"] > 0).all()
    # Resuming with jobs skips what is done.
    again = run_grid(g, tmp_path / "two.csv", progress=False, jobs=2)
    assert again.ok == 0 and again.already_done == len(expand(g))


def test_jobs_budget_and_checks(tmp_path):
    s = run_grid(tiny(), tmp_path / "r.csv", budget_seconds=1e-9, jobs=2, progress=False)
    assert s.stopped_by_budget and s.not_run == len(expand(tiny())) and s.ok == 0
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="jobs must be an integer >= 1"):
            run_grid(tiny(), tmp_path / "r.csv", jobs=bad, progress=False)
    with pytest.raises(ValueError, match="blas_threads"):
        run_grid(tiny(), tmp_path / "r.csv", blas_threads=0, progress=False)


def test_blas_threads_in_one_process(tmp_path):
    run_grid(
        tiny(algorithms=("minibatch-classic",)), tmp_path / "r.csv", blas_threads=1, progress=False
    )
    assert (read_results(tmp_path / "r.csv")["blas_threads"] == 1).all()


def test_source_commit():
    from mbkkm.experiments._runner import source_commit

    c = source_commit()
    assert c == "" or len(c.split("+")[0]) == 12


@pytest.mark.parametrize("ignored", [True, False])
def test_source_commit_of_a_copy_inside_another_repository(tmp_path, ignored):
    """An installed mbkkm whose environment lies inside the user's own repository
    (ignored there, or untracked) has no commit: not the user's HEAD."""
    import shutil
    import subprocess
    import sys

    import mbkkm

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    proj = tmp_path / "proj"
    proj.mkdir()

    def git(*args):
        return subprocess.run(["git", *args], cwd=proj, capture_output=True, text=True, check=True)

    git("init", "-q")
    (proj / "README").write_text("a project\n")
    if ignored:
        (proj / ".gitignore").write_text("env/\n")
    git("add", "-A")
    git("-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "first")
    shutil.copytree(Path(mbkkm.__file__).parent, proj / "env" / "mbkkm")
    code = "from mbkkm.experiments._runner import source_commit; print(repr(source_commit()))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(proj / "env")},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "''", out.stdout + out.stderr


def test_har_runs_where_openml_is_reachable(tmp_path, monkeypatch):
    """HAR is not shipped: with ``download=True`` the runner fetches it from OpenML
    ('har', version 1), converts and caches it, then runs the grid on it. A small
    stand-in for OpenML's answer (561 raw features, labels '1'..'6') exercises that
    path offline."""
    import sklearn.datasets
    from sklearn.utils import Bunch

    monkeypatch.delenv("MBKKM_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    labels = np.repeat(np.array([str(c) for c in range(1, 7)], dtype=object), 20)
    centres = rng.normal(size=(6, 561))
    X = centres[labels.astype(int) - 1] + 0.1 * rng.normal(size=(120, 561))
    calls = []

    def fake_fetch_openml(name, *, version, **kwargs):
        calls.append((name, version))
        return Bunch(data=X, target=labels)

    monkeypatch.setattr(sklearn.datasets, "fetch_openml", fake_fetch_openml)
    g = tiny(
        datasets=("har",),
        algorithms=("truncated", "minibatch-classic"),
        taus=(10,),
        seeds=(0,),
        kernels=("rbf", "knn"),
        n_neighbors=10,
    )
    offline = run_grid(g, tmp_path / "off.csv", progress=False)
    assert offline.error == len(expand(g)) and not calls
    s = run_grid(g, tmp_path / "har.csv", progress=False, download=True)
    assert calls == [("har", 1)]  # fetched once, then read from the cache
    assert s.ok == len(expand(g)), s.errors
    df = read_results(tmp_path / "har.csv")
    assert (df["n_samples"] == 120).all() and (df["n_features"] == 561).all()
    assert (df["n_clusters"] == 6).all() and df["ari"].min() > 0.8
    # The paper's sigma = 4.25 for HAR, raw features.
    rbf = df[df["kernel"] == "rbf"]
    assert rbf["kernel_params"].str.contains(str(1 / (2 * 4.25**2))[:8]).all()


def test_grid_takes_one_name_and_a_seed_count_as_the_toml_form_does():
    from mbkkm.experiments import Grid, GridError

    g = Grid("g", datasets="moons", algorithms="truncated", seeds=3, taus=range(10, 30, 10))
    assert (g.datasets, g.algorithms, g.seeds, g.taus) == (
        ("moons",),
        ("truncated",),
        (0, 1, 2),
        (10, 20),
    )
    with pytest.raises(GridError, match="Unknown dataset 'mons'"):
        Grid("g", datasets="mons", algorithms="truncated")
    with pytest.raises(GridError, match="seeds must be a positive count"):
        Grid("g", datasets="moons", algorithms="truncated", seeds=0)


def test_read_results_skips_folders_named_like_tables(tmp_path):
    run_grid(tiny(algorithms=("minibatch-classic",)), tmp_path / "r.csv", progress=False)
    (tmp_path / "old.csv").mkdir()
    assert len(read_results(tmp_path)) == len(read_results(tmp_path / "r.csv"))


def test_the_sparse_topics_corpus_runs_what_takes_sparse_rows(tmp_path):
    """On the sparse synthetic corpus 'topics', full batch failed ('building the kernel
    failed': np.asarray of a CSR matrix) and the non-kernel mini-batch k-means runs
    failed (MiniBatchKMeans refuses sparse rows), and a re-run retried them all. Full
    batch now builds its matrix from the sparse rows; the runs that need dense rows
    (non-kernel k-means, graph kernels) are skipped with the reason, not retried."""
    out = tmp_path / "r.csv"
    g = tiny(
        datasets=("topics",),
        kernels=("cosine", "knn"),
        algorithms=("full-batch", "truncated", "minibatch-adaptive"),
        taus=(10,),
        seeds=(0,),
        synthetic_samples=200,
        n_neighbors=10,
    )
    s = run_grid(g, out, progress=False)
    status = {(r["kernel"], r["algorithm"]): (r["status"], r["message"]) for r in rows(out)}
    assert status[("cosine", "full-batch")][0] == "ok"
    assert status[("cosine", "truncated")][0] == "ok"
    for key, why in (
        (("none", "minibatch-adaptive"), "minibatch-adaptive (k-means in the input space"),
        (("knn", "full-batch"), "the knn kernel builds its k-NN graph from dense rows"),
        (("knn", "truncated"), "the knn kernel builds its k-NN graph from dense rows"),
    ):
        assert status[key][0] == "skipped", status[key]
        assert why in status[key][1] and "'topics' is a scipy.sparse matrix" in status[key][1]
    assert (s.ok, s.skipped, s.error) == (2, 3, 0)
    again = run_grid(g, out, progress=False)
    assert again.already_done == 5 and again.ok == again.error == 0
