"""Learning-rate registry.

A learning rate maps the batch counts to the per-cluster step alpha_j in
C_j <- (1 - alpha_j) C_j + alpha_j cm(B_j).

- ``"adaptive"``: the paper's beta rate (Schwartzman 2023), alpha_j = sqrt(b_j / b).
- ``"classic"``: scikit-learn's MiniBatchKMeans rate, alpha_j = b_j / N_j with N_j the
  running count of points assigned to cluster j, this batch included (N_j starts at
  0, so the first update that reaches a cluster has alpha_j = 1).

Clusters with b_j = 0 get alpha_j = 0: their center is kept as it is.

References
----------
R. Schwartzman. "Mini-batch k-means terminates within O(d/epsilon) iterations."
ICLR 2023.
D. Sculley. "Web-scale k-means clustering." WWW 2010.
"""

from __future__ import annotations

import numpy as np


def adaptive_rate(batch_counts, batch_total, running_counts):
    """alpha_j = sqrt(b_j / b). ``running_counts`` is updated in place (kept for resumption)."""
    running_counts += batch_counts
    return np.sqrt(batch_counts / batch_total)


def classic_rate(batch_counts, batch_total, running_counts):
    """alpha_j = b_j / N_j, N_j += b_j first (in place)."""
    running_counts += batch_counts
    alpha = np.zeros_like(running_counts, dtype=np.float64)
    nz = running_counts > 0
    alpha[nz] = batch_counts[nz] / running_counts[nz]
    return alpha


LEARNING_RATES = {
    "adaptive": adaptive_rate,
    "classic": classic_rate,
}
