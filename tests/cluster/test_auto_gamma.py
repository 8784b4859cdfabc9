"""gamma="auto": the criterion against a plain oracle, determinism, refusals, inputs."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from scipy import sparse
from sklearn.datasets import make_moons
from sklearn.metrics import adjusted_rand_score

from mbkkm import KernelKMeans, MiniBatchKernelKMeans
from mbkkm.cluster._auto_gamma import (
    AUTO_GAMMA_KERNELS,
    GammaSelection,
    knn_normalized_cut,
    select_gamma,
)

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_DASK = importlib.util.find_spec("dask") is not None


def moons(n=600, seed=0):
    return make_moons(n, noise=0.05, random_state=seed)


def plain_ncut(A, labels, k):
    """sum_j cut(C_j) / vol(C_j), edge by edge."""
    A = np.asarray(A.todense() if sparse.issparse(A) else A)
    total = 0.0
    for j in range(k):
        inside = labels == j
        vol = cut = 0.0
        for a in np.flatnonzero(inside):
            for b in range(A.shape[0]):
                vol += A[a, b]
                if not inside[b]:
                    cut += A[a, b]
        if vol > 0:
            total += cut / vol
    return total


@pytest.mark.parametrize("seed", [0, 1])
def test_normalized_cut_equals_plain_oracle(seed):
    rng = np.random.RandomState(seed)
    W = rng.rand(30, 30) * (rng.rand(30, 30) < 0.3)
    A = sparse.csr_matrix(W + W.T)
    labels = rng.randint(0, 4, 30)
    labels[labels == 3] = 2  # an empty cluster adds nothing
    assert knn_normalized_cut(A, labels, 4) == pytest.approx(plain_ncut(A, labels, 4))


def test_selection_is_the_argmin_of_its_scores_over_multiples_of_the_base():
    X, _ = moons(300)
    sel = select_gamma(X, 2, random_state=0, n_samples=300)
    assert isinstance(sel, GammaSelection)
    sq = ((X[:, None] - X[None]) ** 2).sum(-1)
    base = 1 / (sq.sum() / (300 * 299))  # mean over distinct pairs of the whole sample
    assert sel.base_gamma == pytest.approx(base)
    np.testing.assert_allclose(sel.multipliers, 2.0 ** np.arange(-3, 7))
    assert sel.gamma == sel.candidates[np.argmin(sel.scores)]
    np.testing.assert_allclose(sel.scores, sel.seed_scores.mean(axis=1))
    assert "<- chosen" in sel.table()


def test_same_seed_same_choice_and_y_never_seen():
    X, y = moons()
    a = MiniBatchKernelKMeans(2, gamma="auto", batch_size=128, tau=50, max_iter=20,
                              random_state=3).fit(X, y)
    b = MiniBatchKernelKMeans(2, gamma="auto", batch_size=128, tau=50, max_iter=20,
                              random_state=3).fit(X, 1 - y)  # y is ignored
    assert a.gamma_ == b.gamma_
    np.testing.assert_array_equal(a.gamma_selection_.scores, b.gamma_selection_.scores)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert a.kernel_.params["gamma"] == a.gamma_


def test_auto_beats_the_default_width_on_moons():
    X, y = moons(2000)
    km = MiniBatchKernelKMeans(2, gamma="auto", batch_size=256, tau=100, max_iter=100,
                               random_state=0).fit(X)
    assert km.gamma_ > 4 * km.gamma_selection_.base_gamma  # far narrower than the default
    assert adjusted_rand_score(y, km.labels_) > 0.75
    default = MiniBatchKernelKMeans(2, batch_size=256, tau=100, max_iter=100,
                                    random_state=0).fit(X)
    assert adjusted_rand_score(y, default.labels_) < 0.6


def test_kernel_kmeans_auto_and_gamma_attribute():
    X, _ = moons(300)
    km = KernelKMeans(2, gamma="auto", random_state=0).fit(X)
    assert km.gamma_ == km.kernel_.params["gamma"] == km.gamma_selection_.gamma
    assert KernelKMeans(2, random_state=0).fit(X).gamma_selection_ is None
    assert KernelKMeans(2, kernel="linear", random_state=0).fit(X).gamma_ is None
    lap = KernelKMeans(2, kernel="laplacian", gamma="auto", random_state=0).fit(X)
    assert lap.gamma_ == lap.gamma_selection_.gamma


@pytest.mark.parametrize("Est", [MiniBatchKernelKMeans, KernelKMeans])
@pytest.mark.parametrize("kernel", ["linear", "polynomial", "cosine", "sigmoid", "chi2",
                                    "precomputed", "knn", np.dot])
def test_refuses_kernels_without_a_width(Est, kernel):
    X = np.abs(moons(60)[0])
    if kernel == "precomputed":
        X = X @ X.T
    params = {"n_neighbors": 5} if kernel == "knn" else None
    with pytest.raises(ValueError, match="gamma='auto' chooses the width"):
        Est(2, kernel=kernel, gamma="auto", kernel_params=params).fit(X)
    assert set(AUTO_GAMMA_KERNELS) == {"rbf", "gaussian", "laplacian"}


def test_bad_gamma_strings_and_arguments():
    X, _ = moons(60)
    with pytest.raises(ValueError, match="gamma"):
        MiniBatchKernelKMeans(2, gamma="scale").fit(X)
    with pytest.raises(ValueError, match="n_samples"):
        select_gamma(X, 2, n_samples=1)
    with pytest.raises(ValueError, match="multipliers"):
        select_gamma(X, 2, multipliers=[0.0, 1.0])


def test_sample_weight_draws_the_sample():
    X, _ = moons(400)
    w = np.r_[np.ones(200), np.zeros(200)]
    sel = select_gamma(X, 2, sample_weight=w, random_state=0, n_samples=1000)
    assert sel.n_samples == 200  # only the points with weight
    again = select_gamma(X, 2, sample_weight=w, random_state=0, n_samples=1000)
    assert sel.gamma == again.gamma


def test_plot_marks_the_choice():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    X, _ = moons(200)
    ax = select_gamma(X, 2, random_state=0).plot()
    assert any("chosen" in t.get_text() for t in ax.get_legend().get_texts())


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_torch_input_same_choice_as_numpy():
    import torch

    X, _ = moons()
    a = MiniBatchKernelKMeans(2, gamma="auto", batch_size=128, tau=50, max_iter=5,
                              random_state=0).fit(X)
    b = MiniBatchKernelKMeans(2, gamma="auto", batch_size=128, tau=50, max_iter=5,
                              random_state=0).fit(torch.from_numpy(X))
    assert a.gamma_ == b.gamma_


@pytest.mark.skipif(not HAS_DASK, reason="dask is not installed")
def test_dask_input_same_choice_as_numpy():
    import dask
    import dask.array as da

    X, _ = moons()
    a = MiniBatchKernelKMeans(2, gamma="auto", batch_size=128, tau=50, max_iter=5,
                              random_state=0).fit(X)
    with dask.config.set(scheduler="synchronous"):
        b = MiniBatchKernelKMeans(2, gamma="auto", batch_size=128, tau=50, max_iter=5,
                                  random_state=0).fit(da.from_array(X, chunks=100))
        assert select_gamma(da.from_array(X, chunks=100), 2, random_state=0).gamma == a.gamma_
    assert a.gamma_ == b.gamma_
