"""``benchmarks/diagnose_learning_rate.py``: its table recursion against explicit weights."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score
from sklearn.metrics.pairwise import rbf_kernel

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "diagnose_learning_rate.py"
_spec = importlib.util.spec_from_file_location("diagnose_learning_rate", SCRIPT)
diag_lr = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(diag_lr)


def _plain(K, init, batches, rate):
    """The same algorithm with the n x k weight matrix W explicit: C_j = sum_i W_ij phi(x_i)."""
    n, k = K.shape[0], len(init)
    W = np.zeros((n, k))
    W[init, np.arange(k)] = 1.0
    counts = np.zeros(k)
    last = np.zeros(k)
    for B in batches:
        D = np.array(
            [[K[x, x] - 2 * K[x] @ W[:, j] + W[:, j] @ K @ W[:, j] for j in range(k)] for x in B]
        )
        lab = D.argmin(axis=1)
        for j in range(k):
            members = [x for x, lj in zip(B, lab) if lj == j]
            if not members:
                continue
            counts[j] += len(members)
            if rate == "classic" or (rate == "adaptive-first" and counts[j] == len(members)):
                a = len(members) / counts[j]
            else:
                a = np.sqrt(len(members) / len(B))
            last[j] = a
            W[:, j] *= 1 - a
            for x in members:
                W[x, j] += a / len(members)
    return W, last


@pytest.mark.parametrize("rate", diag_lr.RATES)
def test_run_equals_explicit_weights(rate):
    X, y = make_blobs(120, centers=3, cluster_std=1.5, random_state=0)
    K = rbf_kernel(X, gamma=0.1)
    diag = np.diag(K).copy()
    rng = np.random.RandomState(0)
    init = np.array([3, 50, 90])
    batches = [rng.choice(120, size=16, replace=False) for _ in range(7)]
    rows, state = diag_lr.run(K, diag, y, init, batches, rate, every=3)
    W, last = _plain(K, init, batches, rate)
    np.testing.assert_allclose(state["P"], K @ W, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(state["norms"], np.einsum("ij,ik,kj->j", W, K, W), rtol=1e-10)
    np.testing.assert_allclose(state["sumsq"], (W**2).sum(axis=0), rtol=1e-10)
    D = diag[:, None] - 2 * K @ W + np.einsum("ij,ik,kj->j", W, K, W)[None, :]
    np.testing.assert_array_equal(state["labels"], D.argmin(axis=1))
    assert [r[0] for r in rows] == [3, 6, 7]

    def labelled(W):
        norms = np.einsum("ij,ik,kj->j", W, K, W)
        D = diag[:, None] - 2 * K @ W + norms[None, :]
        return D.argmin(axis=1), D.min(axis=1).clip(0).mean()

    W0 = np.zeros((120, 3))
    W0[init, np.arange(3)] = 1.0
    before, _ = labelled(W0)
    for it, objective, churn, live, largest, seed_w, few, alpha, window, ari in rows:
        W, last = _plain(K, init, batches[:it], rate)
        labels, plain_objective = labelled(W)
        windows = [1 / (W[:, j] ** 2).sum() for j in range(3)]
        sizes = np.bincount(labels, minlength=3)
        assert objective == pytest.approx(plain_objective, rel=1e-10)
        assert churn == np.mean(labels != before)
        assert (live, largest) == (np.count_nonzero(sizes), sizes.max() / 120)
        assert seed_w == pytest.approx(np.median(W[init, np.arange(3)]), rel=1e-10, abs=1e-15)
        assert few == sum(w < diag_lr.FEW for w in windows)
        assert alpha == pytest.approx(np.median(last), rel=1e-12)
        assert window == pytest.approx(np.median(windows), rel=1e-10)
        assert ari == pytest.approx(adjusted_rand_score(y, labels))
        before = labels
    # The rows exercise both sides of the few-point count.
    assert rows[0][6] > 0 and rows[-1][6] == 0
