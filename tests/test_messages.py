"""What a user reads after the usual input mistakes: short messages that say what
is wrong and what to do (a column named, the nearest kernel name suggested, no
whole array printed, no advice meant for supervised estimators)."""

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.utils._param_validation import InvalidParameterError

from mbkkm import KernelKMeans, MiniBatchKernelKMeans, MiniBatchKMeans
from mbkkm._validation import unknown_name_message
from mbkkm.kernels import kernel_names, resolve_kernel

ESTIMATORS = {
    "MiniBatchKernelKMeans": lambda **kw: MiniBatchKernelKMeans(
        2, batch_size=16, tau=10, max_iter=3, random_state=0, **kw
    ),
    "KernelKMeans": lambda **kw: KernelKMeans(2, max_iter=5, random_state=0, **kw),
    "MiniBatchKMeans": lambda **kw: MiniBatchKMeans(
        2, batch_size=16, max_iter=3, random_state=0, **kw
    ),
}
KERNEL_ESTIMATORS = ["MiniBatchKernelKMeans", "KernelKMeans"]
SHORT = 300  # characters: a message, not a dump


def _X(n=40, seed=0):
    return np.random.RandomState(seed).rand(n, 3)


def _message(make, X):
    with pytest.raises(ValueError) as info:
        make().fit(X)
    return str(info.value)


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_dataframe_string_column_is_named(name):
    df = pd.DataFrame({"height": _X()[:, 0], "city": ["Paris", "Lyon"] * 20, "weight": _X()[:, 1]})
    msg = _message(ESTIMATORS[name], df)
    assert "column 'city' is not numeric" in msg
    assert "'Paris'" in msg and "OneHotEncoder" in msg
    assert len(msg) < SHORT


def test_every_non_numeric_column_is_counted():
    df = pd.DataFrame({"a": ["x"] * 10, "b": np.arange(10.0), "c": ["1"] * 9 + ["q"]})
    msg = _message(ESTIMATORS["MiniBatchKMeans"], df)
    assert "column 'a' is not numeric" in msg and "(and 1 more: 'c')" in msg


def test_array_string_column_is_named_by_index():
    X = _X().astype(object)
    X[5, 2] = "n/a"
    msg = _message(ESTIMATORS["MiniBatchKernelKMeans"], X)
    assert "column 2 is not numeric" in msg and "'n/a'" in msg


@pytest.mark.parametrize("name", KERNEL_ESTIMATORS)
def test_unknown_kernel_suggests_the_nearest_name(name):
    with pytest.raises(InvalidParameterError) as info:
        ESTIMATORS[name](kernel="rbff").fit(_X())
    msg = str(info.value)
    assert f"{name}: kernel='rbff' is not a known kernel. Did you mean 'rbf'?" in msg
    listed = msg.split("Expected one of: ")[1].split(";")[0].split(", ")
    assert listed == sorted(listed) and {"rbf", "precomputed", "knn"} <= set(listed)
    assert msg.endswith("or a callable.")


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_every_string_option_suggests(name):
    with pytest.raises(
        InvalidParameterError,
        match=r"init='kmeans\+\+' is not a known "
        r"init\. Did you mean 'k-means\+\+'\? Expected one of: "
        r"k-means\+\+, random; or an array-like or a callable\.",
    ):
        ESTIMATORS[name](init="kmeans++").fit(_X())


def test_no_suggestion_when_nothing_is_near():
    msg = unknown_name_message("kernel", "zzz", ["rbf", "linear", "cosine"])
    assert msg == "kernel='zzz' is not a known kernel. Expected one of: cosine, linear, rbf."


def test_wrong_type_is_still_scikit_learns_error():
    with pytest.raises(InvalidParameterError, match="The 'kernel' parameter"):
        ESTIMATORS["KernelKMeans"](kernel=3).fit(_X())


def test_resolve_kernel_suggests():
    with pytest.raises(ValueError) as info:
        resolve_kernel("lapalcian")
    msg = str(info.value)
    assert msg.startswith("kernel='lapalcian' is not a known kernel. Did you mean 'laplacian'?")
    assert ", ".join(kernel_names(transductive=False)) in msg


@pytest.mark.parametrize("name", list(ESTIMATORS))
@pytest.mark.parametrize(
    "X, shape",
    [(np.arange(100_000.0), "a 1-D array of shape (100000,)"), (np.float64(3.0), "a scalar")],
)
def test_one_dimensional_input_is_not_printed(name, X, shape):
    msg = _message(ESTIMATORS[name], X)
    assert msg.startswith(f"X must be 2-D, shape (n_samples, n_features); got {shape}.")
    assert "X.reshape(-1, 1)" in msg and len(msg) < SHORT


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_predict_on_one_dimensional_input(name):
    est = ESTIMATORS[name]().fit(_X())
    with pytest.raises(ValueError, match=r"got a 1-D array of shape \(3,\)"):
        est.predict(np.ones(3))


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_complex_input_is_not_printed(name):
    msg = _message(ESTIMATORS[name], np.ones((10_000, 3)) + 1j)
    # scikit-learn's check_complex_data looks for "Complex data not supported"
    assert msg.startswith("Complex data not supported: X has dtype complex128")
    assert "1.+1.j" not in msg and len(msg) < SHORT


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_nan_gets_clustering_advice_and_its_place(name):
    X = _X()
    X[7, 2] = X[9, 0] = np.nan
    msg = _message(ESTIMATORS[name], X)
    assert msg.startswith(
        "Input X contains NaN (2 values; the first in row 7, column 2). "
        f"{name} does not accept missing values"
    )
    assert "SimpleImputer" in msg
    assert "supervised" not in msg and "HistGradientBoosting" not in msg
    assert len(msg) < SHORT


def test_nan_in_a_dataframe_names_the_columns():
    df = pd.DataFrame(_X(), columns=["age", "height", "weight"])
    df.loc[3, "weight"] = np.nan
    df.loc[4, "age"] = np.nan
    msg = _message(ESTIMATORS["MiniBatchKMeans"], df)
    assert msg.startswith(
        "Input X contains NaN (2 values, in columns 'age', 'weight'; the "
        "first in row 3, column 'weight')."
    )
    msg = _message(ESTIMATORS["MiniBatchKMeans"], df.set_index(df.index + 10))
    assert "the first in row 3 (index 13), column 'weight')" in msg


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_infinity_gets_its_place(name):
    X = _X()
    X[7, 2], X[9, 0] = np.inf, -np.inf
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # scikit-learn's sum of inf - inf
        msg = _message(ESTIMATORS[name], X)
        framed = _message(ESTIMATORS[name], pd.DataFrame(X, columns=["a", "b", "c"]))
    assert msg.startswith(
        f"Input X contains infinity (2 values; the first in row 7, column 2). {name} needs "
        "finite values"
    )
    assert "the first in row 7, column 'c')" in framed and len(msg) < SHORT


@pytest.mark.parametrize("name", KERNEL_ESTIMATORS)
def test_nan_in_sparse_input(name):
    X = sp.random(30, 4, density=0.5, format="csr", random_state=0)
    X.data[3] = np.nan
    r, c = X.tocoo().row[3], X.tocoo().col[3]
    msg = _message(ESTIMATORS[name], X)
    assert msg.startswith(f"Input X contains NaN (1 value; the first in row {r}, column {c})")


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_other_errors_are_left_as_they_were(name):
    with pytest.raises(ValueError, match="Found array with dim 3"):
        ESTIMATORS[name]().fit(np.ones((5, 2, 2)))
    with pytest.raises(ValueError, match="contains infinity"):
        ESTIMATORS[name]().fit(np.full((5, 2), np.inf))
