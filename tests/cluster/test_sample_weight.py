"""Sample weights that mean weights (issue 40).

- Unit weights are no weights: ``fit(X, sample_weight=ones)`` gives the model of
  ``fit(X)`` bit for bit (same width, batches, start, centers, labels), for the
  three estimators on every input kind they take (dense, scipy.sparse, Dask,
  torch on the CPU), and ``partial_fit`` and ``score`` agree too.
- Integer weights are repeated rows: the mini-batch estimators draw batches with
  probability proportional to the weights (unit weights in the update), so a fit
  with weights w and a fit on the rows repeated w times have the same
  *distribution* of models over seeds; the tests compare the two distributions of
  the fitted objective over seeds (and check that the comparison sees a fit that
  ignores the weights). KernelKMeans is deterministic once started: the same
  objective from every seed.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.stats import ks_2samp
from sklearn.datasets import make_blobs

from mbkkm import KernelKMeans, MiniBatchKernelKMeans, MiniBatchKMeans

# The default width (gamma=None: "auto" here; its sample, 500 of the 600 points, is
# drawn by the weights when there are weights) and the default k-means++ start, so
# the width's sample, the start and the batches all run.
ESTIMATORS = {
    "MiniBatchKernelKMeans": lambda: MiniBatchKernelKMeans(
        3, batch_size=32, tau=20, max_iter=15, n_init=2, random_state=0
    ),
    "MiniBatchKernelKMeans-untruncated": lambda: MiniBatchKernelKMeans(
        3, batch_size=32, tau=None, max_iter=15, random_state=0
    ),
    "KernelKMeans": lambda: KernelKMeans(3, random_state=0),
    "MiniBatchKMeans": lambda: MiniBatchKMeans(
        3, batch_size=32, max_iter=15, n_init=2, random_state=0
    ),
}
# What each estimator does not take (refused with a ValueError / TypeError).
REFUSED = {
    ("MiniBatchKernelKMeans-untruncated", "dask"),
    ("MiniBatchKernelKMeans-untruncated", "torch"),
    ("MiniBatchKMeans", "sparse"),
}
KERNEL_ATTRS = (
    "gamma_",
    "support_vectors_",
    "dual_coef_",
    "support_labels_",
    "n_support_",
    "center_norms_",
    "labels_",
    "inertia_",
    "n_iter_",
)
SELECTION_FIELDS = (
    "gamma",
    "candidates",
    "scores",
    "seed_scores",
    "sample_indices",
    "sample_labels",
)


def _blobs():
    X, _ = make_blobs(600, centers=3, n_features=4, cluster_std=1.5, random_state=0)
    return np.abs(X)  # non-negative, so the sparse copy below keeps some structure


def _input(kind):
    """(X, unit weights) of one input kind, the weights in X's array library."""
    X = _blobs()
    ones = np.ones(X.shape[0])
    if kind == "sparse":
        return sp.csr_matrix(np.where(X > 3, X, 0.0)), ones
    if kind == "dask":
        da = pytest.importorskip("dask.array")
        return da.from_array(X, chunks=(200, 4)), ones
    if kind == "torch":
        torch = pytest.importorskip("torch")
        return torch.from_numpy(X), torch.from_numpy(ones)
    return X, ones


def _host(value):
    """An attribute as a host value (tensors read back, Dask computed, CSR densified)."""
    if hasattr(value, "compute"):
        value = value.compute()
    if sp.issparse(value):
        return value.toarray()
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return value


def _assert_same_model(a, b, inertia_scale=1.0):
    attrs = (
        ("cluster_centers_", "labels_", "inertia_", "n_iter_")
        if isinstance(a, MiniBatchKMeans)
        else KERNEL_ATTRS
    )
    attrs = tuple(name for name in attrs if name != "inertia_")
    assert b.inertia_ == a.inertia_ * inertia_scale
    if hasattr(a, "batch_objective_"):
        attrs += ("batch_objective_",)
    for name in attrs:
        np.testing.assert_array_equal(
            _host(getattr(a, name)), _host(getattr(b, name)), err_msg=name
        )
    sa, sb = getattr(a, "gamma_selection_", None), getattr(b, "gamma_selection_", None)
    assert (sa is None) == (sb is None)
    if sa is not None:
        for name in SELECTION_FIELDS:
            np.testing.assert_array_equal(getattr(sa, name), getattr(sb, name), err_msg=name)


def _fit(est, X, sample_weight=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the width's grid-end warning
        return est.fit(X, sample_weight=sample_weight)


@pytest.mark.parametrize("kind", ["dense", "sparse", "dask", "torch"])
@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_unit_weights_are_no_weights(name, kind):
    X, ones = _input(kind)
    if (name, kind) in REFUSED:
        with pytest.raises((ValueError, TypeError)):
            ESTIMATORS[name]().fit(X)
        return
    a = _fit(ESTIMATORS[name](), X)
    b = _fit(ESTIMATORS[name](), X, ones)
    if isinstance(a, MiniBatchKMeans):
        assert a.cluster_centers_.shape == (3, 4)
    else:
        assert a.gamma_selection_ is not None  # the automatic width ran
    _assert_same_model(a, b)
    assert a.score(X) == a.score(X, sample_weight=ones)
    if name in ("MiniBatchKernelKMeans", "MiniBatchKMeans"):  # the weights of one batch
        a.partial_fit(X)
        b.partial_fit(X, sample_weight=ones)
        _assert_same_model(a, b)


def test_unit_weights_select_the_same_width():
    from mbkkm.cluster import select_gamma

    X = _blobs()
    a = select_gamma(X, 3, random_state=0)
    b = select_gamma(X, 3, random_state=0, sample_weight=np.ones(len(X)))
    for name in SELECTION_FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.mark.parametrize("kind", ["dense", "dask", "torch"])
@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_constant_weights_are_no_weights_in_a_fit(name, kind):
    """A fit depends on its weights relative to one another: constant weights c give
    the model of none, with inertia_ c times its inertia (scikit-learn's KMeans and
    MiniBatchKMeans do the same); score keeps the weights it is given."""
    X, ones = _input(kind)
    if (name, kind) in REFUSED:
        return
    a = _fit(ESTIMATORS[name](), X)
    b = _fit(ESTIMATORS[name](), X, 3 * ones)
    _assert_same_model(a, b, inertia_scale=3.0)
    assert b.score(X, sample_weight=3 * ones) == pytest.approx(3 * a.score(X), rel=1e-12)


def test_other_weights_still_weigh():
    """Weights that are not all equal are weights: they change the draws."""
    X = _blobs()
    est = MiniBatchKernelKMeans(3, gamma=0.05, batch_size=32, tau=20, max_iter=15, random_state=0)
    a = est.fit(X).batch_objective_
    w = np.where(np.arange(len(X)) % 2 == 0, 1.0, 2.0)
    b = est.fit(X, sample_weight=w).batch_objective_
    assert not np.array_equal(a, b)


def test_constant_weights_in_partial_fit_still_weigh_against_other_batches():
    """partial_fit keeps a batch's weights: constant in one batch, they still count
    against the other batches' (the running counts of the classic rate)."""
    X = _blobs()
    kw = dict(gamma=0.05, tau=20, learning_rate="classic", random_state=0)
    a = MiniBatchKernelKMeans(3, **kw)
    b = MiniBatchKernelKMeans(3, **kw)
    a.partial_fit(X[:300])
    b.partial_fit(X[:300], sample_weight=np.full(300, 5.0))
    a.partial_fit(X[300:])
    b.partial_fit(X[300:])
    assert not np.array_equal(a.center_norms_, b.center_norms_)


# ------------------------------------------------ integer weights = repeated rows


def _weighted_problem():
    """Two groups: A (sub-groups at x = 0, weight 3, and x = 2, weight 1) and B at
    x = 12 (weights 1 to 3). Ignoring the weights moves A's center from about 0.5 to
    about 1, which the weighted objective sees."""
    rng = np.random.RandomState(0)
    X = np.r_[
        rng.normal([0, 0], 0.3, (20, 2)),
        rng.normal([2, 0], 0.3, (20, 2)),
        rng.normal([12, 0], 0.5, (20, 2)),
    ]
    w = np.r_[np.full(20, 3), np.full(20, 1), rng.randint(1, 4, 20)].astype(np.float64)
    return X, w, np.repeat(X, w.astype(int), axis=0)


def _mini_batch(name, seed, n_repeated):
    # init_size covers the repeated rows, so both starts are k-means++ on all the data
    # (on a smaller subsample the two draw their subsamples differently: the
    # weighted fit among the distinct rows, the repeated fit among the copies).
    kw = dict(batch_size=16, max_iter=30, init_size=n_repeated, random_state=seed)
    if name == "MiniBatchKMeans":
        return MiniBatchKMeans(2, **kw)
    return MiniBatchKernelKMeans(2, gamma=0.02, tau=None if name == "untruncated" else 20, **kw)


@pytest.mark.parametrize("name", ["MiniBatchKernelKMeans", "untruncated", "MiniBatchKMeans"])
def test_integer_weights_are_repeated_rows_in_distribution(name):
    X, w, Xr = _weighted_problem()
    seeds = range(40)

    def objectives(data, weights):
        return np.array(
            [
                -_fit(_mini_batch(name, s, len(Xr)), data, weights).score(X, sample_weight=w)
                for s in seeds
            ]
        )

    weighted, repeated, ignored = objectives(X, w), objectives(Xr, None), objectives(X, None)
    # The same distribution: a two-sample Kolmogorov-Smirnov test does not reject it.
    # Measured with these seeds: p = 0.77 for all three estimators; with 300-400
    # seeds p = 0.52-0.58 and means equal within 0.2 % (MiniBatchKMeans 80.77 vs
    # 80.67, tau=None 3.134 vs 3.130).
    assert ks_2samp(weighted, repeated).pvalue > 0.05
    # ... and the test sees weights that are ignored (p = 3e-8 measured).
    assert ks_2samp(ignored, repeated).pvalue < 1e-4
    assert ignored.mean() > repeated.mean()


def test_kernel_kmeans_integer_weights_are_repeated_rows():
    """Full batch: from k-means++ on all points, every seed ends at the repeated
    rows' partition, with their objective (to rounding)."""
    X, w, Xr = _weighted_problem()
    for seed in range(5):
        a = KernelKMeans(2, gamma=0.02, random_state=seed).fit(X, sample_weight=w)
        b = KernelKMeans(2, gamma=0.02, random_state=seed).fit(Xr)
        np.testing.assert_array_equal(
            np.repeat(a.labels_, w.astype(int)) == a.labels_[0], b.labels_ == b.labels_[0]
        )
        assert a.inertia_ == pytest.approx(b.inertia_, rel=1e-10)
        unweighted = KernelKMeans(2, gamma=0.02, random_state=seed).fit(X)
        assert -unweighted.score(X, sample_weight=w) > a.inertia_ * 1.1


def test_unit_weights_graph_kernels_and_select_t():
    """The heat kernel's time t is chosen on a weighted sample too."""
    from sklearn.datasets import make_moons

    from mbkkm.cluster import select_t
    from mbkkm.kernels import KNNGraph
    from mbkkm.kernels._spectral import GraphSpectrum

    X, _ = make_moons(400, noise=0.05, random_state=0)
    ones = np.ones(len(X))
    for make in (
        lambda: KernelKMeans(2, kernel="heat", random_state=0),
        lambda: MiniBatchKernelKMeans(
            2, kernel="heat", batch_size=64, tau=20, max_iter=10, random_state=0
        ),
    ):
        a, b = _fit(make(), X), _fit(make(), X, ones)
        assert a.t_ == b.t_
        for name in ("labels_", "dual_coef_", "support_labels_", "inertia_"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    spectrum = GraphSpectrum(KNNGraph(10).fit(X), 41)
    a = select_t(spectrum, 2, sample_size=200, random_state=0)  # a sample: drawn by weights
    b = select_t(spectrum, 2, sample_size=200, random_state=0, sample_weight=ones)
    assert a.t == b.t
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.labels, b.labels)


def test_checkpoint_of_an_unweighted_fit_resumes_a_constant_weight_fit(tmp_path):
    """Unit and constant weights are the same fit, so the same checkpoint (inertia_
    scaled); other weights are refused (see also test_checkpoint.py)."""
    pytest.importorskip("skops")
    X = _blobs()
    path = tmp_path / "fit.ckpt"
    kw = dict(n_clusters=3, gamma=0.05, batch_size=32, tau=20, max_iter=10, random_state=0)
    a = MiniBatchKernelKMeans(**kw).fit(X, checkpoint=path)
    b = MiniBatchKernelKMeans(**kw).fit(X, sample_weight=np.ones(len(X)), checkpoint=path)
    _assert_same_model(a, b)
    c = MiniBatchKernelKMeans(**kw).fit(X, sample_weight=np.full(len(X), 2.0), checkpoint=path)
    _assert_same_model(a, c, inertia_scale=2.0)
    w = np.where(np.arange(len(X)) % 2 == 0, 1.0, 2.0)
    with pytest.raises(ValueError, match="written by another fit"):
        MiniBatchKernelKMeans(**kw).fit(X, sample_weight=w, checkpoint=path)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_weights_that_sum_to_infinity_are_refused(name):
    """Each weight finite, their float64 sum not: inertia_ was inf, score -inf."""
    X = np.random.default_rng(0).normal(size=(40, 2))
    with pytest.raises(ValueError, match="sample_weight sums to infinity"):
        ESTIMATORS[name]().fit(X, sample_weight=np.full(40, 1e308))


@pytest.mark.parametrize("name", ["MiniBatchKernelKMeans", "MiniBatchKMeans"])
def test_fewer_weighted_points_than_clusters_warn(name):
    """Three points of positive weight and five clusters: two centers can only start
    at points of zero weight (which no batch draws); said, where it was silent."""
    import warnings

    import mbkkm

    X = np.random.RandomState(0).normal(size=(300, 4))
    w = np.zeros(300)
    w[[10, 150, 290]] = 1.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        getattr(mbkkm, name)(5, max_iter=5, random_state=0).fit(X, sample_weight=w)
    said = [str(c.message) for c in caught if "positive weight" in str(c.message)]
    assert len(said) == 1 and "gives 3 points a positive weight" in said[0], said
    with warnings.catch_warnings(record=True) as caught:  # partial_fit's first call too
        warnings.simplefilter("always")
        getattr(mbkkm, name)(5, random_state=0).partial_fit(X, sample_weight=w)
    assert [c for c in caught if "gives 3 points a positive weight" in str(c.message)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w[[20, 40]] = 1.0
        getattr(mbkkm, name)(5, max_iter=5, random_state=0).fit(X, sample_weight=w)
    assert not [c for c in caught if "positive weight" in str(c.message)]


@pytest.mark.parametrize("device", [None, "torch-cpu"])
def test_a_cluster_taking_the_whole_weighted_batch_has_rate_one(device):
    """The adaptive rate sqrt(b_j / b) is 1 for a cluster that takes the whole batch;
    with weights b_j (per cluster) and b (the weights' sum) were added in two orders,
    alpha came out 1 - 1e-16, and the old blocks stayed with weight 1e-16: twice the
    support in some iterations, on other iterations on the host and on torch (a code
    review). Oracle: k = 1, each call's window is its own chunk."""
    if device is not None:
        pytest.importorskip("torch")
    rng = np.random.RandomState(0)
    est = MiniBatchKernelKMeans(1, tau=1000, gamma=0.5, device=device, random_state=0)
    for _ in range(12):
        est.partial_fit(rng.rand(100, 3), sample_weight=rng.uniform(0.5, 2, 100))
        assert est.support_vectors_.shape[0] == 100
