"""The PyTorch backend: the core's array operations on tensors of one device.

Imported only when a tensor or a torch device is seen (``import mbkkm`` never
imports torch). The mini-batch iteration on torch does not go through this door:
it is :mod:`mbkkm._core._pool` (fixed shapes, written in torch directly); the door
serves the labelling pass, full-batch kernel k-means and the setup. Kernel tiles
are the kernel's (``kernel.tile(X, Y)`` on tensors, from the registry's torch
entries); the backend never calls the kernel.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

_NP_TO_TORCH = {
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.int32): torch.int32,
}


@dataclass(frozen=True, repr=False)
class TorchBackend:
    """Array operations of the core on torch tensors of one device (equal backends:
    the same device)."""

    device: torch.device
    name = "torch"
    is_host = False

    def __post_init__(self):
        object.__setattr__(self, "device", torch.device(self.device))

    def __repr__(self):
        return f"TorchBackend({str(self.device)!r})"

    # ------------------------------------------------------------ conversions
    def _dtype(self, dtype):
        if dtype is None or isinstance(dtype, torch.dtype):
            return dtype
        return _NP_TO_TORCH[np.dtype(dtype)]

    def asarray(self, a, dtype=None):
        """A host array (or tensor) -> a tensor on this device."""
        if not isinstance(a, torch.Tensor):
            a = torch.from_numpy(np.ascontiguousarray(a))
        return a.to(device=self.device, dtype=self._dtype(dtype))

    def to_numpy(self, x):
        """A tensor -> a host numpy array (one device-to-host copy)."""
        if isinstance(x, torch.Tensor):
            return x.detach().cpu().numpy()
        return np.asarray(x)

    def index(self, idx):
        """Host integer indices -> an int64 tensor on this device (for gathers); a
        tensor is used as it is."""
        if isinstance(idx, torch.Tensor):
            return idx
        return torch.from_numpy(np.ascontiguousarray(idx, dtype=np.int64)).to(self.device)

    def float_dtype(self, x):
        return x.dtype if x.is_floating_point() else None

    def empty(self, shape, dtype):
        return torch.empty(shape, dtype=self._dtype(dtype), device=self.device)

    def copy(self, x):
        return x.clone()

    # --------------------------------------------------------------- products
    def csr_matmul(self, indptr, indices, data, A):
        """R = M A with M the CSR matrix (indptr, indices, data), shape (len(indptr) - 1, ...).

        ``indices=None``: contiguous segments. One sparse-times-dense product
        (cuSPARSE SpMM on a GPU): a fixed number of launches whatever the number of
        rows of M. Host arrays are uploaded; device tensors are used as they are.
        """
        n_rows = len(indptr) - 1
        crow = self.index(indptr)
        col = (
            torch.arange(A.shape[0], device=self.device) if indices is None else self.index(indices)
        )
        vals = self.asarray(data, dtype=A.dtype)
        if n_rows == 0 or col.shape[0] == 0:
            return torch.zeros((n_rows, A.shape[1]), dtype=A.dtype, device=self.device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
            M = torch.sparse_csr_tensor(crow, col, vals, size=(n_rows, A.shape[0]))
            return M @ A

    def distances_T(self, P, diag, norms):
        """D[j, x] = K(x, x) - 2 P[j, x] + c_j, in place in P, shape (k, n)."""
        P.mul_(-2)
        P.add_(self.asarray(diag, dtype=P.dtype)[None, :])
        P.add_(self.asarray(norms, dtype=P.dtype)[:, None])
        return P

    # ---------------------------------------------------------------- uploads
    def upload_indices(self, *arrays):
        """Host integer arrays -> int64 tensors on this device, in one copy."""
        return self._upload(arrays, np.int64)

    def upload_floats(self, *arrays):
        """Host float arrays -> float64 tensors on this device, in one copy."""
        return self._upload(arrays, np.float64)

    def _upload(self, arrays, dtype):
        flat = [np.asarray(a, dtype=dtype).ravel() for a in arrays]
        packed = torch.from_numpy(np.concatenate(flat) if flat else np.zeros(0, dtype))
        return packed.to(self.device).split([a.size for a in flat])

    # ---------------------------------------------------------------- gathers
    def take(self, x, idx, axis=0):
        return torch.index_select(x, axis, idx)

    def reshape(self, x, shape):
        return x.reshape(shape)

    def astype(self, x, dtype):
        return x.to(self._dtype(dtype))

    # ------------------------------------------------------------- reductions
    def clip_min_(self, x, value):
        return x.clamp_min_(value)

    def argmin_min(self, D, axis=1):
        mind, lab = torch.min(D, dim=axis)
        return lab, mind

    def mean_squared_pairwise_distance(self, X, sample_weight=None):
        """mean_{x,y} ||x - y||^2 = 2 sum_f Var(X[:, f]), in float64 on the device."""
        w = None if sample_weight is None else self.asarray(sample_weight, dtype=torch.float64)
        total = float(X.shape[0] if w is None else w.sum())
        ss = 0.0
        step = 65536
        s = torch.zeros(X.shape[1], dtype=torch.float64, device=self.device)
        for start in range(0, X.shape[0], step):
            chunk = X[start : start + step].to(torch.float64)
            s += chunk.sum(0) if w is None else w[start : start + step] @ chunk
        mean = s / total
        for start in range(0, X.shape[0], step):
            chunk = X[start : start + step].to(torch.float64) - mean
            sq = (chunk * chunk).sum(1)
            ss += float(sq.sum() if w is None else w[start : start + step] @ sq)
        return 2.0 * ss / total

    # ---------------------------------------------- full-batch Lloyd (KernelKMeans)
    def one_hot(self, labels, values, n_columns):
        """(n, n_columns) float64 matrix with ``values[i]`` at (i, labels[i]), 0 elsewhere."""
        A = torch.zeros((labels.shape[0], n_columns), dtype=torch.float64, device=self.device)
        return A.scatter_(1, labels[:, None], values.to(torch.float64)[:, None])

    def flatnonzero(self, mask):
        """Positions of the true entries of a 1-D mask (synchronises with the device)."""
        return torch.nonzero(mask).flatten()

    def largest(self, score, n):
        """Positions of the ``n`` largest entries of ``score``, largest first."""
        return torch.topk(score, n, sorted=True).indices

    def scalars_to_host(self, *values):
        """0-d tensors (or numbers) -> Python floats, in one device-to-host copy."""
        packed = torch.stack(
            [torch.as_tensor(v, dtype=torch.float64, device=self.device) for v in values]
        )
        return tuple(packed.tolist())

    def free_memory(self):
        """Bytes torch can still allocate on this CUDA device; None on the CPU.

        What the driver reports free (``torch.cuda.mem_get_info``) plus what torch's
        caching allocator holds without using it (reserved - allocated), which a
        new tensor reuses: a kernel matrix freed by an earlier fit still counts.
        """
        if self.device.type != "cuda":
            return None
        free = torch.cuda.mem_get_info(self.device)[0]
        cached = torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
        return int(free + max(0, cached))
