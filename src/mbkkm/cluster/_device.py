"""Device handling of the estimators: which backend runs, inputs in, results out.

Rules (documented on ``MiniBatchKernelKMeans(device=...)``):

* ``device=None`` (default) follows the input: numpy arrays run with numpy, torch
  tensors on the device they live on.
* ``"cpu"``: numpy. ``"cuda"``, ``"cuda:N"`` or a ``torch.device``: torch on that
  device. ``"torch"`` / ``"torch-cpu"``: torch on the CPU. ``"auto"``: ``"cuda"``
  when torch sees a GPU, else ``"cpu"``.
* Results follow the input's library: tensors in -> tensors out on their device
  (``labels_``, ``predict``, ``transform``, ``support_vectors_``); numpy in ->
  numpy out, even when the work ran on a GPU.
* dtype: a tensor keeps its dtype (float32 or float64; other dtypes become
  float32); numpy input sent to a CUDA device becomes float32 (pass a float64
  tensor to compute in float64 there); numpy input on the CPU keeps float32 or
  float64, as before.
* A tensor on another device than an explicit ``device``, numpy and tensors mixed
  (X and sample_weight, or fit and predict) raise a ValueError.

The rules that depend on the kind of X live in its adapter (:mod:`._rows`: where
it runs, how it is checked, whether it may be mixed with another library), those
that depend on the kernel's kind in :mod:`._base` (``fit_rows``); this module
holds what they share.
"""

from __future__ import annotations

import numpy as np

from ..backends import get_backend


def device_name(dev):
    return "numpy (cpu)" if dev in (None, "cpu") else str(dev)


def validate_tensor(X, n_features_in=None, owner="", dtype=None):
    """A dense torch tensor X checked as ``validate_data`` checks arrays (against the
    fitted ``n_features_in`` when given; ``owner``: the estimator's name), in the
    fitted model's ``dtype`` when given (a torch dtype; else float32 or float64)."""
    import torch

    X = X.detach()
    if X.layout != torch.strided:
        raise ValueError(
            f"X is a sparse torch tensor (layout {X.layout}): the torch backend has no "
            "sparse path; pass a dense tensor, or a scipy.sparse matrix with device=None "
            "or 'cpu'"
        )
    if X.ndim != 2:
        raise ValueError(f"Expected a 2D tensor for X, got shape {tuple(X.shape)}")
    if X.is_complex():
        raise TypeError(f"X: complex data is not supported, got dtype {X.dtype}")
    if X.device.type == "meta":
        raise ValueError("X is a tensor on the 'meta' device, which holds no values")
    if dtype is not None and X.dtype != dtype:  # a tensor model's (mixing is refused)
        X = X.to(dtype)  # as the fitted model computes (torch does not mix dtypes)
    elif X.dtype not in (torch.float32, torch.float64):
        X = X.to(torch.float32)
    for axis, what in enumerate(("sample(s)", "feature(s)")):
        if X.shape[axis] < 1:
            raise ValueError(
                f"Found array with 0 {what} (shape={tuple(X.shape)}) while a "
                "minimum of 1 is required."
            )
    # min and max propagate NaN and show inf: one reduction, no temporary of X's size
    # (isfinite(X) takes 1.75 times X's memory on CUDA)
    if X.numel() and not bool(torch.isfinite(torch.stack(torch.aminmax(X))).all()):
        raise ValueError("Input X contains NaN or infinity.")
    X = X.contiguous()
    if n_features_in is not None and X.shape[1] != n_features_in:
        raise ValueError(
            f"X has {X.shape[1]} features, but {owner} is expecting "
            f"{n_features_in} features as input."
        )
    return X


def host_shape(X):
    """A stand-in for X in host-side checks that only need its number of rows."""
    return np.empty((X.shape[0], 0))


def host_dtype(X):
    """The numpy dtype matching X's dtype (X a numpy array or a float tensor: the
    name of ``torch.float32`` is "float32" past its prefix)."""
    return np.dtype(str(X.dtype).removeprefix("torch."))


def itemsize(X):
    """Bytes of one of X's values on the host (8 where X has no dtype: index rows)."""
    return host_dtype(X).itemsize if hasattr(X, "dtype") else 8


def convert_output(tensor_io, x):
    """``x`` as a tensor where it is one and the input was (``tensor_io``), else numpy:
    a result on a device backend is read back to the host, a host one (numpy, CSR, a
    lazy Dask array) is left as it is."""
    if x is None or tensor_io:
        return x
    nx = get_backend(x)
    return x if nx.is_host else nx.to_numpy(x)
