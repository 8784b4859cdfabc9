"""Pairwise kernels against scikit-learn, data-driven defaults, and resolution errors."""

import numpy as np
import pytest
from sklearn.metrics.pairwise import euclidean_distances, pairwise_kernels

from mbkkm.kernels import KERNELS, Kernel, resolve_kernel

PAIRWISE = sorted(name for name, spec in KERNELS.items() if spec.func is not None)
GRAPH = sorted(name for name, spec in KERNELS.items() if spec.func is None)
DATA_GAMMA = sorted(n for n in PAIRWISE if KERNELS[n].default_gamma == "data")
FIXED_DEFAULT_GAMMA = sorted(
    n for n in PAIRWISE if KERNELS[n].default_gamma in ("n_features", "one")
)

# Explicit parameters, used by each kernel only where it has them.
PARAMS = {"gamma": 0.3, "degree": 3, "coef0": 1.5}


def _data(seed, n, d, nonnegative):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return np.abs(X) if nonnegative else X


def _params(name):
    return {p: PARAMS[p] for p in KERNELS[name].params}


def _reference(name, X, Y, params):
    """scikit-learn's kernel in float64 (the oracle)."""
    return pairwise_kernels(
        X.astype(np.float64),
        Y.astype(np.float64),
        metric=KERNELS[name].sklearn_name,
        **params,
    )


def test_registry_has_pairwise_kernels():
    assert {"rbf", "laplacian", "polynomial", "linear", "cosine", "sigmoid", "chi2"} <= set(
        PAIRWISE
    )
    for name in PAIRWISE:
        assert KERNELS[name].sklearn_name is not None
        assert KERNELS[name].formula


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", PAIRWISE)
def test_block_equals_sklearn_float64(name, seed):
    spec = KERNELS[name]
    X = _data(seed, 23, 5, spec.nonnegative_data)
    Y = _data(seed + 100, 17, 5, spec.nonnegative_data)
    params = _params(name)
    kernel = resolve_kernel(name, X=X, **params)
    K = kernel(X, Y)
    assert K.dtype == np.float64
    assert K.shape == (23, 17)
    np.testing.assert_allclose(K, _reference(name, X, Y, params), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", PAIRWISE)
def test_read_only_rows_give_the_same_block(name):
    """Read-only rows (a memory map, the command line's blocks) are taken as they
    are by every kernel (chi2's compiled loop in scikit-learn wants writable ones)."""
    spec = KERNELS[name]
    X = _data(4, 23, 5, spec.nonnegative_data).astype(np.float32)
    Y = _data(5, 17, 5, spec.nonnegative_data).astype(np.float32)
    kernel = resolve_kernel(name, X=X, **_params(name))
    expected = kernel(X, Y)
    X.flags.writeable = Y.flags.writeable = False
    np.testing.assert_array_equal(kernel(X, Y), expected)
    np.testing.assert_array_equal(kernel(X[3:9], Y[::2]), expected[3:9, ::2])


@pytest.mark.parametrize("name", PAIRWISE)
def test_block_float32_within_tolerance(name):
    spec = KERNELS[name]
    X = _data(2, 31, 6, spec.nonnegative_data).astype(np.float32)
    Y = _data(3, 19, 6, spec.nonnegative_data).astype(np.float32)
    params = _params(name)
    K = resolve_kernel(name, X=X, **params)(X, Y)
    assert K.dtype == np.float32
    ref = _reference(name, X, Y, params)
    np.testing.assert_allclose(K, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", PAIRWISE)
def test_out_buffer(name, dtype):
    spec = KERNELS[name]
    X = _data(4, 12, 4, spec.nonnegative_data).astype(dtype)
    Y = _data(5, 9, 4, spec.nonnegative_data).astype(dtype)
    kernel = resolve_kernel(name, X=X, **_params(name))
    expected = kernel(X, Y)
    out = np.full((12, 9), np.nan, dtype=dtype)
    result = kernel(X, Y, out=out)
    assert result is out
    np.testing.assert_array_equal(out, expected)
    # The buffer is reused: a second call overwrites it completely.
    kernel(Y, Y, out=out[:9])
    np.testing.assert_array_equal(out[:9], kernel(Y, Y))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", PAIRWISE)
def test_diag_equals_sklearn_diagonal(name, dtype):
    spec = KERNELS[name]
    X = _data(6, 25, 5, spec.nonnegative_data).astype(dtype)
    X[3] = 0  # a zero row (cosine: 0, as in scikit-learn)
    params = _params(name)
    diag = resolve_kernel(name, X=X, **params).diag(X)
    assert diag.shape == (25,)
    assert diag.dtype == dtype
    ref = np.diagonal(_reference(name, X, X, params))
    rtol = 1e-10 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(diag, ref, rtol=rtol, atol=rtol * np.abs(ref).max())
    if spec.normalized:
        # K(x, x) = 1, except cosine's 0 for a zero vector (scikit-learn's convention).
        nonzero = np.abs(X).sum(1) > 0
        np.testing.assert_array_equal(diag[nonzero], 1)
        assert np.all(diag <= 1)


@pytest.mark.parametrize("name", FIXED_DEFAULT_GAMMA)
def test_default_gamma_matches_sklearn(name):
    spec = KERNELS[name]
    X = _data(7, 20, 8, spec.nonnegative_data)
    params = {p: PARAMS[p] for p in spec.params if p != "gamma"}
    K = resolve_kernel(name, X=X, **params)(X, X)
    np.testing.assert_allclose(K, _reference(name, X, X, params), rtol=1e-10)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", DATA_GAMMA)
def test_data_default_gamma_is_inverse_mean_squared_distance(name, seed):
    X = _data(seed, 40, 3, False) * 10 + 100  # far from 0: exercises the two-pass mean
    expected = 1.0 / euclidean_distances(X, X, squared=True).mean()
    gamma = resolve_kernel(name, X=X).params["gamma"]
    assert gamma == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("name", DATA_GAMMA)
def test_data_default_gamma_with_sample_weight(name):
    rng = np.random.default_rng(8)
    X = rng.normal(size=(15, 3))
    w = rng.uniform(0.1, 3.0, size=15)
    num = 0.0
    den = 0.0
    for i in range(15):  # weighted plain double sum over all ordered pairs
        for j in range(15):
            num += w[i] * w[j] * np.sum((X[i] - X[j]) ** 2)
            den += w[i] * w[j]
    gamma = resolve_kernel(name, X=X, sample_weight=w).params["gamma"]
    assert gamma == pytest.approx(den / num, rel=1e-9)
    # Integer weights equal repeating the rows.
    counts = rng.integers(1, 4, size=15)
    g_rep = resolve_kernel(name, X=np.repeat(X, counts, axis=0)).params["gamma"]
    g_w = resolve_kernel(name, X=X, sample_weight=counts.astype(float)).params["gamma"]
    assert g_w == pytest.approx(g_rep, rel=1e-9)


def test_alias_resolves_to_canonical_name():
    X = _data(9, 5, 2, False)
    assert resolve_kernel("gaussian", gamma=1.0, X=X).name == "rbf"
    assert resolve_kernel("poly", X=X).name == "polynomial"


def test_kernel_params_dict_sets_gamma():
    X = _data(10, 6, 2, False)
    kernel = resolve_kernel("rbf", kernel_params={"gamma": 0.25}, X=X)
    assert kernel.params == {"gamma": 0.25}


# --- errors ----------------------------------------------------------------------------


def test_unknown_name():
    with pytest.raises(ValueError, match=r"kernel='nope' is not a known kernel.*rbf"):
        resolve_kernel("nope")


@pytest.mark.parametrize("name", GRAPH)
def test_graph_kernels_refused_for_pairwise_use(name):
    with pytest.raises(ValueError, match=f"kernel='{name}'"):
        resolve_kernel(name)


def test_kernel_wrong_type():
    with pytest.raises(TypeError, match="kernel must be a string or a callable"):
        resolve_kernel(3)


@pytest.mark.parametrize("gamma", [0, -1.0, np.nan, np.inf])
def test_bad_gamma_value(gamma):
    with pytest.raises(ValueError, match="gamma must be a finite number > 0"):
        resolve_kernel("rbf", gamma=gamma)


@pytest.mark.parametrize("gamma", ["0.1", True, [1.0]])
def test_bad_gamma_type(gamma):
    with pytest.raises(TypeError, match="gamma must be a real number"):
        resolve_kernel("rbf", gamma=gamma)


def test_bad_degree():
    with pytest.raises(ValueError, match="degree"):
        resolve_kernel("polynomial", degree=-1)


def test_chi2_negative_data():
    X = _data(11, 8, 3, False)
    with pytest.raises(ValueError, match=r"kernel='chi2' is only defined for non-negative"):
        resolve_kernel("chi2", X=X)


def test_kernel_params_not_a_dict():
    with pytest.raises(TypeError, match="kernel_params must be a dict"):
        resolve_kernel("rbf", kernel_params=[("gamma", 1.0)])


def test_kernel_params_unknown_key():
    msg = r"kernel_params: 'degree' is not a parameter of kernel 'rbf'"
    with pytest.raises(ValueError, match=msg):
        resolve_kernel("rbf", kernel_params={"degree": 2})


# --- callables -------------------------------------------------------------------------


def _callable_rbf(X, Y, gamma=0.5):
    return pairwise_kernels(X, Y, metric="rbf", gamma=gamma)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_callable_kernel(dtype):
    X = _data(12, 10, 3, False).astype(dtype)
    Y = _data(13, 7, 3, False).astype(dtype)
    kernel = resolve_kernel(_callable_rbf, kernel_params={"gamma": 0.2})
    assert isinstance(kernel, Kernel) and kernel.is_callable
    K = kernel(X, Y)
    assert K.dtype == dtype
    np.testing.assert_allclose(K, _callable_rbf(X, Y, gamma=0.2), rtol=1e-6)
    out = np.empty((10, 7), dtype=dtype)
    assert kernel(X, Y, out=out) is out
    np.testing.assert_array_equal(out, K)
    np.testing.assert_allclose(kernel.diag(X), 1.0, rtol=1e-6)


def test_callable_wrong_shape():
    X = _data(14, 6, 2, False)
    kernel = resolve_kernel(lambda X, Y: np.zeros((len(X), len(Y) + 1)))
    with pytest.raises(ValueError, match=r"shape \(n_x, n_y\) = \(6, 6\), got shape \(6, 7\)"):
        kernel(X, X)


def test_callable_nan():
    X = _data(15, 6, 2, False)
    kernel = resolve_kernel(lambda X, Y: np.full((len(X), len(Y)), np.nan))
    with pytest.raises(ValueError, match="non-finite"):
        kernel(X, X)
    with pytest.raises(ValueError, match="non-finite"):
        kernel.diag(X)


def test_callable_raising():
    def broken(X, Y):
        raise ZeroDivisionError("boom")

    kernel = resolve_kernel(broken)
    with pytest.raises(RuntimeError, match="callable kernel raised ZeroDivisionError: boom"):
        kernel(_data(16, 3, 2, False), _data(17, 3, 2, False))


def test_callable_non_numeric():
    X = _data(18, 3, 2, False)
    kernel = resolve_kernel(lambda X, Y: np.full((len(X), len(Y)), "a"))
    with pytest.raises(TypeError, match="non-real dtype"):
        kernel(X, X)


@pytest.mark.parametrize("name", ["polynomial", "sigmoid"])
def test_gamma_of_one_over_n_features_needs_the_data(name):
    """scikit-learn's default gamma for polynomial and sigmoid is 1 / n_features:
    without X it silently became 1.0 (differing from pairwise_kernels by up to 1e4);
    now refused by name, and with X equal to scikit-learn's."""
    from sklearn.metrics.pairwise import pairwise_kernels

    with pytest.raises(ValueError, match=rf"gamma=None needs the data \(X\) for kernel='{name}'"):
        resolve_kernel(name)
    X = _data(3, 20, 4, False)
    np.testing.assert_allclose(resolve_kernel(name, X=X)(X, X), pairwise_kernels(X, metric=name))
