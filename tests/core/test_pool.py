"""The device-resident iteration (:mod:`mbkkm._core._pool`) against its oracles.

- :func:`advance` == the plain per-cluster reference step (labels, objectives before
  and after, windows, coefficients, stamps, norms, counts) over the 72 combinations of
  kernel, tau, rate, renormalisation and weights; its block Gram == recomputed;
- pack / unpack round trip; the kernel in column chunks == in one piece;
- capacity overflows are marked, and the fit loop grows and replays them into the same
  model as numpy;
- early stopping decided on the device stops where the host rule stops;
- the fit loop (torch on CPU tensors, counted with a TorchDispatchMode): no value read
  back and nothing uploaded between two read-backs, the same calls at k = 5 and k = 50.
"""

from __future__ import annotations

import numpy as np
import pytest
from _reference import RefWindows, reference_step
from test_windows import (
    REFERENCE_CASES,
    assert_windows_equal_reference,
    block_gram,
    stepped_state,
)

from mbkkm import MiniBatchKernelKMeans
from mbkkm._core import LEARNING_RATES, StepConfig, _loop, init_state
from mbkkm.kernels import resolve_kernel

torch = pytest.importorskip("torch")
P = pytest.importorskip("mbkkm._core._pool")


def _run(
    kern,
    X,
    k,
    b,
    steps,
    *,
    tau,
    rate,
    renormalize,
    weighted,
    rng,
    layout=None,
    objective_after=True,
    check=None,
):
    """``steps`` iterations of advance() from k initial centers; ``check`` sees each."""
    Xt = torch.from_numpy(X)
    state = init_state(Xt[:k].clone(), kern)
    layout = layout or P.layout_for(state, b, tau)
    spec = StepConfig(
        kern, rate, tau=tau, renormalize=renormalize, tol=-np.inf if objective_after else None
    )
    consts = P.make_constants(layout, spec, Xt)
    pool = P.pack(state, layout)
    for _ in range(steps):
        idx = rng.randint(0, len(X), b)
        w = rng.uniform(0, 2, b) if weighted else None
        pool, out = P.advance(
            pool, Xt[idx], spec, layout, consts, None if w is None else torch.from_numpy(w)
        )
        if check is not None:
            check(idx, w, out)
    return pool, layout


@REFERENCE_CASES
def test_advance_equals_reference(kernel, tau, learning_rate, renormalize, weighted):
    rng = np.random.RandomState(0)
    X = rng.normal(size=(400, 4))
    kern = resolve_kernel(kernel, gamma=0.3, degree=2, X=X)
    k, b = 5, 48
    ref = RefWindows(X[:k].copy())
    rate = LEARNING_RATES[learning_rate]

    def check(idx, w, out):
        labels, objective, after = reference_step(
            ref, X[idx], kern, rate, tau=tau, renormalize=renormalize, batch_weight=w
        )
        np.testing.assert_array_equal(out.labels.numpy(), labels)
        total = float(out.total)
        assert out.objective.item() / total == pytest.approx(objective, rel=1e-9, abs=1e-12)
        assert out.after.item() / total == pytest.approx(after, rel=1e-9, abs=1e-12)

    # tau=None keeps every block: a layout with room for all of them (no overflow here)
    layout = P.Layout(k, 20, 1000, b) if tau is None else None
    pool, layout = _run(
        kern,
        X,
        k,
        b,
        12,
        tau=tau,
        rate=rate,
        renormalize=renormalize,
        weighted=weighted,
        rng=rng,
        layout=layout,
        check=check,
    )
    assert P.overflow_marks(pool, layout).tolist() == [0, 0]
    state = P.unpack(pool, layout)
    assert_windows_equal_reference(state, ref, kern)
    state.support, state.gram = state.support.numpy(), state.gram.numpy()
    np.testing.assert_allclose(state.gram, block_gram(state, kern), rtol=1e-12, atol=1e-14)
    assert state.gram.shape[1] == np.bincount(state.block_cluster).max()


def test_pack_unpack_round_trip():
    state, X, kern = stepped_state(1, 25, 6)
    dev = init_state(torch.from_numpy(X[:4].copy()), kern)
    for name in (
        "weight",
        "block_start",
        "block_cluster",
        "block_stamp",
        "lam",
        "counts",
        "n_steps",
    ):
        setattr(dev, name, getattr(state, name))
    dev.support = torch.from_numpy(state.support)
    dev.gram, dev.norms = torch.from_numpy(state.gram), torch.from_numpy(state.norms)
    layout = P.Layout(4, 9, 500, 40)
    back = P.unpack(P.pack(dev, layout), layout)
    state.group_by_cluster()
    np.testing.assert_array_equal(back.support.numpy(), state.support)
    for name in ("weight", "block_start", "block_cluster", "block_stamp", "lam", "counts"):
        np.testing.assert_array_equal(getattr(back, name), getattr(state, name))
    np.testing.assert_array_equal(back.gram.numpy(), state.gram)
    assert back.n_steps == state.n_steps


@pytest.mark.parametrize("cols", [1, 7, 30])
def test_kernel_in_column_chunks_equals_one_piece(cols):
    rng = np.random.RandomState(2)
    X = rng.normal(size=(500, 6))
    kern = resolve_kernel("rbf", gamma=0.4)
    outs = {}
    for c in (0, cols):
        r = np.random.RandomState(3)
        state = init_state(torch.from_numpy(X[:5].copy()), kern)
        layout = P.Layout(5, 8, 400, 60, c)
        got = []
        pool, _ = _run(
            kern,
            X,
            5,
            60,
            6,
            tau=30,
            rate=LEARNING_RATES["adaptive"],
            renormalize=True,
            weighted=False,
            rng=r,
            layout=layout,
            check=lambda idx, w, out, got=got: got.append(
                (out.labels.numpy(), out.objective.item(), out.after.item())
            ),
        )
        outs[c] = (got, P.unpack(pool, layout))
        assert len(layout.chunks) == (1 if c == 0 else -(-60 // c))
        del state
    (g0, s0), (g1, s1) = outs[0], outs[cols]
    for (l0, o0, a0), (l1, o1, a1) in zip(g0, g1):
        np.testing.assert_array_equal(l0, l1)
        assert o0 == pytest.approx(o1, rel=1e-12) and a0 == pytest.approx(a1, rel=1e-12)
    np.testing.assert_array_equal(s0.support.numpy(), s1.support.numpy())
    np.testing.assert_allclose(s0.host_norms(), s1.host_norms(), rtol=1e-12)


def test_overflows_are_marked():
    """No free slot for a growing window: the new block goes to the spare column; no free
    row for a new point: it goes to the spare row. Both marks stay."""
    rng = np.random.RandomState(4)
    X = rng.normal(size=(400, 3))
    kern = resolve_kernel("rbf", gamma=0.5)
    kw = dict(tau=100, rate=LEARNING_RATES["adaptive"], renormalize=True, weighted=False)
    pool, layout = _run(kern, X, 3, 30, 4, rng=rng, layout=P.Layout(3, 2, 400, 30), **kw)
    assert P.overflow_marks(pool, layout).tolist() == [0, 1]
    pool, layout = _run(kern, X, 3, 30, 4, rng=rng, layout=P.Layout(3, 8, 60, 30), **kw)
    assert P.overflow_marks(pool, layout).tolist() == [1, 0]


def _pendigits_like(n=3000, d=8, seed=0):
    rng = np.random.RandomState(seed)
    centers = rng.normal(scale=3, size=(12, d))
    return centers[rng.randint(0, 12, n)] + rng.normal(size=(n, d))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fit_grows_capacities_and_equals_numpy(monkeypatch, dtype):
    """Start from capacities far too small: the loop grows them (replaying the blocks that
    overflowed) and ends with the same model as the numpy path."""
    X = _pendigits_like().astype(dtype)
    params = dict(n_clusters=8, gamma=0.05, batch_size=128, tau=60, max_iter=40, random_state=0)
    ref = MiniBatchKernelKMeans(**params).fit(X)
    grown = []
    real_grow = P.grow
    monkeypatch.setattr(
        P, "capacities", lambda *a, blocks=1, support=0, **k: (blocks + 1, support + 130)
    )
    monkeypatch.setattr(P, "grow", lambda layout, **kw: grown.append(kw) or real_grow(layout, **kw))
    est = MiniBatchKernelKMeans(**params).fit(torch.from_numpy(X))
    assert any(g["rows"] for g in grown) and any(g["slots"] for g in grown)
    np.testing.assert_array_equal(est.labels_.numpy(), ref.labels_)
    np.testing.assert_array_equal(est.support_vectors_.numpy(), ref.support_vectors_)
    np.testing.assert_allclose(est.dual_coef_, ref.dual_coef_, rtol=1e-6)
    np.testing.assert_allclose(est.batch_objective_, ref.batch_objective_, rtol=1e-5)
    assert est.n_iter_ == ref.n_iter_ == 40


def test_early_stopping_decided_on_the_device_stops_where_the_host_does():
    X = _pendigits_like(seed=1)
    params = dict(
        n_clusters=6, gamma=0.05, batch_size=200, tau=40, max_iter=100, tol=0.02, random_state=0
    )
    ref = MiniBatchKernelKMeans(**params).fit(X)
    est = MiniBatchKernelKMeans(**params).fit(torch.from_numpy(X))
    assert 1 < ref.n_iter_ < 100  # it stops, and not at once
    assert est.n_iter_ == ref.n_iter_
    np.testing.assert_allclose(est.batch_objective_, ref.batch_objective_, rtol=1e-12)
    np.testing.assert_array_equal(est.support_vectors_.numpy(), ref.support_vectors_)
    np.testing.assert_array_equal(est.labels_.numpy(), ref.labels_)


def test_non_finite_kernel_values_are_refused_at_the_read_back():
    X = torch.from_numpy(_pendigits_like(n=500))

    def bad(A, B):
        K = A @ B.T
        return K / (K > 1e9)  # inf where K <= 1e9: everywhere

    km = MiniBatchKernelKMeans(
        3, kernel=bad, batch_size=64, tau=20, max_iter=5, compute_labels=False, random_state=0
    )
    with pytest.raises(ValueError, match="non-finite"):
        km.fit(X)


# ------------------------------------------------------------- the fit loop's calls


class _Counter:
    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        ops = self.ops = []

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                ops.append(func)
                return func(*args, **(kwargs or {}))

        self.mode = Mode()


#: Per iteration of the fit loop: 69.6 kernel-launching calls and 94.0 in all, measured
#: (the issue asked for <= 40 and <= 80, out of reach in eager torch: each call is a
#: different quantity or shape, and only a compiler fuses the elementwise ones). A
#: regression guard, a little above.
MAX_KERNEL_OPS, MAX_OPS = 72, 96


def _no_compute(func):
    return func.is_view or func._schema.name in (
        "aten::empty",
        "aten::empty_strided",
        "aten::lift_fresh",
    )


def _fit_ops(X, k, max_iter):
    km = MiniBatchKernelKMeans(
        k,
        gamma=0.01,
        batch_size=256,
        tau=50,
        max_iter=max_iter,
        compute_labels=False,
        random_state=0,
    )
    counter = _Counter()
    with counter.mode:
        km.fit(X)
    return counter.ops


def test_fit_loop_reads_nothing_back_between_read_backs(monkeypatch):
    """Counted over the fit loop: the difference of max_iter=60 and max_iter=10 (the
    same setup, init and publishing), per iteration. Capacities large enough for the
    whole fit (a growth repacks the pool: uploads, once)."""
    import collections

    monkeypatch.setattr(P, "capacities", lambda k, b, tau, **_: (tau, k * tau + 2 * b))
    X = torch.from_numpy(_pendigits_like(n=4000, d=20).astype(np.float32))
    per_k = {}
    for k in (5, 50):
        many, few = _fit_ops(X, k, 60), _fit_ops(X, k, 10)
        diff = collections.Counter(map(str, many)) - collections.Counter(map(str, few))
        kernel_ops = sum(1 for f in many if not _no_compute(f)) - sum(
            1 for f in few if not _no_compute(f)
        )
        per_k[k] = (len(many) - len(few)) / 50, kernel_ops / 50
        assert diff["aten._local_scalar_dense.default"] == 0  # no .item(), no bool(tensor)
        assert diff["aten.lift_fresh.default"] == 0  # no host array uploaded
    assert per_k[5] == per_k[50]  # nothing depends on k
    total, kernel_ops = per_k[5]
    assert kernel_ops <= MAX_KERNEL_OPS and total <= MAX_OPS, per_k


def test_loop_state_is_complete_between_iterations():
    """Stopping a fit's loop after some iterations and resuming it from its FitState
    gives the model of the uninterrupted loop."""
    X = torch.from_numpy(_pendigits_like(n=2000))
    kern = resolve_kernel("rbf", gamma=0.05)
    rng = np.random.RandomState(0)
    plan = rng.randint(0, 2000, (30, 100))
    cfg = StepConfig(kernel=kern, rate=LEARNING_RATES["classic"], tau=30, renormalize=True)
    full = _loop.fit_loop(init_state(X[:4].clone(), kern), X, plan, rng, cfg)
    full.run_until(30)
    part = _loop.fit_loop(init_state(X[:4].clone(), kern), X, plan, rng, cfg)
    part.run_until(11)
    assert part.n_iter == 11 and len(part.objectives) == 11
    part.run_until(30)
    a, b = full.finish(), part.finish()
    np.testing.assert_array_equal(a.support.numpy(), b.support.numpy())
    np.testing.assert_array_equal(a.lam, b.lam)
    assert full.objectives == part.objectives


def test_finish_lets_the_device_loop_go_at_once():
    """After finish, nothing holds the device loop (its pool, constants, a captured
    CUDA graph): it is freed by reference counting, before the labelling, not at the
    garbage collector's next pass (the FitState and its loop refer to each other)."""
    import gc
    import weakref

    X = torch.from_numpy(_pendigits_like(n=500))
    kern = resolve_kernel("rbf", gamma=0.05)
    rng = np.random.RandomState(0)
    cfg = StepConfig(kernel=kern, rate=LEARNING_RATES["adaptive"], tau=20, renormalize=True)
    loop = _loop.fit_loop(
        init_state(X[:3].clone(), kern), X, rng.randint(0, 500, (5, 50)), rng, cfg
    )
    loop.run_until(5)
    device, rows = weakref.ref(loop.state.device), weakref.ref(loop.state.pool.rows)
    gc.disable()
    try:
        windows = loop.finish()
        assert device() is None and rows() is None
    finally:
        gc.enable()
    assert windows.support.shape[0] == loop.state.support_size() > 3


# ------------------------------------------------------- deterministic block sums

#: aten operators that add with atomics on CUDA (an order that changes between runs):
#: none may run in a device iteration.
_ATOMIC_ADDS = {
    "aten::index_add",
    "aten::index_add_",
    "aten::scatter_add",
    "aten::scatter_add_",
    "aten::scatter_reduce",
    "aten::scatter_reduce_",
    "aten::index_reduce",
    "aten::index_reduce_",
    "aten::put",
    "aten::put_",
    "aten::_index_put_impl_",
    "aten::index_put",
    "aten::index_put_",
    "aten::bincount",
    "aten::histc",
}


def _atomic_adds(ops):
    """The calls of ``ops`` (aten overloads) that may add with atomics on CUDA; an
    ``index_put`` counts only with ``accumulate=True``."""
    return [
        f
        for f, args in ops
        if f._schema.name in _ATOMIC_ADDS
        and (
            not f._schema.name.startswith(("aten::index_put", "aten::_index_put", "aten::put"))
            or bool(args.get("accumulate", False))
        )
    ]


class _ArgCounter:
    """A TorchDispatchMode that records (op, keyword view of its arguments)."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        ops = self.ops = []

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                named = dict(kwargs or {})
                for a, value in zip(func._schema.arguments, args):
                    named.setdefault(a.name, value)
                ops.append((func, named))
                return func(*args, **(kwargs or {}))

        self.mode = Mode()


def test_slot_sums_equal_a_plain_sum_in_row_order():
    """The block Gram's slot sums: a plain Python sum per slot, rows in order, exactly
    (and, on the CPU, bit for bit what index_add gives)."""
    rng = np.random.RandomState(3)
    k, L1 = 4, 6
    block = torch.from_numpy(rng.randint(0, k * L1 - 3, 500))  # the last slots stay empty
    values = torch.from_numpy(rng.standard_normal(500) * 10.0 ** rng.randint(-8, 8, 500))
    got = P.slot_sums(values, block, torch.arange(k * L1 + 1)).numpy()
    plain = np.zeros(k * L1)
    for q, v in zip(block.tolist(), values.tolist()):
        plain[q] += v
    np.testing.assert_array_equal(got, plain)
    np.testing.assert_array_equal(
        got, torch.zeros(k * L1, dtype=torch.float64).index_add_(0, block, values).numpy()
    )


def test_dense_slot_sums_equal_a_plain_sum(monkeypatch):
    """The dense slot sums (CUDA's for small pools), switched on for the CPU: a plain
    Python sum per slot, to rounding (another order of the same additions)."""
    monkeypatch.setattr(P, "DENSE_SLOT_SUMS_DEVICES", ("cpu", "cuda"))
    rng = np.random.RandomState(4)
    k, L1 = 4, 6
    block = torch.from_numpy(rng.randint(0, k * L1 - 3, 500))
    values = torch.from_numpy(rng.standard_normal(500) * 10.0 ** rng.randint(-4, 4, 500))
    got = P.slot_sums(values, block, torch.arange(k * L1 + 1)).numpy()
    plain, scale = np.zeros(k * L1), np.zeros(k * L1)
    for q, v in zip(block.tolist(), values.tolist()):
        plain[q] += v
        scale[q] += abs(v)
    assert np.all(np.abs(got - plain) <= 1e-14 * scale)
    assert np.all(got[-3:] == 0)
    monkeypatch.setattr(P, "DENSE_SLOT_SUMS_MAX", k * L1 * 500 - 1)  # too large: sorted
    np.testing.assert_array_equal(P.slot_sums(values, block, torch.arange(k * L1 + 1)), plain)


def test_fit_with_dense_slot_sums_equals_the_sorted_one(monkeypatch):
    X = torch.from_numpy(_pendigits_like(n=1500, d=12).astype(np.float64))
    params = dict(n_clusters=6, batch_size=128, tau=40, max_iter=40, random_state=0)
    ref = MiniBatchKernelKMeans(**params).fit(X)
    monkeypatch.setattr(P, "DENSE_SLOT_SUMS_DEVICES", ("cpu", "cuda"))
    dense = MiniBatchKernelKMeans(**params).fit(X)
    np.testing.assert_array_equal(dense.labels_.numpy(), ref.labels_.numpy())
    np.testing.assert_allclose(dense.center_norms_, ref.center_norms_, rtol=1e-12)
    np.testing.assert_allclose(dense.dual_coef_, ref.dual_coef_, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("case", ["plain", "tol_weighted_chunks"])
def test_device_iterations_add_without_atomics(case):
    """No operator that adds with atomics on CUDA (index_add, scatter_add, index_put
    with accumulate=True, ...) runs in a fit or a partial_fit on torch: their sums are
    the same on every run. Checked on the CPU by inspecting the operators, and by
    running under torch.use_deterministic_algorithms(True) (which would raise on CUDA
    for such an operator) twice, to the same model."""
    X = torch.from_numpy(_pendigits_like(n=1500, d=12).astype(np.float32))
    kw = dict(gamma=0.05, batch_size=128, tau=20, max_iter=12, random_state=0)
    w = None
    if case != "plain":
        kw.update(tol=1e-6, working_memory=0.05)  # f_B(C_{i+1}), kernel in column chunks
        w = torch.from_numpy(np.random.RandomState(1).uniform(0.5, 2.0, len(X)))
    counter = _ArgCounter()
    models = []
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        for _ in range(2):
            with counter.mode:
                km = MiniBatchKernelKMeans(4, **kw).fit(X, sample_weight=w)
                km.partial_fit(X[:200], sample_weight=None if w is None else w[:200])
            models.append(km)
    finally:
        torch.use_deterministic_algorithms(was)
    names = {f._schema.name for f, _ in counter.ops}
    assert "aten::segment_reduce" in names  # the slot sums ran (the counter sees them)
    assert _atomic_adds(counter.ops) == []
    a, b = models
    np.testing.assert_array_equal(a.center_norms_, b.center_norms_)
    np.testing.assert_array_equal(a.labels_, b.labels_)


def test_the_atomic_add_check_finds_index_add():
    """The check of the test above sees an index_add, and index_put only when it adds."""
    counter = _ArgCounter()
    t = torch.zeros(5, dtype=torch.float64)
    idx, v = torch.tensor([0, 0, 3]), torch.ones(3, dtype=torch.float64)
    with counter.mode:
        t.index_add_(0, idx, v)
        t.index_put_((idx,), v, accumulate=False)
    assert [f._schema.name for f in _atomic_adds(counter.ops)] == ["aten::index_add_"]
    counter.ops.clear()
    with counter.mode:
        t.index_put_((idx,), v, accumulate=True)
    assert len(_atomic_adds(counter.ops)) == 1
