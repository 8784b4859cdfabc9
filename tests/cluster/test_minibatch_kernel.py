"""MiniBatchKernelKMeans: oracles, invariants, scikit-learn conformance and bad input."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from _oracles import blobs, implied_centers, plain_minibatch_kmeans
from sklearn.cluster import kmeans_plusplus
from sklearn.metrics import adjusted_rand_score
from sklearn.metrics.pairwise import pairwise_kernels
from sklearn.utils.estimator_checks import parametrize_with_checks

from mbkkm import MiniBatchKernelKMeans
from mbkkm._core import (
    LEARNING_RATES,
    StepConfig,
    assign,
    init_state,
    kernel_kmeans_plusplus,
    minibatch_step,
)
from mbkkm.cluster import expected_failed_checks
from mbkkm.kernels import resolve_kernel


@pytest.mark.parametrize("learning_rate", sorted(LEARNING_RATES))
@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_linear_kernel_untruncated_equals_plain_minibatch_kmeans(learning_rate, renormalize, seed):
    X = blobs(seed=seed)
    k, b, iters = 3, 40, 15
    init = X[[0, 1, 2]]
    km = MiniBatchKernelKMeans(
        k,
        kernel="linear",
        init=init,
        batch_size=b,
        tau=10**9,
        max_iter=iters,
        learning_rate=learning_rate,
        renormalize=renormalize,
        random_state=seed,
    ).fit(X)
    plan = np.random.RandomState(seed).randint(0, X.shape[0], size=(iters, b))
    expected = plain_minibatch_kmeans(X, init, plan, learning_rate)
    np.testing.assert_allclose(implied_centers(km), expected, rtol=1e-10, atol=1e-10)
    d2 = ((X[:, None, :] - expected[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(km.labels_, d2.argmin(1))
    np.testing.assert_allclose(km.inertia_, d2.min(1).sum(), rtol=1e-9)


@pytest.mark.parametrize("kernel", ["rbf", "polynomial", "laplacian"])
def test_cached_norms_equal_recomputed(kernel):
    X = blobs(n=400, seed=3)
    km = MiniBatchKernelKMeans(
        4, kernel=kernel, batch_size=64, tau=50, max_iter=20, random_state=0
    ).fit(X)
    kern = km.kernel_
    for j in range(4):
        mask = km.support_labels_ == j
        S, a = km.support_vectors_[mask], km.dual_coef_[mask]
        G = pairwise_kernels(S, metric=kern.name, **kern.params)
        assert km.center_norms_[j] == pytest.approx(a @ G @ a, rel=1e-9, abs=1e-12)


def test_transform_equals_brute_force_distances():
    X = blobs(n=200, seed=4)
    km = MiniBatchKernelKMeans(
        3, gamma=0.05, batch_size=32, tau=20, max_iter=10, random_state=0
    ).fit(X)
    Xn = blobs(n=30, seed=5)
    D = km.transform(Xn)
    expected = np.empty((30, 3))
    for j in range(3):
        mask = km.support_labels_ == j
        S, a = km.support_vectors_[mask], km.dual_coef_[mask]
        Kxs = pairwise_kernels(Xn, S, metric="rbf", gamma=0.05)
        Kss = pairwise_kernels(S, metric="rbf", gamma=0.05)
        expected[:, j] = 1.0 - 2 * Kxs @ a + a @ Kss @ a
    np.testing.assert_allclose(D, np.maximum(expected, 0), rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(km.predict(Xn), expected.argmin(1))
    assert km.score(Xn) == pytest.approx(-expected.min(1).sum(), rel=1e-9)


def _run_core(X, k, b, iters, tau, renormalize, learning_rate="adaptive", seed=0):
    kern = resolve_kernel("rbf", gamma=0.1)
    rng = np.random.RandomState(seed)
    state = init_state(X[:k].copy(), kern)
    alphas = []
    for _ in range(iters):
        res = minibatch_step(
            state,
            X[rng.randint(0, len(X), b)],
            StepConfig(kern, LEARNING_RATES[learning_rate], tau=tau, renormalize=renormalize),
        )
        alphas.append(res.alpha)
    return state, np.array(alphas)


@pytest.mark.parametrize("learning_rate", sorted(LEARNING_RATES))
def test_literal_truncation_coefficient_sums(learning_rate):
    """renormalize=False: sum of a window's coefficients is 1 - prod_{l in Q}(1 - alpha_l)."""
    X = blobs(n=500, seed=6)
    state, alphas = _run_core(X, 3, 60, 25, tau=30, renormalize=False, learning_rate=learning_rate)
    truncated = 0
    for j in range(3):
        mine = state.block_cluster == j
        blocks = state.block_stamp[mine]
        total = state.coef[state.labels == j].sum()
        if -1 in blocks:  # initial center still in the window: nothing dropped yet
            assert total == pytest.approx(1.0)
        else:
            truncated += 1
            expected = 1 - np.prod([1 - alphas[q][j] for q in blocks])
            assert total == pytest.approx(expected, rel=1e-12)
            assert total < 1
    assert truncated > 0


def test_renormalized_coefficient_sums_are_one():
    X = blobs(n=500, seed=6)
    state, _ = _run_core(X, 3, 60, 25, tau=30, renormalize=True)
    sums = np.bincount(state.labels, weights=state.coef)
    np.testing.assert_allclose(sums, 1.0, rtol=1e-12)
    assert np.all(state.coef > 0)


def test_window_is_shortest_suffix_reaching_tau():
    X = blobs(n=500, seed=7)
    tau = 30
    state, _ = _run_core(X, 3, 60, 25, tau=tau, renormalize=True)
    for j in range(3):
        mine = state.block_cluster == j
        sizes, stamps = state.block_size[mine], state.block_stamp[mine]
        assert np.all(np.diff(stamps) > 0)  # one block per batch, oldest first
        # the window without its oldest block holds fewer than tau points...
        assert sizes[1:].sum() < tau
        # ...and the whole window reaches tau unless the initial center is still there
        assert sizes.sum() >= tau or stamps[0] == -1


def test_objective_after_equals_recomputed_batch_objective():
    X = blobs(n=300, seed=8)
    kern = resolve_kernel("rbf", gamma=0.1)
    state = init_state(X[:3].copy(), kern)
    rng = np.random.RandomState(0)
    for _ in range(5):
        B = X[rng.randint(0, 300, 50)]
        res = minibatch_step(
            state,
            B,
            StepConfig(kern, LEARNING_RATES["adaptive"], tau=40, renormalize=True, tol=-np.inf),
        )
        _, mind = assign(B, state, kern)
        assert res.objective_after == pytest.approx(mind.mean(), rel=1e-9, abs=1e-12)


def test_early_stopping_stops_before_max_iter():
    X = blobs(n=600, seed=9)
    km = MiniBatchKernelKMeans(
        3, gamma=0.05, batch_size=100, tau=50, max_iter=200, tol=1e-2, random_state=0
    ).fit(X)
    assert km.n_iter_ < 200
    assert len(km.batch_objective_) == km.n_iter_
    full = MiniBatchKernelKMeans(
        3, gamma=0.05, batch_size=100, tau=50, max_iter=200, random_state=0
    ).fit(X)
    assert full.n_iter_ == 200


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kernel_kmeans_plusplus_linear_equals_sklearn(seed):
    X = np.random.RandomState(seed).normal(size=(200, 5))
    idx = kernel_kmeans_plusplus(X, resolve_kernel("linear"), 6, np.random.RandomState(seed))
    _, expected = kmeans_plusplus(X, 6, random_state=seed)
    # Exact although the potentials are computed otherwise (kernel trick against
    # scikit-learn's Euclidean GEMM): the same draws pick another index only when a
    # draw falls within rounding (~1e-16 relative in float64) of a boundary of the
    # cumulative potentials or two candidates' potentials are that close; with 200
    # points and 6 centers that is ~1e-12 likely, while any error in the potentials
    # or the draws changes the indices.
    np.testing.assert_array_equal(idx, expected)


def test_same_seed_same_result_and_different_seed_differs():
    X = blobs(n=400, seed=10)
    a = MiniBatchKernelKMeans(3, batch_size=64, tau=30, max_iter=20, random_state=42).fit(X)
    b = MiniBatchKernelKMeans(3, batch_size=64, tau=30, max_iter=20, random_state=42).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.dual_coef_, b.dual_coef_)
    np.testing.assert_array_equal(a.support_vectors_, b.support_vectors_)
    c = MiniBatchKernelKMeans(3, batch_size=64, tau=30, max_iter=20, random_state=43).fit(X)
    assert not np.array_equal(a.support_vectors_, c.support_vectors_)


@pytest.mark.parametrize("learning_rate", sorted(LEARNING_RATES))
def test_partial_fit_repeated_equals_fit_on_same_batches(learning_rate):
    X = blobs(n=300, seed=11)
    init, b, iters, seed = X[[5, 6, 7]], 50, 12, 3
    params = dict(
        kernel="rbf",
        gamma=0.05,
        init=init,
        batch_size=b,
        tau=40,
        learning_rate=learning_rate,
        random_state=seed,
    )
    km = MiniBatchKernelKMeans(3, max_iter=iters, **params).fit(X)
    plan = np.random.RandomState(seed).randint(0, X.shape[0], size=(iters, b))
    pf = MiniBatchKernelKMeans(3, **params)
    for idx in plan:
        pf.partial_fit(X[idx])
    np.testing.assert_array_equal(pf.support_vectors_, km.support_vectors_)
    np.testing.assert_allclose(pf.dual_coef_, km.dual_coef_, rtol=1e-12)
    np.testing.assert_array_equal(pf.predict(X), km.labels_)
    assert pf.n_steps_ == iters
    np.testing.assert_allclose(pf.batch_objective_, km.batch_objective_, rtol=1e-12)


def test_sample_weight_zero_points_never_sampled():
    X = blobs(n=300, seed=12)
    w = np.ones(300)
    w[:150] = 0
    km = MiniBatchKernelKMeans(3, batch_size=64, tau=40, max_iter=10, random_state=0)
    km.fit(X, sample_weight=w)
    support_rows = {tuple(r) for r in km.support_vectors_}
    zero_rows = {tuple(r) for r in X[:150]}
    assert not support_rows & zero_rows
    # inertia is the weighted sum of distances
    _, mind = assign(X, km._state, km.kernel_)
    assert km.inertia_ == pytest.approx(mind @ w)


def test_float32_stays_float32():
    X = blobs(n=300, seed=13, dtype=np.float32)
    km = MiniBatchKernelKMeans(3, batch_size=64, tau=30, max_iter=10, random_state=0).fit(X)
    assert km.support_vectors_.dtype == np.float32
    assert km.transform(X).dtype == np.float32
    km64 = MiniBatchKernelKMeans(3, batch_size=64, tau=30, max_iter=10, random_state=0)
    km64.fit(X.astype(np.float64))
    assert adjusted_rand_score(km.labels_, km64.labels_) > 0.99


def test_mean_distance_gamma_is_data_driven():
    X = blobs(n=200, seed=14)
    km = MiniBatchKernelKMeans(
        3, gamma="mean-distance", batch_size=32, tau=20, max_iter=3, random_state=0
    ).fit(X)
    sq = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    assert km.kernel_.params["gamma"] == pytest.approx(1 / sq.mean(), rel=1e-10)


def test_callable_kernel_equals_named():
    X = blobs(n=200, seed=15)

    def my_rbf(A, B, gamma):
        return np.exp(-gamma * ((A[:, None, :] - B[None]) ** 2).sum(-1))

    a = MiniBatchKernelKMeans(
        3,
        kernel=my_rbf,
        kernel_params={"gamma": 0.05},
        batch_size=32,
        tau=20,
        max_iter=10,
        random_state=0,
    ).fit(X)
    b = MiniBatchKernelKMeans(
        3, kernel="rbf", gamma=0.05, batch_size=32, tau=20, max_iter=10, random_state=0
    ).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_allclose(a.dual_coef_, b.dual_coef_, rtol=1e-9)


def test_n_init_keeps_best_validation_inertia():
    X = blobs(n=400, seed=16)
    km = MiniBatchKernelKMeans(
        3,
        batch_size=64,
        tau=30,
        max_iter=5,
        n_init=4,
        init="random",
        gamma="mean-distance",
        random_state=0,
    ).fit(X)
    assert km.n_iter_ == 5
    with pytest.warns(RuntimeWarning, match="only one init"):
        MiniBatchKernelKMeans(3, init=X[:3], n_init=3, max_iter=2, batch_size=32).fit(X)


def test_circles_separated():
    from sklearn.datasets import make_circles

    X, y = make_circles(n_samples=1000, factor=0.3, noise=0.05, random_state=0)
    km = MiniBatchKernelKMeans(
        2, gamma=5.0, batch_size=128, tau=50, max_iter=40, random_state=0
    ).fit(X)
    assert adjusted_rand_score(y, km.labels_) > 0.95


# ----------------------------------------------------------------- conformance
@parametrize_with_checks(
    [MiniBatchKernelKMeans(3, batch_size=16, tau=10, max_iter=5, random_state=0)],
    expected_failed_checks=expected_failed_checks,
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


# ------------------------------------------------------------------ bad input
X_OK = blobs(n=50, seed=0)


def _fit(**params):
    base = dict(n_clusters=3, batch_size=16, tau=10, max_iter=2, random_state=0)
    base.update(params)
    return MiniBatchKernelKMeans(**base)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"n_clusters": 0}, "n_clusters"),
        ({"n_clusters": 2.5}, "n_clusters"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": -3}, "batch_size"),
        ({"tau": 0}, "tau"),
        ({"tau": -1}, "tau"),
        ({"max_iter": 0}, "max_iter"),
        ({"kernel": "nope"}, "kernel"),
        ({"learning_rate": "fast"}, "learning_rate"),
        ({"gamma": -1.0}, "gamma"),
        ({"gamma": 0}, "gamma"),
        ({"tol": -1.0}, "tol"),
        ({"init": "kmeans"}, "init"),
        ({"n_init": 0}, "n_init"),
        ({"init_size": 0}, "init_size"),
        ({"renormalize": "yes"}, "renormalize"),
        ({"working_memory": 0}, "working_memory"),
        ({"kernel_params": [1, 2]}, "kernel_params"),
        ({"gamma": 0.1, "kernel_params": {"gamma": 3.0}}, "both give the kernel's width"),
        ({"gamma": "auto", "kernel_params": {"gamma": 3.0}}, "both give the kernel's width"),
        ({"kernel": "poly", "degree": 2, "kernel_params": {"degree": 4}}, "kernel's degree"),
    ],
)
def test_bad_parameters(params, match):
    with pytest.raises((ValueError, TypeError), match=match):
        _fit(**params).fit(X_OK)


@pytest.mark.parametrize(
    ("X", "match"),
    [
        (np.array([[np.nan, 1.0]] * 10), "NaN"),
        (np.array([[np.inf, 1.0]] * 10), "infinity"),
        (np.empty((0, 3)), "0 sample"),
        (np.ones((2, 3)), "n_clusters"),
        (np.array([["a", "b"]] * 10), "column 0 is not numeric"),
        # squared norms below the smallest normal number: distances underflow
        (np.array([[1e-160, 0.0], [0.0, 2e-160]] * 10), "too small for float64"),
        (np.array([[1e-20, 0.0], [0.0, 2e-20]] * 10, dtype=np.float32), "too small for float32"),
    ],
)
def test_bad_X(X, match):
    with pytest.raises((ValueError, TypeError), match=match):
        _fit().fit(X)


def test_tiny_values_are_refused_by_fit_only():
    """The underflow check is the training data's: a fitted model labels tiny rows
    (their distances to the centers are those of the origin), and rows of zeros with
    one normal row are fitted."""
    est = _fit().fit(X_OK)
    np.testing.assert_array_equal(est.predict(X_OK * 1e-170), est.predict(np.zeros_like(X_OK)))
    X = np.zeros((20, 2))
    X[0] = 1.0
    X[1:4] = 1e-170
    _fit(n_clusters=2).fit(X)


def test_predict_checks():
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        _fit().predict(X_OK)
    km = _fit().fit(X_OK)
    with pytest.raises(ValueError, match="features"):
        km.predict(X_OK[:, :2])
    with pytest.raises(ValueError, match="features"):
        km.transform(np.ones((3, 7)))


def test_chi2_negative_data():
    with pytest.raises(ValueError, match="non-negative"):
        _fit(kernel="chi2").fit(X_OK)
    _fit(kernel="chi2").fit(np.abs(X_OK))


@pytest.mark.parametrize(
    ("func", "exc", "match"),
    [
        (lambda A, B: np.ones((len(A), len(B) + 1)), ValueError, "shape"),
        (lambda A, B: np.full((len(A), len(B)), np.nan), ValueError, "non-finite"),
        (lambda A, B: 1 / 0, RuntimeError, "ZeroDivisionError"),
    ],
)
def test_bad_callable_kernel(func, exc, match):
    with pytest.raises(exc, match=match):
        _fit(kernel=func).fit(X_OK)


@pytest.mark.parametrize(
    ("sw", "match"),
    [
        (np.ones(10), "sample_weight|shape|samples"),
        (-np.ones(50), "negative|sample_weight"),
        (np.zeros(50), "sample_weight"),
        (np.full(50, np.nan), "sample_weight|NaN"),
    ],
)
def test_bad_sample_weight(sw, match):
    with pytest.raises(ValueError, match=match):
        _fit().fit(X_OK, sample_weight=sw)


def test_init_array_wrong_shape():
    with pytest.raises(ValueError, match="init"):
        _fit(init=np.zeros((2, X_OK.shape[1]))).fit(X_OK)
    with pytest.raises(ValueError, match="init"):
        _fit(init=np.zeros((3, 1))).fit(X_OK)


def test_clusters_of_a_few_points_under_the_adaptive_rate_warn():
    """With the adaptive rate a center that is still its seed point can end holding
    it alone (TF-IDF documents with the cosine kernel: three clusters of one
    document of 20,000, ARI 0.14 against 0.99 with the classic rate). The fit warns
    where some clusters hold at most max(2, n / (1000 k)) of n >= 100 k points; not
    with the classic rate, not on small data, not for empty clusters (their own
    warning)."""
    from sklearn.exceptions import ConvergenceWarning

    def warned(est, labels):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est._warn_empty_clusters(labels)
        return [  # EmptyClusterWarning is a ConvergenceWarning too: told by its text
            w
            for w in caught
            if issubclass(w.category, ConvergenceWarning) and "at most" in str(w.message)
        ]

    labels = np.repeat(np.arange(5), [1, 3372, 16625, 1, 1])
    adaptive = MiniBatchKernelKMeans(5)
    found = warned(adaptive, labels)
    assert len(found) == 1 and "3 of the n_clusters=5 clusters" in str(found[0].message)
    assert "learning_rate='classic'" in str(found[0].message)
    assert warned(MiniBatchKernelKMeans(5, learning_rate="classic"), labels) == []
    assert warned(adaptive, np.repeat(np.arange(5), [1, 100, 100, 100, 100])) == []  # n < 100 k
    sizes = [5, 5000, 5000, 5000, 4985]  # 5 > max(2, 20000 // 5000): a cluster, not a seed
    assert warned(adaptive, np.repeat(np.arange(5), sizes)) == []
    assert warned(adaptive, np.repeat(np.arange(5), [0, 5000, 5000, 5000, 5000])) == []
