"""The one loop (:mod:`mbkkm._core._loop`): its stopping rule and its read-back hooks.

- a host step function stops at the first iteration that meets the rule, and the
  hooks see every iteration (the host reads back after each one);
- the device steps (torch on CPU tensors) report at their read-back cadence, blocks of
  1, 2, 4, ... ``read_every`` iterations, and end on the plan's last iteration;
- the step of a window state is chosen once from its backend.
"""

from __future__ import annotations

import numpy as np
import pytest

from mbkkm._core import LEARNING_RATES, StepConfig, _loop, init_state, minibatch_step
from mbkkm.backends import get_backend, numpy_backend
from mbkkm.kernels import resolve_kernel


def test_tol_rule():
    def stopped(objective, after, tol):
        loop = _loop.function_loop(lambda i: (objective, after), max_iter=1, tol=tol)
        return loop.run_until(1).converged

    assert stopped(1.0, 0.95, 0.1)
    assert not stopped(1.0, 0.85, 0.1)
    assert not stopped(1.0, 1.0, None)  # no early stopping
    assert not stopped(1.0, 1.0, -np.inf)  # f_B(C_{i+1}) computed, never stops


def test_function_loop_stops_on_the_rule_and_reports_every_iteration():
    gains = [0.5, 0.4, 0.3, 0.05, 0.5]  # f_B(C_i) - f_B(C_{i+1}) of each iteration

    def step(i):
        return 10.0 - i, 10.0 - i - gains[i]

    loop = _loop.function_loop(step, max_iter=5, tol=0.1)
    progress, read_backs = [], []
    loop.on_progress.append(
        lambda it, max_iter, objective: progress.append((it, max_iter, objective))
    )
    loop.on_read_back.append(lambda state: read_backs.append(state.n_iter))
    loop.run_until(5)
    assert loop.converged and loop.n_iter == 4
    assert loop.objectives == [10.0, 9.0, 8.0, 7.0]
    assert loop.objectives_after == [9.5, 8.6, 7.7, 6.95]
    assert progress == [(1, 5, 10.0), (2, 5, 9.0), (3, 5, 8.0), (4, 5, 7.0)]
    assert read_backs == [1, 2, 3, 4]
    loop.run_until(5)  # converged: nothing more
    assert loop.n_iter == 4


def test_function_loop_without_tol_runs_max_iter():
    loop = _loop.function_loop(lambda i: (1.0 / (i + 1), None), max_iter=7, tol=None)
    loop.run_until(3)
    assert loop.n_iter == 3
    loop.run_until(100)  # capped at max_iter
    assert loop.n_iter == 7 and not loop.converged and loop.objectives_after == []


def test_step_is_chosen_once_from_the_backend():
    assert _loop.step_for(numpy_backend()) is minibatch_step


def test_device_loop_reports_at_its_read_back_cadence():
    torch = pytest.importorskip("torch")
    from mbkkm._core import _pool

    rng = np.random.RandomState(0)
    X = torch.from_numpy(rng.rand(600, 4))
    kern = resolve_kernel("rbf", gamma=0.5)
    plan = rng.randint(0, 600, (40, 50))
    cfg = StepConfig(kern, LEARNING_RATES["adaptive"], tau=20, renormalize=True, read_every=8)
    loop = _loop.fit_loop(init_state(X[:3].clone(), kern), X, plan, rng, cfg)
    assert _loop.step_for(get_backend(X)) is _pool.step_windows
    progress = []
    loop.on_progress.append(lambda it, max_iter, objective: progress.append(it))
    loop.run_until(40)
    assert loop.n_iter == 40 and len(loop.objectives) == 40
    assert progress[-1] == 40
    steps = np.diff([0, *progress])
    assert steps.max() <= 8 and set(steps[:3]) <= {1, 2, 4}  # 1, 2, 4, ..., 8
