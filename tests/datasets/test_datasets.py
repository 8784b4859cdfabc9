"""Tests of mbkkm.datasets: registry, search order, reading, errors, synthetic sets."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import numpy as np
import pytest
import sklearn.datasets
from sklearn.utils import Bunch

from mbkkm.datasets import (
    DATASETS,
    ENV_VAR,
    DatasetFormatError,
    DatasetNotFoundError,
    DatasetSpec,
    dataset_info,
    dataset_names,
    find_dataset_file,
    get_cache_dir,
    get_data_dirs,
    get_spec,
    list_datasets,
    load_dataset,
    make_blobs,
    make_circles,
    make_moons,
    make_shells,
    preprocess_features,
    read_dataset_file,
    write_dataset_file,
)


def _write_small(folder: Path, name: str = "pendigits", n: int = 40, seed: int = 0) -> Path:
    """A small valid dataset file for ``name`` (features as in the registry)."""
    spec = DATASETS[name]
    rng = np.random.default_rng(seed)
    if spec.x_dtype == "uint8":
        X = rng.integers(0, 256, size=(n, spec.n_features), dtype=np.uint8)
    else:
        X = rng.integers(0, 101, size=(n, spec.n_features)).astype(np.float32)
    y = np.arange(n) % spec.n_classes
    names = [str(c) for c in range(spec.n_classes)]
    return write_dataset_file(folder / spec.filename, X, y, names)


# ---------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------


def test_registry_holds_the_papers_numbers():
    assert dataset_names() == ["pendigits", "har", "mnist", "letter"]
    expected = {
        # name: (openml, n, d, C, preprocessing, sigma, knn, heat)
        "pendigits": ("pendigits", 10992, 16, 10, "standardize", math.sqrt(5), 1000, 500),
        "har": ("har", 10299, 561, 6, "none", 4.25, 2000, 500),
        "mnist": ("mnist_784", 70000, 784, 10, "divide_255", 5.8301, 2000, 200),
        "letter": ("letter", 20000, 16, 26, "standardize", 3.0, 1000, 500),
    }
    for name, (openml, n, d, c, prep, sigma, knn, heat) in expected.items():
        spec = DATASETS[name]
        assert isinstance(spec, DatasetSpec)
        assert (spec.openml_name, spec.openml_version) == (openml, 1)
        assert spec.shape == (n, d)
        assert spec.n_classes == c
        assert spec.preprocessing == prep
        assert spec.sigma == pytest.approx(sigma)
        assert spec.rbf_gamma == pytest.approx(1 / (2 * sigma**2))
        assert (spec.knn_neighbors, spec.heat_neighbors) == (knn, heat)
        assert spec.filename == f"{name}.npz"
    assert "not available offline" in DATASETS["har"].offline_note


def test_mbkkm_datasets_says_nothing_of_the_projects_own_folders(tmp_path):
    # The note a user reads for HAR: where to get it, not how this project's
    # machines are laid out.
    click_testing = pytest.importorskip("click.testing")
    from mbkkm.cli import main

    result = click_testing.CliRunner().invoke(main, ["datasets", "--data-home", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "note: HAR is not available offline: mbkkm ships no copy." in result.output
    assert "shared" not in result.output


def test_get_spec_is_case_insensitive_and_rejects_unknown_names():
    assert get_spec(" MNIST ") is DATASETS["mnist"]
    with pytest.raises(ValueError, match=r"Unknown dataset 'cifar'.*pendigits, har, mnist, letter"):
        get_spec("cifar")
    with pytest.raises(ValueError, match="known datasets"):
        load_dataset("cifar")
    with pytest.raises(TypeError, match="name must be a str"):
        get_spec(3)


def test_spec_rejects_unknown_preprocessing():
    with pytest.raises(ValueError, match="preprocessing must be one of"):
        DatasetSpec("x", "x", 1, 1, 1, 1, "zscore", 1.0, 1, 1)


# ---------------------------------------------------------------------------
# Loading from a folder
# ---------------------------------------------------------------------------


def test_load_from_data_home(tmp_path):
    path = _write_small(tmp_path)
    raw_X, raw_y = load_dataset("pendigits", data_home=tmp_path, preprocess=False)
    stored = np.load(path)
    np.testing.assert_array_equal(raw_X, stored["X"])
    np.testing.assert_array_equal(raw_y, stored["y"])
    assert raw_y.dtype == np.int64

    X, y = load_dataset("pendigits", data_home=str(tmp_path))
    assert X.dtype == np.float32 and X.shape == (40, 16)
    np.testing.assert_allclose(X.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(X.std(axis=0), 1, atol=1e-5)
    np.testing.assert_array_equal(y, raw_y)


def test_load_bunch(tmp_path):
    _write_small(tmp_path, "letter")
    bunch = load_dataset("letter", data_home=tmp_path, return_X_y=False, dtype=np.float64)
    assert isinstance(bunch, Bunch)
    assert bunch.data.dtype == np.float64 and bunch.data.shape == (40, 16)
    assert bunch.target.shape == (40,)
    assert len(bunch.target_names) == 26
    assert bunch.split is None
    assert bunch.spec is DATASETS["letter"]
    assert bunch.preprocessing == "standardize"
    assert Path(bunch.filename) == tmp_path / "letter.npz"
    assert "Letter Recognition" in bunch.DESCR


def test_preprocess_options(tmp_path):
    _write_small(tmp_path, "mnist")
    raw, _ = load_dataset("mnist", data_home=tmp_path, preprocess=False, dtype=None)
    assert raw.dtype == np.uint8
    raw32, _ = load_dataset("mnist", data_home=tmp_path, preprocess=False)
    assert raw32.dtype == np.float32 and raw32.max() > 1
    scaled, _ = load_dataset("mnist", data_home=tmp_path)
    np.testing.assert_allclose(scaled, raw.astype(np.float64) / 255, rtol=1e-6)
    std, _ = load_dataset("mnist", data_home=tmp_path, preprocess="standardize", dtype=None)
    assert std.dtype == np.float64
    with pytest.raises(ValueError, match="preprocess must be"):
        load_dataset("mnist", data_home=tmp_path, preprocess="zscore")
    with pytest.raises(TypeError, match="preprocess must be"):
        load_dataset("mnist", data_home=tmp_path, preprocess=1.5)
    with pytest.raises(TypeError, match="floating dtype"):
        load_dataset("mnist", data_home=tmp_path, dtype=np.int32)


def test_preprocess_features():
    X = np.array([[0, 255], [255, 255], [255, 0]], dtype=np.uint8)
    out = preprocess_features(X, "divide_255")
    assert out.dtype == np.float32 and out.max() == 1.0 and out.min() == 0.0
    # constant features are centred, not divided by zero
    Z = preprocess_features(np.array([[1.0, 2.0], [1.0, 4.0]]), "standardize", dtype=None)
    np.testing.assert_array_equal(Z, [[0.0, -1.0], [0.0, 1.0]])
    assert preprocess_features(X, "none", dtype=None) is X
    with pytest.raises(ValueError, match="method must be one of"):
        preprocess_features(X, "minmax")


# ---------------------------------------------------------------------------
# The shared folder of the paper's datasets
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "shape", "n_classes"),
    [("pendigits", (10992, 16), 10), ("letter", (20000, 16), 26)],
)
def test_shared_standardised(shared_datasets, name, shape, n_classes):
    X_raw, y = load_dataset(name, data_home=shared_datasets, preprocess=False, dtype=None)
    assert X_raw.shape == shape and X_raw.dtype == np.float32
    assert y.dtype == np.int64 and set(np.unique(y)) == set(range(n_classes))
    X, y2 = load_dataset(name, data_home=shared_datasets)
    assert X.shape == shape and X.dtype == np.float32
    np.testing.assert_array_equal(y, y2)
    np.testing.assert_allclose(X.mean(axis=0), 0, atol=1e-4)
    np.testing.assert_allclose(X.std(axis=0, dtype=np.float64), 1, atol=1e-4)


def test_shared_mnist(shared_datasets):
    bunch = load_dataset("mnist", data_home=shared_datasets, return_X_y=False)
    X, y = bunch.data, bunch.target
    assert X.shape == (70000, 784) and X.dtype == np.float32
    assert y.dtype == np.int64 and set(np.unique(y)) == set(range(10))
    assert X.min() == 0.0 and X.max() == 1.0
    # the well-known pixel mean of the train part (0.1307)
    assert X[bunch.split == 0].mean() == pytest.approx(0.1307, abs=1e-3)
    raw, _ = load_dataset("mnist", data_home=shared_datasets, preprocess=False, dtype=None)
    assert raw.dtype == np.uint8 and raw.max() == 255


def test_shared_via_environment_variable(shared_datasets, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(shared_datasets))
    info = dataset_info("pendigits")
    assert info.available and info.path == shared_datasets / "pendigits.npz"
    X, _ = load_dataset("pendigits", download=False)
    assert X.shape == (10992, 16)


def test_list_datasets(shared_datasets):
    infos = {info.name: info for info in list_datasets(data_home=shared_datasets)}
    assert list(infos) == dataset_names()
    for name in ("pendigits", "letter", "mnist"):
        assert infos[name].available
        assert infos[name].as_dict()["path"] == str(shared_datasets / f"{name}.npz")
    har = infos["har"]
    assert not har.available and har.path is None
    assert "not available offline" in har.as_dict()["note"]
    assert "not found locally" in str(har)
    assert har.searched[0] == shared_datasets


# ---------------------------------------------------------------------------
# Search order
# ---------------------------------------------------------------------------


def test_search_order(tmp_path, monkeypatch):
    home, env, cache_root = tmp_path / "home", tmp_path / "env", tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_root))
    cache = cache_root / "mbkkm"
    assert get_cache_dir() == cache
    for folder, n in ((home, 10), (env, 20), (cache, 30)):
        _write_small(folder, n=n)
    monkeypatch.setenv(ENV_VAR, str(env))
    assert get_data_dirs(home) == [home, env, cache]

    def n_rows(**kwargs):
        return load_dataset("pendigits", download=False, **kwargs)[0].shape[0]

    assert n_rows(data_home=home) == 10  # data_home beats the environment variable
    assert n_rows() == 20  # the environment variable beats the cache
    monkeypatch.delenv(ENV_VAR)
    assert n_rows() == 30  # the cache
    assert n_rows(data_home=tmp_path / "empty") == 30  # a folder without the file is skipped
    assert find_dataset_file("pendigits", home) == home / "pendigits.npz"


def test_environment_variable_may_list_several_folders(tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    _write_small(second, n=12)
    monkeypatch.setenv(ENV_VAR, os.pathsep.join([str(first), "", str(second)]))
    assert get_data_dirs()[:2] == [first, second]
    assert load_dataset("pendigits", download=False)[0].shape == (12, 16)


def test_cache_dir_without_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert get_cache_dir() == tmp_path / ".cache" / "mbkkm"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # ignored, as XDG says
    assert get_cache_dir() == tmp_path / ".cache" / "mbkkm"


def test_bad_data_home():
    with pytest.raises(TypeError, match="data_home must be"):
        load_dataset("pendigits", data_home=3)
    with pytest.raises(ValueError, match="data_home must name a folder"):
        load_dataset("pendigits", data_home="  ")


# ---------------------------------------------------------------------------
# Missing datasets and downloading
# ---------------------------------------------------------------------------


def test_missing_without_download(tmp_path):
    with pytest.raises(DatasetNotFoundError) as excinfo:
        load_dataset("letter", data_home=tmp_path, download=False)
    assert isinstance(excinfo.value, FileNotFoundError)
    message = str(excinfo.value)
    assert "letter.npz" in message
    assert str(tmp_path) in message and str(get_cache_dir()) in message
    assert "download=False" in message
    assert ENV_VAR in message and "data_home" in message


def test_missing_with_network_down(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="failed") as excinfo:
        load_dataset("pendigits", data_home=tmp_path)
    assert isinstance(excinfo.value.__cause__, OSError)
    assert "network disabled" in str(excinfo.value)
    assert not (get_cache_dir() / "pendigits.npz").exists()


def test_har_missing_says_it_is_not_available_offline(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="HAR is not available offline"):
        load_dataset("har", data_home=tmp_path)
    with pytest.raises(DatasetNotFoundError, match="'har', version 1"):
        load_dataset("har", download=False)


def test_download_converts_and_caches(monkeypatch):
    calls = []
    rng = np.random.default_rng(0)
    labels = np.array([str(c) for c in (rng.permutation(30) % 10)], dtype=object)
    X = rng.integers(0, 101, size=(30, 16)).astype(np.float64)

    def fake_fetch_openml(name, *, version, as_frame, **kwargs):
        calls.append((name, version, as_frame))
        return Bunch(data=X, target=labels)

    monkeypatch.setattr(sklearn.datasets, "fetch_openml", fake_fetch_openml)
    X_raw, y = load_dataset("pendigits", preprocess=False, dtype=None)
    assert calls == [("pendigits", 1, False)]
    assert X_raw.dtype == np.float32 and y.dtype == np.int64
    np.testing.assert_array_equal(X_raw, X)
    np.testing.assert_array_equal(y, labels.astype(int))
    stored = read_dataset_file(get_cache_dir() / "pendigits.npz")
    assert stored["class_names"].tolist() == [str(c) for c in range(10)]
    # the second call reads the cache
    load_dataset("pendigits")
    assert len(calls) == 1
    assert dataset_info("pendigits").path == get_cache_dir() / "pendigits.npz"


def test_download_orders_numeric_labels_as_numbers(monkeypatch):
    # mnist's 10 classes, named 1..10: "10" sorts before "2" as a string
    labels = np.array(["10", "2", "1", "2", "10", "3", "4", "5", "6", "7", "8", "9"], dtype=object)
    pixels = np.arange(12 * 784).reshape(12, 784) % 256

    def fake_fetch_openml(name, **kwargs):
        return Bunch(data=pixels.astype(np.float64), target=labels)

    monkeypatch.setattr(sklearn.datasets, "fetch_openml", fake_fetch_openml)
    bunch = load_dataset("mnist", preprocess=False, dtype=None, return_X_y=False)
    assert bunch.data.dtype == np.uint8
    assert bunch.target_names.tolist() == [str(c) for c in range(1, 11)]
    assert bunch.target.tolist() == [9, 1, 0, 1, 9, *range(2, 9)]


def test_download_of_another_class_count_is_refused(monkeypatch):
    """A download whose labels hold other than the dataset's class count is refused
    before it is cached (the file written would be refused by every read)."""
    labels = np.array([str(c % 3) for c in range(12)], dtype=object)
    pixels = np.arange(12 * 784).reshape(12, 784) % 256

    def fake_fetch_openml(name, **kwargs):
        return Bunch(data=pixels.astype(np.float64), target=labels)

    monkeypatch.setattr(sklearn.datasets, "fetch_openml", fake_fetch_openml)
    with pytest.raises(
        DatasetNotFoundError, match="has 3 classes, expected 10 for dataset 'mnist'"
    ):
        load_dataset("mnist", preprocess=False)
    assert not (get_cache_dir() / "mnist.npz").exists()


# ---------------------------------------------------------------------------
# Unreadable files
# ---------------------------------------------------------------------------


def test_corrupt_file(tmp_path):
    path = tmp_path / "pendigits.npz"
    path.write_bytes(b"this is not a zip archive")
    # said as it is (numpy's own message blamed pickled data)
    with pytest.raises(DatasetFormatError, match=r"it is not an \.npz archive") as excinfo:
        load_dataset("pendigits", data_home=tmp_path)
    assert str(path) in str(excinfo.value) and "pickle" not in str(excinfo.value)
    assert isinstance(excinfo.value, ValueError)


def test_a_single_array_under_an_npz_name(tmp_path):
    # np.load returns an array, not an archive: a clear error, not a TypeError
    path = tmp_path / "pendigits.npz"
    with open(path, "wb") as f:
        np.save(f, np.zeros((3, 16)))
    with pytest.raises(DatasetFormatError, match="single array") as excinfo:
        load_dataset("pendigits", data_home=tmp_path)
    assert str(path) in str(excinfo.value)


def test_truncated_file(tmp_path):
    path = _write_small(tmp_path, n=200)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetFormatError, match=re.escape(str(path))):
        load_dataset("pendigits", data_home=tmp_path)


@pytest.mark.parametrize(
    ("arrays", "match"),
    [
        ({"X": np.zeros((4, 16))}, r"missing key\(s\) \['y'\]"),
        ({"X": np.zeros((4, 3)), "y": np.zeros(4, dtype=int)}, "has 3 features"),
        ({"X": np.zeros(4), "y": np.zeros(4, dtype=int)}, "2-dimensional"),
        ({"X": np.zeros((4, 16)), "y": np.zeros(3, dtype=int)}, "'y' must have shape"),
        ({"X": np.zeros((4, 16)), "y": np.zeros(4)}, "integer labels"),
        ({"X": np.zeros((4, 16)), "y": np.array([0, 1, 2, 10])}, "must lie in 0..9"),
        (
            {"X": np.zeros((4, 16)), "y": np.zeros(4, dtype=int), "split": np.zeros(2)},
            "'split' must have shape",
        ),
    ],
)
def test_invalid_content(tmp_path, arrays, match):
    path = tmp_path / "pendigits.npz"
    np.savez(path, **arrays)
    with pytest.raises(DatasetFormatError, match=match) as excinfo:
        load_dataset("pendigits", data_home=tmp_path)
    assert str(path) in str(excinfo.value)


def test_class_names_of_another_class_count_are_refused(tmp_path):
    """Before, a pendigits file whose 'class_names' listed 12 classes (the dataset
    has 10) was accepted, and the Bunch said 12 classes, though the docstring of
    read_dataset_file says the class count is checked against the dataset's."""
    path = tmp_path / "pendigits.npz"
    names = [str(c) for c in range(12)]
    np.savez(path, X=np.zeros((4, 16)), y=np.array([0, 1, 2, 11]), class_names=names)
    with pytest.raises(
        DatasetFormatError, match="'class_names' holds 12 classes, dataset 'pendigits' has 10"
    ) as excinfo:
        load_dataset("pendigits", data_home=tmp_path)
    assert str(path) in str(excinfo.value)
    assert read_dataset_file(path)["class_names"].tolist() == names  # no spec: no count


def test_object_arrays_are_refused(tmp_path):
    path = tmp_path / "pendigits.npz"
    np.savez(path, X=np.zeros((2, 16)), y=np.array([0, None], dtype=object))
    with pytest.raises(DatasetFormatError, match=r"pendigits\.npz"):
        load_dataset("pendigits", data_home=tmp_path)


def test_write_dataset_file_round_trip(tmp_path):
    X = np.arange(12, dtype=np.float32).reshape(4, 3)
    path = write_dataset_file(
        tmp_path / "sub" / "toy.npz", X, [0, 1, 1, 0], ["a", "b"], [0, 0, 1, 1]
    )
    arrays = read_dataset_file(path)
    np.testing.assert_array_equal(arrays["X"], X)
    assert arrays["y"].dtype == np.int64
    assert arrays["class_names"].tolist() == ["a", "b"]
    assert arrays["split"].dtype == np.int8
    assert [p.name for p in path.parent.iterdir()] == ["toy.npz"]  # no temporary left
    with pytest.raises(ValueError, match="y must have shape"):
        write_dataset_file(tmp_path / "bad.npz", X, [0, 1])


# ---------------------------------------------------------------------------
# Synthetic sets
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "kwargs", "n_features", "n_labels"),
    [
        (make_circles, {}, 2, 2),
        (make_moons, {}, 2, 2),
        (make_blobs, {"n_features": 5, "centers": 4}, 5, 4),
        (make_shells, {"n_features": 6, "n_shells": 4}, 6, 4),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_synthetic_shapes_and_determinism(make, kwargs, n_features, n_labels, dtype):
    X, y = make(301, random_state=7, dtype=dtype, **kwargs)
    assert X.shape == (301, n_features) and X.dtype == dtype
    assert y.shape == (301,) and y.dtype == np.int64
    assert set(np.unique(y)) == set(range(n_labels))
    X2, y2 = make(301, random_state=7, dtype=dtype, **kwargs)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)
    X3, _ = make(301, random_state=8, dtype=dtype, **kwargs)
    assert not np.array_equal(X, X3)


def test_shells_radii_are_separated():
    X, y = make_shells(3000, 16, n_shells=3, noise=0.05, random_state=0, chunk_size=700)
    radius = np.linalg.norm(X.astype(np.float64), axis=1)
    assert np.bincount(y).tolist() == [1000, 1000, 1000]
    for k in range(3):
        r = radius[y == k]
        assert abs(r.mean() - (k + 1)) < 0.01
        if k:
            assert r.min() > radius[y == k - 1].max()
    # plain k-means would see three shells sharing one centre
    centres = np.array([X[y == k].mean(axis=0) for k in range(3)])
    assert np.abs(centres).max() < 0.2


def test_shells_custom_radii_and_no_noise():
    X, y = make_shells(500, 3, n_shells=2, noise=None, radii=[0.5, 4.0], random_state=1)
    radius = np.linalg.norm(X, axis=1)
    np.testing.assert_allclose(radius, np.where(y == 0, 0.5, 4.0), rtol=1e-5)


def test_shells_accept_generators():
    a = make_shells(50, 4, random_state=np.random.default_rng(3))
    b = make_shells(50, 4, random_state=np.random.default_rng(3))
    np.testing.assert_array_equal(a[0], b[0])
    X, _ = make_shells(50, 4, random_state=np.random.RandomState(0))
    assert X.shape == (50, 4)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_samples": 0}, ValueError, "n_samples must be >= 1"),
        ({"n_samples": 10.0}, TypeError, "n_samples must be an int"),
        ({"n_features": 0}, ValueError, "n_features must be >= 1"),
        ({"n_shells": 0}, ValueError, "n_shells must be >= 1"),
        ({"noise": -1.0}, ValueError, "noise must be"),
        ({"radii": [1.0, 2.0]}, ValueError, r"radii must have shape \(3,\)"),
        ({"radii": [1.0, 0.0, 2.0]}, ValueError, "radii must be positive"),
        ({"dtype": np.int64}, TypeError, "floating numpy dtype"),
        ({"dtype": np.float16}, TypeError, "np.float32 or np.float64"),
        ({"chunk_size": 0}, ValueError, "chunk_size must be >= 1"),
        ({"random_state": "seed"}, TypeError, "random_state must be"),
    ],
)
def test_shells_validation(kwargs, error, match):
    params = {"n_samples": 10, **kwargs}
    with pytest.raises(error, match=match):
        make_shells(**params)


def test_circles_validation():
    with pytest.raises(ValueError, match="factor must lie in"):
        make_circles(10, factor=1.5)
    with pytest.raises(TypeError, match="floating numpy dtype"):
        make_moons(10, dtype=np.int32)


def test_shells_large_chunked():
    X, y = make_shells(2_000_000, 16, random_state=0)
    assert X.shape == (2_000_000, 16) and X.dtype == np.float32
    assert X.flags.c_contiguous
    assert np.abs(np.bincount(y) - 2_000_000 / 3).max() <= 1
