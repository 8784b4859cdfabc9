"""Grid expansion, presets and grid files."""

from __future__ import annotations

from collections import Counter

import pytest

from mbkkm.datasets import DATASETS
from mbkkm.experiments import (
    ALGORITHMS,
    PRESETS,
    Grid,
    GridError,
    expand,
    get_preset,
    grid_from_dict,
    load_grid,
    resolve_grid,
)


def small_grid(**kw):
    base = dict(
        name="t",
        datasets=("blobs",),
        algorithms=tuple(ALGORITHMS),
        kernels=("rbf",),
        batch_sizes=(32, 64),
        taus=(10, 20, 30),
        seeds=(0, 1),
        max_iter=5,
        synthetic_samples=200,
    )
    base.update(kw)
    return Grid(**base)


def test_expansion_counts_and_axes():
    runs = expand(small_grid())
    c = Counter(r.algorithm for r in runs)
    # truncated: batch x tau x seeds; others ignore tau; full-batch ignores batch.
    assert c["truncated"] == c["truncated-literal"] == 2 * 3 * 2
    for name in (
        "untruncated",
        "untruncated-classic",
        "minibatch-adaptive",
        "minibatch-classic",
        "nystroem",
    ):
        assert c[name] == 2 * 2
    assert c["full-batch"] == 2
    assert len(runs) == sum(c.values())
    assert len({r.run_id for r in runs}) == len(runs)
    for r in runs:
        if not ALGORITHMS[r.algorithm].uses_tau:
            assert r.tau is None
        if r.algorithm == "full-batch":
            assert r.batch_size is None


def test_kernel_free_algorithms_not_repeated_per_kernel():
    runs = expand(small_grid(kernels=("rbf", "laplacian", "knn")))
    c = Counter((r.algorithm, r.kernel) for r in runs)
    assert c[("minibatch-adaptive", "none")] == 4
    assert not any(r.kernel != "none" for r in runs if r.algorithm.startswith("minibatch"))
    # Nyström cannot use the transductive graph kernels.
    assert ("nystroem", "knn") not in c
    assert c[("truncated", "knn")] == 12


def test_run_id_is_stable_and_ignores_grid_name():
    a = expand(small_grid())
    b = expand(small_grid(name="other"))
    assert [r.run_id for r in a] == [r.run_id for r in b]
    c = expand(small_grid(max_iter=6))
    assert not {r.run_id for r in a} & {r.run_id for r in c}


@pytest.mark.parametrize("name", ["gaussian", "knn", "heat"])
def test_paper_presets(name):
    g = get_preset(name)
    assert g.batch_sizes == (256, 512, 1024, 2048)
    assert g.taus == (50, 100, 200, 300)
    assert g.max_iter == 200
    assert g.seeds == tuple(range(10))
    assert set(g.datasets) == {"pendigits", "har", "mnist", "letter"}
    runs = expand(g)
    per_ds = Counter(r.dataset for r in runs)
    # 7 algorithms: full-batch 10, truncated x2 160 each, the 4 tau-free ones 40 each.
    assert set(per_ds.values()) == {10 + 2 * 160 + 4 * 40}


def test_preset_kernel_parameters():
    g = get_preset("gaussian")
    for ds, spec in DATASETS.items():
        assert g.kernel_params(ds, "rbf") == {"gamma": pytest.approx(1 / (2 * spec.sigma**2))}
    knn = {ds: get_preset("knn").kernel_params(ds, "knn")["n_neighbors"] for ds in DATASETS}
    assert knn == {"pendigits": 1000, "har": 2000, "mnist": 2000, "letter": 1000}
    heat = {ds: get_preset("heat").kernel_params(ds, "heat")["n_neighbors"] for ds in DATASETS}
    assert heat == {"pendigits": 500, "har": 500, "mnist": 200, "letter": 500}


def test_heat_max_dense_bytes_is_a_kernel_parameter(tmp_path):
    # Unset: the builder's default, and the run ids of existing heat grids unchanged.
    plain = Grid(
        name="h", datasets=("letter",), algorithms=("truncated",), kernels=("heat",), heat_t=7.0
    )
    assert plain.kernel_params("letter", "heat") == {"n_neighbors": 500, "t": 7.0}
    p = tmp_path / "exact.toml"
    p.write_text(
        'datasets = ["letter"]\nalgorithms = ["truncated"]\nkernels = ["heat"]\n'
        "heat_t = 7.0\nheat_max_dense_bytes = 4_000_000_000\n"
    )
    exact = load_grid(p)
    assert exact.kernel_params("letter", "heat") == {
        "n_neighbors": 500,
        "t": 7.0,
        "max_dense_bytes": 4_000_000_000,
    }
    assert exact.kernel_params("letter", "knn") == {"n_neighbors": 1000}
    assert {r.run_id for r in expand(plain)}.isdisjoint(r.run_id for r in expand(exact))


def test_quick_preset_is_small():
    assert len(expand(PRESETS["quick"])) < 100


def test_with_options():
    g = get_preset("gaussian").with_options(datasets=["pendigits"], seeds=3, max_iter=10)
    assert g.datasets == ("pendigits",) and g.seeds == (0, 1, 2) and g.max_iter == 10
    with pytest.raises(GridError, match="Unknown dataset 'nope'"):
        get_preset("gaussian").with_options(datasets=["nope"])


def test_unknown_names():
    with pytest.raises(GridError, match="Unknown preset 'nope'; presets: gaussian"):
        get_preset("nope")
    with pytest.raises(GridError, match="Unknown algorithm 'kmeans'"):
        small_grid(algorithms=("kmeans",))
    with pytest.raises(GridError, match="Unknown dataset 'iris'"):
        small_grid(datasets=("iris",))
    with pytest.raises(GridError, match="Unknown kernel 'foo'"):
        grid_from_dict({"datasets": ["blobs"], "algorithms": ["truncated"], "kernels": ["foo"]})
    with pytest.raises(GridError, match="neither a preset"):
        resolve_grid("nope")


@pytest.mark.parametrize(
    "table, named",
    [
        ({"datasets": 5, "algorithms": ["truncated"], "kernels": 5}, "datasets"),
        ({"name": "", "datasets": ["blobs"], "algorithms": ["truncated"], "kernels": [3]}, "name"),
        ({"kernels": [], "algorithms": 7, "datasets": ["blobs"]}, "algorithms"),
        (
            {"taus": [0], "batch_sizes": [0], "datasets": ["blobs"], "algorithms": ["truncated"]},
            "batch_sizes",
        ),
    ],
)
def test_a_table_with_several_faults_names_the_first_in_field_order(table, named):
    """Whatever the order of the keys, the kernels' aliases included."""
    with pytest.raises(GridError, match=f"^{named} "):
        grid_from_dict(table)
    with pytest.raises(GridError, match=f"^{named} "):
        grid_from_dict(dict(reversed(table.items())))


def test_kernel_aliases_from_a_generator_name_one_kernel_once():
    table = {"datasets": ["blobs"], "algorithms": ["truncated"]}
    assert grid_from_dict({**table, "kernels": (k for k in ["gaussian", "rbf"])}).kernels == (
        "rbf",
    )


def test_load_grid_file(tmp_path):
    p = tmp_path / "mine.toml"
    p.write_text(
        'datasets = ["blobs"]\nalgorithms = ["truncated", "minibatch-classic"]\n'
        'kernels = ["gaussian"]\nbatch_sizes = [32]\ntaus = [5, 10]\nseeds = 2\n'
        "max_iter = 3\n"
    )
    g = load_grid(p)
    assert g.name == "mine" and g.kernels == ("rbf",) and g.seeds == (0, 1)
    assert len(expand(g)) == 2 * 2 + 2
    assert resolve_grid(str(p)) == g


@pytest.mark.parametrize(
    "text, match",
    [
        ("datasets = [", "not valid TOML"),
        ('algorithms = ["truncated"]\n', "lacks the required key 'datasets'"),
        ('datasets = ["blobs"]\nalgorithms = ["truncated"]\ncolour = 1\n', "unknown grid key"),
        (
            'datasets = ["blobs"]\nalgorithms = ["truncated"]\nbatch_sizes = ["a"]\n',
            "batch_sizes must hold integers",
        ),
        (
            'datasets = ["blobs"]\nalgorithms = ["truncated"]\nmax_iter = 1.5\n',
            "max_iter must be an integer",
        ),
        ('datasets = "blobs"\nalgorithms = [1]\n', "algorithms must hold strings"),
        ('datasets = ["blobs"]\nalgorithms = ["truncated"]\nseeds = 0\n', "seeds must be"),
        ('datasets = ["blobs"]\nalgorithms = ["truncated"]\ngamma = -1\n', "gamma must be"),
        (
            'datasets = ["blobs"]\nalgorithms = ["truncated"]\nheat_max_dense_bytes = 1e9\n',
            "heat_max_dense_bytes must be an integer",
        ),
    ],
)
def test_malformed_grid_files(tmp_path, text, match):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(GridError, match=match) as info:
        load_grid(p)
    assert "bad.toml" in str(info.value)


def test_missing_grid_file(tmp_path):
    with pytest.raises(GridError, match="cannot read grid file"):
        load_grid(tmp_path / "none.toml")


def test_the_published_grids_load():
    """Every grid of docs/results/grids parses, names its own table, and expands to the
    paper's axes (the reproduction commands in docs/results/README.md rely on them)."""
    from pathlib import Path

    from mbkkm.experiments import expand, load_grid

    folder = Path(__file__).resolve().parents[2] / "docs" / "results" / "grids"
    files = sorted(folder.glob("*.toml"))
    if not files:
        pytest.skip("docs/results/grids is not beside the tests")
    names = set()
    for f in files:
        g = load_grid(f)
        runs = expand(g)
        assert runs and g.max_iter == 200, f
        assert set(g.taus) == {50, 100, 200, 300}, f
        assert g.name == f.stem or f.stem.startswith(g.name + "-"), f
        names.add(g.name)
        assert "--out docs/results/tables" in f.read_text(), f
    assert {"gaussian-pendigits", "knn-letter", "knn-mnist"} <= names


@pytest.mark.parametrize(
    "field, values",
    [
        ("datasets", ["blobs", "moons", "blobs"]),
        ("algorithms", ["truncated", "truncated"]),
        ("kernels", ["rbf", "rbf"]),
        ("batch_sizes", [32, 64, 32]),
        ("taus", [10, 10]),
        ("seeds", [0, 1, 0]),
    ],
)
def test_a_value_listed_twice_is_refused_by_name(field, values):
    """Before, a dataset, algorithm, batch size, tau or seed listed twice expanded to
    the same runs twice (one run id each time), all run in one invocation; now the
    grid is refused, naming the field and the value, from Python and from a table."""
    table = {"datasets": ["blobs"], "algorithms": ["truncated"], field: values}
    repeated = repr(values[-1])
    with pytest.raises(GridError, match=rf"^{field} lists {repeated} more than once; list"):
        grid_from_dict(table)
    with pytest.raises(GridError, match=rf"^{field} lists {repeated} more than once"):
        Grid(name="g", **table)
    if field == "datasets":
        with pytest.raises(GridError, match=r"^datasets lists 'blobs' more than once"):
            small_grid().with_options(datasets=["blobs", "blobs"])


def test_two_aliases_of_one_kernel_and_distinct_values_are_one_run_each():
    g = grid_from_dict(
        {"datasets": ["blobs"], "algorithms": ["truncated"], "kernels": ["gaussian", "rbf"]}
    )
    runs = expand(g.with_options(seeds=3))
    assert len({r.run_id for r in runs}) == len(runs) == 3
