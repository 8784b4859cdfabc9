"""Model files (issue 40): save_model / load_model, the files they refuse and what
loading imports."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from mbkkm import KernelKMeans, MiniBatchKernelKMeans, MiniBatchKMeans, load_model, save_model

pytest.importorskip("skops")

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture(scope="module")
def X():
    return np.random.default_rng(0).normal(size=(120, 3))


@pytest.fixture(scope="module")
def fitted(X):
    return MiniBatchKernelKMeans(
        n_clusters=3, batch_size=64, max_iter=5, gamma=0.5, random_state=0
    ).fit(X)


@pytest.mark.parametrize(
    "make",
    [
        lambda: MiniBatchKernelKMeans(
            n_clusters=3, batch_size=64, max_iter=5, gamma=0.5, random_state=0
        ),
        lambda: KernelKMeans(n_clusters=3, gamma=0.5, max_iter=5, random_state=0),
        lambda: MiniBatchKMeans(n_clusters=3, batch_size=64, max_iter=5, random_state=0),
    ],
    ids=["MiniBatchKernelKMeans", "KernelKMeans", "MiniBatchKMeans"],
)
def test_save_and_load_every_estimator(make, X, tmp_path):
    est = make().fit(X)
    path = tmp_path / "m.skops"
    save_model(est, path)
    got = load_model(path)
    assert type(got) is type(est)
    np.testing.assert_array_equal(got.predict(X), est.predict(X))
    if __import__("importlib").util.find_spec("click") is not None:
        from mbkkm.cli import load_model as cli_load_model  # the documented name

        assert type(cli_load_model(str(path))) is type(est)


def test_save_model_refuses_what_it_cannot_save(fitted, tmp_path):
    from sklearn.cluster import KMeans

    with pytest.raises(
        TypeError,
        match=r"estimator must be one of mbkkm's estimators.*"
        r"sklearn\.cluster\._kmeans\.KMeans",
    ):
        save_model(KMeans(n_clusters=2), tmp_path / "k.skops")
    with pytest.raises(NotFittedError):
        save_model(MiniBatchKMeans(), tmp_path / "u.skops")
    with pytest.raises(TypeError, match=r"path must be a str or os\.PathLike, got int"):
        save_model(fitted, 3)
    # a callable kernel: load_model would refuse the file (it trusts mbkkm's types only)
    from sklearn.metrics.pairwise import rbf_kernel

    X = np.random.default_rng(0).normal(size=(60, 2))
    for kernel in (rbf_kernel, lambda A, B: rbf_kernel(A, B, gamma=0.5)):
        est = KernelKMeans(2, kernel=kernel, random_state=0).fit(X)
        with pytest.raises(ValueError, match=r"kernel is a callable .*pickle or joblib"):
            save_model(est, tmp_path / "c.skops")
    assert list(tmp_path.iterdir()) == []

    # a callable init (scikit-learn's signature): the same, with a way out
    def first_rows(X, k, random_state=None):
        return X[:k]

    for cls in (KernelKMeans, MiniBatchKMeans):
        est = cls(2, init=first_rows, random_state=0).fit(X)
        with pytest.raises(ValueError, match=r"init is a callable \(first_rows\).*set_params"):
            save_model(est, tmp_path / "i.skops")
        save_model(est.set_params(init="k-means++"), tmp_path / "i.skops")
        np.testing.assert_array_equal(load_model(tmp_path / "i.skops").predict(X), est.predict(X))
        (tmp_path / "i.skops").unlink()
    # fitted with torch: the format holds numpy arrays, not tensors
    torch = pytest.importorskip("torch")
    Xs = np.random.default_rng(0).normal(size=(60, 2))
    for data, device in ((torch.from_numpy(Xs), None), (Xs, "torch")):
        est = MiniBatchKernelKMeans(2, device=device, max_iter=3, random_state=0).fit(data)
        with pytest.raises(ValueError, match="fitted with torch"):
            save_model(est, tmp_path / "t.skops")
    assert list(tmp_path.iterdir()) == []


def _pickle(est, path, protocol):
    with open(path, "wb") as fh:
        pickle.dump(est, fh, protocol=protocol)


@pytest.mark.parametrize(
    ("name", "write", "match"),
    [
        (
            "m.pkl",
            lambda est, p: _pickle(est, p, 5),
            r"is a pickle file of mbkkm\.cluster\._minibatch_kernel\.MiniBatchKernelKMeans",
        ),
        (
            "m2.pkl",
            lambda est, p: _pickle(est, p, 2),
            r"is a pickle file of mbkkm\.cluster\._minibatch_kernel\.MiniBatchKernelKMeans",
        ),
        (
            "m0.pkl",
            lambda est, p: _pickle(est, p, 0),
            r"is a pickle file of mbkkm\.cluster\._minibatch_kernel\.MiniBatchKernelKMeans",
        ),
        (
            "m.joblib",
            lambda est, p: __import__("joblib").dump(est, p),
            r"is a joblib file \(joblib\.dump\) of mbkkm\.cluster\._minibatch_kernel\.",
        ),
        (
            "mz.joblib",
            lambda est, p: __import__("joblib").dump(est, p, compress=3),
            r"is a joblib file \(joblib\.dump\) of .*, zlib-compressed",
        ),
        (
            "mg.joblib",
            lambda est, p: __import__("joblib").dump(est, p, compress=("gzip", 3)),
            r"is a joblib file \(joblib\.dump\) of .*, gzip-compressed",
        ),
    ],
)
def test_pickle_and_joblib_files_are_refused(fitted, tmp_path, name, write, match):
    if "joblib" in name:
        pytest.importorskip("joblib")
    path = tmp_path / name
    write(fitted, path)
    with pytest.raises(ValueError, match=match) as info:
        load_model(path)
    message = str(info.value)
    assert "loading a pickle can run any code" in message
    assert "mbkkm.save_model(estimator, path)" in message and "--model-out" in message


def test_foreign_skops_files_are_refused(X, fitted, tmp_path):
    import skops.io as sio
    from sklearn.cluster import KMeans

    path = tmp_path / "kmeans.skops"
    sio.dump(KMeans(n_clusters=2, n_init=1, random_state=0).fit(X), path)
    with pytest.raises(
        ValueError,
        match=r"is a skops file holding a sklearn\.cluster\._kmeans"
        r"\.KMeans, not one of mbkkm's estimators.*"
        r"load it with skops\.io\.load",
    ) as info:
        load_model(path)
    assert "mbkkm.save_model(estimator, path)" in str(info.value)
    path = tmp_path / "list.skops"
    sio.dump([fitted], path)  # an mbkkm estimator inside, but not the top-level object
    with pytest.raises(ValueError, match="is a skops file holding a list, not one of mbkkm's"):
        load_model(path)


def test_a_checkpoint_is_not_a_model(X, tmp_path):
    ck = tmp_path / "fit.ckpt"
    MiniBatchKernelKMeans(n_clusters=3, batch_size=64, max_iter=4, gamma=0.5, random_state=0).fit(
        X, checkpoint=ck, checkpoint_every=2
    )
    with pytest.raises(ValueError, match="is an mbkkm fit checkpoint"):
        load_model(ck)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", "is empty, not a model file"),
        (b"x,y\n1,2\n", r"is text: a data file\? 'mbkkm predict' takes the MODEL first"),
        (
            b"\x00\x01\x02\x03garbage",
            r"is not a model file \(a skops zip archive\) \(it starts "
            r"with b'\\x00\\x01",
        ),
    ],
)
def test_files_that_are_not_zip_archives(tmp_path, content, match):
    path = tmp_path / "m.skops"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=match):
        load_model(path)


def test_damaged_zip_files(fitted, tmp_path):
    path = tmp_path / "m.skops"
    save_model(fitted, path)
    data = path.read_bytes()
    cut = tmp_path / "cut.skops"
    cut.write_bytes(data[: len(data) // 2])  # a copy interrupted half way
    with pytest.raises(ValueError, match="is a damaged or truncated zip archive"):
        load_model(cut)
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("a.txt", "x")
    with pytest.raises(ValueError, match="a zip archive but not a skops file"):
        load_model(other)
    broken = tmp_path / "broken.skops"
    with zipfile.ZipFile(broken, "w") as z:
        z.writestr("schema.json", "{not json")
    with pytest.raises(ValueError, match=r"its schema\.json is not JSON"):
        load_model(broken)


def test_load_model_argument_checks(tmp_path):
    with pytest.raises(TypeError, match=r"path must be a str or os\.PathLike, got NoneType"):
        load_model(None)
    with pytest.raises(FileNotFoundError):
        load_model(tmp_path / "missing.skops")


def test_predict_says_what_the_model_file_is(fitted, X, tmp_path):
    pytest.importorskip("click")
    from click.testing import CliRunner

    from mbkkm.cli import main

    data = tmp_path / "d.npy"
    np.save(data, X)
    path = tmp_path / "m.pkl"
    _pickle(fitted, path, 5)
    r = CliRunner().invoke(main, ["predict", str(path), str(data)])
    assert r.exit_code == 1
    assert "Error: cannot load the model: " in r.output
    assert "is a pickle file of mbkkm.cluster._minibatch_kernel" in r.output
    assert "Traceback" not in r.output


# ------------------------------------------------------------------ what is imported
def _python(code, env=None):
    env = {**os.environ, **(env or {}), "PYTHONPATH": str(SRC)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )


def test_loading_a_model_imports_neither_torch_nor_dask_nor_pytest(fitted, X, tmp_path):
    # pytest is installed wherever this runs, so the check can fail
    path = tmp_path / "m.skops"
    save_model(fitted, path)
    np.save(tmp_path / "x.npy", X)
    r = _python(
        "import sys, numpy as np, mbkkm\n"
        f"est = mbkkm.load_model({str(path)!r})\n"
        f"labels = est.predict(np.load({str(tmp_path / 'x.npy')!r}))\n"
        "print(' '.join(m for m in ('torch', 'dask', 'distributed', 'pytest') "
        "if m in sys.modules) or 'none')\n"
        "print(type(est).__name__, labels.shape[0])\n"
        # what the import kept out comes back whole when asked for later
        "import pytest\n"
        "from sklearn.utils._testing import skip_if_32bit\n"
        "print('testing ok')\n"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == [
        "none",
        f"MiniBatchKernelKMeans {X.shape[0]}",
        "testing ok",
    ], r.stdout


@pytest.mark.slow
def test_skops_trusts_the_same_scikit_learn_types_when_imported_by_mbkkm():
    show = "print(len(skops.io._trusted_types.SKLEARN_ESTIMATOR_TYPE_NAMES))"
    ours = _python(
        "from mbkkm._files._skops import import_skops_io\n"
        "import_skops_io(); import skops.io, sys\n" + show
    )
    plain = _python("import skops.io\n" + show)
    assert ours.returncode == plain.returncode == 0, ours.stderr + plain.stderr
    assert int(ours.stdout) == int(plain.stdout) > 100
