"""
MNIST at scale, with timings
============================

70,000 MNIST images of 784 pixels, 10 clusters. Full-batch kernel k-means
would need the 70,000 x 70,000 kernel matrix (39.2 GB in float64, 19.6 GB in
float32); mini-batch kernel k-means needs one b x m kernel block per iteration
and one pass over the data to label it.

This example is **not executed** by the default documentation build (CI): it
reads the MNIST file (``mnist.npz``, via :func:`mbkkm.datasets.load_dataset`) and
takes about a minute on two cores. ``make docs-full`` runs it. The numbers in
the comments are from the project's 2-core development machine.
"""

# %%
import os
import time
from pathlib import Path

from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from mbkkm import MiniBatchKernelKMeans, MiniBatchKMeans
from mbkkm.datasets import DATASETS, load_dataset
from mbkkm.experiments import kernel_matrix_bytes

# load_dataset looks in data_home, then $MBKKM_DATA, then ~/.cache/mbkkm, and
# downloads from OpenML as a last resort. In the repository the shared copy is at
# ../shared/datasets (next to the clone).
try:
    here = Path(__file__).resolve().parent
except NameError:
    here = Path.cwd()
shared = here.parent.parent / "shared" / "datasets"
data_home = shared if shared.is_dir() else None

t0 = time.perf_counter()
X, y = load_dataset("mnist", data_home=data_home)  # float32, divided by 255
print(f"MNIST {X.shape} {X.dtype}, loaded in {time.perf_counter() - t0:.1f} s")

n = len(X)
print(f"full-batch kernel matrix: {kernel_matrix_bytes(n, 'rbf', {}) / 1e9:.1f} GB")

# %%
# The width is chosen from the data (the default ``gamma=None``, on a 1000-image
# sample); the paper's own width for MNIST, sigma = 5.8301, is
# gamma = 1 / (2 sigma^2) = 0.0147.
sigma = DATASETS["mnist"].sigma
print(f"{os.cpu_count()} cores; the paper's gamma = {1.0 / (2.0 * sigma**2):.4f}")

rows = []
for name, model in [
    (
        "MiniBatchKMeans (non-kernel)",
        MiniBatchKMeans(n_clusters=10, batch_size=1024, max_iter=200, random_state=0),
    ),
    (
        "MiniBatchKernelKMeans tau=50",
        MiniBatchKernelKMeans(n_clusters=10, batch_size=1024, tau=50, max_iter=200, random_state=0),
    ),
    (
        "MiniBatchKernelKMeans tau=200",
        MiniBatchKernelKMeans(
            n_clusters=10, batch_size=1024, tau=200, max_iter=200, random_state=0
        ),
    ),
]:
    model.set_params(compute_labels=False)
    t0 = time.perf_counter()
    model.fit(X)
    fit = time.perf_counter() - t0
    t0 = time.perf_counter()
    labels = model.predict(X)
    label = time.perf_counter() - t0
    ari = adjusted_rand_score(y, labels)
    nmi = normalized_mutual_info_score(y, labels)
    per_iter = 1e3 * fit / model.n_iter_
    support = (
        f"{model.n_support_.sum()} support points, gamma_ = {model.gamma_:.4f}"
        if hasattr(model, "n_support_")
        else ""
    )
    rows.append((name, fit, per_iter, label, ari, nmi))
    print(
        f"{name:30s} fit {fit:5.1f} s ({per_iter:5.1f} ms/iteration), "
        f"labels {label:5.1f} s, ARI {ari:.3f}, NMI {nmi:.3f} {support}"
    )

# %%
# The fit does 200 iterations whatever n is; each costs one kernel block of
# 1024 x m values (m support points, a few thousand), i.e. one GEMM of
# (1024 x 784) by (784 x m). Labelling is one pass of 70,000 x m kernel values,
# in chunks. On the development machine (2 cores, OpenBLAS, float32) the
# truncated fit takes about 5 s (about 23 ms per iteration, plus about 2 s to
# choose the width: ``docs/results/gamma.md``) and the labels a few
# seconds more. Full batch (``KernelKMeans``) with its 18.3 GiB float32 kernel
# matrix took 110.9 s from raw X to labels in a measured run, 11.4 times the
# mini-batch run's 9.8 s in the same session (``benchmarks/README.md``,
# ``benchmarks/headline.csv``). Timings on a machine shared with other jobs are
# several times longer.
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(7, 3), layout="constrained")
names = [r[0] for r in rows]
ax.barh(names, [r[1] for r in rows], label="fit")
ax.barh(names, [r[3] for r in rows], left=[r[1] for r in rows], label="labels (predict)")
ax.invert_yaxis()
ax.set_xlabel("seconds")
ax.legend()
plt.show()
