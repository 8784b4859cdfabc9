"""Kernels on scipy.sparse rows: the same tiles and diagonals as on the dense rows.

Oracles: the kernel on the dense copy of the same data (mbkkm's dense path, which
tests/kernels/test_pairwise.py checks against scikit-learn) and
:func:`sklearn.metrics.pairwise.pairwise_kernels` in float64.
"""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.metrics.pairwise import pairwise_kernels

from mbkkm.kernels import KERNELS, kernel_gamma, mean_squared_pairwise_distance, resolve_kernel

SPARSE_KERNELS = sorted(n for n, s in KERNELS.items() if s.func is not None and s.accepts_sparse)
DENSE_ONLY = sorted(n for n, s in KERNELS.items() if s.func is not None and not s.accepts_sparse)
PARAMS = {"gamma": 0.3, "degree": 3, "coef0": 1.5}
# Tolerances of float rounding: the sparse and dense products sum in different orders.
RTOL = {np.float64: 1e-10, np.float32: 2e-5}
# X/Y containers: the dense array itself, CSR, CSC (converted), csr_array.
KINDS = {
    "dense": lambda A: A,
    "csr": sp.csr_matrix,
    "csc": sp.csc_matrix,
    "csr_array": sp.csr_array,
}


def _params(name):
    return {p: PARAMS[p] for p in KERNELS[name].params}


def _sparse_data(seed, n, d, density=0.3, dtype=np.float64):
    """Dense array with about ``density`` non-zeros, an empty row (0) and a duplicate row."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(n, d)) * (rng.random((n, d)) < density)
    A[0] = 0  # an empty row (cosine: K = 0, as in scikit-learn)
    A[-1] = A[1]
    return A.astype(dtype)


def _close(a, b, dtype):
    rtol = RTOL[dtype]
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * max(1.0, np.abs(b).max()))


def test_chi2_is_the_only_pairwise_kernel_without_sparse():
    assert DENSE_ONLY == ["chi2"]
    assert {"linear", "cosine", "polynomial", "sigmoid", "rbf", "laplacian"} <= set(SPARSE_KERNELS)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    ("kx", "ky"),
    [(a, b) for a, b in itertools.product(KINDS, KINDS) if (a, b) != ("dense", "dense")],
)
@pytest.mark.parametrize("name", SPARSE_KERNELS)
def test_sparse_tile_equals_dense_tile(name, kx, ky, dtype):
    Xd = _sparse_data(0, 17, 12, dtype=dtype)
    Yd = _sparse_data(1, 11, 12, dtype=dtype)
    kernel = resolve_kernel(name, X=Xd, **_params(name))
    expected = kernel(Xd, Yd)
    K = kernel(KINDS[kx](Xd), KINDS[ky](Yd))
    assert isinstance(K, np.ndarray) and K.flags.c_contiguous
    assert K.shape == (17, 11) and K.dtype == dtype
    _close(K, expected, dtype)
    ref = pairwise_kernels(
        Xd.astype(np.float64),
        Yd.astype(np.float64),
        metric=KERNELS[name].sklearn_name,
        **_params(name),
    )
    _close(K, ref, dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", SPARSE_KERNELS)
def test_sparse_tile_out_and_prepare(name, dtype):
    Xd = _sparse_data(2, 9, 7, dtype=dtype)
    Yd = _sparse_data(3, 6, 7, dtype=dtype)
    kernel = resolve_kernel(name, X=Xd, **_params(name))
    expected = kernel(Xd, Yd)
    for X, Y in [
        (sp.csr_matrix(Xd), sp.csr_matrix(Yd)),
        (sp.csr_matrix(Xd), Yd),
        (Xd, sp.csr_matrix(Yd)),
    ]:
        buf = np.full((12, 6), np.nan, dtype=dtype)  # a reused buffer, larger than needed
        out = buf[:9]
        cache = kernel.prepare(X)  # what the left operand (the support) can reuse
        assert isinstance(cache, dict)
        result = kernel(X, Y, out=out, **cache)
        assert result is out
        _close(out, expected, dtype)
        assert np.isnan(buf[9:]).all()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rbf_sparse_with_prepared_support(dtype):
    """The support (left operand) prepared once: dense -> X_aug, sparse -> its norms."""
    Xd = _sparse_data(4, 8, 5, dtype=dtype)
    Yd = _sparse_data(5, 7, 5, dtype=dtype)
    kernel = resolve_kernel("rbf", gamma=0.7)
    cache = kernel.prepare(Xd)
    assert "X_aug" in cache
    _close(kernel(Xd, sp.csr_matrix(Yd), **cache), kernel(Xd, Yd), dtype)
    cache = kernel.prepare(sp.csr_matrix(Xd))
    assert "X_aug" not in cache  # never a dense copy of a sparse support
    _close(kernel(sp.csr_matrix(Xd), Yd, **cache), kernel(Xd, Yd), dtype)
    _close(kernel(sp.csr_matrix(Xd), sp.csr_matrix(Yd), **cache), kernel(Xd, Yd), dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("sparse_left", [False, True])
def test_cosine_with_prepared_support(dtype, sparse_left):
    """The support's unit rows prepared once == scikit-learn's cosine_similarity."""
    from sklearn.metrics.pairwise import cosine_similarity

    Xd = _sparse_data(6, 8, 5, dtype=dtype)
    Xd[2] = 0  # a zero row: 0 against everything, as in scikit-learn
    Yd = _sparse_data(5, 7, 5, dtype=dtype)
    X = sp.csr_matrix(Xd) if sparse_left else Xd
    kernel = resolve_kernel("cosine")
    cache = kernel.prepare(X)
    assert sp.issparse(cache["X_unit"]) == sparse_left  # never densified
    for Y in (Yd, sp.csr_matrix(Yd)):
        _close(kernel(X, Y, **cache), cosine_similarity(Xd, Yd), dtype)


def test_mixed_dtypes_give_the_common_dtype():
    Xd = _sparse_data(6, 5, 4, dtype=np.float32)
    Yd = _sparse_data(7, 3, 4, dtype=np.float64)
    for name in SPARSE_KERNELS:
        K = resolve_kernel(name, **_params(name), X=Yd)(sp.csr_matrix(Xd), sp.csr_matrix(Yd))
        assert K.dtype == np.float64, name


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fmt", ["csr", "csc", "csr_array"])
@pytest.mark.parametrize("name", SPARSE_KERNELS)
def test_sparse_diag_equals_dense_diag(name, fmt, dtype):
    Xd = _sparse_data(8, 21, 6, dtype=dtype)
    kernel = resolve_kernel(name, X=Xd, **_params(name))
    diag = kernel.diag(KINDS[fmt](Xd))
    assert diag.shape == (21,) and diag.dtype == dtype
    _close(diag, kernel.diag(Xd), dtype)
    ref = np.diagonal(
        pairwise_kernels(Xd.astype(np.float64), metric=KERNELS[name].sklearn_name, **_params(name))
    )
    _close(diag, ref, dtype)
    if name == "cosine":
        np.testing.assert_array_equal(diag, np.abs(Xd).sum(1) > 0)
        assert diag[0] == 0


def test_non_canonical_csr_is_read_as_the_matrix_it_represents():
    """Duplicate and unsorted entries (allowed by scipy) sum, as in X.toarray()."""
    data = np.array([1.0, 2.0, 3.0, -1.0])
    indices = np.array([2, 0, 2, 1])  # row 0: col 2 twice, unsorted
    indptr = np.array([0, 3, 4])
    X = sp.csr_matrix((data, indices, indptr), shape=(2, 3))
    assert not X.has_canonical_format
    before = (X.data.copy(), X.indices.copy())
    Xd = X.toarray()
    for name in SPARSE_KERNELS:
        kernel = resolve_kernel(name, X=Xd, **_params(name))
        _close(kernel(X, X), kernel(Xd, Xd), np.float64)
        _close(kernel.diag(X), kernel.diag(Xd), np.float64)
    # the caller's matrix is left as it was
    np.testing.assert_array_equal(X.data, before[0])
    np.testing.assert_array_equal(X.indices, before[1])


def test_chi2_refuses_sparse_with_a_clear_error():
    Xd = np.abs(_sparse_data(9, 6, 4))
    X = sp.csr_matrix(Xd)
    with pytest.raises(ValueError, match=r"kernel='chi2' does not support sparse"):
        resolve_kernel("chi2", X=X)
    kernel = resolve_kernel("chi2", X=Xd)
    for A, B in [(X, Xd), (Xd, X), (X, X)]:
        with pytest.raises(ValueError, match=r"chi2.*sparse"):
            kernel(A, B)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_mean_squared_pairwise_distance_sparse(dtype, weighted, monkeypatch):
    Xd = _sparse_data(10, 40, 9, dtype=dtype)
    Xd[:, 3] += 50.0 * (Xd[:, 3] != 0)  # a feature far from 0 where stored: accuracy
    w = np.random.default_rng(0).uniform(0.1, 2.0, size=40) if weighted else None
    # Plain double sum over all ordered pairs (the oracle).
    X64 = Xd.astype(np.float64)
    ww = np.ones(40) if w is None else w
    D = ((X64[:, None, :] - X64[None, :, :]) ** 2).sum(-1)
    expected = float(ww @ D @ ww / ww.sum() ** 2)
    # Small row chunks: the chunked passes are exercised.
    monkeypatch.setattr("mbkkm.kernels._kernel._CHUNK_ROWS", 7)
    got = mean_squared_pairwise_distance(sp.csr_matrix(Xd), w)
    assert got == pytest.approx(expected, rel=1e-9)
    assert got == pytest.approx(mean_squared_pairwise_distance(Xd, w), rel=1e-9)


@pytest.mark.parametrize("name", [n for n in SPARSE_KERNELS if "gamma" in KERNELS[n].params])
def test_resolve_kernel_default_gamma_on_sparse_equals_dense(name):
    Xd = _sparse_data(11, 30, 8)
    params = {p: PARAMS[p] for p in KERNELS[name].params if p != "gamma"}
    g_sparse = resolve_kernel(name, X=sp.csr_matrix(Xd), **params).params["gamma"]
    g_dense = resolve_kernel(name, X=Xd, **params).params["gamma"]
    assert g_sparse == pytest.approx(g_dense, rel=1e-12)


@pytest.mark.parametrize("name", SPARSE_KERNELS)
def test_kernel_gamma_accepts_sparse(name):
    Xd = _sparse_data(12, 25, 6)
    assert kernel_gamma(sp.csr_matrix(Xd), name, **_params(name)) == pytest.approx(
        kernel_gamma(Xd, name, **_params(name)), rel=1e-12
    )


def test_callable_kernel_gets_sparse_rows_and_may_return_sparse():
    Xd = _sparse_data(13, 7, 5)
    X = sp.csr_matrix(Xd)
    seen = []

    def k(A, B):
        seen.append(type(A))
        return A @ B.T  # sparse x sparse -> sparse

    kernel = resolve_kernel(k)
    K = kernel(X, X)
    assert isinstance(K, np.ndarray)
    np.testing.assert_allclose(K, Xd @ Xd.T)
    np.testing.assert_allclose(kernel.diag(X), np.einsum("ij,ij->i", Xd, Xd))
    assert seen and all(t is sp.csr_matrix for t in seen)


def test_sparse_tile_never_densifies_the_rows(monkeypatch):
    """No dense (n, d) copy of a sparse operand: toarray is only called on (n_x, n_y) tiles."""
    Xd = _sparse_data(14, 20, 300, density=0.02)
    Yd = _sparse_data(15, 10, 300, density=0.02)
    X, Y = sp.csr_matrix(Xd), sp.csr_matrix(Yd)
    shapes = []
    original = sp.csr_matrix.toarray

    def spy(self, *args, **kwargs):
        shapes.append(self.shape)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(sp.csr_matrix, "toarray", spy)
    for name in SPARSE_KERNELS:
        kernel = resolve_kernel(name, X=X, **_params(name))
        kernel(X, Y, **kernel.prepare(X))
        kernel.diag(X)
    assert all(s[1] != 300 for s in shapes), shapes
