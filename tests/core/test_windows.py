"""The whole-batch core against its plain per-cluster oracles.

- :func:`plan_windows` (blocks kept, coefficients) == the rule applied cluster by
  cluster, block by block;
- :func:`minibatch_step` == a point-by-point reference step with every norm
  recomputed from the kernel (labels, objectives, windows, coefficients, norms);
- the cached block Gram matrices == recomputed from the support;
- the number of array-library calls of an iteration does not depend on k (torch on
  CPU tensors, counted; the device loop's own checks are in test_pool.py).
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from _reference import RefWindows, plain_plan, reference_step

from mbkkm._core import (
    LEARNING_RATES,
    StepConfig,
    _windows,
    assign,
    init_state,
    minibatch_step,
)
from mbkkm._core._state import block_slots, group_by, rank_in_groups
from mbkkm._core._windows import plan_windows
from mbkkm.kernels import resolve_kernel


@pytest.mark.parametrize("n_groups", [5, 2**16, 2**16 + 1])
def test_group_by_is_a_stable_argsort(n_groups):
    labels = np.random.RandomState(0).randint(0, n_groups, 500)
    labels[:3] = n_groups - 1
    order, ptr = group_by(labels, n_groups)
    np.testing.assert_array_equal(order, np.argsort(labels, kind="stable"))
    np.testing.assert_array_equal(ptr[1:], np.cumsum(np.bincount(labels, minlength=n_groups)))


def test_support_layout_keeps_the_rows_of_the_kept_blocks():
    state, _, kern = stepped_state(0, 25, 6)
    labels = np.random.RandomState(0).randint(0, 4, 40)
    counts = np.bincount(labels, minlength=4).astype(np.float64)
    cfg = StepConfig(kern, LEARNING_RATES["adaptive"], tau=25, renormalize=True)
    plan, *_, rows_kept = _windows.support_layout(state, labels, np.full(4, 0.5), counts, cfg, None)
    assert plan.keep.any() and not plan.keep.all()
    bs = state.block_start
    expected = [r for q in np.flatnonzero(plan.keep) for r in range(bs[q], bs[q + 1])]
    np.testing.assert_array_equal(rows_kept, expected)


def test_rank_in_groups_equals_loop():
    counts = np.array([3, 0, 1, 4])
    np.testing.assert_array_equal(rank_in_groups(counts), [r for c in counts for r in range(c)])
    assert rank_in_groups([]).size == 0


def test_block_slots_equals_loop():
    cl = np.random.RandomState(1).randint(0, 5, 40)
    expected = [np.count_nonzero(cl[:i] == c) for i, c in enumerate(cl)]
    np.testing.assert_array_equal(block_slots(cl, 5), expected)


@pytest.mark.parametrize("tau", [None, 1, 4, 15, 60])
@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_plan_windows_equals_plain_rule(tau, renormalize, seed):
    rng = np.random.RandomState(seed)
    k, nb = 6, 30
    block_cluster = rng.randint(0, k, nb)
    block_size = rng.randint(1, 9, nb)
    lam = rng.uniform(0.05, 1, nb)
    new_size = rng.randint(0, 12, k)
    new_size[0] = 0  # a cluster without batch points
    alpha = np.where(new_size > 0, rng.uniform(0.1, 0.9, k), 0.0)
    alpha[1] = 1.0 if new_size[1] else 0.0  # classic rate's first update: old blocks go
    alpha[2] = 0.0  # batch points but a zero rate (zero weights): unchanged
    plan = plan_windows(block_cluster, block_size, lam, new_size, alpha, tau, renormalize)
    keep, lam_kept, grows, lam_new = plain_plan(
        block_cluster, block_size, lam, new_size, alpha, tau, renormalize
    )
    np.testing.assert_array_equal(plan.keep, keep)
    np.testing.assert_array_equal(plan.grows, grows)
    np.testing.assert_allclose(plan.lam_kept, lam_kept, rtol=1e-14)
    np.testing.assert_allclose(plan.lam_new, lam_new, rtol=1e-14)


def _grouped(state):
    """Support, coefficients and stamps grouped by cluster (oldest first), as lists."""
    order, ptr = group_by(state.labels, state.n_clusters)
    stamps = np.repeat(state.block_stamp, state.block_size)
    S, a, st = np.asarray(state.support)[order], state.coef[order], stamps[order]
    return [
        (S[ptr[j] : ptr[j + 1]], a[ptr[j] : ptr[j + 1]], st[ptr[j] : ptr[j + 1]])
        for j in range(state.n_clusters)
    ]


def assert_windows_equal_reference(state, ref, kern):
    """The windows (support, stamps, coefficients), norms and counts of ``state`` are
    those of the reference windows ``ref``."""
    for j, (S, a, stamps) in enumerate(_grouped(state)):
        np.testing.assert_array_equal(S, ref.support[j])
        np.testing.assert_array_equal(stamps, ref.block[j])
        np.testing.assert_allclose(a, ref.coef[j], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(state.host_norms(), ref.norms(kern), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(state.counts, ref.counts)


#: The 72 combinations every mini-batch step is checked on against the reference.
REFERENCE_CASES = pytest.mark.parametrize(
    "kernel, tau, learning_rate, renormalize, weighted",
    list(
        itertools.product(
            ["rbf", "linear", "polynomial"],
            [None, 3, 40],
            sorted(LEARNING_RATES),
            [True, False],
            [False, True],
        )
    ),
)


@REFERENCE_CASES
def test_step_equals_reference(kernel, tau, learning_rate, renormalize, weighted):
    rng = np.random.RandomState(0)
    X = rng.normal(size=(400, 4))
    kern = resolve_kernel(kernel, gamma=0.3, degree=2, X=X)
    k = 5
    state, ref = init_state(X[:k].copy(), kern), RefWindows(X[:k].copy())
    rate = LEARNING_RATES[learning_rate]
    for _ in range(12):
        idx = rng.randint(0, len(X), 48)
        w = rng.uniform(0, 2, 48) if weighted else None
        res = minibatch_step(
            state,
            X[idx],
            StepConfig(kern, rate, tau=tau, renormalize=renormalize, tol=-np.inf),
            batch_weight=w,
        )
        labels, objective, after = reference_step(
            ref, X[idx], kern, rate, tau=tau, renormalize=renormalize, batch_weight=w
        )
        np.testing.assert_array_equal(res.labels, labels)
        assert res.objective == pytest.approx(objective, rel=1e-9, abs=1e-12)
        assert res.objective_after == pytest.approx(after, rel=1e-9, abs=1e-12)
    assert_windows_equal_reference(state, ref, kern)
    labels, mind, D = assign(X, state, kern, chunk_rows=90, return_distances=True)
    expected = ref.distances(X, kern)
    np.testing.assert_allclose(D, np.maximum(expected, 0), rtol=1e-9, atol=1e-10)
    np.testing.assert_array_equal(labels, expected.argmin(1))
    np.testing.assert_allclose(mind, np.maximum(expected.min(1), 0), rtol=1e-9, atol=1e-10)


def block_gram(state, kernel):
    """H_j[p, q] = sum_{s in p, t in q} u_s u_t K(s, t), recomputed, (k, L, L)."""
    k, L = state.n_clusters, state.gram.shape[1]
    slots = block_slots(state.block_cluster, k)
    H = np.zeros((k, L, L))
    bs = state.block_start
    for p in range(state.block_cluster.size):
        for q in range(state.block_cluster.size):
            if state.block_cluster[p] != state.block_cluster[q]:
                continue
            Sp, Sq = state.support[bs[p] : bs[p + 1]], state.support[bs[q] : bs[q + 1]]
            up, uq = state.weight[bs[p] : bs[p + 1]], state.weight[bs[q] : bs[q + 1]]
            H[state.block_cluster[p], slots[p], slots[q]] = up @ kernel(Sp, Sq) @ uq
    return H


def stepped_state(seed, tau, steps):
    """(state, X, kernel): 4 windows after ``steps`` host iterations on 300 points."""
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(300, 3))
    kern = resolve_kernel("rbf", gamma=0.5)
    state = init_state(X[:4].copy(), kern)
    for _ in range(steps):
        minibatch_step(
            state,
            X[rng.randint(0, 300, 40)],
            StepConfig(kern, LEARNING_RATES["adaptive"], tau=tau, renormalize=True),
        )
    return state, X, kern


@pytest.mark.parametrize("tau", [2, 25, None])
def test_block_gram_equals_recomputed(tau):
    state, _, kern = stepped_state(3, tau, 15)
    np.testing.assert_allclose(state.gram, block_gram(state, kern), rtol=1e-12, atol=1e-14)
    # and the norms are lambda^T H lambda of that Gram
    assert state.gram.shape[1] == np.bincount(state.block_cluster).max()


# ------------------------------------------------------------- GPU-shaped counts

torch = pytest.importorskip("torch")


class _OpCounter:
    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                counter.ops.append(str(func))
                return func(*args, **(kwargs or {}))

        self.ops = []
        self.mode = Mode()


def _fitted_torch(k, seed=0):
    from mbkkm import MiniBatchKernelKMeans

    rng = np.random.RandomState(seed)
    X = torch.from_numpy(rng.normal(size=(3000, 6)).astype(np.float32))
    km = MiniBatchKernelKMeans(
        k, gamma=0.2, batch_size=256, tau=40, max_iter=5, compute_labels=False, random_state=seed
    ).fit(X)
    return km, X


def test_iteration_op_count_does_not_depend_on_k(monkeypatch):
    """One partial_fit iteration: the same torch calls at k = 5 and k = 50."""
    counts = {}
    for k in (5, 50):
        km, X = _fitted_torch(k)
        batch = X[:256]
        counter = _OpCounter()
        with counter.mode:
            km.partial_fit(batch)
        counts[k] = len(counter.ops)
    assert counts[5] == counts[50], counts


@pytest.mark.parametrize("k", [1, 2, 7, 60])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("part_rows", [256, 40, 7])
def test_self_terms_from_batch_parts_equal_the_whole_block(k, weighted, part_rows, monkeypatch):
    """Without early stopping H[r, r] comes from K(part, part) of the parts of the
    label-sorted batch (2 parts of 75 points with the default SELF_PART_ROWS, 4 and
    21 here); with it, from the whole K(B, B): the same Gram and norms, and both
    equal the reference step."""
    monkeypatch.setattr(_windows, "SELF_PART_ROWS", part_rows)
    rng = np.random.RandomState(k)
    X = rng.normal(size=(700, 3))
    kern = resolve_kernel("rbf", gamma=0.7)
    halves, whole = init_state(X[:k].copy(), kern), init_state(X[:k].copy(), kern)
    ref = RefWindows(X[:k].copy())
    rate = LEARNING_RATES["classic"]
    for _ in range(8):
        idx = rng.randint(0, 700, 150)
        w = rng.uniform(0.1, 2, 150) if weighted else None
        opts = StepConfig(kern, rate, tau=40, renormalize=True)
        minibatch_step(halves, X[idx], opts, batch_weight=w)
        minibatch_step(whole, X[idx], dataclasses.replace(opts, tol=-np.inf), batch_weight=w)
        reference_step(ref, X[idx], kern, rate, tau=40, renormalize=True, batch_weight=w)
    np.testing.assert_allclose(halves.gram, whole.gram, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(halves.host_norms(), ref.norms(kern), rtol=1e-9, atol=1e-12)
