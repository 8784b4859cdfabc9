"""The backend fixture ``nx`` and the markers of the backend tests.

``nx`` yields numpy always, torch on the CPU when importable and torch on CUDA
when a GPU is seen (marked ``gpu``), skipping what is missing. Model: POT's ``nx``
fixture. Test modules import it (``from _backend_params import nx_fixture``); it is not
in a conftest.py because a second ``conftest`` module name clashes with the
doctest collection of ``tests/conftest.py``.
"""

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


@pytest.fixture(params=BACKEND_PARAMS, name="nx")
def nx_fixture(request):
    """A backend of :mod:`mbkkm.backends` (numpy, torch-cpu, torch-cuda)."""
    from mbkkm.backends import backend_for

    return backend_for(request.param)
