"""Markers and parameters of the backend tests (imported by conftest and the tests)."""

from __future__ import annotations

import importlib.util

import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None


def _has_cuda():
    if not HAS_TORCH:
        return False
    import torch

    return bool(torch.cuda.is_available())


needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
needs_cuda = pytest.mark.skipif(not _has_cuda(), reason="no CUDA device")

BACKEND_PARAMS = [
    pytest.param("cpu", id="numpy"),
    pytest.param("torch-cpu", id="torch-cpu", marks=needs_torch),
    pytest.param("cuda", id="torch-cuda", marks=[pytest.mark.gpu, needs_cuda]),
]
