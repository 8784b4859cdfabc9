"""Graph kernels in the estimators: t="auto", new points, the memory plan, warnings."""

import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_blobs, make_moons
from sklearn.metrics import adjusted_rand_score

from mbkkm import KernelKMeans, MemoryPlanError, MiniBatchKernelKMeans
from mbkkm.cluster import _graph_kernels
from mbkkm.cluster._graph_kernels import (
    GraphSplitWarning,
    TSelection,
    candidate_times,
    normalized_cut,
    plan_graph,
    select_t,
)
from mbkkm.kernels import KNNGraph, LowRankKernel
from mbkkm.kernels._spectral import GraphSpectrum, connect_graph, extend_eigenvectors

ESTIMATORS = {
    "minibatch": lambda **kw: MiniBatchKernelKMeans(batch_size=256, tau=50, max_iter=40, **kw),
    "full": lambda **kw: KernelKMeans(**kw),
}


def _moons(n=1200, seed=0):
    return make_moons(n, noise=0.07, random_state=seed)


def _blobs(n=900, seed=0):
    return make_blobs(n, centers=[[0, 0], [6, 0], [0, 6]], cluster_std=1.0, random_state=seed)


# --- the criterion ----------------------------------------------------------------------


def _plain_ncut(A, labels, k):
    A = A.toarray()
    total = 0.0
    for j in range(k):
        inside = labels == j
        vol = A[inside].sum()
        if vol > 0:
            total += A[inside][:, ~inside].sum() / vol
    return total


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_normalized_cut_equals_plain_loop(seed):
    X, _ = _blobs(200, seed)
    graph = KNNGraph(6).fit(X)
    labels = np.random.default_rng(seed).integers(0, 4, 200)
    labels[labels == 3] = 2  # an empty cluster adds nothing
    got = normalized_cut(graph.adjacency_, graph.degrees_, labels, 4)
    assert got == pytest.approx(_plain_ncut(graph.adjacency_, labels, 4), rel=1e-12)


def test_select_t_is_deterministic_and_picks_the_smoothed_minimum():
    X, _ = _moons(800)
    graph = KNNGraph(10).fit(X)
    spectrum = GraphSpectrum(graph, 41)
    a = select_t(spectrum, 2, random_state=3)
    b = select_t(spectrum, 2, random_state=3)
    assert isinstance(a, TSelection)
    assert a.t == b.t
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.labels, b.labels)
    raw = a.run_scores.min(axis=1)
    np.testing.assert_array_equal(a.raw_scores, raw)
    padded = np.r_[raw[0], raw, raw[-1]]
    np.testing.assert_allclose(a.scores, (padded[:-2] + 2 * raw + padded[2:]) / 4)
    assert a.t == a.candidates[np.argmin(a.scores)]
    np.testing.assert_allclose(a.candidates, candidate_times(spectrum, 2, 64)[0])
    # every candidate's rank follows the kernel's rank rule
    for t, r, e in zip(a.candidates, a.ranks, a.errors):
        assert (r, e) == spectrum.rank(t, 0.01, 64)
    assert "<- chosen" in a.table() and a.table().count("\n") == a.candidates.size + 1


def test_select_t_plot():
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    X, _ = _moons(400)
    sel = select_t(GraphSpectrum(KNNGraph(10).fit(X), 41), 2, random_state=0)
    ax = sel.plot()
    assert ax.get_xscale() == "log" and "t" in ax.get_xlabel()


def test_candidate_times_follow_the_spectrum():
    X, _ = _moons(500)
    spectrum = GraphSpectrum(KNNGraph(10).fit(X), 41)
    times, ranks = candidate_times(spectrum, 3, 40)
    np.testing.assert_array_equal(ranks, [40, 34, 24, 17, 12, 8, 6, 4, 3][: ranks.size])
    assert np.all(np.diff(times) > 0)
    lam = spectrum.eigenvalues
    # at t_r the heat kernel keeps exactly r eigenpairs (rank_tol = 0.01)
    for t, r in zip(times, ranks):
        np.testing.assert_allclose(np.exp(-t * (1 - lam[r])), 0.01)
        assert spectrum.rank(t * (1 + 1e-9), 0.01, 40)[0] == r


def test_candidate_times_of_a_split_graph():
    # three far blobs: lam_1 = lam_2 = lam_3 = 1 have no time; the ranks beyond do
    X = np.vstack([np.random.default_rng(s).normal(size=(80, 2)) + 100 * s for s in range(3)])
    spectrum = GraphSpectrum(KNNGraph(6).fit(X), 20)
    times, ranks = candidate_times(spectrum, 2, 19)
    assert ranks.min() >= 3 and np.all(np.isfinite(times))


# --- the estimators -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ESTIMATORS)
def test_heat_defaults_cluster_curved_data(name):
    X, y = _moons()
    est = ESTIMATORS[name](n_clusters=2, kernel="heat", random_state=0).fit(X)
    assert adjusted_rand_score(y, est.labels_) > 0.95
    assert isinstance(est.t_selection_, TSelection) and est.t_ == est.t_selection_.t
    params = est.kernel_.params
    assert params["t"] == est.t_ and params["n_neighbors"] == 10
    assert params["rank"] == est.kernel_.matrix.rank
    assert isinstance(est.kernel_.matrix, LowRankKernel)


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("kernel", ["heat", "knn"])
def test_predict_fitted_points_gives_their_labels(name, kernel):
    X, _ = _blobs()
    params = {"n_neighbors": 10} if kernel == "knn" else None
    est = ESTIMATORS[name](n_clusters=3, kernel=kernel, kernel_params=params, random_state=0).fit(X)
    assert np.mean(est.predict(X) == est.labels_) >= 0.99
    D = est.transform(X)
    assert D.shape == (900, 3)
    np.testing.assert_array_equal(D.argmin(axis=1), est.predict(X))
    assert est.score(X) == pytest.approx(-D.min(axis=1).sum())


@pytest.mark.parametrize("name", ESTIMATORS)
def test_predict_held_out_half_matches_a_fit_on_all(name):
    X, _ = _moons(2000, seed=1)
    half = np.arange(2000) % 2 == 0
    on_all = ESTIMATORS[name](n_clusters=2, kernel="heat", random_state=0).fit(X)
    on_half = ESTIMATORS[name](n_clusters=2, kernel="heat", random_state=0).fit(X[half])
    assert adjusted_rand_score(on_all.labels_[~half], on_half.predict(X[~half])) > 0.95


def test_fixed_t_and_the_selection_of_one_candidate():
    X, _ = _moons()
    est = KernelKMeans(2, kernel="heat", kernel_params={"t": 50.0}, random_state=0).fit(X)
    assert est.t_ == 50.0
    assert est.t_selection_.candidates.tolist() == [50.0]
    assert est.kernel_.params["t"] == 50.0


def test_adjacency_form_needs_a_number_t():
    X, _ = _moons(300)
    with pytest.raises(ValueError, match="form='adjacency'"):
        KernelKMeans(2, kernel="heat", kernel_params={"form": "adjacency"}).fit(X)
    est = KernelKMeans(
        2, kernel="heat", kernel_params={"form": "adjacency", "t": 1.0}, random_state=0
    ).fit(X)
    assert est.t_ == 1.0 and est.t_selection_ is None


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        ({"t": 0.0}, ValueError, "t must be a finite number > 0"),
        ({"t": "soon"}, TypeError, "t must be a real number"),
        ({"max_dense_bytes": 10}, ValueError, "max_dense_bytes"),
        ({"n_components": 0}, ValueError, "n_components"),
        ({"rank_tol": 1.5}, ValueError, "rank_tol"),
        ({"max_components": 0}, ValueError, "max_components"),
        ({"bogus": 1}, ValueError, "bogus"),
    ],
)
def test_bad_heat_parameters_before_any_work(params, error, match, monkeypatch):
    calls = []
    monkeypatch.setattr(KNNGraph, "fit", lambda self, X: calls.append(1))
    with pytest.raises(error, match=match):
        KernelKMeans(2, kernel="heat", kernel_params=params).fit(_moons(100)[0])
    assert calls == []


def test_split_graph_warns():
    X = np.vstack([np.random.default_rng(s).normal(size=(60, 2)) + 100 * s for s in range(4)])
    with pytest.warns(
        GraphSplitWarning, match="4 connected components.*Rebuilt with n_neighbors=40: 4 components"
    ):
        KernelKMeans(2, kernel="heat", kernel_params={"n_neighbors": 5}, random_state=0).fit(X)
    with pytest.warns(GraphSplitWarning, match="Kept as it is"):
        KernelKMeans(
            2, kernel="heat", kernel_params={"n_neighbors": 5, "connect": False}, random_state=0
        ).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GraphSplitWarning)
        KernelKMeans(4, kernel="heat", kernel_params={"n_neighbors": 5}, random_state=0).fit(X)


def test_small_far_group_is_joined_by_more_neighbours():
    rng = np.random.default_rng(0)
    X = np.vstack(
        [
            rng.normal(size=(150, 2)),
            rng.normal(size=(150, 2)) + np.array([6.0, 0.0]),
            rng.normal(size=(12, 2)) + np.array([0.0, 40.0]),
        ]
    )
    # 20 neighbours join the small group, and the graph is then built with twice that
    with pytest.warns(
        GraphSplitWarning,
        match=r"sizes 151, 149, 12\).*Rebuilt with "
        r"n_neighbors=40: connected. \(twice the 20 neighbours",
    ):
        est = KernelKMeans(2, kernel="heat", random_state=0).fit(X)
    params = est.kernel_.params
    assert params["n_neighbors"] == 40 and params["n_neighbors_asked"] == "auto"
    # the 10-NN graph falls apart: the rebuild rule decides, no eigengap is computed
    assert params["n_neighbors_candidates"] == [10, 20, 40]
    assert np.isnan(params["eigengap_ratios"]).all()
    assert params["components"] == 1
    # the two big groups are the clusters, the small group joins one of them
    assert adjusted_rand_score(np.repeat([0, 1], 150), est.labels_[:300]) > 0.95


# --- n_neighbors="auto" ------------------------------------------------------------------


def _plain_laplacian_eigenvalues(A):
    """All eigenvalues of I - D^-1/2 A D^-1/2, increasing, from the dense matrix."""
    A = A.toarray()
    s = 1.0 / np.sqrt(A.sum(axis=1))
    return np.sort(np.linalg.eigvalsh(np.eye(A.shape[0]) - s[:, None] * A * s[None, :]))


def _plain_eigengap_ratio(mu, k):
    zeros = int(np.sum(mu < 1e-9))  # one per connected component
    if zeros >= k:
        return np.inf if zeros == k else 0.0
    return mu[k] / mu[k - 1]


@pytest.mark.parametrize("n", [300, 600])  # dense eigenvalues, and ARPACK's
def test_eigengap_ratio_equals_the_dense_computation(n):
    X, _ = _blobs(n)
    seen = set()
    for k_nn in (4, 8, 30):
        graph = KNNGraph(k_nn).fit(X)
        mu = _plain_laplacian_eigenvalues(graph.adjacency_)
        c = sp.csgraph.connected_components(graph.adjacency_)[0]
        for k in (2, 3, 4):
            np.testing.assert_allclose(
                _graph_kernels.eigengap_ratio(graph, k, tol=1e-8),
                _plain_eigengap_ratio(mu, k),
                rtol=1e-6,
            )
            seen.add((c > 1, c >= k))
    # graphs in pieces (ratios computed past the components' repeated 1, or set) too
    assert seen == {(True, True), (True, False), (False, False)}


def test_select_n_neighbors_takes_the_largest_eigengap_ratio():
    X, _ = _blobs(600)
    big = KNNGraph(40).fit(X)
    graph, sel = _graph_kernels.select_n_neighbors(big, 3, [10, 20, 40])
    want = [
        _plain_eigengap_ratio(_plain_laplacian_eigenvalues(KNNGraph(c).fit(X).adjacency_), 3)
        for c in (10, 20, 40)
    ]
    np.testing.assert_allclose(sel.ratios, want, rtol=1e-3)
    pick = 0  # more neighbours for a ratio more than 10 % larger than the choice so far
    for i in (1, 2):
        pick = i if want[i] > 1.1 * want[pick] else pick
    assert sel.n_neighbors == (10, 20, 40)[pick] == graph.n_neighbors
    assert graph.seconds_ == big.seconds_
    # the margin: ratios 1.0, 1.05, 1.2 -> 40; 1.0, 1.05, 1.1 -> 10; 1.0, 1.2, 1.25 -> 20
    for ratios, chosen in (((1.0, 1.05, 1.2), 40), ((1.0, 1.05, 1.1), 10), ((1.0, 1.2, 1.25), 20)):
        it = iter(ratios)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(_graph_kernels, "eigengap_ratio", lambda g, k, tol, it=it: next(it))
            assert _graph_kernels.select_n_neighbors(big, 3, [10, 20, 40])[1].n_neighbors == chosen
    assert "<- chosen" in sel.table()
    # the estimator records the choice; a given count is kept as it is
    est = KernelKMeans(3, kernel="heat", random_state=0).fit(X)
    params = est.kernel_.params
    assert params["n_neighbors"] == sel.n_neighbors and params["n_neighbors_asked"] == "auto"
    np.testing.assert_allclose(params["eigengap_ratios"], sel.ratios)
    fixed = (
        KernelKMeans(3, kernel="heat", kernel_params={"n_neighbors": 10}, random_state=0)
        .fit(X)
        .kernel_.params
    )
    assert fixed["n_neighbors"] == 10 and "eigengap_ratios" not in fixed
    with pytest.raises(ValueError, match="n_neighbors must be an integer or 'auto'"):
        KernelKMeans(3, kernel="heat", kernel_params={"n_neighbors": "many"}).fit(X)


def test_auto_neighbours_on_few_points_are_capped():
    """Capped at n, the candidates of n <= 40 points included n: the complete graph,
    refused when asked for and without cluster structure (two blobs of 4 points
    came out mixed; a code review). They stay below n now."""
    assert _graph_kernels.neighbor_candidates(25) == [10, 20]
    assert _graph_kernels.neighbor_candidates(8) == [4]
    assert _graph_kernels.neighbor_candidates(1) == [1]
    X, _ = _blobs(30)
    est = KernelKMeans(3, kernel="heat", random_state=0).fit(X)
    assert est.kernel_.params["n_neighbors_candidates"] == [10, 20]
    two = np.r_[np.zeros((4, 2)), np.full((4, 2), 8.0)] + np.random.RandomState(0).rand(8, 2)
    labels = KernelKMeans(2, kernel="heat", random_state=0).fit(two).labels_
    assert len(set(labels[:4])) == 1 and len(set(labels[4:])) == 1 and labels[0] != labels[4]


@pytest.mark.parametrize("Est", [KernelKMeans, MiniBatchKernelKMeans])
def test_heat_on_as_many_points_as_clusters(Est):
    """t="auto" is selected on more points than clusters; with n == n_clusters the
    string "auto" reached the kernel (TypeError; a code review). Every point is its
    own cluster."""
    X = np.random.default_rng(0).normal(size=(5, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = Est(5, kernel="heat", random_state=0).fit(X)
    assert sorted(est.labels_) == [0, 1, 2, 3, 4] and isinstance(est.t_, float)


def test_memory_plan_refuses_before_the_graph(monkeypatch):
    calls = []
    monkeypatch.setattr(KNNGraph, "fit", lambda self, X: calls.append(1))
    monkeypatch.setattr(_graph_kernels, "available_host_memory", lambda: 10 * 2**20)
    est = MiniBatchKernelKMeans(2, kernel="heat")
    with pytest.raises(MemoryPlanError, match=r"kernel='heat'.*GiB.*kernel='rbf'"):
        est.fit(_moons(3000)[0])
    assert calls == [] and not hasattr(est, "kernel_")


def test_memory_plan_is_checked_again_before_a_rebuilt_graph(monkeypatch):
    # the 10-NN graph leaves the far group of 12 apart; the rebuild with 20 neighbours
    # is planned (projected points, no PCA) and refused before it allocates anything
    rng = np.random.default_rng(0)
    X = np.vstack(
        [
            rng.normal(size=(150, 2)),
            rng.normal(size=(150, 2)) + np.array([6.0, 0.0]),
            rng.normal(size=(12, 2)) + np.array([0.0, 40.0]),
        ]
    )
    params = {"n_neighbors": 10, "pca_components": 50, "n_components": None, "max_components": 64}
    first = plan_graph("heat", 312, 2, 8, params).peak
    rebuild = plan_graph("heat", 312, 2, 8, dict(params, n_neighbors=20)).peak
    assert rebuild > first
    rebuilt = []
    monkeypatch.setattr(
        KNNGraph, "with_n_neighbors", lambda self, k: rebuilt.append(k) or pytest.fail("rebuilt")
    )
    monkeypatch.setattr(_graph_kernels, "available_host_memory", lambda: first)
    est = KernelKMeans(2, kernel="heat", kernel_params={"n_neighbors": 10}, random_state=0)
    with pytest.raises(
        MemoryPlanError,
        match=(
            r"the 10-NN graph falls apart, and rebuilding it with n_neighbors=20 would "
            r"need about .* GiB, but .* GiB is available.*'connect': False.*kernel='rbf'"
        ),
    ):
        est.fit(X)
    assert rebuilt == [] and not hasattr(est, "kernel_")
    # with room for the rebuild (and its margin, 40), it goes ahead as before
    monkeypatch.undo()
    room = plan_graph("heat", 312, 2, 8, dict(params, n_neighbors=40)).peak
    monkeypatch.setattr(_graph_kernels, "available_host_memory", lambda: room)
    ten = {"n_neighbors": 10}
    with pytest.warns(GraphSplitWarning, match="Rebuilt with n_neighbors=40"):
        assert (
            KernelKMeans(2, kernel="heat", kernel_params=ten, random_state=0)
            .fit(X)
            .kernel_.params["n_neighbors"]
            == 40
        )
    # the margin's rebuild is checked too
    monkeypatch.setattr(_graph_kernels, "available_host_memory", lambda: room - 1)
    with (
        pytest.raises(
            MemoryPlanError, match="10-NN graph falls apart, and rebuilding it with n_neighbors=40"
        ),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore", GraphSplitWarning)
        KernelKMeans(2, kernel="heat", kernel_params=ten, random_state=0).fit(X)


def test_connect_graph_calls_before_rebuild_with_the_next_count():
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(150, 2)), rng.normal(size=(12, 2)) + np.array([30.0, 0.0])])
    seen = []
    graph, _ = connect_graph(
        KNNGraph(4).fit(X),
        n_clusters=2,
        margin=1,
        before_rebuild=lambda g, k: seen.append((g.n_neighbors, k)),
    )
    assert seen == [(4, 8), (8, 16), (16, 32)] and graph.n_neighbors == 32


def test_memory_plan_of_ten_million_points():
    plan = plan_graph(
        "heat",
        10_000_000,
        16,
        4,
        {"n_neighbors": 10, "pca_components": 50, "n_components": None, "max_components": 100},
    )
    # the Lanczos vectors alone: 10M x 201 float64
    assert plan.terms["eigensolver: Lanczos vectors (n, max(2 p + 1, 20))"] == 8 * 10**7 * 203
    assert plan.peak > 24 * 2**30


def test_kernels_page_states_the_ten_million_point_plan():
    """kernels.rst's figures for 10,000,000 points (16 float32 features, the
    defaults) are the plan's: the eigensolver's Lanczos vectors and eigenvectors, and
    the whole plan, rounded to GiB."""
    import re
    from pathlib import Path

    from mbkkm.cluster._graph_kernels import _HEAT_DEFAULTS

    plan = plan_graph("heat", 10_000_000, 16, 4, dict(_HEAT_DEFAULTS))
    solver = sum(v for name, v in plan.terms.items() if name.startswith(("eigensolver", "eigenv")))
    page = Path(__file__).parents[2] / "docs" / "user_guide" / "kernels.rst"
    text = " ".join(page.read_text().split())
    found = re.search(r"alone would need about (\d+) GiB \(the whole graph plan (\d+) GiB\)", text)
    assert found, "the sentence moved: keep this test with it"
    assert int(found[1]) == round(solver / 2**30) and int(found[2]) == round(plan.peak / 2**30)


def test_memory_plan_counts_the_dense_eigensolver_when_it_runs():
    """The spectrum is computed densely (scipy's eigh on the n x n matrix) up to 500
    points, and also beyond when n - 1 pairs or more are asked for; the plan counted
    Lanczos vectors then (a code review). Oracle: the spectrum's own choice."""
    from mbkkm.kernels._graph import fit_knn_graph
    from mbkkm.kernels._spectral import GraphSpectrum, n_pairs_needed

    X = np.random.default_rng(0).normal(size=(600, 3))
    graph = fit_knn_graph(X, 10, "euclidean", None, None, None)
    for components in (100, 700):  # Lanczos, then every pair: dense
        params = {"n_neighbors": 10, "n_components": None, "max_components": components}
        pairs = n_pairs_needed(600, None, components)
        spectrum = GraphSpectrum(graph, pairs, random_state=0)
        plan = plan_graph("heat", 600, 3, 8, params)
        assert ("dense eigendecomposition (3 n x n)" in plan.terms) == spectrum.exact


def test_sample_weight_and_pickle():
    X, y = _moons(600)
    w = np.random.default_rng(0).uniform(0.5, 2.0, 600)
    est = KernelKMeans(2, kernel="heat", random_state=0).fit(X, sample_weight=w)
    assert adjusted_rand_score(y, est.labels_) > 0.9
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.predict(X[:50]), est.predict(X[:50]))


def test_knn_kernel_predict_uses_the_kernel_rows():
    X, _ = _blobs(300)
    est = KernelKMeans(3, kernel="knn", kernel_params={"n_neighbors": 30}, random_state=0).fit(X)
    X_new = X[:20] + 0.01
    rows, diag = est.kernel_.extension.rows(X_new)
    assert sp.issparse(rows) and rows.shape == (20, 300)
    # the plain distances from the kernel rows and the centers' coefficients
    P = np.zeros((20, 3))
    coef = est.dual_coef_
    for s, j, c in zip(est.support_, est.support_labels_, coef):
        P[:, j] += c * rows[:, s].toarray().ravel()
    D = diag[:, None] - 2 * P + est.center_norms_[None, :]
    np.testing.assert_allclose(est.transform(X_new), np.maximum(D, 0), atol=1e-14)


@pytest.mark.parametrize("normalize", [False, True])
def test_heat_predict_uses_the_extended_features(normalize):
    """transform(X_new) from the plain Nystroem features (unit length when normalised)
    and the centers' coefficients."""
    X, _ = _blobs(400)
    est = KernelKMeans(
        3, kernel="heat", kernel_params={"normalize": normalize}, random_state=0
    ).fit(X)
    K = est.kernel_.matrix
    assert est.kernel_.params["normalize"] is normalize
    assert (K.row_scale is not None) is normalize
    X_new = X[:25] + 0.05
    graph = est.kernel_.extension.graph
    F_new = extend_eigenvectors(graph, K.eigenvalues, K.eigenvectors, X_new) * np.sqrt(K.weights)
    if normalize:
        F_new = F_new / np.linalg.norm(F_new, axis=1, keepdims=True)
    P = np.zeros((25, 3))
    for s, j, c in zip(est.support_, est.support_labels_, est.dual_coef_):
        f_s = np.sqrt(K.weights) * K.U[s]
        P[:, j] += c * (F_new @ f_s)
    diag = np.einsum("ij,ij->i", F_new, F_new)
    D = diag[:, None] - 2 * P + est.center_norms_[None, :]
    np.testing.assert_allclose(est.transform(X_new), np.maximum(D, 0), atol=1e-10)
    if normalize:
        np.testing.assert_allclose(est.kernel_.full_diagonal(), 1.0, atol=1e-12)


def test_heat_normalize_must_be_a_bool():
    with pytest.raises(TypeError, match="normalize must be True or False"):
        KernelKMeans(2, kernel="heat", kernel_params={"normalize": "yes"}).fit(_moons(100)[0])


@pytest.mark.parametrize("name", ESTIMATORS)
def test_heat_predict_through_centers_equals_the_kernel_tiles(name):
    """The low-rank pass (centers in feature space) equals the generic labelling pass
    over the support's kernel tiles."""
    from mbkkm._core import assign

    X, _ = _blobs(500)
    est = ESTIMATORS[name](n_clusters=3, kernel="heat", random_state=0).fit(X)
    X_new = X[::3] + 0.1
    ext = est.kernel_.extension
    items, diag = ext.rows(X_new)
    labels, mind, D = assign(
        items,
        est._state,
        est.kernel_,
        cross_kernel=ext.cross,
        diag=lambda start, chunk: diag[start : start + chunk.shape[0]],
        chunk_rows=37,
        return_distances=True,
    )
    np.testing.assert_allclose(est.transform(X_new), D, atol=1e-12)
    np.testing.assert_array_equal(est.predict(X_new), labels)
    assert est.score(X_new) == pytest.approx(-mind.sum(), rel=1e-12)


@pytest.mark.parametrize("kernel", ["knn", "heat"])
@pytest.mark.parametrize("cls", ["KernelKMeans", "MiniBatchKernelKMeans"])
def test_a_complete_graph_is_refused(kernel, cls):
    """n_neighbors = n: every point a neighbour of every other; fit ARI was 0 and
    the heat extension's predict put nearly every new point in one cluster."""
    import mbkkm

    X = np.random.default_rng(0).normal(size=(60, 3))
    est = getattr(mbkkm, cls)(2, kernel=kernel, kernel_params={"n_neighbors": 60})
    with pytest.raises(
        ValueError, match="n_neighbors=60, the number of points: the k-NN graph is complete"
    ):
        est.fit(X)
    with warnings.catch_warnings():  # the k-NN kernel is not positive semi-definite
        warnings.simplefilter("ignore", mbkkm.cluster.IndefiniteKernelWarning)
        est.set_params(kernel_params={"n_neighbors": 10}, random_state=0).fit(X)


@pytest.mark.parametrize("kernel", ["heat", "knn", "precomputed"])
def test_fit_predict_without_labels_labels_the_fitted_points(kernel):
    """With compute_labels=False, fit_predict labelled X by predict, which for a graph
    kernel treats the rows as new points through its extension: other labels than
    the fitted points' (2 of 400 with the heat kernel; a code review). It labels the
    fitted points now: the labels of compute_labels=True."""
    from sklearn.metrics.pairwise import rbf_kernel

    rng = np.random.RandomState(0)
    X = np.r_[rng.randn(150, 3), rng.randn(150, 3) + 4, rng.randn(100, 3) - 4]
    data = rbf_kernel(X, gamma=0.05) if kernel == "precomputed" else X
    params = {"kernel_params": {"n_neighbors": 10}} if kernel == "knn" else {}
    if kernel == "heat":
        params = {"kernel_params": {"n_neighbors": 10, "t": 1.0}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small graphs: the eigensolver's notes
        est = MiniBatchKernelKMeans(3, kernel=kernel, max_iter=20, random_state=0, **params)
        ref = est.fit_predict(data)
        got = est.set_params(compute_labels=False).fit_predict(data)
    np.testing.assert_array_equal(got, ref)
