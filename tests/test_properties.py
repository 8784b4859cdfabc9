"""Property-based tests (hypothesis) on small random inputs, deterministic in CI.

For every estimator: labels in range; ``transform`` non-negative and its argmin
equal to ``predict``; the objective (``score``) invariant to permuting the rows;
the same seed gives the same result; ``fit`` does not modify X or
``sample_weight``. For the kernel estimators: finite center coefficients that sum
to 1 per cluster (after renormalising when ``renormalize=False``), and cached
norms ``center_norms_`` equal to the norms recomputed from ``support_vectors_``,
``dual_coef_`` and ``support_labels_`` with :mod:`sklearn.metrics.pairwise`.
"""

from __future__ import annotations

import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sklearn.metrics.pairwise import pairwise_kernels

from _agreement import assert_same_labels
from mbkkm import KernelKMeans, MiniBatchKernelKMeans, MiniBatchKMeans
from mbkkm.cluster import EmptyClusterWarning

SETTINGS = settings(derandomize=True, max_examples=40, deadline=None)


@st.composite
def problems(draw):
    """(X, k, sample_weight or None, seed): 1 to 4 clusters, up to 40 points."""
    k = draw(st.integers(1, 4))
    n = draw(st.integers(max(k, 2), 40))
    d = draw(st.integers(1, 4))
    # a small grid of values, so duplicate points and ties are frequent
    X = draw(arrays(np.float64, (n, d), elements=st.integers(-6, 6).map(lambda v: v / 2)))
    weighted = draw(st.booleans())
    sw = None
    if weighted:
        sw = draw(arrays(np.float64, n, elements=st.sampled_from([0.0, 0.5, 1.0, 3.0])))
        if sw.sum() == 0:
            sw[0] = 1.0
    return X, k, sw, draw(st.integers(0, 2**16))


def _make(name, k, seed, **kw):
    if name == "MiniBatchKernelKMeans":
        params = dict(batch_size=8, tau=kw.pop("tau", 6), max_iter=4)
        return MiniBatchKernelKMeans(n_clusters=k, random_state=seed, **params, **kw)
    if name == "KernelKMeans":
        return KernelKMeans(n_clusters=k, random_state=seed, max_iter=20, **kw)
    return MiniBatchKMeans(n_clusters=k, random_state=seed, batch_size=8, max_iter=4, **kw)


NAMES = st.sampled_from(["MiniBatchKernelKMeans", "KernelKMeans", "MiniBatchKMeans"])


def _fit(est, X, sw=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmptyClusterWarning)
        return est.fit(X, sample_weight=sw)


@SETTINGS
@given(problems(), NAMES)
def test_labels_transform_predict(problem, name):
    X, k, sw, seed = problem
    est = _fit(_make(name, k, seed), X, sw)
    n = X.shape[0]
    assert est.labels_.shape == (n,)
    assert est.labels_.min() >= 0 and est.labels_.max() < k
    D = est.transform(X)
    assert D.shape == (n, k) and not np.any(np.isnan(D)) and np.all(D >= 0)
    # KernelKMeans: a cluster that no positive-weight point can fill (fewer such
    # points than clusters) has no center, and every distance to it is +inf.
    assert np.all(np.isfinite(D[:, np.isfinite(D).any(axis=0)]))
    if name != "KernelKMeans" or (n if sw is None else np.count_nonzero(sw)) >= k:
        assert np.all(np.isfinite(D))
    labels = est.predict(X)
    np.testing.assert_array_equal(np.argmin(D, axis=1), labels)
    # labels_ are the nearest centers of the final model (up to exact ties)
    best = D[np.arange(n), labels]
    np.testing.assert_allclose(D[np.arange(n), est.labels_], best, rtol=1e-9, atol=1e-9)
    assert np.isfinite(est.inertia_) and est.inertia_ >= 0


@SETTINGS
@given(
    problems(),
    st.sampled_from(["rbf", "linear", "poly"]),
    st.booleans(),
    st.sampled_from([1, 3, 50]),
)
def test_window_coefficients_and_cached_norms(problem, kernel, renormalize, tau):
    X, k, sw, seed = problem
    est = _fit(
        _make("MiniBatchKernelKMeans", k, seed, kernel=kernel, renormalize=renormalize, tau=tau),
        X,
        sw,
    )
    coef = est.dual_coef_
    assert np.all(np.isfinite(coef)) and np.all(coef >= 0)
    sums = np.bincount(est.support_labels_, weights=coef, minlength=k)
    assert np.all(sums > 0)
    # renormalised coefficients sum to 1 per cluster
    renorm = coef / sums[est.support_labels_]
    np.testing.assert_allclose(np.bincount(est.support_labels_, weights=renorm, minlength=k), 1.0)
    if renormalize:
        np.testing.assert_allclose(sums, 1.0)
    _check_norms(est, k)


@SETTINGS
@given(problems(), st.sampled_from(["rbf", "linear"]))
def test_kernel_kmeans_coefficients_and_norms(problem, kernel):
    X, k, sw, seed = problem
    est = _fit(_make("KernelKMeans", k, seed, kernel=kernel), X, sw)
    assert np.all(np.isfinite(est.dual_coef_))
    sums = np.bincount(est.support_labels_, weights=est.dual_coef_, minlength=k)
    nonempty = est.n_support_ > 0
    np.testing.assert_allclose(sums[nonempty], 1.0)
    _check_norms(est, k, only=nonempty)


def _check_norms(est, k, only=None):
    """center_norms_ against a^T K(S_j, S_j) a from sklearn.metrics.pairwise."""
    kern = est.kernel_
    S, a, lab = est.support_vectors_, est.dual_coef_, est.support_labels_
    G = pairwise_kernels(S, S, metric=kern.name, filter_params=True, **kern.params)
    recomputed = np.array(
        [a[lab == j] @ G[np.ix_(lab == j, lab == j)] @ a[lab == j] for j in range(k)]
    )
    got = est.center_norms_
    if only is not None:
        recomputed, got = recomputed[only], got[only]
    scale = max(1.0, float(np.abs(G).max()))
    np.testing.assert_allclose(got, recomputed, rtol=1e-7, atol=1e-9 * scale)


@SETTINGS
@given(problems(), NAMES, st.randoms(use_true_random=False))
def test_objective_invariant_to_row_order(problem, name, rnd):
    X, k, sw, seed = problem
    est = _fit(_make(name, k, seed), X, sw)
    perm = np.arange(X.shape[0])
    rnd.shuffle(perm)
    w = None if sw is None else sw[perm]
    s0 = est.score(X, sample_weight=sw)
    s1 = est.score(X[perm], sample_weight=w)
    assert s1 == np.float64(s1) and np.isclose(s0, s1, rtol=1e-10, atol=1e-10)
    # A row's distances may round differently at another position of the product
    # (BLAS kernels treat a block's last rows apart), and the grid makes exact ties
    # frequent: the labels agree off ties, and at a tie both are a nearest center.
    assert_same_labels(
        est.predict(X)[perm], est.predict(X[perm]), est.transform(X[perm]), rtol=1e-9
    )


@SETTINGS
@given(problems(), NAMES)
def test_same_seed_same_result(problem, name):
    X, k, sw, seed = problem
    a = _fit(_make(name, k, seed), X, sw)
    b = _fit(_make(name, k, seed), X, sw)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert a.inertia_ == b.inertia_
    np.testing.assert_array_equal(a.transform(X), b.transform(X))


@SETTINGS
@given(problems(), NAMES)
def test_fit_does_not_modify_inputs(problem, name):
    X, k, sw, seed = problem
    X0 = X.copy()
    sw0 = None if sw is None else sw.copy()
    est = _fit(_make(name, k, seed), X, sw)
    np.testing.assert_array_equal(X, X0)
    if sw is not None:
        np.testing.assert_array_equal(sw, sw0)
    if name != "KernelKMeans":
        est.partial_fit(X, sample_weight=sw)
        np.testing.assert_array_equal(X, X0)
    est.score(X, sample_weight=sw)
    np.testing.assert_array_equal(X, X0)
