"""
Dask arrays
===========

:class:`~mbkkm.MiniBatchKernelKMeans` accepts a ``dask.array`` in ``fit``,
``predict``, ``transform`` and ``score``. The whole batch plan is drawn up front
from ``random_state`` and its rows are gathered in one pass over the chunks; the
fit then runs locally on those rows, and labels are computed chunk by chunk. The
same seed gives the same model as on the numpy array. This example uses Dask's
default threaded scheduler; with ``distributed.Client(...)`` created first, the
same code runs on a cluster (see :doc:`dask_remote` and :doc:`../dask`).
"""

# %%
import time

import dask.array as da
import numpy as np
from sklearn.metrics import adjusted_rand_score

from mbkkm import MiniBatchKernelKMeans
from mbkkm.datasets import make_shells

# Concentric shells in 16 dimensions: 3 clusters, 200,000 points in 8 chunks.
X_np, y = make_shells(n_samples=200_000, n_features=16, n_shells=3, noise=0.05, random_state=0)
X = da.from_array(X_np, chunks=(25_000, 16))
print(X)

# %%
# gamma="mean-distance": the width from Dask reductions over all rows (one pass).
# The default, gamma=None, would choose it as gamma="auto" does, on 1000 rows
# gathered from the chunks; on these shells the k-NN graph of such a sample
# joins the shells, and "auto" picks a wide width that slices through them
# (see "What it does not handle" in the width selection's guide).
params = dict(
    n_clusters=3, gamma="mean-distance", batch_size=1024, tau=100, max_iter=50, random_state=0
)

t0 = time.perf_counter()
km = MiniBatchKernelKMeans(**params).fit(X)
print(f"fit on the Dask array: {time.perf_counter() - t0:.2f} s")
print("labels_:", type(km.labels_).__name__, km.labels_.shape)

labels = km.predict(X)  # lazy: one task per chunk
labels = labels.compute()
print(f"ARI against the shells: {adjusted_rand_score(y, labels):.3f}")

# %%
# The same seed on the numpy array gives the same model:
km_np = MiniBatchKernelKMeans(**params).fit(X_np)
print("same support points:", np.array_equal(km.support_vectors_, km_np.support_vectors_))
print("same labels:", np.array_equal(labels, km_np.labels_))
