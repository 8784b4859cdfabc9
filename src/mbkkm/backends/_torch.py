"""The PyTorch backend: the core's array operations on tensors of one device.

Imported only when a tensor or a torch device is seen (``import mbkkm`` never
imports torch). Kernel tiles are written in place: one GEMM into the output
(``torch.addmm`` folds the row-norm term into it for rbf) and in-place
elementwise maps (``exp_``, ``clamp_max_``, ``tanh_``, ``pow_``); on CPU a
version with temporaries is 2-5x slower.

Supported named kernels: rbf, linear, polynomial, sigmoid, cosine, laplacian.
chi2 is refused (its sum of (x - y)^2 / (x + y) has no GEMM form); callables are
called with tensors and must return a tensor of shape (n_x, n_y) on the same
device.
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import torch

_NP_TO_TORCH = {
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.int32): torch.int32,
}


# --- kernel tiles, in place in ``out`` (shape (n_x, n_y), X's dtype) ---------------


def _mm(X, Y, out):
    if out is None:
        return X @ Y.T
    return torch.mm(X, Y.T, out=out)


def _row_norms_sq(X):
    return torch.einsum("ij,ij->i", X, X)


def _linear(X, Y, out, **_):
    return _mm(X, Y, out)


def _rbf(X, Y, out, *, gamma, **_):
    # -gamma ||x - y||^2 = 2 gamma <x, y> - gamma |y|^2 - gamma |x|^2: the |y|^2 term
    # rides in the GEMM (addmm's input), the rest in place; clipped at 0 (K <= 1).
    gyy = _row_norms_sq(Y).mul_(-gamma)[None, :]
    if out is None:
        out = torch.empty((X.shape[0], Y.shape[0]), dtype=X.dtype, device=X.device)
    torch.addmm(gyy, X, Y.T, beta=1.0, alpha=2.0 * gamma, out=out)
    out.sub_(_row_norms_sq(X).mul_(gamma)[:, None])
    return out.clamp_max_(0).exp_()


def _polynomial(X, Y, out, *, gamma, degree, coef0, **_):
    K = _mm(X, Y, out).mul_(gamma).add_(coef0)
    p = int(degree) if float(degree).is_integer() else float(degree)
    return K.pow_(p)


def _sigmoid(X, Y, out, *, gamma, coef0, **_):
    return _mm(X, Y, out).mul_(gamma).add_(coef0).tanh_()


def _unit_rows(X):
    norms = torch.sqrt(_row_norms_sq(X))
    norms[norms == 0] = 1
    return X / norms[:, None]


def _cosine(X, Y, out, **_):
    return _mm(_unit_rows(X), _unit_rows(Y), out)


def _laplacian(X, Y, out, *, gamma, **_):
    D = torch.cdist(X, Y, p=1)  # (n_x, n_y) L1 distances
    if out is None:
        out = D
    else:
        out.copy_(D)
    return out.mul_(-gamma).exp_()


def _diag_ones(X, **_):
    return torch.ones(X.shape[0], dtype=X.dtype, device=X.device)


def _diag_linear(X, **_):
    return _row_norms_sq(X)


def _diag_polynomial(X, *, gamma, degree, coef0, **_):
    p = int(degree) if float(degree).is_integer() else float(degree)
    return _row_norms_sq(X).mul_(gamma).add_(coef0).pow_(p)


def _diag_sigmoid(X, *, gamma, coef0, **_):
    return _row_norms_sq(X).mul_(gamma).add_(coef0).tanh_()


def _diag_cosine(X, **_):
    return (_row_norms_sq(X) > 0).to(X.dtype)


#: name -> (tile, diag) of the named kernels the torch backend implements.
TORCH_KERNELS = {
    "rbf": (_rbf, _diag_ones),
    "linear": (_linear, _diag_linear),
    "polynomial": (_polynomial, _diag_polynomial),
    "sigmoid": (_sigmoid, _diag_sigmoid),
    "cosine": (_cosine, _diag_cosine),
    "laplacian": (_laplacian, _diag_ones),
}


def check_torch_kernel(kernel):
    """Raise a clear error when the torch backend cannot evaluate ``kernel``."""
    if getattr(kernel, "is_callable", False):
        return
    name = getattr(kernel, "name", None)
    if name not in TORCH_KERNELS:
        raise ValueError(
            f"kernel={name!r} is not available on the torch backend; it supports "
            f"{sorted(TORCH_KERNELS)} and callables. Use device=None or 'cpu' (numpy)"
        )


class TorchBackend:
    """Array operations of the core on torch tensors of one device."""

    name = "torch"

    def __init__(self, device):
        self.device = torch.device(device)
        self.is_host = False

    def __repr__(self):
        return f"TorchBackend({str(self.device)!r})"

    def __eq__(self, other):
        return isinstance(other, TorchBackend) and other.device == self.device

    def __hash__(self):
        return hash(("torch", str(self.device)))

    # ------------------------------------------------------------ conversions
    def is_array(self, x):
        return isinstance(x, torch.Tensor)

    def _dtype(self, dtype):
        if dtype is None or isinstance(dtype, torch.dtype):
            return dtype
        return _NP_TO_TORCH[np.dtype(dtype)]

    def asarray(self, a, dtype=None):
        """A host array (or tensor) -> a tensor on this device."""
        dtype = self._dtype(dtype)
        if isinstance(a, torch.Tensor):
            return a.to(device=self.device, dtype=dtype)
        a = np.asarray(a)
        t = torch.from_numpy(np.ascontiguousarray(a))
        return t.to(device=self.device, dtype=dtype)

    def to_numpy(self, x):
        """A tensor -> a host numpy array (one device-to-host copy)."""
        if isinstance(x, torch.Tensor):
            return x.detach().cpu().numpy()
        return np.asarray(x)

    def index(self, idx):
        """Host integer indices -> an int64 tensor on this device (for gathers)."""
        return torch.from_numpy(np.ascontiguousarray(idx, dtype=np.int64)).to(self.device)

    def float_dtype(self, x):
        return x.dtype if x.is_floating_point() else None

    def empty(self, shape, dtype):
        return torch.empty(shape, dtype=self._dtype(dtype), device=self.device)

    def copy(self, x):
        return x.clone()

    def small_ops(self):
        """Context for many small operations (nothing to change on torch)."""
        return contextlib.nullcontext()

    # ---------------------------------------------------------------- kernels
    def kernel_tile(self, kernel, X, Y, out=None):
        if getattr(kernel, "is_callable", False):
            return self._call_user(kernel, X, Y)
        check_torch_kernel(kernel)
        return TORCH_KERNELS[kernel.name][0](X, Y, out, **kernel.params)

    def tile_dtype(self, kernel, X):
        if getattr(kernel, "is_callable", False):
            return None
        return self.float_dtype(X)

    def kernel_diag(self, kernel, X):
        if getattr(kernel, "is_callable", False):
            out = torch.empty(X.shape[0], dtype=X.dtype, device=X.device)
            for start in range(0, X.shape[0], 256):
                chunk = X[start:start + 256]
                out[start:start + 256] = torch.diagonal(self._call_user(kernel, chunk, chunk))
            return out
        check_torch_kernel(kernel)
        return TORCH_KERNELS[kernel.name][1](X, **kernel.params)

    def _call_user(self, kernel, X, Y):
        try:
            K = kernel._user_func(X, Y, **kernel.params)
        except Exception as exc:
            raise RuntimeError(
                f"the callable kernel raised {type(exc).__name__} on torch tensors: {exc}"
            ) from exc
        if not isinstance(K, torch.Tensor):
            raise TypeError(
                f"kernel: on the torch backend the callable must return a torch tensor, "
                f"got {type(K).__name__}"
            )
        if K.device != X.device:
            raise ValueError(f"kernel: the callable returned a tensor on {K.device}, "
                             f"expected {X.device}")
        if tuple(K.shape) != (X.shape[0], Y.shape[0]):
            raise ValueError(
                f"kernel: the callable must return an array of shape (n_x, n_y) = "
                f"({X.shape[0]}, {Y.shape[0]}), got shape {tuple(K.shape)}"
            )
        if K.is_complex() or K.dtype == torch.bool:
            raise TypeError(f"kernel: the callable returned non-real dtype {K.dtype}")
        K = K.to(X.dtype)
        if not bool(torch.isfinite(K).all()):
            raise ValueError("kernel: the callable returned non-finite values (NaN or inf)")
        return K

    # --------------------------------------------------------------- products
    def csr_matmul(self, indptr, indices, data, A):
        """R = M A with M the CSR matrix (indptr, indices, data), shape (len(indptr) - 1, ...).

        ``indices=None``: contiguous segments. One sparse-times-dense product
        (cuSPARSE SpMM on a GPU): a fixed number of launches whatever the number of
        rows of M. Host arrays are uploaded; device tensors are used as they are.
        """
        n_rows = len(indptr) - 1
        crow = self._index_tensor(indptr)
        col = (torch.arange(A.shape[0], device=self.device) if indices is None
               else self._index_tensor(indices))
        vals = self.asarray(data, dtype=A.dtype)
        if n_rows == 0 or col.shape[0] == 0:
            return torch.zeros((n_rows, A.shape[1]), dtype=A.dtype, device=self.device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
            M = torch.sparse_csr_tensor(crow, col, vals, size=(n_rows, A.shape[0]))
            return M @ A

    def _index_tensor(self, idx):
        if isinstance(idx, torch.Tensor):
            return idx
        return self.index(np.asarray(idx))

    def distances_T(self, P, diag, norms):
        """D[j, x] = K(x, x) - 2 P[j, x] + c_j, in place in P, shape (k, n)."""
        P.mul_(-2)
        P.add_(self.asarray(diag, dtype=P.dtype)[None, :])
        P.add_(self.asarray(norms, dtype=P.dtype)[:, None])
        return P

    def quad_forms_padded(self, H, lam):
        """c_j = lambda_j^T H_j lambda_j for (k, L, L) H and (k, L) lambda, float64 (k,)."""
        return (torch.bmm(H, lam.unsqueeze(2)).squeeze(2) * lam).sum(1)

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
        packed = packed.to(self.device)
        out, pos = [], 0
        for a in flat:
            out.append(packed[pos:pos + a.size])
            pos += a.size
        return tuple(out)

    def argmin_columns_to_host(self, D):
        """Column argmin and minimum of D (k, n) as host arrays: one device-to-host copy."""
        mind, lab = torch.min(D, dim=0)
        both = self.to_numpy(torch.stack([mind.clamp_min_(0), lab.to(D.dtype)]))
        return both[1].astype(np.intp), both[0]

    # ---------------------------------------------------------------- gathers
    def concatenate(self, arrays, axis=0):
        return torch.cat(list(arrays), dim=axis)

    def take(self, x, idx, axis=0):
        return torch.index_select(x, axis, idx)

    def take_block(self, A, rows, cols):
        return A.index_select(0, rows).index_select(1, cols)

    def take_into(self, x, idx, out):
        torch.index_select(x, 0, idx, out=out)
        return out

    def put(self, target, idx, values):
        target[idx] = values
        return target

    def index_add(self, target, idx, values):
        target.index_add_(0, idx, values)
        return target

    def add_rows(self, A, idx, rows):
        A.index_add_(0, idx, rows)
        return A

    def zeros(self, shape, dtype):
        return torch.zeros(shape, dtype=self._dtype(dtype), device=self.device)

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

    def sum64(self, x):
        return float(x.sum(dtype=torch.float64))

    def row_norms_sq(self, X):
        return _row_norms_sq(X)

    def mean_squared_pairwise_distance(self, X, sample_weight=None):
        """mean_{x,y} ||x - y||^2 = 2 sum_f Var(X[:, f]), in float64 on the device."""
        total = float(X.shape[0])
        w = None
        if sample_weight is not None:
            w = self.asarray(sample_weight, dtype=torch.float64)
            total = float(w.sum())
        ss = 0.0
        step = 65536
        s = torch.zeros(X.shape[1], dtype=torch.float64, device=self.device)
        for start in range(0, X.shape[0], step):
            chunk = X[start:start + step].to(torch.float64)
            s += chunk.sum(0) if w is None else w[start:start + step] @ chunk
        mean = s / total
        for start in range(0, X.shape[0], step):
            chunk = X[start:start + step].to(torch.float64) - mean
            sq = torch.einsum("ij,ij->i", chunk, chunk)
            ss += float(sq.sum() if w is None else w[start:start + step] @ sq)
        return 2.0 * ss / total

    def random_indices(self, random_state, n, size):
        """Uniform indices drawn on the host (same draws as numpy), moved here."""
        return self.index(random_state.randint(0, n, size=size))
