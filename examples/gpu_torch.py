"""
On a GPU with PyTorch
=====================

With ``pip install "mbkkm[torch]"``, ``device="cuda"`` runs the same algorithm on
a GPU: numpy in, numpy out. A torch tensor runs on the device it lives on
(tensors in, tensors out). The sampling plan and the initialisation are drawn on
the host from ``random_state``, so the GPU and the CPU models agree up to
rounding.

This example is **not executed** by the documentation build unless PyTorch sees a
CUDA device (``make docs-full`` on a GPU machine); ``benchmarks/bench_gpu.py``
is the full benchmark (MNIST fit and labels, GPU against CPU).
"""

# %%
import time

import numpy as np
from sklearn.metrics import adjusted_rand_score

from mbkkm import MiniBatchKernelKMeans
from mbkkm.backends import cuda_available
from mbkkm.datasets import make_shells

if not cuda_available():
    raise SystemExit("this example needs PyTorch and a CUDA device")

import torch

X, y = make_shells(n_samples=1_000_000, n_features=16, n_shells=3, random_state=0)
params = dict(n_clusters=3, batch_size=1024, tau=200, max_iter=200, random_state=0)

# %%
# numpy in, numpy out, computed on the GPU
for device in ("cpu", "cuda"):
    t0 = time.perf_counter()
    km = MiniBatchKernelKMeans(device=device, **params).fit(X)
    seconds = time.perf_counter() - t0
    print(
        f"{device:5s}: fit + labels {seconds:6.2f} s, "
        f"ARI {adjusted_rand_score(y, km.labels_):.3f}, labels_ is {type(km.labels_).__name__}"
    )

# %%
# A tensor on the GPU: the model's arrays stay there.
Xt = torch.as_tensor(X, device="cuda")
km = MiniBatchKernelKMeans(**params).fit(Xt)
torch.cuda.synchronize()
print(type(km.labels_).__name__, km.labels_.device, km.support_vectors_.device)
km_cpu = MiniBatchKernelKMeans(**params).fit(X)
print("same labels as the numpy run:", np.mean(km.labels_.cpu().numpy() == km_cpu.labels_))
