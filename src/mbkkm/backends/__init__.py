"""The one narrow door between the core and the array libraries (numpy, torch).

The core (:mod:`mbkkm._core`) is written once; every array operation whose
implementation depends on the library goes through a *backend* object ``nx``:

============================  =================================================
``asarray / to_numpy``        host array -> backend array, and back (one copy)
``index``                     host integer indices -> indices the backend gathers with
``upload_indices / _floats``  several host arrays -> device arrays in one copy
``empty / copy``              buffers
``float_dtype``               the floating dtype of items (None: not floats)
``csr_matmul``                a CSR matrix times a dense one (segment sums: the
                              block sums Q and centre products P of an iteration)
``distances_T``               D = K(x, x) - 2 P + c, in place, (k, n)
``take``                      gathers along an axis
``argmin_min / clip_min_``    argmin and minimum along an axis, in-place clip
============================  =================================================

The host-planned mini-batch step (:mod:`mbkkm._core._windows`) runs on numpy only
and writes its bookkeeping in numpy directly; it uses the numpy backend for the
kernel, the products above and ``new_support`` (dense or CSR rows). On torch the
iteration is :mod:`mbkkm._core._pool`: the whole iteration in fixed shapes on the
device, written in torch directly (it must be one capturable sequence of device
calls, so it does not go through this door).

The backend is inferred from the arrays (:func:`get_backend`: numpy arrays ->
numpy, torch tensors -> torch on their device, a mix -> ValueError) or chosen by
a device name (:func:`backend_for`). torch is imported only when a tensor or a
torch device is seen: ``import mbkkm`` never imports it.

With numpy the small bookkeeping of the windows (block coefficients, stamps and
starts, the labels of a batch) is planned on the host every iteration; with torch
all of it lives on the device during a fit (:mod:`mbkkm._core._pool`), and the
host reads it back every few iterations.

References
----------
POT ``ot/backend.py`` (``get_backend``); ``opt_einsum/backends``.
"""

from __future__ import annotations

import sys

from ._numpy import NumpyBackend

__all__ = [
    "DEVICES",
    "NumpyBackend",
    "available_devices",
    "backend_for",
    "cuda_available",
    "get_backend",
    "is_tensor",
    "resolve_device",
    "torch_available",
]

_NUMPY = NumpyBackend()

#: Accepted ``device`` values (besides a ``torch.device`` and ``"cuda:N"``).
DEVICES = ("auto", "cpu", "cuda", "torch", "torch-cpu")


def is_tensor(x):
    """Whether x is a torch tensor (without importing torch when it is not loaded)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def torch_available():
    """Whether torch can be imported (imports it)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def cuda_available():
    """Whether torch is installed and sees a CUDA device."""
    return torch_available() and bool(sys.modules["torch"].cuda.is_available())


def _torch_backend(device):
    from ._threads import torch_joins
    from ._torch import TorchBackend

    torch_joins()  # a phase that imported torch itself: the threading policy applies
    return TorchBackend(device)


def get_backend(*arrays):
    """The backend of the given arrays (None entries are ignored).

    Numpy arrays (and anything that is not a tensor: lists, memmaps, scalars) give
    the numpy backend; torch tensors give the torch backend on their device.

    Raises
    ------
    ValueError
        When numpy arrays and tensors are mixed, or tensors live on different devices.
    """
    tensors = [a for a in arrays if is_tensor(a)]
    if not tensors:
        return _NUMPY
    if len(tensors) < sum(a is not None for a in arrays):
        raise ValueError(
            "mixed array libraries: got torch tensors together with numpy arrays (or other "
            "host arrays); pass all inputs as tensors on one device, or all as numpy arrays"
        )
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise ValueError(
            f"tensors on different devices: {sorted(str(d) for d in devices)}; move them to "
            "one device"
        )
    return _torch_backend(devices.pop())


def resolve_device(device):
    """Normalise a ``device`` parameter value, checked against this machine.

    Returns
    -------
    None, "cpu" or a ``torch.device``
        None: follow the input; "cpu": the numpy backend; a torch device: the
        torch backend there (``"torch"`` and ``"torch-cpu"`` mean torch on the CPU,
        ``"auto"`` is ``"cuda"`` when torch sees a GPU, else ``"cpu"``). A CUDA
        device always carries its index (``"cuda"`` is the current device).

    Raises
    ------
    ValueError
        For an unknown name, a CUDA device when torch or CUDA is missing, a CUDA
        index this machine does not have (``"cuda:7"`` with one GPU), or a device
        type other than cpu and cuda (``"mps"``, ``torch.device("meta")``); the
        message lists the devices that exist (:func:`available_devices`).
    """
    if device is None or (isinstance(device, str) and device == "cpu"):
        return device
    if isinstance(device, str):
        if device == "auto":
            return _torch_device("cuda") if cuda_available() else "cpu"
        if device in ("torch", "torch-cpu"):
            return _torch_device("cpu", asked=device)
        if device == "cuda" or device.startswith("cuda:"):
            return _torch_device(device)
        raise ValueError(
            f"device={device!r} is not a known device; expected None, one of "
            f"{list(DEVICES)}, 'cuda:N' or a torch.device (this machine has: "
            f"{available_devices()})"
        )
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(device, torch.device):
        return _torch_device(device)
    raise TypeError(f"device must be None, a string or a torch.device, got {type(device).__name__}")


def available_devices():
    """The devices this machine offers, for messages: "cpu, cuda:0 (NVIDIA H200)".

    "cpu, no CUDA device" without a GPU; says so when torch is not installed.
    """
    if not torch_available():
        return "cpu (numpy; PyTorch is not installed, so no CUDA device)"
    import torch

    if not torch.cuda.is_available():
        return "cpu, no CUDA device"
    names = [
        f"cuda:{i} ({torch.cuda.get_device_name(i)})" for i in range(torch.cuda.device_count())
    ]
    return ", ".join(["cpu", *names])


def _torch_device(name, asked=None):
    """``torch.device(name)`` if this machine has it, with its CUDA index; else a
    ValueError naming ``name`` (the user's value; ``asked``: the user's spelling, where
    it is not ``name``) and listing what exists."""
    if not torch_available():
        raise ValueError(
            f"device={asked or name!r} needs PyTorch, which is not installed: pip install "
            "-e '.[torch]' in a clone of mbkkm (pip install 'mbkkm[torch]' once published); "
            "or compute with numpy: device=None or 'cpu'"
        )
    import torch

    try:
        dev = torch.device(name)
    except RuntimeError as exc:  # "cuda:x"
        raise ValueError(
            f"device={name!r} is not a valid device name ({exc}); this machine has: "
            f"{available_devices()}"
        ) from None
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise ValueError(
            f"device={name!r}: device type {dev.type!r} is not supported (mbkkm runs "
            f"on the CPU and on CUDA devices); this machine has: {available_devices()}"
        )
    if not torch.cuda.is_available():
        raise ValueError(
            f"device={name!r}: no CUDA device is available (torch sees no GPU; this "
            f"machine has: {available_devices()}); use device='auto' to fall back to "
            "the CPU"
        )
    index = torch.cuda.current_device() if dev.index is None else dev.index
    count = torch.cuda.device_count()
    if index >= count:
        raise ValueError(
            f"device={name!r}: there is no CUDA device {index} ({count} visible); this "
            f"machine has: {available_devices()}"
        )
    return torch.device("cuda", index)


def backend_for(device):
    """The backend of a resolved device (see :func:`resolve_device`): numpy for
    None and "cpu", torch for a torch device."""
    if isinstance(device, str):
        device = resolve_device(device)  # "cpu", or a torch device
    return _NUMPY if device is None or isinstance(device, str) else _torch_backend(device)


def same_device(a, b):
    """Whether two torch devices are the same ("cuda" and "cuda:<current>" are)."""
    import torch

    def canon(dev):
        dev = torch.device(dev)
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        return dev

    return canon(a) == canon(b)


def numpy_backend():
    """The (singleton) numpy backend."""
    return _NUMPY
