"""The threaded labelling pass equals the serial one and respects thread limits."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from mbkkm._core import LEARNING_RATES, StepConfig, assign, init_state, minibatch_step
from mbkkm._core._state import label_tiles
from mbkkm._core._windows import assign_parallel
from mbkkm.backends._threads import effective_n_threads
from mbkkm.kernels import resolve_kernel


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.RandomState(0)
    X = rng.normal(size=(20000, 8)).astype(np.float32)
    kern = resolve_kernel("rbf", gamma=0.1)
    state = init_state(X[:4].copy(), kern)
    for _ in range(5):
        minibatch_step(
            state,
            X[rng.randint(0, len(X), 256)],
            StepConfig(kern, LEARNING_RATES["adaptive"], tau=50, renormalize=True),
        )
    return X, state, kern


@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_parallel_equals_serial(fitted, n_threads):
    X, state, kern = fitted
    lab, mind, dist = assign(X, state, kern, chunk_rows=3000, return_distances=True)
    plab, pmind, pdist = assign_parallel(
        X, state, kern, chunk_rows=3000, n_threads=n_threads, return_distances=True
    )
    np.testing.assert_array_equal(plab, lab)
    np.testing.assert_allclose(pmind, mind, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pdist, dist, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kernel", ["rbf", "polynomial", "linear", "laplacian"])
def test_prepared_tiles_equal_plain_kernel(kernel):
    """The NumPy tiles with the support side prepared once (rbf's augmented rows, a
    reused buffer) equal the plain kernel block of each chunk."""
    rng = np.random.RandomState(1)
    X = rng.normal(size=(3000, 5))
    kern = resolve_kernel(kernel, gamma=0.1)
    state = init_state(X[:3].copy(), kern)
    for _ in range(4):
        minibatch_step(
            state,
            X[rng.randint(0, len(X), 128)],
            StepConfig(kern, LEARNING_RATES["classic"], tau=40, renormalize=True),
        )
    lab, mind, dist = assign(
        X,
        state,
        kern,
        chunk_rows=700,
        return_distances=True,
        cross_kernel=lambda S, Xc: kern(S, Xc),
    )
    rows, _ = label_tiles(X.shape[0], state.support.shape[0], 8, 2**40, n_threads=1)
    flab, fmind, fdist = assign(X, state, kern, chunk_rows=rows, return_distances=True)
    np.testing.assert_array_equal(flab, lab)
    np.testing.assert_allclose(fmind, mind, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fdist, dist, rtol=1e-10, atol=1e-12)


def test_thread_count_follows_user_limit():
    with threadpool_limits(1, user_api="blas"):
        assert effective_n_threads() == 1
