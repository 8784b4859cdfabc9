"""``benchmarks/diagnose_sparse_windows.py``: its per-cluster table against plain loops."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from mbkkm import MiniBatchKernelKMeans
from mbkkm.kernels import graph_kernel_matrix

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "diagnose_sparse_windows.py"
_spec = importlib.util.spec_from_file_location("diagnose_sparse_windows", SCRIPT)
diag = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(diag)


def test_describe_equals_plain_loops():
    X, y = make_blobs(400, centers=4, cluster_std=2.0, random_state=0)
    K = graph_kernel_matrix("knn", X, n_neighbors=8).tocsr()
    est = MiniBatchKernelKMeans(
        4, batch_size=64, tau=10, max_iter=20, tol=None, random_state=0, kernel="precomputed"
    ).fit(K)
    rows = diag.describe(K, y, est.labels_, est)
    Kd = K.toarray()
    assert [r[1] for r in rows] == sorted(np.bincount(est.labels_, minlength=4), reverse=True)
    for j, size, m, mass, norm, cls, purity, unseen in rows:
        support = [s for s, o in zip(est.support_vectors_, est.support_labels_) if o == j]
        coef = [c for c, o in zip(est.dual_coef_, est.support_labels_) if o == j]
        assert size == sum(1 for lab in est.labels_ if lab == j)
        assert m == len(support)
        assert mass == pytest.approx(sum(coef), abs=1e-12)
        plain = sum(a * b * Kd[s, t] for a, s in zip(coef, support) for b, t in zip(coef, support))
        assert norm == pytest.approx(plain, rel=1e-9, abs=1e-15)
        classes = [y[s] for s in support]
        assert cls == max(set(classes), key=lambda c: (classes.count(c), -c))
        assert purity == classes.count(cls) / len(support)
        members = [i for i in range(len(y)) if y[i] == cls]
        blind = [i for i in members if all(Kd[i, s] == 0 for s in support)]
        assert unseen == len(blind) / len(members)
