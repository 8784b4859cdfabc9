"""MiniBatchKMeans: oracles (the kernel estimator, scikit-learn's update rule), API, errors."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score
from sklearn.metrics.pairwise import euclidean_distances
from sklearn.utils import check_random_state
from sklearn.utils.estimator_checks import parametrize_with_checks

from mbkkm._core import LEARNING_RATES, draw_batch_plan
from mbkkm.cluster import expected_failed_checks
from mbkkm.cluster._minibatch_kernel import MiniBatchKernelKMeans
from mbkkm.cluster._minibatch_kmeans import MiniBatchKMeans, minibatch_kmeans_step


def blobs(n=300, d=4, k=3, seed=0, dtype=np.float64, spread=4.0, return_y=False):
    rng = np.random.RandomState(seed)
    centers = rng.normal(scale=spread, size=(k, d))
    y = rng.randint(k, size=n)
    X = (centers[y] + rng.normal(size=(n, d))).astype(dtype)
    return (X, y) if return_y else X


def implied_centers(km):
    """Explicit centers sum_s a_s x_s of a linear-kernel MiniBatchKernelKMeans."""
    return np.stack(
        [
            km.dual_coef_[km.support_labels_ == j] @ km.support_vectors_[km.support_labels_ == j]
            for j in range(km.n_clusters)
        ]
    )


def sklearn_rule(X, init, plan, weights=None):
    """scikit-learn's MiniBatchKMeans center update, written out as a plain loop.

    ``weights`` (per point of X, optional) are the update weights. For each batch:
    label every point with its nearest center, then for every cluster j that
    received points
        new_center = (old_center * N_old + sum_{x in B_j} w_x x) / (N_old + b_j).
    """
    centers = np.array(init, dtype=np.float64)
    counts = np.zeros(len(centers))
    for batch in plan:
        Xb = X[batch]
        wb = np.ones(len(batch)) if weights is None else weights[batch]
        labels = [int(np.argmin(((centers - x) ** 2).sum(1))) for x in Xb]
        new = centers.copy()
        for j in range(len(centers)):
            pts = [i for i, lab in enumerate(labels) if lab == j]
            if not pts:
                continue
            total = sum(wb[i] * Xb[i] for i in pts)
            bj = sum(wb[i] for i in pts)
            new[j] = (centers[j] * counts[j] + total) / (counts[j] + bj)
            counts[j] += bj
        centers = new
    return centers


# ---------------------------------------------------------------------- oracles
@pytest.mark.parametrize("learning_rate", ["adaptive", "classic"])
@pytest.mark.parametrize(
    "extra",
    [{}, {"n_init": 3}, {"init": "random"}, {"tol": 0.1}, {"weighted": True}],
    ids=["default", "n_init", "random", "tol", "weighted"],
)
def test_equals_linear_untruncated_kernel_estimator(learning_rate, extra):
    X = blobs(n=500, d=3, k=4, seed=1, spread=2.0)
    extra = dict(extra)
    sw = None
    if extra.pop("weighted", False):
        sw = np.random.RandomState(0).uniform(0.2, 3.0, len(X))
    kw = dict(
        n_clusters=4,
        batch_size=40,
        max_iter=25,
        learning_rate=learning_rate,
        random_state=7,
        **extra,
    )
    a = MiniBatchKMeans(**kw).fit(X, sample_weight=sw)
    b = MiniBatchKernelKMeans(kernel="linear", tau=10**9, renormalize=True, **kw)
    b.fit(X, sample_weight=sw)
    assert a.n_iter_ == b.n_iter_
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_allclose(a.cluster_centers_, implied_centers(b), atol=1e-10)
    np.testing.assert_allclose(a.inertia_, b.inertia_, rtol=1e-10)
    np.testing.assert_allclose(a.batch_objective_, b.batch_objective_, rtol=1e-10)


def test_tol_stops_early():
    X = blobs(n=500, seed=2)
    km = MiniBatchKMeans(3, batch_size=64, max_iter=100, tol=0.1, random_state=0).fit(X)
    assert 1 < km.n_iter_ < 100
    full = MiniBatchKMeans(3, batch_size=64, max_iter=100, random_state=0).fit(X)
    # Same batches up to the stop: the objectives agree on the common prefix.
    np.testing.assert_allclose(km.batch_objective_, full.batch_objective_[: km.n_iter_])


@pytest.mark.parametrize("seed", [0, 1])
def test_classic_rate_is_sklearn_update_rule(seed):
    X = blobs(n=300, d=3, k=4, seed=seed, spread=1.5)
    init = X[:4]
    km = MiniBatchKMeans(
        4, init=init, batch_size=30, max_iter=15, learning_rate="classic", random_state=seed
    ).fit(X)
    # fit draws nothing for an explicit init, then the whole batch plan.
    plan = draw_batch_plan(check_random_state(seed), len(X), 30, 15)
    np.testing.assert_allclose(km.cluster_centers_, sklearn_rule(X, init, plan), atol=1e-12)


def test_weighted_step_is_sklearn_update_rule():
    rng = np.random.RandomState(0)
    X = rng.normal(size=(50, 3))
    w = rng.uniform(0.1, 2.0, 50)
    init = X[:3].copy()
    centers = init.copy()
    counts = np.zeros(3)
    batches = [np.arange(0, 25), np.arange(25, 50)]
    for bt in batches:
        minibatch_kmeans_step(centers, counts, X[bt], LEARNING_RATES["classic"], batch_weight=w[bt])
    expected = sklearn_rule(X, init, batches, weights=w)
    np.testing.assert_allclose(centers, expected, atol=1e-12)
    np.testing.assert_allclose(counts.sum(), w.sum(), rtol=1e-12)  # running N_j


@pytest.mark.parametrize("learning_rate", ["adaptive", "classic"])
def test_partial_fit_equals_kernel_estimator(learning_rate):
    X = blobs(n=200, seed=3)
    sw = np.random.RandomState(1).uniform(0.5, 2.0, len(X))
    a = MiniBatchKMeans(3, learning_rate=learning_rate, random_state=0)
    b = MiniBatchKernelKMeans(
        3, kernel="linear", tau=10**9, learning_rate=learning_rate, random_state=0
    )
    for s in range(0, 200, 50):
        a.partial_fit(X[s : s + 50], sample_weight=sw[s : s + 50])
        b.partial_fit(X[s : s + 50], sample_weight=sw[s : s + 50])
    assert a.n_steps_ == 4
    np.testing.assert_allclose(a.cluster_centers_, implied_centers(b), atol=1e-10)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_allclose(a.batch_objective_, b.batch_objective_, rtol=1e-10)


def test_transform_predict_score():
    X = blobs(n=300, seed=4)
    Xn = blobs(n=20, seed=5)
    km = MiniBatchKMeans(3, batch_size=64, max_iter=10, random_state=0).fit(X)
    D = euclidean_distances(Xn, km.cluster_centers_, squared=True)
    np.testing.assert_allclose(km.transform(Xn), D, atol=1e-10)
    np.testing.assert_array_equal(km.predict(Xn), D.argmin(1))
    np.testing.assert_allclose(km.score(Xn), -D.min(1).sum(), rtol=1e-10)
    w = np.arange(20.0)
    np.testing.assert_allclose(km.score(Xn, sample_weight=w), -D.min(1) @ w, rtol=1e-10)
    np.testing.assert_array_equal(km.fit_predict(X), km.labels_)


def test_labelling_holds_chunks_not_the_distance_matrix():
    """The fit's labels, predict and score take each chunk's nearest center as they
    go: their memory is the chunk's distances and O(n) outputs, not the (n, k)
    distance matrix (which transform alone returns); the labels and the inertia are
    those of the matrix (oracle: euclidean_distances)."""
    import tracemalloc

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60_000, 4)).astype(np.float32)
    km = MiniBatchKMeans(100, batch_size=256, max_iter=3, working_memory=4, random_state=0)
    tracemalloc.start()
    try:
        km.fit(X)
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        labels = km.predict(X)
        score = km.score(X)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    n_by_k = X.shape[0] * 100 * 4  # 24 MB
    assert peak < n_by_k / 3, peak
    D = euclidean_distances(X, km.cluster_centers_, squared=True)
    np.testing.assert_array_equal(labels, km.labels_)
    assert np.mean(labels == D.argmin(axis=1)) > 0.999  # float32 ties aside
    assert score == pytest.approx(-D.min(axis=1).sum(), rel=1e-4)
    assert km.inertia_ == pytest.approx(-score, rel=1e-12)
    np.testing.assert_array_equal(km.transform(X).argmin(axis=1), labels)


def test_quality_on_blobs():
    X, truth = blobs(n=2000, k=5, seed=6, spread=6.0, return_y=True)
    for seed in range(2):
        km = MiniBatchKMeans(5, batch_size=128, max_iter=50, random_state=seed).fit(X)
        assert adjusted_rand_score(truth, km.labels_) > 0.8


def test_float32_preserved():
    X = blobs(n=200, seed=7, dtype=np.float32)
    km = MiniBatchKMeans(3, batch_size=32, max_iter=10, random_state=0).fit(X)
    assert km.cluster_centers_.dtype == np.float32
    assert km.transform(X).dtype == np.float32


def test_compute_labels_false():
    X = blobs(n=100, seed=8)
    km = MiniBatchKMeans(3, batch_size=16, max_iter=5, compute_labels=False, random_state=0).fit(X)
    assert not hasattr(km, "labels_")
    assert km.predict(X).shape == (100,)


def test_zero_weight_points_never_sampled():
    X = blobs(n=100, seed=9)
    w = np.ones(100)
    w[50:] = 0
    X[50:] = 1e6  # would drag a center away if ever sampled
    km = MiniBatchKMeans(3, batch_size=32, max_iter=20, random_state=0, init="random")
    km.fit(X, sample_weight=w)
    assert np.abs(km.cluster_centers_).max() < 1e3


# ------------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    ("params", "match"),
    [
        (dict(init=np.zeros((2, 4))), "init"),
        (dict(init_size=2), "init_size"),
        (dict(n_clusters=100), "n_samples"),
        (dict(learning_rate="fast"), "learning_rate"),
        (dict(batch_size=0), "batch_size"),
    ],
)
def test_bad_parameters(params, match):
    base = dict(n_clusters=3)
    base.update(params)
    with pytest.raises(ValueError, match=match):
        MiniBatchKMeans(**base).fit(blobs(n=50))


def test_explicit_init_with_n_init_warns():
    X = blobs(n=50)
    with pytest.warns(RuntimeWarning, match="only one init"):
        MiniBatchKMeans(3, init=X[:3], n_init=3, max_iter=2).fit(X)


# ------------------------------------------------------------------- conformance
@parametrize_with_checks(
    [MiniBatchKMeans(3, batch_size=16, max_iter=5, random_state=0)],
    expected_failed_checks=expected_failed_checks,
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


@pytest.mark.parametrize("cls", [MiniBatchKMeans, MiniBatchKernelKMeans])
def test_compute_labels_false_leaves_no_labels_of_an_earlier_fit(cls):
    """A refit (or partial_fit) with compute_labels=False kept the earlier fit's
    labels_ and inertia_ (of another length), and fit_predict returned them; on a
    fresh estimator fit_predict raised AttributeError. fit_predict now labels X
    (oracle: predict of the fitted model)."""
    X = blobs(n=300, seed=1)
    est = cls(3, batch_size=64, max_iter=10, random_state=0).fit(X)
    assert est.labels_.shape == (300,)
    est.set_params(compute_labels=False)
    labels = est.fit_predict(X[:120])
    assert labels.shape == (120,) and not hasattr(est, "labels_")
    assert not hasattr(est, "inertia_")
    np.testing.assert_array_equal(labels, est.predict(X[:120]))
    fresh = cls(3, batch_size=64, max_iter=10, random_state=0, compute_labels=False)
    np.testing.assert_array_equal(fresh.fit_predict(X[:120]), labels)
    est.set_params(compute_labels=True).fit(X)
    est.set_params(compute_labels=False).partial_fit(X[:50])
    assert not hasattr(est, "labels_")
    with_labels = cls(3, batch_size=64, max_iter=10, random_state=0)
    np.testing.assert_array_equal(with_labels.fit_predict(X), with_labels.labels_)


def test_sparse_rows_are_refused_with_the_estimator_that_takes_them():
    import scipy.sparse as sp

    X = sp.random(100, 10, density=0.3, format="csr", random_state=0)
    with pytest.raises(TypeError, match=r"dense data is required.*kernel='linear', tau=None"):
        MiniBatchKMeans(3).fit(X)
    # the estimator named: the same model as MiniBatchKMeans on the dense rows
    a = MiniBatchKernelKMeans(
        3, kernel="linear", tau=None, batch_size=32, max_iter=5, random_state=0
    )
    b = MiniBatchKMeans(3, batch_size=32, max_iter=5, random_state=0)
    np.testing.assert_array_equal(a.fit(X).labels_, b.fit(X.toarray()).labels_)
