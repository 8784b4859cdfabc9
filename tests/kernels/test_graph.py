"""Graph kernels (k-NN and heat) against plain dense constructions."""

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp

from mbkkm.kernels import (
    GRAPH_KERNELS,
    KERNELS,
    LowRankKernel,
    graph_kernel_matrix,
    heat_kernel,
    kernel_block,
    kernel_diagonal,
    knn_adjacency,
    knn_kernel,
)


def _data(seed, n=40, d=3):
    return np.random.default_rng(seed).normal(size=(n, d))


def _dense_adjacency(X, n_neighbors):
    """Brute force: each point, itself and its n_neighbors - 1 nearest others."""
    n = len(X)
    dist = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    A = np.zeros((n, n))
    for i in range(n):
        others = [j for j in np.argsort(dist[i], kind="stable") if j != i]
        A[i, others[: n_neighbors - 1]] = 1
    A = np.maximum(A, A.T)
    np.fill_diagonal(A, 1)
    return A


def _dense_knn_kernel(X, n_neighbors):
    A = _dense_adjacency(X, n_neighbors)
    d = A.sum(1)
    return A / np.outer(d, d)  # D^-1 A D^-1


def _dense_normalized(X, n_neighbors):
    A = _dense_adjacency(X, n_neighbors)
    s = 1 / np.sqrt(A.sum(1))
    N = A * np.outer(s, s)
    return N, np.eye(len(X)) - N  # N = D^-1/2 A D^-1/2, L = I - N


# --- k-NN kernel ------------------------------------------------------------------------


@pytest.mark.parametrize("n_neighbors", [1, 2, 5, 13, 40])
@pytest.mark.parametrize("seed", [0, 1])
def test_knn_kernel_equals_dense_construction(seed, n_neighbors):
    X = _data(seed)
    K = knn_kernel(X, n_neighbors)
    assert sp.issparse(K) and K.format == "csr"
    assert K.shape == (40, 40)
    np.testing.assert_allclose(K.toarray(), _dense_knn_kernel(X, n_neighbors), rtol=1e-14)


@pytest.mark.parametrize("n_neighbors", [1, 3, 10])
def test_adjacency_convention(n_neighbors):
    X = _data(2, n=30)
    A = knn_adjacency(X, n_neighbors)
    dense = A.toarray()
    np.testing.assert_array_equal(dense, dense.T)
    np.testing.assert_array_equal(np.diag(dense), 1)
    assert set(np.unique(dense)) <= {0.0, 1.0}
    # n_neighbors counts the point itself: every degree is at least n_neighbors,
    # and each point's own row holds its n_neighbors - 1 nearest others.
    assert dense.sum(1).min() >= n_neighbors
    np.testing.assert_array_equal(dense, _dense_adjacency(X, n_neighbors))
    # K(x, x) = 1 / d_x^2, so the paper's gamma max sqrt(K(x, x)) is 1 / min d.
    K = knn_kernel(X, n_neighbors)
    np.testing.assert_allclose(kernel_diagonal(K), 1 / dense.sum(1) ** 2)


def test_duplicates_keep_self_loops():
    X = np.repeat(_data(3, n=10), 3, axis=0)  # every point three times
    A = knn_adjacency(X, 3).toarray()
    np.testing.assert_array_equal(np.diag(A), 1)
    assert A.sum(1).min() >= 3


def test_float32_input():
    X = _data(4).astype(np.float32)
    K = knn_kernel(X, 4)
    assert K.dtype == np.float64
    np.testing.assert_allclose(K.toarray(), _dense_knn_kernel(X.astype(np.float64), 4))


def test_metric_is_used():
    X = _data(5)
    K1 = knn_kernel(X, 6, metric="manhattan")
    dist = np.abs(X[:, None] - X[None]).sum(-1)
    A = np.zeros((40, 40))
    for i in range(40):
        others = [j for j in np.argsort(dist[i], kind="stable") if j != i]
        A[i, others[:5]] = 1
    A = np.maximum(A, A.T)
    np.fill_diagonal(A, 1)
    d = A.sum(1)
    np.testing.assert_allclose(K1.toarray(), A / np.outer(d, d))


# --- heat kernel ------------------------------------------------------------------------


@pytest.mark.parametrize("t", [0.1, 1.0, 7.5])
@pytest.mark.parametrize("n_neighbors", [2, 6, 40])
def test_heat_kernel_equals_expm(n_neighbors, t):
    X = _data(6)
    N, L = _dense_normalized(X, n_neighbors)
    K_lap = heat_kernel(X, n_neighbors, t)
    K_adj = heat_kernel(X, n_neighbors, t, form="adjacency")
    assert isinstance(K_lap, np.ndarray) and K_lap.shape == (40, 40)
    np.testing.assert_allclose(K_lap, sla.expm(-t * L), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(K_adj, sla.expm(-t * N), rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(K_lap, K_lap.T)
    # The documented identity: exp(-t L) = e^{-t} exp(t N).
    np.testing.assert_allclose(K_lap, np.exp(-t) * sla.expm(t * N), rtol=1e-9, atol=1e-12)


def test_heat_kernel_with_self_loops_only_is_identity():
    X = _data(7, n=12)
    np.testing.assert_allclose(heat_kernel(X, 1, 2.0), np.eye(12), atol=1e-14)
    np.testing.assert_allclose(
        heat_kernel(X, 1, 2.0, form="adjacency"), np.exp(-2.0) * np.eye(12), atol=1e-14
    )


@pytest.mark.parametrize("form", ["laplacian", "adjacency"])
@pytest.mark.parametrize("rank", [1, 5, 20])
def test_low_rank_error_bound(form, rank):
    X = _data(8, n=60)
    t = 3.0
    exact = heat_kernel(X, 5, t, form=form)
    approx = heat_kernel(X, 5, t, form=form, n_components=rank, random_state=0)
    assert isinstance(approx, LowRankKernel)
    assert approx.rank == rank and approx.shape == (60, 60)
    assert np.all(np.diff(approx.weights) <= 1e-12)
    assert approx.error <= approx.weights[-1] + 1e-12
    diff = exact - approx.toarray()
    tol = 1e-8
    # Entrywise bound, and the spectral norm of the remainder equals the first dropped weight.
    assert np.abs(diff).max() <= approx.error + tol
    assert np.linalg.norm(diff, 2) == pytest.approx(approx.error, rel=1e-6, abs=tol)
    # The kept part underestimates the diagonal.
    assert np.all(approx.diagonal() <= np.diag(exact) + tol)
    # Its weights are the largest eigenvalues of the exact kernel.
    top = np.sort(np.linalg.eigvalsh(exact))[::-1]
    np.testing.assert_allclose(approx.weights, top[:rank], rtol=1e-8)
    assert approx.error == pytest.approx(top[rank], rel=1e-8)


def test_memory_budget_switches_to_low_rank():
    X = _data(9, n=30)
    K = heat_kernel(X, 4, 1.0, max_dense_bytes=8 * 30 * 30 - 1, random_state=0)
    assert isinstance(K, LowRankKernel)
    # every weight exp(-(1 - lam)) >= e^-2 is above rank_tol: all 30 pairs, no error
    assert K.rank == 30 and K.error == 0.0
    assert "heat" in repr(K)
    dense = heat_kernel(X, 4, 1.0, max_dense_bytes=8 * 30 * 30)
    assert isinstance(dense, np.ndarray)
    np.testing.assert_allclose(K.toarray(), dense, atol=K.error + 1e-8)


# --- uniform access ---------------------------------------------------------------------


def _representations():
    X = _data(10, n=25)
    low = heat_kernel(X, 4, 2.0, n_components=6, random_state=0)
    return {
        "sparse": knn_kernel(X, 4),
        "dense": heat_kernel(X, 4, 2.0),
        "low_rank": low,
    }


@pytest.mark.parametrize("kind", ["sparse", "dense", "low_rank"])
def test_kernel_block_and_diagonal(kind):
    K = _representations()[kind]
    dense = K.toarray() if not isinstance(K, np.ndarray) else K
    rows = np.array([3, 0, 3, 24])  # repeats allowed
    cols = np.array([7, 7, 1])
    block = kernel_block(K, rows, cols)
    assert isinstance(block, np.ndarray) and block.shape == (4, 3)
    np.testing.assert_allclose(block, dense[np.ix_(rows, cols)], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(
        kernel_block(K, slice(None), slice(2, 5)), dense[:, 2:5], rtol=1e-12, atol=1e-15
    )
    assert kernel_block(K, [], cols).shape == (0, 3)
    diag = kernel_diagonal(K)
    assert diag.shape == (25,)
    np.testing.assert_allclose(diag, np.diag(dense), rtol=1e-12)


def test_kernel_diagonal_is_a_copy():
    K = np.eye(3)
    kernel_diagonal(K)[0] = 5
    assert K[0, 0] == 1


def test_kernel_block_errors():
    with pytest.raises(TypeError, match="K must be a scipy sparse matrix"):
        kernel_block([[1.0]], [0], [0])
    with pytest.raises(ValueError, match="K must be a square matrix"):
        kernel_diagonal(np.ones((2, 3)))
    with pytest.raises(TypeError, match="rows must be a 1-D array of integer indices"):
        kernel_block(np.eye(3), [0.5], [0])


@pytest.mark.parametrize("name", GRAPH_KERNELS)
def test_graph_kernel_matrix_dispatch(name):
    X = _data(11, n=20)
    builder = {"knn": knn_kernel, "heat": heat_kernel}[name]
    K = graph_kernel_matrix(name, X, n_neighbors=3)
    expected = builder(X, 3)
    dense = K.toarray() if sp.issparse(K) else K
    dense_expected = expected.toarray() if sp.issparse(expected) else expected
    np.testing.assert_array_equal(dense, dense_expected)


def test_graph_kernel_matrix_errors():
    X = _data(12, n=10)
    with pytest.raises(ValueError, match=r"kernel='rbf' is not a graph kernel"):
        graph_kernel_matrix("rbf", X, n_neighbors=3)
    with pytest.raises(ValueError, match=r"'t' is not a parameter of kernel 'knn'"):
        graph_kernel_matrix("knn", X, n_neighbors=3, t=1.0)
    with pytest.raises(ValueError, match="needs the parameter 'n_neighbors'"):
        graph_kernel_matrix("knn", X)


def test_registered_as_graph_kernels():
    assert list(GRAPH_KERNELS) == [n for n, s in KERNELS.items() if s.transductive]
    assert sorted(GRAPH_KERNELS) == ["heat", "knn"]
    for name in GRAPH_KERNELS:
        spec = KERNELS[name]
        assert spec.transductive and spec.builder is not None and not spec.tiles
        assert spec.func is None and spec.diag is None
        assert spec.params[0] == "n_neighbors"
        assert spec.formula
    assert KERNELS["knn"].required_params == ("n_neighbors",)
    assert KERNELS["heat"].required_params == ()  # 10 neighbours by default


# --- parameter errors -------------------------------------------------------------------


@pytest.mark.parametrize("builder", [knn_kernel, heat_kernel])
@pytest.mark.parametrize("n_neighbors", [0, -1, 11])
def test_bad_n_neighbors_value(builder, n_neighbors):
    with pytest.raises(ValueError, match=r"n_neighbors must be in \[1, n_samples\] = \[1, 10\]"):
        builder(_data(13, n=10), n_neighbors)


@pytest.mark.parametrize("builder", [knn_kernel, heat_kernel])
@pytest.mark.parametrize("n_neighbors", [2.0, True, "3"])
def test_bad_n_neighbors_type(builder, n_neighbors):
    with pytest.raises(TypeError, match="n_neighbors must be an integer"):
        builder(_data(13, n=10), n_neighbors)


@pytest.mark.parametrize("t", [0, -1.0, np.nan, np.inf])
def test_bad_t_value(t):
    with pytest.raises(ValueError, match="t must be a finite number > 0"):
        heat_kernel(_data(14, n=10), 3, t)


@pytest.mark.parametrize("t", ["1", None, True])
def test_bad_t_type(t):
    with pytest.raises(TypeError, match="t must be a real number"):
        heat_kernel(_data(14, n=10), 3, t)


def test_bad_form():
    with pytest.raises(ValueError, match=r"form must be one of \['laplacian', 'adjacency'\]"):
        heat_kernel(_data(15, n=10), 3, form="exp")


@pytest.mark.parametrize("n_components", [0, 9])
def test_bad_n_components(n_components):
    with pytest.raises(ValueError, match=r"n_components must be in \[1, n_samples - 2\]"):
        heat_kernel(_data(16, n=10), 3, n_components=n_components)
    with pytest.raises(TypeError, match="n_components must be an integer"):
        heat_kernel(_data(16, n=10), 3, n_components=2.5)


def test_bad_max_dense_bytes():
    with pytest.raises(ValueError, match="max_dense_bytes"):
        heat_kernel(_data(16, n=10), 3, max_dense_bytes=-1)


def test_bad_data():
    with pytest.raises(ValueError, match="NaN"):
        knn_kernel(np.array([[0.0], [np.nan], [1.0]]), 2)
    with pytest.raises(ValueError, match="minimum of 2"):
        knn_kernel(np.zeros((1, 2)), 1)


def test_low_rank_kernel_shape_check():
    with pytest.raises(ValueError, match=r"U must have shape \(n_samples, rank\)"):
        LowRankKernel(np.ones((4, 2)), np.ones(3), 0.0)


# --- a graph of fewer neighbours from the same search ------------------------------------


@pytest.mark.parametrize("n_neighbors", [1, 2, 5, 13])
def test_truncated_graph_equals_the_dense_construction(n_neighbors):
    from mbkkm.kernels import KNNGraph

    X = _data(3, n=60)
    graph = KNNGraph(20).fit(X).truncated(n_neighbors)
    np.testing.assert_array_equal(graph.adjacency_.toarray(), _dense_adjacency(X, n_neighbors))
    fresh = KNNGraph(n_neighbors).fit(X)
    np.testing.assert_array_equal(graph.radius_, fresh.radius_)
    np.testing.assert_array_equal(graph.degrees_, fresh.degrees_)
    # new points join it as they join a graph searched for that count
    X_new = _data(4, n=15)
    if n_neighbors > 1:
        assert (graph.attach(X_new) != fresh.attach(X_new)).nnz == 0
    with pytest.raises(ValueError, match="at most the graph's 20"):
        KNNGraph(20).fit(X).truncated(21)


def test_truncated_graph_with_ties_is_a_knn_graph():
    from mbkkm.kernels import KNNGraph

    # integer points: many at the same distance; each point keeps k - 1 others, none
    # farther than one it dropped
    X = np.random.default_rng(0).integers(0, 4, size=(80, 2)).astype(float)
    graph = KNNGraph(30).fit(X).truncated(6)
    dist = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1))
    _, ind = graph._lists
    for i in range(80):
        kept = ind[i]
        assert kept.size == 5 and i not in kept
        others = np.setdiff1d(np.delete(np.arange(80), i), kept)
        assert dist[i, kept].max() <= dist[i, others].min()
    np.testing.assert_array_equal(
        graph.radius_, np.sort(dist + np.diag([np.inf] * 80), axis=1)[:, 4]
    )
