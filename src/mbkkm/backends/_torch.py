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
        return torch.from_numpy(np.empty(0, dtype=dtype)).dtype  # numpy's dtype in torch

    def asarray(self, a, dtype=None):
        """A host array (or tensor) -> a tensor on this device."""
        if not isinstance(a, torch.Tensor):
            a = np.ascontiguousarray(a)
            if a.flags.writeable:
                a = torch.from_numpy(a)
            else:  # a memory-mapped file: shared as it is; mbkkm never writes its inputs
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", "The given NumPy array is not writable")
                    a = torch.from_numpy(a)
        return a.to(device=self.device, dtype=self._dtype(dtype))

    def to_numpy(self, x):
        """A tensor -> a host numpy array (one device-to-host copy)."""
        return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)

    def index(self, idx):
        """Host integer indices -> an int64 tensor on this device (for gathers); a
        tensor is used as it is."""
        return idx if isinstance(idx, torch.Tensor) else self.asarray(idx, dtype=np.int64)

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
        # the sums stay on the device (no read-back a chunk), added in the same order
        ss = torch.zeros((), dtype=torch.float64, device=self.device)
        step = 65536
        s = torch.zeros(X.shape[1], dtype=torch.float64, device=self.device)
        for start in range(0, X.shape[0], step):
            chunk = X[start : start + step].to(torch.float64)
            s += chunk.sum(0) if w is None else w[start : start + step] @ chunk
        mean = s / total
        for start in range(0, X.shape[0], step):
            chunk = X[start : start + step].to(torch.float64) - mean
            sq = (chunk * chunk).sum(1)
            ss += sq.sum() if w is None else w[start : start + step] @ sq
        return 2.0 * float(ss) / total

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


class HostRowStream:
    """A labelling pass over host rows on a torch device, chunk by chunk.

    Host rows X (a numpy array or memmap, of any float dtype) go to the device one
    chunk at a time and each chunk's results come back into host arrays, so that
    the device holds two chunks whatever n. On CUDA the chunks travel through two
    pinned (page-locked) buffers on a copy stream, so that the upload of the next
    chunk overlaps the work on this one; the results are copied back on the compute
    stream, behind the work, into two pinned output buffers that the host empties
    two chunks later. On the CPU a chunk is X's rows themselves (or their cast) and
    the results are written out at once.

    For each chunk in order, ``rows(start, stop)`` gives the chunk on the device in
    ``dtype``, then ``results(start, *outputs)`` takes its per-row results (tensors
    of ``stop - start`` rows); ``finish()`` returns the host arrays of n rows.
    """

    def __init__(self, device, X, chunk_rows, dtype):
        self.device = torch.device(device)
        self.X = X
        self.n = X.shape[0]
        self.dtype = dtype
        self.cuda = self.device.type == "cuda"
        self.chunk = (max(1, min(chunk_rows, self.n)), *X.shape[1:])
        self.out = None  # the host results, allocated at the first chunk's
        if not self.cuda:  # one buffer, for the chunks that need a cast or a copy
            self.host = [torch.empty(self.chunk, dtype=dtype)]
            return
        self.host = [torch.empty(self.chunk, dtype=dtype, pin_memory=True) for _ in range(2)]
        self.dev = [torch.empty(self.chunk, dtype=dtype, device=self.device) for _ in range(2)]
        self.copier = torch.cuda.Stream(self.device)
        self.uploaded = [torch.cuda.Event(), torch.cuda.Event()]  # the input left the host
        self.used = [torch.cuda.Event(), torch.cuda.Event()]  # the work on the input is done
        self.back = [torch.cuda.Event(), torch.cuda.Event()]  # the results reached the host
        self.pinned_out = None  # per slot, one pinned buffer per result
        self.pending = [None, None]  # per slot, the start of the chunk whose results wait
        self.slot = 0

    def rows(self, start, stop):
        """The chunk X[start:stop] on the device."""
        part = self.X[start:stop]
        r = part.shape[0]
        if not self.cuda:
            same = part.dtype == np.dtype(str(self.dtype).removeprefix("torch."))
            if same and part.flags.c_contiguous and part.flags.writeable:
                return torch.from_numpy(part)  # the rows themselves
            np.copyto(self.host[0][:r].numpy(), part, casting="unsafe")
            return self.host[0][:r]
        s = self.slot
        self.uploaded[s].synchronize()  # the slot's last upload has left its pinned buffer
        np.copyto(self.host[s][:r].numpy(), part, casting="unsafe")
        with torch.cuda.stream(self.copier):
            self.copier.wait_event(self.used[s])  # the work on the slot's last chunk is done
            self.dev[s][:r].copy_(self.host[s][:r], non_blocking=True)
            self.uploaded[s].record(self.copier)
        torch.cuda.current_stream(self.device).wait_event(self.uploaded[s])
        return self.dev[s][:r]

    def results(self, start, *outputs):
        """Take the per-row results of the chunk that starts at ``start``."""
        if self.out is None:
            self.out = [
                np.empty((self.n, *o.shape[1:]), dtype=str(o.dtype).removeprefix("torch."))
                for o in outputs
            ]
            if self.cuda:
                self.pinned_out = [
                    [torch.empty((self.chunk[0], *o.shape[1:]), dtype=o.dtype, pin_memory=True)
                     for o in outputs]
                    for _ in range(2)
                ]  # fmt: skip
        if not self.cuda:
            for host, o in zip(self.out, outputs):
                host[start : start + o.shape[0]] = o.numpy()
            return
        s = self.slot
        self._empty(s)  # the results of the chunk before last, which used this slot
        compute = torch.cuda.current_stream(self.device)
        for pinned, o in zip(self.pinned_out[s], outputs):
            pinned[: o.shape[0]].copy_(o, non_blocking=True)
        self.back[s].record(compute)
        self.used[s].record(compute)
        self.pending[s] = (start, outputs[0].shape[0])
        self.slot = 1 - s

    def _empty(self, s):
        """Copy the slot's waiting results into the host arrays."""
        if self.pending[s] is None:
            return
        start, r = self.pending[s]
        self.back[s].synchronize()
        for host, pinned in zip(self.out, self.pinned_out[s]):
            host[start : start + r] = pinned[:r].numpy()
        self.pending[s] = None

    def finish(self):
        """The host arrays of the results (None before any chunk)."""
        if self.cuda:
            self._empty(self.slot)  # the older of the two
            self._empty(1 - self.slot)
        return self.out
