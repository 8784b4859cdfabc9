"""The scikit-learn checks the estimators declare as failing
(:func:`mbkkm.cluster.expected_failed_checks`): each declared check really fails,
for the reason given, and passes once that reason is removed."""

import numpy as np
import pytest
from sklearn.utils.estimator_checks import (
    check_dataframe_column_names_consistency,
    check_sample_weight_equivalence_on_dense_data,
    check_sample_weight_equivalence_on_sparse_data,
)

from mbkkm import KernelKMeans, MiniBatchKernelKMeans, MiniBatchKMeans
from mbkkm.cluster import expected_failed_checks

DENSE = "check_sample_weight_equivalence_on_dense_data"
SPARSE = "check_sample_weight_equivalence_on_sparse_data"
NAMES = "check_dataframe_column_names_consistency"
CHECKS = {
    DENSE: check_sample_weight_equivalence_on_dense_data,
    SPARSE: check_sample_weight_equivalence_on_sparse_data,
    NAMES: check_dataframe_column_names_consistency,
}


@pytest.mark.parametrize(
    "estimator, declared",
    [
        (MiniBatchKernelKMeans(), {DENSE, SPARSE, NAMES}),
        (MiniBatchKernelKMeans(kernel="chi2"), {DENSE, NAMES}),  # chi2 takes no sparse X
        (MiniBatchKernelKMeans(kernel="knn"), {DENSE, NAMES}),
        (KernelKMeans(), {DENSE, SPARSE, NAMES}),
        (MiniBatchKMeans(), {DENSE, NAMES}),  # dense input only
    ],
)
def test_declared_checks(estimator, declared):
    checks = expected_failed_checks(estimator)
    assert set(checks) == declared
    assert all(
        r.startswith("sample_weight is not equivalent")
        for name, r in checks.items()
        if name != NAMES
    )
    assert checks[NAMES].startswith("a DataFrame with the fitted columns in another order")


def test_only_the_estimators():
    with pytest.raises(TypeError, match="got KMeans"):
        from sklearn.cluster import KMeans

        expected_failed_checks(KMeans())


@pytest.mark.parametrize(
    "estimator",
    [
        MiniBatchKernelKMeans(3, batch_size=16, tau=10, max_iter=5, random_state=0),
        KernelKMeans(3, max_iter=20, random_state=0),
        MiniBatchKMeans(3, batch_size=16, max_iter=5, random_state=0),
    ],
    ids=lambda e: type(e).__name__,
)
def test_declared_checks_really_fail(estimator):
    # A declaration that no longer fails is out of date: scikit-learn marks the
    # check xfail (not strict), so it would not say so itself.
    for name in expected_failed_checks(estimator):
        with pytest.raises(AssertionError):
            CHECKS[name](type(estimator).__name__, estimator)


@pytest.mark.parametrize("name", [DENSE, SPARSE])
def test_full_batch_weights_equal_repetitions_with_a_fixed_init(name):
    # The reason given for KernelKMeans: only the k-means++ draws differ. With the
    # check's own data and initial centers fixed, scikit-learn's check passes.
    X = np.random.RandomState(42).rand(15, 30)  # what the check fits (n = 15, d = 30)
    est = KernelKMeans(3, init=X[[0, 5, 10]], max_iter=50, random_state=0)
    CHECKS[name]("KernelKMeans", est)


NUMPY_SCALAR_PARAMS = [
    (KernelKMeans, dict(n_clusters=np.int32(3), max_iter=np.int16(20), n_init=np.int8(2))),
    (
        MiniBatchKernelKMeans,
        dict(
            n_clusters=np.int16(4),
            tau=np.uint8(200),
            batch_size=np.uint8(50),
            max_iter=np.int16(30),
            gamma=np.float32(0.5),
        ),
    ),
    (MiniBatchKMeans, dict(n_clusters=np.int16(3), batch_size=np.uint8(50), max_iter=np.int16(30))),
]


@pytest.mark.parametrize(("cls", "params"), NUMPY_SCALAR_PARAMS)
def test_numpy_scalar_parameters_give_the_python_number_model(cls, params):
    """np.int16(4) read from an array fits as 4 does (the memory plan's arithmetic
    overflowed in int16), and get_params still returns the objects given."""
    X = np.random.default_rng(0).normal(size=(600, 3))
    common = dict(random_state=0, working_memory=np.int16(100))
    est = cls(**params, **common).fit(X)
    plain = {k: np.asarray(v).item() for k, v in {**params, **common}.items()}
    ref = cls(**plain).fit(X)
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    np.testing.assert_array_equal(est.predict(X), ref.predict(X))
    np.testing.assert_array_equal(est.transform(X[:50]), ref.transform(X[:50]))
    assert est.score(X) == ref.score(X)
    assert all(type(est.get_params()[k]) is type(v) for k, v in params.items())


@pytest.mark.parametrize("cls", [KernelKMeans, MiniBatchKernelKMeans, MiniBatchKMeans])
def test_a_bool_count_is_refused_by_name(cls):
    X = np.random.default_rng(0).normal(size=(60, 2))
    for name in ("n_clusters", "max_iter", "batch_size", "tau"):
        if name not in cls().get_params():
            continue
        with pytest.raises(
            ValueError, match=f"'{name}' parameter of {cls.__name__} must be an int"
        ):
            cls(**{name: True}).fit(X)


def _kmeanspp_init(X, n_clusters, random_state):
    from sklearn.cluster import kmeans_plusplus

    return kmeans_plusplus(np.asarray(X), n_clusters, random_state=random_state)[0]


@pytest.mark.parametrize("cls", [KernelKMeans, MiniBatchKernelKMeans, MiniBatchKMeans])
def test_init_callable_and_n_init_auto_as_scikit_learn(cls, monkeypatch):
    """init(X, n_clusters, random_state) gives the model of the array it returns;
    n_init="auto" is 10 runs from "random" and 1 from k-means++ (scikit-learn's)."""
    from sklearn.datasets import make_blobs

    from mbkkm.cluster._base import ClusterEstimator

    runs = []
    n_init = ClusterEstimator._n_init
    monkeypatch.setattr(
        ClusterEstimator, "_n_init", lambda self: runs.append(n_init(self)) or runs[-1]
    )

    X, _ = make_blobs(300, random_state=0)
    given = _kmeanspp_init(X, 3, np.random.RandomState(0))
    a = cls(3, init=_kmeanspp_init, random_state=0, max_iter=10).fit(X)
    b = cls(3, init=given, random_state=0, max_iter=10).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    for init, n in (("random", 10), ("k-means++", 1)):
        auto = cls(3, init=init, n_init="auto", random_state=0, max_iter=5).fit(X)
        fixed = cls(3, init=init, n_init=n, random_state=0, max_iter=5).fit(X)
        np.testing.assert_array_equal(auto.labels_, fixed.labels_)
        assert runs[-2:] == [n, n]
    with pytest.raises(ValueError, match=r"^init: the initial centers should have shape"):
        cls(3, init=lambda X, k, random_state: X[:2]).fit(X)


@pytest.mark.parametrize("cls", [KernelKMeans, MiniBatchKernelKMeans, MiniBatchKMeans])
@pytest.mark.parametrize("init", [[1.0, 2.0], [["a", "b"], ["c", "d"]]])
def test_an_init_that_is_no_array_of_numbers_is_named(cls, init):
    X = np.random.default_rng(0).normal(size=(40, 2))
    with pytest.raises(ValueError, match=r"^init: the initial centers should be numbers"):
        cls(2, init=init).fit(X)


@pytest.mark.parametrize("cls", [KernelKMeans, MiniBatchKernelKMeans])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fit_transform_has_the_dtype_of_transform(cls, dtype):
    X = np.random.default_rng(0).normal(size=(200, 3)).astype(dtype)
    est = cls(3, random_state=0, max_iter=10)
    distances = est.fit_transform(X)
    assert distances.dtype == est.transform(X).dtype == dtype
    np.testing.assert_allclose(distances, est.transform(X), rtol=1e-4, atol=1e-5)
