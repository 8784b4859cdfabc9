"""The batch plan drawn block by block (BatchPlan) against one draw of all of it."""

from __future__ import annotations

import numpy as np
import pytest

from mbkkm import MiniBatchKernelKMeans, MiniBatchKMeans
from mbkkm._core import _init
from mbkkm._core._init import BatchPlan


def _one_draw(seed, n, b, iters, weights=None):
    """The oracle: every batch in one call of the generator, as the plan was drawn."""
    rng = np.random.RandomState(seed)
    if weights is None:
        return rng.randint(0, n, size=(iters, b)), rng
    cdf = np.cumsum(weights) / np.sum(weights)
    idx = np.searchsorted(cdf, rng.uniform(size=(iters, b)), side="right")
    return np.minimum(idx, n - 1), rng


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("block", [1, 7, 256])
def test_rows_are_those_of_one_draw(weighted, block, monkeypatch):
    monkeypatch.setattr(_init, "PLAN_BLOCK", block)
    n, b, iters = 50, 9, 600
    w = np.random.RandomState(1).rand(n) if weighted else None
    want, rng_all = _one_draw(3, n, b, iters, w)
    rng = np.random.RandomState(3)
    plan = BatchPlan(rng, n, b, iters, w)
    assert plan.shape == (iters, b) and len(plan) == iters
    for i in range(iters):  # the loop's order
        np.testing.assert_array_equal(plan[i], want[i])
    assert np.array_equal(rng.get_state()[1], rng_all.get_state()[1])  # the same stream
    held = plan._rows.shape[0]
    assert held <= 2 * block, held  # a few blocks held, not the plan
    # a resumed fit starts part way; the Dask path reads slices forwards
    later = BatchPlan(np.random.RandomState(3), n, b, iters, w)
    np.testing.assert_array_equal(later[250], want[250])
    np.testing.assert_array_equal(later[250:400], want[250:400])
    np.testing.assert_array_equal(later[399], want[399])
    np.testing.assert_array_equal(
        np.asarray(BatchPlan(np.random.RandomState(3), n, b, iters, w)), want
    )


def test_rows_let_go_are_not_read_again(monkeypatch):
    monkeypatch.setattr(_init, "PLAN_BLOCK", 4)
    plan = BatchPlan(np.random.RandomState(0), 10, 3, 100)
    plan[0]
    plan[50]  # a jump (a resumed fit): rows from 0 held until the next block is drawn
    plan[99]
    with pytest.raises(IndexError, match="row 0 was let go"):
        plan[0]
    with pytest.raises(IndexError, match="out of range"):
        plan[100]


@pytest.mark.parametrize("cls", [MiniBatchKernelKMeans, MiniBatchKMeans])
def test_a_huge_max_iter_cut_short_by_tol_costs_what_it_runs(cls):
    """max_iter=10**7 with tol: the plan drawn up front would be 76 GiB (refused by
    the memory plan); drawn as the iterations reach it, the fit stops at tol with two
    blocks planned. The same model as max_iter=50 (the same batches)."""
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(2000, n_features=4, centers=4, random_state=0)
    # tol is absolute: f_B is about 2 with this rbf kernel, about 4 in input space
    params = dict(batch_size=256, random_state=0)
    params.update(gamma=0.1, tol=1e-2) if cls is MiniBatchKernelKMeans else params.update(tol=0.2)
    huge = cls(4, max_iter=10**7, **params).fit(X)
    assert huge.n_iter_ < 50
    assert huge.memory_plan_.terms["batch plan"] == 2 * _init.PLAN_BLOCK * 256 * 8
    small = cls(4, max_iter=50, **params).fit(X)
    np.testing.assert_array_equal(huge.labels_, small.labels_)
    assert huge.n_iter_ == small.n_iter_
