"""Shared fixtures: the paper's datasets from ../shared/datasets (never copied here)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

# The ``mbkkm`` command tunes glibc's allocator for its own process
# (mbkkm._files._alloc); CliRunner runs it inside this one, so the suite opts out
# (the allocator's own tests remove the variable where they need the tuning).
os.environ.setdefault("MBKKM_NO_MALLOPT", "1")


#: The environment the session began with (see the fixture below).
_SESSION_ENVIRONMENT = dict(os.environ)


@pytest.fixture(autouse=True)
def _environment_as_the_session_began():
    """After each test, the environment the session began with: a Dask nanny writes
    its workers' variables (``OMP_NUM_THREADS=1``, ``OPENBLAS_NUM_THREADS=1``,
    distributed's ``pre-spawn-environ``) into ``os.environ`` of the process that
    starts it (here, a module's LocalCluster fixture), which would set the thread
    count of a later module's subprocesses."""
    yield
    for key in set(os.environ) - set(_SESSION_ENVIRONMENT):
        if not key.startswith("PYTEST_"):  # pytest's own: it removes them itself
            del os.environ[key]
    for key, value in _SESSION_ENVIRONMENT.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


REPO = Path(__file__).resolve().parents[1]
SHARED_DATASETS = REPO.parent / "shared" / "datasets"


def load_shared(name):
    path = SHARED_DATASETS / f"{name}.npz"
    if not path.exists():
        pytest.skip(f"{path} not found: the paper's datasets live in ../shared/datasets")
    with np.load(path, allow_pickle=False) as f:
        return f["X"], f["y"]


@pytest.fixture(scope="session")
def pendigits():
    """PenDigits standardised per feature, float32, and its labels."""
    X, y = load_shared("pendigits")
    X = X.astype(np.float64)
    X = ((X - X.mean(0)) / X.std(0)).astype(np.float32)
    return X, y
