"""The backend fixture: numpy always, torch on the CPU when importable, CUDA when seen.

Model: POT's ``nx`` fixture (``test/conftest.py``): every backend test runs once per
available backend and is skipped, not failed, where the library is missing.
"""

from __future__ import annotations

import pytest
from _backend_params import BACKEND_PARAMS


@pytest.fixture(params=BACKEND_PARAMS)
def nx(request):
    """A backend of :mod:`mbkkm.backends` (numpy, torch-cpu, torch-cuda)."""
    from mbkkm.backends import backend_for

    return backend_for(request.param)
