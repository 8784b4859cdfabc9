"""The graph's spectrum, the heat kernel's rank rule, and new points joining the graph,
each against a plain dense construction."""

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp

from mbkkm.kernels import KNNGraph, LowRankKernel, _spectral, heat_kernel, knn_kernel
from mbkkm.kernels._graph import knn_kernel_rows
from mbkkm.kernels._spectral import (
    GraphSpectrum,
    choose_rank,
    connect_graph,
    extend_eigenvectors,
    heat_weights,
    normalized_adjacency,
    split_is_harmful,
    top_eigenpairs,
    unit_rows,
)


def _data(seed, n=60, d=3):
    return np.random.default_rng(seed).normal(size=(n, d))


def _dist(X, Y):
    return np.sqrt(((X[:, None, :] - Y[None, :, :]) ** 2).sum(-1))


def _plain_links(X_fit, X_new, n_neighbors):
    """Links of new points, brute force over all fitted points: the n_neighbors - 1
    nearest, and every fitted j whose n_neighbors - 1 nearest others are no closer
    than x."""
    D_fit = _dist(X_fit, X_fit)
    np.fill_diagonal(D_fit, np.inf)
    radius = np.sort(D_fit, axis=1)[:, n_neighbors - 2]
    D = _dist(X_new, X_fit)
    B = np.zeros_like(D)
    for i in range(len(X_new)):
        B[i, np.argsort(D[i], kind="stable")[: n_neighbors - 1]] = 1
        B[i, D[i] <= radius] = 1
    return B


# --- the graph and new points ---------------------------------------------------------


@pytest.mark.parametrize("n_neighbors", [2, 5, 12])
def test_attach_equals_brute_force(n_neighbors):
    X = _data(0)
    X_new = _data(1, n=15)
    graph = KNNGraph(n_neighbors).fit(X)
    B = graph.attach(X_new)
    assert sp.issparse(B) and B.shape == (15, 60)
    np.testing.assert_array_equal(B.toarray(), _plain_links(X, X_new, n_neighbors))
    # a point that sits on no fitted point's ball is linked to its own neighbours only
    far = graph.attach(np.full((1, 3), 50.0))
    assert far.nnz == n_neighbors - 1


def test_attach_in_several_chunks_equals_brute_force():
    # more new points than one chunk (1024), spread from dense to sparse regions
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 2)) * np.r_[0.2, 3.0][rng.integers(0, 2, 200), None]
    X_new = rng.normal(size=(2100, 2)) * 2.0
    B = KNNGraph(4).fit(X).attach(X_new)
    np.testing.assert_array_equal(B.toarray(), _plain_links(X, X_new, 4))


def test_attach_of_fitted_points_gives_their_symmetrised_row():
    X = _data(2)
    graph = KNNGraph(6).fit(X)
    B = graph.attach(X).toarray()
    A = graph.adjacency_.toarray()
    D = _dist(X, X)
    np.fill_diagonal(D, np.inf)
    own = np.argsort(D, axis=1, kind="stable")[:, :5]  # directed neighbours
    # x, a copy of fitted point i, is linked to i (distance 0), to i's 4 nearest
    # others and to every j that has i among its neighbours: i's row of A, except
    # i's 5th neighbour when that one does not have i among its own.
    for i in range(60):
        reverse = np.flatnonzero((own == i).any(axis=1))
        expected = np.zeros(60)
        expected[[i, *own[i, :4], *reverse]] = 1
        np.testing.assert_array_equal(B[i], expected)
        assert np.all(B[i] <= A[i])


def test_pca_projection_is_used():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 30))
    graph = KNNGraph(6, pca_components=5, random_state=0).fit(X)
    assert graph.pca_ is not None and graph.pca_.n_components_ == 5
    Z = graph.pca_.transform(X)
    np.testing.assert_array_equal(
        graph.adjacency_.toarray(), KNNGraph(6).fit(Z).adjacency_.toarray()
    )
    # fewer features than pca_components: the data themselves
    assert KNNGraph(6, pca_components=50).fit(X).pca_ is None
    with pytest.raises(ValueError, match="pca_components must be >= 1"):
        KNNGraph(6, pca_components=0).fit(X)
    with pytest.raises(TypeError, match="pca_components must be an integer"):
        KNNGraph(6, pca_components=2.5).fit(X)


def test_attach_checks():
    graph = KNNGraph(4).fit(_data(4))
    with pytest.raises(ValueError, match="X has 5 features, but the graph was built on 3 features"):
        graph.attach(np.ones((2, 5)))
    with pytest.raises(ValueError, match="self-loops only"):
        KNNGraph(1).fit(_data(4)).attach(np.ones((1, 3)))


def test_knn_kernel_rows_equal_enlarged_graph():
    X = _data(5)
    X_new = _data(6, n=7)
    graph = KNNGraph(5).fit(X)
    K_rows, diag = knn_kernel_rows(graph, X_new)
    B = _plain_links(X, X_new, 5)
    d = graph.adjacency_.toarray().sum(1)
    d_x = 1 + B.sum(1)
    np.testing.assert_allclose(K_rows.toarray(), B / np.outer(d_x, d), rtol=1e-14)
    np.testing.assert_allclose(diag, 1 / d_x**2, rtol=1e-14)
    # same matrix as knn_kernel on the fitted points
    np.testing.assert_allclose(
        knn_kernel(X, 5).toarray(), graph.adjacency_.toarray() / np.outer(d, d)
    )


# --- eigenpairs and the rank rule -------------------------------------------------------


def test_normalized_adjacency_and_weights():
    graph = KNNGraph(5).fit(_data(7))
    A = graph.adjacency_.toarray()
    d = A.sum(1)
    N = normalized_adjacency(graph.adjacency_).toarray()
    np.testing.assert_allclose(N, A / np.sqrt(np.outer(d, d)), rtol=1e-14)
    lam = np.array([1.0, 0.5, -0.2])
    np.testing.assert_allclose(heat_weights(lam, 2.0), np.exp(-2.0 * (1 - lam)))
    np.testing.assert_allclose(heat_weights(lam, 2.0, "adjacency"), np.exp(-2.0 * lam))


@pytest.mark.parametrize("which", ["LA", "SA"])
def test_sparse_eigenpairs_equal_dense(which, monkeypatch):
    graph = KNNGraph(6).fit(_data(8, n=300))
    N = normalized_adjacency(graph.adjacency_)
    dense_lam = sla.eigvalsh(N.toarray())
    monkeypatch.setattr(_spectral, "DENSE_MAX_SAMPLES", 100)  # the sparse solver
    lam, V = top_eigenpairs(N, 12, which=which, random_state=0)
    ref = dense_lam[::-1][:12] if which == "LA" else dense_lam[:12]
    np.testing.assert_allclose(lam, ref, atol=1e-10)
    # eigenvectors: N V = V diag(lam), orthonormal
    np.testing.assert_allclose(N @ V, V * lam, atol=1e-8)
    np.testing.assert_allclose(V.T @ V, np.eye(12), atol=1e-10)


def _plain_rank(w, tol, cap):
    r = 1
    while r < min(cap, len(w) - 1) and w[r] > tol * w[0] * (1 + 1e-9):
        r += 1
    return r, w[r]


@pytest.mark.parametrize("ulps", [-4, -1, 0, 1, 4])
def test_rank_on_the_threshold_does_not_hang_on_rounding(ulps):
    """t="auto"'s candidate t_r = ln(100) / (1 - lam_r) puts w_r on rank_tol * w_0,
    up to the last bits of the eigenvalues (which differ between LAPACK builds: a
    user review found rank 10 with numpy 1.23 and 11 with 2.5 on the same data):
    w_r a few ulps either side of the threshold gives rank r."""
    lam = np.array([1.0, 0.99, 0.98, 0.97, 0.95, 0.9])
    for r in range(1, 5):
        w = np.exp(-(np.log(100.0) / (1.0 - lam[r])) * (1.0 - lam))
        on = 0.01 * w[0]
        for _ in range(abs(ulps)):
            on = np.nextafter(on, np.inf if ulps > 0 else -np.inf)
        w[r] = on
        assert choose_rank(w, 0.01, 5) == (r, on), (r, ulps)


@pytest.mark.parametrize("tol", [0.0, 0.05, 0.3, 0.99])
@pytest.mark.parametrize("cap", [1, 3, 8, 50])
def test_choose_rank_equals_plain_rule(tol, cap):
    w = np.exp(-np.linspace(0, 4, 10))
    assert choose_rank(w, tol, cap) == _plain_rank(w, tol, cap)


def test_low_rank_heat_kernel_error_bound_and_rule():
    X = _data(9, n=120)
    t = 4.0
    exact = heat_kernel(X, 6, t)
    K = heat_kernel(X, 6, t, max_dense_bytes=0, rank_tol=0.05, max_components=80)
    assert isinstance(K, LowRankKernel)
    w = np.sort(np.linalg.eigvalsh(exact))[::-1]
    r, err = _plain_rank(w, 0.05, 80)
    assert K.rank == r and K.error == pytest.approx(err, rel=1e-8)
    assert np.abs(exact - K.toarray()).max() <= K.error + 1e-10
    np.testing.assert_allclose(K.weights, np.exp(-t * (1 - K.eigenvalues)))


def test_spectrum_features_and_exact_rank():
    graph = KNNGraph(5).fit(_data(10, n=50))
    spectrum = GraphSpectrum(graph, 10)
    assert spectrum.exact and spectrum.eigenvalues.shape == (50,)
    # all pairs computed: with no tolerance, the full rank and no error
    assert spectrum.rank(1.0, 0.0, 100) == (50, 0.0)
    F = spectrum.features(2.0, 50)
    N = normalized_adjacency(graph.adjacency_).toarray()
    np.testing.assert_allclose(F @ F.T, sla.expm(-2.0 * (np.eye(50) - N)), atol=1e-10)


def _plain_normalized(K):
    """K(x, y) / sqrt(K(x, x) K(y, y)), entry by entry."""
    out = np.empty_like(K)
    for i in range(K.shape[0]):
        for j in range(K.shape[1]):
            out[i, j] = K[i, j] / np.sqrt(K[i, i] * K[j, j])
    return out


def test_unit_rows_equal_plain_division():
    F = _data(30, n=7, d=4)
    F[3] = 0.0
    unit, scale = unit_rows(F)
    for i in range(7):
        norm = np.linalg.norm(F[i])
        expect = F[i] / norm if norm > 0 else F[i]
        np.testing.assert_allclose(unit[i], expect, rtol=1e-14)
        # unit_rows sums the squares with einsum, np.linalg.norm with BLAS or its own
        # SIMD loop: another order, within 4 terms * 2**-53 relatively, so the
        # scales agree to rounding (bit for bit on some CPUs, not with AVX2 kernels)
        assert scale[i] == pytest.approx(1.0 / norm if norm > 0 else 0.0, rel=1e-14, abs=0)


def test_normalized_heat_kernel_equals_plain_normalisation():
    X = _data(31, n=40)
    graph = KNNGraph(5).fit(X)
    N = normalized_adjacency(graph.adjacency_).toarray()
    exact = sla.expm(-3.0 * (np.eye(40) - N))
    K = heat_kernel(X, 5, 3.0, normalize=True)
    np.testing.assert_allclose(K, _plain_normalized(exact), atol=1e-10)
    np.testing.assert_allclose(np.diag(K), 1.0, atol=1e-12)
    # low rank: the rank-r kernel, normalised; U = diag(s) V with V orthonormal
    X = _data(32, n=120)
    plain = heat_kernel(X, 6, 4.0, n_components=12)
    low = heat_kernel(X, 6, 4.0, n_components=12, normalize=True)
    np.testing.assert_allclose(low.toarray(), _plain_normalized(plain.toarray()), atol=1e-10)
    np.testing.assert_allclose(low.diagonal(), 1.0, atol=1e-12)
    np.testing.assert_allclose(low.eigenvectors, plain.U, atol=1e-12)
    assert low.error == plain.error and "normalized" in repr(low)


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_normalize_and_connect_must_be_bools(bad):
    X = _data(33, n=20)
    for name in ("normalize", "connect"):
        with pytest.raises(TypeError, match=f"{name} must be True or False"):
            heat_kernel(X, 4, 1.0, **{name: bad})


# --- the Nystroem extension -------------------------------------------------------------


def test_extension_solves_the_enlarged_eigen_equation():
    """v(x) from N' v' = lam v' at the new node of the graph enlarged by x (its links
    and its self-loop), the fitted values kept."""
    X = _data(11)
    X_new = _data(12, n=6)
    graph = KNNGraph(5).fit(X)
    spectrum = GraphSpectrum(graph, 8)
    lam, U = spectrum.eigenvalues[:8], spectrum.eigenvectors[:, :8]
    V_new = extend_eigenvectors(graph, lam, U, X_new)
    B = _plain_links(X, X_new, 5)
    d = graph.degrees_
    for i in range(6):
        d_x = 1 + B[i].sum()
        row = B[i] / np.sqrt(d_x * d)  # N'[x, fitted]
        lam = spectrum.eigenvalues[:8]
        U = spectrum.eigenvectors[:, :8]
        # lam v(x) = row . v + v(x) / d_x
        np.testing.assert_allclose(lam * V_new[i], row @ U + V_new[i] / d_x, atol=1e-12)
    np.testing.assert_allclose(
        extend_eigenvectors(graph, spectrum.eigenvalues[:3], spectrum.eigenvectors[:, :3], X_new),
        V_new[:, :3],
    )


def test_extension_of_fitted_points_is_close_to_their_values():
    X = _data(13, n=300)
    graph = KNNGraph(8).fit(X)
    spectrum = GraphSpectrum(graph, 6)
    V = extend_eigenvectors(graph, spectrum.eigenvalues[:6], spectrum.eigenvectors[:, :6], X)
    U = spectrum.eigenvectors[:, :6]
    # the top (smooth) eigenvectors: relative error a few percent at most
    err = np.linalg.norm(V - U, axis=0) / np.linalg.norm(U, axis=0)
    assert err.max() < 0.1, err


# --- graphs in pieces -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("sizes", "n_clusters", "harmful"),
    [
        ([100], 3, False),  # connected
        ([50, 50], 2, False),  # the components are the clusters
        ([60, 40], None, True),  # no n_clusters: any split
        ([40, 30, 20, 10], 3, True),  # more components than clusters
        ([90, 10], 2, True),  # 10 < 100 / (2 * 2): too small for a cluster
        ([75, 25], 2, False),  # 25 = 100 / (2 * 2): kept
    ],
)
def test_split_is_harmful(sizes, n_clusters, harmful):
    assert split_is_harmful(np.array(sizes), n_clusters) is harmful


def _plain_components(A):
    """Component sizes, largest first, by repeated breadth-first search."""
    A = sp.csr_array(A)
    n, seen, sizes = A.shape[0], np.zeros(A.shape[0], bool), []
    for s in range(n):
        if seen[s]:
            continue
        seen[s], todo, size = True, [s], 0
        while todo:
            i = todo.pop()
            size += 1
            for j in A.indices[A.indptr[i] : A.indptr[i + 1]]:
                if not seen[j]:
                    seen[j] = True
                    todo.append(j)
        sizes.append(size)
    return sorted(sizes, reverse=True)


def test_connect_graph_doubles_neighbours_until_the_split_is_harmless():
    # a big group, 12 points far away: 4-NN and 8-NN leave them apart, 16-NN joins them
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(150, 2)), rng.normal(size=(12, 2)) + np.array([30.0, 0.0])])
    graph, tried = connect_graph(KNNGraph(4).fit(X), n_clusters=2)
    assert graph.n_neighbors == 16
    assert [t.tolist() for t in tried] == [[150, 12], [150, 12], [162]]
    # the same graph as one built with that many neighbours from the start
    ref = KNNGraph(graph.n_neighbors).fit(X)
    assert (graph.adjacency_ != ref.adjacency_).nnz == 0
    np.testing.assert_array_equal(graph.degrees_, ref.degrees_)
    assert _plain_components(graph.adjacency_) == tried[-1].tolist()
    # the components are the clusters: kept; at most max_doublings rebuilds
    X2 = np.vstack([rng.normal(size=(80, 2)), rng.normal(size=(80, 2)) + np.array([30.0, 0.0])])
    kept, tried = connect_graph(KNNGraph(4).fit(X2), n_clusters=2)
    assert kept.n_neighbors == 4 and [t.tolist() for t in tried] == [[80, 80]]
    capped, tried = connect_graph(KNNGraph(4).fit(X2), max_doublings=2)
    assert capped.n_neighbors == 16 and len(tried) == 3 and tried[-1].size == 2


def test_connect_graph_margin_doubles_once_more_after_a_repair():
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(150, 2)), rng.normal(size=(12, 2)) + np.array([30.0, 0.0])])
    graph, tried = connect_graph(KNNGraph(4).fit(X), n_clusters=2, margin=1)
    assert graph.n_neighbors == 32  # 16 joined the pieces; one doubling more
    assert [t.tolist() for t in tried] == [[150, 12], [150, 12], [162], [162]]
    ref = KNNGraph(32).fit(X)
    assert (graph.adjacency_ != ref.adjacency_).nnz == 0
    # a harmless split (the components are the clusters) gets no margin
    X2 = np.vstack([rng.normal(size=(80, 2)), rng.normal(size=(80, 2)) + np.array([30.0, 0.0])])
    kept, tried = connect_graph(KNNGraph(4).fit(X2), n_clusters=2, margin=1)
    assert kept.n_neighbors == 4 and len(tried) == 1
    # nor does a split that the doublings could not repair
    capped, tried = connect_graph(KNNGraph(4).fit(X2), max_doublings=2, margin=1)
    assert capped.n_neighbors == 16 and len(tried) == 3 and tried[-1].size == 2
    # nor does a connected graph; the margin stops at n_samples
    same, tried = connect_graph(KNNGraph(4).fit(X[:150]), n_clusters=2, margin=1)
    assert same.n_neighbors == 4 and len(tried) == 1
    small = np.vstack([rng.normal(size=(8, 2)), rng.normal(size=(3, 2)) + 50.0])
    top, tried = connect_graph(KNNGraph(2).fit(small), n_clusters=2, margin=3)
    assert top.n_neighbors == small.shape[0] and tried[-1].tolist() == [11]


def test_extension_refuses_an_eigenvalue_at_one_over_the_degree():
    """A nearly complete graph (n_neighbors = n - 1) has its eigenvalues other than
    the top one at 1 / d; a new point of degree d has no extension there (the
    eigen-equation's coefficient lam - 1 / d_x is zero), and the division gave inf
    and NaN. The oracle: the denominators computed plainly."""
    X = _data(14, n=30)
    graph = KNNGraph(29).fit(X)
    spectrum = GraphSpectrum(graph, 6)
    lam = spectrum.eigenvalues[:6]
    d_x = 1 + _plain_links(X, X, 29).sum(axis=1)
    assert np.isclose(lam[:, None], 1 / d_x[None, :], rtol=1e-12).any()  # the case
    with pytest.raises(ValueError, match="n_neighbors=29 is nearly complete"):
        extend_eigenvectors(graph, lam, spectrum.eigenvectors[:, :6], X)
    # the same graph's top pair alone (lam = 1) extends
    V = extend_eigenvectors(graph, lam[:1], spectrum.eigenvectors[:, :1], X)
    assert np.isfinite(V).all()
