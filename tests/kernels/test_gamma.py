"""The paper's gamma = max_x sqrt(K(x, x)), including the PenDigits k-NN value of Table 1."""

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_blobs
from sklearn.metrics.pairwise import pairwise_kernels

from mbkkm.kernels import (
    KERNELS,
    _gamma,
    heat_kernel,
    kernel_gamma,
    knn_adjacency,
    knn_kernel,
    resolve_kernel,
)

PAIRWISE = sorted(name for name, spec in KERNELS.items() if spec.func is not None)
SHARED_DATASETS = Path(__file__).resolve().parents[2] / ".." / "shared" / "datasets"


def _data(seed, n=50, d=4, nonnegative=False):
    X = np.random.default_rng(seed).normal(size=(n, d))
    return np.abs(X) if nonnegative else X


@pytest.mark.parametrize("name", PAIRWISE)
def test_pairwise_gamma_is_max_sqrt_diagonal(name, monkeypatch):
    spec = KERNELS[name]
    X = _data(0, nonnegative=spec.nonnegative_data)
    params = {"gamma": 0.2, "degree": 2, "coef0": 1.0}
    params = {p: params[p] for p in spec.params}
    ref = np.sqrt(np.max(np.diagonal(pairwise_kernels(X, X, metric=spec.sklearn_name, **params))))
    assert kernel_gamma(X, name, **params) == pytest.approx(ref, rel=1e-12)
    monkeypatch.setattr(_gamma, "_CHUNK_ROWS", 7)  # several chunks, a short last one
    assert kernel_gamma(X, name, **params) == pytest.approx(ref, rel=1e-12)
    if spec.normalized:
        assert kernel_gamma(X, name, **params) == 1.0


def test_linear_gamma_is_largest_norm():
    X = _data(1)
    assert kernel_gamma(X, "linear") == pytest.approx(np.linalg.norm(X, axis=1).max())
    assert kernel_gamma(X.astype(np.float32), "linear") == pytest.approx(
        np.linalg.norm(X, axis=1).max(), rel=1e-6
    )


def test_callable_and_resolved_kernel():
    X = _data(2)

    def lin(X, Y, scale=1.0):
        return scale * X @ Y.T

    expected = 3.0 * np.linalg.norm(X, axis=1).max()
    assert kernel_gamma(X, lin, scale=9.0) == pytest.approx(expected)
    resolved = resolve_kernel("polynomial", gamma=1.0, degree=2, coef0=0.0)
    assert kernel_gamma(X, resolved) == pytest.approx(np.sum(X**2, axis=1).max())


def test_precomputed():
    X = _data(3)
    K = X @ X.T
    expected = np.linalg.norm(X, axis=1).max()
    assert kernel_gamma(K, "precomputed") == pytest.approx(expected)
    assert kernel_gamma(sp.csr_matrix(K), "precomputed") == pytest.approx(expected)
    with pytest.raises(ValueError, match="square"):
        kernel_gamma(X, "precomputed")
    with pytest.raises(ValueError, match="takes no parameters"):
        kernel_gamma(K, "precomputed", gamma=1.0)


def test_knn_gamma_is_inverse_min_degree():
    X = _data(4, n=80)
    A = knn_adjacency(X, 6)
    assert kernel_gamma(X, "knn", n_neighbors=6) == pytest.approx(1 / A.sum(1).min())
    K = knn_kernel(X, 6)
    assert kernel_gamma(K, "precomputed") == pytest.approx(1 / A.sum(1).min())


@pytest.mark.parametrize("form", ["laplacian", "adjacency"])
def test_heat_gamma(form):
    X = _data(5, n=60)
    K = heat_kernel(X, 5, 2.0, form=form)
    expected = np.sqrt(np.diag(K).max())
    assert kernel_gamma(X, "heat", n_neighbors=5, t=2.0, form=form) == pytest.approx(expected)
    low = heat_kernel(X, 5, 2.0, form=form, n_components=30, random_state=0)
    assert kernel_gamma(low, "precomputed") <= expected + 1e-12


def test_negative_diagonal_is_refused():
    X = _data(6)
    with pytest.raises(ValueError, match="not positive semi-definite"):
        kernel_gamma(X, "sigmoid", gamma=0.01, coef0=-5.0)
    with pytest.raises(ValueError, match="not positive semi-definite"):
        kernel_gamma(-np.eye(3), "precomputed")


def test_unknown_parameter():
    with pytest.raises(ValueError, match="'degree' is not a parameter of kernel 'rbf'"):
        kernel_gamma(_data(7), "rbf", degree=3)
    with pytest.raises(ValueError, match="'gamma' is not a parameter of kernel 'knn'"):
        kernel_gamma(_data(7), "knn", n_neighbors=3, gamma=3)


def _pendigits_standardised():
    path = SHARED_DATASETS / "pendigits.npz"
    if not path.is_file():
        pytest.skip(f"PenDigits not found at {path} (the shared datasets folder beside the repo)")
    with np.load(path, allow_pickle=False) as data:
        X = data["X"].astype(np.float64)
    return (X - X.mean(0)) / X.std(0)


@pytest.mark.slow
def test_pendigits_knn_gamma_matches_paper_table1():
    # Paper, Appendix C, Table 1: PenDigits, k-NN kernel (1000 neighbours), gamma 0.00100.
    X = _pendigits_standardised()
    gamma = kernel_gamma(X, "knn", n_neighbors=1000)
    assert float(f"{gamma:.3g}") == 0.00100


def _dense_heat_diagonal(A, t):
    import scipy.linalg as sla

    d = np.asarray(A.sum(1)).ravel()
    N = A.toarray() / np.sqrt(np.outer(d, d))
    return np.diag(sla.expm(-t * (np.eye(len(d)) - N)))


@pytest.mark.parametrize("t", [1.0, 7.0])
def test_heat_diagonal_max_equals_the_dense_exponential(t):
    from mbkkm.kernels import knn_adjacency
    from mbkkm.kernels._gamma import heat_diagonal_max

    X, _ = make_blobs(n_samples=300, centers=4, n_features=3, random_state=1)
    A = knn_adjacency(X, 12)
    ref = _dense_heat_diagonal(A, t)
    # The probe-and-refine path (forced), and the dense path.
    got = heat_diagonal_max(A, t, n_components=20, dense_limit=0, random_state=0)
    assert not got.exact_path and got.certified
    if t == 7.0:  # at the paper's diffusion times the probes leave few points to compute
        assert got.n_exact < 150
    assert got.argmax == int(np.argmax(ref))
    assert got.value == pytest.approx(ref.max(), rel=1e-9)
    assert got.gamma == pytest.approx(np.sqrt(ref.max()), rel=1e-9)
    import scipy.sparse.linalg as spla

    from mbkkm.kernels._gamma import _heat_operator

    lam, U = spla.eigsh(_heat_operator(A)[1], k=20, which="LA", v0=np.ones(300))
    again = heat_diagonal_max(A, t, eigenpairs=(lam, U), dense_limit=0, random_state=0)
    assert again.value == pytest.approx(ref.max(), rel=1e-9)
    with pytest.raises(ValueError, match="eigenpairs"):
        heat_diagonal_max(A, t, eigenpairs=(lam, U[:10]), dense_limit=0)
    dense = heat_diagonal_max(A, t)
    assert dense.exact_path and dense.value == pytest.approx(ref.max(), rel=1e-10)
    # max_exact reached before the certificate: reported as not certified.
    few = heat_diagonal_max(
        A, t, n_components=2, n_probes=2, dense_limit=0, batch=1, max_exact=1, random_state=0
    )
    assert few.n_exact == 1 and few.value <= ref.max() * (1 + 1e-9)


def test_heat_diagonal_max_checks():
    from mbkkm.kernels._gamma import heat_diagonal_max

    A = sp.identity(5, format="csr")
    for bad in (0, -1.0, True, "1"):
        with pytest.raises(ValueError, match="t must be"):
            heat_diagonal_max(A, bad)
    with pytest.raises(ValueError, match="n_probes"):
        heat_diagonal_max(A, 1.0, n_probes=1)
    with pytest.raises(ValueError, match="degree 0"):
        heat_diagonal_max(sp.csr_matrix((5, 5)), 1.0)
    with pytest.raises(ValueError, match="square"):
        heat_diagonal_max(sp.csr_matrix((5, 4)), 1.0)
    # Self-loops only: K = exp(-t (I - I)) = I.
    assert heat_diagonal_max(A, 2.0).gamma == pytest.approx(1.0)


def test_heat_operator_is_the_normalized_adjacency():
    """The heat kernel's operators come from the same N = D^-1/2 A D^-1/2 as the
    spectral code's: equal to the dense formula, and bit for bit the diagonal
    products (s_i a_ij s_j) on a 0/1 k-NN graph."""
    from mbkkm.kernels._gamma import _heat_operator
    from mbkkm.kernels._spectral import normalized_adjacency

    rng = np.random.default_rng(0)
    A01 = knn_adjacency(rng.normal(size=(120, 3)), 8)
    weights = sp.csr_matrix(np.exp(-rng.random((120, 120))))
    weighted = A01.multiply(weights + weights.T).tocsr()
    for A in (A01, weighted):
        d = np.asarray(A.sum(axis=1)).ravel()
        dense = A.toarray() / np.sqrt(np.outer(d, d))
        L, N = _heat_operator(A)
        assert sp.isspmatrix_csr(N) and sp.isspmatrix_csr(L)
        np.testing.assert_allclose(N.toarray(), dense, rtol=1e-15, atol=0)
        np.testing.assert_allclose(L.toarray(), np.eye(120) - dense, rtol=0, atol=1e-15)
        np.testing.assert_array_equal(N.toarray(), normalized_adjacency(A, d).toarray())
    s = 1.0 / np.sqrt(np.asarray(A01.sum(axis=1)).ravel())
    np.testing.assert_array_equal(
        _heat_operator(A01)[1].toarray(), (sp.diags(s) @ A01 @ sp.diags(s)).toarray()
    )
    with pytest.raises(ValueError, match="degree 0"):
        _heat_operator(sp.csr_matrix((4, 4)))


def _top_pairs(A, r):
    """The r largest eigenpairs of D^-1/2 A D^-1/2 from a dense decomposition."""
    import scipy.linalg as sla

    d = np.asarray(A.sum(1)).ravel()
    lam, V = sla.eigh(A.toarray() / np.sqrt(np.outer(d, d)))
    return lam[::-1][:r], V[:, ::-1][:, :r]


def test_heat_diagonal_bounds_contain_the_dense_exponential():
    from mbkkm.kernels._gamma import heat_diagonal_bounds

    X, _ = make_blobs(n_samples=150, centers=4, n_features=3, random_state=2)
    A = knn_adjacency(X, 12)
    ts = np.array([0.5, 3.0, 7.0, 20.0])
    ref = np.stack([_dense_heat_diagonal(A, t) for t in ts], axis=1)
    gaps = []
    for r in (1, 10, 60):
        lower, upper = heat_diagonal_bounds(A, ts, _top_pairs(A, r))
        assert lower.shape == upper.shape == (150, 4)
        assert np.all(lower <= ref * (1 + 1e-10)) and np.all(upper >= ref * (1 - 1e-10))
        gaps.append(float(np.max((upper - lower) / ref)))
        one_lo, one_up = heat_diagonal_bounds(A, 7.0, _top_pairs(A, r))
        np.testing.assert_allclose(one_lo, lower[:, 2], rtol=1e-12)
        np.testing.assert_allclose(one_up, upper[:, 2], rtol=1e-12)
    assert gaps[0] > gaps[1] > gaps[2]
    # Every pair given: the bounds are the diagonal itself.
    lower, upper = heat_diagonal_bounds(A, ts, _top_pairs(A, 150))
    np.testing.assert_allclose(lower, ref, rtol=1e-9)
    np.testing.assert_allclose(upper, ref, rtol=1e-9)


def test_heat_time_for_gamma_matches_the_dense_root():
    from scipy.optimize import brentq

    from mbkkm.kernels._gamma import heat_time_for_gamma

    # Four blobs: four connected components, eigenvalue 1 four times over.
    X, _ = make_blobs(n_samples=160, centers=4, n_features=3, random_state=1)
    A = knn_adjacency(X, 10)
    gamma = 0.25
    lam, V = _top_pairs(A, 160)
    t_ref = brentq(
        lambda t: ((V**2) @ np.exp(-t * (1 - lam))).max() - gamma**2, 1e-3, 200, xtol=1e-10
    )
    assert _dense_heat_diagonal(A, t_ref).max() == pytest.approx(gamma**2, rel=1e-9)
    coarse = heat_time_for_gamma(A, gamma, n_components=8, n_exact=0, random_state=0)
    assert coarse.t_low - 1e-4 <= t_ref <= coarse.t_high + 1e-4
    assert coarse.bounds_bracket == (coarse.t_low, coarse.t_high)
    refined = heat_time_for_gamma(A, gamma, n_components=8, n_exact=16, random_state=0)
    assert refined.t_low - 1e-4 <= t_ref <= refined.t_high + 1e-4
    assert coarse.t_low - 1e-4 <= refined.t_low <= refined.t_high <= coarse.t_high + 1e-4
    sharp = heat_time_for_gamma(A, gamma, n_components=40, n_exact=32, random_state=0)
    assert sharp.t_low - 1e-4 <= t_ref <= sharp.t_high + 1e-4
    assert sharp.t_high - sharp.t_low < 1e-4
    assert _dense_heat_diagonal(A, t_ref).argmax() == sharp.argmax
    every = heat_time_for_gamma(A, gamma, eigenpairs=(lam, V), n_exact=0)
    assert every.t == pytest.approx(t_ref, abs=1e-4) and every.n_components == 160


def test_heat_time_for_gamma_checks():
    from mbkkm.kernels._gamma import heat_diagonal_bounds, heat_time_for_gamma

    X, _ = make_blobs(n_samples=60, centers=2, n_features=2, random_state=0)
    A = knn_adjacency(X, 6)
    for bad in (0, 1.0, 1.5, -0.1, True, "0.1"):
        with pytest.raises(ValueError, match="gamma must be"):
            heat_time_for_gamma(A, bad)
    with pytest.raises(ValueError, match="n_exact"):
        heat_time_for_gamma(A, 0.2, n_exact=-1)
    with pytest.raises(ValueError, match="n_components"):
        heat_time_for_gamma(A, 0.2, n_components=0)
    with pytest.raises(ValueError, match="eigenpairs"):
        heat_time_for_gamma(A, 0.2, eigenpairs=(np.ones(3), np.ones((59, 3))))
    with pytest.raises(ValueError, match="t must be"):
        heat_diagonal_bounds(A, [1.0, -2.0], _top_pairs(A, 3))
    # A 2-point component keeps d_x / vol = 1/2 on its diagonal at every t.
    B = sp.block_diag([A, sp.csr_matrix(np.ones((2, 2)))]).tocsr()
    with pytest.raises(ValueError, match="no diffusion time"):
        heat_time_for_gamma(B, 0.5, n_components=5, random_state=0)
    assert heat_time_for_gamma(B, 0.8, n_components=5, random_state=0).t > 0
