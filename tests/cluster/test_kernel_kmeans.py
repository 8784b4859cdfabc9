"""KernelKMeans: oracles (scikit-learn KMeans, a plain Lloyd loop), paths, errors."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score
from sklearn.metrics.pairwise import rbf_kernel
from sklearn.utils.estimator_checks import parametrize_with_checks

from mbkkm._core._lloyd import relocate_empty as _relocate_empty
from mbkkm.cluster import expected_failed_checks
from mbkkm.cluster._kernel_kmeans import (
    KernelKMeans,
    KernelMemoryError,
)
from mbkkm.kernels import knn_kernel


def blobs(n=300, d=4, k=3, seed=0, dtype=np.float64, spread=4.0):
    rng = np.random.RandomState(seed)
    centers = rng.normal(scale=spread, size=(k, d))
    X = centers[rng.randint(k, size=n)] + rng.normal(size=(n, d))
    return X.astype(dtype)


def plain_kernel_kmeans(K, init_idx, w, max_iter):
    """Obviously right weighted kernel Lloyd with explicit loops (scikit-learn's order).

    Centers start at the points ``init_idx``; each iteration assigns every point to
    argmin_j K(x,x) - 2 sum_{y in A_j} w_y K(x,y) / W_j
                 + sum_{y,y' in A_j} w_y w_y' K(y,y') / W_j^2,
    and stops when the labels repeat. Returns labels and the weighted inertia.
    """
    n = K.shape[0]
    k = len(init_idx)
    members = [[i] for i in init_idx]
    weights = [[1.0] for _ in init_idx]

    def dist(x, j):
        ys, ws = members[j], weights[j]
        W = sum(ws)
        cross = sum(wy * K[x, y] for y, wy in zip(ys, ws)) / W
        norm = sum(wa * wb * K[a, b] for a, wa in zip(ys, ws) for b, wb in zip(ys, ws))
        return K[x, x] - 2 * cross + norm / W**2

    old = None
    for _ in range(max_iter):
        d = np.array([[dist(x, j) for j in range(k)] for x in range(n)])
        labels = d.argmin(1)
        if old is not None and np.array_equal(labels, old):
            break
        members = [[i for i in range(n) if labels[i] == j] for j in range(k)]
        weights = [[w[i] for i in members[j]] for j in range(k)]
        old = labels
    else:
        d = np.array([[dist(x, j) for j in range(k)] for x in range(n)])
        labels = d.argmin(1)
    inertia = sum(w[x] * d[x, labels[x]] for x in range(n))
    return labels, inertia


# --------------------------------------------------------------------- oracles
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("max_iter", [1, 2, 300])
@pytest.mark.parametrize("weighted", [False, True])
def test_linear_kernel_equals_sklearn_kmeans(seed, max_iter, weighted):
    X = blobs(n=400, d=3, k=5, seed=seed, spread=2.0)
    rng = np.random.RandomState(seed)
    init = X[rng.choice(len(X), 5, replace=False)]
    sw = rng.uniform(0.5, 2.0, len(X)) if weighted else None
    sk = KMeans(5, init=init, n_init=1, algorithm="lloyd", tol=0, max_iter=max_iter)
    sk.fit(X, sample_weight=sw)
    km = KernelKMeans(5, kernel="linear", init=init, tol=0, max_iter=max_iter)
    km.fit(X, sample_weight=sw)
    np.testing.assert_array_equal(km.labels_, sk.labels_)
    np.testing.assert_allclose(km.inertia_, sk.inertia_, rtol=1e-10)
    assert km.n_iter_ == sk.n_iter_
    centers = np.stack(
        [
            km.dual_coef_[km.support_labels_ == j] @ km.support_vectors_[km.support_labels_ == j]
            for j in range(5)
        ]
    )
    np.testing.assert_allclose(centers, sk.cluster_centers_, atol=1e-10)
    np.testing.assert_allclose(km.center_norms_, (sk.cluster_centers_**2).sum(1), rtol=1e-10)
    np.testing.assert_allclose(km.transform(X), sk.transform(X) ** 2, atol=1e-8)
    np.testing.assert_array_equal(km.predict(X), sk.predict(X))


@pytest.mark.parametrize("weighted", [False, True])
def test_rbf_equals_plain_kernel_lloyd(weighted):
    X = blobs(n=40, d=2, k=3, seed=3, spread=1.5)
    rng = np.random.RandomState(0)
    w = rng.uniform(0.5, 2.0, len(X)) if weighted else np.ones(len(X))
    K = rbf_kernel(X, gamma=0.3)
    init_idx = [0, 1, 2]
    labels, inertia = plain_kernel_kmeans(K, init_idx, w, max_iter=300)
    km = KernelKMeans(3, kernel="rbf", gamma=0.3, init=X[init_idx], tol=0).fit(
        X, sample_weight=w if weighted else None
    )
    np.testing.assert_array_equal(km.labels_, labels)
    np.testing.assert_allclose(km.inertia_, inertia, rtol=1e-10)


def test_transform_equals_brute_force_feature_space_distances():
    X = blobs(n=60, d=3, seed=1)
    Xn = blobs(n=7, d=3, seed=9)
    km = KernelKMeans(3, gamma=0.2, random_state=0).fit(X)
    D = np.empty((7, 3))
    for j in range(3):
        S = km.support_vectors_[km.support_labels_ == j]
        a = km.dual_coef_[km.support_labels_ == j]
        for i, x in enumerate(Xn):
            D[i, j] = (
                1.0
                - 2 * rbf_kernel(x[None], S, gamma=0.2)[0] @ a
                + a @ rbf_kernel(S, S, gamma=0.2) @ a
            )
    np.testing.assert_allclose(km.transform(Xn), D, atol=1e-12)
    np.testing.assert_array_equal(km.predict(Xn), D.argmin(1))
    np.testing.assert_allclose(km.score(Xn), -D.min(1).sum(), rtol=1e-12)


@pytest.mark.parametrize("kernel", ["rbf", "polynomial", "laplacian"])
def test_blockwise_equals_stored_matrix(kernel):
    X = blobs(n=200, seed=2)
    kw = dict(n_clusters=4, kernel=kernel, random_state=0, tol=0)
    stored = KernelKMeans(**kw).fit(X)
    # 200 * 200 * 8 bytes = 0.3 MiB > 0.1 MiB: blocks of rows, small ones.
    blocked = KernelKMeans(**kw, max_kernel_memory=0.1, working_memory=0.05).fit(X)
    np.testing.assert_array_equal(blocked.labels_, stored.labels_)
    np.testing.assert_allclose(blocked.inertia_, stored.inertia_, rtol=1e-10)
    assert blocked.n_iter_ == stored.n_iter_
    np.testing.assert_allclose(blocked.transform(X), stored.transform(X), atol=1e-10)


def test_precomputed_equals_kernel_path():
    X = blobs(n=150, seed=4)
    Xn = blobs(n=10, seed=5)
    gamma = 0.1
    km = KernelKMeans(3, gamma=gamma, random_state=0, n_init=2).fit(X)
    kp = KernelKMeans(3, kernel="precomputed", random_state=0, n_init=2)
    Dp = kp.fit_transform(rbf_kernel(X, gamma=gamma))
    np.testing.assert_array_equal(kp.labels_, km.labels_)
    np.testing.assert_allclose(kp.inertia_, km.inertia_, rtol=1e-10)
    np.testing.assert_allclose(Dp, km.transform(X), atol=1e-10)
    Kn = rbf_kernel(Xn, X, gamma=gamma)
    np.testing.assert_array_equal(kp.predict(Kn), km.predict(Xn))
    np.testing.assert_allclose(
        kp.transform(Kn, kernel_diag=np.ones(10)), km.transform(Xn), atol=1e-10
    )
    np.testing.assert_allclose(kp.score(Kn, kernel_diag=np.ones(10)), km.score(Xn), rtol=1e-10)
    # the old spelling is gone (removed in 0.2)
    with pytest.raises(TypeError, match="diag"):
        kp.transform(Kn, diag=np.ones(10))
    with pytest.raises(ValueError, match="diag"):
        kp.transform(Kn)
    # Explicit init as training indices equals explicit init as points.
    idx = np.array([3, 50, 100])
    a = KernelKMeans(3, kernel="precomputed", init=idx).fit(rbf_kernel(X, gamma=gamma))
    b = KernelKMeans(3, gamma=gamma, init=X[idx]).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)


def test_integer_sample_weight_equals_repetition():
    X = blobs(n=80, seed=6)
    rng = np.random.RandomState(0)
    reps = rng.randint(1, 4, len(X))
    init = X[[0, 1, 2]]
    a = KernelKMeans(3, gamma=0.1, init=init, tol=0).fit(X, sample_weight=reps)
    b = KernelKMeans(3, gamma=0.1, init=init, tol=0).fit(np.repeat(X, reps, axis=0))
    np.testing.assert_array_equal(np.repeat(a.labels_, reps), b.labels_)
    np.testing.assert_allclose(a.inertia_, b.inertia_, rtol=1e-10)
    np.testing.assert_allclose(a.center_norms_, b.center_norms_, rtol=1e-10)


def test_zero_weight_points_do_not_move_centers():
    X = blobs(n=60, seed=7)
    w = np.ones(60)
    w[::3] = 0
    init = X[[1, 2, 4]]
    a = KernelKMeans(3, kernel="linear", init=init, tol=0).fit(X, sample_weight=w)
    b = KernelKMeans(3, kernel="linear", init=init, tol=0).fit(X[w > 0])
    np.testing.assert_array_equal(a.labels_[w > 0], b.labels_)
    np.testing.assert_allclose(a.inertia_, b.inertia_, rtol=1e-10)
    assert not np.isin(np.flatnonzero(w == 0), a.support_).any()


def test_n_init_keeps_lowest_inertia():
    X = blobs(n=200, k=6, seed=8, spread=1.5)
    one = KernelKMeans(6, gamma=0.2, random_state=0, init="random").fit(X)
    many = KernelKMeans(6, gamma=0.2, random_state=0, init="random", n_init=5).fit(X)
    assert many.inertia_ <= one.inertia_ + 1e-12


def test_tol_stops_earlier_than_strict_convergence():
    X = blobs(n=300, k=8, seed=9, spread=1.0)
    strict = KernelKMeans(8, gamma=0.3, random_state=0, tol=0).fit(X)
    loose = KernelKMeans(8, gamma=0.3, random_state=0, tol=0.5).fit(X)
    assert loose.n_iter_ == 2 < strict.n_iter_
    # Labels are always the nearest centers of the returned centers.
    np.testing.assert_array_equal(loose.predict(X), loose.labels_)
    np.testing.assert_array_equal(strict.predict(X), strict.labels_)


def test_relocate_empty_moves_farthest_points():
    labels = np.array([0, 0, 0, 1, 1])
    mind = np.array([0.1, 5.0, 0.2, 0.3, 9.0])
    w = np.ones(5)
    new = _relocate_empty(labels, mind, w, 4)
    np.testing.assert_array_equal(new, [0, 3, 0, 1, 2])
    w[4] = 0  # a zero-weight point cannot fill a cluster
    new = _relocate_empty(labels, mind, w, 3)
    np.testing.assert_array_equal(new, [0, 2, 0, 1, 1])


def test_init_size_subsample_and_random_init():
    X = blobs(n=300, seed=10)
    for init in ["k-means++", "random"]:
        km = KernelKMeans(3, gamma=0.1, init=init, init_size=30, random_state=0).fit(X)
        assert km.labels_.shape == (300,)
        assert np.bincount(km.labels_, minlength=3).min() > 0


def test_float32_input():
    X = blobs(n=100, seed=11, dtype=np.float32)
    a = KernelKMeans(3, gamma=0.1, random_state=0).fit(X)
    b = KernelKMeans(3, gamma=0.1, random_state=0).fit(X.astype(np.float64))
    assert adjusted_rand_score(a.labels_, b.labels_) == 1.0
    np.testing.assert_allclose(a.inertia_, b.inertia_, rtol=1e-4)


# ---------------------------------------------------------------- graph kernels
def test_knn_kernel_equals_precomputed_matrix():
    X = blobs(n=120, seed=12)
    params = {"n_neighbors": 10}
    g = KernelKMeans(3, kernel="knn", kernel_params=params, random_state=0)
    Dg = g.fit_transform(X)
    p = KernelKMeans(3, kernel="precomputed", random_state=0)
    Dp = p.fit_transform(knn_kernel(X, 10).toarray())
    np.testing.assert_array_equal(g.labels_, p.labels_)
    np.testing.assert_allclose(Dg, Dp, atol=1e-12)
    assert g.kernel_.name == "knn"  # an index kernel, as in MiniBatchKernelKMeans
    assert not hasattr(g, "support_vectors_")


@pytest.mark.parametrize(
    ("kernel", "params", "flips"),
    [
        ("knn", {}, 0),
        ("heat", {"normalize": False}, 0),
        # A fitted point passed again is a new point linked to itself and its neighbours:
        # its features are close to its own, not equal, and one of the 60 lies on a
        # boundary between directions of the normalised features.
        ("heat", {}, 1),
    ],
)
def test_graph_kernels_predict_through_the_graph(kernel, params, flips):
    X = blobs(n=60, seed=13)
    km = KernelKMeans(3, kernel=kernel, kernel_params={"n_neighbors": 8, **params}, random_state=0)
    labels = km.fit_predict(X)
    np.testing.assert_array_equal(labels, km.labels_)
    # new points join the fitted graph: the fitted points are labelled as in the fit
    assert np.count_nonzero(km.predict(X) != km.labels_) <= flips
    D = km.transform(X)
    assert D.shape == (60, 3) and np.all(D >= 0)
    np.testing.assert_array_equal(D.argmin(1), km.predict(X))
    assert km.score(X) == pytest.approx(-np.min(D, axis=1).sum())
    del km.kernel_.extension  # a model without its graph cannot
    with pytest.raises(ValueError, match="transductive"):
        km.predict(X)


def test_heat_kernel_is_low_rank_with_its_parameters_recorded():
    from mbkkm.kernels import LowRankKernel, heat_kernel

    X = blobs(n=80, seed=14)
    km = KernelKMeans(
        3, kernel="heat", kernel_params={"n_neighbors": 8, "t": 2.0}, random_state=0
    ).fit(X)
    K = km.kernel_.matrix
    assert isinstance(K, LowRankKernel)
    params = km.kernel_.params
    assert km.t_ == params["t"] == 2.0 and params["n_neighbors"] == 8
    assert params["rank"] == K.rank and params["error"] == K.error
    # the same matrix as heat_kernel's low-rank path with the same parameters
    ref = heat_kernel(X, 8, 2.0, max_dense_bytes=0, normalize=True)
    np.testing.assert_allclose(K.toarray(), ref.toarray(), atol=1e-12)
    assert km.t_selection_.candidates.tolist() == [2.0]


# ------------------------------------------------------------------------ errors
def test_memory_error_before_any_kernel_work():
    calls = []

    def kernel(A, B):
        calls.append(1)
        return A @ B.T

    X = blobs(n=2000, seed=0)
    km = KernelKMeans(3, kernel=kernel, max_kernel_memory=1, working_memory=0.01)
    with pytest.raises(KernelMemoryError, match=r"GiB") as info:
        km.fit(X)
    assert isinstance(info.value, MemoryError) and isinstance(info.value, ValueError)
    assert calls == []


def test_blockwise_path_when_only_blocks_fit():
    X = blobs(n=500, seed=0)
    km = KernelKMeans(3, gamma=0.1, max_kernel_memory=1, working_memory=0.1, random_state=0).fit(X)
    ref = KernelKMeans(3, gamma=0.1, random_state=0).fit(X)
    np.testing.assert_array_equal(km.labels_, ref.labels_)


@pytest.mark.parametrize(
    ("K", "match"),
    [
        (np.ones((3, 4)), "square"),
        (np.array([[1.0, 0.5, 0], [0.1, 1, 0], [0, 0, 1]]), "symmetric"),
        (np.array([[1.0, 0, 0], [0, -1, 0], [0, 0, 1]]), "diagonal"),
        (np.array([[1.0, np.nan, 0], [np.nan, 1, 0], [0, 0, 1]]), "NaN"),
    ],
)
def test_precomputed_input_checks(K, match):
    with pytest.raises(ValueError, match=match):
        KernelKMeans(2, kernel="precomputed").fit(K)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        (dict(init=np.zeros((2, 4))), "init"),
        (dict(init_size=2), "init_size"),
        (dict(n_clusters=100), "n_samples"),
        (dict(max_kernel_memory=0), "max_kernel_memory"),
        (dict(kernel="nope"), "kernel"),
        (dict(gamma=0.1, kernel_params={"gamma": 3.0}), "both give the kernel's width"),
        (
            dict(kernel="poly", degree=2, kernel_params={"degree": 4}),
            "both give the kernel's degree",
        ),
        (
            dict(kernel="poly", degree=2, kernel_params={"degree": 3}),
            "both give the kernel's degree",
        ),
        (dict(kernel="sigmoid", coef0=0.5, kernel_params={"coef0": 2.0}), "kernel's coef0"),
    ],
)
def test_bad_parameters(params, match):
    base = dict(n_clusters=3)
    base.update(params)
    with pytest.raises(ValueError, match=match):
        KernelKMeans(**base).fit(blobs(n=50))


def test_precomputed_init_must_be_indices():
    K = rbf_kernel(blobs(n=20))
    with pytest.raises(ValueError, match="indices"):
        KernelKMeans(2, kernel="precomputed", init=np.zeros((2, 20))).fit(K)
    with pytest.raises(ValueError, match="indices"):
        KernelKMeans(2, kernel="precomputed", init=np.array([0, 25])).fit(K)


def test_explicit_init_with_n_init_warns():
    X = blobs(n=50)
    with pytest.warns(RuntimeWarning, match="only one init"):
        KernelKMeans(3, init=X[:3], n_init=3).fit(X)


# ----------------------------------------------------------------------- quality
# ------------------------------------------------------------------- conformance
@parametrize_with_checks(
    [KernelKMeans(3, max_iter=20, random_state=0)],
    expected_failed_checks=expected_failed_checks,
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_a_block_of_kernel_rows_holds_at_most_all_rows():
    """With the stored matrix refused (max_kernel_memory) and a large working_memory,
    a block is all n rows, not working_memory's worth: the plan is the fit's need (it
    refused a 3,000-point fit for 97.7 GiB of 2,177,999-row blocks)."""
    from sklearn.exceptions import EfficiencyWarning

    X = blobs(n=300)
    est = KernelKMeans(3, max_kernel_memory=0.01, working_memory=100_000, random_state=0)
    # said before the fit: each iteration computes the whole matrix again
    with pytest.warns(EfficiencyWarning, match=r"300 x 300 kernel matrix .* is not stored"):
        est.fit(X)
    assert "kernel rows (300 per block)" in est.memory_plan_.report()
    ref = KernelKMeans(3, random_state=0).fit(X)  # the stored matrix: the same model
    np.testing.assert_array_equal(est.labels_, ref.labels_)


def test_a_refit_on_a_stored_kernel_keeps_no_earlier_memory_plan():
    """An index kernel (precomputed, graph) is its own storage and has no memory plan;
    a refit to one kept the earlier point kernel's memory_plan_."""
    from sklearn.datasets import make_blobs
    from sklearn.metrics.pairwise import rbf_kernel

    X, _ = make_blobs(200, centers=3, random_state=0)
    km = KernelKMeans(3, random_state=0).fit(X)
    assert hasattr(km, "memory_plan_")
    km.set_params(kernel="precomputed").fit(rbf_kernel(X, gamma=0.1))
    assert not hasattr(km, "memory_plan_")
    km.set_params(kernel="heat").fit(X)
    assert not hasattr(km, "memory_plan_")
    assert hasattr(km.set_params(kernel="rbf").fit(X), "memory_plan_")
