"""resolve_device checks devices against the machine.

CUDA is simulated by monkeypatching ``torch.cuda.is_available``, ``device_count``
and ``get_device_name``: absent CUDA indices, CUDA on a machine without a GPU and
device types other than cpu and cuda give a ValueError that names ``device`` and
lists what exists.
"""

from __future__ import annotations

import numpy as np
import pytest
from _backend_params import needs_torch

from mbkkm import KernelKMeans, MiniBatchKernelKMeans
from mbkkm.backends import available_devices, resolve_device


@pytest.fixture
def one_gpu(monkeypatch):
    """A machine with one simulated GPU, cuda:0 "NVIDIA H200"."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: "NVIDIA H200")
    return torch


@pytest.fixture
def no_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    return torch


@needs_torch
def test_absent_cuda_index(one_gpu):
    torch = one_gpu
    assert available_devices() == "cpu, cuda:0 (NVIDIA H200)"
    assert resolve_device("cuda:0") == torch.device("cuda", 0)
    assert resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device(torch.device("cuda")) == torch.device("cuda", 0)
    for device in ("cuda:7", torch.device("cuda", 1)):
        with pytest.raises(
            ValueError,
            match=r"device=.*cuda.*no CUDA device \d \(1 "
            r"visible\).*cuda:0 \(NVIDIA H200\)",
        ):
            resolve_device(device)


@needs_torch
def test_cuda_without_gpu(no_gpu):
    torch = no_gpu
    assert available_devices() == "cpu, no CUDA device"
    for device in ("cuda", "cuda:0", torch.device("cuda")):
        with pytest.raises(
            ValueError,
            match=r"device=.*no CUDA device is available.*"
            r"this machine has: cpu, no CUDA device",
        ):
            resolve_device(device)
    assert resolve_device("auto") == "cpu"
    X = np.random.RandomState(0).rand(50, 3)
    for est in (KernelKMeans(2, device="cuda"), MiniBatchKernelKMeans(2, device="cuda:1")):
        with pytest.raises(ValueError, match="device='cuda"):
            est.fit(X)


@needs_torch
@pytest.mark.parametrize("name", ["mps", "meta", "xpu"])
def test_unsupported_device_types(one_gpu, name):
    torch = one_gpu
    with pytest.raises(
        ValueError,
        match=rf"device='{name}' is not a known device.*"
        r"cuda:0 \(NVIDIA H200\)",
    ):
        resolve_device(name)
    with pytest.raises(
        ValueError,
        match=rf"device type '{name}' is not supported.*"
        r"cpu, cuda:0 \(NVIDIA H200\)",
    ):
        resolve_device(torch.device(name))


@needs_torch
def test_bad_cuda_name():
    with pytest.raises(ValueError, match="'cuda:x' is not a valid device name"):
        resolve_device("cuda:x")
