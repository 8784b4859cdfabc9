"""KernelKMeans on an indefinite kernel: a plain Lloyd oracle run to its fixed point,
a rise of the objective that must not stop the run, and the warning."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.metrics.pairwise import rbf_kernel

from mbkkm._core._lloyd import MatrixOperator, e_step, kernel_lloyd
from mbkkm._core._width import lloyd_runs
from mbkkm.cluster import IndefiniteKernelWarning, KernelKMeans, MiniBatchKernelKMeans
from mbkkm.kernels import knn_kernel


def indefinite_problem():
    """A 48-point k-NN kernel (not PSD) and 4 initial centers (point indices) from
    which Lloyd's objective rises at iteration 5, before the fixed point (iteration 8)."""
    rng = np.random.RandomState(0)
    X = rng.normal(size=(48, 2)) * 2
    K = knn_kernel(X, 20).toarray()
    init = rng.choice(48, 4, replace=False)
    return K, init


def plain_lloyd(K, init_idx, max_iter=100):
    """Obviously right kernel Lloyd with explicit loops, to a fixed point.

    Centers start at the points ``init_idx``; iteration i assigns every point x to
    argmin_j d(x, j), d(x, j) = K(x,x) - 2 sum_{y in A_j} K(x,y) / |A_j|
    + sum_{y,y' in A_j} K(y,y') / |A_j|^2 (negative on an indefinite kernel: the
    smallest wins), records the objective sum_x max(d(x, label_x), 0) (distances
    clipped at 0, as the library reports them), and stops when the labels repeat.
    Returns labels, the objective of every iteration, and the number of iterations.
    """
    n, k = K.shape[0], len(init_idx)
    members = [[i] for i in init_idx]

    def dist(x, j):
        ys = members[j]
        cross = sum(K[x, y] for y in ys) / len(ys)
        norm = sum(K[a, b] for a in ys for b in ys) / len(ys) ** 2
        return K[x, x] - 2 * cross + norm

    old, objectives = None, []
    for it in range(max_iter):
        d = np.array([[dist(x, j) for j in range(k)] for x in range(n)])
        labels = d.argmin(1)
        objectives.append(sum(max(d[x, labels[x]], 0.0) for x in range(n)))
        if old is not None and np.array_equal(labels, old):
            return labels, objectives, it + 1
        members = [[i for i in range(n) if labels[i] == j] for j in range(k)]
        assert all(members), "the oracle does not relocate empty clusters"
        old = labels
    raise AssertionError("no fixed point within max_iter")


def test_problem_is_indefinite_and_rises():
    """The test problem does what the tests below need (else they could not fail)."""
    K, init = indefinite_problem()
    assert np.linalg.eigvalsh(K)[0] < -1e-3
    _, objectives, n_iter = plain_lloyd(K, init)
    rises = np.flatnonzero(np.diff(objectives) > 0) + 2  # iterations whose objective rose
    assert rises.size > 0 and rises[0] < n_iter


def test_kernel_kmeans_equals_plain_lloyd_on_indefinite_kernel():
    K, init = indefinite_problem()
    labels, objectives, n_iter = plain_lloyd(K, init)
    with pytest.warns(IndefiniteKernelWarning):
        km = KernelKMeans(4, kernel="precomputed", init=init, tol=0, max_iter=100).fit(K)
    np.testing.assert_array_equal(km.labels_, labels)
    np.testing.assert_allclose(km.inertia_, objectives[-1], rtol=1e-10)
    assert km.n_iter_ == n_iter


@pytest.mark.parametrize("tol", [0.0, 1e-4])
def test_a_rise_of_the_objective_does_not_stop_the_run(tol, capsys):
    K, init = indefinite_problem()
    _, objectives, n_iter = plain_lloyd(K, init)
    first_rise = int(np.flatnonzero(np.diff(objectives) > 0)[0]) + 2
    diag = np.diag(K).copy()
    run = kernel_lloyd(
        MatrixOperator(K), diag, K[:, init], diag[init], np.ones(48), 100, tol, verbose=1
    )
    assert run.n_iter == n_iter > first_rise
    out = capsys.readouterr().out
    assert f"Iteration {first_rise}: objective rose by" in out
    assert f"Converged at iteration {n_iter}: strict convergence." in out


def test_a_small_decrease_stops_the_run():
    """tol still stops a run whose objective falls by less than tol times itself."""
    K, init = indefinite_problem()
    _, objectives, _ = plain_lloyd(K, init)
    diag = np.diag(K).copy()
    run = kernel_lloyd(MatrixOperator(K), diag, K[:, init], diag[init], np.ones(48), 100, tol=0.5)
    # the first iteration whose objective fell by less than half of the previous one
    falls = np.diff(objectives)
    want = next(i + 2 for i, f in enumerate(falls) if 0 <= -f < 0.5 * objectives[i])
    assert run.n_iter == want


def test_e_step_takes_the_most_negative_distance_and_counts_negatives():
    diag = np.array([1.0, 1.0])
    c = np.array([1.0, 1.0, np.inf])
    P = np.array(
        [
            [1.2, 1.5, 0.0],  # D = [-0.4, -1.0, inf]: label 1, two negatives
            [0.5, 1.0 - 1e-12, 0.0],
        ]
    )  # D = [1, 2e-12, inf]: label 1, none
    labels, mind, D, n_negative = e_step(P, c, diag)
    np.testing.assert_array_equal(labels, [1, 1])
    np.testing.assert_allclose(mind, [0.0, 2e-12], atol=1e-15)
    assert D.min() >= 0 and n_negative == 2


def test_warns_once_per_fit_on_an_indefinite_kernel():
    K, _ = indefinite_problem()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        KernelKMeans(4, kernel="precomputed", n_init=3, random_state=0).fit(K)
    got = [w for w in caught if issubclass(w.category, IndefiniteKernelWarning)]
    assert len(got) == 1
    assert "not positive semi-definite" in str(got[0].message)
    assert got[0].filename == __file__  # points at the caller's fit


def test_no_warning_on_a_positive_semi_definite_kernel():
    rng = np.random.RandomState(0)
    X = rng.normal(size=(80, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error", IndefiniteKernelWarning)
        KernelKMeans(4, kernel="precomputed", n_init=2, random_state=0).fit(rbf_kernel(X))
        KernelKMeans(4, kernel="linear", random_state=0).fit(X)
        # duplicate points: distances of 0 up to rounding, still no warning
        KernelKMeans(3, kernel="rbf", gamma=0.5, random_state=0).fit(np.repeat(X[:10], 3, 0))


@pytest.mark.parametrize("tol", [0.0, 1e-4])
def test_lloyd_runs_equal_kernel_lloyd_on_indefinite_kernel(tol):
    """The gamma selection's batched Lloyd follows kernel_lloyd's rule too."""
    K, init = indefinite_problem()
    diag = np.diag(K).copy()
    rng = np.random.RandomState(1)
    starts = [init] + [rng.choice(48, 4, replace=False) for _ in range(2)]
    P0 = np.stack([K[:, s] for s in starts])
    c0 = np.stack([diag[s] for s in starts])
    labels, objective = lloyd_runs(K, diag, P0, c0, 100, tol)
    for r in range(3):
        run = kernel_lloyd(MatrixOperator(K), diag, P0[r], c0[r], np.ones(48), 100, tol)
        np.testing.assert_array_equal(labels[r], run.labels)
        assert objective[r] == pytest.approx(run.mind.sum(), rel=1e-12)


@pytest.mark.parametrize("cls", [KernelKMeans, MiniBatchKernelKMeans])
def test_predict_labels_as_the_fit_on_an_indefinite_kernel(cls):
    """predict takes the argmin of the distances as computed, negative ones included,
    as the fit labels its points (it clipped them at 0 first: sigmoid on 4 blobs,
    predict(X) == labels_ for 64 % of the points with KernelKMeans)."""
    from sklearn.datasets import make_blobs
    from sklearn.metrics.pairwise import sigmoid_kernel

    X, _ = make_blobs(300, centers=4, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = cls(4, kernel="sigmoid", random_state=0).fit(X)
        np.testing.assert_array_equal(est.predict(X), est.labels_)
        K = sigmoid_kernel(X, gamma=1 / X.shape[1])
        pre = cls(4, kernel="precomputed", random_state=0)
        np.testing.assert_array_equal(pre.fit_predict(K), pre.predict(K))
    assert (est.transform(X) >= 0).all()


@pytest.mark.parametrize("cls", [KernelKMeans, MiniBatchKernelKMeans])
def test_a_kernel_that_returns_nan_is_an_error_not_a_nan_model(cls):
    """A polynomial kernel of non-integer degree on negative bases returns NaN: every
    loop refuses it (the model was inertia_ nan, one label)."""
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(500, centers=3, n_features=4, random_state=0)
    est = cls(3, kernel="polynomial", degree=2.5, random_state=0)
    with warnings.catch_warnings(), pytest.raises(ValueError, match="met non-finite values"):
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's invalid value in power
        est.fit(X)
    if cls is MiniBatchKernelKMeans:
        with warnings.catch_warnings(), pytest.raises(ValueError, match="met non-finite values"):
            warnings.simplefilter("ignore", RuntimeWarning)
            est.partial_fit(X[:200]).partial_fit(X[200:])


@pytest.mark.parametrize("cls", [KernelKMeans, MiniBatchKernelKMeans])
def test_predict_of_a_precomputed_gram_matrix_labels_as_the_fit(cls):
    """predict(K(X_new, X_fit)) has no K(x, x): its distances lack that constant per
    row and are mostly negative, so clipping them before the argmin labelled 20-26 %
    of the fitted rows of a linear Gram matrix unlike labels_."""
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(500, centers=4, n_features=5, random_state=1)
    K = X @ X.T
    est = cls(4, kernel="precomputed", random_state=0).fit(K)
    np.testing.assert_array_equal(est.predict(K[:50]), est.labels_[:50])


def _warnings_of(est, X):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X)
    return caught


@pytest.mark.parametrize(
    "kernel, params, indefinite",
    [
        ("sigmoid", {}, True),
        ("polynomial", {"degree": 3, "coef0": -5.0}, True),
        ("precomputed", {}, True),  # a k-NN kernel matrix
        ("polynomial", {"degree": 2, "coef0": 1.0}, False),
        ("rbf", {}, False),
        (lambda X, Y: X @ Y.T, {}, False),  # a linear callable
    ],
)
def test_minibatch_warns_on_a_kernel_not_psd_on_a_sample(kernel, params, indefinite):
    """MiniBatchKernelKMeans looks at the kernel matrix of 128 evenly spaced rows
    before the work; oracle: the eigenvalues of scikit-learn's kernel matrix (or the
    precomputed one) on the same rows."""
    from sklearn.metrics.pairwise import pairwise_kernels

    rng = np.random.RandomState(0)
    X = rng.normal(size=(600, 3))
    idx = np.unique(np.linspace(0, 599, 128).astype(int))
    if kernel == "precomputed":
        data = knn_kernel(X, 10).toarray()
        K = data[np.ix_(idx, idx)]
    else:
        data = X
        metric = "linear" if callable(kernel) else kernel
        gamma = None if kernel in ("rbf",) or callable(kernel) else 0.5
        K = pairwise_kernels(X[idx], metric=metric, **({"gamma": gamma} if gamma else {}), **params)
    assert (np.linalg.eigvalsh(K)[0] < -1e-3 * np.linalg.eigvalsh(K)[-1]) == indefinite
    est = MiniBatchKernelKMeans(
        3,
        kernel=kernel,
        batch_size=64,
        max_iter=3,
        random_state=0,
        **params,
        **({} if kernel in ("rbf", "precomputed") or callable(kernel) else {"gamma": 0.5}),
    )
    caught = _warnings_of(est, data)
    found = [w for w in caught if issubclass(w.category, IndefiniteKernelWarning)]
    assert len(found) == int(indefinite), [str(w.message) for w in caught]
    if indefinite:
        assert "not positive semi-definite" in str(found[0].message)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_numerically_constant_kernel_is_named_before_the_work(dtype):
    """gamma far too small for the data: in float32 exp(-gamma d) is 1 for every pair,
    and every point ties with every center (one cluster). Both kernel estimators say
    so; in float64 the same width still separates values, and nothing is said. A
    single distinct point repeated is not a kernel's fault: nothing is said."""
    rng = np.random.RandomState(0)
    X = np.concatenate([rng.normal(c, 1.0, size=(200, 2)) for c in (0, 10, 20)]).astype(dtype)
    K = np.exp(-1e-12 * ((X[:, None] - X[None]) ** 2).sum(-1)).astype(dtype)
    assert (np.ptp(K) == 0) == (dtype == np.float32)  # the oracle: constant in float32
    for est in (
        MiniBatchKernelKMeans(3, gamma=1e-12, batch_size=64, max_iter=3, random_state=0),
        KernelKMeans(3, gamma=1e-12, random_state=0),
    ):
        messages = [str(w.message) for w in _warnings_of(est, X)]
        constant = [m for m in messages if "numerically constant" in m]
        assert len(constant) == int(dtype == np.float32), messages
        same = np.repeat(X[:1], 50, axis=0)
        messages = [str(w.message) for w in _warnings_of(est.set_params(n_clusters=1), same)]
        assert not any("numerically constant" in m for m in messages), messages


@pytest.mark.parametrize("reps", [10, 2000])  # the stored kernel's step, the kernel blocks'
def test_non_finite_values_of_the_last_update_are_an_error(reps):
    """The loops check each iteration's batch objective, computed before its update:
    what the last update computed (the new block's Gram, <b1, b2> < 0 under a degree
    of 2.5) went unchecked, and the fit ended with NaN norms and inertia (a code
    review). Both steps now refuse it, and so does partial_fit."""
    X = np.tile([[1.0, 0.0], [1.0, 1.0], [1.0, -1.5]], (reps, 1))
    params = dict(kernel="polynomial", degree=2.5, gamma=1.0, coef0=0.0, init=X[:1])
    est = MiniBatchKernelKMeans(1, max_iter=1, batch_size=64, random_state=0, **params)
    with warnings.catch_warnings(), pytest.raises(ValueError, match="met non-finite values"):
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's invalid value in power
        est.fit(X)
    est = MiniBatchKernelKMeans(1, random_state=0, **params).partial_fit(X[:1])
    norms = est.center_norms_.copy()
    with warnings.catch_warnings(), pytest.raises(ValueError, match="met non-finite values"):
        warnings.simplefilter("ignore", RuntimeWarning)
        est.partial_fit(X[:3])
    np.testing.assert_array_equal(est.center_norms_, norms)  # the model as it was
