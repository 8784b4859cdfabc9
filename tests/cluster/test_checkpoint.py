"""Checkpointed fits (``fit(X, checkpoint=..., checkpoint_every=...)``): a fit
interrupted at any iteration and resumed from its file ends with exactly the model
of an uninterrupted fit, on numpy and on torch CPU tensors (docs/reliability.md).

The interruption here is an exception raised between two iterations (the state
of the process is then lost, only the file remains); tests/test_cli_kill.py kills
a checkpointed command line fit with SIGKILL.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from mbkkm import MiniBatchKernelKMeans
from mbkkm.cluster import _checkpoint

ARRAYS = (
    "labels_",
    "support_vectors_",
    "dual_coef_",
    "support_labels_",
    "n_support_",
    "center_norms_",
    "batch_objective_",
)


class Killed(Exception):
    """Stands for the end of the process between two iterations."""


def _kill_at(monkeypatch, n_iter):
    """Make the next checkpointed fits die once they have run ``n_iter`` iterations
    (before the save that iteration would make)."""
    save = _checkpoint.FitCheckpoint._on_advance

    def on_advance(self, fs):
        if fs.n_iter >= n_iter and not fs.done:
            raise Killed(fs.n_iter)
        save(self, fs)

    monkeypatch.setattr(_checkpoint.FitCheckpoint, "_on_advance", on_advance)


def _data(n=900, d=4, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)) + rng.integers(0, 4, (n, 1)) * 3.0


def _as_numpy(a):
    if hasattr(a, "detach"):
        return a.detach().cpu().numpy()
    return a.toarray() if sp.issparse(a) else np.asarray(a)


def _assert_same_model(got, ref, rng=True):
    """The same model; with ``rng`` the generator in the same state too (it has drawn
    the same batches: the plan is drawn as the iterations reach it, so a finished
    checkpoint reused without iterating draws none)."""
    for name in ARRAYS:
        a, b = _as_numpy(getattr(got, name)), _as_numpy(getattr(ref, name))
        assert a.shape == b.shape and a.dtype == b.dtype, name
        assert np.array_equal(a, b), name
    assert got.n_iter_ == ref.n_iter_ and got.n_steps_ == ref.n_steps_
    assert got.inertia_ == ref.inertia_
    assert got.gamma_ == ref.gamma_
    assert repr(got.kernel_) == repr(ref.kernel_)
    if rng:
        ref_rng, got_rng = ref._random_state.get_state(), got._random_state.get_state()
        assert np.array_equal(ref_rng[1], got_rng[1]) and ref_rng[2:] == got_rng[2:]


def _resume_through_kills(monkeypatch, make, X, kills, every, **fit_kw):
    """Fit with the file ``ck``, killed at each of ``kills``, then to the end."""
    path = fit_kw.pop("path")
    for n_iter in kills:
        with monkeypatch.context() as m:
            _kill_at(m, n_iter)
            with pytest.raises(Killed):
                make().fit(X, checkpoint=path, checkpoint_every=every, **fit_kw)
        assert path.exists()
    return make().fit(X, checkpoint=path, checkpoint_every=every, **fit_kw)


CASES = {
    # default gamma: the width is chosen on a sample (and the fit starts from its partition)
    "auto-gamma": dict(),
    "classic-n_init": dict(gamma=0.1, learning_rate="classic", n_init=3, init="random"),
    "tol": dict(gamma=0.1, tol=0.015, renormalize=False),
    "float32-laplacian": dict(kernel="laplacian", gamma=0.2),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_resumed_numpy_fit_equals_uninterrupted(case, tmp_path, monkeypatch):
    X = _data()
    if case == "float32-laplacian":
        X = X.astype(np.float32)
    params = dict(n_clusters=4, batch_size=64, tau=40, max_iter=30, random_state=3, **CASES[case])

    def make():
        return MiniBatchKernelKMeans(**params)

    ref = make().fit(X)
    path = tmp_path / "fit.ckpt"
    got = _resume_through_kills(monkeypatch, make, X, kills=(0, 4, 5, 11), every=5, path=path)
    _assert_same_model(got, ref)
    if case == "auto-gamma":  # the selection is the one chosen before the kills
        sel, ref_sel = got.gamma_selection_, ref.gamma_selection_
        assert sel.gamma == ref_sel.gamma
        for name in ("candidates", "scores", "sample_indices", "sample_labels"):
            assert np.array_equal(getattr(sel, name), getattr(ref_sel, name)), name
    if case == "tol":  # early stopping met its rule before max_iter, and resumed to it
        assert ref.n_iter_ < 30


def test_interrupted_fit_with_a_generator_seed_resumes_in_process(tmp_path, monkeypatch):
    """The docs: run again after a KeyboardInterrupt with the same file, parameters and
    data, and the fit resumes. With ``random_state`` a RandomState the interrupted fit
    had drawn from it, so the same estimator's rerun was refused ("params.random_state
    ... there, ... here"; a user review). A failed fit now puts the generator back."""
    X = _data()
    rs = np.random.RandomState(0)
    est = MiniBatchKernelKMeans(4, batch_size=64, tau=40, max_iter=30, random_state=rs)
    path = tmp_path / "fit.ckpt"
    with monkeypatch.context() as m:
        _kill_at(m, 12)
        with pytest.raises(Killed):
            est.fit(X, checkpoint=path, checkpoint_every=5)
    assert np.array_equal(rs.get_state()[1], np.random.RandomState(0).get_state()[1])
    got = est.fit(X, checkpoint=path, checkpoint_every=5)
    ref = MiniBatchKernelKMeans(
        4, batch_size=64, tau=40, max_iter=30, random_state=np.random.RandomState(0)
    ).fit(X)
    _assert_same_model(got, ref, rng=False)


def test_checkpointed_fit_equals_plain_fit_weights_sparse_precomputed(tmp_path, monkeypatch):
    X = _data(n=600)
    w = np.random.default_rng(1).uniform(0, 2, X.shape[0])
    kw = dict(n_clusters=3, batch_size=50, tau=30, max_iter=20, random_state=0, gamma=0.2)
    for name, data, extra in (
        ("weights", X, {"sample_weight": w}),
        ("sparse", sp.csr_matrix(np.where(X > 1, X, 0.0)), {}),
        ("precomputed", np.exp(-0.2 * ((X[:, None] - X[None]) ** 2).sum(-1)), {}),
    ):
        params = dict(kw, kernel="precomputed", gamma=None) if name == "precomputed" else kw

        def make(params=params):
            return MiniBatchKernelKMeans(**params)

        ref = make().fit(data, **extra)
        got = _resume_through_kills(
            monkeypatch, make, data, kills=(3, 11), every=4, path=tmp_path / f"{name}.ckpt", **extra
        )
        _assert_same_model(got, ref)


def test_resume_runs_neither_the_width_selection_nor_the_init(tmp_path, monkeypatch):
    X = _data()
    path = tmp_path / "fit.ckpt"

    def make():
        return MiniBatchKernelKMeans(
            n_clusters=4, batch_size=64, tau=40, max_iter=20, random_state=0
        )

    ref = make().fit(X)
    with monkeypatch.context() as m:
        _kill_at(m, 6)
        with pytest.raises(Killed):
            make().fit(X, checkpoint=path, checkpoint_every=5)
    from mbkkm.cluster import _base, _minibatch_kernel

    def refused(*args, **kwargs):
        raise AssertionError("run again on resume")

    monkeypatch.setattr(_base, "resolve_auto_gamma", refused)
    monkeypatch.setattr(_minibatch_kernel, "start_state", refused)
    monkeypatch.setattr(MiniBatchKernelKMeans, "_best_init", refused)
    got = make().fit(X, checkpoint=path, checkpoint_every=5)
    _assert_same_model(got, ref)
    # the file now holds the finished fit: fitting with it again does not iterate
    from mbkkm._core import _loop

    monkeypatch.setattr(_loop, "minibatch_step", refused)
    again = make().fit(X, checkpoint=path)
    _assert_same_model(again, ref, rng=False)  # no iteration: no batch drawn


@pytest.mark.parametrize("tol, kills", [(None, (2, 5, 20, 40)), (0.02, (1, 2, 3))])
def test_resumed_torch_fit_equals_uninterrupted(tol, kills, tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    X = torch.from_numpy(_data(n=1200))

    def make():
        return MiniBatchKernelKMeans(
            n_clusters=4, batch_size=64, tau=40, max_iter=60, gamma=0.1, tol=tol, random_state=2
        )

    ref = make().fit(X)
    path = tmp_path / "fit.ckpt"
    # device read-backs after 1, 3, 7, 15, 31, 47 iterations: kills inside blocks
    got = _resume_through_kills(monkeypatch, make, X, kills=kills, every=3, path=path)
    _assert_same_model(got, ref)
    if tol is not None:  # early stopping met its rule on the device, and resumed to it
        assert ref.n_iter_ < 60
    saved = _checkpoint.read_checkpoint(path)["fit"]
    assert "pool" in saved and saved["n_iter"] == ref.n_iter_


@pytest.mark.slow
def test_resumed_torch_fit_after_the_pool_grew(tmp_path, monkeypatch):
    """Capacities too small from the start: the pool grows (a new layout) during the
    fit, and a checkpoint keeps the grown layout as it is."""
    torch = pytest.importorskip("torch")
    from mbkkm._core import _pool

    monkeypatch.setattr(_pool, "capacities", lambda *a, **k: (2, 12))
    X = torch.from_numpy(_data(n=1200))

    def make():
        return MiniBatchKernelKMeans(
            n_clusters=4, batch_size=64, tau=40, max_iter=40, gamma=0.1, random_state=5
        )

    ref = make().fit(X)
    path = tmp_path / "fit.ckpt"
    got = _resume_through_kills(monkeypatch, make, X, kills=(1, 2, 9, 25), every=2, path=path)
    _assert_same_model(got, ref)
    L, M = _checkpoint.read_checkpoint(path)["fit"]["layout"][1:3]
    assert L > 2 and M > 12  # it grew


def test_another_fit_is_refused(tmp_path, monkeypatch):
    X = _data()
    path = tmp_path / "fit.ckpt"
    kw = dict(n_clusters=4, batch_size=64, tau=40, max_iter=20, gamma=0.1, random_state=0)
    with monkeypatch.context() as m:
        _kill_at(m, 7)
        with pytest.raises(Killed):
            MiniBatchKernelKMeans(**kw).fit(X, checkpoint=path, checkpoint_every=5)
    content = path.read_bytes()
    other = X.copy()
    other[450, 2] += 1.0
    for est, data, extra, named in (
        (MiniBatchKernelKMeans(**dict(kw, max_iter=30)), X, {}, "params.max_iter 20 there, 30"),
        (MiniBatchKernelKMeans(**dict(kw, random_state=1)), X, {}, "params.random_state"),
        (MiniBatchKernelKMeans(**kw), other, {}, "data differ"),
        (MiniBatchKernelKMeans(**kw), X[:-1], {}, "shape"),
        (MiniBatchKernelKMeans(**kw), X.astype(np.float32), {}, "dtype"),
        (
            MiniBatchKernelKMeans(**kw),
            X,
            {"sample_weight": np.arange(1.0, len(X) + 1)},
            "sample_weight",
        ),
    ):
        with pytest.raises(ValueError, match="written by another fit") as err:
            est.fit(data, checkpoint=path, **extra)
        assert named in str(err.value)
        assert path.read_bytes() == content  # left as it was
    # verbose and compute_labels do not change the model: the file resumes
    MiniBatchKernelKMeans(**kw, verbose=0, compute_labels=False).fit(X, checkpoint=path)


def _rbf_of(gamma):
    return lambda A, B: np.exp(-gamma * ((A[:, None] - B[None]) ** 2).sum(-1))


def test_a_callable_of_the_same_name_but_other_code_is_refused(tmp_path, monkeypatch):
    """Callables were told apart by their name only: two lambdas (or a function
    redefined in a notebook cell) shared it, and a checkpoint of one was resumed with
    the other (its centers, with norms of the first kernel: a user review). Their code,
    defaults and closure now count; the same code made again resumes, in another
    process too (a subprocess reads the fingerprint)."""
    X = _data(n=300)
    path = tmp_path / "fit.ckpt"
    kw = dict(n_clusters=3, batch_size=64, tau=20, max_iter=12, random_state=0)
    with monkeypatch.context() as m:
        _kill_at(m, 7)
        with pytest.raises(Killed):
            MiniBatchKernelKMeans(kernel=_rbf_of(0.1), **kw).fit(
                X, checkpoint=path, checkpoint_every=5
            )
    content = path.read_bytes()
    for other in (_rbf_of(0.2), lambda A, B: (A @ B.T + 1.0) ** 2):
        with pytest.raises(ValueError, match=r"written by another fit(.|\n)*params\.kernel"):
            MiniBatchKernelKMeans(kernel=other, **kw).fit(X, checkpoint=path)
        assert path.read_bytes() == content
    got = MiniBatchKernelKMeans(kernel=_rbf_of(0.1), **kw).fit(X, checkpoint=path)
    ref = MiniBatchKernelKMeans(kernel=_rbf_of(0.1), **kw).fit(X)
    _assert_same_model(got, ref)
    assert _fingerprints_in_another_process("t._rbf_of(0.1)") == [_checkpoint._canon(_rbf_of(0.1))]


def _fingerprints_in_another_process(*callables):
    """The checkpoint fingerprints of ``callables`` (expressions over this module as
    ``t``) computed in a new Python process: another hash seed, other addresses."""
    script = "\n".join(
        [
            "import sys; sys.path.insert(0, sys.argv[1])",
            "import test_checkpoint as t",
            "from mbkkm.cluster._checkpoint import _canon",
            *(f"print(_canon({expression}))" for expression in callables),
        ]
    )
    here = str(Path(__file__).parent)
    out = subprocess.run(
        [sys.executable, "-c", script, here], capture_output=True, text=True, check=True
    )
    return out.stdout.split()


_WIDTH = 0.1


def _rbf_of_the_module_width(A, B):
    return np.exp(-_WIDTH * ((A[:, None] - B[None]) ** 2).sum(-1))


class _Kernel:
    def __init__(self, gamma):
        self.gamma = gamma

    def __call__(self, A, B):
        return self.method(A, B)

    def method(self, A, B):
        return np.exp(-self.gamma * ((A[:, None] - B[None]) ** 2).sum(-1))


def test_callable_fingerprint_reads_globals_attributes_and_instances(monkeypatch):
    """A function reading a module-level width, a bound method and a callable instance
    resumed the fits of other widths (the code alone was hashed), and an instance
    was never resumed at all in a new process (its address was in the fingerprint; a
    regression review). Oracle: the fingerprint differs with the width, and is the
    same in another process."""
    canon = _checkpoint._canon
    kinds = [
        lambda: _rbf_of_the_module_width,
        lambda: _Kernel(_WIDTH).method,
        lambda: _Kernel(_WIDTH),
    ]
    before = [canon(make()) for make in kinds]
    monkeypatch.setattr(sys.modules[__name__], "_WIDTH", 0.2)
    after = [canon(make()) for make in kinds]
    assert all(a != b for a, b in zip(before, after))
    monkeypatch.undo()
    assert (
        _fingerprints_in_another_process(
            "t._rbf_of_the_module_width", "t._Kernel(t._WIDTH).method", "t._Kernel(t._WIDTH)"
        )
        == before
    )


def test_not_a_checkpoint_is_refused(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("my notes\n")
    est = MiniBatchKernelKMeans(n_clusters=2, max_iter=3, gamma=0.1)
    with pytest.raises(ValueError, match="is not an mbkkm checkpoint"):
        est.fit(_data(n=100), checkpoint=path)
    assert path.read_text() == "my notes\n"


@pytest.mark.parametrize(
    "params, fit_kw, match",
    [
        ({}, {"checkpoint_every": 3}, "checkpoint_every is set but checkpoint is None"),
        ({}, {"checkpoint": 3}, "checkpoint must be a file path"),
        ({}, {"checkpoint": "CK", "checkpoint_every": 0}, "checkpoint_every must be an integer"),
        ({}, {"checkpoint": "CK", "checkpoint_every": 2.5}, "checkpoint_every must be an integer"),
        ({}, {"checkpoint": "CK", "checkpoint_every": True}, "checkpoint_every must be an integer"),
        ({}, {"checkpoint": "MISSING/ck"}, "does not exist"),
        ({}, {"checkpoint": "DIR"}, "is a folder"),
        ({"tau": None}, {"checkpoint": "CK"}, "integer tau"),
        (
            {"kernel": "knn", "kernel_params": {"n_neighbors": 5}, "gamma": None},
            {"checkpoint": "CK"},
            "graph kernel",
        ),
    ],
)
def test_bad_checkpoint_arguments(params, fit_kw, match, tmp_path, monkeypatch):
    from mbkkm.cluster import _base

    def refused(*args, **kwargs):
        raise AssertionError("work before the checks")

    monkeypatch.setattr(_base, "resolve_auto_gamma", refused)
    for key in ("checkpoint",):
        if isinstance(fit_kw.get(key), str):
            fit_kw[key] = str(tmp_path / fit_kw[key]) if fit_kw[key] != "DIR" else str(tmp_path)
    est = MiniBatchKernelKMeans(**{"n_clusters": 2, "gamma": 0.1, **params})
    with pytest.raises((TypeError, ValueError), match=match):
        est.fit(_data(n=100), **fit_kw)
    assert not (tmp_path / "CK").exists()


def test_resumed_dask_fit_equals_uninterrupted(tmp_path, monkeypatch):
    da = pytest.importorskip("dask.array")
    X = da.from_array(_data(n=800), chunks=(200, 4))

    def make():
        return MiniBatchKernelKMeans(
            n_clusters=4, batch_size=64, tau=40, max_iter=20, gamma=0.1, random_state=4
        )

    ref = make().fit(X)
    got = _resume_through_kills(
        monkeypatch, make, X, kills=(3, 9), every=4, path=tmp_path / "fit.ckpt"
    )
    _assert_same_model(got, ref)
