"""Hostile input at every public entry point: a clear error or a correct result.

Each case either raises an exception of the expected type whose message names the
offending parameter (or input), or gives a correct result (labels in range,
finite non-negative distances and inertia). The data cases (``X1``-``X39``) run
through every estimator (MiniBatchKernelKMeans, KernelKMeans, MiniBatchKMeans)
and every method that takes data: ``fit``, ``partial_fit`` (mini-batch
estimators), ``fit_predict`` and, on a model fitted on clean data, ``predict``,
``transform`` and ``score``.

Data X (every estimator, every method)
    X1 NaN; X2 +inf; X3 -inf; X4 empty (0, 3); X5 zero features (30, 0);
    X6 one sample (fit: fewer samples than clusters; predict: fine);
    X7 one feature (fit fine; predict: wrong number of features);
    X8 1-D array; X9 3-D array; X10 complex; X11 non-numeric strings;
    X12 numeric strings; X13 object dtype holding floats; X14 object dtype
    holding None; X15 int64; X16 bool; X17 float16; X18 float32 (kept float32 by
    the mini-batch estimators); X19 list of lists; X20 tuple of tuples;
    X21 pandas DataFrame (``feature_names_in_``); X22 DataFrame with int and float
    columns; X23 DataFrame with a string column; X24 Fortran-ordered;
    X25 strided view; X26 read-only; X27 huge values 1e30 (exp() would overflow
    without the clipped, data-driven Gaussian); X28 1e200 (squared norms overflow
    float64: clear error); X29 float32 at 1e20 (squared norms overflow float32:
    clear error); X30 tiny values 1e-300 (squared norms underflow: clear error in fit,
    predict labels them); X31 all points identical;
    X32 many duplicate points; X33-X39 scipy sparse csr, csc, coo, lil, dok, bsr,
    dia (the kernel estimators convert them to CSR once and work on it; MiniBatchKMeans:
    "dense data is required").

Feature names
    F1 fit on a DataFrame, predict on one with other column names (error);
    F2 fit on a DataFrame, predict on an ndarray (warning);
    F3 fit on an ndarray, predict on a DataFrame (warning);
    F4 wrong number of features at predict (error).

Parameters and weights
    P1 n_clusters larger than the number of distinct points (EmptyClusterWarning);
    P2 n_clusters larger than n_samples (error); P3 batch_size larger than n
    (capped); P4 tau smaller than one batch; P5 tau=1; P6 init array of the wrong
    shape; P7 n_clusters=0; P8 batch_size=0;
    W1 sample weights with zeros (zero-weight points never enter a center);
    W2 all zeros; W3 negative; W4 NaN; W5 inf; W6 wrong length; W7 2-D;
    W8 zeros at score time; W9 an initialisation subsample made only of
    zero-weight points (used to fail with a 0 / 0 in the seeding).

Callable kernels (MiniBatchKernelKMeans, KernelKMeans)
    C1 raises; C2 returns NaN; C3 returns inf; C4 not symmetric (result still
    finite, distances clipped at 0); C5 not positive semi-definite (negative
    squared distances clipped, inertia >= 0); C6 wrong shape; C7 complex values;
    C8 strings; C9 raises KeyboardInterrupt at its 5th call (propagates, the
    estimator keeps its previous fitted state).

Precomputed kernel matrices (MiniBatchKernelKMeans, KernelKMeans)
    K1 not square; K2 not symmetric; K3 negative diagonal; K4 NaN; K5 predict with
    K(X_new, X_fit) of the wrong shape; K6 sparse matrix (accepted by both kernel estimators,
    the same labels as the dense matrix);
    K7 1-D.

Kernel functions (mbkkm.kernels)
    R1 unknown kernel name; R2 kernel neither str nor callable; R3 gamma < 0;
    R4 gamma NaN; R5 gamma a bool; R6 kernel_params not a dict; R7 unknown
    kernel_params key; R8 chi2 on negative data; R9 degree < 0; R10 coef0 a str;
    G1 knn n_neighbors=0; G2 knn n_neighbors > n; G3 knn n_neighbors a float;
    G4 knn with NaN data; G5 knn with one sample; G6 heat t <= 0; G7 heat form
    unknown; G8 graph_kernel_matrix unknown name; G9 graph kernel without
    n_neighbors; G10 kernel_gamma on an empty array; G11 kernel_gamma of a
    precomputed matrix with a negative diagonal; G12 kernel_block with float
    indices; G13 kernel_block of a non-square matrix; G14 kernel_gamma with a
    string kernel on complex data.

Dataset loaders (mbkkm.datasets)
    D1 unknown name; D2 name not a str; D3 download not a bool; D4 unknown
    preprocess; D5 dtype not a dtype; D6 missing file, download=False; D7 corrupt
    file; D8 file holding a 3-D X; D9 make_blobs n_samples < 1; D10 make_blobs
    n_samples a float; D11 make_circles noise < 0; D12 make_moons dtype int;
    D13 make_shells n_shells=0; D14 make_circles factor=1.

Command line (click's CliRunner)
    L1 CSV with NaN; L2 non-numeric column; L3 empty file; L4 --n-clusters larger
    than the rows; L5 complex .npy; L6 3-D .npy; L7 --gamma -1; L8 --n-clusters 0;
    L9 missing file; L10 .npz without the key; L11 ragged CSV; L12 all rows
    identical (runs, exit 0); L13 an empty cell; L14 inf; L15 a row with a
    surplus field when a column is dropped; L16 a Parquet text column; L17 a
    one-column file and a 20,000-column header (run, exit 0); L18 --columns
    naming no column.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from click.testing import CliRunner
from sklearn.utils import assert_all_finite

from mbkkm import KernelKMeans, MiniBatchKernelKMeans, MiniBatchKMeans
from mbkkm.cluster import EmptyClusterWarning
from mbkkm.datasets import (
    DatasetFormatError,
    DatasetNotFoundError,
    load_dataset,
    make_blobs,
    make_circles,
    make_moons,
    make_shells,
)
from mbkkm.kernels import (
    graph_kernel_matrix,
    heat_kernel,
    kernel_block,
    kernel_gamma,
    knn_kernel,
    resolve_kernel,
)

N, D, K = 30, 3, 3


def _clean(seed=0):
    return np.random.RandomState(seed).randn(N, D)


def _mbkkm(**kw):
    params = dict(n_clusters=K, batch_size=16, tau=10, max_iter=4, random_state=0)
    return MiniBatchKernelKMeans(**{**params, **kw})


def _kkm(**kw):
    return KernelKMeans(**{**dict(n_clusters=K, max_iter=20, random_state=0), **kw})


def _mbkm(**kw):
    params = dict(n_clusters=K, batch_size=16, max_iter=4, random_state=0)
    return MiniBatchKMeans(**{**params, **kw})


ESTIMATORS = {"MiniBatchKernelKMeans": _mbkkm, "KernelKMeans": _kkm, "MiniBatchKMeans": _mbkm}
KERNEL_ESTIMATORS = {k: v for k, v in ESTIMATORS.items() if k != "MiniBatchKMeans"}


def _check_labels(labels, n, k=K):
    labels = np.asarray(labels)
    assert labels.shape == (n,)
    assert labels.min() >= 0 and labels.max() < k


def _check_fitted(est, n):
    _check_labels(est.labels_, n, est.n_clusters)
    assert np.isfinite(est.inertia_) and est.inertia_ >= 0


# ------------------------------------------------------------------------ data cases
@dataclass
class Case:
    make: object  # () -> X
    fit: tuple | None = None  # (exception, match) for fit; None: a correct result
    new: tuple | None = "same"  # for predict/transform/score; "same": as fit
    kernel_ok: bool = False  # the kernel estimators give a correct result (sparse X)

    def expect_fit(self, name):
        return None if self.kernel_ok and name in KERNEL_ESTIMATORS else self.fit

    def expect_new(self, name):
        return self.expect_fit(name) if self.new == "same" else self.new


def _with(value, where=(0, 0)):
    def make():
        X = _clean()
        X[where] = value
        return X

    return make


def _sparse(fmt):
    return lambda: sp.random(N, D, density=0.5, format=fmt, random_state=0)


def _readonly():
    X = _clean()
    X.flags.writeable = False
    return X


def _object_none():
    X = _clean().astype(object)
    X[0, 0] = None
    return X


DENSE = (TypeError, "dense data is required")  # MiniBatchKMeans on sparse X
CASES = {
    "X1-nan": Case(_with(np.nan), (ValueError, "NaN")),
    "X2-inf": Case(_with(np.inf), (ValueError, "infinity")),
    "X3-neg-inf": Case(_with(-np.inf), (ValueError, "infinity")),
    "X4-empty": Case(lambda: np.empty((0, D)), (ValueError, "0 sample")),
    "X5-zero-features": Case(lambda: np.empty((N, 0)), (ValueError, "0 feature")),
    "X6-one-sample": Case(lambda: _clean()[:1], (ValueError, "n_samples=1"), None),
    "X7-one-feature": Case(lambda: _clean()[:, :1], None, (ValueError, "features")),
    "X8-1d": Case(lambda: _clean()[:, 0], (ValueError, "X must be 2-D")),
    "X9-3d": Case(lambda: _clean()[:, :, None], (ValueError, "dim 3")),
    "X10-complex": Case(lambda: _clean() + 1j, (ValueError, "Complex data")),
    "X11-strings": Case(lambda: np.full((N, D), "a"), (ValueError, "column 0 is not numeric")),
    "X12-numeric-strings": Case(lambda: _clean().astype(str)),
    "X13-object": Case(lambda: _clean().astype(object)),
    "X14-object-none": Case(_object_none, (ValueError, "NaN")),
    "X15-int": Case(lambda: (10 * _clean()).astype(np.int64)),
    "X16-bool": Case(lambda: _clean() > 0),
    "X17-float16": Case(lambda: _clean().astype(np.float16)),
    "X18-float32": Case(lambda: _clean().astype(np.float32)),
    "X19-list": Case(lambda: _clean().tolist()),
    "X20-tuple": Case(lambda: tuple(map(tuple, _clean()))),
    "X21-dataframe": Case(lambda: pd.DataFrame(_clean(), columns=list("abc"))),
    "X22-dataframe-mixed": Case(
        lambda: pd.DataFrame(
            {"a": np.arange(N), "b": _clean()[:, 1], "c": _clean()[:, 2].astype(np.float32)}
        )
    ),
    "X23-dataframe-str": Case(
        lambda: pd.DataFrame({"a": ["x"] * N, "b": _clean()[:, 1], "c": _clean()[:, 2]}),
        (ValueError, "column 'a' is not numeric"),
    ),
    "X24-fortran": Case(lambda: np.asfortranarray(_clean())),
    "X25-strided": Case(lambda: np.random.RandomState(0).randn(2 * N, 2 * D)[::2, ::2]),
    "X26-readonly": Case(_readonly),
    "X27-huge-1e30": Case(lambda: 1e30 * _clean()),
    "X28-huge-1e200": Case(lambda: 1e200 * _clean(), (ValueError, "too large")),
    "X29-float32-1e20": Case(
        lambda: (1e20 * _clean()).astype(np.float32), (ValueError, "too large")
    ),
    "X30-tiny-1e-300": Case(lambda: 1e-300 * _clean(), (ValueError, "too small"), new=None),
    "X31-identical": Case(lambda: np.ones((N, D))),
    "X32-duplicates": Case(lambda: np.repeat(_clean()[:5], 6, axis=0)),
    "X33-csr": Case(_sparse("csr"), DENSE, kernel_ok=True),
    "X34-csc": Case(_sparse("csc"), DENSE, kernel_ok=True),
    "X35-coo": Case(_sparse("coo"), DENSE, kernel_ok=True),
    "X36-lil": Case(_sparse("lil"), DENSE, kernel_ok=True),
    "X37-dok": Case(_sparse("dok"), DENSE, kernel_ok=True),
    "X38-bsr": Case(_sparse("bsr"), DENSE, kernel_ok=True),
    "X39-dia": Case(_sparse("dia"), DENSE, kernel_ok=True),
}

FIT_METHODS = ["fit", "partial_fit", "fit_predict"]
NEW_METHODS = ["predict", "transform", "score"]


def _run_fit(est, method, X):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmptyClusterWarning)
        return getattr(est, method)(X)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize(
    "name, method",
    [
        (name, method)
        for name in ESTIMATORS
        for method in FIT_METHODS
        if not (name == "KernelKMeans" and method == "partial_fit")  # no partial_fit
    ],
)
def test_hostile_training_data(name, method, case):
    c = CASES[case]
    est = ESTIMATORS[name]()
    X = c.make()
    if c.expect_fit(name) is not None:
        exc, match = c.expect_fit(name)
        with pytest.raises(exc, match=match):
            _run_fit(est, method, X)
        return
    out = _run_fit(est, method, X)
    n = X.shape[0] if hasattr(X, "shape") else len(X)
    if method == "fit_predict":
        _check_labels(out, n)
    else:
        _check_fitted(est, n)
    if hasattr(X, "columns"):
        np.testing.assert_array_equal(est.feature_names_in_, np.asarray(X.columns))
    else:
        assert not hasattr(est, "feature_names_in_")
    if case == "X18-float32" and name != "KernelKMeans":
        assert est.transform(X).dtype == np.float32
    if case in ("X24-fortran", "X26-readonly"):  # same result as the clean C array
        ref_est = ESTIMATORS[name]()
        ref = _run_fit(ref_est, method, _clean())
        np.testing.assert_array_equal(est.labels_, ref_est.labels_)
        if method == "fit_predict":
            np.testing.assert_array_equal(out, ref)


@pytest.fixture(scope="module")
def fitted():
    out = {}
    for name, make in ESTIMATORS.items():
        out[name] = make().fit(_clean())
    return out


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("method", NEW_METHODS)
@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_hostile_new_data(fitted, name, method, case):
    c = CASES[case]
    expect = c.expect_new(name)
    est = fitted[name]
    X = c.make()
    with warnings.catch_warnings():
        # a DataFrame given to an estimator fitted on an ndarray warns (see F3)
        warnings.simplefilter("ignore", UserWarning)
        if expect is not None:
            exc, match = expect
            with pytest.raises(exc, match=match):
                getattr(est, method)(X)
            return
        out = getattr(est, method)(X)
        labels = est.predict(X)
    n = X.shape[0] if hasattr(X, "shape") else len(X)
    if method == "predict":
        _check_labels(out, n)
    elif method == "transform":
        assert out.shape == (n, K) and np.all(np.isfinite(out)) and np.all(out >= 0)
        np.testing.assert_array_equal(np.argmin(out, axis=1), labels)
    else:
        assert np.isfinite(out) and out <= 0


@pytest.mark.parametrize("name", ["MiniBatchKernelKMeans", "MiniBatchKMeans"])
def test_memmap_training_data(name, tmp_path):
    path = tmp_path / "X.npy"
    np.save(path, _clean())
    X = np.load(path, mmap_mode="r")
    est = ESTIMATORS[name]().fit(X)
    ref = ESTIMATORS[name]().fit(_clean())
    np.testing.assert_array_equal(est.labels_, ref.labels_)


# --------------------------------------------------------------------- feature names
@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_feature_names(name):
    X = _clean()
    df = pd.DataFrame(X, columns=list("abc"))
    est = ESTIMATORS[name]().fit(df)
    np.testing.assert_array_equal(est.feature_names_in_, ["a", "b", "c"])
    with pytest.raises(ValueError, match="unseen at fit time:\n- d"):  # F1
        est.predict(df.rename(columns={"c": "d"}))
    # the same names in another order: matched by name, not refused
    np.testing.assert_array_equal(est.predict(df[["b", "a", "c"]]), est.predict(df))
    with pytest.warns(UserWarning, match="does not have valid feature names"):  # F2
        labels = est.predict(X)
    np.testing.assert_array_equal(labels, est.predict(df))
    plain = ESTIMATORS[name]().fit(X)
    with pytest.warns(UserWarning, match="has feature names"):  # F3
        plain.predict(df)
    with pytest.raises(ValueError, match="4 features"):  # F4
        plain.predict(np.zeros((2, 4)))
    names = est.get_feature_names_out()
    assert len(names) == K


# -------------------------------------------------------------- parameters, weights
@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_more_clusters_than_distinct_points_warns(name):
    X = np.repeat(_clean()[:2], N // 2, axis=0)  # P1: 2 distinct points, 3 clusters
    with pytest.warns(EmptyClusterWarning, match=r"1 of the n_clusters=3 clusters"):
        est = ESTIMATORS[name]().fit(X)
    _check_fitted(est, N)
    assert est.inertia_ == pytest.approx(0, abs=1e-9)


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_identical_points_warn_and_fit(name):
    with pytest.warns(EmptyClusterWarning, match="2 of the n_clusters=3"):
        est = ESTIMATORS[name]().fit(np.ones((N, D)))
    assert est.inertia_ == pytest.approx(0, abs=1e-9)


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_no_warning_without_empty_clusters(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmptyClusterWarning)
        ESTIMATORS[name]().fit(_clean())


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_more_clusters_than_samples(name):  # P2
    with pytest.raises(ValueError, match="n_clusters=5"):
        ESTIMATORS[name](n_clusters=5).fit(_clean()[:4])


@pytest.mark.parametrize("name", ["MiniBatchKernelKMeans", "MiniBatchKMeans"])
def test_batch_size_larger_than_n(name):  # P3
    est = ESTIMATORS[name](batch_size=10_000).fit(_clean())
    assert est._batch_size == N
    _check_fitted(est, N)


@pytest.mark.parametrize("tau", [1, 5])  # P4, P5: tau smaller than one batch
def test_tau_smaller_than_batch(tau):
    # (the fixed width: gamma=None would start from the width selection's sample
    # partition, whose windows hold many points until their cluster gets a block)
    est = _mbkkm(tau=tau, batch_size=20, gamma="mean-distance").fit(_clean())
    _check_fitted(est, N)
    # every window is its newest block alone: at most one batch of points + init
    assert est.n_support_.sum() <= 20 + K
    sums = np.bincount(est.support_labels_, weights=est.dual_coef_, minlength=K)
    np.testing.assert_allclose(sums[est.n_support_ > 0], 1.0)


@pytest.mark.parametrize("name", list(ESTIMATORS))
@pytest.mark.parametrize(
    "params, exc, match",
    [
        ({"init": np.zeros((2, D))}, ValueError, "init"),  # P6
        ({"n_clusters": 0}, ValueError, "n_clusters"),  # P7
        ({"max_iter": 0}, ValueError, "max_iter"),
        ({"working_memory": -1}, ValueError, "working_memory"),
    ],
)
def test_bad_parameters(name, params, exc, match):
    with pytest.raises(exc, match=match):
        ESTIMATORS[name](**params).fit(_clean())


@pytest.mark.parametrize("name", ["MiniBatchKernelKMeans", "MiniBatchKMeans"])
def test_batch_size_zero(name):  # P8
    with pytest.raises(ValueError, match="batch_size"):
        ESTIMATORS[name](batch_size=0).fit(_clean())


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_sample_weight_with_zeros(name):  # W1
    X = _clean()
    X[:10] += 100.0  # far away, but weight 0
    w = np.r_[np.zeros(10), np.ones(N - 10)]
    est = ESTIMATORS[name]().fit(X, sample_weight=w)
    _check_fitted(est, N)
    if name != "MiniBatchKMeans":
        if name == "KernelKMeans":
            support = est.support_
        else:  # the windows hold rows of X: none of the zero-weight rows
            support = [int(np.flatnonzero((X == s).all(1))[0]) for s in est.support_vectors_]
        assert np.min(support) >= 10
    else:
        assert np.all(np.abs(est.cluster_centers_) < 50)


@pytest.mark.parametrize("name", list(ESTIMATORS))
@pytest.mark.parametrize(
    "sw, match",
    [
        (np.zeros(N), "sample_weight|Sample weights"),  # W2
        (-np.ones(N), "sample_weight"),  # W3
        (np.full(N, np.nan), "sample_weight"),  # W4
        (np.full(N, np.inf), "sample_weight"),  # W5
        (np.ones(N - 1), "sample_weight"),  # W6
        (np.ones((N, 1)), "sample_weight"),  # W7
    ],
)
def test_bad_sample_weight(name, sw, match):
    with pytest.raises(ValueError, match=match):
        ESTIMATORS[name]().fit(_clean(), sample_weight=sw)


@pytest.mark.parametrize("name", list(ESTIMATORS))
@pytest.mark.parametrize("n_positive", [1, 5])
def test_init_subsample_of_zero_weight_points(name, n_positive):  # W9
    # The init subsample (12 of 200 points) is almost surely all zero-weight:
    # the seeding used to divide 0 / 0 there; now it draws among positive weights.
    X = np.random.RandomState(0).randn(200, D)
    w = np.zeros(200)
    w[-n_positive:] = 1.0
    kw = {"init_size": 12} if name == "KernelKMeans" else {"batch_size": 4}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmptyClusterWarning)
        est = ESTIMATORS[name](**kw).fit(X, sample_weight=w)
    _check_fitted(est, 200)


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_score_all_zero_weights(fitted, name):  # W8
    with pytest.raises(ValueError, match=r"sample_weight|Sample weights"):
        fitted[name].score(_clean(), sample_weight=np.zeros(N))


# ------------------------------------------------------------------ callable kernels
def _k_raise(A, B):
    raise ZeroDivisionError("boom")


def _k_nan(A, B):
    return np.full((len(A), len(B)), np.nan)


def _k_inf(A, B):
    return np.full((len(A), len(B)), np.inf)


def _k_asym(A, B):
    return A @ B.T + A[:, :1]


def _k_not_psd(A, B):
    # positive diagonal, negative eigenvalues: squared distances can be < 0
    return np.exp(-np.abs(A[:, None, :] - B[None, :, :]).sum(-1)) - 0.9 * (A @ B.T > 0)


def _k_shape(A, B):
    return np.zeros((2, 2))


def _k_complex(A, B):
    return (A @ B.T) * 1j


def _k_str(A, B):
    return np.full((len(A), len(B)), "x")


@pytest.mark.parametrize("name", list(KERNEL_ESTIMATORS))
@pytest.mark.parametrize(
    "func, exc, match",
    [
        (_k_raise, RuntimeError, "callable kernel raised ZeroDivisionError"),  # C1
        (_k_nan, ValueError, "kernel: .*non-finite"),  # C2
        (_k_inf, ValueError, "kernel: .*non-finite"),  # C3
        (_k_shape, ValueError, "kernel: .*shape"),  # C6
        (_k_complex, TypeError, "kernel: .*non-real"),  # C7
        (_k_str, TypeError, "kernel: .*non-real"),  # C8
    ],
)
def test_bad_callable_kernel(name, func, exc, match):
    with pytest.raises(exc, match=match):
        KERNEL_ESTIMATORS[name](kernel=func).fit(_clean())


@pytest.mark.parametrize("name", list(KERNEL_ESTIMATORS))
@pytest.mark.parametrize("func", [_k_asym, _k_not_psd])  # C4, C5
def test_improper_callable_kernel_is_clipped(name, func):
    est = KERNEL_ESTIMATORS[name](kernel=func)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmptyClusterWarning)
        est.fit(_clean())
    _check_fitted(est, N)
    D = est.transform(_clean())
    assert np.all(np.isfinite(D)) and np.all(D >= 0)
    assert np.isfinite(est.score(_clean())) and est.score(_clean()) <= 0


class _InterruptAt:
    """A kernel that raises KeyboardInterrupt at its ``at``-th call (C9).

    Call 3 is inside the work: the first mini-batch step of MiniBatchKernelKMeans,
    the kernel matrix of KernelKMeans (calls 1-2: the check call and the diagonal).
    """

    def __init__(self, at):
        self.at = at
        self.calls = 0

    def __call__(self, A, B):
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return A @ B.T


@pytest.mark.parametrize("name", list(KERNEL_ESTIMATORS))
def test_keyboard_interrupt_propagates(name):
    est = KERNEL_ESTIMATORS[name](kernel=_InterruptAt(3))
    with pytest.raises(KeyboardInterrupt):
        est.fit(_clean())
    assert not hasattr(est, "labels_") and not hasattr(est, "kernel_")
    assert not hasattr(est, "n_features_in_")


# -------------------------------------------------------------- precomputed matrices
def _gram(X):
    return np.exp(-((X[:, None] - X[None]) ** 2).sum(-1))


@pytest.mark.parametrize("name", list(KERNEL_ESTIMATORS))
@pytest.mark.parametrize(
    "make, exc, match",
    [
        (lambda G: G[:, :20], ValueError, "square"),  # K1
        (lambda G: G + np.triu(np.ones_like(G), 1), ValueError, "symmetric"),  # K2
        (lambda G: G - 2 * np.eye(len(G)), ValueError, "diagonal"),  # K3
        (lambda G: np.where(np.eye(len(G)) > 0, np.nan, G), ValueError, "NaN"),  # K4
        (lambda G: G[0], ValueError, "must be 2-D"),  # K7
    ],
)
def test_bad_precomputed(name, make, exc, match):
    with pytest.raises(exc, match=match):
        KERNEL_ESTIMATORS[name](kernel="precomputed").fit(make(_gram(_clean())))


def test_sparse_precomputed():  # K6
    # Both kernel estimators take a sparse kernel matrix (a k-NN kernel, say) and give
    # what the same dense matrix gives.
    dense = _gram(_clean())
    G = sp.csr_matrix(dense)
    for make in (_kkm, _mbkkm):
        est = make(kernel="precomputed").fit(G)
        _check_fitted(est, N)
        np.testing.assert_array_equal(est.labels_, make(kernel="precomputed").fit(dense).labels_)


@pytest.mark.parametrize("name", list(KERNEL_ESTIMATORS))
def test_precomputed_predict_wrong_shape(name):  # K5
    G = _gram(_clean())
    est = KERNEL_ESTIMATORS[name](kernel="precomputed").fit(G)
    with pytest.raises(ValueError, match=f"expecting {N} features"):
        est.predict(G[:, :20])
    _check_labels(est.predict(G[:5]), 5)


# ------------------------------------------------------------------ kernel functions
X0 = _clean()


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: resolve_kernel("nope"), ValueError, "kernel='nope'"),  # R1
        (lambda: resolve_kernel(3), TypeError, "kernel must be"),  # R2
        (lambda: resolve_kernel("rbf", gamma=-1.0), ValueError, "gamma"),  # R3
        (lambda: resolve_kernel("rbf", gamma=float("nan")), ValueError, "gamma"),  # R4
        (lambda: resolve_kernel("rbf", gamma=True), TypeError, "gamma"),  # R5
        (lambda: resolve_kernel("rbf", kernel_params=[1]), TypeError, "kernel_params"),  # R6
        (lambda: resolve_kernel("rbf", kernel_params={"x": 1}), ValueError, "kernel_params"),  # R7
        (lambda: resolve_kernel("chi2", X=-np.ones((3, 2))), ValueError, "non-negative"),  # R8
        (lambda: resolve_kernel("poly", degree=-1, X=X0), ValueError, "degree"),  # R9
        (lambda: resolve_kernel("poly", coef0="a", X=X0), TypeError, "coef0"),  # R10
        (lambda: knn_kernel(X0, 0), ValueError, "n_neighbors"),  # G1
        (lambda: knn_kernel(X0, N + 1), ValueError, "n_neighbors"),  # G2
        (lambda: knn_kernel(X0, 2.5), TypeError, "n_neighbors"),  # G3
        (lambda: knn_kernel(_with(np.nan)(), 3), ValueError, "NaN"),  # G4
        (lambda: knn_kernel(X0[:1], 1), ValueError, "sample"),  # G5
        (lambda: heat_kernel(X0, 3, t=0.0), ValueError, "t must be"),  # G6
        (lambda: heat_kernel(X0, 3, form="bad"), ValueError, "form"),  # G7
        (lambda: graph_kernel_matrix("rbf", X0, n_neighbors=3), ValueError, "graph kernel"),  # G8
        (lambda: graph_kernel_matrix("knn", X0), ValueError, "n_neighbors"),  # G9
        (lambda: kernel_gamma(np.empty((0, 2))), ValueError, "sample"),  # G10
        (lambda: kernel_gamma(-np.eye(3), "precomputed"), ValueError, "K\\(x, x\\)"),  # G11
        (
            lambda: kernel_block(np.eye(3), np.array([0.5]), np.array([0])),
            TypeError,
            "integer indices",
        ),  # G12
        (lambda: kernel_block(np.ones((3, 2)), [0], [0]), ValueError, "square"),  # G13
        (lambda: kernel_gamma(X0 + 1j, "rbf"), ValueError, "Complex"),  # G14
    ],
)
def test_kernel_functions_refuse(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_kernel_functions_on_huge_and_identical_points():
    # exp() of a huge negative exponent underflows to 0, never to NaN
    K = resolve_kernel("rbf", gamma=1.0)(1e30 * X0, 1e30 * X0)
    assert np.all(np.isfinite(K)) and np.all((K >= 0) & (K <= 1))
    # identical points: the data-driven gamma falls back to 1, K is all ones
    kern = resolve_kernel("rbf", X=np.ones((5, 2)))
    assert kern.params["gamma"] == 1.0
    np.testing.assert_array_equal(kern(np.ones((5, 2)), np.ones((5, 2))), 1.0)
    assert kernel_gamma(np.ones((5, 2)), "linear") == pytest.approx(np.sqrt(2))


# ---------------------------------------------------------------------- datasets
@pytest.fixture
def offline(monkeypatch, tmp_path):
    monkeypatch.delenv("MBKKM_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: load_dataset("nope", download=False), ValueError, "nope"),  # D1
        (lambda: load_dataset(3, download=False), TypeError, "name"),  # D2
        (lambda: load_dataset("pendigits", download="yes"), TypeError, "download"),  # D3
        (
            lambda: load_dataset("pendigits", preprocess="bad", download=False),
            ValueError,
            "preprocess|bad",
        ),  # D4
        (
            lambda: load_dataset("pendigits", dtype="nodtype", download=False),
            TypeError,
            "dtype",
        ),  # D5
        (lambda: make_blobs(n_samples=0), ValueError, "n_samples"),  # D9
        (lambda: make_blobs(n_samples=2.5), TypeError, "n_samples"),  # D10
        (lambda: make_circles(noise=-1.0), ValueError, "noise"),  # D11
        (lambda: make_moons(dtype=np.int64), TypeError, "dtype"),  # D12
        (lambda: make_shells(n_samples=10, n_shells=0), ValueError, "n_shells"),  # D13
        (lambda: make_circles(factor=1.0), ValueError, "factor"),  # D14
    ],
)
def test_dataset_functions_refuse(offline, call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_missing_dataset_offline(offline):  # D6
    with pytest.raises(DatasetNotFoundError, match="pendigits"):
        load_dataset("pendigits", data_home=offline / "empty", download=False)


def test_corrupt_dataset_files(offline):
    (offline / "pendigits.npz").write_bytes(b"not a zip file")  # D7
    with pytest.raises(DatasetFormatError, match=r"pendigits\.npz"):
        load_dataset("pendigits", data_home=offline, download=False)
    np.savez(offline / "letter.npz", X=np.zeros((4, 2, 2)), y=np.zeros(4, int))  # D8
    with pytest.raises(DatasetFormatError, match="2-dimensional"):
        load_dataset("letter", data_home=offline, download=False)


# -------------------------------------------------------------------------- CLI
def _cli(args):
    from mbkkm.cli import main

    return CliRunner().invoke(main, [str(a) for a in args])


def _write(path, text):
    path.write_text(text)
    return path


def _has_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


_NEEDS_PYARROW = pytest.mark.skipif(not _has_pyarrow(), reason="Parquet needs pyarrow")


@pytest.mark.parametrize(
    "make, args, code, match",
    [
        (
            lambda p: _write(p / "d.csv", "1,2\nnan,3\n4,5\n"),
            [],
            1,
            "missing value 'nan' at row 2 (line 2), column 0 (0-based)",
        ),  # L1
        (lambda p: _write(p / "d.csv", "a,b\n1,x\n2,3\n"), [], 1, "not numeric"),  # L2
        (lambda p: _write(p / "d.csv", ""), [], 1, "empty"),  # L3
        (lambda p: _write(p / "d.csv", "1,2\n3,4\n"), ["-k", "5"], 2, "larger than"),  # L4
        (
            lambda p: (np.save(p / "c.npy", np.ones((4, 2)) * 1j), p / "c.npy")[1],
            [],
            1,
            "real numbers",
        ),  # L5
        (lambda p: (np.save(p / "t.npy", np.ones((4, 2, 2))), p / "t.npy")[1], [], 1, "2-d"),  # L6
        (lambda p: _write(p / "d.csv", "1,2\n3,4\n"), ["--gamma", "-1"], 2, "gamma"),  # L7
        (lambda p: _write(p / "d.csv", "1,2\n3,4\n"), ["-k", "0"], 2, "n-clusters"),  # L8
        (lambda p: p / "missing.csv", [], 2, "does not exist"),  # L9
        (
            lambda p: (np.savez(p / "z.npz", Y=np.ones((4, 2))), p / "z.npz")[1],
            [],
            2,  # the --key the user gave (or its default) names no array: a usage error
            "no array 'X'",
        ),  # L10
        (lambda p: _write(p / "d.csv", "1,2\n3\n"), [], 1, "fields"),  # L11
        (
            lambda p: _write(p / "d.csv", "a,b\n1,2\n3,\n"),
            [],
            1,
            "missing value '' at row 2 (line 3), column 'b'",
        ),  # L13
        (lambda p: _write(p / "d.csv", "1,2\ninf,3\n4,5\n"), [], 1, "infinite value"),  # L14
        (
            lambda p: _write(p / "d.csv", "id,a,b\n1,2,3\n4,5,6,7\n"),
            ["--drop", "id"],
            1,
            "line 3: 4 fields, expected 3",
        ),  # L15
        pytest.param(
            lambda p: (
                pd.DataFrame({"a": [1.0, 2.0], "s": ["x", "y"]}).to_parquet(p / "d.parquet"),
                p / "d.parquet",
            )[1],
            [],
            1,
            "column 's' is not numeric",
            marks=_NEEDS_PYARROW,
        ),  # L16
        (
            lambda p: _write(p / "d.csv", "a,b\n1,2\n3,4\n"),
            ["--columns", "c"],
            2,
            "--columns: no column named 'c'",
        ),  # L18
    ],
)
def test_cli_refuses(offline, make, args, code, match):
    path = make(offline)
    argv = ["fit", path, *(args if "-k" in args else ["-k", "2", *args])]
    r = _cli(argv)
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    assert match.lower() in r.output.lower(), r.output


def test_cli_identical_rows(offline):  # L12
    path = _write(offline / "d.csv", "1,1\n" * 20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmptyClusterWarning)
        r = _cli(
            [
                "fit",
                path,
                "-k",
                "2",
                "--batch-size",
                "8",
                "--tau",
                "4",
                "--max-iter",
                "3",
                "--labels-out",
                offline / "l.txt",
            ]
        )
    assert r.exit_code == 0, r.output
    assert np.loadtxt(offline / "l.txt").shape == (20,)


def test_cli_one_column_and_huge_header(offline):  # L17
    one = _write(offline / "one.csv", "x\n" + "\n".join(map(str, [0, 1, 2, 10, 11, 12])) + "\n")
    r = _cli(
        [
            "fit",
            one,
            "-k",
            "2",
            "--gamma",
            "1.0",
            "--max-iter",
            "3",
            "--labels-out",
            offline / "l.txt",
        ]
    )
    assert r.exit_code == 0, r.output
    assert set(np.loadtxt(offline / "l.txt")[:3]) != set(np.loadtxt(offline / "l.txt")[3:])
    wide = offline / "wide.csv"
    names = ",".join(f"feature_{j}" for j in range(20_000))
    rows = np.random.default_rng(0).normal(size=(4, 20_000))
    np.savetxt(wide, rows, fmt="%.4f", delimiter=",", header=names, comments="")
    r = _cli(["fit", wide, "-k", "2", "--gamma", "1e-4", "--max-iter", "3", "-q"])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("name", ["MiniBatchKernelKMeans", "MiniBatchKMeans", "KernelKMeans"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("row", [0, 29])
def test_finite_check_in_parts_is_scikit_learns(monkeypatch, name, bad, row):
    # Large dense float X is checked for NaN and infinity in row parts on every
    # thread; the oracle is scikit-learn's own check in one pass (the threshold out of
    # reach): the same errors and messages, in fit and predict.
    from mbkkm import _validation

    calls = []
    monkeypatch.setattr(
        _validation,
        "assert_all_finite",
        lambda X, **kw: calls.append(X.shape[0]) or assert_all_finite(X, **kw),
    )
    X = _clean()
    X[row, 1] = bad
    messages = {}
    for threshold in (2**62, 1):
        monkeypatch.setattr(_validation, "PARALLEL_FINITE_MIN_VALUES", threshold)
        for method in ("fit", "predict"):
            est = ESTIMATORS[name]().fit(_clean()) if method == "predict" else ESTIMATORS[name]()
            with pytest.raises(ValueError) as info:
                getattr(est, method)(X)
            messages[threshold, method] = str(info.value)
        if threshold == 2**62:
            assert calls == []
    assert sum(calls) >= X.shape[0]  # the parts cover every row
    assert messages[1, "fit"] == messages[2**62, "fit"]
    assert messages[1, "predict"] == messages[2**62, "predict"]
    monkeypatch.setattr(_validation, "PARALLEL_FINITE_MIN_VALUES", 1)
    ref = ESTIMATORS[name]().fit(_clean())  # finite X passes, the same model
    monkeypatch.setattr(_validation, "PARALLEL_FINITE_MIN_VALUES", 2**62)
    np.testing.assert_array_equal(ref.labels_, ESTIMATORS[name]().fit(_clean()).labels_)


@pytest.mark.parametrize("value", [np.nan, np.inf])
@pytest.mark.parametrize("sparse_rows", [False, True])
def test_nan_under_assume_finite_is_named_as_such(value, sparse_rows):
    """scikit-learn's assume_finite=True skips the finiteness check; a NaN or an
    infinity then reached the overflow check, which blamed 'values too large' and
    suggested rescaling. It names the NaN or infinity and the setting; and a later
    partial_fit chunk's non-finite values are named as possibly X's."""
    import sklearn

    X = np.random.RandomState(0).normal(size=(200, 3))
    bad = X.copy()
    bad[7, 1] = value
    bad = sp.csr_matrix(bad) if sparse_rows else bad
    with sklearn.config_context(assume_finite=True):
        for est in (
            MiniBatchKMeans(3, max_iter=3, random_state=0),
            MiniBatchKernelKMeans(3, gamma=0.5, max_iter=3, random_state=0),
            KernelKMeans(3, gamma=0.5, random_state=0),
        ):
            if sparse_rows and isinstance(est, MiniBatchKMeans):
                continue  # dense only
            with pytest.raises(ValueError, match=r"contains NaN or infinity.*assume_finite"):
                est.fit(bad)
        est = MiniBatchKernelKMeans(3, gamma=0.5, random_state=0).partial_fit(X)
        with pytest.raises(ValueError, match="NaN or infinity"):
            est.partial_fit(bad)


def test_later_partial_fit_chunks_are_checked_for_overflow():
    """The first partial_fit checks its rows for values too large for the kernel
    arithmetic; a later chunk was not checked, and 1e20 in float32 gave NaN centers
    (predict refused those rows; a code review). Refused now, the model as it was."""
    X = np.random.RandomState(0).rand(300, 3).astype(np.float32)
    est = MiniBatchKernelKMeans(2, gamma=0.5, random_state=0).partial_fit(X)
    norms = est.center_norms_.copy()
    with pytest.raises(ValueError, match="too large for float32 arithmetic"):
        est.partial_fit(np.full((5, 3), 1e20, np.float32))
    np.testing.assert_array_equal(est.center_norms_, norms)
