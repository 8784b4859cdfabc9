"""The stored-kernel step (small n: the kernel matrix once, iterations index it).

- :func:`stored_step` == the point-by-point reference step of ``_reference.py`` (the
  oracle of the host step too), on every rate, window and weighting, then
  :func:`to_rows` gives the reference's windows, norms and counts;
- with an initial support that is not made of training rows (the rows E), and with
  a stored matrix (``kernel="precomputed"``);
- :func:`block_sums` (repeated items merged) == the plain sum of kernel rows;
- the fit takes this step exactly where the rule says, and gives the host step's
  labels and objective (the host step forced with a zero budget).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from _reference import RefWindows, reference_step
from sklearn.base import clone
from test_windows import assert_windows_equal_reference

from mbkkm import MiniBatchKernelKMeans
from mbkkm._core import LEARNING_RATES, StepConfig, _stored, init_state
from mbkkm._core._stored import block_sums, stored_kernel_for, stored_step, to_rows
from mbkkm.kernels import resolve_kernel
from mbkkm.kernels._index import IndexKernel


def _run_against_reference(X, init, kern, tau, rate, renormalize, weighted, seed=0):
    rng = np.random.RandomState(seed)
    stored, state = stored_kernel_for(X, init_state(init.copy(), kern), kern)
    ref = RefWindows(init.copy())
    cfg = StepConfig(kern, rate, tau=tau, renormalize=renormalize, tol=-np.inf)
    for _ in range(12):
        idx = rng.randint(0, len(X), 48)
        w = rng.uniform(0, 2, 48) if weighted else None
        res = stored_step(state, idx, stored, cfg, batch_weight=w)
        labels, objective, after = reference_step(
            ref, X[idx], kern, rate, tau=tau, renormalize=renormalize, batch_weight=w
        )
        np.testing.assert_array_equal(res.labels, labels)
        assert res.objective == pytest.approx(objective, rel=1e-9, abs=1e-12)
        assert res.objective_after == pytest.approx(after, rel=1e-9, abs=1e-12)
    return to_rows(state, X, stored), ref, stored


@pytest.mark.parametrize(
    "kernel, tau, learning_rate, renormalize, weighted",
    list(
        itertools.product(
            ["rbf", "polynomial"],
            [None, 3, 40],
            sorted(LEARNING_RATES),
            [True, False],
            [False, True],
        )
    ),
)
def test_stored_step_equals_reference(kernel, tau, learning_rate, renormalize, weighted):
    X = np.random.RandomState(0).normal(size=(400, 4))
    kern = resolve_kernel(kernel, gamma=0.3, degree=2, X=X)
    state, ref, stored = _run_against_reference(
        X, X[:5], kern, tau, LEARNING_RATES[learning_rate], renormalize, weighted
    )
    assert stored.extra.shape[0] == 0  # the initial centers were found among the rows
    assert_windows_equal_reference(state, ref, kern)
    # the block Gram rebuilt from the stored rows: c_j = lambda^T H_j lambda, as kept
    # by the host step (the reference computes the norms from its support directly)
    assert state.gram.shape[0] == 5


def test_initial_support_outside_the_data_joins_the_matrix():
    rng = np.random.RandomState(1)
    X = rng.normal(size=(300, 3))
    init = rng.normal(size=(4, 3)) * 2  # not rows of X
    init[1] = X[7]  # except this one
    kern = resolve_kernel("rbf", gamma=0.5, X=X)
    state, ref, stored = _run_against_reference(
        X, init, kern, 20, LEARNING_RATES["adaptive"], True, False
    )
    assert stored.extra.shape == (3, 3) and stored.matrix.shape == (303, 303)
    assert_windows_equal_reference(state, ref, kern)


def test_stored_kernel_matrix_equals_reference():
    rng = np.random.RandomState(2)
    X = rng.normal(size=(250, 3))
    rbf = resolve_kernel("rbf", gamma=0.4, X=X)
    K = np.exp(-0.4 * ((X[:, None] - X[None]) ** 2).sum(-1))
    kern = IndexKernel("precomputed", K)
    items = np.arange(250)
    stored, state = stored_kernel_for(items, init_state(items[:4].copy(), kern), kern)
    assert stored.extra is None and stored.matrix is kern.matrix
    ref = RefWindows(X[:4].copy())
    rate = LEARNING_RATES["classic"]
    cfg = StepConfig(kern, rate, tau=30, renormalize=True, tol=-np.inf)
    for _ in range(10):
        idx = rng.randint(0, 250, 40)
        res = stored_step(state, idx, stored, cfg)
        labels, objective, after = reference_step(ref, X[idx], rbf, rate, tau=30, renormalize=True)
        np.testing.assert_array_equal(res.labels, labels)
        assert res.objective == pytest.approx(objective, rel=1e-9)
        assert res.objective_after == pytest.approx(after, rel=1e-9)
    to_rows(state, items, stored)  # items stay items: the model of a stored matrix
    assert state.support.ndim == 1
    state.support = X[state.support]
    assert_windows_equal_reference(state, ref, rbf)


@pytest.mark.parametrize("kernel", ["rbf", "cosine", "polynomial"])
def test_stored_matrix_holds_the_kernels_own_diagonal(kernel):
    """K(x, x) in the stored matrix is the kernel's diagonal, the one the points'
    distances and the host step's initial centers use: a tile's rounding there
    (rbf: 1 - 4e-15 on some rows) made the initial centers' norms differ by an ulp.
    Oracle: ``kernel.diag``, and the tile everywhere else."""
    rng = np.random.RandomState(3)
    X = rng.normal(size=(200, 6)) * 3
    init = np.vstack([X[:3], rng.normal(size=(2, 6))])  # two rows outside X
    kern = resolve_kernel(kernel, gamma=0.05, degree=2, X=X)
    stored, _ = stored_kernel_for(X, init_state(init, kern), kern)
    Xa = np.vstack([X, stored.extra])
    np.testing.assert_array_equal(np.diag(stored.matrix), kern.diag(Xa))
    off = ~np.eye(Xa.shape[0], dtype=bool)
    np.testing.assert_allclose(stored.matrix[off], kern.tile(Xa, Xa)[off], rtol=1e-12)


def test_exact_ties_resolve_alike_under_rotation_and_sparse_rows():
    """Points whose kernel values to every initial center underflow to 0 (or cosine 0)
    tie exactly; the initial centers' norms then decided, and the ulp of a tile's
    diagonal sent the tied points to different centers: a rotation of blobs gave ARI
    0.53, the same documents sparse and dense ARI 0.44 (a user review). With the
    kernel's own diagonal the norms are equal and the same fit follows."""
    import scipy.sparse as sp
    from scipy.stats import ortho_group
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(1500, 6, centers=5, random_state=4, cluster_std=1.5)
    Q = ortho_group.rvs(6, random_state=0)
    est = MiniBatchKernelKMeans(5, gamma=0.05, batch_size=256, tau=50, max_iter=40, random_state=0)
    fits = [clone(est).fit(Z) for Z in (X, X @ Q, X + 1e5)]
    for other in fits[1:]:
        np.testing.assert_array_equal(other.labels_, fits[0].labels_)
    docs = sp.random(800, 60, density=0.1, random_state=0, format="csr")
    est = MiniBatchKernelKMeans(5, kernel="cosine", batch_size=128, random_state=0, max_iter=30)
    np.testing.assert_array_equal(
        clone(est).fit(docs).labels_, clone(est).fit(docs.toarray()).labels_
    )


def test_block_sums_merge_repeated_items():
    rng = np.random.RandomState(3)
    K = rng.normal(size=(50, 50))
    K = K + K.T
    ptr = np.array([0, 4, 4, 9])
    items = np.array([3, 7, 3, 3, 1, 1, 2, 49, 1])
    u = rng.uniform(size=9)
    expected = np.zeros((3, 50))
    for q in range(3):
        for s in range(ptr[q], ptr[q + 1]):
            expected[q] += u[s] * K[items[s]]
    np.testing.assert_allclose(block_sums(ptr, items, u, K), expected, rtol=1e-13, atol=1e-13)


def test_the_rule(monkeypatch, tmp_path):
    X = np.random.RandomState(4).normal(size=(100, 3))
    kern = resolve_kernel("rbf", gamma=0.5, X=X)
    init = init_state(X[:3].copy(), kern)
    assert stored_kernel_for(X, init, kern) is not None
    assert stored_kernel_for(X.astype(np.float32), init, kern) is not None
    mapped = np.lib.format.open_memmap(tmp_path / "X.npy", "w+", np.float64, X.shape)
    mapped[:] = X
    assert stored_kernel_for(mapped, init, kern) is None  # read by batches, never whole
    callable_kernel = resolve_kernel(lambda A, B: A @ B.T, X=X)
    assert stored_kernel_for(X, init, callable_kernel) is None
    monkeypatch.setattr(_stored, "STORED_KERNEL_BYTES", 100 * 100 * 8 - 1)
    assert stored_kernel_for(X, init, kern) is None


def test_large_data_is_refused_before_any_work_over_its_rows(monkeypatch):
    # (a per-row pass over 10^8 rows took minutes before the budget was checked)
    def refused(*args):
        raise AssertionError("the rows were read")

    monkeypatch.setattr(_stored, "_find_rows", refused)
    X = np.zeros((5_000, 2))  # 5,000^2 float64 = 191 MiB > 128 MiB
    init = init_state(X[:3].copy(), resolve_kernel("rbf", gamma=0.5, X=X))
    assert stored_kernel_for(X, init, resolve_kernel("rbf", gamma=0.5, X=X)) is None


def _digits():
    from sklearn.datasets import load_digits
    from sklearn.preprocessing import StandardScaler

    return StandardScaler().fit_transform(load_digits().data)


@pytest.mark.parametrize(
    "params",
    [
        dict(n_clusters=10),  # defaults: the width selection's start
        dict(n_clusters=10, gamma=0.01, n_init=3, learning_rate="classic", tol=1e-4),
        dict(n_clusters=6, kernel="laplacian", gamma=0.05, tau=50, renormalize=False),
    ],
)
def test_fit_takes_the_stored_step_and_keeps_the_host_step_model(params, monkeypatch):
    X = _digits()[:900]
    calls = []
    real = _stored.stored_step
    monkeypatch.setattr(
        "mbkkm._core._loop.stored_step", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    fast = MiniBatchKernelKMeans(random_state=0, max_iter=60, **params).fit(X)
    assert len(calls) == fast.n_iter_ > 0
    monkeypatch.setattr(_stored, "STORED_KERNEL_BYTES", 0)
    calls.clear()
    host = MiniBatchKernelKMeans(random_state=0, max_iter=60, **params).fit(X)
    assert not calls
    np.testing.assert_array_equal(fast.labels_, host.labels_)
    assert fast.n_iter_ == host.n_iter_
    assert fast.inertia_ == pytest.approx(host.inertia_, rel=1e-9)
    np.testing.assert_allclose(fast.batch_objective_, host.batch_objective_, rtol=1e-9)
    np.testing.assert_array_equal(fast.support_vectors_, host.support_vectors_)
    np.testing.assert_allclose(fast.dual_coef_, host.dual_coef_, rtol=1e-9)
    np.testing.assert_allclose(fast.center_norms_, host.center_norms_, rtol=1e-9)
    np.testing.assert_array_equal(fast.predict(X[:100]), host.predict(X[:100]))
    # partial_fit goes on from either model with the host step
    fast.partial_fit(X[:200])
    host.partial_fit(X[:200])
    np.testing.assert_allclose(fast.center_norms_, host.center_norms_, rtol=1e-9)


def test_training_labels_equal_the_labelling_pass():
    # the fit's labels_ and inertia_ come from the rows the stored step kept; with an
    # explicit init outside the data (items [X; E]) and weights, they are the labels
    # of the labelling pass over the fitted model
    from mbkkm._core import assign

    X = _digits()[:600]
    w = np.random.RandomState(0).rand(600)
    est = MiniBatchKernelKMeans(10, init=X[:10] + 0.5, gamma=0.01, max_iter=20, random_state=0)
    est.fit(X, sample_weight=w)
    labels, mind = assign(X, est._state, est.kernel_)
    np.testing.assert_array_equal(est.labels_, labels)
    assert est.inertia_ == pytest.approx(mind @ w, rel=1e-12)
