"""Plain, per-cluster reference of one truncated mini-batch iteration (the oracle).

Written straight from the paper's rule (Algorithm 2 and its truncation), one
cluster at a time, point by point, with every center norm recomputed from the kernel of its window:
slow and obviously right. The fast core (:func:`mbkkm._core.minibatch_step`) must
equal it.
"""

from __future__ import annotations

import numpy as np

from mbkkm._core import batch_rates


class RefWindows:
    """Windows as per-cluster lists: support rows, coefficients, block stamps."""

    def __init__(self, centers):
        k = centers.shape[0]
        self.support = [centers[j : j + 1].copy() for j in range(k)]
        self.coef = [np.ones(1) for _ in range(k)]
        self.block = [np.full(1, -1) for _ in range(k)]
        self.counts = np.zeros(k)
        self.n_steps = 0

    def norms(self, kernel):
        return np.array(
            [
                a @ np.asarray(kernel(S, S), dtype=np.float64) @ a
                for S, a in zip(self.support, self.coef)
            ]
        )

    def distances(self, X, kernel):
        diag = np.asarray(kernel.diag(X), dtype=np.float64)
        c = self.norms(kernel)
        return np.stack(
            [
                diag - 2 * np.asarray(kernel(X, S), dtype=np.float64) @ a + c[j]
                for j, (S, a) in enumerate(zip(self.support, self.coef))
            ],
            axis=1,
        )


def plain_plan(block_cluster, block_size, lam, new_size, alpha, tau, renormalize):
    """The window rule, cluster by cluster, block by block."""
    k = alpha.shape[0]
    keep = np.ones(block_cluster.size, dtype=bool)
    lam_out = np.array(lam, dtype=np.float64)
    grows = np.zeros(k, dtype=bool)
    lam_new = []
    for j in range(k):
        blocks = np.flatnonzero(block_cluster == j)  # oldest first
        if alpha[j] <= 0 or new_size[j] == 0:
            continue
        grows[j] = True
        lam_out[blocks] *= 1 - alpha[j]
        for pos, q in enumerate(blocks):
            newer = new_size[j] + block_size[blocks[pos + 1 :]].sum()
            if alpha[j] >= 1 or (tau is not None and newer >= tau):
                keep[q] = False
        new = alpha[j]
        if renormalize:
            total = lam_out[blocks[keep[blocks]]].sum() + new
            lam_out[blocks] /= total
            new /= total
        lam_new.append(new)
    return keep, lam_out[keep], grows, np.array(lam_new)


def reference_step(ref, Xb, kernel, rate, *, tau, renormalize, batch_weight=None):
    """One iteration on ``ref`` (in place); returns labels, f_B(C_i), f_B(C_{i+1})."""
    k = len(ref.support)
    D = ref.distances(Xb, kernel)
    labels = D.argmin(1)
    mind = np.maximum(D[np.arange(len(labels)), labels], 0)
    objective, bcounts, btotal, alpha = batch_rates(labels, mind, k, rate, ref.counts, batch_weight)
    w = None if batch_weight is None else np.asarray(batch_weight, dtype=np.float64)
    for j in range(k):
        new = np.flatnonzero(labels == j)
        if new.size == 0 or alpha[j] == 0:
            continue
        a_old = ref.coef[j] * (1 - alpha[j])
        a_new = (
            np.full(new.size, alpha[j] / new.size) if w is None else alpha[j] * w[new] / bcounts[j]
        )
        keep = np.ones(a_old.size, dtype=bool)
        for i, stamp in enumerate(ref.block[j]):
            newer = new.size + np.count_nonzero(ref.block[j] > stamp)
            if alpha[j] >= 1 or (tau is not None and newer >= tau):
                keep[i] = False
        coef = np.concatenate([a_old[keep], a_new])
        if renormalize:
            coef /= coef.sum()
        ref.support[j] = np.concatenate([ref.support[j][keep], Xb[new]])
        ref.coef[j] = coef
        ref.block[j] = np.concatenate([ref.block[j][keep], np.full(new.size, ref.n_steps)])
    ref.n_steps += 1
    D2 = ref.distances(Xb, kernel)
    mind2 = np.maximum(D2.min(1), 0)
    after = float(mind2.mean() if w is None else mind2 @ w / btotal)
    return labels, objective, after
